"""_core.py -- libattn's attention on NumPy arrays: views without copies,
the options, and the library's errors as Python exceptions."""
import ctypes
import operator
import os
import struct

import numpy as np

from ._lib import BOOL, F16, F32, F64, LIB, MAX_RANK, P, Context, Error, RopeOptions, SdpaOptions, Tensor, default

# ---------------------------------------------------------------------------
# Errors: one class per attn_status, all AttnError.


class AttnError(Exception):
    """A libattn call failed: .status is the attn_status, .message the library's words."""
    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


def _count(n, one, many=None):
    """'1 sequence', '2 sequences': a count in a message, which can be 1."""
    return "%d %s" % (n, one if n == 1 else many or one + "s")


def _listed(x, name, what):
    """x, an argument that lists things (sequences, lengths, parts,
    gradients' names), as a list: None, a string or anything not iterable
    is a TypeError naming it ("'NoneType' object is not iterable" said
    not which argument)."""
    if x is None or isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        raise TypeError("%s must be a list of %s, not %s" % (name, what, type(x).__name__))
    return list(x)


class _Pinned:
    """An object whose library state lies in its own memory at fixed
    addresses (a pool, a cache, a plan: attn.h, "cannot be moved or copied
    elsewhere"). copy.copy gave a second object over the same pool, whose
    appends changed the first; copy.deepcopy and pickle failed on a ctypes
    pointer ("ctypes objects containing pointers cannot be pickled").
    Each is a TypeError saying so."""

    def __reduce_ex__(self, protocol):
        raise TypeError("an attn.%s cannot be copied or pickled: the library's state lies at fixed addresses of its "
                        "own memory, which a copy would share or leave behind (make a new one%s)"
                        % (type(self).__name__, "; fork() a sequence to share its rows"
                           if type(self).__name__ == "KVPages" else ""))


def _error_class(name, status, doc, *bases):
    return type(name, (AttnError,) + bases, {"status": status, "__doc__": doc})


NullError = _error_class("NullError", 1, "A required argument is missing (None).", ValueError)
RankError = _error_class("RankError", 2, "A tensor's rank is outside what the call accepts.", ValueError)
ShapeError = _error_class("ShapeError", 3, "A dimension below what the call takes (0 where it takes none: heads, E "
                         "or Ev), or sizes that must agree do not.", ValueError)
BroadcastError = _error_class("BroadcastError", 4, "Batch dimensions are neither equal nor 1.", ValueError)
HeadsError = _error_class("HeadsError", 5, "Query heads are not a multiple of key/value heads.", ValueError)
DtypeError = _error_class("DtypeError", 6, "A dtype the call does not take, or dtypes that do not match.", TypeError)
MaskError = _error_class("MaskError", 7, "The mask's dtype or shape does not fit.", ValueError)
ScaleError = _error_class("ScaleError", 8, "The scale is NaN or infinite, or a per-head fp8 scale (k_scale, v_scale) "
                         "is not finite and > 0.", ValueError)
OptionError = _error_class("OptionError", 9, "An option has a value outside its range.", ValueError)
StrideError = _error_class("StrideError", 10, "An output has stride 0 in a dimension of size > 1, or shares memory "
                           "with another output or an input.", ValueError)
SizeOverflowError = _error_class("SizeOverflowError", 11, "A size or offset overflows.", OverflowError)
NoMemoryError = _error_class("NoMemoryError", 12, "The library could not allocate memory.", MemoryError)
IOFailure = _error_class("IOFailure", 13, "A file could not be read or written.", OSError)
NpyHeaderError = _error_class("NpyHeaderError", 14, "A malformed .npy header.", ValueError)
NpyUnsupportedError = _error_class("NpyUnsupportedError", 15, "A .npy file uses what the library does not read.",
                                   ValueError)
NpyTruncatedError = _error_class("NpyTruncatedError", 16, "A .npy file holds too few bytes.", ValueError)
NpyTrailingError = _error_class("NpyTrailingError", 17, "A .npy file has bytes after its data.", ValueError)
TokenError = _error_class("TokenError", 18, "A sentence the toy model cannot read.", ValueError)
ArgumentError = _error_class("ArgumentError", 19, "An argument other than a tensor is out of range.", ValueError)
WorkspaceError = _error_class("WorkspaceError", 20, "The caller's workspace is too small.", ValueError)
FullError = _error_class("FullError", 21, "A KV cache has no room.", ValueError)
CommError = _error_class("CommError", 22, "Ranks of an MPI communicator could not agree.", RuntimeError)
PlanError = _error_class("PlanError", 23, "A tensor given to a plan's run is laid out otherwise than planned.",
                         ValueError)

ERRORS = {c.status: c for c in (NullError, RankError, ShapeError, BroadcastError, HeadsError, DtypeError, MaskError,
                                ScaleError, OptionError, StrideError, SizeOverflowError, NoMemoryError, IOFailure,
                                NpyHeaderError, NpyUnsupportedError, NpyTruncatedError, NpyTrailingError, TokenError,
                                ArgumentError, WorkspaceError, FullError, CommError, PlanError)}


def raise_for(status, err):
    """Raise the exception of a failed call (status != 0) with the library's message."""
    if status:
        message = err.message.decode(errors="replace") or LIB.attn_strerror(status).decode()
        raise ERRORS.get(status, AttnError)(message, status)


# ---------------------------------------------------------------------------
# Arrays as attn_tensor views.

_DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64, np.dtype(np.bool_): BOOL, np.dtype(np.float16): F16}


