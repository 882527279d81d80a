/* sdpa.c -- the public entry points (attn_sdpa, attn_sdpa_reference,
 * attn_scores): each has its call planned (plan.c), chooses the kernel that
 * computes it (exact f64, reference, scores, or for f32 without weights the
 * fast flash or decode kernels), runs it, and reports it in verbose mode. */
#include "sdpa/sdpa.h"
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>

typedef enum kernel_kind { KERNEL_STREAM, KERNEL_REFERENCE, KERNEL_SCORES } kernel_kind;

size_t attn_context_init(attn_context *context, size_t struct_size) {
    static const attn_context DEFAULTS = {sizeof DEFAULTS, 0, NULL, 0};
    return attn_versioned_init(context, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

size_t attn_sdpa_options_init(attn_sdpa_options *options, size_t struct_size) {
    static const attn_sdpa_options DEFAULTS = {.struct_size = sizeof DEFAULTS};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

attn_status attn_alibi_slopes(double *slopes, int64_t heads, attn_error *err) {
    if (!slopes) return attn_fail(err, ATTN_ERR_NULL, "slopes is NULL");
    if (heads < 1) return attn_fail(err, ATTN_ERR_SHAPE, "heads is %lld; it must be at least 1", (long long)heads);
    int64_t n = 1; /* the largest power of two <= heads */
    while (n <= heads / 2) n *= 2;
    for (int64_t h = 0; h < heads; h++) /* then every other slope of 2n */
        slopes[h] = h < n ? exp2(-8.0 * (double)(h + 1) / (double)n) : exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
    return ATTN_OK;
}

/* Run the kernel that `kind` and the options call for on every slice. */
static attn_status run_kernel(kernel_kind kind, const attn_slices *call, const attn_sdpa_options *o,
                              attn_run_info *info, attn_error *err) {
    attn_slices slices = *call, *sl = &slices;
    attn_rope_plan rope;
    attn_status st = attn_rope_prepare(sl, &rope, err);
    if (st) return st;
    int64_t E = sl->cq.shape[4], S = sl->ck.shape[3], Ev = sl->cv.shape[4];
    static const char *const KERNEL[] = {"exact", "reference", "scores"};
    info->kernel = KERNEL[kind], info->isa = "-", info->bf16 = NULL, info->key_dot = NULL, info->value_dot = NULL, info->threads = info->threads_given = 1;
    info->side_by_side = 1, info->pages_per_call = 0, info->heads_per_call = 0, info->rows = NULL;
    info->items = sl->count, info->fallbacks = 0;

    /* f32 attention without weights takes the fast kernels: split over the
     * keys where the cost model (decode.c) says so, else tiled. */
    if (kind == KERNEL_STREAM && sl->q->dtype == ATTN_F32 && !sl->weights) {
        st = attn_decode_chunk_of(sl) > 0 ? attn_decode_run(sl, info, err)
                                          : attn_flash_run(sl, o->compute == ATTN_COMPUTE_BF16, info, err);
        if (!st && !sl->arena->measure) attn_descale_out(sl);
        return st;
    }

    /* Scratch memory, sized by the kernel, overflow-checked. */
    int64_t words = kind == KERNEL_STREAM ? attn_stream_work_size(E, Ev)
                                          : attn_reference_work_size(S, E, Ev);
    if (words < 0)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "scratch size for E=%lld, Ev=%lld overflows",
                         (long long)E, (long long)Ev);
    double *work = attn_arena_alloc(sl->arena, (size_t)words, sizeof(double));
    if (sl->arena->measure) return ATTN_OK;
    if (!work)
        return attn_fail(err, sl->arena->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate %lld bytes of scratch", (long long)words * (long long)sizeof(double));
    for (int64_t i = 0; i < sl->count; i++) {
        attn_problem p;
        attn_slice(sl, i, &p);
        if (kind == KERNEL_STREAM) attn_stream_kernel(&p, work);
        else if (kind == KERNEL_REFERENCE) attn_reference_kernel(&p, work);
        else attn_scores_kernel(&p, work);
    }
    if (kind != KERNEL_SCORES) attn_descale_out(sl);
    return ATTN_OK;
}

/* The bytes of scratch one planned call takes: the kernel runs on a
 * measuring arena, which stops it as soon as it has asked for its memory. */
static attn_status measure(size_t *bytes, kernel_kind kind, attn_slices *sl, const attn_sdpa_options *o,
                           attn_error *err) {
    attn_arena a = attn_arena_measuring(), *saved = sl->arena;
    attn_run_info info;
    sl->arena = &a;
    attn_status st = run_kernel(kind, sl, o, &info, err);
    sl->arena = saved;
    *bytes = attn_arena_needed(&a);
    return st;
}

/* The context's workspace apart from every tensor the call reads or writes
 * (attn_check_workspace), checked before the call writes into it: the
 * outputs, q, k, v, the options' tensors, and the pools of k_pages and
 * v_pages (NULL: none). */
static attn_status check_workspace(const attn_context *c, kernel_kind kind, const attn_tensor *out,
                                   const attn_tensor *lse, const attn_tensor *weights, const attn_tensor *q,
                                   const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o,
                                   const attn_paged_rows *k_pages, const attn_paged_rows *v_pages, attn_error *err) {
    if (!c->workspace) return ATTN_OK;
    attn_tensor pools[2];
    if (k_pages) attn_paged_rows_pool(&pools[0], k_pages), attn_paged_rows_pool(&pools[1], v_pages);
    const attn_named outs[3] = {{out, kind == KERNEL_SCORES ? "scores" : "out"}, {lse, "lse"}, {weights, "weights"}};
    attn_named ins[5 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}, {k_pages ? &pools[0] : NULL, "k pages"},
                                               {v_pages ? &pools[1] : NULL, "v pages"}};
    int n_ins = attn_named_options(ins, 5, ATTN_NAMED_CAP(ins), o);
    return attn_check_workspace(c->workspace, c->workspace_size, outs, 3, ins, n_ins, err);
}

/* The call as its ATTN_VERBOSE line names it: a paged one's (k_pages not
 * NULL) "sdpa_paged", else the kernel kind's entry point. */
static const char *call_name(kernel_kind kind, const attn_paged_rows *k_pages) {
    static const char *const CALL[] = {"sdpa", "sdpa_reference", "scores"};
    return k_pages ? "sdpa_paged" : CALL[kind];
}

/* Plan the call; with `bytes`, only measure its scratch (planned from
 * shapes alone, NULL data allowed: attn_plan_shapes), else run it.
 * k_pages and v_pages (NULL: none): keys and values from a paged pool, k
 * and v then standing in for their shapes (attn_sdpa_paged). shown_q (NULL:
 * q) is the q the ATTN_VERBOSE line names: a 16-bit call's own, where q is
 * its f32 copy. */
static attn_status sdpa_run(kernel_kind kind, size_t *bytes, attn_tensor *out, attn_tensor *lse,
                            attn_tensor *weights, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_options *options,
                            const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                            const attn_tensor *shown_q, attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st) return st;
    if ((st = attn_check_descale_dtype(&o, k_pages ? k_pages->dtype : k ? k->dtype : ATTN_F32,
                                       v_pages ? v_pages->dtype : v ? v->dtype : ATTN_F32, err)))
        return st;
    attn_slices sl;
    st = bytes ? attn_plan_shapes(&sl, out, lse, weights, q, k, v, &o, c.num_threads, err)
               : attn_plan_call(&sl, out, lse, weights, kind == KERNEL_SCORES, q, k, v, &o, c.num_threads, err);
    if (st) return st;
    sl.k_pages = k_pages, sl.v_pages = v_pages;
    if (bytes) return measure(bytes, kind, &sl, &o, err);
    if ((st = check_workspace(&c, kind, out, lse, weights, q, k, v, &o, k_pages, v_pages, err))) return st;
    attn_arena arena = attn_arena_over(c.workspace, c.workspace_size);
    sl.arena = &arena;
    if (c.workspace) { /* too small a workspace fails before anything is written */
        size_t need;
        if ((st = measure(&need, kind, &sl, &o, err))) return st;
        if (need > c.workspace_size)
            return attn_fail(err, ATTN_ERR_WORKSPACE,
                             "the context's workspace has %zu bytes but this call needs %zu "
                             "(attn_sdpa_workspace_size)", c.workspace_size, need);
    }
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    attn_run_info info;
    st = run_kernel(kind, &sl, &o, &info, err);
    attn_arena_release(&arena);
    if (verbose) {
        attn_slices shown = sl;
        if (shown_q) shown.q = shown_q;
        attn_verbose_report(call_name(kind, k_pages), &info, &shown, &o, attn_now_ms() - t0);
    }
    return st;
}


/* attn_sdpa and attn_sdpa_reference with a 16-bit q and out (f16 or bf16,
 * the same): q is widened into f32 (exactly), the call runs in f32 as it
 * would for an f32 q (f32 sums and softmax; k and v f32, f16 or bf16 as
 * they are), and its f32 out is rounded once, to nearest even, into out.
 * The f32 copies of q and out come from the workspace (or malloc), the
 * call's own scratch after them. With `bytes`, the workspace is measured:
 * the copies are counted on a measuring arena and the call measured on
 * their layouts (q and out may have NULL data, attn_check_data). */
static attn_status sdpa_half(kernel_kind kind, size_t *bytes, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                             const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_sdpa_options *options, const attn_paged_rows *k_pages,
                             const attn_paged_rows *v_pages, attn_error *err) {
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out is NULL");
    attn_status st;
    if ((st = attn_check_data(q, "q", bytes != NULL, err)) || (st = attn_check_data(out, "out", bytes != NULL, err)))
        return st;
    if (out->dtype != q->dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "out is %s but q is %s; a 16-bit q gives out in its own dtype",
                         attn_dtype_name(out->dtype), attn_dtype_name(q->dtype));
    if (weights)
        return attn_fail(err, ATTN_ERR_DTYPE, "the weights are not given for a 16-bit q (PyTorch's SDPA returns none); "
                         "widen q to f32 to have them");
    if ((st = attn_check_half_kv(q, k, v, err))) return st;
    attn_sdpa_options o;
    attn_context c;
    st = attn_options_read(&o, &c, options, err);
    const attn_tensor *t[2] = {q, out};
    for (int i = 0; i < 2 && !st; i++)
        if (t[i]->rank < 2 || t[i]->rank > ATTN_MAX_RANK)
            return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; attention takes ranks 2 to %d", i ? "out" : "q",
                             t[i]->rank, ATTN_MAX_RANK);
    if (st || (st = attn_check_extent(q, "q", err)) || (st = attn_check_extent(out, "out", err))) return st;
    /* out is written from its f32 copy, which is C order: the f32 call
     * checks only the copy, so out's own strides are checked here (a
     * stride 0, or rows folded onto each other, would keep one of several
     * results) */
    if ((st = attn_check_writable(out, "out", err))) return st;
    if (lse && lse->dtype != ATTN_F32)
        return attn_fail(err, ATTN_ERR_DTYPE, "lse is %s; with a 16-bit q it is f32", attn_dtype_name(lse->dtype));
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    /* out is written from its f32 copy: the f32 call checks only that copy */
    attn_named ins[3 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}};
    int n_ins = attn_named_options(ins, 3, ATTN_NAMED_CAP(ins), &o);
    if ((st = attn_check_no_overlap(outs, 2, ins, n_ins, err)) ||
        (!bytes && (st = check_workspace(&c, kind, out, lse, weights, q, k, v, &o, k_pages, v_pages, err))))
        return st;
    if (!bytes && c.workspace) { /* the whole call's figure, as for an f32 q, not the f32 call's share of it */
        size_t need = 0;
        if ((st = sdpa_half(kind, &need, out, lse, weights, q, k, v, options, k_pages, v_pages, err))) return st;
        if (need > c.workspace_size)
            return attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace has %zu bytes but this call needs %zu "
                             "(attn_sdpa_workspace_size)", c.workspace_size, need);
    }
    attn_arena arena = bytes ? attn_arena_measuring() : attn_arena_over(c.workspace, c.workspace_size);
    attn_tensor q32, out32;
    if (!attn_arena_f32_like(&arena, &q32, q) || !attn_arena_f32_like(&arena, &out32, out)) {
        for (int i = 0; i < 2; i++)
            for (int d = 0; d < t[i]->rank; d++)
                if (t[i]->shape[d] < 1) {
                    attn_arena_release(&arena);
                    return attn_fail(err, ATTN_ERR_SHAPE, "%s has a dimension below 1", i ? "out" : "q");
                }
        return attn_arena_fail(&arena, "the f32 copies of q and out", "attn_sdpa_workspace_size", err);
    }
    attn_context rest = attn_arena_rest(&arena, &c);
    o.context = &rest;
    if (!bytes) attn_tensor_convert(&q32, q, NULL); /* exact */
    size_t inner = 0;
    st = sdpa_run(kind, bytes ? &inner : NULL, &out32, lse, NULL, &q32, k, v, &o, k_pages, v_pages, q, err);
    if (!st && bytes) *bytes = attn_arena_needed(&arena) + inner;
    if (!st && !bytes) attn_tensor_convert(out, &out32, NULL); /* the one rounding */
    attn_arena_release(&arena);
    return st;
}

