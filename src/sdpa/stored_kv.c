/* stored_kv.c -- what attention over keys and values stored in a KV cache
 * or a paged pool (kv_cache.c, base/kv_pages.c) asks of the call beyond
 * attn_sdpa's: the store's per-head fp8 scales given to the kernels as
 * k_descale and v_descale, and, for keys stored turned by the Hadamard
 * rotation, the queries turned by it too (q · k is unchanged by turning
 * both). The contiguous cache (kv_cache.c), the paged one
 * (kv_pages_attend.c) and the plans over either (sdpa_plan.c) share them. */
#include "sdpa/sdpa.h"

#include <stdint.h>
#include <string.h>

attn_status attn_kv_scales_as_descale(attn_sdpa_options *o, attn_tensor *ks, attn_tensor *vs, const float *k_scale,
                                      const float *v_scale, int64_t heads, attn_error *err) {
    if (!k_scale && !v_scale) return ATTN_OK;
    if (o->k_descale || o->v_descale)
        return attn_fail(err, ATTN_ERR_OPTION, "options->k_descale or v_descale is set, but the cache keeps its own "
                         "per-head scales (its desc's k_scale, v_scale)");
    if (k_scale) attn_tensor_init(ks, (void *)(uintptr_t)k_scale, ATTN_F32, 1, &heads, NULL, NULL), o->k_descale = ks;
    if (v_scale) attn_tensor_init(vs, (void *)(uintptr_t)v_scale, ATTN_F32, 1, &heads, NULL, NULL), o->v_descale = vs;
    return ATTN_OK;
}

attn_status attn_hadamard_queries(attn_tensor *hq, attn_arena *arena, const attn_tensor *q, const attn_sdpa_options *o,
                                  attn_error *err) {
    memset(hq, 0, sizeof *hq);
    if (!q->data && !arena->measure) return ATTN_OK; /* the call's own check names it */
    if (q->dtype != ATTN_F32)
        return attn_fail(err, ATTN_ERR_DTYPE, "q is %s; keys stored with the Hadamard rotation take f32 q (turned "
                         "by the rotation too)", attn_dtype_name(q->dtype));
    if (o->rope)
        return attn_fail(err, ATTN_ERR_OPTION, "options->rope is set, but the keys are stored turned by the Hadamard "
                         "rotation, which RoPE's pairs would not survive: turn keys by RoPE before appending them");
    int64_t n = attn_tensor_numel(q);
    if (n < 0 || q->rank < 1) return ATTN_OK; /* the call refuses it */
    attn_status st = attn_check_extent(q, "q", err);
    if (st) return st;
    if ((uint64_t)n > SIZE_MAX / sizeof(float) - 1)
        return attn_fail(err, ATTN_ERR_OVERFLOW, "q's turned copy overflows");
    attn_tensor_init(hq, NULL, ATTN_F32, q->rank, q->shape, NULL, NULL);
    hq->data = attn_arena_alloc(arena, (size_t)(n ? n : 1), sizeof(float));
    if (arena->measure) return ATTN_OK;
    if (!hq->data)
        return attn_fail(err, arena->base ? ATTN_ERR_WORKSPACE : ATTN_ERR_NO_MEMORY, "%s q's turned copy (%lld floats)",
                         arena->base ? "the workspace has no room left for" : "no memory for", (long long)n);
    attn_tensor_convert(hq, q, NULL);
    /* q's last dimension is E, a power of two up to ATTN_HADAMARD_MAX:
     * checked by the cache; each row turned in place, its f64 scratch on
     * the stack (attn_hadamard would allocate it) */
    const int64_t E = q->shape[q->rank - 1];
    double work[ATTN_HADAMARD_MAX];
    if (E > ATTN_HADAMARD_MAX || !attn_power_of_two(E))
        return attn_fail(err, ATTN_ERR_SHAPE, "q's rows have %lld values; keys stored with the Hadamard rotation "
                         "have a power of two up to %d (their key_dim)", (long long)E, ATTN_HADAMARD_MAX);
    for (int64_t r = 0; E > 0 && r < n / E; r++) attn_hadamard_f32((float *)hq->data + r * E, E, work);
    return ATTN_OK;
}

attn_status attn_hadamard_queries_call(attn_tensor *hq, attn_arena *arena, attn_context *rest, attn_sdpa_options *o,
                                       const attn_tensor *q, attn_error *err) {
    attn_sdpa_options read;
    attn_context c;
    attn_status st = attn_options_read(&read, &c, o, err);
    *arena = attn_arena_over(st ? NULL : c.workspace, st ? 0 : c.workspace_size);
    if (st || (st = attn_hadamard_queries(hq, arena, q, o, err))) return st;
    *rest = attn_arena_rest(arena, &c);
    o->context = rest;
    return ATTN_OK;
}

