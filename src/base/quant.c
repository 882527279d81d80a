/* quant.c -- the quantized row formats (q8, q4, q4_1, fp8 E4M3 and E5M2, laid out
 * byte by byte in attn.h, "Quantized storage"): a row quantized from f32
 * and widened back to f32, in portable C, bit exact everywhere; and the
 * public attn_quantize / attn_dequantize over tensors. The kernels' fast
 * widening of rows (the ISAs' dequant microkernels) must give these very
 * floats. */
#include "base/base.h"

#include <string.h>

/* Which formats there are, and their kind, is said here once: a blocked
 * format by its block's bytes, an fp8 one by attn_dtype_fp8, and each in
 * FORMATS below, which callers list (attn_quant_format); the checks of
 * caches, pools and row sources and the kernels' choice of rows read in
 * place ask these (docs/design.md lists what still names a format). */
int64_t attn_quant_block_bytes(attn_dtype d) {
    return d == ATTN_Q8 ? ATTN_Q8_BLOCK_BYTES : d == ATTN_Q4 ? ATTN_Q4_BLOCK_BYTES : d == ATTN_Q4_1 ? ATTN_Q4_1_BLOCK_BYTES : 0;
}

bool attn_dtype_quantized(attn_dtype d) { return attn_quant_block_bytes(d) > 0 || attn_dtype_fp8(d); }

bool attn_dtype_kv_rows(attn_dtype d) {
    return d == ATTN_F64 || d == ATTN_F32 || attn_dtype_half(d) || attn_dtype_quantized(d);
}

int64_t attn_row_bytes(attn_dtype dt, int64_t n) {
    int64_t bytes;
    if (attn_dtype_quantized(dt)) {
        size_t q = attn_quant_row_size(dt, n);
        return (uint64_t)q <= (uint64_t)INT64_MAX ? (int64_t)q : 0;
    }
    return n >= 1 && attn_dtype_size(dt) && attn_mul_i64(n, (int64_t)attn_dtype_size(dt), &bytes) ? bytes : 0;
}

/* The quantized formats a caller can list (attn_quant_format), in the order
 * attn.h lays them out: a format is registered by its entry here.
 * tests/test_api.c checks that every dtype of no element size but a name is
 * here. */
static const attn_dtype FORMATS[] = {ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2, ATTN_Q4C, ATTN_Q2C};

attn_status attn_quant_format(attn_dtype *format, attn_quant_kind *kind, int64_t *multiple, int index,
                              attn_error *err) {
    enum { N = sizeof FORMATS / sizeof FORMATS[0] };
    if (index < 0 || index >= N)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "index %d names no quantized format: there are %d (0 to %d)", index,
                         (int)N, (int)N - 1);
    attn_dtype f = FORMATS[index];
    bool grouped = attn_dtype_grouped(f);
    /* The least n its size takes, which every n it takes is a multiple of
     * (a block, 2 or 4 channels to a byte, or 1); asked rather than written
     * out again, so that a format's rule is said once. */
    int64_t m = 1;
    while (m < ATTN_KEY_GROUP_MAX_COLS && !(grouped ? attn_group_bytes(f, m) : attn_row_bytes(f, m))) m++;
    if (format) *format = f;
    if (kind) *kind = grouped ? ATTN_QUANT_GROUPS : ATTN_QUANT_ROWS;
    if (multiple) *multiple = m;
    return ATTN_OK;
}

