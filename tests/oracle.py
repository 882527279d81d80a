#!/usr/bin/python3
"""oracle.py -- attn sdpa against PyTorch float64 math, on random cases.

Each case writes q, k, v (and a mask) as .npy, runs `attn sdpa` (and, for the
strided cases, the C-API helper sdpa_strided), and compares the output and
the weights with an independent float64 computation in PyTorch:
matmul, masked_fill, softmax, matmul. Errors are relative: max |ours - ref|
divided by max |ref|. Tolerances: f64 1e-12, f32 2e-5.

Usage: oracle.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOL = {np.float64: 1e-12, np.float32: 2e-5}
TOL_BF16_COMPUTE = 1e-2  # bf16 products: documented as a few 1e-3


def reference(q, k, v, mask=None, causal=0, scale=None):
    """PyTorch float64 attention with attn's semantics (see README)."""
    q, k, v = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (q, k, v))
    rank = max(q.dim(), k.dim(), v.dim())
    q, k, v = (a.reshape((1,) * (rank - a.dim()) + tuple(a.shape)) for a in (q, k, v))
    if rank >= 3 and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal == 1:
        allowed = torch.tril(allowed)
    elif causal == 2:
        allowed = torch.tril(allowed, diagonal=S - L)
    if mask is not None:
        m = torch.from_numpy(mask)
        if m.dtype == torch.bool:
            allowed = allowed & m
        else:
            s = s + m.to(torch.float64)
    s = s.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(s, dim=-1)
    # Rows where no key takes part: weights 0 (PyTorch >= 2.5's behaviour).
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)
    w = w.masked_fill(dead, 0.0)
    return torch.matmul(w, v).numpy(), w.numpy()


def rel_err(got, ref):
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return math.inf
    scale = max(np.max(np.abs(ref)) if ref.size else 0.0, 1e-300)
    return float(np.max(np.abs(got - ref)) / scale) if ref.size else 0.0


