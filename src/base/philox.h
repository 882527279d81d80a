/* philox.h -- Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011), the counter-based generator that
 * PyTorch and FlashAttention use for dropout: four 32-bit words from a
 * 128-bit counter and a 64-bit key, with no state, so that any element's
 * random number is computed where it is needed, in any order, by any
 * thread. Not public. */
#ifndef ATTN_PHILOX_H
#define ATTN_PHILOX_H

#include <stdint.h>

static inline void attn_philox4x32_10(uint32_t out[4], const uint32_t counter[4], uint64_t key) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        if (round) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u; /* the Weyl sequence of keys */
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1, c3 = (uint32_t)p0, c0 = n0, c2 = n2;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

#endif /* ATTN_PHILOX_H */
