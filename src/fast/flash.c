/* flash.c -- the fast f32 attention: FlashAttention-2's tiling in plain C,
 * the arithmetic in the per-ISA microkernels (src/kernels/).
 *
 * A work item is up to br query rows of one (batch, head) slice (L is split
 * into equal items). It walks the keys in blocks of bc keys (both sizes from
 * the cache model of kernels/cores.c for the active kernel set, as
 * attn_blocks_active gives them, evened out and bounded by call_blocks): packs the block's keys
 * transposed (its values too, unless their rows can be read in place), and
 * for every MR-row tile computes the MR × bc scores in registers, masks
 * them, folds them into the rows' running max m and sum l (rescaling the
 * output accumulator O by e^(m_old - m_new) when m rises) and adds P·V to O.
 * A tile starts (its queries packed times the scale) at the first block it
 * sees and finishes (out = O / l) after its last, so the item's rows are
 * read and written between computations rather than in passes that wait on
 * memory: this matters most where rows see few keys (a sliding window).
 * Nothing of size L × S exists; a K/V block is packed once per item and
 * reused from L2 by all of its rows.
 *
 * Items are independent and always computed the same way, so results are
 * bitwise identical for any number of threads. Under a causal mask an item
 * stops at the last key its last row may see, each tile at the last key of
 * its own last row, and only keys past a row's limit are masked one by one.
 *
 * In the bf16 compute mode the same loop runs with the operands converted to
 * bf16 pairs and the products done by the bf16 kernels (ukernel_bf16.h); on
 * a SIMD CPU without AVX512_BF16 it runs the f32 kernels unchanged.
 *
 * Exactness: an item is computed instead by the exact f64 streaming kernel
 * when its queries or the keys of a block it reads hold NaN or ±inf, or
 * could make scores overflow f32 (see attn_f32_scores_fit: checked as the
 * queries and each key block are packed, before their scores exist), when
 * its float mask holds NaN or +inf, or when its output is not finite (a NaN
 * or ±inf value, even one with weight 0, or sums that overflowed: checked as
 * each tile finishes; the exact kernel then rewrites the item's rows already
 * written). So every edge case keeps the semantics of attn.h, and no pass
 * over the keys and values precedes the items. The exact kernel reads the
 * same keys (those past a row's causal limit or window never reach it).
 * Any finite mask value is a finite score, -FLT_MAX included: scores stay in
 * natural units and only differences from the row maximum are scaled by
 * log2 e. */
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/dropout.h"
#include "kernels/score.h"
#include "kernels/rope.h"
#include "kernels/ukernel.h"
#include "kernels/ukernel_bf16.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum {
    BLOCK_BYTES = 8 << 20 /* the most a work item's rows or a key block may take */
};

/* One call's blocks (FlashAttention's BlockInfo, per call): its slices
 * share L and S, and so their rows per item and keys per block, which are
 * exactly those a call of its own would take, so that a call run among
 * others (attn_sdpa_varlen) gives bitwise what it gives alone. */
typedef struct flash_call {
    const attn_slices *sl;
    int64_t br, bc;      /* rows per item, keys per block (padded) */
    int64_t n_qblocks;   /* work items per slice */
    int64_t first;       /* its first item in the job's order */
} flash_call;

typedef struct flash_job {
    const attn_ukernels *uk;
    const flash_call *calls; /* in the order their items are handed out */
    int64_t n_calls;
    int64_t br, bc;      /* the largest of the calls': what a workspace holds */
    int64_t E, Ev, Evp;  /* Evp: Ev rounded up to the vector length */
    int64_t tmp_floats;  /* a workspace's tmp: E + Ev, at least ATTN_PACK_GROUPED_TMP */
    char *scratch;       /* one workspace per worker */
    size_t ws_bytes;
    atomic_llong fallbacks; /* items the exact kernel computed */
    double *exact_work;  /* per worker: scratch of the exact kernel */
    int64_t exact_words;
    bool v_direct;       /* values may be read in place (f32 rows of whole vectors), not packed (bf16: not copied before their pairs) */
    const attn_bf16_kernels *bk; /* the bf16 compute mode's kernels, or NULL */
    int64_t mr, vl, nrv; /* the register tile of the kernels in use: rows, vector length, width */
    int64_t kg;          /* a tile's keys start and end on a multiple of kg: a vector (a whole strip in bf16) */
    int64_t E2;          /* bf16 mode: pairs along E, ceil(E / 2) */
} flash_job;

