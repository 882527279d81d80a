/* test_varlen.c -- ragged batches (attn_sdpa_varlen, attn_sdpa_varlen_backward):
 * every sequence bitwise equal to attn_sdpa (and attn_sdpa_backward) called
 * on that sequence alone, for random mixes of lengths (sequences of no rows
 * included), f32 and f64, f16 and bf16 keys and values, 1, 2 and 3 threads,
 * and every option: per-sequence masks (bool and float, broadcast), both
 * causal alignments, the scale, GQA, soft-capping, ALiBi, windows, sinks,
 * RoPE, dropout, the bf16 compute mode; the kernels that ran (flash, decode,
 * exact); a workspace (the backward's too: too small refuses before any
 * gradient is written); the backward of one long sequence beside a hundred
 * short ones run as one job (its one verbose line, as many workers as
 * threads); and the errors of the offsets, each reported before anything
 * is written.
 *
 * Prints "ok NAME" or "FAIL NAME: why"; exits 1 if any failed. */
#include "attn.h"
#include "naive.h"
#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "rng.h"
static int64_t below(int64_t n) { return (int64_t)(uniform() * (double)n) % n; }

/* A buffer of n random values of dtype (f32, f64, f16, bf16), or of bools. */
static void *random_buf(attn_dtype dtype, int64_t n) {
    size_t size = attn_dtype_size(dtype);
    unsigned char *p = malloc((size_t)(n > 0 ? n : 1) * size);
    for (int64_t i = 0; i < n; i++) {
        double x = 2 * uniform() - 1;
        if (dtype == ATTN_F64) ((double *)(void *)p)[i] = x;
        else if (dtype == ATTN_F32) ((float *)(void *)p)[i] = (float)x;
        else if (dtype == ATTN_F16) ((uint16_t *)(void *)p)[i] = attn_f32_to_f16((float)x);
        else if (dtype == ATTN_BF16) ((uint16_t *)(void *)p)[i] = attn_f32_to_bf16((float)x);
        else p[i] = uniform() < 0.8;
    }
    return p;
}

/* One ragged batch and how to run it. */
typedef struct vcase {
    const char *name;
    attn_dtype dtype, kv_dtype;
    int64_t Hq, Hk, E, Ev;
    int B;
    int64_t max_len;     /* lengths drawn from 0 .. max_len (some forced 0) */
    int decode;          /* 1: one sequence of 3 queries against 2100 keys, the decode kernel's;
                          * 2: every sequence 1..8 queries (the decode kernel's) */
    attn_causal causal;
    int has_scale, alibi, sinks, rope, bf16, strided;
    double softcap, dropout;
    int64_t window;
    int mask;            /* 0 none, 1 bool (Hq, L, S), 2 float (L, S), 3 bool (1, S) broadcast */
} vcase;

/* The batch's tensors, packed: q (Tq, Hq, E), k (Tk, Hk, E), v (Tk, Hk, Ev);
 * strided ones sit in buffers with one spare head of room between rows. */
typedef struct batch {
    int64_t cu_q[64], cu_k[64], Tq, Tk;
    attn_tensor q, k, v, masks[64], alibi, sinks;
    const attn_tensor *mask_ptr[64];
    double slopes[16], sink[16];
    attn_rope_options rope;
    attn_sdpa_options o;
} batch;

static void packed(attn_tensor *t, attn_dtype dtype, int64_t T, int64_t H, int64_t X, int strided) {
    int64_t shape[3] = {T, H, X}, strides[3] = {(H + strided) * X, X, 1};
    attn_tensor_init(t, random_buf(dtype, T * (H + strided) * X), dtype, 3, shape, strides, NULL);
}

static void make_batch(batch *bt, const vcase *c) {
    memset(bt, 0, sizeof *bt);
    bt->cu_q[0] = bt->cu_k[0] = 0;
    for (int b = 0; b < c->B; b++) {
        int64_t L = below(c->max_len + 1), S = below(c->max_len + 1);
        if (b % 5 == 3) L = 0; /* no queries */
        if (b % 7 == 5) S = 0; /* queries, no keys */
        if (c->causal == ATTN_CAUSAL_TOP_LEFT && S == 0 && L > 0) S = 1 + below(4); /* keep most rows seeing keys */
        if (c->decode == 1 && b == 1) L = 3, S = 2100;
        if (c->decode == 2 && L > 0) L = 1 + b % 8;
        bt->cu_q[b + 1] = bt->cu_q[b] + L, bt->cu_k[b + 1] = bt->cu_k[b] + S;
    }
    bt->Tq = bt->cu_q[c->B], bt->Tk = bt->cu_k[c->B];
    packed(&bt->q, c->dtype, bt->Tq, c->Hq, c->E, c->strided);
    packed(&bt->k, c->kv_dtype, bt->Tk, c->Hk, c->E, c->strided);
    packed(&bt->v, c->kv_dtype, bt->Tk, c->Hk, c->Ev, 0);
    bt->o = attn_sdpa_options_default();
    bt->o.causal = c->causal, bt->o.has_scale = c->has_scale, bt->o.scale = 0.3, bt->o.softcap = c->softcap;
    bt->o.window = c->window, bt->o.dropout_p = c->dropout, bt->o.dropout_seed = 1234;
    bt->o.compute = c->bf16 ? ATTN_COMPUTE_BF16 : ATTN_COMPUTE_F32;
    int64_t hs[1] = {c->Hq};
    attn_alibi_slopes(bt->slopes, c->Hq, NULL);
    for (int64_t h = 0; h < c->Hq; h++) bt->sink[h] = 0.5 * (double)h - 1;
    attn_tensor_init(&bt->alibi, bt->slopes, ATTN_F64, 1, hs, NULL, NULL);
    attn_tensor_init(&bt->sinks, bt->sink, ATTN_F64, 1, hs, NULL, NULL);
    if (c->alibi) bt->o.alibi_slopes = &bt->alibi;
    if (c->sinks) bt->o.sinks = &bt->sinks;
    bt->rope = attn_rope_options_default();
    bt->rope.position_offset = 3;
    if (c->rope) bt->o.rope = &bt->rope;
    for (int b = 0; c->mask && b < c->B; b++) {
        int64_t L = bt->cu_q[b + 1] - bt->cu_q[b], S = bt->cu_k[b + 1] - bt->cu_k[b];
        if (L == 0 || S == 0) continue; /* not read: left NULL */
        int64_t s3[3] = {c->Hq, L, S}, s2[2] = {L, S}, s1[2] = {1, S};
        if (c->mask == 1) attn_tensor_init(&bt->masks[b], random_buf(ATTN_BOOL, c->Hq * L * S), ATTN_BOOL, 3, s3, NULL, NULL);
        if (c->mask == 2) attn_tensor_init(&bt->masks[b], random_buf(c->dtype, L * S), c->dtype, 2, s2, NULL, NULL);
        if (c->mask == 3) attn_tensor_init(&bt->masks[b], random_buf(ATTN_BOOL, S), ATTN_BOOL, 2, s1, NULL, NULL);
        bt->mask_ptr[b] = &bt->masks[b];
    }
}

static void free_batch(batch *bt, int B) {
    free(bt->q.data), free(bt->k.data), free(bt->v.data);
    for (int b = 0; b < B; b++) free(bt->masks[b].data);
}

/* Rows r0 .. r0+n-1 of a packed (T, H, X) tensor as (H, n, X), or of a
 * packed (T, H) as (H, n): attn_sdpa's view of one sequence, written here
 * from the definition in attn.h. */
static attn_tensor view(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.data = (char *)t->data + r0 * t->strides[0] * (int64_t)attn_dtype_size(t->dtype);
    v.shape[0] = t->shape[1], v.strides[0] = t->strides[1];
    v.shape[1] = n, v.strides[1] = t->strides[0];
    return v;
}

static attn_tensor zeros(attn_dtype dtype, int rank, const int64_t *shape) {
    attn_tensor t;
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    attn_tensor_init(&t, calloc((size_t)(n > 0 ? n : 1), attn_dtype_size(dtype)), dtype, rank, shape, NULL, NULL);
    return t;
}

static size_t bytes_of(const attn_tensor *t) {
    int64_t n = attn_tensor_numel(t);
    return (size_t)n * attn_dtype_size(t->dtype);
}

/* The expected rows of a sequence with queries but no keys. */
static int empty_rows_ok(const attn_tensor *out, const attn_tensor *lse, int64_t r0, int64_t n, const batch *bt) {
    for (int64_t i = r0; i < r0 + n; i++)
        for (int64_t h = 0; h < out->shape[1]; h++) {
            double want = bt->o.sinks ? bt->sink[h] : -INFINITY, got;
            for (int64_t e = 0; e < out->shape[2]; e++) {
                int64_t off = (i * out->shape[1] + h) * out->shape[2] + e;
                double x = out->dtype == ATTN_F32 ? ((float *)out->data)[off] : ((double *)out->data)[off];
                if (x != 0) return 0;
            }
            int64_t off = i * out->shape[1] + h;
            got = lse->dtype == ATTN_F32 ? ((float *)lse->data)[off] : ((double *)lse->data)[off];
            if (lse->dtype == ATTN_F32) want = (float)want;
            if (got != want) return 0;
        }
    return 1;
}

/* The kernel attn_sdpa takes for one sequence of L queries (attn.h,
 * "Numerics"): f64 the exact one; f32 is split over the keys (decode) for
 * 1 to 8 queries, unless RoPE rotates the keys (done in flash's packing
 * only), else tiled (flash). Random lengths send a case's sequences to
 * either, whatever it was written for. */
static const char *sequence_kernel(const vcase *c, int64_t L) {
    return c->dtype == ATTN_F64 ? "exact" : L <= 8 && !c->rope ? "decode" : "flash";
}

/* Forward and backward of one case at 1, 2 and 3 threads, each sequence
 * against attn_sdpa (attn_sdpa_backward) on its own, on the kernel it
 * takes alone; the batch's verbose line names flash when any sequence ran
 * on it, else decode, else exact (varlen.c's order), or none. */
