/* fuzz_api.c -- libFuzzer target: the C API's integer and floating-point
 * fields driven to their extremes. Each input is read as a short program: it
 * picks one of attn_sdpa, attn_sdpa_backward, the KV cache calls and
 * attn_mha, and fills every shape, stride, option and count of that call
 * from its bytes, each either small (the shapes the kernels really run) or
 * one of the values where integer arithmetic breaks: 0, -1, INT64_MIN,
 * INT64_MAX, 2^31, 2^32, 2^53, 2^62 and their negatives. q is f32, f64,
 * f16 or bf16, k and v f16 or bf16 beside them; the versioned structs
 * (options, context, RoPE) carry a fuzzed struct_size now and then (an
 * older prefix, too small, not a multiple of size_t, a newer header's).
 * Each call must return a status (with a message when it fails) and never
 * trip AddressSanitizer or UndefinedBehaviorSanitizer. Beyond that:
 *   - a refused call leaves every output's memory (its whole region)
 *     untouched, and a struct_size no header could have is refused;
 *   - attn_sdpa that succeeds agrees with a naive attention computed here in
 *     f64 (scale, causal modes, bool and float masks broadcast, GQA, any
 *     strides, 16-bit inputs) within the bound attn.h gives for its dtype,
 *     and with attn_sdpa_reference with every score variant on (soft cap,
 *     ALiBi, window, sinks, RoPE, pieces) within the same bound;
 *   - the same call again, on the other thread count and with a workspace
 *     of the size attn_sdpa_workspace_size gives, writes the same bits; one
 *     byte less of workspace is ATTN_ERR_WORKSPACE with nothing written;
 *   - a plan of the call (attn_sdpa_plan_init, attn_sdpa_run) is accepted
 *     and writes the same bits.
 *
 * A view the library accepts must lie inside memory this harness owns, or
 * the library would rightly read past it: every tensor points at the middle
 * of its own region, and a fuzzed view whose reach the library could accept
 * (its element offsets fit in int64) but the region cannot hold is made
 * contiguous, or small, before the call. Views whose offsets overflow int64
 * are passed as they are: the library must refuse them. */
#include "attn.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_reader.h"

/* An integer field: mostly small, sometimes an edge of int64. */
static int64_t pick_int(reader *r) {
    static const int64_t EDGES[] = {0,
                                    -1,
                                    INT64_MIN,
                                    INT64_MAX,
                                    INT64_MIN + 1,
                                    INT64_MAX - 1,
                                    INT64_MAX / 2,
                                    (int64_t)1 << 31,
                                    ((int64_t)1 << 31) - 1,
                                    (int64_t)1 << 32,
                                    (int64_t)1 << 53,
                                    ((int64_t)1 << 53) + 1,
                                    (int64_t)1 << 62,
                                    -((int64_t)1 << 62),
                                    -((int64_t)1 << 32),
                                    INT32_MIN};
    uint8_t b = byte(r);
    if (b < 192) return b % 9; /* 0..8: shapes and offsets the kernels run */
    if (b < 252) return EDGES[b % (sizeof EDGES / sizeof *EDGES)];
    if (b < 254) return -(int64_t)(b % 5) - 2;
    return (int64_t)raw64(r);
}

/* A floating-point field: ordinary values, and those that must be refused
 * or handled (non-finite, subnormal, huge). */
static double pick_double(reader *r) {
    static const double EDGES[] = {0.0,     1.0,      -1.0,     0.5,     0.125,    2.5,   -0.0,    1e-300,
                                   4.9e-324, 1e300,   -1e300,   1e38,    3.5e38,   1e-45, NAN,     INFINITY,
                                   -INFINITY, 0.99999, 1.0 - 1e-16, 30.0, 50.0, 1e4, 1e9, 1e30};
    uint8_t b = byte(r);
    if (b < 240) return EDGES[b % (sizeof EDGES / sizeof *EDGES)];
    uint64_t u = raw64(r);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Each tensor gets its own region of memory, and points at its middle so
 * that negative strides stay inside too. */
enum { REGION = 1 << 14, N_REGIONS = 24 }; /* bytes per region: 16 KiB */
static unsigned char memory[N_REGIONS][REGION] __attribute__((aligned(64)));
static int next_region;

static const attn_dtype DTYPES[] = {ATTN_F32, ATTN_F64, ATTN_F16, ATTN_BF16, ATTN_BOOL};

/* The bytes either side of data that a view reaches, in 128-bit arithmetic;
 * false when its element offsets do not fit in int64 (the library must
 * refuse it, so it is passed as it is). */
static int reach(const attn_tensor *t, __int128 *lo, __int128 *hi) {
    __int128 l = 0, h = 0;
    for (int d = 0; d < t->rank; d++) {
        /* An empty tensor's strides count too (the library forms the
         * addresses of its slices), a dimension of 0 adding nothing. */
        __int128 term = ((__int128)(t->shape[d] > 0 ? t->shape[d] : 1) - 1) * t->strides[d];
        if (term < INT64_MIN || term > INT64_MAX) return 0;
        if (term < 0) l += term; else h += term;
        if (l < INT64_MIN || h > INT64_MAX || h - l > INT64_MAX) return 0;
    }
    __int128 es = (__int128)attn_dtype_size(t->dtype);
    *lo = l * es, *hi = (h + 1) * es;
    return 1;
}

/* A view of more elements than its region could hold contiguously, whose
 * count still fits in int64. Only strides of 0 make one fit in the region;
 * the library rightly computes with every element, and an attention over
 * 2^32 keys of stride 0 is a valid call that takes hours. A count past
 * int64 is kept: the library must refuse it. */
static int many_elements(const attn_tensor *t) {
    __int128 n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] < 0) return 0;
        n *= t->shape[d];
        if (n > INT64_MAX) return 0;
    }
    return n > REGION / 4;
}

/* Fill values that are small and finite (so that the kernels run their
 * arithmetic, not their fallbacks), with a NaN now and then. */
