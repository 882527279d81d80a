#!/usr/bin/python3
"""oracle_varlen.py -- ragged batches (`attn sdpa --cu-seqlens-q/-k`) against
PyTorch float64, forward and backward.

Each case packs B sequences of random lengths (some with no queries, some with
no keys) as (total, heads, size), runs the command in float64 with --lse and the
gradients, and compares with PyTorch autograd on the whole batch as ONE
attention through a block-diagonal mask: query row i of sequence b may see key
j only when j belongs to sequence b too (and, causally, within that sequence's
own limit). Rows that see no key are 0 in attn (PyTorch's softmax would give
NaN), so the reference divides by the row sum only where it is not 0. The
verbose line must name the exact kernel (f64).

Usage: oracle_varlen.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import os
import subprocess

import numpy as np
import torch

from scratch import scratch_dir
from torch_attention import Reporter, oracle_args

TOL = 1e-12


def block_mask(cu_q, cu_k, causal):
    """(Tq, Tk) bool: the block-diagonal mask of the batch, each block with its
    sequence's own causal limit (0 none, 1 top-left, 2 bottom-right)."""
    Tq, Tk = cu_q[-1], cu_k[-1]
    m = torch.zeros(Tq, Tk, dtype=torch.bool)
    for b in range(len(cu_q) - 1):
        L, S = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        blk = torch.ones(L, S, dtype=torch.bool)
        if causal == 1:
            blk = torch.tril(blk)
        elif causal == 2:
            blk = torch.tril(blk, diagonal=S - L)
        m[cu_q[b]:cu_q[b + 1], cu_k[b]:cu_k[b + 1]] = blk
    return m


def reference(q, k, v, mask, scale):
    """out (Tq, Hq, Ev) and lse (Tq, Hq) of the packed batch as one attention
    through `mask`, GQA by repeating k and v, rows without keys 0."""
    Hq, Hk = q.shape[1], k.shape[1]
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (H, T, X)
    kh, vh = kh.repeat_interleave(Hq // Hk, dim=0), vh.repeat_interleave(Hq // Hk, dim=0)
    s = (qh @ kh.transpose(1, 2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(l == 0, torch.ones_like(l), l)
    out = (p @ vh).transpose(0, 1)
    lse = torch.where(l[..., 0] == 0, torch.full_like(l[..., 0], float("-inf")), m[..., 0] + torch.log(l[..., 0]))
    return out, lse.transpose(0, 1)


def worst(got, want):
    """max |got - want| relative to max |want| (1 if that is 0); infinities must match."""
    got, want = np.asarray(got), np.asarray(want)
    if not np.array_equal(np.isinf(got), np.isinf(want)):
        return np.inf
    fin = np.isfinite(want)
    scale = max(np.max(np.abs(want[fin]), initial=0.0), 1.0)
    return float(np.max(np.abs(got[fin] - want[fin]), initial=0.0) / scale)


def main():
    build, rng = oracle_args(29)
    attn = os.path.join(build, "attn")
    rep = Reporter()
    tmp = scratch_dir("attn_varlen_")
    path = lambda n: os.path.join(tmp, n + ".npy")
    cases = [("plain", 0, 4, 4), ("top_left_gqa", 1, 4, 2), ("bottom_right_mqa", 2, 4, 1)]
    cases += [("random%d" % i, int(rng.integers(3)), 2 * int(rng.integers(1, 4)), 2) for i in range(6)]
    for name, causal, Hq, Hk in cases:
        B = int(rng.integers(1, 9))
        Lq = rng.integers(0, 40, B)
        Lk = rng.integers(0, 50, B)
        Lq[rng.random(B) < 0.2] = 0
        Lk[rng.random(B) < 0.2] = 0
        cu_q, cu_k = np.concatenate([[0], np.cumsum(Lq)]), np.concatenate([[0], np.cumsum(Lk)])
        E, Ev = int(rng.integers(1, 17)), int(rng.integers(1, 17))
        q = rng.standard_normal((cu_q[-1], Hq, E))
        k = rng.standard_normal((cu_k[-1], Hk, E))
        v = rng.standard_normal((cu_k[-1], Hk, Ev))
        dout = rng.standard_normal((cu_q[-1], Hq, Ev))
        for n, a in (("q", q), ("k", k), ("v", v), ("dout", dout)):
            np.save(path(n), a)
        np.save(path("cq"), cu_q.astype(np.int64))
        np.save(path("ck"), cu_k.astype(np.int64))
        args = [attn, "sdpa", "-q", path("q"), "-k", path("k"), "-v", path("v"), "--cu-seqlens-q", path("cq"),
                "--cu-seqlens-k", path("ck"), "-o", path("out"), "--lse", path("lse"), "--grad-out", path("dout"),
                "--dq", path("dq"), "--dk", path("dk"), "--dv", path("dv")]
        if causal:
            args.append("--causal=" + ("top-left" if causal == 1 else "bottom-right"))
        r = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, ATTN_VERBOSE="1"))
        label = "varlen_vs_torch_%s_B%d" % (name, B)
        if r.returncode != 0:
            rep.report(label, "attn failed: " + r.stderr.strip())
            continue
        kernel = "kernel=exact" in r.stderr or cu_q[-1] == 0
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        out, lse = reference(tq, tk, tv, block_mask(list(cu_q), list(cu_k), causal), 1 / np.sqrt(E))
        out.backward(torch.tensor(dout))
        errs = {"out": worst(np.load(path("out")), out.detach().numpy()),
                "lse": worst(np.load(path("lse")), lse.detach().numpy()),
                "dq": worst(np.load(path("dq")), tq.grad.numpy()),
                "dk": worst(np.load(path("dk")), tk.grad.numpy()),
                "dv": worst(np.load(path("dv")), tv.grad.numpy())}
        bad = {n: e for n, e in errs.items() if not e <= TOL}
        rep.report(label, "" if not bad and kernel else "errors %s (tolerance %g), exact kernel %s" % (bad, TOL, kernel))
    print("# %d passed, %d failed" % (rep.passed, rep.failed))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
