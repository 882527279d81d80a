/* threads.c -- a small persistent pool of worker threads, created on first
 * use and joined by attn_shutdown (also registered with atexit). One job runs
 * at a time; a caller that finds the pool busy runs its job itself. A child
 * of fork() inherits the pool's bookkeeping but none of its threads: the
 * fork handlers below hand it an empty pool, which it fills on first use. */
#if defined(__linux__)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "base/base.h"

#include <stdlib.h>

int attn_workers_for(int threads, double work, double least) { return work < least ? 1 : threads; }

#if defined(__wasm__)
/* WebAssembly builds run single-threaded. */
void attn_set_num_threads(int n) { (void)n; }
int attn_get_num_threads(void) { return 1; }
void attn_shutdown(void) {}
void attn_pool_reserve(int threads) { (void)threads; }
int attn_parallel_for(int n_workers, int64_t n_items, attn_task_fn fn, void *ctx) {
    (void)n_workers;
    for (int64_t i = 0; i < n_items; i++) fn(ctx, i, 0);
    return n_items > 0;
}
#else
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

enum { MAX_THREADS = 256 };

typedef struct pool {
    pthread_mutex_t lock;
    pthread_cond_t done;
    /* wake[i]: worker i's alone (1..n_threads), so that a job wakes only
     * the workers it may use. One broadcast to all of them cost every
     * small call made after a wide one a herd: on a pool grown to 256
     * threads, a call on 2 woke 255 workers that each took the lock and
     * spun, and took 145 µs instead of 30 on this 2-core machine. */
    pthread_cond_t wake[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    int n_threads;            /* workers besides the caller */
    atomic_ulong generation;  /* bumped for every job */
    atomic_bool stop;
    /* the current job */
    attn_task_fn fn;
    void *ctx;
    int64_t n_items;
    int n_workers; /* how many workers (the caller included) may take part */
    bool open;     /* whether a worker may still join the job */
    atomic_int running; /* workers that joined and are still inside the job */
    atomic_llong next;
    atomic_int ran; /* workers (the caller included) that ran at least one item */
} pool;

static pool the_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int requested; /* attn_set_num_threads; 0 means the default */
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

/* How long a worker that has finished a job, and a caller whose helpers
 * are still on their last items, look for what they wait for before they
 * sleep on a condition variable: about 20-40 µs here. Waking a sleeping
 * thread cost a call of 17 µs of work 5 to 10 µs on this 2-core machine;
 * a layer's calls follow one another closer than that. */
enum { SPIN = 1 << 11 };

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins (p->lock released) while *x == v, at most SPIN times. */
static void spin_while_ulong(pool *p, atomic_ulong *x, unsigned long v) {
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < SPIN && atomic_load_explicit(x, memory_order_relaxed) == v && !atomic_load(&p->stop); i++)
        cpu_relax();
    pthread_mutex_lock(&p->lock);
}

static void run_items(pool *p, int worker) {
    for (bool first = true;; first = false) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_items) return;
        if (first) atomic_fetch_add(&p->ran, 1);
        p->fn(p->ctx, i, worker);
    }
}

static void *worker_main(void *arg) {
    pool *p = &the_pool;
    int index = (int)(intptr_t)arg; /* 1..n_threads; the caller is 0 */
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (!p->stop && p->generation == seen) spin_while_ulong(p, &p->generation, seen);
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake[index], &p->lock);
        if (p->stop) break;
        seen = p->generation;
        /* This job wants fewer workers, or its caller has finished it
         * without this one: a late wake-up costs the caller nothing. */
        if (index >= p->n_workers || !p->open) continue;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        run_items(p, index);
        pthread_mutex_lock(&p->lock);
        if (--p->running == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void stop_workers(pool *p) {
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    for (int i = 1; i <= p->n_threads; i++) pthread_cond_signal(&p->wake[i]);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL), pthread_cond_destroy(&p->wake[i + 1]);
    p->n_threads = 0;
    p->stop = false;
}

/* The pool's locks are never held across a cancellation point: a thread
 * cancelled (pthread_cancel) while it waits for the workers of its job
 * (pthread_cond_wait) or joins them (pthread_join) would end holding
 * job_lock and the pool's lock. Every later call would then run on one
 * thread, the workers block for good, and fork() and exit (attn_shutdown)
 * wait forever; its workers would also still be writing the outputs of a
 * call whose caller is gone. So these waits run with cancellation
 * disabled, and a cancel request takes effect at the caller's next
 * cancellation point after the library returns. */
static int cancel_off(void) {
    int was = PTHREAD_CANCEL_ENABLE;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &was);
    return was;
}

static void cancel_restore(int was) { pthread_setcancelstate(was, NULL); }

void attn_shutdown(void) {
    int cancel = cancel_off();
    pthread_mutex_lock(&job_lock);
    stop_workers(&the_pool);
    pthread_mutex_unlock(&job_lock);
    cancel_restore(cancel);
}

/* fork() copies only the thread that calls it. Before it, take both locks,
 * so that no job is half set up or running and the pool's fields are
 * consistent (a fork waits for a call in another thread to finish); after
 * it, the parent lets go, and the child also forgets the workers it never
 * got: its first call creates its own, and its exit joins only those. Its
 * condition variables are made anew (pthread_cond_init: POSIX promises
 * nothing of a copied one), as they may record the parent's waiting
 * workers, which would never answer. Only the library's own work items run
 * under job_lock, and none of them forks, so fork_prepare never waits for
 * a lock its own thread holds. */
