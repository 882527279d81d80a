/* attn_mpi.c -- the attn-mpi command: attention on .npy files with the
 * sequence sharded across MPI ranks (libattn-mpi's ring attention). Every
 * rank reads only its own rows (MPI-IO), and the output is written by all
 * of them into one file. Errors are agreed across the ranks and printed
 * once, by rank 0; other ranks' stderr is silent but for a lost rank.
 * Before any file is opened the ranks check that they were given the same
 * command line and see the same files (attn_mpi_same), so that a launcher
 * that passes another argument to one rank, or a node with another copy of
 * a file, is an error rather than a hang or a wrong answer.
 *
 * Every collective of the command has the --timeout's deadline
 * (deadline.h), as the library's do: a rank that stops anywhere ends the
 * job with one error naming what timed out.
 *
 * For the tests only: ATTN_MPI_FAULT=stop:R or kill:R makes rank R stop
 * (SIGSTOP) or die (SIGKILL) just before the attention, and
 * stop-POINT:R just before the collective of that point (deadline.h), so
 * that the others must notice within --timeout. */
#include "cli.h"
#include "args_mpi.h"
#include "bench_mpi.h"
#include "deadline.h"
#include "npy_mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(ATTN_MPI_ARGS_ZIGZAG == (int)ATTN_MPI_ZIGZAG && ATTN_MPI_ARGS_CONTIGUOUS == (int)ATTN_MPI_CONTIGUOUS,
               "args_mpi.h names attn_mpi_layout's values");
_Static_assert((long)ATTN_MPI_ARGS_TIMEOUT_MAX == (long)ATTN_MPI_TIMEOUT_MAX, "args_mpi.h has the library's timeout bound");

static int rank_, size_;
static FILE *loud; /* this rank's own stderr: rank 0's is stderr; the others' is kept for a lost rank */

/* One status for all ranks: 0, or the first failing rank's code with its
 * message in msg on every rank. A code of -1 (npy_mpi.h) is a failure
 * another rank has, and says. The first call is fault point "agree". */
static int agree(int code, char *msg, size_t n) {
    int mine = code > 0 ? rank_ : size_, first = size_;
    deadline_allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "agree", "agreeing on the ranks' errors");
    if (first == size_) return 0;
    struct { int code; char text[ATTN_ERROR_MESSAGE_SIZE + 256]; } what;
    memset(&what, 0, sizeof what);
    if (rank_ == first) what.code = code, snprintf(what.text, sizeof what.text, "%s", msg);
    deadline_bcast(&what, (int)sizeof what, MPI_BYTE, first, MPI_COMM_WORLD, "agree", "sharing an error among the ranks");
    snprintf(msg, n, "%s", what.text);
    return what.code;
}

/* attn_mpi_same's verdict on this rank's values as the command's 0 or 1,
 * with the message (the same on every rank). No answer in time ends the
 * job, naming `what` was compared. */
static int same(const attn_mpi_value *v, int count, double timeout, const char *what, char *msg, size_t n) {
    attn_error err;
    attn_status st = attn_mpi_same(MPI_COMM_WORLD, v, count, timeout, &err);
    if (st == ATTN_OK) return 0;
    if (st == ATTN_ERR_COMM) deadline_lost("%s: %s", what, err.message);
    snprintf(msg, n, "%s", err.message);
    return 1;
}

/* The arguments that decide which files every rank opens and writes, and
 * how, alike on every rank before any file is touched: a rank given other
 * ones would wait in a collective file operation that the others never
 * make (MPI-IO's open wants one file on every rank), or write its rows
 * elsewhere. (The attention's options are checked again by the library,
 * with q, k and v.) */
