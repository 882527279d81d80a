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

/* max |a - b| over max |b| (b the whole's rows), both like-shaped; NaN
 * where the other is not NaN is infinitely far (fmax would skip it). */
static double rel(const attn_tensor *a, const attn_tensor *b) {
    double d = 0, big = 1e-300;
    for (int64_t i = 0; i < attn_tensor_numel(b); i++) {
        double x = a->dtype == ATTN_F64 ? ((double *)a->data)[i] : ((float *)a->data)[i];
        double y = b->dtype == ATTN_F64 ? ((double *)b->data)[i] : ((float *)b->data)[i];
        if (x == y || (isnan(x) && isnan(y))) continue; /* -inf lse rows too */
        d = isnan(x - y) ? INFINITY : fmax(d, fabs(x - y));
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
    int mask;        /* 0 none, 1 bool (L, S), 2 float (1, S) broadcast over rows, 3 float of rank 0 */
    bool variants;   /* softcap, ALiBi, a window, a sink and RoPE */
    bool nan_query;  /* one element of q NaN: its row NaN, forward and backward */
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
    rng_state = test_seed(4242); /* the same whole tensors on every rank */
    int64_t E = 16, Ev = 8;
    int64_t sq[4] = {c->Bq, c->Hq, c->L, E}, sk[4] = {c->Bk, c->Hk, c->S, E}, sv[4] = {c->Bk, c->Hk, c->S, Ev};
    int64_t so[4] = {c->Bq, c->Hq, c->L, Ev}, sm[2] = {c->mask == 2 ? 1 : c->L, c->S}, hh = c->Hq;
    attn_tensor q = make(c->dt, 4, sq), k = make(c->dt, 4, sk), v = make(c->dt, 4, sv), dout = make(c->dt, 4, so);
    if (c->nan_query) ((double *)q.data)[(c->L / 2) * E + 3] = NAN; /* f64: row L/2 of the first head */
    attn_tensor out = make(c->dt, 4, so), lse = make(c->dt, 3, so), mask = {0};
    attn_tensor g[3] = {make(c->dt, 4, sq), make(c->dt, 4, sk), make(c->dt, 4, sv)};
    if (c->mask) {
        mask = make(c->mask == 1 ? ATTN_BOOL : c->dt, c->mask == 3 ? 0 : 2, sm);
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
    /* An output that overlaps an input, on the last rank only: refused on
     * every rank (the ranks agree on each one's own checks), forward and
     * backward. */
    mo.timeout_s = 30;
    attn_tensor lse2 = make(ATTN_F64, 2, s), *o_or_q = rank_ == size_ - 1 ? &q2 : &out;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, o_or_q, &lse2, &q2, &q2, &q2, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_STRIDE && strstr(err.message, "out and q overlap"), "err_out_on_q_every_rank", why);
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse2, &q2, &q2, &q2, &mo, &err);
    attn_tensor dq = make(ATTN_F64, 3, s);
    st = st ? st : attn_mpi_sdpa_backward(MPI_COMM_WORLD, rank_ == size_ - 1 ? &out : &dq, NULL, NULL, &out, &q2, &q2,
                                          &q2, &out, &lse2, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_STRIDE && strstr(err.message, "dq and dout overlap"), "err_dq_on_dout_every_rank", why);
    /* MPI_COMM_NULL, a communicator that is none: an error, not MPI's
     * abort through MPI_COMM_WORLD's handler. */
    st = attn_mpi_sdpa(MPI_COMM_NULL, &out, &lse2, &q2, &q2, &q2, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "MPI_COMM_NULL"), "err_comm_null_forward", why);
    st = attn_mpi_sdpa_backward(MPI_COMM_NULL, &dq, NULL, NULL, &out, &q2, &q2, &q2, &out, &lse2, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "MPI_COMM_NULL"), "err_comm_null_backward", why);
    attn_mpi_value one = {"a count", ATTN_MPI_INTEGER, 0, 1, 0};
    st = attn_mpi_same(MPI_COMM_NULL, &one, 1, 10, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "MPI_COMM_NULL"), "err_comm_null_same", why);
    /* a negative count is out of range, not a NULL; NULL values are named alone */
    st = attn_mpi_same(MPI_COMM_WORLD, &one, -1, 10, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_ARGUMENT && strstr(err.message, "n is -1; it must be 0 or more"), "err_same_negative_n", why);
    st = attn_mpi_same(MPI_COMM_WORLD, NULL, 1, 10, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "values is NULL (n is 1)"), "err_same_null_values", why);
    free(q.data), free(out.data), free(q2.data), free(lse2.data), free(dq.data);
}

/* Counts of one read "1 rank", "1 query", not "1 ranks": the shard of a
 * rank outside a ring of one, and a sequence of one query and one key too
 * short for the zigzag layout on one rank (which needs 2 of each). */
static void counts_of_one(void) {
    attn_mpi_shard sh;
    attn_error err;
    char why[ATTN_ERROR_MESSAGE_SIZE + 128];
    attn_status st = attn_mpi_shard_of(&sh, 1, 1, 1, ATTN_MPI_CONTIGUOUS, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_ARGUMENT && strstr(err.message, "rank 1 of 1 rank, 1 position: out of range"),
           "err_shard_of_one_rank_singular", why);
    if (size_ != 1) return;
    int64_t s[3] = {1, 1, 8};
    attn_tensor q = make(ATTN_F64, 3, s), out = make(ATTN_F64, 3, s);
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_ZIGZAG, mo.timeout_s = 30;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q, &q, &q, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_SHAPE && strstr(err.message, "1 query and 1 key are too few for 1 rank: the zigzag layout"),
           "err_too_few_for_one_rank_singular", why);
    /* No key is taken, but not a query too few for the layout beside it. */
    int64_t s0[3] = {1, 0, 8};
    attn_tensor k0 = make(ATTN_F64, 3, s0);
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q, &k0, &k0, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_SHAPE && strstr(err.message, "1 query and 0 keys are too few for 1 rank"),
           "err_too_few_queries_beside_no_key", why);
    free(k0.data);
    free(q.data), free(out.data);
}