static void fork_prepare(void) {
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&the_pool.lock);
}

static void fork_parent(void) {
    pthread_mutex_unlock(&the_pool.lock);
    pthread_mutex_unlock(&job_lock);
}

static void fork_child(void) {
    pool *p = &the_pool;
    pthread_cond_init(&p->done, NULL); /* the workers' are made anew as they start */
    p->n_threads = 0, p->open = false;
    atomic_store(&p->running, 0);
    atomic_store(&p->stop, false);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&job_lock);
}

/* Registered once, before a job first takes a lock: pthread_atfork must not
 * run under job_lock, since a fork in another thread would then hold the
 * handlers' list while fork_prepare waits for job_lock. */
static void register_handlers(void) {
    atexit(attn_shutdown);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void attn_set_num_threads(int n) {
    atomic_store(&requested, n < 0 ? 0 : n > MAX_THREADS ? MAX_THREADS : n);
}

/* The CPUs this process may run on: its affinity mask (taskset, a
 * container's cpuset), else the CPUs online. The CPUs online alone gave a
 * server pinned to a few CPUs of a large machine a worker for every CPU of
 * the machine, many threads to each CPU it has. Read once: glibc's sysconf
 * reads a file under /sys on every call, which cost a small attention call
 * most of its time. */
static long cpus_available(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return sysconf(_SC_NPROCESSORS_ONLN); /* more than CPU_SETSIZE CPUs, or no affinity masks */
}

static int online_cpus(void) {
    static atomic_int cached;
    int n = atomic_load(&cached);
    if (n == 0) {
        long cpus = cpus_available();
        n = cpus > 0 ? (int)(cpus > MAX_THREADS ? MAX_THREADS : cpus) : 1;
        atomic_store(&cached, n);
    }
    return n;
}

/* ATTN_NUM_THREADS as a whole number >= 1, at most MAX_THREADS however
 * large (atoi's overflow is undefined, and glibc's wrapped 2^32 + 1 to 1);
 * 0 when unset or not such a number ("3x", "", "-1"). */
static int env_threads(void) {
    const char *env = getenv("ATTN_NUM_THREADS");
    if (!env) return 0;
    char *end;
    int saved = errno; /* the caller's, kept */
    errno = 0;
    long n = strtol(env, &end, 10);
    bool range = errno == ERANGE;
    errno = saved;
    if (end == env || *end || n < 1) return 0;
    return range || n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int attn_get_num_threads(void) {
    int n = atomic_load(&requested);
    if (n > 0) return n;
    n = env_threads();
    return n > 0 ? n : online_cpus();
}

/* Make sure the pool has at least `want` workers besides the caller. */
static bool grow(pool *p, int want) {
    while (p->n_threads < want) {
        int index = p->n_threads + 1;
        if (pthread_cond_init(&p->wake[index], NULL) != 0) return false;
        if (pthread_create(&p->threads[p->n_threads], NULL, worker_main, (void *)(intptr_t)index) != 0) {
            pthread_cond_destroy(&p->wake[index]);
            return false;
        }
        p->n_threads++;
    }
    return true;
}

/* A plan's runs promise no allocation, but a worker's start is one (its
 * stack, its thread-local memory): so a plan starts the workers its runs
 * will wake when it is made. A pool another call holds (or the job whose
 * item makes the plan) is left alone: its growth waits for the run. */
void attn_pool_reserve(int threads) {
    pool *p = &the_pool;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads <= 1) return;
    pthread_once(&handlers_once, register_handlers);
    if (pthread_mutex_trylock(&job_lock) != 0) return;
    pthread_mutex_lock(&p->lock);
    grow(p, threads - 1);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&job_lock);
}

int attn_parallel_for(int n_workers, int64_t n_items, attn_task_fn fn, void *ctx) {
    pool *p = &the_pool;
    if (n_workers > MAX_THREADS) n_workers = MAX_THREADS;
    if (n_workers > 1) pthread_once(&handlers_once, register_handlers);
    if (n_workers <= 1 || n_items <= 1 || pthread_mutex_trylock(&job_lock) != 0) {
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i, 0);
        return n_items > 0;
    }
    int cancel = cancel_off(); /* until both locks are let go */
    pthread_mutex_lock(&p->lock);
    bool ok = grow(p, n_workers - 1);
    int helpers = ok ? n_workers - 1 : p->n_threads;
    p->fn = fn, p->ctx = ctx, p->n_items = n_items;
    p->n_workers = helpers + 1;
    p->open = true, p->running = 0;
    atomic_store(&p->next, 0);
    atomic_store(&p->ran, 0);
    p->generation++;
    for (int i = 1; i <= helpers; i++) pthread_cond_signal(&p->wake[i]);
    pthread_mutex_unlock(&p->lock);

    run_items(p, 0);

    /* Every item is taken: close the job, and wait only for the workers
     * that joined it (they may still be running their last items). A
     * worker that wakes later finds it closed and goes back to sleep, so a
     * small job never waits for a thread that was slow to wake. */
    pthread_mutex_lock(&p->lock);
    p->open = false;
    if (p->running > 0) {
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < SPIN && atomic_load_explicit(&p->running, memory_order_relaxed) > 0; i++) cpu_relax();
        pthread_mutex_lock(&p->lock);
    }
    while (p->running > 0) pthread_cond_wait(&p->done, &p->lock);
    int ran = atomic_load(&p->ran);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&job_lock);
    cancel_restore(cancel);
    return ran;
}
#endif
