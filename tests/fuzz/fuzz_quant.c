/* fuzz_quant.c -- libFuzzer target: quantized tensors' descriptions (attn.h,
 * "Quantized storage" and attn_tensor) and the rows they describe.
 *
 * The input picks a format (q8, q4, q4_1, e4m3, e5m2, and now and then a float
 * dtype or an unknown number), a rank, sizes (small, or at an edge of int64:
 * block counts that overflow, rows of a size the format cannot take), and
 * strides (C order, or fuzzed: a last stride other than 1, steps that run
 * backwards or past int64); the rest of the input is the rows' bytes, so
 * the scales are any f16 (NaN, infinities, subnormals, 0) and the codes
 * any bytes. With them it calls attn_quant_row_size, attn_tensor_init,
 * attn_quantize and attn_dequantize (buffer sizes one byte short now and
 * then), and attn_sdpa and attn_sdpa_varlen with the quantized tensor as k
 * and v.
 *
 * Beyond "no crash, no undefined behaviour" it checks: a failed call has a
 * message; a description the library accepts lies in memory the harness
 * owns (the harness hands over only such descriptions, or ones whose reach
 * overflows int64, which the library must refuse); every fp8 row widened and
 * quantized again gives its own bytes back, NaN codes aside; a q8, q4 or
 * q4_1 row quantized from finite floats widens back within half a step of
 * its block (q4_1: plus its f16 minimum's and scale's rounding).
 *
 * The same input, read again from its start, describes a float tensor of
 * keys for the per-channel group formats (q4c, q2c: (..., positions,
 * channels), attn_quantize and attn_dequantize): ranks 1 to 4, positions and
 * channels small, off their multiples or at an edge, strides C order or
 * fuzzed, a buffer one byte short or exact; a refusal has the status its
 * cause calls for and writes nothing, and an accepted one widens back within
 * half a step of its channel's scale (plus the f16 minimum's and scale's
 * rounding), and widens into f64, f16 or bf16 as its f32 values converted
 * (exactly, or to nearest even), a bool tensor refused without a write.
 *
 * And: a refused attention call writes nothing to out; an accepted one
 * gives bitwise what the same call gives over f32 rows holding the
 * widened values (q4_1 and fp8 always, q8 and q4 with more than 8 query
 * rows, where no integer dot product scores the keys). A third reading
 * takes the formats through f64, f16 and bf16 rows (fuzz_convert). */
#include "attn.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_reader.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) __builtin_trap();                                         \
    } while (0)

enum { MEM = 1 << 15, FLOATS = 1 << 13 };
static uint8_t mem[MEM];          /* the quantized rows */
static float fbuf[FLOATS], obuf[FLOATS], qbuf[FLOATS];

static int64_t pick_int(reader *r) {
    static const int64_t EDGES[] = {0, -1, INT64_MIN, INT64_MAX, INT64_MAX / 2, INT64_MAX / 34 + 1, (int64_t)1 << 31,
                                    (int64_t)1 << 32, (int64_t)1 << 58, (int64_t)1 << 62, 31, 33, 40, 96, 1024};
    uint8_t b = byte(r);
    if (b < 200) return b % 5 + 1;
    return EDGES[b % (sizeof EDGES / sizeof *EDGES)];
}

static attn_dtype pick_format(reader *r) {
    static const attn_dtype F[] = {ATTN_Q8, ATTN_Q4, ATTN_E4M3, ATTN_E5M2, ATTN_Q8, ATTN_Q4_1, ATTN_F32, (attn_dtype)99};
    return F[byte(r) % 8];
}

/* The bytes t reaches from its data (quantized rows: strides in bytes,
 * the last row's bytes), or -1 when that does not fit in int64 or t is
 * empty. */
static __int128 reach(const attn_tensor *t) {
    __int128 end = 0;
    int last = t->rank - 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->shape[d] <= 0) return -1;
        if (d < last) {
            if (t->strides[d] < 0) return -1; /* the harness hands over forward views only */
            end += (__int128)t->strides[d] * (t->shape[d] - 1);
        }
    }
    return end + (__int128)attn_quant_row_size(t->dtype, t->shape[last]);
}

