/* decode_rows.h -- the decode microkernels (dot_rows, axpy_rows; see
 * ukernel.h), written once over a few vector operations that the including
 * file defines for its ISA:
 *   V, VL                       the vector type and its floats
 *   V_ZERO(), V_SET1(x)
 *   V_LOAD(p), V_STORE(p, v)    whole vectors, plain (never masked) moves
 *   V_LOADN(p, n), V_STOREN(p, v, n)   the first n < VL lanes (rest zero)
 *   V_WIDEN(h, f16), V_WIDENN(h, n, f16)  VL (or n < VL) 16-bit floats at h,
 *                               IEEE half (f16) or bfloat16, widened
 *   V_QUANT(row, i, format)     values i .. i+VL-1 (i a multiple of VL) of a
 *                               quantized row (ATTN_Q8, ATTN_Q4 or
 *                               ATTN_Q4_1) widened as widen_quant widens them
 *   V_FP8(b, format, values), V_FP8N(b, n, format, values)
 *                               VL (or n < VL) fp8 bytes at b (ATTN_E4M3
 *                               or ATTN_E5M2) read as IEEE halves and
 *                               widened, as keys or as values (below)
 *   V_FMA(a, b, c)              a·b + c, one rounding
 *   V_ABSMAX2(a, b)             max(|a|, |b|) (NaN lanes: either)
 *   VBAD, V_BAD_NONE, V_BAD_ADD(bad, x), V_BAD_ANY(bad)
 *                               a record of NaN lanes seen
 *   V_HSUM(v), V_HMAX(v)        horizontal sum and maximum
 *   V_FOLD(a, b), V_HSUM_GROUP(h, kb)
 *                               the horizontal sums of VL accumulators at
 *                               once: V_FOLD takes the first step of the
 *                               sums of two (slots p and p + VL/2) into one
 *                               vector, V_HSUM_GROUP the rest for the VL/2
 *                               folded vectors h, lane t the sum of key t
 *                               when keys went to slots as dot_rows_nq puts
 *                               them in blocks of kb; each lane bitwise
 *                               V_HSUM of its accumulator (the same adds)
 *   DOT_KB(nq)                  keys dot_rows computes at once for nq rows
 *                               (2 or 4: as many as the registers
 *                               hold; 0: one at a time, each summed alone)
 *   DOT_KB_FP8(nq)              the same for fp8 keys, if
 *                               it differs (else DOT_KB)
 *   V_KEEP(v)                   v kept in a register (a compiler barrier)
 *   AXPY_CB(nq)                 column vectors per axpy block for nq rows:
 *                               as many as the registers hold
 *   DECODE_NQ                   the most query rows dot_rows holds in
 *                               registers at once (4 or 8; axpy_rows: 4);
 *                               a call of more rows (up to
 *                               ATTN_DECODE_MAX_ROWS) runs them in blocks
 *
 * Three things make these fast, and all are easy to lose:
 * - Every accumulator lives in a register. The row count is a run-time
 *   argument, so a loop over it would keep arrays of accumulators on the
 *   stack, and each key row would store and reload every one of them. Here
 *   the public functions switch on the row count into always-inlined bodies
 *   whose row and column counts are constants, fully unrolled.
 * - Whole vectors use plain loads; only a row's last, partial vector is
 *   masked. (A masked 512-bit load with a full mask is much slower than a
 *   plain one when streaming on some cores, Zen 5 among them.)
 * - dot_rows sums its accumulators VL keys at a time. Summing a key's
 *   vector alone takes about 8 instructions, more than its FMAs for d =
 *   64; VL keys' vectors summed together by a transpose-and-add tree take
 *   about 3 a score, in the same order, so the scores are bitwise those of
 *   V_HSUM (a row count's work grows with the FMAs only: decode's cost per
 *   query row). NaN keys show in the scores (q · NaN is NaN for any q),
 *   checked once a group instead of once a key vector.
 * The rows' kind is their attn_dtype, a constant in each body: the one
 * numbering of formats (attn.h), asked through the library's predicates
 * (attn_rows_q_format, attn_dtype_fp8, attn_dtype_half), which the
 * compiler folds. Keys and values may be f32 or 16-bit floats (ATTN_F32,
 * ATTN_F16, ATTN_BF16), widened as they are loaded: a KV cache in 16 bits
 * is read once, at half the bytes; or blocked quantized rows
 * (attn_rows_q_format's: q8, q4, q4_1; attn.h, "Quantized storage"),
 * widened in registers a vector at a time, their row stride ld in bytes.
 * Widening is exact (q4_1's c · d + m rounds once, as widen_quant rounds
 * it), so every kind computes on the very floats the f32 kernel would be
 * given. The entry points at the end hand dot_any and axpy_any only the
 * kinds their callers may give (ukernel.h); any other format reads
 * nothing (dot: -1, as for a key not finite), never another format's rows.
 * fp8 rows (attn.h, "Quantized storage"; any length, ld in bytes) are read
 * in place as 16-bit floats, one byte a value:
 *   e5m2: the byte is the top byte of an IEEE half (byte << 8),
 *     widened exactly, infinities, NaN and subnormals included;
 *   e4m3: S.EEEE.MMM read as the half S.0EEEE.MMM0000000
 *     (the byte sign-extended to 16 bits, shifted left by 7, bit 14
 *     cleared), which is 2^-8 times its value, subnormals included (a
 *     half subnormal M is M · 2^-24: 128m · 2^-24 = m · 2^-9 · 2^-8). The
 *     caller folds the 2^8 into q (keys) or the weights (values), exact
 *     since it is a power of two, and each product q · (2^-8 k) is then
 *     the product q · k itself: the same bits as the f32 kernel on the
 *     widened rows. S.1111.111 (NaN) reads as ±480 · 2^-8: as keys (dot)
 *     it is found by max |k| > 448 · 2^-8, which dot_rows gathers
 *     anyway, and reported as a key not finite; as values (axpy) its
 *     lanes are made NaN (bit 14 set: the half's exponent all ones), one
 *     more integer operation a vector, so that NaN reaches the outputs as the
 *     f32 kernel's would. */
