/* train.c -- one head of the toy model learns from data (attn_teach.h).
 *
 * The task: sentences from the toy grammar, attended with a causal mask;
 * every word's output must equal the last noun's features up to it (noun,
 * animal, thing, place): a verb's, its subject's. The verb's own features
 * say nothing about its subject, and the subject is the only noun before
 * the verb, so the head must learn to look for it: W_V to carry those
 * features, W_Q and W_K to make a verb's query meet a noun's key.
 *
 * One step, for each sentence of the batch:
 *   Q = X W_Q,  K = X W_K,  V = X W_V           (here)
 *   out, lse = attn_sdpa(Q, K, V, causal)        (the library's forward)
 *   loss    += |out[i] - target[i]|² / words   (every word i; words: the batch's)
 *   dout[i]  = 2 (out[i] - target[i]) / words
 *   dQ, dK, dV = attn_sdpa_backward(dout, ...)   (the library's backward)
 *   dW_Q += Xᵀ dQ,  dW_K += Xᵀ dK,  dW_V += Xᵀ dV (from Q = X W_Q, ...)
 * then Adam updates W_Q, W_K, W_V. All in f64, deterministic for a seed. */
#include "attn_teach.h"
#include "base/base.h"
#include "teach/disjoint.h"
#include "teach/rng.h"

#include <stdlib.h>

enum { DM = ATTN_TOY_D_MODEL, DV = ATTN_TRAIN_D_V, MAX_WORDS = 12 };
/* The target: the subject's features noun, animal, thing and place. */
static const int TARGET_FEATURES[DV] = {0, 2, 3, 4};

size_t attn_train_options_init(attn_train_options *options, size_t struct_size) {
    static const attn_train_options DEFAULTS = {.struct_size = sizeof DEFAULTS, .d_k = ATTN_TOY_D_K, .steps = 1000,
                                                .batch = 16, .learning_rate = 0.1, .seed = 1};
    return attn_versioned_init(options, struct_size, &DEFAULTS, sizeof DEFAULTS);
}

/* A random word of the list. */
static int pick(attn_rng *r, const char *const *words, int n) {
    const char *w = words[attn_rng_next(r) % (uint64_t)n];
    return attn_toy_word_id(w, strlen(w));
}

/* Up to two adjectives. */
static int adjectives(int *ids, attn_rng *r) {
    static const char *const ADJ[] = {"quick", "brown", "lazy", "big", "small", "red"};
    int n = (int)(attn_rng_next(r) % 3);
    for (int i = 0; i < n; i++) ids[i] = pick(r, ADJ, 6);
    return n;
}

/* One sentence of the grammar into ids: DET ADJ* NOUN VERB [PREP DET ADJ*
 * NOUN], at most two adjectives each time. Returns its length. */
static int sentence(int *ids, attn_rng *r) {
    static const char *const DET[] = {"the", "a", "my"};
    static const char *const NOUN[] = {"cat", "dog", "fox", "bird", "mat", "ball",
                                       "hat", "box", "park", "garden"};
    static const char *const VERB[] = {"sat", "ran", "chased", "jumped", "saw", "slept"};
    static const char *const PREP[] = {"on", "in", "over", "under", "with"};
    int n = 0;
    ids[n++] = pick(r, DET, 3);
    n += adjectives(ids + n, r);
    ids[n++] = pick(r, NOUN, 10);
    ids[n++] = pick(r, VERB, 6);
    if (attn_rng_uniform(r) < 0.7) {
        ids[n++] = pick(r, PREP, 5);
        ids[n++] = pick(r, DET, 3);
        n += adjectives(ids + n, r);
        ids[n++] = pick(r, NOUN, 10);
    }
    return n;
}

/* c (n × m) = a (n × k) · b (k × m). */
static void matmul(double *c, const double *a, const double *b, int n, int k, int m) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int t = 0; t < k; t++) s += a[i * k + t] * b[t * m + j];
            c[i * m + j] = s;
        }
}

/* c (n × m) += aᵀ b, for a (k × n) and b (k × m). */
static void add_at_b(double *c, const double *a, const double *b, int k, int n, int m) {
    for (int t = 0; t < k; t++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) c[i * m + j] += a[t * n + i] * b[t * m + j];
}

/* The buffers of one sentence: X, Q, K, V, out, lse, dout, dQ, dK, dV. */
typedef struct buffers {
    double *x, *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
} buffers;

