/* kernel_json.c -- the kernel walk (kernel_walk.c) as one JSON object, the
 * format `attn explain --kernel --json`, the page and the tests share: one
 * key per step, every number with 17 significant digits (exact). */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void num(writer *w, double x) {
    if (isfinite(x)) attn_json_put(w, "%.17g", x);
    else attn_json_put(w, "null");
}

static void list(writer *w, const char *key, const double *v, int n) {
    attn_json_put(w, "\"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (i) attn_json_put(w, ", ");
        num(w, v[i]);
    }
    attn_json_put(w, "]");
}

static void ints(writer *w, const char *key, const int *v, int n) {
    attn_json_put(w, "\"%s\": [", key);
    for (int i = 0; i < n; i++) attn_json_put(w, "%s%d", i ? ", " : "", v[i]);
    attn_json_put(w, "]");
}

static void matrix(writer *w, const char *key, const double *m, int rows, int cols) {
    attn_json_put(w, "\"%s\": [", key);
    for (int i = 0; i < rows; i++) {
        attn_json_put(w, i ? ",\n      [" : "\n      [");
        for (int j = 0; j < cols; j++) {
            if (j) attn_json_put(w, ", ");
            num(w, m[(size_t)i * cols + j]);
        }
        attn_json_put(w, "]");
    }
    attn_json_put(w, "]");
}

static bool want(const char *step, const char *name) { return !step || strcmp(step, name) == 0; }

