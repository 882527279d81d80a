#!/usr/bin/python3
"""oracle_hadamard.py -- the Walsh-Hadamard rotation of keys and queries
(attn.h: attn_hadamard, and the caches' `hadamard` option).

- attn_hadamard against H_n / sqrt(n) built by Sylvester's construction in
  this file (H_1 = [1], H_2n = [[H, H], [H, -H]]; scipy.linalg.hadamard's
  matrix where SciPy is installed, checked equal), applied in float64:
  f64 rows within 1e-15 relative, f32 rows the float64 product rounded to
  f32 (within one unit in the last place of the row's largest value: both
  are the exact rotation rounded once, up to f64's rounding, which can
  move a cancelled value across an f32 rounding boundary), for n = 1 .. 1024, strided rows, rank 3; turned
  twice is the row itself (to 1 ulp); its errors.
- A pool (attn.KVPages(hadamard=True)) and a contiguous cache (ctypes) of
  q8, q4, q4_1, e4m3 and e5m2 (e4m3 also with per-head scales): appended
  keys are stored as the format of H k (the stored codes read through the
  pool's view and compared bit for bit with a NumPy reference: H k rounded
  to f32, then the format as oracle_quant.py writes it), gathered as H
  (the widened codes) rounded to f32 (within one unit in the last place of
  the row's largest value, as above), values untouched (bitwise).
- Attention: attend turns q by H; checked against PyTorch float64 attention
  of the unturned q over the gathered keys (which is the same attention in
  exact arithmetic) within the f32 bound plus the rounding of the turned q
  (4 * 2^-24 of the scores), on decode and flash shapes; and against the
  f32 kernels (attn.sdpa) run on H q and the stored rows widened.
- Errors: key_dim not a power of two (ShapeError), a float dtype
  (DtypeError), a 16-bit q (DtypeError), options' RoPE (OptionError).
- A paged plan of a rotated pool (KVPages.plan): its run bitwise attend.

Usage: oracle_hadamard.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why"."""
import ctypes
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
os.environ.setdefault("ATTN_LIBRARY", os.path.join(BUILD, "libattn.so"))
# q8 and q4 keys are widened in decode too, so that every check here is the f32 kernels' (the
# integer dot product kernel's own bound is test_quant_kv's; the rotation is the same for it)
os.environ["ATTN_QDOT"] = "widen"
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import attn  # noqa: E402
from attn import _lib  # noqa: E402
from attn._core import view as attn_view  # noqa: E402
from oracle_quant import E4M3, E5M2, Q4, Q4_1, Q8, ref_dequantize, ref_quantize  # noqa: E402
from seeding import test_seed  # noqa: E402
from torch_attention import Reporter  # noqa: E402

r = Reporter()
rng = np.random.default_rng(test_seed(20261204))
FORMATS = {"q8": Q8, "q4": Q4, "q4_1": Q4_1, "e4m3": E4M3, "e5m2": E5M2}
LIB = _lib.LIB
ERR_SHAPE, ERR_DTYPE, ERR_OPTION = 3, 6, 9


def check(name, cond, why=""):
    r.report(name, "" if cond else (why or "failed"))


def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def rotate64(x):
    """H x / sqrt(n) on the last axis, float64."""
    n = x.shape[-1]
    return np.asarray(x, np.float64) @ (sylvester(n) / np.sqrt(n)).T


