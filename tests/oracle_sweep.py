#!/usr/bin/python3
"""oracle_sweep.py -- random combinations of the documented options, many
at once, against PyTorch float64 and against the library's own definitions,
through ctypes (the Python binding's views of the arrays, no copies).

The other oracles take features one or two at a time; each case here draws
them together:
  dense   attn_sdpa (and its backward on 40% of cases): batch dimensions,
          some broadcast, GQA/MQA ratios, L and S from 1 up (L > S, S = 1,
          past one tile now and then), E and Ev odd or wide (to 513), f64
          or f32, a 16-bit q (f16, bf16) or k and v beside an f32 q, inputs
          laid out with gaps, reversed rows or columns (negative strides),
          transposed, k and v one head's rows at head stride 0, a bool or
          float mask of any broadcast shape (-inf entries, dead rows),
          passed as is or broadcast in memory (stride 0), both causal
          alignments, a given scale (0, negative, 5e-324 to 1e30), soft-
          capping (1e-35 to 1e30), ALiBi (negative slopes, f32 slopes),
          windows (1 to 10^9), sinks (up to 800 in size), RoPE, dropout
          (attn_sdpa_dropout_mask's mask in the reference), the bf16
          compute mode, the weights output, dmask and dsinks; out, lse,
          weights and every gradient against oracle_backward's autograd,
          1 and 2 threads bitwise the same, and the call and its backward
          again in a workspace of exactly the bytes attn_sdpa_workspace_size
          (attn_sdpa_backward_workspace_size) gives, between guard bytes
          that must stay untouched, bitwise the call without one; the
          backward once more with dout, out, lse and every gradient (dmask
          too) laid out with gaps, reversed or transposed, bitwise;
  varlen  attn_sdpa_varlen and its backward, bitwise attn_sdpa (and its
          backward) on each sequence's views; sequences of 0 rows, f16 q,
          k, v, dropout (sequence b's seed the call's + b); the same batch
          planned (attn_sdpa_varlen_plan_init), run on new data, bitwise
          the unplanned call;
  plan    attn_sdpa_plan_init + attn_sdpa_run on a dense case, bitwise
          attn_sdpa;
  pieces  key_start/total_keys and query_start/total_queries pieces merged
          (attn_sdpa_merge) against the whole call, and their backward
          (given the whole's out and lse) summed against the whole's;
  cache   attn_kv_cache of every storage (f64, f32, f16, bf16, q8, q4,
          q4_1, e4m3, e5m2, per-head fp8 scales, Hadamard, keys per channel
          q4c/q2c with a residual), appended in strided steps and truncated,
          f16 q:
          attend bitwise attn_sdpa on the view (f64, f32, f16), else within
          attn.h's bound of attn_sdpa on the gathered rows; attend again in
          the workspace attn.h sizes for it, bitwise;
  pages   attn_kv_pages with forks and truncations, every storage, page
          sizes 16 to 48, head-major pages, f16 q, a mask per sequence:
          each sequence of one attn_kv_pages_attend against attn_sdpa on
          its gathered rows, and the batch planned
          (attn_kv_paged_plan_init) and run, bitwise the attend;
  mha     attn_mha (and its backward) against torch.nn.MultiheadAttention
          with random projections, biases, bias_kv, zero_attn, kdim/vdim,
          masks, causal modes, batch_first, unbatched input (oracle_mha's
          module_case, backward_case); GQA layers with RoPE and sinks
          (gqa_case) and their backward, every input and parameter, with
          the score variants too (gqa_backward_case); attn_mha_cached_batch
          over random steps of rows at their own lengths
          (cached_batch_case).

Tolerances, from attn.h's bounds, with s_abs = the largest |scale| sum_e
|q_e||k_e| plus the largest |mask| and ALiBi bias:
  f64: 1e-12 max|ref| + 64 eps s_abs max|ref| (the scores' own rounding,
       which only a huge scale makes visible);
  f32: out within 2e-5 max|v| + (e^(2 (E + 6) 2^-24 s_abs) - 1) max|v|, lse
       within 2e-5 max(1, |lse|) + (E + 7) 2^-24 s_abs, each gradient within
       (2e-5 + e^x - 1) max g_abs, x = 2 (E + 5) 2^-24 s_abs; the bf16
       compute mode's and a 16-bit q's terms as attn.h adds them; a weight
       below e^-400 (f64) or 2^-64 (f32) of its row's largest counted as 0,
       as attn.h says; quantized caches also the integer kernel's Δ and the
       values' bf16 weights (2^-8).

Usage: oracle_sweep.py BUILD_DIR [--seed N] [--cases N] (N dense cases, N/3
of each other family; 400 unless given). Prints "FAIL NAME: why" for each
failing case and "ok sweep_FAMILY (N cases)" for each family without one.
"""
import ctypes
import math
import os
import sys
import zlib

import numpy as np

os.environ["ATTN_LIBRARY"] = os.path.abspath(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "libattn.so"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import attn  # noqa: E402
from attn._core import _options, view  # noqa: E402
from attn._lib import LIB, Error  # noqa: E402

import torch  # noqa: E402

from oracle_backward import reference, sink_bound  # noqa: E402
from seeding import test_seed  # noqa: E402

EPS64 = 2.0**-52
CAUSAL = {0: False, 1: "top-left", 2: "bottom-right"}
U32 = 2.0**-24


def arg(name, default):
    if name in sys.argv:
        return int(sys.argv[sys.argv.index(name) + 1])
    return default


def bf16_bits(x):
    """x (f32) rounded to bf16, nearest even: (bits as uint16, the value as f64)."""
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16), t.to(torch.float64).numpy()


def laid_out(rng, a, kind=None):
    """a (C order) placed in memory another way, the same values: 'gap' every
    other element of the last dimension, 'rev' its rows reversed in memory
    (a negative stride), 'neg' its last dimension reversed, 'tr' its last
    two dimensions stored transposed; None: one of them at random."""
    if kind == "neg":
        return np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    kind = kind or rng.choice(["c", "gap", "rev", "tr", "neg"])
    if kind == "gap":
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        big[..., 1::2] = a
        return big[..., 1::2]
    if kind == "rev" and a.ndim >= 2:
        return np.ascontiguousarray(a[..., ::-1, :])[..., ::-1, :]
    if kind == "tr" and a.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    return a


class Sweep:
    """Counts the checks of each family; prints each failure."""

    def __init__(self):
        self.counts = {}
        self.failures = {}
        self.failed = 0

    def report(self, family, name, why):
        self.counts[family] = self.counts.get(family, 0) + 1
        if why:
            self.failed += 1
            self.failures[family] = self.failures.get(family, 0) + 1
            print("FAIL %s: %s" % (name, why), flush=True)


def close(got, ref, allowed):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return "shape %s, expected %s" % (got.shape, ref.shape)
    both_inf = np.isinf(ref) & (got == ref)
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(got - ref))
    if not np.all(np.isfinite(err)):
        return "not finite where the reference is (%d elements)" % int(np.sum(~np.isfinite(err)))
    allowed = np.broadcast_to(allowed, err.shape)
    if np.any(err > allowed):
        i = np.unravel_index(np.argmax(err - allowed), err.shape)
        return "error %.3g > %.3g at %s (got %.9g, ref %.9g)" % (err[i], allowed[i], i, got[i], ref[i])
    return ""


