"""attn.torch -- libattn under PyTorch's autograd, for CPU tensors.

scaled_dot_product_attention has torch.nn.functional's signature; its
backward is attn_sdpa_backward. MultiheadAttention is a drop-in
torch.nn.MultiheadAttention (the same parameters, so it loads that module's
state_dict) whose forward is attn_mha and backward attn_mha_backward. Both
compute in the tensors' own memory (no copies but for dtype conversions),
and their gradients are exact (gradcheck passes in float64). Inputs they
do not take raise the library's errors (ShapeError, DtypeError, MaskError,
...), each also a RuntimeError, as torch's own attention raises."""
import ctypes
import functools

import numpy as np
import torch

from . import _core
from ._lib import BF16, BOOL, F16, F32, F64, LIB, MAX_RANK, MHA_PARAMS, Error, MhaOptions, MhaParams, SdpaOptions, Tensor, \
    default

__all__ = ["scaled_dot_product_attention", "MultiheadAttention"]


def _np(t, name):
    """A NumPy view of a CPU tensor (its strides kept), or None."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor" % name)
    if t.device.type != "cpu":
        raise ValueError("%s is on %s: attn.torch computes on the CPU" % (name, t.device))
    if t.dtype == torch.bfloat16:
        raise _core.DtypeError("%s is bfloat16, which NumPy cannot view: convert it to float32" % name, 6)
    return t.detach().numpy()


def _wide(t, name):
    """A query-side tensor (query, dout, a float mask) as NumPy, float16
    widened to float32: the library takes float16 only for keys and values,
    beside a float32 query. The result goes back to float16 afterwards."""
    a = _np(t, name)
    return a.astype(np.float32) if a is not None and a.dtype == np.float16 else a


def _like(a, t):
    """The NumPy result a as a tensor of t's dtype (float16 results are
    computed in float32)."""
    return torch.from_numpy(a).to(t.dtype)


def _seed(dropout_p):
    """Dropout's seed from PyTorch's generator, so torch.manual_seed repeats it."""
    return int(torch.randint(0, 2 ** 62, (1,)).item()) if dropout_p else None


class _NoSecondDerivative(torch.autograd.Function):
    """Stands between a backward's gradients and what they were computed
    from when autograd records a graph of the backward (create_graph=True):
    differentiating through it raises, as the library has no second
    derivative."""
    @staticmethod
    def forward(ctx, n, *tensors):  # the n gradients, then what they came from (only linked, not read)
        return tuple(g.clone() for g in tensors[:n])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError("attn.torch's attention is differentiable once (the library has no second derivative): "
                           "a gradient taken with create_graph=True cannot be differentiated again through it")


def _differentiable_once(backward):
    """torch's once_differentiable, counting the saved inputs too. torch's
    looks only at the incoming gradient: with create_graph=True and a dout
    that needs none (out.sum()), the gradients came back as constants, and
    what was differentiated through them (a gradient penalty, a
    Hessian-vector product) got 0 from this function, silently. Now, when a
    graph is recorded and any input needs a gradient, the gradients carry a
    node that raises if a second derivative reaches it."""
    @functools.wraps(backward)
    def run(ctx, *grad_outputs):
        with torch.no_grad():
            grads = backward(ctx, *grad_outputs)
        if not torch.is_grad_enabled():
            return grads
        sources = [t for t in list(grad_outputs) + list(ctx.saved_tensors)
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        tensors = [g.detach() for g in grads if isinstance(g, torch.Tensor)]
        if not sources or not tensors:
            return grads
        # linked to the inputs, so that torch.autograd.grad reaches the node
        # and raises (not "appears to not have been used in the graph")
        marked = iter(_NoSecondDerivative.apply(len(tensors), *tensors, *sources))
        return tuple(next(marked) if isinstance(g, torch.Tensor) else g for g in grads)
    return run


def _torch_kind(cls):
    """cls (an attn.AttnError class) that is a RuntimeError too, as torch
    raises one for inputs its attention does not take (shapes, dtypes,
    masks, heads): `except RuntimeError` around torch's call caught nothing
    of ours (a ShapeError is a ValueError, a DtypeError a TypeError). Still
    the library's class: `except attn.ShapeError` catches it as before.
    Each is made once, here, and named in this module (attn.torch.ShapeError),
    so that pickle finds it (an exception sent from a worker process)."""
    if issubclass(cls, RuntimeError):
        return cls
    kind = globals().get(cls.__name__)
    if kind is None:
        kind = globals()[cls.__name__] = type(cls.__name__, (cls, RuntimeError),
                                              {"__module__": __name__, "__doc__": cls.__doc__})
    return kind


for _cls in [_core.AttnError] + list(_core.ERRORS.values()):
    _torch_kind(_cls)


def _raises_as_torch(fn):
    """fn raising the library's errors as _torch_kind's classes."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _core.AttnError as e:
            kind = _torch_kind(type(e))
            if kind is type(e):
                raise
            raise kind(e.message, e.status).with_traceback(e.__traceback__) from None
    return run


