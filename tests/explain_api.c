/* explain_api.c -- test helper: the toy model's matrices for a sentence,
 * computed through the public API and printed one matrix per line as
 * "NAME v1 v2 ..." with %.17g (exact), for comparison with `attn explain
 * --json`. Usage: explain_api [--random-head] [--causal] SENTENCE */
#include "attn_teach.h"

#include <stdio.h>
#include <string.h>

static void dump(const char *name, const double *m, int n) {
    printf("%s", name);
    for (int i = 0; i < n; i++) printf(" %.17g", m[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    attn_toy_head head = ATTN_TOY_WIRED;
    int causal = 0, i = 1;
    for (; i < argc - 1; i++) {
        if (strcmp(argv[i], "--random-head") == 0) head = ATTN_TOY_RANDOM;
        if (strcmp(argv[i], "--causal") == 0) causal = 1;
    }
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    int n;
    attn_error err;
    double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL], wq[32], wk[32], wv[32];
    if (argc < 2 || attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, argv[argc - 1], &err) ||
        attn_toy_embed(x, tok, n, &err) || attn_toy_weights(wq, wk, wv, head, &err)) {
        fprintf(stderr, "%s\n", argc < 2 ? "usage" : err.message);
        return 1;
    }
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv,
                             ATTN_EXPLAIN_QKV, causal, 0, 0, ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_explain ex;
    if (attn_explain_run(&ex, &in, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    dump("X", x, n * ATTN_TOY_D_MODEL);
    dump("W_Q", wq, 32), dump("W_K", wk, 32), dump("W_V", wv, 32);
    dump("Q", ex.Q, n * ex.d_k), dump("K", ex.K, n * ex.d_k), dump("V", ex.V, n * ex.d_v);
    dump("scores", ex.scores, n * n), dump("scaled", ex.scaled, n * n);
    dump("weights", ex.weights, n * n), dump("output", ex.output, n * ex.d_v);
    attn_explain_free(&ex);
    return 0;
}