static void fill(unsigned char *region, attn_dtype dt, uint8_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    size_t es = attn_dtype_size(dt), n = REGION / es;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        double v = (double)((int)(x >> 24) - 128) / 64.0;
        if (seed == 255 && i % 97 == 0) v = NAN;
        unsigned char *p = region + i * es;
        switch (dt) {
        case ATTN_F64: memcpy(p, &v, 8); break;
        case ATTN_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
        case ATTN_F16: { uint16_t h = attn_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
        case ATTN_BF16: { uint16_t h = attn_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
        default: *p = (unsigned char)(x >> 31); break; /* bool: 0 or 1 */
        }
    }
}

/* A tensor of the given shape (rank <= 5; NULL shape: fuzzed), its strides
 * fuzzed or C order, in a fresh region; NULL when the regions ran out. Now
 * and then its dtype, rank or shape is wrong for the call, or its data NULL. */
static attn_tensor *tensor(reader *r, attn_tensor *t, attn_dtype dt, int rank, const int64_t *shape) {
    if (next_region == N_REGIONS) return NULL;
    unsigned char *region = memory[next_region++];
    uint8_t how = byte(r);
    if (how == 250) dt = DTYPES[byte(r) % 5];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = rank < 0 ? 0 : rank > ATTN_MAX_RANK ? ATTN_MAX_RANK : rank;
    fill(region, dt, byte(r));
    int64_t stride = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        t->shape[d] = shape && how != 252 ? shape[d] : pick_int(r);
        t->strides[d] = stride;
        if (t->shape[d] > 0 && stride <= INT64_MAX / t->shape[d]) stride *= t->shape[d];
    }
    if (how >= 128) /* fuzzed strides: 0, negative, INT64_MIN, INT64_MAX ... */
        for (int d = 0; d < t->rank; d++) t->strides[d] = pick_int(r);
    __int128 lo, hi;
    if (reach(t, &lo, &hi) && (lo < -(REGION / 2) || hi > REGION / 2 || many_elements(t))) {
        /* The library would accept the view, but the region cannot hold
         * it, or (strides of 0) it holds more elements than a call can
         * work through in the time an input is given: C order, each
         * dimension cut to 1 where it would not fit. */
        int64_t s = 1;
        for (int d = t->rank - 1; d >= 0; d--) {
            if (t->shape[d] > REGION / 16 / s) t->shape[d] = 1;
            t->strides[d] = s;
            if (t->shape[d] > 0) s *= t->shape[d];
        }
    }
    t->data = region + REGION / 2;
    if (how == 253) t->data = NULL;
    if (how == 251) { /* a rank the library must refuse before reading shape[] */
        static const int BAD[] = {-1, ATTN_MAX_RANK + 1, 100, INT32_MIN};
        t->rank = BAD[byte(r) % 4];
    }
    return t;
}

/* a · b for the harness's own sizes, saturated (the library must refuse
 * what does not fit; the harness must not overflow working it out). */
static int64_t mul(int64_t a, int64_t b) {
    __int128 x = (__int128)a * b;
    return x > INT64_MAX ? INT64_MAX : x < INT64_MIN ? INT64_MIN : (int64_t)x;
}

/* A call's status: ATTN_OK, or a failure that says why. */
static void expect_status(attn_status st, const attn_error *err) {
    if (st != ATTN_OK && (err->status != st || err->message[0] == 0)) abort();
}

/* ---- Properties: the regions outputs live in, bits, sizes ---- */

/* The region a tensor's data points into, or -1 (NULL data). */
static int region_of(const attn_tensor *t) {
    uintptr_t p = t ? (uintptr_t)t->data : 0, base = (uintptr_t)memory;
    if (!p || p < base || p >= base + sizeof memory) return -1;
    return (int)((p - base) / REGION);
}

/* Copies of up to four output regions, to compare after a call. */
typedef struct saved {
    int n, id[4];
    unsigned char bytes[4][REGION];
} saved;
static saved before_call, after_call;

static void save(saved *s, attn_tensor *const *outs, int n) {
    s->n = 0;
    for (int i = 0; i < n; i++) {
        int id = outs[i] ? region_of(outs[i]) : -1;
        if (id < 0) continue;
        s->id[s->n] = id;
        memcpy(s->bytes[s->n++], memory[id], REGION);
    }
}
static void restore(const saved *s) {
    for (int i = 0; i < s->n; i++) memcpy(memory[s->id[i]], s->bytes[i], REGION);
}
/* Every saved region holds the same bytes as when it was saved. */
static void same_as(const saved *s) {
    for (int i = 0; i < s->n; i++)
        if (memcmp(memory[s->id[i]], s->bytes[i], REGION)) abort();
}

/* A versioned struct's size: mostly the header's own, now and then an
 * older prefix (sizeof(size_t): every field its default), or one no header
 * has (0, 4, not a multiple of size_t, a newer header's). */
static size_t pick_size(reader *r, size_t full) {
    uint8_t b = byte(r);
    if (b < 232) return full;
    switch (b % 6) {
    case 0: return 0;
    case 1: return 4;
    case 2: return full + sizeof(size_t);
    case 3: return full - 4;
    case 4: return full - sizeof(size_t); /* an older struct, its last field left out */
    default: return sizeof(size_t);
    }
}
static int bad_size(size_t s, size_t full) {
    return s < sizeof(size_t) || s % _Alignof(size_t) || s > full;
}

/* The options a call reads from o: its first struct_size bytes over the
 * defaults (o's size valid). */
static attn_sdpa_options effective(const attn_sdpa_options *o) {
    attn_sdpa_options e = attn_sdpa_options_default();
    memcpy(&e, o, o->struct_size < sizeof e ? o->struct_size : sizeof e);
    e.struct_size = sizeof e;
    return e;
}
#define HAS_FIELD(o, f) ((o)->struct_size >= offsetof(attn_sdpa_options, f) + sizeof((o)->f))

/* Element c of t, c counted in the full index space of n dimensions (t's
 * dimensions aligned on the right, each of size 1 broadcast). */
