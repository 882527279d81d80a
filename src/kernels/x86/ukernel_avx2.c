/* ukernel_avx2.c -- microkernels for AVX2 + FMA + F16C (compiled with -mavx2
 * -mfma -mf16c): a 6 × 16 register tile, 12 ymm accumulators, and a vector exp2
 * that applies 2^n as a power of two built in the exponent bits. */
#include "base/base.h"
#include "kernels/exp2.h"
#include "kernels/ukernel.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include <immintrin.h>
#include <math.h>
#include <string.h>

enum { MR = 6, VL = 8, NV = 2 };

/* One vector of columns: a strip's last 8 keys, in the same order as the
 * two-vector kernel below. */
static void qk1_avx2(float *s, int64_t lds, const float *q, int64_t ldq, const float *kt, int64_t ldk, int64_t E) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (int64_t e = 0; e < E; e++) {
        __m256 b = _mm256_loadu_ps(kt + e * ldk);
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + e), b, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + ldq + e), b, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + 2 * ldq + e), b, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + 3 * ldq + e), b, c3);
        c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + 4 * ldq + e), b, c4);
        c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(q + 5 * ldq + e), b, c5);
    }
    _mm256_storeu_ps(s, c0), _mm256_storeu_ps(s + lds, c1), _mm256_storeu_ps(s + 2 * lds, c2);
    _mm256_storeu_ps(s + 3 * lds, c3), _mm256_storeu_ps(s + 4 * lds, c4), _mm256_storeu_ps(s + 5 * lds, c5);
}

static void qk_avx2(float *s, int64_t lds, const float *q, int64_t ldq, const float *kt, int64_t ldk,
                    int64_t E, int nvec) {
    if (nvec == 1) {
        qk1_avx2(s, lds, q, ldq, kt, ldk, E);
        return;
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t e = 0; e < E; e++) {
        __m256 b0 = _mm256_loadu_ps(kt + e * ldk), b1 = _mm256_loadu_ps(kt + e * ldk + 8), a;
#define ROW(r)                                                                                    \
    a = _mm256_broadcast_ss(q + r * ldq + e);                                                     \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                                    \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
#define STORE(r)                                                                                  \
    _mm256_storeu_ps(s + r * lds, c##r##0);                                                       \
    _mm256_storeu_ps(s + r * lds + 8, c##r##1);
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
#undef STORE
}

/* o += p · v (PV: p is MR × keys, element (r, k) at P(r, k)) for NVEC vectors
 * of columns; pv reads p by rows, pvt by columns (p stored keys × MR). */
#define PV_ROW(r, k) (p + (r) * ldp + (k))
#define PV_COL(r, k) (p + (k) * ldp + (r))
#define PV_KERNEL(NAME, NVEC, P)                                                                  \
    static void NAME##_##NVEC(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v,  \
                              int64_t ldv, int64_t keys) {                                        \
        __m256 acc[MR][NVEC];                                                                \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) acc[r][j] = _mm256_loadu_ps(o + r * ldo + 8 * j);      \
        for (int64_t k = 0; k < keys; k++) {                                                      \
            __m256 b[NVEC];                                                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) b[j] = _mm256_loadu_ps(v + k * ldv + 8 * j);           \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                            \
                __m256 a = _mm256_broadcast_ss(P(r, k));                                          \
                _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) acc[r][j] = _mm256_fmadd_ps(a, b[j], acc[r][j]);   \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) _mm256_storeu_ps(o + r * ldo + 8 * j, acc[r][j]);      \
    }
PV_KERNEL(pv_avx2, 1, PV_ROW)
PV_KERNEL(pv_avx2, 2, PV_ROW)
PV_KERNEL(pvt_avx2, 1, PV_COL)
PV_KERNEL(pvt_avx2, 2, PV_COL)

