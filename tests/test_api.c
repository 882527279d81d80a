/* test_api.c -- unit tests of the public C API: every error code, the
 * numerics at the edges (huge scores, masked rows, NaN, +inf), and the
 * streaming kernel against the reference kernel.
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; exits 1 if any failed.
 * The exact-value checks against PyTorch live in oracle.py. */
#include "attn_teach.h"
#include "base/base.h" /* attn_check_writable, for a layout no call could run; attn_named_options */
#include "check.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int status_seen[ATTN_STATUS_COUNT]; /* which codes the tests produced */

/* Check that a call returned `want` and filled err with that status and a
 * message containing `needle`. */
static void check_status(attn_status got, const attn_error *err, attn_status want,
                         const char *needle, const char *name) {
    int ok = got == want && (want == ATTN_OK || (err->status == want && strstr(err->message, needle)));
    if (ok && (int)got < ATTN_STATUS_COUNT) status_seen[got] = 1;
    check(ok, name, "status %d (%s), message \"%s\"; wanted %d with \"%s\"", (int)got,
          attn_strerror(got), want == ATTN_OK ? "" : err->message, (int)want, needle);
}

#include "tensors.h"

static double get(const attn_tensor *t, int64_t i) {
    return t->dtype == ATTN_F32 ? ((float *)t->data)[i] : ((double *)t->data)[i];
}

/* max |a - b| over two contiguous tensors of the same size; NaN counts as a
 * difference unless both are NaN. */
static double max_diff(const attn_tensor *a, const attn_tensor *b) {
    double m = 0;
    for (int64_t i = 0; i < attn_tensor_numel(a); i++) {
        double x = get(a, i), y = get(b, i);
        if (isnan(x) && isnan(y)) continue;
        double d = fabs(x - y);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* ---- version, strerror, tensors ------------------------------------------ */

static void test_basics(void) {
    check(strcmp(attn_version(), ATTN_VERSION_STRING) == 0, "version", "%s", attn_version());
    char numbered[32];
    snprintf(numbered, sizeof numbered, "%d.%d.%d", ATTN_VERSION_NUMBER / 10000, ATTN_VERSION_NUMBER / 100 % 100,
             ATTN_VERSION_NUMBER % 100);
    check(strcmp(numbered, ATTN_VERSION_STRING) == 0 && ATTN_VERSION_NUMBER >= 300, "version_number_is_the_string",
          "ATTN_VERSION_NUMBER %d reads %s, the string is %s", ATTN_VERSION_NUMBER, numbered, ATTN_VERSION_STRING);
    int distinct = 1;
    for (int a = 0; a < ATTN_STATUS_COUNT; a++) {
        if (strcmp(attn_strerror((attn_status)a), "unknown status") == 0) distinct = 0;
        for (int b = 0; b < a; b++)
            if (strcmp(attn_strerror((attn_status)a), attn_strerror((attn_status)b)) == 0)
                distinct = 0;
    }
    check(distinct, "strerror_distinct", "two codes share a message or one is unknown");
    /* ATTN_ERR_SCALE is also a per-head fp8 scale of 0 or below, which is finite */
    check(strstr(attn_strerror(ATTN_ERR_SCALE), "finite") && strstr(attn_strerror(ATTN_ERR_SCALE), "> 0"),
          "strerror_scale_says_both_meanings", "%s", attn_strerror(ATTN_ERR_SCALE));
    check(strcmp(attn_strerror((attn_status)999), "unknown status") == 0, "strerror_unknown",
          "%s", attn_strerror((attn_status)999));

    attn_tensor t;
    attn_error err;
    int64_t shape[3] = {2, 3, 4}, huge[3] = {INT64_MAX / 2, 4, 1}, neg[1] = {-1};
    check_status(attn_tensor_init(&t, NULL, ATTN_F32, 3, shape, NULL, &err), &err, ATTN_OK, "",
                 "tensor_init");
    check(t.strides[0] == 12 && t.strides[1] == 4 && t.strides[2] == 1 && attn_tensor_numel(&t) == 24,
          "tensor_c_order_strides", "strides %lld %lld %lld", (long long)t.strides[0],
          (long long)t.strides[1], (long long)t.strides[2]);
    check_status(attn_tensor_init(NULL, NULL, ATTN_F32, 3, shape, NULL, &err), &err, ATTN_ERR_NULL,
                 "NULL", "tensor_init_null");
    check_status(attn_tensor_init(&t, NULL, ATTN_F32, 6, shape, NULL, &err), &err, ATTN_ERR_RANK,
                 "rank 6", "tensor_init_rank");
    check_status(attn_tensor_init(&t, NULL, ATTN_F32, 1, neg, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "negative", "tensor_init_negative");
    check_status(attn_tensor_init(&t, NULL, (attn_dtype)99, 3, shape, NULL, &err), &err,
                 ATTN_ERR_DTYPE, "dtype", "tensor_init_dtype");
    check_status(attn_tensor_init(&t, NULL, ATTN_F32, 3, huge, NULL, &err), &err,
                 ATTN_ERR_OVERFLOW, "overflow", "tensor_init_overflow");
    check(attn_dtype_size(ATTN_F32) == 4 && attn_dtype_size(ATTN_F64) == 8 &&
              attn_dtype_size(ATTN_BOOL) == 1 && attn_dtype_size((attn_dtype)0) == 0,
          "dtype_size", "wrong sizes");
}

/* ---- dtypes by name, and the quantized formats listed ---------------------- */

static void test_dtype_names_and_formats(void) {
    attn_error err;
    attn_dtype d;
    /* every named dtype back from its name, and the values run 1, 2, ... to the last named */
    int named = 0, back = 1;
    for (int v = 1; v < 256; v++) {
        if (strcmp(attn_dtype_name((attn_dtype)v), "unknown") == 0) continue;
        named = v;
        d = (attn_dtype)0;
        back &= attn_dtype_from_name(&d, attn_dtype_name((attn_dtype)v), &err) == ATTN_OK && d == (attn_dtype)v;
    }
    check(back && named == ATTN_Q2C, "dtype_from_name_inverts_dtype_name", "last named value %d", named);
    check(attn_dtype_from_name(&d, "bf16", NULL) == ATTN_OK && d == ATTN_BF16 &&
              attn_dtype_from_name(&d, "q4_1", NULL) == ATTN_OK && d == ATTN_Q4_1,
          "dtype_from_name_bf16_q4_1", "got %d", (int)d);
    d = ATTN_F64;
    check_status(attn_dtype_from_name(&d, "float32", &err), &err, ATTN_ERR_DTYPE,
                 "no dtype is named \"float32\"; the dtypes are f32, f64, bool, f16, bf16, q8, q4, e4m3, e5m2, q4_1, "
                 "q4c or q2c",
                 "dtype_from_name_unknown_lists_the_names");
    check(d == ATTN_F64, "dtype_from_name_unknown_writes_nothing", "dtype became %d", (int)d);
    check_status(attn_dtype_from_name(&d, "F32", &err), &err, ATTN_ERR_DTYPE, "\"F32\"", "dtype_from_name_case");
    check_status(attn_dtype_from_name(&d, "", &err), &err, ATTN_ERR_DTYPE, "\"\"", "dtype_from_name_empty");
    check_status(attn_dtype_from_name(&d, "unknown", &err), &err, ATTN_ERR_DTYPE, "\"unknown\"",
                 "dtype_from_name_unknown_is_no_dtype");
    check_status(attn_dtype_from_name(&d, "f32 ", &err), &err, ATTN_ERR_DTYPE, "", "dtype_from_name_whole_string");
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    check_status(attn_dtype_from_name(&d, longname, &err), &err, ATTN_ERR_DTYPE, "the dtypes are f32",
                 "dtype_from_name_long_name_cut_short");
    check_status(attn_dtype_from_name(NULL, "f32", &err), &err, ATTN_ERR_NULL, "dtype is NULL",
                 "dtype_from_name_null_dtype");
    check_status(attn_dtype_from_name(&d, NULL, &err), &err, ATTN_ERR_NULL, "name is NULL",
                 "dtype_from_name_null_name");
    check(attn_dtype_from_name(NULL, NULL, NULL) == ATTN_ERR_NULL, "dtype_from_name_null_err", "not ATTN_ERR_NULL");

    /* attn_quant_format: the formats in attn.h's order, each kind and multiple
     * as the sizes say, and every dtype of no element size listed once */
    static const struct {
        attn_dtype f;
        attn_quant_kind kind;
        int64_t multiple;
    } WANT[] = {{ATTN_Q8, ATTN_QUANT_ROWS, 32},    {ATTN_Q4, ATTN_QUANT_ROWS, 32},   {ATTN_Q4_1, ATTN_QUANT_ROWS, 32},
                {ATTN_E4M3, ATTN_QUANT_ROWS, 1},   {ATTN_E5M2, ATTN_QUANT_ROWS, 1},  {ATTN_Q4C, ATTN_QUANT_GROUPS, 2},
                {ATTN_Q2C, ATTN_QUANT_GROUPS, 4}};
    enum { NW = sizeof WANT / sizeof WANT[0] };
    int count = 0, listed[256] = {0};
    for (int i = 0; i < 256; i++) {
        attn_dtype f = (attn_dtype)0;
        attn_quant_kind kind = ATTN_QUANT_NONE;
        int64_t m = 0;
        attn_status st = attn_quant_format(&f, &kind, &m, i, &err);
        if (st) {
            check_status(st, &err, ATTN_ERR_ARGUMENT, "names no quantized format", "quant_format_past_the_last");
            check(f == 0 && kind == ATTN_QUANT_NONE && m == 0, "quant_format_past_the_last_writes_nothing", "%d %d %lld", (int)f,
                  (int)kind, (long long)m);
            break;
        }
        count++;
        if ((unsigned)f < 256) listed[f]++;
        char name[64];
        snprintf(name, sizeof name, "quant_format_%d_%s", i, attn_dtype_name(f));
        check(i < NW && f == WANT[i].f && kind == WANT[i].kind && m == WANT[i].multiple, name,
              "format %d kind %d multiple %lld", (int)f, (int)kind, (long long)m);
        /* the sizes take m, 2m and 64m, not m + 1 (every multiple of m, and only those, when m > 1) */
        size_t (*size)(attn_dtype, int64_t) = kind == ATTN_QUANT_GROUPS ? attn_quant_group_size : attn_quant_row_size;
        snprintf(name, sizeof name, "quant_format_%s_multiple_as_its_size", attn_dtype_name(f));
        check(size(f, m) && size(f, 2 * m) && size(f, 64 * m) && (m == 1 || !size(f, m + 1)) &&
                  !(kind == ATTN_QUANT_GROUPS ? attn_quant_row_size(f, m) : attn_quant_group_size(f, m)),
              name, "multiple %lld", (long long)m);
    }
    check(count == NW, "quant_format_count", "%d formats", count);
    int unlisted = 0;
    for (int v = 1; v < 256; v++) {
        bool quantized = strcmp(attn_dtype_name((attn_dtype)v), "unknown") != 0 && attn_dtype_size((attn_dtype)v) == 0;
        if (listed[v] != (quantized ? 1 : 0)) unlisted = v;
    }
    check(!unlisted, "quant_format_lists_every_quantized_dtype_once", "dtype %d (%s)", unlisted,
          attn_dtype_name((attn_dtype)unlisted));
    check(attn_quant_format(NULL, NULL, NULL, 0, NULL) == ATTN_OK, "quant_format_null_outputs", "failed");
    attn_dtype f = ATTN_F32;
    check_status(attn_quant_format(&f, NULL, NULL, -1, &err), &err, ATTN_ERR_ARGUMENT, "index -1",
                 "quant_format_negative_index");
    check_status(attn_quant_format(&f, NULL, NULL, INT_MAX, &err), &err, ATTN_ERR_ARGUMENT, "there are 7",
                 "quant_format_int_max");
    check(f == ATTN_F32, "quant_format_bad_index_writes_nothing", "format became %d", (int)f);
}

/* ---- argument checking of attn_sdpa --------------------------------------- */

/* attn_sdpa with the weights output of the current check, if any. */
static attn_tensor *check_weights;
static attn_status sdpa4(attn_tensor *out, attn_tensor *q, attn_tensor *k, attn_tensor *v,
                         const attn_sdpa_options *o, attn_error *err) {
    return attn_sdpa(out, NULL, check_weights, q, k, v, o, err);
}

static void test_sdpa_errors(void) {
    int64_t sq[3] = {2, 3, 4}, sk[3] = {2, 5, 4}, sv[3] = {2, 5, 6}, so[3] = {2, 3, 6};
    attn_tensor q = make(ATTN_F64, 3, sq), k = make(ATTN_F64, 3, sk), v = make(ATTN_F64, 3, sv);
    attn_tensor out = make(ATTN_F64, 3, so);
    attn_error err;
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_tensor bad;

    check_status(sdpa4(&out, &q, &k, &v, NULL, &err), &err, ATTN_OK, "", "sdpa_ok");
    check_status(sdpa4(&out, NULL, &k, &v, NULL, &err), &err, ATTN_ERR_NULL, "q is NULL", "err_null_q");
    check_status(sdpa4(NULL, &q, &k, &v, NULL, &err), &err, ATTN_ERR_NULL, "out is NULL",
                 "err_null_out");
    bad = k;
    bad.data = NULL;
    check_status(sdpa4(&out, &q, &bad, &v, NULL, &err), &err, ATTN_ERR_NULL, "k has NULL data",
                 "err_null_data");
    /* The error struct is optional. */
    check(sdpa4(&out, NULL, &k, &v, NULL, NULL) == ATTN_ERR_NULL, "err_struct_optional", "wrong status");

    bad = q;
    bad.rank = 1;
    check_status(sdpa4(&out, &bad, &k, &v, NULL, &err), &err, ATTN_ERR_RANK, "q has rank 1",
                 "err_rank_low");
    bad.rank = 6;
    check_status(sdpa4(&out, &bad, &k, &v, NULL, &err), &err, ATTN_ERR_RANK, "q has rank 6",
                 "err_rank_high");
    int64_t so4[4] = {1, 2, 3, 6};
    attn_tensor out4 = make(ATTN_F64, 4, so4);
    check_status(sdpa4(&out4, &q, &k, &v, NULL, &err), &err, ATTN_ERR_RANK, "out has rank 4",
                 "err_rank_out");
    free(out4.data);

    int64_t sk3[3] = {2, 5, 3};
    attn_tensor k3 = make(ATTN_F64, 3, sk3);
    check_status(sdpa4(&out, &q, &k3, &v, NULL, &err), &err, ATTN_ERR_SHAPE, "k has E=3 but q has E=4",
                 "err_shape_e");
    free(k3.data);
    int64_t sv4[3] = {2, 4, 6};
    attn_tensor v4 = make(ATTN_F64, 3, sv4);
    check_status(sdpa4(&out, &q, &k, &v4, NULL, &err), &err, ATTN_ERR_SHAPE, "v has S=4",
                 "err_shape_s");
    free(v4.data);
    int64_t sow[3] = {2, 3, 5};
    attn_tensor outw = make(ATTN_F64, 3, sow);
    check_status(sdpa4(&outw, &q, &k, &v, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "out has shape (2, 3, 5) but the result has shape (2, 3, 6)", "err_shape_out");
    free(outw.data);
    bad = q; /* no heads (L = 0 is taken: test_edges.c, size 0) */
    bad.shape[0] = 0;
    check_status(sdpa4(&out, &bad, &k, &v, NULL, &err), &err, ATTN_ERR_SHAPE, "never for the heads, E or Ev",
                 "err_shape_zero");
    bad = q; /* no queries, but out has them */
    bad.shape[1] = 0;
    check_status(sdpa4(&out, &bad, &k, &v, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "out has shape (2, 3, 6); an output has its 0s exactly where the result does",
                 "err_shape_zero_l_but_not_out");

    int64_t sqb[4] = {3, 2, 3, 4}, skb[4] = {2, 2, 5, 4}, svb[4] = {2, 2, 5, 6}, sob[4] = {3, 2, 3, 6};
    attn_tensor qb = make(ATTN_F64, 4, sqb), kb = make(ATTN_F64, 4, skb),
                vb = make(ATTN_F64, 4, svb), ob = make(ATTN_F64, 4, sob);
    check_status(sdpa4(&ob, &qb, &kb, &vb, NULL, &err), &err, ATTN_ERR_BROADCAST,
                 "neither equal nor 1", "err_broadcast");
    free(qb.data), free(kb.data), free(vb.data), free(ob.data);

    int64_t sk_h[3] = {4, 5, 4}, sv_h[3] = {4, 5, 6}, sq_h[3] = {6, 3, 4}, so_h[3] = {6, 3, 6};
    attn_tensor kh = make(ATTN_F64, 3, sk_h), vh = make(ATTN_F64, 3, sv_h),
                qh = make(ATTN_F64, 3, sq_h), oh = make(ATTN_F64, 3, so_h);
    check_status(sdpa4(&oh, &qh, &kh, &vh, NULL, &err), &err, ATTN_ERR_HEADS,
                 "q has 6 heads, not a multiple of k's and v's 4 heads", "err_heads_multiple");
    check_status(sdpa4(&out, &q, &k, &vh, NULL, &err), &err, ATTN_ERR_HEADS,
                 "v has 4 heads but k has 2", "err_heads_kv");
    free(kh.data), free(vh.data), free(qh.data), free(oh.data);

    attn_tensor kf = make(ATTN_F32, 3, sk);
    check_status(sdpa4(&out, &q, &kf, &v, NULL, &err), &err, ATTN_ERR_DTYPE, "k is f32 but q is f64",
                 "err_dtype_mixed");
    free(kf.data);
    attn_tensor qbool = make(ATTN_BOOL, 3, sq);
    check_status(sdpa4(&out, &qbool, &k, &v, NULL, &err), &err, ATTN_ERR_DTYPE, "f32 or f64",
                 "err_dtype_bool");
    free(qbool.data);

    int64_t sm_bad[2] = {3, 4}, sm_ok[1] = {5}, sm_rank[4] = {1, 2, 3, 5};
    attn_tensor mbad = make(ATTN_BOOL, 2, sm_bad), mf32 = make(ATTN_F32, 1, sm_ok),
                mrank = make(ATTN_BOOL, 4, sm_rank);
    o.mask = &mbad;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_MASK,
                 "mask has shape (3, 4), which does not broadcast to (2, 3, 5)", "err_mask_shape");
    o.mask = &mf32;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_MASK, "mask is f32; it must be bool or f64",
                 "err_mask_dtype_named");
    o.mask = &mrank;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_MASK,
                 "mask has rank 4 but the output has rank 3", "err_mask_rank");
    free(mbad.data), free(mf32.data), free(mrank.data);
    o = attn_sdpa_options_default();

    o.has_scale = 1;
    o.scale = NAN;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_SCALE, "finite", "err_scale_nan");
    o.scale = INFINITY;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_SCALE, "finite", "err_scale_inf");
    o = attn_sdpa_options_default();
    o.causal = (attn_causal)7;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "causal mode 7",
                 "err_option_causal");
    o = attn_sdpa_options_default();
    o.compute = (attn_compute)5;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "compute mode 5",
                 "err_option_compute");
    o.compute = ATTN_COMPUTE_BF16;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "bf16 compute needs an f32 or 16-bit q; q is f64",
                 "err_option_bf16_f64");
    o = attn_sdpa_options_default();

    /* Score variants: a bad cap, window or slopes is an error before anything runs. */
    o.softcap = -1;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "softcap is -1", "err_softcap_negative");
    o.softcap = INFINITY;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "softcap is inf", "err_softcap_inf");
    o = attn_sdpa_options_default();
    o.window = 4;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "needs a causal mode",
                 "err_window_without_causal");
    o.causal = ATTN_CAUSAL_TOP_LEFT, o.window = -2;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "window is -2", "err_window_negative");
    o = attn_sdpa_options_default();
    double slopes[3] = {0.5, NAN, 0.25};
    int64_t two = 2, three = 3;
    attn_tensor st;
    attn_tensor_init(&st, slopes, ATTN_F64, 1, &three, NULL, NULL);
    o.alibi_slopes = &st;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_SHAPE, "alibi_slopes must have shape (2,)",
                 "err_alibi_shape");
    attn_tensor_init(&st, slopes, ATTN_F64, 1, &two, NULL, NULL);
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_OPTION, "alibi_slopes[1] is nan",
                 "err_alibi_nan");
    o = attn_sdpa_options_default();
    /* The sinks' gradient: it needs the sinks, and shapes that match. */
    int64_t slse[2] = {2, 3};
    attn_tensor lse2 = make(ATTN_F64, 2, slse), ds = make(ATTN_F64, 1, &two), ds3 = make(ATTN_F64, 1, &three);
    check_status(attn_sdpa_sinks_backward(&ds, &out, &out, &lse2, NULL, &err), &err, ATTN_ERR_NULL, "options is NULL",
                 "err_sinks_backward_no_options");
    check_status(attn_sdpa_sinks_backward(&ds, &out, &out, &lse2, &o, &err), &err, ATTN_ERR_NULL,
                 "options->sinks is NULL", "err_sinks_backward_no_sinks");
    check_status(attn_sdpa_sinks_backward(&ds3, &out, &out, &lse2, &o, &err), &err, ATTN_ERR_SHAPE,
                 "dsinks must have shape (2,)", "err_sinks_backward_shape");
    double sink_vals[2] = {0.5, -1};
    attn_tensor_init(&st, sink_vals, ATTN_F64, 1, &two, NULL, NULL);
    o.sinks = &st;
    check_status(attn_sdpa_sinks_backward(&ds, &out, &out, &lse2, &o, &err), &err, ATTN_OK, "", "sinks_backward_runs");
    free(lse2.data), free(ds.data), free(ds3.data);
    o = attn_sdpa_options_default();
    check_status(attn_alibi_slopes(NULL, 4, &err), &err, ATTN_ERR_NULL, "slopes is NULL", "err_alibi_slopes_null");
    check_status(attn_alibi_slopes(slopes, 0, &err), &err, ATTN_ERR_SHAPE, "heads is 0", "err_alibi_slopes_heads");
    /* The paper's slopes: 8 heads 2^-1 .. 2^-8; 3 heads: those of 2, then the first of every other of 4 (2^-2). */
    double s8[8], s3[3];
    attn_alibi_slopes(s8, 8, &err);
    attn_alibi_slopes(s3, 3, &err);
    check(s8[0] == 0.5 && s8[7] == 0x1p-8 && s3[0] == 0x1p-4 && s3[1] == 0x1p-8 && s3[2] == 0.25, "alibi_paper_slopes",
          "8 heads: %g .. %g, 3 heads: %g %g %g", s8[0], s8[7], s3[0], s3[1], s3[2]);

    bad = out;
    bad.strides[1] = 0;
    check_status(sdpa4(&bad, &q, &k, &v, NULL, &err), &err, ATTN_ERR_STRIDE,
                 "out has stride 0 in dimension 1", "err_stride_out");
    /* Rows 1 element apart, each 6 long: row r's last 5 are row r+1's first. */
    bad = out;
    bad.strides[1] = 1;
    check_status(sdpa4(&bad, &q, &k, &v, NULL, &err), &err, ATTN_ERR_STRIDE,
                 "out has strides (18, 1, 1) that put two of its elements in one place",
                 "err_stride_out_rows_overlap");
    /* The two batches interleaved row by row (strides (6, 12, 1)), and each
     * batch's rows interleaved element by element (strides (18, 1, 3)): no
     * two elements meet, and the answer is the packed out's. */
    attn_tensor packed = make(ATTN_F64, 3, so);
    check_status(sdpa4(&packed, &q, &k, &v, NULL, &err), &err, ATTN_OK, "", "stride_out_packed");
    const int64_t layouts[2][3] = {{6, 12, 1}, {18, 1, 3}};
    for (int l = 0; l < 2; l++) {
        bad = out;
        memcpy(bad.strides, layouts[l], sizeof layouts[l]);
        check_status(sdpa4(&bad, &q, &k, &v, NULL, &err), &err, ATTN_OK, "", "stride_out_interleaved_runs");
        int same = 1;
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 6; j++)
                    same &= ((double *)bad.data)[b * layouts[l][0] + i * layouts[l][1] + j * layouts[l][2]] ==
                            ((double *)packed.data)[(b * 3 + i) * 6 + j];
        check(same, "stride_out_interleaved_same", "layout %d: interleaved elements differ from packed ones", l);
    }
    free(packed.data);
    bad = k;
    bad.strides[0] = INT64_MAX / 2;
    check_status(sdpa4(&out, &q, &bad, &v, NULL, &err), &err, ATTN_ERR_OVERFLOW, "k:",
                 "err_overflow_strides");

    /* Weights with the wrong shape. */
    attn_tensor w = make(ATTN_F64, 3, so);
    check_weights = &w;
    check_status(sdpa4(&out, &q, &k, &v, &o, &err), &err, ATTN_ERR_SHAPE,
                 "weights has shape (2, 3, 6) but the result has shape (2, 3, 5)", "err_weights_shape");
    check_weights = NULL;
    free(w.data);
    o = attn_sdpa_options_default();

    /* lse: out's shape without Ev, q's dtype, writable. out is (2, 3, 6). */
    int64_t sl_ok[2] = {2, 3}, sl_bad[2] = {2, 4};
    attn_tensor lse = make(ATTN_F64, 2, sl_ok), lse_shape = make(ATTN_F64, 2, sl_bad),
                lse_f32 = make(ATTN_F32, 2, sl_ok), lse_rank = make(ATTN_F64, 3, so);
    check_status(attn_sdpa(&out, &lse, NULL, &q, &k, &v, NULL, &err), &err, ATTN_OK, "", "lse_ok");
    check_status(attn_sdpa(&out, &lse_shape, NULL, &q, &k, &v, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "lse has shape (2, 4) but the result has shape (2, 3)", "err_lse_shape");
    check_status(attn_sdpa(&out, &lse_f32, NULL, &q, &k, &v, NULL, &err), &err, ATTN_ERR_DTYPE,
                 "lse is f32 but q is f64", "err_lse_dtype");
    check_status(attn_sdpa(&out, &lse_rank, NULL, &q, &k, &v, NULL, &err), &err, ATTN_ERR_RANK,
                 "lse has rank 3 but it must be 2", "err_lse_rank");
    lse.strides[1] = 0;
    check_status(attn_sdpa(&out, &lse, NULL, &q, &k, &v, NULL, &err), &err, ATTN_ERR_STRIDE,
                 "lse has stride 0", "err_lse_stride");
    free(lse.data), free(lse_shape.data), free(lse_f32.data), free(lse_rank.data);

    /* Scratch for an absurd E cannot be allocated: q and k broadcast one
     * element over 2^40 columns (stride 0), so only the scratch is huge. */
    double one = 1.0, outv = 0.0;
    int64_t shq[2] = {1, (int64_t)1 << 40}, zero[2] = {0, 0}, sh1[2] = {1, 1};
    attn_tensor bq, bk, bv, bo;
    attn_tensor_init(&bq, &one, ATTN_F64, 2, shq, zero, NULL);
    attn_tensor_init(&bk, &one, ATTN_F64, 2, shq, zero, NULL);
    attn_tensor_init(&bv, &one, ATTN_F64, 2, sh1, NULL, NULL);
    attn_tensor_init(&bo, &outv, ATTN_F64, 2, sh1, NULL, NULL);
    check_status(sdpa4(&bo, &bq, &bk, &bv, NULL, &err), &err, ATTN_ERR_NO_MEMORY, "cannot allocate",
                 "err_no_memory");

    /* Nothing is written when a check fails. */
    for (int i = 0; i < 36; i++) ((double *)out.data)[i] = 42.0;
    o.causal = (attn_causal)7;
    sdpa4(&out, &q, &k, &v, &o, &err);
    int untouched = 1;
    for (int i = 0; i < 36; i++) untouched &= ((double *)out.data)[i] == 42.0;
    check(untouched, "err_leaves_output_untouched", "out was written");

    /* attn_sdpa_shapes reports what to allocate. */
    int rank = 0;
    int64_t os[ATTN_MAX_RANK], ws[ATTN_MAX_RANK];
    check_status(attn_sdpa_shapes(&rank, os, ws, &q, &k, &v, NULL, &err), &err, ATTN_OK, "",
                 "shapes_ok");
    check(rank == 3 && os[0] == 2 && os[1] == 3 && os[2] == 6 && ws[2] == 5, "shapes_values",
          "rank %d (%lld, %lld, %lld)", rank, (long long)os[0], (long long)os[1], (long long)os[2]);
    check_status(attn_sdpa_shapes(&rank, os, ws, &q, &k, &v4, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "v has S=4", "shapes_error");
    /* Dimensions of 0 where attn_sdpa takes them, the shapes' 0s where the
     * result has them: (batch, heads, L, S) of q (2|0, 3, 4|0, 6), k and v
     * (1, 3, 5|0, 6); E = 0 refused. No element is read: NULL data. */
    static const struct { int64_t b, L, S, want_out[4], want_w[4]; } Z[3] = {
        {2, 0, 5, {2, 3, 0, 6}, {2, 3, 0, 5}}, {2, 4, 0, {2, 3, 4, 6}, {2, 3, 4, 0}}, {0, 4, 5, {0, 3, 4, 6}, {0, 3, 4, 5}}};
    for (int i = 0; i < 3; i++) {
        int64_t zsq[4] = {Z[i].b, 3, Z[i].L, 6}, zskv[4] = {1, 3, Z[i].S, 6};
        attn_tensor zq, zk;
        attn_tensor_init(&zq, NULL, ATTN_F64, 4, zsq, NULL, NULL), attn_tensor_init(&zk, NULL, ATTN_F64, 4, zskv, NULL, NULL);
        attn_status zst = attn_sdpa_shapes(&rank, os, ws, &zq, &zk, &zk, NULL, &err);
        char name[48];
        snprintf(name, sizeof name, "shapes_with_0_%s", i == 0 ? "queries" : i == 1 ? "keys" : "batch");
        check(zst == ATTN_OK && rank == 4 && !memcmp(os, Z[i].want_out, sizeof Z[i].want_out) &&
                  !memcmp(ws, Z[i].want_w, sizeof Z[i].want_w),
              name, "status %d (%s), rank %d, out (%lld, %lld, %lld, %lld), weights (..., %lld, %lld)", (int)zst,
              zst ? err.message : "", rank, (long long)os[0], (long long)os[1], (long long)os[2], (long long)os[3],
              (long long)ws[2], (long long)ws[3]);
    }
    int64_t se[3] = {3, 4, 0};
    attn_tensor eq;
    attn_tensor_init(&eq, NULL, ATTN_F64, 3, se, NULL, NULL);
    check_status(attn_sdpa_shapes(&rank, os, ws, &eq, &eq, &eq, NULL, &err), &err, ATTN_ERR_SHAPE,
                 "a dimension of 0 is taken only for L", "shapes_with_0_at_e_refused");
    free(q.data), free(k.data), free(v.data), free(out.data);
}

/* ---- numerics --------------------------------------------------------------- */

/* Run attn_sdpa and the reference kernel on one random problem, twice: for
 * the output alone, which takes the fast kernels in f32 (flash, or decode
 * for L <= 8, the cost model in decode.c) and the exact one in f64; and with weights,
 * which takes the exact kernel. Each check names and verifies the kernel
 * that ran (from its verbose line). tol_fast bounds the first comparison,
 * tol the second. */
static void compare_kernels(const char *name, attn_dtype dt, int rank, const int64_t *sq,
                            const int64_t *sk, const int64_t *sv, const int64_t *so,
                            const int64_t *sw, attn_tensor *mask, attn_causal causal, double tol,
                            double tol_fast) {
    attn_tensor q = make(dt, rank, sq), k = make(dt, rank, sk), v = make(dt, rank, sv);
    attn_tensor o1 = make(dt, rank, so), o2 = make(dt, rank, so);
    attn_tensor w1 = make(dt, rank, sw), w2 = make(dt, rank, sw);
    attn_sdpa_options o = attn_sdpa_options_default();
    attn_error err;
    o.mask = mask;
    o.causal = causal;
    attn_status s2 = attn_sdpa_reference(&o2, NULL, &w2, &q, &k, &v, &o, &err);
    int64_t L = sq[rank - 2];
    const char *fast = dt == ATTN_F64 ? "exact" : L <= 8 ? "decode" : "flash"; /* decode.c's cost model: any S */
    char kernel[32], full[160];
    for (int with_weights = 0; with_weights < 2; with_weights++) {
        verbose_begin();
        attn_status s1 = attn_sdpa(&o1, NULL, with_weights ? &w1 : NULL, &q, &k, &v, &o, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        const char *want = with_weights ? "exact" : fast;
        double d = max_diff(&o1, &o2), dw = with_weights ? max_diff(&w1, &w2) : 0;
        double t = with_weights ? tol : tol_fast;
        snprintf(full, sizeof full, "%s_%s%s", name, want, with_weights ? "_with_weights" : "");
        check(s1 == ATTN_OK && s2 == ATTN_OK && strcmp(kernel, want) == 0 && d <= t && dw <= t, full,
              "status %d/%d, kernel %s (expected %s), max diff out %.3g weights %.3g (tol %.1g)", s1,
              s2, kernel, want, d, dw, t);
    }
    free(q.data), free(k.data), free(v.data), free(o1.data), free(o2.data), free(w1.data),
        free(w2.data);
}

static void test_kernels_agree(void) {
    /* Sizes straddle the streaming kernel's 16-row and 64-key blocks. */
    int64_t dims[][4] = {{1, 1, 1, 1}, {3, 7, 5, 2}, {17, 65, 33, 7}, {100, 130, 8, 100},
                         {64, 64, 16, 16}, {130, 3, 4, 4}};
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
        int64_t L = dims[c][0], S = dims[c][1], E = dims[c][2], Ev = dims[c][3];
        int64_t sq[3] = {2, L, E}, sk[3] = {2, S, E}, sv[3] = {2, S, Ev}, so[3] = {2, L, Ev},
                sw[3] = {2, L, S}, sm[2] = {L, S};
        char name[96];
        for (int causal = 0; causal < 3; causal++) {
            snprintf(name, sizeof name, "kernels_agree_f64_L%lld_S%lld_E%lld_causal%d", (long long)L,
                     (long long)S, (long long)E, causal);
            compare_kernels(name, ATTN_F64, 3, sq, sk, sv, so, sw, NULL, (attn_causal)causal, 1e-14, 1e-14);
        }
        attn_tensor m = make(ATTN_BOOL, 2, sm);
        snprintf(name, sizeof name, "kernels_agree_f32_boolmask_L%lld_S%lld", (long long)L,
                 (long long)S);
        compare_kernels(name, ATTN_F32, 3, sq, sk, sv, so, sw, &m, ATTN_CAUSAL_BOTTOM_RIGHT, 1e-6, 2e-5);
        free(m.data);
        attn_tensor mf = make(ATTN_F64, 2, sm);
        ((double *)mf.data)[0] = -INFINITY;
        snprintf(name, sizeof name, "kernels_agree_f64_floatmask_L%lld_S%lld", (long long)L,
                 (long long)S);
        compare_kernels(name, ATTN_F64, 3, sq, sk, sv, so, sw, &mf, ATTN_CAUSAL_NONE, 1e-14, 1e-14);
        free(mf.data);
    }
    /* GQA and a broadcast batch dimension. */
    int64_t sq[4] = {2, 8, 9, 5}, sk[4] = {1, 2, 70, 5}, sv[4] = {2, 2, 70, 3}, so[4] = {2, 8, 9, 3},
            sw[4] = {2, 8, 9, 70};
    compare_kernels("kernels_agree_gqa_broadcast", ATTN_F64, 4, sq, sk, sv, so, sw, NULL,
                    ATTN_CAUSAL_TOP_LEFT, 1e-14, 1e-14);
    compare_kernels("kernels_agree_f32_gqa_broadcast", ATTN_F32, 4, sq, sk, sv, so, sw, NULL,
                    ATTN_CAUSAL_TOP_LEFT, 1e-6, 2e-5);
    /* The decode path: a few queries against many keys. */
    int64_t dq[3] = {4, 3, 16}, dk[3] = {2, 3000, 16}, dv[3] = {2, 3000, 8}, dout[3] = {4, 3, 8},
            dw[3] = {4, 3, 3000};
    compare_kernels("kernels_agree_f32_gqa_decode", ATTN_F32, 3, dq, dk, dv, dout, dw, NULL,
                    ATTN_CAUSAL_BOTTOM_RIGHT, 1e-6, 2e-5);
}

/* A 1×S problem with given f64 scores: q = [1], k = scores, v = identity, so
 * the output row is the weights. */
static void softmax_row(double *w, const double *scores, const unsigned char *allowed, int S,
                        attn_causal causal) {
    double q = 1.0, *eye = calloc((size_t)(S * S), sizeof(double));
    for (int i = 0; i < S; i++) eye[i * S + i] = 1.0;
    int64_t sq[2] = {1, 1}, sk[2] = {S, 1}, sv[2] = {S, S}, so[2] = {1, S};
    attn_tensor tq, tk, tv, to, tm;
    attn_tensor_init(&tq, &q, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, (void *)scores, ATTN_F64, 2, sk, NULL, NULL);
    attn_tensor_init(&tv, eye, ATTN_F64, 2, sv, NULL, NULL);
    attn_tensor_init(&to, w, ATTN_F64, 2, so, NULL, NULL);
    attn_tensor_init(&tm, (void *)allowed, ATTN_BOOL, 2, so, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = 1.0;
    o.causal = causal;
    o.mask = allowed ? &tm : NULL;
    attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, &o, NULL);
    free(eye);
}

static void test_numerics(void) {
    double w[4];
    double s1[3] = {4, 16, 12};
    softmax_row(w, s1, NULL, 3, ATTN_CAUSAL_NONE);
    double z = exp(-12.0) + 1 + exp(-4.0);
    check(fabs(w[0] - exp(-12.0) / z) < 1e-15 && fabs(w[1] - 1 / z) < 1e-15 &&
              fabs(w[2] - exp(-4.0) / z) < 1e-15,
          "softmax_4_16_12", "[%g %g %g]", w[0], w[1], w[2]);

    double huge[3] = {1e30, -1e30, 1e30 * (1 - 1e-15)};
    softmax_row(w, huge, NULL, 3, ATTN_CAUSAL_NONE);
    check(w[0] == 1.0 && w[1] == 0.0 && w[2] == 0.0, "huge_scores_finite", "[%g %g %g]", w[0],
          w[1], w[2]);

    double infs[3] = {INFINITY, 1.0, INFINITY};
    softmax_row(w, infs, NULL, 3, ATTN_CAUSAL_NONE);
    /* e^(inf - inf): NaN, the whole row, as PyTorch's softmax gives it */
    check(isnan(w[0]) && isnan(w[1]) && isnan(w[2]), "plus_inf_scores_nan_row_as_pytorch", "[%g %g %g]", w[0],
          w[1], w[2]);

    unsigned char none[3] = {0, 0, 0}, some[3] = {0, 1, 0};
    double s3[3] = {1, 2, 3};
    softmax_row(w, s3, none, 3, ATTN_CAUSAL_NONE);
    check(w[0] == 0 && w[1] == 0 && w[2] == 0, "fully_masked_row_is_zero", "[%g %g %g]", w[0], w[1],
          w[2]);
    softmax_row(w, s3, some, 3, ATTN_CAUSAL_NONE);
    check(w[0] == 0 && w[1] == 1 && w[2] == 0, "bool_mask_one_key", "[%g %g %g]", w[0], w[1], w[2]);

    /* NaN in one query row stays in that row. */
    int64_t sq[2] = {3, 4}, sk[2] = {5, 4}, sv[2] = {5, 2}, so[2] = {3, 2};
    attn_tensor q = make(ATTN_F32, 2, sq), k = make(ATTN_F32, 2, sk), v = make(ATTN_F32, 2, sv),
                out = make(ATTN_F32, 2, so);
    ((float *)q.data)[1 * 4 + 2] = NAN;
    attn_status st = attn_sdpa(&out, NULL, NULL, &q, &k, &v, NULL, NULL);
    float *ov = out.data;
    check(st == ATTN_OK && isnan(ov[2]) && isnan(ov[3]) && !isnan(ov[0]) && !isnan(ov[1]) &&
              !isnan(ov[4]) && !isnan(ov[5]),
          "nan_stays_in_its_row", "out %g %g | %g %g | %g %g", ov[0], ov[1], ov[2], ov[3], ov[4],
          ov[5]);

    /* Bottom-right causal with L > S: the first L - S rows see nothing. */
    int64_t sq2[2] = {5, 4}, so2[2] = {5, 2}, sk2[2] = {3, 4}, sv2[2] = {3, 2}, sw2[2] = {5, 3};
    attn_tensor q2 = make(ATTN_F64, 2, sq2), k2 = make(ATTN_F64, 2, sk2),
                v2 = make(ATTN_F64, 2, sv2), o2 = make(ATTN_F64, 2, so2), w2 = make(ATTN_F64, 2, sw2);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    st = attn_sdpa(&o2, NULL, &w2, &q2, &k2, &v2, &o, NULL);
    double *wv = w2.data, *oo = o2.data;
    int ok = st == ATTN_OK;
    for (int i = 0; i < 5; i++) {
        double sum = 0;
        for (int j = 0; j < 3; j++) {
            sum += wv[i * 3 + j];
            if (j > i - 2 && wv[i * 3 + j] != 0) ok = 0;
        }
        if (i < 2 && (sum != 0 || oo[i * 2] != 0 || oo[i * 2 + 1] != 0)) ok = 0;
        if (i >= 2 && fabs(sum - 1) > 1e-15) ok = 0;
    }
    check(ok, "causal_bottom_right_rows", "weights or sums wrong");
    free(q.data), free(k.data), free(v.data), free(out.data);
    free(q2.data), free(k2.data), free(v2.data), free(o2.data), free(w2.data);
}

/* A strided view gives the same numbers as a contiguous copy: q stored as
 * (B, L, H, E) and viewed as (B, H, L, E). */
static void test_strided(void) {
    int64_t B = 2, H = 3, L = 5, S = 7, E = 4;
    int64_t blhe[4] = {B, L, H, E}, bhle[4] = {B, H, L, E}, sk[4] = {B, H, S, E}, so[4] = {B, H, L, E};
    attn_tensor qs = make(ATTN_F64, 4, blhe), qc = make(ATTN_F64, 4, bhle);
    attn_tensor k = make(ATTN_F64, 4, sk), v = make(ATTN_F64, 4, sk);
    attn_tensor o1 = make(ATTN_F64, 4, so), o2 = make(ATTN_F64, 4, so);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t e = 0; e < E; e++)
                    ((double *)qc.data)[((b * H + h) * L + l) * E + e] =
                        ((double *)qs.data)[((b * L + l) * H + h) * E + e];
    int64_t strides[4] = {L * H * E, E, H * E, 1};
    attn_tensor view;
    attn_tensor_init(&view, qs.data, ATTN_F64, 4, bhle, strides, NULL);
    attn_sdpa(&o1, NULL, NULL, &view, &k, &v, NULL, NULL);
    attn_sdpa(&o2, NULL, NULL, &qc, &k, &v, NULL, NULL);
    check(max_diff(&o1, &o2) == 0.0, "strided_view_equals_copy", "diff %g", max_diff(&o1, &o2));
    free(qs.data), free(qc.data), free(k.data), free(v.data), free(o1.data), free(o2.data);
}

