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
  f32 on the exact kernel (with dmask): 2^-24 · |ref| + 1e-12 · max |ref| +
       2^-150: f64 arithmetic, each gradient rounded once to f32 (by at most
       2^-150 among f32's subnormals).
  f32 on the fused kernel: (2e-5 + e^x - 1) · max g_abs, where g_abs is
       the gradient recomputed with the absolute value of every term (see
       magnitudes()). f32 rounds each product and sum relative to the
       magnitude of its terms: 2e-5 (about 335 ulps) covers the sums on
       random data, as in the forward's bound, and attn.h adds 2 n 2^-24
       (n = max(L, S, Ev)) for sums whose roundings all go one way
       (sums_rounding_one_way; worst=True adds it); P is recomputed from f32 scores and the
       forward's f32 lse (or the row's own maximum and sum), each off by
       some rounding of the scores, which moves each weight by a factor
       within e^(±x), and so every gradient by e^x - 1 relative to its
       terms. attn.h's x = 2 (E + 5) 2^-24 s_abs (s_abs the largest scale ·
       sum_e |q_e| |k_e|): a sum of E products rounds by up to E 2^-24 of
       their magnitudes, in the backward's scores (E + 3 with the scale and
       s - lse) and the forward's lse (E + 7); checked where the products
       cancel (cancelling_scores, worst=True, out then within attn_sdpa's
       2e-5 max|P |v|| + 2 (E + 6) 2^-24 s_abs max|v|), and where large
       values cancel in out (cancelling_values: D = rowsum(dout ∘ out) is off
       by f32's rounding of P |v|, which g_abs counts). Elsewhere the
       products do not cancel and the roundings are random: x = 8 · 2^-24 ·
       max|s| (s the scores, mask values included), each side off by 4 ·
       2^-24 · max|s|, out within the forward's 2e-5 max|out| + 4 · 2^-24 ·
       max|s| max|v|. The kernel sends slices whose q·k·scale could pass
       2^18 to the exact one, so that without large mask values this x <=
       1/8 and e^x - 1 <= 1.07 x: a bound linear in max|s|.
       A slice the fused kernel hands to the exact one (fallback=N/M on the
       verbose line) is f64 arithmetic rounded once, as above.
  f32 in the bf16 compute mode (--compute=bf16, forward and backward): the
       forward's out within ((1 + 2u + 2e-5) e^(2y) - 1) · max|v| (attn.h;
       y = 2.2 · u · s_abs + 1.1e-4, oracle.bf16_out_allowance), grown by
       dropout's 1/(1 - p); the gradients within (6u + e^x - 1) · max g_abs,
       u = 2^-8 and x = 4.2 · u · s_abs + 1.1e-4, s_abs the largest scale ·
       sum_e |q_e| |k_e| (attn.h): each factor of the five products is
       rounded to bf16 once (6u for the two roundings of a product's
       operands and those of dP's), and the
       backward's scores and the bf16 forward's lse are each off by 2u · s_abs
       (0.2 u · s_abs more for f32's sums; the forward's lse 1.02e-4 more for
       its degree-3 2^x), which moves each weight by a factor within e^(±x).
       The verbose line must name the bf16 kernels.
  dsinks (attn_sdpa_sinks_backward, in f64 from the forward's out and lse),
       per head, relative to dsinks_abs_h = sum over the head's rows of
       P_sink · rowsum(|dout| ∘ P |v|) (sink_magnitudes()): f64 1e-12 ·
       dsinks_abs_h; f32 ((1 + c) e^(x + t) - 1 + 2^-24) · dsinks_abs_h + 2^-126
       (attn.h's bound; 2^-126 for a result below f32's normals written as
       0), c = 2e-5 + 2 S 2^-24 and t = 2e-5 + S 2^-24 + 2^-24 log(S + 1),
       x = (3 E + 20) 2^-24 s_abs with |sink| one more score in s_abs:
       out off by (2e-5 + e^(2d) - 1) P |v|, d = (E + 6) 2^-24 s_abs (the
       forward's bound), so D = rowsum(dout ∘ out) by that times |dout|,
       not relative to |dout| |out| (cancelling_values with sinks); the
       sink's share e^(sink - lse) by a factor within e^(±y), y = (E + 8)
       2^-24 s_abs + t (lse's scores, sum and rounding, an f64 sink rounded
       to f32 in the forward); the S terms where out's and lse's f32 sums
       round one way (sinks_sums_rounding_one_way). Elsewhere
       (worst=False) x = 12 · 2^-24 · max(max|s|, |sink|): each of the three
       sides (two for out, one for lse) off by 4 · 2^-24 · max|s|, as above.
  (f16/bf16 k and v are compared at their 16-bit values; gradients are f32.)

Usage: oracle_backward.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import itertools
import math
import os
import subprocess
import sys

import numpy as np
import torch

from oracle import BF16_U, bf16_lse_allowance_of, bf16_out_allowance
from scratch import scratch_dir
from oracle_rope import reference as rope_reference
from torch_attention import Reporter, broadcast_heads, causal_allowed, oracle_args

GRADS = ("dq", "dk", "dv", "dmask")


def reference(q, k, v, dout, mask, causal, scale, keep=None, p=0.0, variants=None, fill=None):
    """PyTorch float64 autograd of attention with attn's semantics: the gradients of
    q, k, v and (for a float mask) the mask, given dLoss/dout. With dropout, keep is
    attn's mask (--dropout-mask) and the weights are softmax ∘ keep / (1 - p).
    variants: the score variants (softcap, slopes, window; see variant_scores).
    fill: the float mask read as the Annotated Transformer writes padding,
    scores.masked_fill(mask == fill, fill), rather than added (no dmask)."""
    leaves = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in (q, k, v)]
    fmask = mask is not None and mask.dtype != np.bool_ and fill is None
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
    if fill is not None:
        s = s.masked_fill(torch.from_numpy(mask == fill), float(fill))
    elif mask is not None:
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
        lse = torch.logsumexp(torch.cat((s, col), dim=-1), dim=-1)
    else:
        w = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
        lse = torch.logsumexp(s, dim=-1)  # -inf where no key takes part
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
        if sinks is not None:  # dsinks, and its terms' size (sink_magnitudes)
            sink_ref = (sink.grad.numpy(), sink_magnitudes(w, z, do, tv))
    return grads, float(s.grad.abs().max()), max_s, mags, out.detach().numpy(), sink_ref, lse.detach().numpy()


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
      dS_abs = P ∘ (Z ∘ |dout| |V|ᵀ + rowsum(|dout| ∘ (Z ∘ P) |V|))
      dq_abs = |scale| dS_abs |K|,  dk_abs = |scale| dS_absᵀ |Q|,  dv_abs = (Z ∘ P)ᵀ |dout|
    (Z: dropout's 0 or 1/(1 - p), else 1), each summed over broadcast dimensions and
    GQA groups as its gradient is."""
    ado, av = do.abs(), v.abs()
    # D = rowsum(dout ∘ out) is taken from the forward's f32 out, whose error is
    # relative to (Z ∘ P)|V| (the forward's bound), not to |out|: values of mixed
    # signs can cancel out to near 0 and leave D an error far above |dout||out|.
    ds = w * (z * torch.matmul(ado, av.transpose(-2, -1)) + (ado * torch.matmul(w * z, av)).sum(-1, keepdim=True))
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


def sink_magnitudes(w, z, do, v):
    """dsinks computed again with every term's absolute value, one per query head:
      dsinks_abs_h = sum over the head's rows of P_sink · rowsum(|dout| ∘ (Z ∘ P)|V|)
    (P_sink = 1 - the row's weights, its sink's share). dsinks = -sum P_sink ·
    rowsum(dout ∘ out) is computed in double from the forward's f32 out, whose
    error is relative to (Z ∘ P)|V| as in magnitudes(), not to |out|."""
    p_sink = 1 - w.sum(-1)  # (..., Hq, L)
    terms = p_sink * (do.abs() * torch.matmul(w * z, v.abs())).sum(-1)
    if terms.dim() < 2:  # rank-2 inputs: one head
        return terms.sum().reshape(1).numpy()
    return terms.reshape((-1,) + terms.shape[-2:]).sum(0).sum(-1).numpy()


def sink_bound(dsinks_abs, x=None, S=0):
    """attn.h's bound on attn_sdpa_sinks_backward's dsinks, per head, from
    dsinks_abs (sink_magnitudes()): f64 out and lse (x None) 1e-12 · dsinks_abs;
    an f32 forward's ((1 + c) e^(x + t) - 1 + 2^-24) · dsinks_abs + 2^-126, x
    per head or one for all (the module's docstring says which x each case
    takes), S keys: c = 2e-5 + 2 S 2^-24 (out's sums) and t = 2e-5 + S 2^-24 +
    2^-24 log(S + 1) (lse's sum and rounding), the S terms those of sums that
    round one way (sinks_sums_rounding_one_way)."""
    dsinks_abs = np.asarray(dsinks_abs, dtype=np.float64)
    if x is None:
        return 1e-12 * np.maximum(dsinks_abs, 1e-300)
    c = 2e-5 + 2 * S * 2.0**-24
    t = 2e-5 + S * 2.0**-24 + 2.0**-24 * math.log(S + 1)
    return ((1 + c) * np.expm1(np.minimum(x + t, 700)) + c + 2.0**-24) * dsinks_abs + 2.0**-126


def sink_bound_random(dsinks_abs, x):
    """The bound without its S terms, c = 2e-5 and t <= 2e-5 + 2^-24 log(2^64)
    (4.3e-5 together): what random sums stay within, and one-way ones do not."""
    return (4.3e-5 + (1 + 4.3e-5) * np.expm1(np.minimum(x, 700))) * np.asarray(dsinks_abs, np.float64) + 2.0**-126


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
        self.dir = scratch_dir("attn-bwd-")

    def path(self, n):
        return os.path.join(self.dir, n + ".npy")

    def case(self, name, q, k, v, dout, mask=None, causal=0, scale=None, want=GRADS, kv_bf16=False, dropout=0.0,
             seed=0, variants=None, fallbacks=0, score_bound=None, fill=None, bf16=False, worst=False):
        """One case; returns its gradients {name: array} when it passed, else None.
        fallbacks: how many (batch, head) slices the fused kernel must hand to the
        exact one (None: any). score_bound: the max|s| of the f32 bounds, where the
        caller knows the mask's rounding moves no weight (its reason at the call).
        fill: also compare dv with reference(..., fill=fill): masked_fill replaces
        the scores it fills, so no gradient reaches q and k through them where an
        added mask passes it on, but the weights, and so dv, are the same.
        worst: f32 is held to attn.h's bounds, which count each score's rounding
        against s_abs (for scores whose products cancel), not to the figures that
        products of one sign give."""
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
        if bf16:
            cmd.append("--compute=bf16")
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
        if bf16 and " bf16_kernels=" not in calls[0]:
            return self.report(name, "the bf16 mode's backward names no bf16 kernels: %r" % calls[0])
        slices = int(calls[0].split(" fallback=")[1].split("/")[1].split()[0])
        exact_slices = slices if kernel == "exact" else fallbacks
        if kernel == "flash_backward" and fallbacks is not None and (" fallback=%d/" % fallbacks) not in calls[0]:
            return self.report(name, "expected %d slices on the exact kernel, verbose said %r" % (fallbacks, calls[0]))
        # The forward runs the fast kernels for f32 (decode for a few queries against
        # many keys), the exact one for f64: the variants must be on every path.
        fwd = [l for l in r.stderr.splitlines() if l.startswith("attn: sdpa ")]
        L, S = q.shape[-2], k.shape[-2]
        # (RoPE turns keys as the tiled kernel packs them: never decode.)
        decode = L <= 8 and variants.get("rope") is None  # decode.c's cost model
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
        grads, ds_max, max_s, mags, out, sink_ref, _ = reference(q, k64, v64, dout, mask, causal, scale, keep, dropout,
                                                              variants)
        if score_bound is not None:
            max_s = score_bound
        # Soft-capping in f32 is within 3 · 2^-24 · cap of the exact: another
        # score error, as large as that of scores of magnitude cap.
        max_s += 2 * variants.get("softcap", 0.0)
        refs = dict(zip(GRADS, grads))
        filled = reference(q, k64, v64, dout, mask, causal, scale, keep, dropout, variants, fill)[0] if fill else None
        # The forward with the same mask: f64 1e-12; f32 the forward's bound (attn.h),
        # its terms grown by the 1/(1 - p) of the kept weights.
        vmax = float(np.abs(v64).max()) if v64.size else 0.0
        big = float(np.abs(out).max()) if out.size else 0.0
        allowed = (1e-12 * big if not f32 else 2e-5 * big + 4 * 2.0**-24 * max_s * vmax) / (1 - dropout)
        E = q.shape[-1]
        if bf16 or worst:
            tq, tk, _ = broadcast_heads(*(torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k64, v64)))
            sc = abs(scale) if scale is not None else 1.0 / math.sqrt(E)
            s_abs = float((sc * torch.matmul(tq.abs(), tk.abs().transpose(-2, -1))).max())
        # attn.h's worst case for f32's sums, whose roundings need not cancel:
        # 2 n 2^-24, n the longest (the forward's S; the backward's L, S or Ev).
        L, S, Ev = q.shape[-2], k.shape[-2], v.shape[-1]
        sums = 2 * max(L, S, Ev) * 2.0**-24 if worst else 0.0
        if bf16:
            allowed = bf16_out_allowance(bf16_lse_allowance_of(s_abs), vmax) / (1 - dropout)
        elif worst and f32:  # attn_sdpa's bound: max|P·|v|| is the output for |v|
            pv = reference(q, k64, np.abs(v64), dout, mask, causal, scale, keep, dropout, variants)[4]
            allowed = ((2e-5 + 2 * S * 2.0**-24) * float(np.abs(pv).max()) + 2 * (E + 6) * 2.0**-24 * s_abs * vmax) \
                / (1 - dropout)
        why = compare(np.load(self.path("out")), out, allowed)
        if why:
            return self.report(name, "out: " + why)
        got = {}
        for i, g in enumerate(want):
            got[g] = np.load(self.path(g))
            for against, ref in (("", refs[g]), ("masked_fill: ", filled[2] if filled and g == "dv" else None)):
                if ref is None:
                    continue
                big = max(float(np.abs(ref).max()) if ref.size else 0.0, ds_max if g == "dmask" else 0.0)
                if bf16 and kernel == "flash_backward" and exact_slices != slices:  # the bf16 mode's bound
                    x = 4.2 * BF16_U * s_abs + 1.1e-4
                    allowed = (6 * BF16_U + math.expm1(min(x, 700))) * mags[GRADS.index(g)]
                elif kernel == "flash_backward" and exact_slices != slices:  # the bounds of the module's docstring
                    x = 2 * (E + 5) * 2.0**-24 * s_abs if worst else 8 * 2.0**-24 * max_s
                    allowed = (2e-5 + sums + math.expm1(min(x, 700))) * mags[GRADS.index(g)]
                elif f32:  # f64 arithmetic, each gradient rounded once to f32 (2^-150 below its normals)
                    allowed = 2.0**-24 * np.abs(ref) + 1e-12 * big + 2.0**-150
                else:
                    allowed = 1e-12 * big
                why = compare(got[g], ref, allowed)
                if why:
                    return self.report(name, "%s: %s%s" % (g, against, why))
        if sink_ref is not None:  # the bound of the module's docstring, per head
            sinks_max = float(np.abs(variants["sinks"]).max())
            x = None
            if f32:  # the sink is one more score of its rows: it counts in s_abs and max|s|
                x = (3 * E + 20) * 2.0**-24 * max(s_abs, sinks_max) if worst else 12 * 2.0**-24 * max(max_s, sinks_max)
            why = compare(np.load(self.path("dsinks")), sink_ref[0], sink_bound(sink_ref[1], x, S))
            if why:
                return self.report(name, "dsinks: " + why)
        self.report(name, "")
        return got


def cancelling_scores(o, rng):
    """Keys nearly orthogonal to large queries: scores of a few units whose f32 sums round
    by up to E · 2^-24 of scale · sum_e |q_e| |k_e| (s_abs), far more than 2^-24
    of the scores themselves, in the forward's lse and the backward's P alike.
    The queries are as large as the fused kernel takes (qmax · kmax · E · scale
    near 2^17.5, below its 2^18), so that it runs them: the fused kernel after
    the decode forward (3 queries) and after the flash one, held to
    attn.h's x = 2 (E + 5) 2^-24 s_abs, and the exact kernel (dmask asked
    for), held to f64 rounded once."""
    f = rng.standard_normal
    for L, S, E in ((3, 500, 128), (100, 200, 256), (40, 64, 512)):
        q, k = f((L, E)), f((S, E))
        basis, _ = np.linalg.qr(q.T)  # (E, L): the queries' span
        k = k - (k @ basis) @ basis.T + f((S, E)) * 1e-3
        q *= 2.0**17.5 / (float(np.abs(q).max() * np.abs(k).max()) * math.sqrt(E))  # the kernel's test
        v, dout, mask = f((S, 16)), f((L, 16)), f((L, S)) * 0.1
        c32 = [a.astype(np.float32) for a in (q, k, v, dout, mask)]
        o.case("f32_fused_cancelling_scores_L%d_S%d_E%d" % (L, S, E), *c32[:4], want=("dq", "dk", "dv"), worst=True)
        o.case("f32_exact_kernel_cancelling_scores_L%d_S%d_E%d" % (L, S, E), *c32, worst=True)


def sums_rounding_one_way(o):
    """f32 sums whose every addition rounds the same way: two equal keys (each
    weight 1/2), dout 1 in the first query row and 0.49 of an f32 ulp of 1 in
    the 8191 others. dv sums the rows one at a time in f32, and each later
    term, added to a sum near 1/2, is lost: dv errs by about L 2^-24 of g_abs
    (5e-4), 24 times the 2e-5 that random data's sums stay within, and
    within attn.h's 2 n 2^-24 more (n = max(L, S, Ev))."""
    L, S, E, Ev = 8192, 2, 16, 8
    q, k = np.zeros((L, E), np.float32), np.ones((S, E), np.float32)
    v = np.ones((S, Ev), np.float32)
    dout = np.full((L, Ev), np.float32(0.49 * 2.0**-23), np.float32)
    dout[0] = 1.0
    o.case("f32_fused_sums_one_way_L%d" % L, q, k, v, dout, want=("dq", "dk", "dv"), worst=True)
    dq_dk_sums_rounding_one_way(o)


def one_way_case(o, name, q, k, v, dout, g):
    """o.case for a one-way input (worst=True: attn.h's bound, with its
    2 n 2^-24), then whether gradient g's error passes the bound's other
    part, (2e-5 + e^x - 1) max g_abs: the term is needed, not only allowed."""
    got = o.case(name, q, k, v, dout, want=("dq", "dk", "dv"), worst=True)
    if got is None:
        return
    grads, _, _, mags, _, _, _ = reference(q, k, v, dout, None, 0, None)
    E = q.shape[-1]
    s_abs = float((np.abs(q.astype(np.float64)) @ np.abs(k.astype(np.float64)).T).max()) / math.sqrt(E)
    g_abs = mags[GRADS.index(g)]
    err = float(np.abs(got[g].astype(np.float64) - grads[GRADS.index(g)]).max())
    without = (2e-5 + math.expm1(2 * (E + 5) * 2.0**-24 * s_abs)) * g_abs
    o.report(name + "_%s_past_the_bound_without_its_sums_term" % g,
             "" if err > without else "%s errs by %.3g, within %.3g: the input rounds no sum one way" % (g, err, without))


def dq_dk_sums_rounding_one_way(o):
    """The same for dk and dq, the sums of dS^T Q over query rows and dS K
    over keys. dk: two equal keys (weights 1/2), v_0 = e_0 and v_1 = 0, so
    that dS_i0 = -dS_i1 = dout_i0 / 4; q all ones, dout_i0 1 in the first row
    and 0.49 of an f32 ulp of 1 in the 8191 others: each row's term of dk_0
    is under half an ulp of the sum (scale / 4) and lost, dk_0 errs by about
    L 2^-26 scale, L 2^-24 / 3 of g_abs (1.6e-4, 8 times 2e-5). dq: q = 0
    (every weight 1/S), v_0 = e_0 and v_j = 0, so that dS_i0 = (1 - 1/S) / S
    and dS_ij = -1/S^2; k_0 just past 1 (dq at the bottom of its binade,
    where half an ulp is 2^-24 of it) and k_j 0.98 · 2^-11. The kernel adds
    dS K to dq a block of keys at a time, each block's products summed
    first, so the loss is per block, not per key: each block's sum rounds
    away about half an ulp of dq, the same way, and dq errs by about 3e-5
    of g_abs at S = 16384 (1.5e-5 at 8192), 1.5 times 2e-5 on every ISA's
    kernels. Both within attn.h's 2 n 2^-24 (9.8e-4 and 2e-3)."""
    f32 = np.float32
    L, S, E, Ev = 8192, 2, 16, 8
    q, k = np.ones((L, E), f32), np.ones((S, E), f32)
    v = np.zeros((S, Ev), f32)
    v[0, 0] = 1.0
    dout = np.zeros((L, Ev), f32)
    dout[:, 0] = f32(0.49 * 2.0**-23)
    dout[0, 0] = 1.0
    one_way_case(o, "f32_fused_dk_sums_one_way_L%d" % L, q, k, v, dout, "dk")
    L, S = 256, 16384  # query rows enough that one item takes all the keys (no chunks of keys summed apart)
    q, k = np.zeros((L, E), f32), np.full((S, E), f32(0.98 * 2.0**-11), f32)
    k[0] = 1.0001
    v = np.zeros((S, Ev), f32)
    v[0, 0] = 1.0
    dout = np.zeros((L, Ev), f32)
    dout[:, 0] = 1.0
    one_way_case(o, "f32_fused_dq_sums_one_way_S%d" % S, q, k, v, dout, "dq")


def sinks_sums_rounding_one_way(o):
    """dsinks where the forward's f32 sum of P V rounds one way, as in
    oracle.py's sums_rounding_one_way: every score 0 and a sink of 0 (each
    weight 1/(S + 1)), the first key's value 1 and the others' 0.49 of an
    f32 ulp of 1, so out is low by about S 2^-24 of P |v| and D =
    rowsum(dout ∘ out), and dsinks = -sum P_sink D, with it: 4.8e-4 of
    dsinks_abs at S = 8192 (9.6e-4 at 16384), 11 times the 4.3e-5 of random
    sums, within attn.h's c and t (their S terms, 2 S 2^-24 and S 2^-24:
    a third of the bound)."""
    f32 = np.float32
    for L, S in ((16, 16384), (64, 8192)):  # the flash forward (decode's chunks are summed apart)
        E, Ev = 16, 8
        q, k = np.zeros((L, E), f32), np.ones((S, E), f32)
        v = np.full((S, Ev), f32(0.49 * 2.0**-23), f32)
        v[0] = 1.0
        dout = np.ones((L, Ev), f32)
        variants = {"sinks": np.array([0.0])}
        name = "f32_fused_sinks_sums_one_way_L%d_S%d" % (L, S)
        if o.case(name, q, k, v, dout, want=("dq", "dk", "dv"), variants=dict(variants), worst=True) is None:
            continue
        sink_ref = reference(q, k, v, dout, None, 0, None, variants=dict(variants))[5]
        err = np.abs(np.load(o.path("dsinks")).astype(np.float64) - sink_ref[0])
        without = sink_bound_random(sink_ref[1], 0.0)  # x = (3 E + 20) 2^-24 s_abs: 0, as q and the sink are
        o.report(name + "_dsinks_past_the_bound_without_its_sums_terms",
                 "" if np.all(err > without) else "dsinks errs by %s, within %s: no sum rounds one way" % (err, without))


def cancelling_values(o, rng):
    """Large values of mixed signs whose weighted sum cancels: out near 0, but the
    forward's f32 out off by some 2^-24 of P |v|, and D = rowsum(dout ∘ out) with
    it, far beyond |dout| |out|. Half the keys hold values ±1e3 in pairs that
    cancel exactly under their equal weights (keys near 0, scores near 0); the
    other half hold the scores and values near 0, so that D's error, times their
    weights and keys, is most of dq: g_abs must count D's terms as |dout| P |v|
    (magnitudes()), not |dout| |out|, which gave dq errors 20 to 80 times its bound.
    Then again with a sink taking about half of each row's weight: dsinks = -sum
    P_sink · D carries D's error too, and its bound must count D's terms the same
    way (sink_magnitudes()); |dout| |out| gave dsinks errors 2 to 370 times its bound.
    The flash forward and decode (3 queries), the fused backward and, for the
    sinks, the exact one (dmask asked for: D from its own f64 softmax, but dsinks
    still from the f32 forward's out and lse)."""
    f = rng.standard_normal
    for L, S, E, Ev in ((16, 64, 16, 16), (3, 100, 64, 32), (40, 128, 32, 64)):
        half = S // 2
        q, k, v = f((L, E)), f((S, E)), f((S, Ev)) * 1e-3
        k[:half] *= 1e-6
        v[:half // 2] = f((half // 2, Ev)) * 1e3
        v[half // 2:half] = -v[:half // 2]
        order = rng.permutation(S)  # the pairs apart, so that f32's running sums round
        k, v, dout = k[order], v[order], f((L, Ev))
        c32 = [a.astype(np.float32) for a in (q, k, v, dout)]
        tag = "cancelling_values_L%d_S%d_E%d_Ev%d" % (L, S, E, Ev)
        o.case("f32_fused_" + tag, *c32, want=("dq", "dk", "dv"), worst=True)
        # The keys' weights add to about 1.3 S (half near e^0, half e^N(0, 1)).
        sinks = {"sinks": np.array([math.log(1.3 * S) + 0.3 * f()])}
        o.case("f32_fused_%s_sinks" % tag, *c32, want=("dq", "dk", "dv"), variants=sinks, worst=True)
        # A float mask the same for every key of a row: the pairs still cancel.
        mask = np.repeat(f((L, 1)) * 0.1, S, axis=1).astype(np.float32)
        o.case("f32_exact_kernel_%s_sinks" % tag, *c32, mask, variants=sinks, worst=True)


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


FILLS = (-1e4, -1e6, -1e9, -1e30, float(np.finfo(np.float32).min))


def padding_fills(o, rng):
    """Rows that a large finite mask value covers entirely, as Hugging Face pads a
    batch on the left: query i of batch b sees neither the future (j > i) nor the
    padded keys (j < pad_b), each masked by the fill, so the padded queries' rows
    hold the fill at every key. For every fill, through the fused kernel, the exact
    kernel in f32 (dmask asked for) and in f64, against autograd with the mask added
    and with masked_fill, and the fused kernel against attn's exact f64 backward.
    With an f32 lse that lost log(S) beside the fill, P = exp(s - lse) gave each key
    of those rows a weight near 1 rather than 1/S.

    So that the bound can be tight, the fill must move no weight: in a fully masked
    row q·k·scale is the same for every key (q's entries past the fourth are zero
    there, and k's first four are the same for every key), so the fill, however it
    rounds, moves them together; a masked key of any other row has weight e^-1e4 =
    0. The bounds take max|s| from the scores without the mask. Each case runs
    twice: with dout on every row, and with dout on the padded rows only, so
    that every gradient comes from the rows the fill covers and the bound,
    relative to the largest term, is tight on them."""
    N, H, L, E, Ev = 2, 2, 300, 16, 8  # 300 rows: 4 blocks of queries, 2 of keys
    pads = (37, 120)
    f = rng.standard_normal
    q, k, v, dout = f((N, H, L, E)), f((N, H, L, E)), f((N, H, L, Ev)), f((N, H, L, Ev))
    k[..., :4] = k[:, :, :1, :4]
    i, j = np.arange(L).reshape(L, 1), np.arange(L).reshape(1, L)
    for b, pad in enumerate(pads):
        q[b, :, :pad, 4:] = 0
    s_max = float(np.abs(np.einsum("nhie,nhje->nhij", q, k)).max()) / math.sqrt(E)
    padded_only = dout.copy()
    for b, pad in enumerate(pads):
        padded_only[b, :, pad:] = 0
    for fill, (rows, d) in itertools.product(FILLS, (("every_row", dout), ("padded_rows", padded_only))):
        m = np.stack([np.where((j > i) | (j < pad), fill, 0.0) for pad in pads]).reshape(N, 1, L, L)
        c32 = [a.astype(np.float32) for a in (q, k, v, d, m)]
        tag = "padding_fill_%g_dout_%s" % (fill, rows)
        fused = o.case(tag + "_f32_fused", *c32, want=("dq", "dk", "dv"), score_bound=s_max, fill=fill)
        o.case(tag + "_f32_exact_kernel", *c32, score_bound=s_max, fill=fill)
        exact = o.case(tag + "_f64_exact_kernel", q, k, v, d, m, fill=fill)
        if fused is None or exact is None:
            continue
        mags = reference(*c32, 0, None)[3]
        for g in ("dq", "dk", "dv"):
            why = compare(fused[g], exact[g], (2e-5 + 8 * 2.0**-24 * s_max) * mags[GRADS.index(g)])
            if why:
                break
        o.report(tag + "_f32_fused_vs_attn_f64_exact", "%s: %s" % (g, why) if why else "")
    # Random queries in the padded rows too (Hugging Face's pad token has an
    # embedding like any other), with GQA and RoPE: a fill of -1e30 or
    # -FLT_MAX swallows q·k in f64 as in f32 (their ulps there are 2^47 and
    # more), so it moves no weight either.
    q, k, v, dout = f((2, 4, 130, E)), f((2, 2, 130, E)), f((2, 2, 130, Ev)), f((2, 4, 130, Ev))
    i, j = np.arange(130).reshape(130, 1), np.arange(130).reshape(1, 130)
    s_max = float(np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()) / math.sqrt(E)
    for fill in FILLS[3:]:
        m = np.stack([np.where((j > i) | (j < pad), fill, 0.0) for pad in (5, 70)]).reshape(2, 1, 130, 130)
        c32 = [a.astype(np.float32) for a in (q, k, v, dout, m)]
        o.case("padding_fill_%g_random_queries_gqa_rope" % fill, *c32, want=("dq", "dk", "dv"),
               score_bound=s_max, fill=fill, variants={"rope": (0, 10000.0, 0, 0)})
    # The lse from the decode kernel (3 queries against 2100 keys), its parts merged:
    # query 0 padded, the others seeing the keys past the first 50.
    q, k, v, dout = f((2, 3, E)), f((2, 2100, E)), f((2, 2100, Ev)), f((2, 3, Ev))
    s_max = float(np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()) / math.sqrt(E)
    for fill in FILLS[3:]:
        m = np.where((np.arange(3).reshape(3, 1) == 0) | (np.arange(2100) < 50), fill, 0.0)
        c32 = [a.astype(np.float32) for a in (q, k, v, dout, m)]
        o.case("padding_fill_%g_decode_forward" % fill, *c32, want=("dq", "dk", "dv"), score_bound=s_max, fill=fill)


def score_magnitudes(o, rng):
    """The fused kernel's bound from |s| = 1 to 1e9: it takes a slice only while its
    products q·k·scale stay within 2^18 (the bound qmax · kmax · |scale| · E the
    kernel computes; a slice beyond goes to the exact kernel, and the verbose
    line must say how many did), so that its error stays linear in max|s|.
    Without that, P = exp(S - lse) of f32 scores and lse near 1e6 moves by
    e^(2^-24 · |s|): dv off by more than its own size."""
    f = rng.standard_normal
    E = 16
    base = [f((2, 40, E)), f((2, 60, E)), f((2, 60, 8)), f((2, 40, 8))]
    big = float(np.abs(np.einsum("nie,nje->nij", base[0], base[1])).max()) / 4
    for target in 10.0 ** np.arange(0, 9.25, 0.5):
        a = math.sqrt(target / big)
        q, k, v, dout = (x.astype(np.float32) for x in (base[0] * a, base[1] * a, base[2], base[3]))
        # The kernel's own test, per (batch) slice, in the same double arithmetic.
        prod = [float(np.abs(q[n]).max()) * (float(np.abs(k[n]).max()) * 0.25) * E for n in range(2)]
        exact = sum(p > 2.0**18 for p in prod)
        o.case("score_magnitude_%.0e_%s" % (target, "exact_kernel" if exact == 2 else "fused" if not exact else "mixed"),
               q, k, v, dout, want=("dq", "dk", "dv"), fallbacks=exact)


def every_buffer(o, rng):
    """The most scratch buffers one call takes: q broadcast over the batch (dq summed
    in f64), GQA (dk and dv too), RoPE's table, the fused kernel's partials and
    routes, the softmax statistics of rows a -FLT_MAX fill covers, and the exact
    kernel's scratch for the two slices that read a key of 1e30: no
    ATTN_ERR_NO_MEMORY. max|s| for the bound: |q|·|k|·scale over the fused
    slices (RoPE keeps norms), the fill swallowing q·k in f64 as in f32."""
    f = rng.standard_normal
    q, k, v, dout = f((1, 4, 50, 16)), f((2, 2, 120, 16)), f((2, 2, 120, 8)), f((2, 4, 50, 8))
    k[1, 1, 7, 0] = 1e30  # read by query heads 2 and 3 of batch 1
    i, j = np.arange(50).reshape(50, 1), np.arange(120).reshape(1, 120)
    m = np.stack([np.where((j > i + 70) | (j < pad), np.finfo(np.float32).min, 0.0) for pad in (3, 80)])
    s_max = float(np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k[0], axis=-1).max()) / 4
    c32 = [a.astype(np.float32) for a in (q, k, v, dout, m.reshape(2, 1, 50, 120))]
    o.case("f32_fused_every_buffer_broadcast_gqa_rope_statistics_fallback", *c32, want=("dq", "dk", "dv"),
           variants={"rope": (0, 10000.0, 0, 0)}, fallbacks=2, score_bound=s_max)


def bf16_cases(o, rng):
    """The bf16 compute mode's backward (forward and backward with --compute=bf16):
    GQA with broadcast batches, both causal alignments, odd E with Ev != E, a float
    mask (dmask left out, so the fused kernel runs), a sliding window, d = 128,
    dropout (the forward scales its weights in f32 before they go to bf16)."""
    def t(*shape):
        return rng.standard_normal(shape).astype(np.float32)
    o.case("bf16_gqa_bottom_right", t(2, 4, 100, 64), t(2, 2, 150, 64), t(2, 2, 150, 48), t(2, 4, 100, 48),
           causal=2, want=("dq", "dk", "dv"), bf16=True)
    o.case("bf16_odd_e_top_left", t(3, 77, 37), t(3, 90, 37), t(3, 90, 20), t(3, 77, 20), causal=1,
           want=("dq", "dk", "dv"), bf16=True)
    mask = (rng.standard_normal((60, 130)) * 2).astype(np.float32)
    o.case("bf16_float_mask", t(2, 60, 32), t(2, 130, 32), t(2, 130, 32), t(2, 60, 32), mask,
           want=("dq", "dk", "dv"), bf16=True)
    o.case("bf16_window", t(2, 120, 64), t(2, 120, 64), t(2, 120, 64), t(2, 120, 64), causal=1,
           want=("dq", "dk", "dv"), variants={"window": 30}, bf16=True)
    o.case("bf16_d128", t(1, 70, 128), t(1, 200, 128), t(1, 200, 128), t(1, 70, 128), want=("dq", "dk", "dv"),
           bf16=True)
    o.case("bf16_dropout_gqa", t(2, 4, 90, 64), t(2, 2, 200, 64), t(2, 2, 200, 32), t(2, 4, 90, 32), causal=2,
           want=("dq", "dk", "dv"), dropout=0.3, seed=17, bf16=True)


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
    padding_fills(o, rng)
    score_magnitudes(o, rng)
    every_buffer(o, rng)
    bf16_cases(o, rng)
    cancelling_scores(o, rng)
    sums_rounding_one_way(o)
    sinks_sums_rounding_one_way(o)
    for i in range(300):
        q, k, v, dout, mask, causal, scale = random_case(rng, i)
        # Half the cases leave dmask out, so that f32 with a float mask takes the fused
        # kernel; every fourth has dropout, checked with the mask attn writes out.
        want = GRADS if i % 2 else ("dq", "dk", "dv")
        p = (0.1, 0.5, 0.9)[i // 4 % 3] if i % 4 == 3 else 0.0
        o.case("random_%03d_%s_rank%d%s" % (i, q.dtype.name, q.ndim, "_dropout" if p else ""), q, k, v, dout, mask,
               causal, scale, want, dropout=p, seed=i)
    cancelling_values(o, rng)  # after the random cases, which keep their data
    print("# backward oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
