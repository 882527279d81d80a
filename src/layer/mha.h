/* mha.h -- the multi-head attention layer's pieces that its forward (mha.c),
 * its decoding steps (mha_cached.c, mha_paged.c) and its backward pass
 * (mha_backward.c) share. Not public. */
#ifndef ATTN_LAYER_MHA_H
#define ATTN_LAYER_MHA_H

#include "base/base.h"
#include "kernels/rope.h"
#include "kernels/ukernel_bf16.h"

/* One call, worked out. */
typedef struct attn_mha_call {
    attn_mha_params p;
    attn_mha_options o;
    attn_dtype dt;
    bool batched;
    int64_t N, L, S, S2, E, kdim, vdim, Hq, Hkv, D;
    attn_tensor q, k, v;                 /* the inputs seen as (N, rows, features) */
    const attn_tensor *w[3], *b[3];      /* the q, k, v projections: weight (rows, in) and bias */
    int64_t w_row0[3];                   /* the projection's first row in w (in_proj_weight packs all three) */
    int64_t b_row0[3];                   /* and in b (in_proj_bias packs all three, beside either kind of weight) */
    attn_sdpa_options attention;         /* options->attention as read, its sinks params->sinks when given
                                            (NULL: none); its context NULL, read into m->context */
    int threads;                         /* for the projections: the call's context, or the process's count */
    bool measuring;                      /* a *_workspace_size call: tensors may have NULL data (attn_check_data) */
    /* options->rope is applied inside the attention (attn_sdpa_options.rope:
     * no turned copy of q or k) when L >= S, or under top-left alignment.
     * Otherwise (fewer queries than keys) q and k are turned after
     * projecting (attn_mha_query_rope: the queries placed as attn_sdpa
     * places them), and the decode kernel stays open to a few queries. */
    bool rope_in_attention;
    /* The causal mode the attention applies, and the masks merged into one
     * additive mask (mask_n, mask_h, mask_l, S2) when `masked` (mask_n is 1 or N,
     * mask_h 1 or Hq, mask_l 1 or L: a dimension only where a mask varies;
     * a key_padding_mask alone is (N, 1, 1, S2), no L×S2 buffer). With keys
     * appended (S2 > S) the layer's causal limit goes into that mask
     * instead (causal_in_mask): it holds over the S keys of `key`, and the
     * appended keys stay visible to every query, as PyTorch pads an (L, S)
     * attn_mask with a zero column for each. */
    attn_causal sdpa_causal;
    bool causal_in_mask, masked;
    int64_t mask_n, mask_h, mask_l;
    /* The q, k, v and out weights packed for their products (options->packed,
     * checked against the parameters): attn_sgemm's floats, or bf16 pairs for
     * a projection on the bf16 GEMM (attn_mha_gemm16); NULL: each product
     * packs its own. */
    const void *packed[4];
    attn_tensor packed_memory; /* options->packed's bytes, the panels read where they lie (data NULL: none) */
    /* Where the call's buffers come from: an arena over the caller's
     * workspace or malloc's; NULL: plain malloc, buffer by buffer. */
    attn_arena *arena;
    void *gemm_scratch; /* from the arena: enough for every product of the call; NULL: each allocates */
    char *out_scratch;  /* from the arena: out_proj's result when out's rows are not evenly spaced */
    /* RoPE's tables for q and k from the arena (rope_ready), when q and k
     * are turned after projecting; else attn_rope makes its own. */
    attn_rope_plan rope_plan[2];
    int64_t rope_p0; /* their position_offset */
    bool rope_ready;
    attn_context context; /* the call's context as read: threads, workspace */
} attn_mha_call;

/* The prepared weights (attn_mha_weights_init), in the caller's memory. */
struct attn_mha_weights {
    uint64_t magic;       /* ATTN_MHA_WEIGHTS_MAGIC once initialised */
    const char *isa;      /* the kernels they were packed for: their sgemm_nr */
    int nr;
    const char *bf16;     /* the bf16 set whose gemm_nr, gemm_kp bf16 weights were paired for, or NULL */
    const attn_bf16_kernels *gemm16[4]; /* per projection: its pairs' set, or NULL (f32 panels) */
    int64_t E, Hq, Hkv, kdim, vdim;
    attn_tensor source[4]; /* the q, k, v and out weights packed (in_proj_weight thrice) */
    int64_t row0[4];       /* each projection's first row in its source */
    void *panels[4];       /* Wᵀ (in × F) packed by attn_sgemm_pack_b, or by attn_gemm_bf16_pack_b */
    int64_t span;          /* bytes from this struct to the end of the last panel: what a call reads */
};
#define ATTN_MHA_WEIGHTS_MAGIC 0x6174746e6d686177ull /* "attnmhaw" */

