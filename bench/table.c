/* table.c -- attn bench's tables (table.h). */
#include "table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

void tab_cell(text_table *t, const char *fmt, ...) {
    if (t->n >= (1 + TAB_ROWS) * t->cols) fprintf(stderr, "attn: error: a bench table has too many rows\n"), exit(1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[t->n++], TAB_CELL, fmt, ap);
    va_end(ap);
}

/* A new table of `cols` columns with the labels `...` (cols strings). */
text_table *tab_new(int cols, ...) {
    text_table *t = calloc(1, sizeof *t);
    if (!t) fprintf(stderr, "attn: error: no memory for a table\n"), exit(1);
    t->cols = cols;
    va_list ap;
    va_start(ap, cols);
    for (int j = 0; j < cols; j++) tab_cell(t, "%s", va_arg(ap, const char *));
    va_end(ap);
    return t;
}

/* Prints t (when it has a row) and frees it. */
void tab_print(text_table *t) {
    int rows = t->n / t->cols - 1, width[TAB_COLS] = {0};
    const char *cells[(1 + TAB_ROWS) * TAB_COLS];
    for (int i = 0; i < (1 + rows) * t->cols; i++) {
        int w = cli_display_width(t->cell[i]);
        width[i % t->cols] = w > width[i % t->cols] ? w : width[i % t->cols];
        cells[i] = t->cell[i];
    }
    for (int i = 0; i < (1 + rows) * t->cols; i += t->cols) { /* the names, left-aligned */
        size_t len = strlen(t->cell[i]);
        int pad = width[0] - cli_display_width(t->cell[i]);
        if (pad > 0 && len + (size_t)pad < TAB_CELL) memset(t->cell[i] + len, ' ', (size_t)pad), t->cell[i][len + pad] = '\0';
    }
    if (rows > 0)
        cli_print_table(stdout, &(cli_table){.cols = t->cols, .rows = rows, .head_lines = 1, .width = width,
                                             .head = cells, .cells = cells + t->cols});
    free(t);
}

const char *json_text(const char *s, char *buf, size_t size) {
    size_t n = 0, left = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    while (left) {
        uint32_t cp;
        int k = cli_utf8_char(p, left, &cp);
        char esc[8];
        int len;
        /* A byte that starts no UTF-8 character (a Latin-1 directory name, a
         * name cut short mid-character) is U+FFFD: JSON text is UTF-8, and
         * such a report was no JSON to a reader that decodes it. */
        if (!k) len = snprintf(esc, sizeof esc, "\\ufffd");
        else if (*p == '"' || *p == '\\') len = snprintf(esc, sizeof esc, "\\%c", *p);
        else if (*p < 0x20) len = snprintf(esc, sizeof esc, "\\u%04x", *p);
        else memcpy(esc, p, (size_t)k), len = k;
        if (n + (size_t)len + 1 > size) break; /* whole escapes and characters only: never half of one */
        memcpy(buf + n, esc, (size_t)len), n += (size_t)len;
        k = k ? k : 1;
        p += k, left -= (size_t)k;
    }
    if (size) buf[n < size ? n : size - 1] = 0;
    return buf;
}
