/* explain_print.c -- `attn explain` as text: each step's matrix with its
 * heading and why, the summary of who attends to whom, and the closing
 * formula, for the mode and options given. */
#include "explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The toy's vocabulary, wrapped under a heading (for --help). */
void explain_print_vocabulary_words(void) {
    printf("\n");
    cli_prose(stdout, 0, 3, "the toy's vocabulary (%d words; attn explain --vocab shows their features):",
              attn_toy_vocab_size());
    printf(" ");
    int col = 1;
    for (int id = 0; id < attn_toy_vocab_size(); id++) {
        const char *w = attn_toy_word(id);
        if (col + 1 + (int)strlen(w) > cli_width(stdout) - 2) printf("\n "), col = 1;
        col += printf(" %s", w);
    }
    printf("\n");
}


/* --vocab: each word and its row of X, the features it has. */
void explain_print_vocabulary(void) {
    enum { COLS = 1 + ATTN_TOY_D_MODEL, MAX_WORDS = 64 };
    cli_prose(stdout, 0, 0, "The toy model's %d words. Each is a row of X: %d features, 1 where the word has the "
              "feature (in between where it partly has it).", attn_toy_vocab_size(), ATTN_TOY_D_MODEL);
    printf("\n");
    int n = attn_toy_vocab_size() < MAX_WORDS ? attn_toy_vocab_size() : MAX_WORDS;
    char head[COLS][8], cell[MAX_WORDS][COLS][8]; /* each cell's text: a word, "." or the feature's value */
    const char *heads[COLS], *cells[MAX_WORDS * COLS];
    int width[COLS];
    snprintf(head[0], sizeof head[0], "word");
    for (int j = 0; j < ATTN_TOY_D_MODEL; j++) snprintf(head[1 + j], sizeof head[0], "%.6s", attn_toy_feature(j));
    for (int id = 0; id < n; id++) {
        attn_toy_token t = {id, 0, 0};
        double x[ATTN_TOY_D_MODEL];
        attn_toy_embed(x, &t, 1, NULL);
        snprintf(cell[id][0], sizeof cell[id][0], "%.7s", attn_toy_word(id));
        for (int j = 0; j < ATTN_TOY_D_MODEL; j++)
            snprintf(cell[id][1 + j], sizeof cell[id][0], x[j] == 0 ? "." : "%.1f", x[j]);
    }
    for (int j = 0; j < COLS; j++) heads[j] = head[j], width[j] = j ? 6 : 7;
    for (int id = 0; id < n; id++)
        for (int j = 0; j < COLS; j++) cells[id * COLS + j] = cell[id][j];
    cli_table t = {COLS, n, 1, width, NULL, heads, cells};
    cli_print_table(stdout, &t);
}


/* ---- text ---------------------------------------------------------------- */

static bool show(const explain_args *a, const char *step) { return !a->step || strcmp(a->step, step) == 0; }

void explain_heading(const char *title, int rows, int cols, const char *why) {
    printf("\n");
    cli_prose(stdout, 0, 3, "%s  (%d, %d)", title, rows, cols);
    if (why) cli_prose(stdout, 3, 3, "%s", why);
}

void explain_matrix(const double *d, int rows, int cols, char **rl, char **cl, cli_palette p,
                   bool sums, cli_colours colour) {
    cli_matrix mx = {d, rows, cols, (const char *const *)rl, (const char *const *)cl, p, sums, false};
    cli_print_matrix(stdout, &mx, colour);
}

/* The weights (n, nk): under a causal mask the cells above the diagonal are
 * printed as "·" (masked: exactly 0, and not a choice of the softmax). */
void explain_weights_matrix(const double *d, int n, int nk, char **labels, char **keys, bool causal, cli_colours colour) {
    cli_matrix mx = {d, n, nk, (const char *const *)labels, (const char *const *)keys, CLI_SEQUENTIAL, true, causal};
    cli_print_matrix(stdout, &mx, colour);
}

/* A row is nearly uniform when no visible weight is more than 5 points from
 * an even split: nothing stands out, so the order of its top words means
 * nothing. */
static bool nearly_uniform(const double *row, int n, bool causal, int i) {
    int seen = causal ? i + 1 : n;
    if (seen < 2) return false;
    for (int j = 0; j < seen; j++)
        if (fabs(row[j] - 1.0 / seen) > 0.05) return false;
    return true;
}

