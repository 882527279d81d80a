/* cmd_explain.c -- `attn explain`: one attention head, step by step, on the
 * toy model or on your own embeddings and projections. */
#include "attn_teach.h"
#include "cli.h"
#include "explain.h"
#include "heatmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char EXPLAIN_USAGE[] =
    "usage: attn explain [options] [SENTENCE...]\n"
    "\n"
    "Shows every step of self-attention on a sentence of the toy model (default\n"
    "\"the cat sat on the mat\"): tokens, X, W_Q, W_K, W_V, Q, K, V, Q K^T, the\n"
    "scaling, the softmax weights and the output, then who attends to whom.\n"
    "\n"
    "  --step NAME          show one step: tokens x wq wk wv q k v scores scaled\n"
    "                       weights output summary\n"
    "  --causal             each word sees only itself and the words before it\n"
    "  --no-scale           do not divide the scores by sqrt(d_k)\n"
    "  --source SENTENCE    cross-attention: keys and values from this sentence,\n"
    "                       queries from the first (a decoder reading its encoder)\n"
    "  --score KIND         dot (default) or additive: also score the same Q and K\n"
    "                       with additive attention, the small network\n"
    "                       v . tanh(W1 q + W2 k), and measure both\n"
    "  --heads N            multi-head attention: 2 heads (who? and where?) or 3 (and\n"
    "                       an untrained one), their outputs side by side, then W_O\n"
    "  --positions KIND     none (default), sinusoidal (added to X) or rope (Q and K\n"
    "                       turned by position): with positions, word order counts;\n"
    "                       with rope the wired head is wired for word order, so\n"
    "                       adjectives find their own noun\n"
    "  --scale-by WHAT      d_k (default) or d_model: divide by sqrt(d_model), the\n"
    "                       model's width, to see what that common slip does\n"
    "  --random-head        the toy's fixed-seed random head instead of the wired one\n"
    "  --trained            the head attn train learns (1000 steps, seed 1; causal,\n"
    "                       as it was trained) instead of the wired one\n"
    "  --tied               use W_Q as W_K too: one matrix for questions and answers,\n"
    "                       which makes the scores symmetric\n"
    "  --mode MODE          qkv (default), dot (weights = softmax(X X^T), unscaled,\n"
    "                       no projections) or average (plain averaging)\n"
    "  --embeddings FILE    your own X (n, d_model) as .npy instead of the toy\n"
    "  --tokens A,B,...     labels for the rows of --embeddings\n"
    "  --wq/--wk/--wv FILE  your own projections (d_model, d_k) / (d_model, d_v),\n"
    "                       used as X W; all three together (a torch nn.Linear's\n"
    "                       .weight is (d_out, d_in), W transposed: save .weight.T)\n"
    "  --json               every matrix as one JSON object (see docs/explainer.md);\n"
    "                       not with --step\n"
    "  --vocab              the toy's words, each with its features (the rows of X);\n"
    "                       alone, with no other argument\n"
    "  --cost               what attention costs as the text grows: time and memory,\n"
    "                       measured at 64 to 16384 tokens; alone, as --vocab\n"
    "  --kernel             the second part: how a fast kernel computes the head\n"
    "                       (tiles, the online softmax, causal blocks, the KV cache,\n"
    "                       split-KV decode, pages, ring attention, the gradient);\n"
    "                       --step NAME shows one: cost tiles online causal cache\n"
    "                       split pages ring gradient; with --json, its numbers\n"
    "  --block N            --kernel's block of queries and keys, 1 to 8 (default 2)\n"
    "  --workers N          --kernel's split-KV workers, 1 to 8 (default 2)\n"
    "  --ranks N            --kernel's ring of ranks, 1 to 8 (default 3)\n"
    "  --color WHEN         auto (default), always or never; NO_COLOR is honoured\n"
    "  -h, --help           show this help\n"
    "\n"
    "examples:\n"
    "  attn explain the dog chased a ball in the park\n"
    "  attn explain --causal --step weights\n"
    "  attn explain --kernel --step online\n";

