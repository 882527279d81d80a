/* ukernel.h -- the per-ISA microkernels behind one dispatch table (BLIS
 * style). The algorithm (tiling, online softmax, masks, threads) is plain C
 * in flash.c; only these small loops differ per instruction set. */
#ifndef ATTN_UKERNEL_H
#define ATTN_UKERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "attn.h" /* attn_dtype */

/* The register tile is each kernel set's own, registered with its kernels
 * as BLIS registers MR and NR: mr query rows by vl * nv columns (vectors of
 * vl floats, nv of them). No set has more than ATTN_MR_MAX rows (an AMX
 * tile's 16), so callers may size per-row arrays by it. */
#define ATTN_MR_MAX 16
#define ATTN_VL_MAX 16
/* The most query rows one decode microkernel call (dot_rows, axpy_rows)
 * takes: every row of a decode work item (ATTN_DECODE_MAX_L). An ISA whose
 * registers hold fewer accumulators runs them in blocks inside the call. */
#define ATTN_DECODE_MAX_ROWS 8

/* The blocked formats dot_rows_q and axpy_rows_q read in place (each ISA's
 * V_QUANT, decode_rows.h): decode hands them no other, so a blocked format
 * quant.c learns is widened (widen_quant) until it is named here and its
 * ISAs' V_QUANT read it. */
static inline bool attn_rows_q_format(attn_dtype d) { return d == ATTN_Q8 || d == ATTN_Q4 || d == ATTN_Q4_1; }