/* One worker's scratch, carved out of job->scratch. */
typedef struct workspace {
    float *q;  /* br × E, scaled queries */
    float *kt; /* E × bc, keys transposed (row stride kt_stride) */
    float *v;  /* bc × Evp, the values packed when not read in place */
    float *s;  /* mr × bc: scores, then probabilities */
    float *o;  /* br × Evp, the output accumulator */
    float *m, *l; /* br each: the rows' running maximum and sum */
    float *tmp; /* tmp_floats: one row, for widening 16-bit floats; 16 keys' slice of channels (attn_pack_transposed) */
    unsigned char *tile; /* br / MR: each tile's state, TILE_WAITING .. TILE_DONE */
    /* bf16 mode: the packed operands as bf16 pairs, and a zero row */
    uint32_t *q2;  /* br × E2, pairs along E */
    uint32_t *kt2; /* E2 × bc (row stride kt_stride), pairs along E */
    uint32_t *v2;  /* bc / 2 × Evp, pairs of keys */
    uint32_t *p2;  /* mr × bc / 2, the probabilities as pairs along the keys */
    float *zero;   /* kt_stride floats of 0: the odd last row of a pair */
} workspace;

/* A tile's rows start (queries packed, m, l and O set) at the first key block
 * they see, and finish (output written) after the last one. */
enum { TILE_WAITING, TILE_RUNNING, TILE_DONE };

/* The row stride of the transposed keys for blocks of bc keys: room for
 * the nrv - kg columns a tile's last strip may read past them, rounded to
 * an odd number of 16-float cache lines, so that the E rows a microkernel
 * reads do not all fall into the same L1 sets. */
static int64_t kt_stride(const flash_job *j, int64_t bc) {
    int64_t lines = (bc + j->nrv - j->kg + 15) / 16;
    return 16 * (lines % 2 ? lines : lines + 1);
}

/* A workspace's floats, in workspace_of's order; the tile states (br / mr
 * bytes) rounded up to whole floats. */
static size_t workspace_floats(const flash_job *j) {
    size_t f32 = (size_t)(j->br * j->E + j->E * kt_stride(j, j->bc) + j->bc * j->Evp + j->mr * j->bc +
                          j->br * j->Evp + 2 * j->br + j->tmp_floats + (j->br / j->mr + 3) / 4);
    size_t bf16 = (size_t)(j->br * j->E2 + j->E2 * kt_stride(j, j->bc) + j->bc / 2 * j->Evp +
                           j->mr * j->bc / 2 + kt_stride(j, j->bc));
    return f32 + (j->bk ? bf16 : 0);
}

static workspace workspace_of(const flash_job *j, int worker) {
    workspace w;
    w.q = (float *)(void *)(j->scratch + (size_t)worker * j->ws_bytes);
    w.kt = w.q + j->br * j->E;
    w.v = w.kt + j->E * kt_stride(j, j->bc);
    w.s = w.v + j->bc * j->Evp;
    w.o = w.s + j->mr * j->bc;
    w.m = w.o + j->br * j->Evp;
    w.l = w.m + j->br;
    w.tmp = w.l + j->br;
    w.tile = (unsigned char *)(void *)(w.tmp + j->tmp_floats);
    w.q2 = w.kt2 = w.v2 = w.p2 = NULL, w.zero = NULL;
    if (j->bk) {
        w.q2 = (uint32_t *)(void *)(w.tmp + j->tmp_floats + (j->br / j->mr + 3) / 4);
        w.kt2 = w.q2 + j->br * j->E2;
        w.v2 = w.kt2 + j->E2 * kt_stride(j, j->bc);
        w.p2 = w.v2 + j->bc / 2 * j->Evp;
        w.zero = (float *)(void *)(w.p2 + j->mr * j->bc / 2);
    }
    return w;
}

/* One MR-row tile against keys j0+c_lo..j0+tc-1 of the packed block (c_lo
 * a multiple of kg: the keys before it are all outside the tile's sliding
 * window): scores, masks, the online-softmax update of m, l and O, then O +=
 * P·V. */
