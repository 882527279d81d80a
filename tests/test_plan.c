/* test_plan.c -- plan once, run every layer: attn_sdpa_plan_init,
 * attn_sdpa_varlen_plan_init and attn_sdpa_run; attn_kv_paged_plan_init
 * and attn_kv_paged_run (each layer its own pages under one block table,
 * against attn_kv_paged_attend).
 *
 * Every case plans a call (dimensions of 0 too), then runs three "layers"
 * from the one plan, each with fresh q, k and v (and a fresh output
 * buffer), and compares each
 * layer's out and lse bitwise with the unplanned call (attn_sdpa or
 * attn_sdpa_varlen) on the same data, at 1, 2 and 3 threads. The kernel
 * the planned run took (its ATTN_VERBOSE line) must be the unplanned
 * call's, and the cases must reach the flash, decode and exact kernels.
 * Then the refusals: tensors unlike the plan's, a workspace too small,
 * memory that holds no plan, outputs overlapping inputs; each writes
 * nothing. Prints "ok NAME" or "FAIL NAME: why". */
#include "check.h"
#include "tensors.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 3 };

/* What a case varies beyond the shapes. */
typedef struct variant {
    const char *name;
    attn_causal causal;
    int scale, alibi, sinks, rope, window, softcap, lse, bf16;
} variant;

static const variant VARIANTS[] = {
    {"plain", ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal_bottom_right", ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 1, 0},
    {"causal_top_left_no_lse", ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0},
    {"scale_softcap_window", ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 0, 0, 1, 1, 1, 0},
    {"alibi_sinks", ATTN_CAUSAL_NONE, 0, 1, 1, 0, 0, 0, 1, 0},
    {"rope", ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0, 0, 1, 0},
    {"bf16_compute", ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 1, 1},
};
enum { N_VARIANTS = sizeof VARIANTS / sizeof VARIANTS[0] };

/* The options a variant sets, over tensors that live as long as the case. */
typedef struct option_set {
    attn_sdpa_options o;
    attn_context c;
    attn_rope_options rope;
    attn_tensor slopes, sinks;
    double slope_data[64], sink_data[64];
} option_set;

static void set_options(option_set *s, const variant *v, int64_t Hq, int threads) {
    s->c = attn_context_default();
    s->c.num_threads = threads;
    s->o = attn_sdpa_options_default();
    s->o.context = &s->c;
    s->o.causal = v->causal;
    if (v->scale) s->o.has_scale = 1, s->o.scale = 0.3;
    if (v->softcap) s->o.softcap = 5.0;
    if (v->window) s->o.window = 7;
    if (v->bf16) s->o.compute = ATTN_COMPUTE_BF16;
    if (v->alibi) {
        attn_alibi_slopes(s->slope_data, Hq, NULL);
        attn_tensor_init(&s->slopes, s->slope_data, ATTN_F64, 1, &Hq, NULL, NULL);
        s->o.alibi_slopes = &s->slopes;
    }
    if (v->sinks) {
        for (int64_t h = 0; h < Hq; h++) s->sink_data[h] = 0.25 * (double)h - 1.0;
        attn_tensor_init(&s->sinks, s->sink_data, ATTN_F64, 1, &Hq, NULL, NULL);
        s->o.sinks = &s->sinks;
    }
    if (v->rope) {
        s->rope = attn_rope_options_default();
        s->rope.position_offset = 3;
        s->o.rope = &s->rope;
    }
}

/* A tensor of t's shape and dtype, its data fresh random values. */
static attn_tensor like(const attn_tensor *t) {
    attn_tensor n = make(t->dtype, t->rank, t->shape);
    return n;
}

static size_t bytes_of(const attn_tensor *t) { return (size_t)attn_tensor_numel(t) * attn_dtype_size(t->dtype); }

static int same_bits(const attn_tensor *a, const attn_tensor *b) { return !memcmp(a->data, b->data, bytes_of(a)); }

/* The kernel the last verbose line named, for a call run in between. */
static char kernel_seen[64];
static int seen_flash, seen_decode, seen_exact;

static void note_kernel(void) {
    seen_flash |= strstr(kernel_seen, "flash") != NULL;
    seen_decode |= strstr(kernel_seen, "decode") != NULL;
    seen_exact |= strstr(kernel_seen, "exact") != NULL;
}

/* One dense case: q (B, Hq, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev). */
static void dense_case(const char *shape_name, attn_dtype dtype, int64_t B, int64_t Hq, int64_t Hk, int64_t L, int64_t S,
                       int64_t E, int64_t Ev, const variant *var, int threads) {
    char name[160];
    snprintf(name, sizeof name, "dense_%s_%s_%s_threads%d", shape_name, dtype == ATTN_F64 ? "f64" : "f32", var->name,
             threads);
    if (dtype == ATTN_F64 && var->bf16) return; /* bf16 compute is f32's */
    option_set os;
    set_options(&os, var, Hq, threads);
    int64_t sq[4] = {B, Hq, L, E}, sk[4] = {B, Hk, S, E}, sv[4] = {B, Hk, S, Ev}, so[4] = {B, Hq, L, Ev}, sl[3] = {B, Hq, L};
    attn_tensor q = make(dtype, 4, sq), k = make(dtype, 4, sk), v = make(dtype, 4, sv);
    attn_tensor out = make(dtype, 4, so), lse = make(dtype, 3, sl);
    attn_tensor *lp = var->lse ? &lse : NULL;
    attn_error err;
    size_t bytes, ws = 0;
    void *memory = NULL, *work = NULL;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    if (!st) memory = malloc(bytes);
    if (!st) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, lp, &q, &k, &v, &os.o, &err);
    if (!st) work = malloc(ws);
    int ok = !st, layer = 0;
    char why[640] = "";
    if (st) snprintf(why, sizeof why, "plan: %s", err.message);
    for (; ok && layer < LAYERS; layer++) {
        attn_tensor lq = like(&q), lk = like(&k), lv = like(&v); /* this layer's data */
        attn_tensor o1 = like(&out), l1 = like(&lse), o2 = like(&out), l2 = like(&lse);
        char k1[64];
        verbose_begin();
        st = attn_sdpa(&o1, var->lse ? &l1 : NULL, NULL, &lq, &lk, &lv, &os.o, &err);
        verbose_end(k1, sizeof k1, NULL, 0);
        if (st) ok = 0, snprintf(why, sizeof why, "attn_sdpa, layer %d: %s", layer, err.message);
        verbose_begin();
        if (ok) st = attn_sdpa_run(plan, &o2, var->lse ? &l2 : NULL, &lq, &lk, &lv, work, ws, &err);
        verbose_end(kernel_seen, sizeof kernel_seen, NULL, 0);
        if (ok && st) ok = 0, snprintf(why, sizeof why, "attn_sdpa_run, layer %d: %s", layer, err.message);
        if (ok && !same_bits(&o1, &o2)) ok = 0, snprintf(why, sizeof why, "layer %d: out differs", layer);
        if (ok && var->lse && !same_bits(&l1, &l2)) ok = 0, snprintf(why, sizeof why, "layer %d: lse differs", layer);
        if (ok && strcmp(k1, kernel_seen))
            ok = 0, snprintf(why, sizeof why, "layer %d: kernel %s planned, %s unplanned", layer, kernel_seen, k1);
        note_kernel();
        free(lq.data), free(lk.data), free(lv.data), free(o1.data), free(l1.data), free(o2.data), free(l2.data);
    }
    check(ok, name, "%s", why);
    free(memory), free(work), free(q.data), free(k.data), free(v.data), free(out.data), free(lse.data);
}

/* One ragged case: q (Tq, Hq, E), k (Tk, Hk, E), v (Tk, Hk, Ev), the
 * sequences' lengths lq[b] and lk[b]. */
static void varlen_case(const char *mix_name, attn_dtype dtype, int64_t batch, const int64_t *len_q, const int64_t *len_k,
                        int64_t Hq, int64_t Hk, int64_t E, int64_t Ev, const variant *var, int threads, int masked) {
    char name[160];
    snprintf(name, sizeof name, "varlen_%s%s_%s_%s_threads%d", mix_name, masked ? "_masks" : "",
             dtype == ATTN_F64 ? "f64" : "f32", var->name, threads);
    if (dtype == ATTN_F64 && var->bf16) return;
    /* Masked: a bool mask per sequence with queries and keys, NULL for the others. */
    attn_tensor mask_t[16];
    const attn_tensor *masks[16] = {NULL};
    for (int64_t b = 0; masked && b < batch; b++) {
        int64_t sm[2] = {len_q[b], len_k[b]};
        memset(&mask_t[b], 0, sizeof mask_t[b]);
        if (len_q[b] && len_k[b]) mask_t[b] = make(ATTN_BOOL, 2, sm), masks[b] = &mask_t[b];
    }
    const attn_tensor *const *mp = masked ? masks : NULL;
    option_set os;
    set_options(&os, var, Hq, threads);
    int64_t cu_q[16] = {0}, cu_k[16] = {0};
    for (int64_t b = 0; b < batch; b++) cu_q[b + 1] = cu_q[b] + len_q[b], cu_k[b + 1] = cu_k[b] + len_k[b];
    int64_t sq[3] = {cu_q[batch], Hq, E}, sk[3] = {cu_k[batch], Hk, E}, sv[3] = {cu_k[batch], Hk, Ev},
            so[3] = {cu_q[batch], Hq, Ev}, sl[2] = {cu_q[batch], Hq};
    attn_tensor q = make(dtype, 3, sq), k = make(dtype, 3, sk), v = make(dtype, 3, sv);
    attn_tensor out = make(dtype, 3, so), lse = make(dtype, 2, sl);
    attn_tensor *lp = var->lse ? &lse : NULL;
    attn_error err;
    size_t bytes, ws = 0;
    void *memory = NULL, *work = NULL;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, batch, &err);
    if (!st) memory = malloc(bytes);
    if (!st)
        st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &out, lp, &q, &k, &v, cu_q, cu_k, batch, mp, &os.o,
                                        &err);
    if (!st) work = malloc(ws ? ws : 1);
    int ok = !st;
    char why[640] = "";
    if (st) snprintf(why, sizeof why, "plan: %s", err.message);
    for (int layer = 0; ok && layer < LAYERS; layer++) {
        attn_tensor lq = like(&q), lk = like(&k), lv = like(&v);
        attn_tensor o1 = like(&out), l1 = like(&lse), o2 = like(&out), l2 = like(&lse);
        st = attn_sdpa_varlen(&o1, var->lse ? &l1 : NULL, &lq, &lk, &lv, cu_q, cu_k, batch, mp, &os.o, &err);
        if (st) ok = 0, snprintf(why, sizeof why, "attn_sdpa_varlen, layer %d: %s", layer, err.message);
        verbose_begin();
        if (ok) st = attn_sdpa_run(plan, &o2, var->lse ? &l2 : NULL, &lq, &lk, &lv, work, ws, &err);
        verbose_end(kernel_seen, sizeof kernel_seen, NULL, 0);
        if (ok && st) ok = 0, snprintf(why, sizeof why, "attn_sdpa_run, layer %d: %s", layer, err.message);
        if (ok && !same_bits(&o1, &o2)) ok = 0, snprintf(why, sizeof why, "layer %d: out differs", layer);
        if (ok && var->lse && !same_bits(&l1, &l2)) ok = 0, snprintf(why, sizeof why, "layer %d: lse differs", layer);
        note_kernel();
        free(lq.data), free(lk.data), free(lv.data), free(o1.data), free(l1.data), free(o2.data), free(l2.data);
    }
    check(ok, name, "%s", why);
    for (int64_t b = 0; b < batch; b++)
        if (masks[b]) free(mask_t[b].data);
    free(memory), free(work), free(q.data), free(k.data), free(v.data), free(out.data), free(lse.data);
}

