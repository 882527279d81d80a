/* bench_args.c -- attn bench's command line, parsed: no timing, no
 * OpenBLAS and no output but the one error line, so that main (bench.c)
 * and the fuzzer (tests/fuzz/fuzz_bench_args.c) call the same code. */
#include "bench_args.h"

#include "../cli/cli.h"

#include <string.h>

/* What each option sets, for cli_check_repeats: each section its own
 * (two sections together are refused below, in words of their own). */
static const cli_setting BENCH_SETTINGS[] = {
    {"--quick", NULL, false, 0},    {"--json", NULL, false, 1},    {"--threads", NULL, true, 2},
    {"--ggml", NULL, true, 3},      {"--backward", NULL, false, 4}, {"--layer", NULL, false, 5},
    {"--variants", NULL, false, 6}, {"--varlen", NULL, false, 7},  {"--decode", NULL, false, 8},
    {"--overhead", NULL, false, 9}, {"--paged", NULL, false, 10},  {"--kv", NULL, false, 11},
    {NULL, NULL, false, 0},
};

int bench_args_parse(int argc, char **argv, bench_args *a) {
    memset(a, 0, sizeof *a);
    a->section = BENCH_ALL;
    /* --help anywhere, before anything else is read, as every attn command takes it */
    if (cli_help_asked(argc, argv, BENCH_SETTINGS)) return -1;
    int code = cli_check_repeats(argc, argv, BENCH_SETTINGS);
    if (code) return code;
    /* The options that each run one section alone: two of them ran only the
     * first in bench.c's order and dropped the other without a word. */
    static const struct { const char *flag; bench_section section; } SECTIONS[] = {
        {"--backward", BENCH_BACKWARD}, {"--layer", BENCH_LAYER}, {"--variants", BENCH_VARIANTS},
        {"--varlen", BENCH_VARLEN},     {"--decode", BENCH_DECODE}, {"--overhead", BENCH_OVERHEAD},
        {"--paged", BENCH_PAGED},       {"--kv", BENCH_KV},         {"--ggml", BENCH_GGML}};
    const char *section = NULL; /* the flag that chose a.section, as the user wrote its name */
    /* Errors through cli_error, as the other commands say them: one line,
     * control bytes in an argument escaped. --ggml and --threads take their
     * value as the next argument or after '=', as the other commands'
     * options do (and as cli_check_repeats reads them). */
    for (int i = 1; i < argc && !code;) {
        const char *arg = argv[i], *val = NULL;
        bool alone = false; /* a section's flag but --ggml's (which takes a value, below) */
        for (size_t j = 0; j < sizeof SECTIONS / sizeof *SECTIONS; j++) {
            const char *flag = SECTIONS[j].flag;
            bool ggml = SECTIONS[j].section == BENCH_GGML;
            size_t n = strlen(flag);
            if (strncmp(arg, flag, n) != 0 || (arg[n] && !(arg[n] == '=' && ggml))) continue;
            if (section && strcmp(section, flag) != 0)
                return cli_error(EXIT_USAGE, "%s and %s each run one section alone: give one of them", section, flag);
            section = flag, a->section = SECTIONS[j].section;
            alone = !ggml;
        }
        if (alone) {
            i++;
        } else if (strcmp(arg, "--quick") == 0) {
            a->quick = true, i++;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--ggml", &a->ggml_dir, &code)) {
            /* "" (an unset shell variable) named "/libggml-base.so", the root's */
            if (a->ggml_dir && !a->ggml_dir[0]) code = cli_error(EXIT_DATA, "--ggml: the directory name is empty");
        } else if (cli_option(argc, argv, &i, NULL, "--threads", &val, &code)) {
            long t; /* the whole text, digits only: atoi took "5x" as 5 and overflowed */
            if (val && !cli_parse_int(val, 1, 256, &t))
                code = cli_bad_value("--threads", val, "is not a whole number from 1 to 256");
            else if (val) a->threads = (int)t;
        } else if (strcmp(arg, "--mpi") == 0) { /* attn bench takes it out, and runs attn-mpi instead */
            return cli_error(EXIT_USAGE, "--mpi is for `attn bench --mpi` (under mpirun), which runs attn-mpi bench, "
                             "not this program");
        } else {
            return cli_error(EXIT_USAGE, "unknown bench argument '%s' (see attn bench --help)", arg);
        }
    }
    return code;
}