static void tile_step(const flash_job *j, const workspace *w, const attn_problem *p, int64_t r0,
                      int64_t rows, int64_t i0, int64_t j0, int64_t c_lo, int64_t tc, int64_t lds, int64_t ldk,
                      const float *v, int64_t ldv, bool cut, bool *bad) {
    const attn_ukernels *uk = j->uk;
    const attn_bf16_kernels *bk = j->bk;
    /* From here on, the tile's keys start at key j0 (column 0 of s). */
    j0 += c_lo, tc -= c_lo, v += c_lo * ldv;
    /* Q·Kᵀ goes by strips of nrv keys, the last one only as many vectors as
     * reach tc_pad keys (whole vectors: all the softmax and P·V need). Any
     * columns a kernel computes past them are never read (they exist: kt
     * rows are padded, see pack_block). */
    int64_t E = j->E, Evp = j->Evp, nrv = j->nrv, tc_pad = attn_round_up(tc, j->kg), nv = nrv / j->vl;
    /* Where the epilogue would only take the rows' maxima, the bf16 kernel
     * takes them from its accumulators (all mr rows) and the epilogue is skipped. */
    float row_max[ATTN_MR_MAX];
    bool max_in_qk = bk && bk->qk_max && attn_score_epilogue_only_max(p, cut, tc, tc_pad);
    for (int64_t r = 0; max_in_qk && r < j->mr; r++) row_max[r] = -INFINITY;
    for (int64_t c0 = 0; c0 < tc_pad; c0 += nrv) {
        int nvec = (int)((tc_pad - c0) / j->vl < nv ? (tc_pad - c0) / j->vl : nv);
        if (max_in_qk) bk->qk_max(w->s + c0, lds, w->q2 + r0 * j->E2, j->E2, w->kt2 + c_lo + c0, ldk, j->E2, row_max);
        else if (bk) bk->qk(w->s + c0, lds, w->q2 + r0 * j->E2, j->E2, w->kt2 + c_lo + c0, ldk, j->E2);
        else uk->qk(w->s + c0, lds, w->q + r0 * E, E, w->kt + c_lo + c0, ldk, E, nvec);
    }
    attn_score_block sb = {w->s, false, lds};
    if (!max_in_qk && !attn_score_epilogue(uk, sb, p, i0 + r0, rows, j0, tc, tc_pad, cut, NULL, row_max)) *bad = true;
    /* The bf16 mode's weights go straight to bf16 pairs along the keys,
     * unless dropout must scale them first (in f32, then to_bf16). */
    bool pairs_now = bk && p->dropout_p <= 0;
    for (int64_t r = 0; r < j->mr; r++) {
        /* Rows past `rows` (a tile's padding) had no epilogue. */
        float *srow = w->s + r * lds, mx = r < rows || max_in_qk ? row_max[r] : uk->max(srow, tc_pad);
        uint16_t *prow = bk ? (uint16_t *)(void *)(w->p2 + r * (lds / 2)) : NULL;
        float m_old = w->m[r0 + r], m_new = mx > m_old ? mx : m_old;
        if (m_new == -INFINITY) { /* nothing allowed yet: P = 0 */
            memset(srow, 0, sizeof(float) * (size_t)tc_pad);
            if (pairs_now) memset(prow, 0, sizeof(uint16_t) * (size_t)tc_pad);
            continue;
        }
        /* 2^0 is 1 exactly: no call when the row's maximum stayed (most blocks after the first). */
        float alpha = m_old == -INFINITY ? 0.0f : m_old == m_new ? 1.0f : attn_exp2f((m_old - m_new) * ATTN_LOG2E);
        /* The bf16 mode's own exp pass: its weights are rounded to bf16 next. */
        float sum = bk ? bk->exp_sum(pairs_now ? prow : NULL, srow, tc_pad, m_new) : uk->exp_sum(srow, tc_pad, m_new);
        w->l[r0 + r] = w->l[r0 + r] * alpha + sum;
        w->m[r0 + r] = m_new;
        if (r < rows) attn_dropout_row(sb, r, p, i0 + r0 + r, j0, tc); /* after l: it sums the weights undropped */
        /* A row's first keys find O as start_tile left it (0, or NaN from a
         * 0 · inf of an earlier block, which 0 · NaN keeps): nothing to scale. */
        if (alpha != 1.0f && m_old != -INFINITY) uk->scale(w->o + (r0 + r) * Evp, w->o + (r0 + r) * Evp, Evp, alpha);
    }
    if (bk && !pairs_now) /* probabilities as bf16 pairs along the keys, after dropout */
        for (int64_t r = 0; r < j->mr; r++)
            bk->to_bf16((uint16_t *)(void *)(w->p2 + r * (lds / 2)), w->s + r * lds, tc_pad);
    /* f32 P·V goes key by key, so it skips the keys before the tile's first
     * row's window and past its last row's limit: their probabilities are 0
     * in every row (the softmax above needed them as whole vectors). */
    int64_t k_lo = attn_first_key(p, i0 + r0) - j0;
    k_lo = k_lo > 0 ? k_lo : 0;
    for (int64_t c0 = 0; c0 < Evp; c0 += nrv) {
        int nvec = (int)((Evp - c0) / j->vl < nv ? (Evp - c0) / j->vl : nv);
        if (bk) bk->pv(w->o + r0 * Evp + c0, Evp, w->p2, lds / 2, w->v2 + c_lo / 2 * Evp + c0, Evp, tc_pad / 2, nvec);
        else uk->pv(w->o + r0 * Evp + c0, Evp, w->s + k_lo, lds, v + k_lo * ldv + c0, ldv, tc - k_lo, nvec);
    }
}

