/* mha_backward.c -- the gradients of attn_mha (attn.h). The forward, as
 * mha.c computes it:
 *   F1  q, k, v = x W_{q,k,v}ᵀ + b_{q,k,v}   (k and v then get the bias_k,
 *                                             bias_v row and the zero row)
 *   F2  q, k = RoPE(q), RoPE(k)               (when options->rope; inside F3
 *                                             when the attention can do it)
 *   F3  heads = attention(q, k, v, mask)      (attn_sdpa, per head)
 *   F4  out = cat(heads) W_oᵀ + b_o
 * recomputed (nothing of the forward is kept between the calls, so F1 to
 * F3 run again, as mha.c runs them: the same values, and lse, which F3's
 * gradient needs; F4's out is not needed, its gradient takes cat and dout),
 * then differentiated line by line in reverse:
 *   from F4: dcat = dout W_o;  dW_o = Σ doutᵀ cat;  db_o = Σ dout
 *            (cat is the buffer `heads`, dcat `dheads`, as in mha.c)
 *   from F3: dq, dk, dv = attn_sdpa_backward(dheads);
 *            dsinks = attn_sdpa_sinks_backward(dheads)  (when the layer has sinks)
 *   from F2: dq, dk = RoPE turned back (attn_rope_backward)
 *   from F1: dx = dproj W;  dW = Σ dprojᵀ x;  db = Σ dproj;
 *            d bias_kv = Σ over the batch of the bias row's gradient
 * (dproj: dq, dk or dv, each over the rows its projection wrote.) The
 * products from F4 and F1 are kernels/gemm.c's attn_gemm, summed in double;
 * dcat is then rounded once to the layer's dtype, which attn_sdpa_backward
 * takes, and dx, dW, db and d bias_kv stay in double until written out.
 * F3's gradient is attn_sdpa_backward's, in the layer's dtype (an f32
 * layer's by its fused f32 kernel, fast/flash_backward.c, on the slices
 * that kernel takes). A product the
 * forward ran on the bf16 GEMM (a bf16 weight in an f32 layer,
 * attn_mha_gemm16) multiplied its input rounded to bf16: its weight's
 * gradient is taken over those rounded values (bf16_inputs).
 *
 * Memory: every buffer is the call's own, from calloc or malloc (struct
 * bwd; the products' packing inside attn_gemm), freed before it returns;
 * the context's workspace goes whole to the attention's passes, as
 * options->context says (attn.h). */
#include "layer/mha.h"
#include "kernels/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write the C-order doubles src into g, which has like's shape (checked). */
static void write_grad(const attn_tensor *g, const attn_tensor *like, const double *src) {
    int64_t n = attn_tensor_numel(like), idx[ATTN_MAX_RANK] = {0};
    attn_mat one = {(char *)g->data, g->dtype, 1, 1, 0, 1};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < g->rank; d++) off += idx[d] * g->strides[d];
        attn_mat_set(&one, 0, off, src[i]);
        for (int d = g->rank - 1; d >= 0 && ++idx[d] == g->shape[d]; d--) idx[d] = 0;
    }
}

/* Σ over g's rows r of g(r, f), added into sum[f] (f < g's cols). */
static void add_rows(double *sum, const attn_mat *g) {
    for (int64_t r = 0; r < g->rows; r++)
        for (int64_t f = 0; f < g->cols; f++) sum[f] += attn_mat_get(g, r, f);
}

/* x (an f32 matrix) as a product on the bf16 GEMM reads it: each value
 * rounded to bf16 (nearest even) and a subnormal read as zero (the
 * instructions' DAZ), into dst (x.rows × x.cols floats), contiguous. The
 * forward multiplied these, not x, so its weight's gradient is taken over
 * them, as PyTorch's bf16 F.linear saves its bf16 input; dx passes through
 * the rounding unchanged. */