static const char *const STEPS[] = {"tokens", "x",      "wq",      "wk",     "wv",     "q", "k",
                                    "v",      "scores", "scaled", "weights", "output", "summary"};
enum { N_STEPS = sizeof STEPS / sizeof STEPS[0] };





static char **numbered_labels(const char *prefix, int n) {
    char **l = calloc((size_t)n, sizeof *l);
    for (int i = 0; l && i < n; i++) {
        l[i] = malloc(strlen(prefix) + 12);
        if (l[i]) sprintf(l[i], "%s%d", prefix, i);
    }
    return l;
}

static char **copied_labels(const char *const *src, int n) {
    char **l = calloc((size_t)n, sizeof *l);
    for (int i = 0; l && i < n; i++) l[i] = strdup(src[i]);
    return l;
}

void explain_free_labels(char **l, int n) {
    for (int i = 0; l && i < n; i++) free(l[i]);
    free(l);
}

static void free_model(explain_model *m) {
    explain_free_labels(m->tokens, m->n);
    explain_free_labels(m->features, m->d_model);
    explain_free_labels(m->q_cols, m->d_k);
    explain_free_labels(m->v_cols, m->d_v);
    free(m->X), free(m->W_Q), free(m->W_K), free(m->W_V), free(m->ids);
    explain_free_labels(m->src_tokens, m->n_src), free(m->X_src);
}

/* `attn explain "$S"` with S unset is a mistake, not a request for the
 * default sentence. It is bad data, as a sentence of no words and an empty
 * file name (-q "$Q") are, not bad usage: exit 1. */
static bool sentence_is_blank(const char *sentence) {
    return strspn(sentence, " \t\n\r\f\v") == strlen(sentence);
}

static int empty_sentence_error(void) {
    return cli_error(EXIT_DATA, "the sentence is empty; give some words, or none for the default");
}

