/* test_backward.c -- attn_sdpa_backward through the public API:
 *   - f64 central finite differences of loss = sum(dout ∘ out) against every
 *     gradient element, on small cases (an oracle independent of PyTorch);
 *   - the errors, each with its status and message, and nothing written;
 *   - the caller's workspace;
 *   - the calls that take the most scratch buffers at once;
 *   - an output with stride 0 in a dimension of size > 1, refused by every
 *     gradient (and by the layer's forward) before anything is written.
 * Prints "ok NAME" or "FAIL NAME: why". */
#include "check.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/philox.h"
#include "tensors.h"

static void check_status(attn_status got, const attn_error *err, attn_status want, const char *needle,
                         const char *name) {
    int ok = got == want && (want == ATTN_OK || (err->status == want && strstr(err->message, needle)));
    check(ok, name, "status %d (%s), message \"%s\"; wanted %d with \"%s\"", (int)got, attn_strerror(got),
          want == ATTN_OK ? "" : err->message, (int)want, needle);
}

/* One problem: inputs, the forward's outputs, dout and the gradients. */
typedef struct problem {
    attn_tensor q, k, v, mask, out, lse, dout, g[4]; /* g: dq, dk, dv, dmask */
    attn_sdpa_options o;
} problem;

static void problem_init(problem *p, const int64_t *sq, const int64_t *sk, const int64_t *sv, int rank,
                         const int64_t *smask, int mask_rank, attn_dtype mask_dtype, attn_causal causal) {
    memset(p, 0, sizeof *p);
    p->q = make(ATTN_F64, rank, sq);
    p->k = make(ATTN_F64, rank, sk);
    p->v = make(ATTN_F64, rank, sv);
    p->o = attn_sdpa_options_default();
    p->o.causal = causal;
    if (smask) p->mask = make(mask_dtype, mask_rank, smask), p->o.mask = &p->mask;
    int r;
    int64_t so[ATTN_MAX_RANK];
    attn_sdpa_shapes(&r, so, NULL, &p->q, &p->k, &p->v, &p->o, NULL);
    p->out = make(ATTN_F64, r, so);
    p->lse = make(ATTN_F64, r - 1, so);
    p->dout = make(ATTN_F64, r, so);
    const attn_tensor *like[4] = {&p->q, &p->k, &p->v, &p->mask};
    for (int i = 0; i < 4; i++)
        if (like[i]->data) p->g[i] = make(ATTN_F64, like[i]->rank, like[i]->shape);
}

