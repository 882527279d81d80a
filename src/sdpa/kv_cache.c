/* kv_cache.c -- the KV cache (attn.h): keys and values of every position so
 * far, in the caller's memory, and attention of new queries to them.
 *
 * Layout: a header, the per-head scales (2 · Hk floats, k's then v's, for
 * an fp8 cache given them), then K as (B, Hk, capacity, E) and V as (B, Hk,
 * capacity, Ev), C order, in the cache's dtype. A quantized cache (q8, q4,
 * e4m3, e5m2) holds rows of attn_quant_row_size bytes in the same order.
 * Keys quantized per channel (key_dtype q4c, q2c; base/key_groups.c): the
 * residual rows (B, Hk, R + 32, E) f16 before K (R = desc.residual), and K
 * as (B, Hk, capacity / 32) groups: each of the B·Hk heads is a page of
 * `capacity` positions.
 *
 * The cache is a case of the paged cache (base/kv_pages.c), and attention
 * reads it through the same paged row source (base/rows.h), so that one
 * code serves both storages:
 *   - attending (B sequences of one length): the cache is a pool of one
 *     page of `capacity` positions whose heads are the B rows' Hk heads
 *     side by side (row b's are b·Hk .. b·Hk + Hk - 1), and the call is one
 *     attn_sdpa_paged_batch: one plan and one job for all B rows, as
 *     attn_sdpa runs a batch, bitwise attn_sdpa's on the rows stored
 *     densely (every kernel, option and check applies);
 *   - the layer's batched step over rows of their own lengths
 *     (attn_mha_cached_batch): the cache is a pool of B pages, one per row
 *     (attn_kv_cache_pages), and sequence i's page table is its row.
 * Its own: the positions filled (one length for all rows), append,
 * truncate, and the views and copies of the filled positions. What
 * attending over any store adds (its fp8 scales, queries turned by the
 * Hadamard rotation) is stored_kv.c's. */
#include "sdpa/sdpa.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct attn_kv_cache {
    attn_kv_cache_desc d; /* k_scale, v_scale: the cache's own copies below */
    int64_t length;
    char *k, *v; /* (B, Hk, capacity, E) and (B, Hk, capacity, Ev) */
    uint16_t *kres; /* grouped keys: (B, Hk, R + 32, E) f16, just before k; else NULL */
    int64_t *filled; /* grouped keys: (B,), the positions row b's residual window is of (after kres); else NULL */
    float *k_scale, *v_scale; /* (Hk,) each, fp8 with per-head scales; else NULL */
};

static bool grouped(const attn_kv_cache *c) { return c->d.key_dtype != 0; }

/* Grouped keys: head (b, h)'s groups and residual rows. */
static char *groups_of(const attn_kv_cache *c, int64_t b, int64_t h) {
    const attn_kv_cache_desc *d = &c->d;
    return c->k + (b * d->heads + h) * (d->capacity / ATTN_KEY_GROUP) * attn_group_bytes(d->key_dtype, d->key_dim);
}
static uint16_t *residual_of(const attn_kv_cache *c, int64_t b, int64_t h) {
    return c->kres + (b * c->d.heads + h) * (c->d.residual + ATTN_KEY_GROUP) * c->d.key_dim;
}
/* Grouped keys: head (b, h)'s group g. */
static char *group_of(const attn_kv_cache *c, int64_t b, int64_t h, int64_t g) {
    return groups_of(c, b, h) + g * attn_group_bytes(c->d.key_dtype, c->d.key_dim);
}

/* ALIGN: where each part starts. HEADER: the header's room, the same
 * wherever the library runs (64-bit pointers or WebAssembly's 32-bit ones),
 * so that a cache's size depends on its description only. */
enum { ALIGN = 64, HEADER = 256 };
_Static_assert(sizeof(attn_kv_cache) <= HEADER, "the cache's header outgrew its room");

