/* sdpa_plan.c -- plan once, run every layer: attn_sdpa_plan_bytes,
 * attn_sdpa_plan_init, attn_sdpa_varlen_plan_init and attn_sdpa_run.
 *
 * A plan is what attn_sdpa (or attn_sdpa_varlen) works out from shapes
 * alone, kept in the caller's memory: the options read, every argument
 * checked, the slices (plan.c) or the sequences' plans (varlen.c), and the
 * workspace the kernels take, measured. A run checks that the layer's
 * tensors are laid out as the plan's, points the plan's copies of them at
 * their data, and runs the same kernels on the same slices, so its results
 * are bitwise the unplanned call's; its scratch comes from the caller's
 * workspace, so nothing is allocated. */
#include "sdpa/sdpa.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PLAN_MAGIC UINT64_C(0x6e616c7061647331) /* "1sdpaplan" read backwards */

struct attn_sdpa_plan {
    uint64_t magic;           /* PLAN_MAGIC once planned */
    /* A run in progress. A run writes the layer's data pointers (and the
     * workspace's arena) into the plan, so a second run at once, on another
     * thread, would compute with the first one's tensors; it is refused
     * instead, before anything is read or written. */
    atomic_bool running;
    int64_t batch;            /* -1: a dense call (attn_sdpa); else the ragged batch's */
    size_t workspace;         /* the bytes a run takes */
    attn_sdpa_options o;      /* as attn_options_read gives them */
    attn_tensor q, k, v, out, lse; /* the planned layouts; data: the layer's at a run */
    bool has_lse;
    attn_slices sl;           /* dense: the slices, over the tensors above */
    attn_varlen_plan *varlen; /* ragged: the sequences' plans, after this struct */
    const attn_tensor *const *masks; /* ragged: the caller's masks[batch], or NULL */
    attn_empty empty;         /* dense, a dimension of 0 (empty.any): no kernel; a run writes what attn_sdpa writes */
    bool paged;               /* a paged batch's (attn_kv_paged_plan_init): run by attn_kv_paged_run */
    attn_kv_paged_view view;  /* paged: the view planned; its pages are each run's */
    attn_tensor ks, vs;       /* paged: the view's per-head fp8 scales as the options' k_descale and
                                 v_descale (the sequences' plans copy them; a run points them at its own) */
    uint64_t generation;      /* paged: *view.generation when planned (view.generation given) */
    /* Paged, keys stored with the Hadamard rotation: the plan is made on a
     * contiguous f32 stand-in for q's turned copy (q above), which each run
     * makes at its workspace's front (attn_hadamard_queries), as the
     * unplanned call makes it; qin the caller's q layout. */
    bool hadamard;
    attn_tensor qin;
    /* A 16-bit q and out (f16 or bf16): the plan is made on contiguous f32
     * stand-ins (q and out above), which each run places at its
     * workspace's front, q widened into one and the other rounded once
     * into out after the kernels, as the unplanned calls do. */
    bool half;
    attn_tensor q16, out16;   /* half: the caller's layouts */
    int64_t nq, no;           /* half: the stand-ins' elements */
};


/* The stand-ins of a 16-bit q and out for planning: contiguous f32 tensors
 * of their shapes over malloc's memory (*mem, freed by the caller once the
 * plan is made), so that the plan's checks see memory of their own. */
static attn_status stand_ins(attn_sdpa_plan *pl, attn_tensor *q32, attn_tensor *out32, void **mem, const attn_tensor *q,
                             const attn_tensor *out, attn_error *err) {
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out is NULL");
    attn_status st; /* a plan is made from buffers (attn.h, measuring without buffers) */
    if ((st = attn_check_data(q, "q", false, err)) || (st = attn_check_data(out, "out", false, err))) return st;
    if (out->dtype != q->dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "out is %s but q is %s; a 16-bit q gives out in its own dtype",
                         attn_dtype_name(out->dtype), attn_dtype_name(q->dtype));
    const attn_tensor *t[2] = {q, out};
    int64_t n[2] = {1, 1};
    for (int i = 0; i < 2; i++) {
        if (t[i]->rank < 1 || t[i]->rank > ATTN_MAX_RANK)
            return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d", i ? "out" : "q", t[i]->rank);
        st = attn_check_extent(t[i], i ? "out" : "q", err);
        /* out is written from its stand-in, which is C order: the plan of
         * the f32 call checks only that, so out's own strides here */
        if (!st && i) st = attn_check_writable(out, "out", err);
        if (st) return st;
        for (int d = 0; d < t[i]->rank; d++)
            if (t[i]->shape[d] < 0 || !attn_mul_i64(n[i], t[i]->shape[d], &n[i]) || n[i] > INT64_MAX / 8 - 64)
                return attn_fail(err, ATTN_ERR_OVERFLOW, "the f32 copies of q and out overflow");
    }
    size_t bq = ((size_t)n[0] * 4 + 63) / 64 * 64;
    if (!(*mem = malloc(bq + (size_t)n[1] * 4 + 4)))
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the f32 stand-ins of q and out");
    attn_tensor_init(q32, *mem, ATTN_F32, q->rank, q->shape, NULL, NULL);
    attn_tensor_init(out32, (char *)*mem + bq, ATTN_F32, out->rank, out->shape, NULL, NULL);
    pl->half = true, pl->q16 = *q, pl->out16 = *out, pl->nq = n[0], pl->no = n[1];
    return ATTN_OK;
}

