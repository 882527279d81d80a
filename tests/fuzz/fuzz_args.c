/* fuzz_args.c -- libFuzzer target: the attn command's argument parsing. The
 * input is split at NUL bytes into argv[1..]; the command parses them and
 * stops before reading any file or running anything (CLI_STOP_AFTER_PARSE).
 * Every outcome is fine but a crash, a leak or undefined behaviour. */
#include "../../cli/cli.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_ARGS = 64 };

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cli_stop = CLI_STOP_AFTER_PARSE;
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "attn";
    for (size_t i = 0; i <= size && argc < MAX_ARGS; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    (void)cli_main(argc, argv);
    free(buf);
    return 0;
}
