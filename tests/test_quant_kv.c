/* test_quant_kv.c -- attention reading quantized keys and values (q8, q4, q4_1,
 * fp8 E4M3 and E5M2) where they lie, against the same values widened to f32
 * first and run through the f32 kernels.
 *
 * Both calls see the same floats (a quantized row widens exactly, attn.h),
 * and every kernel treats a row alike wherever it comes from, so the
 * agreement is bitwise: out, lse and weights. Each case names the kernel
 * it must run on (flash, decode, exact), checked on both calls' verbose
 * lines, which must also show the quantized dtype. Keys are normal or have
 * heavy-tailed channels (a few channels 100 times the rest, the keys of
 * trained models that per-channel scales were proposed for).
 *
 * Run with ATTN_ISA=avx512|avx2|c to test each ISA's widening (tests/run.sh
 * does). Prints "ok NAME" or "FAIL NAME: why"; exits 1 if any failed. */
#include "attn.h"
#include "check.h"
#include "../src/base/base.h"
#include "../src/sdpa/sdpa.h"
#include "../src/kernels/ukernel.h"
#include "../src/kernels/qdot.h"

#if defined(__x86_64__) && defined(ATTN_HAVE_X86_KERNELS)
#include <cpuid.h>
#endif
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_RNG_SEED 30
#include "rng.h"

/* n rows of `cols` values: normal, or with every 16th channel 100 times
 * larger (heavy-tailed key channels). */
static float *rows_of(int64_t n, int64_t cols, bool outliers) {
    float *p = malloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) p[i] = normal() * (outliers && i % cols % 16 == 3 ? 100.0f : 1.0f);
    return p;
}

/* ---- the integer dot product kernel (src/kernels/qdot.h) ----------------
 * Where it runs (q8 and q4 keys in the decode kernel, on a set that has
 * one), the queries are rounded to int8 per block of 32, and a call is no
 * longer bitwise the f32 kernels on the widened rows. It is checked instead
 * against the f64 reference on the widened rows, twice:
 *   - within the bound attn.h states: each score off by at most
 *     Δ = Σ_b (max_b |q·scale| / 127) · (1/2 + 2^-10) · ||k_b||_1 plus f32's
 *     2^-18 · Σ |q·scale · k|, so out within (e^(2Δ) - 1) · max_j |v_j| and
 *     lse within Δ (and 1e-5 of f32 on top);
 *   - tightly: against the f64 reference on the queries rounded as attn.h
 *     documents (written here from that text), within f32's error: the
 *     kernel computes what it says to the last few bits.
 * The quantized calls (paged, dense tensors, ragged, caches) share the
 * kernel and stay bitwise equal to each other. */

/* The kernel decode takes q8/q4 keys' scores with, as the verbose line's
 * key_dot= word names it: "" where keys are widened. */
static const char *key_dot_expected(attn_dtype format) {
    const attn_qdot_kernels *qk = attn_qdot_active();
    return qk && (format == ATTN_Q8 || format == ATTN_Q4) ? qk->name : "";
}

static void key_dot_shown(char *dst, size_t size) { word_after(dst, size, verbose_last_line, " key_dot="); }

/* How decode accumulates q8/q4 values, as the verbose line's value_dot=
 * word names it: the integer set's own (qdot.h), "" where the f32 set's
 * widened values are (no integer set). */
static const char *value_dot_expected(attn_dtype format) {
    const attn_qdot_kernels *qk = attn_qdot_active();
    return qk && qk->axpy && (format == ATTN_Q8 || format == ATTN_Q4) ? qk->value_dot : "";
}

static void value_dot_shown(char *dst, size_t size) { word_after(dst, size, verbose_last_line, " value_dot="); }

/* key_dot_row's vbf16 for values of this format: the format where the
 * integer set's values round the weights (bf16 pairs or int8), else f32. */
static attn_dtype bf16_values(attn_dtype format) {
    const char *vd = value_dot_expected(format);
    return !strcmp(vd, "bf16_avx512bf16") || !strcmp(vd, "int8_avx512vnni") ? format : ATTN_F32;
}

/* attn.h's bound on the values through bf16 pairs (value_dot=bf16_avx512bf16)
 * for one column, n keys: mag = Σ_j |p_j · v_j|. */
static double bf16_value_bound(double mag, int64_t n) {
    return 0x1p-8 * (1 + 0x1p-14) * mag + (double)(n + 2) * 0x1p-23 * mag + (double)(n + 2) * 0x1p-110;
}

/* attn.h's bound on the values by integer dot products
 * (value_dot=int8_avx512vnni) for column e of n value rows v (stride ldv,
 * widened from `format` made by attn_quantize, so that a block's |d| is its
 * largest |v| over the largest code, 127 or 8), weights p (n): per group of
 * 16 positions, σ = max |p_j · d_j| / 127 times Σ |code| halved, plus f32's
 * accumulation and flushed groups. */
static double int8_value_bound(const double *p, const float *v, int64_t ldv, int64_t n, int64_t e, attn_dtype format) {
    double cmax = format == ATTN_Q4 ? 8 : 127, bound = 0, mag = 0;
    for (int64_t g = 0; g < n; g += 16) {
        double a = 0, codes = 0;
        for (int64_t j = g; j < n && j < g + 16; j++) {
            const float *blk = v + j * ldv + e / 32 * 32;
            double top = 0;
            for (int i = 0; i < 32; i++) top = fmax(top, fabs(blk[i]));
            double d = top / cmax;
            a = fmax(a, p[j] * d), mag += p[j] * fabs(v[j * ldv + e]);
            codes += d > 0 ? fabs(v[j * ldv + e]) / d : 0;
        }
        bound += (1 + 0x1p-14) / 2 * (a / 127) * codes;
    }
    return bound + (double)(n + 2) * 0x1p-23 * mag + (double)n * 0x1p-93;
}

/* A query row (scaled) rounded as attn.h says: per block of 32, d = max|x| /
 * 127 in f32, c = x · (1/d) rounded to nearest even, clamped to ±127. */
static void round_query(double *qhat, const float *x, int64_t E) {
    for (int64_t b = 0; b < E; b += 32) {
        float a = 0;
        for (int i = 0; i < 32; i++) a = fabsf(x[b + i]) > a ? fabsf(x[b + i]) : a;
        float d = a / 127, inv = d > 0 ? 1 / d : 0;
        for (int i = 0; i < 32; i++) {
            float c = nearbyintf(x[b + i] * inv);
            qhat[b + i] = (double)d * (double)(c > 127 ? 127 : c < -127 ? -127 : c);
        }
    }
}

/* One query row q (E) against n widened key and value rows (row strides ldk,
 * ldv): out (Ev values, stride os) and lse as the integer kernel gave them;
 * vbf16 (ATTN_Q8 or ATTN_Q4, else 0): the values went through bf16 pairs,
 * whose bound (bf16_value_bound) is added, scaled by e^(2Δ) since the
 * kernel's weights p / l are within that factor of the reference's.
 * Raises *bound to the largest error / attn.h's bound, and *tight to the
 * largest error / f32's error against the reference on the rounded query. */
static void key_dot_row(double *bound, double *tight, const float *q, const float *k, int64_t ldk, const float *v,
                        int64_t ldv, int64_t n, int64_t E, int64_t Ev, const float *out, int64_t os, float lse,
                        attn_dtype vbf16) {
    double scale = 1 / sqrt((double)E);
    float *qs = malloc(sizeof(float) * (size_t)E);
    double *qhat = malloc(sizeof(double) * (size_t)E), *s[2];
    s[0] = malloc(sizeof(double) * (size_t)n), s[1] = malloc(sizeof(double) * (size_t)n);
    for (int64_t e = 0; e < E; e++) qs[e] = (float)((double)q[e] * scale);
    round_query(qhat, qs, E);
    double delta = 0, f32 = 0; /* the bound's score error; f32's on the rounded query */
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * ldk;
        double dot = 0, dot_hat = 0, absdot = 0, quant = 0;
        for (int64_t b = 0; b < E; b += 32) {
            double a = 0, l1 = 0;
            for (int i = 0; i < 32; i++) a = fmax(a, fabs(qs[b + i])), l1 += fabs(kj[b + i]);
            quant += a / 127 * (0.5 + 0x1p-10) * l1;
        }
        for (int64_t e = 0; e < E; e++)
            dot += (double)q[e] * scale * kj[e], dot_hat += qhat[e] * kj[e], absdot += fabs((double)qs[e] * kj[e]);
        s[0][j] = dot, s[1][j] = dot_hat;
        delta = fmax(delta, quant + 0x1p-18 * absdot), f32 = fmax(f32, 0x1p-18 * absdot);
    }
    for (int r = 0; r < 2; r++) { /* 0: the reference and attn.h's bound; 1: the rounded query and f32's */
        double m = -INFINITY, sum = 0, dl = r ? f32 : delta, worst = 0;
        for (int64_t j = 0; j < n; j++) m = fmax(m, s[r][j]);
        for (int64_t j = 0; j < n; j++) sum += exp(s[r][j] - m);
        bool int8 = (vbf16 == ATTN_Q8 || vbf16 == ATTN_Q4) && !strcmp(value_dot_expected(vbf16), "int8_avx512vnni");
        double *p = malloc(sizeof(double) * (size_t)n);
        for (int64_t j = 0; j < n; j++) p[j] = exp(s[r][j] - m);
        for (int64_t e = 0; e < Ev; e++) {
            double ref = 0, vmax = 0, mag = 0;
            for (int64_t j = 0; j < n; j++) {
                double pj = p[j];
                ref += pj * v[j * ldv + e], vmax = fmax(vmax, fabs(v[j * ldv + e])), mag += pj * fabs(v[j * ldv + e]);
            }
            ref /= sum;
            double tol = (expm1(2 * dl) + 1e-5) * vmax + 1e-30;
            if (int8) tol += exp(2 * dl) * int8_value_bound(p, v, ldv, n, e, vbf16) / sum;
            else if (vbf16 == ATTN_Q8 || vbf16 == ATTN_Q4)
                tol += exp(2 * dl) * bf16_value_bound(mag, n) / sum;
            worst = fmax(worst, fabs(out[e * os] - ref) / tol);
        }
        free(p);
        double ref_lse = m + log(sum);
        worst = fmax(worst, fabs(lse - ref_lse) / (dl + 1e-5 * (1 + fabs(ref_lse))));
        if (isnan(out[0]) || isnan(lse)) worst = INFINITY;
        double *to = r ? tight : bound;
        *to = fmax(*to, worst);
    }
    free(qs), free(qhat), free(s[0]), free(s[1]);
}

typedef struct qcase {
    int64_t L, S, E, Ev, Hq, Hk, P;
    attn_dtype format;
    attn_causal causal;
    int outliers, weights;
    const char *kernel; /* the kernel both calls run */
} qcase;

/* Rows x (n × cols, f32) quantized into `format` rows, and those rows
 * widened back: *bytes (n rows of attn_quant_row_size) and *back (f32). */
static void quantize_rows(uint8_t **bytes, float **back, const float *x, int64_t n, int64_t cols, attn_dtype format) {
    size_t row = attn_quant_row_size(format, cols);
    *bytes = malloc(row * (size_t)n);
    *back = malloc(sizeof(float) * (size_t)(n * cols));
    attn_tensor t, b;
    int64_t shape[2] = {n, cols};
    attn_tensor_init(&t, (void *)x, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&b, *back, ATTN_F32, 2, shape, NULL, NULL);
    attn_error err;
    if (attn_quantize(*bytes, row * (size_t)n, format, &t, &err) ||
        attn_dequantize(&b, *bytes, row * (size_t)n, format, &err))
        check(0, "quantize_rows", "%s", err.message);
}

/* The dtype= word of k in a verbose line: "q8" of "k=q8(2,300,64)". */
static void k_dtype(char *dst, size_t size) {
    word_after(dst, size, verbose_last_line, " k=");
    char *paren = strchr(dst, '(');
    if (paren) *paren = 0;
}

static void test_case(const qcase *c) {
    char name[160];
    snprintf(name, sizeof name, "%s_%s_L%lld_S%lld_E%lld_P%lld%s%s", attn_dtype_name(c->format), c->kernel,
             (long long)c->L, (long long)c->S, (long long)c->E, (long long)c->P, c->outliers ? "_outlier_channels" : "",
             c->weights ? "_weights" : "");
    int64_t n_pages = (c->S + c->P - 1) / c->P, pool = 2 * n_pages + 3;
    int64_t kr = (int64_t)attn_quant_row_size(c->format, c->E), vr = (int64_t)attn_quant_row_size(c->format, c->Ev);
    float *q = rows_of(c->Hq * c->L, c->E, false);
    float *kf = rows_of(c->Hk * c->S, c->E, c->outliers), *vf = rows_of(c->Hk * c->S, c->Ev, false);
    uint8_t *kq, *vq;
    float *kd, *vd; /* the dense f32 keys and values: the quantized rows widened */
    quantize_rows(&kq, &kd, kf, c->Hk * c->S, c->E, c->format);
    quantize_rows(&vq, &vd, vf, c->Hk * c->S, c->Ev, c->format);
    /* The pool [pool][Hk][P] of quantized rows through a shuffled table. */
    uint8_t *kp = calloc((size_t)(pool * c->Hk * c->P), (size_t)kr), *vp = calloc((size_t)(pool * c->Hk * c->P), (size_t)vr);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)pool);
    for (int64_t t = 0; t < pool; t++) table[t] = (int32_t)t;
    for (int64_t t = pool - 1; t > 0; t--) {
        int64_t u = (int64_t)(uniform() * (double)(t + 1)) % (t + 1);
        int32_t x = table[t];
        table[t] = table[u], table[u] = x;
    }
    for (int64_t h = 0; h < c->Hk; h++)
        for (int64_t j = 0; j < c->S; j++) {
            int64_t at = (table[j / c->P] * c->Hk + h) * c->P + j % c->P;
            memcpy(kp + at * kr, kq + (h * c->S + j) * kr, (size_t)kr);
            memcpy(vp + at * vr, vq + (h * c->S + j) * vr, (size_t)vr);
        }
    attn_paged_rows kpg = {kp, c->format, pool, c->Hk, c->P, c->E, table, n_pages, c->S, NULL, 0, false};
    attn_paged_rows vpg = {vp, c->format, pool, c->Hk, c->P, c->Ev, table, n_pages, c->S, NULL, 0, false};
    int64_t sq[3] = {c->Hq, c->L, c->E}, sk[3] = {c->Hk, c->S, c->E}, sv[3] = {c->Hk, c->S, c->Ev},
            so[3] = {c->Hq, c->L, c->Ev}, sl[2] = {c->Hq, c->L}, sw[3] = {c->Hq, c->L, c->S};
    size_t no = (size_t)(c->Hq * c->L * c->Ev), nl = (size_t)(c->Hq * c->L), nw = (size_t)(c->Hq * c->L * c->S);
    float *out[2] = {calloc(no, 4), calloc(no, 4)}, *lse[2] = {calloc(nl, 4), calloc(nl, 4)};
    float *w[2] = {c->weights ? calloc(nw, 4) : NULL, c->weights ? calloc(nw, 4) : NULL};
    attn_tensor tq, tk, tv, to[2], tl[2], tw[2];
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, kd, ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, vd, ATTN_F32, 3, sv, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = c->causal;
    attn_status st[2];
    attn_error err[2];
    char kernel[2][32], dtype[2][32], isa[2][32], kdot[2][32], vdot[2][32];
    for (int t = 0; t < 2; t++) {
        attn_tensor_init(&to[t], out[t], ATTN_F32, 3, so, NULL, NULL);
        attn_tensor_init(&tl[t], lse[t], ATTN_F32, 2, sl, NULL, NULL);
        attn_tensor_init(&tw[t], w[t], ATTN_F32, 3, sw, NULL, NULL);
        attn_set_num_threads(t + 1); /* and any thread count */
        verbose_begin();
        st[t] = t == 0 ? attn_sdpa(&to[t], &tl[t], c->weights ? &tw[t] : NULL, &tq, &tk, &tv, &o, &err[t])
                       : attn_sdpa_paged(&to[t], &tl[t], c->weights ? &tw[t] : NULL, &tq, &kpg, &vpg, &o, &err[t]);
        verbose_end(kernel[t], sizeof kernel[t], NULL, 0);
        k_dtype(dtype[t], sizeof dtype[t]);
        word_after(isa[t], sizeof isa[t], verbose_last_line, " isa=");
        key_dot_shown(kdot[t], sizeof kdot[t]);
        value_dot_shown(vdot[t], sizeof vdot[t]);
        attn_set_num_threads(0);
    }
    const char *kd_want = strcmp(c->kernel, "decode") == 0 ? key_dot_expected(c->format) : "";
    if (st[0] || st[1]) check(0, name, "f32: %s; %s: %s", st[0] ? err[0].message : "ok", attn_dtype_name(c->format),
                              st[1] ? err[1].message : "ok");
    else if (kd_want[0]) {
        /* The integer kernel: the same call on dense quantized tensors gives
         * the same bits; both against the f64 reference. */
        float *o3 = calloc(no, 4), *l3 = calloc(nl, 4);
        attn_tensor tkq, tvq, to3, tl3;
        attn_tensor_init(&tkq, kq, c->format, 3, sk, NULL, NULL);
        attn_tensor_init(&tvq, vq, c->format, 3, sv, NULL, NULL);
        attn_tensor_init(&to3, o3, ATTN_F32, 3, so, NULL, NULL);
        attn_tensor_init(&tl3, l3, ATTN_F32, 2, sl, NULL, NULL);
        attn_status s3 = attn_sdpa(&to3, &tl3, NULL, &tq, &tkq, &tvq, &o, &err[0]);
        double bound = 0, tight = 0;
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t l = 0; l < c->L; l++) {
                int64_t hk = h / (c->Hq / c->Hk), n = c->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? c->S - c->L + l + 1 : c->S;
                key_dot_row(&bound, &tight, q + (h * c->L + l) * c->E, kd + hk * c->S * c->E, c->E,
                            vd + hk * c->S * c->Ev, c->Ev, n, c->E, c->Ev, out[1] + (h * c->L + l) * c->Ev, 1,
                            lse[1][h * c->L + l], bf16_values(c->format));
            }
        char kname[220];
        snprintf(kname, sizeof kname, "%s_key_dot_within_bound_paged_bitwise_dense", name);
        check(!s3 && !strcmp(kernel[1], "decode") && !strcmp(kdot[1], kd_want) && !kdot[0][0] &&
                  !strcmp(vdot[1], value_dot_expected(c->format)) && !vdot[0][0] && bound <= 1 && tight <= 1 &&
                  !memcmp(o3, out[1], no * 4) && !memcmp(l3, lse[1], nl * 4),
              kname, "status %d, kernel %s key_dot %s (want %s) value_dot %s (want %s), error/bound %.3g, error/f32 bound %.3g, dense %s",
              (int)s3, kernel[1], kdot[1], kd_want, vdot[1], value_dot_expected(c->format), bound, tight,
              memcmp(o3, out[1], no * 4) ? "differs" : "same");
        free(o3), free(l3);
    } else
        check(strcmp(kernel[0], c->kernel) == 0 && strcmp(kernel[1], c->kernel) == 0 && !kdot[1][0] &&
                  strcmp(dtype[1], attn_dtype_name(c->format)) == 0 && !memcmp(out[0], out[1], no * 4) &&
                  !memcmp(lse[0], lse[1], nl * 4) && (!c->weights || !memcmp(w[0], w[1], nw * 4)),
              name, "kernels %s and %s (want %s), k shown as %s, isa %s, out %s, lse %s", kernel[0], kernel[1],
              c->kernel, dtype[1], isa[1], memcmp(out[0], out[1], no * 4) ? "differs" : "same",
              memcmp(lse[0], lse[1], nl * 4) ? "differs" : "same");
    free(q), free(kf), free(vf), free(kq), free(vq), free(kd), free(vd), free(kp), free(vp), free(table);
    for (int t = 0; t < 2; t++) free(out[t]), free(lse[t]), free(w[t]);
}