/* NAME(..., nvec): the kernel unrolled for nvec vectors of columns. */
#define PV_DISPATCH(NAME)                                                                         \
    static void NAME(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v,           \
                     int64_t ldv, int64_t keys, int nvec) {                                       \
        if (nvec == 1) NAME##_1(o, ldo, p, ldp, v, ldv, keys);                                    \
        else NAME##_2(o, ldo, p, ldp, v, ldv, keys);                                              \
    }
PV_DISPATCH(pv_avx2)
PV_DISPATCH(pvt_avx2)

/* 2^n for integer-valued n in [-126, 127], built in the exponent field. */
static inline __m256 pow2(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* 2^x as attn_exp2f (kernels/exp2.h): lanes below ATTN_EXP2_LO (-inf
 * included, NaN not) are 0, set by a mask over the result of the clamped x,
 * so that nothing underflows. */
static inline __m256 exp2_256(__m256 x) {
    __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(ATTN_EXP2_LO), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_set1_ps(ATTN_EXP2_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(ATTN_EXP2_HI), x);
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = ATTN_EXP2_POLY(_mm256_fmadd_ps, _mm256_set1_ps, f);
    __m256i ni = _mm256_cvtps_epi32(n);
    /* n <= 127 in every lane (the common case): p · 2^n is one exact
     * scaling. Otherwise (overflow to inf) two halves, each a normal power
     * of two; NaN lanes stay NaN through p. */
    if (_mm256_movemask_ps(_mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_GT_OQ)) == 0)
        return _mm256_andnot_ps(zero, _mm256_mul_ps(p, pow2(ni)));
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_andnot_ps(zero, _mm256_mul_ps(_mm256_mul_ps(p, pow2(n1)), pow2(n2)));
}

/* Horizontal sum and maximum: halves, then quarters, then pairs. */
static inline float hsum256(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

static inline float hmax256(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

static float exp_sum_avx2(float *x, int64_t n, float m) {
    __m256 sum = _mm256_setzero_ps(), mv = _mm256_set1_ps(m), log2e = _mm256_set1_ps(ATTN_LOG2E);
    for (int64_t i = 0; i < n; i += VL) {
        __m256 y = exp2_256(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), log2e));
        _mm256_storeu_ps(x + i, y);
        sum = _mm256_add_ps(sum, y);
    }
    return hsum256(sum);
}

static void scale_avx2(float *y, const float *x, int64_t n, float a) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
    for (; i < n; i++) y[i] = x[i] * a;
}

static void divide_avx2(float *y, const float *x, int64_t n, float d) {
    __m256 dv = _mm256_set1_ps(d);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(x + i), dv));
    for (; i < n; i++) y[i] = x[i] / d;
}

static void softmax_grad_avx2(float *p, float *ds, int64_t n, float lse, float D) {
    __m256 mv = _mm256_set1_ps(lse), dv = _mm256_set1_ps(D), log2e = _mm256_set1_ps(ATTN_LOG2E);
    for (int64_t i = 0; i < n; i += VL) {
        __m256 y = exp2_256(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(p + i), mv), log2e));
        _mm256_storeu_ps(p + i, y);
        _mm256_storeu_ps(ds + i, _mm256_mul_ps(y, _mm256_sub_ps(_mm256_loadu_ps(ds + i), dv)));
    }
}

static float absmax_avx2(const float *x, int64_t n) {
    __m256 big = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        __m256 v = _mm256_loadu_ps(x + i);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
        big = _mm256_max_ps(_mm256_andnot_ps(sign, v), big);
    }
    float best = hmax256(big);
    if (_mm256_movemask_ps(bad)) return -1;
    for (; i < n; i++) {
        if (x[i] - x[i] != 0) return -1;
        float a = x[i] < 0 ? -x[i] : x[i];
        best = a > best ? a : best;
    }
    return best;
}

