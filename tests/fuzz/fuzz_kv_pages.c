/* fuzz_kv_pages.c -- libFuzzer target: the paged KV cache (attn.h, "Paged
 * KV cache") driven by random programs. The input's first bytes describe a
 * pool (sizes small or at an edge of int64, dtype, keys quantized per
 * channel or not (key_dtype q4c, q2c, or one it must refuse), page size);
 * the rest is
 * a list of operations on it: create, fork, free, truncate, append (to
 * random lists of ids, freed and unknown ones and repeats included, with
 * fuzzed offsets and row counts), gather, attend, and a caller's own view
 * of pages (page tables pointing anywhere, lengths and table sizes that
 * overflow, offsets that run backwards; planned once and run, against the
 * unplanned call), and the layer's step over a
 * contiguous cache's rows (attn_mha_cached_batch: rows and lengths
 * anywhere; its keys now and then quantized per channel).
 *
 * Beyond "no crash, no undefined behaviour" it checks, after every call:
 *   - a call that fails has a message, and left the pool's memory byte for
 *     byte as it was;
 *   - the pool's own view passes attn_kv_paged_check (its tables never
 *     point outside it), and its free pages are exactly the pages no
 *     sequence holds;
 *   - a call that succeeds changed no sequence it was not given: each
 *     other sequence gathers as before (pages shared by a fork are copied
 *     before one sibling writes them); the sequences it appended to or
 *     truncated keep their earlier positions (keys in dtype: bitwise; keys
 *     quantized per channel move from the window into groups, and are only
 *     checked to be there);
 *   - attn_kv_pages_view, given a view of any struct_size (0, one inside a
 *     field, an older header's, this one's, a newer one's), writes nothing
 *     past it, and nothing at all when it refuses it.
 * The description's top codes also give key dtypes, dtypes, head layouts,
 * residual windows and rotations the pool must refuse: attn_kv_pages_bytes
 * and attn_kv_pages_init both refuse them; so must an append whose k or v
 * has a head more than the pool's, or a row more than the other.
 * A view the library accepts must lie in memory the harness owns: the
 * tables and packed tensors it describes are backed in full, except where
 * the description's sizes overflow, which the library must refuse. */
#include "attn.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"

/* An integer: mostly small, sometimes an edge of int64 or int32. */
static int64_t pick_int(reader *r) {
    static const int64_t EDGES[] = {0, -1, INT64_MIN, INT64_MAX, INT64_MAX / 2, INT64_MAX / 4 + 1,
                                    (int64_t)1 << 31, INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)1 << 32,
                                    (int64_t)1 << 40, (int64_t)1 << 62, INT32_MIN, 255, 256, 257};
    uint8_t b = byte(r);
    if (b < 200) return b % 12;
    return EDGES[b % (sizeof EDGES / sizeof *EDGES)];
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) __builtin_trap();                                         \
    } while (0)

enum { POOL_BYTES = 1 << 18, ROWS = 2048, MAX_N = 8, TABLE = 64 };
static unsigned char pool_memory[POOL_BYTES] __attribute__((aligned(64)));
static unsigned char snapshot[POOL_BYTES];
static float kbuf[ROWS * 4 * 4], vbuf[ROWS * 4 * 4], qbuf[64 * 8 * 4], obuf[64 * 8 * 4], lbuf[64 * 8];

static size_t pool_bytes;

/* A call's status, its message, and: a failure changed nothing. */
static void after(attn_status st, const attn_error *err) {
    if (st == ATTN_OK) return;
    CHECK(err->status == st && err->message[0]);
    CHECK(memcmp(snapshot, pool_memory, pool_bytes) == 0);
}

/* The pool's bookkeeping, as any caller can see it. */
static void pool_holds(const attn_kv_pages *pool, const attn_kv_pages_desc *d) {
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_error err;
    CHECK(attn_kv_pages_view(&w, pool, &err) == ATTN_OK);
    CHECK(attn_kv_paged_check(&w, &err) == ATTN_OK);
    int64_t held = 0;
    for (int64_t p = 0; p < d->num_pages; p++) held += attn_kv_pages_page_refs(pool, p) > 0;
    CHECK(held + attn_kv_pages_free_pages(pool) == d->num_pages);
}

