/* test_threads.c -- the library as a multi-threaded server embeds it: many
 * caller threads at once, each on its own data, through every public entry
 * point that runs on the pool (attn_sdpa's flash and decode kernels with
 * dropout, and in the bf16 compute mode; attn_sdpa_backward; the layer
 * forward and backward; a plan; a quantized KV cache, a cache of keys
 * quantized per channel, a paged pool; attn_mha_cached's steps), while
 * another thread changes the process-wide thread count; then a call from
 * inside a pool job, a fork while the callers run, a caller cancelled
 * (pthread_cancel) inside a threaded call, the workers a small job on a
 * wide pool wakes, the threads a plan's first run starts, and every entry
 * point on a caller's thread whose stack is attn.h's ATTN_STACK_BOUND
 * above the thread's own frames, a guard page below. Every result must be bitwise the one thread's
 * result: each entry point first on 1, 2 and 3 threads, then
 * concurrently. Built under
 * ThreadSanitizer too (build/tsan/test_threads), which reports any race on
 * the library's global state (the pool, the kernel choice, the verbose flag,
 * the CPU count) or a kernel's shared scratch.
 *
 * Prints "ok NAME" or "FAIL NAME: why"; exits 1 if any failed. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "attn.h"
#include "attn_teach.h"
#include "check.h"
#include "../src/base/base.h"
#include "../src/sdpa/sdpa.h" /* attn_verbose_on */

#include <dirent.h>
#include <fcntl.h>
#include <limits.h> /* PTHREAD_STACK_MIN */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_RNG_SEED 77
#include "process.h"
#include "rng.h"

/* A C-contiguous f32 tensor of normal values (zeros with fill 0). */
static attn_tensor f32(int rank, const int64_t *shape, int fill) {
    attn_tensor t;
    attn_tensor_init(&t, NULL, ATTN_F32, rank, shape, NULL, NULL);
    int64_t n = attn_tensor_numel(&t);
    float *p = calloc((size_t)n + 1, sizeof(float));
    for (int64_t i = 0; fill && i < n; i++) p[i] = normal();
    t.data = p;
    return t;
}

static size_t floats(const attn_tensor *t) { return (size_t)attn_tensor_numel(t); }

/* ---- the entry points, each a job that writes its outputs into one buffer */

typedef struct job job;
struct job {
    const char *name;
    size_t n_out; /* floats of all the job's outputs, one after another */
    /* Runs the job on `threads` threads (0: the process-wide number),
     * writing every output into out[0 .. n_out). */
    attn_status (*run)(const job *j, int threads, float *out, attn_error *err);
    attn_tensor t[8];     /* inputs */
    attn_mha_params p, g; /* the layer's parameters; g: its gradients' shapes */
    void *shared;         /* a cache or pool every caller reads */
    int64_t cu[4], seqs[3];
    float *want; /* the result on one thread */
};

static attn_context threads_ctx(int threads) {
    attn_context c = attn_context_default();
    c.num_threads = threads;
    return c;
}

/* An output tensor like `like`, its data at out + *at (then *at moves on). */
static attn_tensor out_at(const attn_tensor *like, float *out, size_t *at) {
    attn_tensor t = *like;
    attn_tensor_init(&t, out + *at, ATTN_F32, like->rank, like->shape, NULL, NULL);
    *at += floats(like);
    return t;
}

/* Flash (L 256 of 512 keys, GQA 4/2) and decode (1 query of 12,000 keys),
 * both with dropout: q, k, v of each; then the flash call again in the
 * bf16 compute mode. */
static attn_status run_sdpa(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.dropout_p = 0.125, o.dropout_seed = 11;
    size_t at = 0;
    attn_status st = ATTN_OK;
    for (int i = 0; !st && i < 3; i++) {
        const attn_tensor *t = &j->t[i == 1 ? 3 : 0];
        if (i == 2) o.compute = ATTN_COMPUTE_BF16;
        attn_tensor y = out_at(t, out, &at), lse;
        int64_t sl[3] = {t->shape[0], t->shape[1], t->shape[2]};
        attn_tensor_init(&lse, out + at, ATTN_F32, 3, sl, NULL, NULL);
        at += (size_t)(sl[0] * sl[1] * sl[2]);
        st = attn_sdpa(&y, &lse, NULL, t, t + 1, t + 2, &o, err);
    }
    return st;
}

/* The backward with dropout: the forward's out and lse, then dq, dk, dv. */
static attn_status run_backward(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c, o.causal = ATTN_CAUSAL_TOP_LEFT, o.dropout_p = 0.25, o.dropout_seed = 5;
    const attn_tensor *q = &j->t[0], *k = &j->t[1], *v = &j->t[2], *dout = &j->t[3];
    size_t at = 0;
    attn_tensor y = out_at(q, out, &at), lse, dq, dk, dv;
    int64_t sl[3] = {q->shape[0], q->shape[1], q->shape[2]};
    attn_tensor_init(&lse, out + at, ATTN_F32, 3, sl, NULL, NULL);
    at += (size_t)(sl[0] * sl[1] * sl[2]);
    dq = out_at(q, out, &at), dk = out_at(k, out, &at), dv = out_at(v, out, &at);
    attn_status st = attn_sdpa(&y, &lse, NULL, q, k, v, &o, err);
    return st ? st : attn_sdpa_backward(&dq, &dk, &dv, NULL, dout, q, k, v, &y, &lse, &o, err);
}

/* The layer (E 64, 4 query heads, 2 KV heads, causal, dropout on the
 * weights): its output, then the input's and parameters' gradients. */
static attn_status run_mha(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options a = attn_sdpa_options_default();
    a.dropout_p = 0.1, a.dropout_seed = 3;
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1, o.causal = ATTN_CAUSAL_TOP_LEFT, o.context = &c, o.attention = &a;
    const attn_tensor *x = &j->t[0], *dout = &j->t[1];
    size_t at = 0;
    attn_tensor y = out_at(x, out, &at), dx = out_at(x, out, &at), g[8];
    attn_mha_params gp = attn_mha_params_default();
    const attn_tensor *shapes[8] = {j->g.q_proj_weight, j->g.k_proj_weight, j->g.v_proj_weight, j->g.out_proj_weight,
                                    j->g.q_proj_bias,   j->g.k_proj_bias,   j->g.v_proj_bias,   j->g.out_proj_bias};
    for (int i = 0; i < 8; i++) g[i] = out_at(shapes[i], out, &at);
    gp.q_proj_weight = &g[0], gp.k_proj_weight = &g[1], gp.v_proj_weight = &g[2], gp.out_proj_weight = &g[3];
    gp.q_proj_bias = &g[4], gp.k_proj_bias = &g[5], gp.v_proj_bias = &g[6], gp.out_proj_bias = &g[7];
    attn_status st = attn_mha(&y, NULL, x, x, x, &j->p, &o, err);
    return st ? st : attn_mha_backward(&dx, NULL, NULL, &gp, dout, x, x, x, &j->p, &o, err);
}

/* A plan of this caller's own, made and run twice (as for two layers). */
static attn_status run_plan(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c, o.causal = ATTN_CAUSAL_TOP_LEFT;
    size_t at = 0, bytes = 0, ws = 0;
    attn_tensor y = out_at(&j->t[0], out, &at);
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, err);
    void *memory = st ? NULL : malloc(bytes), *work = NULL;
    attn_sdpa_plan *plan = NULL;
    if (!st) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &y, NULL, &j->t[0], &j->t[1], &j->t[2], &o, err);
    if (!st) work = malloc(ws ? ws : 1);
    for (int layer = 0; !st && layer < 2; layer++)
        st = attn_sdpa_run(plan, &y, NULL, &j->t[0], &j->t[1], &j->t[2], work, ws, err);
    free(memory), free(work);
    return st;
}

/* Attention to a shared cache (q8 values and keys; then keys quantized per
 * channel), which every caller reads at once: the header allows it. */
