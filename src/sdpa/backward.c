/* backward.c -- attn_sdpa_backward and attn_sdpa_backward_workspace_size:
 * the gradients of attn_sdpa. The forward's plan checks q, k, v, out, lse
 * and the options; this file checks dout and the gradients, then picks the
 * kernel:
 *   - f32 q without dmask: the fused FlashAttention-2 kernel
 *     (fast/flash_backward.c), which sends a slice it cannot take in f32
 *     (attn.h says which) to the exact kernel itself;
 *   - otherwise (f64, or dmask asked for): the exact kernel
 *     (exact/backward.c) on every slice.
 * A gradient that no two slices share (no broadcast batch dimension, and for
 * dk and dv no GQA group) the fused kernel writes straight into the caller's
 * output. Every other gradient, and every gradient of the exact kernel, is
 * summed in an f64 accumulator shaped like its input (so slices sharing an
 * input add into one place) and written out in the caller's dtype and
 * strides at the end. With RoPE the kernels differentiate the turned q and
 * k, and dq and dk are turned back once, where they were summed. The call
 * runs first on a measuring arena, which counts its scratch (the workspace
 * size stops there), then on the caller's workspace or malloc, so nothing
 * is written unless all of its memory was had. */
#include "sdpa/sdpa.h"
#include "kernels/rope.h"
#include "exact/exact.h"
#include "fast/fast.h"

#include <stdio.h>

/* A tensor `name` shaped exactly like `like`, of dtype `dtype`, with offsets
 * that fit; an output also has no stride 0 in a dimension of size > 1. */
static attn_status check_like(const attn_tensor *t, const char *name, const attn_tensor *like,
                              const char *like_name, attn_dtype dtype, bool output, bool measuring, attn_error *err) {
    attn_status st = attn_check_data(t, name, measuring, err);
    if (st) return st;
    if (t->dtype != dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be %s like q", name, attn_dtype_name(t->dtype),
                         attn_dtype_name(dtype));
    if (t->rank != like->rank || memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)t->rank) != 0) {
        char got[128], want[128];
        attn_format_shape(got, sizeof got, t->rank, t->shape);
        attn_format_shape(want, sizeof want, like->rank, like->shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s but %s has shape %s; they must match", name, got,
                         like_name, want);
    }
    if (output && (st = attn_check_writable(t, name, err))) return st;
    return attn_check_extent(t, name, err);
}

typedef attn_backward_grads grads;

/* The tensors a backward call writes (outs: dq, dk, dv, dmask, NULL where
 * not asked for) and reads (ins: dout, q, k, v, out, lse and the options'
 * tensors), for the aliasing checks. Returns the count of ins (-1: the
 * list is short, which the checks refuse). */
