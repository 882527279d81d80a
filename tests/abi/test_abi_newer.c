/* test_abi_newer.c -- every versioned struct of attn.h as a program built
 * against a NEWER attn.h than the library hands it, and the one struct
 * that has no older release (attn_rope_options) as a shorter header would,
 * run with today's library under ASan+UBSan.
 *
 * A newer header's struct is this one with fields appended: X_init(&x,
 * sizeof x) sets its struct_size to that larger sizeof and zeroes the bytes
 * past the library's own. attn.h ("Versioned structs") promises that every
 * call refuses it, ATTN_ERR_OPTION, "NAME->struct_size is N, larger than
 * this library's M: the program was built against a newer attn.h", whether
 * the unknown tail is zero (the new fields at their defaults) or not (set
 * by the caller): the library cannot know that a zero means "default" in a
 * field it has never seen. Each struct lives in a heap block of exactly the
 * newer size, and each refusal comes before anything is written: the
 * outputs, the memory handed to an init (and its *cache, *pool, *weights),
 * and the structs the library fills (the view, the tuning), keep every
 * byte, except two things the library writes before it reads the struct:
 * *plan (NULL) and, given newer options, the plan's header in a plan
 * init's memory (checked: *workspace_bytes, and the memory for a newer
 * view).
 * The calls: attn_sdpa (options, context, options->rope), and its
 * workspace size, backward, varlen and both plan inits (options);
 * attn_rope and its backward;
 * attn_mha (params, options, and the options' rope, attention, context),
 * attn_mha_backward, attn_mha_weights_bytes/_init, attn_mha_cached,
 * attn_mha_cached_batch and attn_mha_paged (params, options); the cache's
 * and the pool's bytes and init (desc), attn_kv_cache_attend and
 * attn_kv_pages_attend (options); attn_kv_pages_view (written),
 * attn_kv_paged_check, attn_kv_paged_attend, attn_kv_paged_plan_init and
 * attn_kv_paged_run_view (read); attn_get_tuning.
 *
 * The shorter rope options live in a heap block of their size, so a
 * library that read past struct_size stops with a heap-buffer-overflow;
 * the fields past it take their defaults. */
#include "attn.h"
#include "../check.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAIL = 16, H = 2, S = 8, E = 4 };

/* A block of sizeof(type) + TAIL bytes filled as a newer header's
 * type##_default() fills it (struct_size the larger size, zeros past ours),
 * then its unknown tail set to `tail`. */
#define NEWER(type, var, tail)                                   \
    type *var = malloc(sizeof(type) + TAIL);                     \
    if (!var) return (void)check(0, #type "_block", "no memory"); \
    type##_init(var, sizeof(type) + TAIL);                       \
    memset((char *)var + sizeof(type), (tail), TAIL)

static const unsigned char TAILS[2] = {0, 0x5a};

/* The call's status and message are the refusal of `name`'s newer struct,
 * and `untouched` (the output's bytes kept) holds. */
static void refused(attn_status st, const attn_error *err, const char *name, size_t ours, int untouched,
                    const char *test, unsigned char tail) {
    char want[160], label[160];
    snprintf(want, sizeof want, "%s->struct_size is %zu, larger than this library's %zu: the program was built "
             "against a newer attn.h", name, ours + TAIL, ours);
    snprintf(label, sizeof label, "%s_%s_tail_refused%s", test, tail ? "nonzero" : "zero",
             untouched ? "" : "_but_wrote");
    /* err->message is the call's only when it refused */
    const char *said = st ? err->message : "(accepted)";
    check(st == ATTN_ERR_OPTION && !strcmp(said, want) && untouched, label, "status %d, \"%s\" (want \"%s\")%s",
          (int)st, said, want, untouched ? "" : ", output written");
}

static int all(const void *p, unsigned char byte, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != byte) return 0;
    return 1;
}

static float rnd(unsigned *s) { return (float)((*s = *s * 1103515245u + 12345u) >> 8 & 0xffff) / 32768.0f - 1.0f; }

static float xs[S * E], ks[H * S * E], vs[H * S * E], out[H * S * E];