/* ---- .npy ---------------------------------------------------------------- */

/* Build a .npy image with the given version, header text and data size. */
static size_t npy_image(unsigned char *buf, int major, const char *header, size_t data_bytes) {
    size_t hl = strlen(header), n = 0;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (unsigned char)(hl & 0xff), buf[9] = (unsigned char)(hl >> 8);
        n = 10;
    } else {
        buf[8] = (unsigned char)(hl & 0xff), buf[9] = (unsigned char)(hl >> 8), buf[10] = 0, buf[11] = 0;
        n = 12;
    }
    memcpy(buf + n, header, hl);
    n += hl;
    memset(buf + n, 0, data_bytes);
    return n + data_bytes;
}

static void check_npy(const char *name, int major, const char *header, size_t data_bytes,
                      attn_status want, const char *needle) {
    unsigned char buf[1024];
    size_t n = npy_image(buf, major, header, data_bytes);
    attn_tensor t;
    attn_error err;
    attn_status st = attn_npy_parse(&t, buf, n, &err);
    check_status(st, &err, want, needle, name);
    attn_npy_free(&t);
}

static void test_npy(void) {
    const char *ok2x3 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
    check_npy("npy_v1", 1, ok2x3, 24, ATTN_OK, "");
    check_npy("npy_v2", 2, ok2x3, 24, ATTN_OK, "");
    check_npy("npy_v3", 3, ok2x3, 24, ATTN_OK, "");
    check_npy("npy_scalar", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", 8,
              ATTN_OK, "");
    check_npy("npy_1d_keys_reordered", 1, "{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"|b1\"}\n",
              4, ATTN_OK, "");
    unsigned char buf[1024];
    size_t n = npy_image(buf, 4, ok2x3, 24);
    attn_tensor t;
    attn_error err;
    check_status(attn_npy_parse(&t, buf, n, &err), &err, ATTN_ERR_NPY_UNSUPPORTED, "version 4.0",
                 "npy_version_4");
    n = npy_image(buf, 1, ok2x3, 24);
    buf[0] = 'X';
    check_status(attn_npy_parse(&t, buf, n, &err), &err, ATTN_ERR_NPY_HEADER, "magic", "npy_magic");
    check_status(attn_npy_parse(&t, buf, 5, &err), &err, ATTN_ERR_NPY_HEADER, "magic", "npy_short");
    n = npy_image(buf, 1, ok2x3, 24);
    buf[8] = (unsigned char)(strlen(ok2x3) - 5); /* the header length lies: too short */
    check_status(attn_npy_parse(&t, buf, n, &err), &err, ATTN_ERR_NPY_HEADER, "newline",
                 "npy_header_len_lies");
    buf[8] = 0, buf[9] = 2; /* 512 bytes: past the end of the file */
    check_status(attn_npy_parse(&t, buf, n, &err), &err, ATTN_ERR_NPY_HEADER, "past the end",
                 "npy_header_len_past_end");
    { /* Fortran order (NumPy's x.T, np.asfortranarray) is read into C order. */
        const char *fh = "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 2), }\n";
        n = npy_image(buf, 1, fh, 96);
        for (int i = 0; i < 12; i++) { /* the file lists axis 0 fastest: element i is (i % 2, i / 2 % 3, i / 6) */
            double x = 100 * (i % 2) + 10 * (i / 2 % 3) + i / 6;
            memcpy(buf + n - 96 + 8 * i, &x, 8);
        }
        attn_status st = attn_npy_parse(&t, buf, n, &err);
        int wrong = st != ATTN_OK;
        for (int a = 0; !st && a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    wrong += ((double *)t.data)[a * 6 + b * 2 + c] != 100 * a + 10 * b + c ||
                             t.strides[0] != 6 || t.strides[2] != 1;
        check(!wrong, "npy_fortran_read_in_c_order", "status %d, %d wrong", (int)st, wrong);
        attn_npy_free(&t);
    }
    { /* Big-endian data ('>f8', '>f2', NumPy's x.astype('>f8')) is read, its bytes in the host's order;
       * attn_npy_header, which lays the bytes out in place, refuses it. */
        const char *be8 = "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 2), }\n";
        n = npy_image(buf, 1, be8, 32);
        for (int i = 0; i < 4; i++) { /* 1.5 + i, most significant byte first, axis 0 fastest */
            uint64_t bits;
            double x = 1.5 + i;
            memcpy(&bits, &x, 8);
            for (int b = 0; b < 8; b++) buf[n - 32 + 8 * i + b] = (unsigned char)(bits >> (56 - 8 * b));
        }
        attn_status st = attn_npy_parse(&t, buf, n, &err);
        const double *d = st ? NULL : t.data;
        check(!st && d[0] == 1.5 && d[1] == 3.5 && d[2] == 2.5 && d[3] == 4.5, "npy_big_endian_f8_read",
              "status %d: %s", (int)st, err.message);
        attn_npy_free(&t);
        attn_npy_info info = {.struct_size = sizeof info};
        check_status(attn_npy_header(&info, buf, n, n, &err), &err, ATTN_ERR_NPY_UNSUPPORTED, "big-endian",
                     "npy_big_endian_header_refused");
        const char *be2 = "{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }\n";
        n = npy_image(buf, 1, be2, 2);
        buf[n - 2] = 0x3e, buf[n - 1] = 0x00; /* 1.5 in binary16 */
        st = attn_npy_parse(&t, buf, n, &err);
        check(!st && ((const uint16_t *)t.data)[0] == 0x3e00, "npy_big_endian_f2_read", "status %d", (int)st);
        attn_npy_free(&t);
    }
    check_npy("npy_int64", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }\n", 16,
              ATTN_ERR_NPY_UNSUPPORTED, "integer arrays ('<i8')");
    check_npy("npy_object", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }\n", 16,
              ATTN_ERR_NPY_UNSUPPORTED, "object");
    check_npy("npy_structured", 1,
              "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", 8,
              ATTN_ERR_NPY_UNSUPPORTED, "structured");
    check_npy("npy_truncated", 1, ok2x3, 23, ATTN_ERR_NPY_TRUNCATED, "needs 24 bytes but the file has 23");
    check_npy("npy_trailing", 1, ok2x3, 25, ATTN_ERR_NPY_TRAILING, "1 unexpected bytes");
    check_npy("npy_overflow", 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", 0,
              ATTN_ERR_OVERFLOW, "overflows");
    check_npy("npy_dim_overflow", 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", 0,
              ATTN_ERR_OVERFLOW, "overflows");
    check_npy("npy_rank_6", 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1), }\n", 8,
              ATTN_ERR_RANK, "more than 5");
    check_npy("npy_missing_key", 1, "{'descr': '<f8', 'shape': (1,), }\n", 8, ATTN_ERR_NPY_HEADER,
              "lacks 'fortran_order'");
    check_npy("npy_extra_key", 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}\n", 8,
              ATTN_ERR_NPY_HEADER, "unexpected or repeated key 'x'");
    check_npy("npy_not_dict", 1, "[1, 2]\n", 0, ATTN_ERR_NPY_HEADER, "dict");
    check_npy("npy_negative_dim", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }\n",
              0, ATTN_ERR_NPY_HEADER, "non-negative");
    check_status(attn_npy_parse(&t, NULL, 10, &err), &err, ATTN_ERR_NULL, "NULL", "npy_parse_null");
    check_status(attn_npy_parse(NULL, buf, 10, &err), &err, ATTN_ERR_NULL, "NULL", "npy_parse_null_out");

    /* Round trip through a file, from a strided (transposed) view. */
    char dir[] = "/tmp/attn_test_" "XX" "XX" "XX", path[128]; /* a mkdtemp template */
    check(mkdtemp(dir) != NULL, "npy_tmpdir", "mkdtemp failed");
    snprintf(path, sizeof path, "%s/t.npy", dir);
    int64_t shape[2] = {3, 4}, tstrides[2] = {1, 3};
    attn_tensor src = make(ATTN_F32, 2, shape), view, back;
    attn_tensor_init(&view, src.data, ATTN_F32, 2, shape, tstrides, NULL);
    view.shape[0] = 4, view.shape[1] = 3; /* the transpose: (4, 3) */
    view.strides[0] = 1, view.strides[1] = 4;
    check_status(attn_npy_write(path, &view, &err), &err, ATTN_OK, "", "npy_write");
    check_status(attn_npy_read(&back, path, &err), &err, ATTN_OK, "", "npy_read");
    int same = back.rank == 2 && back.shape[0] == 4 && back.shape[1] == 3 && back.dtype == ATTN_F32;
    for (int i = 0; same && i < 4; i++)
        for (int j = 0; j < 3; j++)
            same &= ((float *)back.data)[i * 3 + j] == ((float *)src.data)[j * 4 + i];
    check(same, "npy_round_trip_transposed", "values or shape differ");
    /* The header alone, from the file's first bytes: what MPI-IO readers use. */
    unsigned char head[ATTN_NPY_HEADER_MAX];
    size_t head_len = 0;
    attn_npy_info info = {.struct_size = sizeof info};
    check_status(attn_npy_format_header(head, sizeof head, &head_len, ATTN_F32, 2, view.shape, &err), &err, ATTN_OK, "",
                 "npy_format_header");
    FILE *hf = fopen(path, "rb");
    unsigned char file_head[ATTN_NPY_HEADER_MAX];
    size_t got = hf ? fread(file_head, 1, head_len, hf) : 0;
    if (hf) fclose(hf);
    check(got == head_len && memcmp(head, file_head, head_len) == 0 && head_len % 64 == 0, "npy_format_header_is_the_files",
          "%zu bytes", head_len);
    check_status(attn_npy_header(&info, head, head_len, head_len + 48, &err), &err, ATTN_OK, "", "npy_header");
    check(info.data_offset == head_len && info.data_bytes == 48 && info.rank == 2 && info.shape[0] == 4 &&
          info.shape[1] == 3 && info.dtype == ATTN_F32 && !info.fortran_order, "npy_header_layout", "offset %zu",
          info.data_offset);
    check_status(attn_npy_header(&info, head, head_len, head_len + 40, &err), &err, ATTN_ERR_NPY_TRUNCATED, "truncated",
                 "npy_header_truncated");
    check_status(attn_npy_header(&info, head, head_len, 8, &err), &err, ATTN_ERR_ARGUMENT, "less than",
                 "npy_header_file_size");
    check_status(attn_npy_format_header(head, 40, &head_len, ATTN_F32, 2, view.shape, &err), &err, ATTN_ERR_ARGUMENT,
                 "needs", "npy_format_header_small");
    /* Only headers the reader takes back: no negative dimension, no byte
     * count past int64 (2^31 · 2^31 · 4 f32 bytes). */
    int64_t negative[2] = {4, -3}, huge[3] = {INT64_C(1) << 31, INT64_C(1) << 31, 4};
    check_status(attn_npy_format_header(head, sizeof head, &head_len, ATTN_F32, 2, negative, &err), &err,
                 ATTN_ERR_SHAPE, "shape[1] is -3; a dimension must be >= 0", "npy_format_header_negative_dimension");
    check_status(attn_npy_format_header(head, sizeof head, &head_len, ATTN_F32, 3, huge, &err), &err,
                 ATTN_ERR_OVERFLOW, "shape (2147483648, 2147483648, 4) is too large: its byte count overflows",
                 "npy_format_header_overflow");
    attn_npy_free(&back);
    attn_npy_free(&back); /* twice is fine */
    check(back.data == NULL, "npy_free_zeroes", "data not cleared");
    snprintf(path, sizeof path, "%s/missing/t.npy", dir);
    check_status(attn_npy_write(path, &view, &err), &err, ATTN_ERR_IO, "cannot create",
                 "npy_write_io");
    check_status(attn_npy_read(&back, path, &err), &err, ATTN_ERR_IO, "cannot open", "npy_read_io");
    check_status(attn_npy_read(&back, dir, &err), &err, ATTN_ERR_IO, "not a regular file",
                 "npy_read_dir");
    check_status(attn_npy_write(NULL, &view, &err), &err, ATTN_ERR_NULL, "path", "npy_write_null");
    view.dtype = (attn_dtype)99;
    check_status(attn_npy_write(path, &view, &err), &err, ATTN_ERR_DTYPE, "unknown dtype 99", "npy_write_dtype");
    /* a quantized format is a known dtype that .npy cannot hold: said so, not "unknown" */
    view.dtype = ATTN_Q8;
    check_status(attn_npy_write(path, &view, &err), &err, ATTN_ERR_DTYPE,
                 "q8 is a quantized format, not a .npy dtype; dequantize to f32 first", "npy_write_quantized");
    check_status(attn_npy_format_header(head, sizeof head, &head_len, ATTN_E4M3, 2, view.shape, &err), &err,
                 ATTN_ERR_DTYPE, "e4m3 is a quantized format, not a .npy dtype", "npy_format_header_quantized");
    check_status(attn_npy_format_header(head, sizeof head, &head_len, ATTN_BF16, 2, view.shape, &err), &err,
                 ATTN_ERR_DTYPE, ".npy has no bfloat16 dtype", "npy_format_header_bf16");
    view.dtype = ATTN_F32;
    view.rank = 7;
    check_status(attn_npy_write(path, &view, &err), &err, ATTN_ERR_RANK, "rank 7", "npy_write_rank");
    snprintf(path, sizeof path, "%s/t.npy", dir);
    remove(path);
    rmdir(dir);
    free(src.data);
}

/* ---- scores, toy model, explainer, scaling experiment -------------------- */

static void test_scores(void) {
    double q[2 * 3] = {1, 2, 3, 4, 5, 6}, k[3 * 3] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, s[2 * 3];
    int64_t sq[2] = {2, 3}, sk[2] = {3, 3};
    attn_tensor tq, tk, ts;
    attn_error err;
    attn_tensor_init(&tq, q, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, k, ATTN_F64, 2, sk, NULL, NULL);
    attn_tensor_init(&ts, s, ATTN_F64, 2, sq, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1;
    o.scale = 0.5;
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    check_status(attn_scores(&ts, &tq, &tk, &o, &err), &err, ATTN_OK, "", "scores_ok");
    /* q·k with k the identity is q itself; times 0.5; masked above the diagonal. */
    check(s[0] == 0.5 && isinf(s[1]) && s[1] < 0 && isinf(s[2]) && s[3] == 2 && s[4] == 2.5 &&
              isinf(s[5]),
          "scores_values", "%g %g %g | %g %g %g", s[0], s[1], s[2], s[3], s[4], s[5]);
    /* The variants in attn_sdpa's order: the cap on q·k·scale, then ALiBi
     * (off = S - L = 1 bottom-right), then the window of 2 and the causal
     * limit (j in i..i+1); a sink does not enter. */
    double slope = 0.25, sink = 3.0;
    int64_t one = 1;
    attn_tensor tslope, tsink;
    attn_tensor_init(&tslope, &slope, ATTN_F64, 1, &one, NULL, NULL);
    attn_tensor_init(&tsink, &sink, ATTN_F64, 1, &one, NULL, NULL);
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.softcap = 10, o.alibi_slopes = &tslope, o.window = 2, o.sinks = &tsink;
    check_status(attn_scores(&ts, &tq, &tk, &o, &err), &err, ATTN_OK, "", "scores_variants_ok");
    double want[6] = {10 * tanh(0.05) - 0.25, 10 * tanh(0.1), -INFINITY, -INFINITY, 10 * tanh(0.25) - 0.25, 10 * tanh(0.3)};
    check(!memcmp(s, want, sizeof want), "scores_variants_values", "%g %g %g | %g %g %g", s[0], s[1], s[2], s[3], s[4],
          s[5]);
    o.softcap = 0, o.alibi_slopes = NULL, o.window = 0, o.sinks = NULL, o.causal = ATTN_CAUSAL_TOP_LEFT;
    int64_t bad[2] = {2, 2};
    attn_tensor_init(&ts, s, ATTN_F64, 2, bad, NULL, NULL);
    check_status(attn_scores(&ts, &tq, &tk, &o, &err), &err, ATTN_ERR_SHAPE,
                 "scores has shape (2, 2) but the result has shape (2, 3)", "scores_shape_error");
}

static void test_toy(void) {
    attn_toy_token tok[8];
    int n = -1;
    attn_error err;
    check_status(attn_toy_tokenize(tok, 8, &n, "The cat, SAT.", &err), &err, ATTN_OK, "", "toy_tokenize");
    check(n == 3 && tok[0].id == attn_toy_word_id("the", 3) && tok[2].start == 9 && tok[2].length == 3,
          "toy_tokens", "n %d, start %d", n, tok[2].start);
    /* Quotes around a word, and the no-break spaces, curly quotes, dashes and
     * ellipsis of pasted text, separate words like ASCII punctuation: "'the'"
     * was once the unknown word 'the' with its quotes, and "cat<NBSP>sat" one
     * unknown word. An apostrophe inside a word stays in it. */
    static const char *const PASTED[] = {"'the' 'cat' sat", "\xe2\x80\x9cthe cat\xe2\x80\x9d sat",
                                         ("the\xc2\xa0" "cat\xe2\x80\x94sat\xe2\x80\xa6"),
                                         "\xef\xbb\xbf\xe2\x80\x98the\xe2\x80\x99 cat\xe2\x80\xafsat"};
    for (size_t i = 0; i < sizeof PASTED / sizeof *PASTED; i++) {
        n = -1;
        attn_status st = attn_toy_tokenize(tok, 8, &n, PASTED[i], &err);
        check(st == ATTN_OK && n == 3 && tok[0].id == attn_toy_word_id("the", 3) &&
                  tok[1].id == attn_toy_word_id("cat", 3) && tok[2].id == attn_toy_word_id("sat", 3),
              "toy_tokenize_pasted_punctuation", "case %zu: status %d, n %d: %s", i, (int)st, n,
              st ? err.message : "");
    }
    check_status(attn_toy_tokenize(tok, 8, &n, "the cat's mat", &err), &err, ATTN_ERR_TOKEN, "unknown word 'cat's'",
                 "toy_tokenize_apostrophe_inside_word");
    check_status(attn_toy_tokenize(tok, 8, &n, "the cat\xe2\x80\x99s mat", &err), &err, ATTN_ERR_TOKEN,
                 "unknown word 'cat\xe2\x80\x99s'", "toy_tokenize_curly_apostrophe_inside_word");
    check(attn_toy_vocab_size() >= 30 && attn_toy_word(-1) == NULL && attn_toy_feature(8) == NULL,
          "toy_vocab", "size %d", attn_toy_vocab_size());
    const char *need[] = {"the", "a", "cat", "dog", "mat", "sat", "on", "ran", "chased", "ball", "park",
                          "in", "my", "quick", "brown", "fox", "jumped", "over", "lazy"};
    int all = 1;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        all &= attn_toy_word_id(need[i], strlen(need[i])) >= 0;
    check(all, "toy_vocab_has_required_words", "a required word is missing");
    check_status(attn_toy_tokenize(tok, 8, &n, "the cat zebra sat", &err), &err, ATTN_ERR_TOKEN,
                 "unknown word 'zebra'", "toy_unknown_word");
    check(n == 2 && tok[2].id == -1 && tok[2].start == 8 && tok[2].length == 5, "toy_unknown_position",
          "n %d start %d", n, tok[2].start);
    /* The message's guess is today's attn_toy_suggest's (none for a far
     * word), not 0.2's, which toy.c also defines under the plain name. */
    check_status(attn_toy_tokenize(tok, 8, &n, "the Elephant sat", &err), &err, ATTN_ERR_TOKEN,
                 "unknown word 'Elephant'; the toy model knows only these words", "toy_far_word_no_guess");
    check_status(attn_toy_tokenize(tok, 8, &n, "the cta sat", &err), &err, ATTN_ERR_TOKEN,
                 "unknown word 'cta' (did you mean 'cat'?)", "toy_close_word_guessed");
    check_status(attn_toy_tokenize(tok, 8, &n, " ... ", &err), &err, ATTN_ERR_TOKEN, "no words",
                 "toy_empty");
    check_status(attn_toy_tokenize(tok, 2, &n, "the cat sat", &err), &err, ATTN_ERR_TOKEN,
                 "more than 2 words", "toy_too_long");
    check_status(attn_toy_tokenize(tok, 1, &n, "the cat", &err), &err, ATTN_ERR_TOKEN,
                 "has more than 1 word", "toy_too_long_singular");
    check(!strstr(err.message, "words"), "toy_too_long_singular_not_words", "%s", err.message); /* was "1 words" */
    check_status(attn_toy_tokenize(tok, 0, &n, "the", &err), &err, ATTN_ERR_ARGUMENT, "max_tokens",
                 "toy_max_tokens");
    check_status(attn_toy_tokenize(NULL, 8, &n, "the", &err), &err, ATTN_ERR_NULL, "NULL", "toy_null");
    check(strcmp(attn_toy_suggest("cta", 3), "cat") == 0 && strcmp(attn_toy_suggest("DGO", 3), "dog") == 0 &&
              strcmp(attn_toy_suggest("chasd", 5), "chased") == 0 && strcmp(attn_toy_suggest("Jupmed", 6), "jumped") == 0,
          "toy_suggest", "%s", attn_toy_suggest("cta", 3));
    /* Far words get no suggestion: "Elephant" is not "slept", "and" is not "a". */
    check(!attn_toy_suggest("Elephant", 8) && !attn_toy_suggest("and", 3) && !attn_toy_suggest("xyz", 3) &&
              !attn_toy_suggest("", 0),
          "toy_suggest_only_close_words", "Elephant -> %s, and -> %s", attn_toy_suggest("Elephant", 8) ? "a word" : "none",
          attn_toy_suggest("and", 3) ? attn_toy_suggest("and", 3) : "none");
    double x[16], w[3][32];
    attn_toy_token bad = {99, 0, 1};
    check_status(attn_toy_embed(x, &bad, 1, &err), &err, ATTN_ERR_TOKEN, "id 99", "toy_embed_bad_id");
    check_status(attn_toy_embed(x, &bad, -1, &err), &err, ATTN_ERR_ARGUMENT, "n is -1; it must be 0 or more",
                 "toy_embed_negative_n");
    check_status(attn_toy_weights(w[0], w[1], w[2], (attn_toy_head)5, &err), &err, ATTN_ERR_ARGUMENT,
                 "head 5", "toy_weights_bad_head");
    check_status(attn_toy_weights(NULL, w[1], w[2], ATTN_TOY_WIRED, &err), &err, ATTN_ERR_NULL, "NULL",
                 "toy_weights_null");
}

static void test_explain(void) {
    double x[6] = {1, 0, 0, 1, 1, 1};
    attn_explain ex;
    attn_error err;
    attn_explain_input in = {3, 2, 0, 0, x, NULL, NULL, NULL, ATTN_EXPLAIN_AVERAGE, 0, 0, 0, ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_OK, "", "explain_average");
    check(fabs(ex.weights[0] - 1.0 / 3) < 1e-15 && fabs(ex.output[0] - 2.0 / 3) < 1e-15 && ex.scale == 0,
          "explain_average_values", "%g %g", ex.weights[0], ex.output[0]);
    attn_explain_free(&ex);
    attn_explain_free(&ex);
    in.mode = (attn_explain_mode)9;
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_OPTION, "mode 9", "explain_bad_mode");
    in.mode = ATTN_EXPLAIN_QKV;
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_NULL, "W_Q", "explain_qkv_needs_w");
    in.mode = ATTN_EXPLAIN_DOT;
    in.n_tokens = 0;
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_ARGUMENT, "n_tokens (0)",
                 "explain_no_tokens");
    check_status(attn_explain_run(&ex, NULL, &err), &err, ATTN_ERR_NULL, "NULL", "explain_null");
    /* A NaN or an infinity in, or scores that overflow a double, gave NaN
     * weights that were said to sum to 1; they are refused, by name. */
    in.n_tokens = 3;
    x[3] = NAN;
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_ARGUMENT, "X (row 1, column 1, counting from 0) is nan",
                 "explain_nan_input");
    double big[4] = {1e300, 1e300, 1e300, -1e300}; /* the second row's q.k is inf - inf */
    in.X = big, in.n_tokens = 2;
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_OVERFLOW, "overflow", "explain_overflow");
    check(!ex.weights, "explain_overflow_zeroed", "%p", (void *)ex.weights);
    double wq[4] = {1, 0, 0, INFINITY}, w[4] = {1, 0, 0, 1}, one[2] = {1, 1};
    in = (attn_explain_input){1, 2, 2, 2, one, wq, w, w, ATTN_EXPLAIN_QKV, 0, 0, 0, ATTN_EXPLAIN_NO_POSITIONS, NULL, 0};
    check_status(attn_explain_run(&ex, &in, &err), &err, ATTN_ERR_ARGUMENT, "W_Q (row 1, column 1, counting from 0) is inf",
                 "explain_inf_weight");
}

static void test_scaling(void) {
    attn_scaling_row a, b;
    attn_error err;
    check_status(attn_scaling_measure(&a, 32, 40, 8, 7, &err), &err, ATTN_OK, "", "scaling_ok");
    attn_scaling_measure(&b, 32, 40, 8, 7, NULL);
    double hist = 0;
    for (int i = 0; i < ATTN_SCALING_BINS; i++) hist += a.hist_scaled[i] * 2 * ATTN_SCALING_SCALED_RANGE / ATTN_SCALING_BINS;
    check(memcmp(&a, &b, sizeof a) == 0 && a.top_raw > a.top_scaled && a.top_scaled > a.top_div_d &&
              hist > 0.99 && hist <= 1.0 + 1e-12,
          "scaling_deterministic_and_ordered", "top %g %g %g, histogram mass %g", a.top_raw, a.top_scaled,
          a.top_div_d, hist);
    check_status(attn_scaling_measure(&a, 0, 40, 8, 7, &err), &err, ATTN_ERR_ARGUMENT, "d=0",
                 "scaling_bad_d");
    check_status(attn_scaling_measure(NULL, 8, 40, 8, 7, &err), &err, ATTN_ERR_NULL, "NULL",
                 "scaling_null");
}

/* ---- 16-bit floats ------------------------------------------------------ */

/* Element i of a tensor of f32, f16 or bf16 values, widened exactly. */
static float value_of(const void *p, attn_dtype dt, int64_t i) {
    if (dt == ATTN_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ATTN_F16 ? attn_f16_to_f32(h) : attn_bf16_to_f32(h);
}

/* The bits attn_tensor_convert must write for x into dt (one conversion;
 * into f32, a signaling NaN made quiet, as through double). */
static uint32_t bits_into(float x, attn_dtype dt) {
    if (dt == ATTN_F16) return attn_f32_to_f16(x);
    if (dt == ATTN_BF16) return attn_f32_to_bf16(x);
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? u | 0x400000u : u;
}

static uint32_t bits_at(const void *p, attn_dtype dt, int64_t i) {
    if (dt == ATTN_F32) return ((const uint32_t *)p)[i];
    return ((const uint16_t *)p)[i];
}

/* attn_tensor_convert between f32, f16 and bf16, rows of contiguous values
 * (converted a row at a time, in pieces of 1,024) and strided ones (a
 * value at a time): every element as the single-value conversions give
 * it, for values of every kind (random bit patterns: NaN payloads,
 * infinities, subnormals, ties), rows longer than a piece, a padded
 * leading stride, and in place. */
static void test_convert_rows(void) {
    enum { A = 3, B = 2, C = 1500, PAD = 1503 };
    static const attn_dtype DT[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    uint32_t *in = malloc(sizeof(uint32_t) * A * B * PAD), *out = malloc(sizeof(uint32_t) * A * B * PAD);
    uint32_t x = 2463534242u;
    for (int64_t i = 0; i < A * B * PAD; i++) x ^= x << 13, x ^= x >> 17, x ^= x << 5, in[i] = x;
    int bad = 0, cases = 0;
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++)
            for (int strided = 0; strided < 2; strided++) {
                /* (A, B, C) with rows PAD apart; strided: every other value of (A, B, C / 2) */
                int64_t c = strided ? C / 2 : C, shape[3] = {A, B, c};
                int64_t st[3] = {B * PAD, PAD, strided ? 2 : 1};
                attn_tensor s, d;
                attn_error err;
                memset(out, 0xa5, sizeof(uint32_t) * A * B * PAD);
                attn_tensor_init(&s, in, DT[si], 3, shape, st, NULL);
                attn_tensor_init(&d, out, DT[di], 3, shape, st, NULL);
                if (attn_tensor_convert(&d, &s, &err)) bad++;
                for (int64_t a = 0; a < A; a++)
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t k = 0; k < c; k++) {
                            int64_t off = a * st[0] + b * st[1] + k * st[2];
                            bad += bits_at(out, DT[di], off) != bits_into(value_of(in, DT[si], off), DT[di]);
                        }
                cases++;
            }
    check(!bad, "convert_rows_match_values", "%d of %d conversions wrote other bits", bad, cases);
    /* In place (dst is src, the very view): 16-bit NaNs quieted, the rest kept. */
    uint16_t h[C], want[C];
    for (int i = 0; i < C; i++) h[i] = (uint16_t)(in[i] >> 7), want[i] = attn_f32_to_f16(attn_f16_to_f32(h[i]));
    int64_t sh[1] = {C};
    attn_tensor t;
    attn_error err;
    attn_tensor_init(&t, h, ATTN_F16, 1, sh, NULL, NULL);
    check(attn_tensor_convert(&t, &t, &err) == ATTN_OK && memcmp(h, want, sizeof h) == 0, "convert_rows_in_place",
          "an f16 row converted in place is not what the values give");
    free(in), free(out);
}

static void test_half(void) {
    int f16_ok = 1, bf16_ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = attn_f16_to_f32((uint16_t)h), g = attn_bf16_to_f32((uint16_t)h);
        if (isnan(f) ? !isnan(attn_f16_to_f32(attn_f32_to_f16(f))) : attn_f32_to_f16(f) != h) f16_ok = 0;
        if (isnan(g) ? !isnan(attn_bf16_to_f32(attn_f32_to_bf16(g))) : attn_f32_to_bf16(g) != h) bf16_ok = 0;
    }
    check(f16_ok, "f16_round_trip_all_65536", "some f16 value does not survive f32 and back");
    check(bf16_ok, "bf16_round_trip_all_65536", "some bf16 value does not survive f32 and back");
    /* Rounding to nearest, ties to even, overflow and subnormals. */
    check(attn_f32_to_f16(65504.0f) == 0x7bff && attn_f32_to_f16(65520.0f) == 0x7c00 &&
              attn_f32_to_f16(-1e9f) == 0xfc00 && attn_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00 &&
              attn_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02 && attn_f32_to_f16(0x1p-24f) == 0x0001 &&
              attn_f32_to_f16(0x1p-25f) == 0x0000 && attn_f32_to_f16(1.5f * 0x1p-25f) == 0x0001 &&
              attn_f32_to_f16(0x1p-14f) == 0x0400 && attn_f16_to_f32(0x0001) == 0x1p-24f,
          "f16_rounding", "%04x %04x %04x", attn_f32_to_f16(65520.0f), attn_f32_to_f16(1.0f + 0x1p-11f),
          attn_f32_to_f16(1.5f * 0x1p-25f));
    check(attn_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 && attn_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82 &&
              attn_f32_to_bf16(3.0e38f) == 0x7f62 && attn_f32_to_bf16(INFINITY) == 0x7f80 &&
              isnan(attn_bf16_to_f32(attn_f32_to_bf16(NAN))),
          "bf16_rounding", "%04x %04x %04x", attn_f32_to_bf16(1.0f + 0x1p-8f),
          attn_f32_to_bf16(1.0f + 3 * 0x1p-8f), attn_f32_to_bf16(3.0e38f));
    float src[6] = {1, 2.5f, -3, 1e-8f, 70000, 0.1f};
    uint16_t half[6];
    int64_t shape[2] = {2, 3};
    attn_tensor ts, th, tb;
    attn_error err;
    attn_tensor_init(&ts, src, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&th, half, ATTN_F16, 2, shape, NULL, NULL);
    check_status(attn_tensor_convert(&th, &ts, &err), &err, ATTN_OK, "", "convert_f32_to_f16");
    check(half[0] == 0x3c00 && half[1] == 0x4100 && half[4] == 0x7c00 && half[5] == attn_f32_to_f16(0.1f),
          "convert_values", "%04x %04x %04x", half[0], half[1], half[4]);
    attn_tensor_init(&tb, half, ATTN_BOOL, 2, shape, NULL, NULL);
    check_status(attn_tensor_convert(&tb, &ts, &err), &err, ATTN_ERR_DTYPE, "float dtypes",
                 "convert_bool_rejected");
    int64_t other[2] = {3, 2};
    attn_tensor_init(&th, half, ATTN_F16, 2, other, NULL, NULL);
    check_status(attn_tensor_convert(&th, &ts, &err), &err, ATTN_ERR_SHAPE, "same shape", "convert_shape");
    check_status(attn_tensor_convert(NULL, &ts, &err), &err, ATTN_ERR_NULL, "NULL", "convert_null");
    /* A broadcast dst (row stride 0) would keep only the last row, and rows
     * one element apart would overwrite each other: both refused. */
    int64_t bcast[2] = {0, 1}, fold[2] = {1, 1};
    attn_tensor_init(&th, half, ATTN_F16, 2, shape, bcast, NULL);
    check_status(attn_tensor_convert(&th, &ts, &err), &err, ATTN_ERR_STRIDE, "dst has stride 0 in dimension 0",
                 "convert_broadcast_dst");
    attn_tensor_init(&th, half, ATTN_F16, 2, shape, fold, NULL);
    check_status(attn_tensor_convert(&th, &ts, &err), &err, ATTN_ERR_STRIDE,
                 "dst has strides (1, 1) that put two of its elements in one place", "convert_folded_dst");
    test_convert_rows();
    /* f64 into f16 and bf16 rounds once, to nearest even: rounding first to
     * f32 turned values just past a 16-bit tie into the tie (then to even),
     * and 65519.99 (below 65520, the midpoint past 65504) into inf. */
    double wide[7] = {1 + 0x1p-11 + 0x1p-40, -(1 + 0x1p-11 + 0x1p-40), 65519.99999999, 0x1p-25 + 0x1p-60,
                      1 + 0x1p-8 + 0x1p-30, 1e300, -0x1p-200};
    uint16_t h16[7], b16[7];
    int64_t sw[1] = {7};
    attn_tensor tw, t16, tb16;
    attn_tensor_init(&tw, wide, ATTN_F64, 1, sw, NULL, NULL);
    attn_tensor_init(&t16, h16, ATTN_F16, 1, sw, NULL, NULL);
    attn_tensor_init(&tb16, b16, ATTN_BF16, 1, sw, NULL, NULL);
    attn_tensor_convert(&t16, &tw, NULL), attn_tensor_convert(&tb16, &tw, NULL);
    check(h16[0] == 0x3c01 && h16[1] == 0xbc01 && h16[2] == 0x7bff && h16[3] == 0x0001 && h16[5] == 0x7c00 &&
              h16[6] == 0x8000 && b16[4] == 0x3f81 && b16[0] == 0x3f80 && b16[5] == 0x7f80 && b16[6] == 0x8000,
          "convert_f64_rounds_once", "f16 %04x %04x %04x %04x, bf16 %04x", h16[0], h16[1], h16[2], h16[3], b16[4]);

    /* f16/bf16 k and v go with f32 q only; q itself must be f32 or f64. */
    int64_t sq[2] = {2, 3}, so[2] = {2, 3};
    float q[6] = {0}, o[6];
    double q64[6] = {0}, o64[6];
    uint16_t k16[6] = {0}, v16[6] = {0};
    attn_tensor tq, tk, tv, to, tq64, to64, tq16;
    attn_tensor_init(&tq, q, ATTN_F32, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, k16, ATTN_BF16, 2, sq, NULL, NULL);
    attn_tensor_init(&tv, v16, ATTN_F16, 2, sq, NULL, NULL);
    attn_tensor_init(&to, o, ATTN_F32, 2, so, NULL, NULL);
    attn_tensor_init(&tq64, q64, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&to64, o64, ATTN_F64, 2, so, NULL, NULL);
    attn_tensor_init(&tq16, k16, ATTN_F16, 2, sq, NULL, NULL);
    check_status(attn_sdpa(&to, NULL, NULL, &tq, &tk, &tv, NULL, &err), &err, ATTN_OK, "", "sdpa_bf16_k_f16_v");
    check(o[0] == 0 && o[5] == 0, "sdpa_16bit_values", "%g", o[0]);
    check_status(attn_sdpa(&to64, NULL, NULL, &tq64, &tk, &tv, NULL, &err), &err, ATTN_ERR_DTYPE, "need f32 q",
                 "sdpa_bf16_k_with_f64_q");
    check_status(attn_sdpa(&to, NULL, NULL, &tq16, &tk, &tv, NULL, &err), &err, ATTN_ERR_DTYPE, "q is f16",
                 "sdpa_f16_q_rejected");
    /* f64 k or v beside a 16-bit q: the message names q's dtype, not that
     * of the f32 copy the call computes on ("q is f32" misled). */
    uint16_t qb[6] = {0}, ob[6], gb[6];
    attn_tensor tqb, tob, tdq, tk64, tv64;
    attn_tensor_init(&tqb, qb, ATTN_BF16, 2, sq, NULL, NULL);
    attn_tensor_init(&tob, ob, ATTN_BF16, 2, so, NULL, NULL);
    attn_tensor_init(&tdq, gb, ATTN_BF16, 2, sq, NULL, NULL);
    attn_tensor_init(&tk64, q64, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&tv64, o64, ATTN_F64, 2, sq, NULL, NULL);
    check_status(attn_sdpa(&tob, NULL, NULL, &tqb, &tk64, &tv, NULL, &err), &err, ATTN_ERR_DTYPE,
                 "k is f64 but q is bf16", "sdpa_bf16_q_f64_k_named");
    check_status(attn_sdpa(&tob, NULL, NULL, &tqb, &tk, &tv64, NULL, &err), &err, ATTN_ERR_DTYPE,
                 "v is f64 but q is bf16", "sdpa_bf16_q_f64_v_named");
    size_t bytes = 0;
    check_status(attn_sdpa_workspace_size(&bytes, &tob, NULL, NULL, &tqb, &tk64, &tv, NULL, &err), &err, ATTN_ERR_DTYPE,
                 "k is f64 but q is bf16", "sdpa_workspace_bf16_q_f64_k_named");
    float lse[2] = {0};
    int64_t sl[1] = {2};
    attn_tensor tl;
    attn_tensor_init(&tl, lse, ATTN_F32, 1, sl, NULL, NULL);
    check_status(attn_sdpa_backward(&tdq, NULL, NULL, NULL, &tob, &tqb, &tk64, &tv, &tob, &tl, NULL, &err), &err,
                 ATTN_ERR_DTYPE, "k is f64 but q is bf16", "sdpa_backward_bf16_q_f64_k_named");
}

