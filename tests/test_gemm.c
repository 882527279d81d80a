/* test_gemm.c -- the layer's GEMMs (src/kernels/gemm.c) with every ISA's
 * microkernel forced: the double one against a long double reference within
 * the bound of a double sum, on shapes that cross every block edge (mr, nr,
 * mc, kc, nc), with strided and transposed operands, f16/bf16/f32/f64
 * inputs, f32 and f64 results, bias and accumulation, from the caller's
 * scratch on one thread and its own on three; the f32 one (sgemm)
 * the same way within the bound of an f32 sum, with b packed by the call,
 * packed beforehand, and from the caller's scratch; each bitwise the same
 * for 1 and 3 threads. Prints "ok NAME", "skip NAME: why" or "FAIL NAME: why". */
#include "check.h"
#include "../src/kernels/gemm.h"
#include "../src/kernels/ukernel_bf16.h"

#include <math.h>
#include <stdlib.h>

#define TEST_RNG_SEED 7
#include "rng.h"

/* A rows × cols matrix of dtype dt filled with values in [-1, 1): row-major,
 * or column-major when transposed (so a's rows are strided). */
static attn_mat random_mat(attn_dtype dt, int64_t rows, int64_t cols, bool transposed) {
    size_t n = (size_t)(rows * cols) + 1;
    attn_mat m = {calloc(n, attn_dtype_size(dt)), dt, rows, cols, transposed ? 1 : cols, transposed ? rows : 1};
    attn_mat flat = {m.base, dt, 1, (int64_t)n, 0, 1};
    for (size_t i = 0; i < n; i++) {
        double x = uniform() * 2 - 1;
        if (dt == ATTN_F16 || dt == ATTN_BF16) { /* exactly representable in both */
            uint16_t h = dt == ATTN_F16 ? attn_f32_to_f16((float)x) : attn_f32_to_bf16((float)x);
            memcpy(m.base + 2 * i, &h, 2);
        } else attn_mat_set(&flat, 0, (int64_t)i, x);
    }
    return m;
}

typedef struct shape {
    int64_t M, N, K;
    attn_dtype in, out;
    bool a_transposed, bias, accumulate;
    bool b_transposed; /* b read column by column, as the layer reads a weight (W^T) */
} shape;

/* Worst error over c in units of the bound (K + 2) · u · Σ|a||b| (+ |b|
 * + |c|), u = 2^-53 for double sums, plus one rounding of the result when c
 * is f32. f32 sums (sgemm): u = 2^-24, and the K products and two additions
 * each round once, a recursive sum's γ_(K+2) to first order. */
static double worst_error(const shape *s, const attn_mat *c, const attn_mat *c0, const attn_mat *a, const attn_mat *b,
                          const attn_mat *bias, bool f32_sums) {
    double worst = 0;
    for (int64_t i = 0; i < s->M; i++)
        for (int64_t j = 0; j < s->N; j++) {
            long double want = 0, mag = 0;
            for (int64_t p = 0; p < s->K; p++) {
                long double t = (long double)attn_mat_get(a, i, p) * attn_mat_get(b, p, j);
                want += t, mag += fabsl(t);
            }
            if (bias) want += attn_mat_get(bias, 0, j), mag += fabs(attn_mat_get(bias, 0, j));
            if (s->accumulate) want += attn_mat_get(c0, i, j), mag += fabs(attn_mat_get(c0, i, j));
            double bound = f32_sums ? (double)(s->K + 3) * 0x1p-24 * (double)mag
                                    : (double)(s->K + 2) * 0x1p-53 * (double)mag + (s->out == ATTN_F32 ? 0x1p-24 * fabs((double)want) : 0);
            double err = fabs(attn_mat_get(c, i, j) - (double)want) / (bound + 1e-300);
            worst = err > worst || err != err ? err : worst;
        }
    return worst;
}

