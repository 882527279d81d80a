/* dispatch.c -- the kernel sets and their registration: which sets exist,
 * what each needs of the CPU, and which one this process runs (ATTN_ISA,
 * else the CPU's best). A set brings its own register tile (mr, vl, nv in
 * its struct) and gets its block sizes from cores.c, so adding an ISA is
 * one kernel file, one row below and one line in the Makefile. */
#define _DEFAULT_SOURCE /* syscall(), for arch_prctl */
#include "base/base.h"
#include "kernels/ukernel.h"
#include "kernels/ukernel_bf16.h"
#include "kernels/qdot.h"

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
static bool cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}
/* ukernel_avx512.c is compiled for F, BW, VL and DQ. */
static bool cpu_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
}
static bool cpu_avx512vnni(void) {
    __builtin_cpu_init();
    return cpu_avx512() && __builtin_cpu_supports("avx512vnni");
}
/* AVX-VNNI, VPDPBUSD in its VEX encoding (CPUID leaf 7 subleaf 1, EAX bit
 * 4), beside AVX2. */
static bool cpu_avxvnni(void) {
    unsigned a, b, c, d;
    if (!cpu_avx2() || __get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return a >> 4 & 1;
}
static bool cpu_avx512bf16(void) {
    __builtin_cpu_init();
    return cpu_avx512() && __builtin_cpu_supports("avx512bf16");
}

/* Does this core issue VDPBF16PS at the rate of its f32 FMA? No CPUID bit
 * says; the vendors' cores differ as a whole: AMD's (Zen 4, Zen 5) run it
 * on both FMA pipes, Intel's (Cooper Lake, Sapphire Rapids and later) on
 * one port of the two. */
static bool cpu_dpbf16_full_rate(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4), vendor[12] = 0;
    return strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0;
}

/* AMX: the CPU's AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22), and
 * Linux's permission for the tile data, asked for once per process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)). A kernel that
 * refuses it (before Linux 5.16, or a sandbox that forbids the call) leaves
 * the tiles unusable: then the AVX-512 kernels run, and ATTN_VERBOSE says
 * why (attn_bf16_label). Global state: the answer, read once under
 * dispatch's pthread_once. */
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
static bool amx_refused;
static bool cpu_amx(void) {
    unsigned a, b, c, d;
    if (!cpu_avx512bf16() || __get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d >> 24 & 1) || !(d >> 22 & 1)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) return true;
#endif
    amx_refused = true;
    return false;
}
#endif

/* The f32 kernel sets, best first, each with what it needs of the CPU
 * (NULL: nothing). */
static const struct {
    const attn_ukernels *uk;
    bool (*cpu_has)(void);
} F32_SETS[] = {
#if defined(ATTN_HAVE_X86_KERNELS)
    {&attn_ukernels_avx512, cpu_avx512},
    {&attn_ukernels_avx2, cpu_avx2},
#endif
    {&attn_ukernels_c, NULL},
};
enum { N_F32_SETS = sizeof F32_SETS / sizeof F32_SETS[0] };

/* The bf16 compute mode's kernel sets, best first: each runs beside one f32
 * set (the softmax, masks and packing stay that set's), and needs its own
 * instructions. The emulation, one lane at a time, is some 200 times slower
 * than the f32 kernels: only the portable build (or ATTN_ISA=c) takes it,
 * as the instruction's exact model; SIMD sets without a bf16 set of their
 * own compute the mode with their f32 kernels instead. */
static const struct {
    const attn_bf16_kernels *bk;
    const char *f32_set;
    bool (*cpu_has)(void);
} BF16_SETS[] = {
#if defined(ATTN_HAVE_X86_KERNELS)
    {&attn_bf16_amx, "avx512", cpu_amx},
    {&attn_bf16_avx512, "avx512", cpu_avx512bf16},
#endif
    {&attn_bf16_emulated, "c", NULL},
};
enum { N_BF16_SETS = sizeof BF16_SETS / sizeof BF16_SETS[0] };

/* Values through VDPBF16PS (decode_quant_avx512.c): 16 of them per key
 * and 4 rows where f32 takes 32 FMAs, so they pay only where VDPBF16PS
 * issues at the FMA's rate (measured on Zen 4, docs/performance.md); at
 * half rate they would cost what the FMAs do, plus the codes' widening. */