/* attn_sdpa's options and their context; attn_rope's options. */
static void sdpa_and_rope(void) {
    int64_t shape[2] = {S, E};
    attn_tensor x, o;
    attn_tensor_init(&x, xs, ATTN_F32, 2, shape, NULL, NULL), attn_tensor_init(&o, out, ATTN_F32, 2, shape, NULL, NULL);
    for (int t = 0; t < 2; t++) {
        attn_error err = {0};
        NEWER(attn_sdpa_options, so, TAILS[t]);
        memset(out, 0x7f, sizeof out);
        attn_status st = attn_sdpa(&o, NULL, NULL, &x, &x, &x, so, &err);
        refused(st, &err, "options", sizeof *so, all(out, 0x7f, sizeof out), "sdpa_options", TAILS[t]);
        size_t bytes = 12345;
        st = attn_sdpa_workspace_size(&bytes, &o, NULL, NULL, &x, &x, &x, so, &err);
        refused(st, &err, "options", sizeof *so, bytes == 12345, "sdpa_workspace_size_options", TAILS[t]);

        NEWER(attn_context, c, TAILS[t]);
        attn_sdpa_options good = attn_sdpa_options_default();
        good.context = c;
        st = attn_sdpa(&o, NULL, NULL, &x, &x, &x, &good, &err);
        refused(st, &err, "context", sizeof *c, all(out, 0x7f, sizeof out), "sdpa_context", TAILS[t]);

        NEWER(attn_rope_options, r, TAILS[t]);
        st = attn_rope(&o, &x, r, &err);
        refused(st, &err, "options", sizeof *r, all(out, 0x7f, sizeof out), "rope_options", TAILS[t]);
        st = attn_rope_backward(&o, &x, r, &err);
        refused(st, &err, "options", sizeof *r, all(out, 0x7f, sizeof out), "rope_backward_options", TAILS[t]);
        good.context = NULL, good.rope = r;
        st = attn_sdpa(&o, NULL, NULL, &x, &x, &x, &good, &err);
        refused(st, &err, "options->rope", sizeof *r, all(out, 0x7f, sizeof out), "sdpa_options_rope", TAILS[t]);
        free(so), free(c), free(r);
    }
}

/* attn_sdpa_backward's, attn_sdpa_varlen's and the plans' options: the
 * gradients, outputs, plan memory and *workspace_bytes keep every byte. */
static float g1[S * E], g2[S * E], g3[S * E];
static unsigned char plan_mem[1 << 14];
static void sdpa_others(void) {
    int64_t shape[2] = {S, E}, packed[3] = {S, H, E}, cu[2] = {0, S};
    attn_tensor x, o, dq, dk, dv, p, po;
    attn_tensor_init(&x, xs, ATTN_F32, 2, shape, NULL, NULL), attn_tensor_init(&o, out, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&dq, g1, ATTN_F32, 2, shape, NULL, NULL), attn_tensor_init(&dk, g2, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&dv, g3, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&p, ks, ATTN_F32, 3, packed, NULL, NULL), attn_tensor_init(&po, out, ATTN_F32, 3, packed, NULL, NULL);
    for (int t = 0; t < 2; t++) {
        attn_error err = {0};
        NEWER(attn_sdpa_options, so, TAILS[t]);
        memset(g1, 0x7f, sizeof g1), memset(g2, 0x7f, sizeof g2), memset(g3, 0x7f, sizeof g3);
        attn_status st = attn_sdpa_backward(&dq, &dk, &dv, NULL, &x, &x, &x, &x, &x, NULL, so, &err);
        refused(st, &err, "options", sizeof *so,
                all(g1, 0x7f, sizeof g1) && all(g2, 0x7f, sizeof g2) && all(g3, 0x7f, sizeof g3),
                "sdpa_backward_options", TAILS[t]);
        memset(out, 0x7f, sizeof out);
        st = attn_sdpa_varlen(&po, NULL, &p, &p, &p, cu, cu, 1, NULL, so, &err);
        refused(st, &err, "options", sizeof *so, all(out, 0x7f, sizeof out), "sdpa_varlen_options", TAILS[t]);
        /* the plans: *workspace_bytes as it was (the plan's memory is not
         * checked: a plan init zeroes the plan's header in it before it
         * reads the options) */
        size_t need = 0, ws = 12345;
        attn_sdpa_plan *plan = NULL;
        st = attn_sdpa_plan_bytes(&need, 0, &err);
        check(!st && need <= sizeof plan_mem, "sdpa_plan_bytes_with_this_header", "%s", st ? err.message : "too big");
        if (st || need > sizeof plan_mem) {
            free(so);
            return;
        }
        memset(plan_mem, 0x7f, sizeof plan_mem);
        st = attn_sdpa_plan_init(&plan, plan_mem, need, &ws, &o, NULL, &x, &x, &x, so, &err);
        refused(st, &err, "options", sizeof *so, ws == 12345, "sdpa_plan_init_options", TAILS[t]);
        st = attn_sdpa_plan_bytes(&need, 1, &err);
        if (!st && need <= sizeof plan_mem) {
            st = attn_sdpa_varlen_plan_init(&plan, plan_mem, need, &ws, &po, NULL, &p, &p, &p, cu, cu, 1, NULL, so,
                                            &err);
            refused(st, &err, "options", sizeof *so, ws == 12345, "sdpa_varlen_plan_init_options", TAILS[t]);
        } else {
            check(0, "sdpa_varlen_plan_bytes_with_this_header", "%s", st ? err.message : "too big");
        }
        free(so);
    }
}

