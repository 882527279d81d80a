/* widen_quant_avx512.c -- quantized rows (q8, q4, q4_1: attn.h, "Quantized
 * storage") widened to f32 with AVX-512: a block's 32 codes to two vectors
 * of 16 floats, times its f16 scale (plus q4_1's f16 minimum). Each product
 * of a small integer and an f16 scale is exact in f32, and q4_1's sum is one
 * rounding, so these are the floats of the portable reference
 * (base/quant.c), which widens the fp8 formats here too. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/ukernel.h"

#include "kernels/x86/intrin.h"
#include <string.h>

/* The block's f16 scale in every lane (vcvtph2ps: exact, subnormal f16
 * scales included, whatever MXCSR says). */
static inline __m512 scale_of(const uint8_t *block) {
    uint16_t h;
    memcpy(&h, block, 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

void attn_widen_quant_avx512(float *dst, const void *src, int64_t n, attn_dtype format) {
    const uint8_t *b = src;
    if (format == ATTN_Q8) {
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q8_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m512 d = scale_of(b);
            __m512i lo = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2)));
            __m512i hi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 18)));
            _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
            _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
        }
        return;
    }
    if (format == ATTN_Q4) {
        const __m512i eight = _mm512_set1_epi32(8), low4 = _mm512_set1_epi32(15);
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m512 d = scale_of(b);
            /* value i in the low 4 bits of byte i, value i + 16 in the high 4 */
            __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2)));
            __m512i lo = _mm512_sub_epi32(_mm512_and_si512(c, low4), eight);
            __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(c, 4), eight);
            _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
            _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
        }
        return;
    }
    if (format == ATTN_Q4_1) {
        const __m512i low4 = _mm512_set1_epi32(15);
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_1_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m512 d = scale_of(b), m = scale_of(b + 2);
            __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 4)));
            __m512i lo = _mm512_and_si512(c, low4), hi = _mm512_srli_epi32(c, 4);
            _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), m));
            _mm512_storeu_ps(dst + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), m));
        }
        return;
    }
    attn_dequant_row(dst, src, n, format);
}
#endif
