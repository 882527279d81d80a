/* simde_extra.h -- portable definitions, for the tests' SIMDe build of the
 * kernel files only, of the intrinsics they use that SIMDe 0.7.4 (Debian
 * 12's libsimde-dev) lacks or does not alias to Intel's names. Each does
 * what Intel's guide says of it, lane by lane; the sums in the order GCC's
 * <immintrin.h> adds them, so that results are the native code's. Included
 * by intrin_simde.h after SIMDe. */
#ifndef ATTN_SIMDE_EXTRA_H
#define ATTN_SIMDE_EXTRA_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define __mmask16 simde__mmask16
#define __mmask8 simde__mmask8
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#ifndef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)
#endif

/* Lanes into a vector (the portable path's unions, by value). */
static inline simde__m512 attn_sx_ps(const float x[16]) {
    simde__m512 v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline simde__m512i attn_sx_epi32(const int32_t x[16]) {
    simde__m512i v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* zero-masked loads: lanes outside k are 0 and are not read */
static inline simde__m512 _mm512_maskz_loadu_ps(simde__mmask16 k, const void *p) {
    float x[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 4 * i, 4);
    return attn_sx_ps(x);
}
static inline simde__m128i _mm_maskz_loadu_epi8(simde__mmask16 k, const void *p) {
    unsigned char x[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) x[i] = ((const unsigned char *)p)[i];
    simde__m128i v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline simde__m256i _mm256_maskz_loadu_epi16(simde__mmask16 k, const void *p) {
    uint16_t x[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 2 * i, 2);
    simde__m256i v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline void _mm512_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a) {
    float x[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy((char *)p + 4 * i, &x[i], 4);
}
/* a macro: the predicate must stay a constant for SIMDe's compare */
#define _mm512_mask_cmp_ps_mask(k, a, b, imm) ((simde__mmask16)((k) & simde_mm512_cmp_ps_mask(a, b, imm)))
#define _mm_cmpeq_epi8_mask(a, b) ((simde__mmask16)~simde_mm_cmpneq_epi8_mask(a, b))

/* conversions */
static inline simde__m512 _mm512_cvtepi32_ps(simde__m512i a) {
    int32_t x[16];
    float y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = (float)x[i]; /* rounded as MXCSR says, as the instruction */
    return attn_sx_ps(y);
}
static inline simde__m512i _mm512_cvtepu16_epi32(simde__m256i a) {
    uint16_t x[16];
    int32_t y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = x[i];
    return attn_sx_epi32(y);
}
static inline simde__m512i _mm512_cvtepu8_epi32(simde__m128i a) {
    unsigned char x[16];
    int32_t y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = x[i];
    return attn_sx_epi32(y);
}
static inline simde__m512i _mm512_cvtepi8_epi32(simde__m128i a) {
    signed char x[16];
    int32_t y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = x[i];
    return attn_sx_epi32(y);
}
/* IEEE half to float, exactly (VCVTPH2PS: subnormal halves are normal floats). */
static inline simde__m512 _mm512_cvtph_ps(simde__m256i a) {
    uint16_t x[16];
    float y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) {
        unsigned e = x[i] >> 10 & 0x1f, m = x[i] & 0x3ff;
        float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), (int)e - 25);
        y[i] = x[i] >> 15 ? -f : f;
    }
    return attn_sx_ps(y);
}

/* horizontal sums and maxima, in the order of GCC's <immintrin.h>: halves
 * of 8, then 4, 2 and 1 (lane i with lane i + 8, and so on) */
static inline float _mm512_reduce_add_ps(simde__m512 a) {
    float x[16];
    memcpy(x, &a, sizeof x);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) x[i] = x[i] + x[i + w];
    return x[0];
}
static inline float _mm512_reduce_max_ps(simde__m512 a) {
    float x[16];
    memcpy(x, &a, sizeof x);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) x[i] = x[i] > x[i + w] ? x[i] : x[i + w]; /* VMAXPS: the second if not greater */
    return x[0];
}
/* bfloat16, as Intel's SDM defines the instructions (not as SIMDe 0.7.4 does:
 * its VDPBF16PS adds the even product first and flushes nothing).
 * convert_fp32_to_bfloat16: zero and denormal inputs give a zero of their
 * sign, NaN stays NaN (quieted), others round to nearest even. */
static inline uint16_t attn_sx_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000) == 0) return (uint16_t)(x >> 16 & 0x8000);
    if ((x & 0x7f800000) == 0x7f800000) return (uint16_t)(x >> 16 | ((x & 0x7fffff) ? 0x40 : 0));
    return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}
