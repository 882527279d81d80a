/* test_abi_mha_options.c -- a program that knows attn_mha_options as 0.3.0
 * declared it, before `packed` (the weights packed once) was added at its
 * end, run with today's library under ASan+UBSan. The struct lives in a heap
 * block of exactly its old size, so a library that read past the caller's
 * struct_size stops with a heap-buffer-overflow. Every call of the layer
 * that takes the options must give, bitwise, what it gives with today's
 * struct and `packed` NULL: the forward, its workspace size, the backward
 * and a decoder's step over a KV cache. */
#include "attn.h"
#include "../check.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* attn_mha_options as 0.3.0's attn.h declared it */
typedef struct old_mha_options {
    size_t struct_size;
    int batch_first;
    int add_zero_attn;
    const attn_tensor *key_padding_mask, *attn_mask;
    attn_causal causal;
    int average_attn_weights;
    const attn_context *context;
    const attn_rope_options *rope;
    const attn_sdpa_options *attention;
} old_mha_options;

/* the copy above is today's struct up to the field 0.4.0 appended */
_Static_assert(sizeof(old_mha_options) == offsetof(attn_mha_options, packed),
               "old_mha_options must be attn_mha_options before `packed`");

enum { L = 5, E = 8, HEADS = 2 };

static float rnd(unsigned *s) { return (float)((*s = *s * 1103515245u + 12345u) >> 8 & 0xffff) / 32768.0f - 1.0f; }

