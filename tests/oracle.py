#!/usr/bin/python3
"""oracle.py -- attn sdpa against PyTorch float64 math, on random cases.

Each case writes q, k, v (and a mask) as .npy, runs `attn sdpa` (and, for the
strided cases, the C-API helper sdpa_strided), and compares the output and
the weights with an independent float64 computation in PyTorch:
matmul, masked_fill, softmax, matmul. Errors are relative: max |ours - ref|
divided by max |ref|. Tolerances: f64 1e-12, f32 2e-5; the bf16 compute mode
attn.h's bound, computed from each case's own q, k and v (bf16_out_allowance).

Usage: oracle.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch

from scratch import scratch_dir
from seeding import test_seed
from torch_attention import broadcast_heads, causal_allowed

TOL = {np.float64: 1e-12, np.float32: 2e-5}
DECODE_MAX_L = 8  # src/fast/decode.c's cost model: the decode path runs for L <= 8 at any S
BF16_U = 2.0**-8  # bf16's unit roundoff (8 significant bits)


def reference(q, k, v, mask=None, causal=0, scale=None):
    """PyTorch float64 attention with attn's semantics (see README): the output, the
    weights, each row's log-sum-exp and the largest finite |score|."""
    q, k, v = broadcast_heads(*(torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (q, k, v)))
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    allowed = causal_allowed(L, S, causal)
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
    lse = torch.logsumexp(s, dim=-1).numpy()  # -inf where no key takes part
    max_score = float(s[torch.isfinite(s)].abs().max()) if torch.isfinite(s).any() else 0.0
    return torch.matmul(w, v).numpy(), w.numpy(), lse, max_score


def rel_err(got, ref):
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return math.inf
    scale = max(np.max(np.abs(ref)) if ref.size else 0.0, 1e-300)
    return float(np.max(np.abs(got - ref)) / scale) if ref.size else 0.0


def cpuinfo():
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def cpu_has_bf16():
    """Whether this CPU has AVX512_BF16 (Linux's flag avx512_bf16)."""
    return " avx512_bf16" in cpuinfo()


def bf16_kernels_expected(isa):
    """The bf16 kernels the library should run, as the names it may report: AMX
    tiles where the CPU has AMX-BF16 (or, when Linux refuses the tile state, what
    follows, saying so); AVX512_BF16 with the AVX-512 kernels where VDPBF16PS is
    full rate (AMD's cores); the f32 kernels where it is half rate (Intel's) or
    absent (an emulation would be some 200 times slower); the exact emulation
    with the portable C kernels."""
    info = cpuinfo()
    if isa == "c":
        return {"emulated"}
    if isa != "avx512" or not cpu_has_bf16():
        return {"f32"}
    full_rate = "AuthenticAMD" in info or "HygonGenuine" in info
    after = "avx512_bf16" if full_rate else "f32"
    if " amx_bf16" in info and " amx_tile" in info:
        return {"amx_bf16", after + "(amx_refused_by_linux)"}
    return {"avx512_bf16"} if full_rate else {"f32(vdpbf16ps_half_rate_here)"}


def check_bf16_kernels(call):
    """Why the bf16 compute mode did not run the kernels it should, or None."""
    isa, got = call.get("isa"), call.get("bf16_kernels")
    want = bf16_kernels_expected(isa)
    return None if got in want else f"bf16 compute ran bf16_kernels={got} on isa={isa}, expected one of {sorted(want)}"


def verbose_calls(stderr):
    """The ATTN_VERBOSE lines of one run, each as a dict of its key=value words."""
    calls = []
    for line in stderr.splitlines():
        if line.startswith("attn: sdpa "):
            calls.append(dict(w.split("=", 1) for w in line.split()[2:] if "=" in w))
    return calls


