/* test_edges.c -- the C API at the edges of its integer ranges: options and
 * strides that the header accepts (a window of any int64 > 0, pieces of a
 * sequence of INT64_MAX positions) must give the right answer, and those it
 * refuses (a stride of INT64_MIN, RoPE positions past 2^53) must be refused
 * before any arithmetic on them can overflow; and f64 values near DBL_MAX,
 * whose weighted mean is finite. Built plain and under
 * UndefinedBehaviorSanitizer (build/asan/test_edges), which turns any such
 * overflow into a failure. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "seed.h"

/* A small problem: q (H, L, E), k and v (H, S, E), values in [-1, 1). */
typedef struct problem {
    attn_dtype dt;
    int64_t H, L, S, E;
    double *qd, *kd, *vd, *od, *ld; /* f64 storage, or f32 in the same bytes */
    attn_tensor q, k, v, out, lse;
} problem;

static void fill(void *p, attn_dtype dt, int64_t n, unsigned seed) {
    seed = (unsigned)test_seed(seed); /* seed.h: other values under ATTN_TEST_SEED */
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        double x = (double)(seed >> 8 & 0xffff) / 32768.0 - 1.0;
        if (dt == ATTN_F64) ((double *)p)[i] = x;
        else ((float *)p)[i] = (float)x;
    }
}

static void make(problem *p, attn_dtype dt, int64_t H, int64_t L, int64_t S, int64_t E) {
    *p = (problem){.dt = dt, .H = H, .L = L, .S = S, .E = E};
    p->qd = calloc((size_t)(H * L * E), 8), p->kd = calloc((size_t)(H * S * E), 8);
    p->vd = calloc((size_t)(H * S * E), 8), p->od = calloc((size_t)(H * L * E), 8), p->ld = calloc((size_t)(H * L), 8);
    fill(p->qd, dt, H * L * E, 1), fill(p->kd, dt, H * S * E, 2), fill(p->vd, dt, H * S * E, 3);
    int64_t qs[3] = {H, L, E}, ks[3] = {H, S, E};
    attn_tensor_init(&p->q, p->qd, dt, 3, qs, NULL, NULL);
    attn_tensor_init(&p->k, p->kd, dt, 3, ks, NULL, NULL);
    attn_tensor_init(&p->v, p->vd, dt, 3, ks, NULL, NULL);
    attn_tensor_init(&p->out, p->od, dt, 3, qs, NULL, NULL);
    attn_tensor_init(&p->lse, p->ld, dt, 2, qs, NULL, NULL);
}

static void release(problem *p) { free(p->qd), free(p->kd), free(p->vd), free(p->od), free(p->ld); }

static size_t out_bytes(const problem *p) { return (size_t)(p->H * p->L * p->E) * attn_dtype_size(p->dt); }

/* A window wider than any row's keys changes nothing: for windows up to
 * INT64_MAX, with a negative causal offset (bottom-right, L > S), the
 * output is bitwise that of the same call without a window. */
static void test_huge_windows(void) {
    static const int64_t WINDOWS[] = {INT64_MAX, INT64_MAX - 1, (int64_t)1 << 62, ((int64_t)1 << 32) + 7};
    static const char *const WNAMES[] = {"INT64_MAX", "INT64_MAX-1", "2^62", "2^32+7"};
    static const struct { attn_dtype dt; int64_t L, S; const char *what; } CASES[] = {
        {ATTN_F32, 40, 7, "f32_flash_L_gt_S"},   {ATTN_F64, 40, 7, "f64_exact_L_gt_S"},
        {ATTN_F32, 3, 2100, "f32_decode"},       {ATTN_F32, 7, 40, "f32_flash_L_lt_S"},
    };
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
        for (int causal = ATTN_CAUSAL_TOP_LEFT; causal <= ATTN_CAUSAL_BOTTOM_RIGHT; causal++) {
            problem p;
            make(&p, CASES[c].dt, 2, CASES[c].L, CASES[c].S, 8);
            attn_sdpa_options o = attn_sdpa_options_default();
            o.causal = (attn_causal)causal;
            attn_error err;
            attn_status st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
            void *want = malloc(out_bytes(&p));
            memcpy(want, p.od, out_bytes(&p));
            for (size_t w = 0; w < sizeof WINDOWS / sizeof *WINDOWS && st == ATTN_OK; w++) {
                char name[128];
                snprintf(name, sizeof name, "window_%s_%s_%s", CASES[c].what,
                         causal == ATTN_CAUSAL_TOP_LEFT ? "top_left" : "bottom_right", WNAMES[w]);
                o.window = WINDOWS[w];
                memset(p.od, 0, out_bytes(&p));
                attn_status ws = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
                check(ws == ATTN_OK && memcmp(p.od, want, out_bytes(&p)) == 0, name, "%s",
                      ws ? err.message : "output differs from the call without a window");
            }
            if (st) check(0, "window_reference_call", "%s", err.message);
            free(want);
            release(&p);
        }
}

/* The backward pass under the same huge windows: the gradients are those
 * without a window. */
static void test_huge_window_backward(void) {
    for (int f64 = 0; f64 < 2; f64++) {
        problem p;
        make(&p, f64 ? ATTN_F64 : ATTN_F32, 1, 33, 5, 4);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_error err;
        size_t es = attn_dtype_size(p.dt);
        void *dout = malloc((size_t)(33 * 4) * es), *g[2][3];
        fill(dout, p.dt, 33 * 4, 9);
        attn_tensor dq, dk, dv, dot;
        int64_t qs[3] = {1, 33, 4}, ks[3] = {1, 5, 4};
        attn_tensor_init(&dot, dout, p.dt, 3, qs, NULL, NULL);
        attn_status st = ATTN_OK;
        for (int pass = 0; pass < 2; pass++) {
            o.window = pass ? INT64_MAX : 0;
            for (int i = 0; i < 3; i++) g[pass][i] = calloc((size_t)(33 * 4), es);
            attn_tensor_init(&dq, g[pass][0], p.dt, 3, qs, NULL, NULL);
            attn_tensor_init(&dk, g[pass][1], p.dt, 3, ks, NULL, NULL);
            attn_tensor_init(&dv, g[pass][2], p.dt, 3, ks, NULL, NULL);
            if (!st) st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
            if (!st) st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &dot, &p.q, &p.k, &p.v, &p.out, &p.lse, &o, &err);
        }
        int same = !st && !memcmp(g[0][0], g[1][0], (size_t)(33 * 4) * es) &&
                   !memcmp(g[0][1], g[1][1], (size_t)(5 * 4) * es) && !memcmp(g[0][2], g[1][2], (size_t)(5 * 4) * es);
        check(same, f64 ? "window_INT64_MAX_backward_f64" : "window_INT64_MAX_backward_f32", "%s",
              st ? err.message : "gradients differ from the call without a window");
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < 3; i++) free(g[pass][i]);
        free(dout);
        release(&p);
    }
}

