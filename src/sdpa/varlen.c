/* varlen.c -- ragged batches: attn_sdpa_varlen and attn_sdpa_varlen_paged
 * (the keys and values of each sequence in pages), attn_sdpa_varlen_backward
 * and its workspace size, and the batch planned once for every layer that
 * sdpa_plan.c runs (attn_varlen_plan_*, the last section).
 *
 * q, k and v hold the sequences of a batch one after another along their
 * first dimension, (total, H, E), and cu_seqlens_q / cu_seqlens_k say where
 * each starts. Sequence b is the call attn_sdpa would get for it alone: the
 * rows cu[b] .. cu[b+1]-1 seen as (H, n, E) tensors (no copy), its own mask,
 * and dropout keyed by dropout_seed + b. Each sequence is planned by the
 * very plan attn_sdpa uses (plan.c), and runs on the very kernel attn_sdpa
 * would choose for it, so its results are bitwise those of attn_sdpa.
 *
 * Balance: the sequences the flash kernel takes run as one job
 * (attn_flash_run_calls): every query block of every sequence is a work
 * item, the costliest first, handed out to the threads as they come free,
 * so one long sequence among many short ones keeps every core busy. The
 * decode kernel (a few queries against many keys) splits each of its
 * sequences over the keys by itself; the f64 kernel runs slice by slice,
 * as attn_sdpa runs it.
 *
 * The backward pass plans every sequence as attn_sdpa_backward would
 * (attn_backward_plan) once all have been checked; the sequences the fused
 * f32 kernel takes then run as one job of work items
 * (attn_flash_backward_run_calls), the f64 ones slice by slice on the exact
 * kernel. */
#include "sdpa/sdpa.h"
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/rope.h"

#include <stdio.h>

/* How a sequence is computed. */
enum { SEQ_NONE, SEQ_EMPTY, SEQ_FLASH, SEQ_DECODE, SEQ_EXACT };

/* One sequence of the batch: its views of the packed tensors, its plan. */
typedef struct seq {
    attn_slices sl;
    attn_tensor q, k, v, out, lse;
    attn_tensor kd, vd; /* its row of the per-head fp8 scales (options k_descale, v_descale) */
    attn_rope_plan rope;
    int route; /* SEQ_NONE: no queries; SEQ_EMPTY: queries but no keys (out 0) */
} seq;

/* One sequence of a backward batch that has queries and keys: its views
 * of the packed tensors, its backward call (backward.c). */
typedef struct bseq {
    attn_tensor q, k, v, out, lse, dout, grad[3];
    attn_backward_call call;
    int64_t b; /* which sequence of the batch */
} bseq;

/* Rows r0 .. r0+n-1 of a packed (T, H, X) tensor as the (H, n, X) tensor
 * attn_sdpa takes, or of a packed (T, H) lse as (H, n). */
static void seq_view(attn_tensor *dst, const attn_tensor *t, int64_t r0, int64_t n) {
    *dst = *t; /* NULL data (a measuring call's) stays NULL: no offset from NULL */
    if (t->data) dst->data = (char *)t->data + r0 * t->strides[0] * attn_stride_unit(t->dtype);
    dst->shape[0] = t->shape[1], dst->strides[0] = t->strides[1];
    dst->shape[1] = n, dst->strides[1] = t->strides[0];
}

/* The message of a failure in sequence b, prefixed with which one. */
static attn_status in_sequence(attn_status st, int64_t b, attn_error *err) {
    if (st && err) { /* the message moved right, cut at the buffer's end */
        char prefix[48];
        size_t n = (size_t)snprintf(prefix, sizeof prefix, "sequence %lld: ", (long long)b);
        size_t len = strlen(err->message), room = sizeof err->message - 1 - n;
        len = len < room ? len : room;
        memmove(err->message + n, err->message, len);
        memcpy(err->message, prefix, n);
        err->message[n + len] = 0;
    }
    return st;
}

/* The bytes of B + 1 checked offsets as a tensor (8-byte elements, as
 * int64), for the overlap check: the offsets are read again after the
 * kernels have written (the rows of sequences without keys or queries), so
 * an output over them would send those writes anywhere. */
static attn_tensor offsets_bytes(const int64_t *cu, int64_t batch) {
    attn_tensor t;
    int64_t n[1] = {batch + 1}; /* fits: the array holds that many */
    attn_tensor_init(&t, (void *)(uintptr_t)cu, ATTN_F64, 1, n, NULL, NULL);
    return t;
}

/* A packed tensor: rank 3, one of the dtypes `ok` allows, H and X >= 1
 * (T may be 0), data unless it is empty (or the call only measures:
 * attn_check_data), offsets that fit. */
static attn_status check_packed(const attn_tensor *t, const char *name, bool measuring, attn_error *err) {
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    if (t->rank != 3)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; packed sequences are (total, heads, size)", name, t->rank);
    if (t->shape[0] < 0 || t->shape[1] < 1 || t->shape[2] < 1)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape (%lld, %lld, %lld); heads and size must be >= 1", name,
                         (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2]);
    if (!t->data && !measuring && t->shape[0] > 0)
        return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    return attn_check_extent(t, name, err);
}

/* An output of exactly `want`'s first `rank` dimensions, q's dtype, and no
 * stride 0 in a dimension of size > 1 unless it has no rows (nothing is
 * written to it; NumPy gives an empty array strides of 0). `written` false:
 * a tensor the backward reads (out, lse, dout), shaped like an output but
 * taking any strides, 0 too, as attn_sdpa_backward takes them. `measuring`:
 * NULL data allowed (attn_check_data). */
static attn_status check_packed_out(const attn_tensor *t, const char *name, int rank, const int64_t *want,
                                    attn_dtype dtype, bool written, bool measuring, attn_error *err) {
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    if (t->rank != rank) return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be %d", name, t->rank, rank);
    if (t->dtype != dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but q is %s; they must match", name, attn_dtype_name(t->dtype),
                         attn_dtype_name(dtype));
    for (int d = 0; d < rank; d++)
        if (t->shape[d] != want[d]) {
            char got[128], exp[128];
            attn_format_shape(got, sizeof got, rank, t->shape);
            attn_format_shape(exp, sizeof exp, rank, want);
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s but it must be %s", name, got, exp);
        }
    attn_status st = written ? attn_check_writable(t, name, err) : ATTN_OK;
    if (st) return st;
    if (!t->data && !measuring && t->shape[0] > 0) return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    return attn_check_extent(t, name, err);
}

/* Where a batch's keys and values are: packed tensors with their offsets,
 * or (pages not NULL) one paged pool view per sequence, pages[b] of
 * sequence b (base/rows.h). */
typedef struct batch_kv {
    const attn_tensor *k, *v;
    const int64_t *cu_k;
    const attn_paged_rows *k_pages, *v_pages;
} batch_kv;

/* A 16-bit q (f16 or bf16): its out is in its own dtype, its lse f32, and
 * the batch runs through f32 copies (forward_half). */
