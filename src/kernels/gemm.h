/* gemm.h -- the multi-head layer's matrix products (gemm.c). Not public. */
#ifndef ATTN_KERNELS_GEMM_H
#define ATTN_KERNELS_GEMM_H

#include "base/base.h"
#include "kernels/ukernel.h"
#include "kernels/ukernel_bf16.h"

/* c (M × N) = a (M × K) · b (K × N) [+ bias (1 × N)] [+ c when accumulate].
 * a, b and bias may be f32, f64, f16 or bf16 with any strides; c is f32 or
 * f64 and must not overlap a, b or bias. Every c(i, j) is one double sum,
 * Σ_p a(i, p) b(p, j) in order p = 0..K-1 taken in blocks of the core's
 * gemm_kc (each block summed from zero, then added), then the bias, then
 * c's old value, rounded once to c's dtype; so results are the same for any
 * thread count. uk: the microkernels (NULL: the active ones). scratch:
 * attn_gemm_scratch_bytes(false, ...) bytes of the caller's (8-byte
 * aligned), or NULL to allocate them. False, with c untouched, when that
 * allocation fails. */
bool attn_gemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const attn_mat *bias, bool accumulate,
               int threads, const attn_ukernels *uk, void *scratch);

/* The same product with f32 sums, for f32 layers: c (f32, M × N) = a · b
 * [+ bias] [+ c]. a, b and bias may be f32, f16 or bf16 (widened exactly
 * as they are packed). Every c(i, j) is Σ_p a(i, p) b(p, j) in f32, in
 * order p = 0..K-1 taken in blocks of the core's gemm_kc (each block summed
 * from zero by the microkernel, one rounding per step, fused where the ISA
 * has FMA, then added to the running sum), then + bias, then + c's old
 * value, each addition rounded to f32; so results are the same for any
 * thread count (but differ between ISAs, whose tiles add in the same order
 * yet may or may not fuse). b is read from b_packed when it is not NULL (b
 * packed once by attn_sgemm_pack_b with uk's sgemm_nr; b may then be NULL),
 * else packed here. scratch: attn_gemm_scratch_bytes(true, ...) bytes of
 * the caller's (4-byte aligned), or NULL to allocate them. False, with c
 * untouched, when that allocation fails. */
bool attn_sgemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const float *b_packed, const attn_mat *bias,
                bool accumulate, int threads, const attn_ukernels *uk, void *scratch);
/* The bytes of scratch an M × N × K product needs: attn_sgemm's when f32,
 * attn_gemm's otherwise (b_packed: b comes packed, f32 only). */
size_t attn_gemm_scratch_bytes(bool f32, int64_t M, int64_t N, int64_t K, int threads, const attn_ukernels *uk,
                               bool b_packed);
/* b (K × N, f32, f16 or bf16, any strides) packed for attn_sgemm: panels of
 * nr columns, panel jr holding b(p, jr·nr + t) at [jr·K·nr + p·nr + t],
 * columns past N zero. attn_sgemm_packed_floats(K, N, nr) floats (-1 when
 * that overflows). */
int64_t attn_sgemm_packed_floats(int64_t K, int64_t N, int nr);
void attn_sgemm_pack_b(float *dst, const attn_mat *b, int nr, int threads);

/* The same product on bf16 pairs with f32 sums, on the microkernel of a
 * bf16 kernel set (bk, with its gemm): c (f32, M × N) = a · b [+ bias] [+
 * c]. Every element of a and b is rounded to bf16 (nearest even; exact for
 * bf16 operands, which is the point: bf16 weights are read as they are);
 * then c(i, j) is Σ_p a(i, p) b(p, j) with the products of bf16 exact in
 * f32 and each addition rounded to f32 (with denormals flushed to zero, as
 * VDPBF16PS and TDPBF16PS do), in order p = 0..K-1 in pairs (AMX: its
 * tiles' order over 32 elements at a time), taken in blocks of the core's
 * gemm_kc pairs (each block summed from zero, then added), then + bias,
 * then + c, each addition rounded to f32: the same for any thread count,
 * and within (K + 4)·2^-24·Σ|â||b̂| of the exact sum of the rounded
 * values â, b̂. b_packed: b packed once by attn_gemm_bf16_pack_b for bk
 * (b may then be NULL), or NULL to pack here. scratch:
 * attn_gemm_bf16_scratch_bytes bytes (4-byte aligned) or NULL. */
bool attn_gemm_bf16(const attn_mat *c, const attn_mat *a, const attn_mat *b, const uint32_t *b_packed,
                    const attn_mat *bias, bool accumulate, int threads, const attn_bf16_kernels *bk, void *scratch);
size_t attn_gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, int threads, const attn_bf16_kernels *bk,
                                    bool b_packed);
/* b (K × N, any dtype and strides) rounded to bf16 and packed for bk's
 * gemm: panel jr holds pair p of column jr·nr + t at [jr·K2·nr + p·nr + t],
 * K2 = ceil(K / 2) rounded up to bk's gemm_kp, zeros past K and N.
 * attn_gemm_bf16_packed_pairs(K, N, bk) uint32 (-1 when that overflows). */
int64_t attn_gemm_bf16_packed_pairs(int64_t K, int64_t N, const attn_bf16_kernels *bk);
void attn_gemm_bf16_pack_b(uint32_t *dst, const attn_mat *b, const attn_bf16_kernels *bk, int threads);

#endif /* ATTN_KERNELS_GEMM_H */
