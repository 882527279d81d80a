/* fuzz_explain_load.c -- libFuzzer target: `attn explain --embeddings X.npy
 * --wq WQ.npy --wk WK.npy --wv WV.npy --tokens ...`, up to loading and
 * checking the files (CLI_STOP_AFTER_LOAD). The input holds the token labels
 * (or, with no --embeddings file, the sentence: then the toy's tokenizer
 * and embedding run as `attn explain WORDS...` runs them) and the four files, separated by the 4-byte marker "|~|\n"; missing parts
 * are left out of the command line, so that every combination is reached.
 * Beyond "no crash, no leak, no undefined behaviour", the exit code is one
 * the command documents (0, EXIT_DATA or EXIT_USAGE). */
#include "../../cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_marks.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const FLAGS[5] = {"--tokens", "--embeddings", "--wq", "--wk", "--wv"};
    char paths[4][32], tokens[256] = "";
    char *argv[16];
    int argc = 0;
    argv[argc++] = "attn";
    argv[argc++] = "explain";
    const unsigned char *p = data, *end = data + size;
    int made = 0;
    for (int part = 0; part < 5 && p <= end; part++) {
        const unsigned char *stop = find_mark(p, end);
        size_t n = (size_t)(stop - p);
        if (part == 0) {
            n = n < sizeof tokens - 1 ? n : sizeof tokens - 1;
            memcpy(tokens, p, n);
            tokens[n] = 0;
        } else if (n > 0 || stop < end) {
            char *path = paths[part - 1];
            if (!piece_file(path, p, n)) break;
            made |= 1 << (part - 1);
            argv[argc++] = (char *)FLAGS[part];
            argv[argc++] = path;
        }
        p = stop + 4;
    }
    /* The first part labels the rows of --embeddings; without that file it
     * is the sentence, read by the toy's tokenizer as the command reads one
     * (but one that starts with '-', an option: --kernel or --cost would
     * print their whole walk on each input). */
    if (tokens[0] && (made & 1)) argv[argc++] = (char *)FLAGS[0], argv[argc++] = tokens;
    else if (tokens[0] && tokens[0] != '-') argv[argc++] = tokens;
    argv[argc] = NULL;
    int code = cli_main(argc, argv);
    if (code != 0 && code != EXIT_DATA && code != EXIT_USAGE) abort(); /* an exit code the command documents */
    for (int i = 0; i < 4; i++)
        if (made & (1 << i)) unlink(paths[i]);
    return 0;
}
