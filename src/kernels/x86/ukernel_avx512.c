/* ukernel_avx512.c -- microkernels for AVX-512F (compiled with -mavx512f
 * -mfma): a 6 × 64 register tile, 24 zmm accumulators, and a vector exp2
 * that scales by 2^n with vscalefps. */
#include "base/base.h"
#include "kernels/exp2.h"
#include "kernels/ukernel.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include "kernels/x86/intrin.h"
#include "kernels/x86/exp2_avx512.h"
#include <math.h>
#include <string.h>

enum { MR = 6, VL = 16, NV = 4 };

/* The first n < 16 lanes. Masked loads serve only a row's last, partial
 * vector: whole vectors take plain loads, which stream faster (a masked
 * 512-bit load is slow on some cores even with a full mask). */
static inline __mmask16 lanes_below(int64_t n) { return (__mmask16)((1u << n) - 1); }

/* All four vectors whatever nvec: narrower last strips are not yet written
 * for AVX-512, which needs a core that has it to test and tune them. */
static void qk_avx512(float *s, int64_t lds, const float *q, int64_t ldq, const float *kt,
                      int64_t ldk, int64_t E, int nvec) {
    (void)nvec;
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00, c40 = c00, c41 = c00, c42 = c00, c43 = c00;
    __m512 c50 = c00, c51 = c00, c52 = c00, c53 = c00;
    for (int64_t e = 0; e < E; e++) {
        const float *b = kt + e * ldk;
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        __m512 b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
        __m512 a;
#define ROW(r)                                                                                    \
    a = _mm512_set1_ps(q[r * ldq + e]);                                                           \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                                    \
    c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                                    \
    c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                                    \
    c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
#define STORE(r)                                                                                  \
    _mm512_storeu_ps(s + r * lds, c##r##0);                                                       \
    _mm512_storeu_ps(s + r * lds + 16, c##r##1);                                                  \
    _mm512_storeu_ps(s + r * lds + 32, c##r##2);                                                  \
    _mm512_storeu_ps(s + r * lds + 48, c##r##3);
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
#undef STORE
}

/* o += p · v for NVEC vectors of columns, unrolled by the compiler; p is MR ×
 * keys, element (r, k) at P(r, k): pv reads it by rows, pvt by columns (p
 * stored keys × MR). */
#define PV_ROW(r, k) p[(r) * ldp + (k)]
#define PV_COL(r, k) p[(k) * ldp + (r)]
#define PV_KERNEL(NAME, NVEC, P)                                                                  \
    static void NAME##_##NVEC(float *o, int64_t ldo, const float *p, int64_t ldp,                  \
                              const float *v, int64_t ldv, int64_t keys) {                        \
        __m512 acc[MR][NVEC];                                                                \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) acc[r][j] = _mm512_loadu_ps(o + r * ldo + 16 * j);     \
        for (int64_t k = 0; k < keys; k++) {                                                      \
            __m512 b[NVEC];                                                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) b[j] = _mm512_loadu_ps(v + k * ldv + 16 * j);          \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                            \
                __m512 a = _mm512_set1_ps(P(r, k));                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) acc[r][j] = _mm512_fmadd_ps(a, b[j], acc[r][j]);   \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) _mm512_storeu_ps(o + r * ldo + 16 * j, acc[r][j]);     \
    }
PV_KERNEL(pv_avx512, 1, PV_ROW)
PV_KERNEL(pv_avx512, 2, PV_ROW)
PV_KERNEL(pv_avx512, 3, PV_ROW)
PV_KERNEL(pv_avx512, 4, PV_ROW)
PV_KERNEL(pvt_avx512, 1, PV_COL)
PV_KERNEL(pvt_avx512, 2, PV_COL)
PV_KERNEL(pvt_avx512, 3, PV_COL)
PV_KERNEL(pvt_avx512, 4, PV_COL)

/* NAME(..., nvec): the kernel unrolled for nvec vectors of columns. */
#define PV_DISPATCH(NAME)                                                                         \
    static void NAME(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v,           \
                     int64_t ldv, int64_t keys, int nvec) {                                       \
        switch (nvec) {                                                                           \
        case 1: NAME##_1(o, ldo, p, ldp, v, ldv, keys); break;                                    \
        case 2: NAME##_2(o, ldo, p, ldp, v, ldv, keys); break;                                    \
        case 3: NAME##_3(o, ldo, p, ldp, v, ldv, keys); break;                                    \
        default: NAME##_4(o, ldo, p, ldp, v, ldv, keys); break;                                   \
        }                                                                                         \
    }
PV_DISPATCH(pv_avx512)
PV_DISPATCH(pvt_avx512)

/* 2^x and the exp pass at f32's accuracy (exp2_avx512.h). */
static inline __m512 exp2_512(__m512 x) { return attn_exp2_512(x, 6); }

static float exp_sum_avx512(float *x, int64_t n, float m) { return attn_exp_sum_512(x, n, m, 6); }

static void scale_avx512(float *y, const float *x, int64_t n, float a) {
    __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), av));
    for (; i < n; i++) y[i] = x[i] * a;
}

