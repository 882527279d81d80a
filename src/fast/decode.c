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

#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Keys or values not stored as contiguous f32 rows (16-bit the ISA does not
 * stream, or strided) are widened GROUP rows at a time into scratch, so
 * that each microkernel call covers a group, not a row. f32 rows are read
 * where they lie, span by span, or in a paged cache several pages a call
 * through a list of row pointers (chunk_scores): the microkernels treat
 * every row alike wherever a call starts, so the results are the same
 * bits however the rows are split into calls. */
enum { GROUP = 32 };

/* Whether the ISA's kernels read m's 16-bit rows where they lie. */
static bool streams_16bit(const attn_ukernels *uk, const attn_mat *m) {
    return (m->dtype == ATTN_F16 || m->dtype == ATTN_BF16) && m->cs == 1 && uk->dot_rows16;
}

/* Whether the ISA's kernels read m's quantized rows where they lie (q8,
 * q4, q4_1: widened in registers, bitwise the f32 kernels on the widened
 * rows). */
static bool streams_quant(const attn_ukernels *uk, const attn_mat *m) {
    return attn_rows_q_format(m->dtype) && uk->dot_rows_q;
}

/* Whether the ISA's kernels read m's fp8 rows where they lie. e4m3 rows
 * are read as 2^-8 times their values (decode_rows.h): their queries are
 * given times 2^8 (partial_begin), their weights too (partial_softmax). */
static bool streams_fp8(const attn_ukernels *uk, const attn_mat *m) {
    return attn_dtype_fp8(m->dtype) && uk->dot_rows_fp8;
}

/* Whether rows of dtype d (a source of keys or values) are e4m3 read in
 * place: every span of a source has its dtype. */
static bool e4m3_in_place(const attn_ukernels *uk, attn_dtype d) {
    return d == ATTN_E4M3 && uk->dot_rows_fp8;
}

typedef struct decode_job {
    const attn_ukernels *uk;
    const attn_qdot_kernels *qk; /* integer dot products for q8/q4 keys, or NULL */
    const attn_slices *sl;
    int64_t L, S, E, Ev, chunk, n_chunks;
    int64_t G, R;         /* query heads per group (sharing one KV head), rows G · L */
    int64_t ng, stretch;  /* groups per item, and keys a stretch when several (decode_partials) */
    int64_t part_floats;  /* one item's partial: m (R), l (R), acc (R × Ev) */
    int64_t slot_floats;  /* all its items' partials: groups × n_chunks partials */
    struct partial_pool *pool; /* where its partials lie while it runs */
    atomic_llong slot;    /* its slot of the pool: -1 before its first item, NO_SLOT where none was free */
    atomic_llong left;    /* its items not finished yet; the last one gives the slot back */
    float *scratch;       /* per worker, ws_floats apart (decode_partials carves it): the
                           * item's ng groups' queries (ng × R × E), scores (ng × R × lds,
                           * lds = chunk rounded up to ATTN_VL_MAX) and value sums (ng × R × Ev);
                           * then tmp: a group of rows widened (GROUP × (E + Ev)) and q
                           * quantized (R × E bytes, then R × E/32 scales and biases); then
                           * the integer set's kernels' scratch (qdot_floats) and, last, a
                           * list of rows' pointers (LIST_FLOATS) */
    int64_t ws_floats;
    int64_t qdot_floats;  /* those kernels' scratch (qdot.h's ATTN_QDOT_SCRATCH), or 0 */
    atomic_uchar *bad;    /* per group of G slices: take the exact kernel */
    atomic_int *done;     /* per group: its chunks computed so far; the last one merges the group */
    atomic_uchar *redo;   /* per slice: its merge found an output not finite (the exact kernel redoes it) */
    attn_part_row *parts; /* per worker: the parts of a merge (the chunks, a sink), parts_each apart */
    attn_problem *problems; /* per worker: an item's heads' problems, heads_each apart (up to ITEM_HEADS, */
    int64_t heads_each;     /* 22 KiB: not on the worker's stack, which may be a caller's small one) */
    struct partial *pts;  /* per worker: an item's groups' partials in the making, MAX_GROUPS apart (2 KiB) */
    int64_t parts_each;   /* the most chunks of any job of the batch, + 1 */
    const float *zero;    /* Ev zeros: a sink's part */
    atomic_int *pages_per_call; /* the most pages one list microkernel call read (verbose), shared by a batch's jobs */
    atomic_int *heads_per_call; /* the most KV heads one side-by-side call read (verbose), shared so too */
} decode_job;

/* Whether m's values go to the integer set's value kernel (qdot.h: q8 and
 * q4 rows, read where they lie; q4_1 has none and takes axpy_rows_q). */