/* attn_sdpa's out over quantized k and v (t, as both) against the same call
 * over f32 rows holding their widened values (attn_dequantize a row at a
 * time, from where t's strides put it): bitwise, wherever attention widens
 * the rows (attn.h, "How attention reads them"): q4_1 and fp8 always, q8
 * and q4 in the flash kernel (more than 8 query rows). q8 and q4 keys in
 * the decode kernel may be scored by integer dot products instead, which
 * round the query (not bitwise): those are not compared. NaN is NaN. */
static float widened[FLOATS], wout[FLOATS];
static void same_as_widened(const attn_tensor *t, const attn_tensor *q, const attn_tensor *out, attn_dtype fm,
                            int64_t L) {
    if ((fm == ATTN_Q8 || fm == ATTN_Q4) && L <= 8) return;
    int64_t cols = t->shape[t->rank - 1], rows = attn_tensor_numel(t) / cols;
    size_t rs = attn_quant_row_size(fm, cols);
    attn_error err;
    for (int64_t i = 0; i < rows; i++) {
        int64_t off = 0, rest = i;
        for (int d = t->rank - 2; d >= 0; d--) off += rest % t->shape[d] * t->strides[d], rest /= t->shape[d];
        int64_t one[2] = {1, cols};
        attn_tensor row;
        CHECK(attn_tensor_init(&row, widened + i * cols, ATTN_F32, 2, one, NULL, NULL) == ATTN_OK);
        CHECK(attn_dequantize(&row, (const uint8_t *)t->data + off, rs, fm, &err) == ATTN_OK);
    }
    attn_tensor k, o;
    CHECK(attn_tensor_init(&k, widened, ATTN_F32, t->rank, t->shape, NULL, NULL) == ATTN_OK);
    CHECK(attn_tensor_init(&o, wout, ATTN_F32, out->rank, out->shape, NULL, NULL) == ATTN_OK);
    attn_status st = attn_sdpa(&o, NULL, NULL, q, &k, &k, NULL, &err);
    if (st == ATTN_ERR_NO_MEMORY) return;
    CHECK(st == ATTN_OK);
    const float *got = out->data;
    for (int64_t i = 0; i < attn_tensor_numel(out); i++)
        CHECK(isnan(got[i]) ? isnan(wout[i]) : !memcmp(&got[i], &wout[i], sizeof(float)));
}

/* Keys per channel over groups of 32 positions (q4c, q2c) from a fuzzed
 * float tensor (see the top). */