typedef struct attn_ukernels {
    const char *name; /* "avx512", "avx2" or "c" */
    int vl;           /* floats per vector: 16, 8, or 8 for the portable C kernels */
    int nv;           /* vectors per register tile: nr = vl * nv columns */
    int mr;           /* query rows per register tile (<= ATTN_MR_MAX): qk, pv and pvt
                         always compute mr rows, and callers pad to them */
    /* s (mr × nvec·vl, row stride lds) = q (mr × E, stride ldq) ·
     * kt (E × nvec·vl, stride ldk), for 1 <= nvec <= nv: the last strip of a
     * tile's keys often needs fewer than nv vectors (a causal diagonal, the
     * ends of a sliding window). All mr rows are computed (callers pad).
     * A kernel may still compute and store all nv vectors (the AVX-512 one
     * does), so callers give s and kt room for nr columns. A column's sum
     * goes in the same order whatever nvec. */
    void (*qk)(float *s, int64_t lds, const float *q, int64_t ldq, const float *kt, int64_t ldk,
               int64_t E, int nvec);

    /* o (mr × nvec*vl, stride ldo) += p (mr × keys, stride ldp) ·
     * v (keys × nvec*vl, stride ldv), for 1 <= nvec <= nv. */
    void (*pv)(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v, int64_t ldv,
               int64_t keys, int nvec);
    /* pv with p transposed: o (mr × nvec*vl) += pᵀ · v, p stored keys ×
     * mr (stride ldp): the backward's dV += Pᵀ dout and dK += dSᵀ Q
     * without transposing P and dS. */
    void (*pvt)(float *o, int64_t ldo, const float *p, int64_t ldp, const float *v, int64_t ldv,
                int64_t keys, int nvec);

    /* x[i] = e^(x[i] - m) for i < n, computed as 2^((x[i] - m)·log2 e);
     * returns their sum, added in a fixed order. n is a multiple of vl.
     * x[i] = -inf gives 0, and so does a difference that overflows to -inf
     * or lies more than 64 · ln 2 (about 44) below 0: every weight is exactly
     * 0 or a normal number (kernels/exp2.h says why).
     * Scores stay in natural units until this subtraction: folding log2 e
     * into the queries or the mask would overflow f32 for finite masks near
     * -FLT_MAX (Hugging Face pads with torch.finfo(torch.float32).min). */
    float (*exp_sum)(float *x, int64_t n, float m);

    /* The softmax's gradient on one row of scores, n a multiple of vl, in
     * one pass: p[i] = e^(p[i] - lse) as exp_sum computes it (without the
     * sum), then ds[i] = p[i] · (ds[i] - D), ds holding dP on entry. */
    void (*softmax_grad)(float *p, float *ds, int64_t n, float lse, float D);

    /* y[i] = x[i] · a, and y[i] = x[i] / d (one correctly rounded division
     * each), for i < n (any n; y may be x): the online softmax's rescaling
     * of an output row, and its last step, out = O / l. */
    void (*scale)(float *y, const float *x, int64_t n, float a);
    void (*divide)(float *y, const float *x, int64_t n, float d);

    /* kt (E × 16, row stride ld) = the transpose of nk <= 16 key rows of E
     * contiguous floats at k (row stride rs); columns nk..15 are zero. */
    void (*transpose16)(float *kt, int64_t ld, const float *k, int64_t rs, int nk, int64_t E);

    /* max |x[i]| for i < n (any n), or -1 if some x[i] is NaN or ±inf. */
    float (*absmax)(const float *x, int64_t n);

    /* Masks on one row of scores, contiguous mask rows, any n:
     * bool: s[i] = -inf where m[i] == 0. float: s[i] += m[i], and returns
     * false if some m[i] is NaN or +inf (-inf is allowed). */
    void (*mask_bool)(float *s, const unsigned char *m, int64_t n);
    bool (*mask_add)(float *s, const float *m, int64_t n);

    /* The largest x[i] for i < n (a multiple of vl); -inf if n is 0. */
    float (*max)(const float *x, int64_t n);

    /* The decode path, for a few query rows against rows of keys read where
     * they lie (contiguous rows, row stride ld):
     * s[i * lds + j] = q[i * E ..] · k[j * ld ..] for i < nq <= ATTN_DECODE_MAX_ROWS, j < n.
     * Returns max |k| over the rows read, or -1 if one is not finite. */
    float (*dot_rows)(float *s, int64_t lds, const float *q, int nq, const float *k, int64_t ld,
                      int64_t n, int64_t E);
    /* acc[i * Ev ..] += sum over j < n of p[i * ldp + j] · v[j * ld ..], i < nq <= ATTN_DECODE_MAX_ROWS. */
    void (*axpy_rows)(float *acc, const float *p, int64_t ldp, int nq, const float *v, int64_t ld,
                      int64_t n, int64_t Ev);
    /* The same with keys or values of 16-bit floats (IEEE half when f16,
     * else bfloat16), widened as they are read; ld in elements. NULL for
     * the portable kernels: decode widens a group of rows with widen16. */
    float (*dot_rows16)(float *s, int64_t lds, const float *q, int nq, const uint16_t *k, int64_t ld,
                        int64_t n, int64_t E, bool f16);
    void (*axpy_rows16)(float *acc, const float *p, int64_t ldp, int nq, const uint16_t *v, int64_t ld,
                        int64_t n, int64_t Ev, bool f16);
    /* The same with quantized rows (format ATTN_Q8, ATTN_Q4 or ATTN_Q4_1;
     * ld in bytes), widened in registers: bitwise dot_rows / axpy_rows on
     * the rows widen_quant widens (another format: nothing read, and
     * dot_rows_q returns -1). NULL for the portable kernels: decode widens
     * a group of rows with widen_quant. */
    float (*dot_rows_q)(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n,
                        int64_t E, attn_dtype format);
    void (*axpy_rows_q)(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                        int64_t Ev, attn_dtype format);
    /* The same with fp8 rows (format ATTN_E4M3 or ATTN_E5M2, any E; ld in
     * bytes), read where they lie as IEEE halves, one byte a value
     * (x86/decode_rows.h says how). e5m2 reads as its value; e4m3 as 2^-8
     * times its value, so for e4m3 the caller gives q (p) times 2^8, exact
     * where it does not overflow: then each is bitwise dot_rows / axpy_rows
     * on the rows widened by widen_quant, with q (p) as they were.
     * dot_rows_fp8 returns max |k| in the keys' own units, or -1 if a key is
     * NaN or infinite (an e4m3 NaN code included); axpy_rows_fp8 reads NaN
     * codes as NaN (another format: nothing read, and dot_rows_fp8 returns
     * -1). NULL for the portable kernels: decode widens a group of rows
     * with widen_quant. */
    float (*dot_rows_fp8)(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n,
                          int64_t E, attn_dtype format);
    void (*axpy_rows_fp8)(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                          int64_t Ev, attn_dtype format);
    /* dot_rows and axpy_rows (dot_rows16, axpy_rows16) with row j of the keys
     * or values at k[j] (v[j]) wherever it lies: rows of dtype f32, f16 or
     * bf16 in several pages of a paged cache read in one call, the
     * accumulators kept in registers across the pages. Bitwise the same as
     * calls over the rows page by page. The list holds n + ahead row
     * pointers: while row j is computed, row k[j + ahead] (v[j + ahead]) is
     * asked for, a cache line at a time (prefetched, never read: rows past
     * the ones to compute may be any rows of the cache), so that rows in
     * pages the hardware prefetcher does not follow arrive in time; ahead 0:
     * none. NULL for the portable kernels: decode calls dot_rows and
     * axpy_rows a page at a time. */
    float (*dot_rows_list)(float *s, int64_t lds, const float *q, int nq, const void *const *k, int64_t n,
                           int64_t ahead, int64_t E, attn_dtype dtype);
    void (*axpy_rows_list)(float *acc, const float *p, int64_t ldp, int nq, const void *const *v, int64_t n,
                           int64_t ahead, int64_t Ev, attn_dtype dtype);

    /* dot_rows and axpy_rows over the KV heads of packed (tokens, Hk, E)
     * f32 rows, read side by side: query row i (p's row i, acc's row i)
     * takes head i / per, whose row j is k[j * ld + (i / per) * hs ..]
     * (v[..]); per (a head's rows) 1, 2 or 4, nq <= ATTN_DECODE_MAX_ROWS a
     * multiple of it. kmax[h] = max |k| over head h's rows, or -1 if one is
     * not finite. Bitwise dot_rows and axpy_rows called head by head. NULL
     * for the portable kernels: decode calls those head by head. */
    void (*dot_rows_heads)(float *s, int64_t lds, const float *q, int nq, int per, const float *k, int64_t ld,
                           int64_t hs, int64_t n, int64_t E, float *kmax);
    void (*axpy_rows_heads)(float *acc, const float *p, int64_t ldp, int nq, int per, const float *v, int64_t ld,
                            int64_t hs, int64_t n, int64_t Ev);

    /* dst[i] = src[i] for i < n (any n), src IEEE half (f16) or bfloat16:
     * widening is exact, so every ISA gives the same floats. */
    void (*widen16)(float *dst, const uint16_t *src, int64_t n, bool f16);
    /* dst[i] = value i of a quantized row of n values (attn.h, "Quantized
     * storage"; format q8, q4, e4m3 or e5m2, n valid for it): exact, so
     * every ISA gives the floats of base/quant.c's attn_dequant_row. */
    void (*widen_quant)(float *dst, const void *src, int64_t n, attn_dtype format);

    /* s[i] = cap · tanh(s[i] / cap) for i < n (any n), cap > 0: logit
     * soft-capping, as sign(s) · cap · (1 - t) / (1 + t) with t =
     * 2^(-2 |s| / cap · log2 e) from a vector exp2 (C, AVX-512), or as
     * (cap - cap · t) / (1 + t) with t = 2^(-2 s / cap · log2 e) for either
     * sign (AVX2), where |s| / cap >= ATTN_SOFTCAP_SMALL; below it, as
     * s · ATTN_SOFTCAP_SERIES (tanh's series), since 1 - t would lose
     * about 2^-24 · cap to cancellation there: every score 0 once the cap
     * passes 2^25 |s|. The error is within 3 · 2^-24 · min(cap, 8 |s|).
     * Returns the largest of the capped values as max does (-inf for n = 0,
     * NaN skipped), so the softmax need not read the row again for it. */
    float (*softcap)(float *s, int64_t n, float cap);

    /* s[i] -= slope · |d0 + i| for i < n (any n), |d0| and |d0 + n| below
     * 2^31: ALiBi's bias on a row of scores, the distance converted to f32
     * (exactly below 2^24) and multiplied by the slope rounded to f32: within
     * 2 · 2^-24 of the bias, relative. */
    void (*alibi)(float *s, int64_t n, float slope, int64_t d0);

    /* y[i] = 2^x[i] for i < n (any n), 0 for x[i] < -64: the vector exp2
     * (kernels/exp2.h), exposed for tests. */
    void (*exp2)(float *y, const float *x, int64_t n);

    /* The layer's matrix products (kernels/gemm.c), in double:
     * c (dgemm_mr × dgemm_nr, row stride ldc) += a · b over k, where a is
     * packed k × dgemm_mr (a[p * mr + i] = A(i, p)) and b packed k ×
     * dgemm_nr (b[p * nr + j] = B(p, j)). Each c(i, j) gets Σ_p in order p =
     * 0, 1, ..., k-1, one rounding per step (fused where the ISA has FMA),
     * summed from zero and then added to c. */
    void (*dgemm)(double *c, int64_t ldc, const double *a, const double *b, int64_t k);
    int dgemm_mr, dgemm_nr;
    /* The same in f32 for f32 layers (attn_sgemm), with its own tile:
     * c (sgemm_mr × sgemm_nr, row stride ldc) += a · b over k, a packed k ×
     * sgemm_mr, b packed k × sgemm_nr, each sum from zero in order p = 0..k-1
     * in f32, then added to c. */
    void (*sgemm)(float *c, int64_t ldc, const float *a, const float *b, int64_t k);
    int sgemm_mr, sgemm_nr;
} attn_ukernels;