/* One collective call, every argument of attn_mpi_sdpa and its backward
 * set alike on every rank, so that one of them at a time can be made to
 * differ on one rank. Each tensor's buffer has room for the larger shapes
 * and dtypes that the changes give it. */
typedef struct call {
    int64_t rows, S;
    attn_tensor q, k, v, out, lse, dout, g[3], mask, slopes, sinks;
    const attn_tensor *pq, *pk, *pv; /* q, k, v or NULL */
    attn_tensor *pg[3];              /* dq, dk, dv or NULL */
    attn_sdpa_options so;
    attn_rope_options rope;
    attn_mpi_options mo;
} call;

/* A tensor over a buffer of 8 times its elements in f64 (random values). */
static attn_tensor roomy(attn_dtype dt, int rank, const int64_t *shape) {
    attn_tensor t;
    attn_tensor_init(&t, NULL, dt, rank, shape, NULL, NULL);
    int64_t n = 8 * attn_tensor_numel(&t);
    attn_tensor buf = make(ATTN_F64, 1, &n);
    t.data = buf.data;
    if (dt == ATTN_F32) /* f32 values, not halves of doubles */
        for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = (float)((double *)t.data)[i];
    return t;
}

/* t reshaped in place (same buffer): dtype dt, the given rank and shape. */
static void reshape(attn_tensor *t, attn_dtype dt, int rank, const int64_t *shape) {
    attn_tensor_init(t, t->data, dt, rank, shape, NULL, NULL);
}

/* f32 (so that half k and v, and bf16 compute, are a rank's valid change),
 * causal, with a mask, ALiBi, sinks and RoPE. */
static void call_init(call *c) {
    memset(c, 0, sizeof *c);
    rng_state = test_seed(777); /* the same on every rank */
    c->rows = 4, c->S = 4 * size_; /* four rows a rank under either layout */
    int64_t r = c->rows, H = 2;
    int64_t sq[4] = {2, H, r, 8}, sv[4] = {2, H, r, 6}, sm[4] = {2, 1, r, c->S};
    c->q = roomy(ATTN_F32, 4, sq), c->k = roomy(ATTN_F32, 4, sq), c->v = roomy(ATTN_F32, 4, sv);
    c->out = roomy(ATTN_F32, 4, sv), c->lse = roomy(ATTN_F32, 3, sv), c->dout = roomy(ATTN_F32, 4, sv);
    c->g[0] = roomy(ATTN_F32, 4, sq), c->g[1] = roomy(ATTN_F32, 4, sq), c->g[2] = roomy(ATTN_F32, 4, sv);
    c->mask = roomy(ATTN_BOOL, 4, sm);
    memset(c->mask.data, 1, (size_t)attn_tensor_numel(&c->mask)); /* every key: the mask is only there to differ */
    c->slopes = roomy(ATTN_F32, 1, &H), c->sinks = roomy(ATTN_F32, 1, &H);
    ((float *)c->slopes.data)[0] = 0.5f, ((float *)c->slopes.data)[1] = 0.25f;
    c->pq = &c->q, c->pk = &c->k, c->pv = &c->v;
    for (int i = 0; i < 3; i++) c->pg[i] = &c->g[i];
    c->rope = attn_rope_options_default();
    c->so = attn_sdpa_options_default();
    c->so.has_scale = 1, c->so.scale = 0.3, c->so.causal = ATTN_CAUSAL_TOP_LEFT, c->so.mask = &c->mask;
    c->so.alibi_slopes = &c->slopes, c->so.sinks = &c->sinks, c->so.rope = &c->rope;
    c->mo = attn_mpi_options_default();
    c->mo.attention = &c->so, c->mo.timeout_s = 5;
}

/* out, lse, dout and the gradients shaped for this rank's q, k and v, when
 * they make a valid call: a change leaves the rank's own call valid where
 * it can, so that only the ranks' agreement stands in its way. */
static void fit_outputs(call *c) {
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    attn_error err;
    if (!c->pq || !c->pk || !c->pv || attn_sdpa_shapes(&rank, shape, NULL, c->pq, c->pk, c->pv, NULL, &err)) return;
    attn_dtype dt = c->q.dtype;
    reshape(&c->out, dt, rank, shape), reshape(&c->dout, dt, rank, shape), reshape(&c->lse, dt, rank - 1, shape);
    reshape(&c->g[0], dt, c->q.rank, c->q.shape), reshape(&c->g[1], dt, c->k.rank, c->k.shape);
    reshape(&c->g[2], dt, c->v.rank, c->v.shape);
}