def draw_dense(rng):
    """One random case of attn_sdpa: a dict of everything it takes."""
    c = {}
    c["dt"] = np.float64 if rng.random() < 0.5 else np.float32
    Hk = int(rng.choice([1, 1, 2, 3]))
    g = int(rng.choice([1, 1, 2, 3, 4]))
    Hq = Hk * g
    L = int(rng.choice([1, 1, 2, 3, 5, 7, 8, 9, 16, 17, 33]))
    S = int(rng.choice([1, 1, 2, 3, 4, 5, 7, 13, 16, 31, 33, 65]))
    if rng.random() < 0.08:  # past one block of the tiled kernels
        L, S = int(rng.choice([L, 65, 130])), int(rng.choice([S, 129, 257]))
    E = int(rng.choice([1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 24, 33]))
    Ev = E if rng.random() < 0.5 else int(rng.choice([1, 3, 4, 6, 11, 16, 19]))
    if rng.random() < 0.1:  # wide heads: the kernels' tiles over E and Ev
        E = int(rng.choice([48, 64, 80, 96, 128, 129, 192, 255, 256, 257, 320, 513]))
        Ev = E if rng.random() < 0.5 else int(rng.choice([7, 64, 129, 256, 300]))
    nb = int(rng.choice([0, 0, 1, 2]))
    batch = tuple(int(rng.choice([1, 2, 3])) for _ in range(nb))
    c.update(Hk=Hk, Hq=Hq, L=L, S=S, E=E, Ev=Ev, batch=batch)
    c["causal"] = int(rng.choice([0, 1, 2]))
    c["scale"] = None
    r = rng.random()
    if r < 0.35:
        c["scale"] = float(rng.choice([1e-30, 1e-8, 0.0, -0.3, 0.7, 3.0, 40.0, 1e3, 2.5e-3, 1e20, -1e30, 1e-300,
                                       5e-324]))
    mag = float(rng.choice([1.0, 1.0, 0.1, 4.0]))
    c["q"] = rng.standard_normal(batch + (Hq, L, E)) * mag
    # k and v: batch dimensions sometimes 1 (broadcast), or fewer of them
    kb = tuple(1 if rng.random() < 0.3 else b for b in batch)
    if nb and rng.random() < 0.2:
        kb = kb[1:]
    c["k"] = rng.standard_normal(kb + (Hk, S, E)) * mag
    c["v"] = rng.standard_normal(kb + (Hk, S, Ev))
    c["mask"] = None
    mk = rng.random()
    if mk < 0.45:
        shapes = [(L, S), (1, S), (L, 1), (Hq, L, S), (1, L, S), (Hq, 1, S), batch + (Hq, L, S),
                  batch + (1, 1, S), (S,), (1,), (1, 1)]
        shape = shapes[int(rng.integers(len(shapes)))]
        if rng.random() < 0.5:
            m = rng.random(shape) < 0.75
            if m.size and rng.random() < 0.3:  # a fully masked row
                m.reshape(-1, m.shape[-1])[0] = False
        else:
            m = rng.standard_normal(shape) * float(rng.choice([0.5, 3.0]))
            m[rng.random(shape) < 0.2] = -np.inf
            m = m.astype(c["dt"])
        c["mask"] = m
    c["variants"] = {}
    v = c["variants"]
    if rng.random() < 0.2:
        v["softcap"] = float(rng.choice([0.5, 3.0, 20.0, 1e-35, 1e-5, 1e30]))
    if rng.random() < 0.2:
        v["slopes"] = rng.random(Hq) * (0.5 if rng.random() < 0.5 else 3.0) * (-1 if rng.random() < 0.15 else 1)
        if rng.random() < 0.3:
            v["slopes"] = v["slopes"].astype(np.float32)
    if c["causal"] and rng.random() < 0.25:
        v["window"] = int(rng.choice([1, int(rng.integers(1, S + 3)), 10**9]))
    if rng.random() < 0.2:
        v["sinks"] = rng.standard_normal(Hq) * float(rng.choice([2.0, 2.0, 50.0, 800.0]))
        if rng.random() < 0.3:
            v["sinks"] = v["sinks"].astype(np.float32)
    if E >= 2 and rng.random() < 0.15:
        dim = 0 if E % 2 == 0 and rng.random() < 0.5 else 2 * int(rng.integers(1, E // 2 + 1))
        v["rope"] = (int(rng.integers(0, 2)), float(rng.choice([10000.0, 100.0])), dim, int(rng.integers(0, 5)))
    # 16-bit inputs beside f32
    c["q16"] = (str(rng.choice(["f16", "bf16"])) if c["dt"] == np.float32 and rng.random() < 0.2 else None)
    c["kv16"] = None
    if c["dt"] == np.float32 and rng.random() < 0.25:
        c["kv16"] = "f16" if rng.random() < 0.5 else "bf16"
    c["layout"] = [str(rng.choice(["c", "c", "gap", "rev", "tr", "neg"])) for _ in range(3)]
    c["threads"] = int(rng.choice([1, 2]))
    c["weights"] = rng.random() < 0.2
    c["backward"] = rng.random() < 0.4
    c["dropout"] = float(rng.choice([0.1, 0.5, 1.0])) if rng.random() < 0.12 else 0.0
    c["bf16"] = c["dt"] == np.float32 and not c["weights"] and rng.random() < 0.15
    c["kv_stride0"] = Hk > 1 and rng.random() < 0.15  # k and v one head's rows, at head stride 0
    c["mask_stride0"] = c["mask"] is not None and rng.random() < 0.4  # the mask broadcast in memory to full rank
    return c


def sixteen(a, kind):
    """a as the 16-bit kind: (the array passed, its attn dtype, its values in f64)."""
    if kind == "f16":
        h = a.astype(np.float16)
        return h, None, h.astype(np.float64)
    bits, vals = bf16_bits(a)
    return bits, 5, vals


GUARD = 64


def in_workspace(size_fn, fn, refs, o):
    """fn(*refs, options, err) with options' context holding a workspace of
    exactly the bytes size_fn(&bytes, *refs, options, err) says, between
    guard bytes that must stay as they were: '' or why not."""
    err = Error()
    size = ctypes.c_size_t()
    st = size_fn(ctypes.byref(size), *refs, ctypes.byref(o), ctypes.byref(err))
    if st != 0:
        return "workspace size: status %d: %s" % (st, err.message.decode())
    buf = np.full(size.value + 2 * GUARD, 0xA5, np.uint8)
    ctx = o.context.contents if o.context else None
    if ctx is None:
        return "no context"
    ctx.workspace = buf.ctypes.data + GUARD
    ctx.workspace_size = size.value
    st = fn(*refs, ctypes.byref(o), ctypes.byref(err))
    ctx.workspace, ctx.workspace_size = None, 0
    if st != 0:
        return "in a workspace of %d bytes: status %d: %s" % (size.value, st, err.message.decode())
    if not (np.all(buf[:GUARD] == 0xA5) and np.all(buf[GUARD + size.value:] == 0xA5)):
        return "the call wrote outside its workspace of %d bytes" % size.value
    return ""


def big_(a):
    return float(np.abs(np.asarray(a, np.float64)).max()) if np.size(a) else 0.0


def widen_bf16(bits):
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16).to(torch.float64).numpy()


def s_bound(c, q, k):
    """s_abs: the largest |scale| sum_e |q_e||k_e| over (head, row, key), plus
    the largest |mask| and ALiBi bias."""
    tq = torch.from_numpy(np.abs(q))
    tk = torch.from_numpy(np.abs(k))
    from torch_attention import broadcast_heads
    tq, tk, _ = broadcast_heads(tq, tk, tk)
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["E"])
    s = abs(scale) * float(torch.matmul(tq, tk.transpose(-2, -1)).max()) if tq.numel() and tk.numel() else 0.0
    if "rope" in c["variants"]:  # rotation keeps each pair's norm: bound by the norms
        s = abs(scale) * float(np.sqrt((q * q).sum(-1)).max()) * float(np.sqrt((k * k).sum(-1)).max()) * math.sqrt(2)
        s = max(s, abs(scale) * float(torch.matmul(tq, tk.transpose(-2, -1)).max()))
    m = c["mask"]
    if m is not None and m.dtype != np.bool_ and np.isfinite(m).any():
        s += float(np.abs(m[np.isfinite(m)]).max())
    if "slopes" in c["variants"]:
        s += float(np.max(np.abs(c["variants"]["slopes"]))) * (c["L"] + c["S"])
    if "sinks" in c["variants"]:
        s = max(s, float(np.abs(c["variants"]["sinks"]).max()))
    return s


def variant_options(var):
    """The binding's keyword arguments for a case's score variants."""
    kw = {}
    for key in ("softcap", "window"):
        if key in var:
            kw[key] = var[key]
    if "slopes" in var:
        kw["alibi_slopes"] = var["slopes"]
    if "sinks" in var:
        kw["sinks"] = var["sinks"]
    if "rope" in var:
        layout, base, dim, offset = var["rope"]
        kw["rope"] = dict(layout=layout, base=base, rotary_dim=dim, position_offset=offset)
    return kw