/* ---- merging partial results ------------------------------------------- */

/* Parts with no row, as attn_sdpa gives them over no queries or a batch of
 * 0 (split over the keys, as ring attention splits them): merged to
 * nothing, ATTN_OK, also with NULL data where there is no element; they
 * were refused ("each must be at least 1") while attn_sdpa over all the
 * keys gave its empty outputs. Ev of 0 and a negative dimension stay
 * refused, and NULL data where there are elements. */
static void test_merge_empty(void) {
    enum { E = 8, Ev = 4, S1 = 5, S2 = 7 };
    for (int batch0 = 0; batch0 < 2; batch0++) {
        int64_t B = batch0 ? 0 : 2, L = batch0 ? 3 : 0;
        int64_t sq[4] = {B, 2, L, E}, sk1[4] = {B, 2, S1, E}, sv1[4] = {B, 2, S1, Ev}, sk2[4] = {B, 2, S2, E},
                sv2[4] = {B, 2, S2, Ev}, so[4] = {B, 2, L, Ev};
        attn_tensor q = make(ATTN_F64, 4, sq), k1 = make(ATTN_F64, 4, sk1), v1 = make(ATTN_F64, 4, sv1),
                    k2 = make(ATTN_F64, 4, sk2), v2 = make(ATTN_F64, 4, sv2);
        attn_tensor po[2] = {make(ATTN_F64, 4, so), make(ATTN_F64, 4, so)}, pl[2] = {make(ATTN_F64, 3, so),
                                                                                   make(ATTN_F64, 3, so)};
        attn_tensor mo = make(ATTN_F64, 4, so), ml = make(ATTN_F64, 3, so);
        attn_error err;
        attn_status st = attn_sdpa(&po[0], &pl[0], NULL, &q, &k1, &v1, NULL, &err);
        if (!st) st = attn_sdpa(&po[1], &pl[1], NULL, &q, &k2, &v2, NULL, &err);
        const attn_tensor *outs[2] = {&po[0], &po[1]}, *lses[2] = {&pl[0], &pl[1]};
        if (!st) st = attn_sdpa_merge(&mo, &ml, outs, lses, 2, &err);
        check(st == ATTN_OK, batch0 ? "merge_empty_batch_of_0" : "merge_empty_no_queries", "status %d: %s", (int)st,
              st ? err.message : "");
        attn_tensor none[2] = {po[0], pl[0]}; /* the same views, without data */
        none[0].data = NULL, none[1].data = NULL;
        const attn_tensor *nouts[2] = {&none[0], &po[1]}, *nlses[2] = {&none[1], &pl[1]};
        st = attn_sdpa_merge(&mo, &ml, nouts, nlses, 2, &err);
        check(st == ATTN_OK, batch0 ? "merge_empty_batch_of_0_null_data" : "merge_empty_no_queries_null_data",
              "status %d: %s", (int)st, st ? err.message : "");
        free(q.data), free(k1.data), free(v1.data), free(k2.data), free(v2.data);
        free(po[0].data), free(po[1].data), free(pl[0].data), free(pl[1].data), free(mo.data), free(ml.data);
    }
    /* Still refused: Ev of 0, a negative dimension, NULL data with elements. */
    int64_t so[2] = {3, 0}, sl[1] = {3}, sneg[2] = {1, 4}, sok[2] = {3, 4};
    double buf[16] = {0};
    attn_tensor o0, l0, on, ln, ok, lok;
    attn_tensor_init(&o0, buf, ATTN_F64, 2, so, NULL, NULL);
    attn_tensor_init(&l0, buf + 8, ATTN_F64, 1, sl, NULL, NULL);
    attn_tensor_init(&on, buf, ATTN_F64, 2, sneg, NULL, NULL);
    attn_tensor_init(&ln, buf + 12, ATTN_F64, 1, sneg, NULL, NULL);
    attn_tensor_init(&ok, NULL, ATTN_F64, 2, sok, NULL, NULL);
    attn_tensor_init(&lok, buf + 12, ATTN_F64, 1, sl, NULL, NULL);
    on.shape[0] = ln.shape[0] = -1; /* attn_tensor_init refuses it: a struct filled by hand */
    const attn_tensor *o0s[1] = {&o0}, *l0s[1] = {&l0}, *ons[1] = {&on}, *lns[1] = {&ln}, *oks[1] = {&ok},
                      *loks[1] = {&lok};
    attn_error err;
    check_status(attn_sdpa_merge(&o0, &l0, o0s, l0s, 1, &err), &err, ATTN_ERR_SHAPE, "out has Ev = 0",
                 "merge_err_ev_0");
    check_status(attn_sdpa_merge(&on, &ln, ons, lns, 1, &err), &err, ATTN_ERR_SHAPE, "out has a dimension of -1",
                 "merge_err_negative_dimension");
    check_status(attn_sdpa_merge(&ok, &lok, oks, loks, 1, &err), &err, ATTN_ERR_NULL, "out is NULL",
                 "merge_err_null_data_with_elements");
}

/* Attention over two disjoint sets of keys, merged by their log-sum-exp,
 * equals attention over all the keys (f64 to 1e-12, f32 within its bound),
 * through the public API alone; rows that see no key of one part (lse -inf
 * there) take everything from the other. Then every error of the merge. */
static void test_merge(void) {
    enum { H = 3, L = 37, S = 300, S1 = 113, E = 16, Ev = 100 }; /* Ev spans two 64-element chunks */
    for (int f = 0; f < 2; f++) {
        attn_dtype dt = f ? ATTN_F32 : ATTN_F64;
        size_t sz = attn_dtype_size(dt);
        int64_t sq[3] = {H, L, E}, sk[3] = {H, S, E}, sv[3] = {H, S, Ev}, so[3] = {H, L, Ev}, sl[2] = {H, L},
                sm[2] = {L, S};
        attn_tensor q = make(dt, 3, sq), k = make(dt, 3, sk), v = make(dt, 3, sv), m = make(ATTN_BOOL, 2, sm);
        for (int i = 0; i < 5; i++) /* rows 0..4 see no key of the first part */
            memset((unsigned char *)m.data + i * S, 0, S1);
        attn_tensor out = make(dt, 3, so), lse = make(dt, 2, sl);
        attn_tensor po[2] = {make(dt, 3, so), make(dt, 3, so)}, pl[2] = {make(dt, 2, sl), make(dt, 2, sl)};
        attn_tensor mo = make(dt, 3, so), ml = make(dt, 2, sl);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.mask = &m;
        attn_status st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, &o, NULL);
        /* The two parts: views of keys 0..S1-1 and S1..S-1, and of the
         * mask's matching columns. */
        for (int part = 0; part < 2; part++) {
            int64_t j0 = part ? S1 : 0, n = part ? S - S1 : S1;
            int64_t skp[3] = {H, n, E}, svp[3] = {H, n, Ev}, smp[2] = {L, n};
            int64_t kst[3] = {S * E, E, 1}, vst[3] = {S * Ev, Ev, 1}, mst[2] = {S, 1};
            attn_tensor kp, vp, mp;
            attn_tensor_init(&kp, (char *)k.data + j0 * E * sz, dt, 3, skp, kst, NULL);
            attn_tensor_init(&vp, (char *)v.data + j0 * Ev * sz, dt, 3, svp, vst, NULL);
            attn_tensor_init(&mp, (unsigned char *)m.data + j0, ATTN_BOOL, 2, smp, mst, NULL);
            o.mask = &mp;
            if (!st) st = attn_sdpa(&po[part], &pl[part], NULL, &q, &kp, &vp, &o, NULL);
        }
        const attn_tensor *outs[2] = {&po[0], &po[1]}, *lses[2] = {&pl[0], &pl[1]};
        attn_error err;
        if (!st) st = attn_sdpa_merge(&mo, &ml, outs, lses, 2, &err);
        double tol = f ? 2e-5 : 1e-12;
        int dead = isinf(get(&pl[0], 0)) && get(&pl[0], 0) < 0;
        check(st == ATTN_OK && dead && max_diff(&mo, &out) <= tol && max_diff(&ml, &lse) <= tol * 10,
              f ? "merge_two_halves_equals_whole_f32" : "merge_two_halves_equals_whole_f64",
              "status %d, part lse[0] %g, out diff %.3g, lse diff %.3g", (int)st, get(&pl[0], 0),
              max_diff(&mo, &out), max_diff(&ml, &lse));
        /* In place: out and lse may be the first part's. */
        st = attn_sdpa_merge(&po[0], &pl[0], outs, lses, 2, &err);
        check(st == ATTN_OK && max_diff(&po[0], &mo) == 0 && max_diff(&pl[0], &ml) == 0,
              f ? "merge_in_place_f32" : "merge_in_place_f64", "status %d", (int)st);
        /* A part whose lse is NaN (a NaN query or key in it) makes the row
         * NaN, out and lse, as attn_sdpa over all the keys gives it: row 7
         * NaN in both parts (what every rank of a ring sees for a NaN
         * query), row 9 in the second only; the other rows finite. (The
         * first part now holds the merge above: any finite parts do.) */
        for (int p = 0; p < 2; p++) {
            int64_t r = p ? 9 : 7;
            for (int part = r == 7 ? 0 : 1; part < 2; part++)
                if (f) ((float *)pl[part].data)[r] = NAN;
                else ((double *)pl[part].data)[r] = NAN;
        }
        st = attn_sdpa_merge(&mo, &ml, outs, lses, 2, &err);
        int nan_rows = 1, others = 1;
        for (int64_t r = 0; r < H * L; r++) {
            int want_nan = r == 7 || r == 9;
            double l = get(&ml, r);
            for (int64_t e = 0; e < Ev; e++) {
                double x = get(&mo, r * Ev + e);
                if (want_nan) nan_rows &= isnan(x) && isnan(l);
                else others &= !isnan(x) && !isnan(l);
            }
        }
        check(st == ATTN_OK && nan_rows && others, f ? "merge_nan_lse_row_is_nan_f32" : "merge_nan_lse_row_is_nan_f64",
              "status %d, NaN rows %d, others finite %d", (int)st, nan_rows, others);
        if (f) {
            /* Errors, each named. */
            attn_tensor wrong = make(dt, 3, sv), other = make(ATTN_F64, 3, so), flat = make(dt, 3, so);
            const attn_tensor *bad_outs[2] = {&po[0], &wrong}, *mixed[2] = {&po[0], &other};
            check_status(attn_sdpa_merge(&mo, &ml, outs, lses, 0, &err), &err, ATTN_ERR_ARGUMENT,
                         "at least one part", "merge_err_no_parts");
            check_status(attn_sdpa_merge(&mo, NULL, outs, lses, 2, &err), &err, ATTN_ERR_NULL, "lse is NULL",
                         "merge_err_null");
            check_status(attn_sdpa_merge(&mo, &ml, bad_outs, lses, 2, &err), &err, ATTN_ERR_SHAPE,
                         "outs[1] has shape (3, 300, 100)", "merge_err_shape");
            check_status(attn_sdpa_merge(&mo, &ml, mixed, lses, 2, &err), &err, ATTN_ERR_DTYPE,
                         "outs[1] is f64", "merge_err_dtype");
            check_status(attn_sdpa_merge(&mo, &mo, outs, lses, 2, &err), &err, ATTN_ERR_RANK,
                         "lse has rank 3", "merge_err_rank");
            flat.strides[1] = 0;
            check_status(attn_sdpa_merge(&flat, &ml, outs, lses, 2, &err), &err, ATTN_ERR_STRIDE,
                         "out has stride 0", "merge_err_stride");
            free(wrong.data), free(other.data), free(flat.data);
        }
        free(q.data), free(k.data), free(v.data), free(m.data), free(out.data), free(lse.data);
        free(po[0].data), free(po[1].data), free(pl[0].data), free(pl[1].data), free(mo.data), free(ml.data);
    }
    test_merge_empty();
}

/* Attention of one query over keys with the given scores (q = [1], k =
 * the scores, scale 1) and values, one column: out and lse in f64, the
 * call in dtype dt (f32 inputs holding inf or NaN go to the exact kernel)
 * over keys j0 .. j0 + n - 1, or through attn_sdpa_reference. */
static attn_status score_row(double *out, double *lse, attn_dtype dt, const double *scores, const double *vals,
                             int j0, int n, int reference) {
    float qf = 1, kf[8], vf[8], of, lf;
    double qd = 1, kd[8], vd[8], od, ld;
    for (int j = 0; j < n; j++) kf[j] = (float)scores[j0 + j], vf[j] = (float)vals[j0 + j];
    for (int j = 0; j < n; j++) kd[j] = scores[j0 + j], vd[j] = vals[j0 + j];
    int f = dt == ATTN_F32;
    int64_t sq[2] = {1, 1}, sk[2] = {n, 1}, sl[1] = {1};
    attn_tensor tq, tk, tv, to, tl;
    attn_tensor_init(&tq, f ? (void *)&qf : (void *)&qd, dt, 2, sq, NULL, NULL);
    attn_tensor_init(&tk, f ? (void *)kf : (void *)kd, dt, 2, sk, NULL, NULL);
    attn_tensor_init(&tv, f ? (void *)vf : (void *)vd, dt, 2, sk, NULL, NULL);
    attn_tensor_init(&to, f ? (void *)&of : (void *)&od, dt, 2, sq, NULL, NULL);
    attn_tensor_init(&tl, f ? (void *)&lf : (void *)&ld, dt, 1, sl, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.has_scale = 1, o.scale = 1.0;
    attn_status st = reference ? attn_sdpa_reference(&to, &tl, NULL, &tq, &tk, &tv, &o, NULL)
                               : attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, &o, NULL);
    *out = f ? of : od, *lse = f ? lf : ld;
    return st;
}

/* Whether x is y, NaN counting as equal to NaN. */
static int same_value(double x, double y) { return (isnan(x) && isnan(y)) || x == y; }

/* Rows with +inf and NaN scores, as PyTorch float64 gives them (softmax,
 * torch.logsumexp): a +inf score makes out NaN and lse +inf; a NaN score
 * makes both NaN, beside a +inf score too (lse was +inf there). And
 * attn_sdpa_merge of the row's parts gives the whole row's result, for
 * parts from attn_sdpa and for a part whose lse alone is +inf. */
static void test_nonfinite_scores(void) {
    static const struct {
        const char *name;
        double scores[4], want_lse; /* out is NaN in each */
    } ROWS[] = {
        {"plus_inf", {INFINITY, 1, 2, 3}, INFINITY},
        {"nan", {0.5, 1, NAN, 3}, NAN},
        {"plus_inf_and_nan", {INFINITY, 1, NAN, 3}, NAN},
        {"nan_and_plus_inf", {NAN, 1, INFINITY, 3}, NAN},
    };
    const double vals[4] = {1, 2, 3, 4};
    char name[128];
    for (int f = 0; f < 2; f++) {
        attn_dtype dt = f ? ATTN_F32 : ATTN_F64;
        for (size_t c = 0; c < sizeof ROWS / sizeof *ROWS; c++) {
            double out[2], lse[2];
            attn_status st = score_row(&out[0], &lse[0], dt, ROWS[c].scores, vals, 0, 4, 0);
            attn_status sr = score_row(&out[1], &lse[1], dt, ROWS[c].scores, vals, 0, 4, 1);
            snprintf(name, sizeof name, "%s_score_row_out_nan_lse_as_pytorch_%s", ROWS[c].name, attn_dtype_name(dt));
            check(!st && !sr && isnan(out[0]) && isnan(out[1]) && same_value(lse[0], ROWS[c].want_lse) &&
                      same_value(lse[1], ROWS[c].want_lse),
                  name, "status %d %d, out %g (reference %g), lse %g (reference %g), want lse %g", (int)st, (int)sr,
                  out[0], out[1], lse[0], lse[1], ROWS[c].want_lse);
            /* the halves 0..1 and 2..3 merged: the whole row's out and lse */
            double po[2], pl[2], mo = 0, ml = 0;
            st = score_row(&po[0], &pl[0], dt, ROWS[c].scores, vals, 0, 2, 0);
            if (!st) st = score_row(&po[1], &pl[1], dt, ROWS[c].scores, vals, 2, 2, 0);
            float pof[2] = {(float)po[0], (float)po[1]}, plf[2] = {(float)pl[0], (float)pl[1]}, mof, mlf;
            int64_t so[2] = {1, 1}, sl[1] = {1};
            attn_tensor to[2], tl[2], tmo, tml;
            for (int i = 0; i < 2; i++) {
                attn_tensor_init(&to[i], f ? (void *)&pof[i] : (void *)&po[i], dt, 2, so, NULL, NULL);
                attn_tensor_init(&tl[i], f ? (void *)&plf[i] : (void *)&pl[i], dt, 1, sl, NULL, NULL);
            }
            attn_tensor_init(&tmo, f ? (void *)&mof : (void *)&mo, dt, 2, so, NULL, NULL);
            attn_tensor_init(&tml, f ? (void *)&mlf : (void *)&ml, dt, 1, sl, NULL, NULL);
            const attn_tensor *outs[2] = {&to[0], &to[1]}, *lses[2] = {&tl[0], &tl[1]};
            if (!st) st = attn_sdpa_merge(&tmo, &tml, outs, lses, 2, NULL);
            if (f) mo = mof, ml = mlf;
            snprintf(name, sizeof name, "%s_score_merge_of_halves_is_the_whole_row_%s", ROWS[c].name,
                     attn_dtype_name(dt));
            check(!st && isnan(mo) && same_value(ml, lse[0]), name, "status %d, out %g lse %g, whole lse %g", (int)st,
                  mo, ml, lse[0]);
        }
        /* Parts not from attn_sdpa: an lse of +inf with a finite out (one
         * part, and two such parts) is e^(inf - inf) all the same: out NaN,
         * lse +inf (out was that part's, or the mean of the two); a part of
         * lse -inf is not read (out 0 and lse -inf when every part is). */
        double o64[3] = {5, 7, 9}, l64[3] = {INFINITY, INFINITY, 0.25}, d64[2];
        float o32[3] = {5, 7, 9}, l32[3] = {INFINITY, INFINITY, 0.25}, d32[2];
        int64_t so[2] = {1, 1}, sl[1] = {1};
        attn_tensor to[3], tl[3], tmo, tml;
        for (int i = 0; i < 3; i++) {
            attn_tensor_init(&to[i], f ? (void *)&o32[i] : (void *)&o64[i], dt, 2, so, NULL, NULL);
            attn_tensor_init(&tl[i], f ? (void *)&l32[i] : (void *)&l64[i], dt, 1, sl, NULL, NULL);
        }
        attn_tensor_init(&tmo, f ? (void *)&d32[0] : (void *)&d64[0], dt, 2, so, NULL, NULL);
        attn_tensor_init(&tml, f ? (void *)&d32[1] : (void *)&d64[1], dt, 1, sl, NULL, NULL);
        static const int PICK[3][2] = {{0, 2}, {0, 1}, {2, 0}}; /* +inf with finite; two +inf; finite then +inf */
        int ok = 1;
        for (int t = 0; t < 3; t++) {
            const attn_tensor *outs[2] = {&to[PICK[t][0]], &to[PICK[t][1]]}, *lses[2] = {&tl[PICK[t][0]], &tl[PICK[t][1]]};
            attn_status st = attn_sdpa_merge(&tmo, &tml, outs, lses, 2, NULL);
            double x = f ? d32[0] : d64[0], l = f ? d32[1] : d64[1];
            ok &= !st && isnan(x) && l == INFINITY;
            st = attn_sdpa_merge(&tmo, &tml, outs, lses, 1, NULL); /* the one part alone */
            x = f ? d32[0] : d64[0], l = f ? d32[1] : d64[1];
            ok &= !st && (PICK[t][0] == 2 ? x == 9 && l == (f ? 0.25f : 0.25) : isnan(x) && l == INFINITY);
        }
        snprintf(name, sizeof name, "merge_plus_inf_lse_part_out_nan_lse_plus_inf_%s", attn_dtype_name(dt));
        check(ok, name, "a merge gave another out or lse");
        for (int i = 0; i < 3; i++) {
            if (f) l32[i] = -INFINITY, o32[i] = NAN;
            else l64[i] = -INFINITY, o64[i] = NAN;
        }
        const attn_tensor *outs[3] = {&to[0], &to[1], &to[2]}, *lses[3] = {&tl[0], &tl[1], &tl[2]};
        attn_status st = attn_sdpa_merge(&tmo, &tml, outs, lses, 3, NULL);
        double x = f ? d32[0] : d64[0], l = f ? d32[1] : d64[1];
        snprintf(name, sizeof name, "merge_every_part_minus_inf_lse_out_0_%s", attn_dtype_name(dt));
        check(!st && x == 0 && l == -INFINITY, name, "status %d, out %g lse %g", (int)st, x, l);
    }
    /* f64 counts a weight below e^-400 of the row's largest as 0 (attn.h,
     * Numerics; PyTorch keeps it): a value under a score 500 below the
     * maximum adds nothing, and an infinite one gives 0 · inf, NaN. */
    double far[2] = {0, -500}, big[2] = {1, 1e300}, inf_v[2] = {1, INFINITY}, out, lse;
    attn_status st = score_row(&out, &lse, ATTN_F64, far, big, 0, 2, 0);
    check(!st && out == 1 && lse == 0, "f64_weight_below_e_minus_400_counts_as_0", "status %d, out %g (PyTorch %g), lse %g",
          (int)st, out, (1 + exp(-500) * 1e300) / (1 + exp(-500)), lse);
    st = score_row(&out, &lse, ATTN_F64, far, inf_v, 0, 2, 0);
    check(!st && isnan(out), "f64_infinite_value_under_a_flushed_weight_nan", "status %d, out %g", (int)st, out);
}

/* ---- options struct versioning -------------------------------------------- */

/* The caller's workspace: sized by attn_sdpa_workspace_size, at any
 * alignment; the results are bitwise those of a call that allocates; too
 * small fails before writing; a context from before the workspace existed
 * (struct_size up to num_threads) still works. */
static void test_workspace(attn_tensor *q, attn_tensor *out, attn_tensor *ref) {
    attn_error err;
    attn_context ctx = attn_context_default();
    attn_sdpa_options o = attn_sdpa_options_default();
    o.context = &ctx;
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    size_t need = 0;
    attn_status st = attn_sdpa_workspace_size(&need, out, NULL, NULL, q, q, q, &o, &err);
    check(st == ATTN_OK && need > 0, "workspace_size_of_flash_call", "status %d, %zu bytes", (int)st, need);
    check_status(attn_sdpa_workspace_size(NULL, out, NULL, NULL, q, q, q, &o, &err), &err, ATTN_ERR_NULL,
                 "bytes is NULL", "workspace_size_null_rejected");
    attn_sdpa(ref, NULL, NULL, q, q, q, &o, NULL); /* allocates */
    char *mem = malloc(need + 1);
    ctx.workspace = mem + 1, ctx.workspace_size = need; /* misaligned on purpose */
    memset(out->data, 0, (size_t)attn_tensor_numel(out) * 4);
    st = attn_sdpa(out, NULL, NULL, q, q, q, &o, &err);
    check(st == ATTN_OK && max_diff(out, ref) == 0, "workspace_call_bitwise_equals_allocating_call",
          "status %d (%s)", (int)st, st ? err.message : "");
    ctx.workspace_size = need - 1;
    memset(out->data, 0x7f, (size_t)attn_tensor_numel(out) * 4);
    check_status(attn_sdpa(out, NULL, NULL, q, q, q, &o, &err), &err, ATTN_ERR_WORKSPACE, "needs",
                 "workspace_too_small_rejected");
    check(((unsigned char *)out->data)[0] == 0x7f, "workspace_too_small_writes_nothing", "out was written");
    ctx.workspace = NULL, ctx.workspace_size = 16;
    check_status(attn_sdpa(out, NULL, NULL, q, q, q, &o, &err), &err, ATTN_ERR_OPTION,
                 "workspace is NULL", "workspace_null_with_size_rejected");
    /* A program built before the workspace fields: they are never read. */
    ctx.workspace = (void *)1, ctx.workspace_size = 1;
    ctx.struct_size = offsetof(attn_context, workspace);
    st = attn_sdpa(out, NULL, NULL, q, q, q, &o, &err);
    check(st == ATTN_OK && max_diff(out, ref) == 0, "context_older_struct_reads_its_prefix", "status %d (%s)",
          (int)st, st ? err.message : "");
    free(mem);
}

/* Every X_init (attn.h: "Versioned structs"): it returns the library's
 * sizeof X, which must be this header's; it fills only the struct_size
 * bytes it is given, with X_default()'s values; past the library's own
 * struct it writes zeros; NULL writes nothing. */
#define CHECK_INIT(type)                                                                                   \
    do {                                                                                                   \
        union {                                                                                            \
            type x;                                                                                        \
            unsigned char b[sizeof(type) + 16];                                                            \
        } u, d;                                                                                            \
        memset(&u, 0xa5, sizeof u), memset(&d, 0, sizeof d);                                               \
        d.x = type##_default();                                                                            \
        size_t n = type##_init(&u.x, 16), got = 0;                                                         \
        memcpy(&got, u.b, sizeof got);                                                                     \
        int tail = 0;                                                                                      \
        for (size_t i = 16; i < sizeof u; i++) tail += u.b[i] != 0xa5;                                     \
        check(n == sizeof(type) && d.x.struct_size == sizeof(type) && got == 16 &&                        \
                  memcmp(u.b + 8, d.b + 8, 8) == 0 && tail == 0,                                           \
              #type "_init_fills_only_its_size", "returned %zu (sizeof %zu), struct_size %zu, %d bytes past written", \
              n, sizeof(type), got, tail);                                                                 \
        memset(&u, 0xa5, sizeof u);                                                                        \
        n = type##_init(&u.x, sizeof u);                                                                   \
        tail = 0;                                                                                          \
        for (size_t i = sizeof(type); i < sizeof u; i++) tail += u.b[i] != 0;                              \
        check(n == sizeof(type) && u.x.struct_size == sizeof u && memcmp(u.b + 8, d.b + 8, sizeof(type) - 8) == 0 && \
                  tail == 0,                                                                               \
              #type "_init_newer_header_zeroed", "struct_size %zu, %d bytes past the library's not zero",  \
              u.x.struct_size, tail);                                                                      \
        check(type##_init(NULL, sizeof(type)) == sizeof(type), #type "_init_null_gives_size", "a different size");  \
    } while (0)

static void test_versioned_init(void) {
    CHECK_INIT(attn_context);
    CHECK_INIT(attn_sdpa_options);
    CHECK_INIT(attn_rope_options);
    CHECK_INIT(attn_mha_params);
    CHECK_INIT(attn_mha_options);
    CHECK_INIT(attn_kv_cache_desc);
    CHECK_INIT(attn_kv_pages_desc);
    CHECK_INIT(attn_kv_paged_view);
    CHECK_INIT(attn_toy_explain_options);
    CHECK_INIT(attn_train_options);
    CHECK_INIT(attn_kernel_walk_options);
    /* A struct filled for a newer header is refused by the calls, not read
     * past the library's own fields. */
    union {
        attn_sdpa_options o;
        unsigned char b[sizeof(attn_sdpa_options) + 8];
    } big;
    attn_sdpa_options_init(&big.o, sizeof big);
    int64_t s[2] = {3, 4};
    attn_tensor q = make(ATTN_F64, 2, s), out = make(ATTN_F64, 2, s);
    attn_error err;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &big.o, &err), &err, ATTN_ERR_OPTION, "newer attn.h",
                 "options_init_for_newer_header_refused");
    free(q.data), free(out.data);
}

/* The two public helpers behind every X_init and every call, as a library
 * built on this one (libattn-mpi) calls them: a struct of a library's own
 * (struct_size, a, b) read from a caller's older, smaller one. */
typedef struct versioned_demo {
    size_t struct_size;
    int64_t a, b;
} versioned_demo;

static void test_versioned_helpers(void) {
    attn_error err;
    const versioned_demo defaults = {sizeof defaults, 1, 2};
    versioned_demo ours = defaults, theirs;
    memset(&theirs, 0x5a, sizeof theirs); /* b, past the older struct, is garbage never read */
    theirs.struct_size = offsetof(versioned_demo, b), theirs.a = 7;
    check_status(attn_versioned_read(&ours, sizeof ours, &theirs, "demo", "start from demo_default()", &err), &err,
                 ATTN_OK, "", "versioned_read_older_struct");
    check(ours.a == 7 && ours.b == 2 && ours.struct_size == sizeof ours, "versioned_read_keeps_defaults_past_it",
          "a %lld, b %lld, struct_size %zu", (long long)ours.a, (long long)ours.b, ours.struct_size);
    /* A size no compiler gives a struct that begins with a size_t (it is a
     * multiple of that alignment): it would end inside b, and b would be
     * read half the caller's and half the default. */
    theirs.struct_size = offsetof(versioned_demo, b) + 4;
    check_status(attn_versioned_read(&ours, sizeof ours, &theirs, "demo", "start from demo_default()", &err), &err,
                 ATTN_ERR_OPTION, "demo->struct_size is 20, not a multiple of 8, so no struct's sizeof: start from",
                 "versioned_read_size_inside_a_field");
    check_status(attn_versioned_read(&ours, sizeof ours, NULL, "demo", "", &err), &err, ATTN_OK, "",
                 "versioned_read_null_theirs_reads_nothing");
    theirs.struct_size = 3;
    check_status(attn_versioned_read(&ours, sizeof ours, &theirs, "demo", "start from demo_default()", &err), &err,
                 ATTN_ERR_OPTION, "demo->struct_size is 3: start from demo_default()", "versioned_read_too_small");
    theirs.struct_size = sizeof theirs + 8;
    check_status(attn_versioned_read(&ours, sizeof ours, &theirs, "demo", "", &err), &err, ATTN_ERR_OPTION,
                 "larger than this library's", "versioned_read_newer_header");
    /* NULL where the library's own struct belongs; NULL name and hint print no "(null)" */
    theirs.struct_size = sizeof theirs;
    check_status(attn_versioned_read(NULL, sizeof ours, &theirs, "demo", "", &err), &err, ATTN_ERR_NULL,
                 "the struct to read demo into is NULL", "versioned_read_null_ours");
    theirs.struct_size = 0;
    attn_status st = attn_versioned_read(&ours, sizeof ours, &theirs, NULL, NULL, &err);
    check(st == ATTN_ERR_OPTION && !strcmp(err.message, "struct->struct_size is 0"), "versioned_read_null_name_and_hint",
          "status %d, \"%s\"", (int)st, err.message);
    st = attn_versioned_read(&ours, sizeof ours, &theirs, "demo", "", &err);
    check(st == ATTN_ERR_OPTION && !strcmp(err.message, "demo->struct_size is 0"), "versioned_read_empty_hint",
          "status %d, \"%s\"", (int)st, err.message);
    /* init: the caller's bytes from the defaults, zeros past ours, its own size kept */
    unsigned char big[sizeof(versioned_demo) + 8];
    memset(big, 0x77, sizeof big);
    size_t got = attn_versioned_init(big, sizeof big, &defaults, sizeof defaults), given;
    memcpy(&given, big, sizeof given);
    int zeros = 1;
    for (size_t i = sizeof defaults; i < sizeof big; i++) zeros &= big[i] == 0;
    check(got == sizeof defaults && given == sizeof big && zeros &&
              !memcmp(big + sizeof(size_t), (const char *)&defaults + sizeof(size_t), sizeof defaults - sizeof(size_t)),
          "versioned_init_newer_struct", "returned %zu, struct_size %zu", got, given);
    memset(big, 0x77, sizeof big);
    got = attn_versioned_init(big, sizeof big, NULL, sizeof defaults);
    check(got == sizeof defaults && big[0] == 0x77 && big[sizeof big - 1] == 0x77, "versioned_init_null_defaults_writes_nothing",
          "returned %zu", got);
    check(attn_versioned_init(NULL, sizeof big, &defaults, sizeof defaults) == sizeof defaults,
          "versioned_init_null_answers_the_size", "not the size");
}

static void test_options_version(void) {
    int64_t s[2] = {3, 4};
    attn_tensor q = make(ATTN_F64, 2, s), out = make(ATTN_F64, 2, s), ref = make(ATTN_F64, 2, s);
    attn_error err;
    attn_sdpa_options o = attn_sdpa_options_default();
    check(o.struct_size == sizeof o, "options_default_sets_struct_size", "%zu", o.struct_size);
    attn_sdpa_options zero;
    memset(&zero, 0, sizeof zero);
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &zero, &err), &err, ATTN_ERR_OPTION,
                 "struct_size is 0", "options_zeroed_by_hand_rejected");
    o.struct_size = sizeof o + 8;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_OPTION,
                 "newer attn.h", "options_from_newer_header_rejected");
    /* An older, smaller struct: the fields it lacks keep their defaults. */
    o = attn_sdpa_options_default();
    o.has_scale = 1, o.scale = 0.25, o.causal = ATTN_CAUSAL_TOP_LEFT;
    o.compute = (attn_compute)77; /* past the older struct's end: never read */
    o.struct_size = offsetof(attn_sdpa_options, compute);
    attn_status st = attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err);
    o.compute = ATTN_COMPUTE_F32;
    o.struct_size = sizeof o;
    attn_sdpa(&ref, NULL, NULL, &q, &q, &q, &o, NULL);
    check(st == ATTN_OK && max_diff(&out, &ref) == 0, "options_older_struct_reads_its_prefix",
          "status %d (%s)", (int)st, st ? err.message : "");
    /* The per-call context: threads for one call, checked like options. */
    int64_t sb[3] = {2, 2000, 16}; /* 6 work items: room for 3 threads */
    attn_tensor qb = make(ATTN_F32, 3, sb), o1 = make(ATTN_F32, 3, sb), o3 = make(ATTN_F32, 3, sb);
    attn_context ctx = attn_context_default();
    o = attn_sdpa_options_default();
    o.context = &ctx;
    char kernel[32];
    ctx.num_threads = 1;
    attn_status s1 = attn_sdpa(&o1, NULL, NULL, &qb, &qb, &qb, &o, &err);
    ctx.num_threads = 3;
    verbose_begin();
    attn_status s3 = attn_sdpa(&o3, NULL, NULL, &qb, &qb, &qb, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    /* Bitwise the same, and the verbose line says the call was given the
     * context's 3 threads (threads=R/3, R of them ran items). */
    check(s1 == ATTN_OK && s3 == ATTN_OK && max_diff(&o1, &o3) == 0 && strcmp(kernel, "flash") == 0 &&
              (strstr(verbose_last_line, " threads=1/3 ") || strstr(verbose_last_line, " threads=2/3 ") ||
               strstr(verbose_last_line, " threads=3/3 ")),
          "context_threads_1_and_3_bitwise_identical", "status %d/%d, kernel %s, line %s", (int)s1, (int)s3,
          kernel, verbose_last_line);
    ctx.num_threads = 257;
    check_status(attn_sdpa(&o1, NULL, NULL, &qb, &qb, &qb, &o, &err), &err, ATTN_ERR_OPTION,
                 "num_threads is 257", "context_bad_threads_rejected");
    attn_context zc;
    memset(&zc, 0, sizeof zc);
    o.context = &zc;
    check_status(attn_sdpa(&o1, NULL, NULL, &qb, &qb, &qb, &o, &err), &err, ATTN_ERR_OPTION,
                 "context->struct_size is 0", "context_zeroed_by_hand_rejected");
    test_workspace(&qb, &o1, &o3);
    free(qb.data), free(o1.data), free(o3.data);
    free(q.data), free(out.data), free(ref.data);
}


