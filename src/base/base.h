/* base.h -- the ground floor every layer of the library may use, and that
 * uses none of them: errors, overflow-checked sizes, strided views and row
 * access, one attention problem and the slices of a call, the thread pool.
 * Not public. */
#ifndef ATTN_BASE_H
#define ATTN_BASE_H

#include "attn.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* printf-style formatting of a failure into *err (when err is not NULL):
 * the public attn_error_set (attn.h), by its short name inside the library.
 * Returns `status`, so callers can write `return attn_fail(err, ATTN_ERR_X, ...)`. */
#define attn_fail attn_error_set

/* "s" after a count other than 1, so a message reads "1 head" and "2 heads"
 * ("%lld head%s", n, attn_plural(n)); counts in messages can be 1. */
static inline const char *attn_plural(int64_t n) { return n == 1 ? "" : "s"; }

/* An f32's bits and back (the 16-bit and 8-bit float formats are written
 * on them, half.c and quant.c). */
static inline uint32_t attn_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float attn_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A function the compiler must not inline into its callers: one whose
 * frame (or whose constant bounds) should stay its own. */
#if defined(__GNUC__)
#define ATTN_NOINLINE __attribute__((noinline))
#else
#define ATTN_NOINLINE
#endif

/* x rounded up to a multiple of m (x >= 0, m >= 1; no overflow check). */
static inline int64_t attn_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Overflow-checked int64 arithmetic: return false on overflow. */
bool attn_mul_i64(int64_t a, int64_t b, int64_t *out);
bool attn_add_i64(int64_t a, int64_t b, int64_t *out);

/* ATTN_ERR_SHAPE naming the first negative one of a shape's rank
 * dimensions ("NAME's dimension d is negative (n)"; without a name
 * "dimension d ..."), else ATTN_OK. Checked before any element count,
 * which would read a negative dimension as an overflow. */
attn_status attn_check_dims(int rank, const int64_t *shape, const char *name, attn_error *err);

/* The largest element offset reachable in t, in absolute value, fits in int64
 * in elements and in bytes (ATTN_ERR_OVERFLOW naming `name` otherwise; a
 * negative dimension is attn_check_dims's ATTN_ERR_SHAPE). */
attn_status attn_check_extent(const attn_tensor *t, const char *name, attn_error *err);

/* Offsets of the rows of `batch` sequences in a packed tensor of `total`
 * rows (tensor.c): cu[0 .. batch], starting at 0, never decreasing, ending
 * at `total`; `name` in the messages. One check for every caller that
 * takes them (a ragged batch's cu_seqlens_q and _k, a pool's appends, the
 * paged view's attention and plan, the layer's paged batch). ATTN_ERR_ARGUMENT (batch < 0, or an offset out of
 * rule), ATTN_ERR_NULL. */
attn_status attn_check_cu_seqlens(const int64_t *cu, int64_t batch, int64_t total, const char *name,
                                  attn_error *err);

/* An output is written element by element: a dimension of size > 1 with
 * stride 0 would write several results into one element, the last one
 * winning (ATTN_ERR_STRIDE, "<name> has stride 0 in dimension d of size
 * n"). Nor may other strides fold the output onto itself, two of its
 * elements sharing a byte (as_strided rows that overlap: "<name> has
 * strides ... that put two of its elements in one place"); views that
 * interleave without touching pass. An empty output is not written and
 * passes, whatever its strides (NumPy gives empty arrays stride 0). Inputs
 * may have stride 0 (attn_tensor); PyTorch refuses such an output likewise
 * ("some elements of the written-to tensor refer to a single memory
 * location"). */
attn_status attn_check_writable(const attn_tensor *t, const char *name, attn_error *err);

/* The one rule for a tensor's data (include/attn.h, "Measuring without
 * buffers"): a call that runs reads or writes the elements, so NULL data
 * fails with ATTN_ERR_NULL, "<name> has NULL data"; a measuring call (the
 * *_workspace_size functions, and what they call) reads none, so NULL data
 * stands for a buffer of that layout not yet allocated, and passes. */
attn_status attn_check_data(const attn_tensor *t, const char *name, bool measuring, attn_error *err);

/* An output struct that begins with struct_size (attn_tuning) filled from
 * ours (`size` bytes): its first struct_size bytes only, struct_size kept;
 * ATTN_ERR_OPTION as attn_versioned_read (attn.h) refuses a struct_size.
 * versioned.c. */