static int same_options(const mpi_args *a, char *msg, size_t n) {
    const attn_mpi_value v[] = {
        {"-q's path", ATTN_MPI_DIGEST, 0, attn_mpi_digest(a->q, strlen(a->q)), 0},
        {"-k's path", ATTN_MPI_DIGEST, 0, attn_mpi_digest(a->k, strlen(a->k)), 0},
        {"-v's path", ATTN_MPI_DIGEST, 0, attn_mpi_digest(a->v, strlen(a->v)), 0},
        {"-m", ATTN_MPI_GIVEN, 0, a->m != NULL, 0},
        {"-m's path", ATTN_MPI_DIGEST, 0, a->m ? attn_mpi_digest(a->m, strlen(a->m)) : 0, 0},
        {"-o's path", ATTN_MPI_DIGEST, 0, attn_mpi_digest(a->out, strlen(a->out)), 0},
        {"--lse", ATTN_MPI_GIVEN, 0, a->lse != NULL, 0},
        {"--lse's path", ATTN_MPI_DIGEST, 0, a->lse ? attn_mpi_digest(a->lse, strlen(a->lse)) : 0, 0},
        {"--layout (0 contiguous, 1 zigzag)", ATTN_MPI_INTEGER, 0, a->layout, 0},
        {"--causal (0 none, 1 top-left, 2 bottom-right)", ATTN_MPI_INTEGER, 0, a->so.causal, 0},
        {"--scale", ATTN_MPI_GIVEN, 0, a->so.has_scale, 0},
        {"--scale's value", ATTN_MPI_REAL, 0, 0, a->so.scale},
        {"--timeout", ATTN_MPI_REAL, 0, 0, a->timeout_s},
        {"--stats", ATTN_MPI_INTEGER, 0, a->stats, 0},
        {"--alibi", ATTN_MPI_GIVEN, 0, a->score.alibi, 0},
        {"--alibi-slopes", ATTN_MPI_GIVEN, 0, a->slopes != NULL, 0},
        {"--alibi-slopes' path", ATTN_MPI_DIGEST, 0, a->slopes ? attn_mpi_digest(a->slopes, strlen(a->slopes)) : 0, 0},
        {"--sinks", ATTN_MPI_GIVEN, 0, a->sinks != NULL, 0},
        {"--sinks' path", ATTN_MPI_DIGEST, 0, a->sinks ? attn_mpi_digest(a->sinks, strlen(a->sinks)) : 0, 0},
        {"--rope", ATTN_MPI_GIVEN, 0, a->has_rope, 0},
    };
    deadline_fault("first");
    return same(v, (int)(sizeof v / sizeof *v), a->timeout_s, "comparing the ranks' command lines", msg, n);
}

/* How many bytes of an input file each rank reads itself to compare: the
 * longest .npy header (attn_npy_header) and the start of the data. */
enum { HEAD_BYTES = 65536 + 16 };

/* One input file alike on every rank, before the collective open: there
 * at all (MPI-IO's open waits for ever when it is missing on some ranks
 * only), of one size, dtype, rank and shape, and with the same first 64
 * KiB. Each rank reads its own copy with stdio for this: MPI-IO's
 * collective reads may hand every rank the bytes one aggregating rank
 * read, so they cannot see a node with another copy. A name no rank can
 * open (an MPI-IO prefix such as "ufs:") is left to MPI_File_open. */
