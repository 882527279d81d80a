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
 *     "k has E=4 but q has E=8 (their last dimensions must match)".
 *     On success it is left untouched.
 *   - The library never exits, never aborts, and prints only when asked to
 *     (verbose mode, attn_set_verbose). All functions are thread-safe on
 *     distinct outputs. Its global state is process-wide and listed here:
 *     the thread pool and its default size (attn_set_num_threads,
 *     ATTN_NUM_THREADS; one call can ask for another through attn_context),
 *     the microkernels' ISA and the block sizes derived from the CPU's
 *     caches (chosen once; ATTN_ISA), how quantized keys and values are
 *     dotted (chosen with them; ATTN_QDOT, see "Quantized storage"), the
 *     bf16 compute mode's kernels
 *     (chosen with them: on a CPU with AMX the library asks Linux once per
 *     process for the tile state, arch_prctl(ARCH_REQ_XCOMP_PERM,
 *     XFEATURE_XTILEDATA), which then holds for the whole process, every
 *     thread's signal frames growing by the 8 KiB of tile data; refused, the
 *     AVX-512 kernels run and ATTN_VERBOSE says so), the verbose flag
 *     (attn_set_verbose, ATTN_VERBOSE), and the count of KV page pools made
 *     so far (attn_kv_pages_init starts each pool's generation counter past
 *     the last pool's). ATTN_NUM_THREADS is read at every
 *     call that takes the default thread count, the other variables once
 *     (ATTN_VERBOSE again at attn_set_verbose(-1)). The first threaded call
 *     registers attn_shutdown with atexit and fork handlers with
 *     pthread_atfork (see attn_shutdown); with glibc, dlclose of a dlopen'd
 *     library joins the workers and drops both. The library has no
 *     thread-local state (a libattn.so linked at a program's start takes
 *     none of the loader's static TLS reserve, which a later dlopen of
 *     another library may need).
 *   - Stack: no call takes more than ATTN_STACK_BOUND bytes (20 KiB) of
 *     its calling thread's stack, the work it hands the pool included (a
 *     call on one thread does all of it there; the caller runs its share
 *     of a threaded call too), nor more of a pool worker's. Scratch that
 *     grows with a call (its heads' problems, a training batch) is taken
 *     from the heap or the workspace once per call, never per item, and so
 *     is the kernels' fixed scratch that a small stack has no room for:
 *     the integer decode kernels' weights of a block of quantized values
 *     and their query rows' tables (16 KiB of each worker's decode
 *     scratch), the flash kernel's 16 keys by 128 channels of keys
 *     quantized per channel (8 KiB of its workspace's row). No frame holds
 *     more than about 13 KiB, of fixed size (attn_kernel_walk_run's;
 *     in attention, 9 KiB: a row of a cache with the Hadamard rotation
 *     quantized, in doubles). So a caller's thread with a small stack (a
 *     coroutine's; a thread's whose usable stack is 32 KiB: glibc takes
 *     the thread's TLS and descriptor out of what
 *     pthread_attr_setstacksize gives) can make any call and keep 12 KiB
 *     for its own frames. The frames are gcc's
 *     -fstack-usage on x86-64 at -O2; the deepest chains run from
 *     attn_mha_cached (the rows appended, quantized; then attention)
 *     and attn_mha_backward through the layer's and attention's plans
 *     (frames of 2 to 5 KiB: copies of the options and of the call's
 *     slices) to the decode kernel's integer values and the backward
 *     kernel. tests/test_threads.c runs every public entry point (and the
 *     quantized values' three AVX-512 kernels) on a stack of
 *     ATTN_STACK_BOUND above its own frames, a guard page right below, and
 *     measures what each used: at most 16 KiB on 1 and 3 threads
 *     (attn_mha_cached into a q4 cache, its values by VPDPBUSD). Other
 *     compilers and flags may differ by some KiB.
 *   - The caller owns all memory it passes in. Scratch memory a call needs is
 *     allocated and freed inside that call, or taken from a workspace the
 *     caller hands over in attn_context. attn_sdpa's is linear in the
 *     sequence lengths: it never allocates anything of size L×S (the
 *     weights, when asked for, are the caller's output). What does:
 *     attn_sdpa_backward's dmask accumulator (the mask's size, when dmask
 *     is asked for), attn_scores' output (the caller's), and attn_mha and
 *     attn_mha_backward, which merge key_padding_mask and attn_mask (and a
 *     causal mask with appended keys) into one additive mask of up to
 *     N·Hq·L·S' elements (a key_padding_mask without attn_mask or that
 *     causal mask: N·S', one row that every query reads), and keep per-head
 *     weights of N·Hq·L·S' when weights are asked for (see attn_mha). Memory the
 *     caller must free: only attn_npy_read's array (attn_npy_free) and
 *     attn_npy_read_i64's values (free).
 *   - Outputs come first in argument lists, inputs after them, options last.
 *   - An output owns its memory: no output may share a byte with another
 *     output or with any tensor the call reads (inputs, masks, parameters,
 *     the options' tensors, a KV cache's positions that a call writes),
 *     which ATTN_ERR_STRIDE reports, naming the two, before anything is
 *     written. Views that interleave without sharing a byte are fine (dq,
 *     dk and dv as slices of one packed gradient buffer). The exceptions
 *     are stated where they apply: in place, as the very same view (same
 *     data, dtype, shape and strides), for attn_rope, attn_rope_backward,
 *     attn_tensor_convert and attn_sdpa_merge; and one tensor for several
 *     of attn_mha_backward's input gradients, which then receives their
 *     sum. Nor may an output share memory with itself through a stride 0
 *     in a dimension of size > 1 (several results for one element: a
 *     broadcast view, torch's expand), ATTN_ERR_STRIDE too, as PyTorch
 *     refuses such an out=, or through strides that fold it onto itself
 *     (two elements in one place: as_strided rows that overlap); views
 *     that interleave their own dimensions without touching are fine (a
 *     layout too intricate to decide in a bounded search, such as shape
 *     (16384, 16384) with strides (16384, 16383), is refused as may-overlap,
 *     as two tensors are). A workspace (attn_context, a plan's run) is
 *     written too: it may share no byte with any tensor of the call,
 *     ATTN_ERR_STRIDE likewise.
 *     Inputs may share memory
 *     freely, and have stride 0 (dout = ones broadcast, for a sum's
 *     gradient).
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
#define ATTN_VERSION_MINOR 4
#define ATTN_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH" of this header. What changed: CHANGELOG.md. */
#define ATTN_VERSION_STRING "0.4.0"
/* The same as one number, MAJOR·10000 + MINOR·100 + PATCH, for the
 * preprocessor: #if ATTN_VERSION_NUMBER >= 300 (0.3.0, the first to define
 * it; before it, test ATTN_VERSION_MINOR). */
#define ATTN_VERSION_NUMBER (ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH)

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH". Compare
 * with ATTN_VERSION_STRING to detect a header/library mismatch. */
ATTN_API const char *attn_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum attn_status {
    ATTN_OK = 0,
    /* A required pointer argument (a tensor, its data, a path) is NULL; also
     * no output asked for where one must be (attn_sdpa_backward's
     * gradients), and a tensor whose partner is NULL (bias_k without
     * bias_v; attn_mha_backward's gradient of a parameter the layer does
     * not have). */
    ATTN_ERR_NULL = 1,
    /* A tensor's rank is outside what the call accepts (2..ATTN_MAX_RANK for
     * attention inputs, 0..ATTN_MAX_RANK for any tensor). */
    ATTN_ERR_RANK = 2,
    /* A dimension below what the call takes (below 0, or 0 where it takes
     * none: attention takes L, S and a batch of 0 but never heads, E or Ev
     * of 0), or sizes that must agree do not (q's E vs k's E, k's S vs v's
     * S, the output's shape, ...). */
    ATTN_ERR_SHAPE = 3,
    /* Leading (batch) dimensions are neither equal nor 1. */
    ATTN_ERR_BROADCAST = 4,
    /* The number of query heads is not a multiple of the number of key/value
     * heads, or k and v have different head counts. */
    ATTN_ERR_HEADS = 5,
    /* A dtype is wrong: q, k, v, out and weights must share one float dtype
     * (k and v may be f16, bf16 or quantized with f32 q; q and out may be
     * f16 or bf16 together, see attn_sdpa), or a name no dtype has
     * (attn_dtype_from_name). */
    ATTN_ERR_DTYPE = 6,
    /* The mask has a wrong dtype (bool, or q's float dtype) or a shape that
     * does not broadcast to (..., Hq, L, S). */
    ATTN_ERR_MASK = 7,
    /* The scale is NaN or infinite, or a per-head scale of fp8 keys or
     * values (k_descale, v_descale, a cache's k_scale, v_scale) is not
     * finite and > 0. */
    ATTN_ERR_SCALE = 8,
    /* An option has a value outside its enum (e.g. an unknown causal mode). */
    ATTN_ERR_OPTION = 9,
    /* A stride is invalid: an output dimension of size > 1 with stride 0
     * or strides that fold an output onto itself (several results would
     * land in one element), or an output whose
     * memory overlaps another output's or an input's (see Conventions), or
     * a workspace that overlaps a tensor of the call (attn_context). */
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
     * read: a dtype other than <f4, <f8, <f2 (or big-endian >f4, >f8, >f2) and
     * |b1, object or structured arrays, or an unknown format version. */
    ATTN_ERR_NPY_UNSUPPORTED = 15,
    /* A .npy file holds fewer data bytes than its shape needs. */
    ATTN_ERR_NPY_TRUNCATED = 16,
    /* A .npy file has bytes after the data its shape describes. */
    ATTN_ERR_NPY_TRAILING = 17,
    /* An argument other than a tensor is out of range (a count, a dimension,
     * a mode), e.g. no parts for attn_sdpa_merge. */
    ATTN_ERR_ARGUMENT = 19,
    /* The caller's workspace (attn_context.workspace) is smaller than the
     * call needs; attn_sdpa_workspace_size says how much that is. */
    ATTN_ERR_WORKSPACE = 20,
    /* A KV cache has no room for the positions appended, or a pool of
     * pages no free page or sequence id; nothing was written
     * (attn_kv_cache_append, attn_kv_pages_*). */
    ATTN_ERR_FULL = 21,
    /* Ranks of an MPI communicator could not agree (attn_mpi.h): a message
     * failed, or a rank did not answer within the timeout (it died or hung).
     * Only libattn-mpi returns it. */
    ATTN_ERR_COMM = 22,
    /* A tensor given to attn_sdpa_run differs from the one its plan was
     * made for (shape, strides, dtype, or lse given or not), or the plan's
     * memory holds no plan. Added in 0.4.0. */
    ATTN_ERR_PLAN = 23,

    /* The teaching API's own error (attn_teach.h): a sentence for the toy
     * model is empty, too long, or has a word outside its vocabulary (the
     * message names the word and the closest known one). */
    ATTN_ERR_TOKEN = 18
} attn_status;

/* Number of distinct attn_status values (ATTN_OK included). */
#define ATTN_STATUS_COUNT 24

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

/* Fill *err (when not NULL) with `status` and a printf-style message, and
 * return `status`: how the library reports every failure, public so that
 * libraries built on it (libattn-mpi) report theirs the same way. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
ATTN_API attn_status attn_error_set(attn_error *err, attn_status status, const char *fmt, ...);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

/* Highest tensor rank the library handles: (B1, B2, H, L, E). */
#define ATTN_MAX_RANK 5

/* The most bytes of its calling thread's stack any call takes (see
 * Conventions, "Stack"). */
#define ATTN_STACK_BOUND (20 * 1024)

typedef enum attn_dtype {
    ATTN_F32 = 1,  /* float, IEEE-754 binary32 */
    ATTN_F64 = 2,  /* double, IEEE-754 binary64 */
    ATTN_BOOL = 3, /* one byte per element; 0 is false, anything else true */
    ATTN_F16 = 4,  /* IEEE-754 binary16, stored as uint16_t (k, v; q and out of attn_sdpa) */
    ATTN_BF16 = 5, /* bfloat16: the top half of an f32, as uint16_t (the same) */
    /* Quantized formats (see "Quantized storage" below; added in 0.4.0). Not element types:
     * a row of them is a run of bytes that attn_quant_row_size measures, so
     * attn_dtype_size gives 0 for them; tensors of them count strides in
     * bytes (see attn_tensor). */
    ATTN_Q8 = 6,   /* int8 with an f16 scale per block of 32 (ggml's q8_0 layout) */
    ATTN_Q4 = 7,   /* 4-bit with an f16 scale per block of 32 (ggml's q4_0 layout) */
    ATTN_E4M3 = 8, /* fp8 E4M3 (OCP "FN": no infinities), one byte a value, no scale */
    ATTN_E5M2 = 9, /* fp8 E5M2 (OCP), one byte a value, no scale */
    ATTN_Q4_1 = 10, /* 4-bit with an f16 scale and an f16 minimum per block of 32
                     * (ggml's q4_1 layout; added in 0.4.0) */
    /* Key formats of the caches only (their key_dtype; see "Keys quantized
     * per channel"): a group of 32 positions of one head, 4 or 2 bits a
     * value with an f16 scale and minimum per channel (KIVI's keys). Not
     * a tensor's dtype: attn_tensor_init refuses them. Added in 0.4.0. */
    ATTN_Q4C = 11, /* 4-bit per channel over groups of 32 positions */
    ATTN_Q2C = 12  /* 2-bit per channel over groups of 32 positions */
} attn_dtype;

/* Size in bytes of one element of `dtype`, or 0 for an unknown dtype and for
 * the quantized formats (attn_quant_row_size measures their rows). */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);
/* Short name of `dtype`: "f32", "f64", "bool", "f16", "bf16", "q8", "q4",
 * "e4m3", "e5m2", "q4_1", "q4c", "q2c", or "unknown". */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);
/* The dtype whose attn_dtype_name is `name` (the whole string, case
 * included: "f32", "bf16", "q4_1", ...; "unknown" names no dtype) into *dtype, so that a program
 * reads a dtype its user names without a table of its own. Errors:
 * ATTN_ERR_NULL (dtype or name NULL), ATTN_ERR_DTYPE (no dtype has that
 * name; the message lists the names). *dtype is written only on success.
 * Added in 0.4.0. */
ATTN_API attn_status attn_dtype_from_name(attn_dtype *dtype, const char *name, attn_error *err);

/* Format a shape as NumPy prints it, "(2, 3)", "(3,)" or "()", into buf
 * (always terminated when size > 0, cut short if it does not fit; NULL buf
 * writes nothing, NULL shape prints "()", a rank outside 0..ATTN_MAX_RANK
 * prints "(rank N)" and reads no shape). */
ATTN_API void attn_format_shape(char *buf, size_t size, int rank, const int64_t *shape);

/* A view of a strided array that the caller owns. Nothing is copied.
 *
 * Element (i0, ..., i{rank-1}) lives at
 *     (char *)data + attn_dtype_size(dtype) * sum_d i_d * strides[d]
 * Strides are in elements, not bytes, and may be zero or negative for inputs,
 * so one buffer can be viewed as (B, H, L, E) or, with permuted strides, as
 * (B, L, H, E) memory seen as (B, H, L, E), without copying.
 * Inputs are only read through `data`; it is not const so that one type serves
 * inputs and outputs. Entries of shape/strides at index >= rank are ignored.
 *
 * Quantized k and v (dtype ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2; see
 * "Quantized storage"): the tensor's rows are quantized rows, each carrying
 * its own scales, so no field is added. The shape counts values; the last
 * dimension's stride must be 1 (a row's blocks lie together); every other
 * stride counts BYTES, since a row of E values is attn_quant_row_size bytes
 * and that need not be a whole number of values (q4: E/2 + E/16). Element
 * (i0, ..., j) is value j of the row at (char *)data + sum_d<last i_d ·
 * strides[d]. attn_sdpa, attn_sdpa_varlen, attn_sdpa_reference and
 * attn_scores take them as k and v with f32 q, reading the rows in place;
 * the backward pass and the other calls take float tensors only. */
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
 * not fit). data may be NULL here; calls that read or write it reject that.
 * A quantized dtype takes strides in bytes but the last (see above): NULL
 * strides are C order over rows of attn_quant_row_size bytes; its errors
 * add ATTN_ERR_RANK (rank 0), ATTN_ERR_SHAPE (a row size the format cannot
 * take: q8, q4 and q4_1 need a multiple of 32) and ATTN_ERR_STRIDE (a last stride
 * other than 1). */
ATTN_API attn_status attn_tensor_init(attn_tensor *t, void *data, attn_dtype dtype,
                                      int rank, const int64_t *shape,
                                      const int64_t *strides, attn_error *err);

/* 16-bit floats. f32 to f16/bf16 rounds to nearest, ties to even; values
 * beyond f16's range become ±inf; NaN stays NaN. f16/bf16 to f32 is exact. */
ATTN_API float attn_f16_to_f32(uint16_t h);
ATTN_API uint16_t attn_f32_to_f16(float f);
ATTN_API float attn_bf16_to_f32(uint16_t b);
ATTN_API uint16_t attn_f32_to_bf16(float f);

/* Quantized storage (added in 0.4.0). A row of n values (one key or value vector) in a
 * quantized format is a run of bytes, rows one after another; every
 * multi-byte field is little-endian.
 *
 * ATTN_Q8, n a multiple of 32: n/32 blocks of 34 bytes, block b holding
 * values 32b .. 32b+31:
 *     bytes 0-1    d, the block's scale, IEEE binary16
 *     bytes 2-33   q[0..31], int8 (two's complement)
 *     value i = q[i] · d, exact in f32.
 *   Quantizing: a = max |x_i| over the block; d = a / 127 (an f32
 *   division) rounded to f16, to nearest even, and 65504 (f16's largest)
 *   where that rounds to infinity; q[i] = x_i / d (an f32 division) rounded
 *   to the nearest integer, ties to even, then clamped to -127 .. 127 (the
 *   clamp catches a d that rounded down, and a saturated d). d = 0 gives
 *   every q[i] = 0. -128 is never written (a block from elsewhere holding
 *   it reads as -128 · d).
 *   Why an f16 scale: the block is then ggml's block_q8_0 byte for byte
 *   (llama.cpp's q8_0 KV cache reads as is; ggml rounds ties away from
 *   zero, so quantizing the same floats may differ from ggml's in a code
 *   where x_i / d lies exactly halfway), and it takes 34 bytes per 32
 *   values instead of 36 with an f32 scale. What it costs in accuracy:
 *   q[i] is taken against the rounded d, so each value's error stays
 *   within d/2 in a block whose a is at least 127 · 255 · 2^-25 (about
 *   9.7e-4). Below that d is an f16 subnormal, a multiple of 2^-24, and
 *   a / 127 rounded down to one can leave the largest values past 127 · d,
 *   where the clamp holds them: each value's error is then within d/2 or
 *   127 · 2^-25 (about 3.8e-6), whichever is larger (an f16 cache's within
 *   2^-25), and a block whose a is at most 127 · 2^-25 reads as 0. At the
 *   top, a block whose a passes 127 · 65504 (about 8.3e6) saturates.
 *
 * ATTN_Q4, n a multiple of 32: n/32 blocks of 18 bytes:
 *     bytes 0-1    d, the block's scale, IEEE binary16 (signed)
 *     bytes 2-17   c[0..15]: value i (i < 16) in the low 4 bits of c[i],
 *                  value i+16 in the high 4 bits of c[i]
 *     value = (code - 8) · d, code the 4-bit number 0 .. 15; exact in f32.
 *   Quantizing: m = the x_i of largest |x_i| (the first of equals), sign
 *   kept; d = m / -8 (an f32 division) rounded to f16 to nearest even,
 *   ±65504 where that rounds to infinity; code = x_i / d rounded to the
 *   nearest integer, ties to even, clamped to -8 .. 7, plus 8; d = ±0 (a
 *   block of zeros, or an m whose m / -8 rounds to zero in f16; -0, bytes
 *   00 80, where m is +0 or positive) gives every code 8. So m itself
 *   is -8 · d and the other side reaches 7 · d (ggml's q4_0 rule and
 *   layout; ggml rounds by adding 8.5 and truncating, so ties differ),
 *   where d is an f16 normal: a subnormal d, a multiple of 2^-24, can
 *   round so far from m / -8 that m takes a nearer code (-12.8 · 2^-24
 *   gives d = 2^-23 and reads back as -12 · 2^-24) or clamps to -8.
 *   No minimum is stored (ATTN_Q4_1 stores one); a block is symmetric
 *   about 0.
 *
 * ATTN_Q4_1, n a multiple of 32: n/32 blocks of 20 bytes:
 *     bytes 0-1    d, the block's scale, IEEE binary16 (>= 0)
 *     bytes 2-3    m, the block's minimum, IEEE binary16
 *     bytes 4-19   c[0..15]: value i (i < 16) in the low 4 bits of c[i],
 *                  value i+16 in the high 4 bits of c[i]
 *     value = code · d + m, code the 4-bit number 0 .. 15: code · d is
 *     exact in f32, so the value is one f32 rounding of the sum (the same
 *     with or without a fused multiply-add).
 *   Quantizing: lo and hi = the smallest and largest x_i (the first of
 *   equals: of 0 and -0, the one that comes first, so m's sign bit may be
 *   set; it reads back the same); m = lo rounded to f16 to nearest even
 *   (±65504 where that rounds to infinity);
 *   d = (hi - m) / 15 (f32 subtraction and division) rounded to f16 to
 *   nearest even, 65504 where that rounds to infinity, and 0 (+0, bytes
 *   00 00) where it is negative or zero (m rounded above hi) or rounds to
 *   zero in f16; code = (x_i - m) / d (f32
 *   subtraction and division) rounded to the nearest integer, ties to
 *   even, clamped to 0 .. 15; d = 0 gives every code 0. The 16 levels
 *   span the block's own range, so a block whose values lie on one side
 *   of 0 keeps all of them for that range, where q4 spends half on the
 *   sign. ggml's block_q4_1 byte for byte (ggml takes codes against the
 *   unrounded d and minimum and rounds by adding 0.5 and truncating, so
 *   codes may differ where it rounds; the same bytes read back the same).
 *
 * ATTN_E4M3, any n: n bytes, one a value, no scale. Bit 7 the sign, bits
 *   6-3 the exponent e (bias 7), bits 2-0 the mantissa m: e = 0 is
 *   m · 2^-9 (subnormal), e >= 1 is (1 + m/8) · 2^(e-7), and S.1111.111 is
 *   NaN; there is no infinity. Largest finite 448, smallest 2^-9.
 * ATTN_E5M2, any n: n bytes. Bit 7 the sign, bits 6-2 the exponent (bias
 *   15), bits 1-0 the mantissa, as IEEE binary16's top byte: e = 0 is
 *   m · 2^-16, e = 31 is infinity (m = 0) or NaN. Largest finite 57344.
 *   Quantizing either fp8 format rounds the f32 value to the nearest
 *   representable one, ties to the even code, in one rounding; it
 *   saturates: finite values past the largest and ±infinity become ±the
 *   largest finite (the OCP/PTX "satfinite" conversion vLLM and
 *   FlashAttention-3 use); NaN becomes NaN (0x7f, or 0x7e for E5M2, with
 *   its sign). Dequantizing is exact in f32 (and reads an E5M2 infinity
 *   as infinity).
 * fp8 with one scale per head (added in 0.4.0; FlashAttention-3's
 *   descale_k / descale_v, vLLM's k_scale / v_scale): the bytes are those
 *   of ATTN_E4M3 or ATTN_E5M2, and a scale s > 0 (finite, an f32 or f64
 *   number; one per KV head, per sequence and head for a batch) says code
 *   c stands for the value c · s. Where attn quantizes with one (a cache or
 *   pool given k_scale / v_scale), it stores fp8(x / s): x rounded to f32,
 *   divided by s in f32 (one rounding, to nearest even), and that quotient
 *   quantized as above, so x past 448 · s (57344 · s for E5M2) saturates to
 *   ± the largest code. Gather reads back c · s, the exact value c times
 *   the f32 scale rounded once to f32 (nearest even). Attention does not
 *   widen to c · s: the scale is folded, keys' into the score scale and
 *   values' into the output, so no row is ever rescaled:
 *     score_ij = (q_i · c_j) · (scale · s_k)   scale · s_k formed in f64,
 *                then used as the call's scale is (q times it, in f64,
 *                rounded once to f32), so softcap, ALiBi, masks and sinks
 *                see the same scores as with keys c · s_k;
 *     out_i    = s_v · (attention over the codes of v), one more f32
 *                rounding of each output value (to nearest even); lse and
 *                the weights do not involve s_v.
 *   In exact arithmetic that is attention on the values c · s; in f32 it
 *   differs from attention run on the rows c · s rounded to f32 (what
 *   gather gives) by the rounding of different products only: both are
 *   within the f32 bound of attn_sdpa ("Numerics", the scores those of the
 *   values c · s) of the exact result, and the folded one rounds a value
 *   never (c · s itself is not formed), so it is not bitwise the f32
 *   kernels on gathered rows (tests/test_quant_kv.c checks it within that
 *   bound, and against PyTorch float64).
 *
 * Non-finite input to q8, q4 or q4_1: a NaN or infinity in a block makes
 * its d NaN (0x7e00; q4_1's m too) and every code 0 (q4: 8), so the whole
 * block reads back as NaN: it stays as visible as it was, never a finite
 * number.
 *
 * Inputs are f32, f16 or bf16 (each exactly an f32) or f64, first rounded
 * to f32 (to nearest even); the rules above then apply to the f32 value.
 *
 * How attention reads them. Values, and keys in the prefill (flash)
 * kernel, are widened exactly and computed as f32 rows would be. Keys
 * stored q8 or q4, in the decode kernel (L <= 8 query
 * rows: attn_kv_cache_attend and attn_kv_pages_attend when generating, and
 * any call of that shape), are scored by the integer dot product kernel
 * where the CPU has one (AVX512-VNNI, or AVX2; ATTN_VERBOSE's line then
 * says key_dot=int8_avx512vnni or key_dot=int8_avx2), as ggml scores them:
 * each query row, times the scale, is rounded per block of 32 to int8
 * codes c with its own f32 scale d_q = max |q| / 127 (c = q · (1/d_q),
 * the reciprocal rounded to f32, rounded to nearest even, clamped to
 * ±127: where q / d_q is a tie, c may be the code past it; where 1/d_q
 * overflows to infinity, a q of 0 takes the code 0), and a key's score is the f32 sum over
 * blocks of d_q · d_k · (the exact integer sum of c · code). The query's
 * rounding is the only new error: each score s_j is off by at most
 *     Δ_j = Σ_b (max_b |q| / 127) · (1/2 + 2^-10) · ||k_j,b||_1
 * (b the blocks of 32, ||k_j,b||_1 the sum of |k| over key j's block as
 * stored, q the scaled query) plus f32's rounding, within 2^-18 · Σ|q·k|.
 * With Δ the largest over the keys a row sees, each output value is then
 * within (e^(2Δ) - 1) · max_j |v_j| of attention on the unrounded query
 * and lse within Δ (docs/accuracy.md derives it and gives measured
 * errors, typically far below it). The results are no longer bitwise those
 * of f32 keys holding the same values; contiguous caches, pages, dense
 * tensors and a ragged batch's sequences share the kernel, so each
 * (slice, split of the keys) gives the same bits whichever holds the rows.
 * Values stored q8 or q4 take the same kernel's value path in decode.
 * Where VDPBF16PS runs at the FMA's rate (AVX512-BF16 on AMD's cores;
 * ATTN_VERBOSE's line says value_dot=bf16_avx512bf16), each weight p_j
 * (the softmax numerator) times the block's scale d_j is rounded once to
 * bfloat16 (nearest even, a subnormal product as zero) and multiplied
 * exactly by the codes, two keys (j, j + 1 from the call's first) summed
 * per f32 addition pair. Each value column's sum Σ_j p_j · v_j over the n
 * keys of one kernel call is then off by at most
 *     2^-8 · (1 + 2^-14) · Σ_j |p_j · v_j|  +  (n + 2) · 2^-23 · Σ_j |p_j · v_j|
 *     + (n + 2) · 2^-110
 * (the weights' rounding, f32's accumulation, flushed subnormals), so an
 * output value is within about 2^-8 of the average Σ p|v| / Σ p: a
 * relative 0.4% of the weights, below q8's own rounding of each value
 * (half a step, max |v| / 254 of its block). Otherwise (AVX512-VNNI
 * alone: value_dot=f32_avx512) p_j · d_j is an f32 product and each code
 * one FMA, within f32's bound. The pairs are the same however the rows
 * are stored: a page of an odd number of positions pairs its last key with
 * the next page's first, so a paged cache gives the bits of a contiguous
 * one.
 * With ATTN_QDOT=int8_values in the environment (AVX512-VNNI; the verbose
 * line says value_dot=int8_avx512vnni; not the default: on Zen 4 it was
 * 10% slower than the bf16 pairs for q4 and 10% faster for q8, and it adds
 * more error on flat weights, docs/performance.md and docs/accuracy.md)
 * the values are integer dot products too: per query row, group of 16
 * positions (0-15, 16-31, ... of the sequence, however the rows are paged)
 * and block b of 32 columns, w_j = p_j · d_j (f32), a = max_j |w_j|,
 * σ = a · (1/127) and r = 127 / a in f32 (both 0 when a < 2^-100), w'_j =
 * w_j · r rounded to the nearest integer (ties to even; |w'_j| <= 127), and
 * each column adds σ times the exact integer Σ_j w'_j · c_j (c the code:
 * q8's int8, q4's nibble - 8) by one f32 fused multiply-add per group. A
 * column's sum Σ_j p_j · v_j over a call of n keys is then off by at most
 *     Σ_groups (1 + 2^-14) · (σ_g / 2) · Σ_{j in g} |c_j|
 *     + (n + 2) · 2^-23 · Σ_j |p_j · v_j|  +  n · 2^-93
 * with σ_g = max_{j in g} |p_j · d_j| / 127: each weight is off by at most
 * half a step of its group's largest, so unlike the bf16 pairs the error is
 * not relative to each weight: small weights beside a large one in a group
 * lose most (docs/accuracy.md measures it). A scale not finite makes the
 * group's sums NaN, and decode redoes the slice with the exact kernel, as
 * for any output not finite.
 * The portable C kernels (ATTN_ISA=c), and any process started with the
 * environment variable ATTN_QDOT=widen, widen q8 and q4 keys and values
 * instead: bitwise the f32 kernels on the widened rows. */