static void test_case(const vcase *c) {
    batch bt;
    make_batch(&bt, c);
    int64_t so[3] = {bt.Tq, c->Hq, c->Ev}, sl[2] = {bt.Tq, c->Hq};
    int64_t sdq[3] = {bt.Tq, c->Hq, c->E}, sdk[3] = {bt.Tk, c->Hk, c->E}, sdv[3] = {bt.Tk, c->Hk, c->Ev};
    attn_tensor ref_out = zeros(c->dtype, 3, so), ref_lse = zeros(c->dtype, 2, sl);
    attn_tensor dout;
    attn_tensor_init(&dout, random_buf(c->dtype, bt.Tq * c->Hq * c->Ev), c->dtype, 3, so, NULL, NULL);
    int backward = c->kv_dtype == c->dtype && !c->bf16;
    attn_tensor ref_dq = zeros(c->dtype, 3, sdq), ref_dk = zeros(c->dtype, 3, sdk), ref_dv = zeros(c->dtype, 3, sdv);
    char name[160];
    attn_error err;
    /* the reference: one attn_sdpa per sequence, and one backward */
    int ref_ok = 1, empty_ok = 1, took[3] = {0, 0, 0}; /* sequences on flash, decode, exact */
    static const char *const KERNELS[3] = {"flash", "decode", "exact"};
    for (int b = 0; b < c->B; b++) {
        int64_t L = bt.cu_q[b + 1] - bt.cu_q[b], S = bt.cu_k[b + 1] - bt.cu_k[b];
        if (L == 0 || S == 0) continue;
        attn_tensor q = view(&bt.q, bt.cu_q[b], L), k = view(&bt.k, bt.cu_k[b], S), v = view(&bt.v, bt.cu_k[b], S);
        attn_tensor out = view(&ref_out, bt.cu_q[b], L), lse = view(&ref_lse, bt.cu_q[b], L);
        attn_sdpa_options o = bt.o;
        o.mask = bt.mask_ptr[b], o.dropout_seed = bt.o.dropout_seed + (uint64_t)b;
        char alone[32];
        verbose_begin();
        attn_status st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err);
        verbose_end(alone, sizeof alone, NULL, 0);
        const char *rule = sequence_kernel(c, L);
        for (int i = 0; i < 3; i++) took[i] |= strcmp(rule, KERNELS[i]) == 0;
        if (st) printf("# reference sequence %d: %s\n", b, err.message), ref_ok = 0;
        else if (strcmp(alone, rule) != 0) /* attn_sdpa alone must follow the rule too */
            printf("# sequence %d (L=%lld, S=%lld) alone ran %s, not %s\n", b, (long long)L, (long long)S, alone, rule), ref_ok = 0;
        if (!backward || st) continue;
        attn_tensor dq = view(&ref_dq, bt.cu_q[b], L), dk = view(&ref_dk, bt.cu_k[b], S), dv = view(&ref_dv, bt.cu_k[b], S);
        attn_tensor d = view(&dout, bt.cu_q[b], L);
        if ((st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &d, &q, &k, &v, &out, &lse, &o, &err)))
            printf("# reference backward %d: %s\n", b, err.message), ref_ok = 0;
    }
    for (int threads = 1; threads <= 3; threads++) {
        attn_tensor out = zeros(c->dtype, 3, so), lse = zeros(c->dtype, 2, sl);
        attn_context ctx = attn_context_default();
        ctx.num_threads = threads;
        attn_sdpa_options o = bt.o;
        o.context = &ctx;
        char kernel[32];
        verbose_begin();
        attn_status st = attn_sdpa_varlen(&out, &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c->B,
                                          c->mask ? bt.mask_ptr : NULL, &o, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        for (int b = 0; !st && b < c->B; b++) {
            int64_t L = bt.cu_q[b + 1] - bt.cu_q[b], S = bt.cu_k[b + 1] - bt.cu_k[b];
            if (L > 0 && S == 0) empty_ok &= empty_rows_ok(&out, &lse, bt.cu_q[b], L, &bt);
            if (L > 0 && S == 0) /* the reference has zeros there: compare the rest bitwise */
                memcpy((char *)out.data + bt.cu_q[b] * c->Hq * c->Ev * attn_dtype_size(c->dtype),
                       (char *)ref_out.data + bt.cu_q[b] * c->Hq * c->Ev * attn_dtype_size(c->dtype),
                       (size_t)(L * c->Hq * c->Ev) * attn_dtype_size(c->dtype)),
                    memcpy((char *)lse.data + bt.cu_q[b] * c->Hq * attn_dtype_size(c->dtype),
                           (char *)ref_lse.data + bt.cu_q[b] * c->Hq * attn_dtype_size(c->dtype),
                           (size_t)(L * c->Hq) * attn_dtype_size(c->dtype));
        }
        const char *want = took[0] ? "flash" : took[1] ? "decode" : took[2] ? "exact" : "none";
        snprintf(name, sizeof name, "varlen_%s_threads%d", c->name, threads);
        if (c->decode == 2 && took[1] && !st) { /* one job for all: as many workers given as threads, whatever each has */
            const char *t = strstr(verbose_last_line, " threads=");
            int ran = 0, given = 0;
            if (t) sscanf(t, " threads=%d/%d", &ran, &given);
            char tname[200];
            snprintf(tname, sizeof tname, "varlen_%s_one_decode_job_threads%d", c->name, threads);
            check(given == threads, tname, "the line gives %d workers (want %d): %s", given, threads, verbose_last_line);
        }
        if (st) check(0, name, "%s", err.message);
        else
            check(ref_ok && empty_ok && strcmp(kernel, want) == 0 && !memcmp(out.data, ref_out.data, bytes_of(&out)) &&
                      !memcmp(lse.data, ref_lse.data, bytes_of(&lse)),
                  name, "reference %s, empty rows %s, kernel %s (want %s), out %s, lse %s", ref_ok ? "ok" : "failed",
                  empty_ok ? "ok" : "wrong", kernel, want, memcmp(out.data, ref_out.data, bytes_of(&out)) ? "differs" : "same",
                  memcmp(lse.data, ref_lse.data, bytes_of(&lse)) ? "differs" : "same");
        if (backward && !st) { /* the gradients from the reference's out and lse */
            attn_tensor dq = zeros(c->dtype, 3, sdq), dk = zeros(c->dtype, 3, sdk), dv = zeros(c->dtype, 3, sdv);
            memset(dq.data, 0x7f, bytes_of(&dq)), memset(dk.data, 0x7f, bytes_of(&dk)), memset(dv.data, 0x7f, bytes_of(&dv));
            st = attn_sdpa_varlen_backward(&dq, &dk, &dv, &dout, &bt.q, &bt.k, &bt.v, &ref_out, &ref_lse, bt.cu_q, bt.cu_k,
                                           c->B, c->mask ? bt.mask_ptr : NULL, &o, &err);
            snprintf(name, sizeof name, "varlen_backward_%s_threads%d", c->name, threads);
            if (st) check(0, name, "%s", err.message);
            else
                check(!memcmp(dq.data, ref_dq.data, bytes_of(&dq)) && !memcmp(dk.data, ref_dk.data, bytes_of(&dk)) &&
                          !memcmp(dv.data, ref_dv.data, bytes_of(&dv)),
                      name, "dq %s, dk %s, dv %s", memcmp(dq.data, ref_dq.data, bytes_of(&dq)) ? "differs" : "same",
                      memcmp(dk.data, ref_dk.data, bytes_of(&dk)) ? "differs" : "same",
                      memcmp(dv.data, ref_dv.data, bytes_of(&dv)) ? "differs" : "same");
            free(dq.data), free(dk.data), free(dv.data);
        }
        free(out.data), free(lse.data);
    }
    free(ref_out.data), free(ref_lse.data), free(dout.data), free(ref_dq.data), free(ref_dk.data), free(ref_dv.data);
    free_batch(&bt, c->B);
}

/* A sequence the decode kernel takes (3 queries against 2100 keys) beside
 * ones flash takes: each on attn_sdpa's kernel, the line naming flash. */