/* The options' combinations, once all are read (given: a sentence was). */
static int check_args(explain_args *a, bool given) {
    if (strcmp(a->colour, "auto") && strcmp(a->colour, "always") && strcmp(a->colour, "never"))
        return cli_bad_value("--color", a->colour, "is not auto, always or never");
    if (a->kernel) {
        if (a->causal || a->no_scale || a->source || a->additive || a->heads > 1 || a->positions ||
            a->scale_by_d_model || a->random_head || a->trained || a->tied || a->mode != ATTN_EXPLAIN_QKV ||
            a->embeddings || a->wq || a->wk || a->wv || a->tokens)
            return cli_error(EXIT_USAGE, "--kernel explains the toy's wired head on a sentence: it takes --step, "
                             "--json, --block, --workers, --ranks and --color only");
        if (a->step) {
            int k = 0;
            while (k < EXPLAIN_KERNEL_N_STEPS && strcmp(a->step, EXPLAIN_KERNEL_STEPS[k]) != 0) k++;
            if (k == EXPLAIN_KERNEL_N_STEPS)
                return cli_error(EXIT_USAGE, "unknown --step '%s' with --kernel; steps: cost tiles online causal "
                                 "cache split pages ring gradient", a->step);
        }
    } else if (a->kernel_block || a->kernel_workers || a->kernel_ranks) {
        return cli_error(EXIT_USAGE, "--block, --workers and --ranks go with --kernel");
    }
    if (a->kernel) {
        if (!given) strcpy(a->sentence, "the cat sat on the mat");
        else if (sentence_is_blank(a->sentence)) return empty_sentence_error();
        if (!a->kernel_block) a->kernel_block = 2;
        if (!a->kernel_workers) a->kernel_workers = 2;
        if (!a->kernel_ranks) a->kernel_ranks = 3;
        return 0;
    }
    if (a->step) {
        int k = 0;
        while (k < N_STEPS && strcmp(a->step, STEPS[k]) != 0) k++;
        if (k == N_STEPS)
            return cli_error(EXIT_USAGE, "unknown --step '%s'; steps: tokens x wq wk wv q k v "
                             "scores scaled weights output summary", a->step);
    }
    if (a->source && (a->embeddings || a->causal || a->positions == ATTN_EXPLAIN_SINUSOIDAL))
        return cli_error(EXIT_USAGE, "--source reads a second sentence: not with --embeddings, --causal (two sentences "
                         "have no common order) or --positions sinusoidal");
    if (a->heads > 1 && (a->embeddings || a->wq || a->random_head || a->mode != ATTN_EXPLAIN_QKV))
        return cli_error(EXIT_USAGE, "--heads runs the toy's own heads: not with --embeddings, --wq, --random-head or --mode");
    if (a->heads > 1 && a->step && strcmp(a->step, "weights") && strcmp(a->step, "summary") && strcmp(a->step, "output"))
        return cli_error(EXIT_USAGE, "with --heads, --step is weights, summary or output");
    if (a->positions && a->mode != ATTN_EXPLAIN_QKV)
        return cli_error(EXIT_USAGE, "--positions needs --mode qkv: positions enter through the projections");
    if (a->scale_by_d_model && (a->no_scale || a->mode != ATTN_EXPLAIN_QKV))
        return cli_error(EXIT_USAGE, "--scale-by d_model changes the scaling: not with --no-scale or --mode dot/average");
    if (a->additive && (a->json || a->heads > 1 || a->step || a->mode != ATTN_EXPLAIN_QKV))
        return cli_error(EXIT_USAGE, "--score additive adds a section to the text: not with --json, --heads, --step or --mode");
    if (a->trained && (a->random_head || a->wq || a->embeddings || a->mode != ATTN_EXPLAIN_QKV || a->heads > 1 ||
                       a->positions || a->source))
        return cli_error(EXIT_USAGE, "--trained explains attn train's head as it was trained: toy sentences, mode qkv, one "
                         "head, no positions and no --source");
    if (a->mode != ATTN_EXPLAIN_QKV) {
        const char *mode = a->mode == ATTN_EXPLAIN_DOT ? "dot" : "average";
        if (a->tied) return cli_error(EXIT_USAGE, "--tied ties W_K to W_Q; --mode %s has no projections", mode);
        if (a->random_head || a->wq || a->wk || a->wv) /* else dropped without a word */
            return cli_error(EXIT_USAGE, "%s W_Q, W_K and W_V, and --mode %s has no projections",
                             a->random_head ? "--random-head picks" : "--wq, --wk and --wv give", mode);
        /* The step would print nothing, and say nothing of why. */
        if (a->step && a->step[0] == 'w' && a->step[1] && strchr("qkv", a->step[1]) && !a->step[2])
            return cli_error(EXIT_USAGE, "--step %s: --mode %s has no projections, so no W_%c (q, k and v are X)",
                             a->step, mode, a->step[1] - 'a' + 'A');
    }
    if (a->json && a->step)
        return cli_error(EXIT_USAGE, "--json prints every matrix and --step one step of the text: give one of them");
    int nw = !!a->wq + !!a->wk + !!a->wv;
    if (nw != 0 && nw != 3) return cli_error(EXIT_USAGE, "--wq, --wk and --wv go together");
    if (a->tied && a->wk) /* else W_K read from it, then replaced by W_Q without a word */
        return cli_error(EXIT_USAGE, "--tied uses W_Q as W_K: --wk %s would go unused (for tied weights of your own, "
                         "give one file as --wq and --wk)", a->wk);
    if (nw && a->random_head)
        return cli_error(EXIT_USAGE, "--random-head chooses the toy's weights; it cannot go with --wq");
    if (a->embeddings && given)
        return cli_error(EXIT_USAGE, "give a sentence or --embeddings, not both");
    if (given && sentence_is_blank(a->sentence)) return empty_sentence_error();
    if (a->tokens && !a->embeddings) return cli_error(EXIT_USAGE, "--tokens labels --embeddings rows");
    /* Labels are printed as given: a newline would break the tables, an
     * escape sequence would reach the terminal (ESC [, or its C1 form
     * U+009B; a lone byte 0x9b is that on an 8-bit terminal, and no UTF-8
     * terminal draws it). */
    int label = 1;
    for (const char *p = a->tokens; p; label++) {
        size_t len = strcspn(p, ",");
        if (len == 0) return cli_error(EXIT_USAGE, "--tokens: label %d is empty", label);
        for (size_t i = 0, k; i < len; i += k) {
            const unsigned char *u = (const unsigned char *)p + i;
            uint32_t cp;
            if (!(k = (size_t)cli_utf8_char(u, len - i, &cp)))
                return cli_error(EXIT_USAGE, "--tokens: label %d is not UTF-8 (the byte 0x%02x)", label, *u);
            if (cp < 0x20 || cp == 0x7f)
                return cli_error(EXIT_USAGE, "--tokens: label %d has a control character (0x%02x)", label, *u);
            if (cp >= 0x80 && cp <= 0x9f)
                return cli_error(EXIT_USAGE, "--tokens: label %d has a control character (U+%04X)", label,
                                 (unsigned)cp);
        }
        p = p[len] ? p + len + 1 : NULL;
    }
    if (!a->embeddings && !given) strcpy(a->sentence, "the cat sat on the mat");
    return 0;
}