static void mask_bool_avx2(float *s, const unsigned char *m, int64_t n) {
    int64_t i = 0;
    __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (; i + VL <= n; i += VL) {
        int64_t word;
        memcpy(&word, m + i, 8);
        __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(word));
        __m256 off = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bytes, _mm256_setzero_si256()));
        _mm256_storeu_ps(s + i, _mm256_blendv_ps(_mm256_loadu_ps(s + i), ninf, off));
    }
    for (; i < n; i++)
        if (!m[i]) s[i] = -INFINITY;
}

static bool mask_add_avx2(float *s, const float *m, int64_t n) {
    int64_t i = 0;
    __m256 pinf = _mm256_set1_ps(INFINITY), bad = _mm256_setzero_ps();
    for (; i + VL <= n; i += VL) {
        __m256 mv = _mm256_loadu_ps(m + i);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(mv, mv, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(mv, pinf, _CMP_EQ_OQ)));
        _mm256_storeu_ps(s + i, _mm256_add_ps(mv, _mm256_loadu_ps(s + i)));
    }
    bool ok = !_mm256_movemask_ps(bad);
    for (; i < n; i++) {
        ok &= !(m[i] != m[i] || m[i] == INFINITY);
        s[i] += m[i];
    }
    return ok;
}

static float max_avx2(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += VL) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    return hmax256(m);
}


/* The decode kernels (decode_rows.h) over AVX2 vectors. */
static inline __m256 widen8(const uint16_t *h, bool f16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)h);
    return f16 ? _mm256_cvtph_ps(x) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

static inline __m256 widen8_part(const uint16_t *h, int64_t n, bool f16) {
    uint16_t part[VL] = {0}; /* AVX2 has no masked 16-bit load */
    memcpy(part, h, sizeof(uint16_t) * (size_t)n);
    return widen8(part, f16);
}

static inline __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Lanes 0-3: a[l] + a[l + 4]; lanes 4-7: b[l] + b[l + 4] (hsum256's first step). */
static inline __m256 fold256(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

/* The sums of 8 vectors, given as 4 folded pairs h[p] = fold256(slot p,
 * slot p + 4), in hsum256's order: 64-bit halves of pairs p and p + 2,
 * then neighbouring floats, which leaves in lane t the sum of slot
 * {0,2,1,3,4,6,5,7}[t]; then the lanes are put in key order for blocks of
 * kb keys (decode_rows.h, dot_rows_nq): lane t holds key t's sum. */
static inline __m256 hsum256_group(const __m256 *h, int kb) {
    static const int32_t by2[8] = {0, 4, 2, 6, 1, 5, 3, 7}, by4[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    __m256 c[2];
    for (int p = 0; p < 2; p++) {
        __m256d x = _mm256_castps_pd(h[p]), y = _mm256_castps_pd(h[p + 2]);
        c[p] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    __m256 e = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), _mm256_shuffle_ps(c[0], c[1], 0xdd));
    return _mm256_permutevar8x32_ps(e, _mm256_loadu_si256((const __m256i *)(const void *)(kb == 4 ? by4 : by2)));
}

#define V __m256
/* Values i .. i+7 of a q8, q4 or q4_1 row (i a multiple of 8: within one
 * block of 32), widened as widen_quant_avx2.c widens them: code · d exact
 * (q4_1: then + m, one rounding). */
static inline __m256 quant_vec(const uint8_t *row, int64_t i, attn_dtype format) {
    int64_t bytes = format == ATTN_Q8 ? ATTN_Q8_BLOCK_BYTES : format == ATTN_Q4 ? ATTN_Q4_BLOCK_BYTES : ATTN_Q4_1_BLOCK_BYTES;
    const uint8_t *b = row + i / 32 * bytes;
    uint16_t h;
    memcpy(&h, b, 2);
    __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)h));
    if (format == ATTN_Q8)
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + i % 32)))), d);
    /* value j < 16 in the low 4 bits of byte j, j + 16 in the high 4 */
    const uint8_t *codes = b + (format == ATTN_Q4_1 ? 4 : 2);
    __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(codes + i % 16)));
    c = i % 32 >= 16 ? _mm256_srli_epi32(c, 4) : _mm256_and_si256(c, _mm256_set1_epi32(15));
    if (format == ATTN_Q4) return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8))), d);
    memcpy(&h, b + 2, 2);
    return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c), d), _mm256_cvtph_ps(_mm_set1_epi16((short)h)));
}
#define V_QUANT(row, i, format) quant_vec(row, i, format)
/* 8 fp8 bytes (the low half of b; decode_rows.h) of format e4m3 or e5m2,
 * as keys or values, read as halves, as ukernel_avx512.c's fp8_vec does
 * (there: why). */
