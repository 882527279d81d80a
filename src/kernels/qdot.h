/* qdot.h -- the integer dot product kernel of decode: scores of a few query
 * rows against keys stored q8 or q4 (attn.h, "Quantized storage"), computed
 * as ggml computes them. Each query row is quantized once per work item to
 * int8 per block of 32 (its own f32 scale, q8_0's rule); then per key and
 * block one integer dot product of 32 int8 pairs (VPDPBUSD, or PMADDUBSW
 * and PMADDWD on AVX2) and one f32 multiply-add by (query scale · key
 * scale). Against widening the keys to f32 this skips the widening (the
 * cost that made quantized decode issue-bound) at the price of the query's
 * int8 rounding: attn.h states the bound, docs/accuracy.md derives it.
 *
 * Keys quantized per channel (q4c, q2c) take the same instructions the
 * other way round (attn_qdot_groups below): the query times the group's
 * channel scales is rounded per group, the codes are the unsigned bytes.
 * Its two kernels (AVX512-VNNI; AVX2, also beside AVX-VNNI) give the same
 * bits.
 *
 * A set of these runs beside one f32 set (its softmax and value kernels),
 * chosen in dispatch.c as the bf16 sets are; the portable set has none, and
 * there decode widens the keys and computes bitwise what the f32 kernels
 * compute. */
#ifndef ATTN_QDOT_H
#define ATTN_QDOT_H

#include "kernels/ukernel.h"

/* nq query rows of E values (E a multiple of 32) quantized for the keys'
 * format: each block of 32 as int8 codes c with an f32 scale d, the row
 * ≈ d · c (attn_qrows_quantize). bias[i * nb + b] is a constant the set's
 * kernel adds to each int32 lane it sums block b in (one lane in the
 * AVX512-VNNI kernel, 8 in the AVX2 one): it folds the offset of the
 * unsigned key codes (VPDPBUSD multiplies unsigned by signed bytes) out of
 * the dot product. */
typedef struct attn_qrows {
    const int8_t *codes;  /* nq × E */
    const float *d;       /* nq × nb, nb = E / 32 */
    const int32_t *bias;  /* nq × nb */
    int64_t E;
} attn_qrows;

/* Scores against keys quantized per channel (ATTN_Q4C, ATTN_Q2C; attn.h,
 * "Keys quantized per channel"), read from the groups where they lie:
 * s[i * lds + j] = the score of query row i (q + i·E, f32, finite) against
 * position t0 + j of `groups` (position t in the group at groups + (t/32) ·
 * stride bytes, its row t % 32; E channels, E a multiple of 32; q2:
 * ATTN_Q2C, else ATTN_Q4C) for i < nq <= ATTN_DECODE_MAX_ROWS, j < n:
 *     Σ_b d_b · (Σ over block b of c'_c · n_c) + Σ_c q_c m_c
 * where q' = q ∘ s (the group's scales, f32 products) is rounded per block
 * of 32 channels to int8 codes c' with scale d_b by attn_qrows_quantize's
 * rule, n are the position's codes and m the minimums; the integer sums are
 * exact, the rest f32 in the order decode_groups_avx512.c documents (the
 * tests check it bit for bit against a C model of it). A position's score
 * does not depend on where a call starts or ends. Returns a bound on |k|
 * over the groups (max_c |m_c| + (2^b - 1) · max_c s_c), or -1 when a scale
 * or minimum is not finite. scratch: ATTN_QDOT_SCRATCH bytes, the query
 * rows' tables. */
typedef struct attn_qdot_groups {
    const char *name; /* ATTN_VERBOSE's key_dot= for these keys */
    float (*dot)(float *s, int64_t lds, const float *q, int nq, const void *groups, int64_t stride, int64_t E,
                 int64_t t0, int64_t n, bool q2, void *scratch);
} attn_qdot_groups;

/* The bytes of scratch, aligned to 64, that an axpy of attn_qdot_kernels
 * (its weights of a group of keys: the f32 kernel's 4096 floats, the bf16
 * kernel's 2048 pairs, the integer kernel's group of 6 KiB and accumulators
 * of 8 KiB), its dot (the query rows' tables, 5 KiB) and a dot of
 * attn_qdot_groups (a pass's query rows and their tables, 8.5 KiB) take
 * from their caller: decode's per-worker scratch,
 * where these were the kernels' stack frames and a caller's small stack
 * has no room for them (attn.h, "Stack"). */
enum { ATTN_QDOT_SCRATCH = 16384 };