/* A stride of INT64_MIN, whose magnitude has no int64, in any dimension of
 * any tensor of a call: ATTN_ERR_OVERFLOW, nothing written. */
static void test_int64_min_strides(void) {
    for (int which = 0; which < 5; which++)
        for (int d = 0; d < 3; d++) {
            problem p;
            make(&p, ATTN_F32, 2, 3, 4, 5);
            attn_tensor *t[5] = {&p.q, &p.k, &p.v, &p.out, &p.lse};
            static const char *const NAMES[5] = {"q", "k", "v", "out", "lse"};
            if (d >= t[which]->rank) {
                release(&p);
                continue;
            }
            t[which]->strides[d] = INT64_MIN;
            attn_error err;
            attn_status st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, NULL, &err);
            char name[64];
            snprintf(name, sizeof name, "stride_INT64_MIN_%s_dim%d", NAMES[which], d);
            int untouched = 1;
            for (int64_t i = 0; i < 2 * 3 * 5; i++) untouched &= ((float *)p.od)[i] == 0;
            check(st == ATTN_ERR_OVERFLOW && untouched, name, "status %d (%s)", st, st ? err.message : "accepted");
            release(&p);
        }
    /* An empty tensor's strides are checked too: nothing of it is read, but
     * a caller's loop over its first dimension still forms the addresses of
     * its slices. */
    {
        float one[1] = {0};
        attn_tensor es, ed;
        int64_t shape[2] = {3, 0}, huge[2] = {INT64_MAX / 2, 1};
        attn_tensor_init(&es, one, ATTN_F32, 2, shape, huge, NULL);
        attn_tensor_init(&ed, one, ATTN_F32, 2, shape, NULL, NULL);
        attn_error ee;
        attn_status st2 = attn_tensor_convert(&ed, &es, &ee);
        check(st2 == ATTN_ERR_OVERFLOW, "empty_tensor_strides_still_checked", "status %d: %s", st2, st2 ? ee.message : "");
    }
    /* A mask's stride too, and the backward's gradients. */
    problem p;
    make(&p, ATTN_F32, 1, 3, 4, 5);
    unsigned char m[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    attn_tensor mask;
    int64_t ms[2] = {3, 4}, bad[2] = {INT64_MIN, 1};
    attn_tensor_init(&mask, m, ATTN_BOOL, 2, ms, bad, NULL);
    attn_sdpa_options o = attn_sdpa_options_default();
    o.mask = &mask;
    attn_error err;
    attn_status st = attn_sdpa(&p.out, NULL, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_ERR_OVERFLOW, "stride_INT64_MIN_mask", "status %d", st);
    attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, NULL, &err);
    float g[60];
    attn_tensor dq = p.q;
    dq.data = g, dq.strides[0] = INT64_MIN;
    st = attn_sdpa_backward(&dq, NULL, NULL, NULL, &p.out, &p.q, &p.k, &p.v, &p.out, &p.lse, NULL, &err);
    check(st == ATTN_ERR_OVERFLOW, "stride_INT64_MIN_dq", "status %d", st);
    /* attn_tensor_convert walks a view element by element: a dimension of
     * size 1 may have any stride (it is never stepped over), here one near
     * INT64_MAX, which stepping one past the dimension's end would add to the
     * offset. */
    float three[3] = {1, 2, 3};
    double wide[3] = {0};
    attn_tensor src, dst;
    int64_t s31[2] = {3, 1}, st31[2] = {1, INT64_MAX - 1};
    attn_tensor_init(&src, three, ATTN_F32, 2, s31, st31, NULL);
    attn_tensor_init(&dst, wide, ATTN_F64, 2, s31, st31, NULL);
    st = attn_tensor_convert(&dst, &src, &err);
    check(st == ATTN_OK && wide[0] == 1 && wide[1] == 2 && wide[2] == 3, "convert_size_1_dimension_stride_INT64_MAX",
          "%s", st ? err.message : "values differ");
    release(&p);
}

/* A window's first key and the causal limit for pieces of a sequence of
 * INT64_MAX positions: the last L queries against the last S keys. */
static void test_pieces_at_int64_max(void) {
    problem p, whole;
    make(&p, ATTN_F64, 1, 4, 6, 4);
    make(&whole, ATTN_F64, 1, 4, 6, 4);
    attn_sdpa_options o = attn_sdpa_options_default(), ref = attn_sdpa_options_default();
    o.causal = ref.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    o.window = ref.window = 3;
    o.total_queries = o.total_keys = INT64_MAX;
    o.query_start = INT64_MAX - 4, o.key_start = INT64_MAX - 6;
    attn_error err;
    /* Keys before this piece lie outside every row's window of 3, so the
     * piece's result is that of the last 4 queries against the last 6 keys
     * alone (its lse is the piece's own, which the whole's equals here). */
    attn_status st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    attn_status sr = attn_sdpa(&whole.out, &whole.lse, NULL, &whole.q, &whole.k, &whole.v, &ref, &err);
    check(st == ATTN_OK && sr == ATTN_OK && !memcmp(p.od, whole.od, 4 * 4 * 8), "pieces_at_INT64_MAX_window",
          "%s", st || sr ? err.message : "differs from the same rows alone");
    /* RoPE's positions would pass 2^53 there: refused, not overflowed. */
    attn_rope_options rope = attn_rope_options_default();
    rope.position_offset = (int64_t)1 << 53;
    o.rope = &rope;
    st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_ERR_OPTION, "pieces_at_INT64_MAX_rope_refused", "status %d", st);
    o.total_queries = o.total_keys = 0, o.query_start = o.key_start = 0;
    rope.position_offset = ((int64_t)1 << 53) - 6;
    st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_OK, "rope_last_position_2^53_taken", "%s", st ? err.message : "");
    rope.position_offset = ((int64_t)1 << 53) - 5;
    st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_ERR_OPTION, "rope_position_past_2^53_refused", "status %d", st);
    /* A piece past its total: the message names the fields as attn.h spells
     * them (it once said "total_querys"). */
    o.rope = NULL;
    o.total_queries = 3;
    st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "4 queries passes total_queries 3"),
          "piece_past_total_queries_named", "status %d: %s", st, err.message);
    o.total_queries = 0, o.query_start = 0, o.total_keys = 0, o.key_start = -1;
    st = attn_sdpa(&p.out, &p.lse, NULL, &p.q, &p.k, &p.v, &o, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "key_start and total_keys must be >= 0"),
          "piece_negative_key_start_named", "status %d: %s", st, err.message);
    release(&p);
    release(&whole);
}

