/*
 * attn.h -- the whole public API of libattn, scaled dot-product attention in C.
 *
 *     out = softmax(q · kᵀ · scale + mask) · v
 *
 * This header is its own documentation: every type, function and error code is
 * described where it is declared. The semantics follow PyTorch's
 * torch.nn.functional.scaled_dot_product_attention, so results can be checked
 * against PyTorch and code can move between the two (see README.md for the
 * differences, all of them deliberate).
 *
 * Conventions
 *   - Every function that can fail returns an attn_status. ATTN_OK is 0.
 *   - Every such function takes an optional `attn_error *err` as its last
 *     argument. When it is not NULL and the call fails, it receives the status
 *     and a one-line message saying what was wrong, e.g.
 *     "k has E=4 but q has E=8 (the last dimensions must match)".
 *     On success it is left untouched.
 *   - The library never exits, never aborts, and prints only when asked to
 *     (verbose mode, attn_set_verbose). All functions are thread-safe on
 *     distinct outputs. Its global state is process-wide and listed here:
 *     the thread pool and its size (attn_set_num_threads, ATTN_NUM_THREADS),
 *     the microkernels' ISA (chosen once; ATTN_ISA), and the verbose flag
 *     (attn_set_verbose, ATTN_VERBOSE).
 *   - The caller owns all memory it passes in. Scratch memory a call needs is
 *     allocated and freed inside that call (it is linear in the sequence
 *     lengths; nothing of size L×S is ever allocated). The one exception is
 *     attn_npy_read, which returns an array the caller frees with
 *     attn_npy_free.
 *   - Outputs come first in argument lists, inputs after them, options last.
 *
 * Build: C11. Link with -lattn -lm (or use `pkg-config --cflags --libs attn`).
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols the shared library exports. Everything else in it is hidden. */
#if defined(ATTN_BUILDING_LIBRARY) && defined(__GNUC__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH" of this header. */
#define ATTN_VERSION_STRING "0.1.0"

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH". Compare
 * with ATTN_VERSION_STRING to detect a header/library mismatch. */
ATTN_API const char *attn_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum attn_status {
    ATTN_OK = 0,
    /* A required pointer argument (a tensor, its data, a path) is NULL. */
    ATTN_ERR_NULL = 1,
    /* A tensor's rank is outside what the call accepts (2..ATTN_MAX_RANK for
     * attention inputs, 0..ATTN_MAX_RANK for any tensor). */
    ATTN_ERR_RANK = 2,
    /* A dimension is < 1, or sizes that must agree do not (q's E vs k's E,
     * k's S vs v's S, the output's shape, ...). */
    ATTN_ERR_SHAPE = 3,
    /* Leading (batch) dimensions are neither equal nor 1. */
    ATTN_ERR_BROADCAST = 4,
    /* The number of query heads is not a multiple of the number of key/value
     * heads, or k and v have different head counts. */
    ATTN_ERR_HEADS = 5,
    /* A dtype is wrong: q, k, v, out and weights must share one float dtype
     * (k and v may be f16 or bf16 with f32 q). */
    ATTN_ERR_DTYPE = 6,
    /* The mask has a wrong dtype (bool, or q's float dtype) or a shape that
     * does not broadcast to (..., Hq, L, S). */
    ATTN_ERR_MASK = 7,
    /* The scale is NaN or infinite. */
    ATTN_ERR_SCALE = 8,
    /* An option has a value outside its enum (e.g. an unknown causal mode). */
    ATTN_ERR_OPTION = 9,
    /* A stride is invalid: an output dimension of size > 1 with stride 0
     * (several results would land in one element). */
    ATTN_ERR_STRIDE = 10,
    /* A size or offset computation overflows (e.g. a shape whose element or
     * byte count does not fit in 64 bits / size_t). */
    ATTN_ERR_OVERFLOW = 11,
    /* Memory allocation failed. */
    ATTN_ERR_NO_MEMORY = 12,
    /* A file could not be opened, read or written (the message has errno's
     * text). */
    ATTN_ERR_IO = 13,
    /* A .npy file is malformed: bad magic, a header that is not a valid
     * dictionary, or a header length that lies about the header's size. */
    ATTN_ERR_NPY_HEADER = 14,
    /* A .npy file is well formed but uses something this library does not
     * read: Fortran order, big-endian data, a dtype other than <f4, <f8, <f2, |b1,
     * object or structured arrays, or an unknown format version. */
    ATTN_ERR_NPY_UNSUPPORTED = 15,
    /* A .npy file holds fewer data bytes than its shape needs. */
    ATTN_ERR_NPY_TRUNCATED = 16,
    /* A .npy file has bytes after the data its shape describes. */
    ATTN_ERR_NPY_TRAILING = 17,
    /* A sentence for the toy model is empty, too long, or has a word outside
     * its vocabulary (the message names the word and the closest known one). */
    ATTN_ERR_TOKEN = 18,
    /* An argument other than a tensor is out of range (a count, a dimension,
     * a mode), e.g. zero queries for attn_scaling_measure. */
    ATTN_ERR_ARGUMENT = 19
} attn_status;

