/* decode_groups_avx2.c -- decode's scores against keys quantized per
 * channel (ATTN_Q4C, ATTN_Q2C; attn.h, "Keys quantized per channel") with
 * AVX2's integer multiply-adds (qdot.h, attn_qdot_groups): the same
 * arithmetic as decode_groups_avx512.c, on CPUs without AVX512-VNNI.
 *
 * A key of a group is k_c = s_c · n_c + m_c, so a query row's score is
 *     Σ_c q_c k_c = Σ_c (q_c s_c) n_c + Σ_c q_c m_c.
 * Per group and row, q' = q ∘ s (f32) is rounded to int8 per block of 32
 * channels (attn_qrows_quantize's rule); per key and block one exact
 * integer sum of 32 products (VPMADDUBSW: the unsigned codes, at most 15,
 * times the signed query codes, pairs into int16 that never saturate,
 * 2 · 15 · 127 < 2^15; VPMADDWD: pairs into int32; then 8 lanes added),
 * times the block's d in f32. The f32 part is summed in the order qdot.h
 * and decode_groups_avx512.c give, so the scores are that kernel's bits
 * (test_fast checks both against a C model of the order):
 *     per pass of 8 blocks: t_b = y_b (+ y_{b+4}), part = (t0 + t2) + (t1 + t3);
 *     the passes added in order; then + Σ q m (16 lanes of FMAs, lane l +
 *     lane l + 8, then 4 apart, then (0 + 2) + (1 + 3)).
 *
 * The codes of a position are unpacked with one load broadcast to both
 * 128-bit halves, one shift of 64-bit lanes and one mask (q4c: the low
 * nibbles, channels 0, 2, .., 30, then the high, 1, 3, .., 31; q2c: bit
 * pairs 0, 1, 2, 3 of the 8 bytes, channels 4i, 4i + 1, ..); the query's
 * codes are put in that order once per group and row. The integer sums do
 * not depend on the order. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#include <string.h>

#define QG_INLINE ATTN_KERNEL_INLINE

enum { QR = 4,  /* query rows per pass over the keys */
       PB = 8,  /* blocks of 32 channels per pass (decode_groups_avx512.c's 2 quads) */
       NP = 8 }; /* positions per strip: one vector of scores */

/* A block's query codes and d, from its 32 values of q and the group's 32
 * f16 scales: q' = q ∘ s, d = max |q'| / 127, c = q' · (1/d) to nearest
 * even (d = 0: 1/d taken as 0), in the order the keys unpack to. */
static inline void block_table(__m256i *Q, float *d, const float *q, const uint16_t *sh, bool q2) {
    __m256 y[4], M = _mm256_setzero_ps();
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int t = 0; t < 4; t++) {
        __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sh + 8 * t)));
        y[t] = _mm256_mul_ps(_mm256_loadu_ps(q + 8 * t), s);
        M = _mm256_max_ps(M, _mm256_and_ps(y[t], magnitude));
    }
    M = _mm256_max_ps(M, _mm256_permute2f128_ps(M, M, 1));
    M = _mm256_max_ps(M, _mm256_permute_ps(M, _MM_SHUFFLE(1, 0, 3, 2)));
    M = _mm256_max_ps(M, _mm256_permute_ps(M, _MM_SHUFFLE(2, 3, 0, 1)));
    __m256 dv = _mm256_div_ps(M, _mm256_set1_ps(127.0f));
    __m256 inv = _mm256_and_ps(_mm256_cmp_ps(dv, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_div_ps(_mm256_set1_ps(1.0f), dv));
    __m256i c[4];
    for (int t = 0; t < 4; t++) c[t] = _mm256_cvtps_epi32(_mm256_mul_ps(y[t], inv));
    /* bytes in channel order: the packs leave dwords of channels (0-3, 8-11,
     * 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31) */
    __m256i P = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    P = _mm256_permutevar8x32_epi32(P, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* then the keys' order: within each half, q4c evens then odds (dwords
     * 0-1 even, 2-3 odd), q2c channels 4i + k as dword k; across the halves */
    const __m256i by_q4 = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12,
                                           14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m256i by_q2 = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9,
                                           13, 2, 6, 10, 14, 3, 7, 11, 15);
    P = _mm256_shuffle_epi8(P, q2 ? by_q2 : by_q4);
    *Q = _mm256_permutevar8x32_epi32(P, q2 ? _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)
                                           : _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
    *d = _mm256_cvtss_f32(dv);
}

