/* decode.c -- the f32 decode path: a few queries (L <= ATTN_DECODE_MAX_L)
 * against the keys, as in generating one token at a time from a KV cache, or
 * verifying a few draft tokens (speculative decoding).
 *
 * There are too few query rows to split work over, so the keys are split:
 * each slice's S keys fall into chunks (attn_decode_chunk, the cost model
 * below, sizes them), and every (slice,
 * chunk) is a work item that streams its keys and values once, straight from
 * the caller's memory, and leaves a partial result: per query row its maximum
 * m_c, its sum l_c = sum exp(s - m_c) and its output out_c = sum exp(s -
 * m_c) v / l_c. The partials are then merged exactly, in chunk order, by the
 * merge attn_sdpa_merge uses (merge.c), from m_c and l_c.
 * (As in flash.c, exp(x) is computed as 2^(x·log2 e) on differences x.)
 * The chunking depends only on the shape (L, S, heads), never on the thread
 * count, so results are bitwise identical for any number of threads.
 *
 * As in flash.c, a slice whose keys or values are not finite, or whose scores
 * or sums could overflow f32, is computed by the exact f64 kernel instead. */
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/dropout.h"
#include "kernels/qdot.h"
#include "kernels/score.h"
#include "kernels/ukernel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Keys or values not stored as contiguous f32 rows (16-bit the ISA does not
 * stream, or strided) are widened GROUP rows at a time into scratch, so
 * that each microkernel call covers a group, not a row. f32 rows are read
 * where they lie, span by span (a page at a time in a paged cache): the
 * microkernels treat every row alike wherever a call starts, so the
 * results are the same bits however the rows are split into calls. */
enum { GROUP = 32 };

/* Whether the ISA's kernels read m's 16-bit rows where they lie. */
static bool streams_16bit(const attn_ukernels *uk, const attn_mat *m) {
    return (m->dtype == ATTN_F16 || m->dtype == ATTN_BF16) && m->cs == 1 && uk->dot_rows16;
}

/* Whether the ISA's kernels read m's quantized rows where they lie. */
static bool streams_quant(const attn_ukernels *uk, const attn_mat *m) {
    return (m->dtype == ATTN_Q8 || m->dtype == ATTN_Q4) && uk->dot_rows_q;
}

typedef struct decode_job {
    const attn_ukernels *uk;
    const attn_qdot_kernels *qk; /* integer dot products for q8/q4 keys, or NULL */
    const attn_slices *sl;
    int64_t L, S, E, Ev, chunk, n_chunks;
    int64_t G, R;         /* query heads per item (sharing one KV head), rows G · L */
    float *partials;      /* per item: m (R), l (R), acc (R × Ev) */
    int64_t part_floats;
    float *scratch;       /* per worker: q (R × E), s (R × chunk padded), a group of rows,
                           * q quantized (R × E bytes, then R × E/32 scales and biases) */
    int64_t ws_floats;
    atomic_uchar *bad;    /* per group of G slices: take the exact kernel */
} decode_job;

/* The rows of the microkernel block that starts at row r0 of an item. */
static int row_block(const decode_job *j, int64_t r0) {
    return (int)(j->R - r0 < ATTN_DECODE_MAX_ROWS ? j->R - r0 : ATTN_DECODE_MAX_ROWS);
}

/* The scores s (R × lds) of nc contiguous f32 key rows (row stride ld),
 * for every query row: one microkernel call takes ATTN_DECODE_MAX_ROWS
 * rows, all of an item's (an ISA whose registers hold fewer runs them in
 * blocks inside the call, the keys read again from L1); the loop keeps a
 * wider item correct. */
static float rows_scores(const decode_job *j, float *s, int64_t lds, const float *q, const float *rows, int64_t ld,
                         int64_t nc) {
    float kmax = 0;
    for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
        kmax = attn_absmax_join(kmax, j->uk->dot_rows(s + r0 * lds, lds, q + r0 * j->E, row_block(j, r0), rows, ld, nc,
                                                      j->E));
    return kmax;
}

