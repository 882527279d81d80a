/* decode_groups_avx512.c -- decode's scores against keys quantized per
 * channel (ATTN_Q4C, ATTN_Q2C; attn.h, "Keys quantized per channel") with
 * AVX512-VNNI's integer dot products (qdot.h, attn_qdot_groups).
 *
 * A key of a group is k_c = s_c · n_c + m_c (channel c's scale s_c and
 * minimum m_c, its code n_c of 4 or 2 bits), so a query row's score is
 *     Σ_c q_c k_c = Σ_c (q_c s_c) n_c + Σ_c q_c m_c.
 * Per group and query row, q' = q ∘ s (f32 products) is rounded to int8 per
 * block of 32 channels by q8_0's rule (qdot.h's attn_qrows_quantize: d =
 * max |q'| / 127, c = q' · (1/d) to nearest even), the codes n are already
 * unsigned bytes (VPDPBUSD's unsigned side, no bias), and the constant
 * Σ q_c m_c is computed once per group and row in f32. Per key and block
 * that leaves one exact integer dot product and one multiply by d.
 *
 * The codes of one position lie packed along the channels (two or four a
 * byte); VPDPBUSD sums 4 byte products into a lane. Masking the nibbles
 * (or bit pairs) of a dword gives 4 codes of channels 2 (or 4) apart, so
 * the query's codes are taken in that order instead: its f32 values (and
 * the scales) are gathered into the tables' order (below) before they are
 * rounded, which changes no code (the rule is per value but for the
 * block's max, which is exact in any order): bitwise attn_qrows_quantize's
 * codes of q' (test_fast_simde checks it against that function).
 * Keys then go as the q4 kernel's do (decode_quant_avx512.c): a tile of 4
 * positions × a quad of 4 blocks, transposed once per tile for every query
 * row, lane 4b + j holding block b of position j, 8 VPDPBUSD per row and
 * tile. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#include <string.h>

#define QG_INLINE ATTN_KERNEL_INLINE
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
/* The tables' order of a quad's 128 channels (q and s alike): 8 vectors,
 * vector t lane 4b + i = block b's place 4t + i, so that the max of a
 * block, its d and its inverse sit in lanes 4b .. 4b + 3 of one vector, and
 * packing vectors 4h .. 4h + 3 to bytes leaves block b's dwords 4h .. 4h + 3
 * in 128-bit lane b. Place 4t + i of every block lies in half t % 4 / 2 (q4c)
 * or t / 4 (q2c) of it; idx[t] lane 4b + i picks it from block b's half
 * (b odd: the second of a pair of vectors). */
typedef struct quad_order {
    __m512i idx[8];
    int half[8];
} quad_order;

static void quad_order_of(quad_order *o, bool q2) {
    /* Place 4t + i is channel (q4c) 16·(t % 4 / 2) + 8·(t % 2) + 2i + t / 4, (q2c)
     * 16·(t / 4) + 4i + t % 4: within its half, base + 2i or 4i from an offset. */
    const __m512i base = q2 ? _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28)
                            : _mm512_setr_epi32(0, 2, 4, 6, 16, 18, 20, 22, 0, 2, 4, 6, 16, 18, 20, 22);
    for (int t = 0; t < 8; t++) {
        o->half[t] = q2 ? t / 4 : t % 4 / 2;
        o->idx[t] = _mm512_add_epi32(base, _mm512_set1_epi32(q2 ? t % 4 : 8 * (t % 2) + t / 4));
    }
}

/* A quad in the tables' order from its blocks' natural halves x[b][h]. */
QG_INLINE void quad_gather(__m512 y[8], __m512 x[4][2], const quad_order *o) {
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) {
        int h = o->half[t];
        __m512 lo = _mm512_permutex2var_ps(x[0][h], o->idx[t], x[1][h]);
        __m512 hi = _mm512_permutex2var_ps(x[2][h], o->idx[t], x[3][h]);
        y[t] = _mm512_mask_blend_ps(0xff00, lo, hi);
    }
}

