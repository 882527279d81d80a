/* rope.h -- rotary position embeddings where the kernels pack q and k
 * (rope.c), and the checks of attn_rope_options that attn_rope and
 * attn_sdpa share. Not public. */
#ifndef ATTN_KERNELS_ROPE_H
#define ATTN_KERNELS_ROPE_H

#include "base/base.h"

/* One call's RoPE, worked out: pair k (k < half) of a row is the elements
 * (k, k + half) in the halves layout, (2k, 2k + 1) interleaved, and turns
 * at position p by p / scaling · inv_freq[k]. */
typedef struct attn_rope_plan {
    attn_rope_layout layout;
    int64_t half;           /* rotary_dim / 2 */
    double scaling;         /* linear_scaling */
    const double *inv_freq; /* half: 1 / base^(2k / rotary_dim) */
    /* cos and sin of t · inv_freq[k] / scaling for t < steps, at
     * [k * steps + t]: a row at p0 + t turns by the angle at p0 plus this
     * one (angle addition, in double), so a block of rows costs `half`
     * calls of cos and sin, not half per row. */
    const double *step_cos, *step_sin;
    int64_t steps;
} attn_rope_plan;

/* The caller's options (NULL: defaults) read up to their struct_size and
 * checked for rows of E elements; *rotary_dim is the dimension they turn.
 * name is what the caller calls the struct ("options" for attn_rope's,
 * "options->rope" for those inside other options): a struct_size error
 * reads "NAME->struct_size is N ...". */
attn_status attn_rope_read_options(attn_rope_options *o, int64_t *rotary_dim, const attn_rope_options *in,
                                   int64_t E, const char *name, attn_error *err);

/* Doubles a plan for `steps` table entries needs (with its inv_freq). */
int64_t attn_rope_plan_doubles(int64_t rotary_dim, int64_t steps);
/* Fill a plan over mem (attn_rope_plan_doubles doubles) from checked options. */
void attn_rope_plan_init(attn_rope_plan *r, const attn_rope_options *o, int64_t rotary_dim, int64_t steps,
                         double *mem);

/* Turn n rows in place, row t at position p0 + t; element e of row t is at
 * x[t * st + e * se] (rows: st = ld, se = 1; a transposed block: st = 1,
 * se = ld). dir is +1 (RoPE) or -1 (its transpose, for gradients). */
void attn_rope_apply_f64(double *x, int64_t st, int64_t se, int64_t n, const attn_rope_plan *r, int64_t p0, int dir);
void attn_rope_apply_f32(float *x, int64_t st, int64_t se, int64_t n, const attn_rope_plan *r, int64_t p0, int dir);

/* Every matrix of t (..., n, E), f32 or f64, any strides, turned in place,
 * row t of each matrix at position p0 + t. */
void attn_rope_apply_tensor(const attn_tensor *t, const attn_rope_plan *r, int64_t p0, int dir);

#endif /* ATTN_KERNELS_ROPE_H */
