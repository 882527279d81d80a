/* decode.c -- the f32 decode path: a few queries (L <= 4) against a long key
 * sequence, as in generating one token at a time from a KV cache.
 *
 * There are too few query rows to split work over, so the keys are split:
 * each slice's S keys fall into chunks (the core's decode_chunk keys, see
 * cores.c), and every (slice,
 * chunk) is a work item that streams its keys and values once, straight from
 * the caller's memory, and leaves a partial result: per query row its maximum
 * m_c, its sum l_c = sum exp(s - m_c) and its output out_c = sum exp(s -
 * m_c) v / l_c. The partials are then merged exactly, in chunk order, by the
 * merge attn_sdpa_merge uses (merge.c), from m_c and l_c.
 * (As in flash.c, exp(x) is computed as 2^(x·log2 e) on differences x.)
 * The chunking depends only on S, never on the thread count, so results are
 * bitwise identical for any number of threads.
 *
 * As in flash.c, a slice whose keys or values are not finite, or whose scores
 * or sums could overflow f32, is computed by the exact f64 kernel instead. */
#include "exact/exact.h"
#include "fast/fast.h"
#include "kernels/dropout.h"
#include "kernels/score.h"
#include "kernels/ukernel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Keys or values not stored as contiguous f32 rows (16-bit, or strided) are
 * widened GROUP rows at a time into scratch, so that each microkernel call
 * covers a group, not a row. */
enum { GROUP = 32 };

/* Whether the ISA's kernels read m's 16-bit rows where they lie. */
static bool streams_16bit(const attn_ukernels *uk, const attn_mat *m) {
    return (m->dtype == ATTN_F16 || m->dtype == ATTN_BF16) && m->cs == 1 && uk->dot_rows16;
}

typedef struct decode_job {
    const attn_ukernels *uk;
    const attn_slices *sl;
    int64_t L, S, E, Ev, chunk, n_chunks;
    float *partials;      /* per item: m (L), l (L), acc (L × Ev) */
    int64_t part_floats;
    float *scratch;       /* per worker: q (L × E), s (L × chunk padded), a group of rows */
    int64_t ws_floats;
    atomic_uchar *bad;    /* per slice: take the exact kernel */
} decode_job;

static void decode_item(void *ctx, int64_t item, int worker) {
    decode_job *j = ctx;
    const attn_ukernels *uk = j->uk;
    int64_t slice = item / j->n_chunks, chunk = item % j->n_chunks;
    attn_problem p;
    attn_slice(j->sl, slice, &p);
    float *part = j->partials + item * j->part_floats;
    float *m = part, *l = part + j->L, *acc = part + 2 * j->L;
    int64_t L = j->L, E = j->E, Ev = j->Ev, lds = attn_round_up(j->chunk, ATTN_VL_MAX);
    float *q = j->scratch + worker * j->ws_floats, *s = q + L * E, *tmp = s + L * lds; /* tmp: GROUP rows */
    int64_t j0 = chunk * j->chunk, n = j->S - j0 < j->chunk ? j->S - j0 : j->chunk;
    for (int64_t i = 0; i < L; i++) m[i] = -INFINITY, l[i] = 0;
    memset(acc, 0, sizeof(float) * (size_t)(L * Ev));

    /* Keys this chunk's rows may see (all of them without a causal mask). */
    int64_t last = attn_keys_seen(&p, L - 1, j0, n);
    /* Nothing to see: keys past the causal limit, or all before the window. */
    if (last == 0 || j0 + last <= attn_first_key(&p, 0) || atomic_load(&j->bad[slice])) return;

    /* The queries times the scale, each product rounded once from double
     * (as flash.c packs them): scores come out in natural units. */
    float qmax = 0;
    for (int64_t i = 0; i < L && qmax >= 0; i++) {
        const float *row = attn_row_f32_fast(uk, &p.q, i, tmp);
        for (int64_t e = 0; e < E; e++) q[i * E + e] = (float)((double)row[e] * p.scale);
        float b = uk->absmax(q + i * E, E);
        qmax = attn_absmax_join(qmax, b);
    }
    /* Scores: each key row is read once, for all query rows; in one call
     * when the rows are f32 in place, else a group at a time. */
    float kmax = 0;
    if (streams_16bit(uk, &p.k)) {
        kmax = uk->dot_rows16(s, lds, q, (int)L, (const uint16_t *)(const void *)p.k.base + j0 * p.k.rs, p.k.rs,
                              last, E, p.k.dtype == ATTN_F16);
    } else {
        bool in_place = p.k.dtype == ATTN_F32 && p.k.cs == 1;
        for (int64_t c0 = 0, group = in_place ? last : GROUP; c0 < last && kmax >= 0; c0 += group) {
            int64_t nc = last - c0 < group ? last - c0 : group, ld;
            const float *rows = attn_rows_f32(uk, &p.k, j0 + c0, nc, tmp, &ld);
            kmax = attn_absmax_join(kmax, uk->dot_rows(s + c0, lds, q, (int)L, rows, ld, nc, E));
        }
    }
    if (!attn_f32_scores_fit(qmax, kmax, E) || !attn_f32_bias_fits(&p, L, j->S)) {
        atomic_store(&j->bad[slice], 1);
        return;
    }
    int64_t vl = uk->vl, last_pad = attn_round_up(last, vl);
    attn_score_block sb = {s, false, lds};
    if (!attn_score_epilogue(uk, sb, &p, 0, L, j0, last, last_pad, p.causal, NULL)) {
        atomic_store(&j->bad[slice], 1);
        return;
    }
    for (int64_t i = 0; i < L; i++) {
        float *row = s + i * lds;
        float mx = uk->max(row, last_pad);
        if (mx == -INFINITY) { /* no key of this chunk takes part */
            memset(row, 0, sizeof(float) * (size_t)last_pad);
            continue;
        }
        m[i] = mx;
        l[i] = uk->exp_sum(row, last_pad, mx);
        attn_dropout_row(sb, i, &p, i, j0, last); /* after l: it sums the weights undropped */
    }
    /* Values: each row is read once, for all query rows. */
    if (streams_16bit(uk, &p.v)) {
        uk->axpy_rows16(acc, s, lds, (int)L, (const uint16_t *)(const void *)p.v.base + j0 * p.v.rs, p.v.rs, last,
                        Ev, p.v.dtype == ATTN_F16);
    } else {
        bool in_place = p.v.dtype == ATTN_F32 && p.v.cs == 1;
        for (int64_t c0 = 0, group = in_place ? last : GROUP; c0 < last; c0 += group) {
            int64_t nc = last - c0 < group ? last - c0 : group, ld;
            const float *rows = attn_rows_f32(uk, &p.v, j0 + c0, nc, tmp, &ld);
            uk->axpy_rows(acc, s + c0, lds, (int)L, rows, ld, nc, Ev);
        }
    }
    /* The partial's output, acc / l, for attn_merge_row. */
    for (int64_t i = 0; i < L; i++)
        for (int64_t e = 0; e < Ev && l[i] > 0; e++) acc[i * Ev + e] /= l[i];
}