/* The 4 × 4 sums of 4 vectors: lanes 4u + j of the result = (S_u's lanes
 * j + (8 + j)) + (4 + j + (12 + j)), that is (b0 + b2) + (b1 + b3) of key j
 * of tile u. */
QG_INLINE __m512 tiles_sum(__m512 S0, __m512 S1, __m512 S2, __m512 S3) {
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    __m512 a01 = _mm512_add_ps(_mm512_permutex2var_ps(S0, lo, S1), _mm512_permutex2var_ps(S0, hi, S1));
    __m512 a23 = _mm512_add_ps(_mm512_permutex2var_ps(S2, lo, S3), _mm512_permutex2var_ps(S2, hi, S3));
    const __m512i lo2 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    const __m512i hi2 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    return _mm512_add_ps(_mm512_permutex2var_ps(a01, lo2, a23), _mm512_permutex2var_ps(a01, hi2, a23));
}

/* A query row as one group and pass take it: lanes 4b + j of quad g. */
typedef struct grow_tab {
    __m512i q[QG][8]; /* dword t of block b's codes, for every j */
    __m512 d[QG];     /* block b's d (zero past the row's blocks) */
} grow_tab;

/* Row tables for quad g from the row's q and the group's s, both in the
 * tables' order: q' = q ∘ s rounded per block (attn_qrows_quantize's rule:
 * d = max |q'| / 127, c = q' · (1/d) to nearest even, the conversion's
 * default rounding; |q' / d| <= 127 · (1 + 3·2^-24) < 127.5, so its clamp
 * never acts and the packs' saturation neither). */
QG_INLINE void grow_quad(grow_tab *tb, int g, const __m512 q[8], const __m512 s[8]) {
    __m512 y[8], M = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) y[t] = _mm512_mul_ps(q[t], s[t]), M = _mm512_max_ps(M, _mm512_abs_ps(y[t]));
    M = _mm512_max_ps(M, _mm512_permute_ps(M, _MM_SHUFFLE(2, 3, 0, 1)));
    M = _mm512_max_ps(M, _mm512_permute_ps(M, _MM_SHUFFLE(1, 0, 3, 2)));
    __m512 d = _mm512_div_ps(M, _mm512_set1_ps(127.0f));
    __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_set1_ps(1.0f), d);
    __m512i c[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) c[t] = _mm512_cvtps_epi32(_mm512_mul_ps(y[t], inv));
    /* per 128-bit lane b: vectors 4h .. 4h + 3's lanes 4b .. 4b + 3 as bytes, in order */
    __m512i P0 = _mm512_packs_epi16(_mm512_packs_epi32(c[0], c[1]), _mm512_packs_epi32(c[2], c[3]));
    __m512i P1 = _mm512_packs_epi16(_mm512_packs_epi32(c[4], c[5]), _mm512_packs_epi32(c[6], c[7]));
    tb->q[g][0] = _mm512_shuffle_epi32(P0, 0x00), tb->q[g][1] = _mm512_shuffle_epi32(P0, 0x55);
    tb->q[g][2] = _mm512_shuffle_epi32(P0, 0xaa), tb->q[g][3] = _mm512_shuffle_epi32(P0, 0xff);
    tb->q[g][4] = _mm512_shuffle_epi32(P1, 0x00), tb->q[g][5] = _mm512_shuffle_epi32(P1, 0x55);
    tb->q[g][6] = _mm512_shuffle_epi32(P1, 0xaa), tb->q[g][7] = _mm512_shuffle_epi32(P1, 0xff);
    tb->d[g] = d;
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

/* Scores of n <= 16 positions (tiles of 4) for rows i < NQ of tb, the
 * pass's quads g < ng: stored into s[i * lds + j] (first pass) or added to
 * it; the last pass adds off[i] (Σ q m) after. */
