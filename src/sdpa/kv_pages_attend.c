/* kv_pages_attend.c -- attention of packed queries to sequences of paged
 * keys and values (attn.h, attn_kv_pages_attend and attn_kv_paged_attend).
 *
 * The first implementation: each sequence's keys and values are copied
 * out of their pages (attn_kv_paged_copy) into one buffer, sized for the
 * longest sequence, and attn_sdpa runs on the copy, one sequence after
 * another, with the sequence's queries and outputs as strided views into
 * the packed tensors. It is correct by construction (every sequence gets
 * what attn_kv_cache_attend gives it alone, since that is one attn_sdpa
 * call on the same keys in the same dtype) and it is the reference the
 * kernels that read pages in place (the K/V row source) are held to; they
 * will replace it. Its cost beyond attn_sdpa is one copy of each
 * sequence's keys and values per call. */
#include "sdpa/sdpa.h"

#include <stdlib.h>

/* Rows r0 .. r0 + n - 1 of a packed (total, H, cols) tensor as (H, n, cols);
 * rank 2 (total, H) gives (H, n). */
static attn_tensor rows_of(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor s = *t;
    s.data = (char *)t->data + r0 * t->strides[0] * (int64_t)attn_dtype_size(t->dtype);
    s.shape[0] = t->shape[1], s.strides[0] = t->strides[1];
    s.shape[1] = n, s.strides[1] = t->strides[0];
    return s;
}

/* A packed tensor: rank `rank`, f32, shape (total, H[, cols]); an output
 * (`written`) with no stride 0 in a dimension of size > 1. */
static attn_status check_packed(const attn_tensor *t, const char *name, int rank, int64_t total, int64_t heads,
                                int64_t cols, bool written, attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    if (t->rank != rank)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be %d: (total, heads%s)", name, t->rank, rank,
                         rank == 3 ? ", dim" : "");
    if (t->dtype != ATTN_F32)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; paged attention takes f32", name, attn_dtype_name(t->dtype));
    if ((total >= 0 && t->shape[0] != total) || t->shape[0] < 0 || (heads >= 0 && t->shape[1] != heads) ||
        t->shape[1] < 1 || (rank == 3 && t->shape[2] != cols)) {
        char s[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must be (%lld, %lld%s%lld)", name, s,
                         (long long)(total >= 0 ? total : t->shape[0]), (long long)(heads >= 0 ? heads : t->shape[1]),
                         rank == 3 ? ", " : "", rank == 3 ? (long long)cols : 0LL);
    }
    if (written)
        for (int d = 0; d < rank; d++)
            if (t->shape[d] > 1 && t->strides[d] == 0)
                return attn_fail(err, ATTN_ERR_STRIDE, "%s has stride 0 in dimension %d of size %lld", name, d,
                                 (long long)t->shape[d]);
    return attn_check_extent(t, name, err);
}

