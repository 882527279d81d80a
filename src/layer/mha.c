/* mha.c -- multi-head attention, torch.nn.MultiheadAttention's forward
 * (attn.h): project, split into heads, attend with attn_sdpa, merge the heads,
 * project out; and the pieces of a call that the layer's step over a cache
 * (mha_cached.c, mha_paged.c) and its backward pass (mha_backward.c) share
 * with it (mha.h). The projections are kernels/gemm.c's: summed in f32 for an
 * f32 layer (attn_sgemm), in double for an f64 one (attn_gemm, the exact
 * path the tests hold to PyTorch's float64); the attention is attn_sdpa's,
 * so every kernel and check applies. Projected
 * heads are kept as (N, rows, H·D), each projection's natural layout, and
 * seen by the attention as (N, H, rows, D) through strides.
 *
 * Shapes: N sequences, L queries, S keys (S2 = S + 1 with bias_k, + 1 more
 * with add_zero_attn), E = Hq · D. */
#include "layer/mha.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "sdpa/sdpa.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t attn_mha_params_init(attn_mha_params *params, size_t struct_size) {
    static const attn_mha_params DEFAULTS = {.struct_size = sizeof DEFAULTS};
    return attn_versioned_init(params, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

size_t attn_mha_options_init(attn_mha_options *options, size_t struct_size) {
    static const attn_mha_options DEFAULTS = {.struct_size = sizeof DEFAULTS, .average_attn_weights = 1};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* x (L, N, F), (N, L, F) with batch_first, or (L, F), seen as (N, L, F). */
attn_status attn_mha_as_batch(attn_tensor *out, const attn_tensor *x, const char *name, const attn_mha_call *m, int64_t features,
                            attn_error *err) {
    if (!x) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", name);
    attn_status st = attn_check_data(x, name, m->measuring, err);
    if (st) return st;
    if (x->rank != (m->batched ? 3 : 2))
        return attn_fail(err, ATTN_ERR_RANK, "%s has rank %d; the query's rank (%d) is needed", name, x->rank,
                         m->batched ? 3 : 2);
    if (x->dtype != m->dt) return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s but query is %s", name, attn_dtype_name(x->dtype), attn_dtype_name(m->dt));
    if (x->shape[x->rank - 1] != features)
        return attn_fail(err, ATTN_ERR_SHAPE, "%s has %lld feature%s; it must have %lld", name,
                         (long long)x->shape[x->rank - 1], attn_plural(x->shape[x->rank - 1]), (long long)features);
    *out = *x;
    out->rank = 3;
    if (!m->batched) { /* (L, F) -> (1, L, F) */
        out->shape[0] = 1, out->shape[1] = x->shape[0], out->shape[2] = x->shape[1];
        out->strides[0] = 0, out->strides[1] = x->strides[0], out->strides[2] = x->strides[1];
    } else if (!m->o.batch_first) { /* (L, N, F) -> (N, L, F) */
        out->shape[0] = x->shape[1], out->shape[1] = x->shape[0];
        out->strides[0] = x->strides[1], out->strides[1] = x->strides[0];
    }
    return attn_check_extent(x, name, err);
}

/* A parameter tensor: f32, f16, bf16 or the layer's dtype (checkpoints
 * ship 16-bit weights; the products widen them exactly as they pack them),
 * exactly this shape (rank 1 or 2). */
static attn_status check_param(const attn_tensor *t, const char *name, const attn_mha_call *m, int rank, int64_t d0, int64_t d1,
                               attn_error *err) {
    attn_status st = attn_check_data(t, name, m->measuring, err);
    if (st) return st;
    if (t->dtype != m->dt && t->dtype != ATTN_F32 && t->dtype != ATTN_F16 && t->dtype != ATTN_BF16)
        return attn_fail(err, ATTN_ERR_DTYPE, "%s is %s; the inputs are %s (parameters are f32, f16, bf16 or the inputs' dtype)",
                         name, attn_dtype_name(t->dtype), attn_dtype_name(m->dt));
    if (t->rank != rank || t->shape[0] != d0 || (rank == 2 && t->shape[1] != d1)) {
        char s[128];
        attn_format_shape(s, sizeof s, t->rank, t->shape);
        return rank == 2 ? attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must be (%lld, %lld)", name, s, (long long)d0, (long long)d1)
                         : attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must be (%lld,)", name, s, (long long)d0);
    }
    return attn_check_extent(t, name, err);
}

attn_status attn_mha_check_params(attn_mha_call *m, attn_error *err) {
    const attn_mha_params *p = &m->p;
    m->E = p->embed_dim, m->Hq = p->num_heads, m->Hkv = p->num_kv_heads ? p->num_kv_heads : p->num_heads;
    m->kdim = p->kdim ? p->kdim : m->E, m->vdim = p->vdim ? p->vdim : m->E;
    if (m->E < 1 || m->E > ((int64_t)1 << 24))
        return attn_fail(err, ATTN_ERR_SHAPE, "embed_dim is %lld; it must be 1 to %lld", (long long)m->E,
                         (long long)1 << 24);
    const int64_t sizes[4] = {p->num_heads, p->num_kv_heads, p->kdim, p->vdim}, least[4] = {1, 0, 0, 0};
    static const char *const SIZES[4] = {"num_heads", "num_kv_heads", "kdim", "vdim"};
    for (int i = 0; i < 4; i++) /* the last three: 0 for their defaults */
        if (sizes[i] < least[i])
            return attn_fail(err, ATTN_ERR_SHAPE, "%s is %lld; it must be %s", SIZES[i], (long long)sizes[i],
                             least[i] ? "at least 1" : "0 (the default) or more");
    if (m->E % m->Hq) return attn_fail(err, ATTN_ERR_HEADS, "embed_dim %lld is not a multiple of num_heads %lld", (long long)m->E, (long long)m->Hq);
    if (m->Hq % m->Hkv) return attn_fail(err, ATTN_ERR_HEADS, "num_heads %lld is not a multiple of num_kv_heads %lld", (long long)m->Hq, (long long)m->Hkv);
    m->D = m->E / m->Hq;
    int64_t rows[3] = {m->E, m->Hkv * m->D, m->Hkv * m->D}, in[3] = {m->E, m->kdim, m->vdim};
    attn_status st;
    static const char *const W[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    static const char *const B[3] = {"q_proj_bias", "k_proj_bias", "v_proj_bias"};
    const attn_tensor *w[3] = {p->q_proj_weight, p->k_proj_weight, p->v_proj_weight};
    const attn_tensor *b[3] = {p->q_proj_bias, p->k_proj_bias, p->v_proj_bias};
    /* One set of projections or the other: a parameter of the set not used
     * was ignored, so a layer given both ran without the caller knowing
     * which. */
    for (int t = 0; t < 3; t++) {
        if (p->in_proj_weight && (w[t] || b[t]))
            return attn_fail(err, ATTN_ERR_OPTION, "in_proj_weight and %s were both given: give in_proj_weight (and "
                             "in_proj_bias) or the separate q, k and v projections, not both", w[t] ? W[t] : B[t]);
        if (p->in_proj_bias && b[t])
            return attn_fail(err, ATTN_ERR_OPTION, "in_proj_bias and %s were both given: give one or the other", B[t]);
    }
    if (p->in_proj_weight) { /* packed: (3E, E), only without GQA or other kdim/vdim */
        if (m->Hkv != m->Hq || m->kdim != m->E || m->vdim != m->E)
            return attn_fail(err, ATTN_ERR_OPTION, "in_proj_weight packs q, k and v: it needs kdim = vdim = E and no GQA; "
                             "give q_proj_weight, k_proj_weight and v_proj_weight instead");
        if ((st = check_param(p->in_proj_weight, "in_proj_weight", m, 2, 3 * m->E, m->E, err))) return st;
        for (int t = 0; t < 3; t++) m->w[t] = p->in_proj_weight, m->w_row0[t] = t * m->E, m->b[t] = NULL, m->b_row0[t] = 0;
    } else {
        for (int t = 0; t < 3; t++) {
            if (!w[t]) return attn_fail(err, ATTN_ERR_NULL, "give in_proj_weight, or q_proj_weight, k_proj_weight and v_proj_weight");
            if ((st = check_param(w[t], W[t], m, 2, rows[t], in[t], err))) return st;
            if (b[t] && (st = check_param(b[t], B[t], m, 1, rows[t], 0, err))) return st;
            m->w[t] = w[t], m->b[t] = b[t], m->w_row0[t] = 0, m->b_row0[t] = 0;
        }
    }
    /* in_proj_bias (3E,) packs the three biases beside either kind of
     * weight: PyTorch's module keeps it packed when kdim or vdim makes it
     * use separate weights, and its state_dict names it so. Without GQA
     * each part is E long. */
    if (p->in_proj_bias) {
        if (m->Hkv != m->Hq)
            return attn_fail(err, ATTN_ERR_OPTION, "in_proj_bias packs three biases of E; with num_kv_heads < num_heads "
                             "give q_proj_bias, k_proj_bias and v_proj_bias instead");
        if ((st = check_param(p->in_proj_bias, "in_proj_bias", m, 1, 3 * m->E, 0, err))) return st;
        for (int t = 0; t < 3; t++) m->b[t] = p->in_proj_bias, m->b_row0[t] = t * m->E;
    }
    if (!p->out_proj_weight) return attn_fail(err, ATTN_ERR_NULL, "out_proj_weight is NULL");
    if ((st = check_param(p->out_proj_weight, "out_proj_weight", m, 2, m->E, m->E, err))) return st;
    if (p->out_proj_bias && (st = check_param(p->out_proj_bias, "out_proj_bias", m, 1, m->E, 0, err))) return st;
    if (!p->bias_k != !p->bias_v) return attn_fail(err, ATTN_ERR_NULL, "bias_k and bias_v come together (add_bias_kv)");
    const attn_tensor *bkv[2] = {p->bias_k, p->bias_v};
    for (int t = 0; t < 2 && p->bias_k; t++) {
        attn_tensor flat = *bkv[t]; /* (1, 1, Hkv·D) */
        if (flat.rank != 3 || flat.shape[0] != 1 || flat.shape[1] != 1 || flat.shape[2] != rows[1]) {
            /* named by the shape given: the flattened one's "(7,)" was never the caller's */
            char s[128];
            attn_format_shape(s, sizeof s, flat.rank, flat.shape);
            return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; it must be (1, 1, %lld)", t ? "bias_v" : "bias_k", s,
                             (long long)rows[1]);
        }
        flat.rank = 1, flat.shape[0] = flat.shape[2], flat.strides[0] = flat.strides[2];
        if ((st = check_param(&flat, t ? "bias_v" : "bias_k", m, 1, rows[1], 0, err))) return st;
    }
    return ATTN_OK;
}

void attn_mha_inputs(attn_named list[ATTN_MHA_INPUTS], const attn_mha_call *m, const attn_tensor *query,
                     const attn_tensor *key, const attn_tensor *value) {
    const attn_mha_params *p = &m->p;
    const attn_named all[18] = {
        {query, "query"}, {key, "key"}, {value, "value"},
        {p->in_proj_weight, "in_proj_weight"}, {p->in_proj_bias, "in_proj_bias"},
        {p->q_proj_weight, "q_proj_weight"}, {p->k_proj_weight, "k_proj_weight"}, {p->v_proj_weight, "v_proj_weight"},
        {p->q_proj_bias, "q_proj_bias"}, {p->k_proj_bias, "k_proj_bias"}, {p->v_proj_bias, "v_proj_bias"},
        {p->out_proj_weight, "out_proj_weight"}, {p->out_proj_bias, "out_proj_bias"},
        {p->bias_k, "bias_k"}, {p->bias_v, "bias_v"},
        {m->o.key_padding_mask, "key_padding_mask"}, {m->o.attn_mask, "attn_mask"},
        {m->packed_memory.data ? &m->packed_memory : NULL, "options->packed (the packed weights)"}};
    memcpy(list, all, sizeof all);
    /* cannot overflow: ATTN_MHA_INPUTS is counted from these */
    attn_named_options(list, ATTN_NAMED_CAP(all), ATTN_MHA_INPUTS, &m->attention);
}

void attn_mha_heads_view(attn_tensor *t, char *data, const attn_mha_call *m, int64_t H, int64_t rows) {
    int64_t shape[4] = {m->N, H, rows, m->D}, strides[4] = {rows * H * m->D, m->D, H * m->D, 1};
    attn_tensor_init(t, data, m->dt, 4, shape, strides, NULL);
}

attn_mat attn_mha_rows(const attn_tensor *x, int64_t n, int64_t rows) {
    attn_mat a = {(char *)x->data + n * x->strides[0] * (int64_t)attn_dtype_size(x->dtype), x->dtype, rows, x->shape[2],
                  x->strides[1], x->strides[2]};
    return a;
}

const attn_bf16_kernels *attn_mha_gemm16(attn_dtype layer, const attn_tensor *w) {
    const attn_bf16_kernels *bk = layer == ATTN_F32 && w->dtype == ATTN_BF16 ? attn_bf16_active() : NULL;
    return bk && bk->gemm ? bk : NULL;
}

/* c = a · b [+ bias], b the weight w read transposed: an f32 layer's
 * products on bf16 pairs with f32 sums for a bf16 weight where a bf16 set
 * has a GEMM (attn_gemm_bf16), else summed in f32 (attn_sgemm); an f64
 * layer's in double (attn_gemm, the exact path). */
static bool product(const attn_mat *c, const attn_mat *a, const attn_mat *b, const void *packed, const attn_mat *bias,
                    const attn_tensor *w, const attn_mha_call *m) {
    const attn_bf16_kernels *bk = attn_mha_gemm16(m->dt, w);
    if (bk) return attn_gemm_bf16(c, a, b, packed, bias, false, m->threads, bk, m->gemm_scratch);
    if (m->dt == ATTN_F32) return attn_sgemm(c, a, b, packed, bias, false, m->threads, NULL, m->gemm_scratch);
    return attn_gemm(c, a, b, bias, false, m->threads, NULL, m->gemm_scratch);
}

void attn_mha_verbose_gemm(const char *call, const attn_mha_call *m) {
    if (!attn_verbose_on()) return;
    const attn_tensor *w[4] = {m->w[0], m->w[1], m->w[2], m->p.out_proj_weight};
    const attn_ukernels *uk = attn_ukernels_active();
    char names[4][64];
    for (int t = 0; t < 4; t++) {
        const attn_bf16_kernels *bk = attn_mha_gemm16(m->dt, w[t]);
        if (bk) snprintf(names[t], sizeof names[t], "bf16:%s/%dx%d", bk->name, bk->gemm_mr, bk->gemm_nr);
        else if (m->dt == ATTN_F32) snprintf(names[t], sizeof names[t], "f32:%s/%dx%d", uk->name, uk->sgemm_mr, uk->sgemm_nr);
        else snprintf(names[t], sizeof names[t], "f64:%s/%dx%d", uk->name, uk->dgemm_mr, uk->dgemm_nr);
    }
    attn_verbose_gemm(call, names[0], names[1], names[2], names[3], m->threads, m->o.packed != NULL);
}

size_t attn_mha_gemm_scratch_bytes(const attn_mha_call *m, int64_t key_rows) {
    bool f32 = m->dt == ATTN_F32;
    int64_t F[4] = {m->Hq * m->D, m->Hkv * m->D, m->Hkv * m->D, m->E}, in[4] = {m->E, m->kdim, m->vdim, m->E};
    int64_t rows[4] = {m->N * m->L, m->N * key_rows, m->N * key_rows, m->N * m->L};
    const attn_tensor *w[4] = {m->w[0], m->w[1], m->w[2], m->p.out_proj_weight};
    size_t most = 0;
    for (int t = 0; t < 4; t++) {
        const attn_bf16_kernels *bk = attn_mha_gemm16(m->dt, w[t]);
        size_t b = bk ? attn_gemm_bf16_scratch_bytes(rows[t], F[t], in[t], m->threads, bk, m->packed[t] != NULL)
                      : attn_gemm_scratch_bytes(f32, rows[t], F[t], in[t], m->threads, NULL, m->packed[t] != NULL);
        most = b > most ? b : most;
    }
    return most;
}

bool attn_mha_project(char *dst, const attn_tensor *x, const attn_tensor *w, const void *packed, const attn_tensor *b,
                      int64_t row0, int64_t b_row0, int64_t F, int64_t rows_out, const attn_tensor *bias_kv, const attn_mha_call *m) {
    int64_t N = x->shape[0], rows = x->shape[1], in = x->shape[2], es = (int64_t)attn_dtype_size(m->dt);
    int64_t wes = (int64_t)attn_dtype_size(w->dtype), bes = b ? (int64_t)attn_dtype_size(b->dtype) : 0;
    /* b(p, f) = W[row0 + f, p]: the weight read transposed where it lies. */
    attn_mat wt = {(char *)w->data + row0 * w->strides[0] * wes, w->dtype, in, F, w->strides[1], w->strides[0]};
    attn_mat bias = {b ? (char *)b->data + b_row0 * b->strides[0] * bes : NULL, b ? b->dtype : m->dt, 1, F, 0, b ? b->strides[0] : 0};
    /* One product over all N·rows rows when they are evenly spaced. */
    bool whole = rows_out == rows && attn_mha_rows_even(x);
    for (int64_t n = 0; rows > 0 && n < (whole ? 1 : N); n++) { /* sequences of no rows: no address formed */
        attn_mat a = attn_mha_rows(x, n, whole ? N * rows : rows);
        attn_mat c = {dst + n * rows_out * F * es, m->dt, a.rows, F, F, 1};
        if (!product(&c, &a, &wt, packed, b ? &bias : NULL, w, m)) return false;
    }
    if (!bias_kv) return true;
    attn_mat bkv = {(char *)bias_kv->data, bias_kv->dtype, 1, F, 0, bias_kv->strides[2]};
    for (int64_t n = 0; n < N; n++) {
        attn_mat c = {dst + (n * rows_out + rows) * F * es, m->dt, 1, F, F, 1};
        for (int64_t f = 0; f < F; f++) attn_mat_set(&c, 0, f, attn_mat_get(&bkv, 0, f));
    }
    return true;
}

/* A mask's value for query i, key j < S of sequence n and head h, added to
 * the score: PyTorch's polarity for this module (a bool true ignores). */
static double mask_term(const attn_tensor *t, const attn_mha_call *m, int64_t n, int64_t h, int64_t i, int64_t j, bool kpm) {
    int64_t off;
    if (kpm) off = (m->batched ? n * t->strides[0] : 0) + j * t->strides[t->rank - 1];
    else off = (t->rank == 3 ? ((m->batched ? n * m->Hq : 0) + h) * t->strides[0] : 0) + i * t->strides[t->rank - 2] +
               j * t->strides[t->rank - 1];
    if (t->dtype == ATTN_BOOL) return ((const unsigned char *)t->data)[off] ? -INFINITY : 0.0;
    return t->dtype == ATTN_F64 ? ((const double *)t->data)[off] : ((const float *)t->data)[off];
}

attn_status attn_mha_check_masks(const attn_mha_call *m, attn_error *err) {
    const attn_tensor *am = m->o.attn_mask, *kpm = m->o.key_padding_mask;
    attn_status st;
    if ((am && (st = attn_check_data(am, "attn_mask", m->measuring, err))) ||
        (kpm && (st = attn_check_data(kpm, "key_padding_mask", m->measuring, err))))
        return st;
    /* The message names what was given beside what fits, in numbers: in a
     * cached step S is the keys the cache will hold, which the caller does
     * not see in any argument. */
    char given[128];
    if (am) {
        bool ok = (am->dtype == ATTN_BOOL || am->dtype == m->dt) &&
                  ((am->rank == 2 && am->shape[0] == m->L && am->shape[1] == m->S) ||
                   (am->rank == 3 && am->shape[0] == m->N * m->Hq && am->shape[1] == m->L && am->shape[2] == m->S));
        if (!ok) {
            attn_format_shape(given, sizeof given, am->rank, am->shape);
            return attn_fail(err, ATTN_ERR_MASK,
                             "attn_mask is %s of shape %s; it must be bool or %s, shaped (L, S) = (%lld, %lld) or "
                             "(N·Hq, L, S) = (%lld, %lld, %lld)",
                             attn_dtype_name(am->dtype), given, attn_dtype_name(m->dt), (long long)m->L,
                             (long long)m->S, (long long)(m->N * m->Hq), (long long)m->L, (long long)m->S);
        }
    }
    if (kpm) {
        bool ok = (kpm->dtype == ATTN_BOOL || kpm->dtype == m->dt) &&
                  (m->batched ? kpm->rank == 2 && kpm->shape[0] == m->N && kpm->shape[1] == m->S
                              : kpm->rank == 1 && kpm->shape[0] == m->S);
        if (!ok) {
            attn_format_shape(given, sizeof given, kpm->rank, kpm->shape);
            return m->batched ? attn_fail(err, ATTN_ERR_MASK,
                                          "key_padding_mask is %s of shape %s; it must be bool or %s, shaped (N, S) = "
                                          "(%lld, %lld)",
                                          attn_dtype_name(kpm->dtype), given, attn_dtype_name(m->dt), (long long)m->N,
                                          (long long)m->S)
                              : attn_fail(err, ATTN_ERR_MASK,
                                          "key_padding_mask is %s of shape %s; it must be bool or %s, shaped (S,) = "
                                          "(%lld,)",
                                          attn_dtype_name(kpm->dtype), given, attn_dtype_name(m->dt), (long long)m->S);
        }
    }
    st = am ? attn_check_extent(am, "attn_mask", err) : ATTN_OK;
    return st || !kpm ? st : attn_check_extent(kpm, "key_padding_mask", err);
}

void attn_mha_mask_view(attn_tensor *t, char *data, const attn_mha_call *m) {
    int64_t shape[4] = {m->mask_n, m->mask_h, m->mask_l, m->S2};
    attn_tensor_init(t, data, m->dt, 4, shape, NULL, NULL);
}

/* Both masks, the causal limit when it is the mask's (causal_in_mask), and
 * the padding for bias_k and the zero key (visible, as PyTorch pads them)
 * as one additive mask (mask_n, mask_h, mask_l, S2). */
void attn_mha_merge_masks(char *dst, const attn_mha_call *m) {
    attn_mat out = {dst, m->dt, m->mask_n * m->mask_h * m->mask_l, m->S2, m->S2, 1};
    attn_problem limit; /* the causal limit over the S keys, from the one place it is written */
    memset(&limit, 0, sizeof limit);
    limit.causal = m->causal_in_mask;
    limit.causal_offset = m->o.causal == ATTN_CAUSAL_BOTTOM_RIGHT ? m->S - m->L : 0;
    for (int64_t n = 0; n < m->mask_n; n++)
        for (int64_t h = 0; h < m->mask_h; h++)
            for (int64_t i = 0; i < m->mask_l; i++) {
                int64_t seen = attn_keys_seen(&limit, i, 0, m->S);
                for (int64_t j = 0; j < m->S2; j++) {
                    double x = j < m->S && j >= seen ? -INFINITY : 0;
                    if (j < m->S && m->o.attn_mask) x += mask_term(m->o.attn_mask, m, n, h, i, j, false);
                    if (j < m->S && m->o.key_padding_mask) x += mask_term(m->o.key_padding_mask, m, n, h, i, j, true);
                    attn_mat_set(&out, (n * m->mask_h + h) * m->mask_l + i, j, x);
                }
            }
}

/* out (N, L, E) = cat (N, L, E) · out_proj_weightᵀ + out_proj_bias, as one
 * product: straight into out when its rows are evenly spaced, else into a
 * scratch copied out after (so a failure never leaves out half written). */
bool attn_mha_project_out(const attn_tensor *out, const char *cat, const attn_mha_call *m) {
    const attn_tensor *w = m->p.out_proj_weight, *b = m->p.out_proj_bias;
    attn_mat wt = {(char *)w->data, w->dtype, m->E, m->E, w->strides[1], w->strides[0]};
    attn_mat bias = {b ? (char *)b->data : NULL, b ? b->dtype : m->dt, 1, m->E, 0, b ? b->strides[0] : 0};
    attn_mat a = {(char *)cat, m->dt, m->N * m->L, m->E, m->E, 1};
    if (attn_mha_rows_even(out)) {
        attn_mat c = attn_mha_rows(out, 0, m->N * m->L);
        return product(&c, &a, &wt, m->packed[3], b ? &bias : NULL, w, m);
    }
    char *tmp = m->out_scratch ? m->out_scratch : malloc(attn_dtype_size(m->dt) * (size_t)(m->N * m->L * m->E));
    attn_mat c = {tmp, m->dt, m->N * m->L, m->E, m->E, 1};
    if (!tmp || !product(&c, &a, &wt, m->packed[3], b ? &bias : NULL, w, m)) {
        if (!m->out_scratch) free(tmp);
        return false;
    }
    for (int64_t n = 0; n < m->N; n++) {
        attn_mat o = attn_mha_rows(out, n, m->L);
        for (int64_t l = 0; l < m->L; l++)
            for (int64_t e = 0; e < m->E; e++) attn_mat_set(&o, l, e, attn_mat_get(&c, n * m->L + l, e));
    }
    if (!m->out_scratch) free(tmp);
    return true;
}

/* The weights output: (N, L, S2) averaged over the heads or (N, Hq, L, S2),
 * without N for unbatched input. */
static attn_status check_weights(const attn_tensor *w, const attn_mha_call *m, attn_error *err) {
    bool avg = m->o.average_attn_weights;
    int64_t full[4] = {m->N, m->Hq, m->L, m->S2}, mean[3] = {m->N, m->L, m->S2};
    const int64_t *shape = (avg ? mean : full) + !m->batched;
    int rank = (avg ? 3 : 4) - !m->batched;
    attn_status st = attn_check_data(w, "weights", m->measuring, err);
    if (st) return st;
    if (w->dtype != m->dt || w->rank != rank || memcmp(w->shape, shape, sizeof(int64_t) * (size_t)rank)) {
        char want[128];
        attn_format_shape(want, sizeof want, rank, shape);
        return attn_fail(err, ATTN_ERR_SHAPE, "weights must be %s shaped %s%s = %s", attn_dtype_name(m->dt),
                         m->batched ? (avg ? "(N, L, S')" : "(N, Hq, L, S')") : (avg ? "(L, S')" : "(Hq, L, S')"),
                         avg ? ", averaged over the heads" : "", want);
    }
    return (st = attn_check_writable(w, "weights", err)) ? st : attn_check_extent(w, "weights", err);
}

/* The caller's weights from the per-head weights (N, Hq, L, S2): copied, or
 * averaged over the heads. */
static void write_weights(attn_tensor *w, const char *per_head, const attn_mha_call *m) {
    bool avg = m->o.average_attn_weights;
    int rank = (avg ? 3 : 4) - !m->batched;
    attn_mat src = {(char *)per_head, m->dt, m->N * m->Hq * m->L, m->S2, m->S2, 1};
    attn_mat dst = {(char *)w->data, m->dt, 1, 1, 0, 1}; /* element `off` is (0, off) */
    for (int64_t n = 0; n < m->N; n++)
        for (int64_t h = 0; h < (avg ? 1 : m->Hq); h++)
            for (int64_t i = 0; i < m->L; i++)
                for (int64_t j = 0; j < m->S2; j++) {
                    double x = 0;
                    for (int64_t g = avg ? 0 : h; g < (avg ? m->Hq : h + 1); g++)
                        x += attn_mat_get(&src, (n * m->Hq + g) * m->L + i, j);
                    int64_t idx_full[4] = {n, h, i, j}, idx_mean[3] = {n, i, j};
                    const int64_t *idx = (avg ? idx_mean : idx_full) + !m->batched;
                    int64_t off = 0;
                    for (int d = 0; d < rank; d++) off += idx[d] * w->strides[d];
                    attn_mat_set(&dst, 0, off, avg ? x / (double)m->Hq : x);
                }
}

/* How far the queries' positions are past the keys': the causal
 * alignment's offset, attn_sdpa's convention (attn.h, rope); at least 0
 * where q and k are turned here (L < S2). A cache's step has L = S2 (its
 * new rows; the positions held before it are in the rope's offset
 * already): 0. */
static int64_t query_shift(const attn_mha_call *m) {
    return m->o.causal == ATTN_CAUSAL_TOP_LEFT ? 0 : m->S2 - m->L;
}

attn_status attn_mha_query_rope(attn_rope_options *r, const attn_mha_call *m, attn_error *err) {
    *r = attn_rope_options_default();
    attn_status st = attn_versioned_read(r, sizeof *r, m->o.rope, "options->rope", "start from attn_rope_options_default()", err);
    r->position_offset = attn_mha_rope_after(r->position_offset, query_shift(m));
    return st;
}

/* RoPE on the projected queries (N, Hq, L, D) and keys (N, Hkv, S2, D), in place. */
attn_status attn_mha_rotate_heads(char *q, char *k, const attn_mha_call *m, int64_t key_rows, attn_error *err) {
    attn_tensor tq, tk;
    attn_mha_heads_view(&tq, q, m, m->Hq, m->L), attn_mha_heads_view(&tk, k, m, m->Hkv, key_rows);
    if (m->rope_ready) { /* attn_rope's work, with the tables the call made */
        attn_rope_apply_tensor(&tq, &m->rope_plan[0], attn_mha_rope_after(m->rope_p0, query_shift(m)), 1);
        attn_rope_apply_tensor(&tk, &m->rope_plan[1], m->rope_p0, 1);
        return ATTN_OK;
    }
    attn_rope_options rq;
    attn_status st = attn_mha_query_rope(&rq, m, err);
    if (!st) st = attn_rope(&tq, &tq, &rq, err);
    return st ? st : attn_rope(&tk, &tk, m->o.rope, err);
}

bool attn_mha_buffers(char **q, char **k, char **v, char **heads, attn_mha_call *m, const attn_tensor *out_view,
                      int64_t key_rows) {
    attn_arena *a = m->arena;
    size_t es = attn_dtype_size(m->dt);
    int64_t nq = m->N * m->Hq * m->L * m->D, nk = m->N * m->Hkv * key_rows * m->D;
    *q = attn_arena_alloc(a, (size_t)nq, es), *k = attn_arena_alloc(a, (size_t)nk, es), *v = attn_arena_alloc(a, (size_t)nk, es);
    *heads = attn_arena_alloc(a, (size_t)nq, es);
    size_t scratch = attn_mha_gemm_scratch_bytes(m, key_rows);
    m->gemm_scratch = scratch ? attn_arena_alloc(a, scratch, 1) : NULL;
    m->out_scratch = attn_mha_rows_even(out_view) ? NULL : attn_arena_alloc(a, (size_t)(m->N * m->L * m->E), es);
    bool ok = *q && *k && *v && *heads && (m->gemm_scratch || !scratch) && (m->out_scratch || attn_mha_rows_even(out_view));
    if (a->measure) ok = true; /* counted, nothing to zero; RoPE's tables counted below */
    /* add_zero_attn's row, and bias_k's (written over): the rows past a
     * sequence's S projected ones. Zeroing all of k and v touched 2·nk
     * elements the products then wrote again. */
    for (int64_t n = 0; ok && !a->measure && n < m->N && key_rows > m->S; n++) {
        size_t row = (size_t)(m->Hkv * m->D) * es, at = (size_t)(n * key_rows + m->S) * row;
        memset(*k + at, 0, (size_t)(key_rows - m->S) * row), memset(*v + at, 0, (size_t)(key_rows - m->S) * row);
    }
    if (!ok || !m->o.rope || m->rope_in_attention) return ok;
    attn_rope_options o;
    int64_t rd;
    if (attn_rope_read_options(&o, &rd, m->o.rope, m->D, "options->rope", NULL)) return true; /* attn_rope reports it */
    for (int i = 0; i < 2; i++) { /* the table attn_rope would make for these rows */
        int64_t rows = i ? key_rows : m->L, steps = rows < 256 ? (rows > 0 ? rows : 1) : 256;
        double *mem = attn_arena_alloc(a, (size_t)(attn_rope_plan_doubles(rd, steps) + 1), sizeof(double));
        if (a->measure) continue;
        if (!mem) return false;
        attn_rope_plan_init(&m->rope_plan[i], &o, rd, steps, mem);
    }
    m->rope_p0 = o.position_offset;
    m->rope_ready = !a->measure;
    return true;
}

attn_context attn_mha_rest(const attn_mha_call *m) {
    attn_context c = m->context;
    c.workspace = NULL, c.workspace_size = 0;
    if (m->arena->base) c.workspace = m->arena->base + m->arena->used, c.workspace_size = m->arena->size - m->arena->used;
    return c;
}

attn_status attn_mha_out_of(const attn_mha_call *m, attn_error *err) {
    if (m->arena->base)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the context's workspace (%zu bytes) cannot hold the layer's projections "
                         "(attn_mha_workspace_size)", m->context.workspace_size);
    return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the layer's projections");
}

attn_status attn_mha_project_qkv(char *q, char *k, char *v, const attn_mha_call *m, int64_t key_rows, bool bias_kv,
                                attn_error *err) {
    int64_t Fq = m->Hq * m->D, Fk = m->Hkv * m->D;
    if (!attn_mha_project(q, &m->q, m->w[0], m->packed[0], m->b[0], m->w_row0[0], m->b_row0[0], Fq, m->L, NULL, m) ||
        !attn_mha_project(k, &m->k, m->w[1], m->packed[1], m->b[1], m->w_row0[1], m->b_row0[1], Fk, key_rows, bias_kv ? m->p.bias_k : NULL, m) ||
        !attn_mha_project(v, &m->v, m->w[2], m->packed[2], m->b[2], m->w_row0[2], m->b_row0[2], Fk, key_rows, bias_kv ? m->p.bias_v : NULL, m))
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a block of packed weights");
    return m->o.rope && !m->rope_in_attention ? attn_mha_rotate_heads(q, k, m, key_rows, err) : ATTN_OK;
}

attn_status attn_mha_sdpa_options(attn_sdpa_options *so, const attn_mha_call *m, attn_causal causal,
                                  const attn_tensor *mask, attn_error *err) {
    *so = attn_sdpa_options_default();
    attn_status st = attn_versioned_read(so, sizeof *so, m->o.attention, "options->attention", "start from attn_sdpa_options_default()", err);
    /* The layer turns its heads by its own RoPE (options->rope), placed as
     * it places them; the attention's would be dropped below, unseen. */
    if (!st && so->rope)
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->rope is set; a layer takes RoPE as options->rope");
    /* Likewise its causal mode, masks (of the module's polarity) and
     * context are the layer's own: the attention's were dropped unseen, a
     * causal mode left the layer attending to every key and a context's
     * thread count did not reach the call. */
    if (!st && so->causal != ATTN_CAUSAL_NONE)
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->causal is set; a layer takes its causal mode as "
                         "options->causal");
    if (!st && so->mask)
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->mask is set; a layer takes masks as "
                         "options->attn_mask and options->key_padding_mask (true ignores a key there)");
    if (!st && so->context)
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->context is set; a layer takes its context as "
                         "options->context");
    /* A piece's place in a longer sequence would move only what the
     * attention places (its causal limit, ALiBi, RoPE when turned inside
     * it), not what the layer places itself (RoPE turned after projecting,
     * the causal limit in the mask beside appended keys, a cache's
     * positions): neither piece nor whole, and no layer output merges. */
    const char *piece = so->query_start ? "query_start" : so->key_start ? "key_start" :
                        so->total_queries ? "total_queries" : so->total_keys ? "total_keys" : NULL;
    if (!st && piece)
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->%s is set; a layer attends over its own "
                         "sequence, not in pieces (query_start, key_start, total_queries and total_keys must be 0)",
                         piece);
    /* fp8 scales say what stored codes stand for; the layer's keys and
     * values are its own projections (an fp8 cache stores them as codes
     * against its desc's k_scale and v_scale, never against these), so
     * they would be read scaled by a factor they were never divided by. */
    if (!st && (so->k_descale || so->v_descale))
        return attn_fail(err, ATTN_ERR_OPTION, "options->attention->%s is set; a layer's keys and values are its own "
                         "projections, not fp8 codes (an fp8 cache takes per-head scales as its desc's k_scale and "
                         "v_scale)", so->k_descale ? "k_descale" : "v_descale");
    so->struct_size = sizeof *so;
    so->causal = causal, so->mask = mask, so->context = m->o.context;
    so->rope = m->rope_in_attention ? m->o.rope : NULL;
    if (!st && m->p.sinks) {
        if (so->sinks) return attn_fail(err, ATTN_ERR_OPTION, "sinks are given twice: params->sinks and options->attention->sinks");
        so->sinks = m->p.sinks;
    }
    return st;
}

