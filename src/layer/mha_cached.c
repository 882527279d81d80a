/* mha_cached.c -- the attention layer's step over a KV cache,
 * attn_mha_cached (attn.h): x's L new rows projected as attn_mha projects
 * them (mha.c), their keys and values appended to the cache (turned by
 * RoPE at the positions after those it holds), the new queries attending
 * to everything the cache then holds (attn_kv_cache_attend), out_proj.
 * A step that fails after the append puts the cache back as it was. */
#include "layer/mha.h"
#include "sdpa/sdpa.h"

#include <stdint.h>
#include <string.h>

/* attn_mha_cached, or with `measure` its workspace, as mha_run. The
 * attention is measured over the cache's keys and values as they will be
 * after the append. */
static attn_status cached_run(size_t *measure, attn_tensor *out, const attn_tensor *x, struct attn_kv_cache *cache,
                              const attn_mha_params *params, const attn_mha_options *options, attn_error *err) {
    attn_mha_call m;
    memset(&m, 0, sizeof m);
    m.p = attn_mha_params_default(), m.o = attn_mha_options_default();
    if (!params || !cache || !out) return attn_fail(err, ATTN_ERR_NULL, "params, cache and out must not be NULL");
    attn_status st = attn_versioned_read(&m.p, sizeof m.p, params, "params", "start from attn_mha_params_default()", err);
    if (st || (st = attn_versioned_read(&m.o, sizeof m.o, options, "options", "start from attn_mha_options_default()", err))) return st;
    if (!options) m.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* as attn_kv_cache_attend's NULL options */
    if (m.o.add_zero_attn || m.p.bias_k)
        return attn_fail(err, ATTN_ERR_OPTION, "attn_mha_cached takes no bias_k/bias_v or add_zero_attn (their keys "
                                               "have no position in a cache)");
    if ((st = attn_kv_cache_check_causal(m.o.causal, err))) return st;
    /* The masks cover the cache's keys after the append, length + L of
     * them: planned apart (below), not as x's own L keys. */
    const attn_tensor *am = m.o.attn_mask, *kpm = m.o.key_padding_mask;
    m.o.attn_mask = m.o.key_padding_mask = NULL;
    attn_tensor out_view;
    m.measuring = measure != NULL;
    if ((st = attn_mha_plan(&m, &out_view, out, x, x, x, err)) || (st = attn_check_writable(out, "out", err))) return st;
    /* The cache against the layer, in its terms (the append would name the
     * projected keys, which the caller never saw). */
    attn_kv_paged_view w;
    attn_kv_cache_pages(&w, cache);
    if ((st = attn_mha_check_store(&w, "cache", &m, err))) return st;
    if (w.num_pages != m.N)
        return attn_fail(err, ATTN_ERR_SHAPE, "the cache holds %lld sequence%s; x has %lld", (long long)w.num_pages,
                         attn_plural(w.num_pages), (long long)m.N);
    /* The cache is written too: out, x and the parameters (read after the
     * append, by out_proj) keep clear of its memory. */
    attn_tensor ck, cv;
    attn_kv_cache_storage(&ck, &cv, cache);
    attn_named ins[ATTN_MHA_INPUTS];
    const attn_named outs[3] = {{out, "out"}, {&ck, "the cache's keys"}, {&cv, "the cache's values"}};
    attn_mha_call with_masks = m; /* the masks taken out for planning are read too */
    with_masks.o.attn_mask = am, with_masks.o.key_padding_mask = kpm;
    attn_mha_inputs(ins, &with_masks, x, NULL, NULL); /* key and value are x */
    if ((st = attn_check_no_overlap(outs, 3, ins, ATTN_MHA_INPUTS, err)) ||
        (!measure && (st = attn_check_workspace(m.context.workspace, m.context.workspace_size, outs, 3, ins,
                                                ATTN_MHA_INPUTS, err))))
        return st;
    int64_t length = attn_kv_cache_length(cache);
    /* The masks as attn_mha takes them, over S = length + L keys: merged
     * into one additive mask (mask_n, mask_h, mask_l, S) with PyTorch's
     * polarity; the causal limit stays the attention's. */
    attn_mha_call mk = m;
    mk.S = mk.S2 = length + m.L, mk.o.attn_mask = am, mk.o.key_padding_mask = kpm, mk.causal_in_mask = false;
    mk.masked = am || kpm;
    mk.mask_n = kpm || (am && am->rank == 3) ? m.N : 1, mk.mask_h = am && am->rank == 3 ? m.Hq : 1;
    mk.mask_l = am ? m.L : 1;
    int64_t nmask = 0;
    if (mk.masked && ((st = attn_mha_check_masks(&mk, err)) ||
                      (!attn_mul_i64(mk.mask_n * mk.mask_h, mk.mask_l, &nmask) || !attn_mul_i64(nmask, mk.S2, &nmask))))
        return st ? st : attn_fail(err, ATTN_ERR_OVERFLOW, "the merged mask's size overflows");
    attn_rope_options r;
    m.rope_in_attention = false; /* the cache holds turned keys: turn the new ones before appending */
    if (m.o.rope) { /* the new positions follow the cached ones */
        r = attn_rope_options_default();
        if ((st = attn_versioned_read(&r, sizeof r, m.o.rope, "options->rope", "start from attn_rope_options_default()", err)) ||
            (st = attn_mha_check_step_rope(&r, length, m.L, err)))
            return st;
        r.position_offset = attn_mha_rope_after(r.position_offset, length), m.o.rope = &r;
    }
    attn_arena arena = measure ? attn_arena_measuring() : attn_arena_over(m.context.workspace, m.context.workspace_size);
    m.arena = &arena;
    /* q (N, L, Hq·D), k and v (N, L, Hkv·D): the new rows; heads (N, L, E);
     * mask (mask_n, mask_h, mask_l, length + L) */
    char *q, *k, *v, *heads, *mask = NULL;
    /* saved: keys quantized per channel, the residual rows as they are
     * before the append, put back if the step fails after it */
    const int64_t window = attn_kv_cache_window_values(cache);
    uint16_t *saved = NULL;
    if (!attn_mha_buffers(&q, &k, &v, &heads, &m, &out_view, m.L) ||
        (mk.masked && !(mask = attn_arena_alloc(&arena, (size_t)nmask, attn_dtype_size(m.dt))) && !measure) ||
        (window && !(saved = attn_arena_alloc(&arena, (size_t)window, sizeof *saved)) && !measure)) {
        st = attn_mha_out_of(&m, err);
        goto done;
    }
    attn_tensor tq, tk, tv, th, tm;
    attn_mha_mask_view(&tm, mask, &mk);
    attn_mha_heads_view(&tq, q, &m, m.Hq, m.L), attn_mha_heads_view(&th, heads, &m, m.Hq, m.L);
    attn_mha_heads_view(&tk, k, &m, m.Hkv, m.L), attn_mha_heads_view(&tv, v, &m, m.Hkv, m.L);
    attn_sdpa_options so;
    attn_context rest = attn_mha_rest(&m);
    if ((st = attn_mha_sdpa_options(&so, &m, m.o.causal, mk.masked ? &tm : NULL, err))) goto done;
    so.context = &rest;
    if (measure) { /* the attention over the cache's first length + L positions, as attn_kv_cache_attend reads them */
        size_t attention; /* q's turned copy with the keys' rotation, and the attention's scratch */
        if (!(st = attn_kv_cache_attend_bytes(&attention, &th, &tq, cache, length + m.L, &so, err))) {
            size_t layer = attn_arena_needed(&arena);
            if (attention > SIZE_MAX - layer)
                st = attn_fail(err, ATTN_ERR_OVERFLOW, "the step's workspace size overflows");
            else *measure = layer + attention;
        }
        goto done;
    }
    if ((st = attn_mha_project_qkv(q, k, v, &m, m.L, false, err))) goto done;
    if (mk.masked) attn_mha_merge_masks(mask, &mk);
    attn_mha_verbose_gemm("mha_cached", &m);
    if (saved) attn_kv_cache_window_copy(cache, saved, false);
    if ((st = attn_kv_cache_append(cache, &tk, &tv, err))) goto done;
    if (!(st = attn_kv_cache_attend(&th, NULL, &tq, cache, &so, err)) && !attn_mha_project_out(&out_view, heads, &m))
        st = attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate a block of packed weights");
    if (st) { /* the cache as it was: its length, and a window a group left by the append */
        attn_kv_cache_truncate(cache, length, NULL);
        if (saved) attn_kv_cache_window_copy(cache, saved, true);
    }
done:
    attn_arena_release(&arena);
    return st;
}

attn_status attn_mha_cached(attn_tensor *out, const attn_tensor *x, struct attn_kv_cache *cache,
                            const attn_mha_params *params, const attn_mha_options *options, attn_error *err) {
    return cached_run(NULL, out, x, cache, params, options, err);
}

attn_status attn_mha_cached_workspace_size(size_t *bytes, attn_tensor *out, const attn_tensor *x,
                                           struct attn_kv_cache *cache, const attn_mha_params *params,
                                           const attn_mha_options *options, attn_error *err) {
    if (!bytes) return attn_fail(err, ATTN_ERR_NULL, "bytes is NULL");
    return cached_run(bytes, out, x, cache, params, options, err);
}