/* Keys quantized per channel (ATTN_Q4C, ATTN_Q2C): KIVI's keys. Keys have
 * channels whose magnitude is far above the others' (outlier channels, the
 * same in every position), so a per-token block's scale is set by the
 * outliers and the other channels get few levels; a scale per channel,
 * taken over a group of positions, gives each channel its own range.
 * A group is G = 32 consecutive positions (0-31, 32-63, ... of a sequence)
 * of one head, n = E channels (n even for q4c, a multiple of 4 for q2c),
 * 20n bytes (q4c; 0.625 bytes a value, as q4_1) or 12n bytes (q2c;
 * 0.375), every multi-byte field little-endian:
 *     bytes 0 .. 2n-1      d[c], channel c's scale, IEEE binary16 (>= 0)
 *     bytes 2n .. 4n-1     m[c], channel c's minimum, IEEE binary16
 *     bytes 4n ..          the codes, position t = 0 .. 31 after position
 *                          t - 1, n·b/8 bytes each (b = 4 or 2 bits):
 *                          q4c: code (t, c) in byte 4n + t·n/2 + c/2, the
 *                          low 4 bits for even c, the high 4 for odd c;
 *                          q2c: in byte 4n + t·n/4 + c/4, bits 2·(c%4) and
 *                          2·(c%4)+1
 *     value (t, c) = code · d[c] + m[c], code 0 .. 2^b - 1: code · d[c] is
 *     exact in f32, so the value is one f32 rounding of the sum.
 *   Quantizing channel c over the group's 32 values x_t: ATTN_Q4_1's rule
 *   with 2^b - 1 steps for its 15: lo and hi = the smallest and largest
 *   x_t (the first of equals, t in order, as for q4_1); m = lo rounded to
 *   f16 to nearest even (±65504 where that rounds to infinity); d = (hi -
 *   m) / (2^b - 1) (f32 subtraction and division)
 *   rounded to f16 to nearest even, 65504 where that rounds to infinity,
 *   0 where it is negative or zero; code = (x_t - m) / d (f32) rounded to
 *   the nearest integer, ties to even, clamped to 0 .. 2^b - 1 (so values
 *   past a saturated range clamp to its ends); d = 0 gives every code 0.
 *   A NaN or infinity among a channel's 32 values makes that channel's d
 *   and m NaN (0x7e00) and its codes 0: it reads back as NaN.
 * attn_quantize and attn_dequantize take these formats over tensors whose
 * last two dimensions are (positions, n), positions a multiple of 32: the
 * groups of 32 positions one after another (see attn_quant_group_size).
 *
 * In a cache (desc.key_dtype = ATTN_Q4C or ATTN_Q2C; values stay per
 * token, in desc.dtype) with a residual window of R positions
 * (desc.residual: 0, the default, or a multiple of 32 up to
 * ATTN_KEY_RESIDUAL_MAX; KIVI keeps R = 128), a sequence of n positions
 * holds positions 0 .. full - 1 in groups, where
 *     full = max(0, 32·floor(n / 32) - R)
 * (the groups wholly before n - R, rounded down to a group boundary), and
 * the rest, positions full .. n - 1, the residual rows (the group being
 * filled and the R positions before it: at most R + 31), in f16 (rounded
 * to nearest even; beyond f16's range ±infinity, as an f16 cache keeps
 * them). Each head of each sequence has R + 32 residual rows of E f16
 * values (2E bytes each, C order); position p >= full is row p - full.
 * Append writes each new key into its row; when that fills the R + 32
 * rows (n reaches a multiple of 32 past R), the first 32 rows, the group
 * leaving the window, are quantized into their group from their f16 keys
 * (so a sequence's bytes never depend on how its positions were split
 * into appends) and the other R rows move 32 rows to the front. R = 0 is
 * a window of the group being filled only. Truncating to a length m
 * whose full is below the old one turns the groups between back into
 * residual rows: their dequantized values rounded to f16 (nearest even;
 * a value past ±65504, which a channel's top code can give when its
 * keys reach f16's largest, saturates to ±65504 rather than becoming an
 * infinity that would turn the channel to NaN when its group is
 * quantized again), from which they are quantized again when they leave
 * the window. Attention
 * reads a group a block of rows at a time, dequantized into scratch of
 * the kernel that reads it (the decode kernel's workspace, which holds
 * them already; the flash kernel's, 16 keys by up to 128 channels, 8 KiB
 * a worker, which every f32 call's workspace has; elsewhere a few rows of
 * the reading thread's stack, within ATTN_STACK_BOUND), and the residual
 * rows as f16 rows, in place: the result is
 * bitwise attention over f32 keys holding the dequantized values. The
 * gathers (attn_kv_cache_gather, attn_kv_pages_gather,
 * attn_kv_paged_gather) and a truncation that turns groups back into
 * residual rows (attn_kv_cache_truncate, attn_kv_pages_truncate, and the
 * next write to an attn_mha_cached_batch row whose length was lowered)
 * dequantize a value at a time, or 64 channels at a time (256 bytes of
 * stack; they took 32 KiB before 0.4.0). A cache
 * with these keys needs key_dim <= 8192 and, for a pool, a page size that
 * is a multiple of 32 (a contiguous cache: a capacity that is).
 * Except in the decode kernel (L <= 8 query rows) on the
 * AVX-512 kernels of a CPU with AVX512-VNNI, or the AVX2 kernels (a CPU
 * with AVX-512 but not VNNI takes the AVX-512 kernels and widens), for
 * key_dim a multiple of 32: there the groups are scored where they lie by integer dot products (ATTN_VERBOSE's line
 * says key_dot=int8_groups_avx512vnni, or int8_groups_avx2; both give the
 * same bits). A key is k_c = s_c · n_c + m_c, so
 *     q · k = Σ_c (q_c s_c) n_c + Σ_c q_c m_c;
 * per group and query row (q times the scale), q' = q ∘ s (f32 products)
 * is rounded per block of 32 channels to int8 codes c with d = max |q'| /
 * 127 (c = q' · (1/d) to nearest even, as q8/q4 keys round q, above), each
 * block's Σ c · n is exact, and Σ q m is an f32 sum. The rounding of q' is
 * the only new error: a score off by at most
 *     Δ_j = Σ_b (max_b |q'| / 127) · (1/2 + 2^-10) · Σ_(c in b) n_jc
 * plus f32's rounding, within (E/16 + 8) · 2^-24 · Σ_c |q_c| (s_c n_jc +
 * |m_c|) (the residual's f16 rows: the f32 kernels' bound); each output
 * value is then within (e^(2Δ) - 1) · max_j |v_j| of attention on the
 * dequantized keys and lse within Δ, Δ the largest over the keys a row
 * sees (docs/accuracy.md). Contiguous caches and pools share the kernel
 * and give the same bits, for any number of threads. Other CPUs, key_dim
 * not a multiple of 32, and a process started with ATTN_QDOT=widen take
 * the bitwise path above. */

/* The longest residual window a cache of keys quantized per channel
 * keeps in f16 (desc.residual, a multiple of 32). Added in 0.4.0. */
#define ATTN_KEY_RESIDUAL_MAX 1024

/* Bytes one group of 32 positions of n channels takes in ATTN_Q4C (20n)
 * or ATTN_Q2C (12n), or 0 when format is not one of them, n < 1, n is not
 * even (q4c) or a multiple of 4 (q2c), or the size does not fit. Added in
 * 0.4.0. */
ATTN_API size_t attn_quant_group_size(attn_dtype format, int64_t n);

/* Bytes one row of n values takes in `format` (ATTN_Q8, ATTN_Q4,
 * ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2), or 0 when format is not one of them,
 * n < 1, n is not a multiple of 32 for q8, q4 and q4_1, or the size does
 * not fit. */
ATTN_API size_t attn_quant_row_size(attn_dtype format, int64_t n);

/* How a quantized format is laid out (attn_quant_format's *kind): in rows
 * of attn_quant_row_size bytes, one per position (a cache's or pool's
 * dtype, attn_sdpa's k and v), or in groups of 32 positions of
 * attn_quant_group_size bytes (keys quantized per channel: the key_dtype
 * of caches and pools only). Added in 0.4.0. */
typedef enum attn_quant_kind {
    ATTN_QUANT_NONE = 0,  /* not a quantized format (never written by attn_quant_format) */
    ATTN_QUANT_ROWS = 1,  /* q8, q4, q4_1, e4m3, e5m2 */
    ATTN_QUANT_GROUPS = 2 /* q4c, q2c */
} attn_quant_kind;

/* The library's quantized formats, one per index: 0, 1, ... give q8, q4,
 * q4_1, e4m3, e5m2, q4c, q2c in this version (the order of this section; a
 * later version may add formats), so a program lists every format, a new
 * one included, by asking from 0 until ATTN_ERR_ARGUMENT, and names each
 * with attn_dtype_name. *format: the format's dtype; *kind: its
 * attn_quant_kind; *multiple: the number n must be a multiple of, for a
 * row of n values (ATTN_QUANT_ROWS: key_dim and value_dim) or a group of n
 * channels (ATTN_QUANT_GROUPS: key_dim), as attn_quant_row_size and
 * attn_quant_group_size state it: they take exactly the n >= 1 that are
 * its multiples, short of a size that does not fit. Any of the three may
 * be NULL. Errors: ATTN_ERR_ARGUMENT (index below 0 or past the last
 * format); nothing is written then. Added in 0.4.0. */
ATTN_API attn_status attn_quant_format(attn_dtype *format, attn_quant_kind *kind, int64_t *multiple, int index,
                                       attn_error *err);

/* Quantize src into dst, rows of attn_quant_row_size(format, n) bytes one
 * after another, where n is src's last dimension and the rows are src's
 * other indices in C order (src any rank from 1, any strides, f32, f64,
 * f16 or bf16). dst_size must be at least the rows' total. ATTN_Q4C and
 * ATTN_Q2C: src of rank 2 or more, its last two dimensions (positions, n),
 * positions a multiple of 32; groups of attn_quant_group_size(format, n)
 * bytes one after another, the groups of each matrix in position order and
 * the matrices in C order of the other indices. Errors:
 * ATTN_ERR_NULL, ATTN_ERR_RANK (rank 0), ATTN_ERR_DTYPE (format not
 * quantized, src not a float dtype), ATTN_ERR_SHAPE (n not accepted by the
 * format), ATTN_ERR_ARGUMENT (dst_size too small), ATTN_ERR_OVERFLOW,
 * ATTN_ERR_STRIDE (dst overlaps src; attn_dequantize's dst with a stride 0
 * in a dimension of size > 1). Nothing is written on failure. */
ATTN_API attn_status attn_quantize(void *dst, size_t dst_size, attn_dtype format, const attn_tensor *src,
                                   attn_error *err);

/* The inverse: the rows in src (src_size bytes, at least the rows' total)
 * read back into dst (any rank from 1, any strides, f32, f64, f16 or bf16;
 * the exact f32 values, rounded to nearest even for f16 and bf16). Errors
 * as attn_quantize's. */
ATTN_API attn_status attn_dequantize(attn_tensor *dst, const void *src, size_t src_size, attn_dtype format,
                                     attn_error *err);

/* The Walsh–Hadamard rotation (added in 0.4.0): each row of x (its last
 * dimension, n values, n a power of two) replaced in place by H_n x /
 * sqrt(n), H_n Sylvester's Hadamard matrix (H_1 = [1], H_2n = [[H_n, H_n],
 * [H_n, -H_n]], scipy.linalg.hadamard's order), by the fast transform in
 * O(n log n). H_n / sqrt(n) is orthonormal and symmetric, so a second call
 * turns the rows back, and turning q and k alike leaves q·k unchanged: the
 * rotation the caches apply with `hadamard` set (attn_kv_cache_desc). x is
 * f32 or f64, any strides (no stride 0 in a dimension of size > 1); f32
 * rows are computed in f64 and rounded once (nearest even). Errors:
 * ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_DTYPE, ATTN_ERR_SHAPE (n not a
 * power of two), ATTN_ERR_STRIDE, ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY (a
 * row's f64 scratch, n doubles, is malloc'd). */
ATTN_API attn_status attn_hadamard(attn_tensor *x, attn_error *err);

/* Copy src into dst element by element, converting between the float
 * dtypes (f64, f32, f16, bf16) as above (f64 into f16 or bf16 rounded
 * once, to nearest even); both any strides, same shape.
 * dst may be src itself (the same view); otherwise they must not overlap,
 * and dst, an output, may not overlap itself (see Conventions).
 * Errors: ATTN_ERR_NULL, ATTN_ERR_SHAPE, ATTN_ERR_DTYPE (bool or unknown),
 * ATTN_ERR_OVERFLOW, ATTN_ERR_STRIDE. */
ATTN_API attn_status attn_tensor_convert(attn_tensor *dst, const attn_tensor *src, attn_error *err);

/* Number of elements (product of the shape; 1 for rank 0). Returns -1 when
 * the product overflows int64 or a dimension is negative. */
ATTN_API int64_t attn_tensor_numel(const attn_tensor *t);

/* ATTN_OK when tensors a and b share no byte of memory, else ATTN_ERR_STRIDE
 * with a message naming them (a_name, b_name; NULL for generic names). NULL
 * tensors, empty ones and ones that are no valid view share nothing. Views
 * that interleave without touching (dq, dk and dv as slices of one packed
 * buffer) are disjoint: the test is exact, and calls a layout too involved
 * to decide in a bounded number of steps overlapping. It is the check every
 * function here makes of each output against the other outputs and the
 * inputs (see "An output owns its memory" at the top), for code built on this API
 * (libattn-mpi makes it too). Added in 0.4.0. */
ATTN_API attn_status attn_check_disjoint(const attn_tensor *a, const char *a_name, const attn_tensor *b,
                                         const char *b_name, attn_error *err);

/* ------------------------------------------------------------------------ */
/* Versioned structs                                                        */
/* ------------------------------------------------------------------------ */

/* The structs of options and settings (attn_context, attn_sdpa_options,
 * attn_rope_options, attn_mha_params, attn_mha_options, attn_kv_cache_desc,
 * attn_kv_pages_desc, attn_kv_paged_view, attn_tuning, attn_npy_info;
 * attn_teach.h's and attn_mpi.h's) begin with
 *
 *     size_t struct_size;   sizeof the struct as the CALLER was compiled
 *
 * A call reads (attn_get_tuning, attn_kv_pages_view, attn_npy_header:
 * writes) only that
 * many bytes of the struct, so the fields a program's header lacks keep
 * their defaults: a program built
 * against an older attn.h runs with a newer library unchanged. A
 * struct_size below sizeof(size_t) (0: a struct zeroed by hand), larger
 * than the library's own (a header newer than the library), or not a
 * multiple of _Alignof(size_t) (no compiler's sizeof for a struct that
 * begins with a size_t: it would end inside a field) is ATTN_ERR_OPTION.
 *
 * Start a struct X from its defaults in either of two ways (attn_tuning
 * and attn_npy_info, which the library fills, have none: set struct_size
 * to sizeof the struct before attn_get_tuning or attn_npy_header):
 *
 *     X o = X_default();
 *     X o;  X_init(&o, sizeof o);
 *
 * X_init is the exported function, for bindings too (ctypes): it fills the
 * first struct_size bytes with the library's defaults, zeroes any bytes
 * past the library's own struct (then every call refuses it), sets
 * struct_size, and returns sizeof(X) as the library was built: a caller
 * comparing it with its own sizeof learns whether header and library
 * agree. NULL, or a struct_size below sizeof(size_t), writes nothing and
 * only answers the size: X_init cannot fail, so it returns a size, not an
 * attn_status.
 * X_default() is a macro for an inline function of this header that calls
 * X_init with sizeof(X) as the caller's compiler sees it, so the size
 * always comes from the caller's compile, never from the library's.
 *
 * Why a macro: in release 0.2, X_default() was a function compiled into
 * the library, which set struct_size to the library's sizeof; a program
 * built against an older, smaller header received a struct_size larger
 * than its own variable, and every call then read past the variable. The
 * library still exports 0.2's three functions of that kind,
 * attn_context_default, attn_sdpa_options_default and
 * attn_train_options_default, for binaries built against 0.2: they return
 * exactly 0.2's structs, at 0.2's sizes (src/abi/abi_0_2.c). A program
 * compiled against this header never calls them: the macros of the same
 * names stand in front of them. */

/* For libraries built on libattn (libattn-mpi) that version their own
 * structs the same way, and the code behind every X_init and every call:
 *
 * attn_versioned_read copies the caller's struct `theirs` (NULL: nothing to
 * read, ATTN_OK) over `ours`, `size` bytes already holding the defaults:
 * only its first struct_size bytes, so the fields an older header lacks
 * keep their defaults; ours' struct_size is then `size`. Errors:
 * ATTN_ERR_NULL (ours NULL with theirs given), ATTN_ERR_OPTION for a
 * struct_size below sizeof(size_t) (the message is "NAME->struct_size is N:
 * HINT", e.g. NAME "options" and HINT "start from
 * attn_sdpa_options_default()"; NULL NAME reads "struct", a NULL or empty
 * HINT is left out), larger than `size` (a newer header) or not a multiple
 * of _Alignof(size_t).
 *
 * attn_versioned_init is X_init: the first struct_size bytes of `theirs`
 * from `defaults` (`size` bytes, X as the library has it), zeros past
 * `size`, struct_size set; nothing written for NULL theirs or defaults or
 * a struct_size below sizeof(size_t). Returns `size`. */
ATTN_API attn_status attn_versioned_read(void *ours, size_t size, const void *theirs, const char *name,
                                         const char *hint, attn_error *err);
ATTN_API size_t attn_versioned_init(void *theirs, size_t struct_size, const void *defaults, size_t size);

