/* test_abi_kv_desc.c -- a program that knows the KV caches' description
 * structs as they were before key_dtype was added at their end, and as they
 * were before residual was (the structs below are copies of
 * attn_kv_cache_desc, attn_kv_pages_desc and attn_kv_paged_view from those
 * headers), run with today's library under
 * ASan+UBSan. Each struct lives in a heap block of exactly its old size, so
 * a library that read or wrote past the caller's struct_size stops with a
 * heap-buffer-overflow. The caches it builds must be what they were: f32
 * keys, read back exactly, attended bitwise as attn_sdpa attends the same
 * rows. */
#include "attn.h"
#include "../check.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct old_cache_desc {
    size_t struct_size;
    int64_t batch, heads, capacity, key_dim, value_dim;
    attn_dtype dtype;
} old_cache_desc;

typedef struct old_pages_desc {
    size_t struct_size;
    int64_t heads, key_dim, value_dim;
    attn_dtype dtype;
    int64_t page_size, num_pages, max_sequences, max_length;
} old_pages_desc;

typedef struct old_paged_view {
    size_t struct_size;
    attn_dtype dtype;
    int64_t heads, key_dim, value_dim, page_size, num_pages;
    const void *k_pages, *v_pages;
    int64_t num_sequences;
    const int64_t *lengths;
    const int32_t *page_table;
    int64_t table_stride;
    const int64_t *table_offsets;
} old_paged_view;

/* as they were with key_dtype, scales and hadamard, before residual */
typedef struct keyed_cache_desc {
    size_t struct_size;
    int64_t batch, heads, capacity, key_dim, value_dim;
    attn_dtype dtype, key_dtype;
    const float *k_scale, *v_scale;
    int hadamard;
} keyed_cache_desc;

typedef struct keyed_pages_desc {
    size_t struct_size;
    int64_t heads, key_dim, value_dim;
    attn_dtype dtype;
    int64_t page_size, num_pages, max_sequences, max_length;
    attn_dtype key_dtype;
    const float *k_scale, *v_scale;
    int hadamard;
} keyed_pages_desc;

typedef struct keyed_paged_view {
    size_t struct_size;
    attn_dtype dtype;
    int64_t heads, key_dim, value_dim, page_size, num_pages;
    const void *k_pages, *v_pages;
    int64_t num_sequences;
    const int64_t *lengths;
    const int32_t *page_table;
    int64_t table_stride;
    const int64_t *table_offsets;
    attn_dtype key_dtype;
    const void *k_residual;
    const float *k_scale, *v_scale;
    int hadamard;
} keyed_paged_view;

enum { H = 2, S = 40, E = 8, EV = 4 };

/* q4c keys from the descs before residual: the window of the group being
 * filled only, positions 32 .. 39 in f16; the pool's view written into the
 * older view, attended, and the cache gathered as the pool is. */
