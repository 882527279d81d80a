/* test_abi_0_2.c -- a program built against release 0.2.0's headers, run
 * with this library: what every binary built before 0.3 does.
 *
 * It is compiled with -Itests/abi/0.2 and never sees include/: attn.h and
 * attn_teach.h there are frozen copies of the headers as 0.2.0 shipped them
 * (git show 8be55bd:include/attn.h, the last commit whose changelog opens
 * with 0.2.0). Its attn_sdpa_options is therefore 0.2's, smaller than
 * today's, and so may be every other versioned struct. The Makefile links it
 * twice, with the library's objects statically and with build/libattn.so,
 * both under AddressSanitizer: a library that wrote or read more of the
 * caller's struct than 0.2's size (the defaults filled in by the library at
 * its own sizeof, then read back at that size) stops with a
 * stack-buffer-overflow. The results are checked against attention written
 * out here in double, so an option read from the wrong place shows too. */
#include "attn.h"
#include "attn_teach.h"
#include "../check.h"

#include <math.h>
#include <stdlib.h>

enum { H = 2, L = 5, S = 7, E = 4, EV = 3 };

/* Attention of one head in double, the definition: P = softmax(q kᵀ · scale
 * + causal limit), each weight then kept or dropped by keep (NULL: all
 * kept) and scaled by 1 / (1 - p); out = P v. P (L, S) is returned too,
 * before dropout. */
static void attention(double *out, double *P, const double *q, const double *k, const double *v, double scale,
                      attn_causal causal, const unsigned char *keep, double p) {
    for (int i = 0; i < L; i++) {
        int last = causal == ATTN_CAUSAL_TOP_LEFT ? i : causal == ATTN_CAUSAL_BOTTOM_RIGHT ? i + S - L : S - 1;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= last && j < S; j++) {
            double s = 0;
            for (int e = 0; e < E; e++) s += q[i * E + e] * k[j * E + e];
            P[i * S + j] = s * scale;
            if (P[i * S + j] > m) m = P[i * S + j];
        }
        for (int j = 0; j < S; j++) {
            P[i * S + j] = j <= last ? exp(P[i * S + j] - m) : 0;
            sum += P[i * S + j];
        }
        for (int j = 0; j < S; j++) P[i * S + j] /= sum;
        for (int c = 0; c < EV; c++) {
            double o = 0;
            for (int j = 0; j < S; j++) o += P[i * S + j] * (keep && !keep[i * S + j] ? 0 : 1 / (1 - p)) * v[j * EV + c];
            out[i * EV + c] = o;
        }
    }
}

/* The gradients of that attention (no dropout), by the chain rule:
 * dP = dout vᵀ, dS = P ∘ (dP - rowsum(P ∘ dP)), dq = dS k · scale,
 * dk = dSᵀ q · scale, dv = Pᵀ dout. */
static void attention_backward(double *dq, double *dk, double *dv, const double *P, const double *dout,
                               const double *q, const double *k, const double *v, double scale) {
    double dS[L * S];
    for (int i = 0; i < L; i++) {
        double D = 0;
        for (int j = 0; j < S; j++) {
            double dp = 0;
            for (int c = 0; c < EV; c++) dp += dout[i * EV + c] * v[j * EV + c];
            dS[i * S + j] = dp;
            D += P[i * S + j] * dp;
        }
        for (int j = 0; j < S; j++) dS[i * S + j] = P[i * S + j] * (dS[i * S + j] - D);
    }
    for (int i = 0; i < L; i++)
        for (int e = 0; e < E; e++) {
            double g = 0;
            for (int j = 0; j < S; j++) g += dS[i * S + j] * k[j * E + e];
            dq[i * E + e] = g * scale;
        }
    for (int j = 0; j < S; j++) {
        for (int e = 0; e < E; e++) {
            double g = 0;
            for (int i = 0; i < L; i++) g += dS[i * S + j] * q[i * E + e];
            dk[j * E + e] = g * scale;
        }
        for (int c = 0; c < EV; c++) {
            double g = 0;
            for (int i = 0; i < L; i++) g += P[i * S + j] * dout[i * EV + c];
            dv[j * EV + c] = g;
        }
    }
}