/* The workspace a half plan's run takes besides the kernels': the two
 * stand-ins, each aligned, and the workspace's own alignment. An empty
 * stand-in (a batch without query rows) still takes one element, as
 * place_stand_ins asks the arena for it. */
static size_t copies_bytes(const attn_sdpa_plan *pl) {
    size_t a = ATTN_ARENA_ALIGN, nq = (size_t)(pl->nq > 0 ? pl->nq : 1), no = (size_t)(pl->no > 0 ? pl->no : 1);
    return (nq * 4 + a - 1) / a * a + (no * 4 + a - 1) / a * a + a;
}

/* A run's stand-ins from its arena (the workspace's front), q widened
 * into one (exactly); false when the workspace cannot hold them. */
static bool place_stand_ins(attn_sdpa_plan *pl, attn_arena *arena, const attn_tensor *q) {
    pl->q.data = attn_arena_alloc(arena, (size_t)(pl->nq > 0 ? pl->nq : 1), 4);
    pl->out.data = attn_arena_alloc(arena, (size_t)(pl->no > 0 ? pl->no : 1), 4);
    if (!pl->q.data || !pl->out.data) return false;
    if (pl->nq > 0) attn_tensor_convert(&pl->q, q, NULL);
    return true;
}

/* The plan's header at the first 64-byte boundary of memory. */
static attn_sdpa_plan *header_of(void *memory) {
    return (attn_sdpa_plan *)(((uintptr_t)memory + 63) / 64 * 64);
}

static size_t header_bytes(void) { return sizeof(attn_sdpa_plan) + 63; }

attn_status attn_sdpa_plan_bytes(size_t *bytes, int64_t batch, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    if (batch < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "batch is %lld; it must be >= 0", (long long)batch);
    /* Room for a ragged batch's plans, at least one sequence's: a plan of
     * an empty batch (batch 0) fits too. */
    size_t extra = attn_varlen_plan_bytes(batch);
    if (extra > SIZE_MAX - header_bytes())
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the plan of %lld sequences overflows", (long long)batch);
    *bytes = header_bytes() + extra;
    return ATTN_OK;
}

/* What both plans begin with: the pointers checked, memory large enough,
 * the options read; *pl the header, not yet a plan. */
static attn_status plan_start(attn_sdpa_plan **pl, attn_context *c, attn_sdpa_plan **plan, void *memory,
                              size_t bytes, size_t *workspace_bytes, int64_t batch,
                              const attn_sdpa_options *options, attn_error *err) {
    if (plan) *plan = NULL; /* no plan on any failure, the NULL arguments' included */
    if (!plan || !memory || !workspace_bytes)
        return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", !plan ? "plan" : !memory ? "memory" : "workspace_bytes");
    size_t need;
    attn_status st = attn_sdpa_plan_bytes(&need, batch, err);
    if (st) return st;
    if (bytes < need)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the plan's memory has %zu bytes but this plan needs %zu "
                         "(attn_sdpa_plan_bytes)", bytes, need);
    *pl = header_of(memory);
    memset(*pl, 0, sizeof **pl);
    atomic_init(&(*pl)->running, false);
    return attn_options_read(&(*pl)->o, c, options, err);
}

/* The plan's copy of a tensor (t may be NULL: none). */
static void keep(attn_tensor *dst, const attn_tensor *t) {
    if (t) *dst = *t;
    else memset(dst, 0, sizeof *dst);
}

