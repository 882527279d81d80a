/* abi_0_3.c -- release 0.3's attn_npy_header, for binaries built against
 * 0.3.0's attn.h (attn.h: "Versioned structs").
 *
 * 0.3's attn_npy_info had no struct_size, so a library that appended a
 * field to it would write past a 0.3 caller's variable. 0.4's header names
 * attn_npy_header_0_4 (its macro attn_npy_header stands in front), whose
 * struct begins with struct_size; a binary built against 0.3 still calls
 * the symbol attn_npy_header, which is this: it takes 0.3's struct, frozen
 * below field for field, asks today's function, and writes back only 0.3's
 * bytes. Uses only the public API, like src/teach/. */
#include "attn.h"

#include <stddef.h>
#include <string.h>

#undef attn_npy_header

/* 0.3.0's struct (include/attn.h at release 0.3.0). */
typedef struct npy_info_0_3 {
    attn_dtype dtype;
    int rank;
    int64_t shape[5]; /* 0.3's ATTN_MAX_RANK */
    int fortran_order;
    size_t data_offset, data_bytes;
} npy_info_0_3;

ATTN_API attn_status attn_npy_header(npy_info_0_3 *info, const void *bytes, size_t size, uint64_t file_size,
                                     attn_error *err);
attn_status attn_npy_header(npy_info_0_3 *info, const void *bytes, size_t size, uint64_t file_size,
                            attn_error *err) {
    if (!info) return attn_npy_header_0_4(NULL, bytes, size, file_size, err);
    attn_npy_info now = {.struct_size = sizeof now};
    attn_status st = attn_npy_header_0_4(&now, bytes, size, file_size, err);
    npy_info_0_3 old = {now.dtype, now.rank, {0}, now.fortran_order, now.data_offset, now.data_bytes};
    memcpy(old.shape, now.shape, sizeof old.shape);
    *info = old;
    return st;
}
