/* cmd_scaling.c -- `attn scaling`: why attention divides the scores by
 * sqrt(d_k), measured. The numbers come from
 * attn_scaling_measure; this file prints them as a table, JSON or an SVG. */
#include "attn_teach.h"
#include "cli.h"
#include "text.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char SCALING_USAGE[] =
    "usage: attn scaling [options]\n"
    "\n"
    "For each d, random standard-normal queries, each scored against its own\n"
    "random keys: how the raw scores spread (about sqrt(d)), how peaked the\n"
    "softmax gets raw, divided by sqrt(d) and divided by d, and how much gradient\n"
    "the softmax still passes back.\n"
    "\n"
    "  --dims D,D,...   sizes d (default 16,64,256,1024; with --variance 8,512)\n"
    "  --queries N      queries per d (default 2000; with --variance 10000 pairs)\n"
    "  --keys N         keys per query (default 64)\n"
    "  --seed N         seed of the generator (default 0)\n"
    "  --variance       only the spread of q.k over pairs, raw and / sqrt(d)\n"
    "  --no-train       skip the end-to-end training (for d <= 256, `attn train`'s\n"
    "                   task with and without the division; seconds per d)\n"
    "  --json           the rows as JSON\n"
    "  --svg FILE       also draw the score histograms, raw beside scaled\n"
    "  -h, --help       show this help\n";

enum { MAX_DIMS = 16, MAX_CELLS = MAX_DIMS * 11 };

/* What the table's columns measure, one paragraph each. */
static const char *const DEFINITIONS[] = {
    "spread: standard deviation of the scores q.k (raw), q.k / sqrt(d) (scaled) and q.k / d (about 1/sqrt(d): "
    "0.125 at d = 64, so small the softmax is nearly flat).",
    "top: mean over queries of the largest softmax weight, for the raw scores, the scores / sqrt(d) and the "
    "scores / d.",
    "grad: the Frobenius norm ||diag(p) - p p^T||_F of the softmax's Jacobian for each query's weights p, its "
    "mean and median over queries. Near 0, almost no gradient flows back to W_Q and W_K: the softmax has "
    "saturated."};

/* A table of rows x cols cells, each formatted into its own 24 bytes. */
enum { CELL = 24 };
static void print_cells(int cols, int rows, const int *width, const bool *group, const char *const *head,
                        const char (*text)[CELL]) {
    const char *cells[MAX_CELLS];
    for (int i = 0; i < rows * cols && i < MAX_CELLS; i++) cells[i] = text[i];
    cli_table t = {cols, rows, 2, width, group, head, cells};
    cli_print_table(stdout, &t);
}


typedef struct args {
    int dims[MAX_DIMS], n_dims, queries, keys;
    uint64_t seed;
    bool variance, json, no_train;
    const char *svg;
} args;

/* What each option sets, for cli_check_repeats. */
static const cli_setting SCALING_SETTINGS[] = {
    {"--dims", NULL, true, 0},        {"--queries", NULL, true, 1},   {"--keys", NULL, true, 2},
    {"--seed", NULL, true, 3},        {"--svg", NULL, true, 4},       {"--no-train", NULL, false, 5},
    {"--variance", NULL, false, 6},   {"--json", NULL, false, 7},
    {NULL, NULL, false, 0},
};

