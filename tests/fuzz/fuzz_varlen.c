/* fuzz_varlen.c -- libFuzzer target: the offsets of a ragged batch
 * (attn_sdpa_varlen, attn_sdpa_varlen_backward) and the page tables of the
 * paged row source (attn_sdpa_paged, attn_sdpa_varlen_paged), filled from
 * the input's bytes.
 *
 * The first byte picks the call. For a ragged batch the input gives the
 * batch size, the rows of q and k (the harness owns exactly that many), and
 * every offset, each either small or one of the values where integer
 * arithmetic breaks (negative, INT64_MIN, INT64_MAX, 2^62, ...): offsets
 * that decrease, do not start at 0, or end past the rows must be refused,
 * and offsets the library accepts can only address rows the harness owns.
 * For a paged source (one sequence, attn_sdpa_paged, or a ragged batch of
 * two over one pool, attn_sdpa_varlen_paged) it gives the page size, the
 * tables' entries (in and outside the pool, negative, INT32_MIN/MAX) and
 * the sequences' lengths (past the tables' pages included). Each call must return a status, with a
 * message when it fails, and never trip AddressSanitizer or
 * UndefinedBehaviorSanitizer. The ragged backward's workspace query
 * (attn_sdpa_varlen_backward_workspace_size) sees every ragged batch: it
 * refuses what the forward refuses, with the same status and message, and
 * a workspace of its size runs the backward bitwise as without one, one
 * byte less being refused.
 *
 * Read after those bytes (an older input reads 0 there and keeps its
 * meaning): the heads (GQA), E and Ev, q's dtype (f32, f64, f16, bf16) and
 * k's and v's beside it, rows laid out head-major, lse left out, the score
 * variants (scale, soft cap, ALiBi, window, sinks, RoPE, dropout, the bf16
 * compute mode), a mask per sequence, and options the batch must refuse
 * (options->mask, pieces: ATTN_ERR_OPTION). A refused batch leaves out and
 * lse untouched; offsets out of order are ATTN_ERR_ARGUMENT; an accepted
 * one gives each sequence bitwise what attn_sdpa gives it alone (its mask,
 * dropout_seed + b), and a plan of it (attn_sdpa_varlen_plan_init,
 * attn_sdpa_run) the same bits. */
#include "attn.h"
#include "sdpa/sdpa.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"

/* An offset or count: mostly small, sometimes an edge of int64. */
static int64_t pick(reader *r, int64_t small) {
    static const int64_t EDGES[] = {-1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, (int64_t)1 << 62,
                                    -((int64_t)1 << 62), (int64_t)1 << 32, INT32_MAX, INT32_MIN};
    uint8_t b = byte(r);
    if (b < 224) return b % (small + 1);
    return EDGES[b % (sizeof EDGES / sizeof EDGES[0])];
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(i % 7) - 3) / 4;
}

/* Every failure carries a message. */
static void checked(attn_status st, const attn_error *err) {
    if (st && !err->message[0]) abort();
}

/* The ragged backward again with a workspace of the `need` bytes its size
 * query gave (at an odd address: the size covers any alignment): the
 * gradients g (already computed without one) bitwise again; and with one
 * byte less, ATTN_ERR_WORKSPACE with no gradient written. dout is out. */