static inline simde__m512bh _mm512_cvtne2ps_pbh(simde__m512 a, simde__m512 b) { /* b in the low half */
    float fa[16], fb[16];
    uint16_t h[32];
    memcpy(fa, &a, sizeof fa), memcpy(fb, &b, sizeof fb);
    for (int i = 0; i < 16; i++) h[i] = attn_sx_bf16(fb[i]), h[16 + i] = attn_sx_bf16(fa[i]);
    simde__m512bh v;
    memcpy(&v, h, sizeof v);
    return v;
}
static inline simde__m256bh _mm512_cvtneps_pbh(simde__m512 a) {
    float fa[16];
    uint16_t h[16];
    memcpy(fa, &a, sizeof fa);
    for (int i = 0; i < 16; i++) h[i] = attn_sx_bf16(fa[i]);
    simde__m256bh v;
    memcpy(&v, h, sizeof v);
    return v;
}
/* VDPBF16PS, lane i: t = fma(a[2i+1], b[2i+1], src), then fma(a[2i], b[2i], t);
 * each step rounded once to nearest even, denormal inputs and results as
 * zero (DAZ, FTZ): a product below FLT_MIN or past FLT_MAX enters unrounded,
 * as Zen 5's instruction computes it (tests/test_fast.c). */
static inline float attn_sx_flush(float x) { return fabsf(x) < 0x1p-126f ? 0.0f * x : x; }
static inline float attn_sx_bf16_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return attn_sx_flush(f);
}
static inline simde__m512 attn_sx_dpbf16_ps(simde__m512 src, simde__m512bh a, simde__m512bh b) {
    float acc[16];
    uint16_t ha[32], hb[32];
    memcpy(acc, &src, sizeof acc), memcpy(ha, &a, sizeof ha), memcpy(hb, &b, sizeof hb);
    for (int i = 0; i < 16; i++) {
        float t = attn_sx_flush(fmaf(attn_sx_bf16_f32(ha[2 * i + 1]), attn_sx_bf16_f32(hb[2 * i + 1]), attn_sx_flush(acc[i])));
        acc[i] = attn_sx_flush(fmaf(attn_sx_bf16_f32(ha[2 * i]), attn_sx_bf16_f32(hb[2 * i]), t));
    }
    return attn_sx_ps(acc);
}
#undef _mm512_dpbf16_ps
#define _mm512_dpbf16_ps(src, a, b) attn_sx_dpbf16_ps(src, a, b)
/* VSCALEFPS: a · 2^floor(b), one rounding, in the whole range. SIMDe
 * 0.7.4 computes a · exp2(floor(b)), which overflows where the result does
 * not (0.7 · 2^128 is finite): the kernels' exp2 scales by 2^128 at its top. */
static inline float attn_sx_scalef1(float a, float b) {
    if (isnan(a) || isnan(b)) return a + b;
    if (isinf(b)) return b > 0 ? (a == 0 ? NAN : a * INFINITY) : (isinf(a) ? NAN : a * 0.0f);
    float e = floorf(b);
    return ldexpf(a, e > 1000 ? 1000 : e < -1000 ? -1000 : (int)e);
}
static inline simde__m512 attn_sx_scalef_ps(simde__m512 a, simde__m512 b) {
    float x[16], y[16];
    memcpy(x, &a, sizeof x), memcpy(y, &b, sizeof y);
    for (int i = 0; i < 16; i++) x[i] = attn_sx_scalef1(x[i], y[i]);
    return attn_sx_ps(x);
}
#undef _mm512_scalef_ps
#define _mm512_scalef_ps(a, b) attn_sx_scalef_ps(a, b)
static inline simde__m512 attn_sx_maskz_scalef_ps(simde__mmask16 k, simde__m512 a, simde__m512 b) {
    float x[16], y[16];
    memcpy(x, &a, sizeof x), memcpy(y, &b, sizeof y);
    for (int i = 0; i < 16; i++) x[i] = k >> i & 1 ? attn_sx_scalef1(x[i], y[i]) : 0.0f;
    return attn_sx_ps(x);
}
#undef _mm512_maskz_scalef_ps
#define _mm512_maskz_scalef_ps(k, a, b) attn_sx_maskz_scalef_ps(k, a, b)

/* VFMADD: a · b + c rounded once. SIMDe's portable path writes a * b + c,
 * which ISO C (-std=c11: no contraction) rounds twice. */
static inline simde__m512 attn_sx_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
    float x[16], y[16], z[16];
    memcpy(x, &a, sizeof x), memcpy(y, &b, sizeof y), memcpy(z, &c, sizeof z);
    for (int i = 0; i < 16; i++) x[i] = fmaf(x[i], y[i], z[i]);
    return attn_sx_ps(x);
}
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps(a, b, c) attn_sx_fmadd_ps(a, b, c)
/* ---- for the integer dot product kernels (decode_quant_avx512.c,
 * decode_quant_avxvnni.c) ---- */
