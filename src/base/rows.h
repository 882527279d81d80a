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
    ATTN_ROWS_PAGED, /* fixed-size pages through a page table (attn_paged_rows) */
    ATTN_ROWS_GROUPED /* keys quantized per channel in groups of 32 positions, in pages,
                       * and an f16 residual (attn_paged_rows of a grouped dtype;
                       * key_groups.c): spans of f32 rows dequantized into the
                       * buffer the reader hands attn_rows_span, or of the
                       * residual's f16 rows in place */
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
 * sees it (attn_paged_rows_check).
 * Keys quantized per channel (dtype ATTN_Q4C or ATTN_Q2C, key_groups.c):
 * pages [num_pages][Hk][P / 32] groups of attn_group_bytes each, position
 * j < full = attn_group_full(length, window) in group (j % P) / 32 of page
 * table[j / P], row j % 32 of it; the later ones rows j - full of residual
 * [Hk][window + 32][cols] f16. */
typedef struct attn_paged_rows {
    const void *pages;
    attn_dtype dtype;
    int64_t num_pages, heads, page_size, cols; /* num_pages, Hk, P, E or Ev */
    const int32_t *table;
    int64_t n_pages, length;
    const uint16_t *residual; /* grouped keys only: the sequence's residual rows */
    int64_t window;           /* grouped keys only: R, the recent positions kept in f16
                               * besides the group being filled (0, 32, ...) */
    bool head_major;          /* pages (Hk, num_pages, P, cols), not (num_pages, Hk, P, cols) */
} attn_paged_rows;

/* Where head h's part of page 0 lies, and the step from a page to the
 * next, in units of one head's part of a page (P rows, or P / 32 groups):
 * the pool's two layouts (attn_kv_pages_desc.head_major). */
static inline int64_t attn_paged_head_at(const attn_paged_rows *pg, int64_t h) {
    return pg->head_major ? h * pg->num_pages : h;
}
static inline int64_t attn_paged_page_step(const attn_paged_rows *pg) { return pg->head_major ? 1 : pg->heads; }

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
    int64_t page_stride;  /* PAGED: units from one page to the next, Hk · P · row_step (head-major pages: P · row_step) */
    const int32_t *table; /* PAGED: the page table */
    int64_t row_step;     /* PAGED: units from one row to the next: cols, or a quantized row's bytes
                           * (the unit: attn_stride_unit); GROUPED: a group's bytes */
    const uint16_t *residual; /* GROUPED: this head's residual rows (R + 32, cols) f16 */
    int64_t full;             /* GROUPED: the positions in full groups (the rest: residual) */
} attn_rows;

/* A dense source over m (its rows the positions). */
static inline attn_rows attn_rows_dense(attn_mat m) {
    attn_rows r = {ATTN_ROWS_DENSE, m.dtype, m.rows, m.cols, m, NULL, 0, 0, NULL, 0, NULL, 0};
    return r;
}

/* The paged source of head `head` of pg (0 <= head < pg->heads; pg checked). */
attn_rows attn_rows_paged(const attn_paged_rows *pg, int64_t head);

/* The grouped source of head `head` of pg (a grouped dtype), its checks
 * (those below for its layout, and the residual present) and its span: a
 * group's rows up to the group's end, as many as `room` floats of buf hold
 * (at most ATTN_GROUP_SPAN_FLOATS of them are used), dequantized there; or
 * the residual's rows (key_groups.c). */
attn_rows attn_rows_grouped(const attn_paged_rows *pg, int64_t head);
attn_status attn_grouped_rows_check(const attn_paged_rows *pg, const char *name, attn_error *err);
int64_t attn_grouped_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span, float *buf, int64_t room);
/* The group of grouped src that holds position j < src->full, where it
 * lies (its bytes), and j's row in it (*t): what a kernel that reads groups
 * directly takes instead of a span. */
