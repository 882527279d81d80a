/* text.c -- the terminal's width, prose reflowed to it, and tables in blocks
 * of columns that fit it (text.h). */
/* wcwidth is X/Open */
#define _XOPEN_SOURCE 700
#include "text.h"

#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <wchar.h>

int cli_width(FILE *f) {
    const char *env = getenv("COLUMNS");
    char *end;
    long n = env ? strtol(env, &end, 10) : 0;
    if (env && *env && *end == '\0' && n >= 20 && n <= 10000) return (int)n;
    struct winsize ws;
    if (isatty(fileno(f)) && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

int cli_utf8_char(const unsigned char *s, size_t len, uint32_t *cp) {
    static const uint32_t SMALLEST[5] = {0, 0, 0x80, 0x800, 0x10000}; /* by sequence length */
    if (!len) return 0;
    unsigned char c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!k || k > len) return 0;
    uint32_t v = k == 1 ? c : c & (0x7fu >> k);
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[j] & 0x3fu);
    }
    if (v < SMALLEST[k] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return (int)k;
}

/* The C library's own UTF-8 locale, whatever the user's: it knows which
 * characters a terminal draws two columns wide and which take none, for
 * every script Unicode has. NULL where the C library has no C.UTF-8. */
static locale_t utf8;
static void open_utf8(void) { utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0); }

int cli_char_width(const char *s, int *bytes) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, open_utf8);
    if (utf8) {
        locale_t caller = uselocale(utf8);
        mbstate_t state;
        memset(&state, 0, sizeof state);
        wchar_t wc;
        size_t n = mbrtowc(&wc, s, MB_LEN_MAX, &state);
        int w = n >= 1 && n <= MB_LEN_MAX ? wcwidth(wc) : -1;
        uselocale(caller);
        *bytes = n >= 1 && n <= MB_LEN_MAX ? (int)n : 1; /* a byte that starts no character: one column */
        return w < 0 ? 1 : w; /* and a control character: refused before it is printed */
    }
    /* No such locale, or not UTF-8 here: a column for each code point. */
    const unsigned char *u = (const unsigned char *)s;
    int n = 1;
    if (u[0] >= 0xc0)
        while (n < 4 && (u[n] & 0xc0) == 0x80) n++;
    *bytes = n;
    return 1;
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
        /* A word too wide for its line at the indent starts further left, where it fits
         * (an option's description whose one long word would pass the edge). */
        if (!col && lead + w > width) lead = width > w ? width - w : 0;
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