#if defined(ATTN_HAVE_X86_KERNELS)
static bool cpu_avx512vnni_bf16(void) { return cpu_avx512vnni() && cpu_avx512bf16() && cpu_dpbf16_full_rate(); }
#endif

/* The integer dot product sets of quantized decode (qdot.h), each beside
 * one f32 set, with what it needs of the CPU beyond that set. */
static const struct {
    const attn_qdot_kernels *qk;
    bool (*cpu_has)(void);
} QDOT_SETS[] = {
#if defined(ATTN_HAVE_X86_KERNELS)
    {&attn_qdot_avx512vnni_bf16, cpu_avx512vnni_bf16},
    {&attn_qdot_avx512vnni, cpu_avx512vnni},
    /* values by VPDPBUSD: not the default, measured 10% slower than the
     * bf16 pairs for q4 and 10% faster for q8 on Zen 4, and more error on
     * flat weights (docs/performance.md, accuracy.md); ATTN_QDOT=int8_values
     * takes it */
    {&attn_qdot_avx512vnni_int8, cpu_avx512vnni},
    {&attn_qdot_avxvnni, cpu_avxvnni},
    {&attn_qdot_avx2, NULL},
#endif
    {NULL, NULL},
};

static const attn_qdot_kernels *qdot_for(const char *isa) {
    /* ATTN_QDOT=f32_values, bf16_values or int8_values: the first set of
     * this ISA the CPU has whose values are computed so (to measure the
     * value paths against each other; the default where none is) */
    const char *values = NULL;
#if !defined(__wasm__)
    const char *env = getenv("ATTN_QDOT");
    if (env && strcmp(env, "widen") == 0) return NULL;
    if (env && (!strcmp(env, "f32_values") || !strcmp(env, "bf16_values") || !strcmp(env, "int8_values"))) values = env;
#endif
    const attn_qdot_kernels *first = NULL;
    for (int i = 0; QDOT_SETS[i].qk; i++) {
        const attn_qdot_kernels *qk = QDOT_SETS[i].qk;
        if (strcmp(isa, qk->f32_set) != 0 || (QDOT_SETS[i].cpu_has && !QDOT_SETS[i].cpu_has())) continue;
        if (!first) first = qk;
        if (!values || (qk->value_dot && strncmp(qk->value_dot, values, 4) == 0)) return qk;
    }
    return first;
}

const attn_ukernels *attn_ukernels_by_name(const char *name) {
    for (int i = 0; name && i < N_F32_SETS; i++)
        if (strcmp(name, F32_SETS[i].uk->name) == 0) return !F32_SETS[i].cpu_has || F32_SETS[i].cpu_has() ? F32_SETS[i].uk : NULL;
    return NULL;
}

const attn_ukernels *attn_ukernels_registered(int i) { return i >= 0 && i < N_F32_SETS ? F32_SETS[i].uk : NULL; }

bool attn_bf16_set_pays(const attn_bf16_kernels *bk, bool dp_full_rate) { return !bk->needs_full_rate || dp_full_rate; }

/* Why the best bf16 set for this CPU was passed over, or NULL. */
static const char *bf16_passed_over;

/* The best bf16 set for the f32 set named isa, or NULL: one the CPU has,
 * and, for a set that needs it, at the FMA's rate. */
static const attn_bf16_kernels *bf16_for(const char *isa) {
    for (int i = 0; i < N_BF16_SETS; i++) {
        if (strcmp(isa, BF16_SETS[i].f32_set) != 0 || (BF16_SETS[i].cpu_has && !BF16_SETS[i].cpu_has())) continue;
#if defined(ATTN_HAVE_X86_KERNELS)
        if (!attn_bf16_set_pays(BF16_SETS[i].bk, cpu_dpbf16_full_rate())) {
            bf16_passed_over = "f32(vdpbf16ps_half_rate_here)";
            continue;
        }
#endif
        return BF16_SETS[i].bk;
    }
    return NULL;
}

/* Each f32 set's blocks on this CPU's caches (cores.c's model), in the
 * order of F32_SETS. */
static attn_blocks set_blocks[N_F32_SETS];