attn_status attn_sdpa_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes, size_t *workspace_bytes,
                                attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_plan *pl;
    attn_context c;
    attn_status st = plan_start(&pl, &c, plan, memory, bytes, workspace_bytes, 0, options, err);
    if (st) return st;
    /* The plan of attn_sdpa, made on the plan's own copies of the tensors,
     * so that a run only swaps their data (a 16-bit q's: on f32 stand-ins). */
    attn_slices sl;
    attn_tensor q32, out32;
    void *tmp = NULL;
    if ((st = attn_check_descale_dtype(&pl->o, k ? k->dtype : ATTN_F32, v ? v->dtype : ATTN_F32, err))) return st;
    if ((st = attn_sdpa_empty(&pl->empty, out, lse, q, k, v, &pl->o, err))) return st;
    if (pl->empty.any) { /* checked; the layouts kept for the runs, no workspace */
        keep(&pl->q, q), keep(&pl->k, k), keep(&pl->v, v), keep(&pl->out, out), keep(&pl->lse, lse);
        pl->has_lse = lse != NULL, pl->workspace = 0, pl->batch = -1, pl->magic = PLAN_MAGIC;
        *workspace_bytes = 0;
        *plan = pl;
        return ATTN_OK;
    }
    if (q && attn_dtype_half(q->dtype)) { /* k and v checked against the caller's q, not its f32 stand-in */
        if ((st = attn_check_half_kv(q, k, v, err)) || (st = stand_ins(pl, &q32, &out32, &tmp, q, out, err))) return st;
        q = &q32, out = &out32;
    }
    if ((st = attn_plan_call(&sl, out, lse, NULL, false, q, k, v, &pl->o, c.num_threads, err))) {
        free(tmp);
        return st;
    }
    keep(&pl->q, q), keep(&pl->k, k), keep(&pl->v, v), keep(&pl->out, out), keep(&pl->lse, lse);
    pl->has_lse = lse != NULL;
    pl->sl = sl;
    pl->sl.q = &pl->q, pl->sl.k = &pl->k, pl->sl.v = &pl->v, pl->sl.out = &pl->out;
    pl->sl.lse = lse ? &pl->lse : NULL;
    st = attn_sdpa_stream_measure(&pl->workspace, &pl->sl, &pl->o, err);
    free(tmp);
    if (st) return st;
    if (pl->half) pl->workspace += copies_bytes(pl);
    pl->batch = -1;
    pl->magic = PLAN_MAGIC;
    *workspace_bytes = pl->workspace;
    attn_pool_reserve(c.num_threads); /* the runs start no thread */
    *plan = pl;
    return ATTN_OK;
}

attn_status attn_sdpa_varlen_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes, size_t *workspace_bytes,
                                       attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                                       int64_t batch, const attn_tensor *const *masks,
                                       const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_plan *pl;
    attn_context c;
    if (plan) *plan = NULL;
    if (batch < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "batch is %lld; it must be >= 0", (long long)batch);
    attn_status st = plan_start(&pl, &c, plan, memory, bytes, workspace_bytes, batch, options, err);
    if (st) return st;
    attn_tensor q32, out32;
    void *tmp = NULL;
    if (q && attn_dtype_half(q->dtype)) { /* checked as the unplanned call checks it, then planned in f32 */
        if ((st = attn_varlen_check(out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, batch, masks, &pl->o, err)) ||
            (st = stand_ins(pl, &q32, &out32, &tmp, q, out, err)))
            return st;
        q = &q32, out = &out32;
    }
    st = attn_varlen_plan_make(&pl->varlen, pl + 1, &pl->workspace, out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, batch,
                               masks, &pl->o, c.num_threads, err);
    free(tmp);
    if (st) return st;
    if (pl->half) pl->workspace += copies_bytes(pl);
    keep(&pl->q, q), keep(&pl->k, k), keep(&pl->v, v), keep(&pl->out, out), keep(&pl->lse, lse);
    pl->has_lse = lse != NULL;
    pl->batch = batch;
    pl->masks = masks;
    pl->magic = PLAN_MAGIC;
    *workspace_bytes = pl->workspace;
    attn_pool_reserve(c.num_threads); /* the runs start no thread */
    *plan = pl;
    return ATTN_OK;
}

/* The layer's tensor t laid out as the plan's `want`: rank, dtype, shape
 * and strides equal (ATTN_ERR_PLAN naming what differs), data present.
 * Only strides that step between elements must match: a dimension of size
 * 1 has one index and a tensor with no element none, so their strides
 * place nothing (NumPy's and PyTorch's contiguous arrays leave them as
 * slicing left them). */