static void sized(attn_tensor *g, const attn_tensor *out, const attn_tensor *q, const attn_tensor *k,
                  const attn_tensor *v, const attn_tensor *lse, const int64_t *cu_q, const int64_t *cu_k,
                  int64_t batch, const attn_tensor *const *masks, const attn_sdpa_options *o, size_t need) {
    size_t n[3];
    unsigned char *want[3], *ws = malloc(need + 1);
    bool have = ws != NULL;
    for (int t = 0; t < 3; t++) {
        n[t] = (size_t)attn_tensor_numel(&g[t]) * attn_dtype_size(g[t].dtype);
        want[t] = malloc(n[t] + 1);
        if (want[t]) memcpy(want[t], g[t].data, n[t]);
        have = have && want[t];
    }
    attn_context ctx = attn_context_default();
    attn_sdpa_options with = *o;
    with.context = &ctx;
    attn_error err;
    for (int short_by = 0; short_by < 2 && have && (short_by == 0 || need > 0); short_by++) {
        ctx.workspace = ws + 1, ctx.workspace_size = need - (size_t)short_by;
        for (int t = 0; t < 3; t++) memset(g[t].data, 0x7f, n[t]); /* 3.4e38 (f32), 1.4e306 (f64): no gradient here */
        attn_status st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], out, q, k, v, out, lse, cu_q, cu_k, batch, masks,
                                                   &with, &err);
        checked(st, &err);
        if (st == ATTN_ERR_NO_MEMORY) break;
        if (st != (short_by ? ATTN_ERR_WORKSPACE : ATTN_OK)) abort();
        for (int t = 0; t < 3; t++)
            for (size_t i = 0; i < n[t]; i++)
                if (((unsigned char *)g[t].data)[i] != (short_by ? 0x7f : want[t][i])) abort();
    }
    free(ws), free(want[0]), free(want[1]), free(want[2]);
}

/* n elements of dtype dt, small values (eighths in [-2, 2)). */
static void fill_as(void *p, attn_dtype dt, size_t n, unsigned salt) {
    for (size_t i = 0; i < n; i++) {
        float x = (float)((int)((i * 7 + salt * 13) % 32) - 16) / 8;
        if (dt == ATTN_F32) ((float *)p)[i] = x;
        else if (dt == ATTN_F64) ((double *)p)[i] = x;
        else if (dt == ATTN_F16) ((uint16_t *)p)[i] = attn_f32_to_f16(x);
        else if (dt == ATTN_BF16) ((uint16_t *)p)[i] = attn_f32_to_bf16(x);
        else ((unsigned char *)p)[i] = (unsigned char)((i * 5 + salt) % 3 != 0); /* bool */
    }
}

/* (T, H, D) packed rows, or with `across` the same shape over memory laid
 * out (H, T, D) (any strides are taken). */
static void packed(attn_tensor *t, void *data, attn_dtype dt, int64_t T, int64_t H, int64_t D, bool across) {
    int64_t shape[3] = {T, H, D}, c[3] = {H * D, D, 1}, x[3] = {D, T * D, 1};
    attn_tensor_init(t, data, dt, 3, shape, across ? x : c, NULL);
}

/* Rows r0 .. r0+n-1 of a packed (T, H, D) tensor as attn_sdpa's (H, n, D). */
static attn_tensor rows_of(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.data = (char *)t->data + r0 * t->strides[0] * (int64_t)attn_dtype_size(t->dtype);
    v.shape[0] = t->shape[1], v.shape[1] = n;
    v.strides[0] = t->strides[1], v.strides[1] = t->strides[0];
    return v;
}

/* Element i (C order over its shape) of t, its bytes. */
static const unsigned char *at(const attn_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->rank - 1; d >= 0; d--) off += (i % t->shape[d]) * t->strides[d], i /= t->shape[d];
    return (const unsigned char *)t->data + off * (int64_t)attn_dtype_size(t->dtype);
}

/* Sequence b of a successful batch is bitwise attn_sdpa on its rows alone,
 * with masks[b] and dropout_seed + b. */
