/* mha_weights.c -- an f32 layer's weights packed once (attn.h,
 * attn_mha_weights_init): each projection's Wᵀ laid out as attn_sgemm's
 * panels, or as the bf16 GEMM's pairs for a bf16 weight that runs on it
 * (attn_mha_gemm16), in the caller's memory, so that no call repacks them. A call
 * given them (options->packed) checks that they were made from its own
 * parameters, for the kernels this process runs. */
#include "layer/mha.h"
#include "kernels/gemm.h"

#include <stdint.h>
#include <string.h>

enum { ALIGN = 64 };

static int64_t round_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* The four weights as (tensor, first row, F rows, in columns). */
static void projections(const attn_mha_call *m, const attn_tensor *w[4], int64_t row0[4], int64_t F[4], int64_t in[4]) {
    for (int t = 0; t < 3; t++) w[t] = m->w[t], row0[t] = m->w_row0[t];
    w[3] = m->p.out_proj_weight, row0[3] = 0;
    F[0] = m->Hq * m->D, F[1] = F[2] = m->Hkv * m->D, F[3] = m->E;
    in[0] = m->E, in[1] = m->kdim, in[2] = m->vdim, in[3] = m->E;
}

/* The parameters read and checked as an f32 layer's; the bytes they pack to. */
static attn_status read_params(attn_mha_call *m, int64_t *bytes, const attn_mha_params *params, attn_error *err) {
    memset(m, 0, sizeof *m);
    m->p = attn_mha_params_default(), m->dt = ATTN_F32;
    if (!params) return attn_fail(err, ATTN_ERR_NULL, "params is NULL");
    attn_status st = attn_versioned_read(&m->p, sizeof m->p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_mha_check_params(m, err))) return st;
    const attn_tensor *w[4];
    int64_t row0[4], F[4], in[4], total = round_up((int64_t)sizeof(attn_mha_weights)) + ALIGN;
    projections(m, w, row0, F, in);
    int nr = attn_ukernels_active()->sgemm_nr;
    for (int t = 0; t < 4; t++) {
        const attn_bf16_kernels *bk = attn_mha_gemm16(ATTN_F32, w[t]);
        int64_t n = bk ? attn_gemm_bf16_packed_pairs(in[t], F[t], bk) : attn_sgemm_packed_floats(in[t], F[t], nr);
        if (n < 0 || n > (INT64_MAX - total) / 8) return attn_fail(err, ATTN_ERR_OVERFLOW, "the packed weights' size overflows");
        total += round_up(n * (int64_t)sizeof(float));
    }
    if ((uint64_t)total > SIZE_MAX) return attn_fail(err, ATTN_ERR_OVERFLOW, "the packed weights' size overflows size_t");
    *bytes = total;
    return ATTN_OK;
}

attn_status attn_mha_weights_bytes(size_t *bytes, const attn_mha_params *params, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    attn_mha_call m;
    int64_t n;
    attn_status st = read_params(&m, &n, params, err);
    if (!st) *bytes = (size_t)n;
    return st;
}

