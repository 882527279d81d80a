/* fast.h -- the fast f32 kernels (flash.c, decode.c) and the exact merge of
 * partial results (merge.c). Not public. */
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

/* Whether p's ALiBi bias (at most |slope| · (L + S)) and sink stay far
 * inside f32's range, so that they add to any score that fits without
 * overflowing; and whether its soft cap is at least 2^-100: the f32 kernels
 * cap with 1/cap in f32, which overflows below about 2^-128 (a score of 0
 * became NaN, and the cap's derivative that of an uncapped score). */
static inline bool attn_f32_bias_fits(const attn_problem *p, int64_t L, int64_t S) {
    return (!p->alibi || fabs(p->alibi_slope) * ((double)L + (double)S) <= 0x1p100) &&
           (!p->has_sink || fabs(p->sink) <= 0x1p100) && (!(p->softcap > 0) || p->softcap >= 0x1p-100);
}

/* The fast f32 path (flash.c) over all slices of one call, without weights;
 * bf16 selects the bf16 compute mode. Fills *info.
 * Returns ATTN_OK, ATTN_ERR_OVERFLOW or ATTN_ERR_NO_MEMORY, with *err filled. */
attn_status attn_flash_run(const attn_slices *sl, bool bf16, attn_run_info *info, attn_error *err);
/* The same over the slices of n_calls planned calls at once (a ragged
 * batch: one call per sequence), their work items scheduled together, each
 * call's blocks those it takes alone, so that every call's results are
 * bitwise those of attn_flash_run on it. The calls share E, Ev, the bf16
 * mode, the thread count and the arena (sls[0]'s). */
attn_status attn_flash_run_calls(const attn_slices *const *sls, int64_t n_calls, bool bf16, attn_run_info *info,
                                 attn_error *err);

/* The f32 decode path (decode.c): a few queries (L <= ATTN_DECODE_MAX_L)
 * against the keys, split over the keys.
 * attn_decode_chunk is the cost model that chooses between it and flash:
 * for L queries against S keys in `slices` slices whose query heads share
 * KV heads `group` at a time, the keys per split-KV chunk, or 0 when flash
 * is the faster kernel. It depends on the shape only (never on the thread
 * count), so results are bitwise the same for any number of threads.
 * attn_decode_chunk_of applies it to one planned call (0 also for RoPE,
 * which only flash applies); every caller chooses through it, so that a
 * sequence of a ragged batch gets the kernel and split it gets alone.
 * attn_decode_run runs one call (its chunk_of > 0); attn_decode_run_calls
 * runs several as one job, their work items scheduled together, each call's
 * results bitwise those of attn_decode_run on it. The calls share the
 * thread count and the arena (sls[0]'s). */
enum { ATTN_DECODE_MAX_L = 8 };
int64_t attn_decode_chunk(int64_t L, int64_t S, int64_t slices, int64_t group);
int64_t attn_decode_chunk_of(const attn_slices *sl);
attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err);
attn_status attn_decode_run_calls(const attn_slices *const *sls, int64_t n_calls, attn_run_info *info,
                                  attn_error *err);

/* Packing (pack.c). Keys and values come from row sources (base/rows.h),
 * read span by span; queries and outputs are matrices.
 * attn_pack_scaled: rows r0..r0+n-1 of m (f32, f16 or bf16) times `scale`
 * into dst (n × cols, stride ld), zero rows up to n_pad and columns up to
 * ld; each product is taken in double and rounded once, so a scale outside
 * f32's range costs no precision. Returns the largest |value| written, or
 * -1 if one is not finite. attn_pack_rows_scaled: the same for rows of a
 * row source. attn_pack_transposed: kt (cols × ld) = rows j0..j0+n-1 of k
 * transposed, zero columns up to n_pad (a multiple of 16, <= ld). tmp holds
 * a row, for widening 16-bit floats, and for keys quantized per channel (a
 * grouped source) at least ATTN_PACK_GROUPED_TMP floats: 16 keys'
 * dequantized slice of 128 channels, which would be 8 KiB of the stack. */
enum { ATTN_PACK_GROUPED_TMP = 16 * 128 };
struct attn_ukernels;
float attn_pack_scaled(const struct attn_ukernels *uk, float *dst, int64_t ld, const attn_mat *m, int64_t r0,
                       int64_t n, int64_t n_pad, double scale, float *tmp);