static int same_file(const char *opt, const char *path, double timeout, char *msg, size_t n) {
    unsigned char *head = malloc(HEAD_BYTES);
    /* Opened without blocking: a FIFO's open waits for a writer that may
     * never come (and MPI-IO's after it), as attn_npy_read's would. */
    int fd = head ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    int why = errno, ranks = 0;
    struct stat sb;
    int here = fd >= 0 && fstat(fd, &sb) == 0;
    int odd = here && !S_ISREG(sb.st_mode); /* a directory, a FIFO: MPI-IO's read would hang or print its own error */
    FILE *fp = here && !odd && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    size_t got = fp ? fread(head, 1, HEAD_BYTES, fp) : 0;
    if (fp) fclose(fp);
    else if (fd >= 0) close(fd);
    int mine[2] = {here, odd}, sums[2] = {0, 0};
    char what[4200];
    snprintf(what, sizeof what, "comparing %s %s on the ranks", opt, path);
    deadline_allreduce(mine, sums, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, "file", what);
    ranks = sums[0];
    int code = 0;
    if (sums[1] > 0) {
        code = agree(odd && snprintf(msg, n, "%s %s: %s is not a regular file", opt, path, path) > 0, msg, n);
    } else if (ranks > 0 && ranks < size_) {
        code = agree(!here && snprintf(msg, n, "cannot open %s on this rank (it is there on %d of %d): %s", path, ranks,
                                       size_, head ? strerror(why) : "out of memory") > 0, msg, n);
    } else if (ranks == size_) {
        enum { N = 4 + ATTN_MAX_RANK };
        attn_npy_info h = {.struct_size = sizeof h};
        attn_error err;
        bool swap;
        int64_t digest = attn_mpi_digest(head, got); /* of the bytes as they are: npy_mpi_header may rewrite them */
        if (npy_mpi_header(&h, &swap, head, got, (uint64_t)sb.st_size, &err) != ATTN_OK) /* said once the ranks agree */
            memset(&h, 0, sizeof h);
        attn_mpi_value v[N] = {{NULL, ATTN_MPI_INTEGER, 0, (int64_t)sb.st_size, 0}, {NULL, ATTN_MPI_DTYPE, 0, h.dtype, 0},
                               {NULL, ATTN_MPI_INTEGER, 0, h.rank, 0}};
        char names[N][48];
        snprintf(names[0], sizeof names[0], "%s's size in bytes", opt);
        snprintf(names[1], sizeof names[1], "%s's dtype", opt), snprintf(names[2], sizeof names[2], "%s's rank", opt);
        for (int d = 0; d < ATTN_MAX_RANK; d++) {
            snprintf(names[3 + d], sizeof names[3 + d], "%s's dimension %d", opt, d);
            v[3 + d] = (attn_mpi_value){NULL, ATTN_MPI_INTEGER, 0, d < h.rank ? h.shape[d] : 0, 0};
        }
        snprintf(names[N - 1], sizeof names[N - 1], "%s's contents (its first 64 KiB)", opt);
        v[N - 1] = (attn_mpi_value){NULL, ATTN_MPI_DIGEST, 0, digest, 0};
        for (int i = 0; i < N; i++) v[i].name = names[i];
        code = same(v, N, timeout, what, msg, n);
    }
    free(head);
    return code;
}

/* The inputs: this rank's rows of q, k, v, and of the mask when it has
 * rows; the whole of the ALiBi slopes and the sinks, one value a head. */
enum { N_INPUTS = 6 };

