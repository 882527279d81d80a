/* explain_json.c -- an explanation as one JSON object, the format that
 * `attn explain --json`, the web page and the tests share. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/disjoint.h"
#include "teach/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void put_labels(writer *w, const char *key, const char *const *l, int n) {
    attn_json_put(w, "  \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (i) attn_json_put(w, ", ");
        attn_json_string(w, l ? l[i] : "");
    }
    attn_json_put(w, "],\n");
}

/* A matrix as a list of rows; %.17g round-trips every double exactly, and
 * -inf (a masked score) becomes null. A NULL matrix is null. */
static void put_matrix(writer *w, const char *key, const double *m, int rows, int cols, bool last) {
    attn_json_put(w, "  \"%s\": ", key);
    if (!m) {
        attn_json_put(w, "null%s\n", last ? "" : ",");
        return;
    }
    attn_json_put(w, "[");
    for (int i = 0; i < rows; i++) {
        attn_json_put(w, i ? ",\n    [" : "\n    [");
        for (int j = 0; j < cols; j++) {
            double x = m[(size_t)i * cols + j];
            if (isfinite(x)) attn_json_put(w, "%s%.17g", j ? ", " : "", x);
            else attn_json_put(w, "%snull", j ? ", " : "");
        }
        attn_json_put(w, "]");
    }
    attn_json_put(w, "\n  ]%s\n", last ? "" : ",");
}

attn_status attn_explain_json(char *buf, size_t size, size_t *length, const attn_explain *ex,
                              const attn_explain_input *in, const attn_explain_labels *labels,
                              attn_error *err) {
    static const char *const MODES[] = {"qkv", "dot", "average"};
    if (!ex || !in || !labels || !length || (size && !buf))
        return attn_fail(err, ATTN_ERR_NULL, "an argument of attn_explain_json is NULL");
    const teach_array arrays[5] = {{buf, teach_count(size), 1, "buf"},         {length, 1, (int64_t)sizeof *length, "length"},
                                   {ex, 1, (int64_t)sizeof *ex, "ex"},     {in, 1, (int64_t)sizeof *in, "in"},
                                   {labels, 1, (int64_t)sizeof *labels, "labels"}};
    attn_status st0 = teach_check_disjoint(arrays, 2, 5, err);
    if (st0) return st0;
    if (!ex->Q || ex->n != in->n_tokens || (unsigned)in->mode > ATTN_EXPLAIN_AVERAGE)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "the explanation does not match its input");
    bool qkv = in->mode == ATTN_EXPLAIN_QKV;
    int n = ex->n;
    writer w = {buf, size, 0};
    attn_json_put(&w, "{\n");
    put_labels(&w, "tokens", labels->tokens, n);
    if (in->X_source) put_labels(&w, "source_tokens", labels->source_tokens, ex->n_keys);
    put_labels(&w, "features", labels->features, ex->d_model);
    put_labels(&w, "value_features", labels->value_features, ex->d_v);
    attn_json_put(&w, "  \"mode\": \"%s\",\n  \"head\": ", MODES[in->mode]);
    attn_json_string(&w, labels->head ? labels->head : "");
    static const char *const POSITIONS[] = {"none", "sinusoidal", "rope"};
    attn_json_put(&w, ",\n  \"causal\": %s,\n  \"scale\": %.17g,\n", in->causal ? "true" : "false", ex->scale);
    attn_json_put(&w, "  \"positions\": \"%s\",\n", POSITIONS[(unsigned)in->positions <= ATTN_EXPLAIN_ROPE ? in->positions : 0]);
    attn_json_put(&w, "  \"d_model\": %d,\n  \"d_k\": %d,\n  \"d_v\": %d,\n", ex->d_model, ex->d_k, ex->d_v);
    put_matrix(&w, "X", in->X, n, ex->d_model, false);
    put_matrix(&w, "P", ex->P, n, ex->d_model, false);
    put_matrix(&w, "W_Q", qkv ? in->W_Q : NULL, ex->d_model, ex->d_k, false);
    put_matrix(&w, "W_K", qkv ? in->W_K : NULL, ex->d_model, ex->d_k, false);
    put_matrix(&w, "W_V", qkv ? in->W_V : NULL, ex->d_model, ex->d_v, false);
    int m = ex->n_keys ? ex->n_keys : n;
    put_matrix(&w, "X_source", in->X_source, m, ex->d_model, false);
    put_matrix(&w, "Q", ex->Q, n, ex->d_k, false);
    put_matrix(&w, "K", ex->K, m, ex->d_k, false);
    put_matrix(&w, "V", ex->V, m, ex->d_v, false);
    put_matrix(&w, "scores", ex->scores, n, m, false);
    put_matrix(&w, "scaled", ex->scaled, n, m, false);
    put_matrix(&w, "weights", ex->weights, n, m, false);
    put_matrix(&w, "output", ex->output, n, ex->d_v, true);
    attn_json_put(&w, "}\n");
    *length = w.len;
    return ATTN_OK;
}
