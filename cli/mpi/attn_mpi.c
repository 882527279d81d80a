/* attn_mpi.c -- the attn-mpi command: attention on .npy files with the
 * sequence sharded across MPI ranks (libattn-mpi's ring attention). Every
 * rank reads only its own rows (MPI-IO), and the output is written by all
 * of them into one file. Errors are agreed across the ranks and printed
 * once, by rank 0; other ranks' stderr is silent but for a lost rank.
 *
 * For the tests only: ATTN_MPI_FAULT=stop:R or kill:R makes rank R stop
 * (SIGSTOP) or die (SIGKILL) just before the attention, so that the others
 * must notice within --timeout. */
#include "cli.h"
#include "args_mpi.h"
#include "bench_mpi.h"
#include "npy_mpi.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(ATTN_MPI_ARGS_ZIGZAG == (int)ATTN_MPI_ZIGZAG && ATTN_MPI_ARGS_CONTIGUOUS == (int)ATTN_MPI_CONTIGUOUS,
               "args_mpi.h names attn_mpi_layout's values");

static int rank_, size_;
static FILE *loud; /* this rank's own stderr: rank 0's is stderr; the others' is kept for a lost rank */

/* One status for all ranks: 0, or the first failing rank's code with its
 * message in msg on every rank. */
static int agree(int code, char *msg, size_t n) {
    int mine = code ? rank_ : size_, first = size_;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size_) return 0;
    int what = code;
    MPI_Bcast(&what, 1, MPI_INT, first, MPI_COMM_WORLD);
    MPI_Bcast(msg, (int)n, MPI_CHAR, first, MPI_COMM_WORLD);
    msg[n - 1] = 0;
    return what;
}

/* The inputs: this rank's rows of q, k, v, and of the mask when it has rows. */
static int read_inputs(const mpi_args *a, attn_tensor t[4], int64_t *L, char *msg, size_t n) {
    const char *paths[4] = {a->q, a->k, a->v, a->m};
    int code = 0;
    for (int i = 0; i < 4 && !code; i++) {
        if (!paths[i]) continue;
        npy_mpi f;
        code = agree(npy_mpi_open(&f, paths[i], MPI_COMM_WORLD, msg, n), msg, n);
        int r = f.info.rank;
        if (!code && i < 3 && r < 2)
            code = snprintf(msg, n, "%s has rank %d; attention needs (..., L, E)", paths[i], r) > 0;
        if (!code) {
            int64_t len = r >= 2 ? f.info.shape[r - 2] : 1;
            if (i == 0) *L = len;
            bool rows = i < 3 || (r >= 2 && len > 1); /* a mask with one row is every rank's */
            attn_mpi_shard sh;
            attn_error err;
            if (rows && attn_mpi_shard_of(&sh, len, rank_, size_, a->layout, &err)) code = snprintf(msg, n, "%s", err.message) > 0;
            int64_t need = a->layout == ATTN_MPI_ZIGZAG ? 2 * (int64_t)size_ : size_;
            if (!code && rows && len < need)
                code = snprintf(msg, n, "%s has %lld rows, too few for %d ranks: the %s layout needs %lld", paths[i],
                                (long long)len, size_, a->layout == ATTN_MPI_ZIGZAG ? "zigzag" : "contiguous",
                                (long long)need) > 0;
            if (!code) code = agree(npy_mpi_read(&f, &t[i], r - 2, rows ? &sh : NULL, msg, n), msg, n);
        }
        npy_mpi_close(&f);
    }
    return code ? EXIT_DATA : 0;
}

/* For the tests: stop or kill this rank when ATTN_MPI_FAULT names it. */
static void fault_hook(void) {
    const char *f = getenv("ATTN_MPI_FAULT");
    if (!f) return;
    int which = atoi(strchr(f, ':') ? strchr(f, ':') + 1 : "-1");
    if (which != rank_) return;
    if (strncmp(f, "stop", 4) == 0) raise(SIGSTOP);
    if (strncmp(f, "kill", 4) == 0) raise(SIGKILL);
}

