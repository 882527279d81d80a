"""python_bench.py -- the Python binding's cost, measured (run with nothing
else on the machine; not a test):

1. overhead per call: attn.sdpa on a small shape (L = S = 16, d = 64)
   against the same attn_sdpa call made directly through ctypes with its
   views and options built once (the library's own time);
2. attn.torch.scaled_dot_product_attention forward + backward at L = S =
   4096 (8 heads of 64, float32, causal and not) against the library's own
   attn_sdpa + attn_sdpa_backward on the same arrays, and against PyTorch
   1.13's CPU math path (matmul, softmax, matmul, autograd).

Usage: /usr/bin/python3 bench/python_bench.py [--quick] [BUILD_DIR]"""
import ctypes
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
if args:
    os.environ.setdefault("ATTN_LIBRARY", os.path.join(os.path.abspath(args[0]), "libattn.so"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import attn  # noqa: E402
import attn.torch as at  # noqa: E402
from attn import _core  # noqa: E402

QUICK = "--quick" in sys.argv
LIB = _core.LIB


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def per_call(fn, calls):
    """Median over 7 batches of `calls` calls, per call."""
    t = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t.append((time.perf_counter() - t0) / calls)
    return sorted(t)[3]


def overhead():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((16, 64)).astype(np.float32) for _ in range(3))
    out = np.empty((16, 64), np.float32)
    views = [_core.view(a) for a in (out, q, k, v)]
    opts, err = _core.default(_core.SdpaOptions), _core.Error()
    refs = [ctypes.byref(x) for x in views]

    def direct():
        LIB.attn_sdpa(refs[0], None, None, refs[1], refs[2], refs[3], ctypes.byref(opts), ctypes.byref(err))

    n = 200 if QUICK else 5000
    c, p = per_call(direct, n), per_call(lambda: attn.sdpa(q, k, v), n)
    print("overhead per call, L = S = 16, d = 64, float32:")
    print("  the library through ctypes, views built once: %6.1f us" % (c * 1e6))
    print("  attn.sdpa (views, options, output each call): %6.1f us   overhead %.1f us" % (p * 1e6, (p - c) * 1e6))


def torch_math(q, k, v, causal):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        L = q.shape[-2]
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def train_step(L, causal):
    H, d = 8, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(H, L, d, generator=g, requires_grad=True) for _ in range(3))
    dout = torch.randn(H, L, d, generator=g)
    flops = 4 * H * L * L * d * (0.5 if causal else 1.0) * 3.5  # forward 4, backward 10: 14 = 4 * 3.5

    def ours():
        y = at.scaled_dot_product_attention(q, k, v, is_causal=causal)
        y.backward(dout)

    def theirs():
        y = torch_math(q, k, v, causal)
        y.backward(dout)

    qn, kn, vn, dn = (t.detach().numpy() for t in (q, k, v, dout))
    on, ln = np.empty((H, L, d), np.float32), np.empty((H, L), np.float32)
    gs = [np.empty((H, L, d), np.float32) for _ in range(3)]
    vw = [_core.view(a) for a in (on, ln, qn, kn, vn, dn, *gs)]
    o, err = _core.default(_core.SdpaOptions), _core.Error()
    o.causal = 1 if causal else 0
    b = [ctypes.byref(x) for x in vw]

    def library():
        LIB.attn_sdpa(b[0], b[1], None, b[2], b[3], b[4], ctypes.byref(o), ctypes.byref(err))
        LIB.attn_sdpa_backward(b[6], b[7], b[8], None, b[5], b[2], b[3], b[4], b[0], b[1], ctypes.byref(o),
                               ctypes.byref(err))

    reps = 1 if QUICK else 3
    tl, to = best(library, reps), best(ours, reps)
    tt = best(theirs, 1 if QUICK else 2)
    print("  L = S = %5d %-6s  library %6.1f GFLOP/s   attn.torch %6.1f GFLOP/s (%3.0f%% of it)   "
          "PyTorch math %5.1f GFLOP/s (attn.torch %.1fx)" % (L, "causal" if causal else "full", flops / tl / 1e9,
                                                            flops / to / 1e9, 100 * tl / to, flops / tt / 1e9, tt / to))


if __name__ == "__main__":
    torch.set_num_threads(attn.get_num_threads())  # the same cores for both (PyTorch may start with fewer)
    print("libattn %s (%s), %s, %d threads" % (attn.version(), attn.library_path(), attn.isa(), attn.get_num_threads()))
    overhead()
    print("forward + backward, 8 heads of 64, float32 (torch %s, %d threads):" % (torch.__version__,
                                                                                 torch.get_num_threads()))
    for L in ((512,) if QUICK else (4096,)):
        for causal in (False, True):
            train_step(L, causal)