size_t attn_quant_row_size(attn_dtype format, int64_t n) {
    int64_t bytes;
    if (n < 1 || !attn_dtype_quantized(format)) return 0;
    if (attn_dtype_fp8(format)) return (uint64_t)n <= SIZE_MAX ? (size_t)n : 0;
    if (n % ATTN_QBLOCK) return 0;
    if (!attn_mul_i64(n / ATTN_QBLOCK, attn_quant_block_bytes(format), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return 0;
    return (size_t)bytes;
}

/* y >= 0, y < 2^23, rounded to the nearest integer, ties to even, whatever
 * the caller's rounding mode: y's fraction is exact in f32 there. */
static uint32_t round_even(float y) {
    uint32_t t = (uint32_t)y;
    float rest = y - (float)t;
    return t + (rest > 0.5f || (rest == 0.5f && (t & 1)));
}

/* Not inlined where it is called with constant bounds (ATTN_NOINLINE): GCC
 * then threads the clamps into branches again. */

/* c[i] = (x[i · stride] - m) / d rounded to nearest even and clamped to
 * lo .. hi, for i < n (d finite, != 0). The quotient is clamped first,
 * which gives the same code (one past hi rounds to hi or beyond) and keeps
 * it below 2^23 for the conversion; the rounding is round_even's, whatever
 * the caller's rounding mode. No branch on the data: on random rows the
 * branches of a rounding went the wrong way about every other value, and
 * quantizing took most of a cache's append. */
static ATTN_NOINLINE void block_codes(int32_t *restrict c, const float *restrict x, int64_t n, int64_t stride, float m,
                                       float d, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) {
        float y = (x[i * stride] - m) / d; /* x - 0 is x, -0 included */
        y = y < lo ? lo : y;
        y = y > hi ? hi : y;
        uint32_t neg = attn_f32_bits(y) >> 31;
        float a = fabsf(y), rest;
        int32_t t = (int32_t)a; /* truncated */
        rest = a - (float)t;    /* exact */
        t += (rest > 0.5f) | ((rest == 0.5f) & (t & 1));
        c[i] = (t ^ -(int32_t)neg) + (int32_t)neg; /* -t where y < 0 */
    }
}

/* The f16 scale of a block: s rounded to f16, ±65504 where that overflows. */
static uint16_t scale_of(float s) {
    uint16_t h = attn_f32_to_f16(s);
    if ((h & 0x7fff) == 0x7c00) h = (uint16_t)((h & 0x8000) | 0x7bff);
    return h;
}

static void put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Whether x[0 .. 31] are all finite, and the largest |x[i]|: no branch
 * on the data. */
static bool block_absmax(const float *x, float *amax) {
    float a = 0;
    int bad = 0;
    for (int i = 0; i < ATTN_QBLOCK; i++) {
        float f = fabsf(x[i]);
        bad |= !(f <= FLT_MAX); /* inf or NaN */
        a = f > a ? f : a;
    }
    *amax = a;
    return !bad;
}

static void q8_block(uint8_t *b, const float *x) {
    float a;
    if (!block_absmax(x, &a)) {
        put16(b, 0x7e00);
        memset(b + 2, 0, ATTN_QBLOCK);
        return;
    }
    uint16_t h = scale_of(a / 127.0f);
    float d = attn_f16_to_f32(h);
    put16(b, h);
    if (d == 0) {
        memset(b + 2, 0, ATTN_QBLOCK);
        return;
    }
    int32_t c[ATTN_QBLOCK];
    block_codes(c, x, ATTN_QBLOCK, 1, 0.0f, d, -127.0f, 127.0f);
    for (int i = 0; i < ATTN_QBLOCK; i++) b[2 + i] = (uint8_t)(int8_t)c[i];
}

static void q4_block(uint8_t *b, const float *x) {
    float m = x[0], a;
    if (!block_absmax(x, &a)) {
        put16(b, 0x7e00);
        memset(b + 2, 0x88, ATTN_QBLOCK / 2);
        return;
    }
    for (int i = 0; fabsf(m) < a; i++) m = x[i]; /* the first of the largest |x[i]|, -0 included */
    uint16_t h = scale_of(m / -8.0f);
    float d = attn_f16_to_f32(h);
    put16(b, h);
    if (d == 0) {
        memset(b + 2, 0x88, ATTN_QBLOCK / 2);
        return;
    }
    int32_t c[ATTN_QBLOCK];
    block_codes(c, x, ATTN_QBLOCK, 1, 0.0f, d, -8.0f, 7.0f);
    for (int i = 0; i < ATTN_QBLOCK / 2; i++) b[2 + i] = (uint8_t)((c[i] + 8) | (c[i + 16] + 8) << 4);
}

void attn_quant_min_scale(uint8_t *codes, uint16_t *dh, uint16_t *mh, const float *x, int64_t n, int64_t stride,
                          int levels) {
    float lo = x[0], hi = x[0];
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        float y = x[i * stride];
        finite &= fabsf(y) <= FLT_MAX; /* no branch on the data */
        lo = y < lo ? y : lo, hi = y > hi ? y : hi;
    }
    if (!finite) {
        *dh = *mh = 0x7e00;
        memset(codes, 0, (size_t)n);
        return;
    }
    *mh = scale_of(lo);
    float m = attn_f16_to_f32(*mh), s = (hi - m) / (float)levels;
    *dh = s > 0 ? scale_of(s) : 0; /* m rounded above hi: every value is m */
    float d = attn_f16_to_f32(*dh);
    if (d == 0) memset(codes, 0, (size_t)n);
    else
        for (int64_t i0 = 0; i0 < n; i0 += ATTN_QBLOCK) { /* in blocks of codes */
            int32_t c[ATTN_QBLOCK];
            int64_t k = n - i0 < ATTN_QBLOCK ? n - i0 : ATTN_QBLOCK;
            block_codes(c, x + i0 * stride, k, stride, m, d, 0.0f, (float)levels);
            for (int64_t i = 0; i < k; i++) codes[i0 + i] = (uint8_t)c[i];
        }
}