/* Each rank's timings, printed by rank 0 in rank order (one message each). */
static void print_stats(const attn_mpi_stats *s) {
    double row[4] = {s->compute_s, s->wait_s, s->total_s, (double)s->bytes_sent};
    if (rank_ != 0) {
        MPI_Send(row, 4, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
        return;
    }
    for (int r = 0; r < size_; r++) {
        if (r > 0) MPI_Recv(row, 4, MPI_DOUBLE, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("rank %d: computing %.3f s, waiting %.3f s (%.0f%% of %.3f s), sent %.1f MB\n", r, row[0], row[1],
               100 * row[1] / (row[2] > 0 ? row[2] : 1), row[2], row[3] / 1e6);
    }
}

/* Write out (and lse) into temporaries beside their paths, then rename
 * them into place on rank 0 once every rank has written. */
static int write_outputs(const mpi_args *a, const attn_tensor *out, const attn_tensor *lse, int64_t L, char *msg, size_t n) {
    long stamp = (long)getpid();
    MPI_Bcast(&stamp, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const char *paths[2] = {a->out, a->lse};
    const attn_tensor *ts[2] = {out, lse};
    char tmp[2][4200];
    int code = 0, wrote = 0;
    attn_mpi_shard sh;
    attn_mpi_shard_of(&sh, L, rank_, size_, a->layout, NULL);
    for (int i = 0; i < 2 && !code; i++) {
        if (!paths[i]) continue;
        snprintf(tmp[i], sizeof tmp[i], "%s.attn-mpi-%ld.tmp", paths[i], stamp);
        int64_t whole[ATTN_MAX_RANK];
        memcpy(whole, ts[i]->shape, sizeof whole);
        int dim = i == 0 ? ts[i]->rank - 2 : ts[i]->rank - 1;
        whole[dim] = L;
        code = agree(npy_mpi_write(tmp[i], ts[i], whole, dim, &sh, MPI_COMM_WORLD, rank_, msg, n), msg, n);
        wrote = i + 1;
    }
    for (int i = 0; i < wrote && rank_ == 0; i++)
        if (paths[i] && !code && rename(tmp[i], paths[i]) != 0) code = snprintf(msg, n, "cannot rename %s into place", tmp[i]) > 0;
    for (int i = 0; i < wrote && rank_ == 0; i++)
        if (paths[i] && code) remove(tmp[i]);
    return agree(code, msg, n) ? EXIT_DATA : 0;
}

static int run(const mpi_args *a) {
    attn_tensor in[4];
    memset(in, 0, sizeof in);
    char msg[ATTN_ERROR_MESSAGE_SIZE + 256] = "";
    int64_t L = 0;
    int code = read_inputs(a, in, &L, msg, sizeof msg);
    attn_tensor out = {0}, lse = {0};
    if (!code) {
        attn_sdpa_options so = a->so;
        attn_mpi_options mo = attn_mpi_options_default();
        mo.layout = a->layout, mo.timeout_s = a->timeout_s;
        attn_mpi_stats stats;
        so.mask = a->m ? &in[3] : NULL;
        mo.attention = &so, mo.stats = &stats;
        int rank;
        int64_t shape[ATTN_MAX_RANK];
        attn_error err;
        /* out's shape from the local shards (a bad shape is reported by the ring, agreed). */
        if (attn_sdpa_shapes(&rank, shape, NULL, &in[0], &in[1], &in[2], NULL, &err) != ATTN_OK) rank = in[0].rank, memcpy(shape, in[0].shape, sizeof shape);
        attn_tensor_init(&out, NULL, in[0].dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32, rank, shape, NULL, NULL);
        attn_tensor_init(&lse, NULL, out.dtype, rank - 1, shape, NULL, NULL);
        out.data = malloc((size_t)attn_tensor_numel(&out) * 8 + 8), lse.data = malloc((size_t)attn_tensor_numel(&lse) * 8 + 8);
        fault_hook();
        attn_status st = out.data && lse.data ? attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &in[0], &in[1], &in[2], &mo, &err)
                                              : ATTN_ERR_NO_MEMORY;
        if (st == ATTN_ERR_COMM) { /* the ring is broken: say so from here, and bring the job down */
            fprintf(loud, "attn: error: rank %d: %s\n", rank_, err.message);
            fflush(loud);
            _exit(EXIT_DATA); /* without MPI_Finalize: mpirun ends the job, a stopped rank too */
        }
        if (st) code = snprintf(msg, sizeof msg, "%s", st == ATTN_ERR_NO_MEMORY && !out.data ? "out of memory" : err.message) > 0;
        code = agree(code, msg, sizeof msg) ? EXIT_DATA : 0;
        if (!code) code = write_outputs(a, &out, a->lse ? &lse : NULL, L, msg, sizeof msg);
        if (!code && a->stats) print_stats(&stats);
    }
    if (code && rank_ == 0) cli_error(code, "%s", msg);
    free(out.data), free(lse.data);
    for (int i = 0; i < 4; i++) free(in[i].data);
    return code;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_), MPI_Comm_size(MPI_COMM_WORLD, &size_);
    loud = stderr;
    if (rank_ != 0) { /* one voice: the others' errors are rank 0's, agreed */
        int keep = dup(2), null = open("/dev/null", O_WRONLY);
        loud = keep >= 0 ? fdopen(keep, "w") : stderr;
        if (null >= 0) dup2(null, 2), close(null);
    }
    int code;
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        if (rank_ == 0) fputs(MPI_USAGE, argc < 2 ? stderr : stdout);
        code = argc < 2 ? EXIT_USAGE : 0;
    } else if (strcmp(argv[1], "bench") == 0) {
        code = mpi_bench(argc, argv, rank_, size_);
    } else if (strcmp(argv[1], "sdpa") != 0) {
        code = cli_error(EXIT_USAGE, "unknown command '%s' (attn-mpi has sdpa and bench)", argv[1]);
    } else {
        mpi_args a;
        code = mpi_args_parse(argc, argv, &a, rank_ == 0);
        if (code == 0) code = run(&a);
        if (code < 0) code = 0;
    }
    MPI_Finalize();
    return code;
}
