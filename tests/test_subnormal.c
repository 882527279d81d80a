/* test_subnormal.c -- no subnormal number anywhere in the kernels'
 * arithmetic, for ordinary inputs.
 *
 * On Intel cores an operation that reads or produces a subnormal float takes
 * a microcode assist of about 150 cycles; a bool mask or an ALiBi bias that
 * left weights like e^-100 in a row ran the forward 3 to 4 times slower.
 * Results do not change when subnormals are flushed (FTZ/DAZ), so comparing
 * outputs cannot see this, and AMD cores hide the cost, so timings cannot
 * either. MXCSR's sticky flags can: DE (an operand was subnormal) and UE (a
 * result was tiny and inexact: rounded to a subnormal, or to 0). Each check
 * clears them, makes ONE call on the calling thread (the context's
 * num_threads = 1: the pool runs a one-thread call inline, and the flags are
 * per thread), and asserts DE and UE are still clear; then the same call
 * again in verbose mode, to check which kernel ran and that nothing fell
 * back to the exact kernel (which would test another kernel).
 *
 * Every kernel (flash, decode, the fused backward, the bf16 compute mode's
 * forward and backward, the exact f64 kernels for f32 and f64 calls), with
 * the masks, fills, causal alignments and score variants of ordinary use;
 * a KV cache of each stored format (f16, bf16, q8, q4, q4_1, e4m3, e5m2,
 * keys per channel) and a paged pool of most of them, decode and flash
 * reading them in place; and each ISA's microkernels directly (exp_sum,
 * softmax_grad, exp2, softcap). Run it with ATTN_ISA=avx512|avx2|c to run
 * each ISA's whole path. Then results below FLT_MIN (from values or dout
 * that cancel to a subnormal): each kernel writes them as 0 or keeps them
 * exactly as attn.h says it does. Prints "ok NAME", "FAIL NAME: why" or "skip NAME:
 * why"; exits 1 if any failed. */
#include "check.h"
#include "tensors.h"
#include "../src/kernels/ukernel.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
enum { FLAG_DE = 0x02, FLAG_UE = 0x10, FLAGS_ALL = 0x3f }; /* MXCSR's sticky bits */
static void flags_clear(void) { _mm_setcsr(_mm_getcsr() & ~(unsigned)FLAGS_ALL); }
static unsigned flags_read(void) { return _mm_getcsr() & (FLAG_DE | FLAG_UE); }
#else
#include <fenv.h>
/* Elsewhere only underflow has a portable flag. */
enum { FLAG_DE = 0, FLAG_UE = 1 };
static void flags_clear(void) { feclearexcept(FE_ALL_EXCEPT); }
static unsigned flags_read(void) { return fetestexcept(FE_UNDERFLOW) ? FLAG_UE : 0; }
#endif

/* The flags raised, in words. */
static const char *flag_names(unsigned f) {
    return (f & FLAG_DE) && (f & FLAG_UE) ? "DE (denormal operand) and UE (underflow)"
           : f & FLAG_DE                  ? "DE (denormal operand)"
           : f & FLAG_UE                  ? "UE (underflow)"
                                          : "none";
}

enum mask_kind { MASK_NONE, MASK_BOOL, MASK_NEG_INF, MASK_FILL };

/* One way of calling attention, as ordinary use does. */
typedef struct variant {
    const char *name;
    enum mask_kind mask;
    float fill; /* MASK_FILL: the value at masked places (Hugging Face pads with -FLT_MAX) */
    attn_causal causal;
    int64_t window;
    double softcap, dropout;
    bool alibi, sinks;
    double sink; /* head h's sink logit is sink + h: -95 puts the first rescaling near e^-98 */
    attn_dtype kv; /* k and v: f32, f16 or bf16 */
    bool bf16;     /* the bf16 compute mode */
} variant;

