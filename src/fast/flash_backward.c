/* flash_backward.c -- the fused f32 backward pass: FlashAttention-2's
 * backward in plain C, the products in the per-ISA microkernels.
 *
 * A work item is one (batch, head) slice and one chunk of its keys. It
 * computes D_i = rowsum(dout_i ∘ out_i) for the slice's rows, then walks its
 * keys in blocks of bc. For a key block it packs K times the scale
 * (transposed and plain) and V (transposed), and for every block of br query
 * rows that can see it takes those queries and their dout where they lie
 * (packing them only when they are not f32 rows of whole vectors, or are
 * turned by RoPE), then:
 *   S  = Q (scale K)ᵀ, then the score epilogue (soft-cap, ALiBi, masks,
 *        causal limit, window), keeping the cap's derivative C when capped
 *   P  = exp(S - lse)            (the forward's lse), or for a row whose lse
 *                                 f32 cannot trust exp((S - m) - log l)
 *                                 (see below)
 *   dP = Z ∘ dout Vᵀ             (Z: dropout's 0 or 1/(1 - p), else 1)
 *   dS = P ∘ (dP - D)  (∘ C when capped)
 *   dV_j += (Z ∘ P)ᵀ dout,  dK_j += dSᵀ Q  (pvt reads P and dS by columns,
 *                                  uncopied; dK_j times the scale when stored)
 *   dQ_i += dS (scale K_j)
 * Nothing of size L × S exists; the P and dS tiles are br × bc.
 *
 * Determinism: dK and dV rows belong to one item (chunks do not overlap), and
 * each item keeps its own dQ partial (L × E). The items' partials are summed
 * afterwards in a fixed order (item order, in f64, in reduce()), and the
 * chunking depends on the shapes only, so results are bitwise identical for
 * any number of threads. (The alternative, a second pass over the queries
 * for dQ, recomputes S and dP: 8 products of L·S·d instead of 5.)
 *
 * Rows the forward's lse cannot describe: an f32 lse rounds by half its ulp,
 * so once |lse| passes LSE_TRUSTED it no longer carries the row's log l
 * next to its maximum m. A row that a large finite mask value c covers
 * entirely (Hugging Face pads with -FLT_MAX) has every score near c and lse
 * = c + log(S) = c in f32 for |c| >= 2^24 · log(S): exp(S - lse) would give
 * each key a weight near 1 rather than 1/S. For such rows a pass before the
 * items (stats_item) recomputes m and l over all the row's keys from the
 * same f32 scores the items compute (block_scores), and P = exp((S - m) -
 * log l): S - m is exact near the maximum, so P sums to 1 whatever the size
 * of m. Other rows keep the forward's lse, whose rounding is then below
 * 2^-17 relative. A piece of the keys (softmax_from_lse) has only the
 * whole's lse and keeps it.
 *
 * Computed by the exact f64 kernel instead: a slice whose inputs are not
 * finite, whose float mask holds NaN or +inf, whose gradients could
 * overflow f32, or whose products q·k·scale could pass SCORES_LINEAR in
 * magnitude. f32 rounds a score by a few 2^-24 · |s| on typical data and
 * by up to (E + 1) · 2^-24 · s_abs (s_abs = scale · Σ|q_e||k_e|, where the
 * products cancel), which moves each weight by a factor within e^(±x), x =
 * 8 · 2^-24 · max|s| typically and 2 · (E + 5) · 2^-24 · s_abs at worst
 * (the forward's lse or the recomputed l moving with it; attn.h): below
 * 2^18 the typical factor's distance from 1 is within 1.07 times the
 * exponent, so the error stays linear in max|s|; the worst case's stays
 * linear in s_abs up to 2^20 / (E + 5). The forward's attn_f32_scores_fit
 * (2^100) only keeps scores finite: its weights are normalized by the l it
 * sums, so a moved score costs it at most a convex combination's worth,
 * where an unnormalized exp(S - lse) here would grow without bound. */
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/dropout.h"
#include "kernels/rope.h"
#include "kernels/score.h"
#include "kernels/ukernel.h"
#include "kernels/ukernel_bf16.h"

#include <float.h>
#include <stdatomic.h>
#include <string.h>

/* The largest |lse| taken as the forward gave it (see the file's comment):
 * half an ulp of 2^8 is 2^-17, a third of the sums' 2e-5 in the bound. */
static const double LSE_TRUSTED = 0x1p8;
/* The largest |q·k·scale| bound (qmax · kmax · E) the fused kernel takes. */
static const double SCORES_LINEAR = 0x1p18;
/* The items plan_job splits a call into where it has fewer slices: one for
 * each of 16 threads (docs/design.md, "Determinism"). The split into key
 * chunks fixes the order in which dQ's partials are summed, so it follows
 * the shapes alone, never the thread count a call runs on: 16 threads is
 * the count it is sized for instead. A slice cut into c chunks keeps c
 * partials of dQ (Lp × Ep floats each, summed by reduce()) where one chunk
 * may keep none (own_dq), so more items than threads buy balance with
 * memory; a call of 16 slices or more takes one chunk a slice. */
enum { ITEMS_WANTED = 16 };

/* How a slice is computed. */
enum {
    ROUTE_FUSED, /* the fused kernel, from the forward's lse */
    ROUTE_STATS, /* the fused kernel, after stats_item for the rows the lse cannot describe */
    ROUTE_EXACT  /* the exact f64 kernel, in reduce() */
};

/* The items' partial sums. */
typedef struct attn_grad_partials {
    float *dq;      /* per item: Lp × Ep */
    float *dk, *dv; /* per slice, for gradients slices share: S × Ep, S × Evp */
} attn_grad_partials;

typedef struct bwd_job {
    const attn_ukernels *uk;
    /* The bf16 compute mode's kernels (NULL: f32 products): the five
     * products on bf16 pairs with f32 sums, the softmax's gradient in f32 on
     * uk. mr and nr: the register tile of whichever set does the products. */
    const attn_bf16_kernels *bk;
    int64_t mr, nr;
    const attn_grad_slices *gs;
    int64_t L, S, E, Ev, Ep, Evp; /* Ep, Evp: E and Ev rounded up to the vector length */
    int64_t Lp;                   /* L + 16 rounded up to 16: rows of D, lse, dQ partials; a last
                                   * block's products read up to 16 (ATTN_MR_MAX, and pvt's 16)
                                   * padding rows past L (block_rows_read), which must exist */
    int64_t br, bc;               /* query rows and keys per block */
    int64_t chunk, n_chunks;      /* keys per work item, items per slice */
    bool capped;                  /* soft-capping: a tile for its derivative */
    /* One item per slice (n_chunks 1) and dq the caller's own output (or
     * not wanted): an item's dQ sum is the slice's whole dQ, so it is kept
     * in the worker's scratch and written out when the item ends, instead
     * of in per-item partials summed afterwards. The same floats: reduce
     * would add the one partial to 0 in f64 and round it back. */
    bool own_dq;
    /* Slices per item: 1, or a GQA group's query heads (plan_job's
     * group_heads), whose dK and dV an item then sums itself, a key block at
     * a time (store_key_block), instead of leaving each head's in partials
     * of S rows for reduce(). */
    int64_t heads;
    /* heads > 1: the first slices (whole groups) that items of a group
     * take; the others, up to the call's count, are items of one slice with
     * partials (choose_groups: as few as keep the threads' work balanced). */
    int64_t grouped_slices;
    attn_grad_partials part;
    int64_t n_rblocks;            /* blocks of br query rows per slice: stats_item's items */
    char *scratch; /* one workspace per worker */
    size_t ws_bytes;
    atomic_uchar *route; /* per slice: ROUTE_FUSED, ROUTE_STATS or ROUTE_EXACT */
    double *stats;       /* per slice and row, L × 2: (m, log l) from stats_item (ROUTE_STATS only) */
} bwd_job;

/* One worker's scratch, carved out of job->scratch. */
typedef struct workspace {
    double *sums;              /* heads > 1: a key block's dK and dV summed over the group, kr × Ep, kr × Evp */
    float *D, *lse, *shift;    /* the slice's rows, Lp each: P = exp((S - shift) - lse) (heads × Lp: head_rows) */
    float *q, *dout;           /* a query block: brp × Ep (times the scale), brp × Evp */
    float *kt, *k, *vt;        /* a key block: E × ldk, kr × Ep, Ev × ldk */
    float *dk, *dv;            /* its gradients: kr × Ep, kr × Evp */
    float *s, *dp;             /* a query block: brp × ldk (P, then dP and dS) */
    float *dc;                 /* a query block's cap derivatives, brp × ldk (capped only) */
    float *tmp;                /* one row, for widening 16-bit floats */
    float *dq;                 /* own_dq: the item's dQ, Lp × Ep (heads × Lp × Ep: head_rows) */
    /* bf16 mode only (bf16_rows, bf16_row_pairs): pairs along E for S and
     * dP, along the query rows for dV and dK, along the keys for dQ. */
    uint32_t *q2, *do2;        /* a query block: brp × E2, brp × Ev2 (pairs along E) */
    uint32_t *qr2, *dor2;      /* brp/2 × Ep, brp/2 × Evp (pairs of query rows) */
    uint32_t *kt2, *vt2;       /* a key block: E2 × ldk, Ev2 × ldk (pairs along E) */
    uint32_t *k2;              /* kr/2 × Ep (pairs of keys) */
    uint32_t *pr2, *pt2;       /* P or dS: brp/2 × ldk pairs of rows, then kr × ldt transposed */
    uint32_t *ds2;             /* dS: brp × ldk/2 (pairs along the keys) */
    float *zero;               /* a zero row of ldk + Ep + Evp floats */
} workspace;