enum { BACKWARD_INS = 6 + ATTN_OPTION_TENSORS };
static int backward_tensors(attn_named outs[4], attn_named ins[BACKWARD_INS], attn_tensor *const grad[4],
                            const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *o) {
    static const char *const NAME[4] = {"dq", "dk", "dv", "dmask"};
    for (int i = 0; i < 4; i++) outs[i] = (attn_named){grad[i], NAME[i]};
    const attn_named read[6] = {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"}};
    for (int i = 0; i < 6; i++) ins[i] = read[i];
    return attn_named_options(ins, 6, BACKWARD_INS, o);
}

static attn_status check_grads(grads *g, const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                               const attn_sdpa_options *o, bool measuring, attn_error *err) {
    static const char *const NAME[4] = {"dq", "dk", "dv", "dmask"};
    const attn_tensor *like[4] = {q, k, v, o->mask};
    static const char *const LIKE[4] = {"q", "k", "v", "mask"};
    attn_status st;
    if (!dout) return attn_fail(err, ATTN_ERR_NULL, "dout is NULL");
    if ((st = check_like(dout, "dout", out, "out", q->dtype, false, measuring, err))) return st;
    if (!g->out[0] && !g->out[1] && !g->out[2] && !g->out[3])
        return attn_fail(err, ATTN_ERR_NULL, "dq, dk, dv and dmask are all NULL; ask for one gradient at least");
    if (g->out[3] && (!o->mask || o->mask->dtype == ATTN_BOOL))
        return attn_fail(err, ATTN_ERR_MASK, "dmask needs a float mask in the options%s",
                         o->mask ? ", but the mask is bool" : "");
    for (int i = 0; i < 4; i++) {
        if (!g->out[i]) continue;
        if ((st = check_like(g->out[i], NAME[i], like[i], LIKE[i], q->dtype, true, measuring, err))) return st;
        attn_tensor_init(&g->acc[i], NULL, ATTN_F64, like[i]->rank, like[i]->shape, NULL, NULL);
    }
    /* The inputs are read while gradients are written (the fused kernel
     * writes dq, dk and dv as it goes): no gradient may share their memory,
     * nor another gradient's. */
    attn_named outs[4], ins[BACKWARD_INS];
    int n_ins = backward_tensors(outs, ins, g->out, dout, q, k, v, out, lse, o);
    return attn_check_no_overlap(outs, 4, ins, n_ins, err);
}

/* Whether the fused f32 kernel computes the call: f32 q (k and v may be 16-bit)
 * and no dmask, which the exact kernel writes (it is L × S anyway). */
static bool fast_applies(const grads *g, const attn_grad_slices *gs) {
    return gs->f.q->dtype == ATTN_F32 && !g->out[3];
}

/* Which gradients the fused kernel writes straight into the caller's
 * output: those no two slices share (no broadcast batch dimension, and for
 * dk and dv no GQA group); and which it sums group by group into it: dk
 * and dv that only a GQA group shares (grouped; dk not with RoPE, which
 * turns it back in f64). The others are summed in an f64 accumulator
 * first. */
static void choose_direct(attn_grad_slices *gs, const grads *g) {
    const attn_canon *in[3] = {&gs->f.cq, &gs->f.ck, &gs->f.cv}, *out = &gs->f.co;
    bool fast = fast_applies(g, gs);
    for (int i = 0; i < 3; i++) {
        bool gqa = i > 0 && in[i]->shape[2] != out->shape[2], broadcast = false;
        for (int d = 0; d < 3; d++) broadcast |= in[i]->shape[d] == 1 && out->shape[d] > 1;
        gs->direct[i] = fast && g->out[i] && !gqa && !broadcast;
        gs->grouped[i] = fast && g->out[i] && gqa && !broadcast && !(i == 1 && gs->f.has_rope);
    }
    gs->direct[3] = gs->grouped[3] = false;
}

/* Take the accumulators and the exact kernel's scratch from the arena; with
 * a measuring arena only count them. The fused kernel takes its own. */
static attn_status take_memory(grads *g, double **work, const attn_grad_slices *gs, attn_error *err) {
    const attn_slices *sl = &gs->f;
    int64_t words = attn_backward_work_size(sl->ck.shape[3], sl->cq.shape[4], sl->cv.shape[4]);
    if (words < 0)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the backward pass's scratch size overflows");
    bool fast = fast_applies(g, gs);
    *work = fast ? NULL : attn_arena_alloc(sl->arena, (size_t)words, sizeof(double));
    bool ok = fast || *work != NULL;
    for (int i = 0; i < 4; i++) {
        if (!g->out[i] || gs->direct[i] || gs->grouped[i]) continue;
        g->acc[i].data = attn_arena_alloc(sl->arena, (size_t)attn_tensor_numel(&g->acc[i]), sizeof(double));
        ok &= g->acc[i].data != NULL;
    }
    if (sl->arena->measure || ok) return ATTN_OK;
    return attn_fail(err, sl->arena->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                     "cannot allocate the backward pass's %lld bytes of scratch", (long long)words * 8);
}

/* gs's views of the gradients asked for: the caller's output where the
 * kernel writes it directly, else its f64 accumulator (whose memory
 * take_memory assigns later). */
static void bind_views(attn_grad_slices *gs, grads *g) {
    const attn_tensor **dst[4] = {&gs->dq, &gs->dk, &gs->dv, &gs->dmask};
    attn_canon *canon[4] = {&gs->cdq, &gs->cdk, &gs->cdv, &gs->cdm};
    for (int i = 0; i < 4; i++) {
        if (!g->out[i]) continue;
        *dst[i] = gs->direct[i] || gs->grouped[i] ? g->out[i] : &g->acc[i];
        *canon[i] = attn_canonical(*dst[i]);
    }
}

attn_status attn_backward_check_kv(const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o,
                                   attn_error *err) {
    if ((k && attn_dtype_quantized(k->dtype)) || (v && attn_dtype_quantized(v->dtype)))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; the backward pass takes float keys and values "
                         "(attn_dequantize widens quantized ones)", k && attn_dtype_quantized(k->dtype) ? "k" : "v",
                         attn_dtype_name(k && attn_dtype_quantized(k->dtype) ? k->dtype : v->dtype));
    /* Per-head scales belong to fp8 keys and values, which the backward
     * refuses above: set beside float ones, they are refused as the forward
     * refuses them, not ignored. */
    return attn_check_descale_dtype(o, k ? k->dtype : ATTN_F32, v ? v->dtype : ATTN_F32, err);
}