static attn_status same_layout(const attn_tensor *t, const attn_tensor *want, const char *name, attn_error *err) {
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    bool same = t->rank == want->rank && t->dtype == want->dtype;
    for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == want->shape[d];
    bool elements = same && attn_tensor_numel(t) > 0;
    for (int d = 0; elements && same && d < t->rank; d++)
        same = t->shape[d] == 1 || t->strides[d] == want->strides[d];
    if (!same) {
        char got[128], exp[128], gs[128], es[128];
        attn_format_shape(got, sizeof got, t->rank, t->shape), attn_format_shape(exp, sizeof exp, want->rank, want->shape);
        attn_format_shape(gs, sizeof gs, t->rank, t->strides), attn_format_shape(es, sizeof es, want->rank, want->strides);
        return attn_fail(err, ATTN_ERR_PLAN, "%s is %s %s with strides %s but the plan was made for %s %s with strides %s",
                         name, attn_dtype_name(t->dtype), got, gs, attn_dtype_name(want->dtype), exp, es);
    }
    bool empty = false; /* a packed batch may hold no rows */
    for (int d = 0; d < t->rank; d++) empty |= t->shape[d] == 0;
    if (!t->data && !empty) return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    return ATTN_OK;
}

/* What a dense and a paged run both check: lse given exactly when the plan
 * has one, laid out as planned, and a workspace of the plan's size. */
static attn_status check_lse_workspace(const attn_sdpa_plan *pl, const attn_tensor *lse, const void *workspace,
                                       size_t workspace_size, attn_error *err) {
    attn_status st;
    if ((lse != NULL) != pl->has_lse)
        return attn_fail(err, ATTN_ERR_PLAN, "lse is %s but the plan was made %s one", lse ? "given" : "NULL",
                         pl->has_lse ? "with" : "without");
    if (lse && (st = same_layout(lse, &pl->lse, "lse", err))) return st;
    /* A plan that needs no workspace runs with none: the caller who asked
     * and got 0 has nothing to pass (run_arena gives such a run no room). */
    if (!workspace && pl->workspace > 0)
        return attn_fail(err, ATTN_ERR_NULL, "workspace is NULL (the plan needs %zu bytes)", pl->workspace);
    if (workspace && workspace_size < pl->workspace)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the workspace has %zu bytes but the plan needs %zu", workspace_size,
                         pl->workspace);
    return ATTN_OK;
}

/* The arena a run takes its scratch from: the caller's workspace, or,
 * where the plan needs none and none is given, an arena with no room, so
 * that a run never falls back on malloc (arena_over(NULL) would): it
 * allocates nothing, and what it measured as 0 bytes takes none. */
static attn_arena run_arena(void *workspace, size_t workspace_size) {
    static _Alignas(ATTN_ARENA_ALIGN) char no_room[ATTN_ARENA_ALIGN];
    return workspace ? attn_arena_over(workspace, workspace_size) : attn_arena_over(no_room, 0);
}

/* A run's workspace apart from the run's tensors (outs, ins) and from the
 * plan's own memory (its header, and after it a ragged batch's sequences'
 * plans), which the run reads (attn_check_workspace). */
static attn_status check_workspace(const attn_sdpa_plan *pl, const void *workspace, size_t workspace_size,
                                   const attn_named *outs, int n_outs, const attn_named *ins, int n_ins,
                                   attn_error *err) {
    int64_t n = (int64_t)(sizeof *pl + (pl->batch >= 0 ? attn_varlen_plan_bytes(pl->batch) : 0)); /* fits: planned */
    attn_tensor memory;
    attn_tensor_init(&memory, (void *)(uintptr_t)pl, ATTN_BOOL, 1, &n, NULL, NULL);
    const attn_named plan[1] = {{&memory, "the plan's memory"}};
    attn_status st = attn_check_workspace(workspace, workspace_size, outs, n_outs, ins, n_ins, err);
    return st ? st : attn_check_workspace(workspace, workspace_size, NULL, 0, plan, 1, err);
}

/* Takes the plan for one run: false (and the error) where another run of
 * it is in progress. */
static bool plan_take(attn_sdpa_plan *pl, attn_error *err) {
    if (!atomic_exchange(&pl->running, true)) return true;
    attn_fail(err, ATTN_ERR_PLAN, "the plan is running in another call; a plan runs one call at a time "
                                  "(give each thread a plan of its own)");
    return false;
}

