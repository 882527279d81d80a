/* plan.c -- the plan of one call: every argument checked, shapes
 * broadcast, heads grouped (GQA), and the call cut into (batch, head) slices
 * that the kernels take without looking back up. */
#include "sdpa/sdpa.h"
#include "kernels/rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Every tensor is seen in a canonical 5-D form (B1, B2, H, rows, cols): lower
 * ranks are padded on the left with size-1 dimensions, and every size-1
 * dimension gets stride 0, so broadcasting is just "use stride 0". */
enum { CANON = ATTN_CANON_RANK };
typedef attn_canon canon;

attn_canon attn_canonical(const attn_tensor *t) {
    canon c;
    int pad = CANON - t->rank;
    for (int d = 0; d < CANON; d++) {
        int src = d - pad;
        c.shape[d] = src < 0 ? 1 : t->shape[src];
        c.strides[d] = (src < 0 || c.shape[d] == 1) ? 0 : t->strides[src];
    }
    return c;
}

/* Checks shared by q, k, v, out and weights: present, rank 2..5, dimensions
 * >= 1, a float dtype equal to q's, offsets that fit. */
/* kv: t is k or v, which may be f16 or bf16 when q is f32. shapes: NULL
 * data stands for a tensor of that layout not yet allocated (measuring). */
static attn_status check_operand(const attn_tensor *t, const char *name, attn_dtype dtype, bool kv, bool shapes,
                                 attn_error *err) {
    if (!t) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    attn_status st = attn_check_data(t, name, shapes, err);
    if (st) return st;
    if (t->rank < 2 || t->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; attention takes ranks 2 to %d", name,
                         t->rank, ATTN_MAX_RANK);
    const char *tn = attn_dtype_name(t->dtype);
    /* 16-bit and quantized keys and values are widened to f32 in the kernels */
    bool half = attn_dtype_half(t->dtype) || attn_dtype_quantized(t->dtype);
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64 && !(half && kv))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f32 or f64%s", name, tn,
                         kv ? " (or f16, bf16, " ATTN_QUANT_NAMES " with f32 q)" : "");
    if (t->dtype != dtype && !(half && dtype == ATTN_F32))
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but q is %s; all must share one dtype%s",
                         name, tn, attn_dtype_name(dtype), half ? " (f16, bf16 and quantized k and v need f32 q)" : "");
    for (int d = 0; d < t->rank; d++)
        if (t->shape[d] < 1) {
            char s[128];
            attn_format_shape(s, sizeof s, t->rank, t->shape);
            return attn_fail(err, ATTN_ERR_SHAPE,
                             "%s has shape %s; every dimension must be at least 1", name, s);
        }
    return attn_check_extent(t, name, err);
}

attn_status attn_check_half_kv(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, attn_error *err) {
    const attn_tensor *kv[2] = {k, v};
    for (int t = 0; t < 2; t++) {
        if (!kv[t]) continue;
        attn_dtype d = kv[t]->dtype;
        if (d != ATTN_F32 && !attn_dtype_half(d) && !attn_dtype_quantized(d))
            return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but q is %s; with a 16-bit q, k and v are f32, f16, bf16 or "
                             "quantized", t ? "v" : "k", attn_dtype_name(d), attn_dtype_name(q->dtype));
    }
    return ATTN_OK;
}

/* One value per query head (ALiBi's slopes, the sinks): a 1-D f32 or f64
 * tensor of Hq finite values. */
attn_status attn_check_per_head(const attn_tensor *t, const char *name, int64_t Hq, attn_error *err) {
    if (!t->data) return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    if (t->rank != 1 || t->shape[0] != Hq)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s must have shape (%lld,), one value per query head", name,
                         (long long)Hq);
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f32 or f64", name, attn_dtype_name(t->dtype));
    attn_status st = attn_check_extent(t, name, err);
    if (st) return st;
    attn_mat m = {(char *)t->data, t->dtype, 1, Hq, 0, t->strides[0]};
    for (int64_t h = 0; h < Hq; h++)
        if (!isfinite(attn_mat_get(&m, 0, h)))
            return attn_fail(err, ATTN_ERR_OPTION, "%s[%lld] is %g; it must be finite", name, (long long)h,
                             attn_mat_get(&m, 0, h));
    return ATTN_OK;
}