static attn_dtype lse_dtype(const attn_tensor *q) { return attn_dtype_half(q->dtype) ? ATTN_F32 : q->dtype; }

/* The options a ragged batch takes, beside its packed q (checked): the
 * sinks here too, for the batch, so that one whose sequences are all empty
 * obeys them as one with rows does (forward and backward alike). */
static attn_status check_batch_options(const attn_sdpa_options *o, const attn_tensor *q, attn_error *err) {
    attn_status st = attn_check_options(o, lse_dtype(q), q->shape[1], q->shape[2], err);
    if (st) return st;
    if (o->mask)
        return attn_fail(err, ATTN_ERR_OPTION, "options->mask is set; a ragged batch takes one mask per sequence (masks)");
    if (o->query_start || o->key_start || o->total_queries || o->total_keys)
        return attn_fail(err, ATTN_ERR_OPTION, "a ragged batch is not taken in pieces (query_start, key_start, totals)");
    return o->sinks ? attn_check_per_head(o->sinks, "sinks", q->shape[1], err) : ATTN_OK;
}

/* A ragged batch's per-head fp8 scales: for e4m3 / e5m2 keys (values),
 * (batch, Hk) or (Hk,), every value finite and > 0. */
static attn_status check_batch_descale(const attn_sdpa_options *o, attn_dtype kdt, attn_dtype vdt, int64_t batch,
                                       int64_t Hk, attn_error *err) {
    attn_status st = attn_check_descale_dtype(o, kdt, vdt, err);
    const attn_tensor *t[2] = {o->k_descale, o->v_descale};
    const int64_t kv[3] = {1, batch, Hk};
    for (int i = 0; i < 2 && !st; i++) {
        if (!t[i]) continue;
        const char *name = i ? "v_descale" : "k_descale";
        if (t[i]->rank > 2 || (t[i]->rank == 2 && t[i]->shape[0] != batch))
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has rank %d; a ragged batch takes (batch, Hk) = (%lld, %lld) or "
                             "(Hk,)", name, t[i]->rank, (long long)batch, (long long)Hk);
        st = attn_check_descale(t[i], name, kv, NULL, err);
    }
    return st;
}

/* Sequence b's row of a checked ragged batch's scale t ((batch, Hk) or
 * (Hk,)), as the (Hk,) tensor its plan takes. */
static void descale_row(attn_tensor *dst, const attn_tensor *t, int64_t b) {
    *dst = *t;
    if (t->rank == 1) return;
    dst->data = (char *)t->data + b * t->strides[0] * (int64_t)attn_dtype_size(t->dtype);
    dst->rank = 1, dst->shape[0] = t->shape[1], dst->strides[0] = t->strides[1];
}

/* What the whole batch must satisfy before any sequence is planned: q, k,
 * v packed alike, the offsets, options a ragged batch takes. */