/* attn_rope_options from a header without linear_scaling, and without
 * position_offset: the calls read their prefix, and the rest is default. */
static void rope_shorter(void) {
    int64_t shape[2] = {S, E};
    float want[S * E];
    attn_tensor x, o, w;
    attn_tensor_init(&x, xs, ATTN_F32, 2, shape, NULL, NULL), attn_tensor_init(&o, out, ATTN_F32, 2, shape, NULL, NULL);
    attn_tensor_init(&w, want, ATTN_F32, 2, shape, NULL, NULL);
    static const size_t ENDS[2] = {offsetof(attn_rope_options, linear_scaling),
                                   offsetof(attn_rope_options, position_offset)};
    for (int i = 0; i < 2; i++) {
        attn_error err = {0};
        attn_rope_options full = attn_rope_options_default();
        full.layout = ATTN_ROPE_INTERLEAVED, full.base = 500;
        if (i == 0) full.position_offset = 3;
        attn_status st = attn_rope(&w, &x, &full, &err);
        attn_rope_options *r = malloc(ENDS[i]);
        memcpy(r, &full, ENDS[i]);
        r->struct_size = ENDS[i];
        memset(out, 0x7f, sizeof out);
        if (!st) st = attn_rope(&o, &x, r, &err);
        check(!st && !memcmp(out, want, sizeof want), i ? "rope_options_before_position_offset_reads_its_prefix"
                                                       : "rope_options_before_linear_scaling_reads_its_prefix",
              "%s", st ? err.message : "out differs from the full struct's with the defaults");
        free(r);
    }
}

/* attn_mha's params and options, and the options' rope, attention and
 * context. */
