/* fuzz_bench_args.c -- libFuzzer target: the benchmark's options, attn
 * bench's (bench/bench_args.c, which build/attn-bench's main calls) and
 * attn-mpi bench's (cli/mpi/args_mpi.c); neither parser has OpenBLAS, MPI
 * or a timing in it. The input is split at NUL bytes into arguments, given
 * to each: after "attn-bench", and after "attn-mpi bench" on 1 to 16 ranks
 * (from the input's length, so that a file replays alike; --seq's least
 * length is twice the ranks). Beyond "no crash, no leak, no undefined
 * behaviour":
 *   - the result is 0, -1 (help asked for) or a documented exit code:
 *     EXIT_USAGE, or for attn bench EXIT_DATA where --ggml's directory is
 *     empty; -1 only where some argument is -h or --help;
 *   - a parse that succeeds gave exactly what the arguments say, read here
 *     a second way (each argument a flag, an option with its value next or
 *     after '=', no setting twice, at most one section): a known section,
 *     threads from 1 to 256 where given, --ggml's non-empty directory
 *     exactly for the ggml section, --seq from twice the ranks to INT32_MAX,
 *     a known layout, --timeout above 0 and below its maximum (60 where not
 *     given);
 *   - the same arguments parsed again give the same result (no state kept
 *     between parses). */
#include "../../bench/bench_args.h"
#include "../../cli/mpi/args_mpi.h"
#include "split_args.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool any_arg(int from, int argc, char **argv, const char *a, const char *b) {
    for (int i = from; i < argc; i++)
        if (strcmp(argv[i], a) == 0 || (b && strcmp(argv[i], b) == 0)) return true;
    return false;
}

/* argv[i] is `name` with its value next, or `name=VALUE`: the value, and
 * *i moved past it; NULL (and *i as it was) otherwise. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[(*i)++] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) abort(); /* a success took an option without its value */
    *i += 2;
    return argv[*i - 1];
}

/* A successful attn bench parse, checked against the arguments. */
static void check_bench(int argc, char **argv, const bench_args *a) {
    static const char *const SECTION_FLAGS[BENCH_SECTIONS] = {
        NULL, "--backward", "--layer", "--variants", "--varlen", "--decode", "--overhead", "--paged", "--kv", NULL};
    bool quick = false, json = false, threads_given = false;
    bench_section section = BENCH_ALL;
    const char *ggml = NULL, *threads = NULL;
    for (int i = 1; i < argc;) {
        const char *arg = argv[i], *v;
        bench_section s = BENCH_ALL;
        for (int j = 1; j < BENCH_SECTIONS; j++)
            if (SECTION_FLAGS[j] && strcmp(arg, SECTION_FLAGS[j]) == 0) s = (bench_section)j;
        if (s != BENCH_ALL) {
            if (section != BENCH_ALL) abort(); /* two sections, or one twice, taken */
            section = s, i++;
        } else if (strcmp(arg, "--quick") == 0 || strcmp(arg, "--json") == 0) {
            bool *flag = arg[2] == 'q' ? &quick : &json;
            if (*flag) abort();
            *flag = true, i++;
        } else if ((v = option_value(argc, argv, &i, "--ggml"))) {
            if (section != BENCH_ALL) abort();
            section = BENCH_GGML, ggml = v;
        } else if ((v = option_value(argc, argv, &i, "--threads"))) {
            if (threads_given) abort();
            threads_given = true, threads = v;
        } else {
            abort(); /* an argument attn bench does not take, taken */
        }
    }
    if (a->quick != quick || a->json != json || a->section != section) abort();
    if (a->section < BENCH_ALL || a->section >= BENCH_SECTIONS) abort();
    /* the directory is argv's own text, and given exactly for --ggml */
    if (a->ggml_dir != ggml || (section == BENCH_GGML) != (ggml != NULL) || (ggml && !ggml[0])) abort();
    if (threads_given) {
        char *end;
        long t = strtol(threads, &end, 10);
        if (end == threads || *end || t != a->threads || a->threads < 1 || a->threads > 256) abort();
    } else if (a->threads != 0) {
        abort();
    }
}