/* What each option sets, for cli_check_repeats. --vocab and --cost are
 * left out: they refuse every other argument, themselves included. */
static const cli_setting EXPLAIN_SETTINGS[] = {
    {"--embeddings", NULL, true, 0}, {"--tokens", NULL, true, 1},   {"--wq", NULL, true, 2},
    {"--wk", NULL, true, 3},         {"--wv", NULL, true, 4},       {"--step", NULL, true, 5},
    {"--color", NULL, true, 6},      {"--source", NULL, true, 7},   {"--score", NULL, true, 8},
    {"--kernel", NULL, false, 9},    {"--block", NULL, true, 10},   {"--workers", NULL, true, 11},
    {"--ranks", NULL, true, 12},     {"--heads", NULL, true, 13},   {"--positions", NULL, true, 14},
    {"--scale-by", NULL, true, 15},  {"--mode", NULL, true, 16},    {"--tied", NULL, false, 17},
    {"--trained", NULL, false, 18},  {"--causal", NULL, false, 19}, {"--no-scale", NULL, false, 20},
    {"--random-head", NULL, false, 21}, {"--json", NULL, false, 22},
    {NULL, NULL, false, 0},
};

static int parse_args(int argc, char **argv, explain_args *a) {
    int code = 0;
    const char *val = NULL;
    size_t used = 0;
    bool given = false; /* a sentence was given, even an empty one */
    a->colour = "auto";
    if (cli_help_asked(argc, argv, EXPLAIN_SETTINGS)) {
        cli_print_usage(stdout, EXPLAIN_USAGE);
        explain_print_vocabulary_words();
        return -1;
    }
    if ((code = cli_check_repeats(argc, argv, EXPLAIN_SETTINGS))) return code;
    for (int i = 1; i < argc && !code;) {
        const char *arg = argv[i];
        if ((strcmp(arg, "--vocab") == 0 || strcmp(arg, "--cost") == 0) && argc != 2) {
            /* Each prints a table of its own: a sentence, --json or a typo
             * given with it would be dropped without a word. */
            code = cli_error(EXIT_USAGE, "%s takes no other arguments", arg);
        } else if (strcmp(arg, "--vocab") == 0) {
            explain_print_vocabulary();
            return -1;
        } else if (strcmp(arg, "--cost") == 0) { /* run after parsing: the fuzzer stops there */
            a->cost = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--embeddings", &a->embeddings, &code) ||
                   cli_option(argc, argv, &i, NULL, "--tokens", &a->tokens, &code) ||
                   cli_option(argc, argv, &i, NULL, "--wq", &a->wq, &code) ||
                   cli_option(argc, argv, &i, NULL, "--wk", &a->wk, &code) ||
                   cli_option(argc, argv, &i, NULL, "--wv", &a->wv, &code) ||
                   cli_option(argc, argv, &i, NULL, "--step", &a->step, &code) ||
                   cli_option(argc, argv, &i, NULL, "--color", &a->colour, &code) ||
                   cli_option(argc, argv, &i, NULL, "--source", &a->source, &code)) {
        } else if (cli_option(argc, argv, &i, NULL, "--score", &val, &code)) {
            if (val && strcmp(val, "additive") == 0) a->additive = true;
            else if (val && strcmp(val, "dot") != 0) code = cli_bad_value("--score", val, "is not dot or additive");
        } else if (strcmp(arg, "--kernel") == 0) {
            a->kernel = true, i++;
        } else if (cli_option(argc, argv, &i, NULL, "--block", &val, &code) ||
                   cli_option(argc, argv, &i, NULL, "--workers", &val, &code) ||
                   cli_option(argc, argv, &i, NULL, "--ranks", &val, &code)) {
            long v = 0; /* arg is "--block", "--block=N", "--workers" ... */
            int *dst = arg[2] == 'b' ? &a->kernel_block : arg[2] == 'w' ? &a->kernel_workers : &a->kernel_ranks;
            if (val && !cli_parse_int(val, 1, 8, &v))
                code = cli_bad_value(arg[2] == 'b' ? "--block" : arg[2] == 'w' ? "--workers" : "--ranks", val,
                                     "is not a whole number from 1 to 8");
            *dst = (int)v;
        } else if (cli_option(argc, argv, &i, NULL, "--heads", &val, &code)) {
            long h = 0;
            if (val && !cli_parse_int(val, 1, 3, &h)) code = cli_bad_value("--heads", val, "is not 1, 2 or 3");
            a->heads = (int)h;
        } else if (cli_option(argc, argv, &i, NULL, "--positions", &val, &code)) {
            if (val && strcmp(val, "none") == 0) a->positions = ATTN_EXPLAIN_NO_POSITIONS;
            else if (val && strcmp(val, "sinusoidal") == 0) a->positions = ATTN_EXPLAIN_SINUSOIDAL;
            else if (val && strcmp(val, "rope") == 0) a->positions = ATTN_EXPLAIN_ROPE;
            else if (val) code = cli_bad_value("--positions", val, "is not none, sinusoidal or rope");
        } else if (cli_option(argc, argv, &i, NULL, "--scale-by", &val, &code)) {
            if (val && strcmp(val, "d_model") == 0) a->scale_by_d_model = true;
            else if (val && strcmp(val, "d_k") != 0) code = cli_bad_value("--scale-by", val, "is not d_k or d_model");
        } else if (cli_option(argc, argv, &i, NULL, "--mode", &val, &code)) {
            if (!val) break;
            if (strcmp(val, "qkv") == 0) a->mode = ATTN_EXPLAIN_QKV;
            else if (strcmp(val, "dot") == 0) a->mode = ATTN_EXPLAIN_DOT;
            else if (strcmp(val, "average") == 0) a->mode = ATTN_EXPLAIN_AVERAGE;
            else code = cli_bad_value("--mode", val, "is not average, dot or qkv");
        } else if (strcmp(arg, "--tied") == 0) {
            a->tied = true, i++;
        } else if (strcmp(arg, "--trained") == 0) {
            a->trained = a->causal = true, i++;
        } else if (strcmp(arg, "--causal") == 0 || strcmp(arg, "--no-scale") == 0 ||
                   strcmp(arg, "--random-head") == 0 || strcmp(arg, "--json") == 0) {
            bool *flag = arg[2] == 'c' ? &a->causal : arg[2] == 'n' ? &a->no_scale
                         : arg[2] == 'r' ? &a->random_head : &a->json;
            *flag = true;
            i++;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            code = cli_unknown_argument("explain", arg);
        } else {
            /* Words of the sentence: the arguments joined by spaces. */
            given = true;
            int n = snprintf(a->sentence + used, sizeof a->sentence - used, "%s%s", used ? " " : "", arg);
            if (n < 0 || (size_t)n >= sizeof a->sentence - used)
                code = cli_error(EXIT_USAGE, "the sentence is longer than %zu bytes",
                                 sizeof a->sentence - 1);
            else used += (size_t)n;
            i++;
        }
    }
    return code ? code : check_args(a, given);
}