/* ---- mask dtypes ------------------------------------------------------------ */

/* A mask is bool or the queries' float dtype, nothing else, in every call
 * that takes one: a binding that passed an integer array's bytes (int8 0/1,
 * say) under any other dtype code must get ATTN_ERR_MASK, never an additive
 * bias of 0 and 1. Codes outside attn_dtype stand for the integer dtypes a
 * binding might map there. */
static void test_mask_dtypes(void) {
    enum { N = 2, L = 3, S = 4, E = 4, H = 2 };
    int64_t sq[3] = {N, L, E}, sk[3] = {N, S, E}, sl[2] = {N, L}, sw[2] = {3 * E, E}, se[2] = {E, E};
    attn_tensor q = make(ATTN_F64, 3, sq), k = make(ATTN_F64, 3, sk), out = make(ATTN_F64, 3, sq);
    attn_tensor lse = make(ATTN_F64, 2, sl), dq = make(ATTN_F64, 3, sq), scores, keep;
    int64_t ss[3] = {N, L, S};
    scores = make(ATTN_F64, 3, ss), keep = make(ATTN_BOOL, 3, ss);
    attn_tensor win = make(ATTN_F64, 2, sw), wout = make(ATTN_F64, 2, se), dx = make(ATTN_F64, 3, sq);
    attn_error err;
    attn_sdpa(&out, &lse, NULL, &q, &k, &k, NULL, &err);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = H, p.in_proj_weight = &win, p.out_proj_weight = &wout;
    double bytes[N * L * S]; /* room for 8-byte elements of any dtype */
    memset(bytes, 0, sizeof bytes);
    const int codes[] = {0, ATTN_F32, ATTN_F16, ATTN_BF16, 6, 7, 8, 9, 10, 11, 12, 100, -1};
    int bad = 0;
    char why[ATTN_ERROR_MESSAGE_SIZE + 64] = "";
    for (size_t c = 0; c < sizeof codes / sizeof codes[0]; c++) {
        attn_tensor m; /* (L, S), the dtype set by hand: attn_tensor_init refuses unknown codes */
        int64_t sm[2] = {L, S}, skp[2] = {N, S};
        attn_tensor_init(&m, bytes, ATTN_BOOL, 2, sm, NULL, NULL);
        m.dtype = (attn_dtype)codes[c];
        attn_tensor kpm = m;
        attn_tensor_init(&kpm, bytes, ATTN_BOOL, 2, skp, NULL, NULL);
        kpm.dtype = m.dtype;
        attn_sdpa_options o = attn_sdpa_options_default();
        o.mask = &m;
        attn_mha_options mo = attn_mha_options_default();
        mo.batch_first = 1;
        size_t ws;
        int rank;
        attn_mha_options with_kpm = mo, with_attn_mask = mo;
        with_kpm.key_padding_mask = &kpm, with_attn_mask.attn_mask = &m;
        /* A ragged batch of the same rows packed (N·L, 1, E), each sequence
         * with the mask of its own (L, S). */
        attn_tensor pq = q, pk = k, pout = out, plse = lse, pdq = dq;
        int64_t cq[3] = {0, L, N * L}, ck[3] = {0, S, N * S}, sqp[3] = {N * L, 1, E}, skp3[3] = {N * S, 1, E};
        int64_t slp[2] = {N * L, 1};
        attn_tensor_init(&pq, q.data, ATTN_F64, 3, sqp, NULL, NULL), attn_tensor_init(&pk, k.data, ATTN_F64, 3, skp3, NULL, NULL);
        attn_tensor_init(&pout, out.data, ATTN_F64, 3, sqp, NULL, NULL), attn_tensor_init(&pdq, dq.data, ATTN_F64, 3, sqp, NULL, NULL);
        attn_tensor_init(&plse, lse.data, ATTN_F64, 2, slp, NULL, NULL);
        const attn_tensor *masks[N] = {&m, &m};
        struct {
            const char *call;
            attn_status st;
        } got[] = {
            {"attn_sdpa", attn_sdpa(&out, NULL, NULL, &q, &k, &k, &o, &err)},
            {"attn_sdpa_reference", attn_sdpa_reference(&out, NULL, NULL, &q, &k, &k, &o, &err)},
            {"attn_scores", attn_scores(&scores, &q, &k, &o, &err)},
            {"attn_sdpa_shapes", attn_sdpa_shapes(&rank, NULL, NULL, &q, &k, &k, &o, &err)},
            {"attn_sdpa_workspace_size", attn_sdpa_workspace_size(&ws, &out, NULL, NULL, &q, &k, &k, &o, &err)},
            {"attn_sdpa_dropout_mask", attn_sdpa_dropout_mask(&keep, &q, &k, &k, &o, &err)},
            {"attn_sdpa_backward", attn_sdpa_backward(&dq, NULL, NULL, NULL, &out, &q, &k, &k, &out, &lse, &o, &err)},
            {"attn_sdpa_varlen", attn_sdpa_varlen(&pout, NULL, &pq, &pk, &pk, cq, ck, N, masks, NULL, &err)},
            {"attn_sdpa_varlen_backward", attn_sdpa_varlen_backward(&pdq, NULL, NULL, &pout, &pq, &pk, &pk, &pout,
                                                                    &plse, cq, ck, N, masks, NULL, &err)},
            {"attn_sdpa_varlen_backward_workspace_size",
             attn_sdpa_varlen_backward_workspace_size(&ws, &pdq, NULL, NULL, &pout, &pq, &pk, &pk, &pout, &plse, cq, ck, N,
                                                      masks, NULL, &err)},
            {"attn_mha key_padding_mask", attn_mha(&out, NULL, &q, &k, &k, &p, &with_kpm, &err)},
            {"attn_mha attn_mask", attn_mha(&out, NULL, &q, &k, &k, &p, &with_attn_mask, &err)},
            {"attn_mha_backward key_padding_mask",
             attn_mha_backward(&dx, NULL, NULL, NULL, &out, &q, &k, &k, &p, &with_kpm, &err)},
            {"attn_mha_backward attn_mask",
             attn_mha_backward(&dx, NULL, NULL, NULL, &out, &q, &k, &k, &p, &with_attn_mask, &err)},
        };
        for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
            if (got[i].st != ATTN_ERR_MASK) {
                bad++;
                snprintf(why, sizeof why, "%s with a mask of dtype code %d: status %d", got[i].call, codes[c],
                         (int)got[i].st);
            }
        /* The message says what a mask may be. */
        attn_sdpa(&out, NULL, NULL, &q, &k, &k, &o, &err);
        if (!strstr(err.message, "bool")) bad++, snprintf(why, sizeof why, "message \"%.400s\"", err.message);
    }
    check(!bad, "mask_neither_bool_nor_q_dtype_refused_everywhere", "%d refusals missing; the last: %s", bad, why);
    status_seen[ATTN_ERR_MASK] = 1;
    attn_tensor *all[] = {&q, &k, &out, &lse, &dq, &scores, &keep, &win, &wout, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->data);
}

/* ---- the KV cache ---------------------------------------------------------- */

/* Rows p0..p0+n-1 (dimension 2) of a contiguous rank-4 tensor, as a view. */
static attn_tensor rows_of(const attn_tensor *t, int64_t p0, int64_t n) {
    attn_tensor r = *t;
    r.data = (char *)t->data + p0 * t->strides[2] * (int64_t)attn_dtype_size(t->dtype);
    r.shape[2] = n;
    return r;
}

/* Decoding through the cache, a prefill of `prefill` positions, then one at
 * a time, then the last 3 at once, gives full bottom-right causal attention
 * over the whole sequence of T (keys and values at the cache's precision).
 * T past 2048 takes the f32 decode kernel for the single positions. */
static void kv_incremental(attn_dtype dt, attn_dtype store, int64_t T, int64_t prefill, double tol, const char *name) {
    enum { B = 2, HQ = 4, HK = 2, E = 16, EV = 8 };
    int64_t sq[4] = {B, HQ, T, E}, sk[4] = {B, HK, T, E}, sv[4] = {B, HK, T, EV}, so[4] = {B, HQ, T, EV};
    attn_tensor q = make(dt, 4, sq), k = make(dt, 4, sk), v = make(dt, 4, sv), full = make(dt, 4, so);
    attn_tensor step = make(dt, 4, so), kr = make(dt, 4, sk), vr = make(dt, 4, sv);
    attn_error err;
    if (store == ATTN_F16 || store == ATTN_BF16) { /* the reference sees the stored values */
        attn_tensor hk = make(store, 4, sk), hv = make(store, 4, sv);
        attn_tensor_convert(&hk, &k, &err), attn_tensor_convert(&kr, &hk, &err);
        attn_tensor_convert(&hv, &v, &err), attn_tensor_convert(&vr, &hv, &err);
        free(hk.data), free(hv.data);
    } else {
        attn_tensor_convert(&kr, &k, &err), attn_tensor_convert(&vr, &v, &err);
    }
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT; /* L = S: the same as bottom-right */
    attn_status st = attn_sdpa(&full, NULL, NULL, &q, &kr, &vr, &o, &err);
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = B, d.heads = HK, d.capacity = T, d.key_dim = E, d.value_dim = EV, d.dtype = store;
    size_t bytes = 0;
    attn_kv_cache *cache = NULL;
    if (!st) st = attn_kv_cache_bytes(&bytes, &d, &err);
    void *memory = malloc(bytes + 1);
    if (!st) st = attn_kv_cache_init(&cache, (char *)memory + 1, bytes, &d, &err); /* any alignment */
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    int64_t p0 = 0;
    char kernel[32] = "";
    while (!st && p0 < T) {
        int64_t n = p0 == 0 ? prefill : p0 >= T - 3 ? T - p0 : 1;
        attn_tensor kn = rows_of(&k, p0, n), vn = rows_of(&v, p0, n), qn = rows_of(&q, p0, n);
        attn_tensor on = rows_of(&step, p0, n);
        /* the output slice is strided (B, HQ, n, EV) inside step */
        int watch = p0 == prefill; /* the first single position: which kernel ran? */
        if (watch) verbose_begin();
        if (!(st = attn_kv_cache_append(cache, &kn, &vn, &err))) st = attn_kv_cache_attend(&on, NULL, &qn, cache, &o, &err);
        if (watch) verbose_end(kernel, sizeof kernel, NULL, 0);
        p0 += n;
    }
    const char *want = dt == ATTN_F64 ? "exact" : "decode"; /* one query: split over the keys at any length */
    double big = 0;
    for (int64_t i = 0; i < attn_tensor_numel(&full); i++) big = fabs(get(&full, i)) > big ? fabs(get(&full, i)) : big;
    double dmax = st ? INFINITY : max_diff(&step, &full) / big;
    check(!st && attn_kv_cache_length(cache) == T && dmax <= tol && strcmp(kernel, want) == 0, name,
          "status %d (%s), length %lld, error %.3g (tol %.1g), kernel %s (expected %s)", st, st ? err.message : "",
          (long long)attn_kv_cache_length(cache), dmax, tol, kernel, want);
    if (!st) { /* full: an error, and the cache as it was */
        attn_tensor k1 = rows_of(&k, 0, 1), v1 = rows_of(&v, 0, 1);
        char full_name[96];
        snprintf(full_name, sizeof full_name, "%s_full_is_an_error", name);
        check_status(attn_kv_cache_append(cache, &k1, &v1, &err), &err, ATTN_ERR_FULL, "filled: ", full_name);
        snprintf(full_name, sizeof full_name, "%s_full_leaves_the_cache_as_it_was", name);
        check(attn_kv_cache_length(cache) == T, full_name, "length %lld after a refused append",
              (long long)attn_kv_cache_length(cache));
    }
    free(memory), free(q.data), free(k.data), free(v.data), free(full.data), free(step.data), free(kr.data), free(vr.data);
}

/* RoPE inside attention (options.rope) against rotating q and k first with
 * attn_rope and attending without it: the same numbers, on the kernel the
 * shape calls for (flash in f32, also for a few queries against many keys,
 * which would otherwise take the decode kernel; exact in f64; reference). */
