/* half.c -- 16-bit floats: IEEE binary16 (f16) and bfloat16 (bf16), to and
 * from f32 with round-to-nearest-even. Portable C, bit exact everywhere. */
#include "base/base.h"

#include <string.h>

/* Each conversion is written once, inline, for the single values below
 * and for the rows at the end of this file. */
static inline float bf16_to_f32(uint16_t b) { return attn_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = attn_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    /* Round to nearest, ties to even, on the 16 bits dropped. */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return attn_f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return attn_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u = attn_f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past 65504: inf */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal f16 (or 0) */
        /* f16 subnormals are multiples of 2^-24: round |f| * 2^24 to an integer,
         * ties to even; the product is exact in f32 below 2^-14 * 2^24. */
        float scaled = attn_f32_from_bits(a) * 0x1p24f;
        uint32_t m = (uint32_t)scaled;
        float rest = scaled - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    /* Normal: rebias the exponent, round the 13 dropped mantissa bits. */
    uint32_t r = a - 0x38000000u; /* exponent bias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1);
    return (uint16_t)(sign | (r >> 13));
}

float attn_bf16_to_f32(uint16_t b) { return bf16_to_f32(b); }
uint16_t attn_f32_to_bf16(float f) { return f32_to_bf16(f); }
float attn_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t attn_f32_to_f16(float f) { return f32_to_f16(f); }

/* x rounded to f32 toward zero, its last bit set when that was inexact
 * ("round to odd"): rounding this to f16 or bf16 (nearest even) is x
 * rounded once, as f32 keeps 2+ bits more than either (Boldo and
 * Melquiond, 2008). Through (float)x, nearest even twice, a value just
 * past a 16-bit tie became the tie, and 65519.99 became inf. */
static float f32_round_odd(double x) {
    float f = (float)x;
    if (isnan(x)) return f;
    uint32_t u = attn_f32_bits(f);
    if (fabs((double)f) > fabs(x)) u--; /* rounded away from zero (inf too): step back */
    if ((double)attn_f32_from_bits(u) != x) u |= 1;
    return attn_f32_from_bits(u);
}

/* dst = x (n f32 values, dst any alignment) with each signaling NaN made
 * quiet (its bit 22 set), as the value-by-value path's round trip through
 * double makes it. */
static void quiet_nans(char *dst, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = attn_f32_bits(x[i]);
        u |= (uint32_t)((u & 0x7fffffffu) > 0x7f800000u) << 22;
        memcpy(dst + 4 * i, &u, 4);
    }
}

/* attn_tensor_convert between f32, f16 and bf16 with contiguous rows (last
 * stride 1 on both sides): a row at a time, through f32 (exact for these
 * sources, so the same bits as through double), in pieces of a buffer that
 * is filled before anything is written (dst may be src, the very view). A
 * value at a time through the switches had cost a 16-bit cache's append
 * about 14 ns a value. */
static void convert_rows(attn_tensor *dst, const attn_tensor *src) {
    enum { PIECE = 1024 };
    float buf[PIECE];
    int last = src->rank - 1;
    int64_t cols = src->shape[last], rows = attn_tensor_numel(src) / cols, idx[ATTN_MAX_RANK] = {0}, so = 0, dof = 0;
    size_t ss = attn_dtype_size(src->dtype), ds = attn_dtype_size(dst->dtype);
    for (int64_t r = 0; r < rows; r++) {
        const char *in = (const char *)src->data + so * (int64_t)ss;
        char *out = (char *)dst->data + dof * (int64_t)ds;
        for (int64_t c0 = 0; c0 < cols; c0 += PIECE) {
            int64_t k = cols - c0 < PIECE ? cols - c0 : PIECE;
            if (src->dtype == ATTN_F32) memcpy(buf, in + c0 * 4, 4 * (size_t)k);
            else attn_half_to_f32_row(buf, in + c0 * 2, k, src->dtype == ATTN_F16);
            if (dst->dtype == ATTN_F32) quiet_nans(out + c0 * 4, buf, k);
            else attn_f32_to_half_row(out + c0 * 2, buf, k, dst->dtype == ATTN_F16);
        }
        /* the next row, odometer style over the leading dimensions */
        for (int d = last - 1; d >= 0; d--) {
            if (idx[d] + 1 < src->shape[d]) {
                idx[d]++, so += src->strides[d], dof += dst->strides[d];
                break;
            }
            so -= src->strides[d] * (src->shape[d] - 1), dof -= dst->strides[d] * (dst->shape[d] - 1);
            idx[d] = 0;
        }
    }
}

