#!/usr/bin/python3
"""oracle_plans.py -- the ragged batch's backward and the plans against PyTorch
float64, on random cases.

Through the Python binding (ctypes over BUILD/libattn.so):
  - attn_sdpa_varlen_backward (after attn_sdpa_varlen): batches of sequences
    of 0, 1, a few, several blocks and now and then thousands of rows, f64
    and f32, GQA, both causal alignments, a bool or float mask per sequence,
    soft-capping, ALiBi, windows, sinks, RoPE, dropout (sequence b's seed
    seed + b), a given scale, some of dq, dk and dv, packed tensors with
    strided rows. Every sequence against PyTorch autograd on that sequence
    alone (oracle_backward.reference), and bitwise attn_sdpa and
    attn_sdpa_backward on its views (attn.h's definition), on 1 and 3
    threads alike; f32 rows a -FLT_MAX mask pads, and a sequence whose
    scores send it to the exact kernel, as fixed cases;
  - dense plans (attn_sdpa_plan_init, attn_sdpa_run), ragged plans
    (attn_sdpa_varlen_plan_init) and paged plans (KVPages.plan:
    attn_kv_paged_plan_init, attn_kv_paged_run_view), each run on three
    layers' data (a paged one over a second pool too): bitwise the unplanned
    call, and within the bounds of PyTorch;
  - pieces (key_start, total_keys; query_start, total_queries) planned apart
    and merged (attn.merge) into the whole row's attention;
  - the refusals: a run with q, k or v of another shape, dtype or strides
    (attn.PlanError naming the tensor), a paged plan run after an append,
    truncate, fork or free ("plan again"), pieces in a ragged backward or
    plan, an f16 ragged backward.
Each call's ATTN_VERBOSE line must name the kernel attn.h says it runs: the
exact ones for f64, the fused backward (flash_backward) and the fast forward
kernels (flash, decode) for f32, empty for a dense call with a dimension of
0, none for a batch in which no sequence has queries and keys; a run the
kernel of its unplanned call.

Tolerances are oracle_backward.py's: f64 1e-12 of the largest reference
value (for a gradient, or of its terms' g_abs where they cancel to less); f32 attn.h's bounds on data whose products do not cancel (the output
2e-5 max|out| + 4 2^-24 max|s| max|v|, grown by dropout's 1/(1 - p), each
gradient (2e-5 + e^x - 1) max g_abs with x = 8 2^-24 max|s|, lse
oracle.lse_error's); the exact kernel's f32 gradients f64 rounded once. In
the bf16 compute mode, attn.h's bound of the gradients, (6u + e^x - 1) max
g_abs with u = 2^-8 and x = 4.2 u s_abs + 1.1e-4 (s_abs the largest scale
sum_e |q_e||k_e|), lse off by y = 2.2 u s_abs + 1.1e-4 more, and out within
((1 + 2u + 2e-5) e^(2y) - 1) max|v| (oracle.bf16_out_allowance: each weight
moved by a factor within e^(+-2y) once normalised, P and v rounded once each).

Usage: oracle_plans.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import math
import os
import sys
import tempfile

import numpy as np

# The binding (which oracle_backward's imports load too) takes this build's library.
os.environ["ATTN_LIBRARY"] = os.path.abspath(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "libattn.so"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import attn  # noqa: E402
from attn._lib import LIB  # noqa: E402

from oracle import BF16_U, bf16_lse_allowance, bf16_out_allowance, lse_error  # noqa: E402
from oracle_backward import compare, reference  # noqa: E402
from oracle_variants import random_rope, random_variants  # noqa: E402
from torch_attention import Reporter, oracle_args  # noqa: E402

CAUSAL = (False, "top-left", "bottom-right")


class Verbose:
    """The library's ATTN_VERBOSE lines of the calls inside `with`, from fd 2."""

    def __enter__(self):
        self.f = tempfile.TemporaryFile("w+")
        self.saved = os.dup(2)
        os.dup2(self.f.fileno(), 2)
        LIB.attn_set_verbose(1)
        return self

    def __exit__(self, *a):
        LIB.attn_set_verbose(-1)  # the environment's setting again
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.f.seek(0)
        self.lines = [ln for ln in self.f.read().splitlines() if ln.startswith("attn: ")]

    def kernels(self, call):
        """The kernel= of each line of `call` (the words before the first key=value)."""
        found = []
        for ln in self.lines:
            words = ln.split()[1:]
            name = " ".join(w for w in words[:next((i for i, w in enumerate(words) if "=" in w), len(words))])
            if name == call:
                found.append(ln.split(" kernel=")[1].split()[0])
        return found


def lengths(rng, B, most, longest=0):
    """B sequence lengths: 0 and 1 often, a few, and now and then several
    blocks; with longest, one of up to that many (a long context, which a
    few queries attend split over the keys)."""
    pick = rng.random(B)
    n = rng.integers(2, 12, B)
    n[pick < 0.12] = 0
    n[(pick >= 0.12) & (pick < 0.3)] = 1
    n[pick >= 0.85] = rng.integers(12, most + 1, int((pick >= 0.85).sum()))
    if longest and B:
        n[rng.integers(0, B)] = rng.integers(most, longest + 1)
    return [int(x) for x in n]


def packed(rng, lens, H, E, dt):
    """The offsets of sequences of these lengths, and random rows (total, H, E) for them."""
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return cu, rng.standard_normal((int(cu[-1]), H, E)).astype(dt)