size_t attn_kv_cache_desc_init(attn_kv_cache_desc *desc, size_t struct_size) {
    static const attn_kv_cache_desc DEFAULTS = {.struct_size = sizeof DEFAULTS, .batch = 1, .heads = 1, .dtype = ATTN_F32};
    return attn_versioned_init(desc, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* The caller's desc (read up to its struct_size) checked, and the bytes of
 * K (the residual rows and the groups, for grouped keys) and V. */
static attn_status read_desc(attn_kv_cache_desc *d, int64_t *kbytes, int64_t *vbytes,
                             const attn_kv_cache_desc *in, attn_error *err) {
    int64_t res = 0;
    if (!in) return attn_fail(err, ATTN_ERR_NULL, "desc is NULL");
    *d = attn_kv_cache_desc_default();
    attn_status st = attn_versioned_read(d, sizeof *d, in, "desc", "start from attn_kv_cache_desc_default()", err);
    if (st) return st;
    /* 0.3.0's desc ended with dtype, and its sizeof rounds up to 8: the 4
     * bytes where key_dtype now lies were that struct's tail padding,
     * which a caller never sets (neither a designated initializer nor an
     * assignment need zero it). A struct that ends before k_scale is such
     * a desc: its keys are in dtype, whatever those bytes hold. */
    size_t given;
    memcpy(&given, &in->struct_size, sizeof given);
    if (given <= offsetof(attn_kv_cache_desc, k_scale)) d->key_dtype = 0;
    const int64_t dims[5] = {d->batch, d->heads, d->capacity, d->key_dim, d->value_dim};
    static const char *const NAMES[5] = {"batch", "heads", "capacity", "key_dim", "value_dim"};
    for (int i = 0; i < 5; i++)
        if (dims[i] < 1) return attn_fail(err, ATTN_ERR_SHAPE, "desc->%s is %lld; it must be at least 1", NAMES[i], (long long)dims[i]);
    if (!attn_dtype_kv_rows(d->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "desc->dtype must be f64, f32, f16 or bf16, or quantized: " ATTN_QUANT_NAMES);
    if ((st = attn_check_block_dims(d->dtype, d->key_dtype, d->key_dim, d->value_dim, "desc", err)) ||
        (st = attn_group_check(d->key_dtype, d->dtype, d->capacity, d->key_dim, "desc", "desc->capacity", err)) ||
        (st = attn_group_check_plain(d->key_dtype, d->k_scale, d->hadamard, "desc", err)) ||
        (st = attn_group_check_residual(d->key_dtype, d->residual, "desc", err)) ||
        (st = attn_check_head_scales(d->k_scale, d->v_scale, d->heads, d->dtype, "desc", err)) ||
        (st = attn_check_hadamard(d->hadamard, d->dtype, d->key_dim, "desc", err)))
        return st;
    if (d->heads > INT64_MAX / 64) return attn_fail(err, ATTN_ERR_OVERFLOW, "the cache's size overflows");
    int64_t rows, kr = attn_row_bytes(d->dtype, d->key_dim), vr = attn_row_bytes(d->dtype, d->value_dim);
    if (d->key_dtype) /* a group's bytes per 32 positions, and R + 32 rows of f16 per head (E <= 8192) */
        kr = attn_group_bytes(d->key_dtype, d->key_dim), res = 2 * (d->residual + ATTN_KEY_GROUP) * d->key_dim;
    int64_t counts = 0; /* grouped keys: each row's filled count, 8 bytes */
    if (!kr || !vr || !attn_mul_i64(d->batch, d->heads, &rows) ||
        (d->key_dtype && (!attn_mul_i64(rows, res, &res) || !attn_mul_i64(d->batch, 8, &counts) ||
                          !attn_add_i64(res, counts, &res))) ||
        !attn_mul_i64(rows, d->capacity, &rows) ||
        !attn_mul_i64(d->key_dtype ? rows / ATTN_KEY_GROUP : rows, kr, kbytes) ||
        !attn_add_i64(*kbytes, attn_round_up(res, ALIGN), kbytes) || res > INT64_MAX / 2 ||
        !attn_mul_i64(rows, vr, vbytes) || *kbytes > INT64_MAX / 2 - 4 * ALIGN ||
        *vbytes > INT64_MAX / 2 - 4 * ALIGN)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the cache's size overflows");
    return ATTN_OK;
}

static int64_t round_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* The bytes the per-head scales take (0 without them); d checked. */
static int64_t scales_bytes(const attn_kv_cache_desc *d) {
    return d->k_scale || d->v_scale ? round_up(2 * d->heads * (int64_t)sizeof(float)) : 0;
}

attn_status attn_kv_cache_bytes(size_t *bytes, const attn_kv_cache_desc *desc, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    attn_kv_cache_desc d;
    int64_t kb, vb;
    attn_status st = read_desc(&d, &kb, &vb, desc, err);
    if (st) return st;
    uint64_t total = (uint64_t)ALIGN + (uint64_t)HEADER + (uint64_t)scales_bytes(&d) +
                     (uint64_t)round_up(kb) + (uint64_t)round_up(vb);
    if (total > SIZE_MAX) return attn_fail(err, ATTN_ERR_OVERFLOW, "the cache's size overflows size_t");
    *bytes = (size_t)total;
    return ATTN_OK;
}

attn_status attn_kv_cache_init(attn_kv_cache **cache, void *memory, size_t bytes, const attn_kv_cache_desc *desc,
                               attn_error *err) {
    if (!cache || !memory) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", cache ? "memory" : "cache");
    size_t need;
    attn_status st = attn_kv_cache_bytes(&need, desc, err);
    if (st) return st;
    if (bytes < need)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the cache needs %zu bytes (attn_kv_cache_bytes), %zu given", need,
                         bytes);
    uintptr_t at = ((uintptr_t)memory + ALIGN - 1) / ALIGN * ALIGN;
    attn_kv_cache *c = (attn_kv_cache *)at;
    int64_t kb, vb;
    read_desc(&c->d, &kb, &vb, desc, err);
    c->length = 0;
    char *scales = (char *)at + HEADER;
    c->k_scale = c->v_scale = NULL;
    if (c->d.k_scale || c->d.v_scale) { /* copied: the caller's arrays may go; a missing one is all 1 */
        c->k_scale = (float *)(void *)scales, c->v_scale = c->k_scale + c->d.heads;
        for (int64_t h = 0; h < c->d.heads; h++)
            c->k_scale[h] = c->d.k_scale ? c->d.k_scale[h] : 1.0f, c->v_scale[h] = c->d.v_scale ? c->d.v_scale[h] : 1.0f;
    }
    if (c->d.key_dtype) c->k_scale = NULL; /* keys quantized per channel: values' scales only */
    c->d.k_scale = c->k_scale, c->d.v_scale = c->v_scale;
    c->k = scales + scales_bytes(&c->d);
    c->v = c->k + round_up(kb);
    c->kres = NULL, c->filled = NULL;
    if (grouped(c)) { /* the residual rows first, each row's filled count, then the groups */
        int64_t res = c->d.batch * c->d.heads * (c->d.residual + ATTN_KEY_GROUP) * c->d.key_dim * 2; /* a multiple of 64 */
        c->kres = (uint16_t *)(void *)c->k;
        c->filled = (int64_t *)(void *)(c->k + res);
        for (int64_t b = 0; b < c->d.batch; b++) c->filled[b] = 0;
        c->k += round_up(res + 8 * c->d.batch);
    }
    *cache = c;
    return ATTN_OK;
}

int64_t attn_kv_cache_length(const attn_kv_cache *cache) { return cache ? cache->length : 0; }

/* A tensor of `rank` fits the cache: 4, 3 with B = 1, 2 with B = Hk = 1. */
static attn_status check_rank(const attn_kv_cache_desc *d, int rank, attn_error *err) {
    if (rank < 2 || rank > 4 || (rank < 4 && d->batch != 1) || (rank < 3 && d->heads != 1))
        return attn_fail(err, ATTN_ERR_RANK,
                         "rank %d does not fit a cache of %lld sequence%s of %lld head%s: (B, Hk, positions, dim) "
                         "is rank 4, rank 3 needs B = 1, rank 2 B = Hk = 1",
                         rank, (long long)d->batch, attn_plural(d->batch), (long long)d->heads, attn_plural(d->heads));
    return ATTN_OK;
}

/* The positions p0..p0+n-1 of k or v as a tensor of `rank` (4, or 3 / 2 when
 * B / B and Hk are 1): the view a caller reads, or append writes. */
static attn_status positions(attn_tensor *t, const attn_kv_cache *c, bool values, int64_t p0, int64_t n, int rank,
                             attn_error *err) {
    const attn_kv_cache_desc *d = &c->d;
    int64_t cols = values ? d->value_dim : d->key_dim;
    attn_status st = check_rank(d, rank, err);
    if (st) return st;
    if (!values && grouped(c))
        return attn_fail(err, ATTN_ERR_DTYPE, "the cache's keys are %s groups, which no tensor describes: "
                         "attn_kv_cache_gather copies them out", attn_dtype_name(d->key_dtype));
    /* a row's step: cols elements, or a quantized row's bytes */
    int64_t row = attn_dtype_quantized(d->dtype) ? attn_row_bytes(d->dtype, cols) : cols;
    int64_t shape[4] = {d->batch, d->heads, n, cols}, strides[4] = {d->heads * d->capacity * row, d->capacity * row, row, 1};
    char *base = (values ? c->v : c->k) + p0 * row * attn_stride_unit(d->dtype);
    return attn_tensor_init(t, base, d->dtype, rank, shape + 4 - rank, strides + 4 - rank, err);
}

/* Grouped keys' memory, the residual rows and the groups, as bytes. */
static void key_bytes(attn_tensor *k, const attn_kv_cache *c) {
    int64_t n = c->v - (char *)c->kres;
    attn_tensor_init(k, c->kres, ATTN_BOOL, 1, &n, NULL, NULL);
}

void attn_kv_cache_storage(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache) {
    if (grouped(cache)) key_bytes(k, cache);
    else positions(k, cache, false, 0, cache->d.capacity, 4, NULL);
    positions(v, cache, true, 0, cache->d.capacity, 4, NULL);
}

/* The cache's keys, grouped or not, as the paged row source reads them:
 * one page of `capacity` positions per head, the B·Hk heads side by side,
 * the length the cache's (attend sets its own, and makes the values from
 * it). */
static attn_paged_rows key_rows(const attn_kv_cache *c, const int32_t *one_page) {
    const attn_kv_cache_desc *d = &c->d;
    attn_paged_rows k = {c->k, d->key_dtype ? d->key_dtype : d->dtype, 1, d->batch * d->heads, d->capacity, d->key_dim,
                         one_page, 1, c->length, c->kres, d->residual, false};
    return k;
}
static const int32_t ONE_PAGE[1] = {0};

/* The rank-`rank` (4, 3 or 2) index (b, h) of t: its element offset. */
static int64_t head_offset(const attn_tensor *t, int64_t b, int64_t h) {
    return t->rank == 4 ? b * t->strides[0] + h * t->strides[1] : t->rank == 3 ? h * t->strides[0] : 0;
}

attn_status attn_kv_cache_view(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache, int rank,
                               attn_error *err) {
    if (!k || !v || !cache) return attn_fail(err, ATTN_ERR_NULL, "k, v and cache must not be NULL");
    attn_status st = positions(k, cache, false, 0, cache->length, rank, err);
    return st ? st : positions(v, cache, true, 0, cache->length, rank, err);
}

/* k or v to gather into: the cache's filled positions' shape, as `rank`
 * gives it (4, or 3 / 2 when B / B and Hk are 1), a float dtype. */
static attn_status check_out(const attn_tensor *t, const attn_tensor *like, const char *name, attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    if (t->rank != like->rank || memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)like->rank)) {
        char s[128], w[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        attn_format_shape(w, sizeof w, like->rank, like->shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; the cache's positions are %s", name, s, w);
    }
    if (t->dtype != ATTN_F64 && t->dtype != ATTN_F32 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f64, f32, f16 or bf16", name, attn_dtype_name(t->dtype));
    attn_status st = attn_check_extent(t, name, err);
    return st ? st : attn_check_writable(t, name, err); /* an output: no element twice */
}

/* attn_kv_cache_gather of a cache with grouped keys: the keys through
 * their row source, head by head. */
static attn_status gather_grouped(attn_tensor *k, attn_tensor *v, const attn_kv_cache *c, int rank, attn_error *err) {
    const attn_kv_cache_desc *d = &c->d;
    attn_tensor cv, like, kb;
    attn_status st = positions(&cv, c, true, 0, c->length, rank, err);
    if (st || (st = check_out(v, &cv, "v", err))) return st;
    int64_t shape[4] = {d->batch, d->heads, c->length, d->key_dim};
    like = cv;
    memcpy(like.shape, shape + 4 - rank, sizeof(int64_t) * (size_t)rank);
    if ((st = check_out(k, &like, "k", err))) return st;
    key_bytes(&kb, c);
    const attn_named outs[2] = {{k, "k"}, {v, "v"}};
    const attn_named ins[2] = {{&kb, "the cache's keys"}, {&cv, "the cache's values"}};
    if ((st = attn_check_no_overlap(outs, 2, ins, 2, err))) return st;
    attn_copy_kv_rows(v, &cv, c->v_scale, d->heads, false); /* code · s where values have scales */
    attn_paged_rows kp = key_rows(c, ONE_PAGE);
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < d->heads; h++)
            attn_grouped_gather(&kp, b * d->heads + h,
                                (char *)k->data + head_offset(k, b, h) * (int64_t)attn_dtype_size(k->dtype), k->dtype,
                                k->strides[rank - 2], k->strides[rank - 1]);
    return ATTN_OK;
}

attn_status attn_kv_cache_gather(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache, attn_error *err) {
    if (!cache) return attn_fail(err, ATTN_ERR_NULL, "cache is NULL");
    attn_tensor ck, cv;
    int rank = k ? k->rank : 4;
    if (grouped(cache)) return gather_grouped(k, v, cache, rank, err);
    attn_status st = positions(&ck, cache, false, 0, cache->length, rank, err);
    if (st || (st = positions(&cv, cache, true, 0, cache->length, rank, err)) ||
        (st = check_out(k, &ck, "k", err)) || (st = check_out(v, &cv, "v", err)))
        return st;
    const attn_named outs[2] = {{k, "k"}, {v, "v"}};
    const attn_named ins[2] = {{&ck, "the cache's keys"}, {&cv, "the cache's values"}};
    if ((st = attn_check_no_overlap(outs, 2, ins, 2, err))) return st;
    attn_copy_kv_rows(k, &ck, cache->k_scale, cache->d.heads, cache->d.hadamard);
    attn_copy_kv_rows(v, &cv, cache->v_scale, cache->d.heads, false);
    return ATTN_OK;
}

/* Grouped keys: row b's residual window cut back to its first `length`
 * positions when it is of more (a truncation of that row): the groups the
 * shorter window takes back become residual rows again, their dequantized
 * values in f16. */
static void cut_row(const attn_kv_cache *c, int64_t b, int64_t length) {
    const attn_kv_cache_desc *d = &c->d;
    const int64_t G = ATTN_KEY_GROUP, R = d->residual, have = c->filled[b];
    if (length >= have) return;
    const int64_t now = attn_group_full(length, R), was = attn_group_full(have, R), to = was < length ? was : length;
    for (int64_t h = 0; now < was && h < d->heads; h++) {
        uint16_t *window = residual_of(c, b, h);
        attn_group_cut(window, R, d->key_dim, have, length);
        for (int64_t p = now; p < to; p += G)
            attn_group_unquantize(window + (p - now) * d->key_dim, group_of(c, b, h, p / G), d->key_dim, d->key_dtype,
                                  to - p < G ? to - p : G);
    }
    c->filled[b] = length;
}

int64_t attn_kv_cache_row_filled(const attn_kv_cache *cache, int64_t row) {
    return grouped(cache) ? cache->filled[row] : INT64_MAX;
}

void attn_kv_cache_row_cut(attn_kv_cache *cache, int64_t row, int64_t length) {
    if (grouped(cache)) cut_row(cache, row, length);
}

void attn_kv_cache_row_set_filled(attn_kv_cache *cache, int64_t row, int64_t filled) {
    if (grouped(cache)) cache->filled[row] = filled;
}

/* Grouped keys appended at positions p0 .. of row b: each head's rows of k
 * into its window, and each group that leaves the window quantized. */
static void append_grouped(const attn_kv_cache *c, int64_t b, int64_t p0, const attn_tensor *k) {
    const attn_kv_cache_desc *d = &c->d;
    int r = k->rank;
    cut_row(c, b, p0); /* a row whose length its caller lowered (attn_mha_cached_batch) */
    for (int64_t h = 0; h < d->heads; h++) {
        attn_mat rows = {(char *)k->data + head_offset(k, b, h) * (int64_t)attn_dtype_size(k->dtype), k->dtype,
                         k->shape[r - 2], d->key_dim, k->strides[r - 2], k->strides[r - 1]};
        uint16_t *window = residual_of(c, b, h);
        for (int64_t i = 0; i < rows.rows; i++)
            if (attn_group_push(window, d->residual, &rows, i, p0 + i, d->key_dim))
                attn_group_retire(group_of(c, b, h, attn_group_full(p0 + i, d->residual) / ATTN_KEY_GROUP), window,
                                  d->residual, d->key_dim, d->key_dtype);
    }
    c->filled[b] = p0 + k->shape[r - 2];
}

/* k or v to append: the cache's shape with n positions, a dtype it takes. */
static attn_status check_new(const attn_tensor *t, const char *name, const attn_kv_cache *c, int64_t cols,
                             attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    const attn_kv_cache_desc *d = &c->d;
    int64_t want[4] = {d->batch, d->heads, -1, cols};
    if (t->rank < 2 || t->rank > 4)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be 4 (B, Hk, n, dim), or 3 or 2", name, t->rank);
    for (int i = 0; i < t->rank; i++) {
        int64_t w = want[4 - t->rank + i];
        if (w >= 0 && t->shape[i] != w) {
            char s[128];
            attn_format_shape(s, sizeof s, t->rank, t->shape);
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; the cache holds %lld sequence%s of %lld head%s of "
                             "%lld value%s", name, s, (long long)d->batch, attn_plural(d->batch), (long long)d->heads,
                             attn_plural(d->heads), (long long)cols, attn_plural(cols));
        }
    }
    for (int i = 0; i < 4 - t->rank; i++)
        if (want[i] != 1) return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d but the cache has %s > 1", name, t->rank, i ? "heads" : "batch");
    bool wide = d->dtype == ATTN_F64; /* the others, quantized ones too, take f32, f16 or bf16 */
    if (wide ? t->dtype != ATTN_F64 : (t->dtype != ATTN_F32 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; an %s cache takes %s", name, attn_dtype_name(t->dtype),
                         attn_dtype_name(d->dtype), wide ? "f64" : "f32, f16 or bf16");
    return attn_check_extent(t, name, err);
}

/* k and v written to the cache's positions dk and dv (shaped alike, all
 * checked): converted to its dtype, or each row quantized by itself (by
 * its head's scale, if the cache has them). */
static attn_status write_rows(const attn_kv_cache *c, attn_tensor *dk, attn_tensor *dv, const attn_tensor *k,
                              const attn_tensor *v, attn_error *err) {
    attn_status st = ATTN_OK;
    if (attn_dtype_quantized(dk->dtype))
        attn_copy_kv_rows(dk, k, c->k_scale, c->d.heads, c->d.hadamard),
            attn_copy_kv_rows(dv, v, c->v_scale, c->d.heads, false);
    else if (!(st = attn_tensor_convert(dk, k, err))) st = attn_tensor_convert(dv, v, err);
    return st;
}

attn_status attn_kv_cache_append(attn_kv_cache *cache, const attn_tensor *k, const attn_tensor *v, attn_error *err) {
    if (!cache) return attn_fail(err, ATTN_ERR_NULL, "cache is NULL");
    attn_status st = check_new(k, "k", cache, cache->d.key_dim, err);
    if (st || (st = check_new(v, "v", cache, cache->d.value_dim, err))) return st;
    int64_t n = k->shape[k->rank - 2];
    if (v->shape[v->rank - 2] != n)
        return attn_fail(err, ATTN_ERR_SHAPE, "k has %lld position%s but v has %lld", (long long)n, attn_plural(n),
                         (long long)v->shape[v->rank - 2]);
    if (n > cache->d.capacity - cache->length)
        return attn_fail(err, ATTN_ERR_FULL, "the cache holds %lld position%s, %lld filled: %lld more %s not fit",
                         (long long)cache->d.capacity, attn_plural(cache->d.capacity), (long long)cache->length,
                         (long long)n, n == 1 ? "does" : "do");
    attn_tensor dk, dv;
    if (grouped(cache)) key_bytes(&dk, cache);
    else positions(&dk, cache, false, cache->length, n, k->rank, err);
    positions(&dv, cache, true, cache->length, n, v->rank, err);
    /* Both are written only after both are checked: nothing is appended on a failure. */
    const attn_named outs[2] = {{&dk, "the cache's keys"}, {&dv, "the cache's values"}};
    const attn_named ins[2] = {{k, "k"}, {v, "v"}};
    if ((st = attn_check_no_overlap(outs, 2, ins, 2, err))) return st;
    if (grouped(cache)) {
        attn_copy_kv_rows(&dv, v, cache->v_scale, cache->d.heads, false);
        for (int64_t b = 0; b < cache->d.batch; b++) append_grouped(cache, b, cache->length, k);
    } else if ((st = write_rows(cache, &dk, &dv, k, v, err))) {
        return st;
    }
    cache->length += n;
    return ATTN_OK;
}

void attn_kv_cache_pages(attn_kv_paged_view *w, const attn_kv_cache *cache) {
    const attn_kv_cache_desc *d = &cache->d;
    *w = attn_kv_paged_view_default();
    w->dtype = d->dtype, w->heads = d->heads, w->key_dim = d->key_dim, w->value_dim = d->value_dim;
    w->page_size = d->capacity, w->num_pages = d->batch;
    w->k_pages = cache->k, w->v_pages = cache->v;
    w->key_dtype = d->key_dtype, w->k_residual = cache->kres, w->residual = d->residual;
    w->k_scale = cache->k_scale, w->v_scale = cache->v_scale, w->hadamard = cache->d.hadamard;
}

/* A (B, Hk, n, dim) view of the cache's positions narrowed to row `row`:
 * its (Hk, n, dim) rows. */
static void drop_batch(attn_tensor *t, const attn_kv_cache *c, int64_t row) {
    t->data = (char *)t->data + row * t->strides[0] * attn_stride_unit(c->d.dtype);
    memmove(t->shape, t->shape + 1, 3 * sizeof(int64_t)), memmove(t->strides, t->strides + 1, 3 * sizeof(int64_t));
    t->rank = 3;
}

attn_status attn_kv_cache_put(const attn_kv_cache *cache, int64_t row, int64_t p0, const attn_tensor *k,
                              const attn_tensor *v, attn_error *err) {
    attn_tensor dk, dv; /* row `row`'s positions p0 .. p0+n-1: (Hk, n, dim) */
    int64_t n = k->shape[1];
    if (grouped(cache)) { /* k is (Hk, n, E): rank 3, as a row's own */
        append_grouped(cache, row, p0, k);
        positions(&dv, cache, true, p0, n, 4, NULL);
        drop_batch(&dv, cache, row);
        attn_copy_kv_rows(&dv, v, cache->v_scale, cache->d.heads, false); /* x / s, as append stores it */
        return ATTN_OK;
    }
    positions(&dk, cache, false, p0, n, 4, NULL), positions(&dv, cache, true, p0, n, 4, NULL);
    drop_batch(&dk, cache, row), drop_batch(&dv, cache, row);
    return write_rows(cache, &dk, &dv, k, v, err);
}

int64_t attn_kv_cache_window_values(const attn_kv_cache *cache) {
    const attn_kv_cache_desc *d = &cache->d; /* fits: attn_kv_cache_bytes counted these rows */
    return grouped(cache) ? d->batch * d->heads * (d->residual + ATTN_KEY_GROUP) * d->key_dim : 0;
}

void attn_kv_cache_window_copy(attn_kv_cache *cache, uint16_t *saved, bool restore) {
    size_t bytes = (size_t)attn_kv_cache_window_values(cache) * sizeof(uint16_t);
    if (bytes) memcpy(restore ? cache->kres : saved, restore ? saved : cache->kres, bytes);
}

attn_status attn_kv_cache_truncate(attn_kv_cache *cache, int64_t length, attn_error *err) {
    if (!cache) return attn_fail(err, ATTN_ERR_NULL, "cache is NULL");
    if (length < 0 || length > cache->length)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "length %lld is not between 0 and the %lld position%s filled",
                         (long long)length, (long long)cache->length, attn_plural(cache->length));
    for (int64_t b = 0; grouped(cache) && b < cache->d.batch; b++) cut_row(cache, b, length);
    cache->length = length;
    return ATTN_OK;
}

attn_status attn_kv_cache_check_causal(attn_causal causal, attn_error *err) {
    if (causal == ATTN_CAUSAL_TOP_LEFT)
        return attn_fail(err, ATTN_ERR_OPTION,
                         "a cache's queries are its last positions: use a bottom-right causal mask (or none)");
    return ATTN_OK;
}

/* The workspace attend takes for q (its options o) besides the attention's:
 * q's turned copy with the Hadamard rotation (its alignment included), else
 * 0. q's data may be NULL. */
static attn_status query_bytes(size_t *bytes, const attn_kv_cache *cache, const attn_tensor *q,
                               const attn_sdpa_options *o, attn_error *err) {
    *bytes = 0;
    if (!cache->d.hadamard) return ATTN_OK;
    attn_arena m = attn_arena_measuring();
    attn_tensor hq;
    attn_status st = attn_hadamard_queries(&hq, &m, q, o, err);
    if (!st) *bytes = attn_arena_needed(&m);
    return st;
}

/* The context of options o (the caller's, its per-head scales as
 * k_descale and v_descale) has a workspace apart from every tensor attend
 * reads or writes, the cache's whole memory among them (its header, keys
 * and values), before q's turned copy is written into it
 * (attn_check_workspace). */
static attn_status check_workspace(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q,
                                   const attn_kv_cache *cache, const attn_sdpa_options *o, attn_error *err) {
    attn_sdpa_options read;
    attn_context c;
    attn_status st = attn_options_read(&read, &c, o, err);
    if (st || !c.workspace) return st;
    attn_tensor header, ck, cv;
    int64_t n = (int64_t)sizeof *cache;
    attn_tensor_init(&header, (void *)(uintptr_t)cache, ATTN_BOOL, 1, &n, NULL, NULL); /* its length, its layout */
    attn_kv_cache_storage(&ck, &cv, cache);
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}};
    attn_named ins[4 + ATTN_OPTION_TENSORS] = {{q, "q"}, {&header, "the cache"}, {&ck, "the cache's keys"},
                                               {&cv, "the cache's values"}};
    int n_ins = attn_named_options(ins, 4, ATTN_NAMED_CAP(ins), &read);
    return attn_check_workspace(c.workspace, c.workspace_size, outs, 2, ins, n_ins, err);
}