/* q4_1: 16 levels from the block's minimum m up, d apart (attn.h). */
static void q4_1_block(uint8_t *b, const float *x) {
    uint8_t c[ATTN_QBLOCK];
    uint16_t dh, mh;
    attn_quant_min_scale(c, &dh, &mh, x, ATTN_QBLOCK, 1, 15);
    put16(b, dh), put16(b + 2, mh);
    for (int i = 0; i < ATTN_QBLOCK / 2; i++) b[4 + i] = (uint8_t)(c[i] | c[i + 16] << 4);
}

/* An fp8 format: M mantissa bits, exponent bias B, the largest finite code
 * (sign bit clear) and the NaN written. */
typedef struct fp8_format {
    int M, B;
    uint32_t max_code, nan_code;
    float least_normal; /* 2^(1-B) */
    float unit, per_unit; /* 2^(1-B-M), the subnormals' step, and 1 / unit */
} fp8_format;

static const fp8_format E4M3 = {3, 7, 0x7e, 0x7f, 0x1p-6f, 0x1p-9f, 0x1p9f},
                        E5M2 = {2, 15, 0x7b, 0x7e, 0x1p-14f, 0x1p-16f, 0x1p16f};

static uint8_t fp8_of(float x, const fp8_format *f) {
    uint32_t u = attn_f32_bits(x), sign = (u >> 24) & 0x80, a = u & 0x7fffffffu, code;
    if (a > 0x7f800000u) return (uint8_t)(sign | f->nan_code);
    if (a == 0x7f800000u) return (uint8_t)(sign | f->max_code); /* satfinite */
    float v = attn_f32_from_bits(a);
    if (v < f->least_normal) {
        /* Below the smallest normal: multiples of 2^(1-B-M). The scaled value
         * is exact (a power of two) and below 2^M; rounding up to 2^M gives
         * the code of the smallest normal, as it should. */
        code = round_even(v * f->per_unit);
    } else {
        /* Round f32's mantissa to M bits (ties to even, a carry moving into
         * the exponent), then rebias the exponent from 127 to B. */
        uint32_t sh = 23 - (uint32_t)f->M, r = (a + (1u << (sh - 1)) - 1 + ((a >> sh) & 1)) >> sh;
        code = r - ((uint32_t)(127 - f->B) << f->M);
    }
    return (uint8_t)(sign | (code > f->max_code ? f->max_code : code));
}

static float fp8_value(uint8_t c, const fp8_format *f, bool e4m3) {
    uint32_t sign = (uint32_t)(c & 0x80) << 24, e = (c & 0x7fu) >> f->M, m = c & ((1u << f->M) - 1);
    uint32_t top = (1u << (7 - f->M)) - 1; /* the largest exponent field */
    if (e4m3 && (c & 0x7f) == 0x7f) return attn_f32_from_bits(sign | 0x7fc00000u);
    if (!e4m3 && e == top) return attn_f32_from_bits(sign | 0x7f800000u | (m ? 0x400000u : 0));
    if (e == 0) { /* m · 2^(1-B-M), exact */
        float v = (float)m * f->unit;
        return sign ? -v : v;
    }
    return attn_f32_from_bits(sign | (e - (uint32_t)f->B + 127) << 23 | m << (23 - f->M));
}

