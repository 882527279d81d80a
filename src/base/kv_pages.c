/* kv_pages.c -- the paged KV cache (attn.h, "Paged KV cache"): a pool of
 * fixed-size pages of keys and values in the caller's memory, the
 * sequences that hold them through page tables, and the views that let a
 * caller's own pages be read the same way.
 *
 * Layout of the pool's memory (each region 64-byte aligned):
 *   the header                  struct attn_kv_pages
 *   refs        (num_pages,)    int32: sequences holding each page; 0: free
 *   page_stack  (num_pages,)    int32: the free pages, the next on top
 *   id_stack    (max_sequences,) int32: the free sequence ids, the next on top
 *   alive       (max_sequences,) uint8: 1 for a live sequence
 *   lengths     (max_sequences,) int64: positions; 0 for a free id
 *   tables      (max_sequences, table_stride) int32: the page tables
 *   residual    (max_sequences, Hk, R + 32, E) f16: with keys quantized per
 *               channel (key_dtype q4c, q2c), each sequence's residual
 *               window, its last positions not in a quantized group: the
 *               one being filled and the R = desc.residual before it
 *               (key_groups.c)
 *   scales      (2, Hk) f32: k's and v's per-head scales (an fp8 pool given them)
 *   K pages     (num_pages, Hk, P, E)  the pool's dtype (quantized: (num_pages, Hk, P)
 *   V pages     (num_pages, Hk, P, Ev)  rows of attn_quant_row_size bytes;
 *                                       grouped keys: (num_pages, Hk, P/32) groups)
 *               (head_major: Hk first, (Hk, num_pages, P, ...), in both regions)
 *   (K and V pages each from a 4 KiB boundary of memory, MEM_PAGE)
 * The tables and lengths are a block table indexed by sequence id, so the
 * pool is its own view (attn_kv_pages_view) and every reader of pages
 * reads a pool and a caller's pages through the same code.
 *
 * Every call that changes the pool first checks everything it will need
 * (ids, shapes, free pages), then writes: a failure leaves the pool's
 * bytes as they were. Nothing here allocates. */
#include "base/base.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

struct attn_kv_pages {
    attn_kv_pages_desc d;
    int64_t table_stride; /* entries per sequence's table: ceil(max_length / P) */
    int64_t free_pages;   /* pages on page_stack */
    int64_t free_ids;     /* ids on id_stack */
    int32_t *refs, *page_stack, *id_stack;
    uint8_t *alive;
    int64_t *lengths;
    int32_t *tables;
    uint16_t *kres; /* grouped keys: (max_sequences, Hk, R + 32, E) f16 */
    char *k, *v;
    float *k_scale, *v_scale; /* (Hk,) each: an fp8 pool's per-head scales, or NULL */
    /* Moved on by every call that changes a sequence's length or table
     * (moved_on): the pool's view points at it, so that a plan made over
     * the view knows when it has gone stale (attn_kv_paged_run). */
    uint64_t generation;
};

static bool grouped(const attn_kv_pages *p) { return p->d.key_dtype != 0; }

/* Pools made so far in this process: each pool's generation starts at
 * that count times 2^32, past every earlier pool's. A pool made again in
 * memory that held one (an engine's pool freed, and malloc handing the
 * same memory back) would otherwise start at 0 again and, after as many
 * changes as the old pool had seen, show a plan of the old pool the value
 * it kept: the plan would run over the new sequences with the old lengths. */
static atomic_uint_fast64_t pools_made;

/* A sequence's length or page table has changed: a plan over the pool's
 * view is stale from now on. */
static void moved_on(attn_kv_pages *p) { p->generation++; }

enum { ALIGN = 64, MIN_PAGE = 16, MAX_PAGE = 256 };
/* The key and value pages start on a 4 KiB boundary of memory, each
 * region given MEM_PAGE - ALIGN bytes more to find it in: a head's rows of
 * a page are then whole pages of memory when they are 4 KiB (16 positions
 * of d = 64 in f32) or a multiple. The hardware prefetcher follows a
 * stream only within a page of memory; a run of 4 KiB that straddles two
 * (as it did in a pool whose memory came from malloc, 2 KiB into a page)
 * starts two streams, and decode read such pages at 1.45x the time of
 * contiguous keys against 1.1x aligned (Zen 5, 2 threads;
 * docs/performance.md). */
enum { MEM_PAGE = 4096 };
enum { ALIVE = 1, MARKED = 2 }; /* MARKED: named once already by the append being checked */

