/* main.c -- the attn command's entry point (cli_main in dispatch.c does the
 * work, so that the fuzzers can call it too). */
#include "cli.h"

#include <signal.h>

int main(int argc, char **argv) {
    /* Past a file-size limit (ulimit -f) the kernel sends SIGXFSZ, whose
     * default kills the command mid-write and leaves its temporary file
     * behind; ignored, the write fails with EFBIG, the error is reported
     * and the temporary removed. */
    signal(SIGXFSZ, SIG_IGN);
    cli_remove_temporaries_on_signal();
    return cli_close_stdout(cli_main(argc, argv));
}