static void divide_avx512(float *y, const float *x, int64_t n, float d) {
    __m512 dv = _mm512_set1_ps(d);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm512_storeu_ps(y + i, _mm512_div_ps(_mm512_loadu_ps(x + i), dv));
    for (; i < n; i++) y[i] = x[i] / d;
}

static void softmax_grad_avx512(float *p, float *ds, int64_t n, float lse, float D) {
    __m512 mv = _mm512_set1_ps(lse), dv = _mm512_set1_ps(D), log2e = _mm512_set1_ps(ATTN_LOG2E);
    for (int64_t i = 0; i < n; i += VL) {
        __m512 y = exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p + i), mv), log2e));
        _mm512_storeu_ps(p + i, y);
        _mm512_storeu_ps(ds + i, _mm512_mul_ps(y, _mm512_sub_ps(_mm512_loadu_ps(ds + i), dv)));
    }
}

/* A 16 × 16 transpose in registers: pairs, then 4 × 4 blocks within each
 * 128-bit lane, then the lanes themselves. */
static void transpose16_avx512(float *kt, int64_t ld, const float *k, int64_t rs, int nk, int64_t E) {
    for (int64_t e0 = 0; e0 < E; e0 += 16) {
        int64_t ne = E - e0 < 16 ? E - e0 : 16;
        __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            r[c] = c >= nk     ? _mm512_setzero_ps()
                   : ne == 16 ? _mm512_loadu_ps(k + c * rs + e0)
                              : _mm512_maskz_loadu_ps(lanes_below(ne), k + c * rs + e0);
#pragma GCC unroll 8
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < 16; i += 4) { /* u[i + j]: column 4L + j of rows i..i+3, in lane L */
            u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
            u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
            u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
            u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512 v = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v2 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
            __m512 w = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), w2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
            __m512 col[4] = {_mm512_shuffle_f32x4(v, w, 0x88), _mm512_shuffle_f32x4(v2, w2, 0x88),
                             _mm512_shuffle_f32x4(v, w, 0xDD), _mm512_shuffle_f32x4(v2, w2, 0xDD)};
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) /* column 4l + j of the block */
                if (4 * l + j < ne) _mm512_storeu_ps(kt + (e0 + 4 * l + j) * ld, col[l]);
        }
    }
}

static float absmax_avx512(const float *x, int64_t n) {
    __m512 big = _mm512_setzero_ps(), sign = _mm512_set1_ps(-0.0f);
    __mmask16 bad = 0;
    for (int64_t i = 0; i < n; i += VL) {
        __m512 v = n - i >= VL ? _mm512_loadu_ps(x + i) : _mm512_maskz_loadu_ps(lanes_below(n - i), x + i);
        /* x - x is 0 for finite x and NaN for NaN or inf. */
        bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ);
        big = _mm512_max_ps(_mm512_andnot_ps(sign, v), big);
    }
    return bad ? -1.0f : _mm512_reduce_max_ps(big);
}

static void mask_bool_avx512(float *s, const unsigned char *m, int64_t n) {
    __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += VL) {
        __mmask16 k = n - i >= VL ? (__mmask16)0xffff : lanes_below(n - i);
        __m128i b8 = n - i >= VL ? _mm_loadu_si128((const __m128i *)(const void *)(m + i)) : _mm_maskz_loadu_epi8(k, m + i);
        __m512i bytes = _mm512_cvtepu8_epi32(b8);
        __mmask16 off = _mm512_mask_cmpeq_epi32_mask(k, bytes, _mm512_setzero_si512());
        if (k == 0xffff) _mm512_storeu_ps(s + i, _mm512_mask_blend_ps(off, _mm512_loadu_ps(s + i), ninf));
        else _mm512_mask_storeu_ps(s + i, off, ninf);
    }
}

