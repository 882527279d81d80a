/* cmd_bench.c -- `attn bench`: runs attn-bench, installed beside attn. The
 * benchmark is a separate program because it uses OpenBLAS for its
 * baseline, which neither the library nor this command depends on.
 * `attn bench --mpi`, under mpirun, runs `attn-mpi bench` instead (the ring
 * across the ranks; attn itself has no MPI in it). */
#include "cli.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* --mpi, which attn bench takes out: the other options are checked by the
 * program that runs (attn-bench, attn-mpi bench). */
static const cli_setting BENCH_SETTINGS[] = {{"--mpi", NULL, false, 0}, {NULL, NULL, false, 0}};

int cmd_bench(int argc, char **argv, const char *self) {
    char path[4096], exe[4096];
    int code = cli_check_repeats(argc, argv, BENCH_SETTINGS);
    if (code) return code;
    /* Beside the attn that runs, where Linux names it: through a symbolic
     * link to attn (~/bin/attn, say) the program was looked for beside the
     * link, or on PATH, and not found. */
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0 && len < (ssize_t)sizeof exe - 1) exe[len] = '\0', self = exe;
    const char *slash = strrchr(self, '/');
    int dir = slash ? (int)(slash - self) + 1 : 0, mpi = 0;
    for (int i = 1; i < argc; i++) mpi |= strcmp(argv[i], "--mpi") == 0;
    const char *program = mpi ? "attn-mpi" : "attn-bench";
    if (snprintf(path, sizeof path, "%.*s%s", dir, self, program) >= (int)sizeof path)
        return cli_error(EXIT_USAGE, "the path of attn is too long");
    if (!slash) strcpy(path, program); /* found on PATH, like attn itself */
    /* The program, "bench" for attn-mpi, the arguments but --mpi, NULL: an
     * argument past what args holds is refused, never dropped (the 256th
     * and after were, and the run went on without them). */
    char *args[256];
    int n = 0, max = (int)(sizeof args / sizeof *args) - 1;
    args[n++] = path;
    if (mpi) args[n++] = (char *)"bench";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mpi") == 0) continue;
        if (n == max) return cli_error(EXIT_USAGE, "attn bench takes at most %d arguments", max - 1);
        args[n++] = argv[i];
    }
    args[n] = NULL;
    fflush(stdout);
    if (slash) execv(path, args);
    else execvp(path, args);
    return cli_error(EXIT_USAGE, "cannot run %s: %s (build it with `make %s`)", path, strerror(errno),
                     mpi ? "all, with Open MPI installed" : "bench");
}
