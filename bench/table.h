/* table.h -- attn bench's tables, built a cell at a time and printed by
 * cli_print_table (cli/text.h) in blocks of columns that fit the terminal,
 * as every attn command's. Column 0 names the row and is left-aligned; the
 * others are right-aligned. */
#ifndef ATTN_BENCH_TABLE_H
#define ATTN_BENCH_TABLE_H

#include <stddef.h>

enum { TAB_COLS = 9, TAB_ROWS = 64, TAB_CELL = 96 };
typedef struct text_table {
    int cols, n;                                    /* n: cells given so far, the labels' included */
    char cell[(1 + TAB_ROWS) * TAB_COLS][TAB_CELL]; /* (1 + rows, cols) labels, then the rows */
} text_table;

/* A new table of `cols` columns with the labels `...` (cols strings). */
text_table *tab_new(int cols, ...);
/* The next cell, row by row. */
void tab_cell(text_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints t (when it has a row) and frees it. */
void tab_print(text_table *t);

/* s as the inside of a JSON string, in buf (size bytes, cut short to fit):
 * '"' and '\' escaped, control characters as \u00XX, each byte that
 * starts no UTF-8 character as \ufffd; cut between characters. Returns
 * buf. The CPU's name, a directory and a kernel's name went into the JSON
 * as they were, and a quote in any of them broke the report. */
const char *json_text(const char *s, char *buf, size_t size);

#endif /* ATTN_BENCH_TABLE_H */