attn_status attn_backward_plan(attn_backward_call *c, attn_tensor *const grad[4], const attn_tensor *dout,
                               const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *o, int threads,
                               bool measuring, attn_error *err) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < 4; i++) c->g.out[i] = grad[i];
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out (the forward's output) is NULL");
    if (!lse) return attn_fail(err, ATTN_ERR_NULL, "lse (the forward's log-sum-exp) is NULL");
    attn_status st;
    if ((st = attn_backward_check_kv(k, v, o, err))) return st;
    /* The forward's plan, with out and lse as they were written. */
    if ((st = measuring ? attn_plan_shapes(&c->gs.f, (attn_tensor *)out, (attn_tensor *)lse, NULL, q, k, v, o, threads, err)
                        : attn_plan_call(&c->gs.f, (attn_tensor *)out, (attn_tensor *)lse, NULL, false, q, k, v, o, threads, err)) ||
        (st = check_grads(&c->g, dout, q, k, v, out, lse, o, measuring, err)))
        return st;
    c->gs.dout = dout, c->gs.cdo = attn_canonical(dout);
    c->gs.bf16 = o->compute == ATTN_COMPUTE_BF16;
    choose_direct(&c->gs, &c->g);
    bind_views(&c->gs, &c->g);
    return ATTN_OK;
}

bool attn_backward_fused(const attn_backward_call *c) { return fast_applies(&c->g, &c->gs); }

attn_status attn_backward_take(attn_backward_call *c, attn_arena *arena, attn_error *err) {
    c->gs.f.arena = arena;
    attn_status st;
    if ((st = take_memory(&c->g, &c->work, &c->gs, err)) || (st = attn_rope_prepare(&c->gs.f, &c->rope, err))) return st;
    for (int i = 0; i < 4 && !arena->measure; i++)
        if (c->g.out[i] && !c->gs.direct[i] && !c->gs.grouped[i])
            memset(c->g.acc[i].data, 0, sizeof(double) * (size_t)attn_tensor_numel(&c->g.acc[i]));
    return ATTN_OK;
}

void attn_backward_finish(attn_backward_call *c) {
    grads *g = &c->g;
    attn_grad_slices *gs = &c->gs;
    for (int64_t s = 0; !attn_backward_fused(c) && s < gs->f.count; s++) {
        attn_grad_problem p;
        attn_grad_slice(gs, s, &p);
        attn_backward_kernel(&p, c->work);
    }
    /* RoPE: the kernels differentiated the turned q and k; turn dq and dk back
     * (the rotation's transpose), once, where they were summed. */
    const attn_problem *b = &gs->f.base;
    for (int i = 0; i < 2 && b->rope; i++)
        if (g->out[i]) attn_rope_apply_tensor(gs->direct[i] ? g->out[i] : &g->acc[i], b->rope, i ? b->rope_k0 : b->rope_q0, -1);
    for (int i = 0; i < 4; i++)
        if (g->out[i] && !gs->direct[i] && !gs->grouped[i]) attn_tensor_convert(g->out[i], &g->acc[i], NULL); /* cannot fail */
}

/* The context's workspace apart from every tensor the call reads or writes
 * (attn_check_workspace), checked before the call writes into it. */