size_t attn_kv_pages_desc_init(attn_kv_pages_desc *desc, size_t struct_size) {
    static const attn_kv_pages_desc DEFAULTS = {
        .struct_size = sizeof DEFAULTS, .heads = 1, .dtype = ATTN_F32, .page_size = 16};
    return attn_versioned_init(desc, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

size_t attn_kv_paged_view_init(attn_kv_paged_view *view, size_t struct_size) {
    static const attn_kv_paged_view DEFAULTS = {.struct_size = sizeof DEFAULTS, .dtype = ATTN_F32, .heads = 1};
    return attn_versioned_init(view, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* ceil(x / p) for x >= 0, p >= 1, without forming x + p - 1. */
static int64_t pages_for(int64_t x, int64_t p) { return x / p + (x % p != 0); }

/* ---- sizes ---------------------------------------------------------------- */

/* Where each region of the pool's memory starts, from the aligned start. */
typedef struct layout {
    int64_t table_stride;
    int64_t refs, page_stack, id_stack, alive, lengths, tables, kres, scales, k, v, end;
} layout;

/* *at = the region of `bytes` after `next`, aligned; false on overflow. */
static bool region(int64_t *at, int64_t *next, int64_t count, int64_t size) {
    int64_t bytes;
    if (!attn_mul_i64(count, size, &bytes) || *next > INT64_MAX - ALIGN || bytes > INT64_MAX - ALIGN) return false;
    *at = *next;
    if (!attn_add_i64(*at, attn_round_up(bytes, ALIGN), next)) return false;
    return true;
}

/* desc->head_major or view->head_major: 0 or 1. */
static attn_status check_head_major(int head_major, const char *name, attn_error *err) {
    if (head_major == 0 || head_major == 1) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_OPTION, "%s->head_major is %d; it must be 0 (a page's heads side by side) or 1 "
                     "(each head's pages together)", name, head_major);
}

/* The bytes of one page region (all num_pages of K, or of V): false on overflow. */
static bool page_region_bytes(int64_t *bytes, int64_t pages, int64_t heads, int64_t P, int64_t cols,
                              attn_dtype dt) {
    int64_t n, row = attn_row_bytes(dt, cols);
    return row && attn_mul_i64(pages, heads, &n) && attn_mul_i64(n, P, &n) && attn_mul_i64(n, row, bytes);
}

/* The bytes of the key pages: those of page_region_bytes, or of groups of
 * 32 positions for keys quantized per channel (key_dtype). */
static bool key_region_bytes(int64_t *bytes, int64_t pages, int64_t heads, int64_t P, int64_t cols, attn_dtype dt,
                             attn_dtype key_dtype) {
    int64_t n, group = attn_group_bytes(key_dtype, cols);
    if (!key_dtype) return page_region_bytes(bytes, pages, heads, P, cols, dt);
    return group && attn_mul_i64(pages, heads, &n) && attn_mul_i64(n, P / ATTN_KEY_GROUP, &n) &&
           attn_mul_i64(n, group, bytes);
}

/* A sequence's residual rows, every head: (Hk, R + 32, E) f16 values. */
static bool residual_values(int64_t *n, int64_t heads, int64_t R, int64_t cols) {
    return attn_mul_i64(heads, (R + ATTN_KEY_GROUP) * cols, n) && *n <= INT64_MAX / 2;
}

/* What keys and values to append, and gathered ones, may be. */
static bool storage_dtype(attn_dtype dt) { return dt == ATTN_F32 || dt == ATTN_F16 || dt == ATTN_BF16; }

/* What a pool's pages may hold: those, or quantized rows of a size the
 * format takes (q8 and q4: a multiple of 32 values). */
/* dt's blocks of 32 apply to the rows stored in it: the values, and the
 * keys unless key_dtype stores them per channel (attn_group_check checks
 * those). */
static attn_status check_page_dtype(attn_dtype dt, attn_dtype key_dtype, int64_t key_dim, int64_t value_dim,
                                    const char *name, attn_error *err) {
    if (!attn_dtype_kv_rows(dt))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s->dtype must be f64, f32, f16, bf16, " ATTN_QUANT_NAMES, name);
    return attn_check_block_dims(dt, key_dtype, key_dim, value_dim, name, err);
}

/* The caller's desc (read up to its struct_size) checked, and its layout. */
static attn_status read_desc(attn_kv_pages_desc *d, layout *l, const attn_kv_pages_desc *in, attn_error *err) {
    if (!in) return attn_fail(err, ATTN_ERR_NULL, "desc is NULL");
    *d = attn_kv_pages_desc_default();
    attn_status st = attn_versioned_read(d, sizeof *d, in, "desc", "start from attn_kv_pages_desc_default()", err);
    if (st) return st;
    const int64_t dims[3] = {d->heads, d->key_dim, d->value_dim};
    static const char *const NAMES[3] = {"heads", "key_dim", "value_dim"};
    for (int i = 0; i < 3; i++)
        if (dims[i] < 1)
            return attn_fail(err, ATTN_ERR_SHAPE, "desc->%s is %lld; it must be at least 1", NAMES[i],
                             (long long)dims[i]);
    if (d->page_size < MIN_PAGE || d->page_size > MAX_PAGE)
        return attn_fail(err, ATTN_ERR_SHAPE, "desc->page_size is %lld; it must be %d to %d positions",
                         (long long)d->page_size, MIN_PAGE, MAX_PAGE);
    if (d->num_pages < 1 || d->num_pages > INT32_MAX)
        return attn_fail(err, ATTN_ERR_SHAPE, "desc->num_pages is %lld; it must be 1 to %d (pages are int32)",
                         (long long)d->num_pages, INT32_MAX);
    if (d->max_sequences < 1 || d->max_sequences > INT32_MAX)
        return attn_fail(err, ATTN_ERR_SHAPE, "desc->max_sequences is %lld; it must be 1 to %d",
                         (long long)d->max_sequences, INT32_MAX);
    /* A sequence never holds a page twice, so it can hold no more than the
     * pool's positions: a longer max_length (the size of another pool, or
     * of a pool meant to grow) is refused rather than quietly cut down.
     * num_pages · page_size fits: at most INT32_MAX · 256. */
    if (d->max_length < 0 || d->max_length > d->num_pages * d->page_size)
        return attn_fail(err, ATTN_ERR_SHAPE,
                         "desc->max_length is %lld; it must be 0 (the pool's num_pages · page_size) to num_pages · "
                         "page_size = %lld",
                         (long long)d->max_length, (long long)(d->num_pages * d->page_size));
    if ((st = check_page_dtype(d->dtype, d->key_dtype, d->key_dim, d->value_dim, "desc", err)) ||
        (st = attn_group_check(d->key_dtype, d->dtype, d->page_size, d->key_dim, "desc", "desc->page_size", err)) ||
        (st = attn_group_check_plain(d->key_dtype, d->k_scale, d->hadamard, "desc", err)) ||
        (st = attn_group_check_residual(d->key_dtype, d->residual, "desc", err)) ||
        (st = attn_check_head_scales(d->k_scale, d->v_scale, d->heads, d->dtype, "desc", err)) ||
        (st = attn_check_hadamard(d->hadamard, d->dtype, d->key_dim, "desc", err)) ||
        (st = check_head_major(d->head_major, "desc", err)))
        return st;
    l->table_stride = d->max_length ? pages_for(d->max_length, d->page_size) : d->num_pages; /* <= num_pages */
    int64_t next = attn_round_up((int64_t)sizeof(attn_kv_pages), ALIGN), kb, vb, entries, res = 0;
    if (!attn_mul_i64(d->max_sequences, l->table_stride, &entries) ||
        (d->key_dtype && (!residual_values(&res, d->heads, d->residual, d->key_dim) ||
                          !attn_mul_i64(res, d->max_sequences, &res))) ||
        !key_region_bytes(&kb, d->num_pages, d->heads, d->page_size, d->key_dim, d->dtype, d->key_dtype) ||
        !page_region_bytes(&vb, d->num_pages, d->heads, d->page_size, d->value_dim, d->dtype) ||
        !region(&l->refs, &next, d->num_pages, 4) || !region(&l->page_stack, &next, d->num_pages, 4) ||
        !region(&l->id_stack, &next, d->max_sequences, 4) || !region(&l->alive, &next, d->max_sequences, 1) ||
        !region(&l->lengths, &next, d->max_sequences, 8) || !region(&l->tables, &next, entries, 4) ||
        !region(&l->kres, &next, res, 2) || !region(&l->scales, &next, d->k_scale || d->v_scale ? d->heads : 0, 8) ||
        kb > INT64_MAX - MEM_PAGE || vb > INT64_MAX - MEM_PAGE || !region(&l->k, &next, kb + MEM_PAGE - ALIGN, 1) ||
        !region(&l->v, &next, vb + MEM_PAGE - ALIGN, 1) || next > INT64_MAX - ALIGN)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the pool's size overflows");
    l->end = next;
    return ATTN_OK;
}

attn_status attn_kv_pages_bytes(size_t *bytes, const attn_kv_pages_desc *desc, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    attn_kv_pages_desc d;
    layout l;
    attn_status st = read_desc(&d, &l, desc, err);
    if (st) return st;
    uint64_t total = (uint64_t)l.end + ALIGN; /* room to align the start */
    if (total > SIZE_MAX) return attn_fail(err, ATTN_ERR_OVERFLOW, "the pool's size overflows size_t");
    *bytes = (size_t)total;
    return ATTN_OK;
}

attn_status attn_kv_pages_init(attn_kv_pages **pool, void *memory, size_t bytes, const attn_kv_pages_desc *desc,
                               attn_error *err) {
    if (!pool || !memory) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", pool ? "memory" : "pool");
    size_t need;
    attn_status st = attn_kv_pages_bytes(&need, desc, err);
    if (st) return st;
    if (bytes < need)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the pool needs %zu bytes (attn_kv_pages_bytes), %zu given", need,
                         bytes);
    char *at = (char *)(((uintptr_t)memory + ALIGN - 1) / ALIGN * ALIGN);
    attn_kv_pages *p = (attn_kv_pages *)(void *)at;
    layout l;
    read_desc(&p->d, &l, desc, err);
    p->table_stride = l.table_stride;
    p->refs = (int32_t *)(void *)(at + l.refs);
    p->page_stack = (int32_t *)(void *)(at + l.page_stack);
    p->id_stack = (int32_t *)(void *)(at + l.id_stack);
    p->alive = (uint8_t *)(at + l.alive);
    p->lengths = (int64_t *)(void *)(at + l.lengths);
    p->tables = (int32_t *)(void *)(at + l.tables);
    p->kres = p->d.key_dtype ? (uint16_t *)(void *)(at + l.kres) : NULL;
    p->k = (char *)(((uintptr_t)(at + l.k) + MEM_PAGE - 1) / MEM_PAGE * MEM_PAGE); /* within the region's room */
    p->v = (char *)(((uintptr_t)(at + l.v) + MEM_PAGE - 1) / MEM_PAGE * MEM_PAGE);
    p->k_scale = p->v_scale = NULL;
    p->generation = (uint64_t)atomic_fetch_add_explicit(&pools_made, 1, memory_order_relaxed) << 32;
    if (p->d.k_scale || p->d.v_scale) { /* copied: the caller's arrays may go; a missing one is all 1 */
        p->k_scale = (float *)(void *)(at + l.scales), p->v_scale = p->k_scale + p->d.heads;
        for (int64_t h = 0; h < p->d.heads; h++)
            p->k_scale[h] = p->d.k_scale ? p->d.k_scale[h] : 1.0f, p->v_scale[h] = p->d.v_scale ? p->d.v_scale[h] : 1.0f;
    }
    if (p->d.key_dtype) p->k_scale = NULL; /* keys quantized per channel: values' scales only */
    p->d.k_scale = p->k_scale, p->d.v_scale = p->v_scale;
    /* Stacks filled so that page 0 and id 0 come first. */
    p->free_pages = p->d.num_pages;
    for (int64_t i = 0; i < p->d.num_pages; i++) p->refs[i] = 0, p->page_stack[i] = (int32_t)(p->d.num_pages - 1 - i);
    p->free_ids = p->d.max_sequences;
    for (int64_t i = 0; i < p->d.max_sequences; i++) {
        p->id_stack[i] = (int32_t)(p->d.max_sequences - 1 - i);
        p->alive[i] = 0, p->lengths[i] = 0;
    }
    *pool = p;
    return ATTN_OK;
}

/* ---- sequences and pages ---------------------------------------------------- */

static attn_status check_live(const attn_kv_pages *p, int64_t seq, const char *name, attn_error *err) {
    if (seq < 0 || seq >= p->d.max_sequences)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "%s %lld is not a sequence of this pool (ids 0 to %lld)", name,
                         (long long)seq, (long long)p->d.max_sequences - 1);
    if (p->alive[seq] != ALIVE)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "%s %lld is not a live sequence (never created, or freed)", name,
                         (long long)seq);
    return ATTN_OK;
}

