/* decode_groups_avx512.c -- decode's scores against keys quantized per
 * channel (ATTN_Q4C, ATTN_Q2C; attn.h, "Keys quantized per channel") with
 * AVX512-VNNI's integer dot products (qdot.h, attn_qdot_groups).
 *
 * A key of a group is k_c = s_c · n_c + m_c (channel c's scale s_c and
 * minimum m_c, its code n_c of 4 or 2 bits), so a query row's score is
 *     Σ_c q_c k_c = Σ_c (q_c s_c) n_c + Σ_c q_c m_c.
 * Per group and query row, q' = q ∘ s (f32 products) is rounded to int8 per
 * block of 32 channels by q8_0's rule (qdot.h's attn_qrows_quantize: d =
 * max |q'| / 127, c = q' / d to nearest even), the codes n are already
 * unsigned bytes (VPDPBUSD's unsigned side, no bias), and the constant
 * Σ q_c m_c is computed once per group and row in f32. Per key and block
 * that leaves one exact integer dot product and one multiply by d.
 *
 * The codes of one position lie packed along the channels (two or four a
 * byte); VPDPBUSD sums 4 byte products into a lane. Masking the nibbles
 * (or bit pairs) of a dword gives 4 codes of channels 2 (or 4) apart, so
 * the query's codes are taken in that order instead: its f32 values are
 * permuted within each block (a table below) before they are rounded,
 * which changes no code (the rule is per value but for the block's max).
 * Keys then go as the q4 kernel's do (decode_quant_avx512.c): a tile of 4
 * positions × a quad of 4 blocks, transposed once per tile for every query
 * row, lane 4b + j holding block b of position j, 8 VPDPBUSD per row and
 * tile. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#include <string.h>

#if defined(ATTN_INTRINSICS_FROM_SIMDE)
#define QG_INLINE static inline
#else
#define QG_INLINE static inline __attribute__((always_inline))
#endif
enum { QR = 4,  /* query rows per pass over the keys */
       QG = 2 }; /* quads of blocks (128 channels) per pass */

/* Which channel of the block the query's code at place p (0 .. 31) is:
 * dword t = p / 4 of the block meets VPDPBUSD's 4 codes of key dword
 * lane t.
 *   q4c: a block is 16 bytes; byte i holds channel 2i (low nibble) and
 *        2i + 1 (high). Key dword t < 4 masked low: channels 8t + 2i;
 *        t >= 4 (dword t - 4 shifted by 4): 8(t - 4) + 2i + 1. So p < 16 is
 *        channel 2p, p >= 16 channel 2(p - 16) + 1.
 *   q2c: a block is 8 bytes; byte i holds channels 4i .. 4i + 3 (bits 2k).
 *        Key dword t = 4m + k: dword m of the block shifted by 2k, its byte
 *        i channel 16m + 4i + k. */
static int perm_q4c(int p) { return p < 16 ? 2 * p : 2 * (p - 16) + 1; }
static int perm_q2c(int p) { return 16 * (p / 16) + 4 * (p % 4) + (p / 4) % 4; }

/* A query row as one pass takes it: lanes 4b + j of quad g. */
typedef struct grow_tab {
    __m512i q[QG][8]; /* dword t of block b's codes (permuted), for every j */
    __m512 d[QG];     /* block b's d (zero past the pass's blocks) */
} grow_tab;

/* The pass's channel data shared by every row: the scales s in the
 * query's permuted order, block by block (2 vectors each). */
typedef struct pass_scales {
    __m512 s[QG * 4][2];
} pass_scales;

/* The max of each of 4 vectors, in lanes 4b .. 4b + 3 of the result (b the
 * vector): halves, then quarters, then within each 4 lanes. */
QG_INLINE __m512 quad_max(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    __m512 ab = _mm512_max_ps(_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b));
    __m512 cd = _mm512_max_ps(_mm512_permutex2var_ps(c, lo, d), _mm512_permutex2var_ps(c, hi, d));
    const __m512i lo2 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i hi2 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    __m512 x = _mm512_max_ps(_mm512_permutex2var_ps(ab, lo2, cd), _mm512_permutex2var_ps(ab, hi2, cd));
    x = _mm512_max_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_max_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2)));
}

