/* args_mpi.c -- the attn-mpi sdpa and bench command lines, parsed; no MPI
 * in it, so that they are fuzzed like the attn command's
 * (tests/fuzz/fuzz_mpi_args.c, tests/fuzz/fuzz_bench_args.c). */
#include "args_mpi.h"

#include <stdint.h>
#include <string.h>

const char MPI_USAGE[] =
    "usage: mpirun -np N attn-mpi sdpa -q Q.npy -k K.npy -v V.npy -o OUT.npy\n"
    "         [options]\n"
    "       mpirun -np N attn-mpi bench [--quick] [--seq L]\n"
    "         (see attn-mpi bench --help)\n"
    "\n"
    "attn sdpa's attention, with the sequence split across the ranks: each rank\n"
    "reads its shard of q, k and v, the key/value shards travel around the ring,\n"
    "and each rank writes its rows of the output into OUT.npy. The result is attn\n"
    "sdpa's on the whole (f64 within 1e-13, f32 within the f32 bound).\n"
    "\n"
    "  -q, --query FILE       queries, (..., Hq, L, E)\n"
    "  -k, --key FILE         keys, (..., Hk, S, E)\n"
    "  -v, --value FILE       values, (..., Hk, S, Ev)\n"
    "  -m, --mask FILE        bool or additive float mask, broadcastable to\n"
    "                         (..., Hq, L, S)\n"
    "      --causal[=MODE]    causal mask, top-left (default) or bottom-right\n"
    "      --scale S          score scale (default 1/sqrt(E))\n"
    CLI_SCORE_HELP
    "      --layout L         zigzag (default: every rank gets an early and a late\n"
    "                         chunk, so causal work is balanced) or contiguous\n"
    "      --timeout S        longest wait for a message or another rank, in\n"
    "                         seconds (default 60): a rank that died or hangs is\n"
    "                         an error after it (a read or write of a file gets a\n"
    "                         second more for each MiB the rank moves)\n"
    "  -o, --out FILE         write the output (..., Hq, L, Ev)\n"
    "      --lse FILE         also write each row's log-sum-exp (..., Hq, L)\n"
    "      --stats            print each rank's time computing and waiting\n"
    "  -h, --help             show this help\n"
    "\n"
    "q's length L and k's S are each 0 or enough for a row in every shard: 2N for\n"
    "the zigzag layout, N for contiguous, with N ranks (attn sdpa takes any).\n"
    "\n"
    "Every rank must be given the same command line and see the same files (one\n"
    "path, alike copies); ranks that differ stop with an error naming what differs.\n"
    "Outputs appear only if the whole run succeeds. They are regular files (a\n"
    "link's target is replaced); a FIFO or device cannot take the ranks' rows.\n";

/* What each option sets, for cli_check_repeats: every spelling of
 * --causal sets one thing. */
static const cli_setting MPI_SETTINGS[] = {
    {"--query", "-q", true, 0},       {"--key", "-k", true, 1},       {"--value", "-v", true, 2},
    {"--mask", "-m", true, 3},        {"--out", "-o", true, 4},       {"--lse", NULL, true, 5},
    {"--scale", NULL, true, 6},       {"--timeout", NULL, true, 7},   {"--layout", NULL, true, 8},
    {"--causal", NULL, false, 9},     {"--stats", NULL, false, 10},   {"--softcap", NULL, true, 11},
    {"--window", NULL, true, 12},     {"--alibi", NULL, false, 13},   {"--alibi-slopes", NULL, true, 14},
    {"--sinks", NULL, true, 15},      {"--rope", NULL, true, 16},     {"--rope-base", NULL, true, 17},
    {"--rope-dim", NULL, true, 18},   {"--rope-offset", NULL, true, 19},
    {NULL, NULL, false, 0},
};

