#!/usr/bin/python3
"""oracle_mha.py -- attn_mha against torch.nn.MultiheadAttention in float64.

Also the layer's batched decoding step over rows of a contiguous f64 cache
(attn_mha_cached_batch), each row at its own length, and attn_mha_cached
with attn_mask and key_padding_mask over the cached keys, against the same
layer written in PyTorch on each sequence's whole length.

Builds a module with random parameters for each case (packed or separate
projections, biases, add_bias_kv, add_zero_attn, kdim/vdim for
cross-attention, batch_first, unbatched input), runs its forward with
key_padding_mask and attn_mask of every kind, need_weights with and without
averaging, and calls attn_mha through ctypes (the C API, no command in between)
with the module's own state_dict tensors. GQA and causal masks, which the
module has not, are checked against the same computation written in PyTorch
(F.linear, repeat_interleave, softmax). A row whose every key is masked is
NaN in PyTorch and out_proj's bias in attn: both sides are checked.
Dropout (options->attention's) against the same layer in PyTorch with
attn_sdpa_dropout_mask's mask over the heads, forward, weights and backward,
and attn_mha_cached's steps with the mask over each step's own queries.

Tolerances: f64 1e-12 · max |ref|. f32 (projections summed in f32, f32
attention): the module's small cases 1e-5 · max |ref|, and the GQA layers at
E = 256 (f32_case) within a bound derived to first order in u = 2^-24,
elementwise from the case's own f64 intermediates (f32_bound), worst case:
  projections  dq <= (in + 4) u (|x| |W|^T + |b|)   (x and W rounded to f32,
               then a recursive f32 sum of `in` products and the bias); dk, dv
  scores       ds <= scale (dq |k|^T + |q| dk^T) + (D + 2) u scale |q| |k|^T
  heads        dh_i <= sum_j p_ij (dv_j + ds_ij |v_j - h_i|) + 8 u max|v|
               (the softmax's first-order change moves h_i by
               sum_j p_ij (ds_ij - sum_k p_ik ds_ik) v_j = sum_j p_ij ds_ij (v_j - h_i);
               the kernel's exp2, sum and division add a few u)
  out          dout <= dh |W_o|^T + (E + 4) u (|h| |W_o|^T + |b_o|).
The sinks' gradient, per head, within attn.h's bound for
attn_sdpa_sinks_backward (oracle_backward's), taken from the layer's own
attention inputs (sinks_check): f64 1e-12 · dsinks_abs_h, f32 ((1 + 4.3e-5)
e^x - 1) · dsinks_abs_h + 2^-126, relative to |dout| P|v| rather than to
|dout||out|, so that values that cancel to an out near 0 are held to it too;
f32 where the layer's projections are exact (cancelling_sinks_case), and
where they round (rounded_sinks_case): attn.h's bound on the layer's own
q, k, v and dheads, plus the reference's dsinks moved by their rounding, to
first order in u (sinks_check derives it).

Usage: oracle_mha.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import ctypes
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from oracle_rope import Error, RopeOptions, Tensor, view
from attn._lib import SdpaOptions  # noqa: E402  (oracle_rope put python/ on the path)
from oracle_rope import reference as rope_reference
from oracle_backward import compare as compare_within, sink_bound, sink_magnitudes, variant_scores
from torch_attention import Reporter, causal_allowed, oracle_args

P = ctypes.POINTER(Tensor)


class Params(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("embed_dim", ctypes.c_int64), ("num_heads", ctypes.c_int64),
                ("num_kv_heads", ctypes.c_int64), ("kdim", ctypes.c_int64), ("vdim", ctypes.c_int64)] + \
               [(n, P) for n in ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                                 "q_proj_bias", "k_proj_bias", "v_proj_bias", "out_proj_weight", "out_proj_bias",
                                 "bias_k", "bias_v", "sinks")]


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("batch_first", ctypes.c_int), ("add_zero_attn", ctypes.c_int),
                ("key_padding_mask", P), ("attn_mask", P), ("causal", ctypes.c_int),
                ("average_attn_weights", ctypes.c_int), ("context", ctypes.c_void_p),
                ("rope", ctypes.POINTER(RopeOptions)), ("attention", ctypes.c_void_p)]


BOOL = 3


def defaults_of(lib, name, cls):
    """A function returning a cls holding the library's defaults (name_init)."""
    init = getattr(lib, name + "_init")
    init.restype, init.argtypes = ctypes.c_size_t, [ctypes.POINTER(cls), ctypes.c_size_t]

    def default():
        x = cls()
        init(ctypes.byref(x), ctypes.sizeof(x))
        return x
    return default


class Oracle(Reporter):
    def __init__(self, build):
        super().__init__()
        self.lib = ctypes.CDLL(os.path.join(build, "libattn.so"))
        # X_default() is a macro of attn.h over the exported X_init(&x, sizeof x)
        # ("Versioned structs"): the same here, at these ctypes structs' sizes.
        for name, cls in (("attn_mha_params", Params), ("attn_mha_options", Options), ("attn_rope_options", RopeOptions),
                          ("attn_sdpa_options", SdpaOptions)):
            setattr(self.lib, name + "_default", defaults_of(self.lib, name, cls))
        self.keep = []  # arrays and tensors the structs point to, alive during a call

    def tensor(self, a):
        if a is None:
            return None
        a = np.ascontiguousarray(a) if not isinstance(a, np.ndarray) else a
        self.keep.append(a)
        t = view(a)
        if a.dtype == np.bool_:
            t.dtype = BOOL
        self.keep.append(t)
        return ctypes.pointer(t)

    def params(self, state, embed_dim, heads, kv_heads=0, kdim=0, vdim=0):
        """An attn_mha_params holding the dict of parameter arrays (kept alive in self.keep)."""
        p = self.lib.attn_mha_params_default()
        p.embed_dim, p.num_heads, p.num_kv_heads, p.kdim, p.vdim = embed_dim, heads, kv_heads, kdim, vdim
        for name, a in state.items():
            setattr(p, name, self.tensor(a))
        return p

    def run(self, query, key, value, state, heads, kv_heads=0, kdim=0, vdim=0, batch_first=False, zero_attn=False,
            kpm=None, attn_mask=None, causal=0, want_weights=False, average=True, rope=None, attention=None):
        """attn_mha on numpy inputs and a dict of parameter arrays: (status, message, out, weights).
        attention: an attn_sdpa_options for options->attention, or None."""
        self.keep = []
        p = self.params(state, query.shape[-1], heads, kv_heads, kdim, vdim)
        o = self.lib.attn_mha_options_default()
        o.batch_first, o.add_zero_attn, o.causal, o.average_attn_weights = batch_first, zero_attn, causal, average
        o.key_padding_mask, o.attn_mask = self.tensor(kpm), self.tensor(attn_mask)
        if rope:  # (layout, base, rotary_dim, offset)
            r = self.lib.attn_rope_options_default()
            r.layout, r.base, r.rotary_dim, r.position_offset = rope
            self.keep.append(r)
            o.rope = ctypes.pointer(r)
        if attention is not None:
            self.keep.append(attention)
            o.attention = ctypes.addressof(attention)
        out = np.zeros(query.shape, query.dtype)
        w = None
        if want_weights:
            N = query.shape[0 if batch_first else 1] if query.ndim == 3 else None
            L = query.shape[1 if batch_first else 0] if query.ndim == 3 else query.shape[0]
            S2 = key.shape[1 if batch_first else 0] if key.ndim == 3 else key.shape[0]
            S2 += ("bias_k" in state) + bool(zero_attn)
            shape = ((N,) if N is not None else ()) + (() if average else (heads,)) + (L, S2)
            w = np.zeros(shape, query.dtype)
        err = Error()
        st = self.lib.attn_mha(ctypes.byref(view(out)), ctypes.byref(view(w)) if w is not None else None,
                               ctypes.byref(view(query)), ctypes.byref(view(key)), ctypes.byref(view(value)),
                               ctypes.byref(p), ctypes.byref(o), ctypes.byref(err))
        return st, err.message.decode(), out, w

    def run_backward(self, dout, query, key, value, state, heads, kv_heads=0, kdim=0, vdim=0, batch_first=False,
                     zero_attn=False, kpm=None, attn_mask=None, causal=0, rope=None, variants=None, attention=None):
        """attn_mha_backward: (status, message, {name: gradient}) for the inputs and every parameter.
        variants: the attention's score variants (softcap, slopes, window), as options->attention."""
        self.keep = []
        p = self.lib.attn_mha_params_default()
        p.embed_dim, p.num_heads, p.num_kv_heads, p.kdim, p.vdim = query.shape[-1], heads, kv_heads, kdim, vdim
        g = self.lib.attn_mha_params_default()
        grads = {}  # NaN until written: every gradient must be written, the 0s of an empty call too
        for name, a in state.items():
            setattr(p, name, self.tensor(a))
            grads[name] = np.full_like(a, np.nan)
            setattr(g, name, self.tensor(grads[name]))
        o = self.lib.attn_mha_options_default()
        o.batch_first, o.add_zero_attn, o.causal = batch_first, zero_attn, causal
        o.key_padding_mask, o.attn_mask = self.tensor(kpm), self.tensor(attn_mask)
        if rope:
            r = self.lib.attn_rope_options_default()
            r.layout, r.base, r.rotary_dim, r.position_offset = rope
            self.keep.append(r)
            o.rope = ctypes.pointer(r)
        if variants:
            a = self.lib.attn_sdpa_options_default()
            a.softcap, a.window = variants.get("softcap", 0.0), variants.get("window", 0)
            if variants.get("slopes") is not None:
                a.alibi_slopes = self.tensor(np.asarray(variants["slopes"], np.float64))
            self.keep.append(a)
            o.attention = ctypes.addressof(a)
        if attention is not None:
            self.keep.append(attention)
            o.attention = ctypes.addressof(attention)
        for n, a in (("query", query), ("key", key), ("value", value)):
            grads[n] = np.full_like(a, np.nan)
        err = Error()
        st = self.lib.attn_mha_backward(*(ctypes.byref(view(grads[n])) for n in ("query", "key", "value")),
                                        ctypes.byref(g), ctypes.byref(view(dout)), ctypes.byref(view(query)),
                                        ctypes.byref(view(key)), ctypes.byref(view(value)), ctypes.byref(p),
                                        ctypes.byref(o), ctypes.byref(err))
        return st, err.message.decode(), grads

    def compare(self, name, got, ref, tol, floor=0.0):
        """'' when max |got - ref| <= tol · max(max |ref|, floor), else why not."""
        ref = np.asarray(ref)
        big = max(float(np.abs(ref).max()) if ref.size else 0.0, floor, 1e-300)
        err = float(np.abs(got - ref).max()) if ref.size else 0.0
        return "" if err <= tol * big else "%s: error %.3g > %.3g" % (name, err, tol * big)


def module_state(mha, dtype):
    """The module's parameters as attn_mha_params names them (numpy, dtype); the
    packed in_proj_bias split when the weights are separate."""
    sd = {k: v.detach().numpy().astype(dtype) for k, v in mha.state_dict().items()}
    state = {"out_proj_weight": sd["out_proj.weight"]}
    if "out_proj.bias" in sd:
        state["out_proj_bias"] = sd["out_proj.bias"]
    if "in_proj_weight" in sd:
        state["in_proj_weight"] = sd["in_proj_weight"]
        if "in_proj_bias" in sd:
            state["in_proj_bias"] = sd["in_proj_bias"]
    else:
        E = mha.embed_dim
        for i, t in enumerate("qkv"):
            state["%s_proj_weight" % t] = sd["%s_proj_weight" % t]
            if "in_proj_bias" in sd:
                state["%s_proj_bias" % t] = sd["in_proj_bias"][i * E:(i + 1) * E]
    for b in ("bias_k", "bias_v"):
        if b in sd:
            state[b] = sd[b]
    return state


