/* kv_pages_attend.c -- attention of packed queries to sequences of paged
 * keys and values (attn.h, attn_kv_pages_attend and attn_kv_paged_attend).
 *
 * Nothing is copied: each sequence's keys and values are handed to the
 * kernels as a paged row source (base/rows.h), its page table and length
 * over the pool's pages, and the whole batch is one attn_sdpa_varlen_paged
 * call (varlen.c), which plans every sequence as attn_sdpa plans it alone,
 * runs the flash sequences' query blocks as one job, and gives each
 * sequence bitwise what attn_sdpa gives for the same rows stored densely,
 * and so what attn_kv_cache_attend gives it. What is left here is what a
 * pool adds: the view's checks, its sequences named by id, the regions it
 * reads (lengths, tables) kept apart from the outputs, and the rule that
 * the new queries are each sequence's last positions. */
#include "sdpa/sdpa.h"

#include <stdlib.h>
#include <string.h>

/* A packed tensor: rank `rank`, of dtype dt (f64 over f64 pages, else
 * f32; q may also be f16 or bf16 over f32-computing pages, through f32
 * copies in attn_sdpa_varlen_paged; out: q's; lse: f32 or f64), shape
 * (total, H[, cols]); an output (`written`) with no stride 0 in a dimension
 * of size > 1 unless it has no rows (nothing is written to it; NumPy gives
 * an empty array strides of 0). */
static attn_status check_packed(const attn_tensor *t, const char *name, attn_dtype dt, int rank, int64_t total,
                                int64_t heads, int64_t cols, bool written, attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    if (t->rank != rank)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be %d: (total, heads%s)", name, t->rank, rank,
                         rank == 3 ? ", dim" : "");
    bool q16 = dt == ATTN_F32 && strcmp(name, "q") == 0 && attn_dtype_half(t->dtype);
    if (t->dtype != dt && !q16)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; attention over %s pages takes %s here%s", name,
                         attn_dtype_name(t->dtype), dt == ATTN_F64 ? "f64" : "f32, f16, bf16 or quantized",
                         attn_dtype_name(dt), dt == ATTN_F64 ? "" : " (q f32, f16 or bf16; out q's dtype; lse f32)");
    if ((total >= 0 && t->shape[0] != total) || t->shape[0] < 0 || (heads >= 0 && t->shape[1] != heads) ||
        t->shape[1] < 1 || (rank == 3 && t->shape[2] != cols)) {
        char s[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        if (heads < 0 && t->shape[1] < 1) /* no count to name: "(1, 0, 8); it must be (1, 0, 8)" was said */
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it needs at least one head (dimension 1)", name, s);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must be (%lld, %lld%s%lld)", name, s,
                         (long long)(total >= 0 ? total : t->shape[0]), (long long)(heads >= 0 ? heads : t->shape[1]),
                         rank == 3 ? ", " : "", rank == 3 ? (long long)cols : 0LL);
    }
    attn_status st = written ? attn_check_writable(t, name, err) : ATTN_OK;
    return st ? st : attn_check_extent(t, name, err);
}

void attn_kv_paged_rows(attn_paged_rows *k, attn_paged_rows *v, const attn_kv_paged_view *w, int64_t row, int64_t S) {
    const int32_t *table = w->page_table + (w->table_offsets ? w->table_offsets[row] : row * w->table_stride);
    *k = (attn_paged_rows){w->k_pages, w->dtype, w->num_pages, w->heads, w->page_size, w->key_dim,
                           table, (S + w->page_size - 1) / w->page_size, S, NULL, 0, w->head_major != 0};
    *v = *k;
    v->pages = w->v_pages, v->cols = w->value_dim;
    if (w->key_dtype) /* keys quantized per channel, the sequence's last positions in its residual rows */
        k->dtype = w->key_dtype, k->window = w->residual,
        k->residual = (const uint16_t *)w->k_residual + row * w->heads * (w->residual + 32) * w->key_dim;
}

/* Sequence `row` of a checked view w as the paged row sources of its keys
 * (*k) and values (*v), of its length. */
static void sequence_rows(attn_paged_rows *k, attn_paged_rows *v, const attn_kv_paged_view *w, int64_t row) {
    attn_kv_paged_rows(k, v, w, row, w->lengths[row]);
}

/* Everything attention over the n sequences rows[0..n) (NULL: 0..n-1) of a
 * checked view w adds to attn_sdpa_varlen_paged's checks: the options (*o:
 * read, bottom-right by default, checked), q, out and lse, the offsets,
 * the view's lengths and tables apart from the outputs, no queries for a
 * sequence without positions; then each sequence's row sources, k[i] and
 * v[i] (NULL: not wanted), *any whether some sequence has queries. */