static void test_shape(const shape *s, const char *isa) {
    const attn_ukernels *uk = attn_ukernels_by_name(isa);
    char name[160];
    snprintf(name, sizeof name, "gemm_%s_%lldx%lldx%lld_%s_to_%s%s%s%s%s", isa, (long long)s->M, (long long)s->N,
             (long long)s->K, attn_dtype_name(s->in), attn_dtype_name(s->out), s->a_transposed ? "_at" : "",
             s->b_transposed ? "_bt" : "",
             s->bias ? "_bias" : "", s->accumulate ? "_acc" : "");
    if (!uk) {
        skip(name, "this CPU lacks %s", isa);
        return;
    }
    attn_mat a = random_mat(s->in, s->M, s->K, s->a_transposed), b = random_mat(s->in, s->K, s->N, s->b_transposed);
    attn_mat bias = random_mat(s->in, 1, s->N, false), c0 = random_mat(s->out, s->M, s->N, false);
    attn_mat c1 = random_mat(s->out, s->M, s->N, false), c3 = random_mat(s->out, s->M, s->N, false);
    size_t bytes = (size_t)(s->M * s->N) * attn_dtype_size(s->out);
    memcpy(c1.base, c0.base, bytes), memcpy(c3.base, c0.base, bytes);
    size_t ns = attn_gemm_scratch_bytes(false, s->M, s->N, s->K, 1, uk, false);
    double *scratch = malloc(ns ? ns : 1);
    bool ok1 = attn_gemm(&c1, &a, &b, s->bias ? &bias : NULL, s->accumulate, 1, uk, scratch);
    bool ok3 = attn_gemm(&c3, &a, &b, s->bias ? &bias : NULL, s->accumulate, 3, uk, NULL);
    double worst = ok1 ? worst_error(s, &c1, &c0, &a, &b, s->bias ? &bias : NULL, false) : INFINITY;
    bool same = memcmp(c1.base, c3.base, bytes) == 0;
    check(ok1 && ok3 && worst <= 1 && same, name, "calls %s, error %.3g of the bound, 1 and 3 threads %s",
          ok1 && ok3 ? "ok" : "failed", worst, same ? "agree" : "differ");
    free(a.base), free(b.base), free(bias.base), free(c0.base), free(c1.base), free(c3.base), free(scratch);
}

/* The f32 GEMM: c is f32. Three ways on one thread (b packed by the call,
 * b packed beforehand by attn_sgemm_pack_b, the caller's scratch) must
 * agree bitwise with each other and with 3 threads; and the microkernel
 * that ran is the one forced (its tile: a 1 × 1 product writes one element
 * and leaves the padded ones alone). */
static void test_sgemm_shape(const shape *s, const char *isa) {
    const attn_ukernels *uk = attn_ukernels_by_name(isa);
    char name[160];
    snprintf(name, sizeof name, "sgemm_%s_%lldx%lldx%lld_%s%s%s%s%s", isa, (long long)s->M, (long long)s->N,
             (long long)s->K, attn_dtype_name(s->in), s->a_transposed ? "_at" : "", s->b_transposed ? "_bt" : "",
             s->bias ? "_bias" : "",
             s->accumulate ? "_acc" : "");
    if (!uk) {
        skip(name, "this CPU lacks %s", isa);
        return;
    }
    attn_mat a = random_mat(s->in, s->M, s->K, s->a_transposed), b = random_mat(s->in, s->K, s->N, s->b_transposed);
    attn_mat bias = random_mat(s->in, 1, s->N, false), c0 = random_mat(ATTN_F32, s->M, s->N, false);
    attn_mat c[4];
    size_t bytes = (size_t)(s->M * s->N) * sizeof(float);
    for (int i = 0; i < 4; i++) c[i] = random_mat(ATTN_F32, s->M, s->N, false), memcpy(c[i].base, c0.base, bytes);
    int64_t np = attn_sgemm_packed_floats(s->K, s->N, uk->sgemm_nr);
    float *packed = malloc(sizeof(float) * (size_t)np);
    size_t ns = attn_gemm_scratch_bytes(true, s->M, s->N, s->K, 1, uk, false);
    float *scratch = malloc(ns ? ns : 1);
    attn_sgemm_pack_b(packed, &b, uk->sgemm_nr, 3);
    const attn_mat *pb = s->bias ? &bias : NULL;
    bool ok = attn_sgemm(&c[0], &a, &b, NULL, pb, s->accumulate, 1, uk, NULL) &&
              attn_sgemm(&c[1], &a, &b, NULL, pb, s->accumulate, 3, uk, NULL) &&
              attn_sgemm(&c[2], &a, NULL, packed, pb, s->accumulate, 3, uk, NULL) &&
              attn_sgemm(&c[3], &a, &b, NULL, pb, s->accumulate, 1, uk, scratch);
    double worst = ok ? worst_error(s, &c[0], &c0, &a, &b, pb, true) : INFINITY;
    bool same = true;
    for (int i = 1; i < 4; i++) same &= memcmp(c[0].base, c[i].base, bytes) == 0;
    check(ok && worst <= 1 && same, name, "calls %s, error %.3g of the bound, threads, packing and scratch %s",
          ok ? "ok" : "failed", worst, same ? "agree" : "differ");
    free(a.base), free(b.base), free(bias.base), free(c0.base), free(packed), free(scratch);
    for (int i = 0; i < 4; i++) free(c[i].base);
}

