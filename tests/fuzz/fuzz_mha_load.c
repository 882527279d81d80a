/* fuzz_mha_load.c -- libFuzzer target: `attn mha -x X.npy [--key K.npy]
 * [--value V.npy] --weights W.safetensors --heads H [--causal] [-w FILE]
 * [--incremental [--kv FORMAT]]` up to its outputs (CLI_STOP_AFTER_LOAD: the files read
 * and checked, the layer run, nothing written). The input's first byte
 * chooses the heads and flags; then come the four files, separated by the
 * 4-byte marker "|~|\n". A missing key or value file leaves its flag out,
 * so that self-attention and cross-attention are both reached. A weights'
 * part that starts with "dir\n" is a directory of NAME.npy files instead
 * (the checkpoint as .npy files), its entries separated by the same marker,
 * each the file's name up to a newline, then its bytes. A byte after a
 * fourth mark, past a weights file, and ending the input chooses the quantized cache's own
 * options: the fp8 keys' and values' scales (--kv-scale), e5m2 for e4m3,
 * q4c for q4_1 and q2c for q8 (keys per channel), KIVI's residual window
 * (--kv-residual) and --hadamard. Beyond "no
 * crash, no leak, no undefined behaviour", the exit code is one the command
 * documents (0, EXIT_DATA or EXIT_USAGE). */
#include "../../cli/cli.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_marks.h"

/* A weights' part that starts with this is a directory of .npy files */
static const char DIR_MARK[] = "dir\n";
enum { MAX_FILES = 16 };

/* The directory's files: entries separated by the mark, each a name (up
 * to its first newline; '/' read as '_') and then the file's bytes, written
 * as DIR/NAME.npy into a new directory *dir. False when none could be made. */
static bool write_dir(char dir[32], const unsigned char *p, const unsigned char *end) {
    snprintf(dir, 32, "/tmp/attn_fuzz_dir_" "XX" "XX" "XX"); /* a mkdtemp template */
    if (!mkdtemp(dir)) return dir[0] = 0, false;
    for (int i = 0; i < MAX_FILES && p < end; i++) {
        const unsigned char *stop = find_mark(p, end), *nl = memchr(p, '\n', (size_t)(stop - p));
        if (nl && nl > p && nl - p < 200) {
            char path[300];
            int len = snprintf(path, sizeof path, "%s/%.*s.npy", dir, (int)(nl - p), (const char *)p);
            for (int k = (int)strlen(dir) + 1; k < len; k++)
                if (path[k] == '/') path[k] = '_';
            FILE *f = fopen(path, "wb");
            if (f) {
                (void)fwrite(nl + 1, 1, (size_t)(stop - nl - 1), f);
                fclose(f);
            }
        }
        p = stop + 4;
    }
    return true;
}

/* The directory and its files (names with a NUL in them were cut there). */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const char *const FLAGS[4] = {"-x", "--key", "--value", "--weights"};
    if (size < 1) return 0;
    /* byte 0: heads 1..4 (bits 0-1), --causal (2), -w (3), --incremental (4),
     * --kv none, q8, q4_1 or e4m3 (bits 5-6: a quantized cache) */
    static const char *const KV[4] = {NULL, "q8", "q4_1", "e4m3"};
    unsigned flags = data[0];
    char paths[4][32], heads[2] = {(char)('1' + (flags & 3)), 0};
    char *argv[32];
    int argc = 0, made = 0;
    argv[argc++] = "attn";
    argv[argc++] = "mha";
    const unsigned char *p = data + 1, *end = data + size;
    char dir[32] = "";
    for (int part = 0; part < 4 && p <= end; part++) {
        if (part == 3 && (size_t)(end - p) >= 4 && memcmp(p, DIR_MARK, 4) == 0) {
            if (!write_dir(dir, p + 4, end)) break;
            made |= 8;
            argv[argc++] = (char *)FLAGS[3];
            argv[argc++] = dir;
            break;
        }
        const unsigned char *stop = find_mark(p, end);
        size_t n = (size_t)(stop - p);
        if (n > 0 || part == 0 || part == 3) { /* -x and --weights always: the command needs them */
            char *path = paths[part];
            if (!piece_file(path, p, n)) break;
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
        /* the byte after a fourth mark when it is the input's last (not
         * after a directory, which takes the rest; inputs from before it was
         * read, with more bytes there, still run as they did): --kv-scale (bits 0-1: none, one scale for both, two,
         * one so large that every value rounds to 0), e5m2 for e4m3 and q4c
         * for q4_1 (bit 2), q2c for q8 (bit 3), --kv-residual (bits 4-5:
         * none, 32, 64, 33, which is refused), --hadamard (bit 6) */
        static const char *const KV_SCALE[4] = {NULL, "16", "8,32", "1e30"}, *const RESIDUAL[4] = {NULL, "32", "64", "33"};
        unsigned extra = !dir[0] && p < end && end - p == 1 ? *p : 0;
        const char *kv = KV[flags >> 5 & 3];
        if (kv && extra & 4) kv = !strcmp(kv, "e4m3") ? "e5m2" : !strcmp(kv, "q4_1") ? "q4c" : kv;
        if (kv && extra & 8 && !strcmp(kv, "q8")) kv = "q2c";
        if (kv) argv[argc++] = "--kv", argv[argc++] = (char *)kv;
        if (KV_SCALE[extra & 3]) argv[argc++] = "--kv-scale", argv[argc++] = (char *)KV_SCALE[extra & 3];
        if (RESIDUAL[extra >> 4 & 3]) argv[argc++] = "--kv-residual", argv[argc++] = (char *)RESIDUAL[extra >> 4 & 3];
        if (extra & 64) argv[argc++] = "--hadamard";
        argv[argc] = NULL;
        int code = cli_main(argc, argv);
        if (code != 0 && code != EXIT_DATA && code != EXIT_USAGE) abort(); /* an exit code the command documents */
    }
    for (int i = 0; i < 4; i++)
        if (made & (1 << i) && !(i == 3 && dir[0])) unlink(paths[i]);
    if (dir[0]) remove_dir(dir);
    return 0;
}
