#!/usr/bin/python3
"""quant_accuracy.py -- what a quantized KV cache costs in accuracy, measured:
the numbers in docs/accuracy.md.

For each format (q8, q4, q4_1, e4m3, e5m2, and f16 and bf16 for scale), keys and
values are stored in it by libattn itself (attn_quantize, through ctypes)
and read back (attn_dequantize). Attention over the stored values is then
computed in float64 NumPy and compared with attention over the f32 values:
  - out: max |out_q - out| / max |out| over all rows, and the RMS of
    out_q - out relative to the RMS of out;
  - lse: max |lse_q - lse|;
  - the attention weights: KL(P || P_q) per query row, mean and max.
Why this measures the library: attn's kernels reading quantized rows give
bitwise what its f32 kernels give on the widened rows (tests/test_quant_kv.c),
and those agree with float64 within the f32 bound attn.h states (about
1e-6 relative here), far below every number below but f16's. So the
numbers are the storage's cost, not the kernels' rounding.

Data (Llama-style head, d = 128, 4,096 keys, 256 queries, scale 1/sqrt(d)):
  normal      q, k, v standard normal; scores then have std about 1 (flat);
  peaked      the same with q times 4: scores of std about 4, a few keys
              taking most of each row's weight;
  outliers    keys with heavy-tailed channels: 4 of the 128 channels 20
              times the rest, every channel Student-t (4 degrees of freedom),
              the keys trained models have (the reason KIVI quantizes keys
              per channel); queries normal, which makes scores of std about
              4 (the outlier channels alone would make them).

The layer (--layer): a Llama-style attention layer, E = 1024, 8 query heads
and 2 KV heads of d = 128, RoPE (halves, base 10000), causal over 2,048
tokens, as attn mha --incremental --kv FORMAT runs it: k after RoPE and v
rounded to f32, stored in the format by libattn and read back; attention
and out_proj in float64 against the same layer over the f32 k and v (the
f32 cache). tests/test_mha_cli.py checks that the library's layer through a
quantized cache equals this computation within 1e-5 (f32 arithmetic). Data:
  normal      X standard normal, weights N(0, 1/E): q and k channels of
              std about 1;
  peaked      the same with W_q times 4;
  outliers    X Student-t (4 degrees of freedom) and, in each KV head, the
              k_proj rows of 2 low-frequency RoPE pairs (4 channels, where
              trained models' key outliers sit) times 20: heavy-tailed key
              channels that RoPE keeps within their pair.
Metrics as above: out after out_proj (max and RMS, relative); lse and KL per
query head and row (every causal row).

Keys per channel (--keys, with or without --layer): key formats side by
side with the values fixed (q4_1, or f16 to see the keys alone): per-token
q4 and q4_1 keys against KIVI's per-channel q4c and q2c keys (a scale and a
minimum per channel over each group of 32 positions), stored as a cache
holds them (attn.h, "Keys quantized per channel"): keys rounded to f16, each
full group of 32 positions quantized from those, and through the layer the
positions not yet forming a group when a token attends (the residual
window, the last (t + 1) mod 32 positions for token t) kept in f16.
With --residual R (and --layer), each per-channel row comes twice: as above
(R = 0), and with a cache's residual window of R (desc.residual, KIVI's R =
128): token t then sees positions j < max(0, 32 floor((t + 1) / 32) - R)
quantized and every later one in f16 (rows named "q4c R=128" and so on).

The rotation (--hadamard): for q8, q4 and e4m3, each format's row again
with its keys stored as a cache with `hadamard` set stores them: turned by
the Walsh-Hadamard rotation (attn_hadamard, the library's own transform),
quantized, widened and turned back (what gather returns and what attention
computes with, since turning q alike leaves q.k unchanged); values as
before. Rows are named "q8+H" and so on, beside the plain format's.

Usage: quant_accuracy.py [BUILD_DIR] [--seed N] [--markdown] [--layer] [--keys [--residual R] | --hadamard]
"""
import argparse
import ctypes
import os
import sys