/* acc (R × Ev) += s (R × lds) · nc contiguous f32 value rows, in the same
 * row blocks. */
static void rows_values(const decode_job *j, float *acc, const float *s, int64_t lds, const float *rows, int64_t ld,
                        int64_t nc) {
    for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
        j->uk->axpy_rows(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), rows, ld, nc, j->Ev);
}

/* Scores s (R × lds) = q · the k keys of one span m of keys not stored as
 * f32 rows: each key row read once, for all rows; in one call when the
 * rows are 16-bit the ISA streams, else widened a group of rows at a time.
 * Returns max |k| (-1: not finite). */
static float span_scores(const decode_job *j, float *s, int64_t lds, const float *q, const attn_qrows *qq,
                         const attn_mat *m, int64_t k, float *tmp) {
    const attn_ukernels *uk = j->uk;
    float kmax = 0;
    if (qq && (m->dtype == ATTN_Q8 || m->dtype == ATTN_Q4)) { /* the integer dot product kernel */
        for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
            kmax = attn_absmax_join(kmax, j->qk->dot(s + r0 * lds, lds, qq, (int)r0, row_block(j, r0), m->base, m->rs,
                                                     k, m->dtype == ATTN_Q4));
        return kmax;
    }
    if (streams_16bit(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
            kmax = attn_absmax_join(kmax, uk->dot_rows16(s + r0 * lds, lds, q + r0 * j->E, row_block(j, r0),
                                                         (const uint16_t *)(const void *)m->base, m->rs, k, j->E,
                                                         m->dtype == ATTN_F16));
        return kmax;
    }
    if (streams_quant(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
            kmax = attn_absmax_join(kmax, uk->dot_rows_q(s + r0 * lds, lds, q + r0 * j->E, row_block(j, r0), m->base,
                                                         m->rs, k, j->E, m->dtype == ATTN_Q4));
        return kmax;
    }
    attn_rows span = attn_rows_dense(*m);
    for (int64_t c0 = 0; c0 < k && kmax >= 0; c0 += GROUP) {
        int64_t nc = k - c0 < GROUP ? k - c0 : GROUP, ld;
        const float *rows = attn_rows_f32(uk, &span, c0, nc, tmp, &ld);
        kmax = attn_absmax_join(kmax, rows_scores(j, s + c0, lds, q, rows, ld, nc));
    }
    return kmax;
}

/* Paged keys and values are fetched by hand, a step ahead of the
 * microkernels, at every page's start. The hardware prefetcher finds a
 * stream only after a few misses in each 4 KiB page of memory, and it
 * never follows a jump to the next page of the cache: on its own it reads
 * pages of 16 positions (one head's rows of d = 64 in f32 are one run of
 * 4 KiB) at about 40% of the bandwidth of one long run, and pages of 256
 * at about 85% (docs/performance.md). So the first PREFETCH_STEP bytes of
 * each page are prefetched while the last step of the page before is
 * computed (a longer page is computed in two calls, its front and its last
 * step); the rest of a long page is left to the hardware, which has found
 * the stream by then. Dense rows are left to it too: prefetching those by
 * hand was slower. */
enum { PREFETCH_STEP = 4096, PREFETCH_MIN_ROWS = 16 };

typedef struct prefetcher {
    const attn_rows *src;
    int64_t step; /* rows a step; 0: left to the hardware */
    int64_t next; /* the first row not prefetched yet */
    int64_t end;  /* the chunk's end */
} prefetcher;

/* The prefetcher of src's n rows from j0. */
static prefetcher prefetch_start(const attn_rows *src, int64_t j0, int64_t n) {
    prefetcher f = {src, 0, j0, j0 + n};
    int64_t row = src->cols * (int64_t)attn_dtype_size(src->dtype);
    if (src->kind == ATTN_ROWS_DENSE || row < 1) return f;
    f.step = PREFETCH_STEP / row > PREFETCH_MIN_ROWS ? PREFETCH_STEP / row : PREFETCH_MIN_ROWS;
    f.next = j0 + f.step; /* the first step's rows: read by the microkernel at once */
    return f;
}

/* The span m of k rows at j (to its page's end, or the chunk's): its front
 * when it is longer than a step (m cut to it), else all of it, with the
 * step after it prefetched. Returns the rows to compute now. */
static int64_t prefetch_step(prefetcher *f, attn_mat *m, int64_t j, int64_t k) {
    if (!f->step) return k;
    if (k > f->step) return m->rows = k - f->step;
    int64_t to = j + k + f->step < f->end ? j + k + f->step : f->end, from = f->next > j + k ? f->next : j + k;
    if (from < to) attn_prefetch_kv(f->src, from, to - from);
    if (to > f->next) f->next = to;
    return k;
}

/* The scores of the chunk's `last` keys from j0, span by span: f32 rows in
 * place, others through span_scores (qq: the queries quantized for the
 * integer dot product kernel, or NULL). */
static float chunk_scores(const decode_job *j, float *s, int64_t lds, const float *q, const attn_qrows *qq,
                          const attn_problem *p, int64_t j0, int64_t last, float *tmp) {
    float kmax = 0;
    prefetcher f = prefetch_start(&p->k, j0, last);
    for (int64_t c = 0; c < last && kmax >= 0;) {
        attn_mat m;
        int64_t k = prefetch_step(&f, &m, j0 + c, attn_rows_span(&p->k, j0 + c, last - c, &m));
        if (m.dtype == ATTN_F32 && m.cs == 1)
            kmax = attn_absmax_join(kmax, rows_scores(j, s + c, lds, q, (const float *)(const void *)m.base, m.rs, k));
        else kmax = attn_absmax_join(kmax, span_scores(j, s + c, lds, q, qq, &m, k, tmp));
        c += k;
    }
    return kmax;
}

/* acc (R × Ev) += the weights s (R × lds) · the k values of one span m,
 * each value row read once for all rows. */
static void span_values(const decode_job *j, float *acc, const float *s, int64_t lds, const attn_mat *m, int64_t k,
                        float *tmp) {
    const attn_ukernels *uk = j->uk;
    if (streams_16bit(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            uk->axpy_rows16(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0),
                            (const uint16_t *)(const void *)m->base, m->rs, k, j->Ev, m->dtype == ATTN_F16);
        return;
    }
    if (streams_quant(uk, m) && j->qk && j->qk->axpy) { /* the integer set's own, within f32's bound */
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            j->qk->axpy(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), m->base, m->rs, k, j->Ev,
                        m->dtype == ATTN_Q4);
        return;
    }
    if (streams_quant(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            uk->axpy_rows_q(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), m->base, m->rs, k, j->Ev,
                            m->dtype == ATTN_Q4);
        return;
    }
    attn_rows span = attn_rows_dense(*m);
    for (int64_t c0 = 0; c0 < k; c0 += GROUP) {
        int64_t nc = k - c0 < GROUP ? k - c0 : GROUP, ld;
        const float *rows = attn_rows_f32(uk, &span, c0, nc, tmp, &ld);
        rows_values(j, acc, s + c0, lds, rows, ld, nc);
    }
}

/* acc += the weights · the chunk's `last` values from j0, span by span. */
static void chunk_values(const decode_job *j, float *acc, const float *s, int64_t lds, const attn_problem *p,
                         int64_t j0, int64_t last, float *tmp) {
    prefetcher f = prefetch_start(&p->v, j0, last);
    for (int64_t c = 0; c < last;) {
        attn_mat m;
        int64_t k = prefetch_step(&f, &m, j0 + c, attn_rows_span(&p->v, j0 + c, last - c, &m));
        if (m.dtype == ATTN_F32 && m.cs == 1) rows_values(j, acc, s + c, lds, (const float *)(const void *)m.base, m.rs, k);
        else span_values(j, acc, s + c, lds, &m, k, tmp);
        c += k;
    }
}
/* One work item: the G query heads of group g (slices g·G .., which share
 * one KV head) against one chunk of keys, as R = G · L rows. */
static void decode_item(void *ctx, int64_t item, int worker) {
    decode_job *j = ctx;
    const attn_ukernels *uk = j->uk;
    int64_t g = item / j->n_chunks, chunk = item % j->n_chunks;
    attn_problem p[ATTN_DECODE_MAX_L]; /* the heads' problems; p[0]'s keys and values are all of theirs */
    for (int64_t t = 0; t < j->G; t++) attn_slice(j->sl, g * j->G + t, &p[t]);
    float *part = j->partials + item * j->part_floats;
    int64_t L = j->L, R = j->R, E = j->E, Ev = j->Ev, lds = attn_round_up(j->chunk, ATTN_VL_MAX);
    float *m = part, *l = part + R, *acc = part + 2 * R;
    float *q = j->scratch + worker * j->ws_floats, *s = q + R * E, *tmp = s + R * lds; /* tmp: GROUP rows */
    int64_t S = p[0].k.rows, j0 = chunk * j->chunk, n = S - j0 < j->chunk ? S - j0 : j->chunk;
    for (int64_t r = 0; r < R; r++) m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, sizeof(float) * (size_t)(R * Ev));

    /* Keys this chunk's rows may see (all of them without a causal mask). */
    int64_t last = attn_keys_seen(&p[0], L - 1, j0, n);
    /* Nothing to see: keys past the causal limit, or all before the window. */
    if (last == 0 || j0 + last <= attn_first_key(&p[0], 0) || atomic_load(&j->bad[g])) return;

    /* The queries times the scale, each product rounded once from double
     * (as flash.c packs them): scores come out in natural units. */
    float qmax = 0;
    for (int64_t r = 0; r < R && qmax >= 0; r++) {
        const attn_problem *pt = &p[r / L];
        const float *row = attn_row_f32_fast(uk, &pt->q, r % L, tmp);
        for (int64_t e = 0; e < E; e++) q[r * E + e] = (float)((double)row[e] * pt->scale);
        qmax = attn_absmax_join(qmax, uk->absmax(q + r * E, E));
    }
    /* q8/q4 keys with an integer dot product set: the queries as int8
     * blocks too (qdot.h), once for the chunk. */
    attn_qrows qrows, *qq = NULL;
    if (j->qk && qmax >= 0 && (p[0].k.dtype == ATTN_Q8 || p[0].k.dtype == ATTN_Q4)) {
        int8_t *codes = (int8_t *)(tmp + GROUP * (E + Ev));
        float *qd = (float *)(codes + R * E);
        attn_qrows_quantize(&qrows, codes, qd, (int32_t *)(qd + R * E / ATTN_QBLOCK), q, R, E, p[0].k.dtype, j->qk);
        qq = &qrows;
    }
    float kmax = chunk_scores(j, s, lds, q, qq, &p[0], j0, last, tmp);
    bool ok = attn_f32_scores_fit(qmax, kmax, E);
    int64_t last_pad = attn_round_up(last, uk->vl);
    for (int64_t t = 0; t < j->G && ok; t++) { /* each head's masks and variants on its L rows */
        attn_score_block sb = {s + t * L * lds, false, lds};
        ok = attn_f32_bias_fits(&p[t], L, S) &&
             attn_score_epilogue(uk, sb, &p[t], 0, L, j0, last, last_pad, p[t].causal, NULL, NULL);
    }
    if (!ok) {
        atomic_store(&j->bad[g], 1);
        return;
    }
    for (int64_t r = 0; r < R; r++) {
        float *row = s + r * lds;
        float mx = uk->max(row, last_pad);
        if (mx == -INFINITY) { /* no key of this chunk takes part */
            memset(row, 0, sizeof(float) * (size_t)last_pad);
            continue;
        }
        m[r] = mx;
        l[r] = uk->exp_sum(row, last_pad, mx);
        attn_score_block sb = {s + (r - r % L) * lds, false, lds};
        attn_dropout_row(sb, r % L, &p[r / L], r % L, j0, last); /* after l: it sums the weights undropped */
    }
    chunk_values(j, acc, s, lds, &p[0], j0, last, tmp);
    /* The partial's output, acc / l, for attn_merge_row. */
    for (int64_t r = 0; r < R; r++)
        if (l[r] > 0) uk->divide(acc + r * Ev, acc + r * Ev, Ev, l[r]);
}