attn_status attn_versioned_write(void *theirs, const void *ours, size_t size, const char *name, const char *hint,
                                 attn_error *err);


/* Sequence i of a view that attn_kv_paged_check accepted, copied out of its
 * pages into k (Hk, length, E) and v (Hk, length, Ev), tensors of that
 * shape, any float dtype, that share no byte with the pages
 * (kv_pages.c): attn_kv_paged_gather after its checks, for callers that
 * checked the view once for many sequences. */
void attn_kv_paged_copy(attn_tensor *k, attn_tensor *v, const attn_kv_paged_view *w, int64_t i);

/* The memory a checked view reads, as 1-D tensors for the aliasing check
 * (kv_pages.c): its key pages, value pages, lengths, page table and table
 * offsets (data NULL for those it has none of), and their names. */
void attn_kv_paged_regions(attn_tensor regions[5], const attn_kv_paged_view *w);
extern const char *const attn_kv_paged_region_names[5];
/* A checked view's residual keys (key_dtype q4c, q2c) as a 1-D tensor for
 * the aliasing check; data NULL when it has none. */
void attn_kv_paged_residual(attn_tensor *t, const attn_kv_paged_view *w);
/* A pool's whole memory, its header to the end of its value pages, as a
 * 1-D tensor for the aliasing check (kv_pages.c): what a call that changes
 * the pool writes, and what no output or workspace of a call that reads
 * it may share a byte with. */
void attn_kv_pages_memory(attn_tensor *t, const attn_kv_pages *pool);

/* Whether the memory of tensors a and b shares a byte (overlap.c): exact
 * for views that interleave without touching (dq, dk, dv as slices of one
 * packed buffer), and true for the rare layouts too involved to decide in
 * a bounded number of steps. NULL and empty tensors share nothing, and so
 * does a tensor that is no view (attn_check_extent refuses it). */
bool attn_tensors_overlap(const attn_tensor *a, const attn_tensor *b);
/* Whether two elements of t share a byte (overlap.c): 1 when they do, 0
 * when none do, -1 for a layout too involved to decide in a bounded number
 * of steps; exactly as above:
 * as_strided rows that overlap do, a slice of a packed array and layouts
 * that interleave their own dimensions (shape (2, 3), strides (3, 2)) do
 * not. Dimensions of size 1 or stride 0 are not looked at (the callers
 * check stride 0 themselves, to name the dimension). */
int attn_tensor_overlaps_itself(const attn_tensor *t);
/* a and b are one view: data, dtype, shape, and the strides of every
 * dimension of size > 1 (where an in-place call is allowed). */
bool attn_same_view(const attn_tensor *a, const attn_tensor *b);

/* A call's tensor and the name its messages give it; t may be NULL. */
typedef struct attn_named {
    const attn_tensor *t;
    const char *name;
} attn_named;

/* The entries of a list of them (an array), for the capacity below. */
#define ATTN_NAMED_CAP(list) ((int)(sizeof(list) / sizeof (list)[0]))

/* The tensors of an attn_sdpa_options (as read: attn_options_read), every
 * one of them, NULL or not, named as attn.h names the field, appended to
 * list[n .. cap) for the checks below (overlap.c). Every call that takes
 * the options lists them with this, so that a tensor added to the struct
 * is checked by every call once it is added here. Returns n +
 * ATTN_OPTION_TENSORS; or -1 when they do not fit in cap, a list the
 * library sized too small, which both checks refuse (never skip). */
enum { ATTN_OPTION_TENSORS = 5 };
int attn_named_options(attn_named *list, int n, int cap, const attn_sdpa_options *o);

/* Every output owns its memory: none of outs overlaps another of outs or
 * any of ins (NULL tensors are skipped). ATTN_ERR_STRIDE naming the first
 * pair that does. The one check of aliasing between tensors in the
 * library (a workspace's against them: attn_check_workspace). A count
 * below 0 (attn_named_options' overflow) is ATTN_ERR_ARGUMENT. */
attn_status attn_check_no_overlap(const attn_named *outs, int n_outs, const attn_named *ins, int n_ins,
                                  attn_error *err);
