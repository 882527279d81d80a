/* attn_web.c -- the explainer page's entry points into libattn, compiled to
 * WebAssembly. Each returns a NUL-terminated JSON string in a buffer owned
 * here, valid until the next call; the page parses it. The numbers come from
 * the same library code as `attn explain --json` and `attn scaling`. */
#include "attn_teach.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEB_EXPORT(name) __attribute__((export_name(name)))

static char *result;
static size_t result_cap;

/* Make room for n + 1 bytes in the result buffer. */
static char *reserve(size_t n) {
    if (n + 1 > result_cap) {
        char *p = realloc(result, n + 1);
        if (!p) return NULL;
        result = p, result_cap = n + 1;
    }
    return result;
}

/* A (rows, cols) matrix as JSON rows, every double exact (%.17g), written at
 * result + used (the caller reserved about 26 bytes a number); the new length. */
static size_t append_matrix(size_t used, const double *m, int rows, int cols) {
    used += (size_t)snprintf(result + used, result_cap - used, "[");
    for (int i = 0; i < rows; i++) {
        used += (size_t)snprintf(result + used, result_cap - used, "%s[", i ? ", " : "");
        for (int j = 0; j < cols; j++)
            used += (size_t)snprintf(result + used, result_cap - used, "%s%.17g", j ? ", " : "", m[i * cols + j]);
        used += (size_t)snprintf(result + used, result_cap - used, "]");
    }
    return used + (size_t)snprintf(result + used, result_cap - used, "]");
}

static const char *error_json(const char *message, int start, int length, const char *suggestion) {
    /* Messages hold no quotes or backslashes except inside words the user
     * typed; replace those so the JSON stays valid. */
    char clean[ATTN_ERROR_MESSAGE_SIZE];
    size_t i = 0;
    for (; message[i] && i + 1 < sizeof clean; i++)
        clean[i] = message[i] == '"' || message[i] == '\\' || (unsigned char)message[i] < 0x20 ? '?' : message[i];
    clean[i] = '\0';
    if (!reserve(sizeof clean + 128)) return "{\"error\": \"out of memory\"}";
    snprintf(result, result_cap, "{\"error\": \"%s\", \"start\": %d, \"length\": %d, \"suggestion\": \"%s\"}",
             clean, start, length, suggestion ? suggestion : "");
    return result;
}

/* Write JSON into the result buffer with `write`, one of the library's
 * snprintf-like attn_*_json functions (`what` its input): into the buffer as
 * it is, and a second time only when the text did not fit. Asking for the
 * length first would format every number twice, and formatting is most of
 * a call's time here (wasi-libc's printf computes in software long double).
 * The status of `write`, or ATTN_ERR_NO_MEMORY. */
typedef attn_status (*json_writer)(char *buf, size_t size, size_t *length, const void *what, attn_error *err);

static attn_status json_result(json_writer write, const void *what, attn_error *err) {
    size_t len = 0;
    attn_status st;
    if (!reserve(result_cap > 4096 ? result_cap - 1 : 4096)) return attn_error_set(err, ATTN_ERR_NO_MEMORY, "out of memory");
    if ((st = write(result, result_cap, &len, what, err)) || len < result_cap) return st;
    if (!reserve(len)) return attn_error_set(err, ATTN_ERR_NO_MEMORY, "out of memory");
    return write(result, result_cap, &len, what, err);
}

/* The toy model on `sentence`: head 0 wired, 1 random, 2 the "where" head; mode 0 qkv, 1 dot,
 * 2 average; positions an attn_explain_positions (qkv only); tied: W_K = W_Q;
 * source: NULL or "" for self-attention, else the sentence keys and values
 * come from (cross-attention); scale_by_d_model: divide by sqrt(d_model), the
 * slip. On a bad sentence: {"error", "start",
 * "length", "suggestion"}, start and length the unknown word's bytes (else
 * -1 and 0); an error in the source starts "the source: ", and its start and
 * length are in the source. */
typedef struct explain_args {
    const char *sentence;
    const attn_toy_explain_options *options;
} explain_args;

static attn_status explain_json(char *buf, size_t size, size_t *length, const void *what, attn_error *err) {
    const explain_args *a = what;
    return attn_toy_explain_json(buf, size, length, a->sentence, a->options, err);
}

