/* cmd_train.c -- `attn train`: one head of the toy model learns, from
 * generated sentences, to find each verb's subject (attn_train_head); this
 * file prints the loss curve, the learned weights on a sentence next to the
 * hand-wired head's, and optionally an SVG of the curve or JSON. */
#include "attn_teach.h"
#include "cli.h"
#include "text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char TRAIN_USAGE[] =
    "usage: attn train [options] [SENTENCE]\n"
    "\n"
    "Trains W_Q, W_K and W_V of one attention head from random weights, with\n"
    "Adam on the library's own backward pass. The task: in sentences like \"the\n"
    "big dog chased a ball\", attended with a causal mask, every word's output\n"
    "must equal the features (noun, animal, thing, place) of the last noun it\n"
    "sees: a verb's, its subject's. The verb cannot know its subject by itself,\n"
    "so the head must learn to look for it. The loss is the squared error\n"
    "averaged over the batch's words.\n"
    "Then shows what the learned head does on SENTENCE (default \"the cat sat on\n"
    "the mat\") next to the hand-wired head of `attn explain`.\n"
    "\n"
    "  --dk N           query/key size (default 4)\n"
    "  --steps N        Adam steps (default 1000)\n"
    "  --batch N        sentences per step (default 16)\n"
    "  --lr X           Adam's learning rate (default 0.1)\n"
    "  --no-scale       do not divide the scores by sqrt(d_k)\n"
    "  --seed N         initial weights and sentences (default 1)\n"
    "  --svg FILE       also draw the loss curve\n"
    "  --json           the curves, the learned weights and the sentence's\n"
    "                   attention weights as JSON\n"
    "  -h, --help       show this help\n";

typedef struct args {
    attn_train_options o;
    const char *svg, *sentence;
    bool json;
} args;

/* What each option sets, for cli_check_repeats. */
static const cli_setting TRAIN_SETTINGS[] = {
    {"--dk", NULL, true, 0},          {"--steps", NULL, true, 1},     {"--batch", NULL, true, 2},
    {"--lr", NULL, true, 3},          {"--seed", NULL, true, 4},      {"--svg", NULL, true, 5},
    {"--no-scale", NULL, false, 6},   {"--json", NULL, false, 7},
    {NULL, NULL, false, 0},
};

static int parse_args(int argc, char **argv, args *a) {
    int code = 0;
    const char *dk = NULL, *steps = NULL, *batch = NULL, *lr = NULL, *seed = NULL;
    char words[512]; /* the words given, joined by spaces: what to quote (cut at 511 bytes) */
    size_t used = 0;
    int nwords = 0;
    words[0] = '\0';
    if (cli_help_asked(argc, argv, TRAIN_SETTINGS)) {
        cli_print_usage(stdout, TRAIN_USAGE);
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, TRAIN_SETTINGS))) return code;
    for (int i = 1; i < argc && !code;) {
        const char *arg = argv[i];
        if (cli_option(argc, argv, &i, NULL, "--dk", &dk, &code) ||
                   cli_option(argc, argv, &i, NULL, "--steps", &steps, &code) ||
                   cli_option(argc, argv, &i, NULL, "--batch", &batch, &code) ||
                   cli_option(argc, argv, &i, NULL, "--lr", &lr, &code) ||
                   cli_option(argc, argv, &i, NULL, "--seed", &seed, &code) ||
                   cli_option(argc, argv, &i, NULL, "--svg", &a->svg, &code)) {
        } else if (strcmp(arg, "--no-scale") == 0 || strcmp(arg, "--json") == 0) {
            if (arg[2] == 'n') a->o.no_scale = 1;
            else a->json = true;
            i++;
        } else if (arg[0] == '-' && arg[1]) {
            code = cli_unknown_argument("train", arg);
        } else { /* a word: the sentence, or one more word for the error to quote whole */
            if (!a->sentence) a->sentence = arg;
            if (used < sizeof words)
                used += (size_t)snprintf(words + used, sizeof words - used, "%s%s", nwords ? " " : "", arg);
            nwords++, i++;
        }
    }
    if (code) return code;
    if (nwords > 1) return cli_error(EXIT_USAGE, "one sentence only; quote it: attn train \"%s\"", words);
    long v;
    if (dk && !cli_parse_int(dk, 1, 1024, &v)) return cli_bad_value("--dk", dk, "is not a whole number from 1 to 1024");
    if (dk) a->o.d_k = (int)v;
    if (steps && !cli_parse_int(steps, 1, 100000, &v))
        return cli_bad_value("--steps", steps, "is not a whole number from 1 to 100000");
    if (steps) a->o.steps = (int)v;
    if (batch && !cli_parse_int(batch, 1, 1024, &v))
        return cli_bad_value("--batch", batch, "is not a whole number from 1 to 1024");
    if (batch) a->o.batch = (int)v;
    if (lr && (!cli_parse_double(lr, &a->o.learning_rate) || !(a->o.learning_rate > 0) || a->o.learning_rate > 10))
        return cli_bad_value("--lr", lr, "is not a number in (0, 10]");
    if (seed && !cli_parse_seed(seed, &a->o.seed))
        return cli_bad_value("--seed", seed, "is not a non-negative whole number");
    return 0;
}