static attn_mat bf16_inputs(float *dst, const attn_mat *x) {
    for (int64_t r = 0; r < x->rows; r++)
        for (int64_t c = 0; c < x->cols; c++)
            dst[r * x->cols + c] = attn_bf16_daz(attn_f32_to_bf16((float)attn_mat_get(x, r, c)));
    return (attn_mat){(char *)dst, ATTN_F32, x->rows, x->cols, x->cols, 1};
}

/* From F1 for one projection, mirroring attn_mha_project (mha.c): dproj
 * (N, rows_out, F) in the layer's dtype, of which each sequence's first
 * `rows` rows are x's projections and any after them the bias_kv and zero
 * rows, gives dx (N, rows, in) = dproj W (written), and, added into,
 * dW (F, in) += Σ dprojᵀ x and db (F) += Σ dproj over x's rows, d bias_kv
 * (F) += Σ_n the bias_kv row. w is the weight (row0: its first row, for
 * the packed in_proj_weight), read as it lies (F, in): the forward read it
 * transposed. rounded: NULL, or room for x's values as the bf16 GEMM read
 * them (N·rows·in floats) when the forward's product ran there. False when
 * a product's buffers cannot be allocated. */
static bool project_backward(double *dW, double *db, double *dx, double *dbkv, const char *dproj, const attn_tensor *x,
                             const attn_tensor *w, int64_t row0, int64_t F, int64_t rows_out, float *rounded,
                             int threads) {
    int64_t N = x->shape[0], rows = x->shape[1], in = x->shape[2], es = (int64_t)attn_dtype_size(x->dtype);
    int64_t wes = (int64_t)attn_dtype_size(w->dtype);
    attn_mat wm = {(char *)w->data + row0 * w->strides[0] * wes, w->dtype, F, in, w->strides[0], w->strides[1]};
    attn_mat dWm = {(char *)dW, ATTN_F64, F, in, in, 1};
    /* One product over all N·rows rows when they are evenly spaced. */
    bool whole = rows_out == rows && attn_mha_rows_even(x);
    for (int64_t n = 0; rows > 0 && n < (whole ? 1 : N); n++) { /* sequences of no rows: no address formed */
        int64_t nr = whole ? N * rows : rows;
        char *gn = (char *)dproj + n * rows_out * F * es;
        attn_mat g = {gn, x->dtype, nr, F, F, 1}, gt = {gn, x->dtype, F, nr, 1, F};
        attn_mat dxm = {(char *)(dx + n * rows * in), ATTN_F64, nr, in, in, 1}, xn = attn_mha_rows(x, n, nr);
        if (rounded) xn = bf16_inputs(rounded, &xn);
        if (!attn_gemm(&dxm, &g, &wm, NULL, false, threads, NULL, NULL) || !attn_gemm(&dWm, &gt, &xn, NULL, true, threads, NULL, NULL))
            return false;
        if (db) add_rows(db, &g);
    }
    for (int64_t n = 0; n < N && dbkv && rows_out > rows; n++) { /* the bias_kv row (the zero row's gradient goes nowhere) */
        attn_mat g = {(char *)dproj + (n * rows_out + rows) * F * es, x->dtype, 1, F, F, 1};
        add_rows(dbkv, &g);
    }
    return true;
}

/* From F4, mirroring attn_mha_project_out (mha.c): dcat (N, L, E) = dout
 * W_o in the layer's dtype (written), dW_o (E, E) += Σ doutᵀ cat and db_o
 * (E) += Σ dout; dout is the caller's (N, L, E) view (any strides), cat
 * F3's output (N, L, E), contiguous. rounded as for project_backward
 * (N·L·E floats). False when a product's buffers cannot be allocated. */
