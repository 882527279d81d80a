/* ukernel_c.c -- the portable microkernels: plain C, any CPU, and the
 * reference the SIMD kernels are tested against. */
#include "base/base.h"
#include "kernels/exp2.h"
#include "kernels/ukernel.h"
#include "kernels/ukernel_bf16.h"

#include <math.h>
#include <string.h>

enum { MR = 6, VL = 8, NV = 4, NR = VL * NV };

static float pow2i(int n) { /* 2^n for -126 <= n <= 127 */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* attn_exp2f with the polynomial of that degree: 6 (ATTN_EXP2_POLY), or 3
 * (ATTN_EXP2_POLY3, the bf16 mode's; kernels/exp2.h). */
static inline float exp2_of(float x, int degree) {
    if (x != x) return x;
    /* Below LO the result is exactly 0, never a subnormal (exp2.h). The
     * arithmetic below runs on the clamped x all the same: a compiler may
     * compute both sides of the choice and then select (clang does in
     * vectorised loops), and a side that underflows raises the flags. */
    bool cut = x < ATTN_EXP2_LO;
    x = x < ATTN_EXP2_LO ? ATTN_EXP2_LO : x > ATTN_EXP2_HI ? ATTN_EXP2_HI : x;
    float n = floorf(x + 0.5f), f = x - n;
#define MADD(a, b, c) ((a) * (b) + (c))
#define K(c) (c)
    float p = degree == 3 ? ATTN_EXP2_POLY3(MADD, K, f) : ATTN_EXP2_POLY(MADD, K, f);
#undef MADD
#undef K
    /* 2^n in two halves, each a normal power of two (n reaches 129, which
     * overflows to inf): one final rounding. */
    int ni = (int)n, n1 = ni / 2, n2 = ni - n1;
    float y = p * pow2i(n1) * pow2i(n2);
    return cut ? 0.0f : y;
}

float attn_exp2f(float x) { return exp2_of(x, 6); }

static void qk_c(float *s, int64_t lds, const float *q, int64_t ldq, const float *kt, int64_t ldk,
                 int64_t E, int nvec) {
    float acc[MR][NR] = {{0}};
    int n = nvec * VL;
    for (int64_t e = 0; e < E; e++)
        for (int r = 0; r < MR; r++) {
            float a = q[r * ldq + e];
            for (int c = 0; c < n; c++) acc[r][c] += a * kt[e * ldk + c];
        }
    for (int r = 0; r < MR; r++) memcpy(s + r * lds, acc[r], sizeof(float) * (size_t)n);
}

/* o += p · v, with p's element (r, k) at p[r * rs + k * cs]: pv reads p by
 * rows, pvt by columns. */
static void pv_strided(float *o, int64_t ldo, const float *p, int64_t rs, int64_t cs, const float *v,
                       int64_t ldv, int64_t keys, int nvec) {
    int n = nvec * VL;
    for (int r = 0; r < MR; r++)
        for (int64_t k = 0; k < keys; k++) {
            float a = p[r * rs + k * cs];
            for (int c = 0; c < n; c++) o[r * ldo + c] += a * v[k * ldv + c];
        }
}

static void pv_c(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v, int64_t ldv,
                 int64_t keys, int nvec) {
    pv_strided(o, ldo, p, ldp, 1, v, ldv, keys, nvec);
}

static void pvt_c(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v, int64_t ldv,
                  int64_t keys, int nvec) {
    pv_strided(o, ldo, p, 1, ldp, v, ldv, keys, nvec);
}

static float exp_sum_of(float *x, int64_t n, float m, int degree) {
    float lane[VL] = {0};
    for (int64_t i = 0; i < n; i += VL)
        for (int j = 0; j < VL; j++) {
            x[i + j] = exp2_of((x[i + j] - m) * ATTN_LOG2E, degree);
            lane[j] += x[i + j];
        }
    float sum = 0;
    for (int j = 0; j < VL; j++) sum += lane[j];
    return sum;
}

static float exp_sum_c(float *x, int64_t n, float m) { return exp_sum_of(x, n, m, 6); }

float attn_exp_sum_bf16_portable(float *x, int64_t n, float m) { return exp_sum_of(x, n, m, 3); }

static void scale_c(float *y, const float *x, int64_t n, float a) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * a;
}

static void divide_c(float *y, const float *x, int64_t n, float d) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / d;
}

static void softmax_grad_c(float *p, float *ds, int64_t n, float lse, float D) {
    for (int64_t i = 0; i < n; i++) {
        p[i] = attn_exp2f((p[i] - lse) * ATTN_LOG2E);
        ds[i] = p[i] * (ds[i] - D);
    }
}

void attn_transpose16_portable(float *kt, int64_t ld, const float *k, int64_t rs, int nk, int64_t E) {
    for (int64_t e = 0; e < E; e++) {
        for (int c = 0; c < nk; c++) kt[e * ld + c] = k[c * rs + e];
        for (int c = nk; c < 16; c++) kt[e * ld + c] = 0;
    }
}

static float absmax_c(const float *x, int64_t n) {
    float big = 0;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] - x[i] != 0) return -1; /* NaN or inf */
        float a = fabsf(x[i]);
        big = a > big ? a : big;
    }
    return big;
}

