/* fuzz_safetensors.c -- libFuzzer target: the command's safetensors reader
 * (cli/safetensors.c) on arbitrary bytes, as a file's. A parse either fails
 * with a reason, or gives tensors that st_find finds by name, inside the
 * file, and whose every byte can be read when loaded. A header given
 * short of the bytes st_head_size asks for is refused. */
#include "../../cli/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct memory {
    const unsigned char *data;
    size_t size;
} memory;

static int read_memory(void *ctx, void *dst, uint64_t offset, size_t n, char *msg, size_t msg_size) {
    const memory *m = ctx;
    if (offset > m->size || n > m->size - offset) abort(); /* st_parse let a tensor past the file's end */
    memcpy(dst, m->data + offset, n);
    (void)msg, (void)msg_size;
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    st_file f;
    char msg[512] = "";
    /* the header as a reader gets it: the bytes st_head_size asks for */
    size_t head = size < 8 ? size : (size_t)st_head_size(data, size);
    if (head > size) abort();
    /* fewer of the header's bytes than st_head_size asks for are refused, with a reason */
    if (head > 8 && (!st_parse(&f, data, head - 1, size, msg, sizeof msg) || msg[0] == 0 || f.count || f.tensors)) abort();
    msg[0] = 0;
    if (st_parse(&f, data, head, size, msg, sizeof msg)) {
        if (msg[0] == 0) abort(); /* a failure always says why */
        return 0;
    }
    memory m = {data, size};
    volatile unsigned char sink = 0;
    for (int i = 0; i < f.count; i++) {
        st_tensor *t = &f.tensors[i];
        if (st_find(&f, t->name) != t) abort();
        if (t->offset < head || t->offset > size || t->bytes > size - t->offset) abort();
        if (!t->readable) { /* a dtype or a rank attn does not read: named, not loaded, and why said */
            msg[0] = 0;
            if (!st_load(t, read_memory, &m, msg, sizeof msg) || msg[0] == 0 || t->t.data) abort();
            continue;
        }
        if (st_load(t, read_memory, &m, msg, sizeof msg)) abort();
        size_t bytes = (size_t)attn_tensor_numel(&t->t) * attn_dtype_size(t->t.dtype);
        if (bytes != t->bytes) abort();
        for (size_t b = 0; b < bytes; b++) sink ^= ((const unsigned char *)t->t.data)[b];
    }
    (void)sink;
    st_free(&f);
    return 0;
}
