/* fast.h -- the fast f32 kernels (flash.c, decode.c). Not public. */
#ifndef ATTN_FAST_H
#define ATTN_FAST_H

#include "base/base.h"

/* Whether the f32 kernels may compute scores from queries (already times
 * the scale) of largest magnitude qmax and keys of largest magnitude kmax,
 * E values each; -1 means some value is not finite. Beyond these bounds the
 * exact f64 kernel computes instead:
 *   |score| <= qmax·kmax·E <= 2^100: adding any finite mask value, up to
 *     ±FLT_MAX, cannot round past FLT_MAX (half of its ulp is 2^103), so
 *     every finite score stays finite; and f32's softmax is a plain maximum
 *     long before such scores anyway;
 *   kmax·E <= 2^100: a query rounded to f32 near the underflow threshold
 *     (an error of at most 2^-150) moves a score by at most 2^-50.
 * f32 arithmetic keeps subnormals (nothing sets flush-to-zero). */
static inline bool attn_f32_scores_fit(double qmax, double kmax, int64_t E) {
    return qmax >= 0 && kmax >= 0 && qmax * kmax * (double)E <= 0x1p100 &&
           kmax * (double)E <= 0x1p100;
}

/* The fast f32 path (flash.c) over all slices of one call, without weights;
 * bf16 selects the bf16 compute mode. Fills *info.
 * Returns ATTN_OK, ATTN_ERR_OVERFLOW or ATTN_ERR_NO_MEMORY, with *err filled. */
attn_status attn_flash_run(const attn_slices *sl, bool bf16, attn_run_info *info, attn_error *err);

/* The f32 decode path (decode.c): a few queries against many keys, split
 * over the keys. attn_decode_applies says when it is the one to use. */
bool attn_decode_applies(int64_t L, int64_t S);
attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err);

#endif /* ATTN_FAST_H */
