/* ggml_compare.c -- `attn bench --ggml DIR`: ggml's ggml_flash_attn_ext beside
 * attn_sdpa on the same shapes, in the same run, when the user points the
 * bench at a ggml build (a folder with libggml-base.so and a CPU backend,
 * libggml-cpu.so or one of the per-CPU variants that llama.cpp's release
 * builds ship). ggml is loaded with dlopen and called through the few
 * functions of its C API declared below; nothing of it is built or linked
 * here, and without --ggml the bench never touches it.
 *
 * ggml's layout is attn's: a tensor's ne[0] is its fastest dimension, so q
 * (H, L, d) in C order is ggml's [d, L, H]. Queries are f32 and keys and
 * values f16, as llama.cpp stores its KV cache; attn runs the same shape
 * with f32 keys and values (its own rows in `attn bench`) and, for
 * comparison of like with like, with f16 ones. A causal mask is ggml's f16
 * mask of 0 and -inf (rows padded to 64, as ggml asks). */
#include "ggml_compare.h"
#include "cli.h"
#include "table.h"
#include "text.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The part of ggml's C API used here (ggml.h, ggml-cpu.h). */
struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q8_0 = 8 };

typedef struct ggml_api {
    void *base, *cpu;
    char cpu_name[64];
    void *(*init)(struct ggml_init_params);
    void (*free)(void *);
    void *(*new_tensor_4d)(void *, int, int64_t, int64_t, int64_t, int64_t);
    void *(*flash_attn_ext)(void *, void *, void *, void *, void *, float, float, float);
    void *(*new_graph)(void *);
    void (*build_forward_expand)(void *, void *);
    int (*graph_compute_with_ctx)(void *, void *, int);
    void *(*get_data)(const void *);
    void (*cpu_init)(void);
} ggml_api;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The CPU backend for this CPU: the folder's generic one, else the best of
 * llama.cpp's per-CPU builds that this CPU can run. */
static void *open_cpu_backend(const char *dir, char *name, size_t n) {
    static const char *const generic[] = {"libggml-cpu.so"};
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
    const char *pick[6] = {generic[0], NULL, NULL, NULL, NULL, NULL};
    int k = 1;
    if (avx512) pick[k++] = "libggml-cpu-zen4.so", pick[k++] = "libggml-cpu-skylakex.so";
    if (avx2) pick[k++] = "libggml-cpu-haswell.so";
    pick[k++] = "libggml-cpu-x64.so";
    for (int i = 0; i < k; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, pick[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            snprintf(name, n, "%s", pick[i]);
            return h;
        }
    }
    return NULL;
}

static int load(ggml_api *g, const char *dir, char *why, size_t n) {
    char path[4096];
    memset(g, 0, sizeof *g);
    snprintf(path, sizeof path, "%s/libggml-base.so", dir);
    g->base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!g->base) return snprintf(why, n, "cannot load %s: %s", path, dlerror()), 1;
    g->cpu = open_cpu_backend(dir, g->cpu_name, sizeof g->cpu_name);
    if (!g->cpu) return snprintf(why, n, "no CPU backend this CPU can run in %s (libggml-cpu*.so)", dir), 1;
    struct { void **fn; void *lib; const char *name; } syms[] = {
        {(void **)&g->init, g->base, "ggml_init"},
        {(void **)&g->free, g->base, "ggml_free"},
        {(void **)&g->new_tensor_4d, g->base, "ggml_new_tensor_4d"},
        {(void **)&g->flash_attn_ext, g->base, "ggml_flash_attn_ext"},
        {(void **)&g->new_graph, g->base, "ggml_new_graph"},
        {(void **)&g->build_forward_expand, g->base, "ggml_build_forward_expand"},
        {(void **)&g->get_data, g->base, "ggml_get_data"},
        {(void **)&g->graph_compute_with_ctx, g->cpu, "ggml_graph_compute_with_ctx"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].fn = dlsym(syms[i].lib, syms[i].name);
        if (!*syms[i].fn) return snprintf(why, n, "%s lacks %s: not a ggml this bench knows", dir, syms[i].name), 1;
    }
    *(void **)&g->cpu_init = dlsym(g->cpu, "ggml_cpu_init"); /* newer ggml: its tables are made here */
    if (g->cpu_init) g->cpu_init();
    return 0;
}