#define ATTN_VERSIONED_DEFAULT_(type)                                            \
    static inline type type##_default_inline(void) {                             \
        type x;                                                                  \
        type##_init(&x, sizeof x);                                               \
        return x;                                                                \
    }

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
 *                      bfloat16 and multiplied in pairs with f32 accumulation:
 *                      on AMX tiles (TDPBF16PS, 16-row tiles) where the CPU
 *                      has AMX-BF16 and Linux grants the tile state, else
 *                      with AVX512_BF16's VDPBF16PS where the core issues it
 *                      at its FMA's rate (AMD's Zen 4 and Zen 5: about twice
 *                      f32's speed), within the bound stated with
 *                      attn_sdpa's numerics (a few 1e-3 of max|v| on
 *                      typical data). Its softmax's 2^x is a degree-3
 *                      polynomial, within 1.02e-4 relative (the weights are
 *                      rounded to bf16, 2^-8, for P·V anyway): each row's
 *                      sum of weights, so out, within 1.02e-4 relative more,
 *                      lse within 1.02e-4 more. Elsewhere it is never slower than
 *                      f32: a CPU without those instructions, or whose
 *                      VDPBF16PS is half rate (Intel's without AMX), computes
 *                      in f32 instead (faster there, and more exact); the
 *                      portable C kernels (ATTN_ISA=c) run an exact emulation
 *                      of the instruction. ATTN_VERBOSE names the kernels
 *                      that ran (bf16_kernels=amx_bf16, avx512_bf16, emulated
 *                      or f32, with why a better one was passed over:
 *                      f32(vdpbf16ps_half_rate_here),
 *                      avx512_bf16(amx_refused_by_linux)). The tiles and
 *                      VDPBF16PS sum in different orders: results differ in
 *                      the last bits, within the same bound. An f32 or 16-bit
 *                      q (a 16-bit q runs on its f32 copy), not f64; not
 *                      with weights. attn_sdpa_backward computes its
 *                      products the same way (see there). The
 *                      decode path (L <= 8) is memory-bound and
 *                      computes in f32 either way. */
typedef enum attn_compute { ATTN_COMPUTE_F32 = 0, ATTN_COMPUTE_BF16 = 1 } attn_compute;

/* Per-call resources, in the style of BLIS's rntm_t: what a call may use,
 * as opposed to what it computes. Start from attn_context_default() and
 * point attn_sdpa_options.context at it; a NULL context means the
 * process-wide defaults. */
typedef struct attn_context {
    /* sizeof(attn_context) as the caller was compiled (see "Versioned
     * structs"), set by attn_context_default(). */
    size_t struct_size;
    /* Threads for this call, the caller's included: 1 to 256, or 0 for the
     * process-wide number (attn_get_num_threads). Results are bitwise the
     * same for any number. */
    int num_threads;
    /* Scratch memory for the call, owned by the caller (added in 0.2.0):
     * when workspace is not NULL, every buffer the call needs comes out of
     * these workspace_size bytes (any alignment) and the library calls no
     * allocator (but for attn_mha_backward, attn_mha_paged and
     * attn_mha_cached_batch, whose layer buffers come from malloc: only
     * their attention takes the workspace, see attn_mha_options.context),
     * so a call can never fail for want of memory (the pool's
     * workers excepted: the first call that runs on more threads than the
     * pool has started starts them, their stacks allocated by the system,
     * and registers attn_shutdown's handlers; a call made ahead on as many
     * threads, or attn_sdpa_plan_init, starts them before the calls that
     * must not allocate; a call whose workers cannot start runs on fewer
     * threads, never fails).
     * attn_sdpa_workspace_size says how many bytes a call needs; a smaller
     * workspace fails with ATTN_ERR_WORKSPACE before anything is written.
     * NULL (the default): the library allocates what it needs and frees it
     * before returning. One workspace must not serve two calls at once
     * (which no call can see). Nor may it share a byte with any memory the
     * call reads or writes (inputs, outputs, masks, offsets, the options'
     * tensors, a layer's parameters, a KV cache's or a view's memory, a
     * plan's): the call writes its scratch there, so one that does fails
     * with ATTN_ERR_STRIDE, "the workspace and <name> overlap in memory",
     * before anything is written. As for two tensors, the test is exact: a
     * workspace in the gaps of a strided view, or right next to a tensor,
     * is fine. (Checked since 0.4.0; before, it was the caller's to keep
     * apart.) */
    void *workspace;
    size_t workspace_size;
} attn_context;

/* The defaults: the process-wide thread count, no workspace. As a value,
 * attn_context_default(); in place, attn_context_init(&c, sizeof c), which
 * returns the library's sizeof(attn_context) (see "Versioned structs"). */
ATTN_API size_t attn_context_init(attn_context *context, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_context)
#define attn_context_default attn_context_default_inline

/* Options of attn_sdpa. Start from attn_sdpa_options_default() and set what
 * you need; a NULL options pointer means all defaults. */
typedef struct attn_sdpa_options {
    /* sizeof(attn_sdpa_options) as the caller was compiled, set by
     * attn_sdpa_options_default(). The library reads only the fields that
     * fit in it, so a program built against an older, smaller struct keeps
     * working when fields are added. Sizes below sizeof(size_t) (0: a
     * struct zeroed by hand) and larger than this library knows are
     * rejected with ATTN_ERR_OPTION.
     * See "Versioned structs". */
    size_t struct_size;
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
     *   dtype equal to q's: added to the scaled scores; -inf masks a key.
     * Any other dtype is ATTN_ERR_MASK. There are no integer masks: a 0/1
     * mask is bool (as in PyTorch, which refuses integer masks; the Python
     * binding and the command refuse them too rather than read 0 and 1 as
     * a float bias). */
    const attn_tensor *mask;
    /* The arithmetic of f32 attention; see attn_compute. attn_sdpa_reference
     * ignores it (it is exact). */
    attn_compute compute;
    /* Per-call resources (threads), NULL for the process-wide defaults. */
    const attn_context *context;
    /* Dropout on the attention weights (added in 0.2.0), PyTorch's
     * semantics: each weight is kept with probability 1 - dropout_p and then
     * scaled by 1 / (1 - dropout_p), or set to 0; the output is the dropped
     * weights times v, and the weights output holds them. 0 (the default)
     * is no dropout, bitwise; it must be in [0, 1]: 1 drops every weight,
     * so out and the weights output are zeros and every gradient
     * attn_sdpa_backward gives is 0, as PyTorch's dropout(p = 1) gives
     * them (lse is still the undropped one). Which weights are kept
     * comes from Philox-4x32-10 keyed by dropout_seed, with (slice, row,
     * column) as the counter, where the slice numbers the output's (batch,
     * head) pairs in C order and the row is q's own: the same mask for the
     * same seed and shapes, whatever the kernel, tile size or thread count,
     * and regenerated by attn_sdpa_backward. A weight is dropped when its
     * 32-bit Philox word is below p·2^32 rounded down, so p counts to a
     * resolution of 2^-32: a p below 2^-32 (but > 0) drops nothing, and the
     * kept weights are still scaled by 1 / (1 - p). attn_sdpa_dropout_mask writes
     * it out. Rows are counted in the call, not by position: a KV cache's L
     * new queries are rows 0 .. L-1 at every step, so one seed drops the
     * same keys for each step's first query; give each step its own seed
     * for a fresh mask. The lse is that of the weights before dropout. */
    double dropout_p;
    uint64_t dropout_seed;
    /* Score variants (added in 0.3.0). Each score q·k·scale goes through
     * them in this order, then through the mask and the causal limit; every
     * kernel, forward and backward, applies them in one place.
     *   softcap > 0: s = softcap · tanh(s / softcap), Gemma 2's logit
     *     soft-capping; 0 (the default): none. It must be finite, >= 0.
     *   alibi_slopes: NULL (the default), or a 1-D tensor of Hq slopes (f64
     *     or f32, finite), one per query head: s -= slope_h · |j - i - off|,
     *     where off is the causal alignment's offset (0 for top-left, S - L
     *     for bottom-right and without a causal mask), so under a causal
     *     mask the bias is -slope · (distance back from the diagonal), as in
     *     the ALiBi paper. attn_alibi_slopes gives the paper's slopes.
     *   window > 0: a sliding window (Mistral's): query i sees key j only
     *     when i + off - window < j, on top of the causal limit j <= i +
     *     off; it needs a causal mode. 0 (the default): none.
     *   sinks: NULL (the default), or a 1-D tensor of Hq finite logits (f64
     *     or f32), one per query head: an attention sink, a logit that joins
     *     every row's softmax denominator but has no value (gpt-oss, ggml's
     *     flash_attn_ext_add_sinks): out = sum_j e^s_j v_j / (sum_j e^s_j +
     *     e^sink). lse includes it; the weights do not (they sum to less than
     *     1); a row with no key gives 0. attn_sdpa_sinks_backward gives its
     *     gradient. Merging partial results (attn_sdpa_merge) counts a sink
     *     once per part: give it to one part only. */
    double softcap;
    const attn_tensor *alibi_slopes;
    int64_t window;
    const attn_tensor *sinks;
    /* Rotary position embeddings (added in 0.3.0): NULL (the default) for
     * none, else q and k are turned by RoPE (see attn_rope) as the kernels
     * pack them, so no rotated copy of q or k is ever made. Key j is at
     * position position_offset + j; query i at position_offset + i + off,
     * where off is the causal alignment's offset (0 for top-left, S - L for
     * bottom-right and without a causal mask), ALiBi's convention: with a
     * KV cache of S positions the L new queries are the last ones. Every
     * kernel applies it, forward and backward (attn_sdpa_backward's dq and
     * dk are the gradients of the unrotated q and k); a few queries against
     * many keys take the tiled kernel rather than the decode kernel, which
     * reads keys where they lie. */
    const struct attn_rope_options *rope;
    /* Attention in pieces (added in 0.3.0): where this call's queries and
     * keys sit in a longer sequence, so that pieces computed apart (over
     * blocks of keys, or on several machines: attn_mpi.h) give the whole's
     * result. Query row i is position query_start + i of total_queries,
     * key j is position key_start + j of total_keys; a total of 0 (the
     * default) means this call's own L (or S), with its start 0. The causal
     * limit, ALiBi's distances, the window and RoPE's positions are then
     * the whole sequence's, and:
     *   - the pieces' (out, lse) over disjoint keys merge (attn_sdpa_merge)
     *     into the whole's; a mask holds the piece's own rows and columns;
     *     give sinks to one piece of each row only;
     *   - attn_sdpa_backward of a piece whose total_keys is set, given the
     *     WHOLE row's out and lse (not the piece's), returns the piece's
     *     share: the gradients of its own keys and values, and a dq to be
     *     summed over the pieces (every kernel then takes the softmax from
     *     that lse instead of renormalising over the piece's keys).
     * Dropout is not taken with pieces (ATTN_ERR_OPTION). */
    int64_t query_start, key_start, total_queries, total_keys;
    /* Per-head scales of fp8 keys and values (added in 0.4.0), as
     * FlashAttention-3's descale_k / descale_v and vLLM's k_scale / v_scale
     * take them: NULL (the default) for none, else an f32 or f64 tensor of
     * finite values > 0 (ATTN_ERR_SCALE otherwise) whose shape broadcasts,
     * aligned on the right, to k's (..., Hk) (its dimensions but the last
     * two, each equal or 1): (Hk,) one per KV head, or (B, Hk) as
     * FlashAttention-3's (batch, num_heads_k). attn_sdpa_varlen takes
     * (batch, Hk) or (Hk,), row b for sequence b. k_descale needs k e4m3
     * or e5m2, v_descale v e4m3 or e5m2 (ATTN_ERR_DTYPE otherwise): stored
     * code c of head h then stands for the value c · descale[h]. How it is
     * applied, and its rounding: "Quantized storage", fp8 with one scale per
     * head. Read at each call (and at each run of a plan: the tensors must
     * stay valid, as mask's). The caches keep their own (attn_kv_cache_desc
     * and attn_kv_pages_desc: k_scale, v_scale): attending to one that has
     * them with these set is ATTN_ERR_OPTION. */
    const attn_tensor *k_descale;
    const attn_tensor *v_descale;
} attn_sdpa_options;

/* The defaults: scale 1/sqrt(E), no causal mask, no mask, f32 arithmetic,
 * no dropout, no score variants, the whole sequence in one piece. As a
 * value, attn_sdpa_options_default(); in place,
 * attn_sdpa_options_init(&o, sizeof o), which returns the library's
 * sizeof(attn_sdpa_options) (see "Versioned structs"). */
ATTN_API size_t attn_sdpa_options_init(attn_sdpa_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_sdpa_options)
#define attn_sdpa_options_default attn_sdpa_options_default_inline

/* The gradient of attention sinks (attn_sdpa_options.sinks): dsinks (Hq,)
 * = -sum over batches and rows of e^(sink_h - lse) · rowsum(dout ∘ out),
 * from the forward's out and lse (..., Hq, L, Ev) and (..., Hq, L) and
 * dLoss/dout, all of one dtype (f32 or f64); dsinks in that dtype,
 * computed in f64 with the rows in order (the same sums on every run) and
 * rounded once.
 * Numerics: from the out and lse of attn_sdpa's f32 arithmetic (not the
 * bf16 compute mode), each dsinks_h is within
 *   ((1 + c)·e^(x + t) - 1 + 2^-24)·dsinks_abs_h + FLT_MIN,
 *   x = (3E + 20)·2^-24·s_abs,  c = 2e-5 + 2·S·2^-24,
 *   t = 2e-5 + S·2^-24 + 2^-24·log(S + 1),
 * of the exact gradient (about (4.3e-5 + 3·S·2^-24 + x)·dsinks_abs_h where
 * x and S·2^-24 are small; the S terms are the f32 sums' one-way rounding,
 * as in attn_sdpa's bound, and random data shows none of them), E
 * the forward's q·k length and s_abs as in attn_sdpa_backward's bound (the
 * largest scale·Σ_e |q_e||k_e| + |b| of a row and key) with |sink_h| one
 * more score of the head's rows, and
 * dsinks_abs_h = Σ over the head's rows of e^(sink_h - lse)·rowsum(|dout| ∘
 * P|v|), P|v| the exact attention on |v|: dsinks_h with every term's
 * absolute value, D counted as attn_sdpa_backward's g_abs counts it. Its
 * own f64 sums add nearly nothing; the error is out's and lse's, and one
 * rounding (2^-24; FLT_MIN where a result below it is written as 0):
 * attn_sdpa's scores move each weight by a factor within e^(±d), d = (E +
 * 6)·2^-24·s_abs, so out moves by up to (c + e^(2d) - 1)·P|v| (c its
 * sums', as in attn_sdpa's bound) and D = rowsum(dout ∘ out) by that times
 * |dout|: relative to |dout| P|v|, not to |dout||out| (large values of
 * mixed signs that cancel to an out near 0 gave dsinks errors 2 to 370
 * times a bound with |out| there); the sink's weight e^(sink_h - lse) moves
 * by a factor within e^(±y), y = (E + 8)·2^-24·s_abs + t, for lse's scores
 * (d), its sum (2e-5 + S·2^-24), its rounding to f32 (2^-24·|lse|, |lse|
 * <= s_abs + log(S + 1)) and the forward's rounding of an f64 sink to f32
 * (2^-24·|sink_h|). Together e^y·(c + e^(2d)) - 1 + 2^-24 <= (1 + c)·e^(x
 * + t) - 1 + 2^-24. The errors are random: on the tests' random data
 * they stay below 2% of the bound without its S terms; where out's sums
 * round one way (a first value of 1, every later one under half an ulp
 * of it) they pass that, 11 times at S = 8192, and stay within the bound
 * (tests/oracle_backward.py). With f64 out and lse (the exact kernel)
 * dsinks is within 1e-12·dsinks_abs_h where the scores' products do not
 * cancel. Errors:
 * ATTN_ERR_NULL (options->sinks included), ATTN_ERR_RANK, ATTN_ERR_SHAPE,
 * ATTN_ERR_DTYPE, ATTN_ERR_OPTION (options' struct_size, or a sink that
 * is not finite), ATTN_ERR_OVERFLOW (a tensor's extent), ATTN_ERR_STRIDE
 * (dsinks overlapping dout, out, lse or a tensor of the options, as
 * attn_sdpa's outputs may not, or with stride 0). It allocates nothing. */
ATTN_API attn_status attn_sdpa_sinks_backward(attn_tensor *dsinks, const attn_tensor *dout, const attn_tensor *out,
                                              const attn_tensor *lse, const attn_sdpa_options *options,
                                              attn_error *err);

/* The ALiBi paper's slopes for `heads` heads into slopes[0..heads-1]: for n
 * a power of two, slope_h = 2^(-8 (h + 1) / n); otherwise the slopes of the
 * largest power of two n below heads, followed by every other slope of 2n
 * (2^(-4 (2h + 1) / n), h = 0, 1, ...) up to `heads`. Errors: ATTN_ERR_NULL,
 * ATTN_ERR_SHAPE (heads < 1). */
ATTN_API attn_status attn_alibi_slopes(double *slopes, int64_t heads, attn_error *err);

/* Scaled dot-product attention, PyTorch semantics.
 *
 *   s   = q · kᵀ · scale + mask        (the scores; -inf where excluded)
 *   out = softmax(s) · v
 *   lse = log(sum over keys of exp(s)) (optional: the softmax statistics)
 *   weights = softmax(s)               (optional)
 *
 * Shapes (the last two dimensions are matrices; the one before them, if any,
 * counts heads; the rest are batch dimensions):
 *   q    (..., Hq, L, E)
 *   k    (..., Hk, S, E)
 *   v    (..., Hk, S, Ev)      Ev may differ from E
 *   out  (..., Hq, L, Ev)      written, never read
 *   lse  (..., Hq, L)          NULL for none: out's shape without its last
 *                              dimension; -inf for a row where no key
 *                              takes part. What a backward pass needs, and
 *                              what attn_sdpa_merge merges partial results by.
 *   weights (..., Hq, L, S)    NULL for none: same rank as out. The only
 *                              L×S-sized memory involved, and it is the
 *                              caller's.
 * q, k, v and out (lse, weights) share one dtype, f32 or f64, except that with f32 queries
 * k and v may each be stored as f16 or bf16 (half the memory; they are
 * widened to f32 as they are read, the arithmetic stays f32), or quantized
 * (q8, q4, q4_1, e4m3, e5m2: see "Quantized storage" and attn_tensor), widened a
 * row at a time inside the kernels: the result is bitwise the result on
 * the widened f32 values.
 * 16-bit queries (added in 0.4.0; attn_sdpa, attn_sdpa_reference and
 * attn_sdpa_workspace_size, so attn_kv_cache_attend too): q f16 or bf16
 * gives out in q's dtype, with k and v f32, f16 or bf16 (any mix), lse f32
 * or NULL, no weights (ATTN_ERR_DTYPE), a float mask f32. The call is the
 * f32 call on q widened (exactly): f32 sums and softmax, f32 accumulation,
 * and its f32 output rounded once, to nearest even, into out. So each
 * output element is within u16·|exact| + (1 + u16)·(the f32 call's bound
 * below) of attention computed exactly on the same 16-bit inputs, u16 the
 * type's unit roundoff, 2^-8 for bf16 and 2^-11 for f16 (checked against
 * PyTorch float64 on every kernel, tests/oracle_half.py). The f32 copies of
 * q and out, O(L·(E + Ev)) per call, come from the workspace or malloc.
 * attn_sdpa_backward takes such a q too, and gives 16-bit gradients.
 * Rank-2 inputs (L, E) are one head. Ranks may differ between q, k and v:
 * shapes are aligned on the right. Batch dimensions broadcast (each equal or
 * 1, the output takes the larger). Every dimension must be >= 1, but:
 *
 * Dimensions of 0 (added in 0.4.0), as PyTorch takes them: L = 0 (no
 * query), S = 0 (no key), or a batch dimension of 0 in q, k or v (the
 * others 0 or 1 there). attn_sdpa, attn_sdpa_reference, their workspace
 * size, attn_sdpa_backward and its workspace size take them, and so
 * everything built on them (attn_kv_cache_attend with no query or an
 * empty cache, a paged sequence of no position attended, attn_mha and
 * attn_mha_backward with no sequence, query or key, the layer's cached and
 * paged steps with no new token; plans of them;
 * the ragged batch takes sequences of no query or no key, and a batch of
 * none, in its offsets). Such a call is checked as the same call with each
 * 0 read as 1 (dtypes, ranks, options, broadcasting, overlaps), so a call
 * that fails at size 1 fails at size 0; then it runs no kernel (its
 * ATTN_VERBOSE line says kernel=empty), needs 0 bytes of workspace, and
 * writes only what PyTorch's result has elements for:
 *   - L = 0 or a batch of 0: out, lse and the weights have no element, and
 *     nothing is written;
 *   - S = 0 with queries: out is 0 and lse that of a row no key takes part
 *     in, -inf (or with sinks the head's sink), as PyTorch's softmax over no
 *     key and its product with no row of v give; the weights (..., L, 0)
 *     have no element;
 *   - the backward: every gradient that has an element is 0 (the forward's
 *     out is 0 or empty whatever the inputs hold), e.g. dk and dv for L = 0,
 *     dq for S = 0, a broadcast k's for a batch of 0, a mask's broadcast
 *     over L for L = 0; those without an element are untouched.
 * The outputs (out, lse, weights; the backward's out, dout and lse too)
 * have their 0s exactly where the result has them; a mask and the weights
 * may have S = 0 where k does, a mask 0 or 1 where q, k or v has a 0, and
 * each gradient has its tensor's shape, 0s included. A tensor with no
 * element is neither read nor written: any strides, NULL data too. A 0
 * anywhere else is ATTN_ERR_SHAPE, and the message says where a 0 may
 * stand: E or Ev, the heads, k with S = 0 and v with keys, an output with
 * an element where the result has none (or none where it has some).
 *
 * Heads: Hq must be a multiple of Hk (GQA/MQA); query head h uses key/value
 * head h / (Hq / Hk), like torch's repeat_interleave. k and v must have the
 * same number of heads.
 *
 * Numerics:
 *   - The softmax subtracts the row maximum, so finite inputs of any size
 *     (scores of +-1e30, f64 values v up to DBL_MAX, without dropout:
 *     dropout's 1/(1-p) can carry out past DBL_MAX) never produce NaN or
 *     Inf in out, but for f64 dot products that overflow.
 *   - A +inf score (a +inf mask value, an f64 dot product that overflows
 *     one way; both ways give NaN) makes its row NaN, as in PyTorch (every
 *     version): the softmax takes e^(inf - inf). out and the weights of
 *     the row's keys that take part are NaN (a key the mask, the causal
 *     limit or the window excludes, or whose score is -inf from an infinite
 *     q or k, keeps weight 0, where PyTorch's softmax makes it NaN too), and
 *     lse is +inf, as torch.logsumexp gives it; with a NaN score in the row
 *     too, lse is NaN, as there.
 *     (0.3.0 shared the row's weight equally among its +inf
 *     keys, a limit that holds only if they grow alike.)
 *   - A row in which no key may take part (masked by the bool mask, by -inf in
 *     a float mask, or by the causal mask; or every score -inf, from an
 *     infinite q or k) gives output 0 and weights 0, never NaN, like
 *     PyTorch >= 2.5.
 *   - NaN in an input reaches only the output rows whose computation reads
 *     it. A NaN score makes its row's out, lse and the weights of the keys
 *     that take part NaN, as PyTorch's softmax (whose maximum is NaN then)
 *     and torch.logsumexp give them.
 *   - Likewise an infinite value in v reaches only the rows whose keys take
 *     part: a key the bool mask, -inf in a float mask, the causal limit or
 *     the window excludes adds nothing to a row, in every kernel, where
 *     PyTorch's math path multiplies its weight 0 by inf and makes the row
 *     NaN.
 *   - f64 computes in f64 throughout (the exact, oracle-grade path).
 *   - f32 runs on the fast kernels: tiled FlashAttention-2, or split over the
 *     keys for L <= 8 queries at any S (in f32 arithmetic, even in the bf16
 *     compute mode), on attn_get_num_threads() threads, bitwise identical
 *     for any thread count. The kernel and the number of key splits come
 *     from the shape alone (L, S, the heads; ATTN_VERBOSE names the
 *     kernel), never from the thread count; results of different kernels
 *     or splits may differ in the last bits, each within the bound below.
 *     Their error against the exact result is
 *       max|out - exact| <= (2e-5 + 2·S·2^-24) · max|P·|v||
 *                               + 2 · (E + 6) · 2^-24 · s_abs · max|v|
 *     where s_abs is the largest scale · Σ_e |q_e| |k_e| of a row and key
 *     (at least max|s|, s the scores q·k·scale; equal to it where the
 *     products q_e·k_e have one sign) and P·|v| the exact attention on |v| (each row's weighted
 *     mean of |v|; max|exact| when no column of v changes sign): f32 rounds
 *     a score, a sum of E products, by up to E·2^-24 of the sum of their
 *     magnitudes, not of |s| (keys nearly orthogonal to large queries give
 *     small scores with large errors); scaling the queries, subtracting the
 *     row maximum and scaling by log2 e add up to 6·2^-24·s_abs more, and
 *     scores that move by at most d move the output by at most 2·d·max|v|.
 *     The sums' errors are random: on data whose products do not cancel
 *     the output stays within 2e-5 · max|P·|v|| + 4 · 2^-24 · max|s| ·
 *     max|v| (tests/oracle.py); keys nearly orthogonal to queries of size
 *     30 (E = 128, s_abs 8e4, max|s| about 1) gave errors of 3e-4, past that
 *     but far inside the bound. The first
 *     term covers the rounding of the sums: the kernels add P·V and the
 *     row's sum of weights one key at a time in f32, each addition off by
 *     up to 2^-24 of a partial sum of p_j·|v_j| (or of p_j), so the two
 *     sums by up to S·2^-24 of their magnitudes each, 2·S·2^-24 of
 *     max|P·|v|| in out; 2e-5 covers 2^x and the weights' own rounding.
 *     On random data the roundings cancel and the sums stay within 2e-5
 *     (tested up to S = 32768), but they need not: a first value of 1
 *     followed by values of 0.49 ulp(1) under equal weights loses every
 *     later one, S·2^-24 of max|P·|v|| (1e-3 at S = 16384; tests/oracle.py).
 *     Each rounding is relative to a partial sum of p_j·|v_j|, not to the
 *     result: values that cancel (out small beside the |v| it averages)
 *     are off by that much of that mean, not of out.
 *     PyTorch's own float32 rounds its dot products the same way.
 *   - In the bf16 compute mode (ATTN_COMPUTE_BF16) q, k, the weights and v
 *     are each rounded to bf16 once, u = 2^-8 (8 significant bits), so
 *       max|out - exact| <= ((1 + 2u + 2e-5 + 2·S·2^-24) · e^(2y) - 1) · max|v|,
 *       y = 2.2 · u · s_abs + 1.1e-4,
 *     s_abs as above: rounding q and k moves each score by up to 2u·s_abs,
 *     f32's sums 0.2u·s_abs more (E <= 4096), and the mode's 2^x moves each
 *     weight and the row's sum by up to 1.02e-4 relative (1.1e-4 with f32's
 *     rounding), so each normalised weight moves by a factor within
 *     e^(±2y); rounding the weights and v adds 2u of each product, and the
 *     sums 2e-5 + 2·S·2^-24 as in f32 mode (tests/oracle_plans.py). lse is off by up to y more than
 *     in f32 mode.
 *   - Any finite mask value is a finite score, -FLT_MAX included (Hugging
 *     Face pads with torch.finfo(torch.float32).min): scores stay in natural
 *     units, and only their differences from the row maximum are scaled.
 *   - Work whose inputs hold NaN or ±inf (other than -inf in a float mask),
 *     or whose scores could exceed 2^100 in magnitude, or whose sums could
 *     overflow f32, or whose soft cap is below 2^-100, and every call that
 *     asks for weights, is computed by the exact kernel instead (in f64,
 *     rounded once), so the rules above hold in f32 too. Queries are
 *     multiplied by the scale in f64 and rounded once; subnormal f32 inputs
 *     are kept (nothing flushes them to zero).
 *   - No intermediate is ever subnormal, for inputs of ordinary size (each
 *     subnormal costs an Intel core a microcode assist of about 150 cycles):
 *     in f32 a weight below 2^-64 of its row's largest (a score more than 44
 *     below the row maximum) counts as 0, which the bound above covers, in
 *     f64 one below e^-400 of its row's largest (a score more than 400
 *     below the row maximum; e^-400 is about 2^-577), where PyTorch's
 *     float64 keeps weights down to e^-745: such a weight adds at most
 *     e^-400 · |v_j| to out, below out's own rounding unless |v_j| is
 *     2^524 or more times |out| (f64 values near DBL_MAX beside small
 *     ones), and an infinite v_j under it makes out NaN (0 · inf) where
 *     PyTorch's is ±inf (both give NaN under a weight that is 0 in f64,
 *     more than about 745 below, and for a NaN v_j). An f32 result below
 *     FLT_MIN in magnitude is written as 0 by some kernels and kept by
 *     others, whatever the ISA: written as 0 are the weights, lse (by every
 *     kernel), the exact kernel's out, the decode kernel's out and the
 *     gradients the fused backward writes straight into their outputs; kept
 *     are the flash kernel's out and the gradients summed in f64 first
 *     (every gradient of the exact kernel, a broadcast input's, dk and dv
 *     under GQA; tests/test_subnormal.c checks each). So results of two
 *     kernels may differ by up to FLT_MIN there, and every f32 bound in
 *     this header holds within FLT_MIN more, absolute, a term that passes the others only for results near
 *     FLT_MIN / 2e-5, about 6e-34 (values, or dout, of that size). The
 *     caller's floating-point modes (FTZ, DAZ) are never changed.
 *
 * Memory: scratch memory is O((E + Ev) × block × threads) per call,
 * independent of L×S (plus a few floats per slice and per key chunk for the
 * decode path); the kernels stream over the keys in blocks with an online
 * softmax. It comes from the context's workspace when one is given (see
 * attn_context and attn_sdpa_workspace_size), else from malloc.
 *
 * Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE, ATTN_ERR_BROADCAST,
 * ATTN_ERR_HEADS, ATTN_ERR_DTYPE, ATTN_ERR_MASK, ATTN_ERR_SCALE,
 * ATTN_ERR_OPTION, ATTN_ERR_STRIDE, ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY,
 * ATTN_ERR_WORKSPACE. Nothing is written to any output unless every check
 * passed and all scratch memory was had. */
ATTN_API attn_status attn_sdpa(attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                               const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *options, attn_error *err);

/* The dropout mask of attn_sdpa(…, q, k, v, options): keep (bool, shaped
 * like the weights, (..., Hq, L, S), any strides) is true where a weight is
 * kept, as attn_sdpa and attn_sdpa_backward decide it for the options'
 * dropout_p and dropout_seed (all true without dropout). For checking
 * dropout against another implementation: PyTorch's math with this mask
 * gives attn's results. Errors: those of attn_sdpa_shapes, and
 * ATTN_ERR_NULL, ATTN_ERR_DTYPE, ATTN_ERR_SHAPE, ATTN_ERR_STRIDE (keep
 * overlapping q, k, v or a tensor of the options, as attn_sdpa's outputs
 * may not) and ATTN_ERR_OVERFLOW for keep. */
ATTN_API attn_status attn_sdpa_dropout_mask(attn_tensor *keep, const attn_tensor *q, const attn_tensor *k,
                                            const attn_tensor *v, const attn_sdpa_options *options,
                                            attn_error *err);

/* How many bytes of workspace (attn_context.workspace) the call
 * attn_sdpa(out, lse, weights, q, k, v, options) needs, in *bytes; the
 * arguments are checked as attn_sdpa checks them, and nothing is written
 * to any output. The number depends on the shapes, dtypes, options and the
 * context's thread count, not on the data, so one query serves every call
 * of the same shape. (attn_sdpa_reference and attn_scores, the checking
 * functions, draw from a given workspace too; when it is too small, their
 * ATTN_ERR_WORKSPACE message says how much they need.) Errors: those of
 * attn_sdpa but ATTN_ERR_NO_MEMORY and ATTN_ERR_WORKSPACE.
 *
 * Measuring without buffers (since 0.4.0), one rule for every measuring
 * function (attn_sdpa_workspace_size, attn_sdpa_backward_workspace_size,
 * attn_sdpa_varlen_backward_workspace_size, attn_mha_workspace_size,
 * attn_mha_cached_workspace_size): a measuring
 * call reads no element, so any tensor it is given, input, output, mask or
 * parameter, may have NULL data, standing for a buffer of that layout not
 * yet allocated, and *bytes is what the same layouts with data take. Only
 * the tensors whose values are checked must have data: the options'
 * alibi_slopes, sinks, k_descale and v_descale. A call that runs reads or
 * writes every tensor it is given, so NULL data there fails with
 * ATTN_ERR_NULL, "<name> has NULL data", before anything is written.
 * (A plan, attn_sdpa_plan_init and its kind, is made from tensors with
 * data: it checks the buffers' overlaps as the call would.) */
ATTN_API attn_status attn_sdpa_workspace_size(size_t *bytes, attn_tensor *out, attn_tensor *lse,
                                              attn_tensor *weights, const attn_tensor *q,
                                              const attn_tensor *k, const attn_tensor *v,
                                              const attn_sdpa_options *options, attn_error *err);

/* The backward pass of attn_sdpa: given dout = dLoss/dout, the gradients
 * dq = dLoss/dq, dk, dv and, for a float mask, dmask = dLoss/dmask (the
 * gradient of the scores, summed over the mask's broadcast dimensions).
 *
 * Arguments: the gradients first, each optional (NULL: not computed; at
 * least one must be asked for), each shaped exactly like its input (dq like
 * q, dk like k, dv like v, dmask like the options' mask), in q's dtype (f32
 * for f16 or bf16 k and v; a 16-bit q's: see "16-bit queries" below),
 * any strides but no stride 0 in a dimension of
 * size > 1. Then dout, shaped like out; then q, k, v, out and lse exactly as
 * attn_sdpa took and returned them, and the same options (mask, causal mode,
 * scale, context). out and lse must be that call's results: their shapes
 * are checked, and the f32 kernel uses their values.
 *
 * Semantics are the forward's, differentiated:
 *   - a broadcast input's gradient is summed over the broadcast (batch
 *     dimensions of size 1, a mask shared by heads or rows);
 *   - GQA: dk and dv of a KV head sum over its group of query heads;
 *   - a key that the causal limit, a bool mask or -inf in a float mask
 *     excludes has zero gradient everywhere; a row in which no key takes
 *     part has zero gradients, never NaN;
 *   - a score of -inf from an infinite q or k is a key the row does not
 *     read, as if masked: weight 0 and nothing added to any gradient, where
 *     PyTorch's autograd multiplies that 0 by the infinite input and gives
 *     NaN (the row's dq for an infinite key, the key's dk for an infinite
 *     query);
 *   - a row with a +inf score, NaN in the forward, is NaN in the
 *     gradients too, as PyTorch's autograd gives it: its dq row, its dmask
 *     row, and dk and dv of every key it reads (each sums over the rows);
 *   - the scale is the forward's (default 1/sqrt(E)), any finite value.
 *
 * Kernels and numerics:
 *   - f64 (and f32 when dmask is asked for) runs the exact kernel: the
 *     softmax recomputed row by row from q, k and the mask (out and lse are
 *     not used), differentiated line by line in f64, each gradient rounded
 *     once. It agrees with PyTorch float64 autograd to ~1e-13 relative
 *     where the products q_e·k_e do not cancel; both round a score by up to
 *     E·2^-53 of scale·Σ_e |q_e||k_e| (s_abs), which moves each weight by
 *     up to 2·(E + 3)·2^-53·s_abs relative: keys nearly orthogonal to
 *     queries of size 1e3 (E = 128) differ by 1e-12 relative, and f32's
 *     gradients pass their one rounding once that exceeds 2^-24 (s_abs
 *     beyond about 2^28/E). One thread.
 *   - f32 otherwise runs the fused kernel (FlashAttention-2's backward): P
 *     recomputed tile by tile from q, k and the forward's lse, D =
 *     rowsum(dout ∘ out), five products per tile in f32, on the call's
 *     threads, bitwise identical for any thread count. A row whose |lse|
 *     exceeds 256 (a row that a large finite mask value covers entirely,
 *     such as Hugging Face's padding of -FLT_MAX, or large scores) gets its
 *     softmax maximum m and sum l recomputed first, and P = exp((s - m) -
 *     log l): an f32 lse of -FLT_MAX + log(S) has lost log(S), and P = exp(s
 *     - lse) would weigh each key 1 rather than 1/S. (A piece holding only
 *     some of the keys, total_keys, has only the whole row's lse and uses it
 *     as given: such a row's gradients are then those of weights near 1, not
 *     within the bound below; mask a padded row with -inf to give it none.
 *     A piece holding every key, key_start 0 and total_keys S, is the whole
 *     row and is recomputed as without pieces.)
 *     Its error against exact gradients is at most (2e-5 + 2·n·2^-24 +
 *     e^x - 1)·max g_abs, n = max(L, S, Ev) the longest f32 sum (dq sums
 *     over the keys, dk and dv over the queries, dP and D over Ev; each
 *     addition rounds by up to 2^-24 of a partial sum of the terms g_abs
 *     holds, and on random data the roundings cancel to within 2e-5, but
 *     a dout of 1 in the first row and 0.49 ulp(1) in the others loses
 *     every later row of dv, L·2^-24 of it), x = 2·(E + 5)·2^-24·s_abs, where s_abs is the largest
 *     scale·Σ_e |q_e||k_e| + |b| of a row and key, b its finite mask value
 *     or bias (at least max|s|, s the scores; as in attn_sdpa's bound), and
 *     g_abs is the gradient computed with the absolute value of every term
 *     (P ∘ (|dout||v|ᵀ + rowsum(|dout| ∘ P|v|)) in place of dS): f32 rounds
 *     relative to the terms it sums (dP = dout·vᵀ relative to |dout||v|ᵀ,
 *     which g_abs holds; D relative to |dout| times P|v|, as the forward's
 *     out is, not to |out|: large values of mixed signs that cancel to an
 *     out near 0 leave D an error far above |dout||out|, and dq errors 20 to
 *     80 times a bound with |out| there), and each weight P = exp(s - lse)
 *     moves by a factor within e^(±x): the backward's score, the keys times
 *     the scale and then a sum of E products, rounds by up to (E + 1)·2^-24·s_abs
 *     (a sum of E products rounds by E·2^-24 of their magnitudes, not of
 *     |s|: keys nearly orthogonal to large queries give small scores with
 *     large errors), s - lse by 2·2^-24·s_abs more, and the forward's lse
 *     (or the recomputed m and l) carries its own scores' (E + 6)·2^-24·s_abs
 *     and 1 more of its own. The sums' errors are random: on data whose
 *     products do not cancel the gradients stay within x = 8·2^-24·max|s|
 *     (tests/oracle_backward.py); keys nearly orthogonal to large queries
 *     (E = 128 to 512, s_abs 1e4, max|s| about 4) gave errors up to
 *     1.6e-4·max g_abs, past that but far inside the bound. A slice whose
 *     products q·k·scale could exceed 2^18 in magnitude goes to the exact
 *     kernel, so that unless a large mask value or ALiBi bias enters s_abs
 *     (ALiBi's far keys carry weights near 0, where the bound is loose),
 *     s_abs <= 2^18; where s_abs <= 2^20/(E + 5), x <= 1/8 and the bound
 *     is linear: (2e-5 + 2·n·2^-24 + 2.14·(E + 5)·2^-24·s_abs)·max g_abs. So does a
 *     slice whose inputs are not finite, whose gradients could overflow
 *     f32, or whose float mask holds NaN or +inf. A large mask value counts
 *     in s_abs only where its rounding moves weights: not where q·k·scale is
 *     the same for every key of the row it covers, nor where it swallows q·k
 *     in f64 as in f32 (-1e30, -FLT_MAX); elsewhere f32 rounds s as
 *     PyTorch's float32 does.
 *   - Dropout (options.dropout_p > 0): the forward's mask is regenerated from
 *     the same seed, never stored; pass the forward's options unchanged.
 * Memory: the fused kernel writes a gradient that no two slices share
 * straight into its output; a shared one (a broadcast input, dk and dv
 * under GQA), and every gradient of the exact kernel, is summed in an f64
 * accumulator of its size first. The fused kernel adds dq partials (at most
 * 32 MiB; past that only with q broadcast over a batch dimension: one L×E
 * partial per slice) and O(br·(E + Ev) + bc·(E + Ev) + L) per thread, and two
 * doubles per query row of the call when some row's lse exceeds 256; the
 * exact kernel O(S·(E + Ev)) (the fused one takes that too, but only when a
 * slice needs the exact kernel). A workspace must hold all of them, in case.
 * Nothing of size L×S unless dmask is. The bf16 compute mode (f32 or 16-bit
 * q, as in attn_sdpa) runs the fused kernel's five products (S = q kᵀ again,
 * dP = dout vᵀ, dv += Pᵀ dout, dk += dSᵀ q, dq += dS k) on bf16 pairs
 * with f32 sums, on the kernels attn_sdpa's mode names (AMX tiles,
 * AVX512_BF16, the emulation, or f32 where those would be slower; the
 * verbose line's bf16_kernels=), the softmax's gradient in f32: every
 * factor rounded to bf16 once, within (6u + e^x - 1)·max g_abs of the
 * exact gradient, u = 2^-8 (bf16's unit roundoff: 8 significant bits), x =
 * 4.2·u·s_abs + 1.1e-4, s_abs the largest
 * scale·Σ|q_e||k_e| of a row and key, g_abs as above: the two roundings of
 * each product's operands (P and dout, dS and q or k, dout and v) 6u in all;
 * the backward's scores and a bf16 forward's lse each off by up to 2u·s_abs
 * (0.2u·s_abs more for f32's sums at E <= 4096; the forward's lse 1.02e-4
 * more for its 2^x, see ATTN_COMPUTE_BF16, within the 1.1e-4 added to x),
 * which moves each weight by a factor within e^(±x). The exact
 * kernel's slices (and dmask) are computed in f64 as in f32 mode. Scratch comes from the context's
 * workspace when one is given (attn_sdpa_backward_workspace_size).
 * 16-bit queries (attn_sdpa's, added in 0.4.0): with q f16 or bf16, dout
 * and out are q's dtype too, dq is q's, dk and dv k's and v's (f32, f16 or
 * bf16), dmask f32. q, out and dout are widened into f32 copies (exactly),
 * the f32 backward runs on them, and each 16-bit gradient is its f32
 * result rounded once to nearest even: within u16·|exact| + (1 + u16)·((2e-5
 * + 2·n·2^-24 + e^x - 1) + u16)·max g_abs of the exact gradient on the same 16-bit
 * inputs (the bound above; the last u16 for out's own rounding, which
 * moves rowsum(dout·out)). The copies, O((L + S)·(E + Ev)), come from the
 * workspace or malloc.
 *
 * Errors: those of attn_sdpa (ATTN_ERR_WORKSPACE included), and
 * ATTN_ERR_NULL (dout, out or lse NULL, or no gradient asked for),
 * ATTN_ERR_SHAPE, ATTN_ERR_DTYPE and ATTN_ERR_STRIDE (a gradient or dout
 * unlike its input; a gradient overlapping another or a tensor the call
 * reads), ATTN_ERR_MASK (dmask without a float mask).
 * Nothing is written unless every check passed and all memory was had. */
ATTN_API attn_status attn_sdpa_backward(attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, attn_tensor *dmask,
                                        const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                                        const attn_sdpa_options *options, attn_error *err);

/* The bytes of workspace attn_sdpa_backward with these arguments needs (see
 * attn_sdpa_workspace_size; tensors may have NULL data, as there). */
ATTN_API attn_status attn_sdpa_backward_workspace_size(size_t *bytes, attn_tensor *dq, attn_tensor *dk,
                                                       attn_tensor *dv, attn_tensor *dmask,
                                                       const attn_tensor *dout, const attn_tensor *q,
                                                       const attn_tensor *k, const attn_tensor *v,
                                                       const attn_tensor *out, const attn_tensor *lse,
                                                       const attn_sdpa_options *options, attn_error *err);

/* Ragged batches (added in 0.4.0): attention over B sequences of different
 * lengths packed one after another, as FlashAttention-2's
 * flash_attn_varlen_func takes them, without padding.
 *
 *   q (Tq, Hq, E), k (Tk, Hk, E), v (Tk, Hk, Ev): the sequences' rows one
 *     after another along the first dimension, any strides;
 *   cu_seqlens_q, cu_seqlens_k: B + 1 offsets each (int64): sequence b is
 *     rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q and cu_seqlens_k[b]
 *     .. cu_seqlens_k[b+1]-1 of k and v. Each array starts at 0, never
 *     decreases, and ends at Tq (Tk); a sequence may have no rows;
 *   out (Tq, Hq, Ev) and lse (Tq, Hq) (NULL for none), packed the same way.
 *
 * Sequence b gets exactly (bitwise) what attn_sdpa gives for it alone:
 * attn_sdpa(out_b, lse_b, NULL, q_b, k_b, v_b, options_b) where q_b is the
 * (Hq, L_b, E) view of its rows (likewise k_b, v_b, out_b, and lse_b
 * (Hq, L_b)), and options_b is *options with
 *   mask          masks[b] (masks NULL: no masks), a mask of sequence b
 *                 alone that broadcasts to (Hq, L_b, S_b); options->mask
 *                 must be NULL;
 *   dropout_seed  options->dropout_seed + b (mod 2^64): each sequence its
 *                 own dropout stream, whose weights (slice = query head h,
 *                 row, column of the sequence) attn_sdpa_dropout_mask on
 *                 the sequence's views with that seed writes out;
 * and every other option as given: the scale, both causal alignments
 * (counted in the sequence's own L_b and S_b), GQA, soft-capping, ALiBi,
 * the window, sinks, the bf16 compute mode, RoPE with each sequence's
 * positions starting at rope->position_offset. A sequence with queries
 * but no keys gives out 0 and lse -inf (its sink's logit with sinks), as
 * rows that see no key do; masks[b] is not read for a sequence without
 * queries or keys, so it may lie anywhere (over an output too). Attention
 * in pieces (query_start, key_start, totals) is refused, and so are
 * weights (there is no weights output).
 *
 * Threads: the query blocks of all sequences are one pool of work items,
 * the costliest handed out first, so any mix of lengths keeps every thread
 * busy; results are bitwise the same for any thread count. Scratch: the
 * sequences' plans (about 2 KiB each) and the kernels' scratch; with a
 * workspace (attn_context) all of it comes from there.
 *
 * A 16-bit q (f16 or bf16; k and v f32, f16, bf16 or quantized) gives out
 * in q's dtype and lse in f32, as attn_sdpa takes one: q is widened
 * (exactly) into an f32 copy, the batch computed as for that f32 q, and
 * its f32 out rounded once, to nearest even, into out: bitwise the f32
 * call on the widened q with its out so rounded. The copies,
 * 4·Tq·Hq·(E + Ev) bytes, come first from the workspace (or malloc).
 * The plans (attn_sdpa_plan_init, attn_sdpa_varlen_plan_init,
 * attn_kv_paged_plan_init) take a 16-bit q and out too: their
 * workspace_bytes count the copies, which each run places at the
 * workspace's front (no allocation), bitwise the unplanned call.
 * attn_sdpa_varlen_backward takes f32 or f64 q only (ATTN_ERR_DTYPE).
 *
 * Errors: those of attn_sdpa for any sequence (the message names it:
 * "sequence 3: ..."), and ATTN_ERR_ARGUMENT (batch < 0; an offset array
 * that does not start at 0, decreases, or does not end at the tensor's
 * rows), ATTN_ERR_NULL (q, k, v, out, the offsets), ATTN_ERR_RANK (not
 * rank 3, lse not rank 2), ATTN_ERR_SHAPE (k and v rows, E, out's or lse's
 * shape), ATTN_ERR_HEADS, ATTN_ERR_DTYPE, ATTN_ERR_STRIDE (stride 0 in an
 * output; an output overlapping an input, a mask or the offsets, which
 * are read again after rows are written), ATTN_ERR_OPTION
 * (options->mask, pieces), ATTN_ERR_OVERFLOW. Nothing is written unless
 * every sequence passed its checks and all memory was had. */
ATTN_API attn_status attn_sdpa_varlen(attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                                      int64_t batch, const attn_tensor *const *masks,
                                      const attn_sdpa_options *options, attn_error *err);

/* Plan once, run every layer (added in 0.4.0).
 *
 * An engine runs one attention call per layer, every layer of a step with
 * the same shapes. A plan does the work of attn_sdpa (or attn_sdpa_varlen)
 * that depends on the shapes alone, once: every argument and option
 * checked, the batch cut into slices and sequences, the kernel chosen for
 * each, and the scratch the kernels need measured. attn_sdpa_run then runs
 * a layer from it: it checks that the tensors have the plan's layout,
 * points the plan at their data and runs the kernels, with no allocation:
 * the caller gives the workspace.
 *
 *   size_t bytes, ws;
 *   attn_sdpa_plan_bytes(&bytes, 0, &err);            (0: a dense call)
 *   attn_sdpa_plan *plan;
 *   attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, &lse, &q, &k, &v, &opts, &err);
 *   for each layer: attn_sdpa_run(plan, &out, &lse, &q, &k, &v, workspace, ws, &err);
 *
 * Results are bitwise those of the unplanned call on the same tensors and
 * options. The plan lives in the caller's memory, which must stay put (it
 * holds pointers into itself: do not copy or move it) and is never freed
 * by the library; nothing needs releasing. A plan runs one call at a time
 * (attn_sdpa_run writes the layer's data pointers into it); two threads
 * run two plans. A run that starts while another run of the same plan is
 * in progress (another thread's) is refused with ATTN_ERR_PLAN, having
 * written nothing (in 0.4.0 and before it raced the first). The options' own tensors (mask, alibi_slopes, sinks, k_descale,
 * v_descale) and
 * a ragged batch's masks (the array and its tensors) are read at every run, so they must stay valid, with the plan's
 * shapes, while the plan is used; the options struct itself is copied.
 * The context's num_threads is the plan's; its workspace is not used
 * (attn_sdpa_run's is). The init starts the pool's workers for that many
 * threads, so that a run starts no thread either (unless the pool was busy
 * with another call during the init, or attn_shutdown ran since: then the
 * first run that needs them starts them). */
typedef struct attn_sdpa_plan attn_sdpa_plan;

/* The bytes of memory a plan takes: batch = 0 for a plan of attn_sdpa,
 * else the number of sequences of an attn_sdpa_varlen batch (or of a
 * paged view, attn_kv_paged_plan_init; 0 fits an empty batch). The memory
 * needs no alignment. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (batch <
 * 0), ATTN_ERR_OVERFLOW. */
ATTN_API attn_status attn_sdpa_plan_bytes(size_t *bytes, int64_t batch, attn_error *err);

/* Plan the call attn_sdpa(out, lse, NULL, q, k, v, options) (no weights)
 * in memory[0 .. bytes) (attn_sdpa_plan_bytes with batch 0): *plan is set
 * to the plan, *workspace_bytes to the workspace attn_sdpa_run needs (for
 * a 16-bit q and out, with the f32 copies attn_sdpa makes of them: a run
 * places them at the workspace's front, widens q, rounds out once).
 * Nothing is written to out or lse. On any failure *plan is set to NULL
 * (plan itself not being NULL), and memory's bytes are not kept: the init
 * builds the plan in memory as it checks (memory is the plan's room, not
 * an output). A plan that memory held before an init that failed must not
 * be run again. Errors: those of attn_sdpa, and ATTN_ERR_NULL (plan,
 * memory, workspace_bytes), ATTN_ERR_WORKSPACE (bytes too small for a
 * plan). */
ATTN_API attn_status attn_sdpa_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes, size_t *workspace_bytes,
                                         attn_tensor *out, attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_sdpa_options *options, attn_error *err);

