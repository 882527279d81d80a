/* dispatch.c -- choosing the microkernels: ATTN_ISA, else the CPU's best. */
#include "base/base.h"
#include "kernels/ukernel.h"

#include <stdlib.h>
#include <string.h>

const attn_ukernels *attn_ukernels_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "c") == 0) return &attn_ukernels_c;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &attn_ukernels_avx2;
    if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("fma"))
        return &attn_ukernels_avx512;
#endif
    return NULL;
}

#if defined(__wasm__)
/* WebAssembly runs one thread and only the portable kernels. */
const attn_ukernels *attn_ukernels_active(void) { return &attn_ukernels_c; }
#else
#include <pthread.h>

static const attn_ukernels *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    /* Read once: the choice holds for the life of the process. */
    active = attn_ukernels_by_name(getenv("ATTN_ISA"));
    static const char *const BEST_FIRST[] = {"avx512", "avx2", "c"};
    for (int i = 0; !active && i < 3; i++) active = attn_ukernels_by_name(BEST_FIRST[i]);
}

const attn_ukernels *attn_ukernels_active(void) {
    pthread_once(&active_once, choose);
    return active;
}
#endif

const char *attn_isa(void) { return attn_ukernels_active()->name; }