static int64_t ldk_of(const bwd_job *j) { return attn_round_up(j->bc, 16) + 16; }
static int64_t kr_of(const bwd_job *j) { return attn_round_up(attn_round_up(j->bc, 16), j->mr); }
/* bf16 mode: pairs along E and Ev, and the stride of Pᵀ's and dSᵀ's pairs of query rows. */
static int64_t e2_of(int64_t e) { return (e + 1) / 2; }
static int64_t ldt_of(const bwd_job *j) { return attn_round_up(attn_round_up(j->br, 16) / 2, 16); }

/* The bf16 mode's buffers, in 4-byte words (0 in f32 mode). */
static size_t bf16_words(const bwd_job *j) {
    if (!j->bk) return 0;
    int64_t ldk = ldk_of(j), kr = kr_of(j), brp = attn_round_up(j->br, 16), E2 = e2_of(j->E), Ev2 = e2_of(j->Ev);
    return (size_t)(brp * (E2 + Ev2) + brp / 2 * (j->Ep + j->Evp) + (E2 + Ev2) * ldk + kr / 2 * j->Ep +
                    brp / 2 * ldk + kr * ldt_of(j) + brp * (ldk / 2) + ldk + j->Ep + j->Evp + 16);
}

/* The doubles of a group's key block sums (0 for items of one slice). */
static int64_t sums_doubles(const bwd_job *j) { return j->heads > 1 ? kr_of(j) * (j->Ep + j->Evp) : 0; }

static size_t workspace_floats(const bwd_job *j) {
    int64_t ldk = ldk_of(j), kr = kr_of(j), brp = attn_round_up(j->br, 16);
    return (size_t)(2 * sums_doubles(j) + 3 * j->heads * j->Lp + brp * (j->Ep + j->Evp) + (j->E + j->Ev) * ldk +
                    kr * (2 * j->Ep + j->Evp) + (j->capped ? 3 : 2) * brp * ldk +
                    attn_round_up(j->E + j->Ev + 16, 16) + (j->own_dq ? j->heads * j->Lp * j->Ep : 0)) +
           bf16_words(j);
}

static workspace workspace_of(const bwd_job *j, int worker) {
    int64_t ldk = ldk_of(j), kr = kr_of(j), brp = attn_round_up(j->br, 16);
    workspace w;
    w.sums = (double *)(void *)(j->scratch + (size_t)worker * j->ws_bytes);
    w.D = (float *)(void *)(w.sums + sums_doubles(j)); /* kr is a multiple of 16: still on 64 bytes */
    w.lse = w.D + j->heads * j->Lp;
    w.shift = w.lse + j->heads * j->Lp;
    w.q = w.shift + j->heads * j->Lp;
    w.dout = w.q + brp * j->Ep;
    w.kt = w.dout + brp * j->Evp;
    w.k = w.kt + j->E * ldk;
    w.vt = w.k + kr * j->Ep;
    w.dk = w.vt + j->Ev * ldk;
    w.dv = w.dk + kr * j->Ep;
    w.s = w.dv + kr * j->Evp;
    w.dp = w.s + brp * ldk;
    w.dc = w.dp + brp * ldk;
    w.tmp = w.dc + (j->capped ? brp * ldk : 0);
    w.dq = w.tmp + attn_round_up(j->E + j->Ev + 16, 16); /* own_dq only: Lp × Ep, on a 64-byte boundary */
    w.q2 = (uint32_t *)(void *)(w.dq + (j->own_dq ? j->heads * j->Lp * j->Ep : 0));
    int64_t E2 = e2_of(j->E), Ev2 = e2_of(j->Ev);
    w.do2 = w.q2 + brp * E2;
    w.qr2 = w.do2 + brp * Ev2;
    w.dor2 = w.qr2 + brp / 2 * j->Ep;
    w.kt2 = w.dor2 + brp / 2 * j->Evp;
    w.vt2 = w.kt2 + E2 * ldk;
    w.k2 = w.vt2 + Ev2 * ldk;
    w.pr2 = w.k2 + kr / 2 * j->Ep;
    w.pt2 = w.pr2 + brp / 2 * ldk;
    w.ds2 = w.pt2 + kr * ldt_of(j);
    w.zero = (float *)(void *)(w.ds2 + brp * (ldk / 2));
    return w;
}

/* w with the rows of the item's h-th head: its D, lse and shift, and its
 * dQ (the worker's own_dq rows, or the item's partial of that slice). */
static workspace head_rows(const bwd_job *j, const workspace *w, int64_t slice, int64_t chunk, int64_t h) {
    workspace wh = *w;
    wh.D += h * j->Lp, wh.lse += h * j->Lp, wh.shift += h * j->Lp;
    wh.dq = j->own_dq ? w->dq + h * j->Lp * j->Ep : j->part.dq + (slice * j->n_chunks + chunk) * j->Lp * j->Ep;
    return wh;
}

/* c (rows × cols, MR rows at a time, stride ldc) += a (rows × inner, stride
 * lda) · b (inner × cols, stride ldb); rows a multiple of the kernels' mr, cols of
 * the vector length: the microkernel pv over the tiles of c. Columns outer:
 * a strip of b (inner × nr, 16 KiB for dQ += dS K) stays in L1 while every
 * row tile passes over it, where rows outer streamed all of b from L2 for
 * each row tile (the same in gemm_t; 10% faster at d = 64 on Zen 3). */
static void gemm_acc(const attn_ukernels *uk, float *c, int64_t ldc, const float *a, int64_t lda,
                     const float *b, int64_t ldb, int64_t rows, int64_t inner, int64_t cols) {
    int64_t nr = (int64_t)uk->vl * uk->nv;
    for (int64_t c0 = 0; c0 < cols; c0 += nr)
        for (int64_t r0 = 0; r0 < rows; r0 += uk->mr) {
            int nvec = (int)((cols - c0) / uk->vl < uk->nv ? (cols - c0) / uk->vl : uk->nv);
            uk->pv(c + r0 * ldc + c0, ldc, a + r0 * lda, lda, b + c0, ldb, inner, nvec);
        }
}

/* s (rows × cols, stride lds) = a (rows × inner, stride lda) · bt (inner ×
 * cols, stride ldb): the microkernel qk over the tiles of s. */
static void gemm_t(const attn_ukernels *uk, float *s, int64_t lds, const float *a, int64_t lda,
                   const float *bt, int64_t ldb, int64_t rows, int64_t inner, int64_t cols) {
    int64_t nr = (int64_t)uk->vl * uk->nv;
    for (int64_t c0 = 0; c0 < cols; c0 += nr)
        for (int64_t r0 = 0; r0 < rows; r0 += uk->mr) uk->qk(s + r0 * lds + c0, lds, a + r0 * lda, lda, bt + c0, ldb, inner, uk->nv);
}

/* c (rows × cols, stride ldc) += aᵀ · b, for a stored inner × rows (stride
 * lda): the microkernel pvt, which reads a by columns, so that Pᵀ and dSᵀ
 * need no transposed copies. */
static void gemm_acc_t(const attn_ukernels *uk, float *c, int64_t ldc, const float *a, int64_t lda,
                       const float *b, int64_t ldb, int64_t rows, int64_t inner, int64_t cols) {
    int64_t nr = (int64_t)uk->vl * uk->nv;
    for (int64_t r0 = 0; r0 < rows; r0 += uk->mr)
        for (int64_t c0 = 0; c0 < cols; c0 += nr) {
            int nvec = (int)((cols - c0) / uk->vl < uk->nv ? (cols - c0) / uk->vl : uk->nv);
            uk->pvt(c + r0 * ldc + c0, ldc, a + r0, lda, b + c0, ldb, inner, nvec);
        }
}

/* The bf16 mode's operands: each product's factors rounded to bf16 and
 * packed as pairs (ukernel_bf16.h) along the dimension it sums over. */

/* dst (rows × ceil(cols / 2) pairs, stride ld2) = the rows of src (stride
 * lds) as pairs along their columns, an odd last column paired with 0. */
static void bf16_rows(const attn_bf16_kernels *bk, uint32_t *dst, int64_t ld2, const float *src, int64_t lds,
                      int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *d = (uint16_t *)(void *)(dst + r * ld2);
        bk->to_bf16(d, src + r * lds, cols / 2 * 2);
        if (cols % 2) d[cols - 1] = attn_f32_to_bf16(src[r * lds + cols - 1]), d[cols] = 0;
    }
}

/* dst (ceil(rows / 2) × cols pairs, stride ldd) = rows 2i and 2i + 1 of src
 * (stride lds) as pairs, a missing last row read from zero. */
static void bf16_row_pairs(const attn_bf16_kernels *bk, uint32_t *dst, int64_t ldd, const float *src, int64_t lds,
                           int64_t rows, int64_t cols, const float *zero) {
    for (int64_t r2 = 0; 2 * r2 < rows; r2++)
        bk->zip(dst + r2 * ldd, src + 2 * r2 * lds, 2 * r2 + 1 < rows ? src + (2 * r2 + 1) * lds : zero, cols);
}

/* dst (cols × rows, stride ldd, rows rounded up to 16 with zero columns) =
 * the transpose of src (rows × cols, stride lds), pairs moved whole by the
 * f32 kernels' 16 × 16 transpose: it moves 4-byte words bit for bit (loads,
 * shuffles and stores, no arithmetic), and every pair here is two finite
 * bf16 (a slice with a value that is not finite goes to the exact kernel). */
static void transpose_pairs(const attn_ukernels *uk, uint32_t *dst, int64_t ldd, const uint32_t *src, int64_t lds,
                            int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        uk->transpose16((float *)(void *)(dst + r0), ldd, (const float *)(const void *)(src + r0 * lds), lds,
                        (int)(rows - r0 < 16 ? rows - r0 : 16), cols);
}