/* The x86 widening of quantized rows (x86/widen_quant_*.c, each compiled
 * for its ISA), registered in their ISA's table. */
void attn_widen_quant_avx2(float *dst, const void *src, int64_t n, attn_dtype format);
void attn_widen_quant_avx512(float *dst, const void *src, int64_t n, attn_dtype format);

#define ATTN_DGEMM_MR_MAX 8
#define ATTN_DGEMM_NR_MAX 24

/* How much work a block holds (cores.c): derived once per process for
 * each kernel set from the caches CPUID describes, and chosen with it. */
typedef struct attn_blocks {
    const char *from; /* "cpuid": this CPU's caches through the model; "generic": CPUID
                         described none, and the model ran on cores.c's generic caches */
    /* flash.c: query rows per work item (a multiple of the kernels' mr) and keys per
     * block (the model's: see cores.c); both shrink for very wide heads. */
    int br, bc;
    /* flash_backward.c: query rows per block (rounded up to a multiple
     * of 16 and of mr) and keys per block (rounded up to vl * nv). */
    int bwd_br, bwd_bc;
    /* decode.c: keys per work item. Results depend on it (the chunks'
     * partials are merged in order), never on the thread count. */
    int decode_chunk;
    /* gemm.c (the layer's products in double): rows of a packed at a time
     * (rounded to dgemm_mr), depth per packed block, and columns of b
     * packed at a time (rounded to dgemm_nr, shrunk for a deep b). */
    int gemm_mc, gemm_kc, gemm_nc;
} attn_blocks;

