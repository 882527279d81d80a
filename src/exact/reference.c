/* reference.c -- the row-at-a-time kernels: the reference attention (the
 * textbook two-pass softmax, kept plain so tests can compare the streaming
 * kernel against an independent implementation), and the scores alone. */
#include "exact/exact.h"
#include "kernels/dropout.h"
#include "kernels/rope.h"
#include "kernels/score.h"

int64_t attn_reference_work_size(int64_t S, int64_t E, int64_t Ev) {
    /* one row of scores (S), one query row (E), one key row (E), one output row (Ev) */
    int64_t n;
    if (!attn_add_i64(S, E, &n) || !attn_add_i64(n, E, &n) || !attn_add_i64(n, Ev, &n)) return -1;
    return n;
}

/* scores[j] = score of query i against key j (-inf when excluded). */
static void row_scores(double *scores, const attn_problem *p, int64_t i, double *qrow,
                       double *krow) {
    attn_pack_rows(qrow, &p->q, i, 1);
    if (p->rope) attn_rope_apply_f64(qrow, 0, 1, 1, p->rope, p->rope_q0 + i, 1);
    for (int64_t j = 0; j < p->k.rows; j++) {
        attn_rows_pack_f64(krow, &p->k, j, 1);
        if (p->rope) attn_rope_apply_f64(krow, 0, 1, 1, p->rope, p->rope_k0 + j, 1);
        scores[j] = attn_dot(qrow, krow, p->q.cols) * p->scale;
    }
    attn_score_block sb = {scores, true, p->k.rows};
    attn_score_epilogue(NULL, sb, p, i, 1, 0, p->k.rows, p->k.rows, p->causal, NULL, NULL);
}

// q is (L, E), k is (S, E), out is the scores (L, S)
void attn_scores_kernel(const attn_problem *p, double *work) {
    int64_t S = p->k.rows, E = p->q.cols;
    double *scores = work, *qrow = scores + S, *krow = qrow + E;
    for (int64_t i = 0; i < p->q.rows; i++) {
        row_scores(scores, p, i, qrow, krow);
        for (int64_t j = 0; j < S; j++) attn_mat_set(&p->out, i, j, scores[j]);
    }
}

// q is (L, E), k is (S, E), v is (S, Ev), out is (L, Ev), weights is (L, S)
void attn_reference_kernel(const attn_problem *p, double *work) {
    int64_t L = p->q.rows, E = p->q.cols, S = p->k.rows, Ev = p->v.cols;
    double *scores = work, *qrow = scores + S, *krow = qrow + E, *orow = krow + E;

    for (int64_t i = 0; i < L; i++) {
        row_scores(scores, p, i, qrow, krow);
        double m, l, m0;
        attn_softmax_start(p, &m, &l); /* a sink's (m, l), or (-inf, 0) */
        m0 = m;
        for (int64_t j = 0; j < S; j++) /* a NaN score is the maximum: the row is NaN, lse too (below) */
            if (scores[j] > m || isnan(scores[j])) m = scores[j];
        l = l == 0 ? 0.0 : attn_softmax_term(m0, m);
        for (int64_t j = 0; j < S; j++)
            if (scores[j] != -INFINITY) l += attn_softmax_term(scores[j], m);
        /* Normalise each weight first, then mix the values (as PyTorch's math
         * path does). Excluded keys are skipped, so NaN in a masked value
         * cannot reach the row; a row with no key taking part stays 0. */
        for (int64_t e = 0; e < Ev; e++) orow[e] = 0.0;
        for (int64_t j = 0; j < S; j++) {
            if (scores[j] == -INFINITY) {
                scores[j] = 0.0;
                continue;
            }
            scores[j] = attn_softmax_term(scores[j], m) / l;
            if (p->dropout_p > 0) { /* a dropped key is not read, like a masked one */
                if (!attn_dropout_keeps(p, i, j)) {
                    scores[j] = 0.0;
                    continue;
                }
                scores[j] *= attn_dropout_scale(p->dropout_p);
            }
            for (int64_t e = 0; e < Ev; e++) orow[e] += scores[j] * attn_rows_get(&p->v, j, e);
        }
        for (int64_t e = 0; e < Ev; e++) attn_mat_set(&p->out, i, e, orow[e]);
        if (p->lse.base) attn_mat_set(&p->lse, i, 0, attn_lse(m, l));
        if (p->weights.base)
            for (int64_t j = 0; j < S; j++) attn_mat_set(&p->weights, i, j, scores[j]);
    }
}