static int32_t *table_of(const attn_kv_pages *p, int64_t seq) { return p->tables + seq * p->table_stride; }

/* Grouped keys: sequence seq's residual rows, (Hk, R + 32, E) f16, and their bytes. */
static int64_t window_rows(const attn_kv_pages *p) { return p->d.residual + ATTN_KEY_GROUP; }
static size_t residual_bytes(const attn_kv_pages *p) { return (size_t)(p->d.heads * window_rows(p) * p->d.key_dim) * 2; }
static uint16_t *residual_of(const attn_kv_pages *p, int64_t seq) {
    return p->kres + seq * p->d.heads * window_rows(p) * p->d.key_dim;
}

/* Where pages lie in a region: Hk heads of P rows a page, num_pages pages,
 * head-major or a page's heads side by side (attn_kv_pages_desc.head_major). */
typedef struct page_layout {
    int64_t heads, P, num_pages;
    bool head_major;
} page_layout;

/* Which part of the region, counted in one head's parts of a page, is
 * head h's part of page `page`. */
static int64_t part_of(page_layout g, int64_t page, int64_t h) {
    return g.head_major ? h * g.num_pages + page : page * g.heads + h;
}

static page_layout pool_layout(const attn_kv_pages *p) {
    return (page_layout){p->d.heads, p->d.page_size, p->d.num_pages, p->d.head_major != 0};
}

/* Grouped keys: head h's groups in page `page` (P / 32 of them). */
static char *groups_of(const attn_kv_pages *p, int64_t page, int64_t h) {
    int64_t per_page = p->d.page_size / ATTN_KEY_GROUP;
    return p->k + part_of(pool_layout(p), page, h) * per_page * attn_group_bytes(p->d.key_dtype, p->d.key_dim);
}
/* Grouped keys: head h's group of position pos (a multiple of 32) of a sequence with `table`. */
static char *group_at(const attn_kv_pages *p, const int32_t *table, int64_t h, int64_t pos) {
    int64_t P = p->d.page_size;
    return groups_of(p, table[pos / P], h) + pos % P / ATTN_KEY_GROUP * attn_group_bytes(p->d.key_dtype, p->d.key_dim);
}

static int32_t take_page(attn_kv_pages *p) {
    int32_t page = p->page_stack[--p->free_pages];
    p->refs[page] = 1;
    return page;
}

/* One sequence lets go of entries [from, to) of its table. */
static void release(attn_kv_pages *p, const int32_t *table, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++)
        if (--p->refs[table[i]] == 0) p->page_stack[p->free_pages++] = table[i];
}

static attn_status take_id(attn_kv_pages *p, int64_t *seq, attn_error *err) {
    if (p->free_ids == 0)
        return attn_fail(err, ATTN_ERR_FULL, "all %lld of the pool's sequences (desc.max_sequences) are alive: free one first",
                         (long long)p->d.max_sequences);
    int32_t id = p->id_stack[--p->free_ids];
    p->alive[id] = ALIVE;
    p->lengths[id] = 0;
    *seq = id;
    return ATTN_OK;
}

