/* piece.c -- one step of the ring as attention in pieces: the options that
 * place a (query segment, key segment) pair in the whole sequence
 * (attn_sdpa_options.query_start and friends), the pairs the causal limit
 * hides, the checks every rank makes before the ring starts, and the
 * elementwise helpers the two passes share. */
#include "ring.h"

#include <string.h>

/* Where segment a of this rank's queries starts among its rows. */
static int64_t query_row(const ring *R, int a) { return a == 0 ? 0 : R->qs.length[0]; }

attn_sdpa_options attn_ring_piece_options(const ring *R, const attn_mpi_shard *ks, int a, int b, attn_tensor *mask_view) {
    attn_sdpa_options o = R->so;
    o.query_start = R->qs.start[a], o.key_start = ks->start[b];
    o.total_queries = R->L, o.total_keys = R->S;
    if (ring_mask_cut(R->so.mask)) { /* this rank's rows of segment a, the whole's columns of segment b */
        const attn_tensor *m = R->so.mask;
        int r = m->rank;
        *mask_view = *m;
        if (r >= 1 && m->shape[r - 1] != 1) *mask_view = ring_rows(mask_view, r - 1, ks->start[b], ks->length[b]);
        if (r >= 2 && m->shape[r - 2] != 1) *mask_view = ring_rows(mask_view, r - 2, query_row(R, a), R->qs.length[a]);
        o.mask = mask_view;
    }
    return o;
}

bool attn_ring_piece_hidden(const ring *R, const attn_mpi_shard *ks, int a, int b) {
    if (R->so.causal == ATTN_CAUSAL_NONE) return false;
    int64_t off = R->so.causal == ATTN_CAUSAL_BOTTOM_RIGHT ? R->S - R->L : 0;
    int64_t last_query = R->qs.start[a] + R->qs.length[a] - 1;
    return ks->start[b] > last_query + off; /* the piece's first key is past the last query's limit */
}

attn_status attn_ring_check_outputs(const attn_tensor *const *outs, int n_outs, const attn_tensor *const *ins, int n_ins,
                                    const char *const *names, attn_error *err) {
    attn_status st;
    for (int i = 0; i < n_outs; i++)
        for (int j = 0; outs[i] && j < i + n_ins; j++) /* the outputs before it, then every input */
            if ((st = attn_check_disjoint(outs[i], names[i], j < i ? outs[j] : ins[j - i], names[j < i ? j : n_outs + j - i],
                                          err)))
                return st;
    return ATTN_OK;
}

attn_status attn_ring_check(const ring *R, int *rank, int64_t out_shape[ATTN_MAX_RANK], const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, attn_error *err) {
    const attn_sdpa_options *o = &R->so;
    if (o->dropout_p != 0)
        return ring_fail(err, ATTN_ERR_OPTION, "dropout is not taken across ranks (its mask would depend on the shards)");
    if (o->query_start || o->key_start || o->total_queries || o->total_keys)
        return ring_fail(err, ATTN_ERR_OPTION, "query_start, key_start, total_queries and total_keys are the ring's own: "
                         "leave them 0");
    if (!q || !k || !v || !q->data || !k->data || !v->data)
        return ring_fail(err, ATTN_ERR_NULL, "q, k, v or their data is NULL");
    /* The ring accumulates out and lse, and the gradients, in q's dtype,
     * which must then be f32 or f64; attn_sdpa widens a 16-bit q to f32
     * inside, which the caller does here. */
    if (q->dtype != ATTN_F32 && q->dtype != ATTN_F64)
        return ring_fail(err, ATTN_ERR_DTYPE, "q is %s; the ring takes f32 or f64 queries (widen 16-bit ones to f32)",
                         attn_dtype_name(q->dtype));
    /* Quantized rows are measured in bytes (attn.h, attn_tensor), and keys
     * quantized per channel in groups of positions, the ring's buffers and
     * messages in elements, which such rows have none of (attn_dtype_size
     * 0): they would travel as nothing. */
    const attn_tensor *kv[2] = {k, v};
    for (int i = 0; i < 2; i++)
        if (attn_dtype_size(kv[i]->dtype) == 0)
            return ring_fail(err, ATTN_ERR_DTYPE, "%s is %s; the ring takes float keys and values (attn_dequantize widens "
                             "quantized ones)", i ? "v" : "k", attn_dtype_name(kv[i]->dtype));
    /* The whole's keys as columns: checked here, then cut to this rank's
     * for attn_sdpa's checks. A mask of rank 0 (one bias for every score)
     * has no columns to cut; one of a rank no tensor has has no shape to
     * read, and is attn_sdpa's to refuse, in its words. */
    if (ring_mask_cut(o->mask)) {
        const attn_tensor *m = o->mask;
        int r = m->rank;
        if (m->shape[r - 1] != R->S && m->shape[r - 1] != 1)
            return ring_fail(err, ATTN_ERR_MASK, "the mask's last dimension is %lld; it must be the whole sequence's %lld "
                             "keys (or 1)", (long long)m->shape[r - 1], (long long)R->S);
        if (r >= 2 && m->shape[r - 2] != R->qs.rows && m->shape[r - 2] != 1)
            return ring_fail(err, ATTN_ERR_MASK, "the mask has %lld rows; it must have this rank's %lld queries (or 1)",
                             (long long)m->shape[r - 2], (long long)R->qs.rows);
    }
    attn_tensor mask;
    attn_sdpa_options local = attn_ring_local_options(R, k->shape[k->rank - 2], &mask);
    return attn_sdpa_shapes(rank, out_shape, NULL, q, k, v, &local, err);
}

