/*
 * attn_teach.h -- the teaching side of libattn (the same library): a toy model
 * whose every matrix fits on a screen, the explainer that computes every
 * matrix of one attention head with the library's own attention, and the
 * "why divide by sqrt(d_k)" experiment. The `attn explain` and `attn scaling`
 * commands and the explainer page are built on it.
 *
 * The conventions of attn.h hold here too: errors are attn_status values with
 * an optional attn_error, nothing is printed, the caller owns memory.
 */
#ifndef ATTN_TEACH_H
#define ATTN_TEACH_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The toy model                                                            */
/* ------------------------------------------------------------------------ */

/* A tiny, untrained model whose every matrix fits on a screen: a vocabulary of
 * 30 words, 8 named features per word (X's columns), d_k = 4, and two heads:
 *   ATTN_TOY_WIRED   wired by hand: a verb's query looks for an animal, a
 *                    preposition's for its object (a place, else a thing,
 *                    else any noun), an adjective's for a noun, a noun's for
 *                    its determiner. In "the cat sat on the mat",
 *                    sat attends most to cat and on to mat; QKᵀ[sat][cat] = 1.92
 *                    while QKᵀ[cat][sat] = 0.02. Its values copy the features
 *                    noun, verb, animal, thing.
 *   ATTN_TOY_RANDOM  W_Q, W_K, W_V uniform with variance 1/8 from
 *                    ATTN_TOY_SEED, by the library's portable generator
 *                    (splitmix64): the same numbers on every platform.
 *   ATTN_TOY_WHERE   a second head wired by hand, for multi-head attention
 *                    (added in 0.3.0): it asks "where?". Verbs and
 *                    prepositions look for a place, else a thing to be on
 *                    or in (chased -> park, in -> park; sat -> mat, on ->
 *                    mat), and nouns for the preposition that places them.
 *                    Its values copy place, thing, preposition and noun.
 *   ATTN_TOY_ORDER   the wired head, rewired to use word order through RoPE
 *                    (ATTN_EXPLAIN_ROPE; added in 0.3.0): an adjective looks
 *                    for the noun one or two words after it, a preposition
 *                    for the noun two or three after it (its object), a verb
 *                    for the noun just before it (its subject) that is an
 *                    animal; nouns look for determiners. In "the quick brown
 *                    fox jumped over the lazy dog" quick and brown find fox,
 *                    lazy finds dog and over finds dog; sat -> cat is 68% in
 *                    "the cat sat on the mat". Values as the wired head's. */
#define ATTN_TOY_D_MODEL 8
#define ATTN_TOY_D_K 4
#define ATTN_TOY_MAX_TOKENS 64
#define ATTN_TOY_SEED 2017

typedef enum attn_toy_head {
    ATTN_TOY_WIRED = 0,
    ATTN_TOY_RANDOM = 1,
    ATTN_TOY_WHERE = 2,
    ATTN_TOY_ORDER = 3
} attn_toy_head;

/* Number of words in the vocabulary; ids are 0..size-1. */
ATTN_API int attn_toy_vocab_size(void);
/* The word with this id (lower case), or NULL if id is out of range. */
ATTN_API const char *attn_toy_word(int id);
/* Name of feature column j of X (0..ATTN_TOY_D_MODEL-1), or NULL. */
ATTN_API const char *attn_toy_feature(int j);
/* Name of value column j for a head (the wired head's values are named
 * features), or NULL (the random head's are not). */
ATTN_API const char *attn_toy_value_feature(attn_toy_head head, int j);
/* The id of the len-byte word at text, ignoring case, or -1 if unknown. */
ATTN_API int attn_toy_word_id(const char *text, size_t len);
/* The known word closest to the len-byte word at text (edit distance with
 * swaps, ignoring case), or NULL when none is close: within one edit for a
 * word of up to four letters, two for a longer one, and fewer edits than the
 * word has letters ("cta" gives "cat"; "and" and "Elephant" give NULL).
 * NULL is new in 0.3.0: 0.2's never returned it, so this one is exported as
 * attn_toy_suggest_0_3, behind a macro of the documented name, and the name
 * without the suffix keeps 0.2's answer (the nearest word however far) for
 * binaries built against 0.2. */