/* One sentence's forward and backward: adds its loss and dW_Q, dW_K, dW_V.
 * `count` is the number of words in the batch, over which the loss is a mean. */
static attn_status sentence_step(double *loss, double *g[3], double *const w[3], const buffers *b,
                                 const int *ids, int n, int dk, const attn_sdpa_options *o, double count,
                                 attn_error *err) {
    attn_toy_token tokens[MAX_WORDS];
    for (int i = 0; i < n; i++) tokens[i] = (attn_toy_token){ids[i], 0, 0};
    attn_status st = attn_toy_embed(b->x, tokens, n, err);
    if (st) return st;
    matmul(b->q, b->x, w[0], n, DM, dk);
    matmul(b->k, b->x, w[1], n, DM, dk);
    matmul(b->v, b->x, w[2], n, DM, DV);
    attn_tensor q, k, v, out, lse, dout, dq, dkt, dvt;
    int64_t sq[2] = {n, dk}, sv[2] = {n, DV}, sl[1] = {n};
    attn_tensor_init(&q, b->q, ATTN_F64, 2, sq, NULL, NULL), attn_tensor_init(&k, b->k, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&v, b->v, ATTN_F64, 2, sv, NULL, NULL), attn_tensor_init(&out, b->out, ATTN_F64, 2, sv, NULL, NULL);
    attn_tensor_init(&lse, b->lse, ATTN_F64, 1, sl, NULL, NULL), attn_tensor_init(&dout, b->dout, ATTN_F64, 2, sv, NULL, NULL);
    attn_tensor_init(&dq, b->dq, ATTN_F64, 2, sq, NULL, NULL), attn_tensor_init(&dkt, b->dk, ATTN_F64, 2, sq, NULL, NULL);
    attn_tensor_init(&dvt, b->dv, ATTN_F64, 2, sv, NULL, NULL);
    if ((st = attn_sdpa(&out, &lse, NULL, &q, &k, &v, o, err))) return st;
    /* Each word's target: the features of the last noun up to it (zeros
     * before the first): a noun's own, a verb's its subject's. */
    for (int i = 0, noun = -1; i < n; i++) {
        if (b->x[i * DM] == 1) noun = i; /* feature 0: noun */
        for (int j = 0; j < DV; j++) {
            double diff = b->out[i * DV + j] - (noun < 0 ? 0 : b->x[noun * DM + TARGET_FEATURES[j]]);
            *loss += diff * diff / count;
            b->dout[i * DV + j] = 2 * diff / count;
        }
    }
    if ((st = attn_sdpa_backward(&dq, &dkt, &dvt, NULL, &dout, &q, &k, &v, &out, &lse, o, err))) return st;
    add_at_b(g[0], b->x, b->dq, n, DM, dk);
    add_at_b(g[1], b->x, b->dk, n, DM, dk);
    add_at_b(g[2], b->x, b->dv, n, DM, DV);
    return ATTN_OK;
}

/* Adam (Kingma and Ba), step t >= 1, on n parameters. */
static void adam(double *w, const double *g, double *m, double *s, int n, int t, double lr) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        s[i] = b2 * s[i] + (1 - b2) * g[i] * g[i];
        double mh = m[i] / (1 - pow(b1, t)), sh = s[i] / (1 - pow(b2, t));
        w[i] -= lr * mh / (sqrt(sh) + eps);
    }
}

static attn_status check_options(attn_train_options *o, const attn_train_options *options, attn_error *err) {
    *o = attn_train_options_default();
    attn_status st = attn_versioned_read(o, sizeof *o, options, "options", "start from attn_train_options_default()", err);
    if (st) return st;
    if (o->d_k < 1 || o->d_k > 1024) return attn_fail(err, ATTN_ERR_ARGUMENT, "d_k is %d; it must be 1 to 1024", o->d_k);
    if (o->steps < 1 || o->steps > 100000)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "steps is %d; it must be 1 to 100000", o->steps);
    if (o->batch < 1 || o->batch > 1024)
        return attn_fail(err, ATTN_ERR_ARGUMENT, "batch is %d; it must be 1 to 1024", o->batch);
    if (!(o->learning_rate > 0 && o->learning_rate <= 10))
        return attn_fail(err, ATTN_ERR_ARGUMENT, "learning_rate is %g; it must be in (0, 10]", o->learning_rate);
    return ATTN_OK;
}

