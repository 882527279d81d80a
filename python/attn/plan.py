"""plan.py -- attn.Plan: a call of attn.sdpa or attn.sdpa_varlen planned
once (attn_sdpa_plan_init, attn_sdpa_varlen_plan_init) and run for every
layer (attn_sdpa_run) with fresh q, k and v of the same shapes, dtypes and
strides, allocating nothing:

    plan = attn.Plan(q, k, v, causal="bottom-right")       # or cu_seqlens_q=, cu_seqlens_k=
    for each layer: out = plan.run(q_l, k_l, v_l)

Each run gives bitwise what the unplanned call gives on the same arrays.
The plan keeps its memory, its workspace and a copy of the mask (or masks)
it was made with: what the caller writes into its mask afterwards changes
no run. A q, k or v laid out otherwise is a PlanError. Threads may share a
plan: its runs take turns (a run points the plan at its arrays and uses
its one workspace)."""
import ctypes
import threading

import numpy as np

from ._core import (ArgumentError, RankError, _Pinned, _bool, _count, _keys_values, _library_owned, _mask, _offsets,
                    _options, _out_shape, _query, _varlen_masks, raise_for, view)
from ._lib import LIB, Error


class Plan(_Pinned):
    """attn.sdpa(q, k, v, mask, causal, scale, return_lse, dropout_p, seed)
    planned, or with cu_seqlens_q and cu_seqlens_k, attn.sdpa_varlen(q, k, v,
    cu_seqlens_q, cu_seqlens_k, masks, causal, scale, return_lse, dropout_p,
    seed). q, k and v give the shapes, dtypes and strides every run must have
    (their values are not used). q may be float16, as the library's plans
    take it (k and v float32 or float16): each run widens it into the
    workspace and gives out in float16, rounded once, and lse in float32,
    bitwise the unplanned call (bfloat16 has no NumPy dtype). The plan
    keeps its options, dropout's seed among them (None: a fresh one, then in
    plan.seed): every run drops the weights the unplanned call with that
    seed drops. The score variants (softcap, alibi_slopes, window, sinks,
    rope, compute) as attn.sdpa takes them; the plan keeps copies of the slopes
    and sinks, as of its masks."""

    def __init__(self, q, k, v, mask=None, causal=False, scale=None, return_lse=False, cu_seqlens_q=None,
                 cu_seqlens_k=None, masks=None, dropout_p=0.0, seed=None, **variants):
        return_lse = _bool(return_lse, "return_lse")
        q, work = _query(q)
        k, v = _keys_values(k, v, q, work)
        self.varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        # Each kind of call takes its own masks: the other's was dropped
        # silently, and every run attended to keys the caller had masked.
        if self.varlen and mask is not None:
            raise ArgumentError("mask is given with cu_seqlens: a ragged batch takes masks, one per sequence", 19)
        if not self.varlen and masks is not None:
            raise ArgumentError("masks is given without cu_seqlens_q and cu_seqlens_k: a dense plan takes mask", 19)
        err, size, ws = Error(), ctypes.c_size_t(), ctypes.c_size_t()
        if self.varlen:
            if q.ndim != 3 or v.ndim != 3:
                raise RankError("q, k and v must be packed (total, heads, size)", 2)
            self.cq, self.ck = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
            if self.cq.size != self.ck.size:
                raise ArgumentError("cu_seqlens_q has %s but cu_seqlens_k has %d"
                                    % (_count(self.cq.size, "offset"), self.ck.size), 19)
            batch = self.cq.size - 1
            self.masks = _varlen_masks(masks, batch, work, copy=True)  # read at every run: kept
            self.options = _options(causal, scale, None, dropout_p, seed, variants, copy=True)
            shape = (q.shape[0], q.shape[1], v.shape[2])
        else:
            batch = 0
            self.mask = _mask(mask, work, copy=True)  # (array, view): read at every run
            self.options = _options(causal, scale, self.mask[1], dropout_p, seed, variants, copy=True)
            shape = _out_shape(q, k, v)
        self.out_shape, self.dtype, self.lse_dtype, self.return_lse = shape, q.dtype, work, return_lse
        self.seed = self.options.dropout_seed if dropout_p else None  # a seed drawn here, to repeat a run
        raise_for(LIB.attn_sdpa_plan_bytes(ctypes.byref(size), batch, err), err)
        self._memory = _library_owned(np.zeros(size.value, np.uint8))  # the plan's bytes
        out = np.empty(shape, q.dtype)
        lse = np.empty(shape[:-1], work) if return_lse else None
        self._views = [view(a) if a is not None else None for a in (out, lse, q, k, v)]
        ov, lv, qv, kv, vv = (ctypes.byref(t) if t is not None else None for t in self._views)
        plan = ctypes.c_void_p()
        if self.varlen:
            i64p = ctypes.POINTER(ctypes.c_int64)
            raise_for(LIB.attn_sdpa_varlen_plan_init(ctypes.byref(plan), self._memory.ctypes.data, size.value,
                                                     ctypes.byref(ws), ov, lv, qv, kv, vv,
                                                     self.cq.ctypes.data_as(i64p), self.ck.ctypes.data_as(i64p), batch,
                                                     self.masks[2], ctypes.byref(self.options), err), err)
        else:
            raise_for(LIB.attn_sdpa_plan_init(ctypes.byref(plan), self._memory.ctypes.data, size.value,
                                              ctypes.byref(ws), ov, lv, qv, kv, vv, ctypes.byref(self.options), err),
                      err)
        self._plan = plan
        self.workspace = np.zeros(max(ws.value, 1), np.uint8)
        # attn_sdpa_run writes the run's data pointers into the plan and uses
        # the one workspace: two threads running it at once got each other's
        # rows, silently.
        self._lock = threading.Lock()

    memory = property(lambda self: self._memory, doc="The plan's bytes (uint8), read-only, as pool.memory: the "
                      "library's plan, changed by the library only (a write from Python, or another array put in "
                      "its place, corrupted or lost it).")

    def run(self, q, k, v):
        """out for these q, k, v (laid out as the plan's), and lse when the
        plan was made with return_lse: bitwise the unplanned call's."""
        # a list q in the plan's dtype: made float64, it was refused by a
        # float32 plan (PlanError) that the same numbers in an array ran
        q, work = _query(q, like=self.dtype)
        k, v = _keys_values(k, v, q, work)
        out = np.empty(self.out_shape, self.dtype)
        lse = np.empty(self.out_shape[:-1], self.lse_dtype) if self.return_lse else None
        views = [view(a) if a is not None else None for a in (out, lse, q, k, v)]
        err = Error()
        with self._lock:
            status = LIB.attn_sdpa_run(self._plan, *[ctypes.byref(t) if t is not None else None for t in views],
                                       self.workspace.ctypes.data, self.workspace.size, err)
        raise_for(status, err)
        return (out, lse) if self.return_lse else out


__all__ = ["Plan"]
