#!/usr/bin/python3
"""oracle_fp8_scale.py -- fp8 keys and values with one scale per head
(attn.h, "fp8 with one scale per head"): FlashAttention-3's descale_k /
descale_v through attn_sdpa_options, and the caches' k_scale / v_scale.

- Round trip, bit for bit: a pool (attn.KVPages) and a contiguous cache
  (attn_kv_cache through ctypes) of e4m3 and e5m2 with per-head scales
  store fp8(x / s) and gather code * s; checked against a NumPy reference
  written from attn.h (x / s as an f32 division, the fp8 code by nearest
  value, ties to even, saturating: oracle_quant.py's ref_fp8), over
  heavy-tailed values, values past the saturation point and tiny ones.
- Kernels: attention with the scale folded in (pool and cache attend,
  attn_sdpa and attn_sdpa_varlen with k_descale / v_descale, decode and
  flash shapes, GQA; the exact kernel with weights, attn_sdpa_reference and
  an f16 q too) against PyTorch float64 attention on the values
  code * s, within attn_sdpa's f32 bound (attn.h, "Numerics":
  2e-5 * max|exact| + 4 * 2^-24 * max|s| * max|v|), and against the f32
  kernels run on the gathered values within twice that bound (both are
  within it of the exact result; attn.h says why they are not bitwise).
  The kernel that ran is checked on the ATTN_VERBOSE line.
- Errors: a scale of 0, < 0, NaN or infinity (ScaleError), a scale on a
  q8 or f32 store or with f16 keys (DtypeError), a descale of the wrong
  shape (ShapeError), a cache given both (OptionError). A paged plan of
  a pool with scales: its run bitwise attend.
- The versioned struct: options of the size an older header gives (no
  descale fields), with garbage past it, read as no scale.
- The command: attn sdpa --kv e4m3 --kv-scale S,SV against the reference,
  and its bad input (one line "attn: error: ...", non-zero exit, no output).

Usage: oracle_fp8_scale.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why"."""
import ctypes
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
os.environ.setdefault("ATTN_LIBRARY", os.path.join(BUILD, "libattn.so"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import attn  # noqa: E402
from attn import _lib  # noqa: E402
from attn._core import view as attn_view  # noqa: E402
from oracle_quant import E4M3, E5M2, fp8_table, ref_fp8  # noqa: E402
from seeding import test_seed  # noqa: E402
from torch_attention import Reporter  # noqa: E402

r = Reporter()
rng = np.random.default_rng(test_seed(20261203))
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}
LIB = _lib.LIB
ERR_SHAPE, ERR_DTYPE, ERR_SCALE, ERR_OPTION = 3, 6, 8, 9


def check(name, cond, why=""):
    r.report(name, "" if cond else (why or "failed"))


def keys(shape, heavy=True):
    """Normal values, every 16th channel 30 times larger (heavy-tailed key
    channels), a few past any saturation point and a few tiny ones."""
    x = rng.standard_normal(shape).astype(np.float32)
    if heavy:
        x[..., 3::16] *= 30
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = np.float32(1e6)
    flat[rng.integers(0, flat.size, 3)] = np.float32(1e-7)
    return x


def ref_codes(x, s, fmt):
    """x (..., Hk, n, E) stored with scale s[h]: codes fp8(f32(x) / f32(s))."""
    s = np.asarray(s, np.float32).reshape(-1, 1, 1)
    return ref_fp8((np.asarray(x, np.float32) / s).astype(np.float32), fmt)


def ref_values(codes, s, fmt):
    """code * s, one f32 rounding (the product of two f32 in f64 is exact)."""
    s = np.asarray(s, np.float32).reshape(-1, 1, 1)
    return (fp8_table(fmt)[codes] * s.astype(np.float64)).astype(np.float32)


def torch_attn(q, k, v, causal_br=True):
    """float64 attention of q (Hq, L, E) over k (Hk, S, E), v (Hk, S, Ev), GQA
    by repeat_interleave, bottom-right causal or none: (out, lse)."""
    q, k, v = (torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k, v))
    g = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    s = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    L, S = q.shape[1], k.shape[1]
    if causal_br:
        i = torch.arange(L)[:, None] + (S - L)
        s = s.masked_fill(torch.arange(S)[None, :] > i, -np.inf)
    return (torch.softmax(s, -1) @ v).numpy(), torch.logsumexp(s, -1).numpy()


