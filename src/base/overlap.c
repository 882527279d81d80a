/* overlap.c -- whether two strided tensors share memory, and the check every
 * public function makes with it: an output owns its memory, shared with no
 * other output and no input (base.h).
 *
 * Comparing the two byte ranges [first, last] alone would refuse views that
 * interleave without touching, which callers make all the time: dq, dk and
 * dv as slices of one packed (N, L, 3, H, D) gradient, or the three thirds
 * of a packed bias. So the test is exact. Each tensor becomes a list of
 * dimensions (count, byte stride > 0), outermost first, over a block of
 * contiguous bytes; then the two are compared by splitting the outermost
 * dimension and keeping only the pieces whose byte ranges still meet. When
 * both tensors step by the same outer stride, only the difference of the
 * two indices matters, so the packed layouts above are decided in a few
 * steps. Layouts that would take more than WORK steps are called
 * overlapping: a caller is then told so rather than risk a wrong answer. */
#include "base/base.h"

#include <stdint.h>

enum { WORK = 1 << 14 };

/* A tensor's bytes: base + Σ i_d · stride[d] + [0, block), 0 <= i_d < count[d],
 * strides in bytes, positive and descending; end[d] is the span of the
 * dimensions d.. and the block, from the first byte to past the last. */
typedef struct extent {
    uintptr_t base;
    int rank;
    int64_t count[ATTN_MAX_RANK], stride[ATTN_MAX_RANK], end[ATTN_MAX_RANK + 1];
} extent;

/* t's extent; false when t holds no element, or is no view at all (a rank,
 * shape or stride whose byte offsets do not fit in int64: the call refuses
 * it by its own checks, or ignores it, as it ignores q_proj_weight next to
 * in_proj_weight). Dimensions of one element or stride 0 add no bytes; a
 * negative stride walks the same bytes from the other end; dimensions that
 * continue each other merge, and contiguous innermost ones join the block. */
static bool extent_of(extent *x, const attn_tensor *t) {
    attn_tensor bytes; /* quantized rows: the bytes they cover */
    if (attn_dtype_quantized(t->dtype)) {
        if (attn_quant_bytes(t, &bytes, "", NULL)) return false;
        t = &bytes;
    }
    if (attn_tensor_numel(t) <= 0 || attn_check_extent(t, "", NULL) != ATTN_OK)
        return false; /* empty, or no view; else every product below fits */
    int64_t es = (int64_t)attn_dtype_size(t->dtype), block = es;
    x->base = (uintptr_t)t->data, x->rank = 0;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] == 1 || t->strides[d] == 0) continue;
        int64_t s = t->strides[d] * es; /* fits: checked above */
        if (s < 0) x->base -= (uintptr_t)(-s * (t->shape[d] - 1)), s = -s;
        int r = x->rank++; /* insertion sort, descending strides */
        for (; r > 0 && x->stride[r - 1] < s; r--) x->count[r] = x->count[r - 1], x->stride[r] = x->stride[r - 1];
        x->count[r] = t->shape[d], x->stride[r] = s;
    }
    int r = 0;
    for (int d = 0; d < x->rank; d++) { /* merge d into r when r continues it */
        int64_t run;
        if (r > 0 && attn_mul_i64(x->stride[d], x->count[d], &run) && x->stride[r - 1] == run) {
            x->count[r - 1] *= x->count[d], x->stride[r - 1] = x->stride[d];
            continue;
        }
        x->count[r] = x->count[d], x->stride[r] = x->stride[d], r++;
    }
    while (r > 0 && x->stride[r - 1] == block) block *= x->count[--r];
    x->rank = r;
    x->end[r] = block;
    for (int d = r - 1; d >= 0; d--) x->end[d] = x->end[d + 1] + x->stride[d] * (x->count[d] - 1);
    return true;
}

/* floor(a / b) and ceil(a / b) for b > 0. */
static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 && a > 0); }

/* Whether dimensions da.. of x at byte offset a meet dimensions db.. of y at
 * offset b (offsets from a common origin). */
static bool meet(const extent *x, int da, int64_t a, const extent *y, int db, int64_t b, int64_t *work) {
    if (a + x->end[da] <= b || b + y->end[db] <= a) return false;
    if (da == x->rank && db == y->rank) return true; /* two blocks whose ranges meet */
    if (--*work < 0) return true;                    /* undecided: say they may */
    int64_t sx = da < x->rank ? x->stride[da] : 0, sy = db < y->rank ? y->stride[db] : 0;
    if (sx < sy) return meet(y, db, b, x, da, a, work);
    /* Split x's outer dimension: piece i lies at a + i·sx with span
     * end[da + 1]; keep the i whose range meets [lo, hi). When y steps by the
     * same stride, pieces (i, j) meet as (i - j, 0) do: split both at once
     * and keep the differences. */
    bool both = sy == sx;
    int64_t lo = b, hi = b + (both ? y->end[db + 1] : y->end[db]), inner = x->end[da + 1];
    int64_t first = floor_div(lo - inner - a, sx) + 1, last = ceil_div(hi - a, sx) - 1;
    int64_t min = both ? 1 - y->count[db] : 0, max = x->count[da] - 1;
    first = first > min ? first : min, last = last < max ? last : max;
    for (int64_t i = first; i <= last; i++)
        if (meet(x, da + 1, a + i * sx, y, db + both, b, work)) return true;
    return false;
}

