/* gemm.c -- the layer's matrix products in double, blocked as BLIS blocks
 * them. For each block of nc columns of b, b is packed once (panels of nr
 * columns over all K, converted to double); then each work item takes mc
 * rows of a (and a run of b's panels), packs a kc-deep block of a at a time
 * into panels of mr rows, and runs the microkernel over every (a panel,
 * b panel) pair into a double tile of c. The tile goes to c once, after the
 * last depth block: an f32 c is rounded once, never between blocks. The
 * microkernel's panel of b (kc × nr) stays in L1 while it meets each panel
 * of a, which stays in L2. */
#include "kernels/gemm.h"

#include <stdlib.h>
#include <string.h>

/* dst[p * w + t] = X(t, p) for t < count and p < k, and 0 for count <= t < w,
 * where X(t, p) is the element at base + t·st + p·sp (in elements of dt). */
static void pack_panel(double *dst, const char *base, attn_dtype dt, int64_t st, int64_t sp, int64_t count, int w,
                       int64_t k) {
    for (int64_t p = 0; p < k; p++) {
        double *d = dst + p * w;
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

typedef struct gemm_job {
    const attn_mat *c, *a, *b, *bias;
    bool accumulate;
    const attn_ukernels *uk;
    int64_t M, N, K, mr, nr, mc, kc;
    int64_t jc, nb;        /* this column block: columns jc .. jc + nb - 1 */
    int64_t splits;        /* work items per block of rows: runs of b's panels */
    double *bpack;         /* the block's panels: panel jr holds K × nr */
    double *scratch;       /* per worker: a's packed block (mc × kc), then c's tile */
    int64_t per_worker;    /* doubles */
} gemm_job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void pack_b(void *ctx, int64_t jr, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    const attn_mat *b = j->b;
    int64_t col = j->jc + jr * j->nr, es = (int64_t)attn_dtype_size(b->dtype);
    pack_panel(j->bpack + jr * j->K * j->nr, b->base + col * b->cs * es, b->dtype, b->cs, b->rs,
               min64(j->nr, j->jc + j->nb - col), (int)j->nr, j->K);
}

/* The tile c[ic .., jc + jr0·nr ..] (mb × cols) from the double sums in t. */
static void store_tile(const gemm_job *j, const double *t, int64_t ldt, int64_t ic, int64_t mb, int64_t j0, int64_t cols) {
    for (int64_t i = 0; i < mb; i++)
        for (int64_t x = 0; x < cols; x++) {
            double s = t[i * ldt + x];
            if (j->bias) s += attn_mat_get(j->bias, 0, j0 + x);
            if (j->accumulate) s += attn_mat_get(j->c, ic + i, j0 + x);
            attn_mat_set(j->c, ic + i, j0 + x, s);
        }
}

/* Work item: rows ic .. ic + mc of c, against one run of b's panels. */
static void multiply_rows(void *ctx, int64_t item, int worker) {
    const gemm_job *j = ctx;
    const attn_mat *a = j->a;
    int64_t panels = ceil_div(j->nb, j->nr), per_split = ceil_div(panels, j->splits);
    int64_t ic = item / j->splits * j->mc, mb = min64(j->mc, j->M - ic), mp = ceil_div(mb, j->mr);
    int64_t jr0 = item % j->splits * per_split, jr1 = min64(panels, jr0 + per_split);
    if (jr0 >= jr1) return;
    int64_t ldt = (jr1 - jr0) * j->nr, es = (int64_t)attn_dtype_size(a->dtype);
    double *apack = j->scratch + worker * j->per_worker, *tile = apack + j->mc * j->kc;
    memset(tile, 0, sizeof(double) * (size_t)(mp * j->mr * ldt));
    for (int64_t pc = 0; pc < j->K; pc += j->kc) {
        int64_t kb = min64(j->kc, j->K - pc);
        for (int64_t ir = 0; ir < mp; ir++)
            pack_panel(apack + ir * kb * j->mr, a->base + ((ic + ir * j->mr) * a->rs + pc * a->cs) * es, a->dtype, a->rs,
                       a->cs, min64(j->mr, mb - ir * j->mr), (int)j->mr, kb);
        for (int64_t jr = jr0; jr < jr1; jr++)
            for (int64_t ir = 0; ir < mp; ir++)
                j->uk->dgemm(tile + ir * j->mr * ldt + (jr - jr0) * j->nr, ldt, apack + ir * kb * j->mr,
                             j->bpack + jr * j->K * j->nr + pc * j->nr, kb);
    }
    store_tile(j, tile, ldt, ic, mb, j->jc + jr0 * j->nr, min64(j->nb, jr1 * j->nr) - jr0 * j->nr);
}

bool attn_gemm(const attn_mat *c, const attn_mat *a, const attn_mat *b, const attn_mat *bias, bool accumulate,
               int threads, const attn_ukernels *uk) {
    gemm_job j = {c, a, b, bias, accumulate, uk ? uk : attn_ukernels_active(), a->rows, b->cols, a->cols, 0, 0, 0, 0,
                  0, 0, 1, NULL, NULL, 0};
    if (j.M <= 0 || j.N <= 0) return true;
    const attn_blocks *bl = attn_blocks_for(attn_detect_core(), j.uk->name);
    j.mr = j.uk->dgemm_mr, j.nr = j.uk->dgemm_nr;
    j.mc = min64(ceil_div(bl->gemm_mc, j.mr), ceil_div(j.M, j.mr)) * j.mr;
    j.kc = j.K > 0 ? min64(bl->gemm_kc, j.K) : 1;
    /* b's packed block holds K × nc doubles: at most 2^21 (16 MiB). */
    int64_t nc = ceil_div(bl->gemm_nc, j.nr), cap = ((int64_t)1 << 21) / (j.K > 0 ? j.K : 1) / j.nr;
    nc = min64(min64(nc, cap > 1 ? cap : 1), ceil_div(j.N, j.nr)) * j.nr;
    int64_t row_blocks = ceil_div(j.M, j.mc);
    if (threads < 1) threads = 1;
    /* Fewer blocks of rows than threads: split b's panels among them too. */
    j.splits = row_blocks >= threads ? 1 : min64(ceil_div(threads, row_blocks), nc / j.nr);
    int workers = (int)min64(threads, row_blocks * j.splits);
    j.per_worker = j.mc * j.kc + j.mc * nc;
    j.bpack = malloc(sizeof(double) * (size_t)(nc * (j.K > 0 ? j.K : 1)));
    j.scratch = malloc(sizeof(double) * (size_t)(j.per_worker * workers));
    if (!j.bpack || !j.scratch) {
        free(j.bpack), free(j.scratch);
        return false;
    }
    for (j.jc = 0; j.jc < j.N; j.jc += nc) {
        j.nb = min64(nc, j.N - j.jc);
        attn_parallel_for(threads, ceil_div(j.nb, j.nr), pack_b, &j);
        attn_parallel_for(workers, row_blocks * j.splits, multiply_rows, &j);
    }
    free(j.bpack), free(j.scratch);
    return true;
}