/* ---- fp8 rows read in place by decode (decode_rows.h) -------------------
 * Decode's microkernels read e4m3 and e5m2 bytes where they lie, as IEEE
 * halves (e4m3 as 2^-8 times its value, the 2^8 folded into q and the
 * weights), on every set that has dot_rows_fp8; the portable set widens
 * them into scratch first. The verbose line says which (rows=in_place or
 * rows=widened), and either way the result is bitwise the f32 kernels on
 * the rows widened first: */

/* The verbose line's rows= word decode shows for fp8 keys and values. */
static const char *fp8_rows_expected(void) { return attn_ukernels_active()->dot_rows_fp8 ? "in_place" : "widened"; }

/* a and b hold the same floats (NaN as any NaN). */
static bool same_floats(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

enum { F8_HQ = 4, F8_E = 100, F8_EV = 72, F8_S = 700, F8_LMAX = 3 }; /* one KV head; E, Ev end inside a vector */

/* One decode call of L query rows q (Hq, L, E) against S keys and values:
 * dtype f32 (k, v floats), or fp8 bytes as dense tensors (P = 0) or
 * through a shuffled page table of pages of P positions; ks, vs: the fp8
 * per-head scales (k_descale, v_descale), or 0; scale: the call's scale, or
 * 0 for the default. words: kernel=, rows=, fallback= of its verbose line. */
static attn_status fp8_call(float *out, float *lse, char words[3][32], const float *q, int64_t L, const void *k,
                            const void *v, attn_dtype dtype, int64_t P, float ks, float vs, double scale,
                            attn_error *err) {
    int64_t sq[3] = {F8_HQ, L, F8_E}, so[3] = {F8_HQ, L, F8_EV}, sl[2] = {F8_HQ, L}, sk[3] = {1, F8_S, F8_E},
            sv[3] = {1, F8_S, F8_EV}, one = 1;
    attn_tensor tq, tk, tv, to, tl, tks, tvs;
    attn_tensor_init(&tq, (void *)q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, so, NULL, NULL), attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&tk, (void *)k, dtype, 3, sk, NULL, NULL), attn_tensor_init(&tv, (void *)v, dtype, 3, sv, NULL, NULL);
    attn_tensor_init(&tks, &ks, ATTN_F32, 1, &one, NULL, NULL), attn_tensor_init(&tvs, &vs, ATTN_F32, 1, &one, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    if (scale != 0) o.has_scale = 1, o.scale = scale;
    if (ks > 0) o.k_descale = &tks;
    if (vs > 0) o.v_descale = &tvs;
    int64_t n_pages = P ? (F8_S + P - 1) / P : 0, pool = 2 * n_pages + 1;
    if (pool % 7 == 0) pool++; /* the table's stride 7 visits every page */
    uint8_t *kp = P ? calloc((size_t)(pool * P), F8_E) : NULL, *vp = P ? calloc((size_t)(pool * P), F8_EV) : NULL;
    int32_t *table = P ? malloc(sizeof(int32_t) * (size_t)n_pages) : NULL;
    for (int64_t t = 0; t < n_pages; t++) {
        table[t] = (int32_t)((t * 7 + 3) % pool);
        for (int64_t r = 0; r < P && t * P + r < F8_S; r++) {
            memcpy(kp + (table[t] * P + r) * F8_E, (const uint8_t *)k + (t * P + r) * F8_E, F8_E);
            memcpy(vp + (table[t] * P + r) * F8_EV, (const uint8_t *)v + (t * P + r) * F8_EV, F8_EV);
        }
    }
    attn_paged_rows kpg = {kp, dtype, pool, 1, P, F8_E, table, n_pages, F8_S, NULL, 0, false};
    attn_paged_rows vpg = {vp, dtype, pool, 1, P, F8_EV, table, n_pages, F8_S, NULL, 0, false};
    verbose_begin();
    attn_status st = P ? attn_sdpa_paged(&to, &tl, NULL, &tq, &kpg, &vpg, &o, err)
                       : attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &o, err);
    verbose_end(words[0], 32, words[2], 32);
    word_after(words[1], 32, verbose_last_line, " rows=");
    free(kp), free(vp), free(table);
    return st;
}

/*   - keys of every size a code holds (subnormals, the smallest and the
 *     largest, in whole vectors and in the last partial one) and values of
 *     every finite code; 1 and 3 query rows, 1 and 2 threads;
 *   - the same rows paged, pages of 16, 17 and 256: bitwise the dense call;
 *   - per-head scales (k_descale, v_descale): bitwise the f32 call with the
 *     scale times s_k (in f64) and the output times s_v (one rounding);
 *   - a NaN code (and e5m2's infinities) in one key or one value, in a
 *     whole vector and in the last partial one: both calls give the slices
 *     to the exact kernel (the same fallback= count, not 0) and agree. */
static void test_fp8_in_place(attn_dtype format) {
    const char *fm = attn_dtype_name(format);
    bool e4m3 = format == ATTN_E4M3;
    uint8_t finite[256];
    int nf = 0;
    for (int c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        float x;
        attn_dequant_row(&x, &b, 1, format);
        if (isfinite(x)) finite[nf++] = b;
    }
    uint8_t *kq = malloc(F8_S * F8_E), *vq = malloc(F8_S * F8_EV);
    float *kd = malloc(sizeof(float) * F8_S * F8_E), *vd = malloc(sizeof(float) * F8_S * F8_EV);
    /* keys below 8 in size (exponent fields up to 9 for e4m3, 17 for e5m2),
     * subnormals among them; row 5 and row 690 (a group's and the tail's)
     * the smallest and largest codes, in lanes 0, 1 and the last two */
    int top = e4m3 ? 0x50 : 0x48;
    for (int i = 0; i < F8_S * F8_E; i++) kq[i] = (uint8_t)((uniform() < 0.5 ? 0x80 : 0) | (int)(uniform() * top));
    for (int i = 0; i < F8_S * F8_EV; i++) vq[i] = finite[(int)(uniform() * nf) % nf];
    uint8_t big = e4m3 ? 0x7e : 0x7b;
    for (int r = 5; r < F8_S; r += 685)
        kq[r * F8_E] = big, kq[r * F8_E + 1] = 0x01, kq[r * F8_E + F8_E - 2] = 0x81, kq[r * F8_E + F8_E - 1] = 0x80 | big;
    float *q = rows_of(F8_HQ * F8_LMAX, F8_E, false);
    for (int r = 0; r < F8_HQ * F8_LMAX; r++) q[r * F8_E] *= 1e-3f, q[r * F8_E + F8_E - 1] *= 1e-3f; /* the largest keys' lanes */
    size_t no = F8_HQ * F8_LMAX * F8_EV;
    float *out[2] = {calloc(no, 4), calloc(no, 4)}, lse[2][F8_HQ * F8_LMAX];
    char w[2][3][32], name[128];
    attn_error err;
    /* edits: none; a NaN key lane 3 / the last lane; a NaN value; e5m2: inf key, inf value */
    enum { EDITS = 7 };
    static const char *const EDIT[EDITS] = {"finite", "nan_key_whole_vector", "nan_key_last_vector", "nan_value",
                                            "nan_value_last_vector", "inf_key", "inf_value"};
    for (int ed = 0; ed < EDITS; ed++) {
        if (ed >= 5 && e4m3) continue; /* e4m3 has no infinity */
        uint8_t nan = e4m3 ? 0x7f : 0x7e, inf = 0x7c, *at = NULL, keep = 0;
        switch (ed) {
        case 1: at = &kq[400 * F8_E + 3], keep = *at, *at = 0x80 | nan; break;
        case 2: at = &kq[699 * F8_E + F8_E - 1], keep = *at, *at = nan; break;
        case 3: at = &vq[17 * F8_EV + 5], keep = *at, *at = nan; break;
        case 4: at = &vq[698 * F8_EV + F8_EV - 1], keep = *at, *at = 0x80 | nan; break;
        case 5: at = &kq[300 * F8_E + 50], keep = *at, *at = 0x80 | inf; break;
        case 6: at = &vq[300 * F8_EV + 70], keep = *at, *at = inf; break;
        default: break;
        }
        for (int r = 0; r < F8_S; r++)
            attn_dequant_row(kd + r * F8_E, kq + r * F8_E, F8_E, format),
                attn_dequant_row(vd + r * F8_EV, vq + r * F8_EV, F8_EV, format);
        for (int64_t L = 1; L <= F8_LMAX; L += 2)
            for (int threads = 1; threads <= 2; threads++) {
                attn_set_num_threads(threads);
                attn_status s0 = fp8_call(out[0], lse[0], w[0], q, L, kd, vd, ATTN_F32, 0, 0, 0, 0, &err);
                static const int64_t PAGES[4] = {0, 16, 17, 256};
                for (int pg = 0; pg < 4; pg++) {
                    memset(out[1], 0, no * 4);
                    attn_status s1 = fp8_call(out[1], lse[1], w[1], q, L, kq, vq, format, PAGES[pg], 0, 0, 0, &err);
                    size_t n = (size_t)(F8_HQ * L);
                    bool same = same_floats(out[0], out[1], n * F8_EV) && same_floats(lse[0], lse[1], n);
                    bool fb_ok = !strcmp(w[0][2], w[1][2]) && (ed == 0) == !strncmp(w[1][2], "0/", 2);
                    snprintf(name, sizeof name, "%s_decode_rows_%s_%s_L%lld_threads%d_%s%lld_bitwise_f32", fm, fp8_rows_expected(),
                             EDIT[ed], (long long)L, threads, pg ? "pages" : "dense", (long long)PAGES[pg]);
                    check(!s0 && !s1 && same && fb_ok && !strcmp(w[0][0], "decode") && !strcmp(w[1][0], "decode") &&
                              !strcmp(w[0][1], "in_place") && !strcmp(w[1][1], fp8_rows_expected()),
                          name, "status %d %d, kernels %s %s, rows=%s %s (want in_place %s), fallback %s %s, %s", (int)s0,
                          (int)s1, w[0][0], w[1][0], w[0][1], w[1][1], fp8_rows_expected(), w[0][2], w[1][2],
                          same ? "same" : "differs");
                }
                if (ed == 0) { /* per-head scales: the f32 call with scale · s_k, then out · s_v */
                    const float KS = 0.375f, VS = 2.5f;
                    attn_status s1 = fp8_call(out[1], lse[1], w[1], q, L, kq, vq, format, 0, KS, VS, 0, &err);
                    attn_status s2 = fp8_call(out[0], lse[0], w[0], q, L, kd, vd, ATTN_F32, 0, 0, 0,
                                              1 / sqrt((double)F8_E) * (double)KS, &err);
                    size_t n = (size_t)(F8_HQ * L);
                    for (size_t i = 0; i < n * F8_EV; i++) out[0][i] = (float)((double)out[0][i] * VS);
                    snprintf(name, sizeof name, "%s_decode_rows_%s_scales_L%lld_threads%d_bitwise_f32_scaled", fm,
                             fp8_rows_expected(), (long long)L, threads);
                    check(!s1 && !s2 && same_floats(out[0], out[1], n * F8_EV) && same_floats(lse[0], lse[1], n) &&
                              !strcmp(w[1][0], "decode") && !strcmp(w[1][1], fp8_rows_expected()),
                          name, "status %d %d, kernel %s rows=%s, out %s, lse %s", (int)s1, (int)s2, w[1][0], w[1][1],
                          same_floats(out[0], out[1], n * F8_EV) ? "same" : "differs",
                          same_floats(lse[0], lse[1], n) ? "same" : "differs");
                }
                attn_set_num_threads(0);
            }
        if (at) *at = keep;
    }
    free(kq), free(vq), free(kd), free(vd), free(q), free(out[0]), free(out[1]);
}

/* q4_1 keys and values read in place by decode too (decode_rows.h's q4_1
 * kind, dot_rows_q and axpy_rows_q): the verbose line says rows=in_place
 * on every set that has dot_rows_q (widened on the portable set), and the
 * result is bitwise the f32 call on the widened rows, 1 and 2 threads. */
static void test_q4_1_in_place(void) {
    enum { HQ = 4, S = 300, E = 64 };
    const char *want = attn_ukernels_active()->dot_rows_q ? "in_place" : "widened";
    float *k = rows_of(S, E, false), *v = rows_of(S, E, false), *q = rows_of(HQ, E, false), *kb, *vb;
    uint8_t *kq, *vq;
    quantize_rows(&kq, &kb, k, S, E, ATTN_Q4_1), quantize_rows(&vq, &vb, v, S, E, ATTN_Q4_1);
    int64_t sq[3] = {HQ, 1, E}, skv[3] = {1, S, E};
    float out[2][HQ * E], lse[2][HQ];
    char kernel[2][32], rows[2][32], fallback[32], name[96];
    for (int threads = 1; threads <= 2; threads++) {
        attn_set_num_threads(threads);
        attn_status st[2];
        for (int quant = 0; quant < 2; quant++) {
            attn_tensor tq, tk, tv, to, tl;
            int64_t sl[2] = {HQ, 1};
            attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out[quant], ATTN_F32, 3, sq, NULL, NULL);
            attn_tensor_init(&tl, lse[quant], ATTN_F32, 2, sl, NULL, NULL);
            attn_tensor_init(&tk, quant ? (void *)kq : kb, quant ? ATTN_Q4_1 : ATTN_F32, 3, skv, NULL, NULL);
            attn_tensor_init(&tv, quant ? (void *)vq : vb, quant ? ATTN_Q4_1 : ATTN_F32, 3, skv, NULL, NULL);
            attn_sdpa_options o = attn_sdpa_options_default();
            attn_error err;
            verbose_begin();
            st[quant] = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &o, &err);
            verbose_end(kernel[quant], 32, fallback, sizeof fallback);
            word_after(rows[quant], 32, verbose_last_line, " rows=");
        }
        attn_set_num_threads(0);
        snprintf(name, sizeof name, "q4_1_decode_rows_%s_threads%d_bitwise_f32", want, threads);
        check(!st[0] && !st[1] && !memcmp(out[0], out[1], sizeof out[0]) && !memcmp(lse[0], lse[1], sizeof lse[0]) &&
                  !strcmp(kernel[1], "decode") && !strcmp(rows[1], want),
              name, "status %d %d, kernel %s rows=%s (want decode %s), out %s", (int)st[0], (int)st[1], kernel[1],
              rows[1], want, memcmp(out[0], out[1], sizeof out[0]) ? "differs" : "same");
    }
    free(k), free(v), free(q), free(kb), free(vb), free(kq), free(vq);
}

/* A batch of sequences over one quantized pool (attn_sdpa_varlen_paged):
 * each sequence bitwise attn_sdpa_paged's on it alone. */
static void test_varlen(attn_dtype format) {
    enum { B = 3, HQ = 4, HK = 2, E = 64, P = 16 };
    const int64_t Lq[B] = {1, 40, 0}, Lk[B] = {900, 300, 50};
    int64_t pages_total = 0, n_pages[B], cu_q[B + 1] = {0};
    for (int b = 0; b < B; b++) n_pages[b] = (Lk[b] + P - 1) / P, pages_total += n_pages[b], cu_q[b + 1] = cu_q[b] + Lq[b];
    int64_t row = (int64_t)attn_quant_row_size(format, E), rows = pages_total * HK * P;
    float *x = rows_of(rows, E, true);
    uint8_t *kp, *vp;
    float *back;
    quantize_rows(&kp, &back, x, rows, E, format);
    free(back), free(x);
    x = rows_of(rows, E, false);
    quantize_rows(&vp, &back, x, rows, E, format);
    free(back), free(x);
    (void)row;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)pages_total);
    for (int64_t t = 0; t < pages_total; t++) table[t] = (int32_t)((t * 7 + 3) % pages_total); /* 7 is prime to the count */
    attn_paged_rows kpg[B], vpg[B];
    for (int b = 0, first = 0; b < B; first += (int)n_pages[b], b++) {
        kpg[b] = (attn_paged_rows){kp, format, pages_total, HK, P, E, table + first, n_pages[b], Lk[b], NULL, 0, false};
        vpg[b] = (attn_paged_rows){vp, format, pages_total, HK, P, E, table + first, n_pages[b], Lk[b], NULL, 0, false};
    }
    int64_t T = cu_q[B];
    float *q = rows_of(T * HQ, E, false), *out = calloc((size_t)(T * HQ * E), 4), *lse = calloc((size_t)(T * HQ), 4);
    float *one = calloc((size_t)(T * HQ * E), 4), *one_lse = calloc((size_t)(T * HQ), 4);
    attn_tensor tq, to, tl;
    int64_t sq[3] = {T, HQ, E}, sl[2] = {T, HQ};
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    char name[96], kernel[32];
    snprintf(name, sizeof name, "%s_varlen_paged_batch_bitwise_each_alone", attn_dtype_name(format));
    verbose_begin();
    attn_status st = attn_sdpa_varlen_paged(&to, &tl, &tq, cu_q, B, kpg, vpg, NULL, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    char dtype[32];
    k_dtype(dtype, sizeof dtype);
    if (st) {
        check(0, name, "%s", err.message);
    } else {
        bool same = true;
        for (int b = 0; b < B && same; b++) {
            if (!Lq[b]) continue;
            /* sequence b alone: q (HQ, Lq, E) over the packed (T, HQ, E) rows */
            attn_tensor bq, bo, bl;
            int64_t s3[3] = {HQ, Lq[b], E}, st3[3] = {E, HQ * E, 1}, s2[2] = {HQ, Lq[b]}, st2[2] = {1, HQ};
            attn_tensor_init(&bq, q + cu_q[b] * HQ * E, ATTN_F32, 3, s3, st3, NULL);
            attn_tensor_init(&bo, one + cu_q[b] * HQ * E, ATTN_F32, 3, s3, st3, NULL);
            attn_tensor_init(&bl, one_lse + cu_q[b] * HQ, ATTN_F32, 2, s2, st2, NULL);
            if (attn_sdpa_paged(&bo, &bl, NULL, &bq, &kpg[b], &vpg[b], &o, &err)) same = false;
        }
        same = same && !memcmp(out, one, sizeof(float) * (size_t)(T * HQ * E)) &&
               !memcmp(lse, one_lse, sizeof(float) * (size_t)(T * HQ));
        check(same && strstr(verbose_last_line, "sdpa_varlen_paged") && !strcmp(dtype, attn_dtype_name(format)), name,
              "same %d, line: %s", (int)same, verbose_last_line);
    }
    free(kp), free(vp), free(table), free(q), free(out), free(lse), free(one), free(one_lse);
}

