/* key_groups.c -- keys quantized per channel over groups of 32 positions
 * (ATTN_Q4C, ATTN_Q2C; attn.h, "Keys quantized per channel"): the group
 * format, the caches' residual window of f16 rows (the last R positions
 * besides the group being filled; its rows shift by a group as one is
 * quantized), and the row source that
 * hands kernels a group's rows (rows.h, ATTN_ROWS_GROUPED).
 *
 * A group cannot be a strided matrix: a position's value needs its
 * channel's scale and minimum, which lie at the group's start. So a span
 * of a group is its rows dequantized into a buffer the reader hands
 * attn_rows_span (its own scratch: a kernel's workspace, or its stack;
 * never thread-local memory, which a library linked at a program's start
 * takes from the loader's small static TLS reserve, so that a later dlopen
 * of another library with TLS could fail), as f32 rows that every kernel
 * already reads; a span is valid until the reader writes that buffer again
 * (prefetching never asks: attn_prefetch_kv skips grouped sources). The
 * residual rows are f16 rows
 * that lie in place. Kernels see f32 and f16 rows and nothing new, so the
 * result is attention over the dequantized keys, bitwise. The one kernel
 * that reads groups where they lie (decode's integer dot products,
 * kernels/qdot.h's attn_qdot_groups) asks attn_grouped_at for them
 * instead of a span. */
#include "base/base.h"

#include <string.h>

enum { G = ATTN_KEY_GROUP, GROUP_BUF = ATTN_GROUP_SPAN_FLOATS }; /* floats: one row of the widest keys */

bool attn_dtype_grouped(attn_dtype d) { return d == ATTN_Q4C || d == ATTN_Q2C; }

static int bits_of(attn_dtype d) { return d == ATTN_Q4C ? 4 : 2; }

int64_t attn_group_bytes(attn_dtype d, int64_t n) {
    int64_t bytes;
    if (!attn_dtype_grouped(d) || n < 1 || n % (8 / bits_of(d))) return 0;
    /* 4n of scales and minimums, 32 positions of n·b/8 bytes of codes */
    return attn_mul_i64(n, 4 + G * bits_of(d) / 8, &bytes) ? bytes : 0;
}

size_t attn_quant_group_size(attn_dtype format, int64_t n) {
    int64_t b = attn_group_bytes(format, n);
    return (uint64_t)b <= SIZE_MAX ? (size_t)b : 0;
}

static void put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* A group of w channels from 32 contiguous f32 rows x (row stride w). */
static void quant_chunk(uint8_t *b, const float *x, int64_t w, attn_dtype format) {
    uint8_t *codes = b + 4 * w;
    int bits = bits_of(format), per = 8 / bits;
    int64_t row = w / per; /* a position's bytes of codes */
    memset(codes, 0, (size_t)(G * row));
    for (int64_t c = 0; c < w; c++) {
        uint8_t code[G];
        uint16_t dh, mh;
        attn_quant_min_scale(code, &dh, &mh, x + c, G, w, (1 << bits) - 1);
        put16(b + 2 * c, dh), put16(b + 2 * w + 2 * c, mh);
        for (int t = 0; t < G; t++) codes[t * row + c / per] |= (uint8_t)(code[t] << (bits * (c % per)));
    }
}

enum { CHUNK = 64 }; /* channels quantized at a time: the rule is per channel */

void attn_group_quant(void *group, const attn_mat *m, int64_t t0, attn_dtype format) {
    int64_t n = m->cols;
    int per = 8 / bits_of(format);
    uint8_t *b = group, part[G * CHUNK / 2 + 4 * CHUNK];
    float x[G * CHUNK];
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
        int64_t w = n - c0 < CHUNK ? n - c0 : CHUNK; /* even (q4c), a multiple of 4 (q2c), as n */
        for (int t = 0; t < G; t++) attn_mat_piece_f32(x + t * w, m, t0 + t, c0, w);
        quant_chunk(part, x, w, format);
        /* the chunk's fields moved to where a group of n channels has them */
        memcpy(b + 2 * c0, part, (size_t)(2 * w));
        memcpy(b + 2 * n + 2 * c0, part + 2 * w, (size_t)(2 * w));
        for (int t = 0; t < G; t++)
            memcpy(b + 4 * n + t * (n / per) + c0 / per, part + 4 * w + t * (w / per), (size_t)(w / per));
    }
}

float attn_group_get(const void *group, int64_t n, attn_dtype format, int64_t t, int64_t c) {
    const uint8_t *b = group;
    int bits = bits_of(format), per = 8 / bits;
    int code = b[4 * n + t * (n / per) + c / per] >> (bits * (c % per)) & ((1 << bits) - 1);
    return (float)code * attn_f16_to_f32(get16(b + 2 * c)) + attn_f16_to_f32(get16(b + 2 * n + 2 * c));
}

