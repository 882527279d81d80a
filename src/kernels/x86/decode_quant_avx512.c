/* decode_quant_avx512.c -- the integer dot product kernel (qdot.h) with
 * AVX512-VNNI's VPDPBUSD: 64 unsigned × signed byte products summed in
 * fours into 16 int32 lanes, one instruction. q8 key codes k are read as
 * the unsigned bytes k + 128 (k XOR 0x80), and the query row's bias takes
 * 128 · Σ c_q back; q4 codes are unsigned as stored (bias 8 · Σ c_q).
 * And the values of q8/q4 rows for decode, with the block scales folded
 * into the weights: in f32 FMAs (attn_qdot_avx512vnni) or, where the CPU
 * has AVX512-BF16 too, two keys a VDPBF16PS (attn_qdot_avx512vnni_bf16;
 * this file is compiled with -mavx512bf16, and dispatch.c runs that set's
 * code only on such CPUs). */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#include <float.h>
#include <string.h>

/* ---- keys: a tile of 4 keys × a quad of 4 blocks in the 16 int32 lanes
 * of one vector, lane 4·b + j for block b of key j. The key codes are
 * transposed once per tile (shared by every query row), so that VPDPBUSD's
 * lane sums stay inside one block: 8 of them (dword t = 0..7 of each
 * block, against the query's dword t of that block broadcast to the 4 keys'
 * lanes) leave each lane the exact integer dot product of one block of one
 * key with the query row. Per row and tile of 4 keys that is 8 VPDPBUSD, one
 * conversion and two multiplies by d_k and d_q, where a vector per block
 * and key needed a conversion, a multiply-add and a reduction. */
#define QDOT_INLINE ATTN_KERNEL_INLINE
enum { QR = 4,  /* query rows per pass over the keys */
       QG = 2,  /* quads of blocks per pass (E <= 256 in one) */
       QT = 2 }; /* whole tiles of 4 keys a step (qdot_tile's NT) */

/* A query row as the tiles take it, for quads g < QG of one pass. */
typedef struct qrow_tab {
    __m512i q[QG][8]; /* lanes 4b + j: dword t of block b of the quad, for every j */
    __m512i bias[QG]; /* lanes 4b + j: the block's bias (zero past the row's blocks) */
    __m512 d[QG];     /* lanes 4b + j: the block's d_q (zero past the row's blocks) */
} qrow_tab;

/* The tables of row r, quads g0 .. g0 + ng - 1 (nb blocks in the row). */
static void qrow_table(qrow_tab *tb, const attn_qrows *qq, int64_t r, int64_t g0, int ng, int64_t nb) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int g = 0; g < ng; g++) {
        int64_t b0 = (g0 + g) * 4, nbk = nb - b0 < 4 ? nb - b0 : 4;
        const int8_t *c = qq->codes + (r * nb + b0) * 32;
        __mmask16 m01 = nbk >= 2 ? 0xffff : 0x00ff, m23 = nbk >= 4 ? 0xffff : nbk == 3 ? 0x00ff : 0;
        __m512i c01 = _mm512_maskz_loadu_epi32(m01, c), c23 = _mm512_maskz_loadu_epi32(m23, c + 64);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 24, 24, 24, 24),
                                           _mm512_set1_epi32(t));
            tb->q[g][t] = _mm512_permutex2var_epi32(c01, idx, c23);
        }
        __mmask16 mb = (__mmask16)((1u << nbk) - 1);
        tb->bias[g] = _mm512_permutexvar_epi32(spread, _mm512_maskz_loadu_epi32(mb, qq->bias + r * nb + b0));
        tb->d[g] = _mm512_permutexvar_ps(spread, _mm512_maskz_loadu_ps(mb, qq->d + r * nb + b0));
    }
}

/* X[j][h] (blocks 2h, 2h+1 of key j, 8 dwords each) into K[t] (lanes 4b + j:
 * dword t of block b of key j): within 128-bit lanes a 4 × 4 transpose of
 * the keys' dwords, then across them. */