const void *attn_grouped_at(const attn_rows *src, int64_t j, int64_t *t);

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
 * its rows 0 .. k-1. The one function every storage answers.
 * buf: where a grouped source's rows are dequantized (the span then lies
 * there, valid until buf is written again), `room` floats, at least
 * src->cols (one row); the reader's own scratch, as the library keeps no
 * per-thread buffer. NULL and 0 where src is never grouped (values, and
 * the sources of kernels that quantized keys never reach). */
int64_t attn_rows_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span, float *buf, int64_t room);

/* Where position j's row of paged src starts (j < src->rows; unit:
 * attn_stride_unit(src->dtype)): row j % P of page table[j / P]. The rows
 * of one page follow each other src->row_step units apart. What
 * attn_rows_span answers for a paged source, inline for the decode kernel's
 * lists of rows and prefetches, which ask it for every page. */
static inline const char *attn_paged_row(const attn_rows *src, int64_t j, int64_t unit) {
    int64_t P = src->page_size;
    return src->head + (src->table[j / P] * src->page_stride + j % P * src->row_step) * unit;
}

/* Whether rows j .. j+n-1 lie in one span (then *span holds them): a
 * kernel that reads a block in place asks this first. buf and room as
 * attn_rows_span's. */
static inline bool attn_rows_one_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span, float *buf,
                                      int64_t room) {
    return attn_rows_span(src, j, n, span, buf, room) == n;
}

/* Rows j0 .. j0+n-1 of src into dst (n × cols, C order), in double: the
 * exact kernels' packing (rows.c). */
void attn_rows_pack_f64(double *dst, const attn_rows *src, int64_t j0, int64_t n);

/* Element (j, c) of src widened to double. */
double attn_rows_get(const attn_rows *src, int64_t j, int64_t c);

/* Row r of src as contiguous f32 (f32, f16 or bf16): in place when it is f32
 * with contiguous columns, else widened (or dequantized) into buf (cols
 * floats). */
const float *attn_rows_row_f32(const attn_rows *src, int64_t r, float *buf);

/* Keys quantized per channel over groups of ATTN_KEY_GROUP positions
 * (ATTN_Q4C, ATTN_Q2C; attn.h "Keys quantized per channel"; key_groups.c). */
enum { ATTN_KEY_GROUP = 32, ATTN_KEY_GROUP_MAX_COLS = 8192 };
/* The most floats one span of a grouped source takes (32 KiB): a row of
 * the widest keys, or as many rows of narrower ones, up to a group's 32.
 * Any room of a row or more gives the same floats (every operation on
 * keys is per row); readers hand a row or their own scratch, never this
 * much of a stack (a caller's thread may have a small one). */
enum { ATTN_GROUP_SPAN_FLOATS = ATTN_KEY_GROUP_MAX_COLS };
/* d is ATTN_Q4C or ATTN_Q2C. */
bool attn_dtype_grouped(attn_dtype d);
/* Bytes of one group of n channels (attn_quant_group_size), 0 if n does not suit d. */
int64_t attn_group_bytes(attn_dtype d, int64_t n);
/* Rows t0 .. t0+31 of m (a float dtype, any strides; m->cols channels)
 * quantized into one group. */
void attn_group_quant(void *group, const attn_mat *m, int64_t t0, attn_dtype format);
/* Value (t, c) of a group of n channels. */
float attn_group_get(const void *group, int64_t n, attn_dtype format, int64_t t, int64_t c);
/* Rows t0 .. t0+k-1 of a group widened into dst (k rows of n floats). */
void attn_group_rows(float *dst, const void *group, int64_t n, attn_dtype format, int64_t t0, int64_t k);
/* The same floats for channels e0 .. e0+w-1 only (e0 a multiple of 4, so
 * that its codes start on a byte), into rows of stride ldd: a block of a
 * group widened into a small buffer (pack.c's transpose, 16 keys by 128
 * channels, where a whole row of the widest keys would be 32 KiB). */
void attn_group_block(float *dst, int64_t ldd, const void *group, int64_t n, attn_dtype format, int64_t t0, int64_t k,
                      int64_t e0, int64_t w);