void attn_quant_row(void *dst, const float *x, int64_t n, attn_dtype format) {
    uint8_t *b = dst;
    switch (format) {
    case ATTN_Q8:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++) q8_block(b + k * ATTN_Q8_BLOCK_BYTES, x + k * ATTN_QBLOCK);
        break;
    case ATTN_Q4:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++) q4_block(b + k * ATTN_Q4_BLOCK_BYTES, x + k * ATTN_QBLOCK);
        break;
    case ATTN_Q4_1:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++) q4_1_block(b + k * ATTN_Q4_1_BLOCK_BYTES, x + k * ATTN_QBLOCK);
        break;
    case ATTN_E4M3:
        for (int64_t i = 0; i < n; i++) b[i] = fp8_of(x[i], &E4M3);
        break;
    default:
        for (int64_t i = 0; i < n; i++) b[i] = fp8_of(x[i], &E5M2);
        break;
    }
}

void attn_dequant_row(float *dst, const void *src, int64_t n, attn_dtype format) {
    const uint8_t *b = src;
    switch (format) {
    case ATTN_Q8:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q8_BLOCK_BYTES) {
            float d = attn_f16_to_f32(get16(b));
            for (int i = 0; i < ATTN_QBLOCK; i++) dst[k * ATTN_QBLOCK + i] = (float)(int8_t)b[2 + i] * d;
        }
        break;
    case ATTN_Q4:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_BLOCK_BYTES) {
            float d = attn_f16_to_f32(get16(b)), *y = dst + k * ATTN_QBLOCK;
            for (int i = 0; i < ATTN_QBLOCK / 2; i++) {
                y[i] = (float)((int)(b[2 + i] & 15) - 8) * d;
                y[i + 16] = (float)((int)(b[2 + i] >> 4) - 8) * d;
            }
        }
        break;
    case ATTN_Q4_1:
        for (int64_t k = 0; k < n / ATTN_QBLOCK; k++, b += ATTN_Q4_1_BLOCK_BYTES) {
            float d = attn_f16_to_f32(get16(b)), m = attn_f16_to_f32(get16(b + 2)), *y = dst + k * ATTN_QBLOCK;
            for (int i = 0; i < ATTN_QBLOCK / 2; i++) { /* code · d is exact: one rounding, fused or not */
                y[i] = (float)(b[4 + i] & 15) * d + m;
                y[i + 16] = (float)(b[4 + i] >> 4) * d + m;
            }
        }
        break;
    case ATTN_E4M3:
        for (int64_t i = 0; i < n; i++) dst[i] = fp8_value(b[i], &E4M3, true);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = fp8_value(b[i], &E5M2, false);
        break;
    }
}

float attn_quant_get(const void *row, attn_dtype format, int64_t c) {
    const uint8_t *b = row;
    switch (format) {
    case ATTN_Q8: {
        const uint8_t *blk = b + c / ATTN_QBLOCK * ATTN_Q8_BLOCK_BYTES;
        return (float)(int8_t)blk[2 + c % ATTN_QBLOCK] * attn_f16_to_f32(get16(blk));
    }
    case ATTN_Q4: {
        const uint8_t *blk = b + c / ATTN_QBLOCK * ATTN_Q4_BLOCK_BYTES;
        int i = (int)(c % ATTN_QBLOCK), code = i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4;
        return (float)(code - 8) * attn_f16_to_f32(get16(blk));
    }
    case ATTN_Q4_1: {
        const uint8_t *blk = b + c / ATTN_QBLOCK * ATTN_Q4_1_BLOCK_BYTES;
        int i = (int)(c % ATTN_QBLOCK), code = i < 16 ? blk[4 + i] & 15 : blk[4 + i - 16] >> 4;
        return (float)code * attn_f16_to_f32(get16(blk)) + attn_f16_to_f32(get16(blk + 2));
    }
    case ATTN_E4M3: return fp8_value(b[c], &E4M3, true);
    default: return fp8_value(b[c], &E5M2, false);
    }
}

attn_status attn_quant_bytes(const attn_tensor *t, attn_tensor *bytes, const char *name, attn_error *err) {
    int last = t->rank - 1;
    if (last < 0) return attn_fail(err, ATTN_ERR_RANK, "%s holds %s rows: its rank must be 1 or more", name,
                                   attn_dtype_name(t->dtype));
    int64_t n = t->shape[last], row = n > 0 ? attn_row_bytes(t->dtype, n) : 0;
    if (n > 0 && !row)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s's rows have %lld value%s; %s rows need a multiple of 32", name,
                         (long long)n, attn_plural(n), attn_dtype_name(t->dtype));
    if (n > 1 && t->strides[last] != 1)
        return attn_fail(err, ATTN_ERR_STRIDE, "%s's last stride is %lld; a quantized row's values lie together (1)",
                         name, (long long)t->strides[last]);
    *bytes = *t;
    bytes->dtype = ATTN_BOOL;
    bytes->shape[last] = row;
    bytes->strides[last] = 1;
    return ATTN_OK;
}