static double max_abs_diff(const double *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= m)) m = fabs(a[i] - b[i]);
    return m;
}

static attn_tensor tensor(void *data, attn_dtype dtype, int64_t d0, int64_t d1, int64_t d2) {
    int64_t shape[3] = {d0, d1, d2};
    attn_tensor t;
    attn_tensor_init(&t, data, dtype, 3, shape, NULL, NULL);
    return t;
}

/* Every versioned struct of 0.2 comes back from its _default() function at
 * 0.2's size, and the calls that take one read it at that size. */
static void test_defaults(void) {
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_context c = attn_context_default();
    attn_train_options t = attn_train_options_default();
    check(o.struct_size == sizeof o, "sdpa_options_default_is_0_2_size", "struct_size %zu, the program's sizeof %zu",
          o.struct_size, sizeof o);
    check(c.struct_size == sizeof c, "context_default_is_0_2_size", "struct_size %zu, the program's sizeof %zu",
          c.struct_size, sizeof c);
    check(t.struct_size == sizeof t, "train_options_default_is_0_2_size", "struct_size %zu, the program's sizeof %zu",
          t.struct_size, sizeof t);
    check(o.has_scale == 0 && o.causal == ATTN_CAUSAL_NONE && !o.mask && o.compute == ATTN_COMPUTE_F32 &&
              !o.context && o.dropout_p == 0,
          "sdpa_options_default_values", "has_scale %d causal %d dropout_p %g", o.has_scale, (int)o.causal,
          o.dropout_p);
    check(t.d_k > 0 && t.steps == 1000 && t.batch == 16 && t.learning_rate == 0.1 && t.seed == 1,
          "train_options_default_values", "d_k %d steps %d batch %d", t.d_k, t.steps, t.batch);
}

/* attn_sdpa and its companions, f64 and f32, with 0.2's options and
 * context: scale, both causal modes, threads, a workspace, dropout. */
