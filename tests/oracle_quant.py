#!/usr/bin/python3
"""oracle_quant.py -- the quantized formats (attn_quantize, attn_dequantize)
against a reference written in NumPy from attn.h's description of them,
"Quantized storage", byte by byte.

Calls libattn.so through ctypes. Every check is bit for bit: the bytes
attn_quantize writes equal the reference's, and the floats attn_dequantize
reads back equal the reference's (NaN compared as NaN). The reference shares
no code with the library: q8 and q4 are written with NumPy's own f32
division, f32 -> f16 conversion and rint (round half to even); the fp8
formats by listing the value of each of the 256 codes from the bit layout and
taking, for each input, the nearest value (ties to the even code) after
clamping to the largest finite, not by bit manipulation as the library does.

Inputs: normal, heavy-tailed (Student t with 1.5 degrees of freedom, and
channels with scales of 1 to 1000: outlier key channels), zeros, huge and
tiny magnitudes (f16's and fp8's limits, f32 subnormals), exact ties, NaN
and infinities; from f32, f16, bf16 and f64 tensors, strided; every code of
each format read back and quantized again; and the errors.

Usage: oracle_quant.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from attn._core import view  # noqa: E402  (an attn_tensor over an array: raw bits with their dtype code)
from attn._lib import Error, Tensor  # noqa: E402
from seeding import test_seed  # noqa: E402

MAX_RANK = 5
F32, F64, F16, BF16 = 1, 2, 4, 5
Q8, Q4, E4M3, E5M2, Q4_1, Q4C, Q2C = 6, 7, 8, 9, 10, 11, 12
FORMATS = {"q8": Q8, "q4": Q4, "q4_1": Q4_1, "e4m3": E4M3, "e5m2": E5M2}
BLOCK_BYTES = {Q8: 34, Q4: 18, Q4_1: 20}
ERR = {"NULL": 1, "RANK": 2, "SHAPE": 3, "DTYPE": 6, "STRIDE": 10, "ARGUMENT": 19}


# --- the reference, from attn.h -------------------------------------------

def f16_scale(s):
    """s (f32) rounded to f16, +-65504 where that overflows (attn.h)."""
    with np.errstate(over="ignore"):
        d = s.astype(np.float16)
    d[np.isposinf(d)] = np.float16(65504)
    d[np.isneginf(d)] = np.float16(-65504)
    return d


def ref_q8(x):
    """x (rows, n) f32 -> (rows, n/32*34) uint8."""
    b = x.reshape(-1, 32)
    finite = np.isfinite(b).all(axis=1)
    bb = np.where(finite[:, None], b, np.float32(0))
    a = np.abs(bb).max(axis=1)
    d = f16_scale(a / np.float32(127))
    df = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = bb / df[:, None]
    q = np.clip(np.rint(np.nan_to_num(y, nan=0, posinf=1e9, neginf=-1e9)), -127, 127)
    q[df == 0] = 0
    d = d.view(np.uint16).copy()
    d[~finite] = 0x7e00
    q[~finite] = 0
    out = np.concatenate([d.astype("<u2").view(np.uint8).reshape(-1, 2),
                          q.astype(np.int8).view(np.uint8)], axis=1)
    return out.reshape(x.shape[0], -1)


def ref_q4(x):
    b = x.reshape(-1, 32)
    finite = np.isfinite(b).all(axis=1)
    bb = np.where(finite[:, None], b, np.float32(0))
    m = bb[np.arange(len(bb)), np.argmax(np.abs(bb), axis=1)]  # argmax: the first of equals
    d = f16_scale(m / np.float32(-8))
    df = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = bb / df[:, None]
    q = np.clip(np.rint(np.nan_to_num(y, nan=0, posinf=1e9, neginf=-1e9)), -8, 7) + 8
    q[df == 0] = 8
    d = d.view(np.uint16).copy()
    d[~finite] = 0x7e00
    q[~finite] = 8
    q = q.astype(np.uint8)
    codes = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([d.astype("<u2").view(np.uint8).reshape(-1, 2), codes], axis=1)
    return out.reshape(x.shape[0], -1)


def ref_q4_1(x):
    """q4_1: f16 d, f16 m (the block's minimum), codes (x - m) / d in 0..15."""
    b = x.reshape(-1, 32)
    finite = np.isfinite(b).all(axis=1)
    bb = np.where(finite[:, None], b, np.float32(0))
    rows = np.arange(len(bb))  # lo and hi: the first of equals (of 0 and -0, the first: m's sign bit)
    m = f16_scale(bb[rows, np.argmin(bb, axis=1)])
    mf = m.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = (bb[rows, np.argmax(bb, axis=1)] - mf) / np.float32(15)
        d = np.where(s > 0, f16_scale(np.where(s > 0, s, np.float32(0))), np.float16(0))
        df = d.astype(np.float32)
        y = (bb - mf[:, None]) / df[:, None]
    q = np.clip(np.rint(np.nan_to_num(y, nan=0, posinf=1e9, neginf=-1e9)), 0, 15)
    q[df == 0] = 0
    d, m = d.view(np.uint16).copy(), m.view(np.uint16).copy()
    d[~finite], m[~finite] = 0x7e00, 0x7e00
    q[~finite] = 0
    q = q.astype(np.uint8)
    codes = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([d.astype("<u2").view(np.uint8).reshape(-1, 2), m.astype("<u2").view(np.uint8).reshape(-1, 2),
                          codes], axis=1)
    return out.reshape(x.shape[0], -1)


def ref_group(x, fmt):
    """q4c / q2c (attn.h, "Keys quantized per channel"): x (mats, L, n) f32,
    L a multiple of 32 -> the groups' bytes, (mats * L / 32, group bytes).
    Per channel over 32 positions: q4_1's rule with 2^b - 1 steps."""
    bits = 4 if fmt == Q4C else 2
    levels, per = (1 << bits) - 1, 8 // bits
    mats, L, n = x.shape
    g = x.reshape(-1, 32, n)                     # (groups, t, c)
    finite = np.isfinite(g).all(axis=1)          # per (group, channel)
    gg = np.where(finite[:, None, :], g, np.float32(0))
    first = lambda i: np.take_along_axis(gg, i[:, None, :], axis=1)[:, 0, :]  # the first of equals over t
    m = f16_scale(first(np.argmin(gg, axis=1)))
    mf = m.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = (first(np.argmax(gg, axis=1)) - mf) / np.float32(levels)
        d = np.where(s > 0, f16_scale(np.where(s > 0, s, np.float32(0))), np.float16(0))
        df = d.astype(np.float32)
        y = (gg - mf[:, None, :]) / df[:, None, :]
    q = np.clip(np.rint(np.nan_to_num(y, nan=0, posinf=1e9, neginf=-1e9)), 0, levels)
    q = np.where((df == 0)[:, None, :], 0, q)
    d, m = d.view(np.uint16).copy(), m.view(np.uint16).copy()
    d[~finite], m[~finite] = 0x7e00, 0x7e00
    q = np.where(finite[:, None, :], q, 0).astype(np.uint8)
    # position t's codes: channel c in byte c // per, bits bits * (c % per)
    packed = np.zeros((g.shape[0], 32, n // per), np.uint8)
    for k in range(per):
        packed |= q[:, :, k::per] << (bits * k)
    out = np.concatenate([d.astype("<u2").view(np.uint8).reshape(len(g), -1),
                          m.astype("<u2").view(np.uint8).reshape(len(g), -1),
                          packed.reshape(len(g), -1)], axis=1)
    return out


def ref_group_dequantize(raw, fmt, n):
    """Groups' bytes (groups, 20n or 12n) -> values (groups, 32, n) f32."""
    bits = 4 if fmt == Q4C else 2
    per = 8 // bits
    d = raw[:, :2 * n].copy().view("<u2").view(np.float16).astype(np.float32)
    m = raw[:, 2 * n:4 * n].copy().view("<u2").view(np.float16).astype(np.float32)
    packed = raw[:, 4 * n:].reshape(len(raw), 32, n // per)
    q = np.zeros((len(raw), 32, n), np.float32)
    for k in range(per):
        q[:, :, k::per] = (packed >> (bits * k)) & ((1 << bits) - 1)
    with np.errstate(over="ignore", invalid="ignore"):
        return q * d[:, None, :] + m[:, None, :]   # code * d exact: one f32 rounding


def ref_window_full(n, R):
    """Positions in quantized groups of a cache of n positions whose keys
    are quantized per channel with a residual window of R (attn.h, "Keys
    quantized per channel"): max(0, 32 floor(n / 32) - R)."""
    return max(0, n // 32 * 32 - R)


def ref_cache_keys(rows16, fmt, R=0):
    """Keys (H, n, E) as such a cache holds them, from rows16, the f16 value
    each position had in the window when its group left it: positions before
    ref_window_full(n, R) through their groups, the rest as they are."""
    out = np.array(rows16, np.float32)
    full = ref_window_full(out.shape[1], R)
    if full:
        raw = ref_group(np.ascontiguousarray(out[:, :full]), fmt)
        out[:, :full] = ref_group_dequantize(raw, fmt, out.shape[2]).reshape(out.shape[0], full, -1)
    return out


def fp8_table(fmt):
    """The value of each code 0..255, from the bit layout in attn.h."""
    M, B = (3, 7) if fmt == E4M3 else (2, 15)
    vals = np.zeros(256)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c & 0x7f) >> M, c & ((1 << M) - 1)
        if fmt == E4M3 and (c & 0x7f) == 0x7f:
            vals[c] = np.nan
        elif fmt == E5M2 and e == 31:
            vals[c] = s * np.inf if m == 0 else np.nan
        elif e == 0:
            vals[c] = s * m * 2.0 ** (1 - B - M)
        else:
            vals[c] = s * (1 + m / 2 ** M) * 2.0 ** (e - B)
    return vals


def ref_fp8(x, fmt):
    vals = fp8_table(fmt)
    max_code = 0x7e if fmt == E4M3 else 0x7b
    nan_code = 0x7f if fmt == E4M3 else 0x7e
    pos = vals[:max_code + 1]  # increasing, codes 0..max_code
    flat = x.reshape(-1).astype(np.float64)
    sign = np.signbit(flat)
    a = np.minimum(np.abs(np.nan_to_num(flat, nan=0.0, posinf=np.inf)), pos[-1])
    hi = np.clip(np.searchsorted(pos, a, side="left"), 0, max_code)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - pos[lo], pos[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(pos[hi] == a, hi, code)
    code = np.where(np.isnan(flat), nan_code, code) | np.where(sign, 0x80, 0)
    return code.astype(np.uint8).reshape(x.shape)


def ref_quantize(x, fmt):
    return {Q8: ref_q8, Q4: ref_q4, Q4_1: ref_q4_1}[fmt](x) if fmt in BLOCK_BYTES else ref_fp8(x, fmt)


def ref_dequantize(raw, fmt, n):
    rows = raw.shape[0]
    if fmt == Q4_1:  # code * d is exact in f32: the sum is one f32 rounding
        blk = raw.reshape(-1, 20)
        d = blk[:, :2].copy().view("<u2").view(np.float16).astype(np.float32).reshape(-1)
        m = blk[:, 2:4].copy().view("<u2").view(np.float16).astype(np.float32).reshape(-1)
        c = blk[:, 4:]
        q = np.concatenate([c & 15, c >> 4], axis=1).astype(np.float32)
        return (q * d[:, None] + m[:, None]).astype(np.float32).reshape(rows, n)
    if fmt in (Q8, Q4):
        size = 34 if fmt == Q8 else 18
        blk = raw.reshape(-1, size)
        d = blk[:, :2].copy().view("<u2").view(np.float16).astype(np.float32).reshape(-1)
        if fmt == Q8:
            q = blk[:, 2:].view(np.int8).astype(np.float32)
        else:
            c = blk[:, 2:]
            q = np.concatenate([c & 15, c >> 4], axis=1).astype(np.float32) - 8
        return (q * d[:, None]).astype(np.float32).reshape(rows, n)
    return fp8_table(fmt)[raw].astype(np.float32)


# --- the library ------------------------------------------------------------

class Lib:
    def __init__(self, build):
        self.lib = ctypes.CDLL(os.path.join(build, "libattn.so"))
        self.lib.attn_quant_row_size.restype = ctypes.c_size_t
        self.lib.attn_quant_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.attn_quant_group_size.restype = ctypes.c_size_t
        self.lib.attn_quant_group_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.attn_quantize.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.POINTER(Tensor), ctypes.POINTER(Error)]
        self.lib.attn_dequantize.argtypes = [ctypes.POINTER(Tensor), ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_int, ctypes.POINTER(Error)]

    def row_size(self, fmt, n):
        return self.lib.attn_quant_row_size(fmt, n)

    def group_size(self, fmt, n):
        return self.lib.attn_quant_group_size(fmt, n)

    def quantize_groups(self, src, dtype, fmt, size=None):
        """(status, message, bytes (groups, group bytes)) of src (..., L, n)."""
        n = src.shape[-1]
        groups = src.size // n // 32
        total = groups * self.group_size(fmt, n)
        out = np.full(max(total, 1), 0xAA, dtype=np.uint8)
        err = Error()
        t = view(src, dtype)
        st = self.lib.attn_quantize(out.ctypes.data, total if size is None else size, fmt, ctypes.byref(t),
                                    ctypes.byref(err))
        return st, err.message.decode(), out[:total].reshape(groups, -1) if groups else out[:0]

    def quantize(self, src, dtype, fmt, size=None, dst=None):
        """(status, message, bytes) of quantizing the array src viewed as dtype."""
        n = src.shape[-1] if src.ndim else 1
        rows = src.size // n if n else 0
        total = rows * self.row_size(fmt, n)
        out = dst if dst is not None else np.full(max(total, 1), 0xAA, dtype=np.uint8)
        err = Error()
        t = view(src, dtype)
        st = self.lib.attn_quantize(out.ctypes.data, total if size is None else size, fmt, ctypes.byref(t),
                                    ctypes.byref(err))
        return st, err.message.decode(), out[:total].reshape(rows, -1) if rows else out[:0]

    def dequantize(self, raw, fmt, shape, dtype=F32, np_dtype=np.float32, size=None):
        out = np.full(shape, np.nan, dtype=np_dtype)
        err = Error()
        t = view(out, dtype)
        st = self.lib.attn_dequantize(ctypes.byref(t), raw.ctypes.data, raw.size if size is None else size, fmt,
                                      ctypes.byref(err))
        return st, err.message.decode(), out


def same_floats(a, b):
    """Bit for bit, NaN as NaN: None, or where they differ."""
    a, b = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
    nan = np.isnan(a) | np.isnan(b)
    bad = (np.isnan(a) != np.isnan(b)) | (~nan & (a.view(np.uint32) != b.view(np.uint32)))
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return "element %d: %r vs %r (of %d differing)" % (i, a[i], b[i], int(bad.sum()))


def inputs(rng):
    """Named (rows, n) f32 arrays, n = 128 (four blocks)."""
    n = 128
    out = {}
    out["normal"] = rng.standard_normal((64, n)).astype(np.float32)
    out["student_t_1.5"] = rng.standard_t(1.5, (64, n)).astype(np.float32)
    chan = np.where(rng.random(n) < 0.05, rng.uniform(100, 1000, n), 1.0)  # outlier key channels
    out["outlier_channels"] = (rng.standard_normal((64, n)) * chan).astype(np.float32)
    out["zeros"] = np.zeros((4, n), np.float32)
    out["negative_zeros"] = -np.zeros((2, n), np.float32)
    # 0 and -0 mixed: which comes first decides q4_1's (and q4c's) m sign
    # bit; q4's d of a zero block is -0 (attn.h). Tiny values whose f16
    # minimum rounds to -0 too.
    sz = np.zeros((4, n), np.float32)
    sz[0, ::3] = -0.0
    sz[1, 1::3] = -0.0
    sz[2, 0:64:2] = np.float32(-1e-9)
    sz[3, 5] = np.float32(1e-9)
    out["signed_zeros"] = sz
    big = rng.standard_normal((16, n)).astype(np.float32)
    big[0] *= 1e7      # q8/q4 scale near and past f16's range
    big[1] *= 1e38     # near f32's
    big[2] *= 65504 * 127 / 3.0
    big[3] = np.float32(3.4e38)
    big[4] *= 500       # past e4m3's 448
    big[5] *= 60000     # past e5m2's 57344
    big[6] = np.float32(464)   # e4m3's tie between 448 and 480: 448
    big[7] = np.float32(61440)  # e5m2's tie between 57344 and 65536: 57344
    out["huge"] = big
    tiny = rng.standard_normal((16, n)).astype(np.float32)
    for i, s in enumerate([1e-5, 1e-7, 1e-9, 1e-20, 1e-38, 1e-44, 2.0 ** -10, 2.0 ** -17]):
        tiny[i] *= np.float32(s)  # f16-subnormal scales, fp8 subnormals and their halves, f32 subnormals
    tiny[8] = np.float32(2.0 ** -10)  # e4m3: half its smallest subnormal, a tie to 0
    tiny[9] = np.float32(3 * 2.0 ** -10)  # e4m3: between codes 1 and 2, a tie to 2
    out["tiny"] = tiny
    ties = np.zeros((8, n), np.float32)
    ties[:, ::32] = 127  # q8: d = 1 exactly, so k + 0.5 lies halfway
    ties[:, 1:32] = (rng.integers(-126, 126, (8, 31)) + 0.5).astype(np.float32)
    ties[:, 32:64] = -8  # q4: d = 1, codes k + 0.5
    ties[:, 33:64] = (rng.integers(-8, 7, (8, 31)) + 0.5).astype(np.float32)
    ties[:, 64:] = (rng.integers(1, 200, (8, 64)) * 2.0 ** rng.integers(-12, 8, (8, 64)) *
                    (1 + 2.0 ** -4)).astype(np.float32)  # fp8 midpoints
    out["ties"] = ties
    # q4_1: blocks of minimum 0 and maximum 15 (m = 0, d = 1 exactly), the
    # rest k + 0.5, halfway between codes; one-sided blocks (a channel's
    # offset); and equal values whose f16 minimum rounds above them (d = 0).
    t41 = (rng.integers(0, 15, (4, 128)) + 0.5).astype(np.float32)
    t41[:, ::32], t41[:, 1::32] = 0, 15
    out["ties_q4_1"] = t41
    out["offset"] = (rng.standard_normal((16, n)) + 10).astype(np.float32)
    eq = np.full((4, n), 1.0006, np.float32)
    eq[1] = -1.0006
    eq[2, :64] = 3.0
    out["equal_values"] = eq
    spec = rng.standard_normal((8, n)).astype(np.float32)
    spec[0, 5] = np.nan
    spec[1, 40] = np.inf
    spec[2, 70] = -np.inf
    spec[3, :] = np.nan
    spec[4, ::3] = np.inf
    spec[5, 1] = -np.nan
    out["nan_inf"] = spec
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rng = np.random.default_rng(test_seed(30))
    lib = Lib(build)
    failed = 0

    def report(name, why):
        nonlocal failed
        if why:
            failed += 1
            print("FAIL %s: %s" % (name, why))
        else:
            print("ok %s" % name)

    report("row_sizes", None if [lib.row_size(f, 128) for f in (Q8, Q4, Q4_1, E4M3, E5M2)] == [136, 72, 80, 128, 128]
           and lib.row_size(Q8, 31) == 0 and lib.row_size(Q4, 0) == 0 and lib.row_size(Q4_1, 48) == 0 and lib.row_size(E4M3, 1) == 1 and
           lib.row_size(F32, 32) == 0 and lib.row_size(Q8, 2 ** 63 - 32) == 0 else "wrong sizes")

    data = inputs(rng)
    for fname, fmt in FORMATS.items():
        for name, x in data.items():
            st, msg, got = lib.quantize(x, F32, fmt)
            want = ref_quantize(x, fmt)
            why = None
            if st:
                why = "status %d: %s" % (st, msg)
            elif not np.array_equal(got, want):
                i = np.argwhere(got != want)[0]
                why = "byte %s: %d vs reference %d" % (tuple(i), got[tuple(i)], want[tuple(i)])
            report("quantize_%s_%s_bitwise" % (fname, name), why)
            st, msg, back = lib.dequantize(want, fmt, x.shape)
            report("dequantize_%s_%s_bitwise" % (fname, name),
                   "status %d: %s" % (st, msg) if st else same_floats(back, ref_dequantize(want, fmt, x.shape[1])))

        # Every code read back, then quantized again: the values a format
        # holds are fixed points (fp8; q8's and q4's blocks with scales 1).
        if fmt in (E4M3, E5M2):
            raw = np.arange(256, dtype=np.uint8).reshape(2, 128)
            st, msg, back = lib.dequantize(raw, fmt, (2, 128))
            why = same_floats(back, ref_dequantize(raw, fmt, 128))
            st2, msg2, again = lib.quantize(back, F32, fmt)
            finite = np.isfinite(back)
            if not why and not np.array_equal(again[finite], raw[finite]):
                why = "a finite code does not quantize to itself"
            report("every_%s_code_round_trips" % fname, why or (msg if st or st2 else None))
        elif fmt == Q4_1:  # blocks of minimum -3 and d = 1: every code, and 16 levels d = 0.25 apart
            x = np.concatenate([np.tile(np.arange(16.0) - 3, 2), np.tile(np.arange(16.0) * 0.25 + 1.5, 2)])
            x = x.astype(np.float32).reshape(1, -1)
            st, msg, raw = lib.quantize(x, F32, fmt)
            st2, msg2, back = lib.dequantize(raw, fmt, x.shape)
            report("every_%s_code_round_trips" % fname, msg or msg2 or same_floats(back, x))
        else:
            codes = np.arange(-127, 128) if fmt == Q8 else np.arange(-8, 8)
            x = np.resize(codes, (len(codes) + 31) // 32 * 32).astype(np.float32)
            x[::32] = 127 if fmt == Q8 else -8  # each block's d is 1
            x = x.reshape(1, -1)
            st, msg, raw = lib.quantize(x, F32, fmt)
            st2, msg2, back = lib.dequantize(raw, fmt, x.shape)
            report("every_%s_code_round_trips" % fname, msg or msg2 or same_floats(back, x))

        # The other input dtypes: f16 and bf16 are exact f32s, f64 is first
        # rounded to f32; all give the f32 input's bytes. Strided, too.
        x = data["student_t_1.5"]
        x16 = x.astype(np.float16)
        st, msg, got = lib.quantize(x16, F16, fmt)
        report("quantize_%s_from_f16" % fname, msg if st else
               None if np.array_equal(got, ref_quantize(x16.astype(np.float32), fmt)) else "differs")
        xb = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: any bf16 values do
        st, msg, got = lib.quantize(xb, BF16, fmt)
        report("quantize_%s_from_bf16" % fname, msg if st else
               None if np.array_equal(got, ref_quantize((xb.astype(np.uint32) << 16).view(np.float32), fmt))
               else "differs")
        x64 = rng.standard_t(1.5, (16, 64))
        st, msg, got = lib.quantize(x64, F64, fmt)
        report("quantize_%s_from_f64" % fname, msg if st else
               None if np.array_equal(got, ref_quantize(x64.astype(np.float32), fmt)) else "differs")
        xt = np.asfortranarray(x[:, :64])  # rows of stride 1, values of stride 64
        st, msg, got = lib.quantize(xt, F32, fmt)
        report("quantize_%s_strided_3d" % fname, msg if st else
               None if np.array_equal(got, ref_quantize(np.ascontiguousarray(xt), fmt)) else "differs")
        x3 = x.reshape(4, 16, 128)[:, ::2, :]  # rank 3, a skipped row every other
        st, msg, got = lib.quantize(x3, F32, fmt)
        report("quantize_%s_rank3_strided" % fname, msg if st else
               None if np.array_equal(got, ref_quantize(np.ascontiguousarray(x3).reshape(-1, 128), fmt))
               else "differs")
        raw = ref_quantize(x, fmt)
        want = ref_dequantize(raw, fmt, 128)
        for dname, dt, npt in (("f16", F16, np.float16), ("f64", F64, np.float64)):
            st, msg, back = lib.dequantize(raw, fmt, x.shape, dt, npt)
            report("dequantize_%s_to_%s" % (fname, dname), msg if st else
                   same_floats(back.astype(np.float32), want.astype(npt).astype(np.float32)))
        big = rng.standard_normal((2, 4096)).astype(np.float32)  # longer than the library's pieces
        st, msg, got = lib.quantize(big, F32, fmt)
        report("quantize_%s_long_rows" % fname, msg if st else
               None if np.array_equal(got, ref_quantize(big, fmt)) else "differs")
        st, msg, back = lib.dequantize(got, fmt, big.shape)
        report("dequantize_%s_long_rows" % fname, msg if st else same_floats(back, ref_dequantize(got, fmt, 4096)))

    # Errors: a status and nothing written.
    x = data["normal"][:2]
    def error(name, want, st, msg, untouched):
        report("error_" + name, None if st == ERR[want] and msg and untouched else
               "status %d (%s), untouched %s" % (st, msg, untouched))
    dst = np.full(400, 0xAA, np.uint8)
    st, msg, _ = lib.quantize(np.zeros((2, 48), np.float32), F32, Q8, dst=dst)
    error("q8_row_not_a_multiple_of_32", "SHAPE", st, msg, (dst == 0xAA).all())
    st, msg, _ = lib.quantize(x, F32, Q8, size=271, dst=dst)
    error("dst_too_small", "ARGUMENT", st, msg, (dst == 0xAA).all())
    # The count in the singular: "1 row of q8 takes", not "1 rows of q8 take".
    st, msg, _ = lib.quantize(np.ones((1, 32), np.float32), F32, Q8, size=33, dst=dst)
    error("dst_too_small_one_row", "ARGUMENT", st, msg if "1 row of q8 takes 34 bytes" in msg else "",
          (dst == 0xAA).all())
    st, msg, _ = lib.quantize(x, F32, F16, size=400, dst=dst)
    error("format_not_quantized", "DTYPE", st, msg, (dst == 0xAA).all())
    st, msg, _ = lib.quantize(np.zeros((2, 32), np.bool_), 3, Q8, size=400, dst=dst)
    error("bool_input", "DTYPE", st, msg, (dst == 0xAA).all())
    st, msg, _ = lib.quantize(np.array(1.0, np.float32), F32, E4M3, size=400, dst=dst)
    error("rank_0", "RANK", st, msg, (dst == 0xAA).all())
    buf = np.zeros(256, np.float32)
    inner = buf[:64].reshape(2, 32)
    err = Error()
    st = lib.lib.attn_quantize(buf[32:].ctypes.data, 68, Q8, ctypes.byref(view(inner, F32)), ctypes.byref(err))
    error("dst_overlaps_src", "STRIDE", st, err.message.decode(), (buf[:64] == 0).all())
    st = lib.lib.attn_quantize(None, 100, Q8, ctypes.byref(view(inner, F32)), ctypes.byref(err))
    error("null_dst", "NULL", st, err.message.decode(), True)
    raw = ref_quantize(x, Q8)
    st, msg, back = lib.dequantize(raw, Q8, x.shape, size=raw.size - 1)
    error("src_too_small", "ARGUMENT", st, msg, np.isnan(back).all())
    st, msg, back = lib.dequantize(raw, Q4, (2, 40))
    error("q4_row_not_a_multiple_of_32", "SHAPE", st, msg, np.isnan(back).all())
    st, msg, _ = lib.quantize(np.zeros((2, 40), np.float32), F32, Q4_1, dst=dst)
    error("q4_1_row_not_a_multiple_of_32", "SHAPE", st, msg, (dst == 0xAA).all())
    # An output may not hold several results in one element (attn.h: stride 0
    # in a dimension of size > 1, a broadcast view): refused, nothing written.
    one = np.full((1, 32), np.nan, np.float32)
    st = lib.lib.attn_dequantize(ctypes.byref(view(np.broadcast_to(one, (2, 32)), F32)), raw.ctypes.data, raw.size,
                                 Q8, ctypes.byref(err))
    error("dequantize_into_a_broadcast_dst", "STRIDE", st, err.message.decode(), np.isnan(one).all())

    # A dimension below 0 is a shape error that names it (as attn_tensor_init
    # and attn_sdpa say), not an overflow: (-1, 32), and (-1, -1, 32), whose
    # product is positive, for rows and for groups, both ways.
    for fname, fmt, shape in (("q8", Q8, (-1, 32)), ("e4m3", E4M3, (-1, -1, 32)), ("q4c", Q4C, (-1, 32, 8)),
                              ("q2c", Q2C, (-1, -1, 32, 8))):
        held = np.zeros(256, np.float32)
        t = view(held, F32)
        t.rank = len(shape)
        for d, n in enumerate(shape):
            t.shape[d], t.strides[d] = n, 0
        st = lib.lib.attn_quantize(dst.ctypes.data, dst.size, fmt, ctypes.byref(t), ctypes.byref(err))
        msg = err.message.decode()
        error("%s_quantize_negative_dimension" % fname, "SHAPE", st, msg if "negative" in msg else "",
              (dst == 0xAA).all())
        st = lib.lib.attn_dequantize(ctypes.byref(t), dst.ctypes.data, dst.size, fmt, ctypes.byref(err))
        msg = err.message.decode()
        error("%s_dequantize_negative_dimension" % fname, "SHAPE", st, msg if "negative" in msg else "", True)

    groups(lib, rng, report, error)
    sys.exit(1 if failed else 0)


def groups(lib, rng, report, error):
    """Keys per channel (q4c, q2c) bit for bit: every input as groups of 32
    positions, from every float dtype and strided, read back, every code,
    and the errors."""
    report("group_sizes", None if [lib.group_size(f, 128) for f in (Q4C, Q2C)] == [2560, 1536]
           and lib.group_size(Q4C, 3) == 0 and lib.group_size(Q2C, 6) == 0 and lib.group_size(Q4C, 0) == 0
           and lib.group_size(Q8, 32) == 0 and lib.group_size(Q4C, 2 ** 62) == 0 else "wrong sizes")
    for name, x in inputs(rng).items():
        xs = np.resize(x, (2, 64, x.shape[1]))  # two matrices of 64 positions: two groups each
        for fname, fmt in (("q4c", Q4C), ("q2c", Q2C)):
            want = ref_group(xs, fmt)
            st, msg, got = lib.quantize_groups(xs, F32, fmt)
            report("%s_quantize_%s" % (fname, name), msg if st else
                   (None if np.array_equal(got, want) else "bytes differ at %s" % (np.argwhere(got != want)[:3],)))
            st, msg, back = lib.dequantize(want, fmt, xs.shape)
            report("%s_dequantize_%s" % (fname, name), msg if st else
                   same_floats(back, ref_group_dequantize(want, fmt, xs.shape[2])))
    x = (rng.standard_normal((3, 32, 64)) * np.where(rng.random(64) < 0.1, 300, 1)).astype(np.float32)
    for fname, fmt in (("q4c", Q4C), ("q2c", Q2C)):
        want = ref_group(x, fmt)
        # every byte pattern of the codes, with random finite f16 scales and minimums: read back as the layout says
        raw = rng.integers(0, 256, (6, lib.group_size(fmt, 64)), dtype=np.uint8)
        hdr = rng.standard_normal((6, 128)).astype(np.float16).view(np.uint8).reshape(6, 256)
        raw[:, :256] = hdr
        st, msg, back = lib.dequantize(raw, fmt, (6, 32, 64))
        report("%s_every_code" % fname, msg if st else same_floats(back, ref_group_dequantize(raw, fmt, 64)))
        for dt, npt in ((F16, np.float16), (F64, np.float64)):
            xd = x.astype(npt)
            st, msg, got = lib.quantize_groups(xd, dt, fmt)
            report("%s_from_%s" % (fname, npt.__name__), msg if st else
                   (None if np.array_equal(got, ref_group(xd.astype(np.float32), fmt)) else "bytes differ"))
        xb = (x.view(np.uint32) >> 16).astype(np.uint16)
        st, msg, got = lib.quantize_groups(xb, BF16, fmt)
        report("%s_from_bf16" % fname, msg if st else
               (None if np.array_equal(got, ref_group((xb.astype(np.uint32) << 16).view(np.float32), fmt)) else "bytes differ"))
        xt = np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0)  # strided
        st, msg, got = lib.quantize_groups(xt, F32, fmt)
        report("%s_strided" % fname, msg if st else (None if np.array_equal(got, want) else "bytes differ"))
        st, msg, back = lib.dequantize(want, fmt, x.shape, F16, np.float16)
        report("%s_dequantize_to_f16" % fname, msg if st else
               same_floats(back.astype(np.float32), ref_group_dequantize(want, fmt, 64).astype(np.float16).astype(np.float32)))
    # Rows of more channels than a cache takes (key_dim <= 8192 is the
    # caches' limit, not the format's): attn_quant_group_size measures any
    # even n (a multiple of 4 for q2c), and attn_quantize and attn_dequantize
    # take what it measures.
    x = rng.standard_normal((1, 32, 8196)).astype(np.float32)
    for fname, fmt in (("q4c", Q4C), ("q2c", Q2C)):
        want = ref_group(x, fmt)
        st, msg, got = lib.quantize_groups(x, F32, fmt)
        report("%s_quantize_8196_channels" % fname, msg if st else
               (None if np.array_equal(got, want) else "bytes differ"))
        st, msg, back = lib.dequantize(want, fmt, x.shape)
        report("%s_dequantize_8196_channels" % fname, msg if st else
               same_floats(back, ref_group_dequantize(want, fmt, 8196)))
    # errors: nothing written
    dst = np.full(4096, 0xAA, np.uint8)
    err = Error()
    def q(arr, fmt, size=4096):
        t = view(arr, F32)
        st = lib.lib.attn_quantize(dst.ctypes.data, size, fmt, ctypes.byref(t), ctypes.byref(err))
        return st, err.message.decode()
    st, msg = q(np.zeros((40, 64), np.float32), Q4C)
    error("q4c_positions_not_a_multiple_of_32", "SHAPE", st, msg, (dst == 0xAA).all())
    st, msg = q(np.zeros((32, 63), np.float32), Q4C)
    error("q4c_odd_channels", "SHAPE", st, msg, (dst == 0xAA).all())
    st, msg = q(np.zeros((32, 66), np.float32), Q2C)
    error("q2c_channels_not_a_multiple_of_4", "SHAPE", st, msg, (dst == 0xAA).all())
    st, msg = q(np.zeros(64, np.float32), Q4C)
    error("q4c_rank_1", "RANK", st, msg, (dst == 0xAA).all())
    st, msg = q(np.zeros((32, 64), np.float32), Q4C, size=20 * 64 - 1)
    error("q4c_dst_too_small", "ARGUMENT", st, msg, (dst == 0xAA).all())
    raw = ref_group(np.zeros((1, 32, 64), np.float32), Q4C)
    one = np.full((1, 64), np.nan, np.float32)
    st = lib.lib.attn_dequantize(ctypes.byref(view(np.broadcast_to(one, (32, 64)), F32)), raw.ctypes.data, raw.size,
                                 Q4C, ctypes.byref(err))
    error("q4c_dequantize_into_a_broadcast_dst", "STRIDE", st, err.message.decode(), np.isnan(one).all())


if __name__ == "__main__":
    main()
