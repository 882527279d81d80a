/* backward.c -- attn_mpi_sdpa_backward: the ring's backward pass, the
 * forward's loop with gradients.
 *
 *   for t = 0 .. N-1:                      (N ranks; this is rank r)
 *     the k, v shard of rank r - t is in kv[cur], and its dk, dv so far
 *     (summed by the ranks it has visited) in g[cur]
 *     post: the next k, v shard from the left, this one to the right
 *     for each (query segment, key segment) the causal limit does not hide:
 *       (dq', dk', dv') = attn_sdpa_backward of the piece, given the whole
 *                          rows' out and lse (the forward's)
 *       dq += dq';  g[cur] += (dk', dv')
 *     post: g[cur] to the right, the next shard's g from the left
 *     wait for all four
 *
 * After step N-1 the gradients a rank sends right are complete and the
 * right neighbour owns them; the ones it receives are its own. The k, v
 * messages go out before the pieces are computed and are hidden behind
 * them; the gradients can only leave once the pieces are done. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

typedef struct bwd {
    const attn_tensor *q, *k, *v, *out, *lse, *dout;
    attn_dtype gt;                 /* the gradients' dtype: q's */
    char *kv[2], *g[2];            /* shards of k, v and of their gradients, in flight */
    int64_t kv_max, g_max;
    attn_tensor dq_acc;            /* dq summed over the pieces, contiguous */
    char *piece;                   /* one piece's dq, dk, dv */
    bool want_kv;                  /* dk or dv asked for */
} bwd;

/* Shard rows' k and v over kv, and their gradients over g (either NULL). */
static void shard_views(attn_tensor t[4], const bwd *b, const char *kv, const char *g, int64_t rows) {
    int dk = b->k->rank - 2, dv = b->v->rank - 2;
    if (kv) {
        t[0] = ring_block((void *)kv, b->k->dtype, b->k, dk, rows);
        t[1] = ring_block((void *)(kv + ring_bytes(b->k->dtype, b->k, dk, rows)), b->v->dtype, b->v, dv, rows);
    }
    if (g) {
        t[2] = ring_block((void *)g, b->gt, b->k, dk, rows);
        t[3] = ring_block((void *)(g + ring_bytes(b->gt, b->k, dk, rows)), b->gt, b->v, dv, rows);
    }
}

/* The pieces of one step against the shard of rank src; a failure is kept
 * in *st and the ring goes on. */
static void step(ring *R, bwd *b, const char *kv, char *g, int src, MPI_Request *req, int nreq, attn_status *st,
                 attn_error *err) {
    attn_mpi_shard ks;
    attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
    attn_tensor t[4];
    shard_views(t, b, kv, g, ks.rows);
    int dq = b->q->rank - 2, dk = t[0].rank - 2, dv = t[1].rank - 2, dout = b->out->rank - 2;
    int64_t qrow = 0;
    for (int a = 0; a < R->qs.count; qrow += R->qs.length[a], a++) {
        int64_t n = R->qs.length[a], krow = 0;
        attn_tensor qa = ring_rows(b->q, dq, qrow, n), oa = ring_rows(b->out, dout, qrow, n);
        attn_tensor la = ring_rows(b->lse, dout, qrow, n), da = ring_rows(b->dout, dout, qrow, n);
        attn_tensor acc = ring_rows(&b->dq_acc, dq, qrow, n);
        for (int p = 0; p < ks.count; krow += ks.length[p], p++) {
            if (*st || attn_ring_piece_hidden(R, &ks, a, p)) continue;
            double t0 = MPI_Wtime();
            int64_t m = ks.length[p];
            attn_tensor kb = ring_rows(&t[0], dk, krow, m), vb = ring_rows(&t[1], dv, krow, m), mask;
            attn_tensor pq = ring_block(b->piece, b->gt, b->q, dq, n);
            attn_tensor pk = ring_block(b->piece + ring_bytes(b->gt, b->q, dq, n), b->gt, b->k, dk, m);
            attn_tensor pv = ring_block((char *)pk.data + ring_bytes(b->gt, b->k, dk, m), b->gt, b->v, dv, m);
            attn_sdpa_options o = attn_ring_piece_options(R, &ks, a, p, &mask);
            /* A piece of some of the row's keys takes its softmax from the
             * whole's lse, which holds the sink already; one holding every
             * key (one contiguous rank) is differentiated as a whole call,
             * which recomputes the softmax and needs the sink for it. */
            if (m != R->S) o.sinks = NULL;
            *st = attn_sdpa_backward(&pq, b->want_kv ? &pk : NULL, b->want_kv ? &pv : NULL, NULL, &da, &qa, &kb, &vb, &oa,
                                     &la, &o, err);
            if (!*st) {
                attn_ring_add(&acc, &pq);
                if (b->want_kv) {
                    attn_tensor gk = ring_rows(&t[2], dk, krow, m), gv = ring_rows(&t[3], dv, krow, m);
                    attn_ring_add(&gk, &pk), attn_ring_add(&gv, &pv);
                }
            }
            R->stats.compute_s += MPI_Wtime() - t0;
            attn_ring_progress(req, nreq);
        }
    }
}