static void test_sdpa(void) {
    double q[H * L * E], k[H * S * E], v[H * S * EV], dout[H * L * EV];
    unsigned seed = 12345;
    double *all[4] = {q, k, v, dout};
    int counts[4] = {H * L * E, H * S * E, H * S * EV, H * L * EV};
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < counts[a]; i++) {
            seed = seed * 1103515245u + 12345u;
            all[a][i] = (double)(seed >> 8) / (1u << 24) * 2 - 1;
        }
    attn_tensor tq = tensor(q, ATTN_F64, H, L, E), tk = tensor(k, ATTN_F64, H, S, E), tv = tensor(v, ATTN_F64, H, S, EV),
                tdo = tensor(dout, ATTN_F64, H, L, EV);
    attn_context ctx = attn_context_default();
    ctx.num_threads = 2;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &ctx;
    o.has_scale = 1, o.scale = 0.7;
    attn_error err;
    for (int mode = ATTN_CAUSAL_NONE; mode <= ATTN_CAUSAL_BOTTOM_RIGHT; mode++) {
        o.causal = (attn_causal)mode;
        double out[H * L * EV], lse[H * L], want[H * L * EV], P[H * L * S];
        double dq[H * L * E], dk[H * S * E], dv[H * S * EV], wq[H * L * E], wk[H * S * E], wv[H * S * EV];
        for (int h = 0; h < H; h++) {
            attention(want + h * L * EV, P + h * L * S, q + h * L * E, k + h * S * E, v + h * S * EV, o.scale,
                      o.causal, NULL, 0);
            attention_backward(wq + h * L * E, wk + h * S * E, wv + h * S * EV, P + h * L * S, dout + h * L * EV,
                               q + h * L * E, k + h * S * E, v + h * S * EV, o.scale);
        }
        attn_tensor tout = tensor(out, ATTN_F64, H, L, EV), tlse;
        int64_t ls[2] = {H, L};
        attn_tensor_init(&tlse, lse, ATTN_F64, 2, ls, NULL, NULL);
        char name[64];
        attn_status st = attn_sdpa(&tout, &tlse, NULL, &tq, &tk, &tv, &o, &err);
        snprintf(name, sizeof name, "sdpa_f64_causal_%d", mode);
        check(!st && max_abs_diff(out, want, H * L * EV) < 1e-12, name, "status %d (%s), max diff %g", (int)st,
              st ? err.message : "", max_abs_diff(out, want, H * L * EV));
        attn_tensor tdq = tensor(dq, ATTN_F64, H, L, E), tdk = tensor(dk, ATTN_F64, H, S, E),
                    tdv = tensor(dv, ATTN_F64, H, S, EV);
        st = attn_sdpa_backward(&tdq, &tdk, &tdv, NULL, &tdo, &tq, &tk, &tv, &tout, &tlse, &o, &err);
        double d = fmax(max_abs_diff(dq, wq, H * L * E), fmax(max_abs_diff(dk, wk, H * S * E), max_abs_diff(dv, wv, H * S * EV)));
        snprintf(name, sizeof name, "sdpa_backward_f64_causal_%d", mode);
        check(!st && d < 1e-12, name, "status %d (%s), max diff %g", (int)st, st ? err.message : "", d);
        st = attn_sdpa_reference(&tout, NULL, NULL, &tq, &tk, &tv, &o, &err);
        snprintf(name, sizeof name, "sdpa_reference_causal_%d", mode);
        check(!st && max_abs_diff(out, want, H * L * EV) < 1e-12, name, "status %d (%s)", (int)st, st ? err.message : "");

        /* f32 on the fast kernels: within the f32 bound of attn.h. */
        float qf[H * L * E], kf[H * S * E], vf[H * S * EV], of[H * L * EV], lf[H * L], dof[H * L * EV];
        float dqf[H * L * E], dkf[H * S * E], dvf[H * S * EV];
        for (int i = 0; i < H * L * E; i++) qf[i] = (float)q[i];
        for (int i = 0; i < H * S * E; i++) kf[i] = (float)k[i];
        for (int i = 0; i < H * S * EV; i++) vf[i] = (float)v[i];
        for (int i = 0; i < H * L * EV; i++) dof[i] = (float)dout[i];
        attn_tensor fq = tensor(qf, ATTN_F32, H, L, E), fk = tensor(kf, ATTN_F32, H, S, E),
                    fv = tensor(vf, ATTN_F32, H, S, EV), fo = tensor(of, ATTN_F32, H, L, EV),
                    fdo = tensor(dof, ATTN_F32, H, L, EV), fl;
        attn_tensor_init(&fl, lf, ATTN_F32, 2, ls, NULL, NULL);
        st = attn_sdpa(&fo, &fl, NULL, &fq, &fk, &fv, &o, &err);
        double df = 0;
        for (int i = 0; i < H * L * EV; i++) df = fmax(df, fabs(of[i] - want[i]));
        snprintf(name, sizeof name, "sdpa_f32_causal_%d", mode);
        check(!st && df < 1e-5, name, "status %d (%s), max diff %g", (int)st, st ? err.message : "", df);
        attn_tensor fdq = tensor(dqf, ATTN_F32, H, L, E), fdk = tensor(dkf, ATTN_F32, H, S, E),
                    fdv = tensor(dvf, ATTN_F32, H, S, EV);
        st = attn_sdpa_backward(&fdq, &fdk, &fdv, NULL, &fdo, &fq, &fk, &fv, &fo, &fl, &o, &err);
        df = 0;
        for (int i = 0; i < H * L * E; i++) df = fmax(df, fabs(dqf[i] - wq[i]));
        for (int i = 0; i < H * S * E; i++) df = fmax(df, fabs(dkf[i] - wk[i]));
        for (int i = 0; i < H * S * EV; i++) df = fmax(df, fabs(dvf[i] - wv[i]));
        snprintf(name, sizeof name, "sdpa_backward_f32_causal_%d", mode);
        check(!st && df < 1e-5, name, "status %d (%s), max diff %g", (int)st, st ? err.message : "", df);

        /* The scores: q kᵀ · scale, -inf past the causal limit. */
        double scores[H * L * S];
        attn_tensor ts = tensor(scores, ATTN_F64, H, L, S);
        st = attn_scores(&ts, &tq, &tk, &o, &err);
        int bad = 0;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++)
                for (int j = 0; j < S; j++) {
                    int last = mode == ATTN_CAUSAL_TOP_LEFT ? i : mode == ATTN_CAUSAL_BOTTOM_RIGHT ? i + S - L : S;
                    double s = 0;
                    for (int e = 0; e < E; e++) s += q[(h * L + i) * E + e] * k[(h * S + j) * E + e];
                    double got = scores[(h * L + i) * S + j];
                    bad += j > last ? got != -INFINITY : !(fabs(got - s * o.scale) < 1e-14);
                }
        snprintf(name, sizeof name, "scores_causal_%d", mode);
        check(!st && !bad, name, "status %d (%s), %d wrong", (int)st, st ? err.message : "", bad);
    }

    /* The shapes, and a workspace sized for the call, then used by it. */
    int rank = 0;
    int64_t os[ATTN_MAX_RANK], ws[ATTN_MAX_RANK];
    attn_status st = attn_sdpa_shapes(&rank, os, ws, &tq, &tk, &tv, &o, &err);
    check(!st && rank == 3 && os[0] == H && os[1] == L && os[2] == EV && ws[2] == S, "sdpa_shapes", "status %d (%s)",
          (int)st, st ? err.message : "");
    double out[H * L * EV], want[H * L * EV], P[L * S];
    attn_tensor tout = tensor(out, ATTN_F64, H, L, EV);
    size_t need = 0, need_bwd = 0;
    st = attn_sdpa_workspace_size(&need, &tout, NULL, NULL, &tq, &tk, &tv, &o, &err);
    check(!st && need > 0, "sdpa_workspace_size", "status %d (%s)", (int)st, st ? err.message : "");
    double lse[H * L], dq[H * L * E];
    int64_t ls[2] = {H, L};
    attn_tensor tlse, tdq = tensor(dq, ATTN_F64, H, L, E);
    attn_tensor_init(&tlse, lse, ATTN_F64, 2, ls, NULL, NULL);
    attn_status st2 = attn_sdpa_backward_workspace_size(&need_bwd, &tdq, NULL, NULL, NULL, &tdo, &tq, &tk, &tv, &tout,
                                                        &tlse, &o, &err);
    check(!st2 && need_bwd > 0, "sdpa_backward_workspace_size", "status %d (%s)", (int)st2, st2 ? err.message : "");
    void *mem = malloc(need);
    ctx.workspace = mem, ctx.workspace_size = need;
    st = attn_sdpa(&tout, &tlse, NULL, &tq, &tk, &tv, &o, &err);
    for (int h = 0; h < H; h++)
        attention(want + h * L * EV, P, q + h * L * E, k + h * S * E, v + h * S * EV, o.scale, o.causal, NULL, 0);
    check(!st && max_abs_diff(out, want, H * L * EV) < 1e-12, "sdpa_with_workspace", "status %d (%s)", (int)st,
          st ? err.message : "");
    ctx.workspace_size = need - 1;
    check(attn_sdpa(&tout, &tlse, NULL, &tq, &tk, &tv, &o, &err) == ATTN_ERR_WORKSPACE, "workspace_too_small_seen",
          "a workspace of %zu bytes, one short, was taken", need - 1);
    ctx.workspace = NULL, ctx.workspace_size = 0;
    free(mem);

    /* Dropout, the last fields of 0.2's options: the mask the library
     * reports is the one its forward applied. */
    o.causal = ATTN_CAUSAL_NONE;
    o.dropout_p = 0.5, o.dropout_seed = 99;
    unsigned char keep[H * L * S];
    attn_tensor tkeep = tensor(keep, ATTN_BOOL, H, L, S);
    st = attn_sdpa_dropout_mask(&tkeep, &tq, &tk, &tv, &o, &err);
    int kept = 0;
    for (int i = 0; i < H * L * S; i++) kept += keep[i] != 0;
    check(!st && kept > 0 && kept < H * L * S, "dropout_mask", "status %d (%s), %d of %d kept", (int)st,
          st ? err.message : "", kept, H * L * S);
    st = attn_sdpa(&tout, NULL, NULL, &tq, &tk, &tv, &o, &err);
    for (int h = 0; h < H; h++)
        attention(want + h * L * EV, P, q + h * L * E, k + h * S * E, v + h * S * EV, o.scale, o.causal,
                  keep + h * L * S, o.dropout_p);
    check(!st && max_abs_diff(out, want, H * L * EV) < 1e-12, "sdpa_dropout", "status %d (%s), max diff %g", (int)st,
          st ? err.message : "", max_abs_diff(out, want, H * L * EV));
}