static void rope_case(attn_dtype dt, int64_t L, int64_t S, int64_t E, attn_causal causal, attn_rope_layout layout,
                      int64_t rotary_dim, int reference, const char *want_kernel, double tol, const char *name) {
    int64_t sq[3] = {4, L, E}, sk[3] = {2, S, E}, sv[3] = {2, S, 5}, so[3] = {4, L, 5};
    attn_tensor q = make(dt, 3, sq), k = make(dt, 3, sk), v = make(dt, 3, sv), out = make(dt, 3, so), ref = make(dt, 3, so);
    attn_tensor qr = make(dt, 3, sq), kr = make(dt, 3, sk);
    attn_rope_options r = attn_rope_options_default();
    r.layout = layout, r.rotary_dim = rotary_dim, r.position_offset = 7, r.base = 500, r.linear_scaling = 2;
    attn_rope_options rq = r;
    rq.position_offset += causal == ATTN_CAUSAL_TOP_LEFT ? 0 : S - L; /* queries are the last L positions */
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = causal;
    attn_error err;
    attn_status st = attn_rope(&qr, &q, &rq, &err);
    if (!st) st = attn_rope(&kr, &k, &r, &err);
    if (!st) st = reference ? attn_sdpa_reference(&ref, NULL, NULL, &qr, &kr, &v, &o, &err) : attn_sdpa(&ref, NULL, NULL, &qr, &kr, &v, &o, &err);
    o.rope = &r;
    char kernel[32] = "";
    verbose_begin();
    if (!st) st = reference ? attn_sdpa_reference(&out, NULL, NULL, &q, &k, &v, &o, &err) : attn_sdpa(&out, NULL, NULL, &q, &k, &v, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    double d = st ? INFINITY : max_diff(&out, &ref);
    check(!st && d <= tol && strcmp(kernel, want_kernel) == 0, name, "status %d (%s), max diff %.3g, kernel %s", (int)st,
          st ? err.message : "", d, kernel);
    free(q.data), free(k.data), free(v.data), free(out.data), free(ref.data), free(qr.data), free(kr.data);
}

/* The backward with options.rope against its definition: rotate q and k,
 * differentiate without RoPE, turn dq and dk back with attn_rope_backward. */
static void rope_backward_case(attn_dtype dt, int64_t L, int64_t S, attn_causal causal, double tol, const char *name) {
    int64_t E = 16, sq[3] = {4, L, E}, sk[3] = {2, S, E}, sv[3] = {2, S, 6}, so[3] = {4, L, 6}, sl[2] = {4, L};
    attn_tensor q = make(dt, 3, sq), k = make(dt, 3, sk), v = make(dt, 3, sv), dout = make(dt, 3, so);
    attn_tensor qr = make(dt, 3, sq), kr = make(dt, 3, sk), out = make(dt, 3, so), lse = make(dt, 2, sl);
    attn_tensor g[3] = {make(dt, 3, sq), make(dt, 3, sk), make(dt, 3, sv)}, want[3] = {make(dt, 3, sq), make(dt, 3, sk), make(dt, 3, sv)};
    attn_rope_options r = attn_rope_options_default(), rq;
    r.position_offset = 3, r.rotary_dim = 12, r.layout = ATTN_ROPE_INTERLEAVED;
    rq = r, rq.position_offset += causal == ATTN_CAUSAL_TOP_LEFT ? 0 : S - L;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = causal;
    attn_error err;
    attn_status st = attn_rope(&qr, &q, &rq, &err);
    if (!st) st = attn_rope(&kr, &k, &r, &err);
    if (!st) st = attn_sdpa(&out, &lse, NULL, &qr, &kr, &v, &o, &err);
    if (!st) st = attn_sdpa_backward(&want[0], &want[1], &want[2], NULL, &dout, &qr, &kr, &v, &out, &lse, &o, &err);
    if (!st) st = attn_rope_backward(&want[0], &want[0], &rq, &err);
    if (!st) st = attn_rope_backward(&want[1], &want[1], &r, &err);
    o.rope = &r;
    if (!st) st = attn_sdpa_backward(&g[0], &g[1], &g[2], NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
    double d = 0;
    for (int i = 0; i < 3 && !st; i++) d = fmax(d, max_diff(&g[i], &want[i]));
    check(!st && d <= tol, name, "status %d (%s), max diff %.3g", (int)st, st ? err.message : "", d);
    attn_tensor *all[] = {&q, &k, &v, &dout, &qr, &kr, &out, &lse, &g[0], &g[1], &g[2], &want[0], &want[1], &want[2]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

static void test_rope_in_attention(void) {
    rope_backward_case(ATTN_F64, 30, 45, ATTN_CAUSAL_BOTTOM_RIGHT, 1e-13, "rope_in_sdpa_backward_f64");
    rope_backward_case(ATTN_F32, 200, 260, ATTN_CAUSAL_NONE, 2e-5, "rope_in_sdpa_backward_f32_flash");
    rope_backward_case(ATTN_F32, 50, 50, ATTN_CAUSAL_TOP_LEFT, 2e-5, "rope_in_sdpa_backward_f32_causal");
    rope_case(ATTN_F64, 37, 50, 16, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_ROPE_HALVES, 0, 0, "exact", 1e-13, "rope_in_sdpa_f64_exact_halves");
    rope_case(ATTN_F64, 20, 20, 12, ATTN_CAUSAL_TOP_LEFT, ATTN_ROPE_INTERLEAVED, 8, 0, "exact", 1e-13,
              "rope_in_sdpa_f64_exact_interleaved_partial");
    rope_case(ATTN_F64, 9, 30, 16, ATTN_CAUSAL_NONE, ATTN_ROPE_HALVES, 10, 1, "reference", 1e-13, "rope_in_sdpa_reference");
    rope_case(ATTN_F32, 300, 700, 64, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_ROPE_HALVES, 0, 0, "flash", 2e-5, "rope_in_sdpa_f32_flash_halves");
    rope_case(ATTN_F32, 100, 100, 40, ATTN_CAUSAL_NONE, ATTN_ROPE_INTERLEAVED, 24, 0, "flash", 2e-5,
              "rope_in_sdpa_f32_flash_interleaved_partial");
    rope_case(ATTN_F32, 2, 5000, 32, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_ROPE_HALVES, 0, 0, "flash", 2e-5,
              "rope_in_sdpa_f32_few_queries_take_flash");
    attn_rope_options bad = attn_rope_options_default();
    bad.rotary_dim = 5;
    int64_t sq[2] = {3, 8};
    attn_tensor q = make(ATTN_F32, 2, sq), out = make(ATTN_F32, 2, sq);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.rope = &bad;
    attn_error err;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_SHAPE, "rotary dimension is 5",
                 "rope_in_sdpa_odd_rotary_dim");
    bad = attn_rope_options_default(), bad.base = -1;
    check_status(attn_sdpa(&out, NULL, NULL, &q, &q, &q, &o, &err), &err, ATTN_ERR_OPTION, "RoPE base", "rope_in_sdpa_bad_base");
    free(q.data), free(out.data);
}

/* The cache's attention is the paged code's (attn_kv_cache_attend reads the
 * cache as a pool of one page whose heads are the B rows' heads): bitwise
 * what attn_sdpa gives on the cache's dense view (attn_kv_cache_view), the
 * way the cache was attended before, on every kernel (flash, decode, exact
 * f64), every storage (f32, f16, bf16, q8, f64), a 16-bit q, rank-3 q,
 * options (a rank-4 mask, RoPE, soft-cap; window, sinks; no causal mask,
 * ALiBi),
 * for 1 to 3 threads; the ATTN_VERBOSE line is the paged call's. */
typedef struct kv_paged_case {
    const char *name;
    attn_dtype store, qdt;
    int64_t B, L, S, E, kernel_rank; /* kernel_rank: q's rank (4, or 3 with B = 1) */
    int options;                     /* 1: mask, RoPE, soft-cap; 2: window, sinks; 3: no causal mask, ALiBi */
    const char *kernel;
} kv_paged_case;

static void kv_paged_bitwise(const kv_paged_case *c, int threads) {
    enum { HQ = 4, HK = 2 };
    const int64_t B = c->B, L = c->L, S = c->S, E = c->E, EV = c->E, C = c->S + 5, rank = c->kernel_rank;
    attn_dtype wide = c->store == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    int64_t sk[4] = {B, HK, S, E}, sq[4] = {B, HQ, L, E}, so[4] = {B, HQ, L, EV}, sl[3] = {B, HQ, L};
    attn_tensor k = make(wide, 4, sk), v = make(wide, 4, sk), q = make(wide, 4, sq);
    attn_tensor q16 = q, out[2], lse[2];
    if (c->qdt != wide) { /* a 16-bit q: the same values rounded */
        q16 = make(c->qdt, 4, sq);
        attn_tensor_convert(&q16, &q, NULL);
    }
    attn_dtype odt = c->qdt, ldt = c->qdt == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    for (int i = 0; i < 2; i++) {
        out[i] = make(odt, 4, so), lse[i] = make(ldt, 3, sl);
        memset(out[i].data, 0, (size_t)attn_tensor_numel(&out[i]) * attn_dtype_size(odt));
        memset(lse[i].data, 0, (size_t)attn_tensor_numel(&lse[i]) * attn_dtype_size(ldt));
    }
    attn_tensor qs = q16, os[2] = {out[0], out[1]}, ls[2] = {lse[0], lse[1]};
    if (rank == 3) { /* B = 1: drop it */
        attn_tensor *t[5] = {&qs, &os[0], &os[1], &ls[0], &ls[1]};
        for (int i = 0; i < 5; i++) {
            memmove(t[i]->shape, t[i]->shape + 1, sizeof(int64_t) * 3), memmove(t[i]->strides, t[i]->strides + 1, sizeof(int64_t) * 3);
            t[i]->rank--;
        }
    }
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = B, d.heads = HK, d.capacity = C, d.key_dim = E, d.value_dim = EV, d.dtype = c->store;
    size_t bytes = 0;
    attn_kv_cache *cache = NULL;
    attn_error err;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    void *memory = calloc(1, bytes);
    if (!st) st = attn_kv_cache_init(&cache, memory, bytes, &d, &err);
    if (!st) st = attn_kv_cache_append(cache, &k, &v, &err);
    int64_t mshape[4] = {B, 1, L, S}, hs[1] = {HQ};
    attn_tensor mask = make(ATTN_BOOL, 4, mshape), sinks = make(ATTN_F32, 1, hs);
    for (int64_t i = 0; i < B * L * S; i++) ((unsigned char *)mask.data)[i] = i % S == 0 || (i * 7919) % 5 != 0;
    attn_rope_options rope = attn_rope_options_default();
    rope.position_offset = 3;
    attn_context ctx = attn_context_default();
    ctx.num_threads = threads;
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.context = &ctx;
    if (c->options == 1) o.mask = &mask, o.rope = &rope, o.softcap = 8;
    if (c->options == 2) o.window = S / 3, o.sinks = &sinks;
    if (c->options == 3) o.causal = ATTN_CAUSAL_NONE, o.alibi_slopes = &sinks;
    char kernel[32] = "", line[1024] = "";
    verbose_begin();
    if (!st) st = attn_kv_cache_attend(&os[0], &ls[0], &qs, cache, &o, &err);
    verbose_end(kernel, sizeof kernel, NULL, 0);
    memcpy(line, verbose_last_line, sizeof line);
    attn_tensor kv, vv; /* the dense view, and attn_sdpa on it */
    if (!st) st = attn_kv_cache_view(&kv, &vv, cache, (int)rank, &err);
    if (!st) st = attn_sdpa(&os[1], &ls[1], NULL, &qs, &kv, &vv, &o, &err);
    size_t ob = (size_t)attn_tensor_numel(&out[0]) * attn_dtype_size(odt), lb = (size_t)attn_tensor_numel(&lse[0]) * attn_dtype_size(ldt);
    int same = !st && !memcmp(out[0].data, out[1].data, ob) && !memcmp(lse[0].data, lse[1].data, lb);
    int paged = strncmp(line, "attn: sdpa_paged ", 17) == 0;
    char name[160];
    snprintf(name, sizeof name, "kv_cache_attend_is_paged_bitwise_dense_%s_threads_%d", c->name, threads);
    check(same && paged && !strcmp(kernel, c->kernel), name, "status %d (%s), %s, kernel %s (want %s), line: %.120s", st,
          st ? err.message : "", same ? "same" : "DIFFERENT", kernel, c->kernel, line);
    attn_tensor *all[] = {&k, &v, &q, &out[0], &out[1], &lse[0], &lse[1], &mask, &sinks};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    if (c->qdt != wide) free(q16.data);
    free(memory);
}

static void test_kv_cache_paged(void) {
    static const kv_paged_case CASES[] = {
        {"f32_prefill_flash", ATTN_F32, ATTN_F32, 2, 40, 300, 16, 4, 0, "flash"},
        {"f32_decode", ATTN_F32, ATTN_F32, 2, 1, 3000, 64, 4, 0, "decode"},
        {"f16_store_decode_l3", ATTN_F16, ATTN_F32, 2, 3, 2100, 32, 4, 0, "decode"},
        {"bf16_store_prefill", ATTN_BF16, ATTN_F32, 3, 9, 200, 16, 4, 0, "flash"},
        {"q8_store_decode", ATTN_Q8, ATTN_F32, 2, 1, 700, 32, 4, 0, "decode"},
        {"q8_store_prefill", ATTN_Q8, ATTN_F32, 2, 17, 100, 32, 4, 0, "flash"},
        {"f64_exact", ATTN_F64, ATTN_F64, 2, 5, 60, 16, 4, 0, "exact"},
        {"f64_exact_mask_rope_softcap", ATTN_F64, ATTN_F64, 2, 5, 60, 16, 4, 1, "exact"},
        {"f32_mask_rope_softcap", ATTN_F32, ATTN_F32, 2, 6, 150, 16, 4, 1, "flash"},
        {"f32_window_sinks_decode", ATTN_F32, ATTN_F32, 2, 2, 900, 16, 4, 2, "decode"},
        {"f32_no_causal_alibi_prefill", ATTN_F32, ATTN_F32, 2, 33, 90, 16, 4, 3, "flash"},
        {"bf16_q_over_f32_store", ATTN_F32, ATTN_BF16, 2, 30, 120, 16, 4, 0, "flash"},
        {"rank3_q_one_row", ATTN_F16, ATTN_F32, 1, 1, 500, 16, 3, 0, "decode"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        for (int threads = 1; threads <= 3; threads++) kv_paged_bitwise(&CASES[i], threads);
}

static void test_kv_cache(void) {
    kv_incremental(ATTN_F64, ATTN_F64, 45, 13, 1e-13, "kv_cache_incremental_equals_causal_f64");
    kv_incremental(ATTN_F32, ATTN_F32, 45, 13, 4e-6, "kv_cache_incremental_equals_causal_f32");
    kv_incremental(ATTN_F32, ATTN_F16, 45, 13, 4e-6, "kv_cache_incremental_equals_causal_f16_store");
    kv_incremental(ATTN_F32, ATTN_BF16, 45, 13, 4e-6, "kv_cache_incremental_equals_causal_bf16_store");
    kv_incremental(ATTN_F32, ATTN_F16, 2100, 2060, 4e-6, "kv_cache_incremental_equals_causal_decode_kernel");

    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    size_t bytes;
    check_status(attn_kv_cache_bytes(&bytes, &d, &err), &err, ATTN_ERR_SHAPE, "desc->capacity is 0",
                 "kv_cache_sizes_must_be_set");
    d.capacity = 8, d.key_dim = 4, d.value_dim = 3;
    d.dtype = ATTN_BOOL;
    check_status(attn_kv_cache_bytes(&bytes, &d, &err), &err, ATTN_ERR_DTYPE, "f64, f32, f16 or bf16", "kv_cache_bool_dtype");
    d.dtype = ATTN_F32;
    d.capacity = INT64_MAX / 2;
    check_status(attn_kv_cache_bytes(&bytes, &d, &err), &err, ATTN_ERR_OVERFLOW, "overflows", "kv_cache_size_overflow");
    d.capacity = 8;
    attn_kv_cache_desc zero;
    memset(&zero, 0, sizeof zero);
    check_status(attn_kv_cache_bytes(&bytes, &zero, &err), &err, ATTN_ERR_OPTION, "struct_size is 0", "kv_cache_zeroed_desc");
    check_status(attn_kv_cache_bytes(&bytes, &d, &err), &err, ATTN_OK, "", "kv_cache_bytes");
    char *memory = malloc(bytes);
    attn_kv_cache *c = NULL;
    check_status(attn_kv_cache_init(&c, memory, bytes - 1, &d, &err), &err, ATTN_ERR_WORKSPACE, "needs",
                 "kv_cache_memory_too_small");
    check_status(attn_kv_cache_init(&c, memory, bytes, &d, &err), &err, ATTN_OK, "", "kv_cache_init");
    int64_t sq[2] = {2, 4}, sk[2] = {3, 4}, sv[2] = {3, 3}, so[2] = {2, 3}, sbad[2] = {3, 5};
    attn_tensor q = make(ATTN_F32, 2, sq), k = make(ATTN_F32, 2, sk), v = make(ATTN_F32, 2, sv), out = make(ATTN_F32, 2, so);
    attn_tensor k64 = make(ATTN_F64, 2, sk), kbad = make(ATTN_F32, 2, sbad);
    /* an empty cache: S = 0, out 0 as attn_sdpa gives it (PyTorch's softmax over no key) */
    check_status(attn_kv_cache_attend(&out, NULL, &q, c, NULL, &err), &err, ATTN_OK, "", "kv_cache_attend_empty");
    check(((float *)out.data)[0] == 0.0f && ((float *)out.data)[5] == 0.0f, "kv_cache_attend_empty_out_0",
          "out[0] %g, out[5] %g", ((float *)out.data)[0], ((float *)out.data)[5]);
    /* ... where out and lse it writes must still have data (their checks
     * ran on measuring stand-ins, which take NULL data: a NULL lse of 2
     * elements was written through) */
    {
        int64_t sl[1] = {2};
        attn_tensor lse = make(ATTN_F32, 1, sl), no_data = out;
        void *kept = lse.data;
        lse.data = NULL, no_data.data = NULL;
        check_status(attn_kv_cache_attend(&out, &lse, &q, c, NULL, &err), &err, ATTN_ERR_NULL, "lse has NULL data",
                     "kv_cache_attend_empty_lse_without_data");
        check_status(attn_kv_cache_attend(&no_data, NULL, &q, c, NULL, &err), &err, ATTN_ERR_NULL,
                     "out has NULL data", "kv_cache_attend_empty_out_without_data");
        free(kept);
    }
    check_status(attn_kv_cache_append(c, &k64, &v, &err), &err, ATTN_ERR_DTYPE, "f32, f16 or bf16",
                 "kv_cache_append_wrong_dtype");
    check_status(attn_kv_cache_append(c, &kbad, &v, &err), &err, ATTN_ERR_SHAPE, "k has shape (3, 5)",
                 "kv_cache_append_wrong_dim");
    /* counts of 1 read in the singular ("1 sequences of 1 heads" was printed) */
    check_status(attn_kv_cache_append(c, &kbad, &v, &err), &err, ATTN_ERR_SHAPE,
                 "the cache holds 1 sequence of 1 head of 4 values", "kv_cache_message_singular_counts");
    check_status(attn_kv_cache_append(c, &k, NULL, &err), &err, ATTN_ERR_NULL, "v is NULL", "kv_cache_append_null");
    check_status(attn_kv_cache_append(c, &k, &v, &err), &err, ATTN_OK, "", "kv_cache_append");
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    check_status(attn_kv_cache_attend(&out, NULL, &q, c, &o, &err), &err, ATTN_ERR_OPTION, "bottom-right",
                 "kv_cache_attend_top_left_rejected");
    check_status(attn_kv_cache_attend(&out, NULL, &q, c, NULL, &err), &err, ATTN_OK, "", "kv_cache_attend_default_causal");
    {   /* f64 q on an f32 cache: named as the cache's, not as a k the caller never passed */
        attn_tensor q64 = make(ATTN_F64, 2, sq), out64 = make(ATTN_F64, 2, so);
        check_status(attn_kv_cache_attend(&out64, NULL, &q64, c, NULL, &err), &err, ATTN_ERR_DTYPE,
                     "q is f64 but the cache stores f32", "kv_cache_attend_f64_q_on_f32_cache_named");
        free(q64.data), free(out64.data);
    }
    check_status(attn_kv_cache_truncate(c, 4, &err), &err, ATTN_ERR_ARGUMENT, "length 4", "kv_cache_truncate_past_length");
    check_status(attn_kv_cache_truncate(c, 1, &err), &err, ATTN_OK, "", "kv_cache_truncate");
    attn_tensor kv, vv;
    check_status(attn_kv_cache_view(&kv, &vv, c, 2, &err), &err, ATTN_OK, "", "kv_cache_view");
    check(kv.shape[0] == 1 && kv.shape[1] == 4 && vv.shape[1] == 3 && ((float *)kv.data)[3] == ((float *)k.data)[3],
          "kv_cache_view_shows_the_first_positions", "shape (%lld, %lld)", (long long)kv.shape[0], (long long)kv.shape[1]);
    d.batch = 2;
    attn_kv_cache *c2 = NULL;
    attn_kv_cache_bytes(&bytes, &d, &err);
    char *m2 = malloc(bytes);
    attn_kv_cache_init(&c2, m2, bytes, &d, &err);
    check_status(attn_kv_cache_view(&kv, &vv, c2, 3, &err), &err, ATTN_ERR_RANK, "rank 3 needs B = 1",
                 "kv_cache_view_rank_needs_batch_1");
    free(m2), free(memory), free(q.data), free(k.data), free(v.data), free(out.data), free(k64.data), free(kbad.data);
}


/* ---- multi-head attention ------------------------------------------------ */

/* With identity projections and no biases, attn_mha is attn_sdpa on the heads
 * side by side (the PyTorch checks are in oracle_mha.py; this one also runs
 * under the sanitizers), and its errors. */
/* Weights packed once (attn_mha_weights_init) and a workspace: an f32 GQA
 * layer with RoPE, cross-attention (q and k turned after projecting) and
 * out's rows strided, gives bitwise what it gives without them; the packed
 * copy is what the call reads (the weights zeroed after packing change
 * nothing); and the packed weights refuse other parameters, an f64 layer,
 * memory that is not theirs, too few bytes, and an out over them. */
static void test_mha_packed(void) {
    enum { N = 2, L = 5, S = 7, E = 48, H = 4, HKV = 2, D = E / H };
    int64_t sx[3] = {N, L, E}, skv[3] = {N, S, E}, sq[2] = {E, E}, sk[2] = {HKV * D, E}, sb[1] = {E}, sbk[1] = {HKV * D};
    attn_tensor q = make(ATTN_F32, 3, sx), kv = make(ATTN_F32, 3, skv);
    attn_tensor w[4] = {make(ATTN_F32, 2, sq), make(ATTN_F32, 2, sk), make(ATTN_F32, 2, sk), make(ATTN_F32, 2, sq)};
    attn_tensor b[4] = {make(ATTN_F32, 1, sb), make(ATTN_F32, 1, sbk), make(ATTN_F32, 1, sbk), make(ATTN_F32, 1, sb)};
    /* out strided: every other row of a (N, 2L, E) buffer */
    int64_t sbig[3] = {N, 2 * L, E}, st_out[3] = {2 * L * E, 2 * E, 1};
    attn_tensor big[3] = {make(ATTN_F32, 3, sbig), make(ATTN_F32, 3, sbig), make(ATTN_F32, 3, sbig)}, out[3];
    for (int i = 0; i < 3; i++) { /* the rows between out's are left as they are: zero in all three */
        memset(big[i].data, 0, sizeof(float) * (size_t)(N * 2 * L * E));
        attn_tensor_init(&out[i], big[i].data, ATTN_F32, 3, sx, st_out, NULL);
    }
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = H, p.num_kv_heads = HKV;
    p.q_proj_weight = &w[0], p.k_proj_weight = &w[1], p.v_proj_weight = &w[2], p.out_proj_weight = &w[3];
    p.q_proj_bias = &b[0], p.k_proj_bias = &b[1], p.v_proj_bias = &b[2], p.out_proj_bias = &b[3];
    attn_rope_options rope = attn_rope_options_default();
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1, o.rope = &rope, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    size_t bytes = 0, ws = 0;
    attn_mha_weights *pw = NULL;
    check_status(attn_mha_weights_bytes(&bytes, &p, &err), &err, ATTN_OK, "", "mha_weights_bytes");
    void *mem = malloc(bytes + 1);
    check_status(attn_mha_weights_init(&pw, mem, bytes - 1, &p, &err), &err, ATTN_ERR_WORKSPACE, "attn_mha_weights_bytes",
                 "err_mha_weights_too_few_bytes");
    check_status(attn_mha_weights_init(&pw, (char *)mem + 1, bytes, &p, &err), &err, ATTN_OK, "", "mha_weights_init_unaligned");
    check_status(attn_mha(&out[0], NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_OK, "", "mha_f32_unpacked_runs");
    attn_mha_options op = o;
    op.packed = pw;
    attn_context ctx = attn_context_default();
    check_status(attn_mha_workspace_size(&ws, &out[1], NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_OK, "",
                 "mha_workspace_size");
    ctx.workspace = malloc(ws), ctx.workspace_size = ws, op.context = &ctx;
    check_status(attn_mha(&out[1], NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_OK, "", "mha_f32_packed_workspace_runs");
    check(memcmp(big[0].data, big[1].data, sizeof(float) * (size_t)(N * 2 * L * E)) == 0,
          "mha_f32_packed_workspace_bitwise_unpacked", "outputs differ");
    for (int t = 0; t < 4; t++) memset(w[t].data, 0, sizeof(float) * (size_t)attn_tensor_numel(&w[t]));
    op.context = NULL;
    check_status(attn_mha(&out[2], NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_OK, "", "mha_f32_packed_runs");
    check(memcmp(big[0].data, big[2].data, sizeof(float) * (size_t)(N * 2 * L * E)) == 0,
          "mha_f32_packed_copy_is_what_runs", "the weights zeroed after packing changed the output");
    ctx.workspace_size = ws / 3, op.context = &ctx;
    check_status(attn_mha(&out[2], NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_ERR_WORKSPACE, "workspace",
                 "err_mha_workspace_too_small");
    op.context = NULL;
    attn_mha_params other = p;
    other.v_proj_weight = &w[1];
    check_status(attn_mha(&out[2], NULL, &q, &kv, &kv, &other, &op, &err), &err, ATTN_ERR_OPTION, "other parameters",
                 "err_mha_packed_other_params");
    /* out over the packed weights, which every product reads: refused, the
     * weights as they were (out's rows were once written over them) */
    attn_tensor over = out[2];
    over.data = (void *)pw;
    unsigned char *before = malloc(bytes);
    memcpy(before, pw, bytes - 64);
    check_status(attn_mha(&over, NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_ERR_STRIDE,
                 "out and options->packed (the packed weights) overlap", "err_mha_out_over_packed_weights");
    check(memcmp(before, pw, bytes - 64) == 0, "mha_out_over_packed_weights_writes_nothing", "the weights changed");
    free(before);
    int64_t sx64[3] = {N, L, E};
    attn_tensor q64 = make(ATTN_F64, 3, sx64), out64 = make(ATTN_F64, 3, sx64);
    check_status(attn_mha(&out64, NULL, &q64, &q64, &q64, &p, &op, &err), &err, ATTN_ERR_DTYPE, "", "err_mha_packed_f64_layer");
    char junk[sizeof(double) * 64] = {0};
    op.packed = (const attn_mha_weights *)(void *)junk;
    check_status(attn_mha(&out[2], NULL, &q, &kv, &kv, &p, &op, &err), &err, ATTN_ERR_OPTION, "attn_mha_weights_init",
                 "err_mha_packed_not_weights");
    free(mem), free(ctx.workspace), free(q.data), free(kv.data), free(q64.data), free(out64.data);
    for (int i = 0; i < 4; i++) free(w[i].data), free(b[i].data);
    for (int i = 0; i < 3; i++) free(big[i].data);
}

/* An f32 layer whose bf16 weights ran on the bf16 GEMM (`got`, from f32 x)
 * against the same layer in f64 on x rounded to bf16 (x̂) with the weights
 * widened: the largest |got - that| over a bound derived element by element
 * from the roundings attn.h states (attn_mha; "Numerics"):
 *  - The bf16 GEMM rounds each product's input to bf16 (the weights are
 *    bf16 already, read exactly): x to x̂, which the f64 layer is given too,
 *    and the heads' output a to â for out_proj, |â - a| <= u·|a|, u = 2^-8
 *    (bf16's unit roundoff: 8 significant bits).
 *  - Each projection of in = E terms sums in f32 within (in + 4)·2^-24 of
 *    Σ|x̂||w| (|x̂| <= (1 + u)|x|), the bias a term of input 1: with
 *    P = Σ_i |x_i||w_i| + |b| (in double here), within f·P, f = (E + 4)·
 *    2^-24·(1 + u), of the f64 layer's q, k and v (those, exact, in double
 *    here from x̂).
 *  - Attention per head: RoPE rotates q and k alike in both, an isometry
 *    that keeps a head's norms (of q, and of its error); in f32 each
 *    rotated a·cos - b·sin (cos and sin rounded once, two products and a
 *    sum rounded) adds at most 3·2^-24·(|a| + |b|), 6·2^-24·|q| over the
 *    head. A score q·k·scale then moves by at most δ = scale·(e_q·|k| +
 *    |q|·e_k + e_q·e_k) (Cauchy-Schwarz; e_q = f·|P_q| over the head's
 *    dimensions, plus RoPE's); softmax weights move by factors within
 *    e^(±2δ), so a row's mean of the values moves by at most
 *    (e^(2δ) - 1)·max|v| over its keys, and by at most max f·P_v for the
 *    values' own error; the f32
 *    kernel adds attn.h's 2e-5·max|v| + 4·2^-24·max|s|·max|v|. So each
 *    head's output is within Δa of the f64 layer's, and |a| <= A = max|v|
 *    over the row's keys (a weighted mean) plus that error.
 *  - out_proj: Σ_i (Δa_i + u·A_i)·|w_i| from the heads' error and their
 *    rounding, plus f·(Σ_i A_i·|w_i| + |b|) for its f32 sums.
 * x (N, L, E) f32; the layer is test_mha_half_weights's: causal bottom-right
 * with L = S (query t sees keys s <= t), H heads over HKV, RoPE; widened:
 * its parameters with the weights widened to f32 (q, k, v, out, then their
 * biases in w). Returns INFINITY where the f64 layer fails. */
static double bf16_layer_ratio(const attn_tensor *x, const float *got, const attn_mha_params *widened,
                               const attn_tensor *w, const attn_mha_options *o, int64_t H, int64_t HKV) {
    enum { MAXL = 8, MAXE = 64 };
    const int64_t N = x->shape[0], L = x->shape[1], E = x->shape[2], D = E / H, group = H / HKV;
    const double u = 0x1p-8, f = (double)(E + 4) * 0x1p-24 * (1 + u), scale = 1 / sqrt((double)D);
    if (L > MAXL || E > MAXE) return INFINITY;
    attn_tensor xr, want; /* (N, L, E) f64: x̂, and the f64 layer's output (no draws from the tests' stream) */
    attn_tensor_init(&xr, calloc((size_t)attn_tensor_numel(x), sizeof(double)), ATTN_F64, 3, x->shape, NULL, NULL);
    attn_tensor_init(&want, calloc((size_t)attn_tensor_numel(x), sizeof(double)), ATTN_F64, 3, x->shape, NULL, NULL);
    double *xh = xr.data, ratio = 0;
    for (int64_t i = 0; i < attn_tensor_numel(x); i++) xh[i] = attn_bf16_to_f32(attn_f32_to_bf16(((const float *)x->data)[i]));
    attn_error err;
    if (attn_mha(&want, NULL, &xr, &xr, &xr, widened, o, &err) != ATTN_OK) ratio = INFINITY;
    for (int64_t n = 0; n < N && ratio < INFINITY; n++) {
        double val[3][MAXL][MAXE], bnd[3][MAXL][MAXE]; /* q, k, v from x̂ (double), and f·P */
        for (int m = 0; m < 3; m++) {
            const float *W = w[m].data, *B = w[4 + m].data;
            for (int64_t t = 0; t < L; t++)
                for (int64_t j = 0; j < w[m].shape[0]; j++) {
                    double sum = B[j], mag = fabs(B[j]);
                    for (int64_t i = 0; i < E; i++) {
                        double xi = xh[(n * L + t) * E + i];
                        sum += xi * W[j * E + i], mag += fabs(xi * W[j * E + i]);
                    }
                    val[m][t][j] = sum, bnd[m][t][j] = f * mag;
                }
        }
        double heads[MAXL][MAXE], dheads[MAXL][MAXE]; /* A and Δa, the heads concatenated */
        for (int64_t t = 0; t < L; t++)
            for (int64_t h = 0; h < H; h++) {
                int64_t g = h / group; /* the KV head of query head h */
                double nq = 0, eq = 0, delta = 0, smax = 0, vmax = 0;
                for (int64_t d = 0; d < D; d++)
                    nq += val[0][t][h * D + d] * val[0][t][h * D + d], eq += bnd[0][t][h * D + d] * bnd[0][t][h * D + d];
                nq = sqrt(nq), eq = sqrt(eq) + 6 * 0x1p-24 * (nq + sqrt(eq));
                for (int64_t s = 0; s <= t; s++) {
                    double nk = 0, ek = 0;
                    for (int64_t d = 0; d < D; d++)
                        nk += val[1][s][g * D + d] * val[1][s][g * D + d], ek += bnd[1][s][g * D + d] * bnd[1][s][g * D + d];
                    nk = sqrt(nk), ek = sqrt(ek) + 6 * 0x1p-24 * (nk + sqrt(ek));
                    delta = fmax(delta, scale * (eq * nk + nq * ek + eq * ek));
                    smax = fmax(smax, scale * (nq + eq) * (nk + ek));
                    for (int64_t d = 0; d < D; d++) vmax = fmax(vmax, fabs(val[2][s][g * D + d]) + bnd[2][s][g * D + d]);
                }
                double kernel = (2e-5 + 4 * 0x1p-24 * smax) * vmax; /* the f32 attention's own error */
                for (int64_t d = 0; d < D; d++) {
                    double vm = 0, dv = 0;
                    for (int64_t s = 0; s <= t; s++)
                        vm = fmax(vm, fabs(val[2][s][g * D + d]) + bnd[2][s][g * D + d]), dv = fmax(dv, bnd[2][s][g * D + d]);
                    dheads[t][h * D + d] = dv + expm1(2 * delta) * vm + kernel;
                    heads[t][h * D + d] = vm + dheads[t][h * D + d];
                }
            }
        const float *W = w[3].data, *B = w[7].data;
        for (int64_t t = 0; t < L; t++)
            for (int64_t j = 0; j < E; j++) {
                double from_heads = 0, mag = fabs(B[j]);
                for (int64_t i = 0; i < E; i++) {
                    from_heads += (dheads[t][i] + u * heads[t][i]) * fabs(W[j * E + i]);
                    mag += heads[t][i] * fabs(W[j * E + i]);
                }
                int64_t at = (n * L + t) * E + j;
                ratio = fmax(ratio, fabs(got[at] - ((double *)want.data)[at]) / (from_heads + f * mag));
            }
    }
    free(xr.data), free(want.data);
    return ratio;
}

/* 16-bit weights, as checkpoints ship them: a layer given bf16 (or f16)
 * weights and biases computes what it computes with the same values
 * widened to f32, bitwise (widening is exact, and the products widen as
 * they pack): f32 and f64 layers, forward, packed, through the cache, and
 * the backward pass (a 16-bit parameter's gradient in f32). The exception:
 * an f32 layer's bf16 weights on a CPU with a bf16 GEMM (ATTN_VERBOSE
 * names it: gemm_q=bf16:...) round the products' inputs to bf16 too; then
 * that layer is within bf16_layer_ratio's bound of the layer in f64 on x
 * rounded to bf16 (tests/test_mha_cli.py holds it to PyTorch), and packed
 * weights give it bitwise. */
static void test_mha_half_weights(void) {
    enum { N = 2, L = 5, E = 32, H = 4, HKV = 2, D = E / H };
    int64_t sx[3] = {N, L, E}, sq[2] = {E, E}, sk[2] = {HKV * D, E}, sb[1] = {E}, sbk[1] = {HKV * D};
    const int64_t *shapes[8] = {sq, sk, sk, sq, sb, sbk, sbk, sb};
    for (int half = 0; half < 2; half++) {
        attn_dtype h = half ? ATTN_F16 : ATTN_BF16;
        attn_tensor w16[8], w32[8];
        for (int t = 0; t < 8; t++) {
            int rank = t < 4 ? 2 : 1;
            w32[t] = make(ATTN_F32, rank, shapes[t]);
            attn_tensor_init(&w16[t], NULL, h, rank, shapes[t], NULL, NULL);
            int64_t n = attn_tensor_numel(&w16[t]);
            w16[t].data = malloc(2 * (size_t)n);
            for (int64_t i = 0; i < n; i++) { /* the 16-bit value, and it widened */
                float *x = (float *)w32[t].data + i;
                uint16_t b = half ? attn_f32_to_f16(*x * 0.25f) : attn_f32_to_bf16(*x * 0.25f);
                ((uint16_t *)w16[t].data)[i] = b, *x = half ? attn_f16_to_f32(b) : attn_bf16_to_f32(b);
            }
        }
        attn_mha_params p[2];
        for (int v = 0; v < 2; v++) {
            attn_tensor *w = v ? w32 : w16;
            p[v] = attn_mha_params_default();
            p[v].embed_dim = E, p[v].num_heads = H, p[v].num_kv_heads = HKV;
            p[v].q_proj_weight = &w[0], p[v].k_proj_weight = &w[1], p[v].v_proj_weight = &w[2], p[v].out_proj_weight = &w[3];
            p[v].q_proj_bias = &w[4], p[v].k_proj_bias = &w[5], p[v].v_proj_bias = &w[6], p[v].out_proj_bias = &w[7];
        }
        attn_rope_options rope = attn_rope_options_default();
        attn_mha_options o = attn_mha_options_default();
        o.batch_first = 1, o.rope = &rope, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_error err;
        int ok = 1, same = 1;
        int on16 = 0; /* the f32 layer's products ran on a bf16 GEMM */
        double ratio = 0; /* then: its largest difference over bf16_layer_ratio's bound */
        for (int dt = 0; dt < 2; dt++) { /* an f32 layer, then an f64 one */
            attn_dtype t = dt ? ATTN_F64 : ATTN_F32;
            attn_tensor x = make(t, 3, sx), out[2] = {make(t, 3, sx), make(t, 3, sx)};
            size_t bytes = (size_t)attn_tensor_numel(&x) * attn_dtype_size(t);
            char kernel[32];
            verbose_begin();
            for (int v = 0; v < 2; v++) {
                ok &= attn_mha(&out[v], NULL, &x, &x, &x, &p[v], &o, &err) == ATTN_OK;
                if (v == 0) verbose_end(kernel, sizeof kernel, NULL, 0);
            }
            int g16 = strstr(verbose_gemm_line, "gemm_q=bf16:") != NULL;
            ok &= !g16 || (dt == 0 && !half); /* only an f32 layer's bf16 weights */
            if (dt == 0) on16 = g16;
            if (g16) { /* within the bound derived from bf16's and f32's roundings, element by element */
                ratio = bf16_layer_ratio(&x, out[0].data, &p[1], w32, &o, H, HKV);
                same &= ratio <= 1;
            } else
                same &= memcmp(out[0].data, out[1].data, bytes) == 0;
            /* the backward: every input's and parameter's gradient */
            attn_tensor dout = make(t, 3, sx), dx[2] = {make(t, 3, sx), make(t, 3, sx)}, g[2][8];
            attn_mha_params gp[2];
            for (int v = 0; v < 2; v++) {
                gp[v] = attn_mha_params_default();
                for (int k = 0; k < 8; k++) g[v][k] = make(ATTN_F32, k < 4 ? 2 : 1, shapes[k]);
                gp[v].q_proj_weight = &g[v][0], gp[v].k_proj_weight = &g[v][1], gp[v].v_proj_weight = &g[v][2];
                gp[v].out_proj_weight = &g[v][3], gp[v].q_proj_bias = &g[v][4], gp[v].k_proj_bias = &g[v][5];
                gp[v].v_proj_bias = &g[v][6], gp[v].out_proj_bias = &g[v][7];
                if (dt == 0) /* an f32 layer's f32 parameters' gradients are f32; an f64 layer's of f32 too */
                    ok &= attn_mha_backward(&dx[v], NULL, NULL, &gp[v], &dout, &x, &x, &x, &p[v], &o, &err) == ATTN_OK;
            }
            for (int k = 0; k < 8 && dt == 0 && !g16; k++)
                same &= memcmp(g[0][k].data, g[1][k].data, sizeof(float) * (size_t)attn_tensor_numel(&g[0][k])) == 0;
            same &= dt || g16 || memcmp(dx[0].data, dx[1].data, bytes) == 0;
            free(x.data), free(out[0].data), free(out[1].data), free(dout.data), free(dx[0].data), free(dx[1].data);
            for (int v = 0; v < 2; v++)
                for (int k = 0; k < 8; k++) free(g[v][k].data);
        }
        /* packed from 16-bit weights */
        size_t wb = 0;
        attn_mha_weights *pw = NULL;
        ok &= attn_mha_weights_bytes(&wb, &p[0], &err) == ATTN_OK;
        void *mem = malloc(wb + 1);
        ok &= attn_mha_weights_init(&pw, mem, wb, &p[0], &err) == ATTN_OK;
        attn_mha_options op = o;
        op.packed = pw;
        attn_tensor x = make(ATTN_F32, 3, sx), out[2] = {make(ATTN_F32, 3, sx), make(ATTN_F32, 3, sx)};
        ok &= attn_mha(&out[0], NULL, &x, &x, &x, &p[0], &op, &err) == ATTN_OK &&
              attn_mha(&out[1], NULL, &x, &x, &x, &p[on16 ? 0 : 1], &o, &err) == ATTN_OK; /* the bf16 GEMM: packed = unpacked */
        same &= memcmp(out[0].data, out[1].data, sizeof(float) * (size_t)attn_tensor_numel(&x)) == 0;
        check(ok && same, half ? "mha_f16_weights_as_widened_f32" : on16 ? "mha_bf16_weights_on_the_bf16_gemm" : "mha_bf16_weights_as_widened_f32",
              "%s; results %s (%.3g of the bf16 bound; %s)", ok ? "calls ok" : err.message, same ? "agree" : "differ", ratio,
              verbose_gemm_line);
        /* a 16-bit parameter's gradient in its own dtype is refused */
        attn_tensor dx = make(ATTN_F32, 3, sx), dout = make(ATTN_F32, 3, sx);
        attn_mha_params gp = attn_mha_params_default();
        gp.q_proj_weight = &w16[0];
        check_status(attn_mha_backward(&dx, NULL, NULL, &gp, &dout, &x, &x, &x, &p[0], &o, &err), &err, ATTN_ERR_DTYPE,
                     "a 16-bit parameter's gradient is f32 or f64", half ? "err_mha_f16_param_grad_f16" : "err_mha_bf16_param_grad_bf16");
        free(mem), free(x.data), free(out[0].data), free(out[1].data), free(dx.data), free(dout.data);
        for (int t = 0; t < 8; t++) free(w16[t].data), free(w32[t].data);
    }
}

static void test_mha(void) {
    enum { N = 2, L = 3, S = 4, E = 8, H = 2, D = E / H };
    int64_t sx[3] = {N, L, E}, skv[3] = {N, S, E}, sw[2] = {3 * E, E}, so[2] = {E, E};
    attn_tensor q = make(ATTN_F64, 3, sx), kv = make(ATTN_F64, 3, skv), out = make(ATTN_F64, 3, sx);
    attn_tensor win = make(ATTN_F64, 2, sw), wout = make(ATTN_F64, 2, so), ref = make(ATTN_F64, 3, sx);
    for (int64_t r = 0; r < 3 * E; r++)
        for (int64_t c = 0; c < E; c++) ((double *)win.data)[r * E + c] = r % E == c;
    for (int64_t r = 0; r < E; r++)
        for (int64_t c = 0; c < E; c++) ((double *)wout.data)[r * E + c] = r == c;
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = H, p.in_proj_weight = &win, p.out_proj_weight = &wout;
    attn_mha_options o = attn_mha_options_default();
    o.batch_first = 1;
    attn_error err;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_OK, "", "mha_identity_runs");
    /* The heads: (N, L, H, D) seen as (N, H, L, D). */
    int64_t sh[4] = {N, H, L, D}, shk[4] = {N, H, S, D}, st_q[4] = {L * E, D, E, 1}, st_k[4] = {S * E, D, E, 1};
    attn_tensor hq, hk, hr;
    attn_tensor_init(&hq, q.data, ATTN_F64, 4, sh, st_q, NULL);
    attn_tensor_init(&hk, kv.data, ATTN_F64, 4, shk, st_k, NULL);
    attn_tensor_init(&hr, ref.data, ATTN_F64, 4, sh, st_q, NULL);
    attn_sdpa(&hr, NULL, NULL, &hq, &hk, &hk, NULL, &err);
    double d = max_diff(&out, &ref);
    check(d <= 1e-14, "mha_identity_projections_is_sdpa_per_head", "max diff %.3g", d);
    /* RoPE goes inside the attention when the positions allow (self-attention:
     * its verbose line names it), and is turned after projecting otherwise
     * (bottom-right cross-attention, L != S); oracle_mha.py checks both. */
    attn_rope_options rope = attn_rope_options_default();
    o.rope = &rope, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    const char *calls[2] = {"self", "cross"};
    for (int c = 0; c < 2; c++) {
        char kernel[32];
        verbose_begin();
        attn_status st = attn_mha(&out, NULL, &q, c ? &kv : &q, c ? &kv : &q, &p, &o, &err);
        verbose_end(kernel, sizeof kernel, NULL, 0);
        int inside = strstr(verbose_last_line, "rope=halves") != NULL;
        char name[64];
        snprintf(name, sizeof name, "mha_rope_%s_attention_%s", calls[c], c ? "turns_q_k_itself" : "inside_the_kernel");
        check(st == ATTN_OK && inside == (c == 0), name, "status %d, verbose: %s", (int)st, verbose_last_line);
    }
    /* RoPE's options are checked before any work, by the workspace sizes
     * too: turned after projecting (L < S), they were read only by the
     * rotation, so attn_mha_workspace_size measured options attn_mha then
     * refused. out is left as it was. */
    rope.base = 0;
    for (int c = 0; c < 2; c++) {
        size_t ws = 0;
        char name[64];
        for (int64_t i = 0; i < N * L * E; i++) ((double *)out.data)[i] = 7.25;
        snprintf(name, sizeof name, "err_mha_rope_base_0_%s", calls[c]);
        check_status(attn_mha(&out, NULL, &q, c ? &kv : &q, c ? &kv : &q, &p, &o, &err), &err, ATTN_ERR_OPTION,
                     "RoPE base is 0", name);
        strcat(name, "_out_untouched");
        check(((double *)out.data)[0] == 7.25 && ((double *)out.data)[N * L * E - 1] == 7.25, name, "out was written");
        snprintf(name, sizeof name, "err_mha_workspace_size_rope_base_0_%s", calls[c]);
        check_status(attn_mha_workspace_size(&ws, &out, NULL, &q, c ? &kv : &q, c ? &kv : &q, &p, &o, &err), &err,
                     ATTN_ERR_OPTION, "RoPE base is 0", name);
    }
    rope.base = 10000;
    /* RoPE's positions within 2^53 as attn_sdpa takes them, the last key's
     * at most there: taken by attn_mha and attn_mha_backward alike where
     * the layer turns q and k itself (L < S; the backward turned the
     * queries back from an offset past 2^53 and refused what the forward
     * took), refused by both one position further. */
    {
        attn_tensor dq = make(ATTN_F64, 3, sx), dout = make(ATTN_F64, 3, sx);
        memset(dout.data, 0, sizeof(double) * (size_t)(N * L * E));
        const int64_t pasts[3] = {0, 1, S}; /* S: position_offset 2^53 itself */
        for (int i = 0; i < 3; i++) {
            int64_t past = pasts[i];
            rope.position_offset = ((int64_t)1 << 53) - S + past;
            attn_status want = past ? ATTN_ERR_OPTION : ATTN_OK;
            const char *needle = past ? "past 2^53" : "";
            char name[2][64];
            snprintf(name[0], sizeof name[0], "err_mha_rope_keys_%lld_past_2^53", (long long)past);
            snprintf(name[1], sizeof name[1], "err_mha_backward_rope_keys_%lld_past_2^53", (long long)past);
            check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, want, needle,
                         past ? name[0] : "mha_rope_last_key_at_2^53");
            check_status(attn_mha_backward(&dq, NULL, NULL, NULL, &dout, &q, &kv, &kv, &p, &o, &err), &err, want, needle,
                         past ? name[1] : "mha_backward_rope_last_key_at_2^53");
        }
        rope.position_offset = 0;
        free(dq.data), free(dout.data);
    }
    o.rope = NULL, o.causal = ATTN_CAUSAL_NONE;
    /* Self-attention token by token through a KV cache = causal over the whole sequence. */
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    check_status(attn_mha(&out, NULL, &q, &q, &q, &p, &o, &err), &err, ATTN_OK, "", "mha_causal_self_attention");
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.batch = N, cd.heads = H, cd.capacity = L, cd.key_dim = cd.value_dim = D, cd.dtype = ATTN_F64;
    size_t cbytes = 0;
    attn_kv_cache_bytes(&cbytes, &cd, &err);
    void *cmem = malloc(cbytes);
    attn_kv_cache *cache = NULL;
    attn_kv_cache_init(&cache, cmem, cbytes, &cd, &err);
    attn_mha_options oc = attn_mha_options_default();
    oc.batch_first = 1;
    { /* a bad RoPE measured as the step refuses it (the step turns q and k itself) */
        attn_rope_options odd = attn_rope_options_default();
        odd.rotary_dim = 3;
        oc.rope = &odd, oc.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_tensor qt = q, rt = ref;
        qt.shape[1] = rt.shape[1] = 1;
        size_t ws = 0;
        check_status(attn_mha_cached_workspace_size(&ws, &rt, &qt, cache, &p, &oc, &err), &err, ATTN_ERR_SHAPE,
                     "rotary dimension is 3", "err_mha_cached_workspace_size_rope_odd_dim");
        check_status(attn_mha_cached(&rt, &qt, cache, &p, &oc, &err), &err, ATTN_ERR_SHAPE, "rotary dimension is 3",
                     "err_mha_cached_rope_odd_dim");
        check(attn_kv_cache_length(cache) == 0, "err_mha_cached_rope_odd_dim_appends_nothing", "length %lld",
              (long long)attn_kv_cache_length(cache));
        oc.rope = NULL, oc.causal = ATTN_CAUSAL_NONE;
    }
    int ok = 1;
    for (int64_t t = 0; t < L; t++) {
        attn_tensor qt = q, rt = ref;
        qt.shape[1] = rt.shape[1] = 1;
        qt.data = (double *)q.data + t * E, rt.data = (double *)ref.data + t * E;
        ok &= attn_mha_cached(&rt, &qt, cache, &p, &oc, &err) == ATTN_OK;
    }
    d = max_diff(&out, &ref);
    check(ok && d <= 1e-14, "mha_cached_token_by_token_equals_causal", "status ok %d, max diff %.3g", ok, d);
    attn_tensor q1 = q, r1 = ref;
    q1.shape[1] = r1.shape[1] = 1;
    check_status(attn_mha_cached(&r1, &q1, cache, &p, &oc, &err), &err, ATTN_ERR_FULL, "filled: ", "err_mha_cached_full");
    /* The causal mode: attn_kv_cache_attend's rule. All L positions at once,
     * bottom-right, are the causal layer; none, the layer without a mask;
     * top-left is refused, as attn_kv_cache_attend refuses it, before
     * anything is appended. */
    attn_mha_options full = o;
    full.causal = ATTN_CAUSAL_NONE;
    attn_tensor plain = make(ATTN_F64, 3, sx);
    check_status(attn_mha(&plain, NULL, &q, &q, &q, &p, &full, &err), &err, ATTN_OK, "", "mha_no_causal_runs");
    const attn_tensor *want[2] = {&out, &plain};
    static const attn_causal MODES[2] = {ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_CAUSAL_NONE};
    static const char *const PREFILL[2] = {"mha_cached_prefill_bottom_right_is_causal", "mha_cached_prefill_none_sees_all"};
    for (int c = 0; c < 2; c++) {
        attn_kv_cache_truncate(cache, 0, &err);
        oc.causal = MODES[c];
        attn_status st = attn_mha_cached(&ref, &q, cache, &p, &oc, &err);
        d = max_diff(&ref, want[c]);
        check(st == ATTN_OK && d <= 1e-14, PREFILL[c], "status %d (%s), max diff %.3g", (int)st, err.message, d);
    }
    attn_error attend_err;
    attn_sdpa_options top = attn_sdpa_options_default();
    top.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_status ast = attn_kv_cache_attend(&hr, NULL, &hq, cache, &top, &attend_err);
    attn_kv_cache_truncate(cache, 0, &err);
    oc.causal = ATTN_CAUSAL_TOP_LEFT;
    check_status(attn_mha_cached(&ref, &q, cache, &p, &oc, &err), &err, ATTN_ERR_OPTION, "bottom-right",
                 "err_mha_cached_top_left");
    check(attn_kv_cache_length(cache) == 0 && ast == ATTN_ERR_OPTION && strcmp(err.message, attend_err.message) == 0,
          "mha_cached_top_left_one_rule_with_attend", "cache length %lld; attend: %d \"%s\", mha_cached: \"%s\"",
          (long long)attn_kv_cache_length(cache), (int)ast, attend_err.message, err.message);
    /* Masks over the cache's keys (what it holds after the append): a prefill
     * with attn_mask (L, L) and key_padding_mask (N, L) is attn_mha with the
     * same masks; a mask of the new positions' width alone, once the cache
     * holds some, is refused before anything is appended. */
    int64_t sam[2] = {L, L}, skp[2] = {N, L};
    attn_tensor am = make(ATTN_BOOL, 2, sam), kp = make(ATTN_F64, 2, skp), masked = make(ATTN_F64, 3, sx);
    for (int64_t i = 0; i < L; i++) ((unsigned char *)am.data)[i * L] = 0; /* key 0 seen by every query */
    attn_mha_options om = o;
    om.causal = ATTN_CAUSAL_BOTTOM_RIGHT, om.attn_mask = &am, om.key_padding_mask = &kp;
    check_status(attn_mha(&masked, NULL, &q, &q, &q, &p, &om, &err), &err, ATTN_OK, "", "mha_masked_runs");
    attn_kv_cache_truncate(cache, 0, &err);
    attn_mha_options ocm = oc;
    ocm.causal = ATTN_CAUSAL_BOTTOM_RIGHT, ocm.attn_mask = &am, ocm.key_padding_mask = &kp;
    attn_status mst = attn_mha_cached(&ref, &q, cache, &p, &ocm, &err);
    d = max_diff(&ref, &masked);
    check(mst == ATTN_OK && d <= 1e-14, "mha_cached_masks_over_the_cache_equal_mha", "status %d (%s), max diff %.3g",
          (int)mst, mst ? err.message : "", d);
    attn_kv_cache_truncate(cache, L - 2, &err);
    attn_tensor q2 = q, r2 = ref;
    q2.shape[1] = r2.shape[1] = 2;
    check_status(attn_mha_cached(&r2, &q2, cache, &p, &ocm, &err), &err, ATTN_ERR_MASK,
                 "attn_mask is bool of shape (3, 3); it must be bool or f64, shaped (L, S) = (2, 3)",
                 "err_mha_cached_mask_of_the_new_positions_only");
    check(attn_kv_cache_length(cache) == L - 2, "err_mha_cached_mask_appends_nothing", "length %lld",
          (long long)attn_kv_cache_length(cache));
    free(am.data), free(kp.data), free(masked.data);
    oc.causal = ATTN_CAUSAL_NONE;
    free(plain.data);
    free(cmem);
    /* The backward pass against finite differences of sum(dout · out), on
     * random projections (here under the sanitizers too). */
    attn_tensor win2 = make(ATTN_F64, 2, sw), wout2 = make(ATTN_F64, 2, so), dout = make(ATTN_F64, 3, sx);
    attn_tensor gq = make(ATTN_F64, 3, sx), gw = make(ATTN_F64, 2, sw), o2 = make(ATTN_F64, 3, sx);
    attn_mha_params p2 = p, grads = attn_mha_params_default();
    p2.in_proj_weight = &win2, p2.out_proj_weight = &wout2, grads.in_proj_weight = &gw;
    check_status(attn_mha_backward(&gq, NULL, NULL, &grads, &dout, &q, &kv, &kv, &p2, &o, &err), &err, ATTN_OK, "",
                 "mha_backward_runs");
    double worst = 0;
    for (int t = 0; t < 6; t++) { /* three query elements, three weights */
        double *x = t < 3 ? (double *)q.data + 7 * t + 1 : (double *)win2.data + 29 * t + 3, keep = *x, f[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            *x = keep + (sgn ? 1e-6 : -1e-6);
            attn_mha(&o2, NULL, &q, &kv, &kv, &p2, &o, &err);
            f[sgn] = 0;
            for (int64_t i = 0; i < N * L * E; i++) f[sgn] += ((double *)dout.data)[i] * ((double *)o2.data)[i];
        }
        *x = keep;
        double fd = (f[1] - f[0]) / 2e-6, an = t < 3 ? ((double *)gq.data)[7 * t + 1] : ((double *)gw.data)[29 * t + 3];
        worst = fabs(fd - an) > worst ? fabs(fd - an) : worst;
    }
    check(worst <= 1e-6, "mha_backward_matches_finite_differences", "worst difference %.3g", worst);
    free(win2.data), free(wout2.data), free(dout.data), free(gq.data), free(gw.data), free(o2.data);
    o.causal = ATTN_CAUSAL_NONE;
    p.num_heads = 3;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_HEADS, "not a multiple of num_heads",
                 "err_mha_heads");
    /* a size out of range is named with its value, not called "not positive" */
    p.num_heads = H, p.embed_dim = (int64_t)1 << 40;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_SHAPE,
                 "embed_dim is 1099511627776; it must be 1 to 16777216", "err_mha_embed_dim_too_large");
    p.embed_dim = E, p.kdim = -2;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_SHAPE, "kdim is -2",
                 "err_mha_kdim_negative");
    p.kdim = 0;
    p.num_heads = H, p.in_proj_weight = NULL;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_NULL, "give in_proj_weight",
                 "err_mha_no_projection");
    p.in_proj_weight = &win;
    /* Both sets of projections: the set not used was ignored, unseen. */
    int64_t sq[2] = {E, E}, sb3 = 3 * E, sbe = E;
    attn_tensor wq = make(ATTN_F64, 2, sq), b3 = make(ATTN_F64, 1, &sb3), bq = make(ATTN_F64, 1, &sbe);
    p.q_proj_weight = &wq;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "in_proj_weight and q_proj_weight were both given", "err_mha_packed_and_separate_weight");
    p.q_proj_weight = NULL, p.v_proj_bias = &bq;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "in_proj_weight and v_proj_bias were both given", "err_mha_packed_weight_and_separate_bias");
    p.in_proj_weight = NULL, p.q_proj_weight = p.k_proj_weight = p.v_proj_weight = &wq, p.in_proj_bias = &b3;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "in_proj_bias and v_proj_bias were both given", "err_mha_packed_and_separate_bias");
    p.v_proj_bias = NULL, p.num_kv_heads = 1, p.k_proj_weight = p.v_proj_weight = NULL;
    int64_t skw[2] = {D, E};
    attn_tensor wk = make(ATTN_F64, 2, skw);
    p.k_proj_weight = p.v_proj_weight = &wk;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "with num_kv_heads < num_heads give q_proj_bias", "err_mha_packed_bias_gqa");
    p.num_kv_heads = 0, p.q_proj_weight = p.k_proj_weight = p.v_proj_weight = NULL, p.in_proj_bias = NULL;
    p.in_proj_weight = &win;
    free(wq.data), free(b3.data), free(bq.data), free(wk.data);
    check_status(attn_mha(&out, &out, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_SHAPE, "weights must be f64",
                 "err_mha_weights_shape");
    double sink_logits[H] = {0.5, -1};
    int64_t sh1 = H;
    attn_tensor sinks;
    attn_tensor_init(&sinks, sink_logits, ATTN_F64, 1, &sh1, NULL, NULL);
    attn_sdpa_options sopt = attn_sdpa_options_default();
    sopt.sinks = &sinks, p.sinks = &sinks, o.attention = &sopt;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION, "sinks are given twice",
                 "err_mha_sinks_twice");
    p.sinks = NULL;
    /* The layer's RoPE is options->rope: the attention's own was dropped unseen. */
    attn_rope_options attn_ro = attn_rope_options_default();
    sopt = attn_sdpa_options_default();
    sopt.rope = &attn_ro;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "options->attention->rope is set; a layer takes RoPE as options->rope", "err_mha_attention_rope");
    /* So are its causal mode, mask and context: a causal mode there left the
     * layer attending to every key, a context's threads never reached it. */
    sopt = attn_sdpa_options_default();
    sopt.causal = ATTN_CAUSAL_TOP_LEFT;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "options->attention->causal is set", "err_mha_attention_causal");
    check_status(attn_mha_backward(NULL, NULL, NULL, NULL, &out, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "options->attention->causal is set", "err_mha_backward_attention_causal");
    sopt = attn_sdpa_options_default();
    sopt.mask = &q;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "options->attention->mask is set", "err_mha_attention_mask");
    attn_context ctx = attn_context_default();
    sopt = attn_sdpa_options_default();
    sopt.context = &ctx;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION,
                 "options->attention->context is set", "err_mha_attention_context");
    o.attention = NULL;
    /* The keys bias_k/bias_v and add_zero_attn append have no position: what
     * places keys by position does not go with them. */
    double bkv[E] = {0};
    int64_t sb[3] = {1, 1, E};
    attn_tensor bk;
    attn_tensor_init(&bk, bkv, ATTN_F64, 3, sb, NULL, NULL);
    double slopes[H] = {0.5, 0.25};
    attn_tensor ts;
    attn_tensor_init(&ts, slopes, ATTN_F64, 1, &sh1, NULL, NULL);
    attn_rope_options ro = attn_rope_options_default();
    for (int c = 0; c < 6; c++) {
        static const char *const NAMES[6] = {"rope_bias_kv", "alibi_bias_kv", "window_bias_kv", "rope_zero_attn",
                                             "alibi_zero_attn", "window_zero_attn"};
        sopt = attn_sdpa_options_default();
        p.bias_k = p.bias_v = c < 3 ? &bk : NULL, o.add_zero_attn = c >= 3;
        o.rope = c % 3 == 0 ? &ro : NULL, o.attention = &sopt, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        sopt.alibi_slopes = c % 3 == 1 ? &ts : NULL, sopt.window = c % 3 == 2 ? 2 : 0;
        char name[64];
        snprintf(name, sizeof name, "err_mha_%s", NAMES[c]);
        check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION, "have none", name);
    }
    p.bias_k = p.bias_v = NULL, o.add_zero_attn = 0, o.rope = NULL, o.attention = NULL;
    /* A bias_k of the wrong width is named by its own shape, not its last dimension's "(7,)". */
    int64_t sb_short[3] = {1, 1, E - 1};
    attn_tensor bk_short;
    attn_tensor_init(&bk_short, bkv, ATTN_F64, 3, sb_short, NULL, NULL);
    p.bias_k = &bk_short, p.bias_v = &bk;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_SHAPE,
                 "bias_k has shape (1, 1, 7); it must be (1, 1, 8)", "err_mha_bias_k_width");
    p.bias_k = p.bias_v = NULL;
    o.causal = (attn_causal)7;
    check_status(attn_mha(&out, NULL, &q, &kv, &kv, &p, &o, &err), &err, ATTN_ERR_OPTION, "not an attn_causal",
                 "err_mha_causal_mode");
    o.causal = ATTN_CAUSAL_NONE;
    free(q.data), free(kv.data), free(out.data), free(win.data), free(wout.data), free(ref.data);
}

/* ---- aliasing: an output owns its memory ---------------------------------- */

/* Tensors for the aliasing checks, each in its own SLOT of one pool, so that
 * an output moved onto another tensor's start stays inside the pool even
 * when it is larger. Floats are small deterministic values, bools true. */
enum { SLOT = 4096, SLOTS = 96 };
typedef struct pool {
    char *mem;
    int used;
} pool;

static attn_tensor pool_tensor(pool *p, attn_dtype dt, int rank, const int64_t *shape) {
    attn_tensor t;
    if (p->used == SLOTS - 1) { /* the last slot stays free, for an output moved onto the one before */
        check(0, "alias_pool_size", "more than %d tensors", SLOTS - 1);
        p->used = 0;
    }
    attn_tensor_init(&t, p->mem + (size_t)p->used++ * SLOT, dt, rank, shape, NULL, NULL);
    for (int64_t i = 0; i < attn_tensor_numel(&t); i++) {
        if (dt == ATTN_BOOL) ((unsigned char *)t.data)[i] = 1;
        else if (dt == ATTN_F64) ((double *)t.data)[i] = 0.5 * sin(0.7 * (double)(i + 3 * p->used));
        else ((float *)t.data)[i] = (float)(0.5 * sin(0.7 * (double)(i + 3 * p->used)));
    }
    return t;
}

/* One call of a public function on t, its outputs first. */
typedef attn_status (*alias_call)(attn_tensor **t, void *ctx, attn_error *err);

/* The call as given succeeds; then each output, in turn made to start where
 * each other tensor starts (another output, or an input), is refused with
 * ATTN_ERR_STRIDE naming the two, one check per pair. */