QDOT_INLINE void transpose_keys(__m512i K[8], __m512i X[4][2]) {
    __m512i V[2][4];
#pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
        __m512i u0 = _mm512_unpacklo_epi32(X[0][h], X[1][h]), u1 = _mm512_unpackhi_epi32(X[0][h], X[1][h]);
        __m512i u2 = _mm512_unpacklo_epi32(X[2][h], X[3][h]), u3 = _mm512_unpackhi_epi32(X[2][h], X[3][h]);
        V[h][0] = _mm512_unpacklo_epi64(u0, u2), V[h][1] = _mm512_unpackhi_epi64(u0, u2);
        V[h][2] = _mm512_unpacklo_epi64(u1, u3), V[h][3] = _mm512_unpackhi_epi64(u1, u3);
    }
    /* V[h][m]'s 128-bit lanes: (block 2h, dword m), (2h, 4 + m), (2h + 1, m), (2h + 1, 4 + m) */
#pragma GCC unroll 8
    for (int m = 0; m < 4; m++) {
        K[m] = _mm512_shuffle_i32x4(V[0][m], V[1][m], _MM_SHUFFLE(2, 0, 2, 0));
        K[4 + m] = _mm512_shuffle_i32x4(V[0][m], V[1][m], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* 32 codes of a q8 block as unsigned bytes (k + 128), or zeros. */
QDOT_INLINE __m256i q8_codes(const uint8_t *blk, bool have) {
    return have ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)), _mm256_set1_epi8(-128))
                : _mm256_setzero_si256();
}

/* K[t] of the tile's NK keys at k (row stride ld) for the quad of blocks
 * from b0 (nbk of them). */
QDOT_INLINE void tile_keys_q8(__m512i K[8], const uint8_t *k, int64_t ld, int NK, int64_t b0, int nbk) {
    __m512i X[4][2];
#pragma GCC unroll 8
    for (int j = 0; j < 4; j++) {
        const uint8_t *blk = k + j * ld + b0 * 34;
        bool have = j < NK;
        X[j][0] = _mm512_inserti64x4(_mm512_castsi256_si512(q8_codes(blk, have)), q8_codes(blk + 34, have && nbk > 1), 1);
        X[j][1] = _mm512_inserti64x4(_mm512_castsi256_si512(q8_codes(blk + 68, have && nbk > 2)),
                                     q8_codes(blk + 102, have && nbk > 3), 1);
    }
    transpose_keys(K, X);
}

/* q4: value i (i < 16) in the low 4 bits of byte i, i + 16 in the high 4:
 * the block's 16 bytes, dword m, are values 4m .. 4m+3 in their low halves
 * and 16 + 4m .. in the high: the query's dwords m and 4 + m. */
QDOT_INLINE void tile_keys_q4(__m512i K[8], const uint8_t *k, int64_t ld, int NK, int64_t b0, int nbk) {
    __m512i X[4];
#pragma GCC unroll 8
    for (int j = 0; j < 4; j++) {
        const uint8_t *blk = k + j * ld + b0 * 18;
        __m512i x = _mm512_setzero_si512();
        if (j < NK) {
            x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
            if (nbk > 1) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 20)), 1);
            if (nbk > 2) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 38)), 2);
            if (nbk > 3) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 56)), 3);
        }
        X[j] = x;
    }
    __m512i u0 = _mm512_unpacklo_epi32(X[0], X[1]), u1 = _mm512_unpackhi_epi32(X[0], X[1]);
    __m512i u2 = _mm512_unpacklo_epi32(X[2], X[3]), u3 = _mm512_unpackhi_epi32(X[2], X[3]);
    __m512i T[4] = {_mm512_unpacklo_epi64(u0, u2), _mm512_unpackhi_epi64(u0, u2), _mm512_unpacklo_epi64(u1, u3),
                    _mm512_unpackhi_epi64(u1, u3)};
    const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 8
    for (int m = 0; m < 4; m++) {
        K[m] = _mm512_and_si512(T[m], low);
        K[4 + m] = _mm512_and_si512(_mm512_srli_epi32(T[m], 4), low);
    }
}

#include "kernels/x86/quant_scales.h"

/* Scores of NT tiles of NK keys each (NT = 2: two whole tiles, 8 keys
 * from k) for rows i < NQ of tb, quads g < ng of one pass: stored into
 * s[i * lds + j] (first pass) or added to it. With two tiles each row's
 * query dwords, loaded once, serve both: on Zen 5 the loads (two a cycle),
 * not the VPDPBUSD, bound one tile (per row 8 query vectors, the bias and
 * d_q for 4 keys). Each tile's arithmetic is the same either way. */
