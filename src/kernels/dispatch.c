/* dispatch.c -- choosing the microkernels: ATTN_ISA, else the CPU's best. */
#include "base/base.h"
#include "kernels/ukernel.h"

#include <stdlib.h>
#include <string.h>

#if defined(ATTN_HAVE_X86_KERNELS)
#include <cpuid.h>
/* F16C (CPUID leaf 1, ECX bit 29), which __builtin_cpu_supports does not
 * name in every compiler. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

const attn_ukernels *attn_ukernels_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "c") == 0) return &attn_ukernels_c;
#if defined(ATTN_HAVE_X86_KERNELS)
    __builtin_cpu_init();
    if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return &attn_ukernels_avx2;
    /* ukernel_avx512.c is compiled for F, BW, VL and DQ. */
    if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
        return &attn_ukernels_avx512;
#endif
    return NULL;
}

#if defined(__wasm__)
/* WebAssembly runs one thread and only the portable kernels. */
const attn_ukernels *attn_ukernels_active(void) { return &attn_ukernels_c; }
const attn_blocks *attn_blocks_active(void) { return attn_blocks_for("generic", "c"); }
#else
#include <pthread.h>

/* The process's kernels and blocks: global state, set once (under
 * pthread_once) and never changed. */
static const attn_ukernels *active;
static const attn_blocks *active_blocks;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    /* Read once: the choice holds for the life of the process. */
    active = attn_ukernels_by_name(getenv("ATTN_ISA"));
    static const char *const BEST_FIRST[] = {"avx512", "avx2", "c"};
    for (int i = 0; !active && i < 3; i++) active = attn_ukernels_by_name(BEST_FIRST[i]);
    active_blocks = attn_blocks_for(attn_detect_core(), active->name);
}

const attn_ukernels *attn_ukernels_active(void) {
    pthread_once(&active_once, choose);
    return active;
}

const attn_blocks *attn_blocks_active(void) {
    pthread_once(&active_once, choose);
    return active_blocks;
}
#endif

const char *attn_isa(void) { return attn_ukernels_active()->name; }

attn_status attn_get_tuning(attn_tuning *tuning, attn_error *err) {
    if (!tuning) return attn_fail(err, ATTN_ERR_NULL, "tuning is NULL");
    const attn_blocks *b = attn_blocks_active();
    attn_tuning t = {sizeof t, attn_detect_core(), attn_isa(), b->core, b->br, b->bc, b->bwd_br, b->bwd_bc, b->decode_chunk,
                     b->gemm_mc, b->gemm_kc, b->gemm_nc};
    return attn_versioned_write(tuning, &t, sizeof t, "tuning", "set it to sizeof(attn_tuning)", err);
}
