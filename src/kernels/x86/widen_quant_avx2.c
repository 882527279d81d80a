/* widen_quant_avx2.c -- quantized rows (q8, q4, q4_1: attn.h, "Quantized
 * storage") widened to f32 with AVX2 and F16C: a block's 32 codes to four
 * vectors of 8 floats, times its f16 scale (plus q4_1's f16 minimum). Each
 * product of a small integer and an f16 scale is exact in f32, and q4_1's
 * sum is one rounding, so these are the floats of the portable reference
 * (base/quant.c). The fp8 formats are widened by bit manipulation,
 * exactly too. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/ukernel.h"

#include "kernels/x86/intrin.h"
#include <math.h>
#include <string.h>

/* The block's f16 scale in every lane (vcvtph2ps: exact). */
static inline __m256 scale_of(const uint8_t *block) {
    uint16_t h;
    memcpy(&h, block, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}

/* 8 codes (int32) to floats times d, stored. */
static inline void put8(float *dst, __m256i c, __m256 d) { _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(c), d)); }

/* 8 fp8 bytes widened, exactly, as widen_quant_avx512.c does it (there:
 * why), with blends for its masks. */
static inline __m256 e4m3_8(const uint8_t *p) {
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
    __m256 f = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    f = _mm256_blendv_ps(f, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
    f = _mm256_blendv_ps(f, _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(f), sign));
}

static inline __m256 e5m2_8(const uint8_t *p) {
    __m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_cvtph_ps(_mm_slli_epi16(h, 8));
}

void attn_widen_quant_avx2(float *dst, const void *src, int64_t n, attn_dtype format) {
    const uint8_t *b = src;
    if (format == ATTN_Q8) {
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q8_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m256 d = scale_of(b);
            for (int i = 0; i < 4; i++)
                put8(dst + 8 * i, _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + 8 * i))), d);
        }
        return;
    }
    if (format == ATTN_Q4) {
        const __m256i eight = _mm256_set1_epi32(8), low4 = _mm256_set1_epi32(15);
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m256 d = scale_of(b);
            for (int i = 0; i < 2; i++) { /* bytes 8i .. 8i+7: values 8i.. (low 4 bits) and 16+8i.. (high) */
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + 8 * i)));
                put8(dst + 8 * i, _mm256_sub_epi32(_mm256_and_si256(c, low4), eight), d);
                put8(dst + 16 + 8 * i, _mm256_sub_epi32(_mm256_srli_epi32(c, 4), eight), d);
            }
        }
        return;
    }
    if (format == ATTN_Q4_1) {
        const __m256i low4 = _mm256_set1_epi32(15);
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_1_BLOCK_BYTES, dst += ATTN_QBLOCK) {
            __m256 d = scale_of(b), m = scale_of(b + 2);
            for (int i = 0; i < 2; i++) {
                __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 4 + 8 * i)));
                __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, low4)), d);
                __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c, 4)), d);
                _mm256_storeu_ps(dst + 8 * i, _mm256_add_ps(lo, m));
                _mm256_storeu_ps(dst + 16 + 8 * i, _mm256_add_ps(hi, m));
            }
        }
        return;
    }
    if (format == ATTN_E4M3 || format == ATTN_E5M2) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, format == ATTN_E4M3 ? e4m3_8(b + i) : e5m2_8(b + i));
        if (i < n) attn_dequant_row(dst + i, b + i, n - i, format);
        return;
    }
    attn_dequant_row(dst, src, n, format);
}
#endif
