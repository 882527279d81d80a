/* empty.c -- calls with a dimension of 0 (attn.h, "Dimensions of 0"), as
 * PyTorch takes them: no queries (L = 0), no keys (S = 0) or a batch
 * dimension of 0. One set of rules for every entry point that takes them:
 * where a 0 may stand (attn_empty_check), the call checked as the same call
 * with each 0 read as 1 (the entry point's own measuring call on the
 * `one` tensors this gives, so dtypes, ranks, options and broadcasting
 * fail at size 0 as they fail at size 1), then only what PyTorch's result
 * has elements for is written: out 0 for rows that see no key, the
 * gradients 0. No kernel, allocator or size ever sees the 0. */
#include "sdpa/sdpa.h"

/* The call's dimensions a tensor's positions (counted from the right, 1 the
 * last) stand for: AX_NONE where a 0 is never taken (E, Ev, the heads),
 * else L, S, or the output's batch position p (4 and on). */
enum { AX_NONE = 0, AX_L = 1, AX_S = 2 };

static int axis_of(attn_part part, int pos) {
    switch (part) {
    case ATTN_PART_Q: case ATTN_PART_OUT: return pos == 2 ? AX_L : pos >= 4 ? pos : AX_NONE;
    case ATTN_PART_KV: return pos == 2 ? AX_S : pos >= 4 ? pos : AX_NONE;
    case ATTN_PART_MASK: case ATTN_PART_WEIGHTS: return pos == 1 ? AX_S : pos == 2 ? AX_L : pos >= 4 ? pos : AX_NONE;
    default: return pos == 1 ? AX_L : pos >= 3 ? pos + 1 : AX_NONE; /* lse: out's shape less Ev */
    }
}

static int64_t dim_from_right(const attn_tensor *t, int pos) { return t->shape[t->rank - pos]; }

static attn_status refuse(const attn_empty_arg *a, const char *why, attn_error *err) {
    char sh[128];
    attn_format_shape(sh, sizeof sh, a->t->rank, a->t->shape);
    return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s; %s", a->name, sh, why);
}

/* The arguments' 0s where they may stand, zero[] saying which of L, S and
 * the batch positions are 0. */
static attn_status check_zeros(const attn_empty_arg *args, int n, const bool *zero, attn_error *err) {
    for (int i = 0; i < n; i++) {
        const attn_empty_arg *a = &args[i];
        if (!a->t) continue;
        bool output = a->part >= ATTN_PART_OUT;
        for (int pos = 1; pos <= a->t->rank; pos++) {
            int64_t d = dim_from_right(a->t, pos);
            bool want = zero[axis_of(a->part, pos)];
            if (a->like) { /* a gradient: its tensor's shape, 0s and all */
                if (a->like->rank == a->t->rank && (d == 0) != (dim_from_right(a->like, pos) == 0)) {
                    char sh[128], want_sh[128];
                    attn_format_shape(sh, sizeof sh, a->t->rank, a->t->shape);
                    attn_format_shape(want_sh, sizeof want_sh, a->like->rank, a->like->shape);
                    return attn_fail(err, ATTN_ERR_SHAPE, "%s has shape %s but it must be %s, its tensor's", a->name,
                                     sh, want_sh);
                }
            } else if (output ? (d == 0) != want : d == 0 && !want) {
                return refuse(a, output ? "an output has its 0s exactly where the result does: L = 0, a batch "
                                          "dimension of 0 in q, k or v, and for the weights S = 0"
                                        : "a dimension of 0 is taken only for L (no queries), S (no keys) or a "
                                          "batch dimension, never for the heads, E or Ev, and in a mask only "
                                          "where q, k or v has it",
                              err);
            } else if (!output && want && d > 1) {
                return refuse(a, "where q, k or v has a dimension of 0, the others and the mask have 0 or 1 there",
                              err);
            }
        }
    }
    return ATTN_OK;
}

/* t with each dimension of 0 read as 1: a tensor with no element is
 * neither read nor written, so it stands in with NULL data (a measuring
 * call takes that, and no overlap is found with it) and any strides. */
static attn_tensor zeros_as_ones(const attn_tensor *t) {
    attn_tensor c = *t;
    if (attn_tensor_numel(t) != 0) return c;
    c.data = NULL;
    for (int d = c.rank - 1; d >= 0; d--) {
        c.shape[d] += c.shape[d] == 0;
        c.strides[d] = d == c.rank - 1 ? 1 : c.strides[d + 1] * c.shape[d + 1]; /* small: at most q's, k's, v's */
    }
    return c;
}