static int read_inputs(const mpi_args *a, attn_tensor t[N_INPUTS], int64_t *L, char *msg, size_t n) {
    const char *paths[N_INPUTS] = {a->q, a->k, a->v, a->m, a->slopes, a->sinks};
    const char *opts[N_INPUTS] = {"-q", "-k", "-v", "-m", "--alibi-slopes", "--sinks"};
    int code = 0;
    int64_t S = 0; /* k's keys */
    for (int i = 0; i < N_INPUTS && !code; i++) {
        if (!paths[i]) continue;
        npy_mpi f = {.fh = MPI_FILE_NULL};
        if (!paths[i][0]) { /* alike on every rank (same_options): said as attn says it, not as MPI-IO's "cannot open :" */
            code = snprintf(msg, n, "%s: the input file name is empty", opts[i]) > 0;
            break;
        }
        code = same_file(opts[i], paths[i], a->timeout_s, msg, n);
        char name[4200]; /* the file as attn sdpa names it in messages on its contents: "-q q.npy" */
        snprintf(name, sizeof name, "%s %s", opts[i], paths[i]);
        if (!code) code = agree(npy_mpi_open(&f, paths[i], name, MPI_COMM_WORLD, msg, n), msg, n);
        int r = f.info.rank;
        if (!code && i < 3 && r < 2)
            code = snprintf(msg, n, "%s has rank %d; attention needs (..., L, E)", name, r) > 0;
        if (!code && i == 0 && f.info.dtype != ATTN_F32 && f.info.dtype != ATTN_F64) /* as attn sdpa says it */
            code = snprintf(msg, n, "%s has dtype %s; q must be float32 or float64", name,
                            cli_dtype_name(f.info.dtype)) > 0;
        /* k, v and the mask beside q as attn sdpa says it, before the
         * file's own rows are read (the files before it are read by then;
         * the ring's words named no file: "k is f64 but q is f32") */
        attn_dtype dt = f.info.dtype, qdt = t[0].dtype;
        if (!code && i > 0 && i < 3 && dt == ATTN_BOOL)
            code = snprintf(msg, n, "%s has dtype bool; q must be float32 or float64, and k and v float32, float64 or "
                             "float16", name) > 0;
        else if (!code && i > 0 && i < 4 && dt != qdt && !(i == 3 && dt == ATTN_BOOL) &&
                 !(i < 3 && dt == ATTN_F16 && qdt == ATTN_F32))
            code = snprintf(msg, n, "mixed dtypes: %s is %s but -q %s is %s; give every input one float dtype", name,
                            cli_dtype_name(dt), paths[0], cli_dtype_name(qdt)) > 0;
        if (!code) { /* a dimension of 0 is the library's to take or refuse, as attn sdpa's */
            int64_t len = r >= 2 ? f.info.shape[r - 2] : 1;
            if (i == 0) *L = len;
            if (i == 1) S = len;
            if (i == 2 && len != S) /* else each rank's shard sizes, not the files', would be said not to match */
                code = snprintf(msg, n, "v has S=%lld rows but k has S=%lld (they must match)", (long long)len,
                                (long long)S) > 0;
            bool rows = i < 3 || (i == 3 && r >= 2 && len > 1); /* a mask with one row is every rank's */
            if (i == 3 && rows && len != *L) /* else sharded as if it were q, and said to be too short for the ranks */
                code = snprintf(msg, n, "%s has %lld row%s; a mask's rows are q's %lld %s (or 1)", name,
                                (long long)len, cli_plural(len), (long long)*L, *L == 1 ? "query" : "queries") > 0;
            attn_mpi_shard sh;
            attn_error err;
            if (rows && attn_mpi_shard_of(&sh, len, rank_, size_, a->layout, &err)) code = snprintf(msg, n, "%s", err.message) > 0;
            int64_t need = a->layout == ATTN_MPI_ZIGZAG ? 2 * (int64_t)size_ : size_;
            if (!code && rows && len > 0 && len < need) /* none is taken: every shard then has none */
                code = snprintf(msg, n, "%s has %lld row%s, too few for %d rank%s: the %s layout needs %lld (or none)",
                                name, (long long)len, cli_plural(len), size_, cli_plural(size_),
                                a->layout == ATTN_MPI_ZIGZAG ? "zigzag" : "contiguous", (long long)need) > 0;
            if (!code) code = agree(npy_mpi_read(&f, &t[i], r - 2, rows ? &sh : NULL, msg, n), msg, n);
        }
        npy_mpi_close(&f);
    }
    return code ? EXIT_DATA : 0;
}

/* The command line's outcome, alike on every rank: 0 (run), -1 (--help)
 * or a usage error. When only some ranks had an error or --help, a usage
 * error on all; rank 0 says so unless it printed its own error already. */
static int same_outcome(int code) {
    int mine[2] = {code, -code}, most[2]; /* the greatest of the codes and of their negatives: both ends at once */
    deadline_allreduce(mine, most, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "outcome", "comparing the ranks' command lines");
    if (-most[1] == most[0]) return code;
    if (rank_ == 0 && code <= 0)
        cli_error(EXIT_USAGE, "the ranks were given different command lines (a usage error or --help on some only): "
                  "every rank must run the same command");
    return EXIT_USAGE;
}