/* The layer over sequences of no rows: nothing is read, and no address of
 * a sequence is formed (one 2^62 bytes before its first would wrap the
 * address space, which UBSan reports). */
static void test_mha_empty_sequences(void) {
    double x[8] = {0}, w[16] = {0}, out[8] = {0};
    int64_t xs[3] = {0, 2, 4}, xst[3] = {4, -((int64_t)1 << 59), 1}, ws[2] = {4, 4};
    attn_tensor tx, tw, to;
    attn_tensor_init(&tx, x, ATTN_F64, 3, xs, xst, NULL);
    attn_tensor_init(&to, out, ATTN_F64, 3, xs, NULL, NULL);
    attn_tensor_init(&tw, w, ATTN_F64, 2, ws, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = 4, p.num_heads = 2;
    p.q_proj_weight = p.k_proj_weight = p.v_proj_weight = p.out_proj_weight = &tw;
    attn_error err;
    attn_status st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, NULL, &err);
    check(st == ATTN_OK || st == ATTN_ERR_SHAPE, "mha_sequences_of_no_rows", "status %d: %s", st, st ? err.message : "");
}

/* A tensor over a buffer of sentinel bytes (nothing may be written to it). */
static attn_tensor over(unsigned char *buf, attn_dtype dt, int rank, const int64_t *shape) {
    attn_tensor t;
    attn_tensor_init(&t, buf, dt, rank, shape, NULL, NULL);
    return t;
}

static int untouched(const unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != 0xab) return 0;
    return 1;
}

/* Size 0 (attn.h, "Dimensions of 0"): L = 0 and a batch dimension of 0
 * succeed and write nothing, through attn_sdpa, the reference and the
 * workspace's measure, in f32, f64 and bf16 q, with masks that broadcast
 * over L and an S of 0 beside L = 0; every other check still holds, and a
 * 0 anywhere else (E, Ev, the heads, an output with a 0 q has not, k with
 * 0 keys and v with some) is ATTN_ERR_SHAPE. Under ASan, no allocation of
 * 0 and no read or write. */