/* Pack the key block j0..j0+nc-1 (transposed, nc_pad columns) and its values
 * (unless their rows are read in place), and their bf16 pairs in that mode.
 * Returns the values' rows and sets *ldv, their stride. */
static const float *pack_block(const flash_job *j, const workspace *w, const attn_problem *p, int64_t j0, int64_t nc,
                               int64_t nc_pad, int64_t *ldv) {
    const attn_ukernels *uk = j->uk;
    int64_t ldk = kt_stride(j, nc_pad), Evp = j->Evp;
    attn_pack_transposed(uk, w->kt, ldk, nc_pad, &p->k, j0, nc, w->tmp);
    /* Zeros past the last strip: a tile that starts kg (not nrv) keys into
     * a strip reads up to nrv - kg columns past nc_pad (kt_stride has room). */
    for (int64_t e = 0; e < j->E; e++) memset(w->kt + e * ldk + nc_pad, 0, sizeof(float) * (size_t)(j->nrv - j->kg));
    if (p->rope) attn_rope_apply_f32(w->kt, 1, ldk, nc, p->rope, p->rope_k0 + j0, 1); /* key c is column c */
    const float *vb = w->v;
    *ldv = Evp;
    attn_mat span;
    if (j->v_direct && nc_pad == nc && attn_rows_one_span(&p->v, j0, nc, &span, NULL, 0) && span.dtype == ATTN_F32 &&
        span.cs == 1) { /* rows in place: contiguous, in one span, Ev a multiple of the vector */
        vb = (const float *)(const void *)span.base;
        *ldv = span.rs;
    } else { /* packed (padding keys' probabilities are 0, but their rows must exist) */
        attn_pack_rows_scaled(uk, w->v, Evp, &p->v, j0, nc, nc_pad, 1.0, w->tmp);
    }
    if (j->bk) { /* keys as pairs along E, values as pairs along the keys */
        for (int64_t e2 = 0; e2 < j->E2; e2++)
            j->bk->zip(w->kt2 + e2 * ldk, w->kt + 2 * e2 * ldk, 2 * e2 + 1 < j->E ? w->kt + (2 * e2 + 1) * ldk : w->zero,
                       nc_pad);
        for (int64_t k2 = 0; k2 < nc_pad / 2; k2++) /* from the rows in place when they are (no copy first) */
            j->bk->zip(w->v2 + k2 * Evp, vb + 2 * k2 * *ldv, vb + (2 * k2 + 1) * *ldv, Evp);
    }
    return vb;
}

/* The MR rows of the item from row r0 start: their queries packed times the
 * scale (scores come out in natural units) and turned by RoPE, their m, l
 * and O set to the softmax's start. Returns the largest |q| packed, or -1 if
 * one is not finite. */
