/* kernel_walk.c -- the explainer's second part: the toy head computed the
 * ways fast programs compute attention (tiles, the online softmax, the KV
 * cache, pages, split-KV and ring attention, the backward pass), every
 * number through the library's own calls, so the terminal and the page show
 * the arithmetic the kernels do. attn_teach.h lists the nine steps. */
#include "attn_teach.h"
#include "base/base.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t attn_kernel_walk_options_init(attn_kernel_walk_options *options, size_t struct_size) {
    static const attn_kernel_walk_options DEFAULTS = {.struct_size = sizeof DEFAULTS, .block = 2, .row = -1,
                                                      .workers = 2, .ranks = 3};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* A 2-D f64 view of rows [r0, r1) of a (rows, cols) matrix. */
static attn_tensor rows_of(const double *m, int cols, int r0, int r1) {
    attn_tensor t;
    int64_t shape[2] = {r1 - r0, cols};
    attn_tensor_init(&t, (void *)(m + (size_t)r0 * cols), ATTN_F64, 2, shape, NULL, NULL);
    return t;
}

static attn_tensor vec(double *p, int64_t n) {
    attn_tensor t;
    attn_tensor_init(&t, p, ATTN_F64, 1, &n, NULL, NULL);
    return t;
}

/* out (q1 - q0, d_v) and lse (q1 - q0) of queries [q0, q1) against keys [k0, k1). */
static attn_status attend(double *out, double *lse, const attn_kernel_walk *w, int q0, int q1, int k0, int k1,
                          attn_causal causal, attn_error *err) {
    attn_tensor q = rows_of(w->Q, w->d_k, q0, q1), k = rows_of(w->K, w->d_k, k0, k1),
                v = rows_of(w->V, w->d_v, k0, k1), o = rows_of(out, w->d_v, 0, q1 - q0), l = vec(lse, q1 - q0);
    attn_sdpa_options opt = attn_sdpa_options_default();
    opt.has_scale = 1, opt.scale = w->scale, opt.causal = causal;
    return attn_sdpa(&o, lse ? &l : NULL, NULL, &q, &k, &v, &opt, err);
}

/* Merge (out, lse) of `rows` rows with a part's (p_out, p_lse), in place. */
static attn_status merge(double *out, double *lse, const double *p_out, const double *p_lse, int rows, int d_v,
                         attn_error *err) {
    attn_tensor o = rows_of(out, d_v, 0, rows), l = vec(lse, rows);
    attn_tensor po = rows_of(p_out, d_v, 0, rows), pl = vec((double *)p_lse, rows);
    const attn_tensor *outs[2] = {&o, &po}, *lses[2] = {&l, &pl};
    return attn_sdpa_merge(&o, &l, outs, lses, 2, err);
}

attn_status attn_kernel_cost(double *score_bytes, double *workspace_bytes, int64_t T, attn_error *err) {
    enum { D = 64 };
    if (!score_bytes || !workspace_bytes) return attn_fail(err, ATTN_ERR_NULL, "score_bytes or workspace_bytes is NULL");
    if (T < 1 || T > 65536) return attn_fail(err, ATTN_ERR_ARGUMENT, "T (%lld) must be 1 to 65536", (long long)T);
    /* The size depends on the shapes alone: the inputs are one row seen T
     * times (stride 0); the output needs its own memory, which is not written. */
    static const float one[D];
    float *out_data = malloc(sizeof(float) * (size_t)T * D);
    if (!out_data) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate an output of %lld rows", (long long)T);
    int64_t shape[2] = {T, D}, broadcast[2] = {0, 1};
    attn_tensor q, out;
    attn_tensor_init(&q, (void *)one, ATTN_F32, 2, shape, broadcast, NULL);
    attn_tensor_init(&out, out_data, ATTN_F32, 2, shape, NULL, NULL);
    attn_context c = attn_context_default();
    c.num_threads = 1;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    size_t bytes = 0;
    attn_status st = attn_sdpa_workspace_size(&bytes, &out, NULL, NULL, &q, &q, &q, &o, err);
    free(out_data);
    if (st) return st;
    *score_bytes = 4.0 * (double)T * (double)T;
    *workspace_bytes = (double)bytes;
    return ATTN_OK;
}