static void mha(void) {
    enum { EMB = 4, L = 3 };
    float x[L * EMB], w_in[3 * EMB * EMB], w_out[EMB * EMB], o[L * EMB];
    unsigned seed = 5;
    for (int i = 0; i < L * EMB; i++) x[i] = rnd(&seed);
    for (int i = 0; i < 3 * EMB * EMB; i++) w_in[i] = rnd(&seed);
    for (int i = 0; i < EMB * EMB; i++) w_out[i] = rnd(&seed);
    int64_t xsh[2] = {L, EMB}, wis[2] = {3 * EMB, EMB}, wos[2] = {EMB, EMB};
    attn_tensor tx, twi, two, to;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xsh, NULL, NULL), attn_tensor_init(&twi, w_in, ATTN_F32, 2, wis, NULL, NULL);
    attn_tensor_init(&two, w_out, ATTN_F32, 2, wos, NULL, NULL), attn_tensor_init(&to, o, ATTN_F32, 2, xsh, NULL, NULL);
    attn_mha_params p = attn_mha_params_default();
    p.embed_dim = EMB, p.num_heads = 2, p.in_proj_weight = &twi, p.out_proj_weight = &two;
    attn_error err = {0};
    attn_mha_options mo = attn_mha_options_default();
    attn_status st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, &mo, &err);
    check(!st, "mha_runs_with_this_header", "%s", err.message);
    for (int t = 0; t < 2; t++) {
        NEWER(attn_mha_params, np, TAILS[t]);
        memcpy((char *)np + sizeof(size_t), (char *)&p + sizeof(size_t), sizeof p - sizeof(size_t));
        memset(o, 0x7f, sizeof o);
        st = attn_mha(&to, NULL, &tx, &tx, &tx, np, &mo, &err);
        refused(st, &err, "params", sizeof p, all(o, 0x7f, sizeof o), "mha_params", TAILS[t]);

        NEWER(attn_mha_options, no, TAILS[t]);
        st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, no, &err);
        refused(st, &err, "options", sizeof mo, all(o, 0x7f, sizeof o), "mha_options", TAILS[t]);

        NEWER(attn_rope_options, r, TAILS[t]);
        attn_mha_options with = attn_mha_options_default();
        with.rope = r;
        st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, &with, &err);
        refused(st, &err, "options->rope", sizeof *r, all(o, 0x7f, sizeof o), "mha_options_rope", TAILS[t]);

        NEWER(attn_sdpa_options, so, TAILS[t]);
        with = attn_mha_options_default();
        with.attention = so;
        st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, &with, &err);
        refused(st, &err, "options->attention", sizeof *so, all(o, 0x7f, sizeof o), "mha_options_attention",
                TAILS[t]);

        NEWER(attn_context, c, TAILS[t]);
        with = attn_mha_options_default();
        with.context = c;
        st = attn_mha(&to, NULL, &tx, &tx, &tx, &p, &with, &err);
        refused(st, &err, "context", sizeof *c, all(o, 0x7f, sizeof o), "mha_options_context", TAILS[t]);
        free(np), free(no), free(r), free(so), free(c);
    }
}

/* The layer's other calls: attn_mha_backward (params, options),
 * attn_mha_weights_bytes/_init (params), and the steps over a cache and a
 * pool (attn_mha_cached, attn_mha_cached_batch, attn_mha_paged: params,
 * options). Each refused before anything is written: the gradients, the
 * weights' memory, out, the cache's and the pool's memory, the lengths. */