def torch_attn_mask(attn_mask, causal, L, S):
    """The attn_mask to give the module for attn_mha's (attn_mask, causal): the
    causal limit over the S keys as the module's own (L, S) mask (True, or
    -inf in a float mask, ignores the key), merged with the caller's. The
    module pads it with a zero column for bias_k and for the zero key, so the
    keys it appends are visible to every query: the semantics attn_mha gives
    its causal option."""
    if not causal:
        return attn_mask
    hidden = ~causal_allowed(L, S, causal).numpy()
    if attn_mask is None:
        return hidden
    if attn_mask.dtype == np.bool_:
        return attn_mask | hidden
    return np.where(hidden, -np.inf, attn_mask)


def module_case(o, rng, name, E=16, H=4, L=5, S=7, N=3, kdim=None, vdim=None, bias=True, bias_kv=False,
                zero_attn=False, batch_first=False, unbatched=False, kpm=None, attn_mask=None, average=True,
                dtype=np.float64, causal=0):
    torch.manual_seed(int(rng.integers(1 << 30)))
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=kdim,
                                      vdim=vdim, batch_first=batch_first, dtype=torch.float64)
    kd, vd = kdim or E, vdim or E

    def shaped(n, f):
        if unbatched:
            return rng.standard_normal((n, f))
        return rng.standard_normal((N, n, f) if batch_first else (n, N, f))

    q, k, v = shaped(L, E), shaped(S, kd), shaped(S, vd)
    tk = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    with torch.no_grad():
        ref, ref_w = mha(tk(q), tk(k), tk(v), key_padding_mask=tk(kpm), need_weights=True,
                         attn_mask=tk(torch_attn_mask(attn_mask, causal, L, S)), average_attn_weights=average)
    state = module_state(mha, dtype)
    st, msg, out, w = o.run(q.astype(dtype), k.astype(dtype), v.astype(dtype), state, H, kdim=kd if kdim else 0,
                            vdim=vd if vdim else 0, batch_first=batch_first, zero_attn=zero_attn, causal=causal,
                            kpm=kpm if kpm is None or kpm.dtype == np.bool_ else kpm.astype(dtype),
                            attn_mask=attn_mask if attn_mask is None or attn_mask.dtype == np.bool_ else attn_mask.astype(dtype),
                            want_weights=True, average=average)
    if st:
        return o.report(name, "attn_mha failed: " + msg)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    o.report(name, o.compare("out", out, ref.numpy(), tol) or o.compare("weights", w, ref_w.numpy(), tol))


U32 = 2.0 ** -24


def f32_bound(q, k, v, state, H, Hkv, causal):
    """The f32 layer's error bound, elementwise and first order in u (see the
    module's docstring), for gqa_reference's layer without RoPE or masks, from
    its f64 intermediates. Returns the bound on each output element."""
    def proj(x, n):
        w, b = state[n + "_proj_weight"], state.get(n + "_proj_bias")
        y = x @ w.T + (b if b is not None else 0)
        mag = np.abs(x) @ np.abs(w).T + (np.abs(b) if b is not None else 0)
        return y, (x.shape[-1] + 4) * U32 * mag
    (qp, dq), (kp, dk), (vp, dv) = proj(q, "q"), proj(k, "k"), proj(v, "v")
    N, L, E = q.shape
    S, D, g = k.shape[1], E // H, H // Hkv
    scale = 1 / math.sqrt(D)
    heads = lambda x, h: x.reshape(N, x.shape[1], h, D).transpose(0, 2, 1, 3)  # noqa: E731
    qh, dqh = heads(qp, H), heads(dq, H)
    kh, dkh, vh, dvh = (np.repeat(heads(t, Hkv), g, axis=1) for t in (kp, dk, vp, dv))
    s = scale * qh @ kh.transpose(0, 1, 3, 2)
    ds = scale * (dqh @ np.abs(kh).transpose(0, 1, 3, 2) + np.abs(qh) @ dkh.transpose(0, 1, 3, 2)) + \
        (D + 2) * U32 * scale * np.abs(qh) @ np.abs(kh).transpose(0, 1, 3, 2)
    if causal:
        off = S - L if causal == 2 else 0
        s = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None] + off, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    h = p @ vh
    # dh_i <= sum_j p_ij (dv_j + ds_ij |v_j - h_i|) + 8 u max_j |v_j| (exp2, sum, division)
    spread = np.abs(vh[:, :, None, :, :] - h[:, :, :, None, :])  # (N, H, L, S, D)
    dh = p @ dvh + np.einsum("nhls,nhlsd->nhld", p * np.nan_to_num(ds), spread) + 8 * U32 * np.abs(vh).max(axis=2, keepdims=True)
    cat = lambda x: x.transpose(0, 2, 1, 3).reshape(N, L, E)  # noqa: E731
    wo, bo = state["out_proj_weight"], state.get("out_proj_bias")
    return cat(dh) @ np.abs(wo).T + (E + 4) * U32 * (np.abs(cat(h)) @ np.abs(wo).T + (np.abs(bo) if bo is not None else 0))


