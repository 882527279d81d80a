/* check.h -- the C tests' reporting: "ok NAME" or "FAIL NAME: why" per check,
 * and a count of failures for the exit status. */
#ifndef ATTN_TESTS_CHECK_H
#define ATTN_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"

static int n_failed, n_skipped;

/* "skip NAME: why": a check that cannot run here, counted apart from passes. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void skip(const char *name, const char *fmt, ...) {
    va_list ap;
    printf("skip %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    n_skipped++;
}

/* Which kernel a call ran, from its verbose line: wrap the call in
 * verbose_begin() and verbose_end(kernel, size), which stores the kernel=
 * word of the last line printed ("" if none) and the fallback= word in
 * fallback (may be NULL). stderr goes to a temporary file in between. */
static FILE *verbose_file;
static int verbose_saved_fd = -1;
static char verbose_last_line[1024]; /* the whole last verbose line */
static char verbose_gemm_line[1024]; /* the last multi-head layer's line naming its products' kernels */

static inline void verbose_begin(void) {
    fflush(stderr);
    verbose_file = tmpfile();
    verbose_saved_fd = dup(2);
    if (verbose_file && verbose_saved_fd >= 0) dup2(fileno(verbose_file), 2);
    attn_set_verbose(1);
}

static inline void word_after(char *dst, size_t size, const char *line, const char *key) {
    const char *p = strstr(line, key);
    size_t n = p ? strcspn(p + strlen(key), " \n") : 0;
    if (n >= size) n = size - 1;
    if (p) memcpy(dst, p + strlen(key), n);
    dst[n] = 0;
}

static inline void verbose_end(char *kernel, size_t size, char *fallback, size_t fsize) {
    attn_set_verbose(0);
    fflush(stderr);
    if (verbose_saved_fd >= 0) dup2(verbose_saved_fd, 2), close(verbose_saved_fd);
    verbose_saved_fd = -1;
    kernel[0] = 0;
    if (fallback) fallback[0] = 0;
    if (!verbose_file) return;
    rewind(verbose_file);
    char line[1024];
    while (fgets(line, sizeof line, verbose_file))
        if (strncmp(line, "attn: ", 6) == 0) {
            memcpy(verbose_last_line, line, sizeof line);
            if (strstr(line, "_projections ")) memcpy(verbose_gemm_line, line, sizeof line);
            word_after(kernel, size, line, " kernel=");
            if (fallback) word_after(fallback, fsize, line, " fallback=");
        }
    fclose(verbose_file);
    verbose_file = NULL;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void check(int cond, const char *name, const char *fmt, ...) {
    if (cond) {
        printf("ok %s\n", name);
        return;
    }
    va_list ap;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    n_failed++;
}

#endif /* ATTN_TESTS_CHECK_H */