typedef struct cmp_shape {
    const char *name;
    int64_t H, Hk, L, S, d; /* Hk key/value heads (GQA when fewer than H) */
    bool causal;
} cmp_shape;

/* Random values in [-1, 1), from a fixed generator. */
static void fill(float *x, int64_t n, unsigned seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / 8388608.0 - 1.0);
    }
}

/* ggml's time for one shape, best of `reps`; also its output's largest
 * difference from attn's (a check that both computed the same thing).
 * Keys and values f16 (format ATTN_F16, from k and v), or q8/q4 rows
 * (ATTN_Q8, ATTN_Q4: kq and vq, attn's rows, byte for byte ggml's
 * block_q8_0 and block_q4_0). */
static double time_ggml(const ggml_api *g, const cmp_shape *s, int threads, int reps, const float *q, const float *k,
                        const float *v, attn_dtype format, const void *kq, const void *vq, const float *ref,
                        double *diff) {
    int64_t Lp = (s->L + 63) / 64 * 64;
    size_t bytes = (size_t)(4 * s->H * s->L * s->d + 2 * 2 * s->Hk * s->S * s->d + 4 * s->H * s->L * s->d +
                            2 * s->S * Lp) + ((size_t)64 << 20);
    struct ggml_init_params ip = {bytes, NULL, false};
    void *ctx = g->init(ip);
    if (!ctx) return -1;
    void *tq = g->new_tensor_4d(ctx, GGML_TYPE_F32, s->d, s->L, s->H, 1);
    int type = format == ATTN_Q8 ? GGML_TYPE_Q8_0 : format == ATTN_Q4 ? GGML_TYPE_Q4_0 : GGML_TYPE_F16;
    void *tk = g->new_tensor_4d(ctx, type, s->d, s->S, s->Hk, 1);
    void *tv = g->new_tensor_4d(ctx, type, s->d, s->S, s->Hk, 1);
    void *tm = s->causal ? g->new_tensor_4d(ctx, GGML_TYPE_F16, s->S, Lp, 1, 1) : NULL;
    memcpy(g->get_data(tq), q, sizeof(float) * (size_t)(s->H * s->L * s->d));
    if (type == GGML_TYPE_F16) {
        uint16_t *kh = g->get_data(tk), *vh = g->get_data(tv);
        for (int64_t i = 0; i < s->Hk * s->S * s->d; i++) kh[i] = attn_f32_to_f16(k[i]), vh[i] = attn_f32_to_f16(v[i]);
    } else {
        size_t rows = attn_quant_row_size(format, s->d) * (size_t)(s->Hk * s->S);
        memcpy(g->get_data(tk), kq, rows), memcpy(g->get_data(tv), vq, rows);
    }
    if (tm) { /* bottom-right = top-left here (L = S): 0 where key j <= query i, else -inf */
        uint16_t *m = g->get_data(tm);
        for (int64_t i = 0; i < Lp; i++)
            for (int64_t j = 0; j < s->S; j++) m[i * s->S + j] = j <= i + (s->S - s->L) ? 0x0000 : 0xfc00;
    }
    void *out = g->flash_attn_ext(ctx, tq, tk, tv, tm, 1.0f / sqrtf((float)s->d), 0.0f, 0.0f);
    void *graph = g->new_graph(ctx);
    g->build_forward_expand(graph, out);
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (g->graph_compute_with_ctx(ctx, graph, threads) != 0) best = -1;
        double t = now() - t0;
        if (best >= 0 && t < best) best = t;
    }
    /* ggml's result is [d, H, L]: row i of head h at (i * H + h) * d. */
    const float *o = g->get_data(out);
    *diff = 0;
    for (int64_t h = 0; h < s->H; h++)
        for (int64_t i = 0; i < s->L; i++)
            for (int64_t e = 0; e < s->d; e++) {
                double x = fabs((double)o[(i * s->H + h) * s->d + e] - ref[(h * s->L + i) * s->d + e]);
                *diff = x > *diff ? x : *diff;
            }
    g->free(ctx);
    return best;
}

