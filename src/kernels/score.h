/* score.h -- the score epilogue: the one place where q·k (already scaled)
 * becomes the score the softmax takes, for every kernel (exact, flash,
 * decode, both backward passes), in f64 or f32. Soft-capping, ALiBi, the
 * bool mask, the additive float mask, the causal limit, the sliding window
 * and padding keys are applied here and nowhere else. Not public. */
#ifndef ATTN_SCORE_H
#define ATTN_SCORE_H

#include "base/base.h"

struct attn_ukernels;

/* A block of scores, rows × cols with row stride ld, in f64 (the exact
 * kernels) or f32 (the fast ones). */
typedef struct attn_score_block {
    void *base;
    bool f64;
    int64_t ld;
} attn_score_block;

/* The scores s of query rows i0..i0+rows-1 against keys j0..j0+nc-1 of p,
 * holding q·k·scale, become the scores the softmax takes: soft-capped, the
 * ALiBi bias subtracted, a float mask added; keys a bool mask excludes, keys
 * past a row's causal limit or before its sliding window (both only looked
 * at when `causal_block`) and keys nc..nc_pad-1 (padding) get -inf. Returns
 * false when a float mask value added is NaN or +inf, which f32 kernels hand
 * to the exact kernel (which takes them as they are). uk gives f32 blocks
 * their vector loops; NULL for f64 blocks. With soft-capping, dcap (NULL
 * when not wanted; laid out like s) receives the cap's derivative 1 -
 * tanh²(s / cap) for the backward pass. row_max (NULL when not wanted; f32
 * blocks with nc_pad a whole number of vectors) receives each row's largest
 * score, as uk->max gives it, for the online softmax. */
/* Whether attn_score_epilogue would change none of the scores of a block
 * (no cap, bias or mask, no causal limit or window through it, no padding)
 * and only give the rows' maxima, which a kernel may then take itself. */
bool attn_score_epilogue_only_max(const attn_problem *p, bool causal_block, int64_t nc, int64_t nc_pad);
bool attn_score_epilogue(const struct attn_ukernels *uk, attn_score_block s, const attn_problem *p,
                         int64_t i0, int64_t rows, int64_t j0, int64_t nc, int64_t nc_pad,
                         bool causal_block, const attn_score_block *dcap, float *row_max);

#endif /* ATTN_SCORE_H */