attn_status attn_check_descale(const attn_tensor *t, const char *name, const int64_t kv[3], int64_t st[3],
                               attn_error *err) {
    if (!t->data) return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", name);
    if (t->dtype != ATTN_F32 && t->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; it must be f32 or f64", name, attn_dtype_name(t->dtype));
    char s[128];
    attn_format_shape(s, sizeof s, t->rank, t->shape);
    if (t->rank < 1 || t->rank > 3)
        return attn_fail(err, ATTN_ERR_RANK, "%s has shape %s; it must be (Hk,), (B, Hk) or (B1, B2, Hk)", name, s);
    attn_status e = attn_check_extent(t, name, err);
    if (e) return e;
    int64_t strides[3] = {0, 0, 0}, n = 1;
    for (int d = 0; d < t->rank; d++) {
        int64_t want = kv[3 - t->rank + d], have = t->shape[d];
        if (have != want && have != 1)
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must broadcast to the keys' (%lld, %lld, %lld), "
                             "one scale per KV head", name, s, (long long)kv[0], (long long)kv[1], (long long)kv[2]);
        strides[3 - t->rank + d] = have == 1 ? 0 : t->strides[d];
        n *= have; /* at most kv's product: no overflow */
    }
    for (int64_t i = 0; i < n; i++) { /* every value it holds, in C order */
        int64_t off = 0, r = i;
        for (int d = t->rank - 1; d >= 0; d--) off += r % t->shape[d] * t->strides[d], r /= t->shape[d];
        double x = t->dtype == ATTN_F64 ? ((const double *)t->data)[off] : ((const float *)t->data)[off];
        if (!(x > 0 && x < INFINITY))
            return attn_fail(err, ATTN_ERR_SCALE, "%s holds %g; every scale must be finite and > 0", name, x);
    }
    if (st) memcpy(st, strides, sizeof strides);
    return ATTN_OK;
}

attn_status attn_check_descale_dtype(const attn_sdpa_options *o, attn_dtype k, attn_dtype v, attn_error *err) {
    const attn_tensor *t[2] = {o->k_descale, o->v_descale};
    attn_dtype dt[2] = {k, v};
    for (int i = 0; i < 2; i++)
        if (t[i] && !attn_dtype_fp8(dt[i]))
            return attn_fail(err, ATTN_ERR_DTYPE, "options->%s is set but %s is %s; per-head scales are for e4m3 "
                             "and e5m2 %s", i ? "v_descale" : "k_descale", i ? "v" : "k", attn_dtype_name(dt[i]),
                             i ? "values" : "keys");
    return ATTN_OK;
}

/* An output must have exactly the expected shape, and no dimension of size > 1
 * may have stride 0 (results would overwrite each other). */
static attn_status check_output(const attn_tensor *t, const char *name, const int64_t *expect,
                                attn_error *err) {
    const int64_t *want = expect + CANON - t->rank;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] != want[d]) {
            char got[128], exp[128];
            attn_format_shape(got, sizeof got, t->rank, t->shape);
            attn_format_shape(exp, sizeof exp, t->rank, want);
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s but the result has shape %s",
                             name, got, exp);
        }
    }
    return attn_check_writable(t, name, err);
}

/* The mask is bool or q's dtype, and broadcasts to `target` (B1, B2, Hq, L, S)
 * without adding dimensions beyond the output's rank. */
static attn_status check_mask(const attn_tensor *m, attn_dtype dtype, int out_rank,
                              const int64_t *target, bool shapes, attn_error *err) {
    attn_status st = attn_check_data(m, "mask", shapes, err);
    if (st) return st;
    if (m->dtype != ATTN_BOOL && m->dtype != dtype)
        return attn_fail(err, ATTN_ERR_MASK, "mask is %s; it must be bool or %s",
                         attn_dtype_name(m->dtype), dtype == ATTN_F32 ? "f32 (q being f32, f16 or bf16)" : "f64 like q");
    if (m->rank < 0 || m->rank > out_rank)
        return attn_fail(err, ATTN_ERR_MASK, "mask has rank %d but the output has rank %d",
                         m->rank, out_rank);
    char ms[128], ts[128];
    attn_format_shape(ms, sizeof ms, m->rank, m->shape);
    attn_format_shape(ts, sizeof ts, out_rank, target + CANON - out_rank);
    for (int d = 0; d < m->rank; d++) {
        int64_t want = target[CANON - m->rank + d];
        if (m->shape[d] != want && m->shape[d] != 1)
            return attn_fail(err, ATTN_ERR_MASK,
                             "mask has shape %s, which does not broadcast to %s", ms, ts);
    }
    return attn_check_extent(m, "mask", err);
}