attn_status attn_sdpa_stream_measure(size_t *bytes, attn_slices *sl, const attn_sdpa_options *o, attn_error *err) {
    return measure(bytes, KERNEL_STREAM, sl, o, err);
}

attn_status attn_sdpa_stream_run(const attn_slices *sl, const attn_sdpa_options *o, attn_run_info *info,
                                 attn_error *err) {
    return run_kernel(KERNEL_STREAM, sl, o, info, err);
}

/* A call with a dimension of 0 (empty.c): *empty says whether it is one,
 * checked as the same call with each 0 read as 1 (measured, so reading no
 * element), and then done: out 0 and lse that of a row with no key where
 * there are rows but no keys, nothing else written, and its ATTN_VERBOSE
 * line printed. k_pages, v_pages: a paged call's pages (k and v their
 * stand-ins), for that line; else NULL. */
static attn_status empty_call(bool *empty, kernel_kind kind, size_t *bytes, attn_tensor *out, attn_tensor *lse,
                              attn_tensor *weights, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_sdpa_options *options, const attn_paged_rows *k_pages,
                              const attn_paged_rows *v_pages, attn_error *err);

/* The entry points' call: through f32 copies for a 16-bit q (sdpa_half). */
static attn_status sdpa_call(kernel_kind kind, size_t *bytes, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                             const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_sdpa_options *options, attn_error *err) {
    bool empty = false;
    attn_status st = empty_call(&empty, kind, bytes, out, lse, weights, q, k, v, options, NULL, NULL, err);
    if (st || empty) return st;
    if (q && attn_dtype_half(q->dtype))
        return sdpa_half(kind, bytes, out, lse, weights, q, k, v, options, NULL, NULL, err);
    return sdpa_run(kind, bytes, out, lse, weights, q, k, v, options, NULL, NULL, NULL, err);
}