#define __mmask32 simde__mmask32
static inline simde__m512i _mm512_zextsi256_si512(simde__m256i a) {
    unsigned char x[64] = {0};
    memcpy(x, &a, sizeof a);
    simde__m512i v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline simde__m512i _mm512_maskz_loadu_epi32(simde__mmask16 k, const void *p) {
    int32_t x[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 4 * i, 4);
    return attn_sx_epi32(x);
}
static inline simde__m512i _mm512_maskz_loadu_epi16(simde__mmask32 k, const void *p) {
    uint16_t x[32] = {0};
    for (int i = 0; i < 32; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 2 * i, 2);
    simde__m512i v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline simde__m128 _mm_maskz_loadu_ps(simde__mmask8 k, const void *p) {
    float x[4] = {0};
    for (int i = 0; i < 4; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 4 * i, 4);
    simde__m128 v;
    memcpy(&v, x, sizeof v);
    return v;
}
static inline void _mm_mask_storeu_ps(void *p, simde__mmask8 k, simde__m128 a) {
    float x[4];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 4; i++)
        if (k >> i & 1) memcpy((char *)p + 4 * i, &x[i], 4);
}
static inline uint32_t _mm512_reduce_max_epu32(simde__m512i a) {
    uint32_t x[16], m = 0;
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) m = x[i] > m ? x[i] : m;
    return m;
}
static inline int32_t _mm512_reduce_add_epi32(simde__m512i a) {
    int32_t x[16];
    uint32_t sum = 0; /* wrapping, as VPADDD's */
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) sum += (uint32_t)x[i];
    return (int32_t)sum;
}
/* VPMOVDB: each lane's low byte (truncated, not saturated) */
static inline simde__m128i _mm512_cvtepi32_epi8(simde__m512i a) {
    int32_t x[16];
    uint8_t y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = (uint8_t)x[i];
    simde__m128i r;
    memcpy(&r, y, sizeof r);
    return r;
}
/* IEEE half to float, exactly, as _mm512_cvtph_ps above. */
static inline float _cvtsh_ss(unsigned short h) {
    simde__m256i a;
    uint16_t x[16] = {h};
    memcpy(&a, x, sizeof a);
    float y[16];
    simde__m512 f = _mm512_cvtph_ps(a);
    memcpy(y, &f, sizeof y);
    return y[0];
}
static inline simde__m256 _mm256_cvtph_ps(simde__m128i a) {
    uint16_t x[16] = {0};
    memcpy(x, &a, sizeof a);
    simde__m256i w;
    memcpy(&w, x, sizeof w);
    simde__m512 f = _mm512_cvtph_ps(w);
    simde__m256 v;
    memcpy(&v, &f, sizeof v);
    return v;
}
/* VPERMILPS: per 128-bit lane, lane i of the result is a's lane of that
 * 128-bit lane picked by imm's bits 2i, 2i + 1 */
static inline simde__m512 attn_sx_permute_ps(simde__m512 a, int imm) {
    float x[16], y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = x[i / 4 * 4 + (imm >> (2 * (i % 4)) & 3)];
    return attn_sx_ps(y);
}
#define _mm512_permute_ps(a, imm) attn_sx_permute_ps(a, imm)
/* VCVTPS2DQ: rounded as MXCSR says (to nearest even by default), as the
 * instruction; NaN and values out of int32's range give INT32_MIN */
static inline simde__m512i _mm512_cvtps_epi32(simde__m512 a) {
    float x[16];
    int32_t y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) {
        float r = nearbyintf(x[i]);
        y[i] = r >= -2147483648.0f && r < 2147483648.0f ? (int32_t)r : INT32_MIN;
    }
    return attn_sx_epi32(y);
}
/* VPSHUFD: per 128-bit lane, dword i of the result is a's dword of that
 * lane picked by imm's bits 2i, 2i + 1 */
static inline simde__m512i attn_sx_shuffle_epi32(simde__m512i a, int imm) {
    int32_t x[16], y[16];
    memcpy(x, &a, sizeof x);
    for (int i = 0; i < 16; i++) y[i] = x[i / 4 * 4 + (imm >> (2 * (i % 4)) & 3)];
    return attn_sx_epi32(y);
}
#define _mm512_shuffle_epi32(a, imm) attn_sx_shuffle_epi32(a, (int)(imm))
/* zero-masked load of 8 dwords: lanes outside k are 0 and are not read */
static inline simde__m256i _mm256_maskz_loadu_epi32(simde__mmask8 k, const void *p) {
    int32_t x[8] = {0};
    for (int i = 0; i < 8; i++)
        if (k >> i & 1) memcpy(&x[i], (const char *)p + 4 * i, 4);
    simde__m256i v;
    memcpy(&v, x, sizeof v);
    return v;
}
/* AVX-VNNI's VPDPBUSD (VEX) computes what AVX512-VNNI's 256-bit form does:
 * per int32 lane, src plus the 4 products of a's unsigned bytes and b's
 * signed ones, wrapping. */
#define _mm256_dpbusd_avx_epi32(src, a, b) simde_mm256_dpbusd_epi32(src, a, b)

#endif