/* Plan the ragged batch attn_sdpa_varlen(out, lse, q, k, v, cu_seqlens_q,
 * cu_seqlens_k, batch, masks, options) in memory[0 .. bytes)
 * (attn_sdpa_plan_bytes with this batch): *plan and *workspace_bytes as
 * attn_sdpa_plan_init sets them. The offsets are copied into the plan (an
 * engine plans a step, then runs every layer).
 * Errors: those of attn_sdpa_varlen, and those of attn_sdpa_plan_init. */
ATTN_API attn_status attn_sdpa_varlen_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes,
                                                size_t *workspace_bytes, attn_tensor *out, attn_tensor *lse,
                                                const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k,
                                                int64_t batch, const attn_tensor *const *masks,
                                                const attn_sdpa_options *options, attn_error *err);

/* Run one layer from a plan: out and lse (NULL exactly when the plan's lse
 * was) get what the planned call gives for these q, k and v, bitwise. The
 * tensors must have the plan's ranks, shapes, strides and dtypes; only
 * their data differ (and the strides of dimensions of size 1, or of a
 * tensor with no element, which place no element). workspace: at least the plan's workspace_bytes (no
 * alignment needed); NULL (workspace_size then unread) where the plan's workspace_bytes is 0;
 * the call allocates nothing. Threads: the plan's.
 * ATTN_VERBOSE prints the line of the planned call. Errors: ATTN_ERR_NULL
 * (plan, a tensor or its data, workspace NULL where the plan needs some), ATTN_ERR_PLAN (a tensor unlike
 * the plan's, naming it; memory that holds no plan; a run of this plan in
 * progress on another thread), ATTN_ERR_WORKSPACE
 * (workspace_size below the plan's), ATTN_ERR_STRIDE (an output overlapping
 * an input; the workspace overlapping a tensor, a mask or the plan's
 * memory), and any error of the planned kernels. Nothing is written
 * unless the checks pass. */