/* What each of the small ids (those pick_id mostly gives) held before a
 * call: live or not, its length, its keys and values gathered as f32
 * (Hk, length, E) and (Hk, length, Ev); `kept` false for a sequence too
 * long for the buffers. */
enum { IDS = 6, HELD = ROWS * 2 };
static struct {
    bool live, kept;
    int64_t length;
    float k[HELD], v[HELD];
} held[IDS];
static float now_k[HELD], now_v[HELD];

static bool gather_f32(float *k, float *v, const attn_kv_pages *pool, const attn_kv_pages_desc *d, int64_t id,
                       int64_t length) {
    int64_t ks[3] = {d->heads, length, d->key_dim}, vs[3] = {d->heads, length, d->value_dim};
    attn_tensor tk, tv;
    return attn_tensor_init(&tk, k, ATTN_F32, 3, ks, NULL, NULL) == ATTN_OK &&
           attn_tensor_init(&tv, v, ATTN_F32, 3, vs, NULL, NULL) == ATTN_OK &&
           attn_kv_pages_gather(&tk, &tv, pool, id, NULL) == ATTN_OK;
}

static void remember(const attn_kv_pages *pool, const attn_kv_pages_desc *d) {
    for (int64_t id = 0; id < IDS; id++) {
        int64_t len = 0;
        held[id].live = attn_kv_pages_sequence(pool, id, &len, NULL, NULL) == ATTN_OK;
        held[id].length = len;
        held[id].kept = held[id].live && len * d->heads * d->key_dim <= HELD && len * d->heads * d->value_dim <= HELD;
        if (held[id].kept) CHECK(gather_f32(held[id].k, held[id].v, pool, d, id, len));
    }
}

/* Rows 0 .. n - 1 of each head of a (Hk, then, cols) gather, in one of (Hk, now, cols). */
static bool same_rows(const float *was, int64_t then, const float *is, int64_t now, int64_t heads, int64_t cols,
                      int64_t n) {
    for (int64_t h = 0; h < heads; h++)
        if (memcmp(was + h * then * cols, is + h * now * cols, (size_t)(n * cols) * sizeof(float))) return false;
    return true;
}

/* After a call that succeeded: sequence id, if it was live and the call
 * was not given it (`touched` false), is as it was; given it, it keeps
 * its first `keep` positions (-1: it was freed; keys per channel: its
 * length only). */
static void still_holds(const attn_kv_pages *pool, const attn_kv_pages_desc *d, int64_t id, bool touched,
                        int64_t keep) {
    if (id < 0 || id >= IDS || !held[id].live) return;
    int64_t len = 0;
    bool live = attn_kv_pages_sequence(pool, id, &len, NULL, NULL) == ATTN_OK;
    if (touched && keep < 0) {
        CHECK(!live);
        return;
    }
    CHECK(live);
    if (!touched) {
        keep = held[id].length;
        CHECK(len == keep);
    }
    CHECK(len >= keep);
    if (!held[id].kept || (touched && d->key_dtype) || len * d->heads * d->key_dim > HELD ||
        len * d->heads * d->value_dim > HELD)
        return;
    CHECK(gather_f32(now_k, now_v, pool, d, id, len));
    CHECK(same_rows(held[id].k, held[id].length, now_k, len, d->heads, d->key_dim, keep));
    CHECK(same_rows(held[id].v, held[id].length, now_v, len, d->heads, d->value_dim, keep));
}

/* The pool's view written into a block of any struct_size: never past it,
 * nothing when refused. */
static void view_sizes(reader *r, const attn_kv_pages *pool) {
    static const size_t SIZES[8] = {0, 4, 12, offsetof(attn_kv_paged_view, table_stride),
                                    offsetof(attn_kv_paged_view, key_dtype), sizeof(attn_kv_paged_view) - 8,
                                    sizeof(attn_kv_paged_view), sizeof(attn_kv_paged_view) + 8};
    union {
        attn_kv_paged_view w;
        unsigned char b[sizeof(attn_kv_paged_view) + 16];
    } u;
    const size_t size = SIZES[byte(r) % 8];
    const unsigned char fill = byte(r);
    memset(&u, fill, sizeof u);
    u.w.struct_size = size;
    attn_error err;
    attn_status st = attn_kv_pages_view(&u.w, pool, &err);
    CHECK(u.w.struct_size == size);
    size_t from = st ? sizeof(size_t) : size; /* refused: not a byte; else none past struct_size */
    for (size_t i = from; i < sizeof u; i++) CHECK(u.b[i] == fill);
    if (st) {
        CHECK(st == ATTN_ERR_OPTION && err.message[0]);
        return;
    }
    /* every view holds the fields up to table_stride, that one included */
    CHECK(size >= offsetof(attn_kv_paged_view, table_stride) + sizeof u.w.table_stride && size <= sizeof u.w);
    if (size == sizeof u.w) CHECK(attn_kv_paged_check(&u.w, &err) == ATTN_OK);
}

