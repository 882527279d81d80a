/* dgemm_avx512.c -- the double GEMM microkernel for AVX-512F + FMA: an
 * 8 × 24 tile of c in 24 zmm accumulators, one broadcast of a and three
 * loads of b per step (28 of the 32 registers). Written out row by row so
 * that every accumulator is a named register, never an array in memory. */
#include "kernels/ukernel.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include <immintrin.h>

void attn_dgemm_avx512_8x24(double *c, int64_t ldc, const double *a, const double *b, int64_t k) {
    __m512d c00 = _mm512_setzero_pd(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m512d c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    __m512d c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
    __m512d c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    for (int64_t p = 0; p < k; p++, a += 8, b += 24) {
        __m512d b0 = _mm512_loadu_pd(b), b1 = _mm512_loadu_pd(b + 8), b2 = _mm512_loadu_pd(b + 16), x;
#define ROW(r)                                                                                    \
    x = _mm512_set1_pd(a[r]);                                                                     \
    c##r##0 = _mm512_fmadd_pd(x, b0, c##r##0);                                                    \
    c##r##1 = _mm512_fmadd_pd(x, b1, c##r##1);                                                    \
    c##r##2 = _mm512_fmadd_pd(x, b2, c##r##2);
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
    }
#define STORE(r)                                                                                  \
    _mm512_storeu_pd(c + r * ldc, _mm512_add_pd(_mm512_loadu_pd(c + r * ldc), c##r##0));          \
    _mm512_storeu_pd(c + r * ldc + 8, _mm512_add_pd(_mm512_loadu_pd(c + r * ldc + 8), c##r##1));  \
    _mm512_storeu_pd(c + r * ldc + 16, _mm512_add_pd(_mm512_loadu_pd(c + r * ldc + 16), c##r##2));
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5) STORE(6) STORE(7)
#undef STORE
}
#endif
