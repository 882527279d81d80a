/* test_amx.c -- the AMX kernels on any CPU, through the tile emulator
 * (tests/amx/amx_emu.h): the emulator's own semantics (tile config, loads
 * and stores, TDPBF16PS's and TDPFP16PS's order of sums, rounding and
 * flushes, as Intel's SDM states them), the AMX-BF16 microkernels against
 * exact sums of the same bf16 values, and the flash forward run on them
 * against the exact f64 kernel within the bf16 mode's bound. The Makefile
 * links ukernel_amx.c compiled against the emulator (attn_bf16_amx_emulated);
 * on a CPU with AMX the library's own set is compared with it too. */
#include "attn.h"
#include "check.h"
#include "amx/amx_emu.h"
#include "../src/kernels/ukernel.h"
#include "../src/kernels/ukernel_bf16.h"
#include "../src/kernels/gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const attn_bf16_kernels attn_bf16_amx_emulated;

#define TEST_RNG_SEED 7
#include "rng.h"
static uint16_t bf16_of(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}
static float f32_of_bf16(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static uint32_t pair(uint16_t even, uint16_t odd) { return even | (uint32_t)odd << 16; }

/* A palette-1 configuration: every tile rows × colsb. */
static void config_all(int rows, int colsb) {
    unsigned char c[64] = {1};
    for (int t = 0; t < 8; t++) c[16 + 2 * t] = (unsigned char)colsb, c[48 + t] = (unsigned char)rows;
    _tile_loadconfig(c);
}

static void test_emulator(void) {
    /* Loads and stores move rows of colsb bytes at the stride; a tile's
     * bytes past them are zero, memory past them untouched. */
    unsigned char src[8][40], dst[8][40];
    for (int i = 0; i < 8 * 40; i++) src[i / 40][i % 40] = (unsigned char)(i * 7 + 1);
    memset(dst, 0xee, sizeof dst);
    config_all(3, 20);
    _tile_loadd(2, src, 40);
    _tile_stored(2, dst, 40);
    int wrong = 0;
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 40; c++) wrong += dst[r][c] != (r < 3 && c < 20 ? src[r][c] : 0xee);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 64; c++) wrong += (r >= 3 || c >= 20) && attn_amx.t[2][r][c] != 0;
    check(!wrong, "amx_emulator_load_store_rows_colsb_stride", "%d bytes wrong", wrong);

    /* TDPBF16PS sums even and odd products apart: with A = [(2^27, 1),
     * (-2^27, 0)] and B's column [(1, 1), (1, 0)] the even sum is 0 and the
     * odd 1, so C = 1; one chain in VDPBF16PS's order would lose the 1. */
    uint32_t a[16] = {0}, b[2 * 16] = {0};
    float c[16];
    a[0] = pair(bf16_of(0x1p27f), bf16_of(1)), a[1] = pair(bf16_of(-0x1p27f), 0);
    b[0] = pair(bf16_of(1), bf16_of(1)), b[16] = pair(bf16_of(1), 0);
    config_all(1, 64);
    unsigned char cfg[64] = {1};
    cfg[16] = 4, cfg[48] = 1;          /* tmm0: C, 1 × 1 */
    cfg[18] = 8, cfg[49] = 1;          /* tmm1: A, 1 row of 2 pairs */
    cfg[20] = 4, cfg[50] = 2;          /* tmm2: B, 2 rows of 1 pair */
    _tile_loadconfig(cfg);
    _tile_zero(0);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, c, 64);
    float chain = attn_bf16_dot_pair(attn_bf16_dot_pair(0, a[0], b[0]), a[1], b[16]);
    check(c[0] == 1.0f && chain == 0.0f, "amx_emulator_tdpbf16ps_even_odd_sums_apart", "C = %g (VDPBF16PS's chain: %g)",
          (double)c[0], (double)chain);

    /* Denormal inputs count as 0 (DAZ) and denormal results are flushed
     * (FTZ): 2^-64 · 2^-63 = 2^-127 is a denormal, so C stays 0. */
    a[0] = pair(bf16_of(0x1p-64f), 0x0001), a[1] = 0;
    b[0] = pair(bf16_of(0x1p-63f), bf16_of(0x1p100f)), b[16] = 0;
    _tile_zero(0);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, c, 64);
    check(c[0] == 0.0f, "amx_emulator_tdpbf16ps_daz_ftz", "C = %g", (double)c[0]);

    /* TDPFP16PS on small integers (exact in every format): the integer dot
     * product, added to C. */
    uint16_t h[4] = {0x4000, 0x4200, 0xc400, 0x3c00}; /* 2, 3, -4, 1 */
    a[0] = pair(h[0], h[1]), a[1] = pair(h[2], h[3]);
    b[0] = pair(h[1], h[3]), b[16] = pair(h[0], h[2]); /* (3, 1), (2, -4) */
    float c0 = 10;
    _tile_loadd(0, &c0, 64);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    _tile_dpfp16ps(0, 1, 2);
    _tile_stored(0, c, 64);
    /* 10 + (2·3 + 3·1) + (-4·2 + 1·-4) = 10 + 9 - 12 = 7 */
    check(c[0] == 7.0f, "amx_emulator_tdpfp16ps_exact_integers", "C = %g", (double)c[0]);
    _tile_release();
}

