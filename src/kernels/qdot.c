/* qdot.c -- the queries' side of the integer dot product kernel (qdot.h):
 * each row quantized to int8 per block of 32, once per decode work item.
 * Portable C, the rule every set's codes follow: a set may round in its
 * own vectors (attn_qdot_kernels.quantize), to these same bits. */
#include "base/base.h"
#include "kernels/qdot.h"

#include <math.h>

int32_t attn_qblock_quantize(int8_t *codes, float *d, const float *x) {
    float a = 0;
    for (int i = 0; i < ATTN_QBLOCK; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    float dq = a / 127, inv = dq > 0 ? 1 / dq : 0;
    int32_t sum = 0;
    for (int i = 0; i < ATTN_QBLOCK; i++) {
        /* to nearest, ties to even (the default rounding), as nearbyintf
         * rounds but without its call: |x · inv| <= 127 · (1 + 2^-23),
         * so adding 1.5 · 2^23 leaves the integer part in the low bits
         * of the significand, and taking it away again is exact */
        float c = (x[i] * inv + 0x1.8p23f) - 0x1.8p23f;
        c = c > 127 ? 127 : c < -127 ? -127 : c;
        /* NaN, whose conversion to an integer is undefined, where 1/dq
         * overflowed (dq subnormal) and x is 0: 0 · inf. Its code is 0. */
        c = c == c ? c : 0;
        codes[i] = (int8_t)c;
        sum += (int32_t)c;
    }
    *d = dq;
    return sum;
}

void attn_qrows_quantize(attn_qrows *qq, int8_t *codes, float *d, int32_t *bias, const float *q, int64_t nq,
                         int64_t E, attn_dtype format, const attn_qdot_kernels *qk) {
    int64_t nb = E / ATTN_QBLOCK;
    int32_t per_sum = format == ATTN_Q4 ? qk->q4_bias : qk->q8_bias;
    if (qk->quantize) qk->quantize(codes, d, bias, q, nq * nb, per_sum);
    else
        for (int64_t r = 0; r < nq * nb; r++)
            bias[r] = -per_sum * attn_qblock_quantize(codes + r * ATTN_QBLOCK, &d[r], q + r * ATTN_QBLOCK);
    qq->codes = codes, qq->d = d, qq->bias = bias, qq->E = E;
}