/* s (rows × cols, stride lds) = a2 (rows × inner2 pairs, stride lda) · bt2
 * (inner2 × cols pairs, stride ldb): qk over the tiles of s (cols a
 * multiple of the set's nr, rows of its mr). */
static void bf16_gemm_t(const attn_bf16_kernels *bk, float *s, int64_t lds, const uint32_t *a2, int64_t lda,
                        const uint32_t *bt2, int64_t ldb, int64_t rows, int64_t inner2, int64_t cols) {
    int64_t nr = (int64_t)bk->vl * bk->nv;
    for (int64_t c0 = 0; c0 < cols; c0 += nr)
        for (int64_t r0 = 0; r0 < rows; r0 += bk->mr) bk->qk(s + r0 * lds + c0, lds, a2 + r0 * lda, lda, bt2 + c0, ldb, inner2);
}

/* c (rows × cols, stride ldc) += a2 (rows × inner2 pairs, stride lda) · b2
 * (inner2 × cols pairs, stride ldb): pv over the tiles of c (cols a
 * multiple of the set's vl, rows of its mr). */
static void bf16_gemm_acc(const attn_bf16_kernels *bk, float *c, int64_t ldc, const uint32_t *a2, int64_t lda,
                          const uint32_t *b2, int64_t ldb, int64_t rows, int64_t inner2, int64_t cols) {
    int64_t nr = (int64_t)bk->vl * bk->nv;
    for (int64_t c0 = 0; c0 < cols; c0 += nr)
        for (int64_t r0 = 0; r0 < rows; r0 += bk->mr) {
            int nvec = (int)((cols - c0) / bk->vl < bk->nv ? (cols - c0) / bk->vl : bk->nv);
            bk->pv(c + r0 * ldc + c0, ldc, a2 + r0 * lda, lda, b2 + c0, ldb, inner2, nvec);
        }
}

/* c (rows × cols, stride ldc) += aᵀ · b in the bf16 mode, a (inner ×
 * rows floats, stride lda) and b (inner × cols, stride ldb), inner even:
 * a's rows zipped in pairs and transposed (pairs moved whole), b's rows
 * zipped in pairs, so that both sum over pairs of a's rows. */
static void bf16_gemm_acc_t(const bwd_job *j, const workspace *w, float *c, int64_t ldc, const float *a, int64_t lda,
                            const float *b, int64_t ldb, int64_t rows, int64_t inner, int64_t cols, uint32_t *b2) {
    int64_t ldt = ldt_of(j);
    bf16_row_pairs(j->bk, w->pr2, ldk_of(j), a, lda, inner, rows, w->zero);
    transpose_pairs(j->uk, w->pt2, ldt, w->pr2, ldk_of(j), inner / 2, rows);
    bf16_row_pairs(j->bk, b2, cols, b, ldb, inner, cols, w->zero);
    bf16_gemm_acc(j->bk, c, ldc, w->pt2, ldt, b2, cols, rows, inner / 2, cols);
}

/* Rows i0..i0+rows-1 of m for the products (rows >= nb: padding, whose P
 * and dS are 0): read where they lie when in_place allows it, they are f32
 * rows of whole vectors (cols == ld) and all of them exist (so they are
 * finite: slice_check saw them), else rows i0..i0+nb-1 packed into buf
 * (stride ld) and zero rows up to rows. *ldr: the rows' stride. */
static const float *block_rows(const attn_ukernels *uk, float *buf, int64_t ld, const attn_mat *m, int64_t i0,
                               int64_t nb, int64_t rows, bool in_place, float *tmp, int64_t *ldr) {
    if (in_place && m->dtype == ATTN_F32 && m->cs == 1 && m->cols == ld && i0 + rows <= m->rows) {
        *ldr = m->rs;
        return (const float *)(const void *)m->base + i0 * m->rs;
    }
    attn_pack_scaled(uk, buf, ld, m, i0, nb, rows, 1.0, tmp);
    *ldr = ld;
    return buf;
}

/* x (rows × cols, stride ld) times scale, each product in double and
 * rounded once (as attn_pack_scaled scales). */
static void scale_rows(float *x, int64_t ld, int64_t rows, int64_t cols, double scale) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * ld + c] = attn_f32_of((double)x[r * ld + c] * scale);
}

/* The rows the products read for a block of nb query rows: nb rounded up
 * to the kernels' mr (pv, qk) and to 16 (pvt). */
static int64_t block_rows_read(const bwd_job *j, int64_t nb) {
    int64_t nbm = attn_round_up(nb, j->mr), nb16 = attn_round_up(nb, 16);
    return nbm > nb16 ? nbm : nb16;
}

/* The scores of query rows i0..i0+nb-1 against the key block j0..j0+nc-1
 * that pack_keys packed (nc_pad columns), into w->s (stride ldk): S = Q
 * (scale K)ᵀ, then the score epilogue, the cap's derivative into w->dc when
 * `dcap`. Returns the queries' rows (stride *ldq), which the products use
 * again. The one place the scores are made, so that stats_item and
 * block_step see the same floats. */
static const float *block_scores(const bwd_job *j, const workspace *w, const attn_grad_problem *g, int64_t i0,
                                 int64_t nb, int64_t j0, int64_t nc, int64_t nc_pad, bool dcap, int64_t *ldq) {
    const attn_ukernels *uk = j->uk;
    int64_t ldk = ldk_of(j);
    /* The block's queries (turned by RoPE: packed). The scale is in the
     * packed keys: S = Q (scale K)ᵀ, and dK is scaled when stored. The keys
     * are packed anyway, once a block, and dQ += dS (scale K) reuses them;
     * scaled queries would need a copy of every query block, which f32
     * rows otherwise skip (block_rows reads them where they lie). */
    const float *q = block_rows(uk, w->q, j->Ep, &g->f.q, i0, nb, block_rows_read(j, nb), !g->f.rope, w->tmp, ldq);
    if (g->f.rope) attn_rope_apply_f32(w->q, j->Ep, 1, nb, g->f.rope, g->f.rope_q0 + i0, 1);
    int64_t nbm = attn_round_up(nb, j->mr);
    if (j->bk) { /* S = Q (scale K)ᵀ on bf16 pairs along E */
        bf16_rows(j->bk, w->q2, e2_of(j->E), q, *ldq, nbm, j->E);
        bf16_gemm_t(j->bk, w->s, ldk, w->q2, e2_of(j->E), w->kt2, ldk, nbm, e2_of(j->E), nc_pad);
    } else {
        gemm_t(uk, w->s, ldk, q, *ldq, w->kt, ldk, nbm, j->E, nc_pad); /* S = Q (scale K)ᵀ */
    }
    attn_score_block sb = {w->s, false, ldk}, cb = {w->dc, false, ldk};
    /* A float mask of NaN or +inf never gets here: slice_check sent the slice
     * to the exact kernel. */
    attn_score_epilogue(uk, sb, &g->f, i0, nb, j0, nc, nc_pad, true, dcap ? &cb : NULL, NULL);
    return q;
}

/* One block of query rows i0..i0+nb-1 against the packed key block j0..j0+nc-1
 * (nc_pad columns): P, dP and dS, then the three products. */
static void block_step(const bwd_job *j, const workspace *w, const attn_grad_problem *g, float *dq, int64_t i0,
                       int64_t nb, int64_t j0, int64_t nc, int64_t nc_pad) {
    const attn_ukernels *uk = j->uk;
    int64_t ldk = ldk_of(j), kr = kr_of(j), nb16 = attn_round_up(nb, 16);
    int64_t nbm = attn_round_up(nb, j->mr), rows = block_rows_read(j, nb);
    /* The dQ rows this step adds to live in the item's partial, which is
     * larger than L2: start fetching them now, so that they have arrived by
     * the time dQ += dS K needs them, after the other four products. */
    for (int64_t x = 0; x < nb * j->Ep; x += 16) __builtin_prefetch(dq + i0 * j->Ep + x, 1, 3);
    int64_t ldq, ldo;
    const float *q = block_scores(j, w, g, i0, nb, j0, nc, nc_pad, j->capped, &ldq);
    const float *dout = block_rows(uk, w->dout, j->Evp, &g->dout, i0, nb, rows, true, w->tmp, &ldo);
    if (j->bk) { /* dP = dout Vᵀ on bf16 pairs along Ev */
        bf16_rows(j->bk, w->do2, e2_of(j->Ev), dout, ldo, nbm, j->Ev);
        bf16_gemm_t(j->bk, w->dp, ldk, w->do2, e2_of(j->Ev), w->vt2, ldk, nbm, e2_of(j->Ev), nc_pad);
    } else {
        gemm_t(uk, w->dp, ldk, dout, ldo, w->vt, ldk, nbm, j->Ev, nc_pad); /* dP = dout Vᵀ */
    }
    /* Rows nb.. up to what the products read (nb16 for pvt, nbm for pv) are
     * zero, so that rows past a window's last row add nothing to dQ. */
    for (int64_t r = 0; r < rows; r++) {
        float *p = w->s + r * ldk, *ds = w->dp + r * ldk;
        memset(p + nc_pad, 0, sizeof(float) * (size_t)(kr - nc_pad)); /* pvt reads kr columns */
        memset(ds + nc_pad, 0, sizeof(float) * (size_t)(kr - nc_pad));
        if (r >= nb || w->lse[i0 + r] == -INFINITY) { /* a padding row, or no key takes part */
            memset(p, 0, sizeof(float) * (size_t)nc_pad);
            memset(ds, 0, sizeof(float) * (size_t)nc_pad);
            continue;
        }
        attn_score_block prow = {p, false, 0}, dsrow = {ds, false, 0};
        attn_dropout_row(dsrow, 0, &g->f, i0 + r, j0, nc); /* dP = Z ∘ (dout Vᵀ), Z 0 or 1/(1 - p) */
        float shift = w->shift[i0 + r]; /* a recomputed row's maximum m, else 0 */
        for (int64_t c = 0; shift != 0 && c < nc_pad; c++) p[c] -= shift;
        uk->softmax_grad(p, ds, nc_pad, w->lse[i0 + r], w->D[i0 + r]); /* P = exp(S - lse), dS = P ∘ (dP - D) */
        for (int64_t c = 0; j->capped && c < nc_pad; c++) ds[c] *= w->dc[r * ldk + c]; /* ∘ C */
        attn_dropout_row(prow, 0, &g->f, i0 + r, j0, nc); /* P, dropped, for dV */
    }
    if (j->bk) { /* the same three products on bf16 pairs: of query rows, then of keys */
        bf16_gemm_acc_t(j, w, w->dv, j->Evp, w->s, ldk, dout, ldo, kr, nb16, j->Evp, w->dor2);
        bf16_gemm_acc_t(j, w, w->dk, j->Ep, w->dp, ldk, q, ldq, kr, nb16, j->Ep, w->qr2);
        bf16_rows(j->bk, w->ds2, ldk / 2, w->dp, ldk, nbm, nc_pad);
        bf16_gemm_acc(j->bk, dq + i0 * j->Ep, j->Ep, w->ds2, ldk / 2, w->k2, j->Ep, nbm, nc_pad / 2, j->Ep);
        return;
    }
    gemm_acc_t(uk, w->dv, j->Evp, w->s, ldk, dout, ldo, kr, nb16, j->Evp); /* dV += Pᵀ dout */
    gemm_acc_t(uk, w->dk, j->Ep, w->dp, ldk, q, ldq, kr, nb16, j->Ep);      /* dK += dSᵀ Q (times the scale when stored) */
    gemm_acc(uk, dq + i0 * j->Ep, j->Ep, w->dp, ldk, w->k, j->Ep, nbm, nc_pad, j->Ep); /* dQ += dS (scale K) */
}

