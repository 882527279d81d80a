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
    out = pool.mha_step([a, b], [x1, x2], params)  # the attention layer's step for both
    plan = pool.plan([a, b], [1, 1], num_heads=8)  # planned once, run every layer
    out = plan.run(q)                           # (or plan.run(q, pool=other_layers_pool))
    plan16 = pool.plan([a, b], [1, 1], num_heads=8, q_dtype=np.float16)  # runs of float16 q

attn.KVCache is a contiguous cache (attn.h, "KV cache") of `batch` rows:
filled together through its append, attend, view, gather and truncate
(attn_kv_cache_*), or each row a sequence at its own length (cache.lengths)
for the same layer step (attn_mha_cached_batch).

The pool lives in one NumPy buffer owned by the object (pool.memory,
read-only from Python: the library's own bytes); the library never
allocates for it. A pool of 2 MiB or more on Linux starts on a
2 MiB boundary of an anonymous mapping advised for transparent huge pages
(_memory.kv_zeros), as attn.h advises at attn_kv_pages_init; a KVCache of
2 MiB or more (cache.memory) alike. Every call that fails raises the
library's error (FullError, ArgumentError, ...) and leaves the pool as it
was.

Threads: each call lets go of the GIL while the library runs. Separate
pools (caches) are independent; one pool may be read (attend, gather,
length, pages; a cache's view too) from several threads at once, but a call
that changes it (create, fork, append, truncate, free, mha_step) must not
run beside any other call on it: the pool is not locked (attn.h, "Paged KV
cache")."""
import ctypes
import threading

import numpy as np

from ._core import (CAUSAL, ArgumentError, DtypeError, NullError, OptionError, PlanError, RankError, ScaleError,
                    ShapeError, _bool, _library_owned, _Pinned,
                    _context, _count, _float_array, _index, _listed, _mask, _options, _query, _rope, _varlen_masks,
                    raise_for, view)
from ._lib import (BF16, F16, F32, F64, LIB, MHA_PARAMS, QUANT_FORMATS, QUANT_GROUPS, QUANT_ROWS, Error, KVCacheDesc,
                   KVPagedView, KVPagesDesc, MhaOptions, MhaParams, Tensor, default)
from ._memory import kv_zeros

# A pool's dtypes: the floats by NumPy's names, then the quantized formats
# the library lists as rows (attn_quant_format; attn.h, "Quantized storage"),
# by its names (q8, q4 and q4_1 need value_dim, and key_dim unless key_dtype
# stores the keys, multiples of 32): a format the library adds is taken
# here without a word of this file changing.
_FLOATS = {"float32": F32, np.dtype(np.float32): F32, "float16": F16, np.dtype(np.float16): F16, "bfloat16": BF16}
_QUANTIZED = {name: code for name, code, kind, _ in QUANT_FORMATS if kind == QUANT_ROWS}
_STORAGE = {**_FLOATS, **_QUANTIZED}


def _one_of(keys, none="None"):
    """The names among keys (a table's, in its order; None as `none`), as a
    message lists them: "'a', 'b' or 'c'"."""
    names = [none if k is None else repr(k) for k in keys if k is None or isinstance(k, str)]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def _storage(dtype):
    """dtype as _STORAGE keys it: a name as it is, anything else NumPy
    reads as a dtype (np.float16, the type, hashes unlike np.dtype(np.float16),
    and so missed the table) as that dtype; None stays None (np.dtype(None)
    is float64)."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    try:
        return np.dtype(dtype)
    except TypeError:  # not a dtype: returned as something no table holds (a list hashed as "unhashable type")
        return repr(dtype)


# Keys quantized per channel over groups of 32 positions (attn.h, "Keys
# quantized per channel"; KIVI's keys): key_dtype, with values in dtype; the
# formats the library lists as groups (attn_quant_format).
_KEYS = {None: 0, **{name: code for name, code, kind, _ in QUANT_FORMATS if kind == QUANT_GROUPS}}


def _keys(key_dtype):
    """key_dtype's code (_KEYS), or the OptionError naming what it takes."""
    if not (key_dtype is None or isinstance(key_dtype, str)) or key_dtype not in _KEYS:  # a list: "unhashable"
        raise OptionError("key_dtype is %r: %s" % (key_dtype, _one_of(_KEYS, "None (keys in dtype)")), 9)
    return _KEYS[key_dtype]


def _scales(d, k_scale, v_scale):
    """Set desc d's k_scale and v_scale (fp8's one scale per head; None:
    none) from a number for every head or a sequence of d.heads numbers;
    returns the float32 arrays they point to, which the caller keeps alive
    until init has copied them (the library checks each is finite and > 0,
    and that the dtype is fp8)."""
    scales = []
    for name, given in (("k_scale", k_scale), ("v_scale", v_scale)):
        if given is None:
            continue
        try:  # a string is no scale ("2" was read as 2.0, "two" said "could not convert string to float")
            if isinstance(given, (str, bytes)):
                raise TypeError
            a = np.asarray(given, np.float64)
        except (TypeError, ValueError):
            raise TypeError("%s must be a number or %d numbers, one per head, not %s"
                            % (name, d.heads, type(given).__name__)) from None
        if a.ndim == 0:
            a = np.full(max(d.heads, 0), float(a))
        if a.shape != (d.heads,):
            raise ValueError("%s has shape %s; it must be a number or (%d,), one per head" % (name, a.shape, d.heads))
        with np.errstate(over="ignore"):  # past float32's range: inf, refused below by the value given
            f = np.ascontiguousarray(a, np.float32)
        lost = (a > 0) & (a < np.inf) & ~((f > 0) & (f < np.inf))
        if lost.any():  # the library would only see the float32: 0 or inf, not what the caller gave
            i = int(np.argmax(lost))
            raise ScaleError("%s[%d] is %g, which is %g as the float32 the library keeps; every scale must be a finite "
                             "float32 > 0 (%g to %g)" % (name, i, a[i], f[i], np.finfo(np.float32).smallest_subnormal,
                                                         np.finfo(np.float32).max), 8)
        a = f
        scales.append(a)
        setattr(d, name, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    return scales


def _causal_known(causal):
    """Whether causal is one of CAUSAL's keys: a list, unhashable, is not
    (the test raised "unhashable type: 'list'", naming no argument)."""
    try:
        return causal in CAUSAL
    except TypeError:
        return False


def _i64s(values, name):
    """A ctypes int64 array of values (kept alive by the caller), each an
    integer in int64's range (_index), as a C array cannot say otherwise."""
    values = [_index(x, "%s[%d]" % (name, i)) for i, x in enumerate(values)]
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


def _cu(cu, n, name):
    """cu, the n + 1 offsets of n sequences' rows, as a list: the library
    reads n + 1 of them, so a shorter list was read past its end (its next
    int64s taken as offsets: an append of every row to the first sequence,
    or "decreases at 2") and a longer one's last offsets were dropped."""
    cu = _listed(cu, name, "offsets")  # an int said "not iterable", naming nothing
    if len(cu) != n + 1:
        raise ArgumentError("%s has %s for %s: it takes %d (0 first, the total last)"
                            % (name, _count(len(cu), "offset"), _count(n, "sequence"), n + 1), 19)
    return cu


def _check_parts(arrays, name):
    """Arrays to be packed one after another: each (n_i, H, dim), the same
    H and dim, said as the library says it of a packed array (NumPy's
    concatenate would say it of its own axes, or of a 0-d array)."""
    for i, a in enumerate(arrays):
        if a.ndim != 3:
            raise RankError("%s[%d] has rank %d; it must be 3: (positions, heads, dim)" % (name, i, a.ndim), 2)
        if a.shape[1:] != arrays[0].shape[1:]:
            raise ShapeError("%s[%d] has shape %s but %s[0] has %s: each is (positions, heads, dim), the same heads "
                             "and dim" % (name, i, a.shape, name, arrays[0].shape), 3)


def _packed(parts, name):
    """A list of (n_i, H, dim) arrays packed into one (total, H, dim) array,
    and the n + 1 offsets."""
    # float64 refused, as the library refuses it: rounding twice (to float32, then to the pool's) differs
    arrays = [_float_array(a, "%s[%d]" % (name, i), np.float32, kv=True, f32_only=True) for i, a in enumerate(parts)]
    if not arrays:
        return np.zeros((0, 1, 1), np.float32), [0]
    _check_parts(arrays, name)
    cu = [0]
    for a in arrays:
        cu.append(cu[-1] + a.shape[0])
    dt = np.float16 if all(a.dtype == np.float16 for a in arrays) else np.float32
    return np.concatenate([np.asarray(a, dt) for a in arrays]), cu


def _layer(params, embed_dim, rope, causal, scale, keep, dtype=np.float32, variants=None):
    """attn_mha_params and attn_mha_options for a layer step: params a dict
    of float32 arrays named as attn_mha_params names them (q_proj_weight,
    ..., out_proj_bias; or in_proj_weight and in_proj_bias) with num_heads
    and num_kv_heads (default num_heads); rope None or a dict of
    attn_rope_options fields (base, position_offset, rotary_dim, ...);
    causal 'bottom-right' or False. keep holds what the structs point to.
    float64 (dtype) turns every parameter into float64, for an f64 store.
    variants: the attention's score variants and compute mode as attn.sdpa
    takes them (the library refuses what a layer does not take: pieces);
    num_threads among them is the layer's context."""
    if not hasattr(params, "keys"):  # None or a list said "not iterable", or named its items as parameters
        raise TypeError("params must be a dict of num_heads and the layer's arrays, not %s" % type(params).__name__)
    # A name the struct has not was skipped: "out_proj_bais", or a state_dict's
    # "out_proj.weight", left that parameter out of the layer, silently.
    unknown = sorted(set(params) - set(MHA_PARAMS) - {"num_heads", "num_kv_heads"})
    if unknown or "num_heads" not in params:
        raise ArgumentError("params %s: it takes num_heads, num_kv_heads and %s" % (
            "names %s" % ", ".join(map(repr, unknown)) if unknown else "lacks num_heads", ", ".join(MHA_PARAMS)), 19)
    p = default(MhaParams)
    p.embed_dim, p.num_heads = _index(embed_dim, "embed_dim"), _index(params["num_heads"], "num_heads")
    p.num_kv_heads = _index(params.get("num_kv_heads", 0) or 0, "num_kv_heads")
    for name in MHA_PARAMS:
        if params.get(name) is not None:
            a = _float_array(params[name], name, np.float32)
            if dtype == np.float64:
                a = np.asarray(a, np.float64)
            t = view(a)
            keep += [a, t]
            setattr(p, name, ctypes.pointer(t))
    if not _causal_known(causal):
        raise OptionError("causal is %r: 'bottom-right' or False" % (causal,), 9)
    o = default(MhaOptions)
    o.causal = CAUSAL[causal]  # True or 'top-left' (was 0: no mask, silently) the library refuses for a cache
    if rope is not None:
        r = _rope(rope)
        keep.append(r)
        o.rope = ctypes.pointer(r)
    variants = dict(variants or {})
    threads = variants.pop("num_threads", None)  # the layer's context: one set on its attention is refused
    if threads is not None:
        c = _context(threads)
        keep.append(c)
        o.context = ctypes.pointer(c)
    if scale is not None or variants:
        so = _options(False, scale, None, 0.0, None, variants)
        keep.append(so)
        o.attention = ctypes.pointer(so)
    return p, o


def _packed_rows(x, cu_seqlens, n, name, dtype=None):
    """x as one packed float32 (total, E) array and its n + 1 offsets: a
    list of (L_i, E) arrays, or a packed array with cu_seqlens; float64
    throughout when dtype is float64 (an f64 store)."""
    if x is None:
        raise NullError("x is None", 1)
    if cu_seqlens is None:
        x = _listed(x, "x", "(L_i, E) arrays, one per sequence (or a packed x and cu_seqlens)")
    if dtype == np.float64:
        if cu_seqlens is None:
            x = [np.asarray(_float_array(a, "x[%d]" % i, np.float64), np.float64) for i, a in enumerate(x)]
        else:
            x = np.asarray(_float_array(x, "x", np.float64), np.float64)
    if cu_seqlens is None:
        if len(x) != n:
            raise ValueError("%s needs one x per sequence (or a packed x and cu_seqlens)" % name)
        parts = [_float_array(a, "x[%d]" % i, np.float32, f32_only=dtype != np.float64) for i, a in enumerate(x)]
        for i, a in enumerate(parts):  # a 1-D row was an IndexError past the binding's own shape[1]
            if a.ndim != 2:
                raise RankError("x[%d] has rank %d; it must be 2: (positions, embed_dim)" % (i, a.ndim), 2)
        cu = [0]
        for a in parts:
            cu.append(cu[-1] + a.shape[0])
        return np.ascontiguousarray(np.concatenate(parts)), cu, True
    x = _float_array(x, "x", np.float32, f32_only=dtype != np.float64)
    if x.ndim != 2:
        raise RankError("x has rank %d; packed it must be 2: (total, embed_dim)" % x.ndim, 2)
    return x, _cu(cu_seqlens, n, "cu_seqlens"), False


def _unpacked(out, cu, lists):
    return [out[cu[i]:cu[i + 1]] for i in range(len(cu) - 1)] if lists else out


class KVPages(_Pinned):
    """A pool of num_pages pages of page_size positions (16 to 256) for
    `heads` key/value heads of key_dim and value_dim (default key_dim),
    stored as float32, float16, 'bfloat16', or quantized: 'q8' or 'q4'
    (8 or 4 bits with a scale per block of 32 values), 'q4_1' (4 bits with a
    scale and a minimum per block of 32; these three need value_dim, and
    key_dim unless key_dtype stores the keys, multiples of 32), 'e4m3' or
    'e5m2' (fp8); at most max_sequences sequences at once, each of at most
    max_length positions (0: the whole pool, num_pages · page_size; more
    than that is a ShapeError). key_dtype 'q4c' or 'q2c' stores the keys
    apart, 4 or 2 bits with a scale and a minimum per channel over each group of 32 positions, each
    sequence's last positions not yet forming a group in float16 (KIVI; the
    values stay in dtype; page_size a multiple of 32; no k_scale, no
    hadamard). residual=R (with key_dtype; 0 or a multiple of 32 up to
    1024, KIVI's 128) keeps the R positions before the group being filled
    in float16 too: a group is quantized as it leaves that window
    (attn.h, "Keys quantized per channel").

    k_scale, v_scale (fp8 only; None: none): one scale per head, a number
    for every head or a sequence of `heads`, finite and > 0, as vLLM's
    k_scale / v_scale: a key x of head h is stored as e4m3(x / k_scale[h])
    (f32 division, then rounded to nearest even, saturating), and read as
    code * k_scale[h] (gather) or with the scale folded into the scores
    and the output (attend; attn.h, "fp8 with one scale per head").

    hadamard=True (a quantized dtype, key_dim a power of two up to 1024):
    keys are stored turned by the Walsh-Hadamard rotation (attn_hadamard),
    which spreads outlier channels before the format rounds them; attend
    turns the queries alike (q.k unchanged), gather turns keys back, as
    llama.cpp does for quantized K. Attention then takes float32 q.

    head_major=True lays the pages out (heads, num_pages, page_size, dim),
    each KV head's pages apart from the others' (attn_kv_pages_desc's
    head_major), where the default keeps a page's heads side by side;
    decode then reads one head's rows as one run. Results are the same."""

    def __init__(self, heads, key_dim, num_pages, max_sequences, value_dim=None, page_size=16, dtype="float32",
                 max_length=0, key_dtype=None, k_scale=None, v_scale=None, hadamard=False, residual=0,
                 head_major=False):
        if _storage(dtype) not in _STORAGE:
            raise OptionError("dtype is %r: %s" % (dtype, _one_of(_STORAGE)), 9)
        dtype = _storage(dtype)
        d = default(KVPagesDesc)
        d.heads, d.key_dim = _index(heads, "heads"), _index(key_dim, "key_dim")
        d.value_dim = _index(key_dim if value_dim is None else value_dim, "value_dim")
        d.dtype, d.page_size = _STORAGE[dtype], _index(page_size, "page_size")
        d.num_pages = _index(num_pages, "num_pages")
        d.max_sequences, d.max_length = _index(max_sequences, "max_sequences"), _index(max_length, "max_length")
        d.key_dtype, d.residual = _keys(key_dtype), _index(residual, "residual")
        d.hadamard, d.head_major = int(_bool(hadamard, "hadamard")), int(_bool(head_major, "head_major"))
        self._scales = _scales(d, k_scale, v_scale)  # (init copies them; kept as long as d points to them)
        err, size = Error(), ctypes.c_size_t()
        raise_for(LIB.attn_kv_pages_bytes(ctypes.byref(size), ctypes.byref(d), ctypes.byref(err)), err)
        self._memory = _library_owned(kv_zeros(size.value))  # (bytes,): the pool, for as long as the object lives
        pool = ctypes.c_void_p()
        raise_for(LIB.attn_kv_pages_init(ctypes.byref(pool), self._memory.ctypes.data, size.value, ctypes.byref(d),
                                         ctypes.byref(err)), err)
        self._pool, self._desc = pool, d
        self.heads, self.key_dim, self.value_dim, self.page_size = d.heads, d.key_dim, d.value_dim, d.page_size
        self.num_pages, self.max_sequences = d.num_pages, d.max_sequences

    memory = property(lambda self: self._memory, doc="The pool's bytes (uint8), read-only: the library's pages, "
                      "page tables and counts, changed through the pool's calls only (a write from Python corrupted "
                      "them).")

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
        self._call(LIB.attn_kv_pages_fork, ctypes.byref(seq), _index(parent, "parent"))
        return seq.value

    def free(self, seq):
        """Free sequence seq: its pages go back to the pool once no other
        sequence (a fork) holds them, and its id may be handed out again;
        a freed or unknown id is an ArgumentError."""
        self._call(LIB.attn_kv_pages_free, _index(seq, "seq"))

    def truncate(self, seq, length):
        """Forget seq's positions from `length` on (e.g. rejected draft tokens)."""
        self._call(LIB.attn_kv_pages_truncate, _index(seq, "seq"), _index(length, "length"))

    def append(self, seqs, k, v, cu_seqlens=None):
        """Append new positions: for one sequence (an int), k (n, heads,
        key_dim) and v (n, heads, value_dim); for a list of sequences,
        lists of such arrays, one per sequence, or packed (total, heads,
        dim) arrays with cu_seqlens (len(seqs) + 1 offsets). float32 or
        float16, any strides. One call for all of them: all appended, or
        none (FullError)."""
        if np.ndim(seqs) == 0:  # one sequence (an int, a NumPy integer or a 0-d array)
            seqs = [seqs]
            if cu_seqlens is None:  # packed k and v with their offsets stay as they are
                k, v = [k], [v]
        seqs = list(seqs)
        if cu_seqlens is None:
            if len(k) != len(seqs) or len(v) != len(seqs):
                raise ValueError("append needs one k and one v per sequence (or packed arrays and cu_seqlens)")
            (k, cu), (v, _) = _packed(k, "k"), _packed(v, "v")
        else:
            k, v = (_float_array(a, n, np.float32, kv=True, f32_only=True) for a, n in ((k, "k"), (v, "v")))
            cu = _cu(cu_seqlens, len(seqs), "cu_seqlens")
        ids, offsets, kv_, vv = _i64s(seqs, "seqs"), _i64s(cu, "cu_seqlens"), _view(k), _view(v)
        self._call(LIB.attn_kv_pages_append, ids, len(seqs), ctypes.byref(kv_), ctypes.byref(vv), offsets)

    def length(self, seq):
        """The positions sequence seq holds (ArgumentError for a freed or unknown id)."""
        n = ctypes.c_int64()
        self._call(LIB.attn_kv_pages_sequence, _index(seq, "seq"), ctypes.byref(n), None)
        return n.value

    def pages(self, seq):
        """seq's page table: the indices of its pages, in order (a copy)."""
        n, table = ctypes.c_int64(), ctypes.POINTER(ctypes.c_int32)()
        self._call(LIB.attn_kv_pages_sequence, _index(seq, "seq"), ctypes.byref(n), ctypes.byref(table))
        count = -(-n.value // self.page_size)
        return np.ctypeslib.as_array(table, (count,)).copy() if count else np.zeros(0, np.int32)

    @property
    def free_pages(self):
        """The pages no sequence holds."""
        return LIB.attn_kv_pages_free_pages(self._pool)

    def page_refs(self, page):
        """How many sequences hold page `page` (0: free); a page outside
        0 .. num_pages - 1 is an ArgumentError (the library's -1 was
        returned as a count)."""
        refs = LIB.attn_kv_pages_page_refs(self._pool, _index(page, "page"))
        if refs < 0:
            raise ArgumentError("page %d is not a page of this pool (pages 0 to %d)" % (page, self.num_pages - 1), 19)
        return refs

    def gather(self, seq):
        """seq's keys and values, copied out of the pages: float32 arrays
        (heads, length, key_dim) and (heads, length, value_dim) (a quantized
        pool's rows widened)."""
        n = self.length(seq)
        k = np.empty((self.heads, n, self.key_dim), np.float32)
        v = np.empty((self.heads, n, self.value_dim), np.float32)
        kv_, vv = _view(k), _view(v)
        err = Error()
        raise_for(LIB.attn_kv_pages_gather(kv_, vv, self._pool, _index(seq, "seq"), err), err)
        return k, v

    def attend(self, seqs, q, cu_seqlens_q=None, masks=None, causal="bottom-right", scale=None, return_lse=False,
               dropout_p=0.0, seed=None, **variants):
        """Attention of new queries of several sequences in one call: q a
        list of float32 (L_i, Hq, key_dim) arrays, one per sequence (or one
        array for one sequence, an int), or a packed (total, Hq, key_dim)
        array with cu_seqlens_q. q may be float16 instead (every part), as
        attn_kv_pages_attend takes it: computed on its float32 widening, out
        float16 (rounded once), lse float32 (bfloat16 has no NumPy dtype).
        Each sequence's queries are its last positions: causal
        'bottom-right' (the default) or False. Returns the outputs (L_i, Hq,
        value_dim) in the same form as q (with return_lse, (out, lse), lse
        (L_i, Hq)). masks: None, or one per sequence (None: none), each a
        mask as sdpa takes it for (Hq, L_i, length_i), applied with the
        causal mode; for one sequence (an int), its mask alone too. dropout_p with seed (None: a fresh one), as
        attn.sdpa_varlen takes them: sequence i's dropout seed is seed + i,
        its mask's rows this call's queries (0 .. L_i-1, as attn.h counts
        them per call: a fresh mask each decode step needs a seed per step).
        The score variants (softcap, alibi_slopes, window, sinks, rope, compute) as
        attn.sdpa takes them. Each is exactly what attention over that
        sequence alone gives (a KVCache's attend of the same rows). Against
        attn.sdpa on gather()'s rows it is bitwise for float32, float16,
        bfloat16, q4_1 and fp8 storage; q8 and q4 rows, and keys per
        channel (key_dtype), in a decode (at most 8 queries) are scored by
        integer dot products where the CPU has them, within attn.h's bound
        of it ("How attention reads them"; ATTN_QDOT=widen: bitwise); a
        hadamard pool's gathered keys are turned back, rounded in float32."""
        one = np.ndim(seqs) == 0  # one sequence (an int, a NumPy integer or a 0-d array)
        if one:
            seqs = [seqs]
            if cu_seqlens_q is None:  # a packed q with its offsets stays as it is
                q = [q]
            if masks is not None and not isinstance(masks, (list, tuple)):
                masks = [masks]  # that sequence's mask (its rows were counted as masks: "2 entries for 1")
        seqs = list(seqs)
        return_lse = _bool(return_lse, "return_lse")
        packed = cu_seqlens_q is not None
        if packed:
            q, cu = _query(q, f32_only=True)[0], _cu(cu_seqlens_q, len(seqs), "cu_seqlens_q")
        else:
            if len(q) != len(seqs):
                raise ValueError("attend needs one q per sequence (or a packed q and cu_seqlens_q)")
            parts = [_query(a, "q[%d]" % i, f32_only=True)[0] for i, a in enumerate(q)]
            _check_parts(parts, "q")
            # one packed q of one dtype: concatenate made a mix float32, and
            # so the float16 parts' out float32
            for i, a in enumerate(parts):
                if a.dtype != parts[0].dtype:
                    raise DtypeError("q[%d] is %s but q[0] is %s: one dtype for all" % (i, a.dtype, parts[0].dtype), 6)
            cu = [0]
            for a in parts:
                cu.append(cu[-1] + a.shape[0])
            q = np.concatenate(parts) if parts else np.zeros((0, self.heads, self.key_dim), np.float32)
        if not _causal_known(causal):
            raise OptionError("causal is %r: 'bottom-right' or False" % (causal,), 9)
        o = _options(causal, scale, None, dropout_p, seed, variants)
        Hq = q.shape[1] if q.ndim == 3 else 1
        out = np.empty((q.shape[0] if q.ndim else 0, Hq, self.value_dim), q.dtype)
        lse = np.empty(out.shape[:2], np.float32) if return_lse else None  # float32 beside a float16 q too
        qv, ov = _view(q), _view(out)
        lv = _view(lse) if lse is not None else None
        ids, offsets, err = _i64s(seqs, "seqs"), _i64s(cu, "cu_seqlens_q"), Error()
        arrays, mviews, mptrs = _varlen_masks(masks, len(seqs), np.float32)  # (kept alive for the call)
        raise_for(LIB.attn_kv_pages_attend(ov, lv, qv, offsets, ids, len(seqs), self._pool, mptrs, ctypes.byref(o),
                                           err), err)
        if packed:
            return (out, lse) if return_lse else out
        outs = [out[cu[i]:cu[i + 1]] for i in range(len(seqs))]
        lses = [lse[cu[i]:cu[i + 1]] for i in range(len(seqs))] if return_lse else None
        if one:
            return (outs[0], lses[0]) if return_lse else outs[0]
        return (outs, lses) if return_lse else outs

    def mha_step(self, seqs, x, params, cu_seqlens=None, masks=None, causal="bottom-right", rope=None, scale=None,
                 **variants):
        """The attention layer's step (attn_mha_paged) for several sequences
        at once: x a list of float32 (L_i, E) arrays, one per sequence (or
        a packed (total, E) array with cu_seqlens); each sequence's rows are
        projected, turned by RoPE at its own positions (rope: None or a
        dict of attn_rope_options fields), appended to the pool, attended
        with its masks[i] (None, or one per sequence) and projected out.
        params: see the module's _layer (num_heads, num_kv_heads and the
        projections by attn_mha_params' names). The attention's score
        variants (softcap, alibi_slopes, window; sinks are params'),
        compute and num_threads by keyword, as attn.sdpa takes them.
        Returns the outputs in x's form. Each sequence's rows are bitwise
        what the step gives it alone."""
        seqs = _listed(seqs, "seqs", "sequence ids")
        if cu_seqlens is None and not seqs and x is not None and not len(x):
            return []  # a step with no sequence changes nothing (NumPy cannot concatenate no rows of unknown width)
        xa, cu, lists = _packed_rows(x, cu_seqlens, len(seqs), "mha_step")
        keep = []
        p, o = _layer(params, xa.shape[1], rope, causal, scale, keep, variants=variants)
        out = np.empty(xa.shape, np.float32)
        ov, xv, ids, offsets, err = _view(out), _view(xa), _i64s(seqs, "seqs"), _i64s(cu, "cu_seqlens"), Error()
        arrays, mviews, mptrs = _varlen_masks(masks, len(seqs), np.float32)
        raise_for(LIB.attn_mha_paged(ov, xv, offsets, ids, len(seqs), self._pool, mptrs, ctypes.byref(p),
                                     ctypes.byref(o), err), err)
        return _unpacked(out, cu, lists)

    def _view(self):
        w = default(KVPagedView)
        err = Error()
        raise_for(LIB.attn_kv_pages_view(ctypes.byref(w), self._pool, err), err)
        return w

    def plan(self, seqs, q_lengths, num_heads, masks=None, causal="bottom-right", scale=None, return_lse=False,
             dropout_p=0.0, seed=None, q_dtype=np.float32, **variants):
        """Plan attention of new queries of several sequences once, to run
        it for every layer of a step (attn_kv_paged_plan_init): q_lengths[i]
        queries of sequence seqs[i], num_heads query heads, masks as
        attend takes them (copied now: later writes into them change no
        run). The sequences' lengths and page tables are taken now: once
        the pool changes (an append, truncate, fork or free), a run raises
        PlanError, and the step plans again. Returns a
        PagedPlan: plan.run(q) is attend(seqs, q, cu_seqlens_q) with q
        packed (total, num_heads, key_dim), bitwise, allocating nothing;
        plan.run(q, pool=other) reads another pool's pages, residual rows
        and scales under these tables (a layer's pool kept in step with
        this one). A pool of keys per channel (key_dtype) takes each
        sequence once. dropout_p and seed as attend takes them (seed None:
        a fresh one, then in plan.seed): every run drops the weights
        attend with that seed drops. q_dtype: the dtype of every run's q,
        float32 or float16 (planned, as attn.Plan plans q's): a float16
        plan's runs give out in float16 and lse in float32, bitwise
        attend on that q (bfloat16 has no NumPy dtype). The score variants
        (softcap, alibi_slopes, window, sinks, rope, compute) as attend takes
        them, the slopes and sinks copied."""
        seqs = [_index(x, "seqs[%d]" % i) for i, x in enumerate(_listed(seqs, "seqs", "sequence ids"))]
        # a negative count was NumPy's "negative dimensions are not allowed", naming nothing
        q_lengths = [_index(n, "q_lengths[%d]" % i, 0) for i, n in enumerate(_listed(q_lengths, "q_lengths", "counts"))]
        return PagedPlan(self, seqs, q_lengths, _index(num_heads, "num_heads"), masks, causal, scale, return_lse,
                         dropout_p, seed, q_dtype, variants)


class PagedPlan(_Pinned):
    """A paged batch's plan (KVPages.plan): its memory, its view of the
    sequences (their lengths and page tables, copied), its workspace.
    Threads may share it: its runs take turns."""

    def __init__(self, pool, seqs, q_lengths, num_heads, masks, causal, scale, return_lse, dropout_p=0.0, seed=None,
                 q_dtype=np.float32, variants=None):
        if len(q_lengths) != len(seqs):
            raise ValueError("plan needs one query count per sequence")
        if not _causal_known(causal):
            raise OptionError("causal is %r: 'bottom-right' or False" % (causal,), 9)
        try:
            q_dtype = np.dtype(q_dtype)
        except TypeError:
            raise DtypeError("q_dtype is %r: float32 or float16 (bfloat16 has no NumPy dtype)" % (q_dtype,),
                             6) from None
        self.pool, self.n = pool, len(seqs)
        pw = pool._view()
        w = default(KVPagedView)
        # generation: the pool's counter, which each run compares with its
        # value now (attn_kv_paged_run_view), so that a plan the pool's
        # changes have made stale is refused, not run on tables copied here
        for f in ("dtype", "heads", "key_dim", "value_dim", "page_size", "num_pages", "k_pages", "v_pages", "key_dtype",
                  "k_residual", "k_scale", "v_scale", "hadamard", "residual", "head_major", "generation"):
            setattr(w, f, getattr(pw, f))
        # Keys per channel keep each sequence's last positions in residual
        # rows indexed by its id: the view is then the pool's sequences by
        # id (0 .. max(seqs)), the step's queries reordered into id order
        # at each run (others get none); else the step's sequences in order.
        self.by_id = bool(pw.key_dtype)
        if self.by_id:
            if len(set(seqs)) != len(seqs):
                raise ValueError("a plan of keys per channel takes each sequence once")
            for s in seqs:  # an unknown id raises here, before range() below spans up to it
                pool.length(s)
            ids = max(seqs) + 1 if seqs else 0
            lengths_by_id = [pool.length(s) if s in seqs else 0 for s in range(ids)]
            seqs_by_id, order = list(range(ids)), sorted(range(self.n), key=lambda i: seqs[i])
            counts = dict(zip(seqs, q_lengths))
            starts = np.cumsum([0] + [int(n) for n in q_lengths])
            # q rows in id order: row r of the planned q is row self.rows[r] of the caller's
            self.rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in order] +
                                       [np.zeros(0, np.int64)]).astype(np.int64)
            self.back = np.argsort(self.rows, kind="stable")
            if masks is not None:
                # counted as _varlen_masks counts them for the other pools:
                # zip() dropped masks past the sequences, and left the
                # sequences past the masks unmasked, silently
                masks = _listed(masks, "masks", "per-sequence masks (None for none)")
                if len(masks) != len(seqs):
                    raise ArgumentError("masks has %s for %s" % (_count(len(masks), "entry", "entries"),
                                                                 _count(len(seqs), "sequence")), 19)
                by = dict(zip(seqs, masks))
                masks = [by.get(s) for s in seqs_by_id]
            seqs, q_lengths = seqs_by_id, [counts.get(s, 0) for s in seqs_by_id]
            self.lengths = np.array(lengths_by_id or [0], np.int64)
            self.ids = np.array([s if s in counts else -1 for s in seqs_by_id], np.int64)  # -1: not in the step
            tables = [pool.pages(s) if l else np.zeros(0, np.int32) for s, l in zip(seqs, lengths_by_id)]
        else:
            self.lengths = np.array([pool.length(s) for s in seqs] or [0], np.int64)
            self.ids = np.array(seqs, np.int64)
            tables = [pool.pages(s) for s in seqs]
        self.n = len(seqs)
        self.offsets = np.zeros(self.n + 1, np.int64)
        self.offsets[1:] = np.cumsum([len(t) for t in tables]) if tables else []
        self.table = np.concatenate(tables + [np.zeros(1, np.int32)]).astype(np.int32)
        # where each entry of self.table lies in a pool's own tables (row: the
        # sequence's id, column: its index), to read another layer's at a run
        self._table_rows = np.repeat(np.maximum(self.ids, 0), [len(t) for t in tables]).astype(np.int64)
        self._table_cols = np.concatenate([np.arange(len(t)) for t in tables] + [np.zeros(0, np.int64)])
        w.num_sequences = self.n
        w.lengths = self.lengths.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        w.page_table = self.table.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        w.table_offsets = self.offsets.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        self.view = w
        self.cu = [0]
        for n in q_lengths:
            self.cu.append(self.cu[-1] + n)
        self.q_shape = (self.cu[-1], num_heads, pool.key_dim)
        self.out_shape = (self.cu[-1], num_heads, pool.value_dim)
        self.return_lse = _bool(return_lse, "return_lse")
        self.options = _options(causal, scale, None, dropout_p, seed, variants, copy=True)
        self.seed = self.options.dropout_seed if dropout_p else None  # a seed drawn here, to repeat a run
        self.masks = _varlen_masks(masks, self.n, np.float32, copy=True)  # (kept alive: the runs read them)
        err, size, ws = Error(), ctypes.c_size_t(), ctypes.c_size_t()
        raise_for(LIB.attn_sdpa_plan_bytes(ctypes.byref(size), self.n, err), err)
        self._memory = _library_owned(np.zeros(size.value, np.uint8))  # the plan's bytes
        # q_dtype checked as attend checks a q (on no rows), and the planned q:
        # the plan reads its layout only, never its data, so np.empty (a batch's
        # q of zeros was written just to make the plan)
        self.dtype = _query(np.empty((0,) + self.q_shape[1:], q_dtype), "q_dtype", f32_only=True)[0].dtype
        q = np.empty(self.q_shape, self.dtype)  # every run's q and out of this dtype; lse float32
        out = np.empty(self.out_shape, q.dtype)
        lse = np.empty(self.out_shape[:2], np.float32) if return_lse else None
        self._offsets = _i64s(self.cu, "q_lengths' offsets")
        plan = ctypes.c_void_p()
        raise_for(LIB.attn_kv_paged_plan_init(ctypes.byref(plan), self._memory.ctypes.data, size.value,
                                              ctypes.byref(ws), _view(out), _view(lse) if lse is not None else None,
                                              _view(q), self._offsets, ctypes.byref(w), self.masks[2],
                                              ctypes.byref(self.options), err), err)
        self._plan = plan
        self.workspace = np.zeros(max(ws.value, 1), np.uint8)
        self._lock = threading.Lock()  # runs take turns: each points the plan at its arrays, in one workspace

    memory = property(lambda self: self._memory, doc="The plan's bytes (uint8), read-only, as pool.memory: the "
                      "library's plan, changed by the library only (a write from Python, or another array put in "
                      "its place, corrupted or lost it).")

    def run(self, q, pool=None):
        """Attention of q (total, num_heads, key_dim), of the plan's
        q_dtype (float32 or float16), over the planned sequences' pages in
        `pool` (default: the pool planned over; another layer's pool, of
        the same sizes and formats, is read through its own page tables,
        each planned sequence of the planned length there, else
        PlanError): out (total, num_heads, value_dim) in q's dtype, and
        lse (total, num_heads), float32, when planned with it."""
        pool = self.pool if pool is None else pool
        if not isinstance(pool, KVPages):  # an AttributeError on its first field
            raise TypeError("pool must be a KVPages, not %s" % type(pool).__name__)
        for f in ("heads", "key_dim", "value_dim", "page_size", "num_pages"):
            if getattr(pool, f) != getattr(self.pool, f):
                raise ValueError("the pool's %s is %s; the plan's is %s" % (f, getattr(pool, f), getattr(self.pool, f)))
        if pool._desc.dtype != self.pool._desc.dtype:
            raise DtypeError("the pool stores another dtype than the plan's", 6)
        # The run takes the pages from `pool` but their format from the plan's
        # view: keys of another key_dtype were read as the plan's (f32 rows
        # over q4c groups: NaN, and reads past the key pages), keys turned
        # by another Hadamard setting gave other scores, both silently.
        for f, what in (("key_dtype", "keys' format (key_dtype)"), ("hadamard", "Hadamard rotation of the keys"),
                        ("head_major", "page layout (head_major)")):
            if getattr(pool._desc, f) != getattr(self.pool._desc, f):
                raise DtypeError("the pool's %s differs from the plan's pool's: %s against %s"
                                 % (what, getattr(pool._desc, f), getattr(self.pool._desc, f)), 6)
        # Keys per channel: the view's row i is sequence id i, its residual
        # rows read at row i of the pool's residual region, which holds
        # max_sequences rows: a smaller pool was read past it (NaN, or past
        # the pool's memory for a large id).
        top = int(self.ids.max()) if self.ids.size else -1
        if pool.max_sequences <= top:
            raise ValueError("the pool holds %s; the plan names sequence %d"
                             % (_count(pool.max_sequences, "sequence"), top))
        q = _query(q, f32_only=True)[0]
        if q.dtype != self.dtype:  # said here, naming how to plan for it
            raise PlanError("q is %s but the plan's q is %s: plan with q_dtype=np.%s" % (q.dtype, self.dtype, q.dtype),
                            23)
        out = np.empty(self.out_shape, q.dtype)
        lse = np.empty(self.out_shape[:2], np.float32) if self.return_lse else None
        if self.by_id:
            if q.shape != self.q_shape:
                raise ValueError("q has shape %s; the plan's is %s" % (q.shape, self.q_shape))
            q = q[self.rows]
        # The plan's q is one the binding made, C-contiguous: a view of the
        # caller's (a slice of a larger batch, a transpose) was a PlanError
        # over strides it never chose, where attend takes any. A copy then.
        q = np.ascontiguousarray(q)
        # This layer's view: its pool's pages, residual rows and scales,
        # under the plan's tables (the pools are kept in step)
        pw, err, w = pool._view(), Error(), KVPagedView.from_buffer_copy(self.view)
        for f in ("k_pages", "v_pages", "k_residual", "k_scale", "v_scale", "residual"):
            setattr(w, f, getattr(pw, f))  # a pool of another window: refused (attn_kv_paged_run_view)
        if pool is not self.pool:
            # Another layer's pool: its own lengths and page tables of the
            # planned sequences, which the library compares with the plan's
            # (the lengths) and reads (the tables; attn_kv_paged_run_view).
            # The plan's were passed, so a layer not yet appended to (or one
            # ahead) ran silently over rows it never wrote, and one whose
            # pages were handed out in another order read other sequences'.
            held = np.ctypeslib.as_array(pw.lengths, (pw.num_sequences,))
            lengths = np.where(self.ids >= 0, held[np.maximum(self.ids, 0)], 0) if self.ids.size else self.lengths
            lengths = np.ascontiguousarray(lengths, np.int64)
            if self.ids.size and not np.array_equal(lengths, self.lengths):
                i = int(np.argmax(lengths != self.lengths))
                raise PlanError("sequence %d holds %d positions in this pool but held %d in the planned pool: a "
                                "layer's pool runs the plan once it is in step with the planned one (the same "
                                "appends, truncates, forks and frees)" % (self.ids[i], lengths[i], self.lengths[i]),
                                23)
            w.lengths = lengths.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            tables = np.ctypeslib.as_array(pw.page_table, (pw.num_sequences, pw.table_stride))
            table = np.concatenate([tables[self._table_rows, self._table_cols], np.zeros(1, np.int32)])
            w.page_table = table.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        with self._lock:
            status = LIB.attn_kv_paged_run_view(self._plan, _view(out), _view(lse) if lse is not None else None,
                                                _view(q), ctypes.byref(w), self.workspace.ctypes.data,
                                                self.workspace.size, err)
        raise_for(status, err)
        if self.by_id:
            out = out[self.back]
            lse = lse[self.back] if lse is not None else None
        return (out, lse) if self.return_lse else out


class KVCache(_Pinned):
    """A contiguous KV cache (attn_kv_cache) of `batch` rows of `capacity`
    positions for `heads` key/value heads, each row a sequence at its own
    length (self.lengths, int64, kept here as FlashAttention-2's
    cache_seqlens), stored as float32, float16, 'bfloat16', a quantized
    format ('q8', 'q4', 'q4_1', 'e4m3', 'e5m2'), or float64: then mha_step takes
    and gives float64 (the parameters too), on the exact kernel. key_dtype
    'q4c' or 'q2c': keys per channel over groups of 32 positions, as
    KVPages takes them (capacity a multiple of 32), with a residual window
    of `residual` positions in float16 as KVPages keeps it. k_scale,
    v_scale (fp8) and hadamard (quantized) as KVPages takes them.

    The C cache's own calls (attn_kv_cache_append, _attend, _view,
    _gather, _truncate) fill all `batch` rows together, to one length
    (self.length), as a decoder's batch of one step:

        cache = attn.KVCache(batch=1, heads=2, capacity=4096, key_dim=64)
        cache.append(k, v)                  # (batch, heads, n, key_dim) each
        out = cache.attend(q)               # (batch, Hq, L, value_dim)
        k, v = cache.view()                 # the cached positions
        cache.truncate(10)

    Drive a cache through those or through mha_step, not both: mha_step's
    rows keep their own lengths (self.lengths), which the C calls neither
    read nor change (attn.h, attn_mha_cached_batch)."""

    _DTYPES = {**_FLOATS, "float64": F64, np.dtype(np.float64): F64, **_QUANTIZED}

    def __init__(self, batch, heads, capacity, key_dim, value_dim=None, dtype="float32", key_dtype=None, residual=0,
                 k_scale=None, v_scale=None, hadamard=False):
        if _storage(dtype) not in self._DTYPES:
            raise OptionError("dtype is %r: %s" % (dtype, _one_of(self._DTYPES)), 9)
        dtype = _storage(dtype)
        d = default(KVCacheDesc)
        d.batch, d.heads, d.capacity = _index(batch, "batch"), _index(heads, "heads"), _index(capacity, "capacity")
        d.key_dim = _index(key_dim, "key_dim")
        d.value_dim = _index(key_dim if value_dim is None else value_dim, "value_dim")
        d.dtype, d.key_dtype, d.residual = self._DTYPES[dtype], _keys(key_dtype), _index(residual, "residual")
        d.hadamard = int(_bool(hadamard, "hadamard"))
        self._scales = _scales(d, k_scale, v_scale)  # (init copies them; kept as long as d points to them)
        err, size = Error(), ctypes.c_size_t()
        raise_for(LIB.attn_kv_cache_bytes(ctypes.byref(size), ctypes.byref(d), ctypes.byref(err)), err)
        self._memory = _library_owned(kv_zeros(size.value))  # (bytes,): the rows, on huge pages from 2 MiB on
        cache = ctypes.c_void_p()
        raise_for(LIB.attn_kv_cache_init(ctypes.byref(cache), self._memory.ctypes.data, size.value, ctypes.byref(d),
                                         ctypes.byref(err)), err)
        self._cache, self._desc = cache, d
        self._lengths = np.zeros(d.batch, np.int64)  # (batch,): what the library reads and grows, by pointer
        self.batch, self.heads, self.capacity = d.batch, d.heads, d.capacity
        self.key_dim, self.value_dim = d.key_dim, d.value_dim

    memory = property(lambda self: self._memory, doc="The cache's bytes (uint8), read-only: the library's rows, "
                      "changed through append and truncate only (a write from Python corrupted them).")

    @property
    def lengths(self):
        """Each row's length, int64 (batch,): the array the steps read and
        grow. Set in place (cache.lengths[r] = n), or assign any sequence
        of `batch` integers, which is copied in: the library reads and
        writes this one array by pointer, so it stays int64, C-contiguous,
        writeable and of length batch (an int32 or shorter array put in
        its place was read past its end)."""
        return self._lengths

    @lengths.setter
    def lengths(self, values):
        a = np.asarray(values)
        if a.shape != (self.batch,) or (a.size and a.dtype.kind not in "iu"):
            raise ValueError("lengths must be %s, one per row, not %s %s" % (_count(self.batch, "integer"), a.dtype,
                                                                              a.shape))
        if a.size and a.dtype.kind == "u" and int(a.max()) > 2 ** 63 - 1:  # copied in, it wrapped to a negative length
            raise ValueError("lengths holds %d, past int64" % int(a.max()))
        self._lengths[...] = a

    def mha_step(self, rows, x, params, cu_seqlens=None, masks=None, causal="bottom-right", rope=None, scale=None,
                 **variants):
        """The attention layer's step (attn_mha_cached_batch) for the
        sequences in cache rows `rows` at once, each at its own length
        (self.lengths[row], which grows by its new positions): x and the
        other arguments as KVPages.mha_step takes them. Each sequence's rows
        are bitwise what the step gives it alone."""
        rows = [_index(r, "rows[%d]" % i) for i, r in enumerate(_listed(rows, "rows", "cache rows"))]
        dt = np.float64 if self._desc.dtype == F64 else np.float32
        if cu_seqlens is None and not rows and x is not None and not len(x):
            return []  # a step with no row changes nothing, as KVPages.mha_step
        xa, cu, lists = _packed_rows(x, cu_seqlens, len(rows), "mha_step", dt)
        keep = []
        p, o = _layer(params, xa.shape[1], rope, causal, scale, keep, dt, variants)
        out = np.empty(xa.shape, dt)
        ov, xv, ids, offsets, err = _view(out), _view(xa), _i64s(rows, "rows"), _i64s(cu, "cu_seqlens"), Error()
        arrays, mviews, mptrs = _varlen_masks(masks, len(rows), dt)
        lengths = self._lengths.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        raise_for(LIB.attn_mha_cached_batch(ov, xv, offsets, ids, len(rows), self._cache, lengths, mptrs,
                                            ctypes.byref(p), ctypes.byref(o), err), err)
        return _unpacked(out, cu, lists)

    @property
    def length(self):
        """The positions every row holds through append, attend and
        truncate (attn_kv_cache_length); mha_step's rows count theirs in
        self.lengths."""
        return LIB.attn_kv_cache_length(self._cache)

    def _work(self):
        """The dtype keys, values and queries come in: float64 for a float64
        cache, else float32 (or float16, which the library widens)."""
        return np.float64 if self._desc.dtype == F64 else np.float32

    def append(self, k, v):
        """Append n positions to every row: k (batch, heads, n, key_dim) and
        v (batch, heads, n, value_dim), any strides (rank 3 (heads, n, dim)
        when batch is 1, rank 2 (n, dim) when batch and heads are 1);
        float32 or float16, rounded to the cache's dtype or quantized row by
        row (float64 for a float64 cache). All appended, or none: a cache
        without room for n more is a FullError, left as it was."""
        work = self._work()
        f64_only = "a float64 cache" if work == np.float64 else None
        k, v = (_float_array(a, name, work, kv=True, f32_only=work == np.float32, f64_only=f64_only)
                for a, name in ((k, "k"), (v, "v")))
        err = Error()
        raise_for(LIB.attn_kv_cache_append(self._cache, _view(k), _view(v), err), err)

    def attend(self, q, mask=None, causal="bottom-right", scale=None, return_lse=False, dropout_p=0.0, seed=None,
               **variants):
        """Attention of q (batch, Hq, L, key_dim; Hq a multiple of heads;
        rank 3 or 2 as append takes them) to the `length` positions cached
        (attn_kv_cache_attend): out (batch, Hq, L, value_dim) in q's dtype,
        and with return_lse (out, lse), lse (batch, Hq, L) float32 (float64
        for a float64 cache). q is float32 or float16 (float64 for a float64
        cache), as attn.sdpa takes it. q's rows are the last L positions:
        causal 'bottom-right' (the default) or False. mask, scale, dropout_p
        with seed, and the score variants (softcap, alibi_slopes, window,
        sinks, rope, compute, num_threads) as attn.sdpa takes them, the
        mask over (..., L, length). The result is bitwise attn.sdpa's on the
        cache's view (view()), read in place."""
        return_lse = _bool(return_lse, "return_lse")
        q, work = _query(q, f32_only=self._work() == np.float32)
        # the library named the cache's rows ("k is f64 but q is f32"), not q
        if self._work() == np.float64 and q.dtype != np.float64:
            raise DtypeError("q is %s; a float64 cache takes a float64 q" % q.dtype, 6)
        m, mv = _mask(mask, work)  # (m kept alive through the call)
        o = _options(causal, scale, mv, dropout_p, seed, variants)
        shape = q.shape[:-1] + (self.value_dim,) if q.ndim else ()  # a 0-d q: the library's RankError
        out = np.empty(shape, q.dtype)
        lse = np.empty(shape[:-1], work) if return_lse and q.ndim else None
        err = Error()
        raise_for(LIB.attn_kv_cache_attend(_view(out), _view(lse) if lse is not None else None, _view(q), self._cache,
                                           ctypes.byref(o), err), err)
        return (out, lse) if return_lse else out

    def _shapes(self, rank):
        """k's and v's shapes for the cached positions at `rank` (4, 3 or 2:
        the batch, then the heads, left out, as the library takes them)."""
        if isinstance(rank, bool) or _index(rank, "rank") not in (2, 3, 4):
            raise RankError("rank is %r: 4 (batch, heads, length, dim), 3 (heads, length, dim) or 2 (length, dim)"
                            % (rank,), 2)
        n = self.length
        return ((self.batch, self.heads, n, self.key_dim)[4 - rank:],
                (self.batch, self.heads, n, self.value_dim)[4 - rank:])

    def gather(self, rank=4, dtype=None):
        """The cached positions copied out (attn_kv_cache_gather): k
        (batch, heads, length, key_dim) and v (..., value_dim) (rank 3 or 2
        as append takes them), of dtype float32 (float64 for a float64
        cache; or float64, float32, float16 as asked), a quantized cache's
        rows widened as attn.h's attn_dequantize widens them (fp8 with its
        scales applied, keys of a Hadamard cache turned back, keys per
        channel their groups' values)."""
        ks, vs = self._shapes(rank)
        dt = np.dtype(self._work() if dtype is None else dtype)
        k, v = np.empty(ks, dt), np.empty(vs, dt)
        err = Error()
        raise_for(LIB.attn_kv_cache_gather(_view(k), _view(v), self._cache, err), err)
        return k, v

    def view(self, rank=4):
        """The cached positions, k (batch, heads, length, key_dim) and v
        (..., value_dim) (rank 3 or 2 as append takes them): for a float64,
        float32 or float16 cache, read-only NumPy views of the cache's own
        memory (attn_kv_cache_view; valid until the next append or
        truncate, which rewrite it); for any other storage (bfloat16, which
        NumPy lacks, and the quantized formats) the dequantized copies
        gather() gives, float32."""
        ks, vs = self._shapes(rank)  # the rank checked here for both ways
        dtype = {F64: np.float64, F32: np.float32, F16: np.float16}.get(self._desc.dtype)
        if dtype is None or self._desc.key_dtype:
            return self.gather(rank)
        kt, vt, err = Tensor(), Tensor(), Error()
        raise_for(LIB.attn_kv_cache_view(kt, vt, self._cache, rank, err), err)
        base, size = self._memory.ctypes.data, np.dtype(dtype).itemsize
        views = []
        for t, shape in ((kt, ks), (vt, vs)):
            if 0 in shape:  # nothing cached: no memory to view
                views.append(np.empty(shape, dtype))
                continue
            a = np.ndarray(shape, dtype, buffer=self._memory, offset=t.data - base,
                           strides=[t.strides[d] * size for d in range(rank)])
            a.flags.writeable = False  # the library's rows: changed through append and truncate only
            views.append(a)
        return views[0], views[1]

    def truncate(self, length):
        """Forget every row's positions from `length` on (0 empties the
        cache), e.g. to undo rejected draft tokens; past self.length is an
        ArgumentError."""
        err = Error()
        raise_for(LIB.attn_kv_cache_truncate(self._cache, _index(length, "length"), err), err)


__all__ = ["KVPages", "KVCache", "PagedPlan"]
