/* cmd_demo.c -- `attn demo`: the first worked examples, computed by the
 * library and printed with labels, in the order the classic six-token walk
 * tells them: plain averaging, weights from dot products (scores, weights,
 * context), attention with trainable weights (Q, K, V of the key size d_k,
 * divided by sqrt(d_k)), why divide by sqrt(d_k), a causal mask, and a head
 * that learns. (`make run` shows `attn explain`, the toy model's head step by
 * step.) */
#include "attn_teach.h"
#include "cli.h"
#include "text.h"

#include <math.h>
#include <string.h>

/* Six tokens, three features each (Raschka's "Your journey starts with one step"). */
static const char *const SIX_WORDS[6] = {"Your", "journey", "starts", "with", "one", "step"};
static double SIX_X[6][3] = {{0.43, 0.15, 0.89}, {0.55, 0.87, 0.66}, {0.57, 0.85, 0.64},
                             {0.22, 0.58, 0.33}, {0.77, 0.25, 0.10}, {0.05, 0.80, 0.55}};

/* Untrained projections for the six tokens, d_in = 3 to d_out = 2, used as
 * X W (fixed numbers in [0, 1), as a uniform random start would give). */
static double SIX_WQ[3][2] = {{0.29, 0.40}, {0.23, 0.80}, {0.86, 0.52}};
static double SIX_WK[3][2] = {{0.91, 0.14}, {0.37, 0.65}, {0.05, 0.78}};
static double SIX_WV[3][2] = {{0.62, 0.33}, {0.18, 0.94}, {0.47, 0.09}};
static const char *const SIX_FEATS[3] = {"x0", "x1", "x2"};

/* A titled matrix m (rows, cols), at most 6 x 6, to 4 decimals, in blocks of
 * columns when the terminal is narrower. */