attn_status attn_kv_paged_prepare(attn_sdpa_options *o, attn_paged_rows *k, attn_paged_rows *v, bool *any,
                                  attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                                  const attn_kv_paged_view *w, const int64_t *rows, int64_t n,
                                  const attn_sdpa_options *options, attn_error *err) {
    *o = attn_sdpa_options_default();
    o->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_status st;
    if ((st = attn_versioned_read(o, sizeof *o, options, "options", "start from attn_sdpa_options_default()", err)) ||
        (st = attn_kv_cache_check_causal(o->causal, err)))
        return st;
    o->struct_size = sizeof *o; /* the library's own struct from here on */
    if (o->mask)
        return attn_fail(err, ATTN_ERR_OPTION, "options->mask is set; paged attention takes one mask per sequence (masks)");
    if (o->query_start || o->key_start || o->total_queries || o->total_keys)
        return attn_fail(err, ATTN_ERR_OPTION, "paged attention is not taken in pieces (query_start, key_start, "
                                               "total_queries, total_keys must be 0)");
    const attn_dtype dt = w->dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32; /* the queries' */
    if ((st = check_packed(q, "q", dt, 3, -1, -1, w->key_dim, false, err))) return st;
    const int64_t total = q->shape[0], Hq = q->shape[1];
    if (Hq % w->heads)
        return attn_fail(err, ATTN_ERR_HEADS, "q has %lld head%s, not a multiple of the pages' %lld", (long long)Hq,
                         attn_plural(Hq), (long long)w->heads);
    /* here too, not only in the sequences' plans: a call without queries plans none */
    if ((st = attn_check_options(o, dt, Hq, w->key_dim, err))) return st;
    if ((st = check_packed(out, "out", q->dtype, 3, total, Hq, w->value_dim, true, err)) ||
        (lse && (st = check_packed(lse, "lse", dt, 2, total, Hq, 0, true, err))))
        return st;
    if (n < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "n is %lld; it must be 0 or more", (long long)n);
    if ((st = attn_check_cu_seqlens(cu, n, total, "cu_seqlens_q", err))) return st; /* q's rows, as the ragged batch's */
    /* The pages themselves are checked against the outputs by
     * attn_sdpa_varlen_paged; the view's lengths and tables only here. */
    attn_tensor regions[5];
    attn_kv_paged_regions(regions, w);
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_named ins[7] = {{q, "q"}};
    for (int r = 0; r < 5; r++)
        ins[r + 1] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    attn_tensor residual;
    attn_kv_paged_residual(&residual, w);
    ins[6] = (attn_named){residual.data ? &residual : NULL, "the residual keys"};
    if ((st = attn_check_no_overlap(outs, 2, ins, 7, err))) return st;
    *any = false;
    for (int64_t i = 0; i < n; i++) {
        int64_t L = cu[i + 1] - cu[i]; /* with no positions: out 0, as attn_sdpa gives for S = 0 */
        *any |= L > 0;
    }
    for (int64_t i = 0; k && i < n; i++) sequence_rows(&k[i], &v[i], w, rows ? rows[i] : i);
    return ATTN_OK;
}

/* The context of options o (prepared; the view's per-head scales as
 * k_descale and v_descale) has a workspace apart from every tensor attend
 * reads or writes: q, out, lse, the offsets, the options' tensors, the
 * masks of sequences with queries, and the view's memory, whole (its pages,
 * tables, lengths and residual keys), and a pool's (pool NULL: a caller's
 * view), its header and bookkeeping too, before q's turned copy is written
 * into it (attn_check_workspace). */
static attn_status check_workspace(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q,
                                   const int64_t *cu, const attn_kv_paged_view *w, const attn_kv_pages *pool,
                                   int64_t n, const attn_tensor *const *masks, const attn_sdpa_options *o,
                                   attn_error *err) {
    attn_sdpa_options read;
    attn_context c;
    attn_status st = attn_options_read(&read, &c, o, err);
    if (st || !c.workspace) return st;
    attn_tensor regions[5], residual, offsets, whole;
    int64_t entries = n + 1;
    attn_kv_paged_regions(regions, w);
    attn_kv_paged_residual(&residual, w);
    if (pool) attn_kv_pages_memory(&whole, pool);
    attn_tensor_init(&offsets, (void *)(uintptr_t)cu, ATTN_F64, 1, &entries, NULL, NULL); /* int64s: only bytes count */
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_named ins[9 + ATTN_OPTION_TENSORS] = {{q, "q"}, {&offsets, "cu_seqlens_q"},
                                               {residual.data ? &residual : NULL, "the residual keys"},
                                               {pool ? &whole : NULL, "the pool's memory"}};
    for (int r = 0; r < 5; r++) ins[4 + r] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    int n_ins = attn_named_options(ins, 9, ATTN_NAMED_CAP(ins), &read);
    if ((st = attn_check_workspace(c.workspace, c.workspace_size, outs, 2, ins, n_ins, err))) return st;
    for (int64_t i = 0; masks && i < n; i++) {
        const attn_named mask = {cu[i + 1] > cu[i] ? masks[i] : NULL, "a sequence's mask"};
        if ((st = attn_check_workspace(c.workspace, c.workspace_size, NULL, 0, &mask, 1, err))) return st;
    }
    return ATTN_OK;
}