/* Whether the forward's lse of a row describes its softmax well enough for
 * P = exp(S - lse) (see the file's comment); -inf (no key) and the exact
 * kernel's NaN and +inf count as trusted: they need no statistics. */
static bool lse_trusted(const attn_problem *p, double lse) {
    return p->softmax_from_lse || !(fabs(lse) > LSE_TRUSTED && fabs(lse) < INFINITY);
}

/* The slice's rows, once per item: D = rowsum(dout ∘ out), and lse and
 * shift, P = exp((S - shift) - lse): the forward's lse and 0, or for a row
 * whose lse is not trusted log l and m from stats_item (-inf for the
 * padding rows up to Lp, and for rows no key takes part in). */
static void row_statistics(const bwd_job *j, const workspace *w, const attn_grad_problem *g, int64_t slice) {
    const attn_problem *p = &g->f;
    bool stats = atomic_load(&j->route[slice]) == ROUTE_STATS;
    bool out_rows = p->out.dtype == ATTN_F32 && p->out.cs == 1; /* out's rows read in place */
    for (int64_t i = 0; i < j->Lp; i++) {
        double D = 0;
        const float *dout = i < j->L ? attn_row_f32(&g->dout, i, w->tmp) : NULL;
        const float *out = dout && out_rows ? attn_row_f32(&p->out, i, NULL) : NULL;
        for (int64_t e = 0; out && e < j->Ev; e++) D += (double)dout[e] * out[e];
        for (int64_t e = 0; dout && !out && e < j->Ev; e++) D += (double)dout[e] * attn_mat_get(&p->out, i, e);
        w->D[i] = attn_f32_of(D); /* never subnormal: D multiplies every P of the row */
        double lse = i < j->L ? attn_mat_get(&p->lse, i, 0) : -INFINITY;
        const double *st = stats && !lse_trusted(p, lse) ? j->stats + (slice * j->L + i) * 2 : NULL;
        w->lse[i] = (float)(st ? st[1] : lse);
        w->shift[i] = st && st[1] != -INFINITY ? (float)st[0] : 0.0f;
    }
}

/* Key block j0..j0+nc-1 packed for block_scores: kt (E × ldk, nc_pad
 * columns) transposed, turned by RoPE and times the scale; with `grads`
 * also vt (Ev × ldk) transposed and k (kr × Ep) times the scale and turned,
 * for dP = dout Vᵀ and dQ = dS (scale K). dk is turned back once at the
 * end (backward.c). */
static void pack_keys(const bwd_job *j, const workspace *w, const attn_grad_problem *g, int64_t j0, int64_t nc,
                      int64_t nc_pad, bool grads) {
    int64_t ldk = ldk_of(j);
    /* w->tmp holds a row, not ATTN_PACK_GROUPED_TMP floats: backward's keys
     * are tensors, never a cache's keys quantized per channel (grouped). */
    attn_pack_transposed(j->uk, w->kt, ldk, nc_pad, &g->f.k, j0, nc, w->tmp);
    if (g->f.rope) attn_rope_apply_f32(w->kt, 1, ldk, nc, g->f.rope, g->f.rope_k0 + j0, 1);
    scale_rows(w->kt, ldk, j->E, nc, g->f.scale); /* for S = Q (scale K)ᵀ */
    if (j->bk) bf16_row_pairs(j->bk, w->kt2, ldk, w->kt, ldk, j->E, nc_pad, w->zero); /* pairs along E */
    if (!grads) return;
    attn_pack_transposed(j->uk, w->vt, ldk, nc_pad, &g->f.v, j0, nc, w->tmp);
    attn_pack_rows_scaled(j->uk, w->k, j->Ep, &g->f.k, j0, nc, kr_of(j), g->f.scale, w->tmp);
    if (g->f.rope) attn_rope_apply_f32(w->k, j->Ep, 1, nc, g->f.rope, g->f.rope_k0 + j0, 1);
    if (j->bk) { /* vt as pairs along Ev, k as pairs of keys */
        bf16_row_pairs(j->bk, w->vt2, ldk, w->vt, ldk, j->Ev, nc_pad, w->zero);
        bf16_row_pairs(j->bk, w->k2, j->Ep, w->k, j->Ep, nc_pad, j->Ep, w->zero);
    }
}

/* The key blocks query rows i0..i0+nb-1 reach: [*k0, *k1), whole blocks of
 * bc from key 0 (so that their scores are the items' own), from the first
 * key of row i0's window to the causal limit of row i0+nb-1. */
static void keys_reached(const bwd_job *j, const attn_problem *p, int64_t i0, int64_t nb, int64_t *k0,
                         int64_t *k1) {
    int64_t lo = attn_first_key(p, i0), hi = attn_keys_seen(p, i0 + nb - 1, 0, j->S);
    *k0 = lo < j->S ? lo / j->bc * j->bc : j->S;
    *k1 = hi;
}

/* Query rows i0..i0+br-1 of a ROUTE_STATS slice, when one of them has an lse
 * that is not trusted: each row's maximum m and log l, l = sum of exp(s -
 * m), over every key it sees (from a sink's (m, l) when there is one), as
 * the forward's online softmax sums them but from block_scores' scores. */
static void stats_item(void *ctx, int64_t item, int worker) {
    bwd_job *j = ctx;
    int64_t slice = item / j->n_rblocks, i0 = item % j->n_rblocks * j->br;
    if (atomic_load(&j->route[slice]) != ROUTE_STATS) return;
    attn_grad_problem g;
    attn_grad_slice(j->gs, slice, &g);
    int64_t nb = j->L - i0 < j->br ? j->L - i0 : j->br, ldq, k0, k1;
    bool needed = false;
    for (int64_t r = 0; r < nb; r++) needed |= !lse_trusted(&g.f, attn_mat_get(&g.f.lse, i0 + r, 0));
    if (!needed) return;
    workspace w = workspace_of(j, worker);
    if (j->bk) memset(w.zero, 0, sizeof(float) * (size_t)(ldk_of(j) + j->Ep + j->Evp));
    double *st = j->stats + (slice * j->L + i0) * 2; /* (m, l) per row, then (m, log l) */
    for (int64_t r = 0; r < nb; r++) attn_softmax_start(&g.f, &st[2 * r], &st[2 * r + 1]), st[2 * r] = (float)st[2 * r];
    keys_reached(j, &g.f, i0, nb, &k0, &k1);
    for (int64_t j0 = k0; j0 < k1; j0 += j->bc) {
        int64_t nc = j->S - j0 < j->bc ? j->S - j0 : j->bc, nc_pad = attn_round_up(nc, j->nr);
        pack_keys(j, &w, &g, j0, nc, nc_pad, false);
        block_scores(j, &w, &g, i0, nb, j0, nc, nc_pad, false, &ldq);
        for (int64_t r = 0; r < nb; r++) {
            float *s = w.s + r * ldk_of(j), mx = j->uk->max(s, nc_pad);
            double m = st[2 * r], m_new = mx > m ? mx : m;
            if (m_new == -INFINITY) continue; /* no key yet */
            /* l's rescaling in double: e^-100 and below count as 0 (l >= 1
             * after it), so that no intermediate is subnormal. */
            if (m_new != m) st[2 * r + 1] *= m - m_new < -100 ? 0.0 : exp(m - m_new);
            st[2 * r] = m_new;
            st[2 * r + 1] += j->uk->exp_sum(s, nc_pad, (float)m_new);
        }
    }
    for (int64_t r = 0; r < nb; r++) st[2 * r + 1] = st[2 * r + 1] > 0 ? log(st[2 * r + 1]) : -INFINITY;
}

