/* fuzz_npy.c -- libFuzzer target: attn_npy_parse on arbitrary bytes. A parse
 * either fails with a status and a message, or gives a tensor whose every
 * byte can be read; then it is written back out and parsed again, and must
 * come back identical. The same bytes as a file go through the readers the
 * command uses, attn_npy_read (which reads the header before the data) and
 * attn_npy_read_i64 (--cu-seqlens-q/-k): the first agrees with the parse. */
#include "attn.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bytes as a file, read by attn_npy_read and attn_npy_read_i64:
 * attn_npy_read fails or succeeds as the parse did (status `parsed`,
 * tensor *t), with the same tensor. */
static void read_as_file(const unsigned char *data, size_t size, attn_status parsed, const attn_tensor *t) {
    char path[] = "/tmp/attn_fuzz_npy_in_" "XX" "XX" "XX"; /* a mkstemp template */
    int fd = mkstemp(path);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "wb");
    bool written = f && fwrite(data, 1, size, f) == size;
    if (f ? fclose(f) != 0 : close(fd) != 0) written = false;
    attn_tensor back;
    attn_error err;
    if (written) {
        attn_status st = attn_npy_read(&back, path, &err);
        if (st != parsed || (st && err.message[0] == 0)) abort();
        if (!st) {
            size_t bytes = (size_t)attn_tensor_numel(t) * attn_dtype_size(t->dtype);
            if (back.dtype != t->dtype || back.rank != t->rank ||
                memcmp(back.shape, t->shape, sizeof(int64_t) * (size_t)t->rank) != 0 ||
                memcmp(back.data, t->data, bytes) != 0)
                abort();
            attn_npy_free(&back);
        }
        int64_t *values, count;
        st = attn_npy_read_i64(&values, &count, path, &err);
        if (st && (err.message[0] == 0 || values || count)) abort();
        /* integers are what attn_npy_parse refuses, as unsupported */
        if (!st && (parsed != ATTN_ERR_NPY_UNSUPPORTED || count < 0 || (uint64_t)count * 4 > size || !values)) abort();
        volatile int64_t sink = 0;
        for (int64_t i = 0; !st && i < count; i++) sink ^= values[i];
        (void)sink;
        free(values);
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    attn_tensor t;
    attn_error err;
    /* The header alone (what MPI-IO readers use), on every prefix length's
     * worth of the same bytes: it agrees with the whole parse on the layout. */
    attn_npy_info info = {.struct_size = sizeof info}, head = {.struct_size = sizeof head};
    attn_status hs = attn_npy_header(&info, data, size, size, &err);
    if (hs != ATTN_OK && err.message[0] == 0) abort();
    /* big-endian data: read whole, but not laid out in place (the info has no byte order) */
    bool big_endian = hs == ATTN_ERR_NPY_UNSUPPORTED && strstr(err.message, "big-endian");
    if (hs == ATTN_OK && (info.data_offset > size || info.data_bytes != size - info.data_offset)) abort();
    if (hs == ATTN_OK && attn_npy_header(&head, data, info.data_offset, size, NULL) != ATTN_OK) abort();
    attn_status parsed = attn_npy_parse(&t, data, size, &err);
    if (parsed != ATTN_OK && err.message[0] == 0) abort(); /* a failure always says why */
    read_as_file(data, size, parsed, &t);
    if (parsed != ATTN_OK) return 0;
    if (!big_endian &&
        (hs != ATTN_OK || info.rank != t.rank || memcmp(info.shape, t.shape, sizeof(int64_t) * (size_t)t.rank) != 0))
        abort(); /* the header parse accepts exactly what the whole parse accepts */
    int64_t n = attn_tensor_numel(&t);
    size_t bytes = (size_t)n * attn_dtype_size(t.dtype);
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < bytes; i++) sink ^= ((const unsigned char *)t.data)[i];
    (void)sink;
    /* Round trip through a file. */
    char path[] = "/tmp/attn_fuzz_npy_" "XX" "XX" "XX"; /* a mkstemp template */
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        attn_tensor back;
        if (attn_npy_write(path, &t, NULL) != ATTN_OK || attn_npy_read(&back, path, NULL) != ATTN_OK)
            abort();
        if (back.dtype != t.dtype || back.rank != t.rank ||
            memcmp(back.shape, t.shape, sizeof(int64_t) * (size_t)t.rank) != 0 ||
            memcmp(back.data, t.data, bytes) != 0)
            abort();
        attn_npy_free(&back);
        unlink(path);
    }
    attn_npy_free(&t);
    return 0;
}
