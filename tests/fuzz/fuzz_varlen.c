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
 * byte less being refused. */
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
                  const attn_tensor *lse, const int64_t *cu_q, const int64_t *cu_k, int64_t batch,
                  const attn_sdpa_options *o, size_t need) {
    size_t n[3];
    unsigned char *want[3], *ws = malloc(need + 1);
    bool have = ws != NULL;
    for (int t = 0; t < 3; t++) {
        n[t] = (size_t)attn_tensor_numel(&g[t]) * sizeof(float);
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
        for (int t = 0; t < 3; t++) memset(g[t].data, 0x7f, n[t]); /* 3.4e38, which no gradient here is */
        attn_status st = attn_sdpa_varlen_backward(&g[0], &g[1], &g[2], out, q, k, k, out, lse, cu_q, cu_k, batch, NULL,
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

static void ragged(reader *r, int backward) {
    enum { H = 2, E = 4, MAXB = 8 };
    /* batch: small, or an edge; one past the arrays' MAXB + 2 offsets is
     * never passed, so that the library's reads of cu[0 .. batch] stay in
     * them (a negative batch must be refused before any read). */
    int64_t batch = pick(r, MAXB);
    if (batch > MAXB) batch = MAXB;
    int64_t Tq = byte(r) % 24, Tk = byte(r) % 24;
    int64_t cu_q[MAXB + 2], cu_k[MAXB + 2];
    for (int i = 0; i < MAXB + 2; i++) cu_q[i] = pick(r, 24), cu_k[i] = pick(r, 24);
    if (byte(r) % 2) { /* a well-formed split now and then, so the kernels run too */
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
    float *q = malloc(sizeof(float) * (size_t)(Tq * H * E + 1)), *k = malloc(sizeof(float) * (size_t)(Tk * H * E + 1));
    float *out = malloc(sizeof(float) * (size_t)(Tq * H * E + 1)), *lse = malloc(sizeof(float) * (size_t)(Tq * H + 1));
    float *g[3] = {malloc(sizeof(float) * (size_t)(Tq * H * E + 1)), malloc(sizeof(float) * (size_t)(Tk * H * E + 1)),
                   malloc(sizeof(float) * (size_t)(Tk * H * E + 1))};
    fill(q, (size_t)(Tq * H * E)), fill(k, (size_t)(Tk * H * E));
    int64_t sq[3] = {Tq, H, E}, sk[3] = {Tk, H, E}, sl[2] = {Tq, H};
    attn_tensor tq, tk, to, tl, tg[3];
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tl, lse, ATTN_F32, 2, sl, NULL, NULL);
    attn_tensor_init(&tg[0], g[0], ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tg[1], g[1], ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&tg[2], g[2], ATTN_F32, 3, sk, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = (attn_causal)(byte(r) % 3);
    attn_error err, serr;
    attn_status st = attn_sdpa_varlen(&to, &tl, &tq, &tk, &tk, cu_q, cu_k, batch, NULL, &o, &err);
    checked(st, &err);
    /* The backward's size query, on every input: it checks the offsets as
     * the forward does (the same tensors, causal mode and offsets), so it
     * refuses exactly what the forward refuses, with its status and
     * message, and what it accepts the forward ran. */
    size_t need = 0;
    attn_status sz = attn_sdpa_varlen_backward_workspace_size(&need, &tg[0], &tg[1], &tg[2], &to, &tq, &tk, &tk, &to, &tl,
                                                             cu_q, cu_k, batch, NULL, &o, &serr);
    checked(sz, &serr);
    if (st != ATTN_ERR_NO_MEMORY && sz != ATTN_ERR_NO_MEMORY && (sz != st || (st && strcmp(err.message, serr.message))))
        abort();
    if (backward && !st && !sz) {
        st = attn_sdpa_varlen_backward(&tg[0], &tg[1], &tg[2], &to, &tq, &tk, &tk, &to, &tl, cu_q, cu_k, batch, NULL, &o,
                                       &err);
        checked(st, &err); /* dout is out: both inputs, so computed */
        if (!st) sized(tg, &to, &tq, &tk, &tl, cu_q, cu_k, batch, &o, need);
    }
    free(q), free(k), free(out), free(lse), free(g[0]), free(g[1]), free(g[2]);
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
