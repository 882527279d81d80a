/* test_mpi.c -- libattn-mpi under mpirun (tests/run.sh runs it on 1 to 4
 * ranks): every rank builds the same whole tensors, computes attn_sdpa and
 * attn_sdpa_backward over the whole sequence itself (the oracle, checked
 * against PyTorch elsewhere), then runs the ring on its shard, and its rows
 * must match: f64 within 1e-13 relative, f32 within the f32 bound. Also the
 * errors, which every rank must report alike. Rank 0 prints "ok NAME" or
 * "FAIL NAME: why" for the checks of all ranks together. */
#include "attn_mpi.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensors.h"

static int rank_, size_, n_failed;

/* One check over all ranks: passes when it passes everywhere. */
static void mcheck(int cond, const char *name, const char *why) {
    int all = 0;
    MPI_Allreduce(&cond, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!cond) fprintf(stderr, "rank %d: %s: %s\n", rank_, name, why);
    if (rank_ == 0) printf(all ? "ok %s_np%d\n" : "FAIL %s_np%d: see the ranks' messages\n", name, size_);
    n_failed += !all;
}

/* max |a - b| over max |b| (b the whole's rows), both like-shaped. */
static double rel(const attn_tensor *a, const attn_tensor *b) {
    double d = 0, big = 1e-300;
    for (int64_t i = 0; i < attn_tensor_numel(b); i++) {
        double x = a->dtype == ATTN_F64 ? ((double *)a->data)[i] : ((float *)a->data)[i];
        double y = b->dtype == ATTN_F64 ? ((double *)b->data)[i] : ((float *)b->data)[i];
        if (x == y) continue; /* -inf lse rows too */
        d = fmax(d, fabs(x - y));
        if (isfinite(y)) big = fmax(big, fabs(y));
    }
    for (int64_t i = 0; i < attn_tensor_numel(b); i++) {
        double y = b->dtype == ATTN_F64 ? ((double *)b->data)[i] : ((float *)b->data)[i];
        if (isfinite(y)) big = fmax(big, fabs(y));
    }
    return d / big;
}

typedef struct mcase {
    const char *name;
    attn_dtype dt;
    attn_mpi_layout layout;
    attn_causal causal;
    int64_t L, S, Bq, Bk, Hq, Hk;
    int mask;        /* 0 none, 1 bool (L, S), 2 float (1, S) broadcast over rows */
    bool variants;   /* softcap, ALiBi, a window, a sink and RoPE */
} mcase;

/* The shard of `whole` along the sequence (dimension -2), freshly allocated. */
static attn_tensor shard_of(const attn_tensor *whole, const attn_mpi_shard *sh) {
    int64_t shape[ATTN_MAX_RANK];
    memcpy(shape, whole->shape, sizeof shape);
    shape[whole->rank - 2] = sh->rows;
    attn_tensor t = make(whole->dtype, whole->rank, shape);
    attn_mpi_shard_rows(&t, whole, -2, sh, NULL);
    return t;
}