/* attn's time on the same data: f32 keys and values, then f16. */
static double time_attn(const cmp_shape *s, int reps, float *q, float *k, float *v, float *out, bool half) {
    int64_t sq[3] = {s->H, s->L, s->d}, sk[3] = {s->Hk, s->S, s->d}, nk = s->Hk * s->S * s->d;
    attn_tensor tq, tk, tv, to;
    uint16_t *kh = NULL, *vh = NULL;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    if (half) {
        kh = malloc(sizeof(uint16_t) * (size_t)nk), vh = malloc(sizeof(uint16_t) * (size_t)nk);
        for (int64_t i = 0; kh && vh && i < nk; i++) kh[i] = attn_f32_to_f16(k[i]), vh[i] = attn_f32_to_f16(v[i]);
    }
    attn_tensor_init(&tk, half ? (void *)kh : (void *)k, half ? ATTN_F16 : ATTN_F32, 3, sk, NULL, NULL);
    attn_tensor_init(&tv, half ? (void *)vh : (void *)v, half ? ATTN_F16 : ATTN_F32, 3, sk, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = s->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    double best = INFINITY;
    for (int r = 0; r < reps && (!half || (kh && vh)); r++) {
        double t0 = now();
        if (attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &o, NULL)) best = -1;
        double t = now() - t0;
        if (best >= 0 && t < best) best = t;
    }
    free(kh), free(vh);
    return best;
}

/* attn's time with q8 or q4 keys and values (rows kq, vq). */
static double time_attn_quant(const cmp_shape *s, int reps, float *q, const void *kq, const void *vq, float *out,
                              attn_dtype format) {
    int64_t sq[3] = {s->H, s->L, s->d}, sk[3] = {s->Hk, s->S, s->d};
    attn_tensor tq, tk, tv, to;
    attn_tensor_init(&tq, q, ATTN_F32, 3, sq, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, sq, NULL, NULL);
    attn_tensor_init(&tk, (void *)kq, format, 3, sk, NULL, NULL), attn_tensor_init(&tv, (void *)vq, format, 3, sk, NULL, NULL);
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, NULL, NULL)) best = -1;
        double t = now() - t0;
        if (best >= 0 && t < best) best = t;
    }
    return best;
}

/* Decoding one token of the Llama-style layer from q8 and q4 keys and
 * values: attn's q8/q4 against ggml's q8_0/q4_0, the same bytes. */
