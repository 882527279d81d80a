/* verbose.c -- ATTN_VERBOSE=1: one line on stderr per attention call, saying
 * which kernel ran, on which instruction set and how many threads, on what
 * shapes, how much of it fell back to the exact kernel, and how long it took.
 * This is the only place the library prints, and only when asked. */
#include "sdpa/sdpa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stdatomic.h>

#if defined(__wasm__)
/* The explainer page's WebAssembly has no environment, clock or stderr:
 * verbose mode does not exist there. */
bool attn_verbose_on(void) { return false; }
void attn_set_verbose(int on) { (void)on; }
double attn_now_ms(void) { return 0; }
void attn_verbose_report(const char *call, const attn_run_info *info, const attn_slices *sl,
                         const attn_sdpa_options *o, double ms) {
    (void)call, (void)info, (void)sl, (void)o, (void)ms;
}
void attn_verbose_gemm(const char *call, const char *q, const char *k, const char *v, const char *out, int threads,
                       bool packed) {
    (void)call, (void)q, (void)k, (void)v, (void)out, (void)threads, (void)packed;
}
#else

/* The process-wide setting: -1 until first read, then ATTN_VERBOSE's value
 * (read once), or what attn_set_verbose last set. */
static atomic_int level = -1;

/* ATTN_VERBOSE is off when unset, empty, "0", "false", "no" or "off" (any
 * case), on for any other value: ATTN_VERBOSE=false asked for silence and
 * used to turn it on. Compared by hand, without POSIX's strcasecmp. */
static bool env_off_word(const char *env, const char *word) {
    for (; *env && *word; env++, word++)
        if ((*env >= 'A' && *env <= 'Z' ? *env - 'A' + 'a' : *env) != *word) return false;
    return !*env && !*word;
}

static int env_level(void) {
    const char *env = getenv("ATTN_VERBOSE");
    if (!env || !*env) return 0;
    static const char *const OFF[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < sizeof OFF / sizeof *OFF; i++)
        if (env_off_word(env, OFF[i])) return 0;
    return 1;
}

bool attn_verbose_on(void) {
    int l = atomic_load(&level);
    if (l < 0) {
        /* Only the first setting is stored: where attn_set_verbose ran
         * while the environment was read, its value stays and is the one
         * used (a plain store here used to overwrite it with ATTN_VERBOSE's,
         * so that attn_set_verbose(0) racing a first call could be lost). */
        int env = env_level();
        if (atomic_compare_exchange_strong(&level, &l, env)) l = env;
    }
    return l > 0;
}

void attn_set_verbose(int on) { atomic_store(&level, on < 0 ? env_level() : on > 0); }

double attn_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* "f32(2,8,128,64)", or "none" for a NULL tensor. */
static void describe(char *buf, size_t size, const attn_tensor *t) {
    if (!t) {
        snprintf(buf, size, "none");
        return;
    }
    /* No spaces, so that each key=value of the line is one word. */
    size_t n = (size_t)snprintf(buf, size, "%s(", attn_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && d < ATTN_MAX_RANK && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (n < size) snprintf(buf + n, size - n, ")");
}

void attn_verbose_report(const char *call, const attn_run_info *info, const attn_slices *sl,
                         const attn_sdpa_options *o, double ms) {
    static const char *const CAUSAL[] = {"none", "top-left", "bottom-right"};
    char sq[96], sk[96], sv[96], sm[96];
    describe(sq, sizeof sq, sl->q);
    /* Paged keys and values: the plan saw stand-ins; the pages' own dtype is shown. */
    attn_tensor kd, vd;
    if (sl->k_pages && sl->k) kd = *sl->k, kd.dtype = sl->k_pages->dtype;
    if (sl->v_pages && sl->v) vd = *sl->v, vd.dtype = sl->v_pages->dtype;
    describe(sk, sizeof sk, sl->k_pages && sl->k ? &kd : sl->k);
    describe(sv, sizeof sv, sl->v_pages && sl->v ? &vd : sl->v);
    describe(sm, sizeof sm, o->mask);
    char side[32] = ""; /* decode: KV heads an item read side by side, when more than one */
    if (strcmp(info->kernel, "decode") == 0 && info->side_by_side > 1)
        snprintf(side, sizeof side, " side_by_side=%d", info->side_by_side);
    char pages[32] = ""; /* decode: the most pages of a paged cache one microkernel call read */
    if (strcmp(info->kernel, "decode") == 0 && info->pages_per_call > 0)
        snprintf(pages, sizeof pages, " pages_per_call=%d", info->pages_per_call);
    char heads[32] = ""; /* decode: the most side-by-side KV heads one microkernel call read */
    if (strcmp(info->kernel, "decode") == 0 && info->heads_per_call > 0)
        snprintf(heads, sizeof heads, " heads_per_call=%d", info->heads_per_call);
    char group[80] = ""; /* the backward: query heads an item took together, when more than one, and in how many slices */
    if (strcmp(info->kernel, "flash_backward") == 0 && info->heads_per_item > 1)
        snprintf(group, sizeof group, " heads_per_item=%d grouped_slices=%lld/%lld", info->heads_per_item,
                 (long long)info->grouped_slices, (long long)info->items);
    char rows[32] = ""; /* decode: key and value rows read in place, or some widened first */
    if (strcmp(info->kernel, "decode") == 0 && info->rows) snprintf(rows, sizeof rows, " rows=%s", info->rows);
    /* One fprintf: stdio locks the stream, so lines of concurrent calls do
     * not interleave. */
    fprintf(stderr,
            "attn: %s kernel=%s%s%s%s%s%s%s%s%s%s isa=%s threads=%d/%d q=%s k=%s v=%s mask=%s causal=%s compute=%s%s"
            "%s dropout=%g softcap=%g alibi=%s window=%lld sinks=%s rope=%s weights=%s lse=%s fallback=%lld/%lld ms=%.3f\n",
            call, info->kernel, info->key_dot ? " key_dot=" : "", info->key_dot ? info->key_dot : "",
            info->value_dot ? " value_dot=" : "", info->value_dot ? info->value_dot : "", side, heads, pages, rows, group, info->isa, info->threads, info->threads_given, sq, sk, sv, sm,
            (unsigned)o->causal <= 2 ? CAUSAL[o->causal] : "?",
            o->compute == ATTN_COMPUTE_BF16 ? "bf16" : "f32", info->bf16 ? " bf16_kernels=" : "",
            info->bf16 ? info->bf16 : "", o->dropout_p, o->softcap, o->alibi_slopes ? "yes" : "no",
            (long long)o->window, o->sinks ? "yes" : "no",
            !sl->has_rope ? "no" : sl->rope.layout == ATTN_ROPE_HALVES ? "halves" : "interleaved", sl->weights ? "yes" : "no", sl->lse ? "yes" : "no",
            (long long)info->fallbacks, (long long)info->items, ms);
}

void attn_verbose_gemm(const char *call, const char *q, const char *k, const char *v, const char *out, int threads,
                       bool packed) {
    fprintf(stderr, "attn: %s_projections gemm_q=%s gemm_k=%s gemm_v=%s gemm_out=%s threads=%d packed=%s\n", call, q, k, v,
            out, threads, packed ? "yes" : "no");
}
#endif
