/* internal.h -- declarations shared by the library's source files; not public. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* printf-style formatting of a failure into *err (when err is not NULL).
 * Returns `status`, so callers can write `return attn_fail(err, ATTN_ERR_X, ...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
attn_status attn_fail(attn_error *err, attn_status status, const char *fmt, ...);

/* Overflow-checked int64 arithmetic: return false on overflow. */
bool attn_mul_i64(int64_t a, int64_t b, int64_t *out);
bool attn_add_i64(int64_t a, int64_t b, int64_t *out);

/* The largest element offset reachable in t, in absolute value, fits in int64
 * in elements and in bytes (ATTN_ERR_OVERFLOW naming `name` otherwise). */
attn_status attn_check_extent(const attn_tensor *t, const char *name, attn_error *err);

/* Format a shape as "(2, 3, 4)" into buf (always terminated). */
void attn_format_shape(char *buf, size_t size, int rank, const int64_t *shape);

/* A strided 2-D view of one matrix inside a tensor: element (i, j) lives at
 * base + (i * rs + j * cs) * element size. A broadcast dimension has stride 0. */
typedef struct attn_mat {
    char *base;
    attn_dtype dtype;
    int64_t rows, cols;
    int64_t rs, cs;
} attn_mat;

/* Element (i, j) of a float matrix (f32, f64, f16 or bf16) widened to double. */
static inline double attn_mat_get(const attn_mat *m, int64_t i, int64_t j) {
    int64_t off = i * m->rs + j * m->cs;
    switch (m->dtype) {
    case ATTN_F32: return (double)((const float *)(const void *)m->base)[off];
    case ATTN_F16: return attn_f16_to_f32(((const uint16_t *)(const void *)m->base)[off]);
    case ATTN_BF16: return attn_bf16_to_f32(((const uint16_t *)(const void *)m->base)[off]);
    default: return ((const double *)(const void *)m->base)[off];
    }
}

/* Row r of an f32, f16 or bf16 matrix as contiguous f32: in place when it is
 * f32 with contiguous columns, else widened into buf (m->cols floats). */
static inline const float *attn_row_f32(const attn_mat *m, int64_t r, float *buf) {
    const char *row = m->base + r * m->rs * (int64_t)attn_dtype_size(m->dtype);
    if (m->dtype == ATTN_F32 && m->cs == 1) return (const float *)(const void *)row;
    for (int64_t c = 0; c < m->cols; c++) {
        const char *e = row + c * m->cs * (int64_t)attn_dtype_size(m->dtype);
        uint16_t h;
        if (m->dtype == ATTN_F32) memcpy(&buf[c], e, 4);
        else {
            memcpy(&h, e, 2);
            buf[c] = m->dtype == ATTN_F16 ? attn_f16_to_f32(h) : attn_bf16_to_f32(h);
        }
    }
    return buf;
}

/* Store x into element (i, j) of a float matrix, rounding once for f32. */
static inline void attn_mat_set(const attn_mat *m, int64_t i, int64_t j, double x) {
    int64_t off = i * m->rs + j * m->cs;
    if (m->dtype == ATTN_F32) ((float *)(void *)m->base)[off] = (float)x;
    else ((double *)(void *)m->base)[off] = x;
}

/* One attention problem: a single (batch, head) slice.
 *   q is (L, E), k is (S, E), v is (S, Ev), out is (L, Ev),
 *   weights (optional, rows == 0 when absent) is (L, S),
 *   mask (optional, rows == 0 when absent) is (L, S), broadcast dims stride 0.
 * Query i may see key j only if j <= i + causal_offset (when causal is set). */
typedef struct attn_problem {
    attn_mat q, k, v, out, weights, mask;
    bool causal;
    int64_t causal_offset;
    double scale;
} attn_problem;

/* The per-problem kernels. `work` is scratch memory of at least
 * attn_*_work_size(...) doubles, owned by the caller; the size functions
 * return -1 when the count overflows. */
int64_t attn_stream_work_size(int64_t E, int64_t Ev);
void attn_stream_kernel(const attn_problem *p, double *work);

int64_t attn_reference_work_size(int64_t S, int64_t E, int64_t Ev);
void attn_reference_kernel(const attn_problem *p, double *work);
/* Writes the scores (L, S) into p->out; same scratch as the reference. */
void attn_scores_kernel(const attn_problem *p, double *work);