static int quant_rows(const ggml_api *g, bool quick, bool json, int threads, int reps) {
    int64_t contexts[2] = {4096, 32768};
    int n = quick ? 1 : 2, bad = 0;
    attn_dtype formats[2] = {ATTN_Q8, ATTN_Q4};
    text_table *tab = json ? NULL : tab_new(5, "q8/q4 cache", "attn", "ggml", "attn/gg", "max diff");
    for (int c = 0; c < n; c++)
        for (int f = 0; f < 2; f++) {
            cmp_shape s = {"layer H32/8 d128 L=1", 32, 8, 1, contexts[c], 128, false};
            size_t nq = (size_t)(s.H * s.d), nk = (size_t)(s.Hk * s.S * s.d);
            size_t rows = attn_quant_row_size(formats[f], s.d) * (size_t)(s.Hk * s.S);
            float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *out = malloc(4 * nq);
            void *kq = malloc(rows), *vq = malloc(rows);
            if (!q || !k || !v || !out || !kq || !vq) return fprintf(stderr, "attn: error: out of memory\n"), 1;
            fill(q, (int64_t)nq, 1), fill(k, (int64_t)nk, 2), fill(v, (int64_t)nk, 3);
            int64_t sk[2] = {s.Hk * s.S, s.d};
            attn_tensor tk, tv;
            attn_tensor_init(&tk, k, ATTN_F32, 2, sk, NULL, NULL), attn_tensor_init(&tv, v, ATTN_F32, 2, sk, NULL, NULL);
            bad |= attn_quantize(kq, rows, formats[f], &tk, NULL) || attn_quantize(vq, rows, formats[f], &tv, NULL);
            double ta = time_attn_quant(&s, reps, q, kq, vq, out, formats[f]), diff = 0;
            double tg = time_ggml(g, &s, threads, reps, q, k, v, formats[f], kq, vq, out, &diff);
            bad |= ta <= 0 || tg <= 0 || diff > 1e-2;
            char name[64];
            snprintf(name, sizeof name, "%s S=%lld %s", s.name, (long long)s.S, formats[f] == ATTN_Q8 ? "q8_0" : "q4_0");
            if (json)
                printf("  {\"name\": \"%s\", \"attn_tokens_per_s\": %.4g, \"ggml_tokens_per_s\": %.4g, \"max_diff\": %.3g}%s\n",
                       name, 1 / ta, 1 / tg, diff, c + 1 < n || f + 1 < 2 ? "," : "");
            else {
                tab_cell(tab, "%s", name), tab_cell(tab, "%.0f tok/s", 1 / ta), tab_cell(tab, "%.0f tok/s", 1 / tg);
                tab_cell(tab, "%.2fx", tg / ta), tab_cell(tab, "%.2g", diff);
            }
            free(q), free(k), free(v), free(out), free(kq), free(vq);
        }
    if (tab) tab_print(tab);
    return bad;
}