_CODES = {torch.float32: F32, torch.float64: F64, torch.float16: F16, torch.bfloat16: BF16, torch.bool: BOOL}
_HALF = (torch.float16, torch.bfloat16)


def _tview(t, name):
    """An attn_tensor over a CPU tensor's own memory (its data pointer and
    strides): how bfloat16, which NumPy cannot view, reaches the library."""
    if t.device.type != "cpu":
        raise ValueError("%s is on %s: attn.torch computes on the CPU" % (name, t.device))
    if t.dtype not in _CODES:
        raise _core.DtypeError("%s is %s: float32, float64, float16 or bfloat16 (bool for masks)" % (name, t.dtype), 6)
    if t.dim() > MAX_RANK:
        raise _core.RankError("%s has rank %d; at most %d" % (name, t.dim(), MAX_RANK), 2)
    v = Tensor()
    v.data, v.dtype, v.rank = t.data_ptr(), _CODES[t.dtype], t.dim()
    for i in range(t.dim()):
        v.shape[i], v.strides[i] = t.shape[i], t.stride(i)
    return v


def _half_mask(m):
    """A mask beside a 16-bit query: bool as it is, a float one widened to
    float32 (exactly), which the library takes there."""
    return None if m is None else m if m.dtype == torch.bool else m.detach().float()


class _SDPA16(torch.autograd.Function):
    """16-bit queries (float16 or bfloat16), or bfloat16 keys or values
    beside a float32 query, passed by data pointer: the library computes in
    float32 and rounds out, and each gradient, once to the tensor's own
    dtype (beside a float32 query it gives them in float32: rounded here)."""
    @staticmethod
    def forward(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale):
        seed = _seed(dropout_p)
        m = _half_mask(attn_mask)
        out = torch.empty(_core._out_shape(q, k, v), dtype=q.dtype)
        lse = torch.empty(out.shape[:-1], dtype=torch.float32)
        views = [_tview(t, n) for t, n in ((out, "out"), (lse, "lse"), (q, "query"), (k, "key"), (v, "value"))]
        mv = _tview(m, "attn_mask") if m is not None else None
        o = _core._options(bool(is_causal), scale, mv, dropout_p, seed)
        err = Error()
        _core.raise_for(LIB.attn_sdpa(views[0], views[1], None, views[2], views[3], views[4], o, err), err)
        ctx.save_for_backward(q, k, v, out, lse, attn_mask)
        ctx.settings = (bool(is_causal), scale, dropout_p, seed)
        return out

    @staticmethod
    @_differentiable_once
    def backward(ctx, dout):
        q, k, v, out, lse, mask = ctx.saved_tensors
        causal, scale, dropout_p, seed = ctx.settings
        need = ctx.needs_input_grad
        want_dmask = bool(need[3]) and mask is not None and mask.dtype != torch.bool
        # beside a 16-bit q each gradient is its tensor's dtype; beside a
        # float32 q the library gives float32 ones (attn.h), rounded below
        own = q.dtype in _HALF
        grads = [torch.empty(t.shape, dtype=t.dtype if own else q.dtype) if w else None
                 for t, w in zip((q, k, v), need[:3])]
        dmask = torch.empty(mask.shape, dtype=torch.float32) if want_dmask else None
        if all(g is None for g in grads) and dmask is None:
            return (None,) * 7
        m = _half_mask(mask)
        mv = _tview(m, "attn_mask") if m is not None else None
        o = _core._options(causal, scale, mv, dropout_p, seed)
        dout = dout.to(q.dtype)
        outs = [_tview(g, n) if g is not None else None for g, n in zip(grads + [dmask], ("dq", "dk", "dv", "dmask"))]
        ins = [_tview(t, n) for t, n in ((dout, "dout"), (q, "query"), (k, "key"), (v, "value"), (out, "out"),
                                         (lse, "lse"))]
        err = Error()
        _core.raise_for(LIB.attn_sdpa_backward(*[ctypes.byref(t) if t is not None else None for t in outs],
                                               *[ctypes.byref(t) for t in ins], ctypes.byref(o), ctypes.byref(err)), err)
        grads = [g.to(t.dtype) if g is not None else None for g, t in zip(grads, (q, k, v))]
        return grads[0], grads[1], grads[2], dmask.to(mask.dtype) if want_dmask else None, None, None, None


