/* comm.c -- the ring's messages: a private communicator whose errors are
 * returned (never MPI's default abort), every wait bounded by the call's
 * timeout so that a dead or stopped rank is an error rather than a hang,
 * and errors agreed across the ranks so that all return the same one. */
#include "ring.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

size_t attn_mpi_options_init(attn_mpi_options *options, size_t struct_size) {
    static const attn_mpi_options DEFAULTS = {.struct_size = sizeof DEFAULTS, .layout = ATTN_MPI_ZIGZAG, .timeout_s = 60};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* MPI's text for an error code, after `what` and the rank it was with
 * (peer; -1 for a collective, which names none). */
static attn_status mpi_fail(attn_error *err, int code, const char *what, int peer) {
    char text[MPI_MAX_ERROR_STRING], with[32] = "";
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
    if (peer >= 0) snprintf(with, sizeof with, " (rank %d)", peer);
    return ring_fail(err, ATTN_ERR_COMM, "%s%s: %s", what, with, text);
}

void attn_ring_progress(MPI_Request *req, int n) {
    int done;
    MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
}

/* Poll n requests until all complete or timeout seconds pass: MPI_SUCCESS
 * with *late false when they completed (*waited, when not NULL, grows by
 * the time it took), with *late true when the deadline came first; else
 * MPI's error code. */
static int poll_until(MPI_Request *req, int n, double timeout, double *waited, bool *late) {
    double t0 = MPI_Wtime(), deadline = t0 + timeout;
    struct timespec nap = {0, 20000}; /* 20 µs between polls: a core for the other ranks, little latency */
    *late = false;
    for (;;) {
        int done = 0, rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        if (done) break;
        if (MPI_Wtime() > deadline) {
            *late = true;
            return MPI_SUCCESS;
        }
        nanosleep(&nap, NULL);
    }
    if (waited) *waited += MPI_Wtime() - t0;
    return MPI_SUCCESS;
}

/* A collective that did not complete in time: every rank takes part, so
 * the one that stopped may be any of them. `what` names the collective. */
static attn_status wait_collective_for(MPI_Request *req, double timeout, const char *what, double *waited, attn_error *err) {
    bool late;
    int rc = poll_until(req, 1, timeout, waited, &late);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, what, -1);
    if (late)
        return ring_fail(err, ATTN_ERR_COMM, "%s: the ranks did not all answer within %g s: one stopped, failed or hangs",
                         what, timeout);
    return ATTN_OK;
}

attn_status attn_ring_wait(ring *R, MPI_Request *req, int n, attn_error *err) {
    bool late;
    int rc = poll_until(req, n, R->timeout, &R->stats.wait_s, &late);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "a message to or from a neighbour failed", -1);
    if (!late) {
        R->in_flight = false;
        return ATTN_OK;
    }
    /* Which of them is still pending: MPI_Testall changes nothing unless
     * all completed, MPI_Test each one on its own. */
    bool recv_late = false, send_late = false;
    for (int i = 0; i < n; i++) {
        int done = 0;
        rc = MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "a message to or from a neighbour failed", -1);
        if (!done) {
            if (i % 2 == 0) recv_late = true;
            else send_late = true;
        }
    }
    if (!recv_late && !send_late) { /* all came in since the last poll */
        R->in_flight = false;
        return ATTN_OK;
    }
    if (recv_late && send_late && R->left == R->right)
        return ring_fail(err, ATTN_ERR_COMM, "neither the receive from rank %d nor the send to it completed within %g s: "
                         "rank %d stopped, failed or hangs", R->left, R->timeout, R->left);
    if (recv_late && send_late)
        return ring_fail(err, ATTN_ERR_COMM, "neither the receive from rank %d nor the send to rank %d completed within %g s: "
                         "rank %d or %d stopped, failed or hangs", R->left, R->right, R->timeout, R->left, R->right);
    if (send_late)
        return ring_fail(err, ATTN_ERR_COMM, "the send to rank %d did not complete within %g s (the receive from rank %d "
                         "did): rank %d stopped, failed or hangs", R->right, R->timeout, R->left, R->right);
    return ring_fail(err, ATTN_ERR_COMM, "the receive from rank %d did not complete within %g s (the send to rank %d did): "
                     "rank %d stopped, failed or hangs", R->left, R->timeout, R->right, R->left);
}

/* A collective of R's communicator, named by `what`. */
static attn_status wait_collective(ring *R, MPI_Request *req, const char *what, attn_error *err) {
    return wait_collective_for(req, R->timeout, what, &R->stats.wait_s, err);
}

