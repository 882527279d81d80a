/* decode_values_avx512.c -- the values of decode over q8/q4 rows by integer
 * dot products (AVX512-VNNI's VPDPBUSD; qdot.h's axpy, value_dot
 * "int8_avx512vnni"): acc[i] += Σ_j p_ij · v_j, block b of v_j being d_jb
 * times its codes.
 *
 * The arithmetic (tests/test_fast.c checks it bit for bit against a plain
 * C model of it). Keys go in groups of QI_KEYS = 16 from the call's first
 * (the last group may be shorter; decode starts every call on a multiple
 * of 16 positions, so a paged cache gives a contiguous one's groups). For
 * each query row i, group and block b of 32 columns:
 *     w_j  = p_ij · d_jb                      (f32 product)
 *     a    = max_j |w_j|                      (NaN counted as infinity)
 *     σ    = a · (1/127)f, r = 127 / a        (f32; both 0 when a < 2^-100)
 *     w'_j = nearbyint(w_j · r) clamped to ±127, an int8
 *     S_c  = Σ_j w'_j · code_jc                (exact int32; code = the int8
 *                                             q8 code, or the q4 nibble - 8)
 *     acc_c = fma(σ, (float)S_c, acc_c)       (one f32 rounding per group)
 * Each w'_j · σ is off from w_j by at most σ/2 (plus f32's roundings of w
 * and of σ, r), so a column's sum over a group is off by at most
 * (σ/2) · Σ_j |code_jc| plus f32's rounding: attn.h states the bound for
 * a call and docs/accuracy.md measures it.
 *
 * How VPDPBUSD takes it: its lanes sum 4 products of unsigned by signed
 * bytes, so the codes of 4 keys are transposed (one dword a column, its
 * bytes the 4 keys' codes, unsigned: q8 as code + 128, q4 as the nibble)
 * and the weights w' (signed) are the other operand, the 4 keys' weights of
 * the column's block in each dword; the codes' offset comes back as
 * -128 · Σ w' (q8) or -8 · Σ w' (q4), exact integers added once per group.
 * The signed operand is the weights because q4's d is signed (ggml's q4_0:
 * d = max / -8), so w' needs a sign: 7 bits of magnitude, not 8.
 * Per 4 keys, 4 rows and 32 columns: 8 VPDPBUSD (the bf16 pairs take 16
 * VDPBF16PS, f32 32 FMAs), plus the codes' transposition shared by the
 * rows. The columns come out of the transposition in another order within
 * each 64 (a 4 × 4 transpose of 128-bit lanes away from natural): acc is
 * read into that order at the call's start and written back at its end. */
#ifdef ATTN_HAVE_X86_KERNELS
#include "base/base.h"
#include "kernels/qdot.h"

#include "kernels/x86/intrin.h"

#define QDOT_INLINE ATTN_KERNEL_INLINE

#include "kernels/x86/quant_scales.h"

enum { QI_KEYS = 16,  /* keys a group: one weight scale per (row, group, block) */
       QI_QUADS = 4,  /* quads of blocks (128 columns) per pass over the keys: 512 columns */
       QI_ROWS = 4 }; /* query rows a pass */

/* ---- the weights of one group ----------------------------------------
 * Per pass, quad g of blocks and unit h (q8: blocks 2h, 2h + 1 of the
 * quad; q4: the columns' low (0) or high (1) nibbles of all 4 blocks), the
 * vectors the inner loop takes, each in the 128-bit lanes of the columns
 * of one block (q8: blocks 2h, 2h, 2h + 1, 2h + 1; q4: blocks 0 .. 3):
 *   P[g][h][i]   w' of row i, dword t of a lane the 4 keys of tile t
 *                (key j of the tile in byte j)
 *   sg[g][h][i]  σ, and cr[g][h][i] the codes' offset (-128 or -8) · Σ w'. */