/* Pages of an odd number of positions (17), of 16 and of 24 against one
 * contiguous cache of the same rows: attention bitwise equal, for one query
 * and for three (bottom-right causal, GQA), with 1 and 3 threads. Where the
 * integer set's values take keys in groups (value_dot bf16: pairs; int8:
 * 16 keys a weight scale), a group that crosses pages is copied side by
 * side, as it lies in the contiguous cache (decode.c, group_across). */
static void test_odd_pages(attn_dtype format, int64_t P) {
    enum { HK = 2, HQ = 4, E = 64, N = 151 };
    char name[96];
    const char *fm = attn_dtype_name(format);
    attn_kv_pages_desc pd = attn_kv_pages_desc_default();
    pd.heads = HK, pd.key_dim = E, pd.value_dim = E, pd.dtype = format, pd.page_size = P;
    pd.num_pages = (N + P - 1) / P, pd.max_sequences = 1;
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.heads = HK, cd.key_dim = E, cd.value_dim = E, cd.dtype = format, cd.capacity = N;
    size_t pbytes = 0, cbytes = 0;
    attn_error err = {0};
    attn_kv_pages *pool = NULL;
    attn_kv_cache *cache = NULL;
    void *pmem = NULL, *cmem = NULL;
    float *kf = rows_of(N * HK, E, true), *vf = rows_of(N * HK, E, false); /* (N, Hk, E) */
    int64_t seq = 0, sh[3] = {N, HK, E}, cu[2] = {0, N}, shc[3] = {HK, N, E}, stc[3] = {E, HK * E, 1};
    attn_tensor tk, tv, ck, cv;
    attn_tensor_init(&tk, kf, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&tv, vf, ATTN_F32, 3, sh, NULL, NULL);
    attn_tensor_init(&ck, kf, ATTN_F32, 3, shc, stc, NULL), attn_tensor_init(&cv, vf, ATTN_F32, 3, shc, stc, NULL);
    attn_status st = attn_kv_pages_bytes(&pbytes, &pd, &err);
    if (!st) st = attn_kv_cache_bytes(&cbytes, &cd, &err);
    if (!st && (!(pmem = malloc(pbytes)) || !(cmem = malloc(cbytes)))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_kv_pages_init(&pool, pmem, pbytes, &pd, &err);
    if (!st) st = attn_kv_cache_init(&cache, cmem, cbytes, &cd, &err);
    if (!st) st = attn_kv_pages_create(pool, &seq, &err);
    if (!st) st = attn_kv_pages_append(pool, &seq, 1, &tk, &tv, cu, &err);
    if (!st) st = attn_kv_cache_append(cache, &ck, &cv, &err);
    for (int64_t L = 1; L <= 3 && !st; L += 2)
        for (int threads = 1; threads <= 3; threads += 2) {
            float *q = rows_of(L * HQ, E, false), *o[2], *l[2];
            int64_t sqp[3] = {L, HQ, E}, sqc[3] = {HQ, L, E}, stq[3] = {E, HQ * E, 1}, slp[2] = {L, HQ}, slc[2] = {HQ, L},
                    stl[2] = {1, HQ}, cu_q[2] = {0, L};
            attn_tensor pq, po, pl, cq, co, cl;
            for (int w = 0; w < 2; w++) o[w] = calloc((size_t)(L * HQ * E), 4), l[w] = calloc((size_t)(L * HQ), 4);
            attn_tensor_init(&pq, q, ATTN_F32, 3, sqp, NULL, NULL), attn_tensor_init(&po, o[0], ATTN_F32, 3, sqp, NULL, NULL);
            attn_tensor_init(&pl, l[0], ATTN_F32, 2, slp, NULL, NULL);
            attn_tensor_init(&cq, q, ATTN_F32, 3, sqc, stq, NULL), attn_tensor_init(&co, o[1], ATTN_F32, 3, sqc, stq, NULL);
            attn_tensor_init(&cl, l[1], ATTN_F32, 2, slc, stl, NULL);
            attn_sdpa_options op = attn_sdpa_options_default();
            op.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            attn_set_num_threads(threads);
            char kernel[32], vdot[32];
            verbose_begin();
            attn_status s0 = attn_kv_pages_attend(&po, &pl, &pq, cu_q, &seq, 1, pool, NULL, &op, &err);
            verbose_end(kernel, sizeof kernel, NULL, 0);
            value_dot_shown(vdot, sizeof vdot);
            attn_status s1 = attn_kv_cache_attend(&co, &cl, &cq, cache, &op, &err);
            attn_set_num_threads(0);
            if (P == 17) snprintf(name, sizeof name, "%s_odd_pages_bitwise_contiguous_cache_L%lld_threads%d", fm, (long long)L, threads);
            else snprintf(name, sizeof name, "%s_pages%lld_bitwise_contiguous_cache_L%lld_threads%d", fm, (long long)P, (long long)L, threads);
            check(!s0 && !s1 && !strcmp(kernel, "decode") && !strcmp(vdot, value_dot_expected(format)) &&
                      !memcmp(o[0], o[1], sizeof(float) * (size_t)(L * HQ * E)) &&
                      !memcmp(l[0], l[1], sizeof(float) * (size_t)(L * HQ)),
                  name, "status %d/%d, kernel %s, value_dot %s (want %s), out %s", (int)s0, (int)s1, kernel, vdot,
                  value_dot_expected(format), memcmp(o[0], o[1], sizeof(float) * (size_t)(L * HQ * E)) ? "differs" : "same");
            free(q);
            for (int w = 0; w < 2; w++) free(o[w]), free(l[w]);
        }
    if (st) check(0, "odd_pages_setup", "%s: %s", fm, err.message);
    free(kf), free(vf), free(pmem), free(cmem);
}

/* A paged KV cache of quantized rows (attn_kv_pages with dtype q8, q4, e4m3
 * or e5m2): append quantizes each row as attn_quantize does (in pieces of
 * any size, through a fork's copy on write), gather gives the widened rows,
 * and attend, one call for two sequences, gives bitwise what attn_sdpa gives
 * on the gathered f32 rows. */
static void test_pool(attn_dtype format) {
    enum { HK = 2, HQ = 4, E = 64, N = 100 };
    char name[96];
    const char *fm = attn_dtype_name(format);
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = HK, d.key_dim = E, d.value_dim = E, d.dtype = format, d.page_size = 16, d.num_pages = 32,
    d.max_sequences = 4;
    size_t bytes = 0;
    attn_error err;
    attn_kv_pages *pool = NULL;
    void *mem = NULL;
    snprintf(name, sizeof name, "%s_pool_init", fm);
    if (attn_kv_pages_bytes(&bytes, &d, &err) || !(mem = malloc(bytes)) || attn_kv_pages_init(&pool, mem, bytes, &d, &err)) {
        check(0, name, "%s", err.message);
        free(mem);
        return;
    }
    /* The rows: (N + 8, Hk, E) keys (outlier channels) and values. */
    float *kf = rows_of((N + 8) * HK, E, true), *vf = rows_of((N + 8) * HK, E, false);
    int64_t a, b;
    attn_kv_pages_create(pool, &a, &err);
    int64_t pieces[4] = {0, 37, 38, N}; /* 37 rows, 1, then 62 */
    attn_status st = ATTN_OK;
    for (int i = 0; i < 3 && !st; i++) {
        int64_t n = pieces[i + 1] - pieces[i], sh[3] = {n, HK, E}, cu[2] = {0, n};
        attn_tensor tk, tv;
        attn_tensor_init(&tk, kf + pieces[i] * HK * E, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&tv, vf + pieces[i] * HK * E, ATTN_F32, 3, sh, NULL, NULL);
        st = attn_kv_pages_append(pool, &a, 1, &tk, &tv, cu, &err);
    }
    if (!st) st = attn_kv_pages_fork(pool, &b, a, &err);
    if (!st) { /* both append in one call: b's copy of the shared last page, then a's own rows */
        int64_t seqs[2] = {b, a}, cu[3] = {0, 5, 8}, sh[3] = {8, HK, E};
        attn_tensor tk, tv;
        attn_tensor_init(&tk, kf + N * HK * E, ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&tv, vf + N * HK * E, ATTN_F32, 3, sh, NULL, NULL);
        st = attn_kv_pages_append(pool, seqs, 2, &tk, &tv, cu, &err);
    }
    snprintf(name, sizeof name, "%s_pool_append_fork", fm);
    check(!st, name, "%s", err.message);
    if (st) {
        free(kf), free(vf), free(mem);
        return;
    }
    /* What each sequence must hold: its rows quantized one by one, widened;
     * laid out (Hk, len, E). a: rows 0..99 and 105..107; b: 0..99, 100..104. */
    const int64_t len[2] = {N + 3, N + 5};
    float *want[2][2], *got[2][2];
    bool same = true;
    for (int s2 = 0; s2 < 2; s2++)
        for (int kv = 0; kv < 2; kv++) {
            const float *src = kv ? vf : kf;
            want[s2][kv] = malloc(sizeof(float) * (size_t)(HK * len[s2] * E));
            got[s2][kv] = malloc(sizeof(float) * (size_t)(HK * len[s2] * E));
            for (int64_t h = 0; h < HK; h++)
                for (int64_t j = 0; j < len[s2]; j++) {
                    int64_t from = j < N ? j : s2 == 0 ? j + 5 : j;
                    uint8_t rowq[256];
                    attn_quant_row(rowq, src + (from * HK + h) * E, E, format);
                    attn_dequant_row(want[s2][kv] + (h * len[s2] + j) * E, rowq, E, format);
                }
        }
    for (int s2 = 0; s2 < 2; s2++) {
        attn_tensor gk, gv;
        int64_t sh[3] = {HK, len[s2], E};
        attn_tensor_init(&gk, got[s2][0], ATTN_F32, 3, sh, NULL, NULL);
        attn_tensor_init(&gv, got[s2][1], ATTN_F32, 3, sh, NULL, NULL);
        if (attn_kv_pages_gather(&gk, &gv, pool, s2 ? b : a, &err)) same = false;
        for (int kv = 0; kv < 2; kv++)
            same = same && !memcmp(got[s2][kv], want[s2][kv], sizeof(float) * (size_t)(HK * len[s2] * E));
    }
    snprintf(name, sizeof name, "%s_pool_gather_bitwise_rows_quantized_alone", fm);
    check(same, name, "gathered rows differ from each row quantized alone");

    /* One query each, one call; then attn_sdpa on the gathered rows. */
    float *q = rows_of(2 * HQ, E, false), *out = calloc(2 * HQ * E, 4), *lse = calloc(2 * HQ, 4);
    float *out1 = calloc(2 * HQ * E, 4), *lse1 = calloc(2 * HQ, 4);
    int64_t sq[3] = {2, HQ, E}, sl[2] = {2, HQ}, cu_q[3] = {0, 1, 2}, seqs[2] = {a, b};
    attn_tensor tq, to, tl;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    char kernel[32], dtype[32];
    verbose_begin();
    st = attn_kv_pages_attend(&to, &tl, &tq, cu_q, seqs, 2, pool, NULL, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    k_dtype(dtype, sizeof dtype);
    char kdot[32];
    key_dot_shown(kdot, sizeof kdot);
    bool line_ok = strstr(verbose_last_line, "sdpa_varlen_paged") && !strcmp(dtype, fm) && !strcmp(kernel, "decode") &&
                   !strcmp(kdot, key_dot_expected(format));
    char line[1024];
    memcpy(line, verbose_last_line, sizeof line);
    same = !st;
    for (int s2 = 0; s2 < 2 && same; s2++) {
        attn_tensor bq, bo, bl, gk, gv;
        int64_t s3[3] = {HQ, 1, E}, sk[3] = {HK, len[s2], E}, s2d[2] = {HQ, 1};
        attn_tensor_init(&bq, q + s2 * HQ * E, ATTN_F32, 3, s3, NULL, NULL);
        attn_tensor_init(&bo, out1 + s2 * HQ * E, ATTN_F32, 3, s3, NULL, NULL);
        attn_tensor_init(&bl, lse1 + s2 * HQ, ATTN_F32, 2, s2d, NULL, NULL);
        attn_tensor_init(&gk, got[s2][0], ATTN_F32, 3, sk, NULL, NULL);
        attn_tensor_init(&gv, got[s2][1], ATTN_F32, 3, sk, NULL, NULL);
        same = !attn_sdpa(&bo, &bl, NULL, &bq, &gk, &gv, &o, &err);
    }
    if (kdot[0]) { /* the integer kernel: against the f64 reference on the gathered rows */
        double bound = 0, tight = 0;
        for (int s2 = 0; s2 < 2; s2++)
            for (int64_t h = 0; h < HQ; h++)
                key_dot_row(&bound, &tight, q + (s2 * HQ + h) * E, got[s2][0] + h / (HQ / HK) * len[s2] * E, E,
                            got[s2][1] + h / (HQ / HK) * len[s2] * E, E, len[s2], E, E, out + (s2 * HQ + h) * E, 1,
                            lse[s2 * HQ + h], bf16_values(format));
        snprintf(name, sizeof name, "%s_pool_attend_key_dot_within_bound", fm);
        check(same && line_ok && bound <= 1 && tight <= 1, name,
              "status %d (%s), error/bound %.3g, error/f32 bound %.3g, line: %s", (int)st, st ? err.message : "", bound,
              tight, line);
    } else {
        same = same && !memcmp(out, out1, sizeof(float) * 2 * HQ * E) && !memcmp(lse, lse1, sizeof(float) * 2 * HQ);
        snprintf(name, sizeof name, "%s_pool_attend_bitwise_sdpa_on_gathered_f32", fm);
        check(same && line_ok, name, "status %d (%s), same %d, line: %s", (int)st, st ? err.message : "", (int)same, line);
    }

    /* f16 out of a gather: the widened values rounded to f16. */
    uint16_t *g16 = malloc(2 * (size_t)(HK * len[0] * E)), *v16 = malloc(2 * (size_t)(HK * len[0] * E));
    attn_tensor gk, gv;
    int64_t sk[3] = {HK, len[0], E};
    attn_tensor_init(&gk, g16, ATTN_F16, 3, sk, NULL, NULL);
    attn_tensor_init(&gv, v16, ATTN_F16, 3, sk, NULL, NULL);
    st = attn_kv_pages_gather(&gk, &gv, pool, a, &err);
    int bad = 0;
    for (int64_t i = 0; i < HK * len[0] * E && !st; i++) bad += g16[i] != attn_f32_to_f16(want[0][0][i]);
    snprintf(name, sizeof name, "%s_pool_gather_to_f16", fm);
    check(!st && !bad, name, "status %d, %d values differ", (int)st, bad);

    /* Refusals: f64 rows to append, a row size q8 and q4 cannot take. */
    int64_t sh[3] = {1, HK, E}, cu[2] = {0, 1};
    double d64[HK * E] = {0};
    attn_tensor t64;
    attn_tensor_init(&t64, d64, ATTN_F64, 3, sh, NULL, NULL);
    st = attn_kv_pages_append(pool, &a, 1, &t64, &t64, cu, &err);
    snprintf(name, sizeof name, "%s_pool_refuses_f64_rows", fm);
    check(st == ATTN_ERR_DTYPE, name, "status %d: %s", (int)st, err.message);
    attn_kv_pages_desc bad_d = d;
    bad_d.key_dim = 40;
    st = attn_kv_pages_bytes(&bytes, &bad_d, &err);
    snprintf(name, sizeof name, "%s_pool_key_dim_40", fm);
    if (format == ATTN_Q8 || format == ATTN_Q4 || format == ATTN_Q4_1)
        check(st == ATTN_ERR_SHAPE && strstr(err.message, "key_dim is 40"), name, "status %d: %s", (int)st, err.message);
    else
        check(st == ATTN_OK, name, "status %d: %s", (int)st, err.message);

    free(g16), free(v16);
    for (int s2 = 0; s2 < 2; s2++)
        for (int kv = 0; kv < 2; kv++) free(want[s2][kv]), free(got[s2][kv]);
    free(q), free(out), free(lse), free(out1), free(lse1), free(kf), free(vf), free(mem);
}

/* attn_sdpa with quantized k and v tensors (attn_tensor_init with a
 * quantized dtype: strides in bytes but the last), laid out (B, S, Hk, E)
 * and seen as (B, Hk, S, E) through their strides; and attn_sdpa_varlen
 * on packed (total, Hk, E) quantized rows: bitwise the same calls on the
 * widened f32 rows. */
static void test_dense(attn_dtype format, int64_t L, int64_t S, const char *kernel_want) {
    enum { B = 2, HQ = 4, HK = 2, E = 64 };
    char name[96];
    const char *fm = attn_dtype_name(format);
    int64_t row = (int64_t)attn_quant_row_size(format, E), n = B * S * HK;
    float *kf = rows_of(n, E, true), *vf = rows_of(n, E, false), *kd, *vd;
    uint8_t *kq, *vq;
    quantize_rows(&kq, &kd, kf, n, E, format);
    quantize_rows(&vq, &vd, vf, n, E, format);
    float *q = rows_of(B * HQ * L, E, false);
    size_t no = (size_t)(B * HQ * L * E), nl = (size_t)(B * HQ * L);
    float *out[2] = {calloc(no, 4), calloc(no, 4)}, *lse[2] = {calloc(nl, 4), calloc(nl, 4)};
    /* (B, S, Hk, E) memory seen as (B, Hk, S, E) */
    int64_t sk[4] = {B, HK, S, E}, qstr[4] = {S * HK * row, row, HK * row, 1}, fstr[4] = {S * HK * E, E, HK * E, 1};
    int64_t sq[4] = {B, HQ, L, E}, sl[3] = {B, HQ, L};
    attn_tensor tq, tk[2], tv[2], to[2], tl[2];
    attn_status st = attn_tensor_init(&tq, q, ATTN_F32, 4, sq, NULL, NULL);
    st = st ? st : attn_tensor_init(&tk[0], kd, ATTN_F32, 4, sk, fstr, NULL);
    st = st ? st : attn_tensor_init(&tv[0], vd, ATTN_F32, 4, sk, fstr, NULL);
    st = st ? st : attn_tensor_init(&tk[1], kq, format, 4, sk, qstr, NULL);
    st = st ? st : attn_tensor_init(&tv[1], vq, format, 4, sk, qstr, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err[2];
    char kernel[2][32], dtype[32] = "", kdot[32] = "";
    attn_status sts[2] = {st, st};
    for (int t = 0; t < 2 && !st; t++) {
        attn_tensor_init(&to[t], out[t], ATTN_F32, 4, sq, NULL, NULL);
        attn_tensor_init(&tl[t], lse[t], ATTN_F32, 3, sl, NULL, NULL);
        verbose_begin();
        sts[t] = attn_sdpa(&to[t], &tl[t], NULL, &tq, &tk[t], &tv[t], &o, &err[t]);
        verbose_end(kernel[t], sizeof kernel[t], NULL, 0);
        if (t) k_dtype(dtype, sizeof dtype), key_dot_shown(kdot, sizeof kdot);
    }
    const char *kd_want = strcmp(kernel_want, "decode") == 0 ? key_dot_expected(format) : "";
    snprintf(name, sizeof name, "%s_sdpa_dense_tensors_%s_L%lld_S%lld", fm, kernel_want, (long long)L, (long long)S);
    if (st || sts[0] || sts[1])
        check(0, name, "status %d %d %d: %s", (int)st, (int)sts[0], (int)sts[1], sts[1] ? err[1].message : err[0].message);
    else if (kd_want[0]) {
        double bound = 0, tight = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < HQ; h++)
                for (int64_t l = 0; l < L; l++) {
                    int64_t r = (b * HQ + h) * L + l, hk = h / (HQ / HK);
                    key_dot_row(&bound, &tight, q + r * E, kd + (b * S * HK + hk) * E, HK * E, vd + (b * S * HK + hk) * E,
                                HK * E, S - L + l + 1, E, E, out[1] + r * E, 1, lse[1][r],
                                bf16_values(format));
                }
        snprintf(name, sizeof name, "%s_sdpa_dense_tensors_decode_L%lld_S%lld_key_dot_within_bound", fm, (long long)L,
                 (long long)S);
        check(!strcmp(kernel[1], "decode") && !strcmp(kdot, kd_want) && !strcmp(dtype, fm) && bound <= 1 && tight <= 1,
              name, "kernel %s key_dot %s, error/bound %.3g, error/f32 bound %.3g", kernel[1], kdot, bound, tight);
    } else
        check(!memcmp(out[0], out[1], no * 4) && !memcmp(lse[0], lse[1], nl * 4) && !strcmp(kernel[0], kernel_want) &&
                  !strcmp(kernel[1], kernel_want) && !strcmp(dtype, fm),
              name, "out %s, lse %s, kernels %s %s, k shown as %s", memcmp(out[0], out[1], no * 4) ? "differs" : "same",
              memcmp(lse[0], lse[1], nl * 4) ? "differs" : "same", kernel[0], kernel[1], dtype);

    /* The same rows packed as a ragged batch of B sequences (S rows each):
     * (B·S, Hk, E), queries (B·L, Hq, E). */
    int64_t cu_q[B + 1], cu_k[B + 1];
    for (int b = 0; b <= B; b++) cu_q[b] = b * L, cu_k[b] = b * S;
    int64_t pk[3] = {B * S, HK, E}, pq[3] = {B * L, HQ, E}, pl[2] = {B * L, HQ};
    attn_tensor vk[2], vv[2], pqt, vo[2], vl[2];
    attn_tensor_init(&pqt, q, ATTN_F32, 3, pq, NULL, NULL);
    attn_tensor_init(&vk[0], kd, ATTN_F32, 3, pk, NULL, NULL);
    attn_tensor_init(&vv[0], vd, ATTN_F32, 3, pk, NULL, NULL);
    attn_tensor_init(&vk[1], kq, format, 3, pk, NULL, NULL);
    attn_tensor_init(&vv[1], vq, format, 3, pk, NULL, NULL);
    for (int t = 0; t < 2; t++) {
        attn_tensor_init(&vo[t], out[t], ATTN_F32, 3, pq, NULL, NULL);
        attn_tensor_init(&vl[t], lse[t], ATTN_F32, 2, pl, NULL, NULL);
        sts[t] = attn_sdpa_varlen(&vo[t], &vl[t], &pqt, &vk[t], &vv[t], cu_q, cu_k, B, NULL, &o, &err[t]);
    }
    /* (A sequence of a ragged batch is split as it would be alone, so its
     * chunks differ from the batched tensors' call: the integer kernel's
     * results are checked against the reference here.) */
    snprintf(name, sizeof name, "%s_sdpa_varlen_packed_L%lld_S%lld%s", fm, (long long)L, (long long)S,
             kd_want[0] ? "_key_dot_within_bound" : "");
    if (sts[0] || sts[1]) check(0, name, "%s", sts[1] ? err[1].message : err[0].message);
    else if (kd_want[0]) {
        double bound = 0, tight = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t h = 0; h < HQ; h++) { /* packed (B·L, Hq, E) */
                    int64_t r = (b * L + l) * HQ + h, hk = h / (HQ / HK);
                    key_dot_row(&bound, &tight, q + r * E, kd + (b * S * HK + hk) * E, HK * E, vd + (b * S * HK + hk) * E,
                                HK * E, S - L + l + 1, E, E, out[1] + r * E, 1, lse[1][r],
                                bf16_values(format));
                }
        check(bound <= 1 && tight <= 1, name, "error/bound %.3g, error/f32 bound %.3g", bound, tight);
    } else check(!memcmp(out[0], out[1], no * 4) && !memcmp(lse[0], lse[1], nl * 4), name, "differs");
    free(kf), free(vf), free(kd), free(vd), free(kq), free(vq), free(q);
    for (int t = 0; t < 2; t++) free(out[t]), free(lse[t]);
}

/* Quantized tensors the library refuses: described wrongly, or asked of a
 * call that takes float keys only. */
static void test_dense_errors(void) {
    uint8_t bytes[4 * 34 * 2] = {0};
    float q[64] = {0}, out[64], lse[2];
    double q64[64] = {0}, out64[64];
    attn_tensor t, tq, to, tl, tq64, to64;
    attn_error err;
    int64_t s40[2] = {2, 40}, s32[2] = {2, 32}, bad_str[2] = {34, 2}, s3[3] = {1, 2, 32}, sl[2] = {1, 2};
    attn_status st = attn_tensor_init(&t, bytes, ATTN_Q8, 2, s40, NULL, &err);
    check(st == ATTN_ERR_SHAPE && strstr(err.message, "multiple of 32"), "q8_tensor_rows_of_40", "status %d: %s",
          (int)st, err.message);
    st = attn_tensor_init(&t, bytes, ATTN_Q8, 2, s32, bad_str, &err);
    check(st == ATTN_ERR_STRIDE, "q8_tensor_values_apart", "status %d: %s", (int)st, err.message);
    st = attn_tensor_init(&t, bytes, ATTN_E4M3, 0, NULL, NULL, &err);
    check(st == ATTN_ERR_RANK, "e4m3_tensor_rank_0", "status %d: %s", (int)st, err.message);
    int64_t sk[3] = {1, 2, 32};
    attn_tensor_init(&t, bytes, ATTN_Q8, 3, sk, NULL, NULL);
    check(t.strides[0] == 68 && t.strides[1] == 34 && t.strides[2] == 1, "q8_tensor_default_strides_in_bytes",
          "strides %lld %lld %lld", (long long)t.strides[0], (long long)t.strides[1], (long long)t.strides[2]);
    attn_tensor_init(&tq, q, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&tq64, q64, ATTN_F64, 3, s3, NULL, NULL);
    attn_tensor_init(&to64, out64, ATTN_F64, 3, s3, NULL, NULL);
    st = attn_sdpa(&to64, NULL, NULL, &tq64, &t, &t, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "f32 q"), "q8_k_with_f64_q", "status %d: %s", (int)st, err.message);
    /* a hand-made tensor: rows of 40 values */
    attn_tensor hand = t;
    hand.shape[2] = 40;
    attn_tensor_init(&tq, q, ATTN_F32, 3, (int64_t[3]){1, 2, 40}, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, (int64_t[3]){1, 2, 40}, NULL, NULL);
    st = attn_sdpa(&to, NULL, NULL, &tq, &hand, &hand, NULL, &err);
    check(st == ATTN_ERR_SHAPE, "q8_hand_made_rows_of_40", "status %d: %s", (int)st, err.message);
    /* out over the quantized bytes */
    attn_tensor_init(&tq, q, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor over;
    attn_tensor_init(&over, bytes + 8, ATTN_F32, 3, s3, NULL, NULL);
    st = attn_sdpa(&over, NULL, NULL, &tq, &t, &t, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "out_over_q8_k", "status %d: %s", (int)st, err.message);
    attn_tensor_init(&to, out, ATTN_F32, 3, s3, NULL, NULL);
    st = attn_sdpa(&to, &tl, NULL, &tq, &t, &t, NULL, &err);
    float dq[64], dk[64], dv[64];
    attn_tensor tdq, tdk, tdv;
    attn_tensor_init(&tdq, dq, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&tdk, dk, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&tdv, dv, ATTN_F32, 3, s3, NULL, NULL);
    st = st ? st : attn_sdpa_backward(&tdq, &tdk, &tdv, NULL, &to, &tq, &t, &t, &to, &tl, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "backward"), "q8_backward_refused", "status %d: %s", (int)st,
          err.message);
    /* A k of no dtype attention takes (q4c is a cache's key format, not a
     * tensor's) is refused with the dtypes it does take: q4_1 among them. */
    attn_tensor grouped = t;
    grouped.dtype = ATTN_Q4C;
    st = attn_sdpa(&to, NULL, NULL, &tq, &grouped, &t, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "q4_1"), "q4c_k_refused_naming_every_dtype_taken",
          "status %d: %s", (int)st, err.message);
}