static void keys_before_residual(const attn_tensor *tk, const attn_tensor *tv, const attn_tensor *tpk,
                                 const attn_tensor *tpv, const attn_tensor *tpq) {
    attn_error err;
    keyed_pages_desc *pd = malloc(sizeof *pd);
    memset(pd, 0, sizeof *pd);
    pd->struct_size = sizeof *pd, pd->heads = H, pd->key_dim = E, pd->value_dim = EV, pd->dtype = ATTN_F32;
    pd->page_size = 32, pd->num_pages = 4, pd->max_sequences = 1, pd->key_dtype = ATTN_Q4C;
    keyed_cache_desc *cd = malloc(sizeof *cd);
    memset(cd, 0, sizeof *cd);
    cd->struct_size = sizeof *cd, cd->batch = 1, cd->heads = H, cd->capacity = 64, cd->key_dim = E, cd->value_dim = EV;
    cd->dtype = ATTN_F32, cd->key_dtype = ATTN_Q4C;
    size_t pb = 0, cb = 0;
    attn_kv_pages *pool = NULL;
    attn_kv_cache *cache = NULL;
    int64_t id = 0, cu[2] = {0, S}, cq[2] = {0, 1};
    attn_status st = attn_kv_pages_bytes(&pb, (const attn_kv_pages_desc *)pd, &err);
    if (!st) st = attn_kv_cache_bytes(&cb, (const attn_kv_cache_desc *)cd, &err);
    void *pmem = st ? NULL : malloc(pb), *cmem = st ? NULL : malloc(cb);
    if (!st) st = attn_kv_pages_init(&pool, pmem, pb, (const attn_kv_pages_desc *)pd, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, tpk, tpv, cu, &err);
    if (!st) st = attn_kv_cache_init(&cache, cmem, cb, (const attn_kv_cache_desc *)cd, &err);
    if (!st) st = attn_kv_cache_append(cache, tk, tv, &err);
    float gk[H * S * E], gv[H * S * EV], ck[H * S * E], cv[H * S * EV], o1[H * EV], o2[H * EV];
    int64_t ks[3] = {H, S, E}, vs[3] = {H, S, EV}, os[3] = {1, H, EV};
    attn_tensor tgk, tgv, tck, tcv, t1, t2;
    attn_tensor_init(&tgk, gk, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, vs, NULL, NULL);
    attn_tensor_init(&tck, ck, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tcv, cv, ATTN_F32, 3, vs, NULL, NULL);
    attn_tensor_init(&t1, o1, ATTN_F32, 3, os, NULL, NULL), attn_tensor_init(&t2, o2, ATTN_F32, 3, os, NULL, NULL);
    if (!st) st = attn_kv_pages_gather(&tgk, &tgv, pool, id, &err);
    if (!st) st = attn_kv_cache_gather(&tck, &tcv, cache, &err);
    /* positions 32 .. 39 are the window's f16 rows, 0 .. 31 a quantized group: not all f16 values */
    int window_f16 = 1;
    for (int i = 32 * E; i < S * E && !st; i++) window_f16 &= gk[i] == attn_f16_to_f32(attn_f32_to_f16(gk[i]));
    check(!st && !memcmp(gk, ck, sizeof gk) && window_f16, "q4c_pool_and_cache_from_descs_before_residual",
          "%s", st ? err.message : "the cache's keys differ from the pool's, or the window is not f16");
    keyed_paged_view *w = malloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->struct_size = sizeof *w;
    attn_sdpa_options o = attn_sdpa_options_default();
    if (!st) st = attn_kv_pages_view((attn_kv_paged_view *)w, pool, &err);
    if (!st) st = attn_kv_paged_attend(&t1, NULL, tpq, cq, (const attn_kv_paged_view *)w, NULL, &o, &err);
    if (!st) st = attn_kv_pages_attend(&t2, NULL, tpq, cq, &id, 1, pool, NULL, &o, &err);
    check(!st && w->struct_size == sizeof *w && w->key_dtype == ATTN_Q4C && w->k_residual && !memcmp(o1, o2, sizeof o1),
          "q4c_view_before_residual_written_and_read_to_its_size", "%s", st ? err.message : "results differ");
    free(w), free(pmem), free(cmem), free(pd), free(cd);

    /* a pool with a window (this header's desc) seen through the view from
     * before residual: read back, the window would be 0, so it is refused */
    attn_kv_pages_desc nd = attn_kv_pages_desc_default();
    nd.heads = H, nd.key_dim = E, nd.value_dim = EV, nd.dtype = ATTN_F32, nd.page_size = 32, nd.num_pages = 4;
    nd.max_sequences = 1, nd.key_dtype = ATTN_Q4C, nd.residual = 32;
    pool = NULL, pmem = NULL, id = 0;
    st = attn_kv_pages_bytes(&pb, &nd, &err);
    if (!st) pmem = malloc(pb);
    if (!st) st = attn_kv_pages_init(&pool, pmem, pb, &nd, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, tpk, tpv, cu, &err);
    w = malloc(sizeof *w);
    memset(w, 0xab, sizeof *w);
    w->struct_size = sizeof *w;
    attn_status refused = st ? st : attn_kv_pages_view((attn_kv_paged_view *)w, pool, &err);
    check(!st && refused == ATTN_ERR_OPTION && strstr(err.message, "residual") && w->struct_size == sizeof *w &&
              w->heads == (int64_t)0xabababababababab,
          "view_before_residual_of_a_pool_with_a_window_refused", "status %d, %s", (int)refused, err.message);
    attn_kv_paged_view nw = attn_kv_paged_view_default();
    if (!st) st = attn_kv_pages_view(&nw, pool, &err);
    check(!st && nw.residual == 32, "view_of_this_header_carries_the_window", "%s", st ? err.message : "residual not 32");
    free(w), free(pmem);
}

/* The older cache desc ends with dtype, and its size rounds up to 8: its
 * last 4 bytes are padding, where today's desc has key_dtype. A caller
 * sets the fields, never the padding: here it holds 0xab bytes, and then
 * ATTN_Q4C's value, as stack garbage might. Either way the cache is the
 * f32 cache the caller described: the same bytes as with zero padding,
 * its keys read back exactly, attended bitwise as attn_sdpa attends. */