/* "sat      -> cat 40% ████  sat 16% █  on 16% █" : the top three per word. */
void explain_summary(const explain_model *m, const attn_explain *ex, bool causal) {
    int w = 4, nk = ex->n_keys, width = cli_width(stdout);
    char **keys = m->src_tokens ? m->src_tokens : m->tokens; /* cross-attention: the source's words */
    /* Labels as the matrices show them: a long one cut with "…", so that the lines fit. */
    for (int i = 0; i < m->n; i++) w = cli_display_width(m->tokens[i]) > w ? cli_display_width(m->tokens[i]) : w;
    if (w > CLI_LABEL_COLUMNS) w = CLI_LABEL_COLUMNS;
    for (int i = 0; i < m->n; i++) {
        const double *row = ex->weights + (size_t)i * nk;
        bool used[ATTN_TOY_MAX_TOKENS] = {false};
        printf("   ");
        cli_print_label_left(stdout, m->tokens[i], w);
        printf(" ->");
        int col = 3 + w + 3;
        if (nearly_uniform(row, nk, causal, i)) { /* the long form when it fits */
            double share = 100.0 / (causal ? i + 1 : nk);
            char each[32]; /* "17% each (±5)": the short form, under the word when even it does not fit */
            snprintf(each, sizeof each, "%.0f%% each (±5)", share);
            if (col + 52 <= width) printf("  nearly uniform: every word it sees gets %.0f%% (±5)\n", share);
            else if (col + 18 + cli_display_width(each) <= width) printf("  nearly uniform: %s\n", each);
            else printf("  nearly uniform:\n%*s%s\n", col + 2, "", each);
            continue;
        }
        for (int k = 0; k < 3 && k < nk; k++) {
            int best = -1;
            for (int j = 0; j < nk; j++)
                if (!used[j] && (best < 0 || row[j] > row[best])) best = j;
            used[best] = true;
            if (row[best] <= 0) break;
            /* "  word NN% " and the bar: an entry that would not fit the line is left out. */
            long eighths = lround(row[best] * 10 * 8); /* as cli_print_bar draws it */
            int kw = cli_display_width(keys[best]) < CLI_LABEL_COLUMNS ? cli_display_width(keys[best]) : CLI_LABEL_COLUMNS;
            int need = 2 + kw + 5 + (int)(eighths / 8 + (eighths % 8 != 0));
            if (k && col + need > width) break;
            col += need;
            printf("  ");
            cli_print_label_left(stdout, keys[best], kw);
            printf(" %2.0f%% ", 100 * row[best]);
            cli_print_bar(stdout, row[best], 10);
        }
        printf("\n");
    }
}

/* words[0..n) (or, when words is NULL, the numbers ids[0..n)) joined by
 * spaces into buf. */
static const char *join(char *buf, size_t size, char **words, const int *ids, int n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)(words ? snprintf(buf + used, size - used, "%s%s", i ? " " : "", words[i])
                               : snprintf(buf + used, size - used, "%s%d", i ? " " : "", ids[i]));
    return buf;
}

