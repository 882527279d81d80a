/* bf16_emulated.c -- the bf16 compute mode without AVX512_BF16: the same
 * arithmetic as VDPBF16PS, one lane at a time, in portable C. */
#include "base/base.h"
#include "kernels/ukernel_bf16.h"

#include <float.h>

enum { MR = 6, VL = 16, NV = 4, NR = VL * NV };

/* The instruction's FTZ: subnormal results become zero. */
static float ftz(float x) { return fabsf(x) < FLT_MIN ? 0.0f * x : x; }

/* Its DAZ is the same flush, of the inputs. */
float attn_bf16_daz(uint16_t h) { return ftz(attn_bf16_to_f32(h)); }

float attn_bf16_dot_pair(float acc, uint32_t a, uint32_t b) {
    /* Two FMAs, each rounded once, as Zen 4/5's VDPBF16PS computes (bitwise,
     * tests/test_fast.c): the product of two bf16 is exact in f32 only
     * within f32's normal range, and one below FLT_MIN or past FLT_MAX
     * enters the sum unrounded (a separate multiply flushed or overflowed
     * it). The accumulator is read as zero when subnormal, as the inputs. */
    acc = ftz(fmaf(attn_bf16_daz((uint16_t)(a >> 16)), attn_bf16_daz((uint16_t)(b >> 16)), ftz(acc)));
    return ftz(fmaf(attn_bf16_daz((uint16_t)a), attn_bf16_daz((uint16_t)b), acc));
}

static void qk_emulated(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
                        int64_t ldk, int64_t E2) {
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) {
            float acc = 0;
            for (int64_t e = 0; e < E2; e++) acc = attn_bf16_dot_pair(acc, q2[r * ldq + e], kt2[e * ldk + c]);
            s[r * lds + c] = acc;
        }
}

static void pv_emulated(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp, const uint32_t *v2,
                        int64_t ldv, int64_t K2, int nvec) {
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < nvec * VL; c++) {
            float acc = o[r * ldo + c];
            for (int64_t k = 0; k < K2; k++) acc = attn_bf16_dot_pair(acc, p2[r * ldp + k], v2[k * ldv + c]);
            o[r * ldo + c] = acc;
        }
}

/* The layer's GEMM on pairs: a 4 × 16 tile, each sum from zero pair by
 * pair as VDPBF16PS adds, then added to c. */
enum { GEMM_MR = 4, GEMM_NR = 16 };

static void gemm_emulated(float *c, int64_t ldc, const uint32_t *a2, const uint32_t *b2, int64_t k2) {
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) {
            float acc = 0;
            for (int64_t p = 0; p < k2; p++) acc = attn_bf16_dot_pair(acc, a2[p * GEMM_MR + r], b2[p * GEMM_NR + j]);
            c[r * ldc + j] += acc;
        }
}

static void to_bf16_portable(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = attn_f32_to_bf16(src[i]);
}

static float exp_sum_emulated(uint16_t *p, float *x, int64_t n, float m) {
    float sum = attn_exp_sum_bf16_portable(x, n, m);
    if (p) to_bf16_portable(p, x, n);
    return sum;
}

static void zip_portable(uint32_t *dst, const float *even, const float *odd, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = attn_f32_to_bf16(even[i]) | (uint32_t)attn_f32_to_bf16(odd[i]) << 16;
}

const attn_bf16_kernels attn_bf16_emulated = {
    .name = "emulated",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .qk = qk_emulated,
    .pv = pv_emulated,
    .exp_sum = exp_sum_emulated,
    .to_bf16 = to_bf16_portable,
    .zip = zip_portable,
    .gemm = gemm_emulated,
    .gemm_mr = GEMM_MR,
    .gemm_nr = GEMM_NR,
    .gemm_kp = 1,
};
