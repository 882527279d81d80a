/* test_kv_pages.c -- the paged KV cache (attn.h, "Paged KV cache"):
 *
 *   - random programs of create, fork, append (to random subsets, with
 *     random counts and strides), truncate, free and attend on small pools
 *     (f32, f16, bf16; pages of 16 and 256 positions), each sequence checked
 *     after every step, bitwise, against a contiguous copy the test keeps
 *     itself, and the pool's bookkeeping against what the sequences hold
 *     (every page's reference count, the free pages, no page leaked once
 *     everything is freed);
 *   - attention over the pool against attn_kv_cache_attend on a contiguous
 *     cache of the same keys, bitwise, for 1, 2 and 3 threads, with and
 *     without RoPE, a mask per sequence and dropout, forked sequences
 *     sharing pages among them, and the call checked (its verbose line) to
 *     be one batch whose kernels read the pages in place;
 *   - the layer over the pool (attn_mha_paged) against attn_mha_cached on
 *     each sequence alone, and with masks against attn_sdpa, bitwise;
 *   - the layer over a contiguous cache's rows (attn_mha_cached_batch),
 *     each its own length, against attn_mha_cached on each sequence alone
 *     and, with masks and dropout, against attn_mha_paged, bitwise; its
 *     refusals leaving the cache and the lengths as they were;
 *   - pages a caller manages (a block table, and FlashInfer's indptr form)
 *     read through attn_kv_paged_view;
 *   - every error: a full pool, unknown and freed sequences, a sequence
 *     named twice, bad shapes, dtypes and pointers, overflowing sizes, page
 *     tables that point outside the pool, each leaving the pool's memory
 *     byte for byte as it was;
 *   - against nothing of the library's: random programs on a model that
 *     keeps each sequence as plain arrays and its own page table of
 *     abstract, reference-counted pages (f64, f32, f16, bf16, e4m3, q8 and
 *     q4_1 pools; GQA, MQA; bottom-right causal or none; max_length; one
 *     page), attention against the naive sum (f64 within 1e-12, the others
 *     within attn_sdpa's f32 bound), every page's count and sharing and
 *     every refused call's untouched pool checked after each step; caller
 *     views of pages of 1 to 7 positions, tables that repeat pages,
 *     FlashInfer's offsets, and their plans run over a second layer's
 *     pages; three caller threads attending disjoint sequences at once.
 * Keys quantized per channel (q4c, q2c) are checked here bitwise against
 * f32 rows of their values, which is what decode computes with ATTN_QDOT=widen:
 * main sets it, for the whole process (read once). Their integer dot
 * product kernel is tested within its bound in test_quant_kv.
 * Built plain, under ASan+UBSan and under ThreadSanitizer. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "naive.h"
#include "seed.h"

/* ---- a small random generator (xorshift), the same on every machine ---- */

#define KV_PAGES_SEED 0x9e3779b97f4a7c15u
static uint64_t rng_state = KV_PAGES_SEED; /* main: test_seed(KV_PAGES_SEED), never 0 */
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd_below(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }
static float rnd_value(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* x as the pool stores it, widened back to f32. */
static float stored(float x, attn_dtype dt) {
    if (dt == ATTN_F16) return attn_f16_to_f32(attn_f32_to_f16(x));
    if (dt == ATTN_BF16) return attn_bf16_to_f32(attn_f32_to_bf16(x));
    return x;
}

/* ---- the pool under test and the test's own copy of every sequence ---- */

enum { MAX_SEQS = 8 };

typedef struct model {
    attn_kv_pages_desc d;
    attn_kv_pages *pool;
    void *memory;
    size_t bytes;
    int live[MAX_SEQS];
    int64_t len[MAX_SEQS], cap[MAX_SEQS];
    float *k[MAX_SEQS], *v[MAX_SEQS]; /* (Hk, cap, E) and (Hk, cap, Ev): the stored values */
} model;

/* The key_dtype of the pools model_init makes: 0, or keys quantized per
 * channel (q4c, q2c), which the copy then holds as the pool does: its last
 * positions not yet forming a group of 32 rounded to f16, and each group
 * that fills quantized from those and widened back (copy_append). */
static attn_dtype model_keys;
static int model_head_major; /* the pools of model_init: head-major pages (attn_kv_pages_desc.head_major) */
/* Their residual window (desc.residual): the R positions before the group
 * being filled stay in f16 too, and a group is quantized as it leaves. */
static int64_t model_residual;

/* Positions in quantized groups at `length` with window R (attn.h, "Keys
 * quantized per channel"): max(0, 32·floor(length / 32) - R). */
static int64_t grouped_full(int64_t length, int64_t R) {
    int64_t full = length / 32 * 32 - R;
    return full > 0 ? full : 0;
}
/* Whether truncating from `len` to `to` turns quantized positions back into f16 rows. */
static int takes_back(int64_t len, int64_t to, int64_t R) {
    int64_t was = grouped_full(len, R);
    return grouped_full(to, R) < (was < to ? was : to);
}

static void model_init(model *m, attn_dtype dt, int64_t P, int64_t pages, int64_t seqs, int64_t heads, int64_t E,
                       int64_t Ev, int64_t max_length) {
    memset(m, 0, sizeof *m);
    m->d = attn_kv_pages_desc_default();
    m->d.key_dtype = model_keys, m->d.residual = model_residual, m->d.head_major = model_head_major;
    m->d.dtype = dt, m->d.page_size = P, m->d.num_pages = pages, m->d.max_sequences = seqs;
    m->d.heads = heads, m->d.key_dim = E, m->d.value_dim = Ev, m->d.max_length = max_length;
    attn_error err;
    if (attn_kv_pages_bytes(&m->bytes, &m->d, &err)) printf("FAIL kv_pages_bytes: %s\n", err.message), n_failed++;
    m->memory = calloc(1, m->bytes);
    if (attn_kv_pages_init(&m->pool, m->memory, m->bytes, &m->d, &err))
        printf("FAIL kv_pages_init: %s\n", err.message), n_failed++;
}

static void model_free(model *m) {
    for (int s = 0; s < MAX_SEQS; s++) free(m->k[s]), free(m->v[s]);
    free(m->memory);
}

static void reserve(model *m, int s, int64_t n) {
    if (n <= m->cap[s]) return;
    int64_t cap = n * 2 + 8, H = m->d.heads, E = m->d.key_dim, Ev = m->d.value_dim;
    float *k = calloc((size_t)(H * cap * E), 4), *v = calloc((size_t)(H * cap * Ev), 4);
    for (int64_t h = 0; h < H; h++) {
        if (m->len[s]) memcpy(k + h * cap * E, m->k[s] + h * m->cap[s] * E, (size_t)(m->len[s] * E) * 4);
        if (m->len[s]) memcpy(v + h * cap * Ev, m->v[s] + h * m->cap[s] * Ev, (size_t)(m->len[s] * Ev) * 4);
    }
    free(m->k[s]), free(m->v[s]);
    m->k[s] = k, m->v[s] = v, m->cap[s] = cap;
}

/* Sequence s of the pool, gathered into f32, against the test's copy:
 * bitwise. Returns 1 when equal. */
static int same_as_copy(const model *m, int s, char *why, size_t size) {
    int64_t length;
    attn_error err;
    if (attn_kv_pages_sequence(m->pool, s, &length, NULL, &err))
        return snprintf(why, size, "sequence %d: %s", s, err.message), 0;
    if (length != m->len[s])
        return snprintf(why, size, "sequence %d holds %lld positions, the copy %lld", s, (long long)length,
                        (long long)m->len[s]), 0;
    int64_t H = m->d.heads, E = m->d.key_dim, Ev = m->d.value_dim;
    float *k = malloc((size_t)(H * length * E + 1) * 4), *v = malloc((size_t)(H * length * Ev + 1) * 4);
    int64_t ks[3] = {H, length, E}, vs[3] = {H, length, Ev};
    /* the copy's own layout, (Hk, cap, E), strided: gather writes views */
    int64_t kst[3] = {length * E, E, 1}, vst[3] = {length * Ev, Ev, 1};
    attn_tensor tk, tv;
    attn_tensor_init(&tk, k, ATTN_F32, 3, ks, kst, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, vs, vst, NULL);
    int ok = 1;
    if (attn_kv_pages_gather(&tk, &tv, m->pool, s, &err)) {
        snprintf(why, size, "gather of sequence %d: %s", s, err.message);
        ok = 0;
    }
    for (int64_t h = 0; ok && length && h < H; h++)
        if (memcmp(k + h * length * E, m->k[s] + h * m->cap[s] * E, (size_t)(length * E) * 4) ||
            memcmp(v + h * length * Ev, m->v[s] + h * m->cap[s] * Ev, (size_t)(length * Ev) * 4)) {
            snprintf(why, size, "sequence %d, head %lld: the pages differ from the copy", s, (long long)h);
            ok = 0;
        }
    free(k), free(v);
    return ok;
}

/* The pool's bookkeeping against the sequences: each page's count is the
 * number of live sequences whose table holds it, no table holds a page
 * twice, and the free pages are exactly the pages of count 0. */
static int bookkeeping_holds(const model *m, char *why, size_t size) {
    int64_t pages = m->d.num_pages, P = m->d.page_size, free_count = 0;
    int64_t *count = calloc((size_t)pages, sizeof *count);
    int ok = 1;
    for (int s = 0; s < MAX_SEQS && ok; s++) {
        if (!m->live[s]) continue;
        const int32_t *t;
        int64_t length;
        attn_kv_pages_sequence(m->pool, s, &length, &t, NULL);
        int64_t n = (length + P - 1) / P;
        for (int64_t i = 0; i < n && ok; i++) {
            if (t[i] < 0 || t[i] >= pages) {
                snprintf(why, size, "sequence %d's entry %lld is page %d", s, (long long)i, (int)t[i]);
                ok = 0;
                break;
            }
            for (int64_t j = 0; j < i; j++)
                if (t[j] == t[i]) snprintf(why, size, "sequence %d holds page %d twice", s, (int)t[i]), ok = 0;
            count[t[i]]++;
        }
    }
    for (int64_t p = 0; p < pages && ok; p++) {
        if (attn_kv_pages_page_refs(m->pool, p) != count[p]) {
            snprintf(why, size, "page %lld counts %lld sequences, %lld hold it", (long long)p,
                     (long long)attn_kv_pages_page_refs(m->pool, p), (long long)count[p]);
            ok = 0;
        }
        free_count += count[p] == 0;
    }
    if (ok && attn_kv_pages_free_pages(m->pool) != free_count) {
        snprintf(why, size, "the pool says %lld pages are free, %lld are held by none",
                 (long long)attn_kv_pages_free_pages(m->pool), (long long)free_count);
        ok = 0;
    }
    free(count);
    return ok;
}

/* ---- the operations, on the pool and on the copy ---- */

/* New keys and values for rows of n sequences, packed (total, Hk, E) in a
 * buffer laid out (Hk, total, E) or (total, Hk, E): any strides. */
typedef struct packed {
    float *kd, *vd;
    attn_tensor k, v;
} packed;

static void make_packed(packed *p, const model *m, int64_t total, int transposed) {
    int64_t H = m->d.heads, E = m->d.key_dim, Ev = m->d.value_dim;
    p->kd = malloc((size_t)(total * H * E + 1) * 4), p->vd = malloc((size_t)(total * H * Ev + 1) * 4);
    for (int64_t i = 0; i < total * H * E; i++) p->kd[i] = rnd_value();
    for (int64_t i = 0; i < total * H * Ev; i++) p->vd[i] = rnd_value();
    int64_t ks[3] = {total, H, E}, vs[3] = {total, H, Ev};
    int64_t kt[3] = {E, total * E, 1}, vt[3] = {Ev, total * Ev, 1};
    attn_tensor_init(&p->k, p->kd, ATTN_F32, 3, ks, transposed ? kt : NULL, NULL);
    attn_tensor_init(&p->v, p->vd, ATTN_F32, 3, vs, transposed ? vt : NULL, NULL);
}

static float packed_at(const attn_tensor *t, int64_t r, int64_t h, int64_t c) {
    return ((const float *)t->data)[r * t->strides[0] + h * t->strides[1] + c * t->strides[2]];
}

/* Grouped keys: group g of sequence s's copy (32 positions of f16 values)
 * quantized through attn_quantize and widened back through attn_dequantize
 * (both checked bit for bit against NumPy by oracle_quant.py). */
static void copy_quantize_group(model *m, int s, int64_t g) {
    int64_t E = m->d.key_dim, shape[2] = {32, E};
    unsigned char group[32 * 64 / 2 + 4 * 64];
    for (int64_t h = 0; h < m->d.heads; h++) {
        attn_tensor t;
        attn_tensor_init(&t, m->k[s] + (h * m->cap[s] + g * 32) * E, ATTN_F32, 2, shape, NULL, NULL);
        if (attn_quantize(group, sizeof group, m->d.key_dtype, &t, NULL) ||
            attn_dequantize(&t, group, sizeof group, m->d.key_dtype, NULL))
            printf("FAIL copy_quantize_group: E = %lld\n", (long long)E), n_failed++;
    }
}

/* The test's copy of what truncate does: the quantized positions the
 * shorter window takes back become f16 rows. */
static void copy_truncate(model *m, int s, int64_t to) {
    int64_t R = m->d.residual, was = grouped_full(m->len[s], R), end = was < to ? was : to;
    if (m->d.key_dtype && takes_back(m->len[s], to, R))
        for (int64_t h = 0; h < m->d.heads; h++)
            for (int64_t i = grouped_full(to, R) * m->d.key_dim; i < end * m->d.key_dim; i++) {
                float *x = m->k[s] + h * m->cap[s] * m->d.key_dim + i;
                *x = stored(*x > 65504.0f ? 65504.0f : *x < -65504.0f ? -65504.0f : *x, ATTN_F16); /* saturated */
            }
    m->len[s] = to;
}

/* The test's copy of what append does. */
static void copy_append(model *m, const int64_t *seqs, int64_t n, const packed *p, const int64_t *cu) {
    int64_t H = m->d.heads, E = m->d.key_dim, Ev = m->d.value_dim;
    attn_dtype kdt = m->d.key_dtype ? ATTN_F16 : m->d.dtype; /* grouped: the residual's f16 first */
    for (int64_t i = 0; i < n; i++) {
        int s = (int)seqs[i];
        int64_t add = cu[i + 1] - cu[i];
        reserve(m, s, m->len[s] + add);
        for (int64_t r = 0; r < add; r++)
            for (int64_t h = 0; h < H; h++) {
                for (int64_t c = 0; c < E; c++)
                    m->k[s][(h * m->cap[s] + m->len[s] + r) * E + c] = stored(packed_at(&p->k, cu[i] + r, h, c), kdt);
                for (int64_t c = 0; c < Ev; c++)
                    m->v[s][(h * m->cap[s] + m->len[s] + r) * Ev + c] = stored(packed_at(&p->v, cu[i] + r, h, c), m->d.dtype);
            }
        int64_t R = m->d.residual; /* the groups that leave the window */
        for (int64_t g = grouped_full(m->len[s], R) / 32; m->d.key_dtype && g < grouped_full(m->len[s] + add, R) / 32; g++)
            copy_quantize_group(m, s, g);
        m->len[s] += add;
    }
}

static void copy_fork(model *m, int child, int parent) {
    m->live[child] = 1;
    m->len[child] = 0;
    reserve(m, child, m->len[parent]);
    int64_t H = m->d.heads, E = m->d.key_dim, Ev = m->d.value_dim;
    for (int64_t h = 0; h < H && m->len[parent]; h++) {
        memcpy(m->k[child] + h * m->cap[child] * E, m->k[parent] + h * m->cap[parent] * E,
               (size_t)(m->len[parent] * E) * 4);
        memcpy(m->v[child] + h * m->cap[child] * Ev, m->v[parent] + h * m->cap[parent] * Ev,
               (size_t)(m->len[parent] * Ev) * 4);
    }
    m->len[child] = m->len[parent];
}

/* The pages an append takes: new pages, a shared last page copied, and
 * with a residual window each shared page a group leaves into, copied (the
 * appends simulated in order on a copy of the reference counts: a sequence
 * that copies lets go of the page). The pool counts the same before
 * writing, and refuses past it. */
static int64_t pages_wanted(const model *m, const int64_t *seqs, int64_t n, const int64_t *cu, int64_t *window_copies) {
    int64_t P = m->d.page_size, R = m->d.residual, want = 0;
    int64_t *refs = malloc((size_t)m->d.num_pages * sizeof *refs);
    for (int64_t p = 0; p < m->d.num_pages; p++) refs[p] = attn_kv_pages_page_refs(m->pool, p);
    for (int64_t i = 0; i < n; i++) {
        int64_t len = m->len[seqs[i]], add = cu[i + 1] - cu[i];
        if (!add) continue;
        const int32_t *t;
        attn_kv_pages_sequence(m->pool, seqs[i], NULL, &t, NULL);
        want += (len + add + P - 1) / P - (len + P - 1) / P;
        if (len % P && refs[t[len / P]] > 1) want++, refs[t[len / P]]--;
        for (int64_t pos = grouped_full(len, R), last = -1; m->d.key_dtype && R && pos < grouped_full(len + add, R);
             pos += 32) {
            int64_t e = pos / P;
            if (e == last || e >= (len + P - 1) / P || (len % P && e == len / P)) continue;
            last = e;
            if (refs[t[e]] > 1) want++, (*window_copies)++, refs[t[e]]--;
        }
    }
    free(refs);
    return want;
}

/* What attend_matches adds to the options: RoPE, a mask per sequence
 * (bool (L, S) or f32 (Hq, L, S), random), dropout; or queries 2^100 times
 * larger, whose scores f32 cannot hold: the exact kernel takes the slices
 * (the verbose line's fallback= must say so). */
enum { WITH_ROPE = 1, WITH_MASKS = 2, WITH_DROPOUT = 4, WITH_HUGE_Q = 8 };

/* Packed f32 queries of `rows` positions and their answers: q (rows, Hq,
 * E), out (rows, Hq, Ev), lse (rows, Hq), each contiguous. */
static void packed_queries(attn_tensor *tq, attn_tensor *to, attn_tensor *tl, float *q, float *out, float *lse,
                           int64_t rows, int64_t Hq, int64_t E, int64_t Ev) {
    int64_t qs[3] = {rows, Hq, E}, os[3] = {rows, Hq, Ev}, ls[2] = {rows, Hq};
    attn_tensor_init(tq, q, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(to, out, ATTN_F32, 3, os, NULL, NULL);
    attn_tensor_init(tl, lse, ATTN_F32, 2, ls, NULL, NULL);
}

/* Queries for n sequences, attended through the pool in one call, against
 * attn_kv_cache_attend on a contiguous cache of each sequence alone (with
 * sequence i's mask and dropout seed + i), bitwise. The call must be one
 * attn_sdpa_varlen_paged run, the kernels reading the pages in place: its
 * one verbose line names it (a copy of each sequence into a contiguous
 * buffer would have been attn_sdpa calls, one line each). *kernel (may be
 * NULL) gets the kernel= word of that line. */
static int attend_matches(const model *m, const int64_t *seqs, int64_t n, int threads, int flags, int64_t max_q,
                          char *kernel, size_t kernel_size, char *why, size_t size) {
    int64_t H = m->d.heads, Hq = H * 2, E = m->d.key_dim, Ev = m->d.value_dim;
    int64_t cu[MAX_SEQS + 1] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t len = m->len[seqs[i]];
        cu[i + 1] = cu[i] + (len ? 1 + rnd_below(len < max_q ? len : max_q) : 0);
    }
    int64_t total = cu[n];
    float *q = malloc((size_t)(total * Hq * E + 1) * 4), *out = calloc((size_t)(total * Hq * Ev + 1), 4);
    float *lse = calloc((size_t)(total * Hq + 1), 4);
    for (int64_t i = 0; i < total * Hq * E; i++) q[i] = rnd_value() * ((flags & WITH_HUGE_Q) ? 0x1p100f : 1.0f);
    attn_tensor tq, to, tl;
    packed_queries(&tq, &to, &tl, q, out, lse, total, Hq, E, Ev);
    /* masks[i]: even i bool (L, S), keeping 3 keys in 4; odd i additive
     * f32 (Hq, L, S) in [-2, 2), with a -inf here and there */
    attn_tensor mt[MAX_SEQS];
    const attn_tensor *masks[MAX_SEQS] = {NULL};
    void *mdata[MAX_SEQS] = {NULL};
    for (int64_t i = 0; i < n && (flags & WITH_MASKS); i++) {
        int64_t L = cu[i + 1] - cu[i], S = m->len[seqs[i]];
        if (!L) continue;
        if (i % 2 == 0) {
            bool *b = malloc((size_t)(L * S));
            for (int64_t x = 0; x < L * S; x++) b[x] = (rnd() & 3) != 0;
            int64_t sh[2] = {L, S};
            attn_tensor_init(&mt[i], b, ATTN_BOOL, 2, sh, NULL, NULL);
            mdata[i] = b;
        } else {
            float *f = malloc((size_t)(Hq * L * S) * 4);
            for (int64_t x = 0; x < Hq * L * S; x++) f[x] = (rnd() & 15) == 0 ? -1.0f / 0.0f : 2 * rnd_value();
            int64_t sh[3] = {Hq, L, S};
            attn_tensor_init(&mt[i], f, ATTN_F32, 3, sh, NULL, NULL);
            mdata[i] = f;
        }
        masks[i] = &mt[i];
    }
    attn_context c = attn_context_default();
    c.num_threads = threads;
    attn_rope_options ro = attn_rope_options_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &c, o.softcap = 20;
    if (flags & WITH_ROPE) o.rope = &ro;
    if (flags & WITH_DROPOUT) o.dropout_p = 0.25, o.dropout_seed = 12345;
    attn_error err;
    int ok = 1;
    char word[32], fallback[32];
    verbose_begin();
    attn_status st = attn_kv_pages_attend(&to, &tl, &tq, cu, seqs, n, m->pool, (flags & WITH_MASKS) ? masks : NULL,
                                          &o, &err);
    verbose_end(word, sizeof word, fallback, sizeof fallback);
    if (kernel) snprintf(kernel, kernel_size, "%s", word);
    if (st) {
        snprintf(why, size, "attn_kv_pages_attend: %s", err.message);
        ok = 0;
    } else if (total > 0 && strncmp(verbose_last_line, "attn: sdpa_varlen_paged ", 24) != 0) {
        snprintf(why, size, "not one in-place batch; the last verbose line was: %.200s", verbose_last_line);
        ok = 0;
    } else if (total > 0 && (flags & WITH_HUGE_Q) && strncmp(fallback, "0/", 2) == 0) {
        snprintf(why, size, "no slice went to the exact kernel (fallback=%s)", fallback);
        ok = 0;
    }
    for (int64_t i = 0; i < n && ok; i++) {
        int s = (int)seqs[i];
        int64_t L = cu[i + 1] - cu[i], S = m->len[s];
        if (!L) continue;
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.heads = H, cd.capacity = S, cd.key_dim = E, cd.value_dim = Ev, cd.dtype = m->d.dtype;
        if (m->d.key_dtype) cd.dtype = ATTN_F32; /* keys per channel: against f32 rows of their values */
        size_t bytes;
        attn_kv_cache_bytes(&bytes, &cd, NULL);
        void *mem = malloc(bytes);
        attn_kv_cache *cache;
        attn_kv_cache_init(&cache, mem, bytes, &cd, NULL);
        int64_t ks[3] = {H, S, E}, vs[3] = {H, S, Ev}, kst[3] = {m->cap[s] * E, E, 1}, vst[3] = {m->cap[s] * Ev, Ev, 1};
        attn_tensor ck, cv, qi, oi, li;
        attn_tensor_init(&ck, m->k[s], ATTN_F32, 3, ks, kst, NULL);
        attn_tensor_init(&cv, m->v[s], ATTN_F32, 3, vs, vst, NULL);
        float *o1 = malloc((size_t)(Hq * L * Ev) * 4), *l1 = malloc((size_t)(Hq * L) * 4);
        int64_t qis[3] = {Hq, L, E}, qist[3] = {E, Hq * E, 1}, ois[3] = {Hq, L, Ev}, lis[2] = {Hq, L};
        attn_tensor_init(&qi, q + cu[i] * Hq * E, ATTN_F32, 3, qis, qist, NULL);
        attn_tensor_init(&oi, o1, ATTN_F32, 3, ois, NULL, NULL);
        attn_tensor_init(&li, l1, ATTN_F32, 2, lis, NULL, NULL);
        attn_sdpa_options oi_opts = o;
        oi_opts.mask = masks[i], oi_opts.dropout_seed = o.dropout_seed + (uint64_t)i;
        if (attn_kv_cache_append(cache, &ck, &cv, &err) || attn_kv_cache_attend(&oi, &li, &qi, cache, &oi_opts, &err)) {
            snprintf(why, size, "the contiguous cache: %s", err.message);
            ok = 0;
        }
        for (int64_t h = 0; h < Hq && ok; h++)
            for (int64_t l = 0; l < L && ok; l++) {
                if (memcmp(o1 + (h * L + l) * Ev, out + ((cu[i] + l) * Hq + h) * Ev, (size_t)Ev * 4) ||
                    memcmp(l1 + h * L + l, lse + (cu[i] + l) * Hq + h, 4)) {
                    snprintf(why, size, "sequence %d, head %lld, query %lld differs from attn_kv_cache_attend", s,
                             (long long)h, (long long)l);
                    ok = 0;
                }
            }
        free(o1), free(l1), free(mem);
    }
    for (int64_t i = 0; i < n; i++) free(mdata[i]);
    free(q), free(out), free(lse);
    return ok;
}

/* One random program of `steps` operations; every step checked. */
static void random_program(const char *name, attn_dtype dt, int64_t P, int64_t pages, int64_t steps) {
    model m;
    model_init(&m, dt, P, pages, 6, 2, 8, 4, 0);
    char why[768] = "";
    int ok = 1;
    int64_t ops[6] = {0}, fulls = 0, shared_appends = 0, group_cuts = 0, window_copies = 0;
    /* At least `steps`, and on until the program has filled the pool,
     * appended to a shared last page, forked and attended. */
    int64_t step = 0;
    for (; ok && (step < steps || !fulls || !shared_appends || !ops[1] || !ops[5]) && step < 20 * steps; step++) {
        int op = (int)rnd_below(12);
        attn_error err;
        int64_t live[MAX_SEQS], nlive = 0;
        for (int s = 0; s < 6; s++)
            if (m.live[s]) live[nlive++] = s;
        if (op == 0 || nlive == 0) { /* create */
            int64_t s;
            attn_status st = attn_kv_pages_create(m.pool, &s, &err);
            if (nlive == 6)
                ok = st == ATTN_ERR_FULL && strstr(err.message, "all 6 of the pool's sequences (desc.max_sequences)"),
                snprintf(why, sizeof why, "create in a full pool: %d (%s)", st, st ? err.message : "");
            else if (st || s < 0 || s >= 6 || m.live[s]) ok = 0, snprintf(why, sizeof why, "create: %s", err.message);
            else m.live[s] = 1, m.len[s] = 0;
            ops[0]++;
        } else if (op == 1) { /* fork */
            int parent = (int)live[rnd_below(nlive)];
            int64_t child;
            attn_status st = attn_kv_pages_fork(m.pool, &child, parent, &err);
            if (nlive == 6) ok = st == ATTN_ERR_FULL, snprintf(why, sizeof why, "fork in a full pool: %d", st);
            else if (st) ok = 0, snprintf(why, sizeof why, "fork: %s", err.message);
            else copy_fork(&m, (int)child, parent);
            ops[1]++;
        } else if (op <= 6) { /* append to a random subset, in random order */
            int64_t seqs[MAX_SEQS], n = 0, cu[MAX_SEQS + 1] = {0};
            for (int64_t i = 0; i < nlive; i++)
                if (rnd() & 1) seqs[n++] = live[i];
            for (int64_t i = n - 1; i > 0; i--) {
                int64_t j = rnd_below(i + 1), t = seqs[i];
                seqs[i] = seqs[j], seqs[j] = t;
            }
            for (int64_t i = 0; i < n; i++) cu[i + 1] = cu[i] + (rnd() & 3 ? rnd_below(P + 3) : rnd_below(2 * P + 5));
            packed p;
            make_packed(&p, &m, cu[n], (int)(rnd() & 1));
            int64_t copies = 0, want = pages_wanted(&m, seqs, n, cu, &copies);
            int64_t before = attn_kv_pages_free_pages(m.pool);
            for (int64_t i = 0; i < n; i++) {
                const int32_t *t;
                attn_kv_pages_sequence(m.pool, seqs[i], NULL, &t, NULL);
                shared_appends += m.len[seqs[i]] % P && cu[i + 1] > cu[i] &&
                                  attn_kv_pages_page_refs(m.pool, t[m.len[seqs[i]] / P]) > 1;
            }
            void *snap = malloc(m.bytes);
            memcpy(snap, m.memory, m.bytes);
            attn_status st = attn_kv_pages_append(m.pool, seqs, n, &p.k, &p.v, cu, &err);
            if (want > before) {
                ok = st == ATTN_ERR_FULL && memcmp(snap, m.memory, m.bytes) == 0;
                snprintf(why, sizeof why, "append of %lld pages with %lld free: status %d, or the pool changed",
                         (long long)want, (long long)before, st);
                fulls++;
            } else if (st) {
                ok = 0, snprintf(why, sizeof why, "append: %s", err.message);
            } else {
                copy_append(&m, seqs, n, &p, cu);
                window_copies += copies;
                if (before - attn_kv_pages_free_pages(m.pool) != want)
                    ok = 0, snprintf(why, sizeof why, "append took %lld pages, %lld expected",
                                     (long long)(before - attn_kv_pages_free_pages(m.pool)), (long long)want);
            }
            free(snap), free(p.kd), free(p.vd);
            ops[2]++;
        } else if (op <= 8) { /* truncate */
            int s = (int)live[rnd_below(nlive)];
            int64_t to = rnd_below(m.len[s] + 1);
            group_cuts += takes_back(m.len[s], to, m.d.residual); /* quantized positions back to f16 (grouped keys) */
            if (attn_kv_pages_truncate(m.pool, s, to, &err)) ok = 0, snprintf(why, sizeof why, "truncate: %s", err.message);
            else copy_truncate(&m, s, to);
            ops[3]++;
        } else if (op == 9) { /* free */
            int s = (int)live[rnd_below(nlive)];
            if (attn_kv_pages_free(m.pool, s, &err)) ok = 0, snprintf(why, sizeof why, "free: %s", err.message);
            else m.live[s] = 0, m.len[s] = 0;
            ops[4]++;
        } else { /* attend: a random subset, on 1, 2 or 3 threads, with or without RoPE, masks, dropout */
            int64_t seqs[MAX_SEQS], n = 0;
            for (int64_t i = 0; i < nlive; i++)
                if (rnd() & 1) seqs[n++] = live[i];
            ok = attend_matches(&m, seqs, n, 1 + (int)rnd_below(3), (int)rnd_below(8), 5, NULL, 0, why, sizeof why);
            ops[5]++;
        }
        for (int s = 0; s < 6 && ok; s++)
            if (m.live[s]) ok = same_as_copy(&m, s, why, sizeof why);
        if (ok) ok = bookkeeping_holds(&m, why, sizeof why);
        if (!ok) {
            char msg[1024];
            snprintf(msg, sizeof msg, "step %lld: %s", (long long)step, why);
            memcpy(why, msg, sizeof why - 1);
            why[sizeof why - 1] = 0;
        }
    }
    /* Everything freed: every page is free again. */
    for (int s = 0; s < 6 && ok; s++)
        if (m.live[s]) attn_kv_pages_free(m.pool, s, NULL), m.live[s] = 0;
    if (ok && attn_kv_pages_free_pages(m.pool) != pages)
        ok = 0, snprintf(why, sizeof why, "%lld of %lld pages free after freeing everything",
                         (long long)attn_kv_pages_free_pages(m.pool), (long long)pages);
    /* A program that never filled the pool or never shared a page tested less than it says. */
    if (ok && m.d.key_dtype && group_cuts == 0)
        ok = 0, snprintf(why, sizeof why, "the program never truncated into a quantized group of keys");
    if (ok && m.d.residual && window_copies == 0)
        ok = 0, snprintf(why, sizeof why, "no group ever left the window into a shared page");
    if (ok && (fulls == 0 || shared_appends == 0 || ops[1] == 0 || ops[5] == 0))
        ok = 0, snprintf(why, sizeof why, "the program never hit a full pool (%lld), a shared last page (%lld), a fork or an attend",
                         (long long)fulls, (long long)shared_appends);
    check(ok, name, "%s", why);
    model_free(&m);
}

/* ---- copy on write, one case spelled out ---- */

static void test_fork_shares_full_pages(attn_dtype dt, int64_t P, const char *name) {
    model m;
    model_init(&m, dt, P, 8, 4, 1, 4, 4, 0);
    int64_t a, b, cu[2] = {0, 2 * P + P / 2};
    attn_kv_pages_create(m.pool, &a, NULL);
    m.live[a] = 1;
    packed p;
    make_packed(&p, &m, cu[1], 0);
    attn_kv_pages_append(m.pool, &a, 1, &p.k, &p.v, cu, NULL);
    copy_append(&m, &a, 1, &p, cu);
    attn_kv_pages_fork(m.pool, &b, a, NULL);
    copy_fork(&m, (int)b, (int)a);
    int64_t free_before = attn_kv_pages_free_pages(m.pool);
    packed one;
    int64_t cu1[2] = {0, 1};
    make_packed(&one, &m, 1, 0);
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, &b, 1, &one.k, &one.v, cu1, &err);
    copy_append(&m, &b, 1, &one, cu1);
    const int32_t *ta, *tb;
    attn_kv_pages_sequence(m.pool, a, NULL, &ta, NULL);
    attn_kv_pages_sequence(m.pool, b, NULL, &tb, NULL);
    char why[768] = "";
    int ok = st == ATTN_OK && free_before - attn_kv_pages_free_pages(m.pool) == 1 && ta[0] == tb[0] &&
             ta[1] == tb[1] && ta[2] != tb[2] && attn_kv_pages_page_refs(m.pool, ta[0]) == 2 &&
             attn_kv_pages_page_refs(m.pool, ta[2]) == 1 && same_as_copy(&m, (int)a, why, sizeof why) &&
             same_as_copy(&m, (int)b, why, sizeof why);
    /* Truncating the child below the shared pages leaves the parent whole. */
    ok = ok && attn_kv_pages_truncate(m.pool, b, 1, NULL) == ATTN_OK;
    m.len[b] = 1;
    ok = ok && same_as_copy(&m, (int)a, why, sizeof why) && same_as_copy(&m, (int)b, why, sizeof why) &&
         attn_kv_pages_page_refs(m.pool, ta[1]) == 1 && bookkeeping_holds(&m, why, sizeof why);
    check(ok, name, "%s", st ? err.message : why[0] ? why : "the child's append copied more than its last page");
    free(p.kd), free(p.vd), free(one.kd), free(one.vd);
    model_free(&m);
}