static int parse_args(int argc, char **argv, args *a) {
    int code = 0;
    const char *dims = NULL, *queries = NULL, *keys = NULL, *seed = NULL;
    if (cli_help_asked(argc, argv, SCALING_SETTINGS)) {
        cli_print_usage(stdout, SCALING_USAGE);
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, SCALING_SETTINGS))) return code;
    for (int i = 1; i < argc && !code;) {
        const char *arg = argv[i];
        if (cli_option(argc, argv, &i, NULL, "--dims", &dims, &code) ||
                   cli_option(argc, argv, &i, NULL, "--queries", &queries, &code) ||
                   cli_option(argc, argv, &i, NULL, "--keys", &keys, &code) ||
                   cli_option(argc, argv, &i, NULL, "--seed", &seed, &code) ||
                   cli_option(argc, argv, &i, NULL, "--svg", &a->svg, &code)) {
        } else if (strcmp(arg, "--no-train") == 0) {
            a->no_train = true;
            i++;
        } else if (strcmp(arg, "--variance") == 0 || strcmp(arg, "--json") == 0) {
            *(arg[2] == 'v' ? &a->variance : &a->json) = true;
            i++;
        } else {
            code = cli_unknown_argument("scaling", arg);
        }
    }
    if (code) return code;
    long v;
    if (a->variance && a->no_train) /* else taken and ignored: --variance trains nothing */
        return cli_error(EXIT_USAGE, "--variance measures pairs and trains nothing; --no-train does not apply");
    a->keys = a->variance ? 1 : 64;
    a->queries = a->variance ? 10000 : 2000;
    if (keys) {
        if (a->variance) return cli_error(EXIT_USAGE, "--variance measures pairs; --keys does not apply");
        if (!cli_parse_int(keys, 1, 1 << 20, &v))
            return cli_bad_value("--keys", keys, "is not a whole number from 1 to %d", 1 << 20);
        a->keys = (int)v;
    }
    if (queries) {
        if (!cli_parse_int(queries, 1, 1 << 24, &v))
            return cli_bad_value("--queries", queries, "is not a whole number from 1 to %d", 1 << 24);
        a->queries = (int)v;
    }
    if (a->variance && a->queries < 2) /* a std over one pair is 0, not an estimate of sqrt(d) */
        return cli_error(EXIT_USAGE, "--variance needs at least 2 pairs for a spread, not --queries %d", a->queries);
    if (seed && !cli_parse_seed(seed, &a->seed))
        return cli_bad_value("--seed", seed, "is not a non-negative whole number");
    const char *list = dims ? dims : a->variance ? "8,512" : "16,64,256,1024";
    int item_no = 1;
    for (const char *p = list;; item_no++) {
        char item[32];
        size_t len = strcspn(p, ",");
        if (a->n_dims == MAX_DIMS)
            return cli_error(EXIT_USAGE, "--dims takes at most %d sizes", MAX_DIMS);
        snprintf(item, sizeof item, "%.*s", (int)(len < 31 ? len : 31), p);
        if (len >= 31 || !cli_parse_int(item, 1, 1 << 20, &v))
            return cli_bad_value("--dims", list, "is not a list of whole numbers from 1 to %d (size %d is not)", 1 << 20,
                                 item_no);
        a->dims[a->n_dims++] = (int)v;
        if (!p[len]) break;
        p += len + 1;
    }
    return 0;
}

/* The experiment end to end: `attn train`'s task with d_k = d, trained with
 * the scores divided by sqrt(d) and not, from the same initial weights. */
typedef struct training {
    bool done;               /* d <= 256, and not --variance */
    double loss[2], grad[2]; /* [0] raw, [1] / sqrt(d) */
} training;

enum { TRAIN_LR_PERMILLE = 30 };
#define TRAIN_LR (TRAIN_LR_PERMILLE / 1000.0)

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int train_both(training *t, int d, uint64_t seed) {
    memset(t, 0, sizeof *t);
    if (d > 256) return 0; /* larger d: minutes, not seconds */
    attn_train_options o = attn_train_options_default();
    enum { LAST = 10, FIRST = 10 };
    /* A learning rate at which every d up to 256 converges when scaled. */
    o.d_k = d, o.seed = seed, o.learning_rate = TRAIN_LR;
    double *mem = malloc(sizeof(double) * (size_t)(2 * 8 * d + 8 * ATTN_TRAIN_D_V + 2 * o.steps));
    if (!mem) return cli_error(EXIT_DATA, "out of memory");
    double *loss = mem + 2 * 8 * d + 8 * ATTN_TRAIN_D_V, *grad = loss + o.steps;
    attn_error err;
    for (int s = 0; s < 2; s++) {
        o.no_scale = s == 0;
        if (attn_train_head(mem, mem + 8 * d, mem + 16 * d, loss, grad, &o, &err)) {
            free(mem);
            return cli_error(EXIT_DATA, "%s", err.message);
        }
        for (int i = 0; i < LAST; i++) t->loss[s] += loss[o.steps - LAST + i] / LAST;
        /* The median: the unscaled gradient comes in rare bursts. */
        qsort(grad, FIRST, sizeof *grad, compare_doubles);
        t->grad[s] = (grad[FIRST / 2 - 1] + grad[FIRST / 2]) / 2;
    }
    free(mem);
    t->done = true;
    return 0;
}