static inline __m256 fp8_vec(__m128i b, attn_dtype format, bool values) {
    if (format == ATTN_E5M2) return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), b)); /* byte << 8 */
    __m128i t = _mm_slli_epi16(_mm_cvtepi8_epi16(b), 7);
    if (values) /* t ^ ((t + 0x80) & 0x4000) */
        return _mm256_cvtph_ps(_mm_xor_si128(t, _mm_and_si128(_mm_add_epi16(t, _mm_set1_epi16(0x80)), _mm_set1_epi16(0x4000))));
    return _mm256_cvtph_ps(_mm_and_si128(t, _mm_set1_epi16((short)0xbfff)));
}

static inline __m128i fp8_part(const uint8_t *b, int64_t n) {
    uint8_t part[16] = {0}; /* AVX2 has no masked byte load */
    memcpy(part, b, (size_t)n);
    return _mm_loadu_si128((const __m128i *)(const void *)part);
}
#define V_FP8(b, format, values) fp8_vec(_mm_loadl_epi64((const __m128i *)(const void *)(b)), format, values)
#define V_FP8N(b, n, format, values) fp8_vec(fp8_part(b, n), format, values)
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_LOADN(p, n) _mm256_maskload_ps(p, lanes_below(n))
#define V_STOREN(p, v, n) _mm256_maskstore_ps(p, lanes_below(n), v)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_WIDEN(h, f16) widen8((h), f16)
#define V_WIDENN(h, n, f16) widen8_part((h), n, f16)
#define V_ABSMAX2(a, b) _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), b))
#define VBAD __m256
#define V_BAD_NONE _mm256_setzero_ps()
#define V_BAD_ADD(bad, x) (bad = _mm256_or_ps(bad, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
#define V_BAD_ANY(bad) (_mm256_movemask_ps(bad) != 0)
#define V_HSUM(v) hsum256(v)
#define V_FOLD(a, b) fold256(a, b)
/* Keys at once in dot_rows (16 registers; 1 row: a key at a time). */
#define DOT_KB(nq) ((nq) == 1 ? 0 : (nq) == 2 ? 4 : 2)
/* one load of a key vector for all its uses (GCC would fold it into each) */
#define V_KEEP(x) __asm__("" : "+x"(x))
#define V_HSUM_GROUP(h, kb) hsum256_group(h, kb)
#define V_HMAX(v) hmax256(v)
/* 16 ymm registers: rows × columns accumulators, the value vectors, the weights. */
#define AXPY_CB(nq) ((nq) == 1 ? 8 : (nq) == 2 ? 4 : 2)
#define DECODE_NQ 4
#include "kernels/x86/decode_rows.h"

/* Half floats by F16C's vcvtph2ps; bfloat16 is the top half of an f32. */
static void widen16_avx2(float *dst, const uint16_t *src, int64_t n, bool f16) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, f16 ? _mm256_cvtph_ps(h)
                                      : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        if (f16) dst[i] = _cvtsh_ss(src[i]);
        else memcpy(&dst[i], &b, 4);
    }
}