static float start_tile(const flash_job *j, const workspace *w, const attn_problem *p, int64_t i0, int64_t nr,
                        int64_t r0) {
    const attn_ukernels *uk = j->uk;
    int64_t E = j->E, n = nr - r0 < j->mr ? nr - r0 : j->mr; /* rows past n are padding */
    float *q = w->q + r0 * E;
    float qmax = attn_pack_scaled(uk, q, E, &p->q, i0 + r0, n, j->mr, p->scale, w->tmp);
    if (p->rope && qmax >= 0) { /* turned as packed; the largest value may change */
        attn_rope_apply_f32(q, E, 1, n, p->rope, p->rope_q0 + i0 + r0, 1);
        qmax = uk->absmax(q, n * E);
    }
    double m0, l0;
    attn_softmax_start(p, &m0, &l0); /* a sink's (m, l), or (-inf, 0) */
    for (int64_t r = r0; r < r0 + j->mr; r++) w->m[r] = (float)m0, w->l[r] = (float)l0;
    memset(w->o + r0 * j->Evp, 0, sizeof(float) * (size_t)(j->mr * j->Evp));
    for (int64_t r = r0; j->bk && r < r0 + j->mr; r++) { /* bf16: each row's E values as E2 pairs */
        uint16_t *row = (uint16_t *)(void *)(w->q2 + r * j->E2);
        j->bk->to_bf16(row, w->q + r * E, E);
        if (E % 2) row[E] = 0;
    }
    return qmax;
}

/* The MR rows of the item from row r0 finish: out = O / l (0 where no key
 * took part), and lse. False, and nothing written, when their O holds a NaN
 * or ±inf: from a value that is not finite (even one with weight 0), or from
 * sums that overflowed. */
static bool finish_tile(const flash_job *j, const workspace *w, const attn_problem *p, int64_t i0, int64_t nr,
                        int64_t r0) {
    int64_t n = nr - r0 < j->mr ? nr - r0 : j->mr;
    if (j->uk->absmax(w->o + r0 * j->Evp, n * j->Evp) < 0) return false;
    float *out = (float *)(void *)p->out.base;
    for (int64_t r = r0; r < r0 + n; r++) {
        float l = w->l[r], *orow = w->o + r * j->Evp;
        float *dst = out + (i0 + r) * p->out.rs;
        if (p->out.cs == 1 && l != 0) j->uk->divide(dst, orow, j->Ev, l);
        else
            for (int64_t e = 0; e < j->Ev; e++) dst[e * p->out.cs] = l == 0 ? 0.0f : orow[e] / l;
        if (p->lse.base) attn_mat_set(&p->lse, i0 + r, 0, attn_lse(w->m[r], l));
    }
    return true;
}

/* Rows r0..r0+n-1 of the item fetched into the cache: the queries of a tile
 * about to start, or the output rows of one about to finish. */
static void prefetch_tile(const flash_job *j, const attn_mat *m, int64_t i0, int64_t nr, int64_t r0) {
    if (r0 < nr) attn_prefetch_rows(m, i0 + r0, nr - r0 < j->mr ? nr - r0 : j->mr);
}

/* Every MR-row tile of the item's nr rows against the packed key block
 * j0..j0+nc-1, whose largest |k| is kmax; *qmax is that of the queries of
 * the tiles started so far. Tiles start at the first block they see, their
 * queries packed while the tile before computes, and finish after the last:
 * the item's rows are read and written while it computes, not in passes
 * that wait on memory. Meanwhile the next block's keys and values (next..
 * next+n_next-1) are fetched into the cache, a share of them by each tile. */