static void test_decode_in_batch(void) {
    vcase c = {"decode_mix", ATTN_F32, ATTN_F32, 4, 2, 64, 64, 4, 60, 1, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    test_case(&c);
}

/* Batches of decode sequences only (1..8 queries each, every causal
 * alignment), run as one decode job: each sequence bitwise attn_sdpa's on
 * it alone, and the job given every thread even when no sequence alone has
 * work for more than one (one head, a few keys each). */
static void test_decode_batches(void) {
    /* name, dtype, kv dtype, Hq, Hk, E, Ev, B, max_len, decode, causal, ... */
    static const vcase CASES[] = {
        {"decode_short_one_head", ATTN_F32, ATTN_F32, 1, 1, 32, 32, 40, 120, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"decode_gqa_long", ATTN_F32, ATTN_F32, 8, 2, 64, 64, 20, 5000, 2, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"decode_top_left_f16", ATTN_F32, ATTN_F16, 4, 4, 40, 24, 17, 3000, 2, ATTN_CAUSAL_TOP_LEFT, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0},
        {"decode_no_causal_masks", ATTN_F32, ATTN_F32, 2, 1, 16, 16, 25, 2500, 2, ATTN_CAUSAL_NONE, 1, 0, 0, 0, 0, 0, 5, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_case(&CASES[i]);
}

/* The mask of a sequence without queries or keys is never read, so it may
 * lie anywhere, over out or dq too: the forward, the backward and a
 * plan's run take it and give the bits they give without it. The mask of
 * a sequence that reads it, over out, is still refused. tq: (6, 1, 4). */
static void test_unread_mask(const attn_tensor *tq) {
    float out[24], ref[24], lse[6], dq[24], dk[24], dv[24], dq_ref[24];
    int64_t s[3] = {6, 1, 4}, sl[2] = {6, 1}, sm[2] = {1, 3};
    attn_tensor to, tl, tdq, tdk, tdv, over;
    attn_tensor_init(&to, out, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&tdq, dq, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tdk, dk, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&tdv, dv, ATTN_F32, 3, s, NULL, NULL);
    int64_t cu_q[4] = {0, 0, 6, 6}, cu_k[4] = {0, 3, 6, 6}; /* (L, S): (0, 3), (6, 3), (0, 0) */
    attn_error err;
    attn_status st = attn_sdpa_varlen(&to, &tl, tq, tq, tq, cu_q, cu_k, 3, NULL, NULL, &err);
    memcpy(ref, out, sizeof out);
    if (!st) st = attn_sdpa_varlen_backward(&tdq, &tdk, &tdv, tq, tq, tq, tq, &to, &tl, cu_q, cu_k, 3, NULL, NULL, &err);
    memcpy(dq_ref, dq, sizeof dq);
    for (int w = 0; w < 2 && !st; w++) { /* over out, then over dq (a bool mask of 3 keys) */
        attn_tensor_init(&over, w ? (void *)dq : (void *)out, ATTN_BOOL, 2, sm, NULL, NULL);
        const attn_tensor *masks[3] = {&over, NULL, NULL};
        for (int i = 0; i < 24; i++) out[i] = dq[i] = -7;
        st = attn_sdpa_varlen(&to, &tl, tq, tq, tq, cu_q, cu_k, 3, masks, NULL, &err);
        if (!st) st = attn_sdpa_varlen_backward(&tdq, &tdk, &tdv, tq, tq, tq, tq, &to, &tl, cu_q, cu_k, 3, masks, NULL, &err);
    }
    check(st == ATTN_OK && !memcmp(out, ref, sizeof out) && !memcmp(dq, dq_ref, sizeof dq), "varlen_unread_mask_anywhere",
          "status %d: %s", (int)st, err.message);
    /* the third sequence has queries but no keys: its mask is not read either */
    attn_tensor_init(&over, out, ATTN_BOOL, 2, sm, NULL, NULL);
    const attn_tensor *last[3] = {NULL, NULL, &over};
    int64_t cu_q2[4] = {0, 0, 3, 6}, cu_k2[4] = {0, 3, 6, 6};
    st = attn_sdpa_varlen(&to, &tl, tq, tq, tq, cu_q2, cu_k2, 3, last, NULL, &err);
    check(st == ATTN_OK, "varlen_unread_mask_of_keyless_sequence", "status %d: %s", (int)st, err.message);
    size_t pb, ws;
    attn_sdpa_plan *plan;
    const attn_tensor *first[3] = {&over, NULL, NULL}, *read[3] = {NULL, &over, NULL};
    void *mem = attn_sdpa_plan_bytes(&pb, 3, &err) ? NULL : malloc(pb), *work = malloc(1 << 20);
    st = attn_sdpa_varlen_plan_init(&plan, mem, pb, &ws, &to, &tl, tq, tq, tq, cu_q, cu_k, 3, first, NULL, &err);
    for (int i = 0; i < 24; i++) out[i] = -7;
    if (!st) st = attn_sdpa_run(plan, &to, &tl, tq, tq, tq, work, 1 << 20, &err);
    check(st == ATTN_OK && !memcmp(out, ref, sizeof out), "varlen_plan_unread_mask_anywhere", "status %d: %s", (int)st,
          err.message);
    st = attn_sdpa_varlen(&to, &tl, tq, tq, tq, cu_q, cu_k, 3, read, NULL, &err);
    check(st == ATTN_ERR_STRIDE && strncmp(err.message, "sequence 1: ", 12) == 0, "varlen_error_out_over_a_read_mask",
          "status %d: %s", (int)st, err.message);
    free(mem), free(work);
}

/* Options attn_sdpa refuses are refused by a batch whose sequences all
 * lack keys (or queries), which plans no sequence: they were taken, and
 * the keyless rows written (out 0, lse -inf). */
static void test_options_without_plans(void) {
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8], lse[2];
    int64_t s[3] = {2, 1, 4}, s0[3] = {0, 1, 4}, sl[2] = {2, 1}, zs[3] = {0, 0, 0}, cu_q[2] = {0, 2}, cu_k[2] = {0, 0};
    int64_t cu_none[2] = {0, 0}, three = 3;
    attn_tensor tq, tk, to, tl, ts, eq;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tk, q, ATTN_F32, 3, s0, zs, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&eq, q, ATTN_F32, 3, s0, zs, NULL);
    double slopes[3] = {1, 2, 3};
    attn_tensor_init(&ts, slopes, ATTN_F64, 1, &three, NULL, NULL);
    attn_rope_options rope = attn_rope_options_default();
    rope.rotary_dim = 3;
    static const struct {
        const char *name;
        attn_status want;
        const char *says;
    } CASES[] = {
        {"causal_mode", ATTN_ERR_OPTION, "causal mode 7 is not an attn_causal value"},
        {"softcap", ATTN_ERR_OPTION, "softcap is -1; it must be finite and >= 0 (0: none)"},
        {"window_without_causal", ATTN_ERR_OPTION, "a sliding window needs a causal mode"},
        {"dropout", ATTN_ERR_OPTION, "dropout_p is 2; it must be from 0 to 1"},
        {"scale", ATTN_ERR_SCALE, "scale is nan; it must be finite"},
        {"alibi_shape", ATTN_ERR_SHAPE, "alibi_slopes must have shape (1,), one value per query head"},
        {"rope_dim", ATTN_ERR_SHAPE, "the rotary dimension is 3; it must be even and at most E = 4"},
    };
    for (int c = 0; c < 7; c++) {
        attn_sdpa_options o = attn_sdpa_options_default();
        if (c == 0) o.causal = (attn_causal)7;
        if (c == 1) o.softcap = -1;
        if (c == 2) o.window = 3;
        if (c == 3) o.dropout_p = 2;
        if (c == 4) o.has_scale = 1, o.scale = NAN;
        if (c == 5) o.alibi_slopes = &ts;
        if (c == 6) o.rope = &rope;
        for (int i = 0; i < 8; i++) out[i] = -7;
        attn_error e1, e2, e3;
        attn_status f = attn_sdpa_varlen(&to, &tl, &tq, &tk, &tk, cu_q, cu_k, 1, NULL, &o, &e1);
        attn_status b = attn_sdpa_varlen_backward(&to, NULL, NULL, &tq, &tq, &tk, &tk, &tq, &tl, cu_q, cu_k, 1, NULL, &o, &e2);
        attn_status n = attn_sdpa_varlen(&eq, NULL, &eq, &tq, &tq, cu_none, cu_q, 1, NULL, &o, &e3); /* no queries */
        char name[96];
        snprintf(name, sizeof name, "varlen_no_plans_refuse_%s", CASES[c].name);
        check(f == CASES[c].want && b == f && n == f && !strcmp(e1.message, e2.message) && strstr(e1.message, CASES[c].says) &&
                  out[0] == -7 && out[7] == -7,
              name, "forward %d, backward %d, no queries %d: %s", (int)f, (int)b, (int)n, e1.message);
    }
}

/* The offsets' errors, each before anything is written. */
static void test_errors(void) {
    float q[6 * 1 * 4], out[6 * 1 * 4];
    for (int i = 0; i < 24; i++) q[i] = (float)i / 24, out[i] = -7;
    int64_t s[3] = {6, 1, 4};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, s, NULL, NULL);
    struct {
        const char *name;
        int64_t cu_q[4], cu_k[4];
        int64_t batch;
        attn_status want;
        const char *says;
    } cases[] = {
        {"varlen_error_decreasing", {0, 4, 2, 6}, {0, 2, 4, 6}, 3, ATTN_ERR_ARGUMENT, "decreases at 2"},
        {"varlen_error_start", {1, 2, 4, 6}, {0, 2, 4, 6}, 3, ATTN_ERR_ARGUMENT, "cu_seqlens_q[0] is 1"},
        {"varlen_error_end_short", {0, 2, 4, 5}, {0, 2, 4, 6}, 3, ATTN_ERR_ARGUMENT, "has 6 rows"},
        {"varlen_error_end_long_k", {0, 2, 4, 6}, {0, 2, 4, 7}, 3, ATTN_ERR_ARGUMENT, "cu_seqlens_k[3] is 7"},
        {"varlen_error_overflowing", {0, INT64_MAX, INT64_MIN, 6}, {0, 2, 4, 6}, 3, ATTN_ERR_ARGUMENT, "decreases"},
        {"varlen_error_batch", {0, 2, 4, 6}, {0, 2, 4, 6}, -1, ATTN_ERR_ARGUMENT, "batch is -1"},
    };
    attn_error err;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_status st = attn_sdpa_varlen(&to, NULL, &tq, &tq, &tq, cases[i].cu_q, cases[i].cu_k, cases[i].batch, NULL,
                                          NULL, &err);
        int untouched = 1;
        for (int e = 0; e < 24; e++) untouched &= out[e] == -7;
        check(st == cases[i].want && strstr(err.message, cases[i].says) && untouched, cases[i].name, "status %d: %s%s",
              (int)st, err.message, untouched ? "" : " (out written)");
    }
    int64_t cu[4] = {0, 2, 4, 6};
    attn_status st = attn_sdpa_varlen(&to, NULL, &tq, &tq, &tq, NULL, cu, 3, NULL, NULL, &err);
    check(st == ATTN_ERR_NULL, "varlen_error_null_offsets", "status %d: %s", (int)st, err.message);
    /* a sequence's mask that does not fit it: named by the sequence */
    int64_t sm[2] = {3, 2};
    unsigned char keep[6] = {1, 1, 1, 1, 1, 1};
    attn_tensor m;
    attn_tensor_init(&m, keep, ATTN_BOOL, 2, sm, NULL, NULL);
    const attn_tensor *masks[3] = {NULL, &m, NULL};
    st = attn_sdpa_varlen(&to, NULL, &tq, &tq, &tq, cu, cu, 3, masks, NULL, &err);
    check(st == ATTN_ERR_MASK && strncmp(err.message, "sequence 1: ", 12) == 0 && out[0] == -7, "varlen_error_sequence_mask",
          "status %d: %s", (int)st, err.message);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &m;
    st = attn_sdpa_varlen(&to, NULL, &tq, &tq, &tq, cu, cu, 3, NULL, &o, &err);
    check(st == ATTN_ERR_OPTION, "varlen_error_options_mask", "status %d: %s", (int)st, err.message);
    o = attn_sdpa_options_default();
    o.total_keys = 9;
    st = attn_sdpa_varlen(&to, NULL, &tq, &tq, &tq, cu, cu, 3, NULL, &o, &err);
    check(st == ATTN_ERR_OPTION, "varlen_error_pieces", "status %d: %s", (int)st, err.message);
    st = attn_sdpa_varlen(&tq, NULL, &tq, &tq, &tq, cu, cu, 3, NULL, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "varlen_error_out_is_q", "status %d: %s", (int)st, err.message);
    /* an empty batch: nothing to do */
    int64_t zero[1] = {0}, s0[3] = {0, 1, 4};
    attn_tensor e;
    attn_tensor_init(&e, NULL, ATTN_F32, 3, s0, NULL, NULL);
    st = attn_sdpa_varlen(&e, NULL, &e, &e, &e, zero, zero, 0, NULL, NULL, &err);
    check(st == ATTN_OK, "varlen_empty_batch", "status %d: %s", (int)st, err.message);
    /* Outputs without rows take any strides, 0 too (NumPy's empty arrays
     * have strides 0): no sequence has queries (out, lse, dq), or none has
     * keys (dk, dv). One with rows and stride 0 is still refused. */
    int64_t s0q[3] = {0, 2, 4}, s0l[2] = {0, 2}, zs[3] = {0, 0, 0}, cu0[3] = {0, 0, 0}, cu6[3] = {0, 2, 6};
    float lse0[1] = {-7};
    attn_tensor eq, eo, el, ek, g0[3], grow;
    attn_tensor_init(&eq, q, ATTN_F32, 3, s0q, zs, NULL), attn_tensor_init(&eo, out, ATTN_F32, 3, s0q, zs, NULL);
    attn_tensor_init(&el, lse0, ATTN_F32, 2, s0l, zs, NULL);
    attn_tensor_init(&ek, q, ATTN_F32, 3, s0q, zs, NULL), ek.shape[1] = 1;
    st = attn_sdpa_varlen(&eo, &el, &eq, &tq, &tq, cu0, cu6, 2, NULL, NULL, &err);
    check(st == ATTN_OK && out[0] == -7, "varlen_no_queries_outputs_of_stride_0", "status %d: %s", (int)st, err.message);
    float dk[24], dv[24];
    for (int i = 0; i < 24; i++) dk[i] = dv[i] = -7;
    g0[0] = eq, g0[1] = to, g0[2] = to;
    g0[1].data = dk, g0[2].data = dv;
    st = attn_sdpa_varlen_backward(&g0[0], &g0[1], &g0[2], &eo, &eq, &tq, &tq, &eo, &el, cu0, cu6, 2, NULL, NULL, &err);
    check(st == ATTN_OK && dk[0] == 0 && dv[23] == 0, "varlen_backward_no_queries_dq_of_stride_0", "status %d: %s",
          (int)st, err.message);
    float lse6[12], dq6[48], dout6[48], out6[48];
    for (int i = 0; i < 48; i++) dout6[i] = (float)i / 48, dq6[i] = out6[i] = -7;
    int64_t sl6[2] = {6, 2}, s6[3] = {6, 2, 4}, s6k[3] = {0, 1, 4};
    attn_tensor q6, o6, l6, d6, dq6t, ekk;
    attn_tensor_init(&q6, dout6, ATTN_F32, 3, s6, NULL, NULL), attn_tensor_init(&o6, out6, ATTN_F32, 3, s6, NULL, NULL);
    attn_tensor_init(&l6, lse6, ATTN_F32, 2, sl6, NULL, NULL), attn_tensor_init(&dq6t, dq6, ATTN_F32, 3, s6, NULL, NULL);
    attn_tensor_init(&ekk, q, ATTN_F32, 3, s6k, zs, NULL);
    d6 = q6;
    st = attn_sdpa_varlen(&o6, &l6, &q6, &ekk, &ekk, cu6, cu0, 2, NULL, NULL, &err);
    if (!st) st = attn_sdpa_varlen_backward(&dq6t, &ek, &ek, &d6, &q6, &ekk, &ekk, &o6, &l6, cu6, cu0, 2, NULL, NULL, &err);
    check(st == ATTN_OK && dq6[0] == 0 && out6[47] == 0, "varlen_backward_no_keys_dk_dv_of_stride_0", "status %d: %s",
          (int)st, err.message);
    grow = to, grow.strides[0] = 0;
    st = attn_sdpa_varlen(&grow, NULL, &tq, &tq, &tq, cu, cu, 3, NULL, NULL, &err);
    check(st == ATTN_ERR_STRIDE, "varlen_error_out_with_rows_of_stride_0", "status %d: %s", (int)st, err.message);
    test_unread_mask(&tq);
    test_options_without_plans();
    /* out overlapping the (batch, Hk) k_descale away from each sequence's
     * own row: sequence 1's out is row 0's scale, which sequence 0 reads. */
    float ob[3] = {0, 1, 1};
    unsigned char k8[8] = {0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37};
    int64_t s8o[3] = {2, 1, 1}, s8k[3] = {2, 1, 4}, s8v[3] = {2, 1, 1}, s8d[2] = {2, 1}, s8ds[2] = {1, 1}, cu8[3] = {0, 1, 2};
    attn_tensor q8, o8, k8t, v8, d8;
    attn_tensor_init(&q8, q, ATTN_F32, 3, s8k, NULL, NULL), attn_tensor_init(&o8, ob, ATTN_F32, 3, s8o, NULL, NULL);
    attn_tensor_init(&k8t, k8, ATTN_E4M3, 3, s8k, NULL, NULL), attn_tensor_init(&v8, dout6, ATTN_F32, 3, s8v, NULL, NULL);
    attn_tensor_init(&d8, ob + 1, ATTN_F32, 2, s8d, s8ds, NULL);
    o = attn_sdpa_options_default();
    o.k_descale = &d8;
    st = attn_sdpa_varlen(&o8, NULL, &q8, &k8t, &v8, cu8, cu8, 2, NULL, &o, &err);
    check(st == ATTN_ERR_STRIDE && ob[0] == 0 && ob[1] == 1, "varlen_error_out_over_another_sequences_descale",
          "status %d: %s", (int)st, err.message);
    /* and a plan's run whose out lies over the scales the plan reads */
    float ob2[2] = {0, 0};
    unsigned char plan_mem[8192];
    size_t plan_bytes = 0, ws_bytes = 0;
    attn_sdpa_plan *plan = NULL;
    attn_tensor o8b = o8;
    o8b.data = ob2;
    st = attn_sdpa_plan_bytes(&plan_bytes, 2, &err);
    if (!st && plan_bytes <= sizeof plan_mem)
        st = attn_sdpa_varlen_plan_init(&plan, plan_mem, plan_bytes, &ws_bytes, &o8b, NULL, &q8, &k8t, &v8, cu8, cu8, 2,
                                        NULL, &o, &err);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    if (!st && plan) st = attn_sdpa_run(plan, &o8, NULL, &q8, &k8t, &v8, ws, ws_bytes, &err);
    check(st == ATTN_ERR_STRIDE && ob[0] == 0 && ob[1] == 1, "varlen_plan_run_error_out_over_descale", "status %d: %s",
          (int)st, err.message);
    free(ws);
}

/* Offsets that lie inside an output: refused (ATTN_ERR_STRIDE), the
 * offsets and the output untouched. The rows of a sequence without keys
 * are written after the kernels have run, by its offsets read again then:
 * read from memory a kernel had just written, they sent those writes
 * anywhere. Sequence 0 (2 queries, 3 keys) writes the rows the offsets lie
 * in; sequence 1 has queries but no keys; the backward likewise with the
 * offsets in dq. */
