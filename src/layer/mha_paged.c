/* mha_paged.c -- the attention layer's step (attn_mha_cached) for a batch of
 * sequences, each of its own length and position: attn_mha_paged over a
 * paged pool, attn_mha_cached_batch over the rows of a contiguous cache.
 *
 * Both are attn_mha_cached (mha_cached.c) for n sequences at once, through one
 * function (batch_step): sequence i's rows of x are projected as
 * attn_mha_cached projects them (the same products on the same rows; RoPE
 * at the sequence's own positions, after what it holds), the new keys and
 * values of every sequence are stored, the new queries attend in one
 * paged attention call (the kernels read the keys in place, the batch is
 * one job), and each sequence's rows go through out_proj as
 * attn_mha_cached's would. So each sequence gets bitwise what
 * attn_mha_cached gives it alone, in a contiguous cache holding the same
 * keys.
 *
 * The two storages differ only in where the keys go and how lengths are
 * kept. A contiguous cache (B, Hk, capacity, D) is read as a paged view
 * whose page size is the capacity (attn_kv_cache_pages): B pages, sequence
 * i's page table the single entry rows[i]; its new keys are written by the
 * cache's own writer (attn_kv_cache_put); its lengths are the caller's
 * array, written only when the step succeeded.
 *
 * x, out and the parameters are f32 over an f32, f16, bf16 or quantized
 * store, or f64 over an f64 one (the exact path, as attn_mha_cached takes
 * it). */
#include "layer/mha.h"
#include "sdpa/sdpa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a batch step keeps its keys and values: a pool and its sequence
 * ids, or a contiguous cache, the rows of it the sequences are, and the
 * caller's lengths of all its rows. */
typedef struct kv_store {
    bool paged; /* the pool's, else the cache's */
    attn_kv_pages *pool;
    const int64_t *seqs;
    attn_kv_cache *cache;
    const int64_t *rows;
    int64_t *lengths;
    const char *name; /* the public function, for messages */
} kv_store;

/* m narrowed to rows r0 .. r0+L-1 of x and out: the call attn_mha_cached
 * plans for those rows alone (N = 1, L new positions). */
static attn_mha_call sequence_call(const attn_mha_call *m, int64_t r0, int64_t L) {
    attn_mha_call s = *m;
    attn_tensor *t[3] = {&s.q, &s.k, &s.v};
    for (int i = 0; i < 3; i++)
        t[i]->data = (char *)t[i]->data + r0 * t[i]->strides[1] * (int64_t)attn_dtype_size(t[i]->dtype),
        t[i]->shape[1] = L;
    s.L = s.S = s.S2 = L;
    return s;
}

/* The store's keys and values as a paged view w (the cache's: B pages of
 * `capacity` positions, no sequences yet), and its dtype and sizes checked
 * against the layer's: f64 x for an f64 store, f32 for the others. */
static attn_status store_view(attn_kv_paged_view *w, const kv_store *s, const attn_mha_call *m, attn_error *err) {
    *w = attn_kv_paged_view_default();
    if (s->paged) {
        w->struct_size = sizeof *w;
        attn_kv_pages_view(w, s->pool, NULL);
    } else {
        attn_kv_cache_pages(w, s->cache);
    }
    return attn_mha_check_store(w, s->paged ? "pool" : "cache", m, err);
}

/* length[i]: what sequence i holds before the call. A cache's rows are
 * checked here: each a row of the cache, named once, its length between 0
 * and the capacity, with room for its new positions. */