/* What attn_quantize and attn_dequantize check alike: the format, the
 * tensor, the bytes the rows take, and that the two share no memory. */
static attn_status check_call(const attn_tensor *t, const char *name, const void *bytes, size_t size,
                              attn_dtype format, bool bytes_out, int64_t *rows, int64_t *n, size_t *row_size,
                              attn_error *err) {
    if (!t || !t->data || !bytes) return attn_fail(err, ATTN_ERR_NULL, "the tensor, its data or the rows are NULL");
    if (!attn_dtype_quantized(format))
        return attn_fail(err, ATTN_ERR_DTYPE, "format %s is not quantized (q8, q4, q4_1, e4m3, e5m2, q4c or q2c)",
                         attn_dtype_name(format));
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f32, f64, f16 or bf16", name,
                         attn_dtype_name(t->dtype));
    if (t->rank < 1 || t->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; rows need rank 1 to %d", name, t->rank, ATTN_MAX_RANK);
    attn_status st = attn_check_dims(t->rank, t->shape, name, err);
    if (st) return st;
    int64_t numel = attn_tensor_numel(t);
    if (numel < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "%s's element count overflows", name);
    *n = t->shape[t->rank - 1];
    *row_size = attn_quant_row_size(format, *n);
    if (!*row_size) {
        if (*n >= 1 && (format == ATTN_E4M3 || format == ATTN_E5M2 || *n % ATTN_QBLOCK == 0))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "a row of %lld values overflows", (long long)*n);
        return attn_fail(err, ATTN_ERR_SHAPE, "%s's rows have %lld value%s; %s rows need %s", name, (long long)*n,
                         attn_plural(*n), attn_dtype_name(format), attn_quant_block_bytes(format) ? "a multiple of 32" : "1 or more");
    }
    *rows = numel / *n;
    int64_t total;
    if (!attn_mul_i64(*rows, (int64_t)*row_size, &total) || (uint64_t)total > SIZE_MAX)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the rows' byte size overflows");
    if ((size_t)total > size)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "%lld row%s of %s take%s %lld bytes; %s holds %zu", (long long)*rows,
                         attn_plural(*rows), attn_dtype_name(format), *rows == 1 ? "s" : "", (long long)total,
                         bytes_out ? "dst" : "src", size);
    st = attn_check_extent(t, name, err);
    if (st || (!bytes_out && (st = attn_check_writable(t, name, err)))) return st; /* dst: no element twice */
    /* The rows as a 1-D byte tensor, for the one aliasing check. */
    attn_tensor region = {(void *)(uintptr_t)bytes, ATTN_BOOL, 1, {total}, {1}};
    const attn_named out[1] = {{bytes_out ? &region : t, "dst"}};
    const attn_named in[1] = {{bytes_out ? t : &region, "src"}};
    return attn_check_no_overlap(out, 1, in, 1, err);
}

/* Row r's element c of t (rows in C order over the leading indices): in
 * elements, or for quantized rows the row's byte offset (c = 0). */
static int64_t offset_of(const attn_tensor *t, int64_t r, int64_t c) {
    int64_t off = c * t->strides[t->rank - 1];
    for (int d = t->rank - 2; d >= 0; d--) {
        off += (r % t->shape[d]) * t->strides[d];
        r /= t->shape[d];
    }
    return off;
}

/* The longest row the rotation turns (attn_copy_kv_rows' rotate). */
enum { PIECE = 1024 };

/* The bytes of a row before its value c0 (c0 a multiple of the block). */
static size_t bytes_before(attn_dtype format, int64_t c0) {
    int64_t block = attn_quant_block_bytes(format);
    return (size_t)(block ? c0 / ATTN_QBLOCK * block : c0);
}