/* The checks of a call with a dimension of 0 (e->any), o its options read:
 * where its 0s stand, then the same call with each 0 read as 1, measured. */
static attn_status empty_check(attn_empty *e, attn_sdpa_options *o, bool measuring, kernel_kind kind,
                               attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                               const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                               attn_error *err) {
    memset(e, 0, sizeof *e);
    if (!q || !k || !v || !out) return ATTN_OK; /* the usual checks say which */
    attn_context c;
    attn_status st = attn_options_read(o, &c, options, err);
    if (st) return st;
    attn_empty_arg a[7] = {{q, "q", ATTN_PART_Q, NULL, {0}},          {k, "k", ATTN_PART_KV, NULL, {0}},
                           {v, "v", ATTN_PART_KV, NULL, {0}},         {o->mask, "mask", ATTN_PART_MASK, NULL, {0}},
                           {out, "out", ATTN_PART_OUT, NULL, {0}},    {lse, "lse", ATTN_PART_LSE, NULL, {0}},
                           {weights, "weights", ATTN_PART_WEIGHTS, NULL, {0}}};
    if ((st = attn_empty_check(e, a, 7, err)) || !e->any) return st;
    attn_sdpa_options ones = *o;
    if (o->mask) ones.mask = &a[3].one;
    size_t need = 0;
    if ((st = sdpa_call(kind, &need, &a[4].one, lse ? &a[5].one : NULL, weights ? &a[6].one : NULL, &a[0].one,
                        &a[1].one, &a[2].one, &ones, err)))
        return st;
    return measuring ? ATTN_OK : attn_empty_data(a, 7, err);
}