int mpi_args_parse(int argc, char **argv, mpi_args *a, bool speak) {
    memset(a, 0, sizeof *a);
    a->so = attn_sdpa_options_default(), a->layout = ATTN_MPI_ARGS_ZIGZAG, a->timeout_s = 60;
    a->rope = attn_rope_options_default();
    int code = 0;
    if (cli_help_asked(argc, argv, MPI_SETTINGS)) { /* anywhere, before anything else is read, as attn's commands */
        if (speak) cli_print_usage(stdout, MPI_USAGE);
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, MPI_SETTINGS))) return code;
    for (int i = 2; i < argc && !code;) {
        const char *arg = argv[i], *val = NULL;
        if (cli_option(argc, argv, &i, "-q", "--query", &a->q, &code) || cli_option(argc, argv, &i, "-k", "--key", &a->k, &code) ||
            cli_option(argc, argv, &i, "-v", "--value", &a->v, &code) || cli_option(argc, argv, &i, "-m", "--mask", &a->m, &code) ||
            cli_option(argc, argv, &i, "-o", "--out", &a->out, &code) || cli_option(argc, argv, &i, NULL, "--lse", &a->lse, &code) ||
            cli_option(argc, argv, &i, NULL, "--alibi-slopes", &a->slopes, &code) ||
            cli_option(argc, argv, &i, NULL, "--sinks", &a->sinks, &code) || cli_score_option(argc, argv, &i, &a->score, &code) ||
            cli_rope_option(argc, argv, &i, &a->rope, &a->has_rope, &code))
            continue;
        if (cli_option(argc, argv, &i, NULL, "--scale", &val, &code)) {
            if (!code && !cli_parse_double(val, &a->so.scale)) code = cli_bad_value("--scale", val, "is not a finite number");
            a->so.has_scale = 1;
        } else if (cli_option(argc, argv, &i, NULL, "--timeout", &val, &code)) {
            if (!code && (!cli_parse_double(val, &a->timeout_s) || !(a->timeout_s > 0 && a->timeout_s < ATTN_MPI_ARGS_TIMEOUT_MAX)))
                code = cli_bad_value("--timeout", val, "is not a number of seconds above 0 and below %g",
                                     ATTN_MPI_ARGS_TIMEOUT_MAX);
        } else if (cli_option(argc, argv, &i, NULL, "--layout", &val, &code)) {
            if (!code && strcmp(val, "zigzag") && strcmp(val, "contiguous"))
                code = cli_bad_value("--layout", val, "is not zigzag or contiguous");
            a->layout = val && strcmp(val, "contiguous") == 0 ? ATTN_MPI_ARGS_CONTIGUOUS : ATTN_MPI_ARGS_ZIGZAG;
        } else if (strcmp(arg, "--stats") == 0) {
            a->stats = true, i++;
        } else {
            code = cli_error(EXIT_USAGE, "unknown argument '%s' (see attn-mpi sdpa --help)", arg);
        }
    }
    if (code) return code;
    cli_score_set(&a->score, &a->so, &a->so.causal);
    if (!a->q || !a->k || !a->v) return cli_error(EXIT_USAGE, "missing -q Q.npy, -k K.npy or -v V.npy (see attn-mpi sdpa --help)");
    if (!a->out) return cli_error(EXIT_USAGE, "missing -o OUT.npy: the ranks write the output into one file");
    /* However spelled (./o.npy, a link to it): one temporary would take both, and the run fail at its rename. */
    if (a->lse && cli_same_file(a->out, a->lse)) return cli_error(EXIT_USAGE, "-o and --lse name the same file %s", a->out);
    if (a->score.alibi && a->slopes) return cli_error(EXIT_USAGE, "give --alibi or --alibi-slopes FILE, not both");
    if (a->so.window && a->so.causal == ATTN_CAUSAL_NONE)
        return cli_error(EXIT_USAGE, "--window needs --causal (top-left or bottom-right)");
    return cli_rope_check(&a->rope, a->has_rope);
}


/* What each bench option sets, for cli_check_repeats. */
static const cli_setting BENCH_SETTINGS[] = {
    {"--quick", NULL, false, 0}, {"--seq", NULL, true, 1}, {"--layout", NULL, true, 2}, {"--timeout", NULL, true, 3},
    {NULL, NULL, false, 0},
};

int mpi_bench_args_parse(int argc, char **argv, int ranks, mpi_bench_args *b) {
    memset(b, 0, sizeof *b);
    b->layout = ATTN_MPI_ARGS_ZIGZAG, b->timeout_s = 60;
    int code = 0;
    if (cli_help_asked(argc, argv, BENCH_SETTINGS)) return -1; /* anywhere, before anything else is read */
    if ((code = cli_check_repeats(argc, argv, BENCH_SETTINGS))) return code;
    for (int i = 2; i < argc && !code;) {
        const char *val = NULL;
        if (strcmp(argv[i], "--quick") == 0) {
            b->quick = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--seq", &val, &code)) {
            if (val && !cli_parse_int(val, 2L * ranks, INT32_MAX, &b->seq))
                code = cli_bad_value("--seq", val, "is not a whole number from twice the ranks (%d) to %d", 2 * ranks,
                                     INT32_MAX);
        } else if (cli_option(argc, argv, &i, NULL, "--layout", &val, &code)) {
            if (val && strcmp(val, "zigzag") && strcmp(val, "contiguous"))
                code = cli_bad_value("--layout", val, "is not zigzag or contiguous");
            else if (val) b->layout = strcmp(val, "contiguous") == 0 ? ATTN_MPI_ARGS_CONTIGUOUS : ATTN_MPI_ARGS_ZIGZAG;
        } else if (cli_option(argc, argv, &i, NULL, "--timeout", &val, &code)) {
            if (val && !(cli_parse_double(val, &b->timeout_s) && b->timeout_s > 0 && b->timeout_s < ATTN_MPI_ARGS_TIMEOUT_MAX))
                code = cli_bad_value("--timeout", val, "is not a number of seconds above 0 and below %g",
                                     ATTN_MPI_ARGS_TIMEOUT_MAX);
        } else {
            code = cli_error(EXIT_USAGE, "unknown bench argument '%s' (see attn-mpi bench --help)", argv[i]);
        }
    }
    return code;
}
