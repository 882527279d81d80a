/* disjoint.h -- the teaching API's raw arrays checked as the tensor API
 * checks its tensors: an output shares no byte with another output or with
 * an input (attn.h, "An output owns its memory"), through the library's one
 * test, attn_check_disjoint. */
#ifndef ATTN_TEACH_DISJOINT_H
#define ATTN_TEACH_DISJOINT_H

#include "attn.h"

/* One array of a call: where it starts, how many elements of `size` bytes. */
typedef struct teach_array {
    const void *p;
    int64_t count, size;
    const char *name;
} teach_array;

/* A byte count as an element count (a size past INT64_MAX is as large as
 * can be). */
static inline int64_t teach_count(size_t n) { return (uint64_t)n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n; }

/* a[0..n_outs) are the outputs, a[n_outs..n) the inputs: ATTN_ERR_OVERFLOW
 * naming the first array whose bytes do not fit in 64 bits or run past the
 * end of memory (sizes no array can have: said as such, not as an overlap
 * they would imply), else ATTN_ERR_STRIDE naming the first output that
 * overlaps an output before it or an input. */
static inline attn_status teach_check_disjoint(const teach_array *a, int n_outs, int n, attn_error *err) {
    attn_tensor t[8];
    for (int i = 0; i < n && i < 8; i++) {
        int64_t bytes;
        if (__builtin_mul_overflow(a[i].count, a[i].size, &bytes) ||
            (bytes > 0 && (uintptr_t)a[i].p > UINTPTR_MAX - (uint64_t)bytes))
            return attn_fail(err, ATTN_ERR_OVERFLOW, "%s: %lld elements of %lld bytes overflow the address space",
                             a[i].name, (long long)a[i].count, (long long)a[i].size);
        int64_t shape[1] = {bytes > 0 ? bytes : 0};
        attn_tensor_init(&t[i], (void *)a[i].p, ATTN_BOOL, 1, shape, NULL, NULL);
    }
    attn_status st;
    for (int i = 0; i < n_outs && i < 8; i++)
        for (int j = 0; j < n && j < 8; j++)
            if (j != i && (j < i || j >= n_outs) &&
                (st = attn_check_disjoint(&t[i], a[i].name, &t[j], a[j].name, err)))
                return st;
    return ATTN_OK;
}

#endif /* ATTN_TEACH_DISJOINT_H */