static const variant VARIANTS[] = {
    {"plain", MASK_NONE, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"bool_mask", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"float_mask_minus_inf", MASK_NEG_INF, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"float_mask_fill_1e4", MASK_FILL, -1e4f, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"float_mask_fill_1e9", MASK_FILL, -1e9f, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"float_mask_fill_1e30", MASK_FILL, -1e30f, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"float_mask_fill_flt_max", MASK_FILL, -FLT_MAX, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"causal_top_left", MASK_NONE, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"causal_bottom_right", MASK_NONE, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, false, false, 0, ATTN_F32, false},
    {"causal_window", MASK_NONE, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 64, 0, 0, false, false, 0, ATTN_F32, false},
    {"alibi", MASK_NONE, 0, ATTN_CAUSAL_NONE, 0, 0, 0, true, false, 0, ATTN_F32, false},
    {"alibi_causal_bool_mask", MASK_BOOL, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, true, false, 0, ATTN_F32, false},
    {"softcap", MASK_NONE, 0, ATTN_CAUSAL_NONE, 0, 0.05, 0, false, false, 0, ATTN_F32, false},
    {"softcap_bool_mask", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0.05, 0, false, false, 0, ATTN_F32, false},
    {"dropout", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0, 0.25, false, false, 0, ATTN_F32, false},
    {"sinks_above", MASK_NONE, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, true, 40, ATTN_F32, false},
    {"sinks_below", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, true, -95, ATTN_F32, false},
    {"kv_f16_bool_mask", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F16, false},
    {"kv_bf16_alibi", MASK_NONE, 0, ATTN_CAUSAL_NONE, 0, 0, 0, true, false, 0, ATTN_BF16, false},
    {"bf16_compute_bool_mask", MASK_BOOL, 0, ATTN_CAUSAL_NONE, 0, 0, 0, false, false, 0, ATTN_F32, true},
    {"bf16_compute_alibi", MASK_NONE, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, true, false, 0, ATTN_F32, true},
};

/* The shapes: Hq query heads sharing Hk KV heads; L rows against S keys.
 * ALiBi's steepest slope (1/2) over hundreds of keys gives weights e^-100
 * and far less, and a cap of 0.05 on scores of about 1 gives t = e^(-2|s| /
 * cap) far below f32's range: the values that would be subnormal unless the
 * kernels cut them to 0. */
enum { HQ = 4, HK = 2, E = 32, EV = 32 };
static const double SLOPES[HQ] = {0.5, 0.25, 0.125, 0.0625};

/* A call's inputs: q, k, v (k and v in the variant's dtype, values from the
 * same normal numbers whatever it is), the mask, slopes and sinks, and the
 * forward's out and lse (for the backward). dtype: q's. */
typedef struct call {
    attn_tensor q, k, v, mask, slopes, sinks, out, lse, dout, g[4];
    attn_sdpa_options o;
    attn_context ctx;
    attn_dtype dtype;
    int64_t L, S;
} call;

/* t's values converted to dtype in a new tensor (t freed). */
static attn_tensor converted(attn_tensor t, attn_dtype dtype) {
    if (t.dtype == dtype) return t;
    attn_tensor u;
    attn_tensor_init(&u, NULL, dtype, t.rank, t.shape, NULL, NULL);
    u.data = calloc((size_t)attn_tensor_numel(&t) + 1, attn_dtype_size(dtype));
    attn_tensor_convert(&u, &t, NULL);
    free(t.data);
    return u;
}

static void call_init(call *c, const variant *va, attn_dtype dtype, int64_t L, int64_t S) {
    memset(c, 0, sizeof *c);
    c->dtype = dtype, c->L = L, c->S = S;
    int64_t sq[4] = {1, HQ, L, E}, sk[4] = {1, HK, S, E}, sv[4] = {1, HK, S, EV}, so[4] = {1, HQ, L, EV};
    int64_t sm[3] = {HQ, L, S}, sh[1] = {HQ};
    c->q = make(dtype, 4, sq);
    c->k = converted(make(dtype, 4, sk), dtype == ATTN_F32 ? va->kv : dtype);
    c->v = converted(make(dtype, 4, sv), dtype == ATTN_F32 ? va->kv : dtype);
    c->out = make(dtype, 4, so);
    c->lse = make(dtype, 3, so);
    c->dout = make(dtype, 4, so);
    c->o = attn_sdpa_options_default();
    c->ctx = attn_context_default();
    c->ctx.num_threads = 1; /* the call runs on this thread, whose flags are read */
    c->o.context = &c->ctx;
    c->o.causal = va->causal;
    c->o.window = va->window;
    c->o.softcap = va->softcap;
    c->o.dropout_p = va->dropout;
    c->o.dropout_seed = 7;
    c->o.compute = va->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    if (va->mask != MASK_NONE) {
        /* A quarter of the keys masked at random, the last eighth of them
         * for every row (a padded batch's keys), and every key for each
         * head's last row (a padded query). */
        c->mask = make(va->mask == MASK_BOOL ? ATTN_BOOL : dtype, 3, sm);
        for (int64_t i = 0; i < HQ * L * S; i++) {
            bool keep = (rng_next() & 3) != 0 && i % S < S - S / 8 && i / S % L != L - 1;
            if (va->mask == MASK_BOOL) ((unsigned char *)c->mask.data)[i] = keep;
            else {
                double x = keep ? rng_normal() : va->mask == MASK_NEG_INF ? -INFINITY : va->fill;
                if (dtype == ATTN_F32) ((float *)c->mask.data)[i] = (float)x;
                else ((double *)c->mask.data)[i] = x;
            }
        }
        c->o.mask = &c->mask;
    }
    if (va->alibi) {
        attn_tensor_init(&c->slopes, (void *)SLOPES, ATTN_F64, 1, sh, NULL, NULL);
        c->o.alibi_slopes = &c->slopes;
    }
    if (va->sinks) {
        c->sinks = make(ATTN_F64, 1, sh);
        for (int h = 0; h < HQ; h++) ((double *)c->sinks.data)[h] = va->sink + h;
        c->o.sinks = &c->sinks;
    }
    const attn_tensor *like[4] = {&c->q, &c->k, &c->v, &c->mask};
    for (int t = 0; t < 4; t++) /* gradients in q's dtype */
        if (like[t]->data) c->g[t] = make(dtype, like[t]->rank, like[t]->shape);
}