#ifndef ATTN_DECODE_ROWS_H
#define ATTN_DECODE_ROWS_H

#include <float.h>

#define DECODE_INLINE static inline __attribute__((always_inline))

#ifndef DOT_KB_FP8
#define DOT_KB_FP8(nq) DOT_KB(nq)
#endif

/* Element i.. of a row of keys or values (`values`) of the given kind, as f32. */
DECODE_INLINE V load_kv(const void *p, int64_t i, const attn_dtype kind, const bool values) {
    if (kind == ATTN_F32) return V_LOAD((const float *)p + i);
    if (attn_rows_q_format(kind)) return V_QUANT((const uint8_t *)p, i, kind);
    if (attn_dtype_fp8(kind)) return V_FP8((const uint8_t *)p + i, kind, values);
    return V_WIDEN((const uint16_t *)p + i, kind == ATTN_F16);
}

/* (Quantized rows hold a multiple of 32 values: never a partial vector;
 * fp8 rows any number.) */
DECODE_INLINE V load_kvn(const void *p, int64_t i, int64_t n, const attn_dtype kind, const bool values) {
    if (kind == ATTN_F32) return V_LOADN((const float *)p + i, n);
    if (attn_rows_q_format(kind)) return V_QUANT((const uint8_t *)p, i, kind);
    if (attn_dtype_fp8(kind)) return V_FP8N((const uint8_t *)p + i, n, kind, values);
    return V_WIDENN((const uint16_t *)p + i, n, kind == ATTN_F16);
}

/* Row j of keys or values of the given kind, with row stride ld elements
 * (bytes for quantized rows). */
DECODE_INLINE const void *row_kv(const void *p, int64_t j, int64_t ld, const attn_dtype kind) {
    return kind == ATTN_F32           ? (const void *)((const float *)p + j * ld)
           : !attn_dtype_half(kind) ? (const void *)((const uint8_t *)p + j * ld)
                                      : (const void *)((const uint16_t *)p + j * ld);
}

/* Row j of a source of rows: of a strided matrix at p (row stride ld), or,
 * when `list`, the j-th of the row pointers at p (rows anywhere: the pages
 * of a paged cache, several in one call); and the source from row j on. */
DECODE_INLINE const void *src_row(const void *p, int64_t j, int64_t ld, const attn_dtype kind, const bool list) {
    return list ? ((const void *const *)p)[j] : row_kv(p, j, ld, kind);
}

DECODE_INLINE const void *src_from(const void *p, int64_t j, int64_t ld, const attn_dtype kind, const bool list) {
    return list ? (const void *)((const void *const *)p + j) : row_kv(p, j, ld, kind);
}

/* A list's row j + ahead asked for, every cache line of its E values (f32
 * or 16-bit), while row j is computed (and fp8 rows ld apart, below,
 * the same way): the list kernels' prefetch
 * (ukernel.h). A list's rows lie in pages of a cache, whose starts the
 * hardware prefetcher does not find; asked for a row at a time, as the rows
 * before them are computed, the prefetches never queue up behind each
 * other as a page start's did when asked for all at once. Into L1
 * (prefetcht0): on Zen 5 paged decode took 1.11-1.16x contiguous's time so
 * with pages of 16, 1.20-1.25x with prefetcht1 (into L2); pages of 256 the
 * same either way (docs/performance.md). */
#define ROW_PREFETCH_HINT 3
DECODE_INLINE void prefetch_ahead(const void *p, int64_t j, int64_t ld, int64_t ahead, int64_t E, const attn_dtype kind,
                                  const bool list) {
    if (!ahead) return;
    /* rows ld apart: the address as an integer (a prefetch past the rows never faults) */
    uintptr_t row = list ? (uintptr_t)((const char *const *)p)[j + ahead]
                         : (uintptr_t)p + (uintptr_t)((j + ahead) * ld * (kind == ATTN_F32 ? 4 : attn_dtype_half(kind) ? 2 : 1));
    int64_t bytes = E * (kind == ATTN_F32 ? 4 : attn_dtype_fp8(kind) ? 1 : 2); /* f32, fp8 or 16-bit rows */
    uintptr_t at = row & ~(uintptr_t)63, end = row + (uintptr_t)bytes;
    for (; at < end; at += 64) __builtin_prefetch((const char *)at, 0, ROW_PREFETCH_HINT);
}

/* big = max(big, |kv[t]|) for t < nk: the nk vectors' maximum first, so
 * that big waits on one operation a step, not nk. */