/* A piece's place in the whole sequence (attn_sdpa_options.query_start,
 * total_queries and the key pair): start + n <= total, or total 0 and start 0.
 * what and whats name the field's singular and plural ("query", "queries"):
 * the messages name the fields as attn.h spells them. */
static attn_status check_piece(int64_t start, int64_t total, int64_t n, const char *what, const char *whats,
                               attn_error *err) {
    if (start < 0 || total < 0)
        return attn_fail(err, ATTN_ERR_OPTION, "%s_start and total_%s must be >= 0", what, whats);
    if (total == 0 && start != 0)
        return attn_fail(err, ATTN_ERR_OPTION, "%s_start is %lld but total_%s is 0 (this call's own): give the total",
                         what, (long long)start, whats);
    if (total != 0 && (start > total || n > total - start))
        return attn_fail(err, ATTN_ERR_OPTION, "%s_start %lld plus this call's %lld %s passes total_%s %lld", what,
                         (long long)start, (long long)n, whats, whats, (long long)total);
    return ATTN_OK;
}

/* What a call computes, worked out from q, k, v and the options alone. */
typedef struct plan {
    canon q, k, v;
    int rank;                /* rank of out and weights */
    int64_t out[CANON];      /* canonical shape of out: (B1, B2, Hq, L, Ev) */
    int64_t weights[CANON];  /* canonical shape of weights: (B1, B2, Hq, L, S) */
} plan;

/* The options that do not depend on the shapes. */
static attn_status check_options(const attn_sdpa_options *o, attn_dtype q_dtype, attn_error *err) {
    if (o->causal != ATTN_CAUSAL_NONE && o->causal != ATTN_CAUSAL_TOP_LEFT &&
        o->causal != ATTN_CAUSAL_BOTTOM_RIGHT)
        return attn_fail(err, ATTN_ERR_OPTION, "causal mode %d is not an attn_causal value",
                         (int)o->causal);
    if (o->compute != ATTN_COMPUTE_F32 && o->compute != ATTN_COMPUTE_BF16)
        return attn_fail(err, ATTN_ERR_OPTION, "compute mode %d is not an attn_compute value",
                         (int)o->compute);
    if (o->compute == ATTN_COMPUTE_BF16 && q_dtype != ATTN_F32)
        return attn_fail(err, ATTN_ERR_OPTION, "bf16 compute needs an f32 or 16-bit q; q is %s", attn_dtype_name(q_dtype));
    /* 1 is PyTorch's too: every weight dropped, the output and its
     * gradients zeros (kernels/dropout.h). */
    if (!(o->dropout_p >= 0 && o->dropout_p <= 1))
        return attn_fail(err, ATTN_ERR_OPTION, "dropout_p is %g; it must be from 0 to 1", o->dropout_p);
    if (o->has_scale && !isfinite(o->scale))
        return attn_fail(err, ATTN_ERR_SCALE, "scale is %g; it must be finite", o->scale);
    if (!(o->softcap >= 0 && o->softcap < INFINITY))
        return attn_fail(err, ATTN_ERR_OPTION, "softcap is %g; it must be finite and >= 0 (0: none)", o->softcap);
    if (o->window < 0)
        return attn_fail(err, ATTN_ERR_OPTION, "window is %lld; it must be >= 0 (0: none)", (long long)o->window);
    if (o->window > 0 && o->causal == ATTN_CAUSAL_NONE)
        return attn_fail(err, ATTN_ERR_OPTION, "a sliding window needs a causal mode (top-left or bottom-right)");
    return ATTN_OK;
}

attn_status attn_check_options(const attn_sdpa_options *o, attn_dtype q_dtype, int64_t Hq, int64_t E, attn_error *err) {
    attn_status st;
    if ((st = check_options(o, q_dtype, err)) ||
        (o->alibi_slopes && (st = attn_check_per_head(o->alibi_slopes, "alibi_slopes", Hq, err))))
        return st;
    attn_rope_options ro;
    int64_t rd;
    return o->rope ? attn_rope_read_options(&ro, &rd, o->rope, E, "options->rope", err) : ATTN_OK;
}