/* The contiguous KV cache of a quantized format: append in pieces
 * quantizes each row alone; gather widens; the view is of quantized rows;
 * attend (decode at L = 1, flash at L = 40) is bitwise attn_sdpa on the
 * gathered f32 rows. */
static void test_cache(attn_dtype format) {
    enum { B = 2, HK = 2, HQ = 4, E = 64, N = 3000 };
    char name[96];
    const char *fm = attn_dtype_name(format);
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = B, d.heads = HK, d.capacity = N + 64, d.key_dim = d.value_dim = E, d.dtype = format;
    size_t bytes;
    attn_error err;
    attn_kv_cache *cache;
    void *mem = NULL;
    snprintf(name, sizeof name, "%s_cache_init", fm);
    if (attn_kv_cache_bytes(&bytes, &d, &err) || !(mem = malloc(bytes)) ||
        attn_kv_cache_init(&cache, mem, bytes, &d, &err)) {
        check(0, name, "%s", err.message);
        free(mem);
        return;
    }
    /* rows (B, Hk, N + 40, E): N positions first, in pieces, then 40 more with the queries */
    int64_t total = N + 40;
    float *kf = rows_of(B * HK * total, E, true), *vf = rows_of(B * HK * total, E, false);
    int64_t pieces[4] = {0, 1000, 1001, N};
    attn_status st = ATTN_OK;
    int64_t shape[4] = {B, HK, 0, E}, strides[4] = {HK * total * E, total * E, E, 1};
    for (int i = 0; i < 3 && !st; i++) {
        attn_tensor tk, tv;
        shape[2] = pieces[i + 1] - pieces[i];
        attn_tensor_init(&tk, kf + pieces[i] * E, ATTN_F32, 4, shape, strides, NULL);
        attn_tensor_init(&tv, vf + pieces[i] * E, ATTN_F32, 4, shape, strides, NULL);
        st = attn_kv_cache_append(cache, &tk, &tv, &err);
    }
    snprintf(name, sizeof name, "%s_cache_append_in_pieces", fm);
    check(!st, name, "%s", st ? err.message : "");
    /* gather: each row quantized alone, widened */
    size_t nkv = (size_t)(B * HK * N * E);
    float *gk = malloc(4 * nkv), *gv = malloc(4 * nkv), *wk = malloc(4 * nkv), *wv = malloc(4 * nkv);
    for (int64_t r = 0; r < B * HK * N; r++) {
        int64_t bh = r / N, j = r % N;
        uint8_t q[256];
        attn_quant_row(q, kf + (bh * total + j) * E, E, format);
        attn_dequant_row(wk + r * E, q, E, format);
        attn_quant_row(q, vf + (bh * total + j) * E, E, format);
        attn_dequant_row(wv + r * E, q, E, format);
    }
    attn_tensor tgk, tgv, vk, vv;
    int64_t gs[4] = {B, HK, N, E};
    attn_tensor_init(&tgk, gk, ATTN_F32, 4, gs, NULL, NULL);
    attn_tensor_init(&tgv, gv, ATTN_F32, 4, gs, NULL, NULL);
    st = attn_kv_cache_gather(&tgk, &tgv, cache, &err);
    snprintf(name, sizeof name, "%s_cache_gather_bitwise_rows_quantized_alone", fm);
    check(!st && !memcmp(gk, wk, 4 * nkv) && !memcmp(gv, wv, 4 * nkv), name, "status %d (%s)", (int)st,
          st ? err.message : "values differ");
    st = attn_kv_cache_view(&vk, &vv, cache, 4, &err);
    snprintf(name, sizeof name, "%s_cache_view_is_quantized_rows", fm);
    check(!st && vk.dtype == format && vk.shape[2] == N && vk.strides[3] == 1 &&
              vk.strides[2] == (int64_t)attn_quant_row_size(format, E),
          name, "status %d, dtype %s, strides %lld %lld", (int)st, attn_dtype_name(vk.dtype), (long long)vk.strides[2],
          (long long)vk.strides[3]);
    /* attend: L = 1 then L = 40 new positions, against attn_sdpa on the gathered rows */
    const int64_t Ls[2] = {1, 40};
    const char *want[2] = {"decode", "flash"};
    for (int c = 0; c < 2; c++) {
        int64_t L = Ls[c];
        if (c == 1) { /* append the 39 rows after the first new one */
            attn_tensor tk, tv;
            shape[2] = L - 1;
            attn_tensor_init(&tk, kf + (N + 1) * E, ATTN_F32, 4, shape, strides, NULL);
            attn_tensor_init(&tv, vf + (N + 1) * E, ATTN_F32, 4, shape, strides, NULL);
            attn_kv_cache_append(cache, &tk, &tv, &err);
        } else {
            attn_tensor tk, tv;
            shape[2] = 1;
            attn_tensor_init(&tk, kf + N * E, ATTN_F32, 4, shape, strides, NULL);
            attn_tensor_init(&tv, vf + N * E, ATTN_F32, 4, shape, strides, NULL);
            attn_kv_cache_append(cache, &tk, &tv, &err);
        }
        int64_t S = attn_kv_cache_length(cache), sq[4] = {B, HQ, L, E}, sk[4] = {B, HK, S, E}, sl[3] = {B, HQ, L};
        size_t no = (size_t)(B * HQ * L * E), nk = (size_t)(B * HK * S * E);
        float *q = rows_of(B * HQ * L, E, false), *o[2] = {calloc(no, 4), calloc(no, 4)};
        float *l[2] = {calloc((size_t)(B * HQ * L), 4), calloc((size_t)(B * HQ * L), 4)};
        float *ak = malloc(4 * nk), *av = malloc(4 * nk);
        attn_tensor tq, to[2], tl[2], tak, tav;
        attn_tensor_init(&tq, q, ATTN_F32, 4, sq, NULL, NULL);
        attn_tensor_init(&tak, ak, ATTN_F32, 4, sk, NULL, NULL);
        attn_tensor_init(&tav, av, ATTN_F32, 4, sk, NULL, NULL);
        attn_status s0 = attn_kv_cache_gather(&tak, &tav, cache, &err);
        attn_sdpa_options opt = attn_sdpa_options_default();
        opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        char kernel[2][32], dtype[32] = "", kdot[32] = "", vdot[32] = "";
        attn_status s1 = s0, s2 = s0;
        for (int t = 0; t < 2 && !s0; t++) {
            attn_tensor_init(&to[t], o[t], ATTN_F32, 4, sq, NULL, NULL);
            attn_tensor_init(&tl[t], l[t], ATTN_F32, 3, sl, NULL, NULL);
            verbose_begin();
            attn_status x = t ? attn_kv_cache_attend(&to[t], &tl[t], &tq, cache, &opt, &err)
                              : attn_sdpa(&to[t], &tl[t], NULL, &tq, &tak, &tav, &opt, &err);
            verbose_end(kernel[t], sizeof kernel[t], NULL, 0);
            if (t) k_dtype(dtype, sizeof dtype), key_dot_shown(kdot, sizeof kdot), value_dot_shown(vdot, sizeof vdot), s2 = x;
            else s1 = x;
        }
        const char *kd_want = c == 0 ? key_dot_expected(format) : "";
        if (kd_want[0]) { /* the integer kernel: against the f64 reference on the gathered rows */
            double bound = 0, tight = 0;
            for (int64_t r = 0; r < B * HQ && !s0; r++) {
                int64_t kv = r / HQ * HK + r % HQ / (HQ / HK);
                key_dot_row(&bound, &tight, q + r * E, ak + kv * S * E, E, av + kv * S * E, E, S, E, E, o[1] + r * E, 1,
                            l[1][r], bf16_values(format));
            }
            snprintf(name, sizeof name, "%s_cache_attend_decode_L1_key_dot_within_bound", fm);
            check(!s0 && !s1 && !s2 && !strcmp(kernel[1], "decode") && !strcmp(kdot, kd_want) &&
                      !strcmp(vdot, value_dot_expected(format)) && bound <= 1 && tight <= 1 && !strcmp(dtype, fm),
                  name, "status %d %d %d, kernel %s key_dot %s value_dot %s (want %s), error/bound %.3g, error/f32 bound %.3g",
                  (int)s0, (int)s1, (int)s2, kernel[1], kdot, vdot, value_dot_expected(format), bound, tight);
        } else {
        snprintf(name, sizeof name, "%s_cache_attend_%s_L%lld_bitwise_sdpa_on_gathered", fm, want[c], (long long)L);
        check(!kdot[0] && !s0 && !s1 && !s2 && !memcmp(o[0], o[1], no * 4) && !memcmp(l[0], l[1], (size_t)(B * HQ * L) * 4) &&
                  !strcmp(kernel[0], want[c]) && !strcmp(kernel[1], want[c]) && !strcmp(dtype, fm),
              name, "status %d %d %d (%s), kernels %s %s, k shown as %s, out %s", (int)s0, (int)s1, (int)s2,
              s0 || s1 || s2 ? err.message : "", kernel[0], kernel[1], dtype,
              memcmp(o[0], o[1], no * 4) ? "differs" : "same");
        }
        free(q), free(o[0]), free(o[1]), free(l[0]), free(l[1]), free(ak), free(av);
    }
    attn_kv_cache_desc bad = d;
    bad.key_dim = 48;
    st = attn_kv_cache_bytes(&bytes, &bad, &err);
    snprintf(name, sizeof name, "%s_cache_key_dim_48", fm);
    if (format == ATTN_Q8 || format == ATTN_Q4 || format == ATTN_Q4_1)
        check(st == ATTN_ERR_SHAPE, name, "status %d: %s", (int)st, err.message);
    else
        check(st == ATTN_OK, name, "status %d: %s", (int)st, err.message);
    free(kf), free(vf), free(gk), free(gv), free(wk), free(wv), free(mem);
}

