/* ukernel_avx512bf16.c -- the bf16 compute mode on AVX512_BF16 (compiled
 * with -mavx512bf16): the 6 × 64 tile of ukernel_avx512.c, with VDPBF16PS
 * doing two multiply-adds per lane where VFMADD does one. */
#include "attn.h"
#include "kernels/ukernel_bf16.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include "kernels/x86/intrin.h"
#include "kernels/x86/exp2_avx512.h"

enum { MR = 6, VL = 16, NV = 4 };

#define DP(acc, a, b) acc = _mm512_dpbf16_ps(acc, (__m512bh)(a), (__m512bh)(b))

/* s = q2 · kt2 (attn_bf16_kernels.qk); row_max not NULL: each row's largest
 * score joins row_max[r] (qk_max), taken from the accumulators. */
ATTN_KERNEL_INLINE void qk_tile(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
                                int64_t ldk, int64_t E2, float *row_max) {
    __m512 c[MR][NV];
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[r][v] = _mm512_setzero_ps();
    for (int64_t e = 0; e < E2; e++) {
        const uint32_t *b = kt2 + e * ldk;
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 16);
        __m512i b2 = _mm512_loadu_si512(b + 32), b3 = _mm512_loadu_si512(b + 48);
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
            __m512i a = _mm512_set1_epi32((int)q2[r * ldq + e]);
            DP(c[r][0], a, b0);
            DP(c[r][1], a, b1);
            DP(c[r][2], a, b2);
            DP(c[r][3], a, b3);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) _mm512_storeu_ps(s + r * lds + 16 * v, c[r][v]);
    if (row_max)
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
            float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(c[r][0], c[r][1]), _mm512_max_ps(c[r][2], c[r][3])));
            row_max[r] = m > row_max[r] ? m : row_max[r];
        }
}

static void qk_avx512bf16(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
                          int64_t ldk, int64_t E2) {
    qk_tile(s, lds, q2, ldq, kt2, ldk, E2, NULL);
}

static void qk_max_avx512bf16(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
                              int64_t ldk, int64_t E2, float *row_max) {
    qk_tile(s, lds, q2, ldq, kt2, ldk, E2, row_max);
}

#define PV_KERNEL(NVEC)                                                                           \
    static void pv_bf16_##NVEC(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp,             \
                               const uint32_t *v2, int64_t ldv, int64_t K2) {                      \
        __m512 acc[MR][NVEC];                                                                \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) acc[r][j] =                    \
                _mm512_loadu_ps(o + r * ldo + 16 * j);                                            \
        for (int64_t k = 0; k < K2; k++) {                                                        \
            __m512i b[NVEC];                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) b[j] =                         \
                _mm512_loadu_si512(v2 + k * ldv + 16 * j);                                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                            \
                __m512i a = _mm512_set1_epi32((int)p2[r * ldp + k]);                              \
                _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++) DP(acc[r][j], a, b[j]);     \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                  \
            _Pragma("GCC unroll 4") for (int j = 0; j < NVEC; j++)                                \
                _mm512_storeu_ps(o + r * ldo + 16 * j, acc[r][j]);                                \
    }
PV_KERNEL(1)
PV_KERNEL(2)
PV_KERNEL(3)
PV_KERNEL(4)

static void pv_avx512bf16(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp, const uint32_t *v2,
                          int64_t ldv, int64_t K2, int nvec) {
    switch (nvec) {
    case 1: pv_bf16_1(o, ldo, p2, ldp, v2, ldv, K2); break;
    case 2: pv_bf16_2(o, ldo, p2, ldp, v2, ldv, K2); break;
    case 3: pv_bf16_3(o, ldo, p2, ldp, v2, ldv, K2); break;
    default: pv_bf16_4(o, ldo, p2, ldp, v2, ldv, K2); break;
    }
}

/* The layer's GEMM on pairs (attn_bf16_kernels.gemm): a 12 × 32 tile, the
 * f32 sgemm's (sgemm_avx512.c), in 24 accumulators; each step broadcasts a
 * pair of one row of a and meets two vectors of 16 pairs of b, so one
 * VDPBF16PS does two multiply-adds per lane where VFMADD does one. */
enum { GEMM_MR = 12, GEMM_NR = 32 };

static void gemm_avx512bf16(float *c, int64_t ldc, const uint32_t *a2, const uint32_t *b2, int64_t k2) {
    __m512 acc[GEMM_MR][2];
    _Pragma("GCC unroll 12") for (int r = 0; r < GEMM_MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k2; p++) {
        __m512i b0 = _mm512_loadu_si512(b2 + p * GEMM_NR), b1 = _mm512_loadu_si512(b2 + p * GEMM_NR + 16);
        _Pragma("GCC unroll 12") for (int r = 0; r < GEMM_MR; r++) {
            __m512i a = _mm512_set1_epi32((int)a2[p * GEMM_MR + r]);
            DP(acc[r][0], a, b0);
            DP(acc[r][1], a, b1);
        }
    }
    _Pragma("GCC unroll 12") for (int r = 0; r < GEMM_MR; r++) {
        _mm512_storeu_ps(c + r * ldc, _mm512_add_ps(_mm512_loadu_ps(c + r * ldc), acc[r][0]));
        _mm512_storeu_ps(c + r * ldc + 16, _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16), acc[r][1]));
    }
}

/* The mode's exp pass: degree 3 (ukernel_bf16.h); to p, two vectors of
 * weights make one of bf16 (VCVTNE2PS2BF16, to_bf16's rounding), summed in
 * the order attn_exp_sum_512 sums them. */
static float exp_sum_avx512bf16(uint16_t *p, float *x, int64_t n, float m) {
    if (!p) return attn_exp_sum_512(x, n, m, 3);
    __m512 sum = _mm512_setzero_ps(), mv = _mm512_set1_ps(m), log2e = _mm512_set1_ps(ATTN_LOG2E);
    for (int64_t i = 0; i < n; i += 32) {
        __m512 y0 = attn_exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv), log2e), 3);
        __m512 y1 = attn_exp2_512(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), mv), log2e), 3);
        _mm512_storeu_si512(p + i, (__m512i)_mm512_cvtne2ps_pbh(y1, y0));
        sum = _mm512_add_ps(_mm512_add_ps(sum, y0), y1);
    }
    return _mm512_reduce_add_ps(sum);
}

/* VCVTNE2PS2BF16 rounds to nearest even, as attn_f32_to_bf16 does. */
static void to_bf16_avx512(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (; i < n; i++) dst[i] = attn_f32_to_bf16(src[i]);
}

static void zip_avx512(uint32_t *dst, const float *even, const float *odd, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i e = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(even + i));
        __m256i o = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(odd + i));
        __m512i pairs = _mm512_or_si512(_mm512_cvtepu16_epi32(e),
                                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
        _mm512_storeu_si512(dst + i, pairs);
    }
    for (; i < n; i++) dst[i] = attn_f32_to_bf16(even[i]) | (uint32_t)attn_f32_to_bf16(odd[i]) << 16;
}

const attn_bf16_kernels attn_bf16_avx512 = {
    .name = "avx512_bf16",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .needs_full_rate = true,
    .qk = qk_avx512bf16,
    .qk_max = qk_max_avx512bf16,
    .pv = pv_avx512bf16,
    .exp_sum = exp_sum_avx512bf16,
    .to_bf16 = to_bf16_avx512,
    .zip = zip_avx512,
    .gemm = gemm_avx512bf16,
    .gemm_mr = GEMM_MR,
    .gemm_nr = GEMM_NR,
    .gemm_kp = 1,
};
#endif
