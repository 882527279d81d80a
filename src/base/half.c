/* half.c -- 16-bit floats: IEEE binary16 (f16) and bfloat16 (bf16), to and
 * from f32 with round-to-nearest-even. Portable C, bit exact everywhere. */
#include "base/base.h"

#include <string.h>

float attn_bf16_to_f32(uint16_t b) { return attn_f32_from_bits((uint32_t)b << 16); }

uint16_t attn_f32_to_bf16(float f) {
    uint32_t u = attn_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    /* Round to nearest, ties to even, on the 16 bits dropped. */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float attn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return attn_f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return attn_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t attn_f32_to_f16(float f) {
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

attn_status attn_tensor_convert(attn_tensor *dst, const attn_tensor *src, attn_error *err) {
    if (!dst || !src || !dst->data || !src->data)
        return attn_fail(err, ATTN_ERR_NULL, "dst, src or their data is NULL");
    if (dst->rank != src->rank || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->rank))
        return attn_fail(err, ATTN_ERR_SHAPE, "dst and src must have the same shape");
    if (src->dtype == ATTN_BOOL || dst->dtype == ATTN_BOOL || !attn_dtype_size(src->dtype) ||
        !attn_dtype_size(dst->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "attn_tensor_convert converts between float dtypes only");
    attn_status st = attn_check_extent(src, "src", err);
    if (st || (st = attn_check_extent(dst, "dst", err))) return st;
    /* In place is dst = src, the very view: each element is read, then written. */
    const attn_named out[1] = {{dst, "dst"}}, in[1] = {{attn_same_view(dst, src) ? NULL : src, "src"}};
    if ((st = attn_check_no_overlap(out, 1, in, 1, err))) return st;
    int64_t n = attn_tensor_numel(src), idx[ATTN_MAX_RANK] = {0}, so = 0, dof = 0;
    for (int64_t i = 0; i < n; i++) {
        attn_mat ms = {(char *)src->data, src->dtype, 1, 1, 0, 1}; /* element so */
        double x = attn_mat_get(&ms, 0, so);
        char *d = (char *)dst->data + dof * (int64_t)attn_dtype_size(dst->dtype);
        switch (dst->dtype) {
        case ATTN_F64: memcpy(d, &x, 8); break;
        case ATTN_F32: { float f = (float)x; memcpy(d, &f, 4); break; }
        case ATTN_F16: { uint16_t h = attn_f32_to_f16((float)x); memcpy(d, &h, 2); break; }
        default: { uint16_t b = attn_f32_to_bf16((float)x); memcpy(d, &b, 2); break; }
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
