/* backward.c -- the exact backward pass of one (batch, head) slice, in f64:
 * the forward recomputed one query row at a time, then differentiated line
 * by line in reverse, in the manner of llm.c's attention_backward. It uses
 * neither the forward's out nor its lse, so it checks them rather than
 * trusting them, and it is the oracle of faster backward kernels.
 *
 * The forward of query row i, as the exact kernels compute it:
 *   F1  s_j   = scale · q_i·k_j, then the score epilogue: soft-capped
 *               (cap · tanh(s_j / cap)), minus the ALiBi bias, plus the
 *               float mask; -inf where the causal limit, the window or a
 *               bool mask excludes key j
 *   F2  P_j   = exp(s_j - m) / l,  m = max_j s_j,  l = sum_j exp(s_j - m)
 *   F3  out_i = sum_j P_j z_j v_j   (z_j = 1, or with dropout 0 for a
 *               dropped weight and 1/(1 - p) for a kept one)
 * and its gradients, given dout_i = dLoss/dout_i:
 *   from F3: dv_j += P_j z_j dout_i;  dP_j = z_j dout_i · v_j
 *   from F2: dS_j  = P_j (dP_j - sum_k P_k dP_k)   (the softmax's Jacobian)
 *   from F1: dmask_ij += dS_j;  dS_j *= c_j (the cap's derivative 1 -
 *            tanh², 1 without a cap: the bias and the mask add after it);
 *            dq_i += scale · sum_j dS_j k_j;  dk_j += scale · dS_j q_i
 * A key F1 excludes has P_j = 0 and is skipped, so a NaN in its value cannot
 * leak in; a row with no key taking part has zero gradients.
 *
 * A piece of the keys (p->softmax_from_lse: attention split over key
 * blocks or machines) has only some of the row's keys: F2 is then the
 * whole's, P_j = exp(s_j - lse_i) with the whole row's lse, and the
 * softmax's Jacobian sums over all the row's keys, sum_k P_k dP_k =
 * dout_i · out_i with the whole row's out. */
#include "exact/exact.h"
#include "kernels/rope.h"
#include "kernels/dropout.h"
#include "kernels/score.h"

int64_t attn_backward_work_size(int64_t S, int64_t E, int64_t Ev) {
    /* k, v, dk, dv (S × (E + Ev) twice), s, P, dP, c (4 S), q, dq (2 E), dout (Ev) */
    int64_t kv, a, n;
    if (!attn_add_i64(E, Ev, &kv) || !attn_mul_i64(S, kv, &a) || !attn_mul_i64(a, 2, &n)) return -1;
    if (!attn_add_i64(n, 4 * S, &n) || !attn_add_i64(n, 2 * E + Ev, &n)) return -1;
    return n;
}

/* Add the n × cols packed rows src into the f64 accumulator m. */
static void accumulate(const attn_mat *m, const double *src, int64_t n, int64_t cols) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < cols; c++) attn_mat_set(m, r, c, attn_mat_get(m, r, c) + src[r * cols + c]);
}

/* F1 and F2 for row i: P (S) from the scores s (S), and the cap's
 * derivative c (S). Returns false when no key takes part (l == 0, or the
 * whole row's lse is -inf for a piece). P_j is -1 for a key F1 excludes. */
static bool row_softmax(double *P, double *c, double *s, const attn_problem *p, const double *q, const double *k,
                        int64_t i) {
    int64_t S = p->k.rows, E = p->q.cols, seen = attn_keys_seen(p, i, 0, S);
    for (int64_t j = 0; j < S; j++) s[j] = j < seen ? attn_dot(q, k + j * E, E) * p->scale : 0; /* F1 */
    attn_score_block sb = {s, true, S}, cb = {c, true, S};
    for (int64_t j = 0; j < S; j++) c[j] = 1;
    attn_score_epilogue(NULL, sb, p, i, 1, 0, S, S, p->causal, &cb, NULL);
    if (p->softmax_from_lse) { /* F2 of the whole row, whose lse the forward gave */
        double lse = attn_mat_get(&p->lse, i, 0);
        for (int64_t j = 0; j < S; j++) P[j] = s[j] == -INFINITY ? -1 : attn_exp_or_zero(s[j] - lse);
        return lse != -INFINITY;
    }
    double m, l, m0; /* F2, from a sink's (m, l) when there is one */
    attn_softmax_start(p, &m, &l);
    m0 = m;
    for (int64_t j = 0; j < S; j++) m = s[j] > m ? s[j] : m;
    l = l == 0 ? 0.0 : attn_softmax_term(m0, m);
    for (int64_t j = 0; j < S; j++)
        if (s[j] != -INFINITY) l += attn_softmax_term(s[j], m);
    for (int64_t j = 0; j < S; j++) P[j] = s[j] == -INFINITY ? -1 : attn_softmax_term(s[j], m) / l;
    return l != 0;
}