/* The slices of a GQA group that share gradient t's rows (t = 1: dk, 2:
 * dv): consecutive, as slice_index numbers heads fastest. */
static int64_t group_of(const bwd_job *j, int t) {
    const attn_canon *kv = t == 1 ? &j->gs->f.ck : &j->gs->f.cv;
    return j->gs->f.co.shape[2] / kv->shape[2];
}

/* A group's sums (rows × cols, stride ld) rounded once into rows r0.. of
 * the caller's output, as attn_tensor_convert rounds. */
static void round_group_rows(const attn_mat *out, const double *sum, int64_t ld, int64_t r0, int64_t rows,
                             int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < cols; e++) {
            double x = sum[r * ld + e];
            char *at = out->base + ((r0 + r) * out->rs + e * out->cs) * (int64_t)attn_dtype_size(out->dtype);
            if (out->dtype == ATTN_F32) ((float *)(void *)at)[0] = (float)x;
            else ((double *)(void *)at)[0] = x;
        }
}

/* The slices j's items of a whole group take (grouped_slices, 0 without). */
static int64_t grouped_of(const bwd_job *j) { return j->heads > 1 ? j->grouped_slices : 0; }

/* A key block's dK and dV rows j0..j0+nc-1: into the caller's output when it
 * is written directly; in an item of a whole group (grouped_of), added in
 * f64 into the block's group sums, zeroed at the group's first slice and
 * rounded once into the output after its last (the additions and the
 * rounding reduce() gives a slice's partials, in the same order); else
 * into the slice's partials. */
static void store_key_block(const bwd_job *j, const workspace *w, const attn_grad_problem *g, int64_t slice,
                            int64_t j0, int64_t nc) {
    const attn_mat *out[2] = {&g->dk, &g->dv};
    const float *src[2] = {w->dk, w->dv};
    float *part[2] = {j->part.dk, j->part.dv};
    int64_t cols[2] = {j->E, j->Ev}, ld[2] = {j->Ep, j->Evp};
    double *sum[2] = {w->sums, w->sums + kr_of(j) * j->Ep};
    for (int t = 0; t < 2; t++) {
        if (j->gs->direct[1 + t]) {
            for (int64_t r = 0; r < nc; r++)
                for (int64_t e = 0; e < cols[t]; e++) attn_mat_set(out[t], j0 + r, e, src[t][r * ld[t] + e]);
        } else if (slice < grouped_of(j) && j->gs->grouped[1 + t]) {
            int64_t G = group_of(j, 1 + t);
            if (slice % G == 0) memset(sum[t], 0, sizeof(double) * (size_t)(nc * ld[t]));
            for (int64_t r = 0; r < nc; r++)
                for (int64_t e = 0; e < cols[t]; e++) sum[t][r * ld[t] + e] += (double)src[t][r * ld[t] + e];
            if (slice % G == G - 1) round_group_rows(out[t], sum[t], ld[t], j0, nc, cols[t]);
        } else if (part[t]) {
            memcpy(part[t] + ((slice - grouped_of(j)) * j->S + j0) * ld[t], src[t], sizeof(float) * (size_t)(nc * ld[t]));
        }
    }
}

/* One item: chunk c of the keys of j->heads consecutive slices (the
 * grouped_of(j) first slices) or of one slice (the others), key blocks
 * outer and the slices inner (so that a group's sums are of one block), each
 * slice's dQ in its own rows. */
static void bwd_item(void *ctx, int64_t item, int worker) {
    bwd_job *j = ctx;
    /* single: the item's index among the items of one slice, which follow
     * those of whole groups (negative: an item of a whole group) */
    int64_t group_items = grouped_of(j) / j->heads * j->n_chunks, single = item - group_items;
    int64_t nh = single < 0 ? j->heads : 1;
    int64_t s0 = single < 0 ? item / j->n_chunks * j->heads : grouped_of(j) + single / j->n_chunks; /* its first slice */
    int64_t c = (single < 0 ? item : single) % j->n_chunks; /* its chunk */
    if (atomic_load(&j->route[s0]) == ROUTE_EXACT) return; /* items of a group see no exact slice */
    attn_grad_problem g;
    workspace w = workspace_of(j, worker);
    if (j->bk) memset(w.zero, 0, sizeof(float) * (size_t)(ldk_of(j) + j->Ep + j->Evp));
    for (int64_t h = 0; h < nh; h++) {
        workspace wh = head_rows(j, &w, s0 + h, c, h);
        attn_grad_slice(j->gs, s0 + h, &g);
        memset(wh.dq, 0, sizeof(float) * (size_t)(j->Lp * j->Ep));
        row_statistics(j, &wh, &g, s0 + h);
    }
    int64_t k0 = c * j->chunk, k1 = k0 + j->chunk < j->S ? k0 + j->chunk : j->S;
    int64_t kr = kr_of(j);
    for (int64_t j0 = k0; j0 < k1; j0 += j->bc) {
        int64_t nc = k1 - j0 < j->bc ? k1 - j0 : j->bc, nc_pad = attn_round_up(nc, j->nr);
        for (int64_t h = 0; h < nh; h++) {
            workspace wh = head_rows(j, &w, s0 + h, c, h);
            attn_grad_slice(j->gs, s0 + h, &g);
            /* The first query row that sees key j0 (none: the block is skipped). */
            int64_t first = 0;
            while (first < j->L && attn_keys_seen(&g.f, first, j0, nc) == 0) first++;
            memset(w.dk, 0, sizeof(float) * (size_t)(kr * j->Ep));
            memset(w.dv, 0, sizeof(float) * (size_t)(kr * j->Evp));
            if (first == j->L) { /* no query sees these keys: their gradients are 0 */
                store_key_block(j, &wh, &g, s0 + h, j0, nc);
                continue;
            }
            pack_keys(j, &wh, &g, j0, nc, nc_pad, true);
            /* ... and past the last whose sliding window still reaches them. */
            int64_t iend = j->L;
            while (iend > first && attn_first_key(&g.f, iend - 1) >= j0 + nc) iend--;
            for (int64_t i0 = first / j->mr * j->mr; i0 < iend; i0 += j->br) {
                int64_t nb = iend - i0 < j->br ? iend - i0 : j->br;
                block_step(j, &wh, &g, wh.dq, i0, nb, j0, nc, nc_pad);
            }
            scale_rows(w.dk, j->Ep, nc, j->E, g.f.scale); /* dK = scale · dSᵀ Q */
            store_key_block(j, &wh, &g, s0 + h, j0, nc);
        }
    }
    for (int64_t h = 0; j->own_dq && h < nh; h++) {
        workspace wh = head_rows(j, &w, s0 + h, c, h);
        attn_grad_slice(j->gs, s0 + h, &g);
        for (int64_t i = 0; g.dq.base && i < j->L; i++)
            for (int64_t e = 0; e < j->E; e++) attn_mat_set(&g.dq, i, e, wh.dq[i * j->Ep + e]);
    }
}

/* Per slice, once: its route (see the file's comment). */
static void slice_check(void *ctx, int64_t slice, int worker) {
    bwd_job *j = ctx;
    attn_grad_problem g;
    attn_grad_slice(j->gs, slice, &g);
    float *tmp = workspace_of(j, worker).tmp;
    const attn_mat *m[4] = {&g.f.q, NULL, NULL, &g.dout};
    const attn_rows *kv[4] = {NULL, &g.f.k, &g.f.v, NULL};
    float big[5] = {0, 0, 0, 0, 0}; /* max |x| of q, k, v, dout, out (-1: not finite, or out's lse or the mask is not) */
    bool stats = false; /* some row's lse is not trusted */
    for (int t = 0; t < 4; t++) {
        int64_t rows = m[t] ? m[t]->rows : kv[t]->rows, cols = m[t] ? m[t]->cols : kv[t]->cols;
        for (int64_t r = 0; r < rows && big[t] >= 0; r++) {
            const float *row = m[t] ? attn_row_f32(m[t], r, tmp) : attn_rows_row_f32(kv[t], r, tmp);
            big[t] = attn_absmax_join(big[t], j->uk->absmax(row, cols));
        }
    }
    for (int64_t i = 0; i < j->L && big[4] >= 0; i++) {
        big[4] = attn_absmax_join(big[4], j->uk->absmax(attn_row_f32(&g.f.out, i, tmp), j->Ev));
        double lse = attn_mat_get(&g.f.lse, i, 0);
        if (lse != lse || lse == INFINITY) big[4] = -1;
        stats |= !lse_trusted(&g.f, lse);
    }
    /* A float mask holding NaN or +inf: known now, before anything is
     * written, so that the exact kernel's scratch is taken up front. */
    const attn_mat *mk = &g.f.mask;
    for (int64_t i = 0; mk->base && mk->dtype != ATTN_BOOL && i < mk->rows && big[4] >= 0; i++)
        for (int64_t c = 0; c < mk->cols; c++) {
            double x = attn_mat_get(mk, i, c);
            if (x != x || x == INFINITY) big[4] = -1;
        }
    double turn = g.f.rope ? 1.5 : 1; /* RoPE's pairs reach sqrt(2) times the largest element */
    /* The products take q as it is and the keys times the scale. */
    double qmax = big[0] * turn, kmax = big[1] * turn * fabs(g.f.scale);
    /* |dP| and |D| <= G; |dS| <= 2G; dK (before and after its scaling), dQ
     * and dV sum L or S such terms. The bound on them is held to 2^100, the
     * margin under f32's 2^128 that attn_f32_scores_fit keeps for scores. */
    double G = (double)j->Ev * big[3] * (big[2] > big[4] ? big[2] : big[4]);
    double grads = 2 * G * (double)(j->L > j->S ? j->L : j->S) * (qmax * (1 + fabs(g.f.scale)) + kmax + 1) +
                   (double)j->L * big[3];
    bool ok = big[2] >= 0 && big[3] >= 0 && big[4] >= 0 && attn_f32_scores_fit(qmax, kmax, j->E) &&
              qmax * kmax * (double)j->E <= SCORES_LINEAR && attn_f32_bias_fits(&g.f, j->L, j->S) &&
              grads <= 0x1p100;
    atomic_store(&j->route[slice], !ok ? ROUTE_EXACT : stats ? ROUTE_STATS : ROUTE_FUSED);
}