attn_status attn_tensor_convert(attn_tensor *dst, const attn_tensor *src, attn_error *err) {
    if (!dst || !src || !dst->data || !src->data)
        return attn_fail(err, ATTN_ERR_NULL, "dst, src or their data is NULL");
    if (dst->rank != src->rank || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "dst and src must have the same shape");
    if (src->dtype == ATTN_BOOL || dst->dtype == ATTN_BOOL || !attn_dtype_size(src->dtype) ||
        !attn_dtype_size(dst->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "attn_tensor_convert converts between float dtypes only");
    attn_status st = attn_check_extent(src, "src", err);
    if (st || (st = attn_check_extent(dst, "dst", err)) || (st = attn_check_writable(dst, "dst", err))) return st;
    /* In place is dst = src, the very view: each element is read, then written. */
    const attn_named out[1] = {{dst, "dst"}}, in[1] = {{attn_same_view(dst, src) ? NULL : src, "src"}};
    if ((st = attn_check_no_overlap(out, 1, in, 1, err))) return st;
    int last = src->rank - 1;
    if (last >= 0 && src->shape[last] > 0 && src->dtype != ATTN_F64 && dst->dtype != ATTN_F64 &&
        src->strides[last] == 1 && dst->strides[last] == 1) {
        convert_rows(dst, src);
        return ATTN_OK;
    }
    int64_t n = attn_tensor_numel(src), idx[ATTN_MAX_RANK] = {0}, so = 0, dof = 0;
    for (int64_t i = 0; i < n; i++) {
        attn_mat ms = {(char *)src->data, src->dtype, 1, 1, 0, 1}; /* element so */
        double x = attn_mat_get(&ms, 0, so);
        char *d = (char *)dst->data + dof * (int64_t)attn_dtype_size(dst->dtype);
        switch (dst->dtype) {
        case ATTN_F64: memcpy(d, &x, 8); break;
        case ATTN_F32: { float f = (float)x; memcpy(d, &f, 4); break; }
        case ATTN_F16: { uint16_t h = attn_f32_to_f16(f32_round_odd(x)); memcpy(d, &h, 2); break; }
        default: { uint16_t b = attn_f32_to_bf16(f32_round_odd(x)); memcpy(d, &b, 2); break; }
        }
        /* The next element, odometer style. The offsets step only within
         * the extents checked above (never one past a dimension's end, which
         * may not fit in int64). */
        for (int k = src->rank - 1; k >= 0; k--) {
            if (idx[k] + 1 < src->shape[k]) {
                idx[k]++, so += src->strides[k], dof += dst->strides[k];
                break;
            }
            so -= src->strides[k] * (src->shape[k] - 1), dof -= dst->strides[k] * (dst->shape[k] - 1);
            idx[k] = 0;
        }
    }
    return ATTN_OK;
}

/* Rows of n values, dst and src contiguous (16-bit values through memcpy:
 * any alignment). A call a value had cost a cache's append more than the
 * conversions themselves. */
void attn_f32_to_half_row(void *dst, const float *src, int64_t n, bool f16) {
    char *d = dst;
    if (f16)
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_f16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
    else
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
}

void attn_half_to_f32_row(float *dst, const void *src, int64_t n, bool f16) {
    const char *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
}

void attn_mat_piece_f32(float *x, const attn_mat *m, int64_t i, int64_t c0, int64_t w) {
    const char *at = m->base + (i * m->rs + c0 * m->cs) * (int64_t)attn_dtype_size(m->dtype);
    if (m->cs == 1 && m->dtype == ATTN_F32) memcpy(x, at, sizeof(float) * (size_t)w);
    else if (m->cs == 1 && attn_dtype_half(m->dtype)) attn_half_to_f32_row(x, at, w, m->dtype == ATTN_F16);
    else
        for (int64_t c = 0; c < w; c++) x[c] = (float)attn_mat_get(m, i, c0 + c);
}
