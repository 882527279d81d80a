/* ukernel_amx.c -- the bf16 compute mode on Intel AMX (compiled with
 * -mamx-tile -mamx-bf16 and the AVX-512 flags): a register tile of 16 query
 * rows by 64 columns, four 16 × 16 f32 accumulator tiles (tmm0-3), an A
 * tile of 16 rows by 16 bf16 pairs (tmm4: 64 bytes a row) and B tiles of 16
 * pair rows by 16 columns (tmm5, tmm6). The operands come as flash.c packs
 * them for the bf16 mode, which is already the VNNI pair layout TDPBF16PS
 * reads: queries and probabilities as pairs along E or along the keys, keys
 * (transposed) and values as rows of pairs, packed once per key block. The
 * softmax between the two products stays in f32 on the AVX-512 kernels.
 *
 * TDPBF16PS sums each output's even and odd products apart before adding
 * them to the accumulator (Intel's SDM), not in VDPBF16PS's order, so the
 * results differ from the avx512_bf16 set's in the last bits; both are
 * within the mode's bound (attn.h).
 *
 * Linux gives a thread the tile state only after the process asked for it
 * (arch_prctl, done once in dispatch.c); the set is registered only then. */
#include "attn.h"
#include "kernels/ukernel_bf16.h"

#if defined(ATTN_HAVE_X86_KERNELS)
#include "kernels/x86/intrin.h"
#include <string.h>

enum { MR = 16, VL = 16, NV = 4, NR = VL * NV, KP = 16 /* bf16 pairs in a row of an A tile */ };

/* The shapes of the tiles, as LDTILECFG reads them: palette 1, then the
 * bytes per row of tmm0-15 and their rows. Every tile here is 16 rows of 64
 * bytes. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 7; t++) c.colsb[t] = 64, c.rows[t] = 16;
    _tile_loadconfig(&c);
}

/* The helpers for the bf16 conversions and the exp pass: the AVX512_BF16 set's, which every
 * AMX CPU has (the tests' emulated build may name the portable ones). */
#if !defined(ATTN_AMX_HELPERS)
#define ATTN_AMX_HELPERS attn_bf16_avx512
#endif

/* s (16 × 64, stride lds) = q2 (16 × E2 pairs, stride ldq) · kt2 (E2 × 64
 * pairs, stride ldk). A last block of fewer than 16 pairs is copied, zero
 * padded, so that no tile reads past the operands. */
static void qk_amx(float *s, int64_t lds, const uint32_t *q2, int64_t ldq, const uint32_t *kt2, int64_t ldk,
                   int64_t E2) {
    configure();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    uint32_t a_tail[MR * KP], b_tail[KP * NR];
    for (int64_t e = 0; e < E2; e += KP) {
        const uint32_t *a = q2 + e, *b = kt2 + e * ldk;
        int64_t lda = ldq, ldb = ldk;
        if (E2 - e < KP) { /* the last pairs, zero padded */
            int64_t n = E2 - e;
            memset(a_tail, 0, sizeof a_tail), memset(b_tail, 0, sizeof b_tail);
            for (int r = 0; r < MR; r++) memcpy(a_tail + r * KP, q2 + r * ldq + e, sizeof(uint32_t) * (size_t)n);
            for (int64_t k = 0; k < n; k++) memcpy(b_tail + k * NR, kt2 + (e + k) * ldk, sizeof(uint32_t) * NR);
            a = a_tail, b = b_tail, lda = KP, ldb = NR;
        }
        _tile_loadd(4, a, lda * 4);
        _tile_loadd(5, b, ldb * 4);
        _tile_loadd(6, b + 16, ldb * 4);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(5, b + 32, ldb * 4);
        _tile_loadd(6, b + 48, ldb * 4);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 6);
    }
    _tile_stored(0, s, lds * 4);
    _tile_stored(1, s + 16, lds * 4);
    _tile_stored(2, s + 32, lds * 4);
    _tile_stored(3, s + 48, lds * 4);
}

/* One accumulator tile's step of pv: tile T += A (tmm4) · B (its 16
 * columns of v2), T a constant as the instructions need. */
#define PV_STEP(T, b, ldb)                                                                        \
    do {                                                                                          \
        _tile_loadd(5, (b) + 16 * (T), (ldb) * 4);                                                \
        _tile_dpbf16ps(T, 4, 5);                                                                  \
    } while (0)

/* o (16 × nvec·16, stride ldo) += p2 (16 × K2 pairs, stride ldp) · v2 (K2 ×
 * nvec·16 pairs, stride ldv). */