int ggml_compare(const char *dir, const char *cpu, bool quick, bool json) {
    ggml_api g;
    char why[4200];
    if (load(&g, dir, why, sizeof why)) /* the directory's name in it, control bytes escaped */
        return cli_error(EXIT_DATA, "--ggml: %s", why);
    int threads = attn_get_num_threads(), reps = quick ? 1 : 3;
    int64_t big = quick ? 512 : 4096, dec = quick ? 4096 : 65536;
    /* attn bench's targets, then decoding: one token against a KV cache, and
     * one layer of a Llama-style model (32 query heads over 8 KV heads of 128). */
    cmp_shape shapes[7] = {{"H8 d64", 8, 8, big, big, 64, false}, {"H8 d128", 8, 8, big, big, 128, false},
                           {"H8 d64", 8, 8, big, big, 64, true}, {"decode H8 d64 L=1", 8, 8, 1, dec, 64, false},
                           {"layer H32/8 d128 L=1", 32, 8, 1, 4096, 128, false},
                           {"layer H32/8 d128 L=1", 32, 8, 1, 32768, 128, false},
                           {"layer H32/8 d128 L=1", 32, 8, 1, 131072, 128, false}};
    size_t n_shapes = quick ? 5 : 7;
    text_table *tab = NULL;
    char dir_j[8192], cpu_j[384], name_j[768]; /* as JSON strings' insides (a directory may hold a quote) */
    if (json) /* the machine first, as in every report (this one named none) */
        printf("{\"cpu\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"ggml_dir\": \"%s\", \"ggml_cpu\": \"%s\", \"rows\": [\n",
               json_text(cpu, name_j, sizeof name_j), attn_isa(), threads, json_text(dir, dir_j, sizeof dir_j),
               json_text(g.cpu_name, cpu_j, sizeof cpu_j));
    else {
        cli_prose(stdout, 0, 2, "ggml_flash_attn_ext from %s (%s), %d threads; q f32, ggml's k and v f16; prefill in "
                  "GFLOP/s, decoding in tokens/s and the GB/s of k and v read", dir, g.cpu_name, threads);
        tab = tab_new(8, "shape", "attn f32", "attn f16", "ggml f16", "attn/gg", "f16/gg", "max diff", "GB/s");
    }
    int bad = 0;
    for (size_t i = 0; i < n_shapes; i++) {
        const cmp_shape *s = &shapes[i];
        size_t nq = (size_t)(s->H * s->L * s->d), nk = (size_t)(s->Hk * s->S * s->d);
        float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nk), *out = malloc(4 * nq);
        if (!q || !k || !v || !out) return fprintf(stderr, "attn: error: out of memory\n"), 1;
        fill(q, (int64_t)nq, 1), fill(k, (int64_t)nk, 2), fill(v, (int64_t)nk, 3);
        double t32 = time_attn(s, reps, q, k, v, out, false), t16 = time_attn(s, reps, q, k, v, out, true), diff = 0;
        double tg = time_ggml(&g, s, threads, reps, q, k, v, ATTN_F16, NULL, NULL, out, &diff);
        double pairs = (double)s->L * (double)s->S * (s->causal ? 0.5 : 1.0), flops = 4.0 * (double)s->H * pairs * (double)s->d;
        char name[48];
        /* "H8 d64 L=S=4096 causal", as attn bench's own rows: the causal row
         * was "H8 d64 L=S causal=4096" */
        if (s->L > 1) snprintf(name, sizeof name, "%s L=S=%lld%s", s->name, (long long)s->L, s->causal ? " causal" : "");
        else snprintf(name, sizeof name, "%s S=%lld", s->name, (long long)s->S);
        bad |= t32 <= 0 || t16 <= 0 || tg <= 0 || diff > 1e-2;
        if (json)
            printf("  {\"name\": \"%s\", \"attn_f32_gflops\": %.4g, \"attn_f16_gflops\": %.4g, \"ggml_gflops\": %.4g, "
                   "\"max_diff\": %.3g}%s\n", name, flops / t32 / 1e9, flops / t16 / 1e9, flops / tg / 1e9, diff,
                   i + 1 < n_shapes ? "," : "");
        else if (s->L > 1) {
            tab_cell(tab, "%s", name);
            tab_cell(tab, "%.1f GF", flops / t32 / 1e9), tab_cell(tab, "%.1f GF", flops / t16 / 1e9);
            tab_cell(tab, "%.1f GF", flops / tg / 1e9), tab_cell(tab, "%.2fx", tg / t32), tab_cell(tab, "%.2fx", tg / t16);
            tab_cell(tab, "%.2g", diff), tab_cell(tab, "-");
        } else { /* decoding reads the cache: tokens per second, and the bytes of k and v read per second */
            tab_cell(tab, "%s", name);
            tab_cell(tab, "%.0f tok/s", 1 / t32), tab_cell(tab, "%.0f tok/s", 1 / t16), tab_cell(tab, "%.0f tok/s", 1 / tg);
            tab_cell(tab, "%.2fx", tg / t32), tab_cell(tab, "%.2fx", tg / t16), tab_cell(tab, "%.2g", diff);
            tab_cell(tab, "%.1f, %.1f, %.1f", 8.0 * (double)nk / t32 / 1e9, 4.0 * (double)nk / t16 / 1e9,
                     4.0 * (double)nk / tg / 1e9);
        }
        free(q), free(k), free(v), free(out);
    }
    if (json) printf("],\n\"quantized_rows\": [\n");
    else tab_print(tab), printf("\n");
    bad |= quant_rows(&g, quick, json, threads, reps);
    if (json) printf("]}\n");
    if (bad) fprintf(stderr, "attn: error: --ggml: a run failed, or ggml's output differs from attn's by more than 1e-2\n");
    return bad;
}