/* The call's own buffers from m->arena (set): q (N, L, Hq·D), k and v
 * (N, key_rows, Hkv·D; the rows past S zeroed, for add_zero_attn's key and
 * bias_k's, which is written over), the heads' output (N, L, E), the
 * products' scratch, out_proj's when out's rows are not evenly spaced, and
 * RoPE's tables when q and k are turned after projecting. False when the
 * arena cannot give them. A measuring arena counts them all (the pointers
 * NULL) and gives true: a layer measures its workspace allocating nothing. */
bool attn_mha_buffers(char **q, char **k, char **v, char **heads, attn_mha_call *m, const attn_tensor *out_view,
                      int64_t key_rows);
/* The attention's context for a call whose buffers came from m->arena: the
 * layer's threads, and a workspace of what the arena has left (none when
 * the arena is malloc's). */
attn_context attn_mha_rest(const attn_mha_call *m);
/* The status for an arena that could not give a buffer. */
attn_status attn_mha_out_of(const attn_mha_call *m, attn_error *err);

/* The parameters' checks (sizes, shapes, dtypes against m->dt), filling
 * m's sizes and projections. */
attn_status attn_mha_check_params(attn_mha_call *m, attn_error *err);
/* options->packed checked against m's parameters and dtype; m->packed set. */
attn_status attn_mha_use_packed(attn_mha_call *m, attn_error *err);
/* The bf16 kernels that compute a projection of an f32 layer whose weight
 * is w: the active bf16 set, when w is bf16 and the set has a GEMM (AMX,
 * AVX512_BF16 at the FMA's rate, or the portable emulation); NULL for f32
 * sums (attn_sgemm) or an f64 layer's double sums. A function of the
 * dtypes and the process's kernels, so packing and calls agree. */
const attn_bf16_kernels *attn_mha_gemm16(attn_dtype layer, const attn_tensor *w);
/* ATTN_VERBOSE: one line naming the kernel of each of the call's four
 * products (call: "mha", "mha_cached", ...). */
void attn_mha_verbose_gemm(const char *call, const attn_mha_call *m);
/* Bytes of scratch the call's products need at most (attn_gemm_scratch_bytes
 * over the q, k, v and out products), key_rows keys projected. */
size_t attn_mha_gemm_scratch_bytes(const attn_mha_call *m, int64_t key_rows);

/* The attention's options for this layer: the caller's attention options
 * (variants, scale, dropout, compute) with the layer's causal mode, mask and
 * context. */
attn_status attn_mha_sdpa_options(attn_sdpa_options *so, const attn_mha_call *m, attn_causal causal,
                                  const attn_tensor *mask, attn_error *err);

/* x (L, N, F), (N, L, F) with batch_first, or (L, F), seen as (N, L, F). */
attn_status attn_mha_as_batch(attn_tensor *out, const attn_tensor *x, const char *name, const attn_mha_call *m,
                              int64_t features, attn_error *err);
/* RoPE's position_offset for rows after the `held` positions a cache holds:
 * the caller's offset moved on past them, or left as it is when it is
 * outside attn_rope's range (0 to 2^53) already, so that the check reports
 * the caller's value rather than a sum that overflowed int64. */
static inline int64_t attn_mha_rope_after(int64_t offset, int64_t held) {
    return offset >= 0 && offset <= ((int64_t)1 << 53) ? offset + held : offset;
}
/* A store of keys and values (a cache or a pool, `what`, as a paged view)
 * checked against the layer that writes to it: its dtype (f64 for an f64
 * layer, another for f32), its heads (num_kv_heads) and their sizes (D);
 * messages in the layer's terms, before anything is written. */
attn_status attn_mha_check_store(const attn_kv_paged_view *w, const char *what, const attn_mha_call *m,
                                 attn_error *err);
/* RoPE's positions over the whole sequences of attn_mha and
 * attn_mha_backward (position_offset over max(L, S')) within 2^53, as
 * attn_sdpa holds them; after attn_mha_plan, which checked the options. */
attn_status attn_mha_check_rope_span(const attn_mha_call *m, attn_error *err);
/* The same for a step of L new positions after the `held` a sequence
 * holds (attn_mha_cached, attn_mha_paged, attn_mha_cached_batch): the
 * sequence so far, position_offset + held + L, within 2^53, the test
 * attn_mha_check_rope_span makes of the whole sequence, so that a sequence
 * run step by step is refused where the whole pass is, and before anything
 * is written (a step checked only for its first position would turn the
 * rest past 2^53). r: the options as read, position_offset from 0 to 2^53. */