/* The refusals, on one planned f32 call: each must return its code and
 * leave out untouched. */
static void refusals(void) {
    int64_t sq[3] = {4, 3, 16}, sk[3] = {4, 20, 16}, sl[2] = {4, 3};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl);
    attn_error err;
    size_t bytes, ws;
    attn_sdpa_plan_bytes(&bytes, 0, &err);
    char *memory = calloc(1, bytes), *work = malloc(1 << 20);
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_init(&plan, memory, bytes - 1, &ws, &out, &lse, &q, &k, &v, NULL, &err);
    check(st == ATTN_ERR_WORKSPACE, "plan_memory_too_small", "status %d: %s", st, err.message);
    { /* Every failed init leaves *plan NULL, those refused before memory is looked at too. */
        attn_sdpa_plan *const sentinel = (attn_sdpa_plan *)(void *)memory;
        int64_t cu[2] = {0, 4};
        attn_kv_paged_view bad_view = attn_kv_paged_view_default();
        struct {
            const char *name;
            attn_status st;
        } tries[5];
        plan = sentinel;
        tries[0].name = "sdpa_memory_null", tries[0].st = attn_sdpa_plan_init(&plan, NULL, bytes, &ws, &out, &lse, &q, &k, &v, NULL, &err);
        attn_sdpa_plan *p1 = sentinel;
        tries[1].name = "sdpa_workspace_bytes_null", tries[1].st = attn_sdpa_plan_init(&p1, memory, bytes, NULL, &out, &lse, &q, &k, &v, NULL, &err);
        attn_sdpa_plan *p2 = sentinel;
        tries[2].name = "varlen_batch_negative", tries[2].st = attn_sdpa_varlen_plan_init(&p2, memory, bytes, &ws, &out, &lse, &q, &k, &v, cu, cu, -1, NULL, NULL, &err);
        attn_sdpa_plan *p3 = sentinel;
        tries[3].name = "paged_memory_null", tries[3].st = attn_kv_paged_plan_init(&p3, NULL, bytes, &ws, &out, &lse, &q, cu, &bad_view, NULL, NULL, &err);
        attn_sdpa_plan *p4 = sentinel;
        tries[4].name = "sdpa_memory_too_small", tries[4].st = attn_sdpa_plan_init(&p4, memory, bytes - 1, &ws, &out, &lse, &q, &k, &v, NULL, &err);
        attn_sdpa_plan *const got[5] = {plan, p1, p2, p3, p4};
        for (int t = 0; t < 5; t++) {
            char name[96];
            snprintf(name, sizeof name, "plan_init_failure_sets_plan_null_%s", tries[t].name);
            check(tries[t].st != ATTN_OK && got[t] == NULL, name, "status %d, plan %s", tries[t].st,
                  got[t] == NULL ? "NULL" : "left as it was");
        }
        plan = NULL;
    }
    st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, &k, &v, NULL, &err);
    check(!st, "plan_init", "%s", err.message);
    if (st) return;
    memset(out.data, 0x5a, bytes_of(&out));
    int64_t sq2[3] = {4, 4, 16};
    attn_tensor longer = make(ATTN_F32, 3, sq2), q64 = make(ATTN_F64, 3, sq);
    int64_t tshape[3] = {3, 4, 16};
    attn_tensor qt = make(ATTN_F32, 3, tshape), transposed = q; /* q's shape over (3, 4, 16) memory */
    int64_t lshape[2] = {3, 4};
    attn_tensor lse_other = make(ATTN_F32, 2, lshape);
    transposed.data = qt.data, transposed.strides[0] = 16, transposed.strides[1] = 64, transposed.strides[2] = 1;
    struct {
        const char *name;
        attn_tensor *q, *k, *out, *lse;
        void *work;
        size_t ws;
        attn_status want;
    } bad[] = {
        {"run_q_other_shape", &longer, &k, &out, &lse, work, ws, ATTN_ERR_PLAN},
        {"run_q_other_dtype", &q64, &k, &out, &lse, work, ws, ATTN_ERR_PLAN},
        {"run_q_other_strides", &transposed, &k, &out, &lse, work, ws, ATTN_ERR_PLAN},
        {"run_without_planned_lse", &q, &k, &out, NULL, work, ws, ATTN_ERR_PLAN},
        {"run_lse_other_shape", &q, &k, &out, &lse_other, work, ws, ATTN_ERR_PLAN},
        {"run_workspace_too_small", &q, &k, &out, &lse, work, ws - 1, ATTN_ERR_WORKSPACE},
        {"run_workspace_null", &q, &k, &out, &lse, NULL, ws, ATTN_ERR_NULL},
        {"run_out_is_q", &q, &k, &q, &lse, work, ws, ATTN_ERR_STRIDE},
        {"run_k_null", &q, NULL, &out, &lse, work, ws, ATTN_ERR_NULL},
    };
    unsigned char before[4 * 3 * 16 * 4];
    memcpy(before, out.data, sizeof before);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = attn_sdpa_run(plan, bad[i].out, bad[i].lse, bad[i].q, bad[i].k, &v, bad[i].work, bad[i].ws, &err);
        check(st == bad[i].want && err.message[0] && !memcmp(before, out.data, sizeof before), bad[i].name,
              "status %d (want %d), message \"%s\", out %s", st, bad[i].want, err.message,
              memcmp(before, out.data, sizeof before) ? "written" : "untouched");
    }
    /* A plan without lse refuses one. */
    attn_sdpa_plan *plan2;
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &out, NULL, &q, &k, &v, NULL, &err);
    if (!st) st = attn_sdpa_run(plan2, &out, &lse, &q, &k, &v, work, ws, &err);
    check(st == ATTN_ERR_PLAN, "run_lse_not_planned", "status %d: %s", st, err.message);
    /* Memory that holds no plan, and a plan whose init failed. */
    char *blank = calloc(1, bytes);
    st = attn_sdpa_run((attn_sdpa_plan *)(((uintptr_t)blank + 63) / 64 * 64), &out, NULL, &q, &k, &v, work, ws, &err);
    check(st == ATTN_ERR_PLAN, "run_memory_without_plan", "status %d: %s", st, err.message);
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &out, NULL, &q, &q64, &v, NULL, &err);
    check(st == ATTN_ERR_DTYPE && plan2 == NULL, "plan_init_refused_leaves_no_plan", "status %d: %s", st,
          err.message);
    st = attn_sdpa_run(plan, &out, &lse, &q, &k, &v, work, ws, &err);
    check(st == ATTN_ERR_PLAN, "run_after_failed_init", "status %d: %s", st, err.message);
    /* A plan is made from buffers (attn.h: only measuring takes layouts
     * without data): NULL data is refused by name, for a 16-bit q too. */
    attn_tensor nq = q, nout = out, q16, out16;
    nq.data = nout.data = NULL;
    attn_tensor_init(&q16, NULL, ATTN_F16, 3, sq, NULL, NULL), attn_tensor_init(&out16, out.data, ATTN_F16, 3, sq, NULL, NULL);
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &out, NULL, &nq, &k, &v, NULL, &err);
    check(st == ATTN_ERR_NULL && strstr(err.message, "q has NULL data"), "plan_init_q_null_data_refused", "status %d: %s",
          st, err.message);
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &nout, NULL, &q, &k, &v, NULL, &err);
    check(st == ATTN_ERR_NULL && strstr(err.message, "out has NULL data"), "plan_init_out_null_data_refused",
          "status %d: %s", st, err.message);
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &out16, NULL, &q16, &k, &v, NULL, &err);
    check(st == ATTN_ERR_NULL && strstr(err.message, "q has NULL data"), "plan_init_f16_q_null_data_refused",
          "status %d: %s", st, err.message);
    /* An f64 k beside a 16-bit q: the message names the caller's q, not the
     * f32 stand-in the plan is made on. */
    attn_tensor k64 = make(ATTN_F64, k.rank, k.shape);
    q16.data = q.data;
    st = attn_sdpa_plan_init(&plan2, memory, bytes, &ws, &out16, NULL, &q16, &k64, &v, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "k is f64 but q is f16"), "plan_init_f16_q_f64_k_named",
          "status %d: %s", st, err.message);
    free(k64.data);
    check(attn_sdpa_plan_bytes(&bytes, -1, &err) == ATTN_ERR_ARGUMENT, "plan_bytes_negative_batch", "%s", err.message);
    check(attn_sdpa_plan_bytes(&bytes, INT64_MAX, &err) == ATTN_ERR_OVERFLOW, "plan_bytes_overflow", "%s", err.message);
    /* A ragged plan: the packed tensors must keep their rows. */
    int64_t cu[3] = {0, 1, 4}, cuk[3] = {0, 8, 20}, pq[3] = {4, 3, 16}, pk[3] = {20, 3, 16};
    attn_tensor vq = make(ATTN_F32, 3, pq), vk = make(ATTN_F32, 3, pk), vv = make(ATTN_F32, 3, pk), vo = make(ATTN_F32, 3, pq);
    size_t vb;
    attn_sdpa_plan_bytes(&vb, 2, &err);
    char *vmem = malloc(vb);
    attn_sdpa_plan *vp;
    st = attn_sdpa_varlen_plan_init(&vp, vmem, vb, &ws, &vo, NULL, &vq, &vk, &vv, cu, cuk, 2, NULL, NULL, &err);
    int64_t pk2[3] = {21, 3, 16};
    attn_tensor vk2 = make(ATTN_F32, 3, pk2);
    if (!st) st = attn_sdpa_run(vp, &vo, NULL, &vq, &vk2, &vv, work, 1 << 20, &err);
    check(st == ATTN_ERR_PLAN && strstr(err.message, "k ") == err.message, "varlen_run_k_other_rows", "status %d: %s",
          st, err.message);
    st = attn_sdpa_varlen_plan_init(&vp, vmem, vb - 1, &ws, &vo, NULL, &vq, &vk, &vv, cu, cuk, 2, NULL, NULL, &err);
    check(st == ATTN_ERR_WORKSPACE, "varlen_plan_memory_too_small", "status %d: %s", st, err.message);
    /* A layer's out over a sequence's mask (planned with masks elsewhere). */
    int64_t smask[2] = {3, 12};
    attn_tensor m1 = make(ATTN_F32, 2, smask), m_over = vo;
    free(m1.data), m1.data = calloc(4 * 3 * 16, sizeof(float)); /* room for out's rows too */
    const attn_tensor *vmasks[2] = {NULL, &m1};
    st = attn_sdpa_varlen_plan_init(&vp, vmem, vb, &ws, &vo, NULL, &vq, &vk, &vv, cu, cuk, 2, vmasks, NULL, &err);
    if (!st) m_over.data = m1.data, st = attn_sdpa_run(vp, &m_over, NULL, &vq, &vk, &vv, work, 1 << 20, &err);
    check(st == ATTN_ERR_STRIDE, "varlen_run_out_over_a_mask", "status %d: %s", st, err.message);
    free(m1.data);
    cu[1] = 5;
    st = attn_sdpa_varlen_plan_init(&vp, vmem, vb, &ws, &vo, NULL, &vq, &vk, &vv, cu, cuk, 2, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT, "varlen_plan_bad_offsets", "status %d: %s", st, err.message);
    free(vq.data), free(vk.data), free(vv.data), free(vo.data), free(vk2.data), free(vmem);
    free(longer.data), free(q64.data), free(qt.data), free(lse_other.data), free(blank);
    free(memory), free(work), free(q.data), free(k.data), free(v.data), free(out.data), free(lse.data);
}