/* ---- keys quantized per channel (q4c, q2c) in decode --------------------
 * Decode scores a group's positions with integer dot products where the
 * set has a kernel for them (qdot.h, attn_qdot_groups; E a multiple of 32):
 * per group and query row q' = q·scale ∘ s is rounded to int8 per block of
 * 32 and the codes n meet it exactly, plus Σ q m in f32. Checked, for q4c
 * and q2c, a contiguous cache and a pool, GQA (8 query heads on 2), L = 1
 * and 3, lengths that leave residual (f16) rows, 1 and 3 threads:
 *   - the verbose line's key_dot= names the kernel ("" where the set has
 *     none: the groups are widened, ATTN_QDOT=widen or ATTN_ISA=c);
 *   - within attn.h's bound of the f64 reference on the dequantized keys:
 *     each score off by at most
 *       Δ_j = Σ_b (max_b |q'| / 127)(1/2 + 2^-10) Σ_{c in b} n_jc
 *             + (E/16 + 8) 2^-24 Σ_c |q_c| (s_c n_jc + |m_c|)
 *     (residual rows: f32's 2^-18 Σ |q k|), out within (e^(2Δ) - 1) max |v|,
 *     lse within Δ (and 1e-5 of f32 on top);
 *   - tightly: against the f64 reference on q' rounded as documented
 *     (written here from that text), within the f32 part alone;
 *   - within the same bound of the f32 kernels on the gathered
 *     (dequantized) keys: attn_sdpa on them, in this process;
 *   - bitwise the same with 1 and 3 threads;
 *   - no slice sent to the exact kernel (the line's fallback=0/...).
 * Where no kernel runs (key_dot ""), the call must be bitwise attn_sdpa on
 * the gathered keys instead. */

/* The group bytes of keys (HK, S, E) f32 as a cache holds them: rounded to
 * f16, quantized by attn_quantize, full groups only. */
static uint8_t *groups_of(const float *k, int64_t HK, int64_t S, int64_t E, attn_dtype format, size_t *gb) {
    int64_t full = S / 32 * 32;
    *gb = attn_quant_group_size(format, E);
    uint16_t *h = malloc(2 * (size_t)(HK * full * E + 1));
    for (int64_t hk = 0; hk < HK; hk++)
        for (int64_t i = 0; i < full * E; i++) h[hk * full * E + i] = attn_f32_to_f16(k[hk * S * E + i]);
    size_t size = *gb * (size_t)(HK * full / 32) + 1;
    uint8_t *g = malloc(size);
    int64_t shape[3] = {HK, full, E};
    attn_tensor t;
    attn_tensor_init(&t, h, ATTN_F16, 3, shape, NULL, NULL);
    if (full && attn_quantize(g, size, format, &t, NULL)) memset(g, 0, size);
    free(h);
    return g;
}

/* Channel c of position t of a group: code, scale, minimum (attn.h's layout). */
static int group_code(const uint8_t *g, int64_t E, attn_dtype format, int64_t t, int64_t c) {
    int bits = format == ATTN_Q4C ? 4 : 2, per = 8 / bits;
    return g[4 * E + t * (E / per) + c / per] >> (bits * (c % per)) & ((1 << bits) - 1);
}
static float group_field(const uint8_t *g, int64_t c) { return attn_f16_to_f32((uint16_t)(g[2 * c] | g[2 * c + 1] << 8)); }

/* The errors of one query row's out (Ev, stride 1) and lse against
 * attention over the f64 scores s (n) of the values v (row stride ldv),
 * each over its tolerance (out: (e^(2Δ) - 1 + 1e-5) max |v|, lse: Δ +
 * 1e-5 (1 + |lse|)), joined into *worst. */
static void softmax_within(double *worst, const double *s, int64_t n, double delta, const float *v, int64_t ldv,
                           int64_t Ev, const float *out, float lse) {
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) m = fmax(m, s[j]);
    for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
    for (int64_t e = 0; e < Ev; e++) {
        double ref = 0, vmax = 0;
        for (int64_t j = 0; j < n; j++) ref += exp(s[j] - m) * v[j * ldv + e], vmax = fmax(vmax, fabs(v[j * ldv + e]));
        ref /= sum;
        *worst = fmax(*worst, fabs(out[e] - ref) / ((expm1(2 * delta) + 1e-5) * vmax + 1e-30));
    }
    double ref_lse = m + log(sum);
    *worst = fmax(*worst, fabs(lse - ref_lse) / (delta + 1e-5 * (1 + fabs(ref_lse))));
    if (isnan(out[0]) || isnan(lse)) *worst = INFINITY;
}

/* One query row q (E, unscaled) against the S keys of one KV head: the
 * full groups' bytes g (gb each) and the keys as gathered (k, S × E, the
 * residual's among them), values v (S × Ev). Raises *bound, *tight and
 * *vs_f32 (out32, lse32: the f32 kernels on the gathered keys). */
static void group_row(double *bound, double *tight, double *vs_f32, const float *q, const uint8_t *g, size_t gb,
                      const float *k, const float *v, int64_t S, int64_t full, int64_t E, int64_t Ev,
                      attn_dtype format, const float *out, float lse, const float *out32, float lse32) {
    double scale = 1 / sqrt((double)E), gamma = ((double)E / 16 + 8) * 0x1p-24;
    float *qs = malloc(sizeof(float) * (size_t)E), *qp = malloc(sizeof(float) * (size_t)E);
    double *qhat = malloc(sizeof(double) * (size_t)E), *s[2];
    s[0] = malloc(sizeof(double) * (size_t)S), s[1] = malloc(sizeof(double) * (size_t)S);
    for (int64_t e = 0; e < E; e++) qs[e] = (float)((double)q[e] * scale);
    double delta = 0, f32 = 0;
    for (int64_t j0 = 0; j0 < S; j0 += 32) {
        const uint8_t *grp = g + j0 / 32 * gb;
        bool grouped = j0 < full;
        if (grouped) { /* q' = qs ∘ s, rounded as attn.h says */
            for (int64_t e = 0; e < E; e++) qp[e] = qs[e] * group_field(grp, e);
            round_query(qhat, qp, E);
        }
        for (int64_t j = j0; j < j0 + 32 && j < S; j++) {
            const float *kj = k + j * E;
            double dot = 0, hat = 0, quant = 0, absdot = 0;
            for (int64_t e = 0; e < E; e++) dot += (double)q[e] * scale * kj[e];
            if (grouped) {
                for (int64_t b = 0; b < E; b += 32) {
                    double a = 0, n1 = 0;
                    for (int i = 0; i < 32; i++) a = fmax(a, fabs(qp[b + i])), n1 += group_code(grp, E, format, j - j0, b + i);
                    quant += a / 127 * (0.5 + 0x1p-10) * n1;
                }
                for (int64_t e = 0; e < E; e++) {
                    int n = group_code(grp, E, format, j - j0, e);
                    double sc = group_field(grp, e), mc = group_field(grp, E + e);
                    hat += qhat[e] * n + (double)qs[e] * mc;
                    absdot += fabs((double)qs[e]) * (sc * n + fabs(mc));
                }
                absdot *= gamma;
            } else {
                for (int64_t e = 0; e < E; e++) hat += (double)qs[e] * kj[e], absdot += fabs((double)qs[e] * kj[e]);
                absdot *= 0x1p-18;
            }
            s[0][j] = dot, s[1][j] = hat;
            delta = fmax(delta, quant + absdot), f32 = fmax(f32, absdot);
        }
    }
    softmax_within(bound, s[0], S, delta, v, Ev, Ev, out, lse);
    softmax_within(tight, s[1], S, f32, v, Ev, Ev, out, lse);
    /* against the f32 kernels on the gathered keys: both within their bounds of s[0] */
    for (int64_t e = 0; e < Ev; e++) {
        double vmax = 0;
        for (int64_t j = 0; j < S; j++) vmax = fmax(vmax, fabs(v[j * Ev + e]));
        *vs_f32 = fmax(*vs_f32, fabs(out[e] - out32[e]) / ((expm1(2 * delta) + 2e-5) * vmax + 1e-30));
    }
    *vs_f32 = fmax(*vs_f32, fabs(lse - lse32) / (delta + 2e-5 * (1 + fabs(lse32))));
    if (isnan(out[0]) || isnan(lse)) *vs_f32 = INFINITY;
    free(qs), free(qp), free(qhat), free(s[0]), free(s[1]);
}

static const char *group_key_dot_expected(int64_t E) {
    const attn_qdot_kernels *qk = attn_qdot_active();
    return qk && qk->groups && E % 32 == 0 ? qk->groups->name : "";
}

/* Decode's output over q8 or q4 values through the integer set against
 * out32, the f32 kernels' on the same dequantized keys and values, column
 * by column. The keys are widened on both sides, so the scores and the
 * weights p^_j are the same floats (lse bitwise, checked by the caller),
 * and so are each chunk's l and the merge's factors: out and out32 differ
 * by how each side sums Σ_j p^_j · v_j, and by the roundings after it.
 * With mag = Σ_j p_j |v_j| and n = S keys (a bound for a call of n keys
 * holds for the sum of its chunks, each term being linear in the weights):
 *   - the integer set's sum is within attn.h's bound of the exact one:
 *     int8_value_bound where it rounds the weights to int8 per group,
 *     bf16_value_bound where it rounds them to bf16 pairs; where it takes
 *     f32 FMAs on the codes (value_dot=f32_*), two roundings a product
 *     (p · d, then · code, associated otherwise than d · code) and n in
 *     the sum, (n + 2) · 2^-24 · mag;
 *   - the f32 kernels' sum is one FMA a key, n roundings, each within
 *     2^-24 of a partial sum, so within n · 2^-24 · mag;
 *   - after the sums each side divides its partial by l and rounds the
 *     merged row once to f32: two roundings of a value within mag / l, so
 *     4 · 2^-24 · mag / l for both;
 *   - a result below FLT_MIN may be written as 0 (attn.h): at most 2^-126
 *     a rounding, n + 2 of them in each side's sum and 2 after it.
 * All but the last 2 flushes are divided by the row's sum l. The bound is
 * computed with the f64 weights p_j = e^(s_j - m) of the exact scores;
 * the kernels' p^_j / l^ are within e^(2δ) of p_j / Σ p, δ = 2^-18 ·
 * max_j Σ_e |q_e scale k_je| the f32 scores' error (attn.h), so it is
 * scaled by e^(2δ).
 * Returns the worst error / bound of the row. */
static double values_vs_f32(const float *q, const float *k, const float *v, int64_t S, int64_t E, int64_t Ev,
                            attn_dtype values, const float *out, const float *out32) {
    double scale = 1 / sqrt((double)E), m = -INFINITY, sum = 0, worst = 0, delta = 0;
    double *p = malloc(sizeof(double) * (size_t)S);
    for (int64_t j = 0; j < S; j++) {
        double dot = 0, absdot = 0;
        for (int64_t e = 0; e < E; e++) dot += (double)q[e] * k[j * E + e], absdot += fabs((double)q[e] * k[j * E + e]);
        p[j] = dot * scale, m = fmax(m, p[j]), delta = fmax(delta, 0x1p-18 * absdot * scale);
    }
    for (int64_t j = 0; j < S; j++) p[j] = exp(p[j] - m), sum += p[j];
    const char *vd = value_dot_expected(values);
    bool int8 = !strcmp(vd, "int8_avx512vnni"), bf16 = !strcmp(vd, "bf16_avx512bf16");
    for (int64_t e = 0; e < Ev; e++) {
        double mag = 0;
        for (int64_t j = 0; j < S; j++) mag += p[j] * fabs(v[j * Ev + e]);
        double set = int8   ? int8_value_bound(p, v, Ev, S, e, values)
                     : bf16 ? bf16_value_bound(mag, S)
                            : (double)(S + 2) * 0x1p-24 * mag;
        double f32 = (double)S * 0x1p-24 * mag, after = 4 * 0x1p-24 * mag, flushed = 2 * (double)(S + 2) * 0x1p-126;
        double tol = exp(2 * delta) * (set + f32 + after + flushed) / sum + 4 * 0x1p-126;
        worst = fmax(worst, fabs((double)out[e] - out32[e]) / tol);
    }
    free(p);
    return worst;
}

/* One case: a contiguous cache (paged 0) or a pool of pages of 64 with keys
 * in `format` and a residual window of R, values in `values` (Ev 64), S
 * positions appended in two pieces, L queries per sequence (no mask). */