WEB_EXPORT("web_explain")
const char *web_explain(const char *sentence, int head, int causal, int no_scale, int mode, int positions, int tied,
                        const char *source, int scale_by_d_model) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS + 1];
    attn_error err;
    int n = 0;
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, sentence, &err)) {
        bool unknown = strstr(err.message, "unknown word") != NULL;
        return error_json(err.message, unknown ? tok[n].start : -1, unknown ? tok[n].length : 0,
                          unknown ? attn_toy_suggest(sentence + tok[n].start, (size_t)tok[n].length) : NULL);
    }
    attn_toy_token stok[ATTN_TOY_MAX_TOKENS + 1];
    int ns = 0;
    bool cross = source && source[0];
    if (cross && attn_toy_tokenize(stok, ATTN_TOY_MAX_TOKENS, &ns, source, &err)) {
        bool unknown = strstr(err.message, "unknown word") != NULL;
        char msg[ATTN_ERROR_MESSAGE_SIZE];
        snprintf(msg, sizeof msg, "the source: %s", err.message);
        return error_json(msg, unknown ? stok[ns].start : -1, unknown ? stok[ns].length : 0,
                          unknown ? attn_toy_suggest(source + stok[ns].start, (size_t)stok[ns].length) : NULL);
    }
    attn_toy_explain_options o = attn_toy_explain_options_default();
    o.head = head == 2 ? ATTN_TOY_WHERE : head ? ATTN_TOY_RANDOM : ATTN_TOY_WIRED;
    o.mode = (attn_explain_mode)mode, o.causal = causal, o.no_scale = no_scale, o.scale_by_d_model = scale_by_d_model;
    o.positions = (attn_explain_positions)positions, o.tied = tied, o.source = cross ? source : NULL;
    const explain_args args = {sentence, &o};
    return json_result(explain_json, &args, &err) ? error_json(err.message, -1, 0, NULL) : result;
}

/* The vocabulary and the feature names. */
WEB_EXPORT("web_vocab")
const char *web_vocab(void) {
    size_t used = 0;
    if (!reserve(2048)) return "{}";
    used += (size_t)snprintf(result + used, result_cap - used, "{\"words\": [");
    for (int i = 0; i < attn_toy_vocab_size(); i++)
        used += (size_t)snprintf(result + used, result_cap - used, "%s\"%s\"", i ? ", " : "", attn_toy_word(i));
    used += (size_t)snprintf(result + used, result_cap - used, "], \"features\": [");
    for (int j = 0; j < ATTN_TOY_D_MODEL; j++)
        used += (size_t)snprintf(result + used, result_cap - used, "%s\"%s\"", j ? ", " : "", attn_toy_feature(j));
    snprintf(result + used, result_cap - used, "]}");
    return result;
}

/* One row of `attn scaling` with its histograms, and spread_div_d: the spread
 * of the raw scores divided by d_k (the over-correction of "why not d_k"). */
WEB_EXPORT("web_scaling")
const char *web_scaling(int d, int queries, int keys, unsigned seed) {
    attn_scaling_row r;
    attn_error err;
    if (attn_scaling_measure(&r, d, queries, keys, seed, &err)) return error_json(err.message, -1, 0, NULL);
    size_t len = 0;
    attn_scaling_json(NULL, 0, &len, &r, 1, NULL);
    if (!reserve(len + 48)) return "{}";
    attn_scaling_json(result, result_cap, &len, &r, 1, NULL);
    /* The table's spread when divided by d_k, beside the row's own fields:
     * the object's closing brace becomes this field and the brace. */
    snprintf(result + len - 1, result_cap - (len - 1), ", \"spread_div_d\": %.17g}", r.spread_raw / d);
    return result;
}

/* `attn train` on the page: a head trained for `steps` Adam steps from the
 * seed's random weights (the library's attn_train_head, the same numbers as
 * `attn train --steps N --seed S --json`), then its causal attention weights
 * on `sentence`: {"tokens", "steps", "loss": [per step], "weights": [[...]]}. */