/* A successful attn-mpi bench parse (argv[1] is "bench"), checked so. */
static void check_mpi_bench(int argc, char **argv, int ranks, const mpi_bench_args *b) {
    bool quick = false;
    const char *seq = NULL, *layout = NULL, *timeout = NULL, *v;
    for (int i = 2; i < argc;) {
        if (strcmp(argv[i], "--quick") == 0) {
            if (quick) abort();
            quick = true, i++;
        } else if ((v = option_value(argc, argv, &i, "--seq"))) {
            if (seq) abort();
            seq = v;
        } else if ((v = option_value(argc, argv, &i, "--layout"))) {
            if (layout) abort();
            layout = v;
        } else if ((v = option_value(argc, argv, &i, "--timeout"))) {
            if (timeout) abort();
            timeout = v;
        } else {
            abort();
        }
    }
    if (b->quick != quick) abort();
    if (timeout) {
        char *end;
        double t = strtod(timeout, &end);
        if (end == timeout || *end || t != b->timeout_s || !(b->timeout_s > 0 && b->timeout_s < ATTN_MPI_ARGS_TIMEOUT_MAX))
            abort();
    } else if (b->timeout_s != 60) {
        abort();
    }
    if (seq) {
        char *end;
        long n = strtol(seq, &end, 10);
        if (end == seq || *end || n != b->seq || b->seq < 2L * ranks || b->seq > INT32_MAX) abort();
    } else if (b->seq != 0) {
        abort();
    }
    int want = layout && strcmp(layout, "contiguous") == 0 ? ATTN_MPI_ARGS_CONTIGUOUS : ATTN_MPI_ARGS_ZIGZAG;
    if (b->layout != want || (layout && strcmp(layout, "zigzag") && strcmp(layout, "contiguous"))) abort();
}

/* An empty --ggml directory: "--ggml=" or "--ggml" then "". */
static bool empty_ggml(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--ggml=") == 0 || (strcmp(argv[i], "--ggml") == 0 && i + 1 < argc && !argv[i + 1][0]))
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const bench_fixed[] = {"attn-bench"}, *const mpi_fixed[] = {"attn-mpi", "bench"};
    char *argv[FUZZ_MAX_ARGS + 1], *buf;
    int argc = fuzz_split_args(argv, &buf, bench_fixed, 1, data, size);
    if (argc) {
        bench_args a, again;
        int code = bench_args_parse(argc, argv, &a);
        if (code == 0) check_bench(argc, argv, &a);
        else if (code == -1) { if (!any_arg(1, argc, argv, "-h", "--help")) abort(); }
        else if (code != EXIT_USAGE && !(code == EXIT_DATA && empty_ggml(argc, argv))) abort();
        if (bench_args_parse(argc, argv, &again) != code) abort();
        if (code == 0 && (again.quick != a.quick || again.json != a.json || again.section != a.section ||
                          again.threads != a.threads || again.ggml_dir != a.ggml_dir))
            abort();
        free(buf);
    }
    argc = fuzz_split_args(argv, &buf, mpi_fixed, 2, data, size);
    if (argc) {
        int ranks = 1 + (int)(size % 16);
        mpi_bench_args b, again;
        int code = mpi_bench_args_parse(argc, argv, ranks, &b);
        if (code == 0) check_mpi_bench(argc, argv, ranks, &b);
        else if (code == -1) { if (!any_arg(2, argc, argv, "-h", "--help")) abort(); }
        else if (code != EXIT_USAGE) abort();
        if (mpi_bench_args_parse(argc, argv, ranks, &again) != code) abort();
        if (code == 0 && (again.quick != b.quick || again.seq != b.seq || again.layout != b.layout ||
                          again.timeout_s != b.timeout_s)) abort();
        free(buf);
    }
    return 0;
}
