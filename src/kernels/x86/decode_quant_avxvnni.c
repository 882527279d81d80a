/* decode_quant_avxvnni.c -- the integer dot product kernel (qdot.h) with
 * AVX-VNNI, the VEX encoding of VPDPBUSD on 256-bit vectors that CPUs
 * without AVX-512 have (Alder Lake and later Intel cores, AMD Zen 5 client
 * parts). It runs beside the AVX2 kernels (values: their axpy_rows_q).
 *
 * The tiles are the AVX512-VNNI kernel's (decode_quant_avx512.c), each
 * 512-bit vector of 4 keys × 4 blocks held as two 256-bit halves (blocks
 * 0-1, blocks 2-3): every block's integer dot product is exact in both,
 * and the f32 arithmetic after it is the same operations in the same
 * order, so the two kernels' scores are the same bits (test_fast_simde
 * checks it through SIMDe, which also runs this file on CPUs without
 * AVX-VNNI). q8 key codes k are read as k + 128 (k XOR 0x80), the query
 * row's bias taking 128 · Σ c_q back; q4 codes are unsigned as stored. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#include <string.h>

/* (The tests' SIMDe build leaves inlining to the compiler: forced, its
 * portable intrinsics take minutes to compile.) */
#define QDOT_INLINE ATTN_KERNEL_INLINE
enum { QR = 4,  /* query rows per pass over the keys */
       QG = 2,  /* quads of blocks per pass (E <= 256 in one) */
       QT = 1 }; /* tiles a step: 16 ymm registers hold one tile's keys */

/* A query row as the tiles take it: half h of a quad is its blocks 2h and
 * 2h + 1, lane 4b + j for block b of the two and key j. */
typedef struct qrow_tab {
    __m256i q[QG][8][2]; /* lanes 4b + j: dword t of the block, for every j */
    __m256i bias[QG][2]; /* lanes 4b + j: the block's bias (zero past the row's blocks) */
    __m256 d[QG][2];     /* lanes 4b + j: the block's d_q (zero past the row's blocks) */
} qrow_tab;

/* The tables of row r, quads g0 .. g0 + ng - 1 (nb blocks in the row). */
static void qrow_table(qrow_tab *tb, const attn_qrows *qq, int64_t r, int64_t g0, int ng, int64_t nb) {
    for (int g = 0; g < ng; g++) {
        int64_t b0 = (g0 + g) * 4;
        for (int b = 0; b < 4; b++) {
            int32_t dw[8] = {0}, bias = 0;
            float d = 0;
            if (b0 + b < nb) {
                memcpy(dw, qq->codes + (r * nb + b0 + b) * 32, 32);
                bias = qq->bias[r * nb + b0 + b], d = qq->d[r * nb + b0 + b];
            }
            for (int t = 0; t < 8; t++) {
                __m256i x = _mm256_set1_epi32(dw[t]);
                tb->q[g][t][b / 2] = b % 2 ? _mm256_blend_epi32(tb->q[g][t][b / 2], x, 0xf0) : x;
            }
            __m256i bv = _mm256_set1_epi32(bias);
            __m256 dv = _mm256_set1_ps(d);
            tb->bias[g][b / 2] = b % 2 ? _mm256_blend_epi32(tb->bias[g][b / 2], bv, 0xf0) : bv;
            tb->d[g][b / 2] = b % 2 ? _mm256_blend_ps(tb->d[g][b / 2], dv, 0xf0) : dv;
        }
    }
}

/* Within each 128-bit lane, the 4 keys' dwords transposed: out[m] holds
 * dword m of each 128-bit lane of x[0..3], key j in element j. */
QDOT_INLINE void transpose4(__m256i out[4], const __m256i x[4]) {
    __m256i u0 = _mm256_unpacklo_epi32(x[0], x[1]), u1 = _mm256_unpackhi_epi32(x[0], x[1]);
    __m256i u2 = _mm256_unpacklo_epi32(x[2], x[3]), u3 = _mm256_unpackhi_epi32(x[2], x[3]);
    out[0] = _mm256_unpacklo_epi64(u0, u2), out[1] = _mm256_unpackhi_epi64(u0, u2);
    out[2] = _mm256_unpacklo_epi64(u1, u3), out[3] = _mm256_unpackhi_epi64(u1, u3);
}

/* K[t][h] (lanes 4b + j: dword t of block 2h + b of key j) of the tile's NK
 * keys at k (row stride ld), quad of blocks from b0 (nbk of them). */