/* The doubles of the walk, carved from one block. */
static attn_status carve(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, dk = w->d_k, dv = w->d_v, nb = w->nb, R = w->ranks;
    double **slot[] = {&w->Q, &w->K, &w->V, &w->scaled, &w->weights, &w->output, &w->causal_output, &w->tiles,
                       &w->block_out, &w->block_lse, &w->run_m, &w->run_l, &w->run_rescale, &w->run_acc,
                       &w->run_out, &w->run_lse, &w->row_weights, &w->cache_output, &w->split_out, &w->split_lse,
                       &w->split_merged, &w->page_out, &w->page_ref, &w->ring_out, &w->ring_lse, &w->grad_dO,
                       &w->grad_P, &w->grad_dP, &w->grad_dS, &w->grad_dS_lib, &w->grad_dq};
    size_t count[] = {(size_t)n * dk, (size_t)n * dk, (size_t)n * dv, (size_t)n * n, (size_t)n * n, (size_t)n * dv,
                      (size_t)n * dv, (size_t)n * n, (size_t)nb * dv, nb, nb, nb, nb, (size_t)nb * dv,
                      (size_t)nb * dv, nb, n, (size_t)n * dv, (size_t)w->workers * dv, w->workers, dv,
                      2 * (size_t)dv, 2 * (size_t)dv, (size_t)R * n * dv, (size_t)R * n, dv, n, n, n, n, dk};
    size_t total = 0;
    for (size_t i = 0; i < sizeof count / sizeof count[0]; i++) total += count[i];
    double *block = calloc(total, sizeof(double));
    w->block_kind = calloc((size_t)nb * nb, sizeof(int));
    if (!block || !w->block_kind) {
        free(block);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the kernel walk's numbers");
    }
    for (size_t i = 0; i < sizeof count / sizeof count[0]; i++) *slot[i] = block, block += count[i];
    return ATTN_OK;
}

/* 1: the score matrix's bytes against the streaming kernel's workspace. */
static attn_status step_cost(attn_kernel_walk *w, attn_error *err) {
    for (int i = 0; i < ATTN_KERNEL_COST_POINTS; i++) {
        w->cost_T[i] = (int64_t)64 << (2 * i); /* 64, 256, ... 65536 */
        attn_status st = attn_kernel_cost(&w->cost_scores[i], &w->cost_workspace[i], w->cost_T[i], err);
        if (st) return st;
    }
    return ATTN_OK;
}

/* 2: each block of scores computed alone, by attn_scores on the block's rows
 * of Q and of K. 4: a causal kernel skips a block whose every key comes
 * after every query (j > i throughout: all masked), computes in part a block
 * the diagonal crosses, and the rest whole. */
static attn_status step_tiles(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, b = w->block;
    double tile[8 * 8]; /* a block: at most 8 x 8 */
    for (int bi = 0; bi < w->nb; bi++)
        for (int bj = 0; bj < w->nb; bj++) {
            int q0 = bi * b, q1 = q0 + b < n ? q0 + b : n, k0 = bj * b, k1 = k0 + b < n ? k0 + b : n;
            attn_tensor q = rows_of(w->Q, w->d_k, q0, q1), k = rows_of(w->K, w->d_k, k0, k1), s;
            int64_t shape[2] = {q1 - q0, k1 - k0};
            attn_tensor_init(&s, tile, ATTN_F64, 2, shape, NULL, NULL);
            attn_sdpa_options o = attn_sdpa_options_default();
            o.has_scale = 1, o.scale = w->scale;
            attn_status st = attn_scores(&s, &q, &k, &o, err);
            if (st) return st;
            for (int i = q0; i < q1; i++)
                for (int j = k0; j < k1; j++) w->tiles[(size_t)i * n + j] = tile[(i - q0) * (k1 - k0) + (j - k0)];
            /* The block's first key after its last query: all masked. Its last
             * key at or before its first query: none masked. */
            int kind = k0 > q1 - 1 ? 0 : k1 - 1 <= q0 ? 2 : 1;
            w->block_kind[bi * w->nb + bj] = kind;
            if (kind == 0) w->blocks_skipped++;
            else w->blocks_computed++, w->scores_computed += (int64_t)(q1 - q0) * (k1 - k0);
        }
    return ATTN_OK;
}