typedef struct qi_group {
    __m512i P[QI_QUADS][2][QI_ROWS];
    __m512 sg[QI_QUADS][2][QI_ROWS];
    __m512i cr[QI_QUADS][2][QI_ROWS];
} qi_group;

/* A pass's group and its accumulators F (qi_nq): 14 KiB of the caller's
 * scratch (qdot.h's ATTN_QDOT_SCRATCH), not of its stack. */
typedef struct qi_scratch {
    qi_group gr;
    __m512 F[QI_QUADS * 2 * QI_ROWS * 4];
} qi_scratch;
_Static_assert(sizeof(qi_scratch) <= ATTN_QDOT_SCRATCH, "a pass's group and accumulators fit the caller's scratch");

/* Max over each 128-bit lane's 4 lanes, in all 4. */
QDOT_INLINE __m512 lane4_max(__m512 x) {
    x = _mm512_max_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_max_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Sum over each 128-bit lane's 4 lanes, in all 4. */
QDOT_INLINE __m512i lane4_sum(__m512i x) {
    x = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Dword t of each 128-bit lane of x, in all 4 of the lane. */
QDOT_INLINE __m512i lane4_dword(__m512i x, int t) {
    switch (t) {
    case 0: return _mm512_shuffle_epi32(x, 0x00);
    case 1: return _mm512_shuffle_epi32(x, 0x55);
    case 2: return _mm512_shuffle_epi32(x, 0xaa);
    default: return _mm512_shuffle_epi32(x, 0xff);
    }
}

/* The group of nk keys at v (row stride ld; T = its tiles of 4): its
 * weights for rows i < NQ of p (row stride ldp), quads g < nq4 from block
 * b0 (nb blocks in a row). A quad whose scales are not all finite gets
 * σ = NaN: its columns' sums become NaN. */
QDOT_INLINE void qi_weights(qi_group *restrict gr, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t nk,
                            int64_t b0, int64_t nb, int64_t nq4, const int NQ, const bool q4, const int T,
                            const bool whole) {
    const __m512 tiny = _mm512_set1_ps(0x1p-100f);
    __m512 pw[QI_KEYS / 4][QI_ROWS] = {{_mm512_setzero_ps()}}; /* p_ij in lanes 4b + j, every b (past T, NQ: unused) */
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        int NK = nk - 4 * t < 4 ? (int)(nk - 4 * t) : 4;
        __mmask8 keys = (__mmask8)((1u << NK) - 1);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) pw[t][i] = _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(keys, p + i * ldp + 4 * t));
    }
    for (int64_t g = 0; g < nq4; g++) {
        int64_t b = b0 + 4 * g;
        int nbk = whole || nb - b >= 4 ? 4 : (int)(nb - b);
        __m256i hm = _mm256_setzero_si256();
        __m512 dk[QI_KEYS / 4] = {_mm512_setzero_ps()};
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            int NK = whole || nk - 4 * t >= 4 ? 4 : (int)(nk - 4 * t);
            dk[t] = tile_scales(v + 4 * t * ld + b * (q4 ? 18 : 34), ld, NK, nbk, q4, &hm);
        }
        /* (|d| as f16 bits, at most 0x7fff: 0x7c00 and up not finite) */
        bool finite = _mm256_movemask_epi8(_mm256_cmpgt_epi16(hm, _mm256_set1_epi16(0x7bff))) == 0;
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) { /* w, its largest |w| per block, σ and 1/σ, w' */
            __m512 w[QI_KEYS / 4] = {_mm512_setzero_ps()}, a = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                w[t] = _mm512_mul_ps(pw[t][i], dk[t]);
                a = _mm512_max_ps(a, _mm512_abs_ps(w[t]));
            }
            a = lane4_max(a);
            __mmask16 some = _mm512_cmp_ps_mask(a, tiny, _CMP_GE_OQ);
            __m512 sg = _mm512_maskz_mul_ps(some, a, _mm512_set1_ps(1.0f / 127));
            __m512 r = _mm512_maskz_div_ps(some, _mm512_set1_ps(127), a);
            __m512i c[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) /* |w · r| <= 127 (1 + 2^-23): at most 127 once rounded */
                c[t] = t < T ? _mm512_cvtps_epi32(_mm512_mul_ps(w[t], r)) : _mm512_setzero_si512();
            __m512i P = _mm512_packs_epi16(_mm512_packs_epi32(c[0], c[1]), _mm512_packs_epi32(c[2], c[3]));
            __m512i off = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(q4 ? 8 : (char)-128), P);
            __m512i cr = _mm512_sub_epi32(_mm512_setzero_si512(), lane4_sum(off));
            __m512 s = finite ? sg : _mm512_set1_ps(NAN);
            if (q4) gr->P[g][0][i] = gr->P[g][1][i] = P, gr->sg[g][0][i] = gr->sg[g][1][i] = s, gr->cr[g][0][i] = gr->cr[g][1][i] = cr;
            else { /* blocks 2h, 2h + 1: 128-bit lanes (2h, 2h, 2h + 1, 2h + 1) */
                gr->P[g][0][i] = _mm512_shuffle_i32x4(P, P, _MM_SHUFFLE(1, 1, 0, 0));
                gr->P[g][1][i] = _mm512_shuffle_i32x4(P, P, _MM_SHUFFLE(3, 3, 2, 2));
                gr->sg[g][0][i] = _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(1, 1, 0, 0));
                gr->sg[g][1][i] = _mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(3, 3, 2, 2));
                gr->cr[g][0][i] = _mm512_shuffle_i32x4(cr, cr, _MM_SHUFFLE(1, 1, 0, 0));
                gr->cr[g][1][i] = _mm512_shuffle_i32x4(cr, cr, _MM_SHUFFLE(3, 3, 2, 2));
            }
        }
    }
}