/* The AMX set's qk and pv against double sums of the same bf16 values:
 * within (depth + 2) · 2^-24 · Σ|products| (f32 sums, one rounding a step). */
static void test_kernels(const attn_bf16_kernels *bk, const char *label) {
    enum { MAXE2 = 70, K2 = 300, NR = 64, LD = NR + 8 };
    static uint32_t q2[16 * MAXE2], kt2[MAXE2 * LD], p2[16 * K2], v2[K2 * LD];
    static float s[16 * LD], o[16 * LD], o0[16 * LD];
    for (int i = 0; i < 16 * MAXE2; i++) q2[i] = pair(bf16_of(normal()), bf16_of(normal()));
    for (int i = 0; i < MAXE2 * LD; i++) kt2[i] = pair(bf16_of(normal()), bf16_of(normal()));
    for (int i = 0; i < 16 * K2; i++) p2[i] = pair(bf16_of((float)uniform()), bf16_of((float)uniform()));
    for (int i = 0; i < K2 * LD; i++) v2[i] = pair(bf16_of(normal()), bf16_of(normal()));
    static const int E2S[] = {1, 5, 16, 37, 64, 70};
    int bad = 0;
    double worst = 0;
    for (size_t t = 0; t < sizeof E2S / sizeof E2S[0]; t++) {
        int E2 = E2S[t];
        bk->qk(s, LD, q2, MAXE2, kt2, LD, E2);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < NR; c++) {
                double want = 0, mag = 0;
                for (int e = 0; e < E2; e++)
                    for (int h = 0; h < 2; h++) {
                        double x = (double)f32_of_bf16((uint16_t)(q2[r * MAXE2 + e] >> 16 * h)) *
                                   f32_of_bf16((uint16_t)(kt2[e * LD + c] >> 16 * h));
                        want += x, mag += fabs(x);
                    }
                double err = fabs(s[r * LD + c] - want), bound = (E2 + 2) * 0x1p-24 * mag;
                bad += err > bound;
                if (mag > 0 && err / mag > worst) worst = err / mag;
            }
    }
    for (int nvec = 1; nvec <= 4; nvec++) {
        for (int i = 0; i < 16 * LD; i++) o[i] = o0[i] = normal();
        bk->pv(o, LD, p2, K2, v2, LD, K2 - 13, nvec);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < LD; c++) {
                if (c >= 16 * nvec) {
                    bad += memcmp(&o[r * LD + c], &o0[r * LD + c], 4) != 0; /* columns past nvec untouched */
                    continue;
                }
                double want = o0[r * LD + c], mag = fabs(want);
                for (int k = 0; k < K2 - 13; k++)
                    for (int h = 0; h < 2; h++) {
                        double x = (double)f32_of_bf16((uint16_t)(p2[r * K2 + k] >> 16 * h)) *
                                   f32_of_bf16((uint16_t)(v2[k * LD + c] >> 16 * h));
                        want += x, mag += fabs(x);
                    }
                bad += fabs(o[r * LD + c] - want) > (K2 + 2) * 0x1p-24 * mag;
            }
    }
    char name[96];
    snprintf(name, sizeof name, "amx_kernels_%s_qk_pv_within_f32_sums_of_bf16", label);
    check(!bad && bk->mr == 16, name, "%d results outside the bound (worst relative error %.3g), mr %d", bad, worst, bk->mr);
}

