/* load_marks.h -- the loading fuzzers' input as pieces: the bytes split at
 * a four-byte mark, each piece one file the command loads, and the command
 * stopped after loading (cli_stop), so that nothing is written. */
#ifndef ATTN_FUZZ_LOAD_MARKS_H
#define ATTN_FUZZ_LOAD_MARKS_H

#include <string.h>

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

#endif /* ATTN_FUZZ_LOAD_MARKS_H */
