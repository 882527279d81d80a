/* text.c -- the terminal's width, prose reflowed to it, and tables in blocks
 * of columns that fit it (text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

int cli_width(FILE *f) {
    const char *env = getenv("COLUMNS");
    char *end;
    long n = env ? strtol(env, &end, 10) : 0;
    if (env && *env && *end == '\0' && n >= 20 && n <= 10000) return (int)n;
    struct winsize ws;
    if (isatty(fileno(f)) && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

/* Code point ranges [lo, hi], sorted: the common ones of Unicode's East
 * Asian Wide and Fullwidth characters (CJK, Hangul, kana, fullwidth forms,
 * emoji), two columns each, and of its marks that take no column of their
 * own (combining accents, Hebrew and Arabic points, Devanagari's vowel
 * signs and virama, zero-width spaces and joiners). Abridged from Markus
 * Kuhn's wcwidth: enough for labels in those scripts, with no locale. */
static const unsigned WIDE[][2] = {
    {0x1100, 0x115f},   {0x2e80, 0x303e},   {0x3041, 0x33ff},   {0x3400, 0x4dbf},   {0x4e00, 0x9fff},
    {0xa000, 0xa4cf},   {0xac00, 0xd7a3},   {0xf900, 0xfaff},   {0xfe30, 0xfe4f},   {0xff00, 0xff60},
    {0xffe0, 0xffe6},   {0x1f300, 0x1f64f}, {0x1f900, 0x1f9ff}, {0x20000, 0x2fffd}, {0x30000, 0x3fffd}};
static const unsigned ZERO[][2] = {
    {0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd}, {0x05bf, 0x05bf}, {0x05c1, 0x05c2}, {0x05c4, 0x05c5},
    {0x05c7, 0x05c7}, {0x0610, 0x061a}, {0x064b, 0x065f}, {0x0670, 0x0670}, {0x0900, 0x0902}, {0x093a, 0x093a},
    {0x093c, 0x093c}, {0x0941, 0x0948}, {0x094d, 0x094d}, {0x0951, 0x0957}, {0x0962, 0x0963}, {0x1ab0, 0x1aff},
    {0x1dc0, 0x1dff}, {0x200b, 0x200f}, {0x2060, 0x2064}, {0x20d0, 0x20ff}, {0xfe00, 0xfe0f}, {0xfe20, 0xfe2f},
    {0xfeff, 0xfeff}};

static bool in_ranges(unsigned c, const unsigned (*r)[2], size_t n) {
    for (size_t i = 0; i < n && r[i][0] <= c; i++)
        if (c <= r[i][1]) return true;
    return false;
}

int cli_char_width(const char *s, int *bytes) {
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 1;
    unsigned c = n == 1 ? u[0] : u[0] & (0x3f >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80) { /* cut short: one column for the lead byte alone */
            *bytes = 1;
            return 1;
        }
        c = c << 6 | (u[i] & 0x3f);
    }
    *bytes = n;
    if (in_ranges(c, ZERO, sizeof ZERO / sizeof ZERO[0])) return 0;
    return in_ranges(c, WIDE, sizeof WIDE / sizeof WIDE[0]) ? 2 : 1;
}

/* The columns of the n bytes at s. */
static int span_width(const char *s, size_t n) {
    int w = 0;
    for (size_t i = 0, len; i < n; i += len) {
        int b;
        w += cli_char_width(s + i, &b);
        len = (size_t)b;
    }
    return w;
}

int cli_display_width(const char *s) {
    return s ? span_width(s, strlen(s)) : 0;
}

/* The words of text[0..n) reflowed to width, after `col` columns already on
 * the line (0: none yet): the first line starts with `indent` spaces, the
 * others with `hang`; a blank line in text ends a paragraph. Ends the line. */
static void reflow(FILE *f, int width, int col, int indent, int hang, const char *text, size_t n) {
    bool first = true;
    for (const char *p = text, *end = text + n; p < end;) {
        if (*p == ' ' || *p == '\n') { /* a blank line (two newlines) ends the paragraph */
            const char *q = p;
            int newlines = 0;
            for (; q < end && (*q == ' ' || *q == '\n'); q++) newlines += *q == '\n';
            if (newlines >= 2 && col && q < end) fputs("\n\n", f), col = 0, first = true;
            p = q;
            continue;
        }
        size_t len = 0;
        while (p + len < end && p[len] != ' ' && p[len] != '\n') len++;
        int w = span_width(p, len), lead = first ? indent : hang;
        if (col && col + 1 + w > width) fputc('\n', f), col = 0, first = false, lead = hang;
        if (col) fputc(' ', f), col++;
        else fprintf(f, "%*s", lead, ""), col = lead;
        fwrite(p, 1, len, f);
        col += w, p += len;
    }
    fputc('\n', f);
}

