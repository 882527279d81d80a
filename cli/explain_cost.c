/* explain_cost.c -- `attn explain --cost`: what attention costs as the text
 * grows. For T tokens the score matrix is T x T, so its time and, when it is
 * kept, its memory grow as T^2; the streaming kernel never keeps it, and this
 * measures what it keeps instead (attn_sdpa_workspace_size) and how long it
 * takes (attn_sdpa, best of a few runs). */
#include "cli.h"
#include "text.h"

#include <stdlib.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void human(char *buf, size_t size, double bytes) {
    static const char *const UNIT[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (bytes >= 1024 && u < 3) bytes /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, UNIT[u]);
}

/* One row: T tokens of one head, d = 64, f32, causal. */
static int cost_row(int64_t T, double *ms, size_t *kept) {
    enum { D = 64 };
    int64_t shape[2] = {T, D};
    float *buf = malloc(sizeof(float) * (size_t)(4 * T * D));
    if (!buf) return cli_error(EXIT_DATA, "out of memory for T = %lld", (long long)T);
    for (int64_t i = 0; i < 4 * T * D; i++) buf[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    attn_tensor q, k, v, out;
    attn_tensor_init(&q, buf, ATTN_F32, 2, shape, NULL, NULL), attn_tensor_init(&k, buf + T * D, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&v, buf + 2 * T * D, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&out, buf + 3 * T * D, ATTN_F32, 2, shape, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_error err;
    attn_status st = attn_sdpa_workspace_size(kept, &out, NULL, NULL, &q, &k, &v, &o, &err);
    double best = 1e30;
    for (int rep = 0; rep < 3 && !st; rep++) {
        double t0 = seconds();
        st = attn_sdpa(&out, NULL, NULL, &q, &k, &v, &o, &err);
        if (seconds() - t0 < best) best = seconds() - t0;
    }
    free(buf);
    if (st) return cli_error(EXIT_DATA, "%s", err.message);
    *ms = 1e3 * best;
    return 0;
}

int cli_explain_cost(void) {
    enum { ROWS = 5, COLS = 6 };
    static const int64_t SIZES[ROWS] = {64, 256, 1024, 4096, 16384};
    static const char *const HEAD[COLS] = {"T", "time", "time ratio", "ns per score", "T x T scores", "kernel keeps"};
    static const int WIDTH[COLS] = {6, 11, 11, 13, 13, 13};
    char text[ROWS][COLS][24]; /* each row's cells */
    const char *cells[ROWS * COLS];
    double prev = 0;
    /* Every row measured before anything is printed: a row that fails (out
     * of memory for the largest T) left the heading on stdout beside the
     * error. */
    for (int i = 0; i < ROWS; i++) {
        double ms = 0;
        size_t kept = 0;
        int code = cost_row(SIZES[i], &ms, &kept);
        if (code) return code;
        /* A causal head computes the scores on and below the diagonal. */
        double scores = (double)SIZES[i] * (double)(SIZES[i] + 1) / 2;
        snprintf(text[i][0], 24, "%lld", (long long)SIZES[i]);
        snprintf(text[i][1], 24, "%.3f ms", ms);
        if (prev > 0) snprintf(text[i][2], 24, "x%.1f", ms / prev);
        else snprintf(text[i][2], 24, "-"); /* the first row has none above it */
        snprintf(text[i][3], 24, "%.2f", 1e6 * ms / scores);
        human(text[i][4], 24, 4.0 * (double)SIZES[i] * (double)SIZES[i]);
        human(text[i][5], 24, (double)kept);
        for (int j = 0; j < COLS; j++) cells[i * COLS + j] = text[i][j];
        prev = ms;
    }
    cli_prose(stdout, 0, 3, "What attention costs as the text grows (one head, d = 64, f32, causal, %s kernels)",
              attn_isa());
    printf("\n");
    cli_prose(stdout, 0, 0, "Every token scores every token before it: T x T scores. The time grows as T^2. "
              "Keeping the score matrix, as the textbook formula does, would take T^2 memory too; the streaming "
              "kernel keeps only blocks of it, whatever T is.");
    printf("\n");
    cli_table t = {COLS, ROWS, 1, WIDTH, NULL, HEAD, cells};
    cli_print_table(stdout, &t);
    printf("\n");
    cli_prose(stdout, 0, 3, "time ratio: this row's time over the row above's. Each row has 4x the tokens, so 16x "
              "the scores: if the time followed the scores alone, every ratio would be x16. The measured ratios fall "
              "short of it where fixed costs (setting up, packing the keys, waking the threads) are a large part of "
              "a small T's time, and where a larger T keeps more of the machine's threads busy; they come near x16 "
              "once T is large. A ratio above x16 means the larger T ran slower per score: its data outgrew a "
              "cache, or other work shared the machine.");
    cli_prose(stdout, 0, 3, "ns per score: the time over the T(T+1)/2 scores of a causal head, which would be the "
              "same on every row if the time grew exactly as T^2.");
    cli_prose(stdout, 0, 3, "kernel keeps: its workspace (attn_sdpa_workspace_size). It stops growing: it holds one "
              "block of queries and one of keys at a time, more than the whole matrix for a short text and a "
              "vanishing part of it for a long one.");
    cli_prose(stdout, 0, 0, "Measured on this machine, now; the times vary from run to run.");
    return 0;
}