static void check_alias_pairs(const char *fn, attn_tensor **t, const char *const *names, int n_out, int n,
                              alias_call call, void *ctx) {
    attn_error err;
    char name[128], a[128], b[128];
    snprintf(name, sizeof name, "%s_unaliased_runs", fn);
    check_status(call(t, ctx, &err), &err, ATTN_OK, "", name);
    for (int i = 0; i < n_out; i++)
        for (int j = 0; j < n; j++) {
            if (j == i || !t[j]) continue;
            void *keep = t[i]->data;
            t[i]->data = t[j]->data;
            memset(&err, 0, sizeof err);
            attn_status st = call(t, ctx, &err);
            t[i]->data = keep;
            snprintf(a, sizeof a, "%s and %s overlap", names[i], names[j]);
            snprintf(b, sizeof b, "%s and %s overlap", names[j], names[i]);
            int ok = st == ATTN_ERR_STRIDE && (strstr(err.message, a) || strstr(err.message, b));
            if (ok) status_seen[st] = 1;
            snprintf(name, sizeof name, "alias_%s_%s_on_%s", fn, names[i], names[j]);
            char *to = name; /* "a sequence's mask" as one word of the check's name */
            for (const char *c = name; *c; c++)
                if (*c != '\'') *to++ = *c == ' ' ? '_' : *c;
            *to = 0;
            check(ok, name, "status %d, \"%s\"", (int)st, err.message);
        }
}

/* attn_sdpa, attn_sdpa_reference, the workspace query and attn_scores:
 * out, lse, weights | q, k, v, mask, alibi_slopes, sinks. */
static attn_sdpa_options alias_opts;
static attn_status call_sdpa(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_sdpa(t[0], t[1], t[2], t[3], t[4], t[5], &alias_opts, err);
}
static attn_status call_reference(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_sdpa_reference(t[0], t[1], t[2], t[3], t[4], t[5], &alias_opts, err);
}
static attn_status call_workspace(attn_tensor **t, void *ctx, attn_error *err) {
    size_t bytes;
    (void)ctx;
    return attn_sdpa_workspace_size(&bytes, t[0], t[1], t[2], t[3], t[4], t[5], &alias_opts, err);
}
static attn_status call_scores(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_scores(t[0], t[1], t[2], &alias_opts, err);
}
/* dq, dk, dv, dmask | dout, q, k, v, out, lse, mask, alibi_slopes, sinks. */
static attn_status call_backward(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_sdpa_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], &alias_opts, err);
}
static attn_status call_backward_workspace(attn_tensor **t, void *ctx, attn_error *err) {
    size_t bytes;
    (void)ctx;
    return attn_sdpa_backward_workspace_size(&bytes, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9],
                                             &alias_opts, err);
}
/* A ragged batch of two sequences, each with the one mask, its offsets
 * tensors of int64 in the pool (so that an output can be moved onto them):
 * out, lse | q, k, v, cu_seqlens_q, cu_seqlens_k, the mask, alibi_slopes,
 * sinks (attn_sdpa_varlen); dq, dk, dv | dout, q, k, v, out, lse, the
 * offsets, the mask, alibi_slopes, sinks (the backward and its size query). */
enum { VARLEN_B = 2 };
static attn_status call_varlen(attn_tensor **t, void *ctx, attn_error *err) {
    const attn_tensor *masks[VARLEN_B] = {t[7], t[7]};
    (void)ctx;
    return attn_sdpa_varlen(t[0], t[1], t[2], t[3], t[4], t[5]->data, t[6]->data, VARLEN_B, masks, &alias_opts, err);
}
static attn_status call_varlen_backward(attn_tensor **t, void *ctx, attn_error *err) {
    const attn_tensor *masks[VARLEN_B] = {t[11], t[11]};
    (void)ctx;
    return attn_sdpa_varlen_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9]->data, t[10]->data,
                                     VARLEN_B, masks, &alias_opts, err);
}
static attn_status call_varlen_backward_workspace(attn_tensor **t, void *ctx, attn_error *err) {
    const attn_tensor *masks[VARLEN_B] = {t[11], t[11]};
    size_t bytes;
    (void)ctx;
    return attn_sdpa_varlen_backward_workspace_size(&bytes, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8],
                                                    t[9]->data, t[10]->data, VARLEN_B, masks, &alias_opts, err);
}
/* dsinks | dout, out, lse, sinks. */
static attn_status call_sinks_backward(attn_tensor **t, void *ctx, attn_error *err) {
    attn_sdpa_options o = attn_sdpa_options_default();
    (void)ctx;
    o.sinks = t[4];
    return attn_sdpa_sinks_backward(t[0], t[1], t[2], t[3], &o, err);
}
/* keep | q, k, v, mask. */
static attn_status call_dropout_mask(attn_tensor **t, void *ctx, attn_error *err) {
    attn_sdpa_options o = attn_sdpa_options_default();
    (void)ctx;
    o.mask = t[4], o.dropout_p = 0.25;
    return attn_sdpa_dropout_mask(t[0], t[1], t[2], t[3], &o, err);
}
/* out, lse | outs[0], lses[0], outs[1], lses[1]. */
static attn_status call_merge(attn_tensor **t, void *ctx, attn_error *err) {
    const attn_tensor *outs[2] = {t[2], t[4]}, *lses[2] = {t[3], t[5]};
    (void)ctx;
    return attn_sdpa_merge(t[0], t[1], outs, lses, 2, err);
}
/* out | x, for RoPE both ways; dst | src. */
static attn_status call_rope(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_rope(t[0], t[1], NULL, err);
}
static attn_status call_rope_backward(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_rope_backward(t[0], t[1], NULL, err);
}
static attn_status call_convert(attn_tensor **t, void *ctx, attn_error *err) {
    (void)ctx;
    return attn_tensor_convert(t[0], t[1], err);
}

/* The layer, packed projections with bias_k/bias_v and both masks (float):
 * in holds query, key, value, then the parameters and masks in this order. */
enum { M_Q, M_K, M_V, M_IN_W, M_IN_B, M_OUT_W, M_OUT_B, M_BK, M_BV, M_KPM, M_AM, M_COUNT };
static void mha_setup(attn_mha_params *p, attn_mha_options *o, attn_tensor **in) {
    *p = attn_mha_params_default(), *o = attn_mha_options_default();
    p->embed_dim = in[M_Q]->shape[2], p->num_heads = 2;
    p->in_proj_weight = in[M_IN_W], p->in_proj_bias = in[M_IN_B];
    p->out_proj_weight = in[M_OUT_W], p->out_proj_bias = in[M_OUT_B], p->bias_k = in[M_BK], p->bias_v = in[M_BV];
    o->batch_first = 1, o->key_padding_mask = in[M_KPM], o->attn_mask = in[M_AM];
}
/* out, weights | the layer's inputs. */
static attn_status call_mha(attn_tensor **t, void *ctx, attn_error *err) {
    attn_mha_params p;
    attn_mha_options o;
    attn_tensor **in = t + 2;
    mha_setup(&p, &o, in);
    (void)ctx;
    return attn_mha(t[0], t[1], in[M_Q], in[M_K], in[M_V], &p, &o, err);
}
/* dquery, dkey, dvalue, the parameters' gradients (in_proj_weight,
 * in_proj_bias, out_proj_weight, out_proj_bias, bias_k, bias_v) | dout, the
 * layer's inputs. */
static attn_status call_mha_backward(attn_tensor **t, void *ctx, attn_error *err) {
    attn_mha_params p, g = attn_mha_params_default();
    attn_mha_options o;
    attn_tensor **in = t + 10;
    mha_setup(&p, &o, in);
    g.in_proj_weight = t[3], g.in_proj_bias = t[4], g.out_proj_weight = t[5], g.out_proj_bias = t[6];
    g.bias_k = t[7], g.bias_v = t[8];
    (void)ctx;
    return attn_mha_backward(t[0], t[1], t[2], &g, t[9], in[M_Q], in[M_K], in[M_V], &p, &o, err);
}

/* attn_mha_cached: out | x and the parameters; an empty cache each time. */
static attn_status call_mha_cached(attn_tensor **t, void *ctx, attn_error *err) {
    attn_mha_params p = attn_mha_params_default();
    attn_mha_options o = attn_mha_options_default();
    attn_kv_cache *cache = ctx;
    attn_kv_cache_truncate(cache, 0, NULL); /* one position filled after a call */
    p.embed_dim = t[1]->shape[2], p.num_heads = 2, p.in_proj_weight = t[2], p.in_proj_bias = t[3];
    p.out_proj_weight = t[4], p.out_proj_bias = t[5];
    o.batch_first = 1, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_status st = attn_mha_cached(t[0], t[1], cache, &p, &o, err);
    if (st && attn_kv_cache_length(cache) != 0) return attn_error_set(err, ATTN_ERR_ARGUMENT, "a refused call appended");
    return st;
}

/* attn_tensors_overlap and attn_tensor_overlaps_itself through attn_rope
 * (whose only other failures are shapes, kept valid): random views out and
 * x of one buffer, any strides (negative, zero for x, interleaved), against
 * the bytes they touch. The same view is in place, allowed; any other
 * sharing is refused, as is an out that touches one byte twice, and views
 * that interleave without sharing a byte are accepted. */
/* A layout whose elements never meet but interleave too intricately to
 * show it within overlap.c's bounded search: (16384, 16384) with strides
 * (16384, 16383), where i·16384 + j·16383 repeats only for |i - i'| =
 * 16383 and |j - j'| = 16384, out of range. It is refused as undecided,
 * and says so, rather than as two elements in one place. */
static void test_overlap_undecided(void) {
    int64_t shape[2] = {16384, 16384}, strides[2] = {16384, 16383}, folded[2] = {16383, 16383};
    float cell;
    attn_tensor t;
    attn_error err;
    attn_tensor_init(&t, &cell, ATTN_F32, 2, shape, strides, NULL);
    int undecided = attn_tensor_overlaps_itself(&t);
    check_status(attn_check_writable(&t, "out", &err), &err, ATTN_ERR_STRIDE,
                 "out has strides (16384, 16383) that interleave its elements too intricately",
                 "overlap_undecided_refused_as_undecided");
    attn_tensor_init(&t, &cell, ATTN_F32, 2, shape, folded, NULL);
    int meet = attn_tensor_overlaps_itself(&t);
    check(undecided == -1 && meet == 1, "overlap_undecided_three_answers", "undecided %d, folded %d", undecided, meet);
}

/* The one list of the options' tensors every call checks: all five fields,
 * named as attn.h names them, after what the list holds; a list too short
 * for them gives -1, which both checks refuse rather than check short. */
static void test_named_options(void) {
    float cell[5] = {0};
    int64_t one = 1;
    attn_tensor t[5];
    for (int i = 0; i < 5; i++) attn_tensor_init(&t[i], &cell[i], ATTN_F32, 1, &one, NULL, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &t[0], o.alibi_slopes = &t[1], o.sinks = &t[2], o.k_descale = &t[3], o.v_descale = &t[4];
    attn_named list[2 + ATTN_OPTION_TENSORS] = {{NULL, "x"}, {NULL, "y"}};
    static const char *const NAMES[5] = {"mask", "alibi_slopes", "sinks", "k_descale", "v_descale"};
    int n = attn_named_options(list, 2, ATTN_NAMED_CAP(list), &o), in_order = n == 2 + ATTN_OPTION_TENSORS;
    for (int i = 0; i < 5 && in_order; i++) in_order = list[2 + i].t == &t[i] && !strcmp(list[2 + i].name, NAMES[i]);
    check(ATTN_OPTION_TENSORS == 5 && in_order, "named_options_all_five_after_the_list", "count %d", n);
    int short_n = attn_named_options(list, 3, ATTN_NAMED_CAP(list), &o);
    attn_error err;
    const attn_named out[1] = {{&t[0], "out"}};
    attn_status a = attn_check_no_overlap(out, 1, list, short_n, &err);
    attn_status b = attn_check_workspace(cell, sizeof cell, NULL, 0, list, short_n, &err);
    check(short_n == -1 && a == ATTN_ERR_ARGUMENT && b == ATTN_ERR_ARGUMENT && strstr(err.message, "too short"),
          "named_options_too_short_refused_not_skipped", "count %d, statuses %d %d: %s", short_n, (int)a, (int)b,
          err.message);
}

static void test_overlap_exact(void) {
    enum { CELLS = 96 };
    double *buf = calloc(CELLS, sizeof(double));
    int wrong = 0, refused = 0, interleaved = 0, folded = 0, cases = 2000;
    attn_error err;
    for (int c = 0; c < cases; c++) {
        int rank = 1 + (int)(rng_next() % 3);
        int64_t shape[3], st[2][3], lo[2] = {0, 0}, hi[2] = {0, 0};
        for (int d = 0; d < rank; d++) shape[d] = d == rank - 1 ? 2 * (int64_t)(1 + rng_next() % 2) : 1 + (int64_t)(rng_next() % 4);
        attn_tensor v[2];
        for (int w = 0; w < 2; w++) {
            for (int d = 0; d < rank; d++) {
                st[w][d] = (int64_t)(rng_next() % 15) - 7;
                if (w == 0 && st[w][d] == 0 && shape[d] > 1) st[w][d] = 1; /* an output has no stride 0 */
                int64_t span = st[w][d] * (shape[d] - 1);
                lo[w] += span < 0 ? span : 0, hi[w] += span > 0 ? span : 0;
            }
            int64_t room = CELLS - (hi[w] - lo[w]);
            int64_t start = -lo[w] + (room > 0 ? (int64_t)(rng_next() % (uint64_t)room) : 0);
            if (room <= 0) start = -lo[w];
            attn_tensor_init(&v[w], buf + start, ATTN_F64, rank, shape, st[w], NULL);
        }
        if (rng_next() % 8 == 0) v[1] = v[0]; /* in place */
        if (hi[0] - lo[0] >= CELLS || hi[1] - lo[1] >= CELLS) continue;
        /* The bytes each touches, by brute force. */
        unsigned char touched[CELLS] = {0};
        int shared = 0, twice = 0; /* twice: out touches a byte twice */
        for (int w = 0; w < 2; w++) {
            int64_t n = attn_tensor_numel(&v[w]), idx[3] = {0, 0, 0};
            for (int64_t i = 0; i < n; i++) {
                int64_t off = (int64_t)((double *)v[w].data - buf);
                for (int d = 0; d < rank; d++) off += idx[d] * v[w].strides[d];
                if (w == 0) twice |= touched[off], touched[off] = 1;
                else shared |= touched[off];
                for (int d = rank - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
            }
        }
        int same = v[0].data == v[1].data; /* one view: a dimension of size 1 has no stride to compare */
        for (int d = 0; d < rank; d++) same &= shape[d] == 1 || v[0].strides[d] == v[1].strides[d];
        attn_status s = attn_rope(&v[0], &v[1], NULL, &err);
        int want_refused = (shared && !same) || twice;
        folded += twice;
        if ((s == ATTN_ERR_STRIDE) != want_refused || (s != ATTN_OK && s != ATTN_ERR_STRIDE)) wrong++;
        refused += s == ATTN_ERR_STRIDE;
        /* interleaved: byte ranges that meet, no byte shared */
        int64_t a0 = (int64_t)((double *)v[0].data - buf), b0 = (int64_t)((double *)v[1].data - buf);
        interleaved += !shared && a0 + lo[0] <= b0 + hi[1] && b0 + lo[1] <= a0 + hi[0];
    }
    check(wrong == 0 && refused > 50 && interleaved > 50 && folded > 50, "alias_overlap_exact_random_views",
          "%d of %d decided wrongly (%d refused, %d interleaved without sharing, %d outs folded onto themselves)",
          wrong, cases, refused, interleaved, folded);
    free(buf);
}

/* Self-attention through attn_mha_backward: query, key and value one
 * tensor, and one gradient tensor for the three receives their sum, as
 * autograd sums x.grad; two of one tensor and the third apart likewise.
 * Gradients that share memory without being one view are refused. Fresh
 * memory, random parameters: every gradient is far from 0. */
static void test_mha_self_attention_gradients(void) {
    enum { N = 2, L = 4, E = 8 };
    int64_t sx[3] = {N, L, E}, sin[2] = {3 * E, E}, sinb = 3 * E, swo[2] = {E, E}, sb[3] = {1, 1, E};
    attn_tensor x = make(ATTN_F64, 3, sx), dout = make(ATTN_F64, 3, sx), inw = make(ATTN_F64, 2, sin);
    attn_tensor inb = make(ATTN_F64, 1, &sinb), ow = make(ATTN_F64, 2, swo), bk = make(ATTN_F64, 3, sb);
    attn_tensor bv = make(ATTN_F64, 3, sb);
    attn_tensor d[3] = {make(ATTN_F64, 3, sx), make(ATTN_F64, 3, sx), make(ATTN_F64, 3, sx)};
    attn_tensor one = make(ATTN_F64, 3, sx), apart = make(ATTN_F64, 3, sx), sum = make(ATTN_F64, 3, sx);
    attn_mha_params p = attn_mha_params_default();
    attn_mha_options o = attn_mha_options_default();
    p.embed_dim = E, p.num_heads = 2, p.in_proj_weight = &inw, p.in_proj_bias = &inb, p.out_proj_weight = &ow;
    p.bias_k = &bk, p.bias_v = &bv;
    o.batch_first = 1, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_error err;
    attn_status st1 = attn_mha_backward(&d[0], &d[1], &d[2], NULL, &dout, &x, &x, &x, &p, &o, &err);
    double *g[3] = {d[0].data, d[1].data, d[2].data}, *gs = sum.data, least = INFINITY;
    for (int t = 0; t < 3; t++) {
        double big = 0;
        for (int64_t i = 0; i < N * L * E; i++) big = fabs(g[t][i]) > big ? fabs(g[t][i]) : big;
        least = big < least ? big : least;
    }
    for (int64_t i = 0; i < N * L * E; i++) gs[i] = g[0][i] + g[1][i] + g[2][i];
    attn_status st2 = attn_mha_backward(&one, &one, &one, NULL, &dout, &x, &x, &x, &p, &o, &err);
    double diff = max_diff(&one, &sum);
    check(st1 == ATTN_OK && st2 == ATTN_OK && least > 0.1 && diff <= 1e-14,
          "mha_backward_self_attention_one_gradient_sums_three",
          "status %d, %d (%s), smallest max |gradient| %.3g, |dx - (dq + dk + dv)| = %.3g", (int)st1, (int)st2,
          err.message, least, diff);
    for (int64_t i = 0; i < N * L * E; i++) gs[i] = g[0][i] + g[2][i];
    st2 = attn_mha_backward(&one, &apart, &one, NULL, &dout, &x, &x, &x, &p, &o, &err);
    diff = max_diff(&one, &sum);
    double diff_k = max_diff(&apart, &d[1]);
    check(st2 == ATTN_OK && diff <= 1e-14 && diff_k == 0, "mha_backward_two_of_one_gradient_sum_two",
          "status %d (%s), |dx - (dq + dv)| = %.3g, |dk apart - dk| = %.3g", (int)st2, err.message, diff, diff_k);
    attn_tensor shifted = one;
    shifted.data = (double *)one.data + 1;
    check_status(attn_mha_backward(&one, &shifted, NULL, NULL, &dout, &x, &x, &x, &p, &o, &err), &err, ATTN_ERR_STRIDE,
                 "dkey and dquery overlap", "alias_mha_backward_gradients_overlapping_not_one_view");
    attn_tensor *all[12] = {&x, &dout, &inw, &inb, &ow, &bk, &bv, &d[0], &d[1], &d[2], &one, &apart};
    for (int i = 0; i < 12; i++) free(all[i]->data);
    free(sum.data);
}

/* A plan refuses a layer whose tensors are laid out otherwise (the plan's
 * own suite is tests/test_plan.c). */
static void test_plan_refuses_other_layout(void) {
    int64_t sq[3] = {2, 3, 8}, sk[3] = {2, 5, 8}, sq2[3] = {2, 4, 8};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor out = make(ATTN_F32, 3, sq), longer = make(ATTN_F32, 3, sq2);
    attn_error err;
    size_t bytes = 0, ws = 0;
    attn_sdpa_plan_bytes(&bytes, 0, &err);
    void *memory = malloc(bytes), *work = NULL;
    attn_sdpa_plan *plan = NULL;
    attn_status st = attn_sdpa_plan_init(&plan, memory, bytes, &ws, &out, NULL, &q, &k, &v, NULL, &err);
    check_status(st, &err, ATTN_OK, "", "plan_init");
    work = malloc(ws);
    if (!st) st = attn_sdpa_run(plan, &out, NULL, &longer, &k, &v, work, ws, &err);
    check_status(st, &err, ATTN_ERR_PLAN, "q is f32 (2, 4, 8)", "plan_run_refuses_other_shape");
    free(memory), free(work), free(q.data), free(k.data), free(v.data), free(out.data), free(longer.data);
}

/* The teaching API's raw arrays are outputs too: each call refuses an
 * output that overlaps another output or an input (here: one element of
 * overlap, the smallest), naming both; apart they run. And the public
 * attn_check_disjoint, which libattn-mpi uses, on the same cases. */
static void test_aliasing_teach(void) {
    enum { DMK = ATTN_TOY_D_MODEL * ATTN_TOY_D_K };
    double *buf = calloc(4096, sizeof(double));
    attn_error err;
    attn_status st = attn_toy_weights(buf, buf + DMK, buf + 2 * DMK, ATTN_TOY_WIRED, &err);
    check(st == ATTN_OK, "alias_toy_weights_apart_runs", "%s", err.message);
    st = attn_toy_weights(buf, buf + DMK - 1, buf + 2 * DMK, ATTN_TOY_WIRED, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "w_k and w_q overlap"), "alias_toy_weights_w_k_on_w_q",
          "status %d: %s", st, st ? err.message : "");
    attn_toy_token tokens[3];
    int nt = 0;
    attn_toy_tokenize(tokens, 3, &nt, "the cat sat", NULL);
    st = attn_toy_embed((double *)(void *)tokens, tokens, nt, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "x and tokens overlap"), "alias_toy_embed_x_on_tokens",
          "status %d: %s", st, st ? err.message : "");
    double scores[6] = {1, 2, 3, 4, 5, 6}, q[4] = {1, 0, 0, 1}, k[6] = {1, 1, 0, 1, 1, 0};
    double w1[4] = {1, 0, 0, 1}, w2[4] = {1, 0, 0, 1}, v[2] = {1, -1};
    st = attn_additive_scores(scores, q, 2, k, 3, 2, w1, w2, v, 2, &err);
    check(st == ATTN_OK, "alias_additive_scores_apart_runs", "%s", err.message);
    st = attn_additive_scores(k + 1, q, 2, k, 3, 2, w1, w2, v, 2, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "scores and k overlap"), "alias_additive_scores_on_k",
          "status %d: %s", st, st ? err.message : "");
    double w[6];
    st = attn_softmax_rows(w, scores, 2, 3, 0, &err);
    check(st == ATTN_OK, "alias_softmax_rows_apart_runs", "%s", err.message);
    st = attn_softmax_rows(scores, scores, 2, 3, 0, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "weights and scores overlap"), "alias_softmax_rows_in_place",
          "status %d: %s", st, st ? err.message : "");
    attn_train_options o = attn_train_options_default();
    o.steps = 2, o.d_k = 4;
    double loss[2], *wq = buf, *wk = buf + 1024, *wv = buf + 2048;
    st = attn_train_head(wq, wk, wv, loss, loss + 1, &o, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "grad_wq and loss overlap"), "alias_train_head_grad_on_loss",
          "status %d: %s", st, st ? err.message : "");
    st = attn_train_head(wq, wq + 1, wv, NULL, NULL, &o, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "w_k and w_q overlap"), "alias_train_head_w_k_on_w_q",
          "status %d: %s", st, st ? err.message : "");
    /* The tokenizer and the JSON writers: their outputs against their
     * inputs (the sentence, the row described). */
    char sentence[64] = "the cat sat on the mat";
    int nt2;
    st = attn_toy_tokenize((attn_toy_token *)(void *)sentence, 2, &nt2, sentence, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "tokens and sentence overlap"), "alias_toy_tokenize_on_sentence",
          "status %d: %s", st, st ? err.message : "");
    size_t len;
    st = attn_toy_explain_json(sentence + 10, 40, &len, sentence, NULL, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "buf and sentence overlap"), "alias_toy_explain_json_on_sentence",
          "status %d: %s", st, st ? err.message : "");
    /* A NULL buf with a size is this call's error, named as its argument
     * (it was "an argument of attn_explain_json is NULL", after the work). */
    st = attn_toy_explain_json(NULL, 40, &len, sentence, NULL, &err);
    check(st == ATTN_ERR_NULL && !strcmp(err.message, "buf (size > 0) is NULL"), "toy_explain_json_null_buf_named",
          "status %d: %s", st, st ? err.message : "");
    st = attn_toy_explain_json(NULL, 0, &len, sentence, NULL, &err);
    check(st == ATTN_OK && len > 100, "toy_explain_json_null_buf_size_0_measures", "status %d: %s", st,
          st ? err.message : "");
    st = attn_toy_explain_json(NULL, 0, NULL, sentence, NULL, &err);
    check(st == ATTN_ERR_NULL && !strcmp(err.message, "length is NULL"), "toy_explain_json_null_length_named",
          "status %d: %s", st, st ? err.message : "");
    attn_scaling_row row;
    memset(&row, 0, sizeof row);
    st = attn_scaling_json((char *)&row, sizeof row, &len, &row, 0, &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "buf and row overlap"), "alias_scaling_json_on_row",
          "status %d: %s", st, st ? err.message : "");
    /* attn_check_disjoint: interleaved halves are apart, a shared element
     * is not, NULL shares nothing. */
    attn_tensor a, b;
    int64_t shape[1] = {4}, stride[1] = {2};
    attn_tensor_init(&a, buf, ATTN_F64, 1, shape, stride, NULL);
    attn_tensor_init(&b, buf + 1, ATTN_F64, 1, shape, stride, NULL);
    check(attn_check_disjoint(&a, "a", &b, "b", &err) == ATTN_OK, "check_disjoint_interleaved_apart", "%s", err.message);
    b.data = buf + 6;
    st = attn_check_disjoint(&a, "a", &b, "b", &err);
    check(st == ATTN_ERR_STRIDE && strstr(err.message, "a and b overlap"), "check_disjoint_shared_element",
          "status %d", st);
    check(attn_check_disjoint(&a, "a", NULL, "b", &err) == ATTN_OK, "check_disjoint_null", "%s", err.message);
    free(buf);
}

static void test_aliasing(void) {
    pool p = {calloc(SLOTS, SLOT), 0};
    attn_error err;
    test_overlap_exact();
    test_overlap_undecided();
    test_named_options();
    test_aliasing_teach();

    /* attn_sdpa and the functions that plan as it does. */
    int64_t sq[4] = {2, 2, 3, 4}, sk[4] = {2, 2, 5, 4}, sv[4] = {2, 2, 5, 3}, so[4] = {2, 2, 3, 3};
    int64_t sl[3] = {2, 2, 3}, sw[4] = {2, 2, 3, 5}, sm[2] = {3, 5}, sh = 2;
    attn_tensor q = pool_tensor(&p, ATTN_F64, 4, sq), k = pool_tensor(&p, ATTN_F64, 4, sk);
    attn_tensor v = pool_tensor(&p, ATTN_F64, 4, sv), out = pool_tensor(&p, ATTN_F64, 4, so);
    attn_tensor lse = pool_tensor(&p, ATTN_F64, 3, sl), w = pool_tensor(&p, ATTN_F64, 4, sw);
    attn_tensor mask = pool_tensor(&p, ATTN_F64, 2, sm), alibi = pool_tensor(&p, ATTN_F64, 1, &sh);
    attn_tensor sinks = pool_tensor(&p, ATTN_F64, 1, &sh), scores = pool_tensor(&p, ATTN_F64, 4, sw);
    alias_opts = attn_sdpa_options_default();
    alias_opts.mask = &mask, alias_opts.alibi_slopes = &alibi, alias_opts.sinks = &sinks;
    {
        attn_tensor *t[9] = {&out, &lse, &w, &q, &k, &v, &mask, &alibi, &sinks};
        static const char *const N[9] = {"out", "lse", "weights", "q", "k", "v", "mask", "alibi_slopes", "sinks"};
        check_alias_pairs("sdpa", t, N, 3, 9, call_sdpa, NULL);
        check_alias_pairs("sdpa_reference", t, N, 3, 9, call_reference, NULL);
        check_alias_pairs("sdpa_workspace_size", t, N, 3, 9, call_workspace, NULL);
        attn_tensor *ts[6] = {&scores, &q, &k, &mask, &alibi, &sinks};
        static const char *const NS[6] = {"scores", "q", "k", "mask", "alibi_slopes", "sinks"};
        check_alias_pairs("scores", ts, NS, 1, 6, call_scores, NULL);
    }
    /* A 16-bit q over fp8 keys and values with per-head scales: the call
     * runs on f32 copies of q and out, so the caller's out is checked by
     * the 16-bit path itself, against every tensor of the options, the
     * scales included (out over k_descale or v_descale was once taken). */
    {
        attn_tensor q16 = pool_tensor(&p, ATTN_F16, 4, sq), k8 = pool_tensor(&p, ATTN_E4M3, 4, sk);
        attn_tensor v8 = pool_tensor(&p, ATTN_E4M3, 4, sv), o16 = pool_tensor(&p, ATTN_F16, 4, so);
        attn_tensor l32 = pool_tensor(&p, ATTN_F32, 3, sl);
        attn_tensor kd = pool_tensor(&p, ATTN_F32, 1, &sh), vd = pool_tensor(&p, ATTN_F32, 1, &sh);
        for (int i = 0; i < 2; i++) ((float *)kd.data)[i] = 0.5f, ((float *)vd.data)[i] = 2.0f; /* scales > 0 */
        const attn_sdpa_options saved = alias_opts;
        alias_opts = attn_sdpa_options_default();
        alias_opts.k_descale = &kd, alias_opts.v_descale = &vd;
        attn_tensor *t[8] = {&o16, &l32, NULL, &q16, &k8, &v8, &kd, &vd};
        static const char *const N[8] = {"out", "lse", "weights", "q", "k", "v", "k_descale", "v_descale"};
        check_alias_pairs("sdpa_f16_fp8_scales", t, N, 2, 8, call_sdpa, NULL);
        alias_opts = saved;
    }
    /* attn_sdpa_backward, from the forward's out and lse (no weights). */
    attn_sdpa(&out, &lse, NULL, &q, &k, &v, &alias_opts, &err);
    {
        attn_tensor dq = pool_tensor(&p, ATTN_F64, 4, sq), dk = pool_tensor(&p, ATTN_F64, 4, sk);
        attn_tensor dv = pool_tensor(&p, ATTN_F64, 4, sv), dm = pool_tensor(&p, ATTN_F64, 2, sm);
        attn_tensor dout = pool_tensor(&p, ATTN_F64, 4, so);
        attn_tensor *t[13] = {&dq, &dk, &dv, &dm, &dout, &q, &k, &v, &out, &lse, &mask, &alibi, &sinks};
        static const char *const N[13] = {"dq", "dk", "dv", "dmask", "dout", "q", "k", "v", "out", "lse", "mask",
                                          "alibi_slopes", "sinks"};
        check_alias_pairs("sdpa_backward", t, N, 4, 13, call_backward, NULL);
        check_alias_pairs("sdpa_backward_workspace_size", t, N, 4, 13, call_backward_workspace, NULL);
        attn_tensor ds = pool_tensor(&p, ATTN_F64, 1, &sh);
        attn_tensor *tsk[5] = {&ds, &dout, &out, &lse, &sinks};
        static const char *const NSK[5] = {"dsinks", "dout", "out", "lse", "sinks"};
        check_alias_pairs("sdpa_sinks_backward", tsk, NSK, 1, 5, call_sinks_backward, NULL);
        attn_tensor keep = pool_tensor(&p, ATTN_BOOL, 4, sw);
        attn_tensor *tk[5] = {&keep, &q, &k, &v, &mask};
        static const char *const NK[5] = {"keep", "q", "k", "v", "mask"};
        check_alias_pairs("sdpa_dropout_mask", tk, NK, 1, 5, call_dropout_mask, NULL);
    }
    /* attn_sdpa_varlen, its backward and the backward's size query: two
     * sequences of 3 queries and 5 keys packed (rows, heads, size), with the
     * mask, ALiBi and sinks above; besides the tensors, the offsets, which
     * the calls read again after writing (an output over them is refused). */
    {
        int64_t pq[3] = {VARLEN_B * 3, 2, 4}, pk[3] = {VARLEN_B * 5, 2, 4}, pv[3] = {VARLEN_B * 5, 2, 3};
        int64_t po[3] = {VARLEN_B * 3, 2, 3}, pl[2] = {VARLEN_B * 3, 2}, ncu = VARLEN_B + 1;
        attn_tensor vq = pool_tensor(&p, ATTN_F64, 3, pq), vk = pool_tensor(&p, ATTN_F64, 3, pk);
        attn_tensor vv = pool_tensor(&p, ATTN_F64, 3, pv), vo = pool_tensor(&p, ATTN_F64, 3, po);
        attn_tensor vl = pool_tensor(&p, ATTN_F64, 2, pl);
        attn_tensor cq = pool_tensor(&p, ATTN_F64, 1, &ncu), ck = pool_tensor(&p, ATTN_F64, 1, &ncu); /* int64 within */
        for (int64_t b = 0; b <= VARLEN_B; b++) ((int64_t *)cq.data)[b] = 3 * b, ((int64_t *)ck.data)[b] = 5 * b;
        const attn_sdpa_options saved = alias_opts;
        alias_opts.mask = NULL; /* a ragged batch's masks are per sequence */
        attn_tensor *t[10] = {&vo, &vl, &vq, &vk, &vv, &cq, &ck, &mask, &alibi, &sinks};
        static const char *const N[10] = {"out", "lse", "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k",
                                          "a sequence's mask", "alibi_slopes", "sinks"};
        check_alias_pairs("sdpa_varlen", t, N, 2, 10, call_varlen, NULL);
        attn_tensor vdq = pool_tensor(&p, ATTN_F64, 3, pq), vdk = pool_tensor(&p, ATTN_F64, 3, pk);
        attn_tensor vdv = pool_tensor(&p, ATTN_F64, 3, pv), vdo = pool_tensor(&p, ATTN_F64, 3, po);
        attn_tensor *tb[14] = {&vdq, &vdk, &vdv, &vdo, &vq, &vk, &vv, &vo, &vl, &cq, &ck, &mask, &alibi, &sinks};
        static const char *const NB[14] = {"dq", "dk", "dv", "dout", "q", "k", "v", "out", "lse", "cu_seqlens_q",
                                           "cu_seqlens_k", "a sequence's mask", "alibi_slopes", "sinks"};
        check_alias_pairs("sdpa_varlen_backward", tb, NB, 3, 14, call_varlen_backward, NULL);
        check_alias_pairs("sdpa_varlen_backward_workspace_size", tb, NB, 3, 14, call_varlen_backward_workspace, NULL);
        alias_opts = saved;
    }
    /* attn_sdpa_merge: parts with padded rows, so that no output is one of
     * their very views; then in place, which is allowed. */
    {
        int64_t pad_o[4] = {2 * 3 * 4, 3 * 4, 4, 1}, pad_l[3] = {2 * 4, 4, 1};
        attn_tensor parts[4];
        for (int i = 0; i < 4; i++) {
            parts[i] = pool_tensor(&p, ATTN_F64, i % 2 ? 3 : 4, i % 2 ? sl : so);
            attn_tensor_init(&parts[i], parts[i].data, ATTN_F64, i % 2 ? 3 : 4, i % 2 ? sl : so, i % 2 ? pad_l : pad_o, NULL);
        }
        attn_tensor *t[6] = {&out, &lse, &parts[0], &parts[1], &parts[2], &parts[3]};
        static const char *const N[6] = {"out", "lse", "outs[0]", "lses[0]", "outs[1]", "lses[1]"};
        check_alias_pairs("sdpa_merge", t, N, 2, 6, call_merge, NULL);
        attn_tensor *in_place[6] = {&parts[2], &parts[1], &parts[0], &parts[1], &parts[2], &parts[3]};
        check_status(call_merge(in_place, NULL, &err), &err, ATTN_OK, "", "alias_sdpa_merge_in_place_allowed");
    }
    /* attn_rope both ways (x with other strides than out), and attn_tensor_convert. */
    {
        int64_t sr[2] = {3, 4}, tr[2] = {1, 3};
        attn_tensor ro = pool_tensor(&p, ATTN_F64, 2, sr), rx = pool_tensor(&p, ATTN_F64, 2, sr);
        attn_tensor_init(&rx, rx.data, ATTN_F64, 2, sr, tr, NULL);
        attn_tensor *t[2] = {&ro, &rx};
        static const char *const N[2] = {"out", "x"};
        check_alias_pairs("rope", t, N, 1, 2, call_rope, NULL);
        check_alias_pairs("rope_backward", t, N, 1, 2, call_rope_backward, NULL);
        attn_tensor *same[2] = {&ro, &ro};
        check_status(call_rope(same, NULL, &err), &err, ATTN_OK, "", "alias_rope_in_place_allowed");
        attn_tensor c32 = pool_tensor(&p, ATTN_F32, 2, sr), c64 = pool_tensor(&p, ATTN_F64, 2, sr);
        attn_tensor *tc[2] = {&c32, &c64};
        static const char *const NC[2] = {"dst", "src"};
        check_alias_pairs("tensor_convert", tc, NC, 1, 2, call_convert, NULL);
        attn_tensor *same_c[2] = {&c64, &c64};
        check_status(call_convert(same_c, NULL, &err), &err, ATTN_OK, "", "alias_tensor_convert_in_place_allowed");
    }
    /* The layer: cross-attention (S != L), with bias_k/bias_v and both
     * masks; dvalue laid out (S, N, E), so that no gradient is made the
     * very view of another (that is self-attention, below). */
    enum { E = 4, L = 3, S = 5 };
    int64_t sx[3] = {2, L, E}, skx[3] = {2, S, E}, sin[2] = {3 * E, E}, sinb = 3 * E, swo[2] = {E, E}, sbo = E;
    int64_t sb[3] = {1, 1, E}, skpm[2] = {2, S}, sa[2] = {L, S}, swm[3] = {2, L, S + 1};
    attn_tensor x = pool_tensor(&p, ATTN_F64, 3, sx), kx = pool_tensor(&p, ATTN_F64, 3, skx);
    attn_tensor vx = pool_tensor(&p, ATTN_F64, 3, skx), inw = pool_tensor(&p, ATTN_F64, 2, sin);
    attn_tensor inb = pool_tensor(&p, ATTN_F64, 1, &sinb), ow = pool_tensor(&p, ATTN_F64, 2, swo);
    attn_tensor ob = pool_tensor(&p, ATTN_F64, 1, &sbo), bk = pool_tensor(&p, ATTN_F64, 3, sb);
    attn_tensor bv = pool_tensor(&p, ATTN_F64, 3, sb), kpm = pool_tensor(&p, ATTN_F64, 2, skpm);
    attn_tensor am = pool_tensor(&p, ATTN_F64, 2, sa);
    attn_tensor *in[M_COUNT] = {&x, &kx, &vx, &inw, &inb, &ow, &ob, &bk, &bv, &kpm, &am};
    static const char *const IN[M_COUNT] = {"query", "key", "value", "in_proj_weight", "in_proj_bias",
                                            "out_proj_weight", "out_proj_bias", "bias_k", "bias_v",
                                            "key_padding_mask", "attn_mask"};
    {
        attn_tensor mo = pool_tensor(&p, ATTN_F64, 3, sx), mw = pool_tensor(&p, ATTN_F64, 3, swm);
        attn_tensor *t[2 + M_COUNT] = {&mo, &mw};
        const char *names[2 + M_COUNT] = {"out", "weights"};
        memcpy(t + 2, in, sizeof in), memcpy(names + 2, IN, sizeof IN);
        check_alias_pairs("mha", t, names, 2, 2 + M_COUNT, call_mha, NULL);
    }
    {
        int64_t sbs[3] = {E, 2 * E, 1};
        attn_tensor dq = pool_tensor(&p, ATTN_F64, 3, sx), dk = pool_tensor(&p, ATTN_F64, 3, skx);
        attn_tensor dv = pool_tensor(&p, ATTN_F64, 3, skx);
        attn_tensor_init(&dv, dv.data, ATTN_F64, 3, skx, sbs, NULL);
        attn_tensor gw = pool_tensor(&p, ATTN_F64, 2, sin), gb = pool_tensor(&p, ATTN_F64, 1, &sinb);
        attn_tensor gow = pool_tensor(&p, ATTN_F64, 2, swo), gob = pool_tensor(&p, ATTN_F64, 1, &sbo);
        attn_tensor gbk = pool_tensor(&p, ATTN_F64, 3, sb), gbv = pool_tensor(&p, ATTN_F64, 3, sb);
        attn_tensor dout = pool_tensor(&p, ATTN_F64, 3, sx);
        attn_tensor *t[10 + M_COUNT] = {&dq, &dk, &dv, &gw, &gb, &gow, &gob, &gbk, &gbv, &dout};
        const char *names[10 + M_COUNT] = {"dquery", "dkey", "dvalue", "grads->in_proj_weight", "grads->in_proj_bias",
                                           "grads->out_proj_weight", "grads->out_proj_bias", "grads->bias_k",
                                           "grads->bias_v", "dout"};
        memcpy(t + 10, in, sizeof in), memcpy(names + 10, IN, sizeof IN);
        check_alias_pairs("mha_backward", t, names, 9, 10 + M_COUNT, call_mha_backward, NULL);

    }
    /* attn_mha_cached: out | x and the parameters; then the cache's memory,
     * which it writes, against out and x. */
    {
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.batch = 2, cd.heads = 2, cd.capacity = 4, cd.key_dim = cd.value_dim = E / 2, cd.dtype = ATTN_F64;
        size_t bytes = 0;
        attn_kv_cache_bytes(&bytes, &cd, &err);
        void *mem = malloc(bytes);
        attn_kv_cache *cache = NULL;
        attn_kv_cache_init(&cache, mem, bytes, &cd, &err);
        int64_t s1[3] = {2, 1, E};
        attn_tensor co = pool_tensor(&p, ATTN_F64, 3, s1), cx = pool_tensor(&p, ATTN_F64, 3, s1);
        attn_tensor *t[6] = {&co, &cx, &inw, &inb, &ow, &ob};
        static const char *const N[6] = {"out", "query", "in_proj_weight", "in_proj_bias", "out_proj_weight",
                                         "out_proj_bias"};
        check_alias_pairs("mha_cached", t, N, 1, 6, call_mha_cached, cache);
        attn_tensor ck, cv;
        attn_kv_cache_view(&ck, &cv, cache, 4, &err); /* one position filled, by the last call */
        attn_tensor on_keys = co, x_on_values = cx;
        on_keys.data = ck.data, x_on_values.data = cv.data;
        attn_tensor *t1[6] = {&on_keys, &cx, &inw, &inb, &ow, &ob}, *t2[6] = {&co, &x_on_values, &inw, &inb, &ow, &ob};
        check_status(call_mha_cached(t1, cache, &err), &err, ATTN_ERR_STRIDE, "the cache's keys and out overlap",
                     "alias_mha_cached_out_on_the_cache");
        check_status(call_mha_cached(t2, cache, &err), &err, ATTN_ERR_STRIDE, "the cache's values and query overlap",
                     "alias_mha_cached_x_on_the_cache");
        free(mem);
    }
    /* attn_kv_cache_append: k and v against the positions it writes, and
     * attn_kv_cache_attend's out against the cache's keys. Appending the
     * cache's own first positions again is allowed: with two heads they
     * interleave with the new positions, sharing no byte. */
    {
        attn_kv_cache_desc cd = attn_kv_cache_desc_default();
        cd.heads = 2, cd.capacity = 6, cd.key_dim = cd.value_dim = 2, cd.dtype = ATTN_F64;
        size_t bytes = 0;
        attn_kv_cache_bytes(&bytes, &cd, &err);
        void *mem = malloc(bytes);
        attn_kv_cache *cache = NULL;
        attn_kv_cache_init(&cache, mem, bytes, &cd, &err);
        int64_t s2[4] = {1, 2, 2, 2};
        attn_tensor kn = pool_tensor(&p, ATTN_F64, 4, s2), vn = pool_tensor(&p, ATTN_F64, 4, s2);
        check_status(attn_kv_cache_append(cache, &kn, &vn, &err), &err, ATTN_OK, "", "alias_kv_cache_append_runs");
        attn_tensor ck, cv;
        attn_kv_cache_view(&ck, &cv, cache, 4, &err);
        check_status(attn_kv_cache_append(cache, &ck, &cv, &err), &err, ATTN_OK, "",
                     "alias_kv_cache_append_its_own_positions_interleaved_allowed");
        attn_kv_cache_view(&ck, &cv, cache, 4, &err);
        attn_tensor dest_k = ck, dest_v = cv; /* the next two positions of every head */
        dest_k.shape[2] = dest_v.shape[2] = 2;
        dest_k.data = (double *)ck.data + 4 * 2, dest_v.data = (double *)cv.data + 4 * 2;
        check_status(attn_kv_cache_append(cache, &dest_k, &vn, &err), &err, ATTN_ERR_STRIDE,
                     "the cache's keys and k overlap", "alias_kv_cache_append_k_on_its_destination");
        check_status(attn_kv_cache_append(cache, &kn, &dest_k, &err), &err, ATTN_ERR_STRIDE,
                     "the cache's keys and v overlap", "alias_kv_cache_append_v_on_the_keys_destination");
        check_status(attn_kv_cache_append(cache, &dest_v, &vn, &err), &err, ATTN_ERR_STRIDE,
                     "the cache's values and k overlap", "alias_kv_cache_append_k_on_the_values_destination");
        check(attn_kv_cache_length(cache) == 4, "alias_kv_cache_refused_appends_nothing", "length %lld",
              (long long)attn_kv_cache_length(cache));
        int64_t sq1[4] = {1, 2, 1, 2};
        attn_tensor aq = pool_tensor(&p, ATTN_F64, 4, sq1), ao = pool_tensor(&p, ATTN_F64, 4, sq1);
        check_status(attn_kv_cache_attend(&ao, NULL, &aq, cache, NULL, &err), &err, ATTN_OK, "",
                     "alias_kv_cache_attend_runs");
        ao.data = ck.data;
        check_status(attn_kv_cache_attend(&ao, NULL, &aq, cache, NULL, &err), &err, ATTN_ERR_STRIDE, "out and k pages overlap",
                     "alias_kv_cache_attend_out_on_the_keys");
        ao.data = aq.data;
        check_status(attn_kv_cache_attend(&ao, NULL, &aq, cache, NULL, &err), &err, ATTN_ERR_STRIDE, "out and q overlap",
                     "alias_kv_cache_attend_out_on_q");
        free(mem);
    }
    free(p.mem);
}