static attn_status check_workspace(const attn_context *c, attn_tensor *const grad[4], const attn_tensor *dout,
                                   const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                   const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *o,
                                   attn_error *err) {
    if (!c->workspace) return ATTN_OK;
    attn_named outs[4], ins[BACKWARD_INS];
    int n_ins = backward_tensors(outs, ins, grad, dout, q, k, v, out, lse, o);
    return attn_check_workspace(c->workspace, c->workspace_size, outs, 4, ins, n_ins, err);
}

/* Plan and check the call; with `bytes`, only measure its scratch, else run
 * it: its memory taken (accumulators zeroed), the fused kernel or the exact
 * one on every slice, then the gradients written out. shown_q (NULL: q):
 * the q the ATTN_VERBOSE line names, a 16-bit call's own where q is its f32
 * copy. */
static attn_status backward(size_t *bytes, attn_tensor *const grad[4], const attn_tensor *dout, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, const attn_tensor *out,
                            const attn_tensor *lse, const attn_sdpa_options *options, const attn_tensor *shown_q,
                            attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st) return st;
    attn_backward_call call;
    if ((st = attn_backward_plan(&call, grad, dout, q, k, v, out, lse, &o, c.num_threads, bytes != NULL, err))) return st;
    const attn_grad_slices *gs = &call.gs;
    bool fused = attn_backward_fused(&call);
    attn_arena measure = attn_arena_measuring(), arena = attn_arena_over(c.workspace, c.workspace_size);
    attn_run_info info = {"exact", "-", NULL, 1, 1, call.gs.f.count, 0, NULL, 1, NULL, 0, 0, NULL, 1, 0};
    if ((st = attn_backward_take(&call, &measure, err)) || (fused && (st = attn_flash_backward_run(gs, &info, err))))
        return st;
    size_t need = attn_arena_needed(&measure);
    if (bytes) {
        *bytes = need;
        return ATTN_OK;
    }
    if ((st = check_workspace(&c, grad, dout, q, k, v, out, lse, &o, err))) return st;
    if (c.workspace && need > c.workspace_size)
        return attn_fail(err, ATTN_ERR_WORKSPACE,
                         "the context's workspace has %zu bytes but this call needs %zu "
                         "(attn_sdpa_backward_workspace_size)", c.workspace_size, need);
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    if (!(st = attn_backward_take(&call, &arena, err)) && !(fused && (st = attn_flash_backward_run(gs, &info, err))))
        attn_backward_finish(&call);
    attn_arena_release(&arena);
    if (verbose) {
        attn_slices shown = call.gs.f;
        if (shown_q) shown.q = shown_q;
        attn_verbose_report("sdpa_backward", &info, &shown, &o, attn_now_ms() - t0);
    }
    return st;
}


/* The backward pass of a 16-bit q (attn_sdpa's 16-bit forward): q, out and
 * dout (q's dtype) are widened into f32 copies, the f32 backward runs on
 * them (k and v as they are), and each 16-bit gradient (dq in q's dtype, dk
 * and dv in k's and v's) is computed in f32 and rounded once into the
 * caller's; an f32 gradient (of f32 k, v or mask) is written directly. The
 * copies come from the workspace or malloc; with `bytes`, measured. */