#define attn_toy_suggest attn_toy_suggest_0_3
ATTN_API const char *attn_toy_suggest(const char *text, size_t len);

/* One word of a sentence: its vocabulary id and where it is in the text. */
typedef struct attn_toy_token {
    int id;     /* vocabulary id, or -1 for an unknown word */
    int start;  /* byte offset in the sentence */
    int length; /* bytes */
} attn_toy_token;

/* Split `sentence` into words and look each up. Words are runs of letters,
 * digits and non-ASCII bytes, with an apostrophe (' or U+2019) inside a word
 * kept in it; everything else separates them: spaces, punctuation, quotes
 * around a word, and pasted text's Unicode spaces (no-break, U+2000 to U+200B,
 * U+202F, U+3000, a byte-order mark), curly quotes, guillemets, en and em
 * dashes and "…". Case is ignored. Fills tokens[0..*n_tokens).
 * Errors: ATTN_ERR_NULL; ATTN_ERR_ARGUMENT (max_tokens < 1); ATTN_ERR_TOKEN
 * for no words, more than max_tokens words, or an unknown word, whose message
 * names it, suggests the closest known word and lists the vocabulary. For an
 * unknown word, *n_tokens is its index and tokens[*n_tokens] holds its
 * position (id -1), so a caller can point at it. ATTN_ERR_STRIDE: tokens or
 * n_tokens overlapping each other or the sentence. */
ATTN_API attn_status attn_toy_tokenize(attn_toy_token *tokens, int max_tokens, int *n_tokens,
                                       const char *sentence, attn_error *err);

/* x (n, ATTN_TOY_D_MODEL) = the embedding rows of the n tokens.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (n < 0), ATTN_ERR_TOKEN (an id
 * outside the vocabulary), ATTN_ERR_STRIDE (x overlapping tokens). */
ATTN_API attn_status attn_toy_embed(double *x, const attn_toy_token *tokens, int n,
                                    attn_error *err);

/* W_Q, W_K, W_V, each (ATTN_TOY_D_MODEL, ATTN_TOY_D_K) in C order, used as
 * X·W. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (unknown head),
 * ATTN_ERR_STRIDE (two of them overlapping). */
ATTN_API attn_status attn_toy_weights(double *w_q, double *w_k, double *w_v, attn_toy_head head,
                                      attn_error *err);

/* ------------------------------------------------------------------------ */
/* The explainer: every matrix of one head                                  */
/* ------------------------------------------------------------------------ */

/* The progression from plain averaging to full attention:
 *   ATTN_EXPLAIN_AVERAGE  every token takes the plain average of all X rows
 *                         (attention with all scores equal: scale 0);
 *   ATTN_EXPLAIN_DOT      weights = softmax(X·Xᵀ), unscaled, output = weights·X
 *                         (q = k = v = X, scale 1);
 *   ATTN_EXPLAIN_QKV      Q = X·W_Q, K = X·W_K, V = X·W_V,
 *                         weights = softmax(Q·Kᵀ / sqrt(d_k)), output = weights·V. */
typedef enum attn_explain_mode {
    ATTN_EXPLAIN_QKV = 0,
    ATTN_EXPLAIN_DOT = 1,
    ATTN_EXPLAIN_AVERAGE = 2
} attn_explain_mode;

/* Where word order comes in (added in 0.3.0). Without positions attention
 * cannot tell word order: shuffling the words only moves the output rows.
 *   ATTN_EXPLAIN_NO_POSITIONS   none (the default)
 *   ATTN_EXPLAIN_SINUSOIDAL     X + P, P the original paper's sinusoidal
 *                               encodings (attn_sinusoidal_positions), before
 *                               the projections
 *   ATTN_EXPLAIN_ROPE           Q and K turned by RoPE (attn_rope, halves,
 *                               base 10000, linear_scaling 2) after the
 *                               projections, so the scores depend on how far
 *                               apart two words are. With d_k = 4 the first
 *                               pair turns half a radian per word (a sentence
 *                               of a dozen words never comes round), the
 *                               second almost not at all (content). */
typedef enum attn_explain_positions {
    ATTN_EXPLAIN_NO_POSITIONS = 0,
    ATTN_EXPLAIN_SINUSOIDAL = 1,
    ATTN_EXPLAIN_ROPE = 2
} attn_explain_positions;

