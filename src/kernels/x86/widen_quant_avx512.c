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
 * is ever an operand). E4M3: a normal code's magnitude bits, shifted to
 * f32's exponent and mantissa, are the float once the exponent's bias
 * 120 = 127 - 7 is added; a subnormal one (exponent 0) is m · 2^-9, from an
 * integer conversion; S.1111.111 is NaN; then the sign. E5M2 is the top
 * byte of an IEEE half: vcvtph2ps widens it, infinities, NaN and
 * subnormals included. */
static inline __m512 e4m3_16(const uint8_t *p) {
    __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
    __m512 f = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    f = _mm512_mask_mul_ps(f, _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(8), mag), _mm512_cvtepi32_ps(mag),
                           _mm512_set1_ps(0x1p-9f));
    f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), _mm512_set1_ps(NAN));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(f), sign));
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