static attn_status check_batch(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const int64_t *cu_q, const int64_t *cu_k, int64_t batch, const attn_sdpa_options *o,
                               bool measuring, attn_error *err) {
    attn_status st;
    if ((st = check_packed(q, "q", measuring, err)) || (st = check_packed(k, "k", measuring, err)) ||
        (st = check_packed(v, "v", measuring, err)))
        return st;
    if (k->shape[0] != v->shape[0])
        return attn_fail(err, ATTN_ERR_SHAPE, "k has %lld row%s but v has %lld; they must match", (long long)k->shape[0],
                         attn_plural(k->shape[0]), (long long)v->shape[0]);
    /* What attn_sdpa's plan checks of every sequence, checked once for
     * the batch, so that a batch whose sequences are all empty obeys it too. */
    if (q->dtype != ATTN_F32 && q->dtype != ATTN_F64 && !attn_dtype_half(q->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; it must be f32, f64, f16 or bf16", attn_dtype_name(q->dtype));
    const attn_tensor *kv[2] = {k, v};
    for (int t = 0; t < 2; t++) { /* a 16-bit q computes as an f32 one: k and v as they would be with it */
        bool half = attn_dtype_half(kv[t]->dtype) || attn_dtype_quantized(kv[t]->dtype);
        bool f32 = q->dtype == ATTN_F32 || attn_dtype_half(q->dtype);
        if (kv[t]->dtype != q->dtype && !((half || kv[t]->dtype == ATTN_F32) && f32) &&
            !(half && q->dtype == ATTN_F32))
            return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but q is %s; it must be q's dtype (or f16, bf16 or quantized "
                             "with f32 q; f32, f16, bf16 or quantized with a 16-bit q)",
                             t ? "v" : "k", attn_dtype_name(kv[t]->dtype), attn_dtype_name(q->dtype));
    }
    if (k->shape[2] != q->shape[2])
        return attn_fail(err, ATTN_ERR_SHAPE, "k has E=%lld but q has E=%lld (their last dimensions must match)",
                         (long long)k->shape[2], (long long)q->shape[2]);
    if (v->shape[1] != k->shape[1] || q->shape[1] % k->shape[1] != 0)
        return attn_fail(err, ATTN_ERR_HEADS, "q, k and v have %lld, %lld and %lld heads; k and v must match and divide q's",
                         (long long)q->shape[1], (long long)k->shape[1], (long long)v->shape[1]);
    if ((st = check_batch_options(o, q, err))) return st;
    if ((st = attn_check_cu_seqlens(cu_q, batch, q->shape[0], "cu_seqlens_q", err)) ||
        (st = attn_check_cu_seqlens(cu_k, batch, k->shape[0], "cu_seqlens_k", err)))
        return st;
    return ATTN_OK;
}

/* The outputs and the caller's workspace (ws_bytes bytes at ws; NULL:
 * none) against the masks the call reads: masks[b] only where sequence b
 * has queries (cu_q) and keys (k_rows[b].length for a paged batch, else
 * cu_k). The mask of a sequence without either is never read (attn.h), so
 * where it lies does not matter. */
static attn_status check_masks_apart(const attn_named *outs, int n_outs, const void *ws, size_t ws_bytes,
                                     const attn_tensor *const *masks, const int64_t *cu_q, const int64_t *cu_k,
                                     const attn_paged_rows *k_rows, int64_t batch, attn_error *err) {
    for (int64_t b = 0; masks && b < batch; b++) {
        int64_t L = cu_q[b + 1] - cu_q[b], S = k_rows ? k_rows[b].length : cu_k[b + 1] - cu_k[b];
        const attn_named mask = {masks[b], "a sequence's mask"};
        attn_status st = ATTN_OK;
        if (L > 0 && S > 0 && !(st = attn_check_no_overlap(outs, n_outs, &mask, 1, err)))
            st = attn_check_workspace(ws, ws_bytes, NULL, 0, &mask, 1, err);
        if (st) return in_sequence(st, b, err);
    }
    return ATTN_OK;
}

/* The options of sequence b: its mask, its dropout key. */
static attn_sdpa_options seq_options(const attn_sdpa_options *o, const attn_tensor *const *masks, int64_t b) {
    attn_sdpa_options ob = *o;
    ob.mask = masks ? masks[b] : NULL;
    ob.dropout_seed = o->dropout_seed + (uint64_t)b; /* wraps: unsigned */
    return ob;
}

/* Every sequence planned into seqs (its flash calls listed in flash[],
 * *n_flash of them, its decode calls in decode[]), nothing run. */
static attn_status plan_batch(seq *seqs, const attn_slices **flash, int64_t *n_flash, const attn_slices **decode,
                              int64_t *n_decode, attn_tensor *out,
                              attn_tensor *lse, const attn_tensor *q, const batch_kv *kv, const int64_t *cu_q,
                              int64_t batch, const attn_tensor *const *masks, const attn_sdpa_options *o, int threads,
                              attn_arena *arena, attn_error *err) {
    *n_flash = *n_decode = 0;
    for (int64_t b = 0; b < batch; b++) {
        seq *s = &seqs[b];
        int64_t L = cu_q[b + 1] - cu_q[b], S = kv->k_pages ? kv->k_pages[b].length : kv->cu_k[b + 1] - kv->cu_k[b];
        memset(s, 0, sizeof *s);
        s->route = L == 0 ? SEQ_NONE : S == 0 ? SEQ_EMPTY : SEQ_FLASH;
        if (s->route != SEQ_FLASH) continue;
        seq_view(&s->q, q, cu_q[b], L);
        if (kv->k_pages) { /* stand-ins of the shapes, as attn_sdpa_paged makes them */
            attn_paged_rows_shapes(&s->k, &s->v, &kv->k_pages[b], &kv->v_pages[b]);
        } else {
            seq_view(&s->k, kv->k, kv->cu_k[b], S), seq_view(&s->v, kv->v, kv->cu_k[b], S);
        }
        seq_view(&s->out, out, cu_q[b], L);
        if (lse) seq_view(&s->lse, lse, cu_q[b], L), s->lse.rank = 2;
        attn_sdpa_options ob = seq_options(o, masks, b);
        if (o->k_descale) descale_row(&s->kd, o->k_descale, b), ob.k_descale = &s->kd;
        if (o->v_descale) descale_row(&s->vd, o->v_descale, b), ob.v_descale = &s->vd;
        attn_status st = attn_plan_call(&s->sl, &s->out, lse ? &s->lse : NULL, NULL, false, &s->q, &s->k, &s->v, &ob,
                                        threads, err);
        if (st) return in_sequence(st, b, err);
        s->sl.arena = arena;
        if (kv->k_pages) s->sl.k_pages = &kv->k_pages[b], s->sl.v_pages = &kv->v_pages[b];
        /* attn_sdpa's choice of kernel (sdpa.c's run_kernel), for this sequence */
        if (q->dtype != ATTN_F32) s->route = SEQ_EXACT;
        else if (attn_decode_chunk_of(&s->sl) > 0) s->route = SEQ_DECODE, decode[(*n_decode)++] = &s->sl;
        else flash[(*n_flash)++] = &s->sl;
    }
    return ATTN_OK;
}

/* Run (or, on a measuring arena, measure) every planned sequence. */
static attn_status run_batch(seq *seqs, const attn_slices **flash, int64_t n_flash, const attn_slices **decode,
                             int64_t n_decode, int64_t batch, int64_t E,
                             int64_t Ev, const attn_sdpa_options *o, attn_arena *arena, attn_run_info *info,
                             attn_error *err) {
    attn_status st;
    for (int64_t b = 0; b < batch; b++) {
        seqs[b].sl.arena = arena;
        if (seqs[b].route >= SEQ_FLASH && (st = attn_rope_prepare(&seqs[b].sl, &seqs[b].rope, err)))
            return in_sequence(st, b, err);
    }
    *info = (attn_run_info){"none", "-", NULL, 1, 1, 0, 0, NULL, 1, NULL, 0, 0, NULL, 1, 0};
    if (n_flash > 0 && (st = attn_flash_run_calls(flash, n_flash, o->compute == ATTN_COMPUTE_BF16, info, err))) return st;
    /* The decode sequences as one job: their splits (each the one it gets
     * alone) scheduled together, so that many short contexts and a few long
     * ones keep every core busy. */
    if (n_decode > 0) {
        attn_run_info d;
        if ((st = attn_decode_run_calls(decode, n_decode, &d, err))) return st;
        if (!arena->measure && info->kernel[0] == 'n') *info = d;
        else info->items += d.items, info->fallbacks += d.fallbacks, info->side_by_side = d.side_by_side,
             info->pages_per_call = d.pages_per_call, info->heads_per_call = d.heads_per_call, info->rows = d.rows;
    }
    /* The f64 kernel's scratch, once for every sequence that takes it. */
    double *work = NULL;
    bool any_exact = false;
    for (int64_t b = 0; b < batch; b++) any_exact |= seqs[b].route == SEQ_EXACT;
    if (any_exact) {
        int64_t words = attn_stream_work_size(E, Ev);
        if (words < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "the exact kernel's scratch size overflows");
        work = attn_arena_alloc(arena, (size_t)words, sizeof(double));
        if (!work && !arena->measure)
            return attn_fail(err, arena->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                             "cannot allocate the exact kernel's scratch");
    }
    for (int64_t b = 0; b < batch; b++) {
        seq *s = &seqs[b];
        if (s->route == SEQ_EXACT && !arena->measure) {
            for (int64_t i = 0; i < s->sl.count; i++) {
                attn_problem p;
                attn_slice(&s->sl, i, &p);
                attn_stream_kernel(&p, work);
            }
            if (info->kernel[0] == 'n') info->kernel = "exact";
            info->items += s->sl.count;
        }
    }
    for (int64_t b = 0; b < batch && !arena->measure; b++) /* fp8 values' per-head scales */
        if (seqs[b].route >= SEQ_FLASH) attn_descale_out(&seqs[b].sl);
    return ATTN_OK;
}

/* The rows of sequences with queries but no keys: out 0, lse that of a row
 * no key takes part in (the sink's logit, or -inf), as attn_sdpa gives a
 * call without keys (empty.c). */
static void write_empty(const seq *seqs, attn_tensor *out, attn_tensor *lse, const int64_t *cu_q, int64_t batch,
                        const attn_sdpa_options *o) {
    for (int64_t b = 0; b < batch; b++) {
        if (seqs[b].route != SEQ_EMPTY) continue;
        attn_tensor ob, lb;
        int64_t L = cu_q[b + 1] - cu_q[b];
        seq_view(&ob, out, cu_q[b], L);
        if (lse) seq_view(&lb, lse, cu_q[b], L), lb.rank = 2;
        attn_write_no_keys(&ob, lse ? &lb : NULL, o->sinks);
    }
}

/* The ATTN_VERBOSE line of a batch's call, t0 its start (attn_now_ms). */
static void report(const char *call, const seq *seqs, int64_t batch, const attn_tensor *lse, const attn_tensor *q,
                   const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o, const attn_run_info *info,
                   double t0) {
    attn_slices shown; /* the packed tensors, for the line */
    memset(&shown, 0, sizeof shown);
    shown.q = q, shown.k = k, shown.v = v, shown.lse = lse;
    for (int64_t b = 0; b < batch; b++)
        if (seqs[b].route >= SEQ_FLASH) {
            shown.has_rope = seqs[b].sl.has_rope, shown.rope = seqs[b].sl.rope;
            if (!shown.k) /* pages: a sequence's stand-ins, and its pages' dtype */
                shown.k = seqs[b].sl.k, shown.v = seqs[b].sl.v, shown.k_pages = seqs[b].sl.k_pages,
                shown.v_pages = seqs[b].sl.v_pages;
        }
    attn_verbose_report(call, info, &shown, o, attn_now_ms() - t0);
}

/* The batch planned and run, its inputs checked: the plans from the arena
 * (a workspace's front), a measuring pass first with a workspace, then the
 * kernels, then the rows of sequences without keys. `front`: bytes of the
 * caller's workspace taken before c's (a 16-bit q's copies), counted in a
 * too small workspace's message, so that it names the caller's figures.
 * shown_q (NULL: q): the q the ATTN_VERBOSE line names, a 16-bit call's
 * own where q is its f32 copy. */
static attn_status varlen_forward(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const batch_kv *kv,
                                  const int64_t *cu_q, int64_t batch, const attn_tensor *const *masks,
                                  const attn_sdpa_options *o, const attn_context *c, int64_t Ev, size_t front,
                                  const attn_tensor *shown_q, attn_error *err) {
    attn_status st;
    attn_arena arena = attn_arena_over(c->workspace, c->workspace_size);
    size_t n = batch > 0 ? (size_t)batch : 1;
    if ((uint64_t)n > SIZE_MAX / (sizeof(seq) + 2 * sizeof(attn_slices *)))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%lld sequences' plans overflow", (long long)batch);
    seq *seqs = attn_arena_alloc(&arena, n, sizeof(seq));
    const attn_slices **flash = attn_arena_alloc(&arena, n, sizeof *flash);
    const attn_slices **decode = attn_arena_alloc(&arena, n, sizeof *decode);
    if (!seqs || !flash || !decode) {
        attn_arena_release(&arena);
        return attn_fail(err, c->workspace ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the plans of %lld sequences (%zu bytes)", (long long)batch,
                         n * (sizeof(seq) + 2 * sizeof *flash));
    }
    int64_t n_flash, n_decode;
    attn_run_info info;
    st = plan_batch(seqs, flash, &n_flash, decode, &n_decode, out, lse, q, kv, cu_q, batch, masks, o, c->num_threads, &arena, err);
    /* The kernels' scratch, measured, is had before any of them runs: the
     * flash sequences write their rows before the decode ones take their
     * memory, so taking it as they go would leave rows written when a
     * later sequence's memory runs out. With a workspace, too small a one
     * fails here; without, the scratch is one block from malloc. */
    attn_arena m = attn_arena_measuring(), scratch = attn_arena_over(NULL, 0), *run_on = &arena;
    if (!st) st = run_batch(seqs, flash, n_flash, decode, n_decode, batch, q->shape[2], Ev, o, &m, &info, err);
    if (!st && c->workspace) {
        size_t need = arena.used + attn_arena_needed(&m);
        if (need > c->workspace_size)
            st = attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace has %zu bytes but this call needs %zu",
                           front + c->workspace_size, front + need);
    } else if (!st) {
        void *block = attn_arena_alloc(&arena, attn_arena_needed(&m), 1);
        if (!block)
            st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the kernels' scratch of %lld sequences (%zu bytes)",
                           (long long)batch, attn_arena_needed(&m));
        scratch = attn_arena_over(block, attn_arena_needed(&m)), run_on = &scratch;
    }
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    if (!st) st = run_batch(seqs, flash, n_flash, decode, n_decode, batch, q->shape[2], Ev, o, run_on, &info, err);
    if (!st) write_empty(seqs, out, lse, cu_q, batch, o);
    if (!st && verbose)
        report(kv->k_pages ? "sdpa_varlen_paged" : "sdpa_varlen", seqs, batch, lse, shown_q ? shown_q : q, kv->k, kv->v, o,
               &info, t0);
    attn_arena_release(&arena);
    return st;
}