DECODE_INLINE void keys_absmax(V *big, const V *kv, const int nk) {
    V m = nk == 1   ? kv[0]
          : nk == 2 ? V_ABSMAX2(kv[0], kv[1])
                    : V_ABSMAX2(V_ABSMAX2(kv[0], kv[1]), V_ABSMAX2(kv[2], kv[3]));
    *big = V_ABSMAX2(*big, m);
}

/* acc[t][i] = the vector products of query row i and key row kr[t]
 * (before their horizontal sums), for i < nq, t < nk <= 4: each vector of
 * q loaded once for the nk keys. big gathers max |k|. */
DECODE_INLINE void dot_keys(V acc[4][DECODE_NQ], const float *q, const void *const *kr, int64_t E, const int nq,
                            const int nk, const attn_dtype kind, V *big) {
    int64_t full = E / VL * VL;
#pragma GCC unroll 4
    for (int t = 0; t < nk; t++)
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) acc[t][i] = V_ZERO();
    for (int64_t e = 0; e < full; e += VL) {
        V kv[4];
#pragma GCC unroll 4
        for (int t = 0; t < nk; t++) {
            kv[t] = load_kv(kr[t], e, kind, false);
            V_KEEP(kv[t]);
        }
        keys_absmax(big, kv, nk);
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) {
            V qv = V_LOAD(q + i * E + e);
#pragma GCC unroll 4
            for (int t = 0; t < nk; t++) acc[t][i] = V_FMA(qv, kv[t], acc[t][i]);
        }
    }
    if (full < E) {
        V kv[4];
#pragma GCC unroll 4
        for (int t = 0; t < nk; t++) kv[t] = load_kvn(kr[t], full, E - full, kind, false);
        keys_absmax(big, kv, nk);
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) {
            V qv = V_LOADN(q + i * E + full, E - full);
#pragma GCC unroll 4
            for (int t = 0; t < nk; t++) acc[t][i] = V_FMA(qv, kv[t], acc[t][i]);
        }
    }
}

/* s[i * lds + j] = q[i * E ..] · k[j * ld ..] for i < nq, j < n; returns max
 * |k| over the rows read, or -1 if one is not finite (or a score is NaN).
 * Keys go VL at a time, in order, in blocks of kb = DOT_KB(nq) computed
 * together; each pair of a block is folded as soon as it is done, and the
 * group's sums are stored a vector at a time. Key kb·b + u of a group goes
 * to slot b + {0, VL/2, VL/4, VL/4 + VL/2}[u] of the tree (V_HSUM_GROUP).
 * (kb = 0: every key alone.)
 * The last n % VL keys go one at a time, summed by V_HSUM to the same
 * bits, so a key's score does not depend on where a call starts or ends. */
DECODE_INLINE float dot_rows_nq(float *s, int64_t lds, const float *q, const void *k, int64_t ld, int64_t n,
                                int64_t E, const int nq, const attn_dtype kind, const bool list, int64_t ahead) {
    const int kb = attn_dtype_fp8(kind) ? DOT_KB_FP8(nq) : DOT_KB(nq), blocks = kb > 0 ? VL / kb : 0;
    V big = V_ZERO();
    VBAD bad = V_BAD_NONE;
    int64_t j = 0;
    for (; kb > 0 && j + VL <= n; j += VL) {
        V half[DECODE_NQ][VL / 2]; /* per row, the folded pairs of slots p and p + VL/2 */
        for (int b = 0; b < blocks; b++) {
            const void *kr[4];
#pragma GCC unroll 4
            for (int t = 0; t < kb; t++) {
                kr[t] = src_row(k, j + b * kb + t, ld, kind, list);
                prefetch_ahead(k, j + b * kb + t, ld, ahead, E, kind, list);
            }
            V acc[4][DECODE_NQ];
            dot_keys(acc, q, kr, E, nq, kb, kind, &big);
#pragma GCC unroll 8
            for (int i = 0; i < nq; i++) {
                half[i][b] = V_FOLD(acc[0][i], acc[1][i]);
                if (kb == 4) half[i][b + VL / 4] = V_FOLD(acc[2][i], acc[3][i]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) {
            V sums = V_HSUM_GROUP(half[i], kb);
            V_STORE(s + i * lds + j, sums);
            if (i == 0) V_BAD_ADD(bad, sums);
        }
    }
    bool nan = false;
    for (; j < n; j++) {
        const void *kr[1] = {src_row(k, j, ld, kind, list)};
        prefetch_ahead(k, j, ld, ahead, E, kind, list);
        V acc[4][DECODE_NQ];
        dot_keys(acc, q, kr, E, nq, 1, kind, &big);
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) s[i * lds + j] = V_HSUM(acc[0][i]);
        nan |= s[j] != s[j];
    }
    float most = V_HMAX(big); /* inf shows here, NaN in the scores */
    /* e4m3 keys, read as 2^-8 times their values: a NaN code reads past
     * 448 · 2^-8; max |k| in the keys' own units */
    if (kind == ATTN_E4M3) return nan || V_BAD_ANY(bad) || !(most <= 448.0f / 256) ? -1.0f : most * 256;
    return nan || V_BAD_ANY(bad) || !(most <= FLT_MAX) ? -1.0f : most;
}

/* The accumulators a[i][t] of rows i < nq, columns e0 + t·VL .. (cb
 * vectors; tail > 0: one vector of the last tail < VL columns), loaded
 * from acc (rows Ev apart) and stored back. */
DECODE_INLINE void accs_load(V a[DECODE_NQ][8], const float *acc, int64_t Ev, int64_t e0, const int nq, const int cb,
                             int tail) {
#pragma GCC unroll 8
    for (int i = 0; i < nq; i++)
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++)
            a[i][t] = tail ? V_LOADN(acc + i * Ev + e0, tail) : V_LOAD(acc + i * Ev + e0 + t * VL);
}