def run_dense(sw, c, name):
    dt = c["dt"]
    q = c["q"].astype(dt)
    k = c["k"].astype(dt)
    v = c["v"].astype(dt)
    if c["kv_stride0"]:
        k = np.broadcast_to(k[..., :1, :, :], k.shape)
        v = np.broadcast_to(v[..., :1, :, :], v.shape)
    qref, kref, vref = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    qpass, qcode = q, None
    kpass, vpass, kcode, vcode = k, v, None, None
    if c["q16"]:
        qpass, qcode, qref = sixteen(q, c["q16"])
    if c["kv16"]:
        kpass, kcode, kref = sixteen(k, c["kv16"])
        vpass, vcode, vref = sixteen(v, c["kv16"])
    qpass = laid_out(None, qpass, c["layout"][0])
    if not c["kv_stride0"]:
        kpass = laid_out(None, kpass, c["layout"][1])
        vpass = laid_out(None, vpass, c["layout"][2])
    work = np.float32 if c["q16"] else dt
    mask = c["mask"]
    if mask is not None and mask.dtype != np.bool_:
        mask = mask.astype(work)
    variants = dict(c["variants"])
    opt = variant_options(variants)
    batch = np.broadcast_shapes(c["batch"], k.shape[:-3])
    oshape = tuple(batch) + (c["Hq"], c["L"], c["Ev"])
    mpass = mask
    if mask is not None and c["mask_stride0"]:
        mpass = np.broadcast_to(mask, oshape[:-1] + (c["S"],))
    mv = view(mpass) if mask is not None else None
    mv_shape[0] = mpass.shape if mask is not None else None
    p = c["dropout"]
    seed = 12345 + len(name)
    if c["bf16"]:
        opt["compute"] = "bf16"
    outdt = {None: dt, "f16": np.float16, "bf16": np.uint16}[c["q16"]]
    results = []
    for threads in sorted({c["threads"], 1, 2}):
        o = _options(CAUSAL[c["causal"]], c["scale"], mv, p, seed if p else None, dict(opt, num_threads=threads))
        out = np.full(oshape, np.nan if outdt != np.uint16 else 0xFFFF, outdt)
        lse = np.full(oshape[:-1], np.nan, work)
        w = np.full(oshape[:-1] + (c["S"],), np.nan, dt) if c["weights"] and not c["q16"] else None
        err = Error()
        views = [view(out, qcode), view(lse), view(w) if w is not None else None,
                 view(qpass, qcode), view(kpass, kcode), view(vpass, vcode)]
        st = LIB.attn_sdpa(ctypes.byref(views[0]), ctypes.byref(views[1]),
                           ctypes.byref(views[2]) if w is not None else None,
                           ctypes.byref(views[3]), ctypes.byref(views[4]), ctypes.byref(views[5]),
                           ctypes.byref(o), ctypes.byref(err))
        if st != 0:
            sw.report("sdpa", name, "status %d: %s" % (st, err.message.decode()))
            return
        results.append((out, lse, w))
    for a, b in zip(results, results[1:]):
        for x, y, what in zip(a, b, ("out", "lse", "weights")):
            if x is not None and not np.array_equal(x, y, equal_nan=True):
                sw.report("sdpa", name, "%s differs between 1 and 2 threads" % what)
                return
    # once more from a workspace of exactly attn_sdpa_workspace_size's bytes, between guard bytes: bitwise
    o = _options(CAUSAL[c["causal"]], c["scale"], mv, p, seed if p else None, dict(opt, num_threads=c["threads"]))
    out2 = np.zeros_like(results[0][0])
    lse2 = np.zeros_like(results[0][1])
    w2 = np.zeros_like(results[0][2]) if results[0][2] is not None else None
    views = [view(out2, qcode), view(lse2), view(w2) if w2 is not None else None,
             view(qpass, qcode), view(kpass, kcode), view(vpass, vcode)]
    refs = [ctypes.byref(t) if t is not None else None for t in views]
    why = in_workspace(LIB.attn_sdpa_workspace_size, LIB.attn_sdpa, refs, o)
    if not why and not all(x is None or np.array_equal(x, y, equal_nan=True)
                           for x, y in zip((out2, lse2, w2), results[0])):
        why = "the call in a workspace differs from the call without one"
    if why:
        sw.report("sdpa", name, why)
        return
    out, lse, w = results[0]
    out16 = out
    if qcode == 5:
        out = widen_bf16(out)
    dout = np.random.default_rng(len(name)).standard_normal(oshape)
    dout16 = dout.astype(dt)
    if c["q16"]:
        dout16, _, dout = sixteen(dout, c["q16"])
    ref_variants = dict(variants)
    keep = None
    if p:
        keep = attn.dropout_mask(qpass if not c["q16"] else qref.astype(np.float32), kpass if kcode is None else
                                 kref.astype(np.float32), vpass if vcode is None else vref.astype(np.float32), p, seed,
                                 mask=mpass, causal=CAUSAL[c["causal"]], scale=c["scale"], **{
                                     x: y for x, y in opt.items() if x != "compute"})
        if p == 1:  # every weight dropped: out and the gradients 0 (the reference's 1/(1 - p) would be 0/0)
            keep = np.zeros_like(keep)
    (grads, ds_max, max_s, mags, ref_out, sink_ref, ref_lse) = reference(
        qref, kref, vref, dout, c["mask"] if c["mask"] is None or c["mask"].dtype == np.bool_ else mask.astype(np.float64),
        c["causal"], c["scale"], keep=keep, p=p if p < 1 else 0.0, variants=ref_variants)
    s_abs = s_bound(c, qref, kref)
    vmax = float(np.abs(vref).max()) if vref.size else 0.0
    E = c["E"]
    if dt == np.float64:
        tol_out = (1e-12 + 64 * EPS64 * s_abs) * max(vmax, 1e-300)
        tol_lse = 1e-12 * np.maximum(1.0, np.abs(np.where(np.isfinite(ref_lse), ref_lse, 0))) + 64 * EPS64 * s_abs
    else:
        x = 2 * (E + 6) * U32 * s_abs
        tol_out = (2e-5 + math.expm1(min(x, 700))) * vmax + 1e-30
        if c["q16"]:
            tol_out += (2.0**-11 if c["q16"] == "f16" else 2.0**-8) * float(np.abs(ref_out).max() if ref_out.size else 0)
            tol_out += 2.0**-25
        tol_lse = 2e-5 * np.maximum(1.0, np.abs(np.where(np.isfinite(ref_lse), ref_lse, 0))) + (E + 7) * U32 * s_abs
        if c["bf16"]:  # attn.h's bound of the bf16 compute mode
            y = 2.2 * 2.0**-8 * s_abs + 1.1e-4
            tol_out += ((1 + 2 * 2.0**-8 + 2e-5 + 2 * c["S"] * U32) * math.exp(min(2 * y, 700)) - 1) * vmax
            tol_lse += y
    if p:
        tol_out = tol_out / (1 - p) if p < 1 else 0.0
    why = close(out, ref_out, tol_out)
    if not why:
        why = close(lse, ref_lse.astype(work), tol_lse) and "lse: " + close(lse, ref_lse.astype(work), tol_lse)
    if not why and w is not None:
        # the weights: those of the exact kernel (f64 arithmetic rounded once)
        wref = reference_weights(qref, kref, vref, c, mask)
        if p:  # the weights output holds the dropped weights
            wref = wref * keep / (1 - p) if p < 1 else np.zeros_like(wref)
        tw = (1e-12 + 64 * EPS64 * s_abs) if dt == np.float64 else U32 + 1e-12 + 64 * EPS64 * s_abs
        why = close(w, wref, tw * np.maximum(np.abs(wref), 1e-3) + 1e-300) and "weights: " + close(
            w, wref, tw * np.maximum(np.abs(wref), 1e-3) + 1e-300)
    if why:
        sw.report("sdpa", name, why)
        return
    sw.report("sdpa", name, "")
    if c["backward"]:
        grads_ds_max[0] = ds_max
        run_backward(sw, c, name, qpass, qcode, kpass, vpass, kcode, vcode, out16, lse, dout16, opt, mv, grads, mags,
                     s_abs, sink_ref, p, seed)


def reference_weights(q, k, v, c, mask):
    """The weights (softmax of the varied, masked scores; 0 where no key takes part) in f64."""
    from torch_attention import broadcast_heads, causal_allowed
    from oracle_backward import variant_scores
    from oracle_rope import reference as rope_reference
    tq, tk, _ = broadcast_heads(*(torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k, v)))
    L, S = c["L"], c["S"]
    var = dict(c["variants"])
    rope = var.pop("rope", None)
    sinks = var.pop("sinks", None)
    if rope is not None:
        layout, base, dim, offset = rope
        tq = rope_reference(tq, layout, base, dim, offset + (0 if c["causal"] == 1 else S - L), 1.0)
        tk = rope_reference(tk, layout, base, dim, offset, 1.0)
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["E"])
    s = torch.matmul(tq, tk.transpose(-2, -1)) * scale
    allowed = causal_allowed(L, S, c["causal"])
    if var:
        s, allowed = variant_scores(s, allowed, c["causal"], **var)
    if mask is not None:
        if mask.dtype == np.bool_:
            allowed = allowed & torch.from_numpy(mask)
        else:
            s = s + torch.from_numpy(mask.astype(np.float64))
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        col = torch.from_numpy(np.asarray(sinks, np.float64)).reshape(-1, 1, 1).expand(s.shape[:-1] + (1,))
        return torch.softmax(torch.cat((s, col), -1), -1)[..., :S].numpy()
    dead = torch.isneginf(s).all(-1, keepdim=True)
    return torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0).numpy()


grads_ds_max = [0.0]
mv_shape = [None]


def backward_call(grads, dmask, ins, o):
    """attn_sdpa_backward into the views `grads` (dq, dk, dv) and dmask (an
    array or None) from the views `ins` (dout, q, k, v, out, lse): None, or
    the failed call's status and message."""
    err = Error()
    dmv = view(dmask) if dmask is not None else None
    st = LIB.attn_sdpa_backward(*[ctypes.byref(t) for t in grads], ctypes.byref(dmv) if dmv is not None else None,
                                *[ctypes.byref(t) for t in ins], ctypes.byref(o), ctypes.byref(err))
    return "status %d: %s" % (st, err.message.decode()) if st != 0 else None