WEB_EXPORT("web_train")
const char *web_train(const char *sentence, int steps, unsigned seed) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS + 1];
    attn_error err;
    int n = 0;
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, sentence, &err)) return error_json(err.message, -1, 0, NULL);
    attn_train_options o = attn_train_options_default();
    o.steps = steps, o.seed = seed;
    double wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wv[ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V];
    double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL], *loss = malloc(sizeof(double) * (size_t)(steps > 0 ? steps : 1));
    attn_explain ex = {0};
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TRAIN_D_V, x, wq, wk, wv, ATTN_EXPLAIN_QKV, 1, 0, 0,
                             ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_toy_embed(x, tok, n, NULL);
    if (!loss) return error_json("out of memory", -1, 0, NULL);
    if (attn_train_head(wq, wk, wv, loss, NULL, &o, &err) || attn_explain_run(&ex, &in, &err)) {
        free(loss);
        return error_json(err.message, -1, 0, NULL);
    }
    size_t used = 0, need = (size_t)steps * 26 + (size_t)n * (size_t)n * 26 + (size_t)n * 16 + 128;
    if (!reserve(need)) {
        free(loss), attn_explain_free(&ex);
        return "{\"error\": \"out of memory\"}";
    }
    used += (size_t)snprintf(result + used, result_cap - used, "{\"tokens\": [");
    for (int i = 0; i < n; i++) used += (size_t)snprintf(result + used, result_cap - used, "%s\"%s\"", i ? ", " : "", attn_toy_word(tok[i].id));
    used += (size_t)snprintf(result + used, result_cap - used, "], \"steps\": %d, \"loss\": [", steps);
    for (int i = 0; i < steps; i++) used += (size_t)snprintf(result + used, result_cap - used, "%s%.17g", i ? ", " : "", loss[i]);
    used += (size_t)snprintf(result + used, result_cap - used, "], \"weights\": ");
    used = append_matrix(used, ex.weights, n, n);
    snprintf(result + used, result_cap - used, "}");
    free(loss), attn_explain_free(&ex);
    return result;
}

/* Additive attention on the wired head's Q and K (attn_additive_scores, W1 =
 * W2 = I, v = 1, as attn explain --score additive) and its weights by the
 * library's softmax: {"weights": [[...]]}. */
WEB_EXPORT("web_additive")
const char *web_additive(const char *sentence, int causal) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS + 1];
    attn_error err;
    int n = 0;
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, sentence, &err)) return error_json(err.message, -1, 0, NULL);
    double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL], wq[32], wk[32], wv[32], eye[ATTN_TOY_D_K * ATTN_TOY_D_K + ATTN_TOY_D_K] = {0};
    double *s = malloc(sizeof(double) * (size_t)(n * n)), *w = malloc(sizeof(double) * (size_t)(n * n));
    attn_toy_embed(x, tok, n, NULL);
    attn_toy_weights(wq, wk, wv, ATTN_TOY_WIRED, NULL);
    for (int u = 0; u < ATTN_TOY_D_K; u++) eye[u * ATTN_TOY_D_K + u] = 1, eye[ATTN_TOY_D_K * ATTN_TOY_D_K + u] = 1;
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv, ATTN_EXPLAIN_QKV, causal, 0, 0,
                             ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_explain ex = {0};
    if (!s || !w || attn_explain_run(&ex, &in, &err) ||
        attn_additive_scores(s, ex.Q, n, ex.K, n, ATTN_TOY_D_K, eye, eye, eye + ATTN_TOY_D_K * ATTN_TOY_D_K, ATTN_TOY_D_K, &err) ||
        attn_softmax_rows(w, s, n, n, causal, &err) || !reserve((size_t)(n * n) * 26 + 64)) {
        free(s), free(w), attn_explain_free(&ex);
        return error_json(s && w ? err.message : "out of memory", -1, 0, NULL);
    }
    size_t used = append_matrix((size_t)snprintf(result, result_cap, "{\"weights\": "), w, n, n);
    snprintf(result + used, result_cap - used, "}");
    free(s), free(w), attn_explain_free(&ex);
    return result;
}

/* A JSON list of n numbers at result + used (reserved by the caller). */
static size_t append_list(size_t used, const double *v, int n) {
    used += (size_t)snprintf(result + used, result_cap - used, "[");
    for (int i = 0; i < n; i++) used += (size_t)snprintf(result + used, result_cap - used, "%s%.17g", i ? ", " : "", v[i]);
    return used + (size_t)snprintf(result + used, result_cap - used, "]");
}