static double get(const attn_tensor *t, const int64_t *c, int n) {
    int64_t off = 0;
    for (int d = 0; d < t->rank; d++) off += (t->shape[d] == 1 ? 0 : c[n - t->rank + d]) * t->strides[d];
    const unsigned char *p = (const unsigned char *)t->data + off * (int64_t)attn_dtype_size(t->dtype);
    switch (t->dtype) {
    case ATTN_F64: { double x; memcpy(&x, p, 8); return x; }
    case ATTN_F32: { float x; memcpy(&x, p, 4); return x; }
    case ATTN_F16: { uint16_t h; memcpy(&h, p, 2); return attn_f16_to_f32(h); }
    case ATTN_BF16: { uint16_t h; memcpy(&h, p, 2); return attn_bf16_to_f32(h); }
    default: return *p != 0;
    }
}

/* The element count of t, or -1 past 2^20 (or a negative dimension). */
static int64_t small_numel(const attn_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] < 0 || t->shape[d] > (1 << 20)) return -1;
        n *= t->shape[d];
        if (n > (1 << 20)) return -1;
    }
    return n;
}

/* The bound attn.h gives for an output element of dtype dt, values and
 * weights' means at most 2 in magnitude (what fill() writes), s_abs the
 * largest scale · Σ|q_e||k_e| (plus what the variants add to a score), S
 * keys of E: f32's, f64's with its unit roundoff, a 16-bit output's u16 of
 * the result more. */
static double bound(attn_dtype dt, double s_abs, int64_t S, int64_t E) {
    double u = dt == ATTN_F64 ? 0x1p-53 : 0x1p-24, first = dt == ATTN_F64 ? 1e-13 : 2e-5;
    double b = (first + 2.0 * (double)S * u) * 2.0 + 2.0 * (double)(E + 6) * u * s_abs * 2.0;
    if (dt == ATTN_F16) b = 0x1p-11 * 4.0 + (1 + 0x1p-11) * b; /* two roundings of results up to 2 */
    if (dt == ATTN_BF16) b = 0x1p-8 * 4.0 + (1 + 0x1p-8) * b;
    return b * 1.01 + (dt == ATTN_F64 ? DBL_MIN : FLT_MIN);
}

/* The row maximum m and log Σ e^(s-m) of lse, to within: */
static double lse_bound(attn_dtype dt, double s_abs, int64_t S, int64_t E, double lse) {
    double u = dt == ATTN_F64 ? 0x1p-53 : 0x1p-24, first = dt == ATTN_F64 ? 1e-13 : 2e-5;
    return (2.0 * (double)(E + 6) * u * s_abs + first + 2.0 * (double)S * u + 2 * u * fabs(lse)) * 1.01 + 1e-30;
}

/* out (and lse) of a successful attn_sdpa against plain attention in f64,
 * for calls with no score variant: q (..., Hq, L, E), k (..., Hk, S, E), v
 * (..., Hk, S, Ev), all of out's rank; the mask broadcast; causal top-left
 * (j <= i) or bottom-right (j <= i + S - L). A row whose f64 result is not
 * finite (it read a NaN) is not compared. */
static void check_naive(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                        const attn_tensor *v, const attn_sdpa_options *o) {
    int R = out->rank;
    if (R < 2 || q->rank != R || k->rank != R || v->rank != R) return;
    if (small_numel(out) < 0 || small_numel(q) < 0 || small_numel(k) < 0) return;
    int64_t L = out->shape[R - 2], Ev = out->shape[R - 1], E = q->shape[R - 1], S = k->shape[R - 2];
    int64_t Hq = R >= 3 ? out->shape[R - 3] : 1, Hk = R >= 3 ? k->shape[R - 3] : 1;
    int64_t rows = small_numel(out) / (Ev ? Ev : 1);
    if (rows * S * (E + Ev) > 200000 || Hk <= 0 || Hq % Hk) return; /* time; a head count attn_sdpa refuses */
    double scale = o->has_scale ? o->scale : 1.0 / sqrt((double)E);
    double s_abs = fabs(scale) * (double)E * 4.0 + (o->mask && o->mask->dtype != ATTN_BOOL ? 2.0 : 0.0);
    double tol = bound(out->dtype, s_abs, S, E);
    static double sc[4096], acc[64];
    if (S > 4096 || Ev > 64) return;
    for (int64_t row = 0; row < rows; row++) {
        int64_t c[ATTN_MAX_RANK] = {0}, rest = row;
        for (int d = R - 2; d >= 0; d--) c[d] = rest % out->shape[d], rest /= out->shape[d];
        int64_t i = c[R - 2], h = R >= 3 ? c[R - 3] : 0;
        int64_t cq[ATTN_MAX_RANK], ck[ATTN_MAX_RANK];
        memcpy(cq, c, sizeof cq), memcpy(ck, c, sizeof ck);
        if (R >= 3) ck[R - 3] = h / (Hq / Hk);
        double m = -INFINITY;
        int nan_row = 0;
        for (int64_t j = 0; j < S; j++) {
            int take = o->causal == ATTN_CAUSAL_TOP_LEFT ? j <= i : o->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? j <= i + S - L : 1;
            double s = 0;
            ck[R - 2] = j;
            for (int64_t e = 0; e < E; e++) {
                cq[R - 1] = ck[R - 1] = e;
                s += get(q, cq, R) * get(k, ck, R);
            }
            s *= scale;
            if (o->mask) {
                int64_t cm[ATTN_MAX_RANK];
                memcpy(cm, c, sizeof cm);
                cm[R - 1] = j;
                double mv = get(o->mask, cm, R);
                if (o->mask->dtype == ATTN_BOOL) take = take && mv != 0;
                else s += mv;
            }
            sc[j] = take ? s : -INFINITY;
            if (take && isnan(s)) nan_row = 1;
            else if (take && s > m) m = s;
        }
        if (nan_row) continue;
        double sum = 0;
        for (int64_t e = 0; e < Ev; e++) acc[e] = 0;
        for (int64_t j = 0; j < S && m > -INFINITY; j++) {
            if (sc[j] == -INFINITY) continue;
            double p = exp(sc[j] - m);
            sum += p;
            ck[R - 2] = j;
            for (int64_t e = 0; e < Ev; e++) ck[R - 1] = e, acc[e] += p * get(v, ck, R);
        }
        int finite = isfinite(sum);
        for (int64_t e = 0; e < Ev && finite; e++) finite = isfinite(acc[e]);
        if (!finite) continue;
        for (int64_t e = 0; e < Ev; e++) {
            double want = sum > 0 ? acc[e] / sum : 0.0;
            c[R - 1] = e;
            double got = get(out, c, R);
            if (!(fabs(got - want) <= tol)) abort();
        }
        if (lse) {
            double want = sum > 0 ? m + log(sum) : -INFINITY, got = get(lse, c, R - 1);
            if (lse->dtype != ATTN_F64 && fabs(want) > FLT_MAX / 2 && want != -INFINITY) continue; /* past f32 */
            if (want == -INFINITY ? got != -INFINITY : !(fabs(got - want) <= lse_bound(lse->dtype, s_abs, S, E, want)))
                abort();
        }
    }
}