attn_sdpa_options attn_ring_local_options(const ring *R, int64_t k_rows, attn_tensor *mask_view) {
    attn_sdpa_options local = R->so;
    const attn_tensor *m = R->so.mask;
    if (ring_mask_cut(m)) {
        int r = m->rank;
        *mask_view = m->shape[r - 1] == 1 ? *m : ring_rows(m, r - 1, 0, k_rows);
        local.mask = mask_view;
    }
    return local;
}

/* Whether t's elements are one C-order run. */
static bool contiguous(const attn_tensor *t) {
    int64_t step = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != step) return false;
        step *= t->shape[d];
    }
    return true;
}

/* dst = src: the same shape; a copy when both are one run of one dtype,
 * else attn_tensor_convert's element by element. */
attn_status attn_ring_copy(attn_tensor *dst, const attn_tensor *src, attn_error *err) {
    if (dst->dtype == src->dtype && contiguous(dst) && contiguous(src) && dst->rank == src->rank &&
        memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->rank) == 0) {
        memcpy(dst->data, src->data, (size_t)attn_tensor_numel(src) * attn_dtype_size(src->dtype));
        return ATTN_OK;
    }
    return attn_tensor_convert(dst, src, err);
}

/* The offset of element number i (C order) of t. */
static int64_t offset_of(const attn_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->rank - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return off;
}

void attn_ring_fill(attn_tensor *t, double x) {
    int64_t n = attn_tensor_numel(t);
    if (contiguous(t)) { /* the common case, without an index per element */
        for (int64_t i = 0; i < n; i++)
            if (t->dtype == ATTN_F64) ((double *)t->data)[i] = x;
            else ((float *)t->data)[i] = (float)x;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t at = offset_of(t, i);
        if (t->dtype == ATTN_F64) ((double *)t->data)[at] = x;
        else ((float *)t->data)[at] = (float)x;
    }
}

void attn_ring_add(attn_tensor *dst, const attn_tensor *src) {
    int64_t n = attn_tensor_numel(src);
    if (contiguous(dst) && contiguous(src)) {
        for (int64_t i = 0; i < n; i++)
            if (dst->dtype == ATTN_F64) ((double *)dst->data)[i] += ((const double *)src->data)[i];
            else ((float *)dst->data)[i] += ((const float *)src->data)[i];
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t a = offset_of(dst, i), b = offset_of(src, i);
        if (dst->dtype == ATTN_F64) ((double *)dst->data)[a] += ((const double *)src->data)[b];
        else ((float *)dst->data)[a] += ((const float *)src->data)[b];
    }
}