/* Post a send of `bytes` from `from` to the right and a receive into `into`
 * from the left; false when MPI refuses. */
static bool exchange(ring *R, MPI_Request req[2], char *from, int64_t bytes, char *into, int64_t cap, int tag) {
    R->stats.bytes_sent += bytes, R->in_flight = true;
    return MPI_Irecv(into, (int)cap, MPI_BYTE, R->left, tag, R->comm, &req[0]) == MPI_SUCCESS &&
           MPI_Isend(from, (int)bytes, MPI_BYTE, R->right, tag, R->comm, &req[1]) == MPI_SUCCESS;
}

static attn_status run(ring *R, bwd *b, attn_error *err) {
    attn_tensor own[4];
    shard_views(own, b, b->kv[0], b->g[0], b->k->shape[b->k->rank - 2]);
    attn_status st = attn_ring_copy(&own[0], b->k, err), local = ATTN_OK;
    if (!st) st = attn_ring_copy(&own[1], b->v, err);
    if (st) return st;
    memset(b->g[0], 0, (size_t)b->g_max);
    attn_ring_fill(&b->dq_acc, 0);
    for (int t = 0; t < R->size; t++) {
        int src = (R->rank - t + R->size) % R->size, nreq = 0;
        attn_mpi_shard ks;
        attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
        MPI_Request req[4];
        int64_t kv_bytes = ring_bytes(b->k->dtype, b->k, b->k->rank - 2, ks.rows) +
                           ring_bytes(b->v->dtype, b->v, b->v->rank - 2, ks.rows);
        if (t + 1 < R->size) {
            if (!exchange(R, req, b->kv[t % 2], kv_bytes, b->kv[(t + 1) % 2], b->kv_max, RING_TAG_KV))
                return ring_fail(err, ATTN_ERR_COMM, "cannot post the ring's messages (step %d)", t);
            nreq = 2;
        }
        step(R, b, b->kv[t % 2], b->g[t % 2], src, req, nreq, &local, err);
        if (b->want_kv) { /* this shard's gradients go on; the next one's arrive */
            int64_t g_bytes = ring_bytes(b->gt, b->k, b->k->rank - 2, ks.rows) + ring_bytes(b->gt, b->v, b->v->rank - 2, ks.rows);
            if (!exchange(R, req + nreq, b->g[t % 2], g_bytes, b->g[(t + 1) % 2], b->g_max, RING_TAG_GRAD))
                return ring_fail(err, ATTN_ERR_COMM, "cannot post the gradients' messages (step %d)", t);
            nreq += 2;
        }
        if (nreq && (st = attn_ring_wait(R, req, nreq, err))) return st;
    }
    return local;
}

/* t shaped and typed like `like` (shape), of dtype dt; no stride 0 for an output. */
static attn_status check_like(const attn_tensor *t, const char *name, const attn_tensor *like, int rank, attn_dtype dt,
                              bool output, attn_error *err) {
    if (!t->data) return ring_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    if (t->dtype != dt) return ring_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be %s", name, attn_dtype_name(t->dtype),
                                         attn_dtype_name(dt));
    if (t->rank != rank || memcmp(t->shape, like->shape, sizeof(int64_t) * (size_t)rank) != 0)
        return ring_fail(err, ATTN_ERR_SHAPE, "%s has the wrong shape for this rank's shard", name);
    for (int d = 0; output && d < rank; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0)
            return ring_fail(err, ATTN_ERR_STRIDE, "%s has stride 0 in dimension %d", name, d);
    return ATTN_OK;
}