/* The curve as one line of block characters, on a log scale. */
static void sparkline(const double *y, int n, int width) {
    static const char *const BLOCKS[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        double l = log10(y[i] > 1e-12 ? y[i] : 1e-12);
        lo = l < lo ? l : lo, hi = l > hi ? l : hi;
    }
    int cols = n < width ? n : width;
    for (int c = 0; c < cols; c++) {
        int i = (int)((long long)c * n / cols);
        double l = log10(y[i] > 1e-12 ? y[i] : 1e-12);
        int b = hi > lo ? (int)((l - lo) / (hi - lo) * 7.999) : 0;
        fputs(BLOCKS[b], stdout);
    }
}

/* The head's attention weights on the sentence (causal, as trained). */
static int head_weights(attn_explain *ex, const double *x, int n, const double *wq, const double *wk,
                        const double *wv, int dk, int no_scale) {
    attn_explain_input in = {n, ATTN_TOY_D_MODEL, dk, ATTN_TRAIN_D_V, x, wq, wk, wv, ATTN_EXPLAIN_QKV, 1, no_scale, 0,
                             ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    attn_error err;
    if (attn_explain_run(ex, &in, &err)) return cli_error(EXIT_DATA, "%s", err.message);
    return 0;
}

/* The two heads' weights (n, n) side by side, a group of columns each: the
 * table puts the hand-wired head's under the learned head's when both do
 * not fit the terminal. */
static void print_weights(const attn_explain *learned, const attn_explain *wired, char **words, int n) {
    enum { MAX = ATTN_TOY_MAX_TOKENS, COLS = 1 + 2 * MAX, CELL = 8 };
    static char text[MAX][COLS][CELL];
    static const char *head[2 * COLS], *cells[MAX * COLS];
    int width[COLS], cols = 1 + 2 * n;
    bool group[COLS];
    for (int j = 0; j < cols; j++) {
        int h = j ? (j - 1) / n : 0, k = j ? (j - 1) % n : 0; /* head h's column k */
        width[j] = j ? 7 : 8, group[j] = j && k == 0;
        head[j] = j && k == 0 ? (h ? "wired" : "learned") : "";
        head[cols + j] = j ? words[k] : "";
        for (int i = 0; i < n; i++) {
            if (j) snprintf(text[i][j], CELL, "%.3f", (h ? wired : learned)->weights[i * n + k]);
            cells[i * cols + j] = j ? text[i][j] : words[i];
        }
    }
    cli_table t = {cols, n, 2, width, group, head, cells};
    cli_print_table(stdout, &t);
}

/* The words to which row i of head h gives its largest weight, into text:
 * one label, or several joined by "and" when they tie (a repeated word has
 * the same key wherever it stands, the head no positions: cat₁ and cat₂ get
 * the same weight once the row sees both). Returns the weight; *ties, how
 * many words have it. */
static double most(char *text, size_t size, int *ties, const attn_explain *h, char *const *words, int n, int i) {
    const double *row = h->weights + i * n;
    double best = row[0];
    for (int j = 1; j < n; j++) best = row[j] > best ? row[j] : best;
    *ties = 0;
    for (int j = 0; j < n; j++) *ties += row[j] == best;
    size_t used = 0;
    text[0] = '\0';
    for (int j = 0, k = 0; j < n && used < size; j++)
        if (row[j] == best)
            used += (size_t)snprintf(text + used, size - used, "%s%s", k == 0 ? "" : k == *ties - 1 ? " and " : ", ",
                                     words[j]), k++;
    return best;
}

/* For each verb of the sentence, where each head looks most. words are the
 * table's labels (a repeated word numbered, the₁ and the₂), so that a verb
 * and what it looks at name positions of the sentence. */
static void print_verdicts(const attn_explain *learned, const attn_explain *wired, const attn_toy_token *t,
                           char *const *words, int n) {
    for (int i = 0; i < n; i++) {
        double x[ATTN_TOY_D_MODEL];
        attn_toy_embed(x, &t[i], 1, NULL);
        if (x[1] != 1) continue; /* feature 1: verb */
        char at[2][ATTN_TOY_MAX_TOKENS * 32]; /* labels of at most 9 bytes past a word of the toy's vocabulary */
        int ties[2];
        double w[2] = {most(at[0], sizeof at[0], &ties[0], learned, words, n, i),
                       most(at[1], sizeof at[1], &ties[1], wired, words, n, i)};
        cli_prose(stdout, 0, 3, "%s attends most to %s (%.2f%s) in the learned head, to %s (%.2f%s) in the hand-wired one",
                  words[i], at[0], w[0], ties[0] > 1 ? " each" : "", at[1], w[1], ties[1] > 1 ? " each" : "");
    }
}

/* The loss curve as an SVG, into out's temporary: renamed into place by
 * the caller before the report goes out. */
static int write_svg(cli_output *out, const double *loss, int n) {
    FILE *f = cli_output_open(out);
    if (!f) return EXIT_DATA;
    double W = 640, H = 320, x0 = 70, y0 = 30, w = W - 100, h = H - 80, lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        double l = log10(loss[i] > 1e-12 ? loss[i] : 1e-12);
        lo = l < lo ? l : lo, hi = l > hi ? l : hi;
    }
    lo = floor(lo), hi = ceil(hi) > lo ? ceil(hi) : lo + 1;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' font-family='sans-serif'>\n"
               "<rect width='100%%' height='100%%' fill='white'/>\n"
               "<text x='%g' y='20' font-size='14' text-anchor='middle'>Training loss per step (log "
               "scale)</text>\n<rect x='%g' y='%g' width='%g' height='%g' fill='none' stroke='#999'/>\n",
            W, H, W / 2, x0, y0, w, h);
    for (double e = lo; e <= hi; e++)
        fprintf(f, "<text x='%g' y='%g' font-size='11' text-anchor='end'>1e%g</text>\n", x0 - 6,
                y0 + h - (e - lo) / (hi - lo) * h + 4, e);
    fprintf(f, "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='");
    for (int i = 0; i < n; i++) {
        double l = log10(loss[i] > 1e-12 ? loss[i] : 1e-12);
        fprintf(f, "%.1f,%.1f ", x0 + (n > 1 ? (double)i / (n - 1) : 0) * w, y0 + h - (l - lo) / (hi - lo) * h);
    }
    fprintf(f, "'/>\n<text x='%g' y='%g' font-size='12' text-anchor='middle'>step (1 to %d)</text>\n</svg>\n",
            x0 + w / 2, y0 + h + 30, n);
    return cli_output_close(out, f);
}