static bool mask_add_avx512(float *s, const float *m, int64_t n) {
    __mmask16 bad = 0;
    __m512 pinf = _mm512_set1_ps(INFINITY);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        __m512 mv = _mm512_loadu_ps(m + i);
        bad |= _mm512_cmp_ps_mask(mv, mv, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(mv, pinf, _CMP_EQ_OQ);
        _mm512_storeu_ps(s + i, _mm512_add_ps(mv, _mm512_loadu_ps(s + i)));
    }
    if (i < n) {
        __mmask16 k = lanes_below(n - i);
        __m512 mv = _mm512_maskz_loadu_ps(k, m + i);
        bad |= _mm512_mask_cmp_ps_mask(k, mv, mv, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(k, mv, pinf, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(s + i, k, _mm512_add_ps(mv, _mm512_maskz_loadu_ps(k, s + i)));
    }
    return !bad;
}

static float max_avx512(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += VL) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    return _mm512_reduce_max_ps(m);
}

/* The decode kernels (decode_rows.h) over AVX-512 vectors. */
static inline __m512 widen16_vec(__m256i h, bool f16) {
    return f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Values i .. i+15 of a q8, q4 or q4_1 row (i a multiple of 16: within
 * one block of 32), widened as widen_quant_avx512.c widens them: code · d
 * exact (q4_1: then + m, one rounding). */
static inline __m512 quant_vec(const uint8_t *row, int64_t i, attn_dtype format) {
    int64_t bytes = format == ATTN_Q8 ? ATTN_Q8_BLOCK_BYTES : format == ATTN_Q4 ? ATTN_Q4_BLOCK_BYTES : ATTN_Q4_1_BLOCK_BYTES;
    const uint8_t *b = row + i / 32 * bytes;
    uint16_t h;
    memcpy(&h, b, 2);
    __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
    if (format == ATTN_Q8)
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2 + i % 32)))), d);
    /* q4 and q4_1: value i in the low 4 bits of byte i, i + 16 in the high
     * 4. The 16 values (code - 8) · d, or code · d + m, in a table, each
     * rounded as widening rounds it, looked up by VPERMPS, which reads the
     * low 4 bits of each lane's index: the low nibble as it lies, the high
     * one shifted down. */
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table;
    if (format == ATTN_Q4) {
        table = _mm512_mul_ps(_mm512_sub_ps(codes, _mm512_set1_ps(8)), d);
    } else {
        memcpy(&h, b + 2, 2);
        table = _mm512_add_ps(_mm512_mul_ps(codes, d), _mm512_cvtph_ps(_mm256_set1_epi16((short)h)));
        b += 2;
    }
    __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + 2)));
    return _mm512_permutexvar_ps(i % 32 ? _mm512_srli_epi32(c, 4) : c, table);
}

/* 16 fp8 bytes (decode_rows.h) read as halves and widened
 * by vcvtph2ps, exact whatever MXCSR says: e5m2 is a half's top byte;
 * e4m3 the byte sign-extended and shifted left by 7 (t: bits 15 and 14
 * the sign S, 13-7 the code's EEEE.MMM), bit 14 then cleared (2^-8 times
 * its value). For values (`values`) bit 14 is instead t's bit 14 xor that
 * of t + 0x80, which differ only where EEEE.MMM is all ones and the add
 * carries into bit 14: clear for every code but NaN, set there (the
 * half's exponent all ones: NaN), in one vpternlogd. */
static inline __m512 fp8_vec(__m128i b, attn_dtype format, bool values) {
    if (format == ATTN_E5M2) return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
    __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
    if (values) /* t ^ ((t + 0x80) & 0x4000) */
        return _mm512_cvtph_ps(_mm256_ternarylogic_epi32(t, _mm256_add_epi16(t, _mm256_set1_epi16(0x80)),
                                                         _mm256_set1_epi16(0x4000), 0x78));
    return _mm512_cvtph_ps(_mm256_and_si256(t, _mm256_set1_epi16((short)0xbfff)));
}

/* Horizontal sums by halves: lanes l and l + 8 first, then l and l + 4 of
 * those, then l and l + 2, then the last two; hsum512_group makes the same
 * sums for 16 vectors at once. */
