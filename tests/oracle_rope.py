#!/usr/bin/python3
"""oracle_rope.py -- attn_rope and attn_rope_backward against PyTorch float64.

Calls libattn.so through ctypes (the C API itself, no command in between) on
random tensors, and compares with RoPE written in PyTorch from its two
published forms:
  halves (GPT-NeoX, Hugging Face Llama): inv_freq = 1 / base^(arange(0, d, 2) / d),
      cos/sin of outer(positions, inv_freq) repeated over both halves,
      x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1);
  interleaved (GPT-J, Meta's Llama): the same angles on pairs (2i, 2i + 1), as
      complex multiplication of view_as_complex(x) by exp(i angle);
with rotary_dim < E leaving the rest unchanged, positions offset + r, and linear
scaling dividing the positions. The backward pass is checked against autograd
through the same PyTorch code.

Tolerances: f64 1e-12 · max |x| (the angles come from the same double
formula; cos and sin may differ by an ulp); f32 2^-23 · max |x| (attn computes
in double and rounds once; the reference rounds the f32 input the same way).

Usage: oracle_rope.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import ctypes
import os
import sys

import numpy as np
import torch

from torch_attention import Reporter, oracle_args

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from attn._core import view  # noqa: E402  (an attn_tensor over an f32 or f64 array)
from attn._lib import Error, RopeOptions, Tensor  # noqa: E402

F32, F64 = 1, 2


def reference(x, layout, base, rotary_dim, offset, scaling):
    """RoPE in PyTorch float64 from its published forms (see the docstring)."""
    x = torch.tensor(x, dtype=torch.float64) if not torch.is_tensor(x) else x
    E = x.shape[-1]
    d = rotary_dim or E
    L = x.shape[-2] if x.dim() >= 2 else 1
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    t = (torch.arange(L, dtype=torch.float64) + offset) / scaling
    freqs = torch.outer(t, inv_freq)  # (L, d/2)
    if x.dim() == 1:
        freqs = freqs[0]
    rot, rest = x[..., :d], x[..., d:]
    if layout == 0:
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = rot[..., :d // 2], rot[..., d // 2:]
        rotated = rot * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()
    else:
        pairs = torch.view_as_complex(rot.reshape(rot.shape[:-1] + (d // 2, 2)).contiguous())
        rotated = torch.view_as_real(pairs * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2)
    return torch.cat((rotated, rest), dim=-1)


class Oracle(Reporter):
    def __init__(self, build):
        super().__init__()
        self.lib = ctypes.CDLL(os.path.join(build, "libattn.so"))
        # attn_rope_options_default() is a macro of attn.h over the exported
        # attn_rope_options_init(&x, sizeof x) ("Versioned structs").
        init = self.lib.attn_rope_options_init
        init.restype, init.argtypes = ctypes.c_size_t, [ctypes.POINTER(RopeOptions), ctypes.c_size_t]

    def options(self, layout, base, rotary_dim, offset, scaling):
        o = RopeOptions()
        self.lib.attn_rope_options_init(ctypes.byref(o), ctypes.sizeof(o))
        o.layout, o.base, o.rotary_dim, o.position_offset, o.linear_scaling = layout, base, rotary_dim, offset, scaling
        return o

    def call(self, fn, out, x, o):
        err = Error()
        st = getattr(self.lib, fn)(ctypes.byref(view(out)), ctypes.byref(view(x)), ctypes.byref(o), ctypes.byref(err))
        return st, err.message.decode()

    def case(self, name, x, layout=0, base=10000.0, rotary_dim=0, offset=0, scaling=1.0, out=None):
        o = self.options(layout, base, rotary_dim, offset, scaling)
        out = np.zeros_like(x) if out is None else out
        st, msg = self.call("attn_rope", out, x, o)
        if st:
            return self.report(name, "attn_rope failed: " + msg)
        xt = torch.tensor(x.astype(np.float64), requires_grad=True)
        ref = reference(xt, layout, base, rotary_dim, offset, scaling)
        big = float(np.abs(x).max()) if x.size else 1.0
        tol = (1e-12 if x.dtype == np.float64 else 2.0 ** -23) * max(big, 1e-300)
        err = float(np.abs(out - ref.detach().numpy()).max()) if x.size else 0.0
        if err > tol:
            return self.report(name, "forward error %.3g > %.3g" % (err, tol))
        dout = np.random.default_rng(len(name)).standard_normal(x.shape).astype(x.dtype)
        ref.backward(torch.tensor(dout.astype(np.float64)))
        dx = np.zeros_like(x)
        st, msg = self.call("attn_rope_backward", dx, dout, o)
        big = float(np.abs(dout).max()) if dout.size else 1.0
        tol = (1e-12 if x.dtype == np.float64 else 2.0 ** -23) * big
        err = float(np.abs(dx - xt.grad.numpy()).max()) if x.size else 0.0
        self.report(name, "attn_rope_backward failed: " + msg if st else
                    "" if err <= tol else "backward error %.3g > %.3g" % (err, tol))

    def error(self, name, x, out, o, want):
        st, msg = self.call("attn_rope", out, x, o)
        self.report(name, "" if st and want in msg else "status %d, message %r; wanted %r" % (st, msg, want))


def main():
    build, rng = oracle_args(20261130)
    o = Oracle(build)
    f = rng.standard_normal
    for layout, lname in ((0, "halves"), (1, "interleaved")):
        o.case("llama_%s_f64" % lname, f((2, 4, 17, 64)), layout)
        o.case("llama_%s_f32" % lname, f((2, 4, 17, 64)).astype(np.float32), layout)
        o.case("partial_rotary_%s" % lname, f((3, 9, 48)), layout, rotary_dim=16)
        o.case("kv_cache_offset_%s" % lname, f((8, 1, 128)), layout, offset=70000)
        o.case("linear_scaling_base_%s" % lname, f((2, 30, 32)), layout, base=500000.0, scaling=4.0)
        o.case("rank1_%s" % lname, f(8), layout, offset=3)
        o.case("rank5_%s" % lname, f((2, 1, 3, 5, 6)).astype(np.float32), layout, rotary_dim=4, offset=11)
        # Strided input (a (L, H, E) buffer seen as (H, L, E)) and output in place.
        x = f((7, 3, 16)).transpose(1, 0, 2)
        o.case("strided_%s" % lname, x, layout, offset=5)
        y = f((4, 10, 12))
        o.case("in_place_%s" % lname, y.copy(), layout, offset=2, out=None)
        z = y.copy()
        st, msg = o.call("attn_rope", z, z, o.options(layout, 10000.0, 0, 2, 1.0))
        ref = reference(y, layout, 10000.0, 0, 2, 1.0).numpy()
        o.report("in_place_equals_out_of_place_%s" % lname,
                 msg if st else "" if np.abs(z - ref).max() <= 1e-12 * np.abs(y).max() else "differs")
    for i in range(40):
        rank = int(rng.integers(2, 6))
        shape = tuple(int(rng.integers(1, 4)) for _ in range(rank - 2)) + (int(rng.integers(1, 40)),
                                                                           2 * int(rng.integers(1, 40)))
        dt = np.float64 if i % 2 else np.float32
        rd = 2 * int(rng.integers(0, shape[-1] // 2 + 1))
        o.case("random_%02d_%s" % (i, dt.__name__), f(shape).astype(dt), int(rng.integers(0, 2)),
               float(rng.choice([10000.0, 1e6, 100.0])), rd, int(rng.integers(0, 10000)),
               float(rng.choice([1.0, 2.0, 8.0])))
    # Sinusoidal encodings: the paper's formula, sin(pos / 10000^(2i/E)) at even
    # columns and cos at odd ones, for odd and even E and an offset.
    o.lib.attn_sinusoidal_positions.argtypes = [ctypes.POINTER(Tensor), ctypes.c_int64, ctypes.POINTER(Error)]
    for L, E, offset, dt in ((7, 16, 0, np.float64), (5, 9, 1000, np.float64), (300, 64, 3, np.float32)):
        pe = np.zeros((L, E), dt)
        err = Error()
        st = o.lib.attn_sinusoidal_positions(ctypes.byref(view(pe)), offset, ctypes.byref(err))
        pos = np.arange(offset, offset + L, dtype=np.float64)[:, None]
        i2 = (np.arange(E) // 2 * 2).astype(np.float64)
        angle = pos / (10000.0 ** (i2 / E))
        ref = np.where(np.arange(E) % 2 == 0, np.sin(angle), np.cos(angle))
        tol = 1e-12 if dt == np.float64 else 2.0 ** -24
        e = float(np.abs(pe - ref).max())
        o.report("sinusoidal_L%d_E%d_offset%d_%s" % (L, E, offset, np.dtype(dt).name),
                 err.message.decode() if st else "" if e <= tol else "error %g" % e)
    x = f((2, 5, 6))
    out = np.zeros_like(x)
    o.error("error_odd_rotary_dim", x, out, o.options(0, 10000.0, 3, 0, 1.0), "must be even")
    o.error("error_odd_E", f((2, 5, 7)), np.zeros((2, 5, 7)), o.options(0, 10000.0, 0, 0, 1.0), "must be even")
    o.error("error_base_zero", x, out, o.options(0, 0.0, 0, 0, 1.0), "base is 0")
    o.error("error_scaling_inf", x, out, o.options(0, 10000.0, 0, 0, float("inf")), "linear_scaling is inf")
    o.error("error_negative_offset", x, out, o.options(0, 10000.0, 0, -1, 1.0), "position_offset is -1")
    o.error("error_layout", x, out, o.options(7, 10000.0, 0, 0, 1.0), "layout 7")
    o.error("error_shape_mismatch", x, np.zeros((2, 5, 4)), o.options(0, 10000.0, 0, 0, 1.0), "x's shape")
    o.error("error_dtype_mismatch", x, np.zeros((2, 5, 6), np.float32), o.options(0, 10000.0, 0, 0, 1.0), "x's shape and dtype")
    print("# rope oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
