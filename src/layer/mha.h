/* mha.h -- the multi-head attention layer's pieces that its forward (mha.c),
 * its decoding step and its backward pass (mha_backward.c) share. Not public. */
#ifndef ATTN_LAYER_MHA_H
#define ATTN_LAYER_MHA_H

#include "base/base.h"

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
} attn_mha_call;

/* The attention's options for this layer: the caller's attention options
 * (variants, scale, dropout, compute) with the layer's causal mode, mask and
 * context. */
attn_status attn_mha_sdpa_options(attn_sdpa_options *so, const attn_mha_call *m, attn_causal causal,
                                  const attn_tensor *mask, attn_error *err);

/* The caller's versioned struct read into ours (which holds the defaults). */
attn_status attn_mha_read_struct(void *ours, size_t size, const void *theirs, const char *name, attn_error *err);
/* x (L, N, F), (N, L, F) with batch_first, or (L, F), seen as (N, L, F). */
attn_status attn_mha_as_batch(attn_tensor *out, const attn_tensor *x, const char *name, const attn_mha_call *m,
                              int64_t features, attn_error *err);
/* Every check of one call and its sizes, with out seen as (N, L, E). */
attn_status attn_mha_plan(attn_mha_call *m, attn_tensor *out_view, attn_tensor *out, const attn_tensor *query,
                          const attn_tensor *key, const attn_tensor *value, attn_error *err);
/* dst (N, H, rows_out, D) = x (N, rows, in) · W[row0 .., :]ᵀ + b, in double
 * sums (acc_row: `in` doubles); row `rows` is bias_kv when given. False when
 * its block of packed weights cannot be allocated. */
bool attn_mha_project(double *acc_row, char *dst, const attn_tensor *x, const attn_tensor *w, const attn_tensor *b,
                      int64_t row0, int64_t H, int64_t D, int64_t rows_out, const attn_tensor *bias_kv);
/* Both masks as one additive mask (N, Hq, L, S2). */
void attn_mha_merge_masks(char *dst, const attn_mha_call *m);
/* RoPE on the projected q (N, Hq, L, D) and k (N, Hkv, S2, D), in place. */
attn_status attn_mha_rotate_heads(char *q, char *k, const attn_mha_call *m, attn_error *err);
/* out (N, L, E) = the heads side by side · out_proj_weightᵀ + out_proj_bias
 * (row: E doubles). False when its block of packed weights cannot be allocated. */
bool attn_mha_project_out(const attn_tensor *out, const char *heads, const attn_mha_call *m, double *row);

#endif /* ATTN_LAYER_MHA_H */