attn_status attn_mha_check_store(const attn_kv_paged_view *w, const char *what, const attn_mha_call *m,
                                 attn_error *err) {
    if ((w->dtype == ATTN_F64) != (m->dt == ATTN_F64))
        return attn_fail(err, ATTN_ERR_DTYPE, "x is %s and the %s holds %s; an f64 %s takes f64 x, the others f32 x",
                         attn_dtype_name(m->dt), what, attn_dtype_name(w->dtype), what);
    if (w->heads != m->Hkv || w->key_dim != m->D || w->value_dim != m->D)
        return attn_fail(err, ATTN_ERR_SHAPE, "the %s holds %lld head%s of %lld and %lld; the layer needs %lld of %lld",
                         what, (long long)w->heads, attn_plural(w->heads), (long long)w->key_dim, (long long)w->value_dim,
                         (long long)m->Hkv, (long long)m->D);
    return ATTN_OK;
}

/* RoPE's positions over a whole sequence (attn_mha, attn_mha_backward)
 * stay within 2^53, as attn_sdpa's RoPE holds them (the same test,
 * position_offset being at most 2^53): turned by the layer (L < S'), keys
 * past it were taken by attn_mha and refused by attn_mha_backward, which
 * turns the queries back from an offset past 2^53. A cache's steps check
 * their own positions, after what it holds. */