attn_status attn_check_head_scales(const float *k_scale, const float *v_scale, int64_t heads, attn_dtype dtype,
                                   const char *name, attn_error *err) {
    const float *s[2] = {k_scale, v_scale};
    for (int i = 0; i < 2; i++) {
        if (!s[i]) continue;
        if (dtype != ATTN_E4M3 && dtype != ATTN_E5M2)
            return attn_fail(err, ATTN_ERR_DTYPE, "%s->%s is set but the dtype is %s; per-head scales are for e4m3 and "
                             "e5m2", name, i ? "v_scale" : "k_scale", attn_dtype_name(dtype));
        for (int64_t h = 0; h < heads; h++)
            if (!(s[i][h] > 0 && s[i][h] < INFINITY))
                return attn_fail(err, ATTN_ERR_SCALE, "%s->%s[%lld] is %g; every scale must be finite and > 0", name,
                                 i ? "v_scale" : "k_scale", (long long)h, (double)s[i][h]);
    }
    return ATTN_OK;
}

void attn_copy_rows(attn_tensor *dst, const attn_tensor *src) { attn_copy_kv_rows(dst, src, NULL, 1, false); }

/* Rows are read and written through a buffer of this many values on the
 * stack (a multiple of every format's block): 1 KiB, where a whole row of
 * PIECE values was 4 KiB. */
enum { SMALL_PIECE = 256 };

/* Writes the k values x (values c0 .. of a row) into the row at out of
 * dst's dtype (ds bytes a value, dcs the stride of a value, qd: quantized). */
static void put_piece(char *out, const float *x, int64_t c0, int64_t k, attn_dtype dtype, bool qd, int64_t ds,
                      int64_t dcs) {
    if (qd) {
        attn_quant_row(out + bytes_before(dtype, c0), x, k, dtype);
        return;
    }
    if (dcs == 1 && dtype == ATTN_F32) {
        memcpy(out + c0 * ds, x, sizeof(float) * (size_t)k);
        return;
    }
    if (dcs == 1 && attn_dtype_half(dtype)) {
        attn_f32_to_half_row(out + c0 * ds, x, k, dtype == ATTN_F16);
        return;
    }
    for (int64_t c = 0; c < k; c++) {
        char *e = out + (c0 + c) * dcs * ds;
        switch (dtype) {
        case ATTN_F64: { double y = x[c]; memcpy(e, &y, 8); break; }
        case ATTN_F32: memcpy(e, &x[c], 4); break;
        case ATTN_F16: { uint16_t h = attn_f32_to_f16(x[c]); memcpy(e, &h, 2); break; }
        default: { uint16_t h = attn_f32_to_bf16(x[c]); memcpy(e, &h, 2); break; }
        }
    }
}

/* attn_copy_kv_rows where a side is quantized, in a frame of its own
 * (9 KiB: the rotation's row of doubles and a piece of floats), which
 * attn_tensor_convert's (4 KiB, the other case's) never sits beside. */
static ATTN_NOINLINE void copy_quant_rows(attn_tensor *dst, const attn_tensor *src, const float *scale, int64_t heads,
                                          bool rotate, bool qs, bool qd);

void attn_copy_kv_rows(attn_tensor *dst, const attn_tensor *src, const float *scale, int64_t heads, bool rotate) {
    bool qs = attn_dtype_quantized(src->dtype), qd = attn_dtype_quantized(dst->dtype);
    if (!qs && !qd) attn_tensor_convert(dst, src, NULL);
    else copy_quant_rows(dst, src, scale, heads, rotate, qs, qd);
}

