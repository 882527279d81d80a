/* sdpa_strided.c -- test helper: runs attn_sdpa on non-contiguous views.
 *
 *   sdpa_strided Q.npy K.npy V.npy OUT.npy [MASK.npy|-] [causal 0|1|2] [scale|-]
 *
 * Every input and the output are re-laid out before the call: heads and rows
 * swapped in memory ((B, L, H, E) storage seen as (B, H, L, E)), a gap after
 * every element (all strides doubled), and the rows stored in reverse (a
 * negative stride). oracle.py compares the result with PyTorch, so this
 * proves the strided path through the C API against an independent oracle. */
#include "attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A strided copy of t in a fresh buffer (*owned is what to free). */
static attn_tensor strided_copy(const attn_tensor *t, void **owned) {
    int r = t->rank;
    int order[ATTN_MAX_RANK]; /* physical order of the logical dimensions */
    for (int d = 0; d < r; d++) order[d] = d;
    if (r >= 3) order[r - 3] = r - 2, order[r - 2] = r - 3;
    int64_t phys = 2, strides[ATTN_MAX_RANK];
    for (int p = r - 1; p >= 0; p--) {
        strides[order[p]] = phys;
        phys *= t->shape[order[p]];
    }
    size_t es = attn_dtype_size(t->dtype);
    char *buf = calloc((size_t)phys + 1, es);
    *owned = buf;
    attn_tensor v = *t;
    v.data = buf;
    memcpy(v.strides, strides, sizeof strides);
    if (r >= 2) { /* rows reversed: start at the last row, step backwards */
        v.data = buf + (size_t)((t->shape[r - 2] - 1) * strides[r - 2]) * es;
        v.strides[r - 2] = -strides[r - 2];
    }
    int64_t n = attn_tensor_numel(t), idx[ATTN_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += idx[d] * v.strides[d];
        memcpy((char *)v.data + off * (int64_t)es, (char *)t->data + i * (int64_t)es, es);
        for (int d = r - 1; d >= 0 && ++idx[d] == t->shape[d]; d--) idx[d] = 0;
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: sdpa_strided Q K V OUT [MASK|-] [causal] [scale|-]\n");
        return 2;
    }
    attn_tensor in[4] = {{0}};
    attn_error err;
    int n_in = argc > 5 && strcmp(argv[5], "-") != 0 ? 4 : 3;
    for (int i = 0; i < n_in; i++) {
        if (attn_npy_read(&in[i], argv[i < 3 ? i + 1 : 5], &err)) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
    }
    void *owned[5];
    attn_tensor view[4];
    for (int i = 0; i < n_in; i++) view[i] = strided_copy(&in[i], &owned[i]);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = n_in == 4 ? &view[3] : NULL;
    o.causal = argc > 6 ? (attn_causal)atoi(argv[6]) : ATTN_CAUSAL_NONE;
    if (argc > 7 && strcmp(argv[7], "-") != 0) o.has_scale = 1, o.scale = atof(argv[7]);

    int rank;
    int64_t shape[ATTN_MAX_RANK];
    attn_tensor out;
    if (attn_sdpa_shapes(&rank, shape, NULL, &view[0], &view[1], &view[2], &o, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    attn_tensor_init(&out, NULL, in[0].dtype, rank, shape, NULL, NULL);
    out.data = calloc((size_t)attn_tensor_numel(&out), attn_dtype_size(out.dtype));
    attn_tensor out_view = strided_copy(&out, &owned[4]);
    free(out.data);
    if (attn_sdpa(&out_view, NULL, NULL, &view[0], &view[1], &view[2], &o, &err) ||
        attn_npy_write(argv[4], &out_view, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    for (int i = 0; i < n_in; i++) free(owned[i]), attn_npy_free(&in[i]);
    free(owned[4]);
    return 0;
}