static void each_alone(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                       const attn_tensor *v, const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                       const attn_tensor *const *masks, const attn_sdpa_options *o) {
    static unsigned char ob[1 << 16], lb[1 << 14];
    size_t es = attn_dtype_size(out->dtype), ls = lse ? attn_dtype_size(lse->dtype) : 0;
    for (int64_t b = 0; b < batch; b++) {
        int64_t L = cu_q[b + 1] - cu_q[b], S = cu_k[b + 1] - cu_k[b];
        if (L == 0) continue;
        attn_tensor qb = rows_of(q, cu_q[b], L), kb = rows_of(k, cu_k[b], S), vb = rows_of(v, cu_k[b], S);
        attn_tensor ob_t, lb_t, ow = rows_of(out, cu_q[b], L), lw;
        int64_t os[3] = {ow.shape[0], L, ow.shape[2]}, ls2[2] = {ow.shape[0], L};
        if ((size_t)(os[0] * L * os[2]) * es > sizeof ob) continue;
        attn_tensor_init(&ob_t, ob, out->dtype, 3, os, NULL, NULL);
        if (lse) {
            attn_tensor_init(&lb_t, lb, lse->dtype, 2, ls2, NULL, NULL);
            lw = *lse, lw.data = (char *)lse->data + cu_q[b] * lse->strides[0] * (int64_t)ls;
            lw.shape[0] = lse->shape[1], lw.shape[1] = L, lw.strides[0] = lse->strides[1], lw.strides[1] = lse->strides[0];
        }
        attn_sdpa_options ob_o = *o;
        ob_o.mask = masks ? masks[b] : NULL;
        ob_o.dropout_seed = o->dropout_seed + (uint64_t)b;
        attn_error err;
        attn_status st = attn_sdpa(&ob_t, lse ? &lb_t : NULL, NULL, &qb, &kb, &vb, &ob_o, &err);
        if (st == ATTN_ERR_NO_MEMORY) continue;
        if (st != ATTN_OK) abort();
        for (int64_t i = 0; i < attn_tensor_numel(&ob_t); i++)
            if (memcmp(at(&ob_t, i), at(&ow, i), es)) abort();
        for (int64_t i = 0; lse && i < attn_tensor_numel(&lb_t); i++)
            if (memcmp(at(&lb_t, i), at(&lw, i), ls)) abort();
    }
}