/* shapes: q, k, v and the mask may have NULL data (check_operand). */
static attn_status make_plan(plan *pl, const attn_tensor *q, const attn_tensor *k,
                             const attn_tensor *v, const attn_sdpa_options *o, bool shapes, attn_error *err) {
    attn_status st;
    if (!q) return attn_fail(err, ATTN_ERR_NULL, "q is NULL");
    if ((st = check_operand(q, "q", q->dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32, false, shapes, err))) return st;
    if ((st = check_operand(k, "k", q->dtype, true, shapes, err))) return st;
    if ((st = check_operand(v, "v", q->dtype, true, shapes, err))) return st;
    if ((st = check_options(o, q->dtype, err))) return st;

    pl->q = attn_canonical(q);
    pl->k = attn_canonical(k);
    pl->v = attn_canonical(v);
    int64_t L = pl->q.shape[3], E = pl->q.shape[4], S = pl->k.shape[3], Ev = pl->v.shape[4];
    if ((st = check_piece(o->query_start, o->total_queries, L, "query", "queries", err)) ||
        (st = check_piece(o->key_start, o->total_keys, S, "key", "keys", err)))
        return st;
    if ((o->total_queries || o->total_keys) && o->dropout_p > 0)
        return attn_fail(err, ATTN_ERR_OPTION, "dropout is not taken with attention in pieces (total_queries, total_keys)");
    int64_t Hq = pl->q.shape[2], Hk = pl->k.shape[2];
    if (pl->k.shape[4] != E)
        return attn_fail(err, ATTN_ERR_SHAPE,
                         "k has E=%lld but q has E=%lld (their last dimensions must match)",
                         (long long)pl->k.shape[4], (long long)E);
    if (pl->v.shape[3] != S)
        return attn_fail(err, ATTN_ERR_SHAPE, "v has S=%lld row%s but k has S=%lld (they must match)",
                         (long long)pl->v.shape[3], attn_plural(pl->v.shape[3]), (long long)S);
    if (pl->v.shape[2] != Hk)
        return attn_fail(err, ATTN_ERR_HEADS, "v has %lld head%s but k has %lld (they must match)",
                         (long long)pl->v.shape[2], attn_plural(pl->v.shape[2]), (long long)Hk);
    if (Hq % Hk != 0)
        return attn_fail(err, ATTN_ERR_HEADS,
                         "q has %lld head%s, not a multiple of k's and v's %lld heads",
                         (long long)Hq, attn_plural(Hq), (long long)Hk);

    /* Batch dimensions broadcast: each equal to the largest, or 1. */
    for (int d = 0; d < 2; d++) {
        int64_t a = pl->q.shape[d], b = pl->k.shape[d], c = pl->v.shape[d];
        int64_t n = a > b ? a : b;
        n = n > c ? n : c;
        if ((a != 1 && a != n) || (b != 1 && b != n) || (c != 1 && c != n)) {
            char sq[128], sk[128], sv[128];
            attn_format_shape(sq, sizeof sq, q->rank, q->shape);
            attn_format_shape(sk, sizeof sk, k->rank, k->shape);
            attn_format_shape(sv, sizeof sv, v->rank, v->shape);
            return attn_fail(err, ATTN_ERR_BROADCAST,
                             "batch dimensions of q %s, k %s and v %s are neither equal nor 1",
                             sq, sk, sv);
        }
        pl->out[d] = pl->weights[d] = n;
    }
    pl->out[2] = pl->weights[2] = Hq;
    pl->out[3] = pl->weights[3] = L;
    pl->out[4] = Ev;
    pl->weights[4] = S;
    pl->rank = q->rank > k->rank ? q->rank : k->rank;
    pl->rank = pl->rank > v->rank ? pl->rank : v->rank;
    if (o->mask && (st = check_mask(o->mask, q->dtype, pl->rank, pl->weights, shapes, err))) return st;
    if (o->alibi_slopes && (st = attn_check_per_head(o->alibi_slopes, "alibi_slopes", Hq, err))) return st;
    if (o->sinks && (st = attn_check_per_head(o->sinks, "sinks", Hq, err))) return st;
    if (o->k_descale && (st = attn_check_descale(o->k_descale, "k_descale", pl->k.shape, NULL, err))) return st;
    if (o->v_descale && (st = attn_check_descale(o->v_descale, "v_descale", pl->v.shape, NULL, err))) return st;
    attn_rope_options ro;
    int64_t rd;
    if (o->rope && (st = attn_rope_read_options(&ro, &rd, o->rope, pl->q.shape[4], "options->rope", err))) return st;
    /* RoPE's positions are exact in double, and their sums in int64, only
     * up to 2^53: the whole sequence's last position must stay there
     * (compared before adding, position_offset being at most 2^53). */
    int64_t Lt = o->total_queries ? o->total_queries : L, St = o->total_keys ? o->total_keys : S;
    if (o->rope && (Lt > St ? Lt : St) > ((int64_t)1 << 53) - ro.position_offset)
        return attn_fail(err, ATTN_ERR_OPTION,
                         "RoPE's positions run from position_offset %lld over %lld positions, past 2^53",
                         (long long)ro.position_offset, (long long)(Lt > St ? Lt : St));
    return ATTN_OK;
}

