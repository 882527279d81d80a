/* exp2.h -- the one definition of the microkernels' 2^x, which every ISA
 * instantiates with its own vector operations:
 *   x below ATTN_EXP2_LO (-inf included) gives exactly 0; otherwise clamp x
 *   to [ATTN_EXP2_LO, ATTN_EXP2_HI] (beyond HI, 2^x overflows to inf anyway;
 *   NaN stays NaN), n = round(x), f = x - n exactly, 2^f by ATTN_EXP2_POLY,
 *   then an exact scaling by 2^n (one rounding; how is the ISA's).
 *
 * Why 0 below 2^-64, rather than the tiny or subnormal result: every 2^x is
 * then exactly 0 or a normal number of 2^-64 or more, and its product with
 * any operand of magnitude 2^-62 or more (a value, a gradient) is normal too.
 * On Intel cores each subnormal operand or result costs a microcode assist of
 * about 150 cycles, and weights such as e^-100 (from ALiBi's far keys, large
 * negative mask fills, scores far below a sink) are common enough to make a
 * whole forward 3 to 4 times slower. A cut lane is computed from the clamped x,
 * so it underflows nothing either. The softmax loses nothing it could keep:
 * the cut weights are each below 2^-64 of the row maximum's, so together
 * they move the output by less than S · 2^-64 · max|v|; and a score 44 below
 * the maximum means max|s| >= 22, where attn.h's bound already allows 4 ·
 * 2^-24 · 22 · max|v|, which is more for any S below 2^46. */
#ifndef ATTN_KERNELS_EXP2_H
#define ATTN_KERNELS_EXP2_H

#define ATTN_EXP2_LO -64.0f /* below: exactly 0 */
#define ATTN_EXP2_HI 129.0f /* 2^129 overflows to inf */

/* 2^f for f in [-1/2, 1/2]: Cephes' exp2f polynomial, degree 6, about one
 * ulp, in Horner form for any float type: MADD(a, b, c) is a·b + c and K(c)
 * makes the constant c. f must be a plain variable (it is read six times). */
#define ATTN_EXP2_POLY(MADD, K, f)                                                             \
    MADD(MADD(MADD(MADD(MADD(MADD(K(1.535336188319500e-4f), f, K(1.339887440266574e-3f)), f,  \
                             K(9.618437357674640e-3f)),                                        \
                        f, K(5.550332471162809e-2f)),                                          \
                   f, K(2.402264791363012e-1f)),                                               \
              f, K(6.931472028550421e-1f)),                                                    \
         f, K(1.0f))

/* 2^f for f in [-1/2, 1/2] to a relative 9.2e-8 (1.54 · 2^-24), one degree
 * less: the minimax polynomial of degree 5 with 1 as its constant term
 * (tests/exp2_poly5.py fits it and checks these coefficients). For
 * soft-capping only: its 2^x, t, enters cap · (1 - t) / (1 + t), where a
 * relative error e of t moves the result by at most cap · e / 2 (the
 * derivative's 2t / (1 + t)^2 is at most 1/2). */
#define ATTN_EXP2_POLY5(MADD, K, f)                                                            \
    MADD(MADD(MADD(MADD(MADD(K(1.326470879e-3f), f, K(9.671511471e-3f)), f,                   \
                        K(5.550733776e-2f)),                                                   \
                   f, K(2.402224210e-1f)),                                                     \
              f, K(6.931469776e-1f)),                                                          \
         f, K(1.0f))

/* 2^f for f in [-1/2, 1/2] to a relative 1.02e-4 (about 2^-13.3): the
 * minimax polynomial of degree 3 with 1 as its constant term (fitted and
 * checked by tests/exp2_poly5.py, as POLY5). For the bf16 compute mode's
 * softmax only (ukernel_bf16.h, exp_sum): its weights are rounded to bf16,
 * within 2^-9 relative, before P·V, so the polynomial's error is a twentieth
 * of that rounding; the rows' sums l (and lse) take it whole, within
 * 1.02e-4 relative (attn.h states it with the mode). */
#define ATTN_EXP2_POLY3(MADD, K, f)                                                            \
    MADD(MADD(MADD(K(5.500868998e-2f), f, K(2.422106314e-1f)), f, K(6.932829170e-1f)), f, K(1.0f))

#endif /* ATTN_KERNELS_EXP2_H */