ATTN_API attn_status attn_sdpa_run(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                   const attn_tensor *k, const attn_tensor *v, void *workspace, size_t workspace_size,
                                   attn_error *err);

/* The gradients of attn_sdpa_varlen, for training on packed sequences:
 * dq (Tq, Hq, E), dk (Tk, Hk, E), dv (Tk, Hk, Ev) (each NULL if not wanted,
 * one at least), from dout (Tq, Hq, Ev) and the forward's out and lse
 * (required), with the forward's offsets, masks and options unchanged.
 * Sequence b's gradients are exactly (bitwise) attn_sdpa_backward's on its
 * views (as attn_sdpa_varlen defines them); rows of a sequence without
 * keys get dq 0, keys of a sequence without queries dk and dv 0.
 * Threads: f32 sequences are one job, as attn_sdpa_varlen's: each keeps
 * the work items (key chunks per head) and partial sums it has alone, and
 * every pass hands out the items of all sequences together, those of the
 * costliest items first, so one long sequence among many short ones keeps
 * every thread busy; results are bitwise the same for any thread count.
 * (f64 sequences run on the exact kernel one after another, as
 * attn_sdpa_backward runs it.) Scratch: the plans of the sequences with
 * queries and keys (about 4 KiB each) and the kernels' scratch for all of
 * them at once (none such: no scratch, a workspace of 0 bytes); with a workspace
 * (attn_context) all of it comes from there, and it must hold the whole
 * batch's (ATTN_ERR_WORKSPACE; attn_sdpa_varlen_backward_workspace_size). Errors: those of attn_sdpa_backward for any
 * sequence (named in the message), and those of attn_sdpa_varlen's offsets,
 * shapes and options (a gradient over the offsets: ATTN_ERR_STRIDE); what is refused of every sequence whatever
 * its length (quantized keys or values, per-head scales, sinks not one per query head) is refused of the batch,
 * one without queries or keys too. Every sequence is checked and all memory taken
 * before any gradient is written. */
ATTN_API attn_status attn_sdpa_varlen_backward(attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                                               const attn_tensor *dout, const attn_tensor *q, const attn_tensor *k,
                                               const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                                               const int64_t *cu_seqlens_q, const int64_t *cu_seqlens_k, int64_t batch,
                                               const attn_tensor *const *masks, const attn_sdpa_options *options,
                                               attn_error *err);

/* The bytes of workspace attn_sdpa_varlen_backward with these arguments
 * needs: the plans of the sequences with queries and keys and the
 * kernels' scratch of the whole batch (0 where no sequence has both: the
 * call then runs nothing and takes no workspace), measured by the code
 * that takes them (see attn_sdpa_workspace_size;
 * tensors and masks may have NULL data, as there; the offsets are read).
 * The sequences' plans are made, to be measured, in memory from malloc,
 * freed before it returns. Errors: those of attn_sdpa_varlen_backward
 * without a workspace (ATTN_ERR_NO_MEMORY included), and ATTN_ERR_NULL
 * (bytes NULL). */
ATTN_API attn_status attn_sdpa_varlen_backward_workspace_size(size_t *bytes, attn_tensor *dq, attn_tensor *dk,
                                                              attn_tensor *dv, const attn_tensor *dout,
                                                              const attn_tensor *q, const attn_tensor *k,
                                                              const attn_tensor *v, const attn_tensor *out,
                                                              const attn_tensor *lse, const int64_t *cu_seqlens_q,
                                                              const int64_t *cu_seqlens_k, int64_t batch,
                                                              const attn_tensor *const *masks,
                                                              const attn_sdpa_options *options, attn_error *err);

/* Merge partial attention results over disjoint sets of keys: given
 * (outs[i], lses[i]) = attn_sdpa of the same queries against key set i, for
 * i < n, compute the (out, lse) of attention against all of them, exactly:
 *   lse = log(sum_i exp(lses[i])),  out = sum_i exp(lses[i] - lse) · outs[i].
 * A part whose lse is -inf (no key of it took part) contributes nothing, its
 * out unread; if every part's is, out is 0 and lse -inf. A part whose lse is
 * NaN (a NaN score in it) makes the row's out and lse NaN; else a part
 * whose lse is +inf (a +inf score in it) makes out NaN and lse +inf,
 * whatever that part's out holds: each as attention over all the keys
 * gives it (see "Numerics"). All tensors share one dtype (f32 or
 * f64) and shapes: out and outs[i] (..., L, Ev), lse and lses[i] (..., L);
 * any strides. L or a batch dimension may be 0, as attn_sdpa's out and lse
 * over no queries or a batch of 0 have them: nothing is merged, and such a
 * tensor's data may be NULL (Ev is at least 1). out may be one of outs and lse one of lses, the very same
 * view, to merge in place; otherwise they overlap no part and not each other
 * (ATTN_ERR_STRIDE). The arithmetic is f64.
 * Allocates nothing for n <= 64 parts (a list of n small records beyond).
 * This is how split-KV decoding and attention across machines combine their
 * pieces. Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (n < 1), ATTN_ERR_DTYPE,
 * ATTN_ERR_RANK, ATTN_ERR_SHAPE, ATTN_ERR_STRIDE, ATTN_ERR_OVERFLOW. */
ATTN_API attn_status attn_sdpa_merge(attn_tensor *out, attn_tensor *lse,
                                     const attn_tensor *const *outs,
                                     const attn_tensor *const *lses, int n, attn_error *err);

/* The shapes attn_sdpa expects for out and weights, given q, k, v and the
 * options (NULL options means defaults): the rank is written to *rank, the
 * dimensions to out_shape[0..rank) and weights_shape[0..rank); lse's shape is
 * out_shape[0..rank-1). Any of the three output pointers may be NULL.
 * Checks q, k, v, the options and the mask exactly as attn_sdpa does and
 * fails with the same errors, so a caller can validate before allocating.
 * Dimensions of 0 are taken where attn_sdpa takes them (above), and the
 * shapes have their 0s where the result does: L and a batch dimension of 0
 * in both, S = 0 in the weights'. */
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
 * excludes a key. q, k and the options (scale, causal, mask) mean exactly what they mean for attn_sdpa, and so do the errors
 * (the output is named "scores" in messages). The score variants (softcap,
 * ALiBi, the window, RoPE) and k_descale apply as attn_sdpa applies them,
 * in its order: these are the scores its softmax takes. Sinks and dropout,
 * which act in the softmax, do not enter. Unlike attn_sdpa this writes an
 * L×S result, which the caller owns. */
ATTN_API attn_status attn_scores(attn_tensor *scores, const attn_tensor *q, const attn_tensor *k,
                                 const attn_sdpa_options *options, attn_error *err);

/* The same contract as attn_sdpa, computed by the plain textbook algorithm:
 * for each query row, all S scores, their maximum, the normalised weights, then
 * the weighted sum of values. Slow and simple, it exists so that tests can
 * check the streaming kernel against an independent implementation. Scratch
 * memory is O(S + E + Ev). */
ATTN_API attn_status attn_sdpa_reference(attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                                         const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_sdpa_options *options,
                                         attn_error *err);

/* ------------------------------------------------------------------------ */
/* Rotary position embeddings (RoPE)                                        */
/* ------------------------------------------------------------------------ */

/* Which elements of a head RoPE rotates together (Su et al., "RoFormer"). */
typedef enum attn_rope_layout {
    /* Element i with element i + rotary_dim/2: GPT-NeoX, Hugging Face's Llama
     * (its rotate_half). */
    ATTN_ROPE_HALVES = 0,
    /* Element 2i with element 2i + 1: GPT-J, Meta's original Llama. */
    ATTN_ROPE_INTERLEAVED = 1
} attn_rope_layout;

typedef struct attn_rope_options {
    size_t struct_size;      /* set by attn_rope_options_default() (see "Versioned structs") */
    attn_rope_layout layout; /* default ATTN_ROPE_HALVES */
    double base;             /* θ, default 10000; finite, > 0 */
    int64_t rotary_dim;      /* rotate the first rotary_dim elements of each row (even,
                                <= E); 0 (the default): all E (E must be even) */
    int64_t position_offset; /* row r is position position_offset + r: the length of a
                                KV cache before these rows; default 0 */
    double linear_scaling;   /* positions divided by this ("linear" RoPE scaling);
                                default 1; finite, > 0 */
} attn_rope_options;

/* The defaults above: attn_rope_options_default(), or in place
 * attn_rope_options_init(&r, sizeof r) (see "Versioned structs"). */
ATTN_API size_t attn_rope_options_init(attn_rope_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_rope_options)
#define attn_rope_options_default attn_rope_options_default_inline

/* The original Transformer's sinusoidal position encodings (Vaswani et al.,
 * "Attention Is All You Need"), to add to the token embeddings: out (L, E),
 * f32 or f64, row r at position p = position_offset + r:
 *   out[r, 2i] = sin(p / 10000^(2i / E)),  out[r, 2i + 1] = cos(p / 10000^(2i / E)).
 * Computed in double. Errors: ATTN_ERR_NULL, ATTN_ERR_RANK (not 2),
 * ATTN_ERR_DTYPE, ATTN_ERR_OPTION (position_offset < 0). */
ATTN_API attn_status attn_sinusoidal_positions(attn_tensor *out, int64_t position_offset, attn_error *err);

/* out = x with RoPE applied: x (..., L, E), f64 or f32, row r of every
 * matrix at position p = (position_offset + r) / linear_scaling. Pair k
 * (k < rotary_dim/2) of a row, (a, b) as the layout picks them, turns by the
 * angle p · base^(-2k / rotary_dim) (computed in double, as 1 / base^(2k /
 * rotary_dim), Hugging Face's inv_freq): (a cos - b sin, b cos + a sin).
 * Elements past rotary_dim are copied. out has x's shape and dtype, any
 * strides; it may be x itself (in place: the same view), but must not
 * otherwise overlap it (ATTN_ERR_STRIDE). Memory: a table of the angles'
 * cosines and sines, about rotary_dim·min(L, 256) doubles, from malloc
 * (the call takes no context). Errors: ATTN_ERR_NULL,
 * ATTN_ERR_RANK (below 1), ATTN_ERR_SHAPE (out's shape, an odd rotary
 * dimension), ATTN_ERR_DTYPE, ATTN_ERR_OPTION, ATTN_ERR_STRIDE,
 * ATTN_ERR_NO_MEMORY (that table). */
ATTN_API attn_status attn_rope(attn_tensor *out, const attn_tensor *x, const attn_rope_options *options,
                               attn_error *err);

/* The gradient through attn_rope: dx = dout turned back by the same angles
 * (the rotation's transpose). Same shapes, dtypes and errors as attn_rope. */
ATTN_API attn_status attn_rope_backward(attn_tensor *dx, const attn_tensor *dout, const attn_rope_options *options,
                                        attn_error *err);

/* ------------------------------------------------------------------------ */
/* Multi-head attention (torch.nn.MultiheadAttention's forward)             */
/* ------------------------------------------------------------------------ */

/* The layer's parameters, named as PyTorch's state_dict names them. Give
 * either in_proj_weight (3E, E) (with in_proj_bias (3E,) or NULL), as
 * nn.MultiheadAttention packs them when kdim = vdim = E, or the separate
 * q_proj_weight (Hq·D, E), k_proj_weight (Hkv·D, kdim), v_proj_weight
 * (Hkv·D, vdim) (biases (Hq·D,), (Hkv·D,), (Hkv·D,) or NULL), as
 * Llama-style checkpoints store them; D = E / Hq. in_proj_bias (3E,) may
 * also come with the separate weights (without GQA), as the module's
 * state_dict has it when kdim or vdim is not E: it is split into the three
 * biases. One set or the other: in_proj_weight with a separate weight or
 * bias, or in_proj_bias with q_proj_bias, k_proj_bias or v_proj_bias, is
 * ATTN_ERR_OPTION. Beyond PyTorch,
 * num_kv_heads < num_heads is grouped-query attention (MQA at 1), through
 * separate projections. The weights and biases (and bias_k, bias_v) may be
 * f32, f16 or bf16 whatever the input's dtype, or the input's own (f64 for
 * an f64 layer), as checkpoints ship them: the products widen them exactly
 * as they pack them, so a 16-bit weight gives what its value widened to
 * f32 gives, bitwise. sinks are in the input's dtype. */
typedef struct attn_mha_params {
    size_t struct_size;    /* set by attn_mha_params_default() (see "Versioned structs") */
    int64_t embed_dim;     /* E, 1 to 2^24 */
    int64_t num_heads;     /* Hq; E must be a multiple of it */
    int64_t num_kv_heads;  /* Hkv; 0: num_heads. num_heads must be a multiple of it */
    int64_t kdim, vdim;    /* key and value input sizes; 0: E */
    const attn_tensor *in_proj_weight, *in_proj_bias;
    const attn_tensor *q_proj_weight, *k_proj_weight, *v_proj_weight;
    const attn_tensor *q_proj_bias, *k_proj_bias, *v_proj_bias;
    const attn_tensor *out_proj_weight, *out_proj_bias; /* (E, Hq·D), (E,) or NULL */
    const attn_tensor *bias_k, *bias_v; /* add_bias_kv: (1, 1, Hkv·D) each, or NULL */
    /* Attention sinks as a learned parameter of the layer (gpt-oss's
     * `sinks`): (Hq,) logits, f32 or f64, or NULL. The same as
     * options->attention->sinks (give one or the other, not both), but a
     * parameter like the others, so attn_mha_backward can return its
     * gradient (grads->sinks). Added in 0.3.0. */
    const attn_tensor *sinks;
} attn_mha_params;

/* An f32 layer's weights packed once for its products (attn_mha_weights_init);
 * opaque, in the caller's memory. */
typedef struct attn_mha_weights attn_mha_weights;

typedef struct attn_mha_options {
    size_t struct_size;      /* set by attn_mha_options_default() (see "Versioned structs") */
    int batch_first;         /* inputs and out (N, L, E) rather than (L, N, E) */
    int add_zero_attn;       /* append a key and value of zeros after the projections */
    /* key_padding_mask (N, S) or (S,) for unbatched input; attn_mask (L, S)
     * or (N·Hq, L, S). PyTorch's polarity for this module: a bool TRUE
     * means the key is IGNORED (the opposite of attn_sdpa's bool mask); a
     * float mask (the input's dtype) is added to the scores. NULL: none. */
    const attn_tensor *key_padding_mask, *attn_mask;
    /* Beyond PyTorch's module: a causal mask in either alignment, combined
     * with the masks. It limits the S keys of `key`: query i sees key j < S
     * when j <= i (top-left) or j <= i + S - L (bottom-right). The keys the
     * layer appends after them (bias_k/bias_v, then add_zero_attn's) are
     * visible to every query, whatever the mode: the module given the
     * causal (L, S) mask as attn_mask pads it with a zero column for each,
     * and this is what it computes. So with bottom-right and L > S the
     * first L - S queries see only the appended keys. */
    attn_causal causal;
    /* The weights output, when asked for: averaged over the heads (the
     * default, 1) as (N, L, S'), or per head (N, Hq, L, S'); S' counts the
     * bias_k and zero-attention keys. */
    int average_attn_weights;
    /* Per-call resources, NULL for the process-wide defaults. With a
     * workspace, attn_mha and attn_mha_cached take every buffer from it, the
     * attention what the layer's own leave (attn_mha_workspace_size,
     * attn_mha_cached_workspace_size); attn_mha_backward, attn_mha_paged
     * and attn_mha_cached_batch allocate their own with malloc and give the
     * attention the workspace. */
    const attn_context *context;
    /* Rotary position embeddings on the projected queries and keys, per head
     * (attn_rope: key row s at position position_offset + s, query row l at
     * position_offset + l + off, where off is the causal alignment's offset,
     * 0 for top-left, S - L for bottom-right and without a causal mask, as
     * attn_sdpa_options.rope places them: L queries against S keys are the
     * last L positions, as in a KV cache's step; 0.3.0 put query l at
     * position_offset + l whatever L and S), or NULL for none. Not
     * with bias_k/bias_v or
     * add_zero_attn, whose keys have no position (nor are the attention's
     * ALiBi and window: ATTN_ERR_OPTION). Positions past 2^53, where
     * doubles stop holding them exactly, are ATTN_ERR_OPTION: position_offset
     * over max(L, S) of them, as attn_sdpa counts them (a cache's step,
     * attn_mha_cached, attn_mha_paged and attn_mha_cached_batch: over
     * the length the sequence holds and its L new positions, so that a
     * sequence run step by step is refused where the whole pass is, before
     * anything is appended). */
    const attn_rope_options *rope;
    /* The attention's own options, or NULL: its score variants (softcap,
     * alibi_slopes, window, sinks), scale (has_scale; default 1/sqrt(D)),
     * dropout and compute mode are used; its causal, mask and context are
     * the layer's (above): a causal mode, mask or context set here is
     * ATTN_ERR_OPTION. So are pieces (query_start, key_start,
     * total_queries, total_keys: the layer attends over its own sequence)
     * and k_descale / v_descale (the keys and values are the layer's own
     * projections, not fp8 codes; an fp8 cache's per-head scales are its
     * desc's k_scale and v_scale). Dropout is attn_sdpa's on the heads: the mask
     * attn_sdpa_dropout_mask gives for q (N, Hq, L, D) and k (N, Hkv, S', D)
     * (slice n·Hq + h, row l, column s, S' counting the appended keys; N = 1
     * unbatched), the weights output holding the dropped weights (their mean
     * over the heads when averaged), as PyTorch's module returns them, and
     * attn_mha_backward regenerating it from the same options. Its rope must
     * be NULL (ATTN_ERR_OPTION): the layer's RoPE is options->rope. */
    const attn_sdpa_options *attention;
    /* The weights packed once (added in 0.4.0): NULL, or what
     * attn_mha_weights_init made from these very params (the same weight
     * tensors, sizes and kernels; else ATTN_ERR_OPTION), for an f32 layer
     * (ATTN_ERR_DTYPE for f64). The q, k, v and out products then read the
     * packed copy and never repack. Its memory is the call's input as the
     * parameters are: the outputs and the context's workspace may not
     * overlap it (ATTN_ERR_STRIDE). */
    const attn_mha_weights *packed;
} attn_mha_options;

/* The defaults: params all 0 and NULL (to be set); options all 0 and NULL
 * but average_attn_weights 1. As values, attn_mha_params_default() and
 * attn_mha_options_default(); in place, the _init functions (see
 * "Versioned structs"). */
ATTN_API size_t attn_mha_params_init(attn_mha_params *params, size_t struct_size);
ATTN_API size_t attn_mha_options_init(attn_mha_options *options, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_mha_params)
ATTN_VERSIONED_DEFAULT_(attn_mha_options)
#define attn_mha_params_default attn_mha_params_default_inline
#define attn_mha_options_default attn_mha_options_default_inline

/* out = nn.MultiheadAttention's forward(query, key, value): the inputs
 * projected (q = query W_qᵀ + b_q, likewise k and v), split into heads,
 * bias_k/bias_v and a zero key appended when asked for, attention per head
 * with scale 1/sqrt(D), the heads concatenated, then out_proj. query is
 * (L, N, E) (or (N, L, E) with batch_first, or (L, E) unbatched), key
 * (S, N, kdim), value (S, N, vdim) in the same layout; out like query.
 * weights (optional, NULL for need_weights=False): see
 * average_attn_weights. f64 computes in f64 throughout (agrees with
 * PyTorch's float64 to ~1e-13: the exact path); f32 projects with f32 sums
 * (the library's own packed GEMM, one rounding per multiply-add, fused where
 * the CPU has FMA: within (in + 4)·2^-24·Σ|x||w| of each exact projected
 * value) and attends with attn_sdpa's f32 kernels. bf16 weights in an f32
 * layer (checkpoints as they ship): a projection whose weight is bf16 runs
 * on the bf16 GEMM where the CPU has one (AMX-BF16 tiles, TDPBF16PS; or
 * AVX512_BF16's VDPBF16PS where the core issues it at its FMA's rate, as
 * AMD's Zen 4 and Zen 5 do): its input (x, or the heads' output for
 * out_proj) is rounded to bf16 (nearest even), the weight read as it is,
 * each product exact in f32 and each addition rounded to f32 (denormals
 * flushed to zero, as the instructions do), so that each projected value
 * is within (in + 4)·2^-24·Σ|x̂||w| of the exact sum over the rounded x̂:
 * PyTorch's bf16 F.linear on the same bf16 values, with f32 accumulation
 * and the result kept in f32. Where the CPU has neither (or its
 * VDPBF16PS is half rate), such a projection computes in f32 on the
 * weight widened, as for f16 weights always. ATTN_VERBOSE prints one line
 * naming each product's kernel before the attention's line:
 * "attn: mha_projections gemm_q=bf16:avx512_bf16/12x32 ... gemm_out=..."
 * (sums, kernel set, register tile; f32:avx512/12x32 for f32 sums). Where PyTorch gives NaN
 * (a query whose every key is masked) the output row is out_proj's bias (the
 * attention is 0) and the row's weights are 0, as attn_sdpa gives. N = 0 or L = 0 (see "Dimensions of
 * 0") gives an out with no element, S = 0 (without bias_k or a zero key)
 * rows of out_proj's bias, as the module gives. Memory, from the context's workspace
 * when one is given (attn_mha_workspace_size), else from malloc in one block
 * of that size (which the allocator can keep for the next call): the
 * projected q, k, v and the heads' output, the products' packing blocks,
 * O(N·(L + S')·E); with key_padding_mask or attn_mask, or a causal mask
 * with appended keys, the masks merged into one additive mask of
 * (1 or N)·(1 or Hq)·(1 or L)·S' elements in the input's dtype (a batch,
 * head or query dimension only where a mask varies: a key_padding_mask
 * alone takes N·S'; S' counts the bias_k and zero keys);
 * with weights asked for, the per-head weights, N·Hq·L·S', before they are
 * averaged; then what attn_sdpa takes (attn_mha_backward: see there).
 * Errors: ATTN_ERR_NULL, ATTN_ERR_RANK,
 * ATTN_ERR_SHAPE, ATTN_ERR_DTYPE, ATTN_ERR_HEADS, ATTN_ERR_MASK,
 * ATTN_ERR_OPTION, ATTN_ERR_OVERFLOW, ATTN_ERR_NO_MEMORY, ATTN_ERR_WORKSPACE,
 * ATTN_ERR_STRIDE (out or weights overlapping each other, an input, a
 * parameter or a mask, or with stride 0 in a dimension of size > 1). */
