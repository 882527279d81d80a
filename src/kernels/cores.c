/* cores.c -- the block sizes, from the caches the CPU describes (CPUID leaf
 * 4 on Intel, 0x8000001D on AMD) through BLIS's analytical model (Low et
 * al., "Analytical Modeling Is Enough for High-Performance BLIS"), not from
 * a list of CPUs by name. The microkernels depend only on the instruction
 * set; how much work a block holds depends on the caches: their size,
 * associativity and line.
 *
 * The model, for the flash forward's key block: a block's keys (E × bc,
 * transposed) and values (bc × Ev) are read again by every register tile
 * of the work item's rows, so they must stay in L2 (the role of BLIS's
 * packed A block, kept in L2 by its ways); and while one block is computed
 * the tiles prefetch the next one into L2 (flash.c's block_tiles). The two
 * blocks therefore each get half of L2's ways: a block of bc keys of a head
 * of d = 128 (E = Ev = 128, 1 KiB a key) fills at most floor(W / 2) ways of
 * sets × line bytes, rounded down to whole register strips (vl · nv keys).
 * Narrower heads take the same bc and leave room; wider ones shrink it
 * (flash.c keeps a block under 8 MiB). On the two cores where the key block
 * was measured this gives the measured blocks: 256 keys on Zen 3 (512 KiB,
 * 8-way L2; 256 beat 512 by 2-8%) and 512 on Zen 4 (1 MiB, 8-way).
 *
 * The other sizes are not cache quantities, and are the same on every
 * core: rows per forward work item (the packing of a key block amortised
 * over the item's rows: 192 and 384 rows measured slower than 768), the
 * backward's blocks (measured on Zen 3: 256 keys beat 128 by 20%; BLIS's L1
 * rule for dQ += dS K would give 96-320 keys, not measured against them),
 * decode's chunk (a count of keys that fixes results, see decode.c) and the
 * layer's GEMM blocks (gemm.c). docs/performance.md has the measurements. */
#include "kernels/ukernel.h"

#include <string.h>
#if defined(ATTN_HAVE_X86_KERNELS)
#include <cpuid.h>
#endif

/* A head of d = 128: the width the key block is sized for. */
enum { MODEL_E = 128, MODEL_EV = 128 };

/* The caches assumed when CPUID describes none (another architecture, a
 * hypervisor that hides the leaves): a 32 KiB, 8-way L1d and a 1 MiB, 8-way
 * L2, which give the blocks used before the model existed. */
static const attn_caches GENERIC = {{32 << 10, 8, 64, 64}, {1 << 20, 8, 64, 2048}};

bool attn_caches_parse(const unsigned (*regs)[4], int n, attn_caches *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        unsigned eax = regs[i][0], ebx = regs[i][1], ecx = regs[i][2];
        unsigned type = eax & 0x1f, level = (eax >> 5) & 7;
        if (type == 0) break; /* the end of the list */
        attn_cache c;
        c.line = (int)(ebx & 0xfff) + 1;
        int partitions = (int)((ebx >> 12) & 0x3ff) + 1;
        c.ways = (int)(ebx >> 22) + 1;
        c.sets = (int)ecx + 1;
        c.size = (int64_t)c.ways * partitions * c.line * c.sets;
        /* A fully associative cache (EAX bit 9) has one set of all its lines. */
        if (eax >> 9 & 1) c.ways = (int)(c.size / c.line), c.sets = 1;
        if (level == 1 && type == 1) out->l1d = c;      /* data */
        else if (level == 2 && type != 2) out->l2 = c; /* unified (or data) */
    }
    return out->l1d.size > 0 && out->l2.size > 0;
}

bool attn_caches_detect(attn_caches *out) {
#if defined(ATTN_HAVE_X86_KERNELS)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    unsigned max_leaf = a;
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 8, &c, 4), memcpy(vendor + 4, &d, 4), vendor[12] = 0;
    unsigned leaf = 4;
    if (strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0) {
        /* AMD's cache leaf exists when TOPOEXT (0x80000001 ECX bit 22) is set. */
        if ((unsigned)__get_cpuid_max(0x80000000, NULL) < 0x8000001Du || !__get_cpuid(0x80000001, &a, &b, &c, &d) || !(c >> 22 & 1))
            return false;
        leaf = 0x8000001D;
    } else if (max_leaf < 4) {
        return false;
    }
    unsigned regs[16][4];
    int n = 0;
    for (; n < 16; n++) {
        __cpuid_count(leaf, (unsigned)n, regs[n][0], regs[n][1], regs[n][2], regs[n][3]);
        if ((regs[n][0] & 0x1f) == 0) break;
    }
    return attn_caches_parse((const unsigned(*)[4])regs, n < 16 ? n + 1 : n, out);
#else
    (void)out;
    return false;
#endif
}

void attn_blocks_model(attn_blocks *b, const attn_caches *caches, const attn_ukernels *uk, const char *from) {
    const attn_cache *l2 = caches && caches->l2.size > 0 ? &caches->l2 : &GENERIC.l2;
    int64_t nr = (int64_t)uk->vl * uk->nv, half = (int64_t)(l2->ways / 2) * l2->sets * l2->line;
    int64_t bc = half / (4 * (MODEL_E + MODEL_EV)) / nr * nr;
    *b = (attn_blocks){from, 768, (int)(bc < nr ? nr : bc > 8192 ? 8192 : bc), 96, 256, 2048, 96, 256, 512};
}

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