/* Random pages of dtype dt (f32, or f16 through a conversion). */
static attn_tensor pages_of(attn_dtype dt, const int64_t *shape) {
    attn_tensor f = make(ATTN_F32, 4, shape);
    if (dt == ATTN_F32) return f;
    attn_tensor h;
    attn_tensor_init(&h, NULL, dt, 4, shape, NULL, NULL);
    h.data = calloc((size_t)attn_tensor_numel(&h) + 1, attn_dtype_size(dt));
    attn_tensor_convert(&h, &f, NULL);
    free(f.data);
    return h;
}

/* A paged batch planned once (attn_kv_paged_plan_init) and run for three
 * layers, each with its own pages under the same block table and fresh q:
 * each run bitwise attn_kv_paged_attend on a view of that layer's pages,
 * its verbose line the planned paged run. Sequences: a decode against 37
 * positions, an empty one, 20 queries against 300, 5 against 5 (Hq 4, Hk
 * 2, pages of 16, some pages unused). */
static void paged_case(attn_dtype dt, const variant *var, int threads, int masked) {
    char name[160];
    snprintf(name, sizeof name, "paged%s_%s_%s_threads%d", masked ? "_masks" : "", dt == ATTN_F32 ? "f32" : "f16",
             var->name, threads);
    if (var->causal == ATTN_CAUSAL_TOP_LEFT) return; /* paged queries are the last positions: refused */
    enum { NS = 4, P = 16, NP = 40, STRIDE = 20, HQ = 4, HK = 2, E = 16, EV = 8 };
    static const int64_t LQ[NS] = {1, 0, 20, 5}, LK[NS] = {37, 0, 300, 5};
    int32_t table[NS * STRIDE];
    for (int i = 0; i < NS * STRIDE; i++) table[i] = (int32_t)((i * 7 + 3) % NP); /* a permutation within each row */
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = dt, w.heads = HK, w.key_dim = E, w.value_dim = EV, w.page_size = P, w.num_pages = NP;
    w.num_sequences = NS, w.lengths = LK, w.page_table = table, w.table_stride = STRIDE;
    int64_t kshape[4] = {NP, HK, P, E}, vshape[4] = {NP, HK, P, EV};
    attn_tensor kp = pages_of(dt, kshape), vp = pages_of(dt, vshape);
    w.k_pages = kp.data, w.v_pages = vp.data;
    attn_tensor mask_t[NS];
    const attn_tensor *masks[NS] = {NULL};
    for (int b = 0; masked && b < NS; b++) {
        int64_t sm[2] = {LQ[b], LK[b]};
        if (LQ[b] && LK[b] && b != 3) mask_t[b] = make(ATTN_BOOL, 2, sm), masks[b] = &mask_t[b];
    }
    const attn_tensor *const *mp = masked ? masks : NULL;
    option_set os;
    set_options(&os, var, HQ, threads);
    int64_t cu[NS + 1] = {0};
    for (int b = 0; b < NS; b++) cu[b + 1] = cu[b] + LQ[b];
    int64_t sq[3] = {cu[NS], HQ, E}, so[3] = {cu[NS], HQ, EV}, sl[2] = {cu[NS], HQ};
    attn_tensor q = make(ATTN_F32, 3, sq), out = make(ATTN_F32, 3, so), lse = make(ATTN_F32, 2, sl);
    attn_tensor *lp = var->lse ? &lse : NULL;
    attn_error err;
    size_t bytes, ws = 0;
    void *memory = NULL, *work = NULL;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, NS, &err);
    if (!st) memory = malloc(bytes);
    if (!st) st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, lp, &q, cu, &w, mp, &os.o, &err);
    if (!st) work = malloc(ws ? ws : 1);
    int ok = !st;
    char why[640] = "";
    if (st) snprintf(why, sizeof why, "plan: %s", err.message);
    for (int layer = 0; ok && layer < LAYERS; layer++) {
        attn_tensor lq = like(&q), lk = pages_of(dt, kshape), lv = pages_of(dt, vshape);
        attn_tensor o1 = like(&out), l1 = like(&lse), o2 = like(&out), l2 = like(&lse);
        attn_kv_paged_view lw = w;
        lw.k_pages = lk.data, lw.v_pages = lv.data;
        st = attn_kv_paged_attend(&o1, var->lse ? &l1 : NULL, &lq, cu, &lw, mp, &os.o, &err);
        if (st) ok = 0, snprintf(why, sizeof why, "attn_kv_paged_attend, layer %d: %s", layer, err.message);
        verbose_begin();
        if (ok) st = attn_kv_paged_run(plan, &o2, var->lse ? &l2 : NULL, &lq, lk.data, lv.data, work, ws, &err);
        verbose_end(kernel_seen, sizeof kernel_seen, NULL, 0);
        if (ok && st) ok = 0, snprintf(why, sizeof why, "attn_kv_paged_run, layer %d: %s", layer, err.message);
        if (ok && strncmp(verbose_last_line, "attn: sdpa_run paged ", 21))
            ok = 0, snprintf(why, sizeof why, "layer %d: the line is not the planned paged run's: %.400s", layer,
                             verbose_last_line);
        if (ok && !same_bits(&o1, &o2)) ok = 0, snprintf(why, sizeof why, "layer %d: out differs", layer);
        if (ok && var->lse && !same_bits(&l1, &l2)) ok = 0, snprintf(why, sizeof why, "layer %d: lse differs", layer);
        note_kernel();
        free(lq.data), free(lk.data), free(lv.data), free(o1.data), free(l1.data), free(o2.data), free(l2.data);
    }
    check(ok, name, "%s", why);
    for (int b = 0; b < NS; b++)
        if (masks[b]) free(mask_t[b].data);
    free(memory), free(work), free(q.data), free(out.data), free(lse.data), free(kp.data), free(vp.data);
}

/* A quantized pool's step planned once and run for three layers, each
 * layer its own pool (the same sequences and lengths, other keys, values,
 * residual rows and per-head scales): layer 0 through attn_kv_paged_run on
 * the planned view's own pages, every layer through attn_kv_paged_run_view
 * on its pool's view, each bitwise attn_kv_pages_attend on that pool, with
 * the workspace exactly the plan's (it holds q's turned copy with the
 * rotation). Then attn_kv_paged_run with another layer's pages is refused
 * when the view has residual rows or scales. Sequences: 37 positions
 * (5 in the residual rows), a fork of it cut to 33 and grown to 40, an
 * empty one, 300 and 5, with 1, 2, 0, 20 and 5 queries. */
typedef struct quant_feature {
    const char *name;
    attn_dtype dtype, key_dtype;
    int scales, hadamard;
} quant_feature;

static const quant_feature QUANT_FEATURES[] = {
    {"q4c_keys", ATTN_Q8, ATTN_Q4C, 0, 0},
    {"q2c_keys_e4m3_v_scale", ATTN_E4M3, ATTN_Q2C, 2, 0},
    {"e4m3_scales", ATTN_E4M3, 0, 1, 0},
    {"q8_hadamard", ATTN_Q8, 0, 0, 1},
    {"q4_hadamard", ATTN_Q4, 0, 0, 1},
    {"e5m2_scales_hadamard", ATTN_E5M2, 0, 1, 1},
};