/* out rows of one slice from its chunks' partials (attn_merge_row, in chunk
 * order), and the slice's sink as one more part with no value (zero: Ev
 * zeros). Returns false when an output is not finite (f32 overflowed, or a
 * value was NaN): the exact kernel then redoes the slice. */
static bool merge(const decode_job *j, int64_t slice, const attn_problem *p, attn_part_row *parts,
                  const float *zero) {
    int64_t g = slice / j->G, r0 = slice % j->G * j->L; /* its rows in its group's partials */
    for (int64_t i = 0; i < j->L; i++) {
        for (int64_t c = 0; c < j->n_chunks; c++) {
            const float *part = j->partials + (g * j->n_chunks + c) * j->part_floats;
            parts[c].m = part[r0 + i], parts[c].l = part[j->R + r0 + i];
            parts[c].out = part + 2 * j->R + (r0 + i) * j->Ev;
            parts[c].stride = 1;
        }
        int n = (int)j->n_chunks;
        if (p->has_sink) parts[n++] = (attn_part_row){p->sink, 1.0, zero, 1};
        double lse;
        char *orow = p->out.base + i * p->out.rs * (int64_t)sizeof(float);
        if (!attn_merge_row(orow, p->out.cs, &lse, ATTN_F32, parts, n, j->Ev)) return false;
        if (p->lse.base) attn_mat_set(&p->lse, i, 0, lse);
    }
    return true;
}