/* Number of distinct attn_status values (ATTN_OK included). */
#define ATTN_STATUS_COUNT 20

/* A short, static, human-readable description of a status code, e.g.
 * attn_strerror(ATTN_ERR_HEADS) == "invalid head counts". Unknown values give
 * "unknown status". Never NULL. */
ATTN_API const char *attn_strerror(attn_status status);

/* Longest message, terminator included, that attn_error holds. Longer
 * messages are truncated. */
#define ATTN_ERROR_MESSAGE_SIZE 512

/* The precise reason a call failed. Pass a pointer to one as the last
 * argument of any call; it is filled only when the call fails. */
typedef struct attn_error {
    attn_status status;
    char message[ATTN_ERROR_MESSAGE_SIZE];
} attn_error;

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

/* Highest tensor rank the library handles: (B1, B2, H, L, E). */
#define ATTN_MAX_RANK 5

typedef enum attn_dtype {
    ATTN_F32 = 1,  /* float, IEEE-754 binary32 */
    ATTN_F64 = 2,  /* double, IEEE-754 binary64 */
    ATTN_BOOL = 3, /* one byte per element; 0 is false, anything else true */
    ATTN_F16 = 4,  /* IEEE-754 binary16, stored as uint16_t (for k and v only) */
    ATTN_BF16 = 5  /* bfloat16: the top half of an f32, as uint16_t (k and v only) */
} attn_dtype;

/* Size in bytes of one element of `dtype`, or 0 for an unknown dtype. */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);
/* Short name of `dtype`: "f32", "f64", "bool", "f16", "bf16", or "unknown". */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);
/* Format a shape as NumPy prints it, "(2, 3)", "(3,)" or "()", into buf
 * (always terminated when size > 0, cut short if it does not fit). */
ATTN_API void attn_format_shape(char *buf, size_t size, int rank, const int64_t *shape);

/* A view of a strided array that the caller owns. Nothing is copied.
 *
 * Element (i0, ..., i{rank-1}) lives at
 *     (char *)data + attn_dtype_size(dtype) * sum_d i_d * strides[d]
 * Strides are in elements, not bytes, and may be zero or negative for inputs,
 * so one buffer can be viewed as (B, H, L, E) or, with permuted strides, as
 * (B, L, H, E) memory seen as (B, H, L, E), without copying.
 * Inputs are only read through `data`; it is not const so that one type serves
 * inputs and outputs. Entries of shape/strides at index >= rank are ignored. */
typedef struct attn_tensor {
    void *data;
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    int64_t strides[ATTN_MAX_RANK];
} attn_tensor;

/* Fill *t with a view of `data`. `shape` has `rank` entries. `strides` (in
 * elements) may be NULL for C order (row-major, last index fastest).
 * Errors: ATTN_ERR_NULL (t, or shape with rank > 0), ATTN_ERR_RANK (rank
 * outside 0..ATTN_MAX_RANK), ATTN_ERR_SHAPE (a dimension < 0),
 * ATTN_ERR_DTYPE (unknown dtype), ATTN_ERR_OVERFLOW (the element count does
 * not fit). data may be NULL here; calls that read or write it reject that. */
