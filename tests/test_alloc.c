/* test_alloc.c -- running out of memory. For a typical call of each public
 * function that allocates, the call is repeated with its n-th allocation
 * failing, for every n the call reaches. Each must return ATTN_ERR_NO_MEMORY
 * with a message, leave its outputs untouched, and give back everything it
 * took (counted here; LeakSanitizer checks again at exit).
 *
 * The library's objects are linked with -Wl,--wrap=malloc (and calloc,
 * aligned_alloc, realloc, free), so every allocation they make comes through
 * the wrappers below; the C library's own allocations (fopen's buffers,
 * threads' stacks) do not. Prints "ok NAME" or "FAIL NAME: why". */
#include "attn_teach.h"
#include "check.h"
#include "seed.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wrapped allocator ------------------------------------------------ */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_aligned_alloc(size_t align, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static long n_allocs; /* allocations asked for since the counter was reset */
static long fail_at;  /* the allocation that fails (1-based); 0: none */
static long live;     /* blocks handed out and not yet freed */
static int fail_all;  /* every allocation fails */

static int fails(void) { return ++n_allocs == fail_at || fail_all; }

void *__wrap_malloc(size_t n) {
    void *p = fails() ? NULL : __real_malloc(n);
    live += p != NULL;
    return p;
}
void *__wrap_calloc(size_t n, size_t size) {
    void *p = fails() ? NULL : __real_calloc(n, size);
    live += p != NULL;
    return p;
}
void *__wrap_aligned_alloc(size_t align, size_t n) {
    void *p = fails() ? NULL : __real_aligned_alloc(align, n);
    live += p != NULL;
    return p;
}
void *__wrap_realloc(void *p, size_t n) {
    if (fails()) return NULL;
    void *q = __real_realloc(p, n);
    live += p == NULL && q != NULL;
    return q;
}
void __wrap_free(void *p) {
    live -= p != NULL;
    __real_free(p);
}

/* ---- one function under test ------------------------------------------------ */

/* A call and its outputs: `run` makes the call; `outputs` are the bytes
 * the call may write, which must stay as they were when it fails. */
typedef struct subject {
    const char *name;
    attn_status (*run)(void *ctx, attn_error *err);
    void *ctx;
    void *outputs[3];
    size_t output_bytes[3];
    void (*release)(void *ctx); /* frees what a successful call returned, or NULL */
} subject;

static void test_subject(const subject *s) {
    attn_error err;
    n_allocs = 0, fail_at = 0;
    attn_status st = s->run(s->ctx, &err);
    long reached = n_allocs;
    if (st != ATTN_OK) {
        check(0, s->name, "the call fails even with memory: %s", err.message);
        return;
    }
    if (s->release) s->release(s->ctx);
    unsigned char *before[3] = {NULL, NULL, NULL};
    for (int o = 0; o < 3; o++)
        if (s->outputs[o]) {
            before[o] = __real_malloc(s->output_bytes[o]);
            memset(s->outputs[o], 0xa5, s->output_bytes[o]);
            memcpy(before[o], s->outputs[o], s->output_bytes[o]);
        }
    char why[1024] = "";
    for (long n = 1; n <= reached && !why[0]; n++) {
        long live0 = live;
        n_allocs = 0, fail_at = n;
        memset(&err, 0, sizeof err);
        st = s->run(s->ctx, &err);
        fail_at = 0;
        if (st != ATTN_ERR_NO_MEMORY || !err.message[0])
            snprintf(why, sizeof why, "allocation %ld of %ld failed: status %d (%s)", n, reached, (int)st,
                     err.message);
        else if (live != live0)
            snprintf(why, sizeof why, "allocation %ld of %ld failed: %ld blocks leaked", n, reached,
                     live - live0);
        for (int o = 0; o < 3 && !why[0]; o++)
            if (s->outputs[o] && memcmp(before[o], s->outputs[o], s->output_bytes[o]) != 0)
                snprintf(why, sizeof why, "allocation %ld of %ld failed: output %d was written", n,
                         reached, o);
        if (st == ATTN_OK && s->release) s->release(s->ctx);
    }
    for (int o = 0; o < 3; o++) __real_free(before[o]);
    char full[160];
    snprintf(full, sizeof full, "no_memory_%s_each_of_%ld_allocations", s->name, reached);
    check(reached > 0 && !why[0], full, "%s", reached ? why : "the call allocates nothing");
}

/* ---- attn_sdpa and friends ------------------------------------------------ */

typedef struct sdpa_case {
    attn_tensor q, k, v, out, weights, mask;
    attn_sdpa_options o;
    int which; /* 0 attn_sdpa, 1 attn_sdpa_reference, 2 attn_scores */
} sdpa_case;

static attn_status run_sdpa(void *ctx, attn_error *err) {
    sdpa_case *c = ctx;
    attn_tensor *w = c->weights.data ? &c->weights : NULL;
    if (c->which == 1) return attn_sdpa_reference(&c->out, NULL, w, &c->q, &c->k, &c->v, &c->o, err);
    if (c->which == 2) return attn_scores(&c->out, &c->q, &c->k, &c->o, err);
    return attn_sdpa(&c->out, NULL, w, &c->q, &c->k, &c->v, &c->o, err);
}

enum { VALUES_SEED = 7 };
static uint64_t seed = VALUES_SEED;
static double uniform(void) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(seed >> 11) * 0x1.0p-53 * 2 - 1;
}

static attn_tensor tensor(attn_dtype dt, int64_t a, int64_t b, int64_t c) {
    int64_t shape[3] = {a, b, c};
    attn_tensor t;
    size_t n = (size_t)(a * b * c);
    void *data = __real_malloc(n * attn_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        double x = uniform();
        if (dt == ATTN_F64) ((double *)data)[i] = x;
        else if (dt == ATTN_F32) ((float *)data)[i] = (float)x;
        else if (dt == ATTN_F16) ((uint16_t *)data)[i] = attn_f32_to_f16((float)x);
        else ((unsigned char *)data)[i] = x < 0.6;
    }
    attn_tensor_init(&t, data, dt, 3, shape, NULL, NULL);
    return t;
}

/* With a workspace of the size attn_sdpa_workspace_size gives, attn_sdpa
 * calls no allocator at all (every allocation would fail) and computes
 * bitwise what it computes with malloc. */
static void test_workspace(sdpa_case *c, const char *name, size_t out_bytes) {
    attn_error err;
    attn_context ctx = attn_context_default();
    c->o.context = &ctx;
    attn_tensor *w = c->weights.data ? &c->weights : NULL;
    size_t need = 0;
    attn_status st = attn_sdpa_workspace_size(&need, &c->out, NULL, w, &c->q, &c->k, &c->v, &c->o, &err);
    unsigned char *ref = __real_malloc(out_bytes), *mem = __real_malloc(need + 3);
    c->o.context = NULL;
    if (st == ATTN_OK) st = run_sdpa(c, &err);
    memcpy(ref, c->out.data, out_bytes);
    memset(c->out.data, 0, out_bytes);
    ctx.workspace = mem + 3, ctx.workspace_size = need;
    c->o.context = &ctx;
    if (st == ATTN_OK) {
        n_allocs = 0, fail_all = 1;
        st = run_sdpa(c, &err);
        fail_all = 0;
    }
    char full[160];
    snprintf(full, sizeof full, "workspace_%s_calls_no_allocator", name);
    check(st == ATTN_OK && n_allocs == 0 && memcmp(ref, c->out.data, out_bytes) == 0, full,
          "status %d (%s), %ld allocations, %zu bytes of workspace", (int)st, st ? err.message : "", n_allocs,
          need);
    c->o.context = NULL;
    __real_free(ref), __real_free(mem);
}