def bf16_lse_allowance(q, k, scale):
    """What the bf16 compute mode may add to lse's error: each score from q
    and k rounded to bf16 (u = 2^-8 each), 2u * s_abs, and 0.2u * s_abs for
    f32's sums (s_abs the largest scale * sum_e |q_e| |k_e|, as in
    oracle_backward.py); each row's sum of weights within 1.02e-4 relative
    (the mode's degree-3 2^x, src/kernels/exp2.h): 1.1e-4 with f32's rounding."""
    q64, k64 = np.abs(np.asarray(q, np.float64)), np.abs(np.asarray(k, np.float64))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else abs(scale)
    s_abs = float((np.matmul(q64, np.swapaxes(k64, -1, -2)) * scale).max()) if q64.size and k64.size else 0.0
    return bf16_lse_allowance_of(s_abs)


def bf16_lse_allowance_of(s_abs):
    """bf16_lse_allowance for a given s_abs: 2.2u * s_abs + 1.1e-4."""
    return 2.2 * BF16_U * s_abs + 1.1e-4


def bf16_out_allowance(y, vmax):
    """attn.h's bound of the bf16 compute mode's output (attn_sdpa's numerics):
    max|out - exact| <= ((1 + 2u + 2e-5) e^(2y) - 1) max|v|, y what the mode
    adds to lse's error (bf16_lse_allowance): the scores' rounding moves each
    normalised weight by a factor within e^(+-2y), and rounding the weights
    and v to bf16 adds 2u of each product, f32's sums 2e-5."""
    return ((1 + 2 * BF16_U + 2e-5) * math.exp(min(2 * y, 700)) - 1) * vmax


def lse_error(got, ref, dt, max_score, extra=0.0):
    """Why the log-sum-exp output is off, or None. -inf (no key takes part)
    must match exactly; elsewhere f64 agrees to 1e-12 relative to
    max(1, |lse|), and f32 within 2e-5 of that plus 4 * 2^-24 * max|score|
    (the rounding of the scores, as for the output), plus extra (the bf16
    compute mode's own error)."""
    # Rounded to the output's dtype: an lse beyond f32's range is inf there.
    with np.errstate(over="ignore"):
        ref = np.asarray(ref).astype(dt).astype(np.float64)
    got = np.asarray(got, np.float64)
    if got.shape != ref.shape:
        return f"lse shape {got.shape}, expected {ref.shape}"
    if not np.array_equal(np.isinf(got) * np.sign(got), np.isinf(ref) * np.sign(ref)):
        return "lse is infinite in other rows than PyTorch's"
    dead = np.isinf(ref)
    if not dead.all():
        scale = max(1.0, float(np.abs(ref[~dead]).max()))
        err = float(np.abs(got[~dead] - ref[~dead]).max())
        allowed = 1e-12 * scale if dt is np.float64 else 2e-5 * scale + 4 * 2.0**-24 * max_score + extra
        if not err <= allowed:
            return f"lse error {err:.3g} > {allowed:.3g}"
    return None