static void test_offsets_in_outputs(void) {
    double q[8], kv[6], dout[8], outb[8], lseb[4], *buf = calloc(16, sizeof(double));
    for (int i = 0; i < 8; i++) q[i] = dout[i] = 0.1 * i;
    for (int i = 0; i < 6; i++) kv[i] = i % 2 ? 1e6 : 2e6; /* out's row 1 above row 0, read as int64 */
    int64_t *cu_q = (int64_t *)(void *)buf, cu_k[3] = {0, 3, 3}, sq[3] = {4, 1, 2}, sk[3] = {3, 1, 2}, sl[2] = {4, 1};
    cu_q[0] = 0, cu_q[1] = 2, cu_q[2] = 4;
    attn_tensor tq, tkv, tinto, tout, tlse, tdout;
    attn_tensor_init(&tq, q, ATTN_F64, 3, sq, NULL, NULL), attn_tensor_init(&tkv, kv, ATTN_F64, 3, sk, NULL, NULL);
    attn_tensor_init(&tinto, buf, ATTN_F64, 3, sq, NULL, NULL); /* its rows 0 and 1 hold cu_q */
    attn_tensor_init(&tout, outb, ATTN_F64, 3, sq, NULL, NULL), attn_tensor_init(&tlse, lseb, ATTN_F64, 2, sl, NULL, NULL);
    attn_tensor_init(&tdout, dout, ATTN_F64, 3, sq, NULL, NULL);
    attn_error err;
    attn_status st = attn_sdpa_varlen(&tinto, NULL, &tq, &tkv, &tkv, cu_q, cu_k, 2, NULL, NULL, &err);
    int kept = cu_q[0] == 0 && cu_q[1] == 2 && cu_q[2] == 4 && buf[6] == 0;
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "cu_seqlens_q") && kept, "varlen_error_out_over_offsets",
          "status %d: %s%s", (int)st, err.message, kept ? "" : " (written)");
    st = attn_sdpa_varlen(&tout, &tlse, &tq, &tkv, &tkv, cu_q, cu_k, 2, NULL, NULL, &err);
    if (!st) st = attn_sdpa_varlen_backward(&tinto, NULL, NULL, &tdout, &tq, &tkv, &tkv, &tout, &tlse, cu_q, cu_k, 2, NULL,
                                            NULL, &err);
    kept = cu_q[0] == 0 && cu_q[1] == 2 && cu_q[2] == 4 && buf[6] == 0;
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "cu_seqlens_q") && kept, "varlen_backward_error_dq_over_offsets",
          "status %d: %s%s", (int)st, err.message, kept ? "" : " (written)");
    free(buf);
}

/* dout broadcast from one value (stride 0 everywhere, as autograd hands
 * the gradient of a sum): an input, taken as attn_sdpa_backward takes it,
 * each sequence's gradients bitwise its call's on its views. */
static void test_backward_broadcast_dout(void) {
    enum { T = 7, H = 2, E = 4 };
    float q[T * H * E], k[T * H * E], v[T * H * E], out[T * H * E], lse[T * H], one[1] = {1};
    for (int i = 0; i < T * H * E; i++) q[i] = (float)i / 56, k[i] = (float)(i % 5) / 5, v[i] = (float)(i % 7) / 7;
    int64_t s[3] = {T, H, E}, sl[2] = {T, H}, zs[3] = {0, 0, 0}, cu[3] = {0, 3, 7};
    attn_tensor tq, tk, tv, to, tl, td;
    attn_tensor_init(&tq, q, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, s, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, s, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL), attn_tensor_init(&td, one, ATTN_F32, 3, s, zs, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    attn_tensor want[3], got[3];
    for (int t = 0; t < 3; t++) want[t] = zeros(ATTN_F32, 3, s), got[t] = zeros(ATTN_F32, 3, s);
    attn_status st = attn_sdpa_varlen(&to, &tl, &tq, &tk, &tv, cu, cu, 2, NULL, &o, &err);
    for (int b = 0; !st && b < 2; b++) {
        int64_t n = cu[b + 1] - cu[b];
        attn_tensor a = view(&tq, cu[b], n), kk = view(&tk, cu[b], n), vv = view(&tv, cu[b], n), oo = view(&to, cu[b], n);
        attn_tensor ll = view(&tl, cu[b], n), dd = view(&td, cu[b], n);
        attn_tensor g0 = view(&want[0], cu[b], n), g1 = view(&want[1], cu[b], n), g2 = view(&want[2], cu[b], n);
        st = attn_sdpa_backward(&g0, &g1, &g2, NULL, &dd, &a, &kk, &vv, &oo, &ll, &o, &err);
    }
    if (!st) st = attn_sdpa_varlen_backward(&got[0], &got[1], &got[2], &td, &tq, &tk, &tv, &to, &tl, cu, cu, 2, NULL, &o, &err);
    int same = 1;
    for (int t = 0; t < 3; t++) same &= !memcmp(got[t].data, want[t].data, bytes_of(&got[t]));
    check(st == ATTN_OK && same, "varlen_backward_broadcast_dout", "status %d: %s%s", (int)st, st ? err.message : "",
          same ? "" : "; gradients differ from attn_sdpa_backward's");
    for (int t = 0; t < 3; t++) free(want[t].data), free(got[t].data);
}

/* With a workspace: the same bits, and one too small fails before writing. */
static void test_workspace(void) {
    vcase c = {"ws", ATTN_F32, ATTN_F32, 2, 1, 32, 32, 5, 90, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    batch bt;
    make_batch(&bt, &c);
    int64_t so[3] = {bt.Tq, 2, 32}, sl[2] = {bt.Tq, 2};
    attn_tensor out[2] = {zeros(ATTN_F32, 3, so), zeros(ATTN_F32, 3, so)}, lse = zeros(ATTN_F32, 2, sl);
    attn_error err;
    attn_status st0 = attn_sdpa_varlen(&out[0], &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, NULL, &bt.o, &err);
    attn_context ctx = attn_context_default();
    ctx.workspace_size = 64;
    ctx.workspace = malloc(1 << 24);
    attn_sdpa_options o = bt.o;
    o.context = &ctx;
    memset(out[1].data, 0x55, bytes_of(&out[1]));
    attn_status small = attn_sdpa_varlen(&out[1], &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, NULL, &o, &err);
    unsigned char *p = out[1].data;
    check(small == ATTN_ERR_WORKSPACE && p[0] == 0x55, "varlen_workspace_too_small", "status %d: %s", (int)small, err.message);
    ctx.workspace_size = 1 << 24;
    attn_status st1 = attn_sdpa_varlen(&out[1], &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, NULL, &o, &err);
    check(!st0 && !st1 && !memcmp(out[0].data, out[1].data, bytes_of(&out[0])), "varlen_workspace", "status %d %d: %s",
          (int)st0, (int)st1, err.message);
    free(ctx.workspace), free(out[0].data), free(out[1].data), free(lse.data);
    free_batch(&bt, c.B);
}

/* A packed GQA batch of T rows: f32 q and dout (T, hq, e), k and v (T, hk,
 * e), and out and lse (T, hq) zeroed for the forward to write. */
typedef struct gqa_batch {
    attn_tensor q, k, v, dout, out, lse;
    int64_t so[3], sk[3]; /* the shapes of q's and k's gradients */
} gqa_batch;

static void gqa_batch_make(gqa_batch *g, int64_t T, int64_t hq, int64_t hk, int64_t e) {
    packed(&g->q, ATTN_F32, T, hq, e, 0), packed(&g->k, ATTN_F32, T, hk, e, 0), packed(&g->v, ATTN_F32, T, hk, e, 0);
    packed(&g->dout, ATTN_F32, T, hq, e, 0);
    int64_t sl[2] = {T, hq};
    g->so[0] = T, g->so[1] = hq, g->so[2] = e, g->sk[0] = T, g->sk[1] = hk, g->sk[2] = e;
    g->out = zeros(ATTN_F32, 3, g->so), g->lse = zeros(ATTN_F32, 2, sl);
}

/* Zeroed dq, dk and dv for b. */
static void gqa_grads(attn_tensor g[3], const gqa_batch *b) {
    g[0] = zeros(ATTN_F32, 3, b->so), g[1] = zeros(ATTN_F32, 3, b->sk), g[2] = zeros(ATTN_F32, 3, b->sk);
}

/* The backward of one long sequence beside a hundred short ones (causal,
 * GQA): bitwise attn_sdpa_backward on each sequence alone at 1, 2 and 3
 * threads, and one job: a single verbose line for the call, the fused
 * kernel's, given as many workers as threads. */
static void test_backward_one_job(void) {
    enum { NB = 101, LONG = 1500, SHORT = 50, HQ = 4, HK = 2, E = 32 };
    int64_t cu[NB + 1];
    cu[0] = 0;
    for (int b = 0; b < NB; b++) cu[b + 1] = cu[b] + (b == 0 ? LONG : SHORT);
    const int64_t T = cu[NB];
    gqa_batch gb;
    gqa_batch_make(&gb, T, HQ, HK, E);
    attn_tensor q = gb.q, k = gb.k, v = gb.v, dout = gb.dout, out = gb.out, lse = gb.lse;
    attn_tensor ref[3];
    gqa_grads(ref, &gb);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    int ok = attn_sdpa_varlen(&out, &lse, &q, &k, &v, cu, cu, NB, NULL, &o, &err) == ATTN_OK;
    for (int b = 0; ok && b < NB; b++) {
        int64_t n = cu[b + 1] - cu[b];
        attn_tensor sq = view(&q, cu[b], n), sk_ = view(&k, cu[b], n), sv = view(&v, cu[b], n);
        attn_tensor s_out = view(&out, cu[b], n), s_lse = view(&lse, cu[b], n), s_do = view(&dout, cu[b], n);
        attn_tensor g[3] = {view(&ref[0], cu[b], n), view(&ref[1], cu[b], n), view(&ref[2], cu[b], n)};
        attn_sdpa_options ob = o;
        ob.dropout_seed = o.dropout_seed + (uint64_t)b;
        ok = attn_sdpa_backward(&g[0], &g[1], &g[2], NULL, &s_do, &sq, &sk_, &sv, &s_out, &s_lse, &ob, &err) == ATTN_OK;
    }
    check(ok, "varlen_backward_long_beside_short_reference", "%s", ok ? "" : err.message);
    for (int threads = 1; ok && threads <= 3; threads++) {
        attn_tensor g[3];
        gqa_grads(g, &gb);
        attn_context ctx = attn_context_default();
        ctx.num_threads = threads;
        attn_sdpa_options ot = o;
        ot.context = &ctx;
        char kernel[32], name[96];
        verbose_begin();
        attn_status st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], &dout, &q, &k, &v, &out, &lse, cu, cu, NB, NULL,
                                                   &ot, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        int same = !st;
        for (int t = 0; t < 3 && same; t++) same = !memcmp(g[t].data, ref[t].data, bytes_of(&g[t]));
        snprintf(name, sizeof name, "varlen_backward_long_beside_short_threads%d", threads);
        check(same, name, "status %d (%s), gradients %s", (int)st, st ? err.message : "", same ? "same" : "differ");
        const char *tw = strstr(verbose_last_line, " threads=");
        int ran = 0, given = 0;
        if (tw) sscanf(tw, " threads=%d/%d", &ran, &given);
        snprintf(name, sizeof name, "varlen_backward_one_job_threads%d", threads);
        check(!st && strncmp(verbose_last_line, "attn: sdpa_varlen_backward ", 27) == 0 &&
                  strcmp(kernel, "flash_backward") == 0 && given == threads,
              name, "the line (want sdpa_varlen_backward, kernel flash_backward, %d workers): %s", threads,
              verbose_last_line);
        for (int t = 0; t < 3; t++) free(g[t].data);
    }
    free(q.data), free(k.data), free(v.data), free(dout.data), free(out.data), free(lse.data);
    for (int t = 0; t < 3; t++) free(ref[t].data);
}

/* Items of a whole GQA group: with one thread, an item takes a group's
 * four query heads and sums their dK and dV itself (heads_per_item=4 on the
 * verbose line, every slice grouped); with three, the two calls' eight
 * group items (two chunks of 256 keys each) would leave one thread two of
 * them end to end, so one call gives a group back to items of one head,
 * with partials (grouped_slices below 16); with eight, each thread takes
 * one group item. The same additions in the same order: bitwise the same
 * gradients at 1, 2, 3, 4 and 8 threads. */
static void test_backward_group_items(void) {
    enum { NB = 2, N = 512, HQ = 8, HK = 2, E = 32, RUNS = 5 };
    int64_t cu[NB + 1];
    for (int b = 0; b <= NB; b++) cu[b] = (int64_t)b * N;
    gqa_batch gb;
    gqa_batch_make(&gb, cu[NB], HQ, HK, E);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_error err;
    attn_status st = attn_sdpa_varlen(&gb.out, &gb.lse, &gb.q, &gb.k, &gb.v, cu, cu, NB, NULL, &o, &err);
    static const int THREADS[RUNS] = {1, 2, 3, 4, 8};
    attn_tensor g[RUNS][3];
    long long grouped[RUNS], slices[RUNS];
    for (int i = 0; i < RUNS; i++) {
        gqa_grads(g[i], &gb);
        attn_context ctx = attn_context_default();
        ctx.num_threads = THREADS[i];
        attn_sdpa_options ot = o;
        ot.context = &ctx;
        char kernel[32];
        verbose_begin();
        if (!st) st = attn_sdpa_varlen_backward(&g[i][0], &g[i][1], &g[i][2], &gb.dout, &gb.q, &gb.k, &gb.v, &gb.out,
                                                &gb.lse, cu, cu, NB, NULL, &ot, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        const char *at = strstr(verbose_last_line, " heads_per_item=4 grouped_slices=");
        grouped[i] = 0, slices[i] = 0;
        if (strcmp(kernel, "flash_backward") == 0 && at) sscanf(at, " heads_per_item=4 grouped_slices=%lld/%lld", &grouped[i], &slices[i]);
    }
    int same = !st;
    for (int i = 1; i < RUNS; i++)
        for (int t = 0; t < 3 && same; t++) same = !memcmp(g[0][t].data, g[i][t].data, bytes_of(&g[0][t]));
    enum { ALL = NB * HQ };
    check(same && grouped[0] == ALL && grouped[2] > 0 && grouped[2] < ALL && grouped[4] == ALL && slices[2] == ALL,
          "varlen_backward_group_items_bitwise_mixed_with_items_of_one_head",
          "status %d (%s), gradients %s, slices in group items: %lld of %d at 1 thread, %lld at 3, %lld at 8", (int)st,
          st ? err.message : "", same ? "same" : "differ", grouped[0], ALL, grouped[2], grouped[4]);
    free(gb.q.data), free(gb.k.data), free(gb.v.data), free(gb.dout.data), free(gb.out.data), free(gb.lse.data);
    for (int i = 0; i < RUNS; i++)
        for (int t = 0; t < 3; t++) free(g[i][t].data);
}

/* The backward's workspace: too small refuses before any gradient is
 * written; large enough gives the gradients of the call without one. */
static void test_backward_workspace(void) {
    vcase c = {"bws", ATTN_F32, ATTN_F32, 4, 2, 32, 32, 6, 120, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    batch bt;
    make_batch(&bt, &c);
    int64_t so[3] = {bt.Tq, 4, 32}, sl[2] = {bt.Tq, 4}, sk[3] = {bt.Tk, 2, 32};
    attn_tensor out = zeros(ATTN_F32, 3, so), lse = zeros(ATTN_F32, 2, sl), dout = zeros(ATTN_F32, 3, so);
    for (int64_t i = 0; i < attn_tensor_numel(&dout); i++) ((float *)dout.data)[i] = (float)(i % 13) / 13.0f - 0.5f;
    attn_error err;
    attn_status st0 = attn_sdpa_varlen(&out, &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, NULL, &bt.o, &err);
    attn_tensor g0[3] = {zeros(ATTN_F32, 3, so), zeros(ATTN_F32, 3, sk), zeros(ATTN_F32, 3, sk)};
    attn_tensor g1[3] = {zeros(ATTN_F32, 3, so), zeros(ATTN_F32, 3, sk), zeros(ATTN_F32, 3, sk)};
    if (!st0) st0 = attn_sdpa_varlen_backward(&g0[0], &g0[1], &g0[2], &dout, &bt.q, &bt.k, &bt.v, &out, &lse, bt.cu_q,
                                              bt.cu_k, c.B, NULL, &bt.o, &err);
    attn_context ctx = attn_context_default();
    ctx.workspace_size = 4096;
    ctx.workspace = malloc(1 << 24);
    attn_sdpa_options o = bt.o;
    o.context = &ctx;
    for (int t = 0; t < 3; t++) memset(g1[t].data, 0x55, bytes_of(&g1[t]));
    attn_status small = attn_sdpa_varlen_backward(&g1[0], &g1[1], &g1[2], &dout, &bt.q, &bt.k, &bt.v, &out, &lse,
                                                  bt.cu_q, bt.cu_k, c.B, NULL, &o, &err);
    int untouched = 1;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < bytes_of(&g1[t]); i++) untouched &= ((unsigned char *)g1[t].data)[i] == 0x55;
    check(small == ATTN_ERR_WORKSPACE && untouched, "varlen_backward_workspace_too_small", "status %d, gradients %s: %s",
          (int)small, untouched ? "untouched" : "WRITTEN", err.message);
    ctx.workspace_size = 1 << 24;
    attn_status st1 = attn_sdpa_varlen_backward(&g1[0], &g1[1], &g1[2], &dout, &bt.q, &bt.k, &bt.v, &out, &lse, bt.cu_q,
                                                bt.cu_k, c.B, NULL, &o, &err);
    int same = !st0 && !st1;
    for (int t = 0; t < 3 && same; t++) same = !memcmp(g0[t].data, g1[t].data, bytes_of(&g0[t]));
    check(same, "varlen_backward_workspace", "status %d %d: %s", (int)st0, (int)st1, err.message);
    free(ctx.workspace), free(out.data), free(lse.data), free(dout.data);
    for (int t = 0; t < 3; t++) free(g0[t].data), free(g1[t].data);
    free_batch(&bt, c.B);
}

/* One size query against its call: every gradient filled with 0x55, the
 * call run with a workspace of `bytes` (NULL: none); *untouched says
 * whether every gradient kept its 0x55. */
static attn_status backward_into(attn_tensor g[3], int *untouched, const attn_tensor *dout, const batch *bt,
                                 const attn_tensor *out, const attn_tensor *lse, int B, const attn_tensor *const *masks,
                                 attn_context *ctx, void *ws, size_t bytes, attn_error *err) {
    for (int t = 0; t < 3; t++) memset(g[t].data, 0x55, bytes_of(&g[t]));
    ctx->workspace = ws, ctx->workspace_size = ws ? bytes : 0;
    attn_sdpa_options o = bt->o;
    o.context = ctx;
    attn_status st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], dout, &bt->q, &bt->k, &bt->v, out, lse, bt->cu_q,
                                               bt->cu_k, B, masks, &o, err);
    *untouched = 1;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < bytes_of(&g[t]); i++) *untouched &= ((unsigned char *)g[t].data)[i] == 0x55;
    return st;
}