/* The explainer's three structs below have no struct_size, and 0.3.0
 * appended fields to each (marked "added in 0.3.0"): a binary built against
 * 0.2's header holds smaller ones. The functions that take them are
 * therefore exported under new names, attn_explain_run_0_3,
 * attn_explain_free_0_3 and attn_explain_json_0_3, which these macros put
 * behind the documented names; the names without the suffix stay exported
 * for binaries built against 0.2 and take 0.2's structs, every field added
 * since then at its default (src/abi/abi_0_2.c). */
#define attn_explain_run attn_explain_run_0_3
#define attn_explain_free attn_explain_free_0_3
#define attn_explain_json attn_explain_json_0_3

/* What to explain. Matrices are f64, C order. */
typedef struct attn_explain_input {
    int n_tokens, d_model;     /* X is (n_tokens, d_model) */
    int d_k, d_v;              /* W_Q, W_K are (d_model, d_k); W_V is (d_model, d_v) */
    const double *X;
    const double *W_Q, *W_K, *W_V; /* used by ATTN_EXPLAIN_QKV only */
    attn_explain_mode mode;
    int causal;   /* top-left causal mask: token i sees tokens 0..i */
    int no_scale; /* ATTN_EXPLAIN_QKV: skip the 1/sqrt(d_k) (scale 1) */
    /* ATTN_EXPLAIN_QKV: divide by sqrt(d_model), the model's width, instead of
     * sqrt(d_k), a classic slip in notebooks (added in 0.3.0). */
    int scale_by_d_model;
    attn_explain_positions positions; /* ATTN_EXPLAIN_QKV only (added in 0.3.0) */
    /* Cross-attention (added in 0.3.0): keys and values from a second
     * sequence X_source (n_source, d_model), queries from X, as a decoder
     * attends to its encoder. NULL (the default): self-attention. Not with
     * causal (the two sequences have no common order) or sinusoidal positions. */
    const double *X_source;
    int n_source;
} attn_explain_input;

/* Every intermediate matrix, computed by attn_scores and attn_sdpa. Each is
 * (rows, cols) in C order; n = tokens (queries), n_keys = keys. In modes average and dot, Q = K = V = X
 * and d_k = d_v = d_model. */
typedef struct attn_explain {
    int n, d_model, d_k, d_v;
    double scale;     /* the scale applied: 1/sqrt(d_k), 1 or 0 */
    double *Q, *K;    /* (n, d_k), (n_keys, d_k) */
    double *V;        /* (n_keys, d_v) */
    double *scores;   /* (n, n_keys) Q·Kᵀ, before scaling and masking */
    double *scaled;   /* (n, n_keys) Q·Kᵀ·scale, -inf where the causal mask hides a key */
    double *weights;  /* (n, n_keys) softmax of each row of scaled; rows sum to 1 */
    double *output;   /* (n, d_v) weights·V */
    double *P;        /* (n, d_model) the sinusoidal positions added to X, or NULL (added in 0.3.0) */
    int n_keys;       /* the keys' count: n, or n_source with X_source; K, V, scores, scaled and
                         weights have n_keys rows (K, V) or columns (added in 0.3.0) */
} attn_explain;

/* Compute every matrix of `in` into *ex (allocated by the library: free it
 * with attn_explain_free). On failure *ex is zeroed.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_OPTION (mode), ATTN_ERR_ARGUMENT (sizes; a
 * NaN or infinity in X, X_source or the W used, named with its row and
 * column, counted from 0), ATTN_ERR_OVERFLOW (sizes; a matrix shown, Q to the output, that
 * overflows a double from finite inputs), ATTN_ERR_NO_MEMORY. */
ATTN_API attn_status attn_explain_run(attn_explain *ex, const attn_explain_input *in,
                                      attn_error *err);
/* Free what attn_explain_run allocated and zero *ex. NULL is fine. */
ATTN_API void attn_explain_free(attn_explain *ex);

/* Names for the JSON form: tokens (n), features (d_model), value_features
 * (d_v), and the head ("wired", "random", "custom" or "none"). */