def run_backward(sw, c, name, q, qcode, k, v, kcode, vcode, out, lse, dout, opt, mv, grads, mags, s_abs, sink_ref,
                 p, seed):
    dt = c["dt"]
    gdt = dt
    res = []
    fmask = c["mask"] is not None and c["mask"].dtype != np.bool_
    mshape = mv_shape[0] if fmask else None
    for threads in (1, 2):
        o = _options(CAUSAL[c["causal"]], c["scale"], mv, p, seed if p else None, dict(opt, num_threads=threads))
        dmask = np.full(mshape, np.nan, np.float32 if c["q16"] else dt) if fmask else None
        if c["q16"]:  # each gradient in its tensor's dtype
            gs = [np.zeros(a.shape, a.dtype) for a in (q, k, v)]
            codes = [qcode, kcode, vcode]
        else:
            gs = [np.full(q.shape, np.nan, gdt), np.full(k.shape, np.nan, np.float32 if kcode or k.dtype == np.float16
                                                            else gdt),
                  np.full(v.shape, np.nan, np.float32 if vcode or v.dtype == np.float16 else gdt)]
            codes = [None] * 3
        vs = [view(g, cd) for g, cd in zip(gs, codes)]
        ins = [view(dout, qcode), view(q, qcode), view(k, kcode), view(v, vcode), view(out, qcode), view(lse)]
        why = backward_call(vs, dmask, ins, o)
        if why:
            sw.report("backward", name, why)
            return
        res.append(gs + [dmask])
        if threads == c["threads"]:  # once more in a workspace of exactly the size asked
            gs2 = [np.zeros_like(g) for g in gs]
            dmask2 = np.zeros_like(dmask) if fmask else None
            vs2 = [view(g, cd) for g, cd in zip(gs2, codes)] + [view(dmask2) if fmask else None]
            refs = [ctypes.byref(t) if t is not None else None for t in vs2] + [ctypes.byref(t) for t in ins]
            why = in_workspace(LIB.attn_sdpa_backward_workspace_size, LIB.attn_sdpa_backward, refs, o)
            if not why and not all(x is None or np.array_equal(x, y, equal_nan=True)
                                   for x, y in zip(gs2 + [dmask2], gs + [dmask])):
                why = "the backward in a workspace differs from the call without one"
            if why:
                sw.report("backward", name, why)
                return
    for a, b in zip(res[0], res[1]):
        if a is not None and not np.array_equal(a, b, equal_nan=True):
            sw.report("backward", name, "gradients differ between 1 and 2 threads")
            return
    # once more with dout, out, lse and every gradient (dmask too) laid out in memory
    # another way (gaps, reversed rows or columns, transposed): bitwise the call above
    lay = np.random.default_rng(zlib.crc32(name.encode()))  # a layout of its own per case
    o = _options(CAUSAL[c["causal"]], c["scale"], mv, p, seed if p else None, dict(opt, num_threads=c["threads"]))
    gs = [laid_out(lay, np.full(g.shape, 0x7FFF if cd == 5 else np.nan, g.dtype)) for g, cd in zip(res[0][:3], codes)]
    dmask = laid_out(lay, np.full(mshape, np.nan, res[0][3].dtype)) if fmask else None
    ins = [laid_out(lay, a) for a in (dout, out, lse)]
    vs = [view(g, cd) for g, cd in zip(gs, codes)]
    ivs = [view(ins[0], qcode), view(q, qcode), view(k, kcode), view(v, vcode), view(ins[1], qcode), view(ins[2])]
    why = backward_call(vs, dmask, ivs, o)
    if why:
        sw.report("backward", name, "laid out: " + why)
        return
    for a, b, what in zip(res[0], gs + [dmask], ("dq", "dk", "dv", "dmask")):
        if a is not None and not np.array_equal(a, b, equal_nan=True):
            sw.report("backward", name, "%s with strided dout, out, lse and gradients differs from the contiguous "
                      "call" % what)
            return
    if fmask and not c["bf16"] and not c["q16"]:
        # dmask: the scores' gradient summed over the mask's broadcast dimensions; its terms are
        # those of dS, whose largest |dS| the reference returns (each row of dS sums to 0)
        ds_max = grads_ds_max[0]
        E = c["E"]
        got = res[0][3]
        if got.shape != c["mask"].shape:  # the mask passed broadcast in memory: its gradient summed back
            got = torch.from_numpy(got.astype(np.float64)).sum_to_size(c["mask"].shape).numpy()
            mshape = c["mask"].shape
        tol = (1e-12 + 64 * EPS64 * s_abs) if dt == np.float64 else (2e-5 + math.expm1(min(2 * (E + 5) * U32 * s_abs,
                                                                                            700)))
        n_sum = int(np.prod(out.shape[:-1])) * c["S"] // max(1, int(np.prod(mshape)))
        sw.counts["dmask"] = sw.counts.get("dmask", 0) + 1
        why = close(got, grads[3], tol * max(ds_max, 1e-300) * max(1, n_sum) + 2.0**-126)
        if why:
            sw.report("backward", name, "dmask: " + why)
            return
    E = c["E"]
    if sink_ref is not None and not c["q16"] and not c["bf16"] and not p:
        # attn_sdpa_sinks_backward from the forward's out and lse, within attn.h's bound
        o = _options(CAUSAL[c["causal"]], c["scale"], mv, 0.0, None, opt)
        dsinks = np.full(c["Hq"], np.nan, dt)
        dsv, err = view(dsinks), Error()
        st = LIB.attn_sdpa_sinks_backward(ctypes.byref(dsv), ctypes.byref(view(dout)), ctypes.byref(view(out)),
                                          ctypes.byref(view(lse)), ctypes.byref(o), ctypes.byref(err))
        if st != 0:
            sw.report("backward", name, "sinks backward status %d: %s" % (st, err.message.decode()))
            return
        ref_ds, ds_abs = sink_ref
        # dsinks_abs from 1 - sum(weights) loses its digits where the sink's share is tiny: at least |ref|
        ds_abs = np.maximum(np.abs(ds_abs), np.abs(ref_ds))
        sabs = max(s_abs, float(np.abs(c["variants"]["sinks"]).max()))
        if dt == np.float64:
            tol = (1e-12 + 64 * EPS64 * sabs) * np.maximum(ds_abs, 1e-300) + math.exp(-400) * big_(dout) * big_(v)
        else:
            tol = sink_bound(ds_abs, (3 * E + 20) * U32 * sabs, c["S"]) + 2.0**-64 * big_(dout) * big_(v) * c["L"]
        why = close(dsinks, ref_ds, tol)
        sw.counts["dsinks"] = sw.counts.get("dsinks", 0) + 1
        if why:
            sw.report("backward", name, "dsinks: " + why)
            return
    # attn.h: a weight below e^-400 (f64) or 2^-64 (f32) of its row's largest counts as 0
    flush = math.exp(-400) if dt == np.float64 else 2.0**-64
    big = lambda a: float(np.abs(a).max()) if a.size else 0.0  # noqa: E731
    scale = abs(c["scale"]) if c["scale"] is not None else 1 / math.sqrt(E)
    floor = flush * 4 * (c["S"] + 1) * max(1.0, scale) * max(1.0, big(q), big(k)) * max(1.0, big(v)) * big(dout)
    for g, ref, mag, what, code in zip(res[0], grads[:3], mags, ("dq", "dk", "dv"), (qcode, kcode, vcode)):
        u16 = 0.0
        if c["q16"]:
            u16 = 2.0**-8 if code == 5 else 2.0**-11 if g.dtype == np.float16 else 0.0
            u16 = max(u16, 2.0**-11 if c["q16"] == "f16" else 2.0**-8)  # out's own rounding
            if code == 5:
                g = widen_bf16(g)
        if dt == np.float64:
            tol = (1e-12 + 64 * EPS64 * s_abs) * mag + floor
        else:
            x = 2 * (E + 5) * U32 * s_abs
            tol = (2e-5 + math.expm1(min(x, 700))) * mag + 2.0**-126 + floor
            if c["bf16"]:
                xb = 4.2 * 2.0**-8 * s_abs + 1.1e-4
                tol += (6 * 2.0**-8 + math.expm1(min(xb, 700))) * mag
            if u16:  # attn.h: u16 |exact| + (1 + u16) (bound + u16) max g_abs
                tol = u16 * np.abs(ref) + (1 + u16) * (tol + u16 * mag)
                if g.dtype == np.float16:  # f16's subnormal spacing 2^-24
                    tol = tol + 2.0**-25
        why = close(g, ref, tol)
        if why:
            sw.report("backward", name, "%s: %s" % (what, why))
            return
    sw.report("backward", name, "")


def describe(c):
    v = c["variants"]
    return "%s%s B%s Hq%d Hk%d L%d S%d E%d Ev%d causal%d scale%s mask%s %s q16=%s kv16=%s layout=%s thr%d w%d bw%d p%g bf16=%d kv0=%d m0=%d" % (
        np.dtype(c["dt"]).name, "", c["batch"], c["Hq"], c["Hk"], c["L"], c["S"], c["E"], c["Ev"], c["causal"],
        c["scale"], None if c["mask"] is None else (c["mask"].dtype.name, c["mask"].shape),
        ",".join(sorted(v)), c["q16"], c["kv16"], "/".join(c["layout"]), c["threads"], c["weights"], c["backward"], c["dropout"],
        c["bf16"], c["kv_stride0"], c["mask_stride0"])


# ---- ragged batches and plans: bitwise attn_sdpa on each sequence's views ----