/* attn_sdpa_varlen_backward_workspace_size: a workspace of exactly the
 * bytes it gives runs the call, bitwise the call without one; one byte
 * less is refused (ATTN_ERR_WORKSPACE, naming the function) with every
 * gradient unwritten. Ragged batches with sequences of no queries and of
 * no keys (make_batch), f32 (fused kernel, GQA, masks) and f64 (exact),
 * at 1, 2 and 3 threads. */
static void test_backward_workspace_size(void) {
    /* name, dtype, kv dtype, Hq, Hk, E, Ev, B, max_len, decode, causal, scale, alibi, sinks, rope, bf16, strided,
     * softcap, dropout, window, mask */
    static const vcase CASES[] = {
        {"bwsz_f32", ATTN_F32, ATTN_F32, 4, 2, 32, 24, 9, 150, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bwsz_f32_masks_rope", ATTN_F32, ATTN_F32, 2, 2, 16, 16, 12, 70, 0, ATTN_CAUSAL_NONE, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1},
        {"bwsz_f32_one_long", ATTN_F32, ATTN_F32, 4, 1, 32, 32, 6, 40, 1, ATTN_CAUSAL_NONE, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bwsz_f64", ATTN_F64, ATTN_F64, 3, 1, 8, 12, 8, 40, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const vcase *c = &CASES[i];
        batch bt;
        make_batch(&bt, c);
        const attn_tensor *const *masks = c->mask ? bt.mask_ptr : NULL;
        int64_t so[3] = {bt.Tq, c->Hq, c->Ev}, sl[2] = {bt.Tq, c->Hq};
        int64_t sdq[3] = {bt.Tq, c->Hq, c->E}, sdk[3] = {bt.Tk, c->Hk, c->E}, sdv[3] = {bt.Tk, c->Hk, c->Ev};
        attn_tensor out = zeros(c->dtype, 3, so), lse = zeros(c->dtype, 2, sl), dout;
        attn_tensor_init(&dout, random_buf(c->dtype, bt.Tq * c->Hq * c->Ev), c->dtype, 3, so, NULL, NULL);
        attn_tensor g0[3] = {zeros(c->dtype, 3, sdq), zeros(c->dtype, 3, sdk), zeros(c->dtype, 3, sdv)};
        attn_tensor g1[3] = {zeros(c->dtype, 3, sdq), zeros(c->dtype, 3, sdk), zeros(c->dtype, 3, sdv)};
        attn_error err;
        attn_status st = attn_sdpa_varlen(&out, &lse, &bt.q, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c->B, masks, &bt.o, &err);
        int empties = 0; /* the batch has sequences of no queries and of no keys */
        for (int b = 0; b < c->B; b++)
            empties |= (bt.cu_q[b + 1] == bt.cu_q[b] ? 1 : 0) | (bt.cu_k[b + 1] == bt.cu_k[b] ? 2 : 0);
        for (int threads = 1; threads <= 3; threads++) {
            attn_context ctx = attn_context_default();
            ctx.num_threads = threads;
            attn_sdpa_options o = bt.o;
            o.context = &ctx;
            int untouched = 0, same = 0, kept = 0;
            size_t need = 0;
            attn_status ref = st, got = st, small = st;
            if (!st) ref = backward_into(g0, &untouched, &dout, &bt, &out, &lse, c->B, masks, &ctx, NULL, 0, &err);
            if (!ref) ref = attn_sdpa_varlen_backward_workspace_size(&need, &g1[0], &g1[1], &g1[2], &dout, &bt.q, &bt.k,
                                                                     &bt.v, &out, &lse, bt.cu_q, bt.cu_k, c->B, masks,
                                                                     &o, &err);
            /* measured without buffers: every tensor and mask with NULL data, the same bytes */
            size_t bare = 0;
            attn_tensor nq = bt.q, nk = bt.k, nv = bt.v, nout = out, nlse = lse, ndout = dout, ng[3], nmask[64];
            const attn_tensor *nmasks[64];
            nq.data = nk.data = nv.data = nout.data = nlse.data = ndout.data = NULL;
            for (int t = 0; t < 3; t++) ng[t] = g1[t], ng[t].data = NULL;
            for (int b = 0; b < c->B; b++)
                nmask[b] = bt.masks[b], nmask[b].data = NULL, nmasks[b] = bt.mask_ptr[b] ? &nmask[b] : NULL;
            attn_status nst = ref ? ref : attn_sdpa_varlen_backward_workspace_size(
                                              &bare, &ng[0], &ng[1], &ng[2], &ndout, &nq, &nk, &nv, &nout, &nlse,
                                              bt.cu_q, bt.cu_k, c->B, c->mask ? nmasks : NULL, &o, &err);
            char nname[160];
            snprintf(nname, sizeof nname, "varlen_backward_workspace_size_%s_threads%d_without_buffers", c->name, threads);
            check(!nst && bare == need, nname, "status %d (%s), %zu bytes without buffers, %zu with", (int)nst,
                  nst ? err.message : "", bare, need);
            /* the workspace at an odd address: the size covers any alignment */
            char *buf = malloc(need + 1), *ws = buf + 1;
            if (!ref) got = backward_into(g1, &untouched, &dout, &bt, &out, &lse, c->B, masks, &ctx, ws, need, &err);
            same = !ref && !got;
            for (int t = 0; t < 3 && same; t++) same = !memcmp(g0[t].data, g1[t].data, bytes_of(&g0[t]));
            char name[160];
            snprintf(name, sizeof name, "varlen_backward_workspace_size_%s_threads%d", c->name, threads);
            check(same && need > 0 && empties == 3, name, "status %d %d (%s), %zu bytes, gradients %s, empty sequences %d",
                  (int)ref, (int)got, got ? err.message : "", need, same ? "same" : "differ", empties);
            if (!ref && !got)
                small = backward_into(g1, &kept, &dout, &bt, &out, &lse, c->B, masks, &ctx, ws, need - 1, &err);
            snprintf(name, sizeof name, "varlen_backward_workspace_size_%s_threads%d_one_byte_short", c->name, threads);
            check(small == ATTN_ERR_WORKSPACE && kept && strstr(err.message, "attn_sdpa_varlen_backward_workspace_size"),
                  name, "status %d, gradients %s: %s", (int)small, kept ? "untouched" : "WRITTEN", err.message);
            free(buf);
        }
        free(out.data), free(lse.data), free(dout.data);
        for (int t = 0; t < 3; t++) free(g0[t].data), free(g1[t].data);
        free_batch(&bt, c->B);
    }
}

/* The size query refuses what the call refuses, with the same status and
 * message, and each case with its own status (attn.h): bad offsets and
 * batch < 0 ATTN_ERR_ARGUMENT, NULL offsets, out, lse, dout or k and no
 * gradient asked for ATTN_ERR_NULL, a gradient of the wrong shape
 * ATTN_ERR_SHAPE, a 16-bit q ATTN_ERR_DTYPE, a gradient over an input
 * ATTN_ERR_STRIDE, strides whose extent overflows ATTN_ERR_OVERFLOW; and
 * bytes NULL ATTN_ERR_NULL. */
static void test_backward_workspace_size_errors(void) {
    enum { T = 6, H = 2, E = 4 };
    float qd[T * H * E] = {0}, od[T * H * E] = {0}, ld[T * H] = {0}, dq[T * H * E], dk[T * H * E], dv[T * H * E];
    uint16_t hd[T * H * E] = {0};
    int64_t s3[3] = {T, H, E}, s2[2] = {T, H}, bad[3] = {T, H, E + 1};
    attn_tensor q, o, l, gq, gk, gv, wrong, half;
    attn_tensor_init(&q, qd, ATTN_F32, 3, s3, NULL, NULL), attn_tensor_init(&o, od, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&l, ld, ATTN_F32, 2, s2, NULL, NULL), attn_tensor_init(&gq, dq, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&gk, dk, ATTN_F32, 3, s3, NULL, NULL), attn_tensor_init(&gv, dv, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&wrong, dq, ATTN_F32, 3, bad, NULL, NULL), attn_tensor_init(&half, hd, ATTN_F16, 3, s3, NULL, NULL);
    attn_tensor huge = q; /* k whose shape times strides overflows int64 */
    huge.strides[0] = INT64_MAX / 2;
    int64_t cu[3] = {0, 4, 6}, down[3] = {0, 5, 4}, from1[3] = {1, 4, 6};
    struct {
        const char *name;
        attn_tensor *dq, *dk, *dv;
        const attn_tensor *dout, *q, *k, *out, *lse;
        const int64_t *cu_q;
        int64_t batch;
        attn_status want;
        const char *word; /* in the message: the refusal is this case's, not an earlier check's */
    } C[] = {
        {"decreasing_offsets", &gq, &gk, &gv, &o, &q, &q, &o, &l, down, 2, ATTN_ERR_ARGUMENT, "decreases"},
        {"offsets_not_from_0", &gq, &gk, &gv, &o, &q, &q, &o, &l, from1, 2, ATTN_ERR_ARGUMENT, "must be 0"},
        {"offsets_null", &gq, &gk, &gv, &o, &q, &q, &o, &l, NULL, 2, ATTN_ERR_NULL, "cu_seqlens_q is NULL"},
        {"batch_negative", &gq, &gk, &gv, &o, &q, &q, &o, &l, cu, -1, ATTN_ERR_ARGUMENT, "batch is -1"},
        {"dq_shape", &wrong, &gk, &gv, &o, &q, &q, &o, &l, cu, 2, ATTN_ERR_SHAPE, "dq has shape"},
        {"no_gradient", NULL, NULL, NULL, &o, &q, &q, &o, &l, cu, 2, ATTN_ERR_NULL, "all NULL"},
        {"out_null", &gq, &gk, &gv, &o, &q, &q, NULL, &l, cu, 2, ATTN_ERR_NULL, "out (the forward's output) is NULL"},
        {"lse_null", &gq, &gk, &gv, &o, &q, &q, &o, NULL, cu, 2, ATTN_ERR_NULL, "lse (the forward's log-sum-exp) is NULL"},
        {"f16_q", &gq, &gk, &gv, &o, &half, &q, &o, &l, cu, 2, ATTN_ERR_DTYPE, "f16"},
        {"dk_over_q", &gq, &q, &gv, &o, &q, &q, &o, &l, cu, 2, ATTN_ERR_STRIDE, "dk"},
        {"dout_null", &gq, &gk, &gv, NULL, &q, &q, &o, &l, cu, 2, ATTN_ERR_NULL, "dout is NULL"},
        {"k_null", &gq, &gk, &gv, &o, &q, NULL, &o, &l, cu, 2, ATTN_ERR_NULL, "k is NULL"},
        {"k_strides_overflow", &gq, &gk, &gv, &o, &q, &huge, &o, &l, cu, 2, ATTN_ERR_OVERFLOW, "k: shape times strides"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        attn_error e1, e2;
        size_t bytes = 12345;
        attn_status a = attn_sdpa_varlen_backward_workspace_size(&bytes, C[i].dq, C[i].dk, C[i].dv, C[i].dout, C[i].q,
                                                                 C[i].k, &q, C[i].out, C[i].lse, C[i].cu_q, cu,
                                                                 C[i].batch, NULL, NULL, &e1);
        attn_status b = attn_sdpa_varlen_backward(C[i].dq, C[i].dk, C[i].dv, C[i].dout, C[i].q, C[i].k, &q, C[i].out,
                                                  C[i].lse, C[i].cu_q, cu, C[i].batch, NULL, NULL, &e2);
        char name[96];
        snprintf(name, sizeof name, "varlen_backward_workspace_size_refuses_%s", C[i].name);
        check(a == C[i].want && b == C[i].want && strstr(e1.message, C[i].word) && !strcmp(e1.message, e2.message) &&
                  bytes == 12345,
              name, "size query %d (%s), call %d (%s), want %d (\"%s\"), bytes %zu", (int)a, e1.message, (int)b,
              e2.message, (int)C[i].want, C[i].word, bytes);
    }
    attn_error err;
    attn_status st = attn_sdpa_varlen_backward_workspace_size(NULL, &gq, &gk, &gv, &o, &q, &q, &q, &o, &l, cu, cu, 2,
                                                              NULL, NULL, &err);
    check(st == ATTN_ERR_NULL && strstr(err.message, "bytes is NULL"), "varlen_backward_workspace_size_refuses_bytes_null",
          "status %d: %s", (int)st, err.message);
}

/* What a sequence's backward plan refuses of the keys, values and options
 * is refused of a batch with no sequence to plan too (one sequence with
 * queries but no keys), by the backward and its size query alike, with
 * the status (and words) a batch with keys gets, and no gradient written:
 * e4m3 keys, sinks of the wrong shape, per-head scales beside float keys.
 * Without keys they were once taken, and the rows got dq 0. */
static void test_backward_unplanned_batch_checked(void) {
    enum { T = 4, H = 2, E = 4 };
    float qd[T * H * E] = {0}, od[T * H * E] = {0}, ld[T * H] = {0}, dq[T * H * E], dk[T * H * E], dv[T * H * E];
    float sink3[3] = {0, 0, 0}, scales[H] = {1, 1};
    unsigned char k8[T * H * E] = {0};
    int64_t s3[3] = {T, H, E}, s0[3] = {0, H, E}, s2[2] = {T, H}, three = 3, hk = H, cu_q[2] = {0, T};
    int64_t cu_keys[2] = {0, T}, cu_none[2] = {0, 0};
    attn_tensor q, o, l, sinks, descale;
    attn_tensor_init(&q, qd, ATTN_F32, 3, s3, NULL, NULL), attn_tensor_init(&o, od, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&l, ld, ATTN_F32, 2, s2, NULL, NULL), attn_tensor_init(&sinks, sink3, ATTN_F32, 1, &three, NULL, NULL);
    attn_tensor_init(&descale, scales, ATTN_F32, 1, &hk, NULL, NULL);
    for (int c = 0; c < 3; c++) {
        static const char *const NAME[3] = {"e4m3_keys", "sinks_shape", "k_descale_beside_float_keys"};
        attn_sdpa_options opt = attn_sdpa_options_default();
        if (c == 1) opt.sinks = &sinks;
        if (c == 2) opt.k_descale = &descale;
        attn_status st[3];
        char said[3][ATTN_ERROR_MESSAGE_SIZE];
        int untouched = 1;
        for (int keys = 1; keys >= 0; keys--) { /* with keys: the plan's refusal; then none to plan */
            attn_tensor k, g[3];
            attn_tensor_init(&k, c == 0 ? (void *)k8 : (void *)qd, c == 0 ? ATTN_E4M3 : ATTN_F32, 3, keys ? s3 : s0, NULL,
                             NULL);
            attn_tensor_init(&g[0], dq, ATTN_F32, 3, s3, NULL, NULL);
            attn_tensor_init(&g[1], dk, ATTN_F32, 3, keys ? s3 : s0, NULL, NULL);
            attn_tensor_init(&g[2], dv, ATTN_F32, 3, keys ? s3 : s0, NULL, NULL);
            const int64_t *cu_k = keys ? cu_keys : cu_none;
            for (int i = 0; i < T * H * E; i++) dq[i] = dk[i] = dv[i] = -7;
            attn_error err;
            memset(&err, 0, sizeof err);
            size_t bytes = 0;
            int at = keys ? 0 : 1;
            st[at] = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], &o, &q, &k, &k, &o, &l, cu_q, cu_k, 1, NULL, &opt, &err);
            snprintf(said[at], sizeof said[at], "%s", err.message);
            for (int i = 0; i < T * H * E; i++) untouched &= dq[i] == -7 && dk[i] == -7 && dv[i] == -7;
            if (!keys) {
                st[2] = attn_sdpa_varlen_backward_workspace_size(&bytes, &g[0], &g[1], &g[2], &o, &q, &k, &k, &o, &l, cu_q,
                                                                 cu_k, 1, NULL, &opt, &err);
                snprintf(said[2], sizeof said[2], "%s", err.message);
            }
        }
        char name[96];
        snprintf(name, sizeof name, "varlen_backward_without_keys_refuses_%s", NAME[c]);
        /* the refusal each case is for, not an earlier one that a slip in
         * the setup would give all three calls alike */
        static const attn_status WANT[3] = {ATTN_ERR_DTYPE, ATTN_ERR_SHAPE, ATTN_ERR_DTYPE};
        static const char *const WORD[3] = {"e4m3", "sinks", "k_descale"};
        check(st[0] == WANT[c] && st[1] == st[0] && st[2] == st[0] && strstr(said[0], said[1]) &&
                  strstr(said[1], WORD[c]) && !strcmp(said[1], said[2]) && untouched,
              name, "with keys %d (%s), without %d (%s), size query %d (%s), gradients %s", (int)st[0], said[0],
              (int)st[1], said[1], (int)st[2], said[2], untouched ? "untouched" : "WRITTEN");
    }
    /* the control: the same batch without keys and with nothing wrong is
     * taken, and its dq is 0 (no key: no weight on anything) */
    attn_tensor k0, g[3];
    attn_tensor_init(&k0, qd, ATTN_F32, 3, s0, NULL, NULL);
    attn_tensor_init(&g[0], dq, ATTN_F32, 3, s3, NULL, NULL);
    attn_tensor_init(&g[1], dk, ATTN_F32, 3, s0, NULL, NULL), attn_tensor_init(&g[2], dv, ATTN_F32, 3, s0, NULL, NULL);
    for (int i = 0; i < T * H * E; i++) dq[i] = -7;
    attn_sdpa_options plain = attn_sdpa_options_default();
    attn_error err;
    attn_status st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], &o, &q, &k0, &k0, &o, &l, cu_q, cu_none, 1, NULL,
                                               &plain, &err);
    int zero = 1;
    for (int i = 0; i < T * H * E; i++) zero &= dq[i] == 0;
    check(st == ATTN_OK && zero, "varlen_backward_without_keys_control_taken", "status %d (%s), dq %s", (int)st,
          st ? err.message : "", zero ? "0" : "not 0");
}