attn_status attn_kv_pages_create(attn_kv_pages *pool, int64_t *seq, attn_error *err) {
    if (!pool || !seq) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", pool ? "seq" : "pool");
    return take_id(pool, seq, err);
}

attn_status attn_kv_pages_fork(attn_kv_pages *pool, int64_t *child, int64_t parent, attn_error *err) {
    if (!pool || !child) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", pool ? "child" : "pool");
    attn_status st = check_live(pool, parent, "parent", err);
    if (st || (st = take_id(pool, child, err))) return st;
    const int32_t *from = table_of(pool, parent);
    int32_t *to = table_of(pool, *child);
    int64_t n = pages_for(pool->lengths[parent], pool->d.page_size);
    for (int64_t i = 0; i < n; i++) to[i] = from[i], pool->refs[from[i]]++;
    pool->lengths[*child] = pool->lengths[parent];
    if (grouped(pool)) /* the residual rows are the sequence's own: copied */
        memcpy(residual_of(pool, *child), residual_of(pool, parent), residual_bytes(pool));
    moved_on(pool);
    return ATTN_OK;
}

attn_status attn_kv_pages_free(attn_kv_pages *pool, int64_t seq, attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    attn_status st = check_live(pool, seq, "seq", err);
    if (st) return st;
    release(pool, table_of(pool, seq), 0, pages_for(pool->lengths[seq], pool->d.page_size));
    pool->alive[seq] = 0;
    pool->lengths[seq] = 0;
    pool->id_stack[pool->free_ids++] = (int32_t)seq;
    moved_on(pool);
    return ATTN_OK;
}

attn_status attn_kv_pages_truncate(attn_kv_pages *pool, int64_t seq, int64_t length, attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    attn_status st = check_live(pool, seq, "seq", err);
    if (st) return st;
    int64_t have = pool->lengths[seq];
    if (length < 0 || length > have)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "length %lld is not between 0 and the %lld position%s sequence %lld holds",
                         (long long)length, (long long)have, attn_plural(have), (long long)seq);
    /* A partly filled last page that stays is kept, shared or not: the rows
     * past the new end are never read, and an append copies a shared page
     * before writing into it. Grouped keys: the groups the shorter window
     * takes back become residual rows again (their dequantized values in
     * f16); their bytes in the pages are left as they are. */
    const int64_t G = ATTN_KEY_GROUP, R = pool->d.residual, E = pool->d.key_dim;
    const int64_t now = attn_group_full(length, R), was = attn_group_full(have, R), to = was < length ? was : length;
    if (grouped(pool) && now < was)
        for (int64_t h = 0; h < pool->d.heads; h++) {
            uint16_t *window = residual_of(pool, seq) + h * window_rows(pool) * E;
            attn_group_cut(window, R, E, have, length);
            for (int64_t p = now; p < to; p += G)
                attn_group_unquantize(window + (p - now) * E, group_at(pool, table_of(pool, seq), h, p), E,
                                      pool->d.key_dtype, to - p < G ? to - p : G);
        }
    release(pool, table_of(pool, seq), pages_for(length, pool->d.page_size), pages_for(have, pool->d.page_size));
    pool->lengths[seq] = length;
    if (length != have) moved_on(pool);
    return ATTN_OK;
}

attn_status attn_kv_pages_sequence(const attn_kv_pages *pool, int64_t seq, int64_t *length, const int32_t **pages,
                                   attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    attn_status st = check_live(pool, seq, "seq", err);
    if (st) return st;
    if (length) *length = pool->lengths[seq];
    if (pages) *pages = table_of(pool, seq);
    return ATTN_OK;
}

int64_t attn_kv_pages_free_pages(const attn_kv_pages *pool) { return pool ? pool->free_pages : -1; }

int64_t attn_kv_pages_page_refs(const attn_kv_pages *pool, int64_t page) {
    return pool && page >= 0 && page < pool->d.num_pages ? pool->refs[page] : -1;
}

/* ---- rows of pages as tensors --------------------------------------------- */

/* Rows r0 .. r0 + n - 1 of `page`, every head, as a (Hk, n, cols) tensor over
 * the page region at base: what a copy into or out of one page reads or
 * writes. The caller has checked that the page region's bytes fit. */
static void page_rows(attn_tensor *t, const void *base, attn_dtype dt, page_layout g, int64_t cols, int64_t page,
                      int64_t r0, int64_t n) {
    /* a row's step: cols elements, or a quantized row's bytes (attn_copy_rows' convention) */
    int64_t row = attn_dtype_quantized(dt) ? attn_row_bytes(dt, cols) : cols;
    int64_t first = part_of(g, page, 0), apart = part_of(g, page, 1) - first; /* in heads' parts */
    char *at = (char *)base + ((first * g.P + r0) * row) * attn_stride_unit(dt);
    *t = (attn_tensor){at, dt, 3, {g.heads, n, cols}, {apart * g.P * row, row, 1}};
}

static page_layout view_layout(const attn_kv_paged_view *w) {
    return (page_layout){w->heads, w->page_size, w->num_pages, w->head_major != 0};
}


/* t's entries n0 .. n0 + n - 1 of dimension `dim`, every other dimension
 * whole, with dimensions a and b swapped (a == b: none): the slice of
 * packed rows (total, Hk, cols) that one page takes, as (Hk, n, cols). */
static attn_tensor narrow(const attn_tensor *t, int dim, int64_t n0, int64_t n, int a, int b) {
    attn_tensor s = *t;
    s.data = (char *)t->data + n0 * t->strides[dim] * (int64_t)attn_dtype_size(t->dtype);
    s.shape[dim] = n;
    int64_t x = s.shape[a], y = s.strides[a];
    s.shape[a] = s.shape[b], s.strides[a] = s.strides[b];
    s.shape[b] = x, s.strides[b] = y;
    return s;
}

/* ---- append ---------------------------------------------------------------- */

/* k or v to append: (total, Hk, cols), a float dtype the pool takes. */
static attn_status check_new(const attn_tensor *t, const char *name, const attn_kv_pages_desc *d, int64_t cols,
                             attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    if (t->rank != 3)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be 3: (total new positions, Hk, dim)", name,
                         t->rank);
    if (t->shape[0] < 0 || t->shape[1] != d->heads || t->shape[2] != cols) {
        char s[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; the pool holds %lld head%s of %lld value%s", name, s,
                         (long long)d->heads, attn_plural(d->heads), (long long)cols, attn_plural(cols));
    }
    bool wide = d->dtype == ATTN_F64; /* an f64 pool takes f64, the others f32, f16 or bf16 */
    if (wide ? t->dtype != ATTN_F64 : !storage_dtype(t->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; %s pool takes %s", name, attn_dtype_name(t->dtype),
                         wide ? "an f64" : "a", wide ? "f64" : "f32, f16 or bf16");
    return attn_check_extent(t, name, err);
}