/* The n sequences rows[0..n) (NULL: 0..n-1) of a checked view w. */
static attn_status attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu,
                          const attn_kv_paged_view *w, const int64_t *rows, int64_t n,
                          const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_status st;
    if ((st = attn_versioned_read(&o, sizeof o, options, "options", "start from attn_sdpa_options_default()", err)) ||
        (st = attn_kv_cache_check_causal(o.causal, err)))
        return st;
    if (o.mask)
        return attn_fail(err, ATTN_ERR_OPTION, "paged attention takes no mask (each sequence would need its own)");
    if (o.query_start || o.key_start || o.total_queries || o.total_keys)
        return attn_fail(err, ATTN_ERR_OPTION, "paged attention is not taken in pieces (query_start, key_start, "
                                               "total_queries, total_keys must be 0)");
    if ((st = check_packed(q, "q", 3, -1, -1, w->key_dim, false, err))) return st;
    const int64_t total = q->shape[0], Hq = q->shape[1];
    if (Hq % w->heads)
        return attn_fail(err, ATTN_ERR_HEADS, "q has %lld heads, not a multiple of the pages' %lld", (long long)Hq,
                         (long long)w->heads);
    if ((st = check_packed(out, "out", 3, total, Hq, w->value_dim, true, err)) ||
        (lse && (st = check_packed(lse, "lse", 2, total, Hq, 0, true, err))))
        return st;
    if (n < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "n is %lld; it must be 0 or more", (long long)n);
    if (!cu) return attn_fail(err, ATTN_ERR_NULL, "cu_seqlens_q is NULL");
    if (cu[0] != 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "cu_seqlens_q[0] is %lld; it must be 0", (long long)cu[0]);
    for (int64_t i = 0; i < n; i++)
        if (cu[i + 1] < cu[i])
            return attn_fail(err, ATTN_ERR_ARGUMENT, "cu_seqlens_q decreases at [%lld]", (long long)i + 1);
    if (cu[n] != total)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "cu_seqlens_q[%lld] is %lld but q has %lld rows", (long long)n,
                         (long long)cu[n], (long long)total);
    attn_tensor regions[5];
    attn_kv_paged_regions(regions, w);
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_named ins[6] = {{q, "q"}};
    for (int r = 0; r < 5; r++)
        ins[r + 1] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    if ((st = attn_check_no_overlap(outs, 2, ins, 6, err))) return st;

    /* Every sequence checked as attn_sdpa will check it, outputs and
     * workspace included, before anything is written. */
    int64_t longest = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t L = cu[i + 1] - cu[i], row = rows ? rows[i] : i, S = w->lengths[row];
        if (L == 0) continue;
        if (S == 0)
            return attn_fail(err, ATTN_ERR_ARGUMENT, "sequence %lld holds no positions but has %lld queries: append "
                                                     "keys and values first", (long long)row, (long long)L);
        if (S > longest) longest = S;
    }
    if (longest == 0) return ATTN_OK;
    int64_t head_rows, kb, vb, size = (int64_t)attn_dtype_size(w->dtype);
    if (!attn_mul_i64(w->heads, longest, &head_rows) || !attn_mul_i64(head_rows, w->key_dim * size, &kb) ||
        !attn_mul_i64(head_rows, w->value_dim * size, &vb) || kb > INT64_MAX - vb ||
        (uint64_t)(kb + vb) > SIZE_MAX)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the copy of the longest sequence's keys and values overflows");
    /* (zeroed: the checks below see the buffer before any sequence is in it) */
    char *copy = calloc((size_t)(kb + vb), 1);
    if (!copy) return attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for the copy of a sequence's keys and values");
    attn_context c = attn_context_default();
    if (o.context) attn_versioned_read(&c, sizeof c, o.context, "context", "", NULL);
    for (int pass = 0; pass < 2 && st == ATTN_OK; pass++)
        for (int64_t i = 0; i < n && st == ATTN_OK; i++) {
            int64_t L = cu[i + 1] - cu[i], row = rows ? rows[i] : i, S = w->lengths[row];
            if (L == 0) continue;
            int64_t ks[3] = {w->heads, S, w->key_dim}, vs[3] = {w->heads, S, w->value_dim};
            attn_tensor k, v, qi = rows_of(q, cu[i], L), oi = rows_of(out, cu[i], L), li;
            attn_tensor_init(&k, copy, w->dtype, 3, ks, NULL, NULL);
            attn_tensor_init(&v, copy + kb, w->dtype, 3, vs, NULL, NULL);
            if (lse) li = rows_of(lse, cu[i], L);
            if (pass == 0) { /* check */
                size_t need;
                st = attn_sdpa_workspace_size(&need, &oi, lse ? &li : NULL, NULL, &qi, &k, &v, &o, err);
                if (!st && c.workspace && need > c.workspace_size)
                    st = attn_fail(err, ATTN_ERR_WORKSPACE,
                                   "sequence %lld needs %zu bytes of workspace (attn_sdpa_workspace_size), %zu given",
                                   (long long)row, need, c.workspace_size);
            } else { /* run */
                attn_kv_paged_copy(&k, &v, w, row);
                st = attn_sdpa(&oi, lse ? &li : NULL, NULL, &qi, &k, &v, &o, err);
            }
        }
    free(copy);
    return st;
}

attn_status attn_kv_paged_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                 const attn_kv_paged_view *view, const attn_sdpa_options *options, attn_error *err) {
    attn_status st = attn_kv_paged_check(view, err);
    if (st) return st;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    attn_versioned_read(&w, sizeof w, view, "view", "", NULL);
    return attend(out, lse, q, cu_seqlens_q, &w, NULL, w.num_sequences, options, err);
}

attn_status attn_kv_pages_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const int64_t *cu_seqlens_q,
                                 const int64_t *seqs, int64_t n, const attn_kv_pages *pool,
                                 const attn_sdpa_options *options, attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    if (n > 0 && !seqs) return attn_fail(err, ATTN_ERR_NULL, "seqs is NULL");
    attn_status st;
    for (int64_t i = 0; i < n; i++)
        if ((st = attn_kv_pages_sequence(pool, seqs[i], NULL, NULL, err))) return st;
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, pool, NULL);
    return attend(out, lse, q, cu_seqlens_q, &w, seqs, n, options, err);
}