/* out (and lse) of a successful attn_sdpa against attn_sdpa_reference (the
 * textbook algorithm in f64, src/exact/reference.c) on the same tensors and
 * options, with any score variant: the bound above, s_abs grown by what
 * RoPE (a pair turned: |q_e k_e| up to twice), the mask and ALiBi
 * (slopes up to 2 times the largest distance) add to a score, and values
 * grown by dropout's 1 / (1 - p). Elements the reference gives as NaN or
 * infinite are not compared. */
static void check_reference(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_options *o) {
    /* the bounds from the fields the call reads (the first struct_size bytes), the call given o itself */
    const attn_sdpa_options eff = effective(o), *e = &eff;
    static unsigned char rbuf[REGION], lbuf[REGION];
    int R = out->rank;
    int64_t n = small_numel(out), E = q->rank ? q->shape[q->rank - 1] : 0, S = k->rank >= 2 ? k->shape[k->rank - 2] : 0;
    if (R < 1 || n < 0 || n > REGION / 8 || q->rank < 2 || k->rank < 2) return;
    if (!(e->dropout_p >= 0 && e->dropout_p <= 0.5) || e->compute != ATTN_COMPUTE_F32) return;
    double D = 0; /* the largest distance ALiBi can weigh */
    const int64_t pos[4] = {e->query_start, e->key_start, e->total_queries, e->total_keys};
    for (int i = 0; i < 4; i++) D += fabs((double)pos[i]);
    D += (double)S + (double)(q->shape[q->rank - 2]);
    if (e->alibi_slopes && D > 1e6) return;
    attn_tensor ro = *out, rl;
    ro.data = rbuf;
    int64_t step = 1;
    for (int d = R - 1; d >= 0; d--) ro.strides[d] = step, step *= ro.shape[d] > 0 ? ro.shape[d] : 1;
    if (lse) {
        rl = *lse, rl.data = lbuf, step = 1;
        for (int d = rl.rank - 1; d >= 0; d--) rl.strides[d] = step, step *= rl.shape[d] > 0 ? rl.shape[d] : 1;
    }
    attn_error err;
    attn_status st = attn_sdpa_reference(&ro, lse ? &rl : NULL, NULL, q, k, v, o, &err);
    if (st == ATTN_ERR_NO_MEMORY) return;
    if (st != ATTN_OK) abort(); /* the same contract: what attn_sdpa takes, the reference takes */
    double scale = e->has_scale ? e->scale : 1.0 / sqrt((double)E);
    double s_abs = fabs(scale) * (double)E * 4.0 * (e->rope ? 2.0 : 1.0) * 1.5 +
                   (e->mask && e->mask->dtype != ATTN_BOOL ? 2.0 : 0.0) + (e->alibi_slopes ? 2.0 * D : 0.0);
    double grow = 1.0 / (1.0 - e->dropout_p), tol = bound(out->dtype, s_abs, S, E) * grow;
    int64_t c[ATTN_MAX_RANK] = {0};
    for (int64_t idx = 0; idx < n; idx++) {
        int64_t rest = idx;
        for (int d = R - 1; d >= 0; d--) c[d] = rest % out->shape[d], rest /= out->shape[d];
        double want = get(&ro, c, R), got = get(out, c, R);
        if (isfinite(want) && !(fabs(got - want) <= tol)) abort();
        if (lse && c[R - 1] == 0) {
            want = get(&rl, c, R - 1), got = get(lse, c, R - 1);
            if (want == -INFINITY ? got != -INFINITY
                                  : isfinite(want) && !(fabs(got - want) <= lse_bound(lse->dtype, s_abs, S, E, want)))
                abort();
        }
    }
}

static attn_causal pick_causal(reader *r) {
    static const int CAUSAL[] = {ATTN_CAUSAL_NONE, ATTN_CAUSAL_TOP_LEFT, ATTN_CAUSAL_BOTTOM_RIGHT, 3, -1, 1 << 30};
    return (attn_causal)CAUSAL[byte(r) % 6];
}

/* The sdpa options from the input, with their tensors (mask, ALiBi slopes,
 * sinks) and a RoPE struct, for q of Hq heads against L queries and S keys. */
typedef struct call_options {
    attn_sdpa_options o;
    attn_context c;
    attn_rope_options rope;
    attn_tensor mask, slopes, sinks, descale[2];
} call_options;