static attn_status run_cache(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    size_t at = 0;
    attn_tensor y = out_at(&j->t[0], out, &at);
    return attn_kv_cache_attend(&y, NULL, &j->t[0], j->shared, &o, err);
}

/* Three sequences of a shared f16 paged pool: two decode, one prefill. */
static attn_status run_pages(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    size_t at = 0;
    attn_tensor y = out_at(&j->t[0], out, &at);
    return attn_kv_pages_attend(&y, NULL, &j->t[0], j->cu, j->seqs, 3, j->shared, NULL, &o, err);
}

/* attn_mha_cached token by token into a q4 cache of this caller's own (the
 * cache is written: one per caller), 40 tokens. */
static attn_status run_cached(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1, o.context = &c;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    const attn_tensor *x = &j->t[0];
    int64_t L = x->shape[1], E = x->shape[2];
    d.heads = j->p.num_kv_heads, d.capacity = L, d.key_dim = d.value_dim = E / j->p.num_heads, d.dtype = ATTN_Q4;
    size_t bytes = 0;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, err);
    void *memory = st ? NULL : malloc(bytes);
    attn_kv_cache *cache = NULL;
    if (!st) st = attn_kv_cache_init(&cache, memory, bytes, &d, err);
    for (int64_t t = 0; !st && t < L; t++) {
        attn_tensor xt = *x, yt = *x;
        xt.shape[1] = yt.shape[1] = 1;
        xt.data = (float *)x->data + t * E, yt.data = out + t * E;
        st = attn_mha_cached(&yt, &xt, cache, &j->p, &o, err);
    }
    free(memory);
    return st;
}

/* ---- the jobs' data ------------------------------------------------------ */

enum { N_JOBS = 8 };
static job jobs[N_JOBS];

static void layer_params(job *j, int64_t E, int64_t H, int64_t HKV) {
    int64_t D = E / H, sw[4][2] = {{H * D, E}, {HKV * D, E}, {HKV * D, E}, {E, H * D}},
            sb[4][1] = {{H * D}, {HKV * D}, {HKV * D}, {E}};
    static attn_tensor w[N_JOBS][8];
    attn_tensor *pw = w[j - jobs];
    for (int i = 0; i < 4; i++) pw[i] = f32(2, sw[i], 1), pw[4 + i] = f32(1, sb[i], 1);
    for (int i = 0; i < 4; i++) /* weights of 1/sqrt(E): outputs of unit size */
        for (size_t e = 0; e < floats(&pw[i]); e++) ((float *)pw[i].data)[e] *= 0.125f;
    j->p = attn_mha_params_default();
    j->p.embed_dim = E, j->p.num_heads = H, j->p.num_kv_heads = HKV;
    j->p.q_proj_weight = &pw[0], j->p.k_proj_weight = &pw[1], j->p.v_proj_weight = &pw[2];
    j->p.out_proj_weight = &pw[3], j->p.q_proj_bias = &pw[4], j->p.k_proj_bias = &pw[5];
    j->p.v_proj_bias = &pw[6], j->p.out_proj_bias = &pw[7];
    j->g = j->p;
}

/* A cache of B 1, Hk 2, S positions, E 64: q8, or keys q4c (values f16). */
static void *make_cache(attn_dtype dtype, attn_dtype key_dtype, int64_t S) {
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = 2, d.capacity = 4096, d.key_dim = d.value_dim = 64, d.dtype = dtype, d.key_dtype = key_dtype;
    size_t bytes = 0;
    attn_error err;
    attn_kv_cache *cache = NULL;
    if (attn_kv_cache_bytes(&bytes, &d, &err)) return NULL;
    void *memory = malloc(bytes);
    int64_t sk[3] = {2, S, 64};
    attn_tensor k = f32(3, sk, 1), v = f32(3, sk, 1);
    if (attn_kv_cache_init(&cache, memory, bytes, &d, &err) || attn_kv_cache_append(cache, &k, &v, &err))
        cache = NULL;
    free(k.data), free(v.data);
    return cache;
}

/* An f16 pool of Hk 2, E 32, pages of 16: sequences of 3000, 2500 and 600. */
static void *make_pages(int64_t *seqs) {
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = 2, d.key_dim = d.value_dim = 32, d.dtype = ATTN_F16, d.num_pages = 400, d.max_sequences = 3;
    size_t bytes = 0;
    attn_error err;
    attn_kv_pages *pool = NULL;
    if (attn_kv_pages_bytes(&bytes, &d, &err) || attn_kv_pages_init(&pool, malloc(bytes), bytes, &d, &err))
        return NULL;
    int64_t cu[4] = {0, 3000, 5500, 6100}, sk[3] = {6100, 2, 32};
    attn_tensor k = f32(3, sk, 1), v = f32(3, sk, 1);
    attn_status st = ATTN_OK;
    for (int i = 0; !st && i < 3; i++) st = attn_kv_pages_create(pool, &seqs[i], &err);
    if (!st) st = attn_kv_pages_append(pool, seqs, 3, &k, &v, cu, &err);
    free(k.data), free(v.data);
    return st ? NULL : pool;
}

static void make_jobs(void) {
    job *j = jobs;
    int64_t qf[4] = {2, 4, 256, 32}, kf[4] = {2, 2, 512, 32}, qd[4] = {1, 8, 1, 64}, kd[4] = {1, 2, 12000, 64};
    *j = (job){.name = "sdpa_flash_decode_dropout_bf16", .run = run_sdpa};
    j->t[0] = f32(4, qf, 1), j->t[1] = f32(4, kf, 1), j->t[2] = f32(4, kf, 1);
    j->t[3] = f32(4, qd, 1), j->t[4] = f32(4, kd, 1), j->t[5] = f32(4, kd, 1);
    j->n_out = (size_t)(2 * 2 * 4 * 256 * 33 + 8 * 65);

    j++;
    int64_t qb[4] = {1, 4, 300, 32}, kb[4] = {1, 2, 400, 32};
    *j = (job){.name = "sdpa_backward_dropout", .run = run_backward};
    j->t[0] = f32(4, qb, 1), j->t[1] = f32(4, kb, 1), j->t[2] = f32(4, kb, 1), j->t[3] = f32(4, qb, 1);
    j->n_out = (size_t)(4 * 300 * 32 * 2 + 4 * 300 + 2 * 2 * 400 * 32);

    j++;
    int64_t sx[3] = {2, 160, 64};
    *j = (job){.name = "mha_forward_backward_dropout", .run = run_mha};
    layer_params(j, 64, 4, 2);
    j->t[0] = f32(3, sx, 1), j->t[1] = f32(3, sx, 1);
    j->n_out = 2 * floats(&j->t[0]);
    const attn_tensor *w[8] = {j->p.q_proj_weight, j->p.k_proj_weight, j->p.v_proj_weight, j->p.out_proj_weight,
                               j->p.q_proj_bias,   j->p.k_proj_bias,   j->p.v_proj_bias,   j->p.out_proj_bias};
    for (int i = 0; i < 8; i++) j->n_out += floats(w[i]);

    j++;
    int64_t qp[4] = {1, 4, 900, 32}, kp[4] = {1, 4, 900, 32};
    *j = (job){.name = "plan_run", .run = run_plan};
    j->t[0] = f32(4, qp, 1), j->t[1] = f32(4, kp, 1), j->t[2] = f32(4, kp, 1);
    j->n_out = floats(&j->t[0]);

    j++;
    int64_t qc[3] = {4, 3, 64};
    *j = (job){.name = "kv_cache_q8_attend", .run = run_cache};
    j->t[0] = f32(3, qc, 1), j->shared = make_cache(ATTN_Q8, 0, 4000);
    j->n_out = floats(&j->t[0]);

    j++;
    *j = (job){.name = "kv_cache_q4c_attend", .run = run_cache};
    j->t[0] = f32(3, qc, 1), j->shared = make_cache(ATTN_F16, ATTN_Q4C, 4000);
    j->n_out = floats(&j->t[0]);

    j++;
    int64_t qg[3] = {1 + 1 + 60, 4, 32};
    *j = (job){.name = "kv_pages_attend", .run = run_pages};
    j->t[0] = f32(3, qg, 1), j->shared = make_pages(j->seqs);
    j->cu[0] = 0, j->cu[1] = 1, j->cu[2] = 2, j->cu[3] = 62;
    j->n_out = floats(&j->t[0]);

    j++;
    int64_t xc[3] = {1, 40, 128};
    *j = (job){.name = "mha_cached_q4_steps", .run = run_cached};
    layer_params(j, 128, 4, 2);
    j->t[0] = f32(3, xc, 1);
    j->n_out = floats(&j->t[0]);
}

