/* pack.c -- the fast kernels' packing of operands into contiguous f32
 * buffers: rows times a scale, and rows transposed; and the prefetch that
 * brings rows to be packed into the cache ahead (fast.h). */
#include "fast/fast.h"
#include "kernels/ukernel.h"

const float *attn_row_f32_fast(const attn_ukernels *uk, const attn_mat *m, int64_t r, float *buf) {
    if (attn_dtype_quantized(m->dtype)) { /* widened by the ISA (the reference's floats) */
        uk->widen_quant(buf, m->base + r * m->rs, m->cols, m->dtype);
        return buf;
    }
    if (m->dtype == ATTN_F32 || m->cs != 1) return attn_row_f32(m, r, buf);
    uk->widen16(buf, (const uint16_t *)(const void *)m->base + r * m->rs, m->cols, m->dtype == ATTN_F16);
    return buf;
}

const float *attn_rows_f32(const attn_ukernels *uk, const attn_rows *src, int64_t r0, int64_t n, float *buf,
                           int64_t *ld) {
    attn_mat m;
    if (attn_rows_one_span(src, r0, n, &m, buf, n * src->cols) && m.dtype == ATTN_F32 && m.cs == 1) {
        *ld = m.rs;
        return (const float *)(const void *)m.base;
    }
    for (int64_t r = r0; r < r0 + n;) { /* a group's rows dequantized where they belong in buf: nothing to copy */
        int64_t k = attn_rows_span(src, r, r0 + n - r, &m, buf + (r - r0) * src->cols, (r0 + n - r) * src->cols);
        for (int64_t i = 0; i < k; i++) {
            float *dst = buf + (r - r0 + i) * src->cols;
            const float *row = attn_row_f32_fast(uk, &m, i, dst);
            if (row != dst) memcpy(dst, row, sizeof(float) * (size_t)src->cols);
        }
        r += k;
    }
    *ld = src->cols;
    return buf;
}

/* Pack rows r0..r0+n-1 of a matrix (f32, f16 or bf16) times `scale` into dst
 * (n × cols, stride ld), zero rows up to n_pad and columns up to ld. Each
 * product is taken in double and rounded once, so a scale outside f32's
 * range (or subnormal in it) costs no precision. Returns the largest |value|
 * written, or -1 if a value written is not finite. tmp holds a row (for
 * widening 16-bit floats). */
float attn_pack_scaled(const attn_ukernels *uk, float *dst, int64_t ld, const attn_mat *m, int64_t r0, int64_t n,
                       int64_t n_pad, double scale, float *tmp) {
    /* A scale that is an f32 (1/8 for E = 64): the f32 product is the exact
     * product rounded once, as the double one is, so the vector kernel gives
     * the same floats. */
    bool f32_scale = (double)(float)scale == scale;
    for (int64_t r = 0; r < n; r++) {
        const float *row = attn_row_f32_fast(uk, m, r0 + r, tmp);
        float *d = dst + r * ld;
        if (scale == 1.0) memcpy(d, row, sizeof(float) * (size_t)m->cols);
        else if (f32_scale) uk->scale(d, row, m->cols, (float)scale);
        else
            for (int64_t c = 0; c < m->cols; c++) d[c] = (float)((double)row[c] * scale);
        for (int64_t c = m->cols; c < ld; c++) d[c] = 0;
    }
    for (int64_t r = n; r < n_pad; r++) memset(dst + r * ld, 0, sizeof(float) * (size_t)ld);
    return uk->absmax(dst, n * ld); /* the padding columns are 0 */
}

float attn_pack_rows_scaled(const attn_ukernels *uk, float *dst, int64_t ld, const attn_rows *src, int64_t r0,
                            int64_t n, int64_t n_pad, double scale, float *tmp) {
    float most = 0;
    for (int64_t r = r0; r < r0 + n;) { /* span by span; the last one zeroes the padding rows */
        attn_mat m;
        /* a group's rows one at a time in tmp, which attn_pack_scaled then
         * reads in place (no kernel packs such keys here: flash's are
         * transposed, below) */
        int64_t k = attn_rows_span(src, r, r0 + n - r, &m, tmp, src->cols), done = r - r0;
        bool last = r + k == r0 + n;
        most = attn_absmax_join(most, attn_pack_scaled(uk, dst + done * ld, ld, &m, 0, k, last ? n_pad - done : k,
                                                       scale, tmp));
        r += k;
    }
    for (int64_t r = 0; n == 0 && r < n_pad; r++) memset(dst + r * ld, 0, sizeof(float) * (size_t)ld);
    return most;
}