attn_status attn_mha_check_rope_span(const attn_mha_call *m, attn_error *err) {
    attn_rope_options r;
    int64_t rotary_dim, positions = m->L > m->S2 ? m->L : m->S2;
    if (!m->o.rope || attn_rope_read_options(&r, &rotary_dim, m->o.rope, m->D, "options->rope", NULL) || /* checked by attn_mha_plan */
        positions <= ((int64_t)1 << 53) - r.position_offset)
        return ATTN_OK;
    return attn_fail(err, ATTN_ERR_OPTION, "RoPE's positions run from position_offset %lld over %lld position%s, past 2^53",
                     (long long)r.position_offset, (long long)positions, attn_plural(positions));
}

attn_status attn_mha_check_step_rope(const attn_rope_options *r, int64_t held, int64_t L, attn_error *err) {
    int64_t room = ((int64_t)1 << 53) - r->position_offset; /* position_offset is from 0 to 2^53: checked */
    if (L <= room && held <= room - L) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_OPTION,
                     "RoPE's positions run from position_offset %lld over %lld held and %lld new position%s, past 2^53",
                     (long long)r->position_offset, (long long)held, (long long)L, attn_plural(L));
}

/* The call's sizes from its inputs; every check before any work. */
attn_status attn_mha_plan(attn_mha_call *m, attn_tensor *out_view, attn_tensor *out, const attn_tensor *query,
                        const attn_tensor *key, const attn_tensor *value, attn_error *err) {
    attn_status st;
    if (!query) return attn_fail(err, ATTN_ERR_NULL, "query is NULL");
    if ((st = attn_check_data(query, "query", m->measuring, err))) return st;
    if (query->dtype != ATTN_F32 && query->dtype != ATTN_F64)
        return attn_fail(err, ATTN_ERR_DTYPE, "query is %s; it must be f32 or f64", attn_dtype_name(query->dtype));
    if (query->rank != 2 && query->rank != 3)
        return attn_fail(err, ATTN_ERR_RANK, "query has rank %d; it must be 3 (batched) or 2 (unbatched)", query->rank);
    m->dt = query->dtype, m->batched = query->rank == 3;
    if ((st = attn_mha_check_params(m, err)) || (st = attn_mha_as_batch(&m->q, query, "query", m, m->E, err)) ||
        (st = attn_mha_as_batch(&m->k, key, "key", m, m->kdim, err)) || (st = attn_mha_as_batch(&m->v, value, "value", m, m->vdim, err)) ||
        (st = attn_mha_as_batch(out_view, out, "out", m, m->E, err)))
        return st;
    m->N = m->q.shape[0], m->L = m->q.shape[1], m->S = m->k.shape[1];
    if (m->k.shape[0] != m->N || m->v.shape[0] != m->N || m->v.shape[1] != m->S)
        return attn_fail(err, ATTN_ERR_SHAPE, "query, key and value must have the same batch, and key and value the same length");
    if (out_view->shape[0] != m->N || out_view->shape[1] != m->L)
        return attn_fail(err, ATTN_ERR_SHAPE, "out must have query's shape");
    m->S2 = m->S + (m->p.bias_k ? 1 : 0) + (m->o.add_zero_attn ? 1 : 0);
    attn_sdpa_options so, read;
    attn_context context; /* the thread count for the projections, checked as attn_sdpa checks it */
    if ((st = attn_mha_sdpa_options(&so, m, ATTN_CAUSAL_NONE, NULL, err)) || (st = attn_options_read(&read, &context, &so, err)))
        return st;
    m->threads = context.num_threads, m->attention = read, m->context = context;
    /* More queries than keys put the first ones before position_offset
     * (off < 0), which attn_sdpa's RoPE takes and attn_rope refuses. */
    m->rope_in_attention = m->o.rope && (m->L >= m->S2 || m->o.causal == ATTN_CAUSAL_TOP_LEFT);
    if (m->o.causal != ATTN_CAUSAL_NONE && m->o.causal != ATTN_CAUSAL_TOP_LEFT && m->o.causal != ATTN_CAUSAL_BOTTOM_RIGHT)
        return attn_fail(err, ATTN_ERR_OPTION, "options->causal is %d, not an attn_causal value", (int)m->o.causal);
    bool appended = m->S2 > m->S;
    if (appended && (m->o.rope || read.alibi_slopes || read.window > 0))
        return attn_fail(err, ATTN_ERR_OPTION, "RoPE, ALiBi and a sliding window place keys by their positions, and the keys of "
                         "bias_k/bias_v and add_zero_attn have none: they do not go together");
    /* RoPE's options, checked here with the others: turned by the layer
     * (L < S', or a cache's step) they were read only by the rotation,
     * after the projections, so the workspace sizes were given for options
     * the call then refused. */
    attn_rope_options rope;
    int64_t rotary_dim;
    if (m->o.rope && (st = attn_rope_read_options(&rope, &rotary_dim, m->o.rope, m->E / m->Hq, "options->rope", err))) return st;
    /* The attention's causal limit would count the appended keys among the
     * S2 (bottom-right: query i would see key i + 1); the mask's holds over
     * the S keys of `key` alone. */
    m->causal_in_mask = appended && m->o.causal != ATTN_CAUSAL_NONE;
    m->sdpa_causal = m->causal_in_mask ? ATTN_CAUSAL_NONE : m->o.causal;
    const attn_tensor *am = m->o.attn_mask;
    m->masked = am || m->o.key_padding_mask || m->causal_in_mask;
    m->mask_n = m->o.key_padding_mask || (am && am->rank == 3) ? m->N : 1;
    m->mask_h = am && am->rank == 3 ? m->Hq : 1;
    m->mask_l = am || m->causal_in_mask ? m->L : 1; /* key_padding_mask alone: one row, broadcast over the queries */
    /* Every buffer's elements are at most N·Hq·L·max(S2, E) (q, the heads,
     * the per-head weights, the merged mask) or N·Hq·S2·E (k and v): both
     * products fit, so no size formed from them overflows. */
    int64_t big;
    if (!attn_mul_i64(m->N * m->Hq, m->L, &big) || !attn_mul_i64(big, m->S2 > m->E ? m->S2 : m->E, &big) ||
        !attn_mul_i64(m->N * m->Hq, m->S2, &big) || !attn_mul_i64(big, m->E, &big))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "the layer's sizes overflow");
    return (st = attn_mha_check_masks(m, err)) ? st : attn_mha_use_packed(m, err);
}