ATTN_API attn_status attn_tensor_init(attn_tensor *t, void *data, attn_dtype dtype,
                                      int rank, const int64_t *shape,
                                      const int64_t *strides, attn_error *err);

/* 16-bit floats. f32 to f16/bf16 rounds to nearest, ties to even; values
 * beyond f16's range become ±inf; NaN stays NaN. f16/bf16 to f32 is exact. */
ATTN_API float attn_f16_to_f32(uint16_t h);
ATTN_API uint16_t attn_f32_to_f16(float f);
ATTN_API float attn_bf16_to_f32(uint16_t b);
ATTN_API uint16_t attn_f32_to_bf16(float f);

/* Copy src into dst element by element, converting between the float
 * dtypes (f64, f32, f16, bf16) as above; both any strides, same shape.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_SHAPE, ATTN_ERR_DTYPE (bool or unknown),
 * ATTN_ERR_OVERFLOW. */
ATTN_API attn_status attn_tensor_convert(attn_tensor *dst, const attn_tensor *src, attn_error *err);

/* Number of elements (product of the shape; 1 for rank 0). Returns -1 when
 * the product overflows int64 or a dimension is negative. */
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);

/* ------------------------------------------------------------------------ */
/* Scaled dot-product attention                                             */
/* ------------------------------------------------------------------------ */

/* Which query/key pairs a causal mask keeps. Query i (0..L-1), key j (0..S-1):
 *   ATTN_CAUSAL_NONE          every pair.
 *   ATTN_CAUSAL_TOP_LEFT      j <= i, PyTorch's is_causal=True. With L > S the
 *                             last L-S queries see all keys.
 *   ATTN_CAUSAL_BOTTOM_RIGHT  j <= i + (S - L), the KV-cache convention: the
 *                             last query sees every key. With L > S the first
 *                             L-S queries see no key (their output is 0). */
typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_TOP_LEFT = 1,
    ATTN_CAUSAL_BOTTOM_RIGHT = 2
} attn_causal;

/* How f32 attention computes its two products.
 *   ATTN_COMPUTE_F32   f32 multiply-adds (the default).
 *   ATTN_COMPUTE_BF16  q, k, the softmax probabilities and v are rounded to
 *                      bfloat16 and multiplied in pairs with f32 accumulation
 *                      (AVX512_BF16's VDPBF16PS where the CPU has it, else an
 *                      exact emulation of it): about twice the speed, with
 *                      errors of a few 1e-3 relative (see docs/performance.md).
 *                      f32 q only; not with weights. The decode path (L <= 4,
 *                      long S) is memory-bound and computes in f32 either way. */
typedef enum attn_compute { ATTN_COMPUTE_F32 = 0, ATTN_COMPUTE_BF16 = 1 } attn_compute;

/* Options of attn_sdpa. Zero-initialise (or use attn_sdpa_options_default)
 * and set what you need; a NULL options pointer means all defaults. */
typedef struct attn_sdpa_options {
    /* When has_scale is 0 (the default) the scale is 1/sqrt(E), E being the
     * query/key size (q's last dimension, never the model width). Otherwise
     * `scale` is used; it must be finite (0 and negative values are allowed). */
    int has_scale;
    double scale;
    /* Causal masking; combines with `mask` (a key takes part only if both
     * allow it). */
    attn_causal causal;
    /* Optional mask, NULL for none. Its shape broadcasts (right-aligned, each
     * dimension equal or 1) to (..., Hq, L, S), and it may not have more
     * dimensions than the output.
     *   dtype ATTN_BOOL: true means the key takes part, false masks it out.
     *   dtype equal to q's: added to the scaled scores; -inf masks a key. */
    const attn_tensor *mask;
    /* Optional output for the attention weights softmax(q·kᵀ·scale + mask),
     * NULL for none. Shape (..., Hq, L, S), same leading dimensions and rank
     * as `out`, q's dtype. This is the only L×S-sized memory involved, and it
     * is the caller's. */
    attn_tensor *weights;
    /* The arithmetic of f32 attention; see attn_compute. attn_sdpa_reference
     * ignores it (it is exact). */
    attn_compute compute;
} attn_sdpa_options;