static void call_free(call *c) {
    attn_tensor *all[] = {&c->q, &c->k, &c->v, &c->out, &c->lse, &c->dout, &c->g[0], &c->g[1], &c->g[2],
                          &c->mask, &c->slopes, &c->sinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

static attn_status call_forward(call *c, attn_error *err) {
    return attn_mpi_sdpa(MPI_COMM_WORLD, &c->out, &c->lse, c->pq, c->pk, c->pv, &c->mo, err);
}

static attn_status call_backward(call *c, attn_error *err) {
    return attn_mpi_sdpa_backward(MPI_COMM_WORLD, c->pg[0], c->pg[1], c->pg[2], &c->dout, c->pq, c->pk, c->pv, &c->out,
                                  &c->lse, &c->mo, err);
}

/* Change number `which`: its test name and the field the error must name
 * in *test and *field, and, when apply, the change made to c on this rank.
 * False past the last. Every field that the ranks must hold alike is here. */
static bool change(call *c, int which, bool apply, const char **test, const char **field) {
    int64_t r = c->rows, S = c->S, H3 = 3, H4 = 4;
    int64_t q5[5] = {1, 2, 2, r, 8}, qb[4] = {1, 2, r, 8}, qh[4] = {2, 4, r, 8}, qe[4] = {2, 2, r, 10};
    int64_t v5[5] = {1, 2, 2, r, 6}, vb[4] = {1, 2, r, 6}, vh[4] = {2, 1, r, 6}, ve[4] = {2, 2, r, 7};
    int64_t kb[4] = {1, 2, r, 8}, kh[4] = {2, 1, r, 8}, ke[4] = {2, 2, r, 10};
    int64_t m3[3] = {1, r, S}, mb[4] = {1, 1, r, S}, mh[4] = {2, 2, r, S}, mk[4] = {2, 1, r, 1};
#define CASE(n, t, f, ...)           \
    case n:                          \
        *test = t, *field = f;       \
        if (apply) {                 \
            __VA_ARGS__;             \
            fit_outputs(c);          \
        }                            \
        return true;
    switch (which) {
        CASE(0, "layout", "layout", c->mo.layout = ATTN_MPI_CONTIGUOUS)
        CASE(1, "q_null", "q", c->pq = NULL)
        CASE(2, "q_rank", "q's rank", reshape(&c->q, ATTN_F32, 5, q5))
        CASE(3, "q_dtype", "q's dtype", reshape(&c->q, ATTN_F64, 4, c->q.shape); reshape(&c->k, ATTN_F64, 4, c->k.shape);
             reshape(&c->v, ATTN_F64, 4, c->v.shape))
        CASE(4, "q_batch", "q's dimension 0 (batch)", reshape(&c->q, ATTN_F32, 4, qb))
        CASE(5, "q_heads", "q's dimension 1 (heads)", reshape(&c->q, ATTN_F32, 4, qh); reshape(&c->slopes, ATTN_F32, 1, &H4);
             reshape(&c->sinks, ATTN_F32, 1, &H4))
        CASE(6, "q_e", "q's dimension 3 (E)", reshape(&c->q, ATTN_F32, 4, qe))
        CASE(7, "k_null", "k", c->pk = NULL)
        CASE(8, "k_rank", "k's rank", reshape(&c->k, ATTN_F32, 5, q5))
        CASE(9, "k_dtype", "k's dtype", reshape(&c->k, ATTN_F16, 4, c->k.shape))
        CASE(10, "k_batch", "k's dimension 0 (batch)", reshape(&c->k, ATTN_F32, 4, kb))
        CASE(11, "k_heads", "k's dimension 1 (heads)", reshape(&c->k, ATTN_F32, 4, kh))
        CASE(12, "k_e", "k's dimension 3 (E)", reshape(&c->k, ATTN_F32, 4, ke))
        CASE(13, "v_null", "v", c->pv = NULL)
        CASE(14, "v_rank", "v's rank", reshape(&c->v, ATTN_F32, 5, v5))
        CASE(15, "v_dtype", "v's dtype", reshape(&c->v, ATTN_BF16, 4, c->v.shape))
        CASE(16, "v_batch", "v's dimension 0 (batch)", reshape(&c->v, ATTN_F32, 4, vb))
        CASE(17, "v_heads", "v's dimension 1 (heads)", reshape(&c->v, ATTN_F32, 4, vh))
        CASE(18, "v_ev", "v's dimension 3 (Ev)", reshape(&c->v, ATTN_F32, 4, ve))
        CASE(19, "has_scale", "has_scale", c->so.has_scale = 0)
        CASE(20, "scale", "scale", c->so.scale = 0.31)
        CASE(21, "causal_none", "causal", c->so.causal = ATTN_CAUSAL_NONE)
        CASE(22, "causal_bottom_right", "causal", c->so.causal = ATTN_CAUSAL_BOTTOM_RIGHT)
        CASE(23, "mask_null", "mask", c->so.mask = NULL)
        CASE(24, "mask_rank", "mask's rank", reshape(&c->mask, ATTN_BOOL, 3, m3))
        CASE(25, "mask_dtype", "mask's dtype", reshape(&c->mask, ATTN_F32, 4, c->mask.shape);
             memset(c->mask.data, 0, (size_t)attn_tensor_numel(&c->mask) * 4))
        CASE(26, "mask_batch", "mask's dimension 0 (batch)", reshape(&c->mask, ATTN_BOOL, 4, mb))
        CASE(27, "mask_heads", "mask's dimension 1 (heads)", reshape(&c->mask, ATTN_BOOL, 4, mh))
        CASE(28, "mask_keys", "mask's dimension 3 (keys)", reshape(&c->mask, ATTN_BOOL, 4, mk))
        CASE(29, "compute", "compute", c->so.compute = ATTN_COMPUTE_BF16)
        CASE(30, "softcap", "softcap", c->so.softcap = 5)
        CASE(46, "dropout", "dropout_p", c->so.dropout_p = 0.1)
        CASE(31, "alibi_null", "alibi_slopes", c->so.alibi_slopes = NULL)
        CASE(32, "alibi_dtype", "alibi_slopes' dtype", reshape(&c->slopes, ATTN_F64, 1, c->slopes.shape))
        CASE(33, "alibi_length", "alibi_slopes' dimension 0 (heads)", reshape(&c->slopes, ATTN_F32, 1, &H3))
        CASE(34, "alibi_values", "alibi_slopes' values", ((float *)c->slopes.data)[1] *= 1.0001f)
        CASE(35, "window", "window", c->so.window = 3)
        CASE(36, "sinks_null", "sinks", c->so.sinks = NULL)
        CASE(37, "sinks_dtype", "sinks' dtype", reshape(&c->sinks, ATTN_F64, 1, c->sinks.shape))
        CASE(38, "sinks_values", "sinks' values", ((float *)c->sinks.data)[0] = -1)
        CASE(39, "rope_null", "rope", c->so.rope = NULL)
        CASE(40, "rope_layout", "rope's layout", c->rope.layout = ATTN_ROPE_INTERLEAVED)
        CASE(41, "rope_base", "rope's base", c->rope.base = 500000)
        CASE(42, "rope_rotary_dim", "rope's rotary_dim", c->rope.rotary_dim = 4)
        CASE(43, "rope_position_offset", "rope's position_offset", c->rope.position_offset = 7)
        CASE(44, "rope_linear_scaling", "rope's linear_scaling", c->rope.linear_scaling = 2)
        /* The backward's own: whether dk or dv is asked for (their gradients travel the ring). */
        CASE(45, "dk_dv_null", "dk or dv", c->pg[1] = c->pg[2] = NULL)
    }
#undef CASE
    return false;
}

/* Whether every rank has the same status and message. */
static bool same_everywhere(attn_status st, const char *msg) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    long long mine[4] = {(long long)st, -(long long)st, (long long)(h >> 1), -(long long)(h >> 1)}, all[4];
    MPI_Allreduce(mine, all, 4, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return all[0] == -all[1] && all[2] == -all[3];
}

/* Options that only the last rank has wrong (its timeout, a struct_size):
 * every rank returns that rank's error at once, forward and backward, not
 * ATTN_ERR_COMM after the others waited out their timeout for a rank that
 * had left. And q, k, v NULL or of a wrong rank on every rank: attn_sdpa's
 * words, not "0 queries are too few for the ranks". */
static void one_rank_options(void) {
    int odd = rank_ == size_ - 1;
    int64_t s[3] = {2, 4, 8};
    attn_tensor q = make(ATTN_F64, 3, s), out = make(ATTN_F64, 3, s), lse = make(ATTN_F64, 2, s);
    attn_tensor dq = make(ATTN_F64, 3, s), dk = make(ATTN_F64, 3, s);
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_mpi_options base = attn_mpi_options_default();
    base.timeout_s = 10, base.attention = &o;
    attn_error err;
    char why[ATTN_ERROR_MESSAGE_SIZE + 128], name[96], prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", size_ - 1);
    static const char *const WHAT[3] = {"timeout", "struct_size", "attention_struct_size"};
    static const char *const WANT[3] = {"timeout_s is 0;", "options->struct_size is 3", "options->attention->struct_size is 3"};
    for (int c = 0; c < 3; c++)
        for (int pass = 0; pass < 2; pass++) {
            attn_mpi_options mo = base;
            attn_sdpa_options so = o;
            mo.attention = &so;
            if (odd && c == 0) mo.timeout_s = 0;
            if (odd && c == 1) mo.struct_size = 3;
            if (odd && c == 2) so.struct_size = 3;
            double t0 = MPI_Wtime();
            attn_status st = pass == 0 ? attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &q, &q, &q, &mo, &err)
                                       : attn_mpi_sdpa_backward(MPI_COMM_WORLD, &dq, &dk, NULL, &out, &q, &q, &q, &out, &lse,
                                                                &mo, &err);
            double took = MPI_Wtime() - t0;
            snprintf(why, sizeof why, "status %d after %.1f s: %s", (int)st, took, err.message);
            snprintf(name, sizeof name, "err_one_rank_%s_%s_every_rank", WHAT[c], pass ? "backward" : "forward");
            mcheck(st == ATTN_ERR_OPTION && strstr(err.message, WANT[c]) && (odd || strncmp(err.message, prefix, strlen(prefix)) == 0)
                   && took < 5, name, why);
        }
    attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, NULL, NULL, NULL, &base, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "NULL") && same_everywhere(st, err.message), "err_qkv_null_forward", why);
    st = attn_mpi_sdpa_backward(MPI_COMM_WORLD, &dq, NULL, NULL, &out, NULL, NULL, NULL, &out, &lse, &base, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_NULL && strstr(err.message, "NULL") && same_everywhere(st, err.message), "err_qkv_null_backward", why);
    attn_tensor flat = q;
    flat.rank = 1, flat.shape[0] = 16, flat.strides[0] = 1;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &q, &flat, &q, &base, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
    mcheck(st == ATTN_ERR_RANK && strstr(err.message, "k has rank 1; attention takes ranks 2 to") &&
           same_everywhere(st, err.message), "err_k_rank_1_forward", why);
    free(q.data), free(out.data), free(lse.data), free(dq.data), free(dk.data);
}