/* The batch with a 16-bit q and out (f16 or bf16, the same), checked: q
 * widened (exactly) into an f32 copy, the batch run on it as for an f32 q
 * (lse, f32, written as it is), and the f32 out rounded once, to nearest
 * even, into out. The copies come from the front of the context's
 * workspace (or malloc), the kernels' scratch after them: as attn_sdpa
 * takes a 16-bit q. */
static attn_status forward_half(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const batch_kv *kv,
                                const int64_t *cu_q, int64_t batch, const attn_tensor *const *masks,
                                const attn_sdpa_options *o, const attn_context *c, int64_t Ev, attn_error *err) {
    int64_t sq[3] = {q->shape[0], q->shape[1], q->shape[2]}, so[3] = {q->shape[0], q->shape[1], Ev}, nq, no;
    if (!attn_mul_i64(sq[0] * sq[1], sq[2], &nq) || !attn_mul_i64(so[0] * so[1], Ev, &no))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the f32 copies of q and out overflow"); /* T·H fits: the extents were checked */
    attn_arena arena = attn_arena_over(c->workspace, c->workspace_size);
    attn_tensor q32, out32;
    attn_tensor_init(&q32, NULL, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&out32, NULL, ATTN_F32, 3, so, NULL, NULL);
    q32.data = attn_arena_alloc(&arena, (size_t)(nq > 0 ? nq : 1), sizeof(float));
    out32.data = attn_arena_alloc(&arena, (size_t)(no > 0 ? no : 1), sizeof(float));
    if (!q32.data || !out32.data)
        return attn_arena_fail(&arena, "the f32 copies of q and out",
                               "attn_sdpa_varlen_plan_init's workspace_bytes", err);
    attn_context rest = attn_arena_rest(&arena, c);
    if (nq > 0) attn_tensor_convert(&q32, q, NULL); /* exact */
    size_t front = c->workspace_size - rest.workspace_size; /* the copies and the alignment before them */
    attn_status st = varlen_forward(&out32, lse, &q32, kv, cu_q, batch, masks, o, &rest, Ev, front, q, err);
    if (!st && no > 0) attn_tensor_convert(out, &out32, NULL); /* the one rounding */
    attn_arena_release(&arena);
    return st;
}

/* Outputs against the inputs every call reads, and each sequence's mask
 * that is read (check_masks_apart; masks NULL: none); the context's
 * workspace (c NULL: none, a plan's checks) against all of them. */
static attn_status check_outputs(attn_tensor *out, attn_tensor *lse, const attn_named *ins, int n_ins,
                                 const attn_tensor *const *masks, const int64_t *cu_q, const int64_t *cu_k,
                                 const attn_paged_rows *k_rows, int64_t batch, const attn_context *c, attn_error *err) {
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    const void *ws = c ? c->workspace : NULL;
    size_t ws_bytes = c ? c->workspace_size : 0;
    attn_status st;
    if ((st = attn_check_no_overlap(outs, 2, ins, n_ins, err)) ||
        (st = attn_check_workspace(ws, ws_bytes, outs, 2, ins, n_ins, err)))
        return st;
    return check_masks_apart(outs, 2, ws, ws_bytes, masks, cu_q, cu_k, k_rows, batch, err);
}

