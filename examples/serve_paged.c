/* serve_paged.c -- a serving loop over paged KV caches, checked in double.
 *
 * A model of 4 attention layers keeps each layer's keys and values in a
 * pool of its own (layer 3 in q8, the others f32), and makes the same
 * calls on every pool, so that all of them hand out the same sequence ids
 * and pages (see "Many layers" in attn.h). Then:
 *   step 0   three requests of 5, 37 and 20 tokens are admitted and
 *            prefilled: their prompts appended, attention over them as one
 *            ragged batch (attn_sdpa_varlen; the q8 layer through its pool);
 *   step 1   request 3 is forked from request 1 (their prompt is shared);
 *   step 3   request 2's last 3 tokens were rejected drafts: truncated;
 *   step 6   request 0 is done and freed; request 4 takes its id and its
 *            9-token prompt is prefilled beside the others' decode;
 *   steps 1-10 every request decodes a token. Each step's attention is
 *            planned once on layer 0's pool and run for layers 0, 1 and 2
 *            on their own pages; the q8 layer has a plan of its own.
 * Every output is checked against attention computed here in double over
 * the keys and values the program appended (for the q8 layer: over what
 * the pool gives back, checked itself against what was appended).
 *
 * Build: cc -Iinclude examples/serve_paged.c -Lbuild -lattn -lm -Wl,-rpath,$PWD/build
 * (make builds it as build/examples/serve_paged; the tests run it). */
#include <attn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HK = 2, HQ = 4, DH = 32, PAGE = 16, NPAGES = 32, MAXSEQ = 4, LAYERS = 4, Q8 = 3 };
enum { NREQ = 5, MAXLEN = 64, MAXROWS = 128 };

static struct { int active, len; int64_t id; } req[NREQ];
static attn_kv_pages *pool[LAYERS];
/* What each request holds, per layer: the rows appended (f32 layers), or
 * read back from the pool (the q8 layer). */
static double keys[LAYERS][NREQ][MAXLEN][HK][DH], vals[LAYERS][NREQ][MAXLEN][HK][DH];
static float kbuf[MAXROWS][HK][DH], vbuf[MAXROWS][HK][DH], qbuf[MAXROWS][HQ][DH], obuf[MAXROWS][HQ][DH];
static attn_error err;

static void check(attn_status st, const char *what) {
    if (st == ATTN_OK) return;
    printf("FAIL %s: %s\n", what, err.message);
    exit(1);
}

/* Layer 0 names a request's sequence; every other pool must have handed
 * out the same id for it. */
static void same_id(int layer, int64_t *request_id, int64_t id) {
    if (layer == 0) *request_id = id;
    else if (id != *request_id) {
        printf("FAIL layer %d's pool gave id %lld where layer 0's gave %lld\n", layer, (long long)id,
               (long long)*request_id);
        exit(1);
    }
}

static float rnd(void) {
    static uint64_t x = 0x9e3779b97f4a7c15u;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return (float)((double)(x >> 11) / 9007199254740992.0 * 2 - 1);
}

/* The q8 layer's rows as its pool holds them, keys and values each within
 * half a q8 step (1/254 of a block's largest value) of the rows appended. */
static void read_back_q8(int r, float (*ak)[HK][DH], float (*av)[HK][DH], int from, int rows) {
    static double k[HK][MAXLEN][DH], v[HK][MAXLEN][DH];
    int64_t shape[3] = {HK, req[r].len, DH}, strides[3] = {MAXLEN * DH, DH, 1};
    attn_tensor tk, tv;
    check(attn_tensor_init(&tk, k, ATTN_F64, 3, shape, strides, &err), "k");
    check(attn_tensor_init(&tv, v, ATTN_F64, 3, shape, strides, &err), "v");
    check(attn_kv_pages_gather(&tk, &tv, pool[Q8], req[r].id, &err), "gather");
    for (int p = from; p < from + rows; p++)
        for (int h = 0; h < HK; h++)
            for (int d = 0; d < DH; d++) {
                keys[Q8][r][p][h][d] = k[h][p][d], vals[Q8][r][p][h][d] = v[h][p][d];
                if (fabs(k[h][p][d] - ak[p - from][h][d]) > 1.0 / 254 + 1e-3 ||
                    fabs(v[h][p][d] - av[p - from][h][d]) > 1.0 / 254 + 1e-3) {
                    printf("FAIL request %d position %d: q8 key %g, value %g read back as %g, %g\n", r, p,
                           ak[p - from][h][d], av[p - from][h][d], k[h][p][d], v[h][p][d]);
                    exit(1);
                }
            }
}

/* Attention in double for request r's last `rows` queries q (rows, HQ, DH),
 * each seeing the positions up to its own (bottom-right causal). Returns
 * the largest difference from got. */