static attn_status store_lengths(int64_t *length, const kv_store *s, const attn_kv_paged_view *w, const int64_t *cu,
                                 int64_t n, attn_error *err) {
    attn_status st = ATTN_OK;
    if (n > 0 && !(s->paged ? s->seqs : s->rows))
        return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", s->paged ? "seqs" : "rows");
    if (s->paged) {
        for (int64_t i = 0; i < n && !st; i++) st = attn_kv_pages_sequence(s->pool, s->seqs[i], &length[i], NULL, err);
        return st;
    }
    if (n > 0 && !s->lengths) return attn_fail(err, ATTN_ERR_NULL, "lengths is NULL");
    const int64_t B = w->num_pages, C = w->page_size;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = s->rows[i], L = cu[i + 1] - cu[i];
        if (row < 0 || row >= B || row > INT32_MAX)
            return attn_fail(err, ATTN_ERR_ARGUMENT, "rows[%lld] is %lld; the cache has rows 0 .. %lld", (long long)i,
                             (long long)row, (long long)B - 1);
        for (int64_t j = 0; j < i; j++)
            if (s->rows[j] == row)
                return attn_fail(err, ATTN_ERR_ARGUMENT, "rows[%lld] and rows[%lld] are both row %lld; each row may be "
                                 "named once", (long long)j, (long long)i, (long long)row);
        length[i] = s->lengths[row];
        if (length[i] < 0 || length[i] > C)
            return attn_fail(err, ATTN_ERR_ARGUMENT, "lengths[%lld] is %lld; it must be between 0 and the capacity, %lld",
                             (long long)row, (long long)length[i], (long long)C);
        if (L > C - length[i])
            return attn_fail(err, ATTN_ERR_FULL, "row %lld holds %lld of %lld position%s: %lld more %s not fit",
                             (long long)row, (long long)length[i], (long long)C, attn_plural(C), (long long)L,
                             L == 1 ? "does" : "do");
    }
    return ATTN_OK;
}

/* Rows r0 .. r0+L-1 of a packed (T, H, D) buffer as (H, L, D). */
static void packed_rows(attn_tensor *t, char *data, attn_dtype dt, int64_t H, int64_t D, int64_t r0, int64_t L) {
    int64_t shape[3] = {H, L, D}, strides[3] = {D, H * D, 1};
    attn_tensor_init(t, data + r0 * H * D * (int64_t)attn_dtype_size(dt), dt, 3, shape, strides, NULL);
}

/* The new keys and values (packed (T, Hkv, D)) stored: one pool append, or
 * each sequence's rows written to its cache row after what it holds (all
 * of it checked before: the writes cannot fail). */
static attn_status store_append(const kv_store *s, const attn_kv_paged_view *w, const attn_tensor *tk,
                                const attn_tensor *tv, const int64_t *cu, int64_t n, const int64_t *length,
                                attn_error *err) {
    if (s->paged) return attn_kv_pages_append(s->pool, s->seqs, n, tk, tv, cu, err);
    for (int64_t i = 0; i < n; i++) {
        int64_t L = cu[i + 1] - cu[i];
        if (L == 0) continue;
        attn_tensor sk, sv; /* sequence i's rows as (Hkv, L, D) */
        packed_rows(&sk, tk->data, tk->dtype, w->heads, w->key_dim, cu[i], L);
        packed_rows(&sv, tv->data, tv->dtype, w->heads, w->value_dim, cu[i], L);
        attn_status st = attn_kv_cache_put(s->cache, s->rows[i], length[i], &sk, &sv, err);
        if (st) return st;
    }
    return ATTN_OK;
}

/* The new queries (packed (T, Hq, D)) attend to everything their sequences
 * hold, as one batch: heads (T, Hq, D). */
static attn_status store_attend(attn_tensor *heads, const attn_tensor *tq, const kv_store *s, attn_kv_paged_view *w,
                                const int64_t *cu, int64_t n, const int64_t *length, const attn_tensor *const *masks,
                                const attn_sdpa_options *so, attn_error *err) {
    if (s->paged) return attn_kv_pages_attend(heads, NULL, tq, cu, s->seqs, n, s->pool, masks, so, err);
    /* The view's sequences are the cache's B rows, row b its page b (a row
     * not named: length 0), and sequence i is row rows[i]: so keys quantized
     * per channel read row rows[i]'s residual rows, which lie at its index. */
    const int64_t B = w->num_pages;
    int64_t *lengths = malloc((size_t)B * sizeof *lengths);
    int32_t *table = malloc((size_t)B * sizeof *table);
    attn_status st = ATTN_OK;
    if (!lengths || !table) st = attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for %lld rows' tables", (long long)B);
    for (int64_t b = 0; b < B && !st; b++) lengths[b] = 0, table[b] = (int32_t)b;
    for (int64_t i = 0; i < n && !st; i++) lengths[s->rows[i]] = length[i] + cu[i + 1] - cu[i];
    if (!st) {
        w->num_sequences = B, w->lengths = lengths, w->page_table = table, w->table_stride = 1;
        st = attn_kv_paged_attend_rows(heads, NULL, tq, cu, w, s->rows, n, masks, so, err);
    }
    free(lengths), free(table);
    return st;
}