DECODE_INLINE void accs_store(float *acc, V a[DECODE_NQ][8], int64_t Ev, int64_t e0, const int nq, const int cb,
                              int tail) {
#pragma GCC unroll 8
    for (int i = 0; i < nq; i++)
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++) {
            if (tail) V_STOREN(acc + i * Ev + e0, a[i][t], tail);
            else V_STORE(acc + i * Ev + e0 + t * VL, a[i][t]);
        }
}

/* acc[i * Ev + e0 ..] += sum over j < n of p[i * ldp + j] · v[j * ld + e0 ..]
 * for i < nq, over cb vectors of columns (tail > 0: one vector holding the
 * last tail < VL columns). */
DECODE_INLINE void axpy_block(float *acc, const float *p, int64_t ldp, const void *v, int64_t ld, int64_t n,
                              int64_t Ev, int64_t e0, const int nq, const int cb, int tail, const attn_dtype kind,
                              const bool list, int64_t ahead) {
    V a[DECODE_NQ][8];
    accs_load(a, acc, Ev, e0, nq, cb, tail);
    for (int64_t j = 0; j < n; j++) {
        const void *vj = src_row(v, j, ld, kind, list);
        prefetch_ahead(v, j, ld, ahead, Ev, kind, list);
        V vv[8];
#pragma GCC unroll 8
        for (int t = 0; t < cb; t++) {
            vv[t] = tail ? load_kvn(vj, e0, tail, kind, true) : load_kv(vj, e0 + t * VL, kind, true);
            V_KEEP(vv[t]); /* loaded once, not once per row */
        }
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) {
            V w = V_SET1(p[i * ldp + j]);
#pragma GCC unroll 8
            for (int t = 0; t < cb; t++) a[i][t] = V_FMA(w, vv[t], a[i][t]);
        }
    }
    accs_store(acc, a, Ev, e0, nq, cb, tail);
}

/* Ev columns from e0 by BLOCK(vectors, tail): blocks of cb vectors; with
 * fewer than cb whole vectors left, at most one block each of 4, 2, 1;
 * then the last Ev % VL columns. */
#define COLUMN_BLOCKS(BLOCK)                                                                       \
    do {                                                                                           \
        for (; e0 + cb * VL <= Ev; e0 += cb * VL) BLOCK(cb, 0);                                    \
        if (cb > 4 && e0 + 4 * VL <= Ev) BLOCK(4, 0), e0 += 4 * VL;                                \
        if (cb > 2 && e0 + 2 * VL <= Ev) BLOCK(2, 0), e0 += 2 * VL;                                \
        if (cb > 1 && e0 + VL <= Ev) BLOCK(1, 0), e0 += VL;                                        \
        if (e0 < Ev) BLOCK(1, (int)(Ev - e0));                                                     \
    } while (0)

/* All Ev columns for nq rows. Keys go in groups small enough that a group's
 * value rows stay in L1 while the column blocks pass over them, so v is read
 * from memory once whatever the number of column blocks. */
DECODE_INLINE void axpy_rows_nq(float *acc, const float *p, int64_t ldp, const void *v, int64_t ld, int64_t n,
                                int64_t Ev, const int nq, const attn_dtype kind, const bool list, int64_t ahead) {
    const int cb = AXPY_CB(nq);
    int64_t group = Ev <= cb * VL ? n : 16384 / (4 * Ev) > 16 ? 16384 / (4 * Ev) : 16;
    for (int64_t j0 = 0; j0 < n; j0 += group) {
        int64_t nk = n - j0 < group ? n - j0 : group, e0 = 0;
        const float *pj = p + j0;
        const void *vj = src_from(v, j0, ld, kind, list);
        /* the rows ahead asked for in the first column block only */
#define AXPY_BLOCK(cbk, tail) axpy_block(acc, pj, ldp, vj, ld, nk, Ev, e0, nq, cbk, tail, kind, list, e0 ? 0 : ahead)
        COLUMN_BLOCKS(AXPY_BLOCK);
#undef AXPY_BLOCK
    }
}

/* The bodies for every row count (and kind): dot_rows up to DECODE_NQ
 * rows at once, axpy_rows up to 4. (axpy_rows' weights are broadcast once
 * per row and column block, so more rows in fewer column blocks save it
 * nothing; dot_rows loads each key once for all its rows.) `list`: rows
 * given as a list of pointers (f32 and 16-bit kinds only). */
#define ROWS_1_3(CALL, kind, list)                                                                 \
    case 1: CALL(1, kind, list);                                                                   \
    case 2: CALL(2, kind, list);                                                                   \
    case 3: CALL(3, kind, list);
