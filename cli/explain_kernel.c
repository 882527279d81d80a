/* explain_kernel.c -- `attn explain --kernel`: how a fast kernel computes
 * the head of `attn explain`, step by step (cost, tiles, the online softmax,
 * causal blocks, the KV cache, split-KV decode, pages, ring attention, the
 * gradient). The numbers are attn_kernel_walk_run's (attn_teach.h), as text
 * or, with --json, as attn_kernel_walk_json writes them. */
#include "explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const EXPLAIN_KERNEL_STEPS[EXPLAIN_KERNEL_N_STEPS] = {"cost",  "tiles", "online", "causal",  "cache",
                                                                  "split", "pages", "ring",   "gradient"};

/* Cells of a table, each up to 23 characters. */
typedef struct cells {
    int cols, rows;
    char text[80][10][24];
    const char *p[80 * 10];
} cells;

/* The table being built: one at a time is filled and printed, so one
 * static buffer serves them all, and its 25 KiB stay off the stack (two in
 * one frame took 51 KiB, more than a run in a small stack could spare). */
static cells *new_cells(int cols, int rows) {
    static cells c;
    memset(&c, 0, sizeof c);
    c.cols = cols, c.rows = rows;
    return &c;
}

static void cell(cells *c, int r, int col, const char *fmt, double x) {
    snprintf(c->text[r][col], sizeof c->text[r][col], fmt, x);
}

static void table(cells *c, const char *const *head, const int *width) {
    for (int r = 0; r < c->rows; r++)
        for (int j = 0; j < c->cols; j++) c->p[r * c->cols + j] = c->text[r][j];
    cli_table t = {c->cols, c->rows, 1, width, NULL, head, c->p};
    cli_print_table(stdout, &t);
}

static void human(char *buf, size_t size, double bytes) {
    static const char *const UNIT[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, UNIT[u]);
}

