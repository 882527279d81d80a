/* slices.c -- one (batch, head) slice of a planned call as an attention
 * problem: strided views of its q, k, v, out, weights, mask and lse, and
 * for a backward pass of its gradients. */
#include "base/base.h"

static attn_mat mat_of(const attn_tensor *t, const attn_canon *c, const int64_t *idx) {
    attn_mat m;
    int64_t off = idx[0] * c->strides[0] + idx[1] * c->strides[1] + idx[2] * c->strides[2];
    /* A tensor without data stands for a buffer not allocated yet (a measuring
     * pass sizes from shapes alone): its views have no base either. */
    m.base = t->data ? (char *)t->data + off * attn_stride_unit(t->dtype) : NULL; /* quantized rows: strides in bytes */
    m.dtype = t->dtype;
    m.rows = c->shape[3];
    m.cols = c->shape[4];
    m.rs = c->strides[3];
    m.cs = c->strides[4];
    return m;
}

/* The (b0, b1, h) of slice `index` for q-like tensors and for k and v:
 * index runs over (b0, b1, h), h fastest. Broadcast dimensions have stride
 * 0, so any index works for them. */
static void slice_index(const attn_slices *sl, int64_t index, int64_t iq[3], int64_t ikv[3]) {
    int64_t Hq = sl->co.shape[2], B1 = sl->co.shape[1], group = Hq / sl->ck.shape[2];
    int64_t h = index % Hq, b1 = index / Hq % B1, b0 = index / Hq / B1;
    iq[0] = ikv[0] = b0, iq[1] = ikv[1] = b1, iq[2] = h, ikv[2] = h / group;
}

/* Element h of a 1-D float tensor (one value per query head). */
static double per_head(const attn_tensor *t, int64_t h) {
    attn_mat m = {(char *)t->data, t->dtype, 1, t->shape[0], 0, t->strides[0]};
    return attn_mat_get(&m, 0, h);
}

/* The head of a paged pool that slice (b0, b1, h) reads: the stand-in k's
 * batch and head indices flattened, so that B sequences of one length are
 * one pool whose heads are theirs side by side (sequence b's Hk heads are
 * b·Hk .. b·Hk + Hk - 1: a contiguous KV cache, attn_sdpa_paged_batch);
 * one sequence's heads are 0 .. Hk - 1. A dimension k broadcasts counts 0. */
static int64_t pool_head(const attn_canon *ck, const int64_t ikv[3]) {
    int64_t b0 = ck->shape[0] > 1 ? ikv[0] : 0, b1 = ck->shape[1] > 1 ? ikv[1] : 0;
    return (b0 * ck->shape[1] + b1) * ck->shape[2] + ikv[2];
}

/* The per-head scale of KV slice ikv (b0, b1, hk) in a descale tensor t
 * (f32 or f64) with strides st over (B1, B2, Hk). */
static double descale_at(const attn_tensor *t, const int64_t st[3], const int64_t ikv[3]) {
    int64_t off = ikv[0] * st[0] + ikv[1] * st[1] + ikv[2] * st[2];
    return t->dtype == ATTN_F64 ? ((const double *)t->data)[off] : (double)((const float *)t->data)[off];
}

void attn_slice(const attn_slices *sl, int64_t index, attn_problem *p) {
    int64_t iq[3], ikv[3];
    slice_index(sl, index, iq, ikv);
    *p = sl->base;
    p->slice = index;
    p->q = mat_of(sl->q, &sl->cq, iq);
    p->k = sl->k_pages ? attn_rows_paged(sl->k_pages, pool_head(&sl->ck, ikv)) : attn_rows_dense(mat_of(sl->k, &sl->ck, ikv));
    p->v = sl->v_pages ? attn_rows_paged(sl->v_pages, pool_head(&sl->cv, ikv)) : attn_rows_dense(mat_of(sl->v, &sl->cv, ikv));
    p->out = mat_of(sl->out, &sl->co, iq);
    if (sl->weights) p->weights = mat_of(sl->weights, &sl->cw, iq);
    if (sl->mask) p->mask = mat_of(sl->mask, &sl->cm, iq);
    if (sl->lse) p->lse = mat_of(sl->lse, &sl->cl, iq);
    if (sl->alibi) p->alibi = true, p->alibi_slope = per_head(sl->alibi, iq[2]);
    if (sl->sinks) p->has_sink = true, p->sink = per_head(sl->sinks, iq[2]);
    /* fp8 keys' scale folded into the score scale, in f64 (attn.h) */
    if (sl->k_descale) p->scale *= descale_at(sl->k_descale, sl->kd_strides, ikv);
}

void attn_descale_out(const attn_slices *sl) {
    if (!sl->v_descale) return;
    for (int64_t i = 0; i < sl->count; i++) {
        int64_t iq[3], ikv[3];
        slice_index(sl, i, iq, ikv);
        double s = descale_at(sl->v_descale, sl->vd_strides, ikv);
        attn_mat o = mat_of(sl->out, &sl->co, iq);
        for (int64_t r = 0; r < o.rows; r++)
            for (int64_t c = 0; c < o.cols; c++) {
                int64_t off = r * o.rs + c * o.cs;
                if (o.dtype == ATTN_F64) ((double *)(void *)o.base)[off] *= s;
                else { /* f32: one rounding of the product (exact in f64) */
                    float *x = (float *)(void *)o.base + off;
                    *x = (float)((double)*x * s);
                }
            }
    }
}

void attn_grad_slice(const attn_grad_slices *gs, int64_t index, attn_grad_problem *p) {
    int64_t iq[3], ikv[3];
    slice_index(&gs->f, index, iq, ikv);
    attn_slice(&gs->f, index, &p->f);
    attn_mat none = {0};
    p->dout = mat_of(gs->dout, &gs->cdo, iq);
    p->dq = gs->dq ? mat_of(gs->dq, &gs->cdq, iq) : none;
    p->dk = gs->dk ? mat_of(gs->dk, &gs->cdk, ikv) : none;
    p->dv = gs->dv ? mat_of(gs->dv, &gs->cdv, ikv) : none;
    p->dmask = gs->dmask ? mat_of(gs->dmask, &gs->cdm, iq) : none;
}