QG_INLINE void group_strip(float *s, int64_t lds, const grow_tab *restrict tb, const uint8_t *codes, int64_t row, int n,
                           int64_t b0, int ng, const int *nbk, const int NQ, const bool q2, bool first, bool last,
                           const float *off) {
    __m512 S[QR][4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        int NK = n - 4 * u < 4 ? n - 4 * u : 4;
#pragma GCC unroll 4
        for (int i = 0; i < QR; i++) S[i][u] = _mm512_setzero_ps();
        if (NK <= 0) continue;
        for (int g = 0; g < ng; g++) {
            __m512i K[8];
            tile_keys(K, codes + 4 * u * row, row, NK, b0 + 4 * g, nbk[g], q2);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int t = 0; t < 8; t++) acc = _mm512_dpbusd_epi32(acc, K[t], tb[i].q[g][t]);
                __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), tb[i].d[g]);
                S[i][u] = g ? _mm512_add_ps(S[i][u], y) : y;
            }
        }
    }
    __mmask16 m = (__mmask16)((1u << n) - 1);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) {
        __m512 sum = tiles_sum(S[i][0], S[i][1], S[i][2], S[i][3]);
        float *to = s + i * lds;
        if (!first) sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, to), sum);
        if (last) sum = _mm512_add_ps(sum, _mm512_set1_ps(off[i]));
        _mm512_mask_storeu_ps(to, m, sum);
    }
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

/* The blocks of quad g0 + g as natural halves (16 channels each) of 16-bit
 * (f16 scales) or f32 (query) values from channel c0 of the pass; zero past
 * nbk blocks. */
QG_INLINE void quad_halves_f16(__m512 x[4][2], const uint16_t *h, int nbk) {
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++)
            x[b][k] = b < nbk ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + 32 * b + 16 * k)))
                              : _mm512_setzero_ps();
}
QG_INLINE void quad_halves_f32(__m512 x[4][2], const float *q, int nbk) {
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++)
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) x[b][k] = b < nbk ? _mm512_loadu_ps(q + 32 * b + 16 * k) : _mm512_setzero_ps();
}

/* One pass (quads g0 .. g0 + ng - 1) for rows i < NQ over the span's
 * positions: per group its scales in the tables' order, each row's tables,
 * then strips of 16 positions within the group. */
QG_INLINE void group_pass(float *s, int64_t lds, const float *q, const __m512 (*restrict qt)[QG][8],
                          grow_tab *restrict tb, const uint8_t *groups, int64_t stride, int64_t E, int64_t t0,
                          int64_t n, int64_t g0, int ng, const int *nbk, const quad_order *o, const int NQ,
                          const bool q2, bool first, bool last, __m512i *ms, __m512i *mm) {
    int64_t row = q2 ? E / 4 : E / 2;
    const __m512i magnitude = _mm512_set1_epi16(0x7fff);
    for (int64_t p = t0; p < t0 + n;) {
        const uint8_t *grp = groups + p / 32 * stride;
        const uint16_t *sh = (const uint16_t *)(const void *)grp;
        if (first) /* the group's largest f16 magnitudes of s and m, as it is first read */
            for (int64_t c = 0; c < E; c += 32) { /* E is a multiple of 32 */
                *ms = _mm512_max_epu16(*ms, _mm512_and_si512(_mm512_loadu_si512(sh + c), magnitude));
                *mm = _mm512_max_epu16(*mm, _mm512_and_si512(_mm512_loadu_si512(sh + E + c), magnitude));
            }
        int64_t end = (p / 32 + 1) * 32 < t0 + n ? (p / 32 + 1) * 32 : t0 + n;
        for (int g = 0; g < ng; g++) {
            __m512 x[4][2], st[8];
            quad_halves_f16(x, sh + (g0 + g) * 128, nbk[g]);
            quad_gather(st, x, o);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) grow_quad(&tb[i], g, qt[i][g], st);
        }
        float off[QR];
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) off[i] = last ? row_offset(q + i * E, sh + E, E) : 0;
        for (int k; p < end; p += k) { /* strips of 16 positions, the last one of the group shorter */
            k = end - p < 16 ? (int)(end - p) : 16;
            group_strip(s + (p - t0), lds, tb, grp + 4 * E + p % 32 * row, row, k, g0 * 4, ng, nbk, NQ, q2, first,
                        last, off);
        }
    }
}