/* The defaults: scale 1/sqrt(E), no causal mask, no mask, no weights. */
ATTN_API attn_sdpa_options attn_sdpa_options_default(void);

/* Scaled dot-product attention, PyTorch semantics.
 *
 *   out = softmax(q · kᵀ · scale + mask) · v
 *
 * Shapes (the last two dimensions are matrices; the one before them, if any,
 * counts heads; the rest are batch dimensions):
 *   q    (..., Hq, L, E)
 *   k    (..., Hk, S, E)
 *   v    (..., Hk, S, Ev)      Ev may differ from E
 *   out  (..., Hq, L, Ev)      written, never read
 * q, k, v and out share one dtype, f32 or f64, except that with f32 queries
 * k and v may each be stored as f16 or bf16 (half the memory; they are
 * widened to f32 as they are read, the arithmetic stays f32).
 * Rank-2 inputs (L, E) are one head. Ranks may differ between q, k and v:
 * shapes are aligned on the right. Batch dimensions broadcast (each equal or
 * 1, the output takes the larger). Every dimension must be >= 1.
 *
 * Heads: Hq must be a multiple of Hk (GQA/MQA); query head h uses key/value
 * head h / (Hq / Hk), like torch's repeat_interleave. k and v must have the
 * same number of heads.
 *
 * Numerics:
 *   - The softmax subtracts the row maximum, so finite inputs of any size
 *     (scores of +-1e30) never produce NaN or Inf. If scores are +inf (f64
 *     dot products that overflow), the weight is shared equally among the
 *     +inf keys, which is the limit of the softmax.
 *   - A row in which no key may take part (masked by the bool mask, by -inf in
 *     a float mask, or by the causal mask) gives output 0 and weights 0,
 *     never NaN, like PyTorch >= 2.5.
 *   - NaN in an input reaches only the output rows whose computation reads it.
 *   - f64 computes in f64 throughout (the exact, oracle-grade path).
 *   - f32 runs on the fast kernels: tiled FlashAttention-2, or split over the
 *     keys for L <= 4 against S >= 2048 (in f32 arithmetic, even in the bf16
 *     compute mode), on attn_get_num_threads() threads, bitwise identical
 *     for any thread count. Their error against the exact result is
 *       max|out - exact| <= 2e-5 · max|exact| + 4 · 2^-24 · max|s| · max|v|
 *     where s are the scores q·k·scale: f32 rounds a score by up to
 *     2^-24·|s|; scaling the queries, subtracting the row maximum and
 *     scaling by log2 e add as much again, and scores that move by at most d
 *     move the output by at most 2·d·max|v|. The first term covers the
 *     rounding of the sums (tested up to S = 9000). PyTorch's own float32
 *     has the same 2^-24·|s| term.
 *   - Any finite mask value is a finite score, -FLT_MAX included (Hugging
 *     Face pads with torch.finfo(torch.float32).min): scores stay in natural
 *     units, and only their differences from the row maximum are scaled.
 *   - Work whose inputs hold NaN or ±inf (other than -inf in a float mask),
 *     or whose scores could exceed 2^100 in magnitude, or whose sums could
 *     overflow f32, and every call that asks for weights, is computed by the
 *     exact kernel instead (in f64, rounded once), so the rules above hold
 *     in f32 too. Queries are multiplied by the scale in f64 and rounded
 *     once; subnormal f32 values are kept (nothing flushes them to zero).
 *
 * Memory: scratch memory is O((E + Ev) × block × threads) per call,
 * independent of L×S (plus a few floats per slice and per key chunk for the
 * decode path); the kernels stream over the keys in blocks with an online
 * softmax.
 *
 * Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE, ATTN_ERR_BROADCAST,
 * ATTN_ERR_HEADS, ATTN_ERR_DTYPE, ATTN_ERR_MASK, ATTN_ERR_SCALE,
 * ATTN_ERR_OPTION, ATTN_ERR_STRIDE, ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY.
 * Nothing is written to out or weights unless every check passed. */
ATTN_API attn_status attn_sdpa(attn_tensor *out, const attn_tensor *q,
                               const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *options, attn_error *err);

