/* heatmap.c -- labelled matrices for the terminal, with an optional colour
 * heatmap (ANSI backgrounds in 24-bit, 256 or 16 colours), and bars for
 * attention weights. */
#include "heatmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* s cut to at most `width` columns and right-aligned in them. */
static void print_cell_text(FILE *f, const char *s, int width) {
    int w = 0;
    size_t bytes = 0;
    while (s && s[bytes]) {
        int len, cw = cli_char_width(s + bytes, &len);
        if (w + cw > width) break;
        w += cw, bytes += (size_t)len;
    }
    fprintf(f, "%*s%.*s", width - w, "", (int)bytes, s ? s : "");
}

/* x right-aligned in w columns with three decimals; where that takes more
 * than 11 columns (|x| of 10^7 and up, as --embeddings may give), in
 * exponent form ("1.00e+300"), not hundreds of digits that break the table. */
static void print_number(FILE *f, double x, int w) {
    char buf[16];
    if (snprintf(buf, sizeof buf, "%.3f", x) > 11) snprintf(buf, sizeof buf, "%.2e", x);
    fprintf(f, "%*s", w, buf);
}

/* A background for t in [-1, 1]: white at 0, shading to red for positive
 * and to blue for negative values (the sequential palette only ever sees
 * t >= 0), in as many colours as the terminal has. */
static void set_background(FILE *f, double t, cli_colours colours) {
    static const int RED[3] = {214, 39, 40}, BLUE[3] = {31, 119, 180};
    const int *end = t >= 0 ? RED : BLUE;
    double a = fabs(t) > 1 ? 1 : fabs(t);
    int rgb[3];
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(255 + (end[c] - 255) * a);
    int text = a > 0.6 ? 231 : 16; /* black text on light cells, white on dark ones */
    if (colours == CLI_TRUECOLOUR) {
        fprintf(f, "\x1b[48;2;%d;%d;%d;38;5;%dm", rgb[0], rgb[1], rgb[2], text);
    } else if (colours == CLI_COLOURS_256) { /* the 6 × 6 × 6 cube */
        int cube = 16;
        for (int c = 0; c < 3; c++) cube += (int)lround(rgb[c] / 51.0) * (c == 0 ? 36 : c == 1 ? 6 : 1);
        fprintf(f, "\x1b[48;5;%d;38;5;%dm", cube, text);
    } else { /* 16 colours: white, then the bright and the plain red or blue */
        int bg = a < 0.15 ? 107 : a < 0.5 ? (t >= 0 ? 101 : 104) : (t >= 0 ? 41 : 44);
        fprintf(f, "\x1b[%d;%dm", bg, a < 0.5 ? 30 : 97);
    }
}

static int label_width(const char *const *labels, int n, int min, int max) {
    int w = min;
    for (int i = 0; labels && i < n; i++)
        if (cli_display_width(labels[i]) > w) w = cli_display_width(labels[i]);
    return w > max ? max : w;
}

/* A label in w columns: whole, or cut with "…" (so "preposition" is
 * "prepos…" in 7): a label cut without it reads as another word. Right-
 * aligned, or left-aligned and padded to w when left. */
static void print_label(FILE *f, const char *s, int w, bool left) {
    if (cli_display_width(s) <= w) {
        if (left) fprintf(f, "%s%*s", s, w - cli_display_width(s), "");
        else print_cell_text(f, s, w);
        return;
    }
    size_t bytes = 0;
    int used = 0, len; /* w - 1 columns, then the ellipsis */
    for (int cw; s[bytes] && used + (cw = cli_char_width(s + bytes, &len)) <= w - 1; used += cw) bytes += (size_t)len;
    if (left) fprintf(f, "%.*s…%*s", (int)bytes, s, w - 1 - used, "");
    else fprintf(f, "%*s%.*s…", w - 1 - used, "", (int)bytes, s);
}

static void print_header(FILE *f, const char *s, int w) { print_label(f, s, w, false); }

void cli_print_label_left(FILE *f, const char *s, int w) { print_label(f, s, w, true); }

/* Columns c0 .. c1 - 1 of m: the header, then each row (and the row sums
 * after the last block). */
static void print_block(FILE *f, const cli_matrix *m, cli_colours colours, int rw, int cw, double range, int c0,
                        int c1, bool sums) {
    fprintf(f, "   %*s", rw, "");
    for (int j = c0; j < c1; j++) {
        fputc(' ', f);
        print_header(f, m->col_labels ? m->col_labels[j] : "", cw);
    }
    if (sums) fprintf(f, " %*s", cw, "sum");
    fputc('\n', f);
    for (int i = 0; i < m->rows; i++) {
        fputs("   ", f);
        print_header(f, m->row_labels ? m->row_labels[i] : "", rw); /* a long label cut with "…", as a column's */
        for (int j = c0; j < c1; j++) {
            double x = m->data[i * m->cols + j];
            bool masked = m->causal && j > i;
            fputc(' ', f);
            if (colours && (masked || isinf(x))) fputs(colours == CLI_COLOURS_16 ? "\x1b[47;30m" : "\x1b[48;5;250;38;5;16m", f);
            else if (colours) set_background(f, range > 0 ? x / range : 0, colours);
            if (isinf(x)) fprintf(f, "%*s", cw, x < 0 ? "-inf" : "inf");
            else if (masked) print_cell_text(f, "·", cw);
            else print_number(f, x == 0 ? 0.0 : x, cw);
            if (colours) fputs("\x1b[0m", f);
        }
        double sum = 0;
        for (int j = 0; sums && j < m->cols; j++) sum += m->data[i * m->cols + j];
        if (sums) fputc(' ', f), print_number(f, sum, cw);
        fputc('\n', f);
    }
}