static void test_groups_values(attn_dtype format, int paged, int64_t E, int64_t S, int64_t L, int64_t R,
                               attn_dtype values) {
    enum { HK = 2, HQ = 8, EV = 64 };
    char name[160];
    const char *fm = attn_dtype_name(format);
    snprintf(name, sizeof name, "%s_keys_%s%s%s_E%lld_S%lld_L%lld%s%.0lld_decode", fm,
             values == ATTN_F32 ? "" : attn_dtype_name(values), values == ATTN_F32 ? "" : "_values_",
             paged ? "pool" : "cache", (long long)E, (long long)S, (long long)L, R ? "_R" : "", (long long)R);
    attn_error err;
    size_t bytes = 0;
    void *mem = NULL;
    attn_kv_cache *cache = NULL;
    attn_kv_pages *pool = NULL;
    int64_t seq = 0;
    attn_status st;
    if (paged) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.heads = HK, d.key_dim = E, d.value_dim = EV, d.dtype = values, d.key_dtype = format, d.page_size = 64;
        d.residual = R;
        d.num_pages = S / 64 + 2, d.max_sequences = 2;
        st = attn_kv_pages_bytes(&bytes, &d, &err);
        if (!st) mem = malloc(bytes), st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
        if (!st) st = attn_kv_pages_create(pool, &seq, &err);
    } else {
        attn_kv_cache_desc d = attn_kv_cache_desc_default();
        d.batch = 1, d.heads = HK, d.capacity = (S + 31) / 32 * 32, d.key_dim = E, d.value_dim = EV, d.dtype = values;
        d.key_dtype = format, d.residual = R;
        st = attn_kv_cache_bytes(&bytes, &d, &err);
        if (!st) mem = malloc(bytes), st = attn_kv_cache_init(&cache, mem, bytes, &d, &err);
    }
    /* keys (HK, S, E) with heavy-tailed channels, values (HK, S, EV) */
    float *k = rows_of(HK * S, E, true), *v = rows_of(HK * S, EV, false);
    int64_t cut = S / 3 | 1; /* two appends, the first ending inside a group */
    for (int piece = 0; piece < 2 && !st; piece++) {
        int64_t from = piece ? cut : 0, n = piece ? S - cut : cut;
        attn_tensor tk, tv;
        if (paged) { /* (n, Hk, dim) of the (Hk, S, dim) rows */
            int64_t ks[3] = {n, HK, E}, kst[3] = {E, S * E, 1}, vs[3] = {n, HK, EV}, vst[3] = {EV, S * EV, 1};
            int64_t cu[2] = {0, n};
            attn_tensor_init(&tk, k + from * E, ATTN_F32, 3, ks, kst, NULL);
            attn_tensor_init(&tv, v + from * EV, ATTN_F32, 3, vs, vst, NULL);
            st = attn_kv_pages_append(pool, &seq, 1, &tk, &tv, cu, &err);
        } else {
            int64_t ks[4] = {1, HK, n, E}, kst[4] = {HK * S * E, S * E, E, 1};
            int64_t vs[4] = {1, HK, n, EV}, vst[4] = {HK * S * EV, S * EV, EV, 1};
            attn_tensor_init(&tk, k + from * E, ATTN_F32, 4, ks, kst, NULL);
            attn_tensor_init(&tv, v + from * EV, ATTN_F32, 4, vs, vst, NULL);
            st = attn_kv_cache_append(cache, &tk, &tv, &err);
        }
    }
    /* gathered keys and values (HK, S, dim); the groups as this test makes them */
    float *gk = calloc((size_t)(HK * S * E), 4), *gv = calloc((size_t)(HK * S * EV), 4);
    if (!st) {
        attn_tensor tk, tv;
        if (paged) {
            int64_t ks[3] = {HK, S, E}, vs[3] = {HK, S, EV};
            attn_tensor_init(&tk, gk, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tv, gv, ATTN_F32, 3, vs, NULL, NULL);
            st = attn_kv_pages_gather(&tk, &tv, pool, seq, &err);
        } else {
            int64_t ks[4] = {1, HK, S, E}, vs[4] = {1, HK, S, EV};
            attn_tensor_init(&tk, gk, ATTN_F32, 4, ks, NULL, NULL), attn_tensor_init(&tv, gv, ATTN_F32, 4, vs, NULL, NULL);
            st = attn_kv_cache_gather(&tk, &tv, cache, &err);
        }
    }
    size_t gb;
    uint8_t *g = groups_of(k, HK, S, E, format, &gb);
    int64_t full = S / 32 * 32 - R > 0 ? S / 32 * 32 - R : 0, per_head = S / 32; /* groups before the window */
    bool held = !st; /* the groups' values are the gathered keys, the residual f16 of the keys */
    for (int64_t hk = 0; hk < HK && held; hk++)
        for (int64_t j = 0; j < S; j++)
            for (int64_t e = 0; e < E; e++) {
                const uint8_t *grp = g + (hk * per_head + j / 32) * gb;
                float want = j < full ? (float)group_code(grp, E, format, j % 32, e) * group_field(grp, e) +
                                            group_field(grp, E + e)
                                      : attn_f16_to_f32(attn_f32_to_f16(k[(hk * S + j) * E + e]));
                held = held && !memcmp(&want, &gk[(hk * S + j) * E + e], 4);
            }
    /* attend: L queries (HQ heads) with 1 and 3 threads; attn_sdpa on the gathered rows */
    size_t no = (size_t)(HQ * L * EV);
    float *q = rows_of(HQ * L, E, false), *o[3] = {calloc(no, 4), calloc(no, 4), calloc(no, 4)};
    float *l[3] = {calloc((size_t)(HQ * L), 4), calloc((size_t)(HQ * L), 4), calloc((size_t)(HQ * L), 4)};
    attn_sdpa_options opt = attn_sdpa_options_default();
    char kernel[32] = "", kdot[32] = "", line[1024] = "", fb[2][32] = {"", ""};
    int threads_before = attn_get_num_threads();
    for (int t = 0; t < 3 && !st; t++) {
        attn_tensor tq, to, tl;
        if (t < 2) { /* (L, HQ, E) rows of the pool's call, (1, HQ, L, E) of the cache's: the same floats */
            attn_set_num_threads(t ? 3 : 1);
            if (paged) {
                int64_t qs[3] = {L, HQ, E}, qst[3] = {E, L * E, 1}, os[3] = {L, HQ, EV}, ost[3] = {EV, L * EV, 1};
                int64_t ls[2] = {L, HQ}, lst[2] = {1, L}, cu[2] = {0, L};
                attn_tensor_init(&tq, q, ATTN_F32, 3, qs, qst, NULL);
                attn_tensor_init(&to, o[t], ATTN_F32, 3, os, ost, NULL);
                attn_tensor_init(&tl, l[t], ATTN_F32, 2, ls, lst, NULL);
                verbose_begin();
                st = attn_kv_pages_attend(&to, &tl, &tq, cu, &seq, 1, pool, NULL, &opt, &err);
            } else {
                int64_t qs[4] = {1, HQ, L, E}, os[4] = {1, HQ, L, EV}, ls[3] = {1, HQ, L};
                attn_tensor_init(&tq, q, ATTN_F32, 4, qs, NULL, NULL);
                attn_tensor_init(&to, o[t], ATTN_F32, 4, os, NULL, NULL);
                attn_tensor_init(&tl, l[t], ATTN_F32, 3, ls, NULL, NULL);
                verbose_begin();
                st = attn_kv_cache_attend(&to, &tl, &tq, cache, &opt, &err);
            }
            verbose_end(kernel, sizeof kernel, fb[t], sizeof fb[t]);
            key_dot_shown(kdot, sizeof kdot);
            memcpy(line, verbose_last_line, sizeof line);
        } else { /* the f32 kernels on the gathered keys */
            int64_t qs[3] = {HQ, L, E}, ks[3] = {HK, S, E}, vs[3] = {HK, S, EV}, os[3] = {HQ, L, EV}, ls[2] = {HQ, L};
            attn_tensor tk, tv;
            attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
            attn_tensor_init(&tk, gk, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tv, gv, ATTN_F32, 3, vs, NULL, NULL);
            attn_tensor_init(&to, o[2], ATTN_F32, 3, os, NULL, NULL);
            attn_tensor_init(&tl, l[2], ATTN_F32, 2, ls, NULL, NULL);
            st = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &opt, &err);
        }
    }
    attn_set_num_threads(threads_before);
    const char *kd_want = group_key_dot_expected(E);
    bool threads_same = !memcmp(o[0], o[1], no * 4) && !memcmp(l[0], l[1], (size_t)(HQ * L) * 4);
    /* the decode kernel on every slice: none went to the exact one */
    bool line_ok = !strcmp(kernel, "decode") && !strcmp(kdot, kd_want) && !strncmp(fb[0], "0/", 2) &&
                   !strncmp(fb[1], "0/", 2);
    if (kd_want[0]) {
        double bound = 0, tight = 0, vs32 = 0;
        for (int64_t h = 0; h < HQ && !st; h++)
            for (int64_t i = 0; i < L; i++) {
                int64_t hk = h / (HQ / HK), r = h * L + i;
                group_row(&bound, &tight, &vs32, q + r * E, g + hk * per_head * gb, gb, gk + hk * S * E, gv + hk * S * EV,
                          S, full, E, EV, format, o[1] + r * EV, l[1][r], o[2] + r * EV, l[2][r]);
            }
        strcat(name, "_key_dot_within_bound_of_f64_and_f32_on_dequantized_keys");
        check(!st && held && line_ok && threads_same && bound <= 1 && tight <= 1 && vs32 <= 1, name,
              "status %d (%s), groups as documented %d, threads bitwise %d, error/bound %.3g, error/f32 part %.3g, "
              "vs f32 kernels/bound %.3g, line: %s", (int)st, st ? err.message : "", (int)held, (int)threads_same, bound,
              tight, vs32, line);
    } else if (values != ATTN_F32 && value_dot_expected(values)[0]) { /* the keys widened, the values through the integer set */
        double worst = 0;
        for (int64_t h = 0; h < HQ && !st; h++)
            for (int64_t i = 0; i < L; i++) {
                int64_t hk = h / (HQ / HK), r = h * L + i;
                worst = fmax(worst, values_vs_f32(q + r * E, gk + hk * S * E, gv + hk * S * EV, S, E, EV, values,
                                                  o[1] + r * EV, o[2] + r * EV));
            }
        bool lse_same = !memcmp(l[1], l[2], (size_t)(HQ * L) * 4);
        strcat(name, "_widened_lse_bitwise_out_within_value_bound_of_f32_on_dequantized_rows");
        check(!st && held && line_ok && threads_same && lse_same && worst <= 1, name,
              "status %d (%s), groups as documented %d, threads bitwise %d, lse bitwise %d, error/bound %.3g, line: %s",
              (int)st, st ? err.message : "", (int)held, (int)threads_same, (int)lse_same, worst, line);
    } else {
        bool same = !memcmp(o[1], o[2], no * 4) && !memcmp(l[1], l[2], (size_t)(HQ * L) * 4);
        strcat(name, "_widened_bitwise_f32_on_dequantized_keys");
        check(!st && held && line_ok && threads_same && same, name,
              "status %d (%s), groups as documented %d, threads bitwise %d, same %d, line: %s", (int)st,
              st ? err.message : "", (int)held, (int)threads_same, (int)same, line);
    }
    free(k), free(v), free(gk), free(gv), free(g), free(q), free(mem);
    for (int t = 0; t < 3; t++) free(o[t]), free(l[t]);
}

static void test_groups(attn_dtype format, int paged, int64_t E, int64_t S, int64_t L, int64_t R) {
    test_groups_values(format, paged, E, S, L, R, ATTN_F32);
}

/* Each ISA's widening of quantized rows against the reference
 * (attn_dequant_row), bit for bit, NaN as NaN: random bytes, so scales of
 * every f16 (subnormal, huge, infinite, NaN) and every code. */
static void test_widen(const char *isa) {
    const attn_ukernels *uk = attn_ukernels_by_name(isa);
    static const attn_dtype FORMATS[5] = {ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2};
    for (int f = 0; f < 5; f++) {
        char name[64];
        snprintf(name, sizeof name, "widen_%s_%s_bitwise_reference", attn_dtype_name(FORMATS[f]), isa);
        if (!uk) {
            skip(name, "this CPU lacks %s", isa);
            continue;
        }
        enum { N = 256, ROWS = 200 };
        size_t row = attn_quant_row_size(FORMATS[f], N);
        uint8_t *b = malloc(row);
        float got[N], want[N];
        int bad = 0;
        for (int r = 0; r < ROWS; r++) {
            for (size_t i = 0; i < row; i++) b[i] = (uint8_t)(uniform() * 256);
            int n = FORMATS[f] == ATTN_E4M3 || FORMATS[f] == ATTN_E5M2 ? N - r % 16 : N; /* fp8: any length */
            uk->widen_quant(got, b, n, FORMATS[f]);
            attn_dequant_row(want, b, n, FORMATS[f]);
            for (int i = 0; i < n; i++) bad += isnan(want[i]) ? !isnan(got[i]) : memcmp(&got[i], &want[i], 4) != 0;
        }
        check(!bad, name, "%d of %d values differ", bad, N * ROWS);
        free(b);
    }
}

/* Descriptions the kernels must never see: refused before any is read. */
static void test_errors(void) {
    uint8_t pages[2 * 16 * 34] = {0};
    int32_t table[2] = {0, 1};
    float q[32] = {0}, out[32];
    attn_tensor tq, to;
    int64_t s3[3] = {1, 1, 32}, s40[3] = {1, 1, 40};
    attn_tensor_init(&tq, q, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, s3, NULL, NULL);
    attn_error err;
    attn_paged_rows pg = {pages, ATTN_Q8, 2, 1, 16, 32, table, 2, 20, NULL, 0, false};
    attn_paged_rows bad = pg;
    bad.cols = 40;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s40, NULL, NULL);
    attn_status st = attn_sdpa_paged(&to, NULL, NULL, &tq, &bad, &bad, NULL, &err);
    check(st == ATTN_ERR_SHAPE && strstr(err.message, "multiple of 32"), "q8_rows_not_a_multiple_of_32",
          "status %d: %s", (int)st, err.message);
    attn_tensor_init(&tq, q, ATTN_F32, 3, s3, NULL, NULL);
    bad = pg, bad.dtype = (attn_dtype)99;
    st = attn_sdpa_paged(&to, NULL, NULL, &tq, &bad, &bad, NULL, &err);
    check(st == ATTN_ERR_DTYPE, "unknown_page_dtype", "status %d: %s", (int)st, err.message);
    bad = pg, bad.num_pages = INT64_MAX / 8;
    st = attn_sdpa_paged(&to, NULL, NULL, &tq, &bad, &bad, NULL, &err);
    check(st == ATTN_ERR_OVERFLOW, "q8_pool_bytes_overflow", "status %d: %s", (int)st, err.message);
    /* an output inside the quantized pool's bytes */
    attn_tensor in_pool;
    attn_tensor_init(&in_pool, pages + 40, ATTN_F32, 3, s3, NULL, NULL);
    st = attn_sdpa_paged(&in_pool, NULL, NULL, &tq, &pg, &pg, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "q8_out_in_pool", "status %d: %s", (int)st, err.message);
    /* q8 keys with e4m3 values */
    bad = pg, bad.dtype = ATTN_E4M3;
    st = attn_sdpa_paged(&to, NULL, NULL, &tq, &pg, &bad, NULL, &err);
    check(st == ATTN_ERR_SHAPE, "k_and_v_formats_differ", "status %d: %s", (int)st, err.message);
}

/* The integer kernel is the one this ISA and CPU call for: AVX512-VNNI's
 * beside the AVX-512 kernels, AVX-VNNI's beside AVX2's where the CPU has
 * it (else the AVX2 one), none for the portable kernels or with
 * ATTN_QDOT=widen. */
static void test_key_dot_set(void) {
    const char *isa = attn_isa(), *env = getenv("ATTN_QDOT");
    const attn_qdot_kernels *qk = attn_qdot_active();
    const char *want = "";
#if defined(__x86_64__) && defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512vnni")) want = "int8_avx512vnni";
    if (!strcmp(isa, "avx2")) {
        unsigned a = 0, b, c, d;
        if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, 1, a, b, c, d);
        want = a >> 4 & 1 ? "int8_avxvnni" : "int8_avx2"; /* AVX-VNNI: CPUID 7.1 EAX bit 4 */
    }
#endif
    if (env && !strcmp(env, "widen")) want = "";
    check(!strcmp(qk ? qk->name : "", want), "key_dot_set_for_isa", "isa %s: set %s, want %s", isa,
          qk ? qk->name : "none", want[0] ? want : "none");
    /* Which integer kernels this run's attends used, natively: on a CPU with
     * AVX-VNNI, ATTN_ISA=avx2 runs int8_avxvnni itself, not only through SIMDe. */
    if (qk) printf("# isa %s: integer key kernels %s, run natively\n", isa, qk->name);
    else printf("# isa %s: no integer key kernels (keys widened to f32)\n", isa);
    /* Its values: bf16 pairs where VDPBF16PS runs at the FMA's rate (AMD's
     * cores with AVX512-BF16) unless ATTN_QDOT=f32_values, else f32 FMAs;
     * by VPDPBUSD with ATTN_QDOT=int8_values;
     * the AVX2 sets leave them to the f32 set's kernels. */
    const char *vwant = "";
#if defined(__x86_64__) && defined(ATTN_HAVE_X86_KERNELS)
    if (!strcmp(want, "int8_avx512vnni")) {
        unsigned a, b, c, d;
        char vendor[13] = "";
        if (__get_cpuid(0, &a, &b, &c, &d)) memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
        bool amd = !strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine");
        vwant = __builtin_cpu_supports("avx512bf16") && amd && !(env && !strcmp(env, "f32_values")) ? "bf16_avx512bf16"
                                                                                                    : "f32_avx512";
        if (env && !strcmp(env, "int8_values")) vwant = "int8_avx512vnni"; /* VPDPBUSD, on request only */
    }
#endif
    const char *vgot = qk && qk->axpy ? qk->value_dot : "";
    check(!strcmp(vgot, vwant), "value_dot_set_for_isa", "isa %s: values %s, want %s", isa, vgot[0] ? vgot : "none",
          vwant[0] ? vwant : "none");
}

/* fp8 with one scale per head (attn.h): a cache given k_scale / v_scale
 * attends bitwise as attn_sdpa does on its view (the stored codes) with
 * the same scales as k_descale / v_descale, on the kernel the shape takes
 * (decode, flash); its gather is code · s of the reference's codes of
 * x / s. Under ASan, UBSan and TSan with the rest of this file. */
