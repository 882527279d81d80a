/* test_fast.c -- the fast f32 path: the vector exp2 of every available ISA
 * against libm, bitwise identity across thread counts, agreement with the
 * exact f64 kernel on shapes that span many work items and key blocks, and
 * the f64 fallback for inputs the f32 kernel must not take (huge values,
 * NaN behind a mask).
 *
 * (The kernels' exponential is exp2: the softmax folds log2(e) into the
 * queries.) Prints "ok NAME" or "FAIL NAME: why"; exits 1 if any failed. Run it with
 * ATTN_ISA=avx512|avx2|c to test each ISA's whole path. */
#include "attn.h"
#include "check.h"
#include "../src/base/base.h"
#include "../src/sdpa/sdpa.h"
#include "../src/kernels/exp2.h"
#include "../src/kernels/ukernel.h"
#include "../src/kernels/ukernel_bf16.h"
#include "../src/kernels/qdot.h"
#include "../src/fast/fast.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include <cpuid.h>
#endif
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>


#define TEST_RNG_SEED 99
#include "process.h"
#include "rng.h"

#if defined(ATTN_TEST_SIMDE) || defined(ATTN_HAVE_X86_KERNELS)
/* The integer kernels' scratch (qdot.h: decode hands them its own). */
static _Alignas(64) unsigned char qdot_scratch[ATTN_QDOT_SCRATCH];
#endif

/* Distance in units in the last place between two floats of the same sign. */
static double ulps(float got, float want) {
    if (got == want) return 0;
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isinf(want) || isinf(got)) return INFINITY;
    int32_t a, b;
    memcpy(&a, &got, 4);
    memcpy(&b, &want, 4);
    return fabs((double)a - (double)b);
}

/* The microkernels of `isa`, with name set to the check's name (`check`, a
 * format with one %s for the ISA). On a CPU without the ISA: NULL, after
 * saying skip for that check and for `also` (another check the test makes,
 * or NULL). */
#if defined(ATTN_TEST_SIMDE)
/* This binary's second AVX-512 and AVX512_BF16 kernel sets: the same kernel
 * files compiled against SIMDe's portable intrinsics (the Makefile's
 * test_fast_simde, tests/simde/), which any CPU runs. The kernel tests take
 * them by the names "avx512-simde" and "avx512_bf16-simde". */
extern const attn_ukernels attn_ukernels_avx512_simde;
extern const attn_bf16_kernels attn_bf16_avx512_simde;
extern const attn_qdot_kernels attn_qdot_avx512vnni_simde, attn_qdot_avxvnni_simde, attn_qdot_avx512vnni_bf16_simde,
    attn_qdot_avx512vnni_int8_simde;
extern const attn_qdot_groups attn_qdot_groups_avx512vnni_simde;
#endif

/* The kernel set of that name: the library's (NULL when this CPU lacks it),
 * or in the SIMDe build the emulated one. */
static const attn_ukernels *kernels_named(const char *isa) {
#if defined(ATTN_TEST_SIMDE)
    if (strcmp(isa, "avx512-simde") == 0) return &attn_ukernels_avx512_simde;
#endif
    return attn_ukernels_by_name(isa);
}

static const attn_ukernels *kernels_or_skip(const char *isa, char *name, size_t size, const char *check,
                                            const char *also) {
    const attn_ukernels *uk = kernels_named(isa);
    if (!uk && also) {
        snprintf(name, size, also, isa);
        skip(name, "this CPU lacks %s", isa);
    }
    snprintf(name, size, check, isa);
    if (!uk) skip(name, "this CPU lacks %s", isa);
    return uk;
}

static void test_exp2(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "exp2_%s_vs_libm", "exp2_%s_same_floats_beside_cut_and_overflowing_lanes");
    if (!uk) return;
    enum { N = 200003 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    /* An even sweep over the whole range, then random points. */
    for (int i = 0; i < N / 2; i++) x[i] = -155.0f + 285.0f * (float)i / (N / 2);
    for (int i = N / 2; i < N; i++) x[i] = (float)(uniform() * 285 - 155);
    uk->exp2(y, x, N);
    /* Below 2^-64 the result is exactly 0, never tiny or subnormal
     * (kernels/exp2.h); above, within 2 ulp of libm. */
    double worst = 0;
    float at = 0;
    int not_cut = 0;
    for (int i = 0; i < N; i++) {
        if (x[i] < -64.0f) {
            not_cut += y[i] != 0;
            continue;
        }
        double u = ulps(y[i], (float)exp2((double)x[i]));
        if (u > worst) worst = u, at = x[i];
    }
    check(worst <= 2 && not_cut == 0, name, "max %.0f ulp at x = %.9g; %d results below 2^-64 not 0", worst,
          (double)at, not_cut);
    float special[8] = {-INFINITY, INFINITY, NAN, -1000.0f, 0.0f, -149.0f, -64.0f, -64.00001f}, out[8];
    uk->exp2(out, special, 8);
    snprintf(name, sizeof name, "exp2_%s_special_values", isa);
    check(out[0] == 0 && isinf(out[1]) && out[1] > 0 && isnan(out[2]) && out[3] == 0 && out[4] == 1 &&
              out[5] == 0 && out[6] == 0x1p-64f && out[7] == 0,
          name, "2^-inf=%g 2^inf=%g 2^nan=%g 2^-1000=%g 2^0=%g 2^-149=%g 2^-64=%g 2^-64.00001=%g", out[0], out[1],
          out[2], out[3], out[4], out[5], out[6], out[7]);
    /* Vectors whose results need one scaling may take a shorter path than
     * vectors with a lane that overflows, and a lane at -inf is cut: the
     * other lanes' floats are the same. Every 16th value becomes -inf, and
     * every 16th from the 8th 2^129 (a lane of every vector of 8 or 16). */
    enum { M = 4096 };
    float *xs = malloc(sizeof(float) * M), *ys = malloc(sizeof(float) * M);
    for (int i = 0; i < M; i++) x[i] = xs[i] = (float)(uniform() * 250 - 124);
    for (int i = 0; i < M; i += 16) xs[i] = -INFINITY, xs[i + 8] = 129.0f;
    uk->exp2(y, x, M);
    uk->exp2(ys, xs, M);
    int differ = 0;
    for (int i = 0; i < M; i++)
        differ += i % 16 == 0 ? ys[i] != 0 : i % 16 == 8 ? ys[i] != INFINITY : memcmp(&y[i], &ys[i], sizeof(float)) != 0;
    snprintf(name, sizeof name, "exp2_%s_same_floats_beside_cut_and_overflowing_lanes", isa);
    check(!differ, name, "%d of %d values differ", differ, M);
    free(xs), free(ys);
    free(x), free(y);
}

typedef struct problem {
    int64_t L, S, E, Ev, Hq, Hk;
    attn_causal causal;
    int mask; /* 0 none, 1 bool, 2 float */
    int bf16; /* the bf16 compute mode */
    int64_t window; /* a sliding window of keys (0: none) */
} problem;

static float *random_floats(size_t n) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = normal();
    return p;
}

/* out (f32) with `threads` threads. Returns the call's status; the kernel
 * that ran goes to kernel (when not NULL, from its verbose line). */
static attn_status run_f32(float *out, const problem *pr, float *q, float *k, float *v, void *mask,
                           int threads, char *kernel) {
    int64_t sq[3] = {pr->Hq, pr->L, pr->E}, sk[3] = {pr->Hk, pr->S, pr->E}, sv[3] = {pr->Hk, pr->S, pr->Ev},
            so[3] = {pr->Hq, pr->L, pr->Ev}, sm[2] = {pr->L, pr->S};
    attn_tensor tq, tk, tv, to, tm;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, sv, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, so, NULL, NULL);
    attn_tensor_init(&tm, mask, pr->mask == 1 ? ATTN_BOOL : ATTN_F32, 2, sm, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = pr->causal;
    o.mask = pr->mask ? &tm : NULL;
    o.compute = pr->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    o.window = pr->window;
    attn_set_num_threads(threads);
    attn_error err;
    if (kernel) verbose_begin();
    attn_status st = attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &o, &err);
    if (kernel) verbose_end(kernel, 32, NULL, 0);
    if (st) printf("# attn_sdpa failed: %s\n", err.message);
    attn_set_num_threads(0);
    return st;
}

/* The exact f64 result of the same problem. */
static attn_status run_f64(double *out, const problem *pr, const float *q, const float *k, const float *v,
                    const void *mask) {
    size_t nq = (size_t)(pr->Hq * pr->L * pr->E), nk = (size_t)(pr->Hk * pr->S * pr->E),
           nv = (size_t)(pr->Hk * pr->S * pr->Ev), nm = (size_t)(pr->L * pr->S);
    double *q64 = malloc(8 * nq), *k64 = malloc(8 * nk), *v64 = malloc(8 * nv), *m64 = malloc(8 * nm);
    for (size_t i = 0; i < nq; i++) q64[i] = q[i];
    for (size_t i = 0; i < nk; i++) k64[i] = k[i];
    for (size_t i = 0; i < nv; i++) v64[i] = v[i];
    if (pr->mask == 2)
        for (size_t i = 0; i < nm; i++) m64[i] = ((const float *)mask)[i];
    int64_t sq[3] = {pr->Hq, pr->L, pr->E}, sk[3] = {pr->Hk, pr->S, pr->E}, sv[3] = {pr->Hk, pr->S, pr->Ev},
            so[3] = {pr->Hq, pr->L, pr->Ev}, sm[2] = {pr->L, pr->S};
    attn_tensor tq, tk, tv, to, tm;
    attn_tensor_init(&tq, q64, ATTN_F64, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, k64, ATTN_F64, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, v64, ATTN_F64, 3, sv, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 3, so, NULL, NULL);
    attn_tensor_init(&tm, pr->mask == 1 ? (void *)mask : m64, pr->mask == 1 ? ATTN_BOOL : ATTN_F64, 2, sm,
                     NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = pr->causal;
    o.mask = pr->mask ? &tm : NULL;
    o.window = pr->window;
    attn_status st = attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &o, NULL);
    free(q64), free(k64), free(v64), free(m64);
    return st;
}

static void test_problem(const problem *pr) {
    size_t nq = (size_t)(pr->Hq * pr->L * pr->E), nk = (size_t)(pr->Hk * pr->S * pr->E),
           nv = (size_t)(pr->Hk * pr->S * pr->Ev), no = (size_t)(pr->Hq * pr->L * pr->Ev),
           nm = (size_t)(pr->L * pr->S);
    float *q = random_floats(nq), *k = random_floats(nk), *v = random_floats(nv);
    void *mask = NULL;
    if (pr->mask == 1) {
        unsigned char *m = malloc(nm);
        for (size_t i = 0; i < nm; i++) m[i] = uniform() < 0.8;
        for (int64_t j = 0; j < pr->S; j++) m[j] = 0; /* row 0 fully masked */
        mask = m;
    } else if (pr->mask == 2) {
        float *m = malloc(sizeof(float) * nm);
        for (size_t i = 0; i < nm; i++) m[i] = uniform() < 0.1 ? -INFINITY : normal();
        mask = m;
    }
    float *o1 = malloc(sizeof(float) * no), *on = malloc(sizeof(float) * no);
    double *ref = malloc(sizeof(double) * no);
    char name[160];
    snprintf(name, sizeof name, "L%lld_S%lld_E%lld_Ev%lld_H%lld/%lld_causal%d_mask%d_window%lld%s", (long long)pr->L,
             (long long)pr->S, (long long)pr->E, (long long)pr->Ev, (long long)pr->Hq, (long long)pr->Hk,
             (int)pr->causal, pr->mask, (long long)pr->window, pr->bf16 ? "_bf16" : "");
    /* Each call must succeed on the kernel the shape calls for: a failed
     * call fails its check rather than leave a buffer nobody wrote. */
    char kernel[32];
    const char *want = pr->L <= ATTN_DECODE_MAX_L ? "decode" : "flash"; /* the cost model: decode.c */
    attn_status st = run_f32(o1, pr, q, k, v, mask, 1, kernel);
    int threads[3] = {2, 3, 7}, same = 1, ok = st == ATTN_OK;
    for (int t = 0; t < 3; t++) {
        memset(on, 0xff, sizeof(float) * no); /* NaN: a call that writes nothing cannot match */
        ok &= run_f32(on, pr, q, k, v, mask, threads[t], NULL) == ATTN_OK;
        same &= memcmp(o1, on, sizeof(float) * no) == 0;
    }
    char full[200];
    snprintf(full, sizeof full, "%s_kernel_ran_%s", want, name);
    check(st == ATTN_OK && strcmp(kernel, want) == 0, full, "status %d, kernel %s", (int)st, kernel);
    snprintf(full, sizeof full, "threads_1_2_3_7_bitwise_identical_%s", name);
    check(ok && same, full, ok ? "results differ between thread counts" : "a call failed");
    ok &= run_f64(ref, pr, q, k, v, mask) == ATTN_OK;
    double err = 0, big = 0;
    for (size_t i = 0; i < no; i++) {
        double d = fabs(o1[i] - ref[i]);
        err = d > err || isnan(d) ? d : err;
        big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
    }
    /* f32: 2e-5; the bf16 mode rounds q, k, p and v to 8 bits of mantissa:
     * documented as a few 1e-3, held here to 1e-2. */
    double tol = pr->bf16 ? 1e-2 : 2e-5;
    snprintf(full, sizeof full, "%s_vs_f64_%s_%s", pr->bf16 ? "bf16" : "f32", attn_isa(), name);
    check(ok && err / big <= tol, full, "relative error %.3g%s", err / big, ok ? "" : ", a call failed");
    free(q), free(k), free(v), free(mask), free(o1), free(on), free(ref);
}

/* Inputs the f32 kernel hands to the exact kernel keep attn.h's semantics. */
/* The decode cost model's splits for every L and S it takes: chunks of a
 * vector's multiple, at most the core's decode_chunk, covering the keys;
 * at least 512 keys (DECODE_MIN_CHUNK) or the whole of a shorter S, so
 * that no item is all fixed cost; enough items for 16 cores (32: chunks
 * of S · slices / 32 keys, rounded up to a vector) unless that takes
 * chunks under 512 keys (then under 2 · 512); and nothing past
 * ATTN_DECODE_MAX_L rows. */
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round16(int64_t a) { return (a + 15) / 16 * 16; }

static void test_decode_splits(void) {
    enum { MIN_CHUNK = 512 };
    int64_t most = attn_blocks_active()->decode_chunk, bad = 0, first_bad[4] = {0};
    for (int64_t L = 1; L <= ATTN_DECODE_MAX_L + 1; L++)
        for (int64_t slices = 1; slices <= 32; slices *= 4)
            for (int64_t S = 1; S <= 9000; S += L + slices) {
                int64_t chunk = attn_decode_chunk(L, S, slices, 1), n = chunk > 0 ? (S + chunk - 1) / chunk : 0;
                bool ok = L > ATTN_DECODE_MAX_L ? chunk == 0
                                                : chunk > 0 && chunk % 16 == 0 && chunk <= most && n * chunk >= S &&
                                                      chunk >= min64(S, min64(MIN_CHUNK, most)) &&
                                                      chunk <= round16(max64((S * slices + 31) / 32, 2 * MIN_CHUNK - 1));
                if (!ok && bad++ == 0) first_bad[0] = L, first_bad[1] = S, first_bad[2] = slices, first_bad[3] = chunk;
            }
    check(bad == 0, "decode_splits_every_L_and_S", "%lld bad, first L=%lld S=%lld slices=%lld: chunk %lld", (long long)bad,
          (long long)first_bad[0], (long long)first_bad[1], (long long)first_bad[2], (long long)first_bad[3]);
}

static void test_fallback(void) {
    /* Scores far beyond f32's range: q, k of 1e20 (q·k ~ 1e40 would be inf). */
    problem pr = {40, 50, 8, 4, 1, 1, ATTN_CAUSAL_NONE, 0, 0, 0};
    size_t nq = 40 * 8, nk = 50 * 8, nv = 50 * 4, no = 40 * 4;
    float *q = random_floats(nq), *k = random_floats(nk), *v = random_floats(nv), *o = malloc(4 * no);
    double *ref = malloc(8 * no);
    for (size_t i = 0; i < nq; i++) q[i] *= 1e20f;
    for (size_t i = 0; i < nk; i++) k[i] *= 1e20f;
    char kernel[32], fallback[32];
    verbose_begin();
    attn_status st = run_f32(o, &pr, q, k, v, NULL, 2, NULL);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    st = st ? st : run_f64(ref, &pr, q, k, v, NULL);
    double err = 0;
    for (size_t i = 0; i < no; i++) err = fmax(err, fabs(o[i] - ref[i]));
    check(st == ATTN_OK && err < 1e-5 && strcmp(kernel, "flash") == 0 && strcmp(fallback, "1/1") == 0,
          "fallback_huge_scores_match_exact", "status %d, kernel %s, fallback %s, max error %g", (int)st,
          kernel, fallback, err);
    /* NaN in the value of a masked key does not reach the output. */
    unsigned char *mask = calloc(40 * 50, 1);
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 49; j++) mask[i * 50 + j] = 1;
    pr.mask = 1;
    for (size_t i = 0; i < nq; i++) q[i] /= 1e20f;
    for (size_t i = 0; i < nk; i++) k[i] /= 1e20f;
    v[49 * 4 + 1] = NAN;
    st = run_f32(o, &pr, q, k, v, mask, 2, NULL);
    int finite = st == ATTN_OK;
    for (size_t i = 0; i < no; i++) finite &= isfinite(o[i]);
    check(finite, "fallback_nan_behind_mask_stays_out", "NaN reached the output");
    free(q), free(k), free(v), free(o), free(ref), free(mask);

    /* Tiles write their output as they finish: under a causal mask the tiles
     * above row 200 finish (and write) before the one that multiplies key
     * 200's NaN value by its masked weight 0 fails, and the exact kernel
     * then rewrites the whole item, those rows included. */
    problem late = {300, 300, 8, 4, 1, 1, ATTN_CAUSAL_TOP_LEFT, 1, 0, 0};
    q = random_floats(300 * 8), k = random_floats(300 * 8), v = random_floats(300 * 4);
    o = malloc(sizeof(float) * 300 * 4), ref = malloc(sizeof(double) * 300 * 4);
    mask = malloc(300 * 300);
    for (int i = 0; i < 300 * 300; i++) mask[i] = i % 300 != 200;
    v[200 * 4 + 2] = NAN;
    verbose_begin();
    st = run_f32(o, &late, q, k, v, mask, 1, NULL);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    st = st ? st : run_f64(ref, &late, q, k, v, mask);
    err = 0;
    for (int i = 0; i < 300 * 4; i++) err = isfinite(o[i]) ? fmax(err, fabs(o[i] - ref[i])) : INFINITY;
    check(st == ATTN_OK && err < 1e-5 && strcmp(kernel, "flash") == 0 && strcmp(fallback, "1/1") == 0,
          "fallback_rewrites_rows_tiles_finished", "status %d, kernel %s, fallback %s, max error %g", (int)st, kernel,
          fallback, err);
    free(q), free(k), free(v), free(o), free(ref), free(mask);
}

/* The decode kernel merges a group's partials in the work item that
 * finishes its last chunk; a slice whose merged output is not finite (its
 * f32 sum of values overflowed) is redone alone by the exact kernel, the
 * other slices keep theirs, for any thread count. A slice of one chunk
 * (its partial copied to the output) writes a subnormal output as 0, as
 * every kernel does (attn_f32_of). */
static void test_decode_merge(void) {
    static const int64_t S_OF[2] = {100, 3000}; /* one chunk, and several */
    for (int c = 0; c < 2; c++) {
        problem pr = {1, S_OF[c], 16, 20, 3, 3, ATTN_CAUSAL_NONE, 0, 0, 0};
        size_t nq = 3 * 16, nk = 3 * (size_t)pr.S * 16, nv = 3 * (size_t)pr.S * 20, no = 3 * 20;
        float *q = random_floats(nq), *k = random_floats(nk), *v = random_floats(nv), *o = malloc(4 * no),
              *on = malloc(4 * no);
        double *ref = malloc(8 * no);
        for (size_t i = 0; i < nq; i++) q[i] = 0; /* every weight 1: slice 1's sum of values overflows */
        for (size_t i = (size_t)pr.S * 20; i < 2 * (size_t)pr.S * 20; i++) v[i] = 3e38f * (i % 2 ? 1.0f : 0.9f);
        char kernel[32], fallback[32], name[96];
        verbose_begin();
        attn_status st = run_f32(o, &pr, q, k, v, NULL, 1, NULL);
        verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
        bool same = true;
        for (int t = 2; t <= 3; t++) {
            memset(on, 0xff, 4 * no);
            same &= run_f32(on, &pr, q, k, v, NULL, t, NULL) == ATTN_OK && memcmp(o, on, 4 * no) == 0;
        }
        st = st ? st : run_f64(ref, &pr, q, k, v, NULL);
        double err = 0;
        for (size_t i = 0; i < no; i++) err = isfinite(o[i]) ? fmax(err, fabs(o[i] - ref[i]) / fmax(1, fabs(ref[i]))) : INFINITY;
        snprintf(name, sizeof name, "decode_merge_overflow_redone_alone_S%lld", (long long)pr.S);
        check(st == ATTN_OK && strcmp(kernel, "decode") == 0 && strcmp(fallback, "1/3") == 0 && err < 1e-5 && same,
              name, "status %d, kernel %s, fallback %s, relative error %g, threads 1-3 %s", (int)st, kernel, fallback,
              err, same ? "bitwise identical" : "differ");
        /* values far below f32's smallest normal: every output would be subnormal */
        for (size_t i = 0; i < nv; i++) v[i] = 1e-39f;
        for (size_t i = 0; i < nq; i++) q[i] = (float)normal();
        verbose_begin();
        st = run_f32(o, &pr, q, k, v, NULL, 2, NULL);
        verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
        bool zero = st == ATTN_OK;
        for (size_t i = 0; i < no; i++) zero &= o[i] == 0;
        snprintf(name, sizeof name, "decode_merge_subnormal_output_is_zero_S%lld", (long long)pr.S);
        check(zero && strcmp(kernel, "decode") == 0, name, "status %d, kernel %s, out[0] %g", (int)st, kernel,
              (double)o[0]);
        free(q), free(k), free(v), free(o), free(on), free(ref);
    }
}