static void test_size_0(void) {
    static unsigned char buf[7][4096];
    memset(buf, 0xab, sizeof buf);
    attn_error err;
    int64_t q0[4] = {2, 3, 0, 8}, kv[4] = {2, 3, 5, 8}, l0[3] = {2, 3, 0}, w0[4] = {2, 3, 0, 5}, m0[2] = {0, 5},
            m1[2] = {1, 5}, b0[4] = {0, 3, 4, 8}, kb1[4] = {1, 3, 5, 8}, ob0[4] = {0, 3, 4, 8}, kv0[4] = {2, 3, 0, 8};
    for (int f = 0; f < 3; f++) {
        attn_dtype dt = f == 0 ? ATTN_F32 : f == 1 ? ATTN_F64 : ATTN_BF16, kdt = f == 1 ? ATTN_F64 : ATTN_F32;
        attn_dtype ldt = f == 1 ? ATTN_F64 : ATTN_F32;
        const char *tag = f == 0 ? "f32" : f == 1 ? "f64" : "bf16_q";
        attn_tensor q = over(buf[0], dt, 4, q0), k = over(buf[1], kdt, 4, kv), v = over(buf[2], kdt, 4, kv),
                    out = over(buf[3], dt, 4, q0), lse = over(buf[4], ldt, 3, l0), w = over(buf[5], kdt, 4, w0),
                    mask = over(buf[6], ATTN_BOOL, 2, m0), mask1 = over(buf[6], ldt, 2, m1);
        attn_sdpa_options o = attn_sdpa_options_default();
        o.mask = &mask, o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        size_t bytes = 123;
        attn_status st = attn_sdpa(&out, &lse, f == 2 ? NULL : &w, &q, &k, &v, &o, &err);
        o.mask = &mask1;
        if (!st) st = attn_sdpa_reference(&out, &lse, f == 2 ? NULL : &w, &q, &k, &v, &o, &err);
        if (!st) st = attn_sdpa_workspace_size(&bytes, &out, &lse, NULL, &q, &k, &v, &o, &err);
        attn_tensor kz = over(buf[1], kdt, 4, kv0), vz = over(buf[2], kdt, 4, kv0);
        int64_t wz[4] = {2, 3, 0, 0};
        attn_tensor wzt = over(buf[5], kdt, 4, wz);
        o.mask = NULL;
        if (!st) st = attn_sdpa(&out, NULL, f == 2 ? NULL : &wzt, &q, &kz, &vz, &o, &err); /* L = S = 0 */
        attn_tensor qb = over(buf[0], dt, 4, b0), kb = over(buf[1], kdt, 4, kb1), ob = over(buf[3], dt, 4, ob0);
        if (!st) st = attn_sdpa(&ob, NULL, NULL, &qb, &kb, &kb, &o, &err); /* batch 0, k broadcast */
        char name[64];
        snprintf(name, sizeof name, "size_0_l_and_batch_write_nothing_%s", tag);
        check(st == ATTN_OK && bytes == 0 && untouched(buf[0], sizeof buf), name, "status %d (%s), bytes %zu",
              (int)st, st ? err.message : "", bytes);
    }
    attn_tensor q = over(buf[0], ATTN_F32, 4, q0), k = over(buf[1], ATTN_F32, 4, kv), out = over(buf[3], ATTN_F32, 4, q0);
    attn_sdpa_options o = attn_sdpa_options_default();
    {
        /* Outputs laid out as NumPy lays out an empty array, stride 0 in the
         * dimensions before its 0 (np.empty((2, 3, 0, 8)).strides): nothing
         * is written, so they are taken (attn.sdpa on no queries raised
         * StrideError for the out it made itself). */
        int64_t so[4] = {0, 0, 8, 1}, sl[3] = {0, 0, 1}, sw[4] = {0, 0, 5, 1};
        attn_tensor zo, zl, zw;
        attn_tensor_init(&zo, buf[3], ATTN_F32, 4, q0, so, NULL);
        attn_tensor_init(&zl, buf[4], ATTN_F32, 3, l0, sl, NULL);
        attn_tensor_init(&zw, buf[5], ATTN_F32, 4, w0, sw, NULL);
        size_t bytes = 123;
        attn_status st = attn_sdpa(&zo, &zl, &zw, &q, &k, &k, &o, &err);
        if (!st) st = attn_sdpa_reference(&zo, &zl, &zw, &q, &k, &k, &o, &err);
        if (!st) st = attn_sdpa_workspace_size(&bytes, &zo, &zl, &zw, &q, &k, &k, &o, &err);
        check(st == ATTN_OK && bytes == 0 && untouched(buf[0], sizeof buf), "size_0_outputs_with_numpy_strides",
              "status %d (%s), bytes %zu", (int)st, st ? err.message : "", bytes);
        /* ... and the checks that hold at size 1 still hold: an f64 out */
        attn_tensor_init(&zo, buf[3], ATTN_F64, 4, q0, so, NULL);
        st = attn_sdpa(&zo, NULL, NULL, &q, &k, &k, &o, &err);
        check(st == ATTN_ERR_DTYPE, "size_0_outputs_with_numpy_strides_checked", "status %d: %s", (int)st,
              st ? err.message : "");
    }
    struct {
        const char *name;
        int64_t q[4], k[4], v[4], out[4];
        attn_status want;
        const char *needle;
    } bad[] = {
        {"size_0_e_refused", {2, 3, 4, 0}, {2, 3, 5, 0}, {2, 3, 5, 8}, {2, 3, 4, 8}, ATTN_ERR_SHAPE, "q has shape"},
        {"size_0_ev_refused", {2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 0}, {2, 3, 4, 0}, ATTN_ERR_SHAPE, "has shape"},
        {"size_0_s_with_queries_and_l_in_k_refused", {2, 3, 4, 8}, {2, 3, 0, 8}, {2, 3, 5, 8}, {2, 3, 4, 8}, ATTN_ERR_SHAPE, "v has shape"},
        {"size_0_heads_refused", {2, 0, 0, 8}, {2, 0, 5, 8}, {2, 0, 5, 8}, {2, 0, 0, 8}, ATTN_ERR_SHAPE, "q has shape"},
        {"size_0_out_l_not_q_refused", {2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 0, 8}, ATTN_ERR_SHAPE, "out has shape"},
        {"size_0_q_l_not_out_refused", {2, 3, 0, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 4, 8}, ATTN_ERR_SHAPE, "out has shape"},
        {"size_0_batch_against_2_refused", {0, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, {0, 3, 4, 8}, ATTN_ERR_SHAPE, ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        attn_tensor bq = over(buf[0], ATTN_F32, 4, bad[i].q), bk = over(buf[1], ATTN_F32, 4, bad[i].k),
                    bv = over(buf[2], ATTN_F32, 4, bad[i].v), bo = over(buf[3], ATTN_F32, 4, bad[i].out);
        attn_status st = attn_sdpa(&bo, NULL, NULL, &bq, &bk, &bv, &o, &err);
        check(st == bad[i].want && strstr(err.message, bad[i].needle), bad[i].name, "status %d: %s", (int)st,
              st ? err.message : "");
    }
    /* A 0 beside dimensions whose product overflows int64: read as 1 the
     * product still overflows, so the usual checks refuse it (it once recursed:
     * the check of the call on its stand-ins found the same 0 again). */
    int64_t huge[4] = {0, (int64_t)1 << 31, (int64_t)1 << 31, 8};
    attn_tensor hk = over(buf[1], ATTN_F32, 4, (int64_t[4]){2, 3, 5, 8}), ho = over(buf[3], ATTN_F32, 4, (int64_t[4]){2, 3, 4, 8});
    attn_tensor hq = over(buf[0], ATTN_F32, 4, (int64_t[4]){1, 1, 1, 1}); /* then by hand: attn_tensor_init refuses it */
    for (int d = 0; d < 4; d++) hq.shape[d] = huge[d], hq.strides[d] = 1;
    attn_status hst = attn_sdpa(&ho, NULL, NULL, &hq, &hk, &hk, &o, &err);
    check(hst == ATTN_ERR_SHAPE || hst == ATTN_ERR_OVERFLOW, "size_0_beside_overflowing_dims_refused", "status %d: %s", (int)hst,
          hst ? err.message : "");
    int64_t lbad[3] = {2, 3, 4};
    attn_tensor lse = over(buf[4], ATTN_F32, 3, lbad), o64 = over(buf[3], ATTN_F64, 4, q0);
    attn_status st = attn_sdpa(&out, &lse, NULL, &q, &k, &k, &o, &err);
    check(st == ATTN_ERR_SHAPE && strstr(err.message, "lse has shape"), "size_0_lse_with_rows_refused", "status %d: %s",
          (int)st, st ? err.message : "");
    st = attn_sdpa(&o64, NULL, NULL, &q, &k, &k, &o, &err);
    check(st == ATTN_ERR_DTYPE, "size_0_other_checks_hold_dtype", "status %d: %s", (int)st, st ? err.message : "");
    o.dropout_p = 2;
    st = attn_sdpa(&out, NULL, NULL, &q, &k, &k, &o, &err);
    check(st == ATTN_ERR_OPTION, "size_0_other_checks_hold_dropout", "status %d: %s", (int)st, st ? err.message : "");
    check(untouched(buf[0], sizeof buf), "size_0_refusals_write_nothing", "a sentinel byte changed");
}

static int zero_bytes(const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i]) return 0;
    return 1;
}