float attn_pack_rows_scaled(const struct attn_ukernels *uk, float *dst, int64_t ld, const attn_rows *src,
                            int64_t r0, int64_t n, int64_t n_pad, double scale, float *tmp);
void attn_pack_transposed(const struct attn_ukernels *uk, float *kt, int64_t ld, int64_t n_pad,
                          const attn_rows *k, int64_t j0, int64_t n, float *tmp);
/* Ask for rows r0..r0+n-1 of m (those of contiguous elements), or of a row
 * source, to be brought into the cache, so that packing them later does
 * not wait on memory. */
void attn_prefetch_rows(const attn_mat *m, int64_t r0, int64_t n);
void attn_prefetch_kv(const attn_rows *src, int64_t r0, int64_t n);
/* Ask for the cache lines of bytes from p to be brought into L2, for
 * reading (what the two above do for each run of contiguous bytes). */
static inline void attn_prefetch_bytes(const char *p, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
}
/* Row r of m as contiguous f32: in place for f32 with contiguous columns,
 * else widened into buf (m->cols floats) by the ISA's widen16 where the
 * row's 16-bit floats are contiguous. */
const float *attn_row_f32_fast(const struct attn_ukernels *uk, const attn_mat *m, int64_t r, float *buf);
/* Rows r0..r0+n-1 of a row source as f32 rows of stride *ld: in place when
 * one span holds them as f32 with contiguous columns (*ld its row stride),
 * else widened into buf (n × cols, *ld = cols). */
const float *attn_rows_f32(const struct attn_ukernels *uk, const attn_rows *src, int64_t r0, int64_t n, float *buf,
                           int64_t *ld);

/* The fused f32 backward pass (flash_backward.c) over all slices of one
 * call: writes each slice's dq, dk and dv into gs's views, straight into
 * the caller's output where gs->direct says so, summed group by group in
 * f64 and rounded once into it where gs->grouped says so, else adding into
 * f64 accumulators in slice order; slices it cannot take go to the exact
 * kernel. All scratch comes from gs->f.arena, taken before anything is
 * written. Fills *info. Returns ATTN_OK, ATTN_ERR_OVERFLOW,
 * ATTN_ERR_NO_MEMORY or ATTN_ERR_WORKSPACE. */
attn_status attn_flash_backward_run(const attn_grad_slices *gs, attn_run_info *info, attn_error *err);
/* The same for n calls at once (a ragged batch's sequences): each call's
 * items, partials and sums are the ones it has alone, so each call's
 * gradients are bitwise its gradients alone; every pass hands out the
 * items of all calls together, those of the costliest items first. All
 * calls share one dtype, thread count and arena (gss[0]'s). */
attn_status attn_flash_backward_run_calls(const attn_grad_slices *const *gss, int64_t n_calls, attn_run_info *info,
                                          attn_error *err);

/* One row of a partial result: attention over some of the keys. */
typedef struct attn_part_row {
    /* Its log-sum-exp as m + log(l): its score maximum m and its sum l of
     * exp(s - m), kept apart so that a huge |m| (a mask of -FLT_MAX) does
     * not swallow log(l); a bare lse is m = lse, l = 1. l == 0: no key of
     * the part took part. */
    double m, l;
    const void *out; /* its output row, Ev values */
    int64_t stride;  /* out's element stride */
} attn_part_row;

/* The exact merge of n partial results of one row over disjoint key sets:
 *   lse = log(sum_i l_i exp(m_i)),  out = sum_i l_i exp(m_i - lse) · out_i,
 * summed in double and written to out (Ev values of dtype f32 or f64, at
 * stride os); every part's row shares that dtype. The parts are read before
 * out is written, so out may be one of them. Sets *lse (lse NULL: its
 * log is not computed, a split-KV decode call asked for none); returns whether
 * every output is finite. The one merge: split-KV decode and
 * attn_sdpa_merge both use it. */
bool attn_merge_row(void *out, int64_t os, double *lse, attn_dtype dtype, const attn_part_row *parts,
                    int n, int64_t Ev);

#endif /* ATTN_FAST_H */