/* ---- the cost model: which kernel, how many splits ----------------------
 *
 * Both kernels stream each key and value once per work item and are bound
 * by memory for few query rows; what differs is how the work divides:
 *   flash: one item per (slice, block of query rows), so L <= 8 queries give
 *     one item per slice, and a slice's S keys are streamed by one core;
 *     its tiles of bc keys are padded to its block of rows, so for a few
 *     rows most of its arithmetic is padding;
 *   decode: one item per (group of heads sharing a KV head, chunk of keys),
 *     every row of the group computed from one read of each key, plus per
 *     chunk a fixed cost (scaling R queries, merging R partial rows of Ev)
 *     worth about DECODE_MIN_CHUNK / 64 keys.
 * So for L <= ATTN_DECODE_MAX_L decode costs no more than flash at any S,
 * and wins whenever there are fewer slices than cores; above that, flash's
 * register-blocked products (many rows per key loaded) win. The chunks:
 *   - at most the core's decode_chunk keys (cores.c), so the scores (R x
 *     chunk floats) stay in L1/L2;
 *   - at least DECODE_MIN_CHUNK keys, so the fixed cost stays under ~2%;
 *   - between these, as many as it takes for DECODE_ITEMS items over all
 *     groups, so that up to 16 cores have work at every S: a fixed count,
 *     not the thread count, so that the split (and with it every bit of
 *     the result) is the same whatever the number of threads;
 *   - all of one size (rounded up to a vector), the last one shorter.
 * A ragged batch plans each sequence with this same function, so that a
 * sequence gets the split it would get alone. */