static void layer_others(void) {
    enum { EMB = 4, L = 3, HD = EMB / 2 };
    static float x[L * EMB], w_in[3 * EMB * EMB], w_out[EMB * EMB], o[L * EMB], gq[L * EMB], gk[L * EMB],
        gv[L * EMB], gwi[3 * EMB * EMB], gwo[EMB * EMB];
    static unsigned char wmem[1 << 14];
    unsigned seed = 7;
    for (int i = 0; i < L * EMB; i++) x[i] = rnd(&seed);
    for (int i = 0; i < 3 * EMB * EMB; i++) w_in[i] = rnd(&seed);
    for (int i = 0; i < EMB * EMB; i++) w_out[i] = rnd(&seed);
    int64_t xsh[2] = {L, EMB}, wis[2] = {3 * EMB, EMB}, wos[2] = {EMB, EMB};
    attn_tensor tx, twi, two, to, tgq, tgk, tgv, tgwi, tgwo;
    attn_tensor_init(&tx, x, ATTN_F32, 2, xsh, NULL, NULL), attn_tensor_init(&twi, w_in, ATTN_F32, 2, wis, NULL, NULL);
    attn_tensor_init(&two, w_out, ATTN_F32, 2, wos, NULL, NULL), attn_tensor_init(&to, o, ATTN_F32, 2, xsh, NULL, NULL);
    attn_tensor_init(&tgq, gq, ATTN_F32, 2, xsh, NULL, NULL), attn_tensor_init(&tgk, gk, ATTN_F32, 2, xsh, NULL, NULL);
    attn_tensor_init(&tgv, gv, ATTN_F32, 2, xsh, NULL, NULL);
    attn_tensor_init(&tgwi, gwi, ATTN_F32, 2, wis, NULL, NULL), attn_tensor_init(&tgwo, gwo, ATTN_F32, 2, wos, NULL, NULL);
    attn_mha_params p = attn_mha_params_default(), g = attn_mha_params_default();
    p.embed_dim = EMB, p.num_heads = 2, p.in_proj_weight = &twi, p.out_proj_weight = &two;
    g.embed_dim = EMB, g.num_heads = 2, g.in_proj_weight = &tgwi, g.out_proj_weight = &tgwo;
    attn_error err = {0};
    /* a cache and a pool of the layer's heads (2, of 2 dims each), one position held */
    attn_kv_cache_desc cd = attn_kv_cache_desc_default();
    cd.heads = 2, cd.capacity = 16, cd.key_dim = HD, cd.value_dim = HD;
    attn_kv_pages_desc pd = attn_kv_pages_desc_default();
    pd.heads = 2, pd.key_dim = HD, pd.value_dim = HD, pd.page_size = 16, pd.num_pages = 2, pd.max_sequences = 1;
    size_t cbytes = 0, pbytes = 0;
    attn_kv_cache *cache = NULL;
    attn_kv_pages *pool = NULL;
    void *cmem = NULL, *pmem = NULL;
    int64_t id = 0, cu[2] = {0, L}, row = 0, length = 0;
    attn_status st = attn_kv_cache_bytes(&cbytes, &cd, &err);
    if (!st) st = (cmem = malloc(cbytes)) ? attn_kv_cache_init(&cache, cmem, cbytes, &cd, &err) : ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_kv_pages_bytes(&pbytes, &pd, &err);
    if (!st) st = (pmem = malloc(pbytes)) ? attn_kv_pages_init(&pool, pmem, pbytes, &pd, &err) : ATTN_ERR_NO_MEMORY;
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_mha_cached(&to, &tx, cache, &p, NULL, &err); /* this header's structs: taken */
    if (!st) st = attn_mha_paged(&to, &tx, cu, &id, 1, pool, NULL, &p, NULL, &err);
    check(!st, "layer_steps_with_this_header", "%s", st ? err.message : "");
    unsigned char *csnap = st ? NULL : malloc(cbytes), *psnap = st ? NULL : malloc(pbytes);
    for (int t = 0; t < 2 && csnap && psnap; t++) {
        NEWER(attn_mha_params, np, TAILS[t]);
        memcpy((char *)np + sizeof(size_t), (char *)&p + sizeof(size_t), sizeof p - sizeof(size_t));
        NEWER(attn_mha_options, no, TAILS[t]);
        const attn_mha_params *pp[2] = {np, &p};
        const attn_mha_options *oo[2] = {NULL, no};
        const char *names[2] = {"params", "options"};
        const size_t ours[2] = {sizeof p, sizeof(attn_mha_options)};
        for (int w = 0; w < 2; w++) { /* w 0: newer params; 1: newer options */
            char label[64];
            memset(gq, 0x7f, sizeof gq), memset(gk, 0x7f, sizeof gk), memset(gv, 0x7f, sizeof gv);
            memset(gwi, 0x7f, sizeof gwi), memset(gwo, 0x7f, sizeof gwo);
            st = attn_mha_backward(&tgq, &tgk, &tgv, &g, &tx, &tx, &tx, &tx, pp[w], oo[w], &err);
            snprintf(label, sizeof label, "mha_backward_%s", names[w]);
            refused(st, &err, names[w], ours[w],
                    all(gq, 0x7f, sizeof gq) && all(gk, 0x7f, sizeof gk) && all(gv, 0x7f, sizeof gv) &&
                        all(gwi, 0x7f, sizeof gwi) && all(gwo, 0x7f, sizeof gwo),
                    label, TAILS[t]);
            memcpy(csnap, cmem, cbytes), memcpy(psnap, pmem, pbytes), memset(o, 0x7f, sizeof o);
            st = attn_mha_cached(&to, &tx, cache, pp[w], oo[w], &err);
            snprintf(label, sizeof label, "mha_cached_%s", names[w]);
            refused(st, &err, names[w], ours[w], all(o, 0x7f, sizeof o) && !memcmp(csnap, cmem, cbytes), label,
                    TAILS[t]);
            length = 0;
            st = attn_mha_cached_batch(&to, &tx, cu, &row, 1, cache, &length, NULL, pp[w], oo[w], &err);
            snprintf(label, sizeof label, "mha_cached_batch_%s", names[w]);
            refused(st, &err, names[w], ours[w],
                    all(o, 0x7f, sizeof o) && !memcmp(csnap, cmem, cbytes) && length == 0, label, TAILS[t]);
            st = attn_mha_paged(&to, &tx, cu, &id, 1, pool, NULL, pp[w], oo[w], &err);
            snprintf(label, sizeof label, "mha_paged_%s", names[w]);
            refused(st, &err, names[w], ours[w], all(o, 0x7f, sizeof o) && !memcmp(psnap, pmem, pbytes), label,
                    TAILS[t]);
        }
        size_t b = 12345, wb = 0;
        st = attn_mha_weights_bytes(&b, np, &err);
        refused(st, &err, "params", sizeof p, b == 12345, "mha_weights_bytes_params", TAILS[t]);
        st = attn_mha_weights_bytes(&wb, &p, &err);
        if (!st && wb <= sizeof wmem) {
            attn_mha_weights *mw = (attn_mha_weights *)&b;
            memset(wmem, 0x7f, sizeof wmem);
            st = attn_mha_weights_init(&mw, wmem, wb, np, &err);
            refused(st, &err, "params", sizeof p, all(wmem, 0x7f, sizeof wmem) && mw == (attn_mha_weights *)&b,
                    "mha_weights_init_params", TAILS[t]);
        } else {
            check(0, "mha_weights_bytes_with_this_header", "%s", st ? err.message : "too big");
        }
        free(np), free(no);
    }
    free(csnap), free(psnap), free(cmem), free(pmem);
}