def parse_args(argv):
    """The command line; --help prints the usage and the measurement's description and exits
    before anything is measured (it used to run the whole measurement)."""
    ap = argparse.ArgumentParser(prog="quant_accuracy.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build", help="build directory holding libattn (default: build)")
    ap.add_argument("--seed", type=int, default=30, help="NumPy seed of the data (default: 30)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (docs/accuracy.md's)")
    ap.add_argument("--layer", action="store_true", help="measure the attention layer, not one head")
    ap.add_argument("--keys", action="store_true", help="key formats side by side, values fixed")
    ap.add_argument("--residual", type=int, default=0, metavar="R",
                    help="with --keys: also each per-channel row with a residual window of R")
    ap.add_argument("--hadamard", action="store_true", help="each format again with rotated keys")
    return ap.parse_args(argv)


# Parsed before the imports below load libattn, so --help (and a bad flag) answer at once,
# without a build; the defaults when this file is imported.
ARGS = parse_args(sys.argv[1:] if __name__ == "__main__" else [])


import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from attn._core import view  # noqa: E402  (an attn_tensor over an array, its dtype code given)
from attn._lib import Error  # noqa: E402

F32, F16, BF16 = 1, 4, 5
FORMATS = [("f16", F16), ("bf16", BF16), ("q8", 6), ("e4m3", 8), ("e5m2", 9), ("q4", 7), ("q4_1", 10)]
Q4C, Q2C = 11, 12
# --keys: (name, key format, value format); the grouped key formats are stored as a cache holds them.
KEY_ROWS = [("K q4, V q4_1", 7, 10), ("K q4_1, V q4_1", 10, 10), ("K q4c, V q4_1", Q4C, 10),
            ("K q2c, V q4_1", Q2C, 10), ("K q4, V f16", 7, F16), ("K q4_1, V f16", 10, F16),
            ("K q4c, V f16", Q4C, F16), ("K q2c, V f16", Q2C, F16)]


class Lib:
    def __init__(self, build):
        self.lib = ctypes.CDLL(os.path.join(build, "libattn.so"))
        self.lib.attn_quant_row_size.restype = ctypes.c_size_t
        self.lib.attn_quant_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.attn_quant_group_size.restype = ctypes.c_size_t
        self.lib.attn_quant_group_size.argtypes = [ctypes.c_int, ctypes.c_int64]

    def grouped(self, x, fmt):
        """Keys x (S, d) f32, S a multiple of 32, as a q4c / q2c cache holds
        them: (every position in its group, widened; every position in f16)."""
        x16 = x.astype(np.float16).astype(np.float32)
        size = x.shape[0] // 32 * self.lib.attn_quant_group_size(fmt, x.shape[1])
        raw = np.zeros(size, np.uint8)
        err = Error()
        assert self.lib.attn_quantize(raw.ctypes.data, ctypes.c_size_t(size), fmt, ctypes.byref(view(x16, F32)),
                                      ctypes.byref(err)) == 0, err.message
        back = np.zeros(x.shape, np.float32)
        assert self.lib.attn_dequantize(ctypes.byref(view(back, F32)), raw.ctypes.data, ctypes.c_size_t(size), fmt,
                                        ctypes.byref(err)) == 0, err.message
        return back, x16

    def turned(self, x):
        """x (f32 rows of a power-of-two size) turned by the library's Walsh-Hadamard rotation."""
        y = np.ascontiguousarray(x, np.float32).copy()
        err = Error()
        assert self.lib.attn_hadamard(ctypes.byref(view(y, F32)), ctypes.byref(err)) == 0, err.message
        return y

    def stored_keys(self, x, fmt, rotate):
        """Keys as a cache stores and reads them: with `rotate`, turned, stored, read back, turned back."""
        return self.turned(self.stored(self.turned(x), fmt)) if rotate else self.stored(x, fmt)

    def stored(self, x, fmt):
        """x (f32 rows) as the format stores them, read back as f32."""
        err = Error()
        if fmt in (F16, BF16):
            h = np.zeros(x.shape, np.uint16)
            assert self.lib.attn_tensor_convert(ctypes.byref(view(h, fmt)), ctypes.byref(view(x, F32)),
                                                ctypes.byref(err)) == 0, err.message
            back = np.zeros(x.shape, np.float32)
            assert self.lib.attn_tensor_convert(ctypes.byref(view(back, F32)), ctypes.byref(view(h, fmt)),
                                                ctypes.byref(err)) == 0, err.message
            return back
        rows = x.size // x.shape[-1]
        size = rows * self.lib.attn_quant_row_size(fmt, x.shape[-1])
        raw = np.zeros(size, np.uint8)
        assert self.lib.attn_quantize(raw.ctypes.data, ctypes.c_size_t(size), fmt, ctypes.byref(view(x, F32)),
                                      ctypes.byref(err)) == 0, err.message
        back = np.zeros(x.shape, np.float32)
        assert self.lib.attn_dequantize(ctypes.byref(view(back, F32)), raw.ctypes.data, ctypes.c_size_t(size), fmt,
                                        ctypes.byref(err)) == 0, err.message
        return back