static bool out_backward(char *dcat, double *dWo, double *dbo, const attn_tensor *dout, const char *cat,
                         float *rounded, const attn_mha_call *m) {
    const attn_tensor *w = m->p.out_proj_weight;
    int64_t es = (int64_t)attn_dtype_size(m->dt);
    attn_mat wo = {(char *)w->data, w->dtype, m->E, m->E, w->strides[0], w->strides[1]};
    attn_mat dWm = {(char *)dWo, ATTN_F64, m->E, m->E, m->E, 1};
    bool whole = attn_mha_rows_even(dout);
    for (int64_t n = 0; n < (whole ? 1 : m->N); n++) {
        attn_mat g = attn_mha_rows(dout, n, whole ? m->N * m->L : m->L); /* dout's rows; gt: the same, transposed */
        attn_mat gt = {g.base, g.dtype, m->E, g.rows, g.cs, g.rs};
        attn_mat dc = {dcat + n * m->L * m->E * es, m->dt, g.rows, m->E, m->E, 1};
        attn_mat c = {(char *)cat + n * m->L * m->E * es, m->dt, g.rows, m->E, m->E, 1};
        if (rounded) c = bf16_inputs(rounded, &c);
        if (!attn_gemm(&dc, &g, &wo, NULL, false, m->threads, NULL, NULL) || !attn_gemm(&dWm, &gt, &c, NULL, true, m->threads, NULL, NULL))
            return false;
        add_rows(dbo, &g);
    }
    return true;
}

/* From F3, the sinks: dsinks (Hq,) in double from dheads, heads (F3's out)
 * and lse, through `scratch` ((Hq,) in the layer's dtype, which
 * attn_sdpa_sinks_backward writes). */
static attn_status sinks_backward(double *dsinks, char *scratch, const attn_tensor *dheads, const attn_tensor *heads,
                                  const attn_tensor *lse, const attn_sdpa_options *so, const attn_mha_call *m,
                                  attn_error *err) {
    attn_tensor t;
    int64_t H = m->Hq;
    attn_tensor_init(&t, scratch, m->dt, 1, &H, NULL, NULL);
    attn_status st = attn_sdpa_sinks_backward(&t, dheads, heads, lse, so, err);
    attn_mat d = {scratch, m->dt, 1, H, 0, 1};
    for (int64_t h = 0; h < H && !st; h++) dsinks[h] = attn_mat_get(&d, 0, h);
    return st;
}

/* The scratch of one backward call (alloc_bwd). The char buffers are in
 * the layer's dtype and laid out as mha.c's: a projection (N, rows, H·D),
 * seen by the attention as (N, H, rows, D) (attn_mha_heads_view); the
 * doubles are the gradients summed before they are written out. E = Hq·D. */
typedef struct bwd {
    char *q, *k, *v,            /* F1 (and F2): (N, L, Hq·D), (N, S2, Hkv·D), (N, S2, Hkv·D) */
        *heads,                 /* F3's output, F4's input cat: (N, L, E) */
        *mask,                  /* F3's merged additive mask (mask_n, mask_h, mask_l, S2), or NULL */
        *lse,                   /* F3's log-sum-exp, which its gradient reads: (N, Hq, L) */
        *dheads,                /* from F4, dcat: (N, L, E) */
        *dq, *dk, *dv,          /* from F3 (F2 turned back in place): shaped like q, k, v */
        *dsinks_scratch;        /* from F3: (Hq,), read into dsinks; NULL without sinks */
    double *dx[3],              /* from F1, dquery, dkey, dvalue: (N, L, E), (N, S, kdim), (N, S, vdim) */
        *dW[3],                 /* from F1: (Hq·D, E), (Hkv·D, kdim), (Hkv·D, vdim) */
        *db[3],                 /* from F1: (Hq·D,), (Hkv·D,), (Hkv·D,) */
        *dbkv[2],               /* from F1, bias_k's and bias_v's: (Hkv·D,) each */
        *dWo, *dbo,             /* from F4: (E, E), (E,) */
        *dsinks;                /* from F3: (Hq,); NULL without sinks */
    /* the inputs of the products the forward ran on the bf16 GEMM, as it
     * read them (bf16_inputs), one product at a time: the largest of them,
     * N·rows·in floats; on16: which products ran there (q, k, v, out) */
    float *rounded;
    bool on16[4];
} bwd;