/* The shapes attn_sdpa expects for out and weights, given q, k, v and the
 * options (options->weights is ignored; NULL options means defaults): the
 * rank is written to *rank, the dimensions to out_shape[0..rank) and
 * weights_shape[0..rank). Any of the three output pointers may be NULL.
 * Checks q, k, v, the options and the mask exactly as attn_sdpa does and
 * fails with the same errors, so a caller can validate before allocating. */
ATTN_API attn_status attn_sdpa_shapes(int *rank, int64_t out_shape[ATTN_MAX_RANK],
                                      int64_t weights_shape[ATTN_MAX_RANK],
                                      const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_sdpa_options *options,
                                      attn_error *err);

/* The attention scores alone, before the softmax:
 *
 *   scores = q · kᵀ · scale + mask       (..., Hq, L, S), q's dtype
 *
 * with -inf wherever the causal mask, the bool mask or a -inf in a float mask
 * excludes a key. q, k and the options (scale, causal, mask; weights is
 * ignored) mean exactly what they mean for attn_sdpa, and so do the errors
 * (the output is named "scores" in messages). Unlike attn_sdpa this writes an
 * L×S result, which the caller owns. */
ATTN_API attn_status attn_scores(attn_tensor *scores, const attn_tensor *q, const attn_tensor *k,
                                 const attn_sdpa_options *options, attn_error *err);

/* The same contract as attn_sdpa, computed by the plain textbook algorithm:
 * for each query row, all S scores, their maximum, the normalised weights, then
 * the weighted sum of values. Slow and simple, it exists so that tests can
 * check the streaming kernel against an independent implementation. Scratch
 * memory is O(S + E + Ev). */
ATTN_API attn_status attn_sdpa_reference(attn_tensor *out, const attn_tensor *q,
                                         const attn_tensor *k, const attn_tensor *v,
                                         const attn_sdpa_options *options,
                                         attn_error *err);

/* ------------------------------------------------------------------------ */
/* Threads and instruction sets                                             */
/* ------------------------------------------------------------------------ */

/* f32 attention runs on a small pool of worker threads that the library
 * creates on first use. Results are bitwise identical for any thread count:
 * work is split into items whose results do not depend on who runs them.
 * n >= 1 sets the number of threads (the caller included; at most 256);
 * n <= 0 restores the default: ATTN_NUM_THREADS from the environment, else
 * the number of online CPUs. */
ATTN_API void attn_set_num_threads(int n);
/* The number of threads the next call will use. */
ATTN_API int attn_get_num_threads(void);
/* Join the worker threads and free them (also done at exit). Calls after
 * this start a new pool. Must not run concurrently with attention calls. */
ATTN_API void attn_shutdown(void);

/* The instruction set of the f32 microkernels in use: "avx512", "avx2" or
 * "c". Chosen once per process from the CPU; the environment variable
 * ATTN_ISA=avx512|avx2|c forces one (ignored if the CPU lacks it). */
ATTN_API const char *attn_isa(void);

/* Verbose mode: with ATTN_VERBOSE=1 in the environment (read at the first
 * call), or after attn_set_verbose(1), every attention call prints one line
 * to stderr, e.g.
 *   attn: sdpa kernel=flash isa=avx2 threads=2 q=f32(2,8,128,64)
 *   k=f32(2,2,256,64) v=f32(2,2,256,64) mask=none causal=bottom-right
 *   compute=f32 weights=no fallback=0/16 ms=1.234
 * (on one line): the call (sdpa, sdpa_reference, scores), the kernel that
 * ran (exact, reference, scores, flash or decode), the microkernels' ISA,
 * the threads, the operands, and how many work items (flash: blocks of
 * query rows; decode: (batch, head) slices) the exact kernel computed
 * instead because their inputs were not finite or too large for f32. This is
 * the only output the library ever makes. attn_set_verbose(0) turns it off,
 * n < 0 restores the environment's setting. The setting is process-wide. */
ATTN_API void attn_set_verbose(int on);

/* ------------------------------------------------------------------------ */
/* .npy files                                                               */
/* ------------------------------------------------------------------------ */