/* attn_tuning is the caller's to size: 0.2's has no GEMM fields, and
 * nothing past it is written. */
static void test_tuning(void) {
    struct {
        attn_tuning t;
        unsigned char after[32];
    } g;
    memset(&g, 0xa5, sizeof g);
    g.t.struct_size = sizeof g.t;
    attn_error err;
    attn_status st = attn_get_tuning(&g.t, &err);
    int clobbered = 0;
    for (size_t i = 0; i < sizeof g.after; i++) clobbered += g.after[i] != 0xa5;
    check(!st && g.t.struct_size == sizeof g.t && g.t.block_rows > 0 && g.t.decode_chunk > 0 && !clobbered,
          "tuning_0_2_size", "status %d (%s), %d bytes past it written", (int)st, st ? err.message : "", clobbered);
}

/* attn_train_head with 0.2's training options. */
static void test_train(void) {
    attn_train_options o = attn_train_options_default();
    o.steps = 20, o.batch = 4, o.d_k = 4;
    double wq[ATTN_TOY_D_MODEL * 4], wk[ATTN_TOY_D_MODEL * 4], wv[ATTN_TOY_D_MODEL * ATTN_TRAIN_D_V], loss[20];
    attn_error err;
    attn_status st = attn_train_head(wq, wk, wv, loss, NULL, &o, &err);
    check(!st && isfinite(loss[0]) && loss[19] < loss[0], "train_head", "status %d (%s), loss %g -> %g", (int)st,
          st ? err.message : "", loss[0], loss[19]);
}