static attn_status run_dense(attn_sdpa_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                             const attn_tensor *k, const attn_tensor *v, void *workspace, size_t workspace_size,
                             attn_error *err);

attn_status attn_sdpa_run(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                          const attn_tensor *k, const attn_tensor *v, void *workspace, size_t workspace_size,
                          attn_error *err) {
    if (!plan) return attn_fail(err, ATTN_ERR_NULL, "plan is NULL");
    attn_sdpa_plan *pl = plan;
    if (pl->magic != PLAN_MAGIC)
        return attn_fail(err, ATTN_ERR_PLAN, "plan holds no plan (attn_sdpa_plan_init or attn_sdpa_varlen_plan_init)");
    if (pl->paged)
        return attn_fail(err, ATTN_ERR_PLAN, "the plan is a paged batch's (attn_kv_paged_plan_init): run it with "
                                             "attn_kv_paged_run");
    if (!plan_take(pl, err)) return ATTN_ERR_PLAN;
    attn_status st = run_dense(pl, out, lse, q, k, v, workspace, workspace_size, err);
    atomic_store(&pl->running, false);
    return st;
}

static attn_status run_dense(attn_sdpa_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                             const attn_tensor *k, const attn_tensor *v, void *workspace, size_t workspace_size,
                             attn_error *err) {
    attn_status st;
    if ((st = same_layout(q, pl->half ? &pl->q16 : &pl->q, "q", err)) || (st = same_layout(k, &pl->k, "k", err)) ||
        (st = same_layout(v, &pl->v, "v", err)) || (st = same_layout(out, pl->half ? &pl->out16 : &pl->out, "out", err)))
        return st;
    if ((st = check_lse_workspace(pl, lse, workspace, workspace_size, err))) return st;
    /* The layouts are the plan's, so only the data can alias. */
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_named ins[3 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}};
    int n_ins = attn_named_options(ins, 3, ATTN_NAMED_CAP(ins), &pl->o);
    if ((st = attn_check_no_overlap(outs, 2, ins, n_ins, err)) ||
        (st = check_workspace(pl, workspace, workspace_size, outs, 2, ins, n_ins, err)) ||
        (pl->varlen && (st = attn_varlen_plan_check_masks(pl->varlen, outs, 2, workspace, workspace_size, pl->masks,
                                                          pl->batch, err))))
        return st;
    if (pl->empty.any) { /* attn_sdpa's writes of a call with a dimension of 0, and its line */
        double t0 = attn_verbose_on() ? attn_now_ms() : 0;
        if (!pl->empty.no_output) attn_write_no_keys(out, lse, pl->o.sinks);
        attn_empty_report("sdpa_run", q, k, v, lse, NULL, NULL, NULL, &pl->o, t0);
        return ATTN_OK;
    }
    pl->q.data = q->data, pl->k.data = k->data, pl->v.data = v->data, pl->out.data = out->data;
    pl->lse.data = lse ? lse->data : NULL;
    attn_arena arena = run_arena(workspace, workspace_size);
    if (pl->half && !place_stand_ins(pl, &arena, q))
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the workspace cannot hold the f32 copies of q and out");
    if (pl->batch >= 0) {
        st = attn_varlen_plan_run(pl->varlen, &pl->out, lse ? &pl->lse : NULL, &pl->q, &pl->k, &pl->v, pl->batch, &pl->o,
                                  &arena, pl->half ? q : NULL, err);
    } else {
        pl->sl.arena = &arena;
        bool verbose = attn_verbose_on();
        double t0 = verbose ? attn_now_ms() : 0;
        attn_run_info info;
        st = attn_sdpa_stream_run(&pl->sl, &pl->o, &info, err);
        pl->sl.arena = NULL; /* the arena was this call's */
        if (verbose) { /* a 16-bit plan's line names its caller's q, not the f32 copy */
            attn_slices shown = pl->sl;
            if (pl->half) shown.q = q;
            attn_verbose_report("sdpa_run", &info, &shown, &pl->o, attn_now_ms() - t0);
        }
    }
    if (!st && pl->half && pl->no > 0) attn_tensor_convert(out, &pl->out, NULL); /* the one rounding */
    return st;
}

/* ---- A paged batch planned once (attn_kv_paged_plan_init) ----------------
 * The plan of attn_kv_paged_attend over a view: every check, each
 * sequence's row sources (its page table and length) and its plan. A run
 * takes one layer's pages: the same tables and lengths over other memory. */