/* Each field that the ranks must hold alike made to differ on one rank
 * (rank which % N for change number which): every rank returns the same
 * error, which names the field, forward and backward, before any shard
 * travels (so no rank waits for a message that never comes, nor receives
 * a shard larger than its buffers); and the ring works afterwards. */
static void disagreements(void) {
    if (size_ == 1) {
        if (rank_ == 0) printf("skip ranks_disagree_np1: one rank has no other to disagree with\n");
        return;
    }
    call c;
    call_init(&c);
    attn_error err;
    attn_status st = call_forward(&c, &err);
    if (!st) st = call_backward(&c, &err);
    mcheck(st == ATTN_OK, "ranks_agree_base_call", err.message);
    const char *test, *field;
    for (int which = 0; change(&c, which, false, &test, &field); which++) {
        bool backward_only = strcmp(field, "dk or dv") == 0;
        for (int pass = backward_only; pass < 2; pass++) {
            call_free(&c), call_init(&c);
            change(&c, which, rank_ == which % size_, &test, &field);
            memset(&err, 0, sizeof err);
            st = pass == 0 ? call_forward(&c, &err) : call_backward(&c, &err);
            char want[128], name[96], why[ATTN_ERROR_MESSAGE_SIZE + 64];
            snprintf(want, sizeof want, "the ranks disagree on %s", field);
            snprintf(name, sizeof name, "ranks_disagree_%s_%s", pass ? "backward" : "forward", test);
            snprintf(why, sizeof why, "status %d: %s", (int)st, err.message);
            size_t n = strlen(want);
            bool named = strncmp(err.message, want, n) == 0 && (err.message[n] == ':' || err.message[n] == ' ');
            mcheck(st != ATTN_OK && st != ATTN_ERR_COMM && named && same_everywhere(st, err.message), name, why);
        }
    }
    /* What is each rank's own may differ: whether lse and dq are wanted,
     * dk without dv, the timeout, the threads, the stats, a mask row for
     * every query or one for all. */
    call_free(&c), call_init(&c);
    attn_mpi_stats stats;
    attn_context ctx = attn_context_default();
    ctx.num_threads = 1;
    attn_tensor *lse = &c.lse;
    if (rank_ == 1) {
        int64_t m1[4] = {2, 1, 1, c.S};
        c.mo.timeout_s = 9, c.mo.stats = &stats, c.so.context = &ctx, lse = NULL, c.pg[0] = NULL;
        reshape(&c.mask, ATTN_BOOL, 4, m1);
    }
    if (rank_ == 0) c.pg[1] = NULL;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &c.out, lse, c.pq, c.pk, c.pv, &c.mo, &err);
    if (!st) st = call_backward(&c, &err);
    mcheck(st == ATTN_OK && same_everywhere(st, st ? err.message : ""), "ranks_may_differ_in_their_own", err.message);
    call_free(&c), call_init(&c);
    st = call_forward(&c, &err);
    if (!st) st = call_backward(&c, &err);
    mcheck(st == ATTN_OK, "ranks_agree_after_disagreeing", err.message);
    call_free(&c);
}

