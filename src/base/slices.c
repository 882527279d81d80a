/* slices.c -- one (batch, head) slice of a planned call as an attention
 * problem: strided views of its q, k, v, out, weights, mask and lse. */
#include "base/base.h"

static attn_mat mat_of(const attn_tensor *t, const attn_canon *c, const int64_t *idx) {
    attn_mat m;
    int64_t off = idx[0] * c->strides[0] + idx[1] * c->strides[1] + idx[2] * c->strides[2];
    m.base = (char *)t->data + off * (int64_t)attn_dtype_size(t->dtype);
    m.dtype = t->dtype;
    m.rows = c->shape[3];
    m.cols = c->shape[4];
    m.rs = c->strides[3];
    m.cs = c->strides[4];
    return m;
}

void attn_slice(const attn_slices *sl, int64_t index, attn_problem *p) {
    /* index runs over (b0, b1, h), h fastest. Broadcast dimensions have
     * stride 0, so any index works for them. */
    int64_t Hq = sl->co.shape[2], B1 = sl->co.shape[1], group = Hq / sl->ck.shape[2];
    int64_t h = index % Hq, b1 = index / Hq % B1, b0 = index / Hq / B1;
    int64_t iq[3] = {b0, b1, h}, ikv[3] = {b0, b1, h / group};
    *p = sl->base;
    p->q = mat_of(sl->q, &sl->cq, iq);
    p->k = mat_of(sl->k, &sl->ck, ikv);
    p->v = mat_of(sl->v, &sl->cv, ikv);
    p->out = mat_of(sl->out, &sl->co, iq);
    if (sl->weights) p->weights = mat_of(sl->weights, &sl->cw, iq);
    if (sl->mask) p->mask = mat_of(sl->mask, &sl->cm, iq);
    if (sl->lse) p->lse = mat_of(sl->lse, &sl->cl, iq);
}
