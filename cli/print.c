/* print.c -- printing a tensor the way NumPy does: nested brackets, one
 * number format for the whole array, "..." for the middle of long axes, and
 * a long innermost row continued on the next line, to fit the terminal
 * (cli_width); a matrix in the commands' JSON; and a command's printed
 * result, put out once its files are renamed into place
 * (cli_commit_and_print). */
#include "cli.h"

#include <math.h>

enum { SUMMARY_THRESHOLD = 1000, EDGE_ITEMS = 3 };

typedef struct printer {
    FILE *f;
    const attn_tensor *t;
    bool summarise;  /* more than SUMMARY_THRESHOLD elements: print the edges */
    bool scientific; /* NumPy's rule: values >= 1e8, < 1e-4, or spanning > 1e3 */
    int decimals;
    int width;       /* widest formatted element, for alignment */
    double max_abs, min_abs;
    int line_width;  /* the terminal's */
    int col;         /* the columns already on the line being printed */
} printer;

static double element(const attn_tensor *t, int64_t off) {
    if (t->dtype == ATTN_F32) return ((const float *)t->data)[off];
    if (t->dtype == ATTN_F64) return ((const double *)t->data)[off];
    return ((const unsigned char *)t->data)[off] != 0;
}

static int format_value(char *buf, size_t size, const printer *p, double x) {
    if (p->t->dtype == ATTN_BOOL) return snprintf(buf, size, "%s", x != 0 ? "True" : "False");
    if (isnan(x)) return snprintf(buf, size, "nan");
    if (isinf(x)) return snprintf(buf, size, x > 0 ? "inf" : "-inf");
    if (x == 0) x = 0.0; /* print -0.0 as 0 */
    return snprintf(buf, size, p->scientific ? "%.*e" : "%.*f", p->decimals, x);
}

/* Whether index i of an axis of size n is printed, rather than elided. */
static bool shown(const printer *p, int64_t i, int64_t n) {
    return !p->summarise || n <= 2 * EDGE_ITEMS || i < EDGE_ITEMS || i >= n - EDGE_ITEMS;
}

/* Call fn on every element that will be printed. */
static void visit(printer *p, int d, int64_t off, void (*fn)(printer *, double)) {
    if (d == p->t->rank) {
        fn(p, element(p->t, off));
        return;
    }
    for (int64_t i = 0; i < p->t->shape[d]; i++)
        if (shown(p, i, p->t->shape[d])) visit(p, d + 1, off + i * p->t->strides[d], fn);
}

static void measure_range(printer *p, double x) {
    double a = fabs(x);
    if (!isfinite(a) || a == 0) return;
    if (a > p->max_abs) p->max_abs = a;
    if (a < p->min_abs) p->min_abs = a;
}

static void measure_width(printer *p, double x) {
    char buf[64];
    int n = format_value(buf, sizeof buf, p, x);
    if (n > p->width) p->width = n;
}

/* In the innermost row, before an item `need` columns wide: a space, or,
 * when the item would not fit the line, a new line indented under the row's
 * first item. */
static void separate(printer *p, int need, int indent) {
    if (p->col + 1 + need > p->line_width && p->col > indent + 1) {
        fprintf(p->f, "\n%*s", indent + 1, "");
        p->col = indent + 1;
    } else {
        fputc(' ', p->f);
        p->col++;
    }
}

static void print_rec(printer *p, int d, int64_t off, int indent) {
    const attn_tensor *t = p->t;
    if (d == t->rank) {
        char buf[64];
        format_value(buf, sizeof buf, p, element(t, off));
        p->col += fprintf(p->f, "%*s", p->width, buf);
        return;
    }
    bool innermost = d == t->rank - 1;
    int64_t n = t->shape[d];
    fputc('[', p->f);
    p->col++;
    for (int64_t i = 0; i < n; i++) {
        if (!shown(p, i, n)) {
            if (i != EDGE_ITEMS) continue;
            if (innermost) separate(p, 3, indent), p->col += fprintf(p->f, "...");
            else p->col = fprintf(p->f, "\n%*s...", indent + 1, "") - 1;
            continue;
        }
        if (i > 0) {
            /* The last item is followed by a closing bracket per level. */
            if (innermost) separate(p, p->width + (i == n - 1 ? t->rank : 0), indent);
            else {
                /* NumPy separates blocks by one newline per level below. */
                for (int b = 0; b < t->rank - 1 - d; b++) fputc('\n', p->f);
                p->col = fprintf(p->f, "%*s", indent + 1, "");
            }
        }
        print_rec(p, d + 1, off + i * t->strides[d], indent + 1);
    }
    fputc(']', p->f);
    p->col++;
}

void cli_print_tensor(FILE *f, const attn_tensor *t) {
    if (attn_tensor_numel(t) == 0) { /* NumPy prints an empty array as [] whatever its shape: not [[]\n\n []] */
        fputs("[]\n", f);
        return;
    }
    printer p = {f, t, false, false, t->dtype == ATTN_F64 ? 8 : 6, 0, 0.0, INFINITY, cli_width(f), 0};
    p.summarise = attn_tensor_numel(t) > SUMMARY_THRESHOLD;
    visit(&p, 0, 0, measure_range);
    p.scientific = p.max_abs >= 1e8 ||
                   (p.max_abs > 0 && (p.min_abs < 1e-4 || p.max_abs / p.min_abs > 1e3));
    visit(&p, 0, 0, measure_width);
    print_rec(&p, 0, 0, 0);
    fputc('\n', f);
}

void cli_json_matrix(FILE *f, const double *m, int rows, int cols) {
    fputc('[', f);
    for (int i = 0; i < rows; i++) {
        fprintf(f, "%s[", i ? ", " : "");
        for (int j = 0; j < cols; j++) {
            double x = m[(size_t)i * (size_t)cols + (size_t)j];
            if (isfinite(x)) fprintf(f, "%s%.17g", j ? ", " : "", x);
            else fprintf(f, "%snull", j ? ", " : "");
        }
        fputc(']', f);
    }
    fputc(']', f);
}

static int print_tensor(void *t) {
    cli_print_tensor(stdout, t);
    return 0;
}

int cli_commit_and_print(cli_output *outs, int n, const attn_tensor *printed) {
    return cli_outputs_commit(outs, n, printed ? print_tensor : NULL, (void *)printed);
}