/* Keys per channel with a residual window: a group leaving the window into
 * a shared page copies that page and leaves it to the other holder, whose
 * partly filled last page it is; that holder, later in the same call, then
 * writes into it in place. The call takes 3 pages, and a pool with exactly
 * 3 free pages must take it (the count before writing took the last page
 * as still shared, and refused). */
static void test_window_copy_leaves_last_page(void) {
    model_keys = ATTN_Q4C, model_residual = 128;
    model m;
    model_init(&m, ATTN_F32, 64, 7, 2, 1, 8, 4, 0);
    model_keys = 0, model_residual = 0;
    int64_t a, b, cu[2] = {0, 211};
    attn_kv_pages_create(m.pool, &a, NULL);
    m.live[a] = 1;
    packed p;
    make_packed(&p, &m, cu[1], 0);
    attn_kv_pages_append(m.pool, &a, 1, &p.k, &p.v, cu, NULL); /* pages 0 .. 3, the last partly filled */
    copy_append(&m, &a, 1, &p, cu);
    attn_kv_pages_fork(m.pool, &b, a, NULL);
    copy_fork(&m, (int)b, (int)a);
    attn_kv_pages_truncate(m.pool, a, 114, NULL); /* a: pages 0 and 1, the last partly filled, both shared */
    copy_truncate(&m, (int)a, 114);
    /* b: 211 + 47 positions, its groups at 64 and 96 leaving the window
     * into page 1 (a copy), and a new page; a: 114 + 41, into page 1 in
     * place, and a new page */
    int64_t ids[2] = {b, a}, cu2[3] = {0, 47, 88}, before = attn_kv_pages_free_pages(m.pool);
    packed two;
    make_packed(&two, &m, cu2[2], 0);
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, ids, 2, &two.k, &two.v, cu2, &err);
    char why[768] = "";
    int ok = before == 3 && st == ATTN_OK && attn_kv_pages_free_pages(m.pool) == 0;
    if (ok) {
        copy_append(&m, ids, 2, &two, cu2);
        ok = same_as_copy(&m, (int)a, why, sizeof why) && same_as_copy(&m, (int)b, why, sizeof why) &&
             bookkeeping_holds(&m, why, sizeof why);
    }
    check(ok, "window_copy_leaves_shared_last_page_to_its_holder", "%lld free before: %s", (long long)before,
          st ? err.message : why[0] ? why : "pages left free");
    free(p.kd), free(p.vd), free(two.kd), free(two.vd);
    model_free(&m);
}

/* Every holder of a shared, partly filled page appending in one call: all
 * but the last copy it, and the last writes into it in place, so the call
 * needs one page fewer than it has holders; a pool with exactly that many
 * free pages must take it. */
static void test_all_sharers_append(attn_dtype dt, int64_t P, const char *name) {
    model m;
    model_init(&m, dt, P, 4, 4, 1, 4, 4, 0);
    int64_t ids[3], cu[2] = {0, P + 1};
    attn_kv_pages_create(m.pool, &ids[0], NULL);
    m.live[ids[0]] = 1;
    packed p;
    make_packed(&p, &m, cu[1], 0);
    attn_kv_pages_append(m.pool, &ids[0], 1, &p.k, &p.v, cu, NULL); /* 2 pages, the last partly filled */
    copy_append(&m, &ids[0], 1, &p, cu);
    for (int i = 1; i < 3; i++) {
        attn_kv_pages_fork(m.pool, &ids[i], ids[0], NULL);
        copy_fork(&m, (int)ids[i], (int)ids[0]);
    }
    /* 2 free pages; 3 sequences append 1 position each: 2 copies, 1 in place */
    packed one;
    int64_t cu3[4] = {0, 1, 2, 3};
    make_packed(&one, &m, 3, 1);
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, ids, 3, &one.k, &one.v, cu3, &err);
    char why[768] = "";
    int ok = st == ATTN_OK && attn_kv_pages_free_pages(m.pool) == 0;
    if (ok) {
        copy_append(&m, ids, 3, &one, cu3);
        for (int i = 0; i < 3 && ok; i++) ok = same_as_copy(&m, (int)ids[i], why, sizeof why);
        ok = ok && bookkeeping_holds(&m, why, sizeof why);
    }
    check(ok, name, "%s", st ? err.message : why[0] ? why : "pages left free");
    free(p.kd), free(p.vd), free(one.kd), free(one.vd);
    model_free(&m);
}

/* One query for each of n sequences through the pool on `threads`
 * threads, against attn_sdpa on each sequence's copy, (Hk, S, E) f32 rows
 * one head after another: dense rows, a KV head a microkernel call, where
 * attn_kv_cache_attend (attend_matches) reads a contiguous cache as pages
 * too. Bitwise, outputs and lse. */
static int paged_matches_dense(const model *m, const int64_t *seqs, int64_t n, int threads, char *why, size_t size) {
    int64_t H = m->d.heads, Hq = H * 2, E = m->d.key_dim, Ev = m->d.value_dim, cu[MAX_SEQS + 1];
    uint64_t saved = rng_state; /* the later tests' random stream left as it was */
    for (int64_t i = 0; i <= n; i++) cu[i] = i;
    float *q = malloc((size_t)(n * Hq * E) * 4), *out = calloc((size_t)(n * Hq * Ev), 4);
    float *lse = calloc((size_t)(n * Hq), 4), *o1 = malloc((size_t)(Hq * Ev) * 4), l1[64];
    for (int64_t i = 0; i < n * Hq * E; i++) q[i] = rnd_value();
    attn_tensor tq, to, tl;
    packed_queries(&tq, &to, &tl, q, out, lse, n, Hq, E, Ev);
    attn_context c = attn_context_default();
    c.num_threads = threads;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &c, o.softcap = 20;
    attn_error err;
    attn_status st = attn_kv_pages_attend(&to, &tl, &tq, cu, seqs, n, m->pool, NULL, &o, &err);
    int ok = st == ATTN_OK && Hq <= 64;
    if (st) snprintf(why, size, "attn_kv_pages_attend: %s", err.message);
    for (int64_t i = 0; i < n && ok; i++) {
        int s = (int)seqs[i];
        int64_t S = m->len[s], ks[3] = {H, S, E}, vs[3] = {H, S, Ev}, kst[3] = {m->cap[s] * E, E, 1},
                vst[3] = {m->cap[s] * Ev, Ev, 1}, qis[3] = {Hq, 1, E}, ois[3] = {Hq, 1, Ev}, lis[2] = {Hq, 1};
        attn_tensor tk, tv, qi, oi, li;
        attn_tensor_init(&tk, m->k[s], ATTN_F32, 3, ks, kst, NULL);
        attn_tensor_init(&tv, m->v[s], ATTN_F32, 3, vs, vst, NULL);
        attn_tensor_init(&qi, q + i * Hq * E, ATTN_F32, 3, qis, NULL, NULL);
        attn_tensor_init(&oi, o1, ATTN_F32, 3, ois, NULL, NULL);
        attn_tensor_init(&li, l1, ATTN_F32, 2, lis, NULL, NULL);
        if ((st = attn_sdpa(&oi, &li, NULL, &qi, &tk, &tv, &o, &err))) {
            snprintf(why, size, "attn_sdpa: %s", err.message);
            ok = 0;
        }
        for (int64_t h = 0; h < Hq && ok; h++)
            if (memcmp(o1 + h * Ev, out + (i * Hq + h) * Ev, (size_t)Ev * 4) || memcmp(l1 + h, lse + i * Hq + h, 4)) {
                snprintf(why, size, "sequence %d, head %lld differs from attn_sdpa on dense rows", s, (long long)h);
                ok = 0;
            }
    }
    free(q), free(out), free(lse), free(o1);
    rng_state = saved;
    return ok;
}

/* Long sequences: a prompt of 2100 positions over pages of 256 or 16, forked,
 * each fork given its own next token, then one query each, in one call:
 * the split-KV decode kernel runs (L = 1, many chunks; checked on the
 * verbose line) and each sequence's rows equal attn_kv_cache_attend's.
 * Where the ISA has the list microkernels (AVX2, AVX-512), one call of
 * them reads the rows of several pages (pages_per_call >= 2 on the verbose
 * line): every page of 16 positions is 1 KiB of one head's keys here, so
 * a call of 4 KiB of rows or more takes 4 of them or more; pages of 256
 * are read from a little before one page's end into the next. Then, on
 * 2 threads, the pool against attn_sdpa on dense rows, bitwise
 * (paged_matches_dense: attn_kv_cache_attend reads its cache as pages
 * too); H KV heads of E and Ev columns (4 heads of 40 and 24: a vector's
 * tail in every row, pages of 24 crossed inside a call). */
static void test_long_decode(attn_dtype dt, int64_t P, int64_t H, int64_t E, int64_t Ev, const char *name) {
    model m;
    model_init(&m, dt, P, 3 * 256 * 12 / P, 3, H, E, Ev, 0);
    int64_t ids[3], cu[2] = {0, 2100};
    attn_kv_pages_create(m.pool, &ids[0], NULL);
    m.live[ids[0]] = 1;
    packed p;
    make_packed(&p, &m, cu[1], 1);
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, &ids[0], 1, &p.k, &p.v, cu, &err);
    copy_append(&m, &ids[0], 1, &p, cu);
    for (int i = 1; i < 3 && !st; i++) {
        st = attn_kv_pages_fork(m.pool, &ids[i], ids[0], &err);
        copy_fork(&m, (int)ids[i], (int)ids[0]);
    }
    packed one;
    int64_t cu3[4] = {0, 1, 2, 3};
    make_packed(&one, &m, 3, 0);
    if (!st) st = attn_kv_pages_append(m.pool, ids, 3, &one.k, &one.v, cu3, &err);
    copy_append(&m, ids, 3, &one, cu3);
    char why[768] = "", kernel[32] = "", masked[32] = "", pages[16] = "";
    int ok = st == ATTN_OK;
    if (ok) ok = attend_matches(&m, ids, 3, 3, 0, 1, kernel, sizeof kernel, why, sizeof why);
    word_after(pages, sizeof pages, verbose_last_line, " pages_per_call=");
    if (ok) ok = attend_matches(&m, ids, 3, 2, WITH_MASKS, 1, masked, sizeof masked, why, sizeof why);
    /* The list microkernels are the AVX2 and AVX-512 sets' (isa= on the line) */
    bool lists = strstr(verbose_last_line, " isa=avx2 ") || strstr(verbose_last_line, " isa=avx512 ");
    if (ok) ok = paged_matches_dense(&m, ids, 3, 2, why, sizeof why);
    check(ok && strcmp(kernel, "decode") == 0 && strcmp(masked, "decode") == 0 && (!lists || atoi(pages) >= 2), name,
          "%s (kernels %s, %s with masks; pages_per_call=%s)", st ? err.message : why, kernel, masked, pages);
    free(p.kd), free(p.vd), free(one.kd), free(one.vd);
    model_free(&m);
}

/* Keys quantized per channel (model_keys) through every kernel: a prompt of
 * 1000 positions (31 groups and a residual of 8), forked, one more position
 * each; then the decode kernel (one query per sequence), the flash kernel
 * (up to 300 queries each) and the exact kernel that takes the slices
 * whose scores f32 cannot hold, against attn_kv_cache_attend on f32 rows
 * of the dequantized keys, bitwise, the kernel named by ATTN_VERBOSE. */
static void test_grouped_kernels(attn_dtype keys, attn_dtype dt, int64_t P, int64_t R, const char *name) {
    model m;
    model_keys = keys, model_residual = R;
    model_init(&m, dt, P, 3 * 1024 / P + 3, 3, 2, 64, 32, 0);
    model_keys = 0, model_residual = 0;
    int64_t ids[3], cu[2] = {0, 1000};
    attn_kv_pages_create(m.pool, &ids[0], NULL);
    m.live[ids[0]] = 1;
    packed p, one;
    make_packed(&p, &m, cu[1], 1);
    for (int64_t i = 0; i < cu[1] * 2 * 64; i++) /* heavy-tailed channels: a few 30 times the others */
        p.kd[i] *= i % 64 == 5 || i % 64 == 17 ? 30.0f : 1.0f;
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, &ids[0], 1, &p.k, &p.v, cu, &err);
    copy_append(&m, &ids[0], 1, &p, cu);
    for (int i = 1; i < 3 && !st; i++) {
        st = attn_kv_pages_fork(m.pool, &ids[i], ids[0], &err);
        copy_fork(&m, (int)ids[i], (int)ids[0]);
    }
    int64_t cu3[4] = {0, 1, 2, 3};
    make_packed(&one, &m, 3, 0);
    if (!st) st = attn_kv_pages_append(m.pool, ids, 3, &one.k, &one.v, cu3, &err);
    copy_append(&m, ids, 3, &one, cu3);
    char why[768] = "", decode[32] = "", flash[32] = "";
    int ok = st == ATTN_OK;
    if (ok) ok = attend_matches(&m, ids, 3, 3, 0, 1, decode, sizeof decode, why, sizeof why);
    for (int t = 1; ok && t <= 2; t++) /* up to 300 queries per sequence, with RoPE, then masks */
        ok = attend_matches(&m, ids, 3, t, t == 2 ? WITH_MASKS : WITH_ROPE, 300, flash, sizeof flash, why, sizeof why);
    /* the exact kernel's reads of the groups (value by value, rows.c), from one query and from many */
    for (int64_t most = 1; ok && most <= 300; most += 299)
        ok = attend_matches(&m, ids, 3, 2, WITH_HUGE_Q, most, NULL, 0, why, sizeof why);
    check(ok && strcmp(decode, "decode") == 0 && strcmp(flash, "flash") == 0, name, "%s (kernels %s, %s)",
          st ? err.message : why, decode, flash);
    free(p.kd), free(p.vd), free(one.kd), free(one.vd);
    model_free(&m);
}

/* A contiguous cache of B = 2 rows with keys quantized per channel against
 * a pool fed the same appends and truncations (its rows the pool's
 * sequences 0 and 1; the pool checked against its copy by random_program):
 * gathered keys and values bitwise equal after every step, and
 * attn_kv_cache_attend bitwise attn_sdpa on the gathered f32 rows. Values
 * q4_1 (Ev = 32), E = 64, capacity 160 (5 groups). */
