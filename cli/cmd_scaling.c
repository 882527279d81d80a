#include "cli.h"
int cmd_scaling(int argc, char **argv) { (void)argc; (void)argv; return 0; }