/* Keys c0+16..c0+31 of j0..j0+n-1 into the cache: the transpose reads each
 * key row in four pieces, one line per step, so rows that are not yet in L2
 * would arrive one miss at a time; fetched a group ahead, they come while
 * the group before them is transposed. */
static void prefetch_next_group(const attn_mat *k, int64_t j0, int64_t n, int64_t c0) {
    int64_t ahead = n - (c0 + 16);
    if (ahead > 0) attn_prefetch_rows(k, j0 + c0 + 16, ahead < 16 ? ahead : 16);
}

/* kt (E × ld) = rows j0..j0+n-1 of the matrix k transposed, zero columns up
 * to n_pad (a multiple of 16). The transpose goes 16 keys at a time, so that
 * each write fills a cache line. */
static void transpose_mat(const attn_ukernels *uk, float *kt, int64_t ld, int64_t n_pad, const attn_mat *k,
                          int64_t j0, int64_t n, float *tmp) {
    if (k->dtype != ATTN_F32) { /* 16-bit keys: widen a row at a time */
        for (int64_t c = 0; c < n_pad; c++) {
            if (c % 16 == 0) prefetch_next_group(k, j0, n, c);
            const float *row = c < n ? attn_row_f32_fast(uk, k, j0 + c, tmp) : NULL;
            for (int64_t e = 0; e < k->cols; e++) kt[e * ld + c] = row ? row[e] : 0;
        }
        return;
    }
    const float *src = (const float *)(const void *)k->base;
    for (int64_t c0 = 0; c0 < n_pad; c0 += 16) {
        int64_t nb = n - c0 < 16 ? (n - c0 > 0 ? n - c0 : 0) : 16;
        const float *rows = src + (j0 + c0) * k->rs;
        prefetch_next_group(k, j0, n, c0);
        if (k->cs == 1) { /* contiguous rows: a register transpose */
            uk->transpose16(kt + c0, ld, rows, k->rs, (int)nb, k->cols);
            continue;
        }
        for (int64_t e = 0; e < k->cols; e++) {
            float *d = kt + e * ld + c0;
            for (int64_t c = 0; c < nb; c++) d[c] = rows[c * k->rs + e * k->cs];
            for (int64_t c = nb; c < 16; c++) d[c] = 0;
        }
    }
}

/* kt (E × ld) = keys j0..j0+n-1 transposed, zero columns up to n_pad: span
 * by span, each span that starts and ends on 16 keys (or runs to the end)
 * by the 16-key transpose, any other a key at a time, so that no span's
 * zero padding ever lands past the columns it owns. A dense source is one
 * span: one transpose, as it always was. rows: room floats for a grouped
 * source's spans (NULL for the others). */
static void transpose_spans(const attn_ukernels *uk, float *kt, int64_t ld, int64_t n_pad, const attn_rows *k,
                            int64_t j0, int64_t n, float *tmp, float *rows, int64_t room) {
    int64_t c = 0;
    while (c < n) {
        attn_mat m;
        int64_t nk = attn_rows_span(k, j0 + c, n - c, &m, rows, room);
        bool last = c + nk == n;
        if (c % 16 == 0 && (last || nk % 16 == 0)) {
            transpose_mat(uk, kt + c, ld, last ? n_pad - c : nk, &m, 0, nk, tmp);
        } else {
            for (int64_t i = 0; i < nk; i++) {
                const float *row = attn_row_f32_fast(uk, &m, i, tmp);
                for (int64_t e = 0; e < k->cols; e++) kt[e * ld + c + i] = row[e];
            }
            for (int64_t e = 0; last && e < k->cols; e++)
                for (int64_t x = n; x < n_pad; x++) kt[e * ld + x] = 0;
        }
        c += nk;
    }
    if (n == 0)
        for (int64_t e = 0; e < k->cols; e++) memset(kt + e * ld, 0, sizeof(float) * (size_t)n_pad);
}