class _SDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale):
        seed = _seed(dropout_p)
        out, lse = _core.sdpa(_wide(q, "query"), _np(k, "key"), _np(v, "value"), mask=_wide(attn_mask, "attn_mask"),
                              causal=bool(is_causal), scale=scale, return_lse=True, dropout_p=dropout_p, seed=seed)
        out_t, lse_t = torch.from_numpy(out), torch.from_numpy(lse)  # float16's kept in float32 for the backward
        ctx.save_for_backward(q, k, v, out_t, lse_t, attn_mask)
        ctx.settings = (bool(is_causal), scale, dropout_p, seed)
        return out_t.to(q.dtype)

    @staticmethod
    @_differentiable_once
    def backward(ctx, dout):
        q, k, v, out, lse, mask = ctx.saved_tensors
        causal, scale, dropout_p, seed = ctx.settings
        need = ctx.needs_input_grad
        want = tuple(n for n, w in zip(("dq", "dk", "dv"), need[:3]) if w)
        want_dmask = bool(need[3]) and mask is not None and mask.dtype != torch.bool
        if not want and not want_dmask:
            return (None,) * 7
        res = _core.sdpa_backward(_wide(dout, "dout"), _wide(q, "query"), _np(k, "key"), _np(v, "value"),
                                  _np(out, "out"), _np(lse, "lse"), mask=_wide(mask, "attn_mask"), causal=causal,
                                  scale=scale, dropout_p=dropout_p, seed=seed, want=want, want_dmask=want_dmask)
        grads = [_like(g, t) if g is not None and n in want else None
                 for g, n, t in zip(res[:3], ("dq", "dk", "dv"), (q, k, v))]
        dmask = _like(res[3], mask) if want_dmask else None
        return grads[0], grads[1], grads[2], dmask, None, None, None