static void pv_amx(float *o, int64_t ldo, const uint32_t *p2, int64_t ldp, const uint32_t *v2, int64_t ldv,
                   int64_t K2, int nvec) {
    configure();
    _tile_loadd(0, o, ldo * 4);
    if (nvec > 1) _tile_loadd(1, o + 16, ldo * 4);
    if (nvec > 2) _tile_loadd(2, o + 32, ldo * 4);
    if (nvec > 3) _tile_loadd(3, o + 48, ldo * 4);
    uint32_t a_tail[MR * KP], b_tail[KP * NR];
    for (int64_t k = 0; k < K2; k += KP) {
        const uint32_t *a = p2 + k, *b = v2 + k * ldv;
        int64_t lda = ldp, ldb = ldv;
        if (K2 - k < KP) {
            int64_t n = K2 - k;
            memset(a_tail, 0, sizeof a_tail), memset(b_tail, 0, sizeof b_tail);
            for (int r = 0; r < MR; r++) memcpy(a_tail + r * KP, p2 + r * ldp + k, sizeof(uint32_t) * (size_t)n);
            for (int64_t i = 0; i < n; i++) memcpy(b_tail + i * NR, v2 + (k + i) * ldv, sizeof(uint32_t) * (size_t)(16 * nvec));
            a = a_tail, b = b_tail, lda = KP, ldb = NR;
        }
        _tile_loadd(4, a, lda * 4);
        PV_STEP(0, b, ldb);
        if (nvec > 1) PV_STEP(1, b, ldb);
        if (nvec > 2) PV_STEP(2, b, ldb);
        if (nvec > 3) PV_STEP(3, b, ldb);
    }
    _tile_stored(0, o, ldo * 4);
    if (nvec > 1) _tile_stored(1, o + 16, ldo * 4);
    if (nvec > 2) _tile_stored(2, o + 32, ldo * 4);
    if (nvec > 3) _tile_stored(3, o + 48, ldo * 4);
}

/* The layer's GEMM on pairs (attn_bf16_kernels.gemm): a 32 × 32 register
 * tile in four accumulator tiles (tmm0: rows 0-15 by columns 0-15, tmm1:
 * rows 0-15 by 16-31, tmm2 and tmm3 the rows 16-31), two A tiles (tmm4,
 * tmm5: 16 rows by 16 pairs each) and two B tiles (tmm6, tmm7: 16 pair rows
 * by 16 columns), so that each tile loaded meets two others: four loads
 * for four TDPBF16PS. a2 comes packed in A tiles (gemm_kp = 16: 32 rows by
 * 16 pairs, 64 bytes a row), b2 in rows of 32 pairs (128 bytes). */
enum { GEMM_MR = 32, GEMM_NR = 32, GEMM_KP = 16 };

static void gemm_amx(float *c, int64_t ldc, const uint32_t *a2, const uint32_t *b2, int64_t k2) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t p = 0; p < k2; p += GEMM_KP) {
        const uint32_t *a = a2 + p * GEMM_MR, *b = b2 + p * GEMM_NR;
        _tile_loadd(4, a, KP * 4);
        _tile_loadd(5, a + 16 * KP, KP * 4);
        _tile_loadd(6, b, GEMM_NR * 4);
        _tile_loadd(7, b + 16, GEMM_NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    /* The sums from zero, then added to c (one rounding each). */
    float t[GEMM_MR * GEMM_NR];
    _tile_stored(0, t, GEMM_NR * 4);
    _tile_stored(1, t + 16, GEMM_NR * 4);
    _tile_stored(2, t + 16 * GEMM_NR, GEMM_NR * 4);
    _tile_stored(3, t + 16 * GEMM_NR + 16, GEMM_NR * 4);
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) c[r * ldc + j] += t[r * GEMM_NR + j];
}

static float exp_sum_amx(uint16_t *p, float *x, int64_t n, float m) { return ATTN_AMX_HELPERS.exp_sum(p, x, n, m); }
static void to_bf16_amx(uint16_t *dst, const float *src, int64_t n) { ATTN_AMX_HELPERS.to_bf16(dst, src, n); }
static void zip_amx(uint32_t *dst, const float *even, const float *odd, int64_t n) {
    ATTN_AMX_HELPERS.zip(dst, even, odd, n);
}

const attn_bf16_kernels attn_bf16_amx = {
    .name = "amx_bf16",
    .vl = VL,
    .nv = NV,
    .mr = MR,
    .qk = qk_amx,
    .pv = pv_amx,
    .exp_sum = exp_sum_amx,
    .to_bf16 = to_bf16_amx,
    .zip = zip_amx,
    .gemm = gemm_amx,
    .gemm_mr = GEMM_MR,
    .gemm_nr = GEMM_NR,
    .gemm_kp = GEMM_KP,
};
#endif