/* 3: one row's keys a block at a time, merged by lse. The running maximum
 * is the largest scaled score seen, from the tiles just computed. */
static attn_status step_online(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, b = w->block, dv = w->d_v, r = w->row;
    double m = -INFINITY;
    for (int bj = 0; bj < w->nb; bj++) {
        int k0 = bj * b, k1 = k0 + b < n ? k0 + b : n;
        double *bo = w->block_out + (size_t)bj * dv, *ro = w->run_out + (size_t)bj * dv;
        attn_status st = attend(bo, &w->block_lse[bj], w, r, r + 1, k0, k1, ATTN_CAUSAL_NONE, err);
        if (st) return st;
        if (bj == 0) {
            memcpy(ro, bo, sizeof(double) * (size_t)dv);
            w->run_lse[0] = w->block_lse[0];
        } else {
            memcpy(ro, ro - dv, sizeof(double) * (size_t)dv);
            w->run_lse[bj] = w->run_lse[bj - 1];
            if ((st = merge(ro, &w->run_lse[bj], bo, &w->block_lse[bj], 1, dv, err))) return st;
        }
        double m_old = m;
        for (int j = k0; j < k1; j++) m = fmax(m, w->tiles[(size_t)r * n + j]);
        w->run_m[bj] = m;
        w->run_rescale[bj] = bj ? exp(m_old - m) : 1.0;
        w->run_l[bj] = exp(w->run_lse[bj] - m);
        for (int j = 0; j < dv; j++) w->run_acc[(size_t)bj * dv + j] = w->run_l[bj] * ro[j];
    }
    for (int j = 0; j < n; j++) w->row_weights[j] = exp(w->tiles[(size_t)r * n + j] - w->run_lse[w->nb - 1]);
    return ATTN_OK;
}

/* 5: the causal head token by token through an f64 KV cache. */
static attn_status step_cache(attn_kernel_walk *w, attn_error *err) {
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.capacity = w->n, d.key_dim = w->d_k, d.value_dim = w->d_v, d.dtype = ATTN_F64;
    size_t bytes;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, err);
    if (st) return st;
    void *memory = malloc(bytes);
    if (!memory) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the KV cache");
    attn_kv_cache *cache;
    st = attn_kv_cache_init(&cache, memory, bytes, &d, err);
    w->cache_lengths_ok = 1;
    for (int t = 0; !st && t < w->n; t++) {
        attn_tensor k = rows_of(w->K, w->d_k, t, t + 1), v = rows_of(w->V, w->d_v, t, t + 1),
                    q = rows_of(w->Q, w->d_k, t, t + 1), o = rows_of(w->cache_output, w->d_v, t, t + 1);
        attn_sdpa_options opt = attn_sdpa_options_default();
        opt.has_scale = 1, opt.scale = w->scale, opt.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (!(st = attn_kv_cache_append(cache, &k, &v, err))) st = attn_kv_cache_attend(&o, NULL, &q, cache, &opt, err);
        w->cache_lengths_ok &= attn_kv_cache_length(cache) == t + 1;
    }
    free(memory);
    /* Grouped-query heads: 32 query heads of 128, 4096 positions, f16. */
    for (int g = 0; !st && g < 2; g++) {
        d.capacity = 4096, d.key_dim = d.value_dim = 128, d.dtype = ATTN_F16, d.heads = g ? 8 : 32;
        if (!(st = attn_kv_cache_bytes(&bytes, &d, err))) *(g ? &w->gqa_bytes_gqa : &w->gqa_bytes_mha) = (double)bytes;
    }
    return st;
}