static void garbage_in_the_padding(const attn_tensor *tk, const attn_tensor *tv, const attn_tensor *tq,
                                   const float *want, size_t bytes_zeroed) {
    const size_t pad = offsetof(old_cache_desc, dtype) + sizeof(attn_dtype);
    const attn_dtype q4c = ATTN_Q4C;
    for (int round = 0; round < 2; round++) {
        attn_error err;
        old_cache_desc *cd = malloc(sizeof *cd);
        memset(cd, 0xab, sizeof *cd);
        if (round == 1) memcpy((char *)cd + pad, &q4c, sizeof q4c);
        cd->struct_size = sizeof *cd, cd->batch = 1, cd->heads = H, cd->capacity = S, cd->key_dim = E;
        cd->value_dim = EV, cd->dtype = ATTN_F32;
        float gk[H * S * E], gv[H * S * EV], o1[H * EV];
        int64_t ks[3] = {H, S, E}, vs[3] = {H, S, EV}, os[3] = {H, 1, EV};
        attn_tensor tgk, tgv, t1;
        attn_tensor_init(&tgk, gk, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, vs, NULL, NULL);
        attn_tensor_init(&t1, o1, ATTN_F32, 3, os, NULL, NULL);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        size_t bytes = 0;
        attn_kv_cache *cache = NULL;
        attn_status st = attn_kv_cache_bytes(&bytes, (const attn_kv_cache_desc *)cd, &err);
        void *mem = st ? NULL : malloc(bytes);
        if (!st) st = attn_kv_cache_init(&cache, mem, bytes, (const attn_kv_cache_desc *)cd, &err);
        if (!st) st = attn_kv_cache_append(cache, tk, tv, &err);
        if (!st) st = attn_kv_cache_gather(&tgk, &tgv, cache, &err);
        if (!st) st = attn_kv_cache_attend(&t1, NULL, tq, cache, &o, &err);
        check(!st && bytes == bytes_zeroed && !memcmp(gk, tk->data, sizeof gk) && !memcmp(gv, tv->data, sizeof gv) &&
                  !memcmp(o1, want, sizeof o1),
              round ? "cache_desc_without_key_dtype_q4c_in_its_padding_holds_f32_keys"
                    : "cache_desc_without_key_dtype_garbage_in_its_padding_holds_f32_keys",
              "%s", st ? err.message : "bytes or results differ");
        free(mem), free(cd);
    }
}

static float rnd(unsigned *s) { return (float)((*s = *s * 1103515245u + 12345u) >> 8 & 0xffff) / 32768.0f - 1.0f; }