static inline float hsum512(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/* Lanes 0-7: a[l] + a[l + 8]; lanes 8-15: b[l] + b[l + 8]. */
static inline __m512 fold512(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
}

/* The sums of 16 vectors, given as 8 folded pairs h[p] = fold512(slot p,
 * slot p + 8): 128-bit quarters of pairs p and p + 4 (0x88 takes quarters
 * 0 and 2, 0xdd 1 and 3), then 64-bit halves of p and p + 2, then
 * neighbouring floats, which leaves in lane t the sum of slot
 * {0,2,1,3,8,10,9,11,4,6,5,7,12,14,13,15}[t]; then the lanes are put in
 * key order for blocks of kb keys (decode_rows.h, dot_rows_nq): lane t
 * holds key t's sum. */
static inline __m512 hsum512_group(const __m512 *h, int kb) {
    static const int32_t by2[16] = {0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15};
    static const int32_t by4[16] = {0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15};
    __m512 c[4], d[2];
    for (int p = 0; p < 4; p++)
        c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(h[p], h[p + 4], 0x88), _mm512_shuffle_f32x4(h[p], h[p + 4], 0xdd));
    for (int p = 0; p < 2; p++) {
        __m512d x = _mm512_castps_pd(c[p]), y = _mm512_castps_pd(c[p + 2]);
        d[p] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
    return _mm512_permutexvar_ps(_mm512_loadu_si512(kb == 4 ? by4 : by2), e);
}

#define V __m512
#define V_QUANT(row, i, format) quant_vec(row, i, format)
#define V_FP8(b, format, values) fp8_vec(_mm_loadu_si128((const __m128i *)(const void *)(b)), format, values)
#define V_FP8N(b, n, format, values) fp8_vec(_mm_maskz_loadu_epi8(lanes_below(n), b), format, values)
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_LOADN(p, n) _mm512_maskz_loadu_ps(lanes_below(n), p)
#define V_STOREN(p, v, n) _mm512_mask_storeu_ps(p, lanes_below(n), v)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_WIDEN(h, f16) widen16_vec(_mm256_loadu_si256((const __m256i *)(const void *)(h)), f16)
#define V_WIDENN(h, n, f16) widen16_vec(_mm256_maskz_loadu_epi16(lanes_below(n), h), f16)
#define V_ABSMAX2(a, b) _mm512_range_ps(a, b, 0x0b) /* the larger magnitude, sign cleared */
#define VBAD __mmask16
#define V_BAD_NONE 0
#define V_BAD_ADD(bad, x) (bad |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
#define V_BAD_ANY(bad) ((bad) != 0)
#define V_HSUM(v) hsum512(v)
#define V_FOLD(a, b) fold512(a, b)
/* Keys at once in dot_rows: one, for every row count. Four keys at once
 * (their sums by the shuffle tree) took 0.9x the time of one at a time with
 * the keys in L2 or L3, but 1.5-2x with them streamed from memory (3 to 8
 * query rows, Zen 4; docs/performance.md): the four rows' vectors loaded
 * in turn defeat the prefetchers, and a decode step's keys come from
 * memory. (The same bits either way.) */
#define DOT_KB(nq) 0
/* fp8 keys, half the bytes of f16 rows (128 for d = 128), go four at a
 * time (two for more than 4 rows, whose accumulators fill the registers):
 * their sums by the shuffle tree cost less than one hsum per key and row,
 * and no slower from memory (docs/performance.md). */
#define DOT_KB_FP8(nq) ((nq) <= 4 ? 4 : 2)
#ifdef ATTN_INTRINSICS_FROM_SIMDE
#define V_KEEP(x) ((void)0)
#else /* one load of a key vector for all its uses (GCC would fold it into each) */
#define V_KEEP(x) __asm__("" : "+v"(x))
#endif
#define V_HSUM_GROUP(h, kb) hsum512_group(h, kb)
#define V_HMAX(v) _mm512_reduce_max_ps(v)
/* 32 zmm registers: rows × columns accumulators, the value vectors, the
 * weights; dot_rows takes all 8 rows of a decode item at once. */
#define AXPY_CB(nq) ((nq) <= 2 ? 8 : 4)
#define DECODE_NQ 8
#include "kernels/x86/decode_rows.h"

/* Half floats by vcvtph2ps; bfloat16 is the top half of an f32. */
static void widen16_avx512(float *dst, const uint16_t *src, int64_t n, bool f16) {
    for (int64_t i = 0; i < n; i += VL) {
        __m256i h = n - i >= VL ? _mm256_loadu_si256((const __m256i *)(const void *)(src + i))
                                : _mm256_maskz_loadu_epi16(lanes_below(n - i), src + i);
        __m512 f = f16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        if (n - i >= VL) _mm512_storeu_ps(dst + i, f);
        else _mm512_mask_storeu_ps(dst + i, lanes_below(n - i), f);
    }
}

static inline __m512 softcap_512(__m512 x, __m512 k, __m512 cap, __m512 r) {
    __m512 one = _mm512_set1_ps(1.0f), ax = _mm512_abs_ps(x);
    __m512 t = exp2_512(_mm512_mul_ps(k, ax));
    __m512 y = _mm512_mul_ps(cap, _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t)));
    /* |x| small beside the cap: tanh's series, where 1 - t would cancel */
    __m512 a = _mm512_mul_ps(ax, r), ac = _mm512_max_ps(a, _mm512_set1_ps(0x1p-30f));
    __m512 w = _mm512_mul_ps(ac, ac);
    __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(ATTN_SOFTCAP_SMALL), _CMP_LT_OQ);
    y = _mm512_mask_mul_ps(y, small, ax, ATTN_SOFTCAP_SERIES(_mm512_fmadd_ps, _mm512_set1_ps, w));
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign)); /* the sign of x */
}