/* 32 channels of one position widened: y = code · d + m. Blocks of a
 * fixed size over restrict pointers, so that the compiler vectorizes them
 * at -O2 (the same floats: one product, exact, and one sum each). */
static void widen32_4(float *restrict y, const uint8_t *restrict codes, const float *restrict d,
                      const float *restrict m) {
    for (int i = 0; i < 16; i++) {
        y[2 * i] = (float)(codes[i] & 15) * d[2 * i] + m[2 * i];
        y[2 * i + 1] = (float)(codes[i] >> 4) * d[2 * i + 1] + m[2 * i + 1];
    }
}
static void widen32_2(float *restrict y, const uint8_t *restrict codes, const float *restrict d,
                      const float *restrict m) {
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) y[4 * i + j] = (float)(codes[i] >> (2 * j) & 3) * d[4 * i + j] + m[4 * i + j];
}

void attn_group_block(float *dst, int64_t ldd, const void *group, int64_t n, attn_dtype format, int64_t t0, int64_t k,
                      int64_t e0, int64_t w) {
    const uint8_t *b = group;
    int bits = bits_of(format), per = 8 / bits, mask = (1 << bits) - 1;
    int64_t row = n / per;
    float d[CHUNK], m[CHUNK];
    for (int64_t c0 = e0; c0 < e0 + w; c0 += CHUNK) { /* a chunk's scales and minimums widened once for its rows */
        int64_t cw = e0 + w - c0 < CHUNK ? e0 + w - c0 : CHUNK;
        for (int64_t c = 0; c < cw; c++)
            d[c] = attn_f16_to_f32(get16(b + 2 * (c0 + c))), m[c] = attn_f16_to_f32(get16(b + 2 * n + 2 * (c0 + c)));
        for (int64_t t = 0; t < k; t++) { /* code · d is exact: one rounding, fused or not */
            const uint8_t *codes = b + 4 * n + (t0 + t) * row + c0 / per;
            float *y = dst + t * ldd + (c0 - e0);
            int64_t c = 0;
            for (; c + 32 <= cw; c += 32) (bits == 4 ? widen32_4 : widen32_2)(y + c, codes + c / per, d + c, m + c);
            for (; c < cw; c++) y[c] = (float)(codes[c / per] >> (bits * (c % per)) & mask) * d[c] + m[c];
        }
    }
}

void attn_group_rows(float *dst, const void *group, int64_t n, attn_dtype format, int64_t t0, int64_t k) {
    attn_group_block(dst, n, group, n, format, t0, k, 0, n);
}

int64_t attn_group_full(int64_t length, int64_t R) {
    int64_t full = length / G * G - R;
    return full > 0 ? full : 0;
}

bool attn_group_push(uint16_t *window, int64_t R, const attn_mat *rows, int64_t i, int64_t len, int64_t n) {
    int64_t at = len - attn_group_full(len, R);
    uint16_t *to = window + at * n;
    float x[CHUNK];
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
        int64_t w = n - c0 < CHUNK ? n - c0 : CHUNK;
        attn_mat_piece_f32(x, rows, i, c0, w);
        attn_f32_to_half_row(to + c0, x, w, true);
    }
    return at == R + G - 1;
}

void attn_group_retire(void *group, uint16_t *window, int64_t R, int64_t n, attn_dtype format) {
    attn_mat first = {(char *)window, ATTN_F16, G, n, n, 1};
    attn_group_quant(group, &first, 0, format); /* from the f16 rows: bytes that do not depend on the appends' split */
    memmove(window, window + G * n, (size_t)(R * n) * sizeof *window);
}

void attn_group_cut(uint16_t *window, int64_t R, int64_t n, int64_t have, int64_t length) {
    int64_t was = attn_group_full(have, R), now = attn_group_full(length, R);
    if (now < was && length > was) /* positions was .. length - 1 stay, now further from the window's front */
        memmove(window + (was - now) * n, window, (size_t)((length - was) * n) * sizeof *window);
}