/* The AMX set's GEMM microkernel (the layer's products): its 32 × 32 tile
 * is, element for element, what the flash kernels' qk computes on the same
 * pairs (TDPBF16PS's order over 16 pairs a step, from zero), added to c
 * with one rounding; the elements beside the tile are untouched. Then the
 * whole GEMM frame on it (attn_gemm_bf16), on shapes that cross the tiles'
 * and blocks' edges with an odd depth, within (K + 4)·2^-24·Σ|products| of
 * the exact sum of the bf16 values, bitwise the same on 1 and 3 threads. */
static void test_gemm_kernel(const attn_bf16_kernels *bk, const char *label) {
    enum { K2 = 48, MR = 32, NR = 32, LD = 40 };
    static uint32_t a2[K2 * MR], b2[K2 * NR + 64], q2[16 * K2];
    static float c[(MR + 2) * LD], c0[(MR + 2) * LD], s[16 * 64];
    bool ok = bk->gemm_mr == MR && bk->gemm_nr == NR && bk->gemm_kp == 16;
    for (int i = 0; i < K2 * MR; i++) a2[i] = pair(bf16_of(normal()), bf16_of(normal()));
    for (int i = 0; i < K2 * NR; i++) b2[i] = pair(bf16_of(normal() * (i % 9 ? 1.0f : 1e-20f)), bf16_of(normal()));
    for (int i = 0; i < (MR + 2) * LD; i++) c[i] = c0[i] = normal();
    if (ok) bk->gemm(c, LD, a2, b2, K2);
    for (int half = 0; ok && half < 2; half++) {
        /* rows 16·half .. of a2 (16-pair tiles, 32 rows each) as qk's row-major pairs */
        for (int r = 0; r < 16; r++)
            for (int p = 0; p < K2; p++) q2[r * K2 + p] = a2[p / 16 * MR * 16 + (16 * half + r) * 16 + p % 16];
        bk->qk(s, 64, q2, K2, b2, NR, K2); /* columns 32-63 read past the tile: not compared */
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < NR; j++) {
                float want = c0[(16 * half + r) * LD + j] + s[r * 64 + j];
                ok &= memcmp(&c[(16 * half + r) * LD + j], &want, 4) == 0;
            }
    }
    for (int i = 0; i < (MR + 2) * LD; i++)
        if (i / LD >= MR || i % LD >= NR) ok &= memcmp(&c[i], &c0[i], 4) == 0;
    char name[96];
    snprintf(name, sizeof name, "amx_gemm_%s_microkernel_32x32_is_qk_plus_c", label);
    check(ok, name, "tile %d x %d (kp %d) differs from qk's sums or spilled", bk->gemm_mr, bk->gemm_nr, bk->gemm_kp);

    static const int SHAPES[][3] = {{1, 1, 1}, {33, 31, 17}, {70, 100, 301}, {5, 65, 1000}, {40, 37, 64}};
    int bad = 0, differ = 0;
    for (size_t t = 0; t < sizeof SHAPES / sizeof SHAPES[0]; t++) {
        int M = SHAPES[t][0], N = SHAPES[t][1], K = SHAPES[t][2];
        float *a = malloc(sizeof(float) * (size_t)(M * K)), *c1 = malloc(sizeof(float) * (size_t)(M * N)),
              *c3 = malloc(sizeof(float) * (size_t)(M * N));
        uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(N * K)); /* a bf16 weight (N × K), read transposed */
        for (int i = 0; i < M * K; i++) a[i] = normal();
        for (int i = 0; i < N * K; i++) w[i] = bf16_of(normal());
        attn_mat am = {(char *)a, ATTN_F32, M, K, K, 1}, bm = {(char *)w, ATTN_BF16, K, N, 1, K};
        attn_mat cm1 = {(char *)c1, ATTN_F32, M, N, N, 1}, cm3 = {(char *)c3, ATTN_F32, M, N, N, 1};
        bad += !attn_gemm_bf16(&cm1, &am, &bm, NULL, NULL, false, 1, bk, NULL) ||
               !attn_gemm_bf16(&cm3, &am, &bm, NULL, NULL, false, 3, bk, NULL);
        differ += memcmp(c1, c3, sizeof(float) * (size_t)(M * N)) != 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double want = 0, mag = 0;
                for (int p = 0; p < K; p++) {
                    double x = (double)f32_of_bf16(bf16_of(a[i * K + p])) * f32_of_bf16(w[j * K + p]);
                    want += x, mag += fabs(x);
                }
                bad += fabs(c1[i * N + j] - want) > (K + 4) * 0x1p-24 * mag + 0x1p-100;
            }
        free(a), free(c1), free(c3), free(w);
    }
    snprintf(name, sizeof name, "amx_gemm_%s_frame_within_f32_sums_of_bf16", label);
    check(!bad && !differ, name, "%d results outside the bound, %d shapes differ between 1 and 3 threads", bad, differ);
}