/* Quantized keys or values, whose rows the ring would measure as 0 bytes
 * and send as nothing: ATTN_ERR_DTYPE on every rank, forward (fp8 keys
 * with their scales, as attn_sdpa takes them) and backward, and from
 * attn_mpi_shard_rows, rather than an attention of whatever the buffers
 * held. */
/* A mask of a rank no tensor has: attn_sdpa's error on every rank, read
 * from its rank alone (its shape past ATTN_MAX_RANK is no dimension), the
 * forward's and the backward's. */
static void mask_rank_out_of_range(void) {
    int64_t rows = 2, n = 4 * size_, s[3] = {2, rows, 4}, ls[2] = {2, rows};
    attn_tensor q = make(ATTN_F64, 3, s), out = make(ATTN_F64, 3, s), lse = make(ATTN_F64, 2, ls), dq = make(ATTN_F64, 3, s);
    int64_t ms[2] = {rows, n};
    attn_tensor mask = make(ATTN_F64, 2, ms);
    attn_sdpa_options so = attn_sdpa_options_default();
    so.mask = &mask;
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_CONTIGUOUS, mo.timeout_s = 30, mo.attention = &so;
    attn_error err;
    char why[ATTN_ERROR_MESSAGE_SIZE + 128], name[64];
    const int RANKS[3] = {ATTN_MAX_RANK + 1, 1000, -1};
    for (int i = 0; i < 3; i++) {
        mask.rank = RANKS[i];
        attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &q, &q, &q, &mo, &err);
        attn_status sb = attn_mpi_sdpa_backward(MPI_COMM_WORLD, &dq, NULL, NULL, &out, &q, &q, &q, &out, &lse, &mo, &err);
        char want[64];
        snprintf(want, sizeof want, "mask has rank %d but the output has rank 3", RANKS[i]);
        snprintf(why, sizeof why, "status %d, %d: %s", (int)st, (int)sb, err.message);
        snprintf(name, sizeof name, "err_mask_rank_%s", i == 0 ? "above_max" : i == 1 ? "far_above_max" : "negative");
        mcheck(st == ATTN_ERR_MASK && sb == ATTN_ERR_MASK && strstr(err.message, want) && same_everywhere(sb, err.message),
               name, why);
    }
    free(q.data), free(out.data), free(lse.data), free(dq.data), free(mask.data);
}

/* attn_mpi_shard_rows and attn_mpi_unshard_rows with a shard that is no
 * layout's: more segments than a shard has, segments whose lengths are
 * not its rows, a segment past the whole or beyond int64_t. Refused, and
 * nothing written (the copy ran past local's rows, or whole's). */