/* Whether a sequence growing from len to now positions writes into its page
 * e, one it held before the call: its partly filled last page, or (keys
 * quantized per channel) a page that a group leaving the residual window is
 * quantized into, the groups at positions attn_group_full(len, R) ..
 * attn_group_full(now, R) - 1 (whole groups, and P a multiple of 32). */
static bool writes_into(const attn_kv_pages *p, int64_t len, int64_t now, int64_t e) {
    const int64_t P = p->d.page_size, R = p->d.residual;
    if (now == len || e >= pages_for(len, P)) return false;
    if (len % P && e == len / P) return true;
    int64_t from = attn_group_full(len, R), to = attn_group_full(now, R); /* page e meets from .. to - 1 */
    return grouped(p) && from < to && from < (e + 1) * P && e * P < to;
}

/* The pages the append's sequence seqs[i] copies before writing into them:
 * each page it writes into (writes_into) that another sequence still holds
 * when its turn comes. The appends run in order, and each writer of a
 * shared page copies it and lets go of it, so a page that r sequences hold
 * is copied by the first r - 1 of its writers in seqs and kept by any
 * later one (a forked page lies at the same index in every holder's
 * table). Exact, so that a call that fits the free pages is taken. */
static int64_t copies(const attn_kv_pages *p, const int64_t *seqs, const int64_t *cu, int64_t i) {
    const int64_t P = p->d.page_size, len = p->lengths[seqs[i]], now = len + (cu[i + 1] - cu[i]);
    const int32_t *table = table_of(p, seqs[i]);
    /* the pages it may write into: from the first group leaving the window
     * (grouped keys) or its last page, to its last page */
    int64_t first = grouped(p) ? attn_group_full(len, p->d.residual) / P : len / P, n = 0;
    for (int64_t e = first; e < pages_for(len, P); e++) {
        if (!writes_into(p, len, now, e)) continue;
        int64_t writers = 0; /* earlier in seqs: each copied the page while it was still shared */
        for (int64_t j = 0; j < i; j++) {
            int64_t lj = p->lengths[seqs[j]];
            writers += writes_into(p, lj, lj + (cu[j + 1] - cu[j]), e) && table_of(p, seqs[j])[e] == table[e];
        }
        n += writers < p->refs[table[e]] - 1;
    }
    return n;
}

/* The pages the append needs, counted after its ids are checked. */
static attn_status pages_needed(const attn_kv_pages *p, const int64_t *seqs, int64_t n, const int64_t *cu,
                                attn_error *err) {
    const int64_t P = p->d.page_size;
    const int64_t max_length = p->table_stride * P;
    int64_t need = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = seqs[i], len = p->lengths[s], add = cu[i + 1] - cu[i], now;
        if (add == 0) continue;
        if (!attn_add_i64(len, add, &now) || now > max_length || (p->d.max_length && now > p->d.max_length))
            return attn_fail(err, ATTN_ERR_FULL, "sequence %lld holds %lld position%s: %lld more pass its maximum of %lld",
                             (long long)s, (long long)len, attn_plural(len), (long long)add,
                             (long long)(p->d.max_length ? p->d.max_length : max_length));
        need += pages_for(now, P) - pages_for(len, P) + copies(p, seqs, cu, i);
    }
    if (need > p->free_pages)
        return attn_fail(err, ATTN_ERR_FULL, "the append needs %lld page%s and the pool has %lld free", (long long)need,
                         attn_plural(need), (long long)p->free_pages);
    return ATTN_OK;
}

/* Every id live and named once: each is marked as it is seen, and every
 * mark undone before returning, so the pool is as it was. */
static attn_status check_ids(attn_kv_pages *p, const int64_t *seqs, int64_t n, const int64_t *cu, attn_error *err) {
    attn_status st = ATTN_OK;
    int64_t marked = 0;
    for (; marked < n; marked++) {
        int64_t s = seqs[marked];
        if (s >= 0 && s < p->d.max_sequences && p->alive[s] == MARKED) {
            st = attn_fail(err, ATTN_ERR_ARGUMENT,
                           "sequence %lld is named twice (seqs[%lld]): one append per sequence per call",
                           (long long)s, (long long)marked);
            break;
        }
        if ((st = check_live(p, s, "sequence", err))) break;
        p->alive[s] = MARKED;
    }
    for (int64_t i = 0; i < marked; i++) p->alive[seqs[i]] = ALIVE;
    return st ? st : pages_needed(p, seqs, n, cu, err);
}

/* Copy the first n rows of page `from` into page `to`, keys and values. */
static void copy_page_rows(attn_kv_pages *p, int32_t to, int32_t from, int64_t n) {
    const attn_kv_pages_desc *d = &p->d;
    attn_tensor dk, sk, dv, sv;
    page_rows(&dv, p->v, d->dtype, pool_layout(p), d->value_dim, to, 0, n);
    page_rows(&sv, p->v, d->dtype, pool_layout(p), d->value_dim, from, 0, n);
    attn_copy_rows(&dv, &sv);
    if (grouped(p)) { /* the full groups of the n rows; the rest lies in the residual */
        size_t bytes = (size_t)(n / ATTN_KEY_GROUP * attn_group_bytes(d->key_dtype, d->key_dim));
        for (int64_t h = 0; h < d->heads; h++) memcpy(groups_of(p, to, h), groups_of(p, from, h), bytes);
        return;
    }
    page_rows(&dk, p->k, d->dtype, pool_layout(p), d->key_dim, to, 0, n);
    page_rows(&sk, p->k, d->dtype, pool_layout(p), d->key_dim, from, 0, n);
    attn_copy_rows(&dk, &sk);
}

/* Copy on write: entry e of a sequence's table, a page another sequence
 * holds too, becomes a page of its own holding the first `rows` rows of
 * the shared one, which the sequence lets go of. A free page is there:
 * pages_needed counted it (copies). */
static void make_own(attn_kv_pages *p, int32_t *table, int64_t e, int64_t rows) {
    int32_t own = take_page(p);
    copy_page_rows(p, own, table[e], rows);
    p->refs[table[e]]--;
    table[e] = own;
}

/* Grouped keys: positions pos .. pos + run - 1 of sequence s, sk (Hk, run,
 * E), into each head's window; a group leaving the window is quantized into
 * its page, which s first makes its own when another sequence holds it. */