void cli_prose(FILE *f, int indent, int hang, const char *fmt, ...) {
    char small[1024], *text = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof small) { /* a long text: format it again into a buffer of its size */
        if (!(text = malloc((size_t)n + 1))) return;
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    reflow(f, cli_width(f), 0, indent, hang, text, (size_t)n);
    if (text != small) free(text);
}

/* Where an entry's description starts: after the line's leading spaces, its
 * option (or command) and a gap of two spaces or more ("  --step NAME   show
 * one step"); 0 when the line is not one. */
static size_t description_column(const char *line, size_t n) {
    size_t i = 0;
    while (i < n && line[i] == ' ') i++;
    if (i == 0 || i == n) return 0;
    for (; i + 1 < n; i++)
        if (line[i] == ' ' && line[i + 1] == ' ') {
            while (i < n && line[i] == ' ') i++;
            return i < n ? i : 0;
        }
    return 0;
}

void cli_print_usage(FILE *f, const char *text) {
    int width = cli_width(f);
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, "\n"), desc = description_column(p, n), indent = strspn(p, " ");
        const char *next = p + n + (p[n] == '\n');
        if (n == 0) {
            fputc('\n', f);
        } else if (desc) { /* an option and its description, with the lines under it that continue it */
            const char *end = next;
            while (*end && strspn(end, " ") >= desc && end[strspn(end, " ")] != '\n') {
                end += strcspn(end, "\n");
                end += *end == '\n';
            }
            fwrite(p, 1, desc - 1, f); /* the gap's last space comes back before the first word */
            reflow(f, width, span_width(p, desc - 1), (int)desc, (int)desc, p + desc, (size_t)(end - (p + desc)));
            next = end;
        } else if (indent) { /* an example or a list: one line, continued further in */
            reflow(f, width, 0, (int)indent, (int)indent + 4, p + indent, n - indent);
        } else { /* a paragraph: up to the next blank or indented line */
            const char *end = next;
            while (*end && *end != '\n' && *end != ' ') {
                end += strcspn(end, "\n");
                end += *end == '\n';
            }
            reflow(f, width, 0, 0, 0, p, (size_t)(end - p));
            next = end;
        }
        p = next;
    }
}

/* s right-aligned in w columns (longer: as it is). The spaces before it wait
 * in *pending until something visible follows, so that no line ends in
 * spaces (a header's empty cells). */
static void put_cell(FILE *f, const char *s, int w, int *pending) {
    int sw = cli_display_width(s);
    *pending += sw < w ? w - sw : 0;
    if (sw == 0) return;
    fprintf(f, "%*s%s", *pending, "", s);
    *pending = 0;
}

/* Columns c0 .. c1 - 1 of t after its key: the labels, then each row. */
static void print_block(FILE *f, const cli_table *t, int c0, int c1) {
    for (int line = 0; line < t->head_lines + t->rows; line++) {
        bool head = line < t->head_lines;
        const char *const *cell = head ? t->head + line * t->cols : t->cells + (line - t->head_lines) * t->cols;
        int pending = 0;
        put_cell(f, cell[0], t->width[0], &pending);
        for (int j = c0; j < c1; j++) {
            if (t->group && (t->group[j] || j == c0)) fprintf(f, "%*s |", pending, ""), pending = 0;
            pending++;
            put_cell(f, cell[j], t->width[j], &pending);
        }
        fputc('\n', f);
    }
}

/* The columns column k takes in a block that starts at c0: its separator
 * (" |" where a group starts, and at the start of every block), a space and
 * its cells. */
static int cost(const cli_table *t, int k, int c0) {
    return (t->group && (t->group[k] || k == c0) ? 2 : 0) + 1 + t->width[k];
}

void cli_print_table(FILE *f, const cli_table *t) {
    int width = cli_width(f), c0 = 1, used = t->width[0];
    for (int j = 1; j < t->cols;) {
        int end = j + 1, need = cost(t, j, c0); /* the group that starts at j: j .. end - 1 */
        while (t->group && end < t->cols && !t->group[end]) need += cost(t, end++, c0);
        if (used + need <= width) {
            used += need, j = end;
        } else if (j > c0) { /* the group starts the next block */
            print_block(f, t, c0, j);
            fputc('\n', f);
            c0 = j, used = t->width[0];
        } else { /* wider than a block of its own: as many of its columns as fit, at least one */
            used += cost(t, j, c0), j++;
            while (j < end && used + cost(t, j, c0) <= width) used += cost(t, j, c0), j++;
        }
    }
    print_block(f, t, c0, t->cols);
}