static void print_json_array(const char *name, const double *x, int n, const char *end) {
    printf("\"%s\": [", name);
    for (int i = 0; i < n; i++) printf("%s%.17g", i ? ", " : "", x[i]);
    printf("]%s", end);
}

/* A (rows, cols) matrix, a list of its rows, as every matrix of the
 * commands' JSON is. */
static void print_json_matrix(const char *name, const double *x, int rows, int cols, const char *end) {
    printf("\"%s\": ", name);
    cli_json_matrix(stdout, x, rows, cols);
    printf("%s", end);
}

static void print_json(const args *a, const double *loss, const double *gq, const double *const w[3],
                       const attn_explain *learned, const char *const *words, int n) {
    int dk = a->o.d_k;
    printf("{\"d_k\": %d, \"scaled\": %s, \"steps\": %d, \"batch\": %d, \"learning_rate\": %.17g, "
           "\"seed\": %llu,\n",
           dk, a->o.no_scale ? "false" : "true", a->o.steps, a->o.batch, a->o.learning_rate,
           (unsigned long long)a->o.seed);
    print_json_array("loss", loss, a->o.steps, ",\n");
    print_json_array("grad_wq", gq, a->o.steps, ",\n");
    print_json_matrix("w_q", w[0], ATTN_TOY_D_MODEL, dk, ",\n"); /* (d_model, d_k) */
    print_json_matrix("w_k", w[1], ATTN_TOY_D_MODEL, dk, ",\n");
    print_json_matrix("w_v", w[2], ATTN_TOY_D_MODEL, ATTN_TRAIN_D_V, ",\n"); /* (d_model, d_v) */
    printf("\"tokens\": [");
    for (int i = 0; i < n; i++) printf("%s\"%s\"", i ? ", " : "", words[i]);
    printf("],\n");
    print_json_matrix("weights", learned->weights, n, n, "\n}\n"); /* (n, n), causal: 0 above the diagonal */
}