/* One cache as CPUID describes it: bytes, ways, line bytes, sets. */
typedef struct attn_cache {
    int64_t size;
    int ways, line, sets;
} attn_cache;
/* The caches the model reads: the first level's data cache and the second level. */
typedef struct attn_caches {
    attn_cache l1d, l2;
} attn_caches;

/* The caches from n subleaves of CPUID leaf 4 (Intel) or 0x8000001D (AMD),
 * which share one layout: regs[i] = {eax, ebx, ecx, edx} of subleaf i, the
 * list ending at a subleaf of type 0. False when L1d or L2 is missing. */
bool attn_caches_parse(const unsigned (*regs)[4], int n, attn_caches *out);
/* The caches of this CPU, read from CPUID; false where it describes none. */
bool attn_caches_detect(attn_caches *out);
/* The blocks for kernel set uk on these caches (NULL: the generic ones),
 * by the model in cores.c; from is stored in b->from. */
void attn_blocks_model(attn_blocks *b, const attn_caches *caches, const attn_ukernels *uk, const char *from);

/* The core this process runs on, from CPUID: "zen3", "zen4", "zen5",
 * "intel-avx512" or "generic". A name for reports (attn_get_tuning): no
 * block size depends on it. */
const char *attn_detect_core(void);
/* The blocks of the kernel set named isa on this CPU's caches (core is not
 * read: the caches decide); the active set's for a name not registered. */
