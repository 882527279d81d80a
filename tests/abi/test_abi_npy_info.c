/* test_abi_npy_info.c -- attn_npy_header's struct, which the library fills,
 * across releases, under ASan+UBSan. A binary built against 0.3.0's attn.h
 * calls the symbol attn_npy_header with 0.3's struct, which had no
 * struct_size (copied below from that header); today's header calls
 * attn_npy_header_0_4, which writes only the caller's struct_size bytes.
 * Each struct lives in a heap block of exactly its size, so a library that
 * wrote past it stops with a heap-buffer-overflow. */
#include "attn.h"
#include "../check.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* 0.3.0's struct and call, as a binary built then knows them. */
typedef struct npy_info_0_3 {
    attn_dtype dtype;
    int rank;
    int64_t shape[5];
    int fortran_order;
    size_t data_offset, data_bytes;
} npy_info_0_3;
#undef attn_npy_header
attn_status attn_npy_header(npy_info_0_3 *info, const void *bytes, size_t size, uint64_t file_size, attn_error *err);

int main(void) {
    attn_error err;
    unsigned char head[ATTN_NPY_HEADER_MAX];
    size_t len = 0;
    const int64_t shape[3] = {2, 3, 5};
    attn_status st = attn_npy_format_header(head, sizeof head, &len, ATTN_F16, 3, shape, &err);
    check(st == ATTN_OK, "format_header", "%s", err.message);
    const uint64_t file = len + 2 * 3 * 5 * 2;

    npy_info_0_3 *old = malloc(sizeof *old);
    memset(old, 0xa5, sizeof *old);
    st = attn_npy_header(old, head, len, file, &err);
    check(st == ATTN_OK && old->dtype == ATTN_F16 && old->rank == 3 && old->shape[0] == 2 && old->shape[1] == 3 &&
              old->shape[2] == 5 && !old->fortran_order && old->data_offset == len && old->data_bytes == 60,
          "release_0_3_struct_filled_to_its_size", "status %d: %s", (int)st, st ? err.message : "fields differ");
    st = attn_npy_header(old, head, len, file - 1, &err);
    check(st == ATTN_ERR_NPY_TRUNCATED && old->rank == 0 && old->data_bytes == 0,
          "release_0_3_struct_zeroed_on_failure", "status %d", (int)st);
    check(attn_npy_header(NULL, head, len, file, &err) == ATTN_ERR_NULL, "release_0_3_null_info", "%s", err.message);
    free(old);

    /* Today's struct, whole and as a shorter (older) prefix. */
    attn_npy_info *now = malloc(sizeof *now);
    now->struct_size = sizeof *now;
    st = attn_npy_header_0_4(now, head, len, file, &err);
    check(st == ATTN_OK && now->struct_size == sizeof *now && now->rank == 3 && now->shape[2] == 5 &&
              now->data_bytes == 60, "struct_filled", "status %d: %s", (int)st, err.message);
    free(now);
    const size_t prefix = offsetof(attn_npy_info, shape);
    attn_npy_info *part = malloc(prefix);
    part->struct_size = prefix;
    st = attn_npy_header_0_4(part, head, len, file, &err);
    check(st == ATTN_OK && part->struct_size == prefix && part->dtype == ATTN_F16 && part->rank == 3,
          "struct_written_to_its_struct_size", "status %d: %s", (int)st, err.message);
    free(part);

    /* A struct_size refused leaves every byte as it was. */
    attn_npy_info info, before;
    memset(&info, 0xa5, sizeof info);
    info.struct_size = 0;
    before = info;
    st = attn_npy_header_0_4(&info, head, len, file, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "struct_size") && !memcmp(&info, &before, sizeof info),
          "zero_struct_size_refused_nothing_written", "status %d: %s", (int)st, err.message);
    info.struct_size = sizeof info + 8;
    before = info;
    st = attn_npy_header_0_4(&info, head, len, file, &err);
    check(st == ATTN_ERR_OPTION && !memcmp(&info, &before, sizeof info), "newer_struct_size_refused_nothing_written",
          "status %d: %s", (int)st, err.message);
    /* Any other failure: every field zero but struct_size. */
    attn_npy_info zero = {.struct_size = sizeof zero};
    info.struct_size = sizeof info;
    st = attn_npy_header_0_4(&info, head, 4, file, &err);
    check(st != ATTN_OK && !memcmp(&info, &zero, sizeof info), "refused_header_zeroes_the_rest", "status %d rank %d",
          (int)st, info.rank);
    memset(&info, 0xa5, sizeof info);
    info.struct_size = sizeof info;
    st = attn_npy_header_0_4(&info, NULL, len, file, &err);
    check(st == ATTN_ERR_NULL && !memcmp(&info, &zero, sizeof info), "null_bytes_zeroes_the_rest", "status %d: %s",
          (int)st, err.message);
    attn_shutdown();
    return n_failed ? 1 : 0;
}
