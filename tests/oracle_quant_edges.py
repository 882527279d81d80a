#!/usr/bin/python3
"""oracle_quant_edges.py -- the quantized formats' corner cases, each block's
bytes written out by hand from attn.h's "Quantized storage" (not computed
by a reference that could share a mistake with the library): ties of the
f16 scale's rounding and of the codes' (to even), f16-subnormal scales and
scales that round to zero, the clamp that catches a scale rounded down,
blocks whose largest is FLT_MAX or whose scale overflows f16, +0 / -0
blocks and which of equals a block takes, fp8's saturation, ties, signed
zeros and NaN, f64 input rounded to f32 first (so an f64 past FLT_MAX is
an infinity, and a value rounds twice), rows whose length is not a multiple
of 32, and the Hadamard rotation bit for bit where its result is one
rounding of an exact number.

tests/oracle_quant.py checks the same formats on random data against a
NumPy reference; this file pins the cases that data would rarely hit.

Usage: oracle_quant_edges.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why" /
"skip NAME: why" (decode's integer kernels without ATTN_QDOT=widen).
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_quant import (F32, F64, Q4, Q4_1, Q8, E4M3, E5M2, ERR, Lib, ref_dequantize,  # noqa: E402
                          ref_quantize, same_floats)
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
os.environ.setdefault("ATTN_LIBRARY", os.path.join(BUILD, "libattn.so"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from attn import _lib  # noqa: E402
from attn._core import view  # noqa: E402
from attn._lib import Error  # noqa: E402

ERR_SCALE = 8
FLT_MAX = float(np.finfo(np.float32).max)
failed = 0


def report(name, why):
    global failed
    if why:
        failed += 1
        print("FAIL %s: %s" % (name, why))
    else:
        print("ok %s" % name)


def f16(bits):
    """The two little-endian bytes of an f16 bit pattern."""
    return [bits & 0xff, bits >> 8]


def block(values, n=32):
    """A (1, n) f32 row: values at the front, zeros after."""
    x = np.zeros((1, n), np.float32)
    x[0, :len(values)] = np.array(values, np.float64).astype(np.float32)
    return x


def q8_bytes(d_bits, codes, n=32):
    """A q8 block: d, then the int8 codes (the given ones, 0 after)."""
    q = list(codes) + [0] * (n - len(codes))
    return f16(d_bits) + [c & 0xff for c in q]


def q4_bytes(d_bits, codes):
    """A q4 block from its 32 codes 0..15 (8, the zero, after the given)."""
    c = list(codes) + [8] * (32 - len(codes))
    return f16(d_bits) + [c[i] | (c[i + 16] << 4) for i in range(16)]


def q4_1_bytes(d_bits, m_bits, codes):
    c = list(codes) + [0] * (32 - len(codes))
    return f16(d_bits) + f16(m_bits) + [c[i] | (c[i + 16] << 4) for i in range(16)]


def bytes_why(st, msg, got, want):
    """None where a call succeeded and wrote the expected bytes, else why not."""
    if st:
        return "status %d: %s" % (st, msg)
    got, want = got.reshape(-1), np.array(want, np.uint8).reshape(-1)
    if got.size != want.size:
        return "%d bytes, attn.h gives %d" % (got.size, want.size)
    if np.array_equal(got, want):
        return None
    i = int(np.argmax(got != want))
    return "byte %d: %#04x, attn.h gives %#04x" % (i, got[i], want[i])


def check_bytes(lib, name, x, fmt, want, dtype=F32):
    """Quantize x (viewed as dtype): the expected bytes?"""
    st, msg, got = lib.quantize(x, dtype, fmt)
    report(name, bytes_why(st, msg, got, want))


def check_values(lib, name, raw, fmt, want):
    raw = np.array(raw, np.uint8).reshape(1, -1)
    want = np.array(want, np.float32).reshape(1, -1)
    st, msg, back = lib.dequantize(raw, fmt, want.shape)
    report(name, "status %d: %s" % (st, msg) if st else same_floats(back, want))


def test_q8(lib):
    # d = a / 127 exactly halfway between two f16 values: ties to even.
    check_bytes(lib, "q8_scale_tie_rounds_down_to_even", block([127 * (1 + 2.0 ** -11)]), Q8,
                q8_bytes(0x3c00, [127]))
    check_bytes(lib, "q8_scale_tie_rounds_up_to_even", block([127 * (1 + 3 * 2.0 ** -11), -63.5]), Q8,
                # -63.5 / (1 + 2^-9) = -63.376...: -63
                q8_bytes(0x3c02, [127, -63]))
    # d an f16 subnormal, itself a tie (1.5 * 2^-24 -> 2 * 2^-24), and code ties against it.
    t = 2.0 ** -24
    check_bytes(lib, "q8_subnormal_scale_and_code_ties", block([127 * 1.5 * t, -127 * 1.5 * t, 3 * t, t, -5 * t, 7 * t]),
                Q8, q8_bytes(0x0002, [95, -95, 2, 0, -2, 4]))
    # d rounded down to the smallest subnormal: x / d passes 127, the clamp holds it.
    check_bytes(lib, "q8_scale_rounded_down_clamps", block([127 * 1.25 * t, -127 * 1.25 * t]), Q8,
                q8_bytes(0x0001, [127, -127]))
    # a / 127 = 2^-25, halfway between 0 and 2^-24: to even, 0, so every code is 0.
    check_bytes(lib, "q8_scale_tie_to_zero", block([127 * 2.0 ** -25, -3 * 2.0 ** -26]), Q8, q8_bytes(0x0000, []))
    # FLT_MAX: d overflows f16, 65504; the codes saturate at +-127, never -128.
    check_bytes(lib, "q8_flt_max_saturates", block([FLT_MAX, -FLT_MAX, 65504 * 127, 1, -65504 * 200]), Q8,
                q8_bytes(0x7bff, [127, -127, 127, 0, -127]))
    # a / 127 = 65520, f16's tie between 65504 and infinity: infinity, so 65504.
    check_bytes(lib, "q8_scale_tie_to_infinity", block([65520 * 127]), Q8, q8_bytes(0x7bff, [127]))
    # a block of -0: a = 0, d = +0 (bytes 00 00), every code 0; -0 codes are 0, not 0x80.
    check_bytes(lib, "q8_negative_zero_block", -np.zeros((1, 32), np.float32), Q8, q8_bytes(0x0000, []))
    check_values(lib, "q8_reads_minus_128", q8_bytes(0x3c00, [-128, 127]), Q8, [-128, 127] + [0] * 30)
    check_values(lib, "q8_reads_nan_scale", q8_bytes(0x7e00, [1, 0]), Q8, [np.nan] * 32)
    check_values(lib, "q8_reads_infinite_scale", q8_bytes(0x7c00, [1, -1, 0]), Q8, [np.inf, -np.inf] + [np.nan] * 30)


def test_q8_error_bound(lib):
    """attn.h's bound on q8's error: within d/2 for blocks whose largest |x|
    (a) is at least 127 · 255 · 2^-25; below, within the larger of d/2 and
    127 · 2^-25, the clamp holding the largest values where d's subnormal
    f16 rounding fell short of a / 127 (which happens there: checked too)."""
    rng = np.random.default_rng(9)
    a = np.exp(rng.uniform(np.log(1e-8), np.log(1e-1), 4096))
    x = (rng.uniform(-1, 1, (4096, 32)) * a[:, None]).astype(np.float32)
    x[:, 0] = a.astype(np.float32)
    st, msg, raw = lib.quantize(x, F32, Q8)
    st2, msg2, back = lib.dequantize(raw, Q8, x.shape)
    if st or st2:
        report("q8_error_bound", "status %d: %s" % (st or st2, msg or msg2))
        return
    d = raw[:, :2].copy().view("<u2").view(np.float16).astype(np.float64)  # (blocks, 1)
    err = np.abs(back.astype(np.float64) - x.astype(np.float64))              # exact: both are f32 values
    a = np.abs(x).max(axis=1).astype(np.float64)[:, None]
    low = a < 127 * 255 * 2.0 ** -25
    bound = np.where(low, np.maximum(d / 2, 127 * 2.0 ** -25), d / 2)
    bad = err > bound
    report("q8_error_bound", "block %d (a %.3g, d %.3g): error %.3g > %.3g" % (
        np.argwhere(bad)[0][0], a[bad.any(axis=1)][0, 0], d[bad.any(axis=1)][0, 0], err[bad][0], bound[bad][0])
        if bad.any() else None if (err > d / 2)[low[:, 0]].any() else "no block below 9.7e-4 errs past d/2")


def test_q4(lib):
    # m positive: d = m / -8 negative, so m is code 0 and -7·d... code 15.
    check_bytes(lib, "q4_positive_max_gives_negative_scale", block([8, -7, 2.5, -3.5, 0.5, -0.5]), Q4,
                # x / -1 = -8, 7, -2.5 (tie: -2), 3.5 (tie: 4), -0.5 (tie: 0), 0.5 (tie: 0); plus 8
                q4_bytes(0xbc00, [0, 15, 6, 12, 8, 8]))
    # the first of equal |x| sets d's sign
    x = block([-4, 0, 0, 0, 0, 4])
    check_bytes(lib, "q4_first_of_equals_negative", x, Q4, q4_bytes(0x3800, [0, 8, 8, 8, 8, 15]))
    check_bytes(lib, "q4_first_of_equals_positive", -x, Q4, q4_bytes(0xb800, [0, 8, 8, 8, 8, 15]))
    # zeros: m = +0 gives d = -0 (00 80), m = -0 gives +0 (00 00); the first of equals decides.
    z = np.zeros((1, 32), np.float32)
    check_bytes(lib, "q4_positive_zero_block", z, Q4, q4_bytes(0x8000, []))
    check_bytes(lib, "q4_negative_zero_block", -z, Q4, q4_bytes(0x0000, []))
    mixed = z.copy()
    mixed[0, 0] = -0.0
    check_bytes(lib, "q4_negative_zero_first", mixed, Q4, q4_bytes(0x0000, []))
    mixed = -z
    mixed[0, 0] = 0.0
    check_bytes(lib, "q4_positive_zero_first", mixed, Q4, q4_bytes(0x8000, []))
    # m / -8 rounds to zero in f16: d = -0 for a positive m, +0 for a negative one; codes 8.
    check_bytes(lib, "q4_scale_underflows_positive", block([2.0 ** -28, -2.0 ** -29]), Q4, q4_bytes(0x8000, []))
    check_bytes(lib, "q4_scale_underflows_negative", block([-2.0 ** -28, 2.0 ** -29]), Q4, q4_bytes(0x0000, []))
    # a subnormal d rounded up: m / -8 = 1.6 · 2^-24 -> 2^-23, so m / d = -6.4 takes code -6 (2), not -8.
    t = 2.0 ** -24
    check_bytes(lib, "q4_subnormal_scale_rounded_up_m_not_minus_8", block([-12.8 * t, 6.4 * t]), Q4, q4_bytes(0x0002, [2, 11]))
    # an f16 scale tie: m / -8 = 1 + 2^-11 -> 1; m / d = -8.0078 rounds to -8.
    check_bytes(lib, "q4_scale_tie", block([-8 * (1 + 2.0 ** -11), 7.5]), Q4, q4_bytes(0x3c00, [0, 15]))
    # FLT_MAX: d = 65504 with m's sign flipped; codes clamp to -8 .. 7.
    check_bytes(lib, "q4_flt_max_saturates", block([-FLT_MAX, FLT_MAX, 65504.0]), Q4, q4_bytes(0x7bff, [0, 15, 9]))
    check_bytes(lib, "q4_positive_flt_max_saturates", block([FLT_MAX, -FLT_MAX]), Q4, q4_bytes(0xfbff, [0, 15]))
    check_values(lib, "q4_reads_every_code", q4_bytes(0xc000, list(range(16)) * 2), Q4,
                 [(c - 8) * -2.0 for c in range(16)] * 2)


def test_q4_1(lib):
    check_bytes(lib, "q4_1_code_ties_to_even", block([0, 15, 2.5, 3.5, 14.5, 0.5]), Q4_1,
                q4_1_bytes(0x3c00, 0x0000, [0, 15, 2, 4, 14, 0]))
    # every value equal, its f16 rounding above it: d would be negative, so 0 (00 00), codes 0.
    check_bytes(lib, "q4_1_minimum_rounded_above", np.full((1, 32), 1.0006, np.float32), Q4_1,
                q4_1_bytes(0x0000, 0x3c01, []))
    # -0 then +0: lo and hi are the first of equals, -0; m keeps the sign bit, d = +0.
    z = np.zeros((1, 32), np.float32)
    z[0, 0] = -0.0
    check_bytes(lib, "q4_1_negative_zero_first", z, Q4_1, q4_1_bytes(0x0000, 0x8000, []))
    # lo = -FLT_MAX, hi = FLT_MAX: m = -65504, (hi - m) / 15 overflows f16: 65504.
    check_bytes(lib, "q4_1_flt_max_range", block([-FLT_MAX, FLT_MAX, 0, 65504 * 3]), Q4_1,
                q4_1_bytes(0x7bff, 0xfbff, [0, 15, 1, 4] + [1] * 28))  # 0 - m = 65504: code 1
    # d an f16 subnormal (2^-24), a code tie against it: 7.5 -> 8.
    t = 2.0 ** -24
    check_bytes(lib, "q4_1_subnormal_scale", block([15 * t, 7.5 * t, 6.5 * t]), Q4_1,
                q4_1_bytes(0x0001, 0x0000, [15, 8, 6]))
    # (hi - m) / 15 rounds to 0 in f16: d = 0, every code 0.
    check_bytes(lib, "q4_1_scale_underflows", block([15 * 2.0 ** -26]), Q4_1, q4_1_bytes(0x0000, 0x0000, []))
    # value = code · d + m, one f32 rounding: 15 · 65504 + 65504 = 1048064.
    check_values(lib, "q4_1_reads_sum", q4_1_bytes(0x7bff, 0x7bff, [15, 1]), Q4_1, [1048064, 131008] + [65504] * 30)


def test_groups(lib):
    """Keys per channel (q4c, q2c; attn.h, "Keys quantized per channel"):
    one group of 32 positions and 4 channels, each channel a corner case,
    the bytes laid out by hand: channel 0 spans 0 .. 2^b - 1 (d = 1, m = 0)
    with 1.5, a code tie, elsewhere (to even: 2); channel 1 is -0 then +0
    (m keeps -0's sign bit, d = 0, codes 0); channel 2 holds a NaN (its d
    and m 0x7e00, codes 0; the other channels untouched); channel 3 spans
    -FLT_MAX .. FLT_MAX (m = -65504, d overflows f16: 65504, 0 is code 1)."""
    for name, fmt, bits in (("q4c", 11, 4), ("q2c", 12, 2)):
        top = (1 << bits) - 1
        x = np.zeros((1, 32, 4), np.float32)
        x[0, :, 0] = 1.5
        x[0, 0, 0], x[0, 1, 0] = 0, top
        x[0, 0, 1] = -0.0
        x[0, :, 2], x[0, 5, 2] = 1, np.nan
        x[0, 0, 3], x[0, 1, 3] = -FLT_MAX, FLT_MAX
        codes = np.zeros((32, 4), int)
        codes[:, 0], codes[0, 0], codes[1, 0] = 2, 0, top
        codes[:, 3], codes[0, 3], codes[1, 3] = 1, 0, top
        want = f16(0x3c00) + f16(0x0000) + f16(0x7e00) + f16(0x7bff) + f16(0x0000) + f16(0x8000) + f16(0x7e00) + f16(0xfbff)
        per = 8 // bits
        for t in range(32):  # position t's channels c in byte c // per, bits bits · (c % per)
            want += [sum(int(codes[t, c]) << (bits * (c % per)) for c in range(b * per, b * per + per)) for b in range(4 // per)]
        st, msg, got = lib.quantize_groups(x, F32, fmt)
        report("%s_channel_corner_cases" % name, bytes_why(st, msg, got, want))
        want = np.array(want, np.uint8).reshape(1, -1)
        st, msg, back = lib.dequantize(want, fmt, (1, 32, 4))
        vals = np.zeros((32, 4), np.float32)
        vals[:, 0] = codes[:, 0]
        vals[:, 1] = 0.0  # code 0 · d 0 is +0, and +0 + -0 is +0: it reads back the same
        vals[:, 2] = np.nan
        vals[:, 3] = (codes[:, 3] * 65504 - 65504).astype(np.float32)
        report("%s_channel_corner_cases_read_back" % name, "status %d: %s" % (st, msg) if st else same_floats(back, vals))


def fp8_row(values):
    return np.array(values, np.float64).astype(np.float32).reshape(1, -1)


def test_fp8(lib):
    nan = float("nan")
    # e4m3: saturation (448, 464 the tie with the absent 480, infinities), NaN with its
    # sign, signed zeros, subnormal ties (2^-10 -> 0, 3 · 2^-10 -> code 2), normal ties.
    x = fp8_row([448, 449, 464, 1e30, np.inf, -np.inf, nan, -nan, -0.0, 2.0 ** -10, 3 * 2.0 ** -10,
                 -2.0 ** -9, 240, 1.0625, 1.1875, -1e-45])
    check_bytes(lib, "e4m3_saturation_ties_signs", x, E4M3,
                [0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7f, 0xff, 0x80, 0x00, 0x02, 0x81, 0x77, 0x38, 0x3a, 0x80])
    # e5m2: 61440 is the tie between 57344 and 65536 (infinity's code): saturated, 57344;
    # infinity saturates too; NaN is 0x7e; subnormal ties.
    x = fp8_row([57344, 61440, 65536, np.inf, -np.inf, nan, -nan, 2.0 ** -17, 3 * 2.0 ** -17, -0.0, 1.125, 1.375])
    check_bytes(lib, "e5m2_saturation_ties_signs", x, E5M2,
                [0x7b, 0x7b, 0x7b, 0x7b, 0xfb, 0x7e, 0xfe, 0x00, 0x02, 0x80, 0x3c, 0x3e])
    check_values(lib, "e4m3_reads_nan_and_limits", [0x7f, 0xff, 0x7e, 0x01, 0x80], E4M3,
                 [nan, nan, 448, 2.0 ** -9, -0.0])
    check_values(lib, "e5m2_reads_infinities", [0x7c, 0xfc, 0x7d, 0xff, 0x7b, 0x01], E5M2,
                 [np.inf, -np.inf, nan, nan, 57344, 2.0 ** -16])
    # any n: rows of 1, 3 and 33 values
    for n in (1, 3, 33):
        x = np.resize(fp8_row([1.0, -2.0, 0.5]), (2, n)).astype(np.float32)
        want = np.resize(np.array([0x38, 0xc0, 0x30], np.uint8), (2, n))
        check_bytes(lib, "e4m3_row_of_%d" % n, x, E4M3, want)


def test_f64_input(lib):
    # f64 is rounded to f32 first, then the rules apply: 1.0625 + 2^-40 is 1.0625 in f32,
    # e4m3's tie between 1 and 1.125, so 1 (a direct rounding of the f64 would give 1.125);
    # past FLT_MAX the f32 is infinity, which fp8 saturates and q8 turns into a NaN block.
    x = np.array([[1.0625 + 2.0 ** -40, 1e39, -1e39, 1e-50, -1e-50, FLT_MAX * (1 + 2.0 ** -30)]])
    check_bytes(lib, "e4m3_from_f64_rounds_to_f32_first", x, E4M3, [0x38, 0x7e, 0xfe, 0x00, 0x80, 0x7e], dtype=F64)
    x = np.zeros((1, 64))
    x[0, 0] = 1e39
    x[0, 32] = FLT_MAX * (1 + 2.0 ** -30)  # rounds to FLT_MAX: finite
    check_bytes(lib, "q8_from_f64_past_flt_max_is_nan", x, Q8,
                q8_bytes(0x7e00, []) + q8_bytes(0x7bff, [127]), dtype=F64)
    x = np.zeros((1, 32))
    x[0, :3] = [127, 2.5 + 2.0 ** -40, -3.5 - 2.0 ** -40]  # d = 1; in f32 the codes are ties: 2 and -4, not 3 and -4
    check_bytes(lib, "q8_from_f64_rounds_to_f32_first", x, Q8, q8_bytes(0x3c00, [127, 2, -4]), dtype=F64)


def test_dequantize_16bit(lib):
    """The exact f32 values rounded to nearest even for f16 and bf16: a q4_1
    block of m = 1 and d = 2^-11 (f16) or 2^-8 (bf16) reads codes 1 and 3 as
    ties; q8's 127 · 65504 passes f16's range: infinity."""
    for name, dt, npt, d_bits, d in (("f16", 4, np.float16, 0x1000, 2.0 ** -11), ("bf16", 5, np.uint16, 0x1c00, 2.0 ** -8)):
        raw = np.array(q4_1_bytes(d_bits, 0x3c00, [1, 3, 2]), np.uint8).reshape(1, -1)
        with np.errstate(invalid="ignore"):  # Lib.dequantize fills its output with NaN first: 0 as uint16
            st, msg, back = lib.dequantize(raw, Q4_1, (1, 32), dt, npt)
        back = back.astype(np.float32) if dt == 4 else (back.astype(np.uint32) << 16).view(np.float32)
        # 1 + d -> 1; 1 + 3d -> 1 + 4d (the even neighbour); 1 + 2d exact
        report("dequantize_q4_1_to_%s_ties_to_even" % name, "status %d: %s" % (st, msg) if st else
               same_floats(back[0, :4], [1, 1 + 4 * d, 1 + 2 * d, 1]))
    raw = np.array(q8_bytes(0x7bff, [127, -127, 1]), np.uint8).reshape(1, -1)
    st, msg, back = lib.dequantize(raw, Q8, (1, 32), 4, np.float16)
    report("dequantize_q8_to_f16_overflows_to_infinity", "status %d: %s" % (st, msg) if st else
           same_floats(back[0, :3].astype(np.float32), [np.inf, -np.inf, 65504]))


def test_shapes(lib):
    for fmt, name in ((Q8, "q8"), (Q4, "q4"), (Q4_1, "q4_1")):
        for n in (1, 16, 33, 48):
            dst = np.full(256, 0xAA, np.uint8)
            st, msg, _ = lib.quantize(np.ones((2, n), np.float32), F32, fmt, size=256, dst=dst)
            report("%s_row_of_%d_refused" % (name, n), None if st == ERR["SHAPE"] and msg and (dst == 0xAA).all()
                   else "status %d (%s)" % (st, msg))


def test_hadamard(lib):
    """n a power of 4: sqrt(n) is a power of two, so H x / sqrt(n) of integer
    rows is an exact number in f64, and the f32 result is its one rounding
    (attn.h: "computed in f64 and rounded once"), ties to even included."""
    lib.lib.attn_hadamard.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    rng = np.random.default_rng(7)
    for n in (4, 16, 64, 256):
        H = np.array([[1]])
        while len(H) < n:
            H = np.block([[H, H], [H, -H]])
        # integers of 25 bits: sums need more than f32's 24, so the rounding (and ties) matter
        x = rng.integers(-2 ** 25, 2 ** 25, (8, n)).astype(np.float32)
        x[0] = 2 ** 24 + 1 if n == 4 else x[0]  # f32 rounds it to 2^24
        x[1, :] = 0
        x[1, 0], x[1, 1] = 2.0 ** 24, 1.0  # rows (2^24 ± 1) / 2: ties between f32 neighbours
        exact = (H.astype(np.float64) @ x.astype(np.float64).T).T / np.sqrt(n)  # integers < 2^33 times 2^-k: exact
        want = exact.astype(np.float32)
        got = x.copy()
        err = Error()
        st = lib.lib.attn_hadamard(ctypes.byref(view(got, F32)), ctypes.byref(err))
        report("hadamard_f32_n%d_one_rounding_bitwise" % n,
               "status %d: %s" % (st, err.message.decode()) if st else same_floats(got, want))
        back = got.astype(np.float64)
        st = lib.lib.attn_hadamard(ctypes.byref(view(back, F64)), ctypes.byref(err))
        want_back = (H.astype(np.float64) @ got.astype(np.float64).T).T / np.sqrt(n)
        report("hadamard_f64_n%d_round_trip_bitwise" % n,
               "status %d" % st if st else (None if np.array_equal(back, want_back) else "differs"))


def new_cache(E, dtype, k_scale=None, v_scale=None, hadamard=0, heads=2, capacity=32):
    """A contiguous cache of one sequence (attn.h's attn_kv_cache_desc) and
    the memory that holds it, or (None, status message)."""
    d = _lib.default(_lib.KVCacheDesc)
    d.batch, d.heads, d.capacity, d.key_dim, d.value_dim, d.dtype, d.hadamard = 1, heads, capacity, E, E, dtype, hadamard
    keep = []
    for field, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is not None:
            arr = (ctypes.c_float * len(s))(*s)
            keep.append(arr)
            setattr(d, field, ctypes.cast(arr, ctypes.POINTER(ctypes.c_float)))
    size = ctypes.c_size_t()
    err = _lib.Error()
    st = _lib.LIB.attn_kv_cache_bytes(ctypes.byref(size), ctypes.byref(d), ctypes.byref(err))
    if st:
        return None, (st, err.message.decode())
    mem = np.zeros(max(size.value, 1), np.uint8)
    cache = ctypes.c_void_p()
    st = _lib.LIB.attn_kv_cache_init(ctypes.byref(cache), ctypes.c_void_p(mem.ctypes.data), size.value, ctypes.byref(d),
                                     ctypes.byref(err))
    return ((cache, mem, keep), None) if st == 0 else (None, (st, err.message.decode()))


def append_gather(cache, k, v):
    """Append k, v (Hk, n, E) f32 and gather them back: (status, message, k, v)."""
    err = _lib.Error()
    st = _lib.LIB.attn_kv_cache_append(cache[0], ctypes.byref(view(k)), ctypes.byref(view(v)), ctypes.byref(err))
    gk, gv = np.full_like(k, np.nan), np.full_like(v, np.nan)
    if st == 0:
        st = _lib.LIB.attn_kv_cache_gather(ctypes.byref(view(gk)), ctypes.byref(view(gv)), cache[0], ctypes.byref(err))
    return st, err.message.decode(), gk, gv


def test_caches():
    """fp8 with one scale per head at its edges: a cache stores fp8(x / s),
    x / s in f32, and gathers code · s (attn.h, "fp8 with one scale per
    head"); a subnormal s is finite and > 0, so it is taken, and x / s
    overflowing f32 saturates as infinity does. Scales 0, -0, negative,
    infinite and NaN are refused with ATTN_ERR_SCALE. Then the Hadamard
    rotation's round trip bit for bit: E = 64, where H = H_64 / 8 scales by
    a power of two and rows of multiples of 2^-8 below 2^12 give exact f64
    sums, so the stored rows are the format of the exact H x rounded once to
    f32 and gather gives the exact H (widened row) rounded once."""
    nan, inf, t = float("nan"), float("inf"), 2.0 ** -149
    k = np.array([[[224, 300, inf, -inf, nan, 0, -0.0, 1]],
                  [[1, t, 3 * t, 0, -1e30, -t, 2 * t, 0]]], np.float32)           # (Hk, 1, E)
    v = np.array([[[3.1875, 1, 1344, 1350, -3 * 2.0 ** -10, 0, 0, 0]],
                  [[1, 2, 3, 4, 5, 6, 7, 8]]], np.float32)
    cache, why = new_cache(8, E4M3, k_scale=[0.5, 2.0 ** -140], v_scale=[3.0, 1.0])
    if cache is None:
        report("fp8_cache_with_a_subnormal_scale", "status %d: %s" % why)
    else:
        st, msg, gk, gv = append_gather(cache, k, v)
        # head 0, s = 0.5: 448 and past it saturate (code 0x7e, 224 back), infinities too, NaN stays.
        # head 1, s = 2^-140: 1 / s = 2^140 overflows f32, so saturates: 448 · 2^-140; 2^-149 / s
        # = 2^-9, e4m3's least subnormal; 2 · 2^-149 / s = 2^-8, exact.
        want_k = [[224, 224, 224, -224, nan, 0, -0.0, 1],
                  [448 * 2.0 ** -140, t, 3 * t, 0, -448 * 2.0 ** -140, -t, 2 * t, 0]]
        # v head 0, s = 3: 3.1875 / 3 = 1.0625, e4m3's tie between 1 and 1.125: 1, so 3; 1 / 3 in
        # f32 is 0.33333334 -> 0.34375, read back 1.03125; 1344 / 3 = 448 exactly; 1350 / 3 = 450
        # saturates to 448; -2^-10 (a tie with 0 after the division) -> -0.
        want_v0 = [3, 1.03125, 1344, 1344, -0.0, 0, 0, 0]
        why = "status %d: %s" % (st, msg) if st else (same_floats(gk[:, 0], want_k) or same_floats(gv[0, 0], want_v0)
                                                      or same_floats(gv[1, 0], v[1, 0]))
        report("fp8_cache_scaled_saturation_ties_subnormal_scale", why)
    for label, bad in (("zero", 0.0), ("minus_zero", -0.0), ("negative", -1.0), ("infinity", inf), ("nan", nan),
                       ("negative_subnormal", -t)):
        cache, why = new_cache(8, E4M3, k_scale=[1.0, bad])
        report("fp8_cache_k_scale_%s_refused" % label, None if cache is None and why[0] == ERR_SCALE
               else "accepted" if cache is not None else "status %d: %s" % why)
        cache, why = new_cache(8, E5M2, v_scale=[bad, 1.0])
        report("fp8_cache_v_scale_%s_refused" % label, None if cache is None and why[0] == ERR_SCALE
               else "accepted" if cache is not None else "status %d: %s" % why)

    rng = np.random.default_rng(11)
    E, n = 64, 20
    H = np.array([[1.0]])
    while len(H) < E:
        H = np.block([[H, H], [H, -H]])
    k = (np.round(rng.standard_normal((2, n, E)) * 300 * 256) / 256).astype(np.float32)
    k[..., 5] *= 8  # an outlier channel
    v = rng.standard_normal((2, n, E)).astype(np.float32)
    for fname, fmt, scale in (("q8", Q8, None), ("q4", Q4, None), ("q4_1", Q4_1, None), ("e5m2", E5M2, None),
                              ("e4m3_scaled", E4M3, [0.75, 3.0])):
        cache, why = new_cache(E, fmt, k_scale=scale, hadamard=1)
        if cache is None:
            report("hadamard_cache_%s_round_trip_bitwise" % fname, "status %d: %s" % why)
            continue
        st, msg, gk, gv = append_gather(cache, k, v)
        hk = ((k.astype(np.float64) @ H.T) / 8).astype(np.float32)  # exact, rounded once
        if scale is not None:
            hk = hk / np.array(scale, np.float32)[:, None, None]     # f32 division
        stored = ref_quantize(hk.reshape(-1, E), fmt)
        widened = ref_dequantize(stored, fmt, E).reshape(k.shape)
        if scale is not None:
            widened = widened * np.array(scale, np.float32)[:, None, None]
        want = ((widened.astype(np.float64) @ H.T) / 8).astype(np.float32)
        want_v = ref_dequantize(ref_quantize(v.reshape(-1, E), fmt), fmt, E).reshape(v.shape)  # values not turned
        why = "status %d: %s" % (st, msg) if st else (same_floats(gk, want) or same_floats(gv, want_v))
        report("hadamard_cache_%s_round_trip_bitwise" % fname, why)


def qtensor(codes, fmt):
    """An attn_tensor of quantized rows over a C-contiguous uint8 array
    (codes.shape[:-1] rows): the shape counts values, strides bytes."""
    t = _lib.Tensor()
    n = codes.shape[-1] if fmt in (E4M3, E5M2) else codes.shape[-1] // {Q8: 34, Q4: 18, Q4_1: 20}[fmt] * 32
    t.data, t.dtype, t.rank = codes.ctypes.data, fmt, codes.ndim
    for d in range(codes.ndim):
        t.shape[d], t.strides[d] = codes.shape[d], codes.strides[d]
    t.shape[codes.ndim - 1], t.strides[codes.ndim - 1] = n, 1
    return t


def sdpa(out, q, k, v, opts=None):
    err = _lib.Error()
    st = _lib.LIB.attn_sdpa(ctypes.byref(out), None, None, ctypes.byref(q), ctypes.byref(k), ctypes.byref(v),
                            ctypes.byref(opts) if opts is not None else None, ctypes.byref(err))
    return st, err.message.decode()


def test_attention_shapes():
    """fp8 rows take any length (attn.h: "any n"), and attention widens them
    exactly and computes as f32 rows would: head dims 1, 3, 33 and 47 (not
    blocks of 32), decode and prefill, bitwise attn_sdpa on the widened f32
    rows. Per-head scales of -0, a negative, infinity or a negative
    subnormal are refused with ATTN_ERR_SCALE, a positive subnormal taken."""
    rng = np.random.default_rng(5)
    for fname, fmt in (("e4m3", E4M3), ("e5m2", E5M2)):
        for E in (1, 3, 33, 47):
            for L in (1, 40):
                H, S = 2, 37
                q = rng.standard_normal((H, L, E)).astype(np.float32)
                k = ref_quantize(rng.standard_normal((H * S, E)).astype(np.float32) * 4, fmt).reshape(H, S, E)
                v = ref_quantize(rng.standard_normal((H * S, E)).astype(np.float32), fmt).reshape(H, S, E)
                kf = ref_dequantize(k.reshape(-1, E), fmt, E).reshape(H, S, E)
                vf = ref_dequantize(v.reshape(-1, E), fmt, E).reshape(H, S, E)
                out, want = np.zeros((H, L, E), np.float32), np.zeros((H, L, E), np.float32)
                st, msg = sdpa(view(out), view(q), qtensor(k, fmt), qtensor(v, fmt))
                st2, msg2 = sdpa(view(want), view(q), view(kf), view(vf))
                report("sdpa_%s_head_dim_%d_L%d_is_f32_on_widened_rows" % (fname, E, L),
                       "status %d: %s" % (st or st2, msg or msg2) if st or st2 else same_floats(out, want))
    H, S, E = 2, 8, 32
    q = np.ones((H, 1, E), np.float32)
    k = ref_quantize(np.ones((H * S, E), np.float32), E4M3).reshape(H, S, E)
    out = np.zeros((H, 1, E), np.float32)
    for label, bad, want in (("minus_zero", -0.0, ERR_SCALE), ("negative", -2.0, ERR_SCALE),
                             ("infinity", float("inf"), ERR_SCALE), ("negative_subnormal", -1e-45, ERR_SCALE),
                             ("positive_subnormal", 1e-45, 0)):
        for which in ("k", "v"):
            o = _lib.default(_lib.SdpaOptions)
            scales = np.array([1.0, bad], np.float32)
            t = view(scales)
            setattr(o, which + "_descale", ctypes.pointer(t))
            st, msg = sdpa(view(out), view(q), qtensor(k, E4M3), qtensor(k, E4M3), o)
            report("sdpa_%s_descale_%s_%s" % (which, label, "refused" if want else "taken"),
                   None if st == want else "status %d (want %d): %s" % (st, want, msg))


def test_widened_blocks():
    """Attention widens stored rows with the kernels' own code (the ISAs'
    widening microkernels), which attn.h says gives the very floats of
    attn_dequantize: rows of corner-case blocks (zeros, -0, f16-subnormal
    and rounded-to-zero scales, scales near f16's top, a q4_1 minimum
    rounded above its values) as keys and values, bitwise attn_sdpa on the
    widened f32 rows, prefill (40 queries) and decode (1). q8 and q4 in
    decode take the integer kernels unless ATTN_QDOT=widen (run.sh runs
    this file both ways)."""
    rng = np.random.default_rng(3)
    H, S, E = 2, 45, 64

    def rows():
        x = rng.standard_normal((H * S, E)).astype(np.float32)
        x[0], x[1] = 0.0, -0.0
        x[2, :32] = rng.standard_normal(32) * 1e-7       # q8/q4: an f16-subnormal scale
        x[3, 32:] = rng.standard_normal(32) * 5e6        # near and past 127 · 65504
        x[4, :32] = 2.0 ** -26                           # scales that round to 0
        x[5] = 1.0006                                    # q4_1: m rounded above every value
        x[6, :32], x[6, 0] = -0.0, 0.0                   # +0 first, then -0
        x[7, :32] = rng.standard_normal(32) * 1e-9
        return x

    widen = os.environ.get("ATTN_QDOT") == "widen"
    for fname, fmt in (("q8", Q8), ("q4", Q4), ("q4_1", Q4_1), ("e4m3", E4M3), ("e5m2", E5M2)):
        k = ref_quantize(rows(), fmt).reshape(H, S, -1)
        v = ref_quantize(rows(), fmt).reshape(H, S, -1)
        kf = ref_dequantize(k.reshape(H * S, -1), fmt, E).reshape(H, S, E)
        vf = ref_dequantize(v.reshape(H * S, -1), fmt, E).reshape(H, S, E)
        for L in (1, 40):
            name = "sdpa_%s_corner_blocks_L%d_is_f32_on_widened_rows" % (fname, L)
            if L == 1 and fmt in (Q8, Q4) and not widen:
                print("skip %s: decode scores q8 and q4 by integer dot products (ATTN_QDOT=widen checks it)" % name)
                continue
            q = (rng.standard_normal((H, L, E)) * 0.1).astype(np.float32)
            out, want = np.zeros((H, L, E), np.float32), np.zeros((H, L, E), np.float32)
            st, msg = sdpa(view(out), view(q), qtensor(k, fmt), qtensor(v, fmt))
            st2, msg2 = sdpa(view(want), view(q), view(kf), view(vf))
            report(name, "status %d: %s" % (st or st2, msg or msg2) if st or st2 else same_floats(out, want))


def test_tensor_init():
    """attn_tensor_init over quantized rows (attn.h, attn_tensor_init): NULL
    strides are C order over rows of attn_quant_row_size bytes; rank 0,
    a row length the format cannot take, a last stride other than 1 and the
    per-channel key formats are refused."""
    f = _lib.LIB.attn_tensor_init
    f.argtypes = [ctypes.POINTER(_lib.Tensor), ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                  ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(_lib.Error)]

    def init(fmt, shape, strides=None):
        t, err = _lib.Tensor(), _lib.Error()
        sh = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        stp = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
        st = f(ctypes.byref(t), None, fmt, len(shape), sh, stp, ctypes.byref(err))
        return st, list(t.strides[:len(shape)])

    for name, fmt, shape, want in (("q8", Q8, (3, 2, 64), [136, 68, 1]), ("q4", Q4, (2, 96), [54, 1]),
                                   ("q4_1", Q4_1, (2, 32), [20, 1]), ("e4m3_odd", E4M3, (2, 3), [3, 1]),
                                   ("e5m2_one", E5M2, (4, 1), [1, 1])):
        st, strides = init(fmt, shape)
        report("tensor_init_%s_c_order_in_bytes" % name, None if st == 0 and strides == want
               else "status %d, strides %s (want %s)" % (st, strides, want))
    for name, args, want in (("q8_rank_0", (Q8, ()), ERR["RANK"]), ("q8_row_of_48", (Q8, (2, 48)), ERR["SHAPE"]),
                             ("q4_1_row_of_1", (Q4_1, (2, 1)), ERR["SHAPE"]),
                             ("q8_last_stride_2", (Q8, (2, 64), (68, 2)), ERR["STRIDE"]),
                             ("e4m3_last_stride_0", (E4M3, (2, 3), (3, 0)), ERR["STRIDE"]),
                             ("q4c", (11, (32, 64)), ERR["DTYPE"]), ("q2c", (12, (32, 64)), ERR["DTYPE"])):
        st, _ = init(*args)
        report("tensor_init_%s_refused" % name, None if st == want else "status %d (want %d)" % (st, want))


def main():
    lib = Lib(BUILD)
    test_q8(lib)
    test_q8_error_bound(lib)
    test_q4(lib)
    test_q4_1(lib)
    test_groups(lib)
    test_fp8(lib)
    test_f64_input(lib)
    test_dequantize_16bit(lib)
    test_shapes(lib)
    test_hadamard(lib)
    test_caches()
    test_attention_shapes()
    test_widened_blocks()
    test_tensor_init()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