/* The flash forward in the bf16 mode on the AMX set: against the exact f64
 * kernel, within the mode's 1e-2 (relative to the output's size), the
 * verbose line naming amx_bf16. */
static void test_flash(const attn_bf16_kernels *bk) {
    if (strcmp(attn_isa(), "avx512") != 0) {
        skip("amx_flash_forward_vs_f64", "the AMX set runs with the AVX-512 f32 kernels; this run has %s", attn_isa());
        return;
    }
    const attn_bf16_kernels *old = attn_bf16_set_for_tests(bk);
    struct {
        int L, S, E, Ev, Hq, Hk, causal, window;
    } shapes[] = {{300, 400, 64, 64, 2, 1, 0, 0}, {157, 333, 37, 20, 2, 2, 2, 0}, {200, 200, 128, 128, 1, 1, 1, 60}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int L = shapes[t].L, S = shapes[t].S, E = shapes[t].E, Ev = shapes[t].Ev, Hq = shapes[t].Hq, Hk = shapes[t].Hk;
        size_t nq = (size_t)Hq * L * E, nk = (size_t)Hk * S * E, nv = (size_t)Hk * S * Ev, no = (size_t)Hq * L * Ev;
        float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *out = malloc(4 * no);
        double *q64 = malloc(8 * nq), *k64 = malloc(8 * nk), *v64 = malloc(8 * nv), *o64 = malloc(8 * no);
        for (size_t i = 0; i < nq; i++) q64[i] = q[i] = normal();
        for (size_t i = 0; i < nk; i++) k64[i] = k[i] = normal();
        for (size_t i = 0; i < nv; i++) v64[i] = v[i] = normal();
        int64_t sq[3] = {Hq, L, E}, sk[3] = {Hk, S, E}, sv[3] = {Hk, S, Ev}, so[3] = {Hq, L, Ev};
        attn_tensor tq, tk, tv, to, tq64, tk64, tv64, to64;
        attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, sk, NULL, NULL);
        attn_tensor_init(&tv, v, ATTN_F32, 3, sv, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, so, NULL, NULL);
        attn_tensor_init(&tq64, q64, ATTN_F64, 3, sq, NULL, NULL), attn_tensor_init(&tk64, k64, ATTN_F64, 3, sk, NULL, NULL);
        attn_tensor_init(&tv64, v64, ATTN_F64, 3, sv, NULL, NULL), attn_tensor_init(&to64, o64, ATTN_F64, 3, so, NULL, NULL);
        attn_sdpa_options opt = attn_sdpa_options_default();
        opt.causal = (attn_causal)shapes[t].causal, opt.window = shapes[t].window;
        attn_error err;
        attn_status st64 = attn_sdpa(&to64, NULL, NULL, &tq64, &tk64, &tv64, &opt, &err);
        opt.compute = ATTN_COMPUTE_BF16;
        char kernel[32];
        verbose_begin();
        attn_status st = attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &opt, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        double worst = 0, big = 0;
        for (size_t i = 0; i < no; i++) {
            worst = fmax(worst, fabs(out[i] - o64[i]));
            big = fmax(big, fabs(o64[i]));
        }
        char name[96];
        snprintf(name, sizeof name, "amx_flash_forward_vs_f64_L%d_S%d_E%d_Ev%d", L, S, E, Ev);
        check(!st && !st64 && strcmp(kernel, "flash") == 0 && strstr(verbose_last_line, "bf16_kernels=amx_bf16") &&
                  worst <= 1e-2 * big && worst > 0,
              name, "status %d/%d, kernel %s, error %.3g of %.3g; %s", (int)st, (int)st64, kernel, worst, big,
              verbose_last_line);
        free(q), free(k), free(v), free(out), free(q64), free(k64), free(v64), free(o64);
    }
    attn_bf16_set_for_tests(old);
}