/* Keys and values packed (S, Hk, E), their KV heads' rows side by side in
 * memory: the decode kernel's items each read every head's rows of a
 * stretch of positions together (the verbose line says side_by_side=2),
 * at L = 1 (a head's rows R = 4) both heads' rows of each position in one
 * microkernel call where the kernels have one (heads_per_call=2; at L =
 * 2 and 3, R = 8 and 6, a head's rows a call),
 * and give bitwise what the same values stored head by head (Hk, S, E)
 * give, where an item reads one head; for 1, 2 and 3 threads. Each S is
 * long enough for an item of both groups: chunks of at least 512 keys,
 * and the call's items (one per chunk when both groups share them) at
 * least twice the two threads (L = 2, S = 2,100: 4 chunks of 528). */
static void test_decode_side_by_side(void) {
    enum { HQ = 8, HK = 2, E = 64 };
    static const int64_t LS[3][2] = {{1, 5003}, {3, 4100}, {2, 2100}};
    for (int c = 0; c < 3; c++) {
        int64_t L = LS[c][0], S = LS[c][1];
        float *q = random_floats((size_t)(HQ * L * E)), *kp = random_floats((size_t)(S * HK * E)),
              *vp = random_floats((size_t)(S * HK * E)), *kh = malloc(sizeof(float) * (size_t)(S * HK * E)),
              *vh = malloc(sizeof(float) * (size_t)(S * HK * E));
        for (int64_t j = 0; j < S; j++) /* the same values head by head */
            for (int64_t h = 0; h < HK; h++)
                for (int64_t e = 0; e < E; e++)
                    kh[(h * S + j) * E + e] = kp[(j * HK + h) * E + e], vh[(h * S + j) * E + e] = vp[(j * HK + h) * E + e];
        float *out[2][3];
        int64_t sq[3] = {HQ, L, E}, skv[3] = {HK, S, E}, packed[3] = {E, HK * E, 1};
        attn_tensor tq, tk, tv, to;
        attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        bool ok = true, side[2] = {false, false}, decode = true, heads = true;
        for (int way = 0; way < 2; way++) /* 0: packed, 1: head by head */
            for (int t = 0; t < 3; t++) {
                out[way][t] = malloc(sizeof(float) * (size_t)(HQ * L * E));
                memset(out[way][t], 0xff, sizeof(float) * (size_t)(HQ * L * E));
                attn_tensor_init(&tk, way ? kh : kp, ATTN_F32, 3, skv, way ? NULL : packed, NULL);
                attn_tensor_init(&tv, way ? vh : vp, ATTN_F32, 3, skv, way ? NULL : packed, NULL);
                attn_tensor_init(&to, out[way][t], ATTN_F32, 3, sq, NULL, NULL);
                attn_set_num_threads(t + 1);
                char kernel[32];
                verbose_begin();
                ok &= attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &o, NULL) == ATTN_OK;
                verbose_end(kernel, sizeof kernel, NULL, 0);
                decode &= strcmp(kernel, "decode") == 0;
                if (t == 1) side[way] = strstr(verbose_last_line, " side_by_side=2 ") != NULL;
                if (t == 1 && way == 0) heads &= (strstr(verbose_last_line, " heads_per_call=2 ") != NULL) ==
                                                 (L == 1 && attn_ukernels_active()->dot_rows_heads);
            }
        attn_set_num_threads(0);
        bool same = true;
        for (int t = 0; t < 3; t++)
            same &= !memcmp(out[0][t], out[1][0], sizeof(float) * (size_t)(HQ * L * E)) &&
                    !memcmp(out[1][t], out[1][0], sizeof(float) * (size_t)(HQ * L * E));
        char name[96];
        snprintf(name, sizeof name, "decode_side_by_side_heads_bitwise_head_by_head_L%lld_S%lld", (long long)L, (long long)S);
        check(ok && decode && side[0] && !side[1] && heads && same, name,
              "calls %s, kernel decode %s, side_by_side=2 packed %s and head by head %s, heads_per_call=2 %s, outputs %s",
              ok ? "ok" : "failed", decode ? "yes" : "no", side[0] ? "yes" : "no", side[1] ? "yes" : "no",
              heads ? "as expected" : "not as expected", same ? "the same" : "differ");
        for (int way = 0; way < 2; way++)
            for (int t = 0; t < 3; t++) free(out[way][t]);
        free(q), free(kp), free(vp), free(kh), free(vh);
    }
}

/* A NaN key sends to the exact kernel only the work items that read it: the
 * rows whose window holds it come out NaN, every other row matches f64, and
 * items whose keys all lie past it stay on the fast path. */
static void test_fallback_by_item(void) {
    enum { L = 2000, E = 16, W = 100, BAD = 5 };
    int64_t sh[3] = {1, L, E};
    float *q = random_floats(L * E), *k = random_floats(L * E), *v = random_floats(L * E), *o = malloc(4 * L * E);
    double *q64 = malloc(8 * L * E), *k64 = malloc(8 * L * E), *v64 = malloc(8 * L * E), *o64 = malloc(8 * L * E);
    k[BAD * E + 3] = NAN;
    for (int i = 0; i < L * E; i++) q64[i] = q[i], k64[i] = k[i], v64[i] = v[i];
    attn_sdpa_options opt = attn_sdpa_options_default();
    opt.causal = ATTN_CAUSAL_TOP_LEFT, opt.window = W;
    attn_tensor tq, tk, tv, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, sh, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&to, o, ATTN_F32, 3, sh, NULL, NULL);
    char kernel[32], fallback[32];
    verbose_begin();
    attn_status st = attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &opt, NULL);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    attn_tensor_init(&tq, q64, ATTN_F64, 3, sh, NULL, NULL), attn_tensor_init(&tk, k64, ATTN_F64, 3, sh, NULL, NULL);
    attn_tensor_init(&tv, v64, ATTN_F64, 3, sh, NULL, NULL), attn_tensor_init(&to, o64, ATTN_F64, 3, sh, NULL, NULL);
    st = st ? st : attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &opt, NULL);
    int wrong = 0;
    double err = 0;
    for (int i = 0; i < L; i++)
        for (int e = 0; e < E; e++) {
            bool reads = i >= BAD && i < BAD + W; /* rows whose window holds the NaN key */
            wrong += reads != (isnan(o[i * E + e]) != 0) || reads != (isnan(o64[i * E + e]) != 0);
            if (!reads) err = fmax(err, fabs(o[i * E + e] - o64[i * E + e]));
        }
    long long fell = -1, items = -1;
    sscanf(fallback, "%lld/%lld", &fell, &items);
    check(st == ATTN_OK && !wrong && err < 2e-5 && strcmp(kernel, "flash") == 0 && fell >= 1 && fell < items,
          "fallback_only_items_reading_a_nan_key", "status %d, %d rows wrong, max error %g, kernel %s, fallback %s",
          (int)st, wrong, err, kernel, fallback);
    free(q), free(k), free(v), free(o), free(q64), free(k64), free(v64), free(o64);
}

/* An infinite value reaches only the rows whose keys take part: a key that
 * the causal mask, a bool mask or -inf in a float mask excludes adds
 * nothing to a row, in every kernel (where PyTorch's math path computes
 * its weight 0 times inf, NaN). Key BAD's value row is inf; row 0 alone
 * sees it under the masks, every row at and after BAD under the causal one. */
static void test_inf_value_behind_mask(void) {
    enum { E = 16, BAD = 5 };
    static const int64_t LS[3] = {3, 64, 300};
    static const char *const WANT[3] = {"decode", "flash", "flash"};
    for (int c = 0; c < 3; c++)
        for (int how = 0; how < 3; how++) { /* causal, bool mask, float mask */
            int64_t L = LS[c], bad = BAD % L, sh[3] = {1, L, E}, ms[2] = {L, L};
            float *q = random_floats((size_t)(L * E)), *k = random_floats((size_t)(L * E)), *v = random_floats((size_t)(L * E));
            float *o = malloc(sizeof(float) * (size_t)(L * E)), *fm = malloc(sizeof(float) * (size_t)(L * L));
            bool *bm = malloc((size_t)(L * L));
            for (int e = 0; e < E; e++) v[bad * E + e] = INFINITY;
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < L; j++) bm[i * L + j] = j != bad || i == 0, fm[i * L + j] = bm[i * L + j] ? 0 : -INFINITY;
            attn_sdpa_options opt = attn_sdpa_options_default();
            attn_tensor tq, tk, tv, to, tm;
            attn_tensor_init(&tq, q, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, sh, NULL, NULL);
            attn_tensor_init(&tv, v, ATTN_F32, 3, sh, NULL, NULL), attn_tensor_init(&to, o, ATTN_F32, 3, sh, NULL, NULL);
            if (how == 0) opt.causal = ATTN_CAUSAL_TOP_LEFT;
            else attn_tensor_init(&tm, how == 1 ? (void *)bm : (void *)fm, how == 1 ? ATTN_BOOL : ATTN_F32, 2, ms, NULL, NULL),
                 opt.mask = &tm;
            char kernel[32], fallback[32];
            verbose_begin();
            attn_status st = attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &opt, NULL);
            verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
            int wrong = 0;
            for (int64_t i = 0; i < L; i++) {
                bool sees = how == 0 ? i >= bad : i == 0;
                for (int e = 0; e < E; e++) wrong += sees == (isfinite(o[i * E + e]) != 0);
            }
            char name[80];
            snprintf(name, sizeof name, "inf_value_behind_%s_reaches_no_row_%s_L%lld",
                     how == 0 ? "causal_mask" : how == 1 ? "bool_mask" : "float_mask", WANT[c], (long long)L);
            check(st == ATTN_OK && !wrong && strcmp(kernel, WANT[c]) == 0, name, "status %d, %d values wrong, kernel %s",
                  (int)st, wrong, kernel);
            free(q), free(k), free(v), free(o), free(fm), free(bm);
        }
}

/* The emulated bf16 kernels compute exactly what VDPBF16PS computes: hw is
 * the AVX512_BF16 set, the library's on a CPU that has the instruction or
 * the SIMDe build's (whose VDPBF16PS is Intel's definition, simde_extra.h). */
static void test_bf16_kernels(const attn_bf16_kernels *hw, const char *name) {
    const attn_bf16_kernels *em = &attn_bf16_emulated;
    enum { E2 = 37, K2 = 300 };
    static uint32_t q2[ATTN_MR_MAX * E2], kt2[E2 * 64], p2[ATTN_MR_MAX * K2], v2[K2 * 64];
    static float s1[ATTN_MR_MAX * 64], s2[ATTN_MR_MAX * 64], o1[ATTN_MR_MAX * 64], o2[ATTN_MR_MAX * 64];
    float a[2];
    /* Values of every size, tiny ones whose products underflow included. */
    for (int i = 0; i < ATTN_MR_MAX * E2; i++) a[0] = normal(), a[1] = normal(), em->zip(&q2[i], &a[0], &a[1], 1);
    for (int i = 0; i < E2 * 64; i++) {
        float scale = i % 11 == 0 ? 1e-30f : i % 13 == 0 ? 1e30f : 1.0f;
        a[0] = normal() * scale, a[1] = normal() * scale;
        em->zip(&kt2[i], &a[0], &a[1], 1);
    }
    for (int i = 0; i < ATTN_MR_MAX * K2; i++) a[0] = (float)uniform(), a[1] = (float)uniform(), em->zip(&p2[i], &a[0], &a[1], 1);
    for (int i = 0; i < K2 * 64; i++) a[0] = normal(), a[1] = normal(), em->zip(&v2[i], &a[0], &a[1], 1);
    hw->qk(s1, 64, q2, E2, kt2, 64, E2);
    em->qk(s2, 64, q2, E2, kt2, 64, E2);
    /* qk_max where the set has it: qk's scores bitwise, and each row's
     * largest joined to what row_max held (below it, or above it: kept). */
    static float s3[ATTN_MR_MAX * 64];
    float rm[ATTN_MR_MAX], rm0[ATTN_MR_MAX];
    bool max_ok = true;
    for (int r = 0; r < ATTN_MR_MAX; r++) rm[r] = rm0[r] = r % 3 == 2 ? 1e30f : r % 3 ? -INFINITY : -1e30f;
    if (hw->qk_max) {
        hw->qk_max(s3, 64, q2, E2, kt2, 64, E2, rm);
        max_ok = memcmp(s1, s3, sizeof(float) * (size_t)hw->mr * 64) == 0;
        for (int r = 0; r < hw->mr; r++) {
            float want = rm0[r];
            for (int c = 0; c < 64; c++) want = s1[r * 64 + c] > want ? s1[r * 64 + c] : want;
            max_ok &= rm[r] == want;
        }
    }
    for (int i = 0; i < ATTN_MR_MAX * 64; i++) o1[i] = o2[i] = normal();
    hw->pv(o1, 64, p2, K2, v2, 64, K2, 4);
    em->pv(o2, 64, p2, K2, v2, 64, K2, 4);
    float src[100];
    uint16_t h1[100], h2[100];
    for (int i = 0; i < 100; i++) src[i] = normal() * (i % 3 ? 1.0f : 3e38f);
    hw->to_bf16(h1, src, 100);
    em->to_bf16(h2, src, 100);
    /* The layer's GEMM microkernel (gemm_kp 1: a column of pairs at a
     * time), against attn_bf16_dot_pair pair by pair from zero, then + c. */
    static uint32_t ga[E2 * 32], gb[E2 * 64];
    static float g1[32 * 64], g2[32 * 64];
    int mr = hw->gemm_mr, nr = hw->gemm_nr;
    bool gemm_ok = hw->gemm && hw->gemm_kp == 1 && mr <= 32 && nr <= 64;
    for (int i = 0; i < E2 * 32; i++) ga[i] = kt2[i];
    for (int i = 0; i < E2 * 64; i++) gb[i] = q2[i % (ATTN_MR_MAX * E2)] ^ (uint32_t)(i * 0x10001u & 0x00070007u);
    for (int i = 0; i < 32 * 64; i++) g1[i] = g2[i] = normal();
    if (gemm_ok) hw->gemm(g1, 64, ga, gb, E2);
    for (int i = 0; gemm_ok && i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float acc = 0;
            for (int e = 0; e < E2; e++) acc = attn_bf16_dot_pair(acc, ga[e * mr + i], gb[e * nr + j]);
            g2[i * 64 + j] += acc;
        }
    check(memcmp(s1, s2, sizeof s1) == 0 && memcmp(o1, o2, sizeof o1) == 0 && memcmp(h1, h2, sizeof h1) == 0 &&
              gemm_ok && memcmp(g1, g2, sizeof g1) == 0 && max_ok,
          name, "the emulation differs from the instruction (qk, pv, to_bf16 or the %dx%d gemm), or qk_max "
          "from qk (%s)", mr, nr, max_ok ? "same" : "differs");
}

/* One VDPBF16PS lane at the edges of f32's range: hw->pv over one pair
 * (o += p·v, o the accumulator) against attn_bf16_dot_pair, for pairs and
 * accumulators of every kind (subnormal, near FLT_MIN, huge, inf, NaN).
 * The instruction is two FMAs: a product below FLT_MIN still moves a
 * larger accumulator, and one past FLT_MAX is no inf beside an inf. */
static void test_bf16_dot_pair_edges(const attn_bf16_kernels *hw, const char *name) {
    enum { LANES = ATTN_MR_MAX * 64 };
    static uint32_t p2[ATTN_MR_MAX], v2[64];
    static float o1[LANES], o2[LANES];
    uint32_t x = 88172645u;
    int wrong = 0, nvec = 64 / hw->vl;
    for (int trial = 0; trial < 4000; trial++) {
        uint32_t h[2 * (ATTN_MR_MAX + 64)];
        for (int i = 0; i < 2 * (ATTN_MR_MAX + 64); i++) { /* bf16 bits: a third tiny, some inf or NaN */
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            h[i] = x % 3 == 0 ? (x >> 16) & 0x80ff : x % 17 == 0 ? ((x >> 16) | 0x7f80) & 0xff81 : x >> 16;
        }
        for (int r = 0; r < ATTN_MR_MAX; r++) p2[r] = h[2 * r] << 16 | h[2 * r + 1];
        for (int c = 0; c < 64; c++) v2[c] = h[2 * ATTN_MR_MAX + 2 * c] << 16 | h[2 * ATTN_MR_MAX + 2 * c + 1];
        for (int i = 0; i < LANES; i++) { /* accumulators: subnormal, near FLT_MIN, any */
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            uint32_t u = trial % 3 == 0 ? x & 0x807fffffu : trial % 3 == 1 ? (x & 0x80ffffffu) | 0x00800000u : x;
            memcpy(&o1[i], &u, 4);
            o2[i] = o1[i];
        }
        hw->pv(o1, 64, p2, 1, v2, 64, 1, nvec);
        for (int r = 0; r < hw->mr; r++)
            for (int c = 0; c < 64; c++) {
                float want = attn_bf16_dot_pair(o2[r * 64 + c], p2[r], v2[c]), got = o1[r * 64 + c];
                wrong += !(isnan(want) && isnan(got)) && memcmp(&want, &got, 4) != 0;
            }
    }
    check(!wrong, name, "%d lanes of %d differ from attn_bf16_dot_pair", wrong, 4000 * hw->mr * 64);
}

/* The bf16 mode's exp pass (bk->exp_sum, degree 3): each weight within
 * ATTN_EXP2_POLY3's 1.02e-4 relative (plus 4 · 2^-24 for its evaluation in
 * f32, as tests/exp2_poly5.py checks) of 2^x in f64, x the exponent as the
 * pass forms it in f32, (s - m) · log2 e; exactly 0 for x below -64 and for
 * -inf; the sum within 256 · 2^-24 of the weights' sum. With the weights
 * sent to bf16 instead: bitwise to_bf16 of them, and the same sum. */
static void test_bf16_exp_sum(const attn_bf16_kernels *bk, const char *name) {
    enum { N = 256 };
    float s[N], y[N], scratch[N], m = -INFINITY;
    uint16_t got16[N], want16[N];
    for (int i = 0; i < N; i++) {
        s[i] = i % 17 == 0 ? -INFINITY : i % 7 == 0 ? normal() * 40.0f : normal() * 6.0f;
        m = s[i] > m ? s[i] : m;
    }
    memcpy(y, s, sizeof y), memcpy(scratch, s, sizeof scratch);
    float sum = bk->exp_sum(NULL, y, N, m), sum16 = bk->exp_sum(got16, scratch, N, m);
    bk->to_bf16(want16, y, N);
    double worst = 0, total = 0;
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        float x = (s[i] - m) * ATTN_LOG2E;
        double want = x < ATTN_EXP2_LO ? 0.0 : exp2((double)x);
        double err = want == 0 ? (y[i] != 0) : fabs(y[i] - want) / want;
        wrong += !(err <= 1.02e-4 + 4 * 0x1p-24);
        worst = err > worst ? err : worst;
        total += y[i];
    }
    check(!wrong && fabs(sum - total) <= N * 0x1p-24 * total && sum16 == sum && !memcmp(got16, want16, sizeof got16),
          name, "%d weights off by more than 1.02e-4 relative (worst %.3g), or the sum %.9g of %.9g, or to bf16: "
          "sum %.9g, bf16 weights %s to_bf16's", wrong, worst, (double)sum, total, (double)sum16,
          memcmp(got16, want16, sizeof got16) ? "not" : "as");
}

static void test_bf16_emulation(void) {
    test_bf16_exp_sum(&attn_bf16_emulated, "bf16_exp_sum_within_degree3_bound_emulated");
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16") || !attn_ukernels_by_name("avx512")) {
        skip("bf16_emulation_matches_avx512_bf16", "this CPU lacks AVX512_BF16 (the SIMDe build tests its kernels)");
        return;
    }
    test_bf16_kernels(&attn_bf16_avx512, "bf16_emulation_matches_avx512_bf16");
    test_bf16_dot_pair_edges(&attn_bf16_avx512, "bf16_dot_pair_edges_match_avx512_bf16");
    test_bf16_exp_sum(&attn_bf16_avx512, "bf16_exp_sum_within_degree3_bound_avx512_bf16");
#else
    skip("bf16_emulation_matches_avx512_bf16", "not x86");
#endif
}

/* Two caller threads at once: the library is thread-safe, and a caller that
 * finds the pool busy computes its call itself, with the same result. */