QDOT_INLINE void qdot_tile(float *s, int64_t lds, const qrow_tab *tb, const uint8_t *k, int64_t ld,
                           int NK, int64_t g0, int ng, int64_t nb, const int NQ, const bool q4, const bool full, bool first,
                           __m256i *hm, const int NT) {
    __m512 S[QR][2];
#pragma GCC unroll 4
    for (int i = 0; i < QR; i++) S[i][0] = S[i][1] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        int64_t b0 = (g0 + g) * 4;
        int nbk = full || nb - b0 >= 4 ? 4 : (int)(nb - b0);
        __m512i K[2][8];
        __m512 dk[2];
#pragma GCC unroll 2
        for (int u = 0; u < NT; u++) {
            if (q4) tile_keys_q4(K[u], k + 4 * u * ld, ld, NK, b0, nbk);
            else tile_keys_q8(K[u], k + 4 * u * ld, ld, NK, b0, nbk);
            dk[u] = tile_scales(k + 4 * u * ld + b0 * (q4 ? 18 : 34), ld, NK, nbk, q4, hm);
        }
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512i acc[2] = {tb[i].bias[g], tb[i].bias[g]};
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++)
#pragma GCC unroll 2
                for (int u = 0; u < NT; u++) acc[u] = _mm512_dpbusd_epi32(acc[u], K[u][t], tb[i].q[g][t]);
#pragma GCC unroll 2
            for (int u = 0; u < NT; u++) {
                __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[u]), dk[u]), tb[i].d[g]);
                S[i][u] = g ? _mm512_add_ps(S[i][u], y) : y;
            }
        }
    }
    __mmask8 m = (__mmask8)((1u << NK) - 1);
    if (NQ == 4 && first) {
        /* Four rows summed together: their 16 vectors of 4 keys' (b0 + b2) and
         * (b1 + b3) gathered into two vectors whose lane i is row i's, one add:
         * per tile 6 VSHUFF32X4 and 3 adds where each row alone took 2 and 2 (the
         * shuffles share a pipe with the VPDPBUSD). The same sums, same bits.
         * One core, 2,048 keys in L2: q4 keys 3.28 -> 3.15 ns a key; q8 keys
         * 3.60 -> 3.68, as much as when q8 kept a row each (code placement). */
#pragma GCC unroll 2
        for (int u = 0; u < NT; u++) {
            __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(S[0][u], S[1][u], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_f32x4(S[0][u], S[1][u], _MM_SHUFFLE(3, 2, 3, 2)));
            __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(S[2][u], S[3][u], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_f32x4(S[2][u], S[3][u], _MM_SHUFFLE(3, 2, 3, 2)));
            __m512 o = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(3, 1, 3, 1)));
            _mm_mask_storeu_ps(s + 4 * u, m, _mm512_castps512_ps128(o));
            _mm_mask_storeu_ps(s + lds + 4 * u, m, _mm512_extractf32x4_ps(o, 1));
            _mm_mask_storeu_ps(s + 2 * lds + 4 * u, m, _mm512_extractf32x4_ps(o, 2));
            _mm_mask_storeu_ps(s + 3 * lds + 4 * u, m, _mm512_extractf32x4_ps(o, 3));
        }
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) /* (b0 + b2) + (b1 + b3), each key on its own */
#pragma GCC unroll 2
        for (int u = 0; u < NT; u++) {
            __m512 h = _mm512_add_ps(S[i][u], _mm512_shuffle_f32x4(S[i][u], S[i][u], _MM_SHUFFLE(1, 0, 3, 2)));
            __m128 sum = _mm_add_ps(_mm512_castps512_ps128(h), _mm512_extractf32x4_ps(h, 1));
            float *to = s + i * lds + 4 * u;
            if (!first) sum = _mm_add_ps(_mm_maskz_loadu_ps(m, to), sum);
            _mm_mask_storeu_ps(to, m, sum);
        }
}

#include "kernels/x86/decode_quant_tiles.h"

/* qdot.h's quantize: attn_qblock_quantize's rule, a block of 32 values in
 * two vectors. The max of |x| is exact in any order; d and 1/d are the
 * same scalar divisions, x · (1/d) the same f32 products, rounded to
 * nearest even by the conversion (the default rounding, as the portable
 * loop's 1.5 · 2^23 rounds) after the clamp to ±127, which commutes with
 * the rounding (±127 are integers). A block whose 1/d overflows (d
 * subnormal: every |x| below about 2^-119) goes to the portable loop,
 * whose x · inf may be NaN. */