/* The backward in the bf16 mode on bf16 set bk (the process's set while it
 * runs): the gradients against the exact f64 backward within the mode's
 * bound (attn.h), with u = 2^-8 (bf16's unit roundoff) and s_abs the largest
 * scale·Σ_e|q||k| of a row and key:
 *   |g - exact| <= (6u + e^x - 1) · max g_abs,  x = 4.2 · u · s_abs,
 * g_abs the gradient with every term made positive: dV's Pᵀ|dout|, dQ's
 * and dK's scale·dS_abs|k| and scale·dS_absᵀ|q|, dS_abs = P ∘ (|dout||v|ᵀ +
 * rowsum(|dout| ∘ P|v|)). (q, k rounded: each score within 2u·s_abs, and the
 * lse within as much when the forward ran in bf16 (here it ran in f32), so
 * each weight within a factor e^(±x); the two operands of each product
 * rounded: 6u in all.)
 * The verbose line must name the set. got[] receives the gradients
 * (dq, dk, dv as f32, malloc'd) for the caller to compare sets. */
typedef struct bwd_shape {
    int L, S, E, Ev, Hq, Hk, causal, window;
} bwd_shape;

static void test_backward_set(const attn_bf16_kernels *bk, const char *label, const bwd_shape *sh, float *got[3],
                              double *bound_out) {
    const attn_bf16_kernels *old = attn_bf16_set_for_tests(bk);
    int L = sh->L, S = sh->S, E = sh->E, Ev = sh->Ev, Hq = sh->Hq, Hk = sh->Hk;
    size_t nq = (size_t)Hq * L * E, nk = (size_t)Hk * S * E, nv = (size_t)Hk * S * Ev, no = (size_t)Hq * L * Ev;
    size_t n[3] = {nq, nk, nv};
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *out = malloc(4 * no), *dout = malloc(4 * no);
    float *lse = malloc(4 * (size_t)Hq * L);
    double *q64 = malloc(8 * nq), *k64 = malloc(8 * nk), *v64 = malloc(8 * nv), *o64 = malloc(8 * no),
           *do64 = malloc(8 * no), *l64 = malloc(8 * (size_t)Hq * L);
    double *want[3], *gabs[3];
    uint64_t seed = rng;
    rng = test_seed(99); /* the same inputs for every set */
    for (size_t i = 0; i < nq; i++) q64[i] = q[i] = normal();
    for (size_t i = 0; i < nk; i++) k64[i] = k[i] = normal();
    for (size_t i = 0; i < nv; i++) v64[i] = v[i] = normal();
    for (size_t i = 0; i < no; i++) do64[i] = dout[i] = normal();
    rng = seed;
    for (int t = 0; t < 3; t++) {
        got[t] = malloc(4 * n[t]), want[t] = malloc(8 * n[t]), gabs[t] = calloc(n[t], 8);
    }
    int64_t sq[3] = {Hq, L, E}, sk[3] = {Hk, S, E}, sv[3] = {Hk, S, Ev}, so[3] = {Hq, L, Ev}, sl[2] = {Hq, L};
    attn_tensor tq, tk, tv, to, tl, td, tq64, tk64, tv64, to64, tl64, td64, g[3], g64[3];
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, sv, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, so, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL), attn_tensor_init(&td, dout, ATTN_F32, 3, so, NULL, NULL);
    attn_tensor_init(&tq64, q64, ATTN_F64, 3, sq, NULL, NULL), attn_tensor_init(&tk64, k64, ATTN_F64, 3, sk, NULL, NULL);
    attn_tensor_init(&tv64, v64, ATTN_F64, 3, sv, NULL, NULL), attn_tensor_init(&to64, o64, ATTN_F64, 3, so, NULL, NULL);
    attn_tensor_init(&tl64, l64, ATTN_F64, 2, sl, NULL, NULL), attn_tensor_init(&td64, do64, ATTN_F64, 3, so, NULL, NULL);
    const int64_t *shp[3] = {sq, sk, sv};
    for (int t = 0; t < 3; t++) {
        attn_tensor_init(&g[t], got[t], ATTN_F32, 3, shp[t], NULL, NULL);
        attn_tensor_init(&g64[t], want[t], ATTN_F64, 3, shp[t], NULL, NULL);
    }
    attn_sdpa_options opt = attn_sdpa_options_default();
    opt.causal = (attn_causal)sh->causal, opt.window = sh->window;
    attn_error err;
    /* The forward in f32 (out and lse as the backward takes them), and in f64 for the oracle. */
    attn_status st = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &opt, &err);
    double *w64 = malloc(8 * (size_t)Hq * L * S); /* the exact weights P */
    int64_t sw[3] = {Hq, L, S};
    attn_tensor tw64;
    attn_tensor_init(&tw64, w64, ATTN_F64, 3, sw, NULL, NULL);
    st |= attn_sdpa(&to64, &tl64, &tw64, &tq64, &tk64, &tv64, &opt, &err);
    st |= attn_sdpa_backward(&g64[0], &g64[1], &g64[2], NULL, &td64, &tq64, &tk64, &tv64, &to64, &tl64, &opt, &err);
    opt.compute = ATTN_COMPUTE_BF16;
    char kernel[32];
    verbose_begin();
    st |= attn_sdpa_backward(&g[0], &g[1], &g[2], NULL, &td, &tq, &tk, &tv, &to, &tl, &opt, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    /* g_abs and s_abs (over every key, seen or not), in f64 from the exact P. */
    double scale = 1 / sqrt((double)E), s_abs = 0;
    double *prow = malloc(8 * (size_t)S), *dsabs = malloc(8 * (size_t)S);
    for (int h = 0; h < Hq; h++) {
        int hk = h / (Hq / Hk);
        const double *Q = q64 + (size_t)h * L * E, *K = k64 + (size_t)hk * S * E, *V = v64 + (size_t)hk * S * Ev;
        const double *dO = do64 + (size_t)h * L * Ev;
        double *gq = gabs[0] + (size_t)h * L * E, *gk = gabs[1] + (size_t)hk * S * E, *gv = gabs[2] + (size_t)hk * S * Ev;
        for (int i = 0; i < L; i++) {
            /* D's term as attn.h counts it: |dout| times P|v|, not |out|
             * (out may cancel to near 0 while its rounding does not) */
            const double *P = w64 + ((size_t)h * L + i) * S;
            double Dabs = 0;
            for (int e = 0; e < Ev; e++) {
                double pv = 0;
                for (int j = 0; j < S; j++) pv += P[j] * fabs(V[j * Ev + e]);
                Dabs += fabs(dO[i * Ev + e]) * pv;
            }
            for (int j = 0; j < S; j++) {
                double sa = 0, dp = 0;
                for (int e = 0; e < E; e++) sa += fabs(Q[i * E + e] * K[j * E + e]);
                for (int e = 0; e < Ev; e++) dp += fabs(dO[i * Ev + e] * V[j * Ev + e]);
                prow[j] = w64[((size_t)h * L + i) * S + j];
                if (sa * scale > s_abs) s_abs = sa * scale;
                dsabs[j] = prow[j] * (dp + Dabs);
                for (int e = 0; e < Ev; e++) gv[j * Ev + e] += prow[j] * fabs(dO[i * Ev + e]);
                for (int e = 0; e < E; e++) {
                    gq[i * E + e] += scale * dsabs[j] * fabs(K[j * E + e]);
                    gk[j * E + e] += scale * dsabs[j] * fabs(Q[i * E + e]);
                }
            }
        }
    }
    const double u = 0x1p-8;
    double worst = 0, ratio = 0, bound = 0;
    int bad = 0;
    for (int t = 0; t < 3; t++) {
        double big = 0;
        for (size_t i = 0; i < n[t]; i++) big = fmax(big, gabs[t][i]);
        double b = (6 * u + expm1(4.2 * u * s_abs)) * big;
        for (size_t i = 0; i < n[t]; i++) {
            double e = fabs(got[t][i] - want[t][i]);
            bad += !(e <= b);
            worst = fmax(worst, e), ratio = fmax(ratio, e / b);
        }
        bound = fmax(bound, b);
    }
    *bound_out = bound;
    char name[128], want_label[48];
    snprintf(name, sizeof name, "bf16_backward_%s_vs_f64_L%d_S%d_E%d_Ev%d_causal%d_window%d", label, L, S, E, Ev,
             sh->causal, sh->window);
    snprintf(want_label, sizeof want_label, "bf16_kernels=%s", bk->name);
    /* The errors are bf16's, far above f32's: the products ran on bf16 pairs. */
    check(!st && strcmp(kernel, "flash_backward") == 0 && strstr(verbose_last_line, want_label) && !bad &&
              ratio > 1e-3,
          name, "status %d, kernel %s, %d outside (largest error %.3g, %.3g of the bound), s_abs %.3g; %s", (int)st,
          kernel, bad, worst, ratio, s_abs, verbose_last_line);
    free(prow), free(dsabs), free(w64);
    for (int t = 0; t < 3; t++) free(want[t]), free(gabs[t]);
    free(q), free(k), free(v), free(out), free(dout), free(lse), free(q64), free(k64), free(v64), free(o64), free(do64),
        free(l64);
    attn_bf16_set_for_tests(old);
}

