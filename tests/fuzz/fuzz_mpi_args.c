/* fuzz_mpi_args.c -- libFuzzer target: attn-mpi's argument parsing
 * (cli/mpi/args_mpi.c, which has no MPI in it). The input is split at NUL
 * bytes into argv[2..] after "attn-mpi sdpa". Every outcome is fine but a
 * crash, a leak or undefined behaviour; a parse that succeeds has q, k, v
 * and an output. */
#include "../../cli/mpi/args_mpi.h"
#include "split_args.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const fixed[] = {"attn-mpi", "sdpa"};
    char *argv[FUZZ_MAX_ARGS + 1], *buf;
    int argc = fuzz_split_args(argv, &buf, fixed, 2, data, size);
    mpi_args a;
    int code = argc ? mpi_args_parse(argc, argv, &a, false) : -1;
    if (code == 0 && (!a.q || !a.k || !a.v || !a.out || !(a.timeout_s > 0))) abort();
    free(buf);
    return 0;
}