typedef struct concurrent_call {
    const problem *pr;
    float *q, *k, *v, *out;
} concurrent_call;

static void *call_thread(void *arg) {
    concurrent_call *c = arg;
    for (int rep = 0; rep < 3; rep++)
        if (run_f32(c->out, c->pr, c->q, c->k, c->v, NULL, 0, NULL)) memset(c->out, 0xff, 4);
    return NULL;
}

static void test_concurrent_callers(void) {
    problem pr = {300, 900, 32, 16, 2, 1, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0};
    size_t no = 2 * 300 * 16;
    float *q = random_floats(2 * 300 * 32), *k = random_floats(900 * 32), *v = random_floats(900 * 16);
    float *serial = malloc(sizeof(float) * no), *a = malloc(sizeof(float) * no), *b = malloc(sizeof(float) * no);
    if (run_f32(serial, &pr, q, k, v, NULL, 1, NULL)) memset(serial, 0xff, 4);
    concurrent_call ca = {&pr, q, k, v, a}, cb = {&pr, q, k, v, b};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, call_thread, &ca);
    pthread_create(&tb, NULL, call_thread, &cb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    check(memcmp(serial, a, sizeof(float) * no) == 0 && memcmp(serial, b, sizeof(float) * no) == 0,
          "concurrent_callers_get_the_serial_result", "results differ");
    free(q), free(k), free(v), free(serial), free(a), free(b);
}

/* The threads a call ran on, as its verbose line says them: threads=R/T, R
 * threads ran work items of the T the call was given. A second caller that
 * finds the pool busy runs its call alone, and its line must say so (it
 * once said threads=2). The pool is held deterministically: another thread
 * runs a pool job whose items wait until released, and the attention calls
 * come while they wait. attn_parallel_for itself returns how many threads
 * ran: a job whose items wait for each other proves all of them did. */
typedef struct pool_hold {
    atomic_int entered, release;
} pool_hold;

static void nap_ms(int ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

static void hold_item(void *ctx, int64_t item, int worker) {
    pool_hold *h = ctx;
    (void)item, (void)worker;
    atomic_fetch_add(&h->entered, 1);
    while (!atomic_load(&h->release)) nap_ms(1);
}

static void *hold_pool(void *arg) {
    attn_parallel_for(2, 2, hold_item, arg);
    return NULL;
}

/* Each of n items waits (10 s at most) until n workers hold one. */
typedef struct item_barrier {
    atomic_int entered;
    int n;
} item_barrier;

static void barrier_item(void *ctx, int64_t item, int worker) {
    item_barrier *b = ctx;
    (void)item, (void)worker;
    atomic_fetch_add(&b->entered, 1);
    for (int t = 0; t < 10000 && atomic_load(&b->entered) < b->n; t++) nap_ms(1);
}

/* threads=R/T of the last verbose line. */
static void verbose_threads(int *ran, int *given) {
    char word[32];
    word_after(word, sizeof word, verbose_last_line, " threads=");
    *ran = *given = -1;
    if (sscanf(word, "%d/%d", ran, given) != 2) *ran = *given = -1;
}

/* A job too small to pay for waking the pool runs on its caller: tiny
 * flash and decode calls given 2 threads run on 1 (threads=1/2, every time
 * of 40), bitwise as on 1 thread; a larger one is still given both. Decode
 * has its own, larger threshold (DECODE_SMALL_WORK, 262,144 multiply-adds):
 * one of 192,000, four times what would wake the pool for flash, also runs
 * alone. */
static void test_small_work_alone(void) {
    check(attn_workers_for(2, 4096, ATTN_SMALL_WORK) == 1 && attn_workers_for(3, 1e7, ATTN_SMALL_WORK) == 3 &&
              attn_workers_for(2, 192000, ATTN_SMALL_WORK) == 2,
          "workers_for_small_and_large_work", "%d, %d, %d", attn_workers_for(2, 4096, ATTN_SMALL_WORK),
          attn_workers_for(3, 1e7, ATTN_SMALL_WORK), attn_workers_for(2, 192000, ATTN_SMALL_WORK));
    problem flash = {12, 12, 16, 16, 2, 1, ATTN_CAUSAL_NONE, 0, 0, 0}; /* L > 8: flash, not decode */
    problem decode = {1, 3000, 8, 8, 1, 1, ATTN_CAUSAL_NONE, 0, 0, 0}; /* two chunks of keys */
    problem decode_wide = {1, 3000, 32, 32, 1, 1, ATTN_CAUSAL_NONE, 0, 0, 0}; /* 3000 · 64 multiply-adds */
    const problem *shapes[3] = {&flash, &decode, &decode_wide};
    static const char *const WANT[3] = {"flash", "decode", "decode"}, *const NAME[3] = {"flash", "decode", "wide_decode"};
    float *q = random_floats(2 * 12 * 32), *k = random_floats(3000 * 32), *v = random_floats(3000 * 32);
    float out1[2 * 12 * 16], out2[2 * 12 * 16];
    for (int c = 0; c < 3; c++) {
        char kernel[32], name[64];
        attn_status st = run_f32(out1, shapes[c], q, k, v, NULL, 1, kernel);
        int alone = 0, bitwise = 1;
        for (int rep = 0; !st && rep < 40; rep++) {
            st = run_f32(out2, shapes[c], q, k, v, NULL, 2, kernel);
            int ran, given;
            verbose_threads(&ran, &given);
            alone += ran == 1 && given == 2 && strcmp(kernel, WANT[c]) == 0;
            bitwise &= !memcmp(out1, out2, sizeof(float) * (size_t)(shapes[c]->Hq * shapes[c]->L * shapes[c]->Ev));
        }
        snprintf(name, sizeof name, "small_%s_call_runs_alone", NAME[c]);
        check(!st && alone == 40 && bitwise, name, "status %d, %d of 40 alone, bitwise %d, kernel %s, line %s", (int)st,
              alone, bitwise, kernel, verbose_last_line);
    }
    free(q), free(k), free(v);
}

/* dq of a small f32 problem on `threads` threads: the fused backward. */
static attn_status run_backward_f32(int threads, char *kernel) {
    enum { H = 2, L = 300, E = 16 };
    int64_t s3[3] = {H, L, E}, s2[2] = {H, L};
    float *q = random_floats(H * L * E), *out = malloc(sizeof(float) * H * L * E), *lse = malloc(sizeof(float) * H * L),
          *dq = malloc(sizeof(float) * H * L * E);
    attn_tensor tq, to, tl, tdq;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&tdq, dq, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, s2, NULL, NULL);
    attn_error err;
    attn_status st = attn_sdpa(&to, &tl, NULL, &tq, &tq, &tq, NULL, &err);
    attn_set_num_threads(threads);
    verbose_begin();
    if (!st) st = attn_sdpa_backward(&tdq, NULL, NULL, NULL, &tq, &tq, &tq, &tq, &to, &tl, NULL, &err);
    verbose_end(kernel, 32, NULL, 0);
    attn_set_num_threads(0);
    free(q), free(out), free(lse), free(dq);
    return st;
}

static void test_verbose_threads(void) {
    problem flash = {1000, 1000, 32, 32, 2, 1, ATTN_CAUSAL_NONE, 0, 0, 0};
    problem decode = {1, 20000, 64, 64, 4, 1, ATTN_CAUSAL_NONE, 0, 0, 0};
    const problem *shapes[2] = {&flash, &decode};
    float *q = random_floats(2 * 1000 * 64), *k = random_floats(20000 * 64), *v = random_floats(20000 * 64);
    float *out = malloc(sizeof(float) * 2 * 1000 * 64);
    pool_hold h;
    atomic_init(&h.entered, 0), atomic_init(&h.release, 0);
    pthread_t holder;
    pthread_create(&holder, NULL, hold_pool, &h);
    while (atomic_load(&h.entered) == 0) nap_ms(1);
    /* The pool is busy: every kernel that uses it runs on its caller alone. */
    static const char *const WANT[3] = {"flash", "decode", "flash_backward"};
    for (int c = 0; c < 3; c++) {
        char kernel[32], name[64];
        attn_status st = c < 2 ? run_f32(out, shapes[c], q, k, v, NULL, 2, kernel) : run_backward_f32(2, kernel);
        int ran, given;
        verbose_threads(&ran, &given);
        snprintf(name, sizeof name, "verbose_threads_%s_alone_while_pool_busy", WANT[c]);
        check(!st && strcmp(kernel, WANT[c]) == 0 && ran == 1 && given == 2, name, "status %d, kernel %s, line %s",
              (int)st, kernel, verbose_last_line);
    }
    atomic_store(&h.release, 1);
    pthread_join(holder, NULL);
    /* The pool free again: at least one thread and at most the two given ran. */
    char kernel[32];
    attn_status st = run_f32(out, &flash, q, k, v, NULL, 2, kernel);
    int ran, given;
    verbose_threads(&ran, &given);
    check(!st && ran >= 1 && ran <= 2 && given == 2, "verbose_threads_pool_free", "line %s", verbose_last_line);
    for (int n = 1; n <= 4; n++) {
        item_barrier b = {0, n};
        int got = attn_parallel_for(n, n, barrier_item, &b);
        char name[64];
        snprintf(name, sizeof name, "parallel_for_counts_%d_threads_that_ran", n);
        check(got == n, name, "returned %d", got);
    }
    free(q), free(k), free(v), free(out);
}

/* The block sizes come from the caches through cores.c's model. CPUID's
 * cache leaves as four CPUs report them, subleaf by subleaf ({eax, ebx,
 * ecx, edx}; leaf 0x8000001D on AMD, 4 on Intel): Zen 4 as this
 * development machine (an EPYC 9004 virtual machine) returned them; Zen 3,
 * Zen 5 and Sapphire Rapids written in the same layout from their
 * documented caches. Each must parse to its geometry, and the model must
 * give the key blocks measured where they were measured (256 keys on Zen 3,
 * 512 on Zen 4: docs/performance.md) and half the L2's ways elsewhere. */
typedef struct recorded_cpu {
    const char *name, *isa;
    unsigned regs[5][4];
    attn_cache l1d, l2;
    int bc; /* the forward's key block the model must give */
} recorded_cpu;

static const recorded_cpu RECORDED[] = {
    {"zen3", "avx2",
     {{0x121, 0x01c0003f, 0x3f, 0}, {0x122, 0x01c0003f, 0x3f, 0}, {0x143, 0x01c0003f, 0x3ff, 2},
      {0x163, 0x03c0003f, 0x7fff, 1}, {0, 0, 0, 0}},
     {32 << 10, 8, 64, 64}, {512 << 10, 8, 64, 1024}, 256},
    {"zen4", "avx512",
     {{0x121, 0x01c0003f, 0x3f, 0}, {0x122, 0x01c0003f, 0x3f, 0}, {0x143, 0x01c0003f, 0x7ff, 2},
      {0x4163, 0x03c0003f, 0x7fff, 1}, {0, 0, 0, 0}},
     {32 << 10, 8, 64, 64}, {1 << 20, 8, 64, 2048}, 512},
    {"zen5", "avx512",
     {{0x121, 0x02c0003f, 0x3f, 0}, {0x122, 0x01c0003f, 0x3f, 0}, {0x143, 0x03c0003f, 0x3ff, 2},
      {0x163, 0x03c0003f, 0x7fff, 1}, {0, 0, 0, 0}},
     {48 << 10, 12, 64, 64}, {1 << 20, 16, 64, 1024}, 512},
    {"sapphire-rapids", "avx512",
     {{0xfc004121, 0x02c0003f, 0x3f, 0}, {0xfc004122, 0x01c0003f, 0x3f, 0}, {0xfc004143, 0x03c0003f, 0x7ff, 0},
      {0xfc1fc163, 0x03c0003f, 0x1ffff, 4}, {0, 0, 0, 0}},
     {48 << 10, 12, 64, 64}, {2 << 20, 16, 64, 2048}, 1024},
};

static bool same_cache(const attn_cache *a, const attn_cache *b) {
    return a->size == b->size && a->ways == b->ways && a->line == b->line && a->sets == b->sets;
}

/* One number from /sys/devices/system/cpu/cpu0/cache/indexN/FILE, -1 if absent. */
static long sysfs_cache(int index, const char *file, char *text, size_t size) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", index, file);
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    text[0] = 0;
    if (!fgets(text, (int)size, fp)) text[0] = 0;
    fclose(fp);
    text[strcspn(text, "\n")] = 0;
    long x = strtol(text, NULL, 10);
    return strchr(text, 'K') ? x << 10 : strchr(text, 'M') ? x << 20 : x;
}

static void test_cache_model(void) {
    for (size_t i = 0; i < sizeof RECORDED / sizeof RECORDED[0]; i++) {
        const recorded_cpu *c = &RECORDED[i];
        attn_caches got;
        bool ok = attn_caches_parse(c->regs, 5, &got);
        char name[96];
        snprintf(name, sizeof name, "cpuid_caches_parse_%s", c->name);
        check(ok && same_cache(&got.l1d, &c->l1d) && same_cache(&got.l2, &c->l2), name,
              "L1d %lld B %d-way %d sets, L2 %lld B %d-way %d sets", (long long)got.l1d.size, got.l1d.ways,
              got.l1d.sets, (long long)got.l2.size, got.l2.ways, got.l2.sets);
        /* The model on the kernel set's register tile: avx2's is 16 keys wide,
         * avx512's 64. Their widths here, as registered, whether or not this
         * CPU runs them. */
        attn_ukernels tile = attn_ukernels_c;
        tile.vl = strcmp(c->isa, "avx2") == 0 ? 8 : 16, tile.nv = strcmp(c->isa, "avx2") == 0 ? 2 : 4;
        attn_blocks b;
        attn_blocks_model(&b, &got, &tile, "cpuid");
        snprintf(name, sizeof name, "block_model_%s_%s_keys_%d", c->name, c->isa, c->bc);
        check(b.bc == c->bc && b.bc % (tile.vl * tile.nv) == 0 && strcmp(b.from, "cpuid") == 0, name,
              "the model gives %d keys", b.bc);
    }
    /* The end of the list stops the parse; no L2 is no description. */
    unsigned only_l1[2][4] = {{0x121, 0x01c0003f, 0x3f, 0}, {0, 0, 0, 0}};
    attn_caches none;
    check(!attn_caches_parse((const unsigned(*)[4])only_l1, 2, &none), "cpuid_caches_without_l2_not_a_description", "parsed");
    /* This machine: CPUID's description against the kernel's (sysfs), an
     * independent reading of the same caches. */
    attn_caches here;
    char text[64], type[64];
    bool detected = attn_caches_detect(&here);
    if (sysfs_cache(0, "size", text, sizeof text) < 0) {
        skip("cpuid_caches_match_sysfs", "no /sys/devices/system/cpu/cpu0/cache");
    } else {
        int matched = 0, wanted = 0;
        for (int idx = 0; idx < 8; idx++) {
            long level = sysfs_cache(idx, "level", text, sizeof text);
            if (level < 0) break;
            sysfs_cache(idx, "type", type, sizeof type);
            const attn_cache *mine = level == 1 && strcmp(type, "Data") == 0 ? &here.l1d
                                     : level == 2 && strcmp(type, "Instruction") != 0 ? &here.l2 : NULL;
            if (!mine) continue;
            wanted++;
            attn_cache sys = {sysfs_cache(idx, "size", text, sizeof text), (int)sysfs_cache(idx, "ways_of_associativity", text, sizeof text),
                              (int)sysfs_cache(idx, "coherency_line_size", text, sizeof text),
                              (int)sysfs_cache(idx, "number_of_sets", text, sizeof text)};
            matched += same_cache(mine, &sys);
        }
        check(detected && wanted == 2 && matched == 2, "cpuid_caches_match_sysfs",
              "detected %d, L1d %lld B %d-way, L2 %lld B %d-way; %d of %d sysfs caches agree", (int)detected,
              (long long)here.l1d.size, here.l1d.ways, (long long)here.l2.size, here.l2.ways, matched, wanted);
    }
    /* The blocks in use are the model's on those caches. */
    attn_blocks want;
    attn_blocks_model(&want, detected ? &here : NULL, attn_ukernels_active(), detected ? "cpuid" : "generic");
    const attn_blocks *b = attn_blocks_active();
    check(b->bc == want.bc && b->br == want.br && strcmp(b->from, want.from) == 0, "blocks_in_use_are_the_models",
          "%s %d keys, the model %s %d", b->from, b->bc, want.from, want.bc);
}

/* fork() after the pool has started: the child has the parent's memory but
 * none of its workers. Its threaded call must start workers of its own and
 * give the parent's result bitwise, and its exit (attn_shutdown, run at
 * exit) must join only those. The child reports by its exit status; an
 * alarm kills a child that hangs, and the parent stops waiting after a
 * while, so that a hang is a failure and not a stuck suite. */
enum { FORK_SAME = 0, FORK_DIFFERENT = 1, FORK_CALL_FAILED = 2 };

typedef struct fork_case {
    const problem *pr;
    float *q, *k, *v, *want, *out;
    int call; /* the child makes the call (else it only exits) */
} fork_case;

static void fork_child(const fork_case *c, size_t no) {
    alarm(30);
    int code = FORK_SAME;
    if (c->call) {
        memset(c->out, 0xff, sizeof(float) * no);
        if (run_f32(c->out, c->pr, c->q, c->k, c->v, NULL, 3, NULL)) code = FORK_CALL_FAILED;
        else if (memcmp(c->out, c->want, sizeof(float) * no) != 0) code = FORK_DIFFERENT;
    }
    exit(code); /* exit, not _exit: the atexit attn_shutdown runs */
}

/* The child's exit status, "" when it is FORK_SAME, or why not. */
static const char *fork_wait(pid_t pid, char *why, size_t size) {
    int status = 0;
    pid_t got = 0;
    for (int waited_ms = 0; waited_ms < 60000 && (got = waitpid(pid, &status, WNOHANG)) == 0; waited_ms += 10)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    if (got == 0) {
        kill(pid, SIGKILL), waitpid(pid, &status, 0);
        snprintf(why, size, "the child still ran after 60 s: killed");
    } else if (got < 0) snprintf(why, size, "waitpid failed");
    else if (WIFSIGNALED(status))
        snprintf(why, size, "the child died of signal %d%s", WTERMSIG(status),
                 WTERMSIG(status) == SIGALRM ? " (its alarm: it hung)" : "");
    else if (WEXITSTATUS(status) == FORK_DIFFERENT) snprintf(why, size, "the child's result differs");
    else if (WEXITSTATUS(status) == FORK_CALL_FAILED) snprintf(why, size, "the child's call failed");
    else if (WEXITSTATUS(status) != FORK_SAME) snprintf(why, size, "the child exited with %d", WEXITSTATUS(status));
    else why[0] = 0;
    return why;
}

static pid_t fork_run(const fork_case *c, size_t no) {
    fflush(stdout); /* the child's exit must not print the parent's buffered lines again */
    pid_t pid = fork();
    if (pid == 0) fork_child(c, no);
    return pid;
}

/* Another thread's calls, one after another, while the main thread forks. */
typedef struct busy_caller {
    const fork_case *c;
    float *out;
    atomic_int started, stop;
} busy_caller;

static void *busy_main(void *arg) {
    busy_caller *b = arg;
    while (!atomic_load(&b->stop)) {
        if (run_f32(b->out, b->c->pr, b->c->q, b->c->k, b->c->v, NULL, 3, NULL)) memset(b->out, 0xff, 4);
        atomic_store(&b->started, 1);
    }
    return NULL;
}


static void test_fork(void) {
    problem pr = {1600, 700, 32, 16, 2, 1, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0}; /* several items: the pool takes part */
    size_t no = 2 * 1600 * 16;
    float *q = random_floats(2 * 1600 * 32), *k = random_floats(700 * 32), *v = random_floats(700 * 16);
    float *want = malloc(sizeof(float) * no), *out = malloc(sizeof(float) * no), *busy = malloc(sizeof(float) * no);
    attn_status st = run_f32(want, &pr, q, k, v, NULL, 3, NULL); /* starts the pool: 2 workers */
    int child_calls = child_can_start_threads();
    static const char *const NO_CALL = "this ThreadSanitizer runtime cannot start threads in the child of a threaded "
                                       "process (a probe child failed): the child only exits";
    char why[128];
    fork_case c = {&pr, q, k, v, want, out, 1};
    pid_t pid = 0;
    if (!child_calls) skip("fork_child_threaded_call_gets_parents_result", "%s", NO_CALL);
    else {
        pid = fork_run(&c, no);
        check(st == ATTN_OK && pid > 0 && !*fork_wait(pid, why, sizeof why),
              "fork_child_threaded_call_gets_parents_result", "%s",
              st ? "the parent's call failed" : pid <= 0 ? "fork failed" : why);
    }
    c.call = 0;
    pid = fork_run(&c, no);
    check(pid > 0 && !*fork_wait(pid, why, sizeof why), "fork_child_exits_without_a_call",
          "%s", pid <= 0 ? "fork failed" : why);
    /* The parent's pool still works after its forks. */
    memset(out, 0xff, sizeof(float) * no);
    st = run_f32(out, &pr, q, k, v, NULL, 3, NULL);
    check(st == ATTN_OK && memcmp(out, want, sizeof(float) * no) == 0, "fork_parent_pool_works_after_fork",
          "%s", st ? "the call failed" : "the result differs");
    /* A fork while another thread is inside a threaded call: the child gets
     * the pool in a consistent state, not one with a job half done. */
    busy_caller b = {&c, busy, 0, 0};
    pthread_t t;
    int made = pthread_create(&t, NULL, busy_main, &b) == 0;
    while (made && !atomic_load(&b.started)) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    int ok = made;
    if (!child_calls) skip("fork_while_another_thread_calls_child_call", "%s", NO_CALL);
    for (int rep = 0; rep < 5 && ok; rep++) {
        c.call = child_calls;
        pid = fork_run(&c, no);
        ok = pid > 0 && !*fork_wait(pid, why, sizeof why);
    }
    atomic_store(&b.stop, 1);
    if (made) pthread_join(t, NULL);
    check(ok && memcmp(busy, want, sizeof(float) * no) == 0, "fork_while_another_thread_calls",
          "%s", !made ? "no thread" : !ok ? (pid <= 0 ? "fork failed" : why) : "the busy thread's result differs");
    free(q), free(k), free(v), free(want), free(out), free(busy);
}