/* The microkernel itself, called with its own tile: every element of the
 * sgemm_mr × sgemm_nr tile is its k-term sum added to c, and the elements
 * beside the tile (c's row stride is wider) are untouched. */
static void test_sgemm_tile(const char *isa) {
    const attn_ukernels *uk = attn_ukernels_by_name(isa);
    char name[64];
    snprintf(name, sizeof name, "sgemm_microkernel_%s_tile", isa);
    if (!uk) {
        skip(name, "this CPU lacks %s", isa);
        return;
    }
    enum { K = 5, LD = 40 };
    int mr = uk->sgemm_mr, nr = uk->sgemm_nr;
    float a[K * 16], b[K * 32], c[16 * LD];
    for (int i = 0; i < K * 16; i++) a[i] = (float)(i % 7) - 3;
    for (int i = 0; i < K * 32; i++) b[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 16 * LD; i++) c[i] = 0.5f;
    uk->sgemm(c, LD, a, b, K);
    bool ok = mr <= 16 && nr <= 32;
    for (int i = 0; ok && i < 16; i++)
        for (int j = 0; j < LD; j++) {
            float want = 0.5f;
            if (i < mr && j < nr)
                for (int p = 0; p < K; p++) want += a[p * mr + i] * b[p * nr + j]; /* small integers: exact */
            ok &= c[i * LD + j] == want;
        }
    check(ok, name, "tile %d x %d wrong or spilled", mr, nr);
}

/* The bf16 GEMM (attn_gemm_bf16) on kernel set bk: a and b are rounded to
 * bf16 (â, b̂) and multiplied with f32 sums, so c is within (K + 4)·2^-24·
 * Σ|â||b̂| (+ |bias| + |c|) of the exact sum of the rounded values (the K
 * additions of a pair-by-pair sum, the block's, the bias's and c's). As for
 * sgemm, four ways (packed by the call on 1 and 3 threads, packed
 * beforehand, the caller's scratch) agree bitwise. Returns c[0] for the
 * caller to compare across sets (freed by it), or NULL. */