/* What the run prints, for cli_outputs_commit: the report, or the JSON. */
typedef struct report {
    const args *a;
    const double *loss, *gq, *w[3]; /* (steps), (steps); W_Q, W_K (d_model, d_k), W_V (d_model, d_v) */
    const attn_explain *learned, *wired;
    const attn_toy_token *tokens;
    const char *const *words;
    int n;
} report;

static int print_report(void *ctx) {
    const report *r = ctx;
    const args *a = r->a;
    const double *loss = r->loss, *gq = r->gq;
    int dk = a->o.d_k, steps = a->o.steps, n = r->n, code = 0;
    if (a->json) {
        print_json(a, loss, gq, r->w, r->learned, r->words, n);
        return 0;
    }
    /* The labels first: out of memory then prints nothing. */
    char *labels[ATTN_TOY_MAX_TOKENS];
    bool labelled = true;
    for (int i = 0; i < n; i++) labelled &= (labels[i] = cli_word_label(r->words, n, i)) != NULL;
    if (!labelled) code = cli_error(EXIT_DATA, "out of memory");
    else {
        cli_prose(stdout, 0, 3, "attn train: one head learns to find each verb's subject");
        cli_prose(stdout, 0, 0, "d_k = %d, scores %s, %d step%s of %d sentence%s, Adam (learning rate %g), seed %llu",
                  dk, a->o.no_scale ? "not scaled" : "/ sqrt(d_k)", steps, cli_plural(steps), a->o.batch,
                  cli_plural(a->o.batch), a->o.learning_rate, (unsigned long long)a->o.seed);
        printf("\n");
        /* "loss first ▇▆...▁ last  (log scale)": the curve takes what the line has left, up to 60.
         * Both losses in one format, so that one step's loss reads the same at both ends. */
        char first_loss[32], last_loss[32];
        int used = snprintf(first_loss, sizeof first_loss, "loss %.4g ", loss[0]) +
                   snprintf(last_loss, sizeof last_loss, " %.4g  (log scale)", loss[steps - 1]);
        int room = cli_width(stdout) - used;
        if (room >= 10) {
            printf("%s", first_loss);
            sparkline(loss, steps, room < 60 ? room : 60);
            printf("%s\n", last_loss);
        } else { /* a narrow terminal: the numbers, then the curve on a line of its own */
            cli_prose(stdout, 0, 3, "loss %.4g to %.4g (log scale)", loss[0], loss[steps - 1]);
            printf("   ");
            sparkline(loss, steps, cli_width(stdout) - 3 < 60 ? cli_width(stdout) - 3 : 60);
            printf("\n");
        }
        int k = steps < 10 ? steps : 10;
        double first[10];
        memcpy(first, gq, sizeof(double) * (size_t)k);
        for (int i = 1; i < k; i++) /* insertion sort, for the median */
            for (int j = i; j > 0 && first[j - 1] > first[j]; j--) {
                double t = first[j];
                first[j] = first[j - 1], first[j - 1] = t;
            }
        char over[32] = "the first step"; /* one step: no "first 1 steps" */
        if (k > 1) snprintf(over, sizeof over, "the first %d steps", k);
        /* gq holds attn_train_head's Frobenius norms of dLoss/dW_Q: labelled as such, not |.| */
        cli_prose(stdout, 0, 3, "gradient reaching W_Q, median ||dLoss/dW_Q||_F over %s: %.4g", over,
                  k % 2 ? first[k / 2] : (first[k / 2 - 1] + first[k / 2]) / 2);
        printf("\n");
        /* The sentence as the head read it, word by word: what was typed
         * may hold control bytes (an escape sequence would reach the
         * terminal), tabs or line breaks, and punctuation it dropped. */
        char sentence[ATTN_TOY_MAX_TOKENS * 16]; /* the vocabulary's words are at most 7 bytes */
        size_t len = 0;
        sentence[0] = '\0';
        for (int i = 0; i < n && len < sizeof sentence; i++)
            len += (size_t)snprintf(sentence + len, sizeof sentence - len, "%s%s", i ? " " : "", r->words[i]);
        cli_prose(stdout, 0, 3, "attention weights on \"%s\" (causal), the learned head and the hand-wired one", sentence);
        print_weights(r->learned, r->wired, labels, n);
        printf("\n");
        print_verdicts(r->learned, r->wired, r->tokens, labels, n);
    }
    for (int i = 0; i < n; i++) free(labels[i]);
    return code;
}

