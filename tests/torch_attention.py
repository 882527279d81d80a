"""torch_attention.py -- what the PyTorch oracles (oracle.py, oracle_backward.py)
share: attn's broadcasting and GQA, and its causal limits, in PyTorch terms."""
import torch


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