typedef struct attn_explain_labels {
    const char *const *tokens;
    const char *const *features;
    const char *const *value_features;
    const char *head;
    const char *const *source_tokens; /* with X_source: its n_source labels (added in 0.3.0) */
} attn_explain_labels;

/* Write `ex` (computed from `in`) as one JSON object, the format of
 * `attn explain --json` described in docs/explainer.md: keys tokens,
 * features, value_features, mode, head, causal, scale, d_model, d_k, d_v, X,
 * W_Q, W_K, W_V, Q, K, V, scores, scaled, weights, output. Matrices are lists
 * of rows printed with 17 significant digits (exact), -inf as null.
 * Like snprintf: *length receives the full length (without the terminator);
 * at most size bytes are written, always terminated when size > 0. Call with
 * size 0 to learn the length. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (ex
 * was not computed from in), ATTN_ERR_STRIDE (buf or length overlapping each
 * other, ex, in or labels). */
ATTN_API attn_status attn_explain_json(char *buf, size_t size, size_t *length,
                                       const attn_explain *ex, const attn_explain_input *in,
                                       const attn_explain_labels *labels, attn_error *err);

/* The toy model on a sentence, explained (added in 0.3.0): what
 * `attn explain --json` writes for these settings, from the sentence alone.
 * The explainer page and the Python binding use it. */
typedef struct attn_toy_explain_options {
    size_t struct_size;              /* set by attn_toy_explain_options_default() (attn.h: "Versioned structs") */
    attn_toy_head head;              /* ATTN_TOY_WIRED (default; ATTN_TOY_ORDER with RoPE), ... */
    attn_explain_mode mode;          /* ATTN_EXPLAIN_QKV (default), _DOT or _AVERAGE */
    int causal, no_scale, scale_by_d_model;
    int tied;                        /* W_K = W_Q */
    attn_explain_positions positions;
    const char *source;              /* keys and values from this sentence (cross-attention), or NULL */
} attn_toy_explain_options;

/* The defaults (the wired head, the QKV mode, no positions, no source): as
 * a value, attn_toy_explain_options_default(); in place, the _init function
 * (attn.h: "Versioned structs"). */
ATTN_API size_t attn_toy_explain_options_init(attn_toy_explain_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_toy_explain_options)
#define attn_toy_explain_options_default attn_toy_explain_options_default_inline

/* Like snprintf: *length receives the JSON's full length; at most size
 * bytes are written, terminated when size > 0 (size 0 to learn the
 * length). Errors: those of attn_toy_tokenize (for the source, the message
 * starts "the source: "), attn_explain_run and attn_explain_json;
 * ATTN_ERR_OPTION for an unknown head or struct_size; ATTN_ERR_STRIDE (buf
 * or length overlapping each other or the sentence). */
ATTN_API attn_status attn_toy_explain_json(char *buf, size_t size, size_t *length, const char *sentence,
                                           const attn_toy_explain_options *options, attn_error *err);

/* ------------------------------------------------------------------------ */
/* How a fast kernel computes it: the explainer's second part               */
/* ------------------------------------------------------------------------ */