/* Read a NumPy .npy file (format versions 1.0, 2.0 and 3.0), C order,
 * little-endian, dtype '<f4', '<f8', '<f2' (ATTN_F16) or '|b1', rank
 * 0..ATTN_MAX_RANK.
 * On success *out is a C-contiguous tensor whose data the library allocated;
 * release it with attn_npy_free. On failure *out is zeroed.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_IO, ATTN_ERR_NPY_HEADER,
 * ATTN_ERR_NPY_UNSUPPORTED, ATTN_ERR_NPY_TRUNCATED, ATTN_ERR_NPY_TRAILING,
 * ATTN_ERR_RANK, ATTN_ERR_OVERFLOW (a shape whose byte count overflows),
 * ATTN_ERR_NO_MEMORY. */
ATTN_API attn_status attn_npy_read(attn_tensor *out, const char *path, attn_error *err);

/* The same as attn_npy_read, from the `size` bytes at `bytes` (a whole .npy
 * file held in memory). Never reads outside [bytes, bytes + size). */
ATTN_API attn_status attn_npy_parse(attn_tensor *out, const void *bytes, size_t size,
                                    attn_error *err);

/* Free the data of a tensor returned by attn_npy_read/attn_npy_parse and zero
 * the view. NULL and already-freed (zeroed) tensors are fine. */
ATTN_API void attn_npy_free(attn_tensor *t);

/* Write `t` (any strides; f32, f64, f16 or bool; .npy has no bf16) to `path` as a version 1.0 .npy
 * file in C order, data aligned to 64 bytes. The file is written in place and
 * removed again if writing fails; for an all-or-nothing replacement of an
 * existing file, write to a temporary name in the same directory and rename.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE, ATTN_ERR_DTYPE,
 * ATTN_ERR_OVERFLOW, ATTN_ERR_IO. */
ATTN_API attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err);

/* ------------------------------------------------------------------------ */
/* The toy model                                                            */
/* ------------------------------------------------------------------------ */

/* A tiny, untrained model whose every matrix fits on a screen: a vocabulary of
 * 30 words, 8 named features per word (X's columns), d_k = 4, and two heads:
 *   ATTN_TOY_WIRED   wired by hand: a verb's query looks for an animal, a
 *                    preposition's for a thing, an adjective's for a noun, a
 *                    noun's for its determiner. In "the cat sat on the mat",
 *                    sat attends most to cat and on to mat; QKᵀ[sat][cat] = 1.92
 *                    while QKᵀ[cat][sat] = 0.02. Its values copy the features
 *                    noun, verb, animal, thing.
 *   ATTN_TOY_RANDOM  W_Q, W_K, W_V uniform with variance 1/8 from
 *                    ATTN_TOY_SEED, by the library's portable generator
 *                    (splitmix64): the same numbers on every platform. */
#define ATTN_TOY_D_MODEL 8
#define ATTN_TOY_D_K 4
#define ATTN_TOY_MAX_TOKENS 64
#define ATTN_TOY_SEED 2017

typedef enum attn_toy_head { ATTN_TOY_WIRED = 0, ATTN_TOY_RANDOM = 1 } attn_toy_head;

/* Number of words in the vocabulary; ids are 0..size-1. */
ATTN_API int attn_toy_vocab_size(void);
/* The word with this id (lower case), or NULL if id is out of range. */
ATTN_API const char *attn_toy_word(int id);
/* Name of feature column j of X (0..ATTN_TOY_D_MODEL-1), or NULL. */
ATTN_API const char *attn_toy_feature(int j);
/* Name of value column j for a head (the wired head's values are named
 * features), or NULL (the random head's are not). */
ATTN_API const char *attn_toy_value_feature(attn_toy_head head, int j);
/* The id of the len-byte word at text, ignoring case, or -1 if unknown. */
ATTN_API int attn_toy_word_id(const char *text, size_t len);
/* The known word closest to the len-byte word at text (edit distance,
 * ignoring case). Never NULL. */
ATTN_API const char *attn_toy_suggest(const char *text, size_t len);

