/* score.c -- the score epilogue (score.h): padding, the causal limit, the
 * bool mask and the float mask, for f64 and f32 blocks of scores. */
#include "kernels/score.h"
#include "kernels/ukernel.h"

/* Element c of row r of the block: set to -inf, or add x. */
static void exclude(attn_score_block s, int64_t r, int64_t c) {
    if (s.f64) ((double *)s.base)[r * s.ld + c] = -INFINITY;
    else ((float *)s.base)[r * s.ld + c] = -INFINITY;
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

bool attn_score_epilogue(const attn_ukernels *uk, attn_score_block s, const attn_problem *p,
                         int64_t i0, int64_t rows, int64_t j0, int64_t nc, int64_t nc_pad,
                         bool causal_block) {
    bool ok = true;
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = i0 + r;
        /* Masks first: a key the causal limit excludes stays -inf whatever
         * its float mask value (-inf + +inf would be NaN). */
        if (p->mask.base) ok &= mask_row(uk, s, &p->mask, r, i, j0, nc);
        if (causal_block)
            for (int64_t c = attn_keys_seen(p, i, j0, nc); c < nc; c++) exclude(s, r, c);
        for (int64_t c = nc; c < nc_pad; c++) exclude(s, r, c);
    }
    return ok;
}