/* qk for every strip width nvec = 1..nv against the full strip: the same
 * columns bitwise (a column's sum goes in the same order whatever nvec),
 * the full strip within f32 rounding of double sums (|error| <= E · 2^-23 ·
 * sum |q·k|), and nothing written past the nr columns of any row. */
static void test_qk(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "qk_%s_narrow_strips_match_full", NULL);
    if (!uk) return;
    enum { MAXE = 100, NR_MAX = ATTN_VL_MAX * 4, LDK = NR_MAX + 3, LDS = NR_MAX + 5 };
    static float q[ATTN_MR_MAX * MAXE], kt[MAXE * LDK], full[ATTN_MR_MAX * LDS], s[ATTN_MR_MAX * LDS];
    int nr = uk->vl * uk->nv, wrong = 0, inexact = 0, spilled = 0;
    for (int i = 0; i < ATTN_MR_MAX * MAXE; i++) q[i] = normal();
    for (int i = 0; i < MAXE * LDK; i++) kt[i] = normal();
    static const int64_t sizes[] = {1, 7, 64, 100};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int64_t E = sizes[t];
        for (int i = 0; i < ATTN_MR_MAX * LDS; i++) full[i] = 7.0f;
        uk->qk(full, LDS, q, MAXE, kt, LDK, E, uk->nv);
        for (int r = 0; r < uk->mr; r++)
            for (int c = 0; c < LDS; c++) {
                if (c >= nr) {
                    spilled += full[r * LDS + c] != 7.0f;
                    continue;
                }
                double want = 0, mag = 0;
                for (int64_t e = 0; e < E; e++) {
                    want += (double)q[r * MAXE + e] * kt[e * LDK + c];
                    mag += fabs((double)q[r * MAXE + e] * kt[e * LDK + c]);
                }
                inexact += fabs(full[r * LDS + c] - want) > (double)E * 0x1p-23 * mag;
            }
        for (int nvec = 1; nvec < uk->nv; nvec++) {
            for (int i = 0; i < ATTN_MR_MAX * LDS; i++) s[i] = 7.0f;
            uk->qk(s, LDS, q, MAXE, kt, LDK, E, nvec);
            for (int r = 0; r < uk->mr; r++)
                for (int c = 0; c < LDS; c++) {
                    if (c < nvec * uk->vl) wrong += memcmp(&s[r * LDS + c], &full[r * LDS + c], sizeof(float)) != 0;
                    else if (c >= nr) spilled += s[r * LDS + c] != 7.0f;
                }
        }
    }
    check(!wrong && !inexact && !spilled, name, "%d columns differ from the full strip, %d off the double sums, %d written past nr",
          wrong, inexact, spilled);
}

/* pvt (p read by columns) against pv on the transposed p: the same sums in
 * the same order, so bitwise equal, for every tile width. */
static void test_pvt(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "pvt_%s_equals_pv_transposed", NULL);
    if (!uk) return;
    enum { K = 37, LDO = 80 };
    float p[ATTN_MR_MAX * K], pt[K * ATTN_MR_MAX], v[K * 64], o1[ATTN_MR_MAX * LDO], o2[ATTN_MR_MAX * LDO];
    for (int r = 0; r < uk->mr; r++)
        for (int k = 0; k < K; k++) pt[k * uk->mr + r] = p[r * K + k] = (float)uniform();
    for (int i = 0; i < K * 64; i++) v[i] = (float)uniform();
    int same = 1;
    for (int nvec = 1; nvec <= uk->nv; nvec++) {
        for (int i = 0; i < ATTN_MR_MAX * LDO; i++) o1[i] = o2[i] = (float)i;
        uk->pv(o1, LDO, p, K, v, 64, K, nvec);
        uk->pvt(o2, LDO, pt, uk->mr, v, 64, K, nvec);
        same &= memcmp(o1, o2, sizeof o1) == 0;
    }
    check(same, name, "pvt differs from pv");
}


/* The decode microkernels against double sums, for every row count (1 to
 * ATTN_DECODE_MAX_ROWS) and widths that end on, before and after a vector
 * (the register-blocked bodies and their partial last vectors), with row
 * strides wider than the rows; dot_rows's max |k| and its NaN and inf
 * reports; columns past Ev untouched. Keys and values in f32, and in f16
 * and bf16 through dot_rows16 and axpy_rows16 where the ISA has them (the
 * reference sums the same 16-bit values). */
enum { DR_N = 41, DR_LDS = 48, DR_MAXW = 200, DR_LD = DR_MAXW + 3 };

static float dr_dot(const attn_ukernels *uk, int fmt, float *s, const float *q, int nq, const float *k,
                    const uint16_t *k16, int E) {
    return fmt == 0 ? uk->dot_rows(s, DR_LDS, q, nq, k, DR_LD, DR_N, E)
                    : uk->dot_rows16(s, DR_LDS, q, nq, k16, DR_LD, DR_N, E, fmt == 1);
}

static void decode_rows_fmt(const attn_ukernels *uk, int fmt, double *worst, int *bad_max, int *bad_guard,
                            int *bad_flags) {
    static const int widths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 72, 100, 128, 129, 200};
    enum { R = ATTN_DECODE_MAX_ROWS };
    static float q[R * DR_MAXW], k[DR_N * DR_LD], p[R * DR_LDS], s[R * DR_LDS], acc[R * DR_MAXW + 1];
    static uint16_t k16[DR_N * DR_LD];
    for (int i = 0; i < DR_N * DR_LD; i++) { /* k holds the 16-bit values themselves */
        k[i] = (float)(2 * uniform() - 1);
        k16[i] = fmt == 1 ? attn_f32_to_f16(k[i]) : attn_f32_to_bf16(k[i]);
        if (fmt) k[i] = fmt == 1 ? attn_f16_to_f32(k16[i]) : attn_bf16_to_f32(k16[i]);
    }
    for (int i = 0; i < R * DR_MAXW; i++) q[i] = (float)(2 * uniform() - 1);
    for (int i = 0; i < R * DR_LDS; i++) p[i] = (float)uniform();
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (int nq = 1; nq <= ATTN_DECODE_MAX_ROWS; nq++) {
            int E = widths[w], N = DR_N;
            float most = dr_dot(uk, fmt, s, q, nq, k, k16, E);
            double want_most = 0;
            for (int j = 0; j < N; j++)
                for (int e = 0; e < E; e++)
                    want_most = fabs(k[j * DR_LD + e]) > want_most ? fabs(k[j * DR_LD + e]) : want_most;
            *bad_max |= most != (float)want_most;
            for (int i = 0; i < nq; i++)
                for (int j = 0; j < N; j++) {
                    double d = 0;
                    for (int e = 0; e < E; e++) d += (double)q[i * E + e] * k[j * DR_LD + e];
                    /* |q|, |k| <= 1: a sum of E products is within E² 2^-24 of the exact */
                    double err = fabs(s[i * DR_LDS + j] - d) / ((double)E * E * 0x1p-24);
                    *worst = err > *worst ? err : *worst;
                }
            for (int i = 0; i <= nq * E; i++) acc[i] = (float)i / 7;
            if (fmt == 0) uk->axpy_rows(acc, p, DR_LDS, nq, k, DR_LD, N, E);
            else uk->axpy_rows16(acc, p, DR_LDS, nq, k16, DR_LD, N, E, fmt == 1);
            *bad_guard |= acc[nq * E] != (float)(nq * E) / 7;
            for (int i = 0; i < nq; i++)
                for (int e = 0; e < E; e++) {
                    double d = (double)(float)((i * E + e) / 7.0f);
                    for (int j = 0; j < N; j++) d += (double)p[i * DR_LDS + j] * k[j * DR_LD + e];
                    double err = fabs(acc[i * E + e] - d) / ((N + 1) * (N + 1 + (i * E + e) / 7.0) * 0x1p-24);
                    *worst = err > *worst ? err : *worst;
                }
        }
    /* Not finite keys: -1, whichever lane holds them. */
    static const uint16_t nan16[3] = {0, 0x7e00, 0x7fc0}, ninf16[3] = {0, 0xfc00, 0xff80};
    for (int e = 0; e < 17; e += 8) {
        float keep = k[3 * DR_LD + e];
        uint16_t keep16 = k16[3 * DR_LD + e];
        k[3 * DR_LD + e] = NAN, k16[3 * DR_LD + e] = nan16[fmt];
        *bad_flags |= dr_dot(uk, fmt, s, q, 2, k, k16, 17) != -1;
        k[3 * DR_LD + e] = -INFINITY, k16[3 * DR_LD + e] = ninf16[fmt];
        *bad_flags |= dr_dot(uk, fmt, s, q, 1, k, k16, 17) != -1;
        k[3 * DR_LD + e] = keep, k16[3 * DR_LD + e] = keep16;
    }
}

static void test_decode_rows(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "decode_rows_%s_every_row_count_and_width", NULL);
    if (!uk) return;
    for (int fmt = 0; fmt < (uk->dot_rows16 ? 3 : 1); fmt++) {
        double worst = 0;
        int bad_max = 0, bad_guard = 0, bad_flags = 0;
        decode_rows_fmt(uk, fmt, &worst, &bad_max, &bad_guard, &bad_flags);
        char full[96];
        snprintf(full, sizeof full, "%s_%s", name, fmt == 0 ? "f32" : fmt == 1 ? "f16" : "bf16");
        check(worst <= 1 && !bad_max && !bad_guard && !bad_flags, full,
              "error %.3g of the bound, max |k| %s, guard %s, non-finite %s", worst, bad_max ? "wrong" : "ok",
              bad_guard ? "overwritten" : "ok", bad_flags ? "missed" : "ok");
    }
}

/* dot_rows sums its scores a group of keys at a time (decode_rows.h): a
 * key's score must not depend on where a call starts or ends (a paged cache
 * is read a page at a time, split-KV a chunk at a time), so 41 keys (two
 * groups and a tail) scored in one call and in calls cut at 3, 5, 21 and 37
 * give the same bits, for every row count and every kind the ISA streams:
 * f32, f16 and bf16 (dot_rows16), q8, q4 and q4_1 (dot_rows_q, which must
 * also give the bits of dot_rows on the widened rows; and axpy_rows_q those
 * of axpy_rows on them). A NaN in a key of a group or of the tail, and an
 * infinite one, give -1 for every row count. */
enum { DG_N = 41, DG_E = 64, DG_QROW = 68 }; /* q8: 2 blocks of 34 bytes; q4 uses 36, q4_1 40 */

/* The quantized format of the test's kind 3, 4 or 5. */
static attn_dtype dg_format(int kind) { return kind == 3 ? ATTN_Q8 : kind == 4 ? ATTN_Q4 : ATTN_Q4_1; }

static float dg_dot(const attn_ukernels *uk, int kind, float *s, int64_t lds, const float *q, int nq,
                    const void *k, int64_t j0, int64_t n) {
    const float *kf = k;
    const uint16_t *k16 = k;
    const uint8_t *kq = k;
    switch (kind) {
    case 0: return uk->dot_rows(s, lds, q, nq, kf + j0 * DG_E, DG_E, n, DG_E);
    case 1:
    case 2: return uk->dot_rows16(s, lds, q, nq, k16 + j0 * DG_E, DG_E, n, DG_E, kind == 1);
    default: return uk->dot_rows_q(s, lds, q, nq, kq + j0 * DG_QROW, DG_QROW, n, DG_E, dg_format(kind));
    }
}

static void test_decode_groups(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "decode_rows_%s_any_split_same_bits", NULL);
    if (!uk) return;
    static const char *const KIND[6] = {"f32", "f16", "bf16", "q8", "q4", "q4_1"};
    enum { R = ATTN_DECODE_MAX_ROWS, LDS = 48 };
    static float q[R * DG_E], kf[DG_N * DG_E], wide[DG_N * DG_E], one[R * LDS], cut[R * LDS], ref[R * LDS];
    static uint16_t k16[DG_N * DG_E];
    static uint8_t kq[DG_N * DG_QROW];
    static const int64_t CUTS[] = {0, 3, 5, 21, 37, DG_N};
    for (int i = 0; i < R * DG_E; i++) q[i] = (float)(2 * uniform() - 1);
    for (int kind = 0; kind < 6; kind++) {
        if ((kind == 1 || kind == 2) && !uk->dot_rows16) continue;
        if (kind >= 3 && !uk->dot_rows_q) continue;
        int64_t block = (int64_t)attn_quant_row_size(kind >= 3 ? dg_format(kind) : ATTN_Q8, 32);
        const void *k = kind == 0 ? (const void *)kf : kind <= 2 ? (const void *)k16 : (const void *)kq;
        for (int i = 0; i < DG_N * DG_E; i++) {
            kf[i] = (float)(2 * uniform() - 1);
            k16[i] = kind == 1 ? attn_f32_to_f16(kf[i]) : attn_f32_to_bf16(kf[i]);
        }
        for (size_t i = 0; i < sizeof kq; i++) kq[i] = (uint8_t)(uniform() * 256);
        for (int j = 0; kind >= 3 && j < DG_N; j++)
            for (int b = 0; b < DG_E / 32; b++) { /* finite f16 scales (and q4_1's minimums) */
                uint16_t h = attn_f32_to_f16((float)(uniform() * 0.1)), m = attn_f32_to_f16((float)(uniform() - 0.5));
                memcpy(kq + j * DG_QROW + b * block, &h, 2);
                if (kind == 5) memcpy(kq + j * DG_QROW + b * block + 2, &m, 2);
            }
        /* quantized rows are DG_QROW bytes apart whatever their format */
        if (kind >= 3)
            for (int j = 0; j < DG_N; j++) uk->widen_quant(wide + j * DG_E, kq + j * DG_QROW, DG_E, dg_format(kind));
        int diff = 0, bad_nan = 0, bad_max = 0;
        if (kind >= 3) { /* values: axpy_rows_q the bits of axpy_rows on the widened rows */
            static float pw[ATTN_DECODE_MAX_ROWS * DG_N], a1[ATTN_DECODE_MAX_ROWS * DG_E], a2[ATTN_DECODE_MAX_ROWS * DG_E];
            for (int i = 0; i < R * DG_N; i++) pw[i] = (float)uniform();
            for (int nq = 1; nq <= R; nq++) {
                for (int i = 0; i < R * DG_E; i++) a1[i] = a2[i] = (float)(2 * uniform() - 1);
                uk->axpy_rows_q(a1, pw, DG_N, nq, kq, DG_QROW, DG_N, DG_E, dg_format(kind));
                uk->axpy_rows(a2, pw, DG_N, nq, wide, DG_E, DG_N, DG_E);
                diff += memcmp(a1, a2, sizeof a1) != 0;
            }
        }
        for (int nq = 1; nq <= R; nq++) {
            memset(one, 0, sizeof one), memset(cut, 0, sizeof cut);
            float m1 = dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N), m2 = 0;
            for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++) {
                float m = dg_dot(uk, kind, cut + CUTS[c], LDS, q, nq, k, CUTS[c], CUTS[c + 1] - CUTS[c]);
                m2 = m > m2 ? m : m2;
            }
            diff += memcmp(one, cut, sizeof one) != 0;
            bad_max += m1 != m2 || !(m1 > 0);
            if (kind >= 3) { /* the bits of dot_rows on the widened rows */
                memset(ref, 0, sizeof ref);
                float m3 = uk->dot_rows(ref, LDS, q, nq, wide, DG_E, DG_N, DG_E);
                diff += memcmp(one, ref, sizeof one) != 0 || m3 != m1;
            }
            /* not finite: key 20 lies in a group, key 39 in the tail */
            for (int at = 0; at < 2; at++) {
                int64_t j = at ? 39 : 20;
                if (kind == 0) {
                    float keep = kf[j * DG_E + 33];
                    kf[j * DG_E + 33] = NAN;
                    bad_nan += dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N) != -1;
                    kf[j * DG_E + 33] = -INFINITY;
                    bad_nan += dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N) != -1;
                    kf[j * DG_E + 33] = keep;
                } else if (kind <= 2) {
                    uint16_t keep = k16[j * DG_E + 33];
                    k16[j * DG_E + 33] = kind == 1 ? 0x7e00 : 0x7fc0;
                    bad_nan += dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N) != -1;
                    k16[j * DG_E + 33] = kind == 1 ? 0xfc00 : 0xff80;
                    bad_nan += dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N) != -1;
                    k16[j * DG_E + 33] = keep;
                } else { /* a NaN scale makes its block NaN */
                    uint8_t keep[2];
                    memcpy(keep, kq + j * DG_QROW + block, 2);
                    uint16_t h = 0x7e00;
                    memcpy(kq + j * DG_QROW + block, &h, 2);
                    bad_nan += dg_dot(uk, kind, one, LDS, q, nq, k, 0, DG_N) != -1;
                    memcpy(kq + j * DG_QROW + block, keep, 2);
                }
            }
        }
        char full[96];
        snprintf(full, sizeof full, "%s_%s", name, KIND[kind]);
        check(!diff && !bad_nan && !bad_max, full, "%d row counts differ, %d non-finite keys missed, max |k| wrong %d times",
              diff, bad_nan, bad_max);
    }
}


/* The fp8 row kinds (dot_rows_fp8, axpy_rows_fp8: e4m3 and e5m2 bytes read
 * in place as halves, e4m3 as 2^-8 times its value), for every row count
 * and widths that end on, before and after a vector, rows DF_LD bytes apart:
 *   - scores bitwise dot_rows on the rows widened by widen_quant (q times
 *     2^8 for e4m3), the same max |k|, and the same bits for calls cut at
 *     3, 5, 21 and 37 keys; keys of every finite code (subnormals, the
 *     largest);
 *   - values of every code bitwise axpy_rows on the widened rows (p times
 *     2^8 for e4m3), NaN codes giving NaN where axpy_rows gives NaN;
 *   - a NaN code (every one: e4m3's two, e5m2's six) or an e5m2 infinity in
 *     a key, in a whole vector and in the last one: -1.
 * The portable set has no fp8 kinds (decode widens its rows): skipped. */
enum { DF_N = 41, DF_MAXW = 129, DF_LD = DF_MAXW + 5, DF_LDS = 48 };

