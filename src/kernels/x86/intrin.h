/* intrin.h -- the x86 intrinsics of the kernel files: the compiler's
 * <immintrin.h>, except when a kernel file is compiled a second time for
 * the tests against SIMDe's portable implementations of the same functions
 * (tests/simde/intrin_simde.h, included first, defines
 * ATTN_INTRINSICS_FROM_SIMDE): then a CPU without the instructions still
 * runs, and tests, the very code of the kernels. */
#ifndef ATTN_X86_INTRIN_H
#define ATTN_X86_INTRIN_H
#if !defined(ATTN_INTRINSICS_FROM_SIMDE)
#include <immintrin.h>
#endif

/* A kernel's small helpers, inlined by force so that their vectors stay in
 * registers; the SIMDe build leaves it to the compiler (forced, its portable
 * intrinsics take minutes to compile). */
#if defined(ATTN_INTRINSICS_FROM_SIMDE)
#define ATTN_KERNEL_INLINE static inline
#else
#define ATTN_KERNEL_INLINE static inline __attribute__((always_inline))
#endif
#endif