/* A planned run allocates nothing: with every allocation failing, a run
 * from a plan (made while the allocator works) succeeds, asks for no
 * memory, and writes what the unplanned call writes. */
static void test_plan_run(sdpa_case *c, const char *name, size_t out_bytes) {
    attn_error err;
    size_t bytes = 0, need = 0;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    unsigned char *ref = __real_malloc(out_bytes), *mem = __real_malloc(bytes + 1), *work = NULL;
    if (st == ATTN_OK) st = run_sdpa(c, &err);
    memcpy(ref, c->out.data, out_bytes);
    memset(c->out.data, 0, out_bytes);
    if (st == ATTN_OK) st = attn_sdpa_plan_init(&plan, mem + 1, bytes, &need, &c->out, NULL, &c->q, &c->k, &c->v, &c->o, &err);
    if (st == ATTN_OK) work = __real_malloc(need + 5);
    for (int layer = 0; st == ATTN_OK && layer < 2; layer++) { /* the same plan, layer after layer */
        n_allocs = 0, fail_all = 1;
        st = attn_sdpa_run(plan, &c->out, NULL, &c->q, &c->k, &c->v, work + 5, need, &err);
        fail_all = 0;
        if (n_allocs) break;
    }
    char full[160];
    snprintf(full, sizeof full, "planned_%s_runs_no_allocator", name);
    check(st == ATTN_OK && n_allocs == 0 && memcmp(ref, c->out.data, out_bytes) == 0, full,
          "status %d (%s), %ld allocations, %zu bytes of workspace", (int)st, st ? err.message : "", n_allocs, need);
    __real_free(ref), __real_free(mem), __real_free(work);
}