attn_status attn_kv_paged_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes, size_t *workspace_bytes,
                                    attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                    const int64_t *cu_seqlens_q, const attn_kv_paged_view *view,
                                    const attn_tensor *const *masks, const attn_sdpa_options *options,
                                    attn_error *err) {
    if (plan) *plan = NULL;
    if (!plan || !memory || !workspace_bytes)
        return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", !plan ? "plan" : !memory ? "memory" : "workspace_bytes");
    attn_status st = attn_kv_paged_check(view, err);
    if (st) return st;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    attn_versioned_read(&w, sizeof w, view, "view", "", NULL);
    const int64_t batch = w.num_sequences;
    size_t need;
    if ((st = attn_sdpa_plan_bytes(&need, batch, err))) return st;
    if (bytes < need)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the plan's memory has %zu bytes but this plan needs %zu "
                         "(attn_sdpa_plan_bytes of the view's %lld sequence%s)", bytes, need, (long long)batch,
                         attn_plural(batch));
    attn_sdpa_plan *pl = header_of(memory);
    memset(pl, 0, sizeof *pl);
    atomic_init(&pl->running, false);
    attn_varlen_plan *vp = attn_varlen_plan_layout(pl + 1, batch);
    attn_sdpa_options o;
    attn_context c;
    bool any;
    /* attn_kv_paged_attend's steps: the view's checks and row sources, its
     * per-head scales as the options' (over the plan's own tensors), q's
     * turned copy measured */
    attn_arena turned = attn_arena_measuring();
    if ((st = attn_kv_paged_prepare(&o, attn_varlen_plan_k_rows(vp), attn_varlen_plan_v_rows(vp), &any, out, lse, q,
                                    cu_seqlens_q, &w, NULL, batch, options, err)) ||
        (st = attn_kv_scales_as_descale(&o, &pl->ks, &pl->vs, w.k_scale, w.v_scale, w.heads, err)) ||
        (w.hadamard && (st = attn_hadamard_queries(&pl->q, &turned, q, &o, err))) ||
        (st = attn_options_read(&pl->o, &c, &o, err)))
        return st;
    attn_tensor q32, out32;
    void *tmp = NULL;
    if (w.hadamard) { /* planned on a stand-in of the turned copy */
        if (!(tmp = malloc(turned.used)))
            return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the stand-in of q's turned copy");
        pl->hadamard = true, pl->qin = *q;
        pl->q.data = tmp, q = &pl->q;
    } else if (attn_dtype_half(q->dtype)) { /* prepare checked the 16-bit q and out; planned on f32 stand-ins */
        if ((st = stand_ins(pl, &q32, &out32, &tmp, q, out, err))) return st;
        q = &q32, out = &out32;
    }
    st = attn_varlen_plan_make_paged(vp, &pl->workspace, out, lse, q, cu_seqlens_q, batch, masks, &pl->o, c.num_threads,
                                     err);
    free(tmp);
    if (st) return st;
    if (pl->half) pl->workspace += copies_bytes(pl);
    if (pl->hadamard) pl->workspace += attn_arena_needed(&turned);
    keep(&pl->q, q), keep(&pl->out, out), keep(&pl->lse, lse);
    pl->has_lse = lse != NULL;
    pl->varlen = vp, pl->batch = batch, pl->masks = masks;
    pl->paged = true, pl->view = w;
    pl->generation = w.generation ? *w.generation : 0;
    pl->magic = PLAN_MAGIC;
    *workspace_bytes = pl->workspace;
    attn_pool_reserve(c.num_threads); /* the runs start no thread */
    *plan = pl;
    return ATTN_OK;
}

/* A paged plan run over view w, the planned one or one of a layer laid out
 * alike (checked by the caller, as is everything but the layouts here). */
static attn_status run_paged_taken(attn_sdpa_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                   const attn_kv_paged_view *w, void *workspace, size_t workspace_size,
                                   attn_error *err);

static attn_status run_paged(attn_sdpa_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                             const attn_kv_paged_view *w, void *workspace, size_t workspace_size, attn_error *err) {
    if (!plan_take(pl, err)) return ATTN_ERR_PLAN;
    attn_status st = run_paged_taken(pl, out, lse, q, w, workspace, workspace_size, err);
    atomic_store(&pl->running, false);
    return st;
}

