/* explain_heads.c -- `attn explain --heads N`: multi-head attention on the
 * toy model, step by step. Each head asks its own question of the same
 * words: "who did it?" (the wired head: verbs find animals), "where?" (verbs
 * and prepositions find places), and, with three, an untrained head that
 * asks nothing in particular. Their outputs go side by side (the concat),
 * and W_O writes each head's findings back into the word's features. */
#include "explain.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_HEADS = 3, DK = ATTN_TOY_D_K, DM = ATTN_TOY_D_MODEL };

static const attn_toy_head HEADS[MAX_HEADS] = {ATTN_TOY_WIRED, ATTN_TOY_WHERE, ATTN_TOY_RANDOM};
static const char *const QUESTION[MAX_HEADS] = {"who did it? verbs look for animals, prepositions for things",
                                                "where? verbs and prepositions look for places, nouns for prepositions",
                                                "untrained: random weights, no question in particular"};

/* W_O (N·d_v, d_model): each wired head's value features go back to the X
 * columns of the same name; the untrained head's rows are 0 (it found
 * nothing W_O would keep). */
static void output_projection(double *wo, int heads) {
    memset(wo, 0, sizeof(double) * (size_t)(heads * DK * DM));
    for (int h = 0; h < heads && h < 2; h++)
        for (int j = 0; j < DK; j++)
            for (int f = 0; f < DM; f++)
                wo[(h * DK + j) * DM + f] = strcmp(attn_toy_value_feature(HEADS[h], j), attn_toy_feature(f)) == 0;
}

static void put_matrix_json(const char *key, const double *d, int rows, int cols, bool last) {
    printf("  \"%s\": ", key);
    cli_json_matrix(stdout, d, rows, cols);
    printf("%s\n", last ? "" : ",");
}

/* {"heads": [each head's explain JSON], "concat", "W_O", "output"}. */
static int print_json(const explain_model *m, attn_explain *ex, const attn_explain_input *in, int heads,
                      const char (*names)[32], const double *concat, const double *wo, const double *out) {
    printf("{\n  \"heads\": [\n");
    for (int h = 0; h < heads; h++) {
        static const char *const NUMBERED[DK] = {"v0", "v1", "v2", "v3"}; /* the untrained head's values */
        const char *vals[DK];
        for (int j = 0; j < DK; j++) vals[j] = attn_toy_value_feature(HEADS[h], j) ? attn_toy_value_feature(HEADS[h], j) : NUMBERED[j];
        attn_explain_labels labels = {(const char *const *)m->tokens, (const char *const *)m->features, vals, names[h],
                                      (const char *const *)m->src_tokens};
        size_t len = 0;
        attn_error err;
        if (attn_explain_json(NULL, 0, &len, &ex[h], &in[h], &labels, &err)) return cli_error(EXIT_DATA, "%s", err.message);
        char *json = malloc(len + 1);
        if (!json) return cli_error(EXIT_DATA, "out of memory for the JSON");
        attn_explain_json(json, len + 1, &len, &ex[h], &in[h], &labels, NULL);
        json[len - 1] = '\0'; /* the trailing newline */
        printf("%s%s\n", json, h + 1 < heads ? "," : "");
        free(json);
    }
    printf("  ],\n");
    put_matrix_json("concat", concat, m->n, heads * DK, false);
    put_matrix_json("W_O", wo, heads * DK, DM, false);
    put_matrix_json("output", out, m->n, DM, true);
    printf("}\n");
    return 0;
}