uint64_t attn_ring_digest(uint64_t h, const void *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)bytes)[i]) * 1099511628211ull; /* FNV-1a */
    return h;
}

int64_t attn_mpi_digest(const void *bytes, size_t n) {
    return (int64_t)attn_ring_digest(RING_DIGEST_START, bytes, n);
}

/* How value v reads in an error: "A on some ranks, B on others" for its
 * least and greatest (as int64; a double's bits). */
static void describe(char *out, size_t n, const attn_mpi_value *v, int64_t least, int64_t most) {
    double a, b;
    char x[32], y[32];
    switch (v->kind) {
    case ATTN_MPI_REAL:
        memcpy(&a, &least, sizeof a), memcpy(&b, &most, sizeof b);
        if (a > b) { /* bits order negative numbers backwards: say the two in the numbers' order */
            double t = a;
            a = b, b = t;
        }
        snprintf(x, sizeof x, "%g", a), snprintf(y, sizeof y, "%g", b);
        if (strcmp(x, y) == 0) snprintf(x, sizeof x, "%.17g", a), snprintf(y, sizeof y, "%.17g", b);
        snprintf(out, n, ": %s on some ranks, %s on others", x, y);
        break;
    case ATTN_MPI_DTYPE:
        snprintf(out, n, ": %s on some ranks, %s on others", attn_dtype_name((attn_dtype)least),
                 attn_dtype_name((attn_dtype)most));
        break;
    case ATTN_MPI_GIVEN: snprintf(out, n, ": given on some ranks, not on others"); break;
    case ATTN_MPI_DIGEST: snprintf(out, n, ": not the same on every rank"); break;
    default: snprintf(out, n, ": %lld on some ranks, %lld on others", (long long)least, (long long)most); break;
    }
}

/* Values compared per all-reduce: a chunk on the stack, so that no rank
 * can fail alone for want of memory while the others wait for it. */
enum { CHUNK = 64 };

/* The greatest of each of n <= CHUNK values over the ranks into most, and
 * the least into least: one all-reduce (MPI_MAX) of the values and their
 * complements, as ~x falls as x rises (and never overflows, unlike -x). */
static attn_status extremes(MPI_Comm comm, const int64_t *mine, int64_t *least, int64_t *most, int n, double timeout,
                            attn_error *err) {
    int64_t buf[4 * CHUNK] = {0}; /* the received half too: compilers cannot see MPI write it */
    for (int i = 0; i < n; i++) buf[i] = mine[i], buf[n + i] = ~mine[i];
    MPI_Request req;
    int rc = MPI_Iallreduce(buf, buf + 2 * n, 2 * n, MPI_INT64_T, MPI_MAX, comm, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "cannot compare the ranks' arguments", -1);
    attn_status st = wait_collective_for(&req, timeout, "comparing values across the ranks", NULL, err);
    for (int i = 0; !st && i < n; i++) most[i] = buf[2 * n + i], least[i] = ~buf[3 * n + i];
    return st;
}

attn_status attn_mpi_same(MPI_Comm comm, const attn_mpi_value *values, int n, double timeout_s, attn_error *err) {
    int initialized = 0;
    if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized)
        return ring_fail(err, ATTN_ERR_COMM, "MPI is not initialized: call MPI_Init first");
    if (comm == MPI_COMM_NULL) return ring_fail(err, ATTN_ERR_NULL, "comm is MPI_COMM_NULL");
    if (n < 0) return ring_fail(err, ATTN_ERR_ARGUMENT, "n is %d; it must be 0 or more", n);
    if (n > 0 && !values) return ring_fail(err, ATTN_ERR_NULL, "values is NULL (n is %d)", n);
    if (!(timeout_s > 0 && timeout_s < ATTN_MPI_TIMEOUT_MAX))
        return ring_fail(err, ATTN_ERR_OPTION, "timeout_s is %g; it must be above 0 and below %g", timeout_s,
                         ATTN_MPI_TIMEOUT_MAX);
    int64_t mine[CHUNK], least[CHUNK], most[CHUNK];
    mine[0] = n; /* first how many: an all-reduce of unequal lengths is no answer */
    attn_status st = extremes(comm, mine, least, most, 1, timeout_s, err);
    if (st) return st;
    if (least[0] != most[0])
        return ring_fail(err, ATTN_ERR_ARGUMENT, "the ranks compare different numbers of values: %lld on some ranks, "
                         "%lld on others", (long long)least[0], (long long)most[0]);
    for (int at = 0; at < n; at += CHUNK) {
        int m = n - at < CHUNK ? n - at : CHUNK;
        const attn_mpi_value *v = values + at;
        for (int i = 0; i < m; i++)
            if (v[i].kind == ATTN_MPI_REAL) memcpy(&mine[i], &v[i].real, sizeof mine[i]);
            else mine[i] = v[i].value;
        if ((st = extremes(comm, mine, least, most, m, timeout_s, err))) return st;
        for (int i = 0; i < m; i++) { /* the same answer on every rank: all stop at the same value */
            if (least[i] == most[i]) continue;
            char how[96];
            describe(how, sizeof how, &v[i], least[i], most[i]);
            return ring_fail(err, v[i].code ? v[i].code : ATTN_ERR_ARGUMENT, "the ranks disagree on %s%s",
                             v[i].name ? v[i].name : "a value", how);
        }
    }
    return ATTN_OK;
}