/* The caller's workspace, `bytes` bytes at `workspace` (attn_context, or a
 * plan's run), shares no byte with any of outs or ins (NULL tensors are
 * skipped; a NULL or empty workspace passes): the call writes its scratch
 * there, so one that overlaps a tensor is refused before anything is
 * written, ATTN_ERR_STRIDE naming the first such tensor. The same exact
 * test as attn_tensors_overlap (a workspace in the gaps of an interleaved
 * view passes), one tensor at a time: no allocation, O(n_outs + n_ins)
 * for tensors apart from it. Every entry point that takes a workspace
 * calls it with every tensor it reads or writes. A count below 0 is
 * ATTN_ERR_ARGUMENT, as above. */
attn_status attn_check_workspace(const void *workspace, size_t bytes, const attn_named *outs, int n_outs,
                                 const attn_named *ins, int n_ins, attn_error *err);

/* Quantized rows (quant.c; the formats byte by byte in attn.h): blocks of
 * ATTN_QBLOCK values for q8 and q4, each an f16 scale and its codes. */
enum { ATTN_QBLOCK = 32, ATTN_Q8_BLOCK_BYTES = 34, ATTN_Q4_BLOCK_BYTES = 18, ATTN_Q4_1_BLOCK_BYTES = 20 };
/* The quantized formats by name, as messages list them; quant.c says what
 * each is (attn_quant_block_bytes, attn_dtype_fp8), so a format is added
 * there and here. */
#define ATTN_QUANT_NAMES "q8, q4, q4_1, e4m3 or e5m2"
/* d is one of ATTN_Q8, ATTN_Q4, ATTN_Q4_1 (blocked: attn_quant_block_bytes
 * > 0), ATTN_E4M3, ATTN_E5M2 (fp8: attn_dtype_fp8). */
bool attn_dtype_quantized(attn_dtype d);
/* d is an fp8 format, ATTN_E4M3 or ATTN_E5M2: a byte a value, no blocks.
 * Inline, as attn_dtype_half: the decode kernels ask it of a constant, and
 * the compiler folds it there (x86/decode_rows.h). */
static inline bool attn_dtype_fp8(attn_dtype d) { return d == ATTN_E4M3 || d == ATTN_E5M2; }
/* d is a dtype rows of keys and values may be stored in (a cache, a pool's
 * pages): f64, f32, f16, bf16 or quantized. */
bool attn_dtype_kv_rows(attn_dtype d);
/* d is a 16-bit float, ATTN_F16 or ATTN_BF16: as q, computed through f32
 * copies (attn.h, "16-bit queries"). */
static inline bool attn_dtype_half(attn_dtype d) { return d == ATTN_F16 || d == ATTN_BF16; }
/* The bytes of one block of ATTN_QBLOCK values of a blocked format (q8, q4,
 * q4_1: rows a multiple of 32 values), or 0 for the others. */
int64_t attn_quant_block_bytes(attn_dtype d);
/* A row of n values (n valid for the format, attn_quant_row_size) quantized
 * into dst, and widened back from src: the reference every faster
 * widening of rows must match bit for bit. */
void attn_quant_row(void *dst, const float *x, int64_t n, attn_dtype format);
void attn_dequant_row(float *dst, const void *src, int64_t n, attn_dtype format);
/* Rows of n contiguous values to and from IEEE half (f16) or bfloat16,
 * as attn_f32_to_f16 / attn_f32_to_bf16 and back, value by value (half.c;
 * the 16-bit side any alignment). */
void attn_f32_to_half_row(void *dst, const float *src, int64_t n, bool f16);
void attn_half_to_f32_row(float *dst, const void *src, int64_t n, bool f16);
/* Value c of a quantized row, widened. */
float attn_quant_get(const void *row, attn_dtype format, int64_t c);
/* src copied into dst (the same shape, rank >= 1), converting: as
 * attn_tensor_convert between float dtypes, and where either holds
 * quantized rows, row by row through f32 (quantizing or widening as attn.h
 * says; the same format is copied as bytes). A tensor of quantized rows
 * has its shape in values, its last stride 1, and its other strides in
 * bytes. Checked by the caller (shapes, extents, overlap). quant.c. */
void attn_copy_rows(attn_tensor *dst, const attn_tensor *src);
/* attn_copy_rows as a cache's keys or values are stored and gathered
 * (attn.h, fp8 with one scale per head, and the caches' `hadamard`):
 * where one side is quantized, row r of the (..., heads, positions, n)
 * rows belongs to head r / positions % heads; quantizing takes x, turns it
 * by the Hadamard rotation if `rotate` (attn_hadamard_f32), divides it by
 * scale[head] (an f32 division; scale NULL: none) and quantizes; widening
 * multiplies the codes by scale[head] (an f32 product) and turns the row
 * back if `rotate`. rotate needs n <= 1024 (the caches check it). NULL and
 * false: attn_copy_rows. */
