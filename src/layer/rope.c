/* rope.c -- rotary position embeddings (attn.h): each pair of a row's
 * elements turned by an angle that grows with the row's position, in the
 * two layouts models use. */
#include "base/base.h"

#include <string.h>

attn_rope_options attn_rope_options_default(void) {
    attn_rope_options o = {0};
    o.struct_size = sizeof o;
    o.layout = ATTN_ROPE_HALVES;
    o.base = 10000;
    o.linear_scaling = 1;
    return o;
}

/* The caller's options read up to their struct_size, checked against x's E. */
static attn_status read_options(attn_rope_options *o, int64_t *rd, const attn_rope_options *in, int64_t E,
                                attn_error *err) {
    *o = attn_rope_options_default();
    if (in) {
        if (in->struct_size == 0 || in->struct_size > sizeof *o)
            return attn_fail(err, ATTN_ERR_OPTION, "options->struct_size is %zu: start from attn_rope_options_default()",
                             in->struct_size);
        memcpy(o, in, in->struct_size);
    }
    if (o->layout != ATTN_ROPE_HALVES && o->layout != ATTN_ROPE_INTERLEAVED)
        return attn_fail(err, ATTN_ERR_OPTION, "layout %d is not an attn_rope_layout value", (int)o->layout);
    if (!(o->base > 0 && o->base < INFINITY))
        return attn_fail(err, ATTN_ERR_OPTION, "base is %g; it must be finite and above 0", o->base);
    if (!(o->linear_scaling > 0 && o->linear_scaling < INFINITY))
        return attn_fail(err, ATTN_ERR_OPTION, "linear_scaling is %g; it must be finite and above 0", o->linear_scaling);
    if (o->position_offset < 0 || o->position_offset > ((int64_t)1 << 53))
        return attn_fail(err, ATTN_ERR_OPTION, "position_offset is %lld; it must be from 0 to 2^53",
                         (long long)o->position_offset);
    *rd = o->rotary_dim ? o->rotary_dim : E;
    if (*rd < 0 || *rd > E || *rd % 2)
        return attn_fail(err, ATTN_ERR_SHAPE, "the rotary dimension is %lld; it must be even and at most E = %lld",
                         (long long)*rd, (long long)E);
    return ATTN_OK;
}