static void print_training(const args *a, const training *t) {
    printf("\n");
    cli_prose(stdout, 0, 0, "Training, end to end: `attn train`'s task (a verb must find its subject) with d_k = d, "
              "%d steps of Adam at learning rate %g, from the same initial weights with and without the division "
              "(seed %llu)", attn_train_options_default().steps, TRAIN_LR, (unsigned long long)a->seed);
    printf("\n");
    static const char *const HEAD[2 * 5] = {"", "final loss", "final loss", "grad W_Q", "grad W_Q",
                                            "d", "raw", "/sqrt(d)", "raw", "/sqrt(d)"};
    static const int WIDTH[5] = {6, 11, 11, 12, 12};
    static const bool GROUP[5] = {false, true, false, true, false};
    char text[MAX_DIMS * 5][CELL];
    int rows = 0;
    for (int i = 0; i < a->n_dims; i++)
        if (t[i].done) {
            char (*row)[CELL] = text + 5 * rows++;
            snprintf(row[0], CELL, "%d", a->dims[i]);
            snprintf(row[1], CELL, "%.4f", t[i].loss[0]), snprintf(row[2], CELL, "%.4f", t[i].loss[1]);
            snprintf(row[3], CELL, "%.4g", t[i].grad[0]), snprintf(row[4], CELL, "%.4g", t[i].grad[1]);
        }
    print_cells(5, rows, WIDTH, GROUP, HEAD, (const char (*)[CELL])text);
    printf("\n");
    cli_prose(stdout, 0, 5, "final loss: the mean over the last 10 steps (0 is perfect).");
    cli_prose(stdout, 0, 5, "grad W_Q: the median of ||dLoss/dW_Q||_F (Frobenius norm) over the first 10 steps, the "
              "signal that learning starts from.");
}

/* --variance: the standard error of a sample std of q.k over the n pairs,
 * and how many of them row r's std lies from sqrt(d) (signed). q.k has
 * variance d and fourth moment 3d² + 6d, so its sample variance has
 * variance (2d² + 6d) / n, and the std's s.e. is that over 2σ. Shared by
 * the table and the JSON, which say the same numbers. */
static double variance_se(const args *a, const attn_scaling_row *r) {
    double d = r->d;
    return sqrt((2 * d * d + 6 * d) / a->queries) / (2 * sqrt(d));
}
static double variance_z(const args *a, const attn_scaling_row *r) {
    return (r->spread_raw - sqrt((double)r->d)) / variance_se(a, r);
}

/* The row whose std is farthest from sqrt(d), in standard errors, when one
 * is past two (about 1 std in 20 lands there); -1 when none is. */
static int variance_farthest(const args *a, const attn_scaling_row *rows) {
    int far = -1;
    double far_z = 2;
    for (int i = 0; i < a->n_dims; i++)
        if (fabs(variance_z(a, &rows[i])) > far_z) far = i, far_z = fabs(variance_z(a, &rows[i]));
    return far;
}