static void free_bwd(bwd *b) {
    free(b->q), free(b->k), free(b->v), free(b->heads), free(b->mask), free(b->lse), free(b->dheads);
    free(b->dq), free(b->dk), free(b->dv), free(b->dWo), free(b->dbo), free(b->dsinks), free(b->dsinks_scratch);
    for (int t = 0; t < 3; t++) free(b->dx[t]), free(b->dW[t]), free(b->db[t]);
    free(b->dbkv[0]), free(b->dbkv[1]), free(b->rounded);
}

/* Every buffer zeroed (calloc): the sums (dW, db, dbkv, dWo, dbo) are
 * added into, and k and v's rows past S must start as zeros, add_zero_attn's
 * row staying so (the forward zeroes them in attn_mha_buffers; F1 writes
 * bias_k's over its row). No size overflows: attn_mha_plan bounded q, k, v,
 * the heads and the mask; dx's, dW's and the rest are the sizes of tensors
 * the caller gave (inputs, weights). False when one is not had: free_bwd
 * frees what was. */
static bool alloc_bwd(bwd *b, const attn_mha_call *m) {
    size_t es = attn_dtype_size(m->dt);
    int64_t nq = m->N * m->Hq * m->L * m->D, nk = m->N * m->Hkv * m->S2 * m->D, F[3] = {m->E, m->Hkv * m->D, m->Hkv * m->D};
    int64_t in[3] = {m->E, m->kdim, m->vdim}, rows[3] = {m->L, m->S, m->S};
    memset(b, 0, sizeof *b);
    b->q = calloc((size_t)nq, es), b->k = calloc((size_t)nk, es), b->v = calloc((size_t)nk, es);
    b->heads = calloc((size_t)nq, es), b->dheads = calloc((size_t)nq, es), b->lse = calloc((size_t)(m->N * m->Hq * m->L), es);
    b->dq = calloc((size_t)nq, es), b->dk = calloc((size_t)nk, es), b->dv = calloc((size_t)nk, es);
    b->mask = m->masked ? calloc((size_t)(m->mask_n * m->mask_h * m->mask_l * m->S2), es) : NULL;
    b->dWo = calloc((size_t)(m->E * m->E), sizeof(double)), b->dbo = calloc((size_t)m->E, sizeof(double));
    b->dsinks = m->attention.sinks ? calloc((size_t)m->Hq, sizeof(double)) : NULL;
    b->dsinks_scratch = m->attention.sinks ? calloc((size_t)m->Hq, es) : NULL;
    bool ok = b->q && b->k && b->v && b->heads && b->dheads && b->lse && b->dq && b->dk && b->dv && b->dWo && b->dbo &&
              (b->mask || !m->masked) && ((b->dsinks && b->dsinks_scratch) || !m->attention.sinks);
    for (int t = 0; t < 3; t++) {
        b->dx[t] = calloc((size_t)(m->N * rows[t] * in[t]), sizeof(double));
        b->dW[t] = calloc((size_t)(F[t] * in[t]), sizeof(double)), b->db[t] = calloc((size_t)F[t], sizeof(double));
        ok &= b->dx[t] && b->dW[t] && b->db[t];
    }
    for (int t = 0; t < 2; t++) b->dbkv[t] = calloc((size_t)F[1], sizeof(double)), ok &= b->dbkv[t] != NULL;
    int64_t most = 0; /* the largest input a product on the bf16 GEMM reads */
    for (int t = 0; t < 4; t++) {
        b->on16[t] = attn_mha_gemm16(m->dt, t < 3 ? m->w[t] : m->p.out_proj_weight) != NULL;
        int64_t n = t < 3 ? m->N * rows[t] * in[t] : m->N * m->L * m->E;
        if (b->on16[t] && n > most) most = n;
    }
    if (most) b->rounded = malloc((size_t)most * sizeof(float)), ok &= b->rounded != NULL;
    return ok;
}

/* The parameter gradients asked for (grads' non-NULL tensors), each beside
 * the parameter it is the gradient of; all checked before any work. */