def ulps(a, b):
    """max |a - b| over each row in units in the last place of f32 at the
    row's largest |b|: a rotation mixes a row, so its rounding is relative
    to the row, not to each (possibly cancelled) value."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    top = np.maximum(np.abs(b).max(axis=-1, keepdims=True), np.float32(np.finfo(np.float32).tiny))
    return float((np.abs(a.astype(np.float64) - b) / np.spacing(top)).max()) if a.size else 0.0


def call(fn, *args):
    err = _lib.Error()
    st = fn(*args, ctypes.byref(err))
    return st, err.message.decode()


LIB.attn_hadamard.argtypes = [ctypes.POINTER(_lib.Tensor), ctypes.POINTER(_lib.Error)]


def test_transform():
    try:
        import scipy.linalg
        check("sylvester_is_scipy_hadamard", all(np.array_equal(sylvester(n), scipy.linalg.hadamard(n))
                                                 for n in (1, 2, 8, 64, 256)))
    except ImportError:
        print("skip sylvester_is_scipy_hadamard: SciPy is not installed (the construction is checked by H H = n I)")
    check("sylvester_orthogonal", all(np.array_equal(sylvester(n) @ sylvester(n).T, n * np.eye(n))
                                      for n in (1, 2, 16, 128)))
    for n in (1, 2, 4, 32, 64, 128, 256, 1024):
        x = rng.standard_normal((3, n))
        x[:, 3 % n] *= 50  # an outlier channel
        want = rotate64(x)
        a = x.copy()
        st, msg = call(LIB.attn_hadamard, ctypes.byref(attn_view(a)))
        err = float(np.abs(a - want).max() / np.abs(want).max())
        check("hadamard_f64_n%d" % n, st == 0 and err < 1e-15 * max(1, np.log2(n)), "%s err %.3g" % (msg, err))
        f = x.astype(np.float32)
        a32 = f.copy()
        st, msg = call(LIB.attn_hadamard, ctypes.byref(attn_view(a32)))
        want32 = rotate64(f).astype(np.float32)
        u = ulps(a32, want32)
        check("hadamard_f32_n%d_rounded_once" % n, st == 0 and u <= 1, "%s %.2f ulps" % (msg, u))
        st, _ = call(LIB.attn_hadamard, ctypes.byref(attn_view(a32)))
        check("hadamard_f32_n%d_twice_is_identity" % n, st == 0 and ulps(a32, f) <= 2, "%.2f ulps" % ulps(a32, f))
    # strided rows of a rank-3 tensor: every other row of a transposed view
    x = rng.standard_normal((4, 6, 16))
    big = np.zeros((6, 8, 16 * 2))
    big[:, :4, ::2] = x.transpose(1, 0, 2)
    v = big[:, :4, ::2].transpose(1, 0, 2)
    st, msg = call(LIB.attn_hadamard, ctypes.byref(attn_view(v)))
    check("hadamard_strided_rank3", st == 0 and np.abs(v - rotate64(x)).max() < 1e-14 and
          not big[:, :4, 1::2].any() and not big[:, 4:].any(), msg)
    for name, a, want in (("hadamard_not_power_of_two", np.zeros((2, 24)), ERR_SHAPE),
                          ("hadamard_f16", np.zeros((2, 16), np.float16), ERR_DTYPE)):
        st, msg = call(LIB.attn_hadamard, ctypes.byref(attn_view(a)))
        check(name, st == want, "%d %s" % (st, msg))


def stored_codes(x, fmt, scale=None):
    """The bytes the format stores for rows x (f32) after the rotation
    (and the per-head scale s: x / s in f32), as oracle_quant.py writes them."""
    rx = rotate64(x.astype(np.float32)).astype(np.float32)
    if scale is not None:
        rx = (rx / np.float32(scale)).astype(np.float32)
    return ref_quantize(rx.reshape(-1, x.shape[-1]), fmt), rx


def torch_attn(q, k, v):
    """float64 attention of q (Hq, L, E) over k, v (Hk, S, E), GQA, bottom-right causal: out."""
    q, k, v = (torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k, v))
    g = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    s = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    L, S = q.shape[1], k.shape[1]
    s = s.masked_fill(torch.arange(S)[None, :] > torch.arange(L)[:, None] + (S - L), -np.inf)
    return (torch.softmax(s, -1) @ v).numpy(), s.abs().max().item()


def bound(exact, smax, v):
    # attn_sdpa's f32 bound, plus the turned q's rounding: each score moves by at most
    # 2^-24 |q| |k| <= 2^-24 * (sum of |q_e k_e| over the turned channels), covered by 4 * 2^-24 max|s| * E^(1/2)
    return 2e-5 * np.abs(exact).max() + (4 + 8) * 2.0 ** -24 * smax * np.abs(v).max()


def test_pool(fmt, L, scale=None):
    Hk, Hq, E, P = 2, 4, 64, 16
    tag = "%s%s_L%d" % (fmt, "_scaled" if scale else "", L)
    kw = {"k_scale": [scale, scale * 2], "v_scale": 1.5} if scale else {}
    pool = attn.KVPages(Hk, E, num_pages=16, max_sequences=2, page_size=P, dtype=fmt, hadamard=True, **kw)
    seq = pool.create()
    S = 45
    k = rng.standard_normal((S, Hk, E)).astype(np.float32)
    k[:, :, 5::16] *= 40  # heavy-tailed key channels
    v = rng.standard_normal((S, Hk, E)).astype(np.float32)
    pool.append(seq, k[:20], v[:20])
    pool.append(seq, k[20:], v[20:])
    w = pool._view()
    check("pool_view_says_hadamard_%s" % tag, w.hadamard == 1)
    # the stored key codes, read through the view's pages (the sequence's pages in order)
    rowb = LIB.attn_quant_row_size(FORMATS[fmt], E)
    pages = pool.pages(seq)
    kbytes = np.ctypeslib.as_array(ctypes.cast(w.k_pages, ctypes.POINTER(ctypes.c_uint8)),
                                   (w.num_pages * Hk * P * rowb,)).reshape(w.num_pages, Hk, P, rowb)
    got = np.concatenate([kbytes[pg] for pg in pages], axis=1)[:, :S]  # (Hk, S, rowb)
    ok, scales = True, ([scale, scale * 2] if scale else [None, None])
    for h in range(Hk):
        want, _ = stored_codes(k[:, h], FORMATS[fmt], scales[h])
        ok &= np.array_equal(got[h], want.reshape(S, rowb))
    check("pool_stores_format_of_Hk_%s" % tag, ok, "stored key bytes differ from the reference")
    gk, gv = pool.gather(seq)
    ok_v = True
    for h in range(Hk):
        want, _ = stored_codes(k[:, h], FORMATS[fmt], scales[h])
        wide = ref_dequantize(want, FORMATS[fmt], E)
        if scale:
            wide = (wide.astype(np.float64) * np.float32(scales[h])).astype(np.float32)
        back = rotate64(wide).astype(np.float32)
        u = ulps(gk[h], back)
        check("pool_gather_turns_back_%s_h%d" % (tag, h), u <= 1, "%.2f ulps" % u)
        vw = ref_dequantize(ref_quantize((v[:, h] / np.float32(1.5) if scale else v[:, h]).astype(np.float32),
                                         FORMATS[fmt]), FORMATS[fmt], E)
        if scale:
            vw = (vw.astype(np.float64) * np.float32(1.5)).astype(np.float32)
        ok_v &= np.array_equal(gv[h], vw)
    check("pool_values_not_turned_%s" % tag, ok_v)
    q = rng.standard_normal((L, Hq, E)).astype(np.float32) * 0.3
    out = pool.attend(seq, q)
    exact, smax = torch_attn(q.transpose(1, 0, 2), gk, gv)
    b = bound(exact, smax, gv)
    err = float(np.abs(out.transpose(1, 0, 2) - exact).max())
    check("pool_attend_%s_vs_torch_f64_unturned_q" % tag, err <= b, "error %.3g > %.3g" % (err, b))
    # the f32 kernels on H q and the stored (turned) keys widened
    hq = rotate64(q).astype(np.float32)
    hk = rotate64(gk).astype(np.float32)  # H (H widened) = the widened rows, to f32's rounding
    f32 = attn.sdpa(hq.transpose(1, 0, 2), hk, gv, causal="bottom-right").transpose(1, 0, 2)
    err2 = float(np.abs(out - f32).max())
    check("pool_attend_%s_vs_f32_kernels_turned" % tag, err2 <= 2 * b, "error %.3g > %.3g" % (err2, 2 * b))
    if L == 1:
        try:
            pool.attend(seq, q.astype(np.float16))
            check("pool_attend_f16_q_refused_%s" % tag, False, "accepted")
        except attn.AttnError as e:
            check("pool_attend_f16_q_refused_%s" % tag, e.status == ERR_DTYPE, "%d %s" % (e.status, e))
        # a paged plan turns q in its workspace: bitwise the unplanned attend
        planned = pool.plan([seq], [1], Hq).run(q)
        check("pool_plan_bitwise_attend_%s" % tag, np.array_equal(planned, out), "differs")


def test_cache(fmt):
    B, Hk, Hq, cap, E, n = 2, 2, 4, 64, 128, 50
    d = _lib.default(_lib.KVCacheDesc)
    d.batch, d.heads, d.capacity, d.key_dim, d.value_dim, d.dtype, d.hadamard = B, Hk, cap, E, E, FORMATS[fmt], 1
    size = ctypes.c_size_t()
    st, msg = call(LIB.attn_kv_cache_bytes, ctypes.byref(size), ctypes.byref(d))
    mem = np.zeros(max(size.value, 1), np.uint8)
    cache = ctypes.c_void_p()
    st2, msg2 = call(LIB.attn_kv_cache_init, ctypes.byref(cache), ctypes.c_void_p(mem.ctypes.data),
                     ctypes.c_size_t(size.value), ctypes.byref(d))
    check("cache_init_hadamard_%s" % fmt, st == 0 and st2 == 0, msg + msg2)
    if st or st2:
        return
    k = rng.standard_normal((B, Hk, n, E)).astype(np.float32)
    k[..., 7::32] *= 40
    v = rng.standard_normal((B, Hk, n, E)).astype(np.float32)
    st, msg = call(LIB.attn_kv_cache_append, cache, ctypes.byref(attn_view(k)), ctypes.byref(attn_view(v)))
    gk, gv = np.zeros_like(k), np.zeros_like(v)
    st2, msg2 = call(LIB.attn_kv_cache_gather, ctypes.byref(attn_view(gk)), ctypes.byref(attn_view(gv)), cache)
    want = np.stack([rotate64(ref_dequantize(stored_codes(k[b, h], FORMATS[fmt])[0], FORMATS[fmt], E))
                     for b in range(B) for h in range(Hk)]).reshape(k.shape).astype(np.float32)
    u = ulps(gk, want)
    check("cache_gather_turns_back_%s" % fmt, st == 0 and st2 == 0 and u <= 1, "%s%s %.2f ulps" % (msg, msg2, u))
    for L in (1, 30):
        q = rng.standard_normal((B, Hq, L, E)).astype(np.float32) * 0.3
        out = np.zeros((B, Hq, L, E), np.float32)
        st, msg = call(LIB.attn_kv_cache_attend, ctypes.byref(attn_view(out)), None, ctypes.byref(attn_view(q)), cache,
                       None)
        res = [torch_attn(q[b], gk[b], gv[b]) for b in range(B)]
        exact = np.stack([x[0] for x in res])
        b_ = bound(exact, max(x[1] for x in res), gv)
        err = float(np.abs(out - exact).max())
        check("cache_attend_hadamard_%s_L%d_vs_torch_f64" % (fmt, L), st == 0 and err <= b_,
              "%s error %.3g > %.3g" % (msg, err, b_))
        rope = _lib.default(_lib.RopeOptions)
        o = _lib.default(_lib.SdpaOptions)
        o.causal, o.rope = 2, ctypes.pointer(rope)
        st, msg = call(LIB.attn_kv_cache_attend, ctypes.byref(attn_view(out)), None, ctypes.byref(attn_view(q)), cache,
                       ctypes.byref(o))
        check("cache_attend_hadamard_%s_L%d_rope_refused" % (fmt, L), st == ERR_OPTION, "%d %s" % (st, msg))


def test_errors():
    # A dimension below 0 is a shape error that names it, as attn_tensor_init
    # says, not an overflow of the element count: (-1, 8) and (-2, -1, 8),
    # whose product is positive.
    held = np.zeros(64, np.float32)
    for shape in ((-1, 8), (-2, -1, 8)):
        t = attn_view(held)
        t.rank = len(shape)
        for d, n in enumerate(shape):
            t.shape[d], t.strides[d] = n, 0
        st, msg = call(LIB.attn_hadamard, ctypes.byref(t))
        check("negative_dimension_%s_refused_as_shape" % "_".join(str(-n) for n in shape[:-1]),
              st == 3 and "negative" in msg and (held == 0).all(), "status %d: %s" % (st, msg))
    for E, dt, want, name in ((48, "e4m3", attn.ShapeError, "key_dim_48"), (2048, "q8", attn.ShapeError, "key_dim_2048"),
                              (64, "float32", attn.DtypeError, "float32"), (64, "float16", attn.DtypeError, "float16")):
        try:
            attn.KVPages(1, E, 4, 1, dtype=dt, hadamard=True)
            check("pool_hadamard_%s_refused" % name, False, "accepted")
        except want as e:
            check("pool_hadamard_%s_refused" % name, "hadamard" in str(e), str(e))


def main():
    test_transform()
    for fmt in FORMATS:
        for L in (1, 40):
            test_pool(fmt, L)
        test_cache(fmt)
    test_pool("e4m3", 1, scale=0.25)
    test_pool("e4m3", 40, scale=0.25)
    test_errors()
    print("%d passed, %d failed" % (r.passed, r.failed))
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
