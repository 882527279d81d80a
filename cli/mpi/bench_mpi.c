/* bench_mpi.c -- `attn-mpi bench` (also `attn bench --mpi`), run under
 * mpirun: ring attention's time against one node's on the same problem.
 * For each sequence length and causal mode it measures, in one run:
 *   single: attn_sdpa over the whole sequence on rank 0, with the threads of
 *           every rank on its node (what one node does without the ring);
 *   ring:   attn_mpi_sdpa on all ranks, each with its share of the cores;
 * and reports the ring's fraction of the single rate, the share of the
 * ring's time spent waiting for messages it could not hide, the time the
 * same messages take alone and so the share of it the computing hid, and
 * the imbalance of the ranks' computing (the slowest rank over the mean).
 *
 * Its collectives and the ring's messages have --timeout's deadline (60 s
 * by default; deadline.h), but the one barrier where the other ranks wait
 * for rank 0's single-node run, which may take longer than any fixed time. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "bench_mpi.h"
#include "args_mpi.h"
#include "cli.h"
#include "deadline.h"
#include "text.h"

#include <sched.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char BENCH_USAGE[] =
    "usage: mpirun -np N attn-mpi bench [--quick] [--seq L]\n"
    "         [--layout zigzag|contiguous] [--timeout S]\n"
    "       (or mpirun -np N attn bench --mpi ...)\n"
    "\n"
    "Ring attention (f32, 8 heads of 64, one batch) at sequence lengths 4096 and\n"
    "8192, or L, with and without a causal mask: its rate against attn_sdpa over\n"
    "the whole sequence on one rank, and the time spent waiting for messages.\n"
    "--timeout S is the longest wait for a message or another rank (default 60):\n"
    "a rank that died or hangs is an error after it. Run nothing else meanwhile.\n";

/* Best of `reps` wall times of f(), the slowest rank's (all ranks call). */
typedef struct timing {
    double best;
    attn_mpi_stats stats; /* of the best run, this rank's */
} timing;

static float *random_floats(int64_t n, unsigned seed) {
    float *x = malloc((size_t)n * sizeof *x + 4);
    for (int64_t i = 0; x && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / 16777216.0 - 0.5);
    }
    return x;
}

/* A barrier that sleeps while it waits: MPI_Barrier spins, and would take
 * a core from rank 0's single-node run. The others have no deadline here:
 * they wait for that run, as long as it takes. Rank 0 comes last, after
 * it, and waits with the deadline: a rank lost before the barrier ends
 * the job instead of leaving rank 0 waiting for ever. */
static void quiet_barrier(int rank) {
    MPI_Request req;
    int done = 0;
    struct timespec nap = {0, 1000000};
    deadline_fault("bench-single");
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rank == 0) {
        deadline_wait(&req, 1, MPI_STATUSES_IGNORE, "waiting for the ranks after the single-rank run");
        return;
    }
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) nanosleep(&nap, NULL);
}

/* Threads for each rank: the CPUs the node's ranks may run on shared among
 * them (one each when there are more ranks than CPUs, as under
 * --oversubscribe); *cores: that count, every one of which the single-rank
 * run takes. The CPUs are the union of the node's ranks' affinity masks
 * (what taskset, a cpuset or mpirun's binding leave them), or the CPUs
 * online where a rank cannot read its mask; a CPU quota (a cgroup's
 * cpu.max) is not seen. rank0: print a note where rank 0's own CPUs are
 * fewer than the ranks' together, and one where those are fewer than the
 * node's. */