QDOT_INLINE void tile_keys_q8(__m256i K[8][2], const uint8_t *k, int64_t ld, int NK, int64_t b0, int nbk) {
    __m256i V[4][4]; /* per block: lane 0 dword m, lane 1 dword 4 + m */
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        __m256i x[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            x[j] = j < NK && b < nbk
                       ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(k + j * ld + (b0 + b) * 34 + 2)),
                                          _mm256_set1_epi8(-128))
                       : _mm256_setzero_si256();
        transpose4(V[b], x);
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            K[m][h] = _mm256_permute2x128_si256(V[2 * h][m], V[2 * h + 1][m], 0x20);
            K[4 + m][h] = _mm256_permute2x128_si256(V[2 * h][m], V[2 * h + 1][m], 0x31);
        }
}

/* q4: value i (i < 16) in the low 4 bits of byte i, i + 16 in the high 4:
 * the block's dword m is values 4m .. 4m+3 in its low halves and 16 + 4m
 * .. in the high: the query's dwords m and 4 + m. */
QDOT_INLINE void tile_keys_q4(__m256i K[8][2], const uint8_t *k, int64_t ld, int NK, int64_t b0, int nbk) {
    const __m256i low = _mm256_set1_epi8(15);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256i x[4], T[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const uint8_t *blk = k + j * ld + (b0 + 2 * h) * 18;
            __m128i a = j < NK && 2 * h < nbk ? _mm_loadu_si128((const __m128i *)(const void *)(blk + 2)) : _mm_setzero_si128();
            __m128i b = j < NK && 2 * h + 1 < nbk ? _mm_loadu_si128((const __m128i *)(const void *)(blk + 20))
                                                  : _mm_setzero_si128();
            x[j] = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
        }
        transpose4(T, x);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            K[m][h] = _mm256_and_si256(T[m], low);
            K[4 + m][h] = _mm256_and_si256(_mm256_srli_epi32(T[m], 4), low);
        }
    }
}

/* The tile's d_k (lanes 4b + j of the two halves) as f32, zero outside the
 * NK keys and nbk blocks; *hm gathers their f16 bits without the sign. */
QDOT_INLINE void tile_scales(__m256 dk[2], const uint8_t *k, int64_t ld, int NK, int nbk, int64_t bs, __m256i *hm) {
    uint16_t h16[16] = {0};
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (j < NK && b < nbk) memcpy(&h16[4 * b + j], k + j * ld + b * bs, 2);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)h16);
    *hm = _mm256_max_epu16(*hm, _mm256_and_si256(h, _mm256_set1_epi16(0x7fff)));
    dk[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), dk[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* Scores of the tile's NK keys for rows i < NQ of tb, quads g < ng of one
 * pass: stored into s[i * lds + j] (first pass) or added to it (NT: one
 * tile, QT). */
QDOT_INLINE void qdot_tile(float *s, int64_t lds, const qrow_tab *tb, const uint8_t *k, int64_t ld, int NK, int64_t g0,
                           int ng, int64_t nb, const int NQ, const bool q4, const bool full, bool first, __m256i *hm,
                           const int NT) {
    (void)NT;
    __m256 S[QR][2];
#pragma GCC unroll 4
    for (int i = 0; i < QR; i++) S[i][0] = S[i][1] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        int64_t b0 = (g0 + g) * 4;
        int nbk = full || nb - b0 >= 4 ? 4 : (int)(nb - b0);
        __m256i K[8][2];
        if (q4) tile_keys_q4(K, k, ld, NK, b0, nbk);
        else tile_keys_q8(K, k, ld, NK, b0, nbk);
        __m256 dk[2];
        tile_scales(dk, k + b0 * (q4 ? 18 : 34), ld, NK, nbk, q4 ? 18 : 34, hm);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256i acc = tb[i].bias[g][h];
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) acc = _mm256_dpbusd_avx_epi32(acc, K[t][h], tb[i].q[g][t][h]);
                __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), dk[h]), tb[i].d[g][h]);
                S[i][h] = g ? _mm256_add_ps(S[i][h], y) : y;
            }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) { /* (b0 + b2) + (b1 + b3), each key on its own */
        __m256 t = _mm256_add_ps(S[i][0], S[i][1]);
        __m128 sum = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        float *to = s + i * lds, x[4];
        _mm_storeu_ps(x, sum);
        for (int j = 0; j < NK; j++) to[j] = first ? x[j] : to[j] + x[j];
    }
}

#include "kernels/x86/decode_quant_tiles.h"

const attn_qdot_kernels attn_qdot_avxvnni = {
    .name = "int8_avxvnni",
    .f32_set = "avx2",
    .q8_bias = 128,
    .q4_bias = 8,
    .dot = qdot_rows,
    .axpy = NULL, /* the f32 set's axpy_rows_q */
    .groups = &attn_qdot_groups_avx2, /* VEX VNNI would save the pairs' VPMADDWD only */
};
#endif