static void append_grouped(attn_kv_pages *pool, int64_t s, const attn_tensor *sk, int64_t pos, int64_t run) {
    const attn_kv_pages_desc *d = &pool->d;
    const int64_t E = d->key_dim, R = d->residual, P = d->page_size;
    int32_t *table = table_of(pool, s);
    for (int64_t i = 0; i < run; i++) {
        bool full = false;
        for (int64_t h = 0; h < d->heads; h++) { /* head h's rows of sk */
            attn_mat rows = {(char *)sk->data + h * sk->strides[0] * (int64_t)attn_dtype_size(sk->dtype), sk->dtype,
                             run, E, sk->strides[1], sk->strides[2]};
            full = attn_group_push(residual_of(pool, s) + h * window_rows(pool) * E, R, &rows, i, pos + i, E);
        }
        if (!full) continue;
        int64_t at = attn_group_full(pos + i, R); /* the group leaving the window */
        if (pool->refs[table[at / P]] > 1) make_own(pool, table, at / P, P); /* counted by copies */
        for (int64_t h = 0; h < d->heads; h++)
            attn_group_retire(group_at(pool, table, h, at), residual_of(pool, s) + h * window_rows(pool) * E, R, E,
                              d->key_dtype);
    }
}

void attn_kv_pages_memory(attn_tensor *t, const attn_kv_pages *pool) {
    const attn_kv_pages_desc *d = &pool->d;
    int64_t vb, end;
    page_region_bytes(&vb, d->num_pages, d->heads, d->page_size, d->value_dim, d->dtype); /* fits: sized at init */
    end = (int64_t)(pool->v - (const char *)pool) + vb;
    attn_tensor_init(t, (void *)(uintptr_t)pool, ATTN_BOOL, 1, &end, NULL, NULL);
}

attn_status attn_kv_pages_append(attn_kv_pages *pool, const int64_t *seqs, int64_t n, const attn_tensor *k,
                                 const attn_tensor *v, const int64_t *cu_seqlens, attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    if (n < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "n is %lld; it must be 0 or more", (long long)n);
    if (n == 0) return ATTN_OK;
    if (!seqs) return attn_fail(err, ATTN_ERR_NULL, "seqs is NULL");
    const attn_kv_pages_desc *d = &pool->d;
    attn_status st = check_new(k, "k", d, d->key_dim, err);
    if (st || (st = check_new(v, "v", d, d->value_dim, err))) return st;
    if (v->shape[0] != k->shape[0])
        return attn_fail(err, ATTN_ERR_SHAPE, "k has %lld row%s but v has %lld", (long long)k->shape[0],
                         attn_plural(k->shape[0]), (long long)v->shape[0]);
    if ((st = attn_check_cu_seqlens(cu_seqlens, n, k->shape[0], "cu_seqlens", err))) return st;
    /* The call writes the pool's pages and its bookkeeping: k and v may
     * share no byte with any of its memory. */
    attn_tensor whole;
    attn_kv_pages_memory(&whole, pool);
    const attn_named outs[1] = {{&whole, "the pool's memory"}};
    const attn_named ins[2] = {{k, "k"}, {v, "v"}};
    if ((st = attn_check_no_overlap(outs, 1, ins, 2, err)) || (st = check_ids(pool, seqs, n, cu_seqlens, err)))
        return st;

    /* Everything fits: write. */
    const int64_t P = d->page_size;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = seqs[i], len = pool->lengths[s], add = cu_seqlens[i + 1] - cu_seqlens[i];
        if (add == 0) continue;
        int32_t *table = table_of(pool, s);
        if (len % P && pool->refs[table[len / P]] > 1) /* its partly filled last page (counted by copies) */
            make_own(pool, table, len / P, len % P);
        for (int64_t pos = len; pos < len + add;) {
            int64_t row = pos % P, run = P - row < len + add - pos ? P - row : len + add - pos;
            if (row == 0) table[pos / P] = take_page(pool);
            int64_t from = cu_seqlens[i] + pos - len; /* the packed row of position pos */
            attn_tensor dk, dv, sk = narrow(k, 0, from, run, 0, 1), sv = narrow(v, 0, from, run, 0, 1);
            page_rows(&dv, pool->v, d->dtype, pool_layout(pool), d->value_dim, table[pos / P], row, run);
            attn_copy_kv_rows(&dv, &sv, pool->v_scale, d->heads, false);
            if (grouped(pool)) {
                append_grouped(pool, s, &sk, pos, run);
            } else {
                page_rows(&dk, pool->k, d->dtype, pool_layout(pool), d->key_dim, table[pos / P], row, run);
                attn_copy_kv_rows(&dk, &sk, pool->k_scale, d->heads, d->hadamard);
            }
            pos += run;
        }
        pool->lengths[s] = len + add;
        moved_on(pool);
    }
    return ATTN_OK;
}

/* ---- views ------------------------------------------------------------------ */

attn_status attn_kv_pages_view(attn_kv_paged_view *view, const attn_kv_pages *pool, attn_error *err) {
    if (!view || !pool) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", view ? "pool" : "view");
    attn_kv_paged_view o = attn_kv_paged_view_default();
    const attn_kv_pages_desc *d = &pool->d;
    o.dtype = d->dtype, o.heads = d->heads, o.key_dim = d->key_dim, o.value_dim = d->value_dim;
    o.page_size = d->page_size, o.num_pages = d->num_pages;
    o.k_pages = pool->k, o.v_pages = pool->v;
    o.num_sequences = d->max_sequences, o.lengths = pool->lengths;
    o.page_table = pool->tables, o.table_stride = pool->table_stride, o.table_offsets = NULL;
    o.key_dtype = d->key_dtype, o.k_residual = pool->kres, o.residual = d->residual;
    o.k_scale = pool->k_scale, o.v_scale = pool->v_scale, o.hadamard = d->hadamard, o.head_major = d->head_major;
    o.generation = &pool->generation;
    /* A view struct from an older attn.h ends before some fields; read back,
     * those take their defaults. Where this pool uses one (its keys' format,
     * residual rows and window, scales, the rotation), such a view would
     * describe other keys: refused instead. */
    const attn_kv_paged_view def = attn_kv_paged_view_default();
    /* Every pool fills the fields up to table_stride (every attn.h's view
     * has them): a struct that ends before them, read back, describes no
     * pool at all. */
    const size_t every = offsetof(attn_kv_paged_view, table_stride) + sizeof o.table_stride;
    if (view->struct_size >= sizeof(size_t) && view->struct_size < every)
        return attn_fail(err, ATTN_ERR_OPTION,
                         "view->struct_size is %zu, too small for a view: the pool fills its first %zu bytes, up to "
                         "table_stride (set view->struct_size = sizeof *view)",
                         view->struct_size, every);
    const struct { size_t end; bool used; const char *name; } later[] = {
        {offsetof(attn_kv_paged_view, key_dtype) + sizeof o.key_dtype, o.key_dtype != def.key_dtype, "key_dtype"},
        {offsetof(attn_kv_paged_view, k_residual) + sizeof o.k_residual, o.k_residual != def.k_residual, "k_residual"},
        {offsetof(attn_kv_paged_view, k_scale) + sizeof o.k_scale, o.k_scale != def.k_scale, "k_scale"},
        {offsetof(attn_kv_paged_view, v_scale) + sizeof o.v_scale, o.v_scale != def.v_scale, "v_scale"},
        {offsetof(attn_kv_paged_view, hadamard) + sizeof o.hadamard, o.hadamard != def.hadamard, "hadamard"},
        {offsetof(attn_kv_paged_view, residual) + sizeof o.residual, o.residual != def.residual, "residual"},
        {offsetof(attn_kv_paged_view, head_major) + sizeof o.head_major, o.head_major != def.head_major, "head_major"},
    };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
        if (later[i].used && view->struct_size >= sizeof(size_t) && view->struct_size < later[i].end)
            return attn_fail(err, ATTN_ERR_OPTION,
                             "view->struct_size is %zu, too small for the pool's %s: a view from an older attn.h "
                             "cannot describe this pool's keys",
                             view->struct_size, later[i].name);
    return attn_versioned_write(view, &o, sizeof o, "view", "set view->struct_size = sizeof *view", err);
}