/* Each sequence's mask against the attention it will take part in, the
 * queries (Hq, L_i, D) against length_i + L_i keys, as attention checks it
 * (attn_sdpa_shapes on stand-ins, `any` a pointer that is never read):
 * checked before the store is written, since a mask that does not fit is a
 * bad argument, not a failure met on the way. */
static attn_status check_masks(const attn_tensor *const *masks, const attn_sdpa_options *so, const attn_mha_call *m,
                               const int64_t *cu, int64_t n, const int64_t *length, const void *any, attn_error *err) {
    for (int64_t i = 0; masks && i < n; i++) {
        int64_t L = cu[i + 1] - cu[i], S = length[i] + L;
        if (L == 0 || !masks[i]) continue;
        int64_t qs[3] = {m->Hq, L, m->D}, ks[3] = {m->Hkv, S, m->D};
        attn_tensor q, k;
        attn_tensor_init(&q, (void *)(uintptr_t)any, m->dt, 3, qs, NULL, NULL);
        attn_tensor_init(&k, (void *)(uintptr_t)any, m->dt, 3, ks, NULL, NULL);
        attn_sdpa_options o = *so;
        o.mask = masks[i];
        attn_status st = attn_sdpa_shapes(NULL, NULL, NULL, &q, &k, &k, &o, err);
        if (st) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err ? err->message : "");
            return attn_fail(err, st, "sequence %lld: %s", (long long)i, why);
        }
    }
    return ATTN_OK;
}

/* The context's workspace, which the attention writes, apart from what the
 * step writes (outs: out and the store) and reads (ins: x and the
 * parameters; the view's tables, regions[2..4]; cu_seqlens; the masks of
 * sequences with queries): checked before the store is written
 * (attn_check_workspace). */
static attn_status check_workspace(const attn_mha_call *m, const attn_named outs[5],
                                   const attn_named ins[ATTN_MHA_INPUTS], const attn_tensor regions[5],
                                   const int64_t *cu, int64_t n, const attn_tensor *const *masks, attn_error *err) {
    const void *ws = m->context.workspace;
    size_t bytes = m->context.workspace_size;
    if (!ws) return ATTN_OK;
    attn_tensor offsets;
    int64_t entries = n + 1;
    attn_tensor_init(&offsets, (void *)(uintptr_t)cu, ATTN_F64, 1, &entries, NULL, NULL); /* int64s: only bytes count */
    attn_named read[4] = {{&offsets, "cu_seqlens"}};
    for (int r = 2; r < 5; r++) read[r - 1] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    attn_status st;
    if ((st = attn_check_workspace(ws, bytes, outs, 5, ins, ATTN_MHA_INPUTS, err)) ||
        (st = attn_check_workspace(ws, bytes, NULL, 0, read, 4, err)))
        return st;
    for (int64_t i = 0; masks && i < n; i++) {
        const attn_named mask = {cu[i + 1] > cu[i] ? masks[i] : NULL, "a sequence's mask"};
        if ((st = attn_check_workspace(ws, bytes, NULL, 0, &mask, 1, err))) return st;
    }
    return ATTN_OK;
}

/* One step of the layer for n sequences of a store (the public functions
 * below, which differ only in `s`). */