void attn_group_unquantize(uint16_t *residual, const void *group, int64_t n, attn_dtype format, int64_t k) {
    /* Value by value (attn_group_get is attn_group_rows' float): no row of
     * up to 32 KiB on the stack for a truncation, which a thread with a
     * small stack may make. */
    for (int64_t t = 0; t < k; t++)
        for (int64_t c = 0; c < n; c++) {
            float x = attn_group_get(group, n, format, t, c);
            /* A channel's top value, code · d + m with d rounded up, can pass
             * f16's largest by a few steps (keys of 65504 read back as 65536):
             * rounded to f16 it would be infinity, and the group quantized from
             * it again a channel of NaN. Finite values saturate instead, as the
             * group's own scale and minimum do. */
            if (x > 65504.0f) x = 65504.0f;
            else if (x < -65504.0f) x = -65504.0f;
            residual[t * n + c] = attn_f32_to_f16(x);
        }
}

attn_status attn_group_check(attn_dtype key_dtype, attn_dtype dtype, int64_t page, int64_t key_dim, const char *name,
                             const char *what, attn_error *err) {
    if (!key_dtype) return ATTN_OK;
    if (!attn_dtype_grouped(key_dtype))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s->key_dtype is %s; it must be 0 (keys in dtype), q4c or q2c", name,
                         attn_dtype_name(key_dtype));
    if (dtype == ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s->dtype is f64; %s keys take values of f32, f16, bf16 or quantized",
                         name, attn_dtype_name(key_dtype));
    if (page % G)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s is %lld; %s keys are quantized in groups of %d positions, so it must "
                         "be a multiple of %d", what, (long long)page, attn_dtype_name(key_dtype), G, G);
    if (!attn_group_bytes(key_dtype, key_dim) || key_dim > GROUP_BUF)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s->key_dim is %lld; %s keys need %s, at most %d", name,
                         (long long)key_dim, attn_dtype_name(key_dtype),
                         key_dtype == ATTN_Q4C ? "an even key_dim" : "a key_dim that is a multiple of 4", GROUP_BUF);
    return ATTN_OK;
}

attn_status attn_check_block_dims(attn_dtype dtype, attn_dtype key_dtype, int64_t key_dim, int64_t value_dim,
                                  const char *name, attn_error *err) {
    if (!attn_quant_block_bytes(dtype)) return ATTN_OK;
    bool keys_apart = attn_dtype_grouped(key_dtype);
    if (value_dim % 32)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s->value_dim is %lld; %s values are stored in blocks of 32, so it must "
                         "be a multiple of 32", name, (long long)value_dim, attn_dtype_name(dtype));
    if (!keys_apart && key_dim % 32)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s->key_dim is %lld; %s keys are stored in blocks of 32, so it must "
                         "be a multiple of 32 (or the keys quantized per channel: key_dtype q4c or q2c)",
                         name, (long long)key_dim, attn_dtype_name(dtype));
    return ATTN_OK;
}

attn_status attn_group_check_plain(attn_dtype key_dtype, const float *k_scale, int hadamard, const char *name,
                                   attn_error *err) {
    if (!key_dtype || (!k_scale && !hadamard)) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_OPTION, "%s->key_dtype is %s and %s->%s is set; keys quantized per channel take no "
                     "per-head scale and no Hadamard rotation", name, attn_dtype_name(key_dtype), name,
                     k_scale ? "k_scale" : "hadamard");
}

attn_status attn_group_check_residual(attn_dtype key_dtype, int64_t residual, const char *name, attn_error *err) {
    if (residual == 0) return ATTN_OK;
    if (!key_dtype)
        return attn_fail(err, ATTN_ERR_OPTION, "%s->residual is %lld but %s->key_dtype is 0; only keys quantized per "
                         "channel (q4c, q2c) keep a residual window", name, (long long)residual, name);
    if (residual < 0 || residual % G || residual > ATTN_KEY_RESIDUAL_MAX)
        return attn_fail(err, ATTN_ERR_OPTION, "%s->residual is %lld; it must be 0 or a multiple of %d up to %d "
                         "(the recent positions kept in f16)", name, (long long)residual, G, ATTN_KEY_RESIDUAL_MAX);
    return ATTN_OK;
}

/* ---- the row source ------------------------------------------------------- */

attn_rows attn_rows_grouped(const attn_paged_rows *pg, int64_t head) {
    attn_rows r;
    memset(&r, 0, sizeof r);
    int64_t bytes = attn_group_bytes(pg->dtype, pg->cols), per_page = pg->page_size / G;
    r.kind = ATTN_ROWS_GROUPED;
    r.dtype = pg->dtype;
    r.rows = pg->length;
    r.cols = pg->cols;
    r.page_size = pg->page_size;
    r.row_step = bytes;
    r.page_stride = attn_paged_page_step(pg) * per_page * bytes; /* checked by attn_grouped_rows_check */
    r.head = (const char *)pg->pages + attn_paged_head_at(pg, head) * per_page * bytes;
    r.table = pg->table;
    r.residual = pg->residual ? pg->residual + head * (pg->window + G) * pg->cols : NULL; /* NULL: none is read */
    r.full = attn_group_full(pg->length, pg->window);
    return r;
}