/* A pass's query rows in the tables' order and each row's tables: 8.5
 * KiB of the caller's scratch (qdot.h), read from L1 as from the stack. */
typedef struct group_scratch {
    __m512 qt[QR][QG][8];
    grow_tab tb[QR];
} group_scratch;
_Static_assert(sizeof(group_scratch) <= ATTN_QDOT_SCRATCH, "a pass's rows and tables fit the caller's scratch");

/* qdot.h's attn_qdot_groups dot. */
static float group_rows(float *s, int64_t lds, const float *q, int nq, const void *groups, int64_t stride, int64_t E,
                        int64_t t0, int64_t n, bool q2, void *scratch) {
    const uint8_t *g8 = groups;
    int64_t nb = E / 32, quads = (nb + 3) / 4;
    __m512i ms = _mm512_setzero_si512(), mm = _mm512_setzero_si512(); /* group_pass's bound on |k| */
    quad_order o;
    quad_order_of(&o, q2);
    group_scratch *restrict sc = scratch;
    __m512(*restrict qt)[QG][8] = sc->qt; /* the rows' q in the tables' order, one pass */
    for (int64_t g0 = 0; g0 < quads; g0 += QG) {
        int ng = quads - g0 < QG ? (int)(quads - g0) : QG, nbk[QG];
        for (int g = 0; g < ng; g++) nbk[g] = nb - (g0 + g) * 4 < 4 ? (int)(nb - (g0 + g) * 4) : 4;
        bool first = g0 == 0, last = g0 + QG >= quads;
        for (int i = 0; i < nq; i += QR) { /* more rows: the keys again, from L1 */
            int rows = nq - i < QR ? nq - i : QR;
            for (int r = 0; r < rows; r++)
                for (int g = 0; g < ng; g++) {
                    __m512 x[4][2];
                    quad_halves_f32(x, q + (i + r) * E + (g0 + g) * 128, nbk[g]);
                    quad_gather(qt[r][g], x, &o);
                }
            const float *qi = q + i * E;
            float *si = s + i * lds;
#define GROUP_PASS(NQ)                                                                                         \
    do {                                                                                                       \
        if (q2)                                                                                                \
            group_pass(si, lds, qi, (const __m512(*)[QG][8])qt, sc->tb, g8, stride, E, t0, n, g0, ng, nbk, &o, NQ, true,  \
                       first, last, &ms, &mm);                                                                 \
        else                                                                                                   \
            group_pass(si, lds, qi, (const __m512(*)[QG][8])qt, sc->tb, g8, stride, E, t0, n, g0, ng, nbk, &o, NQ, false, \
                       first, last, &ms, &mm);                                                                 \
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
    /* A bound on |k| over the groups: max |m| + (2^b - 1) · max s, from the
     * largest f16 magnitudes (their bits without the sign, in order as
     * integers); one of 0x7c00 or more (an infinity or NaN): -1, the scores
     * computed from it unused */
    uint16_t lanes[2][32], top[2] = {0, 0};
    _mm512_storeu_si512(lanes[0], ms), _mm512_storeu_si512(lanes[1], mm);
    for (int i = 0; i < 32; i++)
        for (int f = 0; f < 2; f++) top[f] = lanes[f][i] > top[f] ? lanes[f][i] : top[f];
    if (top[0] >= 0x7c00u || top[1] >= 0x7c00u) return -1.0f;
    return _cvtsh_ss(top[1]) + (q2 ? 3.0f : 15.0f) * _cvtsh_ss(top[0]);
}

const attn_qdot_groups attn_qdot_groups_avx512vnni = {
    .name = "int8_groups_avx512vnni",
    .dot = group_rows,
};
#endif