/* What attn_sdpa checks of a 16-bit q before it runs the f32 call on a copy
 * (sdpa.c, sdpa_half): its data, rank and extent, and k and v beside it;
 * then *q32 is a contiguous f32 stand-in of its shape over its data (never
 * read), on which the f32 call's checks run as they run on the copy. */
static attn_status half_stand_in(attn_tensor *q32, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 attn_error *err) {
    attn_status st;
    if ((st = attn_check_data(q, "q", false, err))) return st;
    if (q->rank < 2 || q->rank > ATTN_MAX_RANK)
        return attn_fail(err, ATTN_ERR_RANK, "q has rank %d; attention takes ranks 2 to %d", q->rank, ATTN_MAX_RANK);
    if ((st = attn_check_extent(q, "q", err)) || (st = attn_check_half_kv(q, k, v, err)) ||
        (st = attn_tensor_init(q32, q->data, ATTN_F32, q->rank, q->shape, NULL, err)))
        return st;
    return attn_check_extent(q32, "q's f32 copy", err);
}

attn_status attn_sdpa_shapes(int *rank, int64_t out_shape[ATTN_MAX_RANK],
                             int64_t weights_shape[ATTN_MAX_RANK], const attn_tensor *q,
                             const attn_tensor *k, const attn_tensor *v,
                             const attn_sdpa_options *options, attn_error *err) {
    attn_sdpa_options o;
    attn_context c;
    attn_status st = attn_options_read(&o, &c, options, err);
    if (st) return st;
    /* Dimensions of 0 (attn.h): taken where attn_sdpa takes them, the
     * shapes found with each 0 read as 1 and the 0s put back where the
     * result has them. */
    attn_empty e = {0};
    attn_empty_arg args[4] = {{q, "q", ATTN_PART_Q, NULL, {0}}, {k, "k", ATTN_PART_KV, NULL, {0}},
                              {v, "v", ATTN_PART_KV, NULL, {0}}, {o.mask, "mask", ATTN_PART_MASK, NULL, {0}}};
    if (q && k && v && (st = attn_empty_check(&e, args, 4, err))) return st;
    if (e.any) {
        q = &args[0].one, k = &args[1].one, v = &args[2].one;
        if (o.mask) o.mask = &args[3].one;
    }
    attn_tensor q32; /* a 16-bit q is checked as attn_sdpa checks it: on an f32 stand-in */
    if (q && attn_dtype_half(q->dtype) && (st = half_stand_in(&q32, q, k, v, err))) return st;
    plan pl;
    /* (an empty call reads nothing: its stand-ins are layouts, as a measuring call's) */
    st = make_plan(&pl, q && attn_dtype_half(q->dtype) ? &q32 : q, k, v, &o, e.any, err);
    if (st) return st;
    for (int d = 0; d < pl.rank; d++) {
        int pos = pl.rank - d; /* counted from the right, 1 the last */
        bool zero = false;     /* a batch dimension of 0 in q, k or v, or L = 0 */
        for (int i = 0; e.any && i < 3; i++)
            zero |= (pos >= 4 || (pos == 2 && i == 0)) && args[i].t->rank >= pos &&
                    args[i].t->shape[args[i].t->rank - pos] == 0;
        if (out_shape) out_shape[d] = zero ? 0 : pl.out[CANON - pl.rank + d];
        if (weights_shape) weights_shape[d] = zero || (pos == 1 && e.no_keys) ? 0 : pl.weights[CANON - pl.rank + d];
    }
    if (rank) *rank = pl.rank;
    return ATTN_OK;
}

