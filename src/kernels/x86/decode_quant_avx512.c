/* decode_quant_avx512.c -- the integer dot product kernel (qdot.h) with
 * AVX512-VNNI's VPDPBUSD on 256-bit vectors: 32 unsigned × signed byte
 * products summed in fours into 8 int32 lanes, one instruction. q8 key codes
 * k are read as the unsigned bytes k + 128 (k XOR 0x80), and the query
 * row's bias takes 128 · Σ c_q back; q4 codes are unsigned as stored. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

typedef __m256i kcodes;

static inline __m256i kc_q8(const uint8_t *blk) {
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)), _mm256_set1_epi8(-128));
}

/* Value i (i < 16) in the low 4 bits of byte i, value i + 16 in the high 4. */
static inline __m256i kc_q4(const uint8_t *blk) {
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(c), _mm_srli_epi16(c, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

#define KC_Q8(blk) kc_q8(blk)
#define KC_Q4(blk) kc_q4(blk)
#define IDOT(bias, kc, q) _mm256_dpbusd_epi32(bias, kc, q)
#include "kernels/x86/decode_quant.h"

const attn_qdot_kernels attn_qdot_avx512vnni = {
    .name = "int8_avx512vnni",
    .f32_set = "avx512",
    .q8_bias = 16,
    .dot = qdot_rows,
};
#endif