/* attn_get_tuning: every block size positive; an older, smaller struct gets
 * only its own fields; a bad struct_size is an error. */
/* attn_additive_scores against its formula, and its errors. */
static void test_additive(void) {
    double q[2] = {1, -0.5}, k[4] = {2, 0, 0, 1}, w1[2] = {1, 0.5}, w2[2] = {1, -1}, v[1] = {2}, s[2];
    attn_error err;
    /* q (1, 2), k (2, 2), W1 and W2 (2, 1), v (1): s_j = 2 tanh(q W1 + k_j W2) */
    attn_status st = attn_additive_scores(s, q, 1, k, 2, 2, w1, w2, v, 1, &err);
    double want0 = 2 * tanh(0.75 + 2), want1 = 2 * tanh(0.75 - 1);
    check(st == ATTN_OK && fabs(s[0] - want0) < 1e-15 && fabs(s[1] - want1) < 1e-15, "additive_scores_formula",
          "%.17g %.17g", s[0], s[1]);
    check_status(attn_additive_scores(s, NULL, 1, k, 2, 2, w1, w2, v, 1, &err), &err, ATTN_ERR_NULL, "NULL",
                 "additive_scores_null");
    check_status(attn_additive_scores(s, q, 1, k, 2, 2, w1, w2, v, 0, &err), &err, ATTN_ERR_ARGUMENT, "hidden (0)",
                 "additive_scores_sizes");
    /* attn_softmax_rows: the softmax of each row, causal rows see 0..i. */
    double sc[6] = {1, 2, 3, -1, 0, 5}, w[6], z = exp(1) + exp(2) + exp(3);
    st = attn_softmax_rows(w, sc, 2, 3, 0, &err);
    check(st == ATTN_OK && fabs(w[0] - exp(1) / z) < 1e-15 && fabs(w[2] - exp(3) / z) < 1e-15 &&
              fabs(w[3] + w[4] + w[5] - 1) < 1e-15, "softmax_rows", "%g %g", w[0], w[2]);
    st = attn_softmax_rows(w, sc, 2, 3, 1, &err);
    check(st == ATTN_OK && w[0] == 1 && w[1] == 0 && w[2] == 0 && fabs(w[3] - exp(-1) / (exp(-1) + 1)) < 1e-15 && w[5] == 0,
          "softmax_rows_causal", "%g %g %g", w[0], w[3], w[5]);
    check_status(attn_softmax_rows(w, NULL, 2, 3, 0, &err), &err, ATTN_ERR_NULL, "NULL", "softmax_rows_null");
    /* sizes no array can have are an overflow, not the overlap they would imply */
    check_status(attn_softmax_rows(w, sc, INT_MAX, INT_MAX, 0, &err), &err, ATTN_ERR_OVERFLOW, "weights",
                 "softmax_rows_sizes_overflow");
    check_status(attn_additive_scores(s, q, INT_MAX, k, INT_MAX, 2, w1, w2, v, 1, &err), &err, ATTN_ERR_OVERFLOW,
                 "scores", "additive_scores_sizes_overflow");
}

/* The kernel walk's errors, and its JSON asked for by length first (the
 * numbers are checked against NumPy and PyTorch in test_explain.py). */
static void test_kernel_walk(void) {
    attn_kernel_walk w = {.struct_size = sizeof w};
    attn_error err;
    attn_kernel_walk_options o = attn_kernel_walk_options_default();
    check(o.block == 2 && o.row == -1 && o.workers == 2 && o.ranks == 3, "kernel_walk_defaults", "%d %d", o.block, o.row);
    check_status(attn_kernel_walk_run(NULL, "the cat", NULL, &err), &err, ATTN_ERR_NULL, "NULL", "kernel_walk_null");
    check_status(attn_kernel_walk_run(&w, "the cta", NULL, &err), &err, ATTN_ERR_TOKEN, "cta", "kernel_walk_unknown_word");
    o.block = 9;
    check_status(attn_kernel_walk_run(&w, "the cat", &o, &err), &err, ATTN_ERR_OPTION, "block (9)", "kernel_walk_block");
    o = attn_kernel_walk_options_default(), o.row = 2;
    check_status(attn_kernel_walk_run(&w, "the cat", &o, &err), &err, ATTN_ERR_OPTION, "row (2)", "kernel_walk_row");
    o = attn_kernel_walk_options_default(), o.ranks = 0;
    check_status(attn_kernel_walk_run(&w, "the cat", &o, &err), &err, ATTN_ERR_OPTION, "ranks (0)", "kernel_walk_ranks");
    o = attn_kernel_walk_options_default(), o.workers = 8, o.ranks = 8;
    attn_status st = attn_kernel_walk_run(&w, "the cat sat", &o, &err);
    check(st == ATTN_OK && w.workers == 3 && w.ranks == 3 && w.n == 3, "kernel_walk_parts_at_most_words", "%d %d",
          w.workers, w.ranks);
    size_t len = 0, len2 = 0;
    check(attn_kernel_walk_json(NULL, 0, &len, &w, NULL, &err) == ATTN_OK && len > 1000, "kernel_walk_json_length",
          "%zu", len);
    char *buf = malloc(len + 1);
    check(buf && attn_kernel_walk_json(buf, len + 1, &len2, &w, "ring", &err) == ATTN_OK && len2 < len &&
              strstr(buf, "\"ring\"") && !strstr(buf, "\"online\""),
          "kernel_walk_json_one_step", "%zu", len2);
    check_status(attn_kernel_walk_json(buf, len + 1, &len2, &w, "warp", &err), &err, ATTN_ERR_OPTION, "warp",
                 "kernel_walk_json_bad_step");
    free(buf);
    double sb, wb;
    check(attn_kernel_cost(&sb, &wb, 4096, &err) == ATTN_OK && sb == 4.0 * 4096 * 4096 && wb > 0 && wb < sb,
          "kernel_cost", "%g %g", sb, wb);
    check_status(attn_kernel_cost(&sb, &wb, 0, &err), &err, ATTN_ERR_ARGUMENT, "T (0)", "kernel_cost_range");
    attn_kernel_walk_free(&w);
    attn_kernel_walk_free(&w);
    check_status(attn_kernel_walk_json(NULL, 0, &len, &w, NULL, &err), &err, ATTN_ERR_ARGUMENT, "not computed",
                 "kernel_walk_json_freed");
    /* The walk is versioned: the library writes it only at a size a header had. */
    check(w.struct_size == sizeof w, "kernel_walk_free_keeps_struct_size", "%zu", w.struct_size);
    attn_kernel_walk *bad = calloc(1, sizeof *bad);
    check_status(attn_kernel_walk_run(bad, "the cat", NULL, &err), &err, ATTN_ERR_OPTION, "struct_size is 0",
                 "kernel_walk_zero_struct_size");
    bad->struct_size = sizeof *bad + 8;
    check_status(attn_kernel_walk_run(bad, "the cat", NULL, &err), &err, ATTN_ERR_OPTION, "no release",
                 "kernel_walk_newer_struct_size");
    memset(bad, 0xa5, sizeof *bad);
    bad->struct_size = sizeof *bad - 8;
    attn_kernel_walk *copy = malloc(sizeof *copy);
    memcpy(copy, bad, sizeof *copy);
    check_status(attn_kernel_walk_run(bad, "the cat", NULL, &err), &err, ATTN_ERR_OPTION, "no release",
                 "kernel_walk_unknown_struct_size");
    check(!memcmp(bad, copy, sizeof *bad), "kernel_walk_refused_writes_nothing", "the walk changed");
    attn_kernel_walk_free(bad); /* not a walk run filled: left as it is (its pointers are not freed) */
    check(!memcmp(bad, copy, sizeof *bad), "kernel_walk_free_of_another_size_leaves_it", "the walk changed");
    free(copy);
    check_status(attn_kernel_walk_json(NULL, 0, &len, bad, NULL, &err), &err, ATTN_ERR_OPTION, "struct_size",
                 "kernel_walk_json_struct_size");
    free(bad);
}

static void test_tuning(void) {
    attn_tuning t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    attn_error err;
    attn_status st = attn_get_tuning(&t, &err);
    check(st == ATTN_OK && t.core && t.isa && strcmp(t.isa, attn_isa()) == 0 && t.block_rows > 0 && t.block_keys > 0 &&
              t.backward_block_rows > 0 && t.backward_block_keys > 0 && t.decode_chunk > 0 && t.gemm_rows > 0 &&
              t.gemm_depth > 0 && t.gemm_cols > 0 && t.blocks_for &&
              (strcmp(t.blocks_for, "cpuid") == 0 || strcmp(t.blocks_for, "generic") == 0),
          "tuning_reports_every_block", "status %d", (int)st);
    memset(&t, 0x5a, sizeof t);
    /* 0.2.0's struct ended at decode_chunk; its sizeof, rounded up to the
     * pointers' alignment, takes gemm_rows (added in its tail padding) too,
     * but not gemm_depth. */
    t.struct_size = offsetof(attn_tuning, gemm_depth);
    st = attn_get_tuning(&t, &err);
    check(st == ATTN_OK && t.decode_chunk > 0 && t.gemm_depth == 0x5a5a5a5a && t.gemm_cols == 0x5a5a5a5a &&
              t.struct_size == offsetof(attn_tuning, gemm_depth),
          "tuning_older_struct_gets_its_fields_only", "status %d, gemm_depth %d", (int)st, t.gemm_depth);
    t.struct_size = sizeof t + 8;
    check_status(attn_get_tuning(&t, &err), &err, ATTN_ERR_OPTION, "struct_size", "tuning_struct_too_large");
}

/* ---- the errors attn.h documents, for calls whose other tests pass good input --- */

/* Each call below is given one bad argument that its comment in attn.h
 * names, and must return that status. A negative dimension is a shape
 * error wherever a tensor is taken (attn_tensor_init says so), never an
 * element count that overflows. */
static void test_documented_errors(void) {
    attn_error err;
    double buf[16], buf2[16];
    int64_t s24[2] = {2, 4}, s23[2] = {2, 3}, s8[1] = {8};
    attn_tensor x, y, v1, odd;
    attn_tensor_init(&x, buf, ATTN_F64, 2, s24, NULL, NULL);
    attn_tensor_init(&y, buf2, ATTN_F64, 2, s24, NULL, NULL);
    attn_tensor_init(&v1, buf, ATTN_F64, 1, s8, NULL, NULL);
    attn_tensor_init(&odd, buf, ATTN_F64, 2, s23, NULL, NULL);

    /* attn_sinusoidal_positions: NULL, RANK (not 2), DTYPE, OPTION (offset < 0). */
    check_status(attn_sinusoidal_positions(NULL, 0, &err), &err, ATTN_ERR_NULL, "NULL", "sinusoidal_null");
    check_status(attn_sinusoidal_positions(&v1, 0, &err), &err, ATTN_ERR_RANK, "", "sinusoidal_rank_1");
    attn_tensor xb = x;
    xb.dtype = ATTN_BOOL;
    check_status(attn_sinusoidal_positions(&xb, 0, &err), &err, ATTN_ERR_DTYPE, "", "sinusoidal_bool");
    check_status(attn_sinusoidal_positions(&x, -1, &err), &err, ATTN_ERR_OPTION, "", "sinusoidal_negative_offset");

    /* attn_hadamard: NULL, RANK, DTYPE, SHAPE (n not a power of two), STRIDE. */
    check_status(attn_hadamard(NULL, &err), &err, ATTN_ERR_NULL, "NULL", "hadamard_null");
    attn_tensor x0 = x;
    x0.rank = 0;
    check_status(attn_hadamard(&x0, &err), &err, ATTN_ERR_RANK, "", "hadamard_rank_0");
    attn_tensor xh = x;
    xh.dtype = ATTN_F16;
    check_status(attn_hadamard(&xh, &err), &err, ATTN_ERR_DTYPE, "", "hadamard_f16");
    check_status(attn_hadamard(&odd, &err), &err, ATTN_ERR_SHAPE, "power of two", "hadamard_n_3");
    attn_tensor xs = x;
    xs.strides[0] = 0;
    check_status(attn_hadamard(&xs, &err), &err, ATTN_ERR_STRIDE, "", "hadamard_stride_0");

    /* attn_get_tuning: NULL. */
    check_status(attn_get_tuning(NULL, &err), &err, ATTN_ERR_NULL, "", "tuning_null");

    /* attn_kv_cache_view: NULL, RANK (not 2, 3 or 4). */
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.capacity = 4, d.key_dim = 4, d.value_dim = 4;
    size_t bytes = 0;
    check_status(attn_kv_cache_bytes(&bytes, &d, &err), &err, ATTN_OK, "", "documented_errors_cache_bytes");
    void *memory = malloc(bytes);
    attn_kv_cache *cache = NULL;
    if (memory && attn_kv_cache_init(&cache, memory, bytes, &d, &err) == ATTN_OK) {
        attn_tensor ck, cv;
        check_status(attn_kv_cache_view(&ck, &cv, NULL, 2, &err), &err, ATTN_ERR_NULL, "", "cache_view_null");
        check_status(attn_kv_cache_view(&ck, &cv, cache, 1, &err), &err, ATTN_ERR_RANK, "", "cache_view_rank_1");
        check_status(attn_kv_cache_view(&ck, &cv, cache, 5, &err), &err, ATTN_ERR_RANK, "", "cache_view_rank_5");
        check_status(attn_kv_cache_truncate(NULL, 0, &err), &err, ATTN_ERR_NULL, "", "cache_truncate_null");
    } else {
        check(0, "documented_errors_cache_init", "%s", memory ? err.message : "malloc failed");
    }
    free(memory);

    /* attn_npy_format_header: NULL (buf, length, shape of rank > 0), RANK. */
    char header[ATTN_NPY_HEADER_MAX];
    size_t length;
    check_status(attn_npy_format_header(NULL, sizeof header, &length, ATTN_F32, 2, s24, &err), &err, ATTN_ERR_NULL,
                 "", "npy_format_header_null_buf");
    check_status(attn_npy_format_header(header, sizeof header, NULL, ATTN_F32, 2, s24, &err), &err, ATTN_ERR_NULL,
                 "", "npy_format_header_null_length");
    check_status(attn_npy_format_header(header, sizeof header, &length, ATTN_F32, 2, NULL, &err), &err,
                 ATTN_ERR_NULL, "", "npy_format_header_null_shape");
    check_status(attn_npy_format_header(header, sizeof header, &length, ATTN_F32, ATTN_MAX_RANK + 1, s24, &err),
                 &err, ATTN_ERR_RANK, "", "npy_format_header_rank");

    /* attn_npy_read_i64: attn_npy_read's IO, and NPY_UNSUPPORTED for a float
     * file, leaving *values NULL and *count 0. */
    int64_t *values = (int64_t *)header, count = 5;
    check_status(attn_npy_read_i64(&values, &count, "/nonexistent/documented.npy", &err), &err, ATTN_ERR_IO, "",
                 "npy_read_i64_missing");
    check(!values && count == 0, "npy_read_i64_missing_clears", "values %p, count %lld", (void *)values,
          (long long)count);
    char path[] = "/tmp/attn_doc_errors_" "XX" "XX" "XX"; /* a mkstemp template */
    int fd = mkstemp(path);
    check(fd >= 0, "documented_errors_temp_file", "mkstemp %s: %s", path, strerror(errno));
    if (fd >= 0) {
        close(fd);
        check_status(attn_npy_write(path, &v1, &err), &err, ATTN_OK, "", "documented_errors_npy_write");
        values = (int64_t *)header, count = 5;
        check_status(attn_npy_read_i64(&values, &count, path, &err), &err, ATTN_ERR_NPY_UNSUPPORTED, "",
                     "npy_read_i64_float_file");
        check(!values && count == 0, "npy_read_i64_float_file_clears", "values %p, count %lld", (void *)values,
              (long long)count);
        unlink(path);
    }

    /* A negative dimension: ATTN_ERR_SHAPE naming it, from every call that
     * takes the tensor (these four once called it an overflow). */
    attn_tensor neg = x, negout = y;
    neg.shape[0] = -1, negout.shape[0] = -1;
    check_status(attn_tensor_convert(&negout, &neg, &err), &err, ATTN_ERR_SHAPE, "negative", "convert_negative_dim");
    check_status(attn_sinusoidal_positions(&neg, 0, &err), &err, ATTN_ERR_SHAPE, "negative",
                 "sinusoidal_negative_dim");
    attn_rope_options ro = attn_rope_options_default();
    check_status(attn_rope(&negout, &neg, &ro, &err), &err, ATTN_ERR_SHAPE, "negative", "rope_negative_dim");
    check_status(attn_rope_backward(&negout, &neg, &ro, &err), &err, ATTN_ERR_SHAPE, "negative",
                 "rope_backward_negative_dim");
    char npy[] = "/tmp/attn_doc_neg_" "XX" "XX" "XX"; /* a mkstemp template */
    fd = mkstemp(npy);
    check(fd >= 0, "negative_dim_temp_file", "mkstemp %s: %s", npy, strerror(errno));
    if (fd >= 0) {
        close(fd);
        check_status(attn_npy_write(npy, &neg, &err), &err, ATTN_ERR_SHAPE, "negative", "npy_write_negative_dim");
        unlink(npy);
    }
}

/* ---- measuring without buffers (attn.h, attn_sdpa_workspace_size) ---------- */

/* t's layout without its buffer, as a measuring call may be given it. */
static attn_tensor no_data(const attn_tensor *t) {
    attn_tensor u = *t;
    u.data = NULL;
    return u;
}

/* Every *_workspace_size call takes tensors with NULL data (buffers not yet
 * allocated) and gives the bytes the same layouts with data take; every
 * call that runs rejects NULL data with ATTN_ERR_NULL, "<name> has NULL
 * data". One rule (attn_check_data) for attention, its backward pass (f32
 * and 16-bit q) and the layer. */