/* The embedding table E (vocabulary, ATTN_TOY_D_MODEL): row id is the word
 * with that id, the rows attn_toy_embed looks up. {"E": [[...]]}. */
WEB_EXPORT("web_embedding")
const char *web_embedding(void) {
    enum { MAXV = 256 };
    int v = attn_toy_vocab_size();
    if (v > MAXV) v = MAXV;
    attn_toy_token tok[MAXV];
    static double e[MAXV * ATTN_TOY_D_MODEL]; /* (v, d_model) */
    for (int i = 0; i < v; i++) tok[i] = (attn_toy_token){i, 0, 0};
    attn_error err;
    if (attn_toy_embed(e, tok, v, &err)) return error_json(err.message, -1, 0, NULL);
    if (!reserve((size_t)v * ATTN_TOY_D_MODEL * 26 + 64)) return "{}";
    size_t used = append_matrix((size_t)snprintf(result, result_cap, "{\"E\": "), e, v, ATTN_TOY_D_MODEL);
    snprintf(result + used, result_cap - used, "}");
    return result;
}

/* The steps between the matrices of `attn explain --json`, so that every sum
 * the page writes under a figure is the library's arithmetic:
 *   XP     (n, d_model)  X + P, the sinusoidal positions added (positions 1), else X;
 *   P      (n, d_model)  P itself (positions 1), else null;
 *   Q_pre  (n, d_k)      XP·W_Q before RoPE turns it (equal to Q without RoPE);
 *   K_pre  (m, d_k)      X_source (or XP)·W_K before RoPE;
 *   rope   (max(n, m), d_k): row p is [cos, sin] of each pair's angle at
 *          position p (pairs (j, j + d_k/2), the layout of attn_explain_run),
 *          found by letting attn_explain_run's own RoPE turn unit vectors;
 *   row_sums (n)         each row of the weights, added up.
 * x (n, dm), xs (m, dm) or NULL, wq, wk (dm, dk), wv (dm, dv): the matrices of
 * the explain JSON, passed back; the flags as web_explain's. */
