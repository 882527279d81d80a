/* stream.c -- the streaming kernel: one (batch, head) slice of attention,
 * computed block by block with an online softmax, so that no L×S buffer ever
 * exists (FlashAttention's algorithm, in plain C and in double).
 *
 * For a block of BR query rows it walks the keys in blocks of BC. Each row
 * keeps a running maximum m, a running sum l of exp(s - m), and an output
 * accumulator acc = sum exp(s - m) v. When a new key block raises m, the old
 * l and acc are rescaled by exp(m_old - m_new). At the end, out = acc / l. */
#include "exact/exact.h"
#include "kernels/dropout.h"
#include "kernels/rope.h"
#include "kernels/score.h"

#include <float.h>

enum { BR = 16, BC = 64 }; /* query rows and keys per block */

int64_t attn_stream_work_size(int64_t E, int64_t Ev) {
    /* q block (BR×E), k block (BC×E), v block (BC×Ev), scores (BR×BC),
     * acc (BR×Ev), m and l (BR each). */
    int64_t a, b, c, d, n;
    if (!attn_mul_i64(BR + BC, E, &a) || !attn_mul_i64(BC + BR, Ev, &b)) return -1;
    c = BR * BC;
    d = 2 * BR;
    if (!attn_add_i64(a, b, &n) || !attn_add_i64(n, c + d, &n)) return -1;
    return n;
}

/* scores[r][c] = score of query i0+r against key j0+c, -inf when excluded. */
static void block_scores(double *scores, const attn_problem *p, const double *qb,
                         const double *kb, int64_t i0, int64_t nr, int64_t j0, int64_t nc) {
    int64_t E = p->q.cols;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            scores[r * BC + c] = attn_dot(qb + r * E, kb + c * E, E) * p->scale;
    attn_score_block sb = {scores, true, BC};
    attn_score_epilogue(NULL, sb, p, i0, nr, j0, nc, nc, p->causal, NULL, NULL);
}

/* Fold one block of scores (nc keys) into a row's running m, l and acc; the
 * row is query i of p, the keys start at j0 (for dropout, which scales a
 * weight into acc but not into l). */
static void online_update(double *m, double *l, double *acc, const double *scores, const double *vb, int64_t nc,
                          int64_t Ev, const attn_problem *p, int64_t i, int64_t j0) {
    double m_new = *m;
    for (int64_t c = 0; c < nc; c++)
        /* A NaN score is the maximum from then on (no score compares above
         * it), so that the row's lse is NaN, as torch.logsumexp gives it,
         * beside a +inf score too, whose maximum alone gives lse +inf. */
        if (scores[c] > m_new || isnan(scores[c])) m_new = scores[c];
    if (m_new != *m) { /* (and every block once m is NaN: alpha NaN keeps l and acc NaN) */
        double alpha = attn_exp_or_zero(*m - m_new); /* 0 when the old maximum was -inf */
        *l *= alpha;
        for (int64_t e = 0; e < Ev; e++) acc[e] *= alpha;
        *m = m_new;
    }
    double keep_scale = attn_dropout_scale(p->dropout_p);
    for (int64_t c = 0; c < nc; c++) {
        if (scores[c] == -INFINITY) continue;
        double w = attn_softmax_term(scores[c], m_new);
        *l += w;
        if (p->dropout_p > 0) {
            if (!attn_dropout_keeps(p, i, j0 + c)) continue;
            w *= keep_scale;
        }
        for (int64_t e = 0; e < Ev; e++) acc[e] += w * vb[c * Ev + e];
    }
}

/* The scratch of one call, carved out of `work`. */
typedef struct stream_work {
    double *qb;     /* (BR, E): the block's queries */
    double *kb;     /* (BC, E): a block of keys */
    double *vb;     /* (BC, Ev): their values, times vscale */
    double *scores; /* (BR, BC) */
    double *acc;    /* (BR, Ev): sum of e^(s - m) v, times vscale */
    double *m, *l;  /* (BR) each: the running maximum and sum */
} stream_work;

/* Rows i0 .. i0+nr-1 (packed in w.qb) against every key they see: their m,
 * l and acc, with every value multiplied by vscale (1, or a power of two
 * below 1: exact, so acc is exactly the unscaled acc times vscale wherever
 * neither overflows). */
static void block_rows(const attn_problem *p, stream_work w, int64_t i0, int64_t nr, double vscale) {
    int64_t S = p->k.rows, E = p->q.cols, Ev = p->v.cols;
    for (int64_t r = 0; r < nr; r++) attn_softmax_start(p, &w.m[r], &w.l[r]);
    for (int64_t x = 0; x < nr * Ev; x++) w.acc[x] = 0.0;

    /* With a causal mask, keys past the last row's limit are skipped. */
    int64_t jend = attn_keys_seen(p, i0 + nr - 1, 0, S);
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        int64_t nc = jend - j0 < BC ? jend - j0 : BC;
        attn_rows_pack_f64(w.kb, &p->k, j0, nc);
        if (p->rope) attn_rope_apply_f64(w.kb, E, 1, nc, p->rope, p->rope_k0 + j0, 1);
        attn_rows_pack_f64(w.vb, &p->v, j0, nc);
        if (vscale != 1.0)
            for (int64_t x = 0; x < nc * Ev; x++) w.vb[x] *= vscale;
        block_scores(w.scores, p, w.qb, w.kb, i0, nr, j0, nc);
        for (int64_t r = 0; r < nr; r++)
            online_update(&w.m[r], &w.l[r], w.acc + r * Ev, w.scores + r * BC, w.vb, nc, Ev, p, i0 + r, j0);
    }
}

