/* explain.c -- every intermediate matrix of one attention head, for the
 * explainer (`attn explain` and the web page). All arithmetic goes through
 * the library's own attn_scores and attn_sdpa: the explainer shows exactly
 * what the library computes. */
#include "attn_teach.h"
#include "base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* c (n, m) = a (n, d) · b (d, m), as scores of q = a against keys = bᵀ with
 * scale 1: bᵀ is b seen through swapped strides, so nothing is copied. */
static attn_status project(double *c, const double *a, const double *b, int n, int d, int m,
                           attn_error *err) {
    attn_tensor ta, tb, tc;
    int64_t sa[2] = {n, d}, sb[2] = {m, d}, sc[2] = {n, m}, stb[2] = {1, m};
    attn_tensor_init(&ta, (void *)a, ATTN_F64, 2, sa, NULL, NULL);
    attn_tensor_init(&tb, (void *)b, ATTN_F64, 2, sb, stb, NULL);
    attn_tensor_init(&tc, c, ATTN_F64, 2, sc, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = 1.0;
    return attn_scores(&tc, &ta, &tb, &o, err);
}

/* The first non-finite element of m (rows, cols), or ATTN_OK: NaN and
 * infinite numbers would turn the whole story into NaN weights. */
static attn_status finite(const double *m, int rows, int cols, const char *name, attn_status code, const char *why,
                          attn_error *err) {
    for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        if (!isfinite(m[i]))
            return attn_fail(err, code, "%s (row %lld, column %lld, counting from 0) is %s%s", name, (long long)(i / cols),
                             (long long)(i % cols), isnan(m[i]) ? "nan" : m[i] > 0 ? "inf" : "-inf", why);
    return ATTN_OK;
}

static attn_status check_input(const attn_explain_input *in, attn_error *err) {
    if (!in || !in->X) return attn_fail(err, ATTN_ERR_NULL, "input or X is NULL");
    if (in->mode != ATTN_EXPLAIN_QKV && in->mode != ATTN_EXPLAIN_DOT &&
        in->mode != ATTN_EXPLAIN_AVERAGE)
        return attn_fail(err, ATTN_ERR_OPTION, "mode %d is not an attn_explain_mode", (int)in->mode);
    if (in->n_tokens < 1 || in->d_model < 1)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "n_tokens (%d) and d_model (%d) must be >= 1",
                         in->n_tokens, in->d_model);
    if ((unsigned)in->positions > ATTN_EXPLAIN_ROPE)
        return attn_fail(err, ATTN_ERR_OPTION, "positions %d is not an attn_explain_positions", (int)in->positions);
    if (in->positions && in->mode != ATTN_EXPLAIN_QKV)
        return attn_fail(err, ATTN_ERR_OPTION, "positions need mode qkv (the projections)");
    if (in->X_source && (in->n_source < 1 || in->causal || in->positions == ATTN_EXPLAIN_SINUSOIDAL))
        return attn_fail(err, ATTN_ERR_OPTION, "cross-attention (X_source) needs n_source >= 1, and takes no causal mask "
                         "and no sinusoidal positions");
    if (in->positions == ATTN_EXPLAIN_ROPE && in->d_k % 2)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "RoPE turns pairs: d_k (%d) must be even", in->d_k);
    if (in->mode == ATTN_EXPLAIN_QKV) {
        if (!in->W_Q || !in->W_K || !in->W_V)
            return attn_fail(err, ATTN_ERR_NULL, "mode qkv needs W_Q, W_K and W_V");
        if (in->d_k < 1 || in->d_v < 1)
            return attn_fail(err, ATTN_ERR_ARGUMENT, "d_k (%d) and d_v (%d) must be >= 1",
                             in->d_k, in->d_v);
    }
    static const char WHY[] = ": the explainer needs finite numbers";
    attn_status st = finite(in->X, in->n_tokens, in->d_model, "X", ATTN_ERR_ARGUMENT, WHY, err);
    if (!st && in->X_source) st = finite(in->X_source, in->n_source, in->d_model, "X_source", ATTN_ERR_ARGUMENT, WHY, err);
    if (!st && in->mode == ATTN_EXPLAIN_QKV) {
        st = finite(in->W_Q, in->d_model, in->d_k, "W_Q", ATTN_ERR_ARGUMENT, WHY, err);
        if (!st) st = finite(in->W_K, in->d_model, in->d_k, "W_K", ATTN_ERR_ARGUMENT, WHY, err);
        if (!st) st = finite(in->W_V, in->d_model, in->d_v, "W_V", ATTN_ERR_ARGUMENT, WHY, err);
    }
    return st;
}