WEB_EXPORT("web_parts")
const char *web_parts(int n, int m, int dm, int dk, int dv, const double *x, const double *xs, const double *wq,
                      const double *wk, const double *wv, int positions, int causal, int no_scale, int scale_by_d_model) {
    attn_error err;
    int np = n > m ? n : m, half = dk / 2;
    if (n < 1 || m < 1 || dm < 1 || dk < 1 || dv < 1 || n > ATTN_TOY_MAX_TOKENS || m > ATTN_TOY_MAX_TOKENS ||
        dm > 64 || dk > 64 || dv > 64)
        return error_json("web_parts: sizes out of range", -1, 0, NULL);
    attn_explain_input in = {n, dm, dk, dv, x, wq, wk, wv, ATTN_EXPLAIN_QKV, causal, no_scale, scale_by_d_model,
                             (attn_explain_positions)positions, xs, xs ? m : 0};
    attn_explain full = {0}, pre = {0}, turn = {0};
    double *xp = malloc(sizeof(double) * (size_t)(n * dm)), *unit = calloc((size_t)(np * dk), sizeof(double));
    double *eye = calloc((size_t)(dk * dk), sizeof(double)), *rope = calloc((size_t)(np * dk), sizeof(double));
    const char *fail = !xp || !unit || !eye || !rope ? "out of memory" : NULL;
    /* The whole head as the JSON's, for its weights' row sums and P. */
    if (!fail && attn_explain_run(&full, &in, &err)) fail = err.message;
    if (!fail) {
        memcpy(xp, x, sizeof(double) * (size_t)(n * dm));
        if (full.P)
            for (int i = 0; i < n * dm; i++) xp[i] += full.P[i];
        /* The projections alone: the same inputs, X + P, no positions. */
        attn_explain_input pin = in;
        pin.X = xp, pin.positions = ATTN_EXPLAIN_NO_POSITIONS, pin.causal = 0;
        if (attn_explain_run(&pre, &pin, &err)) fail = err.message;
    }
    for (int k = 0; !fail && positions == ATTN_EXPLAIN_ROPE && k < half; k++) {
        /* Unit vector e_k at every position, through W = I: Q = e_k turned,
         * so Q[p][k] = cos and Q[p][k + half] = sin of pair k's angle. */
        for (int u = 0; u < dk; u++) eye[u * dk + u] = 1;
        memset(unit, 0, sizeof(double) * (size_t)(np * dk));
        for (int p = 0; p < np; p++) unit[p * dk + k] = 1;
        attn_explain_input rin = {np, dk, dk, dk, unit, eye, eye, eye, ATTN_EXPLAIN_QKV, 0, 0, 0, ATTN_EXPLAIN_ROPE, NULL, 0};
        if (attn_explain_run(&turn, &rin, &err)) {
            fail = err.message;
            break;
        }
        for (int p = 0; p < np; p++) rope[p * dk + 2 * k] = turn.Q[p * dk + k], rope[p * dk + 2 * k + 1] = turn.Q[p * dk + k + half];
        attn_explain_free(&turn);
    }
    size_t need = (size_t)(2 * n * dm + n * dk + m * dk + np * dk + n) * 26 + 256;
    if (!fail && !reserve(need)) fail = "out of memory";
    const char *out = NULL;
    if (fail) {
        out = error_json(fail, -1, 0, NULL);
    } else {
        double sums[ATTN_TOY_MAX_TOKENS];
        for (int i = 0; i < n; i++) {
            sums[i] = 0;
            for (int j = 0; j < full.n_keys; j++) sums[i] += full.weights[i * full.n_keys + j];
        }
        size_t used = (size_t)snprintf(result, result_cap, "{\"XP\": ");
        used = append_matrix(used, xp, n, dm);
        used += (size_t)snprintf(result + used, result_cap - used, ", \"P\": ");
        if (full.P) used = append_matrix(used, full.P, n, dm);
        else used += (size_t)snprintf(result + used, result_cap - used, "null");
        used = append_matrix(used + (size_t)snprintf(result + used, result_cap - used, ", \"Q_pre\": "), pre.Q, n, dk);
        used = append_matrix(used + (size_t)snprintf(result + used, result_cap - used, ", \"K_pre\": "), pre.K, m, dk);
        used += (size_t)snprintf(result + used, result_cap - used, ", \"rope\": ");
        if (positions == ATTN_EXPLAIN_ROPE) used = append_matrix(used, rope, np, dk);
        else used += (size_t)snprintf(result + used, result_cap - used, "null");
        used = append_list(used + (size_t)snprintf(result + used, result_cap - used, ", \"row_sums\": "), sums, n);
        snprintf(result + used, result_cap - used, "}");
        out = result;
    }
    attn_explain_free(&full), attn_explain_free(&pre);
    free(xp), free(unit), free(eye), free(rope);
    return out;
}

/* Two heads side by side, as `attn explain --heads 2`: out1, out2 (n, d_k)
 * the heads' outputs, kinds their attn_toy_head. concat (n, 2 d_k) puts them
 * side by side; W_O (2 d_k, d_model) has a 1 where a head's value column is
 * the feature of that name (an untrained head's values have no name: its
 * rows are 0, as the command's); output = concat·W_O.
 * {"concat", "W_O", "output"}. */
WEB_EXPORT("web_heads")
const char *web_heads(int n, const double *out1, const double *out2, int kind1, int kind2) {
    enum { DK = ATTN_TOY_D_K, DM = ATTN_TOY_D_MODEL, C = 2 * DK };
    if (n < 1 || n > ATTN_TOY_MAX_TOKENS) return error_json("web_heads: n out of range", -1, 0, NULL);
    static double concat[ATTN_TOY_MAX_TOKENS * C], out[ATTN_TOY_MAX_TOKENS * DM], wo[C * DM];
    const int kinds[2] = {kind1, kind2};
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < DK; j++)
            for (int f = 0; f < DM; f++) {
                const char *name = attn_toy_value_feature((attn_toy_head)kinds[h], j);
                wo[(h * DK + j) * DM + f] = name && strcmp(name, attn_toy_feature(f)) == 0;
            }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < DK; j++) concat[i * C + j] = out1[i * DK + j], concat[i * C + DK + j] = out2[i * DK + j];
    for (int i = 0; i < n; i++)
        for (int f = 0; f < DM; f++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += concat[i * C + c] * wo[c * DM + f];
            out[i * DM + f] = s;
        }
    if (!reserve((size_t)(n * C + C * DM + n * DM) * 26 + 64)) return "{}";
    size_t used = append_matrix((size_t)snprintf(result, result_cap, "{\"concat\": "), concat, n, C);
    used = append_matrix(used + (size_t)snprintf(result + used, result_cap - used, ", \"W_O\": "), wo, C, DM);
    used = append_matrix(used + (size_t)snprintf(result + used, result_cap - used, ", \"output\": "), out, n, DM);
    snprintf(result + used, result_cap - used, "}");
    return result;
}