/* ---- 1, 2 and 3 threads: the same bits ---------------------------------- */

static void test_thread_counts(void) {
    for (int i = 0; i < N_JOBS; i++) {
        job *j = &jobs[i];
        attn_error err = {0};
        j->want = malloc(sizeof(float) * j->n_out);
        float *out = malloc(sizeof(float) * j->n_out);
        attn_status st = j->run(j, 1, j->want, &err);
        int same = 1, t = 2;
        for (; !st && same && t <= 3; t++) {
            memset(out, 0xff, sizeof(float) * j->n_out);
            st = j->run(j, t, out, &err);
            same = !st && memcmp(out, j->want, sizeof(float) * j->n_out) == 0;
        }
        char name[96];
        snprintf(name, sizeof name, "%s_threads_1_2_3_bitwise_identical", j->name);
        check(!st && same, name, "%s", st ? err.message : "results differ between 1 and 2 or 3 threads");
        if (st) j->run = NULL;
        free(out);
    }
}

/* ---- many callers at once ------------------------------------------------ */

enum { CALLERS = 4, ROUNDS = 2 };

typedef struct caller {
    int index;
    atomic_int *done;
    int bad;        /* the first job that failed or differed, -1: none */
    char why[640];
} caller;

static void *caller_main(void *arg) {
    caller *c = arg;
    c->bad = -1;
    for (int r = 0; r < ROUNDS && c->bad < 0; r++)
        for (int n = 0; n < N_JOBS && c->bad < 0; n++) {
            const job *j = &jobs[(n + c->index) % N_JOBS]; /* each caller in its own order */
            if (!j->run) continue;
            float *out = malloc(sizeof(float) * j->n_out);
            attn_error err = {0};
            /* the process-wide count (changing under it), or 2 or 3 of its own */
            attn_status st = j->run(j, (c->index + r) % 3 == 0 ? 0 : 1 + (c->index + r) % 3, out, &err);
            if (st || memcmp(out, j->want, sizeof(float) * j->n_out))
                c->bad = (int)(j - jobs), snprintf(c->why, sizeof c->why, "%s: %s", j->name,
                                                   st ? err.message : "differs from one thread's result");
            free(out);
        }
    atomic_fetch_add(c->done, 1);
    return NULL;
}

/* attn_set_num_threads changing while callers run: 1, 2, 3, the default. */
static void *switcher_main(void *arg) {
    atomic_int *done = arg;
    for (int n = 0; atomic_load(done) < CALLERS; n++) {
        attn_set_num_threads(n % 4);
        (void)attn_get_num_threads();
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
    }
    attn_set_num_threads(0);
    return NULL;
}

static void test_concurrent_callers(void) {
    atomic_int done = 0;
    caller c[CALLERS];
    pthread_t t[CALLERS], sw;
    int made = 0, sw_made = pthread_create(&sw, NULL, switcher_main, &done) == 0;
    for (; made < CALLERS; made++) {
        c[made] = (caller){made, &done, -1, ""};
        if (pthread_create(&t[made], NULL, caller_main, &c[made])) break;
    }
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    atomic_store(&done, CALLERS);
    if (sw_made) pthread_join(sw, NULL);
    int bad = -1;
    for (int i = 0; i < made && bad < 0; i++)
        if (c[i].bad >= 0) bad = i;
    check(made == CALLERS && sw_made && bad < 0, "concurrent_callers_every_entry_point_bitwise",
          "%s", bad >= 0 ? c[bad].why : "a thread could not start");
}

/* ---- a call from inside a pool job -------------------------------------- */

typedef struct nested {
    atomic_int bad;
} nested;

static void nested_item(void *ctx, int64_t item, int worker) {
    nested *n = ctx;
    const job *j = &jobs[item % 2 ? 0 : 2];
    (void)worker;
    if (!j->run) return;
    float *out = malloc(sizeof(float) * j->n_out);
    attn_error err;
    if (j->run(j, 3, out, &err) || memcmp(out, j->want, sizeof(float) * j->n_out)) atomic_fetch_add(&n->bad, 1);
    free(out);
}

/* A threaded call made by a pool job's item (on the caller and on a worker)
 * runs on its own thread, never waits for the pool it is part of. */
static void test_nested_call(void) {
    nested n = {0};
    attn_parallel_for(3, 4, nested_item, &n);
    check(atomic_load(&n.bad) == 0, "call_inside_a_pool_job_bitwise", "%d of 4 calls failed or differed",
          atomic_load(&n.bad));
}

/* ---- fork while the callers run ----------------------------------------- */

enum { FORK_SAME = 0, FORK_DIFFERENT = 1, FORK_CALL_FAILED = 2 };

/* The child of a fork made while other threads are inside calls runs the
 * layer (forward and backward) and a flash call on 3 threads, then joins
 * its own workers (attn_shutdown) and leaves by _exit: the parent's callers'
 * buffers, copied into it with no thread to free them, are not its leaks
 * (LeakSanitizer would report them at exit). An alarm ends a hang. */
static const char *fork_once(char *why, size_t size) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        int code = FORK_SAME;
        for (int i = 0; i < 3 && code == FORK_SAME; i += 2) {
            const job *j = &jobs[i];
            float *out = malloc(sizeof(float) * j->n_out);
            attn_error err;
            if (!j->run || j->run(j, 3, out, &err)) code = FORK_CALL_FAILED;
            else if (memcmp(out, j->want, sizeof(float) * j->n_out)) code = FORK_DIFFERENT;
            free(out);
        }
        attn_shutdown();
        _exit(code);
    }
    int status = 0;
    pid_t got = 0;
    for (int ms = 0; ms < 120000 && pid > 0 && (got = waitpid(pid, &status, WNOHANG)) == 0; ms += 10)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    if (pid <= 0) snprintf(why, size, "fork failed");
    else if (got == 0) kill(pid, SIGKILL), waitpid(pid, &status, 0), snprintf(why, size, "the child hung: killed");
    else if (WIFSIGNALED(status)) snprintf(why, size, "the child died of signal %d", WTERMSIG(status));
    else if (WEXITSTATUS(status) == FORK_DIFFERENT) snprintf(why, size, "the child's result differs");
    else if (WEXITSTATUS(status) == FORK_CALL_FAILED) snprintf(why, size, "the child's call failed");
    else if (WEXITSTATUS(status)) snprintf(why, size, "the child exited with %d", WEXITSTATUS(status));
    else why[0] = 0;
    return why;
}

