/* fuzz_sdpa_load.c -- libFuzzer target: `attn sdpa -q Q.npy -k K.npy -v V.npy
 * [-m MASK.npy] [--cu-seqlens-q CU_Q.npy --cu-seqlens-k CU_K.npy]
 * [--sinks SINKS.npy] ...` up to its outputs (CLI_STOP_AFTER_LOAD: the files
 * read and checked against one another, attention run, nothing written or
 * printed). The input's first byte chooses the options; then come the
 * files, separated by the 4-byte marker "|~|\n". A missing mask, offsets or
 * sinks file leaves its flag out (q, k and v are always given). A byte
 * after a seventh mark, past the sinks file, and ending the input chooses the quantized
 * stores' own options: the fp8 keys' and values' per-head scales
 * (--kv-scale, as vLLM's k_scale and v_scale), e5m2 for e4m3 and q2c for
 * q4c, KIVI's residual window (--kv-residual) and --hadamard. Beyond "no
 * crash, no leak, no undefined behaviour", the exit code is one the command
 * documents (0, EXIT_DATA or EXIT_USAGE). */
#include "../../cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_marks.h"

enum { N_FILES = 7 };

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const FLAGS[N_FILES] = {"-q", "-k", "-v", "-m", "--cu-seqlens-q", "--cu-seqlens-k", "--sinks"};
    /* byte 0: the mask (bits 0-1), how k and v are kept or computed (bits
     * 2-4), a score option (bits 5-6), --scale 0.5 (bit 7) */
    static const char *const MASK[4][2] = {{NULL, NULL}, {"--causal", NULL}, {"--causal=bottom-right", NULL},
                                           {"--alibi", NULL}};
    static const char *const KV[8][2] = {{NULL, NULL},     {"--kv-bf16", NULL}, {"--kv", "q8"},   {"--kv", "q4_1"},
                                         {"--kv", "e4m3"}, {"--kv", "q4c"},     {"--compute=bf16", NULL},
                                         {"--softcap", "30"}};
    static const char *const SCORE[4][2] = {{NULL, NULL}, {"--window", "2"}, {"--rope", "halves"}, {"--dropout", "0.5"}};
    if (size < 1) return 0;
    unsigned flags = data[0];
    char paths[N_FILES][32];
    char *argv[32];
    int argc = 0, made = 0;
    argv[argc++] = "attn";
    argv[argc++] = "sdpa";
    const unsigned char *p = data + 1, *end = data + size;
    for (int part = 0; part < N_FILES && p <= end; part++) {
        const unsigned char *stop = find_mark(p, end);
        size_t n = (size_t)(stop - p);
        if (n > 0 || part < 3) { /* q, k and v always: the command needs them */
            char *path = paths[part];
            if (!piece_file(path, p, n)) break;
            made |= 1 << part;
            argv[argc++] = (char *)FLAGS[part];
            argv[argc++] = path;
        }
        p = stop + 4;
    }
    /* the byte after the seventh mark when it is the input's last (inputs
     * from before it was read, with more bytes there, still run as they
     * did): --kv-scale (bits 0-1: none, one scale
     * for both, two, one so large that every value rounds to 0), e5m2 for
     * e4m3 and q2c for q4c (bit 2), --kv-residual (bits 3-4: none, 32, 64,
     * 33, which is refused), --hadamard (bit 5) */
    static const char *const KV_SCALE[4] = {NULL, "16", "8,32", "1e30"}, *const RESIDUAL[4] = {NULL, "32", "64", "33"};
    unsigned extra = p < end && end - p == 1 ? *p : 0;
    if ((made & 7) == 7) {
        const char *const *options[3] = {MASK[flags & 3], KV[flags >> 2 & 7], SCORE[flags >> 5 & 3]};
        for (int o = 0; o < 3; o++)
            for (int j = 0; j < 2 && options[o][j]; j++) {
                const char *arg = options[o][j];
                if (extra & 4 && o == 1 && j == 1) arg = !strcmp(arg, "e4m3") ? "e5m2" : !strcmp(arg, "q4c") ? "q2c" : arg;
                argv[argc++] = (char *)arg;
            }
        if (KV_SCALE[extra & 3]) argv[argc++] = "--kv-scale", argv[argc++] = (char *)KV_SCALE[extra & 3];
        if (RESIDUAL[extra >> 3 & 3]) argv[argc++] = "--kv-residual", argv[argc++] = (char *)RESIDUAL[extra >> 3 & 3];
        if (extra & 32) argv[argc++] = "--hadamard";
        if (flags & 128) argv[argc++] = "--scale", argv[argc++] = "0.5";
        if ((flags >> 5 & 3) == 3) argv[argc++] = "--seed", argv[argc++] = "1";
        argv[argc] = NULL;
        int code = cli_main(argc, argv);
        if (code != 0 && code != EXIT_DATA && code != EXIT_USAGE) abort(); /* an exit code the command documents */
    }
    for (int i = 0; i < N_FILES; i++)
        if (made & (1 << i)) unlink(paths[i]);
    return 0;
}