enum { G_IN_W, G_IN_B, G_Q_W, G_K_W, G_V_W, G_Q_B, G_K_B, G_V_B, G_OUT_W, G_OUT_B, G_BK, G_BV, G_SINKS, G_COUNT };

/* The tensors of p in the order above; the sinks are the layer's own
 * (params->sinks or options->attention->sinks) when `sinks` is given. */
static void grad_list(const attn_tensor *out[G_COUNT], const attn_mha_params *p, const attn_tensor *sinks) {
    const attn_tensor *list[G_COUNT] = {p->in_proj_weight, p->in_proj_bias, p->q_proj_weight, p->k_proj_weight,
                                        p->v_proj_weight, p->q_proj_bias, p->k_proj_bias, p->v_proj_bias,
                                        p->out_proj_weight, p->out_proj_bias, p->bias_k, p->bias_v, sinks};
    memcpy(out, list, sizeof list);
}

static const char *const GRAD_NAMES[G_COUNT] = {"in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
                                                "v_proj_weight", "q_proj_bias", "k_proj_bias", "v_proj_bias",
                                                "out_proj_weight", "out_proj_bias", "bias_k", "bias_v", "sinks"};

static attn_status check_grads(const attn_tensor *g[G_COUNT], const attn_tensor *p[G_COUNT], attn_error *err) {
    for (int i = 0; i < G_COUNT; i++) {
        if (!g[i]) continue;
        if (!p[i]) return attn_fail(err, ATTN_ERR_NULL, "a gradient for %s, which the layer does not have", GRAD_NAMES[i]);
        char name[64]; /* written to: NULL data is ATTN_ERR_NULL, as every running call says it */
        snprintf(name, sizeof name, "the gradient of %s", GRAD_NAMES[i]);
        attn_status st = attn_check_data(g[i], name, false, err);
        if (st || (st = attn_check_writable(g[i], name, err))) return st;
        /* A 16-bit parameter's gradient is f32 or f64 (a master copy's), every other's its own dtype. */
        bool half = attn_dtype_half(p[i]->dtype);
        bool dtype_ok = half ? g[i]->dtype == ATTN_F32 || g[i]->dtype == ATTN_F64 : g[i]->dtype == p[i]->dtype;
        if (!dtype_ok && half)
            return attn_fail(err, ATTN_ERR_DTYPE, "the gradient of %s is %s; %s is %s, and a 16-bit parameter's "
                             "gradient is f32 or f64 (a master copy's)", GRAD_NAMES[i], attn_dtype_name(g[i]->dtype),
                             GRAD_NAMES[i], attn_dtype_name(p[i]->dtype));
        if (!dtype_ok)
            return attn_fail(err, ATTN_ERR_DTYPE, "the gradient of %s is %s but %s is %s; they must match",
                             GRAD_NAMES[i], attn_dtype_name(g[i]->dtype), GRAD_NAMES[i], attn_dtype_name(p[i]->dtype));
        if (g[i]->rank != p[i]->rank || memcmp(g[i]->shape, p[i]->shape, sizeof(int64_t) * (size_t)p[i]->rank)) {
            char gs[128], ps[128];
            attn_format_shape(gs, sizeof gs, g[i]->rank, g[i]->shape);
            attn_format_shape(ps, sizeof ps, p[i]->rank, p[i]->shape);
            return attn_fail(err, ATTN_ERR_SHAPE, "the gradient of %s has shape %s but %s has shape %s; they must match",
                             GRAD_NAMES[i], gs, GRAD_NAMES[i], ps);
        }
        if ((st = attn_check_extent(g[i], GRAD_NAMES[i], err))) return st;
    }
    return ATTN_OK;
}

static const char *const INPUT_GRADS[3] = {"dquery", "dkey", "dvalue"};

/* dquery, dkey and dvalue, each shaped like its input; into[t] is the one
 * that receives gradient t: t itself, or an earlier one that is the very
 * same view. Self-attention passes one tensor thrice (query = key = value,
 * and so their gradients): it gets dq + dk + dv, as autograd sums them. */