/* The opening: the story, the tokens, X and the projections. */
static void print_inputs(const explain_args *a, const explain_model *m, const attn_explain *ex, cli_colours colour) {
    bool qkv = a->mode == ATTN_EXPLAIN_QKV;
    int n = m->n;
    if (!a->step) {
        /* With --source the keys and values come from another sentence: not self-attention. */
        printf("%s, step by step\n", m->src_tokens ? "Cross-attention" : "Self-attention");
        if (qkv)
            cli_prose(stdout, 3, 5, "mode qkv, head %s, d_model %d, d_k %d%s%s", m->head, m->d_model, ex->d_k,
                      a->causal ? ", causal" : "", a->no_scale ? ", no scaling" : "");
        else
            cli_prose(stdout, 3, 5, "mode %s: %s, d_model %d%s", a->mode == ATTN_EXPLAIN_DOT ? "dot" : "average",
                      a->mode == ATTN_EXPLAIN_DOT ? "weights from X X^T, no projections, no scaling"
                                                  : "every word gets the same weight",
                      m->d_model, a->causal ? ", causal" : "");
        printf("\n");
        if (a->mode == ATTN_EXPLAIN_AVERAGE)
            cli_prose(stdout, 3, 3, "The simplest way to let words share what they carry: every word receives "
                      "the plain average of the sentence's vectors. Nothing decides who matters.");
        else if (a->mode == ATTN_EXPLAIN_DOT)
            cli_prose(stdout, 3, 3, "Let the words themselves decide how much they matter to each other: score "
                      "every pair by the dot product of their feature vectors (alike words score high), turn "
                      "each row of scores into weights with a softmax, and blend.");
        else
            cli_prose(stdout, 3, 3, "A recurrent network reads one word at a time and must squeeze everything "
                      "it has read into one memory vector. Attention instead lets every word look straight at "
                      "every other word in one step: each word asks a question (its query), every word offers "
                      "a label (its key) and a content (its value). Queries are matched against keys; what a "
                      "word receives is a blend of the values, mixed in the proportions the matches decide.");
    }
    if (show(a, "tokens")) {
        char line[ATTN_TOY_MAX_TOKENS * 48]; /* the words (or ids), one after another */
        printf("\ntokens  (%d)\n", n);
        cli_prose(stdout, 3, 3, "%s", join(line, sizeof line, m->tokens, NULL, n));
        /* The ids right under the words they belong to: after the source's
         * words they read as the source's. */
        if (m->ids) /* the lookup: each word's id is its row of the embedding table */
            cli_prose(stdout, 3, 8, "ids: %s   (rows of the embedding table E, %d words x %d features: attn explain "
                      "--vocab)", join(line, sizeof line, NULL, m->ids, n), attn_toy_vocab_size(), m->d_model);
        if (m->src_tokens) { /* cross-attention: the words that are read */
            cli_prose(stdout, 0, 3, "source tokens  (%d): keys and values come from these", m->n_src);
            cli_prose(stdout, 3, 3, "%s", join(line, sizeof line, m->src_tokens, NULL, m->n_src));
        }
    }
    if (show(a, "x")) {
        explain_heading(m->ids ? "X = E[ids]: the table's row for each word, one column per feature"
                       : "X: one row per word, one column per feature",
                n, m->d_model, m->ids ? "Each word is looked up in the embedding table by its id." : "Your embeddings.");
        explain_matrix(m->X, n, m->d_model, m->tokens, m->features, CLI_DIVERGING, false, colour);
        if (m->X_src) {
            explain_heading("X_source: the source sentence, looked up the same way", m->n_src, m->d_model,
                    "Its rows give the keys and values; the queries still come from X.");
            explain_matrix(m->X_src, m->n_src, m->d_model, m->src_tokens, m->features, CLI_DIVERGING, false, colour);
        }
        if (ex->P) {
            /* Column pairs sin, cos: one frequency per pair, the last one alone when d_model is odd. */
            char title[96];
            int freqs = (m->d_model + 1) / 2;
            snprintf(title, sizeof title, "P: where each word is, sin and cos of its position at %d frequenc%s", freqs,
                     freqs == 1 ? "y" : "ies");
            explain_heading(title, n, m->d_model, "Added to X, so that the projections see which word is where: X + P goes on.");
            char **pl = calloc((size_t)m->d_model, sizeof *pl); /* sin0 cos0 sin1 ...: frequency j / 2 */
            for (int j = 0; pl && j < m->d_model; j++)
                if ((pl[j] = malloc(16))) snprintf(pl[j], 16, "%s%d", j % 2 ? "cos" : "sin", j / 2);
            explain_matrix(ex->P, n, m->d_model, m->tokens, pl, CLI_DIVERGING, false, colour);
            explain_free_labels(pl, m->d_model);
        }
    }
    if (qkv) {
        const char *names[3] = {"W_Q", "W_K", "W_V"}, *steps[3] = {"wq", "wk", "wv"};
        const double *w[3] = {m->W_Q, m->W_K, m->W_V};
        int cols[3] = {m->d_k, m->d_k, m->d_v};
        char **cl[3] = {m->q_cols, m->q_cols, m->v_cols};
        for (int i = 0; i < 3; i++)
            if (show(a, steps[i])) {
                explain_heading(names[i], m->d_model, cols[i],
                        i == 0 ? "The query projection: what each feature makes a word look for."
                        : i == 1 ? "The key projection: what each feature makes a word offer."
                                 : "The value projection: what each word hands over.");
                explain_matrix(w[i], m->d_model, cols[i], m->features, cl[i], CLI_DIVERGING, false, colour);
            }
    }
}

/* Where the head's weights came from, said as the closing's last sentence:
 * only the toy's own heads were wired by hand. The same choice as
 * load_weights makes: --trained, then --wq, then --random-head. */
static const char *weights_origin(const explain_args *a) {
    if (a->trained)
        return "And these weights were learned: `attn train` trained them, from sentences, to make each verb look "
               "at its subject.";
    if (a->wq)
        return "And these weights are the ones you gave (--wq, --wk, --wv): `attn train` shows a head learning "
               "its own, from sentences, to make each verb look at its subject.";
    if (a->random_head)
        return "And these weights are random, as a model's are before it learns: `attn train` shows a head "
               "learning, from sentences, to make each verb look at its subject.";
    return "And these weights were wired by hand, where models learn theirs: `attn train` shows a head learning, "
           "from sentences, to make each verb look at its subject.";
}