static void qrows_quantize(int8_t *codes, float *d, int32_t *bias, const float *q, int64_t blocks, int32_t per_sum) {
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int64_t r = 0; r < blocks; r++) {
        const float *x = q + r * 32;
        __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        float a = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        float dq = a / 127, inv = dq > 0 ? 1 / dq : 0;
        if (!(inv <= FLT_MAX)) {
            bias[r] = -per_sum * attn_qblock_quantize(codes + r * 32, &d[r], x);
            continue;
        }
        __m512 vi = _mm512_set1_ps(inv);
        __m512i c0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x0, vi), lo), hi));
        __m512i c1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x1, vi), lo), hi));
        _mm_storeu_si128((__m128i *)(void *)(codes + r * 32), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(void *)(codes + r * 32 + 16), _mm512_cvtepi32_epi8(c1));
        d[r] = dq;
        bias[r] = -per_sum * _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    }
}

/* ---- values: acc[i] += Σ_j p_ij · v_j over q8/q4 rows, where block b of
 * v_j is d_jb times its codes. The weights take the scales first: w_ijb =
 * p_ij · d_jb, one vector multiply per row for a tile of 4 keys (the scales
 * picked as the keys' tiles pick them), so that per key, row and 16 values
 * a single FMA of the widened codes by w (broadcast from memory) remains:
 * the multiply of every widened code by d, the FMA units' other work, is
 * gone. (w rounds once more than the f32 kernel's exact code · d, so the
 * sum is no longer bitwise the widened rows': within f32's bound.) */
#define QV_INLINE ATTN_KERNEL_INLINE
enum { QV_W = 4096,  /* floats of weights w in the caller's scratch: a group of keys' */
       QV_QUADS = 8 }; /* quads of blocks (256 values) at most per group */

/* w for rows i < NQ, keys j < n of v (row stride ld), quads g < nq4 of
 * blocks from block b0 (nb - b0 blocks left in the row): p_ij · d_jb at
 * w[((j/4 · nq4 + g) · 4 + i) · 16 + 4b + j%4]. */
QV_INLINE void qaxpy_weights(float *restrict w, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n,
                             int64_t b0, int64_t nb, int64_t nq4, const int NQ, const bool q4) {
    __m256i hm = _mm256_setzero_si256(); /* unused: a scale not finite reaches acc as NaN or ±inf */
    for (int64_t j = 0; j < n; j += 4) {
        int NK = n - j < 4 ? (int)(n - j) : 4;
        __mmask8 keys = (__mmask8)((1u << NK) - 1);
        __m512 pw[4] = {_mm512_setzero_ps()}; /* p_ij in lanes 4b + j, every b (rows past NQ: unused) */
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) pw[i] = _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(keys, p + i * ldp + j));
        for (int64_t g = 0; g < nq4; g++) {
            int64_t b = b0 + 4 * g;
            int nbk = nb - b < 4 ? (int)(nb - b) : 4;
            __m512 dk = tile_scales(v + j * ld + b * (q4 ? 18 : 34), ld, NK, nbk, q4, &hm);
            float *to = w + (j / 4 * nq4 + g) * 64;
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) _mm512_storeu_ps(to + 16 * i, _mm512_mul_ps(pw[i], dk));
        }
    }
}

/* The codes of the block at blk as f32 (q8: the int8 codes; q4: code - 8). */
QV_INLINE void block_codes(__m512 *lo, __m512 *hi, const uint8_t *blk, const bool q4) {
    if (!q4) {
        *lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2))));
        *hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 18))));
        return;
    }
    /* value i (i < 16) in the low 4 bits of byte i, i + 16 in the high 4: looked up by each lane's low 4 bits */
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
    *lo = _mm512_permutexvar_ps(c, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), table);
}

/* Rows i < NQ, the NB blocks from block b (columns 32b ..), keys j < n, their
 * weights w as qaxpy_weights laid them out from block b0 (nq4 quads); with
 * each key, the bytes [j · ld, (j + 1) · ld) of next fetched into L1
 * (npf rows of it). */
