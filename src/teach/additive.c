/* additive.c -- additive attention's scores (attn_teach.h): the small
 * network that scored pairs before the Transformer's dot product, kept
 * here so the explainer can show both on the same words, with their cost. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/disjoint.h"

#include <math.h>
#include <stdlib.h>

/* out (rows, hidden) = x (rows, d) W (d, hidden). */
static void project(double *out, const double *x, int rows, int d, const double *w, int hidden) {
    for (int i = 0; i < rows; i++)
        for (int u = 0; u < hidden; u++) {
            double s = 0;
            for (int e = 0; e < d; e++) s += x[i * d + e] * w[e * hidden + u];
            out[i * hidden + u] = s;
        }
}

attn_status attn_additive_scores(double *scores, const double *q, int n, const double *k, int m, int d,
                                 const double *w1, const double *w2, const double *v, int hidden, attn_error *err) {
    if (!scores || !q || !k || !w1 || !w2 || !v) return attn_fail(err, ATTN_ERR_NULL, "an argument of attn_additive_scores is NULL");
    if (n < 1 || m < 1 || d < 1 || hidden < 1)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "n (%d), m (%d), d (%d) and hidden (%d) must be >= 1", n, m, d, hidden);
    const teach_array arrays[6] = {{scores, (int64_t)n * m, 8, "scores"}, {q, (int64_t)n * d, 8, "q"},
                                   {k, (int64_t)m * d, 8, "k"},           {w1, (int64_t)d * hidden, 8, "w1"},
                                   {w2, (int64_t)d * hidden, 8, "w2"},    {v, hidden, 8, "v"}};
    attn_status st = teach_check_disjoint(arrays, 1, 6, err);
    if (st) return st;
    int64_t words;
    if (!attn_mul_i64((int64_t)n + m, hidden, &words) || (uint64_t)words > SIZE_MAX / sizeof(double))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the projected queries and keys overflow");
    double *a = malloc(sizeof(double) * (size_t)words);
    if (!a) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the projected queries and keys");
    double *b = a + (size_t)n * (size_t)hidden;
    project(a, q, n, d, w1, hidden), project(b, k, m, d, w2, hidden);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int u = 0; u < hidden; u++) s += v[u] * tanh(a[i * hidden + u] + b[j * hidden + u]);
            scores[(size_t)i * m + j] = s;
        }
    free(a);
    return ATTN_OK;
}

attn_status attn_softmax_rows(double *weights, const double *scores, int n, int m, int causal, attn_error *err) {
    if (!weights || !scores) return attn_fail(err, ATTN_ERR_NULL, "weights or scores is NULL");
    if (n < 1 || m < 1) return attn_fail(err, ATTN_ERR_ARGUMENT, "n (%d) and m (%d) must be >= 1", n, m);
    const teach_array arrays[2] = {{weights, (int64_t)n * m, 8, "weights"}, {scores, (int64_t)n * m, 8, "scores"}};
    attn_status st = teach_check_disjoint(arrays, 1, 2, err);
    if (st) return st;
    double *zero = calloc((size_t)n + (size_t)m + (size_t)n, sizeof(double)); /* q (n, 1), k = v (m, 1), out (n, 1) */
    if (!zero) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the softmax's operands");
    attn_tensor q, k, out, w, mask;
    int64_t sq[2] = {n, 1}, sk[2] = {m, 1}, sw[2] = {n, m};
    attn_tensor_init(&q, zero, ATTN_F64, 2, sq, NULL, NULL), attn_tensor_init(&k, zero + n, ATTN_F64, 2, sk, NULL, NULL);
    attn_tensor_init(&out, zero + n + m, ATTN_F64, 2, sq, NULL, NULL), attn_tensor_init(&w, weights, ATTN_F64, 2, sw, NULL, NULL);
    attn_tensor_init(&mask, (void *)scores, ATTN_F64, 2, sw, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &mask, o.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    st = attn_sdpa(&out, NULL, &w, &q, &k, &k, &o, err);
    free(zero);
    return st;
}