static void options(reader *r, call_options *co, attn_dtype dt, int64_t Hq, int64_t L, int64_t S) {
    attn_sdpa_options *o = &co->o;
    *o = attn_sdpa_options_default();
    co->c = attn_context_default();
    co->c.num_threads = (int)(byte(r) % 3); /* 0 (the default), 1 or 2 */
    if (byte(r) == 255) co->c.num_threads = (int)pick_int(r);
    o->context = &co->c;
    uint8_t which = byte(r);
    if (which & 1) o->has_scale = 1, o->scale = pick_double(r);
    if (which & 2) o->causal = pick_causal(r);
    if (which & 4) {
        int64_t ms[4] = {1, Hq, L, S};
        uint8_t m = byte(r);
        tensor(r, &co->mask, m & 1 ? ATTN_BOOL : dt, 2 + m % 3, ms + 2 - m % 3);
        o->mask = &co->mask;
    }
    if (which & 8) o->window = pick_int(r), o->causal = o->causal ? o->causal : ATTN_CAUSAL_BOTTOM_RIGHT;
    if (which & 16) o->softcap = pick_double(r);
    if (which & 32) {
        int64_t h[1] = {Hq};
        if (byte(r) & 1) { tensor(r, &co->slopes, ATTN_F64, 1, h); o->alibi_slopes = &co->slopes; }
        if (byte(r) & 1) { tensor(r, &co->sinks, ATTN_F32, 1, h); o->sinks = &co->sinks; }
    }
    if (which & 64) {
        co->rope = attn_rope_options_default();
        co->rope.position_offset = pick_int(r);
        co->rope.rotary_dim = pick_int(r);
        if (byte(r) & 1) co->rope.base = pick_double(r);
        if (byte(r) & 1) co->rope.linear_scaling = pick_double(r);
        co->rope.layout = (attn_rope_layout)(byte(r) % 3);
        o->rope = &co->rope;
    }
    if (which & 128) {
        o->query_start = pick_int(r), o->key_start = pick_int(r);
        o->total_queries = pick_int(r), o->total_keys = pick_int(r);
    }
    uint8_t more = byte(r);
    if (more & 1) o->dropout_p = pick_double(r), o->dropout_seed = raw64(r);
    if (more & 2) o->compute = (attn_compute)(byte(r) % 3);
    for (int i = 0; i < 2; i++) /* fp8's per-head scales: any small shape, f32 or f64, any values */
        if (more & (4 << i)) {
            uint8_t d = byte(r);
            int64_t ds[3] = {d & 3, (d >> 2) & 3, (d >> 4) & 3};
            if (!tensor(r, &co->descale[i], d & 64 ? ATTN_F64 : ATTN_F32, 1 + (d >> 6) % 3, ds)) continue;
            if (i) o->v_descale = &co->descale[i];
            else o->k_descale = &co->descale[i];
        }
}

/* q (B, Hq, L, E), k and v (B, Hk, S, E / Ev), each dimension fuzzed. */
typedef struct problem {
    attn_dtype dt, kv_dt;
    int64_t B, Hq, Hk, L, S, E, Ev;
    attn_tensor q, k, v;
} problem;

static void make_problem(reader *r, problem *p) {
    uint8_t b = byte(r);
    p->dt = b & 1 ? ATTN_F64 : ATTN_F32;
    p->kv_dt = p->dt == ATTN_F32 && (b & 6) ? (b & 2 ? ATTN_F16 : ATTN_BF16) : p->dt;
    if (p->dt == ATTN_F32 && (b & 0x18) == 0x18) /* 16-bit queries, k and v f32, f16 or bf16 */
        p->dt = b & 0x20 ? ATTN_BF16 : ATTN_F16;
    p->B = pick_int(r), p->Hq = pick_int(r), p->Hk = pick_int(r);
    p->L = pick_int(r), p->S = pick_int(r), p->E = pick_int(r), p->Ev = pick_int(r);
    if (byte(r) < 200) { /* mostly shapes that pass the checks */
        p->B = p->B % 3 + 1, p->Hk = p->Hk % 3 + 1, p->Hq = p->Hk * (p->Hq % 3 + 1);
        p->L = p->L % 9 + 1, p->S = p->S % 9 + 1, p->E = p->E % 8 + 1, p->Ev = p->Ev % 8 + 1;
    }
    int64_t qs[4] = {p->B, p->Hq, p->L, p->E}, ks[4] = {p->B, p->Hk, p->S, p->E}, vs[4] = {p->B, p->Hk, p->S, p->Ev};
    int rank = 2 + byte(r) % 3; /* 2 .. 4: the leading dimensions dropped */
    tensor(r, &p->q, p->dt, rank, qs + 4 - rank);
    tensor(r, &p->k, p->kv_dt, rank, ks + 4 - rank);
    tensor(r, &p->v, p->kv_dt, rank, vs + 4 - rank);
}

/* A float mask's dtype, lse's: q's, f32 for a 16-bit q. */
static attn_dtype wide(attn_dtype dt) { return dt == ATTN_F16 || dt == ATTN_BF16 ? ATTN_F32 : dt; }

/* Outputs shaped as the call says they must be (so that calls reach the
 * kernels), with fuzzed strides; or fuzzed shapes. The weights' shape is
 * set in wshape. */
static void outputs(reader *r, const problem *p, const attn_sdpa_options *o, attn_tensor *out, attn_tensor *lse,
                    int64_t *wshape) {
    int rank = 0;
    int64_t shape[ATTN_MAX_RANK] = {0};
    if (attn_sdpa_shapes(&rank, shape, wshape, &p->q, &p->k, &p->v, o, NULL) != ATTN_OK) {
        rank = p->q.rank >= 0 && p->q.rank <= ATTN_MAX_RANK ? p->q.rank : 3;
        for (int d = 0; d < rank; d++) shape[d] = p->q.shape[d], wshape[d] = p->q.shape[d];
    }
    tensor(r, out, p->dt, rank, shape);
    tensor(r, lse, wide(p->dt), rank - 1, shape);
}

/* The properties of a successful attn_sdpa (see the top): out and lse hold
 * its result, before_call the outputs' regions before it. */