static void shard_struct_checked(void) {
    int64_t ws[2] = {8, 2}, ls[2] = {4, 2};
    double whole[16 + 8], local[8 + 8]; /* room past each: a write there is seen, not a crash */
    attn_tensor tw, tl;
    attn_tensor_init(&tw, whole, ATTN_F64, 2, ws, NULL, NULL), attn_tensor_init(&tl, local, ATTN_F64, 2, ls, NULL, NULL);
    const attn_mpi_shard BAD[] = {
        {3, {0, 4}, {2, 2}, 4},              /* three segments */
        {0, {0, 0}, {0, 0}, 4},              /* none */
        {2, {0, 4}, {4, 4}, 4},              /* 8 rows in segments of a 4-row shard */
        {2, {0, 6}, {1, 1}, 4},              /* 2 rows in segments of a 4-row shard */
        {1, {INT64_MAX, 0}, {4, 0}, 4},      /* a start beyond int64_t's end once added */
        {2, {0, 0}, {-2, 6}, 4},             /* a negative length */
    };
    char why[ATTN_ERROR_MESSAGE_SIZE + 128], name[64];
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        for (int j = 0; j < 24; j++) whole[j] = j;
        for (int j = 0; j < 16; j++) local[j] = -1;
        attn_error err;
        attn_status a = attn_mpi_shard_rows(&tl, &tw, 0, &BAD[i], &err);
        attn_status b = attn_mpi_unshard_rows(&tw, &tl, 0, &BAD[i], &err);
        bool untouched = true;
        for (int j = 0; j < 24; j++) untouched &= whole[j] == j;
        for (int j = 0; j < 16; j++) untouched &= local[j] == -1;
        snprintf(why, sizeof why, "status %d, %d, untouched %d: %s", (int)a, (int)b, untouched, err.message);
        snprintf(name, sizeof name, "err_shard_struct_%zu", i);
        mcheck(a == ATTN_ERR_SHAPE && b == ATTN_ERR_SHAPE && untouched, name, why);
    }
}

static void quantized_keys(void) {
    int64_t H = 2, s[3] = {H, 4, 8};
    attn_tensor q = make(ATTN_F32, 3, s), k = make(ATTN_F32, 3, s), v = make(ATTN_F32, 3, s);
    attn_tensor out = make(ATTN_F32, 3, s), lse = make(ATTN_F32, 2, s), dq = make(ATTN_F32, 3, s), k8, v8;
    attn_tensor_init(&k8, k.data, ATTN_E4M3, 3, s, NULL, NULL); /* a byte an element: k's buffer has room */
    attn_tensor_init(&v8, v.data, ATTN_E5M2, 3, s, NULL, NULL);
    memset(k8.data, 0x30, (size_t)attn_tensor_numel(&k8)); /* 0.5 in e4m3 */
    memset(v8.data, 0x38, (size_t)attn_tensor_numel(&v8)); /* 0.5 in e5m2 */
    float scales[2] = {0.5f, 0.25f};
    attn_tensor kd;
    attn_tensor_init(&kd, scales, ATTN_F32, 1, &H, NULL, NULL);
    attn_sdpa_options so = attn_sdpa_options_default();
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_CONTIGUOUS, mo.timeout_s = 30, mo.attention = &so;
    attn_error err;
    char why[ATTN_ERROR_MESSAGE_SIZE + 128];
    so.k_descale = &kd;
    attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &q, &k8, &v, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, st ? err.message : "");
    mcheck(st == ATTN_ERR_DTYPE && strstr(err.message, "k is e4m3; the ring takes float keys and values") &&
           same_everywhere(st, err.message), "err_fp8_keys_forward", why);
    so.k_descale = NULL;
    attn_tensor kc = k8; /* keys quantized per channel: counted in groups of positions, no bytes an element either */
    kc.dtype = ATTN_Q4C;
    st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, &lse, &q, &kc, &v, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, st ? err.message : "");
    mcheck(st == ATTN_ERR_DTYPE && strstr(err.message, "k is q4c; the ring takes float keys and values") &&
           same_everywhere(st, err.message), "err_q4c_keys_forward", why);
    st = attn_mpi_sdpa_backward(MPI_COMM_WORLD, &dq, NULL, NULL, &out, &q, &k, &v8, &out, &lse, &mo, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, st ? err.message : "");
    mcheck(st == ATTN_ERR_DTYPE && strstr(err.message, "v is e5m2; the ring takes float keys and values") &&
           same_everywhere(st, err.message), "err_fp8_values_backward", why);
    attn_mpi_shard sh;
    attn_mpi_shard_of(&sh, 4, 0, 1, ATTN_MPI_CONTIGUOUS, NULL);
    k8.dtype = ATTN_E5M2; /* whole and local of one dtype, refused for being quantized */
    st = attn_mpi_shard_rows(&v8, &k8, -2, &sh, &err);
    snprintf(why, sizeof why, "status %d: %s", (int)st, st ? err.message : "");
    mcheck(st == ATTN_ERR_DTYPE && strstr(err.message, "e5m2 rows cannot be copied by element"), "err_shard_rows_fp8", why);
    free(q.data), free(k.data), free(v.data), free(out.data), free(lse.data), free(dq.data);
}

/* 16-bit queries, which the ring cannot accumulate in: ATTN_ERR_DTYPE on
 * every rank, forward and backward, before any out is written. */