/* The toy head of the first part (the wired head, no positions) on a
 * sentence, computed the ways fast programs compute attention, each through
 * the library's own calls (added in 0.4.0; `attn explain --kernel` and the
 * explainer page's second part print and draw it):
 *   1 cost      the bytes of a (T, T) f32 score matrix against the workspace
 *               the streaming kernel needs (attn_sdpa_workspace_size: one
 *               head, d = 64, f32, one thread) for T = 64 .. 65536;
 *   2 tiles     the scaled scores computed block by block (attn_scores on a
 *               block of Q against a block of K), never as one matrix;
 *   3 online    one query row's keys arriving a block at a time: each
 *               block's (out, lse) by attn_sdpa, merged into the running
 *               state by attn_sdpa_merge; the running maximum m, sum l =
 *               e^(lse - m), the rescale e^(m_old - m_new) and the
 *               unnormalised accumulator l·out after each block;
 *   4 causal    which blocks a causal kernel computes whole, masks in part
 *               (the diagonal crosses them) or skips (every key after every
 *               query), and the scores it computes;
 *   5 cache     the causal head token by token: each new key and value
 *               appended to an f64 attn_kv_cache, each new query attended
 *               to it (attn_kv_cache_attend); and what grouped-query heads
 *               save (attn_kv_cache_bytes);
 *   6 split     the last word's query against the whole cache, the keys split
 *               among `workers`, the parts' (out, lse) merged;
 *   7 pages     the sentence's keys and values in a pool of pages
 *               (attn_kv_pages_*, f32, 16 positions a page): sequence A holds
 *               them, B = fork(A) shares its pages, then B and A each append
 *               one position (B copies the last page if it is partly full);
 *               each new position's attention over its pages;
 *   8 ring      ring attention on `ranks` ranks: each holds a shard of the
 *               queries and, in turn, every shard of the keys and values, and
 *               merges what it computes by lse (attn_sdpa_merge);
 *   9 gradient  the backward pass of one row for the loss "sum of the row's
 *               output" (dO all ones): P from the stored lse, dP = dO·Vᵀ,
 *               D = rowsum(dO ∘ O), dS = P ∘ (dP − D); the library's dS
 *               (attn_sdpa_backward's dmask with the scores as a float mask)
 *               and dq; and how |dS| shrinks when the scores are multiplied
 *               by 1, 2, 4 and 8 (as d_k growing 4, 16, 64 times unscaled
 *               would): the softmax saturates.
 * Steps 2, 3, 6, 8 and 9 attend without a mask, as the first part does by
 * default; 4 and 5 with the causal mask. */
#define ATTN_KERNEL_COST_POINTS 6
#define ATTN_KERNEL_PAGE_SIZE 16
#define ATTN_KERNEL_PAGE_EVENTS 4
#define ATTN_KERNEL_POOL_PAGES 12
#define ATTN_KERNEL_SATURATION 4

typedef struct attn_kernel_walk_options {
    size_t struct_size; /* set by attn_kernel_walk_options_default() (attn.h: "Versioned structs") */
    int block;          /* queries and keys per block in steps 2 to 4: 1 to 8 (default 2) */
    int row;            /* the query row of steps 3 and 9: 0 .. n-1, or -1 (default) for the
                           first row whose largest score comes in the latest block (the
                           row whose running state is rescaled last) */
    int workers;        /* step 6's parts: 1 to 8 (default 2), at most the sentence's words */
    int ranks;          /* step 8's ranks: 1 to 8 (default 3), at most the sentence's words */
} attn_kernel_walk_options;

/* The defaults above: as a value, attn_kernel_walk_options_default(); in
 * place, the _init function (attn.h: "Versioned structs"). */
ATTN_API size_t attn_kernel_walk_options_init(attn_kernel_walk_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_kernel_walk_options)
#define attn_kernel_walk_options_default attn_kernel_walk_options_default_inline

/* Every number of the nine steps. Matrices are f64, C order, in memory the
 * library allocated (attn_kernel_walk_free). n = words, nb = ceil(n / block).
 * The library fills the struct: set walk->struct_size = sizeof *walk before
 * attn_kernel_walk_run (attn.h: "Versioned structs"). 0.4.0's walk is the
 * first and only size so far, so any other struct_size is ATTN_ERR_OPTION;
 * a later release that appends fields will fill only the caller's
 * struct_size bytes, and free and print only those. */
