/* tensor.c -- tensor views: construction, element counts, overflow-safe sizes. */
#include "base/base.h"

#include <stdio.h>
#include <string.h>

bool attn_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

bool attn_add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

void attn_format_shape(char *buf, size_t size, int rank, const int64_t *shape) {
    size_t n = 0;
    if (!buf || size == 0) return;
    buf[0] = '\0';
    if (rank > 0 && !shape) rank = 0; /* nothing to print but "()" */
    if (rank < 0 || rank > ATTN_MAX_RANK) { /* a rank the caller got wrong: shape[] holds only ATTN_MAX_RANK */
        snprintf(buf, size, "(rank %d)", rank);
        return;
    }
    n += (size_t)snprintf(buf + n, size - n, "(");
    for (int d = 0; d < rank && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < size) n += (size_t)snprintf(buf + n, size - n, rank == 1 ? ",)" : ")");
}

/* Each dtype's name, by its value; attn_dtype_from_name reads them back. */
static const char *const NAMES[] = {"unknown", "f32", "f64", "bool", "f16", "bf16", "q8", "q4",
                                    "e4m3",    "e5m2", "q4_1", "q4c", "q2c"};
enum { NAMED = sizeof NAMES / sizeof NAMES[0] };

const char *attn_dtype_name(attn_dtype dtype) {
    return (unsigned)dtype < NAMED ? NAMES[dtype] : "unknown";
}

attn_status attn_dtype_from_name(attn_dtype *dtype, const char *name, attn_error *err) {
    if (!dtype || !name) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", dtype ? "name" : "dtype");
    char names[128];
    size_t len = 0;
    for (int d = 1; d < NAMED; d++) {
        if (strcmp(name, NAMES[d]) == 0) {
            *dtype = (attn_dtype)d;
            return ATTN_OK;
        }
        if (len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", d == 1 ? "" : d == NAMED - 1 ? " or " : ", ",
                                    NAMES[d]);
    }
    return attn_fail(err, ATTN_ERR_DTYPE, "no dtype is named \"%.64s\"; the dtypes are %s", name, names);
}

size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_F32: return 4;
    case ATTN_F64: return 8;
    case ATTN_BOOL: return 1;
    case ATTN_F16:
    case ATTN_BF16: return 2;
    case ATTN_Q8:
    case ATTN_Q4:
    case ATTN_Q4_1:
    case ATTN_E4M3:
    case ATTN_E5M2: return 0; /* no whole bytes per element: attn_quant_row_size */
    case ATTN_Q4C:
    case ATTN_Q2C: return 0; /* groups of positions: attn_quant_group_size */
    }
    return 0;
}

int64_t attn_tensor_numel(const attn_tensor *t) {
    int64_t nonzero = 1;
    bool empty = false;
    if (!t || t->rank < 0 || t->rank > ATTN_MAX_RANK) return -1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] < 0) return -1;
        /* The product of the non-zero dimensions must fit even for an empty
         * array, so that its default strides are representable. */
        if (t->shape[d] == 0) empty = true;
        else if (!attn_mul_i64(nonzero, t->shape[d], &nonzero)) return -1;
    }
    return empty ? 0 : nonzero;
}

attn_status attn_check_dims(int rank, const int64_t *shape, const char *name, attn_error *err) {
    for (int d = 0; d < rank; d++)
        if (shape[d] < 0)
            return attn_fail(err, ATTN_ERR_SHAPE, "%s%sdimension %d is negative (%lld)", name ? name : "",
                             name ? "'s " : "", d, (long long)shape[d]);
    return ATTN_OK;
}

/* A tensor of quantized rows (attn.h): shape in values, the last stride 1,
 * the others in bytes (by default C order over rows of
 * attn_quant_row_size bytes). */
static attn_status init_quantized(attn_tensor *t, void *data, attn_dtype dtype, int rank, const int64_t *shape,
                                  const int64_t *strides, attn_error *err) {
    attn_tensor v = {0}, bytes;
    v.data = data, v.dtype = dtype, v.rank = rank;
    attn_status st = attn_check_dims(rank, shape, NULL, err);
    if (st) return st;
    for (int d = 0; d < rank; d++) v.shape[d] = shape[d];
    if (attn_tensor_numel(&v) < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "element count of the shape overflows");
    int64_t step = rank > 0 && shape[rank - 1] > 0 ? attn_row_bytes(dtype, shape[rank - 1]) : 0;
    for (int d = rank - 1; d >= 0; d--) {
        v.strides[d] = strides ? strides[d] : d == rank - 1 ? 1 : step;
        if (d < rank - 1 && shape[d] > 0 && !attn_mul_i64(step, shape[d], &step))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "the byte size of the shape overflows");
    }
    if ((st = attn_quant_bytes(&v, &bytes, "the tensor", err))) return st;
    *t = v;
    return ATTN_OK;
}

