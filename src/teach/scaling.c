/* scaling.c -- the "why divide by sqrt(d_k)" experiment:
 * random standard-normal queries and keys, how far the raw scores spread,
 * how peaked the softmax gets, and how small its gradient becomes. The
 * scores and softmaxes come from attn_scores and attn_sdpa. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/rng.h"

#include <stdlib.h>
#include <string.h>

enum { CHUNK = 16 }; /* queries per library call */

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ||diag(p) - p pᵀ||_F for one softmax row p: the size of the softmax's
 * Jacobian, i.e. how much the weights can still move when scores move.
 * Its square is sum_i p_i^2 ((1 - p_i)^2 + sum_{j != i} p_j^2). Expanded
 * into power sums it cancels to 0 once the softmax saturates (p_m near 1),
 * the very case measured, so the largest weight m's terms take 1 - p_m and
 * the other squares from r1 and r2, sums of the other weights: every term
 * is then a sum of non-negative numbers. */
static double jacobian_norm(const double *p, int n) {
    int m = 0;
    for (int i = 1; i < n; i++) m = p[i] > p[m] ? i : m;
    double r1 = 0, r2 = 0; /* sum and sum of squares of the weights other than p_m */
    for (int i = 0; i < n; i++)
        if (i != m) r1 += p[i], r2 += p[i] * p[i];
    double f = p[m] * p[m] * (r1 * r1 + r2);
    for (int i = 0; i < n; i++)
        if (i != m) f += p[i] * p[i] * ((1 - p[i]) * (1 - p[i]) + p[m] * p[m] + (r2 - p[i] * p[i]));
    return sqrt(f);
}

/* weights (c, 1, keys) = softmax(scale * scores) for c rows of scores, through
 * attn_sdpa: a query [1] against keys that are the scores themselves. */
