/* rng.h -- the library's portable random numbers: the same sequence on every
 * platform, compiler and in WebAssembly, because it is integer arithmetic. */
#ifndef ATTN_RNG_H
#define ATTN_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct attn_rng {
    uint64_t state;
    bool has_spare; /* Box-Muller makes normals in pairs; the second waits here */
    double spare;
} attn_rng;

/* A generator started from `seed`. */
static inline attn_rng attn_rng_seeded(uint64_t seed) {
    attn_rng r = {seed, false, 0.0};
    return r;
}

/* splitmix64 (Steele, Lea, Flood 2014): a full-period 64-bit generator. */
static inline uint64_t attn_rng_next(attn_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 random bits: exact, so identical everywhere. */
static inline double attn_rng_uniform(attn_rng *r) {
    return (double)(attn_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal by Box-Muller (uses libm's log, sqrt, cos and sin). */
double attn_rng_normal(attn_rng *r);

#endif /* ATTN_RNG_H */