class Runner:
    def __init__(self, build, isa):
        self.attn = os.path.join(build, "attn")
        self.strided = os.path.join(build, "tests", "sdpa_strided")
        self.tmp = scratch_dir("attn_oracle_")
        self.isa = isa  # the ATTN_ISA this run forces, or None
        self.failed = 0
        self.kernels = {}  # kernel name -> cases it passed
        self.bf16_ratios = {True: [], False: []}  # the bf16 mode's max|out - exact| / attn.h's bound, by typical

    def report(self, name, ok, why=""):
        print(f"ok {name}" if ok else f"FAIL {name}: {why}", flush=True)
        self.failed += not ok

    def save(self, name, a):
        path = os.path.join(self.tmp, name + ".npy")
        np.save(path, a)
        return path

    def run(self, cmd):
        """Run cmd with ATTN_VERBOSE=1: (returncode, stderr, the one call's verbose fields)."""
        env = dict(os.environ, ATTN_VERBOSE="1")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        calls = verbose_calls(r.stderr)
        return r.returncode, r.stderr, calls[0] if len(calls) == 1 else None

    def check_path(self, call, want_kernel, fallback):
        """Why the call did not take the path the case is for, or None."""
        if call is None:
            return "no single ATTN_VERBOSE line"
        if call["kernel"] != want_kernel:
            return f"ran kernel={call['kernel']}, expected {want_kernel}"
        if self.isa and want_kernel in ("flash", "decode") and call["isa"] != self.isa:
            return f"ran isa={call['isa']}, expected {self.isa}"
        n = int(call["fallback"].split("/")[0])
        if fallback is False and n:
            return f"{call['fallback']} items fell back to the exact kernel"
        if fallback is True and not n:
            return "nothing fell back to the exact kernel"
        return None

    def case(self, name, q, k, v, mask=None, causal=0, scale=None, strided=False, kv=None,
             compute_bf16=False, fallback=False, tol=None, bound=None, lse_extra=0.0, typical=True):
        """One case, run twice: for the output alone, through the kernel that
        q's dtype and the shapes call for (flash or decode for f32, exact for
        f64), and with -w, through the exact kernel, checking the weights too.
        kv: None, "f16" (k and v saved as float16) or "bf16" (--kv-bf16).
        fallback: False (nothing may fall back to the exact kernel), True (some
        must), None (either). bound(err_abs, ref_out) -> why, or None: a
        tolerance other than the relative one (compute_bf16: attn.h's bound of
        the mode unless given, bf16_out_allowance, and on typical data, random
        values whose roundings cancel, what attn.h says the mode comes to
        there, a few 1e-3 of max|v|: at most 1e-2). lse_extra: what lse may be
        off by beside lse_error's allowance (cancelling scores' rounding)."""
        dt = q.dtype.type
        kr, vr = k, v
        if kv == "f16":
            k, v = k.astype(np.float16), v.astype(np.float16)
            kr, vr = k, v
        if kv == "bf16":  # the command rounds k and v to bfloat16; torch does the same rounding
            kr, vr = (torch.from_numpy(a).to(torch.bfloat16).to(torch.float64).numpy() for a in (k, v))
        ref_out, ref_w, ref_lse, max_score = reference(q, kr, vr, mask, causal, scale)
        paths = [self.save(n, a) for n, a in (("q", q), ("k", k), ("v", v))]
        mpath = self.save("mask", mask) if mask is not None else None
        out, wts = os.path.join(self.tmp, "out.npy"), os.path.join(self.tmp, "w.npy")
        lse = os.path.join(self.tmp, "lse.npy")
        L, S = q.shape[-2], k.shape[-2]
        fast = "decode" if L <= DECODE_MAX_L else "flash"
        want = "exact" if dt is np.float64 else fast
        if tol is None:
            tol = TOL[dt]
        if compute_bf16 and bound is None:  # attn.h's bound of the mode, from this case's own inputs
            y = bf16_lse_allowance(q, kr, scale)
            vmax = float(np.abs(np.asarray(vr, np.float64)).max()) if np.size(vr) else 0.0

            def bound(err, ref, allowed=bf16_out_allowance(y, vmax)):
                self.bf16_ratios[typical].append(err / allowed)
                if not err <= allowed:
                    return f"error {err:.3g} > bf16 bound {allowed:.3g} (y {y:.3g})"
                if typical and not err <= 1e-2 * vmax:  # the bound is for the worst case: random data come far inside
                    return f"error {err:.3g} > 1e-2 max|v| ({vmax:.3g}) on typical data, far more than a few 1e-3"
                return None
        for with_weights in (False, True):
            if with_weights and (compute_bf16 or strided):
                continue
            for p in (out, wts, lse):
                if os.path.exists(p):
                    os.remove(p)
            if strided:
                cmd = [self.strided, *paths, out, mpath or "-", str(causal),
                       "-" if scale is None else repr(scale)]
            else:
                cmd = [self.attn, "sdpa", "-q", paths[0], "-k", paths[1], "-v", paths[2], "-o", out,
                       "--lse", lse]
                if with_weights:
                    cmd += ["-w", wts]
                if mpath:
                    cmd += ["-m", mpath]
                if causal:
                    cmd.append("--causal" if causal == 1 else "--causal=bottom-right")
                if scale is not None:
                    cmd += ["--scale", repr(scale)]
                if kv == "bf16":
                    cmd.append("--kv-bf16")
                if compute_bf16:
                    cmd.append("--compute=bf16")
            kernel = "exact" if with_weights else want
            label = f"{name}[{kernel}{'+weights' if with_weights else ''}]"
            rc, err_text, call = self.run(cmd)
            if rc != 0:
                self.report(label, False, f"exit {rc}: {err_text.strip()}")
                continue
            why = self.check_path(call, kernel, fallback if kernel != "exact" else None)
            if not why and compute_bf16 and kernel == "flash":
                why = check_bf16_kernels(call)
            if why:
                self.report(label, False, why)
                continue
            got = np.load(out)
            if got.dtype.type is not dt:
                self.report(label, False, f"output dtype {got.dtype}, expected {q.dtype}")
                continue
            err = rel_err(got, ref_out)
            if with_weights:
                err = max(err, rel_err(np.load(wts), ref_w))
            if not strided and compute_bf16:  # the mode's bound (attn.h, ATTN_COMPUTE_BF16)
                why = lse_error(np.load(lse), ref_lse, dt, max_score, y)
            elif not strided:  # the strided helper writes no lse
                why = lse_error(np.load(lse), ref_lse, dt, max_score, lse_extra)
            if why:
                self.report(label, False, why)
                continue
            if not np.all(np.isfinite(got)):
                why = "output not finite"
            elif bound is not None and not with_weights:
                why = bound(float(np.max(np.abs(got - ref_out))), ref_out)
            elif err > tol:
                why = f"relative error {err:.3g} > {tol:g} (shape {got.shape})"
            self.report(label, why is None, why or "")
            if why is None:
                what = kernel + (f"/{kv}_kv" if kv else "") + ("/bf16_compute" if compute_bf16 else "")
                self.kernels[what] = self.kernels.get(what, 0) + 1


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    # --f32-only: the runs with ATTN_ISA forced; f64 never reaches the microkernels.
    dtypes = (np.float32,) if "--f32-only" in sys.argv else (np.float64, np.float32)
    isa = os.environ.get("ATTN_ISA") or None
    rng = np.random.default_rng(test_seed(2024))
    run = Runner(build, isa)

    def rand(dt, *shape, mag=1.0):
        return (rng.standard_normal(shape) * mag).astype(dt)

    # A forced ISA this CPU lacks would quietly run another: skip instead.
    if isa:
        probe = [run.save(n, rand(np.float32, 3, 4)) for n in "qkv"]
        _, _, call = run.run([run.attn, "sdpa", "-q", probe[0], "-k", probe[1], "-v", probe[2]])
        if call is None or call["isa"] != isa:
            got = call["isa"] if call else "nothing"
            print(f"skip oracle_ATTN_ISA={isa}: this CPU lacks {isa} (the library ran {got})")
            return 0

    for dt in dtypes:
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
        # Scores of huge magnitude (about 1e30): f32 must hand them to the
        # exact kernel. Huge finite masks are scores like any other.
        run.case(f"{tag}_huge_scores", rand(dt, 2, 20, 16, mag=1e15), rand(dt, 2, 30, 16, mag=1e15),
                 rand(dt, 2, 30, 4), fallback=True)
        run.case(f"{tag}_huge_negative_mask", q, k, v, mask=np.full((L, S), -1e30, dtype=dt))
        for scale in (0.0, 0.05, -1.5, 3.0, 1e-42, 1e39):
            run.case(f"{tag}_scale_{scale}", rand(dt, 5, 6), rand(dt, 8, 6), rand(dt, 8, 3),
                     scale=scale, fallback=None if scale == 1e39 else False)
        # Strided (non-contiguous, negative-stride) views through the C API.
        run.case(f"{tag}_strided", rand(dt, 2, 3, 10, 7), rand(dt, 2, 3, 12, 7), rand(dt, 2, 3, 12, 5),
                 strided=True)
        run.case(f"{tag}_strided_gqa_mask_causal", rand(dt, 2, 4, 10, 7), rand(dt, 2, 2, 12, 7),
                 rand(dt, 2, 2, 12, 5), mask=rng.random((4, 10, 12)) < 0.7, causal=1, strided=True)
        run.case(f"{tag}_strided_scale", rand(dt, 6, 3), rand(dt, 4, 3), rand(dt, 4, 9), scale=0.7,
                 strided=True)
        run.case(f"{tag}_strided_decode", rand(dt, 2, 4, 3, 20), rand(dt, 2, 2, 2500, 20),
                 rand(dt, 2, 2, 2500, 9), mask=rng.random((4, 3, 2500)) < 0.7, causal=2, strided=True)
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
        padding_masks(run, rand, dt, tag)
        plus_inf_masks(run, rand, dt, tag)
    f32_paths(run, rand, rng)
    accuracy_bound(run, rand, rng)
    cancelling_scores(run, rand, rng)
    sums_rounding_one_way(run)
    bf16_rounding_one_way(run)
    counts = ", ".join(f"{k} {n}" for k, n in sorted(run.kernels.items()))
    print(f"# cases passed per kernel: {counts}")
    for typical, what in ((True, "random data"), (False, "roundings one way")):
        r = sorted(run.bf16_ratios[typical])  # how close the bf16 mode comes to its bound: a loose one tests little
        if r:
            print(f"# bf16 compute mode, {what}: error / attn.h's bound {r[0]:.3g} to {r[-1]:.3g}, "
                  f"median {r[len(r) // 2]:.3g} ({len(r)} runs)")
    return 1 if run.failed else 0


