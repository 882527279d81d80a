/* attn_mpi.h -- libattn-mpi: exact attention over a sequence sharded across
 * the ranks of an MPI communicator (ring attention, Liu et al., 2023).
 *
 * Each rank holds a shard of the queries and the same shard of the keys and
 * values, along the sequence. The key/value shards travel around the ring:
 * at step t rank r attends its queries to the shard of rank r - t, while the
 * next shard is already on its way (MPI_Isend/MPI_Irecv, double-buffered),
 * and merges the partial results by their log-sum-exp (attn_sdpa_merge).
 * After N steps every rank has exactly what attn_sdpa over the whole
 * sequence gives for its rows: f64 within 1e-13 of it for any rank count,
 * f32 within attn_sdpa's f32 bound (attn.h; in the bf16 compute mode, that
 * mode's bound). The backward pass sends the keys and values round again,
 * with their gradients travelling beside them back to their owners.
 *
 *   attn_mpi_options o = attn_mpi_options_default();
 *   o.attention = &sdpa_options;           // causal, scale, mask, ...
 *   attn_mpi_shard sh;
 *   attn_mpi_shard_of(&sh, L, rank, size, o.layout, &err);
 *   ... q_local (..., Hq, sh.rows, E), k_local, v_local (..., Hk, sh.rows, E)
 *   attn_mpi_sdpa(MPI_COMM_WORLD, &out_local, &lse_local, &q_local, &k_local,
 *                 &v_local, &o, &err);
 *
 * Build: libattn-mpi.a and this header are made when mpicc exists; link
 * with -lattn-mpi -lattn and MPI (mpicc does the last). libattn itself has
 * no MPI in it. Every call is collective: all ranks of comm make it, with
 * shards of the same tensors and the same options. Before any shard
 * travels the ranks check that they do (attn_mpi_same): a rank with other
 * heads, dimensions, dtypes or options is one error on every rank, naming
 * what differs, not a wrong answer or a wait for a message that never
 * comes. Errors agree: when any rank's arguments are wrong, every rank
 * returns the same status, and the message names the rank it came from
 * ("rank R: ..."). A rank that dies or stops answering
 * makes the others return ATTN_ERR_COMM within options.timeout_s, saying
 * what did not complete: a collective of the call's setup or agreement
 * ("duplicating the communicator: the ranks did not all answer ..."), or
 * a ring message: the receive from the left neighbour, the send to the
 * right one, or both. The communicator is then unusable, and MPI may still
 * hold the operations that did not complete: the caller should MPI_Abort.
 * The ring's buffers those operations read and write are then left
 * allocated (leaked), never freed while MPI may still use them. */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include <mpi.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a sequence of n positions is cut into shards, one per rank.
 *   ATTN_MPI_CONTIGUOUS  rank r holds positions [r·n/N, (r+1)·n/N): simple,
 *                        but under a causal mask rank 0's queries see only
 *                        its own keys while the last rank's see all, so the
 *                        ranks wait on the slowest.
 *   ATTN_MPI_ZIGZAG      the sequence in 2N chunks (chunk c = [c·n/2N,
 *                        (c+1)·n/2N)); rank r holds chunk r then chunk
 *                        2N-1-r, one early and one late, so every rank has
 *                        the same causal work (the default). */
typedef enum attn_mpi_layout { ATTN_MPI_CONTIGUOUS = 0, ATTN_MPI_ZIGZAG = 1 } attn_mpi_layout;

/* The positions one rank holds: count segments (1 or 2), segment i being
 * positions [start[i], start[i] + length[i]) of the whole sequence; the
 * shard's rows are segment 0's then segment 1's, rows in all. */
typedef struct attn_mpi_shard {
    int count;
    int64_t start[2], length[2];
    int64_t rows;
} attn_mpi_shard;

/* The shard of rank `rank` of `size` for a sequence of n >= 0 positions.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (rank outside 0..size-1, size
 * < 1, n < 0), ATTN_ERR_OPTION (an unknown layout). */
ATTN_API attn_status attn_mpi_shard_of(attn_mpi_shard *shard, int64_t n, int rank, int size,
                                       attn_mpi_layout layout, attn_error *err);

/* Copy a shard's rows out of a whole tensor, or back into it: local and
 * whole have the same rank, dtype and shape but along dimension `dim`
 * (negative counts from the end: -2 is the sequence of (..., L, E)), where
 * whole has n positions and local the shard's rows. Any strides. Errors:
 * ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_DTYPE (also a quantized dtype),
 * ATTN_ERR_SHAPE. */
