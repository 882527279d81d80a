/* gemm.h -- the multi-head layer's matrix products (gemm.c). Not public. */
#ifndef ATTN_KERNELS_GEMM_H
#define ATTN_KERNELS_GEMM_H

#include "base/base.h"
#include "kernels/ukernel.h"

/* c (M × N) = a (M × K) · b (K × N) [+ bias (1 × N)] [+ c when accumulate].
 * a, b and bias may be f32, f64, f16 or bf16 with any strides; c is f32 or
 * f64 and must not overlap a, b or bias. Every c(i, j) is one double sum,
 * Σ_p a(i, p) b(p, j) in order p = 0..K-1 taken in blocks of the core's
 * gemm_kc (each block summed from zero, then added), then the bias, then
 * c's old value, rounded once to c's dtype; so results are the same for any
 * thread count. uk: the microkernels (NULL: the active ones). False, with c
 * untouched, when the packing buffers cannot be allocated. */
bool attn_gemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const attn_mat *bias, bool accumulate,
               int threads, const attn_ukernels *uk);

#endif /* ATTN_KERNELS_GEMM_H */
