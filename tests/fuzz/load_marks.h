/* load_marks.h -- the loading fuzzers' input as pieces: the bytes split at
 * a four-byte mark, each piece one file the command loads, and the command
 * stopped after loading (cli_stop), so that nothing is written. */
#ifndef ATTN_FUZZ_LOAD_MARKS_H
#define ATTN_FUZZ_LOAD_MARKS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MARK[] = "|~|\n";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cli_stop = CLI_STOP_AFTER_LOAD;
    return 0;
}

/* The next mark at or after p, or end. */
static const unsigned char *find_mark(const unsigned char *p, const unsigned char *end) {
    for (; p + 4 <= end; p++)
        if (memcmp(p, MARK, 4) == 0) return p;
    return end;
}

/* A new file of /tmp holding the n bytes at p, its name into path; false
 * when none could be made (a short write leaves a shorter file: still
 * input). */
static bool piece_file(char path[32], const unsigned char *p, size_t n) {
    snprintf(path, 32, "/tmp/attn_fuzz_" "XX" "XX" "XX"); /* a mkstemp template */
    int fd = mkstemp(path);
    if (fd < 0) return false;
    ssize_t w = write(fd, p, n);
    (void)w;
    close(fd);
    return true;
}

#endif /* ATTN_FUZZ_LOAD_MARKS_H */