/* The caller's options into R. A wrong struct_size or timeout is this
 * rank's own error, agreed once the ring is open (attn_ring_start): the ranks
 * whose options are right wait for the others there, not until their
 * timeout. Meanwhile the defaults stand in (60 s to agree within). */
static attn_status read_options(ring *R, const attn_mpi_options *options, attn_error *err) {
    attn_mpi_options o = attn_mpi_options_default();
    R->timeout = o.timeout_s, R->layout = o.layout, R->so = attn_sdpa_options_default();
    attn_status st = attn_versioned_read(&o, sizeof o, options, "options", "start from attn_mpi_options_default()", err);
    if (st) return st;
    if (!(o.timeout_s > 0 && o.timeout_s < ATTN_MPI_TIMEOUT_MAX))
        return ring_fail(err, ATTN_ERR_OPTION, "timeout_s is %g; it must be above 0 and below %g", o.timeout_s,
                         ATTN_MPI_TIMEOUT_MAX);
    R->timeout = o.timeout_s, R->layout = o.layout, R->stats_out = o.stats;
    return attn_versioned_read(&R->so, sizeof R->so, o.attention, "options->attention",
                               "start from attn_sdpa_options_default()", err);
}

attn_status attn_ring_open(ring *R, MPI_Comm comm, const attn_mpi_options *options, attn_error *err) {
    memset(R, 0, sizeof *R);
    R->comm = MPI_COMM_NULL;
    attn_error own;
    attn_status bad = read_options(R, options, &own), st;
    int initialized = 0;
    if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized)
        return ring_fail(err, ATTN_ERR_COMM, "MPI is not initialized: call MPI_Init first");
    if (comm == MPI_COMM_NULL) /* MPI would raise it on MPI_COMM_WORLD, whose handler aborts */
        return ring_fail(err, ATTN_ERR_NULL, "comm is MPI_COMM_NULL");
    R->stats.total_s = MPI_Wtime(); /* from here: every wait below is inside the call's time */
    MPI_Request req;
    int rc = MPI_Comm_idup(comm, &R->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "cannot duplicate the communicator", -1);
    MPI_Comm_rank(comm, &R->rank), MPI_Comm_size(comm, &R->size);
    R->left = (R->rank + R->size - 1) % R->size, R->right = (R->rank + 1) % R->size;
    st = wait_collective(R, &req, "duplicating the communicator", err);
    if (st) { /* a duplicate never finished is not ours to free */
        R->comm = MPI_COMM_NULL;
        return st;
    }
    MPI_Comm_set_errhandler(R->comm, MPI_ERRORS_RETURN);
    if (bad && err) *err = own;
    return bad;
}

void attn_ring_close(ring *R) {
    if (R->comm == MPI_COMM_NULL) return; /* never opened (or MPI never started) */
    R->stats.total_s = MPI_Wtime() - R->stats.total_s;
    if (R->stats_out) *R->stats_out = R->stats;
    MPI_Comm_free(&R->comm);
}

attn_status attn_ring_agree(ring *R, attn_status st, attn_error *err) {
    if (st == ATTN_ERR_COMM) return st; /* the ring is broken: the others learn it from their own waits */
    int mine = st ? R->rank : R->size, first = R->size;
    MPI_Request req;
    int rc = MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, R->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "cannot agree on the call's status", -1);
    attn_status wst = wait_collective(R, &req, "agreeing on the call's status", err);
    if (wst) return wst;
    if (first == R->size) return ATTN_OK;
    struct { int status; char message[ATTN_ERROR_MESSAGE_SIZE]; } what;
    memset(&what, 0, sizeof what);
    if (R->rank == first) what.status = (int)st, memcpy(what.message, err->message, sizeof what.message);
    rc = MPI_Ibcast(&what, (int)sizeof what, MPI_BYTE, first, R->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "cannot share an error", -1);
    if ((wst = wait_collective(R, &req, "sharing an error among the ranks", err))) return wst;
    what.message[sizeof what.message - 1] = 0;
    /* The first failing rank's error as it is, there and where this rank
     * failed alike (an error the ranks already agreed on, the same
     * everywhere); else after the rank it came from. */
    if (R->rank == first || (st == (attn_status)what.status && strcmp(err->message, what.message) == 0)) return st;
    return ring_fail(err, (attn_status)what.status, "rank %d: %s", first, what.message);
}