static void quant_paged_case(const quant_feature *f, const variant *var, int threads) {
    enum { NS = 5, P = 32, NP = 40, HQ = 4, HK = 2, E = 32, EV = 32, LAYERS_Q = 3 };
    char name[160];
    snprintf(name, sizeof name, "paged_%s_%s_threads%d", f->name, var->name, threads);
    if (var->causal == ATTN_CAUSAL_TOP_LEFT) return; /* paged queries are the last positions: refused */
    const int refused = var->rope && f->hadamard; /* RoPE's pairs do not survive the rotation: refused, as unplanned */
    static const int64_t LQ[NS] = {1, 2, 0, 20, 5};
    float ks[LAYERS_Q][HK], vs[LAYERS_Q][HK];
    attn_kv_pages *pools[LAYERS_Q] = {NULL};
    void *pool_mem[LAYERS_Q] = {NULL};
    attn_error err;
    attn_status st = ATTN_OK;
    char why[640] = "";
    for (int l = 0; l < LAYERS_Q && !st; l++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.heads = HK, d.key_dim = E, d.value_dim = EV, d.dtype = f->dtype, d.key_dtype = f->key_dtype;
        d.page_size = P, d.num_pages = NP, d.max_sequences = NS, d.hadamard = f->hadamard;
        for (int h = 0; h < HK; h++) ks[l][h] = 0.5f + 0.25f * (float)(l + h), vs[l][h] = 2.0f - 0.5f * (float)h + (float)l;
        if (f->scales == 1) d.k_scale = ks[l];
        if (f->scales) d.v_scale = vs[l];
        size_t bytes;
        int64_t id[NS];
        if ((st = attn_kv_pages_bytes(&bytes, &d, &err)) || !(pool_mem[l] = malloc(bytes)) ||
            (st = attn_kv_pages_init(&pools[l], pool_mem[l], bytes, &d, &err)))
            break;
        for (int i = 0; i < NS && !st; i++) st = attn_kv_pages_create(pools[l], &id[i], &err);
        /* sequence 0: 37 positions; 1 its fork, cut to 33 and grown to 40; 3: 300; 4: 5 */
        int64_t seqs[3] = {0, 3, 4}, cu[4] = {0, 37, 337, 342};
        int64_t sk[3] = {cu[3], HK, E}, sv[3] = {cu[3], HK, EV}, s7k[3] = {7, HK, E}, s7v[3] = {7, HK, EV}, cu7[2] = {0, 7};
        attn_tensor k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sv), k7 = make(ATTN_F32, 3, s7k),
                    v7 = make(ATTN_F32, 3, s7v);
        int64_t child;
        if (!st) st = attn_kv_pages_append(pools[l], seqs, 3, &k, &v, cu, &err);
        if (!st) st = attn_kv_pages_free(pools[l], 1, &err);
        if (!st) st = attn_kv_pages_fork(pools[l], &child, 0, &err);
        if (!st && child != 1) st = ATTN_ERR_ARGUMENT, snprintf(err.message, sizeof err.message, "the fork is %lld", (long long)child);
        if (!st) st = attn_kv_pages_truncate(pools[l], 1, 33, &err);
        if (!st) st = attn_kv_pages_append(pools[l], &child, 1, &k7, &v7, cu7, &err);
        free(k.data), free(v.data), free(k7.data), free(v7.data);
    }
    if (st) snprintf(why, sizeof why, "the pools: %s", err.message);
    option_set os;
    set_options(&os, var, HQ, threads);
    int64_t cu[NS + 1] = {0};
    for (int b = 0; b < NS; b++) cu[b + 1] = cu[b] + LQ[b];
    int64_t sq[3] = {cu[NS], HQ, E}, so[3] = {cu[NS], HQ, EV}, sl[2] = {cu[NS], HQ}, seqs[NS] = {0, 1, 2, 3, 4};
    attn_tensor q = make(ATTN_F32, 3, sq), out = make(ATTN_F32, 3, so), lse = make(ATTN_F32, 2, sl);
    attn_tensor *lp = var->lse ? &lse : NULL;
    attn_kv_paged_view w[LAYERS_Q];
    for (int l = 0; l < LAYERS_Q && !st; l++) w[l].struct_size = sizeof w[l], st = attn_kv_pages_view(&w[l], pools[l], &err);
    size_t bytes = 0, ws = 0;
    void *memory = NULL, *work = NULL;
    attn_sdpa_plan *plan = NULL;
    if (!st) st = attn_sdpa_plan_bytes(&bytes, NS, &err);
    if (!st) memory = malloc(bytes);
    if (!st) st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, lp, &q, cu, &w[0], NULL, &os.o, &err);
    if (refused) {
        attn_status unplanned = attn_kv_pages_attend(&out, lp, &q, cu, seqs, NS, pools[0], NULL, &os.o, NULL);
        check(st == ATTN_ERR_OPTION && unplanned == ATTN_ERR_OPTION, name, "plan status %d (%s), unplanned %d", st,
              err.message, unplanned);
        st = ATTN_ERR_OPTION;
    }
    if (!st) work = malloc(ws ? ws : 1);
    int ok = !st;
    if (st && !why[0]) snprintf(why, sizeof why, "plan: %s", err.message);
    for (int run = 0; ok && run <= LAYERS_Q; run++) {
        int l = run == LAYERS_Q ? 0 : run; /* the last run: layer 0 by attn_kv_paged_run */
        attn_tensor lq = like(&q), o1 = like(&out), l1 = like(&lse), o2 = like(&out), l2 = like(&lse);
        st = attn_kv_pages_attend(&o1, var->lse ? &l1 : NULL, &lq, cu, seqs, NS, pools[l], NULL, &os.o, &err);
        if (st) ok = 0, snprintf(why, sizeof why, "attn_kv_pages_attend, layer %d: %s", l, err.message);
        verbose_begin();
        if (ok && run == LAYERS_Q)
            st = attn_kv_paged_run(plan, &o2, var->lse ? &l2 : NULL, &lq, w[0].k_pages, w[0].v_pages, work, ws, &err);
        else if (ok)
            st = attn_kv_paged_run_view(plan, &o2, var->lse ? &l2 : NULL, &lq, &w[l], work, ws, &err);
        verbose_end(kernel_seen, sizeof kernel_seen, NULL, 0);
        if (ok && st) ok = 0, snprintf(why, sizeof why, "run %d: %s", run, err.message);
        if (ok && strncmp(verbose_last_line, "attn: sdpa_run paged ", 21))
            ok = 0, snprintf(why, sizeof why, "run %d: the line is not the planned paged run's: %.400s", run,
                             verbose_last_line);
        if (ok && !same_bits(&o1, &o2)) ok = 0, snprintf(why, sizeof why, "run %d: out differs", run);
        if (ok && var->lse && !same_bits(&l1, &l2)) ok = 0, snprintf(why, sizeof why, "run %d: lse differs", run);
        /* the unplanned view call agrees too (the same rows as the pool's) */
        if (ok && (st = attn_kv_paged_attend(&o2, var->lse ? &l2 : NULL, &lq, cu, &w[l], NULL, &os.o, &err)))
            ok = 0, snprintf(why, sizeof why, "attn_kv_paged_attend, layer %d: %s", l, err.message);
        if (ok && !same_bits(&o1, &o2)) ok = 0, snprintf(why, sizeof why, "layer %d: the view's attend differs", l);
        free(lq.data), free(o1.data), free(l1.data), free(o2.data), free(l2.data);
    }
    if (ok && (f->key_dtype || f->scales)) {
        st = attn_kv_paged_run(plan, &out, lp, &q, w[1].k_pages, w[1].v_pages, work, ws, &err);
        if (st != ATTN_ERR_PLAN) ok = 0, snprintf(why, sizeof why, "another layer's pages without its view: status %d", st);
    }
    if (ok && ws > 0) { /* the workspace is what the plan said, no less */
        st = attn_kv_paged_run_view(plan, &out, lp, &q, &w[0], work, ws - 1, &err);
        if (st != ATTN_ERR_WORKSPACE) ok = 0, snprintf(why, sizeof why, "a workspace 1 byte short: status %d", st);
    }
    if (!refused) check(ok, name, "%s", why);
    for (int l = 0; l < LAYERS_Q; l++) free(pool_mem[l]);
    free(memory), free(work), free(q.data), free(out.data), free(lse.data);
}

/* What a run over another layer's view must share with the plan's. */
static void quant_paged_refusals(void) {
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    float ks[1] = {1.5f};
    d.key_dim = d.value_dim = 32, d.dtype = ATTN_E4M3, d.page_size = 32, d.num_pages = 4, d.max_sequences = 2;
    d.k_scale = ks, d.hadamard = 1;
    attn_error err;
    size_t bytes, ws = 0;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    void *pm = malloc(bytes), *memory = NULL, *work = NULL;
    attn_kv_pages *pool = NULL;
    int64_t id, cu[3] = {0, 1, 1}, sk[3] = {3, 1, 32}, cuk[2] = {0, 3}, sq[3] = {1, 1, 32}, sl[2] = {1, 1};
    attn_tensor k = make(ATTN_F32, 3, sk), q = make(ATTN_F32, 3, sq), out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl);
    if (!st) st = attn_kv_pages_init(&pool, pm, bytes, &d, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, &k, &k, cuk, &err);
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    if (!st) st = attn_kv_pages_view(&w, pool, &err);
    attn_sdpa_plan *plan = NULL;
    if (!st) st = attn_sdpa_plan_bytes(&bytes, w.num_sequences, &err);
    if (!st) memory = malloc(bytes);
    if (!st) st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, cu, &w, NULL, NULL, &err);
    check(!st, "paged_plan_of_e4m3_scales_hadamard", "status %d: %s", st, err.message);
    work = malloc(ws + 1);
    int64_t len[2] = {4, 0};
    struct {
        const char *name;
        attn_kv_paged_view w;
        attn_status want;
    } r[5];
    for (int i = 0; i < 5; i++) r[i].w = w;
    r[0].name = "paged_run_view_refuses_other_lengths", r[0].w.lengths = len, r[0].want = ATTN_ERR_PLAN;
    r[1].name = "paged_run_view_refuses_no_scales", r[1].w.k_scale = NULL, r[1].want = ATTN_ERR_PLAN;
    r[2].name = "paged_run_view_refuses_no_rotation", r[2].w.hadamard = 0, r[2].want = ATTN_ERR_PLAN;
    r[3].name = "paged_run_view_refuses_other_dtype", r[3].w.dtype = ATTN_E5M2, r[3].want = ATTN_ERR_PLAN;
    r[4].name = "paged_run_view_refuses_a_bad_view", r[4].w.k_pages = NULL, r[4].want = ATTN_ERR_NULL;
    memset(out.data, 0x5a, 32 * 4);
    for (int i = 0; i < 5 && plan; i++) {
        st = attn_kv_paged_run_view(plan, &out, &lse, &q, &r[i].w, work, ws + 1, &err);
        check(st == r[i].want && ((unsigned char *)out.data)[0] == 0x5a, r[i].name, "status %d (want %d): %s", st,
              r[i].want, err.message);
    }
    attn_tensor on_scale = lse;
    on_scale.data = (void *)(uintptr_t)w.k_scale; /* the pool's copy of the scales */
    st = plan ? attn_kv_paged_run_view(plan, &out, &on_scale, &q, &w, work, ws + 1, &err) : ATTN_ERR_PLAN;
    check(st == ATTN_ERR_STRIDE, "paged_run_view_refuses_lse_on_the_scales", "status %d: %s", st, err.message);
    free(pm), free(memory), free(work), free(k.data), free(q.data), free(out.data), free(lse.data);
}