/* attn_kv_cache_desc, and the options of attention over a cache. */
static void cache(void) {
    attn_error err = {0};
    attn_kv_cache_desc d = attn_kv_cache_desc_default();
    d.heads = H, d.capacity = 32, d.key_dim = E, d.value_dim = E;
    size_t bytes = 0;
    attn_kv_cache *c = NULL;
    attn_status st = attn_kv_cache_bytes(&bytes, &d, &err);
    void *mem = st ? NULL : malloc(bytes);
    int64_t kvs[3] = {H, S, E}, qs[3] = {H, 1, E};
    attn_tensor tk, tv, tq, to;
    attn_tensor_init(&tk, ks, ATTN_F32, 3, kvs, NULL, NULL), attn_tensor_init(&tv, vs, ATTN_F32, 3, kvs, NULL, NULL);
    attn_tensor_init(&tq, xs, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, qs, NULL, NULL);
    if (!st) st = attn_kv_cache_init(&c, mem, bytes, &d, &err);
    if (!st) st = attn_kv_cache_append(c, &tk, &tv, &err);
    check(!st, "cache_with_this_header", "%s", err.message);
    for (int t = 0; t < 2 && !st; t++) {
        NEWER(attn_kv_cache_desc, nd, TAILS[t]);
        memcpy((char *)nd + sizeof(size_t), (char *)&d + sizeof(size_t), sizeof d - sizeof(size_t));
        size_t b = 12345;
        attn_status s = attn_kv_cache_bytes(&b, nd, &err);
        refused(s, &err, "desc", sizeof d, b == 12345, "kv_cache_bytes_desc", TAILS[t]);
        void *m = malloc(bytes);
        memset(m, 0x7f, bytes);
        attn_kv_cache *nc = (attn_kv_cache *)&b;
        s = attn_kv_cache_init(&nc, m, bytes, nd, &err);
        refused(s, &err, "desc", sizeof d, all(m, 0x7f, bytes) && nc == (attn_kv_cache *)&b, "kv_cache_init_desc",
                TAILS[t]);

        NEWER(attn_sdpa_options, so, TAILS[t]);
        memset(out, 0x7f, sizeof out);
        s = attn_kv_cache_attend(&to, NULL, &tq, c, so, &err);
        refused(s, &err, "options", sizeof *so, all(out, 0x7f, sizeof out), "kv_cache_attend_options", TAILS[t]);
        free(nd), free(m), free(so);
    }
    free(mem);
}