attn_status attn_grouped_rows_check(const attn_paged_rows *pg, const char *name, attn_error *err) {
    if (pg->num_pages < 1 || pg->heads < 1 || pg->page_size < 1 || pg->cols < 1 || pg->n_pages < 0 || pg->length < 0)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: a size is below 1, or a count below 0", name);
    if (pg->page_size % G || !attn_group_bytes(pg->dtype, pg->cols) || pg->cols > GROUP_BUF)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: pages of %lld positions and rows of %lld values do not take %s groups",
                         name, (long long)pg->page_size, (long long)pg->cols, attn_dtype_name(pg->dtype));
    int64_t n, bytes, cap;
    if (!attn_mul_i64(pg->num_pages, pg->heads, &n) || !attn_mul_i64(n, pg->page_size / G, &n) ||
        !attn_mul_i64(n, attn_group_bytes(pg->dtype, pg->cols), &bytes))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: the pool's byte size overflows", name);
    if (pg->window < 0 || pg->window % G || pg->window > ATTN_KEY_RESIDUAL_MAX)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: a residual window of %lld positions", name, (long long)pg->window);
    if (attn_group_full(pg->length, pg->window) < pg->length && !pg->residual)
        return attn_fail(err, ATTN_ERR_NULL, "%s: the residual rows are NULL", name);
    if (pg->n_pages > 0 && !pg->table) return attn_fail(err, ATTN_ERR_NULL, "%s: the page table is NULL", name);
    if (!attn_mul_i64(pg->n_pages, pg->page_size, &cap) || pg->length > cap)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s: length %lld passes the table's %lld pages of %lld positions", name,
                         (long long)pg->length, (long long)pg->n_pages, (long long)pg->page_size);
    for (int64_t t = 0; t < pg->n_pages; t++)
        if (pg->table[t] < 0 || pg->table[t] >= pg->num_pages)
            return attn_fail(err, ATTN_ERR_OPTION, "%s: page table entry %lld is %d, outside the pool's %lld pages", name,
                             (long long)t, (int)pg->table[t], (long long)pg->num_pages);
    return ATTN_OK;
}

int64_t attn_grouped_span(const attn_rows *src, int64_t j, int64_t n, attn_mat *span, float *buf, int64_t room) {
    span->cols = src->cols, span->rs = src->cols, span->cs = 1;
    if (j >= src->full) { /* the residual's rows, in place */
        span->base = (char *)(uintptr_t)(src->residual + (j - src->full) * src->cols);
        span->dtype = ATTN_F16;
        return span->rows = n;
    }
    int64_t t, most = (room < GROUP_BUF ? room : GROUP_BUF) / src->cols; /* >= 1: room holds a row */
    const void *group = attn_grouped_at(src, j, &t);
    int64_t k = G - t < n ? G - t : n;
    if (k > most) k = most;
    attn_group_rows(buf, group, src->cols, src->dtype, t, k);
    span->base = (char *)buf;
    span->dtype = ATTN_F32;
    return span->rows = k;
}

const void *attn_grouped_at(const attn_rows *src, int64_t j, int64_t *t) {
    int64_t P = src->page_size;
    *t = j % G;
    return src->head + src->table[j / P] * src->page_stride + (j % P) / G * src->row_step;
}

void attn_grouped_gather(const attn_paged_rows *pg, int64_t head, char *dst, attn_dtype dt, int64_t rs, int64_t cs) {
    attn_rows r = attn_rows_paged(pg, head);
    int64_t es = (int64_t)attn_dtype_size(dt);
    float x[CHUNK]; /* a group's row, CHUNK channels at a time: a small frame for a thread with a small stack */
    for (int64_t j = 0; j < pg->length;) {
        if (r.kind == ATTN_ROWS_GROUPED && j < r.full) {
            int64_t t;
            const void *group = attn_grouped_at(&r, j, &t);
            for (int64_t c0 = 0; c0 < pg->cols; c0 += CHUNK) {
                int64_t w = pg->cols - c0 < CHUNK ? pg->cols - c0 : CHUNK;
                for (int64_t c = 0; c < w; c++) x[c] = attn_group_get(group, pg->cols, pg->dtype, t, c0 + c);
                attn_tensor src = {x, ATTN_F32, 2, {1, w}, {w, 1}};
                attn_tensor out = {dst + (j * rs + c0 * cs) * es, dt, 2, {1, w}, {rs, cs}};
                attn_copy_rows(&out, &src);
            }
            j++;
            continue;
        }
        attn_mat m; /* the residual's rows (or another source's), in place */
        int64_t n = attn_rows_span(&r, j, pg->length - j, &m, NULL, 0);
        attn_tensor src = {m.base, m.dtype, 2, {n, pg->cols}, {m.rs, m.cs}};
        attn_tensor out = {dst + j * rs * es, dt, 2, {n, pg->cols}, {rs, cs}};
        attn_copy_rows(&out, &src);
        j += n;
    }
}