/* Each rank's timings, printed by rank 0 in rank order (one message each). */
static void print_stats(const attn_mpi_stats *s) {
    double row[4] = {s->compute_s, s->wait_s, s->total_s, (double)s->bytes_sent};
    MPI_Request req;
    deadline_fault("stats");
    if (rank_ != 0) {
        MPI_Isend(row, 4, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, &req);
        deadline_wait(&req, 1, MPI_STATUSES_IGNORE, "sending this rank's --stats to rank 0");
        return;
    }
    for (int r = 0; r < size_; r++) {
        char what[64];
        snprintf(what, sizeof what, "receiving rank %d's --stats", r);
        if (r > 0) MPI_Irecv(row, 4, MPI_DOUBLE, r, 0, MPI_COMM_WORLD, &req), deadline_wait(&req, 1, MPI_STATUSES_IGNORE, what);
        cli_prose(stdout, 0, 2, "rank %d: computing %.3f s, waiting %.3f s (%.0f%% of %.3f s), sent %.1f MB", r, row[0], row[1],
               100 * row[1] / (row[2] > 0 ? row[2] : 1), row[2], row[3] / 1e6);
    }
}

/* The temporary tmp created by rank 0 alone, then looked for by every
 * rank: ranks that see other directories (a relative path run from other
 * working directories, a directory not shared between nodes) would each
 * open a file of their own, and MPI-IO's collective open of them waits
 * for ever. 0, or 1 with msg on every rank (rank 0 then removes tmp). */
static int same_output(int slot, const char *path, const char *tmp, char *msg, size_t n) {
    FILE *fp = rank_ == 0 ? fopen(tmp, "wb") : NULL;
    int why = errno;
    if (fp) fclose(fp), deadline_temp(slot, tmp); /* from now: a rank lost at the agreement below leaves no file */
    if (agree(rank_ == 0 && !fp && snprintf(msg, n, "cannot create %s: %s", tmp, strerror(why)) > 0, msg, n)) return 1;
    deadline_temp(slot, tmp); /* removed by whichever rank ends the job, should one be lost from here */
    struct stat sb;
    int seen = stat(tmp, &sb) == 0;
    return agree(!seen && snprintf(msg, n, "rank %d cannot see %s, which rank 0 created for %s: every rank must see the same "
                                  "file (a directory they share; an absolute path)", rank_, tmp, path) > 0, msg, n) != 0;
}

/* Where an output lands, as attn decides it (cli_output_target): "" names
 * no file and a directory cannot be replaced; a symbolic link's target is
 * replaced, the link kept. A FIFO, device, socket or stream is refused
 * rather than written in place: the ranks write at offsets (MPI-IO), which
 * such a file cannot take, and the rename put a regular file where it was
 * (as root, where /dev/null was). 0, or 1 with msg. */
enum { TMP_SUFFIX = 40 }; /* ".attn-mpi-PID.tmp", the longest PID a long has */

static int output_target(const char *flag, cli_output *out, char *msg, size_t n) {
    char why[sizeof out->target + 128];
    if (cli_output_target(out, TMP_SUFFIX, why, sizeof why) == 0) {
        if (!out->direct) return 0;
        snprintf(why, sizeof why, "cannot write %s: it is not a regular file (a FIFO, device, socket or stream), which "
                 "the ranks cannot write together", out->path);
    }
    /* an empty name cannot say which option it was: the flag does */
    return snprintf(msg, n, "%s%s%s", out->path[0] ? "" : flag, out->path[0] ? "" : ": ", why) > 0;
}

/* Both outputs' targets, on every rank before any work: a bad -o is an
 * error at once, not after the attention. */
static int resolve_outputs(const mpi_args *a, cli_output outs[2], char *msg, size_t n) {
    const char *paths[2] = {a->out, a->lse}, *flags[2] = {"-o", "--lse"};
    int code = 0;
    for (int i = 0; i < 2; i++) {
        outs[i] = (cli_output){.path = paths[i]};
        if (!code && paths[i]) code = output_target(flags[i], &outs[i], msg, n);
    }
    return agree(code, msg, n) ? EXIT_DATA : 0;
}

/* The outputs, and whether they are written and wait to be renamed into
 * place by rank 0 (commit_outputs, once every rank is done). */
static cli_output outs_[2];
static bool written_;

/* Write out (and lse) into temporaries beside their targets: every rank's
 * rows, agreed. They are renamed into place at the end (commit_outputs). */