#if DECODE_NQ > 4
#define ROWS_4_7(CALL, kind, list)                                                                 \
    case 4: CALL(4, kind, list);                                                                   \
    case 5: CALL(5, kind, list);                                                                   \
    case 6: CALL(6, kind, list);                                                                   \
    case 7: CALL(7, kind, list);
#else
#define ROWS_4_7(CALL, kind, list)
#endif
#define DOT_SWITCH(kind, list)                                                                     \
    switch (nq) {                                                                                  \
        ROWS_1_3(DOT_CALL, kind, list)                                                             \
        ROWS_4_7(DOT_CALL, kind, list)                                                             \
    default: DOT_CALL(DECODE_NQ, kind, list);                                                      \
    }
#define AXPY_SWITCH(kind, list)                                                                    \
    switch (nq) {                                                                                  \
        ROWS_1_3(AXPY_CALL, kind, list)                                                            \
    default: AXPY_CALL(4, kind, list);                                                             \
    }
#define DOT_CALL(NQ, kind, list) return dot_rows_nq(s, lds, q, k, ld, n, E, NQ, kind, list, ahead)
#define AXPY_CALL(NQ, kind, list)                                                                  \
    do {                                                                                           \
        axpy_rows_nq(acc, p, ldp, v, ld, n, Ev, NQ, kind, list, ahead);                            \
        return;                                                                                    \
    } while (0)

/* nq <= DECODE_NQ rows (axpy: 4) of a kind named here, each its own body;
 * list: k (v) a list of row pointers, f32, f16 or bf16. A kind named
 * nowhere (a format attn_rows_q_format learns before it is added here)
 * is read by no body: dot returns -1, as for keys not finite, and decode's
 * caller has the exact kernel redo the slice (fast/decode.c). */
static float dot_block(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n,
                       int64_t E, attn_dtype kind, bool list, int64_t ahead) {
    if (list) {
        if (kind == ATTN_F16) DOT_SWITCH(ATTN_F16, true)
        if (kind == ATTN_BF16) DOT_SWITCH(ATTN_BF16, true)
        if (kind == ATTN_F32) DOT_SWITCH(ATTN_F32, true)
        return -1.0f;
    }
    if (kind == ATTN_F16) DOT_SWITCH(ATTN_F16, false)
    if (kind == ATTN_BF16) DOT_SWITCH(ATTN_BF16, false)
    if (kind == ATTN_Q8) DOT_SWITCH(ATTN_Q8, false)
    if (kind == ATTN_Q4) DOT_SWITCH(ATTN_Q4, false)
    if (kind == ATTN_E4M3) DOT_SWITCH(ATTN_E4M3, false)
    if (kind == ATTN_E5M2) DOT_SWITCH(ATTN_E5M2, false)
    if (kind == ATTN_Q4_1) DOT_SWITCH(ATTN_Q4_1, false)
    if (kind == ATTN_F32) DOT_SWITCH(ATTN_F32, false)
    return -1.0f;
}

static void axpy_block_rows(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                            int64_t Ev, attn_dtype kind, bool list, int64_t ahead) {
    if (list) {
        if (kind == ATTN_F16) AXPY_SWITCH(ATTN_F16, true)
        if (kind == ATTN_BF16) AXPY_SWITCH(ATTN_BF16, true)
        if (kind == ATTN_F32) AXPY_SWITCH(ATTN_F32, true)
        return;
    }
    if (kind == ATTN_F16) AXPY_SWITCH(ATTN_F16, false)
    if (kind == ATTN_BF16) AXPY_SWITCH(ATTN_BF16, false)
    if (kind == ATTN_Q8) AXPY_SWITCH(ATTN_Q8, false)
    if (kind == ATTN_Q4) AXPY_SWITCH(ATTN_Q4, false)
    if (kind == ATTN_E4M3) AXPY_SWITCH(ATTN_E4M3, false)
    if (kind == ATTN_E5M2) AXPY_SWITCH(ATTN_E5M2, false)
    if (kind == ATTN_Q4_1) AXPY_SWITCH(ATTN_Q4_1, false)
    if (kind == ATTN_F32) AXPY_SWITCH(ATTN_F32, false)
}

/* Up to ATTN_DECODE_MAX_ROWS rows, DECODE_NQ at a time (axpy: 4), the keys
 * or values read again from L1 for a second block. */
static float dot_any(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n, int64_t E,
                     attn_dtype kind, bool list, int64_t ahead) {
    float most = 0;
    for (int r0 = 0; r0 < nq && most >= 0; r0 += DECODE_NQ) { /* the rows ahead asked for in the first block */
        float b = dot_block(s + r0 * lds, lds, q + r0 * E, nq - r0 < DECODE_NQ ? nq - r0 : DECODE_NQ, k, ld, n, E,
                            kind, list, r0 ? 0 : ahead);
        most = b < 0 ? -1.0f : b > most ? b : most;
    }
    return most;
}

static void axpy_any(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                     int64_t Ev, attn_dtype kind, bool list, int64_t ahead) {
    for (int r0 = 0; r0 < nq; r0 += 4)
        axpy_block_rows(acc + r0 * Ev, p + r0 * ldp, ldp, nq - r0 < 4 ? nq - r0 : 4, v, ld, n, Ev, kind, list,
                        r0 ? 0 : ahead);
}

