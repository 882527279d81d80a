/* abi_0_2.c -- release 0.2's X_default() functions, for binaries built
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
 * caller's own sizeof. Uses only the public API, like src/teach/. */
#include "attn.h"
#include "attn_teach.h"

#include <stddef.h>

#undef attn_context_default
#undef attn_sdpa_options_default
#undef attn_train_options_default

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