/* The backward on the AMX set (through the emulator) and on the set this
 * machine runs the mode with otherwise (avx512_bf16, or the emulation):
 * each within the bound, and each other within twice it. */
static void test_backward(const attn_bf16_kernels *amx, const char *label) {
    static const bwd_shape shapes[] = {{150, 200, 64, 48, 2, 1, 2, 0}, {97, 130, 37, 20, 1, 1, 1, 40},
                                       {64, 300, 128, 128, 1, 1, 0, 0}};
    if (strcmp(attn_isa(), "avx512") != 0) {
        /* The portable kernels' set (the emulation of VDPBF16PS) still runs
         * the mode's backward: checked alone. */
        const attn_bf16_kernels *own = attn_bf16_active();
        for (size_t t = 0; own && t < sizeof shapes / sizeof shapes[0]; t++) {
            float *a[3];
            double bound;
            test_backward_set(own, own->name, &shapes[t], a, &bound);
            for (int g = 0; g < 3; g++) free(a[g]);
        }
        skip("amx_flash_backward_vs_f64", "the AMX set runs with the AVX-512 f32 kernels; this run has %s", attn_isa());
        return;
    }
    const attn_bf16_kernels *other = attn_bf16_set_for_tests(NULL);
    attn_bf16_set_for_tests(other);
    if (!other || other == amx) other = &attn_bf16_avx512; /* the CPU's AVX512_BF16 set, where it is not the active one */
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        float *a[3], *b[3];
        double bound_a, bound_b;
        test_backward_set(amx, label, &shapes[t], a, &bound_a);
        bool other_runs = other != &attn_bf16_avx512 || __builtin_cpu_supports("avx512bf16");
        if (other_runs) {
            test_backward_set(other, other->name, &shapes[t], b, &bound_b);
            size_t n[3] = {(size_t)shapes[t].Hq * shapes[t].L * shapes[t].E, (size_t)shapes[t].Hk * shapes[t].S * shapes[t].E,
                           (size_t)shapes[t].Hk * shapes[t].S * shapes[t].Ev};
            double worst = 0;
            for (int g = 0; g < 3; g++)
                for (size_t i = 0; i < n[g]; i++) worst = fmax(worst, fabs((double)a[g][i] - b[g][i]));
            char name[128];
            snprintf(name, sizeof name, "bf16_backward_%s_vs_%s_L%d_S%d_E%d", label, other->name, shapes[t].L,
                     shapes[t].S, shapes[t].E);
            check(worst <= 2 * bound_a, name, "largest difference %.3g, twice the bound %.3g", worst, 2 * bound_a);
            for (int g = 0; g < 3; g++) free(b[g]);
        } else {
            skip("bf16_backward_vs_avx512_bf16", "this CPU has no AVX512_BF16 to compare the AMX set with");
        }
        for (int g = 0; g < 3; g++) free(a[g]);
    }
}