QV_INLINE void qaxpy_block(float *acc, const float *restrict w, const uint8_t *v, int64_t ld, int64_t n, int64_t Ev,
                           int64_t b, int64_t b0, int64_t nq4, const int NQ, const int NB, const bool q4,
                           const uint8_t *next, int64_t npf) {
    __m512 a[4][8] = {{_mm512_setzero_ps()}}, c[8] = {_mm512_setzero_ps()}; /* (rows, blocks past NQ, NB: unused) */
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int t = 0; t < 2 * NB; t++) a[i][t] = _mm512_loadu_ps(acc + i * Ev + 32 * b + 16 * t);
    for (int64_t j = 0; j < n; j++) {
        if (j < npf)
            for (int64_t o = 0; o < ld; o += 64) _mm_prefetch((const char *)(next + j * ld + o), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int u = 0; u < NB; u++) block_codes(&c[2 * u], &c[2 * u + 1], v + j * ld + (b + u) * (q4 ? 18 : 34), q4);
        const float *wj = w + j / 4 * nq4 * 64 + j % 4;
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int u = 0; u < NB; u++) {
                int64_t bb = b + u - b0; /* the block within the group's quads */
                const float *wu = wj + (bb / 4 * 4 + i) * 16 + bb % 4 * 4, *again = wu;
                /* Each FMA loads w itself, as an embedded broadcast ({1to16}): a
                 * broadcast into a register shared by the two costs the FMA units
                 * a cycle each on Zen 4. The empty asm keeps the compiler from
                 * merging the two loads into one. */
                __asm__("" : "+r"(again));
                a[i][2 * u] = _mm512_fmadd_ps(c[2 * u], _mm512_set1_ps(*wu), a[i][2 * u]);
                a[i][2 * u + 1] = _mm512_fmadd_ps(c[2 * u + 1], _mm512_set1_ps(*again), a[i][2 * u + 1]);
            }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int t = 0; t < 2 * NB; t++) _mm512_storeu_ps(acc + i * Ev + 32 * b + 16 * t, a[i][t]);
}

/* All Ev columns for NQ rows: up to QV_QUADS quads of blocks at a time,
 * keys in groups whose rows stay in L1 and whose weights fit QV_W, the
 * column blocks passing over them NB at a time (4 for up to 2 rows, 2 for
 * 3-4: 32 registers). */
QV_INLINE void qaxpy_nq(float *acc, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n, int64_t Ev,
                        const int NQ, const bool q4, float *restrict w) {
    const int NB = NQ <= 2 ? 4 : 2;
    int64_t nb = Ev / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += 4 * QV_QUADS) {
        int64_t nq4 = (nb - b0 + 3) / 4 < QV_QUADS ? (nb - b0 + 3) / 4 : QV_QUADS, bend = b0 + 4 * nq4 < nb ? b0 + 4 * nq4 : nb;
        /* keys: rows in L1 (ld may be 0, a broadcast row, or negative, rows read backwards), w in L1 too */
        int64_t group = ld > 0 && 8192 / ld > 16 ? 8192 / ld : 16, fit = QV_W / (nq4 * 64) * 4;
        group = group < fit ? group : fit;
        for (int64_t j0 = 0; j0 < n; j0 += group) {
            int64_t nk = n - j0 < group ? n - j0 : group, b = b0;
            /* The weights' pass reads the group's rows first, with little to compute
             * meanwhile: the first column pass fetches the next group's rows ahead
             * (a row's bytes with each key; dense rows only). */
            const uint8_t *rows = v + j0 * ld, *next = rows + nk * ld;
            int64_t npf = ld == nb * (q4 ? 18 : 34) ? (n - j0 - nk < nk ? n - j0 - nk : nk) : 0;
            qaxpy_weights(w, p + j0, ldp, rows, ld, nk, b0, nb, nq4, NQ, q4);
            for (; b + NB <= bend; b += NB, npf = 0) qaxpy_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, NB, q4, next, npf);
            if (NB > 2 && b + 2 <= bend) qaxpy_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, 2, q4, next, npf), b += 2, npf = 0;
            if (b < bend) qaxpy_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, 1, q4, next, npf);
        }
    }
}

#define QAXPY_ROWS(NQ)                                                                             \
    do {                                                                                           \
        if (q4) qaxpy_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, true, scratch);          \
        else qaxpy_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, false, scratch);            \
    } while (0)

static void qaxpy_rows(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                       int64_t Ev, bool q4, void *scratch) {
    for (int i = 0; i < nq; i += 4) {
        switch (nq - i) {
        case 1: QAXPY_ROWS(1); break;
        case 2: QAXPY_ROWS(2); break;
        case 3: QAXPY_ROWS(3); break;
        default: QAXPY_ROWS(4); break;
        }
    }
}

