/* exp2_avx512.h -- the AVX-512 2^x of kernels/exp2.h and the softmax's exp
 * pass on it, written once for the f32 kernels (ukernel_avx512.c, degree 6,
 * about one ulp) and the bf16 compute mode's (ukernel_avx512bf16.c and
 * ukernel_amx.c, degree 3: their weights are rounded to bf16 for P·V, see
 * ATTN_EXP2_POLY3). Include after kernels/x86/intrin.h, in a file compiled
 * with AVX-512F. */
#ifndef ATTN_X86_EXP2_AVX512_H
#define ATTN_X86_EXP2_AVX512_H

#include "kernels/exp2.h"
#include "kernels/ukernel.h"

/* 2^x, the algorithm of attn_exp2f (kernels/exp2.h): lanes below
 * ATTN_EXP2_LO (-inf included, NaN not) are 0, zeroed by the mask of the
 * scaling, whose other lanes see only the clamped x, so that nothing
 * underflows. Clamping with max/min keeps NaN (the second operand is
 * returned when either is NaN); vscalefps applies 2^n with one rounding.
 * degree 6 (ATTN_EXP2_POLY) or 3 (ATTN_EXP2_POLY3, for x <= 0 only: it
 * skips the clamp at ATTN_EXP2_HI, which such x never reach); a constant
 * at every call, so each caller's code has one polynomial. */
ATTN_KERNEL_INLINE __m512 attn_exp2_512(__m512 x, int degree) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN_EXP2_LO), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(ATTN_EXP2_LO), x);
    if (degree != 3) x = _mm512_min_ps(_mm512_set1_ps(ATTN_EXP2_HI), x);
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = degree == 3 ? ATTN_EXP2_POLY3(_mm512_fmadd_ps, _mm512_set1_ps, f)
                           : ATTN_EXP2_POLY(_mm512_fmadd_ps, _mm512_set1_ps, f);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* The softmax's exp pass (attn_ukernels.exp_sum): x[i] = 2^((x[i] - m)·log2 e)
 * for i < n (a multiple of 16), by attn_exp2_512 of that degree; returns
 * their sum, 16 lanes then _mm512_reduce_add_ps. (Four sums in place of
 * one, tried for degree 3, were no faster.) */
ATTN_KERNEL_INLINE float attn_exp_sum_512(float *x, int64_t n, float m, int degree) {
    __m512 sum = _mm512_setzero_ps(), mv = _mm512_set1_ps(m), log2e = _mm512_set1_ps(ATTN_LOG2E);
    for (int64_t i = 0; i < n; i += 16) {
        __m512 y = attn_exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv), log2e), degree);
        _mm512_storeu_ps(x + i, y);
        sum = _mm512_add_ps(sum, y);
    }
    return _mm512_reduce_add_ps(sum);
}

#endif /* ATTN_X86_EXP2_AVX512_H */
