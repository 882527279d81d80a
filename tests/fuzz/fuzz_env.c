/* fuzz_env.c -- libFuzzer target: the environment variables the library and
 * the command read, set to arbitrary text. The input is split at NUL bytes
 * into the values of ATTN_NUM_THREADS, ATTN_VERBOSE, COLUMNS, ATTN_ISA,
 * TERM, COLORTERM and NO_COLOR, in that order; a value the input does not
 * reach is unset. Each is read the way the process reads it: the thread
 * count after attn_set_num_threads(0), verbose mode after
 * attn_set_verbose(-1), the command's width and colours, and the kernels
 * named by ATTN_ISA (attn_ukernels_by_name: the process's own choice is
 * made once, so the lookup behind it is what each input reaches).
 *
 * Beyond "no crash, no undefined behaviour", each reading agrees with the
 * rule attn.h and the command's help state, written out here again:
 *   - ATTN_NUM_THREADS: digits alone, >= 1, give that many threads (256 if
 *     more); text with no digit, or with anything a number cannot hold,
 *     gives the default (the CPUs); the count is always 1..256;
 *   - ATTN_VERBOSE: off when unset, empty, or 0 / false / no / off in any
 *     case, on otherwise;
 *   - COLUMNS: digits alone from 20 to 10000 are the width; the width is
 *     never under 20;
 *   - ATTN_ISA: a set is found only by its own name;
 *   - colours: --color=always gives 24-bit for COLORTERM truecolor or
 *     24bit, else 256 for a TERM with "256" in it, else 16; never gives
 *     none; auto gives none where NO_COLOR is set and not empty, or TERM
 *     is dumb. */
#define _XOPEN_SOURCE 700 /* putenv */
#include "../../cli/heatmap.h"
#include "../../cli/text.h"
#include "attn.h"
#include "kernels/ukernel.h"
#include "sdpa/sdpa.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "split_args.h"

static const char *const NAMES[] = {"ATTN_NUM_THREADS", "ATTN_VERBOSE", "COLUMNS",  "ATTN_ISA",
                                    "TERM",             "COLORTERM",    "NO_COLOR"};
enum { N_NAMES = sizeof NAMES / sizeof *NAMES };

static int default_threads;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    unsetenv("ATTN_NUM_THREADS");
    attn_set_num_threads(0);
    default_threads = attn_get_num_threads();
    return 0;
}

/* The value of a run of decimal digits, at most cap (saturating), or -1
 * when text is empty or holds anything but digits. */
static long digits_value(const char *text, long cap) {
    if (!*text) return -1;
    long v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v > cap ? v : v * 10 + (*p - '0');
    }
    return v;
}

/* True when text has no decimal digit at all: strtol reads no number in it. */
static int no_digit(const char *text) {
    for (; *text; text++)
        if (*text >= '0' && *text <= '9') return 0;
    return 1;
}

static int equal_any_case(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if ((*a >= 'A' && *a <= 'Z' ? *a + 32 : *a) != *b) return 0;
    return !*a && !*b;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *argv[FUZZ_MAX_ARGS + 1], *buf;
    int n = fuzz_split_args(argv, &buf, NULL, 0, data, size);
    if (!n) return 0; /* out of memory */
    /* putenv of buffers of our own: glibc's setenv keeps a copy of every
     * distinct value it is given for the life of the process (a million
     * values held 64 MB), memory that grows with every new input */
    static char entry[N_NAMES][4096];
    const char *value[N_NAMES] = {0};
    for (int i = 0; i < N_NAMES; i++) {
        unsetenv(NAMES[i]);
        if (i < n) {
            int at = snprintf(entry[i], sizeof entry[i], "%s=%s", NAMES[i], argv[i]);
            if (at < 0) abort();
            value[i] = entry[i] + strlen(NAMES[i]) + 1; /* the value as it fitted */
            putenv(entry[i]);
        }
    }

    /* ATTN_NUM_THREADS, read at every call while no count was set */
    attn_set_num_threads(0);
    int threads = attn_get_num_threads();
    if (threads < 1 || threads > 256) abort();
    const char *t = value[0];
    long want = t ? digits_value(t, 1000) : -1;
    if (want >= 1 && threads != (want > 256 ? 256 : want)) abort();
    if ((!t || no_digit(t) || want == 0) && threads != default_threads) abort();

    /* ATTN_VERBOSE, read again at attn_set_verbose(-1) */
    attn_set_verbose(-1);
    const char *v = value[1];
    int off = !v || !*v || equal_any_case(v, "0") || equal_any_case(v, "false") || equal_any_case(v, "no") ||
              equal_any_case(v, "off");
    if (attn_verbose_on() != !off) abort();
    attn_set_verbose(0);

    /* COLUMNS */
    int width = cli_width(stdout);
    long columns = value[2] ? digits_value(value[2], 100000) : -1;
    if (width < 20 || (columns >= 20 && columns <= 10000 && width != columns)) abort();

    /* ATTN_ISA's lookup */
    if (value[3]) {
        const attn_ukernels *uk = attn_ukernels_by_name(value[3]);
        if (uk && strcmp(uk->name, value[3]) != 0) abort();
    }

    /* TERM, COLORTERM, NO_COLOR */
    const char *term = value[4], *ct = value[5], *no = value[6];
    cli_colours always = cli_colour_wanted("always", stdout);
    cli_colours depth = ct && (!strcmp(ct, "truecolor") || !strcmp(ct, "24bit")) ? CLI_TRUECOLOUR
                        : term && strstr(term, "256")                           ? CLI_COLOURS_256
                                                                                 : CLI_COLOURS_16;
    if (always != depth || cli_colour_wanted("never", stdout) != CLI_NO_COLOUR) abort();
    cli_colours automatic = cli_colour_wanted("auto", stdout);
    if (((no && *no) || (term && !strcmp(term, "dumb"))) && automatic != CLI_NO_COLOUR) abort();
    if (automatic != CLI_NO_COLOUR && automatic != depth) abort();

    for (int i = 0; i < N_NAMES; i++) unsetenv(NAMES[i]); /* the entries are not left in the environment */
    free(buf);
    return 0;
}