attn_status attn_tensor_init(attn_tensor *t, void *data, attn_dtype dtype, int rank,
                             const int64_t *shape, const int64_t *strides, attn_error *err) {
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "tensor pointer is NULL");
    if (rank < 0 || rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "rank %d is outside 0..%d", rank, ATTN_MAX_RANK);
    if (rank > 0 && !shape) return attn_fail(err, ATTN_ERR_NULL, "shape is NULL for rank %d", rank);
    if (attn_dtype_quantized(dtype)) return init_quantized(t, data, dtype, rank, shape, strides, err);
    if (attn_dtype_grouped(dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is a cache's key format (groups of positions), not a tensor's dtype",
                         attn_dtype_name(dtype));
    if (attn_dtype_size(dtype) == 0)
        return attn_fail(err, ATTN_ERR_DTYPE, "unknown dtype %d", (int)dtype);
    attn_tensor v = {0};
    v.data = data;
    v.dtype = dtype;
    v.rank = rank;
    attn_status st = attn_check_dims(rank, shape, NULL, err);
    if (st) return st;
    for (int d = 0; d < rank; d++) v.shape[d] = shape[d];
    if (attn_tensor_numel(&v) < 0)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "element count of the shape overflows");
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; d--) {
        v.strides[d] = strides ? strides[d] : step;
        /* Cannot overflow: the total element count was checked above. */
        if (shape[d] > 0) step *= shape[d];
    }
    *t = v;
    return ATTN_OK;
}

void attn_pack_rows(double *dst, const attn_mat *m, int64_t r0, int64_t n) {
    /* The dtype test is hoisted out of the loops: this runs for every block. */
    if (m->dtype == ATTN_F16 || m->dtype == ATTN_BF16 || attn_dtype_quantized(m->dtype)) {
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < m->cols; c++) dst[r * m->cols + c] = attn_mat_get(m, r0 + r, c);
    } else if (m->dtype == ATTN_F32) {
        const float *src = (const float *)(const void *)m->base;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < m->cols; c++)
                dst[r * m->cols + c] = src[(r0 + r) * m->rs + c * m->cs];
    } else {
        const double *src = (const double *)(const void *)m->base;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < m->cols; c++)
                dst[r * m->cols + c] = src[(r0 + r) * m->rs + c * m->cs];
    }
}

attn_status attn_check_data(const attn_tensor *t, const char *name, bool measuring, attn_error *err) {
    if (t->data || measuring) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
}

attn_status attn_check_writable(const attn_tensor *t, const char *name, attn_error *err) {
    if (attn_tensor_numel(t) == 0) return ATTN_OK;
    for (int d = 0; d < t->rank; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0)
            return attn_fail(err, ATTN_ERR_STRIDE, "%s has stride 0 in dimension %d of size %lld", name, d,
                             (long long)t->shape[d]);
    int folded = attn_tensor_overlaps_itself(t);
    if (folded) {
        char strides[128];
        attn_format_shape(strides, sizeof strides, t->rank, t->strides);
        return attn_fail(err, ATTN_ERR_STRIDE, "%s has strides %s that %s", name, strides,
                         folded > 0 ? "put two of its elements in one place"
                                    : "interleave its elements too intricately to show that no two meet");
    }
    return ATTN_OK;
}

attn_status attn_check_cu_seqlens(const int64_t *cu, int64_t batch, int64_t total, const char *name,
                                  attn_error *err) {
    if (batch < 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "batch is %lld; it must be >= 0", (long long)batch);
    if (!cu) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    if (cu[0] != 0) return attn_fail(err, ATTN_ERR_ARGUMENT, "%s[0] is %lld; it must be 0", name, (long long)cu[0]);
    for (int64_t b = 0; b < batch; b++)
        if (cu[b + 1] < cu[b])
            return attn_fail(err, ATTN_ERR_ARGUMENT, "%s decreases at %lld: %lld then %lld (offsets must not decrease)",
                             name, (long long)(b + 1), (long long)cu[b], (long long)cu[b + 1]);
    /* Monotone from 0: every offset lies in 0 .. cu[batch], so no length
     * or difference below overflows once the end is the tensor's rows. */
    if (cu[batch] != total)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "%s[%lld] is %lld but the tensor has %lld row%s; it must end there", name,
                         (long long)batch, (long long)cu[batch], (long long)total, attn_plural(total));
    return ATTN_OK;
}

attn_status attn_check_extent(const attn_tensor *t, const char *name, attn_error *err) {
    int64_t extent = 0, term, bytes;
    if (attn_dtype_quantized(t->dtype)) { /* its rows' bytes */
        attn_tensor b;
        attn_status st = attn_quant_bytes(t, &b, name, err);
        return st ? st : attn_check_extent(&b, name, err);
    }
    /* A negative dimension is a shape error, not an overflow, though the
     * element count below would read it as one. */
    if (t->rank >= 0 && t->rank <= ATTN_MAX_RANK) {
        attn_status st = attn_check_dims(t->rank, t->shape, name, err);
        if (st) return st;
    }
    if (attn_tensor_numel(t) < 0)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: element count overflows", name);
    /* Every dimension counts, an empty tensor's too: nothing of it is read,
     * but callers still form the addresses of its slices (a batch of
     * sequences of no rows), and those must fit. */
    for (int d = 0; d < t->rank; d++) {
        /* INT64_MIN has no negation: refused before any arithmetic on it. */
        if (t->strides[d] == INT64_MIN)
            return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: stride %d is INT64_MIN, whose magnitude overflows", name, d);
        int64_t stride = t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
        if (!attn_mul_i64(stride, t->shape[d] > 0 ? t->shape[d] - 1 : 0, &term) ||
            !attn_add_i64(extent, term, &extent))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: shape times strides overflows", name);
    }
    if (!attn_mul_i64(extent, (int64_t)attn_dtype_size(t->dtype), &bytes))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: byte size overflows", name);
    return ATTN_OK;
}