static void print_table(const args *a, const attn_scaling_row *rows) {
    if (a->variance) {
        cli_prose(stdout, 0, 0, "std of q.k over %d pairs of standard-normal vectors (seed %llu)", a->queries,
                  (unsigned long long)a->seed);
        printf("\n");
        static const char *const HEAD[2 * 6] = {"", "std raw", "std", "", "", "",
                                                "d", "(± s.e.)", "/ sqrt(d)", "sqrt(d)", "var raw", "var scaled"};
        static const int WIDTH[6] = {7, 16, 10, 8, 10, 10};
        char text[MAX_DIMS * 6][CELL];
        int far = variance_farthest(a, rows);
        for (int i = 0; i < a->n_dims; i++) {
            char (*row)[CELL] = text + 6 * i;
            snprintf(row[0], CELL, "%d", rows[i].d);
            snprintf(row[1], CELL, "%.2f ± %4.2f", rows[i].spread_raw, variance_se(a, &rows[i]));
            snprintf(row[2], CELL, "%.2f", rows[i].spread_scaled), snprintf(row[3], CELL, "%.2f", sqrt((double)rows[i].d));
            snprintf(row[4], CELL, "%.2f", rows[i].spread_raw * rows[i].spread_raw);
            snprintf(row[5], CELL, "%.2f", rows[i].spread_scaled * rows[i].spread_scaled);
        }
        print_cells(6, a->n_dims, WIDTH, NULL, HEAD, (const char (*)[CELL])text);
        printf("\n");
        /* Said of the numbers shown: about 1 std in 20 lands past two. */
        if (far < 0)
            cli_prose(stdout, 0, 0, "The samples are random, so the stds are too: each is within two standard "
                      "errors (± s.e.) of sqrt(d), and another generator or seed gives other digits.");
        else
            cli_prose(stdout, 0, 0, "The samples are random, so the stds are too: about 19 in 20 land within two "
                      "standard errors (± s.e.) of sqrt(d), and here d = %d's is %.1f standard errors from it. "
                      "Another generator or seed gives other digits.", rows[far].d, fabs(variance_z(a, &rows[far])));
        return;
    }
    cli_prose(stdout, 0, 0, "Why divide by sqrt(d): %d random %s, each against its own %d random %s (seed %llu)",
              a->queries, a->queries == 1 ? "query" : "queries", a->keys, a->keys == 1 ? "key" : "keys",
              (unsigned long long)a->seed);
    printf("\n");
    static const char *const HEAD[2 * 12] = {
        "", "spread", "", "", "top", "top", "top", "grad mean", "grad mean", "grad med", "grad med", "",
        "d", "raw", "/sqrt(d)", "/d", "raw", "/sqrt(d)", "/d", "raw", "/sqrt(d)", "raw", "/sqrt(d)", ""};
    static const int WIDTH[11] = {6, 8, 8, 6, 7, 7, 7, 9, 9, 9, 9};
    static const bool GROUP[11] = {false, true, false, false, true, false, false, true, false, true, false};
    static const char *head[2 * 11];
    for (int j = 0; j < 11; j++) head[j] = HEAD[j], head[11 + j] = HEAD[12 + j];
    char text[MAX_DIMS * 11][CELL];
    for (int i = 0; i < a->n_dims; i++) {
        const attn_scaling_row *r = &rows[i];
        char (*row)[CELL] = text + 11 * i;
        snprintf(row[0], CELL, "%d", r->d);
        /* Dividing by d scales the spread by 1/d: sqrt(d)/d = 1/sqrt(d), too small. */
        snprintf(row[1], CELL, "%.2f", r->spread_raw), snprintf(row[2], CELL, "%.3f", r->spread_scaled);
        snprintf(row[3], CELL, "%.3f", r->spread_raw / r->d);
        snprintf(row[4], CELL, "%.3f", r->top_raw), snprintf(row[5], CELL, "%.3f", r->top_scaled);
        snprintf(row[6], CELL, "%.3f", r->top_div_d);
        snprintf(row[7], CELL, "%.4f", r->grad_mean_raw), snprintf(row[8], CELL, "%.4f", r->grad_mean_scaled);
        snprintf(row[9], CELL, "%.2e", r->grad_median_raw), snprintf(row[10], CELL, "%.4f", r->grad_median_scaled);
    }
    print_cells(11, a->n_dims, WIDTH, GROUP, head, (const char (*)[CELL])text);
    printf("\n");
    for (size_t i = 0; i < sizeof DEFINITIONS / sizeof DEFINITIONS[0]; i++) cli_prose(stdout, 0, 5, "%s", DEFINITIONS[i]);
}