static attn_status softmax_rows(double *weights, double *scores, double *ones, double *zeros,
                                int c, int keys, double scale, attn_error *err) {
    attn_tensor q, k, v, out, w;
    double sink[CHUNK];
    int64_t sq[3] = {c, 1, 1}, sk[3] = {c, keys, 1}, sw[3] = {c, 1, keys};
    attn_tensor_init(&q, ones, ATTN_F64, 3, sq, NULL, NULL);
    attn_tensor_init(&k, scores, ATTN_F64, 3, sk, NULL, NULL);
    attn_tensor_init(&v, zeros, ATTN_F64, 3, sk, NULL, NULL);
    attn_tensor_init(&out, sink, ATTN_F64, 3, sq, NULL, NULL);
    attn_tensor_init(&w, weights, ATTN_F64, 3, sw, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = scale;
    return attn_sdpa(&out, NULL, &w, &q, &k, &v, &o, err);
}

static void add_to_histogram(double *hist, double x, double range) {
    int bin = (int)floor((x + range) / (2 * range) * ATTN_SCALING_BINS);
    if (bin >= 0 && bin < ATTN_SCALING_BINS) hist[bin] += 1;
}

/* The row's statistics from the sums the experiment gathered: the spread
 * of the scores, the mean largest weight, the gradients' mean and median,
 * and the histograms as densities. */
static void summarize(attn_scaling_row *row, double sum, double sum2, const double top[3],
                      double *grad_raw, double *grad_scaled) {
    int queries = row->queries;
    double n = (double)queries * row->keys, mean = sum / n, var = sum2 / n - mean * mean;
    row->spread_raw = sqrt(var > 0 ? var : 0);
    row->spread_scaled = row->spread_raw * (1.0 / sqrt((double)row->d));
    row->top_raw = top[0] / queries, row->top_scaled = top[1] / queries, row->top_div_d = top[2] / queries;
    for (int i = 0; i < queries; i++) row->grad_mean_raw += grad_raw[i] / queries;
    for (int i = 0; i < queries; i++) row->grad_mean_scaled += grad_scaled[i] / queries;
    row->grad_median_raw = median(grad_raw, queries);
    row->grad_median_scaled = median(grad_scaled, queries);
    /* Histograms as densities: they integrate to the fraction inside the axis. */
    for (int b = 0; b < ATTN_SCALING_BINS; b++) {
        row->hist_raw[b] /= n * (2 * ATTN_SCALING_RAW_RANGE / ATTN_SCALING_BINS);
        row->hist_scaled[b] /= n * (2 * ATTN_SCALING_SCALED_RANGE / ATTN_SCALING_BINS);
    }
}

attn_status attn_scaling_measure(attn_scaling_row *out, int d, int queries, int keys,
                                 uint64_t seed, attn_error *err) {
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "row is NULL");
    if (d < 1 || queries < 1 || keys < 1 || d > (1 << 20) || keys > (1 << 20) || queries > (1 << 24))
        return attn_fail(err, ATTN_ERR_ARGUMENT,
                         "d=%d, queries=%d, keys=%d: each must be at least 1 (d and keys at most "
                         "2^20, queries at most 2^24)", d, queries, keys);
    /* The row is filled here and copied out only on success, so that a
     * failure leaves the caller's row as it was. */
    attn_scaling_row result, *row = &result;
    memset(row, 0, sizeof *row);
    row->d = d, row->queries = queries, row->keys = keys;

    /* Room for the queries of one call, no more than there are: one query
     * of a large d holds its own keys only. */
    int chunk = queries < CHUNK ? queries : CHUNK;
    size_t kn = (size_t)chunk * keys;
    double *qb = malloc(sizeof(double) * (size_t)chunk * (size_t)d);
    double *kb = malloc(sizeof(double) * kn * (size_t)d);
    double *scores = malloc(sizeof(double) * kn), *w = malloc(sizeof(double) * kn);
    double *zeros = calloc(kn, sizeof(double)), *ones = malloc(sizeof(double) * (size_t)chunk);
    double *grad_raw = malloc(sizeof(double) * (size_t)queries);
    double *grad_scaled = malloc(sizeof(double) * (size_t)queries);
    attn_status st = ATTN_OK;
    if (!qb || !kb || !scores || !w || !zeros || !ones || !grad_raw || !grad_scaled) {
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the experiment's buffers");
        goto done;
    }
    for (int i = 0; i < chunk; i++) ones[i] = 1.0;

    attn_rng rng = attn_rng_seeded(seed);
    double sum = 0, sum2 = 0, inv_sqrt_d = 1.0 / sqrt((double)d);
    double scales[3] = {1.0, inv_sqrt_d, 1.0 / d}, top[3] = {0, 0, 0};
    for (int q0 = 0; q0 < queries; q0 += CHUNK) {
        int c = queries - q0 < chunk ? queries - q0 : chunk;
        /* Query i, then its own keys: the stream does not depend on CHUNK. */
        for (int i = 0; i < c; i++) {
            for (int e = 0; e < d; e++) qb[(size_t)i * d + e] = attn_rng_normal(&rng);
            for (size_t e = 0; e < (size_t)keys * d; e++)
                kb[(size_t)i * keys * d + e] = attn_rng_normal(&rng);
        }
        attn_tensor tq, tk, ts;
        int64_t sq[3] = {c, 1, d}, sk[3] = {c, keys, d}, ss[3] = {c, 1, keys};
        attn_tensor_init(&tq, qb, ATTN_F64, 3, sq, NULL, NULL);
        attn_tensor_init(&tk, kb, ATTN_F64, 3, sk, NULL, NULL);
        attn_tensor_init(&ts, scores, ATTN_F64, 3, ss, NULL, NULL);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.has_scale = 1;
        o.scale = 1.0;
        if ((st = attn_scores(&ts, &tq, &tk, &o, err))) goto done;
        for (size_t j = 0; j < (size_t)c * keys; j++) {
            sum += scores[j], sum2 += scores[j] * scores[j];
            add_to_histogram(row->hist_raw, scores[j], ATTN_SCALING_RAW_RANGE);
            add_to_histogram(row->hist_scaled, scores[j] * inv_sqrt_d, ATTN_SCALING_SCALED_RANGE);
        }
        for (int s = 0; s < 3; s++) {
            if ((st = softmax_rows(w, scores, ones, zeros, c, keys, scales[s], err))) goto done;
            for (int i = 0; i < c; i++) {
                const double *p = w + (size_t)i * keys;
                double m = 0;
                for (int j = 0; j < keys; j++) m = p[j] > m ? p[j] : m;
                top[s] += m;
                if (s == 0) grad_raw[q0 + i] = jacobian_norm(p, keys);
                if (s == 1) grad_scaled[q0 + i] = jacobian_norm(p, keys);
            }
        }
    }
    summarize(row, sum, sum2, top, grad_raw, grad_scaled);
    *out = result;
done:
    free(qb), free(kb), free(scores), free(w), free(zeros), free(ones), free(grad_raw),
        free(grad_scaled);
    return st;
}