/* Add the items' partials into the f64 gradients, slice by slice and chunk by
 * chunk in order; a slice the f32 kernel could not take goes to the exact
 * kernel here, in the same order. A grouped dk or dv (attn_grad_slices) is
 * summed in `sums` (S × Ep doubles for dK, then S × Evp for dV: one group's
 * rows), zeroed at the group's first slice and rounded once into the
 * caller's output after its last: the very additions an accumulator shaped
 * like k would get, and the rounding attn_tensor_convert would give it,
 * without that accumulator's memory (new pages to fault in on every call:
 * 22 MB for attn bench --varlen's backward) or its pass to convert it. */
static void reduce(const bwd_job *j, double *exact_work, double *sums, attn_run_info *info) {
    const bool *direct = j->gs->direct;
    const int64_t ld[3] = {j->Ep, j->Ep, j->Evp}, cols[3] = {j->E, j->E, j->Ev};
    for (int64_t s = 0; s < j->gs->f.count; s++) {
        /* Items of a whole group (the first grouped_of(j) slices) have summed
         * and written its dk and dv; the other slices left partials. */
        bool parts = s >= grouped_of(j);
        const bool grouped[3] = {false, parts && j->gs->grouped[1], parts && j->gs->grouped[2]};
        attn_grad_problem g;
        attn_grad_slice(j->gs, s, &g);
        attn_mat *view[3] = {&g.dq, &g.dk, &g.dv}, out[3];
        double *sum[3] = {NULL, sums, sums ? sums + j->S * j->Ep : NULL}; /* no sums: no group */
        for (int t = 1; t < 3; t++) { /* a grouped gradient: the slice adds into its group's sums */
            if (!grouped[t]) continue;
            out[t] = *view[t];
            *view[t] = (attn_mat){(char *)sum[t], ATTN_F64, j->S, cols[t], ld[t], 1};
            if (s % group_of(j, t) == 0) memset(sum[t], 0, sizeof(double) * (size_t)(j->S * ld[t]));
        }
        if (atomic_load(&j->route[s]) == ROUTE_EXACT) {
            info->fallbacks++;
            for (int t = 0; t < 3; t++) /* the exact kernel adds: start the written views from 0 */
                for (int64_t r = 0; direct[t] && r < view[t]->rows; r++)
                    for (int64_t e = 0; e < view[t]->cols; e++) attn_mat_set(view[t], r, e, 0.0);
            attn_backward_kernel(&g, exact_work);
        } else {
            for (int64_t i = 0; g.dq.base && !j->own_dq && i < j->L; i++)
                for (int64_t e = 0; e < j->E; e++) {
                    double x = direct[0] ? 0.0 : attn_mat_get(&g.dq, i, e);
                    for (int64_t c = 0; c < j->n_chunks; c++)
                        x += j->part.dq[((s * j->n_chunks + c) * j->Lp + i) * j->Ep + e];
                    attn_mat_set(&g.dq, i, e, x);
                }
            int64_t p = s - grouped_of(j); /* the slice's partials */
            for (int64_t r = 0; parts && r < j->S; r++) {
                for (int64_t e = 0; j->part.dk && e < j->E; e++)
                    attn_mat_set(&g.dk, r, e, attn_mat_get(&g.dk, r, e) + j->part.dk[(p * j->S + r) * j->Ep + e]);
                for (int64_t e = 0; j->part.dv && e < j->Ev; e++)
                    attn_mat_set(&g.dv, r, e, attn_mat_get(&g.dv, r, e) + j->part.dv[(p * j->S + r) * j->Evp + e]);
            }
        }
        for (int t = 1; t < 3; t++) /* the group's last slice: its sums rounded once into the output */
            if (grouped[t] && s % group_of(j, t) == group_of(j, t) - 1) round_group_rows(&out[t], sum[t], ld[t], 0, j->S, cols[t]);
    }
}

/* The slices an item of j can take (bwd_item): a GQA group's query heads
 * (the least multiple of dk's and dv's groups) when every dK and dV asked
 * for is written directly or summed group by group, so that an item sums
 * its group's key blocks itself and no slice keeps partials of S rows
 * (24.6 MB for the longest sequence of attn bench --varlen's backward, new
 * pages on every call); else 1. */
static int64_t group_heads(const bwd_job *j) {
    const attn_grad_slices *gs = j->gs;
    const attn_tensor *want[3] = {NULL, gs->dk, gs->dv};
    int64_t heads = 1;
    for (int t = 1; t < 3; t++) {
        if (want[t] && !gs->direct[t] && !gs->grouped[t]) return 1; /* partials summed in reduce() */
        if (!gs->grouped[t]) continue;
        int64_t G = group_of(j, t), a = heads, b = G;
        while (b) { /* heads = lcm(heads, G); both divide Hq */
            int64_t r = a % b;
            a = b, b = r;
        }
        heads = heads / a * G;
    }
    return heads;
}

/* Shapes, blocks and chunks of one call; false when a size overflows. */
static bool plan_job(bwd_job *j, const attn_grad_slices *gs) {
    j->uk = attn_ukernels_active();
    j->gs = gs;
    j->L = gs->f.cq.shape[3], j->E = gs->f.cq.shape[4], j->S = gs->f.ck.shape[3], j->Ev = gs->f.cv.shape[4];
    if (j->E > (1 << 20) || j->Ev > (1 << 20) || j->L > ((int64_t)1 << 40) || j->S > ((int64_t)1 << 40))
        return false;
    /* The bf16 mode: the set's tile and vectors (its pv writes whole
     * vectors of 16), the f32 set's softmax. */
    j->bk = gs->bf16 ? attn_bf16_active() : NULL;
    j->mr = j->bk ? j->bk->mr : j->uk->mr;
    j->nr = j->bk ? (int64_t)j->bk->vl * j->bk->nv : (int64_t)j->uk->vl * j->uk->nv;
    int64_t vl = j->bk && j->bk->vl > j->uk->vl ? j->bk->vl : j->uk->vl;
    j->Ep = attn_round_up(j->E, vl), j->Evp = attn_round_up(j->Ev, vl);
    j->capped = gs->f.base.softcap > 0;
    j->Lp = attn_round_up(j->L + 16, 16);
    int64_t nr = j->nr;
    int64_t mr16 = j->mr; /* the least multiple of mr and 16 */
    while (mr16 % 16) mr16 += j->mr;
    j->br = attn_round_up(attn_blocks_active()->bwd_br, mr16);
    j->bc = attn_round_up(attn_blocks_active()->bwd_bc, nr);
    /* ITEMS_WANTED items over the slices, at most 2^23 floats (32 MiB) of
     * dQ partials; from the shapes alone, so that results never depend on the
     * thread count. One chunk a slice whatever the partials then take (past
     * 32 MiB only where even that is more and dQ has partials: not own_dq). */
    int64_t count = gs->f.count, want = (ITEMS_WANTED + count - 1) / count,
            most = ((int64_t)1 << 23) / (count * j->Lp * j->Ep);
    int64_t blocks = (j->S + j->bc - 1) / j->bc;
    j->n_chunks = want < most ? want : most;
    j->n_chunks = j->n_chunks < 1 ? 1 : j->n_chunks > blocks ? blocks : j->n_chunks;
    int64_t per = (blocks + j->n_chunks - 1) / j->n_chunks;
    j->chunk = per * j->bc;
    j->n_chunks = (j->S + j->chunk - 1) / j->chunk;
    j->n_rblocks = (j->L + j->br - 1) / j->br;
    j->own_dq = j->n_chunks == 1 && (!gs->dq || gs->direct[0]);
    /* The chunks stay those of items of one slice: a slice's sums are the
     * same whichever item computes them (bitwise, for any thread count). */
    j->heads = group_heads(j);
    j->grouped_slices = j->heads > 1 ? gs->f.count : 0;
    return true;
}

/* Several calls' jobs run as one: each call keeps the job it has alone
 * (plan_job: its blocks, chunks and partials), and each pass hands out the
 * items of every call together. jobs[] is in the order items are handed
 * out, the calls of the costliest items first; first[k] is the first
 * global index of job k's items in the pass under way. */
typedef struct bwd_batch {
    bwd_job *jobs;
    int64_t n;
    int64_t *first; /* [n + 1] */
    void (*fn)(void *job, int64_t item, int worker);
} bwd_batch;

static void batch_item(void *ctx, int64_t item, int worker) {
    const bwd_batch *b = ctx;
    int64_t lo = 0, hi = b->n - 1; /* the job whose items hold `item`: the last k with first[k] <= item */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (b->first[mid] <= item) lo = mid;
        else hi = mid - 1;
    }
    b->fn(&b->jobs[lo], item - b->first[lo], worker);
}

/* Run one pass over every job: `count(job)` items each. */
static int batch_pass(bwd_batch *b, int workers, int64_t (*count)(const bwd_job *),
                      void (*fn)(void *, int64_t, int)) {
    b->first[0] = 0;
    for (int64_t k = 0; k < b->n; k++) b->first[k + 1] = b->first[k] + count(&b->jobs[k]);
    b->fn = fn;
    if (b->first[b->n] == 0) return 1;
    return attn_parallel_for(workers, b->first[b->n], batch_item, b);
}