static void test_descale(attn_dtype format) {
    enum { HK = 2, HQ = 4, E = 64, N = 700 };
    const char *fm = attn_dtype_name(format);
    char name[96];
    static const float KS[HK] = {0.375f, 6.0f}, VS[HK] = {2.5f, 0.0625f};
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HK, d.capacity = N + 40, d.key_dim = d.value_dim = E, d.dtype = format;
    d.k_scale = KS, d.v_scale = VS;
    size_t bytes;
    attn_error err;
    attn_kv_cache *cache;
    void *mem = NULL;
    snprintf(name, sizeof name, "%s_descale_cache_init", fm);
    if (attn_kv_cache_bytes(&bytes, &d, &err) || !(mem = malloc(bytes)) ||
        attn_kv_cache_init(&cache, mem, bytes, &d, &err)) {
        check(0, name, "%s", err.message);
        free(mem);
        return;
    }
    float *kf = rows_of(HK * N, E, true), *vf = rows_of(HK * N, E, false);
    int64_t shape[3] = {HK, N, E};
    attn_tensor tk, tv;
    attn_tensor_init(&tk, kf, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&tv, vf, ATTN_F32, 3, shape, NULL, NULL);
    attn_status st = attn_kv_cache_append(cache, &tk, &tv, &err);
    snprintf(name, sizeof name, "%s_descale_cache_append", fm);
    check(!st, name, "%s", st ? err.message : "");
    /* gather: code · s of the codes of x / s, each an f32 operation */
    float *gk = malloc(sizeof(float) * HK * N * E), *gv = malloc(sizeof(float) * HK * N * E);
    attn_tensor tgk, tgv;
    attn_tensor_init(&tgk, gk, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, shape, NULL, NULL);
    st = attn_kv_cache_gather(&tgk, &tgv, cache, &err);
    int bad = 0;
    for (int64_t r = 0; r < HK * N && !st; r++) {
        float xk[E], xv[E], wk[E], wv[E];
        uint8_t qk[E], qv[E];
        for (int e = 0; e < E; e++) xk[e] = kf[r * E + e] / KS[r / N], xv[e] = vf[r * E + e] / VS[r / N];
        attn_quant_row(qk, xk, E, format), attn_quant_row(qv, xv, E, format);
        attn_dequant_row(wk, qk, E, format), attn_dequant_row(wv, qv, E, format);
        for (int e = 0; e < E; e++) {
            float a = wk[e] * KS[r / N], b = wv[e] * VS[r / N];
            bad += memcmp(&a, &gk[r * E + e], 4) != 0 || memcmp(&b, &gv[r * E + e], 4) != 0;
        }
    }
    snprintf(name, sizeof name, "%s_descale_cache_gather_code_times_scale", fm);
    check(!st && !bad, name, "status %d, %d values differ", (int)st, bad);
    attn_tensor vk, vv, kd, vd;
    attn_kv_cache_view(&vk, &vv, cache, 3, &err);
    int64_t hk = HK;
    attn_tensor_init(&kd, (void *)KS, ATTN_F32, 1, &hk, NULL, NULL), attn_tensor_init(&vd, (void *)VS, ATTN_F32, 1, &hk, NULL, NULL);
    const int64_t Ls[2] = {1, 40};
    const char *want[2] = {"decode", "flash"};
    for (int c = 0; c < 2; c++) {
        int64_t L = Ls[c], qs[3] = {HQ, L, E};
        float *q = rows_of(HQ * L, E, false), *o1 = calloc((size_t)(HQ * L * E), 4), *o2 = calloc((size_t)(HQ * L * E), 4);
        float l1[HQ * 40], l2[HQ * 40];
        int64_t ls[2] = {HQ, L};
        attn_tensor tq, to1, to2, tl1, tl2;
        attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
        attn_tensor_init(&to1, o1, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to2, o2, ATTN_F32, 3, qs, NULL, NULL);
        attn_tensor_init(&tl1, l1, ATTN_F32, 2, ls, NULL, NULL), attn_tensor_init(&tl2, l2, ATTN_F32, 2, ls, NULL, NULL);
        char k1[32] = "", k2[32] = "", fb[32];
        verbose_begin();
        attn_status s1 = attn_kv_cache_attend(&to1, &tl1, &tq, cache, NULL, &err);
        verbose_end(k1, sizeof k1, fb, sizeof fb);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.k_descale = &kd, o.v_descale = &vd;
        verbose_begin();
        attn_status s2 = attn_sdpa(&to2, &tl2, NULL, &tq, &vk, &vv, &o, &err);
        verbose_end(k2, sizeof k2, fb, sizeof fb);
        snprintf(name, sizeof name, "%s_descale_cache_L%lld_bitwise_sdpa_descale", fm, (long long)L);
        check(!s1 && !s2 && !memcmp(o1, o2, (size_t)(HQ * L * E) * 4) && !memcmp(l1, l2, (size_t)(HQ * L) * 4) &&
                  !strcmp(k1, want[c]) && !strcmp(k2, want[c]),
              name, "status %d %d, kernels %s %s (want %s)", (int)s1, (int)s2, k1, k2, want[c]);
        /* a plan of that call runs it bitwise, reading the scales at the run */
        size_t pbytes, ws;
        attn_sdpa_plan *plan;
        attn_sdpa_plan_bytes(&pbytes, 0, &err);
        void *pmem = malloc(pbytes), *wmem = NULL;
        attn_status s3 = attn_sdpa_plan_init(&plan, pmem, pbytes, &ws, &to2, &tl2, &tq, &vk, &vv, &o, &err);
        memset(o2, 0, (size_t)(HQ * L * E) * 4);
        if (!s3) s3 = (wmem = malloc(ws + 1)) ? attn_sdpa_run(plan, &to2, &tl2, &tq, &vk, &vv, wmem, ws, &err) : ATTN_ERR_NO_MEMORY;
        snprintf(name, sizeof name, "%s_descale_plan_L%lld_bitwise", fm, (long long)L);
        check(!s3 && !memcmp(o1, o2, (size_t)(HQ * L * E) * 4) && !memcmp(l1, l2, (size_t)(HQ * L) * 4), name,
              "status %d %s", (int)s3, s3 ? err.message : "values differ");
        free(pmem), free(wmem);
        /* the scales change the result: attn_sdpa without them differs */
        o.k_descale = o.v_descale = NULL;
        attn_sdpa(&to2, NULL, NULL, &tq, &vk, &vv, &o, &err);
        snprintf(name, sizeof name, "%s_descale_cache_L%lld_scales_matter", fm, (long long)L);
        check(memcmp(o1, o2, (size_t)(HQ * L * E) * 4) != 0, name, "the same without scales");
        free(q), free(o1), free(o2);
    }
    /* errors: a zero scale, a scale on q8 */
    static const float ZERO[HK] = {1.0f, 0.0f};
    d.k_scale = ZERO;
    snprintf(name, sizeof name, "%s_descale_zero_scale", fm);
    check(attn_kv_cache_bytes(&bytes, &d, &err) == ATTN_ERR_SCALE, name, "%s", err.message);
    d.k_scale = KS, d.dtype = ATTN_Q8;
    snprintf(name, sizeof name, "%s_descale_on_q8", fm);
    check(attn_kv_cache_bytes(&bytes, &d, &err) == ATTN_ERR_DTYPE, name, "%s", err.message);
    free(kf), free(vf), free(gk), free(gv), free(mem);
}

/* The Hadamard rotation of keys (attn.h, attn_kv_cache_desc.hadamard): a
 * cache with it attends bitwise as attn_sdpa does on its view (the stored,
 * turned rows) with q turned by attn_hadamard, on the kernel the shape
 * takes; gather is the widened rows turned back by attn_hadamard; values
 * are stored as without it. Under the sanitizers with the rest. */
static void test_hadamard(attn_dtype format) {
    enum { HK = 2, HQ = 4, E = 64, N = 500 };
    const char *fm = attn_dtype_name(format);
    char name[96];
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HK, d.capacity = N + 40, d.key_dim = d.value_dim = E, d.dtype = format, d.hadamard = 1;
    size_t bytes;
    attn_error err;
    attn_kv_cache *cache;
    void *mem = NULL;
    snprintf(name, sizeof name, "%s_hadamard_cache_init", fm);
    if (attn_kv_cache_bytes(&bytes, &d, &err) || !(mem = malloc(bytes)) ||
        attn_kv_cache_init(&cache, mem, bytes, &d, &err)) {
        check(0, name, "%s", err.message);
        free(mem);
        return;
    }
    float *kf = rows_of(HK * N, E, true), *vf = rows_of(HK * N, E, false);
    int64_t shape[3] = {HK, N, E};
    attn_tensor tk, tv;
    attn_tensor_init(&tk, kf, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&tv, vf, ATTN_F32, 3, shape, NULL, NULL);
    attn_status st = attn_kv_cache_append(cache, &tk, &tv, &err);
    /* gather against the reference: H k rounded, quantized, widened, turned back */
    size_t nkv = (size_t)(HK * N * E);
    float *gk = malloc(4 * nkv), *gv = malloc(4 * nkv), *wk = malloc(4 * nkv), *wv = malloc(4 * nkv);
    memcpy(wk, kf, 4 * nkv);
    attn_tensor twk, tgk, tgv;
    attn_tensor_init(&twk, wk, ATTN_F32, 3, shape, NULL, NULL);
    attn_hadamard(&twk, &err);
    for (int64_t r = 0; r < HK * N; r++) {
        uint8_t q[128];
        attn_quant_row(q, wk + r * E, E, format), attn_dequant_row(wk + r * E, q, E, format);
        attn_quant_row(q, vf + r * E, E, format), attn_dequant_row(wv + r * E, q, E, format);
    }
    attn_hadamard(&twk, &err);
    attn_tensor_init(&tgk, gk, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, shape, NULL, NULL);
    if (!st) st = attn_kv_cache_gather(&tgk, &tgv, cache, &err);
    snprintf(name, sizeof name, "%s_hadamard_gather_turned_back", fm);
    check(!st && !memcmp(gk, wk, 4 * nkv) && !memcmp(gv, wv, 4 * nkv), name, "status %d %s", (int)st,
          st ? err.message : "values differ");
    attn_tensor vk, vv;
    attn_kv_cache_view(&vk, &vv, cache, 3, &err);
    const int64_t Ls[2] = {1, 40};
    const char *want[2] = {"decode", "flash"};
    for (int c = 0; c < 2; c++) {
        int64_t L = Ls[c], qs[3] = {HQ, L, E};
        float *q = rows_of(HQ * L, E, false), *hq = malloc(sizeof(float) * (size_t)(HQ * L * E));
        float *o1 = calloc((size_t)(HQ * L * E), 4), *o2 = calloc((size_t)(HQ * L * E), 4);
        memcpy(hq, q, sizeof(float) * (size_t)(HQ * L * E));
        attn_tensor tq, thq, to1, to2;
        attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&thq, hq, ATTN_F32, 3, qs, NULL, NULL);
        attn_tensor_init(&to1, o1, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to2, o2, ATTN_F32, 3, qs, NULL, NULL);
        attn_hadamard(&thq, &err);
        char k1[32] = "", k2[32] = "", fb[32];
        verbose_begin();
        attn_status s1 = attn_kv_cache_attend(&to1, NULL, &tq, cache, NULL, &err);
        verbose_end(k1, sizeof k1, fb, sizeof fb);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        verbose_begin();
        attn_status s2 = attn_sdpa(&to2, NULL, NULL, &thq, &vk, &vv, &o, &err);
        verbose_end(k2, sizeof k2, fb, sizeof fb);
        snprintf(name, sizeof name, "%s_hadamard_attend_L%lld_bitwise_turned_q", fm, (long long)L);
        check(!s1 && !s2 && !memcmp(o1, o2, (size_t)(HQ * L * E) * 4) && !strcmp(k1, want[c]), name,
              "status %d %d, kernels %s %s (want %s)", (int)s1, (int)s2, k1, k2, want[c]);
        /* from a caller's workspace: attn_sdpa's on the view and q's turned
         * copy (attn.h: 4 bytes an element rounded up to 64, and 63 more);
         * 64 bytes short of that refused, out untouched */
        size_t ws = 0, turned = ((size_t)(HQ * L * E) * 4 + 63) / 64 * 64 + 63;
        attn_status s3 = attn_sdpa_workspace_size(&ws, &to2, NULL, NULL, &thq, &vk, &vv, &o, &err);
        void *work = malloc(ws + turned);
        attn_context ctx = attn_context_default();
        ctx.workspace = work, ctx.workspace_size = ws + turned;
        attn_sdpa_options wo = attn_sdpa_options_default();
        wo.context = &ctx, wo.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        memset(o2, 0, (size_t)(HQ * L * E) * 4);
        if (!s3) s3 = attn_kv_cache_attend(&to2, NULL, &tq, cache, &wo, &err);
        snprintf(name, sizeof name, "%s_hadamard_attend_L%lld_from_a_workspace", fm, (long long)L);
        check(!s3 && !memcmp(o1, o2, (size_t)(HQ * L * E) * 4), name, "status %d %s", (int)s3,
              s3 ? err.message : "out differs");
        ctx.workspace_size = ws + turned - 64;
        memset(o2, 0x5a, (size_t)(HQ * L * E) * 4);
        s3 = attn_kv_cache_attend(&to2, NULL, &tq, cache, &wo, &err);
        snprintf(name, sizeof name, "%s_hadamard_attend_L%lld_workspace_short_of_the_turned_q", fm, (long long)L);
        check(s3 == ATTN_ERR_WORKSPACE && ((unsigned char *)o2)[0] == 0x5a, name, "status %d", (int)s3);
        free(work);
        free(q), free(hq), free(o1), free(o2);
    }
    d.key_dim = 96;
    snprintf(name, sizeof name, "%s_hadamard_key_dim_96_refused", fm);
    check(attn_kv_cache_bytes(&bytes, &d, &err) == ATTN_ERR_SHAPE, name, "%s", err.message);
    free(kf), free(vf), free(gk), free(gv), free(wk), free(wv), free(mem);
}

/* The fields this release added at the ends of attn_sdpa_options and
 * attn_kv_cache_desc, from a program whose header ends before them: its
 * struct_size stops there, and whatever lies past it (here garbage: a bad
 * descale, a NaN scale, hadamard 7) is never read. */
static void test_older_structs(void) {
    enum { HK = 1, E = 32, N = 40 };
    union {
        attn_sdpa_options o;
        unsigned char bytes[sizeof(attn_sdpa_options)];
    } u;
    static float bad[1] = {-1.0f};
    int64_t one = 1;
    attn_tensor kd;
    attn_tensor_init(&kd, bad, ATTN_F32, 1, &one, NULL, NULL);
    u.o = attn_sdpa_options_default();
    u.o.k_descale = &kd, u.o.v_descale = &kd;
    u.o.struct_size = offsetof(attn_sdpa_options, k_descale);
    float *kf = rows_of(N, E, false), *q = rows_of(1, E, false), o1[E], o2[E];
    uint8_t codes[N * E];
    for (int r = 0; r < N; r++) attn_quant_row(codes + r * E, kf + r * E, E, ATTN_E4M3);
    int64_t ks[2] = {N, E}, qs[2] = {1, E};
    attn_tensor tk, tq, to1, to2;
    attn_error err;
    attn_tensor_init(&tk, codes, ATTN_E4M3, 2, ks, NULL, NULL), attn_tensor_init(&tq, q, ATTN_F32, 2, qs, NULL, NULL);
    attn_tensor_init(&to1, o1, ATTN_F32, 2, qs, NULL, NULL), attn_tensor_init(&to2, o2, ATTN_F32, 2, qs, NULL, NULL);
    attn_status s1 = attn_sdpa(&to1, NULL, NULL, &tq, &tk, &tk, &u.o, &err), s2 = attn_sdpa(&to2, NULL, NULL, &tq, &tk, &tk, NULL, &err);
    check(!s1 && !s2 && !memcmp(o1, o2, sizeof o1), "older_sdpa_options_read_no_descale", "status %d %d", (int)s1, (int)s2);
    static const float NANS[HK] = {NAN};
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HK, d.capacity = N, d.key_dim = d.value_dim = E, d.dtype = ATTN_Q8;
    d.k_scale = d.v_scale = NANS, d.hadamard = 7;
    d.struct_size = offsetof(attn_kv_cache_desc, k_scale);
    size_t b1, b2;
    s1 = attn_kv_cache_bytes(&b1, &d, &err);
    d.k_scale = d.v_scale = NULL, d.hadamard = 0, d.struct_size = sizeof d;
    s2 = attn_kv_cache_bytes(&b2, &d, &err);
    check(!s1 && !s2 && b1 == b2, "older_kv_cache_desc_reads_no_scales_no_rotation", "status %d %d, bytes %zu %zu",
          (int)s1, (int)s2, b1, b2);
    free(kf), free(q);
}

/* The workspace of attn_kv_cache_attend over keys quantized per channel,
 * which have no view: attn_sdpa_workspace_size with f16 k and v of the
 * cache's filled shapes (NULL data) standing for them, as attn.h says.
 * A workspace of exactly that size, in a heap block of that size (ASan
 * stops a run past it), gives the bits the call gives without one; one
 * byte fewer is ATTN_ERR_WORKSPACE with out untouched. Decode (L 1) and
 * flash (L 40), values f32, bf16 and q8, with and without a window, 1 and
 * 2 threads. */
static void test_groups_workspace(attn_dtype key_dtype, attn_dtype dtype, int64_t R, int64_t L, int threads) {
    enum { B = 2, HK = 2, HQ = 4, E = 64, EV = 32, CAP = 256, S = 200 };
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = B, d.heads = HK, d.capacity = CAP, d.key_dim = E, d.value_dim = EV, d.dtype = dtype;
    d.key_dtype = key_dtype, d.residual = R;
    size_t bytes = 0, ws = 0;
    attn_kv_cache *cache = NULL;
    void *mem = NULL;
    float *k = malloc(sizeof(float) * B * HK * S * E), *v = malloc(sizeof(float) * B * HK * S * EV);
    float *q = malloc(sizeof(float) * B * HQ * L * E), *o1 = malloc(sizeof(float) * B * HQ * L * EV);
    float *o2 = malloc(sizeof(float) * B * HQ * L * EV);
    for (int64_t i = 0; i < B * HK * S * E; i++) k[i] = normal() * (i % E == 5 ? 30.0f : 1.0f);
    for (int64_t i = 0; i < B * HK * S * EV; i++) v[i] = normal();
    for (int64_t i = 0; i < B * HQ * L * E; i++) q[i] = normal();
    attn_tensor tk, tv, tq, t1, t2, sk, sv;
    int64_t ks[4] = {B, HK, S, E}, vs[4] = {B, HK, S, EV}, qs[4] = {B, HQ, L, E}, os[4] = {B, HQ, L, EV};
    attn_tensor_init(&tk, k, ATTN_F32, 4, ks, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 4, vs, NULL, NULL);
    attn_tensor_init(&tq, q, ATTN_F32, 4, qs, NULL, NULL);
    attn_tensor_init(&t1, o1, ATTN_F32, 4, os, NULL, NULL), attn_tensor_init(&t2, o2, ATTN_F32, 4, os, NULL, NULL);
    attn_tensor_init(&sk, NULL, ATTN_F16, 4, ks, NULL, NULL), attn_tensor_init(&sv, NULL, ATTN_F16, 4, vs, NULL, NULL);
    attn_context c = attn_context_default();
    c.num_threads = threads;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &c;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    if (!st) mem = malloc(bytes);
    if (!st) st = attn_kv_cache_init(&cache, mem, bytes, &d, &err);
    if (!st) st = attn_kv_cache_append(cache, &tk, &tv, &err);
    if (!st) st = attn_kv_cache_attend(&t1, NULL, &tq, cache, &o, &err); /* no workspace: malloc */
    if (!st) st = attn_sdpa_workspace_size(&ws, &t2, NULL, NULL, &tq, &sk, &sv, &o, &err);
    void *w = !st ? malloc(ws) : NULL;
    c.workspace = w, c.workspace_size = ws;
    memset(o2, 0x5a, sizeof(float) * B * HQ * L * EV);
    if (!st) st = attn_kv_cache_attend(&t2, NULL, &tq, cache, &o, &err);
    int same = !st && !memcmp(o1, o2, sizeof(float) * B * HQ * L * EV);
    memset(o2, 0x5a, sizeof(float) * B * HQ * L * EV);
    c.workspace_size = ws - 1;
    attn_status small = st ? st : attn_kv_cache_attend(&t2, NULL, &tq, cache, &o, &err);
    int untouched = 1;
    for (int64_t i = 0; i < B * HQ * L * EV; i++) untouched &= ((uint32_t *)(void *)o2)[i] == 0x5a5a5a5au;
    char name[128];
    snprintf(name, sizeof name, "%s_cache_%s_values_r%lld_l%lld_t%d_workspace_measured_with_f16_stand_ins",
             attn_dtype_name(key_dtype), attn_dtype_name(dtype), (long long)R, (long long)L, threads);
    check(!st && same && small == ATTN_ERR_WORKSPACE && untouched, name,
          "status %d, %s; same %d, one byte fewer: status %d, out untouched %d", (int)st, st ? err.message : "",
          same, (int)small, untouched);
    free(w), free(mem), free(k), free(v), free(q), free(o1), free(o2);
}

