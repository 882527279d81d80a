/* gemm.c -- the layer's matrix products, blocked as BLIS blocks them, in
 * double (attn_gemm), in f32 (attn_sgemm) or on bf16 pairs with f32 sums
 * (attn_gemm_bf16): one frame, three element types.
 * For each block of nc columns of b, b is packed once (panels of nr columns
 * over all K, converted to the sum's type) unless it came packed; then each
 * work item takes mc rows of a (and a run of b's panels), packs a kc-deep
 * block of a at a time into panels of mr rows, and runs the microkernel
 * over every (a panel, b panel) pair into a tile of c in the sum's type.
 * The tile goes to c once, after the last depth block: an f32 c is rounded
 * once, never between blocks. The microkernel's panel of b (kc × nr) stays
 * in L1 while it meets each panel of a, which stays in L2. */
#include "kernels/gemm.h"
#include "kernels/ukernel_bf16.h"

#include <stdlib.h>
#include <string.h>

/* dst[p * w + t] = X(t, p) for t < count and p < k, and 0 for count <= t < w,
 * where X(t, p) is the element at base + t·st + p·sp (in elements of dt);
 * dst holds doubles, or floats when f32. */
static void pack_panel(void *dst, bool f32, const char *base, attn_dtype dt, int64_t st, int64_t sp, int64_t count,
                       int w, int64_t k) {
    /* X's rows along p (a row-major x, a weight read transposed): one row
     * after another, reading it in order. The p-outer order below would read
     * `count` rows at once a row's stride apart, which for a power-of-two
     * stride (E = 1024 floats: 4 KiB) all fall in one L1 set and evict each
     * other: packing a weight so ran at a fifth of the layer's speed. */
    if (sp == 1 && st != 1 && (dt == ATTN_F32 || dt == ATTN_F64)) {
        for (int64_t t = 0; t < w; t++) {
            if (f32) {
                float *d = (float *)dst + t;
                if (t >= count) for (int64_t p = 0; p < k; p++) d[p * w] = 0;
                else if (dt == ATTN_F32) {
                    const float *x = (const float *)(const void *)base + t * st;
                    for (int64_t p = 0; p < k; p++) d[p * w] = x[p];
                } else {
                    const double *x = (const double *)(const void *)base + t * st;
                    for (int64_t p = 0; p < k; p++) d[p * w] = (float)x[p];
                }
            } else {
                double *d = (double *)dst + t;
                if (t >= count) for (int64_t p = 0; p < k; p++) d[p * w] = 0;
                else if (dt == ATTN_F32) {
                    const float *x = (const float *)(const void *)base + t * st;
                    for (int64_t p = 0; p < k; p++) d[p * w] = x[p];
                } else {
                    const double *x = (const double *)(const void *)base + t * st;
                    for (int64_t p = 0; p < k; p++) d[p * w] = x[p];
                }
            }
        }
        return;
    }
    for (int64_t p = 0; p < k; p++) {
        if (f32) {
            float *d = (float *)dst + p * w;
            if (dt == ATTN_F32) {
                const float *x = (const float *)(const void *)base + p * sp;
                for (int64_t t = 0; t < count; t++) d[t] = x[t * st];
            } else {
                attn_mat x = {(char *)base, dt, 1, 1, 0, 1};
                for (int64_t t = 0; t < count; t++) d[t] = (float)attn_mat_get(&x, 0, t * st + p * sp);
            }
            for (int64_t t = count; t < w; t++) d[t] = 0;
            continue;
        }
        double *d = (double *)dst + p * w;
        if (dt == ATTN_F32) {
            const float *x = (const float *)(const void *)base + p * sp;
            for (int64_t t = 0; t < count; t++) d[t] = x[t * st];
        } else if (dt == ATTN_F64) {
            const double *x = (const double *)(const void *)base + p * sp;
            for (int64_t t = 0; t < count; t++) d[t] = x[t * st];
        } else {
            attn_mat x = {(char *)base, dt, 1, 1, 0, 1};
            for (int64_t t = 0; t < count; t++) d[t] = attn_mat_get(&x, 0, t * st + p * sp);
        }
        for (int64_t t = count; t < w; t++) d[t] = 0;
    }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The pairs of bf16 a bf16 kernel reads: for t < w and q < kb, pair(X(t,
 * 2p), X(t, 2p + 1)) with p = p0 + q, where X(t, e) is the element at base +
 * t·st + e·sp (in elements of dt) rounded to bf16 (nearest even; exact for
 * bf16), and 0 for e >= K or t >= count. Stored at dst[(q / kp)·w·kp +
 * t·kp + q % kp] (attn_bf16_kernels.gemm's layouts; kp = 1 for b). Each
 * row is read in order and converted by the set's vector to_bf16. */
static void pack_pairs(uint32_t *dst, const attn_bf16_kernels *bk, const char *base, attn_dtype dt, int64_t st,
                       int64_t sp, int64_t count, int w, int64_t p0, int64_t kb, int64_t K, int kp) {
    enum { CHUNK = 256 }; /* pairs converted at a time */
    int64_t es = (int64_t)attn_dtype_size(dt);
    uint16_t h[2 * CHUNK];
    for (int64_t t = 0; t < w; t++)
        for (int64_t q0 = 0; q0 < kb; q0 += CHUNK) {
            int64_t n = min64(CHUNK, kb - q0), e0 = 2 * (p0 + q0);
            int64_t have = t < count && K > e0 ? min64(2 * n, K - e0) : 0; /* elements that exist */
            if (have > 0) {
                const char *row = base + (t * st + e0 * sp) * es;
                if (sp == 1 && dt == ATTN_F32) {
                    int64_t even = have & ~(int64_t)1;
                    bk->to_bf16(h, (const float *)(const void *)row, even);
                    if (have > even) h[even] = attn_f32_to_bf16(((const float *)(const void *)row)[even]);
                } else if (sp == 1 && dt == ATTN_BF16) {
                    memcpy(h, row, sizeof(uint16_t) * (size_t)have);
                } else {
                    attn_mat x = {(char *)row, dt, 1, 1, 0, 1};
                    for (int64_t e = 0; e < have; e++) h[e] = attn_f32_to_bf16((float)attn_mat_get(&x, 0, e * sp));
                }
            }
            for (int64_t e = have; e < 2 * n; e++) h[e] = 0;
            for (int64_t q = 0; q < n; q++) {
                int64_t at = q0 + q;
                dst[at / kp * w * kp + t * kp + at % kp] = h[2 * q] | (uint32_t)h[2 * q + 1] << 16;
            }
        }
}

/* The blocking of one product: the core's block sizes rounded to the
 * microkernel's tile, and how the work is shared among threads. */
typedef struct gemm_shape {
    int64_t M, N, K, mr, nr, mc, kc, nc;
    int64_t row_blocks, splits; /* work items: row_blocks × splits (runs of b's panels) */
    int workers;
    int64_t per_worker;         /* elements: a's packed block (mc × kc), then c's tile (mc × nc) */
} gemm_shape;

/* The pairs of a depth of K elements as a bf16 kernel reads them: rounded
 * up to its gemm_kp (zero pairs past K). */
static int64_t pairs_of(int64_t K, const attn_bf16_kernels *bk) {
    return K > 0 ? ceil_div(ceil_div(K, 2), bk->gemm_kp) * bk->gemm_kp : 0;
}

/* bk: the product is on bf16 pairs (K then counts pairs, kc too). */
static gemm_shape plan(int64_t M, int64_t N, int64_t K, int threads, const attn_ukernels *uk, bool f32,
                       const attn_bf16_kernels *bk) {
    gemm_shape s = {M, N, K, f32 ? uk->sgemm_mr : uk->dgemm_mr, f32 ? uk->sgemm_nr : uk->dgemm_nr, 0, 0, 0, 0, 1, 1, 0};
    if (bk) s.K = K = pairs_of(K, bk), s.mr = bk->gemm_mr, s.nr = bk->gemm_nr;
    if (M <= 0 || N <= 0) return s;
    /* The process's blocks, found once (CPUID is slow, and trapped in a VM),
     * unless a test forces other kernels. A bf16 set runs beside the
     * active f32 set and takes its blocks: a pair is a float's 4 bytes. */
    const attn_blocks *bl = bk || uk == attn_ukernels_active() ? attn_blocks_active() : attn_blocks_for(attn_detect_core(), uk->name);
    s.mc = min64(ceil_div(bl->gemm_mc, s.mr), ceil_div(M, s.mr)) * s.mr;
    s.kc = K > 0 ? min64(bl->gemm_kc, K) : 1;
    if (bk && K > 0) s.kc = (s.kc + bk->gemm_kp - 1) / bk->gemm_kp * bk->gemm_kp; /* K is a multiple of kp too */
    /* b's packed block holds K × nc elements: at most 2^21 (16 MiB of doubles). */
    int64_t nc = ceil_div(bl->gemm_nc, s.nr), cap = ((int64_t)1 << 21) / (K > 0 ? K : 1) / s.nr;
    s.nc = min64(min64(nc, cap > 1 ? cap : 1), ceil_div(N, s.nr)) * s.nr;
    s.row_blocks = ceil_div(M, s.mc);
    /* A small product stays on the calling thread: waking the pool would
     * cost what a second thread saves (the sums do not depend on it). */
    threads = attn_workers_for(threads < 1 ? 1 : threads, (double)M * (double)N * (double)K, ATTN_SMALL_WORK);
    /* Fewer blocks of rows than threads: split b's panels among them too. */
    s.splits = s.row_blocks >= threads ? 1 : min64(ceil_div(threads, s.row_blocks), s.nc / s.nr);
    s.workers = (int)min64(threads, s.row_blocks * s.splits);
    s.per_worker = s.mc * s.kc + s.mc * s.nc;
    return s;
}

typedef struct gemm_job {
    const attn_mat *c, *a, *b, *bias;
    bool accumulate, f32;
    const attn_ukernels *uk;
    const attn_bf16_kernels *bk; /* non-NULL: bf16 pairs (f32 sums), K elements deep */
    int64_t K;
    gemm_shape s;
    int64_t jc, nb;        /* this column block: columns jc .. jc + nb - 1 */
    char *bpack;           /* the block's panels: panel jr holds K × nr */
    char *scratch;         /* per worker: a's packed block, then c's tile */
    size_t es;             /* the sum's element: 4 or 8 bytes */
} gemm_job;

static void pack_b(void *ctx, int64_t jr, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    const attn_mat *b = j->b;
    int64_t col = j->jc + jr * j->s.nr, es = (int64_t)attn_dtype_size(b->dtype);
    if (j->bk) {
        pack_pairs((uint32_t *)(void *)(j->bpack + (size_t)(jr * j->s.K * j->s.nr) * j->es), j->bk,
                   b->base + col * b->cs * es, b->dtype, b->cs, b->rs, min64(j->s.nr, j->jc + j->nb - col), (int)j->s.nr,
                   0, j->s.K, j->K, 1);
        return;
    }
    pack_panel(j->bpack + (size_t)(jr * j->s.K * j->s.nr) * j->es, j->f32, b->base + col * b->cs * es, b->dtype, b->cs,
               b->rs, min64(j->s.nr, j->jc + j->nb - col), (int)j->s.nr, j->s.K);
}

/* The tile c[ic .., j0 ..] (mb × cols) from the sums in t: + bias, + c's
 * old value when accumulating, rounded once to c's dtype. f32 sums take
 * the bias and c in f32, double sums in double. */
static void store_tile(const gemm_job *j, const void *t, int64_t ldt, int64_t ic, int64_t mb, int64_t j0, int64_t cols) {
    const attn_mat *c = j->c, *b = j->bias;
    if (j->f32 && c->dtype == ATTN_F32 && (!b || b->dtype == ATTN_F32)) { /* the layer's case, in plain loops */
        const float *bias = b ? (const float *)(const void *)b->base + j0 * b->cs : NULL;
        for (int64_t i = 0; i < mb; i++) {
            const float *src = (const float *)t + i * ldt;
            float *dst = (float *)(void *)c->base + (ic + i) * c->rs + j0 * c->cs;
            for (int64_t x = 0; x < cols; x++) {
                float v = src[x];
                if (bias) v += bias[x * b->cs];
                if (j->accumulate) v += dst[x * c->cs];
                dst[x * c->cs] = v;
            }
        }
        return;
    }
    for (int64_t i = 0; i < mb; i++)
        for (int64_t x = 0; x < cols; x++) {
            if (j->f32) {
                float s = ((const float *)t)[i * ldt + x];
                if (j->bias) s += (float)attn_mat_get(j->bias, 0, j0 + x);
                if (j->accumulate) s += (float)attn_mat_get(j->c, ic + i, j0 + x);
                attn_mat_set(j->c, ic + i, j0 + x, s);
                continue;
            }
            double s = ((const double *)t)[i * ldt + x];
            if (j->bias) s += attn_mat_get(j->bias, 0, j0 + x);
            if (j->accumulate) s += attn_mat_get(j->c, ic + i, j0 + x);
            attn_mat_set(j->c, ic + i, j0 + x, s);
        }
}

/* Work item: rows ic .. ic + mc of c, against one run of b's panels. */
static void multiply_rows(void *ctx, int64_t item, int worker) {
    const gemm_job *j = ctx;
    const gemm_shape *s = &j->s;
    const attn_mat *a = j->a;
    int64_t panels = ceil_div(j->nb, s->nr), per_split = ceil_div(panels, s->splits);
    int64_t ic = item / s->splits * s->mc, mb = min64(s->mc, s->M - ic), mp = ceil_div(mb, s->mr);
    int64_t jr0 = item % s->splits * per_split, jr1 = min64(panels, jr0 + per_split);
    if (jr0 >= jr1) return;
    int64_t ldt = (jr1 - jr0) * s->nr, es = (int64_t)attn_dtype_size(a->dtype);
    char *apack = j->scratch + (size_t)(worker * s->per_worker) * j->es, *tile = apack + (size_t)(s->mc * s->kc) * j->es;
    memset(tile, 0, j->es * (size_t)(mp * s->mr * ldt));
    for (int64_t pc = 0; pc < s->K; pc += s->kc) {
        int64_t kb = min64(s->kc, s->K - pc);
        for (int64_t ir = 0; ir < mp && j->bk; ir++)
            pack_pairs((uint32_t *)(void *)(apack + (size_t)(ir * kb * s->mr) * j->es), j->bk,
                       a->base + (ic + ir * s->mr) * a->rs * es, a->dtype, a->rs, a->cs, min64(s->mr, mb - ir * s->mr),
                       (int)s->mr, pc, kb, j->K, j->bk->gemm_kp);
        for (int64_t ir = 0; ir < mp && !j->bk; ir++)
            pack_panel(apack + (size_t)(ir * kb * s->mr) * j->es, j->f32,
                       a->base + ((ic + ir * s->mr) * a->rs + pc * a->cs) * es, a->dtype, a->rs, a->cs,
                       min64(s->mr, mb - ir * s->mr), (int)s->mr, kb);
        for (int64_t jr = jr0; jr < jr1; jr++)
            for (int64_t ir = 0; ir < mp; ir++) {
                size_t t = (size_t)(ir * s->mr * ldt + (jr - jr0) * s->nr), ap = (size_t)(ir * kb * s->mr),
                       bp = (size_t)(jr * s->K * s->nr + pc * s->nr);
                if (j->bk)
                    j->bk->gemm((float *)(void *)tile + t, ldt, (const uint32_t *)(void *)apack + ap,
                                (const uint32_t *)(void *)j->bpack + bp, kb);
                else if (j->f32)
                    j->uk->sgemm((float *)(void *)tile + t, ldt, (const float *)(void *)apack + ap,
                                 (const float *)(void *)j->bpack + bp, kb);
                else
                    j->uk->dgemm((double *)(void *)tile + t, ldt, (const double *)(void *)apack + ap,
                                 (const double *)(void *)j->bpack + bp, kb);
            }
    }
    store_tile(j, tile, ldt, ic, mb, j->jc + jr0 * s->nr, min64(j->nb, jr1 * s->nr) - jr0 * s->nr);
}

/* The product on a planned shape: b packed here into bpack block by block,
 * or read from `packed` (all of b's panels). */
static void run(gemm_job *j, const void *packed, int threads) {
    for (j->jc = 0; j->jc < j->s.N; j->jc += j->s.nc) {
        j->nb = min64(j->s.nc, j->s.N - j->jc);
        if (packed) j->bpack = (char *)packed + (size_t)(j->jc * j->s.K) * j->es;
        else attn_parallel_for(attn_workers_for(threads, (double)j->nb * (double)j->s.K, ATTN_SMALL_WORK), ceil_div(j->nb, j->s.nr), pack_b, j);
        attn_parallel_for(j->s.workers, j->s.row_blocks * j->s.splits, multiply_rows, j);
    }
}

static size_t scratch_bytes(bool f32, int64_t M, int64_t N, int64_t K, int threads, const attn_ukernels *uk,
                            const attn_bf16_kernels *bk, bool b_packed) {
    if (!uk) uk = attn_ukernels_active();
    gemm_shape s = plan(M, N, K, threads, uk, f32, bk);
    if (M <= 0 || N <= 0) return 0;
    size_t n = (size_t)(s.per_worker * s.workers) + (b_packed ? 0 : (size_t)(s.nc * (s.K > 0 ? s.K : 1)));
    return n * (f32 ? sizeof(float) : sizeof(double));
}

size_t attn_gemm_scratch_bytes(bool f32, int64_t M, int64_t N, int64_t K, int threads, const attn_ukernels *uk,
                               bool b_packed) {
    return scratch_bytes(f32, M, N, K, threads, uk, NULL, b_packed);
}

size_t attn_gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, int threads, const attn_bf16_kernels *bk,
                                    bool b_packed) {
    return scratch_bytes(true, M, N, K, threads, NULL, bk, b_packed);
}

/* One product in either precision: the scratch (the workers' blocks, then
 * b's packed block unless b came packed) is the caller's or malloc's. */
static bool multiply(const attn_mat *c, const attn_mat *a, const attn_mat *b, const void *b_packed, const attn_mat *bias,
                     bool accumulate, int threads, const attn_ukernels *uk, void *scratch, bool f32,
                     const attn_bf16_kernels *bk) {
    if (!uk) uk = attn_ukernels_active();
    gemm_job j = {c, a, b, bias, accumulate, f32, uk, bk, a->cols, plan(a->rows, c->cols, a->cols, threads, uk, f32, bk),
                  0, 0, NULL, NULL, f32 ? sizeof(float) : sizeof(double)};
    if (j.s.M <= 0 || j.s.N <= 0) return true;
    char *mem = scratch ? scratch : malloc(scratch_bytes(f32, j.s.M, j.s.N, a->cols, threads, uk, bk, b_packed));
    if (!mem) return false;
    j.scratch = mem;
    if (!b_packed) j.bpack = mem + (size_t)(j.s.per_worker * j.s.workers) * j.es;
    run(&j, b_packed, threads);
    if (!scratch) free(mem);
    return true;
}

bool attn_gemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const attn_mat *bias, bool accumulate,
               int threads, const attn_ukernels *uk, void *scratch) {
    return multiply(c, a, b, NULL, bias, accumulate, threads, uk, scratch, false, NULL);
}