static attn_status empty_call(bool *empty, kernel_kind kind, size_t *bytes, attn_tensor *out, attn_tensor *lse,
                              attn_tensor *weights, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_sdpa_options *options, const attn_paged_rows *k_pages,
                              const attn_paged_rows *v_pages, attn_error *err) {
    double t0 = attn_verbose_on() ? attn_now_ms() : 0;
    attn_empty e;
    attn_sdpa_options o;
    attn_status st = empty_check(&e, &o, bytes != NULL, kind, out, lse, weights, q, k, v, options, err);
    *empty = !st && e.any;
    if (!*empty) return st;
    if (bytes) {
        *bytes = 0;
        return ATTN_OK;
    }
    if (!e.no_output) attn_write_no_keys(out, lse, o.sinks); /* the weights have S = 0: no element */
    attn_empty_report(call_name(kind, k_pages), q, k, v, lse, weights, k_pages, v_pages, &o, t0);
    return ATTN_OK;
}

attn_status attn_sdpa_empty(attn_empty *e, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                            attn_error *err) {
    attn_sdpa_options o;
    return empty_check(e, &o, true, KERNEL_STREAM, out, lse, NULL, q, k, v, options, err); /* runs check data */
}

attn_status attn_sdpa_workspace_size(size_t *bytes, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                                     const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_sdpa_options *options, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    return sdpa_call(KERNEL_STREAM, bytes, out, lse, weights, q, k, v, options, err);
}