int main(void) {
    unsigned seed = 11;
    /* an unbatched f32 layer: x (L, E), packed in_proj (3E, E), out_proj (E, E) */
    float x[L * E], w_in[3 * E * E], b_in[3 * E], w_out[E * E], b_out[E], dout[L * E];
    for (int i = 0; i < L * E; i++) x[i] = rnd(&seed), dout[i] = rnd(&seed);
    for (int i = 0; i < 3 * E * E; i++) w_in[i] = rnd(&seed) / 3;
    for (int i = 0; i < E * E; i++) w_out[i] = rnd(&seed) / 3;
    for (int i = 0; i < 3 * E; i++) b_in[i] = rnd(&seed);
    for (int i = 0; i < E; i++) b_out[i] = rnd(&seed);
    int64_t xs[2] = {L, E}, wis[2] = {3 * E, E}, bis[1] = {3 * E}, wos[2] = {E, E}, bos[1] = {E};
    attn_tensor tx, tdout, twi, tbi, two, tbo;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&tdout, dout, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&twi, w_in, ATTN_F32, 2, wis, NULL, NULL), attn_tensor_init(&tbi, b_in, ATTN_F32, 1, bis, NULL, NULL);
    attn_tensor_init(&two, w_out, ATTN_F32, 2, wos, NULL, NULL), attn_tensor_init(&tbo, b_out, ATTN_F32, 1, bos, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = E, p.num_heads = HEADS;
    p.in_proj_weight = &twi, p.in_proj_bias = &tbi, p.out_proj_weight = &two, p.out_proj_bias = &tbo;

    attn_mha_options now = attn_mha_options_default();
    now.causal = ATTN_CAUSAL_BOTTOM_RIGHT, now.average_attn_weights = 0;
    old_mha_options *old = malloc(sizeof *old); /* exactly 0.3.0's size */
    memset(old, 0, sizeof *old);
    old->struct_size = sizeof *old, old->causal = ATTN_CAUSAL_BOTTOM_RIGHT, old->average_attn_weights = 0;
    const attn_mha_options *then = (const attn_mha_options *)old;

    /* the forward, per-head weights (N = 1 unbatched: (Hq, L, L)), and its workspace */
    float o1[L * E], o2[L * E], w1[HEADS * L * L], w2[HEADS * L * L];
    int64_t ws[3] = {HEADS, L, L};
    attn_tensor to1, to2, tw1, tw2;
    attn_tensor_init(&to1, o1, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&to2, o2, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&tw1, w1, ATTN_F32, 3, ws, NULL, NULL), attn_tensor_init(&tw2, w2, ATTN_F32, 3, ws, NULL, NULL);
    attn_error err;
    attn_status st = attn_mha(&to1, &tw1, &tx, &tx, &tx, &p, &now, &err);
    if (!st) st = attn_mha(&to2, &tw2, &tx, &tx, &tx, &p, then, &err);
    check(!st && !memcmp(o1, o2, sizeof o1) && !memcmp(w1, w2, sizeof w1), "mha_with_0_3_options",
          "%s", st ? err.message : "out or weights differ from today's struct's");
    size_t b1 = 0, b2 = 1;
    st = attn_mha_workspace_size(&b1, &to1, &tw1, &tx, &tx, &tx, &p, &now, &err);
    if (!st) st = attn_mha_workspace_size(&b2, &to2, &tw2, &tx, &tx, &tx, &p, then, &err);
    check(!st && b1 == b2 && b1 > 0, "mha_workspace_size_with_0_3_options", "%s", st ? err.message : "sizes differ");

    /* the backward: dx (the same x as query, key and value: three gradients) and every parameter's */
    float dq1[L * E], dk1[L * E], dv1[L * E], dq2[L * E], dk2[L * E], dv2[L * E];
    float gwi1[3 * E * E], gwi2[3 * E * E], gbi1[3 * E], gbi2[3 * E], gwo1[E * E], gwo2[E * E], gbo1[E], gbo2[E];
    attn_tensor tdq1, tdk1, tdv1, tdq2, tdk2, tdv2, tg[8];
    attn_tensor_init(&tdq1, dq1, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&tdk1, dk1, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&tdv1, dv1, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&tdq2, dq2, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&tdk2, dk2, ATTN_F32, 2, xs, NULL, NULL), attn_tensor_init(&tdv2, dv2, ATTN_F32, 2, xs, NULL, NULL);
    attn_tensor_init(&tg[0], gwi1, ATTN_F32, 2, wis, NULL, NULL), attn_tensor_init(&tg[1], gbi1, ATTN_F32, 1, bis, NULL, NULL);
    attn_tensor_init(&tg[2], gwo1, ATTN_F32, 2, wos, NULL, NULL), attn_tensor_init(&tg[3], gbo1, ATTN_F32, 1, bos, NULL, NULL);
    attn_tensor_init(&tg[4], gwi2, ATTN_F32, 2, wis, NULL, NULL), attn_tensor_init(&tg[5], gbi2, ATTN_F32, 1, bis, NULL, NULL);
    attn_tensor_init(&tg[6], gwo2, ATTN_F32, 2, wos, NULL, NULL), attn_tensor_init(&tg[7], gbo2, ATTN_F32, 1, bos, NULL, NULL);
    attn_mha_params g1 = attn_mha_params_default(), g2 = attn_mha_params_default();
    g1.in_proj_weight = &tg[0], g1.in_proj_bias = &tg[1], g1.out_proj_weight = &tg[2], g1.out_proj_bias = &tg[3];
    g2.in_proj_weight = &tg[4], g2.in_proj_bias = &tg[5], g2.out_proj_weight = &tg[6], g2.out_proj_bias = &tg[7];
    st = attn_mha_backward(&tdq1, &tdk1, &tdv1, &g1, &tdout, &tx, &tx, &tx, &p, &now, &err);
    if (!st) st = attn_mha_backward(&tdq2, &tdk2, &tdv2, &g2, &tdout, &tx, &tx, &tx, &p, then, &err);
    check(!st && !memcmp(dq1, dq2, sizeof dq1) && !memcmp(dk1, dk2, sizeof dk1) && !memcmp(dv1, dv2, sizeof dv1) &&
              !memcmp(gwi1, gwi2, sizeof gwi1) && !memcmp(gbi1, gbi2, sizeof gbi1) &&
              !memcmp(gwo1, gwo2, sizeof gwo1) && !memcmp(gbo1, gbo2, sizeof gbo1),
          "mha_backward_with_0_3_options", "%s", st ? err.message : "gradients differ from today's struct's");

    /* a decoder's steps over a KV cache (3 positions, then 2), each options
     * struct on its own cache: outputs and cached keys and values alike */
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.batch = 1, d.heads = HEADS, d.capacity = L, d.key_dim = E / HEADS, d.value_dim = E / HEADS, d.dtype = ATTN_F32;
    size_t bytes = 0;
    st = attn_kv_cache_bytes(&bytes, &d, &err);
    void *m1 = st ? NULL : calloc(1, bytes), *m2 = st ? NULL : calloc(1, bytes);
    attn_kv_cache *c1 = NULL, *c2 = NULL;
    if (!st) st = attn_kv_cache_init(&c1, m1, bytes, &d, &err);
    if (!st) st = attn_kv_cache_init(&c2, m2, bytes, &d, &err);
    int same = 1;
    for (int64_t at = 0, n = 3; !st && at < L; at += n, n = L - at) {
        int64_t ss[2] = {n, E};
        attn_tensor step, s1, s2;
        attn_tensor_init(&step, x + at * E, ATTN_F32, 2, ss, NULL, NULL);
        attn_tensor_init(&s1, o1, ATTN_F32, 2, ss, NULL, NULL), attn_tensor_init(&s2, o2, ATTN_F32, 2, ss, NULL, NULL);
        st = attn_mha_cached(&s1, &step, c1, &p, &now, &err);
        if (!st) st = attn_mha_cached(&s2, &step, c2, &p, then, &err);
        same &= !memcmp(o1, o2, (size_t)(n * E) * sizeof *o1);
    }
    /* the caches' keys and values, gathered (their memory also holds its own addresses) */
    float k1[HEADS * L * (E / HEADS)], v1[HEADS * L * (E / HEADS)], k2[HEADS * L * (E / HEADS)], v2[HEADS * L * (E / HEADS)];
    int64_t cs[3] = {HEADS, L, E / HEADS};
    attn_tensor tk1, tv1, tk2, tv2;
    attn_tensor_init(&tk1, k1, ATTN_F32, 3, cs, NULL, NULL), attn_tensor_init(&tv1, v1, ATTN_F32, 3, cs, NULL, NULL);
    attn_tensor_init(&tk2, k2, ATTN_F32, 3, cs, NULL, NULL), attn_tensor_init(&tv2, v2, ATTN_F32, 3, cs, NULL, NULL);
    if (!st) st = attn_kv_cache_gather(&tk1, &tv1, c1, &err);
    if (!st) st = attn_kv_cache_gather(&tk2, &tv2, c2, &err);
    check(!st && same && !memcmp(k1, k2, sizeof k1) && !memcmp(v1, v2, sizeof v1) && attn_kv_cache_length(c2) == L,
          "mha_cached_with_0_3_options", "%s", st ? err.message : "a step's output or the cache differs from today's struct's");
    free(m1), free(m2), free(old);
    attn_shutdown();
    return n_failed ? 1 : 0;
}
