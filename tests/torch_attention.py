"""torch_attention.py -- what the PyTorch oracles share: attn's broadcasting and
GQA, and its causal limits, in PyTorch terms; their reporting and arguments."""
import sys

import numpy as np
import torch

from seeding import test_seed


def broadcast_heads(q, k, v):
    """q, k, v (torch tensors) padded to one rank on the left, and k and v repeated
    over each KV head's group of query heads (torch.repeat_interleave), as attn
    reads them. Autograd through this sums a broadcast input's gradient."""
    rank = max(q.dim(), k.dim(), v.dim())
    q, k, v = (a.reshape((1,) * (rank - a.dim()) + tuple(a.shape)) for a in (q, k, v))
    if rank >= 3 and q.shape[-3] != k.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    return q, k, v


def causal_allowed(L, S, causal):
    """(L, S) bool: which keys a query may see. causal 0: all; 1: top-left (key j <=
    query i); 2: bottom-right (j <= i + S - L)."""
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal == 1:
        allowed = torch.tril(allowed)
    elif causal == 2:
        allowed = torch.tril(allowed, diagonal=S - L)
    return allowed


class Reporter:
    """Counts and prints each check: "ok NAME" or "FAIL NAME: why"."""

    def __init__(self):
        self.passed = self.failed = 0

    def report(self, name, why):
        if why:
            self.failed += 1
            print("FAIL %s: %s" % (name, why))
        else:
            self.passed += 1
            print("ok %s" % name)


def oracle_args(default_seed):
    """BUILD_DIR [--seed N] from the command line: (build, a numpy Generator;
    test_seed says which seed)."""
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    return build, np.random.default_rng(test_seed(default_seed))
