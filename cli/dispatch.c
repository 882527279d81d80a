/* dispatch.c -- the attn command: dispatch to a subcommand. */
#include "cli.h"

#include <string.h>

static const char USAGE[] =
    "usage: attn <command> [options]\n"
    "\n"
    "Scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V, in C.\n"
    "\n"
    "commands:\n"
    "  explain  one attention head step by step, on the toy model or your data\n"
    "  scaling  why divide by sqrt(d_k): the experiment, as a table or a figure\n"
    "  train    one head learns, from sentences, to find a verb's subject\n"
    "  sdpa     attention on .npy files (PyTorch semantics)\n"
    "  mha      one multi-head attention layer, weights from safetensors or .npy\n"
    "  demo     the first worked examples: six words, averaging to attention\n"
    "  bench    speed on this machine, against its peak and baselines (make bench)\n"
    "\n"
    "options:\n"
    "  -h, --help       show this help (attn <command> --help for a command's)\n"
    "  --version        print the version\n";

cli_stage cli_stop = CLI_RUN;

int cli_main(int argc, char **argv) {
    if (argc < 2) {
        cli_print_usage(stderr, USAGE);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli_print_usage(stdout, USAGE);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("attn %s (libattn %s)\n", ATTN_VERSION_STRING, attn_version());
        return 0;
    }
    if (strcmp(cmd, "sdpa") == 0) return cmd_sdpa(argc - 1, argv + 1);
    if (strcmp(cmd, "mha") == 0) return cmd_mha(argc - 1, argv + 1);
    if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "explain") == 0) return cmd_explain(argc - 1, argv + 1);
    if (strcmp(cmd, "scaling") == 0) return cmd_scaling(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) /* another program parses its arguments */
        return cli_stop == CLI_RUN ? cmd_bench(argc - 1, argv + 1, argv[0]) : 0;
    return cli_error(EXIT_USAGE, "unknown command '%s' (see attn --help)", cmd);
}