static double compare(const float *q, const float *got, int layer, int r, int rows) {
    double worst = 0;
    for (int i = 0; i < rows; i++)
        for (int h = 0; h < HQ; h++) {
            int kh = h / (HQ / HK), last = req[r].len - rows + i;
            double s[MAXLEN], m = -INFINITY, z = 0;
            for (int j = 0; j <= last; j++) {
                s[j] = 0;
                for (int d = 0; d < DH; d++) s[j] += q[(i * HQ + h) * DH + d] * keys[layer][r][j][kh][d];
                s[j] /= sqrt(DH);
                m = fmax(m, s[j]);
            }
            for (int j = 0; j <= last; j++) z += s[j] = exp(s[j] - m);
            for (int d = 0; d < DH; d++) {
                double o = 0;
                for (int j = 0; j <= last; j++) o += s[j] / z * vals[layer][r][j][kh][d];
                worst = fmax(worst, fabs(o - got[(i * HQ + h) * DH + d]));
            }
        }
    return worst;
}

/* Every pool must give each request the same id and page table as layer 0's. */
static void check_pools_in_step(void) {
    for (int r = 0; r < NREQ; r++) {
        if (!req[r].active) continue;
        int64_t len0, len;
        const int32_t *table0, *table;
        check(attn_kv_pages_sequence(pool[0], req[r].id, &len0, &table0, &err), "sequence");
        for (int l = 1; l < LAYERS; l++) {
            check(attn_kv_pages_sequence(pool[l], req[r].id, &len, &table, &err), "sequence");
            if (len != len0 || memcmp(table, table0, sizeof *table * (size_t)((len + PAGE - 1) / PAGE))) {
                printf("FAIL layer %d's pages for request %d are not layer 0's\n", l, r);
                exit(1);
            }
        }
    }
}

