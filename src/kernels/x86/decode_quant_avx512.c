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

/* ---- values: acc += p · v over q8/q4 rows, a block (two vectors) at a
 * time, its scale converted once for both (the shared decode_rows.h
 * widens a vector at a time, and converts the scale for each). The same
 * products (code · d, exact) in the same order as the f32 kernel on the
 * widened rows: bitwise its result. */
#define QV_INLINE static inline __attribute__((always_inline))

/* Values e .. e+31 (one block, e a multiple of 32) of a q8 or q4 row. */
QV_INLINE void block_values(__m512 *lo, __m512 *hi, const uint8_t *row, int64_t e, const bool q4) {
    const uint8_t *b = row + e / 32 * (q4 ? 18 : 34);
    uint16_t h;
    memcpy(&h, b, 2);
    __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
    if (!q4) {
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2)))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 18)))), d);
        return;
    }
    /* (code - 8) · d for the 16 codes, looked up by the low 4 bits of each lane */
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512 table = _mm512_mul_ps(codes, d);
    __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2)));
    *lo = _mm512_permutexvar_ps(c, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), table);
}

/* Rows i < NQ, columns e0 .. e0 + 32·NB - 1, keys j < n. */
QV_INLINE void qaxpy_block(float *acc, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n,
                           int64_t Ev, int64_t e0, const int NQ, const int NB, const bool q4) {
    __m512 a[4][8];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int t = 0; t < 2 * NB; t++) a[i][t] = _mm512_loadu_ps(acc + i * Ev + e0 + 16 * t);
    for (int64_t j = 0; j < n; j++) {
        __m512 vv[8];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) block_values(&vv[2 * b], &vv[2 * b + 1], v + j * ld, e0 + 32 * b, q4);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512 w = _mm512_set1_ps(p[i * ldp + j]);
#pragma GCC unroll 8
            for (int t = 0; t < 2 * NB; t++) a[i][t] = _mm512_fmadd_ps(w, vv[t], a[i][t]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int t = 0; t < 2 * NB; t++) _mm512_storeu_ps(acc + i * Ev + e0 + 16 * t, a[i][t]);
}

/* All Ev columns for NQ rows: keys in groups whose rows stay in L1 while
 * the column blocks pass over them (NB blocks of 32 at a time: 4 for up to
 * 2 rows, 2 for 3-4; 32 registers). */
QV_INLINE void qaxpy_nq(float *acc, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n, int64_t Ev,
                        const int NQ, const bool q4) {
    const int NB = NQ <= 2 ? 4 : 2;
    /* (ld may be 0, a broadcast row, or negative, rows read backwards) */
    int64_t group = ld > 0 && 8192 / ld > 16 ? 8192 / ld : 16;
    for (int64_t j0 = 0; j0 < n; j0 += group) {
        int64_t nk = n - j0 < group ? n - j0 : group, e0 = 0;
        for (; e0 + 32 * NB <= Ev; e0 += 32 * NB) qaxpy_block(acc, p + j0, ldp, v + j0 * ld, ld, nk, Ev, e0, NQ, NB, q4);
        if (NB > 2 && e0 + 64 <= Ev) qaxpy_block(acc, p + j0, ldp, v + j0 * ld, ld, nk, Ev, e0, NQ, 2, q4), e0 += 64;
        if (e0 < Ev) qaxpy_block(acc, p + j0, ldp, v + j0 * ld, ld, nk, Ev, e0, NQ, 1, q4);
    }
}

#define QAXPY_ROWS(NQ)                                                                             \
    do {                                                                                           \
        if (q4) qaxpy_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, true);                   \
        else qaxpy_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, false);                     \
    } while (0)

static void qaxpy_rows(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                       int64_t Ev, bool q4) {
    for (int i = 0; i < nq; i += 4) {
        switch (nq - i) {
        case 1: QAXPY_ROWS(1); break;
        case 2: QAXPY_ROWS(2); break;
        case 3: QAXPY_ROWS(3); break;
        default: QAXPY_ROWS(4); break;
        }
    }
}

const attn_qdot_kernels attn_qdot_avx512vnni = {
    .name = "int8_avx512vnni",
    .f32_set = "avx512",
    .q8_bias = 16,
    .dot = qdot_rows,
    .axpy = qaxpy_rows,
};
#endif