/* A 2-D float .npy (f16, f32 or f64) as doubles. */
static int load_matrix(const char *flag, const char *path, int *rows, int *cols, double **out) {
    attn_tensor t;
    attn_error err;
    int code = cli_read_npy(&t, flag, path);
    if (code) return code;
    char shape[64];
    if (t.rank != 2 || t.dtype == ATTN_BOOL || t.shape[0] < 1 || t.shape[1] < 1 ||
        t.shape[0] > 4096 || t.shape[1] > 4096) {
        code = cli_error(EXIT_DATA, "%s %s: need a 2-D float array of at most 4096 x 4096, got %s %s",
                         flag, path, cli_dtype_name(t.dtype), cli_shape(shape, sizeof shape, &t));
    } else {
        *rows = (int)t.shape[0], *cols = (int)t.shape[1];
        *out = malloc(sizeof(double) * (size_t)(*rows) * (size_t)(*cols));
        attn_tensor d;
        if (!*out) code = cli_error(EXIT_DATA, "out of memory reading %s", path);
        else if (attn_tensor_init(&d, *out, ATTN_F64, 2, t.shape, NULL, &err) ||
                 attn_tensor_convert(&d, &t, &err))
            code = cli_error(EXIT_DATA, "%s %s: %s", flag, path, err.message);
    }
    attn_npy_free(&t);
    return code;
}