/* Row q's tables for the pass's quads g < ng (nbk[g] blocks each) from
 * channel c0: q' = q ∘ s permuted, rounded per block (attn_qrows_quantize's
 * rule; |q' / d| <= 127 · (1 + 3·2^-24) < 127.5, so its clamp never acts). */
static void grow_table(grow_tab *tb, const float *q, const pass_scales *ps, int64_t c0, int ng, const int *nbk,
                       const __m512i pidx[2]) {
    for (int g = 0; g < ng; g++) {
        __m512 y[4][2], mx[4];
        for (int b = 0; b < 4; b++) {
            if (b >= nbk[g]) {
                y[b][0] = y[b][1] = mx[b] = _mm512_setzero_ps();
                continue;
            }
            const float *x = q + c0 + (4 * g + b) * 32;
            __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
            y[b][0] = _mm512_mul_ps(_mm512_permutex2var_ps(x0, pidx[0], x1), ps->s[4 * g + b][0]);
            y[b][1] = _mm512_mul_ps(_mm512_permutex2var_ps(x0, pidx[1], x1), ps->s[4 * g + b][1]);
            mx[b] = _mm512_max_ps(_mm512_abs_ps(y[b][0]), _mm512_abs_ps(y[b][1]));
        }
        __m512 a = quad_max(mx[0], mx[1], mx[2], mx[3]); /* lanes 4b + j: block b's max |q'| */
        __m512 d = _mm512_div_ps(a, _mm512_set1_ps(127.0f));
        __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_set1_ps(1.0f), d);
        tb->d[g] = d;
        int8_t codes[4][32];
        for (int b = 0; b < 4; b++) {
            __m512 ib = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * b), inv);
            for (int h = 0; h < 2; h++) {
                __m512 c = _mm512_roundscale_ps(_mm512_mul_ps(y[b][h], ib), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                _mm_storeu_si128((__m128i *)(void *)(codes[b] + 16 * h), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(c)));
            }
        }
        __m512i c01 = _mm512_loadu_si512(codes[0]), c23 = _mm512_loadu_si512(codes[2]);
        for (int t = 0; t < 8; t++) {
            __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24),
                                           _mm512_set1_epi32(t));
            tb->q[g][t] = _mm512_permutex2var_epi32(c01, idx, c23);
        }
    }
}

/* K[t] (lanes 4b + j: the codes meeting the query's dword t of block b, of
 * position j) for NK <= 4 positions from `codes` (row bytes `row`), the
 * quad's blocks from block b0 (nbk of them). */
QG_INLINE void tile_keys(__m512i K[8], const uint8_t *codes, int64_t row, int NK, int64_t b0, int nbk, const bool q2) {
    if (!q2) { /* blocks of 16 bytes: the q4 kernel's transpose of dwords */
        __m512i X[4];
        __mmask16 m = (__mmask16)((1u << (4 * nbk)) - 1);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            X[j] = j < NK ? _mm512_maskz_loadu_epi32(m, codes + j * row + 16 * b0) : _mm512_setzero_si512();
        __m512i u0 = _mm512_unpacklo_epi32(X[0], X[1]), u1 = _mm512_unpackhi_epi32(X[0], X[1]);
        __m512i u2 = _mm512_unpacklo_epi32(X[2], X[3]), u3 = _mm512_unpackhi_epi32(X[2], X[3]);
        __m512i T[4] = {_mm512_unpacklo_epi64(u0, u2), _mm512_unpackhi_epi64(u0, u2), _mm512_unpacklo_epi64(u1, u3),
                        _mm512_unpackhi_epi64(u1, u3)};
        const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            K[t] = _mm512_and_si512(T[t], low);
            K[4 + t] = _mm512_and_si512(_mm512_srli_epi32(T[t], 4), low);
        }
        return;
    }
    /* blocks of 8 bytes (2 dwords): dword m of block b of position j into lane 4b + j */
    __m256i X[4];
    __mmask8 m = (__mmask8)((1u << (2 * nbk)) - 1);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        X[j] = j < NK ? _mm256_maskz_loadu_epi32(m, codes + j * row + 8 * b0) : _mm256_setzero_si256();
    __m512i Y01 = _mm512_inserti64x4(_mm512_castsi256_si512(X[0]), X[1], 1);
    __m512i Y23 = _mm512_inserti64x4(_mm512_castsi256_si512(X[2]), X[3], 1);
    const __m512i i0 = _mm512_setr_epi32(0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30);
    __m512i T[2] = {_mm512_permutex2var_epi32(Y01, i0, Y23),
                    _mm512_permutex2var_epi32(Y01, _mm512_add_epi32(i0, _mm512_set1_epi32(1)), Y23)};
    const __m512i three = _mm512_set1_epi8(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) K[4 * h + k] = _mm512_and_si512(_mm512_srli_epi32(T[h], 2 * k), three);
}