/* The ragged backward's scratch is that of the sequences in flight, not of
 * the whole batch: sixteen equal sequences (GQA, so dk and dv have partial
 * sums per query head) fit in a workspace of twice what attn_sdpa_backward
 * needs for one of them, and give the bits of the call without one. */
static void test_backward_scratch_of_largest(void) {
    enum { NB = 16, N = 200, HQ = 4, HK = 2, E = 32 };
    int64_t cu[NB + 1];
    for (int b = 0; b <= NB; b++) cu[b] = (int64_t)b * N;
    const int64_t T = cu[NB];
    gqa_batch gb;
    gqa_batch_make(&gb, T, HQ, HK, E);
    attn_tensor q = gb.q, k = gb.k, v = gb.v, dout = gb.dout, out = gb.out, lse = gb.lse;
    attn_tensor g0[3], g1[3];
    gqa_grads(g0, &gb), gqa_grads(g1, &gb);
    attn_context ctx = attn_context_default();
    ctx.num_threads = 2;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT, o.context = &ctx;
    attn_error err;
    attn_status st = attn_sdpa_varlen(&out, &lse, &q, &k, &v, cu, cu, NB, NULL, &o, &err);
    if (!st) st = attn_sdpa_varlen_backward(&g0[0], &g0[1], &g0[2], &dout, &q, &k, &v, &out, &lse, cu, cu, NB, NULL, &o,
                                            &err);
    size_t one = 0; /* one sequence's backward alone */
    attn_tensor sq = view(&q, 0, N), sk_ = view(&k, 0, N), sv = view(&v, 0, N), s_out = view(&out, 0, N);
    attn_tensor s_lse = view(&lse, 0, N), s_do = view(&dout, 0, N);
    attn_tensor sg[3] = {view(&g1[0], 0, N), view(&g1[1], 0, N), view(&g1[2], 0, N)};
    if (!st) st = attn_sdpa_backward_workspace_size(&one, &sg[0], &sg[1], &sg[2], NULL, &s_do, &sq, &sk_, &sv, &s_out,
                                                    &s_lse, &o, &err);
    ctx.workspace_size = 2 * one;
    ctx.workspace = malloc(ctx.workspace_size ? ctx.workspace_size : 1);
    if (!st) st = attn_sdpa_varlen_backward(&g1[0], &g1[1], &g1[2], &dout, &q, &k, &v, &out, &lse, cu, cu, NB, NULL, &o,
                                            &err);
    int same = !st;
    for (int t = 0; t < 3 && same; t++) same = !memcmp(g0[t].data, g1[t].data, bytes_of(&g0[t]));
    check(same, "varlen_backward_scratch_of_the_largest_sequence", "status %d (%s), gradients %s, one sequence's "
          "workspace %zu bytes", (int)st, st ? err.message : "", same ? "same" : "differ", one);
    free(ctx.workspace), free(q.data), free(k.data), free(v.data), free(dout.data), free(out.data), free(lse.data);
    for (int t = 0; t < 3; t++) free(g0[t].data), free(g1[t].data);
}

