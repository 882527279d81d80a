#!/usr/bin/python3
"""oracle_half.py -- attn_sdpa with a 16-bit q and out (bf16 and f16) against
PyTorch float64 on the same 16-bit inputs, through ctypes.

q, k, v are drawn, rounded to the 16-bit type (by PyTorch, to nearest even),
and given to attn_sdpa as 16-bit tensors (k and v also as f32 beside a 16-bit
q); the reference is PyTorch's attention in float64 on those values widened.
attn computes in f32 (q widened exactly, f32 sums and softmax) and rounds its
f32 output once to the 16-bit type, so with u16 the type's unit roundoff
(2^-8 for bf16, 2^-11 for f16) each output element is within

    u16 |ref| + (1 + u16) (2e-5 max|P |v|| + 4 * 2^-24 max|score| max|v|)

of the reference (P |v| the attention on |v|): one rounding of the value, plus
the f32 call's bound on the same inputs (attn.h's). lse is f32 and held to the f32 bound. The
cases run every kernel the f32 path has (flash tiles, the split-key decode
path for 1-4 query rows, the exact kernel through attn_sdpa_reference), GQA,
causal masks in both alignments, bool and f32 masks; and the workspace path
(attn_sdpa_workspace_size, then a call that allocates nothing) gives the same
bits. The backward pass (backward_case) on a 16-bit q, out and dout against
PyTorch autograd in float64, within its bound. Errors: out of another dtype,
weights asked for, an f16 lse.

Usage: oracle_half.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import ctypes
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from attn._core import view as tensor  # noqa: E402  (16-bit values as uint16 bits, with their dtype code)
from attn._lib import Context, Error, Tensor  # noqa: E402
from torch_attention import Reporter, causal_allowed, oracle_args  # noqa: E402

F32, F16, BF16, BOOL = 1, 4, 5, 3
U16 = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16}


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("has_scale", ctypes.c_int), ("scale", ctypes.c_double),
                ("causal", ctypes.c_int), ("mask", ctypes.POINTER(Tensor)), ("compute", ctypes.c_int),
                ("context", ctypes.POINTER(Context))]  # the rest stays at its defaults (struct_size says so)


def bits(x, kind):
    """x (torch, any float) rounded to the 16-bit type: (uint16 bits, float64 values)."""
    h = x.to(TORCH[kind])
    return h.view(torch.int16).numpy().view(np.uint16).copy(), h.double().numpy()


def widen(b, kind):
    return torch.from_numpy(b.view(np.int16)).view(TORCH[kind]).double().numpy()


class Check(Reporter):
    def __init__(self, build):
        super().__init__()
        self.lib = ctypes.CDLL(os.path.join(build, "libattn.so"))
        self.lib.attn_sdpa_options_init.restype = ctypes.c_size_t
        self.lib.attn_context_init.restype = ctypes.c_size_t

    def options(self, causal=0, mask=None, context=None):
        o = Options()
        self.lib.attn_sdpa_options_init(ctypes.byref(o), ctypes.c_size_t(ctypes.sizeof(Options)))
        o.causal = causal
        if mask is not None:
            o.mask = ctypes.pointer(mask)
        if context is not None:
            o.context = ctypes.pointer(context)
        return o

    def call(self, fn, out, lse, q, k, v, o):
        err = Error()
        st = getattr(self.lib, fn)(ctypes.byref(out), ctypes.byref(lse) if lse is not None else None, None,
                                   ctypes.byref(q), ctypes.byref(k), ctypes.byref(v), ctypes.byref(o), ctypes.byref(err))
        return st, err.message.decode()


def reference(q, k, v, mask, causal):
    """PyTorch float64 attention (GQA by repeating heads): out, lse, max|score|,
    and the attention of |v| (the weighted mean of |v| each output averages)."""
    q, k, v = (torch.from_numpy(a) for a in (q, k, v))
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, -3), v.repeat_interleave(g, -3)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    big = float(s.abs().max())
    if mask is not None:
        m = torch.from_numpy(mask)
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
    if causal:
        s = s.masked_fill(~causal_allowed(s.shape[-2], s.shape[-1], causal), float("-inf"))
    return (s.softmax(-1) @ v).numpy(), torch.logsumexp(s, -1).numpy(), big, (s.softmax(-1) @ v.abs()).numpy()


def case(c, rng, name, kind, B, H, Hk, L, S, E, Ev, causal=0, mask=None, kv32=False, fn="attn_sdpa", workspace=False,
         queries=torch.randn, values=torch.randn):
    torch.manual_seed(int(rng.integers(1 << 30)))
    qb, q64 = bits(queries(B, H, L, E), kind)
    kb, k64 = bits(torch.randn(B, Hk, S, E), kind)
    vb, v64 = bits(values(B, Hk, S, Ev), kind)
    dt = F16 if kind == "f16" else BF16
    if kv32:  # k and v in f32 (the values the 16-bit ones hold) beside a 16-bit q
        k_arr, v_arr, kdt = k64.astype(np.float32), v64.astype(np.float32), F32
    else:
        k_arr, v_arr, kdt = kb, vb, dt
    out = np.zeros((B, H, L, Ev), np.uint16)
    lse = np.zeros((B, H, L), np.float32)
    mt = None
    if mask is not None:
        mask = np.ascontiguousarray(mask)
        mt = tensor(mask, BOOL if mask.dtype == np.bool_ else F32)
    tq, tk, tv, to, tl = tensor(qb, dt), tensor(k_arr, kdt), tensor(v_arr, kdt), tensor(out, dt), tensor(lse, F32)
    st, msg = c.call(fn, to, tl, tq, tk, tv, c.options(causal, mt))
    if st:
        return c.report(name, "%s failed: %s" % (fn, msg))
    ref, ref_lse, big, mag = reference(q64, k64, v64, None if mask is None else mask.astype(np.float64) if mask.dtype != np.bool_ else mask, causal)
    got = widen(out, kind)
    u = U16[kind]
    f32 = 2e-5 * float(mag.max()) + 4 * 2.0 ** -24 * big * float(np.abs(v64).max())
    worst = float(np.max(np.abs(got - ref) / (u * np.abs(ref) + (1 + u) * f32)))
    lse_err = float(np.max(np.abs(lse - ref_lse) / (2e-5 * np.maximum(1, np.abs(ref_lse)) + 4 * 2.0 ** -24 * big)))
    why = "" if worst <= 1 and lse_err <= 1 else "error %.3g of the bound, lse %.3g of its bound" % (worst, lse_err)
    if not why and workspace:  # the same call from a workspace: the same bits, no allocation asked
        size = ctypes.c_size_t()
        err = Error()
        o = c.options(causal, mt)
        st = c.lib.attn_sdpa_workspace_size(ctypes.byref(size), ctypes.byref(to), ctypes.byref(tl), None, ctypes.byref(tq),
                                            ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(o), ctypes.byref(err))
        buf = ctypes.create_string_buffer(max(size.value, 1))
        ctx = Context()
        c.lib.attn_context_init(ctypes.byref(ctx), ctypes.c_size_t(ctypes.sizeof(Context)))
        ctx.workspace, ctx.workspace_size = ctypes.cast(buf, ctypes.c_void_p), size.value
        out2 = np.zeros_like(out)
        st2, msg = c.call(fn, tensor(out2, dt), None, tq, tk, tv, c.options(causal, mt, ctx)) if not st else (st, err.message.decode())
        small = Context()
        c.lib.attn_context_init(ctypes.byref(small), ctypes.c_size_t(ctypes.sizeof(Context)))
        small.workspace, small.workspace_size = ctypes.cast(buf, ctypes.c_void_p), 64
        st3, msg3 = c.call(fn, tensor(np.zeros_like(out), dt), None, tq, tk, tv, c.options(causal, mt, small))
        if st or st2 or not np.array_equal(out, out2) or st3 != 20 or "workspace" not in msg3:
            why = "workspace: size status %d, call %d (%s), same bits %s; 64 bytes: status %d (%s)" % (
                st, st2, msg, np.array_equal(out, out2), st3, msg3)
    c.report(name, why)


def backward_case(c, rng, name, kind, B, H, Hk, L, S, E, Ev, causal=0, kv32=False, workspace=False):
    """attn_sdpa_backward on a 16-bit q, out and dout (k and v 16-bit, or f32),
    against PyTorch autograd in float64 on the same values: dq in q's dtype,
    dk and dv in k's and v's, each within u16 |ref| + (1 + u16) ((2e-5 + e^x - 1)
    + u16) max g_abs: one rounding, the f32 backward's bound (oracle_backward.py's
    figure for products that do not cancel: x = 8 * 2^-24 max|s|, g_abs the
    gradient of absolute terms), and out's own
    16-bit rounding, which moves rowsum(dout * out) by u16 of its terms."""
    from oracle_backward import magnitudes
    torch.manual_seed(int(rng.integers(1 << 30)))
    dt = F16 if kind == "f16" else BF16
    qb, q64 = bits(torch.randn(B, H, L, E), kind)
    kb, k64 = bits(torch.randn(B, Hk, S, E), kind)
    vb, v64 = bits(torch.randn(B, Hk, S, Ev), kind)
    db, d64 = bits(torch.randn(B, H, L, Ev), kind)
    kdt = F32 if kv32 else dt
    k_arr, v_arr = (k64.astype(np.float32), v64.astype(np.float32)) if kv32 else (kb, vb)
    out = np.zeros((B, H, L, Ev), np.uint16)
    lse = np.zeros((B, H, L), np.float32)
    tq, tk, tv, to, tl = tensor(qb, dt), tensor(k_arr, kdt), tensor(v_arr, kdt), tensor(out, dt), tensor(lse, F32)
    st, msg = c.call("attn_sdpa", to, tl, tq, tk, tv, c.options(causal))
    if st:
        return c.report(name, "attn_sdpa failed: " + msg)
    gdt = np.float32 if kv32 else np.uint16
    dq, dk, dv = np.zeros_like(qb), np.zeros(k_arr.shape, gdt), np.zeros(v_arr.shape, gdt)
    grads = [tensor(dq, dt), tensor(dk, kdt), tensor(dv, kdt)]

    def run(o, g):
        err = Error()
        r = c.lib.attn_sdpa_backward(*[ctypes.byref(t) for t in g], None, ctypes.byref(tensor(db, dt)), ctypes.byref(tq),
                                     ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to), ctypes.byref(tl),
                                     ctypes.byref(o), ctypes.byref(err))
        return r, err.message.decode()
    st, msg = run(c.options(causal), grads)
    if st:
        return c.report(name, "attn_sdpa_backward failed: " + msg)
    xs = [torch.tensor(a, requires_grad=True) for a in (q64, k64, v64)]
    g = H // Hk
    kk, vv = xs[1].repeat_interleave(g, -3), xs[2].repeat_interleave(g, -3)
    scale = E ** -0.5
    sc = xs[0] @ kk.transpose(-1, -2) * scale
    if causal:
        sc = sc.masked_fill(~causal_allowed(L, S, causal), float("-inf"))
    w = sc.softmax(-1)
    ref_out = w @ vv
    ref_out.backward(torch.from_numpy(d64))
    u = U16[kind]
    big = float(sc.detach().abs().nan_to_num(posinf=0.0, neginf=0.0).max())
    x = 8 * 2.0 ** -24 * big
    mags = magnitudes(w.detach(), 1.0, torch.from_numpy(d64), ref_out.detach(), xs[0].detach(), kk.detach(),
                      vv.detach(), scale, [q64.shape, k64.shape, v64.shape])
    why = ""
    for n, got, r, m, half in (("dq", widen(dq, kind), xs[0].grad.numpy(), mags[0], True),
                               ("dk", dk.astype(np.float64) if kv32 else widen(dk, kind), xs[1].grad.numpy(), mags[1], not kv32),
                               ("dv", dv.astype(np.float64) if kv32 else widen(dv, kind), xs[2].grad.numpy(), mags[2], not kv32)):
        uu = u if half else 2.0 ** -24
        allowed = uu * np.abs(r) + (1 + uu) * ((2e-5 + np.expm1(x)) + u) * m
        ratio = float(np.max(np.abs(got - r) / allowed))
        if not ratio <= 1:
            why = why or "%s: error %.3g of the bound" % (n, ratio)
    if not why and workspace:
        size, err = ctypes.c_size_t(), Error()
        st = c.lib.attn_sdpa_backward_workspace_size(ctypes.byref(size), *[ctypes.byref(t) for t in grads], None,
                                                     ctypes.byref(tensor(db, dt)), ctypes.byref(tq), ctypes.byref(tk),
                                                     ctypes.byref(tv), ctypes.byref(to), ctypes.byref(tl),
                                                     ctypes.byref(c.options(causal)), ctypes.byref(err))
        buf = ctypes.create_string_buffer(max(size.value, 1))
        ctx = Context()
        c.lib.attn_context_init(ctypes.byref(ctx), ctypes.c_size_t(ctypes.sizeof(Context)))
        ctx.workspace, ctx.workspace_size = ctypes.cast(buf, ctypes.c_void_p), size.value
        again = [np.zeros_like(a) for a in (dq, dk, dv)]
        st2, msg = run(c.options(causal, None, ctx), [tensor(again[0], dt), tensor(again[1], kdt), tensor(again[2], kdt)])
        same = all(np.array_equal(a, b) for a, b in zip(again, (dq, dk, dv)))
        if st or st2 or not same:
            why = "workspace: size status %d, call %d (%s), same bits %s" % (st, st2, msg, same)
    c.report(name, why)


def errors(c):
    q = np.zeros((1, 2, 3, 4), np.uint16)
    k = np.zeros((1, 2, 5, 4), np.uint16)
    out32 = np.zeros((1, 2, 3, 4), np.float32)
    lse16 = np.zeros((1, 2, 3), np.uint16)
    tq, tk = tensor(q, BF16), tensor(k, BF16)
    st, msg = c.call("attn_sdpa", tensor(out32, F32), None, tq, tk, tk, c.options())
    c.report("error_out_dtype_differs", "" if st == 6 and "out is f32 but q is bf16" in msg else "%d %s" % (st, msg))
    st, msg = c.call("attn_sdpa", tensor(np.zeros_like(q), BF16), tensor(lse16, BF16), tq, tk, tk, c.options())
    c.report("error_lse_16_bit", "" if st == 6 and "lse is bf16" in msg else "%d %s" % (st, msg))
    err = Error()
    w = np.zeros((1, 2, 3, 5), np.uint16)
    st = c.lib.attn_sdpa(ctypes.byref(tensor(np.zeros_like(q), BF16)), None, ctypes.byref(tensor(w, BF16)), ctypes.byref(tq),
                         ctypes.byref(tk), ctypes.byref(tk), ctypes.byref(c.options()), ctypes.byref(err))
    msg = err.message.decode()
    c.report("error_weights_with_16_bit_q", "" if st == 6 and "weights" in msg else "%d %s" % (st, msg))


def cancelling(kind):
    """Values (.., S, Ev) whose attention (under near-uniform weights) nearly cancels: S/2 magnitudes from 1e-2 to near the
    type's top (65504 for f16), then the same negated. The rounding of the f32 sums scales
    with the |v| averaged, not with the small result: 2e-5 max|exact| was 10-50 times short."""
    top = 6e4 if kind == "f16" else 1e6

    def values(B, H, S, Ev):
        a = torch.exp(torch.rand(B, H, S // 2, Ev) * np.log(top / 1e-2)) * 1e-2
        return torch.cat([a, -a], -2)
    return values


def main():
    build, rng = oracle_args(20261203)
    c = Check(build)
    for kind in ("bf16", "f16"):
        case(c, rng, "%s_flash_gqa_causal_bottom_right" % kind, kind, 2, 4, 2, 200, 230, 64, 64, causal=2, workspace=True)
        case(c, rng, "%s_flash_causal_top_left_ev32" % kind, kind, 1, 2, 2, 130, 100, 32, 48, causal=1)
        case(c, rng, "%s_decode_one_row_2100_keys" % kind, kind, 1, 8, 2, 1, 2100, 64, 64, workspace=True)
        case(c, rng, "%s_decode_four_rows_causal" % kind, kind, 2, 4, 4, 4, 3000, 128, 128, causal=2)
        case(c, rng, "%s_bool_mask" % kind, kind, 1, 2, 1, 17, 40, 16, 16, mask=rng.random((17, 40)) < 0.7)
        case(c, rng, "%s_float_mask_f32" % kind, kind, 1, 2, 2, 9, 33, 8, 8,
             mask=rng.standard_normal((9, 33)).astype(np.float32))
        case(c, rng, "%s_q_with_f32_kv" % kind, kind, 1, 4, 2, 50, 70, 32, 32, kv32=True)
        case(c, rng, "%s_values_that_cancel" % kind, kind, 1, 2, 1, 64, 4096, 16, 16,
             queries=lambda *shape: 1e-3 * torch.randn(*shape), values=cancelling(kind))
        case(c, rng, "%s_reference_kernel" % kind, kind, 1, 2, 2, 7, 11, 8, 8, causal=2, fn="attn_sdpa_reference")
    for kind in ("bf16", "f16"):
        backward_case(c, rng, "%s_backward_fused_gqa_causal" % kind, kind, 2, 4, 2, 70, 90, 32, 32, causal=2, workspace=True)
        backward_case(c, rng, "%s_backward_f32_kv" % kind, kind, 1, 2, 2, 33, 47, 16, 24, kv32=True)
        backward_case(c, rng, "%s_backward_one_row" % kind, kind, 1, 2, 1, 1, 300, 64, 64)
    errors(c)
    print("# 16-bit q and out: %d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