static void mask_bool_c(float *s, const unsigned char *m, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!m[i]) s[i] = -INFINITY;
}

static bool mask_add_c(float *s, const float *m, int64_t n) {
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        ok &= !(m[i] != m[i] || m[i] == INFINITY);
        s[i] += m[i];
    }
    return ok;
}

static float max_c(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static float dot_rows_c(float *s, int64_t lds, const float *q, int nq, const float *k, int64_t ld,
                        int64_t n, int64_t E) {
    float big = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * ld;
        float b = absmax_c(kj, E);
        big = attn_absmax_join(big, b);
        for (int i = 0; i < nq; i++) {
            float lane[VL] = {0}, sum = 0;
            int64_t e = 0;
            for (; e + VL <= E; e += VL)
                for (int l = 0; l < VL; l++) lane[l] += q[i * E + e + l] * kj[e + l];
            for (; e < E; e++) sum += q[i * E + e] * kj[e];
            for (int l = 0; l < VL; l++) sum += lane[l];
            s[i * lds + j] = sum;
        }
    }
    return big;
}

static void axpy_rows_c(float *acc, const float *p, int64_t ldp, int nq, const float *v, int64_t ld,
                        int64_t n, int64_t Ev) {
    for (int64_t j = 0; j < n; j++)
        for (int i = 0; i < nq; i++) {
            float a = p[i * ldp + j];
            for (int64_t e = 0; e < Ev; e++) acc[i * Ev + e] += a * v[j * ld + e];
        }
}

static void widen16_c(float *dst, const uint16_t *src, int64_t n, bool f16) {
    for (int64_t i = 0; i < n; i++) dst[i] = f16 ? attn_f16_to_f32(src[i]) : attn_bf16_to_f32(src[i]);
}

#define MADD_C(x, y, z) ((x) * (y) + (z))
#define K_C(c) (c)

static float softcap_c(float *s, int64_t n, float cap) {
    float k = -2 * ATTN_LOG2E / cap, r = 1 / cap, m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float ax = fabsf(s[i]), a = ax * r, y;
        if (a < ATTN_SOFTCAP_SMALL) { /* tanh's series: 1 - t would cancel */
            float f = fmaxf(a, 0x1p-30f), w = f * f;
            y = ax * ATTN_SOFTCAP_SERIES(MADD_C, K_C, w);
        } else { /* NaN and inf too */
            float t = attn_exp2f(k * ax);
            y = cap * ((1 - t) / (1 + t));
        }
        s[i] = s[i] < 0 ? -y : y;
        m = s[i] > m ? s[i] : m;
    }
    return m;
}

static void alibi_c(float *s, int64_t n, float slope, int64_t d0) {
    for (int64_t i = 0; i < n; i++) s[i] -= slope * (float)(d0 + i < 0 ? -(d0 + i) : d0 + i);
}

static void exp2_c(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = attn_exp2f(x[i]);
}

/* The portable double GEMM microkernel: a 4 × 8 tile, plain loops. */
enum { MR_D = 4, NR_D = 8 };
static void dgemm_c(double *c, int64_t ldc, const double *a, const double *b, int64_t k) {
    double acc[MR_D][NR_D] = {{0}};
    for (int64_t p = 0; p < k; p++, a += MR_D, b += NR_D)
        for (int i = 0; i < MR_D; i++)
            for (int j = 0; j < NR_D; j++) acc[i][j] += a[i] * b[j];
    for (int i = 0; i < MR_D; i++)
        for (int j = 0; j < NR_D; j++) c[i * ldc + j] += acc[i][j];
}

/* The portable f32 GEMM microkernel: a 4 × 16 tile, plain loops. */
enum { MR_S = 4, NR_S = 16 };
static void sgemm_c(float *c, int64_t ldc, const float *a, const float *b, int64_t k) {
    float acc[MR_S][NR_S] = {{0}};
    for (int64_t p = 0; p < k; p++, a += MR_S, b += NR_S)
        for (int i = 0; i < MR_S; i++)
            for (int j = 0; j < NR_S; j++) acc[i][j] += a[i] * b[j];
    for (int i = 0; i < MR_S; i++)
        for (int j = 0; j < NR_S; j++) c[i * ldc + j] += acc[i][j];
}

const attn_ukernels attn_ukernels_c = {
    .name = "c",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .qk = qk_c,
    .pv = pv_c,
    .pvt = pvt_c,
    .exp_sum = exp_sum_c,
    .softmax_grad = softmax_grad_c,
    .scale = scale_c,
    .divide = divide_c,
    .transpose16 = attn_transpose16_portable,
    .absmax = absmax_c,
    .mask_bool = mask_bool_c,
    .mask_add = mask_add_c,
    .max = max_c,
    .dot_rows = dot_rows_c,
    .axpy_rows = axpy_rows_c,
    .widen16 = widen16_c,
    .widen_quant = attn_dequant_row, /* the reference itself */
    .softcap = softcap_c,
    .alibi = alibi_c,
    .exp2 = exp2_c,
    .dgemm = dgemm_c,
    .dgemm_mr = MR_D,
    .dgemm_nr = NR_D,
    .sgemm = sgemm_c,
    .sgemm_mr = MR_S,
    .sgemm_nr = NR_S,
};