static void block_tiles(const flash_job *j, const workspace *w, const attn_problem *p, int64_t i0, int64_t nr,
                        int64_t j0, int64_t nc, int64_t nc_pad, const float *vb, int64_t ldv, int64_t next,
                        int64_t n_next, float kmax, float *qmax, bool *bad) {
    int64_t nr_pad = attn_round_up(nr, j->mr), tiles = nr_pad / j->mr, ldk = kt_stride(j, nc_pad);
    for (int64_t r0 = 0; r0 < nr_pad && !*bad; r0 += j->mr) {
        int64_t rows = nr - r0 < j->mr ? nr - r0 : j->mr, t = r0 / j->mr;
        int64_t a = next + n_next * t / tiles, b = next + n_next * (t + 1) / tiles;
        attn_prefetch_kv(&p->k, a, b - a), attn_prefetch_kv(&p->v, a, b - a);
        /* Under a causal mask a tile needs only the keys its last row sees;
         * blocks above the diagonal are skipped whole. */
        int64_t last = attn_keys_seen(p, i0 + r0 + rows - 1, 0, p->k.rows), tc = last - j0 < nc ? last - j0 : nc;
        /* ... and none before its first row's window: it starts at the
         * vector holding that row's first key. */
        int64_t lo = attn_first_key(p, i0 + r0) - j0, c_lo = lo > 0 ? lo / j->kg * j->kg : 0;
        if (tc <= 0 || c_lo >= tc) continue;
        if (w->tile[t] == TILE_WAITING) {
            *qmax = attn_absmax_join(*qmax, start_tile(j, w, p, i0, nr, r0));
            w->tile[t] = TILE_RUNNING;
            if (t + 1 < tiles && w->tile[t + 1] == TILE_WAITING) prefetch_tile(j, &p->q, i0, nr, r0 + j->mr);
            if ((*bad = !attn_f32_scores_fit(*qmax, kmax, j->E))) return;
        }
        /* Does the causal limit cut through these keys for the tile's
         * first row, or the window for its last? */
        bool cut = attn_keys_seen(p, i0 + r0, j0, nc) < tc || attn_first_key(p, i0 + r0 + rows - 1) > j0 + c_lo;
        tile_step(j, w, p, r0, rows, i0, j0, c_lo, tc, nc_pad, ldk, vb, ldv, cut, bad);
        if (last <= j0 + nc && !*bad) { /* the tile's last keys */
            if ((*bad = !finish_tile(j, w, p, i0, nr, r0))) return;
            w->tile[t] = TILE_DONE;
            prefetch_tile(j, &p->out, i0, nr, r0 + j->mr);
        }
    }
}

/* The call that item belongs to: the last whose first item is <= item. */
static const flash_call *call_of(const flash_job *j, int64_t item) {
    int64_t lo = 0, hi = j->n_calls - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (j->calls[mid].first <= item) lo = mid;
        else hi = mid - 1;
    }
    return &j->calls[lo];
}

static void flash_item(void *ctx, int64_t item, int worker) {
    flash_job *j = ctx;
    const attn_ukernels *uk = j->uk;
    const flash_call *call = call_of(j, item);
    item -= call->first;
    attn_problem slice;
    attn_slice(call->sl, item / call->n_qblocks, &slice);
    const attn_problem *p = &slice;
    int64_t L = p->q.rows, S = p->k.rows, br = call->br, bc = call->bc; /* the slice's own */
    /* The last query blocks are the most expensive under a causal mask:
     * hand them out first, so the threads finish together. */
    int64_t qb = call->n_qblocks - 1 - item % call->n_qblocks;
    int64_t i0 = qb * br, nr = L - i0 < br ? L - i0 : br;
    int64_t tiles = attn_round_up(nr, j->mr) / j->mr, E = j->E, nrv = j->nrv;
    workspace w = workspace_of(j, worker);

    /* Keys from the first row's window to the last row's causal limit, the
     * first rounded down to a strip of nrv keys (the microkernel's width;
     * bc is a multiple of it), so that every block but the last starts and
     * ends on one: their values are then read in place, not packed
     * (pack_block; the tiles skip the keys before their window). */
    int64_t jend = attn_keys_seen(p, i0 + nr - 1, 0, S), jbegin = attn_first_key(p, i0) / j->nrv * j->nrv;
    /* The first block's keys and values asked for at once: its transpose
     * below then finds rows already on their way, and its tiles their values
     * (each later block's are fetched during the block before it, block_tiles). */
    int64_t n_first = jend - jbegin < bc ? jend - jbegin : bc;
    if (n_first > 0) attn_prefetch_kv(&p->k, jbegin, n_first), attn_prefetch_kv(&p->v, jbegin, n_first);

    memset(w.tile, TILE_WAITING, (size_t)tiles);
    if (j->bk) memset(w.zero, 0, sizeof(float) * (size_t)kt_stride(j, j->bc));
    prefetch_tile(j, &p->q, i0, nr, 0); /* the first tile's queries, while the first block is packed */
    /* Queries that are not finite (max -1), or an ALiBi bias or a sink beyond
     * f32's safe range, take the exact kernel; so do keys (checked block by
     * block below) and values (in the output). */
    bool bad = !attn_f32_bias_fits(p, L, S);
    float qmax = 0; /* of the queries of the tiles started so far */

    for (int64_t j0 = jbegin; j0 < jend && !bad; j0 += bc) {
        int64_t nc = jend - j0 < bc ? jend - j0 : bc, nc_pad = attn_round_up(nc, nrv);
        int64_t ldk = kt_stride(j, nc_pad), ldv;
        const float *vb = pack_block(j, &w, p, j0, nc, nc_pad, &ldv);
        float kmax = 0; /* of the keys as packed (RoPE turned), before any score */
        for (int64_t e = 0; e < E && kmax >= 0; e++) kmax = attn_absmax_join(kmax, uk->absmax(w.kt + e * ldk, nc));
        if ((bad |= !attn_f32_scores_fit(qmax, kmax, E))) break;
        int64_t next = j0 + bc, n_next = jend - next < bc ? jend - next : bc;
        block_tiles(j, &w, p, i0, nr, j0, nc, nc_pad, vb, ldv, next, n_next > 0 ? n_next : 0, kmax, &qmax, &bad);
    }
    /* Rows that see no key at all: their queries are still checked, and
     * their output is 0. */
    for (int64_t t = 0; t < tiles && !bad; t++) {
        if (w.tile[t] == TILE_WAITING) bad = start_tile(j, &w, p, i0, nr, t * j->mr) < 0;
        if (!bad && w.tile[t] != TILE_DONE) bad = !finish_tile(j, &w, p, i0, nr, t * j->mr);
    }
    if (bad) { /* the whole item again, any rows already written included */
        atomic_fetch_add(&j->fallbacks, 1);
        attn_exact_rows(p, i0, nr, j->exact_work + worker * j->exact_words);
    }
}