/* The division's reason, said of random queries and keys, where it holds,
 * then of this head: the same choice of weights as weights_origin. */
#define WHY_DIVIDE                                                                                                 \
    "Why: for random queries and keys (mean 0, variance 1) a score's spread grows like sqrt(d_k), and dividing "    \
    "brings it back to about 1 whatever d_k is (attn scaling measures it). "
static const char *scaled_reason(const explain_args *a) {
    if (a->trained || a->wq || a->random_head)
        return WHY_DIVIDE "Here the queries and "
               "keys come from these weights and these words, not from such draws: the scores' spread is whatever "
               "they make it.";
    return WHY_DIVIDE "This head is wired, not random: its scores' spread is whatever the wiring makes it.";
}

/* The closing lines: the mode's formula in one line, and what is missing. */
static void print_closing(const explain_args *a) {
    printf("\n");
    if (a->mode == ATTN_EXPLAIN_AVERAGE) {
        /* Under the causal mask word i averages the i + 1 words up to it: the blends differ. */
        cli_prose(stdout, 3, 3, "All of it is one line: output_i = the average of the x_j it sees, %s, whatever "
                  "word it is: nothing is matched. The next step, --mode dot, lets each pair's dot product decide "
                  "the weights.",
                  a->causal ? "(1/(i+1)) sum_{j<=i} x_j, the words up to it" : "(1/n) sum_j x_j, the same blend for every word");
    } else if (a->mode == ATTN_EXPLAIN_DOT) {
        cli_prose(stdout, 3, 3, "All of it is one line: output = softmax(X X^T) X, the words' own vectors as queries, "
                  "keys and values. Words that look alike match (a word's own score, |x|^2, need not be its row's "
                  "largest: a longer vector can outscore it), and a word's question and its answer are the same "
                  "vector. --mode qkv gives each word three different ones through W_Q, W_K and W_V, and divides "
                  "the scores by sqrt(d_k).");
    } else {
        /* The line that was computed: --no-scale and --scale-by d_model left the paper's. */
        cli_prose(stdout, 3, 3, "All of it is one line: %s %s One head asks one question per word; real models run many "
                  "heads at once. %s",
                  a->no_scale ? "output = softmax(Q K^T) V, the paper's Attention(Q, K, V) without its division by "
                                "sqrt(d_k)."
                  : a->scale_by_d_model ? "output = softmax(Q K^T / sqrt(d_model)) V, where the paper's Attention(Q, K, V) "
                                          "divides by sqrt(d_k)."
                                        : "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.",
                  a->positions ? "With positions, word order counts: shuffle the sentence and the weights change, "
                                 "not only their order."
                  : a->causal ? "Only the causal mask sees word order here: shuffle the sentence and each word sees "
                                "other words before it, so the outputs change, not only their order (--positions "
                                "sinusoidal or rope gives the head positions of its own)."
                               : "Nothing here knows word order: shuffle the sentence and each word's output only "
                                 "moves with it (--positions sinusoidal or rope adds it).",
                  weights_origin(a));
    }
}