attn_status attn_empty_check(attn_empty *e, attn_empty_arg *args, int n, attn_error *err) {
    memset(e, 0, sizeof *e);
    bool zero[ATTN_MAX_RANK + 2] = {false}, some = false; /* by axis (AX_*, batch positions) */
    for (int i = 0; i < n; i++) {
        const attn_tensor *t = args[i].t;
        if (!t) continue;
        /* A bad rank, a negative dimension, or dimensions whose product
         * overflows (0 beside them or not): the usual checks say what is
         * wrong (read as 1, a 0 would leave that product's overflow, and
         * the call on the stand-ins would find the same 0 again). */
        if (t->rank < 1 || t->rank > ATTN_MAX_RANK || attn_tensor_numel(t) < 0) return ATTN_OK;
        for (int d = 0; d < t->rank; d++) some |= t->shape[d] == 0;
    }
    if (!some) return ATTN_OK;
    for (int i = 0; i < n; i++) {
        const attn_empty_arg *a = &args[i];
        if (!a->t || a->like || (a->part != ATTN_PART_Q && a->part != ATTN_PART_KV)) continue;
        for (int pos = 1; pos <= a->t->rank; pos++) zero[axis_of(a->part, pos)] |= dim_from_right(a->t, pos) == 0;
    }
    zero[AX_NONE] = false;
    e->no_keys = zero[AX_S];
    e->no_output = zero[AX_L];
    for (int p = 4; p <= ATTN_MAX_RANK; p++) e->no_output |= zero[p];
    /* Without a 0 that is taken (a 0 at E, Ev or the heads alone), the 0s
     * are refused here too, with the message that says where one may stand. */
    attn_status st = check_zeros(args, n, zero, err);
    if (st || (!e->no_output && !e->no_keys)) return st;
    for (int i = 0; i < n; i++)
        if (args[i].t) args[i].one = zeros_as_ones(args[i].t);
    e->any = true;
    return ATTN_OK;
}

attn_status attn_empty_data(const attn_empty_arg *args, int n, attn_error *err) {
    for (int i = 0; i < n; i++)
        if (args[i].t && !args[i].t->data && attn_tensor_numel(args[i].t) > 0)
            return attn_fail(err, ATTN_ERR_NULL, "%s has NULL data", args[i].name);
    return ATTN_OK;
}

void attn_fill(attn_tensor *t, double x) {
    if (attn_tensor_numel(t) <= 0) return;
    attn_tensor src = *t; /* x, broadcast to t's shape */
    src.data = &x, src.dtype = ATTN_F64;
    for (int d = 0; d < src.rank; d++) src.strides[d] = 0;
    attn_tensor_convert(t, &src, NULL); /* checked by the call's plan: cannot fail */
}

double attn_no_key_lse(const attn_tensor *sinks, int64_t h) {
    attn_problem p; /* a sink's (m, l) through the one place rows start */
    memset(&p, 0, sizeof p);
    if (sinks) {
        attn_mat m = {(char *)sinks->data, sinks->dtype, 1, sinks->shape[0], 0, sinks->strides[0]};
        p.has_sink = true, p.sink = attn_mat_get(&m, 0, h);
    }
    double m, l;
    attn_softmax_start(&p, &m, &l);
    return attn_lse(m, l);
}

void attn_write_no_keys(attn_tensor *out, attn_tensor *lse, const attn_tensor *sinks) {
    attn_fill(out, 0.0);
    if (!lse || attn_tensor_numel(lse) <= 0) return;
    int hd = lse->rank - 2; /* (..., Hq, L): the heads' dimension */
    if (hd < 0) { /* rank 1: one head */
        attn_fill(lse, attn_no_key_lse(sinks, 0));
        return;
    }
    for (int64_t h = 0; h < lse->shape[hd]; h++) {
        attn_tensor one = *lse; /* head h's rows */
        one.data = (char *)lse->data + h * lse->strides[hd] * (int64_t)attn_dtype_size(lse->dtype);
        one.shape[hd] = 1;
        attn_fill(&one, attn_no_key_lse(sinks, h));
    }
}

void attn_empty_report(const char *call, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                       const attn_tensor *lse, const attn_tensor *weights, const attn_paged_rows *k_pages,
                       const attn_paged_rows *v_pages, const attn_sdpa_options *o, double t0) {
    if (!attn_verbose_on()) return;
    attn_slices shown; /* the caller's tensors, as a kernel's line shows its plan's */
    memset(&shown, 0, sizeof shown);
    shown.q = q, shown.k = k, shown.v = v, shown.lse = lse, shown.weights = weights;
    shown.k_pages = k_pages, shown.v_pages = v_pages;
    int64_t rotary_dim;
    if (o->rope) /* checked by the call on its stand-ins: rope=halves or interleaved, as that call's line says */
        shown.has_rope = !attn_rope_read_options(&shown.rope, &rotary_dim, o->rope, q->shape[q->rank - 1], "options->rope", NULL);
    /* No kernel ran and no thread was started: the call's own thread wrote what it wrote. */
    attn_run_info info = {.kernel = "empty", .isa = "-", .threads = 1, .threads_given = 1, .side_by_side = 1,
                          .heads_per_item = 1};
    attn_verbose_report(call, &info, &shown, o, attn_now_ms() - t0);
}