static void fuzz_groups(reader *r) {
    attn_dtype fm = byte(r) & 1 ? ATTN_Q4C : ATTN_Q2C;
    int rank = byte(r) % 4 + 1, levels = fm == ATTN_Q4C ? 15 : 3;
    int64_t shape[4] = {byte(r) % 2 + 1, byte(r) % 2 + 1, 32, 8};
    uint8_t b = byte(r);
    shape[2] = b < 150 ? 32 * (b % 3 + 1) : b < 220 ? b % 70 : pick_int(r);
    b = byte(r);
    shape[3] = b < 150 ? 4 * (b % 8 + 1) : b < 220 ? b % 19 + 1 : pick_int(r);
    int64_t *sh = shape + 4 - rank, strides[4];
    /* C order, the last stride now and then 2 (a float tensor may be strided) */
    int64_t step = byte(r) == 3 ? 2 : 1;
    __int128 reach = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = step;
        if (sh[d] <= 0) return;
        reach += (__int128)(sh[d] - 1) * step;
        step = (int64_t)((__int128)step * sh[d] < INT64_MAX ? step * sh[d] : INT64_MAX);
    }
    if (reach > FLOATS) return; /* not ours */
    for (int64_t i = 0; i < (int64_t)reach; i++) {
        uint32_t u = (uint32_t)byte(r) << 24 | (uint32_t)byte(r) << 16 | (uint32_t)byte(r) << 8 | byte(r);
        float x;
        memcpy(&x, &u, 4);
        fbuf[i] = isfinite(x) ? x : byte(r) == 1 ? x : 0.0f; /* now and then a NaN or infinity */
    }
    attn_tensor t;
    CHECK(attn_tensor_init(&t, fbuf, ATTN_F32, rank, sh, strides, NULL) == ATTN_OK);
    int64_t L = rank >= 2 ? sh[rank - 2] : 0, n = sh[rank - 1], mats = 1;
    for (int d = 0; d < rank - 2; d++) mats *= sh[d];
    size_t group = attn_quant_group_size(fm, n), total = group * (size_t)(mats * (L / 32));
    bool shape_ok = rank >= 2 && L % 32 == 0 && group;
    size_t offer = byte(r) == 5 && total ? total - 1 : total;
    if (shape_ok && total > MEM) return;
    memset(mem, 0xAA, MEM);
    attn_error err;
    attn_status st = attn_quantize(mem, shape_ok ? offer : MEM, fm, &t, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (rank < 2) CHECK(st == ATTN_ERR_RANK);
    else if (!shape_ok) CHECK(st == ATTN_ERR_SHAPE);
    else if (offer < total) CHECK(st == ATTN_ERR_ARGUMENT);
    else CHECK(st == ATTN_OK);
    if (st) {
        for (size_t i = 0; i < MEM; i++) CHECK(mem[i] == 0xAA);
        return;
    }
    attn_tensor o;
    CHECK(attn_tensor_init(&o, obuf, ATTN_F32, rank, sh, strides, NULL) == ATTN_OK);
    CHECK(attn_dequantize(&o, mem, total, fm, &err) == ATTN_OK);
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t c = 0; c < n; c++) {
                int64_t at = ((m * L + i) * n + c) * strides[rank - 1];
                const uint8_t *g = mem + (size_t)(m * (L / 32) + i / 32) * group;
                float d = attn_f16_to_f32((uint16_t)(g[2 * c] | g[2 * c + 1] << 8));
                float lo = attn_f16_to_f32((uint16_t)(g[2 * n + 2 * c] | g[2 * n + 2 * c + 1] << 8));
                if (isnan(d)) { /* a NaN or infinity among the channel's 32 values: all NaN */
                    CHECK(isnan(obuf[at]));
                    continue;
                }
                if (d >= 65504.0f || d < 0x1p-14f || fabsf(lo) >= 65504.0f) continue; /* saturated, subnormal, d = 0 */
                CHECK(fabsf(obuf[at] - fbuf[at]) <= d * 0.5f * (1 + 0x1p-10f) + (fabsf(lo) + levels * d) * 0x1p-10f +
                                                      fabsf(fbuf[at]) * 0x1p-22f);
            }
    /* the same groups widened into another dtype, C order: the f32 values converted */
    static const attn_dtype WIDE[4] = {ATTN_F64, ATTN_F16, ATTN_BF16, ATTN_BOOL};
    static double wide[FLOATS];
    const attn_dtype wd = WIDE[byte(r) % 4];
    attn_tensor w;
    CHECK(attn_tensor_init(&w, wide, wd, rank, sh, NULL, NULL) == ATTN_OK);
    memset(wide, 0xAA, sizeof wide);
    st = attn_dequantize(&w, mem, total, fm, &err);
    if (wd == ATTN_BOOL) {
        CHECK(st == ATTN_ERR_DTYPE && err.message[0]);
        for (size_t i = 0; i < sizeof wide; i++) CHECK(((const uint8_t *)wide)[i] == 0xAA);
        return;
    }
    CHECK(st == ATTN_OK);
    for (int64_t e = 0; e < mats * L * n; e++) {
        float x = obuf[e * strides[rank - 1]];
        if (wd == ATTN_F64) CHECK(isnan(x) ? isnan(wide[e]) : wide[e] == (double)x);
        else {
            uint16_t h = ((const uint16_t *)wide)[e], want = wd == ATTN_F16 ? attn_f32_to_f16(x) : attn_f32_to_bf16(x);
            float y = wd == ATTN_F16 ? attn_f16_to_f32(h) : attn_bf16_to_f32(h);
            CHECK(isnan(x) ? isnan(y) : h == want);
        }
    }
}