static attn_status backward_half(size_t *bytes, attn_tensor *const grad[4], const attn_tensor *dout,
                                 const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *options,
                                 attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st) return st;
    const attn_tensor *in[3] = {dout, out, q}, *like[4] = {q, k, v, o.mask};
    static const char *const IN[3] = {"dout", "out", "q"}, *const NAME[4] = {"dq", "dk", "dv", "dmask"};
    for (int i = 0; i < 3; i++) {
        if (!in[i]) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", IN[i]);
        if ((st = attn_check_data(in[i], IN[i], bytes != NULL, err))) return st;
        if (in[i]->dtype != q->dtype)
            return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; with a %s q it must be %s too", IN[i],
                             attn_dtype_name(in[i]->dtype), attn_dtype_name(q->dtype), attn_dtype_name(q->dtype));
        if (in[i]->rank < 2 || in[i]->rank > ATTN_MAX_RANK || (st = attn_check_extent(in[i], IN[i], err)))
            return st ? st : attn_fail(err, ATTN_ERR_RANK, "%s has rank %d", IN[i], in[i]->rank);
    }
    for (int i = 0; i < 4; i++)
        if (grad[i] && ((st = attn_check_data(grad[i], NAME[i], bytes != NULL, err)) ||
                        grad[i]->rank < 1 || grad[i]->rank > ATTN_MAX_RANK))
            return st ? st : attn_fail(err, ATTN_ERR_RANK, "%s has a rank attention does not take", NAME[i]);
    /* A 16-bit gradient is rounded from its f32 copy, which is C order: the
     * f32 call checks only the copy, so the caller's own layout here (its
     * extent, and no stride 0 or folded rows that would keep one of several
     * results). */
    for (int i = 0; i < 3; i++)
        if (grad[i] && attn_dtype_half(grad[i]->dtype) &&
            ((st = attn_check_extent(grad[i], NAME[i], err)) || (st = attn_check_writable(grad[i], NAME[i], err))))
            return st;
    for (int i = 0; i < 4; i++) /* each gradient in its tensor's dtype, f32 for a mask */
        if (grad[i] && like[i] && grad[i]->dtype != (i == 3 ? ATTN_F32 : like[i]->dtype))
            return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be %s like %s", NAME[i],
                             attn_dtype_name(grad[i]->dtype), attn_dtype_name(i == 3 ? ATTN_F32 : like[i]->dtype),
                             i == 3 ? "the mask" : i ? (i == 1 ? "k" : "v") : "q");
    if ((st = attn_check_half_kv(q, k, v, err))) return st;
    attn_named outs[4], ins[BACKWARD_INS];
    if ((st = attn_check_no_overlap(outs, 4, ins, backward_tensors(outs, ins, grad, dout, q, k, v, out, lse, &o), err)) ||
        (!bytes && (st = check_workspace(&c, grad, dout, q, k, v, out, lse, &o, err))))
        return st;
    if (!bytes && c.workspace) { /* the whole call's figure, as for an f32 q, not the f32 call's share of it */
        size_t need = 0;
        if ((st = backward_half(&need, grad, dout, q, k, v, out, lse, options, err))) return st;
        if (need > c.workspace_size)
            return attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace has %zu bytes but this call needs %zu "
                             "(attn_sdpa_backward_workspace_size)", c.workspace_size, need);
    }
    attn_arena arena = bytes ? attn_arena_measuring() : attn_arena_over(c.workspace, c.workspace_size);
    attn_tensor wide[3], gw[4];
    attn_tensor *inner[4] = {NULL, NULL, NULL, grad[3]};
    bool ok = true;
    for (int i = 0; i < 3; i++) ok = ok && attn_arena_f32_like(&arena, &wide[i], in[i]);
    for (int i = 0; i < 3 && ok; i++) {
        if (!grad[i]) continue;
        if (attn_dtype_half(grad[i]->dtype)) ok = attn_arena_f32_like(&arena, &gw[i], grad[i]), inner[i] = &gw[i];
        else inner[i] = grad[i];
    }
    if (!ok) {
        for (int i = 0; i < 3; i++)
            for (int d = 0; d < in[i]->rank; d++)
                if (in[i]->shape[d] < 1) {
                    attn_arena_release(&arena);
                    return attn_fail(err, ATTN_ERR_SHAPE, "%s has a dimension below 1", IN[i]);
                }
        return attn_arena_fail(&arena, "the f32 copies of q, out, dout and the 16-bit gradients",
                               "attn_sdpa_backward_workspace_size", err);
    }
    attn_context rest = attn_arena_rest(&arena, &c);
    o.context = &rest;
    for (int i = 0; i < 3 && !bytes; i++) attn_tensor_convert(&wide[i], in[i], NULL); /* exact */
    size_t need = 0;
    st = backward(bytes ? &need : NULL, inner, &wide[0], &wide[2], k, v, &wide[1], lse, &o, q, err);
    if (!st && bytes) *bytes = attn_arena_needed(&arena) + need;
    for (int i = 0; i < 3 && !st && !bytes; i++)
        if (grad[i] && inner[i] != grad[i]) attn_tensor_convert(grad[i], &gw[i], NULL); /* the one rounding */
    attn_arena_release(&arena);
    return st;
}

static attn_status empty_backward(bool *empty, size_t *bytes, attn_tensor *const grad[4], const attn_tensor *dout,
                                  const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *options,
                                  attn_error *err);

