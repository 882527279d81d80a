#!/usr/bin/python3
"""torch_backward.py -- PyTorch's attention backward on this machine, for the
comparison in docs/performance.md: the same shapes and FLOP count as the
backward rows of `attn bench` (H = 8, f32, 10 H L S d per backward, halved
for causal), PyTorch 1.13's autograd through matmul, softmax, matmul (1.13
has no fused CPU attention backward), on the same number of threads.

Usage: torch_backward.py [--threads N] [--quick]. Prints one line per shape.
"""
import math
import sys
import time

import torch


def backward_rate(H, L, d, causal, budget):
    q, k, v = (torch.randn(H, L, d, requires_grad=True) for _ in range(3))
    dout = torch.randn(H, L, d)
    mask = torch.ones(L, L, dtype=torch.bool).tril() if causal else None
    best = math.inf
    spent, runs = 0.0, 0
    while runs == 0 or (spent < budget and runs < 20):
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        out = torch.matmul(torch.softmax(s, dim=-1), v)
        t0 = time.perf_counter()
        out.backward(dout)
        dt = time.perf_counter() - t0
        q.grad = k.grad = v.grad = None
        best, spent, runs = min(best, dt), spent + dt, runs + 1
    flops = 10.0 * H * L * L * d * (0.5 if causal else 1.0)
    return best, flops / best / 1e9


def main():
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
    quick = "--quick" in sys.argv
    torch.set_num_threads(threads)
    L = 512 if quick else 4096
    print("PyTorch %s autograd, %d threads, f32" % (torch.__version__, threads))
    for d, causal in ((64, False), (128, False), (64, True), (128, True), (64, None)):
        n = (256 if quick else 1024) if causal is None else L
        seconds, gflops = backward_rate(8, n, d, bool(causal), 0.5 if quick else 3.0)
        print("backward H8 d%d L=S=%d%s  %9.4f s  %7.1f GF/s" % (d, n, " causal" if causal else "", seconds,
                                                                gflops))


if __name__ == "__main__":
    main()