/* Everything of attn_sdpa_varlen's arguments checked before any sequence
 * is planned (o as attn_options_read gives it). */
static attn_status check_varlen(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                                const attn_tensor *const *masks, const attn_sdpa_options *o, const attn_context *c,
                                attn_error *err) {
    attn_status st;
    if ((st = check_batch(q, k, v, cu_q, cu_k, batch, o, false, err))) return st;
    int64_t want_out[3] = {q->shape[0], q->shape[1], v->shape[2]};
    if ((st = check_packed_out(out, "out", 3, want_out, q->dtype, true, false, err)) ||
        (lse && (st = check_packed_out(lse, "lse", 2, want_out, lse_dtype(q), true, false, err))))
        return st;
    /* The plans check each sequence's views again; this covers the rows of
     * sequences no plan sees. */
    /* The scales too: a sequence's plan sees only its own row of them. */
    const attn_tensor cq = offsets_bytes(cu_q, batch), ck = offsets_bytes(cu_k, batch);
    attn_named ins[5 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}, {&cq, "cu_seqlens_q"}, {&ck, "cu_seqlens_k"}};
    int n_ins = attn_named_options(ins, 5, ATTN_NAMED_CAP(ins), o);
    if ((st = check_outputs(out, lse, ins, n_ins, masks, cu_q, cu_k, NULL, batch, c, err))) return st;
    return check_batch_descale(o, k->dtype, v->dtype, batch, k->shape[1], err);
}

attn_status attn_varlen_check(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                              const attn_tensor *const *masks, const attn_sdpa_options *o, attn_error *err) {
    return check_varlen(out, lse, q, k, v, cu_q, cu_k, batch, masks, o, NULL, err);
}

attn_status attn_sdpa_varlen(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                             int64_t batch, const attn_tensor *const *masks, const attn_sdpa_options *options,
                             attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st || (st = check_varlen(out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, batch, masks, &o, &c, err))) return st;
    batch_kv kv = {k, v, cu_seqlens_k, NULL, NULL};
    if (attn_dtype_half(q->dtype))
        return forward_half(out, lse, q, &kv, cu_seqlens_q, batch, masks, &o, &c, v->shape[2], err);
    return varlen_forward(out, lse, q, &kv, cu_seqlens_q, batch, masks, &o, &c, v->shape[2], 0, NULL, err);
}

/* Everything of attn_sdpa_varlen_paged's arguments checked (o as
 * attn_options_read gives it); *Ev the values' size. */
static attn_status check_paged(int64_t *Ev_out, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                               const int64_t *cu_seqlens_q, int64_t batch, const attn_paged_rows *k_pages,
                               const attn_paged_rows *v_pages, const attn_tensor *const *masks,
                               const attn_sdpa_options *o, const attn_context *c, attn_error *err) {
    attn_status st;
    if ((st = check_packed(q, "q", false, err)) || (st = check_batch_options(o, q, err)) ||
        (st = attn_check_cu_seqlens(cu_seqlens_q, batch, q->shape[0], "cu_seqlens_q", err)))
        return st;
    if (batch > 0 && (!k_pages || !v_pages)) return attn_fail(err, ATTN_ERR_NULL, "k_pages or v_pages is NULL");
    /* f64 q over f64 pages: each sequence's plan checks */
    if (q->dtype != ATTN_F32 && q->dtype != ATTN_F64 && !attn_dtype_half(q->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; pages take an f32, f16 or bf16 q (f64 q over f64 pages)",
                         attn_dtype_name(q->dtype));
    /* Every sequence's pools checked, and alike: one head count and row
     * sizes, E of q's. */
    int64_t Ev = out ? (out->rank == 3 ? out->shape[2] : 0) : 0;
    for (int64_t b = 0; b < batch; b++) {
        const attn_paged_rows *kp = &k_pages[b], *vp = &v_pages[b];
        if ((st = attn_paged_rows_check(kp, "k pages", err)) || (st = attn_paged_rows_check(vp, "v pages", err)))
            return in_sequence(st, b, err);
        if (kp->heads != vp->heads || kp->length != vp->length || kp->cols != q->shape[2] ||
            kp->heads != k_pages[0].heads || vp->cols != v_pages[0].cols)
            return in_sequence(attn_fail(err, ATTN_ERR_SHAPE,
                                         "k pages (%lld heads of %lld, length %lld) and v pages (%lld heads of %lld, "
                                         "length %lld) do not match each other, q's E=%lld or sequence 0's",
                                         (long long)kp->heads, (long long)kp->cols, (long long)kp->length,
                                         (long long)vp->heads, (long long)vp->cols, (long long)vp->length,
                                         (long long)q->shape[2]),
                               b, err);
        Ev = vp->cols;
    }
    int64_t want_out[3] = {q->shape[0], q->shape[1], Ev};
    if ((st = check_packed_out(out, "out", 3, want_out, q->dtype, true, false, err)) ||
        (lse && (st = check_packed_out(lse, "lse", 2, want_out, lse_dtype(q), true, false, err))))
        return st;
    const attn_tensor cq = offsets_bytes(cu_seqlens_q, batch);
    attn_named ins[2 + ATTN_OPTION_TENSORS] = {{q, "q"}, {&cq, "cu_seqlens_q"}};
    int n_ins = attn_named_options(ins, 2, ATTN_NAMED_CAP(ins), o);
    if ((st = check_outputs(out, lse, ins, n_ins, masks, cu_seqlens_q, NULL, k_pages, batch, c, err))) return st;
    for (int64_t b = 0; b < batch; b++) { /* and the pools' memory */
        attn_tensor pools[2];
        attn_paged_rows_pool(&pools[0], &k_pages[b]), attn_paged_rows_pool(&pools[1], &v_pages[b]);
        const attn_named pin[2] = {{&pools[0], "k pages"}, {&pools[1], "v pages"}};
        if ((st = check_outputs(out, lse, pin, 2, NULL, NULL, NULL, NULL, 0, c, err))) return in_sequence(st, b, err);
    }
    if (batch > 0 && (st = check_batch_descale(o, k_pages[0].dtype, v_pages[0].dtype, batch, k_pages[0].heads, err)))
        return st;
    *Ev_out = Ev;
    return ATTN_OK;
}

attn_status attn_sdpa_varlen_paged(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                   int64_t batch, const attn_paged_rows *k_pages, const attn_paged_rows *v_pages,
                                   const attn_tensor *const *masks, const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    int64_t Ev;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st || (st = check_paged(&Ev, out, lse, q, cu_seqlens_q, batch, k_pages, v_pages, masks, &o, &c, err))) return st;
    batch_kv kv = {NULL, NULL, NULL, k_pages, v_pages};
    if (attn_dtype_half(q->dtype)) return forward_half(out, lse, q, &kv, cu_seqlens_q, batch, masks, &o, &c, Ev, err);
    return varlen_forward(out, lse, q, &kv, cu_seqlens_q, batch, masks, &o, &c, Ev, 0, NULL, err);
}