void attn_copy_kv_rows(attn_tensor *dst, const attn_tensor *src, const float *scale, int64_t heads, bool rotate);
/* The Walsh–Hadamard rotation (hadamard.c; attn.h, attn_hadamard): x (n
 * values, n a power of two) replaced by H_n x / sqrt(n), in place. _f64
 * computes in f64; _f32 widens the row into work (n doubles), turns it and
 * rounds it to f32 once. The same call turns a row back. */
enum { ATTN_HADAMARD_MAX = 1024 }; /* the largest key_dim a cache turns (a row on the stack) */
bool attn_power_of_two(int64_t n);
void attn_hadamard_f64(double *x, int64_t n);
void attn_hadamard_f32(float *x, int64_t n, double *work);
/* A cache's, pool's or view's `hadamard` (desc `name`): 0, or 1 with a
 * quantized dtype (ATTN_ERR_DTYPE) and key_dim a power of two up to
 * ATTN_HADAMARD_MAX (ATTN_ERR_SHAPE); another value ATTN_ERR_OPTION. */
attn_status attn_check_hadamard(int hadamard, attn_dtype dtype, int64_t key_dim, const char *name, attn_error *err);
/* A cache's or pool's per-head scales (desc `name`'s k_scale, v_scale,
 * each NULL or `heads` floats): only with e4m3 / e5m2 (ATTN_ERR_DTYPE),
 * each finite and > 0 (ATTN_ERR_SCALE). quant.c. */
attn_status attn_check_head_scales(const float *k_scale, const float *v_scale, int64_t heads, attn_dtype dtype,
                                   const char *name, attn_error *err);
/* A tensor of quantized rows (t->dtype quantized) as the bytes it covers:
 * a bool tensor of t's shape and strides but for the last dimension, the
 * row's bytes with stride 1. ATTN_ERR_RANK (rank 0), ATTN_ERR_SHAPE (a row
 * size the format cannot take), ATTN_ERR_STRIDE (values not together). */
attn_status attn_quant_bytes(const attn_tensor *t, attn_tensor *bytes, const char *name, attn_error *err);
/* Bytes of one row of n values of dt: n times the element size, or the
 * quantized row's size; 0 when n < 1, n does not suit dt, or it overflows. */
int64_t attn_row_bytes(attn_dtype dt, int64_t n);
/* The minimum-and-scale rule of q4_1 and of the per-channel key groups
 * (attn.h): n values x[0], x[stride], ... to codes 0 .. levels (15 or 3)
 * with an f16 scale *dh and minimum *mh; non-finite input: both NaN, codes
 * 0. quant.c. */
void attn_quant_min_scale(uint8_t *codes, uint16_t *dh, uint16_t *mh, const float *x, int64_t n, int64_t stride,
                          int levels);

/* The unit of a strided view's offsets in bytes: the element size, or 1 for
 * quantized rows, whose row stride counts bytes (attn_mat). */
static inline int64_t attn_stride_unit(attn_dtype dt) {
    size_t s = attn_dtype_size(dt); /* 0 for quantized rows and key groups */
    return s ? (int64_t)s : 1;
}

/* A strided 2-D view of one matrix inside a tensor: element (i, j) lives at
 * base + (i * rs + j * cs) * element size. A broadcast dimension has stride 0.
 * Quantized rows (dtype q8, q4, e4m3, e5m2: keys and values only) are read
 * whole: row i starts at base + i * rs, rs counting bytes, its cols values
 * laid out as attn.h says (cs unused). */
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
    case ATTN_F64: return ((const double *)(const void *)m->base)[off];
    default: return attn_quant_get(m->base + i * m->rs, m->dtype, j); /* quantized rows, any format */
    }
}

/* Row r of an f32, f16, bf16 or quantized matrix as contiguous f32: in place when it is
 * f32 with contiguous columns, else widened into buf (m->cols floats). */