/* A paged plan's refusals: each returns its code and leaves out untouched. */
static void paged_refusals(void) {
    enum { P = 16, NP = 4, HK = 1, E = 8 };
    int32_t table[2] = {2, 0};
    int64_t lengths[2] = {20, 3}, cu[3] = {0, 2, 3};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.heads = HK, w.key_dim = w.value_dim = E, w.page_size = P, w.num_pages = NP;
    w.num_sequences = 1, w.lengths = lengths, w.page_table = table, w.table_stride = 2;
    int64_t pshape[4] = {NP, HK, P, E}, sq[3] = {2, 2, E}, sq2[3] = {3, 2, E}, sl[2] = {2, 2};
    attn_tensor kp = make(ATTN_F32, 4, pshape), vp = make(ATTN_F32, 4, pshape);
    w.k_pages = kp.data, w.v_pages = vp.data;
    attn_tensor q = make(ATTN_F32, 3, sq), out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl);
    attn_error err;
    size_t bytes, ws;
    attn_sdpa_plan *plan = NULL;
    attn_sdpa_plan_bytes(&bytes, 1, &err);
    void *memory = malloc(bytes), *work = malloc(1 << 20);
    attn_status st = attn_kv_paged_plan_init(&plan, memory, bytes - 64, &ws, &out, &lse, &q, cu, &w, NULL, NULL, &err);
    check(st == ATTN_ERR_WORKSPACE, "paged_plan_refuses_memory_too_small", "status %d: %s", (int)st, err.message);
    int64_t cu_bad[2] = {0, 1};
    st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, cu_bad, &w, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT, "paged_plan_refuses_offsets_short_of_q", "status %d: %s", (int)st, err.message);
    attn_sdpa_options top = attn_sdpa_options_default();
    top.causal = ATTN_CAUSAL_TOP_LEFT;
    st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, cu, &w, NULL, &top, &err);
    check(st == ATTN_ERR_OPTION, "paged_plan_refuses_top_left", "status %d: %s", (int)st, err.message);
    st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, cu, &w, NULL, NULL, &err);
    check(st == ATTN_OK, "paged_plan_of_one_sequence", "status %d: %s", (int)st, err.message);
    memset(out.data, 0x5a, bytes_of(&out));
    unsigned char *o = out.data;
    struct {
        const char *name;
        attn_status want, got;
    } r[7];
    int n = 0;
    attn_tensor q2 = make(ATTN_F32, 3, sq2);
    r[n].name = "paged_run_refuses_other_q", r[n].want = ATTN_ERR_PLAN,
    r[n++].got = attn_kv_paged_run(plan, &out, &lse, &q2, kp.data, vp.data, work, 1 << 20, &err);
    r[n].name = "paged_run_refuses_workspace_too_small", r[n].want = ATTN_ERR_WORKSPACE,
    r[n++].got = attn_kv_paged_run(plan, &out, &lse, &q, kp.data, vp.data, work, ws ? ws - 1 : 0, &err);
    if (!ws) r[n - 1].got = ATTN_ERR_WORKSPACE; /* (no workspace to be short of) */
    r[n].name = "paged_run_refuses_null_pages", r[n].want = ATTN_ERR_NULL,
    r[n++].got = attn_kv_paged_run(plan, &out, &lse, &q, NULL, vp.data, work, 1 << 20, &err);
    attn_tensor in_pages = out;
    in_pages.data = kp.data;
    r[n].name = "paged_run_refuses_out_in_the_pages", r[n].want = ATTN_ERR_STRIDE,
    r[n++].got = attn_kv_paged_run(plan, &in_pages, &lse, &q, kp.data, vp.data, work, 1 << 20, &err);
    r[n].name = "paged_run_refuses_lse_not_planned", r[n].want = ATTN_ERR_PLAN,
    r[n++].got = attn_kv_paged_run(plan, &out, NULL, &q, kp.data, vp.data, work, 1 << 20, &err);
    attn_tensor k4 = make(ATTN_F32, 3, sq);
    r[n].name = "sdpa_run_refuses_a_paged_plan", r[n].want = ATTN_ERR_PLAN,
    r[n++].got = attn_sdpa_run(plan, &out, &lse, &q, &k4, &k4, work, 1 << 20, &err);
    for (int i = 0; i < n; i++) check(r[i].got == r[i].want && o[0] == 0x5a, r[i].name, "status %d (want %d)", (int)r[i].got, (int)r[i].want);
    free(q2.data), free(k4.data), free(memory), free(work), free(kp.data), free(vp.data), free(q.data), free(out.data),
        free(lse.data);
}

/* fp8 keys and values descaled by the options (k_descale, v_descale) rather
 * than by a pool's own scales. A paged plan over a pool without scales
 * runs them bitwise as attn_kv_paged_attend does, at 1 to 3 threads (a
 * run once replaced the options' scales by the view's, none: a NULL
 * read); and every kind of run refuses an out over a descale tensor, as
 * the unplanned calls do, writing nothing. */
static void descaled_plans(void) {
    enum { HK = 2, HQ = 4, E = 32, NS = 2 };
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = HK, d.key_dim = d.value_dim = E, d.dtype = ATTN_E4M3, d.page_size = 16, d.num_pages = 8;
    d.max_sequences = NS;
    attn_error err;
    size_t bytes, ws = 0;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    void *pm = st ? NULL : malloc(bytes), *memory = NULL, *work = NULL;
    attn_kv_pages *pool = NULL;
    int64_t ids[NS], cuk[NS + 1] = {0, 20, 53}, cu[NS + 1] = {0, 1, 3}, sk[3] = {53, HK, E}, sq[3] = {3, HQ, E};
    int64_t hk = HK;
    attn_tensor k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk), q = make(ATTN_F32, 3, sq);
    attn_tensor out = make(ATTN_F32, 3, sq), o1 = make(ATTN_F32, 3, sq), ks, vs;
    float kd[HK] = {0.5f, 1.75f}, vd[HK] = {2.0f, 0.25f};
    attn_tensor_init(&ks, kd, ATTN_F32, 1, &hk, NULL, NULL), attn_tensor_init(&vs, vd, ATTN_F32, 1, &hk, NULL, NULL);
    if (!st) st = attn_kv_pages_init(&pool, pm, bytes, &d, &err);
    for (int i = 0; i < NS && !st; i++) st = attn_kv_pages_create(pool, &ids[i], &err);
    if (!st) st = attn_kv_pages_append(pool, ids, NS, &k, &v, cuk, &err);
    attn_kv_paged_view w = attn_kv_paged_view_default();
    if (!st) st = attn_kv_pages_view(&w, pool, &err);
    attn_sdpa_plan *plan = NULL;
    char name[96];
    for (int threads = 1; threads <= 3; threads++) {
        attn_context c = attn_context_default();
        c.num_threads = threads;
        attn_sdpa_options o = attn_sdpa_options_default();
        o.context = &c, o.k_descale = &ks, o.v_descale = &vs;
        attn_status s1 = st, s2 = st;
        if (!s1) s1 = attn_sdpa_plan_bytes(&bytes, w.num_sequences, &err);
        if (!s1) free(memory), memory = malloc(bytes);
        if (!s1) s1 = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, NULL, &q, cu, &w, NULL, &o, &err);
        if (!s1) free(work), work = malloc(ws ? ws : 1);
        if (!s1) s1 = attn_kv_paged_run(plan, &out, NULL, &q, w.k_pages, w.v_pages, work, ws, &err);
        if (!s1) s2 = attn_kv_paged_attend(&o1, NULL, &q, cu, &w, NULL, &o, &err);
        snprintf(name, sizeof name, "paged_plan_options_descale_threads%d", threads);
        check(!s1 && !s2 && same_bits(&out, &o1), name, "run %d, attend %d: %s", (int)s1, (int)s2,
              s1 || s2 ? err.message : "out differs");
    }
    /* out over the options' descale tensors: every run refuses it */
    attn_sdpa_options o = attn_sdpa_options_default();
    o.k_descale = &ks, o.v_descale = &vs;
    float over[HQ * E * 3];
    attn_tensor on = out;
    on.data = over;
    memset(over, 0x5a, sizeof over);
    ks.data = over; /* the scales now lie in out's memory */
    over[0] = over[1] = 1.0f;
    st = plan ? attn_kv_paged_run(plan, &on, NULL, &q, w.k_pages, w.v_pages, work, ws, &err) : ATTN_ERR_PLAN;
    check(st == ATTN_ERR_STRIDE && ((unsigned char *)over)[8] == 0x5a, "paged_run_refuses_out_over_k_descale",
          "status %d: %s", (int)st, err.message);
    ks.data = kd;
    /* a dense plan of the same fp8 rows, seen as (Hk, S, E), and a ragged one */
    attn_tensor kv[2], q2, o2;
    int64_t sq2[3] = {HQ, 1, E};
    attn_tensor_init(&q2, q.data, ATTN_F32, 3, sq2, NULL, NULL), attn_tensor_init(&o2, out.data, ATTN_F32, 3, sq2, NULL, NULL);
    if (!attn_kv_pages_view(&w, pool, &err)) {
        for (int i = 0; i < 2; i++) { /* sequence 0's first page: rows (h, j) at page 0 */
            int64_t shape[3] = {HK, 16, E}, strides[3] = {16 * E, E, 1};
            attn_tensor_init(&kv[i], (void *)(uintptr_t)(i ? w.v_pages : w.k_pages), ATTN_E4M3, 3, shape, strides, NULL);
        }
    }
    attn_sdpa_plan *dense = NULL;
    attn_sdpa_plan_bytes(&bytes, 0, NULL);
    void *dm = malloc(bytes);
    st = attn_sdpa_plan_init(&dense, dm, bytes, &ws, &o2, NULL, &q2, &kv[0], &kv[1], &o, &err);
    free(work), work = malloc(ws ? ws : 1);
    attn_tensor on2 = o2;
    on2.data = over;
    memset(over, 0x5a, sizeof over);
    vs.data = over + 4;
    over[4] = over[5] = 1.0f;
    if (!st) st = attn_sdpa_run(dense, &on2, NULL, &q2, &kv[0], &kv[1], work, ws, &err);
    check(st == ATTN_ERR_STRIDE && ((unsigned char *)over)[0] == 0x5a, "sdpa_run_refuses_out_over_v_descale",
          "status %d: %s", (int)st, err.message);
    vs.data = vd;
    free(dm), free(memory), free(work), free(pm), free(k.data), free(v.data), free(q.data), free(out.data),
        free(o1.data);
}

/* A ragged batch of no sequences planned in exactly the bytes
 * attn_sdpa_plan_bytes gives for batch 0 (ASan sees any write past them),
 * and run. */