/* The backward pass, through f32 copies for a 16-bit q (backward_half). */
static attn_status backward_call(size_t *bytes, attn_tensor *const grad[4], const attn_tensor *dout,
                                 const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *options,
                                 attn_error *err) {
    bool empty = false;
    attn_status st = empty_backward(&empty, bytes, grad, dout, q, k, v, out, lse, options, err);
    if (st || empty) return st;
    if (q && attn_dtype_half(q->dtype)) return backward_half(bytes, grad, dout, q, k, v, out, lse, options, err);
    return backward(bytes, grad, dout, q, k, v, out, lse, options, NULL, err);
}

/* A call with a dimension of 0 (empty.c; no queries, no keys, a batch of
 * 0): *empty says whether it is one, checked as the same call with each 0
 * read as 1 (measured, reading no element), and then done: the forward's
 * out is 0 or has no element, whatever q, k, v and the mask hold, so every
 * gradient that has an element is 0 (PyTorch's autograd gives the same). */
static attn_status empty_backward(bool *empty, size_t *bytes, attn_tensor *const grad[4], const attn_tensor *dout,
                                  const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const attn_tensor *out, const attn_tensor *lse, const attn_sdpa_options *options,
                                  attn_error *err) {
    *empty = false;
    if (!q || !k || !v || !out || !dout) return ATTN_OK; /* the usual checks say which */
    double t0 = attn_verbose_on() ? attn_now_ms() : 0;
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st) return st;
    attn_empty_arg all[11] = {{q, "q", ATTN_PART_Q, NULL, {0}},        {k, "k", ATTN_PART_KV, NULL, {0}},
                              {v, "v", ATTN_PART_KV, NULL, {0}},       {o.mask, "mask", ATTN_PART_MASK, NULL, {0}},
                              {out, "out", ATTN_PART_OUT, NULL, {0}},  {dout, "dout", ATTN_PART_OUT, NULL, {0}},
                              {lse, "lse", ATTN_PART_LSE, NULL, {0}},  {grad[0], "dq", ATTN_PART_Q, q, {0}},
                              {grad[1], "dk", ATTN_PART_KV, k, {0}},   {grad[2], "dv", ATTN_PART_KV, v, {0}},
                              {grad[3], "dmask", ATTN_PART_MASK, o.mask, {0}}};
    attn_empty e;
    if ((st = attn_empty_check(&e, all, 11, err)) || !e.any) return st;
    attn_sdpa_options with_ones = o; /* o keeps the caller's mask, for the verbose line */
    if (o.mask) with_ones.mask = &all[3].one;
    attn_tensor *ones[4];
    for (int i = 0; i < 4; i++) ones[i] = grad[i] ? &all[7 + i].one : NULL;
    size_t need = 0;
    st = backward_call(&need, ones, &all[5].one, &all[0].one, &all[1].one, &all[2].one, &all[4].one,
                       lse ? &all[6].one : NULL, &with_ones, err);
    if (st) return st;
    if (!bytes && (st = attn_empty_data(all, 11, err))) return st;
    *empty = true;
    if (bytes) {
        *bytes = 0;
        return ATTN_OK;
    }
    for (int i = 0; i < 4; i++)
        if (grad[i]) attn_fill(grad[i], 0.0);
    attn_empty_report("sdpa_backward", q, k, v, lse, NULL, NULL, NULL, &o, t0);
    return ATTN_OK;
}

attn_status attn_sdpa_backward(attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, attn_tensor *dmask,
                               const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                               const attn_sdpa_options *options, attn_error *err) {
    attn_tensor *const grad[4] = {dq, dk, dv, dmask};
    return backward_call(NULL, grad, dout, q, k, v, out, lse, options, err);
}

attn_status attn_sdpa_backward_workspace_size(size_t *bytes, attn_tensor *dq, attn_tensor *dk,
                                              attn_tensor *dv, attn_tensor *dmask, const attn_tensor *dout,
                                              const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v, const attn_tensor *out,
                                              const attn_tensor *lse, const attn_sdpa_options *options,
                                              attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    attn_tensor *const grad[4] = {dq, dk, dv, dmask};
    return backward_call(bytes, grad, dout, q, k, v, out, lse, options, err);
}