def strided(a):
    """a's values in a view whose rows lie apart (each row 3 elements wider)."""
    wide = np.zeros(a.shape[:-1] + (a.shape[-1] + 3,), a.dtype)
    wide[..., :a.shape[-1]] = a
    return wide[..., :a.shape[-1]]


def seq_mask(rng, kind, Hq, L, S, dt):
    """A sequence's mask: "bool" (Hq, L, S) keeping key 0 of every row, "bias" (L, S) floats, else None."""
    if kind == "bool":
        m = rng.random((Hq, L, S)) < 0.7
        m[..., 0] = True
        return m
    if kind == "bias":
        return rng.standard_normal((L, S)).astype(dt)
    return None


def binding_variants(variants):
    """oracle_variants' variant dict as the binding's keywords."""
    kw = {}
    if variants.get("softcap"):
        kw["softcap"] = variants["softcap"]
    if variants.get("slopes") is not None:
        kw["alibi_slopes"] = np.asarray(variants["slopes"])
    if variants.get("window"):
        kw["window"] = variants["window"]
    if variants.get("sinks") is not None:
        kw["sinks"] = np.asarray(variants["sinks"])
    if variants.get("rope") is not None:
        layout, base, dim, offset = variants["rope"]
        kw["rope"] = {"layout": layout, "base": base, "rotary_dim": dim, "position_offset": offset}
    return kw


def heads_first(a):
    """(T, H, X) rows of one sequence as (H, T, X)."""
    return np.ascontiguousarray(np.swapaxes(a, 0, 1))


def sequence_reference(q, k, v, dout, mask, causal, scale, variants, keep=None, p=0.0):
    """One sequence's (out, lse, [dq, dk, dv], bounds) in the packed layouts:
    PyTorch float64 autograd (oracle_backward.reference). A sequence without
    keys gives out 0, lse -inf (its sink's logit) and dq 0; one without
    queries dk and dv 0. bounds: (max|s| with soft-capping's share, the
    gradients' magnitudes g_abs) for the f32 bounds. keep, p: the sequence's
    dropout mask (attn.dropout_mask) and probability."""
    L, S, Hq = q.shape[0], k.shape[0], q.shape[1]
    if not L or not S:
        sinks = variants.get("sinks")
        lse = np.broadcast_to(np.asarray(sinks, np.float64) if sinks is not None else -np.inf, (L, Hq))
        return (np.zeros((L, Hq, v.shape[2])), lse, [np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)],
                (0.0, [0.0, 0.0, 0.0]))
    grads, _, max_s, mags, out, _, lse = reference(heads_first(q), heads_first(k), heads_first(v), heads_first(dout),
                                                   mask, CAUSAL.index(causal), scale, keep, p,
                                                   variants=dict(variants))
    back = [np.swapaxes(g, 0, 1) for g in grads[:3]]
    return np.swapaxes(out, 0, 1), np.swapaxes(lse, 0, 1), back, (max_s + 2 * variants.get("softcap", 0.0), mags)


def out_allowed(f32, ref, v, max_s, p=0.0):
    """The forward's bound (oracle_backward.py's), its terms grown by dropout's 1/(1 - p)."""
    big = float(np.abs(ref).max()) if ref.size else 0.0
    vmax = float(np.abs(v).max()) if v.size else 0.0
    return (2e-5 * big + 4 * 2.0**-24 * max_s * vmax if f32 else 1e-12 * big) / (1 - p)


def grad_allowed(f32, ref, mag, max_s):
    """A gradient's bound: f32 oracle_backward.py's; f64 1e-12 of its largest
    value or of its terms' (g_abs), whichever is larger: a sequence's terms
    can cancel to a gradient far below them, and rounding is theirs."""
    big = float(np.abs(ref).max()) if ref.size else 0.0
    return (2e-5 + math.expm1(8 * 2.0**-24 * max_s)) * mag if f32 else 1e-12 * max(big, mag)


