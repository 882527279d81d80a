/* test_memory.c -- memory linear in the sequence lengths. For each path
 * that allocates (attn_sdpa and its kinds, the reference, the backward
 * passes, ragged batches, plans, KV caches and pages, the layer), the
 * peak of the library's live heap bytes during a call is measured at
 * (L, S), (2L, S), (L, 2S) and (2L, 2S). The mixed difference
 *     peak(2L, 2S) - peak(2L, S) - peak(L, 2S) + peak(L, S)
 * is L·S times the coefficient of any L×S term, and zero for memory of
 * the form a + b·L + c·S; a block of fixed size per thread does not move
 * it either. It must stay below a quarter of a byte per score (an L×S
 * buffer of f32 scores would show 4 bytes per score per head). Peaks when
 * S doubles at fixed L, and L at fixed S, are bounded too (at most twice,
 * plus the fixed part), and the extra peak of 3 threads over 1, when S
 * (L) doubles, may grow by at most the larger of a quarter of itself and
 * a byte per key (query) and head, plus 4 KiB: per-thread scratch of a
 * block, not of a row of S or a column of L, which would add 4 bytes per
 * key and head for each extra thread (a third thread that finds work only
 * at the larger L adds a block; the decode kernel's few floats per chunk
 * of keys grow with S). The layer (self-attention, S = L) is checked over
 * L, 2L and 4L instead, on 1 thread only. The workspace sizes of attn_sdpa and
 * attn_sdpa_backward (measured without buffers) get the mixed difference
 * too, over dtypes, causal modes, masks, the bf16 mode and 1 to 3
 * threads (each size must be given, 0 included). Nothing is timed.
 *
 * The library's objects are linked with -Wl,--wrap=malloc (and calloc,
 * aligned_alloc, realloc, free); each block's size is malloc_usable_size.
 * Prints "ok NAME" or "FAIL NAME: why". */
#define _GNU_SOURCE
#include "attn.h"
#include "check.h"

#include <malloc.h>
#include <stdbool.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wrapped allocator: live and peak bytes ----------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_aligned_alloc(size_t align, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static atomic_llong live_bytes, peak_bytes;

static void *count(void *p) {
    if (p) {
        long long now = atomic_fetch_add(&live_bytes, (long long)malloc_usable_size(p)) + (long long)malloc_usable_size(p);
        long long peak = atomic_load(&peak_bytes);
        while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
        }
    }
    return p;
}
static void uncount(void *p) {
    if (p) atomic_fetch_sub(&live_bytes, (long long)malloc_usable_size(p));
}
void *__wrap_malloc(size_t n) { return count(__real_malloc(n)); }
void *__wrap_calloc(size_t n, size_t size) { return count(__real_calloc(n, size)); }
void *__wrap_aligned_alloc(size_t align, size_t n) { return count(__real_aligned_alloc(align, n)); }
void *__wrap_realloc(void *p, size_t n) {
    uncount(p);
    void *q = __real_realloc(p, n);
    if (!q && n) return count(p), NULL; /* p still held */
    return count(q);
}
void __wrap_free(void *p) {
    uncount(p);
    __real_free(p);
}

static void peak_reset(void) { atomic_store(&peak_bytes, atomic_load(&live_bytes)); }
static double peak_over(long long base) { return (double)(atomic_load(&peak_bytes) - base); }

/* ---- tensors (the test's own memory, not counted) --------------------------- */

static uint64_t rng = 7;
static double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1.0p-53 * 2 - 1;
}

static attn_tensor tensor(attn_dtype dt, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t shape[4] = {a, b, c, d};
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
    void *data = __real_malloc(n * attn_dtype_size(dt) + 1);
    for (size_t i = 0; i < n; i++) {
        double x = uniform();
        if (dt == ATTN_F64) ((double *)data)[i] = x;
        else if (dt == ATTN_F32) ((float *)data)[i] = (float)x;
        else if (dt == ATTN_F16) ((uint16_t *)data)[i] = attn_f32_to_f16((float)x);
        else if (dt == ATTN_BF16) ((uint16_t *)data)[i] = attn_f32_to_bf16((float)x);
        else ((unsigned char *)data)[i] = x < 0.8;
    }
    attn_tensor t;
    attn_tensor_init(&t, data, dt, rank, shape, NULL, NULL);
    return t;
}