/* ---- the codes --------------------------------------------------------
 * X[j] (key j's bytes, 16 a 128-bit lane) into K[m]: lane L, dword c =
 * byte 4m + c of lane L of the 4 keys, key j in byte j. */
QDOT_INLINE void transpose_bytes(__m512i K[4], const __m512i X[4]) {
    __m512i u0 = _mm512_unpacklo_epi8(X[0], X[1]), u1 = _mm512_unpackhi_epi8(X[0], X[1]);
    __m512i u2 = _mm512_unpacklo_epi8(X[2], X[3]), u3 = _mm512_unpackhi_epi8(X[2], X[3]);
    K[0] = _mm512_unpacklo_epi16(u0, u2), K[1] = _mm512_unpackhi_epi16(u0, u2);
    K[2] = _mm512_unpacklo_epi16(u1, u3), K[3] = _mm512_unpackhi_epi16(u1, u3);
}

/* The codes of unit h of the quad from block b (nbk blocks) for the NK keys
 * at k (row stride ld), unsigned, as K[m] lanes L: q8 columns 16L + 4m + c
 * of blocks b + 2h, b + 2h + 1 (code + 128), q4 columns 16h + 4m + c of
 * block b + L (the nibble). Missing keys and blocks read as zeros (their
 * weights are zero). */
QDOT_INLINE void qi_codes(__m512i K[4], const uint8_t *k, int64_t ld, int NK, int64_t b, int nbk, int h,
                          const bool q4, const bool whole) {
    if (whole) NK = 4, nbk = 4; /* (known where the call is inlined: no tests) */
    __m512i X[4];
    if (q4) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const uint8_t *blk = k + j * ld + b * 18 + 2;
            __m512i x = _mm512_setzero_si512();
            if (j < NK) {
                x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)blk));
                if (nbk > 1) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 18)), 1);
                if (nbk > 2) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 36)), 2);
                if (nbk > 3) x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(blk + 54)), 3);
            }
            X[j] = x;
        }
        transpose_bytes(K, X);
        const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) K[m] = _mm512_and_si512(h ? _mm512_srli_epi16(K[m], 4) : K[m], low);
        return;
    }
    const __m256i flip = _mm256_set1_epi8(-128);
    int lo = 2 * h, n0 = nbk > lo, n1 = nbk > lo + 1;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const uint8_t *blk = k + j * ld + (b + lo) * 34 + 2;
        __m256i x0 = _mm256_setzero_si256(), x1 = _mm256_setzero_si256();
        if (j < NK && n0) x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)blk), flip);
        if (j < NK && n1) x1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 34)), flip);
        X[j] = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
    }
    transpose_bytes(K, X);
}

