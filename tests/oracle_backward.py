#!/usr/bin/python3
"""oracle_backward.py -- attn sdpa's backward pass against PyTorch autograd.

Each case writes q, k, v, a mask and dLoss/dout as .npy, runs
`attn sdpa ... --grad-out --dq --dk --dv [--dmask]`, and compares every
gradient with PyTorch 1.13 autograd in float64 on the same values: matmul,
repeat_interleave for GQA, broadcasting for batch dimensions and masks,
masked_fill, softmax, matmul. Autograd sums a broadcast input's gradient, as
attn must.

Tolerances (per gradient, on |ours - ref|):
  f64 (the exact kernel): 1e-12 · max |ref|; attn computes in f64 too, only
       the order of the sums differs. For dmask, max |ref| is at least the
       largest element of the scores' gradient that is summed into it.
  f32 on the exact kernel (with dmask): 2^-24 · |ref| + 1e-12 · max |ref|:
       f64 arithmetic, each gradient rounded once to f32.
  f32 on the fused kernel: (2e-5 + 8 · 2^-24 · max|s|) · max g_abs, where s
       are the scores and g_abs is the gradient recomputed with the absolute
       value of every term (see magnitudes()). f32 rounds each product and
       sum relative to the magnitude of its terms: 2e-5 (about 335 ulps)
       covers the sums, as in the forward's bound; P = exp(S - lse) is
       recomputed from f32 scores and the forward's f32 lse, each off by up
       to 4 · 2^-24 · max|s|, which moves P, and so every gradient, by that
       much relative to its terms.
  (f16/bf16 k and v are compared at their 16-bit values; gradients are f32.)

Usage: oracle_backward.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from oracle_rope import reference as rope_reference
from torch_attention import Reporter, broadcast_heads, causal_allowed, oracle_args

GRADS = ("dq", "dk", "dv", "dmask")


def reference(q, k, v, dout, mask, causal, scale, keep=None, p=0.0, variants=None):
    """PyTorch float64 autograd of attention with attn's semantics: the gradients of
    q, k, v and (for a float mask) the mask, given dLoss/dout. With dropout, keep is
    attn's mask (--dropout-mask) and the weights are softmax ∘ keep / (1 - p).
    variants: the score variants (softcap, slopes, window; see variant_scores)."""
    leaves = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in (q, k, v)]
    fmask = mask is not None and mask.dtype != np.bool_
    if fmask:
        leaves.append(torch.tensor(mask.astype(np.float64), requires_grad=True))
    tq, tk, tv = broadcast_heads(*leaves[:3])
    L, S = tq.shape[-2], tk.shape[-2]
    variants = dict(variants or {})
    rope = variants.pop("rope", None)
    if rope is not None:  # keys at offset + j, queries at offset + i + (S - L) unless top-left
        layout, base, dim, offset = rope
        tq = rope_reference(tq, layout, base, dim, offset + (0 if causal == 1 else S - L), 1.0)
        tk = rope_reference(tk, layout, base, dim, offset, 1.0)
    if scale is None:
        scale = 1.0 / math.sqrt(tq.shape[-1])
    s = torch.matmul(tq, tk.transpose(-2, -1)) * scale
    allowed = causal_allowed(L, S, causal)
    sinks = variants.pop("sinks", None)
    if variants:
        s, allowed = variant_scores(s, allowed, causal, **variants)
    if mask is not None:
        if fmask:
            s = s + leaves[3]
        else:
            allowed = allowed & torch.from_numpy(mask)
    s = s.masked_fill(~allowed, float("-inf"))
    s.retain_grad()
    # A row where no key takes part: output 0 and zero gradients (attn's
    # semantics; PyTorch 1.13's softmax would give NaN).
    dead = torch.isneginf(s).all(dim=-1, keepdim=True)
    if sinks is not None:  # a sink: one more logit per head in the softmax, with no value
        sink = torch.tensor(np.asarray(sinks, dtype=np.float64), requires_grad=True)
        col = sink.reshape((-1, 1, 1) if s.dim() >= 3 else (1, 1)).expand(s.shape[:-1] + (1,))
        w = torch.softmax(torch.cat((s, col), dim=-1), dim=-1)[..., :S]
    else:
        w = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    z = torch.from_numpy(keep).double() / (1 - p) if keep is not None else torch.ones(())
    out = torch.matmul(w * z, tv)
    do = torch.from_numpy(np.asarray(dout, dtype=np.float64))
    out.backward(do)
    grads = [t.grad.numpy() for t in leaves] + ([None] if not fmask else [])
    # The scores' gradient before it is summed into a broadcast mask: each
    # row of it sums to zero, so a mask shared by all keys has a gradient of
    # pure rounding noise, to be judged against these terms.
    finite = torch.isfinite(s)
    max_s = float(s[finite].abs().max()) if finite.any() else 0.0
    with torch.no_grad():
        mags = magnitudes(w, z, do, out, tq, tk, tv, scale, [a.shape for a in leaves[:3]])
        sink_ref = None
        if sinks is not None:  # dsinks, and its terms' size: sum of P_sink · |dout|·|out| per head
            p_sink = 1 - w.sum(-1)
            terms = (p_sink * (do.abs() * out.abs()).sum(-1))
            per_head = terms.reshape((-1,) + terms.shape[-2:]).sum(0).sum(-1) if terms.dim() >= 2 else terms.sum()
            sink_ref = (sink.grad.numpy(), float(per_head.max()))
    return grads, float(s.grad.abs().max()), max_s, mags, out.detach().numpy(), sink_ref


def variant_scores(s, allowed, causal, softcap=0.0, slopes=None, window=0):
    """The score variants of attn_sdpa_options on the scaled scores s (..., H, L, S),
    from their definitions: Gemma 2's soft-capping softcap · tanh(s / softcap); ALiBi,
    s - slope_h · |j - i - off| (off 0 for top-left, S - L otherwise; under a causal
    mask, slope times the distance back from the diagonal, as in the paper); Mistral's
    sliding window, key j visible only when i + off - window < j (off the causal
    offset). Returns the new scores and the allowed keys."""
    L, S = s.shape[-2], s.shape[-1]
    i = torch.arange(L, dtype=torch.float64).reshape(L, 1)
    j = torch.arange(S, dtype=torch.float64).reshape(1, S)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        off = 0 if causal == 1 else S - L
        m = torch.from_numpy(np.asarray(slopes, dtype=np.float64)).reshape(-1, 1, 1)
        s = s - m * (j - i - off).abs()
    if window:
        off = 0 if causal == 1 else S - L
        allowed = allowed & (j > i + off - window)
    return s, allowed


def magnitudes(w, z, do, out, q, k, v, scale, shapes):
    """The gradients computed again with every term's absolute value: what the
    roundings of f32 arithmetic are proportional to, so that a gradient whose
    terms cancel is not held to a relative error it cannot have.
      dS_abs = P ∘ (Z ∘ |dout| |V|ᵀ + rowsum(|dout| ∘ |out|))
      dq_abs = |scale| dS_abs |K|,  dk_abs = |scale| dS_absᵀ |Q|,  dv_abs = (Z ∘ P)ᵀ |dout|
    (Z: dropout's 0 or 1/(1 - p), else 1), each summed over broadcast dimensions and
    GQA groups as its gradient is."""
    ado, av = do.abs(), v.abs()
    ds = w * (z * torch.matmul(ado, av.transpose(-2, -1)) + (ado * out.abs()).sum(-1, keepdim=True))
    full = [abs(scale) * torch.matmul(ds, k.abs()), abs(scale) * torch.matmul(ds.transpose(-2, -1), q.abs()),
            torch.matmul((w * z).transpose(-2, -1), ado)]
    result = []
    for i, (x, shape) in enumerate(zip(full, shapes)):
        rank = x.dim()
        target = (1,) * (rank - len(shape)) + tuple(shape)
        if i > 0 and rank >= 3 and x.shape[-3] != target[-3]:  # a GQA group sums into one KV head
            x = x.reshape(x.shape[:-3] + (target[-3], x.shape[-3] // target[-3]) + x.shape[-2:]).sum(-3)
        result.append(float(x.sum_to_size(target).max()) if x.numel() else 0.0)
    return result


def compare(got, ref, allowed):
    """'' when got agrees with ref within `allowed` (a number or an array), else why not."""
    if got.shape != ref.shape:
        return "shape %s, expected %s" % (got.shape, ref.shape)
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        return "not finite"
    big = float(np.abs(ref).max()) if ref.size else 0.0
    err = np.abs(got - ref)
    allowed = np.broadcast_to(allowed, err.shape)
    if np.any(err > allowed):
        i = np.unravel_index(np.argmax(err - allowed), err.shape)
        return "error %.3g at %s (ref %.6g, max |ref| %.3g)" % (err[i], i, ref[i], big)
    return ""


class Oracle(Reporter):
    def __init__(self, build):
        super().__init__()
        self.attn = os.path.join(build, "attn")
        self.dir = tempfile.mkdtemp(prefix="attn-bwd-")

    def path(self, n):
        return os.path.join(self.dir, n + ".npy")

    def case(self, name, q, k, v, dout, mask=None, causal=0, scale=None, want=GRADS, kv_bf16=False, dropout=0.0,
             seed=0, variants=None):
        fmask = mask is not None and mask.dtype != np.bool_
        want = [g for g in want if g != "dmask" or fmask]
        files = {"q": q, "k": k, "v": v, "do": dout}
        if mask is not None:
            files["m"] = mask
        for n, a in files.items():
            np.save(self.path(n), a)
        for g in GRADS:
            if os.path.exists(self.path(g)):
                os.remove(self.path(g))
        cmd = [self.attn, "sdpa", "-q", self.path("q"), "-k", self.path("k"), "-v", self.path("v"),
               "--grad-out", self.path("do"), "-o", self.path("out")]
        if mask is not None:
            cmd += ["-m", self.path("m")]
        if causal:
            cmd.append("--causal=top-left" if causal == 1 else "--causal=bottom-right")
        if scale is not None:
            cmd += ["--scale", repr(scale)]
        if kv_bf16:
            cmd.append("--kv-bf16")
        if dropout:
            cmd += ["--dropout", repr(dropout), "--seed", str(seed), "--dropout-mask", self.path("keep")]
        variants = variants or {}
        if variants.get("softcap"):
            cmd += ["--softcap", repr(variants["softcap"])]
        if variants.get("slopes") is not None:
            np.save(self.path("slopes"), np.asarray(variants["slopes"]))
            cmd += ["--alibi-slopes", self.path("slopes")]
        if variants.get("window"):
            cmd += ["--window", str(variants["window"])]
        if variants.get("sinks") is not None:
            np.save(self.path("sinks"), np.asarray(variants["sinks"]))
            cmd += ["--sinks", self.path("sinks"), "--dsinks", self.path("dsinks")]
        if variants.get("rope") is not None:  # (layout, base, rotary_dim, offset)
            layout, base, dim, offset = variants["rope"]
            cmd += ["--rope", ("halves", "interleaved")[layout], "--rope-base", repr(base), "--rope-offset", str(offset)]
            cmd += ["--rope-dim", str(dim)] if dim else []
        for g in want:
            cmd += ["--" + g, self.path(g)]
        env = dict(os.environ, ATTN_VERBOSE="1")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            return self.report(name, "attn failed: " + r.stderr.strip())
        calls = [l for l in r.stderr.splitlines() if l.startswith("attn: sdpa_backward ")]
        f32 = q.dtype == np.float32
        kernel = "flash_backward" if f32 and "dmask" not in want else "exact"
        if len(calls) != 1 or (" kernel=%s " % kernel) not in calls[0]:
            return self.report(name, "expected one %s backward call, verbose said %r" % (kernel, r.stderr))
        # The forward runs the fast kernels for f32 (decode for a few queries against
        # many keys), the exact one for f64: the variants must be on every path.
        fwd = [l for l in r.stderr.splitlines() if l.startswith("attn: sdpa ")]
        L, S = q.shape[-2], k.shape[-2]
        # (RoPE turns keys as the tiled kernel packs them: never decode.)
        decode = L <= 4 and S >= 2048 and variants.get("rope") is None
        fkernel = ("decode" if decode else "flash") if f32 else "exact"
        if len(fwd) != 1 or (" kernel=%s " % fkernel) not in fwd[0]:
            return self.report(name, "expected one %s forward call, verbose said %r" % (fkernel, r.stderr))
        isa = os.environ.get("ATTN_ISA")
        if kernel == "flash_backward" and isa and (" isa=%s " % isa) not in calls[0]:
            return self.report(name, "ATTN_ISA=%s but the kernel ran %r" % (isa, calls[0]))
        k64, v64 = k, v
        if kv_bf16:  # attn rounds k and v to bf16 on load: compare at those values
            k64 = torch.from_numpy(k).bfloat16().double().numpy()
            v64 = torch.from_numpy(v).bfloat16().double().numpy()
        keep = np.load(self.path("keep")) if dropout else None
        grads, ds_max, max_s, mags, out, sink_ref = reference(q, k64, v64, dout, mask, causal, scale, keep, dropout,
                                                              variants)
        # Soft-capping in f32 is within 3 · 2^-24 · cap of the exact: another
        # score error, as large as that of scores of magnitude cap.
        max_s += 2 * variants.get("softcap", 0.0)
        refs = dict(zip(GRADS, grads))
        # The forward with the same mask: f64 1e-12; f32 the forward's bound (attn.h),
        # its terms grown by the 1/(1 - p) of the kept weights.
        vmax = float(np.abs(v64).max()) if v64.size else 0.0
        big = float(np.abs(out).max()) if out.size else 0.0
        allowed = (1e-12 * big if not f32 else 2e-5 * big + 4 * 2.0**-24 * max_s * vmax) / (1 - dropout)
        why = compare(np.load(self.path("out")), out, allowed)
        if why:
            return self.report(name, "out: " + why)
        for i, g in enumerate(want):
            ref = refs[g]
            big = max(float(np.abs(ref).max()) if ref.size else 0.0, ds_max if g == "dmask" else 0.0)
            if kernel == "flash_backward":  # f32 arithmetic: the bound of the module's docstring
                allowed = (2e-5 + 8 * 2.0**-24 * max_s) * mags[GRADS.index(g)]
            elif f32:  # f64 arithmetic, each gradient rounded once to f32
                allowed = 2.0**-24 * np.abs(ref) + 1e-12 * big
            else:
                allowed = 1e-12 * big
            why = compare(np.load(self.path(g)), ref, allowed)
            if why:
                return self.report(name, "%s: %s" % (g, why))
        if sink_ref is not None:  # computed in double from out and lse: their error, relative to its terms
            allowed = (1e-12 if not f32 else 2e-5 + 8 * 2.0**-24 * max_s) * max(sink_ref[1], 1e-300)
            why = compare(np.load(self.path("dsinks")), sink_ref[0], allowed)
            if why:
                return self.report(name, "dsinks: " + why)
        self.report(name, "")


def random_case(rng, index):
    """A random case covering the forward's semantics: ranks 2-5, broadcast batch
    dimensions, GQA, bool and float masks of any broadcastable shape (with -inf and
    rows where no key takes part), both causal alignments, any scale, Ev != E."""
    rank = int(rng.integers(2, 6))
    L, S = int(rng.integers(1, 9)), int(rng.integers(1, 11))
    E, Ev = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    Hk = int(rng.integers(1, 3)) if rank >= 3 else 1
    Hq = Hk * (int(rng.integers(1, 4)) if rank >= 3 else 1)
    batch = [int(rng.integers(1, 4)) for _ in range(max(0, rank - 3))]

    def bshape(heads):
        dims = [b if rng.random() < 0.7 else 1 for b in batch]
        return tuple(dims) + ((heads,) if rank >= 3 else ())

    qs, ks = bshape(Hq), bshape(Hk)
    vs = tuple(ks)
    out_batch = tuple(max(a, b) for a, b in zip(qs[:-1] if rank >= 3 else (), ks[:-1] if rank >= 3 else ()))
    out_shape = out_batch + ((Hq,) if rank >= 3 else ()) + (L, Ev)
    dt = np.float64 if index % 3 else np.float32
    q = rng.standard_normal(qs + (L, E)).astype(dt)
    k = rng.standard_normal(ks + (S, E)).astype(dt)
    v = rng.standard_normal(vs + (S, Ev)).astype(dt)
    dout = rng.standard_normal(out_shape).astype(dt)
    full = out_shape[:-1] + (S,)
    mask = None
    kind = rng.integers(0, 3)
    if kind:
        mrank = int(rng.integers(0, len(full) + 1))
        mshape = tuple(d if rng.random() < 0.6 else 1 for d in full[len(full) - mrank:])
        if kind == 1:
            mask = np.asarray(rng.random(mshape) < 0.75)
        else:
            mask = np.asarray(rng.standard_normal(mshape) * 2).astype(dt)
            if mask.ndim and rng.random() < 0.5:
                mask[rng.random(mshape) < 0.2] = -np.inf
    causal = int(rng.integers(0, 3))
    scale = None if rng.random() < 0.5 else float(rng.choice([0.0, -0.7, 0.3, 2.5]))
    return q, k, v, dout, mask, causal, scale


def fixed_cases(o, rng):
    f = rng.standard_normal
    # A row where no key takes part (bool mask), and one hidden by the causal limit.
    mask = np.ones((4, 6), dtype=np.bool_)
    mask[2] = False
    o.case("fully_masked_row_zero_gradient", f((2, 4, 5)), f((2, 6, 5)), f((2, 6, 3)), f((2, 4, 3)), mask)
    o.case("causal_top_left_L_gt_S_dead_rows", f((3, 7, 4)), f((3, 4, 4)), f((3, 4, 4)), f((3, 7, 4)),
           causal=1)
    o.case("causal_bottom_right_L_gt_S_dead_rows", f((3, 7, 4)), f((3, 4, 4)), f((3, 4, 4)),
           f((3, 7, 4)), causal=2)
    # Mask together with causal, GQA, a float mask shared by every head.
    o.case("gqa_float_mask_and_causal", f((2, 4, 6, 8)), f((2, 2, 9, 8)), f((2, 2, 9, 5)),
           f((2, 4, 6, 5)), f((6, 9)), causal=2)
    # A query shared by every batch: its gradient sums over the batch.
    o.case("broadcast_query_batch", f((1, 2, 5, 4)), f((3, 2, 6, 4)), f((3, 2, 6, 4)), f((3, 2, 5, 4)))
    # f32 with 16-bit keys and values.
    q32, k32, v32 = (f(s).astype(np.float32) for s in ((2, 5, 8), (2, 9, 8), (2, 9, 6)))
    o.case("f32_f16_kv", q32, k32.astype(np.float16), v32.astype(np.float16), f((2, 5, 6)).astype(np.float32))
    o.case("f32_bf16_kv", q32, k32, v32, f((2, 5, 6)).astype(np.float32), kv_bf16=True)
    # Large scores: the softmax is nearly one-hot.
    o.case("large_scores", f((2, 6, 4)) * 30, f((2, 7, 4)) * 30, f((2, 7, 4)), f((2, 6, 4)))
    # Only some gradients.
    o.case("only_dv", f((3, 4)), f((5, 4)), f((5, 2)), f((3, 2)), want=("dv",))
    o.case("only_dq_dmask", f((3, 4)), f((5, 4)), f((5, 2)), f((3, 2)), f((3, 5)), want=("dq", "dmask"))
    # Longer sequences than a block of any kernel.
    o.case("long_sequence", f((1, 70, 16)), f((1, 300, 16)), f((1, 300, 16)), f((1, 70, 16)), causal=2)
    # The fused f32 kernel over many key and query blocks and chunks: GQA, both
    # causal alignments, masks, a head wider than a vector, Ev != E.
    def f32(*shape):
        return f(shape).astype(np.float32)
    for causal in (0, 1, 2):
        o.case("f32_fused_blocks_causal%d" % causal, f32(2, 4, 200, 72), f32(2, 2, 700, 72), f32(2, 2, 700, 40),
               f32(2, 4, 200, 40), causal=causal)
    o.case("f32_fused_L_gt_S_bool_mask", f32(3, 300, 24), f32(3, 130, 24), f32(3, 130, 24), f32(3, 300, 24),
           rng.random((300, 130)) < 0.9, causal=1)
    o.case("f32_fused_float_mask_one_slice", f32(1, 150, 64), f32(1, 1000, 64), f32(1, 1000, 64),
           f32(1, 150, 64), f32(150, 1000), causal=2, want=("dq", "dk", "dv"))
    o.case("f32_fused_dropout_gqa_causal", f32(2, 4, 130, 32), f32(2, 2, 300, 32), f32(2, 2, 300, 24),
           f32(2, 4, 130, 24), causal=2, dropout=0.3, seed=11)
    o.case("f32_decode_shape_dropout", f32(2, 2, 64), f32(2, 4100, 64), f32(2, 4100, 64), f32(2, 2, 64),
           dropout=0.2, seed=5)
    o.case("f64_dropout_float_mask_dmask", f((2, 3, 6, 5)), f((2, 3, 8, 5)), f((2, 3, 8, 4)), f((2, 3, 6, 4)),
           f((6, 8)), dropout=0.4, seed=9)
    o.case("f32_fused_large_scores", f32(2, 64, 16) * 8, f32(2, 90, 16) * 8, f32(2, 90, 16), f32(2, 64, 16))


def forced_isa_missing(o):
    """With ATTN_ISA set to an instruction set this CPU lacks, the library runs
    another: why (ATTN_VERBOSE's line), to skip the suite; else None."""
    isa = os.environ.get("ATTN_ISA")
    if not isa:
        return None
    probe = os.path.join(o.dir, "probe.npy")
    np.save(probe, np.ones((1, 16, 8), np.float32))
    r = subprocess.run([o.attn, "sdpa", "-q", probe, "-k", probe, "-v", probe, "-o", probe + ".o.npy"],
                       capture_output=True, text=True, env=dict(os.environ, ATTN_VERBOSE="1"))
    return None if (" isa=%s " % isa) in r.stderr else "this CPU lacks %s (%s)" % (isa, r.stderr.strip())


def main():
    build, rng = oracle_args(20261129)
    o = Oracle(build)
    missing = forced_isa_missing(o)
    if missing:
        print("skip backward_oracle_ATTN_ISA=%s: %s" % (os.environ["ATTN_ISA"], missing))
        return 0
    fixed_cases(o, rng)
    for i in range(300):
        q, k, v, dout, mask, causal, scale = random_case(rng, i)
        # Half the cases leave dmask out, so that f32 with a float mask takes the fused
        # kernel; every fourth has dropout, checked with the mask attn writes out.
        want = GRADS if i % 2 else ("dq", "dk", "dv")
        p = (0.1, 0.5, 0.9)[i // 4 % 3] if i % 4 == 3 else 0.0
        o.case("random_%03d_%s_rank%d%s" % (i, q.dtype.name, q.ndim, "_dropout" if p else ""), q, k, v, dout, mask,
               causal, scale, want, dropout=p, seed=i)
    print("# backward oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
