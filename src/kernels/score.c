/* score.c -- the score epilogue (score.h): soft-capping, ALiBi, the bool
 * mask and the float mask, the causal limit and the sliding window, and
 * padding, for f64 and f32 blocks of scores. */
#include "kernels/score.h"
#include "kernels/ukernel.h"

#include <stdlib.h>

/* s = cap · tanh(s / cap) on columns 0..n-1 of row r, and, when dcap is
 * given, its derivative 1 - tanh² = 1 - (s / cap)² there (for the backward
 * pass). f64 rows take libm's tanh; f32 rows the ISA's vector kernel, whose
 * largest capped value is returned (-inf for f64 rows, unused). */
static float softcap_row(const attn_ukernels *uk, attn_score_block s, const attn_score_block *dcap, int64_t r,
                        int64_t n, double cap) {
    float largest = -INFINITY;
    if (s.f64) {
        double *row = (double *)s.base + r * s.ld;
        for (int64_t c = 0; c < n; c++) row[c] = cap * tanh(row[c] / cap);
    } else {
        largest = uk->softcap((float *)s.base + r * s.ld, n, (float)cap);
    }
    for (int64_t c = 0; dcap && c < n; c++) {
        double t = s.f64 ? ((double *)s.base)[r * s.ld + c] / cap : ((float *)s.base)[r * s.ld + c] / cap;
        if (dcap->f64) ((double *)dcap->base)[r * dcap->ld + c] = 1 - t * t;
        else ((float *)dcap->base)[r * dcap->ld + c] = attn_f32_of(1 - t * t); /* 0, never subnormal, far out on the cap */
    }
    return largest;
}

/* s -= slope · |j - i - offset| for the keys j = j0..j0+n-1 of row i: f32
 * rows in the ISA's vector loop (distances below 2^31), f64 rows in double. */
static void alibi_row(const attn_ukernels *uk, attn_score_block s, const attn_problem *p, int64_t r, int64_t i,
                      int64_t j0, int64_t n) {
    int64_t d0 = j0 - i - p->alibi_offset; /* j - i - offset at c = 0 */
    if (s.f64) {
        double *row = (double *)s.base + r * s.ld;
        for (int64_t c = 0; c < n; c++) row[c] -= p->alibi_slope * (double)llabs(d0 + c);
    } else if (uk && llabs(d0) < ((int64_t)1 << 31) - n && llabs(d0 + n) < ((int64_t)1 << 31)) {
        uk->alibi((float *)s.base + r * s.ld, n, (float)p->alibi_slope, d0);
    } else {
        float *row = (float *)s.base + r * s.ld;
        for (int64_t c = 0; c < n; c++) row[c] -= (float)(p->alibi_slope * (double)llabs(d0 + c));
    }
}

/* Element c of row r of the block: set to -inf, or add x. */
static void exclude(attn_score_block s, int64_t r, int64_t c) {
    if (s.f64) ((double *)s.base)[r * s.ld + c] = -INFINITY;
    else ((float *)s.base)[r * s.ld + c] = -INFINITY;
}

/* Elements c0..c1-1 of row r set to -inf (none when c1 <= c0), in a loop
 * the compiler vectorises: a window's blocks cut most rows at both ends. */
static void exclude_range(attn_score_block s, int64_t r, int64_t c0, int64_t c1) {
    if (s.f64)
        for (int64_t c = c0; c < c1; c++) ((double *)s.base)[r * s.ld + c] = -INFINITY;
    else
        for (int64_t c = c0; c < c1; c++) ((float *)s.base)[r * s.ld + c] = -INFINITY;
}

static void add(attn_score_block s, int64_t r, int64_t c, double x) {
    if (s.f64) ((double *)s.base)[r * s.ld + c] += x;
    else ((float *)s.base)[r * s.ld + c] += (float)x;
}

/* The masks of one row, the f32 rows with contiguous masks in the
 * microkernels' vector loops. Returns false on a NaN or +inf mask value. */
static bool mask_row(const attn_ukernels *uk, attn_score_block s, const attn_mat *m, int64_t r,
                     int64_t i, int64_t j0, int64_t nc) {
    bool contiguous = !s.f64 && m->cs == 1;
    float *row = s.f64 ? NULL : (float *)s.base + r * s.ld;
    if (m->dtype == ATTN_BOOL) {
        const unsigned char *mr = (const unsigned char *)m->base + i * m->rs + j0 * m->cs;
        if (contiguous) uk->mask_bool(row, mr, nc);
        else
            for (int64_t c = 0; c < nc; c++)
                if (!mr[c * m->cs]) exclude(s, r, c);
        return true;
    }
    /* A float mask has the scores' dtype (f32 for f32 kernels). */
    if (contiguous) return uk->mask_add(row, (const float *)(const void *)m->base + i * m->rs + j0, nc);
    bool ok = true;
    for (int64_t c = 0; c < nc; c++) {
        double x = attn_mat_get(m, i, j0 + c);
        ok &= !(x != x || x == INFINITY); /* -inf masks; +inf or NaN is not finite arithmetic */
        add(s, r, c, x);
    }
    return ok;
}

/* Whether nothing after the cap changes a score of the block: no ALiBi
 * bias, mask, causal limit or window through it, no padding. A variant
 * applied after the cap is named here, and both predicates below learn it. */
static bool none_after_cap(const attn_problem *p, bool causal_block, int64_t nc, int64_t nc_pad) {
    return !p->alibi && !p->mask.base && !causal_block && nc == nc_pad;
}

bool attn_score_epilogue_only_max(const attn_problem *p, bool causal_block, int64_t nc, int64_t nc_pad) {
    return !(p->softcap > 0) && none_after_cap(p, causal_block, nc, nc_pad);
}

bool attn_score_epilogue(const attn_ukernels *uk, attn_score_block s, const attn_problem *p,
                         int64_t i0, int64_t rows, int64_t j0, int64_t nc, int64_t nc_pad,
                         bool causal_block, const attn_score_block *dcap, float *row_max) {
    bool ok = true;
    /* When the cap is the last thing to change a row, its kernel's largest
     * value is the row's: no other pass over the row to find it. */
    bool cap_is_last = p->softcap > 0 && none_after_cap(p, causal_block, nc, nc_pad);
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = i0 + r;
        float capped_max = -INFINITY;
        /* The variants in their documented order (attn_sdpa_options): the
         * cap on q·k·scale, then the ALiBi bias, then the masks. */
        if (p->softcap > 0) capped_max = softcap_row(uk, s, dcap, r, s.f64 ? nc : nc_pad, p->softcap);
        if (p->alibi) alibi_row(uk, s, p, r, i, j0, nc);
        /* Masks before the limits: a key the causal limit excludes stays
         * -inf whatever its float mask value (-inf + +inf would be NaN). */
        if (p->mask.base) ok &= mask_row(uk, s, &p->mask, r, i, j0, nc);
        if (causal_block) {
            int64_t before_window = attn_first_key(p, i) - j0; /* columns below it are out */
            exclude_range(s, r, attn_keys_seen(p, i, j0, nc), nc);
            exclude_range(s, r, 0, before_window < nc ? before_window : nc);
        }
        exclude_range(s, r, nc, nc_pad);
        if (row_max) row_max[r] = cap_is_last ? capped_max : uk->max((float *)s.base + r * s.ld, nc_pad);
    }
    return ok;
}