/* 6: the last word's query, its keys split among the workers, merged. */
static attn_status step_split(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, dv = w->d_v;
    for (int p = 0; p <= w->workers; p++) w->split_bounds[p] = (int)((int64_t)n * p / w->workers);
    attn_tensor outs[8], lses[8];
    const attn_tensor *po[8], *pl[8];
    for (int p = 0; p < w->workers; p++) {
        attn_status st = attend(w->split_out + (size_t)p * dv, &w->split_lse[p], w, n - 1, n, w->split_bounds[p],
                                w->split_bounds[p + 1], ATTN_CAUSAL_NONE, err);
        if (st) return st;
        outs[p] = rows_of(w->split_out + (size_t)p * dv, dv, 0, 1), lses[p] = vec(&w->split_lse[p], 1);
        po[p] = &outs[p], pl[p] = &lses[p];
    }
    attn_tensor o = rows_of(w->split_merged, dv, 0, 1), l = vec(&w->split_merged_lse, 1);
    return attn_sdpa_merge(&o, &l, po, pl, w->workers, err);
}

/* 7: the sentence's keys and values in a pool of pages; a fork; appends. */
static void page_snapshot(attn_kernel_walk *w, const attn_kv_pages *pool, int event, const int64_t seq[2], int alive) {
    for (int s = 0; s < 2; s++) {
        const int32_t *table = NULL;
        int64_t len = 0;
        if (s < alive) attn_kv_pages_sequence(pool, seq[s], &len, &table, NULL);
        w->page_len[event][s] = len;
        for (int p = 0; p < ATTN_KERNEL_POOL_PAGES; p++)
            w->page_table[event][s][p] = table && p < (len + ATTN_KERNEL_PAGE_SIZE - 1) / ATTN_KERNEL_PAGE_SIZE ? table[p] : -1;
    }
    for (int p = 0; p < ATTN_KERNEL_POOL_PAGES; p++) w->page_refs[event][p] = (int)attn_kv_pages_page_refs(pool, p);
    w->page_free[event] = (int)attn_kv_pages_free_pages(pool);
}

static attn_status step_pages(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, dk = w->d_k, dv = w->d_v;
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.key_dim = dk, d.value_dim = dv, d.page_size = ATTN_KERNEL_PAGE_SIZE, d.num_pages = ATTN_KERNEL_POOL_PAGES;
    d.max_sequences = 2;
    size_t bytes;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, err);
    if (st) return st;
    void *memory = malloc(bytes);
    /* f32 copies of the rows: the sentence, then one more position (its first word again) */
    float *kf = malloc(sizeof(float) * (size_t)(n + 1) * (size_t)(dk + dv + dk)), *vf = kf + (size_t)(n + 1) * dk,
          *qf = vf + (size_t)(n + 1) * dv;
    if (!memory || !kf) {
        free(memory), free(kf);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the page pool");
    }
    for (int t = 0; t <= n; t++) {
        int src = t < n ? t : 0;
        for (int j = 0; j < dk; j++) kf[t * dk + j] = (float)w->K[src * dk + j], qf[t * dk + j] = (float)w->Q[src * dk + j];
        for (int j = 0; j < dv; j++) vf[t * dv + j] = (float)w->V[src * dv + j];
    }
    attn_kv_pages *pool;
    int64_t seq[2] = {0, 0};
    st = attn_kv_pages_init(&pool, memory, bytes, &d, err);
    if (!st) st = attn_kv_pages_create(pool, &seq[0], err);
    for (int ev = 0; !st && ev < ATTN_KERNEL_PAGE_EVENTS; ev++) {
        /* 0: A holds the sentence; 1: B = fork(A); 2: B appends; 3: A appends */
        int64_t rows = ev == 0 ? n : 1, first = ev == 0 ? 0 : n, who = ev == 3 ? 0 : 1;
        if (ev == 1) {
            st = attn_kv_pages_fork(pool, &seq[1], seq[0], err);
        } else {
            attn_tensor k, v;
            int64_t ks[3] = {rows, 1, dk}, vs[3] = {rows, 1, dv}, cu[2] = {0, rows};
            attn_tensor_init(&k, kf + first * dk, ATTN_F32, 3, ks, NULL, NULL);
            attn_tensor_init(&v, vf + first * dv, ATTN_F32, 3, vs, NULL, NULL);
            st = attn_kv_pages_append(pool, &seq[ev == 0 ? 0 : who], 1, &k, &v, cu, err);
        }
        if (!st) page_snapshot(w, pool, ev, seq, ev == 0 ? 1 : 2);
    }
    /* Each sequence's new position attends over its pages; the reference is
     * attn_sdpa over the same rows, contiguous, in f64. */
    for (int s = 0; !st && s < 2; s++) {
        float out[ATTN_TOY_D_K];
        attn_tensor q, o;
        int64_t qs[3] = {1, 1, dk}, os[3] = {1, 1, dv}, cu[2] = {0, 1};
        attn_tensor_init(&q, qf + (size_t)n * dk, ATTN_F32, 3, qs, NULL, NULL);
        attn_tensor_init(&o, out, ATTN_F32, 3, os, NULL, NULL);
        attn_sdpa_options opt = attn_sdpa_options_default();
        opt.has_scale = 1, opt.scale = w->scale;
        st = attn_kv_pages_attend(&o, NULL, &q, cu, &seq[s], 1, pool, NULL, &opt, err);
        for (int j = 0; !st && j < dv; j++) w->page_out[s * dv + j] = out[j];
        double kd[(ATTN_TOY_MAX_TOKENS + 1) * ATTN_TOY_D_K], vd[(ATTN_TOY_MAX_TOKENS + 1) * ATTN_TOY_D_K], qd[ATTN_TOY_D_K], ref_lse;
        for (int t = 0; t <= n; t++) {
            for (int j = 0; j < dk; j++) kd[t * dk + j] = kf[t * dk + j];
            for (int j = 0; j < dv; j++) vd[t * dv + j] = vf[t * dv + j];
        }
        for (int j = 0; j < dk; j++) qd[j] = qf[(size_t)n * dk + j];
        attn_tensor tq = rows_of(qd, dk, 0, 1), tk = rows_of(kd, dk, 0, n + 1), tv = rows_of(vd, dv, 0, n + 1),
                    to = rows_of(w->page_ref + s * dv, dv, 0, 1), tl = vec(&ref_lse, 1);
        if (!st) st = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &opt, err);
    }
    free(memory), free(kf);
    return st;
}

