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
    /* s (mr × nr, stride lds) = q2 (mr × E2 pairs, stride ldq) ·
     * kt2 (E2 × nr pairs, stride ldk): pairs run along E. */
    void (*qk)(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2,
               int64_t ldk, int64_t E2);
    /* o (mr × nvec*vl, stride ldo) += p2 (mr × K2 pairs, stride ldp)
     * · v2 (K2 × nvec*vl pairs, stride ldv): pairs run along the keys. */
    void (*pv)(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp, const uint32_t *v2,
               int64_t ldv, int64_t K2, int nvec);
    /* dst[i] = bf16(src[i]), round to nearest even; n even. */
    void (*to_bf16)(uint16_t *dst, const float *src, int64_t n);
    /* dst[i] = pair(bf16(even[i]), bf16(odd[i])). */
    void (*zip)(uint32_t *dst, const float *even, const float *odd, int64_t n);
} attn_bf16_kernels;

/* The bf16 kernels for the active ISA (chosen in dispatch.c): AVX512_BF16
 * when the CPU has it and the f32 kernels are AVX-512; the emulation with
 * the portable C kernels; else NULL: the f32 kernels, faster than any
 * emulation and at least as accurate, compute the bf16 mode. */
const attn_bf16_kernels *attn_bf16_active(void);

extern const attn_bf16_kernels attn_bf16_emulated;
#if defined(ATTN_HAVE_X86_KERNELS)
extern const attn_bf16_kernels attn_bf16_avx512;
#endif

/* One VDPBF16PS lane: acc + a.hi·b.hi, then + a.lo·b.lo, each step rounded
 * to nearest even, subnormal inputs and results flushed to zero. */
float attn_bf16_dot_pair(float acc, uint32_t a, uint32_t b);

#endif /* ATTN_UKERNEL_BF16_H */