static void test_decode_fp8(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "decode_rows_%s_fp8_in_place", NULL);
    if (!uk) return;
    if (!uk->dot_rows_fp8 || !uk->axpy_rows_fp8) {
        skip(name, "the %s set has no fp8 row kernels: decode widens fp8 rows with widen_quant", isa);
        return;
    }
    static const int widths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 128, 129};
    static const int64_t CUTS[] = {0, 3, 5, 21, 37, DF_N};
    enum { R = ATTN_DECODE_MAX_ROWS };
    static uint8_t kb[DF_N * DF_LD], vb[DF_N * DF_LD];
    static float kw[DF_N * DF_LD], vw[DF_N * DF_LD], q[R * DF_MAXW], q8[R * DF_MAXW], p[R * DF_LDS], p8[R * DF_LDS];
    static float s1[R * DF_LDS], s2[R * DF_LDS], a1[R * DF_MAXW + 1], a2[R * DF_MAXW + 1];
    static const attn_dtype FMT[2] = {ATTN_E4M3, ATTN_E5M2};
    for (int f = 0; f < 2; f++) {
        attn_dtype fm = FMT[f];
        bool e4m3 = fm == ATTN_E4M3;
        float scale = e4m3 ? 256.0f : 1.0f;
        uint8_t finite[256];
        int nf = 0;
        for (int c = 0; c < 256; c++) {
            uint8_t b = (uint8_t)c;
            float x;
            attn_dequant_row(&x, &b, 1, fm);
            if (isfinite(x)) finite[nf++] = b;
        }
        for (int i = 0; i < DF_N * DF_LD; i++) kb[i] = finite[(int)(uniform() * nf) % nf], vb[i] = (uint8_t)(uniform() * 256);
        for (int j = 0; j < DF_N; j++)
            attn_dequant_row(kw + j * DF_LD, kb + j * DF_LD, DF_LD, fm), attn_dequant_row(vw + j * DF_LD, vb + j * DF_LD, DF_LD, fm);
        /* q small enough that the largest keys' scores stay far from overflow */
        for (int i = 0; i < R * DF_MAXW; i++) q[i] = (float)(2 * uniform() - 1) * 1e-3f, q8[i] = q[i] * scale;
        for (int i = 0; i < R * DF_LDS; i++) p[i] = (float)uniform(), p8[i] = p[i] * scale;
        int bad_dot = 0, bad_max = 0, bad_cut = 0, bad_axpy = 0, bad_nan = 0;
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int nq = 1; nq <= R; nq++) {
                int E = widths[w];
                memset(s1, 0, sizeof s1), memset(s2, 0, sizeof s2);
                float m1 = uk->dot_rows(s1, DF_LDS, q, nq, kw, DF_LD, DF_N, E);
                float m2 = uk->dot_rows_fp8(s2, DF_LDS, q8, nq, kb, DF_LD, DF_N, E, fm);
                bad_dot += memcmp(s1, s2, sizeof s1) != 0;
                bad_max += m1 != m2 || !(m1 > 0);
                memset(s2, 0, sizeof s2);
                for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++)
                    uk->dot_rows_fp8(s2 + CUTS[c], DF_LDS, q8, nq, kb + CUTS[c] * DF_LD, DF_LD, CUTS[c + 1] - CUTS[c], E, fm);
                bad_cut += memcmp(s1, s2, sizeof s1) != 0;
                for (int i = 0; i <= nq * E; i++) a1[i] = a2[i] = (float)i / 7;
                uk->axpy_rows(a1, p, DF_LDS, nq, vw, DF_LD, DF_N, E);
                uk->axpy_rows_fp8(a2, p8, DF_LDS, nq, vb, DF_LD, DF_N, E, fm);
                for (int i = 0; i <= nq * E; i++) /* NaN where the widened rows give NaN; else the same bits */
                    bad_axpy += isnan(a1[i]) ? !isnan(a2[i]) : memcmp(&a1[i], &a2[i], 4) != 0;
            }
        /* every NaN code (and e5m2's infinities) in key 20 (a whole vector)
         * and key 39 (the last partial one of E = 17), any row count */
        for (int c = 0; c < 256; c++) {
            uint8_t b = (uint8_t)c;
            float x;
            attn_dequant_row(&x, &b, 1, fm);
            if (isfinite(x)) continue;
            for (int at = 0; at < 2; at++) {
                int64_t j = at ? 39 : 20, e = at ? 16 : 3;
                uint8_t keep = kb[j * DF_LD + e];
                kb[j * DF_LD + e] = b;
                bad_nan += uk->dot_rows_fp8(s2, DF_LDS, q8, 1 + c % R, kb, DF_LD, DF_N, 17, fm) != -1;
                kb[j * DF_LD + e] = keep;
            }
        }
        char full[96];
        snprintf(full, sizeof full, "%s_%s", name, attn_dtype_name(fm));
        check(!bad_dot && !bad_max && !bad_cut && !bad_axpy && !bad_nan, full,
              "scores differ from dot_rows %d times, max |k| %d, cut calls %d, values %d, NaN/inf keys missed %d",
              bad_dot, bad_max, bad_cut, bad_axpy, bad_nan);
    }
}

/* The list microkernels (dot_rows_list, axpy_rows_list: row j wherever
 * list[j] points, several pages of a paged cache in one call) give the bits
 * of dot_rows and axpy_rows (dot_rows16, axpy_rows16) on the same rows
 * stored one after another: 41 rows of d = 64 and of d = 72 (a partial last
 * vector), placed in reverse order in memory and read through a list, in
 * one call and in calls cut at 3, 5, 21 and 37, for every row count and
 * f32, f16 and bf16; a NaN key gives -1. The cut calls ask for up to 8
 * rows after theirs ahead (the list's next entries), the one call for
 * none: asking changes no bit. */
/* The rows a list call that ends at row `end` of DG_N may ask for ahead:
 * up to 8, as many as the list holds after it. */
static int64_t list_ahead(int64_t end) { return DG_N - end < 8 ? DG_N - end : 8; }

static void test_decode_lists(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "decode_rows_list_%s_same_bits_as_dot_axpy_rows", NULL);
    if (!uk) return;
    if (!uk->dot_rows_list || !uk->axpy_rows_list) {
        check(0, name, "the %s set has no list microkernels", isa);
        return;
    }
    enum { R = ATTN_DECODE_MAX_ROWS, N = DG_N, EMAX = 72, LDS = 48 };
    static const attn_dtype DT[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    static const int64_t CUTS[] = {0, 3, 5, 21, 37, N};
    static float q[R * EMAX], p[R * LDS], kf[N * EMAX], far_f[N * EMAX], s1[R * LDS], s2[R * LDS];
    static float a1[R * EMAX], a2[R * EMAX];
    static uint16_t k16[N * EMAX], far16[N * EMAX];
    const void *list[N];
    int diff = 0, bad_nan = 0;
    for (int i = 0; i < R * EMAX; i++) q[i] = (float)(2 * uniform() - 1);
    for (int i = 0; i < R * LDS; i++) p[i] = (float)uniform();
    for (int t = 0; t < 3; t++)
        for (int64_t E = 64; E <= EMAX; E += 8) {
            if (t > 0 && !uk->dot_rows16) continue;
            for (int i = 0; i < N * E; i++) {
                kf[i] = (float)(2 * uniform() - 1);
                k16[i] = t == 1 ? attn_f32_to_f16(kf[i]) : attn_f32_to_bf16(kf[i]);
            }
            for (int64_t j = 0; j < N; j++) { /* row j at N-1-j: every row in another place */
                memcpy(far_f + (N - 1 - j) * E, kf + j * E, sizeof(float) * (size_t)E);
                memcpy(far16 + (N - 1 - j) * E, k16 + j * E, sizeof(uint16_t) * (size_t)E);
                list[j] = t ? (const void *)(far16 + (N - 1 - j) * E) : (const void *)(far_f + (N - 1 - j) * E);
            }
            for (int nq = 1; nq <= R; nq++) {
                memset(s1, 0, sizeof s1), memset(s2, 0, sizeof s2);
                float m1 = t ? uk->dot_rows16(s1, LDS, q, nq, k16, E, N, E, t == 1) : uk->dot_rows(s1, LDS, q, nq, kf, E, N, E), m2 = 0;
                for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++) {
                    float m = uk->dot_rows_list(s2 + CUTS[c], LDS, q, nq, list + CUTS[c], CUTS[c + 1] - CUTS[c],
                                                list_ahead(CUTS[c + 1]), E, DT[t]);
                    m2 = m > m2 ? m : m2;
                }
                diff += memcmp(s1, s2, sizeof s1) != 0 || m1 != m2;
                memset(s2, 0, sizeof s2);
                diff += uk->dot_rows_list(s2, LDS, q, nq, list, N, 0, E, DT[t]) != m1 || memcmp(s1, s2, sizeof s1) != 0;
                /* the values: acc += p · rows, in one call against cut calls */
                for (int i = 0; i < R * EMAX; i++) a1[i] = a2[i] = (float)i / 7;
                if (t) uk->axpy_rows16(a1, p, LDS, nq, k16, E, N, E, t == 1);
                else uk->axpy_rows(a1, p, LDS, nq, kf, E, N, E);
                for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++)
                    uk->axpy_rows_list(a2, p + CUTS[c], LDS, nq, list + CUTS[c], CUTS[c + 1] - CUTS[c],
                                       list_ahead(CUTS[c + 1]), E, DT[t]);
                diff += memcmp(a1, a2, sizeof a1) != 0;
                for (int i = 0; i < R * EMAX; i++) a2[i] = (float)i / 7;
                uk->axpy_rows_list(a2, p, LDS, nq, list, N, 0, E, DT[t]);
                diff += memcmp(a1, a2, sizeof a1) != 0;
                /* a NaN in key 20 (a group) and in key 39 (the tail) */
                for (int at = 0; at < 2; at++) {
                    int64_t j = at ? 39 : 20, x = (N - 1 - j) * E + 33;
                    float keep = far_f[x];
                    uint16_t keep16 = far16[x];
                    far_f[x] = NAN, far16[x] = t == 1 ? 0x7e00 : 0x7fc0;
                    bad_nan += uk->dot_rows_list(s2, LDS, q, nq, list, N, 0, E, DT[t]) != -1;
                    far_f[x] = keep, far16[x] = keep16;
                }
            }
        }
    check(!diff && !bad_nan, name, "%d calls differ from dot_rows/axpy_rows, %d NaN keys missed", diff, bad_nan);
}

/* The side-by-side microkernels (dot_rows_heads, axpy_rows_heads: KV heads
 * packed (tokens, Hk, E), query row i against head i / per) give the bits
 * of dot_rows and axpy_rows called head by head: 41 positions of up to 8
 * heads of d = 64 and of d = 72 (a partial last vector), every head's rows
 * 1, 2 or 4 and every row count of whole heads, in one call and in calls
 * cut at 3, 5, 21 and 37; each head's max |k| is its own, and a NaN key
 * in one head gives -1 for that head alone. */
static void test_decode_heads(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "decode_rows_heads_%s_same_bits_as_dot_axpy_rows", NULL);
    if (!uk) return;
    if (!uk->dot_rows_heads || !uk->axpy_rows_heads) {
        check(0, name, "the %s set has no side-by-side microkernels", isa);
        return;
    }
    enum { R = ATTN_DECODE_MAX_ROWS, N = DG_N, EMAX = 72, LDS = 48, LD = R * EMAX + 8 };
    static const int64_t CUTS[] = {0, 3, 5, 21, 37, N};
    static float q[R * EMAX], p[R * LDS], k[N * LD], s1[R * LDS], s2[R * LDS], a1[R * EMAX], a2[R * EMAX];
    int diff = 0, bad_max = 0, bad_nan = 0;
    for (int i = 0; i < R * EMAX; i++) q[i] = (float)(2 * uniform() - 1);
    for (int i = 0; i < R * LDS; i++) p[i] = (float)uniform();
    for (int i = 0; i < N * LD; i++) k[i] = (float)(2 * uniform() - 1);
    for (int64_t E = 64; E <= EMAX; E += 8)
        for (int per = 1; per <= 4; per *= 2)
            for (int nq = per; nq <= R; nq += per) {
                int nh = nq / per;
                float m1[R], m2[R], mc[R];
                memset(s1, 0, sizeof s1), memset(s2, 0, sizeof s2);
                for (int h = 0; h < nh; h++) /* head h: its rows of q and s, its keys E floats on in each position */
                    m1[h] = uk->dot_rows(s1 + h * per * LDS, LDS, q + h * per * E, per, k + h * E, LD, N, E);
                uk->dot_rows_heads(s2, LDS, q, nq, per, k, LD, E, N, E, m2);
                diff += memcmp(s1, s2, sizeof s1) != 0;
                for (int h = 0; h < nh; h++) bad_max += m1[h] != m2[h];
                memset(s2, 0, sizeof s2);
                for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++) {
                    uk->dot_rows_heads(s2 + CUTS[c], LDS, q, nq, per, k + CUTS[c] * LD, LD, E, CUTS[c + 1] - CUTS[c], E, mc);
                    for (int h = 0; h < nh; h++) bad_max += mc[h] > m1[h];
                }
                diff += memcmp(s1, s2, sizeof s1) != 0;
                /* the values: acc += p · rows, head by head against side by side, in one call and cut */
                for (int i = 0; i < R * EMAX; i++) a1[i] = a2[i] = (float)i / 7;
                for (int h = 0; h < nh; h++)
                    uk->axpy_rows(a1 + h * per * E, p + h * per * LDS, LDS, per, k + h * E, LD, N, E);
                uk->axpy_rows_heads(a2, p, LDS, nq, per, k, LD, E, N, E);
                diff += memcmp(a1, a2, sizeof a1) != 0;
                for (int i = 0; i < R * EMAX; i++) a2[i] = (float)i / 7;
                for (size_t c = 0; c + 1 < sizeof CUTS / sizeof CUTS[0]; c++)
                    uk->axpy_rows_heads(a2, p + CUTS[c], LDS, nq, per, k + CUTS[c] * LD, LD, E, CUTS[c + 1] - CUTS[c], E);
                diff += memcmp(a1, a2, sizeof a1) != 0;
                /* a NaN in the last head's key 20, then key 39 */
                for (int at = 0; at < 2; at++) {
                    int64_t x = (at ? 39 : 20) * LD + (nh - 1) * E + 33;
                    float keep = k[x];
                    k[x] = NAN;
                    uk->dot_rows_heads(s2, LDS, q, nq, per, k, LD, E, N, E, m2);
                    bad_nan += m2[nh - 1] != -1;
                    for (int h = 0; h + 1 < nh; h++) bad_nan += m2[h] != m1[h];
                    k[x] = keep;
                }
            }
    check(!diff && !bad_max && !bad_nan, name, "%d calls differ from dot_rows/axpy_rows, max |k| %d, NaN keys %d", diff,
          bad_max, bad_nan);
}

/* widen16 against the library's scalar conversions, over all 65536 bit
 * patterns of f16 and of bf16, at every offset within a vector (NaNs only
 * need to stay NaN: F16C quiets signaling ones). */
static void test_widen16(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "widen16_%s_matches_scalar_f16_bf16", NULL);
    if (!uk) return;
    static uint16_t h[65536 + 40];
    static float f[65536 + 40];
    int wrong = 0;
    for (int fmt = 0; fmt < 2; fmt++)
        for (int off = 0; off < 19; off += 3) {
            for (int i = 0; i < 65536; i++) h[off + i] = (uint16_t)i;
            f[off + 65536] = 12345;
            uk->widen16(f + off, h + off, 65536 - off % 5, fmt == 0);
            for (int i = 0; i < 65536 - off % 5; i++) {
                float want = fmt == 0 ? attn_f16_to_f32((uint16_t)i) : attn_bf16_to_f32((uint16_t)i);
                wrong += !(want != want ? f[off + i] != f[off + i] : memcmp(&want, &f[off + i], 4) == 0);
            }
            wrong += f[off + 65536] != 12345;
        }
    check(!wrong, name, "%d values differ", wrong);
}


/* transpose16 (the packing of 16 keys, transposed) against the portable
 * loop: every key count 1..16, widths that end inside and on a vector, row
 * strides wider than the row; bitwise the same, zeros past the keys. */
static void test_transpose16(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "transpose16_%s_matches_portable", NULL);
    if (!uk) return;
    enum { MAXE = 72, LD = 40 };
    static float k[16 * (MAXE + 5)], got[MAXE * LD], want[MAXE * LD];
    for (int i = 0; i < 16 * (MAXE + 5); i++) k[i] = (float)i * 0.25f - 100.0f;
    int wrong = 0;
    for (int nk = 1; nk <= 16; nk++)
        for (int64_t E = 1; E <= MAXE; E += (E < 20 ? 1 : 13)) {
            int64_t rs = E + (nk % 3) * 2;
            for (int i = 0; i < MAXE * LD; i++) got[i] = want[i] = 7.0f; /* beyond the 16 columns: untouched */
            uk->transpose16(got, LD, k, rs, nk, E);
            attn_transpose16_portable(want, LD, k, rs, nk, E);
            wrong += memcmp(got, want, sizeof got) != 0;
        }
    check(!wrong, name, "%d shapes differ", wrong);
}

/* softcap against libm's tanh in double: within the stated
 * 3 · 2^-24 · min(cap, 8 |x|), over scores from 0 to far past the cap, both
 * signs, every tail length, and scores of order 1 under caps up to 1e30
 * (where (1 - t) / (1 + t) alone, t = e^(-2|x|/cap), lost about 2^-24 · cap
 * to cancellation: every score 0 once the cap passed 2^25 |x|); its
 * returned maximum exactly the largest value it wrote (a NaN score, which
 * stays NaN, skipped as max skips it; nothing past n counted). */
static void test_softcap(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "softcap_%s_vs_tanh", "softcap_%s_returns_its_max");
    if (!uk) return;
    enum { N = 4099 };
    static float x[N], y[N + 1];
    double worst = 0;
    int wrong_max = 0;
    static const float caps[] = {0.5f, 5.0f, 30.0f, 1e4f, 1e6f, 1e30f};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
        for (int n = N - 16; n <= N; n++) {
            for (int i = 0; i < n; i++) {
                double u = uniform() * 2 - 1;
                x[i] = y[i] = (float)(i % 7 == 1 ? u : u * caps[c] * (i % 3 ? 1 : 40) * uniform());
            }
            y[n - 1] = x[n - 1] = 0, y[0] = x[0] = -0.0f;
            if (n % 5 == 0) y[n / 2] = x[n / 2] = NAN;
            y[n] = 1e30f; /* past the end: neither changed nor counted */
            float got_max = uk->softcap(y, n, caps[c]), want_max = -INFINITY;
            for (int i = 0; i < n; i++) {
                if (x[i] != x[i]) {
                    worst = y[i] == y[i] ? INFINITY : worst;
                    continue;
                }
                double want = caps[c] * tanh((double)x[i] / caps[c]);
                double err = fabs(y[i] - want) / (3 * 0x1p-24 * fmin(caps[c], 8 * fabs((double)x[i])));
                err = err != err && y[i] == want ? 0 : err; /* 0 / 0 at x = 0 */
                worst = err > worst || err != err ? err : worst;
                want_max = y[i] > want_max ? y[i] : want_max;
            }
            wrong_max += got_max != want_max || y[n] != 1e30f;
        }
    check(worst <= 1, name, "error %.3g of the bound 3 * 2^-24 * min(cap, 8 |x|)", worst);
    snprintf(name, sizeof name, "softcap_%s_returns_its_max", isa);
    check(!wrong_max, name, "%d rows' maximum differs from the largest value written", wrong_max);
}


/* softmax_grad against exp_sum and the scalar formula: P bitwise what the
 * forward's exp_sum gives for the same row and lse (masked scores, -inf,
 * give 0), dS bitwise P · (dP - D) in f32, for rows of 1 to 40 vectors. */
static void test_softmax_grad(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "softmax_grad_%s_vs_exp_sum", NULL);
    if (!uk) return;
    enum { N = 40 * 16 };
    static float s[N], p[N], want_p[N], dp[N], ds[N];
    int wrong = 0, rows = 0;
    for (int n = uk->vl; n <= N; n += uk->vl * 3, rows++) {
        float lse = (float)(uniform() * 6 - 3), D = (float)(uniform() * 2 - 1);
        for (int i = 0; i < n; i++) {
            s[i] = i % 7 == 3 ? -INFINITY : (float)(lse + (uniform() * 30 - 28));
            dp[i] = (float)(uniform() * 4 - 2);
        }
        memcpy(p, s, sizeof(float) * (size_t)n), memcpy(want_p, s, sizeof(float) * (size_t)n);
        memcpy(ds, dp, sizeof(float) * (size_t)n);
        uk->exp_sum(want_p, n, lse);
        uk->softmax_grad(p, ds, n, lse, D);
        for (int i = 0; i < n; i++) {
            float want_ds = want_p[i] * (dp[i] - D);
            wrong += memcmp(&p[i], &want_p[i], 4) != 0 || memcmp(&ds[i], &want_ds, 4) != 0;
            wrong += s[i] == -INFINITY && (p[i] != 0 || ds[i] != 0);
        }
    }
    check(!wrong && rows > 10, name, "%d of the elements differ over %d rows", wrong, rows);
}

/* scale and divide against the scalar operations: one correctly rounded
 * product or quotient each, so bitwise equal, for every length and tail,
 * in place and not. */
static void test_scale_divide(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "scale_divide_%s_equal_scalar", NULL);
    if (!uk) return;
    enum { N = 70 };
    float x[N], y[N], z[N];
    int wrong = 0;
    for (int n = 0; n <= N; n++) {
        for (int i = 0; i < N; i++) x[i] = normal() * (i % 5 ? 1.0f : 1e-38f), y[i] = z[i] = -1.0f;
        float a = (float)(uniform() * 3 + 0.1);
        uk->scale(y, x, n, a);
        uk->divide(z, x, n, a);
        for (int i = 0; i < N; i++) {
            float ws = i < n ? x[i] * a : -1.0f, wd = i < n ? x[i] / a : -1.0f;
            wrong += memcmp(&y[i], &ws, 4) != 0 || memcmp(&z[i], &wd, 4) != 0;
        }
        memcpy(y, x, sizeof x);
        uk->scale(y, y, n, a); /* in place */
        for (int i = 0; i < n; i++) {
            float ws = x[i] * a;
            wrong += memcmp(&y[i], &ws, 4) != 0;
        }
    }
    check(!wrong, name, "%d elements differ", wrong);
}

/* alibi against double: s - slope · |d0 + i| within 2 · 2^-24 of the bias
 * (plus s's own rounding), for distances crossing 0 and every tail length. */
static void test_alibi(const char *isa) {
    char name[64];
    const attn_ukernels *uk = kernels_or_skip(isa, name, sizeof name, "alibi_%s_vs_double", NULL);
    if (!uk) return;
    static float s[300], x[300];
    double worst = 0;
    static const int64_t starts[] = {-150, -7, 0, 3, 1000000, -20000000};
    static const double slopes[] = {0.5, 0.0078125, 0.3, 3.7};
    for (size_t a = 0; a < sizeof starts / sizeof starts[0]; a++)
        for (size_t b = 0; b < sizeof slopes / sizeof slopes[0]; b++)
            for (int n = 270; n < 290; n++) {
                for (int i = 0; i < n; i++) s[i] = x[i] = (float)(uniform() * 8 - 4);
                float slope = (float)slopes[b];
                uk->alibi(s, n, slope, starts[a]);
                for (int i = 0; i < n; i++) {
                    double bias = slope * fabs((double)(starts[a] + i)), want = x[i] - bias;
                    double err = fabs(s[i] - want) / (2 * 0x1p-24 * bias + 0x1p-24 * fabs(want) + 1e-30);
                    worst = err > worst ? err : worst;
                }
            }
    check(worst <= 1, name, "error %.3g of the bound", worst);
}