/* ---- values through AVX512-BF16's VDPBF16PS: two keys a product. Per
 * 32-bit lane, the codes of one column of two keys j, j + 1 as bf16 (exact:
 * q8 codes and q4 codes have at most 8 significant bits), and the pair's
 * weights w_jb = p_j · d_jb rounded once to bf16 (VCVTNEPS2BF16), broadcast;
 * each VDPBF16PS adds w_j1 · v_j1 and then w_j · v_j (exact products, two
 * f32 roundings) to 16 columns: 32 multiply-adds an instruction where an
 * FMA does 16, so that per key, 4 rows and 128 values 16 instructions take
 * the FMAs' 32. The weights' rounding (relative 2^-8 each) is the price:
 * attn.h states the bound. q4 codes c (0..15) become the bf16 of c - 8 by
 * one word permute from a table each (VPERMW; the magic number 0x4300 | c,
 * 128 + c, was as fast but left 136 · Σ w to take back, whose rounding
 * depended on how the keys were grouped); q8 codes are widened to f32,
 * whose top 16 bits are then the code's bf16. */
enum { QB_W = 2048 }; /* dwords of weight pairs in the caller's scratch: a group of keys' */
_Static_assert(QV_W * sizeof(float) <= ATTN_QDOT_SCRATCH && QB_W * sizeof(uint32_t) <= ATTN_QDOT_SCRATCH,
               "the weights fit the caller's scratch");

/* The bf16 pairs of weights for rows i < NQ, keys j < n of v (row stride
 * ld), quads g < nq4 of blocks from b0: (p_ij · d_jb | p_i,j+1 · d_j+1,b <<
 * 16) for even j at w[((j/4 · nq4 + g) · 4 + i) · 8 + 2b + j%4/2] (a missing
 * key's weight 0). */
QV_INLINE void qbf_weights(uint32_t *restrict w, const float *p, int64_t ldp, const uint8_t *v, int64_t ld,
                           int64_t n, int64_t b0, int64_t nb, int64_t nq4, const int NQ, const bool q4) {
    __m256i hm = _mm256_setzero_si256(); /* unused: a scale not finite reaches acc as NaN or ±inf */
    for (int64_t j = 0; j < n; j += 4) {
        int NK = n - j < 4 ? (int)(n - j) : 4;
        __mmask8 keys = (__mmask8)((1u << NK) - 1);
        __m512 pw[4] = {_mm512_setzero_ps()}; /* p_ij in lanes 4b + j, every b (rows past NQ: unused) */
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
            pw[i] = _mm512_broadcast_f32x4(NK == 4 ? _mm_loadu_ps(p + i * ldp + j) : _mm_maskz_loadu_ps(keys, p + i * ldp + j));
        for (int64_t g = 0; g < nq4; g++) {
            int64_t b = b0 + 4 * g;
            int nbk = nb - b < 4 ? (int)(nb - b) : 4;
            const uint8_t *at = v + j * ld + b * (q4 ? 18 : 34);
            /* a whole tile (most of them) with the counts as constants: its masks folded away */
            __m512 dk = NK == 4 && nbk == 4 ? tile_scales(at, ld, 4, 4, q4, &hm) : tile_scales(at, ld, NK, nbk, q4, &hm);
            uint32_t *to = w + (j / 4 * nq4 + g) * 32;
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) {
                __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(pw[i], dk));
                _mm256_storeu_si256((__m256i *)(void *)(to + 8 * i), h);
            }
        }
    }
}

/* The codes of a block of keys j (at r0) and j + 1 (at r1) as bf16 pairs:
 * lo columns 0..15 of the block, hi 16..31, key j in each lane's low half
 * (q4: c - 8, looked up by each word's low 4 bits). */
QV_INLINE void pair_codes(__m512i *lo, __m512i *hi, const uint8_t *r0, const uint8_t *r1, const bool q4) {
    if (q4) {
        __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r0 + 2)));
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r1 + 2)));
        __m512i z = _mm512_or_si512(a, _mm512_slli_epi32(b, 16)); /* byte i of each key in each half */
        /* the bf16 of (k & 15) - 8 at word k < 32 (VPERMW reads 5 bits of each index) */
        static const uint16_t bf16_of[32] = {0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
                                             0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
                                             0xc100, 0xc0e0, 0xc0c0, 0xc0a0, 0xc080, 0xc040, 0xc000, 0xbf80,
                                             0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0};
        const __m512i table = _mm512_loadu_si512(bf16_of);
        *lo = _mm512_permutexvar_epi16(z, table);
        *hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(z, 4), table);
        return;
    }
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    __m512i *out[2] = {lo, hi};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r0 + 2 + 16 * h))));
        __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(r1 + 2 + 16 * h))));
        /* a >> 16 | (b & top): each f32's low 16 bits are zero */
        *out[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 16), _mm512_castps_si512(b), top,
                                            0xf8);
    }
}