def attention(q, k, v):
    """out, lse and the weights in float64: q (L, d), k and v (S, d)."""
    s = (q.astype(np.float64) @ k.astype(np.float64).T) / np.sqrt(q.shape[1])
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(axis=1, keepdims=True)
    p = e / l
    return p @ v.astype(np.float64), (m + np.log(l))[:, 0], p


def data(rng, kind, L=256, S=4096, d=128):
    q = rng.standard_normal((L, d)).astype(np.float32)
    k = rng.standard_normal((S, d)).astype(np.float32)
    v = rng.standard_normal((S, d)).astype(np.float32)
    if kind == "peaked":
        q *= 4
    if kind == "outliers":
        k = rng.standard_t(4, (S, d)).astype(np.float32)
        k[:, rng.choice(d, 4, replace=False)] *= 20
    return q, k, v


ROTATED = [("q8+H", 6), ("q4+H", 7), ("e4m3+H", 8)]


def formats(keys=False):
    """(name, key format, value format, rotate keys) for every row of the tables."""
    if keys:
        return [(n, kf, vf, False) for n, kf, vf in KEY_ROWS]
    rows = [(n, f, f, False) for n, f in FORMATS]
    if ARGS.hadamard:  # each rotated format right after its plain row
        plain = {f: n for n, f in FORMATS}
        rows = [row for n, f in ROTATED for row in ((plain[f], f, f, False), (n, f, f, True))]
    return rows


def measure(lib, rng, kind, keys=False):
    q, k, v = data(rng, kind)
    out, lse, p = attention(q, k, v)
    rows = []
    for name, kf, vf, rotate in formats(keys):
        # a snapshot of 4,096 keys: every group full, no residual window
        ks = lib.grouped(k, kf)[0] if kf in (Q4C, Q2C) else lib.stored_keys(k, kf, rotate)
        oq, lq, pq = attention(q, ks, lib.stored(v, vf))
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.where(p > 0, p * (np.log(p) - np.log(np.maximum(pq, 1e-300))), 0).sum(axis=1)
        rows.append({"format": name, "data": kind,
                     "out_max": np.abs(oq - out).max() / np.abs(out).max(),
                     "out_rms": np.sqrt(((oq - out) ** 2).mean() / (out ** 2).mean()),
                     "lse_max": np.abs(lq - lse).max(),
                     "kl_mean": kl.mean(), "kl_max": kl.max()})
    return rows


def rope(x, base=10000.0):
    """RoPE in the halves layout on x (..., L, d) at positions 0..L-1, float64."""
    L, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    a = np.arange(L)[:, None] * inv[None, :]
    c, s = np.cos(np.concatenate([a, a], 1)), np.sin(np.concatenate([a, a], 1))
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * c + np.concatenate([-x2, x1], -1) * s