static void test_grouped_cache(attn_dtype keys, int64_t R, const char *name) {
    enum { B = 2, H = 2, E = 64, EV = 32 };
    const int64_t CAP = 160 + 2 * R; /* past the window, groups in it and before it */
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.batch = B, cd.heads = H, cd.capacity = CAP, cd.key_dim = E, cd.value_dim = EV, cd.dtype = ATTN_Q4_1;
    cd.key_dtype = keys, cd.residual = R;
    attn_kv_pages_desc pd = attn_kv_pages_desc_default();
    pd.heads = H, pd.key_dim = E, pd.value_dim = EV, pd.dtype = ATTN_Q4_1, pd.key_dtype = keys, pd.residual = R;
    pd.page_size = 32, pd.num_pages = 2 * CAP / 32, pd.max_sequences = B;
    size_t cb, pb;
    attn_error err;
    char why[768] = "";
    int ok = !attn_kv_cache_bytes(&cb, &cd, &err) && !attn_kv_pages_bytes(&pb, &pd, &err);
    if (!ok) snprintf(why, sizeof why, "sizes: %s", err.message);
    void *cmem = calloc(1, ok ? cb : 1), *pmem = calloc(1, ok ? pb : 1);
    attn_kv_cache *cache = NULL;
    attn_kv_pages *pool = NULL;
    int64_t ids[B];
    if (ok && (attn_kv_cache_init(&cache, cmem, cb, &cd, &err) || attn_kv_pages_init(&pool, pmem, pb, &pd, &err) ||
               attn_kv_pages_create(pool, &ids[0], &err) || attn_kv_pages_create(pool, &ids[1], &err)))
        ok = 0, snprintf(why, sizeof why, "init: %s", err.message);
    float *k = malloc(sizeof(float) * B * H * CAP * E), *v = malloc(sizeof(float) * B * H * CAP * EV);
    float *gk = malloc(sizeof(float) * B * H * CAP * E), *gv = malloc(sizeof(float) * B * H * CAP * EV);
    float *pk = malloc(sizeof(float) * H * CAP * E), *pv = malloc(sizeof(float) * H * CAP * EV);
    int64_t cuts = 0, attends = 0;
    for (int step = 0; ok && step < 60; step++) {
        int64_t len = attn_kv_cache_length(cache);
        if (rnd() % 4 == 0 && len > 0) { /* truncate, often into a quantized group */
            int64_t to = rnd_below(len + 1);
            cuts += takes_back(len, to, R);
            if (attn_kv_cache_truncate(cache, to, &err) || attn_kv_pages_truncate(pool, ids[0], to, &err) ||
                attn_kv_pages_truncate(pool, ids[1], to, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: truncate: %s", step, err.message);
        } else { /* append n positions to both rows */
            int64_t n = 1 + rnd_below(40 + R / 2);
            if (n > CAP - len) n = CAP - len;
            if (n == 0) continue;
            for (int64_t i = 0; i < B * H * n * E; i++) k[i] = rnd_value() * (i % E == 3 ? 40.0f : 1.0f);
            for (int64_t i = 0; i < B * H * n * EV; i++) v[i] = rnd_value();
            int64_t ks[4] = {B, H, n, E}, vs[4] = {B, H, n, EV};
            attn_tensor tk, tv;
            attn_tensor_init(&tk, k, ATTN_F32, 4, ks, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 4, vs, NULL, NULL);
            if (attn_kv_cache_append(cache, &tk, &tv, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: cache append: %s", step, err.message);
            for (int b = 0; ok && b < B; b++) { /* row b as a packed (n, Hk, dim) tensor */
                int64_t pks[3] = {n, H, E}, pkst[3] = {E, n * E, 1}, pvs[3] = {n, H, EV}, pvst[3] = {EV, n * EV, 1};
                int64_t cu[2] = {0, n};
                attn_tensor_init(&tk, k + b * H * n * E, ATTN_F32, 3, pks, pkst, NULL);
                attn_tensor_init(&tv, v + b * H * n * EV, ATTN_F32, 3, pvs, pvst, NULL);
                if (attn_kv_pages_append(pool, &ids[b], 1, &tk, &tv, cu, &err))
                    ok = 0, snprintf(why, sizeof why, "step %d: pool append: %s", step, err.message);
            }
        }
        len = attn_kv_cache_length(cache);
        if (!ok || len == 0) continue;
        int64_t gks[4] = {B, H, len, E}, gvs[4] = {B, H, len, EV};
        attn_tensor tgk, tgv;
        attn_tensor_init(&tgk, gk, ATTN_F32, 4, gks, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 4, gvs, NULL, NULL);
        if (attn_kv_cache_gather(&tgk, &tgv, cache, &err)) {
            ok = 0, snprintf(why, sizeof why, "step %d: gather: %s", step, err.message);
            break;
        }
        for (int b = 0; ok && b < B; b++) {
            int64_t pks[3] = {H, len, E}, pvs[3] = {H, len, EV};
            attn_tensor tpk, tpv;
            attn_tensor_init(&tpk, pk, ATTN_F32, 3, pks, NULL, NULL), attn_tensor_init(&tpv, pv, ATTN_F32, 3, pvs, NULL, NULL);
            if (attn_kv_pages_gather(&tpk, &tpv, pool, ids[b], &err))
                ok = 0, snprintf(why, sizeof why, "step %d: pool gather: %s", step, err.message);
            else if (memcmp(pk, gk + b * H * len * E, sizeof(float) * (size_t)(H * len * E)) ||
                     memcmp(pv, gv + b * H * len * EV, sizeof(float) * (size_t)(H * len * EV)))
                ok = 0, snprintf(why, sizeof why, "step %d: row %d differs from the pool's sequence", step, b);
        }
        if (!ok || step % 3) continue;
        /* attend: L = 1 or 5 queries (4 query heads), against attn_sdpa on the gathered rows */
        int64_t L = step % 2 ? 1 : (len < 5 ? len : 5);
        float q[B * 4 * 5 * E], o1[B * 4 * 5 * EV], o2[B * 4 * 5 * EV];
        for (int64_t i = 0; i < B * 4 * L * E; i++) q[i] = rnd_value();
        int64_t qs[4] = {B, 4, L, E}, os[4] = {B, 4, L, EV};
        attn_tensor tq, t1, t2;
        attn_tensor_init(&tq, q, ATTN_F32, 4, qs, NULL, NULL);
        attn_tensor_init(&t1, o1, ATTN_F32, 4, os, NULL, NULL), attn_tensor_init(&t2, o2, ATTN_F32, 4, os, NULL, NULL);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (attn_kv_cache_attend(&t1, NULL, &tq, cache, &o, &err) || attn_sdpa(&t2, NULL, NULL, &tq, &tgk, &tgv, &o, &err))
            ok = 0, snprintf(why, sizeof why, "step %d: attend: %s", step, err.message);
        else if (memcmp(o1, o2, sizeof(float) * (size_t)(B * 4 * L * EV)))
            ok = 0, snprintf(why, sizeof why, "step %d: attend (L = %lld, %lld positions) differs from attn_sdpa on the "
                             "gathered rows", step, (long long)L, (long long)len);
        attends++;
    }
    if (ok && (!cuts || !attends)) ok = 0, snprintf(why, sizeof why, "no truncation into a group (%lld) or no attend",
                                                    (long long)cuts);
    /* its keys have no tensor view */
    attn_tensor vk, vv;
    attn_status st = ok ? attn_kv_cache_view(&vk, &vv, cache, 4, &err) : ATTN_OK;
    if (ok && st != ATTN_ERR_DTYPE) ok = 0, snprintf(why, sizeof why, "attn_kv_cache_view gave status %d", st);
    check(ok, name, "%s", why);
    free(k), free(v), free(gk), free(gv), free(pk), free(pv), free(cmem), free(pmem);
}

/* A truncation that takes a group back into the window turns its values
 * into f16 rows. A channel whose keys reach f16's largest reads back past
 * it (keys of -65504 and 65504: d = 131008 / 15 rounds up to 8736, and the
 * top code gives 15 · 8736 - 65504 = 65536); rounded to f16 that was an
 * infinity, and once the group was quantized again the whole channel of 32
 * positions read NaN. It saturates to 65504: after the truncation and one
 * more append every key is finite, and the group holds what quantizing the
 * saturated f16 rows gives. The pool and the contiguous cache, R = 0 and 32. */
static void test_grouped_truncate_saturates(void) {
    enum { E = 8 };
    for (int R = 0; R <= 32; R += 32) {
        const int64_t n = 32 + R; /* one group quantized, R positions after it in the window */
        float k[64 * E], v[64 * E], back[64 * E], want[32 * E];
        for (int64_t t = 0; t < n; t++)
            for (int c = 0; c < E; c++)
                k[t * E + c] = c ? (float)(t % 7) - 3.0f : (float)(t % 32 * 4000) - 65504.0f, v[t * E + c] = 1.0f;
        k[1 * E] = 65504.0f; /* the group's channel 0 spans -65504 .. 65504 */
        /* what the group must hold after the truncation and the append: its
         * dequantized values, saturated, rounded to f16, quantized again */
        unsigned char group[20 * E];
        int64_t gshape[2] = {32, E};
        attn_tensor g;
        attn_tensor_init(&g, want, ATTN_F32, 2, gshape, NULL, NULL);
        memcpy(want, k, sizeof want);
        attn_quantize(group, sizeof group, ATTN_Q4C, &g, NULL), attn_dequantize(&g, group, sizeof group, ATTN_Q4C, NULL);
        int saw_past = want[1 * E] > 65504.0f; /* the case: the top code reads past f16's largest */
        for (int i = 0; i < 32 * E; i++) want[i] = stored(want[i] > 65504.0f ? 65504.0f : want[i], ATTN_F16);
        attn_quantize(group, sizeof group, ATTN_Q4C, &g, NULL), attn_dequantize(&g, group, sizeof group, ATTN_Q4C, NULL);
        for (int cache = 0; cache < 2; cache++) {
            attn_error err;
            attn_status st;
            void *mem = NULL;
            attn_kv_pages *pool = NULL;
            attn_kv_cache *c = NULL;
            /* the pool's packed rows (n, 1, E); the cache's (n, E) for its one head */
            int64_t seq = 0, cu[2] = {0, n}, pshape[3] = {n, 1, E}, cshape[2] = {n, E}, gs[3] = {1, n, E};
            attn_tensor tk, tv, gk, gv;
            attn_tensor_init(&tk, k, ATTN_F32, cache ? 2 : 3, cache ? cshape : pshape, NULL, NULL);
            tv = tk, tv.data = v;
            size_t bytes;
            if (cache) {
                attn_kv_cache_desc d = attn_kv_cache_desc_default();
                d.capacity = 64, d.key_dim = d.value_dim = E, d.key_dtype = ATTN_Q4C, d.residual = R;
                attn_kv_cache_bytes(&bytes, &d, NULL);
                mem = malloc(bytes);
                st = attn_kv_cache_init(&c, mem, bytes, &d, &err);
                if (!st) st = attn_kv_cache_append(c, &tk, &tv, &err);
                if (!st) st = attn_kv_cache_truncate(c, n - 1, &err);
                tk.shape[0] = tv.shape[0] = 1, tk.data = k + (n - 1) * E, tv.data = v + (n - 1) * E;
                if (!st) st = attn_kv_cache_append(c, &tk, &tv, &err);
            } else {
                attn_kv_pages_desc d = attn_kv_pages_desc_default();
                d.key_dim = d.value_dim = E, d.page_size = 32, d.num_pages = 4, d.max_sequences = 1;
                d.key_dtype = ATTN_Q4C, d.residual = R;
                attn_kv_pages_bytes(&bytes, &d, NULL);
                mem = malloc(bytes);
                st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
                if (!st) st = attn_kv_pages_create(pool, &seq, &err);
                if (!st) st = attn_kv_pages_append(pool, &seq, 1, &tk, &tv, cu, &err);
                if (!st) st = attn_kv_pages_truncate(pool, seq, n - 1, &err);
                cu[1] = 1, tk.shape[0] = tv.shape[0] = 1, tk.data = k + (n - 1) * E, tv.data = v + (n - 1) * E;
                if (!st) st = attn_kv_pages_append(pool, &seq, 1, &tk, &tv, cu, &err);
            }
            attn_tensor_init(&gk, back, ATTN_F32, 3, gs, NULL, NULL);
            float vback[64 * E]; /* the values are not checked */
            gv = gk, gv.data = vback;
            if (!st) st = cache ? attn_kv_cache_gather(&gk, &gv, c, &err) : attn_kv_pages_gather(&gk, &gv, pool, seq, &err);
            int finite = 1;
            for (int64_t i = 0; i < n * E; i++) finite &= isfinite(back[i]) != 0;
            char name[96];
            snprintf(name, sizeof name, "%s_q4c_residual_%d_truncation_saturates_keys_past_f16", cache ? "cache" : "pool", R);
            check(!st && saw_past && finite && !memcmp(back, want, sizeof want), name,
                  "%s; the top code read %s f16's largest; channel 0 at position 1: %g (want %g)",
                  st ? err.message : finite ? "the group differs" : "keys not finite", saw_past ? "past" : "within",
                  (double)back[1 * E], (double)want[1 * E]);
            free(mem);
        }
    }
}

/* Every refusal of a residual window, by the pool, the cache and a view:
 * not a multiple of 32, negative, past ATTN_KEY_RESIDUAL_MAX, or without
 * keys quantized per channel. */
static void test_residual_errors(void) {
    static const struct { const char *name; attn_dtype keys; int64_t R; } CASES[] = {
        {"residual_48_refused", ATTN_Q4C, 48},
        {"residual_negative_refused", ATTN_Q2C, -32},
        {"residual_past_max_refused", ATTN_Q4C, ATTN_KEY_RESIDUAL_MAX + 32},
        {"residual_without_key_dtype_refused", 0, 64}};
    for (int c = 0; c < 4; c++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.heads = 2, d.key_dim = 64, d.value_dim = 32, d.page_size = 32, d.num_pages = 4, d.max_sequences = 2;
        d.key_dtype = CASES[c].keys, d.residual = CASES[c].R;
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.heads = 2, cd.key_dim = 64, cd.value_dim = 32, cd.capacity = 64, cd.key_dtype = CASES[c].keys;
        cd.residual = CASES[c].R;
        attn_kv_paged_view w = attn_kv_paged_view_default();
        w.heads = 2, w.key_dim = 64, w.value_dim = 32, w.page_size = 32, w.num_pages = 4, w.k_pages = w.v_pages = &d;
        w.key_dtype = CASES[c].keys, w.residual = CASES[c].R;
        size_t bytes;
        attn_error e1, e2, e3;
        attn_status s1 = attn_kv_pages_bytes(&bytes, &d, &e1), s2 = attn_kv_cache_bytes(&bytes, &cd, &e2);
        attn_status s3 = attn_kv_paged_check(&w, &e3);
        check(s1 == ATTN_ERR_OPTION && s2 == ATTN_ERR_OPTION && s3 == ATTN_ERR_OPTION && strstr(e1.message, "residual") &&
                  strstr(e2.message, "residual") && strstr(e3.message, "residual"),
              CASES[c].name, "pool %d (%s), cache %d (%s), view %d (%s)", s1, s1 ? e1.message : "", s2,
              s2 ? e2.message : "", s3, s3 ? e3.message : "");
    }
    /* the largest window is taken, and counted: (R + 32) rows of E f16 per head and sequence */
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = 2, d.key_dim = 64, d.value_dim = 32, d.page_size = 32, d.num_pages = 4, d.max_sequences = 3;
    d.key_dtype = ATTN_Q2C;
    size_t b0 = 0, b1 = 0;
    attn_error err;
    attn_status st = attn_kv_pages_bytes(&b0, &d, &err);
    d.residual = ATTN_KEY_RESIDUAL_MAX;
    if (!st) st = attn_kv_pages_bytes(&b1, &d, &err);
    check(!st && b1 - b0 >= (size_t)(3 * 2 * ATTN_KEY_RESIDUAL_MAX * 64 * 2) &&
              b1 - b0 < (size_t)(3 * 2 * ATTN_KEY_RESIDUAL_MAX * 64 * 2 + 128),
          "residual_max_counted_by_pool_bytes", "status %d, %zu then %zu bytes", st, b0, b1);
}

/* Every refusal of keys quantized per channel, each with its status. */
static void test_grouped_errors(void) {
    struct {
        const char *name;
        attn_dtype keys, dt;
        int64_t P, E, pages;
        attn_status want;
    } CASES[] = {
        {"q4c_page_size_16", ATTN_Q4C, ATTN_F32, 16, 64, 4, ATTN_ERR_SHAPE},
        {"q4c_page_size_48", ATTN_Q4C, ATTN_F32, 48, 64, 4, ATTN_ERR_SHAPE},
        {"q4c_odd_key_dim", ATTN_Q4C, ATTN_F32, 32, 63, 4, ATTN_ERR_SHAPE},
        {"q2c_key_dim_not_a_multiple_of_4", ATTN_Q2C, ATTN_F32, 32, 66, 4, ATTN_ERR_SHAPE},
        {"q4c_key_dim_past_8192", ATTN_Q4C, ATTN_F32, 32, 8194, 4, ATTN_ERR_SHAPE},
        {"key_dtype_q8", ATTN_Q8, ATTN_F32, 32, 64, 4, ATTN_ERR_DTYPE},
        {"key_dtype_f16", ATTN_F16, ATTN_F32, 32, 64, 4, ATTN_ERR_DTYPE},
        {"q4c_keys_f64_values", ATTN_Q4C, ATTN_F64, 32, 64, 4, ATTN_ERR_DTYPE},
        {"q4c_overflowing_pages", ATTN_Q4C, ATTN_F32, 256, 8192, INT32_MAX, ATTN_ERR_OVERFLOW},
    };
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        bool huge = CASES[c].pages == INT32_MAX;
        d.page_size = CASES[c].P, d.num_pages = CASES[c].pages, d.max_sequences = 2, d.heads = huge ? INT64_MAX / 4 : 2;
        d.key_dim = CASES[c].E, d.value_dim = 32, d.dtype = CASES[c].dt, d.key_dtype = CASES[c].keys;
        size_t bytes = 0;
        attn_error err;
        attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
        char name[96];
        snprintf(name, sizeof name, "pool_refused_%s", CASES[c].name);
        check(st == CASES[c].want, name, "status %d, want %d: %s", st, CASES[c].want, st ? err.message : "accepted");
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.capacity = huge ? (INT64_MAX / 64) & ~(int64_t)31 : CASES[c].P;
        cd.heads = 2, cd.key_dim = CASES[c].E, cd.value_dim = 32, cd.dtype = CASES[c].dt, cd.key_dtype = CASES[c].keys;
        st = attn_kv_cache_bytes(&bytes, &cd, &err);
        snprintf(name, sizeof name, "cache_refused_%s", CASES[c].name);
        check(st == CASES[c].want, name, "status %d, want %d: %s", st, CASES[c].want, st ? err.message : "accepted");
    }
    /* keys per channel take no per-head key scale and no rotation: both act
     * on keys stored in dtype (q4_1 values here, which the rotation takes) */
    const float scales[2] = {0.5f, 2.0f};
    for (int c = 0; c < 2; c++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.page_size = 32, d.num_pages = 4, d.max_sequences = 2, d.heads = 2, d.key_dim = 64, d.value_dim = 32;
        d.dtype = c ? ATTN_Q4_1 : ATTN_E4M3, d.key_dtype = ATTN_Q4C;
        if (c) d.hadamard = 1;
        else d.k_scale = scales;
        size_t bytes = 0;
        attn_error err;
        attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
        check(st == ATTN_ERR_OPTION && strstr(err.message, c ? "hadamard" : "k_scale"),
              c ? "pool_refused_q4c_keys_hadamard" : "pool_refused_q4c_keys_k_scale", "status %d: %s", st,
              st ? err.message : "accepted");
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.capacity = 32, cd.heads = 2, cd.key_dim = 64, cd.value_dim = 32, cd.dtype = d.dtype, cd.key_dtype = ATTN_Q4C;
        if (c) cd.hadamard = 1;
        else cd.k_scale = scales;
        st = attn_kv_cache_bytes(&bytes, &cd, &err);
        check(st == ATTN_ERR_OPTION && strstr(err.message, c ? "hadamard" : "k_scale"),
              c ? "cache_refused_q4c_keys_hadamard" : "cache_refused_q4c_keys_k_scale", "status %d: %s", st,
              st ? err.message : "accepted");
    }
    /* a pool of q4c keys: its view, without residual rows, and its plan */
    model m;
    model_keys = ATTN_Q4C;
    model_init(&m, ATTN_F32, 32, 4, 2, 1, 8, 4, 0);
    model_keys = 0;
    int64_t id, cu[2] = {0, 3};
    packed p;
    make_packed(&p, &m, 3, 0);
    attn_error err;
    attn_kv_pages_create(m.pool, &id, NULL);
    attn_status st = attn_kv_pages_append(m.pool, &id, 1, &p.k, &p.v, cu, &err);
    attn_kv_paged_view w = attn_kv_paged_view_default();
    if (!st) st = attn_kv_pages_view(&w, m.pool, &err);
    check(!st && w.key_dtype == ATTN_Q4C && w.k_residual && attn_kv_paged_check(&w, &err) == ATTN_OK,
          "q4c_pool_view_names_its_keys_and_residual", "%s", st ? err.message : "wrong view");
    w.k_residual = NULL;
    st = attn_kv_paged_check(&w, &err);
    check(st == ATTN_ERR_NULL, "q4c_view_without_residual_refused", "status %d", st);
    attn_kv_pages_view(&w, m.pool, NULL);
    float q[2 * 8], out[2 * 4];
    int64_t qs[3] = {1, 2, 8}, os[3] = {1, 2, 4}, cq[3] = {0, 1, 1};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, os, NULL, NULL);
    memset(q, 0, sizeof q);
    static char plan_mem[1 << 16];
    attn_sdpa_plan *plan;
    size_t ws;
    for (int i = 0; i < 2 * 8; i++) q[i] = (float)(i % 5) - 2.0f;
    float ref[2 * 4];
    attn_tensor tr = to;
    tr.data = ref;
    static char work[1 << 16];
    st = attn_kv_paged_plan_init(&plan, plan_mem, sizeof plan_mem, &ws, &to, NULL, &tq, cq, &w, NULL, NULL, &err);
    if (!st && ws > sizeof work) st = ATTN_ERR_WORKSPACE, snprintf(err.message, sizeof err.message, "%zu bytes", ws);
    if (!st) st = attn_kv_paged_run(plan, &to, NULL, &tq, w.k_pages, w.v_pages, work, ws, &err);
    if (!st) st = attn_kv_paged_attend(&tr, NULL, &tq, cq, &w, NULL, NULL, &err);
    check(!st && !memcmp(out, ref, sizeof out), "q4c_view_planned_bitwise_attend", "status %d: %s", st,
          st ? err.message : "out differs");
    attn_tensor t;
    int64_t shape[2] = {32, 8};
    st = attn_tensor_init(&t, q, ATTN_Q4C, 2, shape, NULL, &err);
    check(st == ATTN_ERR_DTYPE, "q4c_is_no_tensor_dtype", "status %d", st);
    free(p.kd), free(p.vd);
    model_free(&m);
}

/* Forked sequences that share their prompt's pages, each then given its
 * own new positions (one none), attended together in one call (one
 * sequence named twice), prefill (up to 9 queries each: the flash kernel)
 * and decode (1 query each), plain, with masks, and with masks, RoPE and
 * dropout, on 1, 2 and 3 threads: every sequence's rows bitwise those of
 * attn_kv_cache_attend on it alone, the pages read in place. */
static void test_forks_attend(attn_dtype dt, int64_t P, const char *tag) {
    model m;
    model_init(&m, dt, P, 16, 4, 2, 8, 8, 0);
    int64_t ids[3], cu[2] = {0, 3 * P + 5};
    attn_kv_pages_create(m.pool, &ids[0], NULL);
    m.live[ids[0]] = 1;
    packed p, more;
    make_packed(&p, &m, cu[1], 0);
    attn_error err;
    attn_status st = attn_kv_pages_append(m.pool, &ids[0], 1, &p.k, &p.v, cu, &err);
    copy_append(&m, &ids[0], 1, &p, cu);
    for (int i = 1; i < 3 && !st; i++) {
        st = attn_kv_pages_fork(m.pool, &ids[i], ids[0], &err);
        copy_fork(&m, (int)ids[i], (int)ids[0]);
    }
    int64_t cu3[4] = {0, 0, 7, 27};
    make_packed(&more, &m, cu3[3], 1);
    if (!st) st = attn_kv_pages_append(m.pool, ids, 3, &more.k, &more.v, cu3, &err);
    copy_append(&m, ids, 3, &more, cu3);
    const int32_t *t0 = NULL;
    if (!st) st = attn_kv_pages_sequence(m.pool, ids[0], NULL, &t0, &err);
    int shared = !st && attn_kv_pages_page_refs(m.pool, t0[0]) == 3;
    static const int FLAGS[3] = {0, WITH_MASKS, WITH_MASKS | WITH_ROPE | WITH_DROPOUT};
    static const char *const FLAG_NAMES[3] = {"plain", "masks", "masks_rope_dropout"};
    int64_t seqs[4] = {ids[1], ids[0], ids[2], ids[1]};
    for (int threads = 1; threads <= 3; threads++)
        for (int f = 0; f < 3; f++)
            for (int decode = 0; decode < 2; decode++) {
                char name[160], why[768] = "", kernel[32] = "";
                snprintf(name, sizeof name, "forks_attend_in_place_%s_%s_%s_threads_%d", decode ? "decode" : "prefill",
                         FLAG_NAMES[f], tag, threads);
                int ok = !st && shared &&
                         attend_matches(&m, seqs, 4, threads, FLAGS[f], decode ? 1 : 9, kernel, sizeof kernel, why,
                                        sizeof why);
                check(ok, name, "%s", st ? err.message : !shared ? "the forks do not share their first page" : why);
            }
    free(p.kd), free(p.vd), free(more.kd), free(more.vd);
    model_free(&m);
}

/* ---- the layer over the pool (attn_mha_paged) ---- */

enum { LE = 16, LHQ = 4, LHK = 2, LD = 4, LKV = LHK * LD, LIN = LE + 2 * LKV };

/* A layer of random f32 parameters: in_proj (E + 2 Hkv D, E), out_proj
 * (E, E), both biased; or (identity) q = x, k = v = x's first Hkv·D
 * columns and out = the heads' output: then the layer is attention on x's
 * columns itself, and attn_sdpa is its reference. */
typedef struct layer {
    float w[LIN * LE], b[LIN], ow[LE * LE], ob[LE];
    attn_tensor tw[3], tb[3], tow, tob; /* q, k, v: rows 0, E and E + Hkv·D of w and b */
    attn_mha_params p;
} layer;

static void layer_init(layer *l, int identity) {
    for (int i = 0; i < LIN * LE; i++) l->w[i] = identity ? (i / LE < LE ? i / LE == i % LE : (i / LE - LE) % LKV == i % LE) : rnd_value() / 4;
    for (int i = 0; i < LIN; i++) l->b[i] = identity ? 0 : rnd_value() / 8;
    for (int i = 0; i < LE * LE; i++) l->ow[i] = identity ? i / LE == i % LE : rnd_value() / 4;
    for (int i = 0; i < LE; i++) l->ob[i] = identity ? 0 : rnd_value() / 8;
    static const int64_t ROW0[3] = {0, LE, LE + LKV}, ROWS[3] = {LE, LKV, LKV};
    for (int t = 0; t < 3; t++) {
        int64_t ws[2] = {ROWS[t], LE}, bs[1] = {ROWS[t]};
        attn_tensor_init(&l->tw[t], l->w + ROW0[t] * LE, ATTN_F32, 2, ws, NULL, NULL);
        attn_tensor_init(&l->tb[t], l->b + ROW0[t], ATTN_F32, 1, bs, NULL, NULL);
    }
    int64_t os[2] = {LE, LE}, obs[1] = {LE};
    attn_tensor_init(&l->tow, l->ow, ATTN_F32, 2, os, NULL, NULL), attn_tensor_init(&l->tob, l->ob, ATTN_F32, 1, obs, NULL, NULL);
    l->p = attn_mha_params_default();
    l->p.embed_dim = LE, l->p.num_heads = LHQ, l->p.num_kv_heads = LHK;
    l->p.q_proj_weight = &l->tw[0], l->p.k_proj_weight = &l->tw[1], l->p.v_proj_weight = &l->tw[2];
    if (!identity) l->p.q_proj_bias = &l->tb[0], l->p.k_proj_bias = &l->tb[1], l->p.v_proj_bias = &l->tb[2];
    l->p.out_proj_weight = &l->tow, l->p.out_proj_bias = identity ? NULL : &l->tob;
}

/* A contiguous cache of one sequence, as attn_mha_cached takes it. */
static attn_kv_cache *layer_cache(void **mem, attn_dtype dt) {
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.heads = LHK, cd.capacity = 64, cd.key_dim = cd.value_dim = LD, cd.dtype = dt;
    size_t bytes;
    attn_kv_cache *c = NULL;
    attn_kv_cache_bytes(&bytes, &cd, NULL);
    *mem = malloc(bytes);
    attn_kv_cache_init(&c, *mem, bytes, &cd, NULL);
    return c;
}

/* Three sequences through two steps of attn_mha_paged on 1, 2 and 3
 * threads, with RoPE: a prompt for a and b, b forked to c (sharing its
 * pages), then 1, 3 and 2 new positions (a decode and two short
 * prefills at once); each step's rows against attn_mha_cached on each
 * sequence alone in its own contiguous cache (c's cache given b's prompt
 * first), bitwise. Then masks: with the identity layer, every sequence's
 * rows against attn_sdpa on x's columns and the keys the pool holds, with
 * its mask, bitwise. */
static void test_mha_paged(attn_dtype dt, const char *tag) {
    layer l;
    layer_init(&l, 0);
    char name[128], why[768] = "";
    for (int threads = 1; threads <= 3; threads++) {
        model m;
        model_init(&m, dt, 16, 12, 4, LHK, LD, LD, 0);
        attn_context c = attn_context_default();
        c.num_threads = threads;
        attn_rope_options ro = attn_rope_options_default();
        attn_sdpa_options so = attn_sdpa_options_default();
        attn_mha_options mo = attn_mha_options_default();
        mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT, mo.rope = &ro, mo.attention = &so, mo.context = &c;
        int64_t ids[3];
        attn_kv_pages_create(m.pool, &ids[0], NULL), attn_kv_pages_create(m.pool, &ids[1], NULL);
        void *mem[3];
        attn_kv_cache *ref[3] = {layer_cache(&mem[0], dt), layer_cache(&mem[1], dt), layer_cache(&mem[2], dt)};
        int ok = 1;
        attn_error err;
        /* step 0: prompts of 7 (a) and 19 (b); step 1: 1 (a), 3 (b), 2 (c) */
        static const int64_t CU[2][4] = {{0, 7, 26, 26}, {0, 1, 4, 6}};
        static const int64_t NSEQ[2] = {2, 3};
        for (int step = 0; step < 2 && ok; step++) {
            if (step == 1) { /* c: a fork of b, and its reference cache given b's prompt */
                ok = attn_kv_pages_fork(m.pool, &ids[2], ids[1], &err) == ATTN_OK;
                if (!ok) snprintf(why, sizeof why, "fork: %s", err.message);
            }
            int64_t T = CU[step][NSEQ[step]];
            float x[26 * LE], out[26 * LE], want[26 * LE];
            for (int64_t i = 0; i < T * LE; i++) x[i] = rnd_value();
            int64_t xs[2] = {T, LE};
            attn_tensor tx, to;
            attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
            if (ok && attn_mha_paged(&to, &tx, CU[step], ids, NSEQ[step], m.pool, NULL, &l.p, &mo, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_paged: %s", step, err.message);
            for (int64_t i = 0; i < NSEQ[step] && ok; i++) {
                int64_t L = CU[step][i + 1] - CU[step][i], ls[2] = {L, LE};
                attn_tensor xi, oi;
                attn_tensor_init(&xi, x + CU[step][i] * LE, ATTN_F32, 2, ls, NULL, NULL);
                attn_tensor_init(&oi, want, ATTN_F32, 2, ls, NULL, NULL);
                if (attn_mha_cached(&oi, &xi, ref[i], &l.p, &mo, &err))
                    ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached: %s", step, err.message);
                else if (memcmp(want, out + CU[step][i] * LE, (size_t)(L * LE) * 4))
                    ok = 0, snprintf(why, sizeof why, "step %d: sequence %lld differs from attn_mha_cached", step,
                                     (long long)i);
                if (step == 0 && i == 1 && ok && attn_mha_cached(&oi, &xi, ref[2], &l.p, &mo, &err))
                    ok = 0, snprintf(why, sizeof why, "c's reference prompt: %s", err.message);
            }
        }
        const int32_t *t1, *t2;
        attn_kv_pages_sequence(m.pool, ids[1], NULL, &t1, NULL), attn_kv_pages_sequence(m.pool, ids[2], NULL, &t2, NULL);
        if (ok && t1[0] != t2[0]) ok = 0, snprintf(why, sizeof why, "the fork does not share its first page");
        snprintf(name, sizeof name, "mha_paged_equals_mha_cached_per_sequence_rope_%s_threads_%d", tag, threads);
        check(ok, name, "%s", why);
        for (int i = 0; i < 3; i++) free(mem[i]);
        model_free(&m);
    }

    /* masks, through the identity layer */
    layer_init(&l, 1);
    model m;
    model_init(&m, dt, 16, 12, 4, LHK, LD, LD, 0);
    int64_t ids[2], cu0[3] = {0, 9, 30}, cu1[3] = {0, 2, 7};
    attn_kv_pages_create(m.pool, &ids[0], NULL), attn_kv_pages_create(m.pool, &ids[1], NULL);
    float x[30 * LE], out[30 * LE];
    for (int i = 0; i < 30 * LE; i++) x[i] = rnd_value();
    int64_t xs[2] = {30, LE}, x1s[2] = {7, LE};
    attn_tensor tx, to;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
    attn_error err;
    int ok = attn_mha_paged(&to, &tx, cu0, ids, 2, m.pool, NULL, &l.p, NULL, &err) == ATTN_OK;
    if (!ok) snprintf(why, sizeof why, "the prompts: %s", err.message);
    /* the step: sequence 0 a bool (L, S) mask, sequence 1 an additive (Hq, L, S) one */
    bool bm[2 * 11];
    float fm[LHQ * 5 * 26];
    for (int i = 0; i < 2 * 11; i++) bm[i] = (rnd() & 3) != 0;
    for (int i = 0; i < LHQ * 5 * 26; i++) fm[i] = (rnd() & 7) == 0 ? -1.0f / 0.0f : rnd_value();
    int64_t bms[2] = {2, 11}, fms[3] = {LHQ, 5, 26};
    attn_tensor tbm, tfm;
    attn_tensor_init(&tbm, bm, ATTN_BOOL, 2, bms, NULL, NULL), attn_tensor_init(&tfm, fm, ATTN_F32, 3, fms, NULL, NULL);
    const attn_tensor *masks[2] = {&tbm, &tfm};
    for (int i = 0; i < 7 * LE; i++) x[i] = rnd_value();
    attn_tensor_init(&tx, x, ATTN_F32, 2, x1s, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, x1s, NULL, NULL);
    if (ok && attn_mha_paged(&to, &tx, cu1, ids, 2, m.pool, masks, &l.p, NULL, &err))
        ok = 0, snprintf(why, sizeof why, "the masked step: %s", err.message);
    for (int i = 0; i < 2 && ok; i++) {
        int64_t L = cu1[i + 1] - cu1[i], S = cu0[i + 1] - cu0[i] + L;
        float k[LHK * 26 * LD], v[LHK * 26 * LD], o1[LHQ * 5 * LD];
        int64_t kvs[3] = {LHK, S, LD}, qs[3] = {LHQ, L, LD}, qst[3] = {LD, LE, 1}, os[3] = {LHQ, L, LD}, ost[3] = {LD, LE, 1};
        attn_tensor tk, tv, tq, tout;
        attn_tensor_init(&tk, k, ATTN_F32, 3, kvs, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 3, kvs, NULL, NULL);
        attn_tensor_init(&tq, x + cu1[i] * LE, ATTN_F32, 3, qs, qst, NULL);
        attn_tensor_init(&tout, o1, ATTN_F32, 3, os, ost, NULL);
        attn_sdpa_options so = attn_sdpa_options_default();
        so.causal = ATTN_CAUSAL_BOTTOM_RIGHT, so.mask = masks[i];
        /* the pool's keys as stored, widened to f32 (exact), then attention in the pool's dtype */
        if (attn_kv_pages_gather(&tk, &tv, m.pool, ids[i], &err)) {
            ok = 0, snprintf(why, sizeof why, "gather: %s", err.message);
            break;
        }
        attn_tensor hk = tk, hv = tv;
        void *hkd = NULL, *hvd = NULL;
        if (dt != ATTN_F32) { /* keys of the pool's own dtype, as the kernels read them */
            hkd = malloc((size_t)(LHK * S * LD) * 2), hvd = malloc((size_t)(LHK * S * LD) * 2);
            attn_tensor_init(&hk, hkd, dt, 3, kvs, NULL, NULL), attn_tensor_init(&hv, hvd, dt, 3, kvs, NULL, NULL);
            attn_tensor_convert(&hk, &tk, NULL), attn_tensor_convert(&hv, &tv, NULL);
        }
        if (attn_sdpa(&tout, NULL, NULL, &tq, &hk, &hv, &so, &err))
            ok = 0, snprintf(why, sizeof why, "attn_sdpa: %s", err.message);
        else if (memcmp(o1, out + cu1[i] * LE, (size_t)(L * LE) * 4))
            ok = 0, snprintf(why, sizeof why, "sequence %d's masked rows differ from attn_sdpa's", i);
        free(hkd), free(hvd);
    }
    snprintf(name, sizeof name, "mha_paged_masks_equal_sdpa_per_sequence_%s", tag);
    check(ok, name, "%s", why);
    /* refused before anything is appended: a sequence twice, x of f64, a full pool */
    int64_t before[2];
    attn_kv_pages_sequence(m.pool, ids[0], &before[0], NULL, NULL), attn_kv_pages_sequence(m.pool, ids[1], &before[1], NULL, NULL);
    int64_t twice[2] = {ids[0], ids[0]}, big[3] = {0, 200, 207};
    attn_status st1 = attn_mha_paged(&to, &tx, cu1, twice, 2, m.pool, NULL, &l.p, NULL, &err);
    float xb[207 * LE] = {0}, ob[207 * LE];
    int64_t xbs[2] = {207, LE};
    attn_tensor txb, tob;
    attn_tensor_init(&txb, xb, ATTN_F32, 2, xbs, NULL, NULL), attn_tensor_init(&tob, ob, ATTN_F32, 2, xbs, NULL, NULL);
    attn_status st2 = attn_mha_paged(&tob, &txb, big, ids, 2, m.pool, NULL, &l.p, NULL, &err);
    int64_t after[2];
    attn_kv_pages_sequence(m.pool, ids[0], &after[0], NULL, NULL), attn_kv_pages_sequence(m.pool, ids[1], &after[1], NULL, NULL);
    snprintf(name, sizeof name, "mha_paged_refused_appends_nothing_%s", tag);
    check(st1 == ATTN_ERR_ARGUMENT && st2 == ATTN_ERR_FULL && before[0] == after[0] && before[1] == after[1], name,
          "statuses %d and %d, lengths %lld, %lld then %lld, %lld", st1, st2, (long long)before[0], (long long)before[1],
          (long long)after[0], (long long)after[1]);
    /* out over the pool's header, which the append writes (its free pages,
     * its counters) though no region of the pool's view holds it: refused,
     * the pool's bytes as they were (out was once written over them) */
    {
        unsigned char *snap = malloc(m.bytes);
        memcpy(snap, m.memory, m.bytes);
        attn_tensor on_header;
        attn_tensor_init(&on_header, (void *)m.pool, ATTN_F32, 2, x1s, NULL, NULL);
        attn_status st = attn_mha_paged(&on_header, &tx, cu1, ids, 2, m.pool, NULL, &l.p, NULL, &err);
        snprintf(name, sizeof name, "mha_paged_refused_out_over_the_pool_header_%s", tag);
        check(st == ATTN_ERR_STRIDE && strstr(err.message, "the pool's memory") && !memcmp(snap, m.memory, m.bytes),
              name, "status %d (%s)", (int)st, st ? err.message : "");
        free(snap);
    }
    /* a mask that does not fit its sequence is a bad argument too: refused
     * before the append, so a sequence whose partly filled last page a fork
     * shares takes no copy of it and the pool's bytes stay as they were */
    int64_t fork_id;
    attn_kv_pages_fork(m.pool, &fork_id, ids[0], NULL);
    unsigned char *pool_before = malloc(m.bytes);
    memcpy(pool_before, m.memory, m.bytes);
    bool five[5] = {1, 1, 1, 1, 1};
    int64_t five_shape[2] = {1, 5}, one[2] = {0, 1}, one_row[2] = {1, LE};
    attn_tensor bad, tx1, to1;
    attn_tensor_init(&bad, five, ATTN_BOOL, 2, five_shape, NULL, NULL);
    attn_tensor_init(&tx1, x, ATTN_F32, 2, one_row, NULL, NULL), attn_tensor_init(&to1, out, ATTN_F32, 2, one_row, NULL, NULL);
    const attn_tensor *bad_masks[1] = {&bad};
    attn_status st3 = attn_mha_paged(&to1, &tx1, one, ids, 1, m.pool, bad_masks, &l.p, NULL, &err);
    snprintf(name, sizeof name, "mha_paged_bad_mask_leaves_pool_bytes_%s", tag);
    check(st3 == ATTN_ERR_MASK && !memcmp(pool_before, m.memory, m.bytes) && strstr(err.message, "sequence 0"), name,
          "status %d (%s), the pool's bytes %s", st3, err.message,
          memcmp(pool_before, m.memory, m.bytes) ? "changed" : "as they were");
    free(pool_before);
    model_free(&m);
}

/* ---- the layer over a contiguous cache's rows (attn_mha_cached_batch) ---- */

enum { CB = 4, CCAP = 64 };

/* A contiguous cache of CB rows of CCAP positions, zeroed. */
static attn_kv_cache *batch_cache(void **mem, size_t *bytes, attn_dtype dt, int64_t heads) {
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.batch = CB, cd.heads = heads, cd.capacity = CCAP, cd.key_dim = cd.value_dim = LD, cd.dtype = dt;
    attn_kv_cache *c = NULL;
    attn_kv_cache_bytes(bytes, &cd, NULL);
    *mem = calloc(1, *bytes);
    attn_kv_cache_init(&c, *mem, *bytes, &cd, NULL);
    return c;
}

/* Three steps of attn_mha_cached_batch over rows of one cache, on 1, 2 and
 * 3 threads, GQA and RoPE: prompts of 7 (row 2) and 19 (row 0); then 1, 3
 * and 5 new positions (rows 0, 2 and a new prompt in row 3); then one each
 * (rows 3 and 2). Each step's rows against attn_mha_cached on each
 * sequence alone in its own one-row cache, bitwise; the lengths as the
 * sequences grew, row 1 never written, the cache's own length 0. Then
 * masks (a bool one and an additive one per step, with dropout): against
 * attn_mha_paged on a pool holding the same sequences, bitwise. */
static void test_mha_cached_batch(attn_dtype dt, const char *tag) {
    layer l;
    layer_init(&l, 0);
    char name[128], why[768] = "";
    static const int64_t CU[3][4] = {{0, 7, 26}, {0, 1, 4, 9}, {0, 1, 2}};
    static const int64_t ROWS[3][3] = {{2, 0}, {0, 2, 3}, {3, 2}};
    static const int64_t NSEQ[3] = {2, 3, 2};
    for (int threads = 1; threads <= 3; threads++) {
        attn_context c = attn_context_default();
        c.num_threads = threads;
        attn_rope_options ro = attn_rope_options_default();
        ro.position_offset = 3;
        attn_sdpa_options so = attn_sdpa_options_default();
        attn_mha_options mo = attn_mha_options_default();
        mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT, mo.rope = &ro, mo.attention = &so, mo.context = &c;
        void *mem, *rmem[CB];
        size_t bytes;
        attn_kv_cache *cache = batch_cache(&mem, &bytes, dt, LHK), *ref[CB];
        for (int r = 0; r < CB; r++) ref[r] = layer_cache(&rmem[r], dt);
        int64_t lengths[CB] = {0, 0, 0, 0};
        int ok = 1;
        attn_error err;
        for (int step = 0; step < 3 && ok; step++) {
            int64_t T = CU[step][NSEQ[step]];
            float x[26 * LE], out[26 * LE], want[26 * LE];
            for (int64_t i = 0; i < T * LE; i++) x[i] = rnd_value();
            int64_t xs[2] = {T, LE};
            attn_tensor tx, to;
            attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
            if (attn_mha_cached_batch(&to, &tx, CU[step], ROWS[step], NSEQ[step], cache, lengths, NULL, &l.p, &mo, &err)) {
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached_batch: %s", step, err.message);
                break;
            }
            for (int64_t i = 0; i < NSEQ[step] && ok; i++) {
                int64_t L = CU[step][i + 1] - CU[step][i], ls[2] = {L, LE}, row = ROWS[step][i];
                attn_tensor xi, oi;
                attn_tensor_init(&xi, x + CU[step][i] * LE, ATTN_F32, 2, ls, NULL, NULL);
                attn_tensor_init(&oi, want, ATTN_F32, 2, ls, NULL, NULL);
                if (attn_mha_cached(&oi, &xi, ref[row], &l.p, &mo, &err))
                    ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached: %s", step, err.message);
                else if (memcmp(want, out + CU[step][i] * LE, (size_t)(L * LE) * 4))
                    ok = 0, snprintf(why, sizeof why, "step %d: sequence %lld (row %lld) differs from attn_mha_cached",
                                     step, (long long)i, (long long)row);
                else if (lengths[row] != attn_kv_cache_length(ref[row]))
                    ok = 0, snprintf(why, sizeof why, "step %d: lengths[%lld] is %lld, not %lld", step, (long long)row,
                                     (long long)lengths[row], (long long)attn_kv_cache_length(ref[row]));
            }
        }
        /* row 1 was never named: its bytes are still 0 */
        attn_tensor k4, v4;
        attn_kv_cache_view(&k4, &v4, cache, 4, NULL);
        size_t es = attn_dtype_size(dt);
        const char *row1 = (const char *)k4.data + (size_t)(k4.strides[0]) * es;
        for (size_t b = 0; ok && b < (size_t)(LHK * CCAP * LD) * es; b++)
            if (row1[b]) ok = 0, snprintf(why, sizeof why, "row 1 was written");
        if (ok && (lengths[1] != 0 || attn_kv_cache_length(cache) != 0))
            ok = 0, snprintf(why, sizeof why, "lengths[1] %lld, the cache's length %lld: both must be 0",
                             (long long)lengths[1], (long long)attn_kv_cache_length(cache));
        snprintf(name, sizeof name, "mha_cached_batch_equals_mha_cached_per_sequence_gqa_rope_%s_threads_%d", tag, threads);
        check(ok, name, "%s", why);
        for (int r = 0; r < CB; r++) free(rmem[r]);
        free(mem);
    }

    /* masks and dropout: against the pool's step over the same sequences */
    for (int threads = 1; threads <= 3; threads += 2) {
        attn_context c = attn_context_default();
        c.num_threads = threads;
        attn_rope_options ro = attn_rope_options_default();
        attn_sdpa_options so = attn_sdpa_options_default();
        so.dropout_p = 0.25, so.dropout_seed = 77;
        attn_mha_options mo = attn_mha_options_default();
        mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT, mo.rope = &ro, mo.attention = &so, mo.context = &c;
        void *mem;
        size_t bytes;
        attn_kv_cache *cache = batch_cache(&mem, &bytes, dt, LHK);
        model m;
        model_init(&m, dt, 16, 12, 4, LHK, LD, LD, 0);
        int64_t ids[2], rows[2] = {3, 1}, lengths[CB] = {0, 0, 0, 0};
        attn_kv_pages_create(m.pool, &ids[0], NULL), attn_kv_pages_create(m.pool, &ids[1], NULL);
        static const int64_t CUM[2][3] = {{0, 9, 30}, {0, 2, 7}};
        int ok = 1;
        attn_error err;
        for (int step = 0; step < 2 && ok; step++) {
            int64_t T = CUM[step][2], S0 = step ? 9 : 0, S1 = step ? 21 : 0;
            int64_t L0 = CUM[step][1], L1 = T - L0;
            float x[30 * LE], out[30 * LE], want[30 * LE];
            for (int64_t i = 0; i < T * LE; i++) x[i] = rnd_value();
            /* sequence 0 a bool (L, S) mask, sequence 1 an additive (Hq, L, S) one */
            bool bm[9 * 11];
            float fm[LHQ * 21 * 26];
            for (int64_t i = 0; i < L0 * (S0 + L0); i++) bm[i] = (rnd() & 3) != 0;
            for (int64_t i = 0; i < LHQ * L1 * (S1 + L1); i++) fm[i] = (rnd() & 7) == 0 ? -1.0f / 0.0f : rnd_value();
            int64_t bms[2] = {L0, S0 + L0}, fms[3] = {LHQ, L1, S1 + L1}, xs[2] = {T, LE};
            attn_tensor tbm, tfm, tx, to, tw;
            attn_tensor_init(&tbm, bm, ATTN_BOOL, 2, bms, NULL, NULL), attn_tensor_init(&tfm, fm, ATTN_F32, 3, fms, NULL, NULL);
            attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
            attn_tensor_init(&tw, want, ATTN_F32, 2, xs, NULL, NULL);
            const attn_tensor *masks[2] = {&tbm, &tfm};
            if (attn_mha_cached_batch(&to, &tx, CUM[step], rows, 2, cache, lengths, masks, &l.p, &mo, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached_batch: %s", step, err.message);
            else if (attn_mha_paged(&tw, &tx, CUM[step], ids, 2, m.pool, masks, &l.p, &mo, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_paged: %s", step, err.message);
            else if (memcmp(out, want, (size_t)(T * LE) * 4))
                ok = 0, snprintf(why, sizeof why, "step %d: the cache's rows differ from the pool's", step);
        }
        snprintf(name, sizeof name, "mha_cached_batch_masks_dropout_equal_mha_paged_%s_threads_%d", tag, threads);
        check(ok, name, "%s", why);
        model_free(&m);
        free(mem);
    }
}

/* The layer's f64 path, the exact oracle's: a layer of f64 parameters
 * (layer_init's values widened) through three steps of
 * attn_mha_cached_batch over rows of an f64 cache, with GQA and RoPE, on 1,
 * 2 and 3 threads: each sequence's rows bitwise attn_mha_cached's on it
 * alone in an f64 cache of one row, and attn_mha_paged over an f64 pool
 * (pages of 16) holding the same sequences bitwise the cache's step; every
 * attention call's ATTN_VERBOSE line names the exact kernel. An f64 cache
 * refuses f32 x, and an f32 cache f64 x. */
typedef struct layer64 {
    double w[LIN * LE], b[LIN], ow[LE * LE], ob[LE];
    attn_tensor tw[3], tb[3], tow, tob;
    attn_mha_params p;
} layer64;

static void layer64_of(layer64 *d, const layer *l) {
    for (int i = 0; i < LIN * LE; i++) d->w[i] = l->w[i];
    for (int i = 0; i < LIN; i++) d->b[i] = l->b[i];
    for (int i = 0; i < LE * LE; i++) d->ow[i] = l->ow[i];
    for (int i = 0; i < LE; i++) d->ob[i] = l->ob[i];
    static const int64_t ROW0[3] = {0, LE, LE + LKV}, ROWS[3] = {LE, LKV, LKV};
    for (int t = 0; t < 3; t++) {
        int64_t ws[2] = {ROWS[t], LE}, bs[1] = {ROWS[t]};
        attn_tensor_init(&d->tw[t], d->w + ROW0[t] * LE, ATTN_F64, 2, ws, NULL, NULL);
        attn_tensor_init(&d->tb[t], d->b + ROW0[t], ATTN_F64, 1, bs, NULL, NULL);
    }
    int64_t os[2] = {LE, LE}, obs[1] = {LE};
    attn_tensor_init(&d->tow, d->ow, ATTN_F64, 2, os, NULL, NULL), attn_tensor_init(&d->tob, d->ob, ATTN_F64, 1, obs, NULL, NULL);
    d->p = l->p;
    d->p.q_proj_weight = &d->tw[0], d->p.k_proj_weight = &d->tw[1], d->p.v_proj_weight = &d->tw[2];
    d->p.q_proj_bias = &d->tb[0], d->p.k_proj_bias = &d->tb[1], d->p.v_proj_bias = &d->tb[2];
    d->p.out_proj_weight = &d->tow, d->p.out_proj_bias = &d->tob;
}

static void test_mha_batch_f64(void) {
    layer l;
    layer_init(&l, 0);
    static layer64 l64;
    layer64_of(&l64, &l);
    char name[128], why[768] = "";
    static const int64_t CU[3][4] = {{0, 7, 26}, {0, 1, 4, 9}, {0, 1, 2}};
    static const int64_t ROWS[3][3] = {{2, 0}, {0, 2, 3}, {3, 2}};
    static const int64_t NSEQ[3] = {2, 3, 2};
    for (int threads = 1; threads <= 3; threads++) {
        attn_context c = attn_context_default();
        c.num_threads = threads;
        attn_rope_options ro = attn_rope_options_default();
        ro.position_offset = 5;
        attn_sdpa_options so = attn_sdpa_options_default();
        attn_mha_options mo = attn_mha_options_default();
        mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT, mo.rope = &ro, mo.attention = &so, mo.context = &c;
        void *mem, *rmem[CB], *pmem;
        size_t bytes;
        attn_kv_cache *cache = batch_cache(&mem, &bytes, ATTN_F64, LHK), *ref[CB];
        for (int r = 0; r < CB; r++) ref[r] = layer_cache(&rmem[r], ATTN_F64);
        attn_kv_pages_desc pd = attn_kv_pages_desc_default();
        pd.heads = LHK, pd.key_dim = pd.value_dim = LD, pd.dtype = ATTN_F64, pd.page_size = 16, pd.num_pages = 24;
        pd.max_sequences = CB;
        size_t pbytes = 0;
        attn_kv_pages *pool = NULL;
        attn_kv_pages_bytes(&pbytes, &pd, NULL);
        pmem = malloc(pbytes);
        attn_error err;
        int ok = attn_kv_pages_init(&pool, pmem, pbytes, &pd, &err) == ATTN_OK;
        if (!ok) snprintf(why, sizeof why, "an f64 pool: %s", err.message);
        int64_t ids[CB];
        for (int r = 0; r < CB && ok; r++) attn_kv_pages_create(pool, &ids[r], NULL); /* row r is sequence ids[r] */
        int64_t lengths[CB] = {0, 0, 0, 0};
        for (int step = 0; step < 3 && ok; step++) {
            int64_t T = CU[step][NSEQ[step]], seqs[3];
            double x[26 * LE], out[26 * LE], paged[26 * LE], want[26 * LE];
            for (int64_t i = 0; i < T * LE; i++) x[i] = rnd_value();
            for (int64_t i = 0; i < NSEQ[step]; i++) seqs[i] = ids[ROWS[step][i]];
            int64_t xs[2] = {T, LE};
            attn_tensor tx, to, tp;
            attn_tensor_init(&tx, x, ATTN_F64, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F64, 2, xs, NULL, NULL);
            attn_tensor_init(&tp, paged, ATTN_F64, 2, xs, NULL, NULL);
            char kernel[32] = "";
            verbose_begin();
            attn_status st = attn_mha_cached_batch(&to, &tx, CU[step], ROWS[step], NSEQ[step], cache, lengths, NULL, &l64.p, &mo, &err);
            verbose_end(kernel, sizeof kernel, NULL, 0);
            if (st || strcmp(kernel, "exact")) {
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached_batch: %s (kernel %s)", step, st ? err.message : "", kernel);
                break;
            }
            if (attn_mha_paged(&tp, &tx, CU[step], seqs, NSEQ[step], pool, NULL, &l64.p, &mo, &err)) {
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_paged on an f64 pool: %s", step, err.message);
                break;
            }
            if (memcmp(out, paged, (size_t)(T * LE) * sizeof(double)))
                ok = 0, snprintf(why, sizeof why, "step %d: the f64 pool's step differs from the cache's", step);
            for (int64_t i = 0; i < NSEQ[step] && ok; i++) {
                int64_t L = CU[step][i + 1] - CU[step][i], ls[2] = {L, LE}, row = ROWS[step][i];
                attn_tensor xi, oi;
                attn_tensor_init(&xi, x + CU[step][i] * LE, ATTN_F64, 2, ls, NULL, NULL);
                attn_tensor_init(&oi, want, ATTN_F64, 2, ls, NULL, NULL);
                verbose_begin();
                st = attn_mha_cached(&oi, &xi, ref[row], &l64.p, &mo, &err);
                verbose_end(kernel, sizeof kernel, NULL, 0);
                if (st || strcmp(kernel, "exact"))
                    ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached: %s (kernel %s)", step, st ? err.message : "", kernel);
                else if (memcmp(want, out + CU[step][i] * LE, (size_t)(L * LE) * sizeof(double)))
                    ok = 0, snprintf(why, sizeof why, "step %d: sequence %lld (row %lld) differs from attn_mha_cached",
                                     step, (long long)i, (long long)row);
                else if (lengths[row] != attn_kv_cache_length(ref[row]))
                    ok = 0, snprintf(why, sizeof why, "step %d: lengths[%lld] is %lld, not %lld", step, (long long)row,
                                     (long long)lengths[row], (long long)attn_kv_cache_length(ref[row]));
            }
        }
        snprintf(name, sizeof name, "mha_cached_batch_f64_equals_mha_cached_and_f64_pool_threads_%d", threads);
        check(ok, name, "%s", why);
        for (int r = 0; r < CB; r++) free(rmem[r]);
        free(mem), free(pmem);
    }
    /* x and the store of other widths */
    void *m64, *m32;
    size_t b64, b32;
    attn_kv_cache *c64 = batch_cache(&m64, &b64, ATTN_F64, LHK), *c32 = batch_cache(&m32, &b32, ATTN_F32, LHK);
    int64_t zero[CB] = {0, 0, 0, 0}, rows2[2] = {1, 3}, cu2[3] = {0, 2, 3}, xs[2] = {3, LE};
    float x32[3 * LE] = {0}, o32[3 * LE];
    double x64[3 * LE] = {0}, o64[3 * LE];
    attn_tensor tx32, to32, tx64, to64;
    attn_tensor_init(&tx32, x32, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to32, o32, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&tx64, x64, ATTN_F64, 2, xs, NULL, NULL), attn_tensor_init(&to64, o64, ATTN_F64, 2, xs, NULL, NULL);
    attn_error err;
    attn_status st = attn_mha_cached_batch(&to32, &tx32, cu2, rows2, 2, c64, zero, NULL, &l.p, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "an f64 cache takes f64 x") && zero[1] == 0,
          "mha_cached_batch_f64_cache_refuses_f32_x", "status %d: %s", st, err.message);
    st = attn_mha_cached_batch(&to64, &tx64, cu2, rows2, 2, c32, zero, NULL, &l64.p, NULL, &err);
    check(st == ATTN_ERR_DTYPE && strstr(err.message, "the cache holds f32") && zero[1] == 0,
          "mha_cached_batch_f32_cache_refuses_f64_x", "status %d: %s", st, err.message);
    free(m64), free(m32);
}

/* Every refusal of attn_mha_cached_batch before anything is written: the
 * cache's memory and the lengths byte for byte as they were. */
/* Caches whose keys are quantized per channel (q4c) through
 * attn_mha_cached_batch: sequences in rows 2 and 0 of a batch of CB rows
 * (19 and 7 positions, then one each) give each sequence bitwise what
 * attn_mha_cached gives it alone in a cache of one row. The batch once
 * read sequence i's residual keys at row i, not at its row rows[i]. With
 * values e4m3 and per-head v_scale (attn.h allows the pair: values' scales
 * only), the values are stored and read as a plain e4m3 cache with the
 * same v_scale does: gather gives code · s bitwise the plain cache's. Both
 * the gather and the batch's per-row writer once ignored the scale (gather
 * gave the codes; the writer stored x, not x / s). */
static void test_grouped_keys_batch(attn_dtype values, const float *vs, const char *tag) {
    enum { N = 40 };
    char name[128], why[768] = "";
    attn_error err;
    attn_kv_cache *one[2] = {NULL, NULL}, *plain = NULL, *batch = NULL;
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.heads = LHK, cd.capacity = 64, cd.key_dim = cd.value_dim = LD, cd.dtype = values, cd.v_scale = vs;
    size_t pb, gb, bb;
    attn_kv_cache_bytes(&pb, &cd, NULL);
    void *pmem = calloc(1, pb), *gmem[2];
    attn_kv_cache_init(&plain, pmem, pb, &cd, NULL);
    cd.key_dtype = ATTN_Q4C;
    attn_status st = attn_kv_cache_bytes(&gb, &cd, &err);
    for (int i = 0; i < 2; i++) {
        gmem[i] = calloc(1, gb);
        if (!st) st = attn_kv_cache_init(&one[i], gmem[i], gb, &cd, &err);
    }
    cd.batch = CB;
    attn_kv_cache_bytes(&bb, &cd, NULL);
    void *bmem = calloc(1, bb);
    if (!st) st = attn_kv_cache_init(&batch, bmem, bb, &cd, &err);
    /* gather: the values as the plain cache holds them */
    float k[LHK * N * LD], v[LHK * N * LD], gk[LHK * N * LD], gv[LHK * N * LD], pk[LHK * N * LD], pv[LHK * N * LD];
    for (int i = 0; i < LHK * N * LD; i++) k[i] = rnd_value(), v[i] = rnd_value();
    int64_t s[3] = {LHK, N, LD};
    attn_tensor tk, tv, tgk, tgv, tpk, tpv;
    attn_tensor_init(&tk, k, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&tgk, gk, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tgv, gv, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&tpk, pk, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tpv, pv, ATTN_F32, 3, s, NULL, NULL);
    if (!st && !(st = attn_kv_cache_append(one[0], &tk, &tv, &err)) && !(st = attn_kv_cache_append(plain, &tk, &tv, &err)) &&
        !(st = attn_kv_cache_gather(&tgk, &tgv, one[0], &err)))
        st = attn_kv_cache_gather(&tpk, &tpv, plain, &err);
    snprintf(name, sizeof name, "grouped_keys_%s_values_gather_as_plain_cache", tag);
    check(!st && !memcmp(gv, pv, sizeof gv), name, "%s",
          st ? err.message : "the values differ from a plain cache's of the same dtype and scales");
    attn_kv_cache_truncate(one[0], 0, NULL);
    /* the layer: each sequence alone (append) against its row of the batch (the row writer) */
    layer l;
    layer_init(&l, 0);
    attn_mha_options mo = attn_mha_options_default();
    mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    static const int64_t CU[2][3] = {{0, 19, 26}, {0, 1, 2}}, ROWS[2] = {2, 0};
    int64_t lengths[CB] = {0, 0, 0, 0};
    int ok = !st;
    for (int step = 0; step < 2 && ok; step++) {
        int64_t T = CU[step][2], xs[2] = {T, LE};
        float x[26 * LE], out[26 * LE], want[26 * LE];
        for (int64_t i = 0; i < T * LE; i++) x[i] = rnd_value();
        attn_tensor tx, to;
        attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
        if (attn_mha_cached_batch(&to, &tx, CU[step], ROWS, 2, batch, lengths, NULL, &l.p, &mo, &err)) {
            ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached_batch: %s", step, err.message);
            break;
        }
        for (int i = 0; i < 2 && ok; i++) {
            int64_t L = CU[step][i + 1] - CU[step][i], ls[2] = {L, LE};
            attn_tensor xi, wi;
            attn_tensor_init(&xi, x + CU[step][i] * LE, ATTN_F32, 2, ls, NULL, NULL);
            attn_tensor_init(&wi, want, ATTN_F32, 2, ls, NULL, NULL);
            if (attn_mha_cached(&wi, &xi, one[i], &l.p, &mo, &err))
                ok = 0, snprintf(why, sizeof why, "step %d: attn_mha_cached: %s", step, err.message);
            else if (memcmp(want, out + CU[step][i] * LE, (size_t)(L * LE) * 4))
                ok = 0, snprintf(why, sizeof why, "step %d: sequence %d (row %lld) differs from attn_mha_cached", step, i,
                                 (long long)ROWS[i]);
        }
    }
    snprintf(name, sizeof name, "grouped_keys_%s_values_mha_cached_batch_equals_mha_cached", tag);
    check(ok, name, "%s", st ? err.message : why);
    free(pmem), free(gmem[0]), free(gmem[1]), free(bmem);
}

static void test_mha_cached_batch_errors(void) {
    layer l;
    layer_init(&l, 0);
    void *mem;
    size_t bytes;
    attn_kv_cache *cache = batch_cache(&mem, &bytes, ATTN_F32, LHK);
    int64_t lengths[CB] = {0, 0, 0, 0}, rows2[2] = {1, 3}, cu2[3] = {0, 5, 9};
    float x[70 * LE], out[70 * LE];
    for (int i = 0; i < 70 * LE; i++) x[i] = rnd_value();
    int64_t xs[2] = {9, LE};
    attn_tensor tx, to;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
    attn_error err;
    int ok = attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err) == ATTN_OK;
    check(ok && lengths[1] == 5 && lengths[3] == 4, "mha_cached_batch_errors_setup", "%s", ok ? "lengths" : err.message);
    void *snap = malloc(bytes);
    memcpy(snap, mem, bytes);
    int64_t saved[CB];
    memcpy(saved, lengths, sizeof saved);
    char name[128];
#define REFUSED(label, want, call)                                                                                   \
    do {                                                                                                             \
        err.message[0] = 0;                                                                                          \
        int64_t before_[CB];                                                                                         \
        memcpy(before_, lengths, sizeof before_);                                                                    \
        attn_status got_ = (call);                                                                                   \
        int same_ = memcmp(snap, mem, bytes) == 0 && memcmp(before_, lengths, sizeof before_) == 0;                  \
        snprintf(name, sizeof name, "mha_cached_batch_refuses_%s", label);                                          \
        check(got_ == (want) && same_ && err.message[0], name, "status %d (want %d), cache %s: %s", got_, (want),    \
              same_ ? "unchanged" : "CHANGED", err.message);                                                        \
        memcpy(lengths, saved, sizeof saved);                                                                        \
    } while (0)
    int64_t outside[2] = {1, CB}, twice[2] = {3, 3}, neg[2] = {-1, 0};
    REFUSED("a_row_outside", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu2, outside, 2, cache, lengths, NULL, &l.p, NULL, &err));
    REFUSED("a_negative_row", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu2, neg, 2, cache, lengths, NULL, &l.p, NULL, &err));
    REFUSED("a_row_twice", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu2, twice, 2, cache, lengths, NULL, &l.p, NULL, &err));
    lengths[3] = -1;
    REFUSED("a_negative_length", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    lengths[3] = CCAP + 1;
    REFUSED("a_length_past_capacity", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    lengths[3] = CCAP - 3; /* 4 new positions do not fit; row 1's 5 would */
    REFUSED("a_sequence_past_its_capacity", ATTN_ERR_FULL, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    int64_t cu_bad[3] = {0, 6, 5};
    REFUSED("decreasing_offsets", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu_bad, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    int64_t cu_short[3] = {0, 5, 8};
    REFUSED("offsets_not_ending_at_x", ATTN_ERR_ARGUMENT, attn_mha_cached_batch(&to, &tx, cu_short, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    REFUSED("null_rows", ATTN_ERR_NULL, attn_mha_cached_batch(&to, &tx, cu2, NULL, 2, cache, lengths, NULL, &l.p, NULL, &err));
    REFUSED("null_lengths", ATTN_ERR_NULL, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, NULL, NULL, &l.p, NULL, &err));
    REFUSED("null_cache", ATTN_ERR_NULL, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, NULL, lengths, NULL, &l.p, NULL, &err));
    attn_mha_options top = attn_mha_options_default();
    top.causal = ATTN_CAUSAL_TOP_LEFT;
    REFUSED("top_left", ATTN_ERR_OPTION, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, &top, &err));
    attn_tensor tx64 = tx;
    tx64.dtype = ATTN_F64;
    REFUSED("f64_x", ATTN_ERR_DTYPE, attn_mha_cached_batch(&to, &tx64, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    attn_tensor k4, v4, in_cache;
    attn_kv_cache_view(&k4, &v4, cache, 4, NULL);
    attn_tensor_init(&in_cache, k4.data, ATTN_F32, 2, xs, NULL, NULL);
    REFUSED("out_in_the_cache", ATTN_ERR_STRIDE, attn_mha_cached_batch(&in_cache, &tx, cu2, rows2, 2, cache, lengths, NULL, &l.p, NULL, &err));
    REFUSED("lengths_in_x", ATTN_ERR_STRIDE, attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, (int64_t *)x, NULL, &l.p, NULL, &err));
    /* the attention refuses a mask after the keys are written: the lengths stay, so the cache holds what it held */
    float bad[3];
    int64_t bs[1] = {3};
    attn_tensor tbad;
    attn_tensor_init(&tbad, bad, ATTN_F32, 1, bs, NULL, NULL);
    const attn_tensor *masks[2] = {NULL, &tbad};
    err.message[0] = 0;
    attn_status st = attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, cache, lengths, masks, &l.p, NULL, &err);
    check(st == ATTN_ERR_MASK && memcmp(saved, lengths, sizeof saved) == 0, "mha_cached_batch_bad_mask_keeps_lengths",
          "status %d, lengths %lld %lld: %s", st, (long long)lengths[1], (long long)lengths[3], err.message);
    /* caches the layer cannot use */
    void *m64, *m3;
    size_t b64, b3;
    attn_kv_cache *c64 = batch_cache(&m64, &b64, ATTN_F64, LHK), *c3 = batch_cache(&m3, &b3, ATTN_F32, 3);
    int64_t zero[CB] = {0, 0, 0, 0};
    st = attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, c64, zero, NULL, &l.p, NULL, &err);
    check(st == ATTN_ERR_DTYPE, "mha_cached_batch_refuses_an_f64_cache_with_f32_x", "status %d: %s", st, err.message);
    st = attn_mha_cached_batch(&to, &tx, cu2, rows2, 2, c3, zero, NULL, &l.p, NULL, &err);
    check(st == ATTN_ERR_SHAPE, "mha_cached_batch_refuses_a_cache_of_other_heads", "status %d: %s", st, err.message);
#undef REFUSED
    free(m64), free(m3), free(snap), free(mem);
}

/* ---- pages the caller manages ---- */

/* cu_seqlens_q lying inside out: refused, offsets and out untouched, as
 * attn_sdpa_varlen refuses it (where the rows of a sequence without keys
 * are written by offsets read after the kernels have run): the offsets are
 * an input like q. */
static void test_out_over_offsets(void) {
    float kp[2 * 16 * 2], vp[2 * 16 * 2], q[8];
    for (int i = 0; i < 64; i++) kp[i] = (float)(i % 5) / 4, vp[i] = (float)(i % 3) + 1;
    for (int i = 0; i < 8; i++) q[i] = (float)i / 8;
    int32_t table[2] = {0, 1};
    int64_t lengths[2] = {3, 2}, sq[3] = {4, 1, 2};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = ATTN_F32, w.key_dim = w.value_dim = 2, w.page_size = 16, w.num_pages = 2;
    w.k_pages = kp, w.v_pages = vp, w.num_sequences = 2, w.lengths = lengths, w.page_table = table, w.table_stride = 1;
    double buf[4] = {0, 0, 0, 0}; /* out (4, 1, 2) f32 over it: rows 0 and 1 (sequence 0's) are cu[0] and cu[1] */
    int64_t *cu = (int64_t *)(void *)buf;
    cu[0] = 0, cu[1] = 2, cu[2] = 4;
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, buf, ATTN_F32, 3, sq, NULL, NULL);
    attn_error err;
    attn_status st = attn_kv_paged_attend(&to, NULL, &tq, cu, &w, NULL, NULL, &err);
    int kept = cu[0] == 0 && cu[1] == 2 && cu[2] == 4 && buf[3] == 0;
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "cu_seqlens_q") && kept, "paged_error_out_over_offsets",
          "status %d: %s%s", (int)st, st ? err.message : "", kept ? "" : " (written)");
}

/* A caller's view of one page whose table names that page again and again:
 * a sequence of 6 positions over one page of 2. The kernels read the page
 * three times; the page's memory is 2 rows, so an out placed right after
 * it overlaps nothing and must be taken (a check that measured the one
 * page as the sequence's 6 rows refused it as an overlap). */
static void test_view_repeats_its_one_page(void) {
    double mem[16] = {0}, *kp = mem, *vp = mem + 2, *out = mem + 4, *lse = mem + 5, *q = mem + 8;
    kp[0] = 0.5, kp[1] = -1, vp[0] = 1, vp[1] = 3, q[0] = 1;
    int64_t len = 6, qs[3] = {1, 1, 1}, ls[2] = {1, 1}, cu[2] = {0, 1};
    int32_t table[3] = {0, 0, 0};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = ATTN_F64, w.key_dim = w.value_dim = 1, w.page_size = 2, w.num_pages = 1;
    w.k_pages = kp, w.v_pages = vp, w.num_sequences = 1, w.lengths = &len, w.page_table = table, w.table_stride = 3;
    attn_tensor tq, to, tl;
    attn_tensor_init(&tq, q, ATTN_F64, 3, qs, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 3, qs, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F64, 2, ls, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_NONE;
    attn_error err = {0};
    attn_status st = attn_kv_paged_attend(&to, &tl, &tq, cu, &w, NULL, &o, &err);
    /* three keys of score 0.5 (value 1), three of -1 (value 3) */
    double a = exp(0.5), b = exp(-1.0), want = (a + 3 * b) / (a + b), want_lse = log(3 * (a + b));
    check(st == ATTN_OK && fabs(*out - want) <= 1e-12 * want && fabs(*lse - want_lse) <= 1e-12 * want_lse,
          "caller_view_one_page_named_again_out_past_the_page_taken", "status %d (%s), out %.17g (want %.17g), lse %.17g",
          st, st ? err.message : "", *out, want, *lse);
}

/* A caller's e4m3 view with a (batch, Hk) k_descale in the options: an
 * out lying over another sequence's row of the scales (which that
 * sequence reads) is refused before anything is written. */
static void test_out_over_descale(void) {
    unsigned char kp[2 * 16 * 4], vp[2 * 16 * 4];
    for (int i = 0; i < 2 * 16 * 4; i++) kp[i] = (unsigned char)(0x30 + i % 7), vp[i] = (unsigned char)(0x31 + i % 5);
    int32_t table[2] = {0, 1};
    int64_t lengths[2] = {3, 3}, sq[3] = {2, 1, 4}, sd[2] = {2, 1}, sds[2] = {1, 1}, cu[3] = {0, 1, 2};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = ATTN_E4M3, w.key_dim = w.value_dim = 4, w.page_size = 16, w.num_pages = 2;
    w.k_pages = kp, w.v_pages = vp, w.num_sequences = 2, w.lengths = lengths, w.page_table = table, w.table_stride = 1;
    float q[8] = {.1f, .2f, .3f, .4f, .5f, .6f, .7f, .8f}, out[9] = {0, 0, 0, 0, 1, 1, 1, 1, 1};
    attn_tensor tq, to, td; /* out (2, 1, 4): row 1 is out[4 .. 7]; the scales' rows are out[7] and out[8] */
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&td, out + 7, ATTN_F32, 2, sd, sds, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.k_descale = &td;
    attn_error err;
    attn_status st = attn_kv_paged_attend(&to, NULL, &tq, cu, &w, NULL, &o, &err);
    check(st == ATTN_ERR_STRIDE && out[0] == 0 && out[7] == 1, "paged_error_out_over_another_sequences_descale",
          "status %d: %s", (int)st, st ? err.message : "");
    /* A plan of the same batch run on another out: the caller's scales
     * (the view has none) as the unplanned call reads them, bitwise; then a
     * run whose out lies over them is refused. */
    float other[8], want[8];
    unsigned char plan_mem[8192];
    size_t plan_bytes = 0, ws_bytes = 0;
    attn_sdpa_plan *plan = NULL;
    attn_tensor to2 = to, tw = to;
    to2.data = other, tw.data = want;
    st = attn_kv_paged_attend(&tw, NULL, &tq, cu, &w, NULL, &o, &err);
    if (!st) st = attn_sdpa_plan_bytes(&plan_bytes, 2, &err);
    if (!st && plan_bytes > sizeof plan_mem) st = ATTN_ERR_WORKSPACE;
    if (!st) st = attn_kv_paged_plan_init(&plan, plan_mem, plan_bytes, &ws_bytes, &to2, NULL, &tq, cu, &w, NULL, &o, &err);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    if (!st) st = attn_kv_paged_run(plan, &to2, NULL, &tq, kp, vp, ws, ws_bytes, &err);
    check(st == ATTN_OK && !memcmp(other, want, sizeof want), "paged_plan_run_caller_descale_bitwise", "status %d: %s",
          (int)st, st ? err.message : "");
    if (!st) st = attn_kv_paged_run(plan, &to, NULL, &tq, kp, vp, ws, ws_bytes, &err);
    check(st == ATTN_ERR_STRIDE && out[0] == 0 && out[7] == 1, "paged_plan_run_error_out_over_descale",
          "status %d: %s", (int)st, st ? err.message : "");
    free(ws);
}

static void test_caller_pages(void) {
    /* 5 pages of P = 4 (a view takes any page size) in a shuffled order, 2
     * sequences of 7 and 9 positions, as a block table and as indptr. */
    enum { P = 4, PAGES = 5, H = 2, E = 3, EV = 2 };
    float kp[PAGES][H][P][E], vp[PAGES][H][P][EV];
    for (int i = 0; i < PAGES * H * P * E; i++) (&kp[0][0][0][0])[i] = rnd_value();
    for (int i = 0; i < PAGES * H * P * EV; i++) (&vp[0][0][0][0])[i] = rnd_value();
    int32_t block[2][3] = {{3, 0, -7}, {4, 1, 2}}, indices[5] = {3, 0, 4, 1, 2};
    int64_t lengths[2] = {7, 9}, indptr[3] = {0, 2, 5};
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.heads = H, w.key_dim = E, w.value_dim = EV, w.page_size = P, w.num_pages = PAGES;
    w.k_pages = kp, w.v_pages = vp, w.num_sequences = 2, w.lengths = lengths;
    w.page_table = &block[0][0], w.table_stride = 3;
    attn_kv_paged_view x = w;
    x.page_table = indices, x.table_offsets = indptr;
    int ok = 1;
    attn_error err;
    for (int form = 0; form < 2 && ok; form++)
        for (int s = 0; s < 2 && ok; s++) {
            float k[H][9][E], v[H][9][EV];
            int64_t ks[3] = {H, lengths[s], E}, vs[3] = {H, lengths[s], EV}, kst[3] = {9 * E, E, 1}, vst[3] = {9 * EV, EV, 1};
            attn_tensor tk, tv;
            attn_tensor_init(&tk, k, ATTN_F32, 3, ks, kst, NULL);
            attn_tensor_init(&tv, v, ATTN_F32, 3, vs, vst, NULL);
            if (attn_kv_paged_gather(&tk, &tv, form ? &x : &w, s, &err)) {
                ok = 0;
                break;
            }
            const int32_t *t = form ? indices + indptr[s] : block[s];
            for (int h = 0; h < H; h++)
                for (int j = 0; j < lengths[s]; j++) {
                    ok &= memcmp(k[h][j], kp[t[j / P]][h][j % P], sizeof k[h][j]) == 0;
                    ok &= memcmp(v[h][j], vp[t[j / P]][h][j % P], sizeof v[h][j]) == 0;
                }
        }
    check(ok, "caller_pages_gather_block_table_and_indptr", "rows differ from the pages the tables name, or: %s",
          err.message);

    /* k gathered into the view's own lengths: refused, nothing written. */
    {
        int64_t ks[3] = {H, 0, E}, vs[3] = {H, 0, EV};
        ks[1] = vs[1] = lengths[0];
        float vk[H * 9 * EV];
        attn_tensor tk, tv;
        attn_tensor_init(&tk, lengths, ATTN_F32, 3, ks, NULL, NULL);
        attn_tensor_init(&tv, vk, ATTN_F32, 3, vs, NULL, NULL);
        int64_t before[2] = {lengths[0], lengths[1]};
        attn_status gs = attn_kv_paged_gather(&tk, &tv, &w, 0, &err);
        check(gs == ATTN_ERR_STRIDE && lengths[0] == before[0] && lengths[1] == before[1],
              "caller_pages_gather_onto_the_lengths_refused", "status %d", gs);
    }

    /* Attention over the caller's pages against a contiguous cache. */
    float q[4][4][E], out[4][4][EV], o1[4][4][EV];
    for (int i = 0; i < 4 * 4 * E; i++) (&q[0][0][0])[i] = rnd_value();
    int64_t cuq[3] = {0, 1, 4}, qs[3] = {4, 4, E}, os[3] = {4, 4, EV};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, os, NULL, NULL);
    attn_status st = attn_kv_paged_attend(&to, NULL, &tq, cuq, &x, NULL, NULL, &err);
    ok = st == ATTN_OK;
    for (int s = 0; s < 2 && ok; s++) {
        float k[H][9][E], v[H][9][EV];
        int64_t ks[3] = {H, lengths[s], E}, vs[3] = {H, lengths[s], EV}, kst[3] = {9 * E, E, 1}, vst[3] = {9 * EV, EV, 1};
        attn_tensor tk, tv, qi, oi;
        attn_tensor_init(&tk, k, ATTN_F32, 3, ks, kst, NULL);
        attn_tensor_init(&tv, v, ATTN_F32, 3, vs, vst, NULL);
        attn_kv_paged_gather(&tk, &tv, &w, s, NULL);
        int64_t L = cuq[s + 1] - cuq[s], qis[3] = {4, L, E}, qist[3] = {E, 4 * E, 1}, ois[3] = {4, L, EV},
                oist[3] = {EV, 4 * EV, 1};
        attn_tensor_init(&qi, q[cuq[s]], ATTN_F32, 3, qis, qist, NULL);
        attn_tensor_init(&oi, o1, ATTN_F32, 3, ois, oist, NULL);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if ((st = attn_sdpa(&oi, NULL, NULL, &qi, &tk, &tv, &o, &err))) ok = 0;
        for (int64_t l = 0; l < L && ok; l++) ok = memcmp(o1[l], out[cuq[s] + l], sizeof out[0]) == 0;
    }
    check(ok, "caller_pages_attend_equals_sdpa_per_sequence", "%s", st ? err.message : "outputs differ");

    /* A table that points outside the pool, is too short, or runs backwards. */
    struct {
        const char *name;
        int32_t entry;
        int64_t length, stride, offset1;
    } BAD[] = {{"page_minus_one", -1, 7, 3, 2}, {"page_past_the_pool", PAGES, 7, 3, 2},
               {"page_int32_max", INT32_MAX, 7, 3, 2}, {"table_too_short", 3, 9, 2, 2},
               {"offsets_decrease", 3, 7, 3, 6}, {"negative_length", 3, -1, 3, 2},
               {"huge_length", 3, INT64_MAX, 3, 2}};
    for (size_t c = 0; c < sizeof BAD / sizeof *BAD; c++)
        for (int form = strcmp(BAD[c].name, "offsets_decrease") == 0; form < 2; form++) {
            int32_t b2[2][3] = {{BAD[c].entry, 0, 0}, {4, 1, 2}}, ind[6] = {BAD[c].entry, 0, 4, 1, 2, 0};
            int64_t len2[2] = {BAD[c].length, 9}, ptr[3] = {0, BAD[c].offset1, 5};
            attn_kv_paged_view y = w;
            y.lengths = len2;
            if (form) y.page_table = ind, y.table_offsets = ptr;
            else y.page_table = &b2[0][0], y.table_stride = BAD[c].stride;
            char name[128];
            snprintf(name, sizeof name, "caller_pages_refused_%s_%s", BAD[c].name, form ? "indptr" : "block_table");
            st = attn_kv_paged_check(&y, &err);
            attn_status st2 = attn_kv_paged_attend(&to, NULL, &tq, cuq, &y, NULL, NULL, NULL);
            check(st == ATTN_ERR_ARGUMENT && st2 == ATTN_ERR_ARGUMENT, name, "status %d / %d: %s", st, st2,
                  err.message);
        }
    /* Sizes whose bytes overflow. */
    attn_kv_paged_view y = w;
    y.num_pages = INT64_MAX / 2;
    st = attn_kv_paged_check(&y, &err);
    check(st == ATTN_ERR_OVERFLOW, "caller_pages_refused_overflowing_pages", "status %d: %s", st, err.message);
    y = w, y.table_stride = INT64_MAX / 2;
    st = attn_kv_paged_check(&y, &err);
    check(st == ATTN_ERR_OVERFLOW, "caller_pages_refused_overflowing_table", "status %d: %s", st, err.message);
    y = w, y.k_pages = NULL;
    st = attn_kv_paged_check(&y, &err);
    check(st == ATTN_ERR_NULL, "caller_pages_refused_null_pages", "status %d", st);
    y = w, y.struct_size = 0;
    st = attn_kv_paged_check(&y, &err);
    check(st == ATTN_ERR_OPTION, "caller_pages_refused_struct_size_0", "status %d", st);
}

/* ---- every error leaves the pool as it was ---- */

static model err_model;
static void *err_snapshot;

/* The call's status must be `want`, with a message, and the pool's bytes unchanged. */
static void expect_untouched(attn_status got, attn_error *err, attn_status want, const char *name) {
    int same = memcmp(err_snapshot, err_model.memory, err_model.bytes) == 0;
    check(got == want && same && err->message[0], name, "status %d (want %d: %s), pool %s: %s", got, want,
          attn_strerror(want), same ? "unchanged" : "CHANGED", err->message);
    err->message[0] = 0;
}

static void test_errors(attn_dtype dt, int64_t P, const char *tag) {
    model *m = &err_model;
    model_init(m, dt, P, 4, 3, 2, 4, 3, 3 * P);
    int64_t a, b;
    attn_kv_pages_create(m->pool, &a, NULL);
    attn_kv_pages_create(m->pool, &b, NULL);
    packed p;
    make_packed(&p, m, P + 1, 1);
    int64_t two[2] = {a, b}, cu2[3] = {0, 1, P + 1};
    attn_kv_pages_append(m->pool, two, 2, &p.k, &p.v, cu2, NULL); /* a: 1 position, b: P: 2 pages used */
    int64_t child;
    attn_kv_pages_fork(m->pool, &child, a, NULL); /* the pool's 3 ids in use, a's page shared */
    err_snapshot = malloc(m->bytes);
    memcpy(err_snapshot, m->memory, m->bytes);
    attn_error err;
    err.message[0] = 0;
    char name[160];
#define EXPECT(call, want, what)                                               \
    do {                                                                       \
        snprintf(name, sizeof name, "refused_%s_%s", what, tag);                \
        expect_untouched((call), &err, (want), name);                          \
    } while (0)

    /* Full: pages, ids, and a sequence's max_length. */
    packed big;
    make_packed(&big, m, 3 * P, 0);
    int64_t cub[2] = {0, 3 * P}, cu_b2[3] = {0, P, 2 * P};
    EXPECT(attn_kv_pages_append(m->pool, &b, 1, &big.k, &big.v, cub, &err), ATTN_ERR_FULL, "append_past_max_length");
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &big.k, &big.v, cu_b2 , &err), ATTN_ERR_ARGUMENT, "append_rows_not_total");
    int64_t cu_b3[3] = {0, 2 * P, 3 * P};
    /* a: 1 + 2P positions (2 new pages and a copy of its shared page), b: P more (1 page): 4 > 2 free */
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &big.k, &big.v, cu_b3, &err), ATTN_ERR_FULL, "append_no_free_pages");
    int64_t id;
    EXPECT(attn_kv_pages_create(m->pool, &id, &err), ATTN_ERR_FULL, "create_no_free_id");
    EXPECT(attn_kv_pages_fork(m->pool, &id, a, &err), ATTN_ERR_FULL, "fork_no_free_id");
    /* The child freed: its id is a freed one, and a fork has room, so the
     * parent is what a fork below fails on. */
    int64_t freed = child;
    attn_kv_pages_free(m->pool, child, NULL);
    memcpy(err_snapshot, m->memory, m->bytes);

    /* Unknown and freed sequences, in every call that takes one. */
    const int64_t BAD_IDS[4] = {-1, 3, freed, INT64_MIN};
    static const char *const BAD_NAMES[4] = {"minus_one", "past_the_ids", "freed", "int64_min"};
    for (int i = 0; i < 4; i++) {
        char what[64];
        int64_t pair[2] = {a, BAD_IDS[i]};
        snprintf(what, sizeof what, "append_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_append(m->pool, pair, 2, &p.k, &p.v, cu2, &err), ATTN_ERR_ARGUMENT, what);
        snprintf(what, sizeof what, "truncate_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_truncate(m->pool, BAD_IDS[i], 0, &err), ATTN_ERR_ARGUMENT, what);
        snprintf(what, sizeof what, "free_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_free(m->pool, BAD_IDS[i], &err), ATTN_ERR_ARGUMENT, what);
        snprintf(what, sizeof what, "sequence_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_sequence(m->pool, BAD_IDS[i], NULL, NULL, &err), ATTN_ERR_ARGUMENT, what);
        snprintf(what, sizeof what, "fork_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_fork(m->pool, &id, BAD_IDS[i], &err), ATTN_ERR_ARGUMENT, what);
        snprintf(what, sizeof what, "gather_%s", BAD_NAMES[i]);
        EXPECT(attn_kv_pages_gather(&p.k, &p.v, m->pool, BAD_IDS[i], &err), ATTN_ERR_ARGUMENT, what);
    }
    /* The same sequence twice in one append (overlapping appends). */
    int64_t dup[2] = {b, b}, dup3[3] = {a, b, a}, cu3[4] = {0, 0, 1, P + 1};
    attn_status st = attn_kv_pages_append(m->pool, dup, 2, &p.k, &p.v, cu2, &err);
    snprintf(name, sizeof name, "refused_append_same_sequence_twice_says_so_%s", tag);
    check(strstr(err.message, "named twice") != NULL, name, "%s", err.message);
    expect_untouched(st, &err, ATTN_ERR_ARGUMENT, name + 8);
    st = attn_kv_pages_append(m->pool, dup3, 3, &p.k, &p.v, cu3, &err);
    snprintf(name, sizeof name, "refused_append_same_sequence_twice_apart_says_so_%s", tag);
    check(strstr(err.message, "named twice") != NULL, name, "%s", err.message);
    expect_untouched(st, &err, ATTN_ERR_ARGUMENT, name + 8);

    /* Offsets. */
    int64_t c_first[3] = {1, 1, P + 1}, c_down[3] = {0, P + 1, 1}, c_short[3] = {0, 1, P};
    /* Said as a ragged batch's offsets are (attn_check_cu_seqlens, one check for both). */
    char says[3][128];
    snprintf(says[0], sizeof says[0], "cu_seqlens[0] is 1; it must be 0");
    snprintf(says[1], sizeof says[1], "cu_seqlens decreases at 2: %lld then 1 (offsets must not decrease)",
             (long long)P + 1);
    snprintf(says[2], sizeof says[2], "cu_seqlens[2] is %lld but the tensor has %lld rows; it must end there",
             (long long)P, (long long)P + 1);
    const int64_t *bad_cu[3] = {c_first, c_down, c_short};
    static const char *const BAD_CU_NAMES[3] = {"offsets_not_from_0", "offsets_decreasing", "offsets_short_of_total"};
    for (int i = 0; i < 3; i++) {
        st = attn_kv_pages_append(m->pool, two, 2, &p.k, &p.v, bad_cu[i], &err);
        snprintf(name, sizeof name, "refused_%s_says_so_%s", BAD_CU_NAMES[i], tag);
        check(strcmp(err.message, says[i]) == 0, name, "said '%s', not '%s'", err.message, says[i]);
        snprintf(name, sizeof name, "refused_%s_%s", BAD_CU_NAMES[i], tag);
        expect_untouched(st, &err, ATTN_ERR_ARGUMENT, name);
    }
    EXPECT(attn_kv_pages_append(m->pool, two, -1, &p.k, &p.v, cu2, &err), ATTN_ERR_ARGUMENT, "append_negative_n");
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &p.k, &p.v, NULL, &err), ATTN_ERR_NULL, "append_null_offsets");
    EXPECT(attn_kv_pages_append(m->pool, NULL, 2, &p.k, &p.v, cu2, &err), ATTN_ERR_NULL, "append_null_seqs");
    EXPECT(attn_kv_pages_append(m->pool, two, 2, NULL, &p.v, cu2, &err), ATTN_ERR_NULL, "append_null_k");

    /* Shapes, dtypes, strides. */
    attn_tensor t = p.k;
    t.rank = 2;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_RANK, "append_rank_2");
    t = p.k, t.shape[1] = 3;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_SHAPE, "append_wrong_heads");
    t = p.v, t.shape[2] = 4;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &p.k, &t, cu2, &err), ATTN_ERR_SHAPE, "append_wrong_value_dim");
    t = p.v, t.shape[0] = P;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &p.k, &t, cu2, &err), ATTN_ERR_SHAPE, "append_rows_differ");
    t = p.k, t.dtype = ATTN_F64;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_DTYPE, "append_f64");
    t = p.k, t.dtype = ATTN_BOOL;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_DTYPE, "append_bool");
    t = p.k, t.strides[0] = INT64_MAX;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_OVERFLOW, "append_overflowing_stride");
    t = p.k, t.strides[0] = INT64_MIN;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_OVERFLOW, "append_int64_min_stride");
    /* k read from the pool's own pages */
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, m->pool, NULL);
    t = p.k, t.data = (void *)w.k_pages, t.dtype = dt;
    EXPECT(attn_kv_pages_append(m->pool, two, 2, &t, &p.v, cu2, &err), ATTN_ERR_STRIDE, "append_from_the_pages");

    /* Truncate past the end, or below 0. */
    EXPECT(attn_kv_pages_truncate(m->pool, a, 2, &err), ATTN_ERR_ARGUMENT, "truncate_past_the_end");
    EXPECT(attn_kv_pages_truncate(m->pool, a, -1, &err), ATTN_ERR_ARGUMENT, "truncate_negative");
    EXPECT(attn_kv_pages_create(NULL, &id, &err), ATTN_ERR_NULL, "create_null_pool");
    EXPECT(attn_kv_pages_create(m->pool, NULL, &err), ATTN_ERR_NULL, "create_null_id");

    /* Attention: bad sequences and offsets, nothing written. */
    float q[2][4][4], out[2][4][3];
    memset(q, 0, sizeof q), memset(out, 0x55, sizeof out);
    int64_t qs[3] = {2, 4, 4}, os[3] = {2, 4, 3}, cuq[3] = {0, 1, 2};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, os, NULL, NULL);
    float out_before[2][4][3];
    memcpy(out_before, out, sizeof out);
    int64_t pairs[3][2] = {{a, freed}, {a, -1}, {a, b}};
    int64_t cuq_bad[3] = {0, 2, 1};
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[0], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT && !memcmp(out, out_before, sizeof out), "attend_refused_freed_sequence", "status %d", st);
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[1], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT && !memcmp(out, out_before, sizeof out), "attend_refused_unknown_sequence", "status %d", st);
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq_bad, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT && !memcmp(out, out_before, sizeof out) &&
              strstr(err.message, "cu_seqlens_q decreases at 2: 2 then 1"),
          "attend_refused_decreasing_offsets", "status %d: %s", st, err.message);
    int64_t cuq_short[3] = {0, 1, 1}, cuq_late[3] = {1, 1, 2};
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq_short, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT && !memcmp(out, out_before, sizeof out) &&
              strstr(err.message, "cu_seqlens_q[2] is 1 but the tensor has 2 rows; it must end there"),
          "attend_refused_offsets_ending_short_of_q", "status %d: %s", st, err.message);
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq_late, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_ARGUMENT && !memcmp(out, out_before, sizeof out) &&
              strstr(err.message, "cu_seqlens_q[0] is 1; it must be 0"),
          "attend_refused_offsets_not_from_0", "status %d: %s", st, err.message);
    st = attn_kv_pages_attend(&to, NULL, &tq, NULL, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_NULL && !memcmp(out, out_before, sizeof out) && strstr(err.message, "cu_seqlens_q is NULL"),
          "attend_refused_null_offsets", "status %d: %s", st, err.message);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[2], 2, m->pool, NULL, &o, &err);
    check(st == ATTN_ERR_OPTION && !memcmp(out, out_before, sizeof out), "attend_refused_top_left", "status %d", st);
    o = attn_sdpa_options_default();
    attn_tensor mask = tq;
    o.mask = &mask;
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[2], 2, m->pool, NULL, &o, &err);
    check(st == ATTN_ERR_OPTION && !memcmp(out, out_before, sizeof out), "attend_refused_mask", "status %d", st);
    attn_tensor alias = to;
    alias.data = q;
    st = attn_kv_pages_attend(&alias, NULL, &tq, cuq, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "attend_refused_out_on_q", "status %d", st);
    /* out over the pool's header, which no region of its view holds (out
     * was once written over it, the pool's counters with it) */
    unsigned char header[64];
    memcpy(header, (const void *)m->pool, sizeof header);
    alias.data = (void *)m->pool;
    st = attn_kv_pages_attend(&alias, NULL, &tq, cuq, pairs[2], 2, m->pool, NULL, NULL, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "the pool's memory") &&
              !memcmp(header, (const void *)m->pool, sizeof header),
          "attend_refused_out_on_the_pool_header", "status %d: %s", st, st ? err.message : "");
    /* the second sequence's mask does not broadcast, or lies on out: the
     * first sequence's rows are not written either */
    bool mask_bytes[99] = {0};
    int64_t bad_shape[2] = {1, 99}, on_out_shape[2] = {1, 1};
    attn_tensor bad_mask, on_out;
    attn_tensor_init(&bad_mask, mask_bytes, ATTN_BOOL, 2, bad_shape, NULL, NULL);
    attn_tensor_init(&on_out, out, ATTN_BOOL, 2, on_out_shape, NULL, NULL);
    const attn_tensor *bad_masks[2] = {NULL, &bad_mask}, *masks_on_out[2] = {NULL, &on_out};
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[2], 2, m->pool, bad_masks, NULL, &err);
    check(st == ATTN_ERR_MASK && !memcmp(out, out_before, sizeof out) && strstr(err.message, "sequence 1"),
          "attend_refused_bad_mask", "status %d: %s", st, err.message);
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[2], 2, m->pool, masks_on_out, NULL, &err);
    check(st == ATTN_ERR_STRIDE && !memcmp(out, out_before, sizeof out), "attend_refused_mask_on_out", "status %d: %s",
          st, err.message);
    /* a sequence with no positions but queries: its rows 0 and lse -inf, as
     * attn_sdpa gives S = 0 (PyTorch's softmax over no key) */
    attn_kv_pages_truncate(m->pool, b, 0, NULL);
    float lse[2][4];
    int64_t ls[2] = {2, 4};
    attn_tensor tl;
    attn_tensor_init(&tl, lse, ATTN_F32, 2, ls, NULL, NULL);
    st = attn_kv_pages_attend(&to, &tl, &tq, cuq, pairs[2], 2, m->pool, NULL, NULL, &err);
    int no_keys_ok = st == ATTN_OK;
    for (int h = 0; h < 4; h++) {
        no_keys_ok &= lse[1][h] == -INFINITY;
        for (int e = 0; e < 3; e++) no_keys_ok &= out[1][h][e] == 0.0f;
    }
    check(no_keys_ok, "attend_sequence_of_no_positions_out_0", "status %d: %s", st, st ? err.message : "");
    memcpy(out, out_before, sizeof out);
    /* a workspace too small for the second sequence's call: nothing written */
    packed two_pages;
    make_packed(&two_pages, m, 2 * P, 0);
    attn_kv_pages_append(m->pool, &b, 1, &two_pages.k, &two_pages.v, (int64_t[]){0, 2 * P}, NULL);
    free(two_pages.kd), free(two_pages.vd);
    attn_context ctx = attn_context_default();
    char tiny[16];
    ctx.workspace = tiny, ctx.workspace_size = sizeof tiny;
    o = attn_sdpa_options_default();
    o.context = &ctx;
    st = attn_kv_pages_attend(&to, NULL, &tq, cuq, pairs[2], 2, m->pool, NULL, &o, &err);
    check(st == ATTN_ERR_WORKSPACE && !memcmp(out, out_before, sizeof out), "attend_refused_small_workspace",
          "status %d: %s", st, err.message);