ATTN_API attn_status attn_mha(attn_tensor *out, attn_tensor *weights, const attn_tensor *query,
                              const attn_tensor *key, const attn_tensor *value, const attn_mha_params *params,
                              const attn_mha_options *options, attn_error *err);

/* The gradients of attn_mha, given dLoss/dout (shaped like out): dquery,
 * dkey and dvalue shaped like the inputs (NULL: not wanted). Self-attention
 * passes one tensor as query, key and value; pass one tensor as their
 * gradients too (the very same view) and it receives the sum, dquery +
 * dkey + dvalue, as autograd sums x.grad; likewise for two of them. Any
 * other sharing of memory between gradients, or with dout, an input, a
 * parameter or a mask, is ATTN_ERR_STRIDE, and so is a gradient with
 * stride 0 in a dimension of size > 1. Then the parameters' gradients:
 * each non-NULL tensor of `grads` (an attn_mha_params used as a list of
 * outputs) receives the gradient of the parameter of the same name, shaped
 * like it, in its dtype (f32 or f64 for a 16-bit parameter: the gradient of
 * a master copy; grads' sizes are ignored). A bf16 weight whose product
 * runs on the bf16 GEMM (see attn_mha) has its gradient over that
 * product's input rounded to bf16, the values the forward multiplied (as
 * PyTorch's bf16 F.linear saves its bf16 input); the input's gradient
 * passes through the rounding. The forward is recomputed (projections,
 * RoPE, masks, attention: the values attn_mha computes), then
 * differentiated: the attention by attn_sdpa_backward, in the layer's
 * dtype (an f32 layer's by its f32 kernel, see there), the
 * projections by the transposed products, summed in double (the
 * parameters' and inputs' gradients stay in double until written, the
 * heads' gradient is rounded once to the layer's dtype for the
 * attention). f64 agrees with PyTorch's autograd to ~1e-12. Memory: the
 * recomputed forward's buffers as attn_mha lists them (not the per-head
 * weights), the heads' log-sum-exp (N·Hq·L) and the gradients of q, k, v
 * and the heads in the layer's dtype, and the inputs' and parameters'
 * gradients in double (all of them, asked for or not), with a bf16-rounded
 * copy of each product's input where the forward's ran on the bf16 GEMM,
 * the sinks' gradient and its scratch when the layer has sinks, and
 * attn_gemm's packing buffers, from malloc and freed before the call
 * returns; the context's
 * workspace, when given, goes to the attention alone (attn_sdpa and
 * attn_sdpa_backward). Errors: those of attn_mha, ATTN_ERR_SHAPE for a
 * gradient of another shape than its parameter's and ATTN_ERR_DTYPE for
 * one of another dtype (a 16-bit parameter's: not f32 or f64; in 0.4.0
 * and before, both were ATTN_ERR_SHAPE),
 * ATTN_ERR_NULL for one (or dout) with NULL data or for a gradient of a
 * parameter the layer does not have (grads->bias_k without params->bias_k),
 * and ATTN_ERR_STRIDE (see above); nothing is written unless every check
 * passed and all memory was had. */
ATTN_API attn_status attn_mha_backward(attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue,
                                       const attn_mha_params *grads, const attn_tensor *dout,
                                       const attn_tensor *query, const attn_tensor *key, const attn_tensor *value,
                                       const attn_mha_params *params, const attn_mha_options *options,
                                       attn_error *err);

/* Weights packed once, for f32 layers that run many times (a decoder's
 * every step): each of the q, k, v and out projections' weights laid out
 * as the f32 GEMM's microkernel reads them (transposed, in panels as wide
 * as its register tile; a bf16 weight that runs on the bf16 GEMM, see
 * attn_mha, as pairs of bf16 in that kernel's panels, half the bytes), so
 * that no call repacks them.
 *
 *   size_t bytes;  attn_mha_weights_bytes(&bytes, &params, &err);
 *   attn_mha_weights *w;  attn_mha_weights_init(&w, malloc(bytes), bytes, &params, &err);
 *   options.packed = w;   every call: attn_mha(..., &params, &options, &err);
 *
 * The packed copy is of the weights as they are at init: after changing
 * them, init again. Biases, bias_k/bias_v and sinks are read from params
 * at each call. The caller keeps the memory alive while calls use it (it
 * is only read, so calls on several threads may share it) and frees it.
 * The packing depends on this process's kernels (attn_isa()): memory
 * packed in one process is not for another. Results are bitwise the same
 * as without packing. attn_mha_weights_bytes: the bytes for these params
 * (any alignment: the weights align themselves inside). Errors: those of
 * attn_mha's parameter checks for an f32 layer, and ATTN_ERR_OVERFLOW;
 * init also ATTN_ERR_NULL, and ATTN_ERR_WORKSPACE when `bytes` is too
 * small. */
ATTN_API attn_status attn_mha_weights_bytes(size_t *bytes, const attn_mha_params *params, attn_error *err);
ATTN_API attn_status attn_mha_weights_init(attn_mha_weights **weights, void *memory, size_t bytes,
                                           const attn_mha_params *params, attn_error *err);

/* How many bytes of workspace (options->context's workspace) the call
 * attn_mha(out, weights, query, key, value, params, options) needs, in
 * *bytes; the arguments are checked as attn_mha checks them and nothing is
 * computed and nothing allocated; out, weights, query, key, value, the
 * masks and the parameters' tensors may have NULL data (measuring without
 * buffers, attn_sdpa_workspace_size). With a workspace of that size the
 * call takes all its memory from it and calls no allocator, but for the
 * pool's workers, which a threaded call starts where no call has started
 * them before (attn_context.workspace). Errors: those of attn_mha but
 * ATTN_ERR_WORKSPACE. */
ATTN_API attn_status attn_mha_workspace_size(size_t *bytes, attn_tensor *out, attn_tensor *weights,
                                             const attn_tensor *query, const attn_tensor *key,
                                             const attn_tensor *value, const attn_mha_params *params,
                                             const attn_mha_options *options, attn_error *err);

struct attn_kv_cache;

/* The same for attn_mha_cached(out, x, cache, params, options) on the
 * cache as it is now (the attention measured over the positions it will
 * hold after the call's append); out and x may have NULL data, as for
 * attn_mha_workspace_size. A decode step with a workspace and packed
 * weights (options->packed) calls no allocator (the pool's workers aside,
 * as for attn_mha_workspace_size). */
ATTN_API attn_status attn_mha_cached_workspace_size(size_t *bytes, attn_tensor *out, const attn_tensor *x,
                                                    struct attn_kv_cache *cache, const attn_mha_params *params,
                                                    const attn_mha_options *options, attn_error *err);

/* Self-attention of L new positions over a KV cache, as a decoder generates:
 * x (N, L, E) (batch_first; (L, N, E) otherwise; (L, E) unbatched) is
 * projected to q, k and v; RoPE (options->rope) turns them at positions
 * length + l, where length is what the cache holds before the call (the
 * rope's own position_offset is added); k and v are appended to the cache
 * (a cache of batch N, heads num_kv_heads, key_dim and value_dim D = E /
 * num_heads); q attends to everything cached; then out_proj. The causal
 * mode follows attn_kv_cache_attend's rule, the same code: the L new
 * positions are the cache's last, so options->causal is
 * ATTN_CAUSAL_BOTTOM_RIGHT (each sees the cache up to itself; NULL options
 * give it) or ATTN_CAUSAL_NONE (each sees all L new positions too; for one
 * position at a time the two agree), and ATTN_CAUSAL_TOP_LEFT is
 * ATTN_ERR_OPTION, before anything is appended. Token by token it gives
 * what attn_mha gives over the whole sequence with a causal mask (tested:
 * f64 within 1e-12), without dropout: a step's dropout mask is that of
 * attn_sdpa over its own L queries (rows 0 .. L-1) and the S = length + L
 * keys cached (see attn_sdpa_options.dropout_p), not the whole sequence's.
 * Masks are attn_mha's, over the keys the cache holds
 * after the append, S = length + L of them: attn_mask (L, S) or (N·Hq, L,
 * S), key_padding_mask (N, S) ((S,) unbatched), bool (true ignores the key,
 * PyTorch's polarity for the module) or x's dtype (added), applied with the
 * causal mode (tested against PyTorch float64, oracle_mha.py); a mask of
 * another width is ATTN_ERR_MASK before anything is appended.
 * bias_k/bias_v and add_zero_attn are not taken here (ATTN_ERR_OPTION: the
 * keys they add have no position in a cache). out, x, the masks and the
 * parameters must not overlap the cache's memory, which the call writes. Errors: those of attn_mha and
 * attn_kv_cache_append (ATTN_ERR_FULL: nothing is appended). A step that
 * fails after its append (the attention: too small a workspace, no
 * memory; out_proj) leaves the cache as it was, its length and its keys:
 * with keys quantized per channel the residual rows (B · Hk · (R + 32) · E
 * f16 values) are kept first, in the workspace (which
 * attn_mha_cached_workspace_size counts) or malloc's memory, since a
 * group the append quantized would come back from a truncation only as
 * its dequantized values. */
ATTN_API attn_status attn_mha_cached(attn_tensor *out, const attn_tensor *x, struct attn_kv_cache *cache,
                                     const attn_mha_params *params, const attn_mha_options *options,
                                     attn_error *err);

/* ------------------------------------------------------------------------ */
/* KV cache                                                                 */
/* ------------------------------------------------------------------------ */

/* A key/value cache for generating one token (or a few) at a time: the keys
 * and values of every position so far, for B sequences of Hk heads, in
 * memory the caller provides, sized once for `capacity` positions. Append
 * the new positions' keys and values, then attend the new queries to
 * everything cached:
 *
 *   attn_kv_cache_desc d = attn_kv_cache_desc_default();
 *   d.heads = 8, d.capacity = 4096, d.key_dim = d.value_dim = 128, d.dtype = ATTN_F16;
 *   size_t bytes;  attn_kv_cache_bytes(&bytes, &d, &err);
 *   attn_kv_cache *cache;  attn_kv_cache_init(&cache, malloc(bytes), bytes, &d, &err);
 *   for each step: attn_kv_cache_append(cache, &k_new, &v_new, &err);
 *                  attn_kv_cache_attend(&out, NULL, &q_new, cache, &opts, &err);
 *
 * Token by token this gives what attention with a bottom-right causal mask
 * over the whole sequence gives (tested: f64 within 1e-13). The library
 * never allocates for the cache, and a full cache is an error, never an
 * overwrite. A cache is not locked: appending while another thread attends
 * to the same cache is a data race; attending from several threads is fine. */
typedef struct attn_kv_cache attn_kv_cache; /* opaque; lives in the caller's memory */

typedef struct attn_kv_cache_desc {
    size_t struct_size;  /* set by attn_kv_cache_desc_default() (see "Versioned structs") */
    int64_t batch;       /* B >= 1 (default 1) */
    int64_t heads;       /* Hk >= 1, the key/value heads (default 1) */
    int64_t capacity;    /* positions, >= 1 */
    int64_t key_dim;     /* E >= 1 */
    int64_t value_dim;   /* Ev >= 1 */
    attn_dtype dtype;    /* storage: ATTN_F64, ATTN_F32 (default), ATTN_F16, ATTN_BF16, or
                            quantized: ATTN_Q8, ATTN_Q4, ATTN_Q4_1 (value_dim,
                            and key_dim unless key_dtype stores the keys,
                            multiples of 32), ATTN_E4M3, ATTN_E5M2 (see
                            "Quantized storage"; attention reads the rows in
                            place, with f32 queries) */
    attn_dtype key_dtype; /* 0 (default): keys in dtype, as values. ATTN_Q4C or
                            ATTN_Q2C: keys quantized per channel over groups of
                            32 positions, with the last positions not yet
                            forming a group (and `residual` before them) kept
                            in f16 (see "Keys quantized
                            per channel"); values in dtype (not f64); capacity
                            a multiple of 32; no k_scale and no hadamard below
                            (ATTN_ERR_OPTION: they turn or scale keys stored
                            in dtype). Added in 0.4.0, in what was 0.3.0's
                            tail padding: a desc whose struct_size ends
                            before k_scale (0.3.0's) is not read here, its
                            keys are in dtype. */
    /* Added in 0.4.0. One scale per KV head for an e4m3 or e5m2 cache
     * (vLLM's k_scale / v_scale): NULL (the default) for none, else `heads`
     * floats, each finite and > 0 (ATTN_ERR_SCALE), copied into the cache
     * at init (the caller's arrays may go). Head h's rows are stored as
     * x / k_scale[h] quantized, attention reads code · k_scale[h], and
     * attn_kv_cache_gather returns those values (see "Quantized storage",
     * fp8 with one scale per head). Another dtype with a scale:
     * ATTN_ERR_DTYPE. attn_kv_cache_view still views the stored codes. */
    const float *k_scale;
    const float *v_scale;
    /* Added in 0.4.0. The Walsh–Hadamard rotation of the keys, which
     * llama.cpp turns on for quantized K: 0 (the default) none, 1 on.
     * Each key row x is stored as the format of H x (then divided by
     * k_scale, if given), H = H_E / sqrt(E) as attn_hadamard applies it
     * (H x rounded once to f32), and attention turns each query row by the
     * same H (an f32 copy of q per call, from the front of the context's
     * workspace when one is given: 4 bytes per element of q (one for an empty q) rounded up to
     * 64, and 63 more, before what attn_sdpa_workspace_size gives for the
     * cache's view; attn_mha_cached_workspace_size counts it, and a paged
     * plan's workspace_bytes; without a workspace, malloc), so q·k is unchanged in exact
     * arithmetic while an outlier channel's size is spread over all E
     * channels before the format rounds it (what that buys:
     * docs/accuracy.md). Values are not turned. attn_kv_cache_gather
     * returns keys turned back (H of the widened row, rounded once);
     * attn_kv_cache_view views the stored, turned rows. It needs a
     * quantized dtype (ATTN_ERR_DTYPE) and key_dim a power of two up to
     * 1024 (ATTN_ERR_SHAPE: other sizes are refused, not turned in
     * blocks); attention then takes f32 q (ATTN_ERR_DTYPE) and no
     * options->rope (ATTN_ERR_OPTION: RoPE's pairs do not survive the
     * rotation; turn keys by RoPE before appending, as attn_mha_cached
     * does). Another value: ATTN_ERR_OPTION. */
    int hadamard;
    /* Added in 0.4.0. With key_dtype: R, the most recent positions kept in
     * f16 besides the group being filled (KIVI's residual window; 128 in
     * its paper), 0 (the default: the group being filled only) or a
     * multiple of 32 up to ATTN_KEY_RESIDUAL_MAX; the residual rows then
     * take B · Hk · (R + 32) · E · 2 bytes, and 8 bytes more per batch
     * row (the count of positions its window holds), counted by
     * attn_kv_cache_bytes
     * (see "Keys quantized per channel"). Another value, or R > 0 without
     * key_dtype: ATTN_ERR_OPTION. */
    int64_t residual;
} attn_kv_cache_desc;

/* batch 1, heads 1, dtype f32, the sizes 0 (to be set): as a value,
 * attn_kv_cache_desc_default(); in place, attn_kv_cache_desc_init(&d,
 * sizeof d) (see "Versioned structs"). */
ATTN_API size_t attn_kv_cache_desc_init(attn_kv_cache_desc *desc, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_kv_cache_desc)
#define attn_kv_cache_desc_default attn_kv_cache_desc_default_inline

/* The bytes attn_kv_cache_init needs for `desc` (any alignment of the
 * memory: the cache aligns itself inside it; per-head scales add 8 bytes a
 * head). Errors: ATTN_ERR_NULL, ATTN_ERR_OPTION (struct_size),
 * ATTN_ERR_SHAPE (a size < 1), ATTN_ERR_DTYPE (a scale on a dtype other
 * than e4m3 and e5m2 too), ATTN_ERR_SCALE (a scale not finite or not > 0),
 * ATTN_ERR_OVERFLOW. */
ATTN_API attn_status attn_kv_cache_bytes(size_t *bytes, const attn_kv_cache_desc *desc, attn_error *err);

/* An empty cache in `memory` (at least attn_kv_cache_bytes bytes, which the
 * caller keeps alive, and frees, after the cache's last use). *cache points
 * into memory. Errors: those of attn_kv_cache_bytes, and ATTN_ERR_WORKSPACE
 * when `bytes` is too small. */
ATTN_API attn_status attn_kv_cache_init(attn_kv_cache **cache, void *memory, size_t bytes,
                                        const attn_kv_cache_desc *desc, attn_error *err);

/* Append n positions: k (B, Hk, n, E) and v (B, Hk, n, Ev), any strides
 * (rank 3 (Hk, n, E) when B is 1, rank 2 (n, E) when B and Hk are 1). An f64
 * cache takes f64; the others take f32, f16 or bf16, rounded to the cache's
 * dtype (nearest even), or quantized row by row as attn_quantize does (a
 * row's bytes do not depend on what else is appended with it). A cache that cannot hold n more positions fails
 * with ATTN_ERR_FULL and is left as it was. k and v must not overlap the
 * positions they are written to (the cache's own earlier positions are
 * fine). Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE,
 * ATTN_ERR_DTYPE, ATTN_ERR_FULL, ATTN_ERR_STRIDE. */
ATTN_API attn_status attn_kv_cache_append(attn_kv_cache *cache, const attn_tensor *k, const attn_tensor *v,
                                          attn_error *err);

/* Attention of q (B, Hq, L, E; Hq a multiple of Hk; rank 3 or 2 as for
 * append) to the `length` positions cached: attn_sdpa with k and v the
 * cache's filled positions, so out is (B, Hq, L, Ev) and every option
 * applies (scale, mask (..., L, length), score variants, threads, compute,
 * workspace). q's rows are the last L positions: options->causal must be
 * ATTN_CAUSAL_BOTTOM_RIGHT (each query sees the cache up to its own
 * position) or ATTN_CAUSAL_NONE (every position, e.g. cross-attention);
 * top-left is ATTN_ERR_OPTION (attn_mha_cached applies the same rule).
 * NULL options: bottom-right. q is f64 for an
 * f64 cache, else f32 (or 16-bit, as attn_sdpa takes it). The cache is read
 * in place by the paged cache's code: it is a pool of one page of
 * `capacity` positions whose heads are the B rows' heads side by side, and
 * the B rows are one batch of one plan, as attn_sdpa runs a batch, so the
 * result is bitwise attn_sdpa's on attn_kv_cache_view's tensors (tested on
 * every kernel and storage); ATTN_VERBOSE prints an "sdpa_paged" line.
 * The context's workspace must hold what attn_sdpa_workspace_size gives
 * for out, lse, q and options with k and v the cache's filled positions
 * (attn_kv_cache_view's tensors); keys quantized per channel (key_dtype),
 * which have no view, take what it gives with f16 k (B, Hk, length, E)
 * and v (B, Hk, length, Ev) (rank 3 or 2 as q's; NULL data) standing for
 * them, whatever desc.dtype and desc.residual are: their groups are
 * dequantized where that workspace already has room (see "Keys quantized
 * per channel"). With desc.hadamard, q's turned copy
 * comes first (see attn_kv_cache_desc). A smaller workspace is
 * ATTN_ERR_WORKSPACE, nothing written.
 * Errors: those of attn_sdpa (out or lse overlapping the cache's filled
 * positions: ATTN_ERR_STRIDE, "out and k pages overlap"). q with no
 * query, or an empty cache (S = 0: out 0, lse -inf; it was ATTN_ERR_ARGUMENT
 * before 0.4.0), is taken as attn_sdpa takes them ("Dimensions of 0"). */
ATTN_API attn_status attn_kv_cache_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                          const attn_kv_cache *cache, const attn_sdpa_options *options,
                                          attn_error *err);

/* The cached positions as tensors of rank `rank` (4: (B, Hk, length, E);
 * 3 or 2 as for append), viewing the cache's memory (valid until the next
 * append, truncate or free): for attn_sdpa_backward, or to look inside.
 * A quantized cache's view is of quantized rows (strides in bytes, see
 * attn_tensor), which attn_sdpa reads but the backward pass does not:
 * attn_kv_cache_gather gives their values. Keys quantized per channel
 * (key_dtype) have no view: ATTN_ERR_DTYPE, and attn_kv_cache_gather gives
 * them. An fp8 cache with per-head scales views its codes: attn_sdpa on them
 * with the desc's k_scale and v_scale as options' k_descale and v_descale is
 * attn_kv_cache_attend, bitwise. Errors: ATTN_ERR_NULL, ATTN_ERR_RANK,
 * ATTN_ERR_DTYPE. */
ATTN_API attn_status attn_kv_cache_view(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache, int rank,
                                        attn_error *err);

/* The cached positions copied into caller memory: k and v of the shape
 * attn_kv_cache_view gives for k's rank (4, 3 or 2), any strides, f64, f32,
 * f16 or bf16, converted as attn_tensor_convert converts, a quantized
 * cache's rows widened as attn_dequantize widens them (keys quantized per
 * channel: a group's dequantized values, the residual's f16 keys): for the backward
 * pass and for inspection of any cache. k and v must not overlap each
 * other or the cache, nor have a stride 0 in a dimension of size > 1. Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE,
 * ATTN_ERR_DTYPE, ATTN_ERR_STRIDE, ATTN_ERR_OVERFLOW. Added in 0.4.0. */
ATTN_API attn_status attn_kv_cache_gather(attn_tensor *k, attn_tensor *v, const attn_kv_cache *cache,
                                          attn_error *err);

/* The number of positions filled; 0 for a NULL cache. */
ATTN_API int64_t attn_kv_cache_length(const attn_kv_cache *cache);

/* Forget all positions from `length` on (0 empties the cache), e.g. to
 * undo rejected draft tokens (keys quantized per channel cut inside a
 * quantized group: its kept positions become f16 residual rows of their
 * dequantized values). Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT
 * (length < 0 or more than are filled). */
ATTN_API attn_status attn_kv_cache_truncate(attn_kv_cache *cache, int64_t length, attn_error *err);

/* ------------------------------------------------------------------------ */
/* Paged KV cache                                                           */
/* ------------------------------------------------------------------------ */

/* A pool of fixed-size pages of keys and values, shared by many sequences,
 * in memory the caller provides: what a serving engine keeps for the
 * requests it runs at once (vLLM's block table, FlashInfer's paged KV,
 * FlashAttention-2's block_table). A page holds P consecutive positions of
 * every key/value head. A sequence is a page table, a list of page
 * indices, and a length in positions: position j lives in page
 * table[j / P], row j % P. Sequences are created, forked (the child shares
 * the parent's pages: a shared prompt prefix is stored once), appended to,
 * truncated and freed; pages are reference counted, and a page shared by
 * several sequences is copied before one of them writes into it (copy on
 * write), so no call on one sequence ever changes another.
 *
 * The memory layout is fixed, so that kernels and other engines can read
 * the pages directly (attn_kv_paged_view):
 *   K pages  (num_pages, Hk, P, E)   C order, the pool's dtype
 *   V pages  (num_pages, Hk, P, Ev)  C order, a separate region
 * or, with desc.head_major, (Hk, num_pages, P, E) and (Hk, num_pages, P, Ev).
 *   a page table: int32 page indices, one per P positions.
 * A pool of a quantized format (ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2; see
 * "Quantized storage") holds (num_pages, Hk, P) rows of
 * attn_quant_row_size(dtype, E) bytes each (Ev for values), in the same
 * order: append quantizes each new row by itself (so a sequence's bytes do
 * not depend on how its positions were split into appends), attention
 * reads the quantized rows where they lie and widens them a row at a time
 * inside the kernels (never the whole sequence), and gather returns the
 * widened values. Decoding (L <= 8 queries, the decode kernel) from q8 or q4
 * rows on a CPU with integer dot products rounds each query row to int8
 * instead, and may sum the values with bf16 weights: not attention on the
 * widened rows but within a stated bound of it ("How attention reads
 * them": a check against attention on the gathered values needs that
 * bound, not f32's). 32 values take 34 bytes in q8, 18 in q4 and 32 in
 * fp8 (64 in f16). Quantized pools take f32 or 16-bit queries, never f64
 * (f32 only with hadamard). With key_dtype ATTN_Q4C
 * or ATTN_Q2C (see "Keys quantized per channel") the key pages hold
 * (num_pages, Hk, P / 32) groups of attn_quant_group_size(key_dtype, E)
 * bytes instead, and each sequence's last positions (the group being
 * filled and desc.residual before it) lie in f16 in the pool's own memory
 * (max_sequences · Hk · (residual + 32) · E · 2 bytes, counted by
 * attn_kv_pages_bytes).
 *
 *   attn_kv_pages_desc d = attn_kv_pages_desc_default();
 *   d.heads = 8, d.key_dim = d.value_dim = 128, d.dtype = ATTN_F16;
 *   d.page_size = 16, d.num_pages = 4096, d.max_sequences = 256;
 *   size_t bytes;  attn_kv_pages_bytes(&bytes, &d, &err);
 *   attn_kv_pages *pool;  attn_kv_pages_init(&pool, malloc(bytes), bytes, &d, &err);
 *                         (a large pool: huge pages, see attn_kv_pages_init)
 *   int64_t a, b;
 *   attn_kv_pages_create(pool, &a, &err);
 *   attn_kv_pages_append(pool, &a, 1, &k_prompt, &v_prompt, cu, &err);
 *   attn_kv_pages_fork(pool, &b, a, &err);        b shares a's prompt
 *   each step: attn_kv_pages_append(pool, ids, n, &k_new, &v_new, cu, &err);
 *              attn_kv_pages_attend(&out, NULL, &q_new, cu_q, ids, n, pool, NULL, &opts, &err);
 *
 * Every call that changes the pool checks everything first: when it fails
 * (a full pool, an unknown or freed sequence, a sequence named twice, a
 * bad shape, dtype or pointer, a size that overflows) nothing was written,
 * and the pool's memory is byte for byte what it was. The library never
 * allocates for the pool. A pool is not locked: a call that changes it
 * while another thread reads it is a data race; reading (attend, gather,
 * the page tables) from several threads at once is fine. Sequence ids are
 * 0 .. max_sequences - 1, reused after attn_kv_pages_free. Added in 0.4.0.
 *
 * Many layers: a pool holds one layer's keys and values. Give each layer a
 * pool of its own and make the same calls on every pool in the same order
 * (create, fork, append with the same row counts, truncate, free): ids and
 * pages are handed out by the calls alone, never by the values, the
 * storage dtype, hadamard or head_major, so pools of the same page_size,
 * num_pages, max_sequences, max_length, key_dtype and residual then hold
 * the same ids and page tables (attn_kv_pages_sequence shows them; keys
 * quantized per channel with a residual window copy a shared page when a
 * group fills, so their pools match only each other). One plan of a step,
 * made on one layer's view, then runs every layer of the same storage
 * with that layer's pages (attn_kv_paged_run, the pool's view's k_pages
 * and v_pages), or, for pools with key_dtype or per-head fp8 scales, with
 * that layer's whole view (attn_kv_paged_run_view, which also checks that
 * the lengths agree); a layer stored in another dtype (q8 beside f32)
 * needs a plan of its own. */