static void half_queries(void) {
    int64_t s[3] = {2, 4, 8};
    attn_tensor q = make(ATTN_F32, 3, s), k = make(ATTN_F32, 3, s), v = make(ATTN_F32, 3, s);
    attn_tensor out = make(ATTN_F32, 3, s), lse = make(ATTN_F32, 2, s), dq = make(ATTN_F32, 3, s), q16, out16;
    attn_tensor_init(&q16, q.data, ATTN_F16, 3, s, NULL, NULL), attn_tensor_init(&out16, out.data, ATTN_F16, 3, s, NULL, NULL);
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_CONTIGUOUS, mo.timeout_s = 30;
    attn_error err;
    char why[ATTN_ERROR_MESSAGE_SIZE + 128];
    for (int pass = 0; pass < 2; pass++) {
        attn_status st = pass == 0
                             ? attn_mpi_sdpa(MPI_COMM_WORLD, &out16, NULL, &q16, &k, &v, &mo, &err)
                             : attn_mpi_sdpa_backward(MPI_COMM_WORLD, &dq, NULL, NULL, &out16, &q16, &k, &v, &out16, &lse, &mo, &err);
        snprintf(why, sizeof why, "status %d: %s", (int)st, st ? err.message : "");
        mcheck(st == ATTN_ERR_DTYPE && strstr(err.message, "q is f16; the ring takes f32 or f64 queries") &&
               same_everywhere(st, err.message), pass ? "err_half_queries_backward" : "err_half_queries_forward", why);
    }
    free(q.data), free(k.data), free(v.data), free(out.data), free(lse.data), free(dq.data);
}

/* attn_mpi_same itself: each kind's message, the default status, and
 * ranks that pass different numbers of values. */
static void same_api(void) {
    attn_error err;
    int differ = size_ > 1 && rank_ == size_ - 1; /* the one rank that holds other values */
    attn_mpi_value v[5] = {
        {"a count", ATTN_MPI_INTEGER, ATTN_ERR_SHAPE, differ ? 7 : 5, 0},
        {"a real", ATTN_MPI_REAL, ATTN_ERR_SCALE, 0, differ ? -0.25 : 0.5},
        {"a dtype", ATTN_MPI_DTYPE, ATTN_ERR_DTYPE, differ ? ATTN_F16 : ATTN_F32, 0},
        {"a tensor", ATTN_MPI_GIVEN, ATTN_ERR_NULL, !differ, 0},
        {"a path", ATTN_MPI_DIGEST, 0, attn_mpi_digest(differ ? "b.npy" : "a.npy", 5), 0},
    };
    static const char *const WANT[5] = {
        "the ranks disagree on a count: 5 on some ranks, 7 on others",
        "the ranks disagree on a real: -0.25 on some ranks, 0.5 on others",
        "the ranks disagree on a dtype: f32 on some ranks, f16 on others",
        "the ranks disagree on a tensor: given on some ranks, not on others",
        "the ranks disagree on a path: not the same on every rank",
    };
    static const attn_status CODE[5] = {ATTN_ERR_SHAPE, ATTN_ERR_SCALE, ATTN_ERR_DTYPE, ATTN_ERR_NULL, ATTN_ERR_ARGUMENT};
    attn_status st = attn_mpi_same(MPI_COMM_WORLD, v, 5, 10, &err);
    if (size_ == 1) {
        mcheck(st == ATTN_OK, "same_one_rank_agrees", err.message);
        return;
    }
    for (int i = 0; i < 5; i++) {
        char name[64];
        st = attn_mpi_same(MPI_COMM_WORLD, v + i, 5 - i, 10, &err); /* value i is the first that differs */
        snprintf(name, sizeof name, "same_names_the_first_difference_%d", i);
        mcheck(st == CODE[i] && strcmp(err.message, WANT[i]) == 0 && same_everywhere(st, err.message), name, err.message);
    }
    st = attn_mpi_same(MPI_COMM_WORLD, v, differ ? 2 : 1, 10, &err);
    mcheck(st == ATTN_ERR_ARGUMENT && strstr(err.message, "different numbers of values") &&
           same_everywhere(st, err.message), "same_different_counts", err.message);
    v[0].value = v[1].real = 1, v[2].value = ATTN_F32, v[3].value = 1, v[4].value = 3;
    st = attn_mpi_same(MPI_COMM_WORLD, v, 5, 10, &err);
    mcheck(st == ATTN_OK, "same_alike_agrees", err.message);
    mcheck(attn_mpi_same(MPI_COMM_WORLD, NULL, 0, 10, &err) == ATTN_OK, "same_no_values", err.message);
}

/* The rank whose ring messages are held back (-1: none). MPI's profiling
 * interface lets a program stand in for MPI_Irecv and MPI_Isend (PMPI_ is
 * MPI's own): on that rank, on the ring's private communicator (the
 * test's own messages are on MPI_COMM_WORLD), each is replaced by a
 * receive that nothing matches, so that the rank seems to stop after the
 * ring's setup, just before its first messages, and never posts them
 * later (where a message would land in a buffer its receiver had freed). */
static int held_rank = -1;
static char held_dummy[2];

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request *req) {
    if (rank_ == held_rank && comm != MPI_COMM_WORLD) return PMPI_Irecv(held_dummy, 1, MPI_BYTE, source, 999, comm, req);
    return PMPI_Irecv(buf, count, type, source, tag, comm, req);
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request *req) {
    if (rank_ == held_rank && comm != MPI_COMM_WORLD) return PMPI_Irecv(held_dummy + 1, 1, MPI_BYTE, dest, 998, comm, req);
    return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}