static void sdpa_again(problem *p, call_options *co, attn_tensor *out, attn_tensor *lse, attn_tensor *w) {
    attn_error err;
    attn_tensor *outs[3] = {out, lse, w};
    save(&after_call, outs, 3);
    attn_sdpa_options eff = effective(&co->o);
    if (!w && eff.dropout_p == 0 && eff.compute == ATTN_COMPUTE_F32 && !eff.rope && !eff.alibi_slopes && !eff.sinks &&
        eff.softcap == 0 && eff.window == 0 && !eff.query_start && !eff.key_start && !eff.total_queries &&
        !eff.total_keys && !eff.k_descale && !eff.v_descale)
        check_naive(out, lse, &p->q, &p->k, &p->v, &eff);
    if (!w) check_reference(out, lse, &p->q, &p->k, &p->v, &co->o);

    /* Again, on the other thread count, with a workspace of the size asked
     * for: the same bits; one byte short: refused, nothing written. */
    attn_context ctx = attn_context_default();
    ctx.num_threads = eff.context && eff.context->num_threads == 1 ? 2 : 1;
    attn_sdpa_options o2 = co->o;
    if (HAS_FIELD(&co->o, context)) o2.context = &ctx;
    size_t need = 0;
    attn_status st = attn_sdpa_workspace_size(&need, out, lse, w, &p->q, &p->k, &p->v, &o2, &err);
    if (st != ATTN_OK) abort();
    unsigned char *ws = need < ((size_t)1 << 26) && HAS_FIELD(&co->o, context) ? malloc(need + 1) : NULL;
    if (ws) ctx.workspace = ws + 1, ctx.workspace_size = need; /* at an odd address */
    restore(&before_call);
    st = attn_sdpa(out, lse, w, &p->q, &p->k, &p->v, &o2, &err);
    if (st != ATTN_OK && !(st == ATTN_ERR_NO_MEMORY && !ws)) abort();
    if (!st) same_as(&after_call);
    if (ws && need) {
        restore(&before_call);
        ctx.workspace_size = need - 1;
        if (attn_sdpa(out, lse, w, &p->q, &p->k, &p->v, &o2, &err) != ATTN_ERR_WORKSPACE) abort();
        same_as(&before_call);
    }
    free(ws);

    /* A plan of the call: accepted, writes nothing, and its run the same bits. */
    size_t pb = 0, pws = 0;
    if (!w && attn_sdpa_plan_bytes(&pb, 0, &err) == ATTN_OK) {
        void *mem = malloc(pb);
        attn_sdpa_plan *plan;
        restore(&before_call);
        st = mem ? attn_sdpa_plan_init(&plan, mem, pb, &pws, out, lse, &p->q, &p->k, &p->v, &co->o, &err)
                 : ATTN_ERR_NO_MEMORY;
        if (st != ATTN_OK && st != ATTN_ERR_NO_MEMORY) abort();
        same_as(&before_call);
        unsigned char *pw = !st && pws < ((size_t)1 << 26) ? malloc(pws + 1) : NULL;
        if (pw) {
            if (attn_sdpa_run(plan, out, lse, &p->q, &p->k, &p->v, pw + 1, pws, &err) != ATTN_OK) abort();
            same_as(&after_call);
        }
        free(pw), free(mem);
    }
    restore(&after_call);
}

static void fuzz_sdpa(reader *r, int backward) {
    problem p;
    call_options co;
    attn_error err;
    make_problem(r, &p);
    options(r, &co, wide(p.dt), p.Hq, p.L, p.S);
    attn_tensor out, lse, weights, *w = NULL, *l = &lse;
    int64_t wshape[ATTN_MAX_RANK] = {0};
    outputs(r, &p, &co.o, &out, &lse, wshape);
    /* Read after the rest (older inputs read 0 here): the weights, lse
     * left out, the structs' sizes. */
    uint8_t extra = byte(r);
    if (extra & 1) w = tensor(r, &weights, p.dt, out.rank, wshape);
    if (extra & 2) l = NULL;
    if (extra & 4) {
        co.o.struct_size = pick_size(r, sizeof co.o);
        co.c.struct_size = pick_size(r, sizeof co.c);
        co.rope.struct_size = pick_size(r, sizeof co.rope);
    }
    size_t bytes;
    expect_status(attn_sdpa_workspace_size(&bytes, &out, l, w, &p.q, &p.k, &p.v, &co.o, &err), &err);
    attn_tensor *outs[3] = {&out, l, w};
    save(&before_call, outs, 3);
    attn_status st = attn_sdpa(&out, l, w, &p.q, &p.k, &p.v, &co.o, &err);
    expect_status(st, &err);
    if (st) {
        same_as(&before_call);
        return;
    }
    /* accepted: every struct it read had a size some header has */
    if (bad_size(co.o.struct_size, sizeof co.o)) abort();
    if (HAS_FIELD(&co.o, context) && co.o.context && bad_size(co.c.struct_size, sizeof co.c)) abort();
    if (HAS_FIELD(&co.o, rope) && co.o.rope && bad_size(co.rope.struct_size, sizeof co.rope)) abort();
    sdpa_again(&p, &co, &out, l, w);
    if (!backward) return;
    attn_tensor dq, dk, dv, dout;
    tensor(r, &dout, p.dt, out.rank, out.shape);
    tensor(r, &dq, p.dt, p.q.rank, p.q.shape);
    tensor(r, &dk, p.dt, p.k.rank, p.k.shape);
    tensor(r, &dv, p.dt, p.v.rank, p.v.shape);
    attn_tensor *grads[3] = {&dq, &dk, &dv};
    save(&before_call, grads, 3);
    st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &p.q, &p.k, &p.v, &out, l, &co.o, &err);
    expect_status(st, &err);
    if (st) {
        same_as(&before_call);
        return;
    }
    save(&after_call, grads, 3); /* the same gradients again */
    restore(&before_call);
    st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &p.q, &p.k, &p.v, &out, l, &co.o, &err);
    if (st != ATTN_OK && st != ATTN_ERR_NO_MEMORY) abort();
    if (!st) same_as(&after_call);
}

/* attn_kv_cache_attend's out against attn_sdpa over attn_kv_cache_view's
 * tensors of the same rank, with the same options: bitwise (attn.h). The
 * view is not taken for keys quantized per channel (they have none) nor
 * with a Hadamard rotation (the view holds turned keys); an fp8 cache's
 * scales go to the options as k_descale and v_descale. */
