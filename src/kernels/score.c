/* mask.c -- the one place where the f32 kernels (flash.c, decode.c) turn
 * q·k·scale into scores: padding keys, the causal limit, the bool mask and
 * the additive float mask. */
#include "fast/fast.h"
#include "kernels/ukernel.h"

void attn_mask_scores(const attn_ukernels *uk, float *s, int64_t lds, const attn_problem *p,
                      int64_t i0, int64_t rows, int64_t j0, int64_t nc, int64_t nc_pad,
                      bool causal_block, bool *bad) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * lds;
        int64_t i = i0 + r;
        for (int64_t c = nc; c < nc_pad; c++) row[c] = -INFINITY;
        if (causal_block) {
            for (int64_t c = attn_keys_seen(p, i, j0, nc); c < nc; c++) row[c] = -INFINITY;
        }
        if (!p->mask.base) continue;
        const attn_mat *m = &p->mask;
        if (m->dtype == ATTN_BOOL) {
            const unsigned char *mr = (const unsigned char *)m->base + i * m->rs + j0 * m->cs;
            if (m->cs == 1) uk->mask_bool(row, mr, nc);
            else
                for (int64_t c = 0; c < nc; c++)
                    if (!mr[c * m->cs]) row[c] = -INFINITY;
        } else if (m->cs == 1) {
            const float *mr = (const float *)(const void *)m->base + i * m->rs + j0;
            if (!uk->mask_add(row, mr, nc)) *bad = true;
        } else {
            const float *mr = (const float *)(const void *)m->base + i * m->rs + j0 * m->cs;
            for (int64_t c = 0; c < nc; c++) {
                float x = mr[c * m->cs];
                /* -inf masks; +inf or NaN sends the item to the exact kernel. */
                if (x != x || x == INFINITY) *bad = true;
                row[c] += x;
            }
        }
    }
}
