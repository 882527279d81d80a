/* bench_args.h -- attn bench's command line (build/attn-bench), parsed
 * apart from the benchmark, so that it is fuzzed like the attn command's
 * (tests/fuzz/fuzz_bench_args.c). */
#ifndef ATTN_BENCH_ARGS_H
#define ATTN_BENCH_ARGS_H

#include <stdbool.h>

/* What a run measures: everything, or one section alone (the options from
 * --backward to --kv, and --ggml). */
typedef enum bench_section {
    BENCH_ALL,
    BENCH_BACKWARD,
    BENCH_LAYER,
    BENCH_VARIANTS,
    BENCH_VARLEN,
    BENCH_DECODE,
    BENCH_OVERHEAD,
    BENCH_PAGED,
    BENCH_KV,
    BENCH_GGML,
    BENCH_SECTIONS /* how many there are */
} bench_section;

typedef struct bench_args {
    bool quick, json;
    bench_section section;
    int threads;          /* --threads, 1..256; 0: attn's default */
    const char *ggml_dir; /* --ggml's directory, not empty (argv's), exactly when section is BENCH_GGML */
} bench_args;

/* Fills *a from argv[1..argc). 0; -1 when --help (or -h) was asked for
 * anywhere (not printed here: the caller prints the usage); or the exit
 * code of an error, said in one line through cli_error: EXIT_USAGE, or
 * EXIT_DATA for an empty --ggml directory. Reads nothing else, keeps no
 * state. */
int bench_args_parse(int argc, char **argv, bench_args *a);

#endif /* ATTN_BENCH_ARGS_H */