/* The rule attn.h states for a query's int8 codes in decode's integer
 * dot products: d = max |q| / 127 and c = q · (1/d), the reciprocal
 * rounded to f32, to nearest even. Where q / d lies exactly halfway the
 * two differ: max |q| = 127 · 7 · 2^-8 gives d = 7 · 2^-8 exactly, and for
 * q = 6.5 · d = 0.177734375, q / d is the tie 6.5 (code 6, to even) while
 * q · fl(1/d) lies just above it (code 7). One q8 key, 1 at channel 1 and
 * 0 elsewhere, with scale 1 gives lse = the score = d · 7 = 49 · 2^-8
 * exactly (with q / d's code, 42 · 2^-8; f32 keys: 0.177734375). */
static void test_query_code_rule(void) {
    enum { E = 32 };
    const char *want = key_dot_expected(ATTN_Q8);
    if (!want[0]) {
        skip("q8_decode_query_codes_are_q_times_reciprocal_of_d", "no integer dot product kernel here (keys widened)");
        return;
    }
    float q[E] = {0}, out[E], lse = 0;
    q[0] = 127.0f * 7.0f / 256.0f, q[1] = 6.5f * 7.0f / 256.0f;
    uint8_t row[34] = {0x00, 0x3c}; /* d = 1.0 in f16, codes 0 ... */
    row[2 + 1] = 1;                 /* ... but channel 1's, 1 */
    int64_t sq[3] = {1, 1, E}, sl[2] = {1, 1}, rs[3] = {34, 34, 1};
    attn_tensor tq, tk, to, tl;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, row, ATTN_Q8, 3, sq, rs, NULL), attn_tensor_init(&tl, &lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1, o.scale = 1.0;
    attn_error err;
    char kernel[32], kdot[32] = "";
    verbose_begin();
    attn_status st = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tk, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    key_dot_shown(kdot, sizeof kdot);
    check(!st && !strcmp(kernel, "decode") && !strcmp(kdot, want) && lse == 49.0f / 256.0f && out[1] == 1.0f,
          "q8_decode_query_codes_are_q_times_reciprocal_of_d", "status %d %s, kernel %s key_dot %s, lse %.9g (want %.9g)",
          (int)st, st ? err.message : "", kernel, kdot, (double)lse, 49.0 / 256.0);
}

/* A query block whose largest |q| is so small (below about 2^-119) that
 * d = max |q| / 127 is subnormal and 1/d overflows to infinity: q · (1/d)
 * is ±infinity, clamped to ±127, for each nonzero q, and 0 · infinity is
 * NaN for each zero. Converting that NaN to an integer is undefined in C
 * (x86 gives INT_MIN, which the codes' sum then carried); a zero must take
 * the code 0 and the sum must be the codes' sum. The AVX-512 kernels hand
 * such a block to this portable rule too. */
static void test_query_code_tiny_block(void) {
    float x[ATTN_QBLOCK] = {0}, d = -1;
    int8_t c[ATTN_QBLOCK];
    x[0] = 1e-38f; /* 31 zeros: an odd count, so INT_MINs do not cancel */
    int32_t sum = attn_qblock_quantize(c, &d, x);
    int bad = -1;
    for (int i = 0; i < ATTN_QBLOCK && bad < 0; i++)
        if (c[i] != (i ? 0 : 127)) bad = i;
    check(sum == 127 && bad < 0 && d == 1e-38f / 127, "query_block_with_reciprocal_past_f32_codes_zeros_as_0",
          "sum of codes %d (want 127), code %d is %d, d %g", (int)sum, bad, bad < 0 ? 0 : c[bad], (double)d);
}

/* attn_mha_cached's step that fails after its append, here for a
 * workspace that holds the layer's buffers but not the attention's
 * scratch, leaves the cache as it was. With keys quantized per channel
 * and the cache one position short of a group leaving the window (pre + 1
 * a multiple of 32 past R), the append quantizes that group; truncating
 * back alone returned its positions to the window as their dequantized
 * values (q2c: keys off by up to 1.1). After the failed step the cache's
 * length and gathered keys and values are bitwise what they were, and the
 * same step run again with room gives the bits a cache that never failed
 * gives. */
static void test_mha_cached_failed_step(attn_dtype key_dtype, int64_t R, int64_t pre) {
    enum { EM = 128, HQ = 4, HK = 2, D = 32, CAP = 256 };
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HK, d.capacity = CAP, d.key_dim = D, d.value_dim = D, d.key_dtype = key_dtype, d.residual = R;
    size_t bytes = 0, ws = 0, attention = 0;
    attn_kv_cache *c[2] = {NULL, NULL};
    void *mem[2] = {NULL, NULL};
    float *w = rows_of(EM + 2 * HK * D + EM, EM, false), *x = rows_of(pre + 1, EM, false);
    for (int64_t i = 0; i < (EM + 2 * HK * D + EM) * EM; i++) w[i] *= 0.1f;
    attn_tensor wq, wk, wv, wo, tx, to;
    int64_t sq[2] = {EM, EM}, sk[2] = {HK * D, EM};
    attn_tensor_init(&wq, w, ATTN_F32, 2, sq, NULL, NULL);
    attn_tensor_init(&wk, w + EM * EM, ATTN_F32, 2, sk, NULL, NULL);
    attn_tensor_init(&wv, w + EM * EM + HK * D * EM, ATTN_F32, 2, sk, NULL, NULL);
    attn_tensor_init(&wo, w + EM * EM + 2 * HK * D * EM, ATTN_F32, 2, sq, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = EM, p.num_heads = HQ, p.num_kv_heads = HK;
    p.q_proj_weight = &wq, p.k_proj_weight = &wk, p.v_proj_weight = &wv, p.out_proj_weight = &wo;
    attn_context ctx = attn_context_default();
    attn_mha_options mo = attn_mha_options_default();
    mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    float *out = malloc(sizeof(float) * (size_t)(pre + 1) * EM), o[2][EM];
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    for (int i = 0; i < 2 && !st; i++) { /* both caches hold the first pre positions */
        int64_t xs[2] = {pre, EM};
        mem[i] = malloc(bytes);
        attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
        if (!(st = attn_kv_cache_init(&c[i], mem[i], bytes, &d, &err))) st = attn_mha_cached(&to, &tx, c[i], &p, &mo, &err);
    }
    int64_t xs[2] = {1, EM}, gs[3] = {HK, pre, D}, hs[3] = {HQ, 1, D}, ks[3] = {HK, pre + 1, D};
    attn_tensor_init(&tx, x + pre * EM, ATTN_F32, 2, xs, NULL, NULL);
    float *before = malloc(sizeof(float) * 2 * HK * pre * D), *after = malloc(sizeof(float) * 2 * HK * pre * D);
    attn_tensor kb, vb, ka, va, th, tq, fk, fv;
    attn_tensor_init(&kb, before, ATTN_F32, 3, gs, NULL, NULL), attn_tensor_init(&vb, before + HK * pre * D, ATTN_F32, 3, gs, NULL, NULL);
    attn_tensor_init(&ka, after, ATTN_F32, 3, gs, NULL, NULL), attn_tensor_init(&va, after + HK * pre * D, ATTN_F32, 3, gs, NULL, NULL);
    if (!st) st = attn_kv_cache_gather(&kb, &vb, c[0], &err);
    /* the layer's need and the attention's alone (f16 stand-ins for the grouped keys, as attn.h says) */
    mo.context = &ctx;
    attn_tensor_init(&to, o[0], ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&th, NULL, ATTN_F32, 3, hs, NULL, NULL), attn_tensor_init(&tq, NULL, ATTN_F32, 3, hs, NULL, NULL);
    attn_tensor_init(&fk, NULL, ATTN_F16, 3, ks, NULL, NULL), attn_tensor_init(&fv, NULL, ATTN_F16, 3, ks, NULL, NULL);
    attn_sdpa_options so = attn_sdpa_options_default();
    so.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (!st) st = attn_mha_cached_workspace_size(&ws, &to, &tx, c[0], &p, &mo, &err);
    if (!st) st = attn_sdpa_workspace_size(&attention, &th, NULL, NULL, &tq, &fk, &fv, &so, &err);
    void *wsp = st ? NULL : malloc(ws);
    ctx.workspace = wsp, ctx.workspace_size = ws - attention / 2;
    attn_status failed = st ? st : attn_mha_cached(&to, &tx, c[0], &p, &mo, &err);
    if (!st) st = attn_kv_cache_gather(&ka, &va, c[0], &err);
    int kept = !st && attn_kv_cache_length(c[0]) == pre && !memcmp(before, after, sizeof(float) * 2 * HK * pre * D);
    ctx.workspace_size = ws; /* again with room, and on the cache that never failed */
    if (!st) st = attn_mha_cached(&to, &tx, c[0], &p, &mo, &err);
    attn_tensor_init(&to, o[1], ATTN_F32, 2, xs, NULL, NULL);
    if (!st) st = attn_mha_cached(&to, &tx, c[1], &p, &mo, &err);
    char name[128];
    snprintf(name, sizeof name, "%s_r%lld_at%lld_mha_cached_step_failing_after_its_append_leaves_the_cache_as_it_was",
             key_dtype ? attn_dtype_name(key_dtype) : "f32", (long long)R, (long long)pre);
    check(!st && failed == ATTN_ERR_WORKSPACE && kept && !memcmp(o[0], o[1], sizeof o[0]), name,
          "status %d %s; the failed step: status %d, cache kept %d; outputs %s", (int)st, st ? err.message : "",
          (int)failed, kept, memcmp(o[0], o[1], sizeof o[0]) ? "differ" : "same");
    free(w), free(x), free(out), free(before), free(after), free(wsp), free(mem[0]), free(mem[1]);
}

/* Gathering into an output that repeats memory through a stride 0 (a
 * broadcast view, one element standing for several results): attn.h
 * refuses such an output with ATTN_ERR_STRIDE before anything is written,
 * for a pool, a view of its pages and a contiguous cache alike, whether
 * the keys are stored per row (q8) or per channel (q4c, whose residual
 * rows are gathered by their own loop). */
static void test_gather_into_broadcast(attn_dtype dtype, attn_dtype key_dtype) {
    enum { HK = 2, E = 32, N = 40 };
    char name[96];
    snprintf(name, sizeof name, "%s%s%s_gather_into_a_broadcast_output", attn_dtype_name(dtype), key_dtype ? "_" : "",
             key_dtype ? attn_dtype_name(key_dtype) : "");
    attn_error err;
    attn_kv_pages_desc pd = attn_kv_pages_desc_default();
    pd.heads = HK, pd.key_dim = E, pd.value_dim = E, pd.dtype = dtype, pd.key_dtype = key_dtype, pd.page_size = 32;
    pd.num_pages = 4, pd.max_sequences = 1;
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.heads = HK, cd.key_dim = E, cd.value_dim = E, cd.dtype = dtype, cd.key_dtype = key_dtype, cd.capacity = 64;
    size_t pbytes = 0, cbytes = 0;
    void *pmem = NULL, *cmem = NULL;
    attn_kv_pages *pool = NULL;
    attn_kv_cache *cache = NULL;
    float *kf = rows_of(N * HK, E, false), *vf = rows_of(N * HK, E, false);
    static float one[E], other[HK * N * E]; /* a broadcast k (one row for all), and a v of its own */
    int64_t seq = 0, sh[3] = {N, HK, E}, cu[2] = {0, N}, gs[3] = {HK, N, E}, bstr[3] = {0, 0, 1}, ks[4] = {1, HK, N, E};
    attn_tensor tk, tv, gk, gv, ck, cv;
    attn_tensor_init(&tk, kf, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&tv, vf, ATTN_F32, 3, sh, NULL, NULL);
    attn_status st = attn_kv_pages_bytes(&pbytes, &pd, &err);
    if (!st) st = attn_kv_cache_bytes(&cbytes, &cd, &err);
    if (!st) pmem = malloc(pbytes), cmem = malloc(cbytes);
    if (!st) st = attn_kv_pages_init(&pool, pmem, pbytes, &pd, &err);
    if (!st) st = attn_kv_cache_init(&cache, cmem, cbytes, &cd, &err);
    if (!st) st = attn_kv_pages_create(pool, &seq, &err);
    if (!st) st = attn_kv_pages_append(pool, &seq, 1, &tk, &tv, cu, &err);
    attn_tensor_init(&ck, kf, ATTN_F32, 4, ks, NULL, NULL), attn_tensor_init(&cv, vf, ATTN_F32, 4, ks, NULL, NULL);
    if (!st) st = attn_kv_cache_append(cache, &ck, &cv, &err);
    if (st) {
        check(0, name, "setup: %s", err.message);
        free(kf), free(vf), free(pmem), free(cmem);
        return;
    }
    for (int i = 0; i < E; i++) one[i] = -7.0f;
    for (int i = 0; i < HK * N * E; i++) other[i] = -9.0f; /* v, a valid output, must be left as it is too */
    attn_tensor_init(&gk, one, ATTN_F32, 3, gs, bstr, NULL), attn_tensor_init(&gv, other, ATTN_F32, 3, gs, NULL, NULL);
    attn_kv_paged_view view = attn_kv_paged_view_default();
    attn_kv_pages_view(&view, pool, NULL);
    attn_status s[3];
    s[0] = attn_kv_pages_gather(&gk, &gv, pool, seq, &err);
    s[1] = attn_kv_paged_gather(&gk, &gv, &view, seq, &err);
    int64_t bstr4[4] = {0, 0, 0, 1};
    attn_tensor_init(&gk, one, ATTN_F32, 4, ks, bstr4, NULL);
    attn_tensor_init(&gv, other, ATTN_F32, 4, ks, NULL, NULL);
    s[2] = attn_kv_cache_gather(&gk, &gv, cache, &err);
    bool untouched = true;
    for (int i = 0; i < E; i++) untouched &= one[i] == -7.0f;
    for (int i = 0; i < HK * N * E; i++) untouched &= other[i] == -9.0f;
    check(s[0] == ATTN_ERR_STRIDE && s[1] == ATTN_ERR_STRIDE && s[2] == ATTN_ERR_STRIDE && untouched, name,
          "statuses %d %d %d (want %d), k and v untouched %d", (int)s[0], (int)s[1], (int)s[2], (int)ATTN_ERR_STRIDE,
          untouched);
    free(kf), free(vf), free(pmem), free(cmem);
}

int main(void) {
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    test_key_dot_set();
    test_query_code_rule();
    test_query_code_tiny_block();
    test_older_structs();
    test_descale(ATTN_E4M3), test_descale(ATTN_E5M2);
    test_fp8_in_place(ATTN_E4M3), test_fp8_in_place(ATTN_E5M2);
    test_q4_1_in_place();
    test_hadamard(ATTN_Q8), test_hadamard(ATTN_Q4), test_hadamard(ATTN_E4M3);
    static const attn_dtype FORMATS[5] = {ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2};
    for (int f = 0; f < 5; f++) {
        attn_dtype fm = FORMATS[f];
        const qcase cases[] = {
            {77, 300, 64, 64, 4, 2, 16, fm, ATTN_CAUSAL_NONE, 0, 0, "flash"},
            {130, 700, 128, 64, 4, 1, 24, fm, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, "flash"},
            {1, 5000, 128, 128, 8, 2, 256, fm, ATTN_CAUSAL_NONE, 1, 0, "decode"},
            {4, 4100, 64, 64, 4, 2, 16, fm, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, "decode"},
            {3, 2100, 96, 32, 2, 1, 100, fm, ATTN_CAUSAL_NONE, 1, 0, "decode"},
            /* head sizes past one pass of the integer kernel's tiles (keys: 8
             * blocks; values: 32), each ending in a part of a quad of blocks */
            {2, 600, 320, 1056, 4, 1, 16, fm, ATTN_CAUSAL_NONE, 1, 0, "decode"},
            {20, 90, 32, 32, 2, 1, 16, fm, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 1, "exact"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
        test_varlen(fm);
        test_pool(fm);
        test_odd_pages(fm, 17), test_odd_pages(fm, 16), test_odd_pages(fm, 24);
        test_cache(fm);
        test_dense(fm, 1, 3000, "decode");
        test_dense(fm, 40, 300, "flash");
    }
    test_dense_errors();
    static const attn_dtype GROUPED[2] = {ATTN_Q4C, ATTN_Q2C};
    for (int f = 0; f < 2; f++) /* residual rows present (S % 32), partial quads and two passes of blocks, E not of 32 */
        for (int paged = 0; paged < 2; paged++) {
            test_groups(GROUPED[f], paged, 128, 331, 1, 0);
            test_groups(GROUPED[f], paged, 64, 1000, 3, 0);
            test_groups(GROUPED[f], paged, 96, 97, 2, 0);
            test_groups(GROUPED[f], paged, 320, 200, 1, 0);
            test_groups(GROUPED[f], paged, 40, 77, 1, 0);
            /* KIVI's window: the last R positions before the group being filled in f16 too */
            test_groups(GROUPED[f], paged, 128, 331, 1, 128);
            test_groups(GROUPED[f], paged, 64, 1000, 3, 64);
            test_groups(GROUPED[f], paged, 96, 97, 2, 64); /* one group before the window */
            /* values in blocks of 32 need value_dim of 32s, not key_dim: the keys are stored apart */
            test_groups_values(GROUPED[f], paged, 48, 200, 1, 0, ATTN_Q8);
            test_groups_values(GROUPED[f], paged, 40, 97, 2, 0, ATTN_Q4);
            test_groups_values(GROUPED[f], paged, 48, 331, 1, 64, ATTN_Q4_1);
        }
    for (int f = 0; f < 2; f++) {
        test_groups_workspace(GROUPED[f], ATTN_F32, 0, 1, 1);
        test_groups_workspace(GROUPED[f], ATTN_BF16, 64, 1, 2);
        test_groups_workspace(GROUPED[f], ATTN_Q8, 32, 40, 2);
        test_groups_workspace(GROUPED[f], ATTN_F32, 128, 40, 1);
        test_mha_cached_failed_step(GROUPED[f], 0, 63);  /* the group 32 .. 63 leaves the window */
        test_mha_cached_failed_step(GROUPED[f], 32, 95); /* with R = 32, the group 32 .. 63 */
        test_mha_cached_failed_step(GROUPED[f], 0, 40);  /* no group leaves */
    }
    test_mha_cached_failed_step(0, 0, 63); /* f32 keys */
    test_widen("avx512"), test_widen("avx2"), test_widen("c");
    test_errors();
    test_gather_into_broadcast(ATTN_Q8, 0), test_gather_into_broadcast(ATTN_E4M3, 0);
    test_gather_into_broadcast(ATTN_F16, ATTN_Q4C);
    return n_failed ? 1 : 0;
}