static void ragged(reader *r, int backward) {
    enum { MAXB = 8 };
    /* batch: small, or an edge; one past the arrays' MAXB + 2 offsets is
     * never passed, so that the library's reads of cu[0 .. batch] stay in
     * them (a negative batch must be refused before any read). */
    int64_t batch = pick(r, MAXB);
    if (batch > MAXB) batch = MAXB;
    int64_t Tq = byte(r) % 24, Tk = byte(r) % 24;
    int64_t cu_q[MAXB + 2], cu_k[MAXB + 2];
    for (int i = 0; i < MAXB + 2; i++) cu_q[i] = pick(r, 24), cu_k[i] = pick(r, 24);
    bool split = byte(r) % 2;
    if (split) { /* a well-formed split now and then, so the kernels run too */
        for (int64_t b = 1; b <= batch && b <= MAXB; b++) {
            cu_q[b] = cu_q[b] % (Tq + 1), cu_k[b] = cu_k[b] % (Tk + 1);
            if (cu_q[b] < 0) cu_q[b] = -cu_q[b] % (Tq + 1);
            if (cu_k[b] < 0) cu_k[b] = -cu_k[b] % (Tk + 1);
            if (cu_q[b] < cu_q[b - 1]) cu_q[b] = cu_q[b - 1];
            if (cu_k[b] < cu_k[b - 1]) cu_k[b] = cu_k[b - 1];
        }
        cu_q[0] = cu_k[0] = 0;
        if (batch >= 0 && batch <= MAXB) cu_q[batch] = Tq, cu_k[batch] = Tk;
    }
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = (attn_causal)(byte(r) % 3);

    /* The shapes, dtypes and options, read after the rest (an older input
     * reads 0: H = 2, E = 4, f32, no option): GQA, E and Ev, q f32, f64,
     * f16 or bf16 with k and v f32, f16 or bf16 beside it, lse left out,
     * rows laid out head-major, the score variants, a mask per sequence;
     * and what the batch must refuse (options->mask, pieces). */
    int64_t Hk = 2, Hq = 2, E = 4, Ev = 4;
    attn_dtype dt = ATTN_F32, kdt = ATTN_F32;
    bool use_lse = true, across = false, must_refuse = false;
    uint8_t x = byte(r), y = 0;
    attn_tensor slopes, sinks, bad_mask, mt[MAXB];
    const attn_tensor *masks[MAXB];
    static double sl[16];
    static float sk[16];
    static unsigned char mbuf[MAXB][4 * 4 * 24 * 24 * 8];
    attn_rope_options rope = attn_rope_options_default();
    bool with_masks = false;
    if (x) {
        static const attn_dtype QD[4] = {ATTN_F32, ATTN_F64, ATTN_F16, ATTN_BF16};
        static const attn_dtype KD[4] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_F32};
        Hk = 1 + x % 2, Hq = Hk * (1 + x / 2 % 3);
        dt = QD[x / 8 % 4], kdt = dt == ATTN_F64 ? ATTN_F64 : KD[x / 32 % 4];
        use_lse = !(x & 128), across = x & 4;
        E = 1 + byte(r) % 8, Ev = 1 + byte(r) % 8;
        y = byte(r);
        if (y & 1) o.has_scale = 1, o.scale = (double)(int8_t)byte(r) / 16;
        if (y & 2) o.softcap = (double)(byte(r) % 8);
        int64_t hq[1] = {Hq};
        if (y & 4) {
            for (int h = 0; h < 16; h++) sl[h] = (double)(byte(r) % 5) / 8;
            attn_tensor_init(&slopes, sl, ATTN_F64, 1, hq, NULL, NULL), o.alibi_slopes = &slopes;
        }
        if (y & 8) o.window = byte(r) % 6, o.causal = o.causal ? o.causal : ATTN_CAUSAL_TOP_LEFT;
        if (y & 16) {
            for (int h = 0; h < 16; h++) sk[h] = (float)((int)(byte(r) % 9) - 4) / 2;
            attn_tensor_init(&sinks, sk, ATTN_F32, 1, hq, NULL, NULL), o.sinks = &sinks;
        }
        if (y & 32) {
            rope.position_offset = byte(r) % 5, rope.rotary_dim = E - E % 2, rope.layout = (attn_rope_layout)(byte(r) % 2);
            if (rope.rotary_dim) o.rope = &rope;
        }
        with_masks = y & 64;
        if (y & 128) {
            uint8_t z = byte(r);
            if (z & 1) o.dropout_p = (double)(z >> 4) / 32, o.dropout_seed = raw64(r);
            if (z & 2) o.compute = ATTN_COMPUTE_BF16;
            if (z & 4) { /* refused: options->mask (masks go per sequence) */
                static unsigned char one = 1;
                int64_t s1[1] = {1};
                attn_tensor_init(&bad_mask, &one, ATTN_BOOL, 1, s1, NULL, NULL), o.mask = &bad_mask, must_refuse = true;
            }
            if (z & 8) o.total_keys = Tk + 1, must_refuse = true; /* refused: attention in pieces */
        }
    }
    attn_dtype wd = dt == ATTN_F16 || dt == ATTN_BF16 ? ATTN_F32 : dt;
    size_t qe = attn_dtype_size(dt), ke = attn_dtype_size(kdt), le = attn_dtype_size(wd);
    size_t nq = (size_t)(Tq * Hq * E), nk = (size_t)(Tk * Hk * E), nv = (size_t)(Tk * Hk * Ev), no = (size_t)(Tq * Hq * Ev);
    void *q = malloc(qe * nq + 1), *k = malloc(ke * nk + 1), *v = malloc(ke * nv + 1);
    void *out = malloc(qe * no + 1), *lse = malloc(le * (size_t)(Tq * Hq) + 1);
    void *g[3] = {malloc(qe * nq + 1), malloc(qe * nk + 1), malloc(qe * nv + 1)};
    fill_as(q, dt, nq, 1), fill_as(k, kdt, nk, 2), fill_as(v, kdt, nv, 3);
    attn_tensor tq, tk, tv, to, tl, tg[3];
    packed(&tq, q, dt, Tq, Hq, E, across), packed(&tk, k, kdt, Tk, Hk, E, across), packed(&tv, v, kdt, Tk, Hk, Ev, across);
    packed(&to, out, dt, Tq, Hq, Ev, false);
    int64_t sl2[2] = {Tq, Hq};
    attn_tensor_init(&tl, lse, wd, 2, sl2, NULL, NULL);
    packed(&tg[0], g[0], dt, Tq, Hq, E, false), packed(&tg[1], g[1], dt, Tk, Hk, E, false);
    packed(&tg[2], g[2], dt, Tk, Hk, Ev, false);
    bool ordered = batch >= 0 && batch <= MAXB && cu_q[0] == 0 && cu_k[0] == 0 && cu_q[batch] == Tq && cu_k[batch] == Tk;
    for (int64_t b = 0; ordered && b < batch; b++)
        ordered = cu_q[b] <= cu_q[b + 1] && cu_k[b] <= cu_k[b + 1];
    if (with_masks && ordered) { /* sequence b's own (Hq or 1, L_b, S_b) mask, bool or float */
        uint8_t m = byte(r);
        for (int64_t b = 0; b < batch; b++) {
            int64_t L = cu_q[b + 1] - cu_q[b], S = cu_k[b + 1] - cu_k[b], ms[3] = {m & 1 ? Hq : 1, L, S};
            attn_dtype mdt = m & 2 ? ATTN_BOOL : wd;
            fill_as(mbuf[b], mdt, (size_t)(ms[0] * L * S), (unsigned)b);
            attn_tensor_init(&mt[b], mbuf[b], mdt, 3 - (m >> 2 & 1) * (ms[0] == 1), ms + (m >> 2 & 1) * (ms[0] == 1),
                             NULL, NULL);
            masks[b] = &mt[b];
        }
    }
    const attn_tensor *const *mp = with_masks && ordered ? masks : NULL;
    attn_tensor *lp = use_lse ? &tl : NULL;
    memset(out, 0x5a, qe * no), memset(lse, 0x5a, le * (size_t)(Tq * Hq));
    attn_error err, serr;
    attn_status st = attn_sdpa_varlen(&to, lp, &tq, &tk, &tv, cu_q, cu_k, batch, mp, &o, &err);
    checked(st, &err);
    if (must_refuse && st != ATTN_ERR_OPTION && st != ATTN_ERR_ARGUMENT && st != ATTN_ERR_NO_MEMORY) abort();
    /* offsets out of order, not from 0 or not to the rows: refused, as
     * ATTN_ERR_ARGUMENT where no option is (the options are checked first) */
    if (!ordered && (st == ATTN_OK || (!y && st != ATTN_ERR_ARGUMENT))) abort();
    if (st) { /* refused: nothing written */
        for (size_t i = 0; i < qe * no; i++)
            if (((unsigned char *)out)[i] != 0x5a) abort();
        for (size_t i = 0; i < le * (size_t)(Tq * Hq); i++)
            if (((unsigned char *)lse)[i] != 0x5a) abort();
    } else {
        each_alone(&to, lp, &tq, &tk, &tv, cu_q, cu_k, batch, mp, &o);
        /* a plan of the batch: the same bits */
        size_t pb = 0, pws = 0;
        void *keep = malloc(qe * no + le * (size_t)(Tq * Hq) + 1);
        if (keep && attn_sdpa_plan_bytes(&pb, batch, &err) == ATTN_OK) {
            memcpy(keep, out, qe * no), memcpy((char *)keep + qe * no, lse, le * (size_t)(Tq * Hq));
            void *mem = malloc(pb + 1);
            attn_sdpa_plan *plan;
            attn_status ps = mem ? attn_sdpa_varlen_plan_init(&plan, mem, pb, &pws, &to, lp, &tq, &tk, &tv, cu_q, cu_k,
                                                              batch, mp, &o, &err)
                                 : ATTN_ERR_NO_MEMORY;
            if (ps != ATTN_OK && ps != ATTN_ERR_NO_MEMORY) abort();
            void *pw = ps == ATTN_OK ? malloc(pws + 1) : NULL;
            if (pw) {
                memset(out, 0x5a, qe * no), memset(lse, 0x5a, le * (size_t)(Tq * Hq));
                if (attn_sdpa_run(plan, &to, lp, &tq, &tk, &tv, (char *)pw + 1, pws, &err) != ATTN_OK) abort();
                if (memcmp(keep, out, qe * no) || (lp && memcmp((char *)keep + qe * no, lse, le * (size_t)(Tq * Hq))))
                    abort();
            }
            free(pw), free(mem);
        }
        free(keep);
    }
    /* The backward's size query, on every input of f32 or f64 without
     * options: it checks the offsets as the forward does (the same
     * tensors, causal mode and offsets), so it refuses exactly what the
     * forward refuses, with its status and message, and what it accepts
     * the forward ran. */
    bool grads = dt == kdt && (dt == ATTN_F32 || dt == ATTN_F64) && use_lse;
    size_t need = 0;
    if (grads) {
        attn_status sz = attn_sdpa_varlen_backward_workspace_size(&need, &tg[0], &tg[1], &tg[2], &to, &tq, &tk, &tv, &to,
                                                                 &tl, cu_q, cu_k, batch, mp, &o, &serr);
        checked(sz, &serr);
        if (!y && st != ATTN_ERR_NO_MEMORY && sz != ATTN_ERR_NO_MEMORY &&
            (sz != st || (st && strcmp(err.message, serr.message))))
            abort();
        if (backward && !st && !sz) {
            st = attn_sdpa_varlen_backward(&tg[0], &tg[1], &tg[2], &to, &tq, &tk, &tv, &to, &tl, cu_q, cu_k, batch, mp,
                                           &o, &err);
            checked(st, &err); /* dout is out: both inputs, so computed */
            if (!st) sized(tg, &to, &tq, &tk, &tv, &tl, cu_q, cu_k, batch, mp, &o, need);
        }
    }
    free(q), free(k), free(v), free(out), free(lse), free(g[0]), free(g[1]), free(g[2]);
}

