/* rows.c -- the row sources' spans (rows.h): dense strided matrices and
 * paged pools, and what every kernel builds on them. */
#include "base/base.h"


attn_rows attn_rows_paged(const attn_paged_rows *pg, int64_t head) {
    if (attn_dtype_grouped(pg->dtype)) return attn_rows_grouped(pg, head);
    int64_t unit = attn_stride_unit(pg->dtype);
    int64_t row = attn_dtype_quantized(pg->dtype) ? attn_row_bytes(pg->dtype, pg->cols) : pg->cols;
    /* built in one initializer, the rest zero: a memset and then the fields
     * stalled the copy out on the memset's stores (every decode item asks
     * for its heads' sources) */
    attn_rows r = {.kind = ATTN_ROWS_PAGED,
                   .dtype = pg->dtype,
                   .rows = pg->length,
                   .cols = pg->cols,
                   .head = (const char *)pg->pages + attn_paged_head_at(pg, head) * pg->page_size * row * unit,
                   .page_size = pg->page_size,
                   .page_stride = attn_paged_page_step(pg) * pg->page_size * row, /* checked by attn_paged_rows_check */
                   .table = pg->table,
                   .row_step = row};
    return r;
}

attn_status attn_paged_rows_check(const attn_paged_rows *pg, const char *name, attn_error *err) {
    if (!pg) return attn_fail(err, ATTN_ERR_NULL, "%s: the pool is NULL", name);
    if (!pg->pages) return attn_fail(err, ATTN_ERR_NULL, "%s: the pages are NULL", name);
    if (!attn_dtype_kv_rows(pg->dtype) && !attn_dtype_grouped(pg->dtype))
        return attn_fail(err, ATTN_ERR_DTYPE,
                         "%s are %s; pages hold f64, f32, f16, bf16, " ATTN_QUANT_NAMES " (keys also q4c, q2c)",
                         name, attn_dtype_name(pg->dtype));
    if (attn_dtype_grouped(pg->dtype)) return attn_grouped_rows_check(pg, name, err);
    if (pg->num_pages < 1 || pg->heads < 1 || pg->page_size < 1 || pg->cols < 1 || pg->n_pages < 0 ||
        pg->length < 0)
        return attn_fail(err, ATTN_ERR_SHAPE,
                         "%s: num_pages %lld, heads %lld, page size %lld and row size %lld must be >= 1, "
                         "n_pages %lld and length %lld >= 0",
                         name, (long long)pg->num_pages, (long long)pg->heads, (long long)pg->page_size,
                         (long long)pg->cols, (long long)pg->n_pages, (long long)pg->length);
    if (attn_dtype_quantized(pg->dtype) && pg->cols % 32 && attn_quant_block_bytes(pg->dtype))
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: rows of %lld value%s; %s rows hold a multiple of 32", name,
                         (long long)pg->cols, attn_plural(pg->cols), attn_dtype_name(pg->dtype));
    int64_t n, bytes, cap, row = attn_row_bytes(pg->dtype, pg->cols);
    if (!row || !attn_mul_i64(pg->num_pages, pg->heads, &n) || !attn_mul_i64(n, pg->page_size, &n) ||
        !attn_mul_i64(n, row, &bytes))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: the pool's byte size overflows", name);
    if (pg->n_pages > 0 && !pg->table) return attn_fail(err, ATTN_ERR_NULL, "%s: the page table is NULL", name);
    if (!attn_mul_i64(pg->n_pages, pg->page_size, &cap) || pg->length > cap)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: length %lld passes the table's %lld pages of %lld positions",
                         name, (long long)pg->length, (long long)pg->n_pages, (long long)pg->page_size);
    for (int64_t t = 0; t < pg->n_pages; t++)
        if (pg->table[t] < 0 || pg->table[t] >= pg->num_pages)
            return attn_fail(err, ATTN_ERR_OPTION, "%s: page table entry %lld is %d, outside the pool's %lld pages",
                             name, (long long)t, (int)pg->table[t], (long long)pg->num_pages);
    return ATTN_OK;
}

int64_t attn_rows_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span, float *buf, int64_t room) {
    if (src->kind == ATTN_ROWS_GROUPED) return attn_grouped_span(src, j, n, span, buf, room);
    if (src->kind == ATTN_ROWS_DENSE) {
        *span = src->dense;
        span->base += j * src->dense.rs * attn_stride_unit(src->dtype);
        span->rows = n;
        return n;
    }
    /* PAGED: to the end of position j's page. */
    int64_t P = src->page_size, r = j % P, k = P - r < n ? P - r : n;
    span->base = (char *)attn_paged_row(src, j, attn_stride_unit(src->dtype));
    span->dtype = src->dtype;
    span->rows = k;
    span->cols = src->cols;
    span->rs = src->row_step;
    span->cs = 1;
    return k;
}

void attn_rows_pack_f64(double *dst, const attn_rows *src, int64_t j0, int64_t n) {
    if (src->kind == ATTN_ROWS_GROUPED) { /* value by value: no f32 rows to widen into */
        for (int64_t j = j0; j < j0 + n; j++)
            for (int64_t c = 0; c < src->cols; c++) dst[(j - j0) * src->cols + c] = attn_rows_get(src, j, c);
        return;
    }
    for (int64_t j = j0; j < j0 + n;) {
        attn_mat m;
        int64_t k = attn_rows_span(src, j, j0 + n - j, &m, NULL, 0);
        attn_pack_rows(dst + (j - j0) * src->cols, &m, 0, k);
        j += k;
    }
}

double attn_rows_get(const attn_rows *src, int64_t j, int64_t c) {
    if (src->kind == ATTN_ROWS_GROUPED && j < src->full) { /* the value a span's row would hold */
        int64_t t;
        const void *group = attn_grouped_at(src, j, &t);
        return attn_group_get(group, src->cols, src->dtype, t, c);
    }
    attn_mat m;
    attn_rows_span(src, j, 1, &m, NULL, 0); /* a grouped source's residual lies in place */
    return attn_mat_get(&m, 0, c);
}

const float *attn_rows_row_f32(const attn_rows *src, int64_t r, float *buf) {
    attn_mat m;
    attn_rows_span(src, r, 1, &m, buf, src->cols); /* a group's row dequantized into buf, in place there */
    return attn_row_f32(&m, 0, buf);
}
