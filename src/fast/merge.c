/* merge.c -- the exact merge of partial attention results by their
 * log-sum-exp (fast.h): what split-KV decode does with its chunks, and what
 * attn_sdpa_merge offers callers (ring attention, a KV cache split over
 * devices). */
#include "fast/fast.h"

#include <string.h>

static double get(const void *row, attn_dtype dtype, int64_t off) {
    return dtype == ATTN_F32 ? (double)((const float *)row)[off] : ((const double *)row)[off];
}

static void set(void *row, attn_dtype dtype, int64_t off, double x) {
    if (dtype == ATTN_F32) ((float *)row)[off] = attn_f32_of(x);
    else ((double *)row)[off] = x;
}

/* Whether the merge of parts into out is a copy, bit for bit: one f32 part
 * whose l is an f32 value (split-KV decode's partials; l = 1 for a bare
 * lse). Its weight is l and den = l, and l · o is exact in double (24 + 24
 * bits), so (l · o) / l is o exactly; the sum would write attn_f32_of(o).
 * Its row must lie apart from out's, or be out's own, read and written
 * element by element. (A decode call over one chunk of keys, L = 1 and
 * S = 100, spent 12% of its time in the sum.) */
static bool copies(const void *out, int64_t os, attn_dtype dtype, const attn_part_row *parts, int n, int64_t Ev) {
    if (n != 1 || dtype != ATTN_F32 || !(parts[0].l > 0 && parts[0].l <= FLT_MAX) ||
        parts[0].l != (double)(float)parts[0].l)
        return false;
    const float *o = parts[0].out, *d = out;
    if (o == d && parts[0].stride == os) return true;
    int64_t so = parts[0].stride, last_o = (Ev - 1) * so, last_d = (Ev - 1) * os;
    uintptr_t o_lo = (uintptr_t)(so < 0 ? o + last_o : o), o_hi = (uintptr_t)(so < 0 ? o : o + last_o);
    uintptr_t d_lo = (uintptr_t)(os < 0 ? d + last_d : d), d_hi = (uintptr_t)(os < 0 ? d : d + last_d);
    return o_hi < d_lo || d_hi < o_lo;
}

/* Whether every x[0 .. n) is zero or normal (neither subnormal, nor
 * infinite, nor NaN), when attn_f32_of leaves it as it is. Looked at as
 * bits 16 at a time, which compiles to a few vector integer operations: a
 * float compare and branch an element cost one decode call of L = 1, S =
 * 100, H = 16 about a sixth of its time. */
static bool all_normal(const float *x, int64_t n) {
    uint32_t odd = 0;
    for (int64_t e0 = 0; e0 < n; e0 += 16) {
        uint32_t u[16] = {0};
        if (n - e0 >= 16) memcpy(u, x + e0, sizeof u); /* a constant size: a few vector moves */
        else memcpy(u, x + e0, sizeof(float) * (size_t)(n - e0));
        for (int t = 0; t < 16; t++) {
            uint32_t a = u[t] & 0x7fffffffu; /* |x| */
            odd |= (uint32_t)(a - 1u < 0x007fffffu) | (uint32_t)(a >= 0x7f800000u);
        }
    }
    return odd == 0;
}

enum { CHUNK = 64, BLOCK = 8 }; /* output elements summed at a time, in double; and at once */

/* acc[e] += w · o[e] for e < n <= CHUNK: the sum below for an f32 row of
 * unit stride (split-KV decode's partials), BLOCK elements a step so that
 * the compiler keeps them in vectors. Each element's operations are those
 * of the general loop, in the same order: the same bits. (Element by
 * element through get() a decode call of H 8, L = 1, S = 512 spent 4% of
 * its time merging two chunks a head.) */
static void add_f32(double *restrict acc, double w, const float *restrict o, int64_t n) {
    int64_t e = 0;
    for (; e + BLOCK <= n; e += BLOCK)
        for (int t = 0; t < BLOCK; t++) acc[e + t] += w * (double)o[e + t];
    for (; e < n; e++) acc[e] += w * (double)o[e];
}

/* out[e] = acc[e] / den rounded once to f32 (attn_f32_of), for e < n:
 * set() for f32 rows of unit stride, by BLOCK. Returns whether every
 * output is finite. */