/* Dot product of two packed rows, in double. */
static inline double attn_dot(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

/* The score of query i against key j, given their dot product: dot·scale plus
 * the additive mask, or -inf when the causal or bool mask excludes the pair.
 * Both kernels treat a score of -inf as "takes no part in the softmax". */
static inline double attn_score(const attn_problem *p, int64_t i, int64_t j, double dot) {
    if (p->causal && j > i + p->causal_offset) return -INFINITY;
    double s = dot * p->scale;
    if (p->mask.base) {
        if (p->mask.dtype == ATTN_BOOL) {
            if (p->mask.base[i * p->mask.rs + j * p->mask.cs] == 0) return -INFINITY;
        } else {
            s += attn_mat_get(&p->mask, i, j);
        }
    }
    return s;
}

/* exp(s - m) for a score s that takes part and the row maximum m >= s. When
 * s == m it is exactly 1, which also covers s == m == +inf: the weight is then
 * shared among the +inf scores, the softmax's limit, instead of NaN. */
static inline double attn_softmax_term(double s, double m) {
    return s == m ? 1.0 : exp(s - m);
}

/* Copy rows r0..r0+n-1 of a float matrix into dst (n × cols, C order), in
 * double. */
void attn_pack_rows(double *dst, const attn_mat *m, int64_t r0, int64_t n);

/* Run fn(ctx, item, worker) for item = 0..n_items-1 on up to n_workers
 * threads (the caller is worker 0; worker < n_workers). Items are handed out
 * dynamically, so their results must not depend on which worker runs them. */
typedef void (*attn_task_fn)(void *ctx, int64_t item, int worker);
void attn_parallel_for(int n_workers, int64_t n_items, attn_task_fn fn, void *ctx);

/* A tensor in canonical 5-D form (B1, B2, H, rows, cols), size-1
 * dimensions with stride 0 (see sdpa.c). */
#define ATTN_CANON_RANK 5
typedef struct attn_canon {
    int64_t shape[ATTN_CANON_RANK];
    int64_t strides[ATTN_CANON_RANK];
} attn_canon;

/* All (batch, head) slices of one call: attn_slice(sl, i, p) fills p with
 * slice i, 0 <= i < sl->count. */
typedef struct attn_slices {
    attn_problem base; /* scale and causal settings shared by every slice */
    const attn_tensor *q, *k, *v, *out, *weights, *mask;
    attn_canon cq, ck, cv, co, cw, cm;
    int64_t count;
} attn_slices;
void attn_slice(const attn_slices *sl, int64_t index, attn_problem *p);

/* Whether the f32 kernels may compute scores from queries (already times
 * the scale) of largest magnitude qmax and keys of largest magnitude kmax,
 * E values each; -1 means some value is not finite. Beyond these bounds the
 * exact f64 kernel computes instead:
 *   |score| <= qmax·kmax·E <= 2^100: adding any finite mask value, up to
 *     ±FLT_MAX, cannot round past FLT_MAX (half of its ulp is 2^103), so
 *     every finite score stays finite; and f32's softmax is a plain maximum
 *     long before such scores anyway;
 *   kmax·E <= 2^100: a query rounded to f32 near the underflow threshold
 *     (an error of at most 2^-150) moves a score by at most 2^-50.
 * f32 arithmetic keeps subnormals (nothing sets flush-to-zero). */
static inline bool attn_f32_scores_fit(double qmax, double kmax, int64_t E) {
    return qmax >= 0 && kmax >= 0 && qmax * kmax * (double)E <= 0x1p100 &&
           kmax * (double)E <= 0x1p100;
}

/* What one call ran, for ATTN_VERBOSE (verbose.c): the kernel ("exact",
 * "reference", "scores", "flash" or "decode"), the microkernels' ISA, the
 * threads, and how many of its work items (flash: blocks of query rows;
 * decode: (batch, head) slices) the exact f64 kernel computed instead; in
 * the bf16 compute mode, which bf16 kernels ran. */
typedef struct attn_run_info {
    const char *kernel, *isa, *bf16;
    int threads;
    int64_t items, fallbacks;
} attn_run_info;

/* The fast f32 path (flash.c) over all slices of one call, without weights;
 * bf16 selects the bf16 compute mode. Fills *info.
 * Returns ATTN_OK, ATTN_ERR_OVERFLOW or ATTN_ERR_NO_MEMORY, with *err filled. */
attn_status attn_flash_run(const attn_slices *sl, bool bf16, attn_run_info *info, attn_error *err);

/* The f32 decode path (decode.c): a few queries against many keys, split
 * over the keys. attn_decode_applies says when it is the one to use. */
bool attn_decode_applies(int64_t L, int64_t S);
attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err);

/* ATTN_VERBOSE (verbose.c): whether it is set (read once per process), a
 * monotonic clock in milliseconds, and the one line a call prints. */
bool attn_verbose_on(void);
double attn_now_ms(void);
void attn_verbose_report(const char *call, const attn_run_info *info, const attn_tensor *q,
                         const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o,
                         double ms);

#endif /* ATTN_INTERNAL_H */
