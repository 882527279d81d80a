/* heatmap.h -- labelled matrices and bars for the terminal. */
#ifndef ATTN_CLI_HEATMAP_H
#define ATTN_CLI_HEATMAP_H

#include <stdbool.h>
#include <stdio.h>

/* Both palettes shade cells relative to the matrix's largest magnitude. */
typedef enum cli_palette {
    CLI_DIVERGING, /* signed values: blue below 0, white at 0, red above */
    CLI_SEQUENTIAL /* weights in [0, 1]: white to red */
} cli_palette;

typedef struct cli_matrix {
    const double *data; /* (rows, cols), C order */
    int rows, cols;
    const char *const *row_labels, *const *col_labels; /* may be NULL */
    cli_palette palette;
    bool row_sums; /* add a "sum" column */
} cli_matrix;

/* Print m with its labels; with colour, each cell gets a background shade. */
void cli_print_matrix(FILE *f, const cli_matrix *m, bool colour);

/* A horizontal bar of fraction * width character cells. */
void cli_print_bar(FILE *f, double fraction, int width);

/* --color=auto|always|never: auto means a terminal, no NO_COLOR, no TERM=dumb.
 * Colours are 24-bit ANSI backgrounds. */
bool cli_colour_wanted(const char *mode, FILE *f);

#endif /* ATTN_CLI_HEATMAP_H */