class Runner:
    def __init__(self, build):
        self.attn = os.path.join(build, "attn")
        self.strided = os.path.join(build, "tests", "sdpa_strided")
        self.tmp = tempfile.mkdtemp(prefix="attn_oracle_")
        self.failed = 0

    def report(self, name, ok, why=""):
        print(f"ok {name}" if ok else f"FAIL {name}: {why}", flush=True)
        self.failed += not ok

    def save(self, name, a):
        path = os.path.join(self.tmp, name + ".npy")
        np.save(path, a)
        return path

    def case(self, name, q, k, v, mask=None, causal=0, scale=None, strided=False, kv_bf16=False,
             compute_bf16=False):
        dt = q.dtype.type
        kr, vr = k, v
        if kv_bf16:  # the command rounds k and v to bfloat16; torch does the same rounding
            kr, vr = (torch.from_numpy(a).to(torch.bfloat16).to(torch.float64).numpy() for a in (k, v))
        ref_out, ref_w = reference(q, kr, vr, mask, causal, scale)
        paths = [self.save(n, a) for n, a in (("q", q), ("k", k), ("v", v))]
        mpath = self.save("mask", mask) if mask is not None else None
        out, wts = os.path.join(self.tmp, "out.npy"), os.path.join(self.tmp, "w.npy")
        for p in (out, wts):
            if os.path.exists(p):
                os.remove(p)
        if strided:
            cmd = [self.strided, *paths, out, mpath or "-", str(causal),
                   "-" if scale is None else repr(scale)]
        else:
            cmd = [self.attn, "sdpa", "-q", paths[0], "-k", paths[1], "-v", paths[2],
                   "-o", out, "-w", wts]
            if mpath:
                cmd += ["-m", mpath]
            if causal:
                cmd.append("--causal" if causal == 1 else "--causal=bottom-right")
            if scale is not None:
                cmd += ["--scale", repr(scale)]
            if kv_bf16:
                cmd.append("--kv-bf16")
            if compute_bf16:
                cmd.append("--compute=bf16")
                cmd.remove("-w")
                cmd.remove(wts)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return self.report(name, False, f"exit {r.returncode}: {r.stderr.strip()}")
        got = np.load(out)
        if got.dtype.type is not dt:
            return self.report(name, False, f"output dtype {got.dtype}, expected {q.dtype}")
        err = rel_err(got, ref_out)
        if not strided and not compute_bf16:
            err = max(err, rel_err(np.load(wts), ref_w))
        tol = TOL_BF16_COMPUTE if compute_bf16 else TOL[dt]
        ok = err <= tol and np.all(np.isfinite(got))
        self.report(name, ok, f"relative error {err:.3g} > {tol:g} (shape {got.shape})")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 2024
    rng = np.random.default_rng(seed)
    run = Runner(build)

    def rand(dt, *shape, mag=1.0):
        return (rng.standard_normal(shape) * mag).astype(dt)

    for dt in (np.float64, np.float32):
        tag = "f64" if dt is np.float64 else "f32"
        # Odd sizes, L < S and L > S, Ev != E.
        for E in (1, 3, 7, 33, 100):
            for L, S in ((1, 1), (3, 7), (7, 3), (33, 100), (100, 33)):
                Ev = int(rng.integers(1, 12))
                run.case(f"{tag}_E{E}_L{L}_S{S}_Ev{Ev}", rand(dt, 2, L, E), rand(dt, 2, S, E),
                         rand(dt, 2, S, Ev))
        # Causal alignments, square and not.
        for causal in (1, 2):
            for L, S in ((5, 5), (3, 9), (9, 3), (70, 130), (130, 70)):
                run.case(f"{tag}_causal{causal}_L{L}_S{S}", rand(dt, 2, 3, L, 16),
                         rand(dt, 2, 3, S, 16), rand(dt, 2, 3, S, 8), causal=causal)
        # Masks: bool and float, with broadcasting, and with causal.
        B, H, L, S, E = 2, 4, 9, 13, 8
        q, k, v = rand(dt, B, H, L, E), rand(dt, B, H, S, E), rand(dt, B, H, S, 5)
        for mshape in ((L, S), (1, S), (L, 1), (H, 1, S), (B, 1, L, S), (B, H, L, S)):
            mb = rng.random(mshape) < 0.7
            mf = np.where(rng.random(mshape) < 0.2, -np.inf, rng.standard_normal(mshape)).astype(dt)
            sh = "x".join(map(str, mshape))
            run.case(f"{tag}_boolmask_{sh}", q, k, v, mask=mb)
            run.case(f"{tag}_floatmask_{sh}", q, k, v, mask=mf)
            run.case(f"{tag}_boolmask_causal_{sh}", q, k, v, mask=mb, causal=1)
            run.case(f"{tag}_floatmask_causal_br_{sh}", q, k, v, mask=mf, causal=2)
        # Fully masked rows, by bool mask, by -inf, by causal with L > S.
        mb = rng.random((L, S)) < 0.6
        mb[[0, 4, 8]] = False
        run.case(f"{tag}_fully_masked_rows_bool", q, k, v, mask=mb)
        mf = np.zeros((L, S), dtype=dt)
        mf[[1, 2]] = -np.inf
        run.case(f"{tag}_fully_masked_rows_float", q, k, v, mask=mf)
        run.case(f"{tag}_fully_masked_rows_causal", rand(dt, 9, 4), rand(dt, 5, 4), rand(dt, 5, 3),
                 causal=2)
        # GQA 8/2 and MQA 4/1, with masks and causal too.
        for hq, hk in ((8, 2), (4, 1)):
            run.case(f"{tag}_gqa_{hq}_{hk}", rand(dt, 2, hq, 11, 16), rand(dt, 2, hk, 17, 16),
                     rand(dt, 2, hk, 17, 12), mask=rng.random((hq, 11, 17)) < 0.8, causal=2)
        # Broadcast batch dimensions and ranks 2 and 5.
        run.case(f"{tag}_broadcast_batch", rand(dt, 3, 1, 2, 6, 8), rand(dt, 1, 4, 2, 10, 8),
                 rand(dt, 3, 4, 2, 10, 8))
        run.case(f"{tag}_rank2", rand(dt, 7, 5), rand(dt, 9, 5), rand(dt, 9, 2))
        # Scores of huge magnitude (about 1e30), and non-default scales.
        run.case(f"{tag}_huge_scores", rand(dt, 2, 20, 16, mag=1e15), rand(dt, 2, 30, 16, mag=1e15),
                 rand(dt, 2, 30, 4))
        run.case(f"{tag}_huge_negative_mask", q, k, v, mask=np.full((L, S), -1e30, dtype=dt))
        for scale in (0.0, 0.05, -1.5, 3.0):
            run.case(f"{tag}_scale_{scale}", rand(dt, 5, 6), rand(dt, 8, 6), rand(dt, 8, 3),
                     scale=scale)
        # Strided (non-contiguous, negative-stride) views through the C API.
        run.case(f"{tag}_strided", rand(dt, 2, 3, 10, 7), rand(dt, 2, 3, 12, 7), rand(dt, 2, 3, 12, 5),
                 strided=True)
        run.case(f"{tag}_strided_gqa_mask_causal", rand(dt, 2, 4, 10, 7), rand(dt, 2, 2, 12, 7),
                 rand(dt, 2, 2, 12, 5), mask=rng.random((4, 10, 12)) < 0.7, causal=1, strided=True)
        run.case(f"{tag}_strided_scale", rand(dt, 6, 3), rand(dt, 4, 3), rand(dt, 4, 9), scale=0.7,
                 strided=True)
        # Random shapes nobody picked by hand.
        for i in range(12):
            hk = int(rng.integers(1, 4))
            hq = hk * int(rng.integers(1, 4))
            L, S, E, Ev = (int(x) for x in rng.integers(1, 90, size=4))
            causal = int(rng.integers(0, 3))
            mask = rng.random((hq, L, S)) < 0.8 if rng.random() < 0.5 else None
            run.case(f"{tag}_random{i}_H{hq}/{hk}_L{L}_S{S}_E{E}_Ev{Ev}_c{causal}",
                     rand(dt, 2, hq, L, E), rand(dt, 2, hk, S, E), rand(dt, 2, hk, S, Ev),
                     mask=mask, causal=causal, strided=bool(i % 2))
    # 16-bit keys and values with f32 queries: float16 files, and bfloat16
    # made on load by --kv-bf16; the arithmetic stays f32.
    for L, S, causal in ((5, 9, 0), (70, 3000, 2), (1, 5000, 0), (4, 2500, 1), (130, 700, 1)):
        q = rand(np.float32, 2, 4, L, 40)
        k, v = rand(np.float16, 2, 2, S, 40), rand(np.float16, 2, 2, S, 24)
        mask = rng.random((4, L, S)) < 0.8
        run.case(f"f16_kv_L{L}_S{S}_c{causal}", q, k, v, mask=mask, causal=causal)
        run.case(f"bf16_kv_L{L}_S{S}_c{causal}", q, k.astype(np.float32), v.astype(np.float32) * 3,
                 causal=causal, kv_bf16=True)
    # The bf16 compute mode (opt-in): products of bf16 values, f32 sums.
    for L, S, E, causal in ((9, 13, 8, 0), (200, 900, 64, 1), (70, 300, 33, 2)):
        run.case(f"compute_bf16_L{L}_S{S}_E{E}_c{causal}", rand(np.float32, 2, L, E), rand(np.float32, 2, S, E),
                 rand(np.float32, 2, S, 24), mask=rng.random((L, S)) < 0.9, causal=causal, compute_bf16=True)
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