attn_status attn_ring_lengths(ring *R, int64_t Lr, int64_t Sr, bool batch_zero, attn_error *err) {
    int64_t mine[2] = {Lr, Sr}, sum[2] = {0, 0};
    MPI_Request req;
    int rc = MPI_Iallreduce(mine, sum, 2, MPI_INT64_T, MPI_SUM, R->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "cannot sum the shards' lengths", -1);
    attn_status st = wait_collective(R, &req, "summing the shards' lengths", err);
    if (st) return st;
    R->L = sum[0], R->S = sum[1];
    attn_mpi_shard ks;
    if ((st = attn_mpi_shard_of(&R->qs, R->L, R->rank, R->size, R->layout, err)) ||
        (st = attn_mpi_shard_of(&ks, R->S, R->rank, R->size, R->layout, err)))
        return st;
    R->empty = R->L == 0 || R->S == 0 || batch_zero;
    /* A sequence of none is taken as attn_sdpa takes it (every shard has no
     * row); one of a few positions would leave some shards empty and others
     * not, which the ring's pieces do not expect. */
    int64_t need = R->layout == ATTN_MPI_ZIGZAG ? 2 * (int64_t)R->size : R->size;
    if ((R->L > 0 && R->L < need) || (R->S > 0 && R->S < need))
        return ring_fail(err, ATTN_ERR_SHAPE, "%lld quer%s and %lld key%s are too few for %d rank%s: the %s layout "
                         "needs %lld of each (or none), so that no shard is empty", (long long)R->L, R->L == 1 ? "y" : "ies",
                         (long long)R->S, ring_plural(R->S), R->size, ring_plural(R->size),
                         R->layout == ATTN_MPI_ZIGZAG ? "zigzag" : "contiguous", (long long)need);
    if (Lr != R->qs.rows || Sr != ks.rows)
        return ring_fail(err, ATTN_ERR_SHAPE, "this rank holds %lld queries and %lld keys, but its %s shard of %lld and "
                         "%lld is %lld and %lld (attn_mpi_shard_of)", (long long)Lr, (long long)Sr,
                         R->layout == ATTN_MPI_ZIGZAG ? "zigzag" : "contiguous", (long long)R->L, (long long)R->S,
                         (long long)R->qs.rows, (long long)ks.rows);
    return ATTN_OK;
}

attn_status attn_ring_start(ring *R, MPI_Comm comm, const attn_mpi_options *options, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, int kv_grads, attn_error *err) {
    attn_status st = attn_ring_open(R, comm, options, err);
    if (R->comm == MPI_COMM_NULL) {
        attn_ring_close(R);
        return st;
    }
    /* Options wrong on some ranks: every rank returns that error. */
    if ((st = attn_ring_agree(R, st, err))) return st;
    /* Before anything is sized by them: a rank that alone has other heads,
     * dimensions or options would get a wrong answer, or wait for messages
     * of the wrong size. */
    if ((st = attn_ring_same(R, q, k, v, kv_grads, err))) return st;
    /* Alike on every rank now: q, k and v given or not, and their ranks.
     * Said as attn_sdpa says them, before their rows are summed: else no
     * rows at all would read as a sequence too short for the ranks. */
    const attn_tensor *t[3] = {q, k, v};
    static const char *const NAMES[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (!t[i] || !t[i]->data) return ring_fail(err, ATTN_ERR_NULL, "q, k, v or their data is NULL");
        if (t[i]->rank < 2 || t[i]->rank > ATTN_MAX_RANK)
            return ring_fail(err, ATTN_ERR_RANK, "%s has rank %d; attention takes ranks 2 to %d", NAMES[i], t[i]->rank,
                             ATTN_MAX_RANK);
    }
    bool batch_zero = false; /* any 0 but the rows': alike on every rank (attn_ring_same) */
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < t[i]->rank; d++) batch_zero |= d != t[i]->rank - 2 && t[i]->shape[d] == 0;
    /* A rank whose rows are not its shard's fails alone: agreed here. */
    return attn_ring_agree(R, attn_ring_lengths(R, q->shape[q->rank - 2], k->shape[k->rank - 2], batch_zero, err), err);
}