/* One rank (1) holds its ring messages back: the others time out and say
 * which message did not complete. Its left neighbour's send to it stays
 * pending (a shard of 1 MiB, past any eager limit, waits for a receive)
 * while the receive from the left completed: the error names the send
 * to rank 1, not the left neighbour it said before. Its right
 * neighbour's receive from it stays pending while the send to the right
 * completed. Each within the timeout and a little more. */
static void held_messages(void) {
    if (size_ < 3) {
        if (rank_ == 0) printf("skip ring_timeout_names_the_message_np%d: needs 3 ranks (left and right neighbours apart)\n", size_);
        return;
    }
    int64_t L = 512 * (int64_t)size_, whole[3] = {2, L, 64}, mine[3] = {2, L / size_, 64};
    (void)whole;
    attn_tensor q = make(ATTN_F64, 3, mine), k = make(ATTN_F64, 3, mine), v = make(ATTN_F64, 3, mine);
    attn_tensor out = make(ATTN_F64, 3, mine);
    attn_mpi_options mo = attn_mpi_options_default();
    mo.layout = ATTN_MPI_CONTIGUOUS, mo.timeout_s = 2;
    attn_error err;
    held_rank = 1;
    double t0 = MPI_Wtime();
    attn_status st = attn_mpi_sdpa(MPI_COMM_WORLD, &out, NULL, &q, &k, &v, &mo, &err);
    double took = MPI_Wtime() - t0;
    held_rank = -1;
    char why[ATTN_ERROR_MESSAGE_SIZE + 64];
    snprintf(why, sizeof why, "status %d after %.1f s: %s", (int)st, took, err.message);
    bool named = true;
    char want[160];
    if (rank_ == 0) { /* left of rank 1 */
        snprintf(want, sizeof want, "the send to rank 1 did not complete within 2 s (the receive from rank %d did): "
                 "rank 1 stopped", size_ - 1);
        named = strstr(err.message, want) != NULL;
    } else if (rank_ == 2) { /* right of rank 1 */
        snprintf(want, sizeof want, "the receive from rank 1 did not complete within 2 s (the send to rank %d did): "
                 "rank 1 stopped", 3 % size_);
        named = strstr(err.message, want) != NULL;
    } else if (rank_ == 1) {
        named = strstr(err.message, "neither the receive from rank 0 nor the send to rank 2 completed within 2 s") != NULL;
    }
    mcheck(st == ATTN_ERR_COMM && named && took < 6, "ring_timeout_names_the_message", why);
    free(q.data), free(k.data), free(v.data), free(out.data);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_), MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const mcase cases[] = {
        {"ring_f64_plain_zigzag", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_NONE, 37, 37, 2, 2, 2, 2, 0, false, false},
        {"ring_f64_causal_zigzag", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 40, 40, 1, 1, 4, 2, 0, false, false},
        {"ring_f64_causal_contiguous", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 29, 29, 1, 1, 2, 1, 0, false, false},
        {"ring_f64_cross_bottom_right_gqa_broadcast", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_BOTTOM_RIGHT, 23, 41, 2, 1, 4,
         1, 0, false, false},
        {"ring_f64_cross_top_left_more_queries", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 41, 23, 1, 1, 2, 2, 0,
         false, false},
        {"ring_f64_bool_mask", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_NONE, 30, 33, 1, 1, 2, 2, 1, false, false},
        {"ring_f64_float_mask_broadcast_causal", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 33, 33, 1, 1, 2, 2, 2,
         false, false},
        /* A mask of rank 0, one bias for every score, as attn_sdpa takes it. */
        {"ring_f64_scalar_mask_causal", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 31, 31, 1, 1, 2, 1, 3, false, false},
        {"ring_f64_variants_rope_sinks", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_BOTTOM_RIGHT, 35, 35, 1, 1, 2, 1, 0, true, false},
        {"ring_f32_causal_zigzag", ATTN_F32, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 300, 300, 1, 1, 2, 1, 0, false, false},
        {"ring_f32_variants_rope_sinks", ATTN_F32, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 90, 90, 1, 1, 2, 2, 0, true, false},
        /* One contiguous rank: its one piece holds every key, and is
         * differentiated as a whole call, which needs the sink. */
        {"ring_f64_variants_sinks_contiguous_more_queries", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_TOP_LEFT, 40, 25, 1,
         1, 2, 1, 0, true, false},
        {"ring_f64_nan_query_row_stays_nan", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 26, 26, 1, 1, 2, 1, 0, false,
         true},
        /* Dimensions of 0, as attn_sdpa takes them: nothing travels, and
         * each rank's rows are the whole's (S = 0 with sinks: lse the sink). */
        {"ring_f64_no_queries_bool_mask", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_TOP_LEFT, 0, 37, 1, 1, 2, 2, 1, false, false},
        {"ring_f64_no_keys_variants_sinks", ATTN_F64, ATTN_MPI_ZIGZAG, ATTN_CAUSAL_BOTTOM_RIGHT, 37, 0, 1, 1, 2, 1, 0, true,
         false},
        {"ring_f32_batch_of_0", ATTN_F32, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_NONE, 29, 29, 0, 0, 2, 2, 0, false, false},
        {"ring_f64_no_queries_no_keys_float_mask", ATTN_F64, ATTN_MPI_CONTIGUOUS, ATTN_CAUSAL_NONE, 0, 0, 2, 1, 2, 2, 2, false,
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    errors();
    counts_of_one();
    same_api();
    one_rank_options();
    disagreements();
    quantized_keys();
    mask_rank_out_of_range();
    shard_struct_checked();
    half_queries();
    held_messages();
    MPI_Finalize();
    return n_failed ? 1 : 0;
}
