/* decode_quant.h -- the integer dot product kernel of decode (qdot.h),
 * written once over what the including file defines for its ISA:
 *   kcodes                  a block's 32 key codes, as its dot product
 *                           wants them
 *   KC_Q8(blk), KC_Q4(blk)  the codes of the q8 or q4 block at blk
 *   IDOT(bias, kc, q)       8 int32 lanes: bias + the sums of 4 products
 *                           of the key codes kc and the query codes q
 *                           (__m256i of 32 int8), each lane's 4 products
 *                           those of its 4 bytes
 * A block of 32 is one 256-bit vector: per key, per block, per query row
 * one integer dot product, its conversion to f32 and one multiply-add by
 * d_q · d_k into 8 f32 lanes; the lanes are summed once per key, four keys
 * at a time by one tree of horizontal adds that a lone key takes too (with
 * zeros beside it), so a key's score does not depend on its neighbours. */
#ifndef ATTN_DECODE_QUANT_H
#define ATTN_DECODE_QUANT_H

#include <string.h>

#define QDOT_INLINE static inline __attribute__((always_inline))
enum { QROWS = 4, QKEYS = 4 }; /* a tile: 4 query rows × 4 keys, 16 of the 16-32 ymm registers */

/* The tile's sums of rows i < NQ for keys t < NK into s[i * lds + t]. */
QDOT_INLINE void tile_store(float *s, int64_t lds, __m256 acc[QROWS][QKEYS], const int NQ, const int NK) {
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) {
        __m256 h01 = _mm256_hadd_ps(acc[i][0], acc[i][1]), h23 = _mm256_hadd_ps(acc[i][2], acc[i][3]);
        __m256 h = _mm256_hadd_ps(h01, h23); /* [k0 k1 k2 k3 | k0 k1 k2 k3]: each half's part */
        __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        if (NK == QKEYS) _mm_storeu_ps(s + i * lds, sum);
        else _mm_store_ss(s + i * lds, sum);
    }
}

/* Scores of query rows r0 .. r0+NQ-1 against NK keys at k; hm gathers the
 * largest |d_k| as f16 bits (0x7c00 and up: not finite). */
QDOT_INLINE void qdot_tile(float *s, int64_t lds, const attn_qrows *qq, int r0, const uint8_t *k, int64_t ld,
                           const int NQ, const int NK, const bool q4, unsigned *hm) {
    const int64_t nb = qq->E / 32, bs = q4 ? 18 : 34;
    __m256 acc[QROWS][QKEYS];
#pragma GCC unroll 4
    for (int i = 0; i < QROWS; i++)
#pragma GCC unroll 4
        for (int t = 0; t < QKEYS; t++) acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int t = 0; t < NK; t++) {
            const uint8_t *blk = k + t * ld + b * bs;
            uint16_t h;
            memcpy(&h, blk, 2);
            *hm = (h & 0x7fffu) > *hm ? (h & 0x7fffu) : *hm;
            __m256 dk = _mm256_cvtph_ps(_mm_set1_epi16((short)h));
            kcodes kc = q4 ? KC_Q4(blk) : KC_Q8(blk);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                int64_t r = (int64_t)(r0 + i) * nb + b;
                __m256i qc = _mm256_loadu_si256((const __m256i *)(const void *)(qq->codes + r * 32));
                __m256i dot = IDOT(_mm256_set1_epi32(qq->bias[r]), kc, qc);
                __m256 sc = _mm256_mul_ps(dk, _mm256_set1_ps(qq->d[r]));
                acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, acc[i][t]);
            }
        }
    }
    tile_store(s, lds, acc, NQ, NK);
}

QDOT_INLINE void qdot_rows_nq(float *s, int64_t lds, const attn_qrows *qq, int r0, const uint8_t *k, int64_t ld,
                              int64_t n, const int NQ, const bool q4, unsigned *hm) {
    int64_t j = 0;
    for (; j + QKEYS <= n; j += QKEYS) qdot_tile(s + j, lds, qq, r0, k + j * ld, ld, NQ, QKEYS, q4, hm);
    for (; j < n; j++) qdot_tile(s + j, lds, qq, r0, k + j * ld, ld, NQ, 1, q4, hm);
}

#define QDOT_ROWS(NQ)                                                                              \
    do {                                                                                           \
        if (q4) qdot_rows_nq(s + i * lds, lds, qq, r0 + i, k, ld, n, NQ, true, &hm);               \
        else qdot_rows_nq(s + i * lds, lds, qq, r0 + i, k, ld, n, NQ, false, &hm);                 \
    } while (0)

static float qdot_rows(float *s, int64_t lds, const attn_qrows *qq, int r0, int nq, const void *k, int64_t ld,
                       int64_t n, bool q4, void *scratch) {
    (void)scratch; /* no tables: the rows' codes are read where they lie */
    unsigned hm = 0;
    for (int i = 0; i < nq; i += QROWS) { /* more rows: the keys again, from L1 */
        switch (nq - i) {
        case 1: QDOT_ROWS(1); break;
        case 2: QDOT_ROWS(2); break;
        case 3: QDOT_ROWS(3); break;
        default: QDOT_ROWS(4); break;
        }
    }
    if (hm >= 0x7c00u) return -1.0f; /* an infinite or NaN scale */
    return _cvtsh_ss((unsigned short)hm) * (q4 ? 8.0f : 128.0f);
}

#endif /* ATTN_DECODE_QUANT_H */
