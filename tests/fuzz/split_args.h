/* split_args.h -- the argument fuzzers' input as argv: the bytes split at
 * NUL into arguments after the fixed ones (argv[0], and a subcommand). */
#ifndef ATTN_FUZZ_SPLIT_ARGS_H
#define ATTN_FUZZ_SPLIT_ARGS_H

#include <stdlib.h>
#include <string.h>

enum { FUZZ_MAX_ARGS = 64 };

/* argv (FUZZ_MAX_ARGS + 1 entries) = fixed[0..n_fixed) then the pieces of
 * data; returns argc, and in *buf the copy argv points into (free it). */
static int fuzz_split_args(char **argv, char **buf, const char *const *fixed, int n_fixed, const unsigned char *data,
                           size_t size) {
    int argc = 0;
    *buf = malloc(size + 1);
    if (!*buf) return 0;
    memcpy(*buf, data, size);
    (*buf)[size] = 0;
    for (int i = 0; i < n_fixed; i++) argv[argc++] = (char *)fixed[i];
    for (size_t i = 0; i <= size && argc < FUZZ_MAX_ARGS; i += strlen(*buf + i) + 1) argv[argc++] = *buf + i;
    argv[argc] = NULL;
    return argc;
}

#endif /* ATTN_FUZZ_SPLIT_ARGS_H */