/* A sequence id: a small one (live or not), or an edge. */
static int64_t pick_id(reader *r) { return byte(r) < 220 ? byte(r) % 6 : pick_int(r); }

/* n + 1 offsets, from 0 up by small steps, or fuzzed outright. */
static void pick_offsets(reader *r, int64_t *cu, int64_t n, int64_t step_max) {
    cu[0] = byte(r) == 7 ? pick_int(r) : 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t step = byte(r) % (step_max + 1);
        cu[i + 1] = byte(r) == 9 ? pick_int(r) : cu[i] > INT64_MAX - step ? cu[i] : cu[i] + step;
    }
}

/* A packed (rows, H, cols) tensor over buf (`bytes` of it) of dtype dt
 * (f32, or f64 for an f64 pool): C order; a dtype, rank or stride now and
 * then wrong, or one row or head too many. Rows past the buffer keep the shape but the library must not
 * read them: they are only handed over when their element count
 * overflows. Returns what it added: EXTRA_HEAD, EXTRA_ROW or 0. */
enum { EXTRA_HEAD = 1, EXTRA_ROW = 2 };
static int packed(reader *r, attn_tensor *t, float *buf, size_t bytes, int64_t rows, int64_t H, int64_t cols,
                   attn_dtype dt) {
    size_t capacity = bytes / attn_dtype_size(dt);
    uint8_t how = byte(r);
    const int64_t rows_given = rows;
    /* 7: a head more than the pool's; 8: a row more than the other tensor's */
    int64_t shape[3] = {how == 8 && rows < INT64_MAX ? rows + 1 : rows, how == 7 ? H + 1 : H, cols};
    attn_tensor_init(t, buf, dt, 3, shape, NULL, NULL);
    rows = shape[0];
    if (how == 1) t->dtype = dt == ATTN_F64 ? ATTN_F32 : ATTN_F64; /* the pool takes the other */
    if (how == 2) t->dtype = ATTN_F16;
    if (how == 3) t->rank = 2;
    if (how == 4) t->strides[0] = INT64_MAX;
    if (how == 5) t->strides[0] = INT64_MIN;
    if (how == 6) t->data = NULL;
    /* A view that could be accepted must fit in buf. */
    __int128 need = (__int128)rows * H * cols;
    bool acceptable = how != 1 && how != 3 && how != 4 && how != 5 && how != 6 && how != 7;
    if (acceptable && rows > 1 && need > (__int128)capacity && need <= INT64_MAX)
        t->strides[0] = INT64_MAX; /* then refused for its reach */
    return how == 7 ? EXTRA_HEAD : how == 8 && shape[0] != rows_given ? EXTRA_ROW : 0;
}

/* The elements of a view's pages of `cols` values, num_pages · heads ·
 * page_size · cols: pages and page size may both be near 2^63, and four
 * such factors pass even __int128, so their product is capped at 2^64
 * first (past INT64_MAX, the size only has to read as too large). */
static __int128 page_elements(const attn_kv_paged_view *w, int64_t cols) {
    const __int128 CAP = (__int128)1 << 64;
    __int128 n = (__int128)w->num_pages * w->page_size; /* |n| < 2^126 */
    n = n > CAP ? CAP : n < -CAP ? -CAP : n;
    return n * w->heads * cols; /* heads and cols: the pool's, which fits POOL_BYTES */
}