attn_status attn_kernel_walk_json(char *buf, size_t size, size_t *length, const attn_kernel_walk *k, const char *step,
                                  attn_error *err) {
    static const char *const STEPS[] = {"cost", "tiles", "online", "causal", "cache", "split", "pages", "ring", "gradient"};
    if (!k || !length || (size && !buf)) return attn_fail(err, ATTN_ERR_NULL, "an argument of attn_kernel_walk_json is NULL");
    if (k->struct_size != sizeof *k)
        return attn_fail(err, ATTN_ERR_OPTION, "walk->struct_size is %zu: set walk->struct_size = sizeof *walk",
                         k->struct_size);
    if (!k->Q || k->n < 1) return attn_fail(err, ATTN_ERR_ARGUMENT, "the walk was not computed");
    bool known = !step;
    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++) known |= step && strcmp(step, STEPS[i]) == 0;
    if (!known) return attn_fail(err, ATTN_ERR_OPTION, "unknown step '%s'", step);
    int n = k->n, dv = k->d_v, nb = k->nb;
    writer w = {buf, size, 0};
    attn_json_put(&w, "{\n  \"tokens\": [");
    for (int i = 0; i < n; i++) attn_json_put(&w, i ? ", " : ""), attn_json_string(&w, k->words[i]);
    attn_json_put(&w, "],\n  \"d_k\": %d, \"d_v\": %d, \"scale\": %.17g, \"block\": %d, \"blocks\": %d, \"row\": %d,\n  ", k->d_k,
                  dv, k->scale, k->block, nb, k->row);
    matrix(&w, "Q", k->Q, n, k->d_k), attn_json_put(&w, ",\n  "), matrix(&w, "K", k->K, n, k->d_k), attn_json_put(&w, ",\n  ");
    matrix(&w, "V", k->V, n, dv), attn_json_put(&w, ",\n  "), matrix(&w, "scaled", k->scaled, n, n), attn_json_put(&w, ",\n  ");
    matrix(&w, "weights", k->weights, n, n), attn_json_put(&w, ",\n  "), matrix(&w, "output", k->output, n, dv);
    attn_json_put(&w, ",\n  "), matrix(&w, "causal_output", k->causal_output, n, dv);

    if (want(step, "cost")) {
        attn_json_put(&w, ",\n  \"cost\": {\"d\": 64, \"dtype\": \"f32\", \"threads\": 1, \"T\": [");
        for (int i = 0; i < ATTN_KERNEL_COST_POINTS; i++) attn_json_put(&w, "%s%lld", i ? ", " : "", (long long)k->cost_T[i]);
        attn_json_put(&w, "], "), list(&w, "score_bytes", k->cost_scores, ATTN_KERNEL_COST_POINTS), attn_json_put(&w, ", ");
        list(&w, "workspace_bytes", k->cost_workspace, ATTN_KERNEL_COST_POINTS), attn_json_put(&w, "}");
    }

    if (want(step, "tiles")) {
        attn_json_put(&w, ",\n  \"tiles\": {"), matrix(&w, "scores", k->tiles, n, n), attn_json_put(&w, "}");
    }

    if (want(step, "online")) {
        attn_json_put(&w, ",\n  \"online\": {\"row\": %d, ", k->row);
        matrix(&w, "block_out", k->block_out, nb, dv), attn_json_put(&w, ",\n    "), list(&w, "block_lse", k->block_lse, nb);
        attn_json_put(&w, ",\n    "), list(&w, "m", k->run_m, nb), attn_json_put(&w, ", "), list(&w, "l", k->run_l, nb);
        attn_json_put(&w, ",\n    "), list(&w, "rescale", k->run_rescale, nb), attn_json_put(&w, ",\n    ");
        matrix(&w, "acc", k->run_acc, nb, dv), attn_json_put(&w, ",\n    "), matrix(&w, "out", k->run_out, nb, dv);
        attn_json_put(&w, ",\n    "), list(&w, "lse", k->run_lse, nb), attn_json_put(&w, ",\n    ");
        list(&w, "weights", k->row_weights, n), attn_json_put(&w, "}");
    }

    if (want(step, "causal")) {
        attn_json_put(&w, ",\n  \"causal\": {"), ints(&w, "kind", k->block_kind, nb * nb);
        attn_json_put(&w, ", \"blocks_computed\": %d, \"blocks_skipped\": %d, \"scores_computed\": %lld, \"scores_all\": %lld}",
                      k->blocks_computed, k->blocks_skipped, (long long)k->scores_computed, (long long)n * n);
    }

    if (want(step, "cache")) {
        attn_json_put(&w, ",\n  \"cache\": {"), matrix(&w, "output", k->cache_output, n, dv);
        attn_json_put(&w, ",\n    \"lengths_ok\": %s, \"gqa\": {\"positions\": 4096, \"head_dim\": 128, \"dtype\": \"f16\", "
                      "\"query_heads\": 32, \"kv_heads\": 8, \"bytes_one_kv_head_per_query_head\": %.17g, \"bytes_grouped\": %.17g}}",
                      k->cache_lengths_ok ? "true" : "false", k->gqa_bytes_mha, k->gqa_bytes_gqa);
    }

    if (want(step, "split")) {
        attn_json_put(&w, ",\n  \"split\": {\"query\": %d, ", n - 1), ints(&w, "bounds", k->split_bounds, k->workers + 1);
        attn_json_put(&w, ", "), matrix(&w, "out", k->split_out, k->workers, dv), attn_json_put(&w, ", "), list(&w, "lse", k->split_lse, k->workers);
        attn_json_put(&w, ",\n    "), list(&w, "merged", k->split_merged, dv), attn_json_put(&w, ", \"merged_lse\": "), num(&w, k->split_merged_lse);
        attn_json_put(&w, "}");
    }

    if (want(step, "pages")) {
        static const char *const EVENTS[ATTN_KERNEL_PAGE_EVENTS] = {"A holds the sentence", "B = fork(A)", "B appends",
                                                                     "A appends"};
        attn_json_put(&w, ",\n  \"pages\": {\"page_size\": %d, \"pool_pages\": %d, \"events\": [", ATTN_KERNEL_PAGE_SIZE,
                      ATTN_KERNEL_POOL_PAGES);
        for (int e = 0; e < ATTN_KERNEL_PAGE_EVENTS; e++) {
            attn_json_put(&w, "%s\n    {\"what\": \"%s\", \"lengths\": [%lld, %lld], \"tables\": [", e ? "," : "", EVENTS[e],
                          (long long)k->page_len[e][0], (long long)k->page_len[e][1]);
            for (int s = 0; s < 2; s++) {
                int used = (int)((k->page_len[e][s] + ATTN_KERNEL_PAGE_SIZE - 1) / ATTN_KERNEL_PAGE_SIZE);
                attn_json_put(&w, s ? ", " : ""), attn_json_put(&w, "["); /* only the entries in use */
                for (int p = 0; p < used; p++) attn_json_put(&w, "%s%d", p ? ", " : "", k->page_table[e][s][p]);
                attn_json_put(&w, "]");
            }
            attn_json_put(&w, "], "), ints(&w, "refs", k->page_refs[e], ATTN_KERNEL_POOL_PAGES);
            attn_json_put(&w, ", \"free\": %d}", k->page_free[e]);
        }
        attn_json_put(&w, "],\n    "), matrix(&w, "out", k->page_out, 2, dv), attn_json_put(&w, ",\n    ");
        matrix(&w, "reference", k->page_ref, 2, dv), attn_json_put(&w, "}");
    }

    if (want(step, "ring")) {
        attn_json_put(&w, ",\n  \"ring\": {\"ranks\": %d, ", k->ranks), ints(&w, "bounds", k->ring_bounds, k->ranks + 1);
        attn_json_put(&w, ", \"steps\": [");
        for (int s = 0; s < k->ranks; s++) {
            attn_json_put(&w, "%s\n    {", s ? "," : "");
            matrix(&w, "out", k->ring_out + (size_t)s * n * dv, n, dv), attn_json_put(&w, ", ");
            list(&w, "lse", k->ring_lse + (size_t)s * n, n), attn_json_put(&w, "}");
        }
        attn_json_put(&w, "]}");
    }

    if (want(step, "gradient")) {
        attn_json_put(&w, ",\n  \"gradient\": {\"row\": %d, ", k->row), list(&w, "dO", k->grad_dO, dv);
        attn_json_put(&w, ", "), list(&w, "P", k->grad_P, n), attn_json_put(&w, ",\n    "), list(&w, "dP", k->grad_dP, n);
        attn_json_put(&w, ", \"D\": "), num(&w, k->grad_D), attn_json_put(&w, ",\n    "), list(&w, "dS", k->grad_dS, n);
        attn_json_put(&w, ",\n    "), list(&w, "dS_library", k->grad_dS_lib, n), attn_json_put(&w, ", "), list(&w, "dq", k->grad_dq, k->d_k);
        attn_json_put(&w, ",\n    \"saturation\": {"), list(&w, "factor", k->sat_factor, ATTN_KERNEL_SATURATION), attn_json_put(&w, ", ");
        list(&w, "top_weight", k->sat_top, ATTN_KERNEL_SATURATION), attn_json_put(&w, ", ");
        list(&w, "dS_norm", k->sat_norm, ATTN_KERNEL_SATURATION), attn_json_put(&w, "}}");
    }
    attn_json_put(&w, "\n}\n");
    *length = w.len;
    return ATTN_OK;
}