/* One word of a sentence: its vocabulary id and where it is in the text. */
typedef struct attn_toy_token {
    int id;     /* vocabulary id, or -1 for an unknown word */
    int start;  /* byte offset in the sentence */
    int length; /* bytes */
} attn_toy_token;

/* Split `sentence` into words and look each up. Words are runs of letters,
 * digits, apostrophes and non-ASCII bytes; everything else (spaces,
 * punctuation) separates them; case is ignored. Fills tokens[0..*n_tokens).
 * Errors: ATTN_ERR_NULL; ATTN_ERR_ARGUMENT (max_tokens < 1); ATTN_ERR_TOKEN
 * for no words, more than max_tokens words, or an unknown word, whose message
 * names it, suggests the closest known word and lists the vocabulary. For an
 * unknown word, *n_tokens is its index and tokens[*n_tokens] holds its
 * position (id -1), so a caller can point at it. */
ATTN_API attn_status attn_toy_tokenize(attn_toy_token *tokens, int max_tokens, int *n_tokens,
                                       const char *sentence, attn_error *err);

/* x (n, ATTN_TOY_D_MODEL) = the embedding rows of the n tokens.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_TOKEN (an id outside the vocabulary). */
ATTN_API attn_status attn_toy_embed(double *x, const attn_toy_token *tokens, int n,
                                    attn_error *err);

/* W_Q, W_K, W_V, each (ATTN_TOY_D_MODEL, ATTN_TOY_D_K) in C order, used as
 * X·W. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (unknown head). */
ATTN_API attn_status attn_toy_weights(double *w_q, double *w_k, double *w_v, attn_toy_head head,
                                      attn_error *err);

/* ------------------------------------------------------------------------ */
/* The explainer: every matrix of one head                                  */
/* ------------------------------------------------------------------------ */

/* The progression from plain averaging to full attention:
 *   ATTN_EXPLAIN_AVERAGE  every token takes the plain average of all X rows
 *                         (attention with all scores equal: scale 0);
 *   ATTN_EXPLAIN_DOT      weights = softmax(X·Xᵀ), unscaled, output = weights·X
 *                         (q = k = v = X, scale 1);
 *   ATTN_EXPLAIN_QKV      Q = X·W_Q, K = X·W_K, V = X·W_V,
 *                         weights = softmax(Q·Kᵀ / sqrt(d_k)), output = weights·V. */
typedef enum attn_explain_mode {
    ATTN_EXPLAIN_QKV = 0,
    ATTN_EXPLAIN_DOT = 1,
    ATTN_EXPLAIN_AVERAGE = 2
} attn_explain_mode;

/* What to explain. Matrices are f64, C order. */
typedef struct attn_explain_input {
    int n_tokens, d_model;     /* X is (n_tokens, d_model) */
    int d_k, d_v;              /* W_Q, W_K are (d_model, d_k); W_V is (d_model, d_v) */
    const double *X;
    const double *W_Q, *W_K, *W_V; /* used by ATTN_EXPLAIN_QKV only */
    attn_explain_mode mode;
    int causal;   /* top-left causal mask: token i sees tokens 0..i */
    int no_scale; /* ATTN_EXPLAIN_QKV: skip the 1/sqrt(d_k) (scale 1) */
} attn_explain_input;

/* Every intermediate matrix, computed by attn_scores and attn_sdpa. Each is
 * (rows, cols) in C order; n = tokens. In modes average and dot, Q = K = V = X
 * and d_k = d_v = d_model. */
typedef struct attn_explain {
    int n, d_model, d_k, d_v;
    double scale;     /* the scale applied: 1/sqrt(d_k), 1 or 0 */
    double *Q, *K;    /* (n, d_k) */
    double *V;        /* (n, d_v) */
    double *scores;   /* (n, n) Q·Kᵀ, before scaling and masking */
    double *scaled;   /* (n, n) Q·Kᵀ·scale, -inf where the causal mask hides a key */
    double *weights;  /* (n, n) softmax of each row of scaled; rows sum to 1 */
    double *output;   /* (n, d_v) weights·V */
} attn_explain;

/* Compute every matrix of `in` into *ex (allocated by the library: free it
 * with attn_explain_free). On failure *ex is zeroed.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_OPTION (mode), ATTN_ERR_ARGUMENT (sizes),
 * ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY. */