class Case:
    """A random ragged batch: packed q, k, v, dout, the offsets, per-sequence
    masks, the causal mode, the scale and the score variants."""

    def __init__(self, rng, f32, most=80, variants=True, masks=True, dropout=True):
        self.f32 = f32
        dt = np.float32 if f32 else np.float64
        B = int(rng.integers(1, 7)) if rng.random() < 0.95 else 0
        self.Lq, self.Lk = lengths(rng, B, most), lengths(rng, B, most, 3000 if rng.random() < 0.15 else 0)
        self.Hk = int(rng.integers(1, 3))
        self.Hq = self.Hk * int(rng.integers(1, 4))
        self.E, self.Ev = int(rng.integers(1, 33)), int(rng.integers(1, 33))
        self.causal = CAUSAL[int(rng.integers(0, 3))]
        self.cq, self.q = packed(rng, self.Lq, self.Hq, self.E, dt)
        self.ck, self.k = packed(rng, self.Lk, self.Hk, self.E, dt)
        self.v = packed(rng, self.Lk, self.Hk, self.Ev, dt)[1]
        self.dout = packed(rng, self.Lq, self.Hq, self.Ev, dt)[1]
        self.strided = rng.random() < 0.3  # the packed tensors as views into wider rows (any strides)
        if self.strided:
            self.q, self.k, self.v, self.dout = (strided(a) for a in (self.q, self.k, self.v, self.dout))
        kind = rng.choice(["none", "bool", "bias"]) if masks else "none"
        self.masks = None if kind == "none" else [
            seq_mask(rng, kind, self.Hq, L, S, dt) if L and S and rng.random() < 0.8 else None
            for L, S in zip(self.Lq, self.Lk)]
        self.scale = float(rng.choice([0.3, -0.7])) if rng.random() < 0.2 else None
        self.variants = {}
        if variants:
            self.variants = random_variants(rng, self.Hq, 1, max(self.Lk + [1]), CAUSAL.index(self.causal))
            rope = random_rope(rng, self.E)
            if rope:
                self.variants["rope"] = rope
        self.p, self.seed = (float(rng.choice([0.1, 0.5])), int(rng.integers(0, 2**63))) if (
            dropout and rng.random() < 0.2) else (0.0, None)
        self.kw = dict(causal=self.causal, scale=self.scale, dropout_p=self.p, seed=self.seed,
                       **binding_variants(self.variants))
        self.score_bound = None  # max|s| for the f32 bounds where a case knows better (padding_rows)
        self.bf16 = f32 and variants and rng.random() < 0.15  # the bf16 compute mode
        if self.bf16:
            self.kw["compute"] = "bf16"
        self.name = "%s_B%d_Hq%d_Hk%d_E%d_Ev%d_%s_%s%s" % (
            "f32" if f32 else "f64", B, self.Hq, self.Hk, self.E, self.Ev, self.causal or "nocausal", kind,
            "".join("_" + n for n in sorted(self.variants))) + ("_dropout" if self.p else "") + (
            "_strided" if self.strided else "") + ("_bf16" if self.bf16 else "")

    @classmethod
    def given(cls, f32, Lq, Lk, masks, causal, variants, E):
        """A case of these lengths, masks, causal mode and variants (no data,
        no dropout, the default scale): to check a call made otherwise."""
        c = cls.__new__(cls)
        c.f32, c.Lq, c.Lk, c.masks, c.causal, c.variants, c.E = f32, Lq, Lk, masks, causal, variants, E
        c.cq = np.concatenate([[0], np.cumsum(Lq)]).astype(np.int64)
        c.ck = np.concatenate([[0], np.cumsum(Lk)]).astype(np.int64)
        c.scale, c.p, c.seed, c.score_bound, c.dout, c.strided, c.bf16 = None, 0.0, None, None, None, False, False
        c.kw = dict(causal=causal, **binding_variants(variants))
        return c

    def sequences(self, q=None, k=None, v=None, dout=None):
        """Each sequence's reference, on these data (default the case's)."""
        q, k, v, dout = (self.q if q is None else q, self.k if k is None else k, self.v if v is None else v,
                         self.dout if dout is None else dout)
        if dout is None:  # forward only: any dLoss/dout
            dout = np.zeros((q.shape[0], q.shape[1], v.shape[2]), q.dtype)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(self.E)
        for b in range(len(self.Lq)):
            rq, rk = slice(self.cq[b], self.cq[b + 1]), slice(self.ck[b], self.ck[b + 1])
            mask = self.masks[b] if self.masks else None
            keep = None
            if self.p and self.Lq[b] and self.Lk[b]:  # sequence b's stream: seed + b (attn.h)
                keep = attn.dropout_mask(*(np.swapaxes(a, 0, 1) for a in (q[rq], k[rk], v[rk])), self.p,
                                         (self.seed + b) % 2**64, mask, **{n: x for n, x in self.kw.items()
                                                                          if n not in ("dropout_p", "seed")})
            ref = sequence_reference(q[rq], k[rk], v[rk], dout[rq], mask, self.causal, scale, self.variants, keep,
                                     self.p)
            if self.score_bound is not None:
                ref = ref[:3] + ((self.score_bound, ref[3][1]),)
            yield rq, rk, v[rk], ref, self.bf16_terms(q[rq], k[rk], scale)

    def bf16_terms(self, q, k, scale):
        """In the bf16 compute mode, (what it may add to lse's error, x of its
        gradients' bound): each product's operands rounded to bf16 (u = 2^-8)
        moves scores by up to 2u s_abs (oracle.bf16_lse_allowance); attn.h's
        x = 4.2 u s_abs + 1.1e-4. Else (0, 0)."""
        if not self.bf16 or not len(q) or not len(k):
            return 0.0, 0.0
        qh, kh = heads_first(q), np.repeat(heads_first(k), q.shape[1] // k.shape[1], axis=0)
        extra = bf16_lse_allowance(qh, kh, scale)
        return extra, 4.2 / 2.2 * (extra - 1.1e-4) + 1.1e-4

    def check_forward(self, out, lse, q=None, k=None, v=None):
        """Why out and lse are not PyTorch's for each sequence, or ''."""
        for b, (rq, rk, vb, (ro, rl, _, (max_s, _)), (extra, x)) in enumerate(self.sequences(q, k, v)):
            allowed = out_allowed(self.f32, ro, vb, max_s, self.p)
            if self.bf16:  # attn.h's bound of the mode, y = lse's extra
                vmax = float(np.abs(vb).max()) if vb.size else 0.0
                allowed = bf16_out_allowance(extra, vmax) / (1 - self.p)
            if out.dtype == np.float16:  # f32's result rounded once (attn.h): u16 |exact| + (1 + u16) f32's bound
                allowed = 2.0**-11 * np.abs(ro) + (1 + 2.0**-11) * allowed
            why = compare(out[rq], ro, allowed)
            if not why and lse is not None:
                why = lse_error(lse[rq], rl, np.float32 if self.f32 else np.float64, max_s, extra) or ""
            if why:
                return "sequence %d: %s" % (b, why)
        return ""

    def check_backward(self, grads):
        for b, (rq, rk, vb, (_, _, refs, (max_s, mags)), (_, x)) in enumerate(self.sequences()):
            for n, got, ref, mag, rows in zip(("dq", "dk", "dv"), grads, refs, mags, (rq, rk, rk)):
                if got is None:
                    continue
                allowed = grad_allowed(self.f32, ref, mag, max_s)
                if self.bf16:  # attn.h's bound of the mode: (6u + e^x - 1) max g_abs
                    allowed = (6 * BF16_U + math.expm1(x)) * mag
                why = compare(got[rows], ref, allowed)
                if why:
                    return "sequence %d %s: %s" % (b, n, why)
        return ""

    def runs_kernels(self):
        """Whether some sequence has queries and keys (else no kernel runs: kernel=none)."""
        return any(L and S for L, S in zip(self.Lq, self.Lk))


def expect_kernels(got, want, call):
    """Why the verbose lines' kernels are not `want` (a set per line), or ''."""
    if len(got) != 1 or got[0] not in want:
        return "%s ran kernels %s, expected one of %s" % (call, got, sorted(want))
    return ""


def forward_kernels(c):
    """What attn.h says a ragged batch's forward runs: the exact kernel in f64,
    the fast ones in f32; none where no sequence has queries and keys."""
    return {"none"} if not c.runs_kernels() else {"flash", "decode"} if c.f32 else {"exact"}


def varlen_backward(rng, rep, i):
    """A ragged batch's forward and backward (some of dq, dk, dv) against
    PyTorch per sequence; bitwise attn_sdpa and attn_sdpa_backward on each
    sequence's views, as attn.h defines them, and on 1 and 3 threads."""
    c = Case(rng, f32=i % 2 == 1, most=200 if rng.random() < 0.3 else 40)
    want = [g for g in ("dq", "dk", "dv") if rng.random() < 0.7] or ["dq"]
    name = "varlen_backward_%03d_%s_%s" % (i, c.name, "_".join(want))
    with Verbose() as log:
        out, lse = attn.sdpa_varlen(c.q, c.k, c.v, c.cq, c.ck, masks=c.masks, return_lse=True, **c.kw)
        grads = attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck, masks=c.masks, want=want,
                                          **c.kw)
    why = c.check_forward(out, lse) or c.check_backward(grads)
    if not why:
        why = expect_kernels(log.kernels("sdpa_varlen"), forward_kernels(c), "the forward")
    if not why:
        bwd = {"none"} if not c.runs_kernels() else {"flash_backward"} if c.f32 else {"exact"}
        why = expect_kernels(log.kernels("sdpa_varlen_backward"), bwd, "the backward")
    if not why and c.bf16 and c.runs_kernels():  # the mode names its kernels (attn.h)
        lines = [ln for ln in log.lines if ln.startswith("attn: sdpa_varlen_backward ")]
        why = "" if " bf16_kernels=" in lines[0] else "the bf16 mode's backward names no bf16 kernels: %r" % lines[0]
    for threads in (1, 3):
        if not why:
            again = attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck, masks=c.masks, want=want,
                                              num_threads=threads, **c.kw)
            if not all(a is b or np.array_equal(a, b) for a, b in zip(again, grads)):
                why = "not bitwise the same on %d threads" % threads
    if not why:
        why = alone(c, out, lse, grads, want)
    rep.report(name, why)