/* The same of a ragged batch's plan: sequences for flash, decode and none. */
static void test_varlen_plan_run(void) {
    int64_t cu_q[5] = {0, 1, 31, 31, 33}, cu_k[5] = {0, 100, 140, 150, 2150};
    attn_tensor q = tensor(ATTN_F32, 33, 4, 16), k = tensor(ATTN_F32, 2150, 2, 16), v = tensor(ATTN_F32, 2150, 2, 16);
    attn_tensor out = tensor(ATTN_F32, 33, 4, 16), ref = tensor(ATTN_F32, 33, 4, 16);
    int64_t sl[2] = {33, 4};
    attn_tensor lse, lse_ref;
    attn_tensor_init(&lse, __real_malloc(33 * 4 * 4), ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&lse_ref, __real_malloc(33 * 4 * 4), ATTN_F32, 2, sl, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    attn_set_num_threads(2);
    size_t bytes = 0, need = 0;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_varlen(&ref, &lse_ref, &q, &k, &v, cu_q, cu_k, 4, NULL, &o, &err);
    if (st == ATTN_OK) st = attn_sdpa_plan_bytes(&bytes, 4, &err);
    unsigned char *mem = __real_malloc(bytes), *work = NULL;
    if (st == ATTN_OK)
        st = attn_sdpa_varlen_plan_init(&plan, mem, bytes, &need, &out, &lse, &q, &k, &v, cu_q, cu_k, 4, NULL, &o, &err);
    if (st == ATTN_OK) work = __real_malloc(need);
    if (st == ATTN_OK) {
        n_allocs = 0, fail_all = 1;
        st = attn_sdpa_run(plan, &out, &lse, &q, &k, &v, work, need, &err);
        fail_all = 0;
    }
    size_t ob = 33 * 4 * 16 * 4;
    check(st == ATTN_OK && n_allocs == 0 && !memcmp(out.data, ref.data, ob) && !memcmp(lse.data, lse_ref.data, 33 * 4 * 4),
          "planned_sdpa_varlen_runs_no_allocator", "status %d (%s), %ld allocations", (int)st, st ? err.message : "",
          n_allocs);
    attn_set_num_threads(0);
    attn_tensor *all[] = {&q, &k, &v, &out, &ref, &lse, &lse_ref};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
    __real_free(mem), __real_free(work);
}

/* The same of a paged batch's plan: a decode and a prefill sequence over
 * pages under a block table, run with every allocation failing. */
static void test_paged_plan_run(void) {
    enum { P = 16, NP = 12, HK = 2, E = 16 };
    int32_t table[2 * 6] = {3, 7, 1, 0, 0, 0, 5, 2, 9, 11, 4, 6};
    int64_t lengths[2] = {40, 90}, cu[3] = {0, 1, 31};
    attn_tensor kp = tensor(ATTN_F32, NP, HK, P * E), vp = tensor(ATTN_F32, NP, HK, P * E);
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.heads = HK, w.key_dim = w.value_dim = E, w.page_size = P, w.num_pages = NP;
    w.num_sequences = 2, w.lengths = lengths, w.page_table = table, w.table_stride = 6;
    w.k_pages = kp.data, w.v_pages = vp.data;
    attn_tensor q = tensor(ATTN_F32, 31, 4, E), out = tensor(ATTN_F32, 31, 4, E), ref = tensor(ATTN_F32, 31, 4, E);
    attn_error err;
    attn_set_num_threads(2);
    size_t bytes = 0, need = 0;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_kv_paged_attend(&ref, NULL, &q, cu, &w, NULL, NULL, &err);
    if (st == ATTN_OK) st = attn_sdpa_plan_bytes(&bytes, 2, &err);
    unsigned char *mem = __real_malloc(bytes), *work = NULL;
    if (st == ATTN_OK) st = attn_kv_paged_plan_init(&plan, mem, bytes, &need, &out, NULL, &q, cu, &w, NULL, NULL, &err);
    if (st == ATTN_OK) work = __real_malloc(need ? need : 1);
    if (st == ATTN_OK) {
        n_allocs = 0, fail_all = 1;
        st = attn_kv_paged_run(plan, &out, NULL, &q, kp.data, vp.data, work, need, &err);
        fail_all = 0;
    }
    check(st == ATTN_OK && n_allocs == 0 && !memcmp(out.data, ref.data, 31 * 4 * E * 4),
          "planned_paged_batch_runs_no_allocator", "status %d (%s), %ld allocations", (int)st, st ? err.message : "",
          n_allocs);
    attn_set_num_threads(0);
    attn_tensor *all[] = {&kp, &vp, &q, &out, &ref};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
    __real_free(mem), __real_free(work);
}

/* The same over a pool of q8 keys stored with the Hadamard rotation and
 * q8 values: the run turns q into its workspace, with no allocator. */
static void test_paged_plan_run_rotated(void) {
    enum { E = 32, HK = 2 };
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = HK, d.key_dim = d.value_dim = E, d.dtype = ATTN_Q8, d.page_size = 16, d.num_pages = 8, d.max_sequences = 2;
    d.hadamard = 1;
    attn_error err;
    size_t pool_bytes = 0, bytes = 0, need = 0;
    attn_status st = attn_kv_pages_bytes(&pool_bytes, &d, &err);
    void *pool_mem = __real_malloc(pool_bytes ? pool_bytes : 1);
    attn_kv_pages *pool = NULL;
    int64_t ids[2], cu_k[3] = {0, 40, 53}, cu[3] = {0, 1, 4};
    attn_tensor k = tensor(ATTN_F32, 53, HK, E), v = tensor(ATTN_F32, 53, HK, E);
    attn_tensor q = tensor(ATTN_F32, 4, 4, E), out = tensor(ATTN_F32, 4, 4, E), ref = tensor(ATTN_F32, 4, 4, E);
    if (!st) st = attn_kv_pages_init(&pool, pool_mem, pool_bytes, &d, &err);
    if (!st) st = attn_kv_pages_create(pool, &ids[0], &err);
    if (!st) st = attn_kv_pages_create(pool, &ids[1], &err);
    if (!st) st = attn_kv_pages_append(pool, ids, 2, &k, &v, cu_k, &err);
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    if (!st) st = attn_kv_pages_view(&w, pool, &err);
    if (!st) st = attn_kv_paged_attend(&ref, NULL, &q, cu, &w, NULL, NULL, &err);
    if (!st) st = attn_sdpa_plan_bytes(&bytes, w.num_sequences, &err);
    unsigned char *mem = __real_malloc(bytes ? bytes : 1), *work = NULL;
    attn_sdpa_plan *plan = NULL;
    if (!st) st = attn_kv_paged_plan_init(&plan, mem, bytes, &need, &out, NULL, &q, cu, &w, NULL, NULL, &err);
    if (!st) work = __real_malloc(need ? need : 1);
    if (!st) {
        n_allocs = 0, fail_all = 1;
        st = attn_kv_paged_run(plan, &out, NULL, &q, w.k_pages, w.v_pages, work, need, &err);
        fail_all = 0;
    }
    check(st == ATTN_OK && n_allocs == 0 && !memcmp(out.data, ref.data, 4 * 4 * E * 4),
          "planned_paged_batch_rotated_keys_runs_no_allocator", "status %d (%s), %ld allocations", (int)st,
          st ? err.message : "", n_allocs);
    attn_tensor *all[] = {&k, &v, &q, &out, &ref};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
    __real_free(mem), __real_free(work), __real_free(pool_mem);
}

/* RoPE for the subjects that follow (NULL: none): its table is one more
 * allocation, taken from the arena, so a workspace must hold it too. */
static const attn_rope_options *subject_rope;

static void sdpa_subject(const char *name, attn_dtype dt, attn_dtype kv, int64_t H, int64_t L, int64_t S,
                         int64_t E, int which, int weights, int mask, attn_compute compute,
                         attn_causal causal, int threads) {
    sdpa_case c;
    memset(&c, 0, sizeof c);
    c.q = tensor(dt, H, L, E);
    c.k = tensor(kv, 1, S, E);
    c.v = tensor(kv, 1, S, E);
    c.out = which == 2 ? tensor(dt, H, L, S) : tensor(dt, H, L, E);
    c.o = attn_sdpa_options_default();
    c.o.causal = causal;
    c.o.compute = compute;
    c.o.rope = subject_rope;
    c.which = which;
    if (weights) c.weights = tensor(dt, H, L, S);
    if (mask) c.mask = tensor(ATTN_BOOL, 1, L, S), c.o.mask = &c.mask;
    subject s = {name, run_sdpa, &c, {c.out.data, c.weights.data}, {0, 0, 0}, NULL};
    s.output_bytes[0] = (size_t)attn_tensor_numel(&c.out) * attn_dtype_size(dt);
    if (weights) s.output_bytes[1] = (size_t)attn_tensor_numel(&c.weights) * attn_dtype_size(dt);
    attn_set_num_threads(threads);
    test_subject(&s);
    if (which == 0) test_workspace(&c, name, s.output_bytes[0]);
    if (which == 0 && !weights && dt != ATTN_F16) test_plan_run(&c, name, s.output_bytes[0]); /* plans take f32/f64 q */
    attn_set_num_threads(0);
    __real_free(c.q.data), __real_free(c.k.data), __real_free(c.v.data), __real_free(c.out.data);
    __real_free(c.weights.data), __real_free(c.mask.data);
}

/* ---- attn_sdpa_backward ------------------------------------------------------ */

typedef struct backward_case {
    attn_tensor q, k, v, mask, out, lse, dout, g[4];
    attn_sdpa_options o;
} backward_case;

static attn_status run_backward(void *ctx, attn_error *err) {
    backward_case *c = ctx;
    return attn_sdpa_backward(&c->g[0], &c->g[1], &c->g[2], &c->g[3], &c->dout, &c->q, &c->k, &c->v, &c->out,
                              &c->lse, &c->o, err);
}

static void backward_subject(attn_dtype dt) {
    backward_case c;
    memset(&c, 0, sizeof c);
    c.q = tensor(dt, 4, 20, 8), c.k = tensor(dt, 2, 30, 8), c.v = tensor(dt, 2, 30, 6);
    c.mask = tensor(dt, 1, 20, 30);
    c.o = attn_sdpa_options_default();
    c.o.mask = &c.mask, c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.o.rope = subject_rope;
    c.out = tensor(dt, 4, 20, 6), c.dout = tensor(dt, 4, 20, 6);
    int64_t sl[2] = {4, 20};
    attn_tensor_init(&c.lse, __real_malloc(80 * attn_dtype_size(dt)), dt, 2, sl, NULL, NULL);
    attn_sdpa(&c.out, &c.lse, NULL, &c.q, &c.k, &c.v, &c.o, NULL);
    c.g[0] = tensor(dt, 4, 20, 8), c.g[1] = tensor(dt, 2, 30, 8), c.g[2] = tensor(dt, 2, 30, 6);
    c.g[3] = tensor(dt, 1, 20, 30);
    subject s = {subject_rope ? "sdpa_backward_f32_rope" : dt == ATTN_F32 ? "sdpa_backward_f32" : "sdpa_backward_f64",
                 run_backward, &c,
                 {c.g[0].data, c.g[1].data, c.g[2].data}, {0, 0, 0}, NULL};
    for (int i = 0; i < 3; i++) s.output_bytes[i] = (size_t)attn_tensor_numel(&c.g[i]) * attn_dtype_size(dt);
    test_subject(&s);
    attn_tensor *all[] = {&c.q, &c.k, &c.v, &c.mask, &c.out, &c.lse, &c.dout, &c.g[0], &c.g[1], &c.g[2], &c.g[3]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
}

/* ---- attn_sdpa_varlen: every sequence's memory before any row ------------- */

typedef struct varlen_case {
    attn_tensor q, k, v, out, lse;
    int64_t cu_q[5], cu_k[5];
    attn_sdpa_options o;
} varlen_case;

static attn_status run_varlen(void *ctx, attn_error *err) {
    varlen_case *c = ctx;
    return attn_sdpa_varlen(&c->out, &c->lse, &c->q, &c->k, &c->v, c->cu_q, c->cu_k, 4, NULL, &c->o, err);
}

/* Sequences for flash (30 queries), decode (2 queries against 2000 keys),
 * none and flash again: the flash sequences run before the decode one, so
 * a decode whose scratch could not be had would leave their rows written. */
static void varlen_subject(attn_dtype dt) {
    varlen_case c;
    memset(&c, 0, sizeof c);
    static const int64_t CQ[5] = {0, 30, 32, 32, 40}, CK[5] = {0, 40, 2040, 2050, 2070};
    memcpy(c.cu_q, CQ, sizeof CQ), memcpy(c.cu_k, CK, sizeof CK);
    c.q = tensor(dt, 40, 4, 16), c.k = tensor(dt, 2070, 2, 16), c.v = tensor(dt, 2070, 2, 16);
    c.out = tensor(dt, 40, 4, 16);
    int64_t sl[2] = {40, 4};
    attn_tensor_init(&c.lse, __real_malloc(160 * 4), ATTN_F32, 2, sl, NULL, NULL);
    c.o = attn_sdpa_options_default();
    c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    subject s = {dt == ATTN_F32 ? "sdpa_varlen_flash_and_decode_f32" : "sdpa_varlen_flash_and_decode_f16_q", run_varlen,
                 &c, {c.out.data, c.lse.data}, {(size_t)(40 * 4 * 16) * attn_dtype_size(dt), 160 * 4, 0}, NULL};
    test_subject(&s);
    attn_tensor *all[] = {&c.q, &c.k, &c.v, &c.out, &c.lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
}

/* The same over pages a caller keeps (attn_kv_paged_attend, the path of
 * attn_kv_pages_attend): 30 queries against 40 positions (flash), 2
 * against 2000 (decode). */
typedef struct paged_case {
    attn_kv_paged_view w;
    attn_tensor q, out, lse;
    int64_t cu[3];
} paged_case;

static attn_status run_paged(void *ctx, attn_error *err) {
    paged_case *c = ctx;
    return attn_kv_paged_attend(&c->out, &c->lse, &c->q, c->cu, &c->w, NULL, NULL, err);
}

static void paged_subject(void) {
    enum { P = 16, NP = 128, HK = 2, E = 16 };
    static int32_t table[2 * NP];
    static int64_t lengths[2] = {40, 2000};
    for (int i = 0; i < NP; i++) table[i] = i, table[NP + i] = NP - 1 - i;
    attn_tensor kp = tensor(ATTN_F32, NP, HK, P * E), vp = tensor(ATTN_F32, NP, HK, P * E);
    paged_case c;
    memset(&c, 0, sizeof c);
    c.w = attn_kv_paged_view_default();
    c.w.heads = HK, c.w.key_dim = c.w.value_dim = E, c.w.page_size = P, c.w.num_pages = NP;
    c.w.num_sequences = 2, c.w.lengths = lengths, c.w.page_table = table, c.w.table_stride = NP;
    c.w.k_pages = kp.data, c.w.v_pages = vp.data;
    c.cu[0] = 0, c.cu[1] = 30, c.cu[2] = 32;
    c.q = tensor(ATTN_F32, 32, 4, E), c.out = tensor(ATTN_F32, 32, 4, E);
    int64_t sl[2] = {32, 4};
    attn_tensor_init(&c.lse, __real_malloc(128 * 4), ATTN_F32, 2, sl, NULL, NULL);
    subject s = {"kv_paged_attend_flash_and_decode", run_paged, &c, {c.out.data, c.lse.data}, {32 * 4 * E * 4, 128 * 4, 0},
                 NULL};
    test_subject(&s);
    attn_tensor *all[] = {&kp, &vp, &c.q, &c.out, &c.lse};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
}

/* ---- attn_sdpa_varlen_backward: every sequence's memory before any gradient ---- */

typedef struct varlen_backward_case {
    attn_tensor q, k, v, out, lse, dout, g[3];
    int64_t cu_q[4], cu_k[4];
    attn_sdpa_options o;
    size_t bytes; /* attn_sdpa_varlen_backward_workspace_size's answer */
} varlen_backward_case;

static attn_status run_varlen_backward(void *ctx, attn_error *err) {
    varlen_backward_case *c = ctx;
    return attn_sdpa_varlen_backward(&c->g[0], &c->g[1], &c->g[2], &c->dout, &c->q, &c->k, &c->v, &c->out, &c->lse,
                                     c->cu_q, c->cu_k, 3, NULL, &c->o, err);
}

/* The size query makes the sequences' plans in malloc's memory to measure them. */
static attn_status run_varlen_backward_size(void *ctx, attn_error *err) {
    varlen_backward_case *c = ctx;
    return attn_sdpa_varlen_backward_workspace_size(&c->bytes, &c->g[0], &c->g[1], &c->g[2], &c->dout, &c->q, &c->k,
                                                    &c->v, &c->out, &c->lse, c->cu_q, c->cu_k, 3, NULL, &c->o, err);
}

/* Three sequences of 20, 7 and 33 queries against 30, 9 and 40 keys,
 * (total, H, E) packed, GQA, causal. */
static void varlen_backward_subject(attn_dtype dt) {
    varlen_backward_case c;
    memset(&c, 0, sizeof c);
    static const int64_t CQ[4] = {0, 20, 27, 60}, CK[4] = {0, 30, 39, 79};
    memcpy(c.cu_q, CQ, sizeof CQ), memcpy(c.cu_k, CK, sizeof CK);
    c.q = tensor(dt, 60, 4, 8), c.k = tensor(dt, 79, 2, 8), c.v = tensor(dt, 79, 2, 6);
    c.out = tensor(dt, 60, 4, 6), c.dout = tensor(dt, 60, 4, 6);
    int64_t sl[2] = {60, 4};
    attn_tensor_init(&c.lse, __real_malloc(240 * attn_dtype_size(dt)), dt, 2, sl, NULL, NULL);
    c.o = attn_sdpa_options_default();
    c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_sdpa_varlen(&c.out, &c.lse, &c.q, &c.k, &c.v, c.cu_q, c.cu_k, 3, NULL, &c.o, NULL);
    c.g[0] = tensor(dt, 60, 4, 8), c.g[1] = tensor(dt, 79, 2, 8), c.g[2] = tensor(dt, 79, 2, 6);
    subject s = {dt == ATTN_F32 ? "sdpa_varlen_backward_f32" : "sdpa_varlen_backward_f64", run_varlen_backward, &c,
                 {c.g[0].data, c.g[1].data, c.g[2].data}, {0, 0, 0}, NULL};
    for (int i = 0; i < 3; i++) s.output_bytes[i] = (size_t)attn_tensor_numel(&c.g[i]) * attn_dtype_size(dt);
    test_subject(&s);
    subject size = {dt == ATTN_F32 ? "sdpa_varlen_backward_workspace_size_f32" : "sdpa_varlen_backward_workspace_size_f64",
                    run_varlen_backward_size, &c, {&c.bytes, NULL, NULL}, {sizeof c.bytes, 0, 0}, NULL};
    test_subject(&size);
    attn_tensor *all[] = {&c.q, &c.k, &c.v, &c.out, &c.lse, &c.dout, &c.g[0], &c.g[1], &c.g[2]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
}

/* ---- attn_mha_cached_batch: a failed step leaves the lengths ---------------- */

enum { CBE = 8 };
typedef struct cached_batch_case {
    float w[3 * CBE * CBE], ow[CBE * CBE], x[9 * CBE], out[9 * CBE];
    attn_tensor tw, tow, tx, tout;
    attn_mha_params p;
    void *memory;
    attn_kv_cache *cache;
    int64_t lengths[3], rows[2], cu[3];
} cached_batch_case;

/* Rows 2 and 0 of a 3-row cache, holding 4 and 0 positions, get 5 and 4
 * more. A failure must leave the lengths as they were: else the call's
 * status is turned into one test_subject reports. */
static attn_status run_cached_batch(void *ctx, attn_error *err) {
    cached_batch_case *c = ctx;
    int64_t before[3];
    memcpy(before, c->lengths, sizeof before);
    attn_status st = attn_mha_cached_batch(&c->tout, &c->tx, c->cu, c->rows, 2, c->cache, c->lengths, NULL, &c->p, NULL, err);
    if (st && memcmp(before, c->lengths, sizeof before)) {
        snprintf(err->message, sizeof err->message, "a failed step changed the lengths");
        return ATTN_ERR_ARGUMENT;
    }
    return st;
}

static void reset_lengths(void *ctx) {
    cached_batch_case *c = ctx;
    c->lengths[0] = 0, c->lengths[1] = 0, c->lengths[2] = 4;
}

/* keys: 0 for f32 rows; ATTN_Q4C for keys per channel (values f16, a
 * residual of 32 f16 positions), whose failed steps also put the residual
 * keys back, from a copy the step allocates. */
static void cached_batch_subject(attn_dtype keys) {
    static cached_batch_case c;
    for (int i = 0; i < 3 * CBE * CBE; i++) c.w[i] = (float)uniform() - 0.5f;
    for (int i = 0; i < CBE * CBE; i++) c.ow[i] = (float)uniform() - 0.5f;
    for (int i = 0; i < 9 * CBE; i++) c.x[i] = (float)uniform() - 0.5f;
    int64_t ws[2] = {3 * CBE, CBE}, os[2] = {CBE, CBE}, xs[2] = {9, CBE};
    attn_tensor_init(&c.tw, c.w, ATTN_F32, 2, ws, NULL, NULL), attn_tensor_init(&c.tow, c.ow, ATTN_F32, 2, os, NULL, NULL);
    attn_tensor_init(&c.tx, c.x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&c.tout, c.out, ATTN_F32, 2, xs, NULL, NULL);
    c.p = attn_mha_params_default();
    c.p.embed_dim = CBE, c.p.num_heads = 2, c.p.in_proj_weight = &c.tw, c.p.out_proj_weight = &c.tow;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 3, d.heads = 2, d.capacity = 16, d.key_dim = d.value_dim = CBE / 2;
    if (keys) d.key_dtype = keys, d.dtype = ATTN_F16, d.capacity = 64, d.residual = 32;
    size_t bytes;
    attn_kv_cache_bytes(&bytes, &d, NULL);
    c.memory = __real_malloc(bytes);
    memset(c.memory, 0, bytes);
    if (attn_kv_cache_init(&c.cache, c.memory, bytes, &d, NULL)) {
        check(false, "mha_cached_batch_cache_init", "keys %s", attn_dtype_name(keys));
        __real_free(c.memory);
        return;
    }
    c.rows[0] = 2, c.rows[1] = 0, c.cu[0] = 0, c.cu[1] = 5, c.cu[2] = 9;
    reset_lengths(&c);
    subject s = {keys ? "mha_cached_batch_q4c_keys" : "mha_cached_batch", run_cached_batch, &c, {c.out}, {sizeof c.out}, reset_lengths};
    test_subject(&s);
    __real_free(c.memory);
}

/* A row whose length its caller lowered (draft tokens rejected) over keys
 * per channel, without a residual: filled to 100, lowered to 40, then a
 * step of 30 positions, which takes the row past 64 and so quantizes the
 * group of 32 .. 63 into the slot the cut had emptied. Failing at each of
 * its allocations in turn, the step must leave the row as its next step
 * finds it without the failure: that step's out bitwise. The window and
 * count put back from before the cut read the new keys' group as the
 * positions 32 .. 39 it had held (outputs off by about 3e-3). */
enum { LE = 32, L_FILL = 100, L_LOW = 40, L_STEP = 30, L_NEXT = 8 };
typedef struct lowered_case {
    float w[3 * LE * LE], ow[LE * LE], fill[L_FILL * LE], step[L_STEP * LE], next[L_NEXT * LE];
    float out_fill[L_FILL * LE], out_step[L_STEP * LE];
    attn_tensor tw, tow;
    attn_mha_params p;
    void *memory;
    attn_kv_cache *cache;
    int64_t lengths[2];
} lowered_case;

static attn_status lowered_call(lowered_case *c, float *x, float *out, int64_t n, attn_error *err) {
    int64_t xs[2] = {n, LE}, cu[2] = {0, n}, rows[1] = {1};
    attn_tensor tx, to;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
    return attn_mha_cached_batch(&to, &tx, cu, rows, 1, c->cache, c->lengths, NULL, &c->p, NULL, err);
}

/* A fresh cache with row 1 filled to L_FILL and lowered to L_LOW. */
static bool lowered_setup(lowered_case *c, attn_error *err) {
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 2, d.heads = 2, d.capacity = 128, d.key_dim = d.value_dim = LE / 2;
    d.dtype = ATTN_F16, d.key_dtype = ATTN_Q4C, d.residual = 0;
    size_t bytes;
    fail_at = 0;
    if (attn_kv_cache_bytes(&bytes, &d, err) || !(c->memory = __real_malloc(bytes))) return false;
    memset(c->memory, 0, bytes);
    c->lengths[0] = c->lengths[1] = 0;
    if (attn_kv_cache_init(&c->cache, c->memory, bytes, &d, err) ||
        lowered_call(c, c->fill, c->out_fill, L_FILL, err)) {
        __real_free(c->memory);
        return false;
    }
    c->lengths[1] = L_LOW;
    return true;
}

static void cached_batch_lowered(void) {
    static lowered_case c;
    static float want[L_NEXT * LE], got[L_NEXT * LE];
    /* -0.5 .. 0.5: scores of a few units, so that no softmax is one-hot and
     * a key's last bits show in out */
    for (int i = 0; i < 3 * LE * LE; i++) c.w[i] = (float)uniform() * 0.5f;
    for (int i = 0; i < LE * LE; i++) c.ow[i] = (float)uniform() * 0.5f;
    for (int i = 0; i < L_FILL * LE; i++) c.fill[i] = (float)uniform() * 0.5f;
    for (int i = 0; i < L_STEP * LE; i++) c.step[i] = (float)uniform() * 0.5f;
    for (int i = 0; i < L_NEXT * LE; i++) c.next[i] = (float)uniform() * 0.5f;
    int64_t ws[2] = {3 * LE, LE}, os[2] = {LE, LE};
    attn_tensor_init(&c.tw, c.w, ATTN_F32, 2, ws, NULL, NULL), attn_tensor_init(&c.tow, c.ow, ATTN_F32, 2, os, NULL, NULL);
    c.p = attn_mha_params_default();
    c.p.embed_dim = LE, c.p.num_heads = 2, c.p.in_proj_weight = &c.tw, c.p.out_proj_weight = &c.tow;
    attn_error err;
    const char *name = "mha_cached_batch_q4c_lowered_row_after_a_failed_step";
    if (!lowered_setup(&c, &err) || lowered_call(&c, c.next, want, L_NEXT, &err)) {
        check(false, name, "setup: %s", err.message);
        return;
    }
    __real_free(c.memory);
    int failures = 0, wrong = 0;
    long first_wrong = 0;
    for (long k = 1;; k++) {
        if (!lowered_setup(&c, &err)) {
            check(false, name, "setup: %s", err.message);
            return;
        }
        n_allocs = 0, fail_at = k;
        attn_status st = lowered_call(&c, c.step, c.out_step, L_STEP, &err);
        fail_at = 0;
        if (st == ATTN_OK) {
            __real_free(c.memory);
            break;
        }
        failures++;
        bool same = st == ATTN_ERR_NO_MEMORY && c.lengths[1] == L_LOW && !lowered_call(&c, c.next, got, L_NEXT, &err) &&
                    !memcmp(got, want, sizeof got);
        if (!same && !wrong++) first_wrong = k;
        __real_free(c.memory);
    }
    check(failures > 0 && !wrong, name, "%d of %d failed steps left the row otherwise than the lowered length has it "
          "(first: allocation %ld failing)", wrong, failures, first_wrong);
}

/* ---- attn_mha and attn_mha_backward ---------------------------------------- */

/* A seq-first batch (L, N, E) = (6, 2, 8), 2 heads, packed projections with
 * biases, bias_kv, a bool key padding mask and the per-head weights: every
 * allocation of the layer, forward or backward. */
typedef struct mha_case {
    attn_tensor x, out, weights, kpm, win, bin, wout, bout, bk, bv, dout, dx, dwin, dwout, dbk;
    attn_mha_params p;
    attn_mha_options o;
    bool backward;
} mha_case;

static attn_status run_mha(void *ctx, attn_error *err) {
    mha_case *c = ctx;
    if (!c->backward) return attn_mha(&c->out, &c->weights, &c->x, &c->x, &c->x, &c->p, &c->o, err);
    attn_mha_params g = attn_mha_params_default();
    g.in_proj_weight = &c->dwin, g.out_proj_weight = &c->dwout, g.bias_k = &c->dbk;
    return attn_mha_backward(&c->dx, NULL, NULL, &g, &c->dout, &c->x, &c->x, &c->x, &c->p, &c->o, err);
}

/* attn_mha_workspace_size calls no allocator (the layer's buffers are
 * only counted), so a call without a workspace allocates one block, its
 * measured workspace; in that workspace the call allocates nothing and
 * gives the same bits. */
static void measure_mha(mha_case *c, const char *name) {
    attn_error err;
    size_t ws = 0, bytes = (size_t)attn_tensor_numel(&c->out) * attn_dtype_size(c->out.dtype);
    n_allocs = 0;
    attn_status st = attn_mha_workspace_size(&ws, &c->out, &c->weights, &c->x, &c->x, &c->x, &c->p, &c->o, &err);
    long measuring = n_allocs;
    n_allocs = 0;
    if (!st) st = run_mha(c, &err);
    long call = n_allocs;
    unsigned char *want = __real_malloc(bytes), *mem = __real_malloc(ws ? ws : 1);
    memcpy(want, c->out.data, bytes);
    memset(c->out.data, 0, bytes);
    attn_context ctx = attn_context_default();
    ctx.workspace = mem, ctx.workspace_size = ws, c->o.context = &ctx;
    n_allocs = 0;
    if (!st) st = run_mha(c, &err);
    long in_workspace = n_allocs;
    c->o.context = NULL;
    bool same = memcmp(want, c->out.data, bytes) == 0;
    char full[160];
    snprintf(full, sizeof full, "%s_measures_its_workspace_without_allocating", name);
    check(!st && measuring == 0 && call == 1 && in_workspace == 0 && same, full,
          "%s; measuring made %ld allocations, the call %ld (want 1), the call in the workspace %ld; outputs %s",
          st ? err.message : "calls ok", measuring, call, in_workspace, same ? "agree" : "differ");
    __real_free(want), __real_free(mem);
}

static void mha_subject(attn_dtype dt, bool backward) {
    mha_case c;
    memset(&c, 0, sizeof c);
    int64_t E = 8;
    c.x = tensor(dt, 6, 2, E), c.out = tensor(dt, 6, 2, E), c.weights = tensor(dt, 2 * 2, 6, 6 + 1);
    int64_t sw[4] = {2, 2, 6, 7}; /* (N, Hq, L, S + 1) */
    attn_tensor_init(&c.weights, c.weights.data, dt, 4, sw, NULL, NULL);
    c.win = tensor(dt, 1, 3 * E, E), c.bin = tensor(dt, 1, 1, 3 * E), c.wout = tensor(dt, 1, E, E);
    c.bout = tensor(dt, 1, 1, E), c.bk = tensor(dt, 1, 1, E), c.bv = tensor(dt, 1, 1, E), c.kpm = tensor(ATTN_BOOL, 1, 2, 6);
    c.dout = tensor(dt, 6, 2, E), c.dx = tensor(dt, 6, 2, E), c.dwin = tensor(dt, 1, 3 * E, E), c.dwout = tensor(dt, 1, E, E);
    c.dbk = tensor(dt, 1, 1, E);
    attn_tensor *squeeze[] = {&c.win, &c.wout, &c.kpm, &c.dwin, &c.dwout}, *flat[] = {&c.bin, &c.bout};
    for (size_t i = 0; i < 5; i++) /* (1, a, b) -> (a, b) */
        attn_tensor_init(squeeze[i], squeeze[i]->data, squeeze[i]->dtype, 2, squeeze[i]->shape + 1, NULL, NULL);
    for (size_t i = 0; i < 2; i++) attn_tensor_init(flat[i], flat[i]->data, dt, 1, flat[i]->shape + 2, NULL, NULL);
    c.p = attn_mha_params_default(), c.o = attn_mha_options_default();
    c.p.embed_dim = E, c.p.num_heads = 2, c.p.in_proj_weight = &c.win, c.p.in_proj_bias = &c.bin;
    c.p.out_proj_weight = &c.wout, c.p.out_proj_bias = &c.bout, c.p.bias_k = &c.bk, c.p.bias_v = &c.bv;
    c.o.key_padding_mask = &c.kpm, c.o.average_attn_weights = 0;
    ((unsigned char *)c.kpm.data)[0] = 0; /* a visible key in every row */
    c.backward = backward;
    subject s = {backward ? (dt == ATTN_F32 ? "mha_backward_f32" : "mha_backward_f64") : (dt == ATTN_F32 ? "mha_f32" : "mha_f64"),
                 run_mha, &c, {NULL}, {0}, NULL};
    attn_tensor *outs[3] = {&c.out, &c.weights, NULL};
    if (backward) outs[0] = &c.dx, outs[1] = &c.dwin, outs[2] = &c.dbk;
    for (int o = 0; o < 3 && outs[o]; o++)
        s.outputs[o] = outs[o]->data, s.output_bytes[o] = (size_t)attn_tensor_numel(outs[o]) * attn_dtype_size(dt);
    test_subject(&s);
    if (!backward) measure_mha(&c, s.name);
    attn_tensor *all[] = {&c.x, &c.out, &c.weights, &c.kpm, &c.win, &c.bin, &c.wout, &c.bout, &c.bk, &c.bv,
                          &c.dout, &c.dx, &c.dwin, &c.dwout, &c.dbk};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) __real_free(all[i]->data);
}

/* ---- a decode step: packed weights and a workspace ----------------------- */

/* A Llama-style f32 layer (E = 64, 4 query heads over 2 KV heads, separate
 * projections, RoPE), its weights packed once, decoding one token at a time
 * into a cache. With the workspace attn_mha_cached_workspace_size asks for,
 * a step calls no allocator at all, and gives bitwise what the step gives
 * without packing or workspace (a second cache, the same tokens). Without a
 * workspace, each of its allocations failing in turn fails it cleanly. */
typedef struct decode_case {
    attn_tensor x, out, w[4];
    attn_mha_params p;
    attn_mha_options o;
    attn_kv_cache *cache;
    void *cache_mem;
} decode_case;

static attn_status run_decode(void *ctx, attn_error *err) {
    decode_case *c = ctx;
    attn_kv_cache_truncate(c->cache, 0, NULL);
    return attn_mha_cached(&c->out, &c->x, c->cache, &c->p, &c->o, err);
}

static void test_decode_step(const char *tag, attn_dtype dt, attn_dtype key_dtype, int hadamard, int64_t E) {
    enum { H = 4, HKV = 2, STEPS = 5, EMAX = 128 };
    const int64_t D = E / H;
    char name[128];
    decode_case c;
    memset(&c, 0, sizeof c);
    int64_t sx[2] = {1, E}, sq[2] = {E, E}, sk[2] = {HKV * D, E};
    attn_tensor x = tensor(ATTN_F32, 1, STEPS, E);
    for (int t = 0; t < 4; t++) {
        c.w[t] = tensor(ATTN_F32, 1, t == 1 || t == 2 ? HKV * D : E, E);
        attn_tensor_init(&c.w[t], c.w[t].data, ATTN_F32, 2, t == 1 || t == 2 ? sk : sq, NULL, NULL);
    }
    c.p = attn_mha_params_default(), c.o = attn_mha_options_default();
    c.p.embed_dim = E, c.p.num_heads = H, c.p.num_kv_heads = HKV;
    c.p.q_proj_weight = &c.w[0], c.p.k_proj_weight = &c.w[1], c.p.v_proj_weight = &c.w[2], c.p.out_proj_weight = &c.w[3];
    attn_rope_options rope = attn_rope_options_default();
    attn_context ctx = attn_context_default();
    ctx.num_threads = 2;
    c.o.rope = &rope, c.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.o.context = &ctx;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = HKV, d.capacity = key_dtype ? 32 : STEPS; /* keys per channel: groups of 32 positions */
    d.key_dim = d.value_dim = D, d.dtype = dt, d.key_dtype = key_dtype;
    d.hadamard = hadamard;
    size_t cache_bytes = 0, wbytes = 0, ws = 0;
    attn_error err;
    attn_kv_cache *plain;
    void *plain_mem;
    bool ok = attn_kv_cache_bytes(&cache_bytes, &d, &err) == ATTN_OK;
    c.cache_mem = __real_malloc(cache_bytes), plain_mem = __real_malloc(cache_bytes);
    ok = ok && attn_kv_cache_init(&c.cache, c.cache_mem, cache_bytes, &d, &err) == ATTN_OK &&
         attn_kv_cache_init(&plain, plain_mem, cache_bytes, &d, &err) == ATTN_OK &&
         attn_mha_weights_bytes(&wbytes, &c.p, &err) == ATTN_OK;
    void *wmem = __real_malloc(wbytes ? wbytes : 1);
    attn_mha_weights *packed = NULL;
    ok = ok && attn_mha_weights_init(&packed, wmem, wbytes, &c.p, &err) == ATTN_OK;
    c.o.packed = packed;
    float out[EMAX], want[EMAX];
    attn_tensor o1, o2, xt;
    attn_tensor_init(&o1, out, ATTN_F32, 2, sx, NULL, NULL), attn_tensor_init(&o2, want, ATTN_F32, 2, sx, NULL, NULL);
    /* the workspace for the last step, the largest (the attention reads the most keys) */
    for (int t = 0; ok && t < STEPS - 1; t++) {
        attn_tensor_init(&xt, (float *)x.data + t * E, ATTN_F32, 2, sx, NULL, NULL);
        ok = attn_mha_cached(&o1, &xt, c.cache, &c.p, &c.o, &err) == ATTN_OK;
    }
    n_allocs = 0;
    ok = ok && attn_mha_cached_workspace_size(&ws, &o1, &xt, c.cache, &c.p, &c.o, &err) == ATTN_OK;
    snprintf(name, sizeof name, "decode_step%s_measures_its_workspace_without_allocating", tag);
    check(ok && n_allocs == 0, name, "%s; measuring made %ld allocations", ok ? "ok" : err.message, n_allocs);
    /* Measuring takes layouts (attn.h, attn_sdpa_workspace_size): x and out
     * without buffers give the same bytes; the step itself refuses them. */
    attn_tensor xn = xt, on = o1;
    xn.data = on.data = NULL;
    size_t ws_layouts = 0;
    attn_status st = attn_mha_cached_workspace_size(&ws_layouts, &on, &xn, c.cache, &c.p, &c.o, &err);
    snprintf(name, sizeof name, "decode_step%s_measures_null_data_same_bytes", tag);
    check(ok && st == ATTN_OK && ws_layouts == ws, name, "status %d (%s); %zu bytes without data, %zu with", (int)st,
          st ? err.message : "", ws_layouts, ws);
    int64_t before = attn_kv_cache_length(c.cache);
    st = attn_mha_cached(&o1, &xn, c.cache, &c.p, &c.o, &err);
    snprintf(name, sizeof name, "decode_step%s_running_null_data_rejected", tag);
    check(st == ATTN_ERR_NULL && strstr(err.message, "has NULL data") && attn_kv_cache_length(c.cache) == before, name,
          "status %d (%s), cache length %lld (was %lld)", (int)st, st ? err.message : "",
          (long long)attn_kv_cache_length(c.cache), (long long)before);
    ctx.workspace = __real_malloc(ws ? ws : 1), ctx.workspace_size = ws;
    attn_kv_cache_truncate(c.cache, 0, NULL);
    long most = 0;
    bool same = true;
    attn_mha_options plain_o = c.o;
    attn_context plain_ctx = attn_context_default();
    plain_ctx.num_threads = 2, plain_o.context = &plain_ctx, plain_o.packed = NULL;
    for (int t = 0; ok && t < STEPS; t++) {
        attn_tensor_init(&xt, (float *)x.data + t * E, ATTN_F32, 2, sx, NULL, NULL);
        n_allocs = 0;
        ok = attn_mha_cached(&o1, &xt, c.cache, &c.p, &c.o, &err) == ATTN_OK;
        most = n_allocs > most ? n_allocs : most;
        ok = ok && attn_mha_cached(&o2, &xt, plain, &c.p, &plain_o, &err) == ATTN_OK;
        same &= memcmp(out, want, (size_t)E * sizeof *out) == 0;
    }
    snprintf(name, sizeof name, "decode_step%s_packed_with_workspace_allocates_nothing", tag);
    check(ok && most == 0 && same, name,
          "%s; at most %ld allocations in a step; packed and plain steps %s", ok ? "calls ok" : err.message, most,
          same ? "agree" : "differ");
    /* too small a workspace (half): the workspace error, the cache as it was */
    ctx.workspace_size = ws / 2;
    int64_t length = attn_kv_cache_length(c.cache);
    attn_kv_cache_truncate(c.cache, STEPS - 1, NULL);
    st = attn_mha_cached(&o1, &xt, c.cache, &c.p, &c.o, &err);
    snprintf(name, sizeof name, "decode_step%s_workspace_too_small", tag);
    check(st == ATTN_ERR_WORKSPACE && attn_kv_cache_length(c.cache) == STEPS - 1, name,
          "status %d (%s), cache length %lld (was %lld)", (int)st, err.message, (long long)attn_kv_cache_length(c.cache),
          (long long)length);
    __real_free(ctx.workspace);
    /* without a workspace: every allocation failing in turn */
    c.o.context = NULL, c.x = xt, c.out = o1;
    snprintf(name, sizeof name, "mha_cached%s_f32_packed", tag);
    subject s = {name, run_decode, &c, {out}, {(size_t)E * sizeof *out}, NULL};
    test_subject(&s);
    for (int t = 0; t < 4; t++) __real_free(c.w[t].data);
    __real_free(x.data), __real_free(wmem), __real_free(c.cache_mem), __real_free(plain_mem);
}

/* ---- additive attention and the softmax of rows ---------------------------- */

static double add_out[6];
static attn_status run_additive(void *ctx, attn_error *err) {
    (void)ctx;
    static const double q[4] = {1, 2, 3, 4}, k[6] = {1, 0, 0, 1, 1, 1}, w[4] = {1, 0, 0, 1}, v[2] = {1, 1};
    return attn_additive_scores(add_out, q, 2, k, 3, 2, w, w, v, 2, err);
}
static attn_status run_softmax_rows(void *ctx, attn_error *err) {
    (void)ctx;
    static double w[6];
    return attn_softmax_rows(w, add_out, 2, 3, 1, err);
}

/* ---- .npy ------------------------------------------------------------------ */

typedef struct npy_case {
    attn_tensor t;
    const void *bytes;
    size_t size;
    const char *path;
} npy_case;

static attn_status run_npy_parse(void *ctx, attn_error *err) {
    npy_case *c = ctx;
    return attn_npy_parse(&c->t, c->bytes, c->size, err);
}
static attn_status run_npy_read(void *ctx, attn_error *err) {
    npy_case *c = ctx;
    return attn_npy_read(&c->t, c->path, err);
}
static void release_npy(void *ctx) { attn_npy_free(&((npy_case *)ctx)->t); }

/* ---- the explainer and the scaling experiment ------------------------------ */

typedef struct explain_case {
    attn_explain ex;
    attn_explain_input in;
} explain_case;

static attn_status run_explain(void *ctx, attn_error *err) {
    explain_case *c = ctx;
    return attn_explain_run(&c->ex, &c->in, err);
}
static void release_explain(void *ctx) { attn_explain_free(&((explain_case *)ctx)->ex); }

static double train_w[3][32], train_loss[3];
static attn_status run_train(void *ctx, attn_error *err) {
    (void)ctx;
    attn_train_options o = attn_train_options_default();
    o.steps = 3, o.batch = 2;
    return attn_train_head(train_w[0], train_w[1], train_w[2], train_loss, NULL, &o, err);
}

static attn_scaling_row scaling_row;
static attn_status run_scaling(void *ctx, attn_error *err) {
    (void)ctx;
    return attn_scaling_measure(&scaling_row, 64, 300, 16, 1, err);
}

int main(void) {
    seed = test_seed(VALUES_SEED); /* seed.h: other values under ATTN_TEST_SEED */
    /* attn_sdpa on each kernel, and the two other entry points. */
    sdpa_subject("sdpa_f64_exact", ATTN_F64, ATTN_F64, 2, 40, 50, 8, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_TOP_LEFT, 1);
    sdpa_subject("sdpa_f32_flash", ATTN_F32, ATTN_F32, 4, 100, 130, 16, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_BOTTOM_RIGHT, 2);
    sdpa_subject("sdpa_f32_decode", ATTN_F32, ATTN_F32, 4, 2, 5000, 16, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_NONE, 2);
    sdpa_subject("sdpa_f32_f16_kv", ATTN_F32, ATTN_F16, 2, 50, 60, 8, 0, 0, 0, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_NONE, 2);
    sdpa_subject("sdpa_f32_bf16_compute", ATTN_F32, ATTN_F32, 2, 50, 60, 8, 0, 0, 0, ATTN_COMPUTE_BF16,
                 ATTN_CAUSAL_NONE, 2);
    sdpa_subject("sdpa_f32_with_weights", ATTN_F32, ATTN_F32, 2, 30, 40, 8, 0, 1, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_NONE, 1);
    sdpa_subject("sdpa_reference", ATTN_F64, ATTN_F64, 2, 30, 40, 8, 1, 1, 0, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_NONE, 1);
    sdpa_subject("scores", ATTN_F32, ATTN_F32, 2, 30, 40, 8, 2, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_TOP_LEFT, 1);
    /* A 16-bit q: its f32 copies and out's come from malloc, or from the workspace. */
    sdpa_subject("sdpa_f16_q_flash", ATTN_F16, ATTN_F16, 4, 100, 130, 16, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_BOTTOM_RIGHT, 2);
    sdpa_subject("sdpa_f16_q_decode", ATTN_F16, ATTN_F16, 4, 2, 5000, 16, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_NONE, 2);
    test_varlen_plan_run();
    test_paged_plan_run();
    test_paged_plan_run_rotated();
    backward_subject(ATTN_F64);
    backward_subject(ATTN_F32);
    varlen_subject(ATTN_F32);
    varlen_subject(ATTN_F16);
    paged_subject();
    varlen_backward_subject(ATTN_F64);
    varlen_backward_subject(ATTN_F32);
    cached_batch_subject(0);
    cached_batch_subject(ATTN_Q4C);
    cached_batch_lowered();
    attn_rope_options rope = attn_rope_options_default();
    subject_rope = &rope;
    sdpa_subject("sdpa_f32_flash_rope", ATTN_F32, ATTN_F32, 4, 100, 130, 16, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_BOTTOM_RIGHT, 2);
    sdpa_subject("sdpa_f64_exact_rope", ATTN_F64, ATTN_F64, 2, 40, 50, 8, 0, 0, 1, ATTN_COMPUTE_F32,
                 ATTN_CAUSAL_TOP_LEFT, 1);
    backward_subject(ATTN_F32);
    subject_rope = NULL;
    for (int b = 0; b < 2; b++) mha_subject(ATTN_F64, b), mha_subject(ATTN_F32, b);
    test_decode_step("", ATTN_F32, 0, 0, 64);
    /* keys stored with the Hadamard rotation: q's turned copy comes from the workspace too */
    test_decode_step("_q8_hadamard", ATTN_Q8, 0, 1, 128);
    test_decode_step("_q4c_keys", ATTN_Q4_1, ATTN_Q4C, 0, 128); /* keys per channel: measured as attended */
    subject additive = {"additive_scores", run_additive, NULL, {add_out}, {sizeof add_out}, NULL};
    test_subject(&additive);
    subject softmax = {"softmax_rows", run_softmax_rows, NULL, {NULL}, {0}, NULL};
    test_subject(&softmax);

    /* .npy: parse bytes, read a file. */
    static const char NPY[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (2, 3), }";
    unsigned char bytes[128 + 24];
    memset(bytes, ' ', 128);
    memcpy(bytes, NPY, sizeof NPY - 1);
    bytes[127] = '\n';
    memset(bytes + 128, 0, 24);
    npy_case nc = {{0}, bytes, sizeof bytes, NULL};
    subject parse = {"npy_parse", run_npy_parse, &nc, {NULL}, {0}, release_npy};
    test_subject(&parse);
    char path[] = "/tmp/attn_alloc_" "XX" "XX" "XX"; /* a mkstemp template */
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (f && fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes && fclose(f) == 0) {
        nc.path = path;
        subject read = {"npy_read", run_npy_read, &nc, {NULL}, {0}, release_npy};
        test_subject(&read);
    } else {
        check(0, "no_memory_npy_read", "cannot write %s", path);
    }
    remove(path);

    /* The explainer on the toy model, and the scaling experiment. */
    explain_case ec;
    memset(&ec, 0, sizeof ec);
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    int n = 0;
    static double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL], wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K],
        wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wv[ATTN_TOY_D_MODEL * ATTN_TOY_D_K];
    attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, "the cat sat on the mat", NULL);
    attn_toy_embed(x, tok, n, NULL);
    attn_toy_weights(wq, wk, wv, ATTN_TOY_WIRED, NULL);
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv,
                             ATTN_EXPLAIN_QKV, 1, 0, 0, ATTN_EXPLAIN_SINUSOIDAL, NULL, 0};
    ec.in = in;
    subject explain = {"explain_run", run_explain, &ec, {NULL}, {0}, release_explain};
    test_subject(&explain);
    subject scaling = {"scaling_measure", run_scaling, NULL, {&scaling_row}, {sizeof scaling_row}, NULL};
    test_subject(&scaling);
    subject train = {"train_head", run_train, NULL, {train_w[0], train_w[2], train_loss},
                     {sizeof train_w[0], sizeof train_w[2], sizeof train_loss}, NULL};
    test_subject(&train);

    attn_shutdown();
    printf("# %d failed\n", n_failed);
    return n_failed ? 1 : 0;
}