#undef EXPECT
    free(err_snapshot), free(p.kd), free(p.vd), free(big.kd), free(big.vd);
    model_free(m);
}

/* ---- the description ---- */

static void test_desc(void) {
    struct {
        const char *name;
        int64_t P, pages, seqs, heads, E, max_length;
        attn_dtype dt;
        attn_status want;
    } CASES[] = {
        {"page_size_15", 15, 4, 2, 1, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"page_size_257", 257, 4, 2, 1, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"no_pages", 16, 0, 2, 1, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"pages_past_int32", 16, (int64_t)INT32_MAX + 1, 2, 1, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"no_sequences", 16, 4, 0, 1, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"no_heads", 16, 4, 2, 0, 4, 0, ATTN_F32, ATTN_ERR_SHAPE},
        {"negative_max_length", 16, 4, 2, 1, 4, -1, ATTN_F32, ATTN_ERR_SHAPE},
        {"max_length_past_the_pool", 16, 4, 2, 1, 4, 4 * 16 + 1, ATTN_F32, ATTN_ERR_SHAPE},
        {"max_length_int64_max", 256, INT32_MAX, 2, 1, 4, INT64_MAX, ATTN_F32, ATTN_ERR_SHAPE},
        {"bool", 16, 4, 2, 1, 4, 0, ATTN_BOOL, ATTN_ERR_DTYPE},
        {"overflowing_pages", 256, INT32_MAX, 2, INT64_MAX / 4, 4, 0, ATTN_F32, ATTN_ERR_OVERFLOW},
        {"overflowing_tables", 16, INT32_MAX, INT32_MAX, 1, 1, 0, ATTN_F32, ATTN_ERR_OVERFLOW},
    };
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.page_size = CASES[c].P, d.num_pages = CASES[c].pages, d.max_sequences = CASES[c].seqs;
        d.heads = CASES[c].heads, d.key_dim = d.value_dim = CASES[c].E, d.max_length = CASES[c].max_length;
        d.dtype = CASES[c].dt;
        size_t bytes = 0;
        attn_error err;
        attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
        char name[96];
        snprintf(name, sizeof name, "desc_refused_%s", CASES[c].name);
        check(st == CASES[c].want, name, "status %d, want %d: %s", st, CASES[c].want, st ? err.message : "accepted");
    }
    /* max_length may be the whole pool, and no more: a longer one was cut
     * down to the pool without a word. */
    {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.num_pages = 4, d.max_sequences = 2, d.key_dim = d.value_dim = 4, d.max_length = 4 * 16;
        size_t bytes = 0, whole = 0;
        attn_error err;
        attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
        d.max_length = 0;
        attn_kv_pages_bytes(&whole, &d, NULL);
        check(st == ATTN_OK && bytes == whole, "desc_max_length_whole_pool_taken", "status %d, %zu bytes, %zu with 0: %s",
              st, bytes, whole, st ? err.message : "");
        d.max_length = 4 * 16 + 1;
        st = attn_kv_pages_bytes(&bytes, &d, &err);
        check(st == ATTN_ERR_SHAPE && strstr(err.message, "desc->max_length is 65") &&
                  strstr(err.message, "= 64"),
              "desc_max_length_past_the_pool_says_the_pool", "status %d: %s", st, st ? err.message : "accepted");
    }
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.num_pages = 2, d.max_sequences = 1, d.key_dim = d.value_dim = 2;
    size_t bytes;
    attn_kv_pages_bytes(&bytes, &d, NULL);
    void *mem = malloc(bytes);
    attn_kv_pages *pool;
    attn_error err;
    attn_status st = attn_kv_pages_init(&pool, mem, bytes - 1, &d, &err);
    check(st == ATTN_ERR_WORKSPACE, "init_refused_too_few_bytes", "status %d", st);
    d.struct_size = 0;
    st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
    check(st == ATTN_ERR_OPTION, "init_refused_struct_size_0", "status %d", st);
    /* an older, smaller desc: the fields it lacks keep their defaults (max_length 0) */
    d = attn_kv_pages_desc_default();
    d.num_pages = 2, d.max_sequences = 1, d.key_dim = d.value_dim = 2, d.max_length = 5;
    d.struct_size = offsetof(attn_kv_pages_desc, max_length);
    size_t older;
    st = attn_kv_pages_bytes(&older, &d, &err);
    check(st == ATTN_OK && older == bytes, "desc_older_struct_reads_its_fields_only", "status %d, %zu vs %zu", st, older,
          bytes);
    attn_kv_pages_desc z;
    check(attn_kv_pages_desc_init(&z, sizeof z) == sizeof z && z.page_size == 16 && z.heads == 1 &&
              z.dtype == ATTN_F32 && attn_kv_paged_view_init(NULL, 0) == sizeof(attn_kv_paged_view),
          "desc_init_defaults", "defaults differ");
    free(mem);
}

