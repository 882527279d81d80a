/* ring.h -- what libattn-mpi's files share (not public): one call's ring
 * (a private communicator, its rank, the whole sequence's lengths, the
 * attention's options), messages with a deadline, errors agreed across the
 * ranks, and row views of tensors. */
#ifndef ATTN_MPI_RING_H
#define ATTN_MPI_RING_H

#include "attn_mpi.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ring {
    MPI_Comm comm;           /* a duplicate of the caller's, errors returned, never aborting */
    int rank, size, left, right;
    double timeout;
    attn_mpi_layout layout;
    attn_sdpa_options so;    /* the caller's attention options, read */
    int64_t L, S;            /* the whole sequence's queries and keys */
    attn_mpi_shard qs;       /* this rank's queries */
    bool empty;              /* no (query, key) pair anywhere: L, S or a batch dimension is 0 (attn_ring_lengths) */
    attn_mpi_stats stats;
    attn_mpi_stats *stats_out;
    /* Ring messages are posted (set before posting, cleared when a wait sees
     * them through): after a failure with this set, MPI may still write into
     * the ring's receive buffers or read its send buffers, so they are left
     * allocated (leaked) rather than freed under it. */
    bool in_flight;
} ring;

/* err set to status and the formatted message; returns status (attn.h's). */
#define ring_fail attn_error_set

/* "s" after a count other than 1, so that a message reads "1 rank" and
 * "2 ranks" ("%d rank%s", n, ring_plural(n)): a ring may have one rank. */
static inline const char *ring_plural(int64_t n) { return n == 1 ? "" : "s"; }

/* Read the options and duplicate comm (with a deadline). An error in the
 * options is returned with the ring open, to be agreed (R->comm set);
 * one that leaves R->comm MPI_COMM_NULL cannot be. */
attn_status attn_ring_open(ring *R, MPI_Comm comm, const attn_mpi_options *options, attn_error *err);
void attn_ring_close(ring *R);
/* Wait for n ring messages until the deadline: req[0], req[2], ... receives
 * from the left neighbour, req[1], req[3], ... sends to the right one.
 * ATTN_ERR_COMM if they fail or do not complete, saying which of the two
 * directions did not (the receive from rank L, the send to rank R, both).
 * The time waited is added to stats.wait_s; R->in_flight is cleared once
 * all completed. */
attn_status attn_ring_wait(ring *R, MPI_Request *req, int n, attn_error *err);
/* Let MPI move messages along while the caller computes (no waiting). */
void attn_ring_progress(MPI_Request *req, int n);
/* Every rank's status made one: when any rank failed, all return the
 * lowest failing rank's status and message ("rank R: ..." on the ranks
 * that did not fail alike). ATTN_ERR_COMM is returned as it is, without a
 * message: a broken ring cannot agree. */
attn_status attn_ring_agree(ring *R, attn_status st, attn_error *err);
/* FNV-1a: h extended by n bytes; start from RING_DIGEST_START. */
#define RING_DIGEST_START 14695981039346656037ull
uint64_t attn_ring_digest(uint64_t h, const void *bytes, size_t n);
/* Whether every rank makes the same call (same.c): the same shapes but
 * their rows, dtypes, layout and attention options. kv_grads is -1 for
 * the forward, else whether the backward is asked for dk or dv. The error
 * when not is the same on every rank (attn_mpi_same). */
attn_status attn_ring_same(const ring *R, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, int kv_grads,
                           attn_error *err);
/* The whole lengths (sums of the ranks' Lr and Sr), then this rank's shard;
 * ATTN_ERR_SHAPE when a rank's sizes are not its layout's shard, or L or S
 * is neither 0 nor enough for a row on every rank. R->empty is set when
 * the call has no (query, key) pair: L or S is 0, or batch_zero (a batch
 * dimension of q, k or v is 0, alike on every rank once attn_ring_same passed).
 * Such a call needs no message: each rank makes attn_sdpa's empty call on
 * its own rows (attn_ring_local_options). */
