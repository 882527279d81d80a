/* decode_quant_tiles.h -- the passes over the keys of the tiled integer
 * dot product kernels (decode_quant_avx512.c on 512-bit vectors,
 * decode_quant_avxvnni.c on two 256-bit halves), written once. The
 * including file defines, for its ISA:
 *   QDOT_INLINE, QR (query rows per pass), QG (quads of blocks per pass),
 *   QT (whole tiles a step)
 *   qrow_tab, qrow_table(tb, qq, r, g0, ng, nb)   a query row as tiles take it
 *   qdot_tile(s, lds, tb, k, ld, NK, g0, ng, nb, NQ, q4, whole, first, hm, NT)
 *                       the scores of NQ rows against NT tiles (NT > 1:
 *                       whole ones) of NK <= 4 keys each, quads
 *                       g0 .. g0 + ng - 1, added to s unless `first`
 * hm gathers the largest |d_k| as f16 bits in 16 lanes (0x7c00 and up: not
 * finite). */
#ifndef ATTN_DECODE_QUANT_TILES_H
#define ATTN_DECODE_QUANT_TILES_H

/* Keys fetched into L1 by hand this many keys ahead of the tiles that
 * compute them (whole tiles only: the rows of a span, from memory). The
 * hardware prefetcher alone left the keys' pass waiting on memory: one
 * thread, 32k positions, q4 11.1 ns a position and KV head without, 10.0
 * with 32 keys ahead (2.3 KiB of q4 rows, 4.3 KiB of q8), 10.5-10.7 with
 * 16, no better with 64 (docs/performance.md). */
enum { QPF_AHEAD = 32 };

QDOT_INLINE void qdot_pass(float *s, int64_t lds, const qrow_tab *tb, const uint8_t *k, int64_t ld, int64_t n,
                           int64_t g0, int ng, int64_t nb, const int NQ, const bool q4, __m256i *hm) {
    int64_t j = 0;
    if (nb % 4 == 0) {
        for (; j + 4 * QT <= n; j += 4 * QT) {
            if (j + QPF_AHEAD < n) /* the rows of the step QPF_AHEAD keys on, inside the span */
                for (int64_t o = 0; o < 4 * QT * ld; o += 64)
                    _mm_prefetch((const char *)(k + (j + QPF_AHEAD) * ld + o), _MM_HINT_T0);
            qdot_tile(s + j, lds, tb, k + j * ld, ld, 4, g0, ng, nb, NQ, q4, true, g0 == 0, hm, QT);
        }
        for (; j + 4 <= n; j += 4) qdot_tile(s + j, lds, tb, k + j * ld, ld, 4, g0, ng, nb, NQ, q4, true, g0 == 0, hm, 1);
    }
    for (; j + 4 <= n; j += 4) qdot_tile(s + j, lds, tb, k + j * ld, ld, 4, g0, ng, nb, NQ, q4, false, g0 == 0, hm, 1);
    if (j < n) qdot_tile(s + j, lds, tb, k + j * ld, ld, (int)(n - j), g0, ng, nb, NQ, q4, false, g0 == 0, hm, 1);
}

/* qdot.h's dot: rows r0 .. r0 + nq - 1 against n keys at kv (rows ld bytes
 * apart) into s; returns the largest |d_k| times the largest code, or -1
 * for a scale that is not finite. */
static float qdot_rows(float *s, int64_t lds, const attn_qrows *qq, int r0, int nq, const void *kv, int64_t ld,
                       int64_t n, bool q4, void *scratch) {
    const uint8_t *k = kv;
    int64_t nb = qq->E / 32, quads = (nb + 3) / 4;
    __m256i hm = _mm256_setzero_si256();
    _Static_assert(QR * sizeof(qrow_tab) <= ATTN_QDOT_SCRATCH, "the rows' tables fit the caller's scratch");
    qrow_tab *restrict tb = scratch; /* QR rows' tables (5 KiB with AVX-512): the caller's scratch, not the stack */
    for (int i = 0; i < nq; i += QR) { /* more rows: the keys again, from L1 */
        int rows = nq - i < QR ? nq - i : QR;
        for (int64_t g0 = 0; g0 < quads; g0 += QG) {
            int ng = quads - g0 < QG ? (int)(quads - g0) : QG;
            for (int r = 0; r < rows; r++) qrow_table(&tb[r], qq, r0 + i + r, g0, ng, nb);
            float *si = s + i * lds;
#define QDOT_PASS(NQ)                                                                     \
    do {                                                                                  \
        if (q4) qdot_pass(si, lds, tb, k, ld, n, g0, ng, nb, NQ, true, &hm);              \
        else qdot_pass(si, lds, tb, k, ld, n, g0, ng, nb, NQ, false, &hm);                \
    } while (0)
            switch (rows) {
            case 1: QDOT_PASS(1); break;
            case 2: QDOT_PASS(2); break;
            case 3: QDOT_PASS(3); break;
            default: QDOT_PASS(4); break;
            }
#undef QDOT_PASS
        }
    }
    uint16_t top[16];
    _mm256_storeu_si256((__m256i *)(void *)top, hm);
    unsigned most = 0;
    for (int i = 0; i < 16; i++) most = top[i] > most ? top[i] : most;
    if (most >= 0x7c00u) return -1.0f; /* an infinite or NaN scale */
    return _cvtsh_ss((unsigned short)most) * (q4 ? 8.0f : 128.0f);
}

#endif /* ATTN_DECODE_QUANT_TILES_H */