/* The pair of weights at w in every lane, loaded once (VPBROADCASTD from
 * memory, the load unit's alone) for the two VDPBF16PS of a block's low
 * and high columns: an embedded broadcast in each cost a load each, and
 * the loads (two a cycle), not the products, bound the q4 loop: one core,
 * 2,048 keys in L2, q4 values 4.1 -> 3.7-3.8 ns a key, q8 5.3 -> 4.9-5.2. */
QV_INLINE __m512i pair_weights(const uint32_t *w) {
#if defined(ATTN_INTRINSICS_FROM_SIMDE)
    return _mm512_set1_epi32((int)*w);
#else
    __m512i x;
    __asm__("vpbroadcastd %1, %0" : "=v"(x) : "m"(*w));
    return x;
#endif
}

/* One pair of keys (rows r0, r1 at the block's first byte) into the rows'
 * accumulators a[i][2u], a[i][2u + 1] of the NB blocks: the pair's weights
 * of block u, row i at wp + 2u + 8i (qbf_weights' layout). */
QV_INLINE void qbf_pair(__m512 a[4][8], const uint32_t *wp, const uint8_t *r0, const uint8_t *r1, const int NQ,
                        const int NB, const bool q4) {
#pragma GCC unroll 4
    for (int u = 0; u < NB; u++) {
        __m512i lo, hi;
        pair_codes(&lo, &hi, r0 + u * (q4 ? 18 : 34), r1 + u * (q4 ? 18 : 34), q4);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512i wv = pair_weights(wp + 2 * u + 8 * i);
            a[i][2 * u] = _mm512_dpbf16_ps(a[i][2 * u], (__m512bh)lo, (__m512bh)wv);
            a[i][2 * u + 1] = _mm512_dpbf16_ps(a[i][2 * u + 1], (__m512bh)hi, (__m512bh)wv);
        }
    }
}

/* Rows i < NQ, the NB blocks from block b, keys j < n in pairs (a lone last
 * key paired with itself under a zero weight), weights w as qbf_weights
 * laid them out from block b0; with each pair, its bytes of next fetched
 * into L1 (npf rows of it). The NB blocks lie in one quad (b - b0 is a
 * multiple of NB, NB a power of 2), so that their weights are a constant
 * offset apart. Whole tiles of 4 keys go first, two pairs an iteration:
 * every load is then the tile's weights or rows at a constant offset,
 * where the pair-at-a-time loop spent as many scalar instructions
 * computing addresses as vector ones computing (on Zen 5 the front end,
 * not the VDPBF16PS, limited it). The order of the products into each
 * accumulator is the pairs' order either way: the same bits. */
QV_INLINE void qbf_block(float *acc, const uint32_t *restrict w, const uint8_t *v, int64_t ld, int64_t n,
                         int64_t Ev, int64_t b, int64_t b0, int64_t nq4, const int NQ, const int NB, const bool q4,
                         const uint8_t *next, int64_t npf) {
    __m512 a[4][8] = {{_mm512_setzero_ps()}}; /* (rows, blocks past NQ, NB: unused) */
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int u = 0; u < NB; u++) {
            a[i][2 * u] = _mm512_loadu_ps(acc + i * Ev + 32 * (b + u));
            a[i][2 * u + 1] = _mm512_loadu_ps(acc + i * Ev + 32 * (b + u) + 16);
        }
    const uint32_t *wt = w + (b - b0) / 4 * 32 + 2 * ((b - b0) % 4); /* block b's pairs of weights in tile 0 */
    const uint8_t *r = v + b * (q4 ? 18 : 34);                        /* block b of key 0 */
    int64_t j = 0;
    for (; j + 4 <= n; j += 4, r += 4 * ld, wt += nq4 * 32) {
        if (j < npf)
            for (int64_t o = 0; o < 4 * ld; o += 64) _mm_prefetch((const char *)(next + j * ld + o), _MM_HINT_T0);
        qbf_pair(a, wt, r, r + ld, NQ, NB, q4);
        qbf_pair(a, wt + 1, r + 2 * ld, r + 3 * ld, NQ, NB, q4);
    }
    for (; j < n; j += 2, r += 2 * ld) { /* the last 1-3 keys */
        if (j < npf)
            for (int64_t o = 0; o < (j + 1 < n ? 2 : 1) * ld; o += 64)
                _mm_prefetch((const char *)(next + j * ld + o), _MM_HINT_T0);
        qbf_pair(a, wt + (j >> 1 & 1), r, j + 1 < n ? r + ld : r, NQ, NB, q4);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 8
        for (int t = 0; t < 2 * NB; t++) _mm512_storeu_ps(acc + i * Ev + 32 * b + 16 * t, a[i][t]);
}