def variant_kwargs(rng, Hq, E, causal):
    kw = {}
    if rng.random() < 0.25:
        kw["softcap"] = float(rng.choice([0.5, 3.0, 20.0]))
    if rng.random() < 0.25:
        kw["alibi_slopes"] = rng.random(Hq) * (0.5 if rng.random() < 0.5 else 3.0)
    if causal and rng.random() < 0.3:
        kw["window"] = int(rng.integers(1, 12))
    if rng.random() < 0.25:
        kw["sinks"] = rng.standard_normal(Hq) * 2
    if E >= 2 and rng.random() < 0.2:
        dim = 0 if E % 2 == 0 and rng.random() < 0.5 else 2 * int(rng.integers(1, E // 2 + 1))
        kw["rope"] = dict(layout=int(rng.integers(0, 2)), base=float(rng.choice([10000.0, 100.0])), rotary_dim=dim,
                          position_offset=int(rng.integers(0, 5)))
    return kw


def same(a, b):
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def plan_runs_match(sw, rng, name, what, q, k, v, make_plan, unplanned):
    """A plan made by make_plan(), run twice on new values written into q, k
    and v in place (the plan's strides), bitwise unplanned() on them; the
    outcome reported. True when the plan passed."""
    try:
        plan = make_plan()
        for _ in range(2):
            for a in (q, k, v):
                a[...] = a * a.dtype.type(rng.choice([1.0, 0.5, -2.0]))
            po, pl = plan.run(q, k, v)
            uo, ul = unplanned()
            if not (same(po, uo) and same(pl, ul)):
                sw.report("plan", name, "%s run differs from the unplanned call" % what)
                return False
    except attn.AttnError as e:
        sw.report("plan", name, "%s: %s" % (what, e))
        return False
    sw.report("plan", name, "")
    return True


def seq_seed(kw, b):
    """kw for sequence b of a varlen call alone: its dropout seed is the call's + b."""
    if not kw.get("dropout_p"):
        return kw
    return dict(kw, seed=kw["seed"] + b)


def run_varlen(sw, rng, name):
    dt = np.float64 if rng.random() < 0.4 else np.float32
    Hk = int(rng.choice([1, 2, 3]))
    Hq = Hk * int(rng.choice([1, 2, 4]))
    E = int(rng.choice([1, 3, 5, 8, 9, 16, 17, 31]))
    Ev = E if rng.random() < 0.5 else int(rng.choice([1, 2, 7, 16]))
    B = int(rng.choice([1, 2, 3, 5]))
    lq = [int(rng.choice([0, 1, 1, 2, 3, 7, 9, 17, 40])) for _ in range(B)]
    lk = [int(rng.choice([0, 1, 2, 5, 8, 13, 33, 70])) if rng.random() < 0.6 else lq[b] for b in range(B)]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    causal = [False, "top-left", "bottom-right"][int(rng.integers(3))]
    scale = None if rng.random() < 0.6 else float(rng.choice([0.05, 0.7, -0.4, 2.0]))
    kw = variant_kwargs(rng, Hq, E, causal)
    threads = int(rng.choice([1, 2]))
    if rng.random() < 0.2:  # sequence b's mask from the call's seed + b
        kw["dropout_p"], kw["seed"] = float(rng.choice([0.2, 0.5])), int(rng.integers(0, 2**62))
    qdt = kdt = dt
    if dt == np.float32 and rng.random() < 0.3:
        qdt, kdt = (np.float16, np.float32) if rng.random() < 0.4 else (np.float16, np.float16) if rng.random() < 0.5 \
            else (np.float32, np.float16)
    q = laid_out(rng, rng.standard_normal((cq[-1], Hq, E)).astype(qdt))
    k = laid_out(rng, rng.standard_normal((ck[-1], Hk, E)).astype(kdt))
    v = laid_out(rng, rng.standard_normal((ck[-1], Hk, Ev)).astype(kdt))
    masks = None
    if rng.random() < 0.4:
        masks = []
        for b in range(B):
            shape = [(lq[b], lk[b]), (Hq, lq[b], lk[b]), (1, lk[b])][int(rng.integers(3))]
            if rng.random() < 0.5:
                masks.append(rng.random(shape) < 0.7)
            else:
                m = rng.standard_normal(shape).astype(dt)
                m[rng.random(shape) < 0.15] = -np.inf
                masks.append(m)
    kw["num_threads"] = threads
    desc = "%s q%s kv%s B%d Hq%d Hk%d E%d Ev%d lq%s lk%s %s scale%s %s masks%d p%g" % (
        np.dtype(dt).name, np.dtype(qdt).name, np.dtype(kdt).name, B, Hq, Hk, E, Ev, lq, lk, causal, scale,
        ",".join(sorted(kw)), masks is not None, kw.get("dropout_p", 0.0))
    name = "%s(%s)" % (name, desc)
    try:
        out, lse = attn.sdpa_varlen(q, k, v, cq, ck, masks=masks, causal=causal, scale=scale, return_lse=True, **kw)
    except attn.AttnError as e:
        sw.report("varlen", name, "varlen: %s" % e)
        return
    for b in range(B):
        if lq[b] == 0:
            continue
        qb = q[cq[b]:cq[b + 1]].transpose(1, 0, 2)
        kb = k[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        vb = v[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        ob, lb = attn.sdpa(qb, kb, vb, mask=None if masks is None else masks[b], causal=causal, scale=scale,
                           return_lse=True, **seq_seed(kw, b))
        if not (same(out[cq[b]:cq[b + 1]].transpose(1, 0, 2), ob) and same(lse[cq[b]:cq[b + 1]].T, lb)):
            sw.report("varlen", name, "sequence %d differs from attn_sdpa on its views by %g" % (
                b, float(np.nanmax(np.abs(out[cq[b]:cq[b + 1]].transpose(1, 0, 2) - ob))) if ob.size else 0))
            return
    sw.report("varlen", name, "")
    # the planned batch, run twice on other data of the same layout
    if not plan_runs_match(sw, rng, name, "varlen plan", q, k, v,
                           lambda: attn.Plan(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, masks=masks, causal=causal,
                                             scale=scale, return_lse=True, **kw),
                           lambda: attn.sdpa_varlen(q, k, v, cq, ck, masks=masks, causal=causal, scale=scale,
                                                    return_lse=True, **kw)):
        return
    # the backward: bitwise attn_sdpa_backward on each sequence's views (f32 or f64 q only)
    if qdt == np.float16:
        return
    dout = rng.standard_normal(out.shape).astype(dt)
    bkw = dict(kw)
    try:
        dq, dk, dv = attn.sdpa_varlen_backward(dout, q, k, v, out, lse, cq, ck, masks=masks, causal=causal,
                                               scale=scale, **bkw)
    except attn.AttnError as e:
        sw.report("varlen_backward", name, "varlen backward: %s" % e)
        return
    for b in range(B):
        qb = q[cq[b]:cq[b + 1]].transpose(1, 0, 2)
        kb = k[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        vb = v[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        if lq[b] == 0 or lk[b] == 0:
            ok = (not np.any(dq[cq[b]:cq[b + 1]])) and not np.any(dk[ck[b]:ck[b + 1]]) and not np.any(
                dv[ck[b]:ck[b + 1]])
            if not ok:
                sw.report("varlen_backward", name, "sequence %d without queries or keys has nonzero gradients" % b)
                return
            continue
        ob = out[cq[b]:cq[b + 1]].transpose(1, 0, 2)
        lb = lse[cq[b]:cq[b + 1]].T
        db = dout[cq[b]:cq[b + 1]].transpose(1, 0, 2)
        g = attn.sdpa_backward(db, qb, kb, vb, ob, lb, mask=None if masks is None else masks[b], causal=causal,
                               scale=scale, **seq_seed(bkw, b))
        for got, want, what in zip((dq[cq[b]:cq[b + 1]].transpose(1, 0, 2), dk[ck[b]:ck[b + 1]].transpose(1, 0, 2),
                                    dv[ck[b]:ck[b + 1]].transpose(1, 0, 2)), g, ("dq", "dk", "dv")):
            if not same(got, want):
                sw.report("varlen_backward", name, "sequence %d: %s differs from attn_sdpa_backward by %g" % (
                    b, what, float(np.nanmax(np.abs(got - want)))))
                return
    sw.report("varlen_backward", name, "")


def run_dense_plan(sw, rng, name):
    """attn_sdpa_plan_init + attn_sdpa_run: bitwise attn_sdpa, for a random case of the dense sweep."""
    c = draw_dense(rng)
    if c["kv16"] == "bf16":
        c["kv16"] = None
    dt = c["dt"]
    q, k, v = (laid_out(rng, c[x].astype(dt), lay) for x, lay in zip("qkv", c["layout"]))
    if c["kv16"] == "f16":
        k, v = (laid_out(rng, a.astype(np.float16), lay) for a, lay in zip((c["k"], c["v"]), c["layout"][1:]))
    if c["q16"]:
        q = laid_out(rng, c["q"].astype(np.float16), c["layout"][0])
    kw = variant_options(c["variants"])
    kw["num_threads"] = c["threads"]
    causal = CAUSAL[c["causal"]]
    name = "%s(%s)" % (name, describe(c))
    plan_runs_match(sw, rng, name, "dense plan", q, k, v,
                    lambda: attn.Plan(q, k, v, mask=c["mask"], causal=causal, scale=c["scale"], return_lse=True, **kw),
                    lambda: attn.sdpa(q, k, v, mask=c["mask"], causal=causal, scale=c["scale"], return_lse=True, **kw))


def run_pieces(sw, rng, name):
    """attention in pieces over disjoint keys (key_start, total_keys), merged,
    against the whole call: within the f32/f64 bound of the whole's reference."""
    dt = np.float64 if rng.random() < 0.5 else np.float32
    Hk = int(rng.choice([1, 2]))
    Hq = Hk * int(rng.choice([1, 3]))
    L = int(rng.choice([1, 2, 5, 9, 17]))
    S = int(rng.choice([2, 3, 7, 16, 33]))
    E = int(rng.choice([3, 8, 13]))
    causal = [False, "top-left", "bottom-right"][int(rng.integers(3))]
    kw = variant_kwargs(rng, Hq, E, causal)
    sinks = kw.pop("sinks", None)
    q = rng.standard_normal((Hq, L, E)).astype(dt)
    k = rng.standard_normal((Hk, S, E)).astype(dt)
    v = rng.standard_normal((Hk, S, E)).astype(dt)
    name = "%s(%s Hq%d Hk%d L%d S%d E%d %s %s sinks%d)" % (name, np.dtype(dt).name, Hq, Hk, L, S, E, causal,
                                                          ",".join(sorted(kw)), sinks is not None)
    try:
        whole, wl = attn.sdpa(q, k, v, causal=causal, return_lse=True, sinks=sinks, **kw)
        cut = sorted(set([0, S] + [int(x) for x in rng.integers(1, S, size=int(rng.integers(1, 3)))]))
        qcut = [0, L] if L == 1 or rng.random() < 0.5 else [0, int(rng.integers(1, L)), L]
        mo, ml = np.empty_like(whole), np.empty_like(wl)
        for qa, qb in zip(qcut, qcut[1:]):
            outs, lses = [], []
            for i, (a, b) in enumerate(zip(cut, cut[1:])):
                o, lg = attn.sdpa(q[:, qa:qb], k[:, a:b], v[:, a:b], causal=causal, return_lse=True, key_start=a,
                                  total_keys=S, query_start=qa, total_queries=L, sinks=sinks if i == 0 else None,
                                  **kw)
                outs.append(o)
                lses.append(lg)
            mo[:, qa:qb], ml[:, qa:qb] = attn.merge(outs, lses)
    except attn.AttnError as e:
        sw.report("pieces", name, str(e))
        return
    tol = 1e-12 if dt == np.float64 else 1e-5
    why = close(mo, whole, tol * max(1.0, float(np.abs(v).max())))
    if not why:
        why = close(ml, wl, tol * np.maximum(1.0, np.abs(np.where(np.isfinite(wl), wl, 0))))
    if why:
        sw.report("pieces", name, why)
        return
    # the backward of pieces: given the whole row's out and lse, each piece's share
    dout = rng.standard_normal(whole.shape).astype(dt)
    try:
        gq, gk, gv = attn.sdpa_backward(dout, q, k, v, whole, wl, causal=causal, sinks=sinks, **kw)
        pq = np.zeros_like(gq)
        pk, pv = np.zeros_like(gk), np.zeros_like(gv)
        for qa, qb in zip(qcut, qcut[1:]):
            for i, (a, b) in enumerate(zip(cut, cut[1:])):
                dq_, dk_, dv_ = attn.sdpa_backward(dout[:, qa:qb], q[:, qa:qb], k[:, a:b], v[:, a:b], whole[:, qa:qb],
                                                   wl[:, qa:qb], causal=causal, key_start=a, total_keys=S,
                                                   query_start=qa, total_queries=L, sinks=sinks if i == 0 else None,
                                                   **kw)
                pq[:, qa:qb] += dq_
                pk[:, a:b] += dk_
                pv[:, a:b] += dv_
    except attn.AttnError as e:
        sw.report("pieces", name, "backward: " + str(e))
        return
    for got, want, what in ((pq, gq, "dq"), (pk, gk, "dk"), (pv, gv, "dv")):
        big = float(np.abs(want).max()) if want.size else 0.0
        why = close(got, want, (1e-11 if dt == np.float64 else 1e-4) * max(big, 1e-30))
        if why:
            sw.report("pieces", name, "backward %s: %s" % (what, why))
            return
    sw.report("pieces", name, "")



# ---- the caches: attend against attn_sdpa on the gathered (dequantized) rows ----

QUANT = ("q8", "q4", "q4_1", "e4m3", "e5m2")


def int8_query_delta(q, k, scale):
    """attn.h's Δ for keys scored by the integer dot product kernel: per row,
    Σ_b (max_b |q| / 127)(1/2 + 2^-10) ||k_b||_1, the largest over rows and keys."""
    qs = np.abs(q.astype(np.float64) * scale)
    E = q.shape[-1]
    d = 0.0
    nb = (E + 31) // 32
    qm = np.stack([qs[..., 32 * b:32 * b + 32].max(-1) for b in range(nb)], -1)  # (..., L, nb)
    kn = np.stack([np.abs(k[..., 32 * b:32 * b + 32]).sum(-1) for b in range(nb)], -1)  # (B, Hk, S, nb)
    if qm.size and kn.size:
        d = float(qm.reshape(-1, nb).max(0) @ kn.reshape(-1, nb).max(0)) / 127 * (0.5 + 2.0**-10)
    return d


def cache_in_workspace(cache, q, mask, causal, scale, vk, out, lse, B, Hk, S, E, Ev, key_dtype, hadamard):
    """attn_kv_cache_attend again with a workspace of exactly the bytes attn.h
    says (attn_sdpa_workspace_size for out, lse, q and the cache's view, or
    f16 k and v without data for keys per channel; Hadamard's copy of q
    before it), between guard bytes: bitwise the call without one."""
    from attn.kv_pages import _view as kv_view
    m = None if mask is None else (mask if mask.dtype == np.bool_ else mask.astype(np.float32 if q.dtype != np.float64
                                                                                  else np.float64))
    mv = view(m) if m is not None else None
    o = _options(causal, scale, mv, 0.0, None, dict(vk, num_threads=vk.get("num_threads") or 2))
    kt, vt, err = attn._lib.Tensor(), attn._lib.Tensor(), Error()
    if key_dtype:
        for t, d in ((kt, E), (vt, Ev)):
            t.data, t.dtype, t.rank = None, 4, 4
            shape = (B, Hk, S, d)
            for i in range(4):
                t.shape[i] = shape[i]
                t.strides[i] = int(np.prod(shape[i + 1:]))
    else:
        st = LIB.attn_kv_cache_view(ctypes.byref(kt), ctypes.byref(vt), cache._cache, 4, ctypes.byref(err))
        if st != 0:
            return "view: " + err.message.decode()
    out2, lse2 = np.zeros_like(out), np.zeros_like(lse)
    ov, lv, qv = view(out2), view(lse2), view(q)
    size = ctypes.c_size_t()
    st = LIB.attn_sdpa_workspace_size(ctypes.byref(size), ctypes.byref(ov), ctypes.byref(lv), None, ctypes.byref(qv),
                                      ctypes.byref(kt), ctypes.byref(vt), ctypes.byref(o), ctypes.byref(err))
    if st != 0:
        return "workspace size: " + err.message.decode()
    n = size.value + ((4 * q.size + 63) // 64 * 64 + 63 if hadamard else 0)
    buf = np.full(n + 2 * GUARD, 0xA5, np.uint8)
    ctx = o.context.contents
    ctx.workspace, ctx.workspace_size = buf.ctypes.data + GUARD, n
    st = LIB.attn_kv_cache_attend(kv_view(out2), kv_view(lse2), kv_view(q), cache._cache, ctypes.byref(o), err)
    if st != 0:
        return "attend in a workspace of %d bytes: %s" % (n, err.message.decode())
    if not (np.all(buf[:GUARD] == 0xA5) and np.all(buf[GUARD + n:] == 0xA5)):
        return "attend wrote outside its workspace of %d bytes" % n
    if not (same(out2, out) and same(lse2, lse)):
        return "attend in a workspace differs from attend without one"
    return ""


def run_cache(sw, rng, name):
    store = str(rng.choice(["float32", "float16", "bfloat16", "float64"] + list(QUANT)))
    key_dtype = None
    if store not in ("float64",) and rng.random() < 0.15:
        key_dtype = str(rng.choice(["q4c", "q2c"]))
    B = int(rng.choice([1, 2]))
    Hk = int(rng.choice([1, 2]))
    Hq = Hk * int(rng.choice([1, 2, 4]))
    needs32 = store in ("q8", "q4", "q4_1")
    E = int(rng.choice([32, 64])) if needs32 and not key_dtype else int(rng.choice([3, 8, 16, 32, 17]))
    if key_dtype:
        E = int(rng.choice([4, 8, 12, 20, 32]))
    Ev = int(rng.choice([32, 64])) if needs32 else int(rng.choice([1, 5, 8, 16]))
    capacity = 96 if key_dtype else int(rng.choice([40, 70, 100]))
    hadamard = store in QUANT and not key_dtype and E in (8, 16, 32, 64) and rng.random() < 0.3
    scales = store in ("e4m3", "e5m2") and not key_dtype and rng.random() < 0.4
    kw = dict(key_dtype=key_dtype, hadamard=hadamard)
    if key_dtype and rng.random() < 0.5:
        kw["residual"] = 32
    if scales:
        kw["k_scale"] = (rng.random(Hk) + 0.5).astype(np.float32)
        kw["v_scale"] = (rng.random(Hk) + 0.5).astype(np.float32)
    dt = np.float64 if store == "float64" else np.float32
    desc = "%s keys%s B%d Hq%d Hk%d E%d Ev%d had%d scales%d" % (store, key_dtype, B, Hq, Hk, E, Ev, hadamard, scales)
    try:
        cache = attn.KVCache(B, Hk, capacity, E, Ev, dtype=store, **kw)
        total = 0
        steps = []
        for _ in range(int(rng.integers(1, 4))):
            n = int(rng.choice([1, 1, 3, 7, 20, 33]))
            if total + n > capacity:
                break
            k = laid_out(rng, rng.standard_normal((B, Hk, n, E)).astype(dt))
            v = laid_out(rng, rng.standard_normal((B, Hk, n, Ev)).astype(dt))
            cache.append(k, v)
            total += n
            steps.append(n)
            if rng.random() < 0.2 and total > 1:
                total = int(rng.integers(1, total))
                cache.truncate(total)
                steps.append(-total)
        L = int(rng.choice([1, 1, 2, 5, 9, 17]))
        causal = "bottom-right" if rng.random() < 0.6 else False
        vk = variant_kwargs(rng, Hq, E, causal)
        if hadamard:
            vk.pop("rope", None)
        scale = None if rng.random() < 0.7 else float(rng.choice([0.05, 0.5, 2.0]))
        mask = None
        if rng.random() < 0.3:
            mask = rng.random((L, total)) < 0.7 if rng.random() < 0.5 else rng.standard_normal((Hq, L, total)).astype(dt)
        qdt = np.float16 if dt == np.float32 and not hadamard and rng.random() < 0.2 else dt  # Hadamard: f32 q
        q = laid_out(rng, rng.standard_normal((B, Hq, L, E)).astype(qdt))
        name = "%s(%s steps%s L%d q%s %s scale%s %s mask%s)" % (name, desc, steps, L, np.dtype(qdt).name, causal, scale,
                                                               ",".join(sorted(vk)), None if mask is None else mask.dtype)
        out, lse = cache.attend(q, mask=mask, causal=causal, scale=scale, return_lse=True, **vk)
        why = cache_in_workspace(cache, q, mask, causal, scale, vk, out, lse, B, Hk, total, E, Ev, key_dtype, hadamard)
        if why:
            sw.report("cache", name, why)
            return
        kg, vg = cache.gather()
        ref, rl = attn.sdpa(q, kg, vg, mask=mask, causal=causal, scale=scale, return_lse=True, **vk)
    except attn.AttnError as e:
        sw.report("cache", name if "(" in name else "%s(%s)" % (name, desc), str(e))
        return
    if cache.length != total:
        sw.report("cache", name, "length %d, expected %d" % (cache.length, total))
        return
    vmax = float(np.abs(vg).max()) if vg.size else 0.0
    if store in ("float32", "float16", "float64") and not key_dtype:
        kview, vview = cache.view()
        bo, bl = attn.sdpa(q, kview, vview, mask=mask, causal=causal, scale=scale, return_lse=True, **vk)
        why = "" if same(out, bo) and same(lse, bl) else "attend differs from attn_sdpa on the view by %g" % float(
            np.nanmax(np.abs(out - bo)))
    else:
        # attention on the widened rows, within the f32 bound, Hadamard's turn of q (f32 roundings of q and
        # the keys it turns back), and the integer kernel's query rounding Δ and the values' bf16 weights
        sc = scale if scale is not None else 1 / math.sqrt(E)
        s_abs = abs(sc) * float(np.abs(q).sum(-1).max()) * float(np.abs(kg).max()) if kg.size else 0.0
        if "alibi_slopes" in vk:
            s_abs += float(np.max(vk["alibi_slopes"])) * (L + total)
        if mask is not None and mask.dtype != np.bool_:
            s_abs += float(np.abs(mask).max())
        delta = int8_query_delta(q, kg, sc) + 4 * (E + 8) * U32 * s_abs
        if hadamard:
            delta += 4 * E * U32 * s_abs
        tol = (2e-5 + 2.0**-8 + math.expm1(min(2 * delta, 700))) * vmax + 1e-30
        if qdt == np.float16:  # out rounded to f16 once more
            tol += 2.0**-11 * vmax
        why = close(out, ref, tol)
        if not why:
            why = close(lse, rl, 2e-5 * np.maximum(1, np.abs(np.where(np.isfinite(rl), rl, 0))) + delta)
            why = why and "lse: " + why
    sw.report("cache", name, why)



def run_pages(sw, rng, name):
    """A paged pool: sequences appended in steps (some forked from others,
    some truncated), attended together; each sequence against attn_sdpa on
    its gathered (widened) rows, bitwise for float32 storage, else within
    the bound of the cache family."""
    store = str(rng.choice(["float32", "float32", "float16", "bfloat16"] + list(QUANT)))
    Hk = int(rng.choice([1, 2]))
    Hq = Hk * int(rng.choice([1, 2, 3]))
    needs32 = store in ("q8", "q4", "q4_1")
    E = int(rng.choice([32, 64])) if needs32 else int(rng.choice([3, 8, 16, 17, 32]))
    Ev = int(rng.choice([32, 64])) if needs32 else int(rng.choice([1, 5, 8, 16]))
    page = int(rng.choice([16, 16, 17, 32, 48]))
    hadamard = store in QUANT and E in (8, 16, 32, 64) and rng.random() < 0.3
    head_major = rng.random() < 0.3
    desc = "%s Hq%d Hk%d E%d Ev%d page%d had%d hm%d" % (store, Hq, Hk, E, Ev, page, hadamard, head_major)
    try:
        pool = attn.KVPages(Hk, E, num_pages=400, max_sequences=8, value_dim=Ev, page_size=page, dtype=store,
                            hadamard=hadamard, head_major=head_major)
        seqs = [pool.create() for _ in range(int(rng.integers(1, 4)))]
        hist = []
        for _ in range(int(rng.integers(1, 4))):
            ks, vs = [], []
            for s in seqs:
                n = int(rng.choice([0, 1, 2, 5, 17, 33]))
                ks.append(laid_out(rng, rng.standard_normal((n, Hk, E)).astype(np.float32)))
                vs.append(laid_out(rng, rng.standard_normal((n, Hk, Ev)).astype(np.float32)))
            pool.append(seqs, ks, vs)
            hist.append([a.shape[0] for a in ks])
            if rng.random() < 0.3 and len(seqs) < 6:
                parent = seqs[int(rng.integers(len(seqs)))]
                seqs.append(pool.fork(parent))
                hist.append("fork")
            if rng.random() < 0.2:
                s = seqs[int(rng.integers(len(seqs)))]
                n = pool.length(s)
                if n > 1:
                    pool.truncate(s, int(rng.integers(1, n)))
                    hist.append("trunc")
        causal = "bottom-right" if rng.random() < 0.6 else False
        vk = variant_kwargs(rng, Hq, E, causal)
        if hadamard:
            vk.pop("rope", None)
        scale = None if rng.random() < 0.7 else float(rng.choice([0.05, 0.5, 2.0]))
        qdt = np.float16 if rng.random() < 0.2 and not hadamard else np.float32  # Hadamard: f32 q (attn.h)
        qs = [laid_out(rng, rng.standard_normal((int(rng.choice([1, 1, 2, 4, 9])), Hq, E)).astype(qdt))
              for _ in seqs]
        masks = None
        if rng.random() < 0.3:  # one per sequence over (Hq, L_i, length_i), some None
            masks = [None if rng.random() < 0.3 else
                     (rng.random((q.shape[0], pool.length(s))) < 0.7 if rng.random() < 0.5 else
                      rng.standard_normal((Hq, q.shape[0], pool.length(s))).astype(np.float32))
                     for q, s in zip(qs, seqs)]
        name = "%s(%s steps%s q%s %s scale%s %s masks%d)" % (name, desc, hist, np.dtype(qdt).name, causal, scale,
                                                            ",".join(sorted(vk)), masks is not None)
        outs, lses = pool.attend(seqs, qs, masks=masks, causal=causal, scale=scale, return_lse=True, **vk)
        # the same batch planned (attn_kv_paged_plan_init) and run on packed q: bitwise
        plan = pool.plan(seqs, [q.shape[0] for q in qs], Hq, masks=masks, causal=causal, scale=scale,
                         return_lse=True, q_dtype=qdt, **vk)
        po, pl = plan.run(np.concatenate(qs))
        if not (same(po, np.concatenate(outs)) and same(pl, np.concatenate(lses))):
            sw.report("pages", name, "the paged plan's run differs from attn_kv_pages_attend")
            return
    except attn.AttnError as e:
        sw.report("pages", name if "(" in name else "%s(%s)" % (name, desc), str(e))
        return
    for i, s in enumerate(seqs):
        kg, vg = pool.gather(s)
        q = qs[i].transpose(1, 0, 2)
        try:
            ref, rl = attn.sdpa(q, kg, vg, mask=None if masks is None else masks[i], causal=causal, scale=scale,
                                return_lse=True, **vk)
        except attn.AttnError as e:
            sw.report("pages", name, "sdpa on sequence %d's rows: %s" % (i, e))
            return
        out, lse = outs[i].transpose(1, 0, 2), lses[i].T
        if store == "float32" and not hadamard:
            why = "" if same(out, ref) and same(lse, rl) else "sequence %d differs from attn_sdpa by %g" % (
                i, float(np.nanmax(np.abs(out - ref))) if out.size else 0)
        else:
            sc = scale if scale is not None else 1 / math.sqrt(E)
            s_abs = abs(sc) * float(np.abs(q).sum(-1).max()) * float(np.abs(kg).max()) if kg.size else 0.0
            if "alibi_slopes" in vk:
                s_abs += float(np.max(vk["alibi_slopes"])) * (q.shape[1] + kg.shape[1])
            if masks is not None and masks[i] is not None and masks[i].dtype != np.bool_ and masks[i].size:
                s_abs += float(np.abs(masks[i]).max())
            delta = int8_query_delta(q, kg, sc) + 4 * (E + 8) * U32 * s_abs + (4 * E * U32 * s_abs if hadamard else 0)
            vmax = float(np.abs(vg).max()) if vg.size else 0.0
            if qdt == np.float16:  # out rounded to f16 once more
                vmax *= 1 + 2.0**-11 / (2e-5 + 2.0**-8)
            why = close(out, ref, (2e-5 + 2.0**-8 + math.expm1(min(2 * delta, 700))) * vmax + 1e-30)
            if not why:
                why = close(lse, rl, 2e-5 * np.maximum(1, np.abs(np.where(np.isfinite(rl), rl, 0))) + delta)
                why = why and "lse: " + why
            why = why and "sequence %d: %s" % (i, why)
        if why:
            sw.report("pages", name, why)
            return
    sw.report("pages", name, "")



# ---- the layer: attn_mha against torch.nn.MultiheadAttention (oracle_mha's cases) ----

_MHA = []


def mha_oracle(sw):
    """oracle_mha's Oracle (its ctypes structs of attn_mha), reporting into sw."""
    import oracle_mha

    class Into(oracle_mha.Oracle):
        def report(self, name, why):
            sw.report("mha", name, why)
    if not _MHA:
        _MHA.append((oracle_mha, Into(os.path.dirname(os.environ["ATTN_LIBRARY"]))))
    return _MHA[0]


def run_mha(sw, rng, name):
    om, o = mha_oracle(sw)
    o.report = lambda n, why: sw.report("mha", n, why)
    if rng.random() < 0.6:
        E = int(rng.choice([3, 4, 6, 8, 12, 15, 16]))
        H = int(rng.choice([h for h in (1, 2, 3, 4, 5, 6) if E % h == 0]))
        L, S, N = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 4))
        cross = rng.random() < 0.4
        cfg = dict(kdim=int(rng.integers(1, 10)) if cross else None, vdim=int(rng.integers(1, 10)) if cross else None,
                   bias=bool(rng.random() < 0.7), bias_kv=bool(rng.random() < 0.3), zero_attn=bool(rng.random() < 0.3),
                   batch_first=bool(rng.random() < 0.5), average=bool(rng.random() < 0.5),
                   unbatched=bool(rng.random() < 0.2), causal=int(rng.choice([0, 0, 1, 2])),
                   dtype=np.float32 if rng.random() < 0.25 else np.float64)
        if cfg["causal"] == 2 and L > S and not (cfg["bias_kv"] or cfg["zero_attn"]):
            cfg["causal"] = 1  # bottom-right's first rows would see no key: NaN in the module
        kpm = am = None
        if rng.random() < 0.4:
            kpm = rng.random((N, S)) < 0.3 if rng.random() < 0.5 else rng.standard_normal((N, S))
        if rng.random() < 0.4:
            shape = (L, S) if rng.random() < 0.5 or cfg["unbatched"] else (N * H, L, S)
            if cfg["unbatched"] and rng.random() < 0.5:
                shape = (H, L, S)
            am = rng.random(shape) < 0.3 if rng.random() < 0.5 else rng.standard_normal(shape)
        if kpm is not None and (am is not None or cfg["causal"]) and kpm.dtype != np.bool_:
            kpm = kpm > 0  # PyTorch 1.13 merges a float key_padding_mask only without an attn_mask (causal makes one)
        if kpm is not None and kpm.dtype == np.bool_:
            kpm[:, 0] = False
        if am is not None and am.dtype == np.bool_:
            am[..., 0] = False
        if kpm is not None and cfg["unbatched"]:
            kpm = kpm[0]
        desc = ",".join("%s=%s" % (k, v if not isinstance(v, type) else v.__name__) for k, v in cfg.items()) + \
            (" kpm%s" % (kpm.dtype,) if kpm is not None else "") + (" am%s%s" % (am.dtype, am.shape) if am is not None
                                                                   else "")
        om.module_case(o, rng, "%s(E%d H%d L%d S%d N%d %s)" % (name, E, H, L, S, N, desc), E=E, H=H, L=L, S=S, N=N,
                       kpm=kpm, attn_mask=am, **cfg)
        if cfg["dtype"] == np.float64 and rng.random() < 0.5:  # the layer's backward, every input and parameter
            for key in ("average", "dtype"):
                cfg.pop(key)
            om.backward_case(o, rng, "%s_backward(E%d H%d L%d S%d N%d %s)" % (name, E, H, L, S, N, desc), E=E, H=H,
                             L=L, S=S, N=N, kpm=kpm, attn_mask=am, **cfg)
    elif rng.random() < 0.4:
        # the layer's batched step over cache rows, each at its own length
        Hkv = int(rng.choice([1, 2]))
        H = Hkv * int(rng.choice([1, 2, 3]))
        D = int(rng.choice([2, 4, 6]))
        B = int(rng.integers(1, 4))
        steps, used = [], [0] * B
        for _ in range(int(rng.integers(1, 4))):
            rows = sorted(set(int(r) for r in rng.integers(0, B, size=int(rng.integers(1, B + 1)))))
            step = []
            for r in rows:
                n = int(rng.choice([0, 1, 1, 2, 5]))
                if used[r] + n <= 24:
                    step.append((r, n))
                    used[r] += n
            if step:
                steps.append(step)
        rope = (int(rng.integers(0, 2)), float(rng.choice([10000.0, 500.0])), 0, int(rng.integers(0, 5)))
        om.cached_batch_case(o, rng, "%s(cached_batch H%d Hkv%d D%d B%d steps%s rope%s)" % (
            name, H, Hkv, D, B, steps, rope), H, Hkv, H * D, steps, rope, B=B, capacity=24)
    else:
        Hkv = int(rng.choice([1, 2, 3]))
        H = Hkv * int(rng.choice([1, 2, 3]))
        D = int(rng.choice([2, 4, 6, 8]))
        E = H * D
        L, S, N = int(rng.integers(1, 10)), int(rng.integers(1, 12)), int(rng.integers(1, 3))
        causal = int(rng.choice([0, 1, 2]))
        if causal == 2 and L > S:
            causal = 1
        rope = None
        if rng.random() < 0.5:
            rope = (int(rng.integers(0, 2)), float(rng.choice([10000.0, 500.0])),
                    int(rng.choice([0, 2, D])) if D > 2 else 0, int(rng.integers(0, 9)))
        sinks = bool(rng.random() < 0.3)
        om.gqa_case(o, rng, "%s(gqa H%d Hkv%d E%d L%d S%d N%d causal%d rope%s sinks%d)" % (
            name, H, Hkv, E, L, S, N, causal, rope, sinks), H, Hkv, causal, E=E, L=L, S=S, N=N, rope=rope,
            sinks=sinks)
        if rng.random() < 0.5:  # the GQA layer's backward, with the attention's score variants
            var = {}
            if rng.random() < 0.25:
                var["softcap"] = float(rng.choice([1.0, 3.0, 20.0]))
            if rng.random() < 0.25:
                var["slopes"] = rng.random(H)
            if causal and rng.random() < 0.3:
                # top-left with L > S: a window of at most L - S leaves the last queries no key
                # (0 here, NaN in the reference's softmax)
                var["window"] = int(rng.integers(max(1, L - S + 1) if causal == 1 else 1, max(S, L) + 2))
            om.gqa_backward_case(o, rng, "%s_backward(gqa H%d Hkv%d E%d L%d S%d N%d causal%d rope%s sinks%d %s)" % (
                name, H, Hkv, E, L, S, N, causal, rope, sinks, sorted(var)), H, Hkv, rope, E=E, L=L, S=S, N=N,
                sinks=sinks, variants=var or None, causal=causal)


def main():
    rng = np.random.default_rng(test_seed(arg("--seed", 20261207)))
    n = arg("--cases", 400)
    isa = os.environ.get("ATTN_ISA")
    if isa and attn.isa() != isa:  # a forced ISA this CPU lacks would quietly run another
        print("skip oracle_sweep_ATTN_ISA=%s: this CPU lacks %s (the library runs %s)" % (isa, isa, attn.isa()))
        return 0
    sw = Sweep()
    for i in range(n):
        c = draw_dense(rng)
        name = "dense_%d(%s)" % (i, describe(c))
        try:
            run_dense(sw, c, name)
        except Exception as e:  # noqa: BLE001  (a failure of this case, reported as one)
            sw.report("sdpa", name, "exception %r" % (e,))
    for i in range(n // 3):
        for fam, fn in (("varlen", run_varlen), ("plan", run_dense_plan), ("pieces", run_pieces),
                        ("cache", run_cache), ("pages", run_pages), ("mha", run_mha)):
            try:
                fn(sw, rng, "%s_%d" % (fam, i))
            except Exception as e:  # noqa: BLE001
                sw.report(fam, "%s_%d" % (fam, i), "exception %r" % (e,))
    for fam, count in sorted(sw.counts.items()):
        if not sw.failures.get(fam):
            print("ok sweep_%s (%d cases)" % (fam, count))
    print("# %s; %d failed" % (", ".join("%s %d" % kv for kv in sorted(sw.counts.items())), sw.failed))
    return 1 if sw.failed else 0


if __name__ == "__main__":
    sys.exit(main())