/* 8: ring attention. Rank r keeps its queries; the key/value shards pass
 * round the ring, and each rank merges what it computes by lse. */
static attn_status step_ring(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, dv = w->d_v, R = w->ranks;
    for (int r = 0; r <= R; r++) w->ring_bounds[r] = (int)((int64_t)n * r / R);
    double part[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_K], part_lse[ATTN_TOY_MAX_TOKENS];
    for (int s = 0; s < R; s++)
        for (int r = 0; r < R; r++) {
            int q0 = w->ring_bounds[r], q1 = w->ring_bounds[r + 1], shard = ((r - s) % R + R) % R;
            double *out = w->ring_out + ((size_t)s * n + q0) * dv, *lse = w->ring_lse + (size_t)s * n + q0;
            attn_status st = attend(part, part_lse, w, q0, q1, w->ring_bounds[shard], w->ring_bounds[shard + 1],
                                    ATTN_CAUSAL_NONE, err);
            if (st) return st;
            if (s == 0) {
                memcpy(out, part, sizeof(double) * (size_t)(q1 - q0) * dv);
                memcpy(lse, part_lse, sizeof(double) * (size_t)(q1 - q0));
                continue;
            }
            memcpy(out, out - (size_t)n * dv, sizeof(double) * (size_t)(q1 - q0) * dv);
            memcpy(lse, lse - n, sizeof(double) * (size_t)(q1 - q0));
            if ((st = merge(out, lse, part, part_lse, q1 - q0, dv, err))) return st;
        }
    return ATTN_OK;
}

/* dS (n) = the library's gradient of the row's scores `s` (times factor)
 * for dO, by attn_sdpa_backward with the scores as a float mask on zero
 * queries and keys (so the mask's gradient is the scores'); top: the largest
 * weight. */
