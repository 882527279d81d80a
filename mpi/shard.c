/* shard.c -- which positions of a sequence each rank holds (the layouts of
 * attn_mpi.h), and copying a shard's rows out of a whole tensor and back. */
#include "ring.h"

#include <string.h>

/* The first position of chunk c when n positions are cut into `parts`
 * near-equal chunks (the first n mod parts of them one longer). */
static int64_t chunk_start(int64_t n, int64_t parts, int64_t c) {
    int64_t base = n / parts, extra = n % parts;
    return c * base + (c < extra ? c : extra);
}

attn_status attn_mpi_shard_of(attn_mpi_shard *shard, int64_t n, int rank, int size, attn_mpi_layout layout,
                              attn_error *err) {
    if (!shard) return ring_fail(err, ATTN_ERR_NULL, "shard is NULL");
    memset(shard, 0, sizeof *shard);
    if (size < 1 || rank < 0 || rank >= size || n < 0)
        return ring_fail(err, ATTN_ERR_ARGUMENT, "rank %d of %d rank%s, %lld position%s: out of range", rank, size,
                         ring_plural(size), (long long)n, ring_plural(n));
    if (layout != ATTN_MPI_CONTIGUOUS && layout != ATTN_MPI_ZIGZAG)
        return ring_fail(err, ATTN_ERR_OPTION, "layout %d is not an attn_mpi_layout value", (int)layout);
    int64_t parts = layout == ATTN_MPI_ZIGZAG ? 2 * (int64_t)size : size;
    int64_t chunks[2] = {rank, parts - 1 - rank};
    shard->count = layout == ATTN_MPI_ZIGZAG ? 2 : 1;
    for (int i = 0; i < shard->count; i++) {
        shard->start[i] = chunk_start(n, parts, chunks[i]);
        shard->length[i] = chunk_start(n, parts, chunks[i] + 1) - shard->start[i];
        shard->rows += shard->length[i];
    }
    return ATTN_OK;
}

/* The checks both copies share: local and whole alike but along dim. */
static attn_status check_pair(const attn_tensor *local, const attn_tensor *whole, int *dim, const attn_mpi_shard *sh,
                              attn_error *err) {
    if (!local || !whole || !sh || !local->data || !whole->data)
        return ring_fail(err, ATTN_ERR_NULL, "local, whole, shard or their data is NULL");
    if (local->rank != whole->rank || local->rank < 1)
        return ring_fail(err, ATTN_ERR_RANK, "local has rank %d and whole %d; they must match", local->rank, whole->rank);
    if (local->dtype != whole->dtype) return ring_fail(err, ATTN_ERR_DTYPE, "local and whole must have one dtype");
    if (attn_dtype_size(whole->dtype) == 0) /* quantized rows are counted in bytes, not elements */
        return ring_fail(err, ATTN_ERR_DTYPE, "%s rows cannot be copied by element: dequantize them first (attn_dequantize)",
                         attn_dtype_name(whole->dtype));
    int d = *dim < 0 ? whole->rank + *dim : *dim;
    if (d < 0 || d >= whole->rank) return ring_fail(err, ATTN_ERR_ARGUMENT, "dimension %d is outside the rank", *dim);
    *dim = d;
    for (int i = 0; i < whole->rank; i++)
        if (i != d && local->shape[i] != whole->shape[i])
            return ring_fail(err, ATTN_ERR_SHAPE, "local and whole differ in dimension %d", i);
    if (local->shape[d] != sh->rows)
        return ring_fail(err, ATTN_ERR_SHAPE, "local has %lld rows; the shard has %lld", (long long)local->shape[d],
                         (long long)sh->rows);
    /* A shard the caller filled in, not attn_mpi_shard_of: the copy
     * trusts count to index start[] and length[], and the lengths to fill
     * local's rows exactly, no more. */
    if (sh->count < 1 || sh->count > 2)
        return ring_fail(err, ATTN_ERR_SHAPE, "the shard has %d segments; a shard has 1 or 2", sh->count);
    int64_t rows = 0;
    for (int i = 0; i < sh->count; i++) {
        if (sh->start[i] < 0 || sh->length[i] < 0 || sh->start[i] > whole->shape[d] ||
            sh->length[i] > whole->shape[d] - sh->start[i])
            return ring_fail(err, ATTN_ERR_SHAPE, "the shard's segment %d (%lld rows from %lld) passes whole's %lld rows", i,
                             (long long)sh->length[i], (long long)sh->start[i], (long long)whole->shape[d]);
        rows += sh->length[i]; /* each at most whole's rows: no overflow */
    }
    if (rows != sh->rows)
        return ring_fail(err, ATTN_ERR_SHAPE, "the shard's segments hold %lld rows but its rows are %lld", (long long)rows,
                         (long long)sh->rows);
    return ATTN_OK;
}

/* dst = src element by element: one dtype (any, bool too) and shape, any strides. */
static void copy_elements(attn_tensor *dst, const attn_tensor *src) {
    size_t es = attn_dtype_size(src->dtype);
    int64_t n = attn_tensor_numel(src), idx[ATTN_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t a = 0, b = 0;
        for (int d = 0; d < src->rank; d++) a += idx[d] * dst->strides[d], b += idx[d] * src->strides[d];
        memcpy((char *)dst->data + a * (int64_t)es, (const char *)src->data + b * (int64_t)es, es);
        for (int d = src->rank - 1; d >= 0 && ++idx[d] == src->shape[d]; d--) idx[d] = 0;
    }
}

/* Copy between the shard's rows of whole and local, either way. */
static attn_status copy(attn_tensor *local, attn_tensor *whole, int dim, const attn_mpi_shard *sh, bool out,
                        attn_error *err) {
    attn_status st = check_pair(local, whole, &dim, sh, err);
    int64_t row = 0;
    for (int i = 0; i < sh->count && !st; row += sh->length[i], i++) {
        if (sh->length[i] == 0) continue;
        attn_tensor l = ring_rows(local, dim, row, sh->length[i]), w = ring_rows(whole, dim, sh->start[i], sh->length[i]);
        if (out) copy_elements(&l, &w);
        else copy_elements(&w, &l);
    }
    return st;
}

attn_status attn_mpi_shard_rows(attn_tensor *local, const attn_tensor *whole, int dim, const attn_mpi_shard *shard,
                                attn_error *err) {
    return copy(local, (attn_tensor *)whole, dim, shard, true, err);
}

attn_status attn_mpi_unshard_rows(attn_tensor *whole, const attn_tensor *local, int dim, const attn_mpi_shard *shard,
                                  attn_error *err) {
    return copy((attn_tensor *)local, whole, dim, shard, false, err);
}