attn_status attn_train_head(double *w_q, double *w_k, double *w_v, double *loss, double *grad_wq,
                            const attn_train_options *options, attn_error *err) {
    attn_train_options o;
    attn_status st = check_options(&o, options, err);
    if (st) return st;
    if (!w_q || !w_k || !w_v) return attn_fail(err, ATTN_ERR_NULL, "w_q, w_k or w_v is NULL");
    int dk = o.d_k, nw[3] = {DM * dk, DM * dk, DM * DV}, total = nw[0] + nw[1] + nw[2];
    const teach_array outs[5] = {{w_q, nw[0], 8, "w_q"}, {w_k, nw[1], 8, "w_k"}, {w_v, nw[2], 8, "w_v"},
                                 {loss, loss ? o.steps : 0, 8, "loss"}, {grad_wq, grad_wq ? o.steps : 0, 8, "grad_wq"}};
    if ((st = teach_check_disjoint(outs, 5, 5, err))) return st;
    /* Parameters, gradients and Adam's two moments; one sentence's buffers;
     * the curves (copied out only on success, like the weights). A batch's
     * sentences (up to 1024 of MAX_WORDS ids, 48 KiB) are on the heap too,
     * not the stack: a caller's thread may have a small one. */
    double *mem = calloc((size_t)(4 * total + MAX_WORDS * (DM + 4 * dk + 4 * DV + 1) + 2 * o.steps), sizeof(double));
    int (*ids)[MAX_WORDS] = malloc(sizeof *ids * (size_t)o.batch), *len = malloc(sizeof *len * (size_t)o.batch);
    if (!mem || !ids || !len) {
        free(mem), free(ids), free(len);
        return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate the training buffers");
    }
    double *w[3] = {mem, mem + nw[0], mem + nw[0] + nw[1]}, *g = mem + total, *m1 = g + total, *m2 = m1 + total;
    double *gs[3] = {g, g + nw[0], g + nw[0] + nw[1]};
    double *p = m2 + total;
    buffers b = {p, p + MAX_WORDS * DM, 0, 0, 0, 0, 0, 0, 0, 0};
    b.k = b.q + MAX_WORDS * dk, b.dq = b.k + MAX_WORDS * dk, b.dk = b.dq + MAX_WORDS * dk;
    b.v = b.dk + MAX_WORDS * dk, b.out = b.v + MAX_WORDS * DV, b.dout = b.out + MAX_WORDS * DV;
    b.dv = b.dout + MAX_WORDS * DV, b.lse = b.dv + MAX_WORDS * DV;
    double *curve_loss = b.lse + MAX_WORDS, *curve_grad = curve_loss + o.steps;
    /* Initial weights: standard normal, so that scores grow like sqrt(d_k). */
    attn_rng init = attn_rng_seeded(o.seed), data = attn_rng_seeded(o.seed ^ 0x5eed5eed5eedull);
    for (int i = 0; i < total; i++) mem[i] = attn_rng_normal(&init);
    attn_sdpa_options so = attn_sdpa_options_default();
    so.causal = ATTN_CAUSAL_TOP_LEFT;
    so.has_scale = 1, so.scale = o.no_scale ? 1.0 : 1.0 / sqrt((double)dk);
    for (int t = 1; t <= o.steps && !st; t++) {
        double step_loss = 0;
        memset(g, 0, sizeof(double) * (size_t)total);
        int words = 0;
        for (int s = 0; s < o.batch; s++) words += len[s] = sentence(ids[s], &data);
        for (int s = 0; s < o.batch && !st; s++)
            st = sentence_step(&step_loss, gs, w, &b, ids[s], len[s], dk, &so, words, err);
        curve_loss[t - 1] = step_loss;
        double norm = 0;
        for (int i = 0; i < nw[0]; i++) norm += g[i] * g[i];
        curve_grad[t - 1] = sqrt(norm);
        adam(mem, g, m1, m2, total, t, o.learning_rate);
    }
    if (!st) {
        memcpy(w_q, w[0], sizeof(double) * (size_t)nw[0]);
        memcpy(w_k, w[1], sizeof(double) * (size_t)nw[1]);
        memcpy(w_v, w[2], sizeof(double) * (size_t)nw[2]);
        if (loss) memcpy(loss, curve_loss, sizeof(double) * (size_t)o.steps);
        if (grad_wq) memcpy(grad_wq, curve_grad, sizeof(double) * (size_t)o.steps);
    }
    free(mem), free(ids), free(len);
    return st;
}