static float dot_rows(float *s, int64_t lds, const float *q, int nq, const float *k, int64_t ld, int64_t n,
                      int64_t E) {
    return dot_any(s, lds, q, nq, k, ld, n, E, ATTN_F32, false, 0);
}

static float dot_rows16(float *s, int64_t lds, const float *q, int nq, const uint16_t *k, int64_t ld, int64_t n,
                        int64_t E, bool f16) {
    return dot_any(s, lds, q, nq, k, ld, n, E, f16 ? ATTN_F16 : ATTN_BF16, false, 0);
}

static void axpy_rows(float *acc, const float *p, int64_t ldp, int nq, const float *v, int64_t ld, int64_t n,
                      int64_t Ev) {
    axpy_any(acc, p, ldp, nq, v, ld, n, Ev, ATTN_F32, false, 0);
}

static void axpy_rows16(float *acc, const float *p, int64_t ldp, int nq, const uint16_t *v, int64_t ld, int64_t n,
                        int64_t Ev, bool f16) {
    axpy_any(acc, p, ldp, nq, v, ld, n, Ev, f16 ? ATTN_F16 : ATTN_BF16, false, 0);
}

/* Blocked quantized rows, attn_rows_q_format's (ukernel.h); another format
 * reads nothing. */
static float dot_rows_q(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n,
                        int64_t E, attn_dtype format) {
    return attn_rows_q_format(format) ? dot_any(s, lds, q, nq, k, ld, n, E, format, false, 0) : -1.0f;
}

static void axpy_rows_q(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                        int64_t Ev, attn_dtype format) {
    if (attn_rows_q_format(format)) axpy_any(acc, p, ldp, nq, v, ld, n, Ev, format, false, 0);
}

/* fp8 rows are asked for FP8_AHEAD rows ahead of the one computed, as the
 * list kernels ask for theirs: the hardware prefetcher alone left e4m3's
 * decode waiting on memory (one thread, 32k positions, H32/8, d 128: 20.3-21.4
 * ns a position and KV head without, 19.5 with 8 rows ahead, 18.9-19.0 with
 * 32; docs/performance.md). */
enum { FP8_AHEAD = 32 };
/* fp8 rows in place (ukernel.h): e4m3 read as 2^-8 times its values, for
 * q (p) given times 2^8; keys' NaN codes found by max |k|, values' made
 * NaN. */
static float dot_rows_fp8(float *s, int64_t lds, const float *q, int nq, const void *k, int64_t ld, int64_t n,
                          int64_t E, attn_dtype format) {
    return attn_dtype_fp8(format) ? dot_any(s, lds, q, nq, k, ld, n, E, format, false, FP8_AHEAD) : -1.0f;
}

static void axpy_rows_fp8(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n,
                          int64_t Ev, attn_dtype format) {
    if (attn_dtype_fp8(format)) axpy_any(acc, p, ldp, nq, v, ld, n, Ev, format, false, FP8_AHEAD);
}

/* Rows anywhere, one pointer each (f32, f16 or bf16; ukernel.h); another
 * dtype reads nothing. */
DECODE_INLINE bool list_dtype(attn_dtype dtype) { return dtype == ATTN_F32 || attn_dtype_half(dtype); }

static float dot_rows_list(float *s, int64_t lds, const float *q, int nq, const void *const *k, int64_t n,
                           int64_t ahead, int64_t E, attn_dtype dtype) {
    return list_dtype(dtype) ? dot_any(s, lds, q, nq, k, 0, n, E, dtype, true, ahead) : -1.0f;
}

static void axpy_rows_list(float *acc, const float *p, int64_t ldp, int nq, const void *const *v, int64_t n,
                           int64_t ahead, int64_t Ev, attn_dtype dtype) {
    if (list_dtype(dtype)) axpy_any(acc, p, ldp, nq, v, 0, n, Ev, dtype, true, ahead);
}

/* ---- KV heads side by side (ukernel.h: dot_rows_heads, axpy_rows_heads) ----
 * Keys or values packed (tokens, Hk, E), as a ragged batch's packed K and
 * V are: a position's heads lie side by side, hs floats apart, and the
 * next position's ld floats on. Query row i of a call reads head i / per
 * (per: one head's rows, its GQA group's query heads times L), so one call
 * computes every head's rows and reads each position's heads together:
 * one forward stream of memory, as one head of a head-major cache is. Each
 * head's rows read by calls of its own, a stretch at a time, left the other
 * heads' lines between them and read at about half the rate
 * (docs/performance.md). A score is summed as dot_rows_nq sums it (one key
 * at a time, V_HSUM: the same bits as its blocks of keys) and a weighted sum
 * as axpy_block adds it, so the results are those of the per-head calls. */
/* Both heads kernels ask for every line of the position about
 * HEADS_AHEAD_BYTES on (prefetcht0). The values' first column block reads
 * only some lines of each position when it holds fewer columns than Ev
 * (the later blocks read the rest from L1), and the memory stream it makes
 * has gaps the hardware prefetcher does not fill: Zen 5, 64 sequences of
 * 100..32,000 keys, Hq 8, Hk 2, d 64 (two column blocks of 32), 29 ms with
 * 8 KiB or 2 KiB ahead against 37 ms without. The keys are read whole, in
 * order, and still gained: the same batch 28.8-31.4 ms without, 25.2-28.3
 * with 8 KiB ahead, 25.6-26.5 with 16 KiB, 27.3-29.5 with 4 KiB (quiet,
 * medians of 5 calls, in turns; docs/performance.md). */