/* A position's codes of one block as 32 unsigned bytes, in block_table's order. */
static inline __m256i block_codes(const uint8_t *blk, bool q2) {
    if (q2) {
        long long w;
        memcpy(&w, blk, 8);
        __m256i x = _mm256_set1_epi64x(w);
        return _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_setr_epi64x(0, 2, 4, 6)), _mm256_set1_epi8(3));
    }
    __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)blk));
    return _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
}

/* The 8 int32 lanes of each of v[0 .. 7] added: lane j of the result is v[j]'s sum. */
static inline __m256i sums8(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), e = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), ce = _mm256_hadd_epi32(c, e);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, ce, 0x20), _mm256_permute2x128_si256(ab, ce, 0x31));
}

/* Σ_c q_c m_c in f32, in decode_groups_avx512.c's order: 16 lanes of FMAs
 * over the channels (lane l takes channels 16i + l; here two vectors of 8),
 * then l + (l + 8), then 4 apart, then (0 + 2) + (1 + 3). */
static float row_offset(const float *q, const uint16_t *mh, int64_t E) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t c = 0; c < E; c += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(mh + c))), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(mh + c + 8))), hi);
    }
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    float l[4];
    _mm_storeu_ps(l, u);
    return (l[0] + l[2]) + (l[1] + l[3]);
}

/* Scores of k <= NP positions (codes from `codes`, `row` bytes apart) for
 * rows r < nr, the pass's blocks b < nbp: stored into s[r * lds + j] (first
 * pass) or added to it; the last pass adds off[r] after. */
QG_INLINE void strip(float *s, int64_t lds, const __m256i Q[QR][PB], const float d[QR][PB], const uint8_t *codes,
                     int64_t row, int k, int nbp, int nr, const bool q2, bool first, bool last, const float *off) {
    const int bb = q2 ? 8 : 16;            /* bytes of a block's codes */
    __m256i K[PB][NP];                     /* the positions' codes, block by block */
    for (int b = 0; b < nbp; b++) {
        if (k == NP) {
#pragma GCC unroll 8
            for (int j = 0; j < NP; j++) K[b][j] = block_codes(codes + j * row + b * bb, q2);
        } else
            for (int j = 0; j < NP; j++) K[b][j] = j < k ? block_codes(codes + j * row + b * bb, q2) : _mm256_setzero_si256();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < nr; r++) {
        __m256 y[PB], t[4];
#pragma GCC unroll 8
        for (int b = 0; b < PB; b++) {
            if (b >= nbp) { /* a block past the row's: +0, as the AVX-512 kernel's lanes */
                y[b] = _mm256_setzero_ps();
                continue;
            }
            __m256i v[NP];
#pragma GCC unroll 8
            for (int j = 0; j < NP; j++) v[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(K[b][j], Q[r][b]), ones);
            y[b] = _mm256_mul_ps(_mm256_cvtepi32_ps(sums8(v)), _mm256_set1_ps(d[r][b]));
        }
        /* the AVX-512 kernel's lanes 4b + j: a pass of one quad, or of two added */
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) t[b] = nbp > 4 ? _mm256_add_ps(y[b], y[b + 4]) : y[b];
        __m256 part = _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]));
        float *to = s + r * lds;
        if (k == NP) {
            if (!first) part = _mm256_add_ps(_mm256_loadu_ps(to), part);
            if (last) part = _mm256_add_ps(part, _mm256_set1_ps(off[r]));
            _mm256_storeu_ps(to, part);
            continue;
        }
        float x[NP];
        _mm256_storeu_ps(x, part);
        for (int j = 0; j < k; j++) {
            float v = first ? x[j] : to[j] + x[j];
            to[j] = last ? v + off[r] : v;
        }
    }
}

