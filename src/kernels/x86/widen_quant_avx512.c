/* widen_quant_avx512.c -- quantized rows (q8, q4, q4_1: attn.h, "Quantized
 * storage") widened to f32 with AVX-512: a block's 32 codes to two vectors
 * of 16 floats, times its f16 scale (plus q4_1's f16 minimum). Each product
 * of a small integer and an f16 scale is exact in f32, and q4_1's sum is one
 * rounding, so these are the floats of the portable reference
 * (base/quant.c). The fp8 formats are widened by bit manipulation,
 * exactly too. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/ukernel.h"

#include "kernels/x86/intrin.h"
#include <math.h>
#include <string.h>

/* The block's f16 scale in every lane (vcvtph2ps: exact, subnormal f16
 * scales included, whatever MXCSR says). */
static inline __m512 scale_of(const uint8_t *block) {
    uint16_t h;
    memcpy(&h, block, 2);
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

/* 16 fp8 bytes widened, exactly, whatever MXCSR says (no subnormal f32
 * is ever an operand). E4M3 S.EEEE.MMM as the half S.0EEEE.MMM0000000 (the
 * byte sign-extended to 16 bits and shifted left by 7, bit 14 cleared)
 * is 2^-8 times its value, subnormals included (a half subnormal's
 * mantissa M is M · 2^-24: here 128m · 2^-24 = m · 2^-9 · 2^-8); vcvtph2ps
 * widens it and a multiply by 2^8 is exact; S.1111.111, which that reads
 * as ±480, is NaN (0x7fc00000 with the sign). Half-width integer work and
 * one conversion, where the 32-bit lanes took a dozen operations. E5M2 is
 * the top byte of an IEEE half: vcvtph2ps widens it, infinities, NaN and
 * subnormals included. */
static inline __m512 e4m3_16(const uint8_t *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7), _mm256_set1_epi16((short)0xbfff));
    __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_or_si128(x, _mm_set1_epi8((char)0x80)), _mm_set1_epi8(-1));
    /* (f & sign) | quiet NaN in the NaN lanes */
    return _mm512_castsi512_ps(_mm512_mask_ternarylogic_epi32(_mm512_castps_si512(f), nan, _mm512_set1_epi32((int)0x80000000u),
                                                              _mm512_set1_epi32(0x7fc00000), 0xea));
}

static inline __m512 e5m2_16(const uint8_t *p) {
    __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_slli_epi16(h, 8));
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
    if (format == ATTN_E4M3 || format == ATTN_E5M2) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, format == ATTN_E4M3 ? e4m3_16(b + i) : e5m2_16(b + i));
        if (i < n) attn_dequant_row(dst + i, b + i, n - i, format);
        return;
    }
    attn_dequant_row(dst, src, n, format);
}
#endif
