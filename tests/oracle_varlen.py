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

Then the edge batches (EDGES: sequences of one query or one key, one beside
hundreds, more queries than keys and fewer under both causal alignments, GQA
and MQA, per-sequence masks, a given scale) through the Python binding, in
float64 and float32, each sequence checked against PyTorch autograd on that
sequence alone.

Usage: oracle_varlen.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import os
import subprocess
import sys

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


def reference(q, k, v, mask, scale, bias=None):
    """out (Tq, Hq, Ev) and lse (Tq, Hq) of the packed batch as one attention
    through `mask` (and an additive float `bias`, broadcast to (Hq, Tq, Tk)),
    GQA by repeating k and v, rows without keys 0."""
    Hq, Hk = q.shape[1], k.shape[1]
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (H, T, X)
    kh, vh = kh.repeat_interleave(Hq // Hk, dim=0), vh.repeat_interleave(Hq // Hk, dim=0)
    s = (qh @ kh.transpose(1, 2)) * scale
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~mask, float("-inf"))
    if s.shape[-1] == 0:  # a batch without keys: no maximum to take, every row's sum 0
        m = torch.zeros(s.shape[:-1] + (1,), dtype=s.dtype)
    else:
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


# Edge batches through the binding (attn.sdpa_varlen and its backward), each
# sequence run ALONE in PyTorch autograd as the oracle: (name, lengths of
# queries, of keys, Hq, Hk, E, Ev, causal, masks: None, "bool" (Hq, L, S),
# "bias" (L, S) float, "row" (1, S) float, scale or None).
EDGES = [
    ("length_1", [1, 1, 1, 1], [1, 1, 1, 1], 2, 2, 4, 3, 0, None, None),
    ("length_1_queries_long_keys", [1, 1, 1], [700, 1, 33], 4, 1, 16, 8, 2, None, None),
    ("very_unequal", [1, 600, 2, 0, 5], [650, 3, 1, 4, 0], 2, 1, 8, 8, 0, None, None),
    ("more_queries_than_keys_top_left", [9, 17, 3], [4, 5, 1], 4, 2, 8, 5, 1, None, None),
    ("more_queries_than_keys_bottom_right", [9, 17, 3], [4, 5, 1], 4, 2, 8, 5, 2, None, None),
    ("fewer_queries_than_keys_top_left", [3, 5, 1], [9, 70, 33], 6, 3, 16, 16, 1, None, None),
    ("fewer_queries_than_keys_bottom_right", [3, 5, 1], [9, 70, 33], 6, 3, 16, 16, 2, None, None),
    ("mqa_bool_masks", [7, 65, 1], [130, 65, 7], 8, 1, 32, 16, 0, "bool", None),
    ("gqa_bias_masks_bottom_right", [3, 1, 6, 40], [5, 2, 6, 41], 4, 2, 8, 8, 2, "bias", 0.2),
    ("broadcast_row_masks_top_left", [3, 1, 6], [5, 2, 6], 2, 1, 4, 4, 1, "row", -1.5),
]


def edge_masks(kind, Lq, Lk, Hq, rng):
    """Each sequence's mask of `kind` (EDGES), None for sequences without
    queries or keys; a bool mask keeps key 0 of every row."""
    masks = []
    for L, S in zip(Lq, Lk):
        if kind is None or not L or not S:
            masks.append(None)
        elif kind == "bool":
            m = rng.random((Hq, L, S)) < 0.7
            m[..., 0] = True
            masks.append(m)
        else:
            masks.append(rng.standard_normal((L, S) if kind == "bias" else (1, S)))
    return masks