typedef struct attn_kernel_walk {
    size_t struct_size;         /* sizeof(attn_kernel_walk) as the caller was compiled */
    int n, d_k, d_v, block, nb, row, workers, ranks;
    double scale;               /* 1/sqrt(d_k) */
    const char *words[ATTN_TOY_MAX_TOKENS];
    double *Q, *K, *V;          /* (n, d_k), (n, d_k), (n, d_v): the first part's */
    double *scaled;             /* (n, n) the first part's Q·Kᵀ·scale, as one matrix */
    double *weights, *output;   /* (n, n), (n, d_v) the first part's softmax and output */
    double *causal_output;      /* (n, d_v) the same with the causal mask, by attn_sdpa */
    /* 1 cost */
    int64_t cost_T[ATTN_KERNEL_COST_POINTS];
    double cost_scores[ATTN_KERNEL_COST_POINTS];    /* bytes of the (T, T) f32 scores */
    double cost_workspace[ATTN_KERNEL_COST_POINTS]; /* bytes attn_sdpa_workspace_size asks */
    /* 2 tiles */
    double *tiles;              /* (n, n) the scaled scores, each block computed alone */
    /* 3 online softmax of query `row`, after block b = 0 .. nb-1 */
    double *block_out, *block_lse;       /* (nb, d_v), (nb): block b alone */
    double *run_m, *run_l, *run_rescale; /* (nb) running max, sum, e^(m_old - m_new) (1 at b = 0) */
    double *run_acc, *run_out, *run_lse; /* (nb, d_v), (nb, d_v), (nb): l·out, out, lse */
    double *row_weights;                 /* (n) e^(s_j - lse) with the last lse */
    /* 4 causal blocks: kind[bi * nb + bj] 0 skipped (all masked), 1 on the
     * diagonal (masked in part), 2 computed whole */
    int *block_kind;
    int blocks_computed, blocks_skipped;
    int64_t scores_computed;    /* cells of the blocks computed, against n·n */
    /* 5 KV cache */
    double *cache_output;       /* (n, d_v) token by token through the cache */
    int64_t cache_lengths_ok;   /* the cache's length after each step was 1 .. n */
    double gqa_bytes_mha, gqa_bytes_gqa; /* a cache of 4096 positions, 32 query heads of
                                            128, f16: 32 KV heads, or 8 (groups of 4) */
    /* 6 split-KV decode of the last word */
    int split_bounds[9];        /* worker w has keys split_bounds[w] .. split_bounds[w+1]-1 */
    double *split_out, *split_lse; /* (workers, d_v), (workers) */
    double *split_merged;       /* (d_v) merged; split_merged_lse its lse */
    double split_merged_lse;
    /* 7 pages: after each event (A holds the sentence; B = fork(A); B
     * appends; A appends), for A and B their length and page table, each
     * page's reference count and the free pages */
    int64_t page_len[ATTN_KERNEL_PAGE_EVENTS][2];
    int page_table[ATTN_KERNEL_PAGE_EVENTS][2][ATTN_KERNEL_POOL_PAGES];
    int page_refs[ATTN_KERNEL_PAGE_EVENTS][ATTN_KERNEL_POOL_PAGES];
    int page_free[ATTN_KERNEL_PAGE_EVENTS];
    double *page_out;           /* (2, d_v) A's and B's new position attending over its pages (f32 pool) */
    double *page_ref;           /* (2, d_v) the same by attn_sdpa over a contiguous f64 copy */
    /* 8 ring: rank r holds queries and, at first, keys ring_bounds[r] ..
     * ring_bounds[r+1]-1; at step s it holds the keys of shard (r - s) mod ranks */
    int ring_bounds[9];
    double *ring_out, *ring_lse; /* (ranks, n, d_v), (ranks, n): every rank's rows after step s */
    /* 9 gradient of query `row` */
    double *grad_dO, *grad_P, *grad_dP, *grad_dS; /* (d_v), (n), (n), (n) */
    double grad_D;
    double *grad_dS_lib;        /* (n) attn_sdpa_backward's dmask */
    double *grad_dq;            /* (d_k) attn_sdpa_backward's dq */
    double sat_factor[ATTN_KERNEL_SATURATION], sat_top[ATTN_KERNEL_SATURATION], sat_norm[ATTN_KERNEL_SATURATION];
} attn_kernel_walk;

/* Compute every step for `sentence` into *walk (allocated by the library:
 * free it with attn_kernel_walk_free; on failure every field but
 * struct_size is zero, and with a struct_size refused nothing is written).
 * Errors: those of attn_toy_tokenize and
 * attn_explain_run; ATTN_ERR_NULL; ATTN_ERR_OPTION (walk's or options'
 * struct_size, or block, row, workers or ranks out of range);
 * ATTN_ERR_NO_MEMORY. attn_kernel_walk_free frees a walk run filled (one
 * whose struct_size is another size is left as it is) and zeroes it but
 * its struct_size; freeing twice is fine. */
ATTN_API attn_status attn_kernel_walk_run(attn_kernel_walk *walk, const char *sentence,
                                          const attn_kernel_walk_options *options, attn_error *err);
ATTN_API void attn_kernel_walk_free(attn_kernel_walk *walk);