/* A call's blocks, as a call of its own takes them: items of equal size,
 * ceil(L / br) of them, each a multiple of MR rows; very wide heads shrink
 * the blocks, so that a worker's scratch stays near BLOCK_BYTES whatever E
 * is (768 and 512 fit it up to E = 1024). */
static void call_blocks(const flash_job *j, flash_call *c) {
    int64_t L = c->sl->cq.shape[3], S = c->sl->ck.shape[3];
    int64_t row_bytes = 4 * (j->E + j->Evp), br_max = attn_blocks_active()->br, bc_max = attn_blocks_active()->bc;
    if (br_max * row_bytes > BLOCK_BYTES) br_max = BLOCK_BYTES / row_bytes < j->mr ? j->mr : BLOCK_BYTES / row_bytes;
    if (bc_max * row_bytes > BLOCK_BYTES) bc_max = BLOCK_BYTES / row_bytes < 1 ? 1 : BLOCK_BYTES / row_bytes;
    int64_t n_blocks = (L + br_max - 1) / br_max;
    c->br = attn_round_up((L + n_blocks - 1) / n_blocks, j->mr);
    c->bc = attn_round_up(S < bc_max ? S : bc_max, j->nrv);
    c->n_qblocks = (L + c->br - 1) / c->br;
}

/* What an item of c costs, about: its rows times the keys they see. */
static double item_cost(const flash_call *c) { return (double)c->br * (double)c->sl->ck.shape[3]; }

attn_status attn_flash_run(const attn_slices *sl, bool bf16, attn_run_info *info, attn_error *err) {
    return attn_flash_run_calls(&sl, 1, bf16, info, err);
}