/* attn_kv_pages_desc; attn_kv_paged_view read (attn_kv_paged_check,
 * attn_kv_paged_attend) and written (attn_kv_pages_view); the options of
 * attention over a pool. */
static void pages(void) {
    attn_error err = {0};
    attn_kv_pages_desc d = attn_kv_pages_desc_default();
    d.heads = H, d.key_dim = E, d.value_dim = E, d.page_size = 16, d.num_pages = 4, d.max_sequences = 2;
    size_t bytes = 0;
    attn_kv_pages *pool = NULL;
    int64_t id = 0, cu[2] = {0, S}, cq[2] = {0, 1};
    attn_status st = attn_kv_pages_bytes(&bytes, &d, &err);
    void *mem = st ? NULL : malloc(bytes);
    int64_t kvs[3] = {S, H, E}, qs[3] = {1, H, E};
    attn_tensor tk, tv, tq, to;
    attn_tensor_init(&tk, ks, ATTN_F32, 3, kvs, NULL, NULL), attn_tensor_init(&tv, vs, ATTN_F32, 3, kvs, NULL, NULL);
    attn_tensor_init(&tq, xs, ATTN_F32, 3, qs, NULL, NULL), attn_tensor_init(&to, out, ATTN_F32, 3, qs, NULL, NULL);
    if (!st) st = attn_kv_pages_init(&pool, mem, bytes, &d, &err);
    if (!st) st = attn_kv_pages_create(pool, &id, &err);
    if (!st) st = attn_kv_pages_append(pool, &id, 1, &tk, &tv, cu, &err);
    attn_kv_paged_view view = attn_kv_paged_view_default();
    if (!st) st = attn_kv_pages_view(&view, pool, &err);
    check(!st, "pool_with_this_header", "%s", err.message);
    for (int t = 0; t < 2 && !st; t++) {
        NEWER(attn_kv_pages_desc, nd, TAILS[t]);
        memcpy((char *)nd + sizeof(size_t), (char *)&d + sizeof(size_t), sizeof d - sizeof(size_t));
        size_t b = 12345;
        attn_status s = attn_kv_pages_bytes(&b, nd, &err);
        refused(s, &err, "desc", sizeof d, b == 12345, "kv_pages_bytes_desc", TAILS[t]);
        void *m = malloc(bytes);
        memset(m, 0x7f, bytes);
        attn_kv_pages *np = (attn_kv_pages *)&b;
        s = attn_kv_pages_init(&np, m, bytes, nd, &err);
        refused(s, &err, "desc", sizeof d, all(m, 0x7f, bytes) && np == (attn_kv_pages *)&b, "kv_pages_init_desc",
                TAILS[t]);

        /* written: the block keeps every byte past struct_size, and every field */
        attn_kv_paged_view *w = malloc(sizeof *w + TAIL);
        memset(w, 0x7f, sizeof *w + TAIL);
        w->struct_size = sizeof *w + TAIL;
        memset((char *)w + sizeof *w, TAILS[t], TAIL);
        s = attn_kv_pages_view(w, pool, &err);
        refused(s, &err, "view", sizeof *w,
                all((char *)w + sizeof(size_t), 0x7f, sizeof *w - sizeof(size_t)) &&
                    all((char *)w + sizeof *w, TAILS[t], TAIL) && w->struct_size == sizeof *w + TAIL,
                "kv_pages_view_written_view", TAILS[t]);

        /* read: the pool's own view copied into a newer header's struct */
        NEWER(attn_kv_paged_view, nv, TAILS[t]);
        memcpy((char *)nv + sizeof(size_t), (char *)&view + sizeof(size_t), sizeof view - sizeof(size_t));
        s = attn_kv_paged_check(nv, &err);
        refused(s, &err, "view", sizeof view, 1, "kv_paged_check_view", TAILS[t]);
        memset(out, 0x7f, sizeof out);
        s = attn_kv_paged_attend(&to, NULL, &tq, cq, nv, NULL, NULL, &err);
        refused(s, &err, "view", sizeof view, all(out, 0x7f, sizeof out), "kv_paged_attend_view", TAILS[t]);

        NEWER(attn_sdpa_options, so, TAILS[t]);
        s = attn_kv_pages_attend(&to, NULL, &tq, cq, &id, 1, pool, NULL, so, &err);
        refused(s, &err, "options", sizeof *so, all(out, 0x7f, sizeof out), "kv_pages_attend_options", TAILS[t]);
        s = attn_kv_paged_attend(&to, NULL, &tq, cq, &view, NULL, so, &err);
        refused(s, &err, "options", sizeof *so, all(out, 0x7f, sizeof out), "kv_paged_attend_options", TAILS[t]);

        /* planned over a newer view: the plan's memory and *workspace_bytes
         * as they were; with newer options: *workspace_bytes (the plan's
         * header is zeroed before the options are read); a plan of this
         * header's view run with a newer one: out as it was */
        int64_t cq2[3] = {0, 1, 1};
        size_t need = 0, ws = 12345;
        attn_sdpa_plan *plan = NULL;
        s = attn_sdpa_plan_bytes(&need, view.num_sequences, &err);
        if (!s && need <= sizeof plan_mem) {
            memset(plan_mem, 0x7f, sizeof plan_mem);
            s = attn_kv_paged_plan_init(&plan, plan_mem, need, &ws, &to, NULL, &tq, cq2, nv, NULL, NULL, &err);
            refused(s, &err, "view", sizeof view, all(plan_mem, 0x7f, sizeof plan_mem) && ws == 12345,
                    "kv_paged_plan_init_view", TAILS[t]);
            s = attn_kv_paged_plan_init(&plan, plan_mem, need, &ws, &to, NULL, &tq, cq2, &view, NULL, so, &err);
            refused(s, &err, "options", sizeof *so, ws == 12345, "kv_paged_plan_init_options", TAILS[t]);
            s = attn_kv_paged_plan_init(&plan, plan_mem, need, &ws, &to, NULL, &tq, cq2, &view, NULL, NULL, &err);
            void *wsm = s ? NULL : malloc(ws ? ws : 1);
            check(!s && wsm, "kv_paged_plan_with_this_header", "%s", s ? err.message : "no memory");
            if (wsm) {
                memset(out, 0x7f, sizeof out);
                s = attn_kv_paged_run_view(plan, &to, NULL, &tq, nv, wsm, ws, &err);
                refused(s, &err, "view", sizeof view, all(out, 0x7f, sizeof out), "kv_paged_run_view_layer", TAILS[t]);
            }
            free(wsm);
        } else {
            check(0, "kv_paged_plan_bytes_with_this_header", "%s", s ? err.message : "too big");
        }
        free(nd), free(m), free(w), free(nv), free(so);
    }
    free(mem);
}