static attn_status check_input_grads(int into[3], attn_tensor *const dxs[3], const attn_mha_call *m, attn_error *err) {
    int64_t rows[3] = {m->L, m->S, m->S}, in[3] = {m->E, m->kdim, m->vdim};
    for (int t = 0; t < 3; t++) {
        into[t] = t;
        if (!dxs[t]) continue;
        attn_tensor v;
        attn_status st = attn_mha_as_batch(&v, dxs[t], INPUT_GRADS[t], m, in[t], err);
        if (st || (st = attn_check_writable(dxs[t], INPUT_GRADS[t], err))) return st;
        if (v.shape[0] != m->N || v.shape[1] != rows[t])
            return attn_fail(err, ATTN_ERR_SHAPE, "%s must have its input's shape", INPUT_GRADS[t]);
        for (int u = t - 1; u >= 0; u--)
            if (dxs[u] && attn_same_view(dxs[u], dxs[t])) into[t] = into[u];
    }
    return ATTN_OK;
}

/* Every gradient owns its memory: none overlaps another, an input, a
 * parameter, a mask or dout (one tensor for several input gradients, as
 * check_input_grads allows, counts once); and the context's workspace,
 * which the attention's passes write, overlaps none of them. */
static attn_status check_grad_memory(attn_tensor *const dxs[3], const int into[3], const attn_tensor *g[G_COUNT],
                                     const attn_tensor *dout, const attn_tensor *query, const attn_tensor *key,
                                     const attn_tensor *value, const attn_mha_call *m, attn_error *err) {
    static const char *const NAMES[G_COUNT] = {
        "grads->in_proj_weight", "grads->in_proj_bias", "grads->q_proj_weight", "grads->k_proj_weight",
        "grads->v_proj_weight", "grads->q_proj_bias", "grads->k_proj_bias", "grads->v_proj_bias",
        "grads->out_proj_weight", "grads->out_proj_bias", "grads->bias_k", "grads->bias_v", "grads->sinks"};
    attn_named outs[3 + G_COUNT], ins[ATTN_MHA_INPUTS + 1];
    for (int t = 0; t < 3; t++) outs[t].t = into[t] == t ? dxs[t] : NULL, outs[t].name = INPUT_GRADS[t];
    for (int i = 0; i < G_COUNT; i++) outs[3 + i].t = g[i], outs[3 + i].name = NAMES[i];
    attn_mha_inputs(ins, m, query, key, value);
    ins[ATTN_MHA_INPUTS].t = dout, ins[ATTN_MHA_INPUTS].name = "dout";
    attn_status st = attn_check_no_overlap(outs, 3 + G_COUNT, ins, ATTN_MHA_INPUTS + 1, err);
    return st ? st : attn_check_workspace(m->context.workspace, m->context.workspace_size, outs, 3 + G_COUNT, ins,
                                          ATTN_MHA_INPUTS + 1, err);
}

/* dx (N, rows, in doubles) into the caller's input gradient t (checked: like the input). */
static void write_input_grad(attn_tensor *t, const double *dx, const attn_mha_call *m, int64_t rows, int64_t in) {
    attn_tensor v;
    attn_mha_as_batch(&v, t, "", m, in, NULL);
    attn_mat one = {(char *)v.data, v.dtype, 1, 1, 0, 1};
    for (int64_t n = 0; n < m->N; n++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < in; c++)
                attn_mat_set(&one, 0, n * v.strides[0] + r * v.strides[1] + c * v.strides[2], dx[(n * rows + r) * in + c]);
}

/* The gradients into the caller's tensors (all checked), input gradients
 * that are one tensor summed first; the memory for the packed in_proj
 * gradients is taken before anything is written. */