/* ---- the paths --------------------------------------------------------------- */

enum { H = 2 };
static int64_t E = 16; /* 32 for the quantized caches (blocks of 32) */

typedef struct path {
    const char *name;
    attn_dtype dt;      /* q's (and k's, v's) */
    int mask;           /* 0 none, 1 bool (1, 1, L, S), 2 float */
    attn_causal causal;
    int compute_bf16, dropout;
    int kind;           /* which call, below */
    attn_dtype store, key_store; /* a cache's or pool's formats */
} path;

enum { SDPA, REFERENCE, BACKWARD, VARLEN, VARLEN_BACKWARD, PLAN, KV_CACHE, KV_PAGES, MHA, MHA_BACKWARD, MHA_CACHED };

/* One call of path p at (L, S) on `threads` threads: the peak of the
 * library's heap above what was live before, in bytes; -1 if it failed. */
static double measure(const path *p, int64_t L, int64_t S, int threads) {
    E = p->kind == KV_CACHE || p->kind == KV_PAGES ? 32 : 16;
    attn_context ctx = attn_context_default();
    ctx.num_threads = threads;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &ctx, o.causal = p->causal, o.compute = p->compute_bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    if (p->dropout) o.dropout_p = 0.25, o.dropout_seed = 3;
    attn_dtype dt = p->dt, ft = dt == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    attn_tensor q = tensor(dt, 4, 1, H, L, E), k = tensor(dt, 4, 1, H, S, E), v = tensor(dt, 4, 1, H, S, E);
    attn_tensor out = tensor(dt, 4, 1, H, L, E), lse = tensor(ft, 3, 1, H, L, 0), dout = tensor(dt, 4, 1, H, L, E);
    attn_tensor dq = tensor(dt, 4, 1, H, L, E), dk = tensor(dt, 4, 1, H, S, E), dv = tensor(dt, 4, 1, H, S, E);
    attn_tensor mask = {0};
    if (p->mask) {
        mask = tensor(p->mask == 1 ? ATTN_BOOL : ft, 4, 1, 1, L, S);
        if (p->mask == 2)
            for (int64_t i = 0; i < L * S; i++)
                if (((i * 7) % 5) == 0) dt == ATTN_F64 ? (((double *)mask.data)[i] = -1.0 / 0.0) : (((float *)mask.data)[i] = -1.0f / 0.0f);
        for (int64_t i = 0; i < L; i++) /* key 0 visible to every query */
            p->mask == 1 ? (((unsigned char *)mask.data)[i * S] = 1) : dt == ATTN_F64 ? (((double *)mask.data)[i * S] = 0) : (((float *)mask.data)[i * S] = 0);
        o.mask = &mask;
    }
    attn_error err = {0};
    attn_status st = ATTN_OK;
    /* What the call reads but does not make (a forward's out and lse for a
     * backward pass) is made before the measurement. */
    if (p->kind == BACKWARD) st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err);
    void *extra[4] = {NULL, NULL, NULL, NULL};
    long long base = atomic_load(&live_bytes);
    peak_reset();
    switch (p->kind) {
    case SDPA: st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err); break;
    case REFERENCE: st = attn_sdpa_reference(&out, &lse, NULL, &q, &k, &v, &o, &err); break;
    case BACKWARD:
        if (!st) peak_reset(), st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
        break;
    case VARLEN: case VARLEN_BACKWARD: { /* two sequences of L/2 and L - L/2 queries over S/2 and S - S/2 keys */
        int64_t cq[3] = {0, L / 2, L}, ck[3] = {0, S / 2, S};
        int64_t s3q[3] = {L, H, E}, s3k[3] = {S, H, E}, s2[2] = {L, H};
        attn_tensor q3 = q, k3 = k, v3 = v, o3 = out, l2 = lse, do3 = dout, dq3 = dq, dk3 = dk, dv3 = dv;
        attn_tensor_init(&q3, q.data, dt, 3, s3q, NULL, NULL), attn_tensor_init(&o3, out.data, dt, 3, s3q, NULL, NULL);
        attn_tensor_init(&do3, dout.data, dt, 3, s3q, NULL, NULL), attn_tensor_init(&dq3, dq.data, dt, 3, s3q, NULL, NULL);
        attn_tensor_init(&k3, k.data, dt, 3, s3k, NULL, NULL), attn_tensor_init(&v3, v.data, dt, 3, s3k, NULL, NULL);
        attn_tensor_init(&dk3, dk.data, dt, 3, s3k, NULL, NULL), attn_tensor_init(&dv3, dv.data, dt, 3, s3k, NULL, NULL);
        attn_tensor_init(&l2, lse.data, ft, 2, s2, NULL, NULL);
        if (p->kind == VARLEN) {
            st = attn_sdpa_varlen(&o3, &l2, &q3, &k3, &v3, cq, ck, 2, NULL, &o, &err);
        } else {
            st = attn_sdpa_varlen(&o3, &l2, &q3, &k3, &v3, cq, ck, 2, NULL, &o, &err);
            base = atomic_load(&live_bytes), peak_reset();
            if (!st) st = attn_sdpa_varlen_backward(&dq3, &dk3, &dv3, &do3, &q3, &k3, &v3, &o3, &l2, cq, ck, 2, NULL, &o, &err);
        }
        break;
    }
    case PLAN: { /* the plan's memory and the run's workspace are the caller's: count them as the library's */
        size_t bytes = 0, ws = 0;
        attn_sdpa_plan *plan = NULL;
        st = attn_sdpa_plan_bytes(&bytes, 0, &err);
        if (!st) extra[0] = __wrap_malloc(bytes);
        if (!st) st = attn_sdpa_plan_init(&plan, extra[0], bytes, &ws, &out, &lse, &q, &k, &v, &o, &err);
        if (!st) extra[1] = __wrap_malloc(ws ? ws : 1);
        if (!st) st = attn_sdpa_run(plan, &out, &lse, &q, &k, &v, extra[1], ws, &err);
        break;
    }
    case MHA: case MHA_BACKWARD: { /* self-attention of L tokens (L == S here), packed projections, seq-first */
        const int64_t EMB = H * E;
        attn_tensor x = tensor(ft, 3, L, 1, EMB, 0), y = tensor(ft, 3, L, 1, EMB, 0), dy = tensor(ft, 3, L, 1, EMB, 0);
        attn_tensor dx = tensor(ft, 3, L, 1, EMB, 0), win = tensor(ft, 2, 3 * EMB, EMB, 0, 0), wout = tensor(ft, 2, EMB, EMB, 0, 0);
        attn_tensor dwin = tensor(ft, 2, 3 * EMB, EMB, 0, 0), dwout = tensor(ft, 2, EMB, EMB, 0, 0);
        attn_tensor kpm = tensor(ATTN_BOOL, 2, 1, L, 0, 0);
        for (int64_t j = 0; j < L; j++) ((unsigned char *)kpm.data)[j] = j % 3 == 2; /* true: padding */
        attn_mha_params mp = attn_mha_params_default(), g = attn_mha_params_default();
        mp.embed_dim = EMB, mp.num_heads = H, mp.in_proj_weight = &win, mp.out_proj_weight = &wout;
        g.in_proj_weight = &dwin, g.out_proj_weight = &dwout;
        attn_mha_options mo = attn_mha_options_default();
        mo.causal = p->causal, mo.context = &ctx;
        if (p->mask) mo.key_padding_mask = &kpm;
        if (p->kind == MHA) st = attn_mha(&y, NULL, &x, &x, &x, &mp, &mo, &err);
        else st = attn_mha_backward(&dx, NULL, NULL, &g, &dy, &x, &x, &x, &mp, &mo, &err);
        attn_tensor *mine[] = {&x, &y, &dy, &dx, &win, &wout, &dwin, &dwout, &kpm};
        for (size_t i = 0; i < sizeof mine / sizeof *mine; i++) __real_free(mine[i]->data);
        break;
    }
    case KV_CACHE: case KV_PAGES: { /* S positions appended (not measured), then L queries attend */
        void *mem = NULL;
        size_t bytes = 0;
        attn_kv_cache *cache = NULL;
        attn_kv_pages *pool = NULL;
        int64_t seq = 0, cu_k[2] = {0, S}, cu_q[2] = {0, L};
        int64_t s3k[3] = {S, H, E}, k3st[3] = {E, S * E, 1}, s3q[3] = {L, H, E}, q3st[3] = {E, L * E, 1};
        attn_tensor k3, v3, q3, o3;
        attn_tensor_init(&k3, k.data, dt, 3, s3k, k3st, NULL), attn_tensor_init(&v3, v.data, dt, 3, s3k, k3st, NULL);
        attn_tensor_init(&q3, q.data, dt, 3, s3q, q3st, NULL), attn_tensor_init(&o3, out.data, dt, 3, s3q, q3st, NULL);
        if (p->kind == KV_CACHE) {
            attn_kv_cache_desc d = attn_kv_cache_desc_default();
            d.heads = H, d.capacity = S, d.key_dim = d.value_dim = E, d.dtype = p->store, d.key_dtype = p->key_store;
            st = attn_kv_cache_bytes(&bytes, &d, &err);
            if (!st && !(mem = __real_malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
            if (!st) st = attn_kv_cache_init(&cache, mem, bytes, &d, &err);
            if (!st) st = attn_kv_cache_append(cache, &k, &v, &err);
        } else {
            attn_kv_pages_desc d = attn_kv_pages_desc_default();
            d.heads = H, d.key_dim = d.value_dim = E, d.dtype = p->store, d.key_dtype = p->key_store;
            d.page_size = 32, d.num_pages = (S + 31) / 32, d.max_sequences = 1;
            st = attn_kv_pages_bytes(&bytes, &d, &err);
            if (!st && !(mem = __real_malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
            if (!st) st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
            if (!st) st = attn_kv_pages_create(pool, &seq, &err);
            if (!st) st = attn_kv_pages_append(pool, &seq, 1, &k3, &v3, cu_k, &err);
        }
        attn_tensor mask2; /* (L, S): a sequence's mask has the output's rank or less */
        int64_t sm[2] = {L, S};
        if (o.mask) attn_tensor_init(&mask2, mask.data, mask.dtype, 2, sm, NULL, NULL);
        const attn_tensor *masks[1] = {o.mask ? &mask2 : NULL};
        o.mask = NULL;
        if (p->kind == KV_CACHE && masks[0]) o.mask = &mask;
        base = atomic_load(&live_bytes), peak_reset();
        if (!st && p->kind == KV_CACHE) st = attn_kv_cache_attend(&out, &lse, &q, cache, &o, &err);
        if (!st && p->kind == KV_PAGES) st = attn_kv_pages_attend(&o3, NULL, &q3, cu_q, &seq, 1, pool, masks[0] ? masks : NULL, &o, &err);
        __real_free(mem);
        break;
    }
    default: break;
    }
    double peak = peak_over(base);
    for (int i = 0; i < 4; i++) __wrap_free(extra[i]);
    attn_tensor *all[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
    if (st) {
        printf("# %s at L=%lld S=%lld: %s\n", p->name, (long long)L, (long long)S, err.message);
        return -1;
    }
    return peak;
}

/* The layer's self-attention has S = L: its peak at L, 2L and 4L, of
 * which peak(4L) - 3·peak(2L) + 2·peak(L) is zero for a + b·L and 6·L·L
 * times the coefficient of an L×L term. */
static void check_layer(const path *p, int64_t L) {
    double a = measure(p, L, L, 1), b = measure(p, 2 * L, 2 * L, 1), c = measure(p, 4 * L, 4 * L, 1);
    char name[160];
    snprintf(name, sizeof name, "%s_memory_linear", p->name);
    if (a < 0 || b < 0 || c < 0) {
        check(0, name, "a call failed");
        return;
    }
    double per_score = (c - 3 * b + 2 * a) / (6.0 * (double)L * (double)L * H);
    printf("# %s: peak %.0f at L = S = %lld; x%.2f when L doubles, x%.2f again; L·S term %.3f bytes per score and head\n",
           p->name, a, (long long)L, b / (a + 1), c / (b + 1), per_score);
    check(per_score < 0.25 && c <= 2.1 * b + 65536, name,
          "L·S term %.3f bytes per score and head; peaks %.0f, %.0f, %.0f at L = S = %lld, twice, four times",
          per_score, a, b, c, (long long)L);
}

/* The fused backward splits a call of few slices into up to 16 / slices
 * chunks of its keys, each with its own dq partial of L rows (attn.h: "dq
 * partials (at most 32 MiB)"), so its memory grows as L·S until S holds
 * that many blocks of backward_block_keys, then as L alone: S (and the
 * layer's L) start there. */
static int64_t backward_keys(void) {
    attn_tuning t;
    t.struct_size = sizeof t;
    return attn_get_tuning(&t, NULL) ? 4096 : (16 / H) * (int64_t)t.backward_block_keys;
}

static void check_path(const path *p, int64_t L, int64_t S) {
    bool backward = p->kind == BACKWARD || p->kind == VARLEN_BACKWARD || p->kind == MHA_BACKWARD;
    int64_t least = backward ? backward_keys() * (p->kind == VARLEN_BACKWARD ? 2 : 1) : 0; /* varlen: two sequences of S/2 */
    if (S < least) S = least;
    if (p->kind == MHA || p->kind == MHA_BACKWARD) {
        check_layer(p, L / 2 > least ? L / 2 : least);
        return;
    }
    double a = measure(p, L, S, 1), bL = measure(p, 2 * L, S, 1), bS = measure(p, L, 2 * S, 1);
    double c = measure(p, 2 * L, 2 * S, 1);
    double t3 = measure(p, L, S, 3), t3S = measure(p, L, 2 * S, 3), t3L = measure(p, 2 * L, S, 3);
    char name[160];
    snprintf(name, sizeof name, "%s_memory_linear", p->name);
    if (a < 0 || bL < 0 || bS < 0 || c < 0 || t3 < 0 || t3S < 0 || t3L < 0) {
        check(0, name, "a call failed");
        return;
    }
    double mixed = c - bL - bS + a, per_score = mixed / (double)(2 * L * 2 * S / 4 * H);
    /* threads: the growth of the extra peak of 3 threads as S doubles */
    double thread_growth = (t3S - bS) - (t3 - a), thread_growth_L = (t3L - bL) - (t3 - a);
    printf("# %s: peak %.0f at (%lld, %lld); x%.2f when S doubles, x%.2f when L doubles, x%.2f both; "
           "L·S term %.3f bytes per score and head; 3 threads' extra %.0f -> %.0f as S doubles, %.0f as L doubles\n",
           p->name, a, (long long)L, (long long)S, bS / (a + 1), bL / (a + 1), c / (a + 1), per_score, t3 - a,
           t3S - bS, t3L - bL);
    /* Decoding (L <= 8 queries) keeps each query row's partial result per
     * chunk of keys (attn.h: a few floats per slice and per key chunk),
     * an L·S/chunk term that L <= 8 bounds by a multiple of S, and each
     * worker's scratch has a few KiB per query row, up to 8. */
    bool decoding = 2 * L <= 8;
    check((per_score < 0.25 || decoding) && bS <= 2.05 * a + 65536 && bL <= 2.05 * a + 65536 && thread_growth < fmax(0.25 * (t3 - a), (double)(S * H)) + 4096 &&
              (thread_growth_L < fmax(0.25 * (t3 - a), (double)(L * H)) + 4096 || decoding),
          name, "L·S term %.3f bytes per score and head; peaks %.0f, %.0f (S doubled), %.0f (L doubled), %.0f (both); "
          "3 threads' extra %.0f, then %.0f with S doubled, %.0f with L doubled",
          per_score, a, bS, bL, c, t3 - a, t3S - bS, t3L - bL);
}

/* The workspace sizes attn_sdpa_workspace_size and
 * attn_sdpa_backward_workspace_size give (measured without buffers, so no
 * arithmetic): the same mixed difference over L and S, from 4096 to 8192,
 * for each dtype, causal mode, mask, the bf16 mode and 1 to 3 threads. */
static size_t workspace(int backward, attn_dtype dt, int causal, int mask, int bf16, int threads, int64_t L, int64_t S) {
    attn_context ctx = attn_context_default();
    ctx.num_threads = threads;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &ctx, o.causal = causal, o.compute = bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    attn_dtype ft = dt == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    int64_t sq[4] = {1, H, L, E}, sk[4] = {1, H, S, E}, sl[3] = {1, H, L}, sm[4] = {1, 1, L, S};
    attn_tensor q, k, v, out, lse, m;
    attn_tensor_init(&q, NULL, dt, 4, sq, NULL, NULL), attn_tensor_init(&out, NULL, dt, 4, sq, NULL, NULL);
    attn_tensor_init(&k, NULL, dt, 4, sk, NULL, NULL), attn_tensor_init(&v, NULL, dt, 4, sk, NULL, NULL);
    attn_tensor_init(&lse, NULL, ft, 3, sl, NULL, NULL), attn_tensor_init(&m, NULL, mask == 1 ? ATTN_BOOL : ft, 4, sm, NULL, NULL);
    if (mask) o.mask = &m;
    size_t bytes = 0;
    attn_tensor dq = q, dk = k, dv = v, dout = out;
    attn_status st = backward ? attn_sdpa_backward_workspace_size(&bytes, &dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, &lse, &o, NULL)
                              : attn_sdpa_workspace_size(&bytes, &out, &lse, NULL, &q, &k, &v, &o, NULL);
    return st ? SIZE_MAX : bytes; /* 0: a call that needs no workspace */
}

static void check_workspaces(void) {
    static const attn_dtype DT[3] = {ATTN_F32, ATTN_F64, ATTN_F16};
    int bad = 0, n = 0;
    char first[200] = "";
    E = 16;
    for (int backward = 0; backward < 2; backward++)
        for (int d = 0; d < 3; d++)
            for (int causal = 0; causal < 3; causal++)
                for (int mask = 0; mask < 3; mask++)
                    for (int bf16 = 0; bf16 < 2; bf16++)
                        for (int threads = 1; threads <= 3; threads++) {
                            if (bf16 && DT[d] == ATTN_F64) continue;
                            double w[2][2];
                            bool failed = false;
                            for (int i = 0; i < 2; i++)
                                for (int j = 0; j < 2; j++) {
                                    size_t b = workspace(backward, DT[d], causal, mask, bf16, threads, 4096 << i, 4096 << j);
                                    failed |= b == SIZE_MAX;
                                    w[i][j] = (double)b;
                                }
                            double mixed = w[1][1] - w[1][0] - w[0][1] + w[0][0];
                            n++;
                            if (failed || mixed > 0.25 * 4096.0 * 4096 * H) {
                                if (!bad++)
                                    snprintf(first, sizeof first, "%s %s causal %d mask %d bf16 %d threads %d: %s%.0f bytes, L·S term %.3f",
                                             backward ? "backward" : "forward", attn_dtype_name(DT[d]), causal, mask, bf16,
                                             threads, failed ? "a size refused; " : "", w[0][0], mixed / (4096.0 * 4096 * H));
                            }
                        }
    check(bad == 0, "workspace_sizes_linear", "%d of %d configurations measure an L·S term (or fail), first: %s", bad, n, first);
}

int main(void) {
    check_workspaces();
    static const path paths[] = {
        {"sdpa_f32", ATTN_F32, 0, ATTN_CAUSAL_NONE, 0, 0, SDPA, 0, 0},
        {"sdpa_f32_causal_bool_mask", ATTN_F32, 1, ATTN_CAUSAL_TOP_LEFT, 0, 0, SDPA, 0, 0},
        {"sdpa_f32_float_mask_dropout", ATTN_F32, 2, ATTN_CAUSAL_NONE, 0, 1, SDPA, 0, 0},
        {"sdpa_f32_bf16_compute", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, SDPA, 0, 0},
        {"sdpa_f64", ATTN_F64, 2, ATTN_CAUSAL_NONE, 0, 0, SDPA, 0, 0},
        {"sdpa_f16", ATTN_F16, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, SDPA, 0, 0},
        {"sdpa_bf16", ATTN_BF16, 1, ATTN_CAUSAL_NONE, 0, 0, SDPA, 0, 0},
        {"sdpa_reference_f32", ATTN_F32, 2, ATTN_CAUSAL_NONE, 0, 0, REFERENCE, 0, 0},
        {"sdpa_reference_f64", ATTN_F64, 0, ATTN_CAUSAL_TOP_LEFT, 0, 1, REFERENCE, 0, 0},
        {"sdpa_backward_f32", ATTN_F32, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, BACKWARD, 0, 0},
        {"sdpa_backward_f32_bool_mask_dropout", ATTN_F32, 1, ATTN_CAUSAL_NONE, 0, 1, BACKWARD, 0, 0},
        {"sdpa_backward_f32_bf16_compute", ATTN_F32, 0, ATTN_CAUSAL_NONE, 1, 0, BACKWARD, 0, 0},
        {"sdpa_backward_f64", ATTN_F64, 2, ATTN_CAUSAL_NONE, 0, 0, BACKWARD, 0, 0},
        {"sdpa_backward_f16", ATTN_F16, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, BACKWARD, 0, 0},
        {"sdpa_varlen_f32", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, VARLEN, 0, 0},
        {"sdpa_varlen_backward_f32", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, VARLEN_BACKWARD, 0, 0},
        {"sdpa_varlen_backward_f64", ATTN_F64, 0, ATTN_CAUSAL_NONE, 0, 0, VARLEN_BACKWARD, 0, 0},
        {"sdpa_plan_run_f32", ATTN_F32, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, PLAN, 0, 0},
        {"sdpa_plan_run_f16", ATTN_F16, 0, ATTN_CAUSAL_NONE, 0, 0, PLAN, 0, 0},
        {"kv_cache_f32_decode_and_flash", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, KV_CACHE, ATTN_F32, 0},
        {"kv_cache_q8_bool_mask", ATTN_F32, 1, ATTN_CAUSAL_NONE, 0, 0, KV_CACHE, ATTN_Q8, 0},
        {"kv_cache_q4_bf16_compute", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, KV_CACHE, ATTN_Q4, 0},
        {"kv_cache_e4m3", ATTN_F32, 0, ATTN_CAUSAL_NONE, 0, 0, KV_CACHE, ATTN_E4M3, 0},
        {"kv_cache_q4c_keys", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, KV_CACHE, ATTN_F16, ATTN_Q4C},
        {"kv_pages_f32", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, KV_PAGES, ATTN_F32, 0},
        {"kv_pages_q8_bool_mask", ATTN_F32, 1, ATTN_CAUSAL_NONE, 0, 0, KV_PAGES, ATTN_Q8, 0},
        {"kv_pages_q4c_keys", ATTN_F32, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, KV_PAGES, ATTN_Q8, ATTN_Q4C},
        {"mha_f32", ATTN_F32, 0, ATTN_CAUSAL_NONE, 0, 0, MHA, 0, 0},
        {"mha_f32_causal", ATTN_F32, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, MHA, 0, 0},
        {"mha_f32_key_padding", ATTN_F32, 1, ATTN_CAUSAL_NONE, 0, 0, MHA, 0, 0},
        {"mha_backward_f32", ATTN_F32, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, MHA_BACKWARD, 0, 0},
        {"mha_backward_f32_key_padding", ATTN_F32, 1, ATTN_CAUSAL_NONE, 0, 0, MHA_BACKWARD, 0, 0},
        {"mha_backward_f64", ATTN_F64, 0, ATTN_CAUSAL_NONE, 0, 0, MHA_BACKWARD, 0, 0},
    };
    const char *only = getenv("ONLY");
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (!only || strstr(paths[i].name, only)) check_path(&paths[i], getenv("BASE") ? atoi(getenv("BASE")) : 2048, getenv("BASE") ? atoi(getenv("BASE")) : 2048);
    /* Decoding: 2 queries (then 4) against 16384 keys (then 32768), the
     * decode kernel's split of the keys over the threads: the peak linear
     * in S, per thread a block. */
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if ((!only || strstr(paths[i].name, only)) && (paths[i].kind == KV_CACHE || paths[i].kind == KV_PAGES ||
                                                      (paths[i].kind == SDPA && paths[i].dt == ATTN_F32))) {
            path decode = paths[i];
            char name[128];
            snprintf(name, sizeof name, "%s_decode", paths[i].name);
            decode.name = name;
            check_path(&decode, 2, 16384);
        }
    attn_shutdown();
    printf("# %d failed\n", n_failed);
    return n_failed ? 1 : 0;
}
