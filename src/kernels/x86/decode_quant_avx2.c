/* decode_quant_avx2.c -- the integer dot product kernel (qdot.h) with AVX2:
 * VPMADDUBSW multiplies unsigned by signed bytes and adds pairs into int16
 * (saturating), VPMADDWD adds those pairs into int32. q8 keys go as |k|
 * times the query code with k's sign (VPSIGNB): each pair at most 2 · 128 ·
 * 127 < 2^15, never saturated; q4 codes (0 .. 15) are unsigned as stored. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

typedef struct kcodes {
    __m256i u;    /* unsigned codes: |k| (q8) or the 4-bit codes (q4) */
    __m256i sign; /* q8: k, whose sign goes onto the query's codes; q4: unused */
    bool q4;
} kcodes;

static inline kcodes kc_q8(const uint8_t *blk) {
    __m256i k = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    return (kcodes){_mm256_abs_epi8(k), k, false};
}

/* Value i (i < 16) in the low 4 bits of byte i, value i + 16 in the high 4. */
static inline kcodes kc_q4(const uint8_t *blk) {
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(c), _mm_srli_epi16(c, 4), 1);
    return (kcodes){_mm256_and_si256(both, _mm256_set1_epi8(15)), _mm256_setzero_si256(), true};
}

static inline __m256i idot(__m256i bias, kcodes kc, __m256i q) {
    __m256i s = kc.q4 ? q : _mm256_sign_epi8(q, kc.sign);
    return _mm256_add_epi32(bias, _mm256_madd_epi16(_mm256_maddubs_epi16(kc.u, s), _mm256_set1_epi16(1)));
}

#define KC_Q8(blk) kc_q8(blk)
#define KC_Q4(blk) kc_q4(blk)
#define IDOT(bias, kc, q) idot(bias, kc, q)
#include "kernels/x86/decode_quant.h"

const attn_qdot_kernels attn_qdot_avx2 = {
    .name = "int8_avx2",
    .f32_set = "avx2",
    .q8_bias = 0,
    .q4_bias = 1,
    .dot = qdot_rows,
    .axpy = NULL, /* the f32 set's axpy_rows_q */
    .groups = &attn_qdot_groups_avx2,
};
#endif
