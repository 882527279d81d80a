/* deadline.h -- attn-mpi's own collectives, each bounded by --timeout: a
 * rank that stops or hangs anywhere (comparing the command lines, agreeing
 * on an error, opening, reading, writing or closing a file with MPI-IO,
 * ending MPI) makes the others end the job with one error line naming what
 * timed out, instead of waiting for ever.
 *
 * Where MPI has a nonblocking form (MPI_Iallreduce, MPI_Ibcast,
 * MPI_File_iread_all, ...) it is polled against the deadline. Where it has
 * none (MPI_File_open, MPI_File_set_view, MPI_File_set_size,
 * MPI_File_close, MPI_Comm_split_type, MPI_Finalize), deadline_enter first
 * waits for every rank at a nonblocking barrier with the deadline, so that
 * a rank already lost is found before the collective, then arms a timer
 * for the collective itself, which ends this rank with the error if the
 * collective does not return in time (a rank that stopped between the
 * barrier and the collective). deadline_leave disarms it. */
#ifndef ATTN_CLI_DEADLINE_H
#define ATTN_CLI_DEADLINE_H

#include "attn_mpi.h"

#include <stddef.h>
#include <stdio.h>

/* This rank and the ranks' number (of MPI_COMM_WORLD), where its one
 * error line goes (loud), and the deadline of every wait from here on
 * (seconds). */
void deadline_init(int rank, int size, FILE *loud, double timeout_s);
void deadline_set_timeout(double timeout_s);
double deadline_timeout(void);

/* No answer in time: "attn: error: rank R: MESSAGE" on loud, the outputs'
 * temporaries removed, and the rank ends without MPI_Finalize, which makes
 * mpirun end the job (a stopped rank too). The ranks cannot agree on
 * anything more, so each that timed out may say it, but in turn: rank 0
 * at once, rank r after min(r, 3) s, and a rank that spoke tells the
 * others (a small message each), which then end without a word: one line,
 * unless the job's end outruns the message. */
_Noreturn void deadline_lost(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The temporaries (at most 2) that an end by deadline_lost removes; NULL
 * forgets slot i (renamed or removed already). */
void deadline_temp(int i, const char *path);

/* For the tests: stop (SIGSTOP) or kill (SIGKILL) this rank when
 * ATTN_MPI_FAULT is "stop-POINT:R" or "kill-POINT:R" with R this rank
 * (POINT empty, "stop:R", for the attention itself). Every guarded
 * collective below passes its point. */
void deadline_fault(const char *point);

/* For the tests too: whether ATTN_MPI_FAULT is "fail-POINT:R" with R this
 * rank, where the caller then fails as it would on its own (an allocation
 * or an open that fails on one rank only), so that the tests see every
 * rank leave together with that rank's error. */
int deadline_failing(const char *point);

/* Wait for n requests (nonblocking collectives, or messages) until the
 * deadline, their statuses into statuses (or MPI_STATUSES_IGNORE); past
 * it, deadline_lost("WHAT: the ranks did not all answer ..."). An MPI
 * error is deadline_lost too: the ranks cannot agree on it. */
void deadline_wait(MPI_Request *req, int n, MPI_Status *statuses, const char *what);

/* deadline_wait for a collective read or write of a file moving `bytes`
 * on this rank: the deadline is a second later for each MiB, so that a
 * large shard on a slow file system is not taken for a lost rank. */
void deadline_wait_io(MPI_Request *req, MPI_Status *status, const char *what, double bytes);

/* Blocking collectives made bounded, on comm, at fault point `point`. */
void deadline_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                        const char *point, const char *what);
void deadline_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm, const char *point,
                    const char *what);
void deadline_barrier(MPI_Comm comm, const char *point, const char *what);

/* Around a collective that has no nonblocking form: the barrier, then the
 * timer (see above). Not nested. Its fault points are `point` before the
 * barrier and "POINT-in" after it, where only the timer finds the loss. */
void deadline_enter(MPI_Comm comm, const char *point, const char *what);
void deadline_leave(void);

#endif /* ATTN_CLI_DEADLINE_H */