/* All Ev columns for NQ rows, as qaxpy_nq passes over them (groups of an
 * even count of keys). */
QV_INLINE void qbf_nq(float *acc, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n, int64_t Ev,
                      const int NQ, const bool q4, uint32_t *restrict w) {
    const int NB = NQ <= 2 ? 4 : 2;
    int64_t nb = Ev / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += 4 * QV_QUADS) {
        int64_t nq4 = (nb - b0 + 3) / 4 < QV_QUADS ? (nb - b0 + 3) / 4 : QV_QUADS, bend = b0 + 4 * nq4 < nb ? b0 + 4 * nq4 : nb;
        int64_t group = ld > 0 && 8192 / ld > 16 ? 8192 / ld / 4 * 4 : 16, fit = QB_W / (nq4 * 32) * 4;
        group = group < fit ? group : fit;
        for (int64_t j0 = 0; j0 < n; j0 += group) {
            int64_t nk = n - j0 < group ? n - j0 : group, b = b0;
            const uint8_t *rows = v + j0 * ld, *next = rows + nk * ld;
            int64_t npf = ld == nb * (q4 ? 18 : 34) ? (n - j0 - nk < nk ? n - j0 - nk : nk) : 0;
            qbf_weights(w, p + j0, ldp, rows, ld, nk, b0, nb, nq4, NQ, q4);
            for (; b + NB <= bend; b += NB, npf = 0) qbf_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, NB, q4, next, npf);
            if (NB > 2 && b + 2 <= bend) qbf_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, 2, q4, next, npf), b += 2, npf = 0;
            if (b < bend) qbf_block(acc, w, rows, ld, nk, Ev, b, b0, nq4, NQ, 1, q4, next, npf);
        }
    }
}

#define QBF_ROWS(NQ)                                                                               \
    do {                                                                                           \
        if (q4) qbf_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, true, scratch);            \
        else qbf_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, false, scratch);              \
    } while (0)

static void qbf_rows(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n, int64_t Ev,
                     bool q4, void *scratch) {
    for (int i = 0; i < nq; i += 4) {
        switch (nq - i) {
        case 1: QBF_ROWS(1); break;
        case 2: QBF_ROWS(2); break;
        case 3: QBF_ROWS(3); break;
        default: QBF_ROWS(4); break;
        }
    }
}

/* Keys as above; values with f32 FMAs (AVX512-VNNI without AVX512-BF16). */
const attn_qdot_kernels attn_qdot_avx512vnni = {
    .name = "int8_avx512vnni",
    .f32_set = "avx512",
    .q8_bias = 128,
    .q4_bias = 8,
    .dot = qdot_rows,
    .axpy = qaxpy_rows,
    .groups = &attn_qdot_groups_avx512vnni,
    .value_dot = "f32_avx512",
    .value_group = 1,
    .quantize = qrows_quantize,
};

/* The same keys; values through VDPBF16PS (the CPU has AVX512-BF16 too). */
const attn_qdot_kernels attn_qdot_avx512vnni_bf16 = {
    .name = "int8_avx512vnni",
    .f32_set = "avx512",
    .q8_bias = 128,
    .q4_bias = 8,
    .dot = qdot_rows,
    .axpy = qbf_rows,
    .groups = &attn_qdot_groups_avx512vnni,
    .value_dot = "bf16_avx512bf16",
    .value_group = 2,
    .quantize = qrows_quantize,
};

/* The same keys; values by integer dot products too (decode_values_avx512.c). */
const attn_qdot_kernels attn_qdot_avx512vnni_int8 = {
    .name = "int8_avx512vnni",
    .f32_set = "avx512",
    .q8_bias = 128,
    .q4_bias = 8,
    .dot = qdot_rows,
    .axpy = attn_qvalues_int8_avx512vnni,
    .groups = &attn_qdot_groups_avx512vnni,
    .value_dot = "int8_avx512vnni",
    .value_group = 16,
    .quantize = qrows_quantize,
};
#endif
