/* fuzz_kv_pages.c -- libFuzzer target: the paged KV cache (attn.h, "Paged
 * KV cache") driven by random programs. The input's first bytes describe a
 * pool (sizes small or at an edge of int64, dtype, page size); the rest is
 * a list of operations on it: create, fork, free, truncate, append (to
 * random lists of ids, freed and unknown ones and repeats included, with
 * fuzzed offsets and row counts), gather, attend, and a caller's own view
 * of pages (page tables pointing anywhere, lengths and table sizes that
 * overflow, offsets that run backwards).
 *
 * Beyond "no crash, no undefined behaviour" it checks, after every call:
 *   - a call that fails has a message, and left the pool's memory byte for
 *     byte as it was;
 *   - the pool's own view passes attn_kv_paged_check (its tables never
 *     point outside it), and its free pages are exactly the pages no
 *     sequence holds.
 * A view the library accepts must lie in memory the harness owns: the
 * tables and packed tensors it describes are backed in full, except where
 * the description's sizes overflow, which the library must refuse. */
#include "attn.h"

#include <stdbool.h>
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

/* A packed (rows, H, cols) f32-ish tensor over buf (capacity elements):
 * C order; a dtype, rank or stride now and then wrong. Rows past the
 * buffer keep the shape but the library must not read them: they are
 * only handed over when their element count overflows. */
static void packed(reader *r, attn_tensor *t, float *buf, size_t capacity, int64_t rows, int64_t H, int64_t cols) {
    int64_t shape[3] = {rows, H, cols};
    attn_tensor_init(t, buf, ATTN_F32, 3, shape, NULL, NULL);
    uint8_t how = byte(r);
    if (how == 1) t->dtype = ATTN_F64;
    if (how == 2) t->dtype = ATTN_F16;
    if (how == 3) t->rank = 2;
    if (how == 4) t->strides[0] = INT64_MAX;
    if (how == 5) t->strides[0] = INT64_MIN;
    if (how == 6) t->data = NULL;
    /* A view that could be accepted must fit in buf. */
    __int128 need = (__int128)rows * H * cols;
    bool acceptable = how != 1 && how != 3 && how != 4 && how != 5 && how != 6;
    if (acceptable && rows > 1 && need > (__int128)capacity && need <= INT64_MAX)
        t->strides[0] = INT64_MAX; /* then refused for its reach */
}