/* The paged row source (base/rows.h): keys and values in pages of P
 * positions through a shuffled page table give bitwise what the same rows
 * give stored densely, on every kernel that reads them: flash (f32 and bf16
 * compute), decode (L <= 8 against long S), and the exact kernel (weights
 * asked for), for f32, f16 and bf16 pages, page sizes on and off the
 * kernels' 16-key groups, with GQA and the score variants. */
typedef struct paged_case {
    int64_t L, S, E, Ev, Hq, Hk, P;
    attn_dtype dtype;
    attn_causal causal;
    int64_t window;
    int rope, alibi, bf16, weights;
    const char *kernel; /* the kernel the dense call runs */
} paged_case;

/* Element x of an f32 array as dtype, into dst's element i. */
static void put_as(void *dst, int64_t i, attn_dtype dtype, float x) {
    if (dtype == ATTN_F32) ((float *)dst)[i] = x;
    else ((uint16_t *)dst)[i] = dtype == ATTN_F16 ? attn_f32_to_f16(x) : attn_f32_to_bf16(x);
}

static void test_paged_case(const paged_case *c) {
    char name[160];
    snprintf(name, sizeof name, "paged_%s_L%lld_S%lld_P%lld_%s%s%s%s", c->kernel, (long long)c->L, (long long)c->S,
             (long long)c->P, attn_dtype_name(c->dtype), c->rope ? "_rope" : "", c->alibi ? "_alibi" : "",
             c->bf16 ? "_bf16compute" : "");
    int64_t es = (int64_t)attn_dtype_size(c->dtype), n_pages = (c->S + c->P - 1) / c->P, pool = 2 * n_pages + 3;
    float *q = random_floats((size_t)(c->Hq * c->L * c->E));
    float *kf = random_floats((size_t)(c->Hk * c->S * c->E)), *vf = random_floats((size_t)(c->Hk * c->S * c->Ev));
    /* dense (Hk, S, E) of dtype, and the pool [pool][Hk][P][E] holding the same rows */
    char *kd = malloc((size_t)(c->Hk * c->S * c->E * es)), *vd = malloc((size_t)(c->Hk * c->S * c->Ev * es));
    char *kp = calloc((size_t)(pool * c->Hk * c->P * c->E), (size_t)es), *vp = calloc((size_t)(pool * c->Hk * c->P * c->Ev), (size_t)es);
    /* the table: the first n_pages of a shuffle of the pool's pages */
    int32_t *table = malloc(sizeof(int32_t) * (size_t)pool);
    for (int64_t t = 0; t < pool; t++) table[t] = (int32_t)t;
    for (int64_t t = pool - 1; t > 0; t--) {
        int64_t u = (int64_t)(uniform() * (double)(t + 1)) % (t + 1);
        int32_t x = table[t];
        table[t] = table[u], table[u] = x;
    }
    for (int64_t h = 0; h < c->Hk; h++)
        for (int64_t j = 0; j < c->S; j++) {
            int64_t page = table[j / c->P], r = j % c->P;
            for (int64_t e = 0; e < c->E; e++) {
                float x = kf[(h * c->S + j) * c->E + e];
                put_as(kd, (h * c->S + j) * c->E + e, c->dtype, x);
                put_as(kp, ((page * c->Hk + h) * c->P + r) * c->E + e, c->dtype, x);
            }
            for (int64_t e = 0; e < c->Ev; e++) {
                float x = vf[(h * c->S + j) * c->Ev + e];
                put_as(vd, (h * c->S + j) * c->Ev + e, c->dtype, x);
                put_as(vp, ((page * c->Hk + h) * c->P + r) * c->Ev + e, c->dtype, x);
            }
        }
    attn_paged_rows kpg = {kp, c->dtype, pool, c->Hk, c->P, c->E, table, n_pages, c->S, NULL, 0, false};
    attn_paged_rows vpg = {vp, c->dtype, pool, c->Hk, c->P, c->Ev, table, n_pages, c->S, NULL, 0, false};
    int64_t sq[3] = {c->Hq, c->L, c->E}, sk[3] = {c->Hk, c->S, c->E}, sv[3] = {c->Hk, c->S, c->Ev},
            so[3] = {c->Hq, c->L, c->Ev}, sl[2] = {c->Hq, c->L}, sw[3] = {c->Hq, c->L, c->S}, sh[1] = {c->Hq};
    size_t no = (size_t)(c->Hq * c->L * c->Ev), nl = (size_t)(c->Hq * c->L), nw = (size_t)(c->Hq * c->L * c->S);
    float *out[2] = {calloc(no, 4), calloc(no, 4)}, *lse[2] = {calloc(nl, 4), calloc(nl, 4)};
    float *w[2] = {c->weights ? calloc(nw, 4) : NULL, c->weights ? calloc(nw, 4) : NULL};
    attn_tensor tq, tk, tv, to[2], tl[2], tw[2], ta;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, kd, c->dtype, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, vd, c->dtype, 3, sv, NULL, NULL);
    double slopes[16];
    attn_alibi_slopes(slopes, c->Hq, NULL);
    attn_tensor_init(&ta, slopes, ATTN_F64, 1, sh, NULL, NULL);
    attn_rope_options ro = attn_rope_options_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = c->causal, o.window = c->window, o.rope = c->rope ? &ro : NULL, o.alibi_slopes = c->alibi ? &ta : NULL;
    o.compute = c->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    attn_status st[2];
    attn_error err[2];
    char kernel[2][32];
    for (int t = 0; t < 2; t++) {
        attn_tensor_init(&to[t], out[t], ATTN_F32, 3, so, NULL, NULL);
        attn_tensor_init(&tl[t], lse[t], ATTN_F32, 2, sl, NULL, NULL);
        attn_tensor_init(&tw[t], w[t], ATTN_F32, 3, sw, NULL, NULL);
        attn_set_num_threads(t + 1); /* and any thread count */
        verbose_begin();
        st[t] = t == 0 ? attn_sdpa(&to[t], &tl[t], c->weights ? &tw[t] : NULL, &tq, &tk, &tv, &o, &err[t])
                       : attn_sdpa_paged(&to[t], &tl[t], c->weights ? &tw[t] : NULL, &tq, &kpg, &vpg, &o, &err[t]);
        verbose_end(kernel[t], sizeof kernel[t], NULL, 0);
        attn_set_num_threads(0);
    }
    if (st[0] || st[1]) check(0, name, "dense: %s; paged: %s", st[0] ? err[0].message : "ok", st[1] ? err[1].message : "ok");
    else
        check(strcmp(kernel[0], c->kernel) == 0 && strcmp(kernel[1], c->kernel) == 0 && !memcmp(out[0], out[1], no * 4) &&
                  !memcmp(lse[0], lse[1], nl * 4) && (!c->weights || !memcmp(w[0], w[1], nw * 4)),
              name, "kernels %s and %s (want %s), out %s, lse %s", kernel[0], kernel[1], c->kernel,
              memcmp(out[0], out[1], no * 4) ? "differs" : "same", memcmp(lse[0], lse[1], nl * 4) ? "differs" : "same");
    free(q), free(kf), free(vf), free(kd), free(vd), free(kp), free(vp), free(table);
    for (int t = 0; t < 2; t++) free(out[t]), free(lse[t]), free(w[t]);
}

/* A page table that points outside the pool, and a length past the table,
 * are refused before any kernel reads them. */
static void test_paged_errors(void) {
    float pages[2 * 1 * 16 * 4] = {0}, q[4] = {0}, out[4];
    int32_t table[2] = {0, 2};
    attn_paged_rows pg = {pages, ATTN_F32, 2, 1, 16, 4, table, 2, 20, NULL, 0, false};
    int64_t sq[3] = {1, 1, 4};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_error err;
    attn_status st = attn_sdpa_paged(&to, NULL, NULL, &tq, &pg, &pg, NULL, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "entry 1 is 2"), "paged_table_outside_pool", "status %d: %s", (int)st,
          err.message);
    table[1] = 1, pg.length = 33;
    st = attn_sdpa_paged(&to, NULL, NULL, &tq, &pg, &pg, NULL, &err);
    check(st == ATTN_ERR_SHAPE, "paged_length_past_table", "status %d: %s", (int)st, err.message);
    pg.length = 20;
    attn_tensor_init(&to, pages, ATTN_F32, 3, sq, NULL, NULL); /* out inside the pool */
    st = attn_sdpa_paged(&to, NULL, NULL, &tq, &pg, &pg, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "paged_out_in_pool", "status %d: %s", (int)st, err.message);
}

/* A ragged batch whose keys and values live in one shared pool, each
 * sequence through its own page table (attn_sdpa_varlen_paged), gives
 * bitwise what attn_sdpa_varlen gives on the same rows packed densely: for
 * f32 and f16 pages, P = 16 and 5, a sequence the decode kernel takes, one
 * without keys and one without queries, at 1 and 3 threads. */
static void test_varlen_paged(attn_dtype dtype, int64_t P) {
    enum { B = 5, HQ = 4, HK = 2, E = 32 };
    int64_t Lq[B] = {37, 0, 2, 90, 5}, Lk[B] = {120, 10, 2100, 64, 0}, cu_q[B + 1] = {0}, cu_k[B + 1] = {0};
    int64_t n_pages[B], first_page[B], pool = 0;
    for (int b = 0; b < B; b++) {
        cu_q[b + 1] = cu_q[b] + Lq[b], cu_k[b + 1] = cu_k[b] + Lk[b];
        n_pages[b] = (Lk[b] + P - 1) / P, first_page[b] = pool, pool += n_pages[b];
    }
    pool += 3; /* pages no sequence uses */
    int64_t Tq = cu_q[B], Tk = cu_k[B], es = (int64_t)attn_dtype_size(dtype);
    float *q = random_floats((size_t)(Tq * HQ * E)), *kf = random_floats((size_t)(Tk * HK * E)), *vf = random_floats((size_t)(Tk * HK * E));
    char *kd = malloc((size_t)(Tk * HK * E * es)), *vd = malloc((size_t)(Tk * HK * E * es));
    char *kp = calloc((size_t)(pool * HK * P * E), (size_t)es), *vp = calloc((size_t)(pool * HK * P * E), (size_t)es);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool);
    for (int64_t t = 0; t < pool; t++) perm[t] = (int32_t)t;
    for (int64_t t = pool - 1; t > 0; t--) { /* pages of every sequence scattered over the pool */
        int64_t u = (int64_t)(uniform() * (double)(t + 1)) % (t + 1);
        int32_t x = perm[t];
        perm[t] = perm[u], perm[u] = x;
    }
    attn_paged_rows kpg[B], vpg[B];
    for (int b = 0; b < B; b++) {
        const int32_t *table = perm + first_page[b];
        for (int64_t j = 0; j < Lk[b]; j++)
            for (int64_t h = 0; h < HK; h++)
                for (int64_t e = 0; e < E; e++) {
                    int64_t dense = ((cu_k[b] + j) * HK + h) * E + e, paged = ((table[j / P] * HK + h) * P + j % P) * E + e;
                    put_as(kd, dense, dtype, kf[dense]), put_as(kp, paged, dtype, kf[dense]);
                    put_as(vd, dense, dtype, vf[dense]), put_as(vp, paged, dtype, vf[dense]);
                }
        kpg[b] = (attn_paged_rows){kp, dtype, pool, HK, P, E, table, n_pages[b], Lk[b], NULL, 0, false};
        vpg[b] = kpg[b], vpg[b].pages = vp;
    }
    int64_t sq[3] = {Tq, HQ, E}, sk[3] = {Tk, HK, E}, sl[2] = {Tq, HQ};
    size_t no = (size_t)(Tq * HQ * E), nl = (size_t)(Tq * HQ);
    float *out[2] = {calloc(no, 4), calloc(no, 4)}, *lse[2] = {calloc(nl, 4), calloc(nl, 4)};
    attn_tensor tq, tk, tv, to[2], tl[2];
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, kd, dtype, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, vd, dtype, 3, sk, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_context ctx = attn_context_default();
    o.context = &ctx;
    attn_status st[2];
    attn_error err[2];
    char name[96];
    for (int threads = 1; threads <= 3; threads += 2) {
        ctx.num_threads = threads;
        for (int t = 0; t < 2; t++) {
            attn_tensor_init(&to[t], out[t], ATTN_F32, 3, sq, NULL, NULL);
            attn_tensor_init(&tl[t], lse[t], ATTN_F32, 2, sl, NULL, NULL);
            st[t] = t == 0 ? attn_sdpa_varlen(&to[t], &tl[t], &tq, &tk, &tv, cu_q, cu_k, B, NULL, &o, &err[t])
                           : attn_sdpa_varlen_paged(&to[t], &tl[t], &tq, cu_q, B, kpg, vpg, NULL, &o, &err[t]);
        }
        snprintf(name, sizeof name, "varlen_paged_%s_P%lld_threads%d", attn_dtype_name(dtype), (long long)P, threads);
        if (st[0] || st[1]) check(0, name, "dense: %s; paged: %s", st[0] ? err[0].message : "ok", st[1] ? err[1].message : "ok");
        else check(!memcmp(out[0], out[1], no * 4) && !memcmp(lse[0], lse[1], nl * 4), name, "out or lse differs");
    }
    /* an entry outside the pool, in sequence 3: named, nothing written */
    int32_t saved = perm[first_page[3]];
    perm[first_page[3]] = (int32_t)pool;
    memset(out[1], 0x55, no * 4);
    attn_status bad = attn_sdpa_varlen_paged(&to[1], &tl[1], &tq, cu_q, B, kpg, vpg, NULL, &o, &err[1]);
    perm[first_page[3]] = saved;
    snprintf(name, sizeof name, "varlen_paged_%s_P%lld_table_outside_pool", attn_dtype_name(dtype), (long long)P);
    check(bad == ATTN_ERR_OPTION && !strncmp(err[1].message, "sequence 3: ", 12) && ((unsigned char *)out[1])[0] == 0x55, name,
          "status %d: %s", (int)bad, err[1].message);
    free(q), free(kf), free(vf), free(kd), free(vd), free(kp), free(vp), free(perm);
    for (int t = 0; t < 2; t++) free(out[t]), free(lse[t]);
}