/* The explainer with 0.2's structs: attn_explain_input (64 bytes in 0.2),
 * attn_explain (80) and attn_explain_labels (32) have no struct_size, and
 * 0.3 appended fields to all three. Each sits here in front of bytes the
 * library must neither read (garbage where 0.3 keeps X_source, a pointer)
 * nor write (where 0.3 keeps P and n_keys): the 0xa5 fill shows a write,
 * a read of it as X_source an ASan report or a cross-attention's wrong
 * numbers. The head is the wired one on "the cat sat", checked against
 * attention written out above. */
static void test_explain(void) {
    attn_toy_token tok[3];
    int n = 0;
    attn_error err;
    attn_status st = attn_toy_tokenize(tok, 3, &n, "the cat sat", &err);
    double x[3 * ATTN_TOY_D_MODEL], wq[ATTN_TOY_D_MODEL * ATTN_TOY_D_K], wk[ATTN_TOY_D_MODEL * ATTN_TOY_D_K],
        wv[ATTN_TOY_D_MODEL * ATTN_TOY_D_K];
    if (!st) st = attn_toy_embed(x, tok, n, &err);
    if (!st) st = attn_toy_weights(wq, wk, wv, ATTN_TOY_WIRED, &err);
    check(!st && n == 3, "explain_inputs", "status %d (%s)", (int)st, st ? err.message : "");
    if (st) return;
    struct {
        attn_explain_input in;
        unsigned char after[32];
    } gi;
    struct {
        attn_explain ex;
        unsigned char after[32];
    } ge;
    struct {
        attn_explain_labels labels;
        unsigned char after[32];
    } gl;
    memset(&gi, 0xa5, sizeof gi), memset(&ge, 0xa5, sizeof ge), memset(&gl, 0xa5, sizeof gl);
    gi.in = (attn_explain_input){3, ATTN_TOY_D_MODEL, ATTN_TOY_D_K, ATTN_TOY_D_K, x, wq, wk, wv, ATTN_EXPLAIN_QKV, 1, 0};
    st = attn_explain_run(&ge.ex, &gi.in, &err);
    int clobbered = 0;
    for (size_t i = 0; i < sizeof ge.after; i++) clobbered += ge.after[i] != 0xa5;
    check(!st && !clobbered && ge.ex.n == 3 && ge.ex.d_k == ATTN_TOY_D_K, "explain_run_0_2_structs",
          "status %d (%s), %d bytes past the 0.2 attn_explain written", (int)st, st ? err.message : "", clobbered);
    if (st) return;
    /* Q, K, V from the projections; then the causal attention of them. */
    double q[3 * ATTN_TOY_D_K], k[3 * ATTN_TOY_D_K], want[3 * ATTN_TOY_D_K], P[3 * 3];
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < ATTN_TOY_D_K; c++) {
            double a = 0, b = 0;
            for (int d = 0; d < ATTN_TOY_D_MODEL; d++)
                a += x[i * ATTN_TOY_D_MODEL + d] * wq[d * ATTN_TOY_D_K + c],
                    b += x[i * ATTN_TOY_D_MODEL + d] * wk[d * ATTN_TOY_D_K + c];
            q[i * ATTN_TOY_D_K + c] = a, k[i * ATTN_TOY_D_K + c] = b;
        }
    double diff = 0;
    for (int i = 0; i < 3; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int c = 0; c < ATTN_TOY_D_K; c++) s += q[i * ATTN_TOY_D_K + c] * k[j * ATTN_TOY_D_K + c];
            P[i * 3 + j] = s / sqrt(ATTN_TOY_D_K);
            if (P[i * 3 + j] > m) m = P[i * 3 + j];
        }
        for (int j = 0; j <= i; j++) sum += P[i * 3 + j] = exp(P[i * 3 + j] - m);
        for (int c = 0; c < ATTN_TOY_D_K; c++) {
            double o = 0;
            for (int j = 0; j <= i; j++) o += P[i * 3 + j] / sum * ge.ex.V[j * ATTN_TOY_D_K + c];
            want[i * ATTN_TOY_D_K + c] = o;
        }
    }
    diff = max_abs_diff(ge.ex.output, want, 3 * ATTN_TOY_D_K);
    check(diff < 1e-12 && fabs(ge.ex.scale - 1 / sqrt(ATTN_TOY_D_K)) < 1e-15, "explain_run_0_2_values",
          "max diff %g, scale %g", diff, ge.ex.scale);
    /* The JSON, with 0.2's labels: no key of 0.3's cross-attention. */
    gl.labels = (attn_explain_labels){NULL, NULL, NULL, "wired"};
    char buf[1 << 15];
    size_t len = 0;
    st = attn_explain_json(buf, sizeof buf, &len, &ge.ex, &gi.in, &gl.labels, &err);
    check(!st && len < sizeof buf && strstr(buf, "\"head\": \"wired\"") && !strstr(buf, "source_tokens") &&
              strstr(buf, "\"X_source\": null"),
          "explain_json_0_2_structs", "status %d (%s), length %zu", (int)st, st ? err.message : "", len);
    attn_explain_free(&ge.ex);
    clobbered = 0;
    for (size_t i = 0; i < sizeof ge.after; i++) clobbered += ge.after[i] != 0xa5;
    check(!ge.ex.Q && !ge.ex.output && !clobbered, "explain_free_0_2_struct", "Q %p, %d bytes past it written",
          (void *)ge.ex.Q, clobbered);
}

/* 0.2's attn_toy_suggest is "Never NULL": a word far from every known one
 * still gets the nearest (0.3's returns NULL for it). */
static void test_suggest(void) {
    const char *far = attn_toy_suggest("Elephant", 8), *close = attn_toy_suggest("cta", 3),
               *none = attn_toy_suggest(NULL, 0);
    check(far && close && !strcmp(close, "cat") && none && attn_toy_word_id(far, strlen(far)) >= 0 &&
              attn_toy_word_id(none, strlen(none)) == 0,
          "toy_suggest_never_null", "Elephant -> %s, cta -> %s, NULL -> %s", far ? far : "NULL",
          close ? close : "NULL", none ? none : "NULL");
}

int main(void) {
    printf("# built against attn.h %s, running with libattn %s\n", ATTN_VERSION_STRING, attn_version());
    test_defaults();
    test_sdpa();
    test_tuning();
    test_train();
    test_explain();
    test_suggest();
    attn_shutdown();
    return n_failed ? 1 : 0;
}
