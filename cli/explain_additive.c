/* explain_additive.c -- `attn explain --score additive`: "a dot product, or a
 * small network?" The same queries and keys scored by additive attention,
 * v . tanh(W1 q + W2 k) with W1 = W2 = I and v = 1, beside the dot product's
 * weights, and what each costs, measured. */
#include "explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}


/* Best of three times of the scores of T = 512 queries against T keys, d =
 * hidden = 64, by each scorer, in double. */
static int measure(double *dot_ms, double *add_ms) {
    enum { T = 512, D = 64 };
    double *q = malloc(sizeof(double) * T * D * 2), *s = malloc(sizeof(double) * T * T);
    double *w = malloc(sizeof(double) * (D * D * 2 + D));
    if (!q || !s || !w) return free(q), free(s), free(w), cli_error(EXIT_DATA, "out of memory");
    for (int i = 0; i < T * D * 2; i++) q[i] = (double)((i * 7919) % 1000) / 1000 - 0.5;
    for (int i = 0; i < D * D * 2 + D; i++) w[i] = (double)((i * 104729) % 1000) / 8000 - 0.0625;
    attn_tensor tq, tk, ts;
    int64_t sh[2] = {T, D}, ss[2] = {T, T};
    attn_tensor_init(&tq, q, ATTN_F64, 2, sh, NULL, NULL), attn_tensor_init(&tk, q + T * D, ATTN_F64, 2, sh, NULL, NULL);
    attn_tensor_init(&ts, s, ATTN_F64, 2, ss, NULL, NULL);
    *dot_ms = *add_ms = 1e30;
    attn_status st = ATTN_OK;
    for (int rep = 0; rep < 3 && !st; rep++) {
        double t0 = seconds();
        st = attn_scores(&ts, &tq, &tk, NULL, NULL);
        double t1 = seconds();
        if (!st) st = attn_additive_scores(s, q, T, q + T * D, T, D, w, w + D * D, w + 2 * D * D, D, NULL);
        double t2 = seconds();
        *dot_ms = fmin(*dot_ms, 1e3 * (t1 - t0)), *add_ms = fmin(*add_ms, 1e3 * (t2 - t1));
    }
    free(q), free(s), free(w);
    return st ? cli_error(EXIT_DATA, "the cost measurement failed") : 0;
}

int explain_additive(const explain_args *a, const explain_model *m, const attn_explain *ex) {
    int n = m->n, nk = ex->n_keys, dk = ex->d_k;
    double *eye = calloc((size_t)(dk * dk + dk), sizeof(double)), *s = malloc(sizeof(double) * (size_t)(n * nk));
    attn_explain add = *ex;
    add.weights = malloc(sizeof(double) * (size_t)(n * nk));
    if (!eye || !s || !add.weights) return free(eye), free(s), free(add.weights), cli_error(EXIT_DATA, "out of memory");
    for (int u = 0; u < dk; u++) eye[u * dk + u] = 1, eye[dk * dk + u] = 1; /* W1 = W2 = I, v = 1 */
    attn_error err;
    int code = 0;
    if (attn_additive_scores(s, ex->Q, n, ex->K, nk, dk, eye, eye, eye + dk * dk, dk, &err) ||
        attn_softmax_rows(add.weights, s, n, nk, a->causal, &err))
        code = cli_error(EXIT_DATA, "%s", err.message);
    if (!code) {
        printf("\nA dot product, or a small network?\n");
        cli_prose(stdout, 3, 3, "Before the Transformer, additive attention scored a pair with a tiny network, "
                  "v . tanh(W1 q + W2 k). Here it scores the same Q and K, with W1 = W2 = I and v = 1:");
        char **keys = m->src_tokens ? m->src_tokens : m->tokens;
        explain_heading("additive weights = softmax of v . tanh(q + k), row by row", n, nk, NULL);
        explain_weights_matrix(add.weights, n, nk, m->tokens, keys, a->causal, CLI_NO_COLOUR);
        printf("\nwho attends to whom, additive\n");
        explain_summary(m, &add, a->causal);
        printf("\n");
        cli_prose(stdout, 3, 3, "It adds the query and the key before the nonlinearity, so a key that is large "
                  "everywhere scores high with every query: to express \"this query matches this key\" it must "
                  "learn W1, W2 and v. The dot product gets matching for free.");
        double dot_ms = 0, add_ms = 0;
        if (!(code = measure(&dot_ms, &add_ms)))
            printf("\n"),
            cli_prose(stdout, 0, 0, "The cost, per pair: the dot product takes d multiply-adds; the network takes, "
                      "per hidden unit, an addition, a tanh and a multiply-add. Measured here, 512 x 512 pairs, d = "
                      "hidden = 64, in double: dot products %.1f ms (attn_scores' exact kernel, plain loops; a tuned "
                      "matrix product is faster still), additive %.1f ms: %.0f times slower.",
                      dot_ms, add_ms, add_ms / dot_ms);
    }
    free(eye), free(s), free(add.weights);
    return code;
}