const attn_blocks *attn_blocks_for(const char *core, const char *isa);
/* The blocks for attn_ukernels_active() on this CPU's caches. */
const attn_blocks *attn_blocks_active(void);

/* The kernels for this process: ATTN_ISA (avx512, avx2 or c) when set and
 * supported by this CPU, else the best the CPU supports. Chosen once. */
const attn_ukernels *attn_ukernels_active(void);

/* The kernels of one ISA by name, or NULL when this CPU (or build) lacks it. */
const attn_ukernels *attn_ukernels_by_name(const char *name);
/* The i-th f32 kernel set of this build (F32_SETS in dispatch.c), best
 * first, whether or not this CPU runs it; NULL past the last. The tests
 * take the sets they force through ATTN_ISA from here (test_fast --sets),
 * so that a set registered there is tested without another list. */
const attn_ukernels *attn_ukernels_registered(int i);

extern const attn_ukernels attn_ukernels_c;
#if defined(ATTN_HAVE_X86_KERNELS)
extern const attn_ukernels attn_ukernels_avx2;
extern const attn_ukernels attn_ukernels_avx512;
/* The double GEMM microkernels (dgemm_avx2.c, dgemm_avx512.c). */
void attn_dgemm_avx2_6x8(double *c, int64_t ldc, const double *a, const double *b, int64_t k);
void attn_dgemm_avx512_8x24(double *c, int64_t ldc, const double *a, const double *b, int64_t k);
/* The f32 GEMM microkernels (sgemm_avx2.c, sgemm_avx512.c). */
void attn_sgemm_avx2_6x16(float *c, int64_t ldc, const float *a, const float *b, int64_t k);
void attn_sgemm_avx512_12x32(float *c, int64_t ldc, const float *a, const float *b, int64_t k);
#endif

/* The portable 16-key transpose (ukernel_c.c), shared by kernels without a
 * register transpose of their own. */
void attn_transpose16_portable(float *kt, int64_t ld, const float *k, int64_t rs, int nk, int64_t E);

/* 2^x for one float, the algorithm of the vector code (kernels/exp2.h): n =
 * round(x), f = x - n exactly, 2^f by a degree-6 polynomial (Cephes' exp2f
 * coefficients, about 1 ulp), then an exact scaling by 2^n (one rounding).
 * x below -64 (-inf included) gives exactly 0, so that no result is ever
 * subnormal; +inf gives inf, NaN stays NaN. */
float attn_exp2f(float x);

#define ATTN_LOG2E 1.44269504088896341f

/* Soft-capping of a score s small beside the cap, a = |s| / cap below
 * ATTN_SOFTCAP_SMALL: cap · tanh(a) = |s| · g(w), w = a², with g(w) = 1 -
 * w/3 + 2w²/15 - 17w³/315, the series of tanh(a) / a (its next term,
 * 62/2835 w⁴, is below 2^-29 there), by Horner's rule with MADD(x, y, z) =
 * x · y + z and K(c) a constant. Kernels square max(a, 2^-30), where g is 1
 * in f32, so that w is never subnormal. */
#define ATTN_SOFTCAP_SMALL 0.125f
#define ATTN_SOFTCAP_SERIES(MADD, K, w)                                                         \
    MADD(MADD(MADD(K(-17.0f / 315.0f), w, K(2.0f / 15.0f)), w, K(-1.0f / 3.0f)), w, K(1.0f))

/* The larger of two absmax results, where -1 (a value not finite) wins. */
static inline float attn_absmax_join(float a, float b) { return a < 0 || b < 0 ? -1 : a > b ? a : b; }

#endif /* ATTN_UKERNEL_H */