ATTN_API attn_status attn_mpi_shard_rows(attn_tensor *local, const attn_tensor *whole, int dim,
                                         const attn_mpi_shard *shard, attn_error *err);
ATTN_API attn_status attn_mpi_unshard_rows(attn_tensor *whole, const attn_tensor *local, int dim,
                                           const attn_mpi_shard *shard, attn_error *err);

/* What one call spent its time on (seconds, this rank): computing, waiting
 * for messages that had not arrived when the computation was done (the
 * communication it could not hide), and in all; and the bytes it sent. */
typedef struct attn_mpi_stats {
    double compute_s, wait_s, total_s;
    int64_t bytes_sent;
} attn_mpi_stats;

/* The longest timeout_s taken, in seconds (about 31 years): beyond it the
 * deadline arithmetic on MPI_Wtime's seconds loses its meaning. */
#define ATTN_MPI_TIMEOUT_MAX 1e9

typedef struct attn_mpi_options {
    size_t struct_size;           /* set by attn_mpi_options_default() (attn.h: "Versioned structs") */
    attn_mpi_layout layout;       /* how q, k and v are sharded (default ATTN_MPI_ZIGZAG) */
    double timeout_s;             /* the longest wait for any one message or collective
                                   * (default 60 s; above 0, below ATTN_MPI_TIMEOUT_MAX) */
    /* The attention's options, or NULL for the defaults: scale, causal (both
     * alignments, in the whole sequence's positions), mask, compute, context
     * (this rank's threads) and the score variants (softcap, ALiBi, window,
     * sinks, RoPE). The mask holds this rank's query rows, in its shard's
     * order, against every key of the whole sequence in order: (..., Hq,
     * rows, S) with the usual broadcasting (rows or S may be 1). Dropout and
     * the pieces' own fields (query_start, ...) are not taken. */
    const attn_sdpa_options *attention;
    attn_mpi_stats *stats;        /* where to write this call's timings, or NULL */
} attn_mpi_options;

/* The defaults above: as a value, attn_mpi_options_default(); in place,
 * attn_mpi_options_init(&o, sizeof o) (attn.h: "Versioned structs"). */
ATTN_API size_t attn_mpi_options_init(attn_mpi_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_mpi_options)
#define attn_mpi_options_default attn_mpi_options_default_inline

/* The ranks' agreement. Each call below first checks that every rank holds
 * the same values of what must be alike, with attn_mpi_same; a program
 * checks what only it knows the same way (the attn-mpi command: its files
 * and outputs).
 *
 * One value that every rank must hold alike: a count, a dtype, an option,
 * or a digest (attn_mpi_digest) of something longer, such as a path. */
typedef enum attn_mpi_kind {
    ATTN_MPI_INTEGER = 0, /* value is the number itself */
    ATTN_MPI_REAL = 1,    /* real is the number (compared bit for bit) */
    ATTN_MPI_DTYPE = 2,   /* value is an attn_dtype */
    ATTN_MPI_GIVEN = 3,   /* value is 1 when the thing is given, 0 when not */
    ATTN_MPI_DIGEST = 4   /* value is a digest: the error can say only that it differs */
} attn_mpi_kind;

typedef struct attn_mpi_value {
    const char *name;     /* what the error names, e.g. "q's dtype" */
    attn_mpi_kind kind;
    attn_status code;     /* the status when the ranks differ (0: ATTN_ERR_ARGUMENT) */
    int64_t value;        /* the value, for every kind but ATTN_MPI_REAL */
    double real;          /* the value, for ATTN_MPI_REAL */
} attn_mpi_value;

/* Whether every rank of comm holds the same n values (collective: every
 * rank calls it, with its own values of the same n names). ATTN_OK on
 * every rank when they agree. Otherwise every rank returns the same error,
 * of the first value that differs: its code, and the message "the ranks
 * disagree on NAME: A on some ranks, B on others" (the least and the
 * greatest; "given on some ranks, not on others" for ATTN_MPI_GIVEN; "not
 * the same on every rank" for ATTN_MPI_DIGEST). No answer within
 * timeout_s (above 0, below ATTN_MPI_TIMEOUT_MAX) is ATTN_ERR_COMM. It allocates nothing (64 values per
 * all-reduce), so that no rank fails alone while the others wait for it.
 * Errors: ATTN_ERR_NULL (values with n > 0, or comm MPI_COMM_NULL),
 * ATTN_ERR_OPTION (timeout_s), ATTN_ERR_ARGUMENT (n < 0, or the ranks pass
 * different n), ATTN_ERR_COMM (also when MPI is not initialized). comm's own error
 * handler applies to MPI's errors. */