/* The rows as attn_scaling_json writes them; with --variance, each with what
 * the table says besides (the standard error, sqrt(d), the variances, how
 * many standard errors the std lies from sqrt(d)), and the sentence under
 * it: which d's std is past two standard errors, if one is. */
static void print_json(const args *a, const attn_scaling_row *rows, const training *t) {
    printf("{\"seed\": %llu, ", (unsigned long long)a->seed);
    if (a->variance) {
        int far = variance_farthest(a, rows);
        printf("\"variance\": true, \"pairs\": %d, \"farthest_d\": ", a->queries);
        if (far < 0) printf("null, ");
        else printf("%d, ", rows[far].d);
    }
    printf("\"rows\": [");
    for (int i = 0; i < a->n_dims; i++) {
        char row[1024];
        size_t len;
        attn_scaling_json(row, sizeof row, &len, &rows[i], 0, NULL); /* fits: 12 numbers */
        if (a->variance) { /* row ends in its closing brace: the table's other columns go before it */
            const attn_scaling_row *r = &rows[i];
            snprintf(row + len - 1, sizeof row - (len - 1), ", \"std_error\": %.17g, \"sqrt_d\": %.17g, "
                     "\"var_raw\": %.17g, \"var_scaled\": %.17g, \"standard_errors_from_sqrt_d\": %.17g}",
                     variance_se(a, r), sqrt((double)r->d), r->spread_raw * r->spread_raw,
                     r->spread_scaled * r->spread_scaled, variance_z(a, r));
        }
        printf("%s\n  %s", i ? "," : "", row);
    }
    printf("\n], \"training\": [");
    for (int i = 0, first = 1; i < a->n_dims; i++)
        if (t[i].done) {
            printf("%s\n  {\"d\": %d, \"loss_raw\": %.17g, \"loss_scaled\": %.17g, \"grad_wq_raw\": %.17g, "
                   "\"grad_wq_scaled\": %.17g}", first ? "" : ",", a->dims[i], t[i].loss[0], t[i].loss[1],
                   t[i].grad[0], t[i].grad[1]);
            first = 0;
        }
    printf("\n]}\n");
}

/* One histogram panel at (x, y), w by h, of densities on [-range, range]. */
static void svg_panel(FILE *f, double x, double y, double w, double h, const double *hist,
                      double range, double ymax, const char *colour, const char *title) {
    double bw = w / ATTN_SCALING_BINS;
    fprintf(f, "<rect x='%g' y='%g' width='%g' height='%g' fill='none' stroke='#999'/>\n", x, y, w, h);
    for (int b = 0; b < ATTN_SCALING_BINS; b++) {
        /* ymax is 0 when no score fell inside the axis (a few scores of a
         * large d): an empty panel, not 0 / 0 bars. */
        double bh = ymax > 0 ? hist[b] / ymax * (h - 4) : 0;
        if (bh > h - 4) bh = h - 4;
        fprintf(f, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='%s'/>\n", x + b * bw,
                y + h - bh, bw * 0.9, bh, colour);
    }
    /* x axis ticks at -range, 0, +range */
    for (int t = -1; t <= 1; t++)
        fprintf(f, "<text x='%g' y='%g' font-size='11' text-anchor='middle'>%g</text>\n",
                x + w / 2 + t * w / 2, y + h + 14, t * range);
    fprintf(f, "<text x='%g' y='%g' font-size='12' text-anchor='middle'>%s</text>\n", x + w / 2, y - 6,
            title);
}

/* The histograms as an SVG, into out's temporary: renamed into place by
 * the caller before the table goes out. */