static attn_status write_all(attn_tensor *const dxs[3], const int into[3], const attn_tensor *g[G_COUNT], bwd *b,
                             const attn_mha_call *m, attn_error *err) {
    int64_t rows[3] = {m->L, m->S, m->S}, in[3] = {m->E, m->kdim, m->vdim};
    double *w = g[G_IN_W] ? malloc(sizeof(double) * (size_t)(3 * m->E * m->E)) : NULL;
    double *bb = g[G_IN_B] ? malloc(sizeof(double) * (size_t)(3 * m->E)) : NULL;
    if ((g[G_IN_W] && !w) || (g[G_IN_B] && !bb)) {
        free(w), free(bb);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "out of memory");
    }
    for (int t = 0; t < 3; t++) /* one view: same shape, so same count */
        if (dxs[t] && into[t] != t)
            for (int64_t i = 0; i < m->N * rows[t] * in[t]; i++) b->dx[into[t]][i] += b->dx[t][i];
    for (int t = 0; t < 3; t++)
        if (dxs[t] && into[t] == t) write_input_grad(dxs[t], b->dx[t], m, rows[t], in[t]);
    if (w) { /* packed: q, k, v stacked */
        for (int t = 0; t < 3; t++) memcpy(w + t * m->E * m->E, b->dW[t], sizeof(double) * (size_t)(m->E * m->E));
        write_grad(g[G_IN_W], m->p.in_proj_weight, w);
    }
    if (bb) {
        for (int t = 0; t < 3; t++) memcpy(bb + t * m->E, b->db[t], sizeof(double) * (size_t)m->E);
        write_grad(g[G_IN_B], m->p.in_proj_bias, bb);
    }
    free(w), free(bb);
    const attn_tensor *like[G_COUNT];
    grad_list(like, &m->p, m->attention.sinks);
    const double *src[G_COUNT] = {NULL, NULL, b->dW[0], b->dW[1], b->dW[2], b->db[0], b->db[1], b->db[2], b->dWo, b->dbo,
                                  b->dbkv[0], b->dbkv[1], b->dsinks};
    for (int i = G_Q_W; i < G_COUNT; i++)
        if (g[i]) write_grad(g[i], like[i], src[i]);
    return ATTN_OK;
}

