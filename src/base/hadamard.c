/* hadamard.c -- the Walsh–Hadamard rotation (attn.h, attn_hadamard): a row
 * x of n values (n a power of two) becomes H_n x / sqrt(n), H_n
 * Sylvester's Hadamard matrix (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]],
 * scipy.linalg.hadamard's order). H_n / sqrt(n) is orthonormal and
 * symmetric, so it is its own inverse: the same function turns a row and
 * turns it back, and q·k is unchanged when both are turned.
 *
 * The fast transform: log2(n) passes of butterflies (a, b) -> (a + b, a - b)
 * over pairs h apart, h = 1, 2, 4, ..., O(n log n). It runs in f64 on rows
 * widened exactly from f32, and the result is rounded to f32 once, so a
 * turned row is the exact rotation rounded to nearest even (up to the f64
 * sums' rounding, below 2^-50 relative). What the caches with the rotation
 * (attn_kv_cache_desc.hadamard) and their attention use, written once. */
#include "base/base.h"

#include <stdlib.h>

bool attn_power_of_two(int64_t n) { return n >= 1 && (n & (n - 1)) == 0; }

void attn_hadamard_f64(double *x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b, x[j + h] = a - b;
            }
    double s = 1.0 / sqrt((double)n);
    for (int64_t j = 0; j < n; j++) x[j] *= s;
}

void attn_hadamard_f32(float *x, int64_t n, double *work) {
    for (int64_t j = 0; j < n; j++) work[j] = x[j];
    attn_hadamard_f64(work, n);
    for (int64_t j = 0; j < n; j++) x[j] = (float)work[j];
}

attn_status attn_hadamard(attn_tensor *x, attn_error *err) {
    if (!x || !x->data) return attn_fail(err, ATTN_ERR_NULL, "x is NULL or has NULL data");
    if (x->dtype != ATTN_F32 && x->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "x is %s; the rotation takes f32 or f64", attn_dtype_name(x->dtype));
    if (x->rank < 1 || x->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "x has rank %d; rows need rank 1 to %d", x->rank, ATTN_MAX_RANK);
    attn_status st = attn_check_dims(x->rank, x->shape, "x", err);
    if (st) return st;
    int64_t n = x->shape[x->rank - 1], numel = attn_tensor_numel(x);
    if (numel < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "x's element count overflows");
    if (!attn_power_of_two(n))
        return attn_fail(err, ATTN_ERR_SHAPE, "x's rows have %lld value%s; the Walsh-Hadamard rotation needs a power of "
                         "two", (long long)n, attn_plural(n));
    if ((st = attn_check_extent(x, "x", err))) return st;
    /* each row is read whole before it is written: it may not overlap another */
    if ((st = attn_check_writable(x, "x", err))) return st;
    if (numel == 0) return ATTN_OK;
    if ((uint64_t)n > SIZE_MAX / sizeof(double)) return attn_fail(err, ATTN_ERR_OVERFLOW, "a row's scratch overflows");
    double *w = malloc((size_t)n * sizeof(double));
    if (!w) return attn_fail(err, ATTN_ERR_NO_MEMORY, "no memory for a row of %lld values", (long long)n);
    size_t es = attn_dtype_size(x->dtype);
    for (int64_t r = 0; r < numel / n; r++) {
        int64_t off = 0, rest = r; /* row r's first element, rows in C order */
        for (int d = x->rank - 2; d >= 0; d--) off += rest % x->shape[d] * x->strides[d], rest /= x->shape[d];
        char *row = (char *)x->data + off * (int64_t)es;
        int64_t cs = x->strides[x->rank - 1] * (int64_t)es;
        for (int64_t j = 0; j < n; j++) {
            if (x->dtype == ATTN_F64) memcpy(&w[j], row + j * cs, 8);
            else { float f; memcpy(&f, row + j * cs, 4); w[j] = f; }
        }
        attn_hadamard_f64(w, n);
        for (int64_t j = 0; j < n; j++) {
            if (x->dtype == ATTN_F64) memcpy(row + j * cs, &w[j], 8);
            else { float f = (float)w[j]; memcpy(row + j * cs, &f, 4); }
        }
    }
    free(w);
    return ATTN_OK;
}

attn_status attn_check_hadamard(int hadamard, attn_dtype dtype, int64_t key_dim, const char *name, attn_error *err) {
    if (hadamard == 0) return ATTN_OK;
    if (hadamard != 1)
        return attn_fail(err, ATTN_ERR_OPTION, "%s->hadamard is %d; it must be 0 (none) or 1 (rotate keys)", name,
                         hadamard);
    if (!attn_dtype_quantized(dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s->hadamard is set but the dtype is %s; the rotation is for quantized "
                         "keys (" ATTN_QUANT_NAMES ")", name, attn_dtype_name(dtype));
    if (!attn_power_of_two(key_dim) || key_dim > ATTN_HADAMARD_MAX)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s->hadamard is set but key_dim is %lld; the Walsh-Hadamard rotation "
                         "needs a power of two up to %d", name, (long long)key_dim, ATTN_HADAMARD_MAX);
    return ATTN_OK;
}