static void fuzz_view(reader *r, attn_kv_pages_desc *d) {
    /* A caller's pages: the pool's sizes, its own small page arrays (of
     * TABLE * 16 f32, or half as many f64). */
    static float kp[TABLE * 4 * 4], vp[TABLE * 4 * 4];
    const attn_dtype dt = d->dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32; /* q's, out's */
    const int64_t room = TABLE * 16 / (dt == ATTN_F64 ? 2 : 1);
    int32_t table[TABLE];
    int64_t lengths[MAX_N], offsets[MAX_N + 1];
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = d->dtype, w.heads = d->heads, w.key_dim = d->key_dim, w.value_dim = d->value_dim;
    /* Keys per channel: the view's residual rows, (num_sequences, Hk, R + 32, E) f16, ours when they fit. */
    static uint16_t residual[MAX_N * 4 * (64 + 32) * 4];
    w.key_dtype = d->key_dtype, w.k_residual = byte(r) == 2 ? NULL : residual, w.residual = d->residual;
    w.page_size = byte(r) % 8 + 1;
    w.num_pages = byte(r) % 4 + 1;
    if (byte(r) == 3) w.num_pages = pick_int(r);
    if (byte(r) == 3) w.page_size = pick_int(r);
    /* 1: no key pages; 4: no lengths; 5: no page table */
    const uint8_t missing = byte(r);
    w.k_pages = missing == 1 ? NULL : kp, w.v_pages = vp;
    if (byte(r) == 7) w.hadamard = (int)(byte(r) % 3); /* refused for these dtypes, or a bad flag */
    const uint8_t count = byte(r); /* 255: a count below 0 */
    w.num_sequences = count == 255 ? -1 : count % MAX_N;
    for (int i = 0; i < TABLE; i++) table[i] = byte(r) < 200 ? byte(r) % 5 : (int32_t)pick_int(r);
    for (int64_t i = 0; i < w.num_sequences; i++) lengths[i] = byte(r) < 220 ? byte(r) % 24 : pick_int(r);
    w.lengths = missing == 4 ? NULL : lengths, w.page_table = missing == 5 ? NULL : table;
    if (byte(r) & 1) {
        pick_offsets(r, offsets, w.num_sequences, 8);
        /* A table the offsets claim beyond ours is one the library would read: cut it short. */
        if (w.num_sequences >= 0 && offsets[w.num_sequences] > TABLE && offsets[w.num_sequences] <= INT64_MAX / 4)
            offsets[w.num_sequences] = TABLE;
        w.table_offsets = offsets;
    } else {
        w.table_stride = byte(r) == 5 ? pick_int(r) : byte(r) % 8;
        __int128 claimed = (__int128)w.table_stride * w.num_sequences;
        if (claimed > TABLE && claimed <= INT64_MAX / 4) w.table_stride = TABLE / (w.num_sequences ? w.num_sequences : 1);
    }
    /* The pages the view's sizes describe must be ours too (or overflow). */
    __int128 kn = page_elements(&w, w.key_dim), vn = page_elements(&w, w.value_dim);
    if (w.key_dtype && (__int128)w.num_sequences * w.heads * w.key_dim > 4 * 4 * MAX_N) return; /* not ours */
    if (w.key_dtype && w.residual > 64) return; /* a window longer than our rows hold */
    if (w.num_pages > 0 && w.page_size > 0 && (kn > room || vn > room) && kn * 8 < INT64_MAX && vn * 8 < INT64_MAX) {
        w.num_pages = 1, w.page_size = 1;
        if (w.heads * w.key_dim > room || w.heads * w.value_dim > room) return; /* many heads: not ours */
    }
    attn_error err;
    attn_status st = attn_kv_paged_check(&w, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (w.num_sequences < 0 || (w.num_sequences > 0 && (!w.lengths || !w.page_table))) CHECK(st != ATTN_OK);
    if (st || w.num_sequences == 0) return;
    /* Accepted: every used entry is a page of the view. Gather one (255:
     * the one past the last, refused). */
    const uint8_t which = byte(r);
    int64_t i = which % w.num_sequences, len = lengths[i];
    if (len * w.heads * (w.key_dim > w.value_dim ? w.key_dim : w.value_dim) > ROWS * 16) return;
    attn_tensor k, v;
    int64_t ks[3] = {w.heads, len, w.key_dim}, vs[3] = {w.heads, len, w.value_dim};
    attn_tensor_init(&k, kbuf, ATTN_F32, 3, ks, NULL, NULL);
    attn_tensor_init(&v, vbuf, ATTN_F32, 3, vs, NULL, NULL);
    st = attn_kv_paged_gather(&k, &v, &w, which == 255 ? w.num_sequences : i, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (which == 255) CHECK(st == ATTN_ERR_ARGUMENT);
    /* Planned once, run on the same pages: the plan's run matches the
     * unplanned call's status and rows. */
    static unsigned char plan_memory[1 << 16];
    static float ref_out[64 * 8 * 4];
    int64_t cu[MAX_N + 1];
    pick_offsets(r, cu, w.num_sequences, 2);
    int64_t total = cu[w.num_sequences];
    if (total < 0 || total > 8 || w.heads > 8 || w.key_dim > 4 || w.value_dim > 4) return;
    attn_tensor q, out, ref;
    int64_t qs[3] = {total, w.heads, w.key_dim}, os[3] = {total, w.heads, w.value_dim};
    attn_tensor_init(&q, qbuf, dt, 3, qs, NULL, NULL);
    attn_tensor_init(&out, obuf, dt, 3, os, NULL, NULL), attn_tensor_init(&ref, ref_out, dt, 3, os, NULL, NULL);
    for (int64_t e = 0; e < total * w.heads * w.key_dim; e++)
        if (dt == ATTN_F64) ((double *)qbuf)[e] = (double)(e % 5) / 5.0;
        else qbuf[e] = (float)(e % 5) / 5.0f;
    size_t bytes, ws;
    attn_sdpa_plan *plan;
    if (attn_sdpa_plan_bytes(&bytes, w.num_sequences, &err) || bytes > sizeof plan_memory) return;
    attn_status want = attn_kv_paged_attend(&ref, NULL, &q, cu, &w, NULL, NULL, &err);
    st = attn_kv_paged_plan_init(&plan, plan_memory, bytes, &ws, &out, NULL, &q, cu, &w, NULL, NULL, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (w.key_dtype) { /* keys per channel: attended, never planned */
        CHECK(st == ATTN_ERR_DTYPE || (st && want));
        return;
    }
    CHECK((st == ATTN_OK) == (want == ATTN_OK));
    if (st || ws > sizeof kbuf) return;
    st = attn_kv_paged_run(plan, &out, NULL, &q, w.k_pages, w.v_pages, kbuf, sizeof kbuf, &err);
    CHECK(st == ATTN_OK && memcmp(obuf, ref_out, (size_t)(total * w.heads * w.value_dim) * attn_dtype_size(dt)) == 0);
}

/* The layer's step over a contiguous cache's rows (attn_mha_cached_batch):
 * a small cache (its batch, heads, capacity, sizes and dtype fuzzed), rows
 * anywhere (outside the cache, repeated), lengths anywhere (negative, past
 * the capacity, at an edge of int64), offsets fuzzed. A refusal leaves the
 * cache's memory and the lengths as they were; a success grows exactly the
 * named rows' lengths by their new positions. */
static unsigned char cache_memory[1 << 14] __attribute__((aligned(64)));
static unsigned char cache_snapshot[sizeof cache_memory];

static void fuzz_cached_batch(reader *r, attn_dtype dt) {
    enum { E = 4, HQ = 2, CB_MAX = 4 };
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.batch = byte(r) < 240 ? byte(r) % CB_MAX + 1 : pick_int(r);
    cd.heads = byte(r) % 2 + 1; /* the layer's num_kv_heads is 1: 2 is refused */
    cd.capacity = byte(r) < 240 ? byte(r) % 12 + 1 : pick_int(r);
    cd.key_dim = cd.value_dim = byte(r) == 5 ? 3 : E / HQ;
    cd.dtype = dt;
    if (byte(r) == 4) cd.key_dtype = ATTN_Q4C, cd.capacity = byte(r) & 1 ? 32 : cd.capacity; /* keys per channel */
    size_t bytes;
    attn_kv_cache *cache;
    if (attn_kv_cache_bytes(&bytes, &cd, NULL) || bytes > sizeof cache_memory ||
        attn_kv_cache_init(&cache, cache_memory, bytes, &cd, NULL))
        return;
    /* a layer of E = 4, two query heads, one key/value head of D = 2 */
    static float wq[E * E], wk[2 * E], wv[2 * E], wo[E * E];
    for (int i = 0; i < E * E; i++) wq[i] = wo[i] = (float)((i * 7) % 5) / 5.0f - 0.4f;
    for (int i = 0; i < 2 * E; i++) wk[i] = wv[i] = (float)((i * 3) % 4) / 4.0f - 0.3f;
    attn_tensor tq, tk, tv, to;
    int64_t sq[2] = {E, E}, sk[2] = {2, E};
    attn_tensor_init(&tq, wq, ATTN_F32, 2, sq, NULL, NULL), attn_tensor_init(&to, wo, ATTN_F32, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, wk, ATTN_F32, 2, sk, NULL, NULL), attn_tensor_init(&tv, wv, ATTN_F32, 2, sk, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = HQ, p.num_kv_heads = 1;
    p.q_proj_weight = &tq, p.k_proj_weight = &tk, p.v_proj_weight = &tv, p.out_proj_weight = &to;
    int64_t n = byte(r) == 1 ? pick_int(r) : byte(r) % MAX_N, m = n < 0 || n > MAX_N ? MAX_N : n;
    int64_t rows[MAX_N], cu[MAX_N + 1], lengths[CB_MAX], before[CB_MAX];
    for (int64_t i = 0; i < m; i++) rows[i] = byte(r) < 230 ? byte(r) % (CB_MAX + 1) : pick_int(r);
    for (int b = 0; b < CB_MAX; b++) lengths[b] = byte(r) < 230 ? byte(r) % 14 : pick_int(r);
    pick_offsets(r, cu, m, 4);
    int64_t total = cu[m];
    if (total < 0 || total > 16) total = 0; /* then refused: the offsets do not end at x's rows */
    for (int64_t i = 0; i < total * E; i++) qbuf[i] = (float)(i % 9) / 9.0f - 0.5f;
    attn_tensor x, out;
    int64_t xs[2] = {total, E};
    attn_tensor_init(&x, qbuf, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&out, obuf, ATTN_F32, 2, xs, NULL, NULL);
    memcpy(cache_snapshot, cache_memory, bytes);
    memcpy(before, lengths, sizeof before);
    attn_error err;
    /* n past the rows given would read past them: only n the arrays hold, or below 0; the
     * lengths array holds CB_MAX rows, so a larger batch only with rows the array holds */
    if (cd.batch > CB_MAX)
        for (int64_t i = 0; i < m; i++) rows[i] = rows[i] >= CB_MAX ? -1 : rows[i];
    attn_status st = attn_mha_cached_batch(&out, &x, cu, rows, n > MAX_N ? MAX_N : n, cache, lengths, NULL, &p, NULL, &err);
    if (st) {
        CHECK(err.status == st && err.message[0]);
        CHECK(memcmp(before, lengths, sizeof before) == 0);
        CHECK(st == ATTN_ERR_NO_MEMORY || memcmp(cache_snapshot, cache_memory, bytes) == 0);
        return;
    }
    for (int64_t i = 0; i < m && i < n; i++) {
        CHECK(rows[i] >= 0 && rows[i] < cd.batch);
        before[rows[i]] += cu[i + 1] - cu[i];
    }
    CHECK(memcmp(before, lengths, sizeof before) == 0);
    for (int64_t i = 0; i < m && i < n; i++) CHECK(lengths[rows[i]] >= 0 && lengths[rows[i]] <= cd.capacity);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    static const attn_dtype DTYPES[] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_F64};
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    uint8_t kind = byte(&r);
    d.dtype = DTYPES[kind % 4];
    /* the top codes: keys per channel (q4c, q2c), or a key_dtype to refuse (q8) */
    d.key_dtype = kind >> 2 == 63 ? ATTN_Q4C : kind >> 2 == 62 ? ATTN_Q2C : kind >> 2 == 61 ? ATTN_Q8 : (attn_dtype)0;
    /* and below them: a dtype no pool holds (bool), the heads of a page
     * each apart (head_major 1) or a layout that is none (2, -1), a
     * residual window without keys per channel, q4c keys with a rotation */
    static const int HEAD_MAJOR[4] = {1, 1, 2, -1};
    if (kind >> 2 == 60) d.dtype = ATTN_BOOL;
    if (kind >> 2 == 59) d.head_major = HEAD_MAJOR[kind & 3];
    if (kind >> 2 == 58) d.residual = 32;
    if (kind >> 2 == 57) d.key_dtype = ATTN_Q4C, d.hadamard = 1;
    static const int64_t PAGES[] = {16, 17, 32, 255, 256};
    d.page_size = byte(&r) < 250 ? PAGES[byte(&r) % 5] : pick_int(&r);
    d.num_pages = byte(&r) < 240 ? byte(&r) % 8 + 1 : pick_int(&r);
    d.max_sequences = byte(&r) < 240 ? byte(&r) % 5 + 1 : pick_int(&r);
    d.heads = byte(&r) < 240 ? byte(&r) % 2 + 1 : pick_int(&r);
    d.key_dim = byte(&r) % 4 + 1, d.value_dim = byte(&r) % 4 + 1;
    d.max_length = byte(&r) < 200 ? 0 : pick_int(&r);
    /* now and then the Hadamard rotation and per-head scales, which these
     * float dtypes must refuse (or a bad flag, or bad scales) */
    static const float SCALES[2] = {0.5f, NAN};
    if (byte(&r) == 7) d.hadamard = (int)(byte(&r) % 3);
    if (byte(&r) == 8) d.k_scale = SCALES + byte(&r) % 2;
    /* keys per channel: now and then a residual window (32, 64), or one to refuse */
    static const int64_t WINDOWS[4] = {32, 64, 48, -32};
    if (d.key_dtype && byte(&r) == 9) d.residual = WINDOWS[byte(&r) % 4];
    /* The descriptions the top codes give that no pool takes (q4c keys
     * with the rotation: unless the bytes above set hadamard back to 0). */
    const int code = kind >> 2;
    const bool must_refuse = code == 61 || code == 60 || (code == 59 && d.head_major != 1) || code == 58 ||
                             (code == 57 && d.hadamard != 0);
    attn_error err;
    attn_status st = attn_kv_pages_bytes(&pool_bytes, &d, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (must_refuse) { /* refused by both: the size, and the pool in memory enough for any */
        CHECK(st != ATTN_OK);
        attn_kv_pages *refused = NULL;
        st = attn_kv_pages_init(&refused, pool_memory, POOL_BYTES, &d, &err);
        CHECK(st != ATTN_OK && err.status == st && err.message[0]);
        return 0;
    }
    if (st || pool_bytes > POOL_BYTES) return 0;
    attn_kv_pages *pool;
    size_t offer = byte(&r) == 3 ? pool_bytes - 1 : pool_bytes;
    st = attn_kv_pages_init(&pool, pool_memory, offer, &d, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (st) return 0;
    pool_holds(pool, &d);
    for (int step = 0; step < 48 && r.n; step++) {
        memcpy(snapshot, pool_memory, pool_bytes);
        remember(pool, &d);
        int64_t id = -1, ids[MAX_N], cu[MAX_N + 1], n_ids = 0, keep = -1, target = -1;
        uint8_t op = byte(&r);
        /* the top codes: a view written at a fuzzed struct_size */
        switch (op >= 250 ? 10 : op % 10) {
        case 0: st = attn_kv_pages_create(pool, &id, &err); break;
        case 1: st = attn_kv_pages_fork(pool, &id, pick_id(&r), &err); break; /* the parent: as it was */
        case 2: st = attn_kv_pages_free(pool, target = pick_id(&r), &err); break;
        case 3:
            target = pick_id(&r), keep = pick_int(&r), st = attn_kv_pages_truncate(pool, target, keep, &err);
            break;
        case 10: view_sizes(&r, pool), st = ATTN_OK; break;
        case 4:
        case 5: { /* append */
            int64_t n = byte(&r) == 1 ? pick_int(&r) : byte(&r) % MAX_N;
            int64_t m = n < 0 || n > MAX_N ? MAX_N : n;
            for (int64_t i = 0; i < m; i++) ids[i] = pick_id(&r);
            pick_offsets(&r, cu, m, d.page_size + 2);
            int64_t rows = byte(&r) == 2 ? pick_int(&r) : cu[m];
            attn_tensor k, v;
            attn_dtype dt = d.dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32; /* what the pool takes */
            const int k_extra = packed(&r, &k, kbuf, sizeof kbuf, rows, d.heads, d.key_dim, dt);
            const int v_extra = packed(&r, &v, vbuf, sizeof vbuf, rows, d.heads, d.value_dim, dt);
            /* n past the ids given would read past them: only n the arrays hold, or below 0. */
            st = attn_kv_pages_append(pool, ids, n > MAX_N ? MAX_N : n, &k, &v, cu, &err);
            n_ids = n > MAX_N ? MAX_N : n;
            /* A head more than the pool's, or a row more in k than in v (or
             * in v than in k): refused (and, by after(), the pool as it
             * was), unless n is 0 (nothing to append, nothing read). */
            if (n != 0 && (((k_extra | v_extra) & EXTRA_HEAD) || (k_extra & EXTRA_ROW) != (v_extra & EXTRA_ROW)))
                CHECK(st != ATTN_OK);
            break;
        }
        case 6: { /* gather */
            /* not `id` (a sequence created or forked, left out of the check
             * below): the one read-only call leaves every sequence as it was */
            const int64_t gathered = pick_id(&r);
            int64_t len = 0;
            if (attn_kv_pages_sequence(pool, gathered, &len, NULL, NULL) == ATTN_OK && len * d.heads * 4 > ROWS * 16) break;
            if (byte(&r) == 1) len = pick_int(&r);
            attn_tensor k, v;
            int64_t ks[3] = {d.heads, len, d.key_dim}, vs[3] = {d.heads, len, d.value_dim};
            st = ATTN_OK;
            if (attn_tensor_init(&k, kbuf, ATTN_F32, 3, ks, NULL, NULL) == ATTN_OK &&
                attn_tensor_init(&v, vbuf, ATTN_F32, 3, vs, NULL, NULL) == ATTN_OK &&
                attn_tensor_numel(&k) >= 0 && attn_tensor_numel(&k) <= ROWS * 16 && attn_tensor_numel(&v) >= 0 &&
                attn_tensor_numel(&v) <= ROWS * 16)
                st = attn_kv_pages_gather(&k, &v, pool, gathered, &err);
            break;
        }
        case 7: { /* attend */
            int64_t n = byte(&r) % 4;
            for (int64_t i = 0; i < n; i++) ids[i] = pick_id(&r);
            pick_offsets(&r, cu, n, 3);
            int64_t total = cu[n], Hq = d.heads * (byte(&r) % 2 + 1);
            if (total < 0 || total > 8 || Hq > 8) total = 0, cu[n] = byte(&r) == 1 ? pick_int(&r) : cu[n];
            attn_tensor q, out, lse;
            int64_t qs[3] = {total, Hq, d.key_dim}, os[3] = {total, Hq, d.value_dim}, ls[2] = {total, Hq};
            attn_dtype dt = d.dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32; /* f64 queries over f64 pages */
            attn_tensor_init(&q, qbuf, dt, 3, qs, NULL, NULL);
            attn_tensor_init(&out, obuf, dt, 3, os, NULL, NULL);
            attn_tensor_init(&lse, lbuf, dt, 2, ls, NULL, NULL);
            for (int64_t i = 0; i < total * Hq * d.key_dim; i++)
                if (dt == ATTN_F64) ((double *)qbuf)[i] = (double)(i % 7) / 7.0;
                else qbuf[i] = (float)(i % 7) / 7.0f;
            attn_sdpa_options o = attn_sdpa_options_default();
            o.causal = (attn_causal)(byte(&r) % 4);
            st = attn_kv_pages_attend(&out, byte(&r) & 1 ? &lse : NULL, &q, cu, ids, n, pool, NULL, &o, &err);
            break;
        }
        case 8: fuzz_view(&r, &d), st = ATTN_OK; break;
        default: fuzz_cached_batch(&r, d.dtype), st = ATTN_OK; break;
        }
        after(st, &err);
        pool_holds(pool, &d);
        if (st) continue;
        /* a success: the sequences it was not given are as they were */
        for (int64_t s = 0; s < IDS; s++) {
            bool appended = false;
            for (int64_t i = 0; i < n_ids; i++) appended |= ids[i] == s;
            if (appended) still_holds(pool, &d, s, true, held[s].length);
            else if (s == target) still_holds(pool, &d, s, true, keep); /* freed (-1), or truncated to keep */
            else if (s != id) still_holds(pool, &d, s, false, 0); /* id: the sequence created or forked */
        }
    }
    return 0;
}
