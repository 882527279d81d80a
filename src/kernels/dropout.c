/* dropout.c -- the dropout mask from Philox-4x32-10 (dropout.h). */
#include "kernels/dropout.h"
#include "base/philox.h"

/* Weights are dropped when the generator's 32-bit word is below p·2^32,
 * which is 2^32 for p = 1 (every word below it): 64 bits, since converting
 * 2^32 to a 32-bit type is undefined. */
static uint64_t threshold(double p) { return (uint64_t)(p * 4294967296.0); }

/* The four words of the generator for keys 4b..4b+3 of row i: counter
 * (b, i, slice, high bits of b), key the seed. */
static void words(uint32_t out[4], const attn_problem *p, int64_t i, int64_t b) {
    uint64_t row = (uint64_t)(p->row0 + i), slice = (uint64_t)p->slice;
    uint32_t counter[4] = {(uint32_t)b, (uint32_t)row, (uint32_t)slice,
                           (uint32_t)((uint64_t)b >> 32) ^ (uint32_t)(row >> 32) << 16 ^ (uint32_t)(slice >> 32) << 24};
    attn_philox4x32_10(out, counter, p->dropout_seed);
}

bool attn_dropout_keeps(const attn_problem *p, int64_t i, int64_t j) {
    if (p->dropout_p <= 0) return true;
    uint32_t w[4];
    words(w, p, i, j >> 2);
    return w[j & 3] >= threshold(p->dropout_p);
}

void attn_dropout_row(attn_score_block s, int64_t r, const attn_problem *p, int64_t i, int64_t j0, int64_t n) {
    if (p->dropout_p <= 0) return;
    uint64_t t = threshold(p->dropout_p);
    uint32_t w[4];
    double scale = attn_dropout_scale(p->dropout_p);
    for (int64_t c = 0; c < n; c++) {
        int64_t j = j0 + c;
        if (c == 0 || (j & 3) == 0) words(w, p, i, j >> 2);
        bool keep = w[j & 3] >= t;
        if (s.f64) {
            double *x = (double *)s.base + r * s.ld + c;
            *x = keep ? *x * scale : 0.0;
        } else {
            float *x = (float *)s.base + r * s.ld + c;
            *x = keep ? *x * (float)scale : 0.0f;
        }
    }
}