void explain_print_text(const explain_args *a, const explain_model *m, const attn_explain *ex, cli_colours colour) {
    bool qkv = a->mode == ATTN_EXPLAIN_QKV;
    int n = m->n, nk = ex->n_keys;
    char **keys = m->src_tokens ? m->src_tokens : m->tokens; /* cross-attention: the source's words */
    /* The colours of the signed matrices, unless only weights are shown. */
    if (colour && !(a->step && (strcmp(a->step, "weights") == 0 || strcmp(a->step, "summary") == 0 ||
                                strcmp(a->step, "tokens") == 0)))
        cli_print_legend(stdout, CLI_DIVERGING, colour);
    print_inputs(a, m, ex, colour);
    bool rope = a->positions == ATTN_EXPLAIN_ROPE, added = a->positions == ATTN_EXPLAIN_SINUSOIDAL;
    const char *qtitle[3] = {rope ? "Q = RoPE(X W_Q): each word's query, turned by its position"
                             : added ? "Q = (X + P) W_Q: each word's query" : "Q = X W_Q: each word's query",
                             rope ? "K = RoPE(X W_K): each word's key, turned by its position"
                             : added ? "K = (X + P) W_K: each word's key" : "K = X W_K: each word's key",
                             added ? "V = (X + P) W_V: each word's value" : "V = X W_V: each word's value"};
    const char *steps[3] = {"q", "k", "v"};
    const double *qkvm[3] = {ex->Q, ex->K, ex->V};
    for (int i = 0; i < 3; i++)
        if (show(a, steps[i])) {
            int rows = i ? nk : n;
            if (qkv && i && m->src_tokens) explain_heading(i == 1 ? "K = X_source W_K: each source word's key"
                                                          : "V = X_source W_V: each source word's value", rows, i == 2 ? ex->d_v : ex->d_k, NULL);
            else if (qkv) explain_heading(qtitle[i], rows, i == 2 ? ex->d_v : ex->d_k, NULL);
            else explain_heading(i == 0 ? "Q = X (no projections)" : i == 1 ? "K = X" : "V = X", rows, ex->d_k, NULL);
            explain_matrix(qkvm[i], rows, i == 2 ? ex->d_v : ex->d_k, i ? keys : m->tokens, i == 2 ? m->v_cols : m->q_cols,
                   CLI_DIVERGING, false, colour);
        }
    if (show(a, "scores")) {
        explain_heading(m->src_tokens ? "Q K^T: every query (row) against every source word's key (column)"
                              : "Q K^T: every query (row) against every key (column)", n, nk,
                a->tied ? "With W_K = W_Q, Q K^T = X W_Q W_Q^T X^T is symmetric: a word scores another\n"
                          "   exactly as that word scores it, so attention cannot be one-way."
                        : "A large dot product means the query and the key point the same way.");
        explain_matrix(ex->scores, n, nk, m->tokens, keys, CLI_DIVERGING, false, colour);
    }
    if (show(a, "scaled")) {
        char title[160];
        if (a->mode == ATTN_EXPLAIN_AVERAGE)
            snprintf(title, sizeof title, "scores x 0: every pair gets the same score (plain averaging)");
        else if (!qkv || a->no_scale) /* not the scale's value: with d_k = 1 the division is by sqrt(1) */
            snprintf(title, sizeof title, "scores, not scaled%s", a->causal ? ", future masked" : "");
        else
            snprintf(title, sizeof title, "Q K^T / sqrt(%s) = Q K^T / %.4g%s", a->scale_by_d_model ? "d_model" : "d_k",
                     1.0 / ex->scale, a->causal ? ", future masked with -inf" : "");
        /* Which way the wrong constant errs depends on d_k against d_model: your own projections may be wider. */
        const char *wrong = ex->d_k < m->d_model
                                ? "The wrong constant: a score adds up d_k products, not d_model, so dividing by\n"
                                  "   sqrt(d_model) shrinks the scores more than their spread needs and flattens\n"
                                  "   the weights. In a real model d_model = heads x d_k: with 32 heads the scores\n"
                                  "   come out sqrt(32), almost 6 times, too small."
                            : ex->d_k > m->d_model
                                ? "The wrong constant: a score adds up d_k products, not d_model, and here d_k is\n"
                                  "   the larger, so dividing by sqrt(d_model) shrinks the scores less than their\n"
                                  "   spread needs and sharpens the weights."
                                : "The wrong constant, though not here: a score adds up d_k products, and here\n"
                                  "   d_k = d_model, so the scores are those of sqrt(d_k). In a real model\n"
                                  "   d_model = heads x d_k, and the scores come out too small.";
        explain_heading(title, n, nk, a->scale_by_d_model ? wrong
                             : qkv && !a->no_scale ? scaled_reason(a)
                                                       : NULL);
        explain_matrix(ex->scaled, n, nk, m->tokens, keys, CLI_DIVERGING, false, colour);
    }
    if (show(a, "weights")) {
        explain_heading("weights = softmax of each row", n, nk,
                a->causal ? "Each row sums to 1: how a word splits its attention. Every weight a word can see\n"
                            "   is positive; · marks a later word, masked (its weight is exactly 0)."
                          : "Every weight is positive and each row sums to 1: how a word splits its attention.");
        if (colour) cli_print_legend(stdout, CLI_SEQUENTIAL, colour);
        explain_weights_matrix(ex->weights, n, nk, m->tokens, keys, a->causal, colour);
    }
    if (show(a, "output")) {
        explain_heading(m->src_tokens ? "output = weights V: each word's blend of the source's values"
                              : "output = weights V: each word's blend of the values", n, ex->d_v, NULL);
        explain_matrix(ex->output, n, ex->d_v, m->tokens, m->v_cols, CLI_DIVERGING, false, colour);
    }
    if (show(a, "summary")) {
        printf("\n");
        cli_prose(stdout, 0, 3, "who attends to whom (the top three weights of each word)");
        explain_summary(m, ex, a->causal);
    }
    if (!a->step) print_closing(a);
}