/* The backward plans of the nb sequences that have queries and keys ([nb])
 * and the list of those the fused kernel runs ([nb]), from a: the one place
 * that takes them, so that the workspace's measure counts what the call
 * takes. None to plan takes nothing, so a batch that runs nothing needs no
 * workspace. False where a has no room (or only measures, which counts
 * them all the same). */
static bool take_plans(attn_arena *a, size_t nb, bseq **seqs, const attn_grad_slices ***fused) {
    *seqs = NULL, *fused = NULL;
    if (nb == 0) return true;
    *seqs = attn_arena_alloc(a, nb, sizeof **seqs);
    *fused = attn_arena_alloc(a, nb, sizeof **fused);
    return *seqs && *fused;
}

/* Everything of attn_sdpa_varlen_backward's arguments checked before any
 * sequence is planned (o and c as attn_options_read gives them), as
 * check_varlen checks the forward's. `measuring`: NULL data allowed
 * (attn_check_data). */
static attn_status check_varlen_backward(attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, const attn_tensor *dout,
                                         const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                         const attn_tensor *out, const attn_tensor *lse, const int64_t *cu_seqlens_q,
                                         const int64_t *cu_seqlens_k, int64_t batch, const attn_tensor *const *masks,
                                         const attn_sdpa_options *o, const attn_context *c, bool measuring,
                                         attn_error *err) {
    attn_status st;
    if ((st = check_batch(q, k, v, cu_seqlens_q, cu_seqlens_k, batch, o, measuring, err))) return st;
    if (attn_dtype_half(q->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; the ragged backward takes f32 or f64 q (attn_sdpa_backward "
                         "takes a 16-bit one)", attn_dtype_name(q->dtype));
    /* What each sequence's plan requires of the keys, values and scales,
     * for the batch: one with no sequence to plan obeys it too. */
    if ((st = attn_backward_check_kv(k, v, o, err))) return st;
    int64_t want_out[3] = {q->shape[0], q->shape[1], v->shape[2]};
    const attn_tensor *like[3] = {q, k, v};
    attn_tensor *grad[3] = {dq, dk, dv};
    static const char *const NAME[3] = {"dq", "dk", "dv"};
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out (the forward's output) is NULL");
    if (!lse) return attn_fail(err, ATTN_ERR_NULL, "lse (the forward's log-sum-exp) is NULL");
    if (!dq && !dk && !dv) return attn_fail(err, ATTN_ERR_NULL, "dq, dk and dv are all NULL; ask for one gradient at least");
    /* out, lse and dout as the forward wrote them (checked like outputs:
     * the same shapes, q's dtype), the gradients shaped like their inputs. */
    if ((st = check_packed_out(out, "out", 3, want_out, q->dtype, false, measuring, err)) ||
        (st = check_packed_out(lse, "lse", 2, want_out, q->dtype, false, measuring, err)) ||
        (st = check_packed_out(dout, "dout", 3, want_out, q->dtype, false, measuring, err)))
        return st;
    for (int t = 0; t < 3; t++)
        if (grad[t] && (st = check_packed_out(grad[t], NAME[t], 3, like[t]->shape, q->dtype, true, measuring, err)))
            return st;
    const attn_named outs[3] = {{dq, "dq"}, {dk, "dk"}, {dv, "dv"}};
    const attn_tensor cq = offsets_bytes(cu_seqlens_q, batch), ck = offsets_bytes(cu_seqlens_k, batch);
    attn_named ins[8 + ATTN_OPTION_TENSORS] = {{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "lse"},
                                               {&cq, "cu_seqlens_q"}, {&ck, "cu_seqlens_k"}};
    int n_ins = attn_named_options(ins, 8, ATTN_NAMED_CAP(ins), o);
    if ((st = attn_check_no_overlap(outs, 3, ins, n_ins, err)) ||
        (st = attn_check_workspace(c->workspace, c->workspace_size, outs, 3, ins, n_ins, err)))
        return st;
    return check_masks_apart(outs, 3, c->workspace, c->workspace_size, masks, cu_seqlens_q, cu_seqlens_k, NULL, batch,
                             err);
}

/* The gradients' rows no sequence's call wrote: queries without keys (dq
 * 0), keys without queries (dk, dv 0); as write_empty for the forward.
 * grad: dq, dk, dv (NULL: not asked for). */
static void write_unplanned(attn_tensor *const grad[3], const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                            int64_t batch) {
    for (int64_t b = 0; b < batch; b++) {
        int64_t L = cu_seqlens_q[b + 1] - cu_seqlens_q[b], S = cu_seqlens_k[b + 1] - cu_seqlens_k[b];
        if (L != 0 && S != 0) continue;
        for (int t = 0; t < 3; t++) {
            attn_tensor rows;
            if (!grad[t]) continue;
            seq_view(&rows, grad[t], t == 0 ? cu_seqlens_q[b] : cu_seqlens_k[b], t == 0 ? L : S);
            attn_fill(&rows, 0.0);
        }
    }
}

/* The ATTN_VERBOSE line of a backward batch, t0 its start (attn_now_ms);
 * as report for the forward. */
static void report_backward(const bseq *seqs, int64_t n_planned, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_tensor *lse, const attn_sdpa_options *o,
                            const attn_run_info *info, double t0) {
    attn_slices shown; /* the packed tensors, for the line */
    memset(&shown, 0, sizeof shown);
    shown.q = q, shown.k = k, shown.v = v, shown.lse = lse;
    for (int64_t i = 0; i < n_planned; i++)
        shown.has_rope = seqs[i].call.gs.f.has_rope, shown.rope = seqs[i].call.gs.f.rope;
    attn_verbose_report("sdpa_varlen_backward", info, &shown, o, attn_now_ms() - t0);
}

/* attn_sdpa_varlen_backward, or with `bytes` the workspace it needs: the
 * same checks and plans, then the plans' and the kernels' scratch
 * measured (the call measures too, with a workspace, before taking it).
 * The plans must exist to be measured, so a measuring call keeps them in
 * malloc's memory. */
static attn_status varlen_backward(size_t *bytes, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                   const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                                   const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                   const attn_tensor *const *masks, const attn_sdpa_options *options,
                                   attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    bool measuring = bytes != NULL; /* tensors may have NULL data (attn_check_data) */
    if (st || (st = check_varlen_backward(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, batch, masks,
                                          &o, &c, measuring, err)))
        return st;
    attn_tensor *grad[3] = {dq, dk, dv};
    /* Every sequence planned and checked, then all of their scratch taken
     * (and, with a workspace, measured against it first), then the fused
     * kernel's items of every sequence run as one job: nothing is written
     * unless every sequence passed and all memory was had. */
    bool in_workspace = c.workspace && !bytes;
    attn_arena arena = attn_arena_over(in_workspace ? c.workspace : NULL, in_workspace ? c.workspace_size : 0);
    /* A plan for each sequence with queries and keys; the others run
     * nothing, only have their rows zeroed at the end. */
    int64_t n_planned = 0;
    for (int64_t b = 0; b < batch; b++)
        n_planned += cu_seqlens_q[b + 1] > cu_seqlens_q[b] && cu_seqlens_k[b + 1] > cu_seqlens_k[b];
    size_t nb = (size_t)n_planned;
    if ((uint64_t)nb > SIZE_MAX / (sizeof(bseq) + sizeof(attn_grad_slices *)))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%lld sequences' plans overflow", (long long)n_planned);
    bseq *seqs;
    const attn_grad_slices **fused;
    if (!take_plans(&arena, nb, &seqs, &fused)) {
        attn_arena_release(&arena);
        if (in_workspace)
            return attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace of %zu bytes cannot hold the backward "
                             "plans of %lld sequences (attn_sdpa_varlen_backward_workspace_size)", c.workspace_size,
                             (long long)n_planned);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the backward plans of %lld sequences (%zu bytes)",
                         (long long)n_planned, nb * (sizeof(bseq) + sizeof *fused));
    }
    int64_t n_fused = 0, at = 0;
    for (int64_t b = 0; b < batch && !st; b++) {
        int64_t L = cu_seqlens_q[b + 1] - cu_seqlens_q[b], S = cu_seqlens_k[b + 1] - cu_seqlens_k[b];
        if (L == 0 || S == 0) continue;
        bseq *s = &seqs[at++];
        s->b = b;
        seq_view(&s->q, q, cu_seqlens_q[b], L), seq_view(&s->k, k, cu_seqlens_k[b], S), seq_view(&s->v, v, cu_seqlens_k[b], S);
        seq_view(&s->out, out, cu_seqlens_q[b], L), seq_view(&s->lse, lse, cu_seqlens_q[b], L);
        seq_view(&s->dout, dout, cu_seqlens_q[b], L);
        int64_t r0[3] = {cu_seqlens_q[b], cu_seqlens_k[b], cu_seqlens_k[b]}, n[3] = {L, S, S};
        attn_tensor *g[4] = {NULL, NULL, NULL, NULL};
        for (int t = 0; t < 3; t++)
            if (grad[t]) seq_view(&s->grad[t], grad[t], r0[t], n[t]), g[t] = &s->grad[t];
        attn_sdpa_options ob = seq_options(&o, masks, b);
        if ((st = attn_backward_plan(&s->call, g, &s->dout, &s->q, &s->k, &s->v, &s->out, &s->lse, &ob, c.num_threads,
                                     measuring, err)))
            st = in_sequence(st, b, err);
        else if (attn_backward_fused(&s->call))
            fused[n_fused++] = &s->call.gs;
    }
    /* The line names the kernel that ran: the fused one (set by its run),
     * else the exact one, else, no sequence having queries and keys, none,
     * as attn_sdpa_varlen's line says. */
    attn_run_info info = {n_planned ? "exact" : "none", "-", NULL, 1, 1, 0, 0, NULL, 1, NULL, 0, 0, NULL, 1, 0};
    if (!st && (bytes || c.workspace)) { /* too small a workspace fails before anything is written */
        attn_arena m = attn_arena_measuring();
        bseq *none;
        const attn_grad_slices **none_fused;
        (void)take_plans(&m, nb, &none, &none_fused); /* counted, as the call takes them from the workspace */
        for (int64_t i = 0; i < n_planned && !st; i++)
            st = in_sequence(attn_backward_take(&seqs[i].call, &m, err), seqs[i].b, err);
        if (!st) st = attn_flash_backward_run_calls(fused, n_fused, &info, err);
        size_t need = attn_arena_needed(&m);
        if (!st && bytes) {
            attn_arena_release(&arena);
            *bytes = need;
            return ATTN_OK;
        }
        if (!st && need > c.workspace_size)
            st = attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace has %zu bytes but this call needs %zu "
                           "(attn_sdpa_varlen_backward_workspace_size)", c.workspace_size, need);
    }
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    for (int64_t i = 0; i < n_planned && !st; i++)
        st = in_sequence(attn_backward_take(&seqs[i].call, &arena, err), seqs[i].b, err);
    if (!st) st = attn_flash_backward_run_calls(fused, n_fused, &info, err);
    for (int64_t i = 0; i < n_planned && !st; i++) { /* f64: the exact kernel here, slice by slice */
        attn_backward_finish(&seqs[i].call);
        if (!n_fused) info.items += seqs[i].call.gs.f.count;
    }
    if (!st && verbose) report_backward(seqs, n_planned, q, k, v, lse, &o, &info, t0);
    attn_arena_release(&arena);
    if (st) return st;
    write_unplanned(grad, cu_seqlens_q, cu_seqlens_k, batch);
    return ATTN_OK;
}