def alone(c, out, lse, grads, want):
    """Why some sequence's rows are not bitwise attn.sdpa and attn.sdpa_backward
    on its own views (heads first: (Hq, L, E)), or ''."""
    for b in range(len(c.Lq)):
        rq, rk = slice(c.cq[b], c.cq[b + 1]), slice(c.ck[b], c.ck[b + 1])
        if not (c.Lq[b] and c.Lk[b]):
            continue
        views = [np.swapaxes(a, 0, 1) for a in (c.q[rq], c.k[rk], c.v[rk], c.dout[rq], out[rq])]
        mask = c.masks[b] if c.masks else None
        kw = dict(c.kw, seed=(c.seed + b) % 2**64) if c.p else c.kw  # sequence b's dropout seed
        o, l = attn.sdpa(*views[:3], mask, return_lse=True, **kw)
        if not (np.array_equal(o, views[4]) and np.array_equal(l, lse[rq].T)):
            return "sequence %d: out or lse not bitwise attn.sdpa's alone" % b
        seq = attn.sdpa_backward(views[3], *views[:3], views[4], lse[rq].T, mask, want=want, **kw)
        for n, g, rows, one in zip(("dq", "dk", "dv"), grads, (rq, rk, rk), seq):
            if g is not None and not np.array_equal(np.swapaxes(g[rows], 0, 1), one):
                return "sequence %d: %s not bitwise attn.sdpa_backward's alone" % (b, n)
    return ""


def runs(rng, c, n):
    """n layers' data for a plan of case c: fresh q, k, v of its layouts."""
    for _ in range(n):
        data = tuple(rng.standard_normal(a.shape).astype(a.dtype) for a in (c.q, c.k, c.v))
        yield tuple(strided(a) for a in data) if c.strided else data


