/* abi_0_2.c -- release 0.2's X_default() and explainer functions, for binaries built
 * against 0.2.0's headers (attn.h: "Versioned structs").
 *
 * In 0.2 attn_context_default, attn_sdpa_options_default and
 * attn_train_options_default were functions of the library returning their
 * struct by value. A binary built then calls them still, and holds the
 * result in a variable of 0.2's size: these return exactly 0.2's structs,
 * frozen below field for field, whatever the structs have grown into since.
 * The binary's struct_size is then 0.2's, and every call reads only that
 * much of it. Code compiled against today's headers never reaches these:
 * the headers' macros of the same names call the X_init functions with the
 * caller's own sizeof.
 *
 * And release 0.2's explainer calls, attn_explain_run, attn_explain_free
 * and attn_explain_json, whose structs have no struct_size and have grown
 * since: these take 0.2's structs, frozen below too, and hand today's
 * functions (attn_teach.h's macros of those names call the _0_3 ones)
 * today's structs built from them, every newer field at its default, and
 * write back only 0.2's bytes. Uses only the public API, like src/teach/. */
#include "attn.h"
#include "attn_teach.h"

#include <stddef.h>
#include <string.h>

#undef attn_context_default
#undef attn_sdpa_options_default
#undef attn_train_options_default
#undef attn_explain_run
#undef attn_explain_free
#undef attn_explain_json

/* 0.2.0's structs (tests/abi/0.2/attn.h and attn_teach.h). */
typedef struct context_0_2 {
    size_t struct_size;
    int num_threads;
    void *workspace;
    size_t workspace_size;
} context_0_2;

typedef struct sdpa_options_0_2 {
    size_t struct_size;
    int has_scale;
    double scale;
    attn_causal causal;
    const attn_tensor *mask;
    attn_compute compute;
    const attn_context *context;
    double dropout_p;
    uint64_t dropout_seed;
} sdpa_options_0_2;

typedef struct train_options_0_2 {
    size_t struct_size;
    int d_k, steps, batch;
    double learning_rate;
    int no_scale;
    uint64_t seed;
} train_options_0_2;

/* The explainer's, which have no struct_size: 0.3 appended to each. */
typedef struct explain_input_0_2 {
    int n_tokens, d_model, d_k, d_v;
    const double *X;
    const double *W_Q, *W_K, *W_V;
    attn_explain_mode mode;
    int causal, no_scale;
} explain_input_0_2;

typedef struct explain_0_2 {
    int n, d_model, d_k, d_v;
    double scale;
    double *Q, *K, *V, *scores, *scaled, *weights, *output;
} explain_0_2;

typedef struct explain_labels_0_2 {
    const char *const *tokens, *const *features, *const *value_features;
    const char *head;
} explain_labels_0_2;

/* Today's structs begin with 0.2's: the same fields at the same offsets,
 * so that the library reads a 0.2 struct as a prefix of its own. */
#define SAME_FIELD(old, now, field) \
    _Static_assert(offsetof(old, field) == offsetof(now, field), #now "." #field " moved since 0.2")
SAME_FIELD(context_0_2, attn_context, num_threads);
SAME_FIELD(context_0_2, attn_context, workspace);
SAME_FIELD(context_0_2, attn_context, workspace_size);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, has_scale);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, scale);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, causal);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, mask);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, compute);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, context);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, dropout_p);
SAME_FIELD(sdpa_options_0_2, attn_sdpa_options, dropout_seed);
SAME_FIELD(train_options_0_2, attn_train_options, d_k);
SAME_FIELD(train_options_0_2, attn_train_options, steps);
SAME_FIELD(train_options_0_2, attn_train_options, batch);
SAME_FIELD(train_options_0_2, attn_train_options, learning_rate);
SAME_FIELD(train_options_0_2, attn_train_options, no_scale);
SAME_FIELD(train_options_0_2, attn_train_options, seed);
SAME_FIELD(explain_0_2, attn_explain, scale);
SAME_FIELD(explain_0_2, attn_explain, output);