static int write_svg(cli_output *out, const args *a, const attn_scaling_row *rows) {
    FILE *f = cli_output_open(out);
    if (!f) return EXIT_DATA;
    double pw = 300, ph = 110, top = 70, gap = 50, W = 2 * pw + 170;
    double H = top + a->n_dims * (ph + gap) + 40;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n", W, H);
    fprintf(f, "<text x='%g' y='24' font-size='16' text-anchor='middle'>Scores q.k of random "
               "vectors: raw (fixed axis) and divided by sqrt(d)</text>\n", W / 2);
    /* legend */
    fprintf(f, "<rect x='90' y='36' width='12' height='12' fill='#d62728'/><text x='108' y='47' "
               "font-size='12'>raw q.k</text>\n<rect x='200' y='36' width='12' height='12' "
               "fill='#1f77b4'/><text x='218' y='47' font-size='12'>q.k / sqrt(d)</text>\n");
    for (int i = 0; i < a->n_dims; i++) {
        const attn_scaling_row *r = &rows[i];
        double y = top + 20 + i * (ph + gap), ymax_raw = 0, ymax_scaled = 0;
        for (int b = 0; b < ATTN_SCALING_BINS; b++) {
            ymax_scaled = r->hist_scaled[b] > ymax_scaled ? r->hist_scaled[b] : ymax_scaled;
        }
        /* The raw panel keeps one y scale for every d (that of the narrowest),
         * like its fixed x axis, so the spreading is visible. */
        for (int j = 0; j < a->n_dims; j++)
            for (int b = 0; b < ATTN_SCALING_BINS; b++)
                ymax_raw = rows[j].hist_raw[b] > ymax_raw ? rows[j].hist_raw[b] : ymax_raw;
        char t1[96], t2[96];
        snprintf(t1, sizeof t1, "d = %d: raw, spread %.2f", r->d, r->spread_raw);
        snprintf(t2, sizeof t2, "d = %d: / sqrt(d), spread %.2f", r->d, r->spread_scaled);
        fprintf(f, "<text x='20' y='%g' font-size='13' font-weight='bold'>d = %d</text>\n", y + ph / 2,
                r->d);
        svg_panel(f, 90, y, pw, ph, r->hist_raw, ATTN_SCALING_RAW_RANGE, ymax_raw, "#d62728", t1);
        svg_panel(f, 90 + pw + 40, y, pw, ph, r->hist_scaled, ATTN_SCALING_SCALED_RANGE, ymax_scaled,
                  "#1f77b4", t2);
    }
    fprintf(f, "<text x='%g' y='%g' font-size='12' text-anchor='middle'>score (x axis); density "
               "(y axis)</text>\n</svg>\n", W / 2, H - 12);
    return cli_output_close(out, f);
}

/* What the run prints, for cli_outputs_commit: the table (and the
 * training's), or the JSON. */
typedef struct report {
    const args *a;
    const attn_scaling_row *rows;
    const training *train;
} report;

static int print_report(void *ctx) {
    const report *r = ctx;
    if (r->a->json) print_json(r->a, r->rows, r->train);
    else {
        print_table(r->a, r->rows);
        if (!r->a->variance && !r->a->no_train) print_training(r->a, r->train);
    }
    return 0;
}

int cmd_scaling(int argc, char **argv) {
    args a = {{0}, 0, 0, 0, 0, false, false, false, NULL};
    int code = parse_args(argc, argv, &a);
    if (code || cli_stop != CLI_RUN) return code < 0 ? 0 : code;
    attn_scaling_row rows[MAX_DIMS];
    training train[MAX_DIMS];
    bool progress = isatty(STDERR_FILENO); /* a progress line, for people only */
    for (int i = 0; i < a.n_dims; i++) {
        attn_error err;
        if (progress) fprintf(stderr, "\rmeasuring d = %d (%d of %d)...", a.dims[i], i + 1, a.n_dims);
        if (attn_scaling_measure(&rows[i], a.dims[i], a.queries, a.keys, a.seed, &err)) {
            if (progress) fputc('\n', stderr);
            return cli_error(EXIT_DATA, "%s", err.message);
        }
        memset(&train[i], 0, sizeof train[i]);
        if (!a.variance && !a.no_train && (code = train_both(&train[i], a.dims[i], a.seed))) return code;
    }
    if (progress) fprintf(stderr, "\r%40s\r", "");
    cli_output svg = {.path = a.svg};
    if (a.svg && (code = write_svg(&svg, &a, rows))) return code;
    report r = {&a, rows, train};
    return cli_outputs_commit(&svg, 1, print_report, &r); /* the SVG into place, then the text */
}