/* One attn_mha call's arguments. */
typedef struct mha_args {
    attn_tensor *out, *weights;
    const attn_tensor *query, *key, *value;
    const attn_mha_params *params;
    const attn_mha_options *options;
} mha_args;

static attn_status mha_run(size_t *measure, const mha_args *a, attn_error *err);

/* A call without a workspace of the caller's: its scratch, measured, comes
 * from malloc as one block, given to the call as the context's workspace
 * (options: the call's, as read; context: its context, as read).
 * Allocated a buffer at a time, the pieces went back to the system when
 * the call freed them (glibc trims the heap's top past twice its largest
 * freed mapping), and each of their pages was faulted in again by the next
 * call: 2.8 ms a MiB in the Zen 5 VM of docs/performance.md, where the f32
 * layer at E = 1024, L = 512 (10 MiB) took 40 ms, against 18 ms in a
 * workspace. A block of the call's size the allocator keeps for the next
 * call (glibc: up to its 32 MiB mapping threshold). */
static attn_status in_one_block(const mha_args *a, const attn_mha_options *options, attn_context context,
                                attn_error *err) {
    /* Measured and run with the one context as read: a thread count of 0
     * read again could be another number by then (attn_set_num_threads
     * from another thread), and the products' scratch grows with it. */
    attn_mha_options o = *options;
    o.context = &context;
    mha_args b = *a;
    b.options = &o;
    size_t bytes;
    attn_status st = mha_run(&bytes, &b, err);
    if (st) return st;
    void *block = malloc(bytes ? bytes : 1); /* malloc(0) may be NULL, which is not out of memory */
    if (!block) return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the layer's %zu bytes of scratch", bytes);
    context.workspace = block, context.workspace_size = bytes;
    st = mha_run(NULL, &b, err);
    free(block);
    return st;
}