static int load_embeddings(const explain_args *a, explain_model *m) {
    int code = load_matrix("--embeddings", a->embeddings, &m->n, &m->d_model, &m->X);
    if (code) return code;
    if (m->n > ATTN_TOY_MAX_TOKENS)
        return cli_error(EXIT_DATA, "--embeddings %s has %d rows; at most %d tokens", a->embeddings,
                         m->n, ATTN_TOY_MAX_TOKENS);
    if (!a->tokens) {
        m->tokens = numbered_labels("t", m->n);
    } else {
        int count = 1;
        for (const char *p = a->tokens; *p; p++) count += *p == ',';
        if (count != m->n)
            return cli_error(EXIT_DATA, "--tokens has %d label%s but --embeddings %s has %d row%s", count,
                             cli_plural(count), a->embeddings, m->n, cli_plural(m->n));
        m->tokens = calloc((size_t)m->n, sizeof *m->tokens);
        const char *p = a->tokens;
        for (int i = 0; i < m->n; i++) {
            size_t len = strcspn(p, ",");
            m->tokens[i] = strndup(p, len);
            p += len + (p[len] == ',');
        }
    }
    m->features = numbered_labels("x", m->d_model);
    return 0;
}

/* A sentence of the toy's words: its X, labels and ids (ids may be NULL). */
static int read_sentence(const explain_args *a, const char *text, const char *what, int *n, double **X, char ***labels,
                         int **ids) {
    attn_toy_token tok[ATTN_TOY_MAX_TOKENS];
    attn_error err;
    if (attn_toy_tokenize(tok, ATTN_TOY_MAX_TOKENS, n, text, &err))
        return cli_error(EXIT_DATA, "%s%s", what, err.message);
    *X = malloc(sizeof(double) * (size_t)*n * ATTN_TOY_D_MODEL);
    *labels = calloc((size_t)*n, sizeof **labels);
    if (!*X || !*labels) return cli_error(EXIT_DATA, "out of memory");
    /* The text labels repeated words by position; the JSON keeps the words. */
    const char *words[ATTN_TOY_MAX_TOKENS];
    for (int i = 0; i < *n; i++) words[i] = attn_toy_word(tok[i].id);
    for (int i = 0; i < *n; i++) (*labels)[i] = a->json ? strdup(words[i]) : cli_word_label(words, *n, i);
    attn_toy_embed(*X, tok, *n, NULL);
    if (ids && (*ids = malloc(sizeof(int) * (size_t)*n)))
        for (int i = 0; i < *n; i++) (*ids)[i] = tok[i].id;
    return 0;
}