attn_status attn_options_read(attn_sdpa_options *o, attn_context *context,
                              const attn_sdpa_options *options, attn_error *err) {
    *o = attn_sdpa_options_default();
    attn_context c = attn_context_default();
    attn_status st;
    if ((st = attn_versioned_read(o, sizeof *o, options, "options", "start from attn_sdpa_options_default()", err)) ||
        (st = attn_versioned_read(&c, sizeof c, o->context, "context", "start from attn_context_default()", err)))
        return st;
    if (c.num_threads < 0 || c.num_threads > 256)
        return attn_fail(err, ATTN_ERR_OPTION, "context->num_threads is %d; it must be 0 to 256",
                         c.num_threads);
    if (!c.workspace && c.workspace_size)
        return attn_fail(err, ATTN_ERR_OPTION, "context->workspace is NULL but workspace_size is %zu",
                         c.workspace_size);
    if (!c.num_threads) c.num_threads = attn_get_num_threads();
    o->context = NULL; /* read: use *context */
    *context = c;
    return ATTN_OK;
}

/* lse must be out's shape without its last dimension, q's dtype, and
 * writable (no stride 0 in a dimension of size > 1). */
static attn_status check_lse(const attn_tensor *lse, const plan *pl, attn_dtype dtype, bool shapes, attn_error *err) {
    attn_status st = attn_check_data(lse, "lse", shapes, err);
    if (st) return st;
    if (lse->dtype != dtype)
        return attn_fail(err, ATTN_ERR_DTYPE, "lse is %s but q is %s; they must match",
                         attn_dtype_name(lse->dtype), attn_dtype_name(dtype));
    if (lse->rank != pl->rank - 1)
        return attn_fail(err, ATTN_ERR_RANK, "lse has rank %d but it must be %d (out's without Ev)",
                         lse->rank, pl->rank - 1);
    int64_t want[CANON];
    memcpy(want, pl->out, sizeof want);
    memmove(want + 1, want, sizeof(int64_t) * (CANON - 1)); /* drop Ev: (1, B1, B2, Hq, L) */
    want[0] = 1;
    st = check_output(lse, "lse", want, err);
    return st ? st : attn_check_extent(lse, "lse", err);
}

/* lse (..., L) seen as (..., L, 1), so that a slice's lse is a matrix. */
static canon canonical_lse(const attn_tensor *lse) {
    attn_tensor t = *lse;
    t.shape[t.rank] = 1, t.strides[t.rank] = 0, t.rank++;
    return attn_canonical(&t);
}

attn_status attn_rope_prepare(attn_slices *sl, attn_rope_plan *rp, attn_error *err) {
    if (!sl->has_rope) return ATTN_OK;
    int64_t L = sl->cq.shape[3], S = sl->ck.shape[3], steps = L > S ? L : S;
    steps = steps < 256 ? steps : 256; /* rows turned from one angle: a block's worth */
    int64_t n = attn_rope_plan_doubles(sl->rope_dim, steps);
    double *mem = attn_arena_alloc(sl->arena, (size_t)(n > 0 ? n : 1), sizeof(double));
    if (sl->arena->measure) return ATTN_OK;
    if (!mem)
        return attn_fail(err, sl->arena->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY,
                         "cannot allocate RoPE's table (%lld doubles)", (long long)n);
    attn_rope_plan_init(rp, &sl->rope, sl->rope_dim, steps, mem);
    sl->base.rope = rp;
    return ATTN_OK;
}