static inline const float *attn_row_f32(const attn_mat *m, int64_t r, float *buf) {
    if (attn_dtype_quantized(m->dtype)) { /* widened by the reference (quant.c) */
        attn_dequant_row(buf, m->base + r * m->rs, m->cols, m->dtype);
        return buf;
    }
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

/* Values c0 .. c0 + w - 1 of row i of m (f32, f16, bf16 or f64) as f32 in
 * x: a row at a time where they are contiguous, else value by value
 * (half.c). */
void attn_mat_piece_f32(float *x, const attn_mat *m, int64_t i, int64_t c0, int64_t w);

/* Where kernels read keys and values (dense or paged): rows.h. */
#include "base/rows.h"

/* x rounded to f32, where a value below f32's normal range (|x| < FLT_MIN)
 * becomes 0 of x's sign, never a subnormal: each subnormal costs an Intel
 * core a microcode assist (kernels/exp2.h), in the rounding and in every
 * later use of the result; the difference is below 2^-126. */
static inline float attn_f32_of(double x) {
    return (float)(fabs(x) < FLT_MIN ? x * 0.0 : x); /* chosen in double, then one conversion */
}

/* Store x into element (i, j) of a float matrix, rounding once for f32
 * (attn_f32_of). */
static inline void attn_mat_set(const attn_mat *m, int64_t i, int64_t j, double x) {
    int64_t off = i * m->rs + j * m->cs;
    if (m->dtype == ATTN_F32) ((float *)(void *)m->base)[off] = attn_f32_of(x);
    else ((double *)(void *)m->base)[off] = x;
}

/* One attention problem: a single (batch, head) slice.
 *   q is (L, E), k is (S, E), v is (S, Ev), out is (L, Ev), each slice its
 *     own L (q.rows) and S (k.rows): kernels read them here, never from a
 *     call's first slice; k and v are row sources (rows.h), read only
 *     through attn_rows_span and the functions built on it,
 *   weights (optional, rows == 0 when absent) is (L, S),
 *   mask (optional, rows == 0 when absent) is (L, S), broadcast dims stride 0,
 *   lse (optional, base NULL when absent) is (L, 1): each row's log-sum-exp.
 * Query i may see key j only if j <= i + causal_offset (when causal is set).
 * With dropout_p > 0, weight (i, j) is dropped as kernels/dropout.c decides
 * from dropout_seed, the slice's index and the row row0 + i of the slice
 * (row0 is not 0 when a kernel hands a problem's later rows to another). */
typedef struct attn_problem {
    attn_mat q, out, weights, mask, lse;
    attn_rows k, v;
    bool causal;
    int64_t causal_offset;
    double scale;
    double dropout_p;
    uint64_t dropout_seed;
    int64_t slice, row0;
    /* Score variants (see attn_sdpa_options): softcap 0 for none; ALiBi
     * when `alibi`, s -= alibi_slope · |j - i - alibi_offset|; window 0 for
     * none, else keys j <= i + causal_offset - window are excluded. */
    double softcap;
    bool alibi;
    double alibi_slope;
    int64_t alibi_offset;
    int64_t window;
    /* An attention sink (see attn_sdpa_options): a logit in every row's
     * softmax denominator, with no value. */
    bool has_sink;
    double sink;
    /* RoPE (see attn_sdpa_options.rope and kernels/rope.h): NULL for none;
     * query row i is at position rope_q0 + i, key j at rope_k0 + j. */
    const struct attn_rope_plan *rope;
    int64_t rope_q0, rope_k0;
    /* A piece of the keys (attn_sdpa_options.total_keys): the backward
     * kernels take each row's softmax from the whole's lse and out. */
    bool softmax_from_lse;
} attn_problem;

/* A row's softmax statistics before any key: maximum m and sum l of
 * exp(s - m), the sink's (m = sink, l = 1) when there is one, else (-inf, 0).
 * The one place every kernel starts a row. */
static inline void attn_softmax_start(const attn_problem *p, double *m, double *l) {
    *m = p->has_sink ? p->sink : -INFINITY;
    *l = p->has_sink ? 1.0 : 0.0;
}

/* e^d in double, or exactly 0 for d below ATTN_EXP_MIN (-inf included): the
 * exact kernels' weights e^(s - m) and rescaling factors, which are then,
 * like the f32 kernels' (kernels/exp2.h), either 0 or normal numbers far
 * from underflow (e^-400 is about 2^-577, so its products with values of any
 * f32 size stay normal), and exp is never asked for a result that
 * underflows. A weight of e^-400 of the row maximum's is far below f64's
 * 2^-53. */
#define ATTN_EXP_MIN -400.0
static inline double attn_exp_or_zero(double d) {
    /* exp of the clamped d, so that a compiler that computes both sides of
     * the choice (it may, where exp counts as pure: -fno-math-errno) never
     * asks exp for an underflow. */
    double e = exp(d < ATTN_EXP_MIN ? ATTN_EXP_MIN : d);
    return d < ATTN_EXP_MIN ? 0.0 : e;
}

/* The log-sum-exp of a row from its maximum m and its sum l of exp(s - m):
 * m + log(l), -inf when no key took part (l == 0), +inf when m is. */
static inline double attn_lse(double m, double l) {
    return l == 0 ? -INFINITY : m == INFINITY ? INFINITY : m + log(l);
}

/* The first key query row i of p may see under a sliding window (0 without
 * one): keys j <= i + causal_offset - window are out. Not clamped to S.
 * The window may be any int64 > 0, so it is compared before it is
 * subtracted: i + causal_offset + 1 is bounded by the shapes, and the
 * difference is taken only when it is positive. */
static inline int64_t attn_first_key(const attn_problem *p, int64_t i) {
    if (p->window <= 0) return 0;
    int64_t last = i + p->causal_offset + 1; /* one past the last visible key */
    return last > p->window ? last - p->window : 0;
}

/* How many of the keys j0, j0+1, ..., j0+n-1 query row i of p may see. Under
 * a causal mask key j is visible when j <= i + causal_offset (offset 0 for
 * top-left, S - L for bottom-right), so this is clamp(i + causal_offset + 1
 * - j0, 0, n); without one, n. The one place the causal limit is written. */
static inline int64_t attn_keys_seen(const attn_problem *p, int64_t i, int64_t j0, int64_t n) {
    if (!p->causal) return n;
    int64_t lim = i + p->causal_offset + 1 - j0;
    return lim < 0 ? 0 : lim < n ? lim : n;
}

/* Copy rows r0..r0+n-1 of a float matrix into dst (n × cols, C order), in
 * double. */
void attn_pack_rows(double *dst, const attn_mat *m, int64_t r0, int64_t n);

/* Where one call's scratch memory comes from: the caller's workspace
 * (attn_context.workspace), or malloc, whose blocks attn_arena_release
 * frees. A measuring arena hands out nothing and only adds up what the call
 * would take, so a workspace's size is computed by the very code that takes
 * the memory (arena.c). A call takes as many blocks as its plan needs (a
 * backward pass with broadcast inputs, GQA, RoPE and a fallback slice takes
 * a dozen), so malloc's blocks are kept in a list, never in an array of
 * fixed size that could run out while memory is plentiful. */
enum { ATTN_ARENA_ALIGN = 64 };
typedef struct attn_arena {
    char *base;   /* the caller's workspace, aligned to ATTN_ARENA_ALIGN; NULL: malloc */
    size_t size;  /* its bytes from base */
    size_t used;  /* bytes taken (or, measuring, that would be taken) */
    bool measure;
    void *last;   /* malloc's newest block; each starts with a pointer to the one before it */
} attn_arena;

/* An arena over the caller's workspace (NULL: malloc), or one that measures. */
attn_arena attn_arena_over(void *workspace, size_t bytes);
attn_arena attn_arena_measuring(void);
/* `count` elements of `size` bytes, aligned to ATTN_ARENA_ALIGN; NULL when
 * the count overflows, memory or the workspace runs out, or the arena only
 * measures (then the bytes are counted all the same). */
void *attn_arena_alloc(attn_arena *a, size_t count, size_t size);
/* *t32 = a contiguous f32 tensor shaped like t (rank 1 to ATTN_MAX_RANK,
 * every dimension >= 1), its data from the arena: the f32 copy of a 16-bit
 * tensor. False when t's shape is not one, its size overflows, or the arena
 * has no room; a measuring arena counts the bytes and gives true, with
 * t32's data NULL (a measuring call's buffer, attn_check_data). */
bool attn_arena_f32_like(attn_arena *a, attn_tensor *t32, const attn_tensor *t);
/* Frees malloc's blocks; the arena may then be used again. */
void attn_arena_release(attn_arena *a);
/* Bytes a workspace needs to hold what a measuring arena counted, whatever
 * its alignment; 0 where it counted nothing. */
size_t attn_arena_needed(const attn_arena *a);
/* The context a call hands on after taking copies from the front of c's
 * workspace through a: c itself, with the rest of the workspace (none where
 * a is malloc's). The callee's scratch then comes after the copies. */
attn_context attn_arena_rest(const attn_arena *a, const attn_context *c);
/* Releases a and reports that it could not hold `what` (for example "the
 * f32 copies of q and out"): ATTN_ERR_WORKSPACE over a caller's workspace,
 * naming `sizer`, the function that says how much it needs; else
 * ATTN_ERR_NO_MEMORY. */
attn_status attn_arena_fail(attn_arena *a, const char *what, const char *sizer, attn_error *err);

/* Run fn(ctx, item, worker) for item = 0..n_items-1 on up to n_workers
 * threads (the caller is worker 0; worker < n_workers). Items are handed out
 * dynamically, so their results must not depend on which worker runs them.
 * Returns how many threads ran items: fewer than n_workers when the pool is
 * busy with another caller's job (then the caller runs every item alone),
 * when threads could not be started, or when the items ran out before a
 * worker woke. This is what ATTN_VERBOSE reports as threads=. */
typedef void (*attn_task_fn)(void *ctx, int64_t item, int worker);
int attn_parallel_for(int n_workers, int64_t n_items, attn_task_fn fn, void *ctx);

/* Start the pool's workers for jobs of up to `threads` threads now, not at
 * the first such job (a plan's init: its runs then start no thread). Does
 * nothing while another job holds the pool. */
void attn_pool_reserve(int threads);

/* How many of `threads` workers a job of `work` multiply-adds should wake
 * (threads.c): all of them, or 1 for a job of fewer than `least`, so small
 * that waking the pool and sharing its memory between cores (3 to 11 µs
 * measured on a shared 2-core Zen 5) would cost about what a second thread
 * saves. Each kernel measures its own `least`: a multiply-add costs each a
 * different time at small sizes. Results never depend on it (items are
 * independent of the worker that runs them). */
int attn_workers_for(int threads, double work, double least);

/* The flash kernel's and the GEMM's `least`: at small sizes about 16 µs of
 * one thread's work; a job of 4,096 took 4.2 µs on one thread and 15 µs on
 * two, the pool's wake-up and join. */
#define ATTN_SMALL_WORK 65536.0

/* A tensor in canonical 5-D form (B1, B2, H, rows, cols), size-1
 * dimensions with stride 0 (see sdpa/plan.c). */
#define ATTN_CANON_RANK 5
typedef struct attn_canon {
    int64_t shape[ATTN_CANON_RANK];
    int64_t strides[ATTN_CANON_RANK];
} attn_canon;

/* All (batch, head) slices of one call, as the plan (sdpa/plan.c) hands
 * them down to the kernels: attn_slice(sl, i, p) fills p with slice i,
 * 0 <= i < sl->count (slices.c). */
typedef struct attn_slices {
    attn_problem base; /* scale and causal settings shared by every slice */
    const attn_tensor *q, *k, *v, *out, *weights, *mask, *lse;
    const attn_tensor *alibi; /* (Hq,) slopes, or NULL */
    const attn_tensor *sinks; /* (Hq,) sink logits, or NULL */
    /* RoPE's options when given (checked; base.rope is set by the kernel
     * runner, which takes the plan's memory from the arena). */
    bool has_rope;
    attn_rope_options rope;
    int64_t rope_dim;
    attn_canon cq, ck, cv, co, cw, cm, cl; /* cl: lse seen as (..., L, 1) */
    /* Keys and values from a paged pool instead of the k and v tensors
     * (NULL: the tensors): one sequence, KV head h of the slice reading
     * head h of the pool, or B sequences of one length whose heads are
     * the pool's side by side, KV head h of batch b reading head b·Hk + h
     * (a contiguous cache; attn_slice). k and v still give the shapes the
     * plan checked (S = the pool's length). */
    const attn_paged_rows *k_pages, *v_pages;
    /* Per-head scales of fp8 keys and values (attn_sdpa_options.k_descale
     * and v_descale; NULL: none) and their strides, in elements, over k's
     * (B1, B2, Hk), 0 where they broadcast: attn_slice folds k's into the
     * problem's scale, attn_descale_out multiplies each slice's out by v's
     * once the kernels are done (attn.h, fp8 with one scale per head). */
    const attn_tensor *k_descale, *v_descale;
    int64_t kd_strides[3], vd_strides[3];
    int threads; /* for this call, the caller's included */
    attn_arena *arena; /* where the call's scratch comes from */
    int64_t count;
} attn_slices;
void attn_slice(const attn_slices *sl, int64_t index, attn_problem *p);
/* Every slice's out times its v_descale (none: nothing done), one f32
 * rounding each: what a call with fp8 values and per-head scales does
 * after its kernels (sdpa.c, varlen.c). */
void attn_descale_out(const attn_slices *sl);

/* One slice of a backward pass: the forward's problem (q, k, v, out, lse,
 * mask, scale, causal) and the gradients' views. dout (L, Ev) is read; dq
 * (L, E), dk (S, E), dv (S, Ev) and dmask (L, S) are f64 accumulators that
 * slices sharing an input (a broadcast batch, a GQA group) add into; a
 * gradient not asked for has base NULL. */
typedef struct attn_grad_problem {
    attn_problem f;
    attn_mat dout, dq, dk, dv, dmask;
} attn_grad_problem;

/* All slices of one backward call: the forward's slices and the canonical
 * forms of the gradients (f64 accumulators shaped like q, k, v and the
 * mask, so they broadcast exactly as their inputs do). */
typedef struct attn_grad_slices {
    attn_slices f;
    const attn_tensor *dout, *dq, *dk, *dv, *dmask;
    attn_canon cdo, cdq, cdk, cdv, cdm;
    /* dq, dk, dv, dmask: the view is the caller's output itself, which no two
     * slices share (no broadcast, no GQA): kernels write it, never add. */
    bool direct[4];
    /* dk, dv (indices 1, 2; 0 and 3 stay false): the view is the caller's
     * output, which only the slices of a GQA group share (consecutive
     * slices, no broadcast dimension, no RoPE to turn dk back): the fused
     * kernel sums the group's partials in f64 and rounds once into it,
     * with no accumulator shaped like k (flash_backward.c, reduce). */
    bool grouped[4];
    /* The bf16 compute mode: the fused kernel's products on bf16 pairs. */
    bool bf16;
} attn_grad_slices;
void attn_grad_slice(const attn_grad_slices *gs, int64_t index, attn_grad_problem *p);

/* What one call ran, for ATTN_VERBOSE (verbose.c): the kernel ("exact",
 * "reference", "scores", "flash" or "decode"), the microkernels' ISA, the
 * threads that ran its work items (attn_parallel_for's count) of the
 * threads it was given, and how many of its work items (flash: blocks of
 * query rows; decode: (batch, head) slices) the exact f64 kernel computed
 * instead; in the bf16 compute mode, which bf16 kernels ran ("f32" when the
 * CPU has no bf16 instruction and the f32 kernels did the work). */
typedef struct attn_run_info {
    const char *kernel, *isa, *bf16;
    int threads, threads_given;
    int64_t items, fallbacks;
    /* decode: the integer dot product set that took the quantized keys'
     * scores (qdot.h), or NULL (f32 products, widened keys). */
    const char *key_dot;
    /* decode: the most KV heads one work item read together, their rows
     * side by side in memory (decode.c, decode_partials); 1: a head an
     * item. Set by the decode kernel only (read where kernel is "decode"). */
    int side_by_side;
    /* decode: how q8/q4 values were accumulated (the integer set's
     * value_dot, qdot.h), or NULL (the f32 set's widened values). */
    const char *value_dot;
    /* decode: the most pages of a paged cache that one microkernel call
     * read (rows in a list: decode.c, chunk_scores); 0: no call took a
     * list. Read where kernel is "decode". */
    int pages_per_call;
    /* decode: the most KV heads one microkernel call read, position by
     * position, where they lie side by side (decode.c, heads_scores); 0:
     * every call read one head's rows. Read where kernel is "decode". */
    int heads_per_call;
    /* decode: "in_place" when the microkernels read every key and value
     * row where it lies (f32, f16, bf16, q8, q4, e4m3, e5m2 on a set that
     * streams them), "widened" when some were widened a group of rows at a
     * time into scratch first (the portable kernels' 16-bit and quantized
     * rows, q4_1, strided columns); NULL for other kernels. */
    const char *rows;
    /* flash_backward: the most query heads one work item took together,
     * summing their dK and dV itself (a GQA group: flash_backward.c,
     * group_heads); 1: a head an item. Read where kernel is
     * "flash_backward". */
    int heads_per_item;
    /* flash_backward: the slices (of `items`) that items of a whole group
     * took; the others were items of one head (choose_groups). */
    int64_t grouped_slices;
} attn_run_info;

#endif /* ATTN_BASE_H */
