/* quant_scales.h -- the f16 block scales of 4 q8 or q4 rows, as the
 * AVX512-VNNI kernels of decode take them (decode_quant_avx512.c's tiles of
 * keys and its values, decode_values_avx512.c's integer values): written
 * once. The including file defines QDOT_INLINE. */
#ifndef ATTN_QUANT_SCALES_H
#define ATTN_QUANT_SCALES_H

/* The tile's d_k (lanes 4b + j) as f32, zero outside the NK keys and nbk
 * blocks of the quad at k (row stride ld, blocks of bs bytes): each key's
 * f16 scales picked from the quad's first 128 bytes by one word permute
 * (masked loads: nothing past the quad is read); *hm gathers their bits
 * without the sign (16 lanes of u16). */
QDOT_INLINE __m512 tile_scales(const uint8_t *k, int64_t ld, int NK, int nbk, const bool q4, __m256i *hm) {
    const int ws = q4 ? 9 : 17; /* a block's bytes in 16-bit words */
    const __m512i idx = _mm512_zextsi256_si512(_mm256_setr_epi16(0, 0, 0, 0, ws, ws, ws, ws, 2 * ws, 2 * ws, 2 * ws,
                                                                 2 * ws, 3 * ws, 3 * ws, 3 * ws, 3 * ws));
    uint64_t need = 0; /* the words of the nbk scales, in a 128-byte window */
#pragma GCC unroll 4
    for (int b = 0; b < nbk; b++) need |= 1ull << (ws * b);
    __m512i w = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < NK; j++) {
        const uint8_t *r = k + j * ld;
        __m512i lo, hi = _mm512_setzero_si512();
        if (nbk == 4) { /* the window lies inside the quad's 136 or 72 bytes */
            lo = _mm512_loadu_si512(r);
            if (!q4) hi = _mm512_loadu_si512(r + 64);
        } else {
            lo = _mm512_maskz_loadu_epi16((__mmask32)need, r);
            if (!q4) hi = _mm512_maskz_loadu_epi16((__mmask32)(need >> 32), r + 64);
        }
        __mmask32 lanes = (__mmask32)(((1u << (4 * nbk)) - 1) & (0x1111u << j));
        /* q4's scales lie in the first 64 bytes: one source (VPERMW) */
        w = _mm512_or_si512(w, q4 ? _mm512_maskz_permutexvar_epi16(lanes, idx, lo)
                                  : _mm512_maskz_permutex2var_epi16(lanes, lo, idx, hi));
    }
    __m256i h = _mm512_castsi512_si256(w);
    *hm = _mm256_max_epu16(*hm, _mm256_and_si256(h, _mm256_set1_epi16(0x7fff)));
    return _mm512_cvtph_ps(h);
}

#endif /* ATTN_QUANT_SCALES_H */
