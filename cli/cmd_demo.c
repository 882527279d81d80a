/* cmd_demo.c -- `attn demo`: the first worked examples, computed by the
 * library and printed with labels. This is what `make run` shows. */
#include "cli.h"

#include <math.h>
#include <string.h>

/* Six tokens, three features each (Raschka's "Your journey starts with one step"). */
static const char *const SIX_WORDS[6] = {"Your", "journey", "starts", "with", "one", "step"};
static double SIX_X[6][3] = {{0.43, 0.15, 0.89}, {0.55, 0.87, 0.66}, {0.57, 0.85, 0.64},
                             {0.22, 0.58, 0.33}, {0.77, 0.25, 0.10}, {0.05, 0.80, 0.55}};

static void print_matrix(const char *title, const double *m, int rows, int cols,
                         const char *const *row_labels, const char *const *col_labels) {
    printf("%s\n%9s", title, "");
    for (int c = 0; c < cols; c++) printf(" %8s", col_labels ? col_labels[c] : "");
    printf("\n");
    for (int r = 0; r < rows; r++) {
        printf("%9s", row_labels ? row_labels[r] : "");
        for (int c = 0; c < cols; c++) printf(" %8.4f", m[r * cols + c]);
        printf("\n");
    }
    printf("\n");
}

/* out (L, Ev) and weights (L, S) = attention of q (L, E) over k (S, E), v (S, Ev). */
static int attend(double *out, double *weights, double *q, double *k, double *v, int L, int S,
                  int E, int Ev, double scale, attn_causal causal) {
    attn_tensor tq, tk, tv, to, tw;
    attn_error err;
    int64_t sq[2] = {L, E}, sk[2] = {S, E}, sv[2] = {S, Ev}, so[2] = {L, Ev}, sw[2] = {L, S};
    attn_tensor_init(&tq, q, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F64, 2, sk, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F64, 2, sv, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 2, so, NULL, NULL);
    attn_tensor_init(&tw, weights, ATTN_F64, 2, sw, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = scale;
    o.causal = causal;
    if (attn_sdpa(&to, NULL, &tw, &tq, &tk, &tv, &o, &err) != ATTN_OK)
        return cli_error(EXIT_DATA, "%s", err.message);
    return 0;
}

int cmd_demo(int argc, char **argv) {
    if (argc > 1) {
        if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
            puts("usage: attn demo\n\nPrints the first worked examples (six words, from plain averaging to\nattention with trainable weights), computed by libattn.");
            return 0;
        }
        return cli_error(EXIT_USAGE, "attn demo takes no arguments, got '%s'", argv[1]);
    }
    if (cli_stop != CLI_RUN) return 0;
    static const char *const FEATS[3] = {"x0", "x1", "x2"};
    double weights[36], context[18];
    int code;

    puts("Self-attention, computed by libattn\n"
         "===================================\n\n"
         "1. Weights from dot products (no projections, no scaling)\n"
         "   q = k = v = X, scale = 1: weights = softmax(X X^T), context = weights X\n");
    print_matrix("X, one row per token (6, 3):", &SIX_X[0][0], 6, 3, SIX_WORDS, FEATS);
    if ((code = attend(context, weights, &SIX_X[0][0], &SIX_X[0][0], &SIX_X[0][0], 6, 6, 3, 3, 1.0,
                       ATTN_CAUSAL_NONE)))
        return code;
    print_matrix("weights = softmax(X X^T), each row sums to 1 (6, 6):", weights, 6, 6, SIX_WORDS,
                 SIX_WORDS);
    print_matrix("context = weights X (6, 3):", context, 6, 3, SIX_WORDS, FEATS);
    printf("   The context vector of \"journey\" is [%.4f, %.4f, %.4f].\n\n", context[3],
           context[4], context[5]);

    puts("2. A causal mask: each token sees only itself and the tokens before it\n");
    if ((code = attend(context, weights, &SIX_X[0][0], &SIX_X[0][0], &SIX_X[0][0], 6, 6, 3, 3, 1.0,
                       ATTN_CAUSAL_TOP_LEFT)))
        return code;
    print_matrix("causal weights (6, 6): zero above the diagonal", weights, 6, 6, SIX_WORDS,
                 SIX_WORDS);

    puts("3. Why divide by sqrt(d_k): one row of scores [4, 16, 12] with d_k = 3\n");
    /* One query [1] against keys [4], [16], [12]: the scores are the keys. With
     * v the identity, the output row is the weights themselves. */
    double q[1] = {1}, k[3] = {4, 16, 12}, eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, w[3], out[3];
    static const char *const COLS[3] = {"4", "16", "12"};
    static const char *const RAW[1] = {"raw"}, *const SCALED[1] = {"/sqrt(3)"};
    if ((code = attend(out, w, q, k, eye, 1, 3, 1, 3, 1.0, ATTN_CAUSAL_NONE))) return code;
    print_matrix("softmax(scores):", w, 1, 3, RAW, COLS);
    if ((code = attend(out, w, q, k, eye, 1, 3, 1, 3, 1.0 / sqrt(3.0), ATTN_CAUSAL_NONE)))
        return code;
    print_matrix("softmax(scores / sqrt(3)): softer, but the same winner", w, 1, 3, SCALED, COLS);
    puts("Run `attn sdpa --help` to compute attention on your own .npy files.");
    return 0;
}
