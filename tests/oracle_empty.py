#!/usr/bin/python3
"""oracle_empty.py -- dimensions of 0 (attn.h, "Dimensions of 0") against
PyTorch float64: no queries (L = 0), no keys (S = 0), both, and a batch of 0,
with a batch of 1 broadcast beside it, a mask broadcast over L or S, and GQA.

PyTorch's attention, softmax(q kᵀ · scale + mask) v with autograd, defines a
result for each: an empty out, or (S = 0) an out of zeros, the softmax over
no key being empty and its product with no row of v 0; and gradients of the
inputs' shapes, all 0. attn.sdpa (its lse too: -inf, the log of an empty sum)
and attn.sdpa_backward (dmask too) must give exactly those, through NumPy's
empty arrays (whose strides may be 0), in float64 and float32. Then the
ragged batch (attn.sdpa_varlen and its backward) with sequences of no
queries or no keys and a batch of no sequence, each sequence bitwise the
dense call on it alone.

Usage: oracle_empty.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import os
import sys

import numpy as np
import torch

from torch_attention import Reporter, broadcast_heads, oracle_args

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
os.environ["ATTN_LIBRARY"] = os.path.abspath(os.path.join(BUILD, "libattn.so"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import attn  # noqa: E402

# (name, q shape, k shape, v shape, mask shape or None)
CASES = [
    ("no_queries", (2, 3, 0, 4), (2, 3, 5, 4), (2, 3, 5, 6), None),
    ("no_keys", (2, 3, 4, 4), (2, 3, 0, 4), (2, 3, 0, 6), None),
    ("no_queries_no_keys", (2, 3, 0, 4), (2, 3, 0, 4), (2, 3, 0, 6), None),
    ("batch_0", (0, 3, 4, 4), (0, 3, 5, 4), (0, 3, 5, 6), None),
    ("batch_0_kv_broadcast", (0, 3, 4, 4), (1, 3, 5, 4), (1, 3, 5, 6), None),
    ("no_queries_gqa", (2, 4, 0, 4), (2, 2, 5, 4), (2, 2, 5, 6), None),
    ("no_keys_gqa_rank_3", (4, 3, 4), (2, 0, 4), (2, 0, 6), None),
    ("no_queries_mask_over_l", (2, 3, 0, 4), (2, 3, 5, 4), (2, 3, 5, 6), (1, 5)),
    ("no_keys_mask_over_s", (2, 3, 4, 4), (2, 3, 0, 4), (2, 3, 0, 6), (4, 1)),
    ("no_keys_mask_of_no_column", (2, 3, 4, 4), (2, 3, 0, 4), (2, 3, 0, 6), (3, 4, 0)),
]


def reference(q, k, v, mask):
    """PyTorch's out, lse and the gradients of (out · dout).sum() for a dout of
    ones, through broadcasting and GQA as attn reads them."""
    q, k, v = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    m = None if mask is None else torch.tensor(mask, dtype=torch.float64, requires_grad=True)
    qb, kb, vb = broadcast_heads(q, k, v)
    s = qb @ kb.transpose(-2, -1) / q.shape[-1] ** 0.5
    if m is not None:
        s = s + m
    out = torch.softmax(s, -1) @ vb
    lse = torch.logsumexp(s, -1)
    out.backward(torch.ones_like(out))
    grads = [a.grad if a.grad is not None else torch.zeros_like(a) for a in (q, k, v)]
    dm = None if m is None else (m.grad if m.grad is not None else torch.zeros_like(m))
    return out.detach().numpy(), lse.detach().numpy(), [g.numpy() for g in grads], dm


def same(got, want):
    """'' when got has want's shape and its values exactly (all are 0 or -inf here)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return "shape %s, PyTorch %s" % (got.shape, want.shape)
    if not np.array_equal(got, want):
        return "values differ: %s vs PyTorch %s" % (got.ravel()[:4], want.ravel()[:4])
    return ""


def dense_cases(o, rng):
    for name, qs, ks, vs, ms in CASES:
        for dt in (np.float64, np.float32):
            tag = "%s_%s" % (name, np.dtype(dt).name)
            q, k, v = (rng.standard_normal(s).astype(dt) for s in (qs, ks, vs))
            mask = None if ms is None else rng.standard_normal(ms).astype(dt)
            ref_out, ref_lse, ref_grads, ref_dm = reference(q, k, v, mask)
            try:
                out, lse = attn.sdpa(q, k, v, mask=mask, return_lse=True)
            except attn.AttnError as e:
                o.report("forward_" + tag, "attn.sdpa failed: %s" % e)
                continue
            o.report("forward_" + tag, same(out, ref_out) or same(lse, ref_lse))
            try:
                got = attn.sdpa_backward(np.ones_like(out), q, k, v, out, lse, mask=mask, want_dmask=mask is not None)
            except attn.AttnError as e:
                o.report("backward_" + tag, "attn.sdpa_backward failed: %s" % e)
                continue
            why = "".join(same(g, r) for g, r in zip(got[:3], ref_grads))
            if mask is not None:
                why += same(got[3], ref_dm)
            o.report("backward_" + tag, why)


def varlen_cases(o, rng):
    """Sequences of no queries or no keys among others, and a batch of none:
    each sequence's rows bitwise attn.sdpa (and its backward) on it alone."""
    for name, lq, lk in (("empty_sequences", [2, 0, 3, 0], [3, 4, 0, 0]), ("no_sequence", [], [])):
        for dt in (np.float64, np.float32):
            tag = "varlen_%s_%s" % (name, np.dtype(dt).name)
            cu_q, cu_k = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64), np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
            q = rng.standard_normal((cu_q[-1], 2, 4)).astype(dt)
            k = rng.standard_normal((cu_k[-1], 2, 4)).astype(dt)
            v = rng.standard_normal((cu_k[-1], 2, 4)).astype(dt)
            dout = rng.standard_normal(q.shape).astype(dt)
            try:
                out, lse = attn.sdpa_varlen(q, k, v, cu_q, cu_k, return_lse=True)
                dq, dk, dv = attn.sdpa_varlen_backward(dout, q, k, v, out, lse, cu_q, cu_k)
            except attn.AttnError as e:
                o.report(tag, "failed: %s" % e)
                continue
            why = ""
            for b in range(len(lq)):
                rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
                qb, kb, vb = (a[r].transpose(1, 0, 2) for a, r in ((q, rq), (k, rk), (v, rk)))
                ob, lb = attn.sdpa(qb, kb, vb, return_lse=True)
                g = attn.sdpa_backward(dout[rq].transpose(1, 0, 2), qb, kb, vb, ob, lb)
                pairs = [(out[rq].transpose(1, 0, 2), ob), (lse[rq].T, lb), (dq[rq].transpose(1, 0, 2), g[0]),
                         (dk[rk].transpose(1, 0, 2), g[1]), (dv[rk].transpose(1, 0, 2), g[2])]
                for got, want in pairs:
                    if got.shape != want.shape or got.tobytes() != np.ascontiguousarray(want).tobytes():
                        why = why or "sequence %d differs from attn.sdpa alone" % b
            o.report(tag, why)


def main():
    _, rng = oracle_args(20261206)
    o = Reporter()
    dense_cases(o, rng)
    varlen_cases(o, rng)
    print("# empty oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