/* GCC 12's AddressSanitizer does not hold its allocator's locks across
 * fork: a child forked while a caller thread allocates can wait forever on
 * a lock no thread of it holds (seen: every thread of the child in
 * SizeClassAllocator64::GetFromAllocator). That is the sanitizer's, not the
 * library's; glibc's malloc is made consistent for the child. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif

static void test_fork_while_calling(void) {
#ifdef TEST_UNDER_ASAN
    skip("fork_while_callers_run_child_calls", "AddressSanitizer's allocator is not fork-safe while other threads allocate");
    return;
#endif
    if (!child_can_start_threads()) {
        skip("fork_while_callers_run_child_calls", "this ThreadSanitizer runtime cannot start threads in a child");
        return;
    }
    atomic_int done = 0;
    caller c[2];
    pthread_t t[2];
    int made = 0;
    for (; made < 2; made++) {
        c[made] = (caller){made, &done, -1, ""};
        if (pthread_create(&t[made], NULL, caller_main, &c[made])) break;
    }
    char why[128] = "";
    for (int rep = 0; rep < 3 && !*why; rep++) fork_once(why, sizeof why);
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    int bad = made == 2 && c[0].bad < 0 && c[1].bad < 0 ? -1 : c[0].bad >= 0 ? 0 : 1;
    check(!*why && bad < 0, "fork_while_callers_run_child_calls", "%s",
          *why ? why : made < 2 ? "no thread" : bad >= 0 ? c[bad].why : "");
}

/* ---- a caller cancelled while it waits for its workers -------------------
 * pthread_cancel of a thread inside a threaded call: the call's wait for
 * the workers still on its items (pthread_cond_wait) is a cancellation
 * point, and a caller cancelled there ended holding the pool's locks: every
 * later call ran on one thread, and fork() and exit waited forever. The
 * cancel must take effect only once the call has returned, its items all
 * run. Deterministic: the worker's item holds the job open until the
 * cancel has been sent, so the caller is (or will be) waiting in the call
 * when it arrives. In a child (with an alarm), as a failure leaves the
 * pool unusable. */

typedef struct held_job {
    atomic_int worker_started; /* a worker (not the caller) is running an item */
    atomic_int release;        /* the worker's item may return */
    atomic_int items_done;
    atomic_int ended_released; /* the caller's thread ended after the release */
} held_job;

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000 * 1000}, NULL); }

/* A worker's item waits for the release; the caller's item waits (up to
 * 5 s) for a worker to take the other item. */
static void held_item(void *ctx, int64_t item, int worker) {
    held_job *h = ctx;
    (void)item;
    if (worker != 0) {
        atomic_store(&h->worker_started, 1);
        while (!atomic_load(&h->release)) sleep_ms(1);
    } else {
        for (int ms = 0; ms < 5000 && !atomic_load(&h->worker_started); ms++) sleep_ms(1);
    }
    atomic_fetch_add(&h->items_done, 1);
}

/* Run as the thread's cancellation ends it: was the job released by then? */
static void held_caller_ends(void *arg) {
    held_job *h = arg;
    atomic_store(&h->ended_released, atomic_load(&h->release));
}

static void *held_caller(void *arg) {
    held_job *h = arg;
    pthread_cleanup_push(held_caller_ends, h);
    attn_parallel_for(2, 2, held_item, h);
    pthread_testcancel(); /* the cancel sent during the call ends the thread here */
    pthread_cleanup_pop(0);
    return NULL;
}

enum { CANCEL_OK, CANCEL_NO_WORKER, CANCEL_NOT_DEFERRED, CANCEL_POOL_LOST, CANCEL_FORK_FAILED };

static int cancel_child(void) {
    alarm(60);
    held_job h = {0};
    pthread_t t;
    if (pthread_create(&t, NULL, held_caller, &h)) return CANCEL_NO_WORKER;
    for (int ms = 0; ms < 5000 && !atomic_load(&h.worker_started); ms++) sleep_ms(1);
    if (!atomic_load(&h.worker_started)) return CANCEL_NO_WORKER;
    pthread_cancel(t);
    sleep_ms(20); /* time to act on it, were it not deferred */
    atomic_store(&h.release, 1);
    void *result = NULL;
    pthread_join(t, &result);
    if (result != PTHREAD_CANCELED || !atomic_load(&h.ended_released) || atomic_load(&h.items_done) != 2)
        return CANCEL_NOT_DEFERRED;
    /* The pool still serves a call on two threads ... */
    held_job again = {0};
    atomic_store(&again.release, 1);
    attn_parallel_for(2, 2, held_item, &again);
    if (!atomic_load(&again.worker_started)) return CANCEL_POOL_LOST;
    /* ... a fork, whose handlers take the pool's locks, goes through, and
     * so does attn_shutdown (the exit's). */
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return CANCEL_FORK_FAILED;
    attn_shutdown();
    return CANCEL_OK;
}

static void test_cancelled_caller(void) {
    static const char *const NAME = "caller_cancelled_in_a_threaded_call_keeps_the_pool";
    if (!child_can_start_threads()) {
        skip(NAME, "this ThreadSanitizer runtime cannot start threads in a child");
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(cancel_child());
    int status = 0;
    pid_t got = 0;
    for (int ms = 0; ms < 90000 && pid > 0 && (got = waitpid(pid, &status, WNOHANG)) == 0; ms += 10) sleep_ms(10);
    if (pid > 0 && got == 0) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    int code = got == pid && pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    check(code == CANCEL_OK, NAME, "%s",
          code == CANCEL_NO_WORKER      ? "no worker took an item in 5 s (the check could not run)"
          : code == CANCEL_NOT_DEFERRED ? "the cancel ended the caller inside the call, before its items were done"
          : code == CANCEL_POOL_LOST    ? "after the cancel a call ran on one thread: the pool's locks were left held"
          : code == CANCEL_FORK_FAILED  ? "fork after the cancel failed"
          : got == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM
              ? "the child hung (fork or attn_shutdown waited on the pool's locks)"
              : "the child did not exit normally");
}

/* ---- a small job on a wide pool wakes only its own workers ---------------
 * After a call on 64 threads the pool keeps 63 workers. A later call on 2
 * must wake one of them, not all 63 (each would take the pool's lock and
 * spin before it slept again, the cost of that call several times over on
 * a machine with few cores). Counted as the process's voluntary context
 * switches (every thread's, getrusage) over jobs spaced out so that every
 * worker sleeps between them: about 2 a job (the caller's sleep, its
 * helper's), where a wake-up of every worker gives 60 more. */

static void no_op_item(void *ctx, int64_t item, int worker) { (void)ctx, (void)item, (void)worker; }

static long voluntary_switches(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_nvcsw : -1;
}

static void test_small_job_wakes_its_workers(void) {
    static const char *const NAME = "small_job_on_a_wide_pool_wakes_only_its_workers";
    enum { JOBS = 40 };
    attn_shutdown();
    attn_parallel_for(64, 64, no_op_item, NULL); /* 63 workers */
    sleep_ms(50);
    long before = voluntary_switches();
    for (int i = 0; i < JOBS; i++) {
        attn_parallel_for(2, 2, no_op_item, NULL);
        sleep_ms(5); /* past the workers' spin: they sleep */
    }
    long switches = voluntary_switches() - before;
    attn_shutdown();
    if (before < 0 || switches < JOBS) {
        skip(NAME, "getrusage counts no voluntary context switches here");
        return;
    }
    check(switches < 8 * JOBS, NAME, "%ld voluntary context switches over %d jobs on 2 of 64 threads (%.1f a job)",
          switches, JOBS, (double)switches / JOBS);
}

/* ---- a plan's runs start no thread ---------------------------------------
 * attn_sdpa_run allocates nothing (attn.h); a worker's start would be an
 * allocation (its stack), so the plan's workers must be running when the
 * plan is made. The pool is emptied first; the threads of this process are
 * counted in /proc/self/task, before and after the first run of a plan of
 * each kind (dense, ragged, paged). */

/* Makes the plan of kind 0 (attn_sdpa), 1 (attn_sdpa_varlen) or 2 (a paged
 * pool's) on 3 threads, then runs it: the threads before and after the run. */
static attn_status plan_tasks(int kind, int *before, int *after, attn_error *err) {
    attn_context c = threads_ctx(3);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    const job *pj = &jobs[3], *gj = &jobs[6];
    int64_t sp[3] = {pj->t[0].shape[2], pj->t[0].shape[1], pj->t[0].shape[3]}; /* (900, 4, 32) packed */
    int64_t cu[3] = {0, 400, 900};
    attn_tensor q = pj->t[0], k = pj->t[1], v = pj->t[2];
    if (kind == 1) attn_tensor_init(&q, pj->t[0].data, ATTN_F32, 3, sp, NULL, NULL),
                   attn_tensor_init(&k, pj->t[1].data, ATTN_F32, 3, sp, NULL, NULL),
                   attn_tensor_init(&v, pj->t[2].data, ATTN_F32, 3, sp, NULL, NULL);
    if (kind == 2) q = gj->t[0];
    attn_tensor y = q;
    y.data = malloc(sizeof(float) * floats(&q));
    attn_tensor_init(&y, y.data, ATTN_F32, q.rank, q.shape, NULL, NULL);
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    attn_kv_paged_view view = attn_kv_paged_view_default();
    attn_status st = attn_sdpa_plan_bytes(&bytes, kind == 0 ? 0 : kind == 1 ? 2 : 3, err);
    void *memory = st ? NULL : malloc(bytes), *work = NULL;
    attn_shutdown(); /* no worker yet */
    if (!st && kind == 0) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &y, NULL, &q, &k, &v, &o, err);
    if (!st && kind == 1)
        st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &y, NULL, &q, &k, &v, cu, cu, 2, NULL, &o, err);
    if (!st && kind == 2) st = attn_kv_pages_view(&view, gj->shared, err);
    if (!st && kind == 2)
        st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &y, NULL, &q, gj->cu, &view, NULL, &o, err);
    if (!st) work = malloc(ws ? ws : 1);
    *before = tasks();
    if (!st && kind < 2) st = attn_sdpa_run(plan, &y, NULL, &q, &k, &v, work, ws, err);
    if (!st && kind == 2) st = attn_kv_paged_run(plan, &y, NULL, &q, view.k_pages, view.v_pages, work, ws, err);
    *after = tasks();
    free(memory), free(work), free(y.data);
    return st;
}