int main(void) {
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    printf("# AMX through the tile emulator (tests/amx/amx_emu.h): amx_bf16\n");
    test_emulator();
    test_kernels(&attn_bf16_amx_emulated, "emulated");
    test_gemm_kernel(&attn_bf16_amx_emulated, "emulated");
    test_flash(&attn_bf16_amx_emulated);
    test_backward(&attn_bf16_amx_emulated, "amx_emulated");
    /* With AMX granted, the library's own set runs on the tiles: within the
     * same bound, and giving the emulator's floats bit for bit (which checks
     * the emulator's order of sums against the hardware). */
    if (strcmp(attn_bf16_label(), "amx_bf16") == 0) {
        test_kernels(attn_bf16_active(), "native");
        test_gemm_kernel(attn_bf16_active(), "native");
        enum { E2 = 40, LD = 72 };
        static uint32_t q2[16 * E2], kt2[E2 * LD];
        static float s1[16 * LD], s2[16 * LD];
        for (int i = 0; i < 16 * E2; i++) q2[i] = pair(bf16_of(normal()), bf16_of(normal() * 1e-3f));
        for (int i = 0; i < E2 * LD; i++) kt2[i] = pair(bf16_of(normal() * 1e3f), bf16_of(normal()));
        attn_bf16_active()->qk(s1, LD, q2, E2, kt2, LD, E2);
        attn_bf16_amx_emulated.qk(s2, LD, q2, E2, kt2, LD, E2);
        check(memcmp(s1, s2, sizeof s1) == 0, "amx_emulator_bitwise_the_hardware", "the tiles and the emulator differ");
        test_backward(attn_bf16_active(), "amx_native");
    } else {
        skip("amx_kernels_native_qk_pv_within_f32_sums_of_bf16", "this CPU has no AMX tiles here (bf16 kernels: %s)",
             attn_bf16_label());
        skip("amx_emulator_bitwise_the_hardware", "no AMX tiles here to compare the emulator with");
        skip("amx_flash_backward_native_vs_f64", "this CPU has no AMX tiles here (bf16 kernels: %s)", attn_bf16_label());
        skip("amx_gemm_native_microkernel_32x32_is_qk_plus_c", "this CPU has no AMX tiles here");
    }
    attn_shutdown();
    return n_failed ? 1 : 0;
}