static float *test_bf16_shape(const shape *s, const attn_bf16_kernels *bk, const char *isa) {
    char name[160];
    snprintf(name, sizeof name, "gemm_bf16_%s_%lldx%lldx%lld_%s%s%s%s%s", isa, (long long)s->M, (long long)s->N,
             (long long)s->K, attn_dtype_name(s->in), s->a_transposed ? "_at" : "", s->b_transposed ? "_bt" : "",
             s->bias ? "_bias" : "", s->accumulate ? "_acc" : "");
    if (!bk) {
        skip(name, "this CPU lacks %s (test_amx runs the AMX kernel through its emulator)", isa);
        return NULL;
    }
    /* a as the layer's activations (f32), b as its weights (s->in) */
    attn_mat a = random_mat(ATTN_F32, s->M, s->K, s->a_transposed), b = random_mat(s->in, s->K, s->N, s->b_transposed);
    attn_mat bias = random_mat(ATTN_F32, 1, s->N, false), c0 = random_mat(ATTN_F32, s->M, s->N, false);
    attn_mat c[4];
    size_t bytes = (size_t)(s->M * s->N) * sizeof(float);
    for (int i = 0; i < 4; i++) c[i] = random_mat(ATTN_F32, s->M, s->N, false), memcpy(c[i].base, c0.base, bytes);
    int64_t np = attn_gemm_bf16_packed_pairs(s->K, s->N, bk);
    uint32_t *packed = malloc(sizeof(uint32_t) * (size_t)np);
    size_t ns = attn_gemm_bf16_scratch_bytes(s->M, s->N, s->K, 1, bk, false);
    float *scratch = malloc(ns ? ns : 1);
    attn_gemm_bf16_pack_b(packed, &b, bk, 3);
    const attn_mat *pb = s->bias ? &bias : NULL;
    bool ok = attn_gemm_bf16(&c[0], &a, &b, NULL, pb, s->accumulate, 1, bk, NULL) &&
              attn_gemm_bf16(&c[1], &a, &b, NULL, pb, s->accumulate, 3, bk, NULL) &&
              attn_gemm_bf16(&c[2], &a, NULL, packed, pb, s->accumulate, 3, bk, NULL) &&
              attn_gemm_bf16(&c[3], &a, &b, NULL, pb, s->accumulate, 1, bk, scratch);
    double worst = 0;
    for (int64_t i = 0; ok && i < s->M; i++)
        for (int64_t j = 0; j < s->N; j++) {
            long double want = 0, mag = 0;
            for (int64_t p = 0; p < s->K; p++) {
                float x = attn_bf16_to_f32(attn_f32_to_bf16((float)attn_mat_get(&a, i, p)));
                float y = attn_bf16_to_f32(attn_f32_to_bf16((float)attn_mat_get(&b, p, j)));
                want += (long double)x * y, mag += fabsl((long double)x * y);
            }
            if (pb) want += attn_mat_get(pb, 0, j), mag += fabs(attn_mat_get(pb, 0, j));
            if (s->accumulate) want += attn_mat_get(&c0, i, j), mag += fabs(attn_mat_get(&c0, i, j));
            double bound = (double)(s->K + 4) * 0x1p-24 * (double)mag + 0x1p-100;
            double err = fabs(attn_mat_get(&c[0], i, j) - (double)want) / bound;
            worst = err > worst || err != err ? err : worst;
        }
    bool same = true;
    for (int i = 1; i < 4; i++) same &= memcmp(c[0].base, c[i].base, bytes) == 0;
    check(ok && worst <= 1 && same, name, "calls %s, error %.3g of the bound, threads, packing and scratch %s",
          ok ? "ok" : "failed", worst, same ? "agree" : "differ");
    free(a.base), free(b.base), free(bias.base), free(c0.base), free(packed), free(scratch);
    for (int i = 1; i < 4; i++) free(c[i].base);
    if (!ok) free(c[0].base);
    return ok ? (float *)(void *)c[0].base : NULL;
}

/* A bf16 microkernel with its own tile: each element of gemm_mr × gemm_nr
 * is its k2-pair sum of small integers (exact) added to c, and c beside
 * the tile is untouched. a2 is laid out in blocks of gemm_kp pairs. */