static void test_plan_runs_start_no_thread(void) {
    static const char *const NAMES[3] = {"plan_run_starts_no_thread", "varlen_plan_run_starts_no_thread",
                                         "paged_plan_run_starts_no_thread"};
    if (tasks() < 1) {
        for (int kind = 0; kind < 3; kind++) skip(NAMES[kind], "no /proc/self/task to count threads in");
        return;
    }
    for (int kind = 0; kind < 3; kind++) {
        int before = 0, after = 0;
        attn_error err = {0};
        attn_status st = jobs[kind ? 6 : 3].run ? plan_tasks(kind, &before, &after, &err) : ATTN_ERR_ARGUMENT;
        check(!st && before == after, NAMES[kind], "%s: %d threads before the first run, %d after",
              st ? err.message : "the run started threads", before, after);
    }
}

/* ---- the default thread count: the CPUs this process may use -------------
 * A server pinned to a few CPUs (taskset, a container's cpuset) on a large
 * machine must not start a thread for every CPU of the machine: the
 * default is the CPUs of the process's affinity mask. A child pinned to one
 * CPU (before its first call, which counts them) reports its default. */

static void test_default_threads_follow_affinity(void) {
    static const char *const NAME = "default_threads_are_the_cpus_of_the_affinity_mask";
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) {
        skip(NAME, "this process may run on fewer than 2 CPUs");
        return;
    }
    int cpu = 0;
    while (!CPU_ISSET(cpu, &set)) cpu++;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        unsetenv("ATTN_NUM_THREADS");
        attn_set_num_threads(0);
        _exit(sched_setaffinity(0, sizeof one, &one) != 0 ? 100 : attn_get_num_threads() & 0x7f);
    }
    int status = 0;
    int got = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    check(got == 1, NAME, "pinned to 1 of %d CPUs, the default is %d threads%s", CPU_COUNT(&set), got,
          got == 100 ? " (sched_setaffinity failed)" : "");
#else
    skip(NAME, "no affinity masks here");
#endif
}

/* ---- a caller's small stack ----------------------------------------------
 *
 * attn.h ("Stack") bounds what a call takes of its caller's stack, the
 * pool's workers' items included (on one thread they run on the caller's).
 * Each entry point runs on a thread of its own whose stack this test maps:
 * ATTN_STACK_BOUND bytes above the thread's own start (a call that does
 * nothing, measured on a 64 KiB stack), every byte painted, a guard page
 * right below it, on 1 and 3 threads. A call that takes more than the
 * bound writes into the guard page: the test says which call and exits
 * with status 1 (a handler on a stack of its own). Else its results must
 * be the bits of the big stack's, and the bytes it wrote below the
 * thread's own start at most the bound. The quantized values' three
 * kernels of the AVX-512 sets (ATTN_QDOT=f32_values, bf16_values,
 * int8_values, read once a process) run it again, each in a process of
 * its own. Besides the other tests' jobs it runs f64 attention, a head
 * trained, flash over keys quantized per channel, and paged attention over
 * every quantized format of a pool, with and without the keys' Hadamard
 * rotation, through the call and through a paged plan (paged_cases). Sanitizers' frames are larger than the library's, so there the
 * stack is 1 MiB and only the results are checked. */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STACK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STACK_SANITIZED 1
#endif
#endif
#ifndef STACK_SANITIZED
#define STACK_SANITIZED 0
#endif

enum { SMALL_STACK = 64 << 10, PAINT = 0xa5, ALT_STACK = 64 << 10 };

/* f64 attention (the exact kernel), causal: q (2, 3, 40, 24), k and v of 70
 * keys; out into out's bytes. */
static attn_status run_f64(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_tensor y = j->t[3];
    y.data = out;
    return attn_sdpa(&y, NULL, NULL, &j->t[0], &j->t[1], &j->t[2], &o, err);
}

/* A head trained for 3 steps of 64 sentences: the three weights and the curves, in doubles. */
static attn_status run_train(const job *j, int threads, float *out, attn_error *err) {
    (void)j;
    attn_set_num_threads(threads ? threads : 1); /* the head's calls take the process-wide count */
    attn_train_options o = attn_train_options_default();
    o.steps = 3, o.batch = 64, o.d_k = 16;
    double *w = (double *)(void *)out;
    int dm = ATTN_TOY_D_MODEL;
    attn_status st = attn_train_head(w, w + dm * 16, w + 2 * dm * 16, w + 2 * dm * 16 + dm * ATTN_TRAIN_D_V,
                                     w + 2 * dm * 16 + dm * ATTN_TRAIN_D_V + 3, &o, err);
    attn_set_num_threads(0);
    return st;
}

/* Flash (32 queries, past the decode kernel's few) over a cache of keys
 * quantized per channel, key_dim 256: the groups dequantized and
 * transposed 16 keys by 128 channels at a time, and the residual's rows. */
static attn_status run_grouped_flash(const job *j, int threads, float *out, attn_error *err) {
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_tensor y = j->t[0];
    y.data = out;
    return attn_kv_cache_attend(&y, NULL, &j->t[0], j->shared, &o, err);
}

/* Paged attention over pools in the stored formats that take other
 * kernels and steps than the f16 pool's: quantized values and keys (q4,
 * q4_1, q8, e4m3 with per-head scales, e5m2), keys turned by the
 * Hadamard rotation (q turned at the call, key_dim up to 1024, the
 * largest row the rotation takes), keys quantized per channel with their
 * residual rows; each through attn_kv_pages_attend, or planned and run
 * (attn_kv_paged_plan_init, attn_kv_paged_run), and one appended and
 * gathered back on the small stack. Hk 2 of Hq 4, pages of 32: sequences
 * of 700, 300 and 100 keys, two decoding and one of 32 new queries. */
typedef struct paged_case {
    const char *name;
    attn_dtype dtype, key_dtype;
    int64_t E;
    int hadamard, scaled, plan; /* plan 2: a pool made, appended and gathered by the call */
} paged_case;