static void empty_varlen_plan(void) {
    int64_t s0[3] = {0, 2, 8}, l0[2] = {0, 2}, cu[1] = {0};
    attn_tensor q = make(ATTN_F32, 3, s0), out = make(ATTN_F32, 3, s0), lse = make(ATTN_F32, 2, l0);
    attn_error err;
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    void *memory = malloc(bytes), *work = malloc(64);
    if (!st) st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, &q, &q, cu, cu, 0, NULL, NULL, &err);
    if (!st) st = attn_sdpa_run(plan, &out, &lse, &q, &q, &q, work, 64, &err);
    check(!st, "varlen_plan_of_an_empty_batch_fits_its_bytes", "status %d: %s", (int)st, err.message);
    free(memory), free(work), free(q.data), free(out.data), free(lse.data);
}

/* A plan whose workspace_bytes is 0 runs with no workspace: a caller who
 * asked and got 0 passes NULL and 0, for every kind of run (dense,
 * ragged, paged, a paged run over a layer's view). A plan that needs bytes
 * still refuses NULL, naming what it needs (ATTN_ERR_NULL), writing
 * nothing. */
static void runs_without_workspace(void) {
    attn_error err;
    size_t bytes = 0, ws = 1;
    attn_sdpa_plan *plan = NULL;
    attn_sdpa_plan_bytes(&bytes, 2, &err); /* the largest plan below: a batch of 2 */
    char *memory = malloc(bytes);
    /* Dense, no query rows, and no keys (out 0, as attn_sdpa writes it). */
    int64_t sq0[3] = {2, 0, 8}, sk[3] = {2, 5, 8}, sl0[2] = {2, 0}, sq[3] = {2, 3, 8}, sk0[3] = {2, 0, 8}, sl[2] = {2, 3};
    attn_tensor q0 = make(ATTN_F32, 3, sq0), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor o0 = make(ATTN_F32, 3, sq0), l0 = make(ATTN_F32, 2, sl0);
    attn_status st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &o0, &l0, &q0, &k, &v, NULL, &err);
    if (!st && ws == 0) st = attn_sdpa_run(plan, &o0, &l0, &q0, &k, &v, NULL, 0, &err);
    check(!st && ws == 0, "dense_run_of_no_queries_without_workspace", "status %d, workspace_bytes %zu: %s", (int)st,
          ws, err.message);
    attn_tensor q = make(ATTN_F32, 3, sq), k0 = make(ATTN_F32, 3, sk0), v0 = make(ATTN_F32, 3, sk0);
    attn_tensor o = make(ATTN_F32, 3, sq), l = make(ATTN_F32, 2, sl), want = make(ATTN_F32, 3, sq), wl = make(ATTN_F32, 2, sl);
    memset(o.data, 0x5a, bytes_of(&o));
    ws = 1;
    st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &o, &l, &q, &k0, &v0, NULL, &err);
    if (!st && ws == 0) st = attn_sdpa_run(plan, &o, &l, &q, &k0, &v0, NULL, 0, &err);
    if (!st && ws == 0) st = attn_sdpa(&want, &wl, NULL, &q, &k0, &v0, NULL, &err);
    check(!st && ws == 0 && same_bits(&o, &want) && same_bits(&l, &wl), "dense_run_of_no_keys_without_workspace",
          "status %d, workspace_bytes %zu: %s", (int)st, ws, st ? err.message : "out or lse differs from attn_sdpa's");
    /* Ragged: a batch of none, and one whose sequences have no queries. */
    int64_t cu0[1] = {0}, cu_q[3] = {0, 0, 0}, cu_k[3] = {0, 2, 5}, pk[3] = {5, 2, 8}, pq[3] = {0, 2, 8};
    attn_tensor pq0 = make(ATTN_F32, 3, pq), pk5 = make(ATTN_F32, 3, pk), po0 = make(ATTN_F32, 3, pq);
    ws = 1;
    st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &po0, NULL, &pq0, &pq0, &pq0, cu0, cu0, 0, NULL, NULL, &err);
    if (!st && ws == 0) st = attn_sdpa_run(plan, &po0, NULL, &pq0, &pq0, &pq0, NULL, 0, &err);
    check(!st && ws == 0, "varlen_run_of_no_sequences_without_workspace", "status %d, workspace_bytes %zu: %s", (int)st,
          ws, err.message);
    ws = 1;
    st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &po0, NULL, &pq0, &pk5, &pk5, cu_q, cu_k, 2, NULL, NULL,
                                    &err);
    if (!st && ws == 0) st = attn_sdpa_run(plan, &po0, NULL, &pq0, &pk5, &pk5, NULL, 0, &err);
    check(!st && ws == 0, "varlen_run_of_no_queries_without_workspace", "status %d, workspace_bytes %zu: %s", (int)st,
          ws, err.message);
    /* Paged: a step with no queries over one sequence of 9 positions, by
     * the planned pages and by the layer's view. */
    float *pages = calloc(2 * 16 * 8, sizeof(float));
    int64_t len[1] = {9}, cu[2] = {0, 0}, s0[3] = {0, 1, 8}, ls0[2] = {0, 1};
    int32_t table[1] = {1};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.heads = 1, w.key_dim = w.value_dim = 8, w.page_size = 16, w.num_pages = 2;
    w.k_pages = w.v_pages = pages, w.num_sequences = 1, w.lengths = len, w.page_table = table, w.table_stride = 1;
    attn_tensor gq = make(ATTN_F32, 3, s0), go = make(ATTN_F32, 3, s0), gl = make(ATTN_F32, 2, ls0);
    ws = 1;
    st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &go, &gl, &gq, cu, &w, NULL, NULL, &err);
    if (!st && ws == 0) st = attn_kv_paged_run(plan, &go, &gl, &gq, pages, pages, NULL, 0, &err);
    check(!st && ws == 0, "paged_run_of_no_queries_without_workspace", "status %d, workspace_bytes %zu: %s", (int)st,
          ws, err.message);
    if (!st) st = attn_kv_paged_run_view(plan, &go, &gl, &gq, &w, NULL, 0, &err);
    check(!st, "paged_run_view_of_no_queries_without_workspace", "status %d: %s", (int)st, err.message);
    /* A plan that needs bytes: NULL is refused by name, for each run. An
     * f16 q needs its f32 stand-ins, even without rows. */
    attn_tensor hq = make(ATTN_F16, 3, s0), ho = make(ATTN_F16, 3, s0);
    ws = 0;
    st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &ho, &gl, &hq, cu, &w, NULL, NULL, &err);
    attn_status r1 = st ? st : attn_kv_paged_run(plan, &ho, &gl, &hq, pages, pages, NULL, ws, &err);
    check(!st && ws > 0 && r1 == ATTN_ERR_NULL && strstr(err.message, "workspace is NULL"),
          "paged_run_needing_workspace_refuses_null", "plan %d, workspace_bytes %zu, run %d: %s", (int)st, ws, (int)r1,
          err.message);
    attn_status r2 = st ? st : attn_kv_paged_run_view(plan, &ho, &gl, &hq, &w, NULL, 0, &err);
    check(!st && r2 == ATTN_ERR_NULL && strstr(err.message, "workspace is NULL"),
          "paged_run_view_needing_workspace_refuses_null", "run %d: %s", (int)r2, err.message);
    int64_t hs[3] = {3, 2, 8};
    attn_tensor hq3 = make(ATTN_F16, 3, hs), ho3 = make(ATTN_F16, 3, hs);
    memset(ho3.data, 0x5a, bytes_of(&ho3));
    ws = 0;
    st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &ho3, NULL, &hq3, &pk5, &pk5, (int64_t[]){0, 1, 3}, cu_k, 2,
                                    NULL, NULL, &err);
    attn_status r3 = st ? st : attn_sdpa_run(plan, &ho3, NULL, &hq3, &pk5, &pk5, NULL, 0, &err);
    check(!st && ws > 0 && r3 == ATTN_ERR_NULL && strstr(err.message, "the plan needs") &&
              ((unsigned char *)ho3.data)[0] == 0x5a,
          "varlen_run_needing_workspace_refuses_null", "plan %d, workspace_bytes %zu, run %d: %s", (int)st, ws, (int)r3,
          err.message);
    attn_tensor *all[] = {&q0, &k, &v, &o0, &l0, &q, &k0, &v0, &o, &l, &want, &wl, &pq0, &pk5, &po0, &gq, &go, &gl,
                          &hq, &ho, &hq3, &ho3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(pages), free(memory);
}

/* A 16-bit q without query rows (every sequence of the step without
 * queries): the run takes its empty f32 stand-ins from the workspace, one
 * element each at least, and the plan's workspace_bytes must count them.
 * Run with exactly workspace_bytes, from a misaligned start. */
static void empty_half_plans(void) {
    static const attn_dtype HALF[2] = {ATTN_F16, ATTN_BF16};
    int64_t s0[3] = {0, 2, 8}, l0[2] = {0, 2}, sk[3] = {9, 1, 8}, cu_q[3] = {0, 0, 0}, cu_k[3] = {0, 4, 9};
    attn_tensor k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk), lse = make(ATTN_F32, 2, l0);
    for (int h = 0; h < 2; h++) {
        attn_tensor q = make(HALF[h], 3, s0), out = make(HALF[h], 3, s0);
        attn_error err;
        size_t bytes = 0, ws = 0;
        attn_sdpa_plan *plan = NULL;
        attn_status st = attn_sdpa_plan_bytes(&bytes, 2, &err);
        char *memory = malloc(bytes), *work = NULL;
        if (!st) st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, &k, &v, cu_q, cu_k, 2, NULL,
                                                 NULL, &err);
        if (!st && (work = malloc(ws + 1))) st = attn_sdpa_run(plan, &out, &lse, &q, &k, &v, work + 1, ws, &err);
        check(!st, h ? "varlen_plan_bf16_q_no_rows_fits_its_workspace" : "varlen_plan_f16_q_no_rows_fits_its_workspace",
              "status %d: %s", (int)st, err.message);
        free(work), work = NULL;
        /* The same step over a paged view: one sequence of 9 positions, 0 queries. */
        float *pages = calloc(2 * 16 * 8, sizeof(float));
        int64_t len[1] = {9}, cu[2] = {0, 0};
        int32_t table[1] = {1};
        attn_kv_paged_view w = attn_kv_paged_view_default();
        w.heads = 1, w.key_dim = w.value_dim = 8, w.page_size = 16, w.num_pages = 2;
        w.k_pages = w.v_pages = pages, w.num_sequences = 1, w.lengths = len, w.page_table = table, w.table_stride = 1;
        st = attn_sdpa_plan_bytes(&bytes, 1, &err);
        if (!st) st = attn_kv_paged_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, cu, &w, NULL, NULL, &err);
        if (!st && (work = malloc(ws + 1)))
            st = attn_kv_paged_run(plan, &out, &lse, &q, pages, pages, work + 1, ws, &err);
        check(!st, h ? "paged_plan_bf16_q_no_rows_fits_its_workspace" : "paged_plan_f16_q_no_rows_fits_its_workspace",
              "status %d: %s", (int)st, err.message);
        free(work), free(pages), free(memory), free(q.data), free(out.data);
    }
    free(k.data), free(v.data), free(lse.data);
}