/* "Why softmax?" live: scores (n) + shift, and the library's softmax of
 * that row (attn_softmax_rows). {"shifted": [...], "weights": [...], "sum"}. */
WEB_EXPORT("web_softmax")
const char *web_softmax(const double *scores, int n, double shift) {
    enum { MAXN = 16 };
    double row[MAXN], w[MAXN], sum = 0;
    attn_error err;
    if (n < 1 || n > MAXN) return error_json("web_softmax: 1 to 16 scores", -1, 0, NULL);
    for (int j = 0; j < n; j++) row[j] = scores[j] + shift;
    if (attn_softmax_rows(w, row, 1, n, 0, &err)) return error_json(err.message, -1, 0, NULL);
    for (int j = 0; j < n; j++) sum += w[j];
    if (!reserve((size_t)n * 52 + 96)) return "{}";
    size_t used = append_list((size_t)snprintf(result, result_cap, "{\"shifted\": "), row, n);
    used = append_list(used + (size_t)snprintf(result + used, result_cap - used, ", \"weights\": "), w, n);
    snprintf(result + used, result_cap - used, ", \"sum\": %.17g}", sum);
    return result;
}

/* Memory for the page's strings. */
/* The explainer's second part, "how a fast kernel computes it", in two
 * calls, which the page makes in two tasks: at 64 words each takes tens of
 * milliseconds, together too long for one. web_kernel_run computes every
 * step's numbers for `sentence` (attn_kernel_walk_run with these block,
 * workers and ranks) and keeps them here: {"n": words}, or {"error"} for a
 * bad sentence or option (then nothing is kept). web_kernel_json writes what
 * it kept: the JSON of `attn explain --kernel --json --block B --workers W
 * --ranks R`, or {"error"} when no walk is kept. */
static attn_kernel_walk kept_walk = {.struct_size = sizeof kept_walk};

WEB_EXPORT("web_kernel_run")
const char *web_kernel_run(const char *sentence, int block, int workers, int ranks) {
    attn_kernel_walk_free(&kept_walk);
    attn_kernel_walk_options o = attn_kernel_walk_options_default();
    o.block = block, o.workers = workers, o.ranks = ranks;
    attn_error err;
    if (attn_kernel_walk_run(&kept_walk, sentence, &o, &err)) return error_json(err.message, -1, 0, NULL);
    if (!reserve(32)) return "{\"error\": \"out of memory\"}";
    snprintf(result, result_cap, "{\"n\": %d}", kept_walk.n);
    return result;
}

static attn_status walk_json(char *buf, size_t size, size_t *length, const void *walk, attn_error *err) {
    return attn_kernel_walk_json(buf, size, length, walk, NULL, err);
}

WEB_EXPORT("web_kernel_json")
const char *web_kernel_json(void) {
    attn_error err;
    if (!kept_walk.Q) return error_json("no kernel walk: call web_kernel_run first", -1, 0, NULL);
    return json_result(walk_json, &kept_walk, &err) ? error_json(err.message, -1, 0, NULL) : result;
}

/* Step 1 for any T, the page's slider: {"T", "score_bytes",
 * "workspace_bytes"} from attn_kernel_cost. */
WEB_EXPORT("web_kernel_cost")
const char *web_kernel_cost(int T) {
    double scores, workspace;
    attn_error err;
    if (attn_kernel_cost(&scores, &workspace, T, &err)) return error_json(err.message, -1, 0, NULL);
    if (!reserve(128)) return "{}";
    snprintf(result, result_cap, "{\"T\": %d, \"score_bytes\": %.17g, \"workspace_bytes\": %.17g}", T, scores,
             workspace);
    return result;
}

WEB_EXPORT("web_alloc") void *web_alloc(size_t n) { return malloc(n); }
WEB_EXPORT("web_free") void web_free(void *p) { free(p); }