def varlen_plan(rng, rep, i):
    """A ragged plan run on three layers' data: each bitwise sdpa_varlen and
    within PyTorch's bounds; the run's kernel that of its unplanned call."""
    c = Case(rng, f32=i % 2 == 1)
    if c.f32 and rng.random() < 0.25:  # a 16-bit q: out f16, rounded once from the f32 call's
        c.q = strided(c.q.astype(np.float16)) if c.strided else c.q.astype(np.float16)
        c.name += "_f16_q"
    name = "varlen_plan_%03d_%s" % (i, c.name)
    plan = attn.Plan(c.q, c.k, c.v, cu_seqlens_q=c.cq, cu_seqlens_k=c.ck, masks=c.masks, return_lse=True, **c.kw)
    for layer, (q, k, v) in enumerate(runs(rng, c, 3)):
        with Verbose() as log:
            out, lse = plan.run(q, k, v)
            want_out, want_lse = attn.sdpa_varlen(q, k, v, c.cq, c.ck, masks=c.masks, return_lse=True, **c.kw)
        why = c.check_forward(out, lse, q, k, v)
        if not why and not (np.array_equal(out, want_out) and np.array_equal(lse, want_lse)):
            why = "layer %d: not bitwise attn.sdpa_varlen's" % layer
        if not why:
            unplanned = log.kernels("sdpa_varlen")
            why = expect_kernels(unplanned, forward_kernels(c), "sdpa_varlen") or expect_kernels(
                log.kernels("sdpa_run varlen"), unplanned, "the run")
        if why:
            return rep.report(name, "layer %d: %s" % (layer, why))
    rep.report(name, refused_runs(plan, c.q, c.k, c.v))


def refused_runs(plan, q, k, v):
    """A plan run with q, k or v of another shape, dtype or strides: PlanError
    naming the tensor, every time. Returns why not, or ''."""
    for t, a in (("q", q), ("k", k), ("v", v)):
        # another dtype the binding passes on (beside an f16 q: f32 or f16)
        other_dtype = {np.float64: np.float32, np.float16: np.float32}.get(
            a.dtype.type, np.float16 if q.dtype == np.float16 else np.float64)
        longer = np.zeros((a.shape[0] + 1,) + a.shape[1:], a.dtype)
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)[..., ::2]  # the same shape, strided
        tries = [("a longer", longer), ("another dtype's", a.astype(other_dtype))]
        if a.size > 1:  # strides that place no element may differ (attn_sdpa_run): one element has none
            tries.append(("a strided", wide))
        for what, bad in tries:
            args = [q, k, v]
            args["qkv".index(t)] = bad
            try:
                plan.run(*args)
            except attn.PlanError as e:
                if t not in str(e).split(":")[0] + " " + str(e):
                    return "%s %s was refused without naming it: %s" % (what, t, e)
                continue
            except attn.AttnError as e:
                return "%s %s raised %s (%s), not PlanError" % (what, t, type(e).__name__, e)
            return "%s %s (shape %s) ran" % (what, t, bad.shape)
    return ""


def dense_plan(rng, rep, i):
    """A dense plan (attn_sdpa_plan_init), run on three layers' data: each
    bitwise attn.sdpa and within PyTorch's bounds, its kernel the unplanned
    call's; a q, k or v laid out otherwise refused."""
    f32 = i % 2 == 1
    dt = np.float32 if f32 else np.float64
    Hk = int(rng.integers(1, 3))
    Hq = Hk * int(rng.integers(1, 4))
    L = int(rng.choice([0, 1, 3, 8, int(rng.integers(9, 150))], p=[0.08, 0.23, 0.23, 0.23, 0.23]))
    S = int(rng.choice([0, 1, 5, int(rng.integers(6, 300)), int(rng.integers(1000, 4000))],
                       p=[0.08, 0.23, 0.23, 0.23, 0.23]))
    E, Ev = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    causal = CAUSAL[int(rng.integers(0, 3))]
    variants = random_variants(rng, Hq, L, max(S, 1), CAUSAL.index(causal))
    rope = random_rope(rng, E)
    if rope:
        variants["rope"] = rope
    mask = None
    if L and S and rng.random() < 0.3:
        mask = seq_mask(rng, "bool" if rng.random() < 0.5 else "bias", Hq, L, S, dt)
    kw = dict(causal=causal, **binding_variants(variants))
    f = rng.standard_normal
    q0, k0, v0 = f((Hq, L, E)).astype(dt), f((Hk, S, E)).astype(dt), f((Hk, S, Ev)).astype(dt)
    name = "dense_plan_%03d_%s_L%d_S%d_Hq%d_Hk%d_%s%s%s" % (i, np.dtype(dt).name, L, S, Hq, Hk, causal or "nocausal",
                                                           "_mask" if mask is not None else "",
                                                           "".join("_" + n for n in sorted(variants)))
    plan = attn.Plan(q0, k0, v0, mask=mask, return_lse=True, **kw)
    empty = not (L and S)
    for layer in range(3):
        q, k, v = f((Hq, L, E)).astype(dt), f((Hk, S, E)).astype(dt), f((Hk, S, Ev)).astype(dt)
        with Verbose() as log:
            out, lse = plan.run(q, k, v)
            want_out, want_lse = attn.sdpa(q, k, v, mask, return_lse=True, **kw)
        why = ""
        if not (np.array_equal(out, want_out) and np.array_equal(lse, want_lse)):
            why = "not bitwise attn.sdpa's"
        if not why and L:
            # the dense call as a batch of one sequence (rows, heads, size)
            packed_ = [np.swapaxes(a, 0, 1) for a in (q, k, v, np.zeros((Hq, L, Ev), dt))]
            ro, rl, _, (max_s, _) = sequence_reference(*packed_, mask, causal, 1 / math.sqrt(E), variants)
            why = compare(np.swapaxes(out, 0, 1), ro, out_allowed(f32, ro, v, max_s))
            if not why:
                why = lse_error(np.swapaxes(lse, 0, 1), rl, dt, max_s) or ""
        if not why:
            want = {"empty"} if empty else ({"flash", "decode"} if f32 else {"exact"})
            unplanned = log.kernels("sdpa")
            why = expect_kernels(unplanned, want, "attn.sdpa") or expect_kernels(log.kernels("sdpa_run"), unplanned,
                                                                                "the run")
        if why:
            return rep.report(name, "layer %d: %s" % (layer, why))
    rep.report(name, refused_runs(plan, q0, k0, v0))