typedef struct attn_kv_pages attn_kv_pages; /* opaque; lives in the caller's memory */

typedef struct attn_kv_pages_desc {
    size_t struct_size;    /* set by attn_kv_pages_desc_default() (see "Versioned structs") */
    int64_t heads;         /* Hk >= 1, the key/value heads (default 1) */
    int64_t key_dim;       /* E >= 1 */
    int64_t value_dim;     /* Ev >= 1 */
    attn_dtype dtype;      /* storage: ATTN_F32 (default), ATTN_F16, ATTN_BF16, ATTN_F64
                              (appends f64 keys and values, attends f64 queries
                              on the exact kernel: the oracle's path), or
                              quantized: ATTN_Q8, ATTN_Q4, ATTN_Q4_1 (value_dim, and key_dim
                              unless key_dtype stores the keys, multiples of
                              32), ATTN_E4M3, ATTN_E5M2 */
    int64_t page_size;     /* P, positions per page: 16 to 256 (default 16) */
    int64_t num_pages;     /* pages in the pool, 1 to INT32_MAX */
    int64_t max_sequences; /* sequences alive at once, 1 to INT32_MAX */
    int64_t max_length;    /* positions one sequence may hold, 0 to num_pages
                              · P (more: ATTN_ERR_SHAPE, as no sequence
                              can hold more than the pool): each sequence's
                              table has room for max_length / P pages,
                              rounded up; 0 (the default): num_pages · P */
    attn_dtype key_dtype;  /* 0 (default): keys in dtype, as values. ATTN_Q4C or
                              ATTN_Q2C: keys quantized per channel over groups of
                              32 positions, the last positions not yet forming a
                              group (and `residual` before them) kept in f16 per
                              sequence (see "Keys quantized
                              per channel"); values in dtype (not f64);
                              page_size a multiple of 32; no k_scale and no
                              hadamard below (ATTN_ERR_OPTION). Added in 0.4.0. */
    /* Added in 0.4.0. One scale per KV head for an e4m3 or e5m2 pool, as
     * attn_kv_cache_desc's (NULL: none; else `heads` finite floats > 0,
     * copied into the pool's memory at init, which attn_kv_pages_bytes
     * counts; another dtype with a scale: ATTN_ERR_DTYPE). Appends store
     * x / k_scale[h] quantized, attention and gather read code · k_scale[h],
     * and the pool's view carries them. */
    const float *k_scale;
    const float *v_scale;
    /* Added in 0.4.0. The Walsh–Hadamard rotation of the keys, as
     * attn_kv_cache_desc's (0: none, 1: on; a quantized dtype, key_dim a
     * power of two up to 1024). Appends store the format of H x, attend
     * turns the queries, gather turns the keys back; the pool's view
     * carries the flag, and its pages hold the turned rows. */
    int hadamard;
    /* Added in 0.4.0. With key_dtype: R, the recent positions kept in f16
     * besides the group being filled, as attn_kv_cache_desc's (0 or a
     * multiple of 32 up to ATTN_KEY_RESIDUAL_MAX; ATTN_ERR_OPTION else):
     * each sequence's residual rows take Hk · (R + 32) · E · 2 bytes of the
     * pool's memory. A group leaving the window is quantized into its page;
     * a page another sequence holds too (after a fork) is first copied, so
     * an append may take a page for each shared page a group leaves into
     * (counted before anything is written: ATTN_ERR_FULL). */
    int64_t residual;
    /* Added in 0.4.0. Where a page's KV heads lie: 0 (the default) side by
     * side in each page, the pages (num_pages, Hk, P, E), as vLLM lays out
     * its blocks; 1 head-major, (Hk, num_pages, P, E) (keys per channel:
     * (Hk, num_pages, P / 32) groups), so that one head's pages are apart
     * from the other heads' and, handed out in order, one run of memory.
     * Decode from memory reads a head's rows at about contiguous speed
     * head-major, and about 10% slower with the heads side by side
     * (docs/performance.md). The pool's view says which. */
    int head_major;
} attn_kv_pages_desc;

/* heads 1, dtype f32, page_size 16, max_length 0, the other sizes 0 (to be
 * set): as a value, attn_kv_pages_desc_default(); in place,
 * attn_kv_pages_desc_init(&d, sizeof d) (see "Versioned structs"). */
ATTN_API size_t attn_kv_pages_desc_init(attn_kv_pages_desc *desc, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_kv_pages_desc)
#define attn_kv_pages_desc_default attn_kv_pages_desc_default_inline

/* The bytes attn_kv_pages_init needs for `desc` (any alignment: the pool
 * aligns itself inside them): the pages, num_pages · Hk · P · (E + Ev)
 * elements, and the bookkeeping: 8 bytes per page, and per sequence 13
 * bytes and an int32 per entry of its table (max_length / P entries,
 * rounded up, at most num_pages), 8 bytes per head with per-head scales,
 * each region 64-byte aligned, and 8 KiB more so that the key pages and
 * the value pages each start on a 4 KiB boundary of memory (where the
 * hardware prefetcher starts its streams); the pool's own record, a few
 * hundred bytes, and 64 to align its start come first. Errors: ATTN_ERR_NULL,
 * ATTN_ERR_OPTION (struct_size), ATTN_ERR_SHAPE (a size out of its range
 * above), ATTN_ERR_DTYPE (a scale on a dtype other than e4m3 and e5m2 too),
 * ATTN_ERR_SCALE (a scale not finite or not > 0), ATTN_ERR_OVERFLOW. */
ATTN_API attn_status attn_kv_pages_bytes(size_t *bytes, const attn_kv_pages_desc *desc, attn_error *err);

/* An empty pool (every page free, no sequence) in `memory`, at least
 * attn_kv_pages_bytes bytes, which the caller keeps alive, and frees, after
 * the pool's last use; *pool points into memory. The pool holds pointers
 * into its memory: it cannot be moved or copied elsewhere. Errors: those of
 * attn_kv_pages_bytes, and ATTN_ERR_WORKSPACE when `bytes` is too small.
 *
 * Huge pages. Put a pool of 2 MiB or more on memory aligned to 2 MiB and
 * advised for transparent huge pages before anything touches it; on Linux:
 *   posix_memalign(&memory, 2 << 20, bytes rounded up to 2 MiB);
 *   madvise(memory, that size, MADV_HUGEPAGE);
 * (where THP is "always" the advice is the default; where it is "madvise",
 * as on several distributions, memory from malloc lies on 4 KiB pages).
 * On 4 KiB pages every page of memory takes a TLB entry of its own, and a
 * pool page of 16 f32 rows at E 64 is one 4 KiB page. Measured on Zen 5
 * with THP "madvise" (2 threads, 16 sequences, 56,743 keys, Hk 4, E 64,
 * 58 MB of keys; docs/performance.md): huge pages took 5-10% off the
 * decode's time, paged and contiguous alike. Paged decode over the same
 * rows contiguous read 1.07x to 1.24x on 4 KiB pages across runs, and
 * 1.07x to 1.16x (medians of 5 to 8 runs) on huge pages: what is left of
 * that gap is not the TLB but the pool's KV heads lying side by side in
 * each page. Pages a caller keeps itself (attn_kv_paged_view) are best
 * placed alike. */
ATTN_API attn_status attn_kv_pages_init(attn_kv_pages **pool, void *memory, size_t bytes,
                                        const attn_kv_pages_desc *desc, attn_error *err);

/* A new, empty sequence: its id in *seq (0, 1, 2, ... at first; the id
 * freed last is the next reused). Errors:
 * ATTN_ERR_NULL, ATTN_ERR_FULL (max_sequences are alive). */
ATTN_API attn_status attn_kv_pages_create(attn_kv_pages *pool, int64_t *seq, attn_error *err);

/* A new sequence *child holding everything `parent` holds, by sharing its
 * pages (each page's reference count goes up; nothing is copied but, with
 * keys quantized per channel, the parent's f16 residual rows, at most
 * desc.residual + 31 positions, which are each sequence's own; a group the
 * child or the parent quantizes later into a page both hold goes into its
 * own copy of that page). Later
 * appends and truncations of either leave the other as it is. Errors:
 * ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (parent unknown or freed), ATTN_ERR_FULL
 * (max_sequences are alive). */
ATTN_API attn_status attn_kv_pages_fork(attn_kv_pages *pool, int64_t *child, int64_t parent, attn_error *err);

/* Free sequence `seq`: its pages' reference counts go down, and a page no
 * sequence holds any more is free again. The id may then be reused.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (seq unknown or already freed). */
ATTN_API attn_status attn_kv_pages_free(attn_kv_pages *pool, int64_t seq, attn_error *err);

/* Append new positions to n sequences at once, each its own number: the
 * new keys and values are packed, k (total, Hk, E) and v (total, Hk, Ev),
 * any strides, f32, f16 or bf16 (rounded to the pool's dtype, nearest
 * even, or quantized row by row as attn_quantize does; an f64 pool takes
 * f64 only); sequence seqs[i] receives rows cu_seqlens[i] .. cu_seqlens[i+1]
 * - 1 (cu_seqlens: n + 1 int64 offsets, 0 first, non-decreasing, total
 * last, as FlashAttention's cu_seqlens). A sequence given 0 rows is left as
 * it is. New pages come from the pool's free pages; a sequence whose last,
 * partly filled page is shared with another (after a fork) first gets its
 * own copy of that one page (the filled rows of it; when the page's other
 * holders write into it earlier in seqs in the same call, appending to it
 * or, with a residual window, a group leaving into it, each of them copies
 * it and the last writer keeps the page itself); full pages stay shared. n = 0 does nothing. Nothing is written unless the whole call
 * fits. k and v must not overlap the pool's memory (ATTN_ERR_STRIDE).
 * Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT (n < 0, a sequence unknown,
 * freed, or named twice; offsets not as above), ATTN_ERR_RANK,
 * ATTN_ERR_SHAPE, ATTN_ERR_DTYPE, ATTN_ERR_OVERFLOW, ATTN_ERR_STRIDE,
 * ATTN_ERR_FULL (not enough free pages, or a sequence would pass
 * max_length): every one before anything is written. */
ATTN_API attn_status attn_kv_pages_append(attn_kv_pages *pool, const int64_t *seqs, int64_t n,
                                          const attn_tensor *k, const attn_tensor *v, const int64_t *cu_seqlens,
                                          attn_error *err);

/* Forget sequence seq's positions from `length` on (0 empties it), e.g.
 * rejected draft tokens: the pages past the new end are released; a
 * sibling sharing them keeps them. Keys quantized per channel: the groups
 * the shorter sequence keeps in its residual window (see "Keys quantized
 * per channel") become its f16 residual rows of their dequantized values
 * (the pages are not written). Errors: ATTN_ERR_NULL, ATTN_ERR_ARGUMENT
 * (seq unknown or freed; length < 0 or more than it holds). */
ATTN_API attn_status attn_kv_pages_truncate(attn_kv_pages *pool, int64_t seq, int64_t length, attn_error *err);

/* Sequence seq's length in positions (*length) and its page table
 * (*pages, the ceil(length / P) page indices, valid until the next call
 * that changes the pool); either pointer may be NULL. Errors:
 * ATTN_ERR_NULL (pool), ATTN_ERR_ARGUMENT (seq unknown or freed). */
ATTN_API attn_status attn_kv_pages_sequence(const attn_kv_pages *pool, int64_t seq, int64_t *length,
                                            const int32_t **pages, attn_error *err);

/* The pool's free pages, and how many sequences hold page `page` (0: it is
 * free; -1 for a NULL pool or a page outside it): for accounting. */
ATTN_API int64_t attn_kv_pages_free_pages(const attn_kv_pages *pool);
ATTN_API int64_t attn_kv_pages_page_refs(const attn_kv_pages *pool, int64_t page);

/* Pages and page tables that need no pool: how a caller that manages its
 * own pages (vLLM style) describes them to the functions below, and how a
 * pool describes itself (attn_kv_pages_view). Nothing is copied; the
 * caller's memory is only read. Sequence i (0 .. num_sequences - 1) has
 * lengths[i] positions; its page table is
 *   table_offsets NULL:  page_table + i · table_stride, table_stride
 *                        entries (a block table (num_sequences,
 *                        table_stride), FlashAttention-2's and vLLM's);
 *   table_offsets given: page_table + table_offsets[i], table_offsets[i+1]
 *                        - table_offsets[i] entries (FlashInfer's indptr
 *                        and indices; num_sequences + 1 offsets,
 *                        non-decreasing);
 * and its first ceil(lengths[i] / page_size) entries must be pages of the
 * pool, 0 .. num_pages - 1 (attn_kv_paged_check). Large pages' memory is
 * best on 2 MiB-aligned huge pages (see attn_kv_pages_init). */
typedef struct attn_kv_paged_view {
    size_t struct_size;   /* set by attn_kv_paged_view_default() (see "Versioned structs") */
    attn_dtype dtype;     /* ATTN_F32 (default), ATTN_F16, ATTN_BF16, ATTN_F64 (f64 queries),
                             or quantized as the pool's */
    int64_t heads;        /* Hk >= 1 (default 1) */
    int64_t key_dim;      /* E >= 1 */
    int64_t value_dim;    /* Ev >= 1 */
    int64_t page_size;    /* P >= 1 */
    int64_t num_pages;    /* >= 1 */
    const void *k_pages;  /* (num_pages, Hk, P, E), C order (head_major: (Hk, num_pages, P, E)) */
    const void *v_pages;  /* (num_pages, Hk, P, Ev), C order (head_major: (Hk, num_pages, P, Ev)) */
    int64_t num_sequences;        /* >= 0 */
    const int64_t *lengths;       /* (num_sequences,) positions, >= 0 */
    const int32_t *page_table;    /* the tables, as above */
    int64_t table_stride;         /* entries per row without table_offsets */
    const int64_t *table_offsets; /* (num_sequences + 1,) or NULL */
    attn_dtype key_dtype;         /* 0 (default): keys in dtype. ATTN_Q4C or ATTN_Q2C
                                     (added in 0.4.0): k_pages hold (num_pages, Hk,
                                     page_size / 32) groups of
                                     attn_quant_group_size(key_dtype, E) bytes, and
                                     sequence i's positions from 32·floor(lengths[i]
                                     / 32) - residual (at least 0) on are rows (i,
                                     h, 0 ..) of k_residual */
    const void *k_residual;       /* with key_dtype: (num_sequences, Hk, residual +
                                     32, E) f16, C order; else unused */
    /* Added in 0.4.0: e4m3 or e5m2 pages' scales, one per head (Hk floats,
     * finite and > 0), or NULL (the default) for none: code c of head h
     * stands for c · k_scale[h] (values: v_scale). A pool's view points
     * at the pool's own. A plan (attn_kv_paged_plan_init) takes them as
     * its view's; attn_kv_paged_run_view gives each layer's its own. */
    const float *k_scale;
    const float *v_scale;
    /* Added in 0.4.0: 1 when the key pages hold rows turned by the
     * Walsh–Hadamard rotation (attn_kv_pages_desc.hadamard; a quantized
     * dtype, key_dim a power of two up to 1024), 0 (the default) when not.
     * attn_kv_paged_attend (and a plan's run) then turns the queries,
     * attn_kv_paged_gather turns the keys back. */
    int hadamard;
    /* Added in 0.4.0: with key_dtype, R, the residual window (0 or a
     * multiple of 32 up to ATTN_KEY_RESIDUAL_MAX; ATTN_ERR_OPTION else):
     * k_residual is then (num_sequences, Hk, R + 32, E) f16, and sequence
     * i's positions from full = max(0, 32·floor(lengths[i] / 32) - R) on
     * are its rows (i, h, p - full). A pool's view carries its own. */
    int64_t residual;
    /* Added in 0.4.0: 0 (the default) for pages (num_pages, Hk, P, E) as
     * above, 1 for head-major pages (Hk, num_pages, P, E) (and Ev; keys per
     * channel: (Hk, num_pages, P / 32) groups), attn_kv_pages_desc's
     * head_major. A pool's view carries its own. */
    int head_major;
    /* Added in 0.4.0: NULL (the default), or a counter that moves on
     * whenever a sequence's length or page table changes, which a plan
     * (attn_kv_paged_plan_init) reads when it is made and each of its runs
     * compares: a plan made before the sequences grew or shrank is then
     * refused (ATTN_ERR_PLAN, "plan again") instead of reading the
     * positions and pages it found, which the pool may have given to
     * another sequence. A pool's view points at the pool's own, moved on
     * by every append that adds positions, truncate that drops some, fork
     * and free (create does not: a new sequence is empty, as the free id
     * was); a pool made again, in the same memory too, starts its counter
     * 2^32 past the start of the pool made before it, so that a plan of
     * the old pool is refused there. A caller's own view may point it at a
     * counter of its own, which must stay valid, as the page table must,
     * while a plan of the view is used. */
    const uint64_t *generation;
} attn_kv_paged_view;

/* dtype f32, heads 1, every other field 0 or NULL (to be set):
 * attn_kv_paged_view_default(), or attn_kv_paged_view_init(&v, sizeof v). */
ATTN_API size_t attn_kv_paged_view_init(attn_kv_paged_view *view, size_t struct_size);
ATTN_VERSIONED_DEFAULT_(attn_kv_paged_view)
#define attn_kv_paged_view_default attn_kv_paged_view_default_inline

/* Check a view: its sizes (ATTN_ERR_SHAPE, ATTN_ERR_DTYPE, ATTN_ERR_OVERFLOW
 * for pages or a table whose bytes overflow), its pointers (ATTN_ERR_NULL), the
 * offsets and lengths (ATTN_ERR_ARGUMENT: negative, decreasing, or a table
 * too short for its length), and every page index its sequences use
 * (ATTN_ERR_ARGUMENT naming the sequence, the entry and the index, for an
 * index outside 0 .. num_pages - 1). Every function that takes a view
 * makes this check first. Errors: also ATTN_ERR_OPTION (struct_size). */
ATTN_API attn_status attn_kv_paged_check(const attn_kv_paged_view *view, attn_error *err);

/* The pool as a view (*view's struct_size set by the caller, as for
 * attn_get_tuning): its pages, and its sequences as the rows of a block
 * table indexed by sequence id (num_sequences = max_sequences; a free id
 * has length 0), valid until the next call that changes the pool.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_OPTION (struct_size, also one that ends
 * before table_stride, which every pool fills; or a view struct from
 * an older attn.h that ends before a field this pool uses, key_dtype,
 * k_residual, k_scale, v_scale, hadamard, residual or head_major: read back with that
 * field's default, it would describe other keys). */
ATTN_API attn_status attn_kv_pages_view(attn_kv_paged_view *view, const attn_kv_pages *pool, attn_error *err);

/* Copy sequence i's keys and values out of the pages: k (Hk, length, E)
 * and v (Hk, length, Ev), any strides, any float dtype (converted as
 * attn_tensor_convert converts; quantized pages as attn_dequantize widens
 * them), where length is lengths[i]: to export a
 * sequence, or to check the pages against a contiguous copy. k and v must
 * not overlap each other or the memory the view reads (pages, lengths,
 * table, offsets), nor have a stride 0 in a dimension of size > 1. Errors: those of attn_kv_paged_check,
 * ATTN_ERR_ARGUMENT (i outside the view), ATTN_ERR_NULL, ATTN_ERR_RANK,
 * ATTN_ERR_SHAPE, ATTN_ERR_DTYPE, ATTN_ERR_STRIDE. */
ATTN_API attn_status attn_kv_paged_gather(attn_tensor *k, attn_tensor *v, const attn_kv_paged_view *view, int64_t i,
                                          attn_error *err);

/* The same for sequence `seq` of a pool (ATTN_ERR_ARGUMENT for an unknown
 * or freed one). */
ATTN_API attn_status attn_kv_pages_gather(attn_tensor *k, attn_tensor *v, const attn_kv_pages *pool, int64_t seq,
                                          attn_error *err);

/* Attention of the new queries of n sequences of a pool, in one call: q
 * packed (total_q, Hq, E), f32 (f64 for f64 pages, on the exact kernel;
 * or f16 or bf16: then out is in q's dtype, computed through f32 copies as
 * attn_sdpa_varlen does for a 16-bit q, bitwise the f32 call on the
 * widened q with out rounded once), any strides, Hq a multiple of Hk, with
 * the queries of sequence seqs[i] in rows cu_seqlens_q[i] ..
 * cu_seqlens_q[i+1] - 1 (n + 1 int64 offsets, 0 first, non-decreasing,
 * total_q last); out (total_q, Hq, Ev) in q's dtype and lse (total_q, Hq)
 * (f64 for f64 q, else f32) or NULL, any strides. Each sequence's rows get exactly what
 * attn_kv_cache_attend gives for that sequence alone, with masks[i] as its
 * options->mask and dropout_seed + i as its dropout seed (as
 * attn_sdpa_varlen numbers them): its L_i queries are its last L_i
 * positions, options->causal is ATTN_CAUSAL_BOTTOM_RIGHT (NULL options
 * give it) or ATTN_CAUSAL_NONE, top-left is ATTN_ERR_OPTION; scale, the
 * score variants (softcap, ALiBi, window, sinks), RoPE (key j at
 * position_offset + j of its own sequence), dropout, compute and the
 * context apply per sequence. masks: NULL (no mask), or n pointers, each
 * NULL or a mask as attn_sdpa takes it for (Hq, L_i, S_i) (bool or f32,
 * broadcasting), applied with the causal mode. options->mask and pieces
 * (total_queries, total_keys) are not taken (ATTN_ERR_OPTION). A sequence
 * of 0 queries is skipped; one with queries and no positions gets out 0
 * and lse -inf (or its head's sink), as attn_sdpa gives S = 0 ("Dimensions
 * of 0"; ATTN_ERR_ARGUMENT before 0.4.0). A sequence may be named more than once (its queries
 * attend the same keys).
 *
 * The kernels read the keys and values in place, in their pages (no copy
 * is made), and the sequences are scheduled as one batch, as
 * attn_sdpa_varlen schedules its sequences: every query block of every
 * sequence is a work item for the threads. Every argument is checked, for
 * every sequence (the context's workspace too: it must hold what the
 * whole batch needs, ATTN_ERR_WORKSPACE), before any output is written;
 * a pool that stores keys with the Hadamard rotation needs, at the front
 * of that workspace, q's turned copy too: 4 bytes per element of q (one for an empty q),
 * rounded up to 64, and 63 more (without a workspace it is allocated).
 * Without a workspace all memory is had before any row is written, so
 * ATTN_ERR_NO_MEMORY too leaves the outputs as they were. Errors: those of attn_sdpa
 * (ATTN_ERR_MASK for a mask, named by its sequence), ATTN_ERR_ARGUMENT (an
 * unknown or freed sequence, offsets not as above), ATTN_ERR_STRIDE (out
 * or lse overlapping each other, q, a mask, the offsets, or the memory the
 * pool or view reads: a pool's whole memory, its header and bookkeeping
 * included; the context's workspace overlapping any of them). */
