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
    "  -h, --help       show this help (attn help <command> for a command's)\n"
    "  --version        print the version\n"
    "\n"
    "-h or --help anywhere among a command's arguments (but as an option's value)\n"
    "prints that command's help and exits with status 0; the other arguments are\n"
    "then not read. A bad value is named in quotes, as the shell reads it back\n"
    "(--steps '' for an empty one).\n";

cli_stage cli_stop = CLI_RUN;

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} COMMANDS[] = {{"sdpa", cmd_sdpa},       {"mha", cmd_mha},         {"demo", cmd_demo}, {"explain", cmd_explain},
                {"scaling", cmd_scaling}, {"train", cmd_train}};

int cli_main(int argc, char **argv) {
    if (argc < 2) {
        cli_print_usage(stderr, USAGE);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    bool help = strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0;
    if (help && argc == 2) {
        cli_print_usage(stdout, USAGE);
        return 0;
    }
    if (help && argc > 3) return cli_error(EXIT_USAGE, "%s takes one command to describe (see attn --help)", cmd);
    if (strcmp(cmd, "--version") == 0) {
        if (argc > 2) return cli_error(EXIT_USAGE, "--version takes no arguments");
        printf("attn %s (libattn %s)\n", ATTN_VERSION_STRING, attn_version());
        return 0;
    }
    /* attn help COMMAND is attn COMMAND --help, as git and cargo read it */
    const char *name = help ? argv[2] : cmd;
    char help_flag[] = "--help", *as_help[] = {argv[help ? 2 : 1], help_flag, NULL};
    int n = help ? 2 : argc - 1;
    char **args = help ? as_help : argv + 1;
    if (strcmp(name, "bench") == 0) /* another program, beside this one, parses its arguments */
        return cli_stop == CLI_RUN ? cmd_bench(n, args, argv[0]) : 0;
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strcmp(name, COMMANDS[i].name) == 0) return COMMANDS[i].run(n, args);
    return cli_error(EXIT_USAGE, "unknown command '%s' (see attn --help)", name);
}