def _empty_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """Attention over inputs with a dimension of size 0 (an empty batch, no
    queries, no keys, or E, Ev or heads of 0): torch's own math on them. The
    library takes L, S or a batch of 0 (attn.h, since 0.4.0) but refuses a 0
    at E, Ev or the heads, which torch takes; one path for every 0 gives each
    torch's result and autograd's gradients of the inputs' shapes: empty, or
    zeros where there are queries but no key (S = 0: softmax over no key
    times no value, as the library's out 0 gives it), a row no key may reach
    0 as the library gives it. Costs nothing: some dimension is 0."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not t.is_floating_point():
            raise _core.DtypeError("%s is %s: float32, float64, float16 or bfloat16" % (name, t.dtype), 6)
    wide = torch.promote_types(query.dtype, torch.float32)  # CPU matmul of 16-bit types: not in every torch
    q, k, v = (t.to(wide) for t in (query, key, value))
    # GQA, as the library groups: whenever Hk divides Hq, 0 included (a query
    # of 0 heads beside keys of 2: no heads, as torch's grouping gives)
    if q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] and k.shape[-3] != q.shape[-3] and \
            q.shape[-3] % k.shape[-3] == 0:
        k, v = (t.repeat_interleave(q.shape[-3] // k.shape[-3], -3) for t in (k, v))
    s = q @ k.transpose(-2, -1)  # E = 0: zeros, as torch's scaled q and k give (no 0 * inf)
    if q.shape[-1]:
        s = s * (scale if scale is not None else q.shape[-1] ** -0.5)
    L, S = s.shape[-2], s.shape[-1]
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(wide)
    w = torch.softmax(s, -1).masked_fill(torch.isneginf(s).all(-1, keepdim=True), 0.0)
    if dropout_p:
        w = torch.dropout(w, float(dropout_p), True)
    return (w @ v).to(query.dtype)


def _check_empty(query, key, value, attn_mask, is_causal, scale):
    """The library's checks on a call with a dimension of size 0, which
    _empty_sdpa computes with torch's math: that took an integer or complex
    mask, keys of another dtype than the query's, a mask past rank 5, and
    said E or S disagreeing in torch's words ("Expected size for first two
    dimensions of batch2 tensor"), where the same call on data raises the
    library's MaskError, DtypeError, RankError or ShapeError: passed or
    failed, and with another error, by the shape alone. Checked by the
    library on stand-ins: each tensor's dtype, device and rank, every 0 made
    one size that no input uses (so a 0 beside a 1 broadcasts, and beside
    any other size disagrees, as on data), and L and S made 1 where the mask
    agrees with them (a few values, all stride 0: no memory, next to no
    work)."""
    def dim(t, i):
        return t.shape[i] if t.dim() >= -i else None
    m = attn_mask
    S = dim(key, -2)
    one_s = S is not None and dim(value, -2) == S and (m is None or dim(m, -1) in (None, S, 1))
    one_l = dim(query, -2) is not None and (m is None or dim(m, -2) in (None, dim(query, -2), 1))

    # Each 0 becomes one size of at least 2 that no input uses: equal sizes
    # stay equal, unequal unequal, and a 1 still broadcasts against it (made
    # 1, a 0 passed beside a 1, or beside a size it cannot broadcast against,
    # and torch's math then said so in its own words).
    used = {n for t in (query, key, value, m) if t is not None for n in t.shape}
    zero = next(n for n in range(2, len(used) + 3) if n not in used)
    # query heads of 0 over key heads that divide them (_check_gqa let them
    # through): the key's heads, which group over themselves
    q_heads = key.shape[-3] if query.dim() >= 3 and key.dim() >= 3 and not query.shape[-3] and key.shape[-3] \
        else None

    def stand_in(t, rows_one, cols_one, heads=None):
        shape = [n if n else zero for n in t.shape]
        if heads is not None:
            shape[-3] = heads
        if rows_one and t.dim() >= 2:
            shape[-2] = 1
        if cols_one and t.dim() >= 1:
            shape[-1] = 1
        return torch.zeros((), dtype=t.dtype, device=t.device).expand(shape)
    q, k, v = stand_in(query, one_l, False, q_heads), stand_in(key, one_s, False), stand_in(value, one_s, False)
    mask = stand_in(m, one_l, one_s) if m is not None else None
    try:
        with torch.no_grad():
            scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=True)
    except _core.AttnError as e:  # its shapes are the stand-ins': said so
        if (q.shape, k.shape, v.shape, None if m is None else mask.shape) == \
                (query.shape, key.shape, value.shape, None if m is None else m.shape):
            raise
        # what was taken for what: L and S are made 1 only where the inputs agree on them
        taken = "each size of 0 taken as %d%s%s" % (zero, "".join(", %s as 1" % n for n, one in (("L", one_l),
                                                                                              ("S", one_s)) if one),
                                                     ", query's heads as key's" if q_heads is not None else "")
        raise type(e)("%s (checked with %s: query %s, key %s, value %s%s)"
                      % (e, taken, tuple(query.shape), tuple(key.shape), tuple(value.shape),
                         "" if m is None else ", attn_mask %s" % (tuple(m.shape),)), e.status) from None


def _heads(t):
    return t.shape[-3] if t.dim() >= 3 else 1


def _over_heads(t, heads):
    """t (..., 1, n, d), or (n, d), expanded to `heads` heads: a view."""
    t = t if t.dim() >= 3 else t.unsqueeze(0)
    return t.expand(*t.shape[:-3], heads, *t.shape[-2:])


def _broadcast_heads(query, key, value):
    """Heads of size 1 broadcast against the others', as torch's matmuls
    broadcast them (a query of one head over keys of several, keys of one
    head beside values of several): the library groups query heads over
    key heads (Hq a multiple of Hk, Hk = Hv) and refused these with a
    HeadsError. Views, no copies; autograd sums each gradient back."""
    if key.dim() < 3 and value.dim() < 3:
        return query, key, value
    hk, hv = _heads(key), _heads(value)
    if hk != hv and 1 in (hk, hv):
        key, value = (_over_heads(t, max(hk, hv)) if _heads(t) == 1 else t for t in (key, value))
        hk = hv = max(hk, hv)
    if _heads(query) == 1 and hk != 1:  # over keys of 0 heads too: an empty output, as torch's matmuls give
        query = _over_heads(query, hk)
    return query, key, value


def _check_gqa(query, key, value, enable_gqa):
    """torch 2.5's rule: key and value have query's number of heads (dimension
    -3), or 1 (broadcast), unless enable_gqa, when Hk need only divide Hq
    (which the library checks: HeadsError)."""
    if query.dim() < 3:
        return
    hq = query.shape[-3]
    for name, t in (("key", key), ("value", value)):
        if t.dim() >= 3 and t.shape[-3] not in (hq, 1):
            # no heads beside a query's heads: hq % 0 raised ZeroDivisionError
            # (a query of one head broadcasts over them: _broadcast_heads)
            if (not t.shape[-3] and hq != 1) or (t.shape[-3] and hq % t.shape[-3]):  # enable_gqa would not help: it was offered all the same
                raise _core.HeadsError("%s has %d heads and query %d: query's heads must be a multiple of %s's"
                                       % (name, t.shape[-3], hq, name), 5)
            if enable_gqa:
                continue
            raise _core.HeadsError("%s has %d heads and query %d: pass enable_gqa=True for grouped-query attention "
                                   "(torch's rule since 2.5)" % (name, t.shape[-3], hq), 5)


@_raises_as_torch
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention on libattn, CPU tensors,
    with torch 2.5's signature: query (..., Hq, L, E), key (..., Hk, S, E),
    value (..., Hk, S, Ev); Hk is Hq or 1 (broadcast), or, with enable_gqa=True,
    any divisor of Hq (grouped-query attention; a HeadsError otherwise, where
    torch raises its own error); a query of one head (or of rank 2)
    broadcasts over Hk heads, and keys of one head over the values' heads
    (or the reverse), as torch's matmuls broadcast them; attn_mask bool (True takes part) or additive
    float (an integer mask is a MaskError, as PyTorch refuses it);
    is_causal is top-left, and may come with an attn_mask (both apply: the
    library's rule; torch raises RuntimeError for the pair, so code that
    must also run on torch passes one or the other); a dimension of size 0 (an empty batch, no
    queries, no keys, or E, Ev or heads of 0, which the library refuses) goes through torch's
    own math, as torch gives it: empty, or out 0 for queries without a key. Differentiable in query, key, value and a float
    attn_mask; float64 and float32 (key and value may be float16, or beside a
    float32 query bfloat16, by data pointer, dk and dv in their dtype), and
    float16 and bfloat16 queries (keys and values float32, float16 or
    bfloat16), passed to the library by data pointer, computed in float32
    and rounded once: the output and each gradient come back in their
    tensor's dtype."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):  # as torch says it (query.dim() below raised AttributeError)
            raise TypeError("scaled_dot_product_attention(): %s must be a torch.Tensor, not %s"
                            % (name, type(t).__name__))
    # A NumPy mask reached the 16-bit and size-0 paths, which called its
    # .detach() or .to() (AttributeError); the others said "attn_mask must be
    # a torch.Tensor". Said here, for every path.
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise TypeError("scaled_dot_product_attention(): attn_mask must be a torch.Tensor or None, not %s"
                        % type(attn_mask).__name__)
    # read by truthiness, enable_gqa="no" (or "False") grouped the heads,
    # silently; torch's own takes a bool alone
    if not isinstance(enable_gqa, (bool, np.bool_)):
        raise TypeError("scaled_dot_product_attention(): enable_gqa must be a bool, not %s" % type(enable_gqa).__name__)
    query, key, value = _broadcast_heads(query, key, value)
    _check_gqa(query, key, value, enable_gqa)
    # torch's own takes a bool alone: is_causal="bottom-right" was true, and so
    # top-left, silently; a number went through _real's words, not float()'s
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError("is_causal must be a bool (True: top-left, as torch's), not %s; for bottom-right, "
                        "attn.sdpa(..., causal='bottom-right')" % type(is_causal).__name__)
    # The library's rule for every shape: a size-0 input took torch's own
    # dropout, which raises RuntimeError for NaN or p > 1, so the same call
    # passed or failed, and with another error, by the shape alone.
    p = _core._real(dropout_p, "dropout_p")
    if not 0 <= p <= 1:
        raise _core.OptionError("dropout_p is %g; it must be from 0 to 1" % p, 9)
    if 0 in query.shape or 0 in key.shape or 0 in value.shape:
        _check_empty(query, key, value, attn_mask, is_causal, scale)
        return _empty_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale)
    # bfloat16 keys or values beside a float32 query, which the library takes
    # (attn.h, attn_sdpa): NumPy cannot view them, and they were refused
    if query.dtype in _HALF or (query.dtype == torch.float32 and torch.bfloat16 in (key.dtype, value.dtype)):
        return _SDPA16.apply(query, key, value, attn_mask, float(dropout_p), is_causal, scale)
    return _SDPA.apply(query, key, value, attn_mask, float(dropout_p), is_causal, scale)


# ---------------------------------------------------------------------------
# The multi-head layer.

def _mha_params(mod, arrays, keep):
    """attn_mha_params over the module's NumPy views, or a bfloat16
    tensor's own memory (keep holds the views)."""
    p = default(MhaParams)
    p.embed_dim, p.num_heads, p.num_kv_heads = mod.embed_dim, mod.num_heads, 0
    p.kdim, p.vdim = mod.kdim, mod.vdim
    for name, a in arrays.items():
        t = _tview(a, name) if isinstance(a, torch.Tensor) else _core.view(a)
        keep += [a, t]
        setattr(p, name, ctypes.pointer(t))
    return p