ATTN_API attn_status attn_kv_pages_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                          const int64_t *cu_seqlens_q, const int64_t *seqs, int64_t n,
                                          const attn_kv_pages *pool, const attn_tensor *const *masks,
                                          const attn_sdpa_options *options, attn_error *err);

/* The same over a caller's view: the view's num_sequences sequences, all
 * of them, in order (cu_seqlens_q has num_sequences + 1 offsets; masks
 * NULL or num_sequences pointers). */
ATTN_API attn_status attn_kv_paged_attend(attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                          const int64_t *cu_seqlens_q, const attn_kv_paged_view *view,
                                          const attn_tensor *const *masks, const attn_sdpa_options *options,
                                          attn_error *err);

/* Plan once, run every layer (see attn_sdpa_plan): a step's attention over
 * a view (attn_kv_paged_attend's call, the view's num_sequences sequences
 * in order) planned in memory[0 .. bytes) (attn_sdpa_plan_bytes with batch
 * = view->num_sequences): every check, each sequence's page table and
 * length, its kernel and the workspace the kernels take (*workspace_bytes).
 * Then attn_kv_paged_run runs a layer: q, out and lse of the plan's layout,
 * and that layer's pages, k_pages and v_pages, laid out as the view's
 * (an engine's layers keep their pages under the same page tables, as
 * vLLM's do), with no allocation. Results are bitwise attn_kv_paged_attend's
 * on the view with those pages. The view's lengths are copied into the
 * plan; its page table (and table_offsets) is read at every run, so it
 * must stay valid and unchanged, as must masks (the array and its
 * tensors), while the plan is used. A run reads the planned positions
 * where the plan found them, so once the sequences grow or shrink the
 * plan is stale: plan again (as each decode step does, its lengths being
 * new). A view with a generation counter (a pool's view has its pool's)
 * says so: the plan keeps the counter's value, and a run that finds it
 * moved on is refused with ATTN_ERR_PLAN, nothing written (one load and
 * one compare a run; the caller's lengths are not read again, and may be
 * gone). A view without one (generation NULL) is not checked: a stale
 * plan then reads the planned lengths, pages a truncate released
 * included, and (keys quantized per channel) residual rows that have
 * moved, without an error. For a pool: its view
 * (attn_kv_pages_view), with 0 queries for the ids not in the step.
 * Every view attn_kv_paged_attend takes is planned: keys quantized per
 * channel (key_dtype, with their residual rows), per-head fp8 scales
 * (k_scale, v_scale) and keys stored with the Hadamard rotation (each run
 * then turns q into the front of its workspace, which *workspace_bytes
 * counts: 4 bytes per element of q (one for an empty q), rounded up to 64, and 63 more; q must
 * be f32). Residual rows and scales belong to a layer as its pages do: a
 * layer other than the planned view's runs through attn_kv_paged_run_view,
 * with its own. Errors: those of attn_kv_paged_attend, and those of
 * attn_sdpa_plan_init (ATTN_ERR_WORKSPACE: bytes too small). Added in 0.4.0. */
ATTN_API attn_status attn_kv_paged_plan_init(attn_sdpa_plan **plan, void *memory, size_t bytes,
                                             size_t *workspace_bytes, attn_tensor *out, attn_tensor *lse,
                                             const attn_tensor *q, const int64_t *cu_seqlens_q,
                                             const attn_kv_paged_view *view, const attn_tensor *const *masks,
                                             const attn_sdpa_options *options, attn_error *err);

/* Run one layer from a paged plan: out and lse (NULL exactly when the
 * plan's lse was) get what attn_kv_paged_attend gives for q over the
 * planned view with these pages, bitwise. workspace: at least the plan's
 * workspace_bytes (NULL where that is 0, as for attn_sdpa_run).
 * ATTN_VERBOSE prints an "sdpa_run paged" line. Errors:
 * ATTN_ERR_NULL (plan, a tensor or its data, the pages, workspace NULL
 * where the plan needs some),
 * ATTN_ERR_PLAN (a tensor unlike the plan's; memory that holds no paged
 * plan: attn_sdpa_run takes the others, and refuses this one; a planned
 * view whose generation counter has moved on since the plan was made:
 * the sequences changed, plan again; a run of this plan in progress on
 * another thread, as attn_sdpa_run's),
 * ATTN_ERR_WORKSPACE, ATTN_ERR_STRIDE (out or lse overlapping q, the pages,
 * the view's lengths, tables or generation counter, a mask; the workspace
 * overlapping any of them, out, lse or the plan's memory), and any error
 * of the kernels.
 * A planned view with residual rows (key_dtype) or per-head scales runs
 * only its own pages here (other pages: ATTN_ERR_PLAN; use
 * attn_kv_paged_run_view). Nothing is written unless the checks pass. */
ATTN_API attn_status attn_kv_paged_run(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                                       const void *k_pages, const void *v_pages, void *workspace,
                                       size_t workspace_size, attn_error *err);

/* Run one layer from a paged plan given that layer's whole view: its
 * pages, page tables, residual rows (key_dtype) and per-head scales are
 * this run's (a pool per layer: each pool's attn_kv_pages_view). The view
 * is checked as attn_kv_paged_check checks it, and must be laid out as the
 * planned one: the same dtype, key_dtype, heads, key_dim, value_dim,
 * page_size, num_pages, num_sequences, hadamard, residual (the window),
 * scales given or not, and every sequence's length (ATTN_ERR_PLAN naming
 * what differs; head_major may differ, the rows being read through this
 * view); a layer whose generation points at the planned view's counter
 * (the planned pool's own view, or one in step with it) must find it where
 * the plan did (ATTN_ERR_PLAN), a layer with another counter or none is
 * judged by its lengths. out and lse
 * get what attn_kv_paged_attend gives over `layer`, bitwise, with no
 * allocation. Errors: those of attn_kv_paged_run, of attn_kv_paged_check,
 * and ATTN_ERR_STRIDE for out or lse overlapping the layer's residual rows
 * or scales. Added in 0.4.0. */
ATTN_API attn_status attn_kv_paged_run_view(attn_sdpa_plan *plan, attn_tensor *out, attn_tensor *lse,
                                            const attn_tensor *q, const attn_kv_paged_view *layer, void *workspace,
                                            size_t workspace_size, attn_error *err);

/* The attention layer's step (attn_mha_cached) for n sequences of a pool
 * at once, each of its own length and position: x packed (total, E), f32
 * (f64, with f64 parameters, over an f64 pool: the exact path),
 * any strides, sequence seqs[i]'s new positions in rows cu_seqlens[i] ..
 * cu_seqlens[i+1] - 1 (n + 1 int64 offsets, 0 first, non-decreasing,
 * total last; 0 rows leave a sequence as it is); out (total, E) of x's
 * dtype. Each
 * sequence's rows are projected to q, k and v, RoPE (options->rope) turns
 * them at that sequence's own positions, length_i + l (length_i: what it
 * held before the call; the rope's position_offset added), the new keys
 * and values are appended to the pool (one attn_kv_pages_append), the new
 * queries attend to everything the sequence holds (one
 * attn_kv_pages_attend, with masks[i] for sequence i: NULL or n pointers,
 * each NULL or a mask for (Hq, L_i, length_i + L_i) as attn_sdpa takes it,
 * bool or x's dtype, broadcasting: a bool TRUE lets the key take part, the
 * opposite of attn_mha's and attn_mha_cached's masks), then out_proj. The
 * pool's heads must be num_kv_heads, its key_dim and value_dim embed_dim /
 * num_heads. Sequence i's rows are bitwise what attn_mha_cached gives for
 * it alone, unbatched, with a contiguous cache holding the same keys (and
 * dropout seed + i, as attn_kv_pages_attend numbers them). The causal rule
 * is attn_mha_cached's (bottom-right, NULL options give it, or none);
 * attn_mask, key_padding_mask, bias_k/bias_v and add_zero_attn are
 * ATTN_ERR_OPTION. Each sequence may be named once (ATTN_ERR_ARGUMENT
 * otherwise, nothing appended). out, x, the parameters and the context's
 * workspace must not overlap the pool's memory, its pages, header and
 * bookkeeping (ATTN_ERR_STRIDE). Nothing is appended when the pool is
 * full (ATTN_ERR_FULL) or an argument is bad (a mask that does not fit its
 * sequence included: the masks are checked first, ATTN_ERR_MASK naming the
 * sequence); when the attention fails after the append (too small a
 * workspace, no memory), each
 * sequence is truncated back to its length (its contents as before; a last page
 * copied for the append stays its own). Errors: those of attn_mha,
 * attn_kv_pages_append and attn_kv_pages_attend, ATTN_ERR_RANK (x not
 * rank 2), ATTN_ERR_DTYPE (x neither f32 nor f64, or f64 x over a pool
 * that is not f64, or f32 x over an f64 one), ATTN_ERR_SHAPE (a pool of
 * other heads or sizes). Added in 0.4.0. */
ATTN_API attn_status attn_mha_paged(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens,
                                    const int64_t *seqs, int64_t n, attn_kv_pages *pool,
                                    const attn_tensor *const *masks, const attn_mha_params *params,
                                    const attn_mha_options *options, attn_error *err);

/* The same step for n sequences of a contiguous cache (attn_kv_cache) at
 * once, each of its own length and position, as FlashAttention-2's
 * flash_attn_with_kvcache takes them (cache_seqlens, cache_batch_idx): the
 * cache's B rows are B sequences of up to `capacity` positions each, and
 * the caller keeps how many each holds, lengths[0 .. B) (int64, each 0 to
 * capacity; zeros for an empty cache; a length may be lowered between
 * steps, forgetting the positions past it: with keys quantized per channel
 * the row is then cut back as attn_kv_cache_truncate cuts).
 * Sequence i is cache row rows[i] (n
 * distinct rows, any subset in any order); its new positions are rows
 * cu_seqlens[i] .. cu_seqlens[i+1] - 1 of x (total, E), any strides, and
 * of out (total, E), as attn_mha_paged packs them: f32 over an f32, f16,
 * bf16 or quantized cache, f64 (with f64 parameters) over an f64 cache,
 * the exact path attn_mha_cached takes (tested: bitwise attn_mha_cached
 * per row, and PyTorch float64 within 1e-12). Its rows are
 * projected, RoPE turns them at its own positions lengths[rows[i]] + l
 * (the rope's position_offset added), its new keys and values are written
 * to its row after the positions it holds, the new queries attend to
 * everything it holds (one batch: the kernels read the cache in place,
 * each row as one page of a paged view), with masks[i] (NULL or n
 * pointers, each NULL or a mask for (Hq, L_i, lengths[rows[i]] + L_i), as
 * attn_mha_paged takes them: attn_sdpa's polarity, a bool TRUE keeps the
 * key), then out_proj; on success lengths[rows[i]] grows by L_i. Sequence i's
 * rows are bitwise what attn_mha_cached gives for it alone, unbatched, in
 * a cache of one row holding the same keys (and dropout seed + i, as
 * attn_kv_pages_attend numbers them). The causal rule is attn_mha_cached's
 * (bottom-right, NULL options give it, or none); attn_mask,
 * key_padding_mask, bias_k/bias_v and add_zero_attn are ATTN_ERR_OPTION.
 * The cache must hold num_kv_heads heads of embed_dim / num_heads keys and
 * values (ATTN_ERR_SHAPE), of a dtype x goes with (ATTN_ERR_DTYPE, before
 * anything is written). The cache's own length (attn_kv_cache_length, what
 * attn_kv_cache_append and attn_kv_cache_attend use for all B rows at once)
 * is neither read nor changed: drive a cache through one or the other. out,
 * x and the parameters must not overlap the cache's memory or lengths
 * (ATTN_ERR_STRIDE). Every argument is checked before anything is written
 * (a row outside the cache or named twice, a length outside 0 ..
 * capacity: ATTN_ERR_ARGUMENT; a row without room for its new positions:
 * ATTN_ERR_FULL; a mask that does not fit its sequence: ATTN_ERR_MASK).
 * When the attention fails after the keys are written (too small a
 * workspace) or memory runs out, lengths are left as
 * they were, so the cache holds what it held (only positions past each
 * length were written; with keys quantized per channel, a row whose length
 * was lowered stays cut back to it, as its next write would cut it).
 * Errors: those of attn_mha_paged, with the cache in
 * place of the pool. Added in 0.4.0. */
ATTN_API attn_status attn_mha_cached_batch(attn_tensor *out, const attn_tensor *x, const int64_t *cu_seqlens,
                                           const int64_t *rows, int64_t n, struct attn_kv_cache *cache,
                                           int64_t *lengths, const attn_tensor *const *masks,
                                           const attn_mha_params *params, const attn_mha_options *options,
                                           attn_error *err);

/* ------------------------------------------------------------------------ */
/* Threads and instruction sets                                             */
/* ------------------------------------------------------------------------ */

/* f32 attention runs on a small pool of worker threads that the library
 * starts at the first call that needs them, one with a workspace too
 * (attn_context.workspace says how to start them earlier). Results are
 * bitwise identical for any thread count: work is split into items whose
 * results do not depend on who runs them.
 * n >= 1 sets the number of threads (the caller included; at most 256);
 * n <= 0 restores the default: ATTN_NUM_THREADS from the environment (a
 * whole number >= 1, 256 if larger; other text, "0" and "-1" included, is
 * ignored), else the number of CPUs this process may run on: its affinity
 * mask where the system has one (taskset, a container's cpuset), else the
 * CPUs online (counted once, at the first call that needs it). */
ATTN_API void attn_set_num_threads(int n);
/* The number of threads the next call will use. */
ATTN_API int attn_get_num_threads(void);
/* Join the worker threads and free them (also done at exit). Calls after
 * this start a new pool. Must not run concurrently with attention calls.
 * fork() is safe at any time (Python's multiprocessing, DataLoader workers):
 * it waits for a threaded call in progress in another thread to finish, and
 * the child starts a pool of its own at its first threaded call. The one
 * exception: fork() from a signal handler that interrupted a threaded call
 * on the same thread waits for that call, which cannot go on, for ever
 * (POSIX makes fork() with fork handlers unsafe in a signal handler; call
 * _exit or a plain syscall there instead).
 * pthread_cancel of a thread inside a threaded call (or attn_shutdown)
 * takes effect after the call's work is done and the pool let go, at the
 * thread's next cancellation point: the pool holds no waits that a
 * cancellation could cut short, so it stays usable (in earlier versions,
 * such a cancel left the pool held: every later call ran on one thread,
 * and fork() and exit waited forever). */
ATTN_API void attn_shutdown(void);

/* The instruction set of the f32 microkernels in use: "avx512", "avx2" or
 * "c". Chosen once per process from the CPU; the environment variable
 * ATTN_ISA=avx512|avx2|c forces one (ignored if the CPU lacks it). */
ATTN_API const char *attn_isa(void);

/* The tuning in use: the core attn detected from CPUID, and the block sizes
 * of the ISA's kernels on this CPU (chosen once per process, with
 * attn_isa). The forward's keys per block come from the caches CPUID
 * describes (leaf 4 on Intel, 0x8000001D on AMD: size, ways, line, sets)
 * by BLIS's analytical model: a block of keys and values of a head of 128
 * fills at most half of L2's ways, so that it stays there while the next
 * block is fetched (256 keys on a Zen 3, 512 on a Zen 4 or Zen 5, 1024 on
 * a Sapphire Rapids). blocks_for says "cpuid" then, or "generic" where
 * CPUID describes no caches (the model on a 1 MiB, 8-way L2). The other
 * sizes are the same on every core. core is a name for reports only
 * ("zen3", "zen4", "zen5", "intel-avx512" or "generic"): no size depends
 * on it.
 * Set tuning->struct_size = sizeof(attn_tuning) before the call; an older,
 * smaller struct gets the fields it has. Errors: ATTN_ERR_NULL, and
 * ATTN_ERR_OPTION for a struct_size below sizeof(size_t), larger than
 * this library's or not a multiple of _Alignof(size_t). */
typedef struct attn_tuning {
    size_t struct_size;
    const char *core;        /* detected: "zen3", "zen4", "zen5", "intel-avx512" or "generic" */
    const char *isa;         /* as attn_isa() */
    const char *blocks_for;  /* where the blocks below come from: "cpuid" (this
                                CPU's caches) or "generic" (CPUID describes none) */
    int block_rows;          /* forward (flash): query rows per work item */
    int block_keys;          /* forward (flash): keys per block */
    int backward_block_rows; /* backward: query rows per block */
    int backward_block_keys; /* backward: keys per block */
    int decode_chunk;        /* decode (L <= 8): the most keys per work item
                                (shorter contexts split into shorter chunks) */
    /* The multi-head layer's products (a blocked GEMM, added in 0.3.0:
     * summed in double for an f64 layer and for attn_mha_backward's
     * gradients, in f32 for an f32 layer, on bf16 pairs for a bf16 weight
     * where the CPU has a bf16 GEMM): rows, depth and columns packed at a
     * time, before each kernel rounds them to its register tile (the depth
     * counted in pairs on bf16). */
    int gemm_rows, gemm_depth, gemm_cols;
} attn_tuning;
ATTN_API attn_status attn_get_tuning(attn_tuning *tuning, attn_error *err);

/* Verbose mode: with ATTN_VERBOSE=1 in the environment (read at the first
 * call; any value but "", "0", "false", "no" and "off", in any case, turns
 * it on), or after attn_set_verbose(1), every attention call prints one line
 * to stderr, e.g.
 *   attn: sdpa kernel=flash isa=avx2 threads=2/2 q=f32(2,8,128,64)
 *   k=f32(2,2,256,64) v=f32(2,2,256,64) mask=none causal=bottom-right
 *   compute=f32 dropout=0 softcap=0 alibi=no window=0 sinks=no rope=no
 *   weights=no lse=no fallback=0/16 ms=1.234
 * (on one line): the call (sdpa, sdpa_reference, scores, sdpa_paged,
 * sdpa_varlen, sdpa_varlen_paged, sdpa_run, sdpa_backward,
 * sdpa_varlen_backward; attn_mha adds a line naming its projections'
 * kernels, see attn_mha),
 * the kernel that ran (exact, reference, scores, flash, decode or
 * flash_backward; empty for a call with a dimension of 0, which runs no
 * kernel: see "Dimensions of 0"; none for a ragged or paged batch, forward,
 * backward or a plan's run, in which no sequence has both queries and keys;
 * decode may add key_dot=, the integer dot products that
 * took quantized keys (int8_avx512vnni, int8_avxvnni or int8_avx2 for q8
 * and q4 keys; int8_groups_avx512vnni or int8_groups_avx2 for keys
 * quantized per channel),
 * value_dot=, how it accumulated quantized values (bf16_avx512bf16,
 * f32_avx512 or int8_avx512vnni, see "Quantized storage"), side_by_side=N when its work items each read
 * the rows of N KV heads that lie side by side in memory, as in keys
 * packed (tokens, Hk, E), together, heads_per_call=N when its
 * microkernels read N such heads' rows of each position at once (f32 keys
 * and values on the AVX2 and AVX-512 kernels), and rows=in_place when its
 * microkernels read every key and value row where it lies (f32, f16,
 * bf16, q8, q4, q4_1, e4m3, e5m2 on the AVX2 and AVX-512 kernels; q4c and
 * q2c groups where key_dot= names their integer kernel, and their window's
 * f16 rows), rows=widened when some were first widened to f32 a group of
 * rows at a time (the portable kernels' 16-bit and quantized rows, strided
 * columns, groups without their integer kernel)),
 * the microkernels' ISA, the threads (threads=R/T: R
 * threads ran the call's work items of the T it was given, the context's
 * or the process-wide number, at most one per item; R is 1 when another
 * call held the thread pool, for the call then runs on its caller's
 * thread alone, and may be below T when the items ran out before a worker
 * woke), the operands, the options that change the scores (dropout,
 * softcap, alibi, window, sinks, rope), the outputs asked for (weights,
 * lse), and how many work items (flash: blocks of query
 * rows; decode: (batch, head) slices) the exact kernel computed instead
 * because their inputs were not finite or too large for f32. This is
 * the only output the library ever makes. attn_set_verbose(0) turns it off,
 * n < 0 restores the environment's setting. The setting is process-wide. */
ATTN_API void attn_set_verbose(int on);

/* ------------------------------------------------------------------------ */
/* .npy files                                                               */
/* ------------------------------------------------------------------------ */

/* Read a NumPy .npy file (format versions 1.0, 2.0 and 3.0), C or Fortran
 * order, dtype '<f4', '<f8', '<f2' (ATTN_F16) or '|b1' (big-endian
 * '>f4', '>f8', '>f2' too, its bytes put in the host's order), rank
 * 0..ATTN_MAX_RANK. path must name a regular file: a FIFO, a device or a
 * directory is ATTN_ERR_IO at once (a FIFO is not waited on for a writer).
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

/* Read a 1-D .npy file of integers, int64 or int32 ('<i8', '<i4', or '>i8', '>i4'; offsets
 * such as attn_sdpa_varlen's cu_seqlens) into *values (malloc'd, *count of
 * them, widened to int64; the caller frees it with free()). The file is
 * checked as attn_npy_read checks one. Errors: those of attn_npy_read, and
 * ATTN_ERR_NPY_UNSUPPORTED (another dtype), ATTN_ERR_RANK (not 1-D). On
 * failure *values is NULL and *count 0. Added in 0.4.0. */
ATTN_API attn_status attn_npy_read_i64(int64_t **values, int64_t *count, const char *path, attn_error *err);

/* Free the data of a tensor returned by attn_npy_read/attn_npy_parse and zero
 * the view. NULL and already-freed (zeroed) tensors are fine. */
ATTN_API void attn_npy_free(attn_tensor *t);

/* A .npy file's header, for reading parts of its data in place (MPI-IO,
 * mmap): from the file's first `size` bytes (the whole header at least;
 * 64 KiB always suffices) and its total size, everything attn_npy_read
 * checks but the data itself, which starts at data_offset and is
 * data_bytes long, C order unless fortran_order. Errors: those of
 * attn_npy_read but ATTN_ERR_IO and ATTN_ERR_NO_MEMORY, and
 * ATTN_ERR_ARGUMENT when file_size < size; big-endian data, which
 * attn_npy_read reads, is ATTN_ERR_NPY_UNSUPPORTED here (the bytes in
 * place are not in the host's order).
 *
 * The library fills the struct: set info->struct_size = sizeof *info
 * before the call ("Versioned structs": it writes that many bytes, and a
 * struct_size below sizeof(size_t) or above the library's own is
 * ATTN_ERR_OPTION). On any other failure every field but struct_size is
 * zero. (0.3.0's struct had no struct_size; the library keeps 0.3's
 * attn_npy_header for binaries built then, and this header's macro of that
 * name calls attn_npy_header_0_4.) */
typedef struct attn_npy_info {
    size_t struct_size; /* sizeof(attn_npy_info) as the caller was compiled (added in 0.4.0) */
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    int fortran_order;
    size_t data_offset, data_bytes;
} attn_npy_info;
ATTN_API attn_status attn_npy_header_0_4(attn_npy_info *info, const void *bytes, size_t size, uint64_t file_size,
                                         attn_error *err);
#define attn_npy_header attn_npy_header_0_4 /* bindings (ctypes) bind attn_npy_header_0_4 by that name:
                                                the symbol attn_npy_header takes 0.3's struct */

/* The header attn_npy_write writes for an array of this dtype and shape
 * (format 1.0, data 64-byte aligned), into buf (ATTN_NPY_HEADER_MAX bytes
 * always suffice); *length is its size, where the data starts. Errors:
 * ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_DTYPE, ATTN_ERR_ARGUMENT (buf too
 * small), ATTN_ERR_SHAPE (a dimension < 0), ATTN_ERR_OVERFLOW (the data's
 * byte count does not fit in int64 or size_t): the header written is
 * always one attn_npy_header reads back. */
#define ATTN_NPY_HEADER_MAX 512
ATTN_API attn_status attn_npy_format_header(void *buf, size_t size, size_t *length, attn_dtype dtype, int rank,
                                           const int64_t *shape, attn_error *err);

/* Write `t` (any strides; f32, f64, f16 or bool; .npy has no bf16) to `path` as a version 1.0 .npy
 * file in C order, data aligned to 64 bytes. The file is written in place and
 * removed again if writing fails (only a regular file: a device, FIFO or
 * symbolic link that path names is left where it is); for an all-or-nothing replacement of an
 * existing file, write to a temporary name in the same directory and rename.
 * Errors: ATTN_ERR_NULL, ATTN_ERR_RANK, ATTN_ERR_SHAPE, ATTN_ERR_DTYPE,
 * ATTN_ERR_OVERFLOW, ATTN_ERR_IO. */
ATTN_API attn_status attn_npy_write(const char *path, const attn_tensor *t, attn_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