enum { HEADS_AHEAD_BYTES = 8192 };

/* Positions ahead for rows ld floats apart (0: ld unknown). */
DECODE_INLINE int64_t heads_ahead(int64_t ld) {
    return ld < 1 ? 0 : HEADS_AHEAD_BYTES / (4 * ld) > 1 ? HEADS_AHEAD_BYTES / (4 * ld) : 1;
}

/* Every line of the nh heads (hs floats apart, cols each) of the position
 * at row (a prefetch past the rows never faults). */
DECODE_INLINE void prefetch_heads(const float *row, int nh, int64_t hs, int64_t cols) {
    const char *at = (const char *)row, *end = at + 4 * ((nh - 1) * hs + cols);
    for (at = (const char *)((uintptr_t)at & ~(uintptr_t)63); at < end; at += 64) __builtin_prefetch(at, 0, 3);
}

DECODE_INLINE void dot_heads_nq(float *s, int64_t lds, const float *q, const float *k, int64_t ld, int64_t hs,
                                int64_t n, int64_t E, const int nq, const int per, float *kmax) {
    const int nh = nq / per;
    int64_t full = E / VL * VL;
    V big[DECODE_NQ]; /* per head: max |k| */
    bool nan[DECODE_NQ];
#pragma GCC unroll 8
    for (int h = 0; h < nh; h++) big[h] = V_ZERO(), nan[h] = false;
    int64_t ahead = heads_ahead(ld);
    for (int64_t j = 0; j < n; j++) {
        const float *kj = k + j * ld;
        if (ahead) prefetch_heads(k + (j + ahead) * ld, nh, hs, E);
        V acc[DECODE_NQ];
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) acc[i] = V_ZERO();
        for (int64_t e = 0; e < full; e += VL)
#pragma GCC unroll 8
            for (int h = 0; h < nh; h++) {
                V kv = V_LOAD(kj + h * hs + e);
                V_KEEP(kv);
                big[h] = V_ABSMAX2(big[h], kv);
#pragma GCC unroll 8
                for (int r = 0; r < per; r++)
                    acc[h * per + r] = V_FMA(V_LOAD(q + (h * per + r) * E + e), kv, acc[h * per + r]);
            }
        if (full < E)
#pragma GCC unroll 8
            for (int h = 0; h < nh; h++) {
                V kv = V_LOADN(kj + h * hs + full, E - full);
                big[h] = V_ABSMAX2(big[h], kv);
#pragma GCC unroll 8
                for (int r = 0; r < per; r++)
                    acc[h * per + r] = V_FMA(V_LOADN(q + (h * per + r) * E + full, E - full), kv, acc[h * per + r]);
            }
#pragma GCC unroll 8
        for (int i = 0; i < nq; i++) s[i * lds + j] = V_HSUM(acc[i]);
#pragma GCC unroll 8
        for (int h = 0; h < nh; h++) nan[h] |= s[h * per * lds + j] != s[h * per * lds + j];
    }
#pragma GCC unroll 8
    for (int h = 0; h < nh; h++) {
        float most = V_HMAX(big[h]); /* inf shows here, NaN in the scores */
        kmax[h] = nan[h] || !(most <= FLT_MAX) ? -1.0f : most;
    }
}

/* acc[i * Ev + e0 ..] += sum over j < n of p[i * ldp + j] · head i / per's
 * v[j * ld + (i / per) · hs + e0 ..], over cb vectors of columns (tail > 0:
 * one vector of the last tail < VL columns), as axpy_block adds them. */
DECODE_INLINE void axpy_heads_block(float *acc, const float *p, int64_t ldp, const float *v, int64_t ld, int64_t hs,
                                    int64_t n, int64_t Ev, int64_t e0, const int nq, const int per, const int cb,
                                    int tail, int64_t ahead) {
    const int nh = nq / per;
    V a[DECODE_NQ][8];
    accs_load(a, acc, Ev, e0, nq, cb, tail);
    for (int64_t j = 0; j < n; j++) {
        const float *vj = v + j * ld + e0;
        if (ahead) prefetch_heads(v + (j + ahead) * ld, nh, hs, Ev);
#pragma GCC unroll 8
        for (int h = 0; h < nh; h++) {
            V vv[8];
#pragma GCC unroll 8
            for (int t = 0; t < cb; t++) {
                vv[t] = tail ? V_LOADN(vj + h * hs, tail) : V_LOAD(vj + h * hs + t * VL);
                V_KEEP(vv[t]);
            }
#pragma GCC unroll 8
            for (int r = 0; r < per; r++) {
                V w = V_SET1(p[(h * per + r) * ldp + j]);
#pragma GCC unroll 8
                for (int t = 0; t < cb; t++) a[h * per + r][t] = V_FMA(w, vv[t], a[h * per + r][t]);
            }
        }
    }
    accs_store(acc, a, Ev, e0, nq, cb, tail);
}

/* Column vectors a block for nq rows of side-by-side heads: as axpy_rows
 * for up to 4 rows, 2 for more (8 rows × 2 accumulators in 32 registers). */
#define AXPY_HEADS_CB(nq) ((nq) <= 4 ? AXPY_CB(nq) : 2)