def sequence_reference(q, k, v, mask, causal, scale, dout):
    """out, lse, dq, dk, dv (packed layouts) of one sequence alone, PyTorch
    autograd in float64; the causal limit counted in its own L and S. A
    sequence without keys: out 0, lse -inf, dq 0; without queries: dk, dv 0."""
    if not len(q) or not len(k):
        H = q.shape[1]
        return [np.zeros((len(q), H, v.shape[2])), np.full((len(q), H), -np.inf), np.zeros(q.shape),
                np.zeros(k.shape), np.zeros(v.shape)]
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    allowed = block_mask([0, len(q)], [0, len(k)], causal).expand(q.shape[1], -1, -1)
    bias = None
    if mask is not None and mask.dtype == np.bool_:
        allowed = allowed & torch.from_numpy(mask)
    elif mask is not None:
        bias = torch.from_numpy(mask)
    out, lse = reference(tq, tk, tv, allowed, scale, bias)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return [x.detach().numpy() for x in (out, lse, tq.grad, tk.grad, tv.grad)]


def edges(build, rng, rep):
    """EDGES in float64 (the exact kernels, to 1e-12) and float32 (the flash
    kernels, to 1e-5 of the largest value, against float64 on the same float32
    inputs)."""
    os.environ["ATTN_LIBRARY"] = os.path.abspath(os.path.join(build, "libattn.so"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import attn as binding  # the library this build made
    for name, Lq, Lk, Hq, Hk, E, Ev, causal, kind, scale in EDGES:
        cu_q, cu_k = np.concatenate([[0], np.cumsum(Lq)]), np.concatenate([[0], np.cumsum(Lk)])
        q, k = rng.standard_normal((cu_q[-1], Hq, E)), rng.standard_normal((cu_k[-1], Hk, E))
        v, dout = rng.standard_normal((cu_k[-1], Hk, Ev)), rng.standard_normal((cu_q[-1], Hq, Ev))
        masks = edge_masks(kind, Lq, Lk, Hq, rng)
        mode = (False, "top-left", "bottom-right")[causal]
        for dt, tol in ((np.float64, TOL), (np.float32, 1e-5)):
            xs = [a.astype(dt) for a in (q, k, v, dout)]
            ms = [m if m is None or m.dtype == np.bool_ else m.astype(dt) for m in masks]
            out, lse = binding.sdpa_varlen(*xs[:3], cu_q, cu_k, masks=ms, causal=mode, scale=scale, return_lse=True)
            grads = binding.sdpa_varlen_backward(xs[3], *xs[:3], out, lse, cu_q, cu_k, masks=ms, causal=mode,
                                                 scale=scale)
            errs = {}
            for b in range(len(Lq)):
                rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
                want = sequence_reference(xs[0][rq], xs[1][rk], xs[2][rk], ms[b], causal,
                                          1 / np.sqrt(E) if scale is None else scale, xs[3][rq])
                for n, got, w in zip(("out", "lse", "dq", "dk", "dv"), (out[rq], lse[rq], grads[0][rq],
                                                                        grads[1][rk], grads[2][rk]), want):
                    errs[n] = max(errs.get(n, 0.0), worst(got, w))
            bad = {n: e for n, e in errs.items() if not e <= tol}
            rep.report("varlen_edges_per_sequence_%s_%s" % (name, np.dtype(dt).name),
                       "errors %s (tolerance %g)" % (bad, tol) if bad else "")


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
        # f64 sequences run on the exact kernel; where none has both queries and
        # keys (random lengths may give that), nothing runs and the line says none.
        want_kernel = "kernel=" + ("exact" if np.any(Lq * Lk) else "none")
        kernel = want_kernel in r.stderr
        tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
        out, lse = reference(tq, tk, tv, block_mask(list(cu_q), list(cu_k), causal), 1 / np.sqrt(E))
        out.backward(torch.tensor(dout))
        errs = {"out": worst(np.load(path("out")), out.detach().numpy()),
                "lse": worst(np.load(path("lse")), lse.detach().numpy()),
                "dq": worst(np.load(path("dq")), tq.grad.numpy()),
                "dk": worst(np.load(path("dk")), tk.grad.numpy()),
                "dv": worst(np.load(path("dv")), tv.grad.numpy())}
        bad = {n: e for n, e in errs.items() if not e <= TOL}
        rep.report(label, "" if not bad and kernel else "errors %s (tolerance %g), %s named: %s" % (bad, TOL, want_kernel, kernel))
    edges(build, rng, rep)
    print("# %d passed, %d failed" % (rep.passed, rep.failed))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
