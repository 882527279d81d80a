/* sgemm_avx512.c -- the f32 GEMM microkernel for AVX-512F + FMA: a 12 × 32
 * tile of c in 24 zmm accumulators, one broadcast of a and two loads of b
 * per step (27 of the 32 registers; BLIS's Skylake-X sgemm tile, turned for
 * row-major c). Written out row by row so that every accumulator is a named
 * register, never an array in memory. */
#include "kernels/ukernel.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include <immintrin.h>

void attn_sgemm_avx512_12x32(float *c, int64_t ldc, const float *a, const float *b, int64_t k) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00;
    __m512 c90 = c00, c91 = c00, cA0 = c00, cA1 = c00, cB0 = c00, cB1 = c00;
    for (int64_t p = 0; p < k; p++, a += 12, b += 32) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), x;
#define ROW(r, i)                                                                                 \
    x = _mm512_set1_ps(a[i]);                                                                     \
    c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0);                                                    \
    c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);
        ROW(0, 0) ROW(1, 1) ROW(2, 2) ROW(3, 3) ROW(4, 4) ROW(5, 5)
        ROW(6, 6) ROW(7, 7) ROW(8, 8) ROW(9, 9) ROW(A, 10) ROW(B, 11)
#undef ROW
    }
#define STORE(r, i)                                                                               \
    _mm512_storeu_ps(c + i * ldc, _mm512_add_ps(_mm512_loadu_ps(c + i * ldc), c##r##0));          \
    _mm512_storeu_ps(c + i * ldc + 16, _mm512_add_ps(_mm512_loadu_ps(c + i * ldc + 16), c##r##1));
    STORE(0, 0) STORE(1, 1) STORE(2, 2) STORE(3, 3) STORE(4, 4) STORE(5, 5)
    STORE(6, 6) STORE(7, 7) STORE(8, 8) STORE(9, 9) STORE(A, 10) STORE(B, 11)
#undef STORE
}
#endif