static attn_status run_paged_taken(attn_sdpa_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                   const attn_kv_paged_view *w, void *workspace, size_t workspace_size,
                                   attn_error *err) {
    attn_status st;
    if ((st = same_layout(q, pl->half ? &pl->q16 : pl->hadamard ? &pl->qin : &pl->q, "q", err)) ||
        (st = same_layout(out, pl->half ? &pl->out16 : &pl->out, "out", err)))
        return st;
    if ((st = check_lse_workspace(pl, lse, workspace, workspace_size, err))) return st;
    /* The layouts are the plan's, so only the data can alias: the outputs
     * against q, this layer's pages, residual rows and scales, the view's
     * tables and generation counter (a scratch write there would move a
     * pool's counter) and the options'. */
    attn_tensor regions[5], residual, scales[2];
    attn_kv_paged_regions(regions, w);
    attn_kv_paged_residual(&residual, w);
    const float *sc[2] = {w->k_scale, w->v_scale};
    for (int i = 0; i < 2; i++)
        attn_tensor_init(&scales[i], (void *)(uintptr_t)sc[i], ATTN_F32, 1, &w->heads, NULL, NULL);
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_tensor generation; /* a pool's view: its counter, in the pool's header */
    int64_t one = 1;
    attn_tensor_init(&generation, (void *)(uintptr_t)w->generation, ATTN_F64, 1, &one, NULL, NULL); /* uint64: bytes */
    attn_named ins[10 + ATTN_OPTION_TENSORS] = {{q, "q"}};
    for (int r = 0; r < 5; r++) ins[1 + r] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    ins[6] = (attn_named){residual.data ? &residual : NULL, "the residual keys"};
    ins[7] = (attn_named){sc[0] ? &scales[0] : NULL, "k_scale"}, ins[8] = (attn_named){sc[1] ? &scales[1] : NULL, "v_scale"};
    ins[9] = (attn_named){w->generation ? &generation : NULL, "the view's generation counter"};
    /* a view without scales: the options' own descale tensors, if any (with scales, pl->o's are the planned view's) */
    attn_sdpa_options read = pl->o;
    if (sc[0]) read.k_descale = NULL;
    if (sc[1]) read.v_descale = NULL;
    int n_ins = attn_named_options(ins, 10, ATTN_NAMED_CAP(ins), &read);
    if ((st = attn_check_no_overlap(outs, 2, ins, n_ins, err)) ||
        (st = check_workspace(pl, workspace, workspace_size, outs, 2, ins, n_ins, err)) ||
        (st = attn_varlen_plan_check_masks(pl->varlen, outs, 2, workspace, workspace_size, pl->masks, pl->batch, err)))
        return st;
    pl->q.data = q->data, pl->out.data = out->data, pl->lse.data = lse ? lse->data : NULL;
    attn_paged_rows *k_rows = attn_varlen_plan_k_rows(pl->varlen), *v_rows = attn_varlen_plan_v_rows(pl->varlen);
    for (int64_t b = 0; b < pl->batch; b++) attn_kv_paged_rows(&k_rows[b], &v_rows[b], w, b, k_rows[b].length);
    attn_varlen_plan_set_scales(pl->varlen, pl->batch, w->k_scale, w->v_scale);
    attn_arena arena = run_arena(workspace, workspace_size);
    if (pl->half && !place_stand_ins(pl, &arena, q))
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the workspace cannot hold the f32 copies of q and out");
    attn_tensor hq;
    if (pl->hadamard) { /* q turned into the workspace's front, as attn_kv_paged_attend turns it */
        if ((st = attn_hadamard_queries(&hq, &arena, q, &pl->o, err))) return st;
        pl->q.data = hq.data;
    }
    st = attn_varlen_plan_run(pl->varlen, &pl->out, lse ? &pl->lse : NULL, &pl->q, NULL, NULL, pl->batch, &pl->o, &arena,
                              pl->half ? q : NULL, err);
    if (!st && pl->half && pl->no > 0) attn_tensor_convert(out, &pl->out, NULL); /* the one rounding */
    return st;
}

/* The plan of a paged batch, or ATTN_ERR_PLAN. */
static attn_status paged_plan(attn_sdpa_plan *pl, attn_error *err) {
    if (!pl) return attn_fail(err, ATTN_ERR_NULL, "plan is NULL");
    if (pl->magic != PLAN_MAGIC || !pl->paged)
        return attn_fail(err, ATTN_ERR_PLAN, "plan holds no paged batch's plan (attn_kv_paged_plan_init)");
    return ATTN_OK;
}