static void test_paged(void) {
    static const paged_case CASES[] = {
        {77, 300, 64, 64, 4, 2, 16, ATTN_F32, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, "flash"},
        {77, 300, 64, 64, 4, 2, 7, ATTN_F32, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, "flash"},
        {130, 700, 64, 48, 4, 1, 256, ATTN_F32, ATTN_CAUSAL_TOP_LEFT, 100, 1, 1, 0, 0, "flash"},
        {130, 700, 64, 64, 4, 2, 64, ATTN_F16, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 1, 0, 0, 0, "flash"},
        {130, 700, 32, 32, 2, 2, 24, ATTN_BF16, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 1, 0, 0, "flash"},
        {130, 700, 32, 32, 2, 2, 24, ATTN_F32, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, "flash"},
        {200, 600, 64, 64, 2, 1, 16, ATTN_F32, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0, "flash"},
        {1, 5000, 64, 64, 8, 2, 16, ATTN_F32, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, "decode"},
        {3, 4100, 64, 64, 4, 2, 100, ATTN_F32, ATTN_CAUSAL_BOTTOM_RIGHT, 300, 0, 1, 0, 0, "decode"},
        {2, 4100, 64, 64, 4, 1, 256, ATTN_F16, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, "decode"},
        {4, 4100, 40, 40, 2, 2, 33, ATTN_BF16, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, "decode"},
        {20, 90, 16, 8, 2, 1, 16, ATTN_F32, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 1, 1, 0, 1, "exact"},
        {20, 90, 16, 8, 2, 2, 5, ATTN_BF16, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 1, "exact"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_paged_case(&CASES[i]);
    test_paged_errors();
    test_varlen_paged(ATTN_F32, 16);
    test_varlen_paged(ATTN_F16, 5);
    test_varlen_paged(ATTN_BF16, 64);
}

#if defined(ATTN_TEST_SIMDE)
/* The quantized rows at qr (300 rows of 64 values, row bytes apart, format
 * q8, q4 or q4_1) read in place by both sets, as keys for 1, 4 and 7 query
 * rows (q: 4 rows of 77 floats) and as values for 3 (weights p, 300 a
 * row; accumulators of 80 floats a row): the results that differ. */
static int simde_quant_rows_differ(const attn_ukernels *hw, const attn_ukernels *em, const float *q, const float *p,
                                   const uint8_t *qr, int64_t row, attn_dtype format) {
    static float r1[4 * 300], r2[4 * 300], o1[ATTN_MR_MAX * 80], o2[ATTN_MR_MAX * 80];
    int diff = 0;
    for (int nq = 1; nq <= ATTN_DECODE_MAX_ROWS; nq += 3) {
        float e1 = hw->dot_rows_q(r1, 300, q, nq > 4 ? 4 : nq, qr, row, 300, 64, format);
        float e2 = em->dot_rows_q(r2, 300, q, nq > 4 ? 4 : nq, qr, row, 300, 64, format);
        diff += (e1 != e2) + (memcmp(r1, r2, sizeof r1) != 0);
    }
    for (int i = 0; i < ATTN_MR_MAX * 80; i++) o1[i] = o2[i] = normal();
    hw->axpy_rows_q(o1, p, 300, 3, qr, row, 300, 64, format), em->axpy_rows_q(o2, p, 300, 3, qr, row, 300, 64, format);
    return diff + (memcmp(o1, o2, sizeof o1) != 0);
}

/* On a CPU that has AVX-512, the SIMDe build must give the native kernels'
 * floats bit for bit: the same code, the same roundings (simde_extra.h
 * makes SIMDe's FMA, scalef and sums round as the instructions do). */
static void test_simde_matches_native(void) {
    const attn_ukernels *hw = attn_ukernels_by_name("avx512"), *em = &attn_ukernels_avx512_simde;
    if (!hw) {
        skip("avx512_simde_bitwise_native", "this CPU lacks AVX-512: nothing native to compare with");
        return;
    }
    enum { N = 4096, E = 77, K = 300, LD = 80 };
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    float *c = malloc(sizeof(float) * N), *d = malloc(sizeof(float) * N);
    static float q[ATTN_MR_MAX * E], kt[E * LD], s1[ATTN_MR_MAX * LD], s2[ATTN_MR_MAX * LD];
    static float p[ATTN_MR_MAX * K], v[K * 64], o1[ATTN_MR_MAX * LD], o2[ATTN_MR_MAX * LD];
    int diff = 0;
    for (int i = 0; i < N; i++) x[i] = (float)(uniform() * 300 - 170);
    hw->exp2(a, x, N), em->exp2(b, x, N);
    diff += memcmp(a, b, sizeof(float) * N) != 0;
    for (int i = 0; i < N; i++) a[i] = b[i] = normal() * 10, c[i] = d[i] = normal();
    float e1 = hw->exp_sum(a, N, 3.0f), e2 = em->exp_sum(b, N, 3.0f);
    diff += (e1 != e2) + (memcmp(a, b, sizeof(float) * N) != 0);
    hw->softmax_grad(a, c, N, 2.0f, 0.5f), em->softmax_grad(b, d, N, 2.0f, 0.5f);
    diff += (memcmp(a, b, sizeof(float) * N) != 0) + (memcmp(c, d, sizeof(float) * N) != 0);
    for (int i = 0; i < N; i++) a[i] = b[i] = normal() * 40;
    e1 = hw->softcap(a, N, 30.0f), e2 = em->softcap(b, N, 30.0f);
    diff += (e1 != e2) + (memcmp(a, b, sizeof(float) * N) != 0);
    for (int i = 0; i < ATTN_MR_MAX * E; i++) q[i] = normal();
    for (int i = 0; i < E * LD; i++) kt[i] = normal();
    hw->qk(s1, LD, q, E, kt, LD, E, hw->nv), em->qk(s2, LD, q, E, kt, LD, E, em->nv);
    diff += memcmp(s1, s2, sizeof s1) != 0;
    for (int i = 0; i < ATTN_MR_MAX * K; i++) p[i] = (float)uniform();
    for (int i = 0; i < K * 64; i++) v[i] = normal();
    for (int i = 0; i < ATTN_MR_MAX * LD; i++) o1[i] = o2[i] = normal();
    hw->pv(o1, LD, p, K, v, 64, K, 3), em->pv(o2, LD, p, K, v, 64, K, 3);
    diff += memcmp(o1, o2, sizeof o1) != 0;
    float r1[4 * 300], r2[4 * 300];
    e1 = hw->dot_rows(r1, 300, q, 4, v, 64, 300, 64), e2 = em->dot_rows(r2, 300, q, 4, v, 64, 300, 64);
    diff += (e1 != e2) + (memcmp(r1, r2, sizeof r1) != 0);
    /* Quantized rows (q8, q4) of 64 values, 300 of them: random codes under
     * scales of every size, widened, dotted and summed by both. */
    static uint8_t qr[300 * 68];
    for (size_t i = 0; i < sizeof qr; i++) qr[i] = (uint8_t)(uniform() * 256);
    for (int q4 = 0; q4 < 2; q4++) {
        int64_t row = q4 ? 36 : 68, block = q4 ? 18 : 34;
        for (int j = 0; j < 300; j++)
            for (int bl = 0; bl < 2; bl++) { /* finite f16 scales, subnormal ones among them */
                uint16_t h = (uint16_t)((uniform() < 0.5 ? 0x8000 : 0) | (int)(uniform() * 0x7bff));
                memcpy(qr + j * row + bl * block, &h, 2);
            }
        float w1[300 * 64], w2[300 * 64];
        hw->widen_quant(w1, qr, 300 * 64, q4 ? ATTN_Q4 : ATTN_Q8), em->widen_quant(w2, qr, 300 * 64, q4 ? ATTN_Q4 : ATTN_Q8);
        diff += memcmp(w1, w2, sizeof w1) != 0;
        diff += simde_quant_rows_differ(hw, em, q, p, qr, row, q4 ? ATTN_Q4 : ATTN_Q8);
    }
    /* q4_1 rows (blocks of 20 bytes: f16 scale, f16 minimum, codes), widened by both. */
    for (int bl = 0; bl < 300 * 2; bl++)
        for (int f = 0; f < 2; f++) {
            uint16_t h = (uint16_t)((f && uniform() < 0.5 ? 0x8000 : 0) | (int)(uniform() * 0x7bff));
            memcpy(qr + bl * 20 + 2 * f, &h, 2);
        }
    static float w41[300 * 64], w42[300 * 64];
    hw->widen_quant(w41, qr, 300 * 64, ATTN_Q4_1), em->widen_quant(w42, qr, 300 * 64, ATTN_Q4_1);
    diff += memcmp(w41, w42, sizeof w41) != 0;
    diff += simde_quant_rows_differ(hw, em, q, p, qr, 40, ATTN_Q4_1); /* read in place: rows of 40 bytes */
    /* fp8 rows (e4m3, e5m2) of 64 bytes, 300 of them, read in place by both:
     * keys of finite codes (bit 6 cleared: no exponent field all ones),
     * values of every byte (NaN codes NaN in both). */
    static uint8_t f8[300 * 64];
    for (size_t i = 0; i < sizeof f8; i++) f8[i] = qr[i] & 0xbf;
    for (int f = 0; f < 2; f++) {
        attn_dtype fm = f ? ATTN_E5M2 : ATTN_E4M3;
        for (int nq = 1; nq <= ATTN_DECODE_MAX_ROWS; nq += 3) {
            e1 = hw->dot_rows_fp8(r1, 300, q, nq > 4 ? 4 : nq, f8, 64, 300, 64, fm);
            e2 = em->dot_rows_fp8(r2, 300, q, nq > 4 ? 4 : nq, f8, 64, 300, 64, fm);
            diff += (e1 != e2) + (memcmp(r1, r2, sizeof r1) != 0);
        }
        for (int i = 0; i < ATTN_MR_MAX * LD; i++) o1[i] = o2[i] = normal();
        hw->axpy_rows_fp8(o1, p, K, 3, qr, 64, 300, 64, fm), em->axpy_rows_fp8(o2, p, K, 3, qr, 64, 300, 64, fm);
        for (int i = 0; i < ATTN_MR_MAX * LD; i++) diff += isnan(o1[i]) != isnan(o2[i]) || (!isnan(o1[i]) && o1[i] != o2[i]);
    }
    check(!diff, "avx512_simde_bitwise_native", "%d of the kernels' results differ from the native ones", diff);
    free(x), free(a), free(b), free(c), free(d);
}
#endif

#if defined(ATTN_TEST_SIMDE)
/* The integer dot product kernels of decode (qdot.h) through SIMDe: the
 * AVX512-VNNI kernel and the AVX-VNNI one (which this CPU may lack), on q8
 * and q4 keys with E of 1 to 10 blocks (passes of the tiles, quads of
 * blocks in part), 1 to 8 query rows, key counts not a multiple of 4, and
 * a row stride wider than the row. Their scores must be, bit for bit:
 *   - the arithmetic the kernels document, written here in plain C: per key
 *     and block the exact integer dot product, times d_k, times d_q; the
 *     blocks 4g + b summed over the quads g of a pass (2 quads) in that
 *     order, then (b0 + b2) + (b1 + b3), and the passes added in order;
 *   - each other's (the same tiles in 512-bit and 256-bit vectors), and the
 *     native kernels' where this CPU has them;
 * and the AVX512-VNNI values (axpy), f32 and bf16 pairs, the native ones'
 * bit for bit; the bf16 pairs' also within the bound attn.h states of the
 * f64 sum of the widened rows. */
/* attn.h's bound on the bf16 pairs' values (value_dot=bf16_avx512bf16) for
 * one column of one call of n keys from zero, mag = Σ_j |p_j · v_j|: the
 * weights' rounding to bf16, f32's accumulation and flushed subnormals. */
static double bf16_value_bound(double mag, int64_t n) {
    return 0x1p-8 * (1 + 0x1p-14) * mag + (double)(n + 2) * 0x1p-23 * mag + (double)(n + 2) * 0x1p-110;
}

static float qdot_reference(const attn_qrows *qq, int r, const uint8_t *key, bool q4) {
    int64_t nb = qq->E / 32, quads = (nb + 3) / 4;
    float s = 0;
    for (int64_t g0 = 0; g0 < quads; g0 += 2) {
        float S[4] = {0, 0, 0, 0};
        for (int64_t g = g0; g < g0 + 2 && g < quads; g++)
            for (int b = 0; b < 4; b++) {
                int64_t bl = 4 * g + b;
                float y = 0;
                if (bl < nb) {
                    const uint8_t *blk = key + bl * (q4 ? 18 : 34);
                    uint16_t h;
                    memcpy(&h, blk, 2);
                    int32_t dot = 0;
                    for (int i = 0; i < 32; i++) {
                        int v = q4 ? (blk[2 + i % 16] >> (i < 16 ? 0 : 4) & 15) - 8 : (int8_t)blk[2 + i];
                        dot += v * qq->codes[(r * nb + bl) * 32 + i];
                    }
                    y = (float)dot * attn_f16_to_f32(h) * qq->d[r * nb + bl];
                }
                S[b] = g == g0 ? y : S[b] + y;
            }
        float part = (S[0] + S[2]) + (S[1] + S[3]);
        s = g0 == 0 ? part : s + part;
    }
    return s;
}

static void test_qdot_simde(void) {
    const attn_qdot_kernels *em[2] = {&attn_qdot_avx512vnni_simde, &attn_qdot_avxvnni_simde};
    const attn_qdot_kernels *hw[2] = {NULL, NULL}, *hw_bf16 = NULL;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        hw[0] = &attn_qdot_avx512vnni;
    if (hw[0] && __builtin_cpu_supports("avx512bf16")) hw_bf16 = &attn_qdot_avx512vnni_bf16;
    unsigned ea = 0, eb, ec, ed;
    if (__get_cpuid_max(0, NULL) >= 7) __cpuid_count(7, 1, ea, eb, ec, ed);
    if (__builtin_cpu_supports("avx2") && (ea >> 4 & 1)) hw[1] = &attn_qdot_avxvnni;
#endif
    if (!hw[0]) skip("qdot_avx512vnni_native_bitwise_simde", "this CPU lacks AVX512-VNNI: nothing native to compare with");
    if (!hw_bf16) skip("qdot_avx512vnni_bf16_values_native_bitwise_simde", "this CPU lacks AVX512-BF16: nothing native to compare with");
    if (!hw[1]) skip("qdot_avxvnni_native_bitwise_simde", "this CPU lacks AVX-VNNI (CPUID 7.1 EAX bit 4): nothing native to compare with");
    enum { N = 37, MAXE = 320, ROWS = 8 };
    static const int64_t ES[] = {32, 64, 96, 128, 288, 320};
    static float q[ROWS * MAXE], d[2][ROWS * MAXE / 32], s[4][ROWS * N], p[ROWS * N], o[3][ROWS * MAXE];
    static int8_t codes[2][ROWS * MAXE];
    static int32_t bias[2][ROWS * MAXE / 32];
    static uint8_t keys[N * (MAXE / 32 * 34 + 6)];
    int ref_diff = 0, pair_diff = 0, native_diff[2] = {0, 0}, axpy_diff = 0, bf16_diff = 0, bf16_calls = 0, cases = 0;
    double bf16_worst = 0; /* the bf16 pairs' error / attn.h's bound */
    for (size_t e = 0; e < sizeof ES / sizeof ES[0]; e++)
        for (int q4 = 0; q4 < 2; q4++)
            for (int wide = 0; wide < 2; wide++) {
                int64_t E = ES[e], nb = E / 32, row = nb * (q4 ? 18 : 34), ld = row + 6 * wide;
                for (size_t i = 0; i < sizeof keys; i++) keys[i] = (uint8_t)(uniform() * 256);
                for (int j = 0; j < N; j++)
                    for (int64_t bl = 0; bl < nb; bl++) { /* finite f16 scales, subnormal ones among them */
                        uint16_t h = (uint16_t)((uniform() < 0.5 ? 0x8000 : 0) | (int)(uniform() * 0x7bff));
                        memcpy(keys + j * ld + bl * (q4 ? 18 : 34), &h, 2);
                    }
                for (int i = 0; i < ROWS * E; i++) q[i] = normal() * (i % 7 == 3 ? 30.0f : 1.0f);
                attn_qrows qq[2];
                for (int k = 0; k < 2; k++)
                    attn_qrows_quantize(&qq[k], codes[k], d[k], bias[k], q, ROWS, E, q4 ? ATTN_Q4 : ATTN_Q8, em[k]);
                static const int NQS[] = {1, 3, 4, 6, 8};
                for (size_t iq = 0; iq < sizeof NQS / sizeof NQS[0]; iq++) {
                    int nq = NQS[iq];
                    float kmax[4];
                    for (int k = 0; k < 2; k++) kmax[k] = em[k]->dot(s[k], N, &qq[k], ROWS - nq, nq, keys, ld, N, q4, qdot_scratch);
                    for (int k = 0; k < 2; k++)
                        if (hw[k]) {
                            kmax[2 + k] = hw[k]->dot(s[2 + k], N, &qq[k], ROWS - nq, nq, keys, ld, N, q4, qdot_scratch);
                            native_diff[k] += kmax[2 + k] != kmax[k] || memcmp(s[2 + k], s[k], sizeof(float) * (size_t)(nq * N));
                        }
                    pair_diff += kmax[0] != kmax[1] || memcmp(s[0], s[1], sizeof(float) * (size_t)(nq * N));
                    for (int i = 0; i < nq; i++)
                        for (int j = 0; j < N; j++) {
                            float want = qdot_reference(&qq[0], ROWS - nq + i, keys + j * ld, q4);
                            ref_diff += memcmp(&want, &s[0][i * N + j], sizeof want) != 0;
                        }
                    cases++;
                }
                /* values: the weights, the rows read as values (Ev = E) */
                for (int i = 0; i < ROWS * N; i++) p[i] = (float)uniform();
                for (int i = 0; i < ROWS * MAXE; i++) o[0][i] = o[1][i] = normal();
                for (int nq = 1; nq <= ROWS && hw[0]; nq += 3) {
                    em[0]->axpy(o[0], p, N, nq, keys, ld, N, E, q4, qdot_scratch), hw[0]->axpy(o[1], p, N, nq, keys, ld, N, E, q4, qdot_scratch);
                    axpy_diff += memcmp(o[0], o[1], sizeof(float) * (size_t)(nq * E)) != 0;
                }
                /* bf16 pairs, from zero (so that the bound is of this call alone), every key count to N
                 * (a lone last key), against the f64 sum of the widened rows */
                for (int nq = 1; nq <= ROWS; nq += 3)
                    for (int n = 1; n <= N; n += (n < 6 ? 1 : 9)) {
                        memset(o[0], 0, sizeof o[0]), memset(o[1], 0, sizeof o[1]);
                        attn_qdot_avx512vnni_bf16_simde.axpy(o[0], p, N, nq, keys, ld, n, E, q4, qdot_scratch);
                        if (hw_bf16) {
                            hw_bf16->axpy(o[1], p, N, nq, keys, ld, n, E, q4, qdot_scratch);
                            bf16_diff += memcmp(o[0], o[1], sizeof(float) * (size_t)(nq * E)) != 0;
                        }
                        for (int i = 0; i < nq; i++)
                            for (int64_t c = 0; c < E; c++) {
                                double want = 0, mag = 0;
                                for (int j = 0; j < n; j++) {
                                    const uint8_t *blk = keys + j * ld + c / 32 * (q4 ? 18 : 34);
                                    uint16_t h;
                                    memcpy(&h, blk, 2);
                                    int code = q4 ? (blk[2 + c % 16] >> (c % 32 < 16 ? 0 : 4) & 15) - 8 : (int8_t)blk[2 + c % 32];
                                    double w = (double)p[i * N + j] * attn_f16_to_f32(h);
                                    want += w * code, mag += fabs(w * code);
                                }
                                double bound = bf16_value_bound(mag, n);
                                double err = fabs(o[0][i * E + c] - want);
                                bf16_worst = fmax(bf16_worst, bound > 0 ? err / bound : err > 0 ? INFINITY : 0);
                            }
                        bf16_calls++;
                    }
            }
    check(!ref_diff, "qdot_avx512vnni_simde_is_the_documented_arithmetic", "%d of the scores (%d calls) differ from the reference",
          ref_diff, cases);
    check(!pair_diff, "qdot_avxvnni_simde_bitwise_avx512vnni_simde", "%d of %d calls differ", pair_diff, cases);
    if (hw[0]) {
        check(!native_diff[0], "qdot_avx512vnni_native_bitwise_simde", "%d of %d calls differ", native_diff[0], cases);
        check(!axpy_diff, "qdot_avx512vnni_values_native_bitwise_simde", "%d calls differ", axpy_diff);
    }
    if (hw[1]) check(!native_diff[1], "qdot_avxvnni_native_bitwise_simde", "%d of %d calls differ", native_diff[1], cases);
    if (hw_bf16) check(!bf16_diff, "qdot_avx512vnni_bf16_values_native_bitwise_simde", "%d of %d calls differ", bf16_diff, bf16_calls);
    check(bf16_worst <= 1, "qdot_avx512vnni_bf16_values_within_bound", "error %.3g of attn.h's bound (%d calls)", bf16_worst,
          bf16_calls);
}
#endif

#if defined(ATTN_TEST_SIMDE)
/* The queries' rounding in the AVX-512 sets' vectors (qdot.h's quantize,
 * decode_quant_avx512.c), through SIMDe and natively where the CPU has
 * AVX512-VNNI, against qdot.c's portable loop (the avxvnni set has none):
 * the same codes, d and bias, bit for bit, for q8 and q4 biases, on blocks
 * of normal values, of exact halves of d (ties to even), of zeros, of
 * values small enough that d is subnormal or 1/d overflows, and of values
 * near FLT_MAX. */
static void test_qrows_quantize_simde(void) {
    const attn_qdot_kernels *vec[2] = {&attn_qdot_avx512vnni_simde, NULL}, *plain = &attn_qdot_avxvnni_simde;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        vec[1] = &attn_qdot_avx512vnni;
#endif
    enum { ROWS = 3, E = 256, NB = ROWS * E / 32, KINDS = 6 };
    static float q[ROWS * E];
    int8_t codes[3][ROWS * E];
    float d[3][NB];
    int32_t bias[3][NB];
    int differ[2] = {0, 0}, calls = 0, ties = 0;
    for (int round = 0; round < 200; round++)
        for (int q4 = 0; q4 < 2; q4++) {
            for (int b = 0; b < NB; b++) {
                int kind = (round + b) % KINDS;
                float scale = kind == 3 ? 1e-38f : kind == 4 ? 1e-43f : kind == 5 ? 3e38f : 1.0f;
                for (int i = 0; i < 32; i++) {
                    /* finite, as decode's queries are: near FLT_MAX drawn uniformly, not normally */
                    float x = kind == 2 ? 0.0f : kind == 5 ? (float)((uniform() * 2 - 1) * scale) : (float)normal() * scale;
                    if (kind == 1) x = (float)((int)(uniform() * 509) - 254) / 2; /* halves of d = 1: ties */
                    q[b * 32 + i] = x;
                }
                if (kind == 1) q[b * 32 + 5] = 127.0f, ties++; /* a = 127: d = 1 */
            }
            attn_qrows qq[3];
            attn_qrows_quantize(&qq[0], codes[0], d[0], bias[0], q, ROWS, E, q4 ? ATTN_Q4 : ATTN_Q8, plain);
            for (int k = 0; k < 2; k++)
                if (vec[k]) {
                    attn_qrows_quantize(&qq[1 + k], codes[1 + k], d[1 + k], bias[1 + k], q, ROWS, E, q4 ? ATTN_Q4 : ATTN_Q8,
                                        vec[k]);
                    differ[k] += memcmp(codes[0], codes[1 + k], sizeof codes[0]) != 0 ||
                                 memcmp(d[0], d[1 + k], sizeof d[0]) != 0 || memcmp(bias[0], bias[1 + k], sizeof bias[0]) != 0;
                }
            calls++;
        }
    check(vec[0]->quantize && !plain->quantize && !differ[0], "qrows_quantize_avx512_matches_portable_simde",
          "%d of %d calls differ (%d tie blocks)", differ[0], calls, ties);
    if (vec[1]) check(!differ[1], "qrows_quantize_avx512_matches_portable_native", "%d of %d calls differ", differ[1], calls);
    else skip("qrows_quantize_avx512_matches_portable_native", "this CPU lacks AVX512-VNNI: nothing native to compare with");
}

/* The values by integer dot products (value_dot=int8_avx512vnni,
 * decode_values_avx512.c) through SIMDe, on q8 and q4 rows of random codes
 * and finite f16 scales of both signs (subnormal ones among them), E of 1
 * to 10 blocks, 1 to 8 rows, 1 to 37 keys (groups of 16 and a part), a row
 * stride wider than the row. Each call must be, bit for bit:
 *   - the arithmetic attn.h documents, written here in plain C: per row,
 *     group of 16 keys from the call's first and block, w = p · d (f32),
 *     a = max |w|, σ = a · (1/127)f and r = 127 / a (both 0 for a < 2^-100),
 *     w' = w · r rounded to nearest even (within ±127), the exact integer
 *     Σ w' · code, and acc = fma(σ, that sum, acc);
 *   - the native kernel's, where this CPU has AVX512-VNNI;
 * and within attn.h's bound of the f64 sum Σ p · d · code. */
static void qvalues_int8_reference(float *acc, const float *p, int64_t ldp, int nq, const uint8_t *v, int64_t ld,
                                   int64_t n, int64_t Ev, bool q4) {
    int64_t nb = Ev / 32, bs = q4 ? 18 : 34;
    for (int i = 0; i < nq; i++)
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            int64_t nk = n - j0 < 16 ? n - j0 : 16;
            for (int64_t b = 0; b < nb; b++) {
                float w[16], a = 0;
                for (int64_t j = 0; j < nk; j++) {
                    uint16_t h;
                    memcpy(&h, v + (j0 + j) * ld + b * bs, 2);
                    w[j] = p[i * ldp + j0 + j] * attn_f16_to_f32(h);
                    a = fabsf(w[j]) > a ? fabsf(w[j]) : a;
                }
                float sg = 0, r = 0;
                if (a >= 0x1p-100f) sg = a * (1.0f / 127), r = 127 / a;
                int32_t wq[16];
                for (int64_t j = 0; j < nk; j++) {
                    float c = nearbyintf(w[j] * r);
                    wq[j] = (int32_t)(c > 127 ? 127 : c < -127 ? -127 : c);
                }
                for (int c = 0; c < 32; c++) {
                    int32_t sum = 0;
                    for (int64_t j = 0; j < nk; j++) {
                        const uint8_t *blk = v + (j0 + j) * ld + b * bs + 2;
                        int code = q4 ? (blk[c % 16] >> (c < 16 ? 0 : 4) & 15) - 8 : (int8_t)blk[c];
                        sum += wq[j] * code;
                    }
                    float *o = acc + i * Ev + 32 * b + c;
                    *o = fmaf(sg, (float)sum, *o);
                }
            }
        }
}

/* attn.h's bound on one column c of one call from zero (value_dot=int8):
 * per group of 16 keys, (1 + 2^-14) σ/2 · Σ |code| with σ = max |p · d| /
 * 127, plus (n + 2) · 2^-23 · Σ |p · d · code| and n · 2^-93. */
static double int8_value_bound(const float *p, const uint8_t *v, int64_t ld, int64_t n, int64_t c, bool q4) {
    double bound = 0, mag = 0;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        double a = 0, codes = 0;
        for (int64_t j = j0; j < n && j < j0 + 16; j++) {
            const uint8_t *blk = v + j * ld + c / 32 * (q4 ? 18 : 34);
            uint16_t h;
            memcpy(&h, blk, 2);
            int code = q4 ? (blk[2 + c % 16] >> (c % 32 < 16 ? 0 : 4) & 15) - 8 : (int8_t)blk[2 + c % 32];
            double w = (double)p[j] * attn_f16_to_f32(h);
            a = fmax(a, fabs(w)), codes += abs(code), mag += fabs(w * code);
        }
        bound += (1 + 0x1p-14) / 2 * (a / 127) * codes;
    }
    return bound + (double)(n + 2) * 0x1p-23 * mag + (double)n * 0x1p-93;
}