def _param_arrays(tensors):
    """The module's parameters as NumPy views, by attn_mha_params' names (a
    packed in_proj_bias beside separate weights too: the library splits it).
    A bfloat16 parameter, which NumPy cannot view, stays a tensor, passed by
    its data pointer: the library takes bf16 weights in an f32 layer
    (attn.h, attn_mha), and a module .bfloat16()'d was refused."""
    return {n: t.detach() if t.dtype == torch.bfloat16 else _np(t, n)
            for n, t in tensors.items() if t is not None and n in MHA_PARAMS}


def _mha_options(mod, kpm, attn_mask, average, keep, dropout_p, seed, dtype):
    """attn_mha_options for inputs of `dtype`; keep holds what it points to.
    A float mask of another float dtype is converted to the inputs' (the
    library takes bool or the inputs' dtype), as torch's module adds a
    float64 or float16 mask to float32 scores: it was a MaskError."""
    o = default(MhaOptions)
    o.batch_first, o.add_zero_attn, o.average_attn_weights = int(mod.batch_first), int(mod.add_zero_attn), int(average)
    for name, m in (("key_padding_mask", kpm), ("attn_mask", attn_mask)):
        if m is not None:
            a = _core.mask_array(m, name)
            if a.dtype != np.bool_ and a.dtype != dtype:
                a = a.astype(dtype)
            t = _core.view(a)
            keep += [a, t]
            setattr(o, name, ctypes.pointer(t))
    if dropout_p:
        so = default(SdpaOptions)
        so.dropout_p, so.dropout_seed = dropout_p, seed
        keep.append(so)
        o.attention = ctypes.pointer(so)
    return o