enum { DECODE_MIN_CHUNK = 128, DECODE_ITEMS = 32 };

/* The rows of one work item: G query heads sharing a KV head (GQA) times
 * L rows, as many heads as fit ATTN_DECODE_MAX_L rows and divide the group. */
static int64_t heads_per_item(int64_t L, int64_t group) {
    int64_t G = 1;
    for (int64_t g = 2; g <= group && g * L <= ATTN_DECODE_MAX_L; g++)
        if (group % g == 0) G = g;
    return G;
}

int64_t attn_decode_chunk(int64_t L, int64_t S, int64_t slices, int64_t group) {
    if (L < 1 || L > ATTN_DECODE_MAX_L || S < 1 || slices < 1 || group < 1) return 0;
    int64_t most = attn_blocks_active()->decode_chunk, items = slices / heads_per_item(L, group);
    int64_t want = (DECODE_ITEMS + items - 1) / items;               /* chunks per group for DECODE_ITEMS */
    int64_t fit = S / DECODE_MIN_CHUNK > 0 ? S / DECODE_MIN_CHUNK : 1; /* chunks of at least the minimum */
    int64_t n = want < fit ? want : fit, least = (S + most - 1) / most;
    if (n < least) n = least;
    int64_t chunk = attn_round_up((S + n - 1) / n, ATTN_VL_MAX);
    return chunk < most ? chunk : most;
}