static const paged_case paged_cases[] = {
    {"kv_pages_q4_hadamard_key_dim_1024_attend", ATTN_Q4, 0, 1024, 1, 0, 0},
    {"kv_pages_q8_hadamard_plan_run", ATTN_Q8, 0, 64, 1, 0, 1},
    {"kv_pages_e4m3_scaled_hadamard_plan_run", ATTN_E4M3, 0, 128, 1, 1, 1},
    {"kv_pages_q4_attend", ATTN_Q4, 0, 64, 0, 0, 0},
    {"kv_pages_q4_1_plan_run", ATTN_Q4_1, 0, 64, 0, 0, 1},
    {"kv_pages_q8_attend", ATTN_Q8, 0, 128, 0, 0, 0},
    {"kv_pages_e5m2_attend", ATTN_E5M2, 0, 64, 0, 0, 0},
    {"kv_pages_e4m3_scaled_attend", ATTN_E4M3, 0, 64, 0, 1, 0},
    {"kv_pages_q4c_keys_attend", ATTN_F16, ATTN_Q4C, 128, 0, 0, 0},
    {"kv_pages_q4c_keys_plan_run", ATTN_F16, ATTN_Q4C, 128, 0, 0, 1},
    {"kv_pages_q4_hadamard_key_dim_1024_append_gather", ATTN_Q4, 0, 1024, 1, 0, 2},
};
enum { N_PAGED = sizeof paged_cases / sizeof paged_cases[0], PAGED_P = 32, PAGED_HK = 2 };
static const float paged_scales[PAGED_HK] = {0.5f, 2.0f};
static const int64_t paged_lengths[3] = {700, 300, 100}, paged_cu[4] = {0, 1, 2, 34};

static attn_kv_pages_desc paged_desc(const paged_case *pc) {
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = PAGED_HK, d.key_dim = d.value_dim = pc->E, d.dtype = pc->dtype, d.key_dtype = pc->key_dtype;
    d.page_size = PAGED_P, d.num_pages = 48, d.max_sequences = 3, d.hadamard = pc->hadamard;
    d.residual = pc->key_dtype ? 32 : 0;
    if (pc->scaled) d.k_scale = d.v_scale = paged_scales;
    return d;
}

/* A pool of the case's format, its three sequences appended (k and v: j's
 * t[1], t[2]), in memory malloc'd into *memory; NULL on an error. */
static attn_kv_pages *make_paged(const paged_case *pc, const job *j, int64_t *seqs, void **memory, attn_error *err) {
    attn_kv_pages_desc d = paged_desc(pc);
    size_t bytes = 0;
    attn_kv_pages *pool = NULL;
    int64_t cu[4] = {0, paged_lengths[0], paged_lengths[0] + paged_lengths[1]};
    cu[3] = cu[2] + paged_lengths[2];
    *memory = NULL;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, err);
    if (!st && !(*memory = malloc(bytes))) st = attn_error_set(err, ATTN_ERR_NO_MEMORY, "no memory for the pool");
    if (!st) st = attn_kv_pages_init(&pool, *memory, bytes, &d, err);
    for (int i = 0; !st && i < 3; i++) st = attn_kv_pages_create(pool, &seqs[i], err);
    if (!st) st = attn_kv_pages_append(pool, seqs, 3, &j->t[1], &j->t[2], cu, err);
    return st ? NULL : pool;
}

static attn_status run_paged(const job *j, int threads, float *out, attn_error *err) {
    const paged_case *pc = &paged_cases[j->cu[0]];
    attn_context c = threads_ctx(threads);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    attn_tensor y = j->t[0];
    y.data = out;
    if (pc->plan == 2) { /* appended here, then sequence 0's keys and values gathered back into out */
        int64_t seqs[3];
        void *memory;
        attn_kv_pages *pool = make_paged(pc, j, seqs, &memory, err);
        attn_status st = pool ? ATTN_OK : err->status;
        int64_t shape[3] = {PAGED_HK, paged_lengths[0], pc->E};
        attn_tensor k, v;
        attn_tensor_init(&k, out, ATTN_F32, 3, shape, NULL, NULL);
        attn_tensor_init(&v, out + PAGED_HK * paged_lengths[0] * pc->E, ATTN_F32, 3, shape, NULL, NULL);
        if (!st) st = attn_kv_pages_gather(&k, &v, pool, seqs[0], err);
        free(memory);
        return st;
    }
    if (!pc->plan) return attn_kv_pages_attend(&y, NULL, &j->t[0], paged_cu, j->seqs, 3, j->shared, NULL, &o, err);
    attn_kv_paged_view view = attn_kv_paged_view_default();
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    void *memory = NULL, *work = NULL;
    attn_status st = attn_kv_pages_view(&view, j->shared, err);
    if (!st) st = attn_sdpa_plan_bytes(&bytes, view.num_sequences, err);
    if (!st && !(memory = malloc(bytes))) st = attn_error_set(err, ATTN_ERR_NO_MEMORY, "no memory for the plan");
    if (!st) st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &y, NULL, &j->t[0], paged_cu, &view, NULL, &o, err);
    if (!st && !(work = malloc(ws ? ws : 1))) st = attn_error_set(err, ATTN_ERR_NO_MEMORY, "no memory for the workspace");
    for (int layer = 0; !st && layer < 2; layer++)
        st = attn_kv_paged_run(plan, &y, NULL, &j->t[0], view.k_pages, view.v_pages, work, ws, err);
    free(memory), free(work);
    return st;
}

/* The case's job: q (34, 4, E) and the appended k and v (1100, 2, E); the
 * pool made once (every call reads it, its memory *memory), but for the
 * case that makes its own. 0, or 1 when it could not be made. */
static int make_paged_job(job *j, int i, void **memory) {
    const paged_case *pc = &paged_cases[i];
    int64_t sq[3] = {paged_cu[3], 2 * PAGED_HK, pc->E},
            sk[3] = {paged_lengths[0] + paged_lengths[1] + paged_lengths[2], PAGED_HK, pc->E};
    *j = (job){.name = pc->name, .run = run_paged};
    j->cu[0] = i;
    j->t[0] = f32(3, sq, 1), j->t[1] = f32(3, sk, 1), j->t[2] = f32(3, sk, 1);
    j->n_out = pc->plan == 2 ? (size_t)(2 * PAGED_HK * paged_lengths[0] * pc->E) : floats(&j->t[0]);
    attn_error err;
    *memory = NULL;
    return pc->plan != 2 && !(j->shared = make_paged(pc, j, j->seqs, memory, &err));
}

typedef struct small_call {
    job *j;
    int threads;
    float *out;
    attn_status st;
    attn_error err;
    void *alt; /* ALT_STACK bytes for the guard page's handler, or NULL */
} small_call;

/* The call on the small stack now, for the guard page's handler. */
static const char *volatile small_name;

static void write_text(const char *t) {
    for (size_t n = strlen(t); n > 0;) {
        ssize_t w = write(STDOUT_FILENO, t, n);
        if (w <= 0) return;
        t += w, n -= (size_t)w;
    }
}

/* SIGSEGV on the small thread: the call ran into the guard page. */
static void stack_overflowed(int sig) {
    (void)sig;
    write_text("FAIL ");
    write_text(small_name ? small_name : "small_stack");
    write_text(": the call ran past attn.h's ATTN_STACK_BOUND into the guard page below its stack\n");
    _exit(1);
}

static void *small_main(void *arg) {
    small_call *c = arg;
    /* the handler's own stack, the caller's memory (a first malloc on this
     * thread would count its arena's setup as the thread's own frames) */
    bool handled = false;
    if (c->alt) {
        stack_t ss = {.ss_sp = c->alt, .ss_size = ALT_STACK, .ss_flags = 0};
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = stack_overflowed, sa.sa_flags = SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        handled = !sigaltstack(&ss, NULL) && !sigaction(SIGSEGV, &sa, NULL);
    }
    if (c->j) c->st = c->j->run(c->j, c->threads, c->out, &c->err);
    if (handled) {
        stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
        signal(SIGSEGV, SIG_DFL), sigaltstack(&off, NULL);
    }
    return NULL;
}