# attn_tensor's bytes: data, dtype, rank, shape[5], strides[5] (packed in one
# step, which is several times faster than setting the fields one by one).
_TENSOR = struct.Struct("@Pii%dq%dq" % (MAX_RANK, MAX_RANK))
assert _TENSOR.size == ctypes.sizeof(Tensor)


def _find_data_offset():
    """Where an ndarray object keeps its data pointer (NumPy's PyArrayObject:
    after the object header), found by asking, so that view() can read it
    without building a.ctypes each time; None when it cannot be found (then
    a.ctypes.data is used)."""
    probe = np.arange(3.0)
    for offset in (2 * ctypes.sizeof(ctypes.c_void_p), 4 * ctypes.sizeof(ctypes.c_void_p)):
        if ctypes.c_void_p.from_address(id(probe) + offset).value == probe.ctypes.data:
            return offset
    return None


_DATA_OFFSET = _find_data_offset()


def _data(a):
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0


def view(a, dtype=None):
    """An attn_tensor over the NumPy array a, its strides passed through (in
    elements; negative and zero strides too). Nothing is copied. dtype: the
    attn dtype code of elements held as raw bits (bf16 as uint16, quantized
    rows as uint8); None takes it from a's NumPy dtype."""
    code = _DTYPES.get(a.dtype) if dtype is None else dtype
    if code is None and not a.dtype.isnative:
        raise DtypeError("a byte-swapped array (%s): convert it to native order first, a.astype(a.dtype.newbyteorder('='))"
                         % a.dtype.str, 6)
    if code is None:
        raise DtypeError("arrays of %s are not taken: float32, float64, float16 (keys and values) or bool (masks)"
                         % a.dtype, 6)
    nd, size, byte_strides = a.ndim, a.itemsize, a.strides
    if nd > MAX_RANK:
        raise RankError("an array of rank %d; at most %d" % (nd, MAX_RANK), 2)
    if not a.flags.aligned:  # an aligned array's strides are whole elements
        raise StrideError("an unaligned array (strides %s bytes for %d-byte elements): copy it first"
                          % (byte_strides, size), 10)
    strides = [b // size for b in byte_strides]
    pad = (0,) * (MAX_RANK - nd)
    return Tensor.from_buffer_copy(_TENSOR.pack(_data(a), code, nd, *a.shape, *pad, *strides, *pad))


def _array(x, name):
    """x, a tensor or anything else NumPy views, as an array. What NumPy
    cannot view raised torch's words, naming no argument: a bfloat16 tensor
    ("Got unsupported ScalarType BFloat16", a TypeError, not the DtypeError
    every other dtype is), or one that requires grad (a RuntimeError)."""
    if getattr(x, "requires_grad", False):  # a torch tensor in autograd's graph
        raise TypeError("%s requires grad, and the NumPy calls compute no gradient: use attn.torch, or pass "
                        "%s.detach()" % (name, name))
    try:
        return np.asarray(x)
    except (TypeError, RuntimeError) as e:
        raise DtypeError("%s (%s of %s) cannot be read as a NumPy array (%s)%s"
                         % (name, type(x).__name__, getattr(x, "dtype", "?"), e,
                            ": NumPy has no bfloat16 (attn.torch's functions take bfloat16 tensors; or convert "
                            "it to float32)" if "bfloat16" in str(getattr(x, "dtype", "")) else ""), 6) from None


def _ranked(a, name):
    """a, refused naming `name` when its rank passes what an attn_tensor
    holds (view() said "an array of rank 6", naming no argument)."""
    if a.ndim > MAX_RANK:
        raise RankError("%s has rank %d; at most %d" % (name, a.ndim, MAX_RANK), 2)
    return a


def _float_array(a, name, like=None, kv=False, f32_only=False, f16=False, f64_only=None):
    """The array `name` as given (no copy) when it is float32 or float64, or,
    for a key or value (kv) beside a float32 q, float16, or float16 where the
    call takes it (f16: a query the library widens itself). Lists and scalars
    become arrays of like's dtype, or float64 (float32 with f32_only);
    anything else that carries a dtype of its own (a torch tensor, a
    memoryview, ...) is taken with that dtype, as an array is. An array of any other dtype is refused, not
    converted: an integer q made float64 would be reported as a mismatch
    with k, not as what it is. f32_only: float64 refused too (a KV pool's
    calls, which take float32), and said so: the message offered float64,
    which the library then refused naming an output the caller never gave.
    f64_only: None, or the words for what takes float64 alone ("a float64
    cache"): float32 and float16 refused too, as "k is float32; a float64
    cache takes float64" (the library said "k is f32; an f64 cache takes
    f64", in its own dtype names)."""
    if a is None:
        raise NullError("%s is None" % name, 1)
    if not isinstance(a, np.ndarray):
        # A float32 torch tensor made float64 here computed in float64 and
        # gave float64 (or, beside float32 NumPy keys, a mismatch of dtypes
        # the caller never made); an integer tensor was converted silently.
        if not (hasattr(a, "dtype") or hasattr(a, "__array_interface__") or isinstance(a, memoryview)):
            # float32 for the calls that take nothing wider (f32_only): a list
            # made float64 was refused there by the library ("q is f64"),
            # and a paged plan advised planning for float64, which it refuses
            made = like if like is not None else np.float32 if f32_only else np.float64
            try:
                return _ranked(np.asarray(a, made), name)
            except (TypeError, ValueError) as e:  # "could not convert string to float", naming no argument
                raise DtypeError("%s is %s, not an array of numbers (%s)" % (name, type(a).__name__, e), 6) from None
        a = _array(a, name)
    _ranked(a, name)
    if f64_only:
        taken = (np.float64,)
    else:
        taken = ((np.float32,) if f32_only else (np.float32, np.float64)) + ((np.float16,) if f16 else ())
    half_kv = kv and like == np.float32 and not f64_only
    if a.dtype in taken or (half_kv and a.dtype == np.float16):
        return a
    if a.dtype.kind == "f" and not a.dtype.isnative:  # '>f4' on x86: the same values, in native order
        a = a.astype(a.dtype.newbyteorder("="))
        if a.dtype in taken or (half_kv and a.dtype == np.float16):
            return a
    if f64_only:
        raise DtypeError("%s is %s; %s takes float64" % (name, a.dtype, f64_only), 6)
    if f32_only:
        raise DtypeError("%s is %s; it must be float32%s" % (name, a.dtype, " or float16" if kv or f16 else ""), 6)
    if f16:
        raise DtypeError("%s is %s; it must be float32, float64 or float16" % (name, a.dtype), 6)
    raise DtypeError("%s is %s; it must be float32 or float64%s" % (name, a.dtype, ", or float16 beside a float32 q"
                                                                     if kv else ""), 6)


def _query(q, name="q", f32_only=False, like=None):
    """A query as the calls that widen a 16-bit q take it (attn.h: attn_sdpa,
    attn_sdpa_varlen, the plans, attn_kv_pages_attend): float32 or float64
    (float32 only with f32_only, a KV pool's), or float16, and the dtype the
    call works in beside it. For a float16 q the library computes on its
    float32 copy: keys and values may be float32 or float16, float masks and
    lse are float32, and out is float16 (rounded once). NumPy has no
    bfloat16, so that other 16-bit q cannot be passed from here. A list
    becomes like's dtype where given (a plan's q), else as _float_array
    makes one."""
    q = _float_array(q, name, like, f32_only=f32_only, f16=True)
    return q, (np.dtype(np.float32) if q.dtype == np.float16 else q.dtype)


def _keys_values(k, v, q, work):
    """k and v as _float_array takes them beside q, work being the dtype the
    call works in (_query's). Beside a float16 q, float64 is refused here,
    naming the argument: the library refuses it too, but its plans named
    q's float32 copy ("k is f64 but q is f32")."""
    k, v = _float_array(k, "k", work, kv=True), _float_array(v, "v", work, kv=True)
    if q.dtype == np.float16:
        for a, name in ((k, "k"), (v, "v")):
            if a.dtype == np.float64:
                raise DtypeError("%s is float64; beside a float16 q it must be float32 or float16" % name, 6)
    return k, v


CAUSAL = {False: 0, None: 0, True: 1, "top-left": 1, "bottom-right": 2}


_DEFAULT_OPTIONS = bytes(default(SdpaOptions))


def _real(x, name):
    """x as a float, for a number the options hold (scale, dropout_p,
    softcap): a Python or NumPy real number, or an array of one. None, a
    string, a bool or several values are a TypeError naming the argument
    (float() said "could not convert string to float", or "only size-1
    arrays can be converted", without saying which argument)."""
    if isinstance(x, int) and not isinstance(x, bool):  # past int64 NumPy made it an object array, refused as "int"
        try:
            return float(x)
        except OverflowError:
            raise ArgumentError("%s is an integer past float64's range" % name, 19) from None
    if x is not None and not isinstance(x, (str, bytes)):
        try:
            a = np.asarray(x)
        except (TypeError, ValueError):
            a = None
        if a is not None and a.size == 1 and a.dtype.kind in "iuf":
            return float(a.reshape(()))
    shape = " of shape %s" % (np.shape(x),) if isinstance(x, (list, tuple, np.ndarray)) else ""
    raise TypeError("%s must be a real number, not %s%s" % (name, type(x).__name__, shape))


# Attention in pieces (attn.h): where this call's queries and keys sit in a
# longer sequence, each an integer (totals 0: this call's own).
PIECES = ("query_start", "key_start", "total_queries", "total_keys")
# The score variants of attn_sdpa_options (attn.h, "Score variants"), RoPE,
# the compute mode, the pieces and the call's own thread count (its
# attn_context), as the calls built on it take them by keyword.
VARIANTS = ("softcap", "alibi_slopes", "window", "sinks", "rope", "compute", "num_threads") + PIECES


def _rope(rope):
    """attn_rope_options from a dict of its fields (layout 0 halves or 1
    interleaved, base, rotary_dim, position_offset, linear_scaling), the
    others the library's defaults; the library checks the values."""
    r = default(RopeOptions)
    fields = [f for f, _ in RopeOptions._fields_ if f != "struct_size"]
    if not hasattr(rope, "items"):
        raise TypeError("rope must be a dict of attn_rope_options fields (%s), not %s"
                        % (", ".join(fields), type(rope).__name__))
    types = dict(RopeOptions._fields_)
    for k, value in rope.items():
        if k not in fields:  # a ctypes struct takes any attribute: "bse" was kept aside, the default base used
            raise OptionError("rope has %r; its fields are %s" % (k, ", ".join(fields)), 9)
        name = "rope[%r]" % k
        if types[k] is ctypes.c_double:
            setattr(r, k, _real(value, name))
        else:  # ctypes wrapped an integer past the field's range: position_offset 2**64 + 3 was 3
            bits = 8 * ctypes.sizeof(types[k])
            setattr(r, k, _index(value, name, -2 ** (bits - 1), 2 ** (bits - 1) - 1))
    return r


_COMPUTE = {"f32": 0, "float32": 0, "bf16": 1, "bfloat16": 1}  # attn_compute by name


def _head_values(a, name, copy):
    """alibi_slopes or sinks: one value per query head, as the library takes
    them (1-D, float32 or float64, finite; it checks the length and the
    values); a list becomes float64; copy: an array of the caller's own
    (a plan's, which reads it at every run)."""
    a = _float_array(a, name, np.float64)
    if a.ndim != 1:
        raise RankError("%s has rank %d; it must be 1-D, one value per query head" % (name, a.ndim), 2)
    return a.copy() if copy else a


def _context(num_threads):
    """An attn_context of a call's own thread count (the library checks
    its range: 1 to 256, 0 the process-wide count)."""
    c = default(Context)
    c.num_threads = _index(num_threads, "num_threads", -2 ** 31, 2 ** 31 - 1)
    return c


def _options(causal, scale, mask_view, dropout_p, seed, variants=None, copy=False):
    """attn_sdpa_options of these arguments. variants: a dict of the score
    variants and compute mode by keyword (VARIANTS; None or absent: none):
    softcap (a number >= 0), alibi_slopes and sinks (arrays of Hq values),
    window (an integer), rope (a dict of attn_rope_options fields, _rope),
    compute ('f32' or 'bf16'), the pieces' integers (PIECES), num_threads
    (this call's threads, 1 to 256; 0 or None the process-wide count). The
    arrays and structs the options point to are kept on the returned
    struct (o.keep), copies with copy."""
    o = SdpaOptions.from_buffer_copy(_DEFAULT_OPTIONS)
    o.keep = []
    variants = dict(variants or {})
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:  # a misspelt "softcapp" was dropped silently by **kwargs
        raise TypeError("unexpected keyword argument%s %s; the score variants are %s" % (
            "s" if len(unknown) > 1 else "", ", ".join(map(repr, unknown)), ", ".join(VARIANTS)))
    if variants.get("softcap") is not None:
        o.softcap = _real(variants["softcap"], "softcap")
    for name in ("window",) + PIECES:
        if variants.get(name) is not None:
            setattr(o, name, _index(variants[name], name))
    for name in ("alibi_slopes", "sinks"):
        if variants.get(name) is not None:
            a = _head_values(variants[name], name, copy)
            t = view(a)
            o.keep += [a, t]
            setattr(o, name, ctypes.pointer(t))
    if variants.get("rope") is not None:
        r = _rope(variants["rope"])
        o.keep.append(r)
        o.rope = ctypes.pointer(r)
    if variants.get("num_threads") is not None:  # the call's own, where set_num_threads sets everyone's
        c = _context(variants["num_threads"])
        o.keep.append(c)
        o.context = ctypes.pointer(c)
    compute = variants.get("compute")
    if compute is not None:
        if not isinstance(compute, str) or compute not in _COMPUTE:
            raise OptionError("compute is %r: 'f32' (the default) or 'bf16'" % (compute,), 9)
        o.compute = _COMPUTE[compute]
    try:
        known = causal in CAUSAL
    except TypeError:  # unhashable (a list): not one of them either
        known = False
    if not known:
        raise OptionError("causal is %r: False, True (top-left), 'top-left' or 'bottom-right'" % (causal,), 9)
    o.causal = CAUSAL[causal]
    if scale is not None:
        o.has_scale, o.scale = 1, _real(scale, "scale")
    o.mask = ctypes.pointer(mask_view) if mask_view is not None else None
    o.dropout_p = _real(dropout_p, "dropout_p")
    if o.dropout_p:
        # A seed as Python indexes (int() made 1.5 and 1.7 the same seed, and
        # 2**64 seed 0); a negative one is its uint64, as before.
        o.dropout_seed = (int.from_bytes(os.urandom(8), "little") if seed is None else
                          _index(seed, "seed", -2 ** 63, 2 ** 64 - 1) & (2 ** 64 - 1))
    return o


def mask_array(mask, name="mask"):
    """mask as an array, bool or float, as PyTorch takes masks. An integer
    mask is refused: a 0/1 mask converted to float would be a bias of +0
    and +1 on the scores, not a mask."""
    m = _ranked(_array(mask, name), name)
    if m.dtype != np.bool_ and m.dtype.kind != "f":
        raise MaskError("%s is %s: a mask must be bool or float (for a 0/1 mask, %s.astype(bool))"
                        % (name, m.dtype, name), 7)
    return m


def _mask(mask, dtype, copy=False, name="mask"):
    """mask as an array, bool or of `dtype`, and its view; (None, None) for
    none. copy: an array of its own even where the caller's would do (a
    plan's, which the caller's later writes must not reach). name: what
    an error calls it."""
    if mask is None:
        return None, None
    m = mask_array(mask, name)
    if m.dtype != np.bool_ and m.dtype != dtype:
        m = m.astype(dtype)
    elif copy:
        m = m.copy()
    return m, view(m)


def _output(out, shape, dtype, name):
    """A new array for a result, or the caller's: the call itself checks its
    dtype (DtypeError) and shape (ShapeError), and says which is wrong."""
    if out is None:
        return np.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError("%s must be a NumPy array, not %s" % (name, type(out).__name__))
    if not out.dtype.isnative:  # the library writes native byte order into out's memory
        raise DtypeError("%s is byte-swapped (%s): give an array in native byte order" % (name, out.dtype.str), 6)
    if out.dtype not in _DTYPES or out.dtype == np.bool_:  # view() refused it without naming out
        raise DtypeError("%s is %s; it must be float32 or float64" % (name, out.dtype), 6)
    # The library writes through the pointer whatever the flag says: a
    # read-only mmap would crash the interpreter, bytes would change.
    if not out.flags.writeable:
        raise ArgumentError("%s is read-only (flags.writeable is False: np.frombuffer over bytes, a read-only "
                            "mmap, or a view of one): give a writeable array" % name, 19)
    return out


def _out_shape(q, k, v):
    """out's shape as attn_sdpa_shapes gives it, for well-formed inputs (the
    call itself checks them, and reports a bad one before the output)."""
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) == len(ks) == len(vs) and qs[:-3] == ks[:-3] == vs[:-3]:  # the common case: no broadcasting
        return qs[:-1] + vs[-1:]
    rank = max(q.ndim, k.ndim, v.ndim)
    pq, pk, pv = ((1,) * (rank - a.ndim) + a.shape for a in (q, k, v))
    batch = tuple(0 if 0 in (x, y, z) else max(x, y, z) for x, y, z in zip(pq[:-3], pk[:-3], pv[:-3]))  # 0 with 1: 0
    heads = (pq[-3],) if rank >= 3 else ()
    return batch + heads + (pq[-2], pv[-1])