attn_status attn_mha_weights_init(attn_mha_weights **weights, void *memory, size_t bytes, const attn_mha_params *params,
                                  attn_error *err) {
    if (!weights || !memory) return attn_fail(err, ATTN_ERR_NULL, "%s is NULL", weights ? "memory" : "weights");
    attn_mha_call m;
    int64_t need;
    attn_status st = read_params(&m, &need, params, err);
    if (st) return st;
    if (bytes < (size_t)need)
        return attn_fail(err, ATTN_ERR_WORKSPACE, "the packed weights need %lld bytes (attn_mha_weights_bytes), %zu given",
                         (long long)need, bytes);
    uintptr_t at = ((uintptr_t)memory + ALIGN - 1) / ALIGN * ALIGN;
    attn_mha_weights *pw = (attn_mha_weights *)at;
    memset(pw, 0, sizeof *pw);
    const attn_ukernels *uk = attn_ukernels_active();
    pw->isa = uk->name, pw->nr = uk->sgemm_nr;
    pw->E = m.E, pw->Hq = m.Hq, pw->Hkv = m.Hkv, pw->kdim = m.kdim, pw->vdim = m.vdim;
    const attn_tensor *w[4];
    int64_t F[4], in[4];
    projections(&m, w, pw->row0, F, in);
    char *next = (char *)at + round_up((int64_t)sizeof *pw);
    for (int t = 0; t < 4; t++) {
        pw->source[t] = *w[t];
        int64_t es = (int64_t)attn_dtype_size(w[t]->dtype);
        /* b(p, f) = W[row0 + f, p]: Wᵀ read where it lies, as the layer reads it */
        attn_mat wt = {(char *)w[t]->data + pw->row0[t] * w[t]->strides[0] * es, w[t]->dtype, in[t], F[t],
                       w[t]->strides[1], w[t]->strides[0]};
        const attn_bf16_kernels *bk = attn_mha_gemm16(ATTN_F32, w[t]);
        pw->panels[t] = next, pw->gemm16[t] = bk;
        if (bk) {
            pw->bf16 = bk->name;
            attn_gemm_bf16_pack_b((uint32_t *)(void *)next, &wt, bk, attn_get_num_threads());
            next += round_up(attn_gemm_bf16_packed_pairs(in[t], F[t], bk) * (int64_t)sizeof(uint32_t));
            continue;
        }
        attn_sgemm_pack_b((float *)(void *)next, &wt, pw->nr, attn_get_num_threads());
        next += round_up(attn_sgemm_packed_floats(in[t], F[t], pw->nr) * (int64_t)sizeof(float));
    }
    pw->span = (int64_t)(next - (char *)pw);
    pw->magic = ATTN_MHA_WEIGHTS_MAGIC;
    *weights = pw;
    return ATTN_OK;
}

/* Whether t is the very view the weights were packed from. */
static bool same(const attn_tensor *t, const attn_tensor *source) {
    return t->data == source->data && t->dtype == source->dtype && t->strides[0] == source->strides[0] &&
           t->strides[1] == source->strides[1];
}

attn_status attn_mha_use_packed(attn_mha_call *m, attn_error *err) {
    const attn_mha_weights *pw = m->o.packed;
    if (!pw) return ATTN_OK;
    if (pw->magic != ATTN_MHA_WEIGHTS_MAGIC)
        return attn_fail(err, ATTN_ERR_OPTION, "options->packed is not a set of weights made by attn_mha_weights_init");
    if (m->dt != ATTN_F32)
        return attn_fail(err, ATTN_ERR_DTYPE, "options->packed serves f32 layers; an %s layer reads its parameters as they are",
                         attn_dtype_name(m->dt));
    const attn_ukernels *uk = attn_ukernels_active();
    if (strcmp(pw->isa, uk->name) != 0 || pw->nr != uk->sgemm_nr)
        return attn_fail(err, ATTN_ERR_OPTION, "options->packed was packed for the %s kernels; this process runs %s", pw->isa,
                         uk->name);
    const attn_tensor *w[4];
    int64_t row0[4], F[4], in[4];
    projections(m, w, row0, F, in);
    bool ok = pw->E == m->E && pw->Hq == m->Hq && pw->Hkv == m->Hkv && pw->kdim == m->kdim && pw->vdim == m->vdim;
    for (int t = 0; t < 4 && ok; t++) ok = same(w[t], &pw->source[t]) && row0[t] == pw->row0[t];
    if (!ok)
        return attn_fail(err, ATTN_ERR_OPTION, "options->packed was made from other parameters (sizes or weight tensors "
                         "differ): prepare them again with attn_mha_weights_init");
    for (int t = 0; t < 4; t++)
        if (pw->gemm16[t] != attn_mha_gemm16(ATTN_F32, w[t]))
            return attn_fail(err, ATTN_ERR_OPTION, "options->packed paired its bf16 weights for the %s kernels; this process "
                             "runs %s", pw->bf16 ? pw->bf16 : "f32", attn_bf16_label());
    for (int t = 0; t < 4; t++) m->packed[t] = pw->panels[t];
    attn_tensor_init(&m->packed_memory, (void *)(uintptr_t)pw, ATTN_BOOL, 1, &pw->span, NULL, NULL);
    return ATTN_OK;
}