/* A page table entry: inside the pool mostly, else past it or an edge. */
static int32_t pick_page(reader *r, int64_t pages) {
    int64_t x = pick(r, pages + 1);
    return x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : (int32_t)x;
}

/* One sequence (attn_sdpa_paged), or with `batch` a ragged batch of two
 * over the same pool, each with its own table and length
 * (attn_sdpa_varlen_paged). */
static void paged(reader *r, int batch) {
    enum { PAGES = 4, HK = 2, E = 4, MAXT = 8 };
    int64_t P = 1 + byte(r) % 17, length = pick(r, 40), n_pages = byte(r) % (MAXT + 1);
    int32_t table[MAXT], table2[MAXT];
    for (int t = 0; t < MAXT; t++) table[t] = pick_page(r, PAGES), table2[t] = pick_page(r, PAGES);
    size_t pool = (size_t)(PAGES * HK * P * E);
    float *kp = malloc(sizeof(float) * pool), *vp = malloc(sizeof(float) * pool), q[HK * 3 * E], out[HK * 3 * E];
    fill(kp, pool), fill(vp, pool), fill(q, HK * 3 * E);
    attn_paged_rows kpg = {kp, ATTN_F32, PAGES, HK, P, E, table, n_pages, length, NULL, 0, false};
    attn_paged_rows vpg = kpg;
    vpg.pages = vp;
    int64_t sq[3] = {HK, 3, E};
    attn_tensor tq, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = byte(r) % 2 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    attn_error err;
    if (!batch) checked(attn_sdpa_paged(&to, NULL, NULL, &tq, &kpg, &vpg, &o, &err), &err);
    else { /* the queries' 3 rows split between two sequences: (HK, 3, E) read as packed (3, HK, E) */
        int64_t cu_q[3] = {0, byte(r) % 4, 3}, length2 = pick(r, 40), n_pages2 = byte(r) % (MAXT + 1);
        if (cu_q[1] > 3) cu_q[1] = 3;
        attn_paged_rows kb[2] = {kpg, kpg}, vb[2] = {vpg, vpg};
        kb[1].table = vb[1].table = table2, kb[1].length = vb[1].length = length2, kb[1].n_pages = vb[1].n_pages = n_pages2;
        int64_t sp[3] = {3, HK, E}, sl[2] = {3, HK};
        float lse[3 * HK];
        attn_tensor pq, po, pl;
        attn_tensor_init(&pq, q, ATTN_F32, 3, sp, NULL, NULL);
        attn_tensor_init(&po, out, ATTN_F32, 3, sp, NULL, NULL);
        attn_tensor_init(&pl, lse, ATTN_F32, 2, sl, NULL, NULL);
        checked(attn_sdpa_varlen_paged(&po, &pl, &pq, cu_q, 2, kb, vb, NULL, &o, &err), &err);
    }
    free(kp), free(vp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    uint8_t what = byte(&r) % 4;
    if (what >= 2) paged(&r, what == 3);
    else ragged(&r, what == 1);
    return 0;
}
