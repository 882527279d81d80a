/* rng.h -- the tests' random numbers: a 64-bit linear congruential
 * generator (Knuth's MMIX constants) whose state, `rng`, each test file
 * seeds by defining TEST_RNG_SEED before including this and setting
 * rng = test_seed(TEST_RNG_SEED) first thing in main (seed.h: the same
 * numbers every run, or others under ATTN_TEST_SEED), and may set again
 * to draw the same inputs twice. */
#ifndef ATTN_TESTS_RNG_H
#define ATTN_TESTS_RNG_H

#include <math.h>
#include <stdint.h>

#include "seed.h"

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including rng.h"
#endif

static uint64_t rng = TEST_RNG_SEED;

/* Uniform in [0, 1), 53 bits. */
static inline double uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller), rounded to float. */
static inline float normal(void) {
    double u = 1 - uniform(), v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

#endif