attn_status attn_sdpa_varlen_backward(attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, const attn_tensor *dout,
                                      const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                      const attn_tensor *out, const attn_tensor *lse, const int64_t *cu_seqlens_q,
                                      const int64_t *cu_seqlens_k, int64_t batch, const attn_tensor *const *masks,
                                      const attn_sdpa_options *options, attn_error *err) {
    return varlen_backward(NULL, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, batch, masks,
                           options, err);
}

attn_status attn_sdpa_varlen_backward_workspace_size(size_t *bytes, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                                     const attn_tensor *dout, const attn_tensor *q,
                                                     const attn_tensor *k, const attn_tensor *v,
                                                     const attn_tensor *out, const attn_tensor *lse,
                                                     const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                                                     int64_t batch, const attn_tensor *const *masks,
                                                     const attn_sdpa_options *options, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    return varlen_backward(bytes, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, batch, masks,
                           options, err);
}

/* ---- A ragged batch planned once and run for every layer (sdpa_plan.c) ----
 * The plan is the sequences' plans plan_batch makes, kept in the caller's
 * memory; a run points each sequence's views at the layer's tensors (the
 * same rows of tensors laid out alike) and runs them as varlen_forward does. */
struct attn_varlen_plan {
    seq *seqs;                 /* [batch] */
    attn_paged_rows *k_rows, *v_rows; /* [batch]: a paged batch's row sources (their pages set at a run), or NULL */
    int64_t Ev;
    const attn_slices **flash; /* [batch], n_flash of them used */
    const attn_slices **decode; /* [batch], n_decode of them used */
    int64_t *cu_q, *cu_k;      /* [batch + 1]: the caller's offsets, copied */
    int64_t n_flash, n_decode;
};

size_t attn_varlen_plan_bytes(int64_t batch) {
    size_t n = batch > 0 ? (size_t)batch : 1,
           one = sizeof(seq) + 2 * sizeof(attn_slices *) + 2 * sizeof(int64_t) + 2 * sizeof(attn_paged_rows);
    if ((uint64_t)n > (SIZE_MAX - sizeof(attn_varlen_plan) - 64) / one) return SIZE_MAX;
    return sizeof(attn_varlen_plan) + n * one + 2 * sizeof(int64_t) + 64; /* + the alignment of seqs */
}