static void run_case(const mcase *c) {
    rng_state = 4242; /* the same whole tensors on every rank */
    int64_t E = 16, Ev = 8;
    int64_t sq[4] = {c->Bq, c->Hq, c->L, E}, sk[4] = {c->Bk, c->Hk, c->S, E}, sv[4] = {c->Bk, c->Hk, c->S, Ev};
    int64_t so[4] = {c->Bq, c->Hq, c->L, Ev}, sm[2] = {c->mask == 2 ? 1 : c->L, c->S}, hh = c->Hq;
    attn_tensor q = make(c->dt, 4, sq), k = make(c->dt, 4, sk), v = make(c->dt, 4, sv), dout = make(c->dt, 4, so);
    attn_tensor out = make(c->dt, 4, so), lse = make(c->dt, 3, so), mask = {0};
    attn_tensor g[3] = {make(c->dt, 4, sq), make(c->dt, 4, sk), make(c->dt, 4, sv)};
    if (c->mask) {
        mask = make(c->mask == 1 ? ATTN_BOOL : c->dt, 2, sm);
        if (c->mask == 1)
            for (int64_t i = 0; i < c->L; i++) ((unsigned char *)mask.data)[i * c->S + i % c->S] = 1; /* a key for every row */
    }
    double slopes[8] = {0.5, 0.25, 0.125, 0.0625, 0.03, 0.02, 0.01, 0.005}, sinks[8] = {1, -1, 0.5, 0, 2, -2, 1, 0};
    attn_tensor ts, tk;
    attn_tensor_init(&ts, slopes, ATTN_F64, 1, &hh, NULL, NULL), attn_tensor_init(&tk, sinks, ATTN_F64, 1, &hh, NULL, NULL);
    attn_rope_options rope = attn_rope_options_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = c->causal, o.mask = c->mask ? &mask : NULL;
    if (c->variants) o.softcap = 4, o.alibi_slopes = &ts, o.window = 11, o.sinks = &tk, o.rope = &rope;
    attn_error err;
    int ok = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err) == ATTN_OK &&
             attn_sdpa_backward(&g[0], &g[1], &g[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err) == ATTN_OK;
    /* This rank's shards. */
    attn_mpi_shard qs, ks;
    attn_mpi_shard_of(&qs, c->L, rank_, size_, c->layout, NULL), attn_mpi_shard_of(&ks, c->S, rank_, size_, c->layout, NULL);
    attn_tensor lq = shard_of(&q, &qs), lk = shard_of(&k, &ks), lv = shard_of(&v, &ks), ldo = shard_of(&dout, &qs);
    attn_tensor want_o = shard_of(&out, &qs), want_g[3] = {shard_of(&g[0], &qs), shard_of(&g[1], &ks), shard_of(&g[2], &ks)};
    attn_tensor lo = shard_of(&out, &qs), lm = mask; /* lo: overwritten */
    attn_tensor want_l = make(c->dt, 3, lo.shape), ll = make(c->dt, 3, lo.shape);
    attn_tensor lse4 = lse, wl4 = want_l; /* lse as (..., L, 1) to shard it along dimension -2 */
    lse4.rank = wl4.rank = 4, lse4.shape[3] = wl4.shape[3] = 1, lse4.strides[3] = wl4.strides[3] = 1;
    attn_mpi_shard_rows(&wl4, &lse4, -2, &qs, NULL);
    if (c->mask == 1) lm = shard_of(&mask, &qs);
    attn_sdpa_options lo_opts = o;
    lo_opts.mask = c->mask ? &lm : NULL;
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = c->layout, mo.attention = &lo_opts, mo.timeout_s = 30;
    attn_tensor lg[3] = {make(c->dt, 4, lq.shape), make(c->dt, 4, lk.shape), make(c->dt, 4, lv.shape)};
    ok &= attn_mpi_sdpa(MPI_COMM_WORLD, &lo, &ll, &lq, &lk, &lv, &mo, &err) == ATTN_OK;
    ok &= attn_mpi_sdpa_backward(MPI_COMM_WORLD, &lg[0], &lg[1], &lg[2], &ldo, &lq, &lk, &lv, &lo, &ll, &mo, &err) == ATTN_OK;
    double tol = c->dt == ATTN_F64 ? 1e-13 : 2e-5, worst = fmax(rel(&lo, &want_o), rel(&ll, &want_l));
    for (int i = 0; i < 3; i++) worst = fmax(worst, rel(&lg[i], &want_g[i]));
    char why[ATTN_ERROR_MESSAGE_SIZE + 128];
    snprintf(why, sizeof why, "%s; worst relative difference %.3g (tolerance %.1g)", ok ? "ran" : err.message, worst, tol);
    mcheck(ok && worst <= tol, c->name, why);
    attn_tensor *all[] = {&q, &k, &v, &dout, &out, &lse, &g[0], &g[1], &g[2], &lq, &lk, &lv, &ldo, &want_o, &want_g[0],
                          &want_g[1], &want_g[2], &lo, &want_l, &ll, &lg[0], &lg[1], &lg[2]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    if (c->mask) free(mask.data);
    if (c->mask == 1) free(lm.data);
}

/* Errors: the same status on every rank, the message naming the rank that
 * had the bad argument. */
static void errors(void) {
    int64_t n = 4 * size_, rows = 4;
    int64_t s[3] = {2, rows + (rank_ == size_ - 1 && size_ > 1 ? 1 : 0), 8}, so_[3] = {2, rows, 8};
    attn_tensor q = make(ATTN_F64, 3, s), out = make(ATTN_F64, 3, so_);
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_CONTIGUOUS, mo.timeout_s = 30;
    attn_error err;
    attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q, &q, &q, &mo, &err);
    char why[ATTN_ERROR_MESSAGE_SIZE + 128];
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    if (size_ > 1) mcheck(st == ATTN_ERR_SHAPE && (rank_ == size_ - 1 || strstr(err.message, "rank ")), "err_shard_size_every_rank", why);
    (void)n;
    s[1] = rows;
    attn_tensor q2 = make(ATTN_F64, 3, s);
    attn_sdpa_options so = attn_sdpa_options_default();
    so.dropout_p = 0.1;
    mo.attention = &so;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q2, &q2, &q2, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_OPTION && strstr(err.message, "dropout"), "err_dropout_refused", why);
    mo.attention = NULL, mo.timeout_s = -1;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q2, &q2, &q2, &mo, &err);
    mcheck(st == ATTN_ERR_OPTION && strstr(err.message, "timeout_s"), "err_timeout_positive", err.message);
    free(q.data), free(out.data), free(q2.data);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_), MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const mcase cases[] = {
        {"ring_f64_plain_zigzag", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_NONE, 37, 37, 2, 2, 2, 2, 0, false},
        {"ring_f64_causal_zigzag", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 40, 40, 1, 1, 4, 2, 0, false},
        {"ring_f64_causal_contiguous", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 29, 29, 1, 1, 2, 1, 0, false},
        {"ring_f64_cross_bottom_right_gqa_broadcast", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_BOTTOM_RIGHT, 23, 41, 2, 1, 4,
         1, 0, false},
        {"ring_f64_cross_top_left_more_queries", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 41, 23, 1, 1, 2, 2, 0,
         false},
        {"ring_f64_bool_mask", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_NONE, 30, 33, 1, 1, 2, 2, 1, false},
        {"ring_f64_float_mask_broadcast_causal", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 33, 33, 1, 1, 2, 2, 2,
         false},
        {"ring_f64_variants_rope_sinks", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_BOTTOM_RIGHT, 35, 35, 1, 1, 2, 1, 0, true},
        {"ring_f32_causal_zigzag", ATTN_F32, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 300, 300, 1, 1, 2, 1, 0, false},
        {"ring_f32_variants_rope_sinks", ATTN_F32, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 90, 90, 1, 1, 2, 2, 0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    errors();
    MPI_Finalize();
    return n_failed ? 1 : 0;
}