/* Runs c on a thread whose stack is `size` bytes of fresh, painted memory
 * above a guard page; the bytes it used (from the top), or -1 if the
 * thread could not start. */
static long run_on_small_stack(small_call *c, size_t size) {
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, size + (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return -1;
    mprotect(map, (size_t)page, PROT_NONE);
    char *stack = map + page;
    memset(stack, PAINT, size);
    c->alt = STACK_SANITIZED ? NULL : malloc(ALT_STACK);
    pthread_attr_t attr;
    pthread_t t;
    long used = -1;
    if (!pthread_attr_init(&attr) && !pthread_attr_setstack(&attr, stack, size) &&
        !pthread_create(&t, &attr, small_main, c)) {
        pthread_join(t, NULL);
        size_t low = 0;
        while (low < size && (unsigned char)stack[low] == PAINT) low++;
        used = (long)(size - low);
    }
    pthread_attr_destroy(&attr);
    munmap(map, size + (size_t)page);
    free(c->alt), c->alt = NULL;
    return used;
}

/* The quantized values' kernels by name (ATTN_QDOT), each a run of
 * test_small_stack in a process of its own (this program again, told by
 * ATTN_TEST_SMALL_STACK_ONLY); 0 where this one is such a run. */
static void test_small_stack_value_kernels(void) {
    static const char *const sets[] = {"f32_values", "bf16_values", "int8_values"};
    if (getenv("ATTN_TEST_SMALL_STACK_ONLY")) return;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "small_stack_ATTN_QDOT_%s", sets[i]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("ATTN_QDOT", sets[i], 1), setenv("ATTN_TEST_SMALL_STACK_ONLY", "1", 1);
            execl("/proc/self/exe", "test_threads", (char *)NULL);
            _exit(127);
        }
        int status = 0;
        bool ran = pid > 0 && waitpid(pid, &status, 0) == pid;
        check(ran && WIFEXITED(status) && WEXITSTATUS(status) == 0, name, "its run %s %d", ran && WIFEXITED(status) ? "exited with" : "died of signal",
              ran && WIFEXITED(status) ? WEXITSTATUS(status) : ran ? WTERMSIG(status) : -1);
    }
}

static void test_small_stack(void) {
    static void *grouped_memory; /* the q4c cache's */
    size_t size = SMALL_STACK;
    if (STACK_SANITIZED) size = 1 << 20;
    if (size < (size_t)PTHREAD_STACK_MIN) size = PTHREAD_STACK_MIN;
    /* the thread's own start and the test's frames: a call that runs nothing */
    small_call none = {0};
    long base = run_on_small_stack(&none, size);
    if (base < 0) {
        check(0, "small_stack_thread", "cannot start a thread on a mapped stack of %zu bytes", size);
        return;
    }
    /* The calls' stack: the bound above those frames (in 64-byte steps, the
     * thread's own block's alignment), the guard page right below. */
    if (!STACK_SANITIZED) size = ((size_t)base + ATTN_STACK_BOUND + 63) / 64 * 64;
    if (size < (size_t)PTHREAD_STACK_MIN) {
        skip("small_stack_guard", "PTHREAD_STACK_MIN (%zu) is more than the bound's stack (%zu)", (size_t)PTHREAD_STACK_MIN, size);
        size = PTHREAD_STACK_MIN;
    }
    const char *qdot = getenv("ATTN_TEST_SMALL_STACK_ONLY") ? getenv("ATTN_QDOT") : NULL;
    /* The extra entry points, besides the other tests' jobs: f64
     * attention, a head trained, and flash over grouped keys. */
    enum { N_MORE = 3 + N_PAGED };
    static job more[N_MORE];
    static void *paged_memory[N_PAGED];
    int64_t q64[4] = {2, 3, 40, 24}, k64[4] = {2, 3, 70, 24};
    more[0] = (job){.name = "sdpa_f64", .run = run_f64};
    for (int i = 0; i < 3; i++) { /* f64 copies of f32 normal values */
        attn_tensor f = f32(4, i ? k64 : q64, 1);
        attn_tensor_init(&more[0].t[i], malloc(sizeof(double) * floats(&f)), ATTN_F64, 4, f.shape, NULL, NULL);
        for (size_t e = 0; e < floats(&f); e++) ((double *)more[0].t[i].data)[e] = ((float *)f.data)[e];
        free(f.data);
    }
    more[0].t[3] = more[0].t[0];
    more[0].n_out = 2 * floats(&more[0].t[0]);
    more[1] = (job){.name = "train_head", .run = run_train};
    more[1].n_out = 2 * (size_t)(2 * ATTN_TOY_D_MODEL * 16 + ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V + 2 * 3);
    more[2] = (job){.name = "kv_cache_q4c_flash_key_dim_256", .run = run_grouped_flash};
    {
        attn_kv_cache_desc d = attn_kv_cache_desc_default();
        d.heads = 2, d.capacity = 512, d.key_dim = d.value_dim = 256, d.dtype = ATTN_F16, d.key_dtype = ATTN_Q4C;
        d.residual = 32;
        size_t bytes = 0;
        attn_error err;
        attn_kv_cache *cache = NULL;
        int64_t sk[3] = {2, 300, 256}, sq[3] = {4, 32, 256};
        attn_tensor k = f32(3, sk, 1), v = f32(3, sk, 1);
        grouped_memory = attn_kv_cache_bytes(&bytes, &d, &err) ? NULL : malloc(bytes);
        if (grouped_memory && !attn_kv_cache_init(&cache, grouped_memory, bytes, &d, &err) &&
            !attn_kv_cache_append(cache, &k, &v, &err))
            more[2].shared = cache;
        free(k.data), free(v.data);
        more[2].t[0] = f32(3, sq, 1);
        more[2].n_out = floats(&more[2].t[0]);
        if (!more[2].shared) more[2].run = NULL, check(0, "small_stack_q4c_cache", "the cache could not be made");
    }
    for (int i = 0; i < N_PAGED; i++)
        if (make_paged_job(&more[3 + i], i, &paged_memory[i]))
            more[3 + i].run = NULL, check(0, paged_cases[i].name, "its pool could not be made");
    for (int i = 0; i < N_JOBS + N_MORE; i++) { /* one thread's results (the other jobs': test_thread_counts', but in a run of this alone) */
        job *j = i < N_JOBS ? &jobs[i] : &more[i - N_JOBS];
        attn_error err = {0};
        if (!j->run || j->want) continue;
        j->want = malloc(sizeof(float) * j->n_out);
        if (j->run(j, 1, j->want, &err)) {
            check(0, j->name, "%s", err.message);
            j->run = NULL;
        }
    }
    for (int i = 0; i < N_JOBS + N_MORE; i++) {
        job *j = i < N_JOBS ? &jobs[i] : &more[i - N_JOBS];
        if (!j->run || !j->want) continue;
        float *out = malloc(sizeof(float) * j->n_out);
        for (int threads = 1; threads <= 3; threads += 2) {
            small_call c = {j, threads, out, ATTN_OK, {0}, NULL};
            memset(out, 0xff, sizeof(float) * j->n_out);
            char name[128];
            snprintf(name, sizeof name, "%s%s%s_on_a_small_stack_threads_%d", qdot ? qdot : "", qdot ? "_" : "", j->name,
                     threads);
            small_name = name;
            long used = run_on_small_stack(&c, size);
            small_name = NULL;
            if (used < 0) {
                check(0, name, "cannot start a thread on a mapped stack of %zu bytes", size);
                continue;
            }
            if (c.st || memcmp(out, j->want, sizeof(float) * j->n_out)) {
                check(0, name, "%s", c.st ? c.err.message : "the results differ from the big stack's");
                continue;
            }
            long mine = used - base;
            if (STACK_SANITIZED)
                check(1, name, "%ld bytes", mine);
            else
                check(mine <= ATTN_STACK_BOUND, name, "it took %ld bytes of its caller's stack; attn.h says at most %d",
                      mine, ATTN_STACK_BOUND);
            if (!STACK_SANITIZED && threads == 1) printf("   %s%s%s: %ld bytes of stack\n", qdot ? qdot : "", qdot ? " " : "", j->name, mine);
        }
        free(out);
    }
    for (int i = 0; i < 3; i++) free(more[i].want), free(more[0].t[i].data);
    free(grouped_memory), free(more[2].t[0].data);
    for (int i = 0; i < N_PAGED; i++) {
        job *j = &more[3 + i];
        free(j->want), free(paged_memory[i]);
        for (int t = 0; t < 3; t++) free(j->t[t].data);
    }
    test_small_stack_value_kernels();
}