ATTN_API attn_status attn_explain_run(attn_explain *ex, const attn_explain_input *in,
                                      attn_error *err);
/* Free what attn_explain_run allocated and zero *ex. NULL is fine. */
ATTN_API void attn_explain_free(attn_explain *ex);

/* Names for the JSON form: tokens (n), features (d_model), value_features
 * (d_v), and the head ("wired", "random", "custom" or "none"). */
typedef struct attn_explain_labels {
    const char *const *tokens;
    const char *const *features;
    const char *const *value_features;
    const char *head;
} attn_explain_labels;

/* Write `ex` (computed from `in`) as one JSON object, the format of
 * `attn explain --json` described in docs/explainer.md: keys tokens,
 * features, value_features, mode, head, causal, scale, d_model, d_k, d_v, X,
 * W_Q, W_K, W_V, Q, K, V, scores, scaled, weights, output. Matrices are lists
 * of rows printed with 17 significant digits (exact), -inf as null.
 * Like snprintf: *length receives the full length (without the terminator);
 * at most size bytes are written, always terminated when size > 0. Call with
 * size 0 to learn the length. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (ex
 * was not computed from in). */
ATTN_API attn_status attn_explain_json(char *buf, size_t size, size_t *length,
                                       const attn_explain *ex, const attn_explain_input *in,
                                       const attn_explain_labels *labels, attn_error *err);

/* ------------------------------------------------------------------------ */
/* The scaling experiment: why divide by sqrt(d_k)                          */
/* ------------------------------------------------------------------------ */

#define ATTN_SCALING_BINS 48
/* Histogram axes: raw scores on [-96, 96], scaled scores on [-4, 4]. */
#define ATTN_SCALING_RAW_RANGE 96.0
#define ATTN_SCALING_SCALED_RANGE 4.0

/* One row of the experiment: `queries` standard-normal queries of size d, each
 * with its own `keys` standard-normal keys. Scores are q·k. */
typedef struct attn_scaling_row {
    int d, keys, queries;
    double spread_raw;    /* std of the raw scores (about sqrt(d)) */
    double spread_scaled; /* std of scores / sqrt(d) (about 1) */
    double top_raw;       /* mean over queries of the largest softmax weight, raw */
    double top_scaled;    /* the same after dividing the scores by sqrt(d) */
    double top_div_d;     /* the same after dividing by d (over-corrected) */
    /* Size of the softmax's gradient: the Frobenius norm of its Jacobian
     * diag(p) - p·pᵀ for each query, its mean and median over queries, for
     * raw and for scaled scores. Small means little gradient flows back. */
    double grad_mean_raw, grad_mean_scaled, grad_median_raw, grad_median_scaled;
    /* Densities of the raw and scaled scores on the axes above (values
     * outside an axis are not counted). */
    double hist_raw[ATTN_SCALING_BINS], hist_scaled[ATTN_SCALING_BINS];
} attn_scaling_row;

/* Run the experiment for one d with the library's portable generator seeded
 * with `seed` (standard normals by Box-Muller). Deterministic for a seed.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (d, keys < 1 or > 2^20; queries < 1
 * or > 2^24), ATTN_ERR_NO_MEMORY. */
ATTN_API attn_status attn_scaling_measure(attn_scaling_row *row, int d, int queries, int keys,
                                          uint64_t seed, attn_error *err);

/* Write `row` as one JSON object: keys d, keys, queries, spread_raw,
 * spread_scaled, top_raw, top_scaled, top_div_d, grad_mean_raw,
 * grad_mean_scaled, grad_median_raw, grad_median_scaled (17 significant
 * digits), and with `histograms` also raw_range, scaled_range, hist_raw and
 * hist_scaled. Like snprintf: *length receives the full length (without the
 * terminator); at most size bytes are written, always terminated when
 * size > 0. Errors: ATTN_ERR_NULL. */
ATTN_API attn_status attn_scaling_json(char *buf, size_t size, size_t *length,
                                       const attn_scaling_row *row, int histograms,
                                       attn_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