static bool put_f32(float *restrict out, const double *restrict acc, double den, int64_t n) {
    uint32_t bad = 0; /* an output's exponent all ones: inf or NaN */
    int64_t e = 0;
    for (; e + BLOCK <= n; e += BLOCK)
        for (int t = 0; t < BLOCK; t++) {
            out[e + t] = attn_f32_of(acc[e + t] / den);
            uint32_t u;
            memcpy(&u, &out[e + t], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
    for (; e < n; e++) {
        out[e] = attn_f32_of(acc[e] / den);
        bad |= !(out[e] - out[e] == 0);
    }
    return bad == 0;
}

bool attn_merge_row(void *out, int64_t os, double *lse, attn_dtype dtype, const attn_part_row *parts,
                    int n, int64_t Ev) {
    /* The largest maximum of a part with keys; each part then weighs
     * l_i exp(m_i - m), and a part at the maximum exactly l_i. */
    double m = -INFINITY, den = 0;
    for (int i = 0; i < n; i++)
        if (isnan(parts[i].m) || isnan(parts[i].l)) { /* a NaN score: attention over all the keys is NaN */
            for (int64_t e = 0; e < Ev; e++) set(out, dtype, e * os, NAN);
            if (lse) *lse = NAN;
            return false;
        }
    for (int i = 0; i < n; i++) m = parts[i].l != 0 && parts[i].m > m ? parts[i].m : m;
    if (m == -INFINITY) { /* no key of any part took part: the row is 0 */
        for (int64_t e = 0; e < Ev; e++) set(out, dtype, e * os, 0.0);
        if (lse) *lse = -INFINITY;
        return true;
    }
    if (m == INFINITY) { /* a +inf score in some part: e^(inf - inf), as attention over all the keys gives it */
        for (int64_t e = 0; e < Ev; e++) set(out, dtype, e * os, NAN);
        if (lse) *lse = INFINITY;
        return false;
    }
    bool finite = true;
    if (copies(out, os, dtype, parts, n, Ev)) { /* the row of the one part, as the sum below gives it */
        const float *o = parts[0].out;
        if (os == 1 && parts[0].stride == 1 && all_normal(o, Ev)) { /* each element written as it is */
            memmove(out, o, sizeof(float) * (size_t)Ev);
            if (lse) *lse = attn_lse(m, parts[0].l);
            return true;
        }
        for (int64_t e = 0; e < Ev; e++) {
            float x = attn_f32_of((double)o[e * parts[0].stride]);
            ((float *)out)[e * os] = x;
            finite &= x - x == 0;
        }
        if (lse) *lse = attn_lse(m, parts[0].l);
        return finite;
    }
    double acc[CHUNK]; /* den is summed with the first chunk */
    for (int64_t e0 = 0; e0 < Ev; e0 += CHUNK) {
        int64_t ne = Ev - e0 < CHUNK ? Ev - e0 : CHUNK;
        for (int64_t e = 0; e < ne; e++) acc[e] = 0;
        for (int i = 0; i < n; i++) {
            const attn_part_row *pt = &parts[i];
            if (pt->l == 0 || pt->m == -INFINITY) continue; /* its row is 0, or NaN we must not spread */
            double w = pt->m == m ? pt->l : pt->l * attn_exp_or_zero(pt->m - m);
            if (e0 == 0) den += w;
            if (dtype == ATTN_F32 && pt->stride == 1) add_f32(acc, w, (const float *)pt->out + e0, ne);
            else
                for (int64_t e = 0; e < ne; e++) acc[e] += w * get(pt->out, dtype, (e0 + e) * pt->stride);
        }
        /* Written after every part was read: out may be a part's row. */
        if (dtype == ATTN_F32 && os == 1) finite &= put_f32((float *)out + e0, acc, den, ne);
        else
            for (int64_t e = 0; e < ne; e++) {
                set(out, dtype, (e0 + e) * os, acc[e] / den);
                double o = get(out, dtype, (e0 + e) * os);
                finite &= o - o == 0;
            }
    }
    if (lse) *lse = attn_lse(m, den);
    return finite;
}