/* All Ev columns for nq rows, the positions in groups whose rows of all
 * heads stay in L1 while the column blocks pass over them. */
DECODE_INLINE void axpy_heads_nq(float *acc, const float *p, int64_t ldp, const float *v, int64_t ld, int64_t hs,
                                 int64_t n, int64_t Ev, const int nq, const int per) {
    const int cb = AXPY_HEADS_CB(nq);
    int64_t bytes = 4 * Ev * (nq / per), group = Ev <= cb * VL ? n : 16384 / bytes > 16 ? 16384 / bytes : 16;
    int64_t ahead = Ev <= cb * VL ? 0 : heads_ahead(ld); /* one column block: the hardware streams it */
    for (int64_t j0 = 0; j0 < n; j0 += group) {
        int64_t nk = n - j0 < group ? n - j0 : group, e0 = 0;
        const float *pj = p + j0, *vj = v + j0 * ld;
#define HEADS_BLOCK(cbk, tail) axpy_heads_block(acc, pj, ldp, vj, ld, hs, nk, Ev, e0, nq, per, cbk, tail, e0 ? 0 : ahead)
        COLUMN_BLOCKS(HEADS_BLOCK);
#undef HEADS_BLOCK
    }
}

/* The bodies for every (rows, rows a head): a head's rows 1, 2 or 4, and
 * the rows a block whole heads, up to DECODE_NQ. */
#if DECODE_NQ > 4
#define HEADS_5_8(CALL)                                                                            \
    case 6: CALL(6, 2);                                                                            \
    case 8: CALL(8, 2);
#define HEADS_PER1_5_8(CALL)                                                                       \
    case 5: CALL(5, 1);                                                                            \
    case 6: CALL(6, 1);                                                                            \
    case 7: CALL(7, 1);                                                                            \
    case 8: CALL(8, 1);
#define HEADS_PER4_8(CALL) case 8: CALL(8, 4);
#else
#define HEADS_5_8(CALL)
#define HEADS_PER1_5_8(CALL)
#define HEADS_PER4_8(CALL)
#endif
#define HEADS_SWITCH(CALL)                                                                         \
    if (per == 4) switch (nq) {                                                                    \
        case 4: CALL(4, 4);                                                                        \
        HEADS_PER4_8(CALL)                                                                         \
        default: return;                                                                           \
        }                                                                                          \
    if (per == 2) switch (nq) {                                                                    \
        case 2: CALL(2, 2);                                                                        \
        case 4: CALL(4, 2);                                                                        \
        HEADS_5_8(CALL)                                                                            \
        default: return;                                                                           \
        }                                                                                          \
    switch (nq) {                                                                                  \
    case 1: CALL(1, 1);                                                                            \
    case 2: CALL(2, 1);                                                                            \
    case 3: CALL(3, 1);                                                                            \
    case 4: CALL(4, 1);                                                                            \
        HEADS_PER1_5_8(CALL)                                                                       \
    default: return;                                                                               \
    }
#define DOT_HEADS_CALL(NQ, PER)                                                                    \
    do {                                                                                           \
        dot_heads_nq(s, lds, q, k, ld, hs, n, E, NQ, PER, kmax);                                   \
        return;                                                                                    \
    } while (0)
#define AXPY_HEADS_CALL(NQ, PER)                                                                   \
    do {                                                                                           \
        axpy_heads_nq(acc, p, ldp, v, ld, hs, n, Ev, NQ, PER);                                     \
        return;                                                                                    \
    } while (0)

static void dot_heads_block(float *s, int64_t lds, const float *q, int nq, int per, const float *k, int64_t ld,
                            int64_t hs, int64_t n, int64_t E, float *kmax) {
    HEADS_SWITCH(DOT_HEADS_CALL)
}

static void axpy_heads_rows(float *acc, const float *p, int64_t ldp, int nq, int per, const float *v, int64_t ld,
                            int64_t hs, int64_t n, int64_t Ev) {
    HEADS_SWITCH(AXPY_HEADS_CALL)
}

/* Up to ATTN_DECODE_MAX_ROWS rows in blocks of whole heads, DECODE_NQ rows
 * at most (per 1, 2 or 4 divides it). */
static void dot_rows_heads(float *s, int64_t lds, const float *q, int nq, int per, const float *k, int64_t ld,
                           int64_t hs, int64_t n, int64_t E, float *kmax) {
    for (int r0 = 0; r0 < nq; r0 += DECODE_NQ)
        dot_heads_block(s + r0 * lds, lds, q + r0 * E, nq - r0 < DECODE_NQ ? nq - r0 : DECODE_NQ, per,
                        k + r0 / per * hs, ld, hs, n, E, kmax + r0 / per);
}

static void axpy_rows_heads(float *acc, const float *p, int64_t ldp, int nq, int per, const float *v, int64_t ld,
                            int64_t hs, int64_t n, int64_t Ev) {
    for (int r0 = 0; r0 < nq; r0 += DECODE_NQ)
        axpy_heads_rows(acc + r0 * Ev, p + r0 * ldp, ldp, nq - r0 < DECODE_NQ ? nq - r0 : DECODE_NQ, per,
                        v + r0 / per * hs, ld, hs, n, Ev);
}

#endif /* ATTN_DECODE_ROWS_H */