/* The n sequences rows[0..n) (NULL: 0..n-1) of a checked view w, sequence
 * i with masks[i] (masks NULL: none), as one attn_sdpa_varlen_paged call;
 * pool: the pool w is the view of (NULL: a caller's view), whose memory,
 * header and bookkeeping included, out and lse keep clear of. */
static attn_status attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                          const attn_kv_paged_view *w, const attn_kv_pages *pool, const int64_t *rows, int64_t n,
                          const attn_tensor *const *masks, const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_options o;
    bool any;
    attn_status st = attn_kv_paged_prepare(&o, NULL, NULL, &any, out, lse, q, cu, w, rows, n, options, err);
    attn_tensor whole;
    if (!st && pool) {
        attn_kv_pages_memory(&whole, pool);
        const attn_named outs[2] = {{out, "out"}, {lse, "lse"}}, ins[1] = {{&whole, "the pool's memory"}};
        st = attn_check_no_overlap(outs, 2, ins, 1, err);
    }
    attn_tensor ks, vs, hq; /* the pages' per-head fp8 scales, as the options'; q turned by the keys' rotation */
    attn_arena arena = attn_arena_over(NULL, 0); /* hq's memory: the workspace's front, or malloc */
    attn_context rest;
    attn_paged_rows *k_pages = NULL; /* (k_pages[i], v_pages[i]): sequence i's row sources, a few words each */
    memset(&hq, 0, sizeof hq);
    if (st || (st = attn_kv_scales_as_descale(&o, &ks, &vs, w->k_scale, w->v_scale, w->heads, err)) ||
        (st = check_workspace(out, lse, q, cu, w, pool, n, masks, &o, err)) ||
        (w->hadamard && any && (st = attn_hadamard_queries_call(&hq, &arena, &rest, &o, q, err))))
        goto done;
    /* A batch without queries goes on too: attn_sdpa_varlen_paged runs no
     * kernel for it but prints the call's verbose line (kernel=none), as
     * every call and a plan's run of the same batch do. */
    if (hq.data) q = &hq;
    if ((uint64_t)n > SIZE_MAX / (2 * sizeof(attn_paged_rows))) {
        st = attn_fail(err, ATTN_ERR_OVERFLOW, "the row sources of %lld sequences overflow", (long long)n);
        goto done;
    }
    if (!(k_pages = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *k_pages))) { /* (malloc(0) may be NULL) */
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for the row sources of %lld sequences", (long long)n);
        goto done;
    }
    attn_paged_rows *v_pages = k_pages + n;
    for (int64_t i = 0; i < n; i++) sequence_rows(&k_pages[i], &v_pages[i], w, rows ? rows[i] : i);
    st = attn_sdpa_varlen_paged(out, lse, q, cu, n, k_pages, v_pages, masks, &o, err);
done:
    free(k_pages);
    attn_arena_release(&arena);
    return st;
}

attn_status attn_kv_paged_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                 const attn_kv_paged_view *view, const attn_tensor *const *masks,
                                 const attn_sdpa_options *options, attn_error *err) {
    attn_status st = attn_kv_paged_check(view, err);
    if (st) return st;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    attn_versioned_read(&w, sizeof w, view, "view", "", NULL);
    return attend(out, lse, q, cu_seqlens_q, &w, NULL, NULL, w.num_sequences, masks, options, err);
}

attn_status attn_kv_paged_attend_rows(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                                      const attn_kv_paged_view *w, const int64_t *rows, int64_t n,
                                      const attn_tensor *const *masks, const attn_sdpa_options *options,
                                      attn_error *err) {
    attn_status st = attn_kv_paged_check(w, err);
    return st ? st : attend(out, lse, q, cu, w, NULL, rows, n, masks, options, err);
}

attn_status attn_kv_pages_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                 const int64_t *seqs, int64_t n, const attn_kv_pages *pool,
                                 const attn_tensor *const *masks, const attn_sdpa_options *options, attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    if (n > 0 && !seqs) return attn_fail(err, ATTN_ERR_NULL, "seqs is NULL");
    attn_status st;
    for (int64_t i = 0; i < n; i++)
        if ((st = attn_kv_pages_sequence(pool, seqs[i], NULL, NULL, err))) return st;
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, pool, NULL);
    return attend(out, lse, q, cu_seqlens_q, &w, pool, seqs, n, masks, options, err);
}
