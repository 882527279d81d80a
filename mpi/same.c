/* same.c -- what every rank's call must hold alike, as attn_mpi_same's
 * values: the layout, q's, k's and v's presence, ranks, dtypes and
 * dimensions but their rows, and every attention option (the mask's shape
 * but its rows, the values of ALiBi's slopes and the sinks, RoPE's
 * fields). A rank that alone has other heads or another Ev would size its
 * messages and buffers by them; one with another scale or causal mode
 * would compute another attention and report success.
 *
 * Not here, as each rank's own: the rows (attn_ring_lengths checks them
 * against the layout), the mask's rows, the outputs (checked against the
 * rank's own q, k and v, so alike when those are), whether lse or dq is
 * wanted, the timeout, the stats and the context's threads. The list has
 * the same length on every rank (a tensor always takes ATTN_MAX_RANK
 * dimension slots), so that the ranks compare value with value. */
#include "ring.h"

#include <stdio.h>
#include <string.h>

enum { MAX_VALUES = 80, NAME_SIZE = 64 };

typedef struct values {
    attn_mpi_value v[MAX_VALUES];
    char names[MAX_VALUES][NAME_SIZE];
    int n;
} values;

static void add(values *vs, attn_mpi_kind kind, attn_status code, int64_t value, double real, const char *name) {
    if (vs->n == MAX_VALUES) return; /* cannot happen: the list is fixed, and shorter */
    snprintf(vs->names[vs->n], NAME_SIZE, "%s", name);
    vs->v[vs->n] = (attn_mpi_value){vs->names[vs->n], kind, code, value, real};
    vs->n++;
}

static void option(values *vs, attn_mpi_kind kind, int64_t value, double real, const char *name) {
    add(vs, kind, ATTN_ERR_OPTION, value, real, name);
}

/* name + " what", possessive: "q's dtype", "alibi_slopes' dtype". */
static const char *of(char out[NAME_SIZE], const char *name, const char *what) {
    size_t len = strlen(name);
    snprintf(out, NAME_SIZE, "%s'%s %s", name, len && name[len - 1] == 's' ? "" : "s", what);
    return out;
}

/* A tensor's description: given, rank, dtype, and each dimension but the
 * rows (the second to last, when has_rows), named by its role, `last` the
 * last one's. code 0 gives each its own status (an operand's), else each
 * is code. */
static void tensor(values *vs, const char *name, const attn_tensor *t, bool has_rows, const char *last, attn_status code) {
    char buf[NAME_SIZE], what[32];
    bool given = t && t->data;
    int rank = given ? t->rank : 0;
    bool dims = rank >= 0 && rank <= ATTN_MAX_RANK; /* else a wrong rank, which the rank's own checks report */
    add(vs, ATTN_MPI_GIVEN, code ? code : ATTN_ERR_NULL, given, 0, name);
    add(vs, ATTN_MPI_INTEGER, code ? code : ATTN_ERR_RANK, rank, 0, of(buf, name, "rank"));
    add(vs, ATTN_MPI_DTYPE, code ? code : ATTN_ERR_DTYPE, given ? (int64_t)t->dtype : 0, 0, of(buf, name, "dtype"));
    int rows = has_rows ? rank - 2 : -1, heads = has_rows ? rank - 3 : rank - 2;
    for (int d = 0; d < ATTN_MAX_RANK; d++) {
        bool kept = given && dims && d < rank && d != rows;
        snprintf(what, sizeof what, "dimension %d (%s)", d, !kept ? "none" : d == rank - 1 ? last : d == heads ? "heads" : "batch");
        add(vs, ATTN_MPI_INTEGER, code ? code : ATTN_ERR_SHAPE, kept ? t->shape[d] : 0, 0, of(buf, name, what));
    }
}

/* A digest of a 1-D option tensor's values (ALiBi's slopes, the sinks),
 * read only when it is what attn_sdpa would read: `heads` values of f32
 * or f64. Otherwise 0, and the rank's own checks report it. */