def _mask_np(m, name):
    """A module's mask as NumPy: a bfloat16 one, which NumPy cannot view, as
    float32 (exactly), then converted to the inputs' dtype as a float16 or
    float64 one is (_mha_options), as torch's module takes it: it was a
    DtypeError ("convert it to float32")."""
    return _np(m.detach().float() if isinstance(m, torch.Tensor) and m.dtype == torch.bfloat16 else m, name)


class _MHA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mod, query, key, value, kpm, attn_mask, need_weights, average, dropout_p, *params):
        tensors = dict(zip(mod._param_names, params))
        seed = _seed(dropout_p)
        keep, arrays = [], _param_arrays(tensors)
        qa, ka, va = _np(query, "query"), _np(key, "key"), _np(value, "value")
        m1, m2 = _mask_np(kpm, "key_padding_mask"), _mask_np(attn_mask, "attn_mask")
        p, o = _mha_params(mod, arrays, keep), _mha_options(mod, m1, m2, average, keep, dropout_p, seed, qa.dtype)
        out = np.empty(qa.shape, qa.dtype)
        w = mod._weights_array(qa, ka, average) if need_weights else None
        err = Error()
        views = [_core.view(a) for a in (out, qa, ka, va)]
        wv = _core.view(w) if w is not None else None
        _core.raise_for(LIB.attn_mha(ctypes.byref(views[0]), ctypes.byref(wv) if wv is not None else None,
                                     *[ctypes.byref(t) for t in views[1:]], ctypes.byref(p), ctypes.byref(o),
                                     ctypes.byref(err)), err)
        ctx.mod, ctx.settings = mod, (kpm, attn_mask, average, dropout_p, seed)
        ctx.save_for_backward(query, key, value, *params)
        w_t = torch.from_numpy(w) if w is not None else torch.empty(0, dtype=query.dtype)
        ctx.mark_non_differentiable(w_t)
        return torch.from_numpy(out), w_t

    @staticmethod
    @_differentiable_once
    def backward(ctx, dout, _dweights):
        mod, (kpm, attn_mask, average, dropout_p, seed) = ctx.mod, ctx.settings
        # attn_mha_backward has no mask gradient: a float mask that needs one
        # (a learned bias passed as attn_mask, which torch's module trains)
        # got None, silently. Said instead, before any work.
        for name, needed in (("key_padding_mask", ctx.needs_input_grad[4]), ("attn_mask", ctx.needs_input_grad[5])):
            if needed:
                raise RuntimeError("attn.torch.MultiheadAttention computes no gradient for a float %s "
                                   "(attn_mha_backward has none): detach it, or add it through "
                                   "attn.torch.scaled_dot_product_attention, whose attn_mask has one" % name)
        query, key, value, *params = ctx.saved_tensors
        tensors = dict(zip(mod._param_names, params))
        keep, arrays = [], _param_arrays(tensors)
        p = _mha_params(mod, arrays, keep)
        xs = [_np(t, n) for t, n in ((query, "query"), (key, "key"), (value, "value"))]
        o = _mha_options(mod, _mask_np(kpm, "key_padding_mask"), _mask_np(attn_mask, "attn_mask"), average, keep,
                         dropout_p, seed, xs[0].dtype)
        # A 16-bit parameter's gradient is accumulated in the inputs' dtype (the
        # library takes no 16-bit gradient: it refused float16 ones, so that a
        # module .half()'d beside float32 inputs ran forward but not backward),
        # then rounded once to the parameter's dtype below.
        wide = {torch.float16: query.dtype, torch.bfloat16: query.dtype}
        grads = {n: torch.zeros_like(t, dtype=wide.get(t.dtype, t.dtype)) for n, t in tensors.items() if t is not None}
        garrays = _param_arrays(grads)
        g = _mha_params(mod, garrays, keep)
        dxs = [np.empty(a.shape, a.dtype) for a in xs]
        err = Error()
        views = [_core.view(a) for a in dxs + [_np(dout, "dout")] + xs]
        _core.raise_for(LIB.attn_mha_backward(*[ctypes.byref(t) for t in views[:3]], ctypes.byref(g),
                                              *[ctypes.byref(t) for t in views[3:]], ctypes.byref(p), ctypes.byref(o),
                                              ctypes.byref(err)), err)
        pgrads = [grads[n].to(tensors[n].dtype) if tensors.get(n) is not None else None for n in mod._param_names]
        return (None, *[torch.from_numpy(d) for d in dxs], None, None, None, None, None, *pgrads)


class MultiheadAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention on libattn (attn_mha): the same constructor,
    parameters and state_dict keys, and forward(query, key, value,
    key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False; is_causal without attn_mask
    applies a top-left causal mask, where torch needs attn_mask with it).
    Differences: a query whose every key is masked gives out_proj's bias
    (PyTorch: NaN), and the returned weights carry no gradient, nor does a
    float attn_mask or key_padding_mask (a backward that needs one raises
    RuntimeError). Parameters may be float16 or bfloat16 beside float32
    inputs (a module .half()'d or .bfloat16()'d; attn_mha's 16-bit weights,
    bfloat16 ones on its bf16 products), each gradient computed in float32
    and rounded once to its parameter's dtype."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first, self.add_zero_attn = batch_first, add_zero_attn
        if embed_dim % num_heads:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.head_dim = embed_dim // num_heads
        P = torch.nn.Parameter
        if self._qkv_same_embed_dim:
            self.in_proj_weight = P(torch.empty((3 * embed_dim, embed_dim), **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = P(torch.empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = P(torch.empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = P(torch.empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = P(torch.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = torch.nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k, self.bias_v = P(torch.empty((1, 1, embed_dim), **kw)), P(torch.empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self):  # as torch.nn.MultiheadAttention does
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                torch.nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            torch.nn.init.constant_(self.in_proj_bias, 0.0)
            torch.nn.init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                torch.nn.init.xavier_normal_(b)

    _param_names = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                    "out_proj_weight", "out_proj_bias", "bias_k", "bias_v")

    def _params(self):
        return (self.in_proj_weight, self.in_proj_bias, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight,
                self.out_proj.weight, self.out_proj.bias, self.bias_k, self.bias_v)

    def _weights_array(self, q, k, average):
        batched = q.ndim == 3
        n = (q.shape[0] if self.batch_first else q.shape[1]) if batched else None
        L = (q.shape[1] if self.batch_first else q.shape[0]) if batched else q.shape[0]
        S = (k.shape[1] if self.batch_first else k.shape[0]) if batched else k.shape[0]
        S += (self.bias_k is not None) + bool(self.add_zero_attn)
        shape = ((n,) if batched else ()) + (() if average else (self.num_heads,)) + (L, S)
        return np.empty(shape, q.dtype)

    @_raises_as_torch
    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if is_causal and attn_mask is None:
            L = query.shape[1 if self.batch_first and query.dim() == 3 else 0]
            attn_mask = torch.ones(L, key.shape[1 if self.batch_first and key.dim() == 3 else 0],
                                   dtype=torch.bool).triu(1)
        dropout_p = self.dropout if self.training else 0.0
        out, w = _MHA.apply(self, query, key, value, key_padding_mask, attn_mask, bool(need_weights),
                            bool(average_attn_weights), float(dropout_p), *self._params())
        return out, (w if need_weights else None)