/* The largest residual window a cache takes (attn.h,
 * ATTN_KEY_RESIDUAL_MAX), and the positions in quantized groups of a
 * sequence of `length` with window R: 32·floor(length / 32) - R, at least 0.
 * The rest, positions full .. length - 1 (at most R + 31 of them), are the
 * residual rows 0, 1, ... of the head's (R + 32, n) f16 window. */
int64_t attn_group_full(int64_t length, int64_t R);
/* Row i of rows (n values, f32, f16 or bf16, any strides) appended as
 * position len to one head's window of R: written in f16 at row len -
 * attn_group_full(len, R). True when that filled the window's R + 32 rows:
 * the caller then retires its first group (attn_group_retire) into the
 * group of position attn_group_full(len, R). */
bool attn_group_push(uint16_t *window, int64_t R, const attn_mat *rows, int64_t i, int64_t len, int64_t n);
/* A full window's first 32 rows quantized into `group`, and its other R
 * rows moved to the front. */
void attn_group_retire(void *group, uint16_t *window, int64_t R, int64_t n, attn_dtype format);
/* Truncating a head's window of R from `have` positions to `length`: the
 * residual rows kept moved to where the shorter sequence has them. The
 * caller then turns the positions attn_group_full(length, R) ..
 * min(attn_group_full(have, R), length) - 1 back into rows 0, 1, ...
 * from their groups (attn_group_unquantize). */
void attn_group_cut(uint16_t *window, int64_t R, int64_t n, int64_t have, int64_t length);
/* The first k rows of a group turned back into residual rows: their
 * dequantized values rounded to f16 (truncating into or before the group). */
void attn_group_unquantize(uint16_t *residual, const void *group, int64_t n, attn_dtype format, int64_t k);
/* The `length` keys of head `head` of grouped pg widened into dst (a
 * matrix of dtype dt, f64, f32, f16 or bf16, strides rs and cs in elements):
 * what gathering a cache's keys copies out. */
void attn_grouped_gather(const attn_paged_rows *pg, int64_t head, char *dst, attn_dtype dt, int64_t rs, int64_t cs);
/* attn_quantize (quantize) and attn_dequantize of t with a grouped format,
 * into or out of `bytes` (size bytes): every check, then the groups. */
attn_status attn_group_tensor(const attn_tensor *t, const char *name, void *bytes, size_t size, attn_dtype format,
                              bool quantize, attn_error *err);
/* A cache's key storage checks for a key_dtype (0 or grouped): the page
 * (or capacity) a multiple of 32, key_dim suiting the format and at most
 * ATTN_KEY_GROUP_MAX_COLS, values not f64. `what` names the page field in
 * messages ("desc->page_size"). */
attn_status attn_group_check(attn_dtype key_dtype, attn_dtype dtype, int64_t page, int64_t key_dim, const char *name,
                             const char *what, attn_error *err);
/* A cache's dtype in blocks of 32 (q8, q4, q4_1) needs the rows stored in
 * it of multiples of 32: value_dim, and key_dim unless key_dtype (q4c,
 * q2c) stores the keys, whose own needs attn_group_check checks.
 * ATTN_ERR_SHAPE, naming name->value_dim or name->key_dim. */
attn_status attn_check_block_dims(attn_dtype dtype, attn_dtype key_dtype, int64_t key_dim, int64_t value_dim,
                                  const char *name, attn_error *err);
/* Keys quantized per channel are neither scaled per head nor turned by the
 * Hadamard rotation (both act on keys stored in dtype): with a key_dtype,
 * k_scale must be NULL and hadamard 0 (ATTN_ERR_OPTION). */
attn_status attn_group_check_plain(attn_dtype key_dtype, const float *k_scale, int hadamard, const char *name,
                                   attn_error *err);
/* A residual window R: 0, or with a key_dtype a multiple of 32 up to
 * ATTN_KEY_RESIDUAL_MAX (ATTN_ERR_OPTION otherwise, naming name->residual). */
attn_status attn_group_check_residual(attn_dtype key_dtype, int64_t residual, const char *name, attn_error *err);

#endif /* ATTN_ROWS_H */
