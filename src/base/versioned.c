/* versioned.c -- the structs that begin with struct_size (attn.h, "Versioned
 * structs"): the caller's size travels in the struct, and these three
 * functions are the only code that reads, writes or fills one by it
 * (libattn-mpi's structs too). The caller's struct may be smaller than ours
 * (built against an older header) and is then never touched past its own
 * struct_size bytes. */
#include "base/base.h"

/* struct_size as a caller set it, checked against ours. name and hint are
 * optional (public: a library built on this one may pass NULL). */
static attn_status check_size(size_t given, size_t ours, const char *name, const char *hint, attn_error *err) {
    if (!name) name = "struct";
    if (given < sizeof(size_t))
        return attn_fail(err, ATTN_ERR_OPTION, "%s->struct_size is %zu%s%s", name, given, hint && *hint ? ": " : "",
                         hint && *hint ? hint : "");
    /* A struct that begins with a size_t is aligned at least as a size_t
     * is, and its sizeof is a multiple of that: any other size is no
     * header's struct, and would end inside a field. */
    if (given % _Alignof(size_t))
        return attn_fail(err, ATTN_ERR_OPTION, "%s->struct_size is %zu, not a multiple of %zu, so no struct's sizeof%s%s",
                         name, given, (size_t)_Alignof(size_t), hint && *hint ? ": " : "", hint && *hint ? hint : "");
    if (given > ours)
        return attn_fail(err, ATTN_ERR_OPTION,
                         "%s->struct_size is %zu, larger than this library's %zu: the program was built against a "
                         "newer attn.h",
                         name, given, ours);
    return ATTN_OK;
}

attn_status attn_versioned_read(void *ours, size_t size, const void *theirs, const char *name, const char *hint,
                                attn_error *err) {
    if (!theirs) return ATTN_OK;
    if (!ours) return attn_fail(err, ATTN_ERR_NULL, "the struct to read %s into is NULL", name ? name : "a struct");
    size_t given;
    memcpy(&given, theirs, sizeof given);
    attn_status st = check_size(given, size, name, hint, err);
    if (st) return st;
    memcpy(ours, theirs, given); /* the fields past it keep their defaults */
    memcpy(ours, &size, sizeof size);
    return ATTN_OK;
}

attn_status attn_versioned_write(void *theirs, const void *ours, size_t size, const char *name, const char *hint,
                                 attn_error *err) {
    size_t given;
    memcpy(&given, theirs, sizeof given);
    attn_status st = check_size(given, size, name, hint, err);
    if (st) return st;
    memcpy(theirs, ours, given);
    memcpy(theirs, &given, sizeof given);
    return ATTN_OK;
}

size_t attn_versioned_init(void *theirs, size_t struct_size, const void *defaults, size_t size) {
    if (!theirs || !defaults || struct_size < sizeof(size_t)) return size;
    memcpy(theirs, defaults, struct_size < size ? struct_size : size);
    /* A newer header's fields, unknown here: zero, and every call refuses
     * the struct for its size. */
    if (struct_size > size) memset((char *)theirs + size, 0, struct_size - size);
    memcpy(theirs, &struct_size, sizeof struct_size);
    return size;
}