static void call_free(call *c) {
    attn_tensor *all[] = {&c->q, &c->k, &c->v, &c->mask, &c->sinks, &c->out, &c->lse, &c->dout,
                          &c->g[0], &c->g[1], &c->g[2], &c->g[3]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* What one check calls. */
enum what { FORWARD, FORWARD_WEIGHTS, BACKWARD, BACKWARD_DMASK };

static attn_status run(call *c, enum what w, attn_tensor *weights, attn_error *err) {
    if (w == FORWARD || w == FORWARD_WEIGHTS)
        return attn_sdpa(&c->out, &c->lse, w == FORWARD_WEIGHTS ? weights : NULL, &c->q, &c->k, &c->v, &c->o, err);
    return attn_sdpa_backward(&c->g[0], &c->g[1], &c->g[2], w == BACKWARD_DMASK ? &c->g[3] : NULL, &c->dout, &c->q,
                              &c->k, &c->v, &c->out, &c->lse, &c->o, err);
}

/* The verdict on one call made twice (st: with the flags cleared; st2: in
 * verbose mode, which named the kernel that ran and any fallback): both
 * succeeded, `kernel` ran with no fallback, and no flag was raised. */
static void verdict(const char *name, const char *kernel, attn_status st, attn_status st2, const attn_error *err,
                    unsigned flags, const char *ran, const char *fallback) {
    bool fell_back = fallback[0] && strncmp(fallback, "0/", 2) != 0;
    if (st || st2) check(0, name, "status %d: %s", (int)(st ? st : st2), err->message);
    else if (strcmp(ran, kernel) != 0 || fell_back)
        check(0, name, "kernel %s (fallback %s), not %s: another kernel was tested", ran, fallback, kernel);
    else check(flags == 0, name, "flags raised: %s", flag_names(flags));
}

/* One check: the call once with the flags cleared, then again in verbose
 * mode for the kernel's name, which must be `kernel`, with no fallback. */
static void check_call(const char *name, call *c, enum what w, const char *kernel) {
    attn_tensor weights = {0};
    if (w == FORWARD_WEIGHTS) {
        int64_t sw[4] = {1, HQ, c->L, c->S};
        weights = make(c->dtype, 4, sw);
    }
    attn_error err = {0};
    flags_clear();
    attn_status st = run(c, w, &weights, &err);
    unsigned flags = flags_read();
    char ran[32], fallback[32];
    verbose_begin();
    attn_status st2 = run(c, w, &weights, &err);
    verbose_end(ran, sizeof ran, fallback, sizeof fallback);
    verdict(name, kernel, st, st2, &err, flags, ran, fallback);
    free(weights.data);
}

static bool backward_takes(const variant *va) { (void)va; return true; } /* the bf16 mode's fused backward too */

/* Every variant through the f32 kernels: flash (L = 160 against S = 600:
 * several blocks and tiles, L < S so the causal alignments differ), decode
 * (L = 2 against S = 5000: three chunks), the fused backward, and the exact
 * kernel where an f32 call takes it (weights asked for; dmask). */
static void test_f32_kernels(void) {
    for (size_t t = 0; t < sizeof VARIANTS / sizeof *VARIANTS; t++) {
        const variant *va = &VARIANTS[t];
        char name[160];
        call c;
        call_init(&c, va, ATTN_F32, 160, 600);
        snprintf(name, sizeof name, "flash_%s_%s_no_subnormal", attn_isa(), va->name);
        check_call(name, &c, FORWARD, "flash");
        if (backward_takes(va)) {
            snprintf(name, sizeof name, "flash_backward_%s_%s_no_subnormal", attn_isa(), va->name);
            check_call(name, &c, BACKWARD, "flash_backward");
        }
        if (!va->bf16) {
            snprintf(name, sizeof name, "exact_f32_weights_%s_no_subnormal", va->name);
            check_call(name, &c, FORWARD_WEIGHTS, "exact");
        }
        if (c.o.mask && c.mask.dtype != ATTN_BOOL && backward_takes(va)) {
            attn_sdpa(&c.out, &c.lse, NULL, &c.q, &c.k, &c.v, &c.o, NULL);
            snprintf(name, sizeof name, "exact_backward_f32_dmask_%s_no_subnormal", va->name);
            check_call(name, &c, BACKWARD_DMASK, "exact");
        }
        call_free(&c);
        if (va->causal != ATTN_CAUSAL_NONE && va->mask == MASK_NONE) {
            /* More queries than keys: bottom-right's first rows see no key. */
            call_init(&c, va, ATTN_F32, 300, 100);
            snprintf(name, sizeof name, "flash_%s_%s_L_above_S_no_subnormal", attn_isa(), va->name);
            check_call(name, &c, FORWARD, "flash");
            if (backward_takes(va)) {
                snprintf(name, sizeof name, "flash_backward_%s_%s_L_above_S_no_subnormal", attn_isa(), va->name);
                check_call(name, &c, BACKWARD, "flash_backward");
            }
            call_free(&c);
        }
        if (va->bf16) continue; /* decode computes in f32 either way */
        call_init(&c, va, ATTN_F32, 2, 5000);
        snprintf(name, sizeof name, "decode_%s_%s_no_subnormal", attn_isa(), va->name);
        check_call(name, &c, FORWARD, "decode");
        call_free(&c);
    }
}

/* The KV caches: attn_kv_cache_attend over a cache of each stored format
 * (f16, the quantized ones, keys quantized per channel with the Hadamard
 * rotation off), decode (L = 2 against S = 4992) and flash (L = 160
 * against S = 608), under the variants that leave tiny weights (ALiBi, a
 * bool mask, soft-capping, a bottom-right causal limit). */
typedef struct cache_format {
    const char *name;
    attn_dtype dtype, key_dtype;
} cache_format;

static void cache_check(const char *name, const attn_tensor *q, const attn_kv_cache *cache, call *c, const char *kernel) {
    attn_error err = {0};
    flags_clear();
    attn_status st = attn_kv_cache_attend(&c->out, NULL, q, cache, &c->o, &err);
    unsigned flags = flags_read();
    char ran[32], fallback[32];
    verbose_begin();
    attn_status st2 = attn_kv_cache_attend(&c->out, NULL, q, cache, &c->o, &err);
    verbose_end(ran, sizeof ran, fallback, sizeof fallback);
    verdict(name, kernel, st, st2, &err, flags, ran, fallback);
}

static void test_caches(void) {
    static const cache_format FORMATS[] = {
        {"f16", ATTN_F16, 0},   {"bf16", ATTN_BF16, 0},  {"q8", ATTN_Q8, 0},   {"q4", ATTN_Q4, 0},
        {"q4_1", ATTN_Q4_1, 0}, {"e4m3", ATTN_E4M3, 0}, {"e5m2", ATTN_E5M2, 0}, {"q4c_keys_q8_values", ATTN_Q8, ATTN_Q4C},
    };
    static const int VARIANT_OF[] = {1, 8, 10, 11, 12, 19}; /* bool_mask, causal_bottom_right, alibi, alibi_causal_bool_mask, softcap, bf16_compute_bool_mask */
    static const int64_t SHAPES[2][2] = {{2, 4992}, {160, 608}};
    for (size_t f = 0; f < sizeof FORMATS / sizeof *FORMATS; f++)
        for (int sh = 0; sh < 2; sh++)
            for (size_t vi = 0; vi < sizeof VARIANT_OF / sizeof *VARIANT_OF; vi++) {
                const variant *va = &VARIANTS[VARIANT_OF[vi]];
                if (va->bf16 && sh == 0) continue; /* decode computes in f32 either way */
                int64_t L = SHAPES[sh][0], S = SHAPES[sh][1];
                char name[160];
                call c;
                call_init(&c, va, ATTN_F32, L, S);
                attn_kv_cache_desc d = attn_kv_cache_desc_default();
                d.heads = HK, d.capacity = S, d.key_dim = E, d.value_dim = EV;
                d.dtype = FORMATS[f].dtype, d.key_dtype = FORMATS[f].key_dtype;
                size_t bytes = 0;
                attn_kv_cache *cache = NULL;
                attn_error err = {0};
                void *mem = NULL;
                attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
                if (!st && !(mem = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
                if (!st) st = attn_kv_cache_init(&cache, mem, bytes, &d, &err);
                if (!st) st = attn_kv_cache_append(cache, &c.k, &c.v, &err);
                snprintf(name, sizeof name, "kv_cache_%s_%s_%s_%s_no_subnormal", FORMATS[f].name, sh ? "flash" : "decode",
                         attn_isa(), va->name);
                /* the mask's (Hq, L, S) as (1, Hq, L, S), the cache's batch first */
                attn_tensor q = c.q;
                if (st) check(0, name, "setup: status %d: %s", (int)st, err.message);
                else cache_check(name, &q, cache, &c, sh ? "flash" : "decode");
                free(mem);
                call_free(&c);
            }
}

/* The same formats in a paged pool (attn_kv_pages_attend: the paged
 * decode and flash kernels reading the pages in place), one sequence, its
 * mask passed as the sequence's. */
static void test_pages(void) {
    static const cache_format FORMATS[] = {
        {"f32", ATTN_F32, 0}, {"f16", ATTN_F16, 0}, {"q8", ATTN_Q8, 0}, {"q4", ATTN_Q4, 0},
        {"e4m3", ATTN_E4M3, 0}, {"q4c_keys_q8_values", ATTN_Q8, ATTN_Q4C},
    };
    static const int VARIANT_OF[] = {1, 8, 10, 11, 12}; /* bool_mask, causal_bottom_right, alibi, alibi_causal_bool_mask, softcap */
    static const int64_t SHAPES[2][2] = {{2, 4992}, {160, 608}};
    for (size_t f = 0; f < sizeof FORMATS / sizeof *FORMATS; f++)
        for (int sh = 0; sh < 2; sh++)
            for (size_t vi = 0; vi < sizeof VARIANT_OF / sizeof *VARIANT_OF; vi++) {
                const variant *va = &VARIANTS[VARIANT_OF[vi]];
                int64_t L = SHAPES[sh][0], S = SHAPES[sh][1];
                char name[160];
                call c;
                call_init(&c, va, ATTN_F32, L, S);
                attn_kv_pages_desc d = attn_kv_pages_desc_default();
                d.heads = HK, d.key_dim = E, d.value_dim = EV, d.dtype = FORMATS[f].dtype, d.key_dtype = FORMATS[f].key_dtype;
                d.page_size = 32, d.num_pages = (S + 31) / 32, d.max_sequences = 1;
                size_t bytes = 0;
                attn_kv_pages *pool = NULL;
                attn_error err = {0};
                void *mem = NULL;
                int64_t seq = 0, cu_k[2] = {0, S}, cu_q[2] = {0, L};
                /* (1, H, n, E) as the pool's packed (n, H, E), and q, out likewise */
                int64_t sk[3] = {S, HK, E}, kst[3] = {E, S * E, 1}, sq[3] = {L, HQ, E}, qst[3] = {E, L * E, 1};
                int64_t so[3] = {L, HQ, EV}, ost[3] = {EV, L * EV, 1};
                attn_tensor k, v, q, out;
                attn_tensor_init(&k, c.k.data, ATTN_F32, 3, sk, kst, NULL), attn_tensor_init(&v, c.v.data, ATTN_F32, 3, sk, kst, NULL);
                attn_tensor_init(&q, c.q.data, ATTN_F32, 3, sq, qst, NULL), attn_tensor_init(&out, c.out.data, ATTN_F32, 3, so, ost, NULL);
                attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
                if (!st && !(mem = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
                if (!st) st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
                if (!st) st = attn_kv_pages_create(pool, &seq, &err);
                if (!st) st = attn_kv_pages_append(pool, &seq, 1, &k, &v, cu_k, &err);
                const attn_tensor *masks[1] = {c.o.mask};
                c.o.mask = NULL;
                snprintf(name, sizeof name, "kv_pages_%s_%s_%s_%s_no_subnormal", FORMATS[f].name, sh ? "flash" : "decode",
                         attn_isa(), va->name);
                if (st) check(0, name, "setup: status %d: %s", (int)st, err.message);
                else {
                    const char *kernel = sh ? "flash" : "decode";
                    flags_clear();
                    st = attn_kv_pages_attend(&out, NULL, &q, cu_q, &seq, 1, pool, masks[0] ? masks : NULL, &c.o, &err);
                    unsigned flags = flags_read();
                    char ran[32], fallback[32];
                    verbose_begin();
                    attn_status st2 = attn_kv_pages_attend(&out, NULL, &q, cu_q, &seq, 1, pool, masks[0] ? masks : NULL, &c.o, &err);
                    verbose_end(ran, sizeof ran, fallback, sizeof fallback);
                    verdict(name, kernel, st, st2, &err, flags, ran, fallback);
                }
                c.o.mask = masks[0];
                free(mem);
                call_free(&c);
            }
}

/* The exact f64 kernels, forward and backward, on the same variants. */
static void test_f64_kernels(void) {
    for (size_t t = 0; t < sizeof VARIANTS / sizeof *VARIANTS; t++) {
        const variant *va = &VARIANTS[t];
        if (va->bf16 || va->kv != ATTN_F32) continue; /* f32 only */
        char name[160];
        call c;
        call_init(&c, va, ATTN_F64, 60, 300);
        snprintf(name, sizeof name, "exact_f64_%s_no_subnormal", va->name);
        check_call(name, &c, FORWARD, "exact");
        attn_sdpa(&c.out, &c.lse, NULL, &c.q, &c.k, &c.v, &c.o, NULL);
        snprintf(name, sizeof name, "exact_backward_f64_%s_no_subnormal", va->name);
        check_call(name, &c, BACKWARD, "exact");
        call_free(&c);
    }
}

/* Results below FLT_MIN: what attn.h says each kernel writes. All scores
 * 0 (q and k 0), so the weights are equal and exact; values (or dout) of
 * FLT_MIN and -FLT_MIN/2 then average, or sum, to a subnormal. Written as
 * 0: the decode and exact kernels' out, the exact kernel's weights, the
 * gradients the fused backward writes straight; kept: the flash kernel's
 * out and the gradients summed in f64 first (the exact backward's, dk and
 * dv under GQA, a broadcast input's). tiny(): one case, H query heads over
 * Hk KV heads, batch B over k and v of batch Bk, L rows against S keys. */
typedef struct tiny {
    attn_tensor q, k, v, out, lse, dout, dq, dk, dv, mask, dmask;
    attn_sdpa_options o;
    attn_context ctx;
} tiny;

static void tiny_init(tiny *t, int64_t B, int64_t Bk, int64_t H, int64_t Hk, int64_t L, int64_t S) {
    enum { D = 8 };
    memset(t, 0, sizeof *t);
    int64_t sq[4] = {B, H, L, D}, skv[4] = {Bk, Hk, S, D}, so[4] = {B, H, L, D}, sl[3] = {B, H, L}, sm[2] = {L, S};
    attn_tensor *rows[] = {&t->q, &t->out, &t->dout, &t->dq}, *keys[] = {&t->k, &t->v, &t->dk, &t->dv};
    for (int i = 0; i < 4; i++) *rows[i] = make(ATTN_F32, 4, i ? so : sq), *keys[i] = make(ATTN_F32, 4, skv);
    t->lse = make(ATTN_F32, 3, sl), t->mask = make(ATTN_F32, 2, sm), t->dmask = make(ATTN_F32, 2, sm);
    memset(t->q.data, 0, sizeof(float) * (size_t)(B * H * L * D));
    memset(t->k.data, 0, sizeof(float) * (size_t)(Bk * Hk * S * D));
    memset(t->mask.data, 0, sizeof(float) * (size_t)(L * S));
    float *v = t->v.data, *dout = t->dout.data;
    for (int64_t r = 0; r < Bk * Hk * S; r++) /* key 0 of each head FLT_MIN, the others -FLT_MIN/2 */
        for (int d = 0; d < D; d++) v[r * D + d] = r % S == 0 ? FLT_MIN : -FLT_MIN / 2;
    for (int64_t r = 0; r < B * H * L; r++) /* the first row of all FLT_MIN, the others -FLT_MIN/2 */
        for (int d = 0; d < D; d++) dout[r * D + d] = r == 0 ? FLT_MIN : -FLT_MIN / 2;
    t->o = attn_sdpa_options_default();
    t->ctx = attn_context_default();
    t->ctx.num_threads = 1;
    t->o.context = &t->ctx;
}

static void tiny_free(tiny *t) {
    attn_tensor *all[] = {&t->q, &t->k, &t->v, &t->out, &t->lse, &t->dout, &t->dq, &t->dk, &t->dv, &t->mask, &t->dmask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* x is `want` (kept: the subnormal, within a step of 2^-149 of rounding) or
 * 0 (want 0: written as 0); and the call ran `kernel`. */
static void tiny_check(const char *name, attn_status st, const attn_error *err, const char *ran, const char *kernel,
                       float x, float want) {
    if (st) check(0, name, "status %d: %s", (int)st, err->message);
    else if (strcmp(ran, kernel) != 0) check(0, name, "kernel %s, not %s: another kernel was tested", ran, kernel);
    else check(want == 0 ? x == 0 : fabsf(x - want) <= 0x1p-148f, name, "%g (%a), want %g (%a)", (double)x,
               (double)x, (double)want, (double)want);
}

static void test_results_below_flt_min(void) {
    attn_error err = {0};
    char ran[32], name[96];
    tiny t;
    attn_status st;
    /* The forward: out = (FLT_MIN - FLT_MIN/2) / 2 = FLT_MIN/4 in every column. */
    static const struct { int64_t L; const char *kernel; float want; } FWD[2] = {{64, "flash", FLT_MIN / 4}, {1, "decode", 0}};
    for (int f = 0; f < 2; f++) {
        tiny_init(&t, 1, 1, 1, 1, FWD[f].L, 2);
        verbose_begin();
        st = attn_sdpa(&t.out, &t.lse, NULL, &t.q, &t.k, &t.v, &t.o, &err);
        verbose_end(ran, sizeof ran, NULL, 0);
        snprintf(name, sizeof name, "%s_%s_out_below_flt_min_%s", FWD[f].kernel, attn_isa(),
                 FWD[f].want != 0 ? "kept" : "written_as_0");
        tiny_check(name, st, &err, ran, FWD[f].kernel, ((float *)t.out.data)[0], FWD[f].want);
        tiny_free(&t);
    }
    /* The exact kernel (weights asked for): out, and a weight e^-88 / (1 + e^-88) below FLT_MIN. */
    tiny_init(&t, 1, 1, 1, 1, 2, 2);
    int64_t sw[4] = {1, 1, 2, 2};
    attn_tensor w = make(ATTN_F32, 4, sw);
    verbose_begin();
    st = attn_sdpa(&t.out, &t.lse, &w, &t.q, &t.k, &t.v, &t.o, &err);
    verbose_end(ran, sizeof ran, NULL, 0);
    tiny_check("exact_f32_out_below_flt_min_written_as_0", st, &err, ran, "exact", ((float *)t.out.data)[0], 0);
    ((float *)t.q.data)[0] = 1, ((float *)t.k.data)[8] = (float)(-88 * sqrt(8.0)); /* row 0's score of key 1: -88 */
    verbose_begin();
    st = attn_sdpa(&t.out, &t.lse, &w, &t.q, &t.k, &t.v, &t.o, &err);
    verbose_end(ran, sizeof ran, NULL, 0);
    tiny_check("exact_f32_weight_below_flt_min_written_as_0", st, &err, ran, "exact", ((float *)w.data)[1], 0);
    free(w.data);
    tiny_free(&t);
    /* lse, in every kernel: one key, its score q·k·scale = 1 · 2^-130 (a
     * subnormal k, which no kernel flushes), so lse = 2^-130, written as 0. */
    static const struct { int64_t L; bool weights; const char *kernel; } LSE[3] = {
        {64, false, "flash"}, {1, false, "decode"}, {2, true, "exact"}};
    for (int f = 0; f < 3; f++) {
        tiny_init(&t, 1, 1, 1, 1, LSE[f].L, 1);
        for (int64_t i = 0; i < LSE[f].L; i++) ((float *)t.q.data)[i * 8] = (float)sqrt(8.0);
        ((float *)t.k.data)[0] = 0x1p-130f;
        int64_t sw1[4] = {1, 1, LSE[f].L, 1};
        attn_tensor w1 = make(ATTN_F32, 4, sw1);
        verbose_begin();
        st = attn_sdpa(&t.out, &t.lse, LSE[f].weights ? &w1 : NULL, &t.q, &t.k, &t.v, &t.o, &err);
        verbose_end(ran, sizeof ran, NULL, 0);
        snprintf(name, sizeof name, "%s_%s_lse_below_flt_min_written_as_0", LSE[f].kernel, attn_isa());
        tiny_check(name, st, &err, ran, LSE[f].kernel, ((float *)t.lse.data)[0], 0);
        free(w1.data);
        tiny_free(&t);
    }
    /* The backward: with one key its weight is 1, so dv = Σ over the rows
     * (and heads, batches) of dout = FLT_MIN - FLT_MIN/2 = FLT_MIN/2. */
    static const struct {
        const char *name, *kernel;
        int64_t B, Bk, H, Hk, L;
        bool dmask;
        float want;
    } BWD[4] = {
        {"flash_backward_dv_below_flt_min_written_as_0", "flash_backward", 1, 1, 1, 1, 2, false, 0},
        {"flash_backward_gqa_dv_below_flt_min_kept", "flash_backward", 1, 1, 2, 1, 1, false, FLT_MIN / 2},
        {"flash_backward_broadcast_dv_below_flt_min_kept", "flash_backward", 2, 1, 1, 1, 1, false, FLT_MIN / 2},
        {"exact_backward_f32_dv_below_flt_min_kept", "exact", 1, 1, 1, 1, 2, true, FLT_MIN / 2},
    };
    for (int b = 0; b < 4; b++) {
        tiny_init(&t, BWD[b].B, BWD[b].Bk, BWD[b].H, BWD[b].Hk, BWD[b].L, 1);
        if (BWD[b].dmask) t.o.mask = &t.mask;
        st = attn_sdpa(&t.out, &t.lse, NULL, &t.q, &t.k, &t.v, &t.o, &err);
        verbose_begin();
        if (!st)
            st = attn_sdpa_backward(&t.dq, &t.dk, &t.dv, BWD[b].dmask ? &t.dmask : NULL, &t.dout, &t.q, &t.k, &t.v,
                                    &t.out, &t.lse, &t.o, &err);
        verbose_end(ran, sizeof ran, NULL, 0);
        snprintf(name, sizeof name, "%s_%s", BWD[b].name, attn_isa());
        tiny_check(name, st, &err, ran, BWD[b].kernel, ((float *)t.dv.data)[0], BWD[b].want);
        tiny_free(&t);
    }
}

/* Each ISA's microkernels on rows of the kind the softmax meets: -inf
 * (masked), large negative fills, and scores far below the row maximum.
 * Their results must be normal or exactly 0. */
static void test_microkernels(const char *isa) {
    char name[96];
    const attn_ukernels *uk = attn_ukernels_by_name(isa);
    if (!uk) {
        snprintf(name, sizeof name, "microkernels_%s_no_subnormal", isa);
        skip(name, "this CPU lacks %s", isa);
        return;
    }
    enum { N = 4096 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *ds = malloc(sizeof(float) * N);
    /* Row maximum 0; then every distance below it, the masked and filled. */
    for (int i = 0; i < N; i++) x[i] = -300.0f * (float)i / N;
    x[7] = -INFINITY, x[100] = -1e9f, x[200] = -FLT_MAX, x[300] = -1e30f;
    memcpy(y, x, sizeof(float) * N);
    flags_clear();
    uk->exp_sum(y, N, 0.0f);
    unsigned f = flags_read();
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != 0 && fabsf(y[i]) < FLT_MIN;
    snprintf(name, sizeof name, "exp_sum_%s_no_subnormal", isa);
    check(f == 0 && bad == 0, name, "flags raised: %s; %d subnormal results", flag_names(f), bad);

    for (int i = 0; i < N; i++) y[i] = x[i], ds[i] = (float)rng_normal();
    flags_clear();
    uk->softmax_grad(y, ds, N, 0.0f, 0.25f);
    f = flags_read();
    bad = 0;
    for (int i = 0; i < N; i++) bad += (y[i] != 0 && fabsf(y[i]) < FLT_MIN) || (ds[i] != 0 && fabsf(ds[i]) < FLT_MIN);
    snprintf(name, sizeof name, "softmax_grad_%s_no_subnormal", isa);
    check(f == 0 && bad == 0, name, "flags raised: %s; %d subnormal results", flag_names(f), bad);

    /* 2^x over the whole range the kernels may ask for. */
    for (int i = 0; i < N; i++) x[i] = -200.0f + 330.0f * (float)i / N;
    x[5] = -INFINITY;
    flags_clear();
    uk->exp2(y, x, N);
    f = flags_read();
    bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != 0 && fabsf(y[i]) < FLT_MIN;
    snprintf(name, sizeof name, "exp2_%s_no_subnormal", isa);
    check(f == 0 && bad == 0, name, "flags raised: %s; %d subnormal results", flag_names(f), bad);

    /* Soft-capping scores far beyond the cap: t = e^(-2|s|/cap) is tiny. */
    for (int i = 0; i < N; i++) y[i] = (float)(rng_normal() * 100);
    flags_clear();
    uk->softcap(y, N, 1.0f);
    f = flags_read();
    snprintf(name, sizeof name, "softcap_%s_no_subnormal", isa);
    check(f == 0, name, "flags raised: %s", flag_names(f));
    free(x), free(y), free(ds);
}

int main(void) {
    rng_state = test_seed(TENSORS_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    test_microkernels("c");
    test_microkernels("avx2");
    test_microkernels("avx512");
    /* A forced ISA this CPU lacks would quietly test another one. */
    const char *forced = getenv("ATTN_ISA");
    if (forced && *forced && strcmp(forced, attn_isa()) != 0) {
        skip("kernels_with_ATTN_ISA", "ATTN_ISA=%s, but this CPU lacks it (the library runs %s)", forced, attn_isa());
    } else {
        test_f32_kernels();
        test_caches();
        test_pages();
        test_results_below_flt_min();
    }
    test_f64_kernels();
    return n_failed ? 1 : 0;
}