static int load_sentence(const explain_args *a, explain_model *m) {
    m->d_model = ATTN_TOY_D_MODEL;
    int code = read_sentence(a, a->sentence, "", &m->n, &m->X, &m->tokens, &m->ids);
    if (!code && a->source) code = read_sentence(a, a->source, "--source: ", &m->n_src, &m->X_src, &m->src_tokens, NULL);
    if (code) return code;
    m->features = calloc(ATTN_TOY_D_MODEL, sizeof *m->features);
    for (int j = 0; m->features && j < ATTN_TOY_D_MODEL; j++) m->features[j] = strdup(attn_toy_feature(j));
    return 0;
}

static int load_weights(const explain_args *a, explain_model *m) {
    if (a->mode != ATTN_EXPLAIN_QKV) {
        m->d_k = m->d_v = m->d_model;
        m->head = "none";
        m->q_cols = copied_labels((const char *const *)m->features, m->d_model);
        m->v_cols = copied_labels((const char *const *)m->features, m->d_model);
        return 0;
    }
    if (a->trained) { /* attn train's head: 1000 Adam steps from seed 1 */
        attn_train_options o = attn_train_options_default();
        m->d_k = ATTN_TOY_D_K, m->d_v = ATTN_TRAIN_D_V, m->head = "trained (attn train, 1000 steps, seed 1)";
        m->W_Q = malloc(sizeof(double) * ATTN_TOY_D_MODEL * ATTN_TOY_D_K);
        m->W_K = malloc(sizeof(double) * ATTN_TOY_D_MODEL * ATTN_TOY_D_K);
        m->W_V = malloc(sizeof(double) * ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V);
        attn_error err;
        if (!m->W_Q || !m->W_K || !m->W_V) return cli_error(EXIT_DATA, "out of memory");
        if (cli_stop != CLI_RUN) o.steps = 1; /* the fuzzers check loading, not training */
        if (attn_train_head(m->W_Q, m->W_K, m->W_V, NULL, NULL, &o, &err)) return cli_error(EXIT_DATA, "%s", err.message);
        static const char *const TRAINED_VALUES[ATTN_TRAIN_D_V] = {"noun", "animal", "thing", "place"};
        m->v_cols = copied_labels(TRAINED_VALUES, ATTN_TRAIN_D_V);
    } else if (a->wq) {
        const char *flags[3] = {"--wq", "--wk", "--wv"}, *paths[3] = {a->wq, a->wk, a->wv};
        double **dst[3] = {&m->W_Q, &m->W_K, &m->W_V};
        int rows[3], cols[3], code;
        for (int i = 0; i < 3; i++)
            if ((code = load_matrix(flags[i], paths[i], &rows[i], &cols[i], dst[i]))) return code;
        for (int i = 0; i < 3; i++)
            if (rows[i] != m->d_model)
                return cli_error(EXIT_DATA, "%s %s has %d row%s but X has d_model = %d column%s%s",
                                 flags[i], paths[i], rows[i], cli_plural(rows[i]), m->d_model,
                                 cli_plural(m->d_model),
                                 cols[i] == m->d_model ? " (transposed? a torch nn.Linear's .weight is "
                                                         "(d_out, d_in): save .weight.T)" : "");
        if (cols[0] != cols[1])
            return cli_error(EXIT_DATA, "--wq has d_k = %d column%s but --wk has %d", cols[0], cli_plural(cols[0]),
                             cols[1]);
        m->d_k = cols[0], m->d_v = cols[2], m->head = "custom";
        m->v_cols = numbered_labels("v", m->d_v);
    } else {
        if (m->d_model != ATTN_TOY_D_MODEL)
            return cli_error(EXIT_DATA, "--embeddings has d_model = %d, but the toy's weights need %d: "
                             "give --wq, --wk and --wv, or use --mode dot or average",
                             m->d_model, ATTN_TOY_D_MODEL);
        m->d_k = m->d_v = ATTN_TOY_D_K;
        size_t bytes = sizeof(double) * ATTN_TOY_D_MODEL * ATTN_TOY_D_K;
        m->W_Q = malloc(bytes), m->W_K = malloc(bytes), m->W_V = malloc(bytes);
        /* With RoPE the wired head uses its word-order wiring (ATTN_TOY_ORDER). */
        attn_toy_head head = a->random_head ? ATTN_TOY_RANDOM
                             : a->positions == ATTN_EXPLAIN_ROPE ? ATTN_TOY_ORDER : ATTN_TOY_WIRED;
        attn_error err;
        if (attn_toy_weights(m->W_Q, m->W_K, m->W_V, head, &err))
            return cli_error(EXIT_DATA, "%s", err.message);
        m->head = a->random_head ? "random" : head == ATTN_TOY_ORDER ? "wired for word order" : "wired";
        if (head != ATTN_TOY_RANDOM) {
            const char *names[ATTN_TOY_D_K];
            for (int j = 0; j < ATTN_TOY_D_K; j++) names[j] = attn_toy_value_feature(head, j);
            m->v_cols = copied_labels(names, ATTN_TOY_D_K);
        } else {
            m->v_cols = numbered_labels("v", m->d_v);
        }
    }
    m->q_cols = numbered_labels("d", m->d_k);
    if (a->tied) { /* one projection for both: the scores become symmetric */
        memcpy(m->W_K, m->W_Q, sizeof(double) * (size_t)m->d_model * (size_t)m->d_k);
        snprintf(m->head_tied, sizeof m->head_tied, "%s, tied", m->head);
        m->head = m->head_tied;
    }
    return 0;
}

