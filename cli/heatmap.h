/* heatmap.h -- labelled matrices and bars for the terminal. */
#ifndef ATTN_CLI_HEATMAP_H
#define ATTN_CLI_HEATMAP_H

#include <stdbool.h>
#include <stdio.h>

#include "text.h"

/* Both palettes shade cells relative to the matrix's largest magnitude. */
typedef enum cli_palette {
    CLI_DIVERGING, /* signed values: blue below 0, white at 0, red above */
    CLI_SEQUENTIAL /* weights in [0, 1]: white to red */
} cli_palette;

/* How many colours the terminal shows: none, the 16 ANSI colours, the
 * xterm 256, or 24-bit ("truecolor"). */
typedef enum cli_colours {
    CLI_NO_COLOUR = 0,
    CLI_COLOURS_16 = 16,
    CLI_COLOURS_256 = 256,
    CLI_TRUECOLOUR = 1 << 24
} cli_colours;

typedef struct cli_matrix {
    const double *data; /* (rows, cols), C order */
    int rows, cols;
    const char *const *row_labels, *const *col_labels; /* may be NULL; UTF-8 */
    cli_palette palette;
    bool row_sums; /* add a "sum" column */
    bool causal;   /* cells above the diagonal (column > row) are masked: printed as "·" */
} cli_matrix;

/* Print m with its labels, each cell 7 wide (longer column labels cut with
 * "…"); with colours, each cell gets a background shade. Wider than
 * cli_width (text.h): in blocks of columns, one under another. */
void cli_print_matrix(FILE *f, const cli_matrix *m, cli_colours colours);

/* One line that says what the shades mean, for the palette. */
void cli_print_legend(FILE *f, cli_palette palette, cli_colours colours);

/* The longest label a matrix or a summary shows whole, in columns; a
 * longer one is cut with "…". */
enum { CLI_LABEL_COLUMNS = 12 };

/* s left-aligned in w columns: padded, or cut with "…" when wider. */
void cli_print_label_left(FILE *f, const char *s, int w);

/* A horizontal bar of fraction * width character cells. */
void cli_print_bar(FILE *f, double fraction, int width);

/* --color=auto|always|never, the convention of no-color.org: NO_COLOR (set
 * and not empty) turns colour off by default, an explicit --color=always
 * turns it on whatever NO_COLOR says. auto also needs a terminal and a TERM
 * other than dumb. The depth: 24-bit when COLORTERM is truecolor or 24bit,
 * 256 when TERM names 256 colours, else 16. */
cli_colours cli_colour_wanted(const char *mode, FILE *f);

#endif /* ATTN_CLI_HEATMAP_H */