/* Each head's weights and summary, then the concat, W_O and the output. */
static void print_text(const explain_args *a, const explain_model *m, attn_explain *ex, int heads, double *concat,
                       double *wo, double *out, cli_colours colour) {
    char **keys = m->src_tokens ? m->src_tokens : m->tokens;
    cli_prose(stdout, 0, 3, "Multi-head attention: %d heads read the same words, each asking its own question",
              heads);
    for (int h = 0; h < heads; h++) {
        printf("\n");
        cli_prose(stdout, 0, 3, "== head %d of %d: %s", h + 1, heads, QUESTION[h]);
        if (!a->step || strcmp(a->step, "weights") == 0) {
            explain_heading("weights", m->n, ex[h].n_keys, NULL);
            explain_weights_matrix(ex[h].weights, m->n, ex[h].n_keys, m->tokens, keys, a->causal, colour);
        }
        if (!a->step || strcmp(a->step, "summary") == 0) {
            printf("\nwho attends to whom in head %d\n", h + 1);
            explain_summary(m, &ex[h], a->causal);
        }
    }
    if (a->step && strcmp(a->step, "output") != 0) return;
    char **cl = calloc((size_t)(heads * DK), sizeof *cl);
    for (int h = 0; cl && h < heads; h++)
        for (int j = 0; j < DK; j++) {
            const char *f = attn_toy_value_feature(HEADS[h], j);
            /* The untrained head's values have no names: numbered, as its JSON's v0..v3, not four alike "3:v". */
            enum { LABEL = 32 }; /* "%d:v%d" of any two ints fits: the sanitizer build's -Wformat-truncation */
            if ((cl[h * DK + j] = malloc(LABEL))) {
                if (f) snprintf(cl[h * DK + j], LABEL, "%d:%s", h + 1, f);
                else snprintf(cl[h * DK + j], LABEL, "%d:v%d", h + 1, j);
            }
        }
    explain_heading("concat: each head's output, side by side", m->n, heads * DK,
                    "What every head found for each word, one block of columns per head.");
    explain_matrix(concat, m->n, heads * DK, m->tokens, cl, CLI_DIVERGING, false, colour);
    explain_heading("W_O: each head's findings back into the word's features", heads * DK, DM,
                    heads > 2 ? "A 1 where a head's value is that feature; the untrained head's rows are 0."
                              : "A 1 where a head's value is that feature.");
    explain_matrix(wo, heads * DK, DM, cl, m->features, CLI_DIVERGING, false, colour);
    explain_heading("output = concat W_O: each word, with what its heads found", m->n, DM,
                    "A verb now carries an animal (its subject, from head 1) and, in a sentence with\n"
                    "   a place, that place (from head 2): one head could not have asked both.");
    explain_matrix(out, m->n, DM, m->tokens, m->features, CLI_DIVERGING, false, colour);
    explain_free_labels(cl, heads * DK);
}

int explain_heads(const explain_args *a, const explain_model *m, cli_colours colour) {
    int heads = a->heads;
    attn_explain ex[MAX_HEADS] = {{0}};
    attn_explain_input in[MAX_HEADS];
    double wq[MAX_HEADS][DM * DK], wk[MAX_HEADS][DM * DK], wv[MAX_HEADS][DM * DK];
    double *concat = calloc((size_t)(m->n * heads * DK), sizeof(double)), wo[MAX_HEADS * DK * DM];
    double *out = calloc((size_t)(m->n * DM), sizeof(double));
    int code = concat && out ? 0 : cli_error(EXIT_DATA, "out of memory");
    char names[MAX_HEADS][32]; /* as one head's JSON names it: "wired for word order", ", tied" */
    for (int h = 0; h < heads && !code; h++) {
        attn_error err;
        /* With RoPE the wired head is wired for word order, as it is alone and on the page. */
        bool order = h == 0 && a->positions == ATTN_EXPLAIN_ROPE;
        attn_toy_weights(wq[h], wk[h], wv[h], order ? ATTN_TOY_ORDER : HEADS[h], NULL);
        if (a->tied) memcpy(wk[h], wq[h], sizeof wq[h]);
        snprintf(names[h], sizeof names[h], "%s%s", order ? "wired for word order" : h == 0 ? "wired" : h == 1 ? "where" : "random",
                 a->tied ? ", tied" : "");
        in[h] = (attn_explain_input){m->n, DM, DK, DK, m->X, wq[h], wk[h], wv[h], ATTN_EXPLAIN_QKV, a->causal, a->no_scale,
                                     a->scale_by_d_model, a->positions, m->X_src, m->n_src};
        if (attn_explain_run(&ex[h], &in[h], &err)) code = cli_error(EXIT_DATA, "%s", err.message);
        for (int i = 0; !code && i < m->n; i++) memcpy(concat + (i * heads + h) * DK, ex[h].output + i * DK, sizeof(double) * DK);
    }
    if (!code) {
        output_projection(wo, heads);
        for (int i = 0; i < m->n; i++)
            for (int f = 0; f < DM; f++)
                for (int c = 0; c < heads * DK; c++) out[i * DM + f] += concat[i * heads * DK + c] * wo[c * DM + f];
        if (a->json) code = print_json(m, ex, in, heads, (const char (*)[32])names, concat, wo, out);
        else print_text(a, m, ex, heads, concat, wo, out, colour);
    }
    for (int h = 0; h < heads; h++) attn_explain_free(&ex[h]);
    free(concat), free(out);
    return code;
}