/* The X_init functions write through the pointer only with memcpy, up to
 * the size given, so a 0.2 struct may be handed to them as today's. */
ATTN_API context_0_2 attn_context_default(void);
context_0_2 attn_context_default(void) {
    context_0_2 c;
    attn_context_init((attn_context *)(void *)&c, sizeof c);
    return c;
}

ATTN_API sdpa_options_0_2 attn_sdpa_options_default(void);
sdpa_options_0_2 attn_sdpa_options_default(void) {
    sdpa_options_0_2 o;
    attn_sdpa_options_init((attn_sdpa_options *)(void *)&o, sizeof o);
    return o;
}

ATTN_API train_options_0_2 attn_train_options_default(void);
train_options_0_2 attn_train_options_default(void) {
    train_options_0_2 o;
    attn_train_options_init((attn_train_options *)(void *)&o, sizeof o);
    return o;
}

/* 0.2's attn_explain_input as today's: field by field, not as a prefix,
 * for today's scale_by_d_model lies in the padding at the end of 0.2's
 * struct, whose bytes are whatever the caller's stack held. Every field
 * added since is at its default: no positions, self-attention. */
static const attn_explain_input *input_now(attn_explain_input *now, const explain_input_0_2 *in) {
    if (!in) return NULL;
    *now = (attn_explain_input){in->n_tokens, in->d_model, in->d_k, in->d_v, in->X, in->W_Q, in->W_K, in->W_V,
                                in->mode, in->causal, in->no_scale, 0, ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    return now;
}

/* 0.2's attn_explain as today's: its fields are today's first ones; P is
 * NULL and the keys are the tokens, as 0.2's input makes them. */
static const attn_explain *explain_now(attn_explain *now, const explain_0_2 *ex) {
    if (!ex) return NULL;
    *now = (attn_explain){ex->n, ex->d_model, ex->d_k, ex->d_v, ex->scale, ex->Q, ex->K, ex->V, ex->scores,
                          ex->scaled, ex->weights, ex->output, NULL, ex->n};
    return now;
}

/* The three take 0.2's structs and write only their 0.2 bytes. */
ATTN_API attn_status attn_explain_run(explain_0_2 *ex, const explain_input_0_2 *in, attn_error *err);
attn_status attn_explain_run(explain_0_2 *ex, const explain_input_0_2 *in, attn_error *err) {
    attn_explain now;
    attn_explain_input in_now;
    attn_status st = attn_explain_run_0_3(ex ? &now : NULL, input_now(&in_now, in), err);
    if (ex) memcpy(ex, &now, sizeof *ex); /* zeroed on failure, as documented */
    return st;
}

ATTN_API void attn_explain_free(explain_0_2 *ex);
void attn_explain_free(explain_0_2 *ex) {
    if (!ex) return;
    attn_explain now;
    explain_now(&now, ex);
    attn_explain_free_0_3(&now);
    memset(ex, 0, sizeof *ex);
}

ATTN_API attn_status attn_explain_json(char *buf, size_t size, size_t *length, const explain_0_2 *ex,
                                       const explain_input_0_2 *in, const explain_labels_0_2 *labels,
                                       attn_error *err);
attn_status attn_explain_json(char *buf, size_t size, size_t *length, const explain_0_2 *ex,
                              const explain_input_0_2 *in, const explain_labels_0_2 *labels, attn_error *err) {
    attn_explain ex_now;
    attn_explain_input in_now;
    attn_explain_labels labels_now;
    if (labels)
        labels_now = (attn_explain_labels){labels->tokens, labels->features, labels->value_features, labels->head,
                                           NULL};
    return attn_explain_json_0_3(buf, size, length, explain_now(&ex_now, ex), input_now(&in_now, in),
                                 labels ? &labels_now : NULL, err);
}