def _shapes(qv, kv, vv, o):
    rank = ctypes.c_int()
    shape = (ctypes.c_int64 * MAX_RANK)()
    err = Error()
    raise_for(LIB.attn_sdpa_shapes(ctypes.byref(rank), shape, None, ctypes.byref(qv), ctypes.byref(kv),
                                   ctypes.byref(vv), ctypes.byref(o), ctypes.byref(err)), err)
    return tuple(shape[i] for i in range(rank.value))


def sdpa(q, k, v, mask=None, causal=False, scale=None, return_lse=False, dropout_p=0.0, seed=None, out=None,
         return_weights=False, softcap=0.0, alibi_slopes=None, window=0, sinks=None, rope=None, compute="f32",
         **pieces):
    """softmax(q kᵀ · scale + mask) v, with PyTorch's scaled_dot_product_attention
    semantics and libattn's kernels. q (..., Hq, L, E), k (..., Hk, S, E), v
    (..., Hk, S, Ev): float32 or float64 arrays of any strides (k and v may be
    float16 with float32 q; arrays of other dtypes are refused, lists made
    arrays of q's dtype, or float64; a torch tensor keeps its dtype). q may
    be float16, as attn_sdpa takes it, with k and v float32 or float16: the
    call is the float32 call on q widened, out float16 (its float32 result
    rounded once, to nearest even), lse float32, a float mask taken as
    float32, and no weights (return_weights: the library's DtypeError).
    bfloat16, which attn_sdpa takes too, has no NumPy dtype: pass it through
    attn.torch. GQA
    when Hq is a multiple of Hk; batch dimensions broadcast. mask: bool
    (True takes part) or additive float, broadcastable to (..., Hq, L, S);
    an integer mask is a MaskError, as in PyTorch. causal: False, True or 'top-left' (key j <= query i),
    'bottom-right' (j <= i + S - L). scale: default 1/sqrt(E). dropout_p with
    seed (None: a fresh one). Returns out (..., Hq, L, Ev), a new array unless
    out= is given; with return_lse, (out, lse), the log-sum-exp of each row;
    with return_weights, the weights (..., Hq, L, S) last (an L×S array: for
    looking at, computed by the exact kernel).

    The score variants of attn_sdpa_options (attn.h), each score going
    through them in this order: softcap > 0, Gemma 2's soft-capping
    softcap·tanh(s/softcap); alibi_slopes, Hq slopes (ALiBi: s -= slope_h ·
    |j - i - off|, off 0 for top-left, S - L otherwise); window > 0, a
    sliding window (key j seen only when i + off - window < j; needs a
    causal mode); sinks, Hq logits that join each row's softmax denominator
    with no value (gpt-oss). rope: a dict of attn_rope_options fields
    (layout 0 halves or 1 interleaved, base, rotary_dim, position_offset,
    linear_scaling): q and k turned by RoPE as the kernels read them, key j
    at position position_offset + j, query i at position_offset + i + off.
    num_threads: this call's threads (1 to 256; results are bitwise the
    same for any), where set_num_threads sets the whole process's.
    query_start, key_start, total_queries, total_keys: attention in
    pieces (this call's queries and keys at those positions of a longer
    sequence, totals 0 its own), whose (out, lse) over disjoint keys merge
    (attn.merge) into the whole's. compute='bf16': the bf16 compute mode (q, k,
    the probabilities and v rounded to bf16, sums in float32; float32
    only). The other calls (sdpa_backward, sdpa_varlen and its backward,
    Plan, KVPages.attend and plan) take them by the same keywords."""
    return_lse = _bool(return_lse, "return_lse")  # by truthiness, "no" returned (out, lse), as Plan refuses it
    q, work = _query(q)
    k, v = _keys_values(k, v, q, work)
    m, mv = _mask(mask, work)
    o = _options(causal, scale, mv, dropout_p, seed, dict(softcap=softcap, alibi_slopes=alibi_slopes, window=window,
                                                          sinks=sinks, rope=rope, compute=compute, **pieces))
    qv, kv, vv = view(q), view(k), view(v)
    shape = _out_shape(q, k, v) if q.ndim >= 2 and k.ndim >= 2 and v.ndim >= 2 else _shapes(qv, kv, vv, o)
    result = _output(out, shape, q.dtype, "out")
    lse = np.empty(shape[:-1], work) if return_lse else None
    weights = np.empty(shape[:-2] + (shape[-2], k.shape[-2]), q.dtype) if return_weights else None
    err = Error()
    rv, lv = view(result), view(lse) if lse is not None else None  # m, q, k, v stay alive through the call
    wv = view(weights) if weights is not None else None
    raise_for(LIB.attn_sdpa(rv, lv, wv, qv, kv, vv, o, err), err)  # ctypes passes each by reference
    extra = ((lse,) if return_lse else ()) + ((weights,) if return_weights else ())
    return (result,) + extra if extra else result