ATTN_API attn_status attn_mpi_same(MPI_Comm comm, const attn_mpi_value *values, int n, double timeout_s,
                                   attn_error *err);

/* A 64-bit digest (FNV-1a) of n bytes, for an ATTN_MPI_DIGEST value. */
ATTN_API int64_t attn_mpi_digest(const void *bytes, size_t n);

/* attn_sdpa over a sharded sequence (see the top of this file). On each
 * rank: q (..., Hq, Lr, E), k (..., Hk, Sr, E), v (..., Hk, Sr, Ev) hold the
 * rank's shard (options->layout) of a whole of L queries and S keys (L and
 * S are the sums over the ranks; Lr and Sr must be the layout's shard
 * sizes); out (..., Hq, Lr, Ev) and lse (..., Hq, Lr), optional, receive
 * the rank's rows of attn_sdpa's result over the whole. Shapes, dtypes
 * (f32 with f16/bf16 k and v too), GQA and broadcasting are attn_sdpa's,
 * but q must be f32 or f64: the ring accumulates out, lse and the
 * gradients in q's dtype (a 16-bit q is ATTN_ERR_DTYPE; widen it to f32);
 * and quantized k or v (any format attn_quant_format lists) is ATTN_ERR_DTYPE
 * too (attn_dequantize widens them).
 * Memory: two shards of k and v in flight, and one partial result.
 * L and S are each 0 or enough for a row in every shard (N for the
 * contiguous layout, 2N for zigzag; ATTN_ERR_SHAPE otherwise). Dimensions
 * of 0 are attn_sdpa's (attn.h): with L = 0, S = 0 or a batch dimension of
 * 0 nothing travels, and each rank's result is attn_sdpa's on its own
 * rows (out 0 and lse -inf, or the sink's, for S = 0 with queries).
 *
 * Every rank must pass alike (attn_mpi_same, before any shard travels):
 * the layout; whether q, k and v are given, their ranks, dtypes and every
 * dimension but the rows; and every attention option: has_scale, scale,
 * causal, compute, softcap, window, dropout_p (refused on any rank but
 * 0); the mask's
 * presence, dtype, rank and every dimension but its rows; ALiBi's slopes
 * and the sinks (presence, dtype, shape and values); RoPE (presence and
 * every field). Each rank's own, free to differ: the rows themselves (and
 * the mask's rows: this rank's, or 1), out (checked against this rank's
 * q, k, v), whether lse is wanted, timeout_s, stats and the context
 * (threads). A disagreement is ATTN_ERR_NULL (q, k or v given on some
 * ranks only), ATTN_ERR_RANK, ATTN_ERR_DTYPE, ATTN_ERR_SHAPE (their
 * ranks, dtypes, dimensions), ATTN_ERR_MASK (the mask's) or
 * ATTN_ERR_OPTION (the layout and the options), with the same message on
 * every rank.
 *
 * Errors: those of attn_sdpa, agreed across ranks; the disagreements
 * above; ATTN_ERR_SHAPE for a shard of the wrong size; ATTN_ERR_NULL for
 * comm MPI_COMM_NULL (on this rank alone); ATTN_ERR_COMM. On
 * an error out and lse may hold partial results. */
ATTN_API attn_status attn_mpi_sdpa(MPI_Comm comm, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                   const attn_tensor *k, const attn_tensor *v, const attn_mpi_options *options,
                                   attn_error *err);

/* The gradients of attn_mpi_sdpa on the same shards: given dout (like out)
 * and the forward's out and lse (this rank's rows), dq, dk and dv (each
 * optional, like q, k and v, in q's dtype) of this rank's shard, equal to
 * attn_sdpa_backward's over the whole. The keys and values travel the ring
 * once more, their gradients beside them, and each shard's dk and dv end
 * on the rank that owns it. The ranks must agree as for attn_mpi_sdpa, and
 * on whether dk or dv is asked for (either: their gradients travel the
 * ring; ATTN_ERR_NULL when only some ranks ask); dq is each rank's own.
 * Dimensions of 0 as in attn_mpi_sdpa: nothing travels, and each rank's
 * gradients are attn_sdpa_backward's on its own shard (0 where they have
 * an element).
 * Errors: those of attn_sdpa_backward, agreed across ranks, the
 * disagreements, and ATTN_ERR_COMM. */
ATTN_API attn_status attn_mpi_sdpa_backward(MPI_Comm comm, attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                            const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                                            const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                                            const attn_mpi_options *options, attn_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MPI_H */
