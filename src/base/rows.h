/* rows.h -- where a kernel reads keys and values: one row source per
 * (sequence, KV head), whatever the storage. Included by base.h (it needs
 * attn_mat); not public.
 *
 * A kernel never looks at how keys and values are stored. It asks for the
 * rows of positions j .. j+n-1 with attn_rows_span, and gets the longest
 * run of them that one strided matrix describes: all n rows for a dense
 * tensor, up to the end of the page for a paged cache. Everything a kernel
 * does with rows (pack them, transpose them, stream them through the decode
 * microkernels, read them in place) it does span by span, so a dense
 * source, taken in one span, is computed exactly as before the row source
 * existed, and a paged one gives bitwise the same floats (every operation
 * is per row, and a row lies whole in one span).
 *
 * A new storage is a new kind here and one file in base/ that fills the
 * struct and answers attn_rows_span (see docs/design.md, "Where keys and
 * values come from"). */
#ifndef ATTN_ROWS_H
#define ATTN_ROWS_H

typedef enum attn_rows_kind {
    ATTN_ROWS_DENSE, /* one strided matrix: attn_sdpa's k and v (attn_mat) */
    ATTN_ROWS_PAGED  /* fixed-size pages through a page table (attn_paged_rows) */
} attn_rows_kind;

/* A paged pool's keys or values, as the paged row source reads them:
 *   pages   [num_pages][Hk][P][cols] elements of dtype (f64, f32, f16 or
 *           bf16; f64 is read by the exact kernel only, with f64 queries),
 *           or [num_pages][Hk][P] rows of a quantized format (q8, q4,
 *           e4m3, e5m2; attn_quant_row_size bytes each), keys and values
 *           each in their own array;
 *   table   the sequence's page table, n_pages int32 page indices;
 *   length  the sequence's positions, at most n_pages · P.
 * Position j is row j % P of page table[j / P]. Checked before any kernel
 * sees it (attn_paged_rows_check). */
typedef struct attn_paged_rows {
    const void *pages;
    attn_dtype dtype;
    int64_t num_pages, heads, page_size, cols; /* num_pages, Hk, P, E or Ev */
    const int32_t *table;
    int64_t n_pages, length;
} attn_paged_rows;

/* The rows of one KV head: positions 0 .. rows-1, cols values each, of
 * dtype (f32, f64, f16, bf16, or a quantized format, whose spans are
 * attn_mat's quantized rows: every reader of a span widens them a row at a
 * time, into the packed tile or a group of rows, never the whole source).
 * `rows`, `cols` and `dtype` are the same for every kind; the rest is the
 * kind's. */
typedef struct attn_rows {
    attn_rows_kind kind;
    attn_dtype dtype;
    int64_t rows, cols;
    attn_mat dense;       /* DENSE: position j is row j of this matrix */
    const char *head;     /* PAGED: page 0's row 0 of this head */
    int64_t page_size;    /* PAGED: P */
    int64_t page_stride;  /* PAGED: units from one page to the next, Hk · P · row_step */
    const int32_t *table; /* PAGED: the page table */
    int64_t row_step;     /* PAGED: units from one row to the next: cols, or a quantized row's bytes
                           * (the unit: attn_stride_unit) */
} attn_rows;

/* A dense source over m (its rows the positions). */
static inline attn_rows attn_rows_dense(attn_mat m) {
    attn_rows r = {ATTN_ROWS_DENSE, m.dtype, m.rows, m.cols, m, NULL, 0, 0, NULL, 0};
    return r;
}

/* The paged source of head `head` of pg (0 <= head < pg->heads; pg checked). */
attn_rows attn_rows_paged(const attn_paged_rows *pg, int64_t head);

/* pg is a pool and page table the paged source can read: pages present,
 * dtype f64, f32, f16, bf16 or quantized (then cols a multiple of 32 for q8 and
 * q4), sizes >= 1 (P from 1; the pool's own rules are
 * its creator's), every size product within int64 in bytes, a table of
 * n_pages entries each in 0 .. num_pages-1, and length <= n_pages · P.
 * `name` is what the messages call it (e.g. "k pages"). ATTN_ERR_NULL,
 * ATTN_ERR_DTYPE, ATTN_ERR_SHAPE, ATTN_ERR_OVERFLOW or ATTN_ERR_OPTION (an
 * entry outside the pool). */
attn_status attn_paged_rows_check(const attn_paged_rows *pg, const char *name, attn_error *err);

/* The rows j .. j+k-1 of src that one strided matrix holds, k <= n the
 * most there are (k >= 1 when n >= 1 and j < src->rows): *span gets them as
 * its rows 0 .. k-1. The one function every storage answers. */
int64_t attn_rows_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span);

/* Whether rows j .. j+n-1 lie in one span (then *span holds them): a
 * kernel that reads a block in place asks this first. */
static inline bool attn_rows_one_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span) {
    return attn_rows_span(src, j, n, span) == n;
}

/* Rows j0 .. j0+n-1 of src into dst (n × cols, C order), in double: the
 * exact kernels' packing (rows.c). */
void attn_rows_pack_f64(double *dst, const attn_rows *src, int64_t j0, int64_t n);

/* Element (j, c) of src widened to double. */
double attn_rows_get(const attn_rows *src, int64_t j, int64_t c);

/* Row r of src as contiguous f32 (f32, f16 or bf16): in place when it is f32
 * with contiguous columns, else widened into buf (cols floats). */
const float *attn_rows_row_f32(const attn_rows *src, int64_t r, float *buf);

#endif /* ATTN_ROWS_H */
