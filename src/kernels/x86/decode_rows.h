/* decode_rows.h -- the decode microkernels (dot_rows, axpy_rows; see
 * ukernel.h), written once over a few vector operations that the including
 * file defines for its ISA:
 *   V, VL                       the vector type and its floats
 *   V_ZERO(), V_SET1(x)
 *   V_LOAD(p), V_STORE(p, v)    whole vectors, plain (never masked) moves
 *   V_LOADN(p, n), V_STOREN(p, v, n)   the first n < VL lanes (rest zero)
 *   V_FMA(a, b, c)              a·b + c, one rounding
 *   V_ABSMAX(big, x)            big = max(big, |x|)
 *   VBAD, V_BAD_NONE, V_BAD_ADD(bad, x), V_BAD_ANY(bad)
 *                               a record of NaN lanes seen
 *   V_HSUM(v), V_HMAX(v)        horizontal sum and maximum
 *   AXPY_CB(nq)                 column vectors per axpy block for nq rows:
 *                               as many as the registers hold
 *
 * Two things make these fast, and both are easy to lose:
 * - Every accumulator lives in a register. The row count is a run-time
 *   argument, so a loop over it would keep arrays of accumulators on the
 *   stack, and each key row would store and reload every one of them. Here
 *   the public functions switch on the row count into always-inlined bodies
 *   whose row and column counts are constants, fully unrolled.
 * - Whole vectors use plain loads; only a row's last, partial vector is
 *   masked. (A masked 512-bit load with a full mask is much slower than a
 *   plain one when streaming on some cores, Zen 5 among them.) */
#ifndef ATTN_DECODE_ROWS_H
#define ATTN_DECODE_ROWS_H

#include <float.h>

#define DECODE_INLINE static inline __attribute__((always_inline))

/* s[i * lds + j] = q[i * E ..] · k[j * ld ..] for i < nq, j < n; returns max
 * |k| over the rows read, or -1 if one is not finite. */
DECODE_INLINE float dot_rows_nq(float *s, int64_t lds, const float *q, const float *k, int64_t ld, int64_t n,
                                int64_t E, const int nq) {
    V big = V_ZERO();
    VBAD bad = V_BAD_NONE;
    int64_t full = E / VL * VL;
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * ld;
        V acc[ATTN_DECODE_MAX_ROWS];
#pragma GCC unroll 4
        for (int i = 0; i < nq; i++) acc[i] = V_ZERO();
        for (int64_t e = 0; e < full; e += VL) {
            V kv = V_LOAD(kj + e);
            V_ABSMAX(big, kv);
            V_BAD_ADD(bad, kv);
#pragma GCC unroll 4
            for (int i = 0; i < nq; i++) acc[i] = V_FMA(V_LOAD(q + i * E + e), kv, acc[i]);
        }
        if (full < E) {
            V kv = V_LOADN(kj + full, E - full);
            V_ABSMAX(big, kv);
            V_BAD_ADD(bad, kv);
#pragma GCC unroll 4
            for (int i = 0; i < nq; i++) acc[i] = V_FMA(V_LOADN(q + i * E + full, E - full), kv, acc[i]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < nq; i++) s[i * lds + j] = V_HSUM(acc[i]);
    }
    float most = V_HMAX(big); /* inf shows here, NaN in bad */
    return V_BAD_ANY(bad) || !(most <= FLT_MAX) ? -1.0f : most;
}

/* acc[i * Ev + e0 ..] += sum over j < n of p[i * ldp + j] · v[j * ld + e0 ..]
 * for i < nq, over cb vectors of columns (tail > 0: one vector holding the
 * last tail < VL columns). */
DECODE_INLINE void axpy_block(float *acc, const float *p, int64_t ldp, const float *v, int64_t ld, int64_t n,
                              int64_t Ev, int64_t e0, const int nq, const int cb, int tail) {
    V a[ATTN_DECODE_MAX_ROWS][8];
#pragma GCC unroll 4
    for (int i = 0; i < nq; i++)
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++)
            a[i][t] = tail ? V_LOADN(acc + i * Ev + e0, tail) : V_LOAD(acc + i * Ev + e0 + t * VL);
    for (int64_t j = 0; j < n; j++) {
        const float *vj = v + j * ld + e0;
        V vv[8];
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++) vv[t] = tail ? V_LOADN(vj, tail) : V_LOAD(vj + t * VL);
#pragma GCC unroll 4
        for (int i = 0; i < nq; i++) {
            V w = V_SET1(p[i * ldp + j]);
#pragma GCC unroll 8
            for (int t = 0; t < cb; t++) a[i][t] = V_FMA(w, vv[t], a[i][t]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nq; i++)
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++) {
            if (tail) V_STOREN(acc + i * Ev + e0, a[i][t], tail);
            else V_STORE(acc + i * Ev + e0 + t * VL, a[i][t]);
        }
}

/* All Ev columns for nq rows. Keys go in groups small enough that a group's
 * value rows stay in L1 while the column blocks pass over them, so v is read
 * from memory once whatever the number of column blocks. */
DECODE_INLINE void axpy_rows_nq(float *acc, const float *p, int64_t ldp, const float *v, int64_t ld, int64_t n,
                                int64_t Ev, const int nq) {
    const int cb = AXPY_CB(nq);
    int64_t group = Ev <= cb * VL ? n : 16384 / (4 * Ev) > 16 ? 16384 / (4 * Ev) : 16;
    for (int64_t j0 = 0; j0 < n; j0 += group) {
        int64_t nk = n - j0 < group ? n - j0 : group, e0 = 0;
        const float *pj = p + j0, *vj = v + j0 * ld;
        for (; e0 + cb * VL <= Ev; e0 += cb * VL) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, cb, 0);
        /* Fewer than cb whole vectors left: at most one block each of 4, 2, 1. */
        if (cb > 4 && e0 + 4 * VL <= Ev) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, 4, 0), e0 += 4 * VL;
        if (cb > 2 && e0 + 2 * VL <= Ev) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, 2, 0), e0 += 2 * VL;
        if (cb > 1 && e0 + VL <= Ev) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, 1, 0), e0 += VL;
        if (e0 < Ev) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, 1, (int)(Ev - e0));
    }
}

static float dot_rows(float *s, int64_t lds, const float *q, int nq, const float *k, int64_t ld, int64_t n,
                      int64_t E) {
    switch (nq) {
    case 1: return dot_rows_nq(s, lds, q, k, ld, n, E, 1);
    case 2: return dot_rows_nq(s, lds, q, k, ld, n, E, 2);
    case 3: return dot_rows_nq(s, lds, q, k, ld, n, E, 3);
    default: return dot_rows_nq(s, lds, q, k, ld, n, E, 4);
    }
}

static void axpy_rows(float *acc, const float *p, int64_t ldp, int nq, const float *v, int64_t ld, int64_t n,
                      int64_t Ev) {
    switch (nq) {
    case 1: axpy_rows_nq(acc, p, ldp, v, ld, n, Ev, 1); break;
    case 2: axpy_rows_nq(acc, p, ldp, v, ld, n, Ev, 2); break;
    case 3: axpy_rows_nq(acc, p, ldp, v, ld, n, Ev, 3); break;
    default: axpy_rows_nq(acc, p, ldp, v, ld, n, Ev, 4); break;
    }
}

#endif /* ATTN_DECODE_ROWS_H */