attn_status attn_sdpa_shape_bytes(size_t *bytes, attn_tensor *out, attn_tensor *weights, const attn_tensor *q,
                                  const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                                  attn_error *err) {
    return sdpa_call(KERNEL_STREAM, bytes, out, NULL, weights, q, k, v, options, err);
}

attn_status attn_sdpa(attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                      const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                      attn_error *err) {
    return sdpa_call(KERNEL_STREAM, NULL, out, lse, weights, q, k, v, options, err);
}

attn_status attn_sdpa_reference(attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                                const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_sdpa_options *options, attn_error *err) {
    return sdpa_call(KERNEL_REFERENCE, NULL, out, lse, weights, q, k, v, options, err);
}

attn_status attn_scores(attn_tensor *scores, const attn_tensor *q, const attn_tensor *k,
                        const attn_sdpa_options *options, attn_error *err) {
    /* k stands in for v: the plan needs one, and k's shape is always valid. */
    return sdpa_run(KERNEL_SCORES, NULL, scores, NULL, NULL, q, k, k, options, NULL, NULL, NULL, err);
}

void attn_paged_rows_pool(attn_tensor *t, const attn_paged_rows *pg) {
    /* checked by attn_paged_rows_check; quantized rows as their bytes */
    bool q = attn_dtype_quantized(pg->dtype);
    int64_t row = q ? attn_row_bytes(pg->dtype, pg->cols) : pg->cols;
    if (attn_dtype_grouped(pg->dtype)) { /* groups of 32 positions: the whole region's bytes */
        int64_t n = pg->num_pages * pg->heads * (pg->page_size / ATTN_KEY_GROUP) * attn_group_bytes(pg->dtype, pg->cols);
        attn_tensor_init(t, (void *)pg->pages, ATTN_BOOL, 1, &n, NULL, NULL);
        return;
    }
    /* One page (a contiguous cache): the rows it holds, per head. A view's
     * table may name its one page again and again, so a sequence longer
     * than the page reads the whole page, as any other pool does. */
    if (pg->num_pages == 1 && pg->length > 0 && pg->length <= pg->page_size) {
        int64_t shape[3] = {pg->heads, pg->length, row}, strides[3] = {pg->page_size * row, row, 1};
        attn_tensor_init(t, (void *)pg->pages, q ? ATTN_BOOL : pg->dtype, 3, shape, strides, NULL);
        return;
    }
    int64_t n = pg->num_pages * pg->heads * pg->page_size * row;
    attn_tensor_init(t, (void *)pg->pages, q ? ATTN_BOOL : pg->dtype, 1, &n, NULL, NULL);
}