/* Sequence i's table in a checked view. */
static const int32_t *view_table(const attn_kv_paged_view *w, int64_t i) {
    return w->page_table + (w->table_offsets ? w->table_offsets[i] : i * w->table_stride);
}

/* The caller's view, read up to its struct_size into *w, and checked. */
static attn_status read_view(attn_kv_paged_view *w, const attn_kv_paged_view *in, attn_error *err) {
    if (!in) return attn_fail(err, ATTN_ERR_NULL, "view is NULL");
    *w = attn_kv_paged_view_default();
    attn_status st = attn_versioned_read(w, sizeof *w, in, "view", "start from attn_kv_paged_view_default()", err);
    if (st) return st;
    const int64_t dims[5] = {w->heads, w->key_dim, w->value_dim, w->page_size, w->num_pages};
    static const char *const NAMES[5] = {"heads", "key_dim", "value_dim", "page_size", "num_pages"};
    for (int i = 0; i < 5; i++)
        if (dims[i] < 1)
            return attn_fail(err, ATTN_ERR_SHAPE, "view->%s is %lld; it must be at least 1", NAMES[i],
                             (long long)dims[i]);
    if (w->num_sequences < 0)
        return attn_fail(err, ATTN_ERR_SHAPE, "view->num_sequences is %lld; it must be 0 or more",
                         (long long)w->num_sequences);
    if ((st = check_page_dtype(w->dtype, w->key_dtype, w->key_dim, w->value_dim, "view", err)) ||
        (st = attn_group_check(w->key_dtype, w->dtype, w->page_size, w->key_dim, "view", "view->page_size", err)) ||
        (st = attn_group_check_plain(w->key_dtype, w->k_scale, w->hadamard, "view", err)) ||
        (st = attn_group_check_residual(w->key_dtype, w->residual, "view", err)) ||
        (st = attn_check_head_scales(w->k_scale, w->v_scale, w->heads, w->dtype, "view", err)) ||
        (st = attn_check_hadamard(w->hadamard, w->dtype, w->key_dim, "view", err)) ||
        (st = check_head_major(w->head_major, "view", err)))
        return st;
    int64_t kb, vb, res;
    if (!key_region_bytes(&kb, w->num_pages, w->heads, w->page_size, w->key_dim, w->dtype, w->key_dtype) ||
        (w->key_dtype && (!residual_values(&res, w->heads, w->residual, w->key_dim) ||
                          !attn_mul_i64(res, w->num_sequences, &res))) ||
        !page_region_bytes(&vb, w->num_pages, w->heads, w->page_size, w->value_dim, w->dtype))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the view's pages' byte size overflows");
    if (!w->k_pages || !w->v_pages) return attn_fail(err, ATTN_ERR_NULL, "view->k_pages or view->v_pages is NULL");
    if (w->num_sequences == 0) return ATTN_OK;
    if (!w->lengths || !w->page_table)
        return attn_fail(err, ATTN_ERR_NULL, "view->lengths or view->page_table is NULL");
    if (w->key_dtype && !w->k_residual)
        return attn_fail(err, ATTN_ERR_NULL, "view->k_residual is NULL; %s keys keep their last positions there",
                         attn_dtype_name(w->key_dtype));
    if (w->table_offsets && w->table_offsets[0] < 0)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "view->table_offsets[0] is %lld; it must be 0 or more",
                         (long long)w->table_offsets[0]);
    if (!w->table_offsets && w->table_stride < 0)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "view->table_stride is %lld; it must be 0 or more",
                         (long long)w->table_stride);
    /* Lengths and offsets first, for every sequence: no entry is read
     * until the whole table is known to hold each sequence's pages. */
    for (int64_t i = 0; i < w->num_sequences; i++) {
        int64_t len = w->lengths[i], entries;
        if (len < 0)
            return attn_fail(err, ATTN_ERR_ARGUMENT, "view->lengths[%lld] is %lld; it must be 0 or more", (long long)i,
                             (long long)len);
        if (w->table_offsets) {
            if (w->table_offsets[i + 1] < w->table_offsets[i])
                return attn_fail(err, ATTN_ERR_ARGUMENT, "view->table_offsets decreases at [%lld]", (long long)i + 1);
            entries = w->table_offsets[i + 1] - w->table_offsets[i];
        } else {
            entries = w->table_stride;
        }
        int64_t need = pages_for(len, w->page_size);
        if (need > entries)
            return attn_fail(err, ATTN_ERR_ARGUMENT,
                             "sequence %lld has %lld positions, %lld pages of %lld, but its table has %lld entries",
                             (long long)i, (long long)len, (long long)need, (long long)w->page_size, (long long)entries);
    }
    /* Every table entry's byte offset must fit, before any is formed. */
    int64_t last = 0;
    if (w->table_offsets) last = w->table_offsets[w->num_sequences];
    if (w->table_offsets ? last > INT64_MAX / 4
                         : !attn_mul_i64(w->num_sequences, w->table_stride, &last) || last > INT64_MAX / 4)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the view's page table is larger than any memory: %s",
                         w->table_offsets ? "table_offsets' last entry is too large"
                                          : "num_sequences · table_stride overflows");
    for (int64_t i = 0; i < w->num_sequences; i++) {
        int64_t need = pages_for(w->lengths[i], w->page_size);
        const int32_t *t = need ? view_table(w, i) : NULL;
        for (int64_t e = 0; e < need; e++)
            if (t[e] < 0 || t[e] >= w->num_pages)
                return attn_fail(err, ATTN_ERR_ARGUMENT,
                                 "sequence %lld's page table entry %lld is page %d, outside the %lld pages", (long long)i,
                                 (long long)e, (int)t[e], (long long)w->num_pages);
    }
    return ATTN_OK;
}