static int64_t slices_of(const bwd_job *j) { return j->gs->f.count; }
static int64_t stat_items_of(const bwd_job *j) { return j->stats ? j->gs->f.count * j->n_rblocks : 0; }
static int64_t items_of(const bwd_job *j) {
    return (grouped_of(j) / j->heads + j->gs->f.count - grouped_of(j)) * j->n_chunks;
}
/* What an item of j costs, about: its query rows times the keys of a chunk, times its slices. */
static double item_cost(const bwd_job *j) {
    return (double)j->L * (double)j->chunk * (double)(j->E + j->Ev) * (double)j->heads;
}

/* The floats of j's partial sums: dQ per item (none when own_dq), dK and
 * dV per slice for the gradients slices share (store_key_block), but for
 * the slices of items of a whole group. */
static void partial_floats(const bwd_job *j, int64_t floats[3]) {
    const attn_grad_slices *gs = j->gs;
    int64_t count = gs->f.count, ones = count - grouped_of(j);
    floats[0] = j->own_dq ? 0 : count * j->n_chunks * j->Lp * j->Ep;
    floats[1] = gs->dk && !gs->direct[1] ? ones * j->S * j->Ep : 0;
    floats[2] = gs->dv && !gs->direct[2] ? ones * j->S * j->Evp : 0;
}

/* The bytes of j's partial sums, each on a 64-byte boundary; false when
 * the size overflows (partial_floats' products are checked by the caller). */
static bool partial_bytes(const bwd_job *j, int64_t *bytes) {
    int64_t floats[3], b;
    *bytes = 0;
    partial_floats(j, floats);
    for (int t = 0; t < 3; t++)
        if (!attn_mul_i64(floats[t], (int64_t)sizeof(float), &b) || !attn_add_i64(b, 63, &b) ||
            !attn_add_i64(*bytes, b / 64 * 64, bytes))
            return false;
    return true;
}

/* The doubles of reduce()'s sums of one group's dk and dv rows, which items
 * of one slice need for a grouped dk or dv. */
static int64_t reduce_sums(const bwd_job *j) {
    return grouped_of(j) < j->gs->f.count && (j->gs->grouped[1] || j->gs->grouped[2]) ? j->S * (j->Ep + j->Evp) : 0;
}

/* The calls in the order their items are handed out: those of the
 * costliest items first, so that no thread is left alone with a long call
 * at the end (insertion sort, stable: the order depends on the shapes and
 * items, and results on neither: each call's items and sums are its own). */
static void sort_jobs(bwd_job *jobs, int64_t n) {
    for (int64_t c = 1; c < n; c++)
        for (int64_t d = c; d > 0 && item_cost(&jobs[d]) > item_cost(&jobs[d - 1]); d--) {
            bwd_job t = jobs[d];
            jobs[d] = jobs[d - 1], jobs[d - 1] = t;
        }
}

/* The earliest free thread takes an item of cost t: its free time, the
 * root of the binary min-heap free_at[0 .. w), moves t later and sifts
 * down. Returns that thread's new free time. */
static double heap_add_to_min(double *free_at, int w, double t) {
    double x = free_at[0] + t;
    int i = 0;
    for (int c = 1; c < w; i = c, c = 2 * c + 1) {
        if (c + 1 < w && free_at[c + 1] < free_at[c]) c++;
        if (free_at[c] >= x) break;
        free_at[i] = free_at[c];
    }
    free_at[i] = x;
    return x;
}

/* How long a pass over the jobs' items takes on `workers` threads, in
 * item_cost's units, about: attn_parallel_for hands the items out in order
 * (the jobs' order, a job's group items before its items of one slice) to
 * whichever thread comes free first. The threads' free times are a heap:
 * O(items · log workers) a pass. Which of two equally free threads takes an
 * item does not change the times that follow (the same values, held by
 * other threads), so the result is the linear scan's, exactly. */
static double pass_time(const bwd_job *jobs, int64_t n, int workers) {
    enum { MOST = 256 }; /* the thread pool's most (threads.c) */
    double free_at[MOST] = {0}, end = 0;
    int w = workers < 1 ? 1 : workers > MOST ? MOST : workers;
    for (int64_t c = 0; c < n; c++) {
        const bwd_job *j = &jobs[c];
        int64_t groups = grouped_of(j) / j->heads * j->n_chunks, ones = items_of(j) - groups;
        double cost[2] = {item_cost(j), item_cost(j) / (double)j->heads};
        for (int k = 0; k < 2; k++)
            for (int64_t i = 0; i < (k ? ones : groups); i++) {
                double t = heap_add_to_min(free_at, w, cost[k]);
                end = t > end ? t : end;
            }
    }
    return end;
}

/* The scratch a pass of these jobs takes, about: a workspace per worker,
 * the largest call's partials (a wave holds them) and reduce's sums; flat:
 * were every call's items of one slice. */
static double scratch_bytes(const bwd_job *jobs, int64_t n, int workers, bool flat) {
    double ws = 0, part = 0, sums = 0;
    for (int64_t c = 0; c < n; c++) {
        bwd_job j = jobs[c];
        if (flat) j.heads = 1;
        int64_t p = 0;
        (void)partial_bytes(&j, &p); /* checked when measuring */
        double w = (double)workspace_floats(&j) * sizeof(float), r = (double)reduce_sums(&j) * sizeof(double);
        ws = w > ws ? w : ws, part = (double)p > part ? (double)p : part, sums = r > sums ? r : sums;
    }
    return ws * workers + part + sums;
}

/* How many of each call's slices items of a whole group take (jobs in the
 * order of sort_jobs). Group items need no partials of S rows, but are
 * heads times coarser: a call of Hq 16 over Hk 4 and one chunk has 4, and
 * on 3 threads its pass would run two of them end to end (the bench's
 * 3,000-token sequence). Items of one slice promise a pass within Graham's
 * bound, the work over the threads plus their costliest item; so the
 * costliest calls give a group at a time back to items of one slice (with
 * partials for that group alone) until the pass (pass_time) is within that
 * bound, and no further: each group given back costs its S rows of
 * partials. The gradients are the same bits either way (store_key_block,
 * reduce). Short of the bound (no group left, or STEPS given back: each
 * step simulates the pass again, and the long poles go first), the
 * shortest pass seen is kept, the fewest given back of equals. A call left
 * with no group items takes items of one slice (heads 1), with their
 * smaller workspace. Cost: at most STEPS + 1 simulated passes, each
 * O(items · log threads) (pass_time's heap), plus O(calls) a step to find
 * the costliest call; against the pass itself, whose every item is a
 * chunk's products, a few comparisons an item. */
static void choose_groups(bwd_job *jobs, int64_t n, int workers) {
    enum { STEPS = 64 };
    bwd_job *given[STEPS];
    double work = 0, one = 0; /* the pass's work, and its costliest item of one slice */
    bool any = false;
    for (int64_t c = 0; c < n; c++) any |= grouped_of(&jobs[c]) > 0;
    if (!any) return;
    for (int64_t c = 0; c < n; c++) {
        double item = item_cost(&jobs[c]) / (double)jobs[c].heads;
        work += item * (double)(jobs[c].gs->f.count * jobs[c].n_chunks);
        one = item > one ? item : one;
    }
    double bound = work / (double)(workers < 1 ? 1 : workers) + one, best = pass_time(jobs, n, workers);
    int steps = 0, keep = 0;
    for (double t = best; t > bound && steps < STEPS;) {
        /* The call of the costliest group items that has some, the last of
         * equals: its items of one slice then come after theirs. */
        bwd_job *most = NULL;
        for (int64_t c = 0; c < n; c++)
            if (grouped_of(&jobs[c]) > 0 && (!most || item_cost(&jobs[c]) >= item_cost(most))) most = &jobs[c];
        if (!most) break;
        most->grouped_slices -= most->heads, given[steps++] = most;
        t = pass_time(jobs, n, workers); /* sums of whole numbers: exact below 2^53 */
        if (t < best) best = t, keep = steps;
    }
    for (; steps > keep; steps--) given[steps - 1]->grouped_slices += given[steps - 1]->heads;
    /* Group items' workspaces are larger (each head's rows): where the
     * threads are many and the calls' groups few, those and the partials
     * of the groups given back can outweigh the partials of every slice.
     * Then every call takes items of one slice, as balanced. A pass holds
     * the largest call's partials, so once balance has given back all of
     * that call's groups (attn bench --varlen at 8 threads: the
     * 3,000-token call's 4), a mix only adds group workspaces to them. */
    bool flat = scratch_bytes(jobs, n, workers, true) < scratch_bytes(jobs, n, workers, false);
    for (int64_t c = 0; c < n; c++)
        if (flat || grouped_of(&jobs[c]) == 0) jobs[c].heads = 1;
}

/* j's partial sums carved out of `at` (partial_bytes of it). */
static void bind_partials(bwd_job *j, char *at) {
    int64_t floats[3];
    float **part[3] = {&j->part.dq, &j->part.dk, &j->part.dv};
    partial_floats(j, floats);
    for (int t = 0; t < 3; t++) {
        *part[t] = floats[t] ? (float *)(void *)at : NULL;
        if (floats[t]) at += (floats[t] * (int64_t)sizeof(float) + 63) / 64 * 64;
    }
}

attn_status attn_flash_backward_run(const attn_grad_slices *gs, attn_run_info *info, attn_error *err) {
    return attn_flash_backward_run_calls(&gs, 1, info, err);
}

