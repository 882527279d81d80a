/* text.h -- text that fits the terminal: its width, prose reflowed to it, and
 * tables cut into blocks of columns that fit. Every command's prose and
 * tables go through these, so that one rule decides the width. */
#ifndef ATTN_CLI_TEXT_H
#define ATTN_CLI_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The width to fit: COLUMNS when set (20 to 10000), else the terminal's
 * (ioctl TIOCGWINSZ) when f is one, else 80 (a file or a pipe reads as a
 * standard terminal). */
int cli_width(FILE *f);

/* The columns the UTF-8 character at s takes on a terminal: 2 for East
 * Asian wide ones (CJK, Hangul, emoji), 0 for combining marks and
 * zero-width ones, else 1; *bytes receives its length (1 for a byte that
 * starts no valid character), as the C library's wcwidth has it in its
 * C.UTF-8 locale. s points at a character, not at its end. */
int cli_char_width(const char *s, int *bytes);

/* The length in bytes (1 to 4) of the UTF-8 character that starts
 * s[0..len), its code point in *cp; 0 when none starts there: a stray
 * continuation byte, a sequence cut short, an overlong form, a surrogate
 * or a code point past U+10FFFF are not UTF-8 (RFC 3629). */
int cli_utf8_char(const unsigned char *s, size_t len, uint32_t *cp);

/* The columns text takes on a terminal: the sum of its characters'. */
int cli_display_width(const char *s);

/* printf's fmt and arguments, reflowed to cli_width(f): a word (a run of
 * characters other than spaces and newlines) is never broken; a run of
 * spaces and single newlines between words is one space; a blank line ends
 * a paragraph and is kept. The first line starts with `indent` spaces, the
 * others with `hang`. A word wider than its line gets a line of its own, starting
 * left of the indent where that makes it fit.
 * Ends with a newline. */
void cli_prose(FILE *f, int indent, int hang, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* A command's help, reflowed to cli_width(f): a paragraph as prose; an
 * option line ("  --step NAME   what it does") with the lines under it
 * that continue its description, with the description reflowed in its
 * column; any other indented line (an example) on its own, continued
 * further in when too long; blank lines kept. */
void cli_print_usage(FILE *f, const char *text);

/* A table of preformatted cells, printed right-aligned. Column 0 is the
 * key (say d, or the word): wider than cli_width(f), the table is printed
 * in blocks of columns one under another, each starting with the key, and
 * a block keeps a group of columns together when it can. */
typedef struct cli_table {
    int cols, rows;
    int head_lines;           /* lines of column labels: 1 or 2 */
    const int *width;         /* (cols) each column's width */
    const bool *group;        /* (cols) true where a group starts, printed after " |"; NULL: none */
    const char *const *head;  /* (head_lines, cols) the labels */
    const char *const *cells; /* (rows, cols) the cells */
} cli_table;

void cli_print_table(FILE *f, const cli_table *t);

#endif /* ATTN_CLI_TEXT_H */