/* Scores of NK positions for rows i < NQ of tb, the pass's quads g < ng:
 * stored into s[i * lds + j] (first pass) or added to it. */
QG_INLINE void group_tile(float *s, int64_t lds, const grow_tab *tb, const uint8_t *codes, int64_t row, int NK,
                          int64_t b0, int ng, const int *nbk, const int NQ, const bool q2, bool first) {
    __m512 S[QR];
#pragma GCC unroll 4
    for (int i = 0; i < QR; i++) S[i] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i K[8];
        tile_keys(K, codes, row, NK, b0 + 4 * g, nbk[g], q2);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) acc = _mm512_dpbusd_epi32(acc, K[t], tb[i].q[g][t]);
            __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), tb[i].d[g]);
            S[i] = g ? _mm512_add_ps(S[i], y) : y;
        }
    }
    __mmask8 m = (__mmask8)((1u << NK) - 1);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) { /* (b0 + b2) + (b1 + b3), each position on its own */
        __m512 h = _mm512_add_ps(S[i], _mm512_shuffle_f32x4(S[i], S[i], _MM_SHUFFLE(1, 0, 3, 2)));
        __m128 sum = _mm_add_ps(_mm512_castps512_ps128(h), _mm512_extractf32x4_ps(h, 1));
        float *to = s + i * lds;
        if (!first) sum = _mm_add_ps(_mm_maskz_loadu_ps(m, to), sum);
        _mm_mask_storeu_ps(to, m, sum);
    }
}

QG_INLINE void group_pass(float *s, int64_t lds, const grow_tab *tb, const uint8_t *codes, int64_t row, int64_t k,
                          int64_t b0, int ng, const int *nbk, const int NQ, const bool q2, bool first) {
    int64_t j = 0;
    for (; j + 4 <= k; j += 4) group_tile(s + j, lds, tb, codes + j * row, row, 4, b0, ng, nbk, NQ, q2, first);
    if (j < k) group_tile(s + j, lds, tb, codes + j * row, row, (int)(k - j), b0, ng, nbk, NQ, q2, first);
}

/* Σ_c q_c m_c in f32: 16 lanes of fused multiply-adds over the channels in
 * order (lane l takes channels 16i + l), then (l + (l + 8)), then the 4
 * lanes apart, then (0 + 2) + (1 + 3). */
static float row_offset(const float *q, const uint16_t *mh, int64_t E) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < E; c += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + c),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(mh + c))), acc);
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    float l[4];
    _mm_storeu_ps(l, u);
    return (l[0] + l[2]) + (l[1] + l[3]);
}

