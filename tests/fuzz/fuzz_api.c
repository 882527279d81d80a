/* fuzz_api.c -- libFuzzer target: the C API's integer and floating-point
 * fields driven to their extremes. Each input is read as a short program: it
 * picks one of attn_sdpa, attn_sdpa_backward, the KV cache calls and
 * attn_mha, and fills every shape, stride, option and count of that call
 * from its bytes, each either small (the shapes the kernels really run) or
 * one of the values where integer arithmetic breaks: 0, -1, INT64_MIN,
 * INT64_MAX, 2^31, 2^32, 2^53, 2^62 and their negatives. It checks only that
 * each call returns a status (with a message when it fails) and never trips
 * AddressSanitizer or UndefinedBehaviorSanitizer.
 *
 * A view the library accepts must lie inside memory this harness owns, or
 * the library would rightly read past it: every tensor points at the middle
 * of its own region, and a fuzzed view whose reach the library could accept
 * (its element offsets fit in int64) but the region cannot hold is made
 * contiguous, or small, before the call. Views whose offsets overflow int64
 * are passed as they are: the library must refuse them. */
#include "attn.h"

#include <math.h>
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

/* Outputs shaped as the call says they must be (so that calls reach the
 * kernels), with fuzzed strides; or fuzzed shapes. */
static void outputs(reader *r, const problem *p, const attn_sdpa_options *o, attn_tensor *out, attn_tensor *lse) {
    int rank = 0;
    int64_t shape[ATTN_MAX_RANK] = {0};
    if (attn_sdpa_shapes(&rank, shape, NULL, &p->q, &p->k, &p->v, o, NULL) != ATTN_OK) {
        rank = p->q.rank >= 0 && p->q.rank <= ATTN_MAX_RANK ? p->q.rank : 3;
        for (int d = 0; d < rank; d++) shape[d] = p->q.shape[d];
    }
    tensor(r, out, p->dt, rank, shape);
    tensor(r, lse, p->dt, rank - 1, shape);
}

static void fuzz_sdpa(reader *r, int backward) {
    problem p;
    call_options co;
    attn_error err;
    make_problem(r, &p);
    options(r, &co, p.dt, p.Hq, p.L, p.S);
    attn_tensor out, lse;
    outputs(r, &p, &co.o, &out, &lse);
    size_t bytes;
    expect_status(attn_sdpa_workspace_size(&bytes, &out, &lse, NULL, &p.q, &p.k, &p.v, &co.o, &err), &err);
    attn_status st = attn_sdpa(&out, &lse, NULL, &p.q, &p.k, &p.v, &co.o, &err);
    expect_status(st, &err);
    if (!backward || st != ATTN_OK) return;
    attn_tensor dq, dk, dv, dout;
    tensor(r, &dout, p.dt, out.rank, out.shape);
    tensor(r, &dq, p.dt, p.q.rank, p.q.shape);
    tensor(r, &dk, p.dt, p.k.rank, p.k.shape);
    tensor(r, &dv, p.dt, p.v.rank, p.v.shape);
    expect_status(attn_sdpa_backward(&dq, &dk, &dv, NULL, &dout, &p.q, &p.k, &p.v, &out, &lse, &co.o, &err), &err);
}

static void fuzz_kv_cache(reader *r) {
    static unsigned char cache_memory[1 << 16] __attribute__((aligned(64)));
    attn_error err;
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = pick_int(r), d.heads = pick_int(r), d.capacity = pick_int(r);
    d.key_dim = pick_int(r), d.value_dim = pick_int(r);
    d.dtype = DTYPES[byte(r) % 5];
    size_t bytes = 0;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    expect_status(st, &err);
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
        expect_status(attn_kv_cache_attend(&out, byte(r) & 1 ? &lse : NULL, &q, cache, &co.o, &err), &err);
        attn_tensor vk, vv;
        expect_status(attn_kv_cache_view(&vk, &vv, cache, (int)(int8_t)byte(r) % 6, &err), &err);
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
    o.attention = &co.o;
    o.context = &co.c;
    if (flags & 16) o.rope = &co.rope, co.rope = attn_rope_options_default(), co.rope.position_offset = pick_int(r);
    tensor(r, &out, dt, 3, xs);
    attn_status st = attn_mha(&out, NULL, &x, &x, &x, &p, &o, &err);
    expect_status(st, &err);
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