static void attend_as_view(const attn_tensor *out, const attn_tensor *lse, const attn_tensor *q,
                           const attn_kv_cache *cache, const attn_kv_cache_desc *d, const attn_sdpa_options *o) {
    static unsigned char ob[REGION], lb[REGION];
    attn_tensor vk, vv, o2 = *out, l2;
    attn_error err;
    if (attn_kv_cache_view(&vk, &vv, cache, q->rank, &err) != ATTN_OK) abort(); /* attend took this rank */
    int64_t n = small_numel(out);
    if (n < 0 || (size_t)n * attn_dtype_size(out->dtype) > sizeof ob) return;
    o2.data = ob;
    int64_t step = 1;
    for (int i = o2.rank - 1; i >= 0; i--) o2.strides[i] = step, step *= o2.shape[i] > 0 ? o2.shape[i] : 1;
    if (lse) {
        l2 = *lse, l2.data = lb, step = 1;
        for (int i = l2.rank - 1; i >= 0; i--) l2.strides[i] = step, step *= l2.shape[i] > 0 ? l2.shape[i] : 1;
    }
    attn_sdpa_options with = o ? *o : attn_sdpa_options_default();
    if (!o) with.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_tensor ks, vs;
    int64_t hs[1] = {d->heads};
    if (d->k_scale) attn_tensor_init(&ks, (void *)d->k_scale, ATTN_F32, 1, hs, NULL, NULL), with.k_descale = &ks;
    if (d->v_scale) attn_tensor_init(&vs, (void *)d->v_scale, ATTN_F32, 1, hs, NULL, NULL), with.v_descale = &vs;
    attn_status st = attn_sdpa(&o2, lse ? &l2 : NULL, NULL, q, &vk, &vv, &with, &err);
    if (st == ATTN_ERR_NO_MEMORY) return;
    if (st != ATTN_OK) abort();
    size_t es = attn_dtype_size(out->dtype), ls = lse ? attn_dtype_size(lse->dtype) : 0;
    int64_t c[ATTN_MAX_RANK];
    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i, a = 0, b = 0;
        for (int dd = out->rank - 1; dd >= 0; dd--) c[dd] = rest % out->shape[dd], rest /= out->shape[dd];
        for (int dd = 0; dd < out->rank; dd++) a += c[dd] * out->strides[dd], b += c[dd] * o2.strides[dd];
        if (memcmp((char *)out->data + a * (int64_t)es, ob + b * (int64_t)es, es)) abort();
        if (lse && c[out->rank - 1] == 0) {
            a = b = 0;
            for (int dd = 0; dd < lse->rank; dd++) a += c[dd] * lse->strides[dd], b += c[dd] * l2.strides[dd];
            if (memcmp((char *)lse->data + a * (int64_t)ls, lb + b * (int64_t)ls, ls)) abort();
        }
    }
}

static void fuzz_kv_cache(reader *r) {
    static unsigned char cache_memory[1 << 16] __attribute__((aligned(64)));
    static float scales[2][16];
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = pick_int(r), d.heads = pick_int(r), d.capacity = pick_int(r);
    d.key_dim = pick_int(r), d.value_dim = pick_int(r);
    uint8_t db = byte(r);
    d.dtype = DTYPES[db % 5];
    if (db >= 160) { /* the 0.4.0 fields: quantized storage, keys per channel, scales, rotation, struct_size */
        static const attn_dtype Q[8] = {ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2, ATTN_F16, ATTN_BF16, ATTN_F32};
        uint8_t e = byte(r);
        d.dtype = Q[e % 8];
        if (d.dtype <= ATTN_Q4 || d.dtype == ATTN_Q4_1 || (e & 8)) /* sizes the formats take */
            d.key_dim = 32 * (d.key_dim % 2 + 1), d.value_dim = 32 * (d.value_dim % 2 + 1);
        if (e & 8) d.key_dtype = e & 128 ? ATTN_Q2C : ATTN_Q4C, d.capacity = 32 * (d.capacity % 3 + 1);
        if (e & 16) d.residual = 32 * (byte(r) % 3);
        if (e & 32) d.hadamard = 1;
        if (e & 64 && d.heads > 0 && d.heads <= 16) {
            for (int h = 0; h < 16; h++) scales[0][h] = (float)(byte(r) % 8 + 1) / 4, scales[1][h] = 0.5f;
            d.k_scale = scales[0], d.v_scale = scales[1];
        }
        d.struct_size = pick_size(r, sizeof d);
    }
    size_t bytes = 0;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    expect_status(st, &err);
    if (!st && bad_size(d.struct_size, sizeof d)) abort();
    if (st) return;
    attn_kv_cache *cache;
    /* The memory offered is what it needs, or too little, within ours. */
    size_t offer = bytes > sizeof cache_memory ? sizeof cache_memory : bytes - (byte(r) == 7);
    st = attn_kv_cache_init(&cache, cache_memory, offer, &d, &err);
    expect_status(st, &err);
    if (st) return;
    attn_dtype in = d.dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    for (int step = 0; step < 3; step++) {
        int64_t n = pick_int(r);
        int64_t ks[4] = {d.batch, d.heads, n, d.key_dim}, vs[4] = {d.batch, d.heads, n, d.value_dim};
        attn_tensor k, v, q, out, lse;
        next_region = 0;
        int rank = 2 + byte(r) % 3;
        tensor(r, &k, in, rank, ks + 4 - rank);
        tensor(r, &v, in, rank, vs + 4 - rank);
        expect_status(attn_kv_cache_append(cache, &k, &v, &err), &err);
        int64_t L = pick_int(r) % 5 + 1, Hq = mul(d.heads, byte(r) % 3 + 1);
        int64_t qs[4] = {d.batch, Hq, L, d.key_dim}, os[4] = {d.batch, Hq, L, d.value_dim};
        tensor(r, &q, in, rank, qs + 4 - rank);
        tensor(r, &out, in, rank, os + 4 - rank);
        tensor(r, &lse, in, rank - 1, os + 4 - rank);
        call_options co;
        options(r, &co, in, Hq, L, attn_kv_cache_length(cache));
        attn_tensor *outs[2] = {&out, byte(r) & 1 ? &lse : NULL};
        save(&before_call, outs, 2);
        st = attn_kv_cache_attend(&out, outs[1], &q, cache, &co.o, &err);
        expect_status(st, &err);
        if (st) same_as(&before_call);
        else if (!d.key_dtype && !d.hadamard && co.o.struct_size == sizeof co.o && !co.o.k_descale &&
                 !co.o.v_descale)
            attend_as_view(&out, outs[1], &q, cache, &d, &co.o);
        attn_tensor vk, vv;
        expect_status(attn_kv_cache_view(&vk, &vv, cache, (int)(int8_t)byte(r) % 6, &err), &err);
        /* the positions gathered into f32 (or f64) tensors: refused, nothing written */
        int64_t len = attn_kv_cache_length(cache), gk[4] = {d.batch, d.heads, len, d.key_dim},
                gv[4] = {d.batch, d.heads, len, d.value_dim};
        attn_tensor tk, tv;
        tensor(r, &tk, in, rank, gk + 4 - rank);
        tensor(r, &tv, in, rank, gv + 4 - rank);
        attn_tensor *gathered[2] = {&tk, &tv};
        save(&before_call, gathered, 2);
        st = attn_kv_cache_gather(&tk, &tv, cache, &err);
        expect_status(st, &err);
        if (st) same_as(&before_call);
        if (byte(r) & 1) expect_status(attn_kv_cache_truncate(cache, pick_int(r), &err), &err);
    }
}

