/* fuzz_args.c -- libFuzzer target: the attn command's argument parsing. The
 * input is split at NUL bytes into argv[1..]; the command parses them and
 * stops before reading any file or running anything (CLI_STOP_AFTER_PARSE).
 * Beyond "no crash, no leak, no undefined behaviour": the exit code is one
 * the command documents (0, EXIT_DATA or EXIT_USAGE), and the same command
 * line parsed again gives the same code, so that no state a parse leaves
 * behind (the subcommands keep some options in statics) changes the next. */
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
    char *argv[FUZZ_MAX_ARGS + 1], *buf, *again[FUZZ_MAX_ARGS + 1], *buf_again;
    int argc = fuzz_split_args(argv, &buf, fixed, 1, data, size);
    if (!argc) return 0;
    /* a second copy for the second parse, as a parse may change its argv */
    if (fuzz_split_args(again, &buf_again, fixed, 1, data, size) == argc) {
        int code = cli_main(argc, argv);
        if (code != 0 && code != EXIT_DATA && code != EXIT_USAGE) abort();
        if (cli_main(argc, again) != code) abort();
        free(buf_again);
    }
    free(buf);
    return 0;
}
