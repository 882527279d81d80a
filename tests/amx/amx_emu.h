/* amx_emu.h -- an emulator of Intel AMX's tiles for the tests, so that the
 * AMX kernels (src/kernels/x86/ukernel_amx.c) run, and are tested, on a CPU
 * without AMX. Included first (-include) when the tests compile the kernel
 * file a second time without -mamx-tile: it replaces the compiler's tile
 * intrinsics with functions over an array of eight tiles per thread.
 *
 * What it models, after Intel's SDM (the instructions' Operation sections):
 *   LDTILECFG   palette 1: each tile's rows (<= 16) and bytes per row (<= 64)
 *   TILELOADD   rows of colsb bytes from base + r * stride; the rest of the
 *               tile zero (write_row_and_zero, zero_upper_rows)
 *   TILESTORED  rows of colsb bytes to base + r * stride
 *   TILEZERO, TILERELEASE
 *   TDPBF16PS   C (M × N f32) += A (M × K pairs of bf16) · B (K × N pairs):
 *               per element, the even products and the odd products summed
 *               apart from zero, each step an f32 FMA rounded to nearest
 *               even with denormal inputs as zero and denormal results
 *               flushed (DAZ = FTZ = 1, MXCSR ignored); then the two sums
 *               added, and that added to C, each rounded and flushed alike
 *   TDPFP16PS   the same with IEEE half pairs (AMX-FP16)
 * The order of the sums is the SDM's; hardware may not be checked here. */
#ifndef ATTN_AMX_EMU_H
#define ATTN_AMX_EMU_H
#include <immintrin.h> /* first, so that the names below replace its macros */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct attn_amx_state {
    unsigned char t[8][16][64]; /* tmm0-7: 16 rows of 64 bytes */
    uint16_t colsb[8];
    uint8_t rows[8];
    int configured;
} attn_amx_state;
static _Thread_local attn_amx_state attn_amx;

static inline void attn_amx_loadconfig(const void *cfg) {
    const unsigned char *c = cfg;
    memset(&attn_amx, 0, sizeof attn_amx);
    if (c[0] != 1) return; /* palette 0: tiles released */
    for (int i = 0; i < 8; i++) {
        memcpy(&attn_amx.colsb[i], c + 16 + 2 * i, 2);
        attn_amx.rows[i] = c[48 + i];
        if (attn_amx.colsb[i] > 64) attn_amx.colsb[i] = 64; /* the hardware faults; the tests never ask */
        if (attn_amx.rows[i] > 16) attn_amx.rows[i] = 16;
    }
    attn_amx.configured = 1;
}
static inline void attn_amx_loadd(int tile, const void *base, long stride) {
    memset(attn_amx.t[tile], 0, sizeof attn_amx.t[tile]);
    for (int r = 0; r < attn_amx.rows[tile]; r++)
        memcpy(attn_amx.t[tile][r], (const char *)base + (long)r * stride, attn_amx.colsb[tile]);
}
static inline void attn_amx_stored(int tile, void *base, long stride) {
    for (int r = 0; r < attn_amx.rows[tile]; r++)
        memcpy((char *)base + (long)r * stride, attn_amx.t[tile][r], attn_amx.colsb[tile]);
}
static inline void attn_amx_zero(int tile) { memset(attn_amx.t[tile], 0, sizeof attn_amx.t[tile]); }

/* f32 arithmetic with DAZ and FTZ */
static inline float attn_amx_daz(float x) { return fabsf(x) < 0x1p-126f ? 0.0f * x : x; }
static inline float attn_amx_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return attn_amx_daz(f);
}
static inline float attn_amx_f16(uint16_t h) { /* exact: every half is a normal float */
    unsigned e = h >> 10 & 0x1f, m = h & 0x3ff;
    float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), (int)e - 25);
    return h >> 15 ? -f : f;
}
static inline float attn_amx_fma(float a, float b, float c) { return attn_amx_daz(fmaf(a, b, attn_amx_daz(c))); }

/* C += A · B over pairs; f16 chooses the pairs' format. */
static inline void attn_amx_dp(int tc, int ta, int tb, int f16) {
    int M = attn_amx.rows[tc], N = attn_amx.colsb[tc] / 4, K = attn_amx.colsb[ta] / 4;
    for (int m = 0; m < M; m++) {
        float even[16] = {0}, odd[16] = {0};
        for (int k = 0; k < K; k++) {
            uint16_t a[2], b[2];
            memcpy(a, &attn_amx.t[ta][m][4 * k], 4);
            for (int n = 0; n < N; n++) {
                memcpy(b, &attn_amx.t[tb][k][4 * n], 4);
                float a0 = f16 ? attn_amx_f16(a[0]) : attn_amx_bf16(a[0]), a1 = f16 ? attn_amx_f16(a[1]) : attn_amx_bf16(a[1]);
                float b0 = f16 ? attn_amx_f16(b[0]) : attn_amx_bf16(b[0]), b1 = f16 ? attn_amx_f16(b[1]) : attn_amx_bf16(b[1]);
                even[n] = attn_amx_fma(a0, b0, even[n]);
                odd[n] = attn_amx_fma(a1, b1, odd[n]);
            }
        }
        for (int n = 0; n < N; n++) {
            float c;
            memcpy(&c, &attn_amx.t[tc][m][4 * n], 4);
            c = attn_amx_daz(attn_amx_daz(c) + attn_amx_daz(even[n] + odd[n]));
            memcpy(&attn_amx.t[tc][m][4 * n], &c, 4);
        }
    }
}

#undef _tile_loadconfig
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_release
#undef _tile_dpbf16ps
#undef _tile_dpfp16ps
#define _tile_loadconfig(cfg) attn_amx_loadconfig(cfg)
#define _tile_loadd(t, base, stride) attn_amx_loadd(t, base, (long)(stride))
#define _tile_stored(t, base, stride) attn_amx_stored(t, base, (long)(stride))
#define _tile_zero(t) attn_amx_zero(t)
#define _tile_release() memset(&attn_amx, 0, sizeof attn_amx)
#define _tile_dpbf16ps(c, a, b) attn_amx_dp(c, a, b, 0)
#define _tile_dpfp16ps(c, a, b) attn_amx_dp(c, a, b, 1)

/* The kernel set, renamed so that the tests link it beside the library's. */
#define attn_bf16_amx attn_bf16_amx_emulated
#endif
