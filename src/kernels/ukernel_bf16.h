/* ukernel_bf16.h -- the bf16 compute mode's microkernels: dot products of
 * bfloat16 pairs accumulated in f32, the operation of AVX512_BF16's
 * VDPBF16PS. Where the CPU lacks it, a portable emulation computes the same
 * thing (see bf16_emulated.c). A "pair" is a uint32 holding two bf16: the
 * low half is the even element, the high half the odd one. */
#ifndef ATTN_UKERNEL_BF16_H
#define ATTN_UKERNEL_BF16_H

#include "kernels/ukernel.h"

typedef struct attn_bf16_kernels {
    const char *name; /* "avx512_bf16" or "emulated" */
    int vl, nv;       /* as in attn_ukernels: nr = vl * nv columns per tile */
    int mr;           /* query rows per register tile, as in attn_ukernels */
    /* Worth running only where the CPU issues its dot product at the f32
     * FMA's rate: two bf16 products per lane at half that rate are no more
     * work per cycle than f32's FMA, and the conversions make the mode
     * slower than f32. Where it is half rate, the mode computes in f32
     * (faster, and more exact). */
    bool needs_full_rate;
    /* s (mr × nr, stride lds) = q2 (mr × E2 pairs, stride ldq) ·
     * kt2 (E2 × nr pairs, stride ldk): pairs run along E. */
    void (*qk)(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
               int64_t ldk, int64_t E2);
    /* qk, and each row's largest score joins row_max[r] (r < mr: the larger
     * of the two), taken while the scores are in registers: the softmax
     * then need not read them again for it. NULL where a set has none. */
    void (*qk_max)(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
                   int64_t ldk, int64_t E2, float *row_max);
    /* o (mr × nvec*vl, stride ldo) += p2 (mr × K2 pairs, stride ldp)
     * · v2 (K2 × nvec*vl pairs, stride ldv): pairs run along the keys. */
    void (*pv)(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp, const uint32_t *v2,
               int64_t ldv, int64_t K2, int nvec);
    /* The softmax's exp pass of the mode, as attn_ukernels.exp_sum (the
     * weights x[i] = e^(x[i] - m) for x[i] <= m, the same exact 0 below
     * 2^-64, their sum in a fixed order, n a multiple of 32) at the mode's
     * accuracy: 2^f by ATTN_EXP2_POLY3 (within 1.02e-4 relative,
     * kernels/exp2.h), where the f32 kernels take degree 6. Its weights are
     * rounded to bf16 for P·V anyway; this pass was half the softmax's time,
     * and the softmax a fifth of the mode's, at d = 64. p NULL: the weights
     * go back into x (for dropout, which scales them before to_bf16); else
     * they go to p as bf16, rounded as to_bf16 rounds (so bitwise to_bf16
     * after the pass), and x is left as scratch: one pass over the row, not
     * two. The sum is the same either way. */
    float (*exp_sum)(uint16_t *p, float *x, int64_t n, float m);
    /* dst[i] = bf16(src[i]), round to nearest even; n even. */
    void (*to_bf16)(uint16_t *dst, const float *src, int64_t n);
    /* dst[i] = pair(bf16(even[i]), bf16(odd[i])). */
    void (*zip)(uint32_t *dst, const float *even, const float *odd, int64_t n);

    /* The layer's products on bf16 pairs (kernels/gemm.c, attn_gemm_bf16),
     * with this set's own register tile: c (gemm_mr × gemm_nr f32, row
     * stride ldc) += a2 · b2 over k2 pairs, k2 a multiple of gemm_kp.
     * b2[p · nr + j] is pair p of column j (rows 2p and 2p + 1 of b);
     * a2 comes in blocks of gemm_kp pairs, a2[(p / kp) · mr · kp + i · kp +
     * p % kp] pair p of row i: kp = 1 is one column of pairs after another
     * (what a broadcast reads), kp = 16 an AMX tile of 16 rows × 16 pairs
     * after another. Each c(i, j) is summed from zero, one pair after
     * another (VDPBF16PS's order, attn_bf16_dot_pair; AMX: TDPBF16PS's
     * order over 16 pairs at a time), then added to c with one rounding. */
    void (*gemm)(float *c, int64_t ldc, const uint32_t *a2, const uint32_t *b2, int64_t k2);
    int gemm_mr, gemm_nr, gemm_kp;
} attn_bf16_kernels;

/* The bf16 kernels for the active ISA (chosen in dispatch.c, best first):
 * AMX when the CPU has AMX-BF16 and Linux granted the tile state, with the
 * AVX-512 f32 kernels; AVX512_BF16 when the CPU has it and issues
 * VDPBF16PS at the FMA's rate; the emulation with the portable C kernels;
 * else NULL: the f32 kernels, faster and at least as accurate, compute the
 * bf16 mode. */
const attn_bf16_kernels *attn_bf16_active(void);
/* Whether the mode gains from bk on a core whose VDPBF16PS runs at the FMA's
 * rate (dp_full_rate) or at half of it: bk's registered needs_full_rate. */
bool attn_bf16_set_pays(const attn_bf16_kernels *bk, bool dp_full_rate);
/* What ATTN_VERBOSE says of them: the active set's name, and why a better
 * one was passed over (AMX refused by the kernel, a half-rate VDPBF16PS). */
const char *attn_bf16_label(void);
/* Tests only: make bk the process's bf16 set (NULL: the f32 kernels) until
 * called again; returns the one it replaces. Not safe beside running calls. */
const attn_bf16_kernels *attn_bf16_set_for_tests(const attn_bf16_kernels *bk);

extern const attn_bf16_kernels attn_bf16_emulated;
#if defined(ATTN_HAVE_X86_KERNELS)
extern const attn_bf16_kernels attn_bf16_avx512;
extern const attn_bf16_kernels attn_bf16_amx;
#endif

/* The mode's exp pass in portable C (exp_sum with p NULL, degree 3;
 * ukernel_c.c), the emulation's. */
float attn_exp_sum_bf16_portable(float *x, int64_t n, float m);

/* One VDPBF16PS lane: fma(a.hi, b.hi, acc), then fma(a.lo, b.lo, that),
 * each rounded once to nearest even, subnormal inputs (acc too) and
 * results flushed to zero. */
float attn_bf16_dot_pair(float acc, uint32_t a, uint32_t b);

/* A bf16 as VDPBF16PS and TDPBF16PS read it: widened to f32, a subnormal
 * read as zero (the instructions' DAZ), its sign kept. What the emulation
 * multiplies, and what the layer's backward takes a product on the bf16
 * GEMM to have read (layer/mha_backward.c). */
float attn_bf16_daz(uint16_t h);

#endif /* ATTN_UKERNEL_BF16_H */