def pieces(rng, rep, i):
    """The keys in two pieces (key_start, total_keys), and now and then only
    the last queries (query_start, total_queries), each piece planned on
    other data and run on the case's, merged (attn.merge) into the whole
    row's attention: PyTorch's on all the keys, the causal limit, ALiBi,
    the window and RoPE at the whole sequence's positions. Sinks go to the
    first piece alone."""
    f32 = i % 2 == 1
    dt = np.float32 if f32 else np.float64
    Hk = int(rng.integers(1, 3))
    Hq = Hk * int(rng.integers(1, 3))
    L, S = int(rng.integers(1, 100)), int(rng.integers(2, 200))
    E, Ev = int(rng.integers(1, 33)), int(rng.integers(1, 33))
    causal = CAUSAL[int(rng.integers(0, 3))]
    variants = random_variants(rng, Hq, L, S, CAUSAL.index(causal))
    rope = random_rope(rng, E)
    if rope:
        variants["rope"] = rope
    cut = int(rng.integers(1, S))
    first = int(rng.integers(0, L)) if rng.random() < 0.4 else 0  # the piece's first query
    f = rng.standard_normal
    q, k, v = f((Hq, L, E)).astype(dt), f((Hk, S, E)).astype(dt), f((Hk, S, Ev)).astype(dt)
    name = "pieces_plan_%03d_%s_L%d_S%d_keys_cut_%d_queries_from_%d_%s%s" % (
        i, np.dtype(dt).name, L, S, cut, first, causal or "nocausal", "".join("_" + n for n in sorted(variants)))
    qp = np.ascontiguousarray(q[:, first:])
    outs, lses = [], []
    for start, stop in ((0, cut), (cut, S)):
        kw = dict(causal=causal, key_start=start, total_keys=S, query_start=first, total_queries=L,
                  **binding_variants(variants))
        if start:
            kw.pop("sinks", None)
        ks, vs = np.ascontiguousarray(k[:, start:stop]), np.ascontiguousarray(v[:, start:stop])
        plan = attn.Plan(*(f(a.shape).astype(dt) for a in (qp, ks, vs)), return_lse=True, **kw)
        o, l = plan.run(qp, ks, vs)
        wo, wl = attn.sdpa(qp, ks, vs, return_lse=True, **kw)
        if not (np.array_equal(o, wo) and np.array_equal(l, wl)):
            return rep.report(name, "piece from key %d: not bitwise attn.sdpa's" % start)
        outs.append(o)
        lses.append(l)
    out, lse = attn.merge(outs, lses)
    packed_ = [np.swapaxes(a, 0, 1) for a in (q, k, v, np.zeros((Hq, L, Ev), dt))]
    ro, rl, _, (max_s, _) = sequence_reference(*packed_, None, causal, 1 / math.sqrt(E), variants)
    ro, rl = ro[first:], rl[first:]
    why = compare(np.swapaxes(out, 0, 1), ro, out_allowed(f32, ro, v, max_s))
    if not why:
        why = lse_error(np.swapaxes(lse, 0, 1), rl, dt, max_s) or ""
    rep.report(name, why)