/* ---- the columns' order -----------------------------------------------
 * F[m] lane L <-> N[L] lane m: a 4 × 4 transpose of 128-bit lanes, its own
 * inverse. In the transposed order F[m] lane L holds the columns the codes'
 * K[m] lane L does; N[L] are 16 natural columns: q8 16L .. of the unit's
 * 64, q4 block L's half h. */
QDOT_INLINE void transpose_lanes(__m512 out[4], const __m512 in[4]) {
    __m512 a = _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(1, 0, 1, 0));
    __m512 b = _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(1, 0, 1, 0));
    __m512 c = _mm512_shuffle_f32x4(in[0], in[1], _MM_SHUFFLE(3, 2, 3, 2));
    __m512 d = _mm512_shuffle_f32x4(in[2], in[3], _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), out[1] = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    out[2] = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)), out[3] = _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1));
}

/* Where natural vector L of unit h of the quad from block b lies in a row
 * of acc (its column), or -1 past the row's nb blocks. */
static inline int64_t unit_column(int64_t b, int64_t nb, int h, int L, const bool q4) {
    int64_t blk = q4 ? b + L : b + 2 * h + L / 2;
    if (blk >= nb) return -1;
    return q4 ? 32 * blk + 16 * h : 32 * blk + 16 * (L % 2);
}

/* acc's rows i < NQ (row stride Ev), the units of quads g < nq4 from block
 * b0, into (store = false) or out of (store = true) F in the transposed
 * order: F[((g · 2 + h) · QI_ROWS + i) · 4 + m]. */
QDOT_INLINE void qi_acc(float *acc, int64_t Ev, __m512 *restrict F, int64_t b0, int64_t nb, int64_t nq4, const int NQ,
                        const bool q4, const bool store) {
    for (int64_t g = 0; g < nq4; g++)
        for (int h = 0; h < 2; h++) {
            int64_t b = b0 + 4 * g;
            if (unit_column(b, nb, h, 0, q4) < 0) continue;
            for (int i = 0; i < NQ; i++) {
                __m512 *f = F + ((g * 2 + h) * QI_ROWS + i) * 4, n[4];
                if (store) transpose_lanes(n, f);
#pragma GCC unroll 4
                for (int L = 0; L < 4; L++) {
                    int64_t col = unit_column(b, nb, h, L, q4);
                    float *to = acc + i * Ev + col;
                    if (store && col >= 0) _mm512_storeu_ps(to, n[L]);
                    if (!store) n[L] = col >= 0 ? _mm512_loadu_ps(to) : _mm512_setzero_ps();
                }
                if (!store) transpose_lanes(f, n);
            }
        }
}

/* The integer sums of unit h of quad g over the group's tiles, rows i < NQ,
 * then F = fma(σ, sum + offset, F). */
QDOT_INLINE void qi_unit(__m512 *restrict F, const qi_group *restrict gr, const uint8_t *v, int64_t ld, int64_t nk, int64_t b,
                         int nbk, int64_t g, int h, const int NQ, const bool q4, const int T, const bool whole) {
    __m512i S[QI_ROWS][4];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) S[i][m] = gr->cr[g][h][i];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        int NK = nk - 4 * t < 4 ? (int)(nk - 4 * t) : 4;
        __m512i K[4];
        qi_codes(K, v + 4 * t * ld, ld, NK, b, nbk, h, q4, whole);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512i w = lane4_dword(gr->P[g][h][i], t);
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) S[i][m] = _mm512_dpbusd_epi32(S[i][m], K[m], w);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) {
        __m512 *f = F + ((g * 2 + h) * QI_ROWS + i) * 4;
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) f[m] = _mm512_fmadd_ps(gr->sg[g][h][i], _mm512_cvtepi32_ps(S[i][m]), f[m]);
    }
}