def layer_data(rng, kind, L=2048, E=1024, H=8, Hkv=2, d=128):
    """X (L, E) and the projections (out, in) of a Llama-style layer."""
    x = rng.standard_t(4, (L, E)) if kind == "outliers" else rng.standard_normal((L, E))
    w = {n: rng.standard_normal((rows, E)) / np.sqrt(E)
         for n, rows in (("q", H * d), ("k", Hkv * d), ("v", Hkv * d), ("o", E))}
    if kind == "peaked":
        w["q"] *= 4
    if kind == "outliers":  # pairs (i, i + d/2) of the lowest frequencies, in every KV head
        for h in range(Hkv):
            for i in (d // 2 - 3, d // 2 - 1):
                w["k"][[h * d + i, h * d + i + d // 2]] *= 20
    return x.astype(np.float32).astype(np.float64), w, H, Hkv, d


def layer_measure(lib, rng, kind, keys=False):
    x, w, H, Hkv, d = layer_data(rng, kind)
    L = x.shape[0]

    def heads(a, h):  # (L, h*d) -> (h, L, d)
        return a.reshape(L, h, d).transpose(1, 0, 2)

    q = rope(heads(x @ w["q"].T, H))
    k = rope(heads(x @ w["k"].T, Hkv)).astype(np.float32)  # what an f32 cache holds
    v = heads(x @ w["v"].T, Hkv).astype(np.float32)
    causal = np.tril(np.ones((L, L), bool))

    # grouped keys with a window of R: token t sees positions j < 32 floor((t + 1) / 32) - R quantized, the rest in f16
    def in_group(R):
        return np.arange(L)[None, :] < (np.arange(L)[:, None] + 1) // 32 * 32 - R

    def run(kk, vv, k16=None, R=0):
        outs, lses, ps = [], [], []
        for h in range(H):
            g = h // (H // Hkv)
            s = q[h] @ kk[g].astype(np.float64).T / np.sqrt(d)
            if k16 is not None:
                s = np.where(in_group(R), s, q[h] @ k16[g].astype(np.float64).T / np.sqrt(d))
            s = np.where(causal, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            l = e.sum(axis=1, keepdims=True)
            p = e / l
            outs.append(p @ vv[g].astype(np.float64))
            lses.append((m + np.log(l))[:, 0])
            ps.append(p)
        return np.stack(outs).transpose(1, 0, 2).reshape(L, H * d) @ w["o"].T, np.stack(lses), ps

    out, lse, p = run(k, v)
    rows = []
    window = ARGS.residual
    table = []
    for name, kf, vf, rotate in formats(keys):
        table.append((name, kf, vf, rotate, 0))
        if window and kf in (Q4C, Q2C):
            table.append((name.replace("K q", "K q", 1).replace(",", " R=%d," % window, 1), kf, vf, rotate, window))
    for name, kf, vf, rotate, R in table:
        k16 = None
        if kf in (Q4C, Q2C):
            held = [lib.grouped(np.ascontiguousarray(k[g]), kf) for g in range(Hkv)]
            ks, k16 = np.stack([a for a, _ in held]), np.stack([b for _, b in held])
        else:
            ks = np.stack([lib.stored_keys(np.ascontiguousarray(k[g]), kf, rotate) for g in range(Hkv)])
        vs = np.stack([lib.stored(np.ascontiguousarray(v[g]), vf) for g in range(Hkv)])
        oq, lq, pq = run(ks, vs, k16, R)
        kl = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for a, b in zip(p, pq):
                kl.append(np.where(a > 0, a * (np.log(a) - np.log(np.maximum(b, 1e-300))), 0).sum(axis=1))
        kl = np.concatenate(kl)
        rows.append({"format": name, "data": kind,
                     "out_max": np.abs(oq - out).max() / np.abs(out).max(),
                     "out_rms": np.sqrt(((oq - out) ** 2).mean() / (out ** 2).mean()),
                     "lse_max": np.abs(lq - lse).max(),
                     "kl_mean": kl.mean(), "kl_max": kl.max()})
    return rows


def main():
    lib = Lib(ARGS.build)
    rng = np.random.default_rng(ARGS.seed)
    rows = []
    for kind in ("normal", "peaked", "outliers"):
        rows += (layer_measure if ARGS.layer else measure)(lib, rng, kind, ARGS.keys)
    if ARGS.markdown:
        print("| data | %s | out: max rel. error | out: RMS rel. error | lse: max abs. error | KL mean | KL max |" %
              ("keys, values" if ARGS.keys else "format"))
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print("| %s | %s | %.2e | %.2e | %.2e | %.2e | %.2e |" % (r["data"], r["format"], r["out_max"], r["out_rms"],
                                                                  r["lse_max"], r["kl_mean"], r["kl_max"]))
    else:
        for r in rows:
            print("%-9s %-15s out max %.2e rms %.2e  lse %.2e  KL mean %.2e max %.2e" % (
                r["data"], r["format"], r["out_max"], r["out_rms"], r["lse_max"], r["kl_mean"], r["kl_max"]))


if __name__ == "__main__":
    main()