/* ATTN_VERBOSE names a 16-bit call's own q (q=bf16(...)), not the f32 copy
 * the kernels ran on: attn_sdpa, its planned run, its backward, a ragged
 * batch and its planned run. */
static void verbose_names_half_q(void) {
    int64_t s[3] = {2, 5, 8};
    attn_tensor q = make(ATTN_BF16, 3, s), k = make(ATTN_F32, 3, s), v = make(ATTN_F32, 3, s), out = make(ATTN_BF16, 3, s);
    attn_error err;
    char kernel[32];
    verbose_begin();
    attn_status st = attn_sdpa(&out, NULL, NULL, &q, &k, &v, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && strstr(verbose_last_line, " q=bf16(2,5,8) ") != NULL, "verbose_sdpa_names_bf16_q", "status %d: %s",
          (int)st, verbose_last_line);
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    char *memory = NULL, *work = NULL;
    st = attn_sdpa_plan_bytes(&bytes, 1, &err);
    if (!st && !(memory = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, NULL, &q, &k, &v, NULL, &err);
    if (!st && !(work = malloc(ws + 1))) st = ATTN_ERR_NO_MEMORY;
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_sdpa_run(plan, &out, NULL, &q, &k, &v, work, ws, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && strstr(verbose_last_line, " q=bf16(2,5,8) ") != NULL, "verbose_plan_run_names_bf16_q",
          "status %d: %s", (int)st, verbose_last_line);
    /* the backward of that call: q, out and dout bf16, lse f32 */
    int64_t sl[2] = {2, 5};
    attn_tensor lse = make(ATTN_F32, 2, sl), dout = make(ATTN_BF16, 3, s), dq = make(ATTN_BF16, 3, s);
    attn_tensor dk = make(ATTN_F32, 3, s), dv = make(ATTN_F32, 3, s);
    st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, NULL, &err);
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, &lse, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && strstr(verbose_last_line, " q=bf16(2,5,8) ") != NULL, "verbose_backward_names_bf16_q",
          "status %d: %s", (int)st, verbose_last_line);
    /* a ragged batch of q's 2 rows as (T = 2, H = 5, E = 8) packed: unplanned, then planned */
    int64_t cu[3] = {0, 1, 2}, sp[3] = {2, 5, 8};
    attn_tensor qp = q, kp = k, vp = v, op = out;
    qp.shape[0] = kp.shape[0] = vp.shape[0] = op.shape[0] = sp[0];
    verbose_last_line[0] = 0;
    verbose_begin();
    st = attn_sdpa_varlen(&op, NULL, &qp, &kp, &vp, cu, cu, 2, NULL, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && strstr(verbose_last_line, " q=bf16(2,5,8) ") != NULL, "verbose_varlen_names_bf16_q",
          "status %d: %s", (int)st, verbose_last_line);
    free(work), free(memory), work = NULL, memory = NULL;
    st = attn_sdpa_plan_bytes(&bytes, 2, &err);
    if (!st && !(memory = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_sdpa_varlen_plan_init(&plan, memory, bytes, &ws, &op, NULL, &qp, &kp, &vp, cu, cu, 2, NULL, NULL, &err);
    if (!st && !(work = malloc(ws + 1))) st = ATTN_ERR_NO_MEMORY;
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_sdpa_run(plan, &op, NULL, &qp, &kp, &vp, work, ws, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && strstr(verbose_last_line, " q=bf16(2,5,8) ") != NULL, "verbose_varlen_plan_run_names_bf16_q",
          "status %d: %s", (int)st, verbose_last_line);
    free(work), free(memory), free(q.data), free(k.data), free(v.data), free(out.data);
    free(lse.data), free(dout.data), free(dq.data), free(dk.data), free(dv.data);
}

/* A call with a dimension of 0 runs no kernel, and prints its ATTN_VERBOSE
 * line as every call does (it printed none): kernel=empty, the tensors as
 * given, 0s and all, and the caller's mask, not the stand-in the checks
 * ran on. attn_sdpa without queries (a mask) and without keys (lse),
 * attn_sdpa_reference, a planned run, the backward, and a cache attended
 * with nothing in it (sdpa_paged, the pages' dtype shown). Each line is
 * the call's one line: cleared before, checked after. */
static int verbose_says(const char *name, attn_status st, const char *call, const char *const *words) {
    int ok = !st && strncmp(verbose_last_line, call, strlen(call)) == 0;
    for (int i = 0; ok && words[i]; i++) ok = strstr(verbose_last_line, words[i]) != NULL;
    check(ok, name, "status %d, line: %s", (int)st, verbose_last_line);
    return ok;
}

static void verbose_empty_calls(void) {
    int64_t sq0[3] = {2, 0, 8}, skv[3] = {2, 5, 8}, sm0[3] = {2, 0, 5}, sq[3] = {2, 3, 8}, skv0[3] = {2, 0, 8}, sl[2] = {2, 3};
    attn_tensor q0 = make(ATTN_F32, 3, sq0), k = make(ATTN_F32, 3, skv), v = make(ATTN_F32, 3, skv);
    attn_tensor out0 = make(ATTN_F32, 3, sq0), mask0 = make(ATTN_BOOL, 3, sm0);
    attn_tensor q = make(ATTN_F32, 3, sq), k0 = make(ATTN_F32, 3, skv0), v0 = make(ATTN_F32, 3, skv0);
    attn_tensor out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &mask0;
    attn_error err;
    char kernel[32];
    verbose_last_line[0] = 0;
    verbose_begin();
    attn_status st = attn_sdpa(&out0, NULL, NULL, &q0, &k, &v, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_empty_sdpa_no_queries", st, "attn: sdpa kernel=empty ",
                 (const char *const[]){" q=f32(2,0,8) ", " k=f32(2,5,8) ", " mask=bool(2,0,5) ", " lse=no ", NULL});
    verbose_last_line[0] = 0;
    verbose_begin();
    st = attn_sdpa(&out, &lse, NULL, &q, &k0, &v0, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    int zero = 1; /* and it wrote what it writes: out 0 for rows that see no key */
    for (int64_t i = 0; i < attn_tensor_numel(&out); i++) zero &= ((float *)out.data)[i] == 0.0f;
    verbose_says("verbose_empty_sdpa_no_keys", st, "attn: sdpa kernel=empty ",
                 (const char *const[]){" k=f32(2,0,8) ", " lse=yes ", " fallback=0/0 ", NULL});
    check(zero, "verbose_empty_sdpa_no_keys_writes_zeros", "out not 0");
    verbose_last_line[0] = 0;
    verbose_begin();
    st = attn_sdpa_reference(&out, NULL, NULL, &q, &k0, &v0, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_empty_sdpa_reference", st, "attn: sdpa_reference kernel=empty ", (const char *const[]){NULL});
    /* planned: the plan's init prints nothing, its run the line */
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    char *memory = NULL, *work = NULL;
    st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    if (!st && !(memory = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out0, NULL, &q0, &k, &v, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(!st && !verbose_last_line[0], "verbose_empty_plan_init_prints_nothing", "status %d, line: %s", (int)st,
          verbose_last_line);
    if (!st && !(work = malloc(ws + 1))) st = ATTN_ERR_NO_MEMORY;
    verbose_begin();
    if (!st) st = attn_sdpa_run(plan, &out0, NULL, &q0, &k, &v, work, ws, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_empty_plan_run", st, "attn: sdpa_run kernel=empty ",
                 (const char *const[]){" q=f32(2,0,8) ", " mask=bool(2,0,5) ", NULL});
    free(work), free(memory);
    /* the backward of the call without queries: dk and dv 0 */
    int64_t sl0[2] = {2, 0};
    attn_tensor lse0 = make(ATTN_F32, 2, sl0), dout0 = make(ATTN_F32, 3, sq0), dq0 = make(ATTN_F32, 3, sq0);
    attn_tensor dk = make(ATTN_F32, 3, skv), dv = make(ATTN_F32, 3, skv);
    verbose_last_line[0] = 0;
    verbose_begin();
    st = attn_sdpa_backward(&dq0, &dk, &dv, NULL, &dout0, &q0, &k, &v, &out0, &lse0, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_empty_backward", st, "attn: sdpa_backward kernel=empty ",
                 (const char *const[]){" q=f32(2,0,8) ", " mask=bool(2,0,5) ", " lse=yes ", NULL});
    /* a cache with nothing in it: S = 0 through the paged code */
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = 2, d.capacity = 16, d.key_dim = d.value_dim = 8, d.dtype = ATTN_F16;
    attn_kv_cache *cache = NULL;
    st = attn_kv_cache_bytes(&bytes, &d, &err);
    memory = NULL;
    if (!st && !(memory = malloc(bytes))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_kv_cache_init(&cache, memory, bytes, &d, &err);
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_kv_cache_attend(&out, NULL, &q, cache, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_empty_cache_attend", st, "attn: sdpa_paged kernel=empty ",
                 (const char *const[]){" k=f16(2,0,8) ", " causal=bottom-right ", NULL});
    free(memory);
    attn_tensor *all[] = {&q0, &k, &v, &out0, &mask0, &q, &k0, &v0, &out, &lse, &lse0, &dout0, &dq0, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* A ragged backward in which no sequence has both queries and keys runs no
 * kernel, and its line says so (kernel=none), as attn_sdpa_varlen's does:
 * it said kernel=exact. */
static void verbose_ragged_backward_without_work(void) {
    int64_t cq[3] = {0, 3, 3}, ck[3] = {0, 0, 5}, sq[3] = {3, 2, 8}, sk[3] = {5, 1, 8}, sl[2] = {3, 2};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl), dout = make(ATTN_F32, 3, sq);
    attn_tensor dq = make(ATTN_F32, 3, sq), dk = make(ATTN_F32, 3, sk), dv = make(ATTN_F32, 3, sk);
    attn_error err;
    char kernel[32];
    attn_status st = attn_sdpa_varlen(&out, &lse, &q, &k, &v, cq, ck, 2, NULL, NULL, &err);
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_sdpa_varlen_backward(&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse, cq, ck, 2, NULL, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_varlen_backward_no_sequence_runs", st, "attn: sdpa_varlen_backward kernel=none ",
                 (const char *const[]){" q=f32(3,2,8) ", NULL});
    attn_tensor *all[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* A paged batch without queries runs no kernel, but prints its line as
 * every call (and the plan's run of it) does: it printed none. */
static void verbose_paged_attend_without_queries(void) {
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = 2, d.key_dim = d.value_dim = 8, d.page_size = 16, d.num_pages = 2, d.max_sequences = 1;
    attn_error err;
    size_t bytes = 0;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    void *pm = st ? NULL : malloc(bytes);
    attn_kv_pages *pool = NULL;
    int64_t id = 0, cuk[2] = {0, 5}, cu[2] = {0, 0}, sk[3] = {5, 2, 8}, sq[3] = {0, 2, 8};
    attn_tensor k = make(ATTN_F32, 3, sk), q = make(ATTN_F32, 3, sq), out = make(ATTN_F32, 3, sq);
    if (!st) st = attn_kv_pages_init(&pool, pm, bytes, &d, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, &k, &k, cuk, &err);
    char kernel[32];
    verbose_last_line[0] = 0;
    verbose_begin();
    if (!st) st = attn_kv_pages_attend(&out, NULL, &q, cu, &id, 1, pool, NULL, NULL, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    verbose_says("verbose_paged_attend_without_queries", st, "attn: sdpa_varlen_paged kernel=none ",
                 (const char *const[]){" q=f32(0,2,8) ", NULL});
    free(pm), free(k.data), free(q.data), free(out.data);
}

/* A run takes a tensor whose dimension of size 1 has another stride than
 * the plan's (a slice of a larger buffer, as NumPy's contiguous arrays can
 * be): that stride places no element. It was ATTN_ERR_PLAN. */
static void size_one_strides(void) {
    int64_t sq[3] = {1, 3, 16}, sk[3] = {1, 20, 16};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor out = make(ATTN_F32, 3, sq), want = make(ATTN_F32, 3, sq), k2 = k;
    k2.strides[0] = 999; /* one head: its stride steps nowhere */
    attn_error err;
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
    char *memory = st ? NULL : malloc(bytes), *work = NULL;
    if (!st) st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, NULL, &q, &k, &v, NULL, &err);
    if (!st && !(work = malloc(ws + 1))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_sdpa_run(plan, &out, NULL, &q, &k2, &v, work, ws, &err);
    if (!st) st = attn_sdpa(&want, NULL, NULL, &q, &k, &v, NULL, &err);
    check(!st && !memcmp(out.data, want.data, bytes_of(&out)), "run_takes_other_strides_of_size_1",
          "status %d: %s", (int)st, st ? err.message : "out differs from attn_sdpa's");
    free(memory), free(work), free(q.data), free(k.data), free(v.data), free(out.data), free(want.data);
}

/* Several caller threads at once, each running its own plan (attn.h: "two
 * threads run two plans") over the one thread pool they share: every run
 * gives the bits the unplanned call gave before the threads started. The
 * plans differ in kernel (flash, decode against a long context, exact f64)
 * and in variant (rope, alibi and sinks: the options' tensors are read at
 * every run). build/tsan/test_plan reports any race between the runs. */
enum { PLAN_THREADS = 3, PLAN_RUNS = 4 };

typedef struct plan_thread {
    attn_sdpa_plan *plan;
    void *memory, *work;
    size_t ws;
    option_set os;
    attn_tensor q, k, v, out, lse, want_out, want_lse;
    int ok;
    char why[640];
} plan_thread;

static void *run_plan_thread(void *arg) {
    plan_thread *t = arg;
    for (int run = 0; run < PLAN_RUNS && t->ok; run++) {
        memset(t->out.data, 0, bytes_of(&t->out)), memset(t->lse.data, 0, bytes_of(&t->lse));
        attn_error err;
        attn_status st = attn_sdpa_run(t->plan, &t->out, &t->lse, &t->q, &t->k, &t->v, t->work, t->ws, &err);
        if (st) t->ok = 0, snprintf(t->why, sizeof t->why, "run %d: %s", run, err.message);
        else if (!same_bits(&t->out, &t->want_out) || !same_bits(&t->lse, &t->want_lse))
            t->ok = 0, snprintf(t->why, sizeof t->why, "run %d: bits differ from attn_sdpa's", run);
    }
    return NULL;
}

static void concurrent_plans(void) {
    static const struct {
        attn_dtype dt;
        int64_t Hq, Hk, L, S, E;
        int variant;
    } CASES[PLAN_THREADS] = {{ATTN_F32, 4, 2, 37, 53, 16, 5}, {ATTN_F32, 8, 2, 2, 2100, 32, 4}, {ATTN_F64, 2, 1, 9, 13, 8, 1}};
    plan_thread *t = calloc(PLAN_THREADS, sizeof *t);
    int ready = t != NULL;
    for (int i = 0; ready && i < PLAN_THREADS; i++) {
        plan_thread *p = &t[i];
        set_options(&p->os, &VARIANTS[CASES[i].variant], CASES[i].Hq, 2);
        int64_t sq[3] = {CASES[i].Hq, CASES[i].L, CASES[i].E}, sk[3] = {CASES[i].Hk, CASES[i].S, CASES[i].E},
                sl[2] = {CASES[i].Hq, CASES[i].L};
        p->q = make(CASES[i].dt, 3, sq), p->k = make(CASES[i].dt, 3, sk), p->v = make(CASES[i].dt, 3, sk);
        p->out = like(&p->q), p->lse = make(CASES[i].dt, 2, sl), p->want_out = like(&p->q), p->want_lse = like(&p->lse);
        size_t bytes = 0;
        attn_error err;
        attn_status st = attn_sdpa_plan_bytes(&bytes, 0, &err);
        if (!st) p->memory = malloc(bytes);
        if (!st)
            st = attn_sdpa_plan_init(&p->plan, p->memory, bytes, &p->ws, &p->out, &p->lse, &p->q, &p->k, &p->v,
                                     &p->os.o, &err);
        if (!st) p->work = malloc(p->ws ? p->ws : 1);
        if (!st) st = attn_sdpa(&p->want_out, &p->want_lse, NULL, &p->q, &p->k, &p->v, &p->os.o, &err);
        p->ok = !st;
        if (st) snprintf(p->why, sizeof p->why, "case %d: %s", i, err.message), ready = 0;
    }
    pthread_t th[PLAN_THREADS];
    int started = 0;
    for (; ready && started < PLAN_THREADS; started++)
        if (pthread_create(&th[started], NULL, run_plan_thread, &t[started])) break;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    int ok = ready && started == PLAN_THREADS, bad = -1;
    for (int i = 0; t && i < PLAN_THREADS; i++)
        if (!t[i].ok && bad < 0) bad = i, ok = 0;
    check(ok, "concurrent_plans_on_caller_threads", "thread %d: %s (%d of %d threads started)", bad,
          bad >= 0 ? t[bad].why : "", started, PLAN_THREADS);
    for (int i = 0; t && i < PLAN_THREADS; i++) {
        attn_tensor *all[7] = {&t[i].q, &t[i].k, &t[i].v, &t[i].out, &t[i].lse, &t[i].want_out, &t[i].want_lse};
        for (int j = 0; j < 7; j++) free(all[j]->data);
        free(t[i].memory), free(t[i].work);
    }
    free(t);
}

int main(void) {
    rng_state = test_seed(TENSORS_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    for (int threads = 1; threads <= 3; threads++) {
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const variant *var = &VARIANTS[vi];
            /* The engine's small step (decode against a short context), a
             * prefill block, GQA decode against a long context, f64. */
            dense_case("L1_S100_H16", ATTN_F32, 1, 16, 16, 1, 100, 64, 64, var, threads);
            dense_case("prefill_gqa", ATTN_F32, 2, 4, 2, 37, 53, 16, 24, var, threads);
            dense_case("decode_gqa_S2100", ATTN_F32, 1, 8, 2, 2, 2100, 32, 32, var, threads);
            dense_case("exact", ATTN_F64, 1, 2, 1, 9, 13, 8, 8, var, threads);
            if (threads == 1) { /* dimensions of 0: no kernel, out 0 without keys, as attn_sdpa gives */
                dense_case("no_queries", ATTN_F32, 2, 4, 2, 0, 9, 16, 16, var, threads);
                dense_case("no_keys", ATTN_F32, 2, 4, 2, 5, 0, 16, 16, var, threads);
                dense_case("batch_0", ATTN_F64, 0, 2, 1, 3, 4, 8, 8, var, threads);
            }
            static const int64_t lq[] = {5, 0, 1, 37, 2, 3}, lk[] = {9, 4, 100, 37, 2100, 0};
            varlen_case("mixed", ATTN_F32, 6, lq, lk, 4, 2, 16, 16, var, threads, 0);
            varlen_case("mixed", ATTN_F32, 6, lq, lk, 4, 2, 16, 16, var, threads, 1);
            static const int64_t eq[] = {1, 1, 1}, ek[] = {3, 50, 17};
            varlen_case("decode_step", ATTN_F32, 3, eq, ek, 4, 4, 32, 32, var, threads, 0);
            varlen_case("mixed", ATTN_F64, 6, lq, lk, 2, 1, 8, 8, var, threads, 1);
            paged_case(ATTN_F32, var, threads, vi % 2);
            if (threads != 2) paged_case(ATTN_F16, var, threads, !(vi % 2));
            for (size_t f = 0; threads != 2 && f < sizeof QUANT_FEATURES / sizeof *QUANT_FEATURES; f++)
                quant_paged_case(&QUANT_FEATURES[f], var, threads);
        }
    }
    check(seen_flash && seen_decode && seen_exact, "planned_runs_reach_every_kernel", "flash %d, decode %d, exact %d",
          seen_flash, seen_decode, seen_exact);
    refusals();
    paged_refusals();
    quant_paged_refusals();
    descaled_plans();
    empty_varlen_plan();
    empty_half_plans();
    runs_without_workspace();
    verbose_names_half_q();
    verbose_empty_calls();
    verbose_ragged_backward_without_work();
    verbose_paged_attend_without_queries();
    size_one_strides();
    concurrent_plans();
    printf("%d failed\n", n_failed);
    return n_failed != 0;
}