// dq is (L, E), dk is (S, E), dv is (S, Ev), dmask is (L, S): f64 accumulators
// q is (L, E), k is (S, E), v is (S, Ev), dout is (L, Ev)
void attn_backward_kernel(const attn_grad_problem *g, double *work) {
    const attn_problem *p = &g->f;
    int64_t L = p->q.rows, E = p->q.cols, S = p->k.rows, Ev = p->v.cols;
    double *k = work, *v = k + S * E, *dk = v + S * Ev, *dv = dk + S * E;
    double *s = dv + S * Ev, *P = s + S, *dP = P + S, *c = dP + S, *q = c + S, *dq = q + E, *dout = dq + E;
    attn_rows_pack_f64(k, &p->k, 0, S);
    if (p->rope) attn_rope_apply_f64(k, E, 1, S, p->rope, p->rope_k0, 1); /* dq, dk are turned back at the end */
    attn_rows_pack_f64(v, &p->v, 0, S);
    for (int64_t x = 0; x < S * (E + Ev); x++) dk[x] = 0; /* dk and dv */

    for (int64_t i = 0; i < L; i++) {
        attn_pack_rows(q, &p->q, i, 1);
        if (p->rope) attn_rope_apply_f64(q, E, 1, 1, p->rope, p->rope_q0 + i, 1);
        if (!row_softmax(P, c, s, p, q, k, i)) continue; /* no key: every gradient of the row is 0 */
        attn_pack_rows(dout, &g->dout, i, 1);
        /* from F3: dv_j += P_j z_j dout_i, dP_j = z_j dout_i · v_j */
        double D = 0, keep = attn_dropout_scale(p->dropout_p); /* D = sum_k P_k dP_k */
        if (p->softmax_from_lse) /* over all the row's keys, most of them elsewhere: dout_i · out_i */
            for (int64_t e = 0; e < Ev; e++) D += dout[e] * attn_mat_get(&p->out, i, e);
        for (int64_t j = 0; j < S; j++) {
            if (P[j] < 0) continue;
            double z = p->dropout_p > 0 ? (attn_dropout_keeps(p, i, j) ? keep : 0.0) : 1.0;
            dP[j] = 0;
            if (z == 0) continue; /* a dropped weight: its value was never read */
            for (int64_t e = 0; e < Ev; e++) dv[j * Ev + e] += P[j] * z * dout[e];
            dP[j] = z * attn_dot(dout, v + j * Ev, Ev);
            if (!p->softmax_from_lse) D += P[j] * dP[j];
        }
        /* from F2, then F1 */
        for (int64_t e = 0; e < E; e++) dq[e] = 0;
        for (int64_t j = 0; j < S; j++) {
            if (P[j] < 0) continue;
            double dS = P[j] * (dP[j] - D);
            if (g->dmask.base) attn_mat_set(&g->dmask, i, j, attn_mat_get(&g->dmask, i, j) + dS);
            dS *= c[j];
            for (int64_t e = 0; e < E; e++) {
                dq[e] += dS * k[j * E + e];
                dk[j * E + e] += p->scale * dS * q[e];
            }
        }
        if (g->dq.base)
            for (int64_t e = 0; e < E; e++) attn_mat_set(&g->dq, i, e, attn_mat_get(&g->dq, i, e) + p->scale * dq[e]);
    }
    if (g->dk.base) accumulate(&g->dk, dk, S, E);
    if (g->dv.base) accumulate(&g->dv, dv, S, Ev);
}