/* qdot.h's attn_qdot_groups dot. */
static float group_rows(float *s, int64_t lds, const float *q, int nq, const void *groups, int64_t stride, int64_t E,
                        int64_t t0, int64_t n, bool q2, void *scratch) {
    (void)scratch; /* its tables, 1 KiB, stay on the stack */
    const uint8_t *g8 = groups;
    int64_t nb = E / 32, row = q2 ? E / 4 : E / 2, bb = q2 ? 8 : 16;
    /* A bound on |k| over the groups read: max |m| + (2^b - 1) · max s, from
     * the largest f16 magnitudes (their bits without the sign, in order as
     * integers); one of 0x7c00 or more (an infinity or NaN): -1 */
    __m256i ms = _mm256_setzero_si256(), mm = _mm256_setzero_si256();
    const __m256i magnitude = _mm256_set1_epi16(0x7fff);
    for (int64_t g = n > 0 ? t0 / 32 : 0; n > 0 && g <= (t0 + n - 1) / 32; g++) {
        const uint8_t *sh = g8 + g * stride;
        for (int64_t c = 0; c < E; c += 16) { /* E is a multiple of 32 */
            ms = _mm256_max_epu16(ms, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(sh + 2 * c)), magnitude));
            mm = _mm256_max_epu16(mm, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(sh + 2 * (E + c))), magnitude));
        }
    }
    uint16_t lanes[2][16], top_s = 0, top_m = 0;
    _mm256_storeu_si256((__m256i *)(void *)lanes[0], ms), _mm256_storeu_si256((__m256i *)(void *)lanes[1], mm);
    for (int i = 0; i < 16; i++)
        top_s = lanes[0][i] > top_s ? lanes[0][i] : top_s, top_m = lanes[1][i] > top_m ? lanes[1][i] : top_m;
    for (int64_t p0 = 0; p0 < nb; p0 += PB) {
        int nbp = nb - p0 < PB ? (int)(nb - p0) : PB;
        bool first = p0 == 0, last = p0 + PB >= nb;
        for (int i0 = 0; i0 < nq; i0 += QR) {
            int nr = nq - i0 < QR ? nq - i0 : QR;
            for (int64_t p = t0; p < t0 + n;) {
                const uint8_t *grp = g8 + p / 32 * stride;
                const uint16_t *sh = (const uint16_t *)(const void *)grp;
                int64_t end = (p / 32 + 1) * 32 < t0 + n ? (p / 32 + 1) * 32 : t0 + n;
                __m256i Q[QR][PB];
                float d[QR][PB], off[QR];
                for (int r = 0; r < nr; r++) {
                    const float *qr = q + (int64_t)(i0 + r) * E;
                    for (int b = 0; b < nbp; b++) block_table(&Q[r][b], &d[r][b], qr + 32 * (p0 + b), sh + 32 * (p0 + b), q2);
                    off[r] = last ? row_offset(qr, sh + E, E) : 0;
                }
                for (int k; p < end; p += k) {
                    k = end - p < NP ? (int)(end - p) : NP;
                    float *to = s + (int64_t)i0 * lds + (p - t0);
                    const uint8_t *codes = grp + 4 * E + p % 32 * row + p0 * bb;
                    if (q2)
                        strip(to, lds, (const __m256i(*)[PB])Q, (const float(*)[PB])d, codes, row, k, nbp, nr, true,
                              first, last, off);
                    else
                        strip(to, lds, (const __m256i(*)[PB])Q, (const float(*)[PB])d, codes, row, k, nbp, nr, false,
                              first, last, off);
                }
            }
        }
    }
    if (top_s >= 0x7c00u || top_m >= 0x7c00u) return -1.0f;
    return _cvtsh_ss(top_m) + (q2 ? 3.0f : 15.0f) * _cvtsh_ss(top_s);
}

const attn_qdot_groups attn_qdot_groups_avx2 = {
    .name = "int8_groups_avx2",
    .dot = group_rows,
};
#endif