attn_status attn_ring_lengths(ring *R, int64_t Lr, int64_t Sr, bool batch_zero, attn_error *err);
/* attn_ring_open, attn_ring_same, then attn_ring_lengths from q's and k's rows (q, k
 * and v may be NULL: NULL or of a wrong rank, alike on every rank once
 * attn_ring_same passed, is said as attn_sdpa says it). The status is the same
 * on every rank (agreed). When the ring could not open, R->comm is
 * MPI_COMM_NULL and nothing is to agree. */
attn_status attn_ring_start(ring *R, MPI_Comm comm, const attn_mpi_options *options, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, int kv_grads, attn_error *err);
/* The attention's options for the piece (this rank's query segment a, key
 * segment b of the shard ks), with the mask cut to its rows and columns
 * into *mask_view. */
attn_sdpa_options attn_ring_piece_options(const ring *R, const attn_mpi_shard *ks, int a, int b, attn_tensor *mask_view);
/* The attention's options for this rank's queries against its own
 * k_rows keys alone, the mask cut to those columns into *mask_view (the
 * mask's columns are the whole's S or 1, checked by attn_ring_check): for the
 * checks attn_sdpa makes on this rank's shards, and for an empty call. */
attn_sdpa_options attn_ring_local_options(const ring *R, int64_t k_rows, attn_tensor *mask_view);
/* Whether a piece has no visible pair under the causal limit. */
bool attn_ring_piece_hidden(const ring *R, const attn_mpi_shard *ks, int a, int b);
/* Check q, k, v and the options on this rank, and the shapes of out (lse's
 * is out's without its last dimension): rank, out_shape. */
attn_status attn_ring_check(const ring *R, int *rank, int64_t out_shape[ATTN_MAX_RANK], const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, attn_error *err);
/* Every output owns its memory, as in attn.h: none of the n_outs outputs
 * overlaps an output before it or any of the n_ins inputs (NULL entries
 * are skipped; names[] holds the outputs' names, then the inputs'). */
attn_status attn_ring_check_outputs(const attn_tensor *const *outs, int n_outs, const attn_tensor *const *ins, int n_ins,
                                    const char *const *names, attn_error *err);

/* Whether the ring cuts mask m into pieces: it has keys as its last
 * dimension (rank 1 and up). One of rank 0 is every piece's as it is; one
 * of a rank outside 0..ATTN_MAX_RANK has no shape to cut, and attn_sdpa
 * refuses it. */
static inline bool ring_mask_cut(const attn_tensor *m) { return m && m->rank >= 1 && m->rank <= ATTN_MAX_RANK; }

/* Rows [r0, r0 + n) of t along dimension dim, as a view. */
static inline attn_tensor ring_rows(const attn_tensor *t, int dim, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.shape[dim] = n;
    v.data = (char *)t->data + r0 * t->strides[dim] * (int64_t)attn_dtype_size(t->dtype);
    return v;
}

/* A C-contiguous tensor over `data` shaped like `like` but with n rows
 * along dimension dim, of dtype dt. */
static inline attn_tensor ring_block(void *data, attn_dtype dt, const attn_tensor *like, int dim, int64_t n) {
    attn_tensor t;
    int64_t shape[ATTN_MAX_RANK];
    for (int d = 0; d < like->rank; d++) shape[d] = d == dim ? n : like->shape[d];
    attn_tensor_init(&t, data, dt, like->rank, shape, NULL, NULL);
    return t;
}

/* Bytes of a C-contiguous tensor like `like` with n rows along dim, of dt. */
static inline int64_t ring_bytes(attn_dtype dt, const attn_tensor *like, int dim, int64_t n) {
    int64_t b = (int64_t)attn_dtype_size(dt);
    for (int d = 0; d < like->rank; d++) b *= d == dim ? n : like->shape[d];
    return b;
}

/* dst = src (same shape, any strides and float dtypes). */
attn_status attn_ring_copy(attn_tensor *dst, const attn_tensor *src, attn_error *err);
/* Every element of t (any strides, f32 or f64) set to x. */
void attn_ring_fill(attn_tensor *t, double x);
/* dst += src elementwise: same shape and float dtype, any strides. */
void attn_ring_add(attn_tensor *dst, const attn_tensor *src);

/* The message tags of one call, on the ring's private communicator. */
enum { RING_TAG_KV = 1, RING_TAG_GRAD = 2 };

#endif /* ATTN_MPI_RING_H */