void cli_print_matrix(FILE *f, const cli_matrix *m, cli_colours colours) {
    /* Cells are 7 wide (-10.000 fits); longer column labels are cut. */
    int rw = label_width(m->row_labels, m->rows, 4, CLI_LABEL_COLUMNS), cw = 7;
    /* Colours are relative to the largest finite magnitude in the matrix. */
    double range = 0.0;
    for (int i = 0; i < m->rows * m->cols; i++)
        if (isfinite(m->data[i]) && fabs(m->data[i]) > range) range = fabs(m->data[i]);
    /* Wider than the terminal: blocks of columns, one under the other, as
     * NumPy prints a wide array. */
    int width = cli_width(f), sum_w = m->row_sums ? 1 + cw : 0;
    /* Narrower than the labels, one column and the sums (COLUMNS below 31):
     * the labels are cut shorter, down to 4 columns, and where even that
     * leaves no room the sums go into a block of their own. */
    bool sums_apart = false;
    if (3 + rw + 1 + cw + sum_w > width) {
        int fit = width - 3 - 1 - cw - sum_w;
        if (fit < 4) sums_apart = true, sum_w = 0, fit = width - 3 - 1 - cw;
        if (fit < rw) rw = fit < 4 ? 4 : fit;
    }
    int room = width - 3 - rw - sum_w;
    int per = room / (1 + cw) < 1 ? 1 : room / (1 + cw);
    if (per > m->cols) per = m->cols;
    for (int c0 = 0; c0 < m->cols; c0 += per) {
        int c1 = c0 + per < m->cols ? c0 + per : m->cols;
        if (per < m->cols) fprintf(f, "%s   columns %d to %d of %d\n", c0 ? "\n" : "", c0 + 1, c1, m->cols);
        print_block(f, m, colours, rw, cw, range, c0, c1, m->row_sums && c1 == m->cols && !sums_apart);
    }
    if (sums_apart) fputc('\n', f), print_block(f, m, colours, rw, cw, range, m->cols, m->cols, true);
}

void cli_print_legend(FILE *f, cli_palette palette, cli_colours colours) {
    static const double DIVERGING[] = {-1, -0.5, 0, 0.5, 1}, SEQUENTIAL[] = {0, 0.25, 0.5, 0.75, 1};
    const double *t = palette == CLI_DIVERGING ? DIVERGING : SEQUENTIAL;
    fputs("   colours:", f);
    for (int i = 0; i < 5; i++) {
        fputc(' ', f);
        if (colours) set_background(f, t[i], colours);
        fprintf(f, " %+5.2f ", t[i]);
        if (colours) fputs("\x1b[0m", f);
    }
    /* The swatches take 11 + 5 x 8 columns; what they are multiples of goes
     * after them, or under them when the line has no room for it. */
    const char *unit = palette == CLI_DIVERGING ? "x the largest |value| of the matrix" : "x the largest weight";
    if (11 + 5 * 8 + 2 + cli_display_width(unit) <= cli_width(f)) fprintf(f, "  %s\n", unit);
    else fprintf(f, "\n   %s\n", unit);
}

void cli_print_bar(FILE *f, double fraction, int width) {
    /* Eighths of a block for the fractional end. */
    static const char *const PART[8] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    int eighths = (int)lround(fraction * width * 8);
    if (eighths < 0) eighths = 0;
    for (int i = 0; i < eighths / 8; i++) fputs("█", f);
    fputs(PART[eighths % 8], f);
}

static cli_colours depth(void) {
    const char *ct = getenv("COLORTERM"), *term = getenv("TERM");
    if (ct && (strcmp(ct, "truecolor") == 0 || strcmp(ct, "24bit") == 0)) return CLI_TRUECOLOUR;
    if (term && strstr(term, "256")) return CLI_COLOURS_256;
    return CLI_COLOURS_16;
}

cli_colours cli_colour_wanted(const char *mode, FILE *f) {
    if (strcmp(mode, "always") == 0) return depth(); /* explicit: NO_COLOR only sets the default */
    if (strcmp(mode, "never") == 0) return CLI_NO_COLOUR;
    const char *no = getenv("NO_COLOR");
    if (no && *no) return CLI_NO_COLOUR;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0) return CLI_NO_COLOUR;
    return isatty(fileno(f)) ? depth() : CLI_NO_COLOUR;
}