int64_t attn_decode_chunk_of(const attn_slices *sl) {
    if (sl->has_rope) return 0; /* RoPE rotates keys in flash's packing only */
    return attn_decode_chunk(sl->cq.shape[3], sl->ck.shape[3], sl->count, sl->co.shape[2] / sl->ck.shape[2]);
}

/* The items of several calls' jobs, run as one parallel loop: item i is
 * item i - first[c] of job c. */
typedef struct decode_batch {
    decode_job *jobs;
    const int64_t *first; /* n + 1 offsets */
    int64_t n;
} decode_batch;

static void batch_item(void *ctx, int64_t item, int worker) {
    const decode_batch *b = ctx;
    int64_t lo = 0, hi = b->n - 1; /* the last job whose first item is <= item */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (b->first[mid] <= item) lo = mid;
        else hi = mid - 1;
    }
    decode_item(&b->jobs[lo], item - b->first[lo], worker);
}

/* Job j for the call sl: its shape, split and sizes; its memory from the
 * arena (scratch apart: shared by all jobs of a batch). */
static attn_status plan_job(decode_job *j, const attn_slices *sl, attn_error *err) {
    memset(j, 0, sizeof *j);
    attn_problem first;
    attn_slice(sl, 0, &first);
    j->uk = attn_ukernels_active();
    j->qk = attn_qdot_active();
    j->sl = sl;
    j->L = first.q.rows, j->S = first.k.rows, j->E = first.q.cols, j->Ev = first.v.cols;
    if (j->E > (1 << 24) || j->Ev > (1 << 24)) /* before the sizes below multiply them */
        return attn_fail(err, ATTN_ERR_OVERFLOW, "E=%lld or Ev=%lld is too large for the f32 kernel",
                         (long long)j->E, (long long)j->Ev);
    j->chunk = attn_decode_chunk_of(sl);
    if (j->chunk < 1) return attn_fail(err, ATTN_ERR_SHAPE, "L=%lld is too many rows for the decode kernel", (long long)j->L);
    j->n_chunks = (j->S + j->chunk - 1) / j->chunk;
    j->G = heads_per_item(j->L, sl->co.shape[2] / sl->ck.shape[2]);
    j->R = j->G * j->L;
    j->part_floats = 2 * j->R + j->R * j->Ev;
    int64_t items, floats, groups = sl->count / j->G;
    if (!attn_mul_i64(groups, j->n_chunks, &items) || !attn_mul_i64(items, j->part_floats, &floats) ||
        (uint64_t)floats > SIZE_MAX / 8)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "decode partials overflow");
    j->ws_floats = attn_round_up(j->R * j->E + j->R * attn_round_up(j->chunk, ATTN_VL_MAX) + GROUP * (j->E + j->Ev) +
                                     j->R * j->E / 4 + 2 * j->R * (j->E / ATTN_QBLOCK + 1), 16);
    attn_arena *a = sl->arena;
    j->partials = attn_arena_alloc(a, (size_t)floats, sizeof(float));
    j->bad = attn_arena_alloc(a, (size_t)groups, sizeof *j->bad);
    if (!a->measure && (!j->partials || !j->bad))
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY, "cannot allocate the decode path's partials");
    return ATTN_OK;
}

