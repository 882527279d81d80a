/* explain.h -- what `attn explain`'s files share: the parsed arguments, the
 * model being explained, and the text printers (explain_print.c). */
#ifndef ATTN_CLI_EXPLAIN_H
#define ATTN_CLI_EXPLAIN_H

#include "attn_teach.h"
#include "cli.h"
#include "heatmap.h"

typedef struct explain_args {
    char sentence[4096];
    const char *embeddings, *tokens, *wq, *wk, *wv, *step, *colour, *source;
    attn_explain_mode mode;
    bool causal, no_scale, random_head, json, tied, cost, scale_by_d_model, trained;
    attn_explain_positions positions;
    int heads; /* --heads: 1 (the default) to 3 */
    bool additive; /* --score additive */
    bool kernel;   /* --kernel: how a fast kernel computes it */
    int kernel_block, kernel_workers, kernel_ranks; /* --block, --workers, --ranks */
} explain_args;

/* What is explained: labels, X and the projections, all owned here. */
typedef struct explain_model {
    int n, d_model, d_k, d_v;
    char **tokens;
    char **features, **q_cols, **v_cols;
    double *X, *W_Q, *W_K, *W_V;
    const char *head; /* "wired", "random", "custom", ...; head_tied with --tied */
    char head_tied[64]; /* the head's name and ", tied" */
    int *ids;         /* the toy's vocabulary ids of the tokens, or NULL (--embeddings) */
    int n_src;        /* --source: its tokens, their labels and X, else 0 and NULL */
    char **src_tokens;
    double *X_src;
} explain_model;

/* Free an array of n malloc'd labels (NULL is fine). */
void explain_free_labels(char **l, int n);

/* --help's list of the toy's words, and --vocab's table of their features. */
void explain_print_vocabulary_words(void);
void explain_print_vocabulary(void);

/* The pieces of the text: a step's heading ("title  (rows, cols)" and why),
 * a labelled matrix, the weights (n, nk; "·" above the diagonal when
 * causal, and row sums), and who attends to whom (each word's top three). */
void explain_heading(const char *title, int rows, int cols, const char *why);
void explain_matrix(const double *d, int rows, int cols, char **rl, char **cl, cli_palette p, bool sums,
                    cli_colours colour);
void explain_weights_matrix(const double *d, int n, int nk, char **labels, char **keys, bool causal, cli_colours colour);
void explain_summary(const explain_model *m, const attn_explain *ex, bool causal);

/* --heads N (explain_heads.c): N heads of the toy side by side, their
 * outputs concatenated and mixed by W_O; text or JSON. */
int explain_heads(const explain_args *a, const explain_model *m, cli_colours colour);

/* --score additive (explain_additive.c): additive attention on ex's Q and K
 * beside the dot product, and the cost of each, measured. */
int explain_additive(const explain_args *a, const explain_model *m, const attn_explain *ex);

/* --kernel (explain_kernel.c): the second part, how a fast kernel computes
 * the head, as text or JSON; its steps' names for --step. */
enum { EXPLAIN_KERNEL_N_STEPS = 9 };
extern const char *const EXPLAIN_KERNEL_STEPS[EXPLAIN_KERNEL_N_STEPS];
int explain_kernel(const explain_args *a, cli_colours colour);

/* Every step of ex as text, as a->step and a's options ask. */
void explain_print_text(const explain_args *a, const explain_model *m, const attn_explain *ex, cli_colours colour);

#endif /* ATTN_CLI_EXPLAIN_H */
