/* args_mpi.h -- attn-mpi's command line. */
#ifndef ATTN_CLI_ARGS_MPI_H
#define ATTN_CLI_ARGS_MPI_H

#include "../cli.h"

/* The layouts of attn_mpi.h, without needing MPI's header here. */
enum { ATTN_MPI_ARGS_CONTIGUOUS = 0, ATTN_MPI_ARGS_ZIGZAG = 1 };
/* attn_mpi.h's ATTN_MPI_TIMEOUT_MAX (attn_mpi.c checks that they agree):
 * --timeout at or above it is a usage error, not the library's. */
#define ATTN_MPI_ARGS_TIMEOUT_MAX 1e9

typedef struct mpi_args {
    const char *q, *k, *v, *m, *out, *lse;
    const char *slopes, *sinks; /* --alibi-slopes, --sinks */
    attn_sdpa_options so;   /* causal, scale, softcap, window (the tensors are attn_mpi.c's) */
    cli_score score;        /* the score flags as given (set into so by cli_score_set);
                               alibi: --alibi, the paper's slopes for q's heads */
    attn_rope_options rope; /* --rope..., when has_rope */
    bool has_rope;
    int layout;             /* an attn_mpi_layout */
    double timeout_s;
    bool stats;
} mpi_args;

extern const char MPI_USAGE[];

/* argv[1] is "sdpa". 0, -1 after --help (printed when speak), or the exit
 * code of a usage error (printed through cli_error). */
int mpi_args_parse(int argc, char **argv, mpi_args *a, bool speak);

/* attn-mpi bench's options. */
typedef struct mpi_bench_args {
    bool quick; /* --quick */
    long seq;   /* --seq's length, from twice the ranks to INT32_MAX; 0: not given */
    int layout; /* an attn_mpi_layout (--layout; zigzag by default) */
    double timeout_s; /* --timeout's seconds, above 0 and below ATTN_MPI_ARGS_TIMEOUT_MAX; 60 by default */
} mpi_bench_args;

/* argv[1] is "bench", run on `ranks` ranks (--seq's least is twice that).
 * 0, -1 when --help (or -h) was asked for anywhere (not printed here), or
 * the exit code of a usage error (printed through cli_error). */
int mpi_bench_args_parse(int argc, char **argv, int ranks, mpi_bench_args *b);

#endif /* ATTN_CLI_ARGS_MPI_H */