static void test_bf16_tile(const attn_bf16_kernels *bk, const char *isa) {
    char name[64];
    snprintf(name, sizeof name, "gemm_bf16_microkernel_%s_tile", isa);
    if (!bk) {
        skip(name, "this CPU lacks %s", isa);
        return;
    }
    enum { K2 = 32, LD = 72, ROWS = 40 };
    int mr = bk->gemm_mr, nr = bk->gemm_nr, kp = bk->gemm_kp;
    static uint32_t a2[K2 * 32], b2[K2 * 64];
    static float c[ROWS * LD];
    bool ok = mr <= 32 && nr <= 64 && K2 % kp == 0;
    for (int i = 0; ok && i < mr; i++)
        for (int p = 0; p < K2; p++) {
            float e = (float)((i + 3 * p) % 7) - 3, o = (float)((2 * i + p) % 5) - 2;
            a2[p / kp * mr * kp + i * kp + p % kp] = attn_f32_to_bf16(e) | (uint32_t)attn_f32_to_bf16(o) << 16;
        }
    for (int p = 0; ok && p < K2; p++)
        for (int j = 0; j < nr; j++) {
            float e = (float)((p + j) % 5) - 2, o = (float)((3 * j + p) % 7) - 3;
            b2[p * nr + j] = attn_f32_to_bf16(e) | (uint32_t)attn_f32_to_bf16(o) << 16;
        }
    for (int i = 0; i < ROWS * LD; i++) c[i] = 0.5f;
    if (ok) bk->gemm(c, LD, a2, b2, K2);
    for (int i = 0; ok && i < ROWS; i++)
        for (int j = 0; j < LD; j++) {
            float want = 0.5f;
            if (i < mr && j < nr)
                for (int p = 0; p < K2; p++) {
                    uint32_t x = a2[p / kp * mr * kp + i * kp + p % kp], y = b2[p * nr + j];
                    want += attn_bf16_to_f32((uint16_t)x) * attn_bf16_to_f32((uint16_t)y) +
                            attn_bf16_to_f32((uint16_t)(x >> 16)) * attn_bf16_to_f32((uint16_t)(y >> 16));
                }
            ok &= c[i * LD + j] == want;
        }
    check(ok, name, "tile %d x %d (pairs in blocks of %d) wrong or spilled", mr, nr, kp);
}

/* The bf16 sets this process can run: the emulation always; AVX512_BF16
 * natively where the CPU has it (test_fast_simde runs it through SIMDe,
 * test_amx the AMX one through the tile emulator). */
static const attn_bf16_kernels *bf16_set(const char *isa) {
    if (strcmp(isa, "emulated") == 0) return &attn_bf16_emulated;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (strcmp(isa, "avx512_bf16") == 0 && __builtin_cpu_supports("avx512bf16") && attn_ukernels_by_name("avx512"))
        return &attn_bf16_avx512;
#endif
    return NULL;
}

static void test_bf16_gemm(void) {
    static const shape bshapes[] = {
        {1, 1, 1, ATTN_BF16, ATTN_F32, false, false, false, false},
        {7, 13, 5, ATTN_BF16, ATTN_F32, false, true, false, false},      /* odd K: a zero half pair */
        {13, 29, 300, ATTN_F32, ATTN_F32, true, true, false, true},     /* f32 weights rounded; K past kc */
        {200, 61, 37, ATTN_BF16, ATTN_F32, false, false, true, true},   /* M past mc */
        {9, 1100, 17, ATTN_BF16, ATTN_F32, true, true, true, true},     /* N past nc */
        {33, 2, 0, ATTN_BF16, ATTN_F32, false, true, true, false},      /* no depth: bias + c */
        {5, 40, 700, ATTN_F16, ATTN_F32, false, false, false, true},    /* f16 rounded to bf16 */
        {1, 500, 96, ATTN_BF16, ATTN_F32, false, true, false, true},    /* one row (decode) */
        {97, 131, 1025, ATTN_BF16, ATTN_F32, false, true, false, true}, /* no edge a multiple of a tile */
    };
    enum { NS = sizeof bshapes / sizeof bshapes[0] };
    const attn_bf16_kernels *em = bf16_set("emulated"), *hw = bf16_set("avx512_bf16");
    test_bf16_tile(em, "emulated");
    test_bf16_tile(hw, "avx512_bf16");
    int differ = 0;
    for (size_t s = 0; s < NS; s++) {
        rng = test_seed(1000 + (uint64_t)s); /* the same operands for both sets */
        float *ce = test_bf16_shape(&bshapes[s], em, "emulated");
        rng = test_seed(1000 + (uint64_t)s);
        float *ch = test_bf16_shape(&bshapes[s], hw, "avx512_bf16");
        /* VDPBF16PS adds pair by pair as the emulation does: bitwise equal. */
        if (ce && ch) differ += memcmp(ce, ch, sizeof(float) * (size_t)(bshapes[s].M * bshapes[s].N)) != 0;
        free(ce), free(ch);
    }
    if (!hw) skip("gemm_bf16_avx512_bf16_bitwise_emulation", "this CPU lacks AVX512_BF16");
    else check(!differ, "gemm_bf16_avx512_bf16_bitwise_emulation", "%d of %d products differ", differ, (int)NS);
}