attn_status attn_mha_check_step_rope(const attn_rope_options *r, int64_t held, int64_t L, attn_error *err);
/* Every check of one call and its sizes, with out seen as (N, L, E). */
attn_status attn_mha_plan(attn_mha_call *m, attn_tensor *out_view, attn_tensor *out, const attn_tensor *query,
                          const attn_tensor *key, const attn_tensor *value, attn_error *err);
/* Every tensor a call reads, named for messages, into list (at most
 * ATTN_MHA_INPUTS; NULL where absent): query, key and value, the
 * parameters, the masks, the attention options' tensors
 * (attn_named_options: ALiBi's slopes and the sinks; the others a layer
 * refuses) and the packed weights' memory. The outputs and the workspace
 * are checked against them (attn_check_no_overlap, attn_check_workspace). */
enum { ATTN_MHA_INPUTS = 18 + ATTN_OPTION_TENSORS };
void attn_mha_inputs(attn_named list[ATTN_MHA_INPUTS], const attn_mha_call *m, const attn_tensor *query,
                     const attn_tensor *key, const attn_tensor *value);
/* A head-split buffer laid out (N, rows, H·D), the projections' natural
 * layout, seen as (N, H, rows, D). */
void attn_mha_heads_view(attn_tensor *t, char *data, const attn_mha_call *m, int64_t H, int64_t rows);
/* Whether the rows of all sequences of x (N, rows, F) are evenly spaced, so
 * one matrix of N·rows rows covers them and one product does the batch. */
static inline bool attn_mha_rows_even(const attn_tensor *x) {
    int64_t span; /* the stride a sequence would have; may not fit when shape[1] = 1 */
    return x->shape[0] == 1 || (attn_mul_i64(x->shape[1], x->strides[1], &span) && x->strides[0] == span);
}
/* Sequence n's first `rows` rows of x (N, rows', F) as a matrix (rows × F). */
attn_mat attn_mha_rows(const attn_tensor *x, int64_t n, int64_t rows);
/* dst (N, rows_out, F), contiguous, = x (N, rows, in) · W[row0 .. row0 + F)ᵀ
 * + b[b_row0 .. b_row0 + F), in f32 sums for an f32 layer and double sums for an f64 one; row
 * `rows` of each sequence is bias_kv when given. False when the product's
 * buffers cannot be allocated. */
bool attn_mha_project(char *dst, const attn_tensor *x, const attn_tensor *w, const void *packed, const attn_tensor *b,
                      int64_t row0, int64_t b_row0, int64_t F, int64_t rows_out, const attn_tensor *bias_kv, const attn_mha_call *m);
/* F1 and F2 of the forward (packed weights when m->packed, buffers from
 * m->arena when set): q (N, L, Hq·D), k and v (N, key_rows, Hkv·D)
 * projected, k and v with the bias_kv row when bias_kv and the layer has
 * one, then q and k rotated when options->rope. */
attn_status attn_mha_project_qkv(char *q, char *k, char *v, const attn_mha_call *m, int64_t key_rows, bool bias_kv,
                                attn_error *err);
/* The merged mask (mask_n, mask_h, mask_l, S2) as a tensor over data, and its
 * values: both masks, the causal limit when causal_in_mask, 0 for the
 * appended keys. */
void attn_mha_mask_view(attn_tensor *t, char *data, const attn_mha_call *m);
void attn_mha_merge_masks(char *dst, const attn_mha_call *m);
/* options->attn_mask and key_padding_mask checked against m's sizes (L
 * queries, S keys: a cache's step passes the keys it will hold), their
 * dtypes (bool or the layer's) and extents; messages name the shapes that
 * fit, in numbers. */
attn_status attn_mha_check_masks(const attn_mha_call *m, attn_error *err);
/* RoPE on the projected q (N, L, Hq·D) and k (N, key_rows, Hkv·D), in place. */
attn_status attn_mha_rotate_heads(char *q, char *k, const attn_mha_call *m, int64_t key_rows, attn_error *err);
/* options->rope as it turns the queries: query row l at position_offset +
 * l + off, where off is the causal alignment's (0 top-left, S2 - L
 * bottom-right and without a causal mask), as attn_sdpa places them: the L
 * queries are the last of the S2 keys' positions. Into *r, read from the
 * caller's versioned struct. */
attn_status attn_mha_query_rope(attn_rope_options *r, const attn_mha_call *m, attn_error *err);
/* out (N, L, E) = cat (N, L, E) · out_proj_weightᵀ + out_proj_bias. False
 * when the product's buffers cannot be allocated. */
bool attn_mha_project_out(const attn_tensor *out, const char *cat, const attn_mha_call *m);

#endif /* ATTN_LAYER_MHA_H */