/* A status and a message that says `text`. */
static void check_status(attn_status got, const attn_error *err, attn_status want, const char *text, const char *name) {
    check(got == want && strstr(err->message, text), name, "status %d (want %d): %s", (int)got, (int)want, err->message);
}

/* A batch in which no sequence has both queries and keys runs nothing, so
 * it needs no workspace: the size query says 0, as attn_sdpa_backward's
 * does for an empty problem, and the call then takes nothing, neither
 * from a NULL workspace nor from a workspace of 0 bytes (where any scratch
 * taken would fail), and writes what attn.h says: dq 0 for queries without
 * keys, dk and dv 0 for keys without queries. The control, a batch with
 * queries and keys, asks more than 0 and is refused a workspace of 0. */
static void test_backward_nothing_to_run(void) {
    enum { T = 4, H = 2, E = 4 };
    float qd[T * H * E] = {0}, kd[T * H * E] = {0}, od[T * H * E] = {0}, ld[T * H] = {0};
    float dq[T * H * E], dk[T * H * E], dv[T * H * E];
    static const struct {
        const char *name;
        int64_t cu_q[3], cu_k[3];
    } C[] = {
        {"all_empty", {0, 0, 0}, {0, 0, 0}},
        {"queries_only", {0, 3, 4}, {0, 0, 0}},
        {"keys_only", {0, 0, 0}, {0, 1, 4}},
        {"queries_then_keys", {0, 4, 4}, {0, 0, 4}}, /* sequence 0 has queries, sequence 1 keys */
        {"control_with_both", {0, 3, 4}, {0, 1, 4}},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        bool runs = i == sizeof C / sizeof C[0] - 1;
        int64_t sq[3] = {C[i].cu_q[2], H, E}, sk[3] = {C[i].cu_k[2], H, E}, sl[2] = {C[i].cu_q[2], H};
        attn_tensor q, k, out, lse, g[3];
        attn_tensor_init(&q, qd, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&k, kd, ATTN_F32, 3, sk, NULL, NULL);
        attn_tensor_init(&out, od, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&lse, ld, ATTN_F32, 2, sl, NULL, NULL);
        attn_tensor_init(&g[0], dq, ATTN_F32, 3, sq, NULL, NULL);
        attn_tensor_init(&g[1], dk, ATTN_F32, 3, sk, NULL, NULL), attn_tensor_init(&g[2], dv, ATTN_F32, 3, sk, NULL, NULL);
        attn_error err;
        memset(&err, 0, sizeof err);
        size_t bytes = 12345;
        attn_status st = attn_sdpa_varlen_backward_workspace_size(&bytes, &g[0], &g[1], &g[2], &out, &q, &k, &k, &out,
                                                                  &lse, C[i].cu_q, C[i].cu_k, 2, NULL, NULL, &err);
        char name[96];
        snprintf(name, sizeof name, "varlen_backward_workspace_size_%s_%s", C[i].name, runs ? "above_0" : "is_0");
        check(st == ATTN_OK && (runs ? bytes > 0 && bytes != 12345 : bytes == 0), name, "status %d (%s), %zu bytes",
              (int)st, st ? err.message : "", bytes);
        /* run with no workspace (NULL, 0 bytes), then from one of 0 bytes */
        char none[1];
        void *const WS[2] = {NULL, none};
        for (int w = 0; w < 2; w++) {
            attn_context ctx = attn_context_default();
            ctx.workspace = WS[w], ctx.workspace_size = 0;
            attn_sdpa_options o = attn_sdpa_options_default();
            o.context = &ctx;
            for (int j = 0; j < T * H * E; j++) dq[j] = dk[j] = dv[j] = -7;
            st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], &out, &q, &k, &k, &out, &lse, C[i].cu_q, C[i].cu_k, 2,
                                           NULL, &o, &err);
            /* rows of the tensors zeroed, every other float untouched */
            int zeros = 1;
            for (int t = 0; t < 3; t++) {
                const float *d = t == 0 ? dq : t == 1 ? dk : dv;
                int64_t rows = t == 0 ? sq[0] : sk[0];
                for (int j = 0; j < T * H * E; j++) zeros &= d[j] == (j < rows * H * E ? 0.0f : -7.0f);
            }
            snprintf(name, sizeof name, "varlen_backward_%s_%s", C[i].name, w ? "workspace_of_0_bytes" : "workspace_null");
            if (runs && w) /* the control: it needs scratch, so a workspace of 0 bytes is refused */
                check_status(st, &err, ATTN_ERR_WORKSPACE, "attn_sdpa_varlen_backward_workspace_size", name);
            else
                check(st == ATTN_OK && (runs || zeros), name, "status %d (%s), gradients %s", (int)st,
                      st ? err.message : "", zeros ? "0 on their rows" : "not 0 on their rows, or written past them");
        }
    }
}

/* A 16-bit q and out (f16, bf16): bitwise the f32 call on q widened, its
 * out rounded once (nearest even), lse the same; with masks, bf16 keys,
 * and a workspace (the copies from its front: too small a one refused
 * before anything is written); out in another dtype, lse 16-bit, the
 * ragged backward and a plan refused with a 16-bit q. */