static void test_measuring_without_data(void) {
    attn_error err;
    enum { H = 2, L = 5, S = 70, E = 16 };
    int64_t sq[3] = {H, L, E}, sk[3] = {H, S, E}, sl[2] = {H, L}, sm[2] = {L, S}, sw[3] = {H, L, S};
    attn_tensor q = make(ATTN_F32, 3, sq), k = make(ATTN_F32, 3, sk), v = make(ATTN_F32, 3, sk);
    attn_tensor out = make(ATTN_F32, 3, sq), lse = make(ATTN_F32, 2, sl), mask = make(ATTN_F32, 2, sm);
    attn_tensor w = make(ATTN_F32, 3, sw), dout = make(ATTN_F32, 3, sq);
    attn_tensor dq = make(ATTN_F32, 3, sq), dk = make(ATTN_F32, 3, sk), dv = make(ATTN_F32, 3, sk);
    attn_tensor nq = no_data(&q), nk = no_data(&k), nv = no_data(&v), nout = no_data(&out), nlse = no_data(&lse);
    attn_tensor nmask = no_data(&mask), nw = no_data(&w), ndout = no_data(&dout);
    attn_tensor ndq = no_data(&dq), ndk = no_data(&dk), ndv = no_data(&dv);
    attn_sdpa_options o = attn_sdpa_options_default(), on = o;
    o.causal = on.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.mask = &mask, on.mask = &nmask;
    size_t with = 0, without = 1;
    for (int weights = 0; weights < 2; weights++) { /* the flash kernel's scratch, and the exact kernel's */
        attn_status a = attn_sdpa_workspace_size(&with, &out, &lse, weights ? &w : NULL, &q, &k, &v, &o, &err);
        attn_status b = attn_sdpa_workspace_size(&without, &nout, &nlse, weights ? &nw : NULL, &nq, &nk, &nv, &on, &err);
        check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without,
              weights ? "measuring_null_data_sdpa_weights_same_bytes" : "measuring_null_data_sdpa_same_bytes",
              "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
    }
    check_status(attn_sdpa(&nout, &lse, NULL, &q, &k, &v, &o, &err), &err, ATTN_ERR_NULL, "out has NULL data",
                 "running_null_data_out_rejected");
    check_status(attn_sdpa(&out, &nlse, NULL, &q, &k, &v, &o, &err), &err, ATTN_ERR_NULL, "lse has NULL data",
                 "running_null_data_lse_rejected");
    check_status(attn_sdpa(&out, &lse, NULL, &q, &nk, &v, &o, &err), &err, ATTN_ERR_NULL, "k has NULL data",
                 "running_null_data_k_rejected");
    check_status(attn_sdpa(&out, &lse, NULL, &q, &k, &v, &on, &err), &err, ATTN_ERR_NULL, "mask has NULL data",
                 "running_null_data_mask_rejected");

    /* The backward pass: every gradient, dout, and the forward's tensors. */
    attn_status a = attn_sdpa_backward_workspace_size(&with, &dq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, &lse, &o, &err);
    attn_status b = attn_sdpa_backward_workspace_size(&without, &ndq, &ndk, &ndv, NULL, &ndout, &nq, &nk, &nv, &nout,
                                                      &nlse, &on, &err);
    check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without, "measuring_null_data_backward_same_bytes",
          "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
    check_status(attn_sdpa_backward(&ndq, &dk, &dv, NULL, &dout, &q, &k, &v, &out, &lse, &o, &err), &err, ATTN_ERR_NULL,
                 "dq has NULL data", "running_null_data_backward_dq_rejected");
    check_status(attn_sdpa_backward(&dq, &dk, &dv, NULL, &ndout, &q, &k, &v, &out, &lse, &o, &err), &err,
                 ATTN_ERR_NULL, "dout has NULL data", "running_null_data_backward_dout_rejected");

    /* 16-bit q, out, dout and dq: the f32 copies are counted, not made. */
    attn_tensor q16, out16, dout16, dq16;
    uint16_t *h = calloc((size_t)(4 * H * L * E), sizeof *h);
    for (int i = 0; i < 4 * H * L * E; i++) h[i] = (uint16_t)(0x3c00 + (rng_next() & 0x3ff)); /* f16 in [1, 2) */
    attn_tensor_init(&q16, h, ATTN_F16, 3, sq, NULL, NULL), attn_tensor_init(&out16, h + H * L * E, ATTN_F16, 3, sq, NULL, NULL);
    attn_tensor_init(&dout16, h + 2 * H * L * E, ATTN_F16, 3, sq, NULL, NULL);
    attn_tensor_init(&dq16, h + 3 * H * L * E, ATTN_F16, 3, sq, NULL, NULL);
    attn_tensor nq16 = no_data(&q16), nout16 = no_data(&out16), ndout16 = no_data(&dout16), ndq16 = no_data(&dq16);
    a = attn_sdpa_workspace_size(&with, &out16, &lse, NULL, &q16, &k, &v, &o, &err);
    b = attn_sdpa_workspace_size(&without, &nout16, &nlse, NULL, &nq16, &nk, &nv, &on, &err);
    check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without, "measuring_null_data_sdpa_f16_same_bytes",
          "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
    check_status(attn_sdpa(&out16, &lse, NULL, &nq16, &k, &v, &o, &err), &err, ATTN_ERR_NULL, "q has NULL data",
                 "running_null_data_f16_q_rejected");
    a = attn_sdpa_backward_workspace_size(&with, &dq16, &dk, &dv, NULL, &dout16, &q16, &k, &v, &out16, &lse, &o, &err);
    b = attn_sdpa_backward_workspace_size(&without, &ndq16, &ndk, &ndv, NULL, &ndout16, &nq16, &nk, &nv, &nout16, &nlse,
                                          &on, &err);
    check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without, "measuring_null_data_backward_f16_same_bytes",
          "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
    check_status(attn_sdpa_backward(&ndq16, &dk, &dv, NULL, &dout16, &q16, &k, &v, &out16, &lse, &o, &err), &err,
                 ATTN_ERR_NULL, "dq has NULL data", "running_null_data_backward_f16_dq_rejected");

    /* The ragged backward's size query: the same buffers as a batch of H
     * sequences packed (rows, 1, E), each with the mask. */
    {
        int64_t pq[3] = {H * L, 1, E}, pk[3] = {H * S, 1, E}, pl[2] = {H * L, 1}, cq[H + 1], ck[H + 1];
        for (int i = 0; i <= H; i++) cq[i] = i * L, ck[i] = i * S;
        attn_tensor vt[9], nt[9]; /* q k v out lse dout dq dk dv, packed; and without data */
        const attn_tensor *src[9] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv};
        const int64_t *shape[9] = {pq, pk, pk, pq, pl, pq, pq, pk, pk};
        for (int i = 0; i < 9; i++)
            attn_tensor_init(&vt[i], src[i]->data, ATTN_F32, src[i]->rank, shape[i], NULL, NULL), nt[i] = no_data(&vt[i]);
        const attn_tensor *masks[H], *nmasks[H];
        for (int i = 0; i < H; i++) masks[i] = &mask, nmasks[i] = &nmask;
        attn_sdpa_options vo = attn_sdpa_options_default();
        vo.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        a = attn_sdpa_varlen_backward_workspace_size(&with, &vt[6], &vt[7], &vt[8], &vt[5], &vt[0], &vt[1], &vt[2], &vt[3],
                                                     &vt[4], cq, ck, H, masks, &vo, &err);
        b = attn_sdpa_varlen_backward_workspace_size(&without, &nt[6], &nt[7], &nt[8], &nt[5], &nt[0], &nt[1], &nt[2],
                                                     &nt[3], &nt[4], cq, ck, H, nmasks, &vo, &err);
        check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without, "measuring_null_data_varlen_backward_same_bytes",
              "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
        check_status(attn_sdpa_varlen_backward(&nt[6], &vt[7], &vt[8], &vt[5], &vt[0], &vt[1], &vt[2], &vt[3], &vt[4], cq,
                                               ck, H, masks, &vo, &err),
                     &err, ATTN_ERR_NULL, "dq has NULL data", "running_null_data_varlen_backward_dq_rejected");
        check_status(attn_sdpa_varlen_backward(&vt[6], &vt[7], &vt[8], &nt[5], &vt[0], &vt[1], &vt[2], &vt[3], &vt[4], cq,
                                               ck, H, masks, &vo, &err),
                     &err, ATTN_ERR_NULL, "dout has NULL data", "running_null_data_varlen_backward_dout_rejected");
        check_status(attn_sdpa_varlen_backward(&vt[6], &vt[7], &vt[8], &vt[5], &vt[0], &nt[1], &vt[2], &vt[3], &vt[4], cq,
                                               ck, H, masks, &vo, &err),
                     &err, ATTN_ERR_NULL, "k has NULL data", "running_null_data_varlen_backward_k_rejected");
        check_status(attn_sdpa_varlen_backward(&vt[6], &vt[7], &vt[8], &vt[5], &vt[0], &vt[1], &vt[2], &vt[3], &vt[4], cq,
                                               ck, H, nmasks, &vo, &err),
                     &err, ATTN_ERR_NULL, "sequence 0: mask has NULL data",
                     "running_null_data_varlen_backward_mask_rejected");
    }

    /* The layer: its inputs, outputs, masks and parameters. */
    enum { N = 2, ME = 8, MS = 7 };
    int64_t sx[3] = {N, L, ME}, skv[3] = {N, MS, ME}, sin[2] = {3 * ME, ME}, sout[2] = {ME, ME}, skpm[2] = {N, MS};
    int64_t sweights[3] = {N, L, MS};
    attn_tensor x = make(ATTN_F32, 3, sx), kv = make(ATTN_F32, 3, skv), y = make(ATTN_F32, 3, sx);
    attn_tensor win = make(ATTN_F32, 2, sin), wout = make(ATTN_F32, 2, sout), kpm = make(ATTN_BOOL, 2, skpm);
    attn_tensor aw = make(ATTN_F32, 3, sweights);
    attn_tensor nx = no_data(&x), nkv = no_data(&kv), ny = no_data(&y), nwin = no_data(&win), nwout = no_data(&wout);
    attn_tensor nkpm = no_data(&kpm), naw = no_data(&aw);
    attn_mha_params p = attn_mha_params_default(), pn = p;
    p.embed_dim = pn.embed_dim = ME, p.num_heads = pn.num_heads = 2;
    p.in_proj_weight = &win, p.out_proj_weight = &wout, pn.in_proj_weight = &nwin, pn.out_proj_weight = &nwout;
    attn_mha_options mo = attn_mha_options_default(), mon = mo;
    mo.batch_first = mon.batch_first = 1;
    mo.key_padding_mask = &kpm, mon.key_padding_mask = &nkpm;
    a = attn_mha_workspace_size(&with, &y, &aw, &x, &kv, &kv, &p, &mo, &err);
    b = attn_mha_workspace_size(&without, &ny, &naw, &nx, &nkv, &nkv, &pn, &mon, &err);
    check(a == ATTN_OK && b == ATTN_OK && with > 0 && with == without, "measuring_null_data_mha_same_bytes",
          "status %d, %d (%s); %zu bytes with data, %zu without", (int)a, (int)b, b ? err.message : "", with, without);
    check_status(attn_mha(&y, &aw, &nx, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_NULL, "query has NULL data",
                 "running_null_data_mha_query_rejected");
    check_status(attn_mha(&y, &naw, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_NULL, "weights has NULL data",
                 "running_null_data_mha_weights_rejected");
    check_status(attn_mha(&y, &aw, &x, &kv, &kv, &pn, &mo, &err), &err, ATTN_ERR_NULL, "in_proj_weight has NULL data",
                 "running_null_data_mha_parameter_rejected");
    check_status(attn_mha(&y, &aw, &x, &kv, &kv, &p, &mon, &err), &err, ATTN_ERR_NULL, "key_padding_mask has NULL data",
                 "running_null_data_mha_mask_rejected");
    /* The layer's backward pass: a parameter's gradient and dout by name. */
    attn_mha_params gp = attn_mha_params_default();
    attn_tensor ngwin = no_data(&win);
    gp.in_proj_weight = &ngwin;
    check_status(attn_mha_backward(NULL, NULL, NULL, &gp, &y, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_NULL,
                 "the gradient of in_proj_weight has NULL data", "running_null_data_mha_backward_grad_rejected");
    attn_tensor dx = make(ATTN_F32, 3, sx);
    check_status(attn_mha_backward(&dx, NULL, NULL, NULL, &ny, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_NULL,
                 "dout has NULL data", "running_null_data_mha_backward_dout_rejected");
    check_status(attn_mha_backward(&dx, NULL, NULL, NULL, &y, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_OK, "",
                 "running_mha_backward_with_data_accepted");
    /* A parameter's gradient of another shape or dtype: the message names both. */
    attn_tensor gbad = make(ATTN_F32, 2, wout.shape), gf64 = make(ATTN_F64, win.rank, win.shape);
    gp.in_proj_weight = &gbad;
    char want[160];
    snprintf(want, sizeof want, "the gradient of in_proj_weight has shape (%lld, %lld) but in_proj_weight has shape "
             "(%lld, %lld)", (long long)wout.shape[0], (long long)wout.shape[1], (long long)win.shape[0],
             (long long)win.shape[1]);
    check_status(attn_mha_backward(NULL, NULL, NULL, &gp, &y, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_SHAPE, want,
                 "err_mha_backward_grad_shape_named");
    gp.in_proj_weight = &gf64;
    check_status(attn_mha_backward(NULL, NULL, NULL, &gp, &y, &x, &kv, &kv, &p, &mo, &err), &err, ATTN_ERR_DTYPE,
                 "the gradient of in_proj_weight is f64 but in_proj_weight is f32", "err_mha_backward_grad_dtype_named");
    free(gbad.data), free(gf64.data);
    attn_tensor *all[] = {&q, &k, &v, &out, &lse, &mask, &w, &dout, &dq, &dk, &dv, &x, &kv, &y, &win, &wout, &kpm, &aw, &dx};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(h);
}

/* ATTN_NUM_THREADS is a whole number of threads: at most 256 however large
 * (atoi wrapped 4294967297 to 1, and reading past int is undefined), and
 * text that is no number ("3x", "") the default, the CPUs online. */
static void test_num_threads_env(void) {
    const char *saved = getenv("ATTN_NUM_THREADS");
    char keep[64] = "";
    if (saved) snprintf(keep, sizeof keep, "%s", saved);
    attn_set_num_threads(0);
    unsetenv("ATTN_NUM_THREADS");
    const int cpus = attn_get_num_threads();
    static const struct { const char *env; int want; } CASES[] = {
        {"3", 3}, {"256", 256}, {"1000", 256}, {"4294967297", 256}, {"99999999999999999999", 256},
        {"3x", 0}, {"", 0}, {"-1", 0}, {"0", 0}, {"abc", 0},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        setenv("ATTN_NUM_THREADS", CASES[i].env, 1);
        int got = attn_get_num_threads(), want = CASES[i].want ? CASES[i].want : cpus;
        char name[96];
        snprintf(name, sizeof name, "num_threads_env_%zu", i);
        check(got == want, name, "ATTN_NUM_THREADS=\"%s\" gives %d threads; want %d", CASES[i].env, got, want);
    }
    if (saved) setenv("ATTN_NUM_THREADS", keep, 1);
    else unsetenv("ATTN_NUM_THREADS");
}

/* ---- a workspace apart from the call's tensors ---------------------------- */

/* One entry point's call with the caller's workspace (NULL: none; for a
 * plan's run, the unplanned call its results equal). */
typedef attn_status (*ws_call_fn)(void *arg, void *workspace, size_t bytes, attn_error *err);

/* What a call writes: each refused call must leave it as it was, each
 * accepted one write what the call without a workspace writes. */
typedef struct ws_outputs {
    void *data[3];
    size_t bytes[3];
    int n;
} ws_outputs;

/* The call of `family` three ways: without a workspace (the reference);
 * with `ws` bytes at `accepted`, next to the tensor called `name` but
 * sharing no byte with it (the same outputs, bitwise); and with them at
 * `refused`, one byte over it (ATTN_ERR_STRIDE naming it, and nothing
 * written: neither the outputs nor the `span` bytes at `region`, which
 * hold the tensor and both workspaces). */
static void check_workspace_apart(const char *family, ws_call_fn call, void *arg, const ws_outputs *outs,
                                  unsigned char *region, size_t span, unsigned char *accepted, unsigned char *refused,
                                  size_t ws, const char *name) {
    attn_error err;
    char test[160], needle[128];
    void *ref[3], *snap[3];
    attn_status st = call(arg, NULL, 0, &err);
    snprintf(test, sizeof test, "%s_without_workspace", family);
    check(st == ATTN_OK, test, "status %d (%s)", (int)st, st ? err.message : "");
    for (int i = 0; i < outs->n; i++) {
        ref[i] = malloc(outs->bytes[i]), snap[i] = malloc(outs->bytes[i]);
        memcpy(ref[i], outs->data[i], outs->bytes[i]);
        memset(outs->data[i], 0x5a, outs->bytes[i]);
    }
    st = call(arg, accepted, ws, &err);
    int same = st == ATTN_OK;
    for (int i = 0; i < outs->n; i++) same &= memcmp(outs->data[i], ref[i], outs->bytes[i]) == 0;
    snprintf(test, sizeof test, "%s_workspace_next_to_%s_accepted_bitwise", family, outs->n ? "its_tensor" : "it");
    check(same, test, "status %d (%s), or outputs unlike the call without a workspace", (int)st, st ? err.message : "");
    unsigned char *before = malloc(span);
    for (int i = 0; i < outs->n; i++) memset(outs->data[i], 0x5a, outs->bytes[i]), memset(snap[i], 0x5a, outs->bytes[i]);
    memcpy(before, region, span);
    st = call(arg, refused, ws, &err);
    snprintf(needle, sizeof needle, "the workspace and %s overlap", name);
    snprintf(test, sizeof test, "err_%s_workspace_over_a_byte_of_its_tensor", family);
    check_status(st, &err, ATTN_ERR_STRIDE, needle, test);
    int untouched = memcmp(before, region, span) == 0;
    for (int i = 0; i < outs->n; i++) untouched &= memcmp(outs->data[i], snap[i], outs->bytes[i]) == 0;
    snprintf(test, sizeof test, "%s_workspace_over_its_tensor_writes_nothing", family);
    check(untouched, test, "an output, the tensor or the workspace was written");
    for (int i = 0; i < outs->n; i++) free(ref[i]), free(snap[i]);
    free(before);
}

/* A tensor of `shape` over the front of a block that has `after` bytes of
 * the test's behind it (for a workspace), random values as make's. */
static attn_tensor make_in_block(attn_dtype dt, int rank, const int64_t *shape, size_t after) {
    attn_tensor r = make(dt, rank, shape), t = r;
    size_t n = (size_t)attn_tensor_numel(&r) * attn_dtype_size(dt);
    t.data = calloc(1, n + after + 1);
    memcpy(t.data, r.data, n);
    free(r.data);
    return t;
}

static size_t bytes_of(const attn_tensor *t) { return (size_t)attn_tensor_numel(t) * attn_dtype_size(t->dtype); }

/* The attention calls' arguments, for the callbacks below. */
typedef struct ws_args {
    attn_tensor *out, *lse, *q, *k, *v, *dout, *grad[3];
    const int64_t *cu_q, *cu_k;
    int64_t batch;
    attn_sdpa_plan *plan;
    attn_kv_cache *cache;
    int64_t length; /* the cache's length before the call */
    attn_kv_paged_view view;
    attn_kv_pages *pool;
    const int64_t *seqs;
    attn_mha_params p;
    attn_mha_options mo;
    attn_sdpa_options o;
    attn_context c;
} ws_args;

static const attn_sdpa_options *with_workspace(ws_args *a, void *ws, size_t bytes) {
    a->c = attn_context_default();
    a->c.workspace = ws, a->c.workspace_size = bytes;
    a->o.context = &a->c, a->mo.context = &a->c;
    return &a->o;
}

static attn_status ws_sdpa(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_sdpa(a->out, a->lse, NULL, a->q, a->k, a->v, with_workspace(a, ws, bytes), err);
}

static attn_status ws_backward(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_sdpa_backward(a->grad[0], a->grad[1], a->grad[2], NULL, a->dout, a->q, a->k, a->v, a->out, a->lse,
                              with_workspace(a, ws, bytes), err);
}

static attn_status ws_varlen(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_sdpa_varlen(a->out, a->lse, a->q, a->k, a->v, a->cu_q, a->cu_k, a->batch, NULL,
                            with_workspace(a, ws, bytes), err);
}

static attn_status ws_varlen_backward(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_sdpa_varlen_backward(a->grad[0], a->grad[1], a->grad[2], a->dout, a->q, a->k, a->v, a->out, a->lse,
                                     a->cu_q, a->cu_k, a->batch, NULL, with_workspace(a, ws, bytes), err);
}

static attn_status ws_plan_run(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    if (!ws) return ws_sdpa(arg, NULL, 0, err); /* a run is bitwise the unplanned call */
    return attn_sdpa_run(a->plan, a->out, a->lse, a->q, a->k, a->v, ws, bytes, err);
}

static attn_status ws_cache_attend(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_kv_cache_attend(a->out, a->lse, a->q, a->cache, with_workspace(a, ws, bytes), err);
}

static attn_status ws_paged_attend(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_kv_paged_attend(a->out, a->lse, a->q, a->cu_q, &a->view, NULL, with_workspace(a, ws, bytes), err);
}

static attn_status ws_paged_run(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    if (!ws) return ws_paged_attend(arg, NULL, 0, err); /* a run is bitwise the unplanned call */
    return attn_kv_paged_run(a->plan, a->out, a->lse, a->q, a->view.k_pages, a->view.v_pages, ws, bytes, err);
}

static attn_status ws_pages_attend(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    return attn_kv_pages_attend(a->out, a->lse, a->q, a->cu_q, a->seqs, a->batch, a->pool, NULL,
                                with_workspace(a, ws, bytes), err);
}

static attn_status ws_mha_paged(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    with_workspace(a, ws, bytes);
    attn_status st = attn_mha_paged(a->out, a->q, a->cu_q, a->seqs, a->batch, a->pool, NULL, &a->p, &a->mo, err);
    for (int64_t i = 0; i < a->batch; i++) attn_kv_pages_truncate(a->pool, a->seqs[i], 0, NULL); /* the same step again */
    return st;
}

static attn_status ws_mha(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    with_workspace(a, ws, bytes);
    return attn_mha(a->out, NULL, a->q, a->k, a->v, &a->p, &a->mo, err);
}

static attn_status ws_mha_backward(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    with_workspace(a, ws, bytes);
    return attn_mha_backward(a->grad[0], NULL, NULL, NULL, a->dout, a->q, a->k, a->v, &a->p, &a->mo, err);
}

static attn_status ws_mha_cached(void *arg, void *ws, size_t bytes, attn_error *err) {
    ws_args *a = arg;
    with_workspace(a, ws, bytes);
    attn_status st = attn_mha_cached(a->out, a->q, a->cache, &a->p, &a->mo, err);
    attn_kv_cache_truncate(a->cache, a->length, NULL); /* each call appends the same step */
    return st;
}

/* Every entry point that takes a caller's workspace refuses one that
 * shares a byte with a tensor of the call, before writing anything, and
 * takes one right next to it: attn_sdpa (f32, and a 16-bit q through its
 * f32 copies), attn_sdpa_backward, attn_sdpa_varlen and its backward,
 * attn_sdpa_run (the plan's own memory too), attn_kv_cache_attend (the
 * cache's memory), attn_kv_paged_attend and attn_kv_paged_run (the view's
 * page table), attn_kv_pages_attend (the pool's header), attn_mha (a
 * parameter, the packed weights), attn_mha_backward, attn_mha_cached and
 * attn_mha_paged (dout, the cache, the offsets, the pool's header). */
static void test_workspace_apart(void) {
    enum { B = 2, H = 2, L = 5, S = 7, E = 8, WS = 1 << 20 };
    int64_t sq[4] = {B, H, L, E}, sk[4] = {B, H, S, E}, sl[3] = {B, H, L};
    attn_error err;
    ws_args a;
    memset(&a, 0, sizeof a);
    a.o = attn_sdpa_options_default();
    attn_tensor q = make(ATTN_F32, 4, sq), k = make_in_block(ATTN_F32, 4, sk, WS), v = make(ATTN_F32, 4, sk);
    attn_tensor out = make(ATTN_F32, 4, sq), lse = make(ATTN_F32, 3, sl);
    a.out = &out, a.lse = &lse, a.q = &q, a.k = &k, a.v = &v;
    ws_outputs fo = {{out.data, lse.data}, {bytes_of(&out), bytes_of(&lse)}, 2};
    size_t kb = bytes_of(&k), need = 0;
    attn_sdpa_workspace_size(&need, &out, &lse, NULL, &q, &k, &v, NULL, &err);
    unsigned char *kend = (unsigned char *)k.data + kb;
    check_workspace_apart("sdpa", ws_sdpa, &a, &fo, k.data, kb + need + 1, kend, kend - 1, need, "k");

    /* A 16-bit q: its f32 copies are the first thing written to the workspace. */
    attn_tensor q16 = make_in_block(ATTN_F16, 4, sq, WS), out16 = make(ATTN_F16, 4, sq);
    attn_tensor_convert(&q16, &q, NULL);
    ws_args h = a;
    h.q = &q16, h.out = &out16, h.k = &v;
    ws_outputs ho = {{out16.data, lse.data}, {bytes_of(&out16), bytes_of(&lse)}, 2};
    attn_sdpa_workspace_size(&need, &out16, &lse, NULL, &q16, &v, &v, NULL, &err);
    unsigned char *qend = (unsigned char *)q16.data + bytes_of(&q16);
    check_workspace_apart("sdpa_f16", ws_sdpa, &h, &ho, q16.data, bytes_of(&q16) + need + 1, qend, qend - 1, need, "q");

    /* The backward pass, dout next to the workspace. */
    attn_tensor dout = make_in_block(ATTN_F32, 4, sq, WS), dq = make(ATTN_F32, 4, sq), dk = make(ATTN_F32, 4, sk);
    attn_sdpa(&out, &lse, NULL, &q, &k, &v, NULL, NULL);
    a.dout = &dout, a.grad[0] = &dq, a.grad[1] = &dk;
    ws_outputs bo = {{dq.data, dk.data}, {bytes_of(&dq), bytes_of(&dk)}, 2};
    attn_sdpa_backward_workspace_size(&need, &dq, &dk, NULL, NULL, &dout, &q, &k, &v, &out, &lse, NULL, &err);
    unsigned char *dend = (unsigned char *)dout.data + bytes_of(&dout);
    check_workspace_apart("sdpa_backward", ws_backward, &a, &bo, dout.data, bytes_of(&dout) + need + 1, dend, dend - 1,
                          need, "dout");

    /* Ragged batches: the offsets are the call's too. */
    int64_t pq[3] = {7, H, E}, pk[3] = {9, H, E}, pl[2] = {7, H};
    attn_tensor vq = make(ATTN_F32, 3, pq), vk = make(ATTN_F32, 3, pk), vv = make(ATTN_F32, 3, pk);
    attn_tensor vo = make(ATTN_F32, 3, pq), vl = make(ATTN_F32, 2, pl), vdo = make_in_block(ATTN_F32, 3, pq, WS);
    attn_tensor vdq = make(ATTN_F32, 3, pq), vdk = make(ATTN_F32, 3, pk);
    static const int64_t cu_q[3] = {0, 3, 7};
    int64_t *cu_k = calloc(1, 3 * sizeof *cu_k + WS + 1);
    cu_k[0] = 0, cu_k[1] = 4, cu_k[2] = 9;
    ws_args r = a;
    r.out = &vo, r.lse = &vl, r.q = &vq, r.k = &vk, r.v = &vv, r.cu_q = cu_q, r.cu_k = cu_k, r.batch = 2;
    ws_outputs vro = {{vo.data, vl.data}, {bytes_of(&vo), bytes_of(&vl)}, 2};
    unsigned char *cend = (unsigned char *)(cu_k + 3);
    check_workspace_apart("sdpa_varlen", ws_varlen, &r, &vro, (unsigned char *)cu_k, 3 * sizeof *cu_k + WS / 4 + 1,
                          cend, cend - 1, WS / 4, "cu_seqlens_k");
    r.dout = &vdo, r.grad[0] = &vdq, r.grad[1] = &vdk;
    ws_outputs vbo = {{vdq.data, vdk.data}, {bytes_of(&vdq), bytes_of(&vdk)}, 2};
    dend = (unsigned char *)vdo.data + bytes_of(&vdo);
    check_workspace_apart("sdpa_varlen_backward", ws_varlen_backward, &r, &vbo, vdo.data, bytes_of(&vdo) + WS + 1,
                          dend, dend - 1, WS, "dout");

    /* A plan's run: the workspace may not cover the plan's own memory,
     * here just before it. */
    size_t pbytes = 0, pws = 0;
    attn_sdpa_plan_bytes(&pbytes, 0, &err);
    unsigned char *pblock = malloc(WS + 128 + pbytes), *pmem = pblock + WS + 64 - (uintptr_t)(pblock + WS) % 64;
    attn_status st = attn_sdpa_plan_init(&a.plan, pmem, pbytes, &pws, &out, &lse, &q, &k, &v, NULL, &err);
    check(st == ATTN_OK && (unsigned char *)a.plan >= pmem && (unsigned char *)a.plan - pws >= pblock,
          "sdpa_plan_init_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
    if (!st) {
        unsigned char *at = (unsigned char *)a.plan - pws;
        check_workspace_apart("sdpa_run", ws_plan_run, &a, &fo, pblock, WS + 128 + pbytes, at, at + 1, pws,
                              "the plan's memory");
        /* and the run's tensors, as the unplanned call's */
        check_workspace_apart("sdpa_run_k", ws_plan_run, &a, &fo, k.data, kb + pws + 1, kend, kend - 1, pws, "k");
    }

    /* A KV cache: its memory, header to values, is the call's. */
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 1, d.heads = 2, d.capacity = 16, d.key_dim = E, d.value_dim = E;
    size_t cbytes = 0;
    attn_kv_cache_bytes(&cbytes, &d, &err);
    unsigned char *cmem = calloc(1, cbytes + WS + 1);
    int64_t ck_shape[4] = {1, 2, 6, E}, cq_shape[4] = {1, 4, 2, E}, cl_shape[3] = {1, 4, 2};
    attn_tensor cnk = make(ATTN_F32, 4, ck_shape), cnv = make(ATTN_F32, 4, ck_shape);
    attn_tensor cq = make(ATTN_F32, 4, cq_shape), co = make(ATTN_F32, 4, cq_shape), cl = make(ATTN_F32, 3, cl_shape);
    ws_args c = a;
    c.out = &co, c.lse = &cl, c.q = &cq;
    st = attn_kv_cache_init(&c.cache, cmem, cbytes, &d, &err);
    if (!st) st = attn_kv_cache_append(c.cache, &cnk, &cnv, &err);
    attn_tensor vk_view, vv_view;
    if (!st) st = attn_kv_cache_view(&vk_view, &vv_view, c.cache, 4, &err);
    check(st == ATTN_OK, "kv_cache_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
    if (!st) {
        ws_outputs co_out = {{co.data, cl.data}, {bytes_of(&co), bytes_of(&cl)}, 2};
        unsigned char *vend = (unsigned char *)vv_view.data + (size_t)(d.batch * d.heads * d.capacity * E) * 4;
        check_workspace_apart("kv_cache_attend", ws_cache_attend, &c, &co_out, cmem, cbytes + WS + 1, vend, vend - 1,
                              WS / 4, "the cache's values");
    }

    /* Paged keys and values through the caller's own view: its page table
     * is the call's. */
    enum { P = 4, PAGES = 4 };
    int64_t pg_shape[4] = {PAGES, 1, P, E}, pq_shape[3] = {3, 2, E}, pl_shape[2] = {3, 2};
    attn_tensor kp = make(ATTN_F32, 4, pg_shape), vp = make(ATTN_F32, 4, pg_shape);
    attn_tensor pq2 = make(ATTN_F32, 3, pq_shape), po = make(ATTN_F32, 3, pq_shape), plse = make(ATTN_F32, 2, pl_shape);
    int32_t *table = calloc(1, 4 * sizeof *table + WS + 1);
    table[0] = 2, table[1] = 0, table[2] = 3, table[3] = 1;
    static const int64_t lengths[2] = {5, 3}, cu_p[3] = {0, 2, 3};
    ws_args w = a;
    w.out = &po, w.lse = &plse, w.q = &pq2, w.cu_q = cu_p;
    w.view = attn_kv_paged_view_default();
    w.view.heads = 1, w.view.key_dim = E, w.view.value_dim = E, w.view.page_size = P, w.view.num_pages = PAGES;
    w.view.k_pages = kp.data, w.view.v_pages = vp.data, w.view.num_sequences = 2, w.view.lengths = lengths;
    w.view.page_table = table, w.view.table_stride = 2;
    ws_outputs wo = {{po.data, plse.data}, {bytes_of(&po), bytes_of(&plse)}, 2};
    unsigned char *tend = (unsigned char *)(table + 4);
    check_workspace_apart("kv_paged_attend", ws_paged_attend, &w, &wo, (unsigned char *)table, 16 + WS / 4 + 1, tend,
                          tend - 1, WS / 4, "the view's page table");
    attn_sdpa_plan_bytes(&pbytes, 2, &err);
    void *wmem = malloc(pbytes);
    attn_sdpa_options as_attend = attn_sdpa_options_default(); /* the options the unplanned call is given */
    st = attn_kv_paged_plan_init(&w.plan, wmem, pbytes, &pws, &po, &plse, &pq2, cu_p, &w.view, NULL, &as_attend, &err);
    check(st == ATTN_OK, "kv_paged_plan_init_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
    if (!st)
        check_workspace_apart("kv_paged_run", ws_paged_run, &w, &wo, (unsigned char *)table, 16 + pws + 1, tend,
                              tend - 1, pws, "the view's page table");
    free(wmem);

    /* The layer: its parameters, dout and cache are the call's. */
    enum { ME = 16, MH = 2, ML = 3 };
    int64_t mx[3] = {1, ML, ME}, mw[2] = {3 * ME, ME}, mb[1] = {3 * ME}, mo_w[2] = {ME, ME}, mo_b[1] = {ME};
    attn_tensor x = make(ATTN_F32, 3, mx), y = make(ATTN_F32, 3, mx), win = make_in_block(ATTN_F32, 2, mw, WS);
    attn_tensor bin = make(ATTN_F32, 1, mb), wout = make(ATTN_F32, 2, mo_w), bout = make(ATTN_F32, 1, mo_b);
    for (int64_t i = 0; i < 3 * ME * ME; i++) ((float *)win.data)[i] *= 0.25f;
    ws_args m = a;
    m.p = attn_mha_params_default();
    m.p.embed_dim = ME, m.p.num_heads = MH, m.p.in_proj_weight = &win, m.p.in_proj_bias = &bin;
    m.p.out_proj_weight = &wout, m.p.out_proj_bias = &bout;
    m.mo = attn_mha_options_default();
    m.mo.batch_first = 1;
    m.out = &y, m.q = m.k = m.v = &x;
    ws_outputs mout = {{y.data}, {bytes_of(&y)}, 1};
    attn_mha_workspace_size(&need, &y, NULL, &x, &x, &x, &m.p, &m.mo, &err);
    unsigned char *wend = (unsigned char *)win.data + bytes_of(&win);
    check_workspace_apart("mha", ws_mha, &m, &mout, win.data, bytes_of(&win) + need + 1, wend, wend - 1, need,
                          "in_proj_weight");
    /* The weights packed once (options->packed) are read by every product:
     * a workspace ending one byte into them is refused. */
    size_t wbytes = 0, pneed = 0;
    attn_mha_weights_bytes(&wbytes, &m.p, &err);
    unsigned char *wblock = calloc(1, WS + wbytes);
    attn_mha_weights *packed = NULL;
    st = attn_mha_weights_init(&packed, wblock + WS, wbytes, &m.p, &err);
    ws_args mp = m;
    mp.mo.packed = packed;
    if (!st) st = attn_mha_workspace_size(&pneed, &y, NULL, &x, &x, &x, &mp.p, &mp.mo, &err);
    check(st == ATTN_OK && pneed <= WS, "mha_weights_for_workspace_checks", "status %d (%s), %zu bytes", (int)st,
          st ? err.message : "", pneed);
    if (!st && pneed <= WS) {
        unsigned char *pstart = (unsigned char *)packed;
        check_workspace_apart("mha_packed", ws_mha, &mp, &mout, wblock, WS + wbytes, pstart - pneed, pstart - pneed + 1,
                              pneed, "options->packed (the packed weights)");
    }
    free(wblock);
    attn_tensor mdout = make_in_block(ATTN_F32, 3, mx, WS), dx = make(ATTN_F32, 3, mx);
    m.dout = &mdout, m.grad[0] = &dx;
    ws_outputs mbo = {{dx.data}, {bytes_of(&dx)}, 1};
    dend = (unsigned char *)mdout.data + bytes_of(&mdout);
    check_workspace_apart("mha_backward", ws_mha_backward, &m, &mbo, mdout.data, bytes_of(&mdout) + WS + 1, dend,
                          dend - 1, WS, "dout");
    attn_kv_cache_desc md = attn_kv_cache_desc_default();
    md.batch = 1, md.heads = MH, md.capacity = 8, md.key_dim = ME / MH, md.value_dim = ME / MH;
    attn_kv_cache_bytes(&cbytes, &md, &err);
    unsigned char *mmem = calloc(1, cbytes + WS + 1);
    st = attn_kv_cache_init(&m.cache, mmem, cbytes, &md, &err);
    m.mo.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (!st) st = attn_mha_cached(&y, &x, m.cache, &m.p, &m.mo, &err); /* a first step: the call's is the second */
    if (!st) st = attn_kv_cache_view(&vk_view, &vv_view, m.cache, 4, &err);
    check(st == ATTN_OK, "mha_cached_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
    if (!st) {
        m.length = attn_kv_cache_length(m.cache);
        attn_mha_cached_workspace_size(&need, &y, &x, m.cache, &m.p, &m.mo, &err);
        unsigned char *vend = (unsigned char *)vv_view.data + (size_t)(md.heads * md.capacity * md.value_dim) * 4;
        check_workspace_apart("mha_cached", ws_mha_cached, &m, &mout, mmem, cbytes + need + 1, vend, vend - 1, need,
                              "the cache's values");
    }

    /* A paged step of the layer: its offsets are the call's. */
    attn_kv_pages_desc pd = attn_kv_pages_desc_default();
    pd.heads = MH, pd.key_dim = pd.value_dim = ME / MH, pd.page_size = 16, pd.num_pages = 4, pd.max_sequences = 2;
    size_t poolb = 0;
    attn_kv_pages_bytes(&poolb, &pd, &err);
    void *poolmem = calloc(1, poolb);
    int64_t ids[2] = {0, 0}, xt[2] = {5, ME};
    int64_t *cu_x = calloc(1, 3 * sizeof *cu_x + WS + 1);
    cu_x[0] = 0, cu_x[1] = 2, cu_x[2] = 5;
    attn_tensor px = make(ATTN_F32, 2, xt), py = make(ATTN_F32, 2, xt);
    ws_args g = m;
    g.out = &py, g.q = &px, g.cu_q = cu_x, g.seqs = ids, g.batch = 2;
    g.mo = attn_mha_options_default();
    st = attn_kv_pages_init(&g.pool, poolmem, poolb, &pd, &err);
    for (int i = 0; i < 2 && !st; i++) st = attn_kv_pages_create(g.pool, &ids[i], &err);
    check(st == ATTN_OK, "kv_pages_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
    if (!st) {
        ws_outputs gout = {{py.data}, {bytes_of(&py)}, 1};
        unsigned char *xend = (unsigned char *)(cu_x + 3);
        check_workspace_apart("mha_paged", ws_mha_paged, &g, &gout, (unsigned char *)cu_x, 24 + WS / 4 + 1, xend,
                              xend - 1, WS / 4, "cu_seqlens");
    }
    /* The pool's header and bookkeeping are the pool's too, though no
     * region a view names holds them: the layer's append writes them, and
     * a workspace over them would leave the pool corrupt. The pool here
     * lies right after room for a workspace. */
    unsigned char *hblock = calloc(1, WS / 4 + poolb + 64);
    attn_kv_pages *hpool = NULL;
    st = attn_kv_pages_init(&hpool, hblock + WS / 4, poolb, &pd, &err);
    int64_t hids[2] = {0, 0};
    for (int i = 0; i < 2 && !st; i++) st = attn_kv_pages_create(hpool, &hids[i], &err);
    check(st == ATTN_OK && (unsigned char *)hpool >= hblock + WS / 4, "kv_pages_header_for_workspace_checks",
          "status %d (%s)", (int)st, st ? err.message : "");
    if (!st) {
        ws_args gh = g;
        gh.pool = hpool, gh.seqs = hids;
        ws_outputs gout = {{py.data}, {bytes_of(&py)}, 1};
        unsigned char *head = (unsigned char *)hpool;
        check_workspace_apart("mha_paged_pool_header", ws_mha_paged, &gh, &gout, hblock, WS / 4 + poolb + 64,
                              head - WS / 4, head - WS / 4 + 1, WS / 4, "the pool's memory");
        /* and attention over the pool's sequences (as a step leaves them,
         * with positions): q (5, MH, ME / MH) over MH KV heads */
        int64_t aq[3] = {5, MH, ME / MH}, al[2] = {5, MH};
        attn_tensor hq = make(ATTN_F32, 3, aq), hao_out = make(ATTN_F32, 3, aq), hl = make(ATTN_F32, 2, al);
        st = attn_mha_paged(&py, &px, cu_x, hids, 2, hpool, NULL, &g.p, NULL, &err); /* positions to attend to */
        ws_args ha = gh;
        ha.out = &hao_out, ha.lse = &hl, ha.q = &hq, ha.o = attn_sdpa_options_default();
        ws_outputs hao = {{hao_out.data, hl.data}, {bytes_of(&hao_out), bytes_of(&hl)}, 2};
        check(st == ATTN_OK, "kv_pages_attend_for_workspace_checks", "status %d (%s)", (int)st, st ? err.message : "");
        if (!st)
            check_workspace_apart("kv_pages_attend_pool_header", ws_pages_attend, &ha, &hao, hblock,
                                  WS / 4 + poolb + 64, head - WS / 4, head - WS / 4 + 1, WS / 4, "the pool's memory");
        free(hq.data), free(hao_out.data), free(hl.data);
    }
    free(hblock);
    free(poolmem), free(cu_x), free(px.data), free(py.data);

    attn_tensor *all[] = {&q, &k, &v, &out, &lse, &q16, &out16, &dout, &dq, &dk, &vq, &vk, &vv, &vo, &vl, &vdo, &vdq,
                          &vdk, &cnk, &cnv, &cq, &co, &cl, &kp, &vp, &pq2, &po, &plse, &x, &y, &win, &bin, &wout, &bout,
                          &mdout, &dx};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(cu_k), free(pblock), free(cmem), free(table), free(mmem);
}

/* A 16-bit call's outputs are written from C-order f32 copies, so the
 * checks of the f32 call see only the copies: the caller's own out (and a
 * 16-bit gradient) must still be refused with a stride 0 over a dimension
 * of size > 1, or rows folded onto each other, as an f32 out is. attn_sdpa,
 * its workspace size, attn_sdpa_plan_init and attn_sdpa_backward took such
 * a 16-bit out and wrote several results into one element (fuzz_api found
 * it; tests/fuzz/regressions/api/half_out_stride_0). Nothing is written. */
static void test_half_outputs_writable(void) {
    static uint16_t q[64], k[64], v[64], out[64], dout[64], g[3][64];
    static float lse[16];
    static unsigned char plan_memory[1 << 14];
    attn_error err;
    static const attn_dtype DT[2] = {ATTN_F16, ATTN_BF16};
    int64_t sh[2] = {8, 4}, sl[1] = {8};
    const int64_t bcast[2] = {4, 0}, fold[2] = {2, 1};
    const int64_t *bad[2] = {bcast, fold};
    static const char *const WHY[2] = {"has stride 0 in dimension 1", "that put two of its elements in one place"};
    for (int i = 0; i < 64; i++) {
        float x = (float)(i % 7 - 3) / 4;
        q[i] = attn_f32_to_f16(x), k[i] = attn_f32_to_f16(-x), v[i] = attn_f32_to_f16(x / 2), dout[i] = q[i];
    }
    for (int d = 0; d < 2; d++)
        for (int b = 0; b < 2; b++) {
            char name[64];
            attn_tensor tq, tk, tv, to, tl, td, tg[3];
            attn_tensor_init(&tq, q, DT[d], 2, sh, NULL, NULL);
            attn_tensor_init(&tk, k, ATTN_F16, 2, sh, NULL, NULL);
            attn_tensor_init(&tv, v, ATTN_F16, 2, sh, NULL, NULL);
            attn_tensor_init(&to, out, DT[d], 2, sh, bad[b], NULL);
            attn_tensor_init(&tl, lse, ATTN_F32, 1, sl, NULL, NULL);
            memset(out, 0x5a, sizeof out);
            snprintf(name, sizeof name, "half_out_writable_%s_%s", attn_dtype_name(DT[d]), b ? "folded" : "stride0");
            check_status(attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, NULL, &err), &err, ATTN_ERR_STRIDE, WHY[b], name);
            int untouched = 1;
            for (size_t i = 0; i < sizeof out; i++) untouched = untouched && ((unsigned char *)out)[i] == 0x5a;
            check(untouched, "half_out_refused_untouched", "%s: out was written", name);
            size_t bytes, ws;
            strcat(name, "_size");
            check_status(attn_sdpa_workspace_size(&bytes, &to, &tl, NULL, &tq, &tk, &tv, NULL, &err), &err,
                         ATTN_ERR_STRIDE, WHY[b], name);
            attn_sdpa_plan *plan;
            size_t pb = 0;
            attn_sdpa_plan_bytes(&pb, 0, NULL);
            snprintf(name, sizeof name, "half_out_writable_%s_%s_plan", attn_dtype_name(DT[d]), b ? "folded" : "stride0");
            check_status(pb <= sizeof plan_memory
                             ? attn_sdpa_plan_init(&plan, plan_memory, pb, &ws, &to, &tl, &tq, &tk, &tv, NULL, &err)
                             : ATTN_ERR_WORKSPACE,
                         &err, ATTN_ERR_STRIDE, WHY[b], name);
            /* the backward's 16-bit gradients likewise (dq in q's dtype, dk and dv f16 as k and v) */
            attn_tensor_init(&to, out, DT[d], 2, sh, NULL, NULL);
            check_status(attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, NULL, &err), &err, ATTN_OK, "", "half_out_forward");
            attn_tensor_init(&td, dout, DT[d], 2, sh, NULL, NULL);
            for (int gi = 0; gi < 3; gi++) {
                for (int t = 0; t < 3; t++)
                    attn_tensor_init(&tg[t], g[t], t ? ATTN_F16 : DT[d], 2, sh, t == gi ? bad[b] : NULL, NULL);
                memset(g, 0x5a, sizeof g);
                snprintf(name, sizeof name, "half_grad_writable_%s_%s_%s", attn_dtype_name(DT[d]),
                         b ? "folded" : "stride0", gi == 0 ? "dq" : gi == 1 ? "dk" : "dv");
                check_status(attn_sdpa_backward(&tg[0], &tg[1], &tg[2], NULL, &td, &tq, &tk, &tv, &to, &tl, NULL, &err),
                             &err, ATTN_ERR_STRIDE, WHY[b], name);
                untouched = 1;
                for (size_t i = 0; i < sizeof g; i++) untouched = untouched && ((unsigned char *)g)[i] == 0x5a;
                check(untouched, "half_grad_refused_untouched", "%s: a gradient was written", name);
            }
        }
    /* What the f32 call takes, the 16-bit one takes too: stride 0 over a
     * dimension of size 1 (the result bitwise out in C order), and any
     * strides on an empty out (no query), forward and backward. */
    for (int d = 0; d < 2; d++) {
        int64_t one[2] = {1, 4}, none[2] = {0, 4}, l1[1] = {1}, l0[1] = {0};
        const int64_t zero_row[2] = {0, 1}, all_zero[2] = {0, 0}; /* all_zero: refused on a non-empty out */
        static uint16_t ref[4], dref[3][64];
        attn_tensor tq, tk, tv, to, tl, td, tg[3];
        attn_tensor_init(&tq, q, DT[d], 2, one, NULL, NULL);
        attn_tensor_init(&tk, k, ATTN_F16, 2, sh, NULL, NULL);
        attn_tensor_init(&tv, v, ATTN_F16, 2, sh, NULL, NULL);
        attn_tensor_init(&tl, lse, ATTN_F32, 1, l1, NULL, NULL);
        attn_tensor_init(&to, ref, DT[d], 2, one, NULL, NULL);
        attn_status s1 = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, NULL, &err);
        attn_tensor_init(&to, out, DT[d], 2, one, zero_row, NULL);
        memset(out, 0x5a, sizeof out);
        attn_status s2 = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, NULL, &err);
        check(!s1 && !s2 && !memcmp(ref, out, sizeof ref), "half_out_size1_stride0_taken", "%s: status %d %d (%s)",
              attn_dtype_name(DT[d]), (int)s1, (int)s2, err.message);
        attn_tensor_init(&td, dout, DT[d], 2, one, NULL, NULL);
        for (int t = 0; t < 3; t++) attn_tensor_init(&tg[t], dref[t], t ? ATTN_F16 : DT[d], 2, t ? sh : one, NULL, NULL);
        s1 = attn_sdpa_backward(&tg[0], &tg[1], &tg[2], NULL, &td, &tq, &tk, &tv, &to, &tl, NULL, &err);
        attn_tensor_init(&tg[0], g[0], DT[d], 2, one, zero_row, NULL);
        for (int t = 1; t < 3; t++) attn_tensor_init(&tg[t], g[t], ATTN_F16, 2, sh, NULL, NULL);
        memset(g, 0x5a, sizeof g);
        s2 = attn_sdpa_backward(&tg[0], &tg[1], &tg[2], NULL, &td, &tq, &tk, &tv, &to, &tl, NULL, &err);
        check(!s1 && !s2 && !memcmp(dref[0], g[0], 4 * sizeof g[0][0]), "half_dq_size1_stride0_taken",
              "%s: status %d %d (%s)", attn_dtype_name(DT[d]), (int)s1, (int)s2, err.message);
        attn_tensor_init(&tq, q, DT[d], 2, none, NULL, NULL);
        attn_tensor_init(&to, out, DT[d], 2, none, all_zero, NULL);
        attn_tensor_init(&tl, lse, ATTN_F32, 1, l0, NULL, NULL);
        s1 = attn_sdpa(&to, &tl, NULL, &tq, &tk, &tv, NULL, &err);
        check(!s1, "half_out_empty_any_strides_taken", "%s: status %d (%s)", attn_dtype_name(DT[d]), (int)s1,
              err.message);
        attn_tensor_init(&td, dout, DT[d], 2, none, NULL, NULL);
        attn_tensor_init(&tg[0], g[0], DT[d], 2, none, all_zero, NULL);
        s1 = attn_sdpa_backward(&tg[0], &tg[1], &tg[2], NULL, &td, &tq, &tk, &tv, &to, &tl, NULL, &err);
        check(!s1, "half_dq_empty_any_strides_taken", "%s: status %d (%s)", attn_dtype_name(DT[d]), (int)s1,
              err.message);
    }
}

int main(void) {
    rng_state = test_seed(TENSORS_SEED); /* seed.h: other inputs under ATTN_TEST_SEED */
    test_num_threads_env();
    test_basics();
    test_dtype_names_and_formats();
    test_tuning();
    test_documented_errors();
    test_additive();
    test_kernel_walk();
    test_rope_in_attention();
    test_sdpa_errors();
    test_kernels_agree();
    test_merge();
    test_nonfinite_scores();
    test_options_version();
    test_versioned_init();
    test_versioned_helpers();
    test_mask_dtypes();
    test_numerics();
    test_strided();
    test_npy();
    test_scores();
    test_toy();
    test_explain();
    test_scaling();
    test_half();
    test_half_outputs_writable();
    test_kv_cache();
    test_kv_cache_paged();
    test_mha();
    test_mha_self_attention_gradients();
    test_aliasing();
    test_plan_refuses_other_layout();
    /* last: they draw from the random stream the tests above were tuned on */
    test_mha_packed();
    test_mha_half_weights();
    test_measuring_without_data();
    test_workspace_apart();
    /* Every error code is reached by some test above. */
    int missing = -1;
    for (int c = 0; c < ATTN_STATUS_COUNT; c++) /* ATTN_ERR_COMM: libattn-mpi's, tested by tests/test_mpi.c */
        if (!status_seen[c] && c != ATTN_ERR_COMM) missing = c;
    check(missing < 0, "every_status_reached", "no test produced status %d (%s)", missing,
          attn_strerror((attn_status)missing));
    return n_failed ? 1 : 0;
}