attn_status attn_decode_run_calls(const attn_slices *const *sls, int64_t n_calls, attn_run_info *info,
                                  attn_error *err) {
    attn_arena *a = sls[0]->arena;
    decode_job *jobs = attn_arena_alloc(a, (size_t)n_calls, sizeof *jobs), one;
    int64_t *first = attn_arena_alloc(a, (size_t)n_calls + 1, sizeof *first);
    if (!a->measure && (!jobs || !first))
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the plans of %lld decode calls", (long long)n_calls);
    /* Every call's items, one after another; scratch for the widest.
     * (Measuring, each job is planned in `one` only for its sizes.) */
    int64_t ws = 0, max_chunks = 0, max_ev = 0, work_words = 0, items = 0;
    double madds = 0; /* multiply-adds, for attn_workers_for */
    for (int64_t c = 0; c < n_calls; c++) {
        decode_job *j = jobs ? &jobs[c] : &one;
        attn_status st = plan_job(j, sls[c], err);
        if (st) return st;
        int64_t words = attn_stream_work_size(j->E, j->Ev);
        if (first) first[c] = items;
        if (!attn_add_i64(items, sls[c]->count / j->G * j->n_chunks, &items) || words < 0)
            return attn_fail(err, ATTN_ERR_OVERFLOW, "decode work items overflow");
        madds += (double)sls[c]->count * (double)j->L * (double)j->S * (double)(j->E + j->Ev);
        if (j->ws_floats > ws) ws = j->ws_floats;
        if (j->n_chunks > max_chunks) max_chunks = j->n_chunks;
        if (j->Ev > max_ev) max_ev = j->Ev;
        if (words > work_words) work_words = words;
    }
    if (first) first[n_calls] = items;
    /* A job too small to repay waking the pool runs on the calling thread
     * (attn_workers_for); the verbose line still says how many were given. */
    int given = sls[0]->threads < items ? sls[0]->threads : (int)items;
    int workers = attn_workers_for(given, madds);
    float *scratch = attn_arena_alloc(a, (size_t)ws, sizeof(float) * (size_t)(workers > 0 ? workers : 1));
    attn_part_row *parts = attn_arena_alloc(a, (size_t)max_chunks + 1, sizeof *parts); /* + a sink */
    float *zero = attn_arena_alloc(a, (size_t)max_ev, sizeof(float));
    /* The exact kernel's scratch, for slices that fall back to it: taken
     * now, so that running out of memory never leaves an output half done. */
    double *work = work_words > 0 ? attn_arena_alloc(a, (size_t)work_words, sizeof(double)) : NULL;
    if (a->measure) return ATTN_OK;
    if (!scratch || !parts || !zero || !work)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the decode path's scratch");
    memset(zero, 0, sizeof(float) * (size_t)max_ev);
    for (int64_t c = 0; c < n_calls; c++) {
        jobs[c].scratch = scratch, jobs[c].ws_floats = ws;
        for (int64_t g = 0; g < sls[c]->count / jobs[c].G; g++) atomic_init(&jobs[c].bad[g], 0);
    }
    decode_batch b = {jobs, first, n_calls};
    info->threads = attn_parallel_for(workers, items, batch_item, &b), info->threads_given = given;
    info->kernel = "decode", info->isa = jobs[0].uk->name, info->bf16 = NULL, info->key_dot = NULL;
    for (int64_t c = 0; c < n_calls && jobs[0].qk; c++) { /* quantized keys took the integer kernel */
        attn_problem p0;
        attn_slice(sls[c], 0, &p0);
        if (p0.k.dtype == ATTN_Q8 || p0.k.dtype == ATTN_Q4) info->key_dot = jobs[0].qk->name;
    }
    info->items = 0, info->fallbacks = 0;
    for (int64_t c = 0; c < n_calls; c++) {
        const decode_job *j = &jobs[c];
        info->items += sls[c]->count;
        for (int64_t s = 0; s < sls[c]->count; s++) {
            attn_problem p;
            attn_slice(sls[c], s, &p);
            if (!atomic_load(&j->bad[s / j->G]) && merge(j, s, &p, parts, zero)) continue;
            info->fallbacks++;
            attn_exact_rows(&p, 0, j->L, work); /* the exact f64 kernel for this slice */
        }
    }
    return ATTN_OK;
}

attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err) {
    return attn_decode_run_calls(&sl, 1, info, err);
}