/* ---- attn_quantize and attn_dequantize over tensors ---------------------- */

/* Element (i, c) of matrix m of t's leading indices (C order): its byte
 * offset. */
static int64_t offset_of(const attn_tensor *t, int64_t m, int64_t i, int64_t c) {
    int64_t off = i * t->strides[t->rank - 2] + c * t->strides[t->rank - 1];
    for (int d = t->rank - 3; d >= 0; d--) {
        off += (m % t->shape[d]) * t->strides[d];
        m /= t->shape[d];
    }
    return off * (int64_t)attn_dtype_size(t->dtype);
}

static void put_value(char *e, attn_dtype dt, float x) {
    switch (dt) {
    case ATTN_F64: { double y = x; memcpy(e, &y, 8); break; }
    case ATTN_F32: memcpy(e, &x, 4); break;
    case ATTN_F16: { uint16_t h = attn_f32_to_f16(x); memcpy(e, &h, 2); break; }
    default: { uint16_t h = attn_f32_to_bf16(x); memcpy(e, &h, 2); break; }
    }
}

attn_status attn_group_tensor(const attn_tensor *t, const char *name, void *bytes, size_t size, attn_dtype format,
                              bool quantize, attn_error *err) {
    if (!t || !t->data || !bytes) return attn_fail(err, ATTN_ERR_NULL, "the tensor, its data or the groups are NULL");
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f32, f64, f16 or bf16", name,
                         attn_dtype_name(t->dtype));
    if (t->rank < 2 || t->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; %s groups need rank 2 to %d: (..., positions, channels)",
                         name, t->rank, attn_dtype_name(format), ATTN_MAX_RANK);
    attn_status st = attn_check_dims(t->rank, t->shape, name, err);
    if (st) return st;
    int64_t numel = attn_tensor_numel(t), L = t->shape[t->rank - 2], n = t->shape[t->rank - 1];
    if (numel < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "%s's element count overflows", name);
    int64_t group = attn_group_bytes(format, n);
    /* Any n the format measures: a group is quantized CHUNK channels at a
     * time and read back a value at a time (key_dim <= GROUP_BUF is the
     * caches' limit, for their rows dequantized on the stack). */
    if (L % G || !group)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s is (..., %lld, %lld); %s groups take positions in multiples of %d and "
                         "%s channels", name, (long long)L, (long long)n, attn_dtype_name(format), G,
                         format == ATTN_Q4C ? "an even number of" : "a multiple of 4");
    int64_t mats = L ? numel / L / n : 0, groups = 0, total = 0;
    if (!attn_mul_i64(mats, L / G, &groups) || !attn_mul_i64(groups, group, &total) || (uint64_t)total > SIZE_MAX)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the groups' byte size overflows");
    if ((size_t)total > size)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "%lld group%s of %s take%s %lld bytes; %s holds %zu", (long long)groups,
                         attn_plural(groups), attn_dtype_name(format), groups == 1 ? "s" : "", (long long)total,
                         quantize ? "dst" : "src", size);
    st = attn_check_extent(t, name, err);
    if (st || (!quantize && (st = attn_check_writable(t, name, err)))) return st; /* dst: no element twice */
    attn_tensor region = {bytes, ATTN_BOOL, 1, {total}, {1}};
    const attn_named out[1] = {{quantize ? &region : t, "dst"}};
    const attn_named in[1] = {{quantize ? t : &region, "src"}};
    if ((st = attn_check_no_overlap(out, 1, in, 1, err))) return st;
    char *g = bytes;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i0 = 0; i0 < L; i0 += G, g += group) {
            if (quantize) {
                attn_mat x = {(char *)t->data + offset_of(t, m, 0, 0), t->dtype, L, n, t->strides[t->rank - 2],
                              t->strides[t->rank - 1]};
                attn_group_quant(g, &x, i0, format);
                continue;
            }
            for (int64_t i = 0; i < G; i++)
                for (int64_t c = 0; c < n; c++)
                    put_value((char *)t->data + offset_of(t, m, i0 + i, c), t->dtype, attn_group_get(g, n, format, i, c));
        }
    return ATTN_OK;
}