/* ---- attn_set_verbose while the first call reads ATTN_VERBOSE ----------- */

/* The first call that asks whether verbose mode is on reads ATTN_VERBOSE;
 * an attn_set_verbose(0) on another thread meanwhile must win, as it is
 * the later word. A child per try, each with no setting read yet, and an
 * environment of 300,000 variables before ATTN_VERBOSE=1, so that reading
 * it takes long enough for the set to land inside the read in some tries
 * (before the fix about 1 in 6 here lost it). */
typedef struct first_read {
    atomic_int started;
} first_read;

static void *first_reader(void *arg) {
    first_read *f = arg;
    atomic_store(&f->started, 1);
    (void)attn_verbose_on();
    return NULL;
}

static int set_verbose_during_first_read(void) {
    enum { FILLER = 300000 };
    static char names[FILLER][16];
    char **env = malloc(sizeof(char *) * (FILLER + 2));
    if (!env) return 2;
    for (int i = 0; i < FILLER; i++) snprintf(names[i], sizeof names[i], "F%07d=1", i), env[i] = names[i];
    env[FILLER] = "ATTN_VERBOSE=1", env[FILLER + 1] = NULL;
    environ = env;
    first_read f = {0};
    pthread_t t;
    if (pthread_create(&t, NULL, first_reader, &f)) return 2;
    while (!atomic_load(&f.started)) sched_yield();
    nanosleep(&(struct timespec){0, 5 * 1000}, NULL); /* past its first look at the setting */
    attn_set_verbose(0);
    pthread_join(t, NULL);
    return attn_verbose_on() ? 1 : 0;
}

static void test_set_verbose_during_first_read(void) {
    enum { TRIES = 32 }; /* the set lands inside the read in about 1 try of 6 */
    int lost = 0, broken = 0;
    for (int i = 0; i < TRIES; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) _exit(set_verbose_during_first_read());
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) > 1) broken++;
        else lost += WEXITSTATUS(status);
    }
    check(!lost && !broken, "set_verbose_during_first_read_is_kept", "%d of %d children lost attn_set_verbose(0)%s",
          lost, TRIES, broken ? ", and some could not run" : "");
}

/* ---- one plan run from two threads at once -------------------------------- */

/* A plan runs one call at a time: a second run while the first is in
 * progress is refused (ATTN_ERR_PLAN) and writes nothing, and the first
 * gives its bits. The first is a long one-thread run (L = S = 2048); the
 * second thread tries while it runs, and the whole is tried again where
 * the first ended before the second got in. */
typedef struct plan_race {
    attn_sdpa_plan *plan;
    attn_tensor q, k, v, out;
    void *work;
    size_t ws;
    atomic_int running, done;
    attn_status st;
} plan_race;

static void *plan_race_first(void *arg) {
    plan_race *r = arg;
    attn_error err;
    atomic_store(&r->running, 1);
    r->st = attn_sdpa_run(r->plan, &r->out, NULL, &r->q, &r->k, &r->v, r->work, r->ws, &err);
    atomic_store(&r->done, 1);
    return NULL;
}

static void test_one_plan_two_threads_refused(void) {
    int64_t shape[4] = {1, 1, 2048, 64};
    plan_race r = {0};
    r.q = f32(4, shape, 1), r.k = f32(4, shape, 1), r.v = f32(4, shape, 1), r.out = f32(4, shape, 0);
    attn_tensor want = f32(4, shape, 0), second = f32(4, shape, 0);
    size_t n = floats(&r.q) * sizeof(float), bytes = 0;
    attn_context c = threads_ctx(1);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    attn_error err = {0}, err2 = {0};
    attn_status st = attn_sdpa(&want, NULL, NULL, &r.q, &r.k, &r.v, &o, &err);
    void *memory = NULL, *work2 = NULL;
    if (!st) st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    if (!st) memory = malloc(bytes);
    if (!st) st = attn_sdpa_plan_init(&r.plan, memory, bytes, &r.ws, &r.out, NULL, &r.q, &r.k, &r.v, &o, &err);
    if (!st) r.work = malloc(r.ws + 1), work2 = malloc(r.ws + 1);
    attn_status refused = ATTN_OK;
    bool first_same = true, second_untouched = true;
    for (int attempt = 0; !st && refused != ATTN_ERR_PLAN && attempt < 4; attempt++) {
        memset(r.out.data, 0, n), memset(second.data, 0xff, n);
        atomic_store(&r.running, 0), atomic_store(&r.done, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, plan_race_first, &r)) break;
        while (!atomic_load(&r.running)) sched_yield();
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL); /* well inside a run of about 100 ms */
        while (!atomic_load(&r.done) && refused != ATTN_ERR_PLAN)
            refused = attn_sdpa_run(r.plan, &second, NULL, &r.q, &r.k, &r.v, work2, r.ws, &err2);
        pthread_join(t, NULL);
        st = r.st;
        first_same = first_same && memcmp(r.out.data, want.data, n) == 0;
        for (size_t i = 0; refused == ATTN_ERR_PLAN && i < n; i++)
            second_untouched = second_untouched && ((unsigned char *)second.data)[i] == 0xff;
    }
    check(!st && refused == ATTN_ERR_PLAN && first_same && second_untouched &&
              strstr(err2.message, "one call at a time"),
          "one_plan_two_threads_second_run_refused", "%s", st ? err.message :
          refused != ATTN_ERR_PLAN ? "the second run was not refused while the first ran" :
          !first_same ? "the first run's result differs from attn_sdpa's" :
          !second_untouched ? "the refused run wrote its out" : err2.message);
    attn_tensor *all[6] = {&r.q, &r.k, &r.v, &r.out, &want, &second};
    for (int i = 0; i < 6; i++) free(all[i]->data);
    free(memory), free(r.work), free(work2);
}

int main(void) {
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    if (!getenv("ATTN_TEST_SMALL_STACK_ONLY")) {
        test_set_verbose_during_first_read(); /* first: children that have read no verbose setting */
        test_default_threads_follow_affinity(); /* first: a child that has counted no CPU yet */
    }
    make_jobs();
    for (int i = 0; i < N_JOBS; i++)
        if (jobs[i].run == run_cache || jobs[i].run == run_pages)
            if (!jobs[i].shared) printf("FAIL %s_setup: the cache could not be made\n", jobs[i].name), jobs[i].run = NULL, n_failed++;
    if (getenv("ATTN_TEST_SMALL_STACK_ONLY")) { /* test_small_stack_value_kernels' run: nothing else */
        test_small_stack();
        printf("%d failed\n", n_failed);
        return n_failed != 0;
    }
    test_thread_counts();
    test_concurrent_callers();
    test_nested_call();
    test_fork_while_calling();
    test_cancelled_caller();
    test_small_job_wakes_its_workers();
    test_plan_runs_start_no_thread();
    test_small_stack();
    test_one_plan_two_threads_refused();
    printf("%d failed\n", n_failed);
    return n_failed != 0;
}
