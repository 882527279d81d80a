/* dropout.h -- dropout on the attention weights, in one place for every
 * kernel: weight (i, j) of a slice is kept with probability 1 - p and then
 * scaled by 1/(1 - p), PyTorch's semantics (p = 1 keeps none). Whether it is kept comes from
 * Philox-4x32-10 keyed by the seed, with the (slice, row, column) as the
 * counter, so the forward and the backward regenerate the same mask
 * without storing it, for any thread count or tile size. The softmax's
 * statistics (its maximum, its sum, the lse) are those of the weights
 * before dropout. Not public. */
#ifndef ATTN_DROPOUT_H
#define ATTN_DROPOUT_H

#include "kernels/score.h"

/* Whether weight (i, j) of problem p survives (always, without dropout). i
 * is a row of the problem as given (p->row0 is added). */
bool attn_dropout_keeps(const attn_problem *p, int64_t i, int64_t j);

/* What a kept weight is multiplied by: 1/(1 - p). With p = 1 no weight is
 * kept (PyTorch's dropout then gives zeros), and 1/(1 - p) would be +inf:
 * 0 instead, so that no product with it, nor a bound drawn from it, is
 * ever inf or NaN. */
static inline double attn_dropout_scale(double p) { return p < 1 ? 1.0 / (1.0 - p) : 0.0; }

/* Row r of block s, the weights of query i against keys j0..j0+n-1: dropped
 * weights become 0, kept ones are scaled by 1/(1 - p). Nothing happens
 * without dropout. */
void attn_dropout_row(attn_score_block s, int64_t r, const attn_problem *p, int64_t i, int64_t j0, int64_t n);

#endif /* ATTN_DROPOUT_H */