static void derive_blocks(void) {
    attn_caches caches;
    bool have = attn_caches_detect(&caches);
    for (int i = 0; i < N_F32_SETS; i++)
        attn_blocks_model(&set_blocks[i], have ? &caches : NULL, F32_SETS[i].uk, have ? "cpuid" : "generic");
}

static const attn_blocks *blocks_of(const attn_ukernels *uk) {
    for (int i = 0; i < N_F32_SETS; i++)
        if (F32_SETS[i].uk == uk) return &set_blocks[i];
    return &set_blocks[N_F32_SETS - 1];
}

#if defined(__wasm__)
/* WebAssembly runs one thread and only the portable kernels. */
const attn_ukernels *attn_ukernels_active(void) { return &attn_ukernels_c; }
const attn_bf16_kernels *attn_bf16_active(void) { return bf16_for("c"); }
const attn_qdot_kernels *attn_qdot_active(void) { return qdot_for("c"); }
const attn_bf16_kernels *attn_bf16_set_for_tests(const attn_bf16_kernels *bk) {
    (void)bk;
    return bf16_for("c");
}
const attn_blocks *attn_blocks_active(void) {
    derive_blocks(); /* one thread: no race, and the same numbers each time */
    return blocks_of(&attn_ukernels_c);
}
const attn_blocks *attn_blocks_for(const char *core, const char *isa) {
    (void)core, (void)isa;
    return attn_blocks_active();
}
#else
#include <pthread.h>

/* The process's kernels and blocks: global state, set once (under
 * pthread_once) and never changed. */
static const attn_ukernels *active;
static const attn_bf16_kernels *active_bf16;
static const attn_qdot_kernels *active_qdot;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    /* Read once: the choice holds for the life of the process. */
    active = attn_ukernels_by_name(getenv("ATTN_ISA"));
    for (int i = 0; !active && i < N_F32_SETS; i++) active = attn_ukernels_by_name(F32_SETS[i].uk->name);
    active_bf16 = bf16_for(active->name);
    active_qdot = qdot_for(active->name);
#if defined(ATTN_HAVE_X86_KERNELS)
    if (amx_refused)
        bf16_passed_over = active_bf16 ? "avx512_bf16(amx_refused_by_linux)"
                                       : "f32(amx_refused_by_linux)";
#endif
    derive_blocks();
}

const attn_bf16_kernels *attn_bf16_set_for_tests(const attn_bf16_kernels *bk) {
    pthread_once(&active_once, choose);
    const attn_bf16_kernels *old = active_bf16;
    active_bf16 = bk;
    bf16_passed_over = NULL;
    return old;
}

const attn_ukernels *attn_ukernels_active(void) {
    pthread_once(&active_once, choose);
    return active;
}

const attn_bf16_kernels *attn_bf16_active(void) {
    pthread_once(&active_once, choose);
    return active_bf16;
}

const attn_qdot_kernels *attn_qdot_active(void) {
    pthread_once(&active_once, choose);
    return active_qdot;
}

const attn_blocks *attn_blocks_active(void) {
    pthread_once(&active_once, choose);
    return blocks_of(active);
}

const attn_blocks *attn_blocks_for(const char *core, const char *isa) {
    (void)core;
    pthread_once(&active_once, choose);
    for (int i = 0; isa && i < N_F32_SETS; i++)
        if (strcmp(isa, F32_SETS[i].uk->name) == 0) return &set_blocks[i];
    return blocks_of(active);
}
#endif

const char *attn_isa(void) { return attn_ukernels_active()->name; }

const char *attn_bf16_label(void) {
    const attn_bf16_kernels *bk = attn_bf16_active();
    return bf16_passed_over && (!bk || strcmp(bk->name, "emulated") != 0) ? bf16_passed_over : bk ? bk->name : "f32";
}

attn_status attn_get_tuning(attn_tuning *tuning, attn_error *err) {
    if (!tuning) return attn_fail(err, ATTN_ERR_NULL, "tuning is NULL");
    const attn_blocks *b = attn_blocks_active();
    attn_tuning t = {sizeof t, attn_detect_core(), attn_isa(), b->from, b->br, b->bc, b->bwd_br, b->bwd_bc, b->decode_chunk,
                     b->gemm_mc, b->gemm_kc, b->gemm_nc};
    return attn_versioned_write(tuning, &t, sizeof t, "tuning", "set it to sizeof(attn_tuning)", err);
}