static void fuzz_mha(reader *r) {
    attn_error err;
    attn_dtype dt = byte(r) & 1 ? ATTN_F64 : ATTN_F32;
    attn_mha_params p = attn_mha_params_default();
    attn_mha_options o = attn_mha_options_default();
    p.embed_dim = pick_int(r), p.num_heads = pick_int(r), p.num_kv_heads = pick_int(r);
    if (byte(r) < 200) { /* mostly a layer that passes the checks */
        p.num_kv_heads = p.num_kv_heads % 2 + 1;
        p.num_heads = p.num_kv_heads * (p.num_heads % 2 + 1);
        p.embed_dim = p.num_heads * (p.embed_dim % 3 + 1);
    }
    int64_t E = p.embed_dim, D = p.num_heads > 0 && E > 0 ? E / p.num_heads : 1;
    int64_t Hkv = p.num_kv_heads ? p.num_kv_heads : p.num_heads;
    int64_t L = pick_int(r) % 5 + 1, N = pick_int(r) % 3 + 1;
    attn_tensor x, wq, wk, wv, wo, bk, bv, out, kpm, dx, dout;
    int64_t xs[3] = {L, N, E};
    tensor(r, &x, dt, 3, xs);
    int64_t sq[2] = {mul(p.num_heads, D), E}, skv[2] = {mul(Hkv, D), E}, so[2] = {E, mul(p.num_heads, D)}, sb[3] = {1, 1, mul(Hkv, D)};
    p.q_proj_weight = tensor(r, &wq, dt, 2, sq);
    p.k_proj_weight = tensor(r, &wk, dt, 2, skv);
    p.v_proj_weight = tensor(r, &wv, dt, 2, skv);
    p.out_proj_weight = tensor(r, &wo, dt, 2, so);
    uint8_t flags = byte(r);
    if (flags & 1) p.bias_k = tensor(r, &bk, dt, 3, sb), p.bias_v = tensor(r, &bv, dt, 3, sb);
    o.add_zero_attn = (flags >> 1) & 1;
    o.causal = pick_causal(r);
    if (flags & 4) {
        int64_t ks[2] = {N, L};
        o.key_padding_mask = tensor(r, &kpm, flags & 8 ? ATTN_BOOL : dt, 2, ks);
    }
    call_options co;
    options(r, &co, dt, p.num_heads, L, L);
    co.o.mask = NULL, co.o.causal = ATTN_CAUSAL_NONE; /* the layer's own (options->causal, the masks) */
    /* The layer's context and RoPE are its options' own: given in the
     * attention's options too (flags bit 6), the call must be refused. */
    bool misplaced = flags & 64 && (co.o.context || co.o.rope);
    if (!(flags & 64)) co.o.context = NULL, co.o.rope = NULL;
    o.attention = &co.o;
    o.context = &co.c;
    if (flags & 16) o.rope = &co.rope, co.rope = attn_rope_options_default(), co.rope.position_offset = pick_int(r);
    tensor(r, &out, dt, 3, xs);
    attn_tensor *outs[1] = {&out};
    save(&before_call, outs, 1);
    attn_status st = attn_mha(&out, NULL, &x, &x, &x, &p, &o, &err);
    expect_status(st, &err);
    if (st) same_as(&before_call);
    if (misplaced && st == ATTN_OK) abort();
    if (!st) { /* again: the same bits */
        save(&after_call, outs, 1);
        restore(&before_call);
        st = attn_mha(&out, NULL, &x, &x, &x, &p, &o, &err);
        if (st != ATTN_OK && st != ATTN_ERR_NO_MEMORY) abort();
        if (!st) same_as(&after_call);
    }
    if (st || !(flags & 32)) return;
    tensor(r, &dout, dt, 3, xs);
    tensor(r, &dx, dt, 3, xs);
    expect_status(attn_mha_backward(&dx, NULL, NULL, NULL, &dout, &x, &x, &x, &p, &o, &err), &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    next_region = 0;
    switch (byte(&r) % 4) {
    case 0: fuzz_sdpa(&r, 0); break;
    case 1: fuzz_sdpa(&r, 1); break;
    case 2: fuzz_kv_cache(&r); break;
    default: fuzz_mha(&r); break;
    }
    return 0;
}
