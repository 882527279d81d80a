/* naive.h -- one query row of attention from its definition, summed in long
 * double: the oracle the C tests' random programs check attn against, where
 * the keys and values sit in the test's own model of a pool or a batch. */
#ifndef ATTN_TESTS_NAIVE_H
#define ATTN_TESTS_NAIVE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Element e of key (or value) row j, wherever the caller keeps it. */
typedef double (*naive_read)(const void *ctx, int64_t j, int64_t e);

typedef struct naive_row {
    double lse;  /* log Σ_j exp(s_j); -inf when no key is seen */
    double pabs; /* the largest over the columns of Σ_j p_j |v_jc| / Σ_j p_j: the size of the output's terms */
    double sabs; /* the largest over the keys of Σ_e |q_e k_je| · |scale|: the size of a score's terms */
} naive_row;

/* Head h's rows of packed (positions, H, E) keys and (positions, H, Ev)
 * values, as naive_attend reads them (ctx a naive_packed). */
typedef struct naive_packed {
    const double *k, *v;
    int64_t H, h, E, Ev;
} naive_packed;
static double naive_packed_key(const void *ctx, int64_t j, int64_t e) {
    const naive_packed *r = ctx;
    return r->k[(j * r->H + r->h) * r->E + e];
}
static double naive_packed_value(const void *ctx, int64_t j, int64_t e) {
    const naive_packed *r = ctx;
    return r->v[(j * r->H + r->h) * r->Ev + e];
}

/* out (Ev) = softmax(s) v over keys 0 .. n - 1 (the caller's mask keeps
 * the first n), s_j = scale · q · k_j; out 0 and lse -inf for n = 0. false
 * when out of memory, out and lse then NaN. */
static int naive_attend(double *out, naive_row *r, const double *q, int64_t E, int64_t Ev, int64_t n, double scale,
                        naive_read key, naive_read value, const void *ctx) {
    long double *p = malloc((size_t)(n + 1) * sizeof *p), mx = -INFINITY, sum = 0;
    r->sabs = 0, r->pabs = 0, r->lse = NAN; /* out of memory: NaN, which no check passes */
    if (!p) {
        for (int64_t c = 0; c < Ev; c++) out[c] = NAN;
        return 0;
    }
    for (int64_t j = 0; j < n; j++) {
        long double d = 0, a = 0;
        for (int64_t e = 0; e < E; e++) {
            long double t = (long double)q[e] * key(ctx, j, e);
            d += t, a += fabsl(t);
        }
        p[j] = d * scale;
        if ((double)(a * fabs(scale)) > r->sabs) r->sabs = (double)(a * fabs(scale));
        if (p[j] > mx) mx = p[j];
    }
    for (int64_t j = 0; j < n; j++) p[j] = expl(p[j] - mx), sum += p[j];
    for (int64_t c = 0; c < Ev; c++) {
        long double acc = 0, aa = 0;
        for (int64_t j = 0; j < n; j++) {
            double x = value(ctx, j, c);
            acc += p[j] * x, aa += p[j] * fabs(x);
        }
        out[c] = sum > 0 ? (double)(acc / sum) : 0.0;
        if (sum > 0 && (double)(aa / sum) > r->pabs) r->pabs = (double)(aa / sum);
    }
    r->lse = sum > 0 ? (double)(mx + logl(sum)) : -INFINITY;
    free(p);
    return 1;
}

#endif /* ATTN_TESTS_NAIVE_H */