static int write_outputs(const mpi_args *a, cli_output outs[2], const attn_tensor *out, const attn_tensor *lse, int64_t L,
                         char *msg, size_t n) {
    long stamp = (long)getpid();
    deadline_bcast(&stamp, 1, MPI_LONG, 0, MPI_COMM_WORLD, "stamp", "sharing the temporary files' names");
    const attn_tensor *ts[2] = {out, lse};
    int code = 0;
    attn_mpi_shard sh;
    attn_mpi_shard_of(&sh, L, rank_, size_, a->layout, NULL);
    for (int i = 0; i < 2 && !code; i++) {
        if (!outs[i].path || !ts[i]) continue;
        int len = snprintf(outs[i].tmp, sizeof outs[i].tmp, "%s.attn-mpi-%ld.tmp", outs[i].target, stamp);
        if ((code = agree((len < 0 || (size_t)len >= sizeof outs[i].tmp) && /* output_target left room: never */
                          snprintf(msg, n, "output path %s is too long", outs[i].path) > 0, msg, n)))
            break;
        int64_t whole[ATTN_MAX_RANK];
        memcpy(whole, ts[i]->shape, sizeof whole);
        int dim = i == 0 ? ts[i]->rank - 2 : ts[i]->rank - 1;
        whole[dim] = L;
        outs[i].written = rank_ == 0; /* rank 0 renames or removes what all wrote */
        code = same_output(i, outs[i].path, outs[i].tmp, msg, n);
        if (!code) code = agree(npy_mpi_write(outs[i].tmp, ts[i], whole, dim, &sh, MPI_COMM_WORLD, rank_, msg, n), msg, n);
    }
    written_ = !code;
    if (code && rank_ == 0) cli_outputs_abort(outs, 2);
    if (code) deadline_temp(0, NULL), deadline_temp(1, NULL);
    return code ? EXIT_DATA : 0;
}

/* The outputs renamed into place by rank 0, both or neither
 * (cli_outputs_move), after MPI_Finalize: a rank lost before leaves no
 * output. A failure is rank 0's alone to say, and its status is the
 * job's. */
static int commit_outputs(void) {
    int code = 0;
    if (rank_ == 0 && written_) {
        int failed, e = cli_outputs_move(outs_, 2, &failed);
        if (e) code = cli_error(EXIT_DATA, "cannot rename into %s: %s", outs_[failed].path, strerror(e));
        cli_outputs_abort(outs_, 2);
    }
    deadline_temp(0, NULL), deadline_temp(1, NULL);
    return code;
}

