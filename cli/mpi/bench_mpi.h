/* bench_mpi.h -- `attn-mpi bench`: ring attention against one node. */
#ifndef ATTN_CLI_BENCH_MPI_H
#define ATTN_CLI_BENCH_MPI_H

#include "attn_mpi.h"

/* argv[1] is "bench"; returns the exit code (every rank calls it). */
int mpi_bench(int argc, char **argv, int rank, int size);

#endif /* ATTN_CLI_BENCH_MPI_H */