/* attn_mha, or with `measure` its workspace: the layer's buffers come
 * from an arena over the context's workspace, the attention takes what
 * they leave. Measuring counts the buffers on a measuring arena and asks
 * attn_sdpa_shape_bytes about their layouts: it computes nothing and
 * allocates nothing (a call without a workspace measures first). */
static attn_status mha_run(size_t *measure, const mha_args *a, attn_error *err) {
    attn_tensor *out = a->out, *weights = a->weights;
    const attn_tensor *query = a->query, *key = a->key, *value = a->value;
    const attn_mha_params *params = a->params;
    const attn_mha_options *options = a->options;
    attn_mha_call m;
    memset(&m, 0, sizeof m);
    m.p = attn_mha_params_default(), m.o = attn_mha_options_default();
    if (!params) return attn_fail(err, ATTN_ERR_NULL, "params is NULL");
    attn_status st = attn_versioned_read(&m.p, sizeof m.p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_versioned_read(&m.o, sizeof m.o, options, "options", "start from attn_mha_options_default()", err))) return st;
    if (!out) return attn_fail(err, ATTN_ERR_NULL, "out is NULL");
    attn_tensor out_view;
    m.measuring = measure != NULL;
    if ((st = attn_mha_plan(&m, &out_view, out, query, key, value, err)) || (st = attn_mha_check_rope_span(&m, err)) ||
        (st = attn_check_writable(out, "out", err)) || (weights && (st = check_weights(weights, &m, err))))
        return st;
    if (!measure && !m.context.workspace) return in_one_block(a, &m.o, m.context, err);
    attn_named ins[ATTN_MHA_INPUTS];
    const attn_named outs[2] = {{out, "out"}, {weights, "weights"}};
    attn_mha_inputs(ins, &m, query, key, value);
    if ((st = attn_check_no_overlap(outs, 2, ins, ATTN_MHA_INPUTS, err)) ||
        (!measure && (st = attn_check_workspace(m.context.workspace, m.context.workspace_size, outs, 2, ins,
                                                ATTN_MHA_INPUTS, err))))
        return st;

    /* Scratch: q, k, v and the heads' output (as cat: (N, L, E)), the
     * products', the merged mask and the per-head weights when asked for. */
    attn_arena arena = measure ? attn_arena_measuring() : attn_arena_over(m.context.workspace, m.context.workspace_size);
    m.arena = &arena;
    size_t es = attn_dtype_size(m.dt);
    int64_t nmask = m.masked ? m.mask_n * m.mask_h * m.mask_l * m.S2 : 0, nw = weights ? m.N * m.Hq * m.L * m.S2 : 0;
    char *q, *k, *v, *heads; /* (N, L, Hq·D), (N, S2, Hkv·D) twice, (N, L, E): attn_mha_buffers */
    bool ok = attn_mha_buffers(&q, &k, &v, &heads, &m, &out_view, m.S2);
    char *mask = ok && m.masked ? attn_arena_alloc(&arena, (size_t)nmask, es) : NULL; /* (mask_n, mask_h, mask_l, S2) */
    char *per_head = ok && weights ? attn_arena_alloc(&arena, (size_t)nw, es) : NULL;  /* (N, Hq, L, S2) */
    if (!ok || (!measure && ((m.masked && !mask) || (weights && !per_head)))) {
        st = attn_mha_out_of(&m, err);
        goto done;
    }
    attn_tensor tq, tk, tv, th, tm, tw;
    int64_t sw[4] = {m.N, m.Hq, m.L, m.S2};
    attn_mha_heads_view(&tq, q, &m, m.Hq, m.L), attn_mha_heads_view(&th, heads, &m, m.Hq, m.L);
    attn_mha_heads_view(&tk, k, &m, m.Hkv, m.S2), attn_mha_heads_view(&tv, v, &m, m.Hkv, m.S2);
    attn_mha_mask_view(&tm, mask, &m), attn_tensor_init(&tw, per_head, m.dt, 4, sw, NULL, NULL);
    attn_sdpa_options so;
    attn_context rest = attn_mha_rest(&m);
    if ((st = attn_mha_sdpa_options(&so, &m, m.sdpa_causal, m.masked ? &tm : NULL, err))) goto done;
    so.context = &rest;
    if (measure) {
        size_t attention;
        size_t layer = attn_arena_needed(&arena);
        if (!(st = attn_sdpa_shape_bytes(&attention, &th, weights ? &tw : NULL, &tq, &tk, &tv, &so, err))) {
            if (attention > SIZE_MAX - layer) st = attn_fail(err, ATTN_ERR_OVERFLOW, "the layer's workspace size overflows");
            else *measure = layer + attention;
        }
        goto done;
    }
    if ((st = attn_mha_project_qkv(q, k, v, &m, m.S2, true, err))) goto done;
    attn_mha_verbose_gemm("mha", &m); /* before the attention's line: tests read that one last */
    if (m.masked) attn_mha_merge_masks(mask, &m);
    if ((st = attn_sdpa(&th, NULL, weights ? &tw : NULL, &tq, &tk, &tv, &so, err))) goto done;
    /* out_proj has its memory before it writes: a failure leaves out and weights untouched. */
    if (!attn_mha_project_out(&out_view, heads, &m))
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a block of packed weights");
    else if (weights)
        write_weights(weights, per_head, &m);
done:
    attn_arena_release(&arena);
    return st;
}

attn_status attn_mha(attn_tensor *out, attn_tensor *weights, const attn_tensor *query, const attn_tensor *key,
                     const attn_tensor *value, const attn_mha_params *params, const attn_mha_options *options,
                     attn_error *err) {
    const mha_args a = {out, weights, query, key, value, params, options};
    return mha_run(NULL, &a, err);
}

attn_status attn_mha_workspace_size(size_t *bytes, attn_tensor *out, attn_tensor *weights, const attn_tensor *query,
                                    const attn_tensor *key, const attn_tensor *value, const attn_mha_params *params,
                                    const attn_mha_options *options, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    const mha_args a = {out, weights, query, key, value, params, options};
    return mha_run(bytes, &a, err);
}