static int threads_per_rank(int *node_ranks, int *cores, bool rank0) {
    MPI_Comm node;
    deadline_enter(MPI_COMM_WORLD, "bench-split", "finding the ranks on this node (MPI_Comm_split_type)");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    deadline_leave();
    MPI_Comm_size(node, node_ranks);
    cpu_set_t mine, all;
    CPU_ZERO(&mine);
    int known = sched_getaffinity(0, sizeof mine, &mine) == 0, all_known;
    deadline_allreduce(&known, &all_known, 1, MPI_INT, MPI_MIN, node, "bench-split", "comparing the ranks' CPUs");
    deadline_allreduce(&mine, &all, (int)sizeof mine, MPI_BYTE, MPI_BOR, node, "bench-split", "comparing the ranks' CPUs");
    MPI_Comm_free(&node);
    long cpus = all_known ? CPU_COUNT(&all) : sysconf(_SC_NPROCESSORS_ONLN);
    *cores = cpus < 1 ? 1 : cpus > INT_MAX ? INT_MAX : (int)cpus;
    /* rank 0 bound to fewer CPUs than the node's ranks have together, or
     * all of them to fewer than the node's: said on rank 0, whose
     * single-rank run takes the ranks' CPUs */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (rank0 && all_known && CPU_COUNT(&mine) < *cores)
        cli_prose(stdout, 0, 6, "note: this rank is bound to %d of the %d CPUs the node's ranks have (Open MPI binds "
                  "ranks for small -np): run mpirun --bind-to none, or the single-rank run is measured on those CPUs only",
                  CPU_COUNT(&mine), *cores);
    if (rank0 && all_known && online > *cores)
        cli_prose(stdout, 0, 6, "note: the node's ranks may run on %d of its %ld CPUs (Open MPI binds ranks for small "
                  "-np unless mpirun --bind-to none; or taskset, a cpuset): both runs are measured on those",
                  *cores, online);
    int t = *cores / *node_ranks;
    return t < 1 ? 1 : t;
}

/* The ring's messages alone: N - 1 steps of sending `bytes` right and
 * receiving as many from the left, as attn_mpi_sdpa does, with nothing to
 * compute; the slowest rank's best time of three. */
static double messages_alone(int64_t bytes, int size) {
    char *a = calloc((size_t)bytes + 1, 1), *b = calloc((size_t)bytes + 1, 1);
    int rank, left, right;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    left = (rank + size - 1) % size, right = (rank + 1) % size;
    double best = INFINITY;
    for (int r = 0; r < 3 && a && b; r++) {
        deadline_barrier(MPI_COMM_WORLD, "bench", "timing the messages alone");
        double t0 = MPI_Wtime(), t, slowest;
        for (int step = 0; step + 1 < size; step++) {
            MPI_Request req[2];
            MPI_Irecv(step % 2 ? a : b, (int)bytes, MPI_BYTE, left, 9, MPI_COMM_WORLD, &req[0]);
            MPI_Isend(step % 2 ? b : a, (int)bytes, MPI_BYTE, right, 9, MPI_COMM_WORLD, &req[1]);
            deadline_wait(req, 2, MPI_STATUSES_IGNORE, "timing the messages alone");
        }
        t = MPI_Wtime() - t0;
        deadline_allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", "timing the messages alone");
        best = fmin(best, slowest);
    }
    free(a), free(b);
    return best;
}

enum { COLS = 9, CELL = 24 };

/* One length and mode: both measurements, and on rank 0 its row of the
 * table (COLS cells; a failed run's error follows the table). */
