/* rope.c -- RoPE turned on packed rows of q and k (rope.h): each pair of a
 * row's elements rotates by an angle that grows with the row's position.
 * One block of rows costs one cos and sin per pair (the angle at the first
 * row), then angle addition with a per-call table of the steps. */
#include "kernels/rope.h"

#include <math.h>
#include <string.h>

attn_status attn_rope_read_options(attn_rope_options *o, int64_t *rd, const attn_rope_options *in, int64_t E,
                                   const char *name, attn_error *err) {
    *o = attn_rope_options_default();
    attn_status st = attn_versioned_read(o, sizeof *o, in, name, "start from attn_rope_options_default()", err);
    if (st) return st;
    if (o->layout != ATTN_ROPE_HALVES && o->layout != ATTN_ROPE_INTERLEAVED)
        return attn_fail(err, ATTN_ERR_OPTION, "RoPE layout %d is not an attn_rope_layout value", (int)o->layout);
    if (!(o->base > 0 && o->base < INFINITY))
        return attn_fail(err, ATTN_ERR_OPTION, "RoPE base is %g; it must be finite and above 0", o->base);
    if (!(o->linear_scaling > 0 && o->linear_scaling < INFINITY))
        return attn_fail(err, ATTN_ERR_OPTION, "RoPE linear_scaling is %g; it must be finite and above 0",
                         o->linear_scaling);
    if (o->position_offset < 0 || o->position_offset > ((int64_t)1 << 53))
        return attn_fail(err, ATTN_ERR_OPTION, "RoPE position_offset is %lld; it must be from 0 to 2^53",
                         (long long)o->position_offset);
    *rd = o->rotary_dim ? o->rotary_dim : E;
    if (*rd < 0 || *rd > E || *rd % 2)
        return attn_fail(err, ATTN_ERR_SHAPE, "the rotary dimension is %lld; it must be even and at most E = %lld",
                         (long long)*rd, (long long)E);
    return ATTN_OK;
}

int64_t attn_rope_plan_doubles(int64_t rotary_dim, int64_t steps) { return rotary_dim / 2 * (1 + 2 * steps); }

void attn_rope_plan_init(attn_rope_plan *r, const attn_rope_options *o, int64_t rd, int64_t steps, double *mem) {
    int64_t half = rd / 2;
    double *inv = mem, *c = mem + half, *s = c + half * steps;
    for (int64_t k = 0; k < half; k++) {
        inv[k] = 1.0 / pow(o->base, (double)(2 * k) / (double)rd);
        for (int64_t t = 0; t < steps; t++) {
            double a = (double)t / o->linear_scaling * inv[k];
            c[k * steps + t] = cos(a), s[k * steps + t] = sin(a);
        }
    }
    *r = (attn_rope_plan){o->layout, half, o->linear_scaling, inv, c, s, steps};
}

/* Where pair k's two elements are. */
static void pair(const attn_rope_plan *r, int64_t k, int64_t *a, int64_t *b) {
    *a = r->layout == ATTN_ROPE_HALVES ? k : 2 * k;
    *b = r->layout == ATTN_ROPE_HALVES ? k + r->half : 2 * k + 1;
}

/* The same loop for both element types: rows t0 .. t0 + steps take their
 * angles from the one at t0 (computed directly) and the step table. */
#define ROPE_APPLY(T)                                                                                          \
    for (int64_t k = 0; k < r->half; k++) {                                                                    \
        int64_t ia, ib;                                                                                        \
        pair(r, k, &ia, &ib);                                                                                  \
        const double *tc = r->step_cos + k * r->steps, *ts = r->step_sin + k * r->steps;                       \
        for (int64_t t0 = 0; t0 < n; t0 += r->steps) {                                                         \
            double a0 = (double)(p0 + t0) / r->scaling * r->inv_freq[k], c0 = cos(a0), s0 = sin(a0) * dir;    \
            int64_t nt = n - t0 < r->steps ? n - t0 : r->steps;                                                \
            for (int64_t t = 0; t < nt; t++) {                                                                 \
                double c = c0 * tc[t] - s0 * ts[t] * dir, s = s0 * tc[t] + c0 * ts[t] * dir;                   \
                T *xa = x + (t0 + t) * st + ia * se, *xb = x + (t0 + t) * st + ib * se;                       \
                double va = *xa, vb = *xb;                                                                     \
                *xa = (T)(va * c - vb * s), *xb = (T)(vb * c + va * s);                                        \
            }                                                                                                  \
        }                                                                                                      \
    }

void attn_rope_apply_f64(double *x, int64_t st, int64_t se, int64_t n, const attn_rope_plan *r, int64_t p0, int dir) {
    ROPE_APPLY(double)
}

void attn_rope_apply_f32(float *x, int64_t st, int64_t se, int64_t n, const attn_rope_plan *r, int64_t p0, int dir) {
    ROPE_APPLY(float)
}

void attn_rope_apply_tensor(const attn_tensor *t, const attn_rope_plan *r, int64_t p0, int dir) {
    int64_t n = t->rank >= 2 ? t->shape[t->rank - 2] : 1, E = t->shape[t->rank - 1];
    int64_t st = t->rank >= 2 ? t->strides[t->rank - 2] : 0, se = t->strides[t->rank - 1];
    int64_t count = n > 0 && E > 0 ? attn_tensor_numel(t) / (n * E) : 0;
    for (int64_t m = 0; m < count; m++) { /* matrix m's first element, its leading indices in C order */
        int64_t off = 0, rest = m;
        for (int d = t->rank - 3; d >= 0; d--) off += rest % t->shape[d] * t->strides[d], rest /= t->shape[d];
        if (t->dtype == ATTN_F64) attn_rope_apply_f64((double *)t->data + off, st, se, n, r, p0, dir);
        else attn_rope_apply_f32((float *)t->data + off, st, se, n, r, p0, dir);
    }
}
