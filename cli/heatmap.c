/* heatmap.c -- labelled matrices for the terminal, with an optional colour
 * heatmap (24-bit colour ANSI backgrounds), and bars for attention weights. */
#include "heatmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A 24-bit background for t in [-1, 1]: white at 0, shading to red for
 * positive and to blue for negative values (the sequential palette only
 * ever sees t >= 0). */
static void set_background(FILE *f, double t) {
    static const int RED[3] = {214, 39, 40}, BLUE[3] = {31, 119, 180};
    const int *end = t >= 0 ? RED : BLUE;
    double a = fabs(t) > 1 ? 1 : fabs(t);
    int rgb[3];
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(255 + (end[c] - 255) * a);
    /* Black text on light cells, white on dark ones. */
    int text = a > 0.6 ? 231 : 16;
    fprintf(f, "\x1b[48;2;%d;%d;%d;38;5;%dm", rgb[0], rgb[1], rgb[2], text);
}

static int label_width(const char *const *labels, int n, int min) {
    int w = min;
    for (int i = 0; labels && i < n; i++)
        if ((int)strlen(labels[i]) > w) w = (int)strlen(labels[i]);
    return w > 12 ? 12 : w;
}

void cli_print_matrix(FILE *f, const cli_matrix *m, bool colour) {
    int rw = label_width(m->row_labels, m->rows, 4);
    int cw = label_width(m->col_labels, m->cols, 7);
    /* Colours are relative to the largest finite magnitude in the matrix. */
    double range = 0.0;
    for (int i = 0; i < m->rows * m->cols; i++)
        if (isfinite(m->data[i]) && fabs(m->data[i]) > range) range = fabs(m->data[i]);
    fprintf(f, "   %*s", rw, "");
    for (int j = 0; j < m->cols; j++)
        fprintf(f, " %*.*s", cw, cw, m->col_labels ? m->col_labels[j] : "");
    if (m->row_sums) fprintf(f, " %*s", cw, "sum");
    fputc('\n', f);
    for (int i = 0; i < m->rows; i++) {
        fprintf(f, "   %*.*s", rw, rw, m->row_labels ? m->row_labels[i] : "");
        double sum = 0;
        for (int j = 0; j < m->cols; j++) {
            double x = m->data[i * m->cols + j];
            sum += x;
            fputc(' ', f);
            if (colour) {
                if (isinf(x)) fputs("\x1b[48;5;250;38;5;16m", f);
                else set_background(f, range > 0 ? x / range : 0);
            }
            if (isinf(x)) fprintf(f, "%*s", cw, x < 0 ? "-inf" : "inf");
            else fprintf(f, "%*.3f", cw, x == 0 ? 0.0 : x);
            if (colour) fputs("\x1b[0m", f);
        }
        if (m->row_sums) fprintf(f, " %*.3f", cw, sum);
        fputc('\n', f);
    }
}

void cli_print_bar(FILE *f, double fraction, int width) {
    /* Eighths of a block for the fractional end. */
    static const char *const PART[8] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    int eighths = (int)lround(fraction * width * 8);
    if (eighths < 0) eighths = 0;
    for (int i = 0; i < eighths / 8; i++) fputs("█", f);
    fputs(PART[eighths % 8], f);
}

bool cli_colour_wanted(const char *mode, FILE *f) {
    if (strcmp(mode, "always") == 0) return true;
    if (strcmp(mode, "never") == 0) return false;
    const char *no = getenv("NO_COLOR");
    if (no && *no) return false;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0) return false;
    return isatty(fileno(f));
}