attn_status attn_flash_backward_run_calls(const attn_grad_slices *const *gss, int64_t n_calls, attn_run_info *info,
                                          attn_error *err) {
    if (n_calls == 0) return ATTN_OK;
    attn_arena *a = gss[0]->f.arena;
    bwd_job one, *jobs = n_calls == 1 ? &one : attn_arena_alloc(a, (size_t)n_calls, sizeof *jobs);
    int64_t one_first[2], *first = n_calls == 1 ? one_first : attn_arena_alloc(a, (size_t)n_calls + 1, sizeof *first);
    if ((!jobs || !first) && !a->measure)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the backward jobs of %lld calls", (long long)n_calls);
    bwd_job scratch_jobs[1]; /* measuring: jobs of one call at a time */
    /* Every call's job planned alone, and the sizes of its partials: the
     * largest call's are the most any wave (below) holds. */
    int64_t items = 0, max_exact = 0, max_part = 0;
    size_t ws_bytes = 0;
    for (int64_t c = 0; c < n_calls; c++) {
        bwd_job *j = jobs ? &jobs[c] : scratch_jobs;
        const attn_grad_slices *gs = gss[c];
        memset(j, 0, sizeof *j);
        int64_t n, dq_floats, dk_floats, dv_floats, stat_rows, part;
        if (!plan_job(j, gs) || !attn_mul_i64(gs->f.count, j->n_chunks, &n) || !attn_add_i64(items, n, &items) ||
            !attn_mul_i64(n, j->Lp * j->Ep, &dq_floats) || !attn_mul_i64(gs->f.count, j->S * j->Ep, &dk_floats) ||
            !attn_mul_i64(gs->f.count, j->S * j->Evp, &dv_floats) || !attn_mul_i64(gs->f.count, j->L, &stat_rows) ||
            !attn_mul_i64(gs->f.count, j->n_rblocks, &n))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "the backward pass's partial sums overflow");
        /* The partials of items of one slice, which a call of group items
         * falls back to (below); its workspace (heads > 1) is the larger. */
        bwd_job one_slice = *j;
        one_slice.heads = 1;
        if (!partial_bytes(&one_slice, &part))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "the backward pass's partial sums overflow");
        int64_t exact_words = attn_backward_work_size(j->S, j->E, j->Ev);
        if (exact_words < 0) return attn_fail(err, ATTN_ERR_OVERFLOW, "the backward pass's scratch size overflows");
        max_exact = exact_words > max_exact ? exact_words : max_exact;
        max_part = part > max_part ? part : max_part;
        size_t w = (workspace_floats(j) * sizeof(float) + 63) / 64 * 64;
        ws_bytes = w > ws_bytes ? w : ws_bytes;
    }
    /* One workspace per worker, the largest any call's items take. */
    int workers = gss[0]->f.threads < items ? gss[0]->f.threads : (int)items;
    workers = workers < 1 ? 1 : workers;
    /* A call's slices go to items of a whole group only as far as the
     * threads' work stays balanced (choose_groups). Measuring, both kinds
     * count: the workspace of group items, the partials of the others
     * (below). From here on jobs[c] need not be gss[c]'s. */
    if (jobs && !a->measure) sort_jobs(jobs, n_calls), choose_groups(jobs, n_calls, workers);
    for (int64_t c = 0; jobs && !a->measure && c < n_calls; c++) {
        size_t w = (workspace_floats(&jobs[c]) * sizeof(float) + 63) / 64 * 64;
        ws_bytes = c == 0 || w > ws_bytes ? w : ws_bytes;
    }
    char *scratch = attn_arena_alloc(a, ws_bytes, (size_t)workers);
    bool ok = scratch != NULL;
    int64_t sum_doubles = 0; /* reduce's sums of a group (below), for items of one slice */
    for (int64_t c = 0; c < n_calls; c++) {
        bwd_job *j = jobs ? &jobs[c] : scratch_jobs;
        if (!jobs) plan_job(j, gss[c]); /* measuring without jobs: planned again, the same */
        const attn_grad_slices *gs = j->gs;
        j->scratch = scratch, j->ws_bytes = ws_bytes;
        j->route = attn_arena_alloc(a, (size_t)gs->f.count, sizeof *j->route);
        ok &= j->route != NULL;
        int64_t n = gs->grouped[1] || gs->grouped[2] ? j->S * (j->Ep + j->Evp) : 0; /* items of one slice */
        sum_doubles = n > sum_doubles ? n : sum_doubles;
    }
    double *exact_work = NULL;
    if (a->measure) { /* a workspace must hold the partials, the exact kernel's scratch and the statistics too, in case */
        if (max_part) attn_arena_alloc(a, (size_t)max_part, 1);
        if (sum_doubles) attn_arena_alloc(a, (size_t)sum_doubles, sizeof(double));
        attn_arena_alloc(a, (size_t)max_exact, sizeof(double));
        for (int64_t c = 0; c < n_calls; c++) attn_arena_alloc(a, (size_t)(gss[c]->f.count * gss[c]->f.cq.shape[3]), 2 * sizeof(double));
        return ATTN_OK;
    }
    if (!ok)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the backward pass's scratch");
    bwd_batch b = {jobs, n_calls, first, NULL};
    for (int64_t c = 0; c < n_calls; c++)
        for (int64_t s = 0; s < jobs[c].gs->f.count; s++) atomic_init(&jobs[c].route[s], ROUTE_FUSED);
    batch_pass(&b, workers, slices_of, slice_check);
    /* The exact kernel's scratch (O(S·d) doubles, one for every call: they
     * are reduced one after another) and the statistics (two doubles a
     * row) only when a slice needs them, and before any output is written. */
    bool any_exact = false;
    for (int64_t c = 0; c < n_calls; c++) {
        bwd_job *j = &jobs[c];
        bool any_stats = false;
        for (int64_t s = 0; s < j->gs->f.count; s++) {
            any_exact |= atomic_load(&j->route[s]) == ROUTE_EXACT;
            any_stats |= atomic_load(&j->route[s]) == ROUTE_STATS;
        }
        if (any_stats && !(j->stats = attn_arena_alloc(a, (size_t)(j->gs->f.count * j->L), 2 * sizeof(double))))
            return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                             "cannot allocate the softmax statistics of the rows whose lse f32 cannot trust");
    }
    if (any_exact && !(exact_work = attn_arena_alloc(a, (size_t)max_exact, sizeof(double))))
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the exact kernel's scratch for the slices f32 cannot take");
    /* Items of a whole group (above) only where no slice goes to the exact
     * kernel: it adds into the group's sums in reduce(), in their order. */
    max_part = 0, sum_doubles = 0;
    for (int64_t c = 0; c < n_calls; c++) {
        bwd_job *j = &jobs[c];
        for (int64_t s = 0; j->heads > 1 && s < j->gs->f.count; s++)
            if (atomic_load(&j->route[s]) == ROUTE_EXACT) j->heads = 1;
        int64_t part;
        (void)partial_bytes(j, &part); /* checked when measuring, above */
        max_part = part > max_part ? part : max_part;
        sum_doubles = reduce_sums(j) > sum_doubles ? reduce_sums(j) : sum_doubles;
    }
    sort_jobs(jobs, n_calls); /* again: a call that lost its group items (heads 1) costs less an item */
    /* The partial sums of the calls in flight (one wave, below): never more
     * than the largest call's, whatever the number of calls. Sized by the
     * sum of every call's, a ragged batch held 43 MB for attn bench
     * --varlen's backward, new pages on every call (a fault costs 6.7 us
     * in a VM), where one attn_sdpa_backward per sequence held its own
     * sequence's and malloc reused it. */
    char *parts = max_part ? attn_arena_alloc(a, (size_t)max_part, 1) : NULL;
    /* One group's sums for a grouped dk and dv (reduce), the largest any
     * call needs: the calls are reduced one after another. */
    double *sums = sum_doubles ? attn_arena_alloc(a, (size_t)sum_doubles, sizeof(double)) : NULL;
    if ((max_part && !parts) || (sum_doubles && !sums))
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the backward pass's partial sums");
    /* Waves: consecutive calls whose partials fit in `parts` together run
     * as one job (their items handed out together, so short calls still
     * share the threads), then are reduced, and the next wave reuses the
     * memory. Each call's items and sums are its own, whatever the waves
     * and whoever computes them: the same bits as one job of every call. */
    info->threads = 1, info->threads_given = workers, info->items = 0, info->fallbacks = 0;
    info->heads_per_item = 1, info->grouped_slices = 0;
    for (int64_t c = 0; c < n_calls; c++) {
        info->heads_per_item = jobs[c].heads > info->heads_per_item ? (int)jobs[c].heads : info->heads_per_item;
        info->grouped_slices += grouped_of(&jobs[c]);
    }
    for (int64_t c0 = 0, c1; c0 < n_calls; c0 = c1) {
        int64_t used = 0, part;
        for (c1 = c0; c1 < n_calls; c1++) { /* a wave holds at least one call: max_part is the largest */
            (void)partial_bytes(&jobs[c1], &part); /* checked when measuring, above */
            if (c1 > c0 && used + part > max_part) break;
            bind_partials(&jobs[c1], parts ? parts + used : NULL), used += part;
        }
        bwd_batch wave = {jobs + c0, c1 - c0, first, NULL};
        batch_pass(&wave, workers, stat_items_of, stats_item);
        int ran = batch_pass(&wave, workers, items_of, bwd_item);
        info->threads = ran > info->threads ? ran : info->threads;
        for (int64_t c = c0; c < c1; c++) info->items += jobs[c].gs->f.count, reduce(&jobs[c], exact_work, sums, info);
    }
    info->kernel = "flash_backward", info->isa = jobs[0].uk->name;
    info->bf16 = gss[0]->bf16 ? attn_bf16_label() : NULL; /* "f32...": the f32 kernels computed the mode */
    info->key_dot = NULL, info->value_dot = NULL, info->side_by_side = 1;
    return ATTN_OK;
}
