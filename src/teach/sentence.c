/* sentence.c -- the toy model on a sentence, explained, as one JSON object
 * (attn_toy_explain_json): tokens, embedding, a head's weights, every matrix
 * (attn_explain_run), labels, JSON (attn_explain_json). The explainer page
 * and the Python binding both call it. */
#include "base/base.h"
#include "teach/disjoint.h"
#include "attn_teach.h"

#include <stdio.h>
#include <string.h>

size_t attn_toy_explain_options_init(attn_toy_explain_options *options, size_t struct_size) {
    static const attn_toy_explain_options DEFAULTS = {.struct_size = sizeof DEFAULTS, .head = ATTN_TOY_WIRED,
                                                      .mode = ATTN_EXPLAIN_QKV, .positions = ATTN_EXPLAIN_NO_POSITIONS};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* The sentence's words, embedded; for the source, a failure says so. */
static attn_status embed(double *x, int *n, const char **words, const char *text, bool source, attn_error *err) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS + 1];
    attn_status st = attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, n, text, err);
    if (st) {
        if (source && err) {
            char msg[ATTN_ERROR_MESSAGE_SIZE];
            snprintf(msg, sizeof msg, "%s", err->message);
            attn_fail(err, st, "the source: %s", msg);
        }
        return st;
    }
    for (int i = 0; i < *n; i++) words[i] = attn_toy_word(tok[i].id);
    return attn_toy_embed(x, tok, *n, err);
}

/* The head's value columns' names, and the head's name, in the JSON. */
static void value_names(const char **values, const char **head_name, attn_toy_head h, attn_explain_mode mode, int d_v) {
    static const char *const V_NAMES[] = {"v0", "v1", "v2", "v3"};
    for (int j = 0; j < d_v; j++)
        values[j] = mode != ATTN_EXPLAIN_QKV ? attn_toy_feature(j)
                    : h != ATTN_TOY_RANDOM ? attn_toy_value_feature(h, j) : V_NAMES[j % 4];
    *head_name = mode != ATTN_EXPLAIN_QKV ? "none" : h == ATTN_TOY_WIRED ? "wired" : h == ATTN_TOY_WHERE ? "where"
                 : h == ATTN_TOY_ORDER ? "wired for word order" : "random";
}

attn_status attn_toy_explain_json(char *buf, size_t size, size_t *length, const char *sentence,
                                  const attn_toy_explain_options *options, attn_error *err) {
    attn_toy_explain_options o = attn_toy_explain_options_default();
    /* buf may be NULL only with size 0 (to learn the length): checked here,
     * before the work, and named as this call's argument. */
    if (!length || !sentence || (size && !buf))
        return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", !length ? "length" : !sentence ? "sentence" : "buf (size > 0)");
    const teach_array arrays[3] = {{buf, teach_count(size), 1, "buf"}, {length, 1, (int64_t)sizeof *length, "length"},
                                   {sentence, (int64_t)strlen(sentence) + 1, 1, "sentence"}};
    attn_status st = teach_check_disjoint(arrays, 2, 3, err);
    if (st) return st;
    st = attn_versioned_read(&o, sizeof o, options, "options",
                                         "start from attn_toy_explain_options_default()", err);
    if (st) return st;
    if (o.head < ATTN_TOY_WIRED || o.head > ATTN_TOY_ORDER) return attn_fail(err, ATTN_ERR_OPTION, "unknown head %d", (int)o.head);
    double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL], xs[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL];
    double wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wv[ATTN_TOY_D_MODEL * ATTN_TOY_D_K];
    const char *words[ATTN_TOY_MAX_TOKENS], *src_words[ATTN_TOY_MAX_TOKENS];
    int n = 0, ns = 0;
    bool cross = o.source && o.source[0];
    st = embed(x, &n, words, sentence, false, err);
    if (!st && cross) st = embed(xs, &ns, src_words, o.source, true, err);
    attn_toy_head h = o.head == ATTN_TOY_WIRED && o.positions == ATTN_EXPLAIN_ROPE ? ATTN_TOY_ORDER : o.head;
    if (!st) st = attn_toy_weights(wq, wk, wv, h, err);
    if (st) return st;
    if (o.tied) memcpy(wk, wq, sizeof wq); /* W_K = W_Q: the scores become symmetric */
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv, o.mode, o.causal,
                             o.no_scale, o.scale_by_d_model, o.positions, cross ? xs : NULL, cross ? ns : 0};
    attn_explain ex;
    if ((st = attn_explain_run(&ex, &in, err))) return st;
    const char *features[ATTN_TOY_D_MODEL], *values[ATTN_TOY_D_MODEL], *head_name;
    for (int j = 0; j < ATTN_TOY_D_MODEL; j++) features[j] = attn_toy_feature(j);
    value_names(values, &head_name, h, o.mode, ex.d_v);
    char tied_name[48];
    if (o.tied && o.mode == ATTN_EXPLAIN_QKV) { /* as attn explain --tied names it */
        snprintf(tied_name, sizeof tied_name, "%s, tied", head_name);
        head_name = tied_name;
    }
    attn_explain_labels labels = {words, features, values, head_name, cross ? src_words : NULL};
    st = attn_explain_json(buf, size, length, &ex, &in, &labels, err);
    attn_explain_free(&ex);
    return st;
}