/* S = 0 with queries (PyTorch: softmax over no key, then a product with no
 * row of v, gives 0): out 0 and lse -inf, or with sinks each head's sink
 * (attn_sdpa's rule for a row no key takes part in), in f32, f64 and bf16
 * q, through attn_sdpa and the reference; the weights (L, 0) untouched and
 * 0 bytes of workspace. */
static void test_size_0_no_keys(void) {
    attn_error err;
    int64_t qs[4] = {2, 3, 4, 8}, ks[4] = {2, 3, 0, 8}, ls[3] = {2, 3, 4}, ws[4] = {2, 3, 4, 0}, hs[1] = {3};
    static unsigned char kbuf[64], wbuf[64];
    double sinks[3] = {0.5, -1.0, 2.0};
    for (int f = 0; f < 3; f++) {
        attn_dtype dt = f == 0 ? ATTN_F32 : f == 1 ? ATTN_F64 : ATTN_BF16, kdt = f == 1 ? ATTN_F64 : ATTN_F32;
        attn_dtype ldt = f == 1 ? ATTN_F64 : ATTN_F32;
        for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
            double qd[192], od[192], ld[24];
            memset(kbuf, 0xab, sizeof kbuf), memset(wbuf, 0xab, sizeof wbuf);
            memset(od, 0x7f, sizeof od), memset(ld, 0x7f, sizeof ld), memset(qd, 0, sizeof qd);
            attn_tensor q = over((unsigned char *)qd, dt, 4, qs), k = over(kbuf, kdt, 4, ks),
                        out = over((unsigned char *)od, dt, 4, qs), lse = over((unsigned char *)ld, ldt, 3, ls),
                        w = over(wbuf, kdt, 4, ws), tsinks;
            attn_tensor_init(&tsinks, sinks, ATTN_F64, 1, hs, NULL, NULL);
            attn_sdpa_options o = attn_sdpa_options_default();
            if (with_sinks) o.sinks = &tsinks;
            size_t bytes = 123;
            attn_status st = attn_sdpa_workspace_size(&bytes, &out, &lse, NULL, &q, &k, &k, &o, &err);
            if (!st) st = attn_sdpa(&out, &lse, f == 2 ? NULL : &w, &q, &k, &k, &o, &err);
            size_t out_bytes = 192 * attn_dtype_size(dt); /* 0.0 is all zero bits in every float dtype */
            int ok = !st && bytes == 0 && untouched(kbuf, sizeof kbuf) && untouched(wbuf, sizeof wbuf) &&
                     zero_bytes(od, out_bytes);
            for (int64_t i = 0; ok && i < 24; i++) {
                double want = with_sinks ? sinks[i / 4 % 3] : -INFINITY;
                double got = ldt == ATTN_F64 ? ld[i] : ((float *)ld)[i];
                ok = got == want; /* the sinks are exact in f32 */
            }
            memset(od, 0x7f, sizeof od);
            if (ok) st = attn_sdpa_reference(&out, NULL, NULL, &q, &k, &k, &o, &err);
            ok = ok && !st && zero_bytes(od, out_bytes);
            char name[80];
            snprintf(name, sizeof name, "size_0_no_keys_out_0_lse_%s_%s", with_sinks ? "sink" : "minus_inf",
                     f == 0 ? "f32" : f == 1 ? "f64" : "bf16_q");
            check(ok, name, "status %d (%s)", (int)st, st ? err.message : "");
        }
    }
}

/* attn_sdpa_backward with a dimension of 0 gives what PyTorch's autograd
 * gives: every gradient that has an element is 0 (the forward's out is 0
 * or has none), those without one are untouched: L = 0 (dk, dv and a mask
 * broadcast over L get 0), S = 0 (dq 0), a batch of 0 (with k and v
 * broadcast from a batch of 1: their gradients 0), in f32, f64 and bf16 q;
 * 0 bytes of workspace; a 0 where none is taken refused. */