/* Finite inputs can still overflow a double on the way (a dot product of
 * 1e300s): every matrix shown must be a number. scaled is Q·Kᵀ·scale with
 * -inf where masked, finite wherever scores is. */
static attn_status all_finite(const attn_explain *ex, attn_error *err) {
    static const char WHY[] = ": the numbers overflow a double; make the inputs smaller";
    const struct { const double *m; int rows, cols; const char *name; } shown[] = {
        {ex->Q, ex->n, ex->d_k, "Q"},           {ex->K, ex->n_keys, ex->d_k, "K"},
        {ex->V, ex->n_keys, ex->d_v, "V"},      {ex->scores, ex->n, ex->n_keys, "Q K^T"},
        {ex->weights, ex->n, ex->n_keys, "the weights"}, {ex->output, ex->n, ex->d_v, "the output"}};
    attn_status st = ATTN_OK;
    for (size_t i = 0; !st && i < sizeof shown / sizeof shown[0]; i++)
        st = finite(shown[i].m, shown[i].rows, shown[i].cols, shown[i].name, ATTN_ERR_OVERFLOW, WHY, err);
    return st;
}

/* xp = X, or X + P with sinusoidal positions (ex->P, after xp in the block). */
static attn_status positioned(attn_explain *ex, double *xp, const attn_explain_input *in, attn_error *err) {
    size_t count = (size_t)in->n_tokens * (size_t)in->d_model;
    memcpy(xp, in->X, sizeof(double) * count);
    if (in->positions != ATTN_EXPLAIN_SINUSOIDAL) return ATTN_OK;
    ex->P = xp + count;
    attn_tensor tp;
    int64_t shape[2] = {in->n_tokens, in->d_model};
    attn_tensor_init(&tp, ex->P, ATTN_F64, 2, shape, NULL, NULL);
    attn_status st = attn_sinusoidal_positions(&tp, 0, err);
    for (size_t i = 0; !st && i < count; i++) xp[i] += ex->P[i];
    return st;
}

/* With RoPE, Q and K turned in place, row i at position i. */
static attn_status turned(attn_explain *ex, const attn_explain_input *in, attn_error *err) {
    if (in->positions != ATTN_EXPLAIN_ROPE) return ATTN_OK;
    attn_tensor tq, tk;
    int64_t shape[2] = {ex->n, ex->d_k}, kshape[2] = {ex->n_keys, ex->d_k};
    attn_tensor_init(&tq, ex->Q, ATTN_F64, 2, shape, NULL, NULL), attn_tensor_init(&tk, ex->K, ATTN_F64, 2, kshape, NULL, NULL);
    attn_rope_options r = attn_rope_options_default();
    r.linear_scaling = 2; /* half a radian per word in the fast pair: no wrap within a sentence */
    attn_status st = attn_rope(&tq, &tq, &r, err);
    return st ? st : attn_rope(&tk, &tk, &r, err);
}