/* attn_plan_call, or with `shapes` attn_plan_shapes. */
static attn_status plan_call(attn_slices *sl, attn_tensor *out, attn_tensor *lse, attn_tensor *weights, bool scores,
                             const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *o,
                             int threads, bool shapes, attn_error *err) {
    plan pl;
    attn_status st = make_plan(&pl, q, k, v, o, shapes, err);
    if (st) return st;
    /* For attn_scores, `out` receives the scores, shaped like the weights. */
    const char *out_name = scores ? "scores" : "out";
    if ((st = check_operand(out, out_name, q->dtype, false, shapes, err))) return st;
    if (out->rank != pl.rank)
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d but the result has rank %d",
                         out_name, out->rank, pl.rank);
    if ((st = check_output(out, out_name, scores ? pl.weights : pl.out, err)))
        return st;
    if (weights) {
        if (o->compute == ATTN_COMPUTE_BF16)
            return attn_fail(err, ATTN_ERR_OPTION, "bf16 compute does not write weights");
        if ((st = check_operand(weights, "weights", q->dtype, false, shapes, err))) return st;
        if (weights->rank != pl.rank)
            return attn_fail(err, ATTN_ERR_RANK, "weights has rank %d but the result has rank %d",
                             weights->rank, pl.rank);
        if ((st = check_output(weights, "weights", pl.weights, err))) return st;
    }
    if (lse && (st = check_lse(lse, &pl, q->dtype, shapes, err))) return st;
    const attn_named outs[3] = {{out, out_name}, {lse, "lse"}, {weights, "weights"}};
    attn_named ins[3 + ATTN_OPTION_TENSORS] = {{q, "q"}, {k, "k"}, {v, "v"}};
    if ((st = attn_check_no_overlap(outs, 3, ins, attn_named_options(ins, 3, ATTN_NAMED_CAP(ins), o), err))) return st;
    int64_t L = pl.q.shape[3], E = pl.q.shape[4], S = pl.k.shape[3];
    memset(sl, 0, sizeof *sl);
    sl->q = q, sl->k = k, sl->v = v, sl->out = out, sl->weights = weights, sl->mask = o->mask;
    sl->lse = lse;
    sl->cq = pl.q, sl->ck = pl.k, sl->cv = pl.v, sl->co = attn_canonical(out);
    if (weights) sl->cw = attn_canonical(weights);
    if (o->mask) sl->cm = attn_canonical(o->mask);
    if (lse) sl->cl = canonical_lse(lse);
    sl->base.scale = o->has_scale ? o->scale : 1.0 / sqrt((double)E);
    sl->base.dropout_p = o->dropout_p, sl->base.dropout_seed = o->dropout_seed;
    sl->base.causal = o->causal != ATTN_CAUSAL_NONE;
    /* In the whole sequence's positions (a piece's are offset by its starts):
     * key j' is visible to query i' when j' <= i' + off, so locally j <= i +
     * (query_start + off - key_start). */
    int64_t Lt = o->total_queries ? o->total_queries : L, St = o->total_keys ? o->total_keys : S;
    int64_t shift = o->query_start - o->key_start;
    sl->base.causal_offset = (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT ? St - Lt : 0) + shift;
    sl->base.softcap = o->softcap, sl->base.window = o->window;
    /* ALiBi's distances are from the causal diagonal, bottom-right without one. */
    sl->base.alibi_offset = (o->causal == ATTN_CAUSAL_TOP_LEFT ? 0 : St - Lt) + shift;
    /* A piece holding only some of the row's keys must take its softmax from
     * the whole's lse; one holding every key (key_start 0, total_keys S) is
     * the whole row, and is differentiated as a call without pieces is: an
     * lse too large to carry log l (a row under -FLT_MAX) is then recomputed
     * rather than giving each key a weight near 1. */
    sl->base.softmax_from_lse = o->total_keys != 0 && !(o->key_start == 0 && o->total_keys == S);
    sl->alibi = o->alibi_slopes;
    sl->sinks = o->sinks;
    sl->k_descale = o->k_descale, sl->v_descale = o->v_descale; /* checked in make_plan */
    if (o->k_descale) attn_check_descale(o->k_descale, "", pl.k.shape, sl->kd_strides, NULL);
    if (o->v_descale) attn_check_descale(o->v_descale, "", pl.v.shape, sl->vd_strides, NULL);
    if (o->rope) { /* checked in make_plan */
        sl->has_rope = true;
        attn_rope_read_options(&sl->rope, &sl->rope_dim, o->rope, E, "options->rope", NULL);
        sl->base.rope_k0 = sl->rope.position_offset + o->key_start;
        sl->base.rope_q0 = sl->rope.position_offset + o->key_start + sl->base.alibi_offset;
    }
    sl->count = pl.out[0] * pl.out[1] * pl.out[2]; /* <= out's element count: no overflow */
    sl->threads = threads;
    return ATTN_OK;
}

attn_status attn_plan_call(attn_slices *sl, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                           bool scores, const attn_tensor *q, const attn_tensor *k,
                           const attn_tensor *v, const attn_sdpa_options *o, int threads,
                           attn_error *err) {
    return plan_call(sl, out, lse, weights, scores, q, k, v, o, threads, false, err);
}

attn_status attn_plan_shapes(attn_slices *sl, attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                             const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_sdpa_options *o, int threads, attn_error *err) {
    return plan_call(sl, out, lse, weights, false, q, k, v, o, threads, true, err);
}