static void problem_free(problem *p) {
    attn_tensor *all[] = {&p->q, &p->k, &p->v, &p->mask, &p->out, &p->lse, &p->dout,
                          &p->g[0], &p->g[1], &p->g[2], &p->g[3]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* loss = sum(dout ∘ out) for the problem's current inputs. */
static double loss(problem *p) {
    attn_sdpa(&p->out, &p->lse, NULL, &p->q, &p->k, &p->v, &p->o, NULL);
    double s = 0;
    for (int64_t i = 0; i < attn_tensor_numel(&p->out); i++)
        s += ((double *)p->dout.data)[i] * ((double *)p->out.data)[i];
    return s;
}

static attn_status backward(problem *p, attn_error *err) {
    attn_sdpa(&p->out, &p->lse, NULL, &p->q, &p->k, &p->v, &p->o, NULL);
    attn_tensor *dmask = p->mask.data && p->mask.dtype != ATTN_BOOL ? &p->g[3] : NULL;
    return attn_sdpa_backward(&p->g[0], &p->g[1], &p->g[2], dmask, &p->dout, &p->q, &p->k, &p->v, &p->out,
                              &p->lse, &p->o, err);
}

/* Every element of every gradient against a central difference with step
 * h = 1e-5: its truncation error is O(h²) ~ 1e-10 and its rounding error
 * ~1e-16·|loss|/h ~ 1e-10, so 1e-7 relative leaves a wide margin while any
 * wrong term (a missing scale, a dropped mask) is off by O(1). */
static void finite_differences(const char *name, problem *p) {
    attn_error err;
    attn_status st = backward(p, &err);
    if (st != ATTN_OK) {
        check(0, name, "backward failed: %s", err.message);
        return;
    }
    attn_tensor *in[4] = {&p->q, &p->k, &p->v, &p->mask};
    static const char *const G[4] = {"dq", "dk", "dv", "dmask"};
    const double h = 1e-5;
    double worst = 0;
    char where[64] = "";
    for (int t = 0; t < 4; t++) {
        if (!in[t]->data || in[t]->dtype == ATTN_BOOL) continue;
        double *x = in[t]->data, *g = p->g[t].data;
        for (int64_t i = 0; i < attn_tensor_numel(in[t]); i++) {
            double x0 = x[i];
            x[i] = x0 + h;
            double up = loss(p);
            x[i] = x0 - h;
            double down = loss(p);
            x[i] = x0;
            double fd = (up - down) / (2 * h), e = fabs(fd - g[i]) / (1 + fabs(fd));
            if (e > worst) worst = e, snprintf(where, sizeof where, "%s[%lld]", G[t], (long long)i);
        }
    }
    check(worst < 1e-7, name, "worst relative difference %.3g at %s", worst, where);
}

static void test_finite_differences(void) {
    problem p;
    /* GQA (4 query heads, 2 KV heads), a float mask shared by the heads,
     * bottom-right causal, Ev != E. */
    int64_t sq[3] = {4, 5, 3}, sk[3] = {2, 7, 3}, sv[3] = {2, 7, 2}, sm[2] = {5, 7};
    problem_init(&p, sq, sk, sv, 3, sm, 2, ATTN_F64, ATTN_CAUSAL_BOTTOM_RIGHT);
    finite_differences("finite_differences_gqa_float_mask_causal", &p);
    problem_free(&p);
    /* A query broadcast over a batch of 3, a bool mask, a scale of 0.8. */
    int64_t sq2[4] = {1, 2, 4, 3}, sk2[4] = {3, 2, 6, 3}, sbm[4] = {3, 1, 4, 6};
    problem_init(&p, sq2, sk2, sk2, 4, sbm, 4, ATTN_BOOL, ATTN_CAUSAL_NONE);
    p.o.has_scale = 1, p.o.scale = 0.8;
    finite_differences("finite_differences_broadcast_batch_bool_mask", &p);
    problem_free(&p);
    /* Rank 2, top-left causal with L > S: rows past S see every key, the
     * first rows only a few. */
    int64_t sq3[2] = {6, 4}, sk3[2] = {4, 4};
    problem_init(&p, sq3, sk3, sk3, 2, NULL, 0, ATTN_F64, ATTN_CAUSAL_TOP_LEFT);
    finite_differences("finite_differences_rank2_causal", &p);
    problem_free(&p);
}

static void test_errors(void) {
    problem p;
    attn_error err;
    int64_t sq[3] = {2, 3, 4}, sk[3] = {2, 5, 4}, sm[2] = {3, 5};
    problem_init(&p, sq, sk, sk, 3, sm, 2, ATTN_BOOL, ATTN_CAUSAL_NONE);
    attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &p.o, NULL);
    memset(p.g[0].data, 0x5a, 8);
    attn_tensor *dq = &p.g[0], *dk = &p.g[1], *dv = &p.g[2];
    check_status(attn_sdpa_backward(NULL, NULL, NULL, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err),
                 &err, ATTN_ERR_NULL, "ask for one gradient", "backward_no_gradient_rejected");
    check_status(attn_sdpa_backward(dq, dk, dv, NULL, NULL, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err), &err,
                 ATTN_ERR_NULL, "dout is NULL", "backward_null_dout_rejected");
    check_status(attn_sdpa_backward(dq, dk, dv, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out, NULL, &p.o, &err),
                 &err, ATTN_ERR_NULL, "lse", "backward_null_lse_rejected");
    check_status(attn_sdpa_backward(dq, dk, dv, &p.g[1], &p.dout, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err),
                 &err, ATTN_ERR_MASK, "float mask", "backward_dmask_with_bool_mask_rejected");
    /* dk shaped like q, dout shaped like q. */
    check_status(attn_sdpa_backward(dq, dq, dv, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err),
                 &err, ATTN_ERR_SHAPE, "dk has shape (2, 3, 4) but k has shape (2, 5, 4)",
                 "backward_dk_shape_rejected");
    check_status(attn_sdpa_backward(dq, dk, dv, NULL, &p.k, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err), &err,
                 ATTN_ERR_SHAPE, "dout has shape", "backward_dout_shape_rejected");
    attn_tensor f32 = p.g[0];
    f32.dtype = ATTN_F32;
    check_status(attn_sdpa_backward(&f32, dk, dv, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err),
                 &err, ATTN_ERR_DTYPE, "dq is f32; it must be f64", "backward_dq_dtype_rejected");
    attn_tensor flat = p.g[0];
    flat.strides[0] = 0;
    check_status(attn_sdpa_backward(&flat, dk, dv, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out, &p.lse, &p.o, &err),
                 &err, ATTN_ERR_STRIDE, "dq has stride 0", "backward_dq_stride_0_rejected");
    /* The bf16 compute mode takes f32 inputs only, as the forward does
     * (test_amx checks the mode's gradients). */
    int64_t so[3] = {2, 3, 4}, sl[2] = {2, 3};
    attn_tensor q32 = make(ATTN_F32, 3, sq), k32 = make(ATTN_F32, 3, sk), o32 = make(ATTN_F32, 3, so);
    attn_tensor l32 = make(ATTN_F32, 2, sl), d32 = make(ATTN_F32, 3, so), g32 = make(ATTN_F32, 3, sq);
    attn_sdpa_options bf = attn_sdpa_options_default();
    bf.compute = ATTN_COMPUTE_BF16;
    check_status(attn_sdpa_backward(&p.g[0], NULL, NULL, NULL, &p.dout, &p.q, &p.k, &p.v, &p.out,
                                    &p.lse, &bf, &err),
                 &err, ATTN_ERR_OPTION, "bf16 compute needs an f32 or 16-bit q; q is f64", "backward_bf16_compute_f64_rejected");
    check_status(attn_sdpa_backward(&g32, NULL, NULL, NULL, &d32, &q32, &k32, &k32, &o32, &l32, &bf, &err), &err,
                 ATTN_OK, "", "backward_bf16_compute_f32_runs");
    /* Per-head scales are for fp8 keys and values, which the backward does
     * not take: beside f32 ones they are refused, as the forward refuses
     * them (they were ignored). */
    int64_t sh[1] = {2};
    attn_tensor ds = make(ATTN_F32, 1, sh);
    attn_sdpa_options scaled = attn_sdpa_options_default();
    scaled.k_descale = &ds;
    check_status(attn_sdpa_backward(&g32, NULL, NULL, NULL, &d32, &q32, &k32, &k32, &o32, &l32, &scaled, &err), &err,
                 ATTN_ERR_DTYPE, "k_descale is set but k is f32", "backward_k_descale_beside_f32_keys_rejected");
    scaled.k_descale = NULL, scaled.v_descale = &ds;
    check_status(attn_sdpa_backward(&g32, NULL, NULL, NULL, &d32, &q32, &k32, &k32, &o32, &l32, &scaled, &err), &err,
                 ATTN_ERR_DTYPE, "v_descale is set but v is f32", "backward_v_descale_beside_f32_values_rejected");
    free(ds.data);
    free(q32.data), free(k32.data), free(o32.data), free(l32.data), free(d32.data), free(g32.data);
    unsigned char first[8];
    memcpy(first, p.g[0].data, 8);
    check(first[0] == 0x5a && first[7] == 0x5a, "backward_errors_write_nothing", "dq was written");
    problem_free(&p);
}

/* The workspace: measured, enough, one byte short. */
static void test_workspace(void) {
    problem p;
    attn_error err;
    int64_t sq[3] = {2, 9, 4}, sk[3] = {2, 11, 4}, sm[2] = {9, 11};
    problem_init(&p, sq, sk, sk, 3, sm, 2, ATTN_F64, ATTN_CAUSAL_TOP_LEFT);
    attn_status st = backward(&p, &err);
    attn_tensor ref = make(ATTN_F64, 3, sq);
    memcpy(ref.data, p.g[0].data, sizeof(double) * 2 * 9 * 4);
    attn_context ctx = attn_context_default();
    p.o.context = &ctx;
    size_t need = 0;
    st |= attn_sdpa_backward_workspace_size(&need, &p.g[0], &p.g[1], &p.g[2], &p.g[3], &p.dout, &p.q, &p.k, &p.v,
                                            &p.out, &p.lse, &p.o, &err);
    char *mem = malloc(need);
    ctx.workspace = mem, ctx.workspace_size = need;
    memset(p.g[0].data, 0, sizeof(double) * 2 * 9 * 4);
    st |= backward(&p, &err);
    check(st == ATTN_OK && memcmp(ref.data, p.g[0].data, sizeof(double) * 2 * 9 * 4) == 0,
          "backward_workspace_bitwise_equals_malloc", "status %d (%s)", (int)st, st ? err.message : "");
    ctx.workspace_size = need - 1;
    check_status(backward(&p, &err), &err, ATTN_ERR_WORKSPACE, "needs", "backward_workspace_too_small_rejected");
    free(mem), free(ref.data);
    problem_free(&p);

    /* The fused kernel with GQA (dk and dv shared: partials and f64 sums)
     * and a query broadcast over a batch (dq shared): the measured size is
     * enough, exactly. */
    int64_t sq2[4] = {1, 4, 40, 16}, sk2[4] = {3, 2, 70, 16}, so2[4] = {3, 4, 40, 16}, sl2[3] = {3, 4, 40};
    attn_tensor q = make(ATTN_F32, 4, sq2), k = make(ATTN_F32, 4, sk2), out = make(ATTN_F32, 4, so2);
    attn_tensor lse = make(ATTN_F32, 3, sl2), dout = make(ATTN_F32, 4, so2);
    attn_tensor dq = make(ATTN_F32, 4, sq2), dk = make(ATTN_F32, 4, sk2), dv = make(ATTN_F32, 4, sk2);
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_context c2 = attn_context_default();
    o.context = &c2;
    attn_status st2 = attn_sdpa(&out, &lse, NULL, &q, &k, &k, &o, &err);
    st2 |= attn_sdpa_backward_workspace_size(&need, &dq, &dk, &dv, NULL, &dout, &q, &k, &k, &out, &lse, &o, &err);
    mem = malloc(need);
    c2.workspace = mem, c2.workspace_size = need;
    verbose_begin();
    st2 |= attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &q, &k, &k, &out, &lse, &o, &err);
    char kernel[32];
    verbose_end(kernel, sizeof kernel, NULL, 0);
    check(st2 == ATTN_OK && strcmp(kernel, "flash_backward") == 0, "backward_fused_shared_gradients_workspace_fits",
          "status %d (%s), kernel %s, %zu bytes", (int)st2, st2 ? err.message : "", kernel, need);
    attn_tensor *all[] = {&q, &k, &out, &lse, &dout, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(mem);
}

/* f32 tensors of the given shapes, random. */
static attn_tensor make32(int64_t a, int64_t b, int64_t c) {
    int64_t s[3] = {a, b, c};
    return make(ATTN_F32, 3, s);
}

/* The fused f32 kernel: which kernel ran, bitwise the same gradients on 1
 * and 3 threads, and the slices it hands to the exact kernel (a NaN value
 * behind a bool mask; +inf in a float mask) without letting NaN in. */
static void test_fused(void) {
    attn_error err;
    attn_tensor q = make32(4, 300, 64), k = make32(2, 500, 64), v = make32(2, 500, 48);
    int64_t sl[2] = {4, 300};
    attn_tensor out = make32(4, 300, 48), dout = make32(4, 300, 48), lse = make(ATTN_F32, 2, sl);
    attn_tensor g1[3] = {make32(4, 300, 64), make32(2, 500, 64), make32(2, 500, 48)};
    attn_tensor g3[3] = {make32(4, 300, 64), make32(2, 500, 64), make32(2, 500, 48)};
    attn_context ctx = attn_context_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &ctx;
    attn_status st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err);
    char kernel[32], fallback[32];
    ctx.num_threads = 1;
    st |= attn_sdpa_backward(&g1[0], &g1[1], &g1[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
    ctx.num_threads = 3;
    verbose_begin();
    st |= attn_sdpa_backward(&g3[0], &g3[1], &g3[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    int same = 1;
    for (int i = 0; i < 3; i++)
        same &= memcmp(g1[i].data, g3[i].data, (size_t)attn_tensor_numel(&g1[i]) * 4) == 0;
    check(st == ATTN_OK && strcmp(kernel, "flash_backward") == 0 && strcmp(fallback, "0/4") == 0 && same,
          "fused_backward_threads_1_and_3_bitwise_identical", "status %d, kernel %s, fallback %s, same %d",
          (int)st, kernel, fallback, same);

    /* A NaN in a value that no query may see (a bool mask, shared by every
     * head, excludes its key): the exact kernel takes the two slices that
     * read KV head 0, and no NaN gets out. */
    int64_t sm[2] = {300, 500};
    attn_tensor mask = make(ATTN_BOOL, 2, sm);
    for (int64_t i = 0; i < 300; i++) ((unsigned char *)mask.data)[i * 500 + 7] = 0;
    ((float *)v.data)[7 * 48 + 5] = NAN; /* KV head 0: query heads 0 and 1 */
    o.mask = &mask;
    st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err);
    verbose_begin();
    st |= attn_sdpa_backward(&g3[0], &g3[1], &g3[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    int finite = 1;
    for (int i = 0; i < 3; i++)
        for (int64_t x = 0; x < attn_tensor_numel(&g3[i]); x++)
            if (x != 7 * 48 + 5 || i != 2) finite &= isfinite(((float *)g3[i].data)[x]);
    check(st == ATTN_OK && strcmp(kernel, "flash_backward") == 0 && strcmp(fallback, "2/4") == 0 && finite,
          "fused_backward_hands_nan_slices_to_exact_kernel", "status %d, kernel %s, fallback %s, finite %d",
          (int)st, kernel, fallback, finite);
    free(mask.data), free(q.data), free(k.data), free(v.data), free(out.data), free(dout.data), free(lse.data);
    for (int i = 0; i < 3; i++) free(g1[i].data), free(g3[i].data);
}

static void fill(attn_tensor *t, double x) {
    for (int64_t i = 0; i < attn_tensor_numel(t); i++)
        if (t->dtype == ATTN_F64) ((double *)t->data)[i] = x;
        else if (t->dtype == ATTN_F32) ((float *)t->data)[i] = (float)x;
        else ((unsigned char *)t->data)[i] = x != 0;
}

/* Whether every element of t is x (+0 or -0 for x = 0). */
static int all_are(const attn_tensor *t, double x) {
    for (int64_t i = 0; i < attn_tensor_numel(t); i++) {
        double y = t->dtype == ATTN_F64 ? ((double *)t->data)[i] : t->dtype == ATTN_F32 ? ((float *)t->data)[i]
                                                                                         : ((unsigned char *)t->data)[i];
        if (y != x) return 0;
    }
    return 1;
}

/* dropout_p = 1 drops every weight, as PyTorch's dropout(p = 1) does: out
 * and the weights are zeros, written over what the buffers held, and so is
 * every gradient, on flash (q, k), decode (qd, kd: two queries), the exact
 * kernel (f64 q64, k64, with weights) and both backward kernels; the lse is
 * the undropped one; the mask is all false. */
static void test_dropout_all(const attn_tensor *q, const attn_tensor *k, const attn_tensor *qd, const attn_tensor *kd,
                             const attn_tensor *q64, const attn_tensor *k64) {
    attn_sdpa_options o = attn_sdpa_options_default(), plain = o;
    o.dropout_p = 1, o.dropout_seed = 9;
    attn_error err;
    attn_tensor out = make(ATTN_F32, q->rank, q->shape), lse = make(ATTN_F32, 2, q->shape),
                out0 = make(ATTN_F32, q->rank, q->shape), lse0 = make(ATTN_F32, 2, q->shape), dq = make(ATTN_F32, q->rank, q->shape),
                dk = make(ATTN_F32, k->rank, k->shape), dv = make(ATTN_F32, k->rank, k->shape);
    attn_tensor outd = make(ATTN_F32, qd->rank, qd->shape), dqd = make(ATTN_F32, qd->rank, qd->shape),
                dkd = make(ATTN_F32, kd->rank, kd->shape), lsed = make(ATTN_F32, 2, qd->shape);
    int64_t sw[3] = {q64->shape[0], q64->shape[1], k64->shape[1]};
    attn_tensor out64 = make(ATTN_F64, q64->rank, q64->shape), lse64 = make(ATTN_F64, 2, q64->shape),
                w64 = make(ATTN_F64, 3, sw), dq64 = make(ATTN_F64, q64->rank, q64->shape),
                dk64 = make(ATTN_F64, k64->rank, k64->shape), dv64 = make(ATTN_F64, k64->rank, k64->shape),
                keep = make(ATTN_BOOL, 3, sw);
    attn_tensor *written[] = {&out, &lse, &dq, &dk, &dv, &outd, &dqd, &dkd, &lsed, &out64, &w64, &dq64, &dk64, &dv64};
    for (size_t i = 0; i < sizeof written / sizeof *written; i++) fill(written[i], 7);
    fill(&keep, 1);
    attn_status st = attn_sdpa(&out, &lse, NULL, q, k, k, &o, &err);
    if (!st) st = attn_sdpa(&out0, &lse0, NULL, q, k, k, &plain, &err);
    if (!st) st = attn_sdpa_backward(&dq, &dk, &dv, NULL, q, q, k, k, &out, &lse, &o, &err); /* dout = q: not 0 */
    check(st == ATTN_OK && all_are(&out, 0) && all_are(&dq, 0) && all_are(&dk, 0) && all_are(&dv, 0) &&
              !memcmp(lse.data, lse0.data, sizeof(float) * (size_t)attn_tensor_numel(&lse)),
          "dropout_p_1_zeros_flash_and_fused_backward_lse_undropped", "status %d (%s)", (int)st, st ? err.message : "");
    st = attn_sdpa(&outd, &lsed, NULL, qd, kd, kd, &o, &err);
    if (!st) st = attn_sdpa_backward(&dqd, &dkd, NULL, NULL, qd, qd, kd, kd, &outd, &lsed, &o, &err);
    check(st == ATTN_OK && all_are(&outd, 0) && all_are(&dqd, 0) && all_are(&dkd, 0),
          "dropout_p_1_zeros_decode", "status %d (%s)", (int)st, st ? err.message : "");
    st = attn_sdpa(&out64, &lse64, &w64, q64, k64, k64, &o, &err);
    if (!st) st = attn_sdpa_backward(&dq64, &dk64, &dv64, NULL, q64, q64, k64, k64, &out64, &lse64, &o, &err);
    int finite_lse = 1;
    for (int64_t i = 0; i < attn_tensor_numel(&lse64); i++) finite_lse &= isfinite(((double *)lse64.data)[i]);
    check(st == ATTN_OK && all_are(&out64, 0) && all_are(&w64, 0) && all_are(&dq64, 0) && all_are(&dk64, 0) &&
              all_are(&dv64, 0) && finite_lse,
          "dropout_p_1_zeros_exact_with_weights_and_backward", "status %d (%s)", (int)st, st ? err.message : "");
    st = attn_sdpa_dropout_mask(&keep, q64, k64, k64, &o, &err);
    check(st == ATTN_OK && all_are(&keep, 0), "dropout_p_1_mask_all_false", "status %d (%s)", (int)st,
          st ? err.message : "");
    attn_tensor *all[] = {&out, &lse, &out0, &lse0, &dq, &dk, &dv, &outd, &dqd, &dkd, &lsed, &out64, &lse64, &w64, &dq64,
                          &dk64, &dv64, &keep};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* Dropout: the kept fraction, p = 0 bitwise the path without dropout (forward
 * on every kernel, backward on both), the mask the same for 1 and 3 threads,
 * and bad values of p. */
static void test_dropout(void) {
    /* Philox-4x32-10 against Random123's known-answer vectors (kat_vectors). */
    static const uint32_t KAT[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1}};
    int kat_ok = 1;
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        attn_philox4x32_10(out, KAT[t], (uint64_t)KAT[t][5] << 32 | KAT[t][4]);
        kat_ok &= !memcmp(out, KAT[t] + 6, sizeof out);
    }
    check(kat_ok, "philox4x32_10_known_answers", "a known-answer vector differs");
    attn_error err;
    int64_t sq[3] = {4, 256, 32}, sk[3] = {4, 512, 32}, sw[3] = {4, 256, 512};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), keep = make(ATTN_BOOL, 3, sw);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.dropout_p = 0.3, o.dropout_seed = 42;
    attn_status st = attn_sdpa_dropout_mask(&keep, &q, &k, &k, &o, &err);
    double n = 4.0 * 256 * 512, kept = 0, sigma = sqrt(n * 0.3 * 0.7);
    for (int64_t i = 0; i < (int64_t)n; i++) kept += ((unsigned char *)keep.data)[i];
    check(st == ATTN_OK && fabs(kept - 0.7 * n) < 5 * sigma, "dropout_kept_fraction_within_5_sigma",
          "status %d, kept %.0f of %.0f, expected %.0f +- %.0f", (int)st, kept, n, 0.7 * n, 5 * sigma);
    /* p counts to 2^-32 (attn.h, dropout_p): one below it drops nothing. */
    attn_tensor keep_all = make(ATTN_BOOL, 3, sw);
    o.dropout_p = ldexp(1, -33);
    st = attn_sdpa_dropout_mask(&keep_all, &q, &k, &k, &o, &err);
    kept = 0;
    for (int64_t i = 0; i < (int64_t)n; i++) kept += ((unsigned char *)keep_all.data)[i];
    check(st == ATTN_OK && kept == n, "dropout_p_below_2_pow_minus_32_keeps_every_weight", "status %d, kept %.0f of %.0f",
          (int)st, kept, n);
    free(keep_all.data);
    o.dropout_p = 0.3;

    /* p = 0 with a seed is bitwise no dropout, on flash, decode, exact and both backward kernels. */
    int64_t sd[3] = {2, 2, 32}, skd[3] = {1, 4096, 32}, sl[2] = {4, 256}, sl2[2] = {2, 2};
    attn_tensor qd = make(ATTN_F32, 3, sd), kd = make(ATTN_F32, 3, skd), q64 = make(ATTN_F64, 3, sq), k64 = make(ATTN_F64, 3, sk);
    attn_tensor o1 = make(ATTN_F32, 3, sq), o2 = make(ATTN_F32, 3, sq), l1 = make(ATTN_F32, 2, sl);
    attn_tensor d1 = make(ATTN_F32, 3, sd), d2 = make(ATTN_F32, 3, sd), ld = make(ATTN_F32, 2, sl2);
    attn_tensor e1 = make(ATTN_F64, 3, sq), e2 = make(ATTN_F64, 3, sq), g1 = make(ATTN_F32, 3, sq),
                g2 = make(ATTN_F32, 3, sq), le = make(ATTN_F64, 2, sl), h1 = make(ATTN_F64, 3, sq),
                h2 = make(ATTN_F64, 3, sq);
    attn_sdpa_options plain = attn_sdpa_options_default(), zero = plain;
    zero.dropout_seed = 1234;
    st = attn_sdpa(&o1, &l1, NULL, &q, &k, &k, &plain, &err) | attn_sdpa(&o2, NULL, NULL, &q, &k, &k, &zero, &err) |
         attn_sdpa(&d1, &ld, NULL, &qd, &kd, &kd, &plain, &err) |
         attn_sdpa(&d2, NULL, NULL, &qd, &kd, &kd, &zero, &err) |
         attn_sdpa(&e1, &le, NULL, &q64, &k64, &k64, &plain, &err) |
         attn_sdpa(&e2, NULL, NULL, &q64, &k64, &k64, &zero, &err);
    int same = !memcmp(o1.data, o2.data, 4 * 4 * 256 * 32) && !memcmp(d1.data, d2.data, 4 * 2 * 2 * 32) &&
               !memcmp(e1.data, e2.data, 8 * 4 * 256 * 32);
    st |= attn_sdpa_backward(&g1, NULL, NULL, NULL, &o1, &q, &k, &k, &o1, &l1, &plain, &err) |
          attn_sdpa_backward(&g2, NULL, NULL, NULL, &o1, &q, &k, &k, &o1, &l1, &zero, &err) |
          attn_sdpa_backward(&h1, NULL, NULL, NULL, &e1, &q64, &k64, &k64, &e1, &le, &plain, &err) | /* exact */
          attn_sdpa_backward(&h2, NULL, NULL, NULL, &e1, &q64, &k64, &k64, &e1, &le, &zero, &err);
    same &= !memcmp(g1.data, g2.data, 4 * 4 * 256 * 32) && !memcmp(h1.data, h2.data, 8 * 4 * 256 * 32);
    check(st == ATTN_OK && same, "dropout_p0_bitwise_no_dropout", "status %d (%s), same %d", (int)st,
          st ? err.message : "", same);

    /* With dropout, 1 and 3 threads: bitwise the same output. */
    attn_context ctx = attn_context_default();
    o.context = &ctx;
    ctx.num_threads = 1;
    st = attn_sdpa(&o1, NULL, NULL, &q, &k, &k, &o, &err);
    ctx.num_threads = 3;
    st |= attn_sdpa(&o2, NULL, NULL, &q, &k, &k, &o, &err);
    check(st == ATTN_OK && !memcmp(o1.data, o2.data, 4 * 4 * 256 * 32), "dropout_threads_1_and_3_bitwise_identical",
          "status %d", (int)st);
    test_dropout_all(&q, &k, &qd, &kd, &q64, &k64);
    o.dropout_p = 1.5;
    check_status(attn_sdpa(&o1, NULL, NULL, &q, &k, &k, &o, &err), &err, ATTN_ERR_OPTION, "dropout_p is 1.5",
                 "dropout_p_above_1_rejected");
    o.dropout_p = NAN;
    check_status(attn_sdpa(&o1, NULL, NULL, &q, &k, &k, &o, &err), &err, ATTN_ERR_OPTION, "dropout_p is nan",
                 "dropout_p_nan_rejected");
    o.dropout_p = 0.5;
    check_status(attn_sdpa_dropout_mask(&o1, &q, &k, &k, &o, &err), &err, ATTN_ERR_DTYPE, "keep is f32",
                 "dropout_mask_needs_bool");
    /* A 16-bit q, which attn_sdpa takes with dropout: attn_sdpa_shapes and
     * the mask check it as attn_sdpa does (the f32 call on a copy), so the
     * mask is the f32 q's of its shape; f64 keys are named beside it. */
    uint16_t *qh = calloc(4 * 256 * 32, 2), *kh = calloc(4 * 512 * 32, 2);
    attn_tensor q16, k16, keep16 = make(ATTN_BOOL, 3, sw);
    attn_tensor_init(&q16, qh, ATTN_BF16, 3, sq, NULL, NULL);
    attn_tensor_init(&k16, kh, ATTN_BF16, 3, sk, NULL, NULL);
    int rank16 = 0;
    int64_t os16[ATTN_MAX_RANK] = {0};
    o.dropout_p = 0.3, o.dropout_seed = 42;
    st = attn_sdpa_shapes(&rank16, os16, NULL, &q16, &k16, &k16, &o, &err);
    if (!st) st = attn_sdpa_dropout_mask(&keep16, &q16, &k16, &k16, &o, &err);
    check(st == ATTN_OK && rank16 == 3 && os16[0] == 4 && os16[1] == 256 && os16[2] == 32 &&
              !memcmp(keep16.data, keep.data, (size_t)n),
          "dropout_mask_of_a_16_bit_q", "status %d (%s), rank %d, out (%lld, %lld, %lld)", (int)st,
          st ? err.message : "", rank16, (long long)os16[0], (long long)os16[1], (long long)os16[2]);
    check_status(attn_sdpa_shapes(NULL, NULL, NULL, &q16, &k64, &k16, &o, &err), &err, ATTN_ERR_DTYPE,
                 "k is f64 but q is bf16", "sdpa_shapes_16_bit_q_f64_k_named");
    free(qh), free(kh), free(keep16.data);
    attn_tensor *all[] = {&q, &k, &keep, &qd, &kd, &q64, &k64, &o1, &o2, &l1, &d1, &d2, &ld, &e1, &e2, &g1, &g2,
                          &le, &h1, &h2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* t's rows [r0, r0 + n) along dimension dim, as a view. */
static attn_tensor rows_view(const attn_tensor *t, int dim, int64_t r0, int64_t n) {
    attn_tensor v = *t;
    v.shape[dim] = n;
    v.data = (char *)t->data + r0 * t->strides[dim] * (int64_t)attn_dtype_size(t->dtype);
    return v;
}

/* dst += src, rank 3 of one float dtype and shape; src contiguous, dst a view. */
static void add_into(attn_tensor *dst, const attn_tensor *src) {
    int64_t i = 0;
    for (int64_t a = 0; a < src->shape[0]; a++)
        for (int64_t b = 0; b < src->shape[1]; b++)
            for (int64_t c = 0; c < src->shape[2]; c++, i++) {
                int64_t at = a * dst->strides[0] + b * dst->strides[1] + c * dst->strides[2];
                if (dst->dtype == ATTN_F64) ((double *)dst->data)[at] += ((double *)src->data)[i];
                else ((float *)dst->data)[at] += ((float *)src->data)[i];
            }
}

static double max_abs(const attn_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < attn_tensor_numel(t); i++) {
        double x = t->dtype == ATTN_F64 ? ((double *)t->data)[i] : ((float *)t->data)[i];
        m = fabs(x) > m ? fabs(x) : m;
    }
    return m;
}

/* max |a - b| / max |b| over the elements a row view holds (a and b alike). */
static double rel_diff(const attn_tensor *a, const attn_tensor *b) {
    double d = 0, big = 1e-300;
    int64_t n = attn_tensor_numel(b);
    for (int64_t i = 0; i < n; i++) {
        double x = a->dtype == ATTN_F64 ? ((double *)a->data)[i] : ((float *)a->data)[i];
        double y = b->dtype == ATTN_F64 ? ((double *)b->data)[i] : ((float *)b->data)[i];
        if (isinf(y) && x == y) continue;
        d = fabs(x - y) > d ? fabs(x - y) : d;
        big = fabs(y) > big && isfinite(y) ? fabs(y) : big;
    }
    return d / big;
}

/* Attention in pieces (attn_sdpa_options' query_start, key_start and
 * totals): the queries in 2 blocks, the keys in 3; the pieces' results
 * merged (attn_sdpa_merge) equal the whole call's, and the pieces'
 * gradients (each given the whole's out and lse) add up to the whole's, for
 * f64 (the exact kernels) and f32 (the fused ones), GQA, both causal
 * alignments with L != S, the score variants, RoPE and a sink. */
typedef struct piece_case {
    const char *name;
    attn_dtype dt;
    attn_causal causal;
    int64_t L, S, window;
    double softcap;
    bool alibi, rope, sinks;
} piece_case;

static void pieces_forward(const piece_case *c, attn_tensor *out, attn_tensor *lse, const attn_tensor *q,
                           const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *whole,
                           const int64_t qcut[3], const int64_t kcut[4], attn_error *err, int *ok) {
    int64_t sl[2] = {2, c->L}, so[3] = {2, c->L, 8};
    attn_tensor po = make(c->dt, 3, so), pl = make(c->dt, 2, sl);
    for (int a = 0; a < 2; a++) {
        int64_t q0 = qcut[a], nq = qcut[a + 1] - q0;
        attn_tensor qa = rows_view(q, 1, q0, nq), oa = rows_view(out, 1, q0, nq), la = rows_view(lse, 1, q0, nq);
        attn_tensor pa = rows_view(&po, 1, q0, nq), pla = rows_view(&pl, 1, q0, nq);
        for (int b = 0; b < 3; b++) {
            int64_t k0 = kcut[b], nk = kcut[b + 1] - k0;
            attn_tensor kb = rows_view(k, 1, k0, nk), vb = rows_view(v, 1, k0, nk);
            attn_sdpa_options o = *whole;
            o.query_start = q0, o.key_start = k0, o.total_queries = c->L, o.total_keys = c->S;
            if (b > 0) o.sinks = NULL; /* one piece of each row holds the sink */
            *ok &= attn_sdpa(b ? &pa : &oa, b ? &pla : &la, NULL, &qa, &kb, &vb, &o, err) == ATTN_OK;
            const attn_tensor *outs[2] = {&oa, &pa}, *lses[2] = {&la, &pla};
            if (b) *ok &= attn_sdpa_merge(&oa, &la, outs, lses, 2, err) == ATTN_OK;
        }
    }
    free(po.data), free(pl.data);
}

static void pieces_backward(const piece_case *c, attn_tensor g[3], const attn_tensor *dout, const attn_tensor *q,
                            const attn_tensor *k, const attn_tensor *v, const attn_tensor *out, const attn_tensor *lse,
                            const attn_sdpa_options *whole, const int64_t qcut[3], const int64_t kcut[4],
                            attn_error *err, int *ok) {
    for (int a = 0; a < 2; a++) {
        int64_t q0 = qcut[a], nq = qcut[a + 1] - q0;
        attn_tensor qa = rows_view(q, 1, q0, nq), oa = rows_view(out, 1, q0, nq), la = rows_view(lse, 1, q0, nq);
        attn_tensor da = rows_view(dout, 1, q0, nq), gqa = rows_view(&g[0], 1, q0, nq);
        for (int b = 0; b < 3; b++) {
            int64_t k0 = kcut[b], nk = kcut[b + 1] - k0;
            int64_t sq[3] = {2, nq, 16}, sk[3] = {1, nk, 16}, sv[3] = {1, nk, 8};
            attn_tensor kb = rows_view(k, 1, k0, nk), vb = rows_view(v, 1, k0, nk);
            attn_tensor pq = make(c->dt, 3, sq), pk = make(c->dt, 3, sk), pv = make(c->dt, 3, sv);
            attn_sdpa_options o = *whole;
            o.query_start = q0, o.key_start = k0, o.total_queries = c->L, o.total_keys = c->S, o.sinks = NULL;
            *ok &= attn_sdpa_backward(&pq, &pk, &pv, NULL, &da, &qa, &kb, &vb, &oa, &la, &o, err) == ATTN_OK;
            attn_tensor gk = rows_view(&g[1], 1, k0, nk), gv = rows_view(&g[2], 1, k0, nk);
            add_into(&gqa, &pq), add_into(&gk, &pk), add_into(&gv, &pv);
            free(pq.data), free(pk.data), free(pv.data);
        }
    }
}

static void test_pieces(void) {
    static const piece_case cases[] = {
        {"f64_plain", ATTN_F64, ATTN_CAUSAL_NONE, 37, 53, 0, 0, false, false, false},
        {"f64_top_left", ATTN_F64, ATTN_CAUSAL_TOP_LEFT, 37, 53, 0, 0, false, false, false},
        {"f64_bottom_right", ATTN_F64, ATTN_CAUSAL_BOTTOM_RIGHT, 37, 53, 0, 0, false, false, false},
        {"f64_bottom_right_more_queries", ATTN_F64, ATTN_CAUSAL_BOTTOM_RIGHT, 53, 37, 0, 0, false, false, false},
        {"f64_variants_rope_sink", ATTN_F64, ATTN_CAUSAL_BOTTOM_RIGHT, 41, 41, 9, 3.0, true, true, true},
        {"f32_top_left", ATTN_F32, ATTN_CAUSAL_TOP_LEFT, 37, 53, 0, 0, false, false, false},
        {"f32_variants_rope_sink", ATTN_F32, ATTN_CAUSAL_TOP_LEFT, 41, 41, 9, 3.0, true, true, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const piece_case *c = &cases[ci];
        attn_error err;
        int ok = 1;
        int64_t sq[3] = {2, c->L, 16}, sk[3] = {1, c->S, 16}, sv[3] = {1, c->S, 8}, so[3] = {2, c->L, 8};
        int64_t sl[2] = {2, c->L}, sh = 2;
        attn_tensor q = make(c->dt, 3, sq), k = make(c->dt, 3, sk), v = make(c->dt, 3, sv), dout = make(c->dt, 3, so);
        attn_tensor out = make(c->dt, 3, so), lse = make(c->dt, 2, sl), pout = make(c->dt, 3, so), plse = make(c->dt, 2, sl);
        attn_tensor g[3] = {make(c->dt, 3, sq), make(c->dt, 3, sk), make(c->dt, 3, sv)};
        attn_tensor pg[3] = {make(c->dt, 3, sq), make(c->dt, 3, sk), make(c->dt, 3, sv)};
        double slopes[2] = {0.25, 0.0625}, sinks[2] = {0.5, -1.0};
        attn_tensor ts, tk;
        attn_tensor_init(&ts, slopes, ATTN_F64, 1, &sh, NULL, NULL), attn_tensor_init(&tk, sinks, ATTN_F64, 1, &sh, NULL, NULL);
        attn_rope_options rope = attn_rope_options_default();
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = c->causal, o.window = c->window, o.softcap = c->softcap;
        o.alibi_slopes = c->alibi ? &ts : NULL, o.sinks = c->sinks ? &tk : NULL, o.rope = c->rope ? &rope : NULL;
        ok &= attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err) == ATTN_OK;
        ok &= attn_sdpa_backward(&g[0], &g[1], &g[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err) == ATTN_OK;
        int64_t qcut[3] = {0, c->L / 3, c->L}, kcut[4] = {0, c->S / 4, c->S / 2 + 3, c->S};
        pieces_forward(c, &pout, &plse, &q, &k, &v, &o, qcut, kcut, &err, &ok);
        for (int i = 0; i < 3; i++) memset(pg[i].data, 0, (size_t)attn_tensor_numel(&pg[i]) * attn_dtype_size(c->dt));
        pieces_backward(c, pg, &dout, &q, &k, &v, &out, &lse, &o, qcut, kcut, &err, &ok);
        /* f64: the same sums in another order; f32: the merge's and the
         * gradients' roundings, far inside f32's bound (docs/performance.md). */
        double tol = c->dt == ATTN_F64 ? 1e-13 : 1e-5, worst = rel_diff(&pout, &out);
        double dl = rel_diff(&plse, &lse);
        for (int i = 0; i < 3; i++) {
            double d = rel_diff(&pg[i], &g[i]);
            worst = d > worst ? d : worst;
        }
        worst = dl > worst ? dl : worst;
        char name[96];
        snprintf(name, sizeof name, "pieces_merge_to_the_whole_%s", c->name);
        check(ok && worst <= tol && max_abs(&g[1]) > 0, name, "ok %d (%s), worst relative difference %.3g",
              ok, ok ? "" : err.message, worst);
        attn_tensor *all[] = {&q, &k, &v, &dout, &out, &lse, &pout, &plse, &g[0], &g[1], &g[2], &pg[0], &pg[1], &pg[2]};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    }
    /* The errors: a start without its total, and a piece past the whole. */
    int64_t s3[3] = {1, 4, 8};
    attn_tensor q = make(ATTN_F64, 3, s3), out = make(ATTN_F64, 3, s3);
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_error err;
    o.key_start = 2;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_OPTION, "give the total",
                 "err_piece_start_without_total");
    o.total_keys = 5;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_OPTION, "passes total_keys 5",
                 "err_piece_past_the_whole");
    o.total_keys = 6, o.dropout_p = 0.1;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_OPTION, "dropout is not taken",
                 "err_piece_with_dropout");
    free(q.data), free(out.data);
}

/* A "piece" holding every key (key_start 0, total_keys S) is the whole row:
 * its gradients are those of the call without pieces, bitwise, also for a
 * row that -FLT_MAX covers entirely, whose f32 lse has lost log(S). The
 * piece took the lse as given there, weighing each key 1 instead of 1/S.
 * Both kernels: the fused one (dq, dk, dv) and the exact one (dmask too). */
static void test_piece_of_every_key(void) {
    attn_error err;
    int64_t L = 5, S = 37, sm[2] = {5, 37}, sl[2] = {2, 5};
    attn_tensor q = make32(2, L, 16), k = make32(1, S, 16), v = make32(1, S, 8), dout = make32(2, L, 8);
    attn_tensor out = make32(2, L, 8), lse = make(ATTN_F32, 2, sl), mask = make(ATTN_F32, 2, sm);
    for (int64_t j = 0; j < S; j++) ((float *)mask.data)[2 * S + j] = -FLT_MAX; /* row 2: padding */
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &mask;
    int ok = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err) == ATTN_OK;
    for (int with_dmask = 0; with_dmask < 2; with_dmask++) {
        attn_tensor g[4] = {make32(2, L, 16), make32(1, S, 16), make32(1, S, 8), make(ATTN_F32, 2, sm)};
        attn_tensor pg[4] = {make32(2, L, 16), make32(1, S, 16), make32(1, S, 8), make(ATTN_F32, 2, sm)};
        attn_sdpa_options whole = o;
        whole.total_queries = L, whole.total_keys = S;
        ok &= attn_sdpa_backward(&g[0], &g[1], &g[2], with_dmask ? &g[3] : NULL, &dout, &q, &k, &v, &out, &lse, &o,
                                 &err) == ATTN_OK;
        ok &= attn_sdpa_backward(&pg[0], &pg[1], &pg[2], with_dmask ? &pg[3] : NULL, &dout, &q, &k, &v, &out, &lse,
                                 &whole, &err) == ATTN_OK;
        int same = 1;
        for (int i = 0; i < 3 + with_dmask; i++)
            same &= !memcmp(g[i].data, pg[i].data, (size_t)attn_tensor_numel(&g[i]) * sizeof(float));
        check(ok && same, with_dmask ? "piece_of_every_key_padded_row_exact" : "piece_of_every_key_padded_row_fused",
              "ok %d (%s), gradients %s", ok, ok ? "" : err.message, same ? "bitwise" : "differ from the whole call's");
        for (int i = 0; i < 4; i++) free(g[i].data), free(pg[i].data);
    }
    attn_tensor *all[] = {&q, &k, &v, &dout, &out, &lse, &mask};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* An f64 copy of an f32 tensor (same shape, contiguous). */
static attn_tensor widened(const attn_tensor *t) {
    attn_tensor w = make(ATTN_F64, t->rank, t->shape);
    for (int64_t i = 0; i < attn_tensor_numel(t); i++) ((double *)w.data)[i] = ((float *)t->data)[i];
    return w;
}

/* The calls that take the most scratch buffers, as many as a plan asks
 * for, with plenty of memory: no ATTN_ERR_NO_MEMORY (malloc's blocks once
 * ran out at eight), on malloc and on a measured workspace.
 * attn_sdpa_backward in f32 with q broadcast over the batch (dq summed in
 * f64), GQA (dk and dv too), RoPE, a row a -FLT_MAX fill covers (the
 * softmax statistics recomputed) and a key of 1e30 that sends the two
 * slices reading it to the exact kernel (its scratch): the fused kernel's
 * partials and routes besides. Checked against the same call in f64 (the
 * exact kernel): the scores are O(1) except the fill, which swallows q·k in
 * f64 as in f32, and the 1e30 key's, which both compute in f64, so the f32
 * bound of attn.h is a few 1e-5 of the terms, and 1e-4 of the largest
 * gradient leaves room while a wrong row is off by O(1). */
static void test_many_buffers_sdpa(void) {
    int64_t sq[4] = {1, 4, 40, 16}, sk[4] = {2, 2, 70, 16}, sv[4] = {2, 2, 70, 12}, so[4] = {2, 4, 40, 12};
    int64_t sl[3] = {2, 4, 40}, sm[4] = {2, 1, 40, 70};
    attn_tensor t32[5] = {make(ATTN_F32, 4, sq), make(ATTN_F32, 4, sk), make(ATTN_F32, 4, sv), make(ATTN_F32, 4, so),
                          make(ATTN_F32, 4, sm)}; /* q, k, v, dout, mask */
    float *k = t32[1].data, *m = t32[4].data;
    k[((1 * 2 + 1) * 70 + 5) * 16] = 1e30f; /* batch 1, KV head 1 (query heads 2 and 3), key 5 */
    for (int64_t b = 0; b < 2; b++)        /* padded keys 0..3b+2, and row 7 of batch 0 at every key */
        for (int64_t i = 0; i < 40; i++)
            for (int64_t j = 0; j < 70; j++) m[(b * 40 + i) * 70 + j] = j <= 3 * b + 2 || (b == 0 && i == 7) ? -FLT_MAX : 0;
    attn_tensor t64[5];
    for (int i = 0; i < 5; i++) t64[i] = widened(&t32[i]);
    attn_rope_options rope = attn_rope_options_default();
    attn_context ctx = attn_context_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.rope = &rope, o.context = &ctx;
    attn_error err;
    int ok = 1;
    double worst = 0;
    char kernel[32], fallback[32];
    attn_tensor g64[3] = {make(ATTN_F64, 4, sq), make(ATTN_F64, 4, sk), make(ATTN_F64, 4, sv)};
    attn_tensor out64 = make(ATTN_F64, 4, so), lse64 = make(ATTN_F64, 3, sl);
    o.mask = &t64[4];
    ok &= attn_sdpa(&out64, &lse64, NULL, &t64[0], &t64[1], &t64[2], &o, &err) == ATTN_OK;
    ok &= attn_sdpa_backward(&g64[0], &g64[1], &g64[2], NULL, &t64[3], &t64[0], &t64[1], &t64[2], &out64, &lse64, &o,
                             &err) == ATTN_OK;
    attn_tensor g32[3] = {make(ATTN_F32, 4, sq), make(ATTN_F32, 4, sk), make(ATTN_F32, 4, sv)};
    attn_tensor out32 = make(ATTN_F32, 4, so), lse32 = make(ATTN_F32, 3, sl);
    o.mask = &t32[4];
    ok &= attn_sdpa(&out32, &lse32, NULL, &t32[0], &t32[1], &t32[2], &o, &err) == ATTN_OK;
    for (int w = 0; w < 2 && ok; w++) { /* malloc, then a workspace of the measured size */
        size_t need = 0;
        char *mem = NULL;
        if (w) {
            ok &= attn_sdpa_backward_workspace_size(&need, &g32[0], &g32[1], &g32[2], NULL, &t32[3], &t32[0], &t32[1],
                                                    &t32[2], &out32, &lse32, &o, &err) == ATTN_OK;
            ctx.workspace = mem = malloc(need), ctx.workspace_size = need;
        }
        for (int i = 0; i < 3; i++) memset(g32[i].data, 0, (size_t)attn_tensor_numel(&g32[i]) * 4);
        verbose_begin();
        ok &= attn_sdpa_backward(&g32[0], &g32[1], &g32[2], NULL, &t32[3], &t32[0], &t32[1], &t32[2], &out32, &lse32,
                                 &o, &err) == ATTN_OK;
        verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
        ok &= strcmp(kernel, "flash_backward") == 0 && strcmp(fallback, "2/8") == 0;
        for (int i = 0; i < 3; i++) {
            double d = rel_diff(&g32[i], &g64[i]);
            worst = d > worst ? d : worst;
        }
        ctx.workspace = NULL, ctx.workspace_size = 0;
        free(mem);
    }
    check(ok && worst <= 1e-4, "backward_most_buffers_broadcast_gqa_rope_statistics_fallback",
          "ok %d (%s), kernel %s, fallback %s, worst relative difference from f64 %.3g", ok, ok ? "" : err.message,
          kernel, fallback, worst);
    attn_tensor *all[] = {&g64[0], &g64[1], &g64[2], &out64, &lse64, &g32[0], &g32[1], &g32[2], &out32, &lse32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    for (int i = 0; i < 5; i++) free(t32[i].data), free(t64[i].data);
}

/* attn_mha_backward in f32 on a Llama-style layer (separate projections
 * without biases, 4 query heads over 2 KV heads, RoPE) with one large
 * input value, 1e15 in batch 1, whose scores (about 1e31) send that batch's
 * four slices to the exact kernel: no ATTN_ERR_NO_MEMORY. Batch 0 does not
 * see it: its dquery against the same layer in f64, within 1e-4 of its
 * largest value (f32 projections and attention on O(1) scores). */
static void test_many_buffers_mha(void) {
    enum { N = 2, L = 20, E = 32, H = 4, HKV = 2, D = E / H };
    int64_t sx[3] = {N, L, E}, swq[2] = {E, E}, swkv[2] = {HKV * D, E};
    attn_tensor x32 = make(ATTN_F32, 3, sx), dout32 = make(ATTN_F32, 3, sx);
    attn_tensor w32[4] = {make(ATTN_F32, 2, swq), make(ATTN_F32, 2, swkv), make(ATTN_F32, 2, swkv), make(ATTN_F32, 2, swq)};
    for (int i = 0; i < 4; i++) /* weights of about 1/sqrt(E), so that the scores are O(1) */
        for (int64_t x = 0; x < attn_tensor_numel(&w32[i]); x++) ((float *)w32[i].data)[x] *= 0.18f;
    ((float *)x32.data)[(1 * L + 3) * E + 5] = 1e15f;
    attn_tensor x64 = widened(&x32), dout64 = widened(&dout32), w64[4];
    for (int i = 0; i < 4; i++) w64[i] = widened(&w32[i]);
    attn_tensor dx32 = make(ATTN_F32, 3, sx), dx64 = make(ATTN_F64, 3, sx);
    attn_rope_options rope = attn_rope_options_default();
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1, o.rope = &rope;
    attn_mha_params p32 = attn_mha_params_default(), grads = attn_mha_params_default();
    p32.embed_dim = E, p32.num_heads = H, p32.num_kv_heads = HKV;
    attn_mha_params p64 = p32;
    p32.q_proj_weight = &w32[0], p32.k_proj_weight = &w32[1], p32.v_proj_weight = &w32[2], p32.out_proj_weight = &w32[3];
    p64.q_proj_weight = &w64[0], p64.k_proj_weight = &w64[1], p64.v_proj_weight = &w64[2], p64.out_proj_weight = &w64[3];
    attn_error err;
    char kernel[32], fallback[32];
    verbose_begin();
    attn_status st = attn_mha_backward(&dx32, NULL, NULL, &grads, &dout32, &x32, &x32, &x32, &p32, &o, &err);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    char line[1024];
    memcpy(line, verbose_last_line, sizeof line);
    attn_status st64 = attn_mha_backward(&dx64, NULL, NULL, &grads, &dout64, &x64, &x64, &x64, &p64, &o, &err);
    attn_tensor b32 = rows_view(&dx32, 0, 0, 1), b64 = rows_view(&dx64, 0, 0, 1);
    double d = rel_diff(&b32, &b64);
    check(st == ATTN_OK && st64 == ATTN_OK && strstr(line, "sdpa_backward kernel=flash_backward") &&
              strcmp(fallback, "4/8") == 0 && d <= 1e-4,
          "mha_backward_f32_gqa_rope_large_value_most_buffers",
          "status %d, %d (%s), fallback %s, batch 0's relative difference from f64 %.3g; verbose: %s", (int)st,
          (int)st64, st || st64 ? err.message : "", fallback, d, line);
    attn_tensor *all[] = {&x32, &dout32, &x64, &dout64, &dx32, &dx64};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    for (int i = 0; i < 4; i++) free(w32[i].data), free(w64[i].data);
}

/* x (f32) rounded to bf16 (nearest even), then widened to f64: what a
 * product on the bf16 GEMM multiplies (no subnormals here to read as zero). */
static attn_tensor bf16_widened(const attn_tensor *x) {
    attn_tensor h = make(ATTN_BF16, x->rank, x->shape), w = make(ATTN_F64, x->rank, x->shape);
    attn_tensor_convert(&h, x, NULL), attn_tensor_convert(&w, &h, NULL);
    free(h.data);
    return w;
}

/* attn_mha_backward of an f32 layer with bf16 weights, as checkpoints ship
 * them (4 query heads over 2 KV heads, sequence-first so that each sequence
 * is a product of its own). Where the forward's products run on the bf16
 * GEMM (its verbose line names gemm_q=bf16:...) they multiply x and the
 * heads' output rounded to bf16, so every gradient is that of the same
 * layer in f64 on x rounded to bf16 (out_proj's over its input rounded
 * too); elsewhere on x as given: each within 1e-4 of its largest value. The weights' gradients were taken over x as
 * given on the bf16 GEMM too, some 2^-9 off (2.5e-3 in oracle_mha.py). */
static void test_mha_bf16_weights(void) {
    enum { L = 5, N = 2, E = 32, H = 4, HKV = 2, D = E / H };
    int64_t sx[3] = {L, N, E}, sw[4][2] = {{E, E}, {HKV * D, E}, {HKV * D, E}, {E, E}};
    attn_tensor x32 = make(ATTN_F32, 3, sx), dout32 = make(ATTN_F32, 3, sx), dx32 = make(ATTN_F32, 3, sx);
    attn_tensor w16[4], w64[4], g32[4], g64[4];
    attn_mha_params p16 = attn_mha_params_default(), p64, gr32 = attn_mha_params_default(), gr64;
    p16.embed_dim = E, p16.num_heads = H, p16.num_kv_heads = HKV;
    p64 = p16, gr64 = gr32;
    const attn_tensor **slot16[4] = {&p16.q_proj_weight, &p16.k_proj_weight, &p16.v_proj_weight, &p16.out_proj_weight};
    const attn_tensor **slot64[4] = {&p64.q_proj_weight, &p64.k_proj_weight, &p64.v_proj_weight, &p64.out_proj_weight};
    const attn_tensor **grad32[4] = {&gr32.q_proj_weight, &gr32.k_proj_weight, &gr32.v_proj_weight, &gr32.out_proj_weight};
    const attn_tensor **grad64[4] = {&gr64.q_proj_weight, &gr64.k_proj_weight, &gr64.v_proj_weight, &gr64.out_proj_weight};
    for (int i = 0; i < 4; i++) {
        attn_tensor w = make(ATTN_F32, 2, sw[i]);
        for (int64_t e = 0; e < attn_tensor_numel(&w); e++) ((float *)w.data)[e] *= 0.18f; /* scores O(1) */
        w16[i] = make(ATTN_BF16, 2, sw[i]), attn_tensor_convert(&w16[i], &w, NULL);
        w64[i] = make(ATTN_F64, 2, sw[i]), attn_tensor_convert(&w64[i], &w16[i], NULL); /* the same values */
        g32[i] = make(ATTN_F32, 2, sw[i]), g64[i] = make(ATTN_F64, 2, sw[i]);
        *slot16[i] = &w16[i], *slot64[i] = &w64[i], *grad32[i] = &g32[i], *grad64[i] = &g64[i];
        free(w.data);
    }
    attn_mha_options o = attn_mha_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    char kernel[32], fallback[32];
    attn_tensor out32 = make(ATTN_F32, 3, sx);
    verbose_begin();
    attn_status st = attn_mha(&out32, NULL, &x32, &x32, &x32, &p16, &o, &err);
    verbose_end(kernel, sizeof kernel, fallback, sizeof fallback);
    bool on16 = strstr(verbose_gemm_line, "gemm_q=bf16:") != NULL;
    if (!st) st = attn_mha_backward(&dx32, NULL, NULL, &gr32, &dout32, &x32, &x32, &x32, &p16, &o, &err);
    attn_tensor x64 = on16 ? bf16_widened(&x32) : widened(&x32), dout64 = widened(&dout32), dx64 = make(ATTN_F64, 3, sx);
    attn_status st64 = attn_mha_backward(&dx64, NULL, NULL, &gr64, &dout64, &x64, &x64, &x64, &p64, &o, &err);
    double d = st || st64 ? 1 : rel_diff(&dx32, &dx64);
    /* out_proj's gradient, Σ doutᵀ cat, over cat rounded to bf16 as its
     * product read it: cat from the f64 layer with out_proj the identity */
    attn_tensor eye = make(ATTN_F64, 2, sw[3]), cat = make(ATTN_F64, 3, sx);
    for (int64_t e = 0; e < E * E; e++) ((double *)eye.data)[e] = e % (E + 1) == 0;
    p64.out_proj_weight = &eye;
    if (!st64) st64 = attn_mha(&cat, NULL, &x64, &x64, &x64, &p64, &o, &err);
    if (on16 && !st64) {
        attn_tensor c32 = make(ATTN_F32, 3, sx);
        attn_tensor_convert(&c32, &cat, NULL);
        free(cat.data);
        cat = bf16_widened(&c32);
        free(c32.data);
    }
    for (int64_t e = 0; e < E * E && !st64; e++) { /* row e / E, column e % E */
        double sum = 0;
        for (int64_t r = 0; r < L * N; r++) sum += ((double *)dout64.data)[r * E + e / E] * ((double *)cat.data)[r * E + e % E];
        ((double *)g64[3].data)[e] = sum;
    }
    for (int i = 0; i < 4 && !st && !st64; i++) d = fmax(d, rel_diff(&g32[i], &g64[i]));
    check(st == ATTN_OK && st64 == ATTN_OK && d <= 1e-4, on16 ? "mha_backward_bf16_weights_on_the_bf16_gemm"
                                                               : "mha_backward_bf16_weights_on_f32_sums",
          "status %d, %d (%s), largest relative difference from f64 %.3g", (int)st, (int)st64,
          st || st64 ? err.message : "", d);
    attn_tensor *all[] = {&x32, &dout32, &dx32, &out32, &x64, &dout64, &dx64, &eye, &cat};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    for (int i = 0; i < 4; i++) free(w16[i].data), free(w64[i].data), free(g32[i].data), free(g64[i].data);
}

/* An output viewed with stride 0 over a dimension of size > 1 (a broadcast
 * buffer, torch's expand) would take several results into one element, the
 * last one winning: attn_mha_backward wrote only the last batch's dquery
 * and the last row's gradient of a weight, attn_sdpa_sinks_backward the
 * last head's dsinks, attn_rope_backward and attn_mha the last row. Each is
 * ATTN_ERR_STRIDE now, as attn_sdpa_backward's dq is, with nothing written;
 * dout, an input, may still have stride 0 (torch's ones for a sum). */
static void test_stride_0_outputs(void) {
    enum { N = 2, L = 3, E = 4, H = 2 };
    int64_t sx[3] = {N, L, E}, sw[2] = {3 * E, E}, swo[2] = {E, E}, ss[1] = {H};
    attn_tensor x = make(ATTN_F64, 3, sx), dout = make(ATTN_F64, 3, sx), w = make(ATTN_F64, 2, sw);
    attn_tensor wo = make(ATTN_F64, 2, swo), dx = make(ATTN_F64, 3, sx), dwo = make(ATTN_F64, 2, swo);
    attn_mha_params p = attn_mha_params_default(), grads = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = H, p.in_proj_weight = &w, p.out_proj_weight = &wo;
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1;
    attn_error err;
    memset(dx.data, 0x5a, sizeof(double) * N * L * E), memset(dwo.data, 0x5a, sizeof(double) * E * E);
    attn_tensor dx0 = dx, dwo0 = dwo, ones = dout;
    dx0.strides[0] = 0, dwo0.strides[0] = 0, ones.strides[0] = ones.strides[1] = ones.strides[2] = 0;
    check_status(attn_mha_backward(&dx0, NULL, NULL, NULL, &dout, &x, &x, &x, &p, &o, &err), &err, ATTN_ERR_STRIDE,
                 "dquery has stride 0 in dimension 0 of size 2", "mha_backward_dquery_stride_0_rejected");
    grads.out_proj_weight = &dwo0;
    check_status(attn_mha_backward(&dx, NULL, NULL, &grads, &dout, &x, &x, &x, &p, &o, &err), &err, ATTN_ERR_STRIDE,
                 "the gradient of out_proj_weight has stride 0 in dimension 0 of size 4",
                 "mha_backward_weight_gradient_stride_0_rejected");
    unsigned char *b = dx.data, *c = dwo.data;
    check(b[0] == 0x5a && b[N * L * E * 8 - 1] == 0x5a && c[0] == 0x5a && c[E * E * 8 - 1] == 0x5a,
          "mha_backward_stride_0_writes_nothing", "a gradient was written");
    grads.out_proj_weight = &dwo;
    check_status(attn_mha_backward(&dx, NULL, NULL, &grads, &ones, &x, &x, &x, &p, &o, &err), &err, ATTN_OK, "",
                 "mha_backward_dout_of_stride_0_taken");
    attn_tensor out0 = dx;
    out0.strides[1] = 0;
    check_status(attn_mha(&out0, NULL, &x, &x, &x, &p, &o, &err), &err, ATTN_ERR_STRIDE,
                 "out has stride 0 in dimension 1 of size 3", "mha_out_stride_0_rejected");
    /* dsinks (H,) of attention with sinks, from dout, out and lse (N, H, L, ...) */
    int64_t s4[4] = {N, H, L, E}, sl[3] = {N, H, L};
    attn_tensor q = make(ATTN_F64, 4, s4), out = make(ATTN_F64, 4, s4), lse = make(ATTN_F64, 3, sl);
    attn_tensor d4 = make(ATTN_F64, 4, s4), sinks = make(ATTN_F64, 1, ss), ds = make(ATTN_F64, 1, ss);
    attn_sdpa_options so = attn_sdpa_options_default();
    so.sinks = &sinks;
    attn_status st = attn_sdpa(&out, &lse, NULL, &q, &q, &q, &so, &err);
    attn_tensor ds0 = ds;
    ds0.strides[0] = 0;
    check_status(st ? st : attn_sdpa_sinks_backward(&ds0, &d4, &out, &lse, &so, &err), &err, ATTN_ERR_STRIDE,
                 "dsinks has stride 0 in dimension 0 of size 2", "sinks_backward_dsinks_stride_0_rejected");
    attn_rope_options rope = attn_rope_options_default();
    attn_tensor dq0 = d4;
    dq0.strides[2] = 0;
    check_status(attn_rope_backward(&dq0, &q, &rope, &err), &err, ATTN_ERR_STRIDE, "has stride 0 in dimension 2 of size 3",
                 "rope_backward_dx_stride_0_rejected");
    attn_tensor *all[] = {&x, &dout, &w, &wo, &dx, &dwo, &q, &out, &lse, &d4, &sinks, &ds};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

/* Element i of a C-order f32 or f64 tensor, read and written as double. */
static double el(const attn_tensor *t, int64_t i) {
    return t->dtype == ATTN_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}
static void set_el(attn_tensor *t, int64_t i, double x) {
    if (t->dtype == ATTN_F64) ((double *)t->data)[i] = x;
    else ((float *)t->data)[i] = (float)x;
}

/* +inf in a float mask (rows 0 and 2; row 1 finite): those rows are NaN,
 * forward and backward, as PyTorch's softmax and autograd give them (e^(inf
 * - inf)): out, dq and dmask there, and dk and dv of every key, since row 2
 * reads them all; their lse is +inf, as torch.logsumexp gives it. Row 1 is
 * untouched: its out, dq and dmask as in double from its own scores. */
static void test_infinite_scores(void) {
    enum { L = 3, S = 3, E = 2 };
    int64_t sq[2] = {L, E}, sm[2] = {L, S};
    for (int f32 = 0; f32 < 2; f32++)
        for (int with_dmask = 0; with_dmask < 2; with_dmask++) {
            attn_dtype dt = f32 ? ATTN_F32 : ATTN_F64;
            attn_tensor q = make(dt, 2, sq), k = make(dt, 2, sq), v = make(dt, 2, sq), mask = make(dt, 2, sm);
            attn_tensor out = make(dt, 2, sq), lse = make(dt, 1, sq), dout = make(dt, 2, sq);
            attn_tensor dq = make(dt, 2, sq), dk = make(dt, 2, sq), dv = make(dt, 2, sq), dm = make(dt, 2, sm);
            for (int j = 0; j < S; j++) set_el(&mask, 2 * S + j, INFINITY);
            set_el(&mask, 0, INFINITY), set_el(&mask, 2, INFINITY);
            attn_sdpa_options o = attn_sdpa_options_default();
            o.mask = &mask;
            attn_error err;
            attn_status st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, &err);
            if (!st) st = attn_sdpa_backward(&dq, &dk, &dv, with_dmask ? &dm : NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
            /* row 1 in double: w, dP = dout vᵀ, D = Σ w dP, dS = w (dP - D) */
            double w[S], dp[S], ds[S], s1[S], m1 = -INFINITY, l1 = 0, D = 0, worst = 0, scale = 1 / sqrt(2.0);
            for (int j = 0; j < S; j++) {
                s1[j] = (el(&q, 1 * E + 0) * el(&k, j * E + 0) + el(&q, 1 * E + 1) * el(&k, j * E + 1)) * scale +
                        el(&mask, 1 * S + j);
                m1 = s1[j] > m1 ? s1[j] : m1;
            }
            for (int j = 0; j < S; j++) l1 += exp(s1[j] - m1);
            for (int j = 0; j < S; j++) {
                w[j] = exp(s1[j] - m1) / l1;
                dp[j] = el(&dout, E + 0) * el(&v, j * E + 0) + el(&dout, E + 1) * el(&v, j * E + 1);
                D += w[j] * dp[j];
            }
            for (int j = 0; j < S; j++) ds[j] = w[j] * (dp[j] - D);
            int nan_where_read = 1;
            for (int e = 0; e < E; e++) {
                double go = 0, gq = 0;
                for (int j = 0; j < S; j++) go += w[j] * el(&v, j * E + e), gq += scale * ds[j] * el(&k, j * E + e);
                double d[2] = {el(&out, E + e) - go, el(&dq, E + e) - gq};
                for (int t = 0; t < 2; t++) worst = fabs(d[t]) > worst || isnan(d[t]) ? fabs(d[t]) : worst;
                for (int i = 0; i < L; i += 2) nan_where_read &= isnan(el(&out, i * E + e)) && isnan(el(&dq, i * E + e));
                for (int j = 0; j < S; j++) nan_where_read &= isnan(el(&dk, j * E + e)) && isnan(el(&dv, j * E + e));
            }
            for (int j = 0; j < S && with_dmask; j++) {
                double d = el(&dm, S + j) - ds[j];
                worst = fabs(d) > worst || isnan(d) ? fabs(d) : worst;
                for (int i = 0; i < L; i += 2) nan_where_read &= isnan(el(&dm, i * S + j));
            }
            nan_where_read &= el(&lse, 0) == INFINITY && el(&lse, 2) == INFINITY; /* torch.logsumexp's */
            char name[96];
            snprintf(name, sizeof name, "plus_inf_scores_nan_rows_as_pytorch_%s%s", f32 ? "f32" : "f64",
                     with_dmask ? "_dmask" : "");
            check(st == ATTN_OK && worst <= (f32 ? 1e-6 : 1e-14) && nan_where_read, name,
                  "status %d (%s), worst difference in the finite row %.3g, NaN where read %d", (int)st,
                  st ? err.message : "", worst, nan_where_read);
            attn_tensor *all[] = {&q, &k, &v, &mask, &out, &lse, &dout, &dq, &dk, &dv, &dm};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
        }
}

/* Scores of -inf from an infinite input, not a mask: key 1 is (+inf, 0) and
 * every query's first element negative, so every row scores key 1 at -inf;
 * query 2 is (-inf, 0) and every other key's first element positive, so row
 * 2 scores every key at -inf. attn.h: such a key is one the row does not
 * read, as if masked (PyTorch's autograd gives NaN there, 0 · inf). So the
 * results are those of the finite inputs under a bool mask that drops key 1
 * from every row and row 2 entirely: out, lse, dq, dk and dv of keys 0 and
 * 2, and zero dk and dv for key 1. f64, and f32 with and without dmask (the
 * exact and the fused kernel, which hands a slice with an infinite input to
 * the exact one). */
static void test_minus_inf_scores(void) {
    enum { L = 3, S = 3, E = 2 };
    int64_t sq[2] = {L, E}, sk[2] = {S, E}, sm[2] = {L, S};
    for (int f32 = 0; f32 < 2; f32++) {
        attn_dtype dt = f32 ? ATTN_F32 : ATTN_F64;
        attn_tensor q = make(dt, 2, sq), k = make(dt, 2, sk), v = make(dt, 2, sk), dout = make(dt, 2, sq);
        attn_tensor keep = make(ATTN_BOOL, 2, sm);
        for (int i = 0; i < L; i++) set_el(&q, i * E, -0.5 - fabs(el(&q, i * E)));
        for (int j = 0; j < S; j++) set_el(&k, j * E, 0.5 + fabs(el(&k, j * E)));
        for (int i = 0; i < L; i++)
            for (int j = 0; j < S; j++) ((bool *)keep.data)[i * S + j] = i != 2 && j != 1;
        /* a, the infinite inputs; b, the finite ones with the mask */
        attn_tensor qa = make(dt, 2, sq), ka = make(dt, 2, sk);
        memcpy(qa.data, q.data, (size_t)(L * E) * attn_dtype_size(dt));
        memcpy(ka.data, k.data, (size_t)(S * E) * attn_dtype_size(dt));
        set_el(&ka, 1 * E + 0, INFINITY), set_el(&ka, 1 * E + 1, 0);
        set_el(&qa, 2 * E + 0, -INFINITY), set_el(&qa, 2 * E + 1, 0);
        attn_status st = ATTN_OK;
        attn_error err;
        for (int with_dmask = 0; with_dmask < (f32 ? 2 : 1) && !st; with_dmask++) {
            attn_tensor out[2] = {{0}}, lse[2] = {{0}}, g[2][3] = {{{0}}};
            for (int c = 0; c < 2 && !st; c++) {
                out[c] = make(dt, 2, sq), lse[c] = make(dt, 1, sq);
                for (int t = 0; t < 3; t++) g[c][t] = make(dt, 2, t ? sk : sq);
                attn_tensor zero_mask = make(dt, 2, sm), dm = make(dt, 2, sm);
                memset(zero_mask.data, 0, (size_t)(L * S) * attn_dtype_size(dt));
                attn_sdpa_options o = attn_sdpa_options_default();
                o.mask = c ? &keep : with_dmask ? &zero_mask : NULL;
                const attn_tensor *qq = c ? &q : &qa, *kk = c ? &k : &ka;
                st = attn_sdpa(&out[c], &lse[c], NULL, qq, kk, &v, &o, &err);
                if (!st)
                    st = attn_sdpa_backward(&g[c][0], &g[c][1], &g[c][2], with_dmask && !c ? &dm : NULL, &dout, qq, kk,
                                            &v, &out[c], &lse[c], &o, &err);
                free(zero_mask.data), free(dm.data);
            }
            double worst = 0;
            for (int64_t i = 0; i < L * E && !st; i++) {
                double d[3] = {el(&out[0], i) - el(&out[1], i), el(&g[0][0], i) - el(&g[1][0], i),
                               i < L ? el(&lse[0], i) - el(&lse[1], i) : 0};
                if (i == 2 && el(&lse[0], 2) == -INFINITY && el(&lse[1], 2) == -INFINITY) d[2] = 0;
                for (int t = 0; t < 3; t++) worst = !(fabs(d[t]) <= worst) ? fabs(d[t]) : worst;
            }
            for (int64_t i = 0; i < S * E && !st; i++)
                for (int t = 1; t < 3; t++) {
                    double d = el(&g[0][t], i) - (i / E == 1 ? 0 : el(&g[1][t], i));
                    worst = !(fabs(d) <= worst) ? fabs(d) : worst;
                }
            char name[96];
            snprintf(name, sizeof name, "minus_inf_scores_from_inputs_as_masked_%s%s", f32 ? "f32" : "f64",
                     with_dmask ? "_dmask" : "");
            check(st == ATTN_OK && worst <= (f32 ? 1e-6 : 1e-14), name, "status %d (%s), worst difference %.3g",
                  (int)st, st ? err.message : "", worst);
            for (int c = 0; c < 2; c++) {
                free(out[c].data), free(lse[c].data);
                for (int t = 0; t < 3; t++) free(g[c][t].data);
            }
        }
        attn_tensor *all[] = {&q, &k, &v, &dout, &keep, &qa, &ka};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    }
}

/* A 16-bit q's forward and backward run the f32 call on copies placed at
 * the workspace's front: a workspace short of the measured size was
 * refused with the f32 call's figures for what was left after the copies
 * ("has 69071 bytes but this call needs 214975" for a workspace of
 * 145919). Both now give the whole call's, as an f32 q's do: the caller's
 * size and the measured one; and the measured size is taken. */
static void test_half_workspace_message(void) {
    int64_t sq[4] = {2, 2, 40, 16}, sk[4] = {2, 1, 60, 16}, sl[3] = {2, 2, 40};
    attn_tensor q = make(ATTN_F16, 4, sq), k = make(ATTN_F16, 4, sk), out = make(ATTN_F16, 4, sq);
    attn_tensor dout = make(ATTN_F16, 4, sq), lse = make(ATTN_F32, 3, sl);
    attn_tensor dq = make(ATTN_F16, 4, sq), dk = make(ATTN_F16, 4, sk), dv = make(ATTN_F16, 4, sk);
    for (int64_t i = 0; i < 2 * 2 * 40 * 16; i++) /* make() sets bytes, not values, of 16-bit tensors */
        ((uint16_t *)q.data)[i] = attn_f32_to_f16((float)(i % 7) / 8 - 0.4f),
        ((uint16_t *)dout.data)[i] = attn_f32_to_f16((float)(i % 5) / 8 - 0.2f);
    for (int64_t i = 0; i < 2 * 60 * 16; i++) ((uint16_t *)k.data)[i] = attn_f32_to_f16((float)(i % 11) / 16 - 0.3f);
    attn_context c = attn_context_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &c;
    attn_error err;
    size_t fwd = 0, bwd = 0;
    attn_status st = attn_sdpa_workspace_size(&fwd, &out, &lse, NULL, &q, &k, &k, &o, &err);
    if (!st) st = attn_sdpa_backward_workspace_size(&bwd, &dq, &dk, &dv, NULL, &dout, &q, &k, &k, &out, &lse, &o, &err);
    size_t most = fwd > bwd ? fwd : bwd;
    char *mem = malloc(most), want[160];
    c.workspace = mem, c.workspace_size = fwd - 1;
    snprintf(want, sizeof want, "has %zu bytes but this call needs %zu (attn_sdpa_workspace_size)", fwd - 1, fwd);
    check_status(st ? st : attn_sdpa(&out, &lse, NULL, &q, &k, &k, &o, &err), &err, ATTN_ERR_WORKSPACE, want,
                 "half_q_forward_workspace_short_names_the_whole_call");
    c.workspace_size = fwd;
    check_status(attn_sdpa(&out, &lse, NULL, &q, &k, &k, &o, &err), &err, ATTN_OK, "", "half_q_forward_measured_workspace_fits");
    c.workspace_size = bwd - 1;
    snprintf(want, sizeof want, "has %zu bytes but this call needs %zu (attn_sdpa_backward_workspace_size)", bwd - 1, bwd);
    check_status(attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &q, &k, &k, &out, &lse, &o, &err), &err,
                 ATTN_ERR_WORKSPACE, want, "half_q_backward_workspace_short_names_the_whole_call");
    c.workspace_size = bwd;
    check_status(attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &q, &k, &k, &out, &lse, &o, &err), &err, ATTN_OK, "",
                 "half_q_backward_measured_workspace_fits");
    attn_tensor *all[] = {&q, &k, &out, &dout, &lse, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(mem);
}

int main(void) {
    rng_state = test_seed(99); /* seed.h: other inputs under ATTN_TEST_SEED */
    test_pieces();
    test_piece_of_every_key();
    test_dropout();
    test_finite_differences();
    test_fused();
    test_errors();
    test_stride_0_outputs();
    test_infinite_scores();
    test_minus_inf_scores();
    test_workspace();
    test_half_workspace_message();
    test_many_buffers_sdpa();
    test_many_buffers_mha();
    test_mha_bf16_weights();
    return n_failed ? 1 : 0;
}