static attn_status plan(ring *R, bwd *b, attn_tensor *const g[3], const attn_tensor *dout, const attn_tensor *q,
                        const attn_tensor *k, const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                        attn_error *err) {
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    attn_status st = attn_ring_check(R, &rank, shape, q, k, v, err);
    if (st) return st;
    if (!dout || !out || !lse) return ring_fail(err, ATTN_ERR_NULL, "dout, out and lse (the forward's) must not be NULL");
    if (!g[0] && !g[1] && !g[2]) return ring_fail(err, ATTN_ERR_NULL, "dq, dk and dv are all NULL; ask for one at least");
    attn_tensor like;
    attn_tensor_init(&like, NULL, q->dtype, rank, shape, NULL, NULL);
    const attn_tensor *likes[3] = {q, k, v};
    static const char *const NAMES[3] = {"dq", "dk", "dv"};
    if ((st = check_like(out, "out", &like, rank, q->dtype, false, err)) ||
        (st = check_like(dout, "dout", &like, rank, q->dtype, false, err)) ||
        (st = check_like(lse, "lse", &like, rank - 1, q->dtype, false, err)))
        return st;
    for (int i = 0; i < 3; i++)
        if (g[i] && (st = check_like(g[i], NAMES[i], likes[i], likes[i]->rank, q->dtype, true, err))) return st;
    static const char *const ALL[9] = {"dq", "dk", "dv", "dout", "q", "k", "v", "out", "lse"};
    const attn_tensor *ins[6] = {dout, q, k, v, out, lse};
    if ((st = attn_ring_check_outputs((const attn_tensor *const *)g, 3, ins, 6, ALL, err))) return st;
    b->q = q, b->k = k, b->v = v, b->out = out, b->lse = lse, b->dout = dout, b->gt = q->dtype;
    b->want_kv = g[1] || g[2];
    if (R->empty) return ATTN_OK; /* no ring, no buffers: local() */
    int dq = q->rank - 2, dk = k->rank - 2, dv = v->rank - 2;
    int64_t piece = 0;
    for (int src = 0; src < R->size; src++) {
        attn_mpi_shard ks;
        attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
        int64_t kvb = ring_bytes(k->dtype, k, dk, ks.rows) + ring_bytes(v->dtype, v, dv, ks.rows);
        int64_t gb = ring_bytes(b->gt, k, dk, ks.rows) + ring_bytes(b->gt, v, dv, ks.rows);
        b->kv_max = kvb > b->kv_max ? kvb : b->kv_max, b->g_max = gb > b->g_max ? gb : b->g_max;
    }
    piece = ring_bytes(b->gt, q, dq, R->qs.rows) + b->g_max;
    if (b->kv_max > INT32_MAX || b->g_max > INT32_MAX)
        return ring_fail(err, ATTN_ERR_OVERFLOW, "a shard of k and v is over 2 GiB: use more ranks");
    for (int i = 0; i < 2; i++) b->kv[i] = malloc((size_t)b->kv_max), b->g[i] = malloc((size_t)b->g_max);
    b->piece = malloc((size_t)piece);
    b->dq_acc = ring_block(malloc((size_t)ring_bytes(b->gt, q, dq, R->qs.rows)), b->gt, q, dq, R->qs.rows);
    if (!b->kv[0] || !b->kv[1] || !b->g[0] || !b->g[1] || !b->piece || !b->dq_acc.data)
        return ring_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the ring's buffers");
    return ATTN_OK;
}

/* The gradients into the caller's tensors: dq from its sum, dk and dv from
 * the shard's gradients that came home. */
static attn_status write_out(const ring *R, bwd *b, attn_tensor *const g[3], attn_error *err) {
    attn_tensor home[4];
    shard_views(home, b, NULL, b->g[R->size % 2], b->k->shape[b->k->rank - 2]);
    attn_status st = g[0] ? attn_ring_copy(g[0], &b->dq_acc, err) : ATTN_OK;
    if (!st && g[1]) st = attn_ring_copy(g[1], &home[2], err);
    if (!st && g[2]) st = attn_ring_copy(g[2], &home[3], err);
    return st;
}

/* A call with no (query, key) pair anywhere (R->empty): each rank's
 * gradients are attn_sdpa_backward's on its own shard alone, as no other
 * rank's queries or keys meet its own (every gradient with an element is
 * 0). No message is sent. */
static attn_status local(const ring *R, attn_tensor *const g[3], const attn_tensor *dout, const attn_tensor *q,
                         const attn_tensor *k, const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                         attn_error *err) {
    attn_tensor mask;
    attn_sdpa_options o = attn_ring_local_options(R, k->shape[k->rank - 2], &mask);
    return attn_sdpa_backward(g[0], g[1], g[2], NULL, dout, q, k, v, out, lse, &o, err);
}

attn_status attn_mpi_sdpa_backward(MPI_Comm comm, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                   const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                                   const attn_mpi_options *options, attn_error *err) {
    ring R;
    bwd b;
    memset(&b, 0, sizeof b);
    attn_error own;
    if (!err) err = &own; /* the ranks share the first failing rank's message */
    attn_status st = attn_ring_start(&R, comm, options, q, k, v, dk || dv, err);
    if (R.comm == MPI_COMM_NULL) return st;
    attn_tensor *const g[3] = {dq, dk, dv};
    if (!st) st = attn_ring_agree(&R, plan(&R, &b, g, dout, q, k, v, out, lse, err), err); /* all ranks go on, or none */
    if (!st && R.empty) st = attn_ring_agree(&R, local(&R, g, dout, q, k, v, out, lse, err), err);
    else if (!st) st = attn_ring_agree(&R, run(&R, &b, err), err);
    if (!st && !R.empty) st = write_out(&R, &b, g, err);
    if (!R.in_flight) /* else MPI may still use them (see ring.h) */
        for (int i = 0; i < 2; i++) free(b.kv[i]), free(b.g[i]);
    free(b.piece), free(b.dq_acc.data);
    attn_ring_close(&R);
    return st;
}
