/* test_dlclose.c -- the shared library opened and closed in a loop, as a
 * plugin host loads it: each time a threaded call starts the pool, and a
 * call over keys quantized per channel dequantizes groups on the calling
 * thread and the workers; then dlclose must join the workers
 * (the atexit handler the library registered runs at dlclose) and drop its
 * fork handlers (a fork after dlclose would otherwise call into unmapped
 * code). Built under ASan+UBSan, whose leak check at exit finds what the
 * loop left behind; the library itself is the plain build/libattn.so.
 *
 * Usage: test_dlclose PATH/libattn.so. Prints "ok NAME" or "FAIL NAME:
 * why"; exits 1 if any failed. */
#define _GNU_SOURCE /* dlopen's RTLD_ flags on older glibc */
#include "attn.h"
#include "check.h"
#include "process.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The library's functions this test calls, looked up in one dlopen. */
typedef struct lib {
    attn_status (*tensor_init)(attn_tensor *, void *, attn_dtype, int, const int64_t *, const int64_t *, attn_error *);
    attn_status (*sdpa)(attn_tensor *, attn_tensor *, attn_tensor *, const attn_tensor *, const attn_tensor *,
                        const attn_tensor *, const attn_sdpa_options *, attn_error *);
    void (*set_num_threads)(int);
    size_t (*desc_init)(attn_kv_cache_desc *, size_t);
    attn_status (*cache_bytes)(size_t *, const attn_kv_cache_desc *, attn_error *);
    attn_status (*cache_init)(attn_kv_cache **, void *, size_t, const attn_kv_cache_desc *, attn_error *);
    attn_status (*append)(attn_kv_cache *, const attn_tensor *, const attn_tensor *, attn_error *);
    attn_status (*attend)(attn_tensor *, attn_tensor *, const attn_tensor *, const attn_kv_cache *,
                          const attn_sdpa_options *, attn_error *);
} lib;

static int find(lib *l, void *h) {
    void *f[8] = {dlsym(h, "attn_tensor_init"), dlsym(h, "attn_sdpa"), dlsym(h, "attn_set_num_threads"),
                  dlsym(h, "attn_kv_cache_desc_init"), dlsym(h, "attn_kv_cache_bytes"), dlsym(h, "attn_kv_cache_init"),
                  dlsym(h, "attn_kv_cache_append"), dlsym(h, "attn_kv_cache_attend")};
    for (int i = 0; i < 8; i++)
        if (!f[i]) return 0;
    memcpy(&l->tensor_init, &f[0], sizeof f[0]), memcpy(&l->sdpa, &f[1], sizeof f[1]);
    memcpy(&l->set_num_threads, &f[2], sizeof f[2]), memcpy(&l->desc_init, &f[3], sizeof f[3]);
    memcpy(&l->cache_bytes, &f[4], sizeof f[4]), memcpy(&l->cache_init, &f[5], sizeof f[5]);
    memcpy(&l->append, &f[6], sizeof f[6]), memcpy(&l->attend, &f[7], sizeof f[7]);
    return 1;
}

/* A threaded flash call (4 heads of 600 rows), then 64 queries over 1,000
 * keys quantized per channel (q4c; the flash kernel dequantizes groups on
 * each thread's stack), both on 3 threads. */
static attn_status calls(const lib *l, float *x, float *out, attn_error *err) {
    int64_t sq[4] = {1, 4, 600, 32}, sk[3] = {2, 1000, 64}, sq3[3] = {4, 64, 64};
    attn_tensor q, o, k, q3, o3;
    l->set_num_threads(3);
    l->tensor_init(&q, x, ATTN_F32, 4, sq, NULL, NULL), l->tensor_init(&o, out, ATTN_F32, 4, sq, NULL, NULL);
    attn_status st = l->sdpa(&o, NULL, NULL, &q, &q, &q, NULL, err);
    attn_kv_cache_desc d;
    l->desc_init(&d, sizeof d);
    d.heads = 2, d.capacity = 1024, d.key_dim = d.value_dim = 64, d.dtype = ATTN_F16, d.key_dtype = ATTN_Q4C;
    size_t bytes = 0;
    if (!st) st = l->cache_bytes(&bytes, &d, err);
    void *memory = st ? NULL : malloc(bytes);
    attn_kv_cache *cache = NULL;
    l->tensor_init(&k, x, ATTN_F32, 3, sk, NULL, NULL);
    l->tensor_init(&q3, x, ATTN_F32, 3, sq3, NULL, NULL), l->tensor_init(&o3, out, ATTN_F32, 3, sq3, NULL, NULL);
    if (!st) st = l->cache_init(&cache, memory, bytes, &d, err);
    if (!st) st = l->append(cache, &k, &k, err);
    if (!st) st = l->attend(&o3, NULL, &q3, cache, NULL, err);
    free(memory);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/libattn.so\n", argv[0]);
        return 2;
    }
    enum { LOOPS = 8, FLOATS = 2 * 1000 * 64 };
    float *x = malloc(sizeof(float) * FLOATS), *out = malloc(sizeof(float) * FLOATS);
    for (int i = 0; i < FLOATS; i++) x[i] = (float)(i * 7919 % 101) / 50.0f - 1.0f;
    int start = tasks(), opened = 1, ran = 1, joined = 1, forked = 1, unloaded = 1;
    char why[600] = "";
    for (int loop = 0; loop < LOOPS && opened && ran; loop++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        lib l;
        if (!h || !find(&l, h)) {
            opened = 0, snprintf(why, sizeof why, "%s", h ? "a function is missing" : dlerror());
            if (h) dlclose(h);
            break;
        }
        attn_error err = {0};
        if (calls(&l, x, out, &err)) ran = 0, snprintf(why, sizeof why, "loop %d: %s", loop, err.message);
        int during = tasks();
        dlclose(h);
        void *still = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD); /* NULL: unmapped, as the checks below need */
        if (still) unloaded = 0, dlclose(still);
        int after = tasks();
        if (start > 0 && (after != start || during <= start)) joined = 0;
        fflush(stdout);
        pid_t pid = fork(); /* the library's fork handlers must be gone with it */
        if (pid == 0) _exit(7);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 7) forked = 0;
    }
    check(opened && ran, "dlopen_calls_dlclose_in_a_loop", "%s", why);
    check(unloaded, "dlclose_unloads_the_library", "the library stayed mapped after dlclose, so the checks below "
                                                  "would pass whatever it left behind");
    if (start < 1) skip("dlclose_joins_the_workers", "no /proc/self/task to count threads in");
    else check(joined, "dlclose_joins_the_workers", "the threads were not back to %d after dlclose", start);
    check(forked, "fork_after_dlclose", "the child of a fork after dlclose did not exit normally");
    free(x), free(out);
    printf("%d failed\n", n_failed);
    return n_failed != 0;
}