/* Keys quantized per channel: each group's keys 16 at a time, dequantized
 * KT_SLICE channels at a time into tmp (ATTN_PACK_GROUPED_TMP floats, the
 * caller's scratch: 8 KiB that a caller's small stack may not have) and
 * transposed by the 16-key transpose, a slice of kt's rows each (the same
 * floats as whole rows: every value is its own code · d + m); the
 * residual's f16 rows as any source's, through tmp too (a slice is
 * transposed before the residual is read). */
enum { KT_SLICE = 128 };
_Static_assert(16 * KT_SLICE <= ATTN_PACK_GROUPED_TMP, "16 keys' slice fits tmp");
static void transpose_grouped(const attn_ukernels *uk, float *kt, int64_t ld, int64_t n_pad, const attn_rows *k,
                              int64_t j0, int64_t n, float *tmp) {
    float *rows = tmp;
    int64_t c = 0, E = k->cols;
    while (c < n) {
        /* at most to the next 16 keys' start, where the 16-key transposes
         * are, so that no transpose's zero padding lands past its own */
        int64_t nk = n - c < 16 - c % 16 ? n - c : 16 - c % 16;
        if (j0 + c >= k->full) {
            if (c % 16 == 0) { /* the residual's f16 rows, in place, as any source's */
                transpose_spans(uk, kt + c, ld, n_pad - c, k, j0 + c, n - c, tmp, NULL, 0);
                return;
            }
            attn_mat m;
            nk = attn_rows_span(k, j0 + c, nk, &m, NULL, 0);
            for (int64_t i = 0; i < nk; i++) {
                const float *row = attn_row_f32_fast(uk, &m, i, tmp);
                for (int64_t e = 0; e < E; e++) kt[e * ld + c + i] = row[e];
            }
            c += nk;
            continue;
        }
        int64_t t;
        const void *group = attn_grouped_at(k, j0 + c, &t);
        if (ATTN_KEY_GROUP - t < nk) nk = ATTN_KEY_GROUP - t;
        bool whole = c % 16 == 0 && (nk == 16 || c + nk == n); /* the 16-key transpose, zeros to 16 */
        for (int64_t e0 = 0; e0 < E; e0 += KT_SLICE) {
            int64_t w = E - e0 < KT_SLICE ? E - e0 : KT_SLICE;
            attn_group_block(rows, w, group, E, k->dtype, t, nk, e0, w);
            if (whole) uk->transpose16(kt + e0 * ld + c, ld, rows, w, (int)nk, w);
            else
                for (int64_t e = 0; e < w; e++)
                    for (int64_t i = 0; i < nk; i++) kt[(e0 + e) * ld + c + i] = rows[i * w + e];
        }
        c += whole ? 16 : nk;
    }
    for (int64_t e = 0; e < E; e++) /* the padding past what was written */
        for (int64_t x = c; x < n_pad; x++) kt[e * ld + x] = 0;
}

void attn_pack_transposed(const attn_ukernels *uk, float *kt, int64_t ld, int64_t n_pad, const attn_rows *k,
                          int64_t j0, int64_t n, float *tmp) {
    if (k->kind == ATTN_ROWS_GROUPED) transpose_grouped(uk, kt, ld, n_pad, k, j0, n, tmp);
    else transpose_spans(uk, kt, ld, n_pad, k, j0, n, tmp, NULL, 0);
}

void attn_prefetch_kv(const attn_rows *src, int64_t r0, int64_t n) {
    if (src->kind == ATTN_ROWS_GROUPED) return; /* its spans are dequantized copies, nothing to fetch ahead */
    for (int64_t r = r0; r < r0 + n;) {
        attn_mat m;
        int64_t k = attn_rows_span(src, r, r0 + n - r, &m, NULL, 0);
        attn_prefetch_rows(&m, 0, k);
        r += k;
    }
}

void attn_prefetch_rows(const attn_mat *m, int64_t r0, int64_t n) {
    if (m->cs != 1) return; /* rows of strided elements: left to the hardware */
    int64_t unit = attn_stride_unit(m->dtype), bytes = attn_row_bytes(m->dtype, m->cols);
    for (int64_t r = r0; r < r0 + n; r++) {
        attn_prefetch_bytes(m->base + r * m->rs * unit, bytes);
    }
}