def paged_plan(rng, rep, i):
    """A pool's sequences (lengths 0, 1, a few, several pages) with new
    queries each and a mask each or none, planned (KVPages.plan) and run on
    three layers' queries, one of them over a second pool (another layer's
    pages under the same tables): each run bitwise attend's and within
    PyTorch's bounds over the keys appended (the queries the last positions:
    bottom-right). Then an append, truncate, fork or free makes the plan
    stale: its run is refused (PlanError, "plan again")."""
    Hk = int(rng.integers(1, 3))
    Hq = Hk * int(rng.integers(1, 4))
    E, Ev = int(rng.choice([4, 8, 16, 32])), int(rng.choice([4, 8, 16]))
    page = int(rng.choice([16, 32]))
    n = int(rng.integers(1, 5))
    Lk = lengths(rng, n, 90)
    Lq = [min(int(x), S) if rng.random() < 0.5 else int(x) for x, S in zip(lengths(rng, n, 20), Lk)]
    causal = "bottom-right" if rng.random() < 0.7 else False
    variants = random_variants(rng, Hq, 1, max(Lk + [1]), CAUSAL.index(causal))
    kind = rng.choice(["none", "bool", "bias"])
    masks = None if kind == "none" else [seq_mask(rng, kind, Hq, L, S, np.float32) if L and S else None
                                         for L, S in zip(Lq, Lk)]
    pools, keys = [], []
    for _ in range(2):
        pool = attn.KVPages(Hk, E, 64, n + 1, value_dim=Ev, page_size=page)
        kv = []
        for S in Lk:
            s = pool.create()
            k = rng.standard_normal((S, Hk, E)).astype(np.float32)
            v = rng.standard_normal((S, Hk, Ev)).astype(np.float32)
            pool.append(s, k, v)
            kv.append((k, v))
        pools.append(pool)
        keys.append(kv)
    seqs = list(range(n))
    kw = binding_variants(variants)
    name = "paged_plan_%03d_n%d_Hq%d_Hk%d_E%d_Ev%d_P%d_%s_%s%s" % (
        i, n, Hq, Hk, E, Ev, page, causal or "nocausal", kind, "".join("_" + x for x in sorted(variants)))
    plan = pools[0].plan(seqs, Lq, Hq, masks=masks, causal=causal, return_lse=True, **kw)
    c = Case.given(True, Lq, Lk, masks, causal or False, variants, E)
    for layer in range(3):
        which = layer % 2
        q = rng.standard_normal((int(c.cq[-1]), Hq, E)).astype(np.float32)
        with Verbose() as log:
            out, lse = plan.run(q, pool=pools[which])
            want_out, want_lse = pools[which].attend(seqs, q, cu_seqlens_q=c.cq, masks=masks, causal=causal,
                                                     return_lse=True, **kw)
        why = "" if np.array_equal(out, want_out) and np.array_equal(lse, want_lse) else "not bitwise attend's"
        if not why:
            k = np.concatenate([kv[0] for kv in keys[which]] + [np.zeros((0, Hk, E), np.float32)])
            v = np.concatenate([kv[1] for kv in keys[which]] + [np.zeros((0, Hk, Ev), np.float32)])
            why = c.check_forward(out, lse, q, k, v)
        if not why:
            unplanned = log.kernels("sdpa_varlen_paged")
            why = expect_kernels(unplanned, forward_kernels(c), "attend") or expect_kernels(
                log.kernels("sdpa_run paged"), unplanned, "the run")
        if why:
            return rep.report(name, "layer %d: %s" % (layer, why))
    s = seqs[int(rng.integers(0, n))]
    change = rng.choice(["append", "truncate", "fork", "free"])
    if change == "truncate" and not Lk[s]:
        change = "append"
    if change == "append":
        pools[0].append(s, np.zeros((1, Hk, E), np.float32), np.zeros((1, Hk, Ev), np.float32))
    elif change == "truncate":
        pools[0].truncate(s, Lk[s] - 1)
    elif change == "fork":
        pools[0].fork(s)
    else:
        pools[0].free(s)
    name += "_then_" + change
    try:
        plan.run(np.zeros((int(c.cq[-1]), Hq, E), np.float32))
    except attn.PlanError as e:
        return rep.report(name, "" if "plan again" in str(e) else "stale plan refused as %r" % str(e))
    except attn.AttnError as e:
        return rep.report(name, "stale plan raised %s (%s), not PlanError" % (type(e).__name__, e))
    rep.report(name, "a run after the pool changed (%s) was not refused" % change)


def padding_rows(rng, rep):
    """f32 sequences with rows a mask of -FLT_MAX covers entirely (Hugging
    Face's padding): such a row's f32 lse has lost log(S), and the fused
    backward must recompute its maximum and sum (attn.h) to weigh each key
    1/S, as PyTorch does. The bounds take max|s| from the other rows: -FLT_MAX
    swallows q.k in f64 as in f32 and moves no weight."""
    c = Case(rng, f32=True, variants=False, masks=False, dropout=False)
    c.Lq, c.Lk = [5, 70, 1], [9, 130, 4]
    c.Hq, c.Hk, c.E, c.Ev = 4, 2, 16, 8
    c.cq, c.q = packed(rng, c.Lq, c.Hq, c.E, np.float32)
    c.ck, c.k = packed(rng, c.Lk, c.Hk, c.E, np.float32)
    c.v = packed(rng, c.Lk, c.Hk, c.Ev, np.float32)[1]
    c.dout = packed(rng, c.Lq, c.Hq, c.Ev, np.float32)[1]
    c.causal, c.scale, c.variants, c.p, c.seed, c.strided = False, None, {}, 0.0, None, False
    c.kw = dict(causal=False)
    c.masks = []
    for L, S in zip(c.Lq, c.Lk):
        m = rng.standard_normal((L, S)).astype(np.float32)
        m[rng.random(L) < 0.5] = -np.finfo(np.float32).max
        c.masks.append(m)
    finite = [np.abs(np.einsum("lhe,she->hls", c.q[c.cq[b]:c.cq[b + 1]].astype(np.float64),
                               np.repeat(c.k[c.ck[b]:c.ck[b + 1]], 2, axis=1).astype(np.float64))).max() / 4 + 5
              for b in range(3)]
    c.score_bound = float(max(finite))
    out, lse = attn.sdpa_varlen(c.q, c.k, c.v, c.cq, c.ck, masks=c.masks, return_lse=True, **c.kw)
    grads = attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck, masks=c.masks, **c.kw)
    rep.report("varlen_backward_f32_padding_rows_of_minus_flt_max",
               c.check_forward(out, lse) or c.check_backward(grads) or alone(c, out, lse, grads, ("dq", "dk", "dv")))