def bound(exact, q, k, v):
    """attn_sdpa's f32 bound (attn.h, Numerics) for these values."""
    Hq, Hk = q.shape[-3], k.shape[-3]
    kk = np.repeat(np.asarray(k, np.float64), Hq // Hk, axis=-3)
    smax = np.abs(np.einsum("...le,...se->...ls", np.asarray(q, np.float64), kk)).max() / np.sqrt(q.shape[-1])
    return 2e-5 * np.abs(exact).max() + 4 * 2.0 ** -24 * smax * np.abs(v).max()


def within(name, got, want, b):
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    check(name, np.isfinite(err) and err <= b, "max error %.3g > bound %.3g" % (err, b))


def verbose_kernel(capture):
    """The kernel= word of the last ATTN_VERBOSE line written to fd 2."""
    lines = [ln for ln in capture.splitlines() if "kernel=" in ln]
    return lines[-1].split("kernel=")[1].split()[0] if lines else ""


class Stderr:
    """fd 2 captured (the library's verbose lines), with ATTN_VERBOSE set."""

    def __enter__(self):
        self.f = tempfile.TemporaryFile("w+")
        self.saved = os.dup(2)
        os.dup2(self.f.fileno(), 2)
        os.environ["ATTN_VERBOSE"] = "1"
        return self

    def __exit__(self, *a):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.f.seek(0)
        self.text = self.f.read()


# ---- the pool ----------------------------------------------------------------

def test_pool(fmt, L):
    Hk, Hq, E, Ev, P = 2, 4, 32, 48, 16
    ks, vs = np.array([0.5, 3.0], np.float32), np.array([0.02, 7.0], np.float32)
    pool = attn.KVPages(Hk, E, num_pages=16, max_sequences=2, value_dim=Ev, page_size=P, dtype=fmt,
                        k_scale=ks, v_scale=vs)
    seq = pool.create()
    S1, S2 = 21, 30  # two appends, across pages
    k, v = keys((S1 + S2, Hk, E)), keys((S1 + S2, Hk, Ev), heavy=False)
    pool.append(seq, k[:S1], v[:S1])
    pool.append(seq, k[S1:], v[S1:])
    gk, gv = pool.gather(seq)
    kc = ref_codes(k.transpose(1, 0, 2), ks, FORMATS[fmt])
    vc = ref_codes(v.transpose(1, 0, 2), vs, FORMATS[fmt])
    wk, wv = ref_values(kc, ks, FORMATS[fmt]), ref_values(vc, vs, FORMATS[fmt])
    check("pool_roundtrip_%s_bitwise" % fmt, np.array_equal(gk.view(np.uint32), wk.view(np.uint32)) and
          np.array_equal(gv.view(np.uint32), wv.view(np.uint32)),
          "gather differs from code * s at %d keys, %d values" % ((gk != wk).sum(), (gv != wv).sum()))
    # the view carries the scales, and holds the codes themselves
    w = pool._view()
    check("pool_view_scales_%s" % fmt, bool(w.k_scale) and w.k_scale[1] == ks[1] and w.v_scale[0] == vs[0])
    # attention with the scales folded in
    q = rng.standard_normal((L, Hq, E)).astype(np.float32) * 0.3
    with Stderr() as cap:
        out = pool.attend(seq, q)
    kern = verbose_kernel(cap.text)
    want_kernel = "decode" if L <= 8 else "flash"
    exact, _ = torch_attn(q.transpose(1, 0, 2), gk, gv)
    exact = exact.transpose(1, 0, 2)
    b = bound(exact, q.transpose(1, 0, 2), gk, gv)
    within("pool_attend_%s_L%d_vs_torch_f64" % (fmt, L), out, exact, b)
    check("pool_attend_%s_L%d_kernel" % (fmt, L), kern == want_kernel, "kernel=%r, want %s" % (kern, want_kernel))
    f32 = attn.sdpa(q.transpose(1, 0, 2), gk, gv, causal="bottom-right").transpose(1, 0, 2)
    within("pool_attend_%s_L%d_vs_f32_kernels" % (fmt, L), out, f32, 2 * b)
    # a paged plan of a pool with scales: bitwise the unplanned attend
    if L == 1:
        planned = pool.plan([seq], [1], Hq).run(q)
        check("pool_plan_bitwise_attend_%s" % fmt, np.array_equal(planned, out), "differs")


# ---- dense tensors and a ragged batch through ctypes -------------------------

def fp8_tensor(codes, fmt):
    """An attn_tensor of fp8 rows over a C-contiguous uint8 array."""
    t = _lib.Tensor()
    t.data, t.dtype, t.rank = codes.ctypes.data, FORMATS[fmt], codes.ndim
    for d in range(codes.ndim):
        t.shape[d], t.strides[d] = codes.shape[d], codes.strides[d]  # bytes; the last is 1
    return t


def f_tensor(a):
    return attn_view(a)


def options(kd=None, vd=None, causal=0, size=None):
    o = _lib.default(_lib.SdpaOptions)
    o.causal = causal
    if kd is not None:
        o.k_descale = ctypes.pointer(kd)
    if vd is not None:
        o.v_descale = ctypes.pointer(vd)
    if size is not None:
        o.struct_size = size
    return o


def call(fn, *args):
    err = _lib.Error()
    st = fn(*args, ctypes.byref(err))
    return st, err.message.decode()


def test_dense(fmt, L):
    B, Hk, Hq, S, E, Ev = 2, 2, 4, 40, 32, 32
    ks = (rng.uniform(0.1, 4, (B, Hk))).astype(np.float32)
    vs = (rng.uniform(0.1, 4, (B, Hk))).astype(np.float32)
    k, v = keys((B, Hk, S, E)), keys((B, Hk, S, Ev), heavy=False)
    kc = np.stack([ref_codes(k[b], ks[b], FORMATS[fmt]) for b in range(B)])
    vc = np.stack([ref_codes(v[b], vs[b], FORMATS[fmt]) for b in range(B)])
    kv = np.stack([ref_values(kc[b], ks[b], FORMATS[fmt]) for b in range(B)])
    vv = np.stack([ref_values(vc[b], vs[b], FORMATS[fmt]) for b in range(B)])
    q = rng.standard_normal((B, Hq, L, E)).astype(np.float32) * 0.3
    out = np.zeros((B, Hq, L, Ev), np.float32)
    lse = np.zeros((B, Hq, L), np.float32)
    kt, vt = fp8_tensor(kc, fmt), fp8_tensor(vc, fmt)
    kst, vst = f_tensor(ks), f_tensor(vs)
    o = options(kst, vst, causal=2)
    with Stderr() as cap:
        st, msg = call(LIB.attn_sdpa, ctypes.byref(f_tensor(out)), ctypes.byref(f_tensor(lse)), None,
                       ctypes.byref(f_tensor(q)), ctypes.byref(kt), ctypes.byref(vt), ctypes.byref(o))
    check("sdpa_descale_%s_L%d_ok" % (fmt, L), st == 0, msg)
    kern = verbose_kernel(cap.text)
    check("sdpa_descale_%s_L%d_kernel" % (fmt, L), kern == ("decode" if L <= 8 else "flash"), "kernel=%r" % kern)
    exact = np.stack([torch_attn(q[b], kv[b], vv[b])[0] for b in range(B)])
    else_ = np.stack([torch_attn(q[b], kv[b], vv[b])[1] for b in range(B)])
    b_ = bound(exact, q, kv, vv)
    within("sdpa_descale_%s_L%d_vs_torch_f64" % (fmt, L), out, exact, b_)
    smax = np.abs(np.einsum("bhle,bhse->bhls", q, np.repeat(kv, Hq // Hk, 1))).max() / np.sqrt(E)
    within("sdpa_descale_%s_L%d_lse" % (fmt, L), lse, else_, 4 * 2.0 ** -24 * smax + 1e-6)
    f32 = attn.sdpa(q, kv, vv, causal="bottom-right")
    within("sdpa_descale_%s_L%d_vs_f32_kernels" % (fmt, L), out, f32, 2 * b_)
    # one scale for every head: a (1,) tensor broadcasts
    one_k, one_v = np.array([ks[0, 0]], np.float64), np.array([vs[0, 0]], np.float64)
    o1 = options(f_tensor(one_k), f_tensor(one_v), causal=2)
    out1 = np.zeros_like(out)
    kc1 = np.stack([ref_codes(k[b], np.full(Hk, ks[0, 0]), FORMATS[fmt]) for b in range(B)])
    vc1 = np.stack([ref_codes(v[b], np.full(Hk, vs[0, 0]), FORMATS[fmt]) for b in range(B)])
    st, msg = call(LIB.attn_sdpa, ctypes.byref(f_tensor(out1)), None, None, ctypes.byref(f_tensor(q)),
                   ctypes.byref(fp8_tensor(kc1, fmt)), ctypes.byref(fp8_tensor(vc1, fmt)), ctypes.byref(o1))
    kv1 = np.stack([ref_values(kc1[b], np.full(Hk, ks[0, 0]), FORMATS[fmt]) for b in range(B)])
    vv1 = np.stack([ref_values(vc1[b], np.full(Hk, vs[0, 0]), FORMATS[fmt]) for b in range(B)])
    exact1 = np.stack([torch_attn(q[b], kv1[b], vv1[b])[0] for b in range(B)])
    check("sdpa_descale_%s_L%d_broadcast_ok" % (fmt, L), st == 0, msg)
    within("sdpa_descale_%s_L%d_broadcast_vs_torch_f64" % (fmt, L), out1, exact1, bound(exact1, q, kv1, vv1))


def test_varlen(fmt):
    Hk, Hq, E = 2, 4, 32
    lq, lk = [1, 5, 70], [33, 17, 90]
    batch = len(lq)
    ks = rng.uniform(0.1, 4, (batch, Hk)).astype(np.float32)
    vs = rng.uniform(0.1, 4, (batch, Hk)).astype(np.float32)
    cq, ck = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64), np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    k, v = keys((ck[-1], Hk, E)), keys((ck[-1], Hk, E), heavy=False)
    kc, vc = np.zeros(k.shape, np.uint8), np.zeros(v.shape, np.uint8)
    kv, vv = np.zeros_like(k), np.zeros_like(v)
    for b in range(batch):
        sl = slice(ck[b], ck[b + 1])
        kc[sl] = ref_codes(k[sl].transpose(1, 0, 2), ks[b], FORMATS[fmt]).transpose(1, 0, 2)
        vc[sl] = ref_codes(v[sl].transpose(1, 0, 2), vs[b], FORMATS[fmt]).transpose(1, 0, 2)
        kv[sl] = ref_values(kc[sl].transpose(1, 0, 2), ks[b], FORMATS[fmt]).transpose(1, 0, 2)
        vv[sl] = ref_values(vc[sl].transpose(1, 0, 2), vs[b], FORMATS[fmt]).transpose(1, 0, 2)
    q = rng.standard_normal((cq[-1], Hq, E)).astype(np.float32) * 0.3
    out = np.zeros((cq[-1], Hq, E), np.float32)
    o = options(f_tensor(ks), f_tensor(vs), causal=2)
    I64 = ctypes.POINTER(ctypes.c_int64)
    st, msg = call(LIB.attn_sdpa_varlen, ctypes.byref(f_tensor(out)), None, ctypes.byref(f_tensor(q)),
                   ctypes.byref(fp8_tensor(kc, fmt)), ctypes.byref(fp8_tensor(vc, fmt)), cq.ctypes.data_as(I64),
                   ck.ctypes.data_as(I64), ctypes.c_int64(batch), None, ctypes.byref(o))
    check("varlen_descale_%s_ok" % fmt, st == 0, msg)
    for b in range(batch):
        qs, kk, vvv = (a.transpose(1, 0, 2) for a in (q[cq[b]:cq[b + 1]], kv[ck[b]:ck[b + 1]], vv[ck[b]:ck[b + 1]]))
        exact = torch_attn(qs, kk, vvv)[0].transpose(1, 0, 2)
        within("varlen_descale_%s_seq%d_vs_torch_f64" % (fmt, b), out[cq[b]:cq[b + 1]], exact, bound(exact, qs, kk, vvv))
    # (batch, Hk) of the wrong batch
    bad = np.ones((batch + 1, Hk), np.float32)
    st, msg = call(LIB.attn_sdpa_varlen, ctypes.byref(f_tensor(out)), None, ctypes.byref(f_tensor(q)),
                   ctypes.byref(fp8_tensor(kc, fmt)), ctypes.byref(fp8_tensor(vc, fmt)), cq.ctypes.data_as(I64),
                   ck.ctypes.data_as(I64), ctypes.c_int64(batch), None, ctypes.byref(options(f_tensor(bad))))
    check("varlen_descale_%s_bad_shape" % fmt, st == ERR_SHAPE and "k_descale" in msg, "%d %s" % (st, msg))


def test_other_paths():
    """The exact kernel (weights asked for), attn_sdpa_reference and a 16-bit q
    (through f32 copies, rounded once): each folds the scales too."""
    Hk, Hq, S, L, E = 2, 4, 30, 5, 32
    ks, vs = np.array([0.5, 2.0], np.float32), np.array([3.0, 0.25], np.float32)
    k, v = keys((Hk, S, E)), keys((Hk, S, E), heavy=False)
    kc, vc = ref_codes(k, ks, E4M3), ref_codes(v, vs, E4M3)
    kv, vv = ref_values(kc, ks, E4M3), ref_values(vc, vs, E4M3)
    q = rng.standard_normal((Hq, L, E)).astype(np.float32) * 0.3
    for name, fn, weights, qd in (("weights_exact_kernel", LIB.attn_sdpa, True, np.float32),
                                  ("reference", LIB.attn_sdpa_reference, False, np.float32),
                                  ("f16_q", LIB.attn_sdpa, False, np.float16)):
        qq = q.astype(qd)
        out, w = np.zeros((Hq, L, E), qd), np.zeros((Hq, L, S), np.float32)
        st, msg = call(fn, ctypes.byref(f_tensor(out)), None, ctypes.byref(f_tensor(w)) if weights else None,
                       ctypes.byref(f_tensor(qq)), ctypes.byref(fp8_tensor(kc, "e4m3")),
                       ctypes.byref(fp8_tensor(vc, "e4m3")), ctypes.byref(options(f_tensor(ks), f_tensor(vs))))
        q64 = qq.astype(np.float32)
        exact = torch_attn(q64, kv, vv, causal_br=False)[0]
        b = bound(exact, q64, kv, vv) + (2.0 ** -11 * np.abs(exact).max() if qd == np.float16 else 0)
        check("sdpa_descale_%s_ok" % name, st == 0, msg)
        within("sdpa_descale_%s_vs_torch_f64" % name, out, exact, b)


# ---- the contiguous cache through ctypes ---------------------------------------

def test_cache(fmt):
    B, Hk, Hq, cap, E, n = 2, 2, 4, 64, 32, 37
    ks, vs = np.array([0.25, 5.0], np.float32), np.array([1.5, 0.125], np.float32)
    d = _lib.default(_lib.KVCacheDesc)
    d.batch, d.heads, d.capacity, d.key_dim, d.value_dim, d.dtype = B, Hk, cap, E, E, FORMATS[fmt]
    d.k_scale = ks.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    d.v_scale = vs.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    size = ctypes.c_size_t()
    st, msg = call(LIB.attn_kv_cache_bytes, ctypes.byref(size), ctypes.byref(d))
    mem = np.zeros(size.value, np.uint8)
    cache = ctypes.c_void_p()
    st2, msg2 = call(LIB.attn_kv_cache_init, ctypes.byref(cache), ctypes.c_void_p(mem.ctypes.data),
                     ctypes.c_size_t(size.value), ctypes.byref(d))
    check("cache_init_%s" % fmt, st == 0 and st2 == 0, msg + msg2)
    k, v = keys((B, Hk, n, E)), keys((B, Hk, n, E), heavy=False)
    st, msg = call(LIB.attn_kv_cache_append, cache, ctypes.byref(f_tensor(k)), ctypes.byref(f_tensor(v)))
    check("cache_append_%s" % fmt, st == 0, msg)
    gk, gv = np.zeros_like(k), np.zeros_like(v)
    st, msg = call(LIB.attn_kv_cache_gather, ctypes.byref(f_tensor(gk)), ctypes.byref(f_tensor(gv)), cache)
    wk = np.stack([ref_values(ref_codes(k[b], ks, FORMATS[fmt]), ks, FORMATS[fmt]) for b in range(B)])
    wv = np.stack([ref_values(ref_codes(v[b], vs, FORMATS[fmt]), vs, FORMATS[fmt]) for b in range(B)])
    check("cache_roundtrip_%s_bitwise" % fmt, st == 0 and np.array_equal(gk.view(np.uint32), wk.view(np.uint32)) and
          np.array_equal(gv.view(np.uint32), wv.view(np.uint32)), msg or "gather differs from code * s")
    for L in (1, 24):
        q = rng.standard_normal((B, Hq, L, E)).astype(np.float32) * 0.3
        out = np.zeros((B, Hq, L, E), np.float32)
        st, msg = call(LIB.attn_kv_cache_attend, ctypes.byref(f_tensor(out)), None, ctypes.byref(f_tensor(q)), cache,
                       None)
        check("cache_attend_%s_L%d_ok" % (fmt, L), st == 0, msg)
        exact = np.stack([torch_attn(q[b], gk[b], gv[b])[0] for b in range(B)])
        within("cache_attend_%s_L%d_vs_torch_f64" % (fmt, L), out, exact, bound(exact, q, gk, gv))
        # the cache keeps its own scales: options with descale are refused
        o = options(f_tensor(ks), None, causal=2)
        st, msg = call(LIB.attn_kv_cache_attend, ctypes.byref(f_tensor(out)), None, ctypes.byref(f_tensor(q)), cache,
                       ctypes.byref(o))
        check("cache_attend_%s_L%d_own_scales" % (fmt, L), st == ERR_OPTION, "%d %s" % (st, msg))


# ---- errors, and the older struct ------------------------------------------------

def test_errors():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        try:
            attn.KVPages(2, 32, 4, 1, dtype="e4m3", k_scale=[1.0, bad])
            check("pool_scale_%r_refused" % bad, False, "accepted")
        except attn.ScaleError as e:
            check("pool_scale_%r_refused" % bad, "k_scale[1]" in str(e), str(e))
    for dt in ("q8", "float32"):
        try:
            attn.KVPages(1, 32, 4, 1, dtype=dt, v_scale=2.0)
            check("pool_scale_on_%s_refused" % dt, False, "accepted")
        except attn.DtypeError as e:
            check("pool_scale_on_%s_refused" % dt, "v_scale" in str(e), str(e))
    Hk, S, E = 2, 8, 32
    q = np.ones((Hk, 1, E), np.float32)
    k16 = np.ones((Hk, S, E), np.float16)
    kc = ref_fp8(np.ones((Hk, S, E), np.float32), E4M3)
    out = np.zeros((Hk, 1, E), np.float32)
    good = np.ones(Hk, np.float32)
    cases = {
        "descale_with_f16_keys": (f_tensor(k16), f_tensor(good), None, ERR_DTYPE),
        "descale_shape": (fp8_tensor(kc, "e4m3"), f_tensor(np.ones(Hk + 1, np.float32)), None, ERR_SHAPE),
        "descale_zero": (fp8_tensor(kc, "e4m3"), f_tensor(np.array([1, 0], np.float32)), None, ERR_SCALE),
        "descale_nan": (fp8_tensor(kc, "e4m3"), None, f_tensor(np.array([np.nan, 1], np.float64)), ERR_SCALE),
        "descale_int": (fp8_tensor(kc, "e4m3"), f_tensor(np.ones(Hk, np.float16)), None, ERR_DTYPE),
    }
    vt = fp8_tensor(kc, "e4m3")
    for name, (kt, kd, vd, want) in cases.items():
        vv = f_tensor(k16) if name == "descale_with_f16_keys" else vt
        st, msg = call(LIB.attn_sdpa, ctypes.byref(f_tensor(out)), None, None, ctypes.byref(f_tensor(q)),
                       ctypes.byref(kt), ctypes.byref(vv), ctypes.byref(options(kd, vd)))
        check(name, st == want, "status %d (want %d): %s" % (st, want, msg))
    # An older caller's options (no descale fields) with garbage past them: no scale.
    size = _lib.SdpaOptions.k_descale.offset
    o = options(f_tensor(np.array([-5.0, 7.0], np.float32)), None, size=size)
    st, msg = call(LIB.attn_sdpa, ctypes.byref(f_tensor(out)), None, None, ctypes.byref(f_tensor(q)),
                   ctypes.byref(vt), ctypes.byref(vt), ctypes.byref(o))
    ref = np.zeros_like(out)
    st2, _ = call(LIB.attn_sdpa, ctypes.byref(f_tensor(ref)), None, None, ctypes.byref(f_tensor(q)),
                  ctypes.byref(vt), ctypes.byref(vt), None)
    check("older_options_struct_reads_no_descale", st == 0 and st2 == 0 and np.array_equal(out, ref), msg)


# ---- the command -----------------------------------------------------------------

def test_cli():
    exe = os.path.join(BUILD, "attn")
    Hk, Hq, S, L, E = 2, 4, 40, 3, 32
    q = rng.standard_normal((Hq, L, E)).astype(np.float32) * 0.3
    k, v = keys((Hk, S, E)), keys((Hk, S, E), heavy=False)
    # The command refuses a scale under which a value saturates (below):
    # its run against the reference takes keys and values whose outliers
    # (1e6) are brought to 200, which fits 448 · 0.5.
    k_out = k.copy()
    k[np.abs(k) > 200] = np.float32(200)
    v[np.abs(v) > 200] = np.float32(200)
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        k_tiny = (k * np.float32(1e-12)).astype(np.float32)  # below half e5m2's smallest subnormal, 2^-16
        for n, a in (("q", q), ("k", k), ("v", v), ("k_out", k_out), ("k_tiny", k_tiny)):
            paths[n] = os.path.join(d, n + ".npy")
            np.save(paths[n], a)
        o = os.path.join(d, "o.npy")
        base = [exe, "sdpa", "-q", paths["q"], "-k", paths["k"], "-v", paths["v"]]
        p = subprocess.run(base + ["--kv", "e4m3", "--kv-scale", "0.5,2", "-o", o], capture_output=True, text=True)
        check("cli_kv_scale_runs", p.returncode == 0, p.stderr.strip())
        if p.returncode == 0:
            kv = ref_values(ref_codes(k, [0.5, 0.5], E4M3), [0.5, 0.5], E4M3)
            vv = ref_values(ref_codes(v, [2, 2], E4M3), [2, 2], E4M3)
            exact = torch_attn(q, kv, vv, causal_br=False)[0]
            within("cli_kv_scale_vs_torch_f64", np.load(o), exact, bound(exact, q, kv, vv))
        for args, what in ((["--kv", "e4m3", "--kv-scale", "0"], "0"), (["--kv", "e5m2", "--kv-scale", "1,nan"], "nan"),
                           (["--kv", "q8", "--kv-scale", "2"], "q8"), (["--kv-scale", "2"], "no --kv"),
                           (["--kv", "e4m3", "--kv-scale", "x,1"], "x")):
            out2 = os.path.join(d, "bad.npy")
            p = subprocess.run(base + args + ["-o", out2], capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            check("cli_kv_scale_bad_%s" % what.replace(" ", "_"),
                  p.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and not p.stdout and
                  not os.path.exists(out2), "rc %d stderr %r" % (p.returncode, p.stderr))
        # A scale the values do not fit: every key past 448 · 1e-30 (each
        # stored as ±448), every value below half of 2^-16 · 1e30 (each stored
        # as 0), a scale 0 as a float32, and keys whose outliers (1e6) pass
        # 448 · 0.5: refused in one line, exit 1, nothing written, where
        # they ran on saturated or vanished keys and values. The scale the
        # message suggests (max |k| / 448, rounded up) runs.
        bad = ((["--kv", "e4m3", "--kv-scale", "1e-30"], paths["k"], r"--kv-scale 1e-30: -k \S+ holds [\d.e+]+, [\d.e+]+ "
                r"times the scale, past e4m3's largest value 448 \(it would be stored as 448\); a scale of at least "
                r"([\d.e+-]+) \(max \|k\| / 448\) keeps every value$", "saturating"),
               (["--kv", "e5m2", "--kv-scale", "1e30"], paths["k"], r"--kv-scale 1e\+30: every value of -k \S+ would be "
                r"stored as 0 in e5m2 \(the largest, [\d.e+]+, is [\d.e+-]+ times the scale\); a scale of about "
                r"([\d.e+-]+) \(max \|k\| / 57344\) uses the format's range$", "vanishing"),
               (["--kv", "e4m3", "--kv-scale", "1e-50"], paths["k"], r"--kv-scale 1e-50 is 0 as the float32", "f32_zero"),
               (["--kv", "e4m3", "--kv-scale", "0.5"], paths["k_out"], r"--kv-scale 0.5: -k \S+ holds 1e\+06, 2e\+06 times "
                r"the scale, past e4m3's largest value 448 .* a scale of at least ([\d.e+-]+) \(max \|k\| / 448\)",
                "outliers"),
               # No --kv-scale: the values are stored as they are, and are
               # refused alike where they pass the largest value or all
               # round to 0, rather than saturated or lost without a word.
               (["--kv", "e4m3"], paths["k_out"], r"--kv e4m3: -k \S+ holds 1e\+06, past e4m3's largest value 448 \(it "
                r"would be stored as 448\); --kv-scale ([\d.e+-]+,1) \(max \|k\| / 448, and v as it is\) keeps every "
                r"value$", "unscaled_outliers"),
               (["--kv", "e5m2"], paths["k_tiny"], r"--kv e5m2: every value of -k \S+ would be stored as 0 \(the largest "
                r"is [\d.e+-]+\); --kv-scale ([\d.e+-]+,1) \(max \|k\| / 57344, and v as it is\) uses the format's "
                r"range$", "unscaled_vanishing"))
        for args, kp, pattern, what in bad:
            out2 = os.path.join(d, "bad.npy")
            if os.path.exists(out2):  # the last case's suggested scale wrote it
                os.remove(out2)
            argv = [exe, "sdpa", "-q", paths["q"], "-k", kp, "-v", paths["v"]] + args + ["-o", out2]
            p = subprocess.run(argv, capture_output=True, text=True)
            lines = p.stderr.strip().splitlines()
            m = re.match("attn: error: " + pattern, lines[0]) if len(lines) == 1 else None
            check("cli_kv_scale_refused_%s" % what, p.returncode == 1 and m and not p.stdout and not os.path.exists(out2),
                  "rc %d stderr %r" % (p.returncode, p.stderr))
            if m and m.groups():
                if "--kv-scale" in argv:
                    argv[argv.index("--kv-scale") + 1] = m.group(1)
                else:
                    argv += ["--kv-scale", m.group(1)]
                p = subprocess.run(argv, capture_output=True, text=True)
                check("cli_kv_scale_suggested_runs_%s" % what, p.returncode == 0 and os.path.exists(out2) and
                      np.isfinite(np.load(out2)).all(), "rc %d stderr %r" % (p.returncode, p.stderr))


def main():
    for fmt in FORMATS:
        for L in (1, 40):
            test_pool(fmt, L)
            test_dense(fmt, L)
        test_varlen(fmt)
        test_cache(fmt)
    test_other_paths()
    test_errors()
    test_cli()
    print("%d passed, %d failed" % (r.passed, r.failed))
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