attn_varlen_plan *attn_varlen_plan_layout(void *memory, int64_t batch) {
    attn_varlen_plan *pl = memory;
    size_t n = batch > 0 ? (size_t)batch : 1;
    uintptr_t at = ((uintptr_t)(pl + 1) + 63) / 64 * 64;
    pl->seqs = (seq *)at;
    pl->flash = (const attn_slices **)(pl->seqs + n);
    pl->decode = pl->flash + n;
    pl->cu_q = (int64_t *)(pl->decode + n), pl->cu_k = pl->cu_q + batch + 1;
    pl->k_rows = (attn_paged_rows *)(pl->cu_k + batch + 1), pl->v_rows = pl->k_rows + n;
    return pl;
}

attn_status attn_varlen_plan_make(attn_varlen_plan **plan, void *memory, size_t *workspace_bytes, attn_tensor *out,
                                  attn_tensor *lse, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                                  const attn_tensor *const *masks, const attn_sdpa_options *o, int threads,
                                  attn_error *err) {
    attn_status st = check_varlen(out, lse, q, k, v, cu_q, cu_k, batch, masks, o, NULL, err);
    if (st) return st;
    if (attn_dtype_half(q->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; the sequences' plans take f32 or f64 q (a plan of a 16-bit "
                         "one plans f32 copies)", attn_dtype_name(q->dtype));
    attn_varlen_plan *pl = attn_varlen_plan_layout(memory, batch);
    pl->k_rows = pl->v_rows = NULL, pl->Ev = v->shape[2]; /* packed keys: no row sources */
    memcpy(pl->cu_q, cu_q, sizeof(int64_t) * (size_t)(batch + 1));
    memcpy(pl->cu_k, cu_k, sizeof(int64_t) * (size_t)(batch + 1));
    attn_arena m = attn_arena_measuring();
    batch_kv kv = {k, v, cu_k, NULL, NULL};
    attn_run_info info;
    if ((st = plan_batch(pl->seqs, pl->flash, &pl->n_flash, pl->decode, &pl->n_decode, out, lse, q, &kv, cu_q, batch,
                         masks, o, threads, &m, err)) ||
        (st = run_batch(pl->seqs, pl->flash, pl->n_flash, pl->decode, pl->n_decode, batch, q->shape[2], v->shape[2], o,
                        &m, &info, err)))
        return st;
    *workspace_bytes = attn_arena_needed(&m);
    *plan = pl;
    return ATTN_OK;
}

attn_status attn_varlen_plan_make_paged(attn_varlen_plan *pl, size_t *workspace_bytes, attn_tensor *out,
                                        attn_tensor *lse, const attn_tensor *q, const int64_t *cu_q, int64_t batch,
                                        const attn_tensor *const *masks, const attn_sdpa_options *o, int threads,
                                        attn_error *err) {
    int64_t Ev;
    attn_paged_rows *k_rows = pl->k_rows, *v_rows = pl->v_rows;
    attn_status st = check_paged(&Ev, out, lse, q, cu_q, batch, k_rows, v_rows, masks, o, NULL, err);
    if (st) return st;
    if (attn_dtype_half(q->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; the sequences' plans take an f32 q (a plan of a 16-bit one "
                         "plans f32 copies)", attn_dtype_name(q->dtype));
    memcpy(pl->cu_q, cu_q, sizeof(int64_t) * (size_t)(batch + 1));
    for (int64_t b = 0; b <= batch; b++) pl->cu_k[b] = 0; /* (the keys are the pages') */
    pl->Ev = Ev;
    attn_arena m = attn_arena_measuring();
    batch_kv kv = {NULL, NULL, NULL, k_rows, v_rows};
    attn_run_info info;
    if ((st = plan_batch(pl->seqs, pl->flash, &pl->n_flash, pl->decode, &pl->n_decode, out, lse, q, &kv, cu_q, batch,
                         masks, o, threads, &m, err)) ||
        (st = run_batch(pl->seqs, pl->flash, pl->n_flash, pl->decode, pl->n_decode, batch, q->shape[2], Ev, o, &m,
                        &info, err)))
        return st;
    *workspace_bytes = attn_arena_needed(&m);
    return ATTN_OK;
}

attn_status attn_varlen_plan_check_masks(const attn_varlen_plan *pl, const attn_named *outs, int n_outs,
                                         const void *workspace, size_t workspace_size,
                                         const attn_tensor *const *masks, int64_t batch, attn_error *err) {
    return check_masks_apart(outs, n_outs, workspace, workspace_size, masks, pl->cu_q, pl->cu_k, pl->k_rows, batch,
                             err);
}

attn_paged_rows *attn_varlen_plan_k_rows(attn_varlen_plan *pl) { return pl->k_rows; }
attn_paged_rows *attn_varlen_plan_v_rows(attn_varlen_plan *pl) { return pl->v_rows; }

void attn_varlen_plan_set_scales(attn_varlen_plan *pl, int64_t batch, const float *k_scale, const float *v_scale) {
    /* descale_row's (Hk,) copies: rank 1, so the array itself. A view
     * without scales keeps the options' descale rows. */
    for (int64_t b = 0; b < batch; b++) {
        if (k_scale && pl->seqs[b].kd.data) pl->seqs[b].kd.data = (void *)(uintptr_t)k_scale;
        if (v_scale && pl->seqs[b].vd.data) pl->seqs[b].vd.data = (void *)(uintptr_t)v_scale;
    }
}

attn_status attn_varlen_plan_run(attn_varlen_plan *pl, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v, int64_t batch, const attn_sdpa_options *o,
                                 attn_arena *arena, const attn_tensor *shown_q, attn_error *err) {
    const int64_t *cu_q = pl->cu_q, *cu_k = pl->cu_k;
    for (int64_t b = 0; b < batch; b++) { /* the views of plan_batch, over these tensors */
        seq *s = &pl->seqs[b];
        if (s->route < SEQ_FLASH) continue;
        int64_t L = cu_q[b + 1] - cu_q[b], S = cu_k[b + 1] - cu_k[b];
        seq_view(&s->q, q, cu_q[b], L);
        if (!pl->k_rows) seq_view(&s->k, k, cu_k[b], S), seq_view(&s->v, v, cu_k[b], S);
        seq_view(&s->out, out, cu_q[b], L);
        if (lse) seq_view(&s->lse, lse, cu_q[b], L), s->lse.rank = 2;
    }
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    attn_run_info info;
    attn_status st = run_batch(pl->seqs, pl->flash, pl->n_flash, pl->decode, pl->n_decode, batch, q->shape[2],
                               pl->Ev, o, arena, &info, err);
    if (!st) write_empty(pl->seqs, out, lse, cu_q, batch, o);
    if (!st && verbose)
        report(pl->k_rows ? "sdpa_run paged" : "sdpa_run varlen", pl->seqs, batch, lse, shown_q ? shown_q : q, k, v, o,
               &info, t0);
    return st;
}