int main(void) {
    void *memory[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        attn_kv_pages_desc d = attn_kv_pages_desc_default();
        d.heads = HK, d.key_dim = d.value_dim = DH, d.dtype = l == Q8 ? ATTN_Q8 : ATTN_F32;
        d.page_size = PAGE, d.num_pages = NPAGES, d.max_sequences = MAXSEQ;
        size_t bytes;
        check(attn_kv_pages_bytes(&bytes, &d, &err), "pages_bytes");
        memory[l] = malloc(bytes);
        check(attn_kv_pages_init(&pool[l], memory[l], bytes, &d, &err), "pages_init");
    }
    size_t plan_bytes, workspace_size = 0;
    check(attn_sdpa_plan_bytes(&plan_bytes, MAXSEQ, &err), "plan_bytes");
    void *plan_memory = malloc(plan_bytes), *q8_plan_memory = malloc(plan_bytes), *workspace = NULL;
    const int prompt[NREQ] = {5, 37, 20, 0, 9};
    double worst[LAYERS] = {0};

    for (int step = 0; step <= 10; step++) {
        int rows[NREQ] = {0}; /* new tokens per request this step */
        for (int l = 0; l < LAYERS; l++) { /* the scheduler's decisions, made on every pool alike */
            int64_t id; /* each pool's new id, which must be layer 0's */
            if (step == 0)
                for (int r = 0; r < 3; r++) {
                    check(attn_kv_pages_create(pool[l], &id, &err), "create");
                    same_id(l, &req[r].id, id);
                }
            if (step == 1) {
                check(attn_kv_pages_fork(pool[l], &id, req[1].id, &err), "fork");
                same_id(l, &req[3].id, id);
            }
            if (step == 3) check(attn_kv_pages_truncate(pool[l], req[2].id, req[2].len - 3, &err), "truncate");
            if (step == 6) {
                check(attn_kv_pages_free(pool[l], req[0].id, &err), "free");
                check(attn_kv_pages_create(pool[l], &id, &err), "create");
                same_id(l, &req[4].id, id);
            }
        }
        if (step == 0)
            for (int r = 0; r < 3; r++) req[r].active = 1, rows[r] = prompt[r];
        if (step == 1) {
            req[3].active = 1, req[3].len = req[1].len;
            for (int l = 0; l < LAYERS; l++)
                memcpy(keys[l][3], keys[l][1], sizeof keys[l][1]), memcpy(vals[l][3], vals[l][1], sizeof vals[l][1]);
        }
        if (step == 3) req[2].len -= 3;
        if (step == 6) req[0].active = 0, req[4].active = 1, rows[4] = prompt[4];
        for (int r = 0; r < NREQ; r++)
            if (req[r].active && !rows[r]) rows[r] = 1;

        /* The step's rows packed by sequence id: the plan of a pool's view
         * takes every id, 0 rows for those not in the step. */
        int64_t ids[MAXSEQ], cu[MAXSEQ + 1] = {0}, cu_q[MAXSEQ + 1] = {0};
        int who[MAXSEQ], n = 0;
        for (int64_t id = 0; id < MAXSEQ; id++) {
            int r = -1;
            for (int x = 0; x < NREQ; x++)
                if (req[x].active && req[x].id == id) r = x;
            cu_q[id + 1] = cu_q[id] + (r >= 0 ? rows[r] : 0);
            if (r >= 0) who[n] = r, ids[n] = id, cu[n + 1] = cu[n] + rows[r], n++;
        }
        for (int i = 0; i < n; i++) req[who[i]].len += rows[who[i]];
        int64_t kv_shape[3] = {cu[n], HK, DH}, q_shape[3] = {cu[n], HQ, DH};
        attn_tensor k, v, q, out;
        check(attn_tensor_init(&k, kbuf, ATTN_F32, 3, kv_shape, NULL, &err), "k");
        check(attn_tensor_init(&v, vbuf, ATTN_F32, 3, kv_shape, NULL, &err), "v");
        check(attn_tensor_init(&q, qbuf, ATTN_F32, 3, q_shape, NULL, &err), "q");
        check(attn_tensor_init(&out, obuf, ATTN_F32, 3, q_shape, NULL, &err), "out");
        attn_sdpa_options opts = attn_sdpa_options_default();
        opts.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* the new tokens are each sequence's last */
        attn_sdpa_plan *plan = NULL, *q8_plan = NULL;

        for (int l = 0; l < LAYERS; l++) {
            /* This layer's new keys, values and queries (a model projects them from its input). */
            for (int i = 0; i < n; i++)
                for (int64_t row = cu[i]; row < cu[i + 1]; row++) {
                    int r = who[i], pos = req[r].len - (int)(cu[i + 1] - row);
                    for (int h = 0; h < HK; h++)
                        for (int d = 0; d < DH; d++) {
                            keys[l][r][pos][h][d] = kbuf[row][h][d] = rnd();
                            vals[l][r][pos][h][d] = vbuf[row][h][d] = rnd();
                        }
                    for (int h = 0; h < HQ; h++)
                        for (int d = 0; d < DH; d++) qbuf[row][h][d] = rnd();
                }
            check(attn_kv_pages_append(pool[l], ids, n, &k, &v, cu, &err), "append");
            if (l == Q8)
                for (int i = 0; i < n; i++)
                    read_back_q8(who[i], kbuf + cu[i], vbuf + cu[i], req[who[i]].len - rows[who[i]], rows[who[i]]);
            attn_kv_paged_view view = attn_kv_paged_view_default();
            check(attn_kv_pages_view(&view, pool[l], &err), "view");
            attn_sdpa_plan **planned = l == Q8 ? &q8_plan : &plan;
            if (step == 0 && l != Q8) { /* the prompts, straight from the packed rows */
                check(attn_sdpa_varlen(&out, NULL, &q, &k, &v, cu, cu, n, NULL, &opts, &err), "prefill");
            } else {
                if (!*planned) { /* plan the step: once for the f32 layers, once for the q8 one */
                    size_t need;
                    check(attn_kv_paged_plan_init(planned, l == Q8 ? q8_plan_memory : plan_memory, plan_bytes, &need,
                                                  &out, NULL, &q, cu_q, &view, NULL, &opts, &err),
                          "plan");
                    if (need > workspace_size) {
                        free(workspace);
                        if (!(workspace = malloc(workspace_size = need))) {
                            printf("FAIL out of memory for a workspace of %zu bytes\n", need);
                            exit(1);
                        }
                    }
                }
                check(attn_kv_paged_run(*planned, &out, NULL, &q, view.k_pages, view.v_pages, workspace,
                                        workspace_size, &err),
                      "run");
            }
            for (int i = 0; i < n; i++)
                worst[l] = fmax(worst[l], compare(qbuf[cu[i]][0], obuf[cu[i]][0], l, who[i], rows[who[i]]));
        }
        check_pools_in_step();
    }

    /* f32: attn.h's bound for |v| <= 1 and 64 keys, about 1e-5. q8: decode
     * scores q8 keys against the query rounded to int8, and may sum values
     * with bf16 weights (attn.h, "How attention reads them"), a bound of up
     * to 5e-2 for these sizes; the errors come to about 2e-3. */
    int failed = 0;
    for (int l = 0; l < LAYERS; l++) {
        double tol = l == Q8 ? 2e-2 : 2e-5;
        printf("layer %d (%s): max |out - attention in double| = %.2g (tolerance %.0e)\n", l,
               l == Q8 ? "q8" : "f32", worst[l], tol);
        failed |= !(worst[l] <= tol);
    }
    for (int l = 0; l < LAYERS; l++) {
        for (int r = 0; r < NREQ; r++)
            if (req[r].active) check(attn_kv_pages_free(pool[l], req[r].id, &err), "free");
        if (attn_kv_pages_free_pages(pool[l]) != NPAGES) failed = 1, printf("FAIL layer %d kept pages\n", l);
        free(memory[l]);
    }
    free(plan_memory), free(q8_plan_memory), free(workspace);
    printf("%s\n", failed ? "FAIL serve_paged" : "ok serve_paged");
    return failed;
}
