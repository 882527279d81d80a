/* sinks_backward.c -- the gradient of attention sinks (attn.h): a sink h
 * takes the weight e^(sink_h - lse) of every row of head h, and moving it
 * scales the row's output by (1 - that weight), so
 *   dsink_h = -sum over the head's rows of e^(sink_h - lse) · (dout · out). */
#include "base/base.h"
#include "sdpa/sdpa.h"

#include <string.h>

/* Offset of element e of row `row` (all leading indices in C order). */
static int64_t offset_of(const attn_tensor *t, int64_t row, int64_t e, int skip_last) {
    int64_t off = skip_last ? 0 : e * t->strides[t->rank - 1];
    for (int d = t->rank - 1 - !skip_last; d >= 0; d--) {
        off += row % t->shape[d] * t->strides[d];
        row /= t->shape[d];
    }
    return off;
}

static double get(const attn_tensor *t, int64_t off) {
    return t->dtype == ATTN_F64 ? ((const double *)t->data)[off] : ((const float *)t->data)[off];
}

static attn_status check(const attn_tensor *dsinks, const attn_tensor *dout, const attn_tensor *out,
                         const attn_tensor *lse, attn_error *err) {
    if (!dsinks || !dout || !out || !lse || !dsinks->data || !dout->data || !out->data || !lse->data)
        return attn_fail(err, ATTN_ERR_NULL, "dsinks, dout, out, lse or their data is NULL");
    if (out->rank < 2 || out->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "out has rank %d; it must be 2 to %d", out->rank, ATTN_MAX_RANK);
    if (out->dtype != ATTN_F32 && out->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "out is %s; it must be f32 or f64", attn_dtype_name(out->dtype));
    if (dout->dtype != out->dtype || lse->dtype != out->dtype || dsinks->dtype != out->dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "dout, lse and dsinks must have out's dtype (%s)", attn_dtype_name(out->dtype));
    if (dout->rank != out->rank || memcmp(dout->shape, out->shape, sizeof(int64_t) * (size_t)out->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "dout must have out's shape");
    if (lse->rank != out->rank - 1 || memcmp(lse->shape, out->shape, sizeof(int64_t) * (size_t)lse->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "lse must have out's shape without its last dimension");
    int64_t Hq = out->rank >= 3 ? out->shape[out->rank - 3] : 1;
    if (dsinks->rank != 1 || dsinks->shape[0] != Hq)
        return attn_fail(err, ATTN_ERR_SHAPE, "dsinks must have shape (%lld,), one per query head", (long long)Hq);
    attn_status st;
    const attn_tensor *all[4] = {dsinks, dout, out, lse};
    static const char *const NAMES[4] = {"dsinks", "dout", "out", "lse"};
    for (int i = 0; i < 4; i++)
        if ((st = attn_check_extent(all[i], NAMES[i], err))) return st;
    return attn_check_writable(dsinks, "dsinks", err);
}

attn_status attn_sdpa_sinks_backward(attn_tensor *dsinks, const attn_tensor *dout, const attn_tensor *out,
                                     const attn_tensor *lse, const attn_sdpa_options *options, attn_error *err) {
    attn_status st = check(dsinks, dout, out, lse, err);
    if (st) return st;
    if (!options) return attn_fail(err, ATTN_ERR_NULL, "options is NULL: the sinks are options->sinks");
    attn_sdpa_options o = attn_sdpa_options_default();
    if ((st = attn_versioned_read(&o, sizeof o, options, "options", "start from attn_sdpa_options_default()", err)))
        return st;
    if (!o.sinks) return attn_fail(err, ATTN_ERR_NULL, "options->sinks is NULL (or the options predate it)");
    int64_t Hq = dsinks->shape[0], L = out->shape[out->rank - 2], Ev = out->shape[out->rank - 1];
    if ((st = attn_check_per_head(o.sinks, "sinks", Hq, err))) return st;
    const attn_named outs[1] = {{dsinks, "dsinks"}};
    attn_named ins[3 + ATTN_OPTION_TENSORS] = {{dout, "dout"}, {out, "out"}, {lse, "lse"}};
    if ((st = attn_check_no_overlap(outs, 1, ins, attn_named_options(ins, 3, ATTN_NAMED_CAP(ins), &o), err))) return st;
    attn_mat sinks = {(char *)o.sinks->data, o.sinks->dtype, 1, Hq, 0, o.sinks->strides[0]};
    int64_t rows = Ev ? attn_tensor_numel(out) / Ev : 0;
    for (int64_t h = 0; h < Hq; h++) { /* in double, rows in order: the same sums on every run */
        double sum = 0, sink = attn_mat_get(&sinks, 0, h);
        for (int64_t row = 0; row < rows; row++) {
            if ((row / L) % Hq != h) continue;
            double D = 0, l = get(lse, offset_of(lse, row, 0, 1));
            for (int64_t e = 0; e < Ev; e++) D += get(dout, offset_of(dout, row, e, 0)) * get(out, offset_of(out, row, e, 0));
            sum += attn_exp_or_zero(sink - l) * D;
        }
        attn_mat d = {(char *)dsinks->data, dsinks->dtype, 1, Hq, 0, dsinks->strides[0]};
        if (d.dtype == ATTN_F64) ((double *)d.base)[h * d.cs] = -sum;
        else ((float *)d.base)[h * d.cs] = attn_f32_of(-sum);
    }
    return ATTN_OK;
}