static attn_status batch_step(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens, int64_t n,
                              const kv_store *s, const attn_tensor *const *masks, const attn_mha_params *params,
                              const attn_mha_options *options, attn_error *err) {
    attn_mha_call m;
    memset(&m, 0, sizeof m);
    m.p = attn_mha_params_default(), m.o = attn_mha_options_default();
    if (!params || !(s->paged ? (void *)s->pool : (void *)s->cache) || !out || !x)
        return attn_fail(err, ATTN_ERR_NULL, "params, %s, out and x must not be NULL", s->paged ? "pool" : "cache");
    attn_status st = attn_versioned_read(&m.p, sizeof m.p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_versioned_read(&m.o, sizeof m.o, options, "options", "start from attn_mha_options_default()", err))) return st;
    if (!options) m.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* as attn_mha_cached's NULL options */
    if (m.o.attn_mask || m.o.key_padding_mask || m.o.add_zero_attn || m.p.bias_k)
        return attn_fail(err, ATTN_ERR_OPTION, "%s takes no attn_mask, key_padding_mask, bias_k/bias_v or "
                                               "add_zero_attn (a mask per sequence goes in masks)", s->name);
    if ((st = attn_kv_cache_check_causal(m.o.causal, err))) return st;
    if (x->rank != 2) return attn_fail(err, ATTN_ERR_RANK, "x has rank %d; it must be packed (total, embed_dim)", x->rank);
    if (x->dtype != ATTN_F32 && x->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "x is %s; %s takes f32, or f64 over f64 keys and values",
                         attn_dtype_name(x->dtype), s->name);
    attn_tensor out_view;
    /* x as one unbatched (total, E) sequence */
    if ((st = attn_mha_plan(&m, &out_view, out, x, x, x, err)) || (st = attn_check_writable(out, "out", err))) return st;
    const int64_t T = m.L;
    if ((st = attn_check_cu_seqlens(cu_seqlens, n, T, "cu_seqlens", err))) return st;
    attn_kv_paged_view w;
    if ((st = store_view(&w, s, &m, err))) return st;
    /* The store is written: out, x and the parameters keep clear of it
     * (and of a cache's lengths, written last). */
    attn_tensor regions[5], lens;
    attn_kv_paged_regions(regions, &w);
    attn_named ins[ATTN_MHA_INPUTS];
    int64_t B = w.num_pages;
    attn_tensor_init(&lens, s->lengths, ATTN_F64, 1, &B, NULL, NULL); /* int64 as f64: only the bytes count */
    /* keys per channel: the residual rows, one set per sequence of a pool, per row of a cache */
    attn_tensor res = {0};
    int64_t nres = (s->paged ? w.num_sequences : w.num_pages) * w.heads * (w.residual + 32) * w.key_dim;
    if (w.key_dtype && w.k_residual) attn_tensor_init(&res, (void *)(uintptr_t)w.k_residual, ATTN_F16, 1, &nres, NULL, NULL);
    attn_named outs[5] = {{out, "out"}, {&regions[0], "the key pages"}, {&regions[1], "the value pages"},
                          {!s->paged && s->lengths ? &lens : NULL, "lengths"},
                          {res.data ? &res : NULL, "the residual keys"}};
    attn_tensor whole;
    if (s->paged) { /* the append writes all of a pool's memory: its pages, residual rows and bookkeeping */
        attn_kv_pages_memory(&whole, s->pool);
        outs[1] = (attn_named){&whole, "the pool's memory"};
        for (int i = 2; i < 5; i++) outs[i] = (attn_named){NULL, NULL};
    }
    attn_mha_inputs(ins, &m, x, NULL, NULL);
    if ((st = attn_check_no_overlap(outs, 5, ins, ATTN_MHA_INPUTS, err)) ||
        (st = check_workspace(&m, outs, ins, regions, cu_seqlens, n, masks, err)))
        return st;
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t)) return attn_fail(err, ATTN_ERR_OVERFLOW, "%lld sequences overflow", (long long)n);
    int64_t *length = malloc((size_t)(n > 0 ? n : 1) * sizeof *length);
    if (!length) return attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for %lld sequences' lengths", (long long)n);
    st = store_lengths(length, s, &w, cu_seqlens, n, err);

    /* q (T, Hq·D), k and v (T, Hkv·D), the heads' output (T, E): packed as x */
    size_t es = attn_dtype_size(m.dt);
    int64_t nq = T * m.Hq * m.D, nk = T * m.Hkv * m.D; /* fit: attn_mha_plan checked the layer's sizes */
    char *q = NULL, *k = NULL, *v = NULL, *heads = NULL, *proj = NULL; /* proj: out_proj's rows (T, E) */
    if (!st) {
        q = calloc((size_t)nq + 1, es), k = calloc((size_t)nk + 1, es), v = calloc((size_t)nk + 1, es);
        heads = calloc((size_t)nq + 1, es), proj = calloc((size_t)nq + 1, es);
        if (!q || !k || !v || !heads || !proj)
            st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the layer's projections");
    }
    attn_rope_options r = attn_rope_options_default();
    if (!st && m.o.rope)
        st = attn_versioned_read(&r, sizeof r, m.o.rope, "options->rope", "start from attn_rope_options_default()", err);
    m.rope_in_attention = false; /* the store holds turned keys: turn the new ones before storing */
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t r0 = cu_seqlens[i], L = cu_seqlens[i + 1] - r0;
        if (L == 0) continue;
        attn_mha_call sc = sequence_call(&m, r0, L);
        attn_rope_options ri = r;
        if (m.o.rope && (st = attn_mha_check_step_rope(&r, length[i], L, err))) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err ? err->message : "");
            st = attn_fail(err, st, "sequence %lld: %s", (long long)i, why);
            break;
        }
        ri.position_offset = attn_mha_rope_after(r.position_offset, length[i]); /* after sequence i's own */
        if (m.o.rope) sc.o.rope = &ri;
        st = attn_mha_project_qkv(q + r0 * m.Hq * m.D * (int64_t)es, k + r0 * m.Hkv * m.D * (int64_t)es,
                                  v + r0 * m.Hkv * m.D * (int64_t)es, &sc, L, false, err);
    }
    attn_tensor tq, tk, tv, th;
    int64_t qs[3] = {T, m.Hq, m.D}, ks[3] = {T, m.Hkv, m.D};
    attn_tensor_init(&tq, q, m.dt, 3, qs, NULL, NULL), attn_tensor_init(&th, heads, m.dt, 3, qs, NULL, NULL);
    attn_tensor_init(&tk, k, m.dt, 3, ks, NULL, NULL), attn_tensor_init(&tv, v, m.dt, 3, ks, NULL, NULL);
    attn_sdpa_options so;
    if (!st) st = attn_mha_sdpa_options(&so, &m, m.o.causal, NULL, err);
    if (!st) st = check_masks(masks, &so, &m, cu_seqlens, n, length, x->data, err);
    /* Keys per channel: each sequence's residual rows as they are, put back
     * if the step fails after the append. Undoing the append alone does not
     * restore them: a group it quantized comes back from a pool's truncation
     * as its dequantized values, and a cache's window has moved on. */
    int64_t per = w.key_dtype ? w.heads * (w.residual + 32) * w.key_dim : 0; /* f16 values a sequence's rows take */
    uint16_t *saved = NULL;
    int64_t *filled = NULL; /* a cache's: the positions each row's window is of (its write first cuts a lowered length) */
    if (!st && per > 0 && (uint64_t)(n > 0 ? n : 1) > SIZE_MAX / 2 / (uint64_t)per)
        st = attn_fail(err, ATTN_ERR_OVERFLOW, "%lld sequences' residual keys overflow", (long long)n);
    if (!st && per > 0 && !(saved = malloc((size_t)(n > 0 ? n : 1) * (size_t)per * 2)))
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot keep %lld sequences' residual keys", (long long)n);
    if (!st && per > 0 && !s->paged && !(filled = malloc((size_t)(n > 0 ? n : 1) * sizeof *filled)))
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot keep %lld rows' lengths", (long long)n);
    /* A cache row whose length its caller lowered is cut back first, as its
     * write would cut it, and kept so: the append may quantize a group into
     * the slot of one the cut returned to the window, so the state from
     * before the cut could not be put back (its groups would read the new
     * keys). Every argument was checked above. */
    for (int64_t i = 0; !st && per > 0 && !s->paged && i < n; i++)
        if (cu_seqlens[i + 1] > cu_seqlens[i]) attn_kv_cache_row_cut(s->cache, s->rows[i], length[i]);
    for (int64_t i = 0; !st && saved && i < n; i++)
        memcpy(saved + i * per, (const uint16_t *)w.k_residual + (s->paged ? s->seqs[i] : s->rows[i]) * per,
               (size_t)per * 2);
    for (int64_t i = 0; !st && filled && i < n; i++) filled[i] = attn_kv_cache_row_filled(s->cache, s->rows[i]);
    /* One store for every sequence: everything was checked (a full pool, a
     * sequence named twice, a full row, the masks) before it writes. */
    if (!st && (st = store_append(s, &w, &tk, &tv, cu_seqlens, n, length, err))) goto done;
    if (!st) {
        st = store_attend(&th, &tq, s, &w, cu_seqlens, n, length, masks, &so, err);
        /* out_proj per sequence, the very product attn_mha_cached makes of
         * its rows, into proj; out is written only once every one has had
         * its memory, so running out of it leaves out untouched. */
        for (int64_t i = 0; i < n && !st; i++) {
            int64_t r0 = cu_seqlens[i], L = cu_seqlens[i + 1] - r0, ps[3] = {1, L, m.E};
            if (L == 0) continue;
            attn_mha_call sc = sequence_call(&m, r0, L);
            attn_tensor oi;
            attn_tensor_init(&oi, proj + r0 * m.E * (int64_t)es, m.dt, 3, ps, NULL, NULL);
            if (!attn_mha_project_out(&oi, heads + r0 * m.E * (int64_t)es, &sc))
                st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a block of packed weights");
        }
        attn_tensor tp;
        int64_t pshape[3] = {1, T, m.E};
        attn_tensor_init(&tp, proj, m.dt, 3, pshape, NULL, NULL);
        if (!st && T > 0) st = attn_tensor_convert(&out_view, &tp, err); /* one dtype: a copy */
        /* A failure after the store leaves the sequences as they were: a
         * pool's truncated back, a cache's lengths not yet written. */
        for (int64_t i = 0; st && s->paged && i < n; i++) attn_kv_pages_truncate(s->pool, s->seqs[i], length[i], NULL);
        for (int64_t i = 0; st && saved && i < n; i++)
            memcpy((uint16_t *)(uintptr_t)w.k_residual + (s->paged ? s->seqs[i] : s->rows[i]) * per, saved + i * per,
                   (size_t)per * 2);
        for (int64_t i = 0; st && filled && i < n; i++) attn_kv_cache_row_set_filled(s->cache, s->rows[i], filled[i]);
    }
    for (int64_t i = 0; !st && !s->paged && i < n; i++) s->lengths[s->rows[i]] = length[i] + cu_seqlens[i + 1] - cu_seqlens[i];
done:
    free(length), free(q), free(k), free(v), free(heads), free(proj), free(saved), free(filled);
    return st;
}

attn_status attn_mha_paged(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens, const int64_t *seqs,
                           int64_t n, attn_kv_pages *pool, const attn_tensor *const *masks,
                           const attn_mha_params *params, const attn_mha_options *options, attn_error *err) {
    const kv_store s = {true, pool, seqs, NULL, NULL, NULL, "attn_mha_paged"};
    return batch_step(out, x, cu_seqlens, n, &s, masks, params, options, err);
}

attn_status attn_mha_cached_batch(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens,
                                  const int64_t *rows, int64_t n, attn_kv_cache *cache, int64_t *lengths,
                                  const attn_tensor *const *masks, const attn_mha_params *params,
                                  const attn_mha_options *options, attn_error *err) {
    const kv_store s = {false, NULL, NULL, cache, rows, lengths, "attn_mha_cached_batch"};
    return batch_step(out, x, cu_seqlens, n, &s, masks, params, options, err);
}