/* attn_kv_cache_attend over the cache's first `length` positions, or with
 * `bytes` its workspace (attn_kv_cache_attend_bytes). */
static attn_status attend(size_t *bytes, int64_t length, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                          const attn_kv_cache *cache, const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_status st;
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if ((st = attn_versioned_read(&o, sizeof o, options, "options", "start from attn_sdpa_options_default()", err)) ||
        (st = attn_kv_cache_check_causal(o.causal, err)) || (st = check_rank(&cache->d, q->rank, err)))
        return st;
    /* Named here, where the caller passed no k: the attention's own check would say "k is f32 but q is f64". */
    if ((cache->d.dtype == ATTN_F64) != (q->dtype == ATTN_F64))
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s but the cache stores %s; an f64 cache takes f64 q, %s",
                         attn_dtype_name(q->dtype), attn_dtype_name(cache->d.dtype),
                         cache->d.hadamard ? "this one (keys stored turned) f32 q"
                                           : "any other f32 (or f16, bf16) q");
    /* The cache as one page of `capacity` positions holding every row's
     * heads: B sequences of one length, row b's Hk heads the pool's b·Hk ..
     * (rank 3 and 2: B = 1, one sequence). */
    const attn_kv_cache_desc *d = &cache->d;
    attn_paged_rows k = key_rows(cache, ONE_PAGE), v = k;
    k.length = v.length = length;
    v.pages = cache->v, v.dtype = d->dtype, v.cols = d->value_dim, v.residual = NULL;
    if (grouped(cache)) { /* out and lse keep clear of the residual rows too */
        attn_tensor kb;
        key_bytes(&kb, cache);
        const attn_named outs[2] = {{out, "out"}, {lse, "lse"}}, ins[1] = {{&kb, "the cache's keys"}};
        if ((st = attn_check_no_overlap(outs, 2, ins, 1, err))) return st;
    }
    attn_tensor ks, vs, hq; /* hq: the queries turned by the keys' rotation */
    if (bytes) { /* q's turned copy comes first, the attention's scratch after it */
        size_t turned = 0, attention = 0;
        if ((st = attn_kv_scales_as_descale(&o, &ks, &vs, cache->k_scale, cache->v_scale, d->heads, err)) ||
            (st = query_bytes(&turned, cache, q, &o, err)) ||
            (st = attn_sdpa_paged_batch(&attention, out, NULL, NULL, q, &k, &v, d->batch, q->rank, &o, err)))
            return st;
        if (attention > SIZE_MAX - turned) return attn_fail(err, ATTN_ERR_OVERFLOW, "the workspace's size overflows");
        *bytes = turned + attention;
        return ATTN_OK;
    }
    attn_arena arena = attn_arena_over(NULL, 0); /* hq's memory: the workspace's front, or malloc */
    attn_context rest;
    memset(&hq, 0, sizeof hq);
    const attn_named outs[2] = {{out, "out"}, {lse, "lse"}}, ins[1] = {{q, "q"}}; /* q itself, not its turned copy */
    if (!(st = attn_kv_scales_as_descale(&o, &ks, &vs, cache->k_scale, cache->v_scale, d->heads, err)) &&
        !(st = check_workspace(out, lse, q, cache, &o, err)) &&
        !(d->hadamard && ((st = attn_check_no_overlap(outs, 2, ins, 1, err)) ||
                          (st = attn_hadamard_queries_call(&hq, &arena, &rest, &o, q, err)))))
        st = attn_sdpa_paged_batch(NULL, out, lse, NULL, hq.data ? &hq : q, &k, &v, d->batch, q->rank, &o, err);
    attn_arena_release(&arena);
    return st;
}

attn_status attn_kv_cache_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_kv_cache *cache,
                                 const attn_sdpa_options *options, attn_error *err) {
    if (!cache || !q) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", cache ? "q" : "cache");
    return attend(NULL, cache->length, out, lse, q, cache, options, err);
}

attn_status attn_kv_cache_attend_bytes(size_t *bytes, attn_tensor *out, const attn_tensor *q,
                                       const attn_kv_cache *cache, int64_t length, const attn_sdpa_options *o,
                                       attn_error *err) {
    length = length < cache->d.capacity ? length : cache->d.capacity;
    return attend(bytes, length > 0 ? length : 1, out, NULL, q, cache, o, err);
}
