/* dropout_mask.c -- attn_sdpa_dropout_mask: the dropout mask attn_sdpa and
 * attn_sdpa_backward use, written out, so that callers and tests can check
 * it (kernels/dropout.c decides each element). */
#include "sdpa/sdpa.h"
#include "kernels/dropout.h"

#include <string.h>

/* keep: bool, shaped like the weights, writable, offsets that fit. */
static attn_status check_keep(const attn_tensor *keep, int rank, const int64_t *shape, attn_error *err) {
    if (!keep || !keep->data) return attn_fail(err, ATTN_ERR_NULL, "keep is NULL");
    if (keep->dtype != ATTN_BOOL)
        return attn_fail(err, ATTN_ERR_DTYPE, "keep is %s; it must be bool", attn_dtype_name(keep->dtype));
    if (keep->rank != rank || memcmp(keep->shape, shape, sizeof(int64_t) * (size_t)rank) != 0) {
        char got[128], want[128];
        attn_format_shape(got, sizeof got, keep->rank, keep->shape);
        attn_format_shape(want, sizeof want, rank, shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "keep has shape %s but the weights have shape %s", got, want);
    }
    attn_status st = attn_check_writable(keep, "keep", err);
    return st ? st : attn_check_extent(keep, "keep", err);
}

attn_status attn_sdpa_dropout_mask(attn_tensor *keep, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_sdpa_options *options, attn_error *err) {
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    attn_sdpa_options o;
    attn_context c;
    attn_status st;
    if ((st = attn_sdpa_shapes(&rank, NULL, shape, q, k, v, options, err)) ||
        (st = attn_options_read(&o, &c, options, err)) || (st = check_keep(keep, rank, shape, err)))
        return st;
    const attn_named outs[1] = {{keep, "keep"}};
    attn_named ins[3 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}};
    if ((st = attn_check_no_overlap(outs, 1, ins, attn_named_options(ins, 3, ATTN_NAMED_CAP(ins), &o), err))) return st;
    attn_canon cw = attn_canonical(keep);
    int64_t B2 = cw.shape[1], H = cw.shape[2], L = cw.shape[3], S = cw.shape[4];
    attn_problem p;
    memset(&p, 0, sizeof p);
    p.dropout_p = o.dropout_p, p.dropout_seed = o.dropout_seed;
    for (int64_t s = 0; s < cw.shape[0] * B2 * H; s++) { /* slices in attn_slice's order */
        int64_t b0 = s / (B2 * H), b1 = s / H % B2, h = s % H;
        unsigned char *base = (unsigned char *)keep->data + b0 * cw.strides[0] + b1 * cw.strides[1] + h * cw.strides[2];
        p.slice = s;
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) base[i * cw.strides[3] + j * cw.strides[4]] = attn_dropout_keeps(&p, i, j);
    }
    return ATTN_OK;
}
