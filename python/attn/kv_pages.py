"""kv_pages.py -- attn.KVPages, libattn's paged KV cache (attn.h, "Paged KV
cache") on NumPy arrays: a pool of pages of keys and values that many
sequences share, a forked sequence sharing its parent's pages until it
writes (copy on write).

    pool = attn.KVPages(heads=2, key_dim=64, num_pages=256, max_sequences=8)
    a = pool.create()
    pool.append(a, k_prompt, v_prompt)          # (n, heads, key_dim) each
    b = pool.fork(a)                            # b shares a's prompt
    pool.append([a, b], [k1, k2], [v1, v2])     # one call for both
    out = pool.attend([a, b], [q1, q2])         # [(L_i, Hq, value_dim), ...]
    pool.truncate(b, 10); pool.free(a)

The pool lives in one NumPy buffer owned by the object; the library never
allocates for it. Every call that fails raises the library's error (FullError,
ArgumentError, ...) and leaves the pool as it was."""
import ctypes

import numpy as np

from ._core import CAUSAL, DtypeError, OptionError, _float_array, _options, _varlen_masks, raise_for, view
from ._lib import BF16, F16, F32, LIB, Error, KVPagesDesc, default

# The quantized formats (attn.h, "Quantized storage"): q8 and q4 need key_dim
# and value_dim multiples of 32.
_STORAGE = {"float32": F32, np.dtype(np.float32): F32, "float16": F16, np.dtype(np.float16): F16, "bfloat16": BF16,
            "q8": 6, "q4": 7, "e4m3": 8, "e5m2": 9}


def _i64s(values):
    """A ctypes int64 array of values (kept alive by the caller)."""
    values = [int(x) for x in values]
    return (ctypes.c_int64 * max(len(values), 1))(*values)


def _view(a):
    """view(a), with C-order strides for an empty array (NumPy gives those
    strides of 0, which the library refuses in an output)."""
    t = view(a)
    if a.size == 0:
        stride = 1
        for d in reversed(range(a.ndim)):
            t.strides[d], stride = stride, stride * max(a.shape[d], 1)
    return t


def _packed(parts, name):
    """A list of (n_i, H, dim) arrays packed into one (total, H, dim) array,
    and the n + 1 offsets."""
    arrays = [_float_array(a, "%s[%d]" % (name, i), np.float32, kv=True) for i, a in enumerate(parts)]
    for i, a in enumerate(arrays):
        if a.dtype == np.float64:  # as the library refuses it: rounding twice (to float32, then to the pool's) differs
            raise DtypeError("%s[%d] is float64; a pool takes float32 or float16" % (name, i), 6)
    if not arrays:
        return np.zeros((0, 1, 1), np.float32), [0]
    cu = [0]
    for a in arrays:
        cu.append(cu[-1] + (a.shape[0] if a.ndim else 0))
    dt = np.float16 if all(a.dtype == np.float16 for a in arrays) else np.float32
    return np.concatenate([np.asarray(a, dt) for a in arrays]), cu