attn_status attn_flash_run_calls(const attn_slices *const *sls, int64_t n_calls, bool bf16, attn_run_info *info,
                                 attn_error *err) {
    int64_t n_problems = 0;
    for (int64_t c = 0; c < n_calls; c++) n_problems += sls[c]->count; /* each <= its out's element count */
    if (n_problems == 0) return ATTN_OK;
    const attn_slices *sl = sls[0];
    attn_problem first;
    attn_slice(sl, 0, &first);
    const attn_problem *p0 = &first;
    flash_job j;
    memset(&j, 0, sizeof j);
    j.uk = attn_ukernels_active();
    j.E = p0->q.cols, j.Ev = p0->v.cols;
    /* Before any size is formed from them: the block sizes below multiply
     * E and Ev by the rows of a block. */
    if (j.E > (1 << 24) || j.Ev > (1 << 24))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "E=%lld or Ev=%lld is too large for the f32 kernel",
                         (long long)j.E, (long long)j.Ev);
    /* bf16 mode uses its own kernels' vectors and tiles. */
    j.bk = bf16 ? attn_bf16_active() : NULL;
    j.mr = j.bk ? j.bk->mr : j.uk->mr;
    j.vl = j.bk ? j.bk->vl : j.uk->vl;
    j.nrv = j.bk ? (int64_t)j.bk->vl * j.bk->nv : (int64_t)j.uk->vl * j.uk->nv;
    j.kg = j.bk ? j.nrv : j.vl;
    j.E2 = (j.E + 1) / 2;
    j.Evp = attn_round_up(j.Ev, j.vl);
    /* tmp: a row, and 16 keys' slice of keys quantized per channel (for
     * any keys: f16 k stands for those in a workspace's size) */
    j.tmp_floats = j.E + j.Ev > ATTN_PACK_GROUPED_TMP ? j.E + j.Ev : ATTN_PACK_GROUPED_TMP;
    /* Every call's blocks, its items, and the largest blocks, which a
     * workspace must hold. */
    int64_t items = 0;
    double work = 0; /* multiply-adds, about: every slice's L S (E + Ev) */
    for (int64_t c = 0; c < n_calls; c++) {
        flash_call fc = {sls[c], 0, 0, 0, 0};
        work += (double)sls[c]->count * (double)sls[c]->cq.shape[3] * (double)sls[c]->ck.shape[3] * (double)(j.E + j.Ev);
        int64_t n;
        call_blocks(&j, &fc);
        if (!attn_mul_i64(fc.sl->count, fc.n_qblocks, &n) || !attn_add_i64(items, n, &items))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "%lld slices of %lld query blocks overflow",
                             (long long)fc.sl->count, (long long)fc.n_qblocks);
        j.br = fc.br > j.br ? fc.br : j.br;
        j.bc = fc.bc > j.bc ? fc.bc : j.bc;
    }
    /* Each workspace starts on a 64-byte boundary. */
    j.ws_bytes = (workspace_floats(&j) * sizeof(float) + 63) / 64 * 64;
    int given = sl->threads < items ? sl->threads : (int)items, workers = attn_workers_for(given, work, ATTN_SMALL_WORK);
    /* All scratch is allocated here, before any output is written, the
     * exact kernel's for items that may fall back to it included. */
    j.exact_words = attn_stream_work_size(j.E, j.Ev);
    if (j.exact_words < 0 || (uint64_t)j.exact_words > SIZE_MAX / sizeof(double) / (size_t)workers)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "scratch size for E=%lld, Ev=%lld overflows",
                         (long long)j.E, (long long)j.Ev);
    attn_arena *a = sl->arena;
    flash_call one, *calls = n_calls == 1 ? &one : attn_arena_alloc(a, (size_t)n_calls, sizeof *calls);
    j.scratch = attn_arena_alloc(a, j.ws_bytes, (size_t)workers);
    j.exact_work = attn_arena_alloc(a, (size_t)j.exact_words * (size_t)workers, sizeof(double));
    if (a->measure) return ATTN_OK;
    if (!j.scratch || !j.exact_work || !calls)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate %zu bytes of scratch", j.ws_bytes * (size_t)workers);
    /* The calls in the order their items are handed out: those of the
     * costliest items first, so that no thread is left alone with a long
     * call at the end (insertion sort, stable: the order depends on the
     * shapes alone, and results on neither). */
    for (int64_t c = 0; c < n_calls; c++) {
        calls[c] = (flash_call){sls[c], 0, 0, 0, 0};
        call_blocks(&j, &calls[c]);
        for (int64_t d = c; d > 0 && item_cost(&calls[d]) > item_cost(&calls[d - 1]); d--) {
            flash_call t = calls[d];
            calls[d] = calls[d - 1], calls[d - 1] = t;
        }
    }
    for (int64_t c = 0, n = 0; c < n_calls; n += calls[c].sl->count * calls[c].n_qblocks, c++) calls[c].first = n;
    j.calls = calls, j.n_calls = n_calls;
    j.v_direct = j.Ev == j.Evp; /* in the bf16 mode, zipped into pairs from where they lie */
    info->threads = attn_parallel_for(workers, items, flash_item, &j), info->threads_given = given;
    info->kernel = "flash", info->isa = j.uk->name, info->key_dot = NULL, info->value_dot = NULL, info->side_by_side = 1;
    info->bf16 = bf16 ? attn_bf16_label() : NULL; /* "f32...": the f32 kernels computed the mode */
    info->items = items, info->fallbacks = (int64_t)atomic_load(&j.fallbacks);
    return ATTN_OK;
}
