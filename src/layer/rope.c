/* rope.c -- rotary position embeddings (attn.h): each pair of a row's
 * elements turned by an angle that grows with the row's position, in the
 * two layouts models use. */
#include "base/base.h"
#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t attn_rope_options_init(attn_rope_options *options, size_t struct_size) {
    static const attn_rope_options DEFAULTS = {
        .struct_size = sizeof DEFAULTS, .layout = ATTN_ROPE_HALVES, .base = 10000, .linear_scaling = 1};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

static attn_status check_pair(const attn_tensor *out, const attn_tensor *x, attn_error *err) {
    if (!out || !x || !out->data || !x->data) return attn_fail(err, ATTN_ERR_NULL, "out, x or their data is NULL");
    if (x->rank < 1 || x->rank > ATTN_MAX_RANK) return attn_fail(err, ATTN_ERR_RANK, "x has rank %d", x->rank);
    if (x->dtype != ATTN_F32 && x->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "x is %s; RoPE takes f32 or f64", attn_dtype_name(x->dtype));
    if (out->dtype != x->dtype || out->rank != x->rank || memcmp(out->shape, x->shape, sizeof(int64_t) * (size_t)x->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "out must have x's shape and dtype");
    attn_status st = attn_check_extent(x, "x", err);
    if (st || (st = attn_check_extent(out, "out", err)) || (st = attn_check_writable(out, "out", err))) return st;
    /* In place is out = x, the very view; any other sharing would turn
     * elements that are still to be read. */
    const attn_named o[1] = {{out, "out"}}, in[1] = {{attn_same_view(out, x) ? NULL : x, "x"}};
    return attn_check_no_overlap(o, 1, in, 1, err);
}

/* The offset of element e of row `row` (the rows of all leading dimensions
 * in C order). */
static int64_t offset_of(const attn_tensor *t, int64_t row, int64_t e) {
    int64_t off = e * t->strides[t->rank - 1];
    for (int d = t->rank - 2; d >= 0; d--) {
        off += row % t->shape[d] * t->strides[d];
        row /= t->shape[d];
    }
    return off;
}

/* out = x turned by +angle (dir 1) or -angle (dir -1): x copied into out,
 * then each matrix's rows turned in place by the kernels' rotation
 * (kernels/rope.c), row r at position position_offset + r. */
static attn_status rotate(attn_tensor *out, const attn_tensor *x, const attn_rope_options *options, int dir,
                          attn_error *err) {
    attn_status st = check_pair(out, x, err);
    if (st) return st;
    int64_t E = x->shape[x->rank - 1], L = x->rank >= 2 ? x->shape[x->rank - 2] : 1, rd = 0;
    attn_rope_options o;
    if ((st = attn_rope_read_options(&o, &rd, options, E, "options", err))) return st;
    int64_t numel = attn_tensor_numel(x), rows = E ? numel / E : 0, steps = L < 256 ? (L > 0 ? L : 1) : 256;
    double *mem = malloc(sizeof(double) * (size_t)(attn_rope_plan_doubles(rd, steps) + 1));
    if (!mem) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate RoPE's table");
    attn_rope_plan r;
    attn_rope_plan_init(&r, &o, rd, steps, mem);
    size_t es = attn_dtype_size(x->dtype);
    if (!attn_same_view(out, x)) /* copy, then turn in place */
        for (int64_t row = 0; row < rows; row++)
            for (int64_t e = 0; e < E; e++)
                memcpy((char *)out->data + offset_of(out, row, e) * (int64_t)es,
                       (const char *)x->data + offset_of(x, row, e) * (int64_t)es, es);
    attn_rope_apply_tensor(out, &r, o.position_offset, dir);
    free(mem);
    return ATTN_OK;
}

attn_status attn_rope(attn_tensor *out, const attn_tensor *x, const attn_rope_options *options, attn_error *err) {
    return rotate(out, x, options, 1, err);
}

attn_status attn_rope_backward(attn_tensor *dx, const attn_tensor *dout, const attn_rope_options *options,
                               attn_error *err) {
    return rotate(dx, dout, options, -1, err);
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
            attn_mat m = {(char *)out->data, out->dtype, 1, 1, 0, 1};
            attn_mat_set(&m, 0, r * out->strides[0] + e * out->strides[1], e % 2 ? cos(angle) : sin(angle));
        }
    }
    return ATTN_OK;
}