typedef struct attn_qdot_kernels {
    const char *name; /* "int8_avx512vnni", "int8_avxvnni" or "int8_avx2" */
    const char *f32_set; /* the f32 set it runs beside */
    /* The lane bias per unit of a block's code sum Σc, for q8 keys: the
     * VNNI kernel reads each key code k as the unsigned byte k + 128 and
     * takes 128·Σc back (in the one lane of the block's sum); the AVX2
     * kernel multiplies |k| by c·sign(k) and needs none. */
    int q8_bias;
    int q4_bias; /* the same for q4 keys (value = code - 8): 8·Σc in one lane (VNNI), Σc in each of 8 (AVX2) */
    /* s[i * lds + j] = the score of query row r0 + i (of qq) against key j
     * (row stride ld bytes, q8 or q4 when q4) for i < nq <= ATTN_DECODE_MAX_ROWS,
     * j < n: Σ_b d_q · d_k · (Σ over the block of c_q · c_k), in f32.
     * A key's score is the same bits wherever it falls in a call, so any
     * split of the keys into calls (pages, chunks) gives the same scores.
     * Returns max |k| over the rows read (bounded by the scales: 128 · max
     * |d_k| for q8, 8 · max |d_k| for q4), or -1 if a scale is not finite.
     * scratch: ATTN_QDOT_SCRATCH bytes, the query rows' tables. */
    float (*dot)(float *s, int64_t lds, const attn_qrows *qq, int r0, int nq, const void *k, int64_t ld, int64_t n,
                 bool q4, void *scratch);
    /* acc[i * Ev ..] += Σ_j p[i * ldp + j] · v[j] for i < nq <= ATTN_DECODE_MAX_ROWS,
     * j < n, over quantized value rows (row stride ld bytes), accumulated
     * in f32. value_dot "f32_avx512": each weight times the block scales
     * first (p · d, then one FMA by each code), one rounding more than the
     * f32 set's axpy_rows_q (code · d exact, then the FMA), within f32's
     * bound; a key's terms do not depend on its neighbours. value_dot
     * "bf16_avx512bf16": p · d rounded to bf16 (relative 2^-8), two keys a
     * VDPBF16PS, paired from the call's first key (attn.h states the
     * bound). value_dot "int8_avx512vnni": per row, group of 16 keys from
     * the call's first and block, p · d rounded to int8 with one f32 scale,
     * exact integer sums by VPDPBUSD, one FMA per group (attn.h states the
     * arithmetic and its bound). NULL: decode takes axpy_rows_q.
     * scratch: ATTN_QDOT_SCRATCH bytes, the weights'. */
    void (*axpy)(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld, int64_t n, int64_t Ev,
                 bool q4, void *scratch);
    /* Keys quantized per channel, or NULL: decode then widens their groups
     * to f32 rows (key_groups.c), bitwise the f32 kernels on those rows. */
    const attn_qdot_groups *groups;
    const char *value_dot; /* axpy's arithmetic, as the verbose line names it (NULL with axpy) */
    /* axpy takes the keys of a call in groups of this many from its first
     * (2: the bf16 pairs; 16: the integer values' weight scales; 1: each
     * key alone): decode starts each call on a multiple of it from the
     * chunk's first key, and copies a group that crosses pages side by
     * side, so that a paged cache gives a contiguous one's bits. */
    int value_group;
    /* attn_qrows_quantize's rounding of `blocks` blocks of 32 values of q
     * (each block's codes, d and bias = -per_sum · Σ codes) in this set's
     * vectors, or NULL: qdot.c's portable loop. The same bits either way
     * (test_fast checks them); it runs once per work item and row, where
     * the portable loop, one value at a time, cost about 4% of a q4 decode
     * call on Zen 5. */
    void (*quantize)(int8_t *codes, float *d, int32_t *bias, const float *q, int64_t blocks, int32_t per_sum);
} attn_qdot_kernels;

/* The process's integer dot product set for the active f32 set, or NULL
 * (the portable kernels; or a CPU without the instructions): decode then
 * widens quantized keys. ATTN_QDOT=widen turns it off (the bitwise path);
 * ATTN_QDOT=f32_values, bf16_values or int8_values takes the first set of
 * the ISA whose values are computed so (value_dot), beside the same
 * integer keys (the default set where none is); read once, for tests and
 * measurement. */
const attn_qdot_kernels *attn_qdot_active(void);

/* The formats an integer set's dot and axpy take (symmetric blocks of 32
 * with no minimum: their `q4` argument tells the two apart); decode asks
 * this, so a format the sets learn is named here once. */
static inline bool attn_qdot_format(attn_dtype d) { return d == ATTN_Q8 || d == ATTN_Q4; }

/* Quantize nq rows of q (row stride E floats, every value finite) for keys
 * of the given format (ATTN_Q8 or ATTN_Q4) and set qd: per block of 32,
 * a = max |q|, d = a / 127 (f32), c = q · (1/d) rounded to nearest even,
 * clamped to ±127 (d = 0: all c = 0). codes (nq × E), d and bias (nq × E/32
 * each) are the caller's. */
void attn_qrows_quantize(attn_qrows *qq, int8_t *codes, float *d, int32_t *bias, const float *q, int64_t nq,
                         int64_t E, attn_dtype format, const attn_qdot_kernels *qk);

/* attn_qrows_quantize's rule for one block of 32 values at x: its codes
 * c[0..31], its d, and Σ c returned. Portable C: the sets' own quantize
 * takes it for the blocks their vectors do not (1 / d not finite). */
int32_t attn_qblock_quantize(int8_t *c, float *d, const float *x);

#if defined(ATTN_HAVE_X86_KERNELS)
extern const attn_qdot_kernels attn_qdot_avx512vnni, attn_qdot_avx512vnni_bf16, attn_qdot_avx512vnni_int8;
/* qdot.h's axpy by VPDPBUSD (value_dot "int8_avx512vnni"; the arithmetic
 * is documented in decode_values_avx512.c and attn.h). */
void attn_qvalues_int8_avx512vnni(float *acc, const float *p, int64_t ldp, int nq, const void *v, int64_t ld,
                                  int64_t n, int64_t Ev, bool q4, void *scratch);
extern const attn_qdot_kernels attn_qdot_avxvnni;
extern const attn_qdot_kernels attn_qdot_avx2;
extern const attn_qdot_groups attn_qdot_groups_avx512vnni, attn_qdot_groups_avx2;
#endif

#endif /* ATTN_QDOT_H */