int main(void) {
    unsigned seed = 7;
    float k[H * S * E], v[H * S * EV], q[H * E], o1[H * EV], o2[H * EV];
    float gk[H * S * E], gv[H * S * EV];
    for (int i = 0; i < H * S * E; i++) k[i] = rnd(&seed);
    for (int i = 0; i < H * S * EV; i++) v[i] = rnd(&seed);
    for (int i = 0; i < H * E; i++) q[i] = rnd(&seed);
    int64_t ks[3] = {H, S, E}, vs[3] = {H, S, EV}, qs[3] = {H, 1, E}, os[3] = {H, 1, EV};
    attn_tensor tk, tv, tq, t1, t2, tgk, tgv;
    attn_tensor_init(&tk, k, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 3, vs, NULL, NULL);
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(&t1, o1, ATTN_F32, 3, os, NULL, NULL), attn_tensor_init(&t2, o2, ATTN_F32, 3, os, NULL, NULL);
    attn_tensor_init(&tgk, gk, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, vs, NULL, NULL);
    attn_error err;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (attn_sdpa(&t2, NULL, NULL, &tq, &tk, &tv, &o, &err)) printf("FAIL attn_sdpa: %s\n", err.message), n_failed++;

    /* the contiguous cache from the older desc */
    old_cache_desc *cd = malloc(sizeof *cd);
    memset(cd, 0, sizeof *cd);
    cd->struct_size = sizeof *cd, cd->batch = 1, cd->heads = H, cd->capacity = S, cd->key_dim = E, cd->value_dim = EV;
    cd->dtype = ATTN_F32;
    size_t bytes = 0, bytes_zeroed = 0;
    attn_kv_cache *cache = NULL;
    attn_status st = attn_kv_cache_bytes(&bytes, (const attn_kv_cache_desc *)cd, &err);
    bytes_zeroed = bytes;
    void *mem = st ? NULL : malloc(bytes);
    if (!st) st = attn_kv_cache_init(&cache, mem, bytes, (const attn_kv_cache_desc *)cd, &err);
    if (!st) st = attn_kv_cache_append(cache, &tk, &tv, &err);
    if (!st) st = attn_kv_cache_gather(&tgk, &tgv, cache, &err);
    if (!st) st = attn_kv_cache_attend(&t1, NULL, &tq, cache, &o, &err);
    check(!st && !memcmp(gk, k, sizeof k) && !memcmp(gv, v, sizeof v) && !memcmp(o1, o2, sizeof o1),
          "cache_from_a_desc_without_key_dtype_holds_f32_keys", "%s", st ? err.message : "results differ");
    free(mem), free(cd);
    garbage_in_the_padding(&tk, &tv, &tq, o2, bytes_zeroed);

    /* the paged pool from the older desc, and its view into an older view struct */
    old_pages_desc *pd = malloc(sizeof *pd);
    memset(pd, 0, sizeof *pd);
    pd->struct_size = sizeof *pd, pd->heads = H, pd->key_dim = E, pd->value_dim = EV, pd->dtype = ATTN_F32;
    pd->page_size = 16, pd->num_pages = 4, pd->max_sequences = 1;
    attn_kv_pages *pool = NULL;
    int64_t id = 0, cu[2] = {0, S}, cq[2] = {0, 1};
    st = attn_kv_pages_bytes(&bytes, (const attn_kv_pages_desc *)pd, &err);
    mem = st ? NULL : malloc(bytes);
    float pk[S * H * E], pv[S * H * EV], pq[H * E], po[H * EV];
    for (int h = 0; h < H; h++) /* packed (S, Hk, dim) and (1, Hq, E) */
        for (int j = 0; j < S; j++) {
            memcpy(pk + (j * H + h) * E, k + (h * S + j) * E, sizeof(float) * E);
            memcpy(pv + (j * H + h) * EV, v + (h * S + j) * EV, sizeof(float) * EV);
        }
    memcpy(pq, q, sizeof pq);
    int64_t pks[3] = {S, H, E}, pvs[3] = {S, H, EV}, pqs[3] = {1, H, E}, pos[3] = {1, H, EV};
    attn_tensor tpk, tpv, tpq, tpo;
    attn_tensor_init(&tpk, pk, ATTN_F32, 3, pks, NULL, NULL), attn_tensor_init(&tpv, pv, ATTN_F32, 3, pvs, NULL, NULL);
    attn_tensor_init(&tpq, pq, ATTN_F32, 3, pqs, NULL, NULL), attn_tensor_init(&tpo, po, ATTN_F32, 3, pos, NULL, NULL);
    if (!st) st = attn_kv_pages_init(&pool, mem, bytes, (const attn_kv_pages_desc *)pd, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, &tpk, &tpv, cu, &err);
    if (!st) st = attn_kv_pages_attend(&tpo, NULL, &tpq, cq, &id, 1, pool, NULL, &o, &err);
    int same = 1;
    for (int h = 0; h < H && !st; h++) same &= !memcmp(po + h * EV, o2 + h * EV, sizeof(float) * EV);
    check(!st && same, "pool_from_a_desc_without_key_dtype_holds_f32_keys", "%s", st ? err.message : "results differ");
    old_paged_view *w = malloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->struct_size = sizeof *w;
    if (!st) st = attn_kv_pages_view((attn_kv_paged_view *)w, pool, &err);
    if (!st) st = attn_kv_paged_attend(&tpo, NULL, &tpq, cq, (const attn_kv_paged_view *)w, NULL, &o, &err);
    same = 1;
    for (int h = 0; h < H && !st; h++) same &= !memcmp(po + h * EV, o2 + h * EV, sizeof(float) * EV);
    check(!st && same && w->struct_size == sizeof *w && w->dtype == ATTN_F32, "older_view_written_and_read_to_its_size",
          "%s", st ? err.message : "results differ");
    /* a struct_size no attn.h's view had, ending before the pool's sizes
     * and tables (a binding's miscount): written back it would describe no
     * pool, so it is refused, and not a byte of it written */
    size_t shorts[3] = {sizeof(size_t), offsetof(attn_kv_paged_view, key_dim),
                        offsetof(attn_kv_paged_view, table_stride)};
    attn_status refused = ATTN_ERR_OPTION;
    int untouched = 1, i = 0;
    for (; i < 3 && !st && refused == ATTN_ERR_OPTION && untouched; i++) {
        unsigned char *sw = malloc(shorts[i]); /* exactly that many bytes */
        memset(sw, 0xab, shorts[i]);
        memcpy(sw, &shorts[i], sizeof shorts[i]);
        refused = attn_kv_pages_view((attn_kv_paged_view *)(void *)sw, pool, &err);
        untouched = !memcmp(sw, &shorts[i], sizeof shorts[i]);
        for (size_t b = sizeof(size_t); b < shorts[i]; b++) untouched &= sw[b] == 0xab;
        free(sw);
    }
    check(!st && i == 3 && refused == ATTN_ERR_OPTION && untouched && strstr(err.message, "table_stride"),
          "view_too_short_for_any_pool_refused", "struct_size %zu: status %d, %s", shorts[i ? i - 1 : 0],
          (int)refused, err.message);
    free(w), free(mem), free(pd);
    keys_before_residual(&tk, &tv, &tpk, &tpv, &tpq);
    attn_shutdown();
    return n_failed ? 1 : 0;
}