def large_scores(rng, rep):
    """An f32 batch in which one sequence's products q.k.scale pass 2^18: the
    fused backward hands that sequence's slices to the exact kernel
    (fallback=N/M on its line), whose gradients are f64 rounded once, while
    the other sequences stay on the fused kernel within its bound."""
    c = Case(rng, f32=True, variants=False, masks=False, dropout=False)
    c.Lq, c.Lk, c.Hq, c.Hk, c.E, c.Ev = [6, 40, 3], [20, 50, 7], 2, 1, 16, 8
    c.cq, c.q = packed(rng, c.Lq, c.Hq, c.E, np.float32)
    c.ck, c.k = packed(rng, c.Lk, c.Hk, c.E, np.float32)
    c.v = packed(rng, c.Lk, c.Hk, c.Ev, np.float32)[1]
    c.dout = packed(rng, c.Lq, c.Hq, c.Ev, np.float32)[1]
    c.q[c.cq[1]:c.cq[2]] *= 600  # sequence 1: |q.k| / 4 up to some 2^20
    c.k[c.ck[1]:c.ck[2]] *= 600
    c.causal, c.scale, c.variants, c.p, c.seed, c.strided, c.masks = "bottom-right", None, {}, 0.0, None, False, None
    c.kw = dict(causal=c.causal)
    with Verbose() as log:
        out, lse = attn.sdpa_varlen(c.q, c.k, c.v, c.cq, c.ck, return_lse=True, **c.kw)
        grads = attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck, **c.kw)
    lines = [ln for ln in log.lines if ln.startswith("attn: sdpa_varlen_backward ")]
    fallback = lines[0].split(" fallback=")[1].split()[0] if len(lines) == 1 and " fallback=" in lines[0] else ""
    why = "" if " kernel=flash_backward " in lines[0] and fallback and not fallback.startswith("0/") else \
        "the line says %r" % (lines,)
    for b, (rq, rk, vb, (_, _, refs, (max_s, mags)), _) in enumerate(c.sequences()):
        for n, got, ref, mag, rows in zip(("dq", "dk", "dv"), grads, refs, mags, (rq, rk, rk)):
            big = float(np.abs(ref).max()) if ref.size else 0.0
            allowed = 2.0**-24 * np.abs(ref) + 1e-12 * big + 2.0**-150 if b == 1 else grad_allowed(True, ref, mag,
                                                                                                     max_s)
            why = why or compare(got[rows], ref, allowed) and "sequence %d %s: %s" % (
                b, n, compare(got[rows], ref, allowed))
    rep.report("varlen_backward_f32_large_scores_on_the_exact_kernel", why or alone(c, out, lse, grads,
                                                                                     ("dq", "dk", "dv")))


def bf16_one_product(rep):
    """The bf16 compute mode where one product makes the score: q 2.9313 and k
    2.1172 round to bf16 by 2^-8.9 and 2^-8.1 relative, the score by 0.58%,
    past the 2 * 2^-9 attn.h allowed before (bf16's unit roundoff is 2^-8).
    Sixteen queries, so that the flash kernel (not decode, f32) runs them."""
    c = Case.given(True, [16], [2], None, False, {}, 1)
    c.q = np.full((16, 1, 1), 2.93129468, np.float32)
    c.k = np.array([[[2.11719155]], [[-0.72427559]]], np.float32)
    c.v = np.array([[[1.0]], [[-1.0]]], np.float32)
    c.bf16, c.kw = True, dict(causal=False, compute="bf16")
    out, lse = attn.sdpa_varlen(c.q, c.k, c.v, c.cq, c.ck, return_lse=True, **c.kw)
    rep.report("varlen_bf16_mode_one_product_rounded_by_2u", c.check_forward(out, lse))


def refusals(rng, rep):
    """What attn.h says these calls refuse, each with its own error."""
    c = Case(rng, f32=True, variants=False, masks=False, dropout=False)
    while not c.runs_kernels():
        c = Case(rng, f32=True, variants=False, masks=False, dropout=False)
    out, lse = attn.sdpa_varlen(c.q, c.k, c.v, c.cq, c.ck, return_lse=True)
    piece = dict(key_start=1, total_keys=int(c.ck[-1]) + 1)
    tries = [
        ("varlen_backward_refuses_pieces", attn.OptionError,
         lambda: attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck, **piece)),
        ("varlen_plan_refuses_pieces", attn.OptionError,
         lambda: attn.Plan(c.q, c.k, c.v, cu_seqlens_q=c.cq, cu_seqlens_k=c.ck, **piece)),
        ("varlen_backward_refuses_f16_q", attn.DtypeError,
         lambda: attn.sdpa_varlen_backward(c.dout.astype(np.float16), c.q.astype(np.float16), c.k, c.v,
                                           out.astype(np.float16), lse, c.cq, c.ck)),
        ("varlen_backward_refuses_other_offsets", attn.ArgumentError,
         lambda: attn.sdpa_varlen_backward(c.dout, c.q, c.k, c.v, out, lse, c.cq, c.ck[::-1].copy())),
        ("dense_plan_refuses_dropout_with_pieces", attn.OptionError,
         lambda: attn.Plan(c.q[:4], c.k[:4], c.v[:4], dropout_p=0.5, seed=1, key_start=1, total_keys=9)),
    ]
    for name, error, call in tries:
        try:
            call()
            why = "ran"
        except error as e:
            why = "" if str(e) else "no message"
        except Exception as e:  # noqa: BLE001 (the wrong error is the finding)
            why = "raised %s (%s), not %s" % (type(e).__name__, e, error.__name__)
        rep.report(name, why)
    # A varlen plan without lse runs and gives out alone, bitwise the unplanned call's.
    plan = attn.Plan(c.q, c.k, c.v, cu_seqlens_q=c.cq, cu_seqlens_k=c.ck)
    got = plan.run(c.q, c.k, c.v)
    rep.report("varlen_plan_without_lse", "" if np.array_equal(got, out) else "out differs from sdpa_varlen's")


def main():
    _, rng = oracle_args(53)
    rep = Reporter()
    for i in range(200):
        varlen_backward(rng, rep, i)
    for i in range(100):
        varlen_plan(rng, rep, i)
    for i in range(100):
        dense_plan(rng, rep, i)
    for i in range(60):
        pieces(rng, rep, i)
    for i in range(60):
        paged_plan(rng, rep, i)
    padding_rows(rng, rep)
    large_scores(rng, rep)
    bf16_one_product(rep)
    refusals(rng, rep)
    print("# %d passed, %d failed" % (rep.passed, rep.failed))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