/* One group of nk keys (T tiles) for the pass's quads. */
QDOT_INLINE void qi_group_pass(__m512 *restrict F, qi_group *restrict gr, const float *p, int64_t ldp, const uint8_t *rows, int64_t ld,
                               int64_t nk, int64_t b0, int64_t nb, int64_t nq4, const int NQ, const bool q4, const int T,
                               const bool whole) {
    qi_weights(gr, p, ldp, rows, ld, nk, b0, nb, nq4, NQ, q4, T, whole);
    for (int64_t g = 0; g < nq4; g++) {
        int64_t b = b0 + 4 * g;
        int nbk = nb - b < 4 ? (int)(nb - b) : 4;
        if (whole) {
            qi_unit(F, gr, rows, ld, nk, b, 4, g, 0, NQ, q4, T, true);
            qi_unit(F, gr, rows, ld, nk, b, 4, g, 1, NQ, q4, T, true);
            continue;
        }
        for (int h = 0; h < 2; h++)
            if (unit_column(b, nb, h, 0, q4) >= 0) qi_unit(F, gr, rows, ld, nk, b, nbk, g, h, NQ, q4, T, false);
    }
}

/* All Ev columns for NQ rows: passes of up to QI_QUADS quads, each over all
 * the keys a group at a time. */
QDOT_INLINE void qi_nq(float *acc, const float *p, int64_t ldp, const uint8_t *v, int64_t ld, int64_t n, int64_t Ev,
                       const int NQ, const bool q4, qi_scratch *restrict sc) {
    int64_t nb = Ev / 32;
    qi_group *restrict gr = &sc->gr;
    __m512 *restrict F = sc->F;
    for (int64_t b0 = 0; b0 < nb; b0 += 4 * QI_QUADS) {
        int64_t nq4 = (nb - b0 + 3) / 4 < QI_QUADS ? (nb - b0 + 3) / 4 : QI_QUADS;
        qi_acc(acc, Ev, F, b0, nb, nq4, NQ, q4, false);
        for (int64_t j0 = 0; j0 < n; j0 += QI_KEYS) {
            int64_t nk = n - j0 < QI_KEYS ? n - j0 : QI_KEYS;
            const uint8_t *rows = v + j0 * ld;
            /* whole groups of whole quads: the loops' bounds known, no tests */
            if (nk == QI_KEYS && nb % 4 == 0) qi_group_pass(F, gr, p + j0, ldp, rows, ld, nk, b0, nb, nq4, NQ, q4, QI_KEYS / 4, true);
            else qi_group_pass(F, gr, p + j0, ldp, rows, ld, nk, b0, nb, nq4, NQ, q4, (int)(nk + 3) / 4, false);
        }
        qi_acc(acc, Ev, F, b0, nb, nq4, NQ, q4, true);
    }
}

#define QI_ROWS_OF(NQ)                                                                             \
    do {                                                                                           \
        if (q4) qi_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, true, scratch);             \
        else qi_nq(acc + i * Ev, p + i * ldp, ldp, v, ld, n, Ev, NQ, false, scratch);               \
    } while (0)

void attn_qvalues_int8_avx512vnni(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld,
                                  int64_t n, int64_t Ev, bool q4, void *scratch) {
    for (int i = 0; i < nq; i += QI_ROWS) {
        switch (nq - i) {
        case 1: QI_ROWS_OF(1); break;
        case 2: QI_ROWS_OF(2); break;
        case 3: QI_ROWS_OF(3); break;
        default: QI_ROWS_OF(4); break;
        }
    }
}
#endif