static float softcap_avx512(float *s, int64_t n, float cap) {
    __m512 k = _mm512_set1_ps(-2 * ATTN_LOG2E / cap), c = _mm512_set1_ps(cap), r = _mm512_set1_ps(1 / cap);
    __m512 big = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        __m512 y = softcap_512(_mm512_loadu_ps(s + i), k, c, r);
        _mm512_storeu_ps(s + i, y);
        big = _mm512_max_ps(y, big); /* a NaN y keeps big, as max_avx512 */
    }
    if (i < n) {
        __mmask16 m = lanes_below(n - i);
        __m512 y = softcap_512(_mm512_maskz_loadu_ps(m, s + i), k, c, r);
        _mm512_mask_storeu_ps(s + i, m, y);
        big = _mm512_mask_max_ps(big, m, y, big);
    }
    return _mm512_reduce_max_ps(big);
}

static void alibi_avx512(float *s, int64_t n, float slope, int64_t d0) {
    __m512i d = _mm512_add_epi32(_mm512_set1_epi32((int)d0),
                                 _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512 m = _mm512_set1_ps(slope);
    for (int64_t i = 0; i < n; i += VL, d = _mm512_add_epi32(d, _mm512_set1_epi32(VL))) {
        __m512 bias = _mm512_mul_ps(m, _mm512_cvtepi32_ps(_mm512_abs_epi32(d)));
        if (n - i >= VL) _mm512_storeu_ps(s + i, _mm512_sub_ps(_mm512_loadu_ps(s + i), bias));
        else _mm512_mask_storeu_ps(s + i, lanes_below(n - i), _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes_below(n - i), s + i), bias));
    }
}

static void exp2_avx512(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm512_storeu_ps(y + i, exp2_512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 k = lanes_below(n - i);
        _mm512_mask_storeu_ps(y + i, k, exp2_512(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

const attn_ukernels attn_ukernels_avx512 = {
    .name = "avx512",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .qk = qk_avx512,
    .pv = pv_avx512,
    .pvt = pvt_avx512,
    .exp_sum = exp_sum_avx512,
    .softmax_grad = softmax_grad_avx512,
    .scale = scale_avx512,
    .divide = divide_avx512,
    .transpose16 = transpose16_avx512,
    .absmax = absmax_avx512,
    .mask_bool = mask_bool_avx512,
    .mask_add = mask_add_avx512,
    .max = max_avx512,
    .dot_rows = dot_rows,
    .axpy_rows = axpy_rows,
    .dot_rows16 = dot_rows16,
    .axpy_rows16 = axpy_rows16,
    .widen16 = widen16_avx512,
    .widen_quant = attn_widen_quant_avx512,
    .dot_rows_q = dot_rows_q,
    .axpy_rows_q = axpy_rows_q,
    .dot_rows_fp8 = dot_rows_fp8,
    .axpy_rows_fp8 = axpy_rows_fp8,
    .dot_rows_list = dot_rows_list,
    .axpy_rows_list = axpy_rows_list,
    .dot_rows_heads = dot_rows_heads,
    .axpy_rows_heads = axpy_rows_heads,
    .softcap = softcap_avx512,
    .alibi = alibi_avx512,
    .exp2 = exp2_avx512,
    .dgemm = attn_dgemm_avx512_8x24,
    .dgemm_mr = 8,
    .dgemm_nr = 24,
    .sgemm = attn_sgemm_avx512_12x32,
    .sgemm_mr = 12,
    .sgemm_nr = 32,
};
#endif
