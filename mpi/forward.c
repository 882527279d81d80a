/* forward.c -- attn_mpi_sdpa: ring attention's forward pass.
 *
 *   for t = 0 .. N-1:                      (N ranks; this is rank r)
 *     the key/value shard of rank r - t is in `cur`
 *     post: receive the next shard into `nxt` from the left, send `cur` right
 *     for each (query segment, key segment) the causal limit does not hide:
 *       (o, l) = attn_sdpa(q segment, key segment)   (a piece of the whole)
 *       (out, lse) = merge((out, lse), (o, l))       (attn_sdpa_merge)
 *     wait for both messages (the time not hidden behind the pieces)
 *
 * The sink, when there is one, joins the first piece of each row only. */
#include "ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One call's tensors and buffers. */
typedef struct fwd {
    const attn_tensor *q, *k, *v;
    attn_tensor out, lse;        /* the accumulators: the caller's, or ours */
    char *buf[2];                /* two shards of k then v, in flight */
    int64_t kv_max;              /* bytes of the largest shard */
    char *part;                  /* one piece's (o, l) */
    double *own_lse;             /* when the caller wants no lse */
} fwd;

/* Shard `src`'s k and v as tensors over buf. */
static void shard_tensors(attn_tensor *k, attn_tensor *v, const fwd *f, const char *buf, int64_t rows) {
    int dk = f->k->rank - 2, dv = f->v->rank - 2;
    *k = ring_block((void *)buf, f->k->dtype, f->k, dk, rows);
    *v = ring_block((void *)(buf + ring_bytes(f->k->dtype, f->k, dk, rows)), f->v->dtype, f->v, dv, rows);
}

/* The pieces of one step: this rank's query segments against the shard of
 * rank src. A failure is kept in *st, and the ring goes on. */
static void step(ring *R, fwd *f, const char *buf, int src, bool first, MPI_Request *req, int nreq, attn_status *st,
                 attn_error *err) {
    attn_mpi_shard ks;
    attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
    attn_tensor k, v;
    shard_tensors(&k, &v, f, buf, ks.rows);
    int dq = f->q->rank - 2, dk = k.rank - 2, dv = v.rank - 2, dout = f->out.rank - 2;
    int64_t qrow = 0;
    for (int a = 0; a < R->qs.count; qrow += R->qs.length[a], a++) {
        int64_t krow = 0;
        for (int b = 0; b < ks.count; krow += ks.length[b], b++) {
            bool sink_here = first && b == 0 && R->so.sinks;
            if (*st || (!sink_here && attn_ring_piece_hidden(R, &ks, a, b))) continue;
            double t0 = MPI_Wtime();
            attn_tensor mask, qa = ring_rows(f->q, dq, qrow, R->qs.length[a]);
            attn_tensor kb = ring_rows(&k, dk, krow, ks.length[b]), vb = ring_rows(&v, dv, krow, ks.length[b]);
            attn_sdpa_options o = attn_ring_piece_options(R, &ks, a, b, &mask);
            if (!sink_here) o.sinks = NULL;
            attn_tensor acc = ring_rows(&f->out, dout, qrow, R->qs.length[a]);
            attn_tensor accl = ring_rows(&f->lse, dout, qrow, R->qs.length[a]);
            attn_tensor po = ring_block(f->part, f->out.dtype, &acc, dout, R->qs.length[a]);
            attn_tensor pl = ring_block(f->part + ring_bytes(f->out.dtype, &acc, dout, R->qs.length[a]), f->out.dtype,
                                        &accl, dout, R->qs.length[a]);
            const attn_tensor *outs[2] = {&acc, &po}, *lses[2] = {&accl, &pl};
            if ((*st = attn_sdpa(&po, &pl, NULL, &qa, &kb, &vb, &o, err)) == ATTN_OK) /* a NaN row stays NaN */
                *st = attn_sdpa_merge(&acc, &accl, outs, lses, 2, err);
            R->stats.compute_s += MPI_Wtime() - t0;
            attn_ring_progress(req, nreq); /* move the messages along between pieces */
        }
    }
}

/* The ring itself: N steps, the next shard in flight during each. */
static attn_status run(ring *R, fwd *f, attn_error *err) {
    int dk = f->k->rank - 2, dv = f->v->rank - 2;
    attn_tensor k0, v0; /* this rank's own shard, packed into the first buffer */
    shard_tensors(&k0, &v0, f, f->buf[0], f->k->shape[dk]);
    attn_status st = attn_ring_copy(&k0, f->k, err), local = ATTN_OK;
    if (!st) st = attn_ring_copy(&v0, f->v, err);
    if (st) return st;
    attn_ring_fill(&f->out, 0), attn_ring_fill(&f->lse, -INFINITY);
    for (int t = 0; t < R->size; t++) {
        int src = (R->rank - t + R->size) % R->size, nreq = 0;
        attn_mpi_shard ks;
        attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
        MPI_Request req[2];
        char *cur = f->buf[t % 2], *nxt = f->buf[(t + 1) % 2];
        if (t + 1 < R->size) {
            R->in_flight = true;
            int64_t bytes = ring_bytes(f->k->dtype, f->k, dk, ks.rows) + ring_bytes(f->v->dtype, f->v, dv, ks.rows);
            if (MPI_Irecv(nxt, (int)f->kv_max, MPI_BYTE, R->left, RING_TAG_KV, R->comm, &req[0]) != MPI_SUCCESS ||
                MPI_Isend(cur, (int)bytes, MPI_BYTE, R->right, RING_TAG_KV, R->comm, &req[1]) != MPI_SUCCESS)
                return ring_fail(err, ATTN_ERR_COMM, "cannot post the ring's messages (step %d)", t);
            nreq = 2, R->stats.bytes_sent += bytes;
        }
        step(R, f, cur, src, t == 0, req, nreq, &local, err);
        if (nreq && (st = attn_ring_wait(R, req, nreq, err))) return st;
    }
    return local;
}

