/* sgemm_avx2.c -- the f32 GEMM microkernel for AVX2 + FMA (compiled with
 * -mavx2 -mfma): a 6 × 16 tile of c in 12 ymm accumulators, one broadcast
 * of a and two loads of b per step (BLIS's Haswell sgemm shape). */
#include "kernels/ukernel.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include <immintrin.h>

void attn_sgemm_avx2_6x16(float *c, int64_t ldc, const float *a, const float *b, int64_t k) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < k; p++, a += 6, b += 16) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
#define ROW(r)                                                                                    \
    x = _mm256_broadcast_ss(a + r);                                                               \
    c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                                    \
    c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
#define STORE(r)                                                                                  \
    _mm256_storeu_ps(c + r * ldc, _mm256_add_ps(_mm256_loadu_ps(c + r * ldc), c##r##0));          \
    _mm256_storeu_ps(c + r * ldc + 8, _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8), c##r##1));
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
#undef STORE
}
#endif