attn_status attn_mha_backward(attn_tensor *dquery, attn_tensor *dkey, attn_tensor *dvalue, const attn_mha_params *grads,
                              const attn_tensor *dout, const attn_tensor *query, const attn_tensor *key,
                              const attn_tensor *value, const attn_mha_params *params, const attn_mha_options *options,
                              attn_error *err) {
    attn_mha_call m;
    memset(&m, 0, sizeof m);
    m.p = attn_mha_params_default(), m.o = attn_mha_options_default();
    attn_mha_params gp = attn_mha_params_default();
    if (!params || !dout) return attn_fail(err, ATTN_ERR_NULL, "params and dout must not be NULL");
    attn_status st = attn_versioned_read(&m.p, sizeof m.p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_versioned_read(&m.o, sizeof m.o, options, "options", "start from attn_mha_options_default()", err)) ||
        (st = attn_versioned_read(&gp, sizeof gp, grads, "grads", "start from attn_mha_params_default()", err)))
        return st;
    /* dout checked as `out` by attn_mha_plan (read only, despite the cast),
     * its NULL data first by its own name */
    attn_tensor dout_view;
    if ((st = attn_check_data(dout, "dout", false, err)) ||
        (st = attn_mha_plan(&m, &dout_view, (attn_tensor *)dout, query, key, value, err)) ||
        (st = attn_mha_check_rope_span(&m, err)))
        return st;
    const attn_tensor *g[G_COUNT], *like[G_COUNT];
    grad_list(g, &gp, gp.sinks), grad_list(like, &m.p, m.attention.sinks);
    attn_tensor *const dxs[3] = {dquery, dkey, dvalue};
    int into[3];
    if ((st = check_grads(g, like, err)) || (st = check_input_grads(into, dxs, &m, err)) ||
        (st = check_grad_memory(dxs, into, g, dout, query, key, value, &m, err)))
        return st;
    bwd b;
    if (!alloc_bwd(&b, &m)) {
        free_bwd(&b);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the layer's backward pass");
    }
    /* The buffers as the attention sees them (N, H, rows, D), named as in
     * mha_run (tq, tk, tv, th, tm), with lse (N, Hq, L) and the gradients. */
    attn_tensor tq, tk, tv, th, tl, tm, tdh, tdq, tdk, tdv;
    int64_t sl[3] = {m.N, m.Hq, m.L};
    attn_mha_heads_view(&tq, b.q, &m, m.Hq, m.L), attn_mha_heads_view(&th, b.heads, &m, m.Hq, m.L);
    attn_mha_heads_view(&tk, b.k, &m, m.Hkv, m.S2), attn_mha_heads_view(&tv, b.v, &m, m.Hkv, m.S2);
    attn_mha_heads_view(&tdh, b.dheads, &m, m.Hq, m.L), attn_mha_heads_view(&tdq, b.dq, &m, m.Hq, m.L);
    attn_mha_heads_view(&tdk, b.dk, &m, m.Hkv, m.S2), attn_mha_heads_view(&tdv, b.dv, &m, m.Hkv, m.S2);
    attn_tensor_init(&tl, b.lse, m.dt, 3, sl, NULL, NULL), attn_mha_mask_view(&tm, b.mask, &m);
    /* The forward again, F1 to F3 as mha_run computes them, but keeping F3's
     * lse and not its weights; so.context is the caller's (the whole
     * workspace: the layer's buffers are not in it). */
    attn_sdpa_options so;
    if (b.mask) attn_mha_merge_masks(b.mask, &m);
    if ((st = attn_mha_sdpa_options(&so, &m, m.sdpa_causal, b.mask ? &tm : NULL, err)) ||
        (st = attn_mha_project_qkv(b.q, b.k, b.v, &m, m.S2, true, err)) || /* F1, and F2 unless F3 turns them */
        (st = attn_sdpa(&th, &tl, NULL, &tq, &tk, &tv, &so, err)))          /* F3 */
        goto done;
    if (!out_backward(b.dheads, b.dWo, b.dbo, &dout_view, b.heads, b.on16[3] ? b.rounded : NULL, &m)) goto no_memory;           /* from F4 */
    if ((st = attn_sdpa_backward(&tdq, &tdk, &tdv, NULL, &tdh, &tq, &tk, &tv, &th, &tl, &so, err)) || /* from F3 */
        (g[G_SINKS] && (st = sinks_backward(b.dsinks, b.dsinks_scratch, &tdh, &th, &tl, &so, &m, err))))
        goto done;
    attn_rope_options rq; /* the queries' positions, as the forward turned them */
    if (m.o.rope && !m.rope_in_attention && /* from F2 (else attn_sdpa_backward turned dq, dk back) */
        ((st = attn_mha_query_rope(&rq, &m, err)) || (st = attn_rope_backward(&tdq, &tdq, &rq, err)) ||
         (st = attn_rope_backward(&tdk, &tdk, m.o.rope, err))))
        goto done;
    const char *dproj[3] = {b.dq, b.dk, b.dv}; /* F, rows_out: as attn_mha_project_qkv projected them */
    int64_t F[3] = {m.Hq * m.D, m.Hkv * m.D, m.Hkv * m.D}, rows_out[3] = {m.L, m.S2, m.S2};
    const attn_tensor *x[3] = {&m.q, &m.k, &m.v};
    for (int t = 0; t < 3; t++) /* from F1 */
        if (!project_backward(b.dW[t], b.db[t], b.dx[t], t ? b.dbkv[t - 1] : NULL, dproj[t], x[t], m.w[t], m.w_row0[t], F[t],
                              rows_out[t], b.on16[t] ? b.rounded : NULL, m.threads))
            goto no_memory;
    st = write_all(dxs, into, g, &b, &m, err);
    goto done;
no_memory:
    st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a product's buffers");
done:
    free_bwd(&b);
    return st;
}
