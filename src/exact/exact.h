/* exact.h -- the exact kernels: f64 arithmetic on one (batch, head) slice,
 * whatever the input dtype, rounded once on output. The streaming kernel is
 * attn_sdpa's f64 path and every f32 fallback; the textbook two-pass kernel
 * is the tests' reference. Not public. */
#ifndef ATTN_EXACT_H
#define ATTN_EXACT_H

#include "base/base.h"

/* The per-problem kernels. `work` is scratch memory of at least
 * attn_*_work_size(...) doubles, owned by the caller; the size functions
 * return -1 when the count overflows. */
int64_t attn_stream_work_size(int64_t E, int64_t Ev);
void attn_stream_kernel(const attn_problem *p, double *work);

/* The exact kernel on rows i0..i0+n-1 of one slice, in `work` (at least
 * attn_stream_work_size doubles): the one fallback of the fast kernels for
 * work their f32 arithmetic must not take. Callers allocate `work` before
 * writing any output, so that running out of memory never leaves an output
 * half done. */
void attn_exact_rows(const attn_problem *p, int64_t i0, int64_t n, double *work);

int64_t attn_reference_work_size(int64_t S, int64_t E, int64_t Ev);
void attn_reference_kernel(const attn_problem *p, double *work);
/* Writes the scores (L, S) into p->out; same scratch as the reference. */
void attn_scores_kernel(const attn_problem *p, double *work);

/* The exact backward pass of one slice (backward.c): adds the slice's
 * gradients into g's f64 accumulators, in `work` (at least
 * attn_backward_work_size doubles). */
int64_t attn_backward_work_size(int64_t S, int64_t E, int64_t Ev);
void attn_backward_kernel(const attn_grad_problem *g, double *work);

/* Dot product of two packed rows, in double. */
static inline double attn_dot(const double *a, const double *b, int64_t n) {
    double s = 0.0;
    for (int64_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

/* exp(s - m) for a score s that takes part and the row maximum m >= s (0
 * below e^-400: attn_exp_or_zero); exactly 1 when s == m is finite. A +inf
 * score gives e^(inf - inf), NaN, and so a NaN row, as PyTorch's softmax
 * gives it (every version): sharing the weight among the +inf keys would
 * be a limit that holds only if they grow alike. */
static inline double attn_softmax_term(double s, double m) {
    return s == m && m != INFINITY ? 1.0 : attn_exp_or_zero(s - m);
}

#endif /* ATTN_EXACT_H */
