/* merge.c -- attn_sdpa_merge: checks the parts of attention computed over
 * disjoint sets of keys, then merges them row by row (fast/merge.c):
 *   lse = log(sum_i exp(lse_i)),  out = sum_i exp(lse_i - lse) · out_i. */
#include "sdpa/sdpa.h"
#include "fast/fast.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out-like (..., L, Ev) and lse-like (..., L) tensors: present, one float
 * dtype, the expected rank and shape, offsets that fit. */
static attn_status check_part(const attn_tensor *t, const char *name, int i, attn_dtype dtype, int rank,
                              const int64_t *shape, attn_error *err) {
    char label[32];
    if (i < 0) snprintf(label, sizeof label, "%s", name);
    else snprintf(label, sizeof label, "%s[%d]", name, i);
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", label);
    if (t->dtype != dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but out is %s; all must share one dtype", label,
                         attn_dtype_name(t->dtype), attn_dtype_name(dtype));
    if (t->rank != rank)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d but must have rank %d", label, t->rank, rank);
    if (memcmp(t->shape, shape, sizeof(int64_t) * (size_t)rank) != 0) {
        char got[128], want[128];
        attn_format_shape(got, sizeof got, rank, t->shape);
        attn_format_shape(want, sizeof want, rank, shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s but must have shape %s", label, got, want);
    }
    /* NULL data only where there is no element, as attn_sdpa takes an empty out */
    if (!t->data && attn_tensor_numel(t) != 0) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", label);
    return attn_check_extent(t, label, err);
}

/* out and lse own their memory, except that each may be one of the parts'
 * very views (outs[i], lses[j]): a row is written after every part's row
 * was read, element by element in place. */
static attn_status check_memory(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *const *outs,
                                const attn_tensor *const *lses, int n, attn_error *err) {
    const attn_named pair[2] = {{out, "out"}, {lse, "lse"}};
    attn_status st = attn_check_no_overlap(pair, 2, NULL, 0, err);
    for (int i = 0; i < n && !st; i++) {
        char on[32], ln[32];
        snprintf(on, sizeof on, "outs[%d]", i), snprintf(ln, sizeof ln, "lses[%d]", i);
        const attn_named part[2] = {{outs[i], on}, {lses[i], ln}};
        for (int w = 0; w < 2 && !st; w++) { /* out against the part, then lse */
            attn_named others[2] = {part[0], part[1]};
            if (attn_same_view(pair[w].t, part[w].t)) others[w].t = NULL; /* in place */
            st = attn_check_no_overlap(&pair[w], 1, others, 2, err);
        }
    }
    return st;
}

static double get(const attn_tensor *t, int64_t off) {
    return t->dtype == ATTN_F32 ? (double)((const float *)t->data)[off] : ((const double *)t->data)[off];
}

static void set(const attn_tensor *t, int64_t off, double x) {
    if (t->dtype == ATTN_F32) ((float *)t->data)[off] = (float)x;
    else ((double *)t->data)[off] = x;
}

/* The element offset of row `row` (a flat index over lse's dimensions) in a
 * tensor whose leading dimensions are lse's. */
static int64_t row_offset(const attn_tensor *t, const attn_tensor *lse, int64_t row) {
    int64_t off = 0;
    for (int d = lse->rank - 1; d >= 0; d--) {
        off += row % lse->shape[d] * t->strides[d];
        row /= lse->shape[d];
    }
    return off;
}

attn_status attn_sdpa_merge(attn_tensor *out, attn_tensor *lse, const attn_tensor *const *outs,
                            const attn_tensor *const *lses, int n, attn_error *err) {
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out is NULL");
    if (!lse) return attn_fail(err, ATTN_ERR_NULL, "lse is NULL");
    if (!outs || !lses) return attn_fail(err, ATTN_ERR_NULL, "the list of parts is NULL");
    if (n < 1) return attn_fail(err, ATTN_ERR_ARGUMENT, "n is %d; there must be at least one part", n);
    if (out->dtype != ATTN_F32 && out->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "out is %s; it must be f32 or f64", attn_dtype_name(out->dtype));
    if (out->rank < 2 || out->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "out has rank %d; it must be 2 to %d", out->rank, ATTN_MAX_RANK);
    /* The parts of attn_sdpa over no queries or a batch of 0 have no row,
     * and merge to none (they were refused, so that a split over keys
     * failed where attn_sdpa over all of them gave empty outputs). Ev of 0
     * attn_sdpa never gives. */
    for (int d = 0; d < out->rank; d++)
        if (out->shape[d] < 0)
            return attn_fail(err, ATTN_ERR_SHAPE, "out has a dimension of %lld; each must be at least 0",
                             (long long)out->shape[d]);
    if (out->shape[out->rank - 1] < 1)
        return attn_fail(err, ATTN_ERR_SHAPE, "out has Ev = 0 (its last dimension); it must be at least 1");
    int rank = out->rank;
    attn_status st;
    if ((st = check_part(out, "out", -1, out->dtype, rank, out->shape, err)) ||
        (st = check_part(lse, "lse", -1, out->dtype, rank - 1, out->shape, err)) ||
        (st = attn_check_writable(out, "out", err)) || (st = attn_check_writable(lse, "lse", err)))
        return st;
    for (int i = 0; i < n; i++)
        if ((st = check_part(outs[i], "outs", i, out->dtype, rank, out->shape, err)) ||
            (st = check_part(lses[i], "lses", i, out->dtype, rank - 1, out->shape, err)))
            return st;
    if ((st = check_memory(out, lse, outs, lses, n, err))) return st;

    attn_part_row few[64], *parts = n <= 64 ? few : malloc(sizeof *parts * (size_t)n);
    if (!parts) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the list of %d parts", n);
    int64_t rows = attn_tensor_numel(lse), Ev = out->shape[rank - 1];
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < n; i++) {
            parts[i].m = get(lses[i], row_offset(lses[i], lse, r)), parts[i].l = 1;
            parts[i].out = (const char *)outs[i]->data +
                           row_offset(outs[i], lse, r) * (int64_t)attn_dtype_size(out->dtype);
            parts[i].stride = outs[i]->strides[rank - 1];
        }
        double l;
        char *orow = (char *)out->data + row_offset(out, lse, r) * (int64_t)attn_dtype_size(out->dtype);
        attn_merge_row(orow, out->strides[rank - 1], &l, out->dtype, parts, n, Ev);
        set(lse, row_offset(lse, lse, r), l); /* after every read of lses: lse may be lses[0] */
    }
    if (parts != few) free(parts);
    return ATTN_OK;
}