/* out (and lse) shaped as attn_sdpa would write them for this rank's rows. */
static attn_status check_output(const attn_tensor *t, const char *name, attn_dtype dt, int rank, const int64_t *shape,
                                attn_error *err) {
    if (!t->data) return ring_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    if (t->dtype != dt) return ring_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be q's %s", name, attn_dtype_name(t->dtype),
                                         attn_dtype_name(dt));
    if (t->rank != rank || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)rank) != 0) {
        char got[128], want[128];
        attn_format_shape(got, sizeof got, t->rank, t->shape), attn_format_shape(want, sizeof want, rank, shape);
        return ring_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; this rank's rows need %s", name, got, want);
    }
    for (int d = 0; d < rank; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0)
            return ring_fail(err, ATTN_ERR_STRIDE, "%s has stride 0 in dimension %d", name, d);
    return ATTN_OK;
}

/* Every check on this rank, then the buffers. */
static attn_status plan(ring *R, fwd *f, attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                        const attn_tensor *v, attn_error *err) {
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    attn_status st = attn_ring_check(R, &rank, shape, q, k, v, err);
    if (st) return st;
    if (!out) return ring_fail(err, ATTN_ERR_NULL, "out is NULL");
    if ((st = check_output(out, "out", q->dtype, rank, shape, err)) ||
        (lse && (st = check_output(lse, "lse", q->dtype, rank - 1, shape, err))))
        return st;
    static const char *const NAMES[5] = {"out", "lse", "q", "k", "v"};
    const attn_tensor *outs[2] = {out, lse}, *ins[3] = {q, k, v};
    if ((st = attn_ring_check_outputs(outs, 2, ins, 3, NAMES, err))) return st;
    f->q = q, f->k = k, f->v = v, f->out = *out;
    if (R->empty) return ATTN_OK; /* no ring, no buffers: local() */
    int dk = k->rank - 2, dv = v->rank - 2, dout = rank - 2;
    for (int src = 0; src < R->size; src++) {
        attn_mpi_shard ks;
        attn_mpi_shard_of(&ks, R->S, src, R->size, R->layout, NULL);
        int64_t b = ring_bytes(k->dtype, k, dk, ks.rows) + ring_bytes(v->dtype, v, dv, ks.rows);
        f->kv_max = b > f->kv_max ? b : f->kv_max;
    }
    if (f->kv_max > INT32_MAX) return ring_fail(err, ATTN_ERR_OVERFLOW, "a shard of k and v is over 2 GiB: use more ranks");
    int64_t seg = R->qs.length[0] > R->qs.length[1] ? R->qs.length[0] : R->qs.length[1];
    attn_tensor lse_like = ring_block(NULL, q->dtype, out, dout, R->qs.rows);
    lse_like.rank = rank - 1;
    int64_t part = ring_bytes(q->dtype, out, dout, seg) + ring_bytes(q->dtype, &lse_like, dout, seg);
    f->buf[0] = malloc((size_t)f->kv_max), f->buf[1] = malloc((size_t)f->kv_max), f->part = malloc((size_t)part);
    if (!lse) {
        f->own_lse = malloc((size_t)ring_bytes(q->dtype, &lse_like, dout, R->qs.rows));
        attn_tensor_init(&f->lse, f->own_lse, q->dtype, rank - 1, shape, NULL, NULL);
    } else {
        f->lse = *lse;
    }
    if (!f->buf[0] || !f->buf[1] || !f->part || (!lse && !f->own_lse))
        return ring_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the ring's buffers (2 × %lld bytes)", (long long)f->kv_max);
    return ATTN_OK;
}

/* A call with no (query, key) pair anywhere (R->empty): each rank's rows
 * are attn_sdpa's on its own shard alone, as no key of another rank
 * exists for them (S = 0: out 0, lse -inf or the sink's) or they have no
 * element. No message is sent. */
static attn_status local(const ring *R, attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, attn_error *err) {
    attn_tensor mask;
    attn_sdpa_options o = attn_ring_local_options(R, k->shape[k->rank - 2], &mask);
    return attn_sdpa(out, lse, NULL, q, k, v, &o, err);
}

attn_status attn_mpi_sdpa(MPI_Comm comm, attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                          const attn_tensor *v, const attn_mpi_options *options, attn_error *err) {
    ring R;
    fwd f;
    memset(&f, 0, sizeof f);
    attn_error own;
    if (!err) err = &own; /* the ranks share the first failing rank's message */
    attn_status st = attn_ring_start(&R, comm, options, q, k, v, -1, err);
    if (R.comm == MPI_COMM_NULL) return st;
    if (!st) st = attn_ring_agree(&R, plan(&R, &f, out, lse, q, k, v, err), err); /* all ranks go on, or none */
    if (!st) st = attn_ring_agree(&R, R.empty ? local(&R, out, lse, q, k, v, err) : run(&R, &f, err), err);
    if (!R.in_flight) free(f.buf[0]), free(f.buf[1]); /* else MPI may still use them (see ring.h) */
    free(f.part), free(f.own_lse);
    attn_ring_close(&R);
    return st;
}