def f32_case(o, rng, name, H, Hkv, causal, E=256, L=40, S=40, N=2):
    """An f32 GQA layer large enough for the f32 GEMM's blocks (K = E spans the
    depth block, rows and columns leave partial tiles) against gqa_reference in
    f64, within f32_bound. Weights ~ N(0, 1/E), so scores stay moderate."""
    f = rng.standard_normal
    state = {n: a / (math.sqrt(E) / 4 if a.ndim == 2 else 1) for n, a in gqa_state(f, E, E // H, Hkv).items()}
    q, k, v = f((N, L, E)), f((N, S, E)), f((N, S, E))
    st, msg, out, _ = o.run(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                            {n: a.astype(np.float32) for n, a in state.items()}, H, kv_heads=Hkv, batch_first=True,
                            causal=causal)
    if st:
        return o.report(name, "attn_mha failed: " + msg)
    ref = gqa_reference(q, k, v, state, H, Hkv, causal)
    bound = f32_bound(q, k, v, state, H, Hkv, causal)
    ratio = float((np.abs(out - ref) / bound).max())
    o.report(name, "" if ratio <= 1 else "out: error %.3g of the derived bound" % ratio)


def backward_case(o, rng, name, E=16, H=4, L=5, S=7, N=3, kdim=None, vdim=None, bias=True, bias_kv=False,
                  zero_attn=False, batch_first=False, kpm=None, attn_mask=None, causal=0, unbatched=False):
    """attn_mha_backward against autograd through the module: every input and parameter.
    unbatched: inputs (L, E), (S, kdim), (S, vdim) without N."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=kdim,
                                      vdim=vdim, batch_first=batch_first, dtype=torch.float64)
    kd, vd = kdim or E, vdim or E
    shape = (lambda n, f: (N, n, f)) if batch_first else (lambda n, f: (n, N, f))
    if unbatched:
        shape = lambda n, f: (n, f)  # noqa: E731
    x = [torch.tensor(rng.standard_normal(shape(n, f)), requires_grad=True) for n, f in ((L, E), (S, kd), (S, vd))]
    tk = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    out = mha(*x, key_padding_mask=tk(kpm), attn_mask=tk(torch_attn_mask(attn_mask, causal, L, S)),
              need_weights=False)[0]
    dout = rng.standard_normal(out.shape)
    out.backward(torch.from_numpy(dout))
    state = module_state(mha, np.float64)
    st, msg, got = o.run_backward(dout, *(a.detach().numpy() for a in x), state, H, kdim=kd if kdim else 0,
                                  vdim=vd if vdim else 0, batch_first=batch_first, zero_attn=zero_attn, kpm=kpm,
                                  attn_mask=attn_mask, causal=causal)
    if st:
        return o.report(name, "attn_mha_backward failed: " + msg)
    ref = {"query": x[0].grad, "key": x[1].grad, "value": x[2].grad}
    named = dict(mha.named_parameters())
    for k in state:
        torch_name = {"out_proj_weight": "out_proj.weight", "out_proj_bias": "out_proj.bias"}.get(k, k)
        if torch_name in named:
            ref[k] = named[torch_name].grad
        else:  # a piece of the packed in_proj_bias
            i = "qkv".index(k[0])
            ref[k] = named["in_proj_bias"].grad[i * E:(i + 1) * E]
    o.report(name, compare_grads(o, got, ref))


def gqa_reference(q, k, v, state, H, Hkv, causal, rope=None, variants=None, bf16_products=False):
    """gqa_reference_t on numpy arrays: the layer's output as numpy."""
    t = {k_: torch.from_numpy(a) for k_, a in state.items()}
    xs = [torch.from_numpy(a) for a in (q, k, v)]
    return gqa_reference_t(xs, t, H, Hkv, causal, rope, variants, bf16_products).detach().numpy()


def gqa_state(f, E, D, Hkv):
    """Random separate projections for a GQA layer, as attn_mha_params names them."""
    return {"q_proj_weight": f((E, E)) / 4, "k_proj_weight": f((Hkv * D, E)) / 4, "v_proj_weight": f((Hkv * D, E)) / 4,
            "q_proj_bias": f(E), "k_proj_bias": f(Hkv * D), "v_proj_bias": f(Hkv * D),
            "out_proj_weight": f((E, E)) / 4, "out_proj_bias": f(E)}


def gqa_case(o, rng, name, H, Hkv, causal, E=24, L=6, S=9, N=2, rope=None, sinks=False):
    f = rng.standard_normal
    state = gqa_state(f, E, E // H, Hkv)
    if sinks:  # gpt-oss's learned sinks, as a parameter of the layer
        state["sinks"] = f(H) * 2
    q, k, v = f((N, L, E)), f((N, S, E)), f((N, S, E))
    st, msg, out, _ = o.run(q, k, v, state, H, kv_heads=Hkv, batch_first=True, causal=causal, rope=rope)
    ref = gqa_reference(q, k, v, state, H, Hkv, causal, rope)
    o.report(name, "attn_mha failed: " + msg if st else o.compare("out", out, ref, 1e-12))


class KvCacheDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("capacity", ctypes.c_int64), ("key_dim", ctypes.c_int64), ("value_dim", ctypes.c_int64),
                ("dtype", ctypes.c_int)]


ERR_OPTION, E4M3 = 9, 8  # attn_status and attn_dtype values


def f64_cache(lib, batch, heads, capacity, D, dtype=None):
    """An f64 KV cache (or one of another attn_dtype) in a buffer of its own:
    (cache, memory, "") or (None, None, what failed). Keep memory alive as
    long as cache."""
    d = defaults_of(lib, "attn_kv_cache_desc", KvCacheDesc)()
    d.batch, d.heads, d.capacity, d.key_dim, d.value_dim = batch, heads, capacity, D, D
    d.dtype = dtype or view(np.zeros(1)).dtype  # f64 by default
    err, size = Error(), ctypes.c_size_t()
    if lib.attn_kv_cache_bytes(ctypes.byref(size), ctypes.byref(d), ctypes.byref(err)):
        return None, None, "attn_kv_cache_bytes: " + err.message.decode()
    memory = ctypes.create_string_buffer(size.value)
    cache = ctypes.c_void_p()
    if lib.attn_kv_cache_init(ctypes.byref(cache), memory, size, ctypes.byref(d), ctypes.byref(err)):
        return None, None, "attn_kv_cache_init: " + err.message.decode()
    return cache, memory, ""


def cached_batch_case(o, rng, name, H, Hkv, E, steps, rope, B=3, capacity=32):
    """attn_mha_cached_batch in f64 over rows of an f64 cache: `steps` lists
    each step's (row, new positions) pairs; every row's outputs, step after
    step, against gqa_reference_t on the row's whole sequence with a
    bottom-right causal mask and RoPE at positions offset + t (the positions
    the step gives its rows: what the row held before, plus l)."""
    lib = o.lib
    D = E // H
    f = rng.standard_normal
    state = gqa_state(f, E, D, Hkv)
    cache, memory, why = f64_cache(lib, B, Hkv, capacity, D)
    if why:
        return o.report(name, why)
    err = Error()
    lengths = np.zeros(B, np.int64)
    xs = [np.zeros((0, E)) for _ in range(B)]  # each row's whole sequence so far
    outs = [np.zeros((0, E)) for _ in range(B)]
    I64 = ctypes.POINTER(ctypes.c_int64)
    for step in steps:
        o.keep = []
        p = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.causal = 2
        r = lib.attn_rope_options_default()
        r.layout, r.base, r.rotary_dim, r.position_offset = rope
        opts.rope = ctypes.pointer(r)
        rows = np.array([row for row, _ in step], np.int64)
        cu = np.concatenate([[0], np.cumsum([n for _, n in step])]).astype(np.int64)
        x = f((int(cu[-1]), E))
        out = np.zeros_like(x)
        st = lib.attn_mha_cached_batch(ctypes.byref(view(out)), ctypes.byref(view(x)), cu.ctypes.data_as(I64),
                                       rows.ctypes.data_as(I64), ctypes.c_int64(len(step)), cache,
                                       lengths.ctypes.data_as(I64), None, ctypes.byref(p), ctypes.byref(opts),
                                       ctypes.byref(err))
        if st:
            return o.report(name, "attn_mha_cached_batch: " + err.message.decode())
        for i, (row, _) in enumerate(step):
            xs[row] = np.concatenate([xs[row], x[cu[i]:cu[i + 1]]])
            outs[row] = np.concatenate([outs[row], out[cu[i]:cu[i + 1]]])
    why = ""
    for row in range(B):
        if len(xs[row]) != lengths[row]:
            why = why or "row %d holds %d positions but lengths says %d" % (row, len(xs[row]), lengths[row])
        if len(xs[row]) == 0:
            continue
        seq = xs[row][None]
        ref = gqa_reference(seq, seq, seq, state, H, Hkv, 2, rope)[0]
        why = why or o.compare("row %d" % row, outs[row], ref, 1e-12)
    o.report(name, why)


def cached_batch_masks_case(o, rng, name, H, Hkv, E, capacity=16):
    """attn_mha_cached_batch in f64 with a mask per sequence, which keeps
    attn_sdpa's polarity (a bool true lets the key take part, the opposite of
    the layer's attn_mask and key_padding_mask), and a float mask added: two
    rows of their own lengths, one step of a bool (L, S) mask and a float
    (Hq, L, S) one, against the layer in PyTorch on each row's whole
    sequence, bottom-right causal."""
    lib = o.lib
    D = E // H
    f = rng.standard_normal
    state = gqa_state(f, E, D, Hkv)
    t = {k: torch.from_numpy(a) for k, a in state.items()}
    cache, memory, why = f64_cache(lib, 2, Hkv, capacity, D)
    if why:
        return o.report(name, why)
    lengths = np.zeros(2, np.int64)
    I64 = ctypes.POINTER(ctypes.c_int64)
    err = Error()
    hist = [f((n, E)) for n in (4, 2)]  # rows 0 and 1 before the masked step
    keep = rng.random((3, 7)) < 0.6
    keep[:, 0] = True  # a key every query sees
    masks = [keep, f((H, 2, 4))]  # row 0: 3 new of 7; row 1: 2 new of 4
    for step, (xs, ms) in enumerate((([hist[0], hist[1]], None), ([f((3, E)), f((2, E))], masks))):
        o.keep = []
        p = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.causal = 2
        rows = np.array([0, 1], np.int64)
        cu = np.array([0, len(xs[0]), len(xs[0]) + len(xs[1])], np.int64)
        x = np.concatenate(xs)
        out = np.zeros_like(x)
        mp = (P * 2)(*[o.tensor(m) for m in ms]) if ms else None
        st = lib.attn_mha_cached_batch(ctypes.byref(view(out)), ctypes.byref(view(x)), cu.ctypes.data_as(I64),
                                       rows.ctypes.data_as(I64), ctypes.c_int64(2), cache, lengths.ctypes.data_as(I64),
                                       mp, ctypes.byref(p), ctypes.byref(opts), ctypes.byref(err))
        if st:
            return o.report(name, "step %d: attn_mha_cached_batch: %s" % (step, err.message.decode()))
    why = ""
    for row in range(2):
        new = xs[row]
        seq = torch.from_numpy(np.concatenate([hist[row], new]))[None]
        L, S = len(new), seq.shape[1]
        Q = F.linear(seq[:, -L:], t["q_proj_weight"], t["q_proj_bias"]).reshape(1, L, H, D).transpose(1, 2)
        K = F.linear(seq, t["k_proj_weight"], t["k_proj_bias"]).reshape(1, S, Hkv, D).transpose(1, 2)
        V = F.linear(seq, t["v_proj_weight"], t["v_proj_bias"]).reshape(1, S, Hkv, D).transpose(1, 2)
        K, V = K.repeat_interleave(H // Hkv, 1), V.repeat_interleave(H // Hkv, 1)
        sc = Q @ K.transpose(-2, -1) / math.sqrt(D)
        m = torch.from_numpy(masks[row])
        sc = sc.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else sc + m
        sc = sc.masked_fill(~causal_allowed(L, S, 2), float("-inf"))
        heads = (torch.softmax(sc, -1) @ V).transpose(1, 2).reshape(1, L, E)
        ref = F.linear(heads, t["out_proj_weight"], t["out_proj_bias"])[0].numpy()
        why = why or o.compare("row %d" % row, out[cu[row]:cu[row + 1]], ref, 1e-12)
    o.report(name, why)


def cached_masks_case(o, rng, name, H, Hkv, E, steps, rope, N=2, capacity=16):
    """attn_mha_cached in f64, batch_first, with attn_mask and
    key_padding_mask over the keys the cache holds after each step's append
    (S = what it held + L): each step (L, masks) against the layer written
    in PyTorch over the whole sequence so far, bottom-right causal, RoPE at
    positions offset + t, the masks with the module's polarity (a bool true
    ignores the key, a float is added)."""
    lib = o.lib
    D = E // H
    f = rng.standard_normal
    state = gqa_state(f, E, D, Hkv)
    t = {k: torch.from_numpy(a) for k, a in state.items()}
    cache, memory, why = f64_cache(lib, N, Hkv, capacity, D)
    if why:
        return o.report(name, why)
    err = Error()
    hist = np.zeros((N, 0, E))
    why = ""
    for step, (L, kinds) in enumerate(steps):
        S = hist.shape[1] + L
        x = f((N, L, E))
        am = kpm = None
        if "am_bool" in kinds:
            am = rng.random((L, S)) < 0.3
            am[:, 0] = False  # key 0: every query keeps one
        if "am_float3" in kinds:
            am = f((N * H, L, S))
        if "kpm_bool" in kinds:
            kpm = rng.random((N, S)) < 0.3
            kpm[:, 0] = False
        if "kpm_float" in kinds:
            kpm = f((N, S))
        o.keep = []
        p = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, 2
        opts.attn_mask, opts.key_padding_mask = o.tensor(am), o.tensor(kpm)
        r = lib.attn_rope_options_default()
        r.layout, r.base, r.rotary_dim, r.position_offset = rope
        opts.rope = ctypes.pointer(r)
        out = np.zeros_like(x)
        st = lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(x)), cache, ctypes.byref(p),
                                 ctypes.byref(opts), ctypes.byref(err))
        if st:
            why = "step %d: attn_mha_cached: %s" % (step, err.message.decode())
            break
        full = torch.from_numpy(np.concatenate([hist, x], 1))
        layout, base, rd, offset = rope
        Q = F.linear(torch.from_numpy(x), t["q_proj_weight"], t["q_proj_bias"]).reshape(N, L, H, D).transpose(1, 2)
        K = F.linear(full, t["k_proj_weight"], t["k_proj_bias"]).reshape(N, S, Hkv, D).transpose(1, 2)
        V = F.linear(full, t["v_proj_weight"], t["v_proj_bias"]).reshape(N, S, Hkv, D).transpose(1, 2)
        Q = rope_reference(Q, layout, base, rd, offset + S - L, 1.0)
        K = rope_reference(K, layout, base, rd, offset, 1.0)
        K, V = K.repeat_interleave(H // Hkv, 1), V.repeat_interleave(H // Hkv, 1)
        sc = (Q @ K.transpose(-2, -1) / math.sqrt(D)).masked_fill(~causal_allowed(L, S, 2), float("-inf"))
        for m_, per in ((am, None), (kpm, "kpm")):
            if m_ is None:
                continue
            tm = torch.from_numpy(m_)
            tm = tm[:, None, None, :] if per else tm.reshape(N, H, L, S) if tm.ndim == 3 else tm
            sc = sc.masked_fill(tm, float("-inf")) if m_.dtype == np.bool_ else sc + tm
        heads = (torch.softmax(sc, -1) @ V).transpose(1, 2).reshape(N, L, E)
        ref = F.linear(heads, t["out_proj_weight"], t["out_proj_bias"]).numpy()
        why = o.compare("step %d" % step, out, ref, 1e-12)
        if why:
            break
        hist = np.concatenate([hist, x], 1)
    o.report(name, why)


def gqa_backward_case(o, rng, name, H, Hkv, rope, E=16, L=6, S=6, N=2, sinks=False, variants=None, causal=2):
    """GQA (and RoPE, the sinks, the attention's score variants) gradients against autograd
    through gqa_reference_t."""
    f = rng.standard_normal
    state = gqa_state(f, E, E // H, Hkv)
    if sinks:
        state["sinks"] = f(H)
    q, k, v = f((N, L, E)), f((N, S, E)), f((N, S, E))
    o.report(name, gqa_backward_check(o, q, k, v, f((N, L, E)), state, H, Hkv, causal, rope, variants))


def gqa_backward_check(o, q, k, v, dout, state, H, Hkv, causal, rope=None, variants=None, rounded=False):
    """attn_mha_backward of a GQA layer (inputs (N, L or S, E)) against autograd
    through gqa_reference_t in f64 on the same values: '' or why not. f64: every
    gradient (compare_grads), the sinks' per head (sinks_check); f32: the sinks'
    only, for a layer whose projections f32 computes exactly (the caller's
    values), so that its attention sees the reference's inputs, or (rounded)
    one whose projections and dout W_o round, within the bound widened by
    that rounding (projection_rounding; no RoPE, no score variants)."""
    wide = lambda a: torch.tensor(np.asarray(a, np.float64), requires_grad=True)  # noqa: E731
    leaves = {n: wide(a) for n, a in state.items()}
    xs = [wide(a) for a in (q, k, v)]
    attention = {}
    out = gqa_reference_t(xs, leaves, H, Hkv, causal, rope, variants, attention=attention)
    out.backward(torch.from_numpy(np.asarray(dout, np.float64)))
    st, msg, got = o.run_backward(dout, q, k, v, state, H, kv_heads=Hkv, batch_first=True, causal=causal, rope=rope,
                                  variants=variants)
    if st:
        return "attn_mha_backward failed: " + msg
    ref = dict({n: t.grad for n, t in leaves.items()}, query=xs[0].grad, key=xs[1].grad, value=xs[2].grad)
    dsinks = ref.pop("sinks", None)
    f32 = q.dtype == np.float32
    why = "" if f32 else compare_grads(o, got, ref)
    if not why and dsinks is not None:
        rounding = projection_rounding(q, k, v, dout, state, H, Hkv) if rounded else None
        why = sinks_check(got["sinks"], dsinks.numpy(), attention, state["sinks"], f32, rounding)
    return why


def sinks_check(got, ref, attention, sinks, f32, rounding=None):
    """The layer's dsinks (H,) against autograd's: '' or why not. Per head within
    attn.h's bound for attn_sdpa_sinks_backward (oracle_backward.sink_bound),
    taken from the attention's own inputs as gqa_reference_t saved them:
    dsinks_abs_h from the weights, |v| and the attention's dout
    (sink_magnitudes: relative to |dout| P|v|, not to |dout||out|, which values
    that cancel make near 0); f32: x = (3 D + 20) 2^-24 s_abs_h, s_abs_h the
    head's largest scale · sum_e |q_e||k_e| over its rows and keys (those
    the causal mask hides too, which only widens it), |sink_h| one more score.
    The f32 x counts no score variant (f32 cases have none), and dsinks_abs
    no dropout (no case takes it with sinks).
    rounding: None where the layer's attention sees the reference's very
    inputs; else projection_rounding's bounds (dq, dk, dv, dg) on how far
    the f32 layer's own q, k, v and dheads = dout W_o are from the
    reference's. The bound is then attn.h's on the layer's own inputs plus
    the reference's dsinks moved to those inputs, to first order in u:
      attn.h's, on the layer's q^, k^, v^, g^: the scores move by at most
        ds_ij = scale (dq_i |k_j| + |q_i| dk_j) (delta_h its largest in the
        head), so each weight P_ij by a factor within e^(±2 delta_h) and each
        sink's share P_sink by e^(±delta_h): dsinks_abs_h on the layer's is
        within e^(3 delta_h) · sink_magnitudes(P, |g| + dg, |v| + dv), and its
        s_abs_h within scale · max (|q| + dq)(|k| + dk);
      the move: dsinks = -sum_i P_sink_i D_i, D_i = g_i · out_i; a change
        ds_ij of the scores (the sink's own unchanged) moves P_ij by
        P_ij (ds_ij - m_i) and P_sink_i by -P_sink_i m_i, m_i = sum_j P_ij ds_ij;
        with v_j by dv_j and g_i by dg_i, dsinks moves by
          -sum_i P_sink_i (sum_j P_ij ds_ij (g_i · v_j - 2 D_i)
                           + sum_j P_ij g_i · dv_j + dg_i · out_i),
        bounded with each term's absolute value: this grows with |g||v|, as
        dsinks_abs does, and not with |dsinks| or |out|."""
    a = attention
    with torch.no_grad():
        q, k, v, p, g, scale = a["q"], a["k"], a["v"], a["p"], a["heads"].grad, a["scale"]
        first = 0.0
        if rounding is None:
            dsinks_abs = sink_magnitudes(p, torch.ones(()), g, v)
            qa, ka = q.abs(), k.abs()
        else:
            dq, dk, dv, dg = (torch.from_numpy(x_) for x_ in rounding)
            kt = lambda x_: x_.transpose(-2, -1)  # noqa: E731
            ds = scale * (dq @ kt(k.abs()) + q.abs() @ kt(dk))  # (N, H, L, S)
            delta = torch.amax(ds, dim=(0, 2, 3)).numpy()
            dsinks_abs = np.exp(3 * delta) * sink_magnitudes(p, torch.ones(()), g.abs() + dg, v.abs() + dv)
            qa, ka = q.abs() + dq, k.abs() + dk
            out = a["heads"]
            D = (g * out).sum(-1, keepdim=True)
            moved = (p * ds * (g @ kt(v) - 2 * D).abs()).sum(-1) + (p * (g.abs() @ kt(dv))).sum(-1) + \
                (dg * out.abs()).sum(-1)  # (N, H, L)
            first = ((1 - p.sum(-1)) * moved).sum(dim=(0, 2)).numpy()
        x = None
        if f32:
            s_abs = torch.amax(scale * qa @ ka.transpose(-2, -1), dim=(0, 2, 3)).numpy()
            x = (3 * q.shape[-1] + 20) * 2.0**-24 * np.maximum(s_abs, np.abs(np.asarray(sinks, np.float64)))
    why = compare_within(got, ref, sink_bound(dsinks_abs, x, k.shape[-2]) + first)
    return "sinks: " + why if why else ""


def projection_rounding(q, k, v, dout, state, H, Hkv):
    """Bounds on how far an f32 layer's own attention inputs are from the
    reference's (the same f32 values in f64, no RoPE), as numpy (N, H, L or
    S, D) each, k's and v's repeated over each KV head's group: dq, dk, dv
    (in + 4) u (|x| |W|^T + |b|), a recursive f32 sum of `in` products and
    the bias (f32_bound's projections; the values already f32), and dg, the
    heads' dout = dout W_o, (E + 4) u |dout| |W_o|, the same for an f32 sum
    of E products (the layer's double sum rounded once is within it)."""
    N, E = q.shape[0], q.shape[-1]
    D = E // H
    heads = lambda x, h: x.reshape(N, x.shape[1], h, D).transpose(0, 2, 1, 3)  # noqa: E731

    def proj(x, n, h):
        w, b = (np.asarray(state[n + "_proj_" + t], np.float64) for t in ("weight", "bias"))
        mag = np.abs(np.asarray(x, np.float64)) @ np.abs(w).T + np.abs(b)
        return np.repeat(heads((x.shape[-1] + 4) * U32 * mag, h), H // h, axis=1)
    wo = np.asarray(state["out_proj_weight"], np.float64)
    dg = (E + 4) * U32 * np.abs(np.asarray(dout, np.float64)) @ np.abs(wo)
    return proj(q, "q", H), proj(k, "k", Hkv), proj(v, "v", Hkv), np.ascontiguousarray(heads(dg, H))


def cancelling_sinks_case(o, rng, name, dtype, H=4, Hkv=2, E=16, L=16, S=64, N=2):
    """The sinks' gradient where the attention's values cancel (as
    oracle_backward's cancelling_values, through the layer): out near 0, but
    the forward's out off by some rounding of P|v|, and dsinks = -sum P_sink ·
    rowsum(dout ∘ out) with it. Half the keys come in pairs with the same key
    input (the same scores: equal weights) and value inputs ±2^10 x (the value
    bias 0: values that cancel exactly); the other half's value inputs are
    2^-10 x in f32 and x in f64, where smaller ones would leave the pairs'
    large terms, summed into v_proj_weight's gradient, cancelling beyond
    compare_grads' 1e-11. The sinks take about half of each row. Every input and parameter
    is a small dyadic number (x in quarters, weights in eighths), so that
    f32's projections and dout W_o are exact: the f32 layer's attention then
    sees the reference's very inputs, and attn.h's f32 bound applies as
    stated. No causal mask, so that every query sees both keys of a pair."""
    D = E // H

    def dyadic(shape, bits):
        return rng.integers(-3, 4, shape) / 2.0**bits
    state = {"q_proj_weight": dyadic((E, E), 3), "k_proj_weight": dyadic((Hkv * D, E), 3),
             "v_proj_weight": dyadic((Hkv * D, E), 3), "q_proj_bias": dyadic(E, 3), "k_proj_bias": dyadic(Hkv * D, 3),
             "v_proj_bias": np.zeros(Hkv * D), "out_proj_weight": dyadic((E, E), 3), "out_proj_bias": dyadic(E, 3),
             "sinks": math.log(1.3 * S) + 0.3 * rng.standard_normal(H)}
    q, k, v = dyadic((N, L, E), 2), dyadic((N, S, E), 2), dyadic((N, S, E), 2)
    half = S // 2
    k[:, 1:half:2] = k[:, 0:half:2]
    v[:, 0:half:2] *= 2.0**10
    v[:, 1:half:2] = -v[:, 0:half:2]
    v[:, half:] *= 2.0**-10 if dtype == np.float32 else 1.0
    order = rng.permutation(S)  # the pairs apart, so that f32's running sums round
    k, v = k[:, order], v[:, order]
    cast = lambda a: a.astype(dtype)  # noqa: E731  (exact but the sinks, whose rounding both sides then take)
    state = {n: cast(a) for n, a in state.items()}
    o.report(name, gqa_backward_check(o, cast(q), cast(k), cast(v), cast(dyadic((N, L, E), 2)), state, H, Hkv, 0))


def rounded_sinks_case(o, rng, name, cancel, H=4, Hkv=2, E=32, L=16, S=24, N=2, causal=2):
    """The sinks' gradient of an f32 layer whose projections round (random
    weights, inputs and dout: f32's sums of products do not come out
    exact), so that its attention sees inputs a few u from the reference's,
    against autograd in f64 on the same f32 values, per head within
    sinks_check's bound with the projections' rounding. cancel: the values
    cancel, as in cancelling_sinks_case (pairs of keys with the same key
    input and value inputs ±2^10 x, the value bias 0, the other half 2^-10
    x; give it causal 0, as there): out near 0 and dsinks far below the
    |dout| P|v| its errors follow; else ordinary random data. The sinks take
    about a third of each row (a share near 0 would leave dsinks little to
    check)."""
    f = rng.standard_normal
    state = gqa_state(f, E, E // H, Hkv)
    q, k, v = f((N, L, E)), f((N, S, E)), f((N, S, E))
    state["sinks"] = math.log(S) + 0.5 * f(H)
    if cancel:
        state["v_proj_bias"] = np.zeros(state["v_proj_bias"].shape)
        half = S // 2
        k[:, 1:half:2] = k[:, 0:half:2]
        v[:, 0:half:2] *= 2.0**10
        v[:, 1:half:2] = -v[:, 0:half:2]
        v[:, half:] *= 2.0**-10
        order = rng.permutation(S)
        k, v = k[:, order], v[:, order]
    cast = lambda a: a.astype(np.float32)  # noqa: E731  (both sides take these values)
    state = {n: cast(a) for n, a in state.items()}
    o.report(name, gqa_backward_check(o, cast(q), cast(k), cast(v), cast(f((N, L, E))), state, H, Hkv, causal,
                                      rounded=True))


def bf16_weights_backward_case(o, rng, name, H=4, Hkv=2, E=32, L=5, S=7, N=2, causal=2):
    """An f32 layer's bf16 weights (as checkpoints ship them) through
    attn_mha_backward, against autograd through the layer its forward
    computes. Where the projections run on the bf16 GEMM (the forward then
    matches gqa_reference with bf16_products, and not without), each
    product's input is rounded to bf16, so the weights' gradients are over
    the rounded inputs, as PyTorch's bf16 F.linear saves its bf16 input;
    they were over the inputs as given, 2^-9 off. Elsewhere (f32 sums on the
    weights widened) over the inputs as given. Within 1e-5 of each largest
    gradient (f32 projections and attention, double sums)."""
    f = rng.standard_normal
    bf16 = lambda a: torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16)  # noqa: E731
    state = gqa_state(f, E, E // H, Hkv)
    state = {n: bf16(a).double().numpy() if a.ndim == 2 else a.astype(np.float32).astype(np.float64)
             for n, a in state.items()}
    q, k, v = (f(s).astype(np.float32) for s in ((N, L, E), (N, S, E), (N, S, E)))
    o.keep = []
    p, g = o.lib.attn_mha_params_default(), o.lib.attn_mha_params_default()
    p.embed_dim, p.num_heads, p.num_kv_heads = E, H, Hkv
    grads = {}
    for n, a in state.items():
        if a.ndim == 2:  # the weight as bf16 bits
            bits = bf16(a).view(torch.int16).numpy().view(np.float16)
            t = view(bits)
            t.dtype = 5  # ATTN_BF16
            o.keep += [bits, t]
            setattr(p, n, ctypes.pointer(t))
        else:
            setattr(p, n, o.tensor(a.astype(np.float32)))
        grads[n] = np.zeros(a.shape, np.float32)
        setattr(g, n, o.tensor(grads[n]))
    opts = o.lib.attn_mha_options_default()
    opts.batch_first, opts.causal = 1, causal
    out, err = np.zeros_like(q), Error()
    if o.lib.attn_mha(ctypes.byref(view(out)), None, ctypes.byref(view(q)), ctypes.byref(view(k)),
                      ctypes.byref(view(v)), ctypes.byref(p), ctypes.byref(opts), ctypes.byref(err)):
        return o.report(name, "attn_mha failed: " + err.message.decode())
    wide = [a.astype(np.float64) for a in (q, k, v)]
    refs = [gqa_reference(*wide, state, H, Hkv, causal, bf16_products=r) for r in (False, True)]
    fits = [not o.compare("out", out, ref, 1e-5) for ref in refs]
    if fits[0] == fits[1]:
        return o.report(name, "the forward matches %s reference" % ("both the rounded and the plain" if fits[0] else
                                                                    "neither the rounded nor the plain"))
    leaves = {n: torch.tensor(a, requires_grad=True) for n, a in state.items()}
    xs = [torch.tensor(a, requires_grad=True) for a in wide]
    ref = gqa_reference_t(xs, leaves, H, Hkv, causal, None, bf16_products=fits[1])
    dout = f(ref.shape)
    ref.backward(torch.from_numpy(dout))
    for n, a in (("query", q), ("key", k), ("value", v)):
        grads[n] = np.zeros_like(a)
    d32 = dout.astype(np.float32)
    if o.lib.attn_mha_backward(*(ctypes.byref(view(grads[n])) for n in ("query", "key", "value")), ctypes.byref(g),
                               ctypes.byref(view(d32)), ctypes.byref(view(q)), ctypes.byref(view(k)),
                               ctypes.byref(view(v)), ctypes.byref(p), ctypes.byref(opts), ctypes.byref(err)):
        return o.report(name, "attn_mha_backward failed: " + err.message.decode())
    want = dict({n: t.grad for n, t in leaves.items()}, query=xs[0].grad, key=xs[1].grad, value=xs[2].grad)
    why = ""
    for n, r in want.items():
        floor = float(want["k_proj_weight"].abs().max()) if n == "k_proj_bias" else 0.0  # its gradient is ~0
        why = why or o.compare(n, grads[n], r.numpy(), 1e-5, floor)
    o.report(name + ("_on_the_bf16_gemm" if fits[1] else "_on_f32_sums"), why)


def fully_padded_backward_case(o, rng, name, E=8, H=2, L=4, S=5, N=3):
    """attn_mha_backward with a key_padding_mask that pads one sequence entirely:
    PyTorch's module gives that sequence NaN (forward and gradients), attn gives
    its rows out_proj's bias, so no gradient reaches its query, key and value,
    and out_proj's bias takes its dout. Reference: autograd through the module
    on the other sequences, with that dout added to out_proj.bias's gradient."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
    f = rng.standard_normal
    xs = [f((N, n, E)) for n in (L, S, S)]
    kpm = rng.random((N, S)) < 0.3
    kpm[:, 0] = False
    kpm[1] = True
    dout = f((N, L, E))
    live = [b for b in range(N) if b != 1]
    x = [torch.tensor(a[live], requires_grad=True) for a in xs]
    mha(*x, key_padding_mask=torch.from_numpy(kpm[live]), need_weights=False)[0].backward(torch.from_numpy(dout[live]))
    state = module_state(mha, np.float64)
    named = dict(mha.named_parameters())
    ref = {"out_proj_weight": named["out_proj.weight"].grad, "in_proj_weight": named["in_proj_weight"].grad,
           "in_proj_bias": named["in_proj_bias"].grad,
           "out_proj_bias": named["out_proj.bias"].grad + torch.from_numpy(dout[1].sum(0))}
    for n, t in zip(("query", "key", "value"), x):
        g = torch.zeros(xs[0 if n == "query" else 1].shape, dtype=torch.float64)
        g[live] = t.grad
        ref[n] = g
    st, msg, got = o.run_backward(dout, *xs, state, H, batch_first=True, kpm=kpm)
    o.report(name, "attn_mha_backward failed: " + msg if st else compare_grads(o, got, ref))


def state_dict_case(o, rng, name, E=8, H=2, L=4, S=5, N=2, kdim=5, vdim=3):
    """A module whose kdim and vdim make it use separate weights keeps its
    biases packed: its state_dict holds q_proj_weight, k_proj_weight,
    v_proj_weight and in_proj_bias (3E,). attn_mha given those very tensors,
    unsplit, against the module: the output, and attn_mha_backward's
    gradient of in_proj_bias (and of the rest). The bias was ignored."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    mha = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_bias.copy_(torch.randn(3 * E, dtype=torch.float64))  # the module starts it at 0
    sd = {k: v.detach().numpy() for k, v in mha.state_dict().items()}
    state = {"q_proj_weight": sd["q_proj_weight"], "k_proj_weight": sd["k_proj_weight"],
             "v_proj_weight": sd["v_proj_weight"], "in_proj_bias": sd["in_proj_bias"],
             "out_proj_weight": sd["out_proj.weight"], "out_proj_bias": sd["out_proj.bias"]}
    x = [torch.tensor(rng.standard_normal((n, N, f)), requires_grad=True) for n, f in ((L, E), (S, kdim), (S, vdim))]
    ref = mha(*x, need_weights=False)[0]
    dout = rng.standard_normal(ref.shape)
    ref.backward(torch.from_numpy(dout))
    xs = [a.detach().numpy() for a in x]
    st, msg, out, _ = o.run(*xs, state, H, kdim=kdim, vdim=vdim)
    if st:
        return o.report(name, "attn_mha failed: " + msg)
    why = o.compare("out", out, ref.detach().numpy(), 1e-12)
    if why:
        return o.report(name, why)
    st, msg, got = o.run_backward(dout, *xs, state, H, kdim=kdim, vdim=vdim)
    if st:
        return o.report(name, "attn_mha_backward failed: " + msg)
    named = dict(mha.named_parameters())
    grads = {n: named[{"out_proj_weight": "out_proj.weight", "out_proj_bias": "out_proj.bias"}.get(n, n)].grad
             for n in state}
    grads.update(query=x[0].grad, key=x[1].grad, value=x[2].grad)
    # in_proj_bias's k third has a zero gradient: judged against k_proj's weight's, as compare_grads judges
    why = o.compare("in_proj_bias", got["in_proj_bias"], grads.pop("in_proj_bias").numpy(), 1e-11,
                    float(grads["k_proj_weight"].abs().max()))
    o.report(name, why or compare_grads(o, got, grads))


def compare_grads(o, got, ref):
    """Every gradient within 1e-11 of its largest value. k_proj's bias has a zero
    gradient (a bias shared by every key moves a row's scores together, which
    the softmax ignores): its rounding is judged against k_proj's weight's."""
    for n, r in ref.items():
        floor = float(ref["k_proj_weight"].abs().max()) if n == "k_proj_bias" and "k_proj_weight" in ref else 0.0
        if n == "in_proj_bias":  # its k third likewise
            floor = float(ref["in_proj_weight"].abs().max())
        why = o.compare(n, got[n], r.numpy(), 1e-11, floor)
        if why:
            return why
    return ""


def gqa_reference_t(xs, t, H, Hkv, causal, rope, variants=None, bf16_products=False, keep=None, dropout=0.0,
                    attention=None):
    """GQA multi-head attention written in PyTorch on torch tensors (autograd
    flows through it): separate projections, RoPE on each head's rows at
    positions offset + row (queries past that by S - L but top-left: the
    last L positions), repeat_interleave of the KV heads, the score
    variants from their definitions, softmax, out_proj. Inputs (N, L, E).
    bf16_products: each projection's input rounded to bfloat16 first (nearest
    even), as an f32 layer's bf16 GEMM rounds it (the weights being bf16);
    autograd passes the gradient through the rounding unchanged (casting to
    bfloat16 and back would round the gradient too).
    keep: a dropout mask (N, H, L, S), the weights times keep / (1 - dropout),
    as PyTorch's dropout on them.
    attention: a dict to receive the attention's own inputs and output, for
    bounds on its gradients: q, k (after RoPE), v (repeated over each KV
    head's group), (N, H, L or S, D); scale; the weights p (N, H, L, S)
    before dropout; heads = p v (N, H, L, D), whose .grad after backward is
    the attention's dout."""
    q, k, v = xs
    N, L, E = q.shape
    S, D = k.shape[1], E // H
    r = (lambda x: x + (x.to(torch.bfloat16).to(x.dtype) - x).detach()) if bf16_products else (lambda x: x)
    Q = F.linear(r(q), t["q_proj_weight"], t.get("q_proj_bias")).reshape(N, L, H, D).transpose(1, 2)
    K = F.linear(r(k), t["k_proj_weight"], t.get("k_proj_bias")).reshape(N, S, Hkv, D).transpose(1, 2)
    V = F.linear(r(v), t["v_proj_weight"], t.get("v_proj_bias")).reshape(N, S, Hkv, D).transpose(1, 2)
    if rope:  # attn.h: query l at offset + l + off, off = 0 top-left (causal 1), S - L otherwise
        layout, base, rd, offset = rope
        Q = rope_reference(Q, layout, base, rd, offset + (0 if causal == 1 else S - L), 1.0)
        K = rope_reference(K, layout, base, rd, offset, 1.0)
    K, V = K.repeat_interleave(H // Hkv, dim=1), V.repeat_interleave(H // Hkv, dim=1)
    s = Q @ K.transpose(-2, -1) / math.sqrt(D)
    allowed = causal_allowed(L, S, causal)
    if variants:
        s, allowed = variant_scores(s, allowed, causal, **variants)
    s = s.masked_fill(~allowed, float("-inf"))
    if "sinks" in t:  # one more score per row, the head's sink, with no value: its weight is dropped
        sink = t["sinks"].reshape(1, H, 1, 1).expand(N, H, L, 1)
        p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :S]
    else:
        p = torch.softmax(s, -1)
    if attention is not None:
        attention.update(q=Q, k=K, v=V, scale=1 / math.sqrt(D), p=p)
    if keep is not None:
        p = p * torch.from_numpy(keep) / (1 - dropout)
    heads = p @ V
    if attention is not None:
        heads.retain_grad()
        attention["heads"] = heads
    out = heads.transpose(1, 2).reshape(N, L, E)
    return F.linear(r(out), t["out_proj_weight"], t.get("out_proj_bias"))


def dropout_keep(o, N, H, L, Hkv, S, p, seed):
    """attn_sdpa_dropout_mask for attention of q (N, H, L, ·) over k (N, Hkv,
    S, ·): the mask attn.h says the layer's dropout uses (slice n·H + h, row
    l, column s of the keys, appended ones included)."""
    q, k = np.zeros((N, H, L, 1)), np.zeros((N, Hkv, S, 1))
    keep = np.zeros((N, H, L, S), np.bool_)
    kt = view(keep)
    kt.dtype = BOOL
    a = o.lib.attn_sdpa_options_default()
    a.dropout_p, a.dropout_seed = p, seed
    err = Error()
    st = o.lib.attn_sdpa_dropout_mask(ctypes.byref(kt), ctypes.byref(view(q)), ctypes.byref(view(k)),
                                      ctypes.byref(view(k)), ctypes.byref(a), ctypes.byref(err))
    assert st == 0, err.message.decode()
    return keep


def dropout_options(o, p, seed):
    a = o.lib.attn_sdpa_options_default()
    a.dropout_p, a.dropout_seed = p, seed
    return a


def mha_dropout_case(o, rng, name, H, Hkv, causal, E=16, L=5, S=7, N=2, p=0.3, seed=2026):
    """attn_mha and attn_mha_backward with options->attention's dropout, f64,
    against the layer written in PyTorch whose weights are multiplied by
    attn_sdpa_dropout_mask's keep over the heads (N, H, L, S) and divided by
    1 - p (PyTorch's dropout): the output, the per-head weights (0 exactly
    where dropped, the softmax's times 1/(1 - p) where kept) and every
    gradient."""
    f = rng.standard_normal
    state = gqa_state(f, E, E // H, Hkv)
    q, k, v = f((N, L, E)), f((N, S, E)), f((N, S, E))
    keep = dropout_keep(o, N, H, L, Hkv, S, p, seed)
    leaves = {n: torch.tensor(a, requires_grad=True) for n, a in state.items()}
    xs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    ref = gqa_reference_t(xs, leaves, H, Hkv, causal, None, keep=keep, dropout=p)
    plain = gqa_reference_t(xs, leaves, H, Hkv, causal, None).detach().numpy()
    dout = f(ref.shape)
    ref.backward(torch.from_numpy(dout))
    st, msg, out, w = o.run(q, k, v, state, H, kv_heads=Hkv, batch_first=True, causal=causal, want_weights=True,
                            average=False, attention=dropout_options(o, p, seed))
    if st:
        return o.report(name, "attn_mha failed: " + msg)
    allowed = causal_allowed(L, S, causal).numpy()
    why = o.compare("out", out, ref.detach().numpy(), 1e-12) or \
        ("weights: nonzero where the mask drops" if (w[~keep] != 0).any() else "") or \
        ("weights: zero where kept and allowed" if (w[keep & allowed] <= 0).any() else "") or \
        ("the dropout changed nothing" if np.abs(out - plain).max() < 1e-3 else "")
    if why:
        return o.report(name, why)
    st, msg, got = o.run_backward(dout, q, k, v, state, H, kv_heads=Hkv, batch_first=True, causal=causal,
                                  attention=dropout_options(o, p, seed))
    if st:
        return o.report(name, "attn_mha_backward failed: " + msg)
    grads = dict({n: t.grad for n, t in leaves.items()}, query=xs[0].grad, key=xs[1].grad, value=xs[2].grad)
    o.report(name, compare_grads(o, got, grads))


def mha_cached_dropout_case(o, rng, name, H, Hkv, E=16, N=2, steps=(3, 1, 2), p=0.3, seed=77):
    """attn_mha_cached with dropout, f64, step after step: each step is the
    layer in PyTorch over the sequence so far (bottom-right causal) with the
    mask attn.h gives it, attn_sdpa_dropout_mask over the step's own L
    queries (rows 0 .. L-1) and the S keys cached, slice n·H + h. So with one
    seed, step after step, a query at row 0 keeps the same keys (asserted:
    the masks of the first two single-query steps agree where both reach),
    and a new seed per step gives a new mask."""
    lib = o.lib
    D = E // H
    f = rng.standard_normal
    state = gqa_state(f, E, D, Hkv)
    t = {n: torch.from_numpy(a) for n, a in state.items()}
    cache, memory, why = f64_cache(lib, N, Hkv, 16, D)
    if why:
        return o.report(name, why)
    err = Error()
    hist, masks = np.zeros((N, 0, E)), []
    for step, L in enumerate(steps):
        S = hist.shape[1] + L
        x = f((N, L, E))
        o.keep = []
        prm = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, 2
        a = dropout_options(o, p, seed)
        opts.attention = ctypes.addressof(a)
        out = np.zeros_like(x)
        if lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(x)), cache, ctypes.byref(prm),
                               ctypes.byref(opts), ctypes.byref(err)):
            return o.report(name, "step %d: attn_mha_cached: %s" % (step, err.message.decode()))
        full = np.concatenate([hist, x], 1)
        keep = dropout_keep(o, N, H, L, Hkv, S, p, seed)
        masks.append(keep)
        Q = F.linear(torch.from_numpy(x), t["q_proj_weight"], t["q_proj_bias"]).reshape(N, L, H, D).transpose(1, 2)
        K = F.linear(torch.from_numpy(full), t["k_proj_weight"], t["k_proj_bias"]).reshape(N, S, Hkv, D).transpose(1, 2)
        V = F.linear(torch.from_numpy(full), t["v_proj_weight"], t["v_proj_bias"]).reshape(N, S, Hkv, D).transpose(1, 2)
        K, V = K.repeat_interleave(H // Hkv, 1), V.repeat_interleave(H // Hkv, 1)
        sc = (Q @ K.transpose(-2, -1) / math.sqrt(D)).masked_fill(~causal_allowed(L, S, 2), float("-inf"))
        w = torch.softmax(sc, -1) * torch.from_numpy(keep) / (1 - p)
        ref = F.linear((w @ V).transpose(1, 2).reshape(N, L, E), t["out_proj_weight"], t["out_proj_bias"]).numpy()
        why = o.compare("step %d" % step, out, ref, 1e-12)
        if why:
            return o.report(name, why)
        hist = full
    one = [m for m, L in zip(masks, steps) if L == 1]
    other = dropout_keep(o, N, H, 1, Hkv, 8, p, seed + 1)
    why = "" if len(one) < 2 or np.array_equal(one[0][..., :1, :], one[1][..., :1, :one[0].shape[-1]]) else \
        "two single-query steps with one seed: row 0's masks differ"
    o.report(name, why or ("a new seed gave the same mask" if np.array_equal(other, dropout_keep(o, N, H, 1, Hkv, 8, p, seed))
                           else ""))


def attention_fields_refused_case(o, rng, name, H=4, Hkv=2, E=16, L=3, N=2):
    """The fields of options->attention a layer cannot honour are refused,
    naming the field, by attn_mha, attn_mha_backward and attn_mha_cached,
    with nothing appended to the cache: pieces (query_start, key_start,
    total_queries, total_keys), which moved the attention's positions but
    not the layer's own RoPE, masks or cache positions; and k_descale /
    v_descale, which made attn_mha_cached over an fp8 cache read its keys
    scaled by a factor they were never divided by."""
    lib = o.lib
    f = rng.standard_normal
    state = gqa_state(f, E, E // H, Hkv)
    x = f((N, L, E))
    x32 = x.astype(np.float32)
    state32 = {n: a.astype(np.float32) for n, a in state.items()}
    fields = {"query_start": dict(query_start=1, total_queries=L + 1), "key_start": dict(key_start=2, total_keys=L + 2),
              "total_queries": dict(total_queries=L + 4), "total_keys": dict(total_keys=L + 4),
              "k_descale": dict(k_descale=np.full(Hkv, 2.0)), "v_descale": dict(v_descale=np.full(Hkv, 0.5))}

    def attention(**kw):
        a = lib.attn_sdpa_options_default()
        for k, v in kw.items():
            setattr(a, k, o.tensor(v) if isinstance(v, np.ndarray) else v)
        return a

    def refused(st, msg, field):
        want = "options->attention->%s is set" % field
        return "" if st == ERR_OPTION and want in msg else "status %d, %r: want ATTN_ERR_OPTION, %r" % (st, msg, want)

    def cached(cache, x_, state_, a):
        prm = o.params(state_, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, 2
        o.keep.append(a)
        opts.attention = ctypes.addressof(a)
        out, err = np.zeros_like(x_), Error()
        st = lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(x_)), cache, ctypes.byref(prm),
                                 ctypes.byref(opts), ctypes.byref(err))
        return st, err.message.decode()

    lib.attn_kv_cache_length.restype = ctypes.c_int64
    for field, kw in fields.items():
        st, msg, _, _ = o.run(x, x, x, state, H, kv_heads=Hkv, batch_first=True, causal=2, attention=attention(**kw))
        why = refused(st, msg, field)
        if not why:
            st, msg, _ = o.run_backward(x, x, x, x, state, H, kv_heads=Hkv, batch_first=True, causal=2,
                                        attention=attention(**kw))
            why = refused(st, msg, field) and "attn_mha_backward: " + refused(st, msg, field)
        if not why:  # an fp8 cache for the scales (the case that computed a wrong result), else f64
            fp8 = "descale" in field
            cache, memory, why = f64_cache(lib, N, Hkv, 8, E // H, E4M3 if fp8 else None)
            if not why:
                st, msg = cached(cache, x32 if fp8 else x, state32 if fp8 else state, attention(**kw))
                why = refused(st, msg, field) and "attn_mha_cached: " + refused(st, msg, field)
            if not why and lib.attn_kv_cache_length(cache) != 0:
                why = "attn_mha_cached appended before refusing %s" % field
        if why:
            return o.report(name, field + ": " + why)
    o.report(name, "")


def cache_mismatch_case(o, rng, name, H=4, Hkv=2, E=16, L=2, N=2):
    """attn_mha_cached over a cache that does not fit the layer (dtype,
    heads, head size, batch) is refused in the layer's terms (x, the
    cache, num_kv_heads and the head size), before anything is appended:
    the append's own message named the projected keys, which the caller
    never saw ("k is f32; an f64 cache takes f64")."""
    lib = o.lib
    f = rng.standard_normal
    D = E // H
    state = gqa_state(f, E, D, Hkv)
    x = f((N, L, E))
    cases = [("f32_x_over_an_f64_cache", np.float32, (N, Hkv, D, None), 6,
              "x is f32 and the cache holds f64; an f64 cache takes f64 x, the others f32 x"),
             ("f64_x_over_an_f32_cache", np.float64, (N, Hkv, D, 1), 6,
              "x is f64 and the cache holds f32; an f64 cache takes f64 x"),
             ("heads", np.float64, (N, Hkv + 1, D, None), 3,
              "the cache holds %d heads of %d and %d; the layer needs %d of %d" % (Hkv + 1, D, D, Hkv, D)),
             ("head_size", np.float64, (N, Hkv, D + 2, None), 3,
              "the cache holds %d heads of %d and %d; the layer needs %d of %d" % (Hkv, D + 2, D + 2, Hkv, D)),
             ("batch", np.float64, (N + 1, Hkv, D, None), 3, "the cache holds %d sequences; x has %d" % (N + 1, N))]
    lib.attn_kv_cache_length.restype = ctypes.c_int64
    for what, dt, (B, heads, dim, cache_dtype), status, want in cases:
        cache, memory, why = f64_cache(lib, B, heads, 8, dim, cache_dtype)
        if why:
            return o.report(name, what + ": " + why)
        o.keep = []
        prm = o.params({n: a.astype(dt) for n, a in state.items()}, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, 2
        xs = x.astype(dt)
        out, err = np.zeros_like(xs), Error()
        st = lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(xs)), cache, ctypes.byref(prm),
                                 ctypes.byref(opts), ctypes.byref(err))
        msg = err.message.decode()
        if st != status or want not in msg or lib.attn_kv_cache_length(cache) != 0:
            return o.report(name, "%s: status %d, %r (length %d): want %d, %r" % (
                what, st, msg, lib.attn_kv_cache_length(cache), status, want))
    o.report(name, "")


def cached_refusals_case(o, rng, name, H=4, Hkv=2, E=16, N=2):
    """attn_mha_cached's refusals of a step name the numbers the caller
    cannot see in its arguments (S, the keys the cache will hold after the
    append) beside what was given, and change nothing: a mask of the wrong
    width (ATTN_ERR_MASK: it said only "shaped (N, S)") and a step past the
    capacity (ATTN_ERR_FULL, "1 more does not fit"). Each leaves the length
    and the cached keys and values as they were, and the next step still
    gives the layer in PyTorch over the whole sequence."""
    lib = o.lib
    f = rng.standard_normal
    D = E // H
    state = gqa_state(f, E, D, Hkv)
    cache, memory, why = f64_cache(lib, N, Hkv, 6, D)
    if why:
        return o.report(name, why)
    lib.attn_kv_cache_length.restype = ctypes.c_int64
    seq = f((N, 6, E))

    def step(x, am=None, kpm=None):
        o.keep = []
        prm = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, 2
        opts.attn_mask, opts.key_padding_mask = o.tensor(am), o.tensor(kpm)
        out, err = np.zeros_like(x), Error()
        st = lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(x)), cache, ctypes.byref(prm),
                                 ctypes.byref(opts), ctypes.byref(err))
        return st, err.message.decode(), out

    def cached():
        n = lib.attn_kv_cache_length(cache)
        k, v = np.zeros((N, Hkv, n, D)), np.zeros((N, Hkv, n, D))
        lib.attn_kv_cache_gather(ctypes.byref(view(k)), ctypes.byref(view(v)), cache, ctypes.byref(Error()))
        return n, k, v

    outs = [step(np.ascontiguousarray(seq[:, :4]))[2]]
    before = cached()
    refusals = [
        ("kpm", dict(kpm=np.zeros((N, 4), np.bool_)), 7,
         "key_padding_mask is bool of shape (%d, 4); it must be bool or f64, shaped (N, S) = (%d, 5)" % (N, N)),
        ("kpm_dtype", dict(kpm=np.zeros((N, 5), np.float32)), 7,
         "key_padding_mask is f32 of shape (%d, 5); it must be bool or f64" % N),
        ("attn_mask", dict(am=np.zeros((1, 4))), 7,
         "attn_mask is f64 of shape (1, 4); it must be bool or f64, shaped (L, S) = (1, 5) or (N·Hq, L, S) = "
         "(%d, 1, 5)" % (N * H)),
    ]
    for what, masks, status, want in refusals:
        st, msg, _ = step(np.ascontiguousarray(seq[:, 4:5]), **masks)
        after = cached()
        if st != status or want not in msg or after[0] != before[0] or not all(
                np.array_equal(a, b) for a, b in zip(before[1:], after[1:])):
            return o.report(name, "%s: status %d, %r, length %d: want %d, %r" % (what, st, msg, after[0], status,
                                                                                 want))
    outs.append(step(np.ascontiguousarray(seq[:, 4:5]))[2])
    before = cached()
    for n, want in ((3, "the cache holds 6 positions, 5 filled: 3 more do not fit"),
                    (2, "the cache holds 6 positions, 5 filled: 2 more do not fit")):
        st, msg, _ = step(f((N, n, E)))
        after = cached()
        if st != 21 or want not in msg or after[0] != 5 or not all(
                np.array_equal(a, b) for a, b in zip(before[1:], after[1:])):
            return o.report(name, "full: status %d, %r, length %d" % (st, msg, after[0]))
    outs.append(step(np.ascontiguousarray(seq[:, 5:6]))[2])
    st, msg, _ = step(f((N, 1, E)))
    if st != 21 or "the cache holds 6 positions, 6 filled: 1 more does not fit" not in msg:
        return o.report(name, "full at capacity: status %d, %r" % (st, msg))
    ref = gqa_reference(seq, seq, seq, state, H, Hkv, 1)
    o.report(name, o.compare("steps around the refusals", np.concatenate(outs, 1), ref, 1e-12))


def rope_span_steps_case(o, rng, name, H=4, Hkv=2, E=16, N=1):
    """RoPE's positions within 2^53 (attn.h, options->rope): a sequence run
    through a cache, a step at a time or in one step, is refused exactly
    where attn_mha over the whole sequence is (position_offset + length +
    L <= 2^53), by attn_mha_cached and attn_mha_cached_batch, before
    anything is appended, naming the caller's offset. A step was checked at
    its first position only: three positions from 2^53 - 1 were turned, and
    a later step was refused naming position_offset + length, a number the
    caller never gave."""
    lib = o.lib
    f = rng.standard_normal
    D = E // H
    state = gqa_state(f, E, D, Hkv)
    lib.attn_kv_cache_length.restype = ctypes.c_int64
    top = 2 ** 53
    I64 = ctypes.POINTER(ctypes.c_int64)

    def layer_options(offset, causal):
        o.keep = []
        prm = o.params(state, E, H, Hkv)
        opts = lib.attn_mha_options_default()
        opts.batch_first, opts.causal = 1, causal
        r = lib.attn_rope_options_default()
        r.position_offset = offset
        o.keep.append(r)
        opts.rope = ctypes.pointer(r)
        return prm, opts

    for offset, steps in ((top - 3, (3,)), (top - 3, (1, 1, 1)), (top - 2, (1, 1, 1)), (top - 1, (3,)),
                          (top - 2, (2, 1)), (top, (1,))):
        whole = f((N, sum(steps), E))
        prm, opts = layer_options(offset, 1)
        out, err = np.zeros_like(whole), Error()
        whole_st = lib.attn_mha(ctypes.byref(view(out)), None, *[ctypes.byref(view(whole))] * 3, ctypes.byref(prm),
                                ctypes.byref(opts), ctypes.byref(err))
        for batch in (False, True):
            cache, memory, why = f64_cache(lib, N, Hkv, 8, D)
            if why:
                return o.report(name, why)
            lengths = np.zeros(N, np.int64)
            statuses, t = [], 0
            for n in steps:
                x = np.ascontiguousarray(whole[:, t:t + n])
                prm, opts = layer_options(offset, 2)
                out, err = np.zeros_like(x), Error()
                if batch:
                    cu, rows = np.array([0, n], np.int64), np.zeros(1, np.int64)
                    st = lib.attn_mha_cached_batch(ctypes.byref(view(out[0])), ctypes.byref(view(x[0])),
                                                   cu.ctypes.data_as(I64), rows.ctypes.data_as(I64),
                                                   ctypes.c_int64(1), cache, lengths.ctypes.data_as(I64), None,
                                                   ctypes.byref(prm), ctypes.byref(opts), ctypes.byref(err))
                    held = int(lengths[0])
                else:
                    st = lib.attn_mha_cached(ctypes.byref(view(out)), ctypes.byref(view(x)), cache, ctypes.byref(prm),
                                             ctypes.byref(opts), ctypes.byref(err))
                    held = lib.attn_kv_cache_length(cache)
                msg = err.message.decode()
                statuses.append(st)
                if st and (st != 9 or held != t or "position_offset %d over %d held and %d new" % (offset, t, n)
                           not in msg):
                    return o.report(name, "offset 2^53 - %d, steps %s%s: step at %d: status %d, %r, held %d" % (
                        top - offset, steps, " batched" if batch else "", t, st, msg, held))
                if st:
                    break
                t += n
            refused = any(statuses)
            if refused != bool(whole_st):
                return o.report(name, "offset 2^53 - %d, steps %s%s: the steps %s, the whole pass %s" % (
                    top - offset, steps, " batched" if batch else "", "refused" if refused else "ran",
                    "refused" if whole_st else "ran"))
    o.report(name, "")


def main():
    build, rng = oracle_args(20261130)
    o = Oracle(build)
    L, S, N = 5, 7, 3
    module_case(o, rng, "self_attention_packed_bias")
    module_case(o, rng, "no_bias_batch_first", bias=False, batch_first=True)
    module_case(o, rng, "cross_attention_kdim_vdim", kdim=11, vdim=6)
    module_case(o, rng, "unbatched", unbatched=True)
    module_case(o, rng, "bias_kv_and_zero_attn", bias_kv=True, zero_attn=True)
    kpm = rng.random((N, S)) < 0.3
    kpm[:, 0] = False
    module_case(o, rng, "key_padding_mask_bool", kpm=kpm)
    module_case(o, rng, "key_padding_mask_float", kpm=rng.standard_normal((N, S)))
    am = rng.random((L, S)) < 0.3
    am[:, 1] = False
    module_case(o, rng, "attn_mask_bool_2d_per_head_weights", attn_mask=am, average=False)
    module_case(o, rng, "attn_mask_float_3d", attn_mask=rng.standard_normal((N * 4, L, S)))
    module_case(o, rng, "everything", kdim=9, vdim=5, bias_kv=True, zero_attn=True, batch_first=True, kpm=kpm,
                attn_mask=rng.standard_normal((L, S)), average=False)
    module_case(o, rng, "unbatched_masks_bias_kv", unbatched=True, bias_kv=True, kpm=kpm[0],
                attn_mask=rng.standard_normal((4, L, S)))
    module_case(o, rng, "f32", dtype=np.float32, kpm=kpm)
    # Dimensions of 0, as the module takes them: an empty out (no sequence,
    # no query), or with no key out_proj's bias (the heads' output is 0);
    # every gradient 0.
    for tag, kw in (("batch_0", dict(N=0)), ("batch_0_batch_first", dict(N=0, batch_first=True)),
                    ("no_queries", dict(L=0)), ("no_keys", dict(S=0)), ("no_queries_no_keys", dict(L=0, S=0)),
                    ("unbatched_no_queries", dict(L=0, unbatched=True)), ("no_keys_f32", dict(S=0, dtype=np.float32)),
                    ("no_keys_bias_kv", dict(S=0, bias_kv=True))):
        module_case(o, rng, "size_0_" + tag, **kw)
        if "dtype" not in kw:
            backward_case(o, rng, "size_0_backward_" + tag, **kw)
    for H, Hkv, causal in ((4, 2, 2), (8, 8, 0), (4, 1, 2)):
        f32_case(o, rng, "f32_layer_E256_gqa_%d_over_%d_causal%d" % (H, Hkv, causal), H, Hkv, causal)
    f32_case(o, rng, "f32_layer_E96_one_row", 3, 1, 0, E=96, L=1, S=1, N=3)
    for H, Hkv in ((4, 2), (6, 1), (6, 3)):
        for causal in (0, 1, 2):
            gqa_case(o, rng, "gqa_%d_over_%d_causal%d" % (H, Hkv, causal), H, Hkv, causal)
    # The Llama layer: GQA, causal, RoPE in both layouts, partial rotary, an offset.
    gqa_case(o, rng, "llama_gqa_rope_halves", 4, 2, 2, E=32, rope=(0, 10000.0, 0, 0))
    gqa_case(o, rng, "llama_gqa_rope_interleaved_offset", 4, 1, 2, E=32, rope=(1, 500000.0, 0, 17))
    gqa_case(o, rng, "gqa_partial_rope", 2, 2, 1, E=16, rope=(0, 100.0, 4, 3))
    # L != S: the queries are the last L positions (attn.h: off = S - L but
    # top-left), as attn_sdpa places them; one query (the decode kernel) sees
    # the same keys with or without the bottom-right limit, so the same output.
    for causal in (0, 1, 2):
        gqa_case(o, rng, "gqa_rope_l_below_s_causal%d" % causal, 4, 2, causal, E=32, L=3, S=11, rope=(0, 10000.0, 0, 7))
        gqa_case(o, rng, "gqa_rope_one_query_causal%d" % causal, 4, 2, causal, E=32, L=1, S=20, rope=(1, 10000.0, 0, 2))
        # more queries than keys: the first ones before position_offset, turned the other way
        # (not bottom-right, whose first rows see no key: 0 here, NaN in the reference's softmax)
        if causal != 2:
            gqa_case(o, rng, "gqa_rope_l_above_s_causal%d" % causal, 4, 2, causal, E=32, L=9, S=4, rope=(0, 10000.0, 0, 2))
    for causal in (0, 2):
        gqa_backward_case(o, rng, "backward_gqa_rope_l_below_s_causal%d" % causal, 4, 2, (0, 10000.0, 0, 5), L=3, S=8,
                          causal=causal)
    # L = S: RoPE inside the attention kernel (the cases above with L != S turn q and k first)
    gqa_case(o, rng, "llama_gqa_rope_inside_attention", 4, 2, 2, E=32, L=9, S=9, rope=(0, 10000.0, 0, 5))
    gqa_case(o, rng, "llama_gqa_rope_inside_attention_f32_sized", 8, 2, 2, E=64, L=40, S=40, rope=(1, 10000.0, 0, 0))
    # Random layers: sizes, projections, biases, layouts and masks drawn at random.
    for i in range(24):
        E = int(rng.choice([4, 8, 12, 16, 24]))
        H = int(rng.choice([h for h in (1, 2, 3, 4, 6) if E % h == 0]))
        Lr, Sr, Nr = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 4))
        cross = rng.random() < 0.4
        kpm_r = am_r = None
        if rng.random() < 0.5:
            kpm_r = rng.random((Nr, Sr)) < 0.3 if rng.random() < 0.5 else rng.standard_normal((Nr, Sr))
        if rng.random() < 0.5:
            shape = (Lr, Sr) if rng.random() < 0.5 else (Nr * H, Lr, Sr)
            am_r = rng.random(shape) < 0.3 if rng.random() < 0.5 else rng.standard_normal(shape)
        if kpm_r is not None and am_r is not None and kpm_r.dtype != np.bool_:
            kpm_r = kpm_r > 0  # PyTorch 1.13 merges a float key_padding_mask only without an attn_mask
        if kpm_r is not None and kpm_r.dtype == np.bool_:
            kpm_r[:, 0] = False  # keep a key for every query: PyTorch gives NaN otherwise
        if am_r is not None and am_r.dtype == np.bool_:
            am_r[..., 0] = False
        cfg = dict(kdim=int(rng.integers(1, 10)) if cross else None, vdim=int(rng.integers(1, 10)) if cross else None,
                   bias=bool(rng.random() < 0.7), bias_kv=bool(rng.random() < 0.3), zero_attn=bool(rng.random() < 0.3),
                   batch_first=bool(rng.random() < 0.5), average=bool(rng.random() < 0.5))
        desc = "_".join(k for k, v in cfg.items() if v is True) + ("_kpm" if kpm_r is not None else "") + \
            ("_am%dd" % am_r.ndim if am_r is not None else "")
        module_case(o, rng, "random_%02d_E%d_H%d_L%d_S%d_N%d_%s" % (i, E, H, Lr, Sr, Nr, desc), E=E, H=H, L=Lr, S=Sr,
                    N=Nr, kpm=kpm_r, attn_mask=am_r, **cfg)
    # The layer's batched step over rows of a contiguous f64 cache, each row
    # at its own length and positions (prefill, decode and short prefills
    # mixed, one row left empty until the second step), against PyTorch on
    # each row's whole sequence.
    cached_batch_case(o, rng, "mha_cached_batch_f64_gqa_rope_rows_of_their_own_lengths", 4, 2, 24,
                      [[(2, 5), (0, 9)], [(0, 1), (1, 4), (2, 2)], [(1, 1), (2, 1), (0, 3)]], (0, 10000.0, 0, 3))
    cached_batch_case(o, rng, "mha_cached_batch_f64_mqa_interleaved_rope_partial", 6, 1, 36,
                      [[(1, 12)], [(0, 3), (1, 1)], [(1, 1), (0, 1)], [(0, 2)]], (1, 500.0, 4, 0), B=2)
    # A mask per sequence in the batched step: attn_sdpa's polarity, a bool true keeps the key.
    cached_batch_masks_case(o, rng, "mha_cached_batch_f64_masks_per_sequence_true_keeps_the_key", 4, 2, 16)
    # attn_mha_cached with masks over the cached keys, step after step.
    cached_masks_case(o, rng, "mha_cached_f64_masks_over_the_cache_gqa_rope", 4, 2, 24,
                      [(6, ("am_bool",)), (1, ("kpm_bool", "am_float3")), (3, ("kpm_float",)), (2, ())],
                      (0, 10000.0, 0, 2))
    # The backward pass, against autograd through the module.
    backward_case(o, rng, "backward_self_attention_packed")
    backward_case(o, rng, "backward_cross_attention_separate", kdim=11, vdim=6, batch_first=True)
    backward_case(o, rng, "backward_bias_kv_zero_attn_masks", bias_kv=True, zero_attn=True, kpm=kpm,
                  attn_mask=rng.standard_normal((L, S)))
    backward_case(o, rng, "backward_no_bias_bool_mask", bias=False, attn_mask=am)
    for H, Hkv, rope in ((4, 2, None), (4, 1, (0, 10000.0, 0, 3)), (4, 2, (1, 500.0, 4, 0))):
        gqa_backward_case(o, rng, "backward_gqa_%d_over_%d%s" % (H, Hkv, "_rope%d" % rope[0] if rope else ""), H, Hkv,
                          rope)
    # The causal option with the keys the layer appends (bias_k/bias_v, the
    # zero key) and a key_padding_mask, every combination, in both alignments
    # and with L < S and L > S: the limit holds over the S keys of `key`, the
    # appended keys are visible to every query, as in the module given the
    # causal (L, S) attn_mask, which it pads with a zero column per appended
    # key. Forward (output and per-head or averaged weights) and backward.
    # Bottom-right with L > S leaves the first L - S queries only the
    # appended keys: without them such a query has no key (NaN in the module,
    # tested above), so that shape is taken only with appended keys.
    for causal in (0, 1, 2):
        for bias_kv in (False, True):
            for zero_attn in (False, True):
                for padded in (False, True):
                    for Lc, Sc in ((5, 7), (7, 4)):
                        if causal == 2 and Lc > Sc and not (bias_kv or zero_attn):
                            continue
                        kpm_c = None
                        if padded:
                            kpm_c = rng.random((N, Sc)) < 0.4
                            kpm_c[:, 0] = False  # key 0 is one every causal query sees
                        tag = "causal%d%s%s%s_L%d_S%d" % (causal, "_bias_kv" if bias_kv else "",
                                                           "_zero_attn" if zero_attn else "", "_kpm" if padded else "",
                                                           Lc, Sc)
                        cfg = dict(L=Lc, S=Sc, bias_kv=bias_kv, zero_attn=zero_attn, kpm=kpm_c, causal=causal)
                        module_case(o, rng, "mha_" + tag, average=bool(Lc > Sc), batch_first=padded, **cfg)
                        backward_case(o, rng, "backward_" + tag, **cfg)
    # With the caller's float attn_mask too, and cross-attention sizes.
    module_case(o, rng, "mha_causal2_bias_kv_zero_attn_float_mask_kdim", L=4, S=6, kdim=5, vdim=3, bias_kv=True,
                zero_attn=True, kpm=kpm[:, :6], attn_mask=rng.standard_normal((4, 6)), causal=2, average=False)
    backward_case(o, rng, "backward_causal1_bias_kv_float_mask_3d", L=6, S=6, bias_kv=True,
                  attn_mask=rng.standard_normal((N * 4, 6, 6)), causal=1)
    # f32 too (module_case asks for the weights, so the f32 attention is the exact kernel rounded once).
    for causal in (1, 2):
        module_case(o, rng, "mha_f32_causal%d_bias_kv_zero_attn_kpm" % causal, L=7, S=4, bias_kv=True, zero_attn=True,
                    kpm=kpm[:, :4], causal=causal, dtype=np.float32)
    # Sinks as the layer's parameter: the output, and their gradient with every other.
    gqa_case(o, rng, "gpt_oss_sinks_gqa_causal", 4, 2, 2, sinks=True)
    gqa_case(o, rng, "sinks_rope_inside_attention", 4, 1, 2, E=16, L=7, S=7, rope=(0, 10000.0, 0, 0), sinks=True)
    gqa_backward_case(o, rng, "backward_sinks_gqa", 4, 2, None, sinks=True)
    gqa_backward_case(o, rng, "backward_sinks_rope", 2, 1, (1, 10000.0, 0, 2), sinks=True)
    # The attention's own score variants (options->attention) through the layer's backward,
    # unbatched input with the appended keys and both masks, and a sequence padded entirely.
    gqa_backward_case(o, rng, "backward_gqa_softcap_alibi_window", 4, 2, None, L=7, S=9, causal=2,
                      variants={"softcap": 3.0, "slopes": rng.random(4), "window": 4})
    gqa_backward_case(o, rng, "backward_mqa_alibi_no_causal", 4, 1, None, L=9, S=5, causal=0,
                      variants={"slopes": rng.random(4)})
    backward_case(o, rng, "backward_unbatched_bias_kv_zero_attn_masks", unbatched=True, bias_kv=True, zero_attn=True,
                  kpm=kpm[0], attn_mask=rng.standard_normal((4, L, S)))
    backward_case(o, rng, "backward_unbatched_kdim_vdim", unbatched=True, kdim=3, vdim=11, L=1, S=4)
    fully_padded_backward_case(o, rng, "backward_fully_padded_sequence_bias_only")
    bf16_weights_backward_case(o, rng, "backward_f32_layer_bf16_weights")
    state_dict_case(o, rng, "separate_weights_packed_in_proj_bias_as_the_state_dict_holds_them")
    # Dropout (options->attention's): the layer's mask is attn_sdpa_dropout_mask's over the
    # heads, forward, weights and backward; a cached step's over its own queries.
    for H, Hkv, causal in ((4, 4, 0), (4, 2, 2), (4, 1, 1)):
        mha_dropout_case(o, rng, "mha_dropout_%d_over_%d_causal%d_against_pytorch_with_attn_mask" % (H, Hkv, causal),
                         H, Hkv, causal)
    mha_cached_dropout_case(o, rng, "mha_cached_dropout_rows_of_the_step_gqa", 4, 2, steps=(3, 1, 1, 2))
    attention_fields_refused_case(o, rng, "options_attention_pieces_and_fp8_scales_refused_by_the_layer")
    cache_mismatch_case(o, rng, "mha_cached_over_a_cache_that_does_not_fit_the_layer_named_in_its_terms")
    cached_refusals_case(o, rng, "mha_cached_refused_mask_and_full_cache_named_in_numbers_nothing_changed")
    rope_span_steps_case(o, rng, "mha_cached_and_cached_batch_rope_positions_past_2_53_refused_where_the_whole_pass_is")
    # A query whose every key is masked: NaN in PyTorch, out_proj's bias here.
    torch.manual_seed(7)
    mha = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64)
    q = rng.standard_normal((3, 1, 8))
    am = np.zeros((3, 3), np.bool_)
    am[1] = True
    with torch.no_grad():
        ref, _ = mha(torch.from_numpy(q), torch.from_numpy(q), torch.from_numpy(q), attn_mask=torch.from_numpy(am))
    st, msg, out, w = o.run(q, q, q, module_state(mha, np.float64), 2, attn_mask=am, want_weights=True)
    bias = mha.out_proj.bias.detach().numpy()
    ok = not st and np.isnan(ref.numpy()[1]).all() and np.abs(out[1, 0] - bias).max() == 0 and not w[0, 1].any() and \
        not o.compare("out", np.delete(out, 1, 0), np.delete(ref.numpy(), 1, 0), 1e-12)
    o.report("fully_masked_row_torch_nan_attn_bias_weights_0", "" if ok else "torch %s, attn %s (%s)" % (ref.numpy()[1], out[1], msg))
    # Errors.
    x = rng.standard_normal((4, 2, 8))
    good = module_state(mha, np.float64)
    st, msg, _, _ = o.run(x, x, x, good, 3)
    o.report("error_heads_divide", "" if st and "not a multiple of num_heads" in msg else msg)
    st, msg, _, _ = o.run(x, x, x, dict(good, in_proj_weight=good["in_proj_weight"][:16]), 2)
    o.report("error_in_proj_shape", "" if st and "in_proj_weight has shape (16, 8)" in msg else msg)
    st, msg, _, _ = o.run(x, x, x, good, 2, kpm=np.zeros((2, 3), np.bool_))
    o.report("error_key_padding_mask_shape", "" if st and "key_padding_mask" in msg else msg)
    st, msg, _, _ = o.run(x.astype(np.float32), x, x, good, 2)
    o.report("error_mixed_dtypes", "" if st and "in_proj_weight is f64; the inputs are f32" in msg else msg)
    st, msg, _, _ = o.run(x, x, x, dict(good, in_proj_weight=good["in_proj_weight"]), 2, kv_heads=1)
    o.report("error_packed_with_gqa", "" if st and "needs kdim = vdim = E and no GQA" in msg else msg)
    # The sinks' gradient where the values cancel, last so that the cases above keep their data.
    for dtype in (np.float64, np.float32):
        for rows in (16, 3):  # the flash forward and decode
            cancelling_sinks_case(o, rng, "backward_sinks_cancelling_values_%s_L%d" % (np.dtype(dtype).name, rows),
                                  dtype, L=rows)
    # An f32 layer whose projections round: its attention's inputs a few u from the reference's.
    for rows in (16, 3):
        rounded_sinks_case(o, rng, "backward_sinks_f32_rounded_projections_random_L%d" % rows, False, L=rows)
        rounded_sinks_case(o, rng, "backward_sinks_f32_rounded_projections_cancelling_values_L%d" % rows, True,
                           E=16, L=rows, S=64, causal=0)
    print("# mha oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
