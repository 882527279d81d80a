/* fuzz_safetensors.c -- libFuzzer target: the command's safetensors reader
 * (cli/safetensors.c) on arbitrary bytes. A parse either fails with a reason,
 * or gives tensors that st_find finds by name, and whose every byte can be
 * read when loaded. */
#include "../../cli/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    st_file f;
    char msg[512] = "";
    if (st_parse(&f, data, size, msg, sizeof msg)) {
        if (msg[0] == 0) abort(); /* a failure always says why */
        return 0;
    }
    volatile unsigned char sink = 0;
    for (int i = 0; i < f.count; i++) {
        const attn_tensor *t = &f.tensors[i].t;
        if (st_find(&f, f.tensors[i].name) != &f.tensors[i]) abort();
        if (!f.tensors[i].loaded) continue; /* a dtype attn does not read: named, not copied */
        size_t bytes = (size_t)attn_tensor_numel(t) * attn_dtype_size(t->dtype);
        for (size_t b = 0; b < bytes; b++) sink ^= ((const unsigned char *)t->data)[b];
    }
    (void)sink;
    st_free(&f);
    return 0;
}
