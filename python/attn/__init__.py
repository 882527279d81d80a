"""attn -- libattn, scaled dot-product attention in C, from Python.

    import numpy as np, attn
    out = attn.sdpa(q, k, v, causal=True)            # NumPy in, NumPy out
    out, lse = attn.sdpa(q, k, v, return_lse=True)
    dq, dk, dv = attn.sdpa_backward(dout, q, k, v, out, lse)
    out = attn.sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)  # packed sequences
    plan = attn.Plan(q, k, v, causal=True)           # planned once,
    out = plan.run(q2, k2, v2)                       # run for every layer

    import attn.torch                                  # PyTorch, with autograd
    y = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)

    pool = attn.KVPages(heads=2, key_dim=64, num_pages=256, max_sequences=8)
    a = pool.create(); pool.append(a, k, v); b = pool.fork(a)   # a paged KV cache
    outs = pool.attend([a, b], [qa, qb])

    import attn.teach                                  # the toy model, explained
    attn.teach.explain("the cat sat on the mat")

The library is libattn.so, through ctypes (no compiled extension): found in
ATTN_LIBRARY, the build tree, or an installed prefix (see attn._lib).

Threads: every call lets go of the GIL while the library runs, so Python
threads compute at once, each result bitwise what it is alone; a refused
call's exception carries its own message. What is shared is the caller's:
an out= array written by two calls at once, or set_num_threads, which sets
the count for the whole process (num_threads=, which every call takes,
sets one call's). A Plan's runs take turns; a KVPages pool
is read by many threads but changed by one (see attn.kv_pages)."""
from ._core import (ERRORS, AttnError, ArgumentError, BroadcastError, CommError, DtypeError, FullError, HeadsError,
                    IOFailure, MaskError, NoMemoryError, NpyHeaderError, NpyTrailingError, NpyTruncatedError,
                    NpyUnsupportedError, NullError, OptionError, RankError, ScaleError, ShapeError,
                    SizeOverflowError, StrideError, TokenError, WorkspaceError, PlanError, alibi_slopes, dropout_mask,
                    get_num_threads, isa, library_path, merge, sdpa, sdpa_backward, sdpa_varlen, sdpa_varlen_backward, set_num_threads,
                    version)
from ._version import __version__
from .kv_pages import KVCache, KVPages, PagedPlan
from .plan import Plan

__all__ = ["sdpa", "sdpa_backward", "sdpa_varlen", "sdpa_varlen_backward", "merge", "alibi_slopes", "dropout_mask", "KVPages", "KVCache", "PagedPlan", "Plan", "set_num_threads", "get_num_threads", "isa", "version", "library_path",
           "AttnError", "ERRORS", "__version__"] + [c.__name__ for c in ERRORS.values()]
