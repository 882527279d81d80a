/* main.c -- the attn command's entry point (cli_main in dispatch.c does the
 * work, so that the fuzzers can call it too). */
#include "cli.h"

int main(int argc, char **argv) { return cli_main(argc, argv); }