/* qdot.h's attn_qdot_groups dot. */
static float group_rows(float *s, int64_t lds, const float *q, int nq, const void *group, int64_t E, int64_t t0,
                        int64_t k, bool q2) {
    const uint8_t *g8 = group;
    const uint16_t *sh = (const uint16_t *)(const void *)g8, *mh = sh + E;
    int64_t row = q2 ? E / 4 : E / 2, nb = E / 32, quads = (nb + 3) / 4;
    const uint8_t *codes = g8 + 4 * E + t0 * row;
    /* max |k| over the group's range, |m| and |m + (2^b - 1) s| per channel;
     * a scale or minimum not finite: -1 */
    const __m512 top = _mm512_set1_ps(q2 ? 3.0f : 15.0f), inf = _mm512_set1_ps(INFINITY);
    __m512 kmx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t c = 0; c < E; c += 16) {
        __m512 sc = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(sh + c)));
        __m512 mc = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(mh + c)));
        __m512 hi = _mm512_abs_ps(_mm512_fmadd_ps(sc, top, mc));
        bad |= _mm512_cmp_ps_mask(hi, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(mc, mc, _CMP_UNORD_Q);
        kmx = _mm512_max_ps(kmx, _mm512_max_ps(hi, _mm512_abs_ps(mc)));
    }
    if (bad) return -1.0f;
    float kmax = _mm512_reduce_max_ps(kmx);

    int perm[32];
    for (int p = 0; p < 32; p++) perm[p] = q2 ? perm_q2c(p) : perm_q4c(p);
    __m512i pidx[2] = {_mm512_loadu_si512(perm), _mm512_loadu_si512(perm + 16)};
    float off[ATTN_DECODE_MAX_ROWS];
    for (int i = 0; i < nq; i++) off[i] = row_offset(q + i * E, mh, E);
    pass_scales ps;
    grow_tab tb[QR];
    for (int64_t g0 = 0; g0 < quads; g0 += QG) {
        int ng = quads - g0 < QG ? (int)(quads - g0) : QG, nbk[QG];
        int64_t c0 = g0 * 128;
        for (int g = 0; g < ng; g++) {
            nbk[g] = nb - (g0 + g) * 4 < 4 ? (int)(nb - (g0 + g) * 4) : 4;
            for (int b = 0; b < nbk[g]; b++) {
                const uint16_t *sb = sh + c0 + (4 * g + b) * 32;
                __m512 s0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)sb));
                __m512 s1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(sb + 16)));
                ps.s[4 * g + b][0] = _mm512_permutex2var_ps(s0, pidx[0], s1);
                ps.s[4 * g + b][1] = _mm512_permutex2var_ps(s0, pidx[1], s1);
            }
        }
        for (int i = 0; i < nq; i += QR) { /* more rows: the keys again, from L1 */
            int rows = nq - i < QR ? nq - i : QR;
            for (int r = 0; r < rows; r++) grow_table(&tb[r], q + (i + r) * E, &ps, c0, ng, nbk, pidx);
            float *si = s + i * lds;
            const uint8_t *cb = codes;
#define GROUP_PASS(NQ)                                                                        \
    do {                                                                                      \
        if (q2) group_pass(si, lds, tb, cb, row, k, g0 * 4, ng, nbk, NQ, true, g0 == 0);      \
        else group_pass(si, lds, tb, cb, row, k, g0 * 4, ng, nbk, NQ, false, g0 == 0);        \
    } while (0)
            switch (rows) {
            case 1: GROUP_PASS(1); break;
            case 2: GROUP_PASS(2); break;
            case 3: GROUP_PASS(3); break;
            default: GROUP_PASS(4); break;
            }
#undef GROUP_PASS
        }
    }
    for (int i = 0; i < nq; i++) { /* + Σ q m, last */
        __m512 o = _mm512_set1_ps(off[i]);
        for (int64_t j = 0; j < k; j += 16) {
            __mmask16 m = (__mmask16)(k - j >= 16 ? 0xffff : (1u << (k - j)) - 1);
            _mm512_mask_storeu_ps(s + i * lds + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, s + i * lds + j), o));
        }
    }
    return kmax;
}

const attn_qdot_groups attn_qdot_groups_avx512vnni = {
    .name = "int8_groups_avx512vnni",
    .dot = group_rows,
};
#endif
