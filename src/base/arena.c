/* arena.c -- one call's scratch memory: bump allocation from the caller's
 * workspace, malloc, or only counting (base.h). */
#include "base/base.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

attn_arena attn_arena_over(void *workspace, size_t bytes) {
    attn_arena a = {0};
    if (workspace) {
        uintptr_t p = (uintptr_t)workspace, q = (p + ATTN_ARENA_ALIGN - 1) & ~(uintptr_t)(ATTN_ARENA_ALIGN - 1);
        a.base = (char *)workspace + (q - p);
        a.size = bytes > q - p ? bytes - (q - p) : 0;
    }
    return a;
}

attn_arena attn_arena_measuring(void) {
    attn_arena a = {0};
    a.measure = true;
    return a;
}

void *attn_arena_alloc(attn_arena *a, size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    size_t bytes = count * size, start = a->used;
    if (bytes == 0) bytes = 1;
    if (bytes > SIZE_MAX - ATTN_ARENA_ALIGN || start > SIZE_MAX - ATTN_ARENA_ALIGN - bytes) return NULL;
    bytes = (bytes + ATTN_ARENA_ALIGN - 1) / ATTN_ARENA_ALIGN * ATTN_ARENA_ALIGN;
    if (a->measure) {
        a->used += bytes;
        return NULL;
    }
    if (a->base) {
        if (bytes > a->size - start) return NULL;
        a->used += bytes;
        return a->base + start;
    }
    /* The block's first ATTN_ARENA_ALIGN bytes link it to the one before,
     * so that the memory handed out stays aligned. */
    if (bytes > SIZE_MAX - ATTN_ARENA_ALIGN) return NULL;
    char *block = aligned_alloc(ATTN_ARENA_ALIGN, ATTN_ARENA_ALIGN + bytes);
    if (!block) return NULL;
    memcpy(block, &a->last, sizeof a->last);
    a->last = block;
    a->used += bytes;
    return block + ATTN_ARENA_ALIGN;
}

void attn_arena_release(attn_arena *a) {
    while (a->last) {
        void *before;
        memcpy(&before, a->last, sizeof before);
        free(a->last);
        a->last = before;
    }
    a->used = 0;
}

size_t attn_arena_needed(const attn_arena *a) {
    /* Nothing counted: nothing to place, so no alignment to cover either
     * (a call that takes nothing runs with no workspace at all). */
    if (a->used == 0) return 0;
    return a->used > SIZE_MAX - (ATTN_ARENA_ALIGN - 1) ? SIZE_MAX : a->used + (ATTN_ARENA_ALIGN - 1);
}

bool attn_arena_f32_like(attn_arena *a, attn_tensor *t32, const attn_tensor *t) {
    int64_t n = 1;
    if (t->rank < 1 || t->rank > ATTN_MAX_RANK) return false;
    for (int d = 0; d < t->rank; d++)
        if (t->shape[d] < 1 || !attn_mul_i64(n, t->shape[d], &n)) return false;
    attn_tensor_init(t32, NULL, ATTN_F32, t->rank, t->shape, NULL, NULL);
    size_t before = a->used;
    t32->data = attn_arena_alloc(a, (size_t)n, sizeof(float));
    return t32->data != NULL || (a->measure && a->used > before); /* measured: no data */
}

attn_context attn_arena_rest(const attn_arena *a, const attn_context *c) {
    attn_context rest = *c;
    rest.workspace = a->base ? a->base + a->used : NULL;
    rest.workspace_size = a->base ? a->size - a->used : 0;
    return rest;
}

attn_status attn_arena_fail(attn_arena *a, const char *what, const char *sizer, attn_error *err) {
    bool workspace = a->base != NULL;
    attn_arena_release(a);
    if (workspace) return attn_fail(err, ATTN_ERR_WORKSPACE, "cannot fit %s in the context's workspace (%s)", what, sizer);
    return attn_fail(err, ATTN_ERR_NO_MEMORY, "cannot allocate %s", what);
}
