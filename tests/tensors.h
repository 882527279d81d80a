/* tensors.h -- the C tests' random data: splitmix64 and Box-Muller, and
 * C-contiguous tensors filled from them. Each test program has its own
 * generator state (rng_state), so its numbers do not depend on the others;
 * main sets rng_state = test_seed(TENSORS_SEED) first (seed.h: the same
 * numbers every run, or others under ATTN_TEST_SEED). */
#ifndef ATTN_TESTS_TENSORS_H
#define ATTN_TESTS_TENSORS_H

#include "attn.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "seed.h"

enum { TENSORS_SEED = 12345 };
static uint64_t rng_state = TENSORS_SEED;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_normal(void) {
    double u1 = ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next() >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A C-contiguous tensor with freshly allocated data (normal random values for
 * floats, ~75% true for bool). */
static attn_tensor make(attn_dtype dtype, int rank, const int64_t *shape) {
    attn_tensor t;
    attn_tensor_init(&t, NULL, dtype, rank, shape, NULL, NULL);
    int64_t n = attn_tensor_numel(&t);
    t.data = calloc((size_t)n + 1, attn_dtype_size(dtype));
    for (int64_t i = 0; i < n; i++) {
        if (dtype == ATTN_F64) ((double *)t.data)[i] = rng_normal();
        else if (dtype == ATTN_F32) ((float *)t.data)[i] = (float)rng_normal();
        else ((unsigned char *)t.data)[i] = (rng_next() & 3) != 0;
    }
    return t;
}

#endif /* ATTN_TESTS_TENSORS_H */