/* 2^-k, k the least with S / (1 - dropout_p) · 2^-k <= 1/2: the scale of
 * the values under which no sum of up to S weighted values (each weight at
 * most 1, times dropout's 1 / (1 - p)) can pass DBL_MAX / 2. (p = 1 sums
 * nothing: the bound is S alone, never frexp of inf.) */
static double overflow_free_scale(const attn_problem *p) {
    int k;
    frexp(p->dropout_p < 1 ? (double)p->k.rows / (1.0 - p->dropout_p) : (double)p->k.rows, &k);
    return ldexp(1.0, -(k + 1));
}

static bool all_finite(const double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* A row's output acc / l, scaled back by unscale (1, or 1 / vscale). When
 * the values were scaled, acc is finite and there is no dropout, out is a
 * weighted mean of finite values, so at most max|v| <= DBL_MAX: an
 * overflow then is only the sums' rounding, and DBL_MAX the nearer answer. */
static double row_out(double acc, double l, double unscale, const attn_problem *p) {
    double x = acc / l;
    if (unscale == 1.0) return x; /* the usual case: acc / l alone, as always */
    x *= unscale;
    return isinf(x) && isfinite(acc) && p->dropout_p == 0 ? copysign(DBL_MAX, x) : x;
}

// q is (L, E), k is (S, E), v is (S, Ev), out is (L, Ev), weights is (L, S)
void attn_stream_kernel(const attn_problem *p, double *work) {
    int64_t L = p->q.rows, E = p->q.cols, S = p->k.rows, Ev = p->v.cols;
    stream_work sw;
    sw.qb = work;
    sw.kb = sw.qb + BR * E;
    sw.vb = sw.kb + BC * E;
    sw.scores = sw.vb + BC * Ev;
    sw.acc = sw.scores + BR * BC;
    sw.m = sw.acc + BR * Ev;
    sw.l = sw.m + BR;
    double *qb = sw.qb, *kb = sw.kb, *scores = sw.scores, *acc = sw.acc, *m = sw.m, *l = sw.l;

    for (int64_t i0 = 0; i0 < L; i0 += BR) {
        int64_t nr = L - i0 < BR ? L - i0 : BR;
        attn_pack_rows(qb, &p->q, i0, nr);
        if (p->rope) attn_rope_apply_f64(qb, E, 1, nr, p->rope, p->rope_q0 + i0, 1);
        block_rows(p, sw, i0, nr, 1.0);
        /* Values near DBL_MAX (f64 inputs) can overflow acc though out, a
         * weighted mean of them, is finite: then the block is done again
         * on the values scaled down by a power of two, and out scaled back
         * up, which is exact unless a product of weight and value falls to
         * the subnormal range. Every row of such a block is redone, so its
         * rows that were finite get the scaled pass's bits, the same but
         * for that case; inf or NaN that the inputs brought stay what they
         * were (their blocks are redone too, rare and to no effect). */
        double unscale = 1.0;
        if (!all_finite(acc, nr * Ev)) {
            double vscale = overflow_free_scale(p);
            block_rows(p, sw, i0, nr, vscale);
            unscale = 1.0 / vscale;
        }

        /* A row with no key taking part (l == 0) gives 0, never 0/0, and
         * its log-sum-exp is -inf. */
        for (int64_t r = 0; r < nr; r++) {
            for (int64_t e = 0; e < Ev; e++)
                attn_mat_set(&p->out, i0 + r, e, l[r] == 0.0 ? 0.0 : row_out(acc[r * Ev + e], l[r], unscale, p));
            if (p->lse.base) attn_mat_set(&p->lse, i0 + r, 0, attn_lse(m[r], l[r]));
        }

        /* The weights need the final m and l, so they take a second sweep. */
        if (p->weights.base) {
            for (int64_t j0 = 0; j0 < S; j0 += BC) {
                int64_t nc = S - j0 < BC ? S - j0 : BC;
                attn_rows_pack_f64(kb, &p->k, j0, nc);
                if (p->rope) attn_rope_apply_f64(kb, E, 1, nc, p->rope, p->rope_k0 + j0, 1);
                block_scores(scores, p, qb, kb, i0, nr, j0, nc);
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t c = 0; c < nc; c++) {
                        double s = scores[r * BC + c];
                        double w = s == -INFINITY ? 0.0 : attn_softmax_term(s, m[r]) / l[r];
                        if (p->dropout_p > 0)
                            w = attn_dropout_keeps(p, i0 + r, j0 + c) ? w * attn_dropout_scale(p->dropout_p) : 0.0;
                        attn_mat_set(&p->weights, i0 + r, j0 + c, w);
                    }
            }
        }
    }
}

void attn_exact_rows(const attn_problem *p, int64_t i0, int64_t n, double *work) {
    attn_problem sub = *p;
    sub.q.base += i0 * p->q.rs * (int64_t)attn_dtype_size(p->q.dtype);
    sub.q.rows = n;
    sub.out.base += i0 * p->out.rs * (int64_t)attn_dtype_size(p->out.dtype);
    sub.out.rows = n;
    if (sub.mask.base) sub.mask.base += i0 * p->mask.rs * (int64_t)attn_dtype_size(p->mask.dtype);
    if (sub.lse.base) sub.lse.base += i0 * p->lse.rs * (int64_t)attn_dtype_size(p->lse.dtype);
    sub.causal_offset += i0; /* row r of sub is row i0 + r of p */
    sub.alibi_offset += i0;
    sub.rope_q0 += i0;
    sub.row0 += i0;
    attn_stream_kernel(&sub, work);
}