static void test_qvalues_int8_simde(void) {
    const attn_qdot_kernels *em = &attn_qdot_avx512vnni_int8_simde, *hw = NULL;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        hw = &attn_qdot_avx512vnni_int8;
#endif
    if (!hw) skip("qvalues_int8_avx512vnni_native_bitwise_simde", "this CPU lacks AVX512-VNNI: nothing native to compare with");
    enum { N = 37, MAXE = 320, ROWS = 8 };
    static const int64_t ES[] = {32, 64, 96, 128, 288, 320};
    static float p[ROWS * N], o[3][ROWS * MAXE];
    static uint8_t keys[N * (MAXE / 32 * 34 + 6)];
    int ref_diff = 0, native_diff = 0, calls = 0;
    double worst = 0; /* error / attn.h's bound */
    for (size_t e = 0; e < sizeof ES / sizeof ES[0]; e++)
        for (int q4 = 0; q4 < 2; q4++)
            for (int wide = 0; wide < 2; wide++) {
                int64_t E = ES[e], nb = E / 32, ld = nb * (q4 ? 18 : 34) + 6 * wide;
                for (size_t i = 0; i < sizeof keys; i++) keys[i] = (uint8_t)(uniform() * 256);
                for (int j = 0; j < N; j++)
                    for (int64_t bl = 0; bl < nb; bl++) { /* finite f16 scales of both signs, subnormal ones among them */
                        uint16_t h = (uint16_t)((uniform() < 0.5 ? 0x8000 : 0) | (int)(uniform() * 0x7bff));
                        memcpy(keys + j * ld + bl * (q4 ? 18 : 34), &h, 2);
                    }
                for (int i = 0; i < ROWS * N; i++) p[i] = uniform() < 0.3 ? (float)(uniform() * 1e-3) : (float)uniform();
                for (int nq = 1; nq <= ROWS; nq += 3)
                    for (int n = 1; n <= N; n += (n < 6 ? 1 : 5)) {
                        for (int i = 0; i < ROWS * MAXE; i++) o[0][i] = o[1][i] = o[2][i] = (float)normal();
                        em->axpy(o[0], p, N, nq, keys, ld, n, E, q4, qdot_scratch);
                        qvalues_int8_reference(o[1], p, N, nq, keys, ld, n, E, q4);
                        ref_diff += memcmp(o[0], o[1], sizeof(float) * (size_t)(nq * E)) != 0;
                        if (hw) {
                            hw->axpy(o[2], p, N, nq, keys, ld, n, E, q4, qdot_scratch);
                            native_diff += memcmp(o[0], o[2], sizeof(float) * (size_t)(nq * E)) != 0;
                        }
                        /* the bound: from zero, against the f64 sum */
                        memset(o[0], 0, sizeof o[0]);
                        em->axpy(o[0], p, N, nq, keys, ld, n, E, q4, qdot_scratch);
                        for (int i = 0; i < nq; i++)
                            for (int64_t c = 0; c < E; c++) {
                                double want = 0;
                                for (int j = 0; j < n; j++) {
                                    const uint8_t *blk = keys + j * ld + c / 32 * (q4 ? 18 : 34);
                                    uint16_t h;
                                    memcpy(&h, blk, 2);
                                    int code = q4 ? (blk[2 + c % 16] >> (c % 32 < 16 ? 0 : 4) & 15) - 8 : (int8_t)blk[2 + c % 32];
                                    want += (double)p[i * N + j] * attn_f16_to_f32(h) * code;
                                }
                                double bound = int8_value_bound(p + i * N, keys, ld, n, c, q4);
                                double err = fabs(o[0][i * E + c] - want);
                                worst = fmax(worst, bound > 0 ? err / bound : err > 0 ? INFINITY : 0);
                            }
                        calls++;
                    }
            }
    check(!ref_diff, "qvalues_int8_avx512vnni_simde_is_the_documented_arithmetic", "%d of %d calls differ from the reference",
          ref_diff, calls);
    if (hw) check(!native_diff, "qvalues_int8_avx512vnni_native_bitwise_simde", "%d of %d calls differ", native_diff, calls);
    check(worst <= 1, "qvalues_int8_avx512vnni_within_bound", "error %.3g of attn.h's bound (%d calls)", worst, calls);
}
#endif

#if defined(ATTN_HAVE_X86_KERNELS)
/* The integer kernels for keys quantized per channel (qdot.h,
 * attn_qdot_groups: decode_groups_avx512.c, and decode_groups_avx2.c, which
 * promises the same bits), on q4c and q2c groups of random codes, finite
 * f16 scales (subnormal ones among them) and minimums of either sign, E of
 * 1 to 10 blocks (a pass of 8 blocks and a part of one, quads in part), 1
 * to 8 query rows, spans that start inside a group and cross groups, groups
 * further apart than their bytes. Their scores must be, bit for bit:
 *   - the arithmetic qdot.h documents, written here in plain C: q' = q · s
 *     (f32) rounded per block by attn_qrows_quantize (qdot.c: d = max |q'| /
 *     127, c = q' · (1/d) to nearest even), y_b = (exact Σ c · code) · d; per pass of 8 blocks the quads' y summed
 *     per place b % 4, then (b0 + b2) + (b1 + b3); the passes added in
 *     order; then + Σ q m (16 lanes of FMAs, lanes l + (l + 8), then 4
 *     apart, then (0 + 2) + (1 + 3));
 *   - the other kernel's (the SIMDe build against the native AVX512-VNNI
 *     kernel; the native build: the AVX2 kernel against it, where this CPU
 *     has AVX512-VNNI);
 * and the bound on |k| both return the same. */
static float groups_reference(const float *q, const uint8_t *grp, int64_t E, int64_t t, bool q2) {
    int bits = q2 ? 2 : 4, per = 8 / bits;
    int64_t nb = E / 32;
    float sc[320], mc[320], qp[320] = {0}, d[10];
    int8_t c[320];
    int32_t bias[10];
    for (int64_t e = 0; e < E; e++) {
        uint16_t hs, hm;
        memcpy(&hs, grp + 2 * e, 2), memcpy(&hm, grp + 2 * E + 2 * e, 2);
        sc[e] = attn_f16_to_f32(hs), mc[e] = attn_f16_to_f32(hm), qp[e] = q[e] * sc[e];
    }
    attn_qrows qq; /* q' rounded by the library's own rule for queries (the bias unused) */
    attn_qrows_quantize(&qq, c, d, bias, qp, 1, E, ATTN_Q8, &attn_qdot_avx2);
    float score = 0;
    for (int64_t p0 = 0; p0 < nb; p0 += 8) {
        float S[4] = {0, 0, 0, 0};
        for (int64_t b = p0; b < p0 + 8 && b < nb; b++) {
            int32_t dot = 0;
            for (int i = 0; i < 32; i++) {
                int64_t ch = 32 * b + i;
                dot += c[ch] * (grp[4 * E + t * (E / per) + ch / per] >> (bits * (ch % per)) & ((1 << bits) - 1));
            }
            float y = (float)dot * d[b];
            S[b % 4] = b < p0 + 4 ? y : S[b % 4] + y;
        }
        float part = (S[0] + S[2]) + (S[1] + S[3]);
        score = p0 == 0 ? part : score + part;
    }
    float acc[16] = {0}, h[8], u[4];
    for (int64_t e = 0; e < E; e++) acc[e % 16] = fmaf(q[e], mc[e], acc[e % 16]);
    for (int l = 0; l < 8; l++) h[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) u[l] = h[l] + h[l + 4];
    return score + ((u[0] + u[2]) + (u[1] + u[3]));
}

/* `em` against the reference, and against `hw` where it is not NULL; the
 * checks named ref_name and pair_name. */
static void groups_cases(const attn_qdot_groups *em, const attn_qdot_groups *hw, const char *ref_name,
                         const char *pair_name) {
    enum { MAXE = 320, ROWS = 8, NG = 3, LDS = 100 };
    static const int64_t ES[] = {32, 64, 96, 128, 160, 288, 320};
    static float q[ROWS * MAXE], s[2][ROWS * LDS];
    static uint8_t groups[NG * (20 * MAXE + 64)];
    int ref_diff = 0, native_diff = 0, cases = 0;
    for (size_t e = 0; e < sizeof ES / sizeof ES[0]; e++)
        for (int q2 = 0; q2 < 2; q2++) {
            int64_t E = ES[e], gb = (int64_t)attn_quant_group_size(q2 ? ATTN_Q2C : ATTN_Q4C, E), stride = gb + 64;
            for (size_t i = 0; i < sizeof groups; i++) groups[i] = (uint8_t)(uniform() * 256);
            for (int g = 0; g < NG; g++)
                for (int64_t c = 0; c < E; c++) { /* scales >= 0, subnormal ones among them; minimums of either sign */
                    uint16_t hs = (uint16_t)(uniform() < 0.1 ? uniform() * 0x400 : uniform() * 0x5000);
                    uint16_t hm = (uint16_t)((uniform() < 0.5 ? 0x8000 : 0) | (int)(uniform() * 0x5800));
                    memcpy(groups + g * stride + 2 * c, &hs, 2), memcpy(groups + g * stride + 2 * E + 2 * c, &hm, 2);
                }
            for (int i = 0; i < ROWS * E; i++) q[i] = normal() * (i % 7 == 3 ? 30.0f : 1.0f);
            static const int NQS[] = {1, 3, 4, 6, 8};
            static const int64_t SPANS[][2] = {{0, 32}, {5, 3}, {13, 70}, {31, 1}, {0, 96}, {9, 0}};
            for (size_t iq = 0; iq < sizeof NQS / sizeof NQS[0]; iq++)
                for (size_t sp = 0; sp < sizeof SPANS / sizeof SPANS[0]; sp++) {
                    int nq = NQS[iq];
                    int64_t t0 = SPANS[sp][0], n = SPANS[sp][1];
                    float k0 = em->dot(s[0], LDS, q, nq, groups, stride, E, t0, n, q2, qdot_scratch);
                    for (int i = 0; i < nq; i++)
                        for (int64_t j = 0; j < n; j++) {
                            int64_t t = t0 + j;
                            float want = groups_reference(q + i * E, groups + t / 32 * stride, E, t % 32, q2);
                            ref_diff += memcmp(&want, &s[0][i * LDS + j], sizeof want) != 0;
                        }
                    if (hw) {
                        float k1 = hw->dot(s[1], LDS, q, nq, groups, stride, E, t0, n, q2, qdot_scratch);
                        for (int i = 0; i < nq; i++)
                            native_diff += k0 != k1 || memcmp(s[0] + i * LDS, s[1] + i * LDS, sizeof(float) * (size_t)n);
                    }
                    cases++;
                }
        }
    check(!ref_diff, ref_name, "%d of the scores (%d calls) differ from the reference", ref_diff, cases);
    if (hw) check(!native_diff, pair_name, "%d rows of %d calls differ", native_diff, cases);
}

/* The native kernel for AVX512-VNNI, or NULL after saying skip for `name`. */
static const attn_qdot_groups *groups_avx512vnni_or_skip(const char *name) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        return &attn_qdot_groups_avx512vnni;
    skip(name, "this CPU lacks AVX512-VNNI: nothing native to compare with");
    return NULL;
}
#endif

#if defined(ATTN_TEST_SIMDE)
static void test_groups_simde(void) {
    const char *pair = "qdot_groups_avx512vnni_native_bitwise_simde";
    groups_cases(&attn_qdot_groups_avx512vnni_simde, groups_avx512vnni_or_skip(pair),
                 "qdot_groups_avx512vnni_simde_is_the_documented_arithmetic", pair);
}
#endif

#if defined(ATTN_HAVE_X86_KERNELS)
/* decode_groups_avx2.c, natively (every x86 CPU the library's AVX2 set
 * runs on), against the reference and the AVX512-VNNI kernel. */
static void test_groups_avx2(void) {
    const char *ref = "qdot_groups_avx2_is_the_documented_arithmetic", *pair = "qdot_groups_avx2_bitwise_avx512vnni";
    if (!attn_ukernels_by_name("avx2")) {
        skip(ref, "this CPU lacks AVX2"), skip(pair, "this CPU lacks AVX2");
        return;
    }
    groups_cases(&attn_qdot_groups_avx2, groups_avx512vnni_or_skip(pair), ref, pair);
}
#endif

/* compute = bf16 is never slower than f32: a bf16 set registered as worth
 * running only at the FMA's rate is passed over on a half-rate core (the
 * decision is the set's property, not the CPU's name), AMX's and the
 * emulation's are not; on this CPU the active set is the one that rule
 * picks. */
static void test_bf16_choice(void) {
#if defined(ATTN_HAVE_X86_KERNELS)
    bool ok = !attn_bf16_set_pays(&attn_bf16_avx512, false) && attn_bf16_set_pays(&attn_bf16_avx512, true) &&
              attn_bf16_set_pays(&attn_bf16_amx, false) && attn_bf16_set_pays(&attn_bf16_emulated, false);
    check(ok, "bf16_half_rate_vdpbf16ps_takes_f32", "the registered needs_full_rate is not what decides");
    const attn_bf16_kernels *bk = attn_bf16_active();
    const char *label = attn_bf16_label();
    check((bk && strcmp(label, bk->name) == 0) || (!bk && strncmp(label, "f32", 3) == 0) ||
              (bk && strstr(label, "amx_refused") && strncmp(label, bk->name, strlen(bk->name)) == 0),
          "bf16_label_names_the_active_set", "label %s, set %s", label, bk ? bk->name : "none");
#endif
}

/* Which kernel sets this binary ran natively, on a line run.sh shows. */
static void say_native_sets(void) {
    printf("# kernel sets run natively:");
    for (int i = 0; attn_ukernels_registered(i); i++) {
        const char *name = attn_ukernels_registered(i)->name;
        printf(" %s%s", name, attn_ukernels_by_name(name) ? "" : " (not on this CPU)");
    }
    printf("; the avx512 and avx512_bf16 sets also through SIMDe in test_fast_simde\n");
}

int main(int argc, char **argv) {
    /* --sets: the kernel sets this build registers, on one line, best
     * first; run.sh forces each through ATTN_ISA */
    if (argc == 2 && strcmp(argv[1], "--sets") == 0) {
        for (int i = 0; attn_ukernels_registered(i); i++) printf("%s%s", i ? " " : "", attn_ukernels_registered(i)->name);
        printf("\n");
        return 0;
    }
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
#if defined(ATTN_TEST_SIMDE)
    /* The kernel tests on the SIMDe builds of the AVX-512 kernel files: on
     * any CPU, AVX-512 or not, the code of the kernels runs without one
     * AVX-512 instruction. */
    printf("# kernel sets through SIMDe (portable intrinsics, no AVX-512 or VNNI instruction): avx512, avx512_bf16, "
           "int8_avx512vnni, int8_avxvnni, int8_groups_avx512vnni\n");
    static const char *const EMULATED = "avx512-simde";
    test_exp2(EMULATED);
    test_qk(EMULATED);
    test_pvt(EMULATED);
    test_decode_rows(EMULATED);
    test_decode_groups(EMULATED);
    test_decode_lists(EMULATED);
    test_decode_heads(EMULATED);
    test_decode_fp8(EMULATED);
    test_widen16(EMULATED);
    test_transpose16(EMULATED);
    test_softcap(EMULATED);
    test_softmax_grad(EMULATED);
    test_scale_divide(EMULATED);
    test_alibi(EMULATED);
    test_bf16_kernels(&attn_bf16_avx512_simde, "bf16_emulation_matches_avx512_bf16-simde");
    test_bf16_dot_pair_edges(&attn_bf16_avx512_simde, "bf16_dot_pair_edges_match_avx512_bf16-simde");
    test_bf16_exp_sum(&attn_bf16_avx512_simde, "bf16_exp_sum_within_degree3_bound_avx512_bf16-simde");
    test_simde_matches_native();
    test_qdot_simde();
    test_qrows_quantize_simde();
    test_qvalues_int8_simde();
    test_groups_simde();
    return n_failed ? 1 : 0;
#endif
    say_native_sets();
    test_bf16_choice();
#if defined(ATTN_HAVE_X86_KERNELS)
    test_groups_avx2();
#endif
    test_exp2("c");
    test_exp2("avx2");
    test_exp2("avx512");
    test_qk("c");
    test_qk("avx2");
    test_qk("avx512");
    test_pvt("c");
    test_pvt("avx2");
    test_pvt("avx512");
    test_decode_rows("c");
    test_decode_rows("avx2");
    test_decode_rows("avx512");
    test_decode_groups("c");
    test_decode_groups("avx2");
    test_decode_groups("avx512");
    test_decode_lists("avx2");
    test_decode_lists("avx512");
    test_decode_heads("avx2");
    test_decode_heads("avx512");
    test_decode_fp8("c");
    test_decode_fp8("avx2");
    test_decode_fp8("avx512");
    test_widen16("c");
    test_widen16("avx2");
    test_widen16("avx512");
    test_transpose16("avx2");
    test_transpose16("avx512");
    test_softcap("c");
    test_softcap("avx2");
    test_softcap("avx512");
    test_fallback_by_item();
    test_inf_value_behind_mask();
    test_softmax_grad("c");
    test_softmax_grad("avx2");
    test_softmax_grad("avx512");
    test_scale_divide("c");
    test_scale_divide("avx2");
    test_scale_divide("avx512");
    test_alibi("c");
    test_alibi("avx2");
    test_alibi("avx512");
    /* A forced ISA this CPU lacks would quietly test another one. */
    const char *forced = getenv("ATTN_ISA");
    if (forced && *forced && strcmp(forced, attn_isa()) != 0) {
        skip("fast_path_with_ATTN_ISA", "ATTN_ISA=%s, but this CPU lacks it (the library runs %s)",
             forced, attn_isa());
        test_bf16_emulation();
        attn_shutdown();
        return n_failed ? 1 : 0;
    }
    /* Shapes that span several 768-row items and 512-key blocks, odd sizes. */
    problem shapes[] = {
        {1000, 1300, 40, 24, 2, 1, ATTN_CAUSAL_NONE, 0, 0, 0},
        {1537, 1537, 64, 64, 1, 1, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0},
        {900, 1200, 72, 72, 2, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 0},
        {1200, 700, 33, 17, 4, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0, 0},
        {7, 3000, 128, 128, 2, 1, ATTN_CAUSAL_NONE, 1, 0, 0},
        {1, 1, 1, 1, 1, 1, ATTN_CAUSAL_NONE, 0, 0, 0},
        /* the decode path: a few queries against many keys, split into chunks */
        {1, 70000, 128, 128, 8, 2, ATTN_CAUSAL_NONE, 0, 0, 0},
        {4, 9000, 64, 40, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 0},
        {3, 5000, 33, 7, 2, 1, ATTN_CAUSAL_TOP_LEFT, 2, 0, 0},
        {2, 4097, 16, 16, 1, 1, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0, 0},
        /* one cost model, no threshold: decode on both sides of 2,048 keys
         * (once the fixed chunk), for short contexts, and for 5..8 rows
         * (speculative decoding); 9 rows are flash's */
        {1, 2047, 64, 64, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        {1, 2048, 64, 64, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        {1, 300, 64, 64, 4, 2, ATTN_CAUSAL_NONE, 2, 0, 0},
        {1, 17, 32, 32, 2, 1, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0, 0},
        {2, 1999, 64, 64, 8, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        {5, 4096, 64, 64, 8, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        {6, 1000, 33, 17, 2, 1, ATTN_CAUSAL_TOP_LEFT, 2, 0, 0},
        {7, 2049, 128, 128, 4, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 0},
        {8, 4096, 64, 40, 8, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        {8, 700, 64, 64, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 100},
        {9, 4096, 64, 64, 4, 4, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0},
        /* a very wide head: blocks shrink to keep the scratch bounded */
        {50, 300, 5000, 3000, 1, 1, ATTN_CAUSAL_TOP_LEFT, 1, 0, 0},
        /* the bf16 compute mode, odd E and Ev included */
        {1000, 1300, 64, 64, 2, 1, ATTN_CAUSAL_NONE, 0, 1, 0},
        {777, 900, 33, 20, 2, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 1, 0},
        {300, 2000, 128, 128, 1, 1, ATTN_CAUSAL_TOP_LEFT, 2, 1, 0},
        /* sliding windows over several items and key blocks: tiles start on
         * a vector that is not a whole strip of Q·Kᵀ, and windows narrower
         * than a vector */
        {1500, 1500, 64, 64, 2, 1, ATTN_CAUSAL_TOP_LEFT, 0, 0, 300},
        {900, 1300, 40, 24, 2, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 2, 0, 517},
        {1100, 1100, 33, 17, 1, 1, ATTN_CAUSAL_TOP_LEFT, 1, 0, 9},
        {1200, 1200, 72, 72, 1, 1, ATTN_CAUSAL_TOP_LEFT, 0, 1, 260},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_problem(&shapes[i]);
    test_decode_splits();
    test_fallback();
    test_decode_merge();
    test_decode_side_by_side();
    test_paged();
    test_bf16_emulation();
    test_concurrent_callers();
    test_verbose_threads();
    test_small_work_alone();
    test_cache_model();
    test_fork();
    attn_shutdown();
    return n_failed ? 1 : 0;
}