/* ATTN_ERR_PLAN when `generation` is the planned view's counter and it has
 * moved on since the plan was made: the sequences grew, shrank, forked or
 * were freed, and the plan's lengths and pages are no longer theirs. One
 * load and one compare; the caller's lengths (which may be gone) are not
 * read. Another counter, or none, says nothing about this plan. */
static attn_status still_current(const attn_sdpa_plan *pl, const uint64_t *generation, attn_error *err) {
    if (!generation || generation != pl->view.generation || *generation == pl->generation) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_PLAN, "the sequences changed since the plan was made (their view's generation is "
                     "%llu, the plan's %llu: an append, truncate, fork or free came between): plan again",
                     (unsigned long long)*generation, (unsigned long long)pl->generation);
}

attn_status attn_kv_paged_run(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                              const void *k_pages, const void *v_pages, void *workspace, size_t workspace_size,
                              attn_error *err) {
    attn_status st = paged_plan(plan, err);
    if (st || (st = still_current(plan, plan->view.generation, err))) return st;
    if (!k_pages || !v_pages) return attn_fail(err, ATTN_ERR_NULL, "k_pages or v_pages is NULL");
    attn_kv_paged_view w = plan->view;
    /* Residual rows and per-head scales are a layer's own, as its pages are */
    if ((w.key_dtype || w.k_scale || w.v_scale) && (k_pages != w.k_pages || v_pages != w.v_pages))
        return attn_fail(err, ATTN_ERR_PLAN, "the planned view has %s, which belong to its own pages: run another "
                         "layer's pages with attn_kv_paged_run_view and that layer's view",
                         w.key_dtype ? "residual keys (keys quantized per channel)" : "per-head fp8 scales");
    w.k_pages = k_pages, w.v_pages = v_pages;
    return run_paged(plan, out, lse, q, &w, workspace, workspace_size, err);
}

attn_status attn_kv_paged_run_view(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                   const attn_kv_paged_view *layer, void *workspace, size_t workspace_size,
                                   attn_error *err) {
    attn_status st = paged_plan(plan, err);
    if (st || (st = attn_kv_paged_check(layer, err))) return st;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    attn_versioned_read(&w, sizeof w, layer, "layer", "", NULL);
    if ((st = still_current(plan, w.generation, err))) return st;
    const attn_kv_paged_view *p = &plan->view;
    /* Laid out as planned: the sizes and formats, the sequences and their lengths */
    const int64_t got[8] = {w.heads, w.key_dim, w.value_dim, w.page_size, w.num_pages, w.num_sequences, w.hadamard,
                            w.residual},
                  want[8] = {p->heads, p->key_dim, p->value_dim, p->page_size, p->num_pages, p->num_sequences,
                             p->hadamard, p->residual};
    static const char *const NAMES[8] = {"heads", "key_dim", "value_dim", "page_size", "num_pages", "num_sequences",
                                         "hadamard", "residual"};
    for (int i = 0; i < 8; i++)
        if (got[i] != want[i])
            return attn_fail(err, ATTN_ERR_PLAN, "layer->%s is %lld but the plan's view had %lld", NAMES[i],
                             (long long)got[i], (long long)want[i]);
    if (w.dtype != p->dtype || w.key_dtype != p->key_dtype)
        return attn_fail(err, ATTN_ERR_PLAN, "the layer's pages are %s (keys %s) but the plan's were %s (keys %s)",
                         attn_dtype_name(w.dtype), attn_dtype_name(w.key_dtype ? w.key_dtype : w.dtype),
                         attn_dtype_name(p->dtype), attn_dtype_name(p->key_dtype ? p->key_dtype : p->dtype));
    if (!w.k_scale != !p->k_scale || !w.v_scale != !p->v_scale)
        return attn_fail(err, ATTN_ERR_PLAN, "the layer's view %s per-head scales (k_scale, v_scale) as the plan's "
                         "did not", w.k_scale || w.v_scale ? "has" : "lacks");
    const attn_paged_rows *k_rows = attn_varlen_plan_k_rows(plan->varlen);
    for (int64_t b = 0; b < w.num_sequences; b++)
        if (w.lengths[b] != k_rows[b].length)
            return attn_fail(err, ATTN_ERR_PLAN, "layer->lengths[%lld] is %lld but the plan's was %lld", (long long)b,
                             (long long)w.lengths[b], (long long)k_rows[b].length);
    return run_paged(plan, out, lse, q, &w, workspace, workspace_size, err);
}