/* 2^x for x in [-30, 30] (a NaN stays NaN), for soft-capping: n = round(x)
 * by adding and taking away 1.5 · 2^23 + 127 (the sum's low bits then hold
 * n + 127, the exponent field of 2^n), f = x - n exactly, 2^f by the degree-5
 * polynomial, then one exact scaling by 2^n. Cheaper than exp2_256: no
 * round or convert, one scaling, one polynomial step fewer. */
static inline __m256 exp2_within_30(__m256 x) {
    const __m256 shifter = _mm256_set1_ps(0x1.8p23f + 127);
    x = _mm256_min_ps(_mm256_set1_ps(30.0f), _mm256_max_ps(_mm256_set1_ps(-30.0f), x));
    __m256 b = _mm256_add_ps(x, shifter);
    __m256 f = _mm256_sub_ps(x, _mm256_sub_ps(b, shifter));
    __m256 p = ATTN_EXP2_POLY5(_mm256_fmadd_ps, _mm256_set1_ps, f);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(b), 23)));
}

/* cap · tanh(x / cap) = (cap - cap · t) / (1 + t), t = e^(-2x / cap), for
 * either sign of x (t > 1 for x < 0). t is clamped to 2^±30, where the
 * quotient rounds to ±cap anyway. cap · t would overflow for caps past
 * 2^97: those are passed as cap · 2^-32 (exact), the quotient scaled back
 * by up = 2^32; up is 1 otherwise. */
static inline __m256 softcap_256(__m256 x, __m256 k, __m256 cap, __m256 r, __m256 up) {
    __m256 t = exp2_within_30(_mm256_mul_ps(k, x));
    __m256 y = _mm256_div_ps(_mm256_fnmadd_ps(cap, t, cap), _mm256_add_ps(_mm256_set1_ps(1.0f), t));
    y = _mm256_mul_ps(y, up);
    /* |x| small beside the cap: tanh's series, where cap - cap · t would
     * cancel (x · g keeps x's sign) */
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), a = _mm256_mul_ps(ax, r);
    __m256 ac = _mm256_max_ps(a, _mm256_set1_ps(0x1p-30f)), w = _mm256_mul_ps(ac, ac);
    __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(ATTN_SOFTCAP_SMALL), _CMP_LT_OQ);
    return _mm256_blendv_ps(y, _mm256_mul_ps(x, ATTN_SOFTCAP_SERIES(_mm256_fmadd_ps, _mm256_set1_ps, w)), small);
}

static float softcap_avx2(float *s, int64_t n, float cap) {
    float up = cap > 0x1p97f ? 0x1p32f : 1.0f;
    __m256 k = _mm256_set1_ps(-2 * ATTN_LOG2E / cap), c = _mm256_set1_ps(cap / up), r = _mm256_set1_ps(1 / cap);
    __m256 u = _mm256_set1_ps(up);
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    /* Two vectors a step: each one's chain of dependent operations is long
     * (about 50 cycles), and two side by side keep more of them in flight. */
    for (; i + 2 * VL <= n; i += 2 * VL) {
        __m256 y0 = softcap_256(_mm256_loadu_ps(s + i), k, c, r, u);
        __m256 y1 = softcap_256(_mm256_loadu_ps(s + i + VL), k, c, r, u);
        _mm256_storeu_ps(s + i, y0), _mm256_storeu_ps(s + i + VL, y1);
        m0 = _mm256_max_ps(y0, m0), m1 = _mm256_max_ps(y1, m1); /* a NaN y keeps m, as max_avx2 */
    }
    for (; i + VL <= n; i += VL) {
        __m256 y = softcap_256(_mm256_loadu_ps(s + i), k, c, r, u);
        _mm256_storeu_ps(s + i, y);
        m0 = _mm256_max_ps(y, m0);
    }
    if (i < n) {
        __m256i lanes = lanes_below(n - i);
        __m256 y = softcap_256(_mm256_maskload_ps(s + i, lanes), k, c, r, u);
        _mm256_maskstore_ps(s + i, lanes, y);
        m1 = _mm256_max_ps(_mm256_blendv_ps(m1, y, _mm256_castsi256_ps(lanes)), m1);
    }
    return hmax256(_mm256_max_ps(m0, m1));
}

