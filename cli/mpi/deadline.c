/* deadline.c -- attn-mpi's collectives with a deadline (deadline.h). */
#include "deadline.h"
#include "cli.h"

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank_ = 0, size_ = 1;
static FILE *loud_;
static double timeout_ = 60;
/* Everything the timer's handler (on_alarm) reads is a lock-free atomic,
 * which C17 (7.14.1.1) and POSIX let a handler use: the handler may run
 * on any thread of the process (Open MPI's own among them), in the middle
 * of a store here. Each text has a generation, odd while it is rewritten
 * (a sequence lock): the handler takes the characters only when the
 * generation was even before them and the same after them. */
_Static_assert(ATOMIC_CHAR_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "the timer's handler reads lock-free atomics alone");
enum { TEMP_MAX = 4096, ALARM_LINE_MAX = 1400 };
typedef struct {
    atomic_uint generation;
    atomic_int len; /* 0: none */
} text_guard;
static atomic_char temps_[2][TEMP_MAX]; /* the outputs' temporaries, by value: no pointer into freed memory */
static text_guard temp_guard_[2];

/* n characters of text (n < the array's size) into an atomic array. */
static void store_text(atomic_char *to, text_guard *g, const char *text, size_t n) {
    atomic_fetch_add(&g->generation, 1); /* odd: being rewritten */
    atomic_thread_fence(memory_order_release); /* the odd generation seen before any new character */
    for (size_t i = 0; i < n; i++) atomic_store_explicit(&to[i], text[i], memory_order_relaxed);
    atomic_store_explicit(&g->len, (int)n, memory_order_relaxed);
    atomic_fetch_add(&g->generation, 1); /* even again, after them */
}

/* The handler's copy of such a text into buf (room for the text and its
 * 0), with atomic loads alone: its length (0: none), or -1 when it was
 * being rewritten the whole time. A writer on another thread is done in
 * a moment, so the copy is tried again; one this handler interrupted on
 * its own thread never is, so the tries are bounded. */
static int load_text(char *buf, const atomic_char *from, text_guard *g) {
    for (int tries = 0; tries < 100000; tries++) {
        unsigned before = atomic_load(&g->generation);
        int n = atomic_load(&g->len);
        if (before & 1u) continue;
        for (int i = 0; i < n; i++) buf[i] = atomic_load_explicit(&from[i], memory_order_relaxed);
        buf[n] = 0;
        atomic_thread_fence(memory_order_acquire); /* the characters read before the generation is read again */
        if (atomic_load(&g->generation) == before) return n;
    }
    return -1;
}

void deadline_init(int rank, int size, FILE *loud, double timeout_s) {
    rank_ = rank, size_ = size, loud_ = loud, timeout_ = timeout_s;
}

void deadline_set_timeout(double timeout_s) { timeout_ = timeout_s; }
double deadline_timeout(void) { return timeout_; }

void deadline_temp(int i, const char *path) {
    if (i < 0 || i > 1) return;
    size_t n = path ? strlen(path) : 0;
    store_text(temps_[i], &temp_guard_[i], path ? path : "", n < TEMP_MAX ? n : 0); /* too long: none (never, TMP_SUFFIX) */
}

/* How long rank r waits before it speaks: a lower rank that timed out too
 * speaks first, tells the others, and its exit ends the job (mpirun kills
 * the rest). */
static double turn(void) { return rank_ < 3 ? rank_ : 3; }

/* Async-signal-safe (atomic loads and unlink): on_alarm calls it too. */
static void remove_temps(void) {
    for (int i = 0; i < 2; i++) {
        char path[TEMP_MAX];
        if (load_text(path, temps_[i], &temp_guard_[i]) > 0) unlink(path);
    }
}

/* The tag of "a rank has said why the job ends", on MPI_COMM_WORLD: the
 * command's other messages there are --stats' (0) and the bench's (9). */
enum { TAG_SPOKEN = 77 };