/* Train, then show the learned head on the sentence beside the wired one. */
static int run(const args *a, const attn_toy_token *tokens, int n) {
    int dk = a->o.d_k, steps = a->o.steps;
    double *mem = calloc((size_t)(2 * ATTN_TOY_D_MODEL * dk + ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V + 2 * steps +
                                  ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL + 3 * 32),
                         sizeof(double));
    if (!mem) return cli_error(EXIT_DATA, "out of memory");
    double *wq = mem, *wk = wq + ATTN_TOY_D_MODEL * dk, *wv = wk + ATTN_TOY_D_MODEL * dk;
    double *loss = wv + ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V, *gq = loss + steps, *x = gq + steps;
    double *wired = x + ATTN_TOY_MAX_TOKENS * ATTN_TOY_D_MODEL;
    attn_error err;
    attn_explain learned_ex = {0}, wired_ex = {0};
    int code = 0;
    const char *words[ATTN_TOY_MAX_TOKENS];
    for (int i = 0; i < n; i++) words[i] = attn_toy_word(tokens[i].id);
    if (attn_train_head(wq, wk, wv, loss, gq, &a->o, &err) || attn_toy_embed(x, tokens, n, &err) ||
        attn_toy_weights(wired, wired + 32, wired + 64, ATTN_TOY_WIRED, &err))
        code = cli_error(EXIT_DATA, "%s", err.message);
    if (!code) code = head_weights(&learned_ex, x, n, wq, wk, wv, dk, a->o.no_scale);
    if (!code) code = head_weights(&wired_ex, x, n, wired, wired + 32, wired + 64, ATTN_TOY_D_K, 0);
    cli_output svg = {.path = a->svg};
    if (!code && a->svg) code = write_svg(&svg, loss, steps);
    report r = {a, loss, gq, {wq, wk, wv}, &learned_ex, &wired_ex, tokens, words, n};
    if (!code) code = cli_outputs_commit(&svg, 1, print_report, &r); /* the SVG into place, then the report */
    else cli_outputs_abort(&svg, 1);
    attn_explain_free(&learned_ex), attn_explain_free(&wired_ex);
    free(mem);
    return code;
}

int cmd_train(int argc, char **argv) {
    args a = {attn_train_options_default(), NULL, NULL, false};
    int code = parse_args(argc, argv, &a);
    if (code || cli_stop == CLI_STOP_AFTER_PARSE) return code < 0 ? 0 : code;
    attn_toy_token tokens[ATTN_TOY_MAX_TOKENS];
    int n;
    attn_error err;
    if (attn_toy_tokenize(tokens, ATTN_TOY_MAX_TOKENS, &n, a.sentence ? a.sentence : "the cat sat on the mat", &err))
        return cli_error(EXIT_DATA, "%s", err.message);
    if (cli_stop != CLI_RUN) return 0;
    return run(&a, tokens, n);
}