/* The key pages and the value pages start on a 4 KiB boundary of memory
 * (where the hardware prefetcher starts a stream; kv_pages.c, MEM_PAGE),
 * wherever in a page of memory the caller's bytes start (offsets 0, 8, 64,
 * 2112 and 4095), and stay inside the attn_kv_pages_bytes given: a pool in
 * an allocation of exactly that many bytes has its value pages written to
 * their last byte (ASan sees a write past the allocation). */
static void test_pages_aligned(void) {
    static const size_t OFFSETS[] = {0, 8, 64, 2112, 4095};
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = 2, d.key_dim = 64, d.value_dim = 32, d.page_size = 16, d.num_pages = 3, d.max_sequences = 2;
    size_t bytes = 0;
    attn_error err;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    int bad = st != ATTN_OK;
    for (size_t c = 0; !st && c < sizeof OFFSETS / sizeof *OFFSETS; c++) {
        char *raw = malloc(bytes + 8192), *mem = (char *)(((uintptr_t)raw + 4095) / 4096 * 4096) + OFFSETS[c];
        char *copy = malloc(bytes); /* mem's bytes exactly: one past them is the allocation's end */
        attn_kv_pages *pool = NULL;
        attn_kv_paged_view w = attn_kv_paged_view_default();
        if (!raw || !copy || attn_kv_pages_init(&pool, copy, bytes, &d, &err) || attn_kv_pages_view(&w, pool, &err) ||
            attn_kv_pages_init(&pool, mem, bytes, &d, &err)) {
            bad++, free(raw), free(copy);
            continue;
        }
        const char *k = w.k_pages, *v = w.v_pages;
        size_t vbytes = (size_t)(d.num_pages * d.heads * d.page_size * d.value_dim) * sizeof(float);
        bad += (uintptr_t)k % 4096 != 0 || (uintptr_t)v % 4096 != 0 || v + vbytes > copy + bytes || k < copy;
        memset((char *)v, 0x5a, vbytes); /* the value pages' last byte within the pool's */
        attn_kv_pages_view(&w, pool, &err);
        bad += (uintptr_t)w.k_pages % 4096 != 0 || (uintptr_t)w.v_pages % 4096 != 0;
        free(raw), free(copy);
    }
    check(!bad, "pool_pages_on_4k_boundaries_within_its_bytes", "status %d, %d offsets wrong", st, bad);
}