/* out rows of one slice from its chunks' partials (attn_merge_row, in chunk
 * order). Returns false when an output is not finite (f32 overflowed, or a
 * value was NaN): the exact kernel then redoes the slice. */
static bool merge(const decode_job *j, int64_t slice, const attn_problem *p, attn_part_row *parts) {
    for (int64_t i = 0; i < j->L; i++) {
        for (int64_t c = 0; c < j->n_chunks; c++) {
            const float *part = j->partials + (slice * j->n_chunks + c) * j->part_floats;
            parts[c].m = part[i], parts[c].l = part[j->L + i];
            parts[c].out = part + 2 * j->L + i * j->Ev;
            parts[c].stride = 1;
        }
        double lse;
        char *orow = p->out.base + i * p->out.rs * (int64_t)sizeof(float);
        if (!attn_merge_row(orow, p->out.cs, &lse, ATTN_F32, parts, (int)j->n_chunks, j->Ev)) return false;
        if (p->lse.base) attn_mat_set(&p->lse, i, 0, lse);
    }
    return true;
}

bool attn_decode_applies(int64_t L, int64_t S) {
    return L <= ATTN_DECODE_MAX_ROWS && S >= attn_blocks_active()->decode_chunk;
}

attn_status attn_decode_run(const attn_slices *sl, attn_run_info *info, attn_error *err) {
    decode_job j;
    memset(&j, 0, sizeof j);
    attn_problem first;
    attn_slice(sl, 0, &first);
    j.uk = attn_ukernels_active();
    j.sl = sl;
    j.L = first.q.rows, j.S = first.k.rows, j.E = first.q.cols, j.Ev = first.v.cols;
    j.chunk = attn_blocks_active()->decode_chunk;
    j.n_chunks = (j.S + j.chunk - 1) / j.chunk;
    j.part_floats = 2 * j.L + j.L * j.Ev;
    int64_t items, floats;
    if (j.E > (1 << 24) || j.Ev > (1 << 24) || !attn_mul_i64(sl->count, j.n_chunks, &items) ||
        !attn_mul_i64(items, j.part_floats, &floats) || (uint64_t)floats > SIZE_MAX / 8)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "decode partials overflow");
    j.ws_floats = attn_round_up(j.L * j.E + j.L * attn_round_up(j.chunk, ATTN_VL_MAX) + GROUP * (j.E + j.Ev), 16);
    int workers = sl->threads;
    if (workers > items) workers = (int)items;
    attn_arena *a = sl->arena;
    j.partials = attn_arena_alloc(a, (size_t)floats, sizeof(float));
    j.scratch = attn_arena_alloc(a, (size_t)j.ws_floats, sizeof(float) * (size_t)workers);
    j.bad = attn_arena_alloc(a, (size_t)sl->count, sizeof *j.bad);
    attn_part_row *parts = attn_arena_alloc(a, (size_t)j.n_chunks, sizeof *parts);
    /* The exact kernel's scratch, for slices that fall back to it: taken
     * now, so that running out of memory never leaves an output half done. */
    int64_t words = attn_stream_work_size(j.E, j.Ev);
    double *work = words > 0 ? attn_arena_alloc(a, (size_t)words, sizeof(double)) : NULL;
    if (a->measure) return ATTN_OK;
    if (!j.partials || !j.scratch || !j.bad || !parts || !work)
        return attn_fail(err, a->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate the decode path's partials");
    for (int64_t s = 0; s < sl->count; s++) atomic_init(&j.bad[s], 0);
    attn_parallel_for(workers, items, decode_item, &j);
    info->kernel = "decode", info->isa = j.uk->name, info->bf16 = NULL, info->threads = workers;
    info->items = sl->count, info->fallbacks = 0;
    for (int64_t s = 0; s < sl->count; s++) {
        attn_problem p;
        attn_slice(sl, s, &p);
        if (!atomic_load(&j.bad[s]) && merge(&j, s, &p, parts)) continue;
        info->fallbacks++;
        attn_exact_rows(&p, 0, j.L, work); /* the exact f64 kernel for this slice */
    }
    return ATTN_OK;
}