static void test_size_0_backward(void) {
    attn_error err;
    struct {
        const char *name;
        int64_t q[4], k[4], m[4];
    } cases[] = {
        {"no_queries", {2, 3, 0, 8}, {2, 3, 5, 8}, {1, 1, 1, 5}},
        {"no_keys", {2, 3, 4, 8}, {2, 3, 0, 8}, {1, 1, 4, 0}},
        {"batch_0_kv_broadcast", {0, 3, 4, 8}, {1, 3, 5, 8}, {1, 1, 4, 5}},
    };
    static unsigned char in[6][4096], sent[4][4096];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int f = 0; f < 3; f++) {
            attn_dtype dt = f == 0 ? ATTN_F32 : f == 1 ? ATTN_F64 : ATTN_BF16, kdt = f == 1 ? ATTN_F64 : ATTN_F32;
            attn_dtype ldt = f == 1 ? ATTN_F64 : ATTN_F32;
            memset(in, 0, sizeof in), memset(sent, 0xab, sizeof sent);
            int64_t os[4], ls[3];
            memcpy(os, cases[c].q, sizeof os), memcpy(ls, cases[c].q, sizeof ls);
            attn_tensor q = over(in[0], dt, 4, cases[c].q), k = over(in[1], kdt, 4, cases[c].k),
                        v = over(in[2], kdt, 4, cases[c].k), out = over(in[3], dt, 4, os), dout = over(in[4], dt, 4, os),
                        lse = over(in[5], ldt, 3, ls), mask = over(in[5] + 2048, ldt, 4, cases[c].m),
                        dq = over(sent[0], dt, 4, cases[c].q), dk = over(sent[1], kdt, 4, cases[c].k),
                        dv = over(sent[2], kdt, 4, cases[c].k), dm = over(sent[3], ldt, 4, cases[c].m);
            attn_sdpa_options o = attn_sdpa_options_default();
            o.mask = &mask;
            size_t bytes = 123;
            attn_status st = attn_sdpa_backward_workspace_size(&bytes, &dq, &dk, &dv, f == 2 ? NULL : &dm, &dout, &q,
                                                               &k, &v, &out, &lse, &o, &err);
            if (!st) st = attn_sdpa_backward(&dq, &dk, &dv, f == 2 ? NULL : &dm, &dout, &q, &k, &v, &out, &lse, &o, &err);
            int ok = !st && bytes == 0;
            attn_tensor *g[4] = {&dq, &dk, &dv, &dm};
            for (int i = 0; ok && i < 4; i++) {
                size_t sz = i == 3 && f == 2 ? 0 /* not asked for */
                                             : (size_t)attn_tensor_numel(g[i]) * attn_dtype_size(g[i]->dtype);
                for (size_t b = 0; ok && b < sizeof sent[i]; b++) ok = sent[i][b] == (b < sz ? 0 : 0xab);
            }
            char name[80];
            snprintf(name, sizeof name, "size_0_backward_%s_%s", cases[c].name,
                     f == 0 ? "f32" : f == 1 ? "f64" : "bf16_q");
            check(ok, name, "status %d (%s), bytes %zu", (int)st, st ? err.message : "", bytes);
        }
    /* dq with 1 where q has 0; a head count of 0: refused, nothing written */
    memset(sent, 0xab, sizeof sent);
    int64_t q0[4] = {2, 3, 0, 8}, q1[4] = {2, 3, 1, 8}, kv[4] = {2, 3, 5, 8}, h0[4] = {2, 0, 5, 8};
    attn_tensor q = over(in[0], ATTN_F32, 4, q0), k = over(in[1], ATTN_F32, 4, kv), out = over(in[3], ATTN_F32, 4, q0),
                lse = over(in[5], ATTN_F32, 3, q0), dq = over(sent[0], ATTN_F32, 4, q1), dk = over(sent[1], ATTN_F32, 4, kv);
    attn_status st = attn_sdpa_backward(&dq, &dk, NULL, NULL, &out, &q, &k, &k, &out, &lse, NULL, &err);
    check(st == ATTN_ERR_SHAPE && strstr(err.message, "dq has shape (2, 3, 1, 8) but it must be (2, 3, 0, 8)"),
          "size_0_backward_gradient_not_its_tensors_shape", "status %d: %s", (int)st, st ? err.message : "");
    attn_tensor kh = over(in[1], ATTN_F32, 4, h0), dkh = over(sent[1], ATTN_F32, 4, h0);
    st = attn_sdpa_backward(NULL, &dkh, NULL, NULL, &out, &q, &kh, &kh, &out, &lse, NULL, &err);
    check(st == ATTN_ERR_SHAPE && strstr(err.message, "never for the heads"), "size_0_backward_heads_refused",
          "status %d: %s", (int)st, st ? err.message : "");
    /* S = 0 with a dq of elements but NULL data: refused (the checks on the
     * measuring stand-ins take NULL data; dq was filled through NULL) */
    int64_t q2[4] = {2, 3, 4, 8}, k0[4] = {2, 3, 0, 8};
    attn_tensor qn = over(in[0], ATTN_F32, 4, q2), kn = over(in[1], ATTN_F32, 4, k0), on = over(in[3], ATTN_F32, 4, q2),
                ln = over(in[5], ATTN_F32, 3, q2), dqn = over(sent[0], ATTN_F32, 4, q2);
    dqn.data = NULL;
    st = attn_sdpa_backward(&dqn, NULL, NULL, NULL, &on, &qn, &kn, &kn, &on, &ln, NULL, &err);
    check(st == ATTN_ERR_NULL && strstr(err.message, "dq has NULL data"), "size_0_backward_gradient_without_data",
          "status %d: %s", (int)st, st ? err.message : "");
    check(untouched(sent[0], sizeof sent), "size_0_backward_refusals_write_nothing", "a sentinel byte changed");
}

/* A KV cache attended by no query (L = 0), as a step with no new token:
 * nothing written, the cache's own checks kept (a top-left causal mask is
 * still refused); an empty cache (S = 0) attended: out 0, lse -inf. */
static void test_size_0_cache(void) {
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 2, d.heads = 2, d.capacity = 16, d.key_dim = d.value_dim = 8;
    size_t bytes = 0;
    attn_kv_cache *cache = NULL;
    void *mem = NULL;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    if (!st && !(mem = calloc(1, bytes))) st = ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_kv_cache_init(&cache, mem, bytes, &d, &err);
    static float kv[2 * 2 * 3 * 8];
    int64_t ks[4] = {2, 2, 3, 8}, qs[4] = {2, 4, 0, 8}, ls[3] = {2, 4, 0};
    attn_tensor k;
    attn_tensor_init(&k, kv, ATTN_F32, 4, ks, NULL, NULL);
    /* an empty cache (S = 0) attended by 2 queries: out 0, lse -inf */
    static float q2[2 * 4 * 2 * 8], o2[2 * 4 * 2 * 8], l2[2 * 4 * 2];
    int64_t q2s[4] = {2, 4, 2, 8}, l2s[3] = {2, 4, 2};
    attn_tensor tq2, to2, tl2;
    attn_tensor_init(&tq2, q2, ATTN_F32, 4, q2s, NULL, NULL), attn_tensor_init(&to2, o2, ATTN_F32, 4, q2s, NULL, NULL);
    attn_tensor_init(&tl2, l2, ATTN_F32, 3, l2s, NULL, NULL);
    memset(o2, 0x7f, sizeof o2);
    attn_status st0 = st ? st : attn_kv_cache_attend(&to2, &tl2, &tq2, cache, NULL, &err);
    int ok0 = !st0 && zero_bytes(o2, sizeof o2);
    for (int i = 0; ok0 && i < 16; i++) ok0 = l2[i] == -INFINITY;
    check(ok0, "size_0_cache_attend_empty_cache_out_0", "status %d: %s", (int)st0, st0 ? err.message : "");
    if (!st) st = attn_kv_cache_append(cache, &k, &k, &err);
    static unsigned char buf[3][256];
    memset(buf, 0xab, sizeof buf);
    attn_tensor q = over(buf[0], ATTN_F32, 4, qs), out = over(buf[1], ATTN_F32, 4, qs),
                lse = over(buf[2], ATTN_F32, 3, ls);
    if (!st) st = attn_kv_cache_attend(&out, &lse, &q, cache, NULL, &err);
    check(!st && untouched(buf[0], sizeof buf), "size_0_cache_attend_no_queries", "status %d: %s", (int)st,
          st ? err.message : "");
    attn_sdpa_options o = attn_sdpa_options_default();
    o.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_status bad = cache ? attn_kv_cache_attend(&out, NULL, &q, cache, &o, &err) : ATTN_ERR_NULL;
    check(bad == ATTN_ERR_OPTION, "size_0_cache_attend_keeps_its_checks", "status %d: %s", (int)bad,
          bad ? err.message : "");
    free(mem);
}