/* Stand-ins of k and v for a pool of `batch` sequences stacked as heads:
 * the last `rank` dimensions of (batch, Hk, S, E), over one row of the pool
 * (strides 0). */
static void stand_ins(attn_tensor *k, attn_tensor *v, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                      int64_t batch, int rank) {
    const attn_paged_rows *pg[2] = {k_pages, v_pages};
    attn_tensor *t[2] = {k, v};
    for (int i = 0; i < 2; i++) {
        int64_t shape[4] = {batch, pg[i]->heads / batch, pg[i]->length, pg[i]->cols}, zero[4] = {0, 0, 0, 1};
        /* Quantized rows stand in as f16, which the plan takes with f32 q as
         * it must take them: only the shapes are read. */
        bool f16 = attn_dtype_quantized(pg[i]->dtype) || attn_dtype_grouped(pg[i]->dtype);
        attn_tensor_init(t[i], (void *)pg[i]->pages, f16 ? ATTN_F16 : pg[i]->dtype, rank,
                         shape + 4 - rank, zero + 4 - rank, NULL);
    }
}

void attn_paged_rows_shapes(attn_tensor *k, attn_tensor *v, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages) {
    stand_ins(k, v, k_pages, v_pages, 1, 3);
}

attn_status attn_sdpa_paged_batch(size_t *bytes, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                                  const attn_tensor *q, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages, int64_t batch,
                                  int rank, const attn_sdpa_options *options, attn_error *err) {
    attn_status st;
    if ((st = attn_paged_rows_check(k_pages, "k pages", err)) || (st = attn_paged_rows_check(v_pages, "v pages", err)))
        return st;
    if (k_pages->heads != v_pages->heads || k_pages->length != v_pages->length ||
        (k_pages->dtype != v_pages->dtype && !attn_dtype_grouped(k_pages->dtype)))
        return attn_fail(err, ATTN_ERR_SHAPE, "k pages (%lld heads, length %lld, %s) and v pages (%lld, %lld, %s) differ",
                         (long long)k_pages->heads, (long long)k_pages->length, attn_dtype_name(k_pages->dtype),
                         (long long)v_pages->heads, (long long)v_pages->length, attn_dtype_name(v_pages->dtype));
    if (batch < 1 || k_pages->heads % batch || rank < 2 || rank > 4 || (batch > 1 && rank < 4) ||
        (rank < 3 && k_pages->heads != 1))
        return attn_fail(err, ATTN_ERR_SHAPE, "%lld sequence%s of rank %d cannot share the pool's %lld head%s",
                         (long long)batch, attn_plural(batch), rank, (long long)k_pages->heads,
                         attn_plural(k_pages->heads));
    attn_tensor k, v, kpool, vpool;
    stand_ins(&k, &v, k_pages, v_pages, batch, rank);
    attn_paged_rows_pool(&kpool, k_pages), attn_paged_rows_pool(&vpool, v_pages);
    const attn_named outs[3] = {{out, "out"}, {lse, "lse"}, {weights, "weights"}};
    const attn_named ins[2] = {{&kpool, "k pages"}, {&vpool, "v pages"}};
    if (out && (st = attn_check_no_overlap(outs, 3, ins, 2, err))) return st;
    bool empty = false; /* no queries, no positions or a batch of 0: checked with the stand-ins, no page read */
    if ((st = empty_call(&empty, KERNEL_STREAM, bytes, out, lse, weights, q, &k, &v, options, k_pages, v_pages, err)) ||
        empty)
        return st;
    if (q && attn_dtype_half(q->dtype))
        return sdpa_half(KERNEL_STREAM, bytes, out, lse, weights, q, &k, &v, options, k_pages, v_pages, err);
    return sdpa_run(KERNEL_STREAM, bytes, out, lse, weights, q, &k, &v, options, k_pages, v_pages, NULL, err);
}

attn_status attn_sdpa_paged(attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                            const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                            const attn_sdpa_options *options, attn_error *err) {
    return attn_sdpa_paged_batch(NULL, out, lse, weights, q, k_pages, v_pages, 1, 3, options, err);
}