static bool integer_values(const decode_job *j, const attn_mat *m) {
    return attn_qdot_format(m->dtype) && streams_quant(j->uk, m) && j->qk && j->qk->axpy;
}

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
                         const attn_mat *m, int64_t k, float *tmp, void *qscratch) {
    const attn_ukernels *uk = j->uk;
    float kmax = 0;
    if (qq && attn_qdot_format(m->dtype)) { /* the integer dot product kernel */
        for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
            kmax = attn_absmax_join(kmax, j->qk->dot(s + r0 * lds, lds, qq, (int)r0, row_block(j, r0), m->base, m->rs,
                                                     k, m->dtype == ATTN_Q4, qscratch));
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
                                                         m->rs, k, j->E, m->dtype));
        return kmax;
    }
    if (streams_fp8(uk, m)) { /* q times 2^8 for e4m3 (partial_begin) */
        for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
            kmax = attn_absmax_join(kmax, uk->dot_rows_fp8(s + r0 * lds, lds, q + r0 * j->E, row_block(j, r0), m->base,
                                                           m->rs, k, j->E, m->dtype));
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

/* Paged keys and values are fetched by hand, ahead of the microkernels,
 * at every page's start. The hardware prefetcher finds a stream only after
 * a few misses in each 4 KiB page of memory, and it never follows a jump
 * to the next page of the cache: on its own it reads pages of 16 positions
 * (one head's rows of d = 64 in f32 are one run of 4 KiB) at about 40% of
 * the bandwidth of one long run, and pages of 256 at about 85%
 * (docs/performance.md). So the first PREFETCH_STEP bytes of each page
 * (all of a short page) are prefetched PREFETCH_AHEAD bytes or more before
 * the microkernels reach them; the rest of a long page is left to the
 * hardware, which has found the stream by then. Dense rows are left to it
 * too: prefetching those by hand was slower.
 * The keys are computed a segment at a time: the rows up to the point
 * where the next page's start is due to be prefetched, and at least
 * SEGMENT_BYTES of rows, whose page starts are prefetched together (pages
 * of 16 positions, d = 64, f32: a page a segment; of 256: a segment from
 * a little before one page's end to a little before the next's), a span
 * (a page) a call. Measured on Zen 4 (one thread,
 * 16 sequences of 100..8,000 keys, Hk 4, d 64, pages of 16): segments of
 * 4 KiB with page starts 4 KiB ahead took 0.90-0.95x the time of segments
 * of 8 KiB, which took 0.7-0.9x that of 16 KiB with 8 KiB ahead: a burst of
 * prefetches stalls the core while its miss buffers are full, so the
 * smallest burst that still covers a page start wins once the per-segment
 * bookkeeping is cheap (pages of 256: no difference; 2 KiB segments: no
 * better). */
enum { PREFETCH_STEP = 4096, PREFETCH_AHEAD = 4096, SEGMENT_BYTES = 4096 };

/* Where the ISA has the list microkernels, paged rows take none of the
 * above: a chunk's rows go LIST_ROWS to a call, and the call asks for the
 * row about LIST_AHEAD_BYTES after the one it computes, a row at a time
 * (ukernel.h), so the prefetches are spread over the computation instead
 * of queued at each page start, where they held the core while its miss
 * buffers were full. Zen 5, 16 sequences of 100..8,000 keys, Hk 4, d 64,
 * f32, pages of 16, paged over contiguous: on one thread 1.6-1.8x with the
 * page starts' bursts, 1.1-1.3x a row at a time; on two, with the pages on
 * 4 KiB boundaries, 1.04-1.12x for 8 KiB ahead against 1.18x for 4 KiB
 * and 1.4-1.5x for 2 KiB (docs/performance.md). */
/* LIST_AHEAD_MAX caps those rows where they are short (under 128 bytes,
 * 8 KiB being more than 64 of them), so that a list stays LIST_FLOATS. */
enum { LIST_ROWS = 256, LIST_AHEAD_BYTES = 8192, LIST_AHEAD_MAX = 64 };
/* A list of rows' pointers (chunk_scores, chunk_values): the scratch's
 * last floats, two a pointer. */
enum { LIST_FLOATS = 2 * (LIST_ROWS + LIST_AHEAD_MAX) };
_Static_assert(LIST_FLOATS % 16 == 0, "the value kernel's scratch before the list stays in whole cache lines");

typedef struct prefetcher {
    const attn_rows *src;
    int64_t unit;   /* attn_stride_unit of its dtype */
    int64_t window; /* rows prefetched at a page's start; 0: all left to the hardware */
    int64_t ahead;  /* rows between a page start's prefetch and its computation, at least */
    int64_t least;  /* rows a segment, at least */
    int64_t next;   /* the first page start not prefetched yet */
    int64_t end;    /* the chunk's end */
} prefetcher;

/* The prefetcher of src's n rows from j0. */
static prefetcher prefetch_start(const attn_rows *src, int64_t j0, int64_t n) {
    prefetcher f = {src, 0, 0, 0, n, j0 + n, j0 + n};
    if (src->kind != ATTN_ROWS_PAGED) return f;
    int64_t row = attn_row_bytes(src->dtype, src->cols), P = src->page_size;
    if (row < 1) return f;
    f.unit = attn_stride_unit(src->dtype);
    f.window = PREFETCH_STEP / row > 1 ? PREFETCH_STEP / row : 1;
    if (f.window > P) f.window = P;
    f.ahead = PREFETCH_AHEAD / row > 1 ? PREFETCH_AHEAD / row : 1;
    f.least = SEGMENT_BYTES / row > 1 ? SEGMENT_BYTES / row : 1;
    f.next = j0 - j0 % P + P; /* the rows of j0's own page are read at once */
    return f;
}

/* The end of the segment from row j: f->least rows on (to the chunk's
 * end), or further, to f->ahead rows before the next page start not
 * prefetched yet; the page starts up to f->ahead rows past j + f->least
 * are prefetched now (each between f->ahead and f->ahead + f->least rows
 * before it is computed). */
static int64_t prefetch_segment(prefetcher *f, int64_t j) {
    if (!f->window) return f->end;
    int64_t e = j + f->least > f->next - f->ahead ? j + f->least : f->next - f->ahead;
    if (e > f->end) e = f->end;
    for (; f->next < f->end && f->next <= j + f->least + f->ahead; f->next += f->src->page_size) {
        int64_t rows = f->end - f->next < f->window ? f->end - f->next : f->window; /* one run in the page */
        attn_prefetch_bytes(attn_paged_row(f->src, f->next, f->unit), rows * f->src->row_step * f->unit);
    }
    return e;
}

/* Whether the job's keys quantized per channel (src) are scored by the
 * integer set's kernel for them (qdot.h, attn_qdot_groups): with such a
 * set, for E in blocks of 32. Else their groups are widened to f32 rows. */
static bool reads_groups(const decode_job *j, const attn_rows *src) {
    return src->kind == ATTN_ROWS_GROUPED && j->qk && j->qk->groups && j->E % ATTN_QBLOCK == 0;
}

/* Scores s (R × lds) of n positions of keys quantized per channel, from
 * row t of the groups at `groups` (stride bytes apart), read where they
 * lie. Returns a bound on |k| (-1: not finite). */
static float group_scores(const decode_job *j, float *s, int64_t lds, const float *q, const void *groups,
                          int64_t stride, int64_t t, int64_t n, attn_dtype dtype, void *qscratch) {
    float kmax = 0;
    for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
        kmax = attn_absmax_join(kmax, j->qk->groups->dot(s + r0 * lds, lds, q + r0 * j->E, row_block(j, r0), groups,
                                                         stride, j->E, t, n, dtype == ATTN_Q2C, qscratch));
    return kmax;
}

/* Whether the ISA's list microkernels take src's rows: paged f32, f16 or
 * bf16 rows of contiguous columns. */
static bool lists_rows(const attn_ukernels *uk, const attn_rows *src) {
    return src->kind == ATTN_ROWS_PAGED && uk->dot_rows_list && uk->axpy_rows_list &&
           (src->dtype == ATTN_F32 || src->dtype == ATTN_F16 || src->dtype == ATTN_BF16);
}

/* The rows a list call asks for ahead of the one it computes
 * (ukernel.h): about LIST_AHEAD_BYTES of them. */
static int64_t list_ahead(const attn_rows *src) {
    int64_t row = attn_row_bytes(src->dtype, src->cols), a = row > 0 ? LIST_AHEAD_BYTES / row : 1;
    return a < 1 ? 1 : a > LIST_AHEAD_MAX ? LIST_AHEAD_MAX : a;
}

/* list[i] = the row of position j + i of src, for i < n + ahead (n <=
 * LIST_ROWS, ahead <= LIST_AHEAD_MAX): the n rows a list call computes
 * and the ahead rows after them that it asks for; those at or past end
 * (the chunk's end: the next chunk's rows are another item's) are end -
 * 1's row again. Returns the pages (spans) the n rows lie in.
 * The pages are walked in table order from j's, one division a list, not
 * two a page (attn_paged_row): with pages of 16 those 64-bit divisions and
 * the stores behind them were 5-6% of paged decode's samples (one thread),
 * and with the keys and values in cache the paged call took 2-7% less
 * time so (Zen 5; from memory the difference is inside the noise;
 * docs/performance.md). */
static int list_rows(const void **list, const attn_rows *src, int64_t j, int64_t n, int64_t ahead, int64_t end) {
    int64_t unit = attn_stride_unit(src->dtype), step = src->row_step * unit, P = src->page_size;
    int64_t m = end - j < n + ahead ? end - j : n + ahead, r = j % P, page_bytes = src->page_stride * unit;
    const int32_t *page = src->table + j / P;
    int pages = 0;
    for (int64_t i = 0; i < m; page++, r = 0) { /* r: the first row of this page in the list */
        const char *row = src->head + *page * page_bytes + r * step;
        int64_t k = P - r < m - i ? P - r : m - i; /* to the page's end */
        for (int64_t t = 0; t < k; t++, row += step) list[i + t] = row;
        pages += i < n;
        i += k;
    }
    for (int64_t i = m; i < n + ahead; i++) list[i] = list[m - 1];
    return pages;
}

/* *most = max(*most, n): the most pages (KV heads) one microkernel call
 * read, kept for the verbose line. */
static void note_most(atomic_int *most, int n) {
    int was = atomic_load_explicit(most, memory_order_relaxed);
    while (n > was && !atomic_compare_exchange_weak_explicit(most, &was, n, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* The scores of the chunk's `last` keys from j0, segment by segment: in
 * lists of rows, or span by span: f32 rows in place, groups of keys
 * quantized per channel through group_scores where the integer set reads
 * them, others through span_scores (qq: the queries quantized for the
 * integer dot product kernel, or NULL). */
static float chunk_scores(const decode_job *j, float *s, int64_t lds, const float *q, const attn_qrows *qq,
                          const attn_problem *p, int64_t j0, int64_t last, float *tmp, void *qscratch,
                          const void **list) {
    float kmax = 0;
    int most = 0;
    bool lists = lists_rows(j->uk, &p->k), groups = reads_groups(j, &p->k);
    prefetcher f = prefetch_start(&p->k, j0, last);
    int64_t ahead = lists ? list_ahead(&p->k) : 0;
    if (lists) f.window = 0; /* the list kernels ask for their rows themselves */
    for (int64_t c = 0; c < last && kmax >= 0;) {
        int64_t e = prefetch_segment(&f, j0 + c) - j0;
        while (c < e && kmax >= 0) {
            if (groups && j0 + c < p->k.full) { /* the groups' rows up to the page's end, the segment's or the groups' */
                int64_t t, at = j0 + c, P = p->k.page_size, k = e - c;
                const void *group = attn_grouped_at(&p->k, at, &t);
                if (k > P - at % P) k = P - at % P;
                if (k > p->k.full - at) k = p->k.full - at;
                kmax = attn_absmax_join(kmax, group_scores(j, s + c, lds, q, group, p->k.row_step, t, k, p->k.dtype, qscratch));
                c += k;
                continue;
            }
            if (lists) {
                int64_t n = e - c < LIST_ROWS ? e - c : LIST_ROWS;
                int pages = list_rows(list, &p->k, j0 + c, n, ahead, j0 + last);
                most = pages > most ? pages : most;
                for (int64_t r0 = 0; r0 < j->R && kmax >= 0; r0 += ATTN_DECODE_MAX_ROWS)
                    kmax = attn_absmax_join(kmax, j->uk->dot_rows_list(s + r0 * lds + c, lds, q + r0 * j->E,
                                                                       row_block(j, r0), list, n, ahead, j->E,
                                                                       p->k.dtype));
                c += n;
                continue;
            }
            attn_mat m; /* a group's rows dequantized into tmp's first GROUP rows (decode_partials) */
            int64_t k = attn_rows_span(&p->k, j0 + c, e - c, &m, tmp, GROUP * (j->E + j->Ev));
            if (m.dtype == ATTN_F32 && m.cs == 1)
                kmax = attn_absmax_join(kmax, rows_scores(j, s + c, lds, q, (const float *)(const void *)m.base, m.rs, k));
            else kmax = attn_absmax_join(kmax, span_scores(j, s + c, lds, q, qq, &m, k, tmp, qscratch));
            c += k;
        }
    }
    if (most > 0) note_most(j->pages_per_call, most);
    return kmax;
}

/* acc (R × Ev) += the weights s (R × lds) · the k values of one span m,
 * each value row read once for all rows (the integer set's value kernel
 * with its scratch qscratch). */
static void span_values(const decode_job *j, float *acc, const float *s, int64_t lds, const attn_mat *m, int64_t k,
                        float *tmp, void *qscratch) {
    const attn_ukernels *uk = j->uk;
    if (streams_16bit(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            uk->axpy_rows16(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0),
                            (const uint16_t *)(const void *)m->base, m->rs, k, j->Ev, m->dtype == ATTN_F16);
        return;
    }
    if (integer_values(j, m)) { /* the integer set's own, within f32's bound */
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            j->qk->axpy(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), m->base, m->rs, k, j->Ev,
                        m->dtype == ATTN_Q4, qscratch);
        return;
    }
    if (streams_quant(uk, m)) {
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            uk->axpy_rows_q(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), m->base, m->rs, k, j->Ev,
                            m->dtype);
        return;
    }
    if (streams_fp8(uk, m)) { /* weights times 2^8 for e4m3 (partial_softmax) */
        for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
            uk->axpy_rows_fp8(acc + r0 * j->Ev, s + r0 * lds, lds, row_block(j, r0), m->base, m->rs, k, j->Ev,
                              m->dtype);
        return;
    }
    attn_rows span = attn_rows_dense(*m);
    for (int64_t c0 = 0; c0 < k; c0 += GROUP) {
        int64_t nc = k - c0 < GROUP ? k - c0 : GROUP, ld;
        const float *rows = attn_rows_f32(uk, &span, c0, nc, tmp, &ld);
        rows_values(j, acc, s + c0, lds, rows, ld, nc);
    }
}

/* The keys a group of the integer set's value kernel when it takes m's
 * rows, else 0: it takes a call's keys in groups from its first (qdot.h,
 * value_group: the bf16 pairs, the integer values' weight scales), so a
 * span of such rows must not end inside a group. */
static int64_t value_group(const decode_job *j, const attn_mat *m) {
    return integer_values(j, m) ? j->qk->value_group : 0;
}

/* acc += the weights s (R × lds) · the values of the n positions from at,
 * which lie in several spans (pages): their quantized rows copied side by
 * side into tmp, so that they are one group of one call, as in a
 * contiguous cache. */
static void group_across(const decode_job *j, float *acc, const float *s, int64_t lds, const attn_rows *src,
                         int64_t at, int64_t n, float *tmp, void *qscratch) {
    attn_mat a, b;
    attn_rows_span(src, at, 1, &a, NULL, 0); /* values: never grouped */
    size_t bytes = attn_quant_row_size(a.dtype, a.cols);
    char *rows = (char *)tmp;
    for (int64_t i = 0; i < n;) {
        int64_t k = attn_rows_span(src, at + i, n - i, &b, NULL, 0);
        for (int64_t r = 0; r < k; r++, i++) memcpy(rows + i * bytes, b.base + r * b.rs * attn_stride_unit(b.dtype), bytes);
    }
    a.base = rows, a.rs = (int64_t)bytes, a.rows = n;
    span_values(j, acc, s, lds, &a, n, NULL, qscratch);
}

/* acc += the weights · the chunk's `last` values from j0, segment by
 * segment as chunk_scores goes. A span of quantized rows that ends inside
 * a group of the integer value kernel (an odd page, a page shorter than a
 * group) leaves that group to group_across: the same groups, and the same
 * bits, as one contiguous span. (Chunks start on multiples of 16
 * positions, of every value_group.) */
static void chunk_values(const decode_job *j, float *acc, const float *s, int64_t lds, const attn_problem *p,
                         int64_t j0, int64_t last, float *tmp, void *qscratch, const void **list) {
    bool lists = lists_rows(j->uk, &p->v);
    prefetcher f = prefetch_start(&p->v, j0, last);
    int64_t ahead = lists ? list_ahead(&p->v) : 0;
    if (lists) f.window = 0;
    for (int64_t c = 0; c < last;) {
        int64_t e = prefetch_segment(&f, j0 + c) - j0;
        while (c < e) {
            if (lists) {
                int64_t n = e - c < LIST_ROWS ? e - c : LIST_ROWS;
                list_rows(list, &p->v, j0 + c, n, ahead, j0 + last);
                for (int64_t r0 = 0; r0 < j->R; r0 += ATTN_DECODE_MAX_ROWS)
                    j->uk->axpy_rows_list(acc + r0 * j->Ev, s + r0 * lds + c, lds, row_block(j, r0), list, n, ahead,
                                          j->Ev, p->v.dtype);
                c += n;
                continue;
            }
            attn_mat m;
            int64_t k = attn_rows_span(&p->v, j0 + c, e - c, &m, NULL, 0), vg = value_group(j, &m);
            if (vg > 1 && k % vg && c + k < last) { /* the span ends inside a group */
                int64_t whole = k - k % vg, n = last - c - whole < vg ? last - c - whole : vg;
                if (whole) span_values(j, acc, s + c, lds, &m, whole, tmp, qscratch);
                group_across(j, acc, s + c + whole, lds, &p->v, j0 + c + whole, n, tmp, qscratch);
                c += whole + n;
                continue;
            }
            if (m.dtype == ATTN_F32 && m.cs == 1)
                rows_values(j, acc, s + c, lds, (const float *)(const void *)m.base, m.rs, k);
            else span_values(j, acc, s + c, lds, &m, k, tmp, qscratch);
            c += k;
        }
    }
}
/* One group's partial in the making: the G query heads of group g
 * (slices g·G .., which share one KV head; their problems p[0 .. G))
 * against one chunk of keys, as R = G · L rows. */
typedef struct partial {
    const attn_problem *p;
    int64_t g;
    float *m, *l, *acc; /* the partial: m (R), l (R), acc (R × Ev) */
    float *q, *s;       /* scratch: the queries scaled (R × E), the scores (R × lds) */
    attn_qrows qrows, *qq;
    float qmax, kmax;
    int64_t last; /* the keys its rows may see */
} partial;

/* The partial's start: m = -inf, l = 0, acc = 0, and when its rows see
 * keys of the chunk from j0 (n of them), its queries scaled (and quantized
 * for an integer dot product). Returns whether there is anything to
 * compute. */
static bool partial_begin(const decode_job *j, partial *pt, float *partials, int64_t g, const attn_problem *p,
                          int64_t j0, int64_t n, float *q, float *s, float *tmp) {
    const attn_ukernels *uk = j->uk;
    int64_t L = j->L, R = j->R, E = j->E, Ev = j->Ev;
    float *part = partials + (g * j->n_chunks + j0 / j->chunk) * j->part_floats;
    *pt = (partial){p, g, part, part + R, part + 2 * R, q, s, {0}, NULL, 0, 0, 0};
    for (int64_t r = 0; r < R; r++) pt->m[r] = -INFINITY, pt->l[r] = 0;
    memset(pt->acc, 0, sizeof(float) * (size_t)(R * Ev));

    /* Keys this chunk's rows may see (all of them without a causal mask). */
    pt->last = attn_keys_seen(&p[0], L - 1, j0, n);
    /* Nothing to see: keys past the causal limit, or all before the window. */
    if (pt->last == 0 || j0 + pt->last <= attn_first_key(&p[0], 0) || atomic_load(&j->bad[g])) return false;

    /* The queries times the scale, each product rounded once from double
     * (as flash.c packs them): scores come out in natural units. */
    for (int64_t r = 0; r < R && pt->qmax >= 0; r++) {
        const attn_problem *pr = &p[r / L];
        const float *row = attn_row_f32_fast(uk, &pr->q, r % L, tmp);
        /* A scale that is an f32 (1/8 for E = 64): the f32 product is the
         * exact product rounded once, as the double one is (attn_pack_scaled) */
        if ((double)(float)pr->scale == pr->scale) uk->scale(q + r * E, row, E, (float)pr->scale);
        else
            for (int64_t e = 0; e < E; e++) q[r * E + e] = (float)((double)row[e] * pr->scale);
        pt->qmax = attn_absmax_join(pt->qmax, uk->absmax(q + r * E, E));
    }
    /* q8/q4 keys with an integer dot product set: the queries as int8
     * blocks too (qdot.h), once for the chunk. */
    if (j->qk && pt->qmax >= 0 && attn_qdot_format(p[0].k.dtype)) {
        int8_t *codes = (int8_t *)(tmp + GROUP * (E + Ev));
        float *qd = (float *)(codes + R * E);
        attn_qrows_quantize(&pt->qrows, codes, qd, (int32_t *)(qd + R * E / ATTN_QBLOCK), q, R, E, p[0].k.dtype,
                            j->qk);
        pt->qq = &pt->qrows;
    }
    /* e4m3 keys read in place are 2^-8 times their values: q times 2^8,
     * exact (qmax stays q's own). A lane past FLT_MAX / 2^8 is held at
     * ±FLT_MAX: its scores fit f32 only against keys all zero
     * (attn_f32_scores_fit; e4m3's least nonzero is 2^-9), whose products
     * stay ±0 as q's own give, and no inf · 0 makes a NaN. */
    if (pt->qmax >= 0 && e4m3_in_place(uk, p[0].k.dtype)) {
        uk->scale(q, q, R * E, 256.0f);
        for (int64_t i = 0; pt->qmax > FLT_MAX / 256 && i < R * E; i++)
            q[i] = q[i] > FLT_MAX ? FLT_MAX : q[i] < -FLT_MAX ? -FLT_MAX : q[i];
    }
    return true;
}

/* The scores of the partial's keys j0 + c .. j0 + c + k - 1 (kmax: their
 * max |k|, joined). */
static void partial_scores(const decode_job *j, partial *pt, int64_t j0, int64_t c, int64_t k, float *tmp,
                           void *qscratch, const void **list) {
    int64_t lds = attn_round_up(j->chunk, ATTN_VL_MAX);
    if (pt->kmax >= 0)
        pt->kmax = attn_absmax_join(pt->kmax, chunk_scores(j, pt->s + c, lds, pt->q, pt->qq, &pt->p[0], j0 + c, k, tmp, qscratch, list));
}

/* The scores' masks, variants and softmax: s becomes the weights, m and l
 * the rows' maxima and sums. Returns false when f32 cannot hold the scores
 * (the group is marked for the exact kernel). */
static bool partial_softmax(const decode_job *j, partial *pt, int64_t j0) {
    const attn_ukernels *uk = j->uk;
    const attn_problem *p = pt->p;
    int64_t L = j->L, R = j->R, lds = attn_round_up(j->chunk, ATTN_VL_MAX), S = p[0].k.rows, last = pt->last;
    float *s = pt->s;
    bool ok = attn_f32_scores_fit(pt->qmax, pt->kmax, j->E);
    int64_t last_pad = attn_round_up(last, uk->vl);
    for (int64_t t = 0; t < j->G && ok; t++) { /* each head's masks and variants on its L rows */
        attn_score_block sb = {s + t * L * lds, false, lds};
        ok = attn_f32_bias_fits(&p[t], L, S) &&
             attn_score_epilogue(uk, sb, &p[t], 0, L, j0, last, last_pad, p[t].causal, NULL, NULL);
    }
    if (!ok) {
        atomic_store(&j->bad[pt->g], 1);
        return false;
    }
    for (int64_t r = 0; r < R; r++) {
        float *row = s + r * lds;
        float mx = uk->max(row, last_pad);
        if (mx == -INFINITY) { /* no key of this chunk takes part */
            memset(row, 0, sizeof(float) * (size_t)last_pad);
            continue;
        }
        pt->m[r] = mx;
        pt->l[r] = uk->exp_sum(row, last_pad, mx);
        attn_score_block sb = {s + (r - r % L) * lds, false, lds};
        attn_dropout_row(sb, r % L, &p[r / L], r % L, j0, last); /* after l: it sums the weights undropped */
        /* e4m3 values read in place are 2^-8 times theirs: the weights
         * times 2^8, exact (each is 0 or a normal number at most 1 / (1 -
         * dropout_p), far from overflow) */
        if (e4m3_in_place(uk, p[0].v.dtype)) uk->scale(row, row, last_pad, 256.0f);
    }
    return true;
}

/* An item's groups, query heads and bytes of scores at most (plan_job):
 * the first two size each worker's partials in the making (pts) and
 * problems (22 KiB); the scores stay within a quarter of a 1 MiB L2. */
enum { MAX_GROUPS = 16, ITEM_HEADS = 32, SCORES_BYTES = 256 << 10 };

/* Whether the item's ng live groups (their problems p[t · G]) take the
 * side-by-side kernels (ukernel.h, dot_rows_heads): keys and values dense
 * f32 rows of one row stride, group t's head t head strides (*hk, *hv
 * floats) from group 0's, every group seeing the same keys, and a head's
 * rows R 1, 2 or 4. Else each group's rows go by calls of their own. */
static bool reads_heads(const decode_job *j, const partial *pt, const bool *live, int64_t ng, int64_t *hk,
                        int64_t *hv) {
    if (ng < 2 || !j->uk->dot_rows_heads || (j->R != 1 && j->R != 2 && j->R != 4)) return false;
    const attn_rows *k0 = &pt[0].p[0].k, *v0 = &pt[0].p[0].v;
    if (k0->kind != ATTN_ROWS_DENSE || v0->kind != ATTN_ROWS_DENSE || k0->dense.dtype != ATTN_F32 ||
        v0->dense.dtype != ATTN_F32 || k0->dense.cs != 1 || v0->dense.cs != 1)
        return false;
    *hk = (pt[1].p[0].k.dense.base - k0->dense.base) / (int64_t)sizeof(float);
    *hv = (pt[1].p[0].v.dense.base - v0->dense.base) / (int64_t)sizeof(float);
    for (int64_t t = 0; t < ng; t++) {
        const attn_rows *k = &pt[t].p[0].k, *v = &pt[t].p[0].v;
        if (!live[t] || pt[t].last != pt[0].last || k->kind != ATTN_ROWS_DENSE || v->kind != ATTN_ROWS_DENSE ||
            k->dense.rs != k0->dense.rs || v->dense.rs != v0->dense.rs || k->dense.cs != 1 || v->dense.cs != 1 ||
            k->dense.dtype != ATTN_F32 || v->dense.dtype != ATTN_F32 ||
            k->dense.base != k0->dense.base + t * *hk * (int64_t)sizeof(float) ||
            v->dense.base != v0->dense.base + t * *hv * (int64_t)sizeof(float))
            return false;
    }
    return true;
}

/* The scores of the ng groups' keys j0 + c .. j0 + c + n - 1 through the
 * side-by-side kernel, as many groups a call as its rows take (their
 * scores pt[t].s follow each other, R × lds each; so do their queries). */
static void heads_scores(const decode_job *j, partial *pt, int64_t ng, int64_t hk, int64_t j0, int64_t c, int64_t n) {
    int64_t R = j->R, lds = attn_round_up(j->chunk, ATTN_VL_MAX), each = ATTN_DECODE_MAX_ROWS / R; /* groups a call */
    const attn_mat *k = &pt[0].p[0].k.dense;
    for (int64_t t0 = 0; t0 < ng; t0 += each) {
        int64_t nb = ng - t0 < each ? ng - t0 : each;
        float kmax[ATTN_DECODE_MAX_ROWS];
        j->uk->dot_rows_heads(pt[t0].s + c, lds, pt[t0].q, (int)(nb * R), (int)R,
                              (const float *)(const void *)k->base + t0 * hk + (j0 + c) * k->rs, k->rs, hk, n, j->E,
                              kmax);
        for (int64_t t = 0; t < nb; t++) pt[t0 + t].kmax = attn_absmax_join(pt[t0 + t].kmax, kmax[t]);
        note_most(j->heads_per_call, (int)nb);
    }
}

/* acc (the ng groups' R × Ev rows, one after another) += their weights ·
 * the values j0 + c .. j0 + c + n - 1, side by side. */
static void heads_values(const decode_job *j, float *acc, const partial *pt, int64_t ng, int64_t hv, int64_t j0,
                         int64_t c, int64_t n) {
    int64_t R = j->R, lds = attn_round_up(j->chunk, ATTN_VL_MAX), each = ATTN_DECODE_MAX_ROWS / R; /* groups a call */
    const attn_mat *v = &pt[0].p[0].v.dense;
    for (int64_t t0 = 0; t0 < ng; t0 += each) {
        int64_t nb = ng - t0 < each ? ng - t0 : each;
        j->uk->axpy_rows_heads(acc + t0 * R * j->Ev, pt[t0].s + c, lds, (int)(nb * R), (int)R,
                               (const float *)(const void *)v->base + t0 * hv + (j0 + c) * v->rs, v->rs, hv, n, j->Ev);
    }
}

/* The partials of groups g0 .. g0 + ng - 1 (their problems p[0 .. ng·G))
 * against one chunk of keys. One group (ng = 1) streams the chunk's keys,
 * then its values, each in one pass. Several groups whose KV heads lie
 * side by side in memory (keys packed (tokens, Hk, E)) go j->stretch keys
 * at a time (the positions of about 16 KiB of memory), each group's rows of
 * the stretch in turn, so that together they read that memory at once.
 * Read by separate items, each reading its head's rows and skipping the
 * others', the same bytes came at about half the rate: a batch of 64
 * sequences (Hq 8, Hk 2, d 64, f32) took, on Zen 4, 155-179 ms of one thread's CPU
 * time with one group an item, 120-165 ms with stretches of 64 keys and
 * 100-108 ms with 8 (4 KiB; 90 ms with each head's rows one run of their
 * own). Every key and value row is computed alike in either order (the
 * microkernels' results do not depend on where a call starts), so the
 * partials are the same bits. */
static void decode_partials(const decode_job *j, float *partials, int64_t g0, int64_t ng, int64_t chunk,
                            const attn_problem *p, int worker) {
    int64_t R = j->R, E = j->E, lds = attn_round_up(j->chunk, ATTN_VL_MAX), S = p[0].k.rows;
    /* reach: the keys of the chunk that the farthest-seeing live group sees */
    int64_t j0 = chunk * j->chunk, n = S - j0 < j->chunk ? S - j0 : j->chunk, reach = 0;
    /* scratch (decode_job's): the groups' queries (ng × R × E), their
     * scores (ng × R × lds), their sums side by side (ng × R × Ev), then
     * tmp: GROUP rows widened, then the queries quantized (plan_job) */
    float *scratch = j->scratch + worker * j->ws_floats, *sums = scratch + ng * (R * E + R * lds);
    float *tmp = sums + ng * R * j->Ev;
    const void **list = (const void **)(void *)(scratch + j->ws_floats - LIST_FLOATS); /* rows' pointers */
    /* the integer set's kernels' scratch (64-byte aligned: plan_job), or NULL without that set */
    void *qscratch = j->qdot_floats ? scratch + j->ws_floats - LIST_FLOATS - j->qdot_floats : NULL;
    partial *pt = j->pts + worker * MAX_GROUPS;
    bool live[MAX_GROUPS];
    for (int64_t t = 0; t < ng; t++) {
        live[t] = partial_begin(j, &pt[t], partials, g0 + t, p + t * j->G, j0, n, scratch + t * R * E,
                                scratch + ng * R * E + t * R * lds, tmp);
        if (live[t] && pt[t].last > reach) reach = pt[t].last;
    }
    int64_t hk, hv;
    if (reads_heads(j, pt, live, ng, &hk, &hv)) { /* all groups' rows of a position at once */
        int64_t step = ng * R <= ATTN_DECODE_MAX_ROWS ? reach : j->stretch;
        for (int64_t c = 0; c < reach; c += step) heads_scores(j, pt, ng, hk, j0, c, reach - c < step ? reach - c : step);
        for (int64_t t = 0; t < ng; t++) live[t] = partial_softmax(j, &pt[t], j0);
        memset(sums, 0, sizeof(float) * (size_t)(ng * R * j->Ev));
        for (int64_t c = 0; c < reach; c += step) heads_values(j, sums, pt, ng, hv, j0, c, reach - c < step ? reach - c : step);
        for (int64_t t = 0; t < ng; t++)
            if (live[t]) memcpy(pt[t].acc, sums + t * R * j->Ev, sizeof(float) * (size_t)(R * j->Ev));
    } else {
        int64_t step = ng == 1 ? reach : j->stretch;
        for (int64_t c = 0; c < reach; c += step)
            for (int64_t t = 0; t < ng; t++)
                if (live[t] && c < pt[t].last) partial_scores(j, &pt[t], j0, c, pt[t].last - c < step ? pt[t].last - c : step, tmp, qscratch, list);
        for (int64_t t = 0; t < ng; t++) live[t] = live[t] && partial_softmax(j, &pt[t], j0);
        for (int64_t c = 0; c < reach; c += step)
            for (int64_t t = 0; t < ng; t++)
                if (live[t] && c < pt[t].last)
                    chunk_values(j, pt[t].acc, pt[t].s + c, lds, &pt[t].p[0], j0 + c,
                                 pt[t].last - c < step ? pt[t].last - c : step, tmp, qscratch, list);
    }
    /* The partials' outputs, acc / l, for attn_merge_row. */
    for (int64_t t = 0; t < ng; t++)
        for (int64_t r = 0; live[t] && r < R; r++)
            if (pt[t].l[r] > 0) j->uk->divide(pt[t].acc + r * j->Ev, pt[t].acc + r * j->Ev, j->Ev, pt[t].l[r]);
}

/* out rows of one slice from its chunks' partials (attn_merge_row, in chunk
 * order), and the slice's sink as one more part with no value (zero: Ev
 * zeros). Returns false when an output is not finite (f32 overflowed, or a
 * value was NaN): the exact kernel then redoes the slice. */
static bool merge(const decode_job *j, const float *partials, int64_t slice, const attn_problem *p,
                  attn_part_row *parts, const float *zero) {
    int64_t g = slice / j->G, r0 = slice % j->G * j->L; /* its rows in its group's partials */
    for (int64_t i = 0; i < j->L; i++) {
        for (int64_t c = 0; c < j->n_chunks; c++) {
            const float *part = partials + (g * j->n_chunks + c) * j->part_floats;
            parts[c].m = part[r0 + i], parts[c].l = part[j->R + r0 + i];
            parts[c].out = part + 2 * j->R + (r0 + i) * j->Ev;
            parts[c].stride = 1;
        }
        int n = (int)j->n_chunks;
        if (p->has_sink) parts[n++] = (attn_part_row){p->sink, 1.0, zero, 1};
        double lse;
        char *orow = p->out.base + i * p->out.rs * (int64_t)sizeof(float);
        if (!attn_merge_row(orow, p->out.cs, p->lse.base ? &lse : NULL, ATTN_F32, parts, n, j->Ev)) return false;
        if (p->lse.base) attn_mat_set(&p->lse, i, 0, lse);
    }
    return true;
}

/* ---- the partials of the calls in flight ---------------------------------
 *
 * A call's items write their partials into one block, the call's slot, and
 * the item that finishes a group's last chunk merges them from it. A batch
 * of many calls (attn_sdpa_varlen: 64 sequences of up to 32,000 keys, 2 MiB
 * of partials) does not need a block per call: it needs one for each call
 * whose items are running or half claimed. Blocks per call were malloc'd
 * whole and given back to the system at the end of every varlen call, so
 * that the next call faulted them in again (docs/performance.md). So when
 * a batch has more calls than the bound below, its calls share a pool of
 * that many slots, each the size of the largest call's partials: a call's
 * first item to start takes a slot, the item that finishes its last gives
 * it back. Where a partial lies does not change its bits.
 *
 * The bound: 2·w + 1 slots, w the workers given to attn_parallel_for.
 *   - At most w threads run the batch's items at once, one item each:
 *     attn_parallel_for's workers have the indices 0..w-1, the calling
 *     thread being worker 0, not one more (a caller that finds the pool
 *     busy runs every item alone, as worker 0).
 *   - Slots held by a call (installed in decode_job's slot, not given back
 *     yet): such a call has an item claimed and unfinished, or all its
 *     claimed items finished while some are not claimed yet. Items are
 *     claimed in order (attn_parallel_for's counter) and a call's items are
 *     consecutive, so only the call the counter stands in can be of the
 *     second kind. At most w + 1 calls, then; and a call holds one slot at
 *     most (it is installed once, by compare-and-swap from -1, and given back
 *     by its last item, after which none of its items runs).
 *   - Spares: two items of one call may start together; each takes a slot,
 *     one installs its own and the other gives its spare back at once. A
 *     thread holds one spare at most, and none while it takes a slot.
 *   So when a thread takes a slot, the others hold at most (w + 1) + (w - 1)
 *   = 2·w, and one of 2·w + 1 is free: the free-slot mask it reads (one
 *   atomic word, all slots at one moment) is never empty. A take never
 *   waits for another item: it retries only when another thread changed the
 *   mask between its read and its compare-and-swap, which is progress. Were
 *   the bound ever wrong, the call would not wait either: it takes no slot
 *   and its slices go to the exact kernel (job_partials).
 * One word holds 64 slots (workers <= 31); with more workers, or at most
 * 2·w + 1 calls, every call has a slot of its own, taken by nothing. */
enum { POOL_MAX = 64, NO_SLOT = -2 };

typedef struct partial_pool {
    float *slots;       /* count × floats */
    int64_t floats;     /* a slot: the largest call's partials (decode_job's slot_floats) */
    atomic_ullong free; /* bit s: slot s is free (shared pools only) */
    int count;
    bool shared;        /* fewer slots than calls: taken and given back; else call c's is slot c */
} partial_pool;

/* Takes a free slot of a shared pool, or returns NO_SLOT where none is
 * (which the bound above rules out). acquire: the slot's last call's
 * merges read it before it was given back. */
static int64_t pool_take(partial_pool *pool) {
    unsigned long long m = atomic_load_explicit(&pool->free, memory_order_relaxed);
    while (m) {
        int s = __builtin_ctzll(m);
        if (atomic_compare_exchange_weak_explicit(&pool->free, &m, m & ~(1ull << s), memory_order_acquire,
                                                  memory_order_relaxed))
            return s;
    }
    return NO_SLOT;
}

/* Gives slot s back: release, after everything read from or written to it. */
static void pool_give(partial_pool *pool, int64_t s) {
    atomic_fetch_or_explicit(&pool->free, 1ull << s, memory_order_release);
}

/* The partials of job j's items, its slot (which its first item to start
 * takes from a shared pool), or NULL where it has none: its items then
 * compute nothing and its slices take the exact kernel. */
static float *job_partials(decode_job *j) {
    long long slot = atomic_load_explicit(&j->slot, memory_order_acquire);
    if (slot == -1) {
        int64_t mine = pool_take(j->pool);
        if (atomic_compare_exchange_strong_explicit(&j->slot, &slot, mine, memory_order_acq_rel, memory_order_acquire))
            slot = mine;
        else if (mine >= 0) pool_give(j->pool, mine); /* another item installed one first: slot is that one */
    }
    return slot >= 0 ? j->pool->slots + slot * j->pool->floats : NULL;
}

/* One of job j's items is finished, its merges included: the last gives
 * the job's slot back to a shared pool. acq_rel: every item's reads and
 * writes of the slot come before the last one's release of it. */
static void job_item_done(decode_job *j) {
    if (atomic_fetch_sub_explicit(&j->left, 1, memory_order_acq_rel) == 1 && j->pool->shared) {
        int64_t slot = atomic_load_explicit(&j->slot, memory_order_relaxed);
        if (slot >= 0) pool_give(j->pool, slot);
    }
}

/* Whether the call reads a pool of pages in its default layout, (pages,
 * Hk, P, E): a page's KV heads one after another. Two threads that take
 * neighbouring items of a chunk then read neighbouring heads' parts of the
 * same pages at the same time, P · E · 4 bytes apart (4 KiB for pages of 16
 * at d = 64), which on Zen 5 took longer than the same reads farther apart:
 * so a chunk's items take the even heads first, then the odd ones, and the
 * items running together read parts two heads apart. Measured (two threads,
 * --paged's decode batch, 4 process runs, in turns in one process, the same
 * bits): paged over contiguous 0.87-0.88x of its time in three runs of four
 * with pages of 16 (1.00x in the other), 0.96-0.98x in all four with pages
 * of 256; items a head's chunks in turn instead: 0.91-1.00x and about 1.0x
 * (docs/performance.md). Where the items start does not change a bit: the
 * merge reads the chunks' partials in chunk order. */
static bool apart_heads(const attn_slices *sl) { return sl->k_pages && !sl->k_pages->head_major; }

/* One work item: chunk `chunk` of group g's keys. Items go chunk by chunk,
 * every group's item of a chunk before the next chunk's: where a cache
 * keeps its KV heads side by side (packed (tokens, Hk, E), or a page's
 * heads), the threads then read the same stretch of memory together, each
 * its head's rows of it, instead of each skipping over the others' rows
 * (a batch of 64 sequences of packed keys took 0.85x the time so).
 * The item that finishes a group's last chunk merges the group's slices,
 * on its own thread, while their partials are still in its cache: the
 * merge reads the partials in chunk order, so its bits do not depend on
 * which item it follows. */
static void decode_item(void *ctx, int64_t item, int worker) {
    decode_job *j = ctx;
    int64_t blocks = j->sl->count / j->G / j->ng, b = item % blocks, chunk = item / blocks;
    if (apart_heads(j->sl)) b = b < (blocks + 1) / 2 ? 2 * b : 2 * (b - (blocks + 1) / 2) + 1;
    int64_t g0 = b * j->ng;
    attn_problem *p = j->problems + worker * j->heads_each; /* the heads' problems, group by group; a group's p[0] has its keys and values */
    for (int64_t t = 0; t < j->ng * j->G; t++) attn_slice(j->sl, g0 * j->G + t, &p[t]);
    float *partials = job_partials(j);
    if (!partials) { /* no slot (job_partials): the exact kernel takes its groups */
        for (int64_t g = g0; g < g0 + j->ng; g++) atomic_store(&j->bad[g], 1);
        job_item_done(j);
        return;
    }
    decode_partials(j, partials, g0, j->ng, chunk, p, worker);
    attn_part_row *parts = j->parts + worker * j->parts_each;
    for (int64_t g = g0; g < g0 + j->ng; g++) {
        /* acq_rel: the other chunks' partials (and a bad flag they set) are
         * seen by the last one; a group of one chunk has no other (and its
         * counter, sharing a cache line with other threads' groups', is left
         * alone) */
        if ((j->n_chunks > 1 && atomic_fetch_add_explicit(&j->done[g], 1, memory_order_acq_rel) + 1 < j->n_chunks) ||
            atomic_load(&j->bad[g]))
            continue;
        for (int64_t t = 0; t < j->G; t++)
            if (!merge(j, partials, g * j->G + t, &p[(g - g0) * j->G + t], parts, j->zero))
                atomic_store(&j->redo[g * j->G + t], 1);
    }
    job_item_done(j);
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
 *     chunk a fixed cost (scaling R queries, merging R partial rows of Ev,
 *     and, from memory, a fresh stream of keys and of values to start).
 * So for L <= ATTN_DECODE_MAX_L decode costs no more than flash at any S,
 * and wins whenever there are fewer slices than cores; above that, flash's
 * register-blocked products (many rows per key loaded) win. The chunks:
 *   - at most the core's decode_chunk keys (cores.c), so the scores (R x
 *     chunk floats) stay in L1/L2;
 *   - at least DECODE_MIN_CHUNK keys (or the whole of a shorter S): on
 *     Zen 5, keys from memory, an item of 128 keys cost about as much as
 *     one of 160, so the time followed the item count more than the keys,
 *     and each added chunk, the chunks falling back to the minimum, made
 *     a step of 1.3x for 1.14-1.2x the keys (H 8, S 320 -> 384, 448 ->
 *     512); with 256 the first split came at 512 and still cost 1.28x
 *     for 1.14x the keys: an item's fixed cost (its queries scaled, its
 *     softmax's passes, its partial divided and merged, two streams
 *     started) was about 8% of an item of 256 keys on one thread in
 *     cache. Chunks of at least 512 halve that share: the first split at
 *     1,024, the largest step over S 1.23x (docs/performance.md, "the
 *     decode sweep's steps with chunks of at least 512 keys"). With 8
 *     heads, S from 2,048 up gets the split it had;
 *   - between these, as many as it takes for DECODE_ITEMS items over all
 *     groups, so that up to 16 cores have work wherever the keys of all
 *     groups make 32 chunks of the minimum (fewer items below: the price
 *     of the minimum on many cores, where short calls take less of a
 *     core's time than its wake-up anyway): a fixed count,
 *     not the thread count, so that the split (and with it every bit of
 *     the result) is the same whatever the number of threads. For the
 *     same reason the minimum may not shrink when the items are fewer
 *     than the threads (attn.h: the kernel and the key splits never come
 *     from the thread count; tests/test_fast.c checks decode's bits at
 *     1, 2, 3 and 7 threads): a lower minimum would have to hold on
 *     every machine (docs/design.md, "One call");
 *   - all of one size (rounded up to a vector), the last one shorter.
 * A ragged batch plans each sequence with this same function, so that a
 * sequence gets the split it would get alone. */
enum { DECODE_MIN_CHUNK = 512, DECODE_ITEMS = 32 };

/* Below this many multiply-adds (L S (E + Ev) over the slices) a decode
 * call runs on one thread. Decode does a multiply-add in a quarter of the
 * flash kernel's time at small sizes, so the pool's cost (its wake-up, and
 * the keys, values and counters moving between the cores' caches) repays
 * itself only at about 4x flash's ATTN_SMALL_WORK. Measured on Zen 5 (two
 * threads, quiet, a planned call of H 16, d 64, medians of 10,000): with
 * keys and values in L2, one thread against two took 7.0 against 12.9 µs
 * at S 40, 12.5 against 15.9 at S 100 (204,800), 19.8 against 18.9 at
 * S 150, 24.7 against 23.5 at S 200; from memory (64 MB of copies in
 * turn), 13.4 against 22.3 µs at S 40, 39.7 against 38.0 at S 100, 64
 * against 58 at S 200. Two threads break even at about 300,000 with the
 * caches warm and 180,000 from memory. */
#define DECODE_SMALL_WORK 262144.0

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

/* Whether the call's KV heads lie side by side in memory: keys and values
 * f32 rows of contiguous columns, read in place, and a head's rows not one
 * run of their own (packed (tokens, Hk, E): one head's rows of 256 bytes
 * 512 apart for two heads of d = 64). Then an item takes several groups
 * (decode_partials). p: the call's first slice. */
static bool side_by_side(const attn_slices *sl, const attn_problem *p) {
    const attn_canon *c[2] = {&sl->ck, &sl->cv};
    if (sl->k_pages || p->k.dtype != ATTN_F32 || p->v.dtype != ATTN_F32) return false;
    for (int i = 0; i < 2; i++) {
        int64_t head = c[i]->strides[2], row = c[i]->strides[3];
        if (c[i]->strides[4] != 1 || c[i]->shape[2] < 2 || head < 0 || row < 0 || head >= row * c[i]->shape[3]) return false;
    }
    return true;
}

/* Job j for the call sl: its shape, split and sizes (its memory is the
 * batch's: attn_decode_run_calls). */
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
    int64_t items, groups = sl->count / j->G;
    if (!attn_mul_i64(groups, j->n_chunks, &items) || !attn_mul_i64(items, j->part_floats, &j->slot_floats) ||
        (uint64_t)j->slot_floats > SIZE_MAX / 8)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "decode partials overflow");
    /* Groups an item: as many as keep twice the threads busy on this call
     * alone, where the KV heads lie side by side, and whose scores (R ×
     * chunk floats each) stay within a quarter of a 1 MiB L2 (the result
     * is the same bits for any number). */
    j->ng = 1;
    int64_t scores = j->R * attn_round_up(j->chunk, ATTN_VL_MAX) * (int64_t)sizeof(float);
    for (int64_t ng = 2; side_by_side(sl, &first) && ng <= groups && ng <= MAX_GROUPS && ng * j->G <= ITEM_HEADS &&
                         ng * scores <= SCORES_BYTES;
         ng++)
        if (groups % ng == 0 && groups / ng * j->n_chunks >= 2 * (int64_t)sl->threads) j->ng = ng;
    /* A stretch: the positions of about 16 KiB of the side-by-side rows
     * (16 to 64, even: the value pairs); where 16 positions take more
     * (many heads, their rows 1 KiB apart or more), 16, a whole vector of
     * keys per microkernel call. Each call's fixed cost (its accumulators
     * loaded and stored, the span looked up) is paid per stretch and
     * group, so longer stretches cost less, as long as the other groups'
     * halves of a stretch are still in L1 when their turn comes.
     * Measured on Zen 5 (quiet, two threads, medians of 5 calls, in
     * turns): 64 sequences of Hk 2, d 64 (512 bytes a position) took
     * 50-56 ms in stretches of 8, 44-61 in 16, 45-51 in 32, 46-51 in 64,
     * 44-64 in 128 (one thread: 115 ms in 8, 99 in 32); the same bits in
     * each. (On Zen 4, one thread's CPU time, 8 had beaten 16: 92-122 ms
     * against 130-148; 16 sequences of 100 keys, Hk 16, 4 KiB a position,
     * were fastest in 16.) */
    if (j->ng > 1) {
        int64_t bytes = sl->ck.strides[3] * (int64_t)sizeof(float);
        j->stretch = 16384 / bytes < 16 ? 16 : 16384 / bytes > 64 ? 64 : 16384 / bytes / 2 * 2;
    }
    /* The integer set's kernels' scratch (16 KiB, which were their stack
     * frames: the value kernel's weights of a group of keys for q8 and q4
     * values, the query rows' tables of q8 and q4 keys and of keys
     * quantized per channel; the scores and the values never at once), in
     * whole cache lines (the floats before it a multiple of 16, and
     * LIST_FLOATS too). Whatever the dtypes, as the rest of the scratch:
     * f16 k and v stand for keys quantized per channel in a workspace's
     * size (attn_kv_cache_attend). */
    j->qdot_floats = j->qk ? ATTN_QDOT_SCRATCH / (int64_t)sizeof(float) : 0;
    j->ws_floats = attn_round_up(j->ng * (j->R * j->E + j->R * attn_round_up(j->chunk, ATTN_VL_MAX) + j->R * j->Ev) +
                                     GROUP * (j->E + j->Ev) + j->R * j->E / 4 + 2 * j->R * (j->E / ATTN_QBLOCK + 1), 16) +
                  j->qdot_floats + LIST_FLOATS; /* last: a list of rows' pointers */
    return ATTN_OK;
}

/* Whether the microkernels read src's rows where they lie, as the span
 * branches above choose (keys: the integer set's q8/q4 scores too), or
 * widen some into scratch first: the verbose line's rows=. */
static bool rows_in_place(const decode_job *j, const attn_rows *src, bool keys) {
    attn_mat m;
    if (src->kind == ATTN_ROWS_GROUPED) { /* quantized groups, then the window's f16 rows */
        if (src->full > 0 && !reads_groups(j, src)) return false;
        return src->full >= src->rows || attn_rows_span(src, src->full, 1, &m, NULL, 0) < 1 || streams_16bit(j->uk, &m);
    }
    if (src->rows < 1 || attn_rows_span(src, 0, 1, &m, NULL, 0) < 1) return true;
    return (m.dtype == ATTN_F32 && m.cs == 1) || streams_16bit(j->uk, &m) || streams_quant(j->uk, &m) ||
           (keys && attn_qdot_format(m.dtype) && j->qk) || streams_fp8(j->uk, &m);
}

/* The verbose line's account of a batch run (attn_run_info): the kernels
 * and the ISA, whether some call's rows were widened first, the most KV
 * heads an item read, the integer kernels quantized keys and values took,
 * and the most pages and KV heads one microkernel call read. */
static void describe_run(attn_run_info *info, const decode_job *jobs, const attn_slices *const *sls, int64_t n_calls,
                         atomic_int *most_per_call) {
    info->kernel = "decode", info->isa = jobs[0].uk->name, info->bf16 = NULL, info->key_dot = NULL, info->value_dot = NULL;
    info->side_by_side = 1, info->pages_per_call = atomic_load(&most_per_call[0]),
    info->heads_per_call = atomic_load(&most_per_call[1]), info->rows = "in_place";
    for (int64_t c = 0; c < n_calls; c++) { /* any call's keys or values widened first */
        attn_problem p0;
        attn_slice(sls[c], 0, &p0);
        if (!rows_in_place(&jobs[c], &p0.k, true) || !rows_in_place(&jobs[c], &p0.v, false)) info->rows = "widened";
    }
    for (int64_t c = 0; c < n_calls; c++) { /* KV heads an item read: its groups' query heads over a KV head's */
        int64_t kv = jobs[c].ng * jobs[c].G / (sls[c]->co.shape[2] / sls[c]->ck.shape[2]);
        if (kv > info->side_by_side) info->side_by_side = (int)kv;
    }
    for (int64_t c = 0; c < n_calls && jobs[0].qk; c++) { /* quantized keys took the integer kernel */
        attn_problem p0;
        attn_slice(sls[c], 0, &p0);
        if (attn_qdot_format(p0.k.dtype)) info->key_dot = jobs[0].qk->name;
        if (reads_groups(&jobs[c], &p0.k) && p0.k.full > 0) info->key_dot = jobs[0].qk->groups->name;
        if (attn_qdot_format(p0.v.dtype) && jobs[0].qk->axpy && jobs[0].uk->dot_rows_q)
            info->value_dot = jobs[0].qk->value_dot; /* span_values' integer-set branch */
    }
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
    int64_t ws = 0, max_chunks = 0, max_ev = 0, max_heads = 0, work_words = 0, items = 0, slot_floats = 0, groups = 0, slices = 0;
    double madds = 0; /* multiply-adds, for attn_workers_for */
    for (int64_t c = 0; c < n_calls; c++) {
        decode_job *j = jobs ? &jobs[c] : &one;
        attn_status st = plan_job(j, sls[c], err);
        if (st) return st;
        int64_t words = attn_stream_work_size(j->E, j->Ev), mine = sls[c]->count / j->G / j->ng * j->n_chunks;
        if (first) first[c] = items;
        if (jobs) atomic_init(&j->left, mine);
        if (!attn_add_i64(items, mine, &items) || !attn_add_i64(groups, sls[c]->count / j->G, &groups) ||
            !attn_add_i64(slices, sls[c]->count, &slices) || words < 0)
            return attn_fail(err, ATTN_ERR_OVERFLOW, "decode work items overflow");
        if (j->slot_floats > slot_floats) slot_floats = j->slot_floats;
        madds += (double)sls[c]->count * (double)j->L * (double)j->S * (double)(j->E + j->Ev);
        if (j->ws_floats > ws) ws = j->ws_floats;
        if (j->n_chunks > max_chunks) max_chunks = j->n_chunks;
        if (j->ng * j->G > max_heads) max_heads = j->ng * j->G;
        if (j->Ev > max_ev) max_ev = j->Ev;
        if (words > work_words) work_words = words;
    }
    if (first) first[n_calls] = items;
    /* A job too small to repay waking the pool runs on the calling thread
     * (attn_workers_for); the verbose line still says how many were given. */
    int given = sls[0]->threads < items ? sls[0]->threads : (int)items;
    int workers = attn_workers_for(given, madds, DECODE_SMALL_WORK);
    /* The partials of the calls in flight (partial_pool), and per group
     * (of every call) whether it takes the exact kernel and its chunks
     * done, per slice whether its merge asks the exact kernel to redo it. */
    int64_t bound = 2 * (int64_t)(workers > 0 ? workers : 1) + 1;
    partial_pool pool = {NULL, slot_floats, 0, 0, n_calls > bound && bound <= POOL_MAX};
    pool.count = pool.shared ? (int)bound : 0;
    pool.slots = attn_arena_alloc(a, pool.shared ? (size_t)bound : (size_t)n_calls, sizeof(float) * (size_t)slot_floats);
    atomic_uchar *bad = attn_arena_alloc(a, (size_t)groups, sizeof *bad), *redo = attn_arena_alloc(a, (size_t)slices, sizeof *redo);
    atomic_int *done = attn_arena_alloc(a, (size_t)groups, sizeof *done);
    /* Per worker, an item's scratch (ws floats); once the items are done,
     * the exact kernel's for the slices that fall back to it (work_words
     * doubles). The two are never in use at once, so one block holds
     * either: taken now, so that running out of memory never leaves an
     * output half done, and not 90 KB more a call (d = 64) for a kernel
     * that seldom runs. */
    int64_t worker_floats, work_floats;
    if (!attn_mul_i64(ws, workers > 0 ? workers : 1, &worker_floats) || !attn_mul_i64(work_words, 2, &work_floats))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the decode path's scratch size overflows");
    float *scratch = attn_arena_alloc(a, (size_t)(worker_floats > work_floats ? worker_floats : work_floats), sizeof(float));
    double *work = (double *)(void *)scratch; /* after the items */
    /* per worker, the parts of one merge: the chunks and a sink, in whole
     * cache lines (4 parts of 32 bytes: two threads never write one line) */
    int64_t parts_each = attn_round_up(max_chunks + 1, 4);
    attn_part_row *parts = attn_arena_alloc(a, (size_t)parts_each * (size_t)(workers > 0 ? workers : 1), sizeof *parts);
    attn_problem *problems = attn_arena_alloc(a, (size_t)max_heads * (size_t)(workers > 0 ? workers : 1), sizeof *problems);
    partial *pts = attn_arena_alloc(a, (size_t)MAX_GROUPS * (size_t)(workers > 0 ? workers : 1), sizeof *pts);
    float *zero = attn_arena_alloc(a, (size_t)max_ev, sizeof(float));
    /* the verbose line's most pages, then most KV heads, one microkernel call read */
    atomic_int *most_per_call = attn_arena_alloc(a, 2, sizeof *most_per_call);
    if (a->measure) return ATTN_OK;
    if (!pool.slots || !bad || !redo || !done || !scratch || !parts || !problems || !pts || !zero || !most_per_call)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the decode path's scratch");
    memset(zero, 0, sizeof(float) * (size_t)max_ev);
    atomic_init(&most_per_call[0], 0), atomic_init(&most_per_call[1], 0);
    atomic_init(&pool.free, pool.shared ? ~0ull >> (POOL_MAX - pool.count) : 0);
    for (int64_t g = 0; g < groups; g++) atomic_init(&bad[g], 0), atomic_init(&done[g], 0);
    for (int64_t s = 0; s < slices; s++) atomic_init(&redo[s], 0);
    for (int64_t c = 0, g = 0, s = 0; c < n_calls; g += sls[c]->count / jobs[c].G, s += sls[c]->count, c++) {
        jobs[c].scratch = scratch, jobs[c].ws_floats = ws, jobs[c].parts = parts, jobs[c].parts_each = parts_each;
        jobs[c].problems = problems, jobs[c].heads_each = max_heads, jobs[c].pts = pts;
        jobs[c].zero = zero, jobs[c].pages_per_call = &most_per_call[0],
        jobs[c].heads_per_call = &most_per_call[1];
        jobs[c].pool = &pool, jobs[c].bad = bad + g, jobs[c].done = done + g, jobs[c].redo = redo + s;
        atomic_init(&jobs[c].slot, pool.shared ? -1 : c);
    }
    decode_batch b = {jobs, first, n_calls};
    info->threads = attn_parallel_for(workers, items, batch_item, &b), info->threads_given = given;
    describe_run(info, jobs, sls, n_calls, most_per_call);
    info->items = 0, info->fallbacks = 0;
    for (int64_t c = 0; c < n_calls; c++) {
        const decode_job *j = &jobs[c];
        info->items += sls[c]->count;
        for (int64_t s = 0; s < sls[c]->count; s++) { /* the slices merged already, but those that need the exact kernel */
            if (!atomic_load(&j->bad[s / j->G]) && !atomic_load(&j->redo[s])) continue;
            attn_problem p;
            attn_slice(sls[c], s, &p);
            info->fallbacks++;
            attn_exact_rows(&p, 0, j->L, work); /* the exact f64 kernel for this slice */
        }
    }
    return ATTN_OK;
}

attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err) {
    return attn_decode_run_calls(&sl, 1, info, err);
}