def _want(want):
    """The gradients asked for: names among dq, dk, dv (one name alone may be
    a string). A name outside them is refused: "dK" or "dkk" was skipped,
    its gradient silently None."""
    names = (want,) if isinstance(want, str) else tuple(_listed(want, "want", "gradients' names"))
    bad = [n for n in names if n not in ("dq", "dk", "dv")]
    if bad:
        raise ArgumentError("want names %s; it takes 'dq', 'dk' and 'dv'" % ", ".join(map(repr, bad)), 19)
    return names


def sdpa_backward(dout, q, k, v, out, lse, mask=None, causal=False, scale=None, dropout_p=0.0, seed=None,
                  want=("dq", "dk", "dv"), want_dmask=False, want_dsinks=False, **variants):
    """The gradients of sdpa given dout = dLoss/dout and that call's out and lse
    (return_lse=True), with the same mask, causal, scale, dropout (the same
    seed) and score variants (softcap, alibi_slopes, window, sinks, rope, compute,
    as sdpa takes them). Returns (dq, dk, dv), each None when not in `want`,
    then dsinks (Hq,) with want_dsinks (the sinks' gradient,
    attn_sdpa_sinks_backward; float32 or float64 as out, float32 beside a
    float16 q), and dmask last
    with want_dmask (a float mask's gradient). A float16 q, as
    attn_sdpa_backward takes it, comes with float16 dout and out and float32
    lse: each gradient is then in its tensor's dtype (dmask float32), its
    float32 value rounded once (bfloat16 has no NumPy dtype)."""
    want = _want(want)
    q, work = _query(q)
    k, v = _keys_values(k, v, q, work)
    half = q.dtype == np.float16
    dout, out = (_float_array(a, n, q.dtype, f16=half) for a, n in ((dout, "dout"), (out, "out")))
    lse = _float_array(lse, "lse", work, f16=half)
    if half and lse.dtype != np.float32:  # the library named q's float32 copy ("lse is f64 but q is f32")
        raise DtypeError("lse is %s; beside a float16 q it must be float32" % lse.dtype, 6)
    m, mv = _mask(mask, work)
    if dropout_p and seed is None:
        raise OptionError("the backward of dropout needs the forward's seed", 9)
    o = _options(causal, scale, mv, dropout_p, seed, variants)
    # beside a float16 q each gradient is its tensor's dtype (attn.h), else q's
    grads = [np.empty(a.shape, a.dtype if half else q.dtype) if name in want else None
             for name, a in (("dq", q), ("dk", k), ("dv", v))]
    dmask = np.empty(m.shape, work) if want_dmask and m is not None else None
    if want_dmask and dmask is None:
        raise MaskError("dmask needs a float mask", 7)
    if want_dsinks and not o.sinks:
        raise NullError("want_dsinks needs sinks", 1)
    views = [view(g) if g is not None else None for g in grads + [dmask]]
    ins = [view(a) for a in (dout, q, k, v, out, lse)]
    err = Error()
    raise_for(LIB.attn_sdpa_backward(*[ctypes.byref(t) if t is not None else None for t in views],
                                     *[ctypes.byref(t) for t in ins], ctypes.byref(o), ctypes.byref(err)), err)
    dsinks = None
    if want_dsinks:  # from dout, out and lse, after the backward has checked them
        # attn_sdpa_sinks_backward takes f32 or f64 only: beside a float16 q
        # (whose lse is float32) dout and out are widened, exactly, and
        # dsinks is float32; the call refused them after the backward had run.
        if half:
            dout, out = dout.astype(np.float32), out.astype(np.float32)
            ins[0], ins[4] = view(dout), view(out)
        dsinks = np.empty(o.sinks.contents.shape[0], out.dtype)
        dv_ = view(dsinks)
        raise_for(LIB.attn_sdpa_sinks_backward(ctypes.byref(dv_), *[ctypes.byref(t) for t in (ins[0], ins[4], ins[5])],
                                               ctypes.byref(o), ctypes.byref(err)), err)
    return tuple(grads) + ((dsinks,) if want_dsinks else ()) + ((dmask,) if want_dmask else ())