static void contents(values *vs, const char *name, const attn_tensor *t, int64_t heads) {
    uint64_t h = 0;
    if (t && t->data && t->rank == 1 && t->shape[0] == heads && (t->dtype == ATTN_F32 || t->dtype == ATTN_F64)) {
        size_t es = attn_dtype_size(t->dtype);
        h = RING_DIGEST_START;
        for (int64_t i = 0; i < heads; i++) h = attn_ring_digest(h, (const char *)t->data + i * t->strides[0] * (int64_t)es, es);
    }
    char buf[NAME_SIZE];
    add(vs, ATTN_MPI_DIGEST, ATTN_ERR_OPTION, (int64_t)h, 0, of(buf, name, "values"));
}

attn_status attn_ring_same(const ring *R, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v, int kv_grads,
                           attn_error *err) {
    values list, *vs = &list;
    vs->n = 0;
    const attn_sdpa_options *o = &R->so;
    option(vs, ATTN_MPI_INTEGER, R->layout, 0, "layout (0 contiguous, 1 zigzag)");
    tensor(vs, "q", q, true, "E", 0);
    tensor(vs, "k", k, true, "E", 0);
    tensor(vs, "v", v, true, "Ev", 0);
    option(vs, ATTN_MPI_INTEGER, o->has_scale, 0, "has_scale");
    option(vs, ATTN_MPI_REAL, 0, o->scale, "scale");
    option(vs, ATTN_MPI_INTEGER, o->causal, 0, "causal (0 none, 1 top-left, 2 bottom-right)");
    option(vs, ATTN_MPI_INTEGER, o->compute, 0, "compute (0 f32, 1 bf16)");
    option(vs, ATTN_MPI_REAL, 0, o->dropout_p, "dropout_p");
    const attn_tensor *m = o->mask;
    tensor(vs, "mask", m, m && m->rank >= 2, "keys", ATTN_ERR_MASK);
    option(vs, ATTN_MPI_REAL, 0, o->softcap, "softcap");
    option(vs, ATTN_MPI_INTEGER, o->window, 0, "window");
    bool q_ok = q && q->data && q->rank >= 2 && q->rank <= ATTN_MAX_RANK;
    int64_t heads = q_ok ? (q->rank >= 3 ? q->shape[q->rank - 3] : 1) : -1;
    tensor(vs, "alibi_slopes", o->alibi_slopes, false, "heads", ATTN_ERR_OPTION);
    contents(vs, "alibi_slopes", o->alibi_slopes, heads);
    tensor(vs, "sinks", o->sinks, false, "heads", ATTN_ERR_OPTION);
    contents(vs, "sinks", o->sinks, heads);
    /* RoPE's fields, read like attn_sdpa reads them: those that fit in the
     * caller's struct_size, the defaults after (a wrong size is the rank's
     * own error). */
    attn_rope_options rope = attn_rope_options_default();
    if (attn_versioned_read(&rope, sizeof rope, o->rope, "rope", "start from attn_rope_options_default()", NULL))
        rope = attn_rope_options_default();
    option(vs, ATTN_MPI_GIVEN, o->rope != NULL, 0, "rope");
    option(vs, ATTN_MPI_INTEGER, o->rope ? rope.layout : 0, 0, "rope's layout (0 halves, 1 interleaved)");
    option(vs, ATTN_MPI_REAL, 0, o->rope ? rope.base : 0, "rope's base");
    option(vs, ATTN_MPI_INTEGER, o->rope ? rope.rotary_dim : 0, 0, "rope's rotary_dim");
    option(vs, ATTN_MPI_INTEGER, o->rope ? rope.position_offset : 0, 0, "rope's position_offset");
    option(vs, ATTN_MPI_REAL, 0, o->rope ? rope.linear_scaling : 0, "rope's linear_scaling");
    if (kv_grads >= 0) add(vs, ATTN_MPI_GIVEN, ATTN_ERR_NULL, kv_grads, 0, "dk or dv");
    return attn_mpi_same(R->comm, vs->v, vs->n, R->timeout, err);
}