/* A 16-bit q and out (f16, bf16) against a pool (bf16 or f32 rows): the
 * pool's attend and the view's are bitwise the f32 call on q widened, its
 * out rounded once (nearest even), lse the same; a paged plan refuses a
 * 16-bit q, and lse must be f32. */
static void test_half_q(attn_dtype h, attn_dtype pool_dt, const char *tag) {
    model m;
    model_init(&m, pool_dt, 16, 32, 4, 2, 32, 24, 200);
    int64_t seqs[3], lens[3] = {37, 5, 70}, cu_kv[4] = {0, 37, 42, 112}, cu[4] = {0, 3, 4, 12};
    attn_error err;
    for (int i = 0; i < 3; i++) attn_kv_pages_create(m.pool, &seqs[i], NULL);
    packed p;
    make_packed(&p, &m, cu_kv[3], 0);
    attn_status st = attn_kv_pages_append(m.pool, seqs, 3, &p.k, &p.v, cu_kv, &err);
    (void)lens;
    int64_t Hq = 4, total = cu[3], qs[3] = {total, Hq, 32}, os[3] = {total, Hq, 24}, ls[2] = {total, Hq};
    size_t nq = (size_t)(total * Hq * 32), no = (size_t)(total * Hq * 24);
    uint16_t *q16 = malloc(2 * nq), *o16 = malloc(2 * no), *want = malloc(2 * no);
    float *q32 = malloc(4 * nq), *o32 = malloc(4 * no), *l16 = malloc(4 * (size_t)(total * Hq)), *l32 = malloc(4 * (size_t)(total * Hq));
    for (size_t i = 0; i < nq; i++) {
        float x = rnd_value();
        q16[i] = h == ATTN_F16 ? attn_f32_to_f16(x) : attn_f32_to_bf16(x);
        q32[i] = h == ATTN_F16 ? attn_f16_to_f32(q16[i]) : attn_bf16_to_f32(q16[i]);
    }
    attn_tensor tq16, tq32, to16, to32, tl16, tl32, tw;
    attn_tensor_init(&tq16, q16, h, 3, qs, NULL, NULL), attn_tensor_init(&tq32, q32, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(&to16, o16, h, 3, os, NULL, NULL), attn_tensor_init(&to32, o32, ATTN_F32, 3, os, NULL, NULL);
    attn_tensor_init(&tl16, l16, ATTN_F32, 2, ls, NULL, NULL), attn_tensor_init(&tl32, l32, ATTN_F32, 2, ls, NULL, NULL);
    attn_tensor_init(&tw, want, h, 3, os, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.softcap = 30;
    attn_status s32 = st ? st : attn_kv_pages_attend(&to32, &tl32, &tq32, cu, seqs, 3, m.pool, NULL, &o, &err);
    attn_status s16 = s32 ? s32 : attn_kv_pages_attend(&to16, &tl16, &tq16, cu, seqs, 3, m.pool, NULL, &o, &err);
    attn_tensor_convert(&tw, &to32, NULL);
    char name[96];
    snprintf(name, sizeof name, "pages_attend_%s_q_bitwise_f32_on_widened_q_%s", tag, attn_dtype_name(pool_dt));
    check(!s16 && !memcmp(o16, want, 2 * no) && !memcmp(l16, l32, 4 * (size_t)(total * Hq)), name, "status %d: %s",
          (int)s16, err.message);
    /* the same through the pool's view; then a plan of it refuses the 16-bit q */
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    attn_kv_pages_view(&w, m.pool, NULL);
    int64_t cuv[MAX_SEQS + 1] = {0};
    for (int64_t i = 0; i < w.num_sequences; i++) { /* the view's ids in order: seqs[] are 0, 1, 2 */
        int64_t j = 0;
        while (j < 3 && seqs[j] != i) j++;
        cuv[i + 1] = cuv[i] + (j < 3 ? cu[j + 1] - cu[j] : 0);
    }
    memset(o16, 0, 2 * no);
    attn_status sv = attn_kv_paged_attend(&to16, &tl16, &tq16, cuv, &w, NULL, &o, &err);
    snprintf(name, sizeof name, "paged_view_%s_q_bitwise_f32_on_widened_q_%s", tag, attn_dtype_name(pool_dt));
    check(!sv && !memcmp(o16, want, 2 * no), name, "status %d: %s", (int)sv, err.message);
    size_t pb = 0, wb = 0;
    attn_sdpa_plan *plan = NULL;
    attn_sdpa_plan_bytes(&pb, w.num_sequences, NULL);
    void *pmem = malloc(pb);
    attn_status sp = attn_kv_paged_plan_init(&plan, pmem, pb, &wb, &to16, &tl16, &tq16, cuv, &w, NULL, &o, &err);
    void *work = malloc(wb + 1);
    memset(o16, 0, 2 * no);
    attn_status sr = sp ? sp : attn_kv_paged_run(plan, &to16, &tl16, &tq16, w.k_pages, w.v_pages, work, wb, &err);
    snprintf(name, sizeof name, "paged_plan_%s_q_bitwise_unplanned_%s", tag, attn_dtype_name(pool_dt));
    check(!sr && !memcmp(o16, want, 2 * no), name, "status %d: %s", (int)sr, err.message);
    free(work);
    attn_tensor_init(&tl16, l16, h, 2, ls, NULL, NULL);
    attn_status sl = attn_kv_pages_attend(&to16, &tl16, &tq16, cu, seqs, 3, m.pool, NULL, &o, &err);
    snprintf(name, sizeof name, "err_pages_attend_%s_q_16bit_lse_%s", tag, attn_dtype_name(pool_dt));
    check(sl == ATTN_ERR_DTYPE, name, "status %d: %s", (int)sl, err.message);
    free(pmem), free(q16), free(o16), free(want), free(q32), free(o32), free(l16), free(l32), free(p.kd), free(p.vd);
    model_free(&m);
}

/* One step of the layer over sequence 1 of a pool or row 1 of a cache:
 * rows x0 .. x0 + L - 1 of a fixed input, masks as given. */
static attn_status grouped_step(float *out, attn_kv_pages *pool, int64_t seq, attn_kv_cache *cache, int64_t *lengths,
                                int64_t x0, int64_t L, const attn_mha_options *o, const layer *l, attn_error *err) {
    static float x[128 * LE];
    for (int64_t i = 0; i < L * LE; i++) x[i] = (float)((x0 * LE + i) * 37 % 101 - 50) / 50;
    int64_t xs[2] = {L, LE}, cu[2] = {0, L}, row = 1;
    attn_tensor tx, to;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 2, xs, NULL, NULL);
    if (pool) return attn_mha_paged(&to, &tx, cu, &seq, 1, pool, NULL, &l->p, o, err);
    return attn_mha_cached_batch(&to, &tx, cu, &row, 1, cache, lengths, NULL, &l->p, o, err);
}

/* A step that fails after its append (a workspace too small for its
 * attention; a bad mask is refused before the append) leaves keys
 * quantized per channel as they were: the group the append quantized out
 * of the f16 residual rows, or the window it moved, is put back. The pool's
 * keys gather the same, and the next step of pool or cache gives bitwise
 * what it gives without the failed one. */
static void test_failed_step_keeps_grouped_keys(void) {
    static const struct { attn_dtype keys; int64_t R, L0; } CASES[] = {
        {ATTN_Q4C, 0, 31}, {ATTN_Q2C, 32, 63}, {ATTN_Q4C, 32, 95}};
    layer l;
    layer_init(&l, 0);
    static char tiny[64];
    attn_context starved = attn_context_default();
    starved.workspace = tiny, starved.workspace_size = sizeof tiny;
    attn_mha_options mo = attn_mha_options_default();
    mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT, mo.context = &starved;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        for (int paged = 0; paged < 2; paged++) {
            float outs[2][3 * LE], one[LE], keys[2][2][LHK * 128 * LD];
            int ok = 1;
            for (int fail = 0; fail < 2; fail++) {
                attn_error err;
                attn_kv_pages *pool = NULL;
                attn_kv_cache *cache = NULL;
                int64_t seq = 0, lengths[2] = {0, 0};
                size_t bytes;
                void *mem;
                if (paged) {
                    attn_kv_pages_desc d = attn_kv_pages_desc_default();
                    d.heads = LHK, d.key_dim = d.value_dim = LD, d.page_size = 32, d.num_pages = 16;
                    d.max_sequences = 2, d.key_dtype = CASES[c].keys, d.residual = CASES[c].R;
                    attn_kv_pages_bytes(&bytes, &d, NULL);
                    attn_kv_pages_init(&pool, mem = calloc(1, bytes), bytes, &d, NULL);
                    attn_kv_pages_create(pool, &seq, NULL), attn_kv_pages_create(pool, &seq, NULL);
                } else {
                    attn_kv_cache_desc d = attn_kv_cache_desc_default();
                    d.batch = 2, d.heads = LHK, d.capacity = 128, d.key_dim = d.value_dim = LD;
                    d.key_dtype = CASES[c].keys, d.residual = CASES[c].R;
                    attn_kv_cache_bytes(&bytes, &d, NULL);
                    attn_kv_cache_init(&cache, mem = calloc(1, bytes), bytes, &d, NULL);
                }
                static float first[128 * LE];
                ok &= grouped_step(first, pool, seq, cache, lengths, 0, CASES[c].L0, NULL, &l, &err) == ATTN_OK;
                int64_t gs[3] = {LHK, CASES[c].L0, LD};
                attn_tensor gk, gv;
                attn_tensor_init(&gk, keys[0][fail], ATTN_F32, 3, gs, NULL, NULL);
                attn_tensor_init(&gv, keys[1][fail], ATTN_F32, 3, gs, NULL, NULL);
                if (fail) {
                    ok &= grouped_step(one, pool, seq, cache, lengths, 500, 1, &mo, &l, &err) == ATTN_ERR_WORKSPACE;
                    ok &= lengths[1] == (paged ? 0 : CASES[c].L0);
                }
                if (pool) ok &= attn_kv_pages_gather(&gk, &gv, pool, seq, &err) == ATTN_OK;
                ok &= grouped_step(outs[fail], pool, seq, cache, lengths, 700, 3, NULL, &l, &err) == ATTN_OK;
                free(mem);
            }
            size_t kb = (size_t)(LHK * CASES[c].L0 * LD) * sizeof(float);
            bool same_keys = !paged || !memcmp(keys[0][0], keys[0][1], kb);
            char name[96];
            snprintf(name, sizeof name, "%s_failed_step_keeps_%s_keys_residual_%lld", paged ? "mha_paged" : "mha_cached_batch",
                     attn_dtype_name(CASES[c].keys), (long long)CASES[c].R);
            check(ok && same_keys && !memcmp(outs[0], outs[1], sizeof outs[0]), name, "calls %s, keys %s, next step %s",
                  ok ? "as expected" : "not as expected", same_keys ? "kept" : "changed",
                  memcmp(outs[0], outs[1], sizeof outs[0]) ? "differs" : "the same");
        }
}

/* A step where no sequence has queries: out and lse without rows take any
 * strides, 0 too (NumPy's empty arrays have strides 0), over a view and a
 * pool; an out with rows and stride 0 is still refused. */
static void test_no_queries_stride_0(void) {
    float pages[2 * 16 * 8] = {0}, q[16] = {0}, out[16], lse[4];
    int64_t len[2] = {9, 0}, cu[3] = {0, 0, 0}, s0[3] = {0, 2, 8}, l0[2] = {0, 2}, zs[3] = {0, 0, 0};
    int32_t table[2] = {1, 0};
    for (int i = 0; i < 16; i++) out[i] = -7;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.heads = 1, w.key_dim = w.value_dim = 8, w.page_size = 16, w.num_pages = 2;
    w.k_pages = w.v_pages = pages, w.num_sequences = 2, w.lengths = len, w.page_table = table, w.table_stride = 1;
    attn_tensor tq, to, tl;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s0, zs, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, s0, zs, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, l0, zs, NULL);
    attn_error err;
    attn_status st = attn_kv_paged_attend(&to, &tl, &tq, cu, &w, NULL, NULL, &err);
    check(st == ATTN_OK && out[0] == -7, "paged_no_queries_outputs_of_stride_0", "status %d: %s", (int)st, err.message);
    int64_t s1[3] = {1, 2, 8}, cu1[3] = {0, 1, 1};
    attn_tensor q1, o1;
    attn_tensor_init(&q1, q, ATTN_F32, 3, s1, NULL, NULL), attn_tensor_init(&o1, out, ATTN_F32, 3, s1, NULL, NULL);
    o1.strides[1] = 0;
    st = attn_kv_paged_attend(&o1, NULL, &q1, cu1, &w, NULL, NULL, &err);
    check(st == ATTN_ERR_STRIDE && out[0] == -7, "paged_error_out_with_rows_of_stride_0", "status %d: %s", (int)st,
          err.message);
}

/* A head-major pool (attn_kv_pages_desc.head_major): its view says so, and
 * an older view struct that cannot is refused; attending through the view
 * is bitwise the pool's own attend; each sequence's pages give back what
 * was appended; and the flag is checked. (The random programs above run
 * head-major pools against contiguous copies too.) */
static void test_head_major_view(void) {
    enum { H = 2, E = 8, B = 3, HQ = 4 };
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = H, d.key_dim = d.value_dim = E, d.page_size = 16, d.num_pages = 12, d.max_sequences = B, d.head_major = 1;
    size_t bytes = 0;
    attn_error err;
    attn_kv_pages *pool = NULL;
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    void *mem = calloc(1, bytes);
    if (!st) st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
    int64_t ids[B], len[B] = {37, 5, 50}, cu[B + 1] = {0, 37, 42, 92}, T = 92;
    for (int b = 0; b < B && !st; b++) st = attn_kv_pages_create(pool, &ids[b], &err);
    float *k = malloc(sizeof(float) * T * H * E), *v = malloc(sizeof(float) * T * H * E);
    for (int64_t i = 0; i < T * H * E; i++) k[i] = rnd_value(), v[i] = rnd_value();
    int64_t sk[3] = {T, H, E};
    attn_tensor tk, tv;
    attn_tensor_init(&tk, k, ATTN_F32, 3, sk, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 3, sk, NULL, NULL);
    if (!st) st = attn_kv_pages_append(pool, ids, B, &tk, &tv, cu, &err);
    attn_kv_paged_view w;
    w.struct_size = sizeof w;
    if (!st) st = attn_kv_pages_view(&w, pool, &err);
    check(!st && w.head_major == 1, "head_major_pool_view_says_so", "status %d (%s), head_major %d", (int)st,
          err.message, st ? -1 : w.head_major);
    /* each sequence's rows back, exactly (f32 pages) */
    int back = 1;
    for (int b = 0; b < B && !st; b++) {
        float *gk = malloc(sizeof(float) * H * len[b] * E), *gv = malloc(sizeof(float) * H * len[b] * E);
        int64_t sg[3] = {H, len[b], E};
        attn_tensor ok_, ov_;
        attn_tensor_init(&ok_, gk, ATTN_F32, 3, sg, NULL, NULL), attn_tensor_init(&ov_, gv, ATTN_F32, 3, sg, NULL, NULL);
        st = attn_kv_paged_gather(&ok_, &ov_, &w, ids[b], &err);
        for (int64_t h = 0; h < H && !st; h++)
            for (int64_t t = 0; t < len[b]; t++)
                back &= !memcmp(gk + (h * len[b] + t) * E, k + ((cu[b] + t) * H + h) * E, sizeof(float) * E) &&
                        !memcmp(gv + (h * len[b] + t) * E, v + ((cu[b] + t) * H + h) * E, sizeof(float) * E);
        free(gk), free(gv);
    }
    check(!st && back, "head_major_pages_gather_what_was_appended", "status %d (%s)", (int)st, err.message);
    /* the bytes where attn.h says: row t of head h of sequence b at ((h · num_pages + page) · P + t % P) · E */
    int laid = !st;
    for (int b = 0; b < B && laid; b++) {
        const int32_t *table = w.page_table + ids[b] * w.table_stride;
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < len[b]; t++) {
                int64_t at = ((h * w.num_pages + table[t / 16]) * 16 + t % 16) * E;
                laid &= !memcmp((const float *)w.k_pages + at, k + ((cu[b] + t) * H + h) * E, sizeof(float) * E) &&
                        !memcmp((const float *)w.v_pages + at, v + ((cu[b] + t) * H + h) * E, sizeof(float) * E);
            }
    }
    check(laid, "head_major_rows_lie_where_attn_h_says", "a row is not at ((h * num_pages + page) * P + t) * E");
    /* one query per sequence: the pool's attend and the view's, bitwise */
    float *q = malloc(sizeof(float) * B * HQ * E), *o1 = calloc(B * HQ * E, sizeof(float)),
          *o2 = calloc(B * HQ * E, sizeof(float));
    for (int64_t i = 0; i < B * HQ * E; i++) q[i] = rnd_value();
    int64_t sq[3] = {B, HQ, E}, cq[B + 1] = {0, 1, 2, 3};
    attn_tensor tq, t1, t2;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&t1, o1, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&t2, o2, ATTN_F32, 3, sq, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (!st) st = attn_kv_pages_attend(&t1, NULL, &tq, cq, ids, B, pool, NULL, &o, &err);
    if (!st) st = attn_kv_paged_attend(&t2, NULL, &tq, cq, &w, NULL, &o, &err);
    check(!st && !memcmp(o1, o2, sizeof(float) * B * HQ * E), "head_major_view_attend_equals_pool_attend",
          "status %d (%s)", (int)st, err.message);
    /* a view struct from before head_major cannot describe this pool */
    attn_kv_paged_view old;
    old.struct_size = offsetof(attn_kv_paged_view, head_major);
    st = attn_kv_pages_view(&old, pool, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "head_major"), "head_major_pool_refuses_older_view_struct",
          "status %d: %s", (int)st, err.message);
    d.head_major = 2;
    st = attn_kv_pages_bytes(&bytes, &d, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "head_major"), "head_major_2_refused", "status %d: %s",
          (int)st, err.message);
    w.head_major = 2;
    st = attn_kv_paged_check(&w, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "head_major"), "view_head_major_2_refused", "status %d: %s",
          (int)st, err.message);
    free(q), free(o1), free(o2), free(k), free(v), free(mem);
}

/* A paged plan run after its sequence grew or shrank (attn.h,
 * attn_kv_paged_plan_init): the pool's view carries the pool's generation
 * counter, so a run of a plan made before an append, truncate, fork or
 * free is refused with ATTN_ERR_PLAN, its output untouched, where it read
 * the planned positions (and, for q4c keys, residual rows that had moved:
 * other keys) without an error. What changes nothing a plan reads (a new,
 * empty sequence; a truncate to the length held) leaves it current, and a
 * plan made again gives attn_kv_pages_attend's bits. A caller's own view
 * with a counter of its own is judged by it. */
static bool refused_untouched(attn_status st, const attn_error *err, const float *o, const float *before, size_t n) {
    return st == ATTN_ERR_PLAN && strstr(err->message, "plan again") && !memcmp(o, before, n);
}

static void test_plan_after_growth(attn_dtype key_dtype) {
    enum { E = 32, P = 32 };
    attn_error err;
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.key_dim = d.value_dim = E, d.page_size = P, d.num_pages = 8, d.max_sequences = 3, d.key_dtype = key_dtype;
    size_t pb = 0, bytes = 0, wsb = 0, wsb2 = 0;
    attn_kv_pages *pool = NULL;
    attn_sdpa_plan *plan = NULL, *again = NULL;
    int64_t id = 0, other = 0, child = 0, cu[2] = {0, 63}, cq[2] = {0, 1}, ks[3] = {63, 1, E}, ks2[3] = {40, 1, E},
            qs[3] = {1, 1, E};
    static float k[103 * E], v[103 * E];
    float q[E], o[5][E], sentinel[E];
    for (int i = 0; i < 103 * E; i++) k[i] = rnd_value(), v[i] = rnd_value();
    for (int i = 0; i < E; i++) q[i] = rnd_value(), sentinel[i] = 12345.0f;
    attn_tensor tk, tv, tq, to[5];
    attn_tensor_init(&tk, k, ATTN_F32, 3, ks, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 3, ks, NULL, NULL);
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL);
    for (int i = 0; i < 5; i++) attn_tensor_init(&to[i], o[i], ATTN_F32, 3, qs, NULL, NULL);
    attn_kv_paged_view w = attn_kv_paged_view_default(), now = attn_kv_paged_view_default();
    attn_status st = attn_kv_pages_bytes(&pb, &d, &err);
    void *pm = st ? NULL : malloc(pb), *mem = NULL, *mem2 = NULL, *ws = NULL;
    if (!st) st = attn_kv_pages_init(&pool, pm, pb, &d, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, &tk, &tv, cu, &err);
    if (!st) st = attn_kv_pages_view(&w, pool, &err);
    if (!st) st = attn_sdpa_plan_bytes(&bytes, 3, &err);
    if (!st) mem = malloc(bytes), mem2 = malloc(bytes);
    /* the view is the pool's 3 ids; only id 0 has queries */
    int64_t cq3[4] = {0, 1, 1, 1};
    if (!st) st = attn_kv_paged_plan_init(&plan, mem, bytes, &wsb, &to[0], NULL, &tq, cq3, &w, NULL, NULL, &err);
    if (!st) ws = malloc(wsb);
    if (!st) st = attn_kv_paged_run(plan, &to[0], NULL, &tq, w.k_pages, w.v_pages, ws, wsb, &err);
    /* A new, empty sequence changes nothing the plan reads: still current */
    if (!st) st = attn_kv_pages_create(pool, &other, &err);
    if (!st) st = attn_kv_paged_run(plan, &to[1], NULL, &tq, w.k_pages, w.v_pages, ws, wsb, &err);
    char name[128];
    const char *tag = key_dtype ? "q4c" : "f32";
    snprintf(name, sizeof name, "paged_plan_current_after_create_%s", tag);
    check(!st && !memcmp(o[0], o[1], sizeof o[0]), name, "status %d %s", (int)st, st ? err.message : "");
    if (st) goto done;

    /* 103 positions: the q4c group 32 .. 63 leaves the window */
    attn_tensor_init(&tk, k + 63 * E, ATTN_F32, 3, ks2, NULL, NULL), attn_tensor_init(&tv, v + 63 * E, ATTN_F32, 3, ks2, NULL, NULL);
    cu[1] = 40;
    st = attn_kv_pages_append(pool, &id, 1, &tk, &tv, cu, &err);
    memcpy(o[1], sentinel, sizeof sentinel);
    attn_status run = st ? st : attn_kv_paged_run(plan, &to[1], NULL, &tq, w.k_pages, w.v_pages, ws, wsb, &err);
    snprintf(name, sizeof name, "paged_plan_run_after_append_refused_%s", tag);
    check(!st && refused_untouched(run, &err, o[1], sentinel, sizeof sentinel), name, "status %d, run %d: %s", (int)st,
          (int)run, err.message);
    if (!st) st = attn_kv_pages_view(&now, pool, &err);
    run = st ? st : attn_kv_paged_run_view(plan, &to[1], NULL, &tq, &now, ws, wsb, &err);
    snprintf(name, sizeof name, "paged_plan_run_view_of_the_grown_pool_refused_%s", tag);
    check(!st && refused_untouched(run, &err, o[1], sentinel, sizeof sentinel), name, "status %d, run %d: %s", (int)st,
          (int)run, err.message);
    /* Planned again: attend's bits */
    if (!st) st = attn_kv_paged_plan_init(&again, mem2, bytes, &wsb2, &to[2], NULL, &tq, cq3, &now, NULL, NULL, &err);
    if (!st && wsb2 > wsb) free(ws), ws = malloc(wsb2), wsb = wsb2;
    if (!st) st = attn_kv_paged_run(again, &to[2], NULL, &tq, now.k_pages, now.v_pages, ws, wsb2, &err);
    if (!st) st = attn_kv_pages_attend(&to[3], NULL, &tq, cq, &id, 1, pool, NULL, NULL, &err);
    snprintf(name, sizeof name, "paged_plan_made_again_gives_attend_%s", tag);
    check(!st && !memcmp(o[2], o[3], sizeof o[2]), name, "status %d %s", (int)st, st ? err.message : "");

    /* A truncate to the length held changes nothing; one that drops
     * positions, a fork and a free each make the plan stale. */
    if (!st) st = attn_kv_pages_truncate(pool, id, 103, &err);
    if (!st) st = attn_kv_paged_run(again, &to[4], NULL, &tq, now.k_pages, now.v_pages, ws, wsb, &err);
    snprintf(name, sizeof name, "paged_plan_current_after_truncate_to_its_length_%s", tag);
    check(!st && !memcmp(o[2], o[4], sizeof o[2]), name, "status %d %s", (int)st, st ? err.message : "");
    static const char *const WHAT[3] = {"truncate", "fork", "free"};
    for (int c = 0; c < 3 && !st; c++) {
        if (c) st = attn_kv_paged_plan_init(&again, mem2, bytes, &wsb2, &to[2], NULL, &tq, cq3, &now, NULL, NULL, &err);
        if (!st) st = attn_kv_paged_run(again, &to[2], NULL, &tq, now.k_pages, now.v_pages, ws, wsb, &err);
        if (!st) st = c == 0   ? attn_kv_pages_truncate(pool, id, 70, &err)
                      : c == 1 ? attn_kv_pages_fork(pool, &child, id, &err)
                               : attn_kv_pages_free(pool, child, &err);
        memcpy(o[4], sentinel, sizeof sentinel);
        run = st ? st : attn_kv_paged_run(again, &to[4], NULL, &tq, now.k_pages, now.v_pages, ws, wsb, &err);
        snprintf(name, sizeof name, "paged_plan_run_after_%s_refused_%s", WHAT[c], tag);
        check(!st && refused_untouched(run, &err, o[4], sentinel, sizeof sentinel), name, "status %d, run %d: %s",
              (int)st, (int)run, err.message);
    }
    /* A caller's own view: its own counter, moved on by the caller */
    uint64_t mine = 7;
    attn_kv_paged_view own = now;
    own.generation = &mine;
    if (!st) st = attn_kv_paged_plan_init(&again, mem2, bytes, &wsb2, &to[2], NULL, &tq, cq3, &own, NULL, NULL, &err);
    if (!st) st = attn_kv_paged_run(again, &to[2], NULL, &tq, own.k_pages, own.v_pages, ws, wsb, &err);
    mine++;
    memcpy(o[4], sentinel, sizeof sentinel);
    run = st ? st : attn_kv_paged_run(again, &to[4], NULL, &tq, own.k_pages, own.v_pages, ws, wsb, &err);
    snprintf(name, sizeof name, "paged_plan_callers_own_counter_moved_refused_%s", tag);
    check(!st && refused_untouched(run, &err, o[4], sentinel, sizeof sentinel), name, "status %d, run %d: %s", (int)st,
          (int)run, err.message);
    /* Every run reads the counter: a workspace over it is refused before
     * any scratch is written there (a run once took it, and its scratch
     * moved the counter a pool's later plans are judged by). */
    uint64_t *held = st ? NULL : malloc(wsb + sizeof *held);
    if (held) *held = mine, own.generation = held;
    if (held) st = attn_kv_paged_plan_init(&again, mem2, bytes, &wsb2, &to[2], NULL, &tq, cq3, &own, NULL, NULL, &err);
    memcpy(o[4], sentinel, sizeof sentinel);
    run = st || !held ? st : attn_kv_paged_run(again, &to[4], NULL, &tq, own.k_pages, own.v_pages, held, wsb, &err);
    snprintf(name, sizeof name, "paged_plan_run_refuses_workspace_over_the_counter_%s", tag);
    check(!st && held && wsb2 > 0 && wsb2 <= wsb && run == ATTN_ERR_STRIDE &&
              strstr(err.message, "the view's generation counter") && *held == mine &&
              !memcmp(o[4], sentinel, sizeof sentinel),
          name, "status %d, run %d: %s", (int)st, (int)run, err.message);
    free(held);
