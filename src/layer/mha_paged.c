/* mha_paged.c -- attn_mha_paged: one decoding (or prefill) step of the
 * attention layer for a batch of sequences in a paged KV cache, each of its
 * own length and position.
 *
 * It is attn_mha_cached (mha.c) for n sequences at once: sequence i's rows
 * of x are projected as attn_mha_cached projects them (the same products on
 * the same rows; RoPE at the sequence's own positions, after what it holds),
 * the new keys and values of every sequence go into the pool in one
 * attn_kv_pages_append, the new queries attend in one attn_kv_pages_attend
 * (the kernels read the pages in place, the batch is one job), and each
 * sequence's rows go through out_proj as attn_mha_cached's would. So each
 * sequence gets bitwise what attn_mha_cached gives it alone, in a
 * contiguous cache holding the same keys. */
#include "layer/mha.h"
#include "sdpa/sdpa.h"

#include <stdlib.h>
#include <string.h>

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

attn_status attn_mha_paged(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens, const int64_t *seqs,
                           int64_t n, attn_kv_pages *pool, const attn_tensor *const *masks,
                           const attn_mha_params *params, const attn_mha_options *options, attn_error *err) {
    attn_mha_call m;
    memset(&m, 0, sizeof m);
    m.p = attn_mha_params_default(), m.o = attn_mha_options_default();
    if (!params || !pool || !out || !x) return attn_fail(err, ATTN_ERR_NULL, "params, pool, out and x must not be NULL");
    attn_status st = attn_versioned_read(&m.p, sizeof m.p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_versioned_read(&m.o, sizeof m.o, options, "options", "start from attn_mha_options_default()", err))) return st;
    if (!options) m.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* as attn_mha_cached's NULL options */
    if (m.o.attn_mask || m.o.key_padding_mask || m.o.add_zero_attn || m.p.bias_k)
        return attn_fail(err, ATTN_ERR_OPTION, "attn_mha_paged takes no attn_mask, key_padding_mask, bias_k/bias_v or "
                                               "add_zero_attn (a mask per sequence goes in masks)");
    if ((st = attn_kv_cache_check_causal(m.o.causal, err))) return st;
    if (x->rank != 2) return attn_fail(err, ATTN_ERR_RANK, "x has rank %d; it must be packed (total, embed_dim)", x->rank);
    if (x->dtype != ATTN_F32) return attn_fail(err, ATTN_ERR_DTYPE, "x is %s; a paged pool takes f32", attn_dtype_name(x->dtype));
    attn_tensor out_view;
    if ((st = attn_mha_plan(&m, &out_view, out, x, x, x, err))) return st; /* x as one unbatched (total, E) sequence */
    const int64_t T = m.L;
    if (n > 0 && !seqs) return attn_fail(err, ATTN_ERR_NULL, "seqs is NULL");
    if ((st = attn_check_cu_seqlens(cu_seqlens, n, T, "cu_seqlens", err))) return st;
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, pool, NULL);
    if (w.heads != m.Hkv || w.key_dim != m.D || w.value_dim != m.D || w.dtype == ATTN_F64)
        return attn_fail(err, ATTN_ERR_SHAPE, "the pool holds %lld heads of %lld and %lld; the layer needs %lld of %lld",
                         (long long)w.heads, (long long)w.key_dim, (long long)w.value_dim, (long long)m.Hkv,
                         (long long)m.D);
    /* The pool is written: out, x and the parameters keep clear of it. */
    attn_tensor regions[5];
    attn_kv_paged_regions(regions, &w);
    attn_named ins[ATTN_MHA_INPUTS];
    const attn_named outs[3] = {{out, "out"}, {&regions[0], "the pool's key pages"}, {&regions[1], "the pool's value pages"}};
    attn_mha_inputs(ins, &m, x, NULL, NULL);
    if ((st = attn_check_no_overlap(outs, 3, ins, ATTN_MHA_INPUTS, err))) return st;
    /* (length[i]: what sequence i holds before the call) */
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t)) return attn_fail(err, ATTN_ERR_OVERFLOW, "%lld sequences overflow", (long long)n);
    int64_t *length = malloc((size_t)(n > 0 ? n : 1) * sizeof *length);
    if (!length) return attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for %lld sequences' lengths", (long long)n);
    for (int64_t i = 0; i < n && !st; i++) st = attn_kv_pages_sequence(pool, seqs[i], &length[i], NULL, err);

    /* q (T, Hq·D), k and v (T, Hkv·D), the heads' output (T, E): packed as x */
    size_t es = attn_dtype_size(m.dt);
    int64_t nq = T * m.Hq * m.D, nk = T * m.Hkv * m.D; /* fit: attn_mha_plan checked the layer's sizes */
    char *q = NULL, *k = NULL, *v = NULL, *heads = NULL;
    if (!st) {
        q = calloc((size_t)nq + 1, es), k = calloc((size_t)nk + 1, es), v = calloc((size_t)nk + 1, es);
        heads = calloc((size_t)nq + 1, es);
        if (!q || !k || !v || !heads) st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the layer's projections");
    }
    attn_rope_options r = attn_rope_options_default();
    if (!st && m.o.rope)
        st = attn_versioned_read(&r, sizeof r, m.o.rope, "options->rope", "start from attn_rope_options_default()", err);
    m.rope_in_attention = false; /* the pool holds turned keys: turn the new ones before appending */
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t r0 = cu_seqlens[i], L = cu_seqlens[i + 1] - r0;
        if (L == 0) continue;
        attn_mha_call s = sequence_call(&m, r0, L);
        attn_rope_options ri = r;
        ri.position_offset += length[i]; /* sequence i's new positions follow its own */
        if (m.o.rope) s.o.rope = &ri;
        st = attn_mha_project_qkv(q + r0 * m.Hq * m.D * (int64_t)es, k + r0 * m.Hkv * m.D * (int64_t)es,
                                  v + r0 * m.Hkv * m.D * (int64_t)es, &s, L, false, err);
    }
    attn_tensor tq, tk, tv, th;
    int64_t qs[3] = {T, m.Hq, m.D}, ks[3] = {T, m.Hkv, m.D};
    attn_tensor_init(&tq, q, m.dt, 3, qs, NULL, NULL), attn_tensor_init(&th, heads, m.dt, 3, qs, NULL, NULL);
    attn_tensor_init(&tk, k, m.dt, 3, ks, NULL, NULL), attn_tensor_init(&tv, v, m.dt, 3, ks, NULL, NULL);
    /* One append for every sequence: it checks everything (a full pool, a
     * sequence named twice) before it writes. */
    if (!st && (st = attn_kv_pages_append(pool, seqs, n, &tk, &tv, cu_seqlens, err))) goto done;
    attn_sdpa_options so;
    if (!st && ((st = attn_mha_sdpa_options(&so, &m, m.o.causal, NULL, err)) ||
                (st = attn_kv_pages_attend(&th, NULL, &tq, cu_seqlens, seqs, n, pool, masks, &so, err)))) {
        for (int64_t i = 0; i < n; i++) attn_kv_pages_truncate(pool, seqs[i], length[i], NULL); /* as they were */
        goto done;
    }
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t r0 = cu_seqlens[i], L = cu_seqlens[i + 1] - r0;
        if (L == 0) continue;
        attn_mha_call s = sequence_call(&m, r0, L);
        attn_tensor oi = out_view;
        oi.data = (char *)out_view.data + r0 * out_view.strides[1] * (int64_t)es, oi.shape[1] = L;
        if (!attn_mha_project_out(&oi, heads + r0 * m.E * (int64_t)es, &s))
            st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a block of packed weights");
    }
done:
    free(length), free(q), free(k), free(v), free(heads);
    return st;
}
