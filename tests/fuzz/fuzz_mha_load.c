/* fuzz_mha_load.c -- libFuzzer target: `attn mha -x X.npy [--key K.npy]
 * [--value V.npy] --weights W.safetensors --heads H [--causal] [-w FILE]
 * [--incremental [--kv FORMAT]]` up to its outputs (CLI_STOP_AFTER_LOAD: the files read
 * and checked, the layer run, nothing written). The input's first byte
 * chooses the heads and flags; then come the four files, separated by the
 * 4-byte marker "|~|\n". A missing key or value file leaves its flag out,
 * so that self-attention and cross-attention are both reached. */
#include "../../cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_marks.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const FLAGS[4] = {"-x", "--key", "--value", "--weights"};
    if (size < 1) return 0;
    /* byte 0: heads 1..4 (bits 0-1), --causal (2), -w (3), --incremental (4),
     * --kv none, q8, q4_1 or e4m3 (bits 5-6: a quantized cache) */
    static const char *const KV[4] = {NULL, "q8", "q4_1", "e4m3"};
    unsigned flags = data[0];
    char paths[4][32], heads[2] = {(char)('1' + (flags & 3)), 0};
    char *argv[20];
    int argc = 0, made = 0;
    argv[argc++] = "attn";
    argv[argc++] = "mha";
    const unsigned char *p = data + 1, *end = data + size;
    for (int part = 0; part < 4 && p <= end; part++) {
        const unsigned char *stop = find_mark(p, end);
        size_t n = (size_t)(stop - p);
        if (n > 0 || part == 0 || part == 3) { /* -x and --weights always: the command needs them */
            char *path = paths[part];
            snprintf(path, sizeof paths[0], "/tmp/attn_fuzz_" "XX" "XX" "XX"); /* a mkstemp template */
            int fd = mkstemp(path);
            if (fd < 0) break;
            if (write(fd, p, n) != (ssize_t)n) n = 0;
            close(fd);
            made |= 1 << part;
            argv[argc++] = (char *)FLAGS[part];
            argv[argc++] = path;
        }
        p = stop + 4;
    }
    if (made & 8) { /* the weights' file was made: the command line is whole */
        argv[argc++] = "--heads";
        argv[argc++] = heads;
        if (flags & 4) argv[argc++] = "--causal";
        if (flags & 8) argv[argc++] = "-w", argv[argc++] = "/nonexistent/attn_fuzz_w.npy";
        if (flags & 16) argv[argc++] = "--incremental";
        if (KV[flags >> 5 & 3]) argv[argc++] = "--kv", argv[argc++] = (char *)KV[flags >> 5 & 3];
        argv[argc] = NULL;
        (void)cli_main(argc, argv);
    }
    for (int i = 0; i < 4; i++)
        if (made & (1 << i)) unlink(paths[i]);
    return 0;
}