static attn_status check_pair(const attn_tensor *out, const attn_tensor *x, attn_error *err) {
    if (!out || !x || !out->data || !x->data) return attn_fail(err, ATTN_ERR_NULL, "out, x or their data is NULL");
    if (x->rank < 1 || x->rank > ATTN_MAX_RANK) return attn_fail(err, ATTN_ERR_RANK, "x has rank %d", x->rank);
    if (x->dtype != ATTN_F32 && x->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "x is %s; RoPE takes f32 or f64", attn_dtype_name(x->dtype));
    if (out->dtype != x->dtype || out->rank != x->rank || memcmp(out->shape, x->shape, sizeof(int64_t) * (size_t)x->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "out must have x's shape and dtype");
    attn_status st = attn_check_extent(x, "x", err);
    return st ? st : attn_check_extent(out, "out", err);
}

/* Element e of row `row` (the rows of all leading dimensions in C order). */
static int64_t offset_of(const attn_tensor *t, int64_t row, int64_t e) {
    int64_t off = e * t->strides[t->rank - 1];
    for (int d = t->rank - 2; d >= 0; d--) {
        off += row % t->shape[d] * t->strides[d];
        row /= t->shape[d];
    }
    return off;
}

static double get(const attn_tensor *t, int64_t off) {
    return t->dtype == ATTN_F64 ? ((const double *)t->data)[off] : ((const float *)t->data)[off];
}

static void set(const attn_tensor *t, int64_t off, double v) {
    if (t->dtype == ATTN_F64) ((double *)t->data)[off] = v;
    else ((float *)t->data)[off] = (float)v;
}

/* out = x turned by +angle (sign 1) or -angle (sign -1). */
static attn_status rotate(attn_tensor *out, const attn_tensor *x, const attn_rope_options *options, double sign,
                          attn_error *err) {
    attn_status st = check_pair(out, x, err);
    if (st) return st;
    int64_t E = x->shape[x->rank - 1], L = x->rank >= 2 ? x->shape[x->rank - 2] : 1, rd = 0;
    attn_rope_options o;
    if ((st = read_options(&o, &rd, options, E, err))) return st;
    int64_t rows = E ? attn_tensor_numel(x) / E : 0, half = rd / 2;
    enum { CHUNK = 64 };
    double inv_freq[CHUNK]; /* the pairs' frequencies, CHUNK at a time */
    for (int64_t k0 = 0; k0 < half; k0 += CHUNK) {
        int64_t nk = half - k0 < CHUNK ? half - k0 : CHUNK;
        for (int64_t k = 0; k < nk; k++) inv_freq[k] = 1.0 / pow(o.base, (double)(2 * (k0 + k)) / (double)rd);
        for (int64_t row = 0; row < rows; row++) {
            double pos = (double)(o.position_offset + row % L) / o.linear_scaling;
            for (int64_t k = k0; k < k0 + nk; k++) {
                /* a, b: the pair's elements in the layout; both read before writing (in place). */
                int64_t ia = o.layout == ATTN_ROPE_HALVES ? k : 2 * k, ib = o.layout == ATTN_ROPE_HALVES ? k + half : 2 * k + 1;
                double angle = pos * inv_freq[k - k0], c = cos(angle), s = sign * sin(angle);
                double a = get(x, offset_of(x, row, ia)), b = get(x, offset_of(x, row, ib));
                set(out, offset_of(out, row, ia), a * c - b * s);
                set(out, offset_of(out, row, ib), b * c + a * s);
            }
        }
    }
    for (int64_t row = 0; row < rows && out->data != x->data; row++) /* the elements not rotated */
        for (int64_t e = rd; e < E; e++) set(out, offset_of(out, row, e), get(x, offset_of(x, row, e)));
    return ATTN_OK;
}

attn_status attn_rope(attn_tensor *out, const attn_tensor *x, const attn_rope_options *options, attn_error *err) {
    return rotate(out, x, options, 1.0, err);
}

attn_status attn_rope_backward(attn_tensor *dx, const attn_tensor *dout, const attn_rope_options *options,
                               attn_error *err) {
    return rotate(dx, dout, options, -1.0, err);
}

attn_status attn_sinusoidal_positions(attn_tensor *out, int64_t position_offset, attn_error *err) {
    if (!out || !out->data) return attn_fail(err, ATTN_ERR_NULL, "out is NULL or has NULL data");
    if (out->rank != 2) return attn_fail(err, ATTN_ERR_RANK, "out has rank %d; it must be (L, E)", out->rank);
    if (out->dtype != ATTN_F32 && out->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "out is %s; it must be f32 or f64", attn_dtype_name(out->dtype));
    if (position_offset < 0 || position_offset > ((int64_t)1 << 53))
        return attn_fail(err, ATTN_ERR_OPTION, "position_offset is %lld; it must be from 0 to 2^53", (long long)position_offset);
    attn_status st = attn_check_extent(out, "out", err);
    if (st) return st;
    int64_t L = out->shape[0], E = out->shape[1];
    for (int64_t e = 0; e < E; e++) {
        /* Pair i = e / 2 shares the frequency 1 / 10000^(2i / E). */
        double div = pow(10000.0, (double)(e / 2 * 2) / (double)E);
        for (int64_t r = 0; r < L; r++) {
            double angle = (double)(position_offset + r) / div;
            set(out, r * out->strides[0] + e * out->strides[1], e % 2 ? cos(angle) : sin(angle));
        }
    }
    return ATTN_OK;
}