/* Step 1 for any T (the page's slider): the bytes of a (T, T) f32 score
 * matrix and the workspace the streaming kernel asks for T queries and keys
 * of d = 64, f32, one thread. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (T
 * outside 1 .. 65536), ATTN_ERR_NO_MEMORY (it allocates, and frees, an
 * output of T rows, which it does not write). */
ATTN_API attn_status attn_kernel_cost(double *score_bytes, double *workspace_bytes, int64_t T, attn_error *err);

/* `walk` as one JSON object, the format of `attn explain --kernel --json`
 * (docs/explainer.md): one key per step (cost, tiles, online, causal, cache,
 * split, pages, ring, gradient) with the numbers above, 17 significant
 * digits, after the keys every step shares (tokens, d_k, d_v, scale, block,
 * blocks, row, Q, K, V, scaled, weights, output, causal_output). `step`
 * NULL: every step; else only that one. Like snprintf, as
 * attn_explain_json. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (a walk not
 * computed), ATTN_ERR_OPTION (an unknown step). */
ATTN_API attn_status attn_kernel_walk_json(char *buf, size_t size, size_t *length, const attn_kernel_walk *walk,
                                           const char *step, attn_error *err);

/* ------------------------------------------------------------------------ */
/* Training one head                                                        */
/* ------------------------------------------------------------------------ */

/* The task: sentences from the toy grammar, "DET ADJ* NOUN VERB [PREP DET
 * ADJ* NOUN]", up to two adjectives each time and the prepositional phrase
 * in 7 sentences of 10 (subjects of every kind: animals, things, places),
 * attended with a causal mask; every word's output must equal the features noun,
 * animal, thing and place (so d_v = 4) of the last noun it sees (zeros
 * before the first), so a verb's are its subject's. The verb alone says nothing of
 * its subject, and the subject is the only noun it can see, so the head must
 * learn to find it: W_V to carry the features, W_Q and W_K to make a verb's
 * query meet a noun's key. The loss is the squared error summed over the
 * four features, averaged over the batch's words. */
#define ATTN_TRAIN_D_V 4

typedef struct attn_train_options {
    size_t struct_size;   /* set by attn_train_options_default() (attn.h: "Versioned structs") */
    int d_k;              /* query/key size, 1 to 1024 (default ATTN_TOY_D_K) */
    int steps;            /* Adam steps, 1 to 100000 (default 1000) */
    int batch;            /* sentences per step, 1 to 1024 (default 16) */
    double learning_rate; /* Adam's, in (0, 10] (default 0.1) */
    int no_scale;         /* 1: scores are not divided by sqrt(d_k) */
    uint64_t seed;        /* the initial weights and the sentences (default 1) */
} attn_train_options;

/* The defaults given above: as a value, attn_train_options_default(); in
 * place, attn_train_options_init(&o, sizeof o) (attn.h: "Versioned
 * structs"; the library also keeps 0.2's attn_train_options_default for
 * binaries built against it). */
ATTN_API size_t attn_train_options_init(attn_train_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_train_options)
#define attn_train_options_default attn_train_options_default_inline

/* Train one head on the task from standard-normal initial weights (the
 * same for the same seed and d_k, scaled or not), with Adam on gradients
 * from attn_sdpa_backward, in f64. Writes the learned w_q and w_k
 * (ATTN_TOY_D_MODEL × d_k) and w_v (ATTN_TOY_D_MODEL × ATTN_TRAIN_D_V), C
 * order, used as X·W like attn_toy_weights; per step (before its update) the
 * batch's loss into loss[0..steps) and the Frobenius norm of dLoss/dW_Q into
 * grad_wq[0..steps) (either may be NULL). Deterministic for a seed. On
 * failure nothing is written.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_OPTION (struct_size), ATTN_ERR_ARGUMENT (a
 * field out of range), ATTN_ERR_NO_MEMORY, ATTN_ERR_STRIDE (two outputs
 * overlapping). */
ATTN_API attn_status attn_train_head(double *w_q, double *w_k, double *w_v, double *loss, double *grad_wq,
                                     const attn_train_options *options, attn_error *err);

/* ------------------------------------------------------------------------ */
/* The scaling experiment: why divide by sqrt(d_k)                          */
/* ------------------------------------------------------------------------ */

