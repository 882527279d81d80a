/* fuzz_args.c -- libFuzzer target: the attn command's argument parsing. The
 * input is split at NUL bytes into argv[1..]; the command parses them and
 * stops before reading any file or running anything (CLI_STOP_AFTER_PARSE).
 * Every outcome is fine but a crash, a leak or undefined behaviour. */
#include "../../cli/cli.h"
#include "split_args.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cli_stop = CLI_STOP_AFTER_PARSE;
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const fixed[] = {"attn"};
    char *argv[FUZZ_MAX_ARGS + 1], *buf;
    int argc = fuzz_split_args(argv, &buf, fixed, 1, data, size);
    if (argc) (void)cli_main(argc, argv);
    free(buf);
    return 0;
}