static void alibi_avx2(float *s, int64_t n, float slope, int64_t d0) {
    __m256i d = _mm256_add_epi32(_mm256_set1_epi32((int)d0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 m = _mm256_set1_ps(slope);
    int64_t i = 0;
    for (; i + VL <= n; i += VL, d = _mm256_add_epi32(d, _mm256_set1_epi32(VL)))
        _mm256_storeu_ps(s + i, _mm256_fnmadd_ps(m, _mm256_cvtepi32_ps(_mm256_abs_epi32(d)), _mm256_loadu_ps(s + i)));
    for (; i < n; i++) s[i] -= slope * (float)(d0 + i < 0 ? -(d0 + i) : d0 + i);
}

/* An 8 × 8 transpose in registers: pairs, then 2 × 2 blocks of pairs
 * within each 128-bit lane, then the lanes. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 4; j++)
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20), r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
}

/* kt (E × 16, row stride ld) = the first nk of 16 key rows (stride rs)
 * transposed, zeros past nk: two 8 × 8 blocks per 8 columns of E. */
static void transpose16_avx2(float *kt, int64_t ld, const float *k, int64_t rs, int nk, int64_t E) {
    for (int64_t e0 = 0; e0 < E; e0 += VL) {
        int64_t ne = E - e0 < VL ? E - e0 : VL;
        __m256i part = lanes_below(ne);
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const float *row = k + (8 * half + c) * rs + e0;
                r[c] = 8 * half + c >= nk ? _mm256_setzero_ps() : ne == VL ? _mm256_loadu_ps(row) : _mm256_maskload_ps(row, part);
            }
            transpose8(r);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                if (j < ne) _mm256_storeu_ps(kt + (e0 + j) * ld + 8 * half, r[j]);
        }
    }
}

static void exp2_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) _mm256_storeu_ps(y + i, exp2_256(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) {
        float in[VL] = {0}, out[VL];
        in[0] = x[i];
        _mm256_storeu_ps(out, exp2_256(_mm256_loadu_ps(in)));
        y[i] = out[0];
    }
}

const attn_ukernels attn_ukernels_avx2 = {
    .name = "avx2",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .qk = qk_avx2,
    .pv = pv_avx2,
    .pvt = pvt_avx2,
    .exp_sum = exp_sum_avx2,
    .softmax_grad = softmax_grad_avx2,
    .scale = scale_avx2,
    .divide = divide_avx2,
    .transpose16 = transpose16_avx2,
    .absmax = absmax_avx2,
    .mask_bool = mask_bool_avx2,
    .mask_add = mask_add_avx2,
    .max = max_avx2,
    .dot_rows = dot_rows,
    .axpy_rows = axpy_rows,
    .dot_rows16 = dot_rows16,
    .axpy_rows16 = axpy_rows16,
    .widen16 = widen16_avx2,
    .widen_quant = attn_widen_quant_avx2,
    .dot_rows_q = dot_rows_q,
    .axpy_rows_q = axpy_rows_q,
    .dot_rows_fp8 = dot_rows_fp8,
    .axpy_rows_fp8 = axpy_rows_fp8,
    .dot_rows_list = dot_rows_list,
    .axpy_rows_list = axpy_rows_list,
    .dot_rows_heads = dot_rows_heads,
    .axpy_rows_heads = axpy_rows_heads,
    .softcap = softcap_avx2,
    .alibi = alibi_avx2,
    .exp2 = exp2_avx2,
    .dgemm = attn_dgemm_avx2_6x8,
    .dgemm_mr = 6,
    .dgemm_nr = 8,
    .sgemm = attn_sgemm_avx2_6x16,
    .sgemm_mr = 6,
    .sgemm_nr = 16,
};
#endif