static int run(const mpi_args *a) {
    attn_tensor in[N_INPUTS];
    memset(in, 0, sizeof in);
    char msg[ATTN_ERROR_MESSAGE_SIZE + 256] = "";
    int64_t L = 0;
    cli_output *outs = outs_;
    int code = same_options(a, msg, sizeof msg) ? EXIT_USAGE : 0;
    if (!code) code = resolve_outputs(a, outs, msg, sizeof msg);
    if (!code) code = read_inputs(a, in, &L, msg, sizeof msg);
    attn_tensor out = {0}, lse = {0};
    /* --alibi: the paper's slopes for q's heads (a dimension every rank reads whole, so alike on all) */
    double slopes[CLI_ALIBI_MAX];
    attn_tensor slope_t;
    int64_t heads = in[0].rank >= 3 ? in[0].shape[in[0].rank - 3] : 1;
    if (!code && a->score.alibi && !cli_alibi(&slope_t, slopes, heads)) {
        snprintf(msg, sizeof msg, "--alibi: q has %lld heads; at most %d", (long long)heads, CLI_ALIBI_MAX);
        code = EXIT_DATA;
    }
    if (!code) {
        attn_sdpa_options so = a->so;
        attn_mpi_options mo = attn_mpi_options_default();
        mo.layout = a->layout, mo.timeout_s = a->timeout_s;
        attn_mpi_stats stats;
        attn_rope_options rope = a->rope;
        so.mask = a->m ? &in[3] : NULL;
        so.alibi_slopes = a->score.alibi ? &slope_t : a->slopes ? &in[4] : NULL, so.sinks = a->sinks ? &in[5] : NULL;
        so.rope = a->has_rope ? &rope : NULL;
        mo.attention = &so, mo.stats = &stats;
        int rank;
        int64_t shape[ATTN_MAX_RANK];
        attn_error err;
        /* out's shape from the local shards (a bad shape is reported by the ring, agreed). */
        if (attn_sdpa_shapes(&rank, shape, NULL, &in[0], &in[1], &in[2], NULL, &err) != ATTN_OK) rank = in[0].rank, memcpy(shape, in[0].shape, sizeof shape);
        attn_tensor_init(&out, NULL, in[0].dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32, rank, shape, NULL, NULL);
        attn_tensor_init(&lse, NULL, out.dtype, rank - 1, shape, NULL, NULL);
        out.data = malloc((size_t)attn_tensor_numel(&out) * 8 + 8), lse.data = malloc((size_t)attn_tensor_numel(&lse) * 8 + 8);
        /* Agreed before the ring: a rank without its outputs cannot take
         * part, and the others would wait in the ring's collectives until
         * the timeout named them instead of the memory. */
        code = agree((!out.data || !lse.data) && snprintf(msg, sizeof msg, "out of memory for the outputs") > 0, msg,
                     sizeof msg) ? EXIT_DATA : 0;
        deadline_fault("");
        attn_status st = code ? ATTN_OK : attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &in[0], &in[1], &in[2], &mo, &err);
        if (st == ATTN_ERR_COMM) deadline_lost("%s", err.message); /* the ring is broken: said from here, the job brought down */
        if (!code) code = agree(st && snprintf(msg, sizeof msg, "%s", err.message) > 0, msg, sizeof msg) ? EXIT_DATA : 0;
        if (!code) code = write_outputs(a, outs, &out, a->lse ? &lse : NULL, L, msg, sizeof msg);
        if (!code && a->stats) print_stats(&stats);
    }
    if (code && rank_ == 0) cli_error(code, "%s", msg);
    free(out.data), free(lse.data);
    for (int i = 0; i < N_INPUTS; i++) free(in[i].data);
    return code;
}

int main(int argc, char **argv) {
    signal(SIGXFSZ, SIG_IGN); /* past ulimit -f: EFBIG, reported, rather than a kill (see cli/main.c) */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_), MPI_Comm_size(MPI_COMM_WORLD, &size_);
    loud = stderr;
    if (rank_ != 0) { /* one voice: the others' errors are rank 0's, agreed */
        int keep = dup(2), null = open("/dev/null", O_WRONLY);
        loud = keep >= 0 ? fdopen(keep, "w") : stderr;
        if (null >= 0) dup2(null, 2), close(null);
    }
    deadline_init(rank_, size_, loud, 60); /* the default --timeout until the command line is read */
    int code;
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        if (rank_ == 0) cli_print_usage(argc < 2 ? stderr : stdout, MPI_USAGE);
        code = argc < 2 ? EXIT_USAGE : 0;
    } else if (strcmp(argv[1], "bench") == 0) {
        code = mpi_bench(argc, argv, rank_, size_);
    } else if (strcmp(argv[1], "sdpa") != 0) {
        code = cli_error(EXIT_USAGE, "unknown command '%s' (attn-mpi has sdpa and bench)", argv[1]);
    } else {
        mpi_args a;
        int parsed = mpi_args_parse(argc, argv, &a, rank_ == 0);
        if (parsed == 0) deadline_set_timeout(a.timeout_s); /* this rank's; the ranks compare them next */
        code = same_outcome(parsed);
        if (code == 0) code = run(&a);
        if (code < 0) code = 0;
    }
    /* MPI_Finalize waits for every rank, and has no nonblocking form: a
     * rank lost before it is found at the barrier, one lost after it by the
     * timer, which removes the temporaries. Only once it has returned does
     * rank 0 rename the outputs into place: every rank has finished. */
    deadline_enter(MPI_COMM_WORLD, "finalize", "ending MPI (MPI_Finalize)");
    MPI_Finalize();
    deadline_leave();
    if (code == 0) code = commit_outputs();
    return cli_close_stdout(code);
}