/* Whether the bytes of two extents meet. */
static bool extents_meet(const extent *x, const extent *y) {
    /* Far apart: no offset between them need fit in 64 bits. */
    if (x->base >= y->base ? x->base - y->base >= (uintptr_t)y->end[0] : y->base - x->base >= (uintptr_t)x->end[0])
        return false;
    int64_t work = WORK, off = x->base >= y->base ? (int64_t)(x->base - y->base) : -(int64_t)(y->base - x->base);
    return meet(x, 0, off, y, 0, 0, &work);
}

bool attn_tensors_overlap(const attn_tensor *a, const attn_tensor *b) {
    extent x, y;
    if (!a || !b || !a->data || !b->data || !extent_of(&x, a) || !extent_of(&y, b)) return false;
    return extents_meet(&x, &y);
}

/* Whether two different index vectors of x, at dimensions d.. and byte
 * offset a from one another (`moved`: they differ in an outer dimension),
 * meet: meet() of x with itself, where the one stride is always shared and
 * only the differences of the indices matter, minus the difference 0 all
 * the way down, which is an element meeting itself. */
static bool meet_self(const extent *x, int d, int64_t a, bool moved, int64_t *work) {
    if (a + x->end[d] <= 0 || x->end[d] <= a) return false;
    if (d == x->rank) return moved;
    if (--*work < 0) return true; /* undecided: say they may (the caller sees *work < 0) */
    int64_t s = x->stride[d], inner = x->end[d + 1];
    int64_t first = floor_div(-inner - a, s) + 1, last = ceil_div(inner - a, s) - 1;
    int64_t min = 1 - x->count[d], max = x->count[d] - 1;
    first = first > min ? first : min, last = last < max ? last : max;
    for (int64_t i = first; i <= last; i++)
        if (meet_self(x, d + 1, a + i * s, moved || i != 0, work)) return true;
    return false;
}

int attn_tensor_overlaps_itself(const attn_tensor *t) {
    extent x;
    if (!t || !extent_of(&x, t)) return 0;
    int64_t work = WORK;
    return meet_self(&x, 0, 0, false, &work) ? (work < 0 ? -1 : 1) : 0;
}

bool attn_same_view(const attn_tensor *a, const attn_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

attn_status attn_check_disjoint(const attn_tensor *a, const char *a_name, const attn_tensor *b, const char *b_name,
                                attn_error *err) {
    if (!attn_tensors_overlap(a, b)) return ATTN_OK;
    return attn_fail(err, ATTN_ERR_STRIDE,
                     "%s and %s overlap in memory: an output may share its memory with no other output and no input",
                     a_name ? a_name : "a tensor", b_name ? b_name : "another");
}

int attn_named_options(attn_named *list, int n, int cap, const attn_sdpa_options *o) {
    const attn_named all[ATTN_OPTION_TENSORS] = {{o->mask, "mask"}, {o->alibi_slopes, "alibi_slopes"},
                                                 {o->sinks, "sinks"}, {o->k_descale, "k_descale"},
                                                 {o->v_descale, "v_descale"}};
    if (n < 0 || n > cap || cap - n < ATTN_OPTION_TENSORS) return -1;
    for (int i = 0; i < ATTN_OPTION_TENSORS; i++) list[n + i] = all[i];
    return n + ATTN_OPTION_TENSORS;
}

/* A list that attn_named_options could not fill: refused rather than
 * checked short. */
static attn_status short_list(attn_error *err) {
    return attn_fail(err, ATTN_ERR_ARGUMENT, "a call's list of tensors to check is too short for them "
                     "(a fault of the library, not of the arguments)");
}

attn_status attn_check_no_overlap(const attn_named *outs, int n_outs, const attn_named *ins, int n_ins,
                                  attn_error *err) {
    if (n_outs < 0 || n_ins < 0) return short_list(err);
    attn_status st;
    for (int i = 0; i < n_outs; i++)
        for (int j = 0; outs[i].t && j < i + n_ins; j++) { /* the outputs before it, then every input */
            const attn_named *other = j < i ? &outs[j] : &ins[j - i];
            if ((st = attn_check_disjoint(outs[i].t, outs[i].name, other->t, other->name, err))) return st;
        }
    return ATTN_OK;
}

attn_status attn_check_workspace(const void *workspace, size_t bytes, const attn_named *outs, int n_outs,
                                 const attn_named *ins, int n_ins, attn_error *err) {
    if (n_outs < 0 || n_ins < 0) return short_list(err);
    if (!workspace || bytes == 0) return ATTN_OK;
    /* The workspace as one block of bytes, cut where it would run past the
     * end of the address space or past 2^62 bytes (no real buffer is that
     * large): every offset meet() adds then fits in 64 bits. */
    extent ws = {.base = (uintptr_t)workspace, .rank = 0};
    uintptr_t room = UINTPTR_MAX - ws.base;
    uint64_t n = bytes < room ? (uint64_t)bytes : (uint64_t)room;
    ws.end[0] = (int64_t)(n < (UINT64_C(1) << 62) ? n : UINT64_C(1) << 62);
    for (int i = 0; i < n_outs + n_ins; i++) {
        const attn_named *t = i < n_outs ? &outs[i] : &ins[i - n_outs];
        extent x;
        if (!t->t || !t->t->data || !extent_of(&x, t->t) || !extents_meet(&ws, &x)) continue;
        return attn_fail(err, ATTN_ERR_STRIDE,
                         "the workspace and %s overlap in memory: the call writes its scratch into the workspace, "
                         "which may share no byte with the call's tensors",
                         t->name ? t->name : "a tensor");
    }
    return ATTN_OK;
}