static void test_half_q(attn_dtype h, const char *tag) {
    vcase c = {"half", ATTN_F32, h == ATTN_F16 ? ATTN_BF16 : ATTN_F32, 4, 2, 40, 24, 7, 120, 0, ATTN_CAUSAL_BOTTOM_RIGHT,
               0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
    batch bt;
    make_batch(&bt, &c);
    int64_t sq[3] = {bt.Tq, c.Hq, c.E}, so[3] = {bt.Tq, c.Hq, c.Ev}, sl[2] = {bt.Tq, c.Hq}, nq = bt.Tq * c.Hq * c.E;
    attn_tensor q16 = zeros(h, 3, sq), q32 = zeros(ATTN_F32, 3, sq), out16 = zeros(h, 3, so), out32 = zeros(ATTN_F32, 3, so);
    attn_tensor want16 = zeros(h, 3, so), lse16 = zeros(ATTN_F32, 2, sl), lse32 = zeros(ATTN_F32, 2, sl);
    for (int64_t i = 0; i < nq; i++) { /* q's 16-bit values, and them widened */
        int64_t t = i / (c.Hq * c.E), r = i % (c.Hq * c.E);
        float x = ((float *)bt.q.data)[t * bt.q.strides[0] + r];
        uint16_t b = h == ATTN_F16 ? attn_f32_to_f16(x) : attn_f32_to_bf16(x);
        ((uint16_t *)q16.data)[i] = b, ((float *)q32.data)[i] = h == ATTN_F16 ? attn_f16_to_f32(b) : attn_bf16_to_f32(b);
    }
    attn_error err;
    char name[96];
    attn_status s32 = attn_sdpa_varlen(&out32, &lse32, &q32, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &bt.o, &err);
    attn_status s16 = attn_sdpa_varlen(&out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &bt.o, &err);
    attn_tensor_convert(&want16, &out32, NULL);
    snprintf(name, sizeof name, "varlen_%s_q_bitwise_f32_on_widened_q", tag);
    check(!s32 && !s16 && !memcmp(out16.data, want16.data, bytes_of(&out16)) && !memcmp(lse16.data, lse32.data, bytes_of(&lse16)),
          name, "status %d %d (%s); out or lse differ", (int)s32, (int)s16, err.message);
    /* from a workspace: the f32 copies at its front */
    attn_context ctx = attn_context_default();
    attn_sdpa_options o = bt.o;
    o.context = &ctx;
    ctx.workspace = malloc(1 << 24), ctx.workspace_size = (size_t)(nq * 4); /* q's copy alone fits */
    memset(out16.data, 0x55, bytes_of(&out16));
    attn_status small = attn_sdpa_varlen(&out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &o, &err);
    snprintf(name, sizeof name, "varlen_%s_q_workspace_too_small", tag);
    check(small == ATTN_ERR_WORKSPACE && ((unsigned char *)out16.data)[0] == 0x55, name, "status %d: %s", (int)small, err.message);
    /* the copies fit, the plans and kernels' scratch do not: the message names the caller's size (not what the
     * copies left) and a need that fits */
    ctx.workspace_size = (size_t)(nq * 4 + bt.Tq * c.Hq * c.Ev * 4) + 32768;
    small = attn_sdpa_varlen(&out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &o, &err);
    size_t has = 0, needs = 0;
    int parsed = sscanf(err.message, "the context's workspace has %zu bytes but this call needs %zu", &has, &needs);
    size_t given = ctx.workspace_size;
    ctx.workspace_size = needs;
    attn_status fits = parsed == 2 ? attn_sdpa_varlen(&out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B,
                                                      bt.mask_ptr, &o, &err) : ATTN_ERR_ARGUMENT;
    snprintf(name, sizeof name, "varlen_%s_q_workspace_short_names_the_whole_call", tag);
    check(small == ATTN_ERR_WORKSPACE && parsed == 2 && has == given && fits == ATTN_OK, name,
          "status %d, has %zu of %zu given, needs %zu, which gives status %d: %s", (int)small, has, given, needs,
          (int)fits, err.message);
    ctx.workspace_size = 1 << 24;
    attn_status sw = attn_sdpa_varlen(&out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &o, &err);
    snprintf(name, sizeof name, "varlen_%s_q_workspace", tag);
    check(!sw && !memcmp(out16.data, want16.data, bytes_of(&out16)), name, "status %d: %s", (int)sw, err.message);
    /* refusals */
    snprintf(name, sizeof name, "err_varlen_%s_q_f32_out", tag);
    check_status(attn_sdpa_varlen(&out32, NULL, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &bt.o, &err), &err,
                 ATTN_ERR_DTYPE, "out is f32", name);
    attn_tensor lse_h = zeros(h, 2, sl);
    snprintf(name, sizeof name, "err_varlen_%s_q_16bit_lse", tag);
    check_status(attn_sdpa_varlen(&out16, &lse_h, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k, c.B, bt.mask_ptr, &bt.o, &err), &err,
                 ATTN_ERR_DTYPE, "lse is", name);
    attn_tensor dq = zeros(h, 3, sq);
    snprintf(name, sizeof name, "err_varlen_backward_%s_q", tag);
    check_status(attn_sdpa_varlen_backward(&dq, NULL, NULL, &out16, &q16, &bt.k, &bt.v, &out16, &lse16, bt.cu_q, bt.cu_k,
                                           c.B, bt.mask_ptr, &bt.o, &err),
                 &err, ATTN_ERR_DTYPE, "ragged backward takes f32 or f64 q", name);
    /* planned: the plan's workspace holds the f32 copies; runs bitwise the unplanned call */
    size_t pb = 0, wb = 0;
    attn_sdpa_plan *plan = NULL;
    attn_sdpa_plan_bytes(&pb, c.B, &err);
    void *pmem = malloc(pb);
    attn_status sp = attn_sdpa_varlen_plan_init(&plan, pmem, pb, &wb, &out16, &lse16, &q16, &bt.k, &bt.v, bt.cu_q, bt.cu_k,
                                                c.B, bt.mask_ptr, &bt.o, &err);
    void *work = malloc(wb + 1);
    memset(out16.data, 0, bytes_of(&out16)), memset(lse16.data, 0, bytes_of(&lse16));
    attn_status sr = sp ? sp : attn_sdpa_run(plan, &out16, &lse16, &q16, &bt.k, &bt.v, work, wb, &err);
    snprintf(name, sizeof name, "varlen_plan_%s_q_bitwise_unplanned", tag);
    check(!sr && !memcmp(out16.data, want16.data, bytes_of(&out16)) && !memcmp(lse16.data, lse32.data, bytes_of(&lse16)),
          name, "status %d: %s", (int)sr, err.message);
    snprintf(name, sizeof name, "err_varlen_plan_%s_q_workspace", tag);
    check_status(sp ? sp : attn_sdpa_run(plan, &out16, &lse16, &q16, &bt.k, &bt.v, work, wb - 1, &err), &err,
                 ATTN_ERR_WORKSPACE, "workspace", name);
    snprintf(name, sizeof name, "err_varlen_plan_%s_q_run_with_f32_q", tag);
    check_status(sp ? sp : attn_sdpa_run(plan, &out16, &lse16, &q32, &bt.k, &bt.v, work, wb, &err), &err, ATTN_ERR_PLAN,
                 "q is f32", name);
    /* a dense call on one sequence's views: planned, bitwise attn_sdpa's 16-bit call */
    int b = 0;
    while (b < c.B - 1 && (bt.cu_q[b + 1] == bt.cu_q[b] || bt.cu_k[b + 1] == bt.cu_k[b])) b++;
    int64_t L = bt.cu_q[b + 1] - bt.cu_q[b], S = bt.cu_k[b + 1] - bt.cu_k[b], sd[3] = {c.Hq, L, c.Ev};
    attn_tensor qv = view(&q16, bt.cu_q[b], L), kv = view(&bt.k, bt.cu_k[b], S), vv = view(&bt.v, bt.cu_k[b], S);
    attn_tensor od[2] = {zeros(h, 3, sd), zeros(h, 3, sd)};
    attn_sdpa_plan *dense = NULL;
    size_t db = 0, dw = 0;
    attn_sdpa_plan_bytes(&db, 0, &err);
    void *dmem = malloc(db);
    attn_status d0 = attn_sdpa(&od[0], NULL, NULL, &qv, &kv, &vv, &bt.o, &err);
    attn_status d1 = d0 ? d0 : attn_sdpa_plan_init(&dense, dmem, db, &dw, &od[1], NULL, &qv, &kv, &vv, &bt.o, &err);
    void *dwork = malloc(dw + 1);
    attn_status d2 = d1 ? d1 : attn_sdpa_run(dense, &od[1], NULL, &qv, &kv, &vv, dwork, dw, &err);
    snprintf(name, sizeof name, "dense_plan_%s_q_bitwise_unplanned", tag);
    check(L > 0 && S > 0 && !d2 && !memcmp(od[0].data, od[1].data, bytes_of(&od[0])), name, "L %lld S %lld, status %d: %s",
          (long long)L, (long long)S, (int)d2, err.message);
    free(dmem), free(dwork), free(od[0].data), free(od[1].data);
    free(pmem), free(work), free(dq.data), free(lse_h.data), free(ctx.workspace);
    free(q16.data), free(q32.data), free(out16.data), free(out32.data), free(want16.data), free(lse16.data), free(lse32.data);
    free_batch(&bt, c.B);
}

/* ---- f64 batches against the naive sum ----
 *
 * Everything above compares a batch with attn_sdpa on each sequence. Here
 * random small batches (sequences without queries, without keys, or with
 * more queries than keys; GQA; no causal mask, top-left and bottom-right)
 * are checked against the definition itself, summed in long double: out
 * within 1e-12 of each row's Σ p|v|, lse within 1e-12, and a row that sees
 * no key out 0 and lse -inf. */

/* 0 .. n - 1, and 0 for n <= 0 (below takes n >= 1). */
static int64_t below1(int64_t n) { return n > 0 ? below(n) : 0; }

static int varlen_round(int64_t round, char *why, size_t size) {
    int64_t B = below1(6), H = 1 + below1(3), g = 1 + below1(3), Hq = H * g, E = 1 + below1(8), Ev = 1 + below1(8);
    int causal = (int)below1(3); /* none, top-left, bottom-right */
    int64_t cq[7] = {0}, ck[7] = {0};
    for (int64_t b = 0; b < B; b++) cq[b + 1] = cq[b] + below1(4) * below1(6), ck[b + 1] = ck[b] + below1(4) * below1(9);
    int64_t Tq = cq[B], Tk = ck[B];
    double *q = malloc((size_t)(Tq * Hq * E + 1) * 8), *k = malloc((size_t)(Tk * H * E + 1) * 8);
    double *v = malloc((size_t)(Tk * H * Ev + 1) * 8), *out = malloc((size_t)(Tq * Hq * Ev + 1) * 8);
    double *lse = malloc((size_t)(Tq * Hq + 1) * 8);
    for (int64_t i = 0; i < Tq * Hq * E; i++) q[i] = 2 * (2 * uniform() - 1);
    for (int64_t i = 0; i < Tk * H * E; i++) k[i] = (2 * uniform() - 1);
    for (int64_t i = 0; i < Tk * H * Ev; i++) v[i] = (2 * uniform() - 1);
    int64_t qs[3] = {Tq, Hq, E}, ks[3] = {Tk, H, E}, vs[3] = {Tk, H, Ev}, os[3] = {Tq, Hq, Ev}, ls[2] = {Tq, Hq};
    attn_tensor tq, tk, tv, to, tl;
    attn_tensor_init(&tq, q, ATTN_F64, 3, qs, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F64, 3, ks, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F64, 3, vs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F64, 3, os, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F64, 2, ls, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = causal == 0 ? ATTN_CAUSAL_NONE : causal == 1 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    int ok = 1;
    attn_status st = attn_sdpa_varlen(&to, &tl, &tq, &tk, &tv, cq, ck, B, NULL, &o, &err);
    if (st) ok = 0, snprintf(why, size, "round %lld: %s", (long long)round, err.message);
    for (int64_t b = 0; b < B && ok; b++) {
        int64_t L = cq[b + 1] - cq[b], S = ck[b + 1] - ck[b];
        for (int64_t l = 0; l < L && ok; l++)
            for (int64_t hq = 0; hq < Hq && ok; hq++) {
                int64_t hk = hq / g, lim = causal == 0 ? S - 1 : causal == 1 ? l : S - L + l;
                int64_t seen = lim < 0 ? 0 : lim + 1 < S ? lim + 1 : S; /* keys 0 .. seen - 1 */
                naive_packed rows = {k + ck[b] * H * E, v + ck[b] * H * Ev, H, hk, E, Ev}; /* sequence b's keys */
                double want[8]; /* Ev <= 8 */
                naive_row nr;
                naive_attend(want, &nr, q + ((cq[b] + l) * Hq + hq) * E, E, Ev, seen, 1 / sqrt((double)E), naive_packed_key,
                             naive_packed_value, &rows);
                for (int64_t c = 0; c < Ev && ok; c++) {
                    double got = out[((cq[b] + l) * Hq + hq) * Ev + c];
                    if (!(fabs(got - want[c]) <= 1e-12 * nr.pabs + 1e-300))
                        ok = 0, snprintf(why, size, "round %lld seq %lld (L %lld S %lld causal %d) row %lld: %.17g vs %.17g",
                                         (long long)round, (long long)b, (long long)L, (long long)S, causal, (long long)l, got,
                                         want[c]);
                }
                double wl = nr.lse, gl = lse[(cq[b] + l) * Hq + hq];
                if (ok && (isinf(wl) ? gl != wl : !(fabs(gl - wl) <= 1e-12 * (fabs(wl) + 1))))
                    ok = 0, snprintf(why, size, "round %lld seq %lld: lse %.17g vs %.17g", (long long)round, (long long)b, gl, wl);
            }
    }
    free(q), free(k), free(v), free(out), free(lse);
    return ok;
}

static void varlen_stress(int64_t rounds) {
    char why[1024] = "";
    int ok = 1;
    for (int64_t r = 0; r < rounds && ok; r++) ok = varlen_round(r, why, sizeof why);
    check(ok, "f64_random_batches_against_the_naive_sum", "%s", why);
}

int main(void) {
    rng = test_seed(TEST_RNG_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    /* name, dtype, kv dtype, Hq, Hk, E, Ev, B, max_len, decode, causal, has_scale, alibi, sinks, rope, bf16,
     * strided, softcap, dropout, window, mask */
    static const vcase CASES[] = {
        {"f32_plain", ATTN_F32, ATTN_F32, 4, 4, 64, 64, 6, 300, 0, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"f32_causal_gqa", ATTN_F32, ATTN_F32, 8, 2, 64, 64, 9, 200, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"f32_bottom_right_scale", ATTN_F32, ATTN_F32, 4, 2, 32, 48, 8, 150, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 0, 0, 0, 0, 1, 0,
         0, 0, 0},
        {"f32_alibi_softcap_sinks", ATTN_F32, ATTN_F32, 4, 1, 64, 64, 7, 180, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 1, 1, 0, 0, 0,
         20, 0, 0, 0},
        {"f32_window", ATTN_F32, ATTN_F32, 2, 2, 64, 64, 6, 400, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0, 37, 0},
        {"f32_rope", ATTN_F32, ATTN_F32, 4, 2, 64, 64, 7, 200, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0},
        {"f32_dropout", ATTN_F32, ATTN_F32, 4, 2, 32, 32, 6, 120, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0.25, 0, 0},
        {"f32_bool_masks", ATTN_F32, ATTN_F32, 2, 1, 32, 32, 8, 100, 0, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
        {"f32_float_masks", ATTN_F32, ATTN_F32, 2, 2, 32, 16, 6, 100, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
        {"f32_broadcast_masks", ATTN_F32, ATTN_F32, 4, 2, 32, 32, 6, 100, 0, ATTN_CAUSAL_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3},
        {"f32_bf16_compute", ATTN_F32, ATTN_F32, 4, 2, 64, 64, 6, 250, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"f16_kv", ATTN_F32, ATTN_F16, 4, 2, 64, 64, 6, 200, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
        {"bf16_kv", ATTN_F32, ATTN_BF16, 4, 2, 40, 24, 6, 200, 0, ATTN_CAUSAL_NONE, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0},
        {"f32_odd_sizes", ATTN_F32, ATTN_F32, 3, 1, 13, 7, 11, 70, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
        {"f64_plain", ATTN_F64, ATTN_F64, 2, 1, 16, 16, 6, 60, 0, ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
        {"f64_every_option", ATTN_F64, ATTN_F64, 4, 2, 16, 8, 7, 50, 0, ATTN_CAUSAL_BOTTOM_RIGHT, 1, 1, 1, 1, 0, 0, 9, 0.2, 13,
         2},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_case(&CASES[i]);
    /* many random mixes of lengths */
    for (int r = 0; r < 12; r++) {
        char name[32];
        snprintf(name, sizeof name, "f32_mix%d", r);
        vcase c = {name, ATTN_F32, r % 3 == 2 ? ATTN_BF16 : ATTN_F32, 4, r % 2 ? 2 : 4, 32, 32, 1 + (int)below(20),
                   1 + below(r % 4 == 0 ? 600 : 90), 0, (attn_causal)(r % 3), 0, r % 4 == 1, r % 5 == 2, r % 3 == 1, 0, r % 2,
                   0, 0, 0, r % 4 == 3 ? 1 : 0};
        test_case(&c);
    }
    test_decode_in_batch();
    test_decode_batches();
    test_errors();
    test_offsets_in_outputs();
    test_workspace();
    test_half_q(ATTN_BF16, "bf16");
    test_half_q(ATTN_F16, "f16");
    test_backward_workspace();
    test_backward_workspace_size();
    test_backward_workspace_size_errors();
    test_backward_unplanned_batch_checked();
    test_backward_one_job();
    test_backward_group_items();
    test_backward_scratch_of_largest();
    test_backward_nothing_to_run();
    test_backward_broadcast_dout();
    varlen_stress(300);
    attn_shutdown();
    return n_failed ? 1 : 0;
}