static void fuzz_view(reader *r, attn_kv_pages_desc *d) {
    /* A caller's pages: the pool's sizes, its own small page arrays. */
    static float kp[TABLE * 4 * 4], vp[TABLE * 4 * 4];
    int32_t table[TABLE];
    int64_t lengths[MAX_N], offsets[MAX_N + 1];
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = d->dtype, w.heads = d->heads, w.key_dim = d->key_dim, w.value_dim = d->value_dim;
    w.page_size = byte(r) % 8 + 1;
    w.num_pages = byte(r) % 4 + 1;
    if (byte(r) == 3) w.num_pages = pick_int(r);
    if (byte(r) == 3) w.page_size = pick_int(r);
    w.k_pages = byte(r) == 1 ? NULL : kp, w.v_pages = vp;
    w.num_sequences = byte(r) % MAX_N;
    for (int i = 0; i < TABLE; i++) table[i] = byte(r) < 200 ? byte(r) % 5 : (int32_t)pick_int(r);
    for (int64_t i = 0; i < w.num_sequences; i++) lengths[i] = byte(r) < 220 ? byte(r) % 24 : pick_int(r);
    w.lengths = lengths, w.page_table = table;
    if (byte(r) & 1) {
        pick_offsets(r, offsets, w.num_sequences, 8);
        /* A table the offsets claim beyond ours is one the library would read: cut it short. */
        if (offsets[w.num_sequences] > TABLE && offsets[w.num_sequences] <= INT64_MAX / 4)
            offsets[w.num_sequences] = TABLE;
        w.table_offsets = offsets;
    } else {
        w.table_stride = byte(r) == 5 ? pick_int(r) : byte(r) % 8;
        __int128 claimed = (__int128)w.table_stride * w.num_sequences;
        if (claimed > TABLE && claimed <= INT64_MAX / 4) w.table_stride = TABLE / (w.num_sequences ? w.num_sequences : 1);
    }
    /* The pages the view's sizes describe must be ours too (or overflow). */
    __int128 kn = (__int128)w.num_pages * w.heads * w.page_size * w.key_dim;
    __int128 vn = (__int128)w.num_pages * w.heads * w.page_size * w.value_dim;
    if (w.num_pages > 0 && w.page_size > 0 && (kn > TABLE * 16 || vn > TABLE * 16) && kn * 4 < INT64_MAX &&
        vn * 4 < INT64_MAX) {
        w.num_pages = 1, w.page_size = 1;
        if (w.heads * w.key_dim > TABLE * 16 || w.heads * w.value_dim > TABLE * 16) return; /* many heads: not ours */
    }
    attn_error err;
    attn_status st = attn_kv_paged_check(&w, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (st || w.num_sequences == 0) return;
    /* Accepted: every used entry is a page of the view. Gather one. */
    int64_t i = byte(r) % w.num_sequences, len = lengths[i];
    if (len * w.heads * (w.key_dim > w.value_dim ? w.key_dim : w.value_dim) > ROWS * 16) return;
    attn_tensor k, v;
    int64_t ks[3] = {w.heads, len, w.key_dim}, vs[3] = {w.heads, len, w.value_dim};
    attn_tensor_init(&k, kbuf, ATTN_F32, 3, ks, NULL, NULL);
    attn_tensor_init(&v, vbuf, ATTN_F32, 3, vs, NULL, NULL);
    st = attn_kv_paged_gather(&k, &v, &w, i, &err);
    CHECK(st == ATTN_OK || err.message[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    static const attn_dtype DTYPES[] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_F64};
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.dtype = DTYPES[byte(&r) % 4];
    static const int64_t PAGES[] = {16, 17, 32, 255, 256};
    d.page_size = byte(&r) < 250 ? PAGES[byte(&r) % 5] : pick_int(&r);
    d.num_pages = byte(&r) < 240 ? byte(&r) % 8 + 1 : pick_int(&r);
    d.max_sequences = byte(&r) < 240 ? byte(&r) % 5 + 1 : pick_int(&r);
    d.heads = byte(&r) < 240 ? byte(&r) % 2 + 1 : pick_int(&r);
    d.key_dim = byte(&r) % 4 + 1, d.value_dim = byte(&r) % 4 + 1;
    d.max_length = byte(&r) < 200 ? 0 : pick_int(&r);
    attn_error err;
    attn_status st = attn_kv_pages_bytes(&pool_bytes, &d, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (st || pool_bytes > POOL_BYTES) return 0;
    attn_kv_pages *pool;
    size_t offer = byte(&r) == 3 ? pool_bytes - 1 : pool_bytes;
    st = attn_kv_pages_init(&pool, pool_memory, offer, &d, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (st) return 0;
    pool_holds(pool, &d);
    for (int step = 0; step < 48 && r.n; step++) {
        memcpy(snapshot, pool_memory, pool_bytes);
        int64_t id, ids[MAX_N], cu[MAX_N + 1];
        switch (byte(&r) % 9) {
        case 0: st = attn_kv_pages_create(pool, &id, &err); break;
        case 1: st = attn_kv_pages_fork(pool, &id, pick_id(&r), &err); break;
        case 2: st = attn_kv_pages_free(pool, pick_id(&r), &err); break;
        case 3: id = pick_id(&r), st = attn_kv_pages_truncate(pool, id, pick_int(&r), &err); break;
        case 4:
        case 5: { /* append */
            int64_t n = byte(&r) == 1 ? pick_int(&r) : byte(&r) % MAX_N;
            int64_t m = n < 0 || n > MAX_N ? MAX_N : n;
            for (int64_t i = 0; i < m; i++) ids[i] = pick_id(&r);
            pick_offsets(&r, cu, m, d.page_size + 2);
            int64_t rows = byte(&r) == 2 ? pick_int(&r) : cu[m];
            attn_tensor k, v;
            packed(&r, &k, kbuf, sizeof kbuf / 4, rows, d.heads, d.key_dim);
            packed(&r, &v, vbuf, sizeof vbuf / 4, rows, d.heads, d.value_dim);
            /* n past the ids given would read past them: only n the arrays hold, or below 0. */
            st = attn_kv_pages_append(pool, ids, n > MAX_N ? MAX_N : n, &k, &v, cu, &err);
            break;
        }
        case 6: { /* gather */
            id = pick_id(&r);
            int64_t len = 0;
            if (attn_kv_pages_sequence(pool, id, &len, NULL, NULL) == ATTN_OK && len * d.heads * 4 > ROWS * 16) break;
            if (byte(&r) == 1) len = pick_int(&r);
            attn_tensor k, v;
            int64_t ks[3] = {d.heads, len, d.key_dim}, vs[3] = {d.heads, len, d.value_dim};
            st = ATTN_OK;
            if (attn_tensor_init(&k, kbuf, ATTN_F32, 3, ks, NULL, NULL) == ATTN_OK &&
                attn_tensor_init(&v, vbuf, ATTN_F32, 3, vs, NULL, NULL) == ATTN_OK &&
                attn_tensor_numel(&k) >= 0 && attn_tensor_numel(&k) <= ROWS * 16 && attn_tensor_numel(&v) >= 0 &&
                attn_tensor_numel(&v) <= ROWS * 16)
                st = attn_kv_pages_gather(&k, &v, pool, id, &err);
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
            attn_tensor_init(&q, qbuf, ATTN_F32, 3, qs, NULL, NULL);
            attn_tensor_init(&out, obuf, ATTN_F32, 3, os, NULL, NULL);
            attn_tensor_init(&lse, lbuf, ATTN_F32, 2, ls, NULL, NULL);
            for (int64_t i = 0; i < total * Hq * d.key_dim; i++) qbuf[i] = (float)(i % 7) / 7.0f;
            attn_sdpa_options o = attn_sdpa_options_default();
            o.causal = (attn_causal)(byte(&r) % 4);
            st = attn_kv_pages_attend(&out, byte(&r) & 1 ? &lse : NULL, &q, cu, ids, n, pool, NULL, &o, &err);
            break;
        }
        default: fuzz_view(&r, &d), st = ATTN_OK; break;
        }
        after(st, &err);
        pool_holds(pool, &d);
    }
    return 0;
}