/* ---- JSON ---------------------------------------------------------------- */

static int print_json(const explain_model *m, const attn_explain *ex, const attn_explain_input *in) {
    attn_explain_labels labels = {(const char *const *)m->tokens, (const char *const *)m->features,
                                  (const char *const *)m->v_cols, m->head, (const char *const *)m->src_tokens};
    size_t len = 0;
    attn_error err;
    if (attn_explain_json(NULL, 0, &len, ex, in, &labels, &err))
        return cli_error(EXIT_DATA, "%s", err.message);
    char *json = malloc(len + 1);
    if (!json) return cli_error(EXIT_DATA, "out of memory for the JSON");
    attn_explain_json(json, len + 1, &len, ex, in, &labels, NULL);
    fputs(json, stdout);
    free(json);
    return 0;
}

int cmd_explain(int argc, char **argv) {
    explain_args a = {{0}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ATTN_EXPLAIN_QKV, false, false, false, false, false, false, false, false, ATTN_EXPLAIN_NO_POSITIONS, 1, false, false, 0, 0, 0};
    int code = parse_args(argc, argv, &a);
    if (code || cli_stop == CLI_STOP_AFTER_PARSE) return code < 0 ? 0 : code;
    if (a.cost) return cli_explain_cost();
    if (a.kernel) return explain_kernel(&a, cli_colour_wanted(a.colour, stdout));
    explain_model m = {0};
    code = a.embeddings ? load_embeddings(&a, &m) : load_sentence(&a, &m);
    if (!code) code = load_weights(&a, &m);
    if (cli_stop == CLI_STOP_AFTER_LOAD) {
        free_model(&m);
        return code;
    }
    if (!code && a.heads > 1) {
        code = explain_heads(&a, &m, cli_colour_wanted(a.colour, stdout));
        free_model(&m);
        return code;
    }
    attn_explain ex = {0};
    attn_explain_input in = {m.n, m.d_model, m.d_k, m.d_v, m.X, m.W_Q, m.W_K, m.W_V,
                             a.mode, a.causal, a.no_scale, a.scale_by_d_model, a.positions,
                             m.X_src, m.n_src};
    if (!code) {
        attn_error err;
        if (attn_explain_run(&ex, &in, &err)) code = cli_error(EXIT_DATA, "%s", err.message);
    }
    if (!code) {
        if (a.json) code = print_json(&m, &ex, &in);
        else explain_print_text(&a, &m, &ex, cli_colour_wanted(a.colour, stdout));
        if (!a.json && a.additive) code = explain_additive(&a, &m, &ex);
    }
    attn_explain_free(&ex);
    free_model(&m);
    return code;
}
