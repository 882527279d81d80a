/* check.h -- the C tests' reporting: "ok NAME" or "FAIL NAME: why" per check,
 * and a count of failures for the exit status. */
#ifndef ATTN_TESTS_CHECK_H
#define ATTN_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int n_failed;

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