def padding_masks(run, rand, dt, tag):
    """Float masks of huge finite values, as Hugging Face pads with
    torch.finfo(dtype).min: a finite mask value is a finite score, in flash
    and decode shapes alike."""
    fmin, fmax = np.finfo(dt).min, np.finfo(dt).max
    for L, S in ((6, 40), (4, 3000), (1, 2048)):
        q, k, v = rand(dt, 2, L, 16), rand(dt, 2, S, 16), rand(dt, 2, S, 8)
        m = np.zeros((L, S), dt)
        m[0] = fmin                                 # every key at finfo.min: uniform weights
        if L > 1:
            m[1] = -np.inf
            m[1, 5] = fmin                          # one finfo.min key among -inf: its value
        if L > 2:
            m[2, 7] = 0.9 * fmax                    # one huge positive key: its value
        if L > 3:
            m[3, : S // 2] = fmin                   # padding: the first half takes no weight
        run.case(f"{tag}_finfo_min_mask_L{L}_S{S}", q, k, v, mask=m)
        hf = np.where(np.arange(S) < S - 3, 0, fmin).astype(dt) * np.ones((L, 1), dt)
        run.case(f"{tag}_hf_padding_mask_causal_L{L}_S{S}", q, k, v, mask=hf, causal=2)


def plus_inf_masks(run, rand, dt, tag):
    """+inf in a float mask: PyTorch's own math (the 1.13 function, a float
    mask added to the scores) makes the row NaN, e^(inf - inf); attn's out
    and weights must be NaN exactly where torch's are, and within the
    tolerance elsewhere, in flash and decode shapes (both go to the exact
    kernel) and with -w."""
    for L, S in ((6, 40), (3, 9)):
        q, k, v = rand(dt, 2, L, 16), rand(dt, 2, S, 16), rand(dt, 2, S, 8)
        m = rand(dt, L, S)
        m[0, 3] = np.inf                             # one +inf key
        m[2, [1, 5, 7]] = np.inf                     # several
        m[L - 1] = np.inf                            # all of them
        t = [torch.from_numpy(a.astype(np.float64)) for a in (q, k, v, m)]
        ref, ref_w = torch.nn.functional._scaled_dot_product_attention(t[0], t[1], t[2], t[3], 0.0, True)
        ref, ref_w = ref.numpy(), ref_w.numpy()
        paths = [run.save(n, a) for n, a in (("q", q), ("k", k), ("v", v), ("mask", m))]
        for weights in (False, True):
            label = f"{tag}_plus_inf_mask_nan_rows_as_pytorch_L{L}_S{S}{'+weights' if weights else ''}"
            out, wts = os.path.join(run.tmp, "out.npy"), os.path.join(run.tmp, "w.npy")
            cmd = [run.attn, "sdpa", "-q", paths[0], "-k", paths[1], "-v", paths[2], "-m", paths[3], "-o", out]
            rc, err_text, _ = run.run(cmd + (["-w", wts] if weights else []))
            if rc != 0:
                run.report(label, False, f"exit {rc}: {err_text.strip()}")
                continue
            pairs = [(np.load(out), ref)] + ([(np.load(wts), ref_w)] if weights else [])
            why = None
            for got, want in pairs:
                nan = np.isnan(want)
                if not nan.any() or not np.array_equal(np.isnan(got), nan):
                    why = f"NaN at {np.argwhere(np.isnan(got))[:4].tolist()}, torch's at {np.argwhere(nan)[:4].tolist()}"
                elif rel_err(got[~nan], want[~nan]) > TOL[dt]:
                    why = f"relative error {rel_err(got[~nan], want[~nan]):.3g} in the finite rows"
            run.report(label, why is None, why or "")


def f32_paths(run, rand, rng):
    """A few dozen cases for each f32 path: decode, flash with odd sizes,
    16-bit keys and values, and the bf16 compute mode."""
    f32 = np.float32
    # decode: L = 1..4 against 2048 keys and more, causal bottom-right, masks, GQA.
    for i, (L, S, E, Ev, hq, hk) in enumerate(((1, 2048, 64, 64, 1, 1), (2, 3000, 33, 17, 4, 2),
                                               (3, 5000, 128, 40, 8, 2), (4, 2049, 7, 3, 4, 1),
                                               (1, 9000, 16, 100, 2, 2), (4, 4100, 100, 33, 6, 3))):
        q, k, v = rand(f32, 2, hq, L, E), rand(f32, 2, hk, S, E), rand(f32, 2, hk, S, Ev)
        mb = rng.random((hq, L, S)) < 0.8
        mf = np.where(rng.random((L, S)) < 0.1, -np.inf, rng.standard_normal((L, S))).astype(f32)
        tag = f"decode{i}_L{L}_S{S}_E{E}_Ev{Ev}_H{hq}/{hk}"
        run.case(f"f32_{tag}", q, k, v)
        run.case(f"f32_{tag}_causal_br", q, k, v, causal=2)
        run.case(f"f32_{tag}_causal_tl_boolmask", q, k, v, mask=mb, causal=1)
        run.case(f"f32_{tag}_floatmask_causal_br", q, k, v, mask=mf, causal=2)
    # flash: odd E and Ev, L != S, both causal alignments, masks, GQA, broadcast batch.
    sizes = (1, 3, 7, 33, 100, 257)
    for i, E in enumerate(sizes):
        Ev = sizes[(i + 2) % len(sizes)]
        L, S = int(rng.integers(5, 300)), int(rng.integers(5, 300))
        q, k, v = rand(f32, 3, 1, 4, L, E), rand(f32, 1, 2, 2, S, E), rand(f32, 3, 2, 2, S, Ev)
        mb = rng.random((4, L, S)) < 0.8
        mf = np.where(rng.random((L, S)) < 0.1, -np.inf, rng.standard_normal((L, S))).astype(f32)
        tag = f"flash_E{E}_Ev{Ev}_L{L}_S{S}_gqa4/2_broadcast"
        run.case(f"f32_{tag}", q, k, v)
        run.case(f"f32_{tag}_causal_tl", q, k, v, causal=1)
        run.case(f"f32_{tag}_causal_br_boolmask", q, k, v, mask=mb, causal=2)
        run.case(f"f32_{tag}_floatmask", q, k, v, mask=mf)
    # Several query blocks and key blocks (768 rows, 256 or 512 keys, per core).
    run.case("f32_flash_blocks_L1000_S1300_E64_causal_br", rand(f32, 1000, 64), rand(f32, 1300, 64),
             rand(f32, 1300, 48), causal=2)
    # 16-bit keys and values holding random values, in both kernels.
    for kv in ("f16", "bf16"):
        for i, (L, S, E, Ev, causal) in enumerate(((5, 9, 40, 24, 0), (70, 3000, 40, 24, 2),
                                                   (1, 5000, 64, 64, 0), (4, 2500, 33, 7, 1),
                                                   (130, 700, 100, 33, 1), (3, 2048, 1, 3, 2))):
            q = rand(f32, 2, 4, L, E)
            k, v = rand(f32, 2, 2, S, E), rand(f32, 2, 2, S, Ev) * 3
            mask = rng.random((4, L, S)) < 0.8 if i % 2 else None
            run.case(f"{kv}_kv{i}_L{L}_S{S}_E{E}_Ev{Ev}_c{causal}", q, k, v, mask=mask, causal=causal,
                     kv=kv)
            mf = np.where(rng.random((L, S)) < 0.1, -np.inf, rng.standard_normal((L, S))).astype(f32)
            run.case(f"{kv}_kv{i}_floatmask_gqa", q, k, v, mask=mf, causal=2 - causal % 2, kv=kv)
    # The bf16 compute mode (opt-in): products of bf16 values, f32 sums.
    for L, S, E, Ev, causal in ((9, 13, 8, 24, 0), (200, 900, 64, 64, 1), (70, 300, 33, 20, 2),
                                (300, 300, 128, 128, 0), (17, 1000, 1, 5, 1), (100, 50, 257, 100, 2)):
        q, k, v = rand(f32, 2, 2, L, E), rand(f32, 2, 1, S, E), rand(f32, 2, 1, S, Ev)
        tag = f"compute_bf16_L{L}_S{S}_E{E}_Ev{Ev}_c{causal}"
        run.case(tag, q, k, v, causal=causal, compute_bf16=True)
        run.case(f"{tag}_boolmask", q, k, v, mask=rng.random((L, S)) < 0.9, causal=causal, compute_bf16=True)
        mf = np.where(rng.random((L, S)) < 0.1, -np.inf, rng.standard_normal((L, S))).astype(f32)
        run.case(f"{tag}_floatmask", q, k, v, mask=mf, causal=causal, compute_bf16=True)
        run.case(f"{tag}_kv_bf16", q, k, v, causal=causal, compute_bf16=True, kv="bf16")


def accuracy_bound(run, rand, rng):
    """The documented f32 bound, across score magnitudes from 1e-3 to 1e4:
    max|out - exact| <= 2e-5 max|exact| + 4 * 2^-24 * max|score| * max|v|.
    (Rounding a score s to f32 moves it by up to 2^-24 |s|; the query's
    scaling, the subtraction of the row maximum and its scaling by log2 e
    add as much again, and a softmax whose scores move by at most d changes
    the output by at most 2 d max|v|.)"""
    f32 = np.float32
    for L, S, E in ((200, 300, 64), (3, 4000, 64), (100, 100, 128)):
        for target in (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3, 3e3, 1e4):
            sig = math.sqrt(target / 4)  # max |q.k|/sqrt(E) over L x S pairs is about 4 sig^2
            q, k, v = rand(f32, L, E, mag=sig), rand(f32, S, E, mag=sig), rand(f32, S, 16)
            s = np.abs(q.astype(np.float64) @ k.T.astype(np.float64)).max() / math.sqrt(E)
            vmax = float(np.abs(v).max())

            def bound(err, ref, s=s, vmax=vmax):
                allowed = 2e-5 * float(np.abs(ref).max()) + 4 * 2.0**-24 * s * vmax
                return None if err <= allowed else f"error {err:.3g} > bound {allowed:.3g} (max|s| {s:.3g})"
            run.case(f"f32_bound_L{L}_S{S}_E{E}_maxscore{s:.2g}", q, k, v, bound=bound)


def cancelling_scores(run, rand, rng):
    """The documented f32 bound where the products q_e k_e cancel: keys
    nearly orthogonal to queries of size 30 give scores near 1 whose f32
    sums round by up to E 2^-24 of sum |q_e k_e| (s_abs), far more than
    2^-24 of the score itself:
    max|out - exact| <= 2e-5 max|P |v|| + 2 (E + 6) 2^-24 s_abs max|v|.
    Decode (3 queries) and flash (100) shapes."""
    f32 = np.float32
    for L, S, E in ((3, 500, 128), (100, 200, 256)):
        q = rand(f32, L, E, mag=30.0).astype(np.float64)
        k = rand(f32, S, E, mag=30.0).astype(np.float64)
        basis, _ = np.linalg.qr(q.T)  # (E, L): the queries' span
        k = (k - (k @ basis) @ basis.T + rng.standard_normal((S, E)) * 1e-3).astype(f32)
        q, v = q.astype(f32), rand(f32, S, 16)
        qd, kd = q.astype(np.float64), k.astype(np.float64)
        s_abs = float((np.abs(qd) @ np.abs(kd).T).max()) / math.sqrt(E)
        pv = float(np.abs(reference(q, k, np.abs(v), None, 0, None)[0]).max())
        vmax = float(np.abs(v).max())

        def bound(err, ref, s_abs=s_abs, pv=pv, vmax=vmax, E=E):
            allowed = 2e-5 * pv + 2 * (E + 6) * 2.0**-24 * s_abs * vmax
            return None if err <= allowed else f"error {err:.3g} > bound {allowed:.3g} (s_abs {s_abs:.3g})"
        run.case(f"f32_bound_cancelling_L{L}_S{S}_E{E}", q, k, v, bound=bound,
                 lse_extra=(E + 6) * 2.0**-24 * s_abs)


def sums_rounding_one_way(run):
    """The documented f32 bound where every addition of the weighted sum
    rounds the same way: equal scores, the first key's value 1 and every
    other key's 0.49 of an f32 ulp of 1, so each p_j v_j added to a sum near
    1 is lost. The flash kernel adds one key at a time into its f32 sum, and
    out errs by about S 2^-24 of max|P |v|| (1e-3 at S = 16384), far past a
    bound of 2e-5 that does not grow with S; the decode kernel's chunks err
    by up to 1.5 times that 2e-5. attn.h's bound adds 2 S 2^-24 for the
    sums of P V and of the weights:
    max|out - exact| <= (2e-5 + 2 S 2^-24) max|P |v|| + 2 (E + 6) 2^-24 s_abs max|v|."""
    f32 = np.float32
    for L, S, E in ((4, 4096, 16), (64, 16384, 16)):
        q = np.zeros((L, E), f32)  # every score 0: weights all 1, no rescaling
        k = np.ones((S, E), f32)
        v = np.full((S, 8), f32(0.49 * 2.0**-23), f32)
        v[0] = 1.0
        pv = float(np.abs(v.astype(np.float64)).mean(0).max())

        def bound(err, ref, pv=pv, n=S):
            allowed = (2e-5 + 2 * n * 2.0**-24) * pv
            return None if err <= allowed else f"error {err:.3g} > bound {allowed:.3g} (n {n})"
        run.case(f"f32_bound_sums_one_way_L{L}_S{S}", q, k, v, bound=bound)


def bf16_rounding_one_way(run):
    """The bf16 compute mode's bound where rounding to bf16 moves the scores
    one way: every value of q and of the even keys just under a midpoint
    between bf16 values (each rounded down by u relative), of the odd keys
    just over one (rounded up), so the even keys' scores drop by 2u s_abs
    against the odd ones' and the weight moves to them; values +1 and -1,
    rounded down and up alike. Random data comes within 2% of the bound at
    most; this comes within a few times of it, at s_abs from 0.5 to 32."""
    f32 = np.float32
    below, above = f32(1 + 2.0**-8 - 2.0**-20), f32(1 + 2.0**-8 + 2.0**-20)  # to 1 and 1 + 2^-7 in bf16
    L, S, E = 16, 64, 64  # 16 queries: the flash kernel (decode computes in f32 in this mode too)
    for c in (0.25, 1.0, 2.0):
        q = np.full((L, E), c * below, f32)
        k = np.where(np.arange(S)[:, None] % 2 == 0, c * below, c * above).astype(f32) * np.ones((1, E), f32)
        v = np.where(np.arange(S)[:, None] % 2 == 0, below, -above).astype(f32) * np.ones((1, 8), f32)
        run.case(f"compute_bf16_rounding_one_way_s_abs{c * c * math.sqrt(E):g}", q, k, v, compute_bf16=True,
                 typical=False)


if __name__ == "__main__":
    sys.exit(main())