static double max_diff(const double *a, const double *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static void heading(int number, const char *title) {
    printf("\n");
    cli_prose(stdout, 0, 3, "%d. %s", number, title);
}

/* A vector as "(a, b, c, d)" with 3 decimals. */
static const char *tuple(char *buf, size_t size, const double *v, int n) {
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < n && used < size; i++) used += (size_t)snprintf(buf + used, size - used, "%s%.3f", i ? ", " : "", v[i]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

static void print_cost(const attn_kernel_walk *k) {
    heading(1, "The cost: the score matrix against what the kernel keeps");
    cli_prose(stdout, 3, 3, "The formula scores every word against every word: T x T scores, and kept as a matrix "
              "they take T^2 memory. The streaming kernel never keeps that matrix; it asks for a fixed workspace "
              "(attn_sdpa_workspace_size, one head, d = 64, f32, one thread):");
    cells *c = new_cells(4, ATTN_KERNEL_COST_POINTS);
    for (int i = 0; i < c->rows; i++) {
        cell(c, i, 0, "%.0f", (double)k->cost_T[i]);
        human(c->text[i][1], 24, k->cost_scores[i]);
        human(c->text[i][2], 24, k->cost_workspace[i]);
        cell(c, i, 3, "%.3g", k->cost_scores[i] / k->cost_workspace[i]);
    }
    static const char *const HEAD[4] = {"T", "T x T scores", "kernel keeps", "ratio"};
    static const int WIDTH[4] = {7, 13, 13, 9};
    table(c, HEAD, WIDTH);
    cli_prose(stdout, 3, 3, "Four times the words: sixteen times the score matrix. The workspace grows only until T "
              "fills the kernel's blocks, then hardly at all.");
}

static void print_tiles(const attn_kernel_walk *k, char **words, cli_colours colour) {
    heading(2, "Tiles: Q K^T / sqrt(d_k), one block at a time");
    cli_prose(stdout, 3, 3, "The kernel cuts the queries and the keys into blocks of %d and computes one %d x %d "
              "block of scores at a time (attn_scores on %d rows of Q and %d rows of K): %d x %d blocks, and never "
              "more than %d scores at once. Put side by side, the blocks are the first part's scaled scores:",
              k->block, k->block, k->block, k->block, k->block, k->nb, k->nb, k->block * k->block);
    explain_matrix(k->tiles, k->n, k->n, words, words, CLI_DIVERGING, false, colour);
    cli_prose(stdout, 3, 3, "largest difference from the whole matrix: %.1e", max_diff(k->tiles, k->scaled, k->n * k->n));
}

static void print_online(const attn_kernel_walk *k, char **words) {
    int dv = k->d_v, r = k->row;
    heading(3, "The online softmax: one row, block by block");
    cli_prose(stdout, 3, 3, "The row of '%s'. Its keys arrive %d at a time. After each block the kernel keeps three "
              "things: m, the largest score so far; l, the sum of e^(score - m); and O, the blend of the values "
              "so far (their sum weighted by e^(score - m), divided by l). When a block brings a larger score, l and the weighted sum are multiplied "
              "by e^(m_old - m_new) (the rescale), to measure them against the new maximum. Each block's (out, lse) comes from attn_sdpa, merged by attn_sdpa_merge:",
              words[r], k->block);
    char buf[96];
    cells *c = new_cells(6, k->nb);
    for (int b = 0; b < k->nb; b++) {
        int k0 = b * k->block, k1 = k0 + k->block < k->n ? k0 + k->block : k->n;
        snprintf(c->text[b][0], 24, "%d-%d", k0 + 1, k1);
        cell(c, b, 1, "%.3f", k->block_lse[b]);
        cell(c, b, 2, "%.3f", k->run_m[b]);
        cell(c, b, 3, "%.3f", k->run_rescale[b]);
        cell(c, b, 4, "%.3f", k->run_l[b]);
        cell(c, b, 5, "%.3f", k->run_lse[b]);
    }
    static const char *const HEAD[6] = {"keys", "block lse", "m", "rescale", "l", "lse"};
    static const int WIDTH[6] = {6, 10, 8, 8, 8, 8};
    table(c, HEAD, WIDTH);
    for (int b = 0; b < k->nb; b++)
        cli_prose(stdout, 3, 5, "after keys %d-%d: O = %s", b * k->block + 1,
               b * k->block + k->block < k->n ? b * k->block + k->block : k->n,
               tuple(buf, sizeof buf, k->run_out + (size_t)b * dv, dv));
    const double *last = k->run_out + (size_t)(k->nb - 1) * dv;
    cli_prose(stdout, 3, 3, "The last state is the whole row: O equals the first part's output for '%s' (largest "
              "difference %.1e) and e^(score - lse) its weights (%.1e).", words[r],
              max_diff(last, k->output + (size_t)r * dv, dv), max_diff(k->row_weights, k->weights + (size_t)r * k->n, k->n));
}

static void print_causal(const attn_kernel_walk *k) {
    heading(4, "Causal blocks skipped");
    cli_prose(stdout, 3, 3, "With the causal mask a word sees only itself and the words before it. A block above the "
              "diagonal has every score masked, so the kernel never computes it (.): # is computed whole, / on the "
              "diagonal is computed and masked in part.");
    for (int bi = 0; bi < k->nb; bi++) {
        printf("      ");
        for (int bj = 0; bj < k->nb; bj++) printf(" %c", "./#"[k->block_kind[bi * k->nb + bj]]);
        printf("\n");
    }
    cli_prose(stdout, 3, 3, "%d of %d blocks computed, %d skipped: %lld of %d scores, %.0f%% of the work saved. For "
              "long texts it tends to half.", k->blocks_computed, k->nb * k->nb, k->blocks_skipped,
              (long long)k->scores_computed, k->n * k->n, 100.0 * (1 - (double)k->scores_computed / (k->n * k->n)));
}

static void print_cache(const attn_kernel_walk *k, char **words) {
    int dv = k->d_v;
    heading(5, "Decoding with a KV cache");
    cli_prose(stdout, 3, 3, "A decoder writes one word at a time. Each new word appends its key and value to the "
              "cache (attn_kv_cache_append) and its query attends to everything cached (attn_kv_cache_attend), "
              "so nothing is computed twice. Token by token, the rows equal the whole causal head's:");
    cells *c = new_cells(2 + dv, k->n);
    for (int t = 0; t < k->n; t++) {
        snprintf(c->text[t][0], 24, "%.12s", words[t]);
        cell(c, t, 1, "%.0f", t + 1);
        for (int j = 0; j < dv; j++) cell(c, t, 2 + j, "%.3f", k->cache_output[(size_t)t * dv + j]);
    }
    const char *head[10] = {"word", "cached"};
    int width[10] = {8, 7};
    for (int j = 0; j < dv; j++) head[2 + j] = attn_toy_value_feature(ATTN_TOY_WIRED, j), width[2 + j] = 7;
    table(c, head, width);
    char a[24], b[24];
    human(a, sizeof a, k->gqa_bytes_mha), human(b, sizeof b, k->gqa_bytes_gqa);
    cli_prose(stdout, 3, 3, "Largest difference from the causal head: %.1e. Grouped-query heads share one key and "
              "value head among several query heads: for 32 query heads of 128, 4096 positions in f16, a cache "
              "with a key and value head per query head takes %s; 8 shared ones (groups of 4) take %s "
              "(attn_kv_cache_bytes).", max_diff(k->cache_output, k->causal_output, k->n * dv), a, b);
}

static void print_split(const attn_kernel_walk *k, char **words) {
    int dv = k->d_v;
    char buf[96];
    heading(6, "Split-KV decode: one query, the cache split among workers");
    cli_prose(stdout, 3, 3, "The newest word '%s' attends to a long cache. %d workers each take a part of the keys "
              "and return their (out, lse); the merge weighs each part by e^(lse_part - lse):", words[k->n - 1],
              k->workers);
    cells *c = new_cells(2 + dv, k->workers);
    for (int p = 0; p < k->workers; p++) {
        snprintf(c->text[p][0], 24, "%d-%d", k->split_bounds[p] + 1, k->split_bounds[p + 1]);
        cell(c, p, 1, "%.3f", k->split_lse[p]);
        for (int j = 0; j < dv; j++) cell(c, p, 2 + j, "%.3f", k->split_out[(size_t)p * dv + j]);
    }
    const char *head[10] = {"keys", "lse"};
    int width[10] = {6, 7};
    for (int j = 0; j < dv; j++) head[2 + j] = attn_toy_value_feature(ATTN_TOY_WIRED, j), width[2 + j] = 7;
    table(c, head, width);
    cli_prose(stdout, 3, 3, "merged: lse %.3f, out %s, the whole row's (largest difference %.1e).", k->split_merged_lse,
              tuple(buf, sizeof buf, k->split_merged, dv), max_diff(k->split_merged, k->output + (size_t)(k->n - 1) * dv, dv));
}

static void print_pages(const attn_kernel_walk *k) {
    int dv = k->d_v;
    heading(7, "Pages and shared prefixes");
    cli_prose(stdout, 3, 3, "A server keeps many sequences' keys and values in one pool of pages of %d positions "
              "(attn_kv_pages_*). A sequence is a page table. B = fork(A) shares A's pages; when one of them "
              "appends to a page it shares, it copies that one page first. Here A holds the sentence, and each "
              "appends one more position:", ATTN_KERNEL_PAGE_SIZE);
    static const char *const EVENTS[ATTN_KERNEL_PAGE_EVENTS] = {"A holds the sentence", "B = fork(A)", "B appends",
                                                                 "A appends"};
    for (int e = 0; e < ATTN_KERNEL_PAGE_EVENTS; e++) {
        printf("   %s\n", EVENTS[e]);
        for (int s = 0; s < 2; s++) {
            if (e == 0 && s == 1) continue;
            char line[512];
            size_t used = (size_t)snprintf(line, sizeof line, "%c: %lld positions, pages", "AB"[s],
                                           (long long)k->page_len[e][s]);
            for (int p = 0; p < ATTN_KERNEL_POOL_PAGES && k->page_table[e][s][p] >= 0 && used < sizeof line; p++)
                used += (size_t)snprintf(line + used, sizeof line - used, " %d (held by %d)", k->page_table[e][s][p],
                                         k->page_refs[e][k->page_table[e][s][p]]);
            cli_prose(stdout, 6, 9, "%s", line);
        }
        printf("      free pages: %d of %d\n", k->page_free[e], ATTN_KERNEL_POOL_PAGES);
    }
    cli_prose(stdout, 3, 3, "Each new position attends over its own pages (attn_kv_pages_attend, f32) as over a "
              "contiguous copy (largest difference %.1e, f32 rounding).", max_diff(k->page_out, k->page_ref, 2 * dv));
}

static void print_ring(const attn_kernel_walk *k, char **words) {
    int n = k->n, dv = k->d_v, R = k->ranks;
    heading(8, "Many machines: ring attention");
    cli_prose(stdout, 3, 3, "%d ranks each keep a shard of the queries. The shards of keys and values travel round "
              "the ring: at each step a rank attends its queries to the shard it holds, merges by lse, and passes "
              "the shard on.", R);
    for (int r = 0; r < R; r++) {
        char line[1024];
        size_t used = (size_t)snprintf(line, sizeof line, "rank %d: queries of", r);
        for (int i = k->ring_bounds[r]; i < k->ring_bounds[r + 1] && used < sizeof line; i++)
            used += (size_t)snprintf(line + used, sizeof line - used, " %s", words[i]);
        cli_prose(stdout, 3, 6, "%s", line);
        used = (size_t)snprintf(line, sizeof line, "holds the keys and values of shard");
        for (int s = 0; s < R && used < sizeof line; s++)
            used += (size_t)snprintf(line + used, sizeof line - used, " %d", ((r - s) % R + R) % R);
        cli_prose(stdout, 6, 6, "%s at steps 1 to %d", line, R);
    }
    const double *last = k->ring_out + (size_t)(R - 1) * n * dv;
    cli_prose(stdout, 3, 3, "After %d steps every rank has its rows of the whole output (largest difference from one "
              "process: %.1e).", R, max_diff(last, k->output, n * dv));
}

static void print_gradient(const attn_kernel_walk *k, char **words) {
    int n = k->n, r = k->row;
    char buf[96];
    heading(9, "The gradient of one row");
    cli_prose(stdout, 3, 3, "Training runs the head backwards. For the row of '%s' and the loss 'sum of its output' "
              "(dO all ones), the fused kernel recomputes P = e^(s - lse) from the lse it stored, never the "
              "matrix; D = rowsum(dO * O) = %.3f; dP = dO V^T; dS = P * (dP - D), the gradient of the scores:",
              words[r], k->grad_D);
    cells *c = new_cells(6, n);
    for (int j = 0; j < n; j++) {
        snprintf(c->text[j][0], 24, "%.12s", words[j]);
        cell(c, j, 1, "%.3f", k->tiles[(size_t)r * n + j]);
        cell(c, j, 2, "%.3f", k->grad_P[j]);
        cell(c, j, 3, "%.3f", k->grad_dP[j]);
        cell(c, j, 4, "%.4f", k->grad_dS[j]);
        cell(c, j, 5, "%.4f", k->grad_dS_lib[j]);
    }
    static const char *const HEAD[6] = {"key", "score s", "P", "dP", "dS", "library"};
    static const int WIDTH[6] = {8, 8, 7, 7, 8, 8};
    table(c, HEAD, WIDTH);
    cli_prose(stdout, 3, 3, "library: attn_sdpa_backward's gradient of the scores (largest difference %.1e). The "
              "query's gradient dq = scale * dS K = %s.", max_diff(k->grad_dS, k->grad_dS_lib, n),
              tuple(buf, sizeof buf, k->grad_dq, k->d_k));
    cli_prose(stdout, 3, 3, "Why divide by sqrt(d_k): without it the scores grow with d_k, the softmax saturates "
              "(one weight near 1) and dS vanishes. The same row with its scores multiplied:");
    cells *s = new_cells(3, ATTN_KERNEL_SATURATION);
    for (int i = 0; i < s->rows; i++) {
        cell(s, i, 0, "x%.0f", k->sat_factor[i]);
        cell(s, i, 1, "%.3f", k->sat_top[i]);
        cell(s, i, 2, "%.2e", k->sat_norm[i]);
    }
    static const char *const SHEAD[3] = {"scores", "top weight", "|dS|"};
    static const int SWIDTH[3] = {7, 11, 10};
    table(s, SHEAD, SWIDTH);
}

int explain_kernel(const explain_args *a, cli_colours colour) {
    attn_kernel_walk_options o = attn_kernel_walk_options_default();
    o.block = a->kernel_block, o.workers = a->kernel_workers, o.ranks = a->kernel_ranks;
    attn_kernel_walk k = {.struct_size = sizeof k};
    attn_error err;
    if (attn_kernel_walk_run(&k, a->sentence, &o, &err)) return cli_error(EXIT_DATA, "%s", err.message);
    int code = 0;
    if (a->json) {
        size_t len = 0;
        attn_kernel_walk_json(NULL, 0, &len, &k, a->step, NULL);
        char *json = malloc(len + 1);
        if (!json) code = cli_error(EXIT_DATA, "out of memory for the JSON");
        else attn_kernel_walk_json(json, len + 1, &len, &k, a->step, NULL), fputs(json, stdout), free(json);
        attn_kernel_walk_free(&k);
        return code;
    }
    const char *const *kw = k.words;
    char *words[ATTN_TOY_MAX_TOKENS];
    for (int i = 0; i < k.n; i++) words[i] = cli_word_label(kw, k.n, i);
    if (!a->step) {
        printf("How a fast kernel computes attention\n");
        cli_prose(stdout, 3, 3, "The head of attn explain (wired, d_k %d) on \"%s\", computed the ways fast programs "
                  "compute it, each number by the library's own kernels.", k.d_k, a->sentence);
    }
#define SHOW(name) (!a->step || strcmp(a->step, name) == 0)
    if (SHOW("cost")) print_cost(&k);
    if (SHOW("tiles")) print_tiles(&k, words, colour);
    if (SHOW("online")) print_online(&k, words);
    if (SHOW("causal")) print_causal(&k);
    if (SHOW("cache")) print_cache(&k, words);
    if (SHOW("split")) print_split(&k, words);
    if (SHOW("pages")) print_pages(&k);
    if (SHOW("ring")) print_ring(&k, words);
    if (SHOW("gradient")) print_gradient(&k, words);
#undef SHOW
    for (int i = 0; i < k.n; i++) free(words[i]);
    attn_kernel_walk_free(&k);
    return 0;
}
