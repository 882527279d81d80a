/* cores.c -- which core this is, and the block sizes measured on it (BLIS's
 * per-configuration tables, in one place). The microkernels depend only on
 * the instruction set; how much work a block holds depends on the core:
 * cache sizes, and how fast the FMAs run against the loads, the exp2 and the
 * packing. */
#include "kernels/ukernel.h"

#include <string.h>
#if defined(ATTN_HAVE_X86_KERNELS)
#include <cpuid.h>
#endif

/* One row per (core, ISA) the blocks were chosen for. Rows for the same
 * core are tried in order; "generic" rows serve every core and ISA not
 * listed. What each number was chosen from is in docs/performance.md. */
static const attn_blocks TABLE[] = {
    /* Zen 3 (AVX2, 32 KiB L1d, 512 KiB L2): measured on a 2-core EPYC
     * (family 25, model 1). Backward key blocks of 256 beat 128 by 20%;
     * forward key blocks of 256 beat Zen 4's 512 by 2-8% (the 512-key block
     * and the item's rows overflow this L2). */
    {"zen3", "avx2", 768, 256, 96, 256, 2048, 96, 256, 512},
    /* Zen 4 (AVX-512 as two 256-bit halves, 1 MiB L2): the forward blocks
     * were tuned on a Zen 4; the backward's come from Zen 3. */
    {"zen4", "avx512", 768, 512, 96, 256, 2048, 96, 256, 512},
    /* Zen 5 (full-width AVX-512, 48 KiB L1d, 1 MiB L2): not yet measured on
     * one; Zen 4's blocks until then. */
    {"zen5", "avx512", 768, 512, 96, 256, 2048, 96, 256, 512},
    /* Every other core and ISA. */
    {"generic", NULL, 768, 512, 96, 256, 2048, 96, 256, 512},
};

const char *attn_detect_core(void) {
#if defined(ATTN_HAVE_X86_KERNELS)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return "generic";
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4), vendor[12] = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return "generic";
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f");
    if (strcmp(vendor, "AuthenticAMD") == 0) {
        /* Family 19h is Zen 3 and Zen 4; only Zen 4 has AVX-512. 1Ah is Zen 5. */
        if (family == 0x19) return avx512 ? "zen4" : "zen3";
        if (family == 0x1a) return "zen5";
    }
    if (strcmp(vendor, "GenuineIntel") == 0 && avx512) return "intel-avx512";
#endif
    return "generic";
}

const attn_blocks *attn_blocks_for(const char *core, const char *isa) {
    size_t n = sizeof TABLE / sizeof TABLE[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(TABLE[i].core, core) == 0 && TABLE[i].isa && strcmp(TABLE[i].isa, isa) == 0) return &TABLE[i];
    return &TABLE[n - 1];
}