static attn_status row_backward(double *dS, double *top, const attn_kernel_walk *w, const double *s, double factor,
                                double *dq_out, attn_error *err) {
    int n = w->n, dv = w->d_v;
    double mask[ATTN_TOY_MAX_TOKENS], zero[ATTN_TOY_MAX_TOKENS] = {0}, out[ATTN_TOY_D_K], lse,
           weights[ATTN_TOY_MAX_TOKENS];
    for (int j = 0; j < n; j++) mask[j] = factor * s[j];
    attn_tensor q = rows_of(zero, 1, 0, 1), k = rows_of(zero, 1, 0, n), v = rows_of(w->V, dv, 0, n),
                o = rows_of(out, dv, 0, 1), l = vec(&lse, 1), m = rows_of(mask, n, 0, 1), dm = rows_of(dS, n, 0, 1),
                dO = rows_of(w->grad_dO, dv, 0, 1), wt = rows_of(weights, n, 0, 1);
    attn_sdpa_options opt = attn_sdpa_options_default();
    opt.mask = &m;
    attn_status st = attn_sdpa(&o, &l, &wt, &q, &k, &v, &opt, err);
    if (!st) st = attn_sdpa_backward(NULL, NULL, NULL, &dm, &dO, &q, &k, &v, &o, &l, &opt, err);
    *top = 0;
    for (int j = 0; j < n; j++) *top = fmax(*top, weights[j]);
    if (st || !dq_out) return st;
    /* dq through the real head: the row's query against every key. */
    attn_tensor tq = rows_of(w->Q, w->d_k, w->row, w->row + 1), tk = rows_of(w->K, w->d_k, 0, n),
                tv = rows_of(w->V, dv, 0, n), tdq = rows_of(dq_out, w->d_k, 0, 1);
    attn_sdpa_options o2 = attn_sdpa_options_default();
    o2.has_scale = 1, o2.scale = w->scale;
    if ((st = attn_sdpa(&o, &l, NULL, &tq, &tk, &tv, &o2, err))) return st;
    return attn_sdpa_backward(&tdq, NULL, NULL, NULL, &dO, &tq, &tk, &tv, &o, &l, &o2, err);
}

/* 9: the backward pass of one row, as the fused kernel does it. */
static attn_status step_gradient(attn_kernel_walk *w, attn_error *err) {
    int n = w->n, dv = w->d_v, r = w->row;
    const double *s = w->tiles + (size_t)r * n, *O = w->run_out + (size_t)(w->nb - 1) * dv;
    double lse = w->run_lse[w->nb - 1];
    for (int j = 0; j < dv; j++) w->grad_dO[j] = 1.0;
    w->grad_D = 0;
    for (int j = 0; j < dv; j++) w->grad_D += w->grad_dO[j] * O[j];
    for (int j = 0; j < n; j++) {
        w->grad_P[j] = exp(s[j] - lse);
        w->grad_dP[j] = 0;
        for (int c = 0; c < dv; c++) w->grad_dP[j] += w->grad_dO[c] * w->V[(size_t)j * dv + c];
        w->grad_dS[j] = w->grad_P[j] * (w->grad_dP[j] - w->grad_D);
    }
    for (int i = 0; i < ATTN_KERNEL_SATURATION; i++) {
        double dS[ATTN_TOY_MAX_TOKENS], norm = 0;
        w->sat_factor[i] = (double)(1 << i);
        attn_status st = row_backward(i ? dS : w->grad_dS_lib, &w->sat_top[i], w, s, w->sat_factor[i],
                                      i ? NULL : w->grad_dq, err);
        if (st) return st;
        for (int j = 0; j < n; j++) norm += (i ? dS : w->grad_dS_lib)[j] * (i ? dS : w->grad_dS_lib)[j];
        w->sat_norm[i] = sqrt(norm);
    }
    return ATTN_OK;
}

/* The row whose largest score arrives in the latest block (the first such):
 * the one whose running state is rescaled last, the most to see. */
static int latest_maximum(const attn_explain *ex, int n, int block) {
    int best = 0, best_block = -1;
    for (int i = 0; i < n; i++) {
        int arg = 0;
        for (int j = 1; j < n; j++)
            if (ex->scaled[(size_t)i * n + j] > ex->scaled[(size_t)i * n + arg]) arg = j;
        if (arg / block > best_block) best = i, best_block = arg / block;
    }
    return best;
}

/* Every field of the walk zero but its struct_size. */
static void clear(attn_kernel_walk *walk) {
    size_t size = walk->struct_size;
    memset(walk, 0, sizeof *walk);
    walk->struct_size = size;
}