done:
    free(ws), free(mem), free(mem2), free(pm);
}

/* A plan of a pool, then a new pool made in the same memory (an engine's
 * pool freed and its memory handed back by malloc) and brought through as
 * many changes: the plan's 40 positions are not the new sequence's 3, and
 * its run must be refused, not read the new pool's pages at the old
 * lengths. */
static void test_plan_after_pool_made_again(void) {
    attn_error err;
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.key_dim = d.value_dim = 2, d.num_pages = 4, d.max_sequences = 1;
    size_t bytes, plan_bytes, ws = 0;
    attn_kv_pages_bytes(&bytes, &d, &err);
    void *memory = malloc(bytes);
    attn_kv_pages *pool;
    float kv[40 * 2], q[2] = {1, 1}, out[2], before[2];
    for (int i = 0; i < 80; i++) kv[i] = (float)i / 80;
    int64_t s, cu[2] = {0, 40}, ks[3] = {40, 1, 2}, qs[3] = {1, 1, 2}, cq[2] = {0, 1};
    attn_tensor tk, tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, qs, NULL, NULL);
    attn_status st = attn_kv_pages_init(&pool, memory, bytes, &d, &err);
    attn_tensor_init(&tk, kv, ATTN_F32, 3, ks, NULL, NULL);
    if (!st) st = attn_kv_pages_create(pool, &s, &err);
    if (!st) st = attn_kv_pages_append(pool, &s, 1, &tk, &tk, cu, &err);
    attn_kv_paged_view view = attn_kv_paged_view_default();
    if (!st) st = attn_kv_pages_view(&view, pool, &err);
    attn_sdpa_plan_bytes(&plan_bytes, 1, &err);
    void *plan_memory = malloc(plan_bytes);
    attn_sdpa_plan *plan = NULL;
    if (!st) st = attn_kv_paged_plan_init(&plan, plan_memory, plan_bytes, &ws, &to, NULL, &tq, cq, &view, NULL, NULL, &err);
    void *work = malloc(ws + 1);
    if (!st) st = attn_kv_paged_run(plan, &to, NULL, &tq, view.k_pages, view.v_pages, work, ws, &err);
    attn_status again = ATTN_OK;
    if (!st) { /* the same memory, the same steps: one create, one append (of 3 positions) */
        cu[1] = 3, ks[0] = 3;
        attn_tensor_init(&tk, kv, ATTN_F32, 3, ks, NULL, NULL);
        st = attn_kv_pages_init(&pool, memory, bytes, &d, &err);
        if (!st) st = attn_kv_pages_create(pool, &s, &err);
        if (!st) st = attn_kv_pages_append(pool, &s, 1, &tk, &tk, cu, &err);
        memcpy(before, out, sizeof out);
        if (!st) again = attn_kv_paged_run(plan, &to, NULL, &tq, view.k_pages, view.v_pages, work, ws, &err);
    }
    check(!st && again == ATTN_ERR_PLAN && !memcmp(out, before, sizeof out),
          "paged_plan_refused_over_a_pool_made_again_in_its_memory",
          "setup %d (%s), the old plan's run over the new pool: %d", st, st ? err.message : "", again);
    free(work), free(plan_memory), free(memory);
}

/* ---- against the definition: a model of the pool and naive sums ----
 *
 * The random programs above check the pool against the library's own
 * contiguous cache. These check it against nothing of the library's: a
 * model that keeps every sequence's keys and values as plain arrays, its
 * own page table of abstract pages with reference counts and copy on write
 * as attn.h describes them, and attention as the naive sum in long double.
 * f64 pools must match it within 1e-12 of each row's Σ p|v|, f32, f16 and
 * bf16 pools within attn_sdpa's f32 bound (attn.h, "Numerics"). After every
 * step the pool's free pages, every page's reference count and which
 * sequences share which page must be the model's, and every refused call
 * (a full pool, an id named twice, unknown or freed, offsets that
 * decrease, a truncate past the end) must leave the pool's memory byte for
 * byte as it was. Ids are predicted too: the one freed last is reused first. */

/* Uniform in [-1, 1), every bit of a double. */
static double rnd_f64(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

enum { SM = 7 };

typedef struct smodel {
    attn_kv_pages_desc d;
    attn_kv_pages *pool;
    void *mem;
    size_t bytes;
    int64_t H, E, Ev, P, maxlen, stride; /* stride: table entries per sequence */
    int live[SM];
    int64_t len[SM], cap[SM];
    double *k[SM], *v[SM]; /* (cap, H, E): the stored values */
    int64_t *tab[SM];      /* model page ids */
    int64_t *refs, *freel, nfree;
    int64_t ids[SM], nids; /* free id stack, top last */
    int64_t *l2m, *m2l;
} smodel;

static int64_t pages_of(int64_t x, int64_t P) { return x / P + (x % P != 0); }

static double store(double x, attn_dtype dt) {
    if (dt == ATTN_F64) return x;
    float f = (float)x;
    if (dt == ATTN_F16) return attn_f16_to_f32(attn_f32_to_f16(f));
    if (dt == ATTN_BF16) return attn_bf16_to_f32(attn_f32_to_bf16(f));
    return f;
}

/* A row of n values as the pool's dtype reads it back: rounded to f32, f16
 * or bf16, or quantized row by row (attn_quantize, then widened back). */
static void store_row(double *dst, const double *src, int64_t n, attn_dtype dt) {
    size_t row = attn_quant_row_size(dt, n);
    if (!row) {
        for (int64_t i = 0; i < n; i++) dst[i] = store(src[i], dt);
        return;
    }
    float f[64];
    unsigned char codes[128];
    int64_t sh[1] = {n};
    attn_tensor in, back;
    for (int64_t i = 0; i < n; i++) f[i] = (float)src[i];
    attn_tensor_init(&in, f, ATTN_F32, 1, sh, NULL, NULL);
    attn_quantize(codes, sizeof codes, dt, &in, NULL);
    attn_tensor_init(&back, f, ATTN_F32, 1, sh, NULL, NULL);
    attn_dequantize(&back, codes, sizeof codes, dt, NULL);
    for (int64_t i = 0; i < n; i++) dst[i] = f[i];
}

static int sm_init(smodel *m, attn_dtype dt, int64_t P, int64_t pages, int64_t nseq, int64_t H, int64_t E,
                   int64_t Ev, int64_t max_length, int head_major) {
    memset(m, 0, sizeof *m);
    m->d = attn_kv_pages_desc_default();
    m->d.dtype = dt, m->d.page_size = P, m->d.num_pages = pages, m->d.max_sequences = nseq;
    m->d.heads = H, m->d.key_dim = E, m->d.value_dim = Ev, m->d.max_length = max_length, m->d.head_major = head_major;
    m->H = H, m->E = E, m->Ev = Ev, m->P = P;
    m->maxlen = max_length ? max_length : pages * P;
    m->stride = max_length ? pages_of(max_length, P) : pages;
    attn_error err;
    if (attn_kv_pages_bytes(&m->bytes, &m->d, &err)) return 0;
    m->mem = malloc(m->bytes);
    memset(m->mem, 0xa5, m->bytes);
    if (attn_kv_pages_init(&m->pool, m->mem, m->bytes, &m->d, &err)) return 0;
    m->refs = calloc((size_t)pages, 8), m->freel = malloc((size_t)pages * 8);
    m->l2m = malloc((size_t)pages * 8), m->m2l = malloc((size_t)pages * 8);
    for (int64_t i = 0; i < pages; i++) m->freel[i] = pages - 1 - i;
    m->nfree = pages;
    for (int64_t i = 0; i < nseq; i++) m->ids[i] = nseq - 1 - i;
    m->nids = nseq;
    for (int s = 0; s < nseq; s++) m->tab[s] = malloc((size_t)m->stride * 8);
    return 1;
}

static void sm_free(smodel *m) {
    for (int s = 0; s < SM; s++) free(m->k[s]), free(m->v[s]), free(m->tab[s]);
    free(m->refs), free(m->freel), free(m->l2m), free(m->m2l), free(m->mem);
}

static void sm_reserve(smodel *m, int s, int64_t n) {
    if (n <= m->cap[s]) return;
    int64_t cap = n * 2 + 8;
    m->k[s] = realloc(m->k[s], (size_t)(cap * m->H * m->E) * 8);
    m->v[s] = realloc(m->v[s], (size_t)(cap * m->H * m->Ev) * 8);
    m->cap[s] = cap;
}

static int64_t mtake(smodel *m) {
    int64_t p = m->freel[--m->nfree];
    m->refs[p] = 1;
    return p;
}
static void mrelease(smodel *m, int s, int64_t from, int64_t to) {
    for (int64_t e = from; e < to; e++)
        if (--m->refs[m->tab[s][e]] == 0) m->freel[m->nfree++] = m->tab[s][e];
}

/* Bookkeeping and contents against the model. */
static int sm_holds(smodel *m, char *why, size_t size, int contents) {
    int64_t N = m->d.num_pages;
    for (int64_t i = 0; i < N; i++) m->l2m[i] = m->m2l[i] = -1;
    if (attn_kv_pages_free_pages(m->pool) != m->nfree)
        return snprintf(why, size, "free pages %lld, model %lld", (long long)attn_kv_pages_free_pages(m->pool),
                        (long long)m->nfree), 0;
    for (int s = 0; s < m->d.max_sequences; s++) {
        int64_t len;
        const int32_t *t;
        attn_status st = attn_kv_pages_sequence(m->pool, s, &len, &t, NULL);
        if (!m->live[s]) {
            if (st != ATTN_ERR_ARGUMENT) return snprintf(why, size, "dead seq %d answers %d", s, st), 0;
            continue;
        }
        if (st || len != m->len[s])
            return snprintf(why, size, "seq %d: status %d length %lld, model %lld", s, st, (long long)len,
                            (long long)m->len[s]), 0;
        for (int64_t e = 0; e < pages_of(len, m->P); e++) {
            int64_t lp = t[e], mp = m->tab[s][e];
            if (lp < 0 || lp >= N) return snprintf(why, size, "seq %d entry %lld page %lld", s, (long long)e, (long long)lp), 0;
            if ((m->l2m[lp] >= 0 && m->l2m[lp] != mp) || (m->m2l[mp] >= 0 && m->m2l[mp] != lp))
                return snprintf(why, size, "seq %d entry %lld: page sharing differs from the model", s, (long long)e), 0;
            m->l2m[lp] = mp, m->m2l[mp] = lp;
            if (attn_kv_pages_page_refs(m->pool, lp) != m->refs[mp])
                return snprintf(why, size, "page %lld refs %lld, model %lld", (long long)lp,
                                (long long)attn_kv_pages_page_refs(m->pool, lp), (long long)m->refs[mp]), 0;
        }
    }
    for (int64_t i = 0; i < N; i++)
        if (m->l2m[i] < 0 && attn_kv_pages_page_refs(m->pool, i) != 0)
            return snprintf(why, size, "page %lld held by no table has refs %lld", (long long)i,
                            (long long)attn_kv_pages_page_refs(m->pool, i)), 0;
    if (!contents) return 1;
    for (int s = 0; s < m->d.max_sequences; s++) {
        if (!m->live[s]) continue;
        int64_t L = m->len[s], H = m->H, E = m->E, Ev = m->Ev;
        double *k = malloc((size_t)(H * L * E + 1) * 8), *v = malloc((size_t)(H * L * Ev + 1) * 8);
        int64_t ks[3] = {H, L, E}, vs[3] = {H, L, Ev};
        attn_tensor tk, tv;
        attn_tensor_init(&tk, k, ATTN_F64, 3, ks, NULL, NULL);
        attn_tensor_init(&tv, v, ATTN_F64, 3, vs, NULL, NULL);
        attn_error err;
        int ok = 1;
        if (attn_kv_pages_gather(&tk, &tv, m->pool, s, &err)) ok = 0, snprintf(why, size, "gather: %s", err.message);
        for (int64_t h = 0; h < H && ok; h++)
            for (int64_t j = 0; j < L && ok; j++) {
                for (int64_t e = 0; e < E && ok; e++)
                    if (k[(h * L + j) * E + e] != m->k[s][(j * H + h) * E + e])
                        ok = 0, snprintf(why, size, "seq %d key %lld head %lld differs", s, (long long)j, (long long)h);
                for (int64_t e = 0; e < Ev && ok; e++)
                    if (v[(h * L + j) * Ev + e] != m->v[s][(j * H + h) * Ev + e])
                        ok = 0, snprintf(why, size, "seq %d value %lld head %lld differs", s, (long long)j, (long long)h);
            }
        free(k), free(v);
        if (!ok) return 0;
    }
    return 1;
}

/* Sequence s's L queries (rows row0 .. of the packed q, out and lse)
 * against the naive sum in long double over the model's keys: the last L
 * positions with the bottom-right causal mask, a row that sees no key out
 * 0 and lse -inf. f64 pools within 1e-12 of the row's Σ p|v|; the others
 * within attn_sdpa's f32 bound, 2e-5 · max|P·|v|| + 2 (E + 6) 2^-24 s_abs
 * max|v| over the sequence, and lse within the scores' error (E + 6) 2^-24
 * s_abs, the sums' 2e-5 and its own rounding. */
static int check_attend(const smodel *m, int s, int64_t L, const void *q, int q_f64, int64_t Hq, double scale,
                        int causal, const void *out, const void *lse, int64_t row0, char *why, size_t size) {
    int64_t S = m->len[s], H = m->H, E = m->E, Ev = m->Ev, g = Hq / H;
    const double *K = m->k[s], *V = m->v[s];
    bool exact = m->d.dtype == ATTN_F64;
    /* f32 bound per sequence: s_abs, max|v| over it */
    double s_abs = 0, vmax = 0;
    for (int64_t j = 0; j < S; j++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t e = 0; e < Ev; e++) vmax = fmax(vmax, fabs(V[(j * H + h) * Ev + e]));
    double *refo = malloc((size_t)(L * Hq * Ev + 1) * 8), *refl = malloc((size_t)(L * Hq + 1) * 8);
    double *pv = malloc((size_t)(L * Hq + 1) * 8);
    for (int64_t l = 0; l < L; l++)
        for (int64_t hq = 0; hq < Hq; hq++) {
            int64_t hk = hq / g, r = row0 + l;
            double qv[64];
            for (int64_t e = 0; e < E; e++)
                qv[e] = q_f64 ? ((const double *)q)[(r * Hq + hq) * E + e] : ((const float *)q)[(r * Hq + hq) * E + e];
            int64_t lim = causal ? S - L + l : S - 1; /* last key position allowed */
            int64_t seen = lim < 0 ? 0 : lim + 1 < S ? lim + 1 : S; /* keys 0 .. seen - 1 */
            naive_packed rows = {K, V, H, hk, E, Ev};
            naive_row nr;
            naive_attend(refo + (l * Hq + hq) * Ev, &nr, qv, E, Ev, seen, scale, naive_packed_key, naive_packed_value, &rows);
            s_abs = fmax(s_abs, nr.sabs), pv[l * Hq + hq] = nr.pabs, refl[l * Hq + hq] = nr.lse;
        }
    int ok = 1;
    double maxpv = 0;
    for (int64_t i = 0; i < L * Hq; i++) maxpv = fmax(maxpv, pv[i]);
    for (int64_t l = 0; l < L && ok; l++)
        for (int64_t hq = 0; hq < Hq && ok; hq++) {
            int64_t r = row0 + l;
            double tol = exact ? 1e-12 * (pv[l * Hq + hq] + 1e-300)
                               : 2e-5 * maxpv + 2.0 * (double)(E + 6) * 0x1p-24 * s_abs * vmax;
            for (int64_t c = 0; c < Ev && ok; c++) {
                double got = exact ? ((const double *)out)[(r * Hq + hq) * Ev + c]
                                   : ((const float *)out)[(r * Hq + hq) * Ev + c];
                double want = refo[(l * Hq + hq) * Ev + c];
                if (!(fabs(got - want) <= tol))
                    ok = 0, snprintf(why, size, "seq %d S %lld L %lld row %lld head %lld col %lld: %.17g vs %.17g (tol %g)%s",
                                     s, (long long)S, (long long)L, (long long)l, (long long)hq, (long long)c, got,
                                     want, tol, causal ? " causal" : "");
            }
            if (lse && ok) {
                double got = exact ? ((const double *)lse)[r * Hq + hq] : ((const float *)lse)[r * Hq + hq];
                double want = refl[l * Hq + hq];
                double ltol = exact ? 1e-12 * (fabs(want) + 1)
                                    : (double)(E + 6) * 0x1p-24 * s_abs + 2e-5 + 0x1p-23 * fabs(want);
                if (isinf(want) ? got != want : !(fabs(got - want) <= ltol))
                    ok = 0, snprintf(why, size, "seq %d row %lld head %lld lse %.17g vs %.17g", s, (long long)l,
                                     (long long)hq, got, want);
            }
        }
    free(refo), free(refl), free(pv);
    return ok;
}

/* What a program did: a program that never refused a call, never found the
 * pool full, never copied a shared page or never attended tested less than
 * its name says (sm_program fails it). */
typedef struct stats { int64_t errs, fulls, cow, attends; } stats;

/* One attend over a random multiset of live sequences (dead ones now and then). */
static int sm_attend(smodel *m, int64_t g, stats *st, char *why, size_t size) {
    int64_t live[SM], nl = 0;
    for (int s = 0; s < m->d.max_sequences; s++)
        if (m->live[s]) live[nl++] = s;
    int64_t n = nl ? rnd_below(6) : 0, seqs[8], cu[9] = {0};
    int bad = nl && rnd_below(12) == 0;
    int64_t Lmax = (int64_t[]){1, 3, 9, 20}[rnd_below(4)];
    for (int64_t i = 0; i < n; i++) {
        seqs[i] = live[rnd_below(nl)];
        int64_t S = m->len[seqs[i]];
        cu[i + 1] = cu[i] + rnd_below((S + 3 < Lmax ? S + 3 : Lmax) + 1);
    }
    if (bad) {
        int dead = -1;
        for (int s = 0; s < m->d.max_sequences; s++)
            if (!m->live[s]) dead = s;
        seqs[n] = dead >= 0 && (rnd() & 1) ? dead : (rnd() & 1 ? -1 : m->d.max_sequences);
        cu[n + 1] = cu[n] + 1;
        n++;
    }
    int64_t T = cu[n], H = m->H, Hq = H * g, E = m->E, Ev = m->Ev;
    int f64 = m->d.dtype == ATTN_F64;
    size_t es = f64 ? 8 : 4;
    void *q = malloc((size_t)(T * Hq * E + 1) * es), *out = malloc((size_t)(T * Hq * Ev + 1) * es);
    void *lse = malloc((size_t)(T * Hq + 1) * es);
    for (int64_t i = 0; i < T * Hq * E; i++) {
        double x = rnd_f64() * 2;
        if (f64) ((double *)q)[i] = x;
        else ((float *)q)[i] = (float)x;
    }
    memset(out, 0x7f, (size_t)(T * Hq * Ev + 1) * es);
    int64_t qs[3] = {T, Hq, E}, os[3] = {T, Hq, Ev}, ls[2] = {T, Hq};
    attn_tensor tq, to, tl;
    attn_dtype qd = f64 ? ATTN_F64 : ATTN_F32;
    attn_tensor_init(&tq, q, qd, 3, qs, NULL, NULL);
    attn_tensor_init(&to, out, qd, 3, os, NULL, NULL);
    attn_tensor_init(&tl, lse, qd, 2, ls, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    int causal = (int)(rnd() & 1);
    o.causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    double scale = rnd() & 1 ? 1.0 / sqrt((double)E) : 0.3 + rnd_f64();
    if (rnd() & 1) o.has_scale = 1, o.scale = scale;
    else scale = 1.0 / sqrt((double)E);
    int with_lse = (int)(rnd() & 1);
    attn_context c = attn_context_default();
    c.num_threads = 1 + (int)rnd_below(3);
    o.context = &c;
    attn_error err;
    unsigned char *snap = malloc(m->bytes);
    memcpy(snap, m->mem, m->bytes);
    attn_status s = attn_kv_pages_attend(&to, with_lse ? &tl : NULL, &tq, cu, seqs, n, m->pool, NULL, &o, &err);
    int ok = 1;
    if (memcmp(snap, m->mem, m->bytes)) ok = 0, snprintf(why, size, "attend wrote into the pool");
    else if (bad) {
        unsigned char *u = out;
        int untouched = 1;
        for (size_t i = 0; i < (size_t)(T * Hq * Ev) * es; i++) untouched &= u[i] == 0x7f;
        if (s != ATTN_ERR_ARGUMENT || !untouched)
            ok = 0, snprintf(why, size, "attend of a bad id %lld: status %d, out %s", (long long)seqs[n - 1], s,
                             untouched ? "untouched" : "written");
        st->errs++;
    } else if (s) {
        ok = 0, snprintf(why, size, "attend: %s", err.message);
    } else {
        for (int64_t i = 0; i < n && ok; i++)
            ok = check_attend(m, (int)seqs[i], cu[i + 1] - cu[i], q, f64, Hq, scale, causal, out,
                              with_lse ? lse : NULL, cu[i], why, size);
        st->attends++;
    }
    free(snap), free(q), free(out), free(lse);
    return ok;
}

static int expect_fail(smodel *m, const unsigned char *snap, attn_status got, attn_status want, const char *what,
                       const attn_error *err, char *why, size_t size) {
    if (got != want) return snprintf(why, size, "%s: status %d, expected %d (%s)", what, got, want, got ? err->message : ""), 0;
    if (memcmp(snap, m->mem, m->bytes)) return snprintf(why, size, "%s failed but changed the pool", what), 0;
    return 1;
}

static int sm_append(smodel *m, stats *stt, char *why, size_t size) {
    int64_t live[SM], nl = 0, P = m->P, H = m->H, E = m->E, Ev = m->Ev;
    for (int s = 0; s < m->d.max_sequences; s++)
        if (m->live[s]) live[nl++] = s;
    int64_t seqs[SM + 1], n = 0, cu[SM + 2] = {0};
    for (int64_t i = 0; i < nl; i++)
        if (rnd() & 1) seqs[n++] = live[i];
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rnd_below(i + 1), t = seqs[i];
        seqs[i] = seqs[j], seqs[j] = t;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t len = m->len[seqs[i]], add;
        switch (rnd_below(7)) {
        case 0: add = 0; break;
        case 1: add = P - len % P; break; /* fill the page exactly */
        case 2: add = P; break;
        case 3: add = 1; break;
        case 4: add = rnd_below(3 * P); break;
        case 5: add = rnd_below(50) == 0 ? m->maxlen - len + (int64_t)rnd_below(2) : rnd_below(P); break;
        default: add = rnd_below(P + 2); break;
        }
        cu[i + 1] = cu[i] + add;
    }
    /* now and then a bad call: an id twice, dead or out of range; offsets off */
    int bad = (int)(rnd_below(14) == 0 ? 1 + rnd_below(4) : 0);
    if (bad == 1 && n) seqs[n] = seqs[rnd_below(n)], cu[n + 1] = cu[n] + rnd_below(2), n++;
    else if (bad == 2) {
        int dead = -1;
        for (int s = 0; s < m->d.max_sequences; s++)
            if (!m->live[s]) dead = s;
        seqs[n] = dead >= 0 ? dead : -1, cu[n + 1] = cu[n] + rnd_below(2), n++;
    } else if (bad == 3 && n >= 2) {
        cu[1] = cu[2] + 1; /* decreasing */
    } else bad = 0;
    int64_t T = cu[n];
    int f64 = m->d.dtype == ATTN_F64;
    size_t es = f64 ? 8 : 4;
    int layout = (int)(rnd() & 1); /* 0: (T, H, E); 1: (H, T, E) in memory */
    void *kd = malloc((size_t)(T * H * E + 1) * es), *vd = malloc((size_t)(T * H * Ev + 1) * es);
    double *kin = malloc((size_t)(T * H * E + 1) * 8), *vin = malloc((size_t)(T * H * Ev + 1) * 8);
    for (int64_t r = 0; r < T; r++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t e = 0; e < E; e++) {
                double x = f64 ? rnd_f64() : (double)(float)rnd_f64();
                kin[(r * H + h) * E + e] = x;
                int64_t at = layout ? (h * T + r) * E + e : (r * H + h) * E + e;
                if (f64) ((double *)kd)[at] = x;
                else ((float *)kd)[at] = (float)x;
            }
            for (int64_t e = 0; e < Ev; e++) {
                double x = f64 ? rnd_f64() : (double)(float)rnd_f64();
                vin[(r * H + h) * Ev + e] = x;
                int64_t at = layout ? (h * T + r) * Ev + e : (r * H + h) * Ev + e;
                if (f64) ((double *)vd)[at] = x;
                else ((float *)vd)[at] = (float)x;
            }
        }
    int64_t ks[3] = {T, H, E}, vs[3] = {T, H, Ev}, kst[3] = {E, T * E, 1}, vst[3] = {Ev, T * Ev, 1};
    attn_tensor tk, tv;
    attn_dtype dt = f64 ? ATTN_F64 : ATTN_F32;
    attn_tensor_init(&tk, kd, dt, 3, ks, layout ? kst : NULL, NULL);
    attn_tensor_init(&tv, vd, dt, 3, vs, layout ? vst : NULL, NULL);
    /* the model's prediction: over max_length, or out of pages */
    int full = 0;
    int64_t need = 0, *tr = malloc((size_t)m->d.num_pages * 8);
    memcpy(tr, m->refs, (size_t)m->d.num_pages * 8);
    for (int64_t i = 0; i < n && !bad; i++) {
        int64_t s = seqs[i], len = m->len[s], add = cu[i + 1] - cu[i];
        if (!add) continue;
        if (len + add > m->maxlen) full = 1;
        need += pages_of(len + add, P) - pages_of(len, P);
        if (len % P && tr[m->tab[s][len / P]] > 1) need++, tr[m->tab[s][len / P]]--;
    }
    free(tr);
    if (need > m->nfree) full = 1;
    unsigned char *snap = malloc(m->bytes);
    memcpy(snap, m->mem, m->bytes);
    attn_error err;
    attn_status got = attn_kv_pages_append(m->pool, seqs, n, &tk, &tv, cu, &err);
    int ok;
    if (bad) ok = expect_fail(m, snap, got, ATTN_ERR_ARGUMENT, "a bad append", &err, why, size), stt->errs++;
    else if (full) ok = expect_fail(m, snap, got, ATTN_ERR_FULL, "an append past the pool", &err, why, size), stt->fulls++;
    else if (got) ok = 0, snprintf(why, size, "append: %s", err.message);
    else {
        ok = 1;
        for (int64_t i = 0; i < n; i++) {
            int s = (int)seqs[i];
            int64_t len = m->len[s], add = cu[i + 1] - cu[i];
            if (!add) continue;
            if (len % P && m->refs[m->tab[s][len / P]] > 1) {
                m->refs[m->tab[s][len / P]]--;
                m->tab[s][len / P] = mtake(m);
                stt->cow++;
            }
            for (int64_t pos = len; pos < len + add; pos++)
                if (pos % P == 0) m->tab[s][pos / P] = mtake(m);
            sm_reserve(m, s, len + add);
            for (int64_t r = 0; r < add; r++)
                for (int64_t h = 0; h < H; h++) {
                    store_row(m->k[s] + ((len + r) * H + h) * E, kin + ((cu[i] + r) * H + h) * E, E, m->d.dtype);
                    store_row(m->v[s] + ((len + r) * H + h) * Ev, vin + ((cu[i] + r) * H + h) * Ev, Ev, m->d.dtype);
                }
            m->len[s] = len + add;
        }
    }
    free(snap), free(kd), free(vd), free(kin), free(vin);
    return ok;
}