attn_status attn_explain_run(attn_explain *ex, const attn_explain_input *in, attn_error *err) {
    if (!ex) return attn_fail(err, ATTN_ERR_NULL, "explain result is NULL");
    memset(ex, 0, sizeof *ex);
    attn_status st = check_input(in, err);
    if (st) return st;

    bool qkv = in->mode == ATTN_EXPLAIN_QKV;
    int n = in->n_tokens, dk = qkv ? in->d_k : in->d_model, dv = qkv ? in->d_v : in->d_model;
    int m = in->X_source ? in->n_source : n; /* keys */
    /* One block for all the matrices: Q (n, dk), K (m, dk), V (m, dv),
     * output (n, dv), scores, scaled, weights (n, m), and P and X + P (n,
     * d_model). */
    int64_t words, a, c, x;
    if (!attn_mul_i64((int64_t)n + m, (int64_t)dk + dv, &a) || !attn_mul_i64(3 * (int64_t)n, m, &c) ||
        !attn_mul_i64(2 * (int64_t)n, in->d_model, &x) || !attn_add_i64(a, c, &words) ||
        !attn_add_i64(words, x, &words) || (uint64_t)words > SIZE_MAX / sizeof(double))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "matrices for %d tokens overflow", n);
    double *block = malloc((size_t)words * sizeof(double));
    if (!block) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the explainer's matrices");
    ex->n = n, ex->n_keys = m, ex->d_model = in->d_model, ex->d_k = dk, ex->d_v = dv;
    ex->Q = block;
    ex->K = ex->Q + (size_t)n * dk;
    ex->V = ex->K + (size_t)m * dk;
    ex->output = ex->V + (size_t)m * dv;
    ex->scores = ex->output + (size_t)n * dv;
    ex->scaled = ex->scores + (size_t)n * m;
    ex->weights = ex->scaled + (size_t)n * m;
    double *xp = ex->weights + (size_t)n * m; /* X + P (or X) */
    const double *xs = in->X_source ? in->X_source : xp; /* where keys and values come from */

    if (qkv) {
        if ((st = positioned(ex, xp, in, err)) || (st = project(ex->Q, xp, in->W_Q, n, in->d_model, dk, err)) ||
            (st = project(ex->K, xs, in->W_K, m, in->d_model, dk, err)) ||
            (st = project(ex->V, xs, in->W_V, m, in->d_model, dv, err)) || (st = turned(ex, in, err)))
            goto fail;
        ex->scale = in->no_scale ? 1.0 : 1.0 / sqrt((double)(in->scale_by_d_model ? in->d_model : dk));
    } else {
        /* The first steps: no projections, q = k = v = X. Plain
         * averaging is attention with every score equal: scale 0. */
        size_t row = sizeof(double) * (size_t)in->d_model;
        memcpy(ex->Q, in->X, row * (size_t)n);
        memcpy(ex->K, in->X_source ? in->X_source : in->X, row * (size_t)m);
        memcpy(ex->V, in->X_source ? in->X_source : in->X, row * (size_t)m);
        ex->scale = in->mode == ATTN_EXPLAIN_DOT ? 1.0 : 0.0;
    }

    attn_tensor tq, tk, tv, to, tw, ts;
    int64_t sq[2] = {n, dk}, sk[2] = {m, dk}, sv[2] = {m, dv}, so[2] = {n, dv}, snn[2] = {n, m};
    attn_tensor_init(&tq, ex->Q, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, ex->K, ATTN_F64, 2, sk, NULL, NULL);
    attn_tensor_init(&tv, ex->V, ATTN_F64, 2, sv, NULL, NULL);
    attn_tensor_init(&to, ex->output, ATTN_F64, 2, so, NULL, NULL);
    attn_tensor_init(&tw, ex->weights, ATTN_F64, 2, snn, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = 1.0;
    /* The raw scores Q·Kᵀ, before scaling or masking. */
    attn_tensor_init(&ts, ex->scores, ATTN_F64, 2, snn, NULL, NULL);
    if ((st = attn_scores(&ts, &tq, &tk, &o, err))) goto fail;
    /* Scaled and masked: what the softmax sees (-inf where masked). */
    o.scale = ex->scale;
    o.causal = in->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_tensor_init(&ts, ex->scaled, ATTN_F64, 2, snn, NULL, NULL);
    if ((st = attn_scores(&ts, &tq, &tk, &o, err))) goto fail;
    if ((st = attn_sdpa(&to, NULL, &tw, &tq, &tk, &tv, &o, err)) || (st = all_finite(ex, err))) goto fail;
    return ATTN_OK;
fail:
    attn_explain_free(ex);
    return st;
}

void attn_explain_free(attn_explain *ex) {
    if (!ex) return;
    free(ex->Q);
    memset(ex, 0, sizeof *ex);
}