def _index(x, name, low=-2 ** 63, high=2 ** 63 - 1):
    """x as a Python int, as Python's own indexing takes one (ints, NumPy
    integers; not floats, strings or None: TypeError), checked to lie in
    low .. high (ArgumentError): ctypes would wrap 2**64 to 0 silently,
    and so act on sequence 0, row 0 or one thread."""
    try:
        i = operator.index(x)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(x).__name__)) from None
    if not low <= i <= high:
        raise ArgumentError("%s is %d, outside %d .. %d" % (name, i, low, high), 19)
    return i


def _library_owned(a):
    """a (the library's memory: a pool's, a cache's or a plan's bytes)
    marked read-only for Python; the library writes it through its address,
    and a write from Python corrupted it."""
    a.flags.writeable = False
    return a


def _bool(x, name):
    """x as a Python bool: a bool or a NumPy bool only, else a TypeError.
    Options read by truthiness took hadamard="False" or head_major="no" as
    true, silently."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError("%s must be a bool (True or False), not %s" % (name, type(x).__name__))
    return bool(x)


def _offsets(cu, name):
    """cu_seqlens as a C array of int64 (the library checks the values).
    None is a NullError, as a None q is (NumPy made it an object array,
    refused as "not object ()"); Python integers past int64 are said to be
    so (NumPy made them float64, refused as floats)."""
    if cu is None:
        raise NullError("%s is None" % name, 1)
    a = np.asarray(cu)
    if a.dtype.kind in "fO" and a.size and a.ndim == 1 and not isinstance(cu, np.ndarray) and all(
            isinstance(x, (int, np.integer)) for x in cu):  # (an empty list, float64 too, holds no offset)
        raise ArgumentError("%s holds an offset outside int64" % name, 19)
    if a.ndim != 1 or a.size < 1 or a.dtype.kind not in "iu":
        raise ArgumentError("%s must be a 1-D array of integers with B+1 offsets, not %s %s"
                            % (name, a.dtype, a.shape), 19)
    if a.dtype.kind == "u" and a.size and int(a.max()) > 2 ** 63 - 1:
        raise ArgumentError("%s holds an offset past int64" % name, 19)
    return np.ascontiguousarray(a, dtype=np.int64)


def _varlen_masks(masks, batch, dtype, copy=False):
    """Per-sequence masks as arrays (kept alive by the caller; copies with
    copy, as _mask makes them), their views and their C array of pointers,
    or (None, None, None)."""
    if masks is None:
        return None, None, None
    # Any iterable, as merge takes its parts (a generator had no len());
    # anything else is refused as what it is, not by a missing len().
    masks = _listed(masks, "masks", "per-sequence masks (None for none)")
    if len(masks) != batch:
        raise ArgumentError("masks has %s for %s" % (_count(len(masks), "entry", "entries"), _count(batch, "sequence")),
                            19)
    arrays = [_mask(m, dtype, copy, "masks[%d]" % b)[0] if m is not None else None for b, m in enumerate(masks)]
    views = [view(a) if a is not None else None for a in arrays]
    ptrs = (P * batch)(*[ctypes.pointer(v) if v is not None else None for v in views])
    return arrays, views, ptrs


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, masks=None, causal=False, scale=None, return_lse=False,
                dropout_p=0.0, seed=None, out=None, **variants):
    """Attention over a ragged batch (attn_sdpa_varlen): q (Tq, Hq, E), k (Tk,
    Hk, E), v (Tk, Hk, Ev) hold B sequences one after another, sequence b being
    rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of q and cu_seqlens_k[b]:cu_seqlens_k[b+1]
    of k and v (B+1 integer offsets each, from 0, never decreasing). Sequence b
    gets exactly what sdpa gives it alone, with masks[b] (None: none) as its
    mask and dropout seed + b. Returns out (Tq, Hq, Ev), with return_lse also
    lse (Tq, Hq). A float16 q (k and v float32 or float16, float masks taken
    as float32) is computed as its float32 widening and gives out in float16,
    rounded once, and lse in float32, as the library takes it (bfloat16, which
    it takes too, has no NumPy dtype). The score variants (softcap,
    alibi_slopes, window, sinks, rope, compute) as sdpa takes them, for every
    sequence."""
    q, work = _query(q)
    return_lse = _bool(return_lse, "return_lse")  # by truthiness, "no" returned (out, lse), as Plan refuses it
    k, v = _keys_values(k, v, q, work)
    cq, ck = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
    if cq.size != ck.size:
        raise ArgumentError("cu_seqlens_q has %s but cu_seqlens_k has %d" % (_count(cq.size, "offset"), ck.size), 19)
    batch = cq.size - 1
    arrays, mviews, mptrs = _varlen_masks(masks, batch, work)
    o = _options(causal, scale, None, dropout_p, seed, variants)
    if q.ndim != 3 or v.ndim != 3:
        raise RankError("q, k and v must be packed (total, heads, size)", 2)
    result = _output(out, (q.shape[0], q.shape[1], v.shape[2]), q.dtype, "out")
    lse = np.empty((q.shape[0], q.shape[1]), work) if return_lse else None
    rv, lv, qv, kv, vv = view(result), view(lse) if lse is not None else None, view(q), view(k), view(v)
    i64p = ctypes.POINTER(ctypes.c_int64)
    err = Error()
    raise_for(LIB.attn_sdpa_varlen(ctypes.byref(rv), ctypes.byref(lv) if lv is not None else None, ctypes.byref(qv),
                                   ctypes.byref(kv), ctypes.byref(vv), cq.ctypes.data_as(i64p), ck.ctypes.data_as(i64p),
                                   batch, mptrs, ctypes.byref(o), ctypes.byref(err)), err)
    return (result, lse) if return_lse else result


def sdpa_varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, masks=None, causal=False, scale=None,
                         dropout_p=0.0, seed=None, want=("dq", "dk", "dv"), **variants):
    """The gradients of sdpa_varlen given dout = dLoss/dout and that call's out
    and lse (return_lse=True), with the same offsets, masks, causal, scale,
    dropout (the same seed) and score variants: (dq, dk, dv), each None when
    not in `want`."""
    want = _want(want)
    q = _float_array(q, "q")
    k, v = _float_array(k, "k", q.dtype, kv=True), _float_array(v, "v", q.dtype, kv=True)
    dout, out, lse = (_float_array(a, n, q.dtype) for a, n in ((dout, "dout"), (out, "out"), (lse, "lse")))
    cq, ck = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
    if cq.size != ck.size:
        raise ArgumentError("cu_seqlens_q has %s but cu_seqlens_k has %d" % (_count(cq.size, "offset"), ck.size), 19)
    batch = cq.size - 1
    arrays, mviews, mptrs = _varlen_masks(masks, batch, q.dtype)
    if dropout_p and seed is None:
        raise OptionError("the backward of dropout needs the forward's seed", 9)
    o = _options(causal, scale, None, dropout_p, seed, variants)
    grads = [np.empty(a.shape, q.dtype) if name in want else None for name, a in (("dq", q), ("dk", k), ("dv", v))]
    views = [view(g) if g is not None else None for g in grads]
    ins = [view(a) for a in (dout, q, k, v, out, lse)]
    i64p = ctypes.POINTER(ctypes.c_int64)
    err = Error()
    raise_for(LIB.attn_sdpa_varlen_backward(*[ctypes.byref(t) if t is not None else None for t in views],
                                            *[ctypes.byref(t) for t in ins], cq.ctypes.data_as(i64p),
                                            ck.ctypes.data_as(i64p), batch, mptrs, ctypes.byref(o),
                                            ctypes.byref(err)), err)
    return tuple(grads)


def merge(outs, lses):
    """Merge partial results over disjoint sets of keys (attn_sdpa_merge): given
    (outs[i], lses[i]) of the same queries, the (out, lse) of attention over
    all their keys, exactly. outs and lses: sequences of arrays, or arrays
    stacked along a first axis (np.stack of the parts)."""
    # An ndarray's truth value raised "ambiguous" (ValueError), a generator
    # had no len(): the parts are listed first.
    outs, lses = _listed(outs, "outs", "arrays"), _listed(lses, "lses", "arrays")
    if len(outs) != len(lses) or not outs:
        raise ArgumentError("merge needs as many outs as lses, at least one", 19)
    outs = [_float_array(a, "outs[%d]" % i) for i, a in enumerate(outs)]
    lses = [_float_array(a, "lses[%d]" % i, outs[0].dtype) for i, a in enumerate(lses)]
    out, lse = np.empty(outs[0].shape, outs[0].dtype), np.empty(lses[0].shape, outs[0].dtype)
    ov, lv = [view(a) for a in outs], [view(a) for a in lses]
    po, pl = (P * len(outs))(*[ctypes.pointer(t) for t in ov]), (P * len(lses))(*[ctypes.pointer(t) for t in lv])
    rv, rl = view(out), view(lse)
    err = Error()
    raise_for(LIB.attn_sdpa_merge(ctypes.byref(rv), ctypes.byref(rl), po, pl, len(outs), ctypes.byref(err)), err)
    return out, lse


def dropout_mask(q, k, v, dropout_p, seed, mask=None, causal=False, scale=None, **variants):
    """The dropout mask of attn.sdpa(q, k, v, mask, causal, scale,
    dropout_p=dropout_p, seed=seed, ...) (attn_sdpa_dropout_mask): bool,
    shaped as the weights (..., Hq, L, S), True where a weight is kept, as
    the call and its backward decide it (all True for dropout_p 0). For
    checking dropout against another implementation: PyTorch's math with
    this mask, the kept weights divided by 1 - dropout_p, gives attn's
    result. seed is needed (a fresh one would draw a mask no call used)."""
    if seed is None:
        raise OptionError("dropout_mask needs the seed of the call whose mask it is", 9)
    q, work = _query(q)
    k, v = _keys_values(k, v, q, work)
    m, mv = _mask(mask, work)
    o = _options(causal, scale, mv, dropout_p, seed, variants)
    qv, kv, vv = view(q), view(k), view(v)
    shape = _out_shape(q, k, v) if q.ndim >= 2 and k.ndim >= 2 and v.ndim >= 2 else _shapes(qv, kv, vv, o)
    keep = np.empty(shape[:-1] + (k.shape[-2] if k.ndim >= 2 else 1,), np.bool_)
    kp, err = view(keep), Error()
    raise_for(LIB.attn_sdpa_dropout_mask(ctypes.byref(kp), ctypes.byref(qv), ctypes.byref(kv), ctypes.byref(vv),
                                         ctypes.byref(o), ctypes.byref(err)), err)
    return keep


def alibi_slopes(heads):
    """The ALiBi paper's slopes for `heads` query heads (attn_alibi_slopes),
    float64 (heads,): what alibi_slopes= takes."""
    heads = _index(heads, "heads")
    slopes = np.empty(max(heads, 1), np.float64)
    err = Error()
    raise_for(LIB.attn_alibi_slopes(slopes.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), heads,
                                    ctypes.byref(err)), err)
    return slopes


def set_num_threads(n):
    """Threads for the f32 kernels, at most 256 (0 or less: the default again,
    ATTN_NUM_THREADS if set, else every CPU); results do not depend on it."""
    LIB.attn_set_num_threads(_index(n, "set_num_threads's n", -2 ** 31, 2 ** 31 - 1))


def get_num_threads():
    """The number of threads the next call will use."""
    return LIB.attn_get_num_threads()


def isa():
    """The instruction set the kernels use here: 'avx512', 'avx2' or 'c'."""
    return LIB.attn_isa().decode()


def version():
    """The version of the libattn.so loaded."""
    return LIB.attn_version().decode()


def library_path():
    """Where the libattn.so loaded came from."""
    return LIB.attn_path