/* The block and fp8 formats through the other float dtypes (a third reading
 * of the input from its start): rows of f64, f16, bf16 or f32 values (or
 * bool, refused), their last dimension strided by 1 to 3, quantized; then
 * widened into f64, f16, bf16 or f32 rows strided the same way. Checks:
 * the bytes are those of the same values first rounded to f32 (attn.h:
 * "first rounded to f32"); each widened value is the f32 one converted
 * (exactly to f64, to nearest even to f16 and bf16); a refusal (a bool
 * source, a format that is not one, a row size the format cannot take, a
 * buffer one byte short) has its status and writes nothing. */
static uint8_t cmem[MEM], cmem2[MEM];
static double csrc[2048], cdst[2048];
static float cf32[2048], cwide[2048];
static void fuzz_convert(reader *r) {
    static const attn_dtype SRC[5] = {ATTN_F64, ATTN_F16, ATTN_BF16, ATTN_F32, ATTN_BOOL};
    static const attn_dtype FM[8] = {ATTN_Q8, ATTN_Q4, ATTN_Q4_1, ATTN_E4M3, ATTN_E5M2, ATTN_Q8, ATTN_F16, (attn_dtype)99};
    uint8_t b = byte(r);
    attn_dtype sd = SRC[b % 5], fm = FM[b / 5 % 8], dd = SRC[byte(r) % 4];
    int64_t rows = byte(r) % 4 + 1, cols = 32 * (byte(r) % 3 + 1), cs = byte(r) % 3 + 1;
    if (b >= 200) cols = byte(r) % 40 + 1; /* off the blocks' multiple now and then */
    bool fp8 = fm == ATTN_E4M3 || fm == ATTN_E5M2, known = fp8 || fm == ATTN_Q8 || fm == ATTN_Q4 || fm == ATTN_Q4_1;
    int64_t shape[2] = {rows, cols}, strides[2] = {cols * cs, cs}, n = rows * cols;
    attn_tensor src, f;
    CHECK(attn_tensor_init(&src, csrc, sd, 2, shape, strides, NULL) == ATTN_OK);
    CHECK(attn_tensor_init(&f, cf32, ATTN_F32, 2, shape, NULL, NULL) == ATTN_OK);
    for (int64_t i = 0; i < n; i++) { /* any f32 bits, then that value in the source's dtype */
        uint32_t u = (uint32_t)byte(r) << 24 | (uint32_t)byte(r) << 16 | (uint32_t)byte(r) << 8 | byte(r);
        float x;
        memcpy(&x, &u, 4);
        int64_t at = (i / cols) * cols * cs + (i % cols) * cs;
        switch (sd) {
        case ATTN_F64: ((double *)csrc)[at] = (double)x * (1 + 0x1p-40); cf32[i] = (float)(((double *)csrc)[at]); break;
        case ATTN_F16: ((uint16_t *)csrc)[at] = attn_f32_to_f16(x), cf32[i] = attn_f16_to_f32(((uint16_t *)csrc)[at]); break;
        case ATTN_BF16: ((uint16_t *)csrc)[at] = attn_f32_to_bf16(x), cf32[i] = attn_bf16_to_f32(((uint16_t *)csrc)[at]); break;
        case ATTN_F32: ((float *)csrc)[at] = x, cf32[i] = x; break;
        default: ((uint8_t *)csrc)[at] = (uint8_t)u, cf32[i] = 0; break;
        }
    }
    size_t row = known ? attn_quant_row_size(fm, cols) : 0, total = row * (size_t)rows;
    bool ok = sd != ATTN_BOOL && known && row;
    size_t offer = ok && byte(r) == 5 ? total - 1 : ok ? total : 64;
    memset(cmem, 0xAA, MEM);
    attn_error err;
    attn_status st = attn_quantize(cmem, offer, fm, &src, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (!known || sd == ATTN_BOOL) CHECK(st == ATTN_ERR_DTYPE);
    else if (!row) CHECK(st == ATTN_ERR_SHAPE);
    else if (offer < total) CHECK(st == ATTN_ERR_ARGUMENT);
    else CHECK(st == ATTN_OK);
    if (st) {
        for (size_t i = 0; i < MEM; i++) CHECK(cmem[i] == 0xAA);
        return;
    }
    memset(cmem2, 0xAA, MEM);
    CHECK(attn_quantize(cmem2, total, fm, &f, &err) == ATTN_OK);
    CHECK(!memcmp(cmem, cmem2, total)); /* the source's values first rounded to f32 */
    /* widened: f32 C order, then dd strided */
    attn_tensor w, d;
    CHECK(attn_tensor_init(&w, cwide, ATTN_F32, 2, shape, NULL, NULL) == ATTN_OK);
    CHECK(attn_dequantize(&w, cmem, total, fm, &err) == ATTN_OK);
    CHECK(attn_tensor_init(&d, cdst, dd, 2, shape, strides, NULL) == ATTN_OK);
    memset(cdst, 0x55, sizeof cdst);
    st = attn_dequantize(&d, cmem, total - (byte(r) == 9), fm, &err);
    if (st) {
        CHECK(st == ATTN_ERR_ARGUMENT);
        for (size_t i = 0; i < sizeof cdst; i++) CHECK(((uint8_t *)cdst)[i] == 0x55);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t at = (i / cols) * cols * cs + (i % cols) * cs;
        float x = cwide[i];
        switch (dd) {
        case ATTN_F64: CHECK(isnan(x) ? isnan(((double *)cdst)[at]) : ((double *)cdst)[at] == (double)x); break;
        case ATTN_F16: {
            uint16_t h = ((uint16_t *)cdst)[at];
            CHECK(isnan(x) ? isnan(attn_f16_to_f32(h)) : h == attn_f32_to_f16(x));
            break;
        }
        case ATTN_BF16: {
            uint16_t h = ((uint16_t *)cdst)[at];
            CHECK(isnan(x) ? isnan(attn_bf16_to_f32(h)) : h == attn_f32_to_bf16(x));
            break;
        }
        default: {
            float y = ((float *)cdst)[at];
            CHECK(isnan(x) ? isnan(y) : !memcmp(&x, &y, 4));
        }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader gr = {data, size};
    fuzz_groups(&gr);
    reader cr = {data, size};
    fuzz_convert(&cr);
    reader r = {data, size};
    attn_error err;
    attn_dtype fm = pick_format(&r);

    /* Row sizes at the edges. */
    int64_t n = pick_int(&r);
    if ((byte(&r) & 1) && n > INT64_MIN / 32 && n < INT64_MAX / 32) n *= 32;
    size_t rs = attn_quant_row_size(fm, n);
    bool fp8 = fm == ATTN_E4M3 || fm == ATTN_E5M2, blocks = fm == ATTN_Q8 || fm == ATTN_Q4 || fm == ATTN_Q4_1;
    CHECK(rs == 0 || fp8 || (blocks && n % 32 == 0));
    if (rs && fp8) CHECK(rs == (size_t)n);

    /* A description. */
    int rank = byte(&r) % 7 - (byte(&r) == 7);
    int64_t shape[ATTN_MAX_RANK + 1], strides[ATTN_MAX_RANK + 1];
    for (int d = 0; d < ATTN_MAX_RANK + 1; d++) shape[d] = pick_int(&r), strides[d] = byte(&r) < 200 ? 0 : pick_int(&r);
    if (rank > 0 && byte(&r) < 128) shape[rank - 1 < ATTN_MAX_RANK ? rank - 1 : 0] = 32 * (byte(&r) % 4 + 1);
    bool given = byte(&r) & 1;
    if (given && rank > 0 && rank <= ATTN_MAX_RANK) { /* C order, with a fuzzed stride now and then */
        int64_t step = (int64_t)attn_quant_row_size(fm, shape[rank - 1]);
        for (int d = rank - 1; d >= 0; d--) {
            int64_t s = d == rank - 1 ? 1 : step;
            if (strides[d] == 0) strides[d] = s;
            if (d < rank - 1 && shape[d] > 0 && step < INT64_MAX / shape[d]) step *= shape[d];
        }
    }
    attn_tensor t;
    attn_status st = attn_tensor_init(&t, mem, fm, rank, rank ? shape : NULL, given ? strides : NULL, &err);
    CHECK(st == ATTN_OK || err.message[0]);
    if (st) return 0;
    if (fm == ATTN_F32) return 0; /* a float tensor: not what this target describes */
    CHECK(t.rank >= 1 && (t.shape[t.rank - 1] <= 1 || t.strides[t.rank - 1] == 1));
    __int128 end = reach(&t);
    if (end < 0 || end > MEM) return 0; /* not ours: never handed over */
    /* The rows' bytes: the rest of the input, then zeros. */
    size_t take = r.n < (size_t)end ? r.n : (size_t)end;
    memcpy(mem, r.p, take);
    memset(mem + take, 0, (size_t)end - take);
    r.p += take, r.n -= take;

    /* Widen them, then quantize the widened floats again. */
    int64_t numel = attn_tensor_numel(&t), cols = t.shape[t.rank - 1], rows = numel / cols;
    if (numel > FLOATS) return 0;
    attn_tensor f;
    int64_t fshape[2] = {rows, cols};
    attn_tensor_init(&f, fbuf, ATTN_F32, 2, fshape, NULL, NULL);
    size_t row = attn_quant_row_size(fm, cols), total = row * (size_t)rows;
    bool packed = given ? false : true; /* C order over whole rows: the layout attn_quantize writes */
    if (packed && total <= MEM) {
        size_t offer = byte(&r) == 5 ? total - 1 : total;
        st = attn_dequantize(&f, mem, offer, fm, &err);
        CHECK(offer < total ? st == ATTN_ERR_ARGUMENT : st == ATTN_OK);
        if (!st) {
            static uint8_t again[MEM];
            st = attn_quantize(again, total, fm, &f, &err);
            CHECK(st == ATTN_OK);
            if (fp8)
                for (size_t i = 0; i < total; i++) {
                    /* NaN codes, and E5M2's infinities (which saturate), aside */
                    bool special = fm == ATTN_E4M3 ? (mem[i] & 0x7f) == 0x7f : (mem[i] & 0x7f) >= 0x7c;
                    if (!special) CHECK(again[i] == mem[i]);
                }
        }
    }

    /* Finite floats of any size, quantized and widened: each value within
     * half a step of its block (a step is the block's scale d), or within
     * the block's saturation. */
    for (int64_t i = 0; i < numel; i++) {
        uint32_t u = (uint32_t)byte(&r) << 24 | (uint32_t)byte(&r) << 16 | (uint32_t)byte(&r) << 8 | byte(&r);
        float x;
        memcpy(&x, &u, 4);
        fbuf[i] = isfinite(x) ? x : 0.0f;
    }
    if (blocks && total <= MEM) {
        st = attn_quantize(mem, total, fm, &f, &err);
        CHECK(st == ATTN_OK);
        attn_tensor o;
        attn_tensor_init(&o, obuf, ATTN_F32, 2, fshape, NULL, NULL);
        CHECK(attn_dequantize(&o, mem, total, fm, &err) == ATTN_OK);
        size_t bb = fm == ATTN_Q8 ? 34 : fm == ATTN_Q4 ? 18 : 20;
        for (int64_t i = 0; i < numel; i++) {
            const uint8_t *blk = mem + (size_t)(i / cols) * row + (size_t)(i % cols / 32) * bb;
            float d = fabsf(attn_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8)));
            if (d >= 65504.0f || d < 0x1p-14f) continue; /* saturated or subnormal scales: bounded elsewhere */
            if (fm == ATTN_Q4_1) {
                /* 16 levels from the f16 minimum m up: half a step, plus m's
                 * and d's f16 rounding and the sum's f32 rounding */
                float m = fabsf(attn_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8)));
                if (m >= 65504.0f) continue;
                CHECK(fabsf(obuf[i] - fbuf[i]) <= d * 0.5f * (1 + 0x1p-10f) + (m + 15 * d) * 0x1p-10f +
                                                      fabsf(fbuf[i]) * 0x1p-22f);
                continue;
            }
            CHECK(fabsf(obuf[i] - fbuf[i]) <= d * 0.5f * (1 + 0x1p-10f) || fabsf(fbuf[i]) > d * 7.0f);
        }
    }

    /* The described tensor as k and v of attention, with f32 queries: a
     * few (the decode kernel) or more than ATTN_DECODE_MAX_L = 8 (the
     * flash kernel). */
    if (t.rank >= 2 && numel <= FLOATS && t.shape[t.rank - 1] <= 256) {
        int64_t qshape[ATTN_MAX_RANK];
        memcpy(qshape, t.shape, sizeof qshape);
        uint8_t lb = byte(&r);
        qshape[t.rank - 2] = lb % 3 + 1 + (lb & 0x80 ? 8 : 0);
        attn_tensor q, out;
        int64_t qn = 1;
        for (int d = 0; d < t.rank; d++) qn *= qshape[d];
        if (qn > FLOATS) return 0;
        for (int64_t i = 0; i < qn; i++) qbuf[i] = (float)(byte(&r) % 17) - 8.0f;
        attn_tensor_init(&q, qbuf, ATTN_F32, t.rank, qshape, NULL, NULL);
        attn_tensor_init(&out, obuf, ATTN_F32, t.rank, qshape, NULL, NULL);
        /* fp8's per-head scales (k_descale, v_descale) now and then: a small
         * shape from the input, values from it (0, negative, NaN, inf among them) */
        static float scales[64];
        static const float PICK[8] = {1.0f, 0.5f, 3.0f, 0.0f, -1.0f, NAN, INFINITY, 1e-30f};
        attn_tensor sc;
        attn_sdpa_options o = attn_sdpa_options_default();
        uint8_t sb = byte(&r);
        if (sb & 3) {
            int64_t ss[3] = {byte(&r) % 4, byte(&r) % 4, byte(&r) % 4};
            for (int i = 0; i < 64; i++) scales[i] = PICK[byte(&r) % 8];
            attn_tensor_init(&sc, scales, ATTN_F32, 1 + sb / 4 % 3, ss, NULL, NULL);
            if (sb & 1) o.k_descale = &sc;
            if (sb & 2) o.v_descale = &sc;
        }
        static float before[FLOATS];
        memcpy(before, obuf, sizeof before);
        st = attn_sdpa(&out, NULL, NULL, &q, &t, &t, &o, &err);
        CHECK(st == ATTN_OK || err.message[0]);
        if (st) CHECK(!memcmp(before, obuf, sizeof before)); /* refused: nothing written */
        if (!st && !o.k_descale && !o.v_descale) same_as_widened(&t, &q, &out, fm, qshape[t.rank - 2]);
        if (t.rank == 3) { /* a ragged batch of one sequence: (S, H, E) packed */
            int64_t cu_q[2] = {0, q.shape[0]}, cu_k[2] = {0, t.shape[0]};
            memcpy(before, obuf, sizeof before);
            st = attn_sdpa_varlen(&out, NULL, &q, &t, &t, cu_q, cu_k, 1, NULL, &o, &err);
            CHECK(st == ATTN_OK || err.message[0]);
            if (st) CHECK(!memcmp(before, obuf, sizeof before));
        }
    }
    return 0;
}