class KVPages:
    """A pool of num_pages pages of page_size positions (16 to 256) for
    `heads` key/value heads of key_dim and value_dim (default key_dim),
    stored as float32, float16, 'bfloat16', or quantized: 'q8' or 'q4'
    (8 or 4 bits with a scale per block of 32 values; key_dim and value_dim
    multiples of 32), 'e4m3' or 'e5m2' (fp8); at most max_sequences
    sequences at once, each of at most max_length positions (0: the whole
    pool)."""

    def __init__(self, heads, key_dim, num_pages, max_sequences, value_dim=None, page_size=16, dtype="float32",
                 max_length=0):
        if dtype not in _STORAGE:
            raise OptionError("dtype is %r: 'float32', 'float16', 'bfloat16', 'q8', 'q4', 'e4m3' or 'e5m2'" % (dtype,), 9)
        d = default(KVPagesDesc)
        d.heads, d.key_dim, d.value_dim = int(heads), int(key_dim), int(key_dim if value_dim is None else value_dim)
        d.dtype, d.page_size, d.num_pages = _STORAGE[dtype], int(page_size), int(num_pages)
        d.max_sequences, d.max_length = int(max_sequences), int(max_length)
        err, size = Error(), ctypes.c_size_t()
        raise_for(LIB.attn_kv_pages_bytes(ctypes.byref(size), ctypes.byref(d), ctypes.byref(err)), err)
        self.memory = np.zeros(size.value, np.uint8)  # the pool's bytes, for as long as the object lives
        pool = ctypes.c_void_p()
        raise_for(LIB.attn_kv_pages_init(ctypes.byref(pool), self.memory.ctypes.data, size.value, ctypes.byref(d),
                                         ctypes.byref(err)), err)
        self._pool, self._desc = pool, d
        self.heads, self.key_dim, self.value_dim, self.page_size = d.heads, d.key_dim, d.value_dim, d.page_size
        self.num_pages, self.max_sequences = d.num_pages, d.max_sequences

    def _call(self, fn, *args):
        err = Error()
        raise_for(fn(self._pool, *args, ctypes.byref(err)), err)

    def create(self):
        """A new, empty sequence; returns its id."""
        seq = ctypes.c_int64()
        self._call(LIB.attn_kv_pages_create, ctypes.byref(seq))
        return seq.value

    def fork(self, parent):
        """A new sequence holding everything `parent` holds, sharing its pages; returns its id."""
        seq = ctypes.c_int64()
        self._call(LIB.attn_kv_pages_fork, ctypes.byref(seq), int(parent))
        return seq.value

    def free(self, seq):
        self._call(LIB.attn_kv_pages_free, int(seq))

    def truncate(self, seq, length):
        """Forget seq's positions from `length` on (e.g. rejected draft tokens)."""
        self._call(LIB.attn_kv_pages_truncate, int(seq), int(length))

    def append(self, seqs, k, v, cu_seqlens=None):
        """Append new positions: for one sequence (an int), k (n, heads,
        key_dim) and v (n, heads, value_dim); for a list of sequences,
        lists of such arrays, one per sequence, or packed (total, heads,
        dim) arrays with cu_seqlens (len(seqs) + 1 offsets). float32 or
        float16, any strides. One call for all of them: all appended, or
        none (FullError)."""
        if np.isscalar(seqs):
            seqs, k, v = [seqs], [k], [v]
        seqs = list(seqs)
        if cu_seqlens is None:
            if len(k) != len(seqs) or len(v) != len(seqs):
                raise ValueError("append needs one k and one v per sequence (or packed arrays and cu_seqlens)")
            (k, cu), (v, _) = _packed(k, "k"), _packed(v, "v")
        else:
            k, v, cu = _float_array(k, "k", np.float32, kv=True), _float_array(v, "v", np.float32, kv=True), cu_seqlens
        ids, offsets, kv_, vv = _i64s(seqs), _i64s(cu), _view(k), _view(v)
        self._call(LIB.attn_kv_pages_append, ids, len(seqs), ctypes.byref(kv_), ctypes.byref(vv), offsets)

    def length(self, seq):
        n = ctypes.c_int64()
        self._call(LIB.attn_kv_pages_sequence, int(seq), ctypes.byref(n), None)
        return n.value

    def pages(self, seq):
        """seq's page table: the indices of its pages, in order (a copy)."""
        n, table = ctypes.c_int64(), ctypes.POINTER(ctypes.c_int32)()
        self._call(LIB.attn_kv_pages_sequence, int(seq), ctypes.byref(n), ctypes.byref(table))
        count = -(-n.value // self.page_size)
        return np.ctypeslib.as_array(table, (count,)).copy() if count else np.zeros(0, np.int32)

    @property
    def free_pages(self):
        return LIB.attn_kv_pages_free_pages(self._pool)

    def page_refs(self, page):
        """How many sequences hold page `page` (0: free)."""
        return LIB.attn_kv_pages_page_refs(self._pool, int(page))

    def gather(self, seq):
        """seq's keys and values, copied out of the pages: float32 arrays
        (heads, length, key_dim) and (heads, length, value_dim) (a quantized
        pool's rows widened)."""
        n = self.length(seq)
        k = np.empty((self.heads, n, self.key_dim), np.float32)
        v = np.empty((self.heads, n, self.value_dim), np.float32)
        kv_, vv = _view(k), _view(v)
        err = Error()
        raise_for(LIB.attn_kv_pages_gather(kv_, vv, self._pool, int(seq), err), err)
        return k, v

    def attend(self, seqs, q, cu_seqlens_q=None, masks=None, causal="bottom-right", scale=None, return_lse=False):
        """Attention of new queries of several sequences in one call: q a
        list of float32 (L_i, Hq, key_dim) arrays, one per sequence (or one
        array for one sequence, an int), or a packed (total, Hq, key_dim)
        array with cu_seqlens_q. Each sequence's queries are its last
        positions: causal 'bottom-right' (the default) or False. Returns the
        outputs (L_i, Hq, value_dim) in the same form as q (with
        return_lse, (out, lse), lse (L_i, Hq)). masks: None, or one per
        sequence (None: none), each a mask as sdpa takes it for (Hq, L_i,
        length_i), applied with the causal mode. Each is exactly what
        attention over that sequence alone gives."""
        one = np.isscalar(seqs)
        if one:
            seqs, q = [seqs], [q]
        seqs = list(seqs)
        packed = cu_seqlens_q is not None
        if packed:
            q, cu = _float_array(q, "q", np.float32), list(cu_seqlens_q)
        else:
            if len(q) != len(seqs):
                raise ValueError("attend needs one q per sequence (or a packed q and cu_seqlens_q)")
            parts = [_float_array(a, "q[%d]" % i, np.float32) for i, a in enumerate(q)]
            cu = [0]
            for a in parts:
                cu.append(cu[-1] + (a.shape[0] if a.ndim else 0))
            q = np.concatenate(parts) if parts else np.zeros((0, self.heads, self.key_dim), np.float32)
        if causal not in CAUSAL:
            raise OptionError("causal is %r: 'bottom-right' or False" % (causal,), 9)
        o = _options(causal, scale, None, 0.0, None)
        Hq = q.shape[1] if q.ndim == 3 else 1
        out = np.empty((q.shape[0] if q.ndim else 0, Hq, self.value_dim), q.dtype)
        lse = np.empty(out.shape[:2], q.dtype) if return_lse else None
        qv, ov = _view(q), _view(out)
        lv = _view(lse) if lse is not None else None
        ids, offsets, err = _i64s(seqs), _i64s(cu), Error()
        arrays, mviews, mptrs = _varlen_masks(masks, len(seqs), q.dtype)  # (kept alive for the call)
        raise_for(LIB.attn_kv_pages_attend(ov, lv, qv, offsets, ids, len(seqs), self._pool, mptrs, ctypes.byref(o),
                                           err), err)
        if packed:
            return (out, lse) if return_lse else out
        outs = [out[cu[i]:cu[i + 1]] for i in range(len(seqs))]
        lses = [lse[cu[i]:cu[i + 1]] for i in range(len(seqs))] if return_lse else None
        if one:
            return (outs[0], lses[0]) if return_lse else outs[0]
        return (outs, lses) if return_lse else outs


__all__ = ["KVPages"]