/* The layer's step over a cache with no new token (x of L = 0), on an
 * empty cache and after a step of 2: succeeds, out has no element, the
 * cache's length stays. */
static void test_size_0_mha_cached(void) {
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 1, d.heads = 2, d.capacity = 8, d.key_dim = d.value_dim = 2;
    size_t bytes = 0;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    void *mem = st ? NULL : calloc(1, bytes);
    attn_kv_cache *c = NULL;
    if (!st) st = mem ? attn_kv_cache_init(&c, mem, bytes, &d, &err) : ATTN_ERR_NO_MEMORY;
    static float w[12 * 4], wo[16], x[2 * 4], out[2 * 4];
    for (int i = 0; i < 48; i++) w[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < 16; i++) wo[i] = (float)(i % 5) / 5.0f;
    int64_t ws[2] = {12, 4}, wos[2] = {4, 4};
    attn_tensor tw, two, tx, to;
    attn_tensor_init(&tw, w, ATTN_F32, 2, ws, NULL, NULL), attn_tensor_init(&two, wo, ATTN_F32, 2, wos, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = 4, p.num_heads = 2, p.in_proj_weight = &tw, p.out_proj_weight = &two;
    int64_t want[3] = {0, 2, 2}, got[3] = {-1, -1, -1};
    for (int step = 0; step < 3 && !st; step++) { /* 0 new tokens, 2, then 0 again */
        int64_t xs[3] = {step == 1 ? 2 : 0, 1, 4};
        attn_tensor_init(&tx, x, ATTN_F32, 3, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, xs, NULL, NULL);
        st = attn_mha_cached(&to, &tx, c, &p, NULL, &err);
        got[step] = attn_kv_cache_length(c);
    }
    check(!st && !memcmp(got, want, sizeof got), "size_0_mha_cached_step_of_no_token",
          "status %d (%s), lengths %lld %lld %lld", (int)st, st ? err.message : "", (long long)got[0], (long long)got[1],
          (long long)got[2]);
    free(mem);
}

/* A tensor of a rank the header does not have: shapes are printed without
 * reading past shape[ATTN_MAX_RANK - 1]. */
static void test_bad_rank_message(void) {
    int64_t shape[ATTN_MAX_RANK] = {1, 2, 3, 4, 5};
    char buf[64];
    attn_format_shape(buf, sizeof buf, ATTN_MAX_RANK + 1, shape);
    check(strcmp(buf, "(rank 6)") == 0, "format_shape_rank_past_max", "got %s", buf);
    attn_format_shape(buf, sizeof buf, -1, shape);
    check(strcmp(buf, "(rank -1)") == 0, "format_shape_negative_rank", "got %s", buf);
}

/* A decoding step's RoPE positions follow what the cache holds: a
 * position_offset near INT64_MAX over a cache of 3 positions is refused as
 * the caller's value, not added to the length first (a signed overflow,
 * which UBSan reports), and the cache keeps its length. */
static void test_mha_cached_rope_offset_at_int64_max(void) {
    enum { E = 4 };
    double w[E * E], x[3 * E], out[3 * E];
    fill(w, ATTN_F64, E * E, 5), fill(x, ATTN_F64, 3 * E, 6);
    int64_t ws[2] = {E, E}, xs[2] = {3, E}, x1[2] = {1, E};
    attn_tensor tw, tx, to, tx1, to1;
    attn_tensor_init(&tw, w, ATTN_F64, 2, ws, NULL, NULL);
    attn_tensor_init(&tx, x, ATTN_F64, 2, xs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F64, 2, xs, NULL, NULL);
    attn_tensor_init(&tx1, x, ATTN_F64, 2, x1, NULL, NULL), attn_tensor_init(&to1, out, ATTN_F64, 2, x1, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = 2;
    p.q_proj_weight = p.k_proj_weight = p.v_proj_weight = p.out_proj_weight = &tw;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = 2, d.capacity = 8, d.key_dim = d.value_dim = E / 2, d.dtype = ATTN_F64;
    attn_error err;
    size_t bytes = 0;
    attn_kv_cache *cache = NULL;
    void *mem = attn_kv_cache_bytes(&bytes, &d, &err) ? NULL : malloc(bytes);
    if (!mem || attn_kv_cache_init(&cache, mem, bytes, &d, &err)) {
        check(0, "mha_cached_rope_offset_INT64_MAX_refused", "no cache: %s", err.message);
        free(mem);
        return;
    }
    attn_rope_options rope = attn_rope_options_default();
    attn_mha_options o = attn_mha_options_default();
    o.causal = ATTN_CAUSAL_BOTTOM_RIGHT, o.rope = &rope;
    attn_status st = attn_mha_cached(&to, &tx, cache, &p, &o, &err); /* 3 positions held */
    rope.position_offset = INT64_MAX - 1;
    if (!st) st = attn_mha_cached(&to1, &tx1, cache, &p, &o, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "position_offset is 9223372036854775806") &&
          attn_kv_cache_length(cache) == 3, "mha_cached_rope_offset_INT64_MAX_refused", "status %d: %s", st, err.message);
    int64_t cu[2] = {0, 1}, row = 0, length = 3;
    st = attn_mha_cached_batch(&to1, &tx1, cu, &row, 1, cache, &length, NULL, &p, &o, &err);
    check(st == ATTN_ERR_OPTION && strstr(err.message, "position_offset is 9223372036854775806") && length == 3,
          "mha_cached_batch_rope_offset_INT64_MAX_refused", "status %d: %s", st, err.message);
    free(mem);
}

/* f64 values near DBL_MAX (the exact streaming kernel, attn_sdpa's f64
 * path without weights): out is a weighted mean of v, so finite, but the
 * kernel's running sum of e^(s - m)·v over S keys overflowed to inf (or
 * inf - inf = NaN) from |v| > DBL_MAX / S. Scaling v by a power of two
 * scales every product and sum exactly, so out(v) must be bitwise
 * out(v · 2^-10) · 2^10; and v = DBL_MAX everywhere gives DBL_MAX to a
 * few ulps (the sums' rounding), never inf. */
static void test_f64_values_near_dbl_max(void) {
    enum { L = 20, S = 100, E = 5, EV = 3 }; /* two blocks of rows, two of keys */
    static const double FRACTIONS[] = {1.0, 0.5, 0.125};
    for (size_t f = 0; f < sizeof FRACTIONS / sizeof *FRACTIONS; f++)
        for (int sign = 0; sign < (f ? 2 : 3); sign++) { /* v all +, alternating; all DBL_MAX once */
            problem p, small;
            make(&p, ATTN_F64, 1, L, S, E);
            make(&small, ATTN_F64, 1, L, S, E);
            double v[S * EV], vs[S * EV], out[L * EV], outs[L * EV];
            for (int i = 0; i < S * EV; i++) {
                double x = sign == 2 ? DBL_MAX : DBL_MAX * FRACTIONS[f] * (0.5 + 0.5 * fabs(p.kd[i % (S * E)]));
                v[i] = sign == 1 && i % 2 ? -x : x;
                vs[i] = ldexp(v[i], -10);
            }
            int64_t vsh[3] = {1, S, EV}, osh[3] = {1, L, EV};
            attn_tensor_init(&p.v, v, ATTN_F64, 3, vsh, NULL, NULL), attn_tensor_init(&p.out, out, ATTN_F64, 3, osh, NULL, NULL);
            attn_tensor_init(&small.v, vs, ATTN_F64, 3, vsh, NULL, NULL);
            attn_tensor_init(&small.out, outs, ATTN_F64, 3, osh, NULL, NULL);
            attn_error err;
            attn_status st = attn_sdpa(&p.out, NULL, NULL, &p.q, &p.k, &p.v, NULL, &err);
            if (!st) st = attn_sdpa(&small.out, NULL, NULL, &small.q, &small.k, &small.v, NULL, &err);
            int same = 1;
            for (int i = 0; i < L * EV; i++)
                same &= sign == 2 ? out[i] <= DBL_MAX && out[i] >= DBL_MAX * (1 - 0x1p-48) : out[i] == ldexp(outs[i], 10);
            char name[96];
            if (sign == 2) snprintf(name, sizeof name, "f64_values_all_DBL_MAX");
            else snprintf(name, sizeof name, "f64_values_near_DBL_MAX_%s_%g", sign ? "alternating" : "positive", FRACTIONS[f]);
            check(!st && same, name, "%s", st ? err.message : "out differs from out(v 2^-10) 2^10 (inf where finite?)");
            release(&p);
            release(&small);
        }
}

/* Soft-capping far above the scores changes nothing: cap · tanh(s / cap)
 * is s to f32's precision once the cap passes 2^13 |s|. The f32 kernels'
 * cap · (1 - t) / (1 + t), t = e^(-2|s|/cap), lost about 2^-24 · cap to
 * cancellation in 1 - t, so with cap 1e6 every score moved by about 0.06
 * and with cap 1e30 every score was 0 (uniform weights). Through the tiled
 * kernel (L = 40) and the decode kernel (L = 3, S = 2100), every ISA's
 * softcap (run with ATTN_ISA=avx512|avx2|c): out within 1e-5 of the call
 * without a cap. */
static void test_softcap_far_above_scores(void) {
    static const struct { int64_t L, S; const char *kernel; } CASES[] = {{40, 33, "flash"}, {3, 2100, "decode"}};
    static const double CAPS[] = {1e6, 1e30, 3e38};
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        problem p;
        make(&p, ATTN_F32, 2, CASES[c].L, CASES[c].S, 8);
        attn_error err;
        attn_status st = attn_sdpa(&p.out, NULL, NULL, &p.q, &p.k, &p.v, NULL, &err);
        float *want = malloc(out_bytes(&p));
        memcpy(want, p.od, out_bytes(&p));
        for (size_t k = 0; k < sizeof CAPS / sizeof *CAPS && !st; k++) {
            attn_sdpa_options o = attn_sdpa_options_default();
            o.softcap = CAPS[k];
            attn_status sc = attn_sdpa(&p.out, NULL, NULL, &p.q, &p.k, &p.v, &o, &err);
            double worst = 0;
            for (int64_t i = 0; i < 2 * CASES[c].L * 8; i++) worst = fmax(worst, fabs(((float *)p.od)[i] - want[i]));
            char name[96];
            snprintf(name, sizeof name, "softcap_%g_far_above_scores_%s_%s", CAPS[k], CASES[c].kernel, attn_isa());
            check(!sc && worst <= 1e-5, name, "%s (max |out - out without a cap| %g)",
                  sc ? err.message : "out moved by the cap", worst);
        }
        if (st) check(0, "softcap_reference_call", "%s", err.message);
        free(want);
        release(&p);
    }
}

int main(void) {
    attn_set_num_threads(2);
    test_huge_windows();
    test_huge_window_backward();
    test_int64_min_strides();
    test_pieces_at_int64_max();
    test_bad_rank_message();
    test_mha_empty_sequences();
    test_mha_cached_rope_offset_at_int64_max();
    test_f64_values_near_dbl_max();
    test_softcap_far_above_scores();
    test_size_0();
    test_size_0_no_keys();
    test_size_0_backward();
    test_size_0_cache();
    test_size_0_mha_cached();
    return n_failed ? 1 : 0;
}