bool attn_sgemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const float *b_packed, const attn_mat *bias,
                bool accumulate, int threads, const attn_ukernels *uk, void *scratch) {
    return multiply(c, a, b, b_packed, bias, accumulate, threads, uk, scratch, true, NULL);
}

bool attn_gemm_bf16(const attn_mat *c, const attn_mat *a, const attn_mat *b, const uint32_t *b_packed,
                    const attn_mat *bias, bool accumulate, int threads, const attn_bf16_kernels *bk, void *scratch) {
    return multiply(c, a, b, b_packed, bias, accumulate, threads, NULL, scratch, true, bk);
}

int64_t attn_gemm_bf16_packed_pairs(int64_t K, int64_t N, const attn_bf16_kernels *bk) {
    int64_t n = ceil_div(N > 0 ? N : 1, bk->gemm_nr) * bk->gemm_nr, k = K > 0 ? pairs_of(K, bk) : 1;
    return n > INT64_MAX / k ? -1 : n * k;
}

void attn_gemm_bf16_pack_b(uint32_t *dst, const attn_mat *b, const attn_bf16_kernels *bk, int threads) {
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.b = b, j.f32 = true, j.bk = bk, j.K = b->rows, j.es = sizeof(uint32_t), j.s.K = pairs_of(b->rows, bk);
    j.s.nr = bk->gemm_nr, j.jc = 0, j.nb = b->cols, j.bpack = (char *)dst;
    if (b->cols > 0) attn_parallel_for(threads, ceil_div(b->cols, bk->gemm_nr), pack_b, &j);
}

int64_t attn_sgemm_packed_floats(int64_t K, int64_t N, int nr) {
    int64_t n = ceil_div(N > 0 ? N : 1, nr) * nr, k = K > 0 ? K : 1;
    return n > INT64_MAX / k ? -1 : n * k;
}

void attn_sgemm_pack_b(float *dst, const attn_mat *b, int nr, int threads) {
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.b = b, j.f32 = true, j.es = sizeof(float), j.s.K = b->rows, j.s.nr = nr;
    j.jc = 0, j.nb = b->cols, j.bpack = (char *)dst;
    if (b->cols > 0) attn_parallel_for(threads, ceil_div(b->cols, nr), pack_b, &j);
}