void deadline_lost(const char *fmt, ...) {
    char message[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    remove_temps();
    /* Its turn, unless a lower rank says first that it spoke: mpirun may
     * take more than the turn to end the job after that rank's exit. */
    double until = MPI_Wtime() + turn();
    while (MPI_Wtime() < until) {
        int heard = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_SPOKEN, MPI_COMM_WORLD, &heard, MPI_STATUS_IGNORE);
        if (heard) _exit(EXIT_DATA); /* said already: the job's status is that rank's */
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
    fprintf(loud_ ? loud_ : stderr, "attn: error: rank %d: %s\n", rank_, message);
    fflush(loud_ ? loud_ : stderr);
    /* Then the others are told (small messages, which MPI sends without
     * their receivers, given a moment to leave before this rank exits). */
    static int one = 1;
    MPI_Request *req = malloc(sizeof *req * (size_t)size_);
    int n = 0, sent = 0;
    for (int r = 0; req && r < size_; r++)
        if (r != rank_ && MPI_Isend(&one, 1, MPI_INT, r, TAG_SPOKEN, MPI_COMM_WORLD, &req[n]) == MPI_SUCCESS) n++;
    double leave = MPI_Wtime() + 0.05;
    while (req && !sent && MPI_Wtime() < leave) {
        struct timespec nap = {0, 1000000};
        if (MPI_Testall(n, req, &sent, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        nanosleep(&nap, NULL);
    }
    _exit(EXIT_DATA);
}

void deadline_fault(const char *point) {
    const char *f = getenv("ATTN_MPI_FAULT"), *colon = f ? strchr(f, ':') : NULL;
    if (!colon || atoi(colon + 1) != rank_) return;
    size_t n = (size_t)(colon - f), p = strlen(point);
    if (n < 4) return;
    /* "stop" and "kill" name the attention's point; "stop-POINT" another */
    if (p == 0 ? n != 4 : (n != 5 + p || f[4] != '-' || strncmp(f + 5, point, p) != 0)) return;
    if (strncmp(f, "stop", 4) == 0) raise(SIGSTOP);
    if (strncmp(f, "kill", 4) == 0) raise(SIGKILL);
}

int deadline_failing(const char *point) {
    const char *f = getenv("ATTN_MPI_FAULT"), *colon = f ? strchr(f, ':') : NULL;
    size_t p = strlen(point);
    return colon && atoi(colon + 1) == rank_ && (size_t)(colon - f) == 5 + p && strncmp(f, "fail-", 5) == 0 &&
           strncmp(f + 5, point, p) == 0;
}

static const char LATE[] = "the ranks did not all answer within %g s: one stopped, failed or hangs";

static void wait_for(MPI_Request *req, int n, MPI_Status *statuses, const char *what, double seconds) {
    double deadline = MPI_Wtime() + seconds;
    long nap_ns = 20000; /* 20 µs at first for a quick answer, then up to 1 ms: a long wait leaves the core to others */
    for (;;) {
        int done = 0, rc = MPI_Testall(n, req, &done, statuses);
        if (rc != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
            deadline_lost("%s: %s", what, text);
        }
        if (done) return;
        if (MPI_Wtime() > deadline) {
            char late[200];
            snprintf(late, sizeof late, LATE, seconds);
            deadline_lost("%s: %s", what, late);
        }
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        nap_ns = nap_ns < 500000 ? nap_ns * 2 : 1000000;
    }
}

void deadline_wait(MPI_Request *req, int n, MPI_Status *statuses, const char *what) {
    wait_for(req, n, statuses, what, timeout_);
}

void deadline_wait_io(MPI_Request *req, MPI_Status *status, const char *what, double bytes) {
    wait_for(req, 1, status, what, timeout_ + bytes / 1048576.0);
}

/* A collective that MPI refused to start: no rank can go on alone. */
static void started(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    deadline_lost("%s: %s", what, text);
}

void deadline_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                        const char *point, const char *what) {
    MPI_Request req;
    deadline_fault(point);
    started(MPI_Iallreduce(in, out, count, type, op, comm, &req), what);
    deadline_wait(&req, 1, MPI_STATUSES_IGNORE, what);
}

void deadline_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm, const char *point,
                    const char *what) {
    MPI_Request req;
    deadline_fault(point);
    started(MPI_Ibcast(buf, count, type, root, comm, &req), what);
    deadline_wait(&req, 1, MPI_STATUSES_IGNORE, what);
}

void deadline_barrier(MPI_Comm comm, const char *point, const char *what) {
    MPI_Request req;
    deadline_fault(point);
    started(MPI_Ibarrier(comm, &req), what);
    deadline_wait(&req, 1, MPI_STATUSES_IGNORE, what);
}

/* The timer of a blocking collective: its line is written before it is
 * armed, for the handler calls only functions that POSIX lists as
 * async-signal-safe (unlink, write, _exit) and reads only the atomics
 * above and these. */
static atomic_char alarm_line_[ALARM_LINE_MAX];
static text_guard alarm_guard_;
static atomic_int alarm_fd_ = 2;
static timer_t timer_;
static int have_timer_ = -1; /* -1 not tried, 0 none, 1 created (never read by the handler) */

static void on_alarm(int sig) {
    (void)sig;
    remove_temps();
    char line[ALARM_LINE_MAX];
    int n = load_text(line, alarm_line_, &alarm_guard_);
    if (n < 0) { /* interrupted while its line was written: a line of no details */
        const char fallback[] = "attn: error: a collective of attn-mpi did not complete in time\n";
        ssize_t w = write(atomic_load(&alarm_fd_), fallback, sizeof fallback - 1);
        (void)w;
    }
    if (n > 0) {
        ssize_t w = write(atomic_load(&alarm_fd_), line, (size_t)n);
        (void)w;
    }
    _exit(EXIT_DATA);
}

void deadline_enter(MPI_Comm comm, const char *point, const char *what) {
    deadline_barrier(comm, point, what);
    /* For the tests: a rank lost past the barrier, which only the others'
     * timers find (this rank's is not armed yet: a stopped rank would
     * otherwise speak when mpirun continues it to end it). */
    char inside[64];
    snprintf(inside, sizeof inside, "%s-in", point);
    deadline_fault(inside);
    if (have_timer_ < 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigemptyset(&sa.sa_mask);
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_SIGNAL, ev.sigev_signo = SIGALRM;
        have_timer_ = sigaction(SIGALRM, &sa, NULL) == 0 && timer_create(CLOCK_MONOTONIC, &ev, &timer_) == 0;
    }
    if (!have_timer_) return; /* the barrier alone: a rank lost before it is still found */
    char late[200], line[ALARM_LINE_MAX];
    snprintf(late, sizeof late, LATE, timeout_);
    int len = snprintf(line, sizeof line, "attn: error: rank %d: %s: %s\n", rank_, what, late);
    size_t n = len < 0 ? 0 : (size_t)len < sizeof line ? (size_t)len : sizeof line - 1;
    if (n > 0) line[n - 1] = '\n'; /* a long path cut short still ends its line */
    store_text(alarm_line_, &alarm_guard_, line, n);
    atomic_store(&alarm_fd_, fileno(loud_ ? loud_ : stderr));
    fflush(loud_ ? loud_ : stderr);
    /* In turn, as deadline_lost speaks, but twice as far apart: the
     * handler cannot hear that a lower rank spoke, and mpirun may take
     * over a second to end the job after that rank's exit. */
    double at = timeout_ + 2 * turn();
    struct itimerspec when;
    memset(&when, 0, sizeof when);
    when.it_value.tv_sec = (time_t)at;
    when.it_value.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
    if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;
    timer_settime(timer_, 0, &when, NULL);
}

void deadline_leave(void) {
    if (have_timer_ != 1) return;
    struct itimerspec off;
    memset(&off, 0, sizeof off);
    timer_settime(timer_, 0, &off, NULL);
}