static void print_matrix(const char *title, const double *m, int rows, int cols,
                         const char *const *row_labels, const char *const *col_labels) {
    enum { MAX = 6, CELL = 16 };
    char text[MAX][MAX][CELL];
    const char *head[1 + MAX], *cells[MAX * (1 + MAX)];
    int width[1 + MAX];
    cli_prose(stdout, 0, 3, "%s", title);
    head[0] = "", width[0] = 9;
    for (int c = 0; c < cols; c++) head[1 + c] = col_labels[c], width[1 + c] = 8;
    for (int r = 0; r < rows; r++) {
        cells[r * (1 + cols)] = row_labels[r];
        for (int c = 0; c < cols; c++) {
            snprintf(text[r][c], CELL, "%.4f", m[r * cols + c]);
            cells[r * (1 + cols) + 1 + c] = text[r][c];
        }
    }
    cli_table t = {1 + cols, rows, 1, width, NULL, head, cells};
    cli_print_table(stdout, &t);
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

/* One head of the library's explainer on the six tokens: in `mode`, with
 * W_Q, W_K, W_V of d_out columns (NULL and d_out = 3 in modes average and
 * dot, where q = k = v = X). Returns 0, or the error's exit code. */
static int six_explain(attn_explain *ex, attn_explain_mode mode, int d_out, const double *wq, const double *wk,
                       const double *wv) {
    attn_explain_input in = {6, 3, d_out, d_out, &SIX_X[0][0], wq, wk, wv, mode, 0, 0, 0,
                             ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_error err;
    if (attn_explain_run(ex, &in, &err)) return cli_error(EXIT_DATA, "%s", err.message);
    return 0;
}

/* Plain averaging, by the library's explainer in mode average: every weight
 * is 1/6, so every token gets the same context vector. */
static int averaging(void) {
    attn_explain ex;
    int code = six_explain(&ex, ATTN_EXPLAIN_AVERAGE, 3, NULL, NULL, NULL);
    if (code) return code;
    print_matrix("weights: every token gives every token 1/6 (6, 6):", ex.weights, 6, 6, SIX_WORDS, SIX_WORDS);
    print_matrix("context = the average of the rows of X, the same for every token (6, 3):", ex.output, 6, 3,
                 SIX_WORDS, SIX_FEATS);
    attn_explain_free(&ex);
    return 0;
}

/* Attention with trainable weights on the six tokens: Q = X W_Q, K = X W_K,
 * V = X W_V, each (6, 2), the scores divided by sqrt(d_k) with d_k = 2, the
 * size of the keys (d_out), not of the tokens (d_in = 3). */
static int six_qkv(void) {
    attn_explain ex;
    int code = six_explain(&ex, ATTN_EXPLAIN_QKV, 2, &SIX_WQ[0][0], &SIX_WK[0][0], &SIX_WV[0][0]);
    if (code) return code;
    static const char *const OUT[2] = {"d0", "d1"};
    print_matrix("W_Q (3, 2): d_in = 3 features in, d_out = 2 out (untrained numbers):",
                 &SIX_WQ[0][0], 3, 2, SIX_FEATS, OUT);
    print_matrix("W_K (3, 2):", &SIX_WK[0][0], 3, 2, SIX_FEATS, OUT);
    print_matrix("W_V (3, 2):", &SIX_WV[0][0], 3, 2, SIX_FEATS, OUT);
    print_matrix("Q = X W_Q (6, 2):", ex.Q, 6, 2, SIX_WORDS, OUT);
    print_matrix("K = X W_K (6, 2):", ex.K, 6, 2, SIX_WORDS, OUT);
    print_matrix("weights = softmax(Q K^T / sqrt(2)) (6, 6): d_k = 2, the size of the keys, not d_in = 3",
                 ex.weights, 6, 6, SIX_WORDS, SIX_WORDS);
    print_matrix("output = weights V (6, 2): one row per token, d_out = 2 columns", ex.output, 6, 2, SIX_WORDS,
                 OUT);
    attn_explain_free(&ex);
    return 0;
}

/* sat's row of a head's causal weights on "the cat sat on the mat", after
 * training that head for `steps` steps (attn_train_head, seed 1). */
static int trained_row(double row[6], const double *x, int steps) {
    attn_train_options o = attn_train_options_default();
    o.steps = steps;
    double wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wv[ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V];
    attn_error err;
    if (attn_train_head(wq, wk, wv, NULL, NULL, &o, &err)) return cli_error(EXIT_DATA, "%s", err.message);
    attn_explain_input in = {6, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TRAIN_D_V, x, wq, wk, wv, ATTN_EXPLAIN_QKV, 1, 0,
                             0, ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_explain ex;
    if (attn_explain_run(&ex, &in, &err)) return cli_error(EXIT_DATA, "%s", err.message);
    memcpy(row, ex.weights + 2 * 6, 6 * sizeof(double)); /* row 2: sat */
    attn_explain_free(&ex);
    return 0;
}

/* Attention with trainable weights: Q = X W_Q, K = X W_K, V = X W_V, and
 * W_Q, W_K, W_V learned from sentences by attn_train_head. sat's weights
 * after one step and after the default 1000. */
static int trainable(void) {
    static const char *const WORDS[6] = {"the", "cat", "sat", "on", "the", "mat"};
    static const char *const ROWS[2] = {"step 1", "step 1000"};
    attn_toy_token tokens[6];
    int n;
    double x[6 * ATTN_TOY_D_MODEL], rows[2][6];
    attn_error err;
    if (attn_toy_tokenize(tokens, 6, &n, "the cat sat on the mat", &err) || attn_toy_embed(x, tokens, n, &err))
        return cli_error(EXIT_DATA, "%s", err.message);
    int code = trained_row(rows[0], x, 1);
    if (!code) code = trained_row(rows[1], x, 1000);
    if (!code)
        print_matrix("sat's weights (causal) after 1 step and after 1000 steps of training:", &rows[0][0], 2, 6, ROWS,
                     WORDS);
    return code;
}

/* With real head sizes the division matters more: random rows of 3 scores
 * (2000 queries, 3 keys each, seed 0, attn_scaling_measure), the mean largest
 * weight raw and divided by sqrt(d_k), at d_k = 3 and at d_k = 64. */
static int bigger_heads(void) {
    static const int DK[2] = {3, 64};
    static const char *const ROWS[2] = {"d_k = 3", "d_k = 64"}, *const COLS[3] = {"raw", "scaled", "gap"};
    double top[2][3];
    attn_scaling_row row;
    attn_error err;
    for (int i = 0; i < 2; i++) {
        if (attn_scaling_measure(&row, DK[i], 2000, 3, 0, &err)) return cli_error(EXIT_DATA, "%s", err.message);
        top[i][0] = row.top_raw, top[i][1] = row.top_scaled, top[i][2] = row.top_raw - row.top_scaled;
    }
    print_matrix("With real head sizes the difference is bigger. Random queries and keys of d_k numbers, 3 keys "
                 "each (2000 rows, seed 0): the largest weight on average, raw and scaled (divided by sqrt(d_k)):",
                 &top[0][0], 2, 3, ROWS, COLS);
    cli_prose(stdout, 3, 3, "At d_k = 64 the raw softmax is close to a hard pick; divided, it is as soft as at "
              "d_k = 3.");
    printf("\n");
    return 0;
}

/* Weights from dot products, by the library's explainer in mode dot: the
 * scores X X^T (omega), their softmax (alpha) and the context vectors (z). */
static int dot_products(void) {
    attn_explain ex;
    int code = six_explain(&ex, ATTN_EXPLAIN_DOT, 3, NULL, NULL, NULL);
    if (code) return code;
    print_matrix("scores = X X^T, every pair of tokens (6, 6):", ex.scores, 6, 6, SIX_WORDS, SIX_WORDS);
    print_matrix("weights = softmax(X X^T), each row sums to 1 (6, 6):", ex.weights, 6, 6, SIX_WORDS, SIX_WORDS);
    print_matrix("context = weights X (6, 3):", ex.output, 6, 3, SIX_WORDS, SIX_FEATS);
    cli_prose(stdout, 3, 3, "The context vector of \"journey\" is [%.4f, %.4f, %.4f].", ex.output[3], ex.output[4],
              ex.output[5]);
    printf("\n");
    attn_explain_free(&ex);
    return 0;
}

int cmd_demo(int argc, char **argv) {
    static const cli_setting NO_OPTIONS[] = {{NULL, NULL, false, 0}};
    if (cli_help_asked(argc, argv, NO_OPTIONS)) {
        cli_print_usage(stdout, "usage: attn demo\n\nPrints the first worked examples (six words, from plain "
                                "averaging to\nattention with trainable weights), computed by libattn.\n\n"
                                "  -h, --help       show this help\n");
        return 0;
    }
    if (argc > 1) return cli_unknown_argument("demo", argv[1]);
    if (cli_stop != CLI_RUN) return 0;
    double weights[36], context[18];
    int code;

    puts("Self-attention, computed by libattn\n"
         "===================================\n");
    cli_prose(stdout, 0, 3, "1. Plain averaging: each token's context is the average of all of them");
    cli_prose(stdout, 3, 3, "Information mixes, but nothing decides who matters: one blend for all.");
    printf("\n");
    print_matrix("X, one row per token (6, 3):", &SIX_X[0][0], 6, 3, SIX_WORDS, SIX_FEATS);
    if ((code = averaging())) return code;

    cli_prose(stdout, 0, 3, "2. Weights from dot products (no projections, no scaling)");
    cli_prose(stdout, 3, 3, "q = k = v = X, scale = 1: scores = X X^T, weights = softmax(scores), context = "
              "weights X");
    printf("\n");
    if ((code = dot_products())) return code;

    cli_prose(stdout, 0, 3, "3. Attention with trainable weights: Q = X W_Q, K = X W_K, V = X W_V");
    cli_prose(stdout, 3, 3, "Each token gets a query (what it looks for), a key (what it offers) and a value (what "
              "it hands over), through three matrices that are learned. On the six tokens, with 3 features in "
              "and 2 out, as SelfAttention(3, 2): the scores are divided by sqrt(d_k), and d_k is the size of "
              "the keys, 2, not the 3 features of a token.");
    printf("\n");
    if ((code = six_qkv())) return code;

    cli_prose(stdout, 0, 3, "4. Why divide by sqrt(d_k): one row of scores [4, 16, 12] with d_k = 3");
    printf("\n");
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
    if ((code = bigger_heads())) return code;

    cli_prose(stdout, 0, 3, "5. A causal mask: each token sees only itself and the tokens before it");
    cli_prose(stdout, 3, 3, "A model that writes left to right must not see the tokens after it: their scores "
              "are set to -inf before the softmax (here on section 2's scores X X^T).");
    printf("\n");
    if ((code = attend(context, weights, &SIX_X[0][0], &SIX_X[0][0], &SIX_X[0][0], 6, 6, 3, 3, 1.0,
                       ATTN_CAUSAL_TOP_LEFT)))
        return code;
    print_matrix("causal weights (6, 6): zero above the diagonal", weights, 6, 6, SIX_WORDS,
                 SIX_WORDS);

    cli_prose(stdout, 0, 3, "6. A head that learns");
    cli_prose(stdout, 3, 3, "W_Q, W_K and W_V are learned, not chosen. A head of the toy model (8 features per "
              "word, d_k = 4) starts from random W_Q, W_K, W_V and learns from sentences, with a causal mask, "
              "that each verb must take its subject's features (attn train):");
    printf("\n");
    if ((code = trainable())) return code;
    cli_prose(stdout, 0, 0, "Run `attn explain` for every matrix of a head, `attn train` for the training. Run "
              "`attn sdpa --help` to compute attention on your own .npy files.");
    return 0;
}