attn_status attn_kernel_walk_run(attn_kernel_walk *walk, const char *sentence, const attn_kernel_walk_options *options,
                                 attn_error *err) {
    if (!walk) return attn_fail(err, ATTN_ERR_NULL, "walk is NULL");
    /* 0.4.0's walk is the only one a release had: any other size is no
     * header's, and nothing of it is written. */
    if (walk->struct_size != sizeof *walk)
        return attn_fail(err, ATTN_ERR_OPTION,
                         "walk->struct_size is %zu, and no release had a walk of that size (this library's is %zu): "
                         "set walk->struct_size = sizeof *walk",
                         walk->struct_size, sizeof *walk);
    clear(walk);
    if (!sentence) return attn_fail(err, ATTN_ERR_NULL, "sentence is NULL");
    attn_kernel_walk_options o = attn_kernel_walk_options_default();
    attn_status st = attn_versioned_read(&o, sizeof o, options, "options",
                                         "start from attn_kernel_walk_options_default()", err);
    if (st) return st;
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    int n = 0;
    if ((st = attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, &n, sentence, err))) return st;
    if (o.block < 1 || o.block > 8) return attn_fail(err, ATTN_ERR_OPTION, "block (%d) must be 1 to 8", o.block);
    if (o.row < -1 || o.row >= n)
        return attn_fail(err, ATTN_ERR_OPTION, "row (%d) must be -1 or a word of the sentence, 0 to %d", o.row, n - 1);
    if (o.workers < 1 || o.workers > 8 || o.ranks < 1 || o.ranks > 8)
        return attn_fail(err, ATTN_ERR_OPTION, "workers (%d) and ranks (%d) must be 1 to 8", o.workers, o.ranks);
    double x[ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL];
    double wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wv[ATTN_TOY_D_MODEL * ATTN_TOY_D_K];
    if ((st = attn_toy_embed(x, tok, n, err)) || (st = attn_toy_weights(wq, wk, wv, ATTN_TOY_WIRED, err))) return st;
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv, ATTN_EXPLAIN_QKV, 0, 0, 0,
                             ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_explain ex;
    if ((st = attn_explain_run(&ex, &in, err))) return st;
    attn_kernel_walk *w = walk;
    w->n = n, w->d_k = ex.d_k, w->d_v = ex.d_v, w->scale = ex.scale, w->block = o.block;
    w->nb = (n + o.block - 1) / o.block;
    w->row = o.row >= 0 ? o.row : latest_maximum(&ex, n, o.block);
    w->workers = o.workers < n ? o.workers : n, w->ranks = o.ranks < n ? o.ranks : n;
    for (int i = 0; i < n; i++) w->words[i] = attn_toy_word(tok[i].id);
    if ((st = carve(w, err))) {
        attn_explain_free(&ex);
        clear(walk);
        return st;
    }
    size_t nd = (size_t)n * ex.d_k, nv = (size_t)n * ex.d_v, nn = (size_t)n * n;
    memcpy(w->Q, ex.Q, nd * sizeof(double)), memcpy(w->K, ex.K, nd * sizeof(double));
    memcpy(w->V, ex.V, nv * sizeof(double)), memcpy(w->scaled, ex.scaled, nn * sizeof(double));
    memcpy(w->weights, ex.weights, nn * sizeof(double)), memcpy(w->output, ex.output, nv * sizeof(double));
    attn_explain_free(&ex);
    if ((st = attend(w->causal_output, NULL, w, 0, n, 0, n, ATTN_CAUSAL_TOP_LEFT, err)) || (st = step_cost(w, err)) ||
        (st = step_tiles(w, err)) || (st = step_online(w, err)) || (st = step_cache(w, err)) ||
        (st = step_split(w, err)) || (st = step_pages(w, err)) || (st = step_ring(w, err)) ||
        (st = step_gradient(w, err))) {
        attn_kernel_walk_free(walk);
        return st;
    }
    return ATTN_OK;
}

void attn_kernel_walk_free(attn_kernel_walk *walk) {
    if (!walk || walk->struct_size != sizeof *walk) return; /* no walk run filled */
    free(walk->Q), free(walk->block_kind);
    clear(walk);
}