static void copy_quant_rows(attn_tensor *dst, const attn_tensor *src, const float *scale, int64_t heads, bool rotate,
                            bool qs, bool qd) {
    int64_t n = src->shape[src->rank - 1], rows = attn_tensor_numel(src);
    if (n == 0 || rows == 0) return;
    rows /= n;
    /* row r's head: the rows are (..., heads, positions, n) in C order */
    int64_t per_head = src->rank >= 2 && src->shape[src->rank - 2] > 0 ? src->shape[src->rank - 2] : 1;
    float buf[SMALL_PIECE];
    /* The rotation's row (at most PIECE values: the caches check), turned
     * in doubles and rounded once: attn_hadamard_f32's arithmetic, its
     * floats a piece at a time through buf. */
    double work[PIECE];
    rotate = rotate && qs != qd && n <= PIECE;
    int64_t ss = (int64_t)attn_dtype_size(src->dtype), ds = (int64_t)attn_dtype_size(dst->dtype);
    int64_t scs = src->strides[src->rank - 1], dcs = dst->strides[dst->rank - 1];
    for (int64_t r = 0; r < rows; r++) {
        const char *in = (const char *)src->data + offset_of(src, r, 0) * (qs ? 1 : ss);
        char *out = (char *)dst->data + offset_of(dst, r, 0) * (qd ? 1 : ds);
        if (qs && qd && src->dtype == dst->dtype) { /* the same format: the bytes */
            memmove(out, in, (size_t)attn_row_bytes(src->dtype, n));
            continue;
        }
        float s = scale ? scale[r / per_head % heads] : 1.0f;
        attn_mat m = {(char *)in, src->dtype, 1, n, 0, scs};
        for (int64_t c0 = 0; c0 < n; c0 += SMALL_PIECE) {
            int64_t k = n - c0 < SMALL_PIECE ? n - c0 : SMALL_PIECE;
            const float *x = buf; /* the piece's values as f32 */
            if (qs) {
                attn_dequant_row(buf, in + bytes_before(src->dtype, c0), k, src->dtype);
                if (scale) /* code · s, one f32 rounding */
                    for (int64_t c = 0; c < k; c++) buf[c] *= s;
            } else {
                /* An append of f32 rows is read in place; other rows into buf. */
                if (src->dtype == ATTN_F32 && scs == 1 && !rotate && !scale) x = (const float *)(const void *)in + c0;
                else attn_mat_piece_f32(buf, &m, 0, c0, k);
            }
            if (rotate) { /* the whole row first */
                for (int64_t c = 0; c < k; c++) work[c0 + c] = buf[c];
                continue;
            }
            if (!qs && scale) /* x / s, one f32 rounding, then quantized */
                for (int64_t c = 0; c < k; c++) buf[c] /= s;
            put_piece(out, x, c0, k, dst->dtype, qd, ds, dcs);
        }
        if (!rotate) continue;
        /* quantizing: H x, rounded once, then scaled and quantized; else
         * turned back (H is its own inverse) after the scale */
        attn_hadamard_f64(work, n);
        for (int64_t c0 = 0; c0 < n; c0 += SMALL_PIECE) {
            int64_t k = n - c0 < SMALL_PIECE ? n - c0 : SMALL_PIECE;
            for (int64_t c = 0; c < k; c++) buf[c] = (float)work[c0 + c];
            if (!qs && scale)
                for (int64_t c = 0; c < k; c++) buf[c] /= s;
            put_piece(out, buf, c0, k, dst->dtype, qd, ds, dcs);
        }
    }
}

/* The rows of the byte buffer `bytes` as a quantized tensor of t's shape,
 * in C order (rows row_size bytes apart). */
static attn_tensor rows_tensor(const attn_tensor *t, const void *bytes, attn_dtype format, size_t row_size) {
    attn_tensor q = *t;
    q.data = (void *)(uintptr_t)bytes;
    q.dtype = format;
    int64_t step = (int64_t)row_size;
    q.strides[t->rank - 1] = 1;
    for (int d = t->rank - 2; d >= 0; d--) q.strides[d] = step, step *= t->shape[d];
    return q;
}

attn_status attn_quantize(void *dst, size_t dst_size, attn_dtype format, const attn_tensor *src, attn_error *err) {
    if (attn_dtype_grouped(format)) return attn_group_tensor(src, "src", dst, dst_size, format, true, err);
    int64_t rows, n;
    size_t row_size;
    attn_status st = check_call(src, "src", dst, dst_size, format, true, &rows, &n, &row_size, err);
    if (st) return st;
    attn_tensor q = rows_tensor(src, dst, format, row_size);
    attn_copy_rows(&q, src);
    return ATTN_OK;
}

attn_status attn_dequantize(attn_tensor *dst, const void *src, size_t src_size, attn_dtype format, attn_error *err) {
    if (attn_dtype_grouped(format))
        return attn_group_tensor(dst, "dst", (void *)(uintptr_t)src, src_size, format, false, err);
    int64_t rows, n;
    size_t row_size;
    attn_status st = check_call(dst, "dst", src, src_size, format, false, &rows, &n, &row_size, err);
    if (st) return st;
    attn_tensor q = rows_tensor(dst, src, format, row_size);
    attn_copy_rows(dst, &q);
    return ATTN_OK;
}
