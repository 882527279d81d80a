/* seed.h -- where the C tests' random inputs start. Each place a test
 * seeds a generator names the seed it was written with; by default that
 * seed is used as it is, so every run draws the same inputs. With
 * ATTN_TEST_SEED=N in the environment every such place starts instead
 * from N mixed with its own seed (places stay apart from each other), so
 * that a run draws other inputs throughout, and the same ones again for
 * the same N: a check must hold for any inputs its generator may draw,
 * not only for the defaults'. The Python oracles take ATTN_TEST_SEED
 * too (tests/torch_attention.py); docs/testing.md tells how to sweep. */
#ifndef ATTN_TESTS_SEED_H
#define ATTN_TESTS_SEED_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* splitmix64's finalizer: a bijection whose output bits each depend on
 * every input bit, so nearby N give unrelated streams. */
static inline uint64_t seed_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The seed for a generator written with `fixed`: `fixed` itself, or
 * derived from it and ATTN_TEST_SEED (decimal or 0x hex; anything else
 * ends the program with a FAIL line, as a sweep must not run the defaults
 * unawares). The first call under ATTN_TEST_SEED says so, for the log. */
static inline uint64_t test_seed(uint64_t fixed) {
    static int said;
    const char *s = getenv("ATTN_TEST_SEED");
    if (!s || !*s) return fixed;
    char *end;
    errno = 0;
    uint64_t n = strtoull(s, &end, 0);
    if (*end || errno || *s == '-') {
        printf("FAIL test_seed: ATTN_TEST_SEED='%s' is not a whole number\n", s);
        exit(1);
    }
    if (!said) printf("# ATTN_TEST_SEED=%s: inputs drawn from it, not the tests' own seeds\n", s), said = 1;
    return seed_mix(seed_mix(n) ^ fixed);
}

#endif /* ATTN_TESTS_SEED_H */
