/* sdpa.c -- the public entry points (attn_sdpa, attn_sdpa_reference,
 * attn_scores): each has its call planned (plan.c), chooses the kernel that
 * computes it (exact f64, reference, scores, or for f32 without weights the
 * fast flash or decode kernels), runs it, and reports it in verbose mode. */
#include "sdpa/sdpa.h"
#include "exact/exact.h"
#include "fast/fast.h"

#include <math.h>
#include <stdlib.h>

typedef enum kernel_kind { KERNEL_STREAM, KERNEL_REFERENCE, KERNEL_SCORES } kernel_kind;

attn_context attn_context_default(void) {
    attn_context c = {0};
    c.struct_size = sizeof c;
    return c;
}

attn_sdpa_options attn_sdpa_options_default(void) {
    attn_sdpa_options o = {0};
    o.struct_size = sizeof o;
    return o;
}

/* Run the kernel that `kind` and the options call for on every slice. */
static attn_status run_kernel(kernel_kind kind, const attn_slices *sl, const attn_sdpa_options *o,
                              attn_run_info *info, attn_error *err) {
    int64_t L = sl->cq.shape[3], E = sl->cq.shape[4], S = sl->ck.shape[3], Ev = sl->cv.shape[4];
    static const char *const KERNEL[] = {"exact", "reference", "scores"};
    info->kernel = KERNEL[kind], info->isa = "-", info->bf16 = NULL, info->threads = 1;
    info->items = sl->count, info->fallbacks = 0;

    /* f32 attention without weights takes the fast kernels: split over the
     * keys for a few queries against many keys, else tiled. */
    if (kind == KERNEL_STREAM && sl->q->dtype == ATTN_F32 && !sl->weights)
        return attn_decode_applies(L, S) ? attn_decode_run(sl, info, err)
                                         : attn_flash_run(sl, o->compute == ATTN_COMPUTE_BF16, info, err);

    /* Scratch memory, sized by the kernel, overflow-checked. */
    int64_t words = kind == KERNEL_STREAM ? attn_stream_work_size(E, Ev)
                                          : attn_reference_work_size(S, E, Ev);
    if (words < 0 || (uint64_t)words > SIZE_MAX / sizeof(double))
        return attn_fail(err, ATTN_ERR_OVERFLOW, "scratch size for E=%lld, Ev=%lld overflows",
                         (long long)E, (long long)Ev);
    double *work = malloc((size_t)words * sizeof(double));
    if (!work)
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate %lld bytes of scratch",
                         (long long)words * (long long)sizeof(double));
    for (int64_t i = 0; i < sl->count; i++) {
        attn_problem p;
        attn_slice(sl, i, &p);
        if (kind == KERNEL_STREAM) attn_stream_kernel(&p, work);
        else if (kind == KERNEL_REFERENCE) attn_reference_kernel(&p, work);
        else attn_scores_kernel(&p, work);
    }
    free(work);
    return ATTN_OK;
}

static attn_status sdpa_run(kernel_kind kind, attn_tensor *out, attn_tensor *lse,
                            attn_tensor *weights, const attn_tensor *q, const attn_tensor *k,
                            const attn_tensor *v, const attn_sdpa_options *options,
                            attn_error *err) {
    attn_sdpa_options o;
    int threads;
    attn_status st = attn_options_read(&o, &threads, options, err);
    if (st) return st;
    attn_slices sl;
    st = attn_plan_call(&sl, out, lse, weights, kind == KERNEL_SCORES, q, k, v, &o, threads, err);
    if (st) return st;
    static const char *const CALL[] = {"sdpa", "sdpa_reference", "scores"};
    bool verbose = attn_verbose_on();
    double t0 = verbose ? attn_now_ms() : 0;
    attn_run_info info;
    st = run_kernel(kind, &sl, &o, &info, err);
    if (verbose) attn_verbose_report(CALL[kind], &info, &sl, &o, attn_now_ms() - t0);
    return st;
}

attn_status attn_sdpa(attn_tensor *out, attn_tensor *lse, attn_tensor *weights, const attn_tensor *q,
                      const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *options,
                      attn_error *err) {
    return sdpa_run(KERNEL_STREAM, out, lse, weights, q, k, v, options, err);
}

attn_status attn_sdpa_reference(attn_tensor *out, attn_tensor *lse, attn_tensor *weights,
                                const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_sdpa_options *options, attn_error *err) {
    return sdpa_run(KERNEL_REFERENCE, out, lse, weights, q, k, v, options, err);
}

attn_status attn_scores(attn_tensor *scores, const attn_tensor *q, const attn_tensor *k,
                        const attn_sdpa_options *options, attn_error *err) {
    /* k stands in for v: the plan needs one, and k's shape is always valid. */
    return sdpa_run(KERNEL_SCORES, scores, NULL, NULL, q, k, k, options, err);
}