#define ATTN_SCALING_BINS 48
/* Histogram axes: raw scores on [-96, 96], scaled scores on [-4, 4]. */
#define ATTN_SCALING_RAW_RANGE 96.0
#define ATTN_SCALING_SCALED_RANGE 4.0

/* One row of the experiment: `queries` standard-normal queries of size d, each
 * with its own `keys` standard-normal keys. Scores are q·k. */
typedef struct attn_scaling_row {
    int d, keys, queries;
    double spread_raw;    /* std of the raw scores (about sqrt(d)) */
    double spread_scaled; /* std of scores / sqrt(d) (about 1) */
    double top_raw;       /* mean over queries of the largest softmax weight, raw */
    double top_scaled;    /* the same after dividing the scores by sqrt(d) */
    double top_div_d;     /* the same after dividing by d (over-corrected) */
    /* Size of the softmax's gradient: the Frobenius norm of its Jacobian
     * diag(p) - p·pᵀ for each query, its mean and median over queries, for
     * raw and for scaled scores. Small means little gradient flows back. */
    double grad_mean_raw, grad_mean_scaled, grad_median_raw, grad_median_scaled;
    /* Densities of the raw and scaled scores on the axes above (values
     * outside an axis are not counted). */
    double hist_raw[ATTN_SCALING_BINS], hist_scaled[ATTN_SCALING_BINS];
} attn_scaling_row;

/* Run the experiment for one d with the library's portable generator seeded
 * with `seed` (standard normals by Box-Muller). Deterministic for a seed.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (d, keys < 1 or > 2^20; queries < 1
 * or > 2^24), ATTN_ERR_NO_MEMORY. */
ATTN_API attn_status attn_scaling_measure(attn_scaling_row *row, int d, int queries, int keys,
                                          uint64_t seed, attn_error *err);

/* Write `row` as one JSON object: keys d, keys, queries, spread_raw,
 * spread_scaled, top_raw, top_scaled, top_div_d, grad_mean_raw,
 * grad_mean_scaled, grad_median_raw, grad_median_scaled (17 significant
 * digits), and with `histograms` also raw_range, scaled_range, hist_raw and
 * hist_scaled. Like snprintf: *length receives the full length (without the
 * terminator); at most size bytes are written, always terminated when
 * size > 0. Errors: ATTN_ERR_NULL, ATTN_ERR_STRIDE (buf or length
 * overlapping each other or the row). */
ATTN_API attn_status attn_scaling_json(char *buf, size_t size, size_t *length,
                                       const attn_scaling_row *row, int histograms,
                                       attn_error *err);

/* ------------------------------------------------------------------------ */
/* Additive attention, the scorer dot products replaced                     */
/* ------------------------------------------------------------------------ */

/* Additive attention's scores (Bahdanau et al., 2014), a small network in
 * place of the dot product: scores (n, m) with
 *   scores[i][j] = sum_u v[u] tanh((q W1)[i][u] + (k W2)[j][u]),
 * q (n, d), k (m, d), W1 and W2 (d, hidden), v (hidden), all C order, in
 * double (added in 0.3.0). q W1 and k W2 are computed once, so a pair costs
 * `hidden` additions, tanh and multiply-adds, where a dot product costs d
 * multiply-adds. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (a size below 1),
 * ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY, ATTN_ERR_STRIDE (scores overlapping
 * an input). */
ATTN_API attn_status attn_additive_scores(double *scores, const double *q, int n, const double *k, int m, int d,
                                          const double *w1, const double *w2, const double *v, int hidden,
                                          attn_error *err);

/* weights (n, m) = the softmax of each row of scores (n, m), with a top-left
 * causal mask when causal (row i sees columns 0..i), computed by attn_sdpa
 * (the scores as an additive mask on zero queries and keys), so any scorer
 * gets the library's own softmax (added in 0.3.0). Errors: ATTN_ERR_NULL,
 * ATTN_ERR_ARGUMENT, ATTN_ERR_OVERFLOW (n m doubles past the address space),
 * ATTN_ERR_NO_MEMORY, ATTN_ERR_STRIDE (weights overlapping scores: not in
 * place). */
ATTN_API attn_status attn_softmax_rows(double *weights, const double *scores, int n, int m, int causal, attn_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TEACH_H */