/* One random program; returns 1 when every step held. */
static int sm_program(const char *name, attn_dtype dt, int64_t P, int64_t pages, int64_t nseq, int64_t H, int64_t g,
                      int64_t E, int64_t Ev, int64_t max_length, int head_major, int64_t steps) {
    smodel m;
    char why[1024] = "";
    if (!sm_init(&m, dt, P, pages, nseq, H, E, Ev, max_length, head_major)) {
        check(0, name, "init failed");
        return 0;
    }
    stats st = {0};
    int ok = 1;
    int64_t step;
    for (step = 0; step < steps && ok; step++) {
        int op = (int)rnd_below(14);
        attn_error err;
        int64_t live[SM], nl = 0;
        for (int s = 0; s < nseq; s++)
            if (m.live[s]) live[nl++] = s;
        unsigned char *snap = malloc(m.bytes);
        memcpy(snap, m.mem, m.bytes);
        if (op == 0 || nl == 0) { /* create */
            int64_t s = -7;
            attn_status got = attn_kv_pages_create(m.pool, &s, &err);
            if (m.nids == 0) ok = expect_fail(&m, snap, got, ATTN_ERR_FULL, "create with every id alive", &err, why, sizeof why), st.errs++;
            else if (got || s != m.ids[m.nids - 1]) ok = 0, snprintf(why, sizeof why, "create gave %lld (%d), model %lld", (long long)s, got, (long long)m.ids[m.nids - 1]);
            else m.nids--, m.live[s] = 1, m.len[s] = 0;
        } else if (op == 1 || op == 2) { /* fork, now and then of a dead parent */
            int64_t parent = live[rnd_below(nl)], child = -7;
            int dead = rnd_below(8) == 0;
            if (dead) {
                parent = -1;
                for (int s = 0; s < nseq; s++)
                    if (!m.live[s]) parent = s;
                if (parent < 0) parent = nseq + (int64_t)rnd_below(3);
            }
            attn_status got = attn_kv_pages_fork(m.pool, &child, parent, &err);
            if (dead) ok = expect_fail(&m, snap, got, ATTN_ERR_ARGUMENT, "fork of a dead parent", &err, why, sizeof why), st.errs++;
            else if (m.nids == 0) ok = expect_fail(&m, snap, got, ATTN_ERR_FULL, "fork with every id alive", &err, why, sizeof why), st.errs++;
            else if (got || child != m.ids[m.nids - 1]) ok = 0, snprintf(why, sizeof why, "fork gave %lld (%d: %s)", (long long)child, got, got ? err.message : "");
            else {
                int c = (int)child;
                m.nids--, m.live[c] = 1, m.len[c] = m.len[parent];
                for (int64_t e = 0; e < pages_of(m.len[c], P); e++) m.tab[c][e] = m.tab[parent][e], m.refs[m.tab[c][e]]++;
                sm_reserve(&m, c, m.len[c]);
                if (m.len[c]) {
                    memcpy(m.k[c], m.k[parent], (size_t)(m.len[c] * H * E) * 8);
                    memcpy(m.v[c], m.v[parent], (size_t)(m.len[c] * H * Ev) * 8);
                }
            }
        } else if (op <= 6) {
            ok = sm_append(&m, &st, why, sizeof why);
        } else if (op <= 8) { /* truncate, now and then past the end or below 0 */
            int s = (int)live[rnd_below(nl)];
            int bad = rnd_below(8) == 0;
            int64_t to = bad ? (rnd() & 1 ? m.len[s] + 1 : -1) : rnd_below(m.len[s] + 1);
            if (!bad && (rnd() & 1)) to = m.len[s] / P * P; /* a page boundary */
            attn_status got = attn_kv_pages_truncate(m.pool, s, to, &err);
            if (bad) ok = expect_fail(&m, snap, got, ATTN_ERR_ARGUMENT, "truncate out of range", &err, why, sizeof why), st.errs++;
            else if (got) ok = 0, snprintf(why, sizeof why, "truncate: %s", err.message);
            else mrelease(&m, s, pages_of(to, P), pages_of(m.len[s], P)), m.len[s] = to;
        } else if (op == 9) { /* free, now and then a dead one */
            int s = (int)live[rnd_below(nl)];
            int bad = rnd_below(6) == 0;
            if (bad) {
                s = -1;
                for (int x = 0; x < nseq; x++)
                    if (!m.live[x]) s = x;
                attn_status got = attn_kv_pages_free(m.pool, s, &err);
                ok = expect_fail(&m, snap, got, ATTN_ERR_ARGUMENT, "free of a dead id", &err, why, sizeof why), st.errs++;
            } else if (attn_kv_pages_free(m.pool, s, &err)) {
                ok = 0, snprintf(why, sizeof why, "free: %s", err.message);
            } else {
                mrelease(&m, s, 0, pages_of(m.len[s], P));
                m.live[s] = 0, m.len[s] = 0, m.ids[m.nids++] = s;
            }
        } else {
            ok = sm_attend(&m, g, &st, why, sizeof why);
        }
        free(snap);
        if (ok) ok = sm_holds(&m, why, sizeof why, step % 4 == 0 || step == steps - 1);
    }
    for (int s = 0; s < nseq && ok; s++)
        if (m.live[s] && attn_kv_pages_free(m.pool, s, NULL)) ok = 0, snprintf(why, sizeof why, "final free");
    if (ok && attn_kv_pages_free_pages(m.pool) != pages) ok = 0, snprintf(why, sizeof why, "pages leaked");
    if (ok && (!st.fulls || (!st.cow && pages > 1) || !st.attends || !st.errs))
        ok = 0, snprintf(why, sizeof why, "weak program: fulls %lld cow %lld attends %lld errs %lld", (long long)st.fulls,
                         (long long)st.cow, (long long)st.attends, (long long)st.errs);
    char msg[1100];
    snprintf(msg, sizeof msg, "step %lld: %s", (long long)step - 1, why);
    check(ok, name, "%s", msg);
    sm_free(&m);
    return ok;
}


/* ---- caller's views: page sizes from 1, FlashInfer offsets, repeated pages, plans ---- */

static double view_key(const attn_kv_paged_view *w, const double *kp, int64_t cols, const int32_t *t, int64_t j,
                       int64_t h, int64_t e) {
    int64_t P = w->page_size, page = t[j / P], part = w->head_major ? h * w->num_pages + page : page * w->heads + h;
    return kp[(part * P + j % P) * cols + e];
}

/* A head's key and value rows through a view's page table, for naive_attend. */
typedef struct view_rows {
    const attn_kv_paged_view *w;
    const double *k, *v;
    const int32_t *t;
    int64_t h, E, Ev;
} view_rows;
static double view_row_key(const void *c, int64_t j, int64_t e) {
    const view_rows *r = c;
    return view_key(r->w, r->k, r->E, r->t, j, r->h, e);
}
static double view_row_value(const void *c, int64_t j, int64_t e) {
    const view_rows *r = c;
    return view_key(r->w, r->v, r->Ev, r->t, j, r->h, e);
}

static int view_round(int64_t round, char *why, size_t size) {
    int64_t P = 1 + rnd_below(7), N = 1 + rnd_below(30), H = 1 + rnd_below(3), g = 1 + rnd_below(3), E = 1 + rnd_below(9),
            Ev = 1 + rnd_below(9), n = rnd_below(6), Hq = H * g;
    int hm = (int)(rnd() & 1), offs = (int)(rnd() & 1), causal = (int)(rnd() & 1);
    double *kp = malloc((size_t)(N * H * P * E) * 8), *vp = malloc((size_t)(N * H * P * Ev) * 8);
    double *kp2 = malloc((size_t)(N * H * P * E) * 8), *vp2 = malloc((size_t)(N * H * P * Ev) * 8);
    int f32 = (int)(rnd() & 1); /* f32 pages and q: the fast kernels over pages of any size */
    for (int64_t i = 0; i < N * H * P * E; i++) kp[i] = rnd_f64(), kp2[i] = rnd_f64();
    for (int64_t i = 0; i < N * H * P * Ev; i++) vp[i] = rnd_f64(), vp2[i] = rnd_f64();
    float *fk = malloc((size_t)(N * H * P * E) * 4), *fv = malloc((size_t)(N * H * P * Ev) * 4);
    float *fk2 = malloc((size_t)(N * H * P * E) * 4), *fv2 = malloc((size_t)(N * H * P * Ev) * 4);
    for (int64_t i = 0; i < N * H * P * E; i++) fk[i] = (float)kp[i], kp[i] = fk[i], fk2[i] = (float)kp2[i], kp2[i] = fk2[i];
    for (int64_t i = 0; i < N * H * P * Ev; i++) fv[i] = (float)vp[i], vp[i] = fv[i], fv2[i] = (float)vp2[i], vp2[i] = fv2[i];
    int64_t lengths[8], toff[9] = {0}, stride = 0;
    for (int64_t i = 0; i < n; i++) {
        lengths[i] = rnd_below(4) == 0 ? 0 : rnd_below(3 * P * 4 + 1);
        if (lengths[i] / P + 1 > stride) stride = lengths[i] / P + 1;
    }
    stride += rnd_below(3);
    toff[0] = rnd_below(3); /* FlashInfer's indptr may start past the table's first entry */
    for (int64_t i = 0; i < n; i++) toff[i + 1] = toff[i] + pages_of(lengths[i], P) + rnd_below(3);
    int64_t entries = offs ? toff[n] : n * stride;
    int32_t *table = malloc((size_t)(entries + 1) * 4);
    for (int64_t i = 0; i < entries; i++) table[i] = (int32_t)rnd_below(N); /* repeats allowed */
    uint64_t gen = 5;
    attn_kv_paged_view w = attn_kv_paged_view_default();
    w.dtype = ATTN_F64, w.heads = H, w.key_dim = E, w.value_dim = Ev, w.page_size = P, w.num_pages = N;
    if (f32) w.dtype = ATTN_F32;
    w.k_pages = f32 ? (void *)fk : kp, w.v_pages = f32 ? (void *)fv : vp, w.num_sequences = n, w.lengths = lengths, w.page_table = table;
    w.table_stride = offs ? 0 : stride, w.table_offsets = offs ? toff : NULL, w.head_major = hm, w.generation = &gen;
    int64_t cu[9] = {0};
    for (int64_t i = 0; i < n; i++) cu[i + 1] = cu[i] + rnd_below(lengths[i] + 3 < 12 ? lengths[i] + 3 : 12);
    int64_t T = cu[n];
    double *q = malloc((size_t)(T * Hq * E + 1) * 8), *out = malloc((size_t)(T * Hq * Ev + 1) * 8);
    double *out2 = malloc((size_t)(T * Hq * Ev + 1) * 8), *lse = malloc((size_t)(T * Hq + 1) * 8);
    double *lse2 = malloc((size_t)(T * Hq + 1) * 8);
    for (int64_t i = 0; i < T * Hq * E; i++) q[i] = f32 ? (float)(2 * rnd_f64()) : 2 * rnd_f64();
    float *fq = malloc((size_t)(T * Hq * E + 1) * 4), *fo = malloc((size_t)(T * Hq * Ev + 1) * 4);
    float *fo2 = malloc((size_t)(T * Hq * Ev + 1) * 4), *fl = malloc((size_t)(T * Hq + 1) * 4);
    float *fl2 = malloc((size_t)(T * Hq + 1) * 4);
    for (int64_t i = 0; i < T * Hq * E; i++) fq[i] = (float)q[i];
    int64_t qs[3] = {T, Hq, E}, os[3] = {T, Hq, Ev}, ls[2] = {T, Hq};
    attn_tensor tq, to, tl, to2, tl2;
    attn_dtype qd = f32 ? ATTN_F32 : ATTN_F64;
    attn_tensor_init(&tq, f32 ? (void *)fq : q, qd, 3, qs, NULL, NULL);
    attn_tensor_init(&to, f32 ? (void *)fo : out, qd, 3, os, NULL, NULL);
    attn_tensor_init(&tl, f32 ? (void *)fl : lse, qd, 2, ls, NULL, NULL);
    attn_tensor_init(&to2, f32 ? (void *)fo2 : out2, qd, 3, os, NULL, NULL);
    attn_tensor_init(&tl2, f32 ? (void *)fl2 : lse2, qd, 2, ls, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    attn_error err;
    int ok = 1;
    attn_status st = attn_kv_paged_attend(&to, &tl, &tq, cu, &w, NULL, &o, &err);
    if (st) ok = 0, snprintf(why, size, "round %lld: attend (P %lld): %s", (long long)round, (long long)P, err.message);
    /* the naive reference, per sequence through a small model */
    for (int pass = 0; pass < 2 && ok; pass++) {
        const double *K = pass ? kp2 : kp, *V = pass ? vp2 : vp;
        if (pass) { /* a plan of the view, run over a second layer's pages */
            size_t pb, ws;
            attn_sdpa_plan_bytes(&pb, n, NULL);
            void *pm = malloc(pb);
            attn_sdpa_plan *plan;
            st = attn_kv_paged_plan_init(&plan, pm, pb, &ws, &to2, &tl2, &tq, cu, &w, NULL, &o, &err);
            void *wsp = ws ? malloc(ws) : NULL;
            const void *k2 = f32 ? (const void *)fk2 : kp2, *v2 = f32 ? (const void *)fv2 : vp2;
            if (!st) st = attn_kv_paged_run(plan, &to2, &tl2, &tq, k2, v2, wsp, ws, &err);
            if (st) {
                ok = 0, snprintf(why, size, "round %lld: plan: %s", (long long)round, err.message);
            } else { /* a moved counter refuses the plan; a layer of other lengths too */
                gen++;
                attn_status s2 = attn_kv_paged_run(plan, &to2, &tl2, &tq, k2, v2, wsp, ws, &err);
                if (s2 != ATTN_ERR_PLAN) ok = 0, snprintf(why, size, "round %lld: stale plan ran: %d", (long long)round, s2);
                gen--;
                if (ok && n > 0) {
                    int64_t l2[8];
                    memcpy(l2, lengths, sizeof l2);
                    l2[n - 1] = l2[n - 1] ? l2[n - 1] - 1 : 0;
                    attn_kv_paged_view other = w;
                    other.lengths = l2, other.generation = NULL, other.k_pages = k2, other.v_pages = v2;
                    s2 = attn_kv_paged_run_view(plan, &to2, &tl2, &tq, &other, wsp, ws, &err);
                    if (lengths[n - 1] && s2 != ATTN_ERR_PLAN)
                        ok = 0, snprintf(why, size, "round %lld: a layer of other lengths ran: %d", (long long)round, s2);
                }
            }
            free(wsp), free(pm);
            if (!ok) break;
        }
        if (f32)
            for (int64_t i = 0; i < T * Hq * Ev; i++) out[i] = fo[i], out2[i] = fo2[i];
        if (f32)
            for (int64_t i = 0; i < T * Hq; i++) lse[i] = fl[i], lse2[i] = fl2[i];
        const double *O = pass ? out2 : out, *LS = pass ? lse2 : lse;
        for (int64_t i = 0; i < n && ok; i++) {
            int64_t S = lengths[i], L = cu[i + 1] - cu[i];
            const int32_t *t = table + (offs ? toff[i] : i * stride);
            attn_kv_paged_view wv = w;
            wv.k_pages = K, wv.v_pages = V;
            for (int64_t l = 0; l < L && ok; l++)
                for (int64_t hq = 0; hq < Hq && ok; hq++) {
                    int64_t hk = hq / g, lim = causal ? S - L + l : S - 1;
                    const double *qv = q + ((cu[i] + l) * Hq + hq) * E;
                    int64_t seen = lim < 0 ? 0 : lim + 1 < S ? lim + 1 : S; /* keys 0 .. seen - 1 */
                    view_rows rows = {&wv, K, V, t, hk, E, Ev};
                    double want[16]; /* Ev <= 9 */
                    naive_row nr;
                    naive_attend(want, &nr, qv, E, Ev, seen, 1 / sqrt((double)E), view_row_key, view_row_value, &rows);
                    for (int64_t c = 0; c < Ev && ok; c++) {
                        double got = O[((cu[i] + l) * Hq + hq) * Ev + c];
                        double tol = f32 ? 2e-5 * 1.0 + 2.0 * (double)(E + 6) * 0x1p-24 * 2.0 * (double)E / sqrt((double)E)
                                         : 1e-12 * nr.pabs + 1e-300;
                        if (!(fabs(got - want[c]) <= tol))
                            ok = 0, snprintf(why, size, "round %lld pass %d (P %lld, N %lld, offsets %d, head_major %d): seq %lld "
                                             "row %lld head %lld: %.17g vs %.17g", (long long)round, pass, (long long)P,
                                             (long long)N, offs, hm, (long long)i, (long long)l, (long long)hq, got, want[c]);
                    }
                    double wl = nr.lse, gl = LS[(cu[i] + l) * Hq + hq];
                    double ltol = f32 ? (double)(E + 6) * 0x1p-24 * 2.0 * sqrt((double)E) + 2e-5 + 0x1p-23 * fabs(wl)
                                      : 1e-12 * (fabs(wl) + 1);
                    if (ok && (isinf(wl) ? gl != wl : !(fabs(gl - wl) <= ltol)))
                        ok = 0, snprintf(why, size, "round %lld: lse %.17g vs %.17g", (long long)round, gl, wl);
                }
        }
    }
    free(fk), free(fv), free(fk2), free(fv2), free(fq), free(fo), free(fo2), free(fl), free(fl2);
    free(kp), free(vp), free(kp2), free(vp2), free(table), free(q), free(out), free(out2), free(lse), free(lse2);
    return ok;
}

static void views_stress(int64_t rounds) {
    char why[1024] = "";
    int ok = 1;
    for (int64_t r = 0; r < rounds && ok; r++) ok = view_round(r, why, sizeof why);
    check(ok, "caller_views_pages_of_1_to_7_positions_repeated_pages_plans_against_naive_sums", "%s", why);
}


/* ---- several caller threads attending disjoint sequences at once ---- */

typedef struct job {
    const attn_kv_pages *pool;
    int64_t seqs[2], n, T, Hq, E, Ev;
    int64_t cu[3];
    float *q, *out, *lse;
    attn_status st;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    int64_t qs[3] = {j->T, j->Hq, j->E}, os[3] = {j->T, j->Hq, j->Ev}, ls[2] = {j->T, j->Hq};
    attn_tensor tq, to, tl;
    attn_tensor_init(&tq, j->q, ATTN_F32, 3, qs, NULL, NULL);
    attn_tensor_init(&to, j->out, ATTN_F32, 3, os, NULL, NULL);
    attn_tensor_init(&tl, j->lse, ATTN_F32, 2, ls, NULL, NULL);
    attn_context c = attn_context_default();
    c.num_threads = 2;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &c;
    for (int rep = 0; rep < 20 && !j->st; rep++)
        j->st = attn_kv_pages_attend(&to, &tl, &tq, j->cu, j->seqs, j->n, j->pool, NULL, &o, NULL);
    return NULL;
}

static void threads_stress(void) {
    smodel m;
    enum { NT = 3 };
    sm_init(&m, ATTN_F32, 16, 64, 6, 2, 8, 8, 0, 0);
    attn_error err;
    float *kv = malloc(200 * 2 * 8 * 4);
    for (int i = 0; i < 200 * 2 * 8; i++) kv[i] = (float)rnd_f64();
    for (int s = 0; s < 6; s++) {
        int64_t id, cu[2] = {0, 20 + 25 * s}, ks[3] = {cu[1], 2, 8};
        attn_tensor tk;
        attn_tensor_init(&tk, kv, ATTN_F32, 3, ks, NULL, NULL);
        if (s % 2 == 0) attn_kv_pages_create(m.pool, &id, &err);
        else attn_kv_pages_fork(m.pool, &id, s - 1, &err); /* shared pages, read by two threads */
        attn_kv_pages_append(m.pool, &id, 1, &tk, &tk, cu, &err);
    }
    job jobs[NT], solo[NT];
    for (int t = 0; t < NT; t++) {
        job *j = &jobs[t];
        memset(j, 0, sizeof *j);
        j->pool = m.pool, j->n = 2, j->seqs[0] = 2 * t, j->seqs[1] = 2 * t + 1;
        j->Hq = 4, j->E = 8, j->Ev = 8, j->cu[1] = 1 + t, j->cu[2] = 1 + t + 9, j->T = j->cu[2];
        j->q = malloc((size_t)(j->T * 4 * 8) * 4), j->out = malloc((size_t)(j->T * 4 * 8) * 4);
        j->lse = malloc((size_t)(j->T * 4) * 4);
        for (int64_t i = 0; i < j->T * 4 * 8; i++) j->q[i] = (float)rnd_f64();
        solo[t] = *j;
        solo[t].out = malloc((size_t)(j->T * 4 * 8) * 4), solo[t].lse = malloc((size_t)(j->T * 4) * 4);
        run_job(&solo[t]);
    }
    pthread_t th[NT];
    for (int t = 0; t < NT; t++) pthread_create(&th[t], NULL, run_job, &jobs[t]);
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    int ok = 1;
    for (int t = 0; t < NT; t++) {
        ok &= jobs[t].st == ATTN_OK && solo[t].st == ATTN_OK;
        ok &= memcmp(jobs[t].out, solo[t].out, (size_t)(jobs[t].T * 4 * 8) * 4) == 0;
        ok &= memcmp(jobs[t].lse, solo[t].lse, (size_t)(jobs[t].T * 4) * 4) == 0;
        free(jobs[t].q), free(jobs[t].out), free(jobs[t].lse), free(solo[t].out), free(solo[t].lse);
    }
    check(ok, "three_caller_threads_attend_disjoint_sequences_as_each_alone", "a thread's result differs from its run alone");
    free(kv);
    sm_free(&m);
}



/* The models' programs: f64 pools (the exact kernel) against the naive sums
 * within 1e-12, f32, f16 and bf16 within f32's bound; page sizes that are
 * and are not powers of two, a single page, max_length, GQA and MQA,
 * head-major pages. Small pools, so that appends often find them full. */
static void model_programs(int64_t steps) {
    static const struct {
        attn_dtype dt;
        int64_t P, pages, nseq, H, g, E, Ev, max_length;
        int head_major;
        const char *name;
    } C[] = {
        {ATTN_F64, 16, 12, 5, 2, 2, 5, 3, 0, 0, "f64_page_16_gqa_2"},
        {ATTN_F64, 17, 9, 6, 1, 3, 7, 4, 0, 1, "f64_page_17_mqa_3_head_major"},
        {ATTN_F64, 16, 30, 7, 3, 1, 4, 6, 40, 0, "f64_page_16_max_length_40"},
        {ATTN_F64, 256, 3, 4, 2, 2, 3, 2, 0, 0, "f64_page_256"},
        {ATTN_F64, 16, 1, 3, 1, 1, 2, 2, 0, 0, "f64_one_page"},
        {ATTN_F32, 16, 12, 5, 2, 2, 8, 4, 0, 0, "f32_page_16_gqa_2"},
        {ATTN_F32, 31, 10, 6, 1, 4, 16, 16, 0, 1, "f32_page_31_head_major"},
        {ATTN_F16, 16, 14, 5, 2, 1, 8, 8, 0, 0, "f16_page_16"},
        {ATTN_BF16, 48, 8, 5, 2, 3, 6, 5, 100, 1, "bf16_page_48_max_length_100"},
        {ATTN_E4M3, 16, 10, 5, 2, 2, 6, 5, 0, 0, "e4m3_page_16"},
        {ATTN_Q8, 20, 10, 5, 1, 2, 32, 32, 0, 1, "q8_page_20_head_major"},
        {ATTN_Q4_1, 16, 10, 5, 2, 1, 32, 64, 0, 0, "q4_1_page_16"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "model_%s_naive_sums_page_accounting_refusals_untouched", C[i].name);
        sm_program(name, C[i].dt, C[i].P, C[i].pages, C[i].nseq, C[i].H, C[i].g, C[i].E, C[i].Ev, C[i].max_length,
                   C[i].head_major, steps);
    }
}

int main(void) {
    rng_state = test_seed(KV_PAGES_SEED) | 1; /* seed.h: other inputs under ATTN_TEST_SEED; xorshift's state is never 0 */
    setenv("ATTN_QDOT", "widen", 1); /* before any call: the widening path, bitwise f32 rows (see the top) */
    static const struct { attn_dtype dt; const char *name; } DTYPES[] = {
        {ATTN_F32, "f32"}, {ATTN_F16, "f16"}, {ATTN_BF16, "bf16"}};
    for (int t = 0; t < 3; t++)
        for (int pi = 0; pi < 2; pi++) {
            int64_t P = pi ? 256 : 16;
            char name[96];
            snprintf(name, sizeof name, "random_program_%s_page_%lld", DTYPES[t].name, (long long)P);
            /* P = 16: 24 pages for 6 sequences; P = 256: 5 pages, each
             * append up to 2 pages long, so the pool fills either way. */
            random_program(name, DTYPES[t].dt, P, pi ? 5 : 24, pi ? 160 : 400);
            snprintf(name, sizeof name, "fork_shares_full_pages_copies_last_%s_page_%lld", DTYPES[t].name, (long long)P);
            test_fork_shares_full_pages(DTYPES[t].dt, P, name);
            snprintf(name, sizeof name, "append_to_every_sharer_copies_all_but_one_%s_page_%lld", DTYPES[t].name,
                     (long long)P);
            test_all_sharers_append(DTYPES[t].dt, P, name);
            snprintf(name, sizeof name, "%s_page_%lld", DTYPES[t].name, (long long)P);
            test_errors(DTYPES[t].dt, P, name);
        }
    for (int t = 0; t < 3; t++)
        for (int pi = 0; pi < 2; pi++) {
            char tag[48];
            snprintf(tag, sizeof tag, "%s_page_%d", DTYPES[t].name, pi ? 256 : 16);
            test_forks_attend(DTYPES[t].dt, pi ? 256 : 16, tag);
        }
    test_half_q(ATTN_BF16, ATTN_BF16, "bf16");
    test_half_q(ATTN_F16, ATTN_F32, "f16");
    for (int t = 0; t < 3; t++) test_mha_paged(DTYPES[t].dt, DTYPES[t].name);
    for (int t = 0; t < 3; t++) test_mha_cached_batch(DTYPES[t].dt, DTYPES[t].name);
    test_mha_cached_batch(ATTN_E4M3, "e4m3"); /* the cache's own writer quantizes each row */
    test_mha_cached_batch_errors();
    test_grouped_keys_batch(ATTN_F32, NULL, "f32");
    static const float VS[LHK] = {0.0625f, 5.0f};
    test_grouped_keys_batch(ATTN_E4M3, VS, "e4m3_scaled");
    test_grouped_keys_batch(ATTN_E5M2, VS, "e5m2_scaled");
    test_mha_batch_f64();
    test_long_decode(ATTN_F32, 256, 2, 16, 8, "long_forks_decode_kernel_equals_contiguous_f32_page_256");
    test_long_decode(ATTN_F16, 256, 2, 16, 8, "long_forks_decode_kernel_equals_contiguous_f16_page_256");
    test_long_decode(ATTN_F32, 16, 2, 16, 8, "long_forks_decode_kernel_equals_contiguous_f32_page_16");
    test_long_decode(ATTN_F16, 16, 2, 16, 8, "long_forks_decode_kernel_equals_contiguous_f16_page_16");
    test_long_decode(ATTN_BF16, 16, 2, 16, 8, "long_forks_decode_kernel_equals_contiguous_bf16_page_16");
    uint64_t saved = rng_state; /* the cases of 4 heads leave the later tests' random stream as it was */
    test_long_decode(ATTN_F32, 16, 4, 40, 24, "long_forks_decode_kernel_equals_contiguous_f32_page_16_4_heads_tails");
    test_long_decode(ATTN_BF16, 256, 4, 40, 24, "long_forks_decode_kernel_equals_contiguous_bf16_page_256_4_heads_tails");
    test_long_decode(ATTN_F16, 24, 4, 40, 24, "long_forks_decode_kernel_equals_contiguous_f16_page_24_4_heads_tails");
    rng_state = saved;
    test_caller_pages();
    test_view_repeats_its_one_page();
    test_out_over_descale();
    test_out_over_offsets();
    test_desc();
    test_pages_aligned();
    test_no_queries_stride_0();
    test_failed_step_keeps_grouped_keys();
    test_window_copy_leaves_last_page();
    /* Keys quantized per channel (KIVI): pages of 32 and 64 positions, every
     * operation against the copy, attention bitwise the f32 kernels' on the
     * dequantized keys. */
    static const struct { attn_dtype keys, values; int64_t P, pages; const char *name; } GROUPED[] = {
        {ATTN_Q4C, ATTN_F32, 32, 24, "random_program_q4c_keys_f32_values_page_32"},
        {ATTN_Q2C, ATTN_F16, 64, 14, "random_program_q2c_keys_f16_values_page_64"},
        {ATTN_Q4C, ATTN_BF16, 64, 14, "random_program_q4c_keys_bf16_values_page_64"}};
    for (int t = 0; t < 3; t++) {
        model_keys = GROUPED[t].keys;
        random_program(GROUPED[t].name, GROUPED[t].values, GROUPED[t].P, GROUPED[t].pages, 400);
    }
    model_keys = 0;
    test_grouped_kernels(ATTN_Q4C, ATTN_F32, 64, 0, "q4c_keys_decode_flash_and_exact_equal_f32_rows_of_their_values_page_64");
    test_grouped_kernels(ATTN_Q2C, ATTN_F16, 128, 0, "q2c_keys_decode_flash_and_exact_equal_f32_rows_of_their_values_page_128");
    test_grouped_kernels(ATTN_Q4C, ATTN_F32, 64, 128,
                         "q4c_keys_residual_128_decode_flash_and_exact_equal_f32_rows_of_their_values_page_64");
    test_grouped_kernels(ATTN_Q2C, ATTN_F16, 128, 64,
                         "q2c_keys_residual_64_decode_flash_and_exact_equal_f32_rows_of_their_values_page_128");
    test_grouped_errors();
    test_grouped_cache(ATTN_Q4C, 0, "contiguous_cache_q4c_keys_equals_pool_and_attn_sdpa_on_gathered_rows");
    test_grouped_cache(ATTN_Q2C, 0, "contiguous_cache_q2c_keys_equals_pool_and_attn_sdpa_on_gathered_rows");
    /* KIVI's residual window: R recent positions in f16 besides the group being filled */
    test_grouped_cache(ATTN_Q4C, 64, "contiguous_cache_q4c_keys_residual_64_equals_pool_and_attn_sdpa_on_gathered_rows");
    test_grouped_cache(ATTN_Q2C, 128, "contiguous_cache_q2c_keys_residual_128_equals_pool_and_attn_sdpa_on_gathered_rows");
    static const struct { attn_dtype keys, values; int64_t P, pages, R; const char *name; } WINDOWS[] = {
        {ATTN_Q4C, ATTN_F32, 32, 40, 64, "random_program_q4c_keys_residual_64_page_32"},
        {ATTN_Q2C, ATTN_F16, 64, 24, 128, "random_program_q2c_keys_residual_128_page_64"},
        {ATTN_Q4C, ATTN_BF16, 256, 12, 128, "random_program_q4c_keys_residual_128_page_256"}};
    for (int t = 0; t < 3; t++) {
        model_keys = WINDOWS[t].keys, model_residual = WINDOWS[t].R;
        random_program(WINDOWS[t].name, WINDOWS[t].values, WINDOWS[t].P, WINDOWS[t].pages, 400);
    }
    model_keys = 0, model_residual = 0;
    test_residual_errors();
    test_grouped_truncate_saturates();
    /* Head-major pools: the same random programs, each against its contiguous copies. */
    model_head_major = 1;
    random_program("random_program_head_major_f32_page_16", ATTN_F32, 16, 24, 400);
    random_program("random_program_head_major_bf16_page_256", ATTN_BF16, 256, 5, 160);
    model_keys = ATTN_Q4C, model_residual = 64;
    random_program("random_program_head_major_q4c_keys_residual_64_page_32", ATTN_F32, 32, 40, 400);
    model_keys = 0, model_residual = 0, model_head_major = 0;
    test_head_major_view();
    test_plan_after_growth(0), test_plan_after_growth(ATTN_Q4C);
    test_plan_after_pool_made_again();
    model_programs(400);
    views_stress(300);
    threads_stress();
    return n_failed ? 1 : 0;
}
