/* fuzz_mpi_args.c -- libFuzzer target: attn-mpi's argument parsing
 * (cli/mpi/args_mpi.c, which has no MPI in it). The input is split at NUL
 * bytes into argv[2..] after "attn-mpi sdpa". Every outcome is fine but a
 * crash, a leak or undefined behaviour; a parse that succeeds has q, k, v
 * and an output. */
#include "../../cli/mpi/args_mpi.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "attn-mpi";
    argv[argc++] = "sdpa";
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    mpi_args a;
    int code = mpi_args_parse(argc, argv, &a, false);
    if (code == 0 && (!a.q || !a.k || !a.v || !a.out || !(a.timeout_s > 0))) abort();
    free(buf);
    return 0;
}