int main(void) {
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    static const shape shapes[] = {
        {1, 1, 1, ATTN_F64, ATTN_F64, false, false, false, false},
        {7, 13, 5, ATTN_F64, ATTN_F64, false, true, false, false},
        {13, 29, 300, ATTN_F32, ATTN_F32, true, true, false, false},   /* K past kc */
        {200, 61, 37, ATTN_F32, ATTN_F64, false, false, true, false},  /* M past mc */
        {9, 1100, 17, ATTN_F64, ATTN_F32, true, true, true, false},    /* N past nc */
        {33, 2, 0, ATTN_F64, ATTN_F64, false, true, true, false},      /* no depth: bias + c */
        {5, 40, 700, ATTN_F16, ATTN_F32, false, false, false, false},
        {50, 30, 64, ATTN_BF16, ATTN_F64, true, true, false, false},
        {2, 30, 70000, ATTN_F32, ATTN_F64, false, false, false, false}, /* deep: b's block shrinks */
        {1, 500, 96, ATTN_F32, ATTN_F32, false, true, false, false},    /* one row: threads split b */
        {70, 45, 1024, ATTN_F32, ATTN_F64, false, true, false, true}, /* b transposed, a 4 KiB row stride */
        {30, 50, 300, ATTN_F64, ATTN_F64, true, false, true, true},
    };
    static const char *const isas[] = {"c", "avx2", "avx512"};
    for (size_t i = 0; i < 3; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) test_shape(&shapes[s], isas[i]);
    static const shape sshapes[] = {
        {1, 1, 1, ATTN_F32, ATTN_F32, false, false, false, false},
        {7, 13, 5, ATTN_F32, ATTN_F32, false, true, false, false},
        {13, 29, 300, ATTN_F32, ATTN_F32, true, true, false, false},   /* K past kc */
        {200, 61, 37, ATTN_F32, ATTN_F32, false, false, true, false},  /* M past mc */
        {9, 1100, 17, ATTN_F32, ATTN_F32, true, true, true, false},    /* N past nc */
        {33, 2, 0, ATTN_F32, ATTN_F32, false, true, true, false},      /* no depth: bias + c */
        {5, 40, 700, ATTN_F16, ATTN_F32, false, false, false, false},  /* 16-bit weights widened as packed */
        {50, 30, 64, ATTN_BF16, ATTN_F32, true, true, false, false},
        {2, 30, 70000, ATTN_F32, ATTN_F32, false, false, false, false}, /* deep: b's block shrinks */
        {1, 500, 96, ATTN_F32, ATTN_F32, false, true, false, false},    /* one row (decode): threads split b */
        {97, 131, 257, ATTN_F32, ATTN_F32, false, true, false, false},  /* no edge a multiple of a tile */
        {70, 45, 1024, ATTN_F32, ATTN_F32, false, true, false, true}, /* b transposed (a weight), 4 KiB rows */
        {13, 40, 300, ATTN_BF16, ATTN_F32, true, false, true, true},
    };
    for (size_t i = 0; i < 3; i++) {
        test_sgemm_tile(isas[i]);
        for (size_t s = 0; s < sizeof sshapes / sizeof sshapes[0]; s++) test_sgemm_shape(&sshapes[s], isas[i]);
    }
    test_bf16_gemm();
    attn_shutdown();
    return n_failed ? 1 : 0;
}