static int measure(int64_t L, attn_causal causal, attn_mpi_layout layout, int reps, int rank, int size,
                   char row[COLS][CELL], char *failure, size_t failure_size) {
    int node_ranks, cores, per_rank = threads_per_rank(&node_ranks, &cores, false);
    int64_t H = 8, E = 64, shape[3] = {H, L, E};
    attn_mpi_shard sh;
    attn_error err;
    attn_mpi_shard_of(&sh, L, rank, size, layout, &err);
    int64_t ls[3] = {H, sh.rows, E}, lse_shape[2] = {H, sh.rows};
    float *q = random_floats(H * sh.rows * E, 1u + (unsigned)rank), *k = random_floats(H * sh.rows * E, 7u + (unsigned)rank);
    float *v = random_floats(H * sh.rows * E, 13u + (unsigned)rank), *o = malloc((size_t)(H * sh.rows * E) * 4), *l = malloc((size_t)(H * sh.rows) * 4);
    attn_tensor tq, tk, tv, to, tl;
    attn_tensor_init(&tq, q, ATTN_F32, 3, ls, NULL, NULL), attn_tensor_init(&tk, k, ATTN_F32, 3, ls, NULL, NULL);
    attn_tensor_init(&tv, v, ATTN_F32, 3, ls, NULL, NULL), attn_tensor_init(&to, o, ATTN_F32, 3, ls, NULL, NULL);
    attn_tensor_init(&tl, l, ATTN_F32, 2, lse_shape, NULL, NULL);
    attn_context ctx = attn_context_default();
    attn_sdpa_options so = attn_sdpa_options_default();
    so.causal = causal, so.context = &ctx;
    attn_mpi_options mo = attn_mpi_options_default();
    attn_mpi_stats stats;
    mo.layout = layout, mo.attention = &so, mo.stats = &stats, mo.timeout_s = deadline_timeout();
    double single = INFINITY, ring = INFINITY, wait = 0, compute_max = 0, compute_sum = 0, exposed = 0;
    int bad = 0;
    if (rank == 0) { /* one node alone, every CPU its ranks may run on */
        float *Q = random_floats(H * L * E, 3), *K = random_floats(H * L * E, 5), *V = random_floats(H * L * E, 9);
        float *O = malloc((size_t)(H * L * E) * 4);
        attn_tensor a, b, c, d;
        attn_tensor_init(&a, Q, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&b, K, ATTN_F32, 3, shape, NULL, NULL);
        attn_tensor_init(&c, V, ATTN_F32, 3, shape, NULL, NULL), attn_tensor_init(&d, O, ATTN_F32, 3, shape, NULL, NULL);
        ctx.num_threads = cores;
        for (int r = 0; r < reps && Q && K && V && O; r++) {
            double t0 = MPI_Wtime();
            bad |= attn_sdpa(&d, NULL, NULL, &a, &b, &c, &so, &err) != ATTN_OK;
            single = fmin(single, MPI_Wtime() - t0);
        }
        free(Q), free(K), free(V), free(O);
    }
    quiet_barrier(rank); /* the other ranks sleep meanwhile */
    ctx.num_threads = per_rank;
    for (int r = 0; r < reps; r++) {
        deadline_barrier(MPI_COMM_WORLD, "bench", "starting a ring run");
        double t0 = MPI_Wtime(), t, slowest;
        attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &to, &tl, &tq, &tk, &tv, &mo, &err);
        if (st == ATTN_ERR_COMM) deadline_lost("%s", err.message); /* the ring is broken: no rank can agree on more */
        bad |= st != ATTN_OK;
        t = MPI_Wtime() - t0;
        static const char TIMING[] = "gathering the ring's timings";
        deadline_allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", TIMING);
        if (slowest < ring) {
            ring = slowest;
            deadline_allreduce(&stats.wait_s, &wait, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", TIMING);
            deadline_allreduce(&stats.compute_s, &compute_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", TIMING);
            deadline_allreduce(&stats.compute_s, &compute_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, "bench", TIMING);
            /* the waiting a slower rank does not explain: messages that were not hidden */
            double mine = fmax(0, stats.wait_s - (compute_max - stats.compute_s));
            deadline_allreduce(&mine, &exposed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", TIMING);
        } else { /* every rank makes the same collective calls */
            double x;
            for (int c = 0; c < 4; c++) deadline_allreduce(&t, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "bench", TIMING);
        }
    }
    free(q), free(k), free(v), free(o), free(l);
    int64_t most = 0; /* the longest shard: every rank sends and receives that many bytes */
    for (int r = 0; r < size; r++) {
        attn_mpi_shard other;
        attn_mpi_shard_of(&other, L, r, size, layout, NULL);
        most = other.rows > most ? other.rows : most;
    }
    double alone = messages_alone(2 * H * most * E * 4, size); /* one k/v shard per step */
    int any_bad = 0;
    deadline_allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "bench", "agreeing on the runs' errors");
    if (rank == 0) {
        double pairs = causal ? (double)L * (double)(L + 1) / 2 : (double)L * (double)L, flops = 4.0 * (double)H * pairs * (double)E;
        double value[COLS - 2] = {flops / single / 1e9, flops / ring / 1e9, 100 * single / ring, 100 * wait / ring, 1e3 * alone,
                                  alone > 0 ? 100 * fmax(0, 1 - exposed / alone) : 100.0, compute_max / (compute_sum / size)};
        static const char *const FORMAT[COLS - 2] = {"%.1f", "%.1f", "%.0f%%", "%.0f%%", "%.1f", "%.0f%%", "%.2f"};
        snprintf(row[0], CELL, "%lld", (long long)L), snprintf(row[1], CELL, "%s", causal ? "causal" : "full");
        for (int j = 0; j < COLS - 2; j++) {
            if (any_bad) snprintf(row[2 + j], CELL, j ? "-" : "failed");
            else snprintf(row[2 + j], CELL, FORMAT[j], value[j]);
        }
        if (any_bad && !*failure)
            snprintf(failure, failure_size, "L=%lld %s failed: %s", (long long)L, causal ? "causal" : "full", err.message);
    }
    return any_bad;
}

int mpi_bench(int argc, char **argv, int rank, int size) {
    int64_t seqs[2] = {4096, 8192}, nseq = 2;
    int reps = 3;
    mpi_bench_args b;
    /* Every rank parses the same command line, so each error is every
     * rank's; the others' stderr is silent (attn_mpi.c), rank 0 says it. */
    int code = mpi_bench_args_parse(argc, argv, size, &b);
    if (code < 0) { /* --help */
        if (rank == 0) cli_print_usage(stdout, BENCH_USAGE);
        return 0;
    }
    if (code) return code;
    deadline_set_timeout(b.timeout_s);
    /* --quick and --seq in either order: one length, --seq's if given
     * (--quick after --seq replaced it with its own). */
    if (b.quick) seqs[0] = 256 * size, nseq = 1, reps = 1;
    if (b.seq) seqs[0] = b.seq, nseq = 1;
    attn_mpi_layout layout = b.layout == ATTN_MPI_ARGS_CONTIGUOUS ? ATTN_MPI_CONTIGUOUS : ATTN_MPI_ZIGZAG;
    /* A length's tensors before any is allocated: rank 0's whole q, k, v
     * and out for the single run, beside the ranks' shards of the same (on
     * one node when mpirun runs them on one machine), 8 H L E floats. Over
     * half the node's memory is refused: the run allocated what it could,
     * printed a table of failures ("data is NULL"), or swapped and computed
     * for hours. The least memory of the ranks' nodes decides, the same on
     * every rank: nodes that differ would have some ranks refuse and leave
     * while the others wait for them in the ring. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double memory = pages > 0 && page > 0 ? (double)pages * (double)page : HUGE_VAL, least = HUGE_VAL;
    double need = 8.0 * 8 * 64 * 4 * (double)seqs[0];
    if (deadline_failing("bench-memory")) memory = 1; /* for the tests: this node alone has (next to) none */
    deadline_allreduce(&memory, &least, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD, "bench-memory",
                       "comparing the nodes' memory");
    if (b.seq && least < HUGE_VAL && need > least / 2)
        return cli_error(EXIT_USAGE, "--seq %ld needs %.1f GiB for its tensors (8 heads of 64, f32: q, k, v and out on one "
                         "rank and in the ranks' shards), over half of %s %.1f GiB: give a shorter length", b.seq,
                         need / 1073741824.0, size > 1 ? "the smallest node's" : "this node's", least / 1073741824.0);
    int node_ranks, cores, per_rank = threads_per_rank(&node_ranks, &cores, rank == 0);
    if (rank == 0) {
        cli_prose(stdout, 0, 2, "ring attention on %d rank%s (%d per node, %d thread%s each), %s layout; f32, 8 heads of 64",
                  size, cli_plural(size), node_ranks, per_rank, cli_plural(per_rank),
                  layout == ATTN_MPI_ZIGZAG ? "zigzag" : "contiguous");
        cli_prose(stdout, 0, 2, "single: attn_sdpa on rank 0 with %d thread%s; ring: attn_mpi_sdpa; GFLOP/s of the whole "
                  "problem", cores, cli_plural(cores));
        cli_prose(stdout, 0, 2, "waiting: for messages, the slowest rank's share of the ring's time; msgs: the same "
                  "messages alone (ms)");
        cli_prose(stdout, 0, 2, "hidden: 1 - exposed / msgs, exposed = waiting not explained by a slower neighbour's "
                  "computing");
        cli_prose(stdout, 0, 2, "imbal.: the slowest rank's computing over the mean");
    }
    /* The table, printed by rank 0 when every row is measured: a narrow
     * terminal gets it in blocks of columns that fit. */
    static const char *const HEAD[COLS] = {"L", "mask", "single", "ring", "ring/1", "waiting", "msgs", "hidden", "imbal."};
    char rows[4][COLS][CELL], failure[1024] = "";
    const char *cells[4 * COLS];
    int bad = 0, n = 0, width[COLS];
    for (int s = 0; s < nseq; s++)
        for (int c = 0; c < 2; c++, n++)
            bad |= measure(seqs[s], c ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE, layout, reps, rank, size, rows[n], failure,
                           sizeof failure);
    if (rank == 0) {
        for (int j = 0; j < COLS; j++) width[j] = cli_display_width(HEAD[j]);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < COLS; j++) {
                cells[i * COLS + j] = rows[i][j];
                width[j] = cli_display_width(rows[i][j]) > width[j] ? cli_display_width(rows[i][j]) : width[j];
            }
        cli_print_table(stdout, &(cli_table){COLS, n, 1, width, NULL, HEAD, cells});
        if (*failure) cli_prose(stdout, 0, 2, "%s", failure);
    }
    return bad;
}