void attn_kv_paged_regions(attn_tensor regions[5], const attn_kv_paged_view *w) {
    /* fit: the view was checked; quantized pages as their bytes */
    bool q = attn_dtype_quantized(w->dtype);
    attn_dtype dt = q ? ATTN_BOOL : w->dtype;
    int64_t kn = w->num_pages * w->heads * w->page_size * (q ? attn_row_bytes(w->dtype, w->key_dim) : w->key_dim);
    if (w->key_dtype) kn = w->num_pages * w->heads * (w->page_size / ATTN_KEY_GROUP) * attn_group_bytes(w->key_dtype, w->key_dim);
    int64_t vn = w->num_pages * w->heads * w->page_size * (q ? attn_row_bytes(w->dtype, w->value_dim) : w->value_dim);
    int64_t n = w->num_sequences, offsets = n + 1;
    int64_t entries = w->table_offsets ? w->table_offsets[n] : n * w->table_stride;
    memset(regions, 0, 5 * sizeof *regions);
    attn_tensor_init(&regions[0], (void *)w->k_pages, w->key_dtype ? ATTN_BOOL : dt, 1, &kn, NULL, NULL);
    attn_tensor_init(&regions[1], (void *)w->v_pages, dt, 1, &vn, NULL, NULL);
    if (n == 0) return;
    /* int64 and int32 arrays as the float types of their sizes: only their bytes count */
    attn_tensor_init(&regions[2], (void *)w->lengths, ATTN_F64, 1, &n, NULL, NULL);
    attn_tensor_init(&regions[3], (void *)w->page_table, ATTN_F32, 1, &entries, NULL, NULL);
    if (w->table_offsets) attn_tensor_init(&regions[4], (void *)w->table_offsets, ATTN_F64, 1, &offsets, NULL, NULL);
}

void attn_kv_paged_residual(attn_tensor *t, const attn_kv_paged_view *w) {
    int64_t n = w->num_sequences * w->heads * (w->residual + ATTN_KEY_GROUP) * w->key_dim; /* fit: the view was checked */
    memset(t, 0, sizeof *t);
    if (w->key_dtype && n > 0) attn_tensor_init(t, (void *)(uintptr_t)w->k_residual, ATTN_F16, 1, &n, NULL, NULL);
}

const char *const attn_kv_paged_region_names[5] = {"the key pages", "the value pages", "the view's lengths",
                                                   "the view's page table", "the view's table offsets"};

attn_status attn_kv_paged_check(const attn_kv_paged_view *view, attn_error *err) {
    attn_kv_paged_view w;
    return read_view(&w, view, err);
}

/* k or v to gather into: (Hk, length, cols), any float dtype. */
static attn_status check_out(const attn_tensor *t, const char *name, const attn_kv_paged_view *w, int64_t len,
                             int64_t cols, attn_error *err) {
    if (!t || !t->data) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL or has NULL data", name);
    if (t->rank != 3) return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; it must be 3: (Hk, length, dim)", name, t->rank);
    if (t->shape[0] != w->heads || t->shape[1] != len || t->shape[2] != cols) {
        char s[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; the sequence is (%lld, %lld, %lld)", name, s,
                         (long long)w->heads, (long long)len, (long long)cols);
    }
    if (t->dtype != ATTN_F64 && !storage_dtype(t->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f64, f32, f16 or bf16", name,
                         attn_dtype_name(t->dtype));
    attn_status st = attn_check_extent(t, name, err);
    return st ? st : attn_check_writable(t, name, err); /* an output: no element twice */
}

attn_status attn_kv_paged_gather(attn_tensor *k, attn_tensor *v, const attn_kv_paged_view *view, int64_t i,
                                 attn_error *err) {
    attn_kv_paged_view w;
    attn_status st = read_view(&w, view, err);
    if (st) return st;
    if (i < 0 || i >= w.num_sequences)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "sequence %lld is outside the view's %lld", (long long)i,
                         (long long)w.num_sequences);
    int64_t len = w.lengths[i];
    if ((st = check_out(k, "k", &w, len, w.key_dim, err)) || (st = check_out(v, "v", &w, len, w.value_dim, err)))
        return st;
    attn_tensor regions[5];
    attn_kv_paged_regions(regions, &w);
    const attn_named outs[2] = {{k, "k"}, {v, "v"}};
    attn_named ins[6];
    for (int r = 0; r < 5; r++) ins[r] = (attn_named){regions[r].data ? &regions[r] : NULL, attn_kv_paged_region_names[r]};
    attn_tensor residual;
    attn_kv_paged_residual(&residual, &w);
    ins[5] = (attn_named){residual.data ? &residual : NULL, "the residual keys"};
    if ((st = attn_check_no_overlap(outs, 2, ins, 6, err))) return st;
    attn_kv_paged_copy(k, v, &w, i);
    return ATTN_OK;
}

void attn_kv_paged_copy(attn_tensor *k, attn_tensor *v, const attn_kv_paged_view *w, int64_t i) {
    const int64_t len = w->lengths[i], P = w->page_size;
    if (len == 0) return;
    const int32_t *table = view_table(w, i);
    for (int64_t pos = 0; pos < len; pos += P) {
        int64_t run = len - pos < P ? len - pos : P;
        attn_tensor sk, sv, dk = narrow(k, 1, pos, run, 0, 0), dv = narrow(v, 1, pos, run, 0, 0);
        page_rows(&sv, w->v_pages, w->dtype, view_layout(w), w->value_dim, table[pos / P], 0, run);
        attn_copy_kv_rows(&dv, &sv, w->v_scale, w->heads, false);
        if (w->key_dtype) continue;
        page_rows(&sk, w->k_pages, w->dtype, view_layout(w), w->key_dim, table[pos / P], 0, run);
        attn_copy_kv_rows(&dk, &sk, w->k_scale, w->heads, w->hadamard);
    }
    if (!w->key_dtype) return;
    /* Keys quantized per channel: through their row source, span by span
     * (a group's rows dequantized, the residual's f16 rows). */
    const int64_t E = w->key_dim;
    attn_paged_rows kp = {w->k_pages, w->key_dtype, w->num_pages, w->heads, P, E, table, pages_for(len, P), len,
                          (const uint16_t *)w->k_residual + i * w->heads * (w->residual + ATTN_KEY_GROUP) * E,
                          w->residual, w->head_major != 0};
    for (int64_t h = 0; h < w->heads; h++)
        attn_grouped_gather(&kp, h, (char *)k->data + h * k->strides[0] * (int64_t)attn_dtype_size(k->dtype), k->dtype,
                            k->strides[1], k->strides[2]);
}

attn_status attn_kv_pages_gather(attn_tensor *k, attn_tensor *v, const attn_kv_pages *pool, int64_t seq,
                                 attn_error *err) {
    if (!pool) return attn_fail(err, ATTN_ERR_NULL, "pool is NULL");
    attn_status st = check_live(pool, seq, "seq", err);
    if (st) return st;
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, pool, NULL);
    return attn_kv_paged_gather(k, v, &w, seq, err);
}