/* attn_tuning, which the library fills: refused, not a byte written. */
static void tuning(void) {
    for (int t = 0; t < 2; t++) {
        attn_error err = {0};
        attn_tuning *tu = malloc(sizeof *tu + TAIL);
        if (!tu) return (void)check(0, "tuning_block", "no memory");
        memset(tu, 0x7f, sizeof *tu + TAIL);
        tu->struct_size = sizeof *tu + TAIL;
        memset((char *)tu + sizeof *tu, TAILS[t], TAIL);
        attn_status st = attn_get_tuning(tu, &err);
        refused(st, &err, "tuning", sizeof *tu,
                all((char *)tu + sizeof(size_t), 0x7f, sizeof *tu - sizeof(size_t)) &&
                    all((char *)tu + sizeof *tu, TAILS[t], TAIL),
                "get_tuning", TAILS[t]);
        free(tu);
    }
}

int main(void) {
    unsigned seed = 3;
    for (int i = 0; i < S * E; i++) xs[i] = rnd(&seed);
    for (int i = 0; i < H * S * E; i++) ks[i] = rnd(&seed), vs[i] = rnd(&seed);
    sdpa_and_rope();
    sdpa_others();
    rope_shorter();
    mha();
    layer_others();
    cache();
    pages();
    tuning();
    attn_shutdown();
    return n_failed ? 1 : 0;
}
