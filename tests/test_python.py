"""test_python.py -- the Python binding (python/attn), in-process through ctypes:

- attn.sdpa_varlen and sdpa_varlen_backward: each sequence bitwise attn.sdpa
  (sdpa_backward) alone, and PyTorch float64 through a block-diagonal mask;
- a float16 q in attn.sdpa, attn.sdpa_varlen, attn.Plan and
  attn.sdpa_backward: bitwise the float32 call on the widened q with out
  (each gradient) rounded to float16 (plans: the unplanned float16 call),
  lse float32;
- the score variants (softcap, alibi_slopes, window, sinks), RoPE and
  compute='bf16' through attn.sdpa and sdpa_backward against PyTorch
  float64 autograd on their definitions, the sinks' gradient (want_dsinks)
  too, per head within attn.h's 1e-12 · dsinks_abs_h; attn.alibi_slopes as
  the paper's code; two pieces of the keys (key_start, total_keys) merged
  into the whole's out and lse; a call's own num_threads bitwise, given to it (ATTN_VERBOSE), the process's count
  untouched; attn.dropout_mask with PyTorch's math the call's result; sdpa_varlen, its backward, Plan
  and KVPages.attend / plan with them bitwise attn.sdpa; misspelt variants,
  bad compute modes and number arguments not numbers refused naming them;
- attn.Plan (attn_sdpa_plan_init, attn_sdpa_varlen_plan_init, attn_sdpa_run):
  dense (GQA, a broadcast mask) and ragged (a decode, an empty and a prefill
  sequence, masks) calls planned once and run for three layers, bitwise the
  unplanned attn.sdpa / sdpa_varlen, float32 and float64, each causal mode;
  other shapes a PlanError; its masks copied (the caller's later writes
  reach no run); one plan run by four threads at once, each run bitwise the
  unplanned call on its own arrays;
- attn.sdpa against PyTorch float64 (oracle.py's reference) on random cases,
  with strided NumPy views (transposed, sliced, negative strides) passed
  through without copies, out=, lse; sdpa_backward against autograd; merge;
  read-only out= refused (the flag, bytes, a read-only mmap); byte-swapped
  inputs converted; float32 values near FLT_MIN within the f32 bound plus
  FLT_MIN (decode, flash, the fused backward, with and without GQA);
- every attn_status as its exception class, and the calls that raise them;
  arguments not taken (a misspelt want= name, a thread count past int or
  not an integer, a NumPy array given to attn.torch, None) refused by class;
  want=None, merge of None, a string q or keys, attn.torch's is_causal a
  string (was top-left) and dropout_p None refused naming the argument;
  float32 torch tensors and memoryviews given to attn.sdpa kept float32;
- attn.torch: gradcheck in float64 (causal, GQA, a float mask's gradient),
  dimensions of size 0 as torch gives them (empty, or zeros without keys),
  heads of size 1 broadcast as torch broadcasts them,
  a second derivative (create_graph=True, then backward again) refused,
  MultiheadAttention against torch.nn.MultiheadAttention loaded from its
  state_dict (outputs, weights, and every gradient by name), a module of
  float16 parameters beside float32 inputs (its gradients float16), float64
  and float16 masks beside float32 inputs, a float attn_mask's gradient
  asked of it refused, a model trained;
- attn.teach: explain() equal to `attn explain --json`, its HTML, scaling()
  equal to `attn scaling --json`; sizes past int, floats, NUL in a sentence
  refused;
- fork after the thread pool has started: a child of os.fork, of
  multiprocessing's 'fork' start method and a DataLoader worker computes the
  parent's result bitwise, and does not hang;
- finding the library: ATTN_LIBRARY, an installed prefix (pkg-config), a
  missing library and a mismatched version, from `pip install` of the package.

Usage: test_python.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why"."""
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import attn  # noqa: E402
import attn.teach  # noqa: E402
import attn.torch as at  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from seeding import test_seed  # noqa: E402
from oracle import reference  # noqa: E402
from torch_attention import Reporter, broadcast_heads, causal_allowed  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
r = Reporter()
rng = np.random.default_rng(test_seed(20261130))
f = rng.standard_normal


def rel(got, ref):
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(np.asarray(got, dtype=np.float64) - ref).max() / max(np.abs(ref).max(), 1e-300))


def check(name, cond, why=""):
    r.report(name, "" if cond else (why or "failed"))


# --- attn.sdpa against PyTorch ------------------------------------------------
for i in range(30):
    B, Hk = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    Hq, L, S = Hk * int(rng.integers(1, 3)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
    E, Ev = int(rng.choice([4, 16, 33])), int(rng.choice([3, 16]))
    dt = np.float64 if i % 3 else np.float32
    q, k, v = f((B, Hq, L, E)).astype(dt), f((1, Hk, S, E)).astype(dt), f((1, Hk, S, Ev)).astype(dt)
    causal = [False, True, "bottom-right"][i % 3]
    mask = None
    if i % 4 == 1:
        mask = rng.random((L, S)) < 0.7
        mask[:, 0] = True
    elif i % 4 == 2:
        mask = f((Hq, 1, S)).astype(dt)
    out, lse = attn.sdpa(q, k, v, mask=mask, causal=causal, return_lse=True)
    ref, _, ref_lse, _ = reference(q, k, v, mask, {False: 0, True: 1, "bottom-right": 2}[causal])
    tol = 1e-12 if dt == np.float64 else 2e-5
    fin = np.isfinite(ref_lse)
    ok = rel(out, ref) <= tol and np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)) and \
        (not fin.any() or np.abs(lse[fin] - ref_lse[fin]).max() <= tol * max(1, np.abs(ref_lse[fin]).max()))
    check("sdpa_vs_torch_%02d_%s_L%d_S%d_%s" % (i, np.dtype(dt).name, L, S, causal), ok, "error %.3g" % rel(out, ref))

# f32 values near FLT_MIN (attn.h: an f32 result below FLT_MIN may be written
# as 0, so the f32 bounds hold within FLT_MIN more, absolute): the decode
# kernel's out and the fused backward's dv, which are, and the flash kernel's
# out and dv summed under GQA, which keep subnormals, within that of PyTorch
# float64. Relative to the values (1e-38), the decode kernel's errors exceed
# the bound without FLT_MIN some 1e4 times.
tiny = np.finfo(np.float32).tiny
for kernel, L, Hk in (("decode", 3, 2), ("flash", 40, 2), ("decode_gqa", 3, 1), ("flash_gqa", 40, 1)):
    q, k = f((2, L, 16)).astype(np.float32), f((Hk, 30, 16)).astype(np.float32)
    v = (f((Hk, 30, 4)) * 1e-38).astype(np.float32)
    out, lse = attn.sdpa(q, k, v, return_lse=True)
    ref, w, _, _ = reference(q, k, v)
    dout = (f(out.shape) * 1e-38).astype(np.float32)
    dv = attn.sdpa_backward(dout, q, k, v, out, lse, want="dv")[2]
    ref_dv = (np.swapaxes(w, -1, -2) @ dout.astype(np.float64)).reshape(Hk, -1, 30, 4).sum(1)
    s_abs = float((np.abs(q).astype(np.float64) @ np.abs(k).astype(np.float64).swapaxes(-1, -2)).max()) / 4
    bound = 2e-5 * 1e-36 + 2 * 22 * 2.0 ** -24 * s_abs * 1e-36 + tiny  # |v|, |dout| < 1e-36 by far
    errs = (np.abs(out - ref).max(), np.abs(dv - ref_dv).max())
    check("sdpa_f32_results_near_flt_min_%s" % kernel, max(errs) <= bound, "errors %g %g, bound %g" % (errs + (bound,)))

# Strided views go to the library as they are: the same answer as their copies, no copy made.
q, k, v = f((2, 3, 20, 16)), f((2, 3, 20, 16)), f((2, 3, 20, 8))
want = attn.sdpa(q, k, v, causal=True)
qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # (B, L, H, E) memory seen as (B, H, L, E)
kbig = np.zeros((2, 3, 40, 32))
kbig[:, :, ::2, :16] = k  # a sliced view with row stride 64
ks = kbig[:, :, ::2, :16]
vrev = np.ascontiguousarray(v[:, :, ::-1])[:, :, ::-1]  # negative strides
for name, args in (("transposed_q", (qt, k, v)), ("sliced_k", (q, ks, v)), ("reversed_v", (q, k, vrev))):
    got = attn.sdpa(*args, causal=True)
    no_copy = all(attn._core._float_array(a, "q") is a for a in args)
    check("strided_view_%s_no_copy" % name, np.array_equal(got, want) and no_copy, "diff %.3g" % rel(got, want))
into = np.zeros((2, 3, 20, 8))
back = attn.sdpa(q, k, v, causal=True, out=into)
check("sdpa_out_argument", back is into and np.array_equal(into, want))
big = np.zeros((2, 3, 20, 16))
back = attn.sdpa(q, k, v, causal=True, out=big[..., ::2])  # a strided output
check("sdpa_strided_out", np.array_equal(big[..., ::2], want))

# out= that may not be written: refused before the library is called, the
# memory untouched. A read-only mmap as out= crashed the interpreter
# (SIGSEGV), so that case runs in a child.
ro = np.zeros((2, 3, 20, 8))
ro.flags.writeable = False
frozen = bytes(8 * ro.size)
for name, o in (("flag_writeable_false", ro), ("frombuffer_over_bytes", np.frombuffer(frozen).reshape(ro.shape))):
    try:
        attn.sdpa(q, k, v, causal=True, out=o)
        got = "no error"
    except attn.ArgumentError as e:
        got = "read-only" if "read-only" in e.message else e.message
    check("sdpa_out_refused_%s" % name, got == "read-only" and not o.any() and frozen == bytes(len(frozen)), got)
with tempfile.TemporaryDirectory() as d:
    np.save(os.path.join(d, "zeros.npy"), np.zeros((2, 3, 20, 8)))
    child = subprocess.run([sys.executable, "-c", """if True:
        import sys; sys.path.insert(0, sys.argv[1])
        import numpy as np, attn
        q, k, v = (np.ones(s) for s in ((2, 3, 20, 8), (2, 3, 20, 8), (2, 3, 20, 8)))
        o = np.load(sys.argv[2], mmap_mode="r")
        try:
            attn.sdpa(q, k, v, out=o)
            print("no error")
        except attn.ArgumentError as e:
            print("read-only" if "read-only" in e.message else e.message)
        """, os.path.join(HERE, "..", "python"), os.path.join(d, "zeros.npy")], capture_output=True, text=True)
    check("sdpa_out_refused_read_only_mmap", child.returncode == 0 and child.stdout.strip() == "read-only" and
          not np.load(os.path.join(d, "zeros.npy")).any(), "exit %d, %r %r" % (child.returncode, child.stdout,
                                                                              child.stderr[-300:]))

# Byte-swapped inputs ('>f4', '>f8' on this little-endian machine) give the
# native result; a byte-swapped out= cannot be written in place: refused,
# saying so.
for dt in (np.float32, np.float64):
    nat = [a.astype(dt) for a in (q, k, v)]
    swapped = [a.astype(np.dtype(dt).newbyteorder(">")) for a in nat]
    ref = attn.sdpa(*nat, causal=True)
    got = attn.sdpa(*swapped, causal=True)
    mixed = attn.sdpa(nat[0], swapped[1], nat[2], causal=True)
    check("sdpa_byte_swapped_%s_inputs" % np.dtype(dt).name, got.dtype == dt and np.array_equal(got, ref) and
          np.array_equal(mixed, ref), "dtype %s" % got.dtype)
try:
    attn.sdpa(q, k, v, out=np.zeros((2, 3, 20, 8), ">f8"))
    got = "no error"
except attn.DtypeError as e:
    got = e.message
check("sdpa_byte_swapped_out_refused", "native byte order" in got, got)

# Backward against autograd, merge against the whole.
q, k, v, dout = f((2, 4, 13, 16)), f((2, 2, 17, 16)), f((2, 2, 17, 8)), f((2, 4, 13, 8))
mask = f((13, 17))
out, lse = attn.sdpa(q, k, v, mask=mask, causal="bottom-right", return_lse=True)
dq, dk, dv, dm = attn.sdpa_backward(dout, q, k, v, out, lse, mask=mask, causal="bottom-right", want_dmask=True)
tq, tk, tv, tm = (torch.tensor(a, requires_grad=True) for a in (q, k, v, mask))
s = tq @ tk.repeat_interleave(2, 1).transpose(-1, -2) / 4 + tm
s = s.masked_fill(~torch.ones(13, 17, dtype=torch.bool).tril(4), float("-inf"))
(s.softmax(-1) @ tv.repeat_interleave(2, 1)).backward(torch.from_numpy(dout))
worst = max(rel(a, b.grad) for a, b in ((dq, tq), (dk, tk), (dv, tv), (dm, tm)))
check("sdpa_backward_vs_autograd_gqa_mask_bottom_right", worst <= 1e-11, "error %.3g" % worst)
o1, l1 = attn.sdpa(q, k[:, :, :9], v[:, :, :9], return_lse=True)
o2, l2 = attn.sdpa(q, k[:, :, 9:], v[:, :, 9:], return_lse=True)
mo, ml = attn.merge([o1, o2], [l1, l2])
wo, wl = attn.sdpa(q, k, v, return_lse=True)
check("merge_two_halves_of_the_keys", rel(mo, wo) <= 1e-14 and rel(ml, wl) <= 1e-14)
# The parts stacked in one array (np.stack) or given by a generator: an
# array's truth value raised ValueError ("ambiguous"), a generator TypeError.
for how, parts in (("stacked", lambda: (np.stack([o1, o2]), np.stack([l1, l2]))),
                   ("generators", lambda: ((o for o in (o1, o2)), (x for x in (l1, l2))))):
    try:
        so_, sl_ = attn.merge(*parts())
        why = "" if np.array_equal(so_, mo) and np.array_equal(sl_, ml) else "differs from the lists' merge"
    except Exception as e:  # noqa: BLE001 -- any error is the failure
        why = "%s: %s" % (type(e).__name__, e)
    check("merge_parts_%s" % how, not why, why)
# Parts of attn.sdpa over no queries, or a batch of 0, split over the keys:
# the merge refused them ("each must be at least 1") where attn.sdpa over
# all the keys gave its empty out and lse. Now empty as that.
for label, sl_ in (("no_queries", np.s_[:, :, :0]), ("batch_of_0", np.s_[:0])):
    try:
        eq, ek, ev = q[sl_], k[sl_] if label == "batch_of_0" else k, v[sl_] if label == "batch_of_0" else v
        parts = [attn.sdpa(eq, ek[:, :, a:b], ev[:, :, a:b], return_lse=True) for a, b in ((0, 9), (9, ek.shape[2]))]
        eo, el = attn.merge([p_[0] for p_ in parts], [p_[1] for p_ in parts])
        wo_, wl_ = attn.sdpa(eq, ek, ev, return_lse=True)
        why = "" if eo.shape == wo_.shape and el.shape == wl_.shape else "shapes %s %s" % (eo.shape, el.shape)
    except attn.AttnError as e:
        why = "%s: %s" % (type(e).__name__, e)
    check("merge_empty_parts_%s" % label, not why, why)

# --- errors: every attn_status, and the calls that raise them ----------------
lib = attn._core.LIB
names = set()
for status in range(1, 23):
    cls = attn.ERRORS.get(status)
    err = attn._core.Error()
    err.message = b"the library's message"
    try:
        attn._core.raise_for(status, err)
        raised = None
    except attn.AttnError as e:
        raised = e
    ok = cls is not None and isinstance(raised, cls) and raised.status == status and \
        raised.message == "the library's message" and cls.__name__ not in names
    names.add(cls.__name__ if cls else "")
    check("error_class_for_status_%d_%s" % (status, lib.attn_strerror(status).decode().replace(" ", "_")), ok)
q, k, v = f((2, 5, 8)), f((2, 6, 8)), f((2, 6, 4))
cases = [
    ("ShapeError", lambda: attn.sdpa(q, k[..., :3], v)),
    ("BroadcastError", lambda: attn.sdpa(f((3, 2, 5, 8)), f((2, 2, 6, 8)), f((2, 2, 6, 4)))),
    ("HeadsError", lambda: attn.sdpa(f((3, 5, 8)), k, v)),
    ("DtypeError", lambda: attn.sdpa(q.astype(np.float32), k, v)),
    ("MaskError", lambda: attn.sdpa(q, k, v, mask=np.ones((5, 7), bool))),
    ("ScaleError", lambda: attn.sdpa(q, k, v, scale=float("inf"))),
    ("OptionError", lambda: attn.sdpa(q, k, v, dropout_p=1.5)),
    ("OptionError", lambda: attn.sdpa(q, k, v, causal="diagonal")),
    # stride 0 in a writeable array (broadcast_to's are read-only, refused first)
    ("StrideError", lambda: attn.sdpa(q, k, v, out=np.lib.stride_tricks.as_strided(np.zeros(4), (2, 5, 4), (0, 0, 8)))),
    ("RankError", lambda: attn.sdpa(f((1, 1, 1, 1, 1, 5, 8)), k, v)),
    ("ArgumentError", lambda: attn.merge([], [])),
    ("TokenError", lambda: attn.teach.explain("the elephant sat")),
]
for want, call in cases:
    try:
        call()
        got = "no error"
    except attn.AttnError as e:
        got = type(e).__name__ if e.message else "an empty message"
    check("raises_%s_%s" % (want, cases.index((want, call))), got == want, "raised %s" % got)

# --- attn.sdpa_varlen: each sequence bitwise attn.sdpa alone ---------------
for dt in (np.float64, np.float32):
    for causal in (False, True, "bottom-right"):
        B, Hq, Hk, E, Ev = 5, 4, 2, 8, 6
        Lq, Lk = rng.integers(0, 30, B), rng.integers(0, 30, B)
        Lq[1], Lk[2] = 0, 0  # a sequence without queries, one without keys
        cq, ck = np.concatenate([[0], np.cumsum(Lq)]), np.concatenate([[0], np.cumsum(Lk)])
        vq, vk, vv = (f((n, h, x)).astype(dt) for n, h, x in ((cq[-1], Hq, E), (ck[-1], Hk, E), (ck[-1], Hk, Ev)))
        masks = [rng.random((Lq[b], Lk[b])) < 0.8 if b % 2 == 0 and Lq[b] and Lk[b] else None for b in range(B)]
        out, lse = attn.sdpa_varlen(vq, vk, vv, cq, ck, masks=masks, causal=causal, return_lse=True)
        dout = f(out.shape).astype(dt)
        dq, dk, dv = attn.sdpa_varlen_backward(dout, vq, vk, vv, out, lse, cq, ck, masks=masks, causal=causal)
        same = True
        for b in range(B):
            qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            if not Lq[b] or not Lk[b]:
                same &= not Lq[b] or (np.all(out[qs] == 0) and np.all(np.isneginf(lse[qs])) and np.all(dq[qs] == 0))
                same &= Lq[b] > 0 or (np.all(dk[ks] == 0) and np.all(dv[ks] == 0))
                continue
            # sequence b alone: its (H, n, X) views, as attn.h defines them
            sq, sk, sv = (a.transpose(1, 0, 2) for a in (vq[qs], vk[ks], vv[ks]))
            o1, l1 = attn.sdpa(sq, sk, sv, mask=masks[b], causal=causal, return_lse=True)
            g1 = attn.sdpa_backward(dout[qs].transpose(1, 0, 2), sq, sk, sv, o1, l1, mask=masks[b], causal=causal)
            same &= np.array_equal(out[qs].transpose(1, 0, 2), o1) and np.array_equal(lse[qs].T, l1)
            same &= all(np.array_equal(g[r].transpose(1, 0, 2), h) for g, r, h in ((dq, qs, g1[0]), (dk, ks, g1[1]),
                                                                                     (dv, ks, g1[2])))
        check("sdpa_varlen_bitwise_%s_%s" % (np.dtype(dt).name, causal), same)
# PyTorch float64 on the batch as one attention through a block-diagonal mask
blk = torch.zeros(int(cq[-1]), int(ck[-1]), dtype=torch.bool)
for b in range(B):
    blk[cq[b]:cq[b + 1], ck[b]:ck[b + 1]] = torch.tril(torch.ones(Lq[b], Lk[b], dtype=torch.bool), diagonal=int(Lk[b] - Lq[b]))
    if masks[b] is not None:
        blk[cq[b]:cq[b + 1], ck[b]:ck[b + 1]] &= torch.from_numpy(masks[b])
vq64, vk64, vv64 = (a.astype(np.float64) for a in (vq, vk, vv))
out64 = attn.sdpa_varlen(vq64, vk64, vv64, cq, ck, masks=masks, causal="bottom-right")
tq, tk, tv = (torch.from_numpy(a).transpose(0, 1) for a in (vq64, vk64, vv64))
tk, tv = tk.repeat_interleave(Hq // Hk, 0), tv.repeat_interleave(Hq // Hk, 0)
sc = (tq @ tk.transpose(1, 2) / np.sqrt(E)).masked_fill(~blk, float("-inf"))
pw = torch.softmax(sc, -1).nan_to_num(0.0)  # rows without keys: 0, as attn gives
ref = (pw @ tv).transpose(0, 1).numpy()
check("sdpa_varlen_vs_torch_block_diagonal", rel(out64, ref) < 1e-12, "rel %g" % rel(out64, ref))
for label, bad, want in (("decreasing", [0, 3, 2, cq[-1]], attn.ArgumentError), ("not_from_0", [1, cq[-1]], None),
                         ("floats", np.array([0.0, cq[-1]]), attn.ArgumentError)):
    try:
        attn.sdpa_varlen(vq, vk, vv, bad, [0, 1, 2, ck[-1]] if label == "decreasing" else [0, ck[-1]])
        got = "no error"
    except attn.ArgumentError as e:
        got = "" if e.message else "empty message"
    except Exception as e:  # noqa: BLE001
        got = "raised %s: %s" % (type(e).__name__, e)
    check("sdpa_varlen_refuses_offsets_%s" % label, not got, got)
try:
    attn.sdpa_varlen(vq, vk, vv, cq, ck, masks=[np.ones((Lq[0], Lk[0]), np.int32)] + [None] * (B - 1))
    got = "no error"
except attn.MaskError:
    got = ""
check("sdpa_varlen_refuses_integer_mask", not got, got)
# A step where no sequence has queries, or none has keys: NumPy's empty
# arrays have strides 0, and an output without rows is taken with them.
try:
    e_q, e_k = np.zeros((0, Hq, E), np.float32), np.zeros((0, Hk, E), np.float32)
    o0, l0 = attn.sdpa_varlen(e_q, vk, vv, [0] * (B + 1), ck, return_lse=True)
    g0 = attn.sdpa_varlen_backward(np.zeros((0, Hq, Ev), np.float32), e_q, vk, vv, o0, l0, [0] * (B + 1), ck)
    q1, d1 = f((3, Hq, E)).astype(np.float32), f((3, Hq, Ev)).astype(np.float32)
    o1, l1 = attn.sdpa_varlen(q1, e_k, e_k[..., :Ev], [0, 3], [0, 0], return_lse=True)
    g1 = attn.sdpa_varlen_backward(d1, q1, e_k, e_k[..., :Ev], o1, l1, [0, 3], [0, 0])
    got = "" if (o0.shape == (0, Hq, Ev) and np.all(g0[1] == 0) and np.all(o1 == 0) and np.all(g1[0] == 0)
                 and g1[1].shape == (0, Hk, E)) else "wrong results"
except attn.AttnError as e:
    got = "raised %s: %s" % (type(e).__name__, e)
check("sdpa_varlen_empty_packed_arrays", not got, got)
# No queries (L = 0), as torch takes them: an empty out, lse and weights, in
# the arrays attn.sdpa makes itself (NumPy's strides 0 before the 0; they
# were refused with StrideError), and no keys either.
try:
    z = [np.zeros(s, np.float32) for s in ((2, 3, 0, 8), (2, 3, 5, 8), (2, 3, 0, 8))]
    o0, l0, w0 = attn.sdpa(z[0], z[1], z[1], return_lse=True, return_weights=True)
    o1 = attn.sdpa(z[0], z[2], z[2])
    t = [torch.from_numpy(a) for a in z]
    want = torch.softmax(t[0] @ t[1].transpose(-2, -1), -1) @ t[1]  # torch's empty result, (2, 3, 0, 8)
    got = "" if (o0.shape == tuple(want.shape) == o1.shape and l0.shape == (2, 3, 0)
                 and w0.shape == (2, 3, 0, 5)) else "shapes %s %s %s %s" % (o0.shape, l0.shape, w0.shape, o1.shape)
except attn.AttnError as e:
    got = "raised %s: %s" % (type(e).__name__, e)
check("sdpa_no_queries_gives_empty_outputs", not got, got)


def float16_q_varlen():
    """A float16 q, which attn_sdpa_varlen takes (the binding refused it):
    attn.h widens q into a float32 copy and rounds the float32 out once into
    q's dtype, lse float32. Each sequence is then bitwise attn.sdpa alone on
    its widened q with that out rounded by NumPy (to nearest even), with
    float16 and float32 keys and values, bool and float masks, each causal
    mode, a sequence without queries and one without keys. A generator of
    its own leaves the module's random stream as the later checks had it."""
    g = np.random.default_rng(16)
    for kv_dt in (np.float16, np.float32):
        for causal in (False, True, "bottom-right"):
            B, Hq, Hk, E, Ev = 5, 4, 2, 8, 6
            Lq, Lk = g.integers(1, 30, B), g.integers(1, 30, B)
            Lq[1], Lk[2] = 0, 0
            cq, ck = np.concatenate([[0], np.cumsum(Lq)]), np.concatenate([[0], np.cumsum(Lk)])
            q = g.standard_normal((cq[-1], Hq, E)).astype(np.float16)
            k, v = (g.standard_normal((ck[-1], Hk, x)).astype(kv_dt) for x in (E, Ev))
            masks = [None] * B
            masks[0] = g.random((Lq[0], Lk[0])) < 0.8  # bool, and below float (Hq, L, S) with -inf
            masks[3] = np.where(g.random((Hq, Lq[3], Lk[3])) < 0.8, g.standard_normal((Hq, Lq[3], Lk[3])), -np.inf)
            try:
                out, lse = attn.sdpa_varlen(q, k, v, cq, ck, masks=masks, causal=causal, return_lse=True)
                why = "" if (out.dtype, lse.dtype) == (np.float16, np.float32) else "out %s, lse %s" % (out.dtype,
                                                                                                         lse.dtype)
                for b in range(B):
                    qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
                    if not Lq[b] or not Lk[b]:
                        if Lq[b] and not (np.all(out[qs] == 0) and np.all(np.isneginf(lse[qs]))):
                            why += "; sequence %d without keys: out not 0 or lse not -inf" % b
                        continue
                    sq, sk, sv = (a.transpose(1, 0, 2) for a in (q[qs].astype(np.float32), k[ks], v[ks]))
                    o1, l1 = attn.sdpa(sq, sk, sv, mask=masks[b], causal=causal, return_lse=True)
                    if not (np.array_equal(out[qs].transpose(1, 0, 2), o1.astype(np.float16)) and
                            np.array_equal(lse[qs].T, l1)):
                        why += "; sequence %d differs from attn.sdpa alone" % b
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                why = "%s: %s" % (type(e).__name__, e)
            check("sdpa_varlen_float16_q_bitwise_per_sequence_kv_%s_%s" % (np.dtype(kv_dt).name, causal), not why, why)


float16_q_varlen()


def float16_q_sdpa_and_plans():
    """A float16 q in attn.sdpa and attn.Plan, which attn_sdpa and the plans
    take (the binding refused it). attn.h: the call is the float32 call on q
    widened, its out rounded once to nearest even, lse float32; a plan's run
    is bitwise the unplanned call. So attn.sdpa is checked bitwise against
    itself on the widened q with out rounded by NumPy (GQA, a broadcast
    batch, bool and float masks, each causal mode, float16 and float32 keys
    and values), and each plan, dense and ragged, run for three layers,
    bitwise against the unplanned float16 call."""
    g = np.random.default_rng(1616)

    def three_runs(plan, shapes, dtypes, unplanned):
        """Runs the plan on three layers of fresh data: "" where each run is
        the unplanned call's bits (out float16, lse float32), else why not."""
        for _ in range(3):
            ql, kl, vl = (g.standard_normal(sh).astype(dt) for sh, dt in zip(shapes, dtypes))
            (po, pl), (uo, ul) = plan.run(ql, kl, vl), unplanned(ql, kl, vl)
            if (po.dtype, pl.dtype) != (np.float16, np.float32) or not (
                    np.array_equal(po, uo) and np.array_equal(pl, ul)):
                return "a run differs from the unplanned call (out %s, lse %s)" % (po.dtype, pl.dtype)
        return ""

    for kv_dt in (np.float16, np.float32):
        for causal in (False, True, "bottom-right"):
            name = "%s_%s" % (np.dtype(kv_dt).name, causal)
            L, S, E, Ev = 7, 11, 8, 6
            q16 = g.standard_normal((2, 4, L, E)).astype(np.float16)
            k, v = (g.standard_normal((1, 2, S, x)).astype(kv_dt) for x in (E, Ev))
            for mname, mask in (("none", None), ("bool", g.random((L, S)) < 0.8),
                                ("float", np.where(g.random((4, L, S)) < 0.8, g.standard_normal((4, L, S)), -np.inf))):
                try:
                    out, lse = attn.sdpa(q16, k, v, mask=mask, causal=causal, return_lse=True)
                    o32, l32 = attn.sdpa(q16.astype(np.float32), k, v, mask=mask, causal=causal, return_lse=True)
                    why = "" if (out.dtype, lse.dtype) == (np.float16, np.float32) else "out %s, lse %s" % (
                        out.dtype, lse.dtype)
                    if not why and not (np.array_equal(out, o32.astype(np.float16)) and np.array_equal(lse, l32)):
                        why = "differs from the float32 call on the widened q, rounded"
                except Exception as e:  # noqa: BLE001 -- any exception is the failure
                    why = "%s: %s" % (type(e).__name__, e)
                check("sdpa_float16_q_bitwise_widened_kv_%s_mask_%s" % (name, mname), not why, why)
            try:
                mask = g.random((L, S)) < 0.8
                plan = attn.Plan(q16, k, v, mask=mask, causal=causal, return_lse=True)
                why = three_runs(plan, (q16.shape, k.shape, v.shape), (np.float16, kv_dt, kv_dt),
                                 lambda ql, kl, vl: attn.sdpa(ql, kl, vl, mask=mask, causal=causal, return_lse=True))
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                why = "%s: %s" % (type(e).__name__, e)
            check("plan_float16_q_dense_runs_equal_unplanned_kv_%s" % name, not why, why)
            try:
                cq, ck = [0, 1, 1, 6], [0, 9, 12, 19]  # a decode step, a sequence without queries, a prefill
                masks = [None, None, g.random((5, 7)) < 0.8]
                shapes = ((6, 4, E), (19, 2, E), (19, 2, Ev))
                plan = attn.Plan(*(np.zeros(sh, dt) for sh, dt in zip(shapes, (np.float16, kv_dt, kv_dt))),
                                 cu_seqlens_q=cq, cu_seqlens_k=ck, masks=masks, causal=causal, return_lse=True)
                why = three_runs(plan, shapes, (np.float16, kv_dt, kv_dt),
                                 lambda ql, kl, vl: attn.sdpa_varlen(ql, kl, vl, cq, ck, masks=masks, causal=causal,
                                                                     return_lse=True))
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                why = "%s: %s" % (type(e).__name__, e)
            check("plan_float16_q_ragged_runs_equal_unplanned_kv_%s" % name, not why, why)


float16_q_sdpa_and_plans()


def float16_q_backward():
    """A float16 q in attn.sdpa_backward, which attn_sdpa_backward takes
    (the binding refused it). attn.h: q, out and dout are widened, the
    float32 backward runs on them, and each gradient is rounded once into
    its tensor's dtype (dmask float32). So it is checked bitwise against
    the float32 backward on the widened tensors (keys and values widened
    too, as the kernels read them), with float16 and float32 keys and
    values, a float mask and its gradient, and a dout of another dtype than
    q's refused naming dout."""
    g = np.random.default_rng(1618)
    for kv_dt in (np.float16, np.float32):
        for causal in (False, "bottom-right"):
            name = "%s_%s" % (np.dtype(kv_dt).name, causal)
            q16 = g.standard_normal((2, 4, 6, 8)).astype(np.float16)
            k, v = (g.standard_normal((2, 2, 9, x)).astype(kv_dt) for x in (8, 5))
            mask = np.where(g.random((6, 9)) < 0.8, g.standard_normal((6, 9)), -np.inf)
            mask[:, 0] = 0  # every row sees a key
            try:
                out, lse = attn.sdpa(q16, k, v, mask=mask, causal=causal, return_lse=True)
                dout = g.standard_normal(out.shape).astype(np.float16)
                got = attn.sdpa_backward(dout, q16, k, v, out, lse, mask=mask, causal=causal, want_dmask=True)
                wide = attn.sdpa_backward(*(a.astype(np.float32) for a in (dout, q16, k, v, out)), lse, mask=mask,
                                          causal=causal, want_dmask=True)
                dts = [a.dtype for a in got]
                why = "" if dts == [np.float16, kv_dt, kv_dt, np.float32] else "gradients of dtypes %s" % dts
                if not why and not all(np.array_equal(a, w.astype(a.dtype)) for a, w in zip(got, wide)):
                    why = "differs from the float32 backward on the widened tensors, rounded"
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                why = "%s: %s" % (type(e).__name__, e)
            check("sdpa_backward_float16_q_bitwise_widened_kv_%s" % name, not why, why)
    try:
        attn.sdpa_backward(dout.astype(np.float32), q16, k, v, out, lse, mask=mask, causal=causal)
        why = "no error"
    except attn.DtypeError as e:
        why = "" if str(e).startswith("dout is f32") else str(e)
    check("sdpa_backward_float16_q_float32_dout_refused", not why, why)
    # an lse of another dtype than float32 beside a float16 q, named as the caller gave it (the
    # library spoke of q's float32 copy: "lse is f64 but q is f32"; float16 was told to be float64)
    for dt in (np.float64, np.float16):
        try:
            attn.sdpa_backward(dout, q16, k, v, out, lse.astype(dt), mask=mask, causal=causal)
            why = "no error"
        except attn.DtypeError as e:
            why = "" if str(e) == "lse is %s; beside a float16 q it must be float32" % np.dtype(dt) else str(e)
        check("sdpa_backward_float16_q_%s_lse_refused" % np.dtype(dt), not why, why)
    # want_dsinks beside a float16 q: attn_sdpa_sinks_backward takes f32 or
    # f64 only (it refused the float16 out after the backward had run), so
    # dsinks is the float32 call's on dout and out widened, bitwise
    sinks = np.array([0.5, -1.0, 2.0, 0.0])
    try:
        out, lse = attn.sdpa(q16, k, v, causal=causal, return_lse=True, sinks=sinks)
        *grads, dsinks = attn.sdpa_backward(dout, q16, k, v, out, lse, causal=causal, sinks=sinks, want_dsinks=True)
        *_, wide = attn.sdpa_backward(*(a.astype(np.float32) for a in (dout, q16, k, v, out)), lse, causal=causal,
                                      sinks=sinks, want_dsinks=True)
        why = "dsinks %s" % dsinks.dtype if dsinks.dtype != np.float32 else \
            "" if np.array_equal(dsinks, wide) and np.any(dsinks) else "differs from the float32 call's dsinks"
    except Exception as e:  # noqa: BLE001 -- any exception is the failure
        why = "%s: %s" % (type(e).__name__, e)
    check("sdpa_backward_float16_q_dsinks_bitwise_widened", not why, why)


float16_q_backward()


def score_variants():
    """The score variants of attn_sdpa_options (softcap, alibi_slopes,
    window, sinks) and the bf16 compute mode, which the C API and `attn
    sdpa` take and the binding had no way to ask for: attn.sdpa and
    sdpa_backward with all four at once (GQA, bottom-right) against PyTorch
    float64 autograd on their definitions (oracle_backward.reference),
    float64 within 1e-12 and float32 within 1e-5 relative; each alone
    changes the result and matches the reference; sdpa_varlen's sequences
    bitwise attn.sdpa alone with the same variants, and its backward's
    bitwise sdpa_backward's; a Plan (dense and ragged) bitwise the unplanned
    call, its slopes and sinks copied (the caller's later writes reach no
    run); KVPages.attend and plan bitwise attn.sdpa on the gathered keys;
    compute='bf16' within bf16's bound of the reference. Refused: a
    misspelt variant, compute not 'f32' or 'bf16', 2-D slopes, and a
    number argument (scale, dropout_p, softcap) given a string, None or
    several values, each naming it."""
    from oracle_backward import reference as grad_reference, compare as sink_compare, sink_bound
    g = np.random.default_rng(1619)
    q, k, v = g.standard_normal((2, 4, 6, 8)), g.standard_normal((2, 2, 9, 8)), g.standard_normal((2, 2, 9, 5))
    dout = g.standard_normal((2, 4, 6, 5))
    V = dict(softcap=5.0, alibi_slopes=np.array([0.5, 0.25, 0.125, 0.0625]), window=4,
             sinks=np.array([0.3, -1.0, 2.0, 0.0]))
    as_ref = {"softcap": "softcap", "alibi_slopes": "slopes", "window": "window", "sinks": "sinks"}

    def ref(variants):
        grads, _, _, _, out, _, _ = grad_reference(q, k, v, dout, None, 2, None,
                                                variants={as_ref[n]: x for n, x in variants.items()})
        return out, grads[:3]
    want, want_grads = ref(V)
    for dt, bound in ((np.float64, 1e-12), (np.float32, 1e-5)):
        a = [x.astype(dt) for x in (q, k, v)]
        out, lse = attn.sdpa(*a, causal="bottom-right", return_lse=True, **V)
        grads = attn.sdpa_backward(dout.astype(dt), *a, out, lse, causal="bottom-right", **V)
        errs = [rel(out, want)] + [rel(x, w) for x, w in zip(grads, want_grads)]
        check("sdpa_score_variants_vs_torch_float64_%s" % np.dtype(dt).name, max(errs) <= bound,
              "errors %s" % errs)
    plain = attn.sdpa(q, k, v, causal="bottom-right")
    for name in V:
        one = attn.sdpa(q, k, v, causal="bottom-right", **{name: V[name]})
        err = rel(one, ref({name: V[name]})[0])
        check("sdpa_score_variant_%s_alone" % name, not np.array_equal(one, plain) and err <= 1e-12,
              "error %.3g, unchanged %s" % (err, np.array_equal(one, plain)))
    # RoPE (attn_rope_options by field; interleaved, a rotary_dim of 6, an offset), forward and backward
    rope = {"layout": 1, "base": 100.0, "rotary_dim": 6, "position_offset": 3}
    rgrads, _, _, _, rwant, _, _ = grad_reference(q, k, v, dout, None, 2, None, variants={"rope": (1, 100.0, 6, 3)})
    rout, rlse = attn.sdpa(q, k, v, causal="bottom-right", return_lse=True, rope=rope)
    rback = attn.sdpa_backward(dout, q, k, v, rout, rlse, causal="bottom-right", rope=rope)
    errs = [rel(rout, rwant)] + [rel(x, w) for x, w in zip(rback, rgrads)]
    check("sdpa_rope_vs_torch_float64", max(errs) <= 1e-12 and not np.array_equal(rout, plain), "errors %s" % errs)
    # the sinks' gradient (attn_sdpa_sinks_backward), against autograd's, per head within attn.h's
    # bound for f64 out and lse: 1e-12 · dsinks_abs_h (oracle_backward.sink_bound), dsinks_abs_h the
    # head's sum of e^(sink_h - lse) · rowsum(|dout| ∘ P|v|). dsinks_h = -sum e^(sink_h - lse) ·
    # rowsum(dout ∘ out) is a sum of terms of both signs, so its roundings are relative to those terms'
    # magnitudes, not to |dsinks_h| (which they may cancel to near 0), nor to the largest head's.
    sgrads, _, _, _, swant, sink_ref, _ = grad_reference(q, k, v, dout, None, 2, None, variants={"sinks": V["sinks"]})
    sout, slse = attn.sdpa(q, k, v, causal="bottom-right", return_lse=True, sinks=V["sinks"])
    *_, dsinks = attn.sdpa_backward(dout, q, k, v, sout, slse, causal="bottom-right", sinks=V["sinks"],
                                    want_dsinks=True)
    why = "dtype %s" % dsinks.dtype if dsinks.dtype != np.float64 else \
        sink_compare(dsinks, sink_ref[0], sink_bound(sink_ref[1]))
    check("sdpa_backward_dsinks_vs_torch_float64_per_head", not why, why)
    # attn.alibi_slopes: the paper's slopes (oracle_variants.paper_slopes, the authors' code)
    from oracle_variants import paper_slopes
    check("alibi_slopes_as_the_paper", all(np.allclose(attn.alibi_slopes(n), paper_slopes(n), rtol=1e-14, atol=0)
                                           for n in (1, 3, 8, 12, 40)))
    # pieces: the keys cut in two, each piece at its place in the whole (causal, ALiBi, the window and RoPE
    # counted over all 9 keys), merged: the whole's out and lse
    pv = dict(V, rope=rope)
    parts = [attn.sdpa(q, k[:, :, a:b], v[:, :, a:b], causal="bottom-right", return_lse=True, key_start=a,
                       total_keys=9, **{n: x for n, x in pv.items() if n != "sinks"},
                       **({"sinks": V["sinks"]} if a == 0 else {})) for a, b in ((0, 4), (4, 9))]
    whole = attn.sdpa(q, k, v, causal="bottom-right", return_lse=True, **pv)
    merged = attn.merge([x[0] for x in parts], [x[1] for x in parts])
    check("sdpa_pieces_merge_into_the_whole", rel(merged[0], whole[0]) <= 1e-12 and rel(merged[1], whole[1]) <= 1e-12,
          "errors %.3g %.3g" % (rel(merged[0], whole[0]), rel(merged[1], whole[1])))
    # a call's own thread count (its attn_context): bitwise the same, the process-wide count untouched,
    # and the call's verbose line says it was given that many (threads=R/T)
    qt, kt = (g.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(2))
    before = attn.get_num_threads()
    runs = [attn.sdpa(qt, kt, kt, causal=True, num_threads=n) for n in (1, 3)]
    check("sdpa_num_threads_per_call_bitwise", np.array_equal(*runs) and attn.get_num_threads() == before)
    said = subprocess.run([sys.executable, "-c", "import sys, numpy as np; sys.path.insert(0, %r); import attn; "
                           "q = np.ones((2, 4, 64, 32), np.float32); attn.sdpa(q, q, q, num_threads=1); "
                           "attn.sdpa(q, q, q, num_threads=3)" % os.path.join(HERE, "..", "python")],
                          capture_output=True, text=True, env=dict(os.environ, ATTN_VERBOSE="1")).stderr.splitlines()
    given = [line.split(" threads=")[1].split()[0].split("/")[1] for line in said if " threads=" in line]
    check("sdpa_num_threads_given_to_the_call", given == ["1", "3"], "verbose: %s" % said)
    # the dropout mask a call draws (attn_sdpa_dropout_mask): PyTorch's math with it is the call's result
    keep = attn.dropout_mask(q, k, v, 0.3, 11, causal="bottom-right", softcap=5.0)
    dwant = grad_reference(q, k, v, dout, None, 2, None, keep=keep, p=0.3, variants={"softcap": 5.0})[4]
    dgot = attn.sdpa(q, k, v, causal="bottom-right", dropout_p=0.3, seed=11, softcap=5.0)
    check("dropout_mask_is_the_calls", keep.shape == (2, 4, 6, 9) and keep.dtype == np.bool_ and
          0.5 < keep.mean() < 0.9 and rel(dgot, dwant) <= 1e-12,
          "kept %.3f, error %.3g" % (keep.mean(), rel(dgot, dwant)))
    V = dict(V, rope=rope)  # and with the others, through every call below
    # a ragged batch: each sequence bitwise attn.sdpa alone (the slopes and sinks per query head)
    a32 = [x.astype(np.float32) for x in (q, k, v)]
    qp, kp, vp = (x.transpose(0, 2, 1, 3).reshape(-1, x.shape[1], x.shape[3]) for x in a32)
    cq, ck = [0, 6, 12], [0, 9, 18]
    got, glse = attn.sdpa_varlen(qp, kp, vp, cq, ck, causal="bottom-right", return_lse=True, **V)
    alone = [attn.sdpa(*(x[b] for x in a32), causal="bottom-right", return_lse=True, **V) for b in range(2)]
    check("sdpa_varlen_score_variants_bitwise_sdpa", all(
        np.array_equal(got[cq[b]:cq[b + 1]], alone[b][0].transpose(1, 0, 2)) for b in range(2)))
    dp = g.standard_normal(got.shape).astype(np.float32)
    vg = attn.sdpa_varlen_backward(dp, qp, kp, vp, got, glse, cq, ck, causal="bottom-right", **V)
    same = True
    for b in range(2):
        d1 = attn.sdpa_backward(dp[cq[b]:cq[b + 1]].transpose(1, 0, 2), *(x[b] for x in a32), *alone[b],
                                causal="bottom-right", **V)
        same &= all(np.array_equal(x[c[b]:c[b + 1]], y.transpose(1, 0, 2)) for x, y, c in zip(vg, d1, (cq, ck, ck)))
    check("sdpa_varlen_backward_score_variants_bitwise_sdpa_backward", same)
    # planned: bitwise the unplanned call, the slopes and sinks copied at planning
    slopes, sinks = V["alibi_slopes"].copy(), V["sinks"].copy()
    kw = dict(V, alibi_slopes=slopes, sinks=sinks)
    dense = attn.Plan(*a32, causal="bottom-right", **kw)
    ragged = attn.Plan(qp, kp, vp, cu_seqlens_q=cq, cu_seqlens_k=ck, causal="bottom-right", **kw)
    slopes[:], sinks[:] = 9.0, -9.0
    check("plan_score_variants_bitwise_sdpa_copies_kept",
          np.array_equal(dense.run(*a32), attn.sdpa(*a32, causal="bottom-right", **V)) and
          np.array_equal(ragged.run(qp, kp, vp), got))
    # a list q runs as an array of the plan's dtype does (made float64, a
    # float32 plan refused it)
    check("plan_run_takes_a_list_q_in_its_dtype",
          np.array_equal(dense.run(a32[0].tolist(), *a32[1:]), dense.run(*a32)))
    # a paged pool: attend and its plan bitwise attn.sdpa on the gathered keys
    pool = attn.KVPages(heads=2, key_dim=8, value_dim=5, num_pages=8, max_sequences=2, page_size=16)
    ids = [pool.create(), pool.create()]
    pool.append(ids, [kp[ck[b]:ck[b + 1]] for b in range(2)], [vp[ck[b]:ck[b + 1]] for b in range(2)])
    outs = pool.attend(ids, [qp[cq[b]:cq[b + 1]] for b in range(2)], **V)
    planned = pool.plan(ids, [6, 6], num_heads=4, **V).run(qp)
    check("kv_pages_attend_score_variants_bitwise_sdpa", all(
        np.array_equal(outs[b], attn.sdpa(a32[0][b], *pool.gather(ids[b]), causal="bottom-right",
                                          **V).transpose(1, 0, 2)) for b in range(2)) and
          np.array_equal(planned, np.concatenate(outs)))
    # the bf16 compute mode (a flash-sized call: L <= 8 decodes in f32 either way)
    qb, kb, vb = (g.standard_normal((1, 2, 32, 16)) for _ in range(3))
    wb = reference(qb, kb, vb)[0]
    ob = attn.sdpa(*(x.astype(np.float32) for x in (qb, kb, vb)), compute="bf16")
    check("sdpa_compute_bf16_within_its_bound", rel(ob, wb) <= 2e-2, "error %.3g" % rel(ob, wb))
    for name, cls, call, words in (
            ("misspelt_variant", TypeError, lambda: attn.sdpa_varlen(qp, kp, vp, cq, ck, softcapp=1.0), "'softcapp'"),
            ("compute_fp8", attn.OptionError, lambda: attn.sdpa(*a32, compute="fp8"), "compute is 'fp8'"),
            ("compute_1", attn.OptionError, lambda: attn.sdpa(*a32, compute=1), "compute is 1"),
            ("slopes_2d", attn.RankError, lambda: attn.sdpa(*a32, alibi_slopes=np.ones((2, 2))), "alibi_slopes"),
            ("sinks_strings", attn.DtypeError, lambda: attn.sdpa(*a32, sinks=np.array(["a"] * 4)), "sinks"),
            ("scale_string", TypeError, lambda: attn.sdpa(*a32, scale="0.5"), "scale must be a real number"),
            ("scale_two_values", TypeError, lambda: attn.sdpa(*a32, scale=np.ones(2)), "scale must be a real number"),
            ("dropout_none", TypeError, lambda: attn.sdpa(*a32, dropout_p=None), "dropout_p must be a real number"),
            ("softcap_string", TypeError, lambda: attn.sdpa(*a32, softcap="5"), "softcap must be a real number"),
            ("window_float", TypeError, lambda: attn.sdpa(*a32, causal=True, window=2.5), "window must be an integer"),
            ("rope_misspelt_field", attn.OptionError, lambda: attn.sdpa(*a32, rope={"bse": 10.0}), "rope has 'bse'"),
            ("dsinks_without_sinks", attn.NullError, lambda: attn.sdpa_backward(dout, q, k, v, sout, slse,
                                                                                want_dsinks=True), "needs sinks"),
            ("key_start_float", TypeError, lambda: attn.sdpa(*a32, key_start=1.0), "key_start must be an integer"),
            ("alibi_slopes_no_heads", attn.ShapeError, lambda: attn.alibi_slopes(0), ""),
            ("num_threads_257", attn.OptionError, lambda: attn.sdpa(*a32, num_threads=257), "num_threads"),
            ("num_threads_float", TypeError, lambda: attn.sdpa(*a32, num_threads=2.0),
             "num_threads must be an integer"),
            ("dropout_mask_without_seed", attn.OptionError, lambda: attn.dropout_mask(*a32, 0.3, None), "seed")):
        try:
            call()
            check("score_variants_refuse_" + name, False, "no error")
        except cls as e:
            check("score_variants_refuse_" + name, words in str(e), str(e))
        except Exception as e:  # noqa: BLE001 -- another class is the failure
            check("score_variants_refuse_" + name, False, "%s: %s" % (type(e).__name__, e))


score_variants()

# An integer mask is refused, as PyTorch refuses it: converted to float it
# would be a bias of 0 and 1 on the scores, not a mask. Every integer dtype,
# through every call that takes a mask.
INT_NP = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)
INT_TORCH = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def refuses_mask(call):
    try:
        call()
        return "no error"
    except attn.MaskError as e:
        return "" if "bool or float" in e.message else "message: " + e.message
    except Exception as e:  # noqa: BLE001 -- any other error is a failure too
        return "raised %s: %s" % (type(e).__name__, e)


im = np.ones((5, 6))
imq, imk, imv = f((2, 5, 8)), f((2, 6, 8)), f((2, 6, 4))
io, il = attn.sdpa(imq, imk, imv, return_lse=True)
for dt in INT_NP:
    m = im.astype(dt)
    for name, call in (("sdpa", lambda: attn.sdpa(imq, imk, imv, mask=m)),
                       ("sdpa_f32", lambda: attn.sdpa(imq.astype(np.float32), imk.astype(np.float32),
                                                      imv.astype(np.float32), mask=m)),
                       ("sdpa_backward", lambda: attn.sdpa_backward(io, imq, imk, imv, io, il, mask=m))):
        why = refuses_mask(call)
        check("integer_mask_refused_%s_%s" % (name, np.dtype(dt).name), not why, why)
check("integer_mask_refused_python_list", not refuses_mask(lambda: attn.sdpa(imq, imk, imv, mask=[[1] * 6] * 5)))
tq, tk, tv = (torch.from_numpy(a) for a in (imq, imk, imv))
mha = at.MultiheadAttention(8, 2, dtype=torch.float64, batch_first=True)
tx = torch.randn(2, 5, 8, dtype=torch.float64)
for dt in INT_TORCH:
    tm = torch.ones(5, 6, dtype=dt)
    kpm = torch.zeros(2, 5, dtype=dt)
    am = torch.zeros(5, 5, dtype=dt)
    for name, call in (("torch_sdpa", lambda: at.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)),
                       ("torch_mha_key_padding_mask", lambda: mha(tx, tx, tx, key_padding_mask=kpm)),
                       ("torch_mha_attn_mask", lambda: mha(tx, tx, tx, attn_mask=am))):
        why = refuses_mask(call)
        check("integer_mask_refused_%s_%s" % (name, str(dt).replace("torch.", "")), not why, why)

# Dtypes: an array of a dtype the call does not take is refused as what it
# is (not converted, then reported as a mismatch); out= of the wrong dtype or
# shape is the library's DtypeError or ShapeError, naming out.
q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
dtype_cases = [
    ("integer_q", "DtypeError", "q is int32", lambda: attn.sdpa(q.astype(np.int32), k32, v32)),
    ("integer_k", "DtypeError", "k is int64", lambda: attn.sdpa(q, k.astype(np.int64), v)),
    ("bool_v", "DtypeError", "v is bool", lambda: attn.sdpa(q, k, v > 0)),
    # attn_sdpa takes a float16 q beside float32 or float16 k and v only; its
    # weights are float32-or-float64 only, and q of any other dtype is refused
    ("int8_q", "DtypeError", "q is int8; it must be float32, float64 or float16",
     lambda: attn.sdpa(q.astype(np.int8), k32, v32)),
    ("float64_k_beside_float16_q", "DtypeError", "k is float64; beside a float16 q it must be float32 or float16",
     lambda: attn.sdpa(q.astype(np.float16), k, v32)),
    ("float16_q_weights", "DtypeError", "the weights are not given for a 16-bit q",
     lambda: attn.sdpa(q.astype(np.float16), k32, v32, return_weights=True)),
    ("float16_q_float64_out", "DtypeError", "out is f64 but q is f16",
     lambda: attn.sdpa(q.astype(np.float16), k32, v32, out=np.empty(q.shape[:-1] + v.shape[-1:]))),
    ("plan_float16_q_float64_k", "DtypeError", "k is float64; beside a float16 q it must be float32 or float16",
     lambda: attn.Plan(q.astype(np.float16), k, v32)),
    ("plan_run_float16_q_float64_v", "DtypeError", "v is float64; beside a float16 q it must be float32 or float16",
     lambda: attn.Plan(q.astype(np.float16), k32, v32).run(q.astype(np.float16), k32, v)),
    ("float16_k_beside_float64_q", "DtypeError", "k is float16; it must be float32 or float64, or float16 beside "
     "a float32 q", lambda: attn.sdpa(q, k.astype(np.float16), v)),
    ("integer_dout", "DtypeError", "dout is int32", lambda: attn.sdpa_backward(
        np.zeros((2, 5, 4), np.int32), q, k, v, *attn.sdpa(q, k, v, return_lse=True))),
    ("integer_merge", "DtypeError", "outs[1] is int32", lambda: attn.merge(
        [np.zeros((2, 5, 4)), np.zeros((2, 5, 4), np.int32)], [np.zeros((2, 5))] * 2)),
    ("out_dtype", "DtypeError", "out is f64 but q is f32", lambda: attn.sdpa(q32, k32, v32, out=np.zeros((2, 5, 4)))),
    ("out_shape", "ShapeError", "out has shape (2, 5, 3)", lambda: attn.sdpa(q, k, v, out=np.zeros((2, 5, 3)))),
    ("out_not_an_array", "TypeError", "out must be a NumPy array", lambda: attn.sdpa(q, k, v, out=[0.0] * 40)),
    ("integer_torch_q", "DtypeError", "q is int64", lambda: attn.sdpa(torch.ones(2, 5, 8, dtype=torch.int64), k, v)),
    ("none_q", "NullError", "q is None", lambda: attn.sdpa(None, k, v)),
]


def check_raises(prefix, cases):
    """Each (name, exception class name, words of its message, call) case
    must raise that class with those words."""
    for name, want, words, call in cases:
        try:
            call()
            got, said = "no error", ""
        except Exception as e:  # noqa: BLE001 -- the class is what is checked
            got, said = type(e).__name__, str(e)
        check("%s_%s_raises_%s" % (prefix, name, want), got == want and words in said, "%s: %s" % (got, said))


check_raises("dtype", dtype_cases)
# Arguments that are not what the call takes: refused, not read otherwise.
# want= skipped a misspelt name (its gradient silently None); ctypes
# wrapped set_num_threads(2**32) to 0 (every CPU) and int() made 1.5 one
# thread; attn.torch read a NumPy query's .dim() (AttributeError).
so, sl = attn.sdpa(q, k, v, return_lse=True)
tk_, tv_ = torch.from_numpy(k), torch.from_numpy(v)
argument_cases = [
    ("backward_want_misspelt", "ArgumentError", "want names 'dK'",
     lambda: attn.sdpa_backward(so, q, k, v, so, sl, want=("dq", "dK"))),
    ("varlen_backward_want_misspelt", "ArgumentError", "want names 'dkk'",
     lambda: attn.sdpa_varlen_backward(so[0][:, None], q[0][:, None], k[0][:, None], v[0][:, None], so[0][:, None],
                                       sl[0][:, None], [0, 5], [0, 6], want=["dkk"])),
    ("threads_past_int", "ArgumentError", "outside", lambda: attn.set_num_threads(2 ** 32)),
    # an integer past int64 is still a real number (it was refused as "not int"); past float64 it is not
    # rope's integer fields past their C types: ctypes wrapped them (position_offset 2**64 + 3 was 3)
    ("rope_position_offset_past_int64", "ArgumentError", "rope['position_offset'] is 18446744073709551619, outside",
     lambda: attn.sdpa(q, k, v, rope={"position_offset": 2 ** 64 + 3})),
    ("rope_layout_past_int", "ArgumentError", "rope['layout'] is 4294967297, outside",
     lambda: attn.sdpa(q, k, v, rope={"layout": 2 ** 32 + 1})),
    ("rope_base_past_float64", "ArgumentError", "rope['base'] is an integer past float64's range",
     lambda: attn.sdpa(q, k, v, rope={"base": 2 ** 1100})),
    ("scale_past_float64", "ArgumentError", "scale is an integer past float64's range",
     lambda: attn.sdpa(q, k, v, scale=2 ** 1100)),
    ("threads_float", "TypeError", "must be an integer", lambda: attn.set_num_threads(1.5)),
    ("seed_float", "TypeError", "seed must be an integer", lambda: attn.sdpa(q, k, v, dropout_p=0.2, seed=1.5)),
    ("seed_past_uint64", "ArgumentError", "seed is", lambda: attn.sdpa(q, k, v, dropout_p=0.2, seed=2 ** 64)),
    ("torch_numpy_query", "TypeError", "query must be a torch.Tensor",
     lambda: at.scaled_dot_product_attention(q, tk_, tv_)),
    ("torch_more_key_heads_than_query", "HeadsError", "query's heads must be a multiple of key's",
     lambda: at.scaled_dot_product_attention(torch.ones(1, 2, 3, 4), torch.ones(1, 4, 3, 4), torch.ones(1, 4, 3, 4))),
    ("torch_list_value", "TypeError", "value must be a torch.Tensor",
     lambda: at.scaled_dot_product_attention(torch.from_numpy(q), tk_, v.tolist())),
    # Arguments that raised what Python says of a None or a string (not
    # iterable, could not convert), naming no argument; is_causal a string
    # was true, so top-left, where torch refuses it.
    ("backward_want_none", "TypeError", "want must be a list",
     lambda: attn.sdpa_backward(so, q, k, v, so, sl, want=None)),
    ("merge_none", "TypeError", "outs must be a list", lambda: attn.merge(None, [sl])),
    ("merge_lses_int", "TypeError", "lses must be a list", lambda: attn.merge([so], 3)),
    ("sdpa_string_q", "DtypeError", "q is str, not an array of numbers", lambda: attn.sdpa("abc", k, v)),
    ("sdpa_list_of_strings_k", "DtypeError", "k is list", lambda: attn.sdpa(q, [["a"]], v)),
    ("torch_is_causal_string", "TypeError", "is_causal must be a bool",
     lambda: at.scaled_dot_product_attention(torch.from_numpy(q), tk_, tv_, is_causal="bottom-right")),
    ("torch_dropout_none", "TypeError", "dropout_p must be a real number",
     lambda: at.scaled_dot_product_attention(torch.from_numpy(q), tk_, tv_, dropout_p=None)),
    # A NumPy mask: the float16 and size-0 paths called its .detach() or
    # .to() (AttributeError), the others named it
    ("torch_numpy_mask_float16_query", "TypeError", "attn_mask must be a torch.Tensor or None, not ndarray",
     lambda: at.scaled_dot_product_attention(torch.from_numpy(q).half(), tk_, tv_, attn_mask=np.ones((5, 6), bool))),
    ("torch_numpy_mask_no_queries", "TypeError", "attn_mask must be a torch.Tensor or None, not ndarray",
     lambda: at.scaled_dot_product_attention(torch.from_numpy(q[:, :0]), tk_, tv_, attn_mask=np.ones((0, 6), bool))),
    # What NumPy cannot view raised torch's own words, naming no argument:
    # a bfloat16 tensor a TypeError (not DtypeError), one in autograd's
    # graph a RuntimeError; an array past rank 5 "an array of rank 6"
    ("sdpa_bfloat16_tensor_k", "DtypeError", "k (Tensor of torch.bfloat16) cannot be read as a NumPy array",
     lambda: attn.sdpa(torch.from_numpy(q32), torch.from_numpy(k32).bfloat16(), torch.from_numpy(v32))),
    ("sdpa_tensor_requiring_grad", "TypeError", "v requires grad",
     lambda: attn.sdpa(q, k, torch.from_numpy(v).requires_grad_())),
    ("sdpa_bfloat16_mask", "DtypeError", "mask (Tensor of torch.bfloat16) cannot be read",
     lambda: attn.sdpa(q, k, v, mask=torch.zeros(5, 6, dtype=torch.bfloat16))),
    ("sdpa_q_rank_6", "RankError", "q has rank 6; at most 5", lambda: attn.sdpa(q[None, None, None], k, v)),
    ("sdpa_mask_rank_6", "RankError", "mask has rank 6; at most 5",
     lambda: attn.sdpa(q, k, v, mask=np.ones((1,) * 4 + (5, 6), bool))),
]
threads_before = attn.get_num_threads()
check_raises("argument", argument_cases)
check("refused_threads_leave_the_count", attn.get_num_threads() == threads_before, "%d threads, %d before"
      % (attn.get_num_threads(), threads_before))
one = attn.sdpa_backward(so, q, k, v, so, sl, want="dk")
check("negative_seed_as_uint64", np.array_equal(attn.sdpa(q, k, v, dropout_p=0.2, seed=-1),
                                                attn.sdpa(q, k, v, dropout_p=0.2, seed=2 ** 64 - 1)))
# A ragged batch's arguments, refused as what they are: None offsets were
# "not object ()" (not a NullError, as a None q is), integers past int64 in
# a list "not float64" (and an empty list "outside int64"), masks=5 or a
# generator "has no len()", an integer
# mask called "mask" (not which one); causal=[] was "unhashable type" and an
# integer out= an array "not taken", naming neither.
varlen_cases = [
    ("none_offsets", "NullError", "cu_seqlens_q is None", lambda: attn.sdpa_varlen(vq, vk, vv, None, ck)),
    ("backward_none_offsets", "NullError", "cu_seqlens_k is None",
     lambda: attn.sdpa_varlen_backward(out, vq, vk, vv, out, lse, cq, None)),
    ("offsets_past_int64", "ArgumentError", "cu_seqlens_k holds an offset outside int64",
     lambda: attn.sdpa_varlen(vq, vk, vv, cq, list(ck[:-1]) + [2 ** 64 + 1])),
    ("no_offsets", "ArgumentError", "cu_seqlens_q must be a 1-D array of integers with B+1 offsets, not float64 (0,)",
     lambda: attn.sdpa_varlen(vq, vk, vv, [], [])),
    ("masks_not_a_list", "TypeError", "masks must be a list", lambda: attn.sdpa_varlen(vq, vk, vv, cq, ck, masks=5)),
    ("integer_mask_named", "MaskError", "masks[2] is int32", lambda: attn.sdpa_varlen(
        vq, vk, vv, cq, ck, masks=[None, None, np.ones((Lq[2], Lk[2]), np.int32)] + [None] * (B - 3))),
    ("causal_unhashable", "OptionError", "causal is []", lambda: attn.sdpa_varlen(vq, vk, vv, cq, ck, causal=[])),
    ("integer_out", "DtypeError", "out is int64", lambda: attn.sdpa_varlen(
        vq, vk, vv, cq, ck, out=np.zeros((cq[-1], Hq, Ev), np.int64))),
    ("integer_q", "DtypeError", "q is int32; it must be float32, float64 or float16",
     lambda: attn.sdpa_varlen(vq.astype(np.int32), vk, vv, cq, ck)),
    ("float16_q_float64_v", "DtypeError", "v is float64; beside a float16 q it must be float32 or float16",
     lambda: attn.sdpa_varlen(vq.astype(np.float16), vk.astype(np.float32), vv.astype(np.float64), cq, ck)),
    # the library's ragged backward takes float32 or float64 q only
    ("backward_float16_q", "DtypeError", "q is float16; it must be float32 or float64",
     lambda: attn.sdpa_varlen_backward(out, vq.astype(np.float16), vk, vv, out, lse, cq, ck)),
]
check_raises("varlen", varlen_cases)
try:
    got = attn.sdpa_varlen(vq, vk, vv, cq, ck, masks=(m for m in masks), causal="bottom-right")
    want = attn.sdpa_varlen(vq, vk, vv, cq, ck, masks=masks, causal="bottom-right")
    why = "" if np.array_equal(got, want) else "differs"
except Exception as e:  # noqa: BLE001 -- any exception is the failure
    why = "%s: %s" % (type(e).__name__, e)
check("varlen_masks_from_a_generator", not why, why)
check("scale_integer_past_int64_taken", np.array_equal(attn.sdpa(q, k, v, scale=2 ** 70),
                                                      attn.sdpa(q, k, v, scale=float(2 ** 70))))
check("backward_want_one_name", one[0] is None and one[2] is None and one[1].shape == k.shape)
got = attn.sdpa(q.tolist(), k.tolist(), v.tolist())
check("lists_are_float64_arrays", got.dtype == np.float64 and np.array_equal(got, attn.sdpa(q, k, v)))
# What carries a dtype of its own (a torch tensor, a memoryview) keeps it:
# float32 tensors were made float64 (computed and returned in float64), and
# a tensor q beside NumPy float32 keys a mismatch the caller never made.
want32 = attn.sdpa(q32, k32, v32)
for name, args in (("torch", (torch.from_numpy(q32), torch.from_numpy(k32), torch.from_numpy(v32))),
                   ("torch_q_numpy_kv", (torch.from_numpy(q32), k32, v32)),
                   ("memoryview", (memoryview(q32), k32, v32))):
    try:
        got = attn.sdpa(*args)
        why = "" if got.dtype == np.float32 and np.array_equal(got, want32) else "%s, differs" % got.dtype
    except attn.AttnError as e:
        why = "raised %s: %s" % (type(e).__name__, e)
    check("float32_%s_stays_float32" % name, not why, why)


# --- attn.Plan: a call planned once, run for three "layers" -----------------
plan_ok, why = True, ""
for dt in (np.float32, np.float64):
    for causal, masked in ((False, False), ("bottom-right", True), (True, False)):
        # dense: GQA, a bool mask broadcast over the heads
        shape_q, shape_kv = (2, 4, 9, 16), (2, 2, 40, 16)
        mask = rng.random((9, 40)) < 0.8 if masked else None
        q0, k0, v0 = f(shape_q).astype(dt), f(shape_kv).astype(dt), f(shape_kv).astype(dt)
        plan = attn.Plan(q0, k0, v0, mask=mask, causal=causal, return_lse=True)
        for layer in range(3):
            q1, k1, v1 = f(shape_q).astype(dt), f(shape_kv).astype(dt), f(shape_kv).astype(dt)
            got, got_l = plan.run(q1, k1, v1)
            want, want_l = attn.sdpa(q1, k1, v1, mask=mask, causal=causal, return_lse=True)
            if not (np.array_equal(got, want) and np.array_equal(got_l, want_l)):
                plan_ok, why = False, "dense %s %s layer %d differs" % (np.dtype(dt).name, causal, layer)
        # ragged: a decode sequence, an empty one, a prefill
        cq, ck = [0, 1, 1, 13], [0, 30, 35, 47]
        masks = [rng.random((1, 30)) < 0.8, None, rng.random((12, 12)) < 0.8] if masked else None
        vshape_q, vshape_k = (13, 4, 8), (47, 2, 8)
        vplan = attn.Plan(f(vshape_q).astype(dt), f(vshape_k).astype(dt), f(vshape_k).astype(dt), causal=causal,
                          cu_seqlens_q=cq, cu_seqlens_k=ck, masks=masks)
        for layer in range(3):
            q1, k1, v1 = f(vshape_q).astype(dt), f(vshape_k).astype(dt), f(vshape_k).astype(dt)
            if not np.array_equal(vplan.run(q1, k1, v1),
                                  attn.sdpa_varlen(q1, k1, v1, cq, ck, masks=masks, causal=causal)):
                plan_ok, why = False, "varlen %s %s layer %d differs" % (np.dtype(dt).name, causal, layer)
check("plan_runs_equal_unplanned_calls", plan_ok, why)
# Dropout in a plan (Plan took none, though attn_sdpa_plan_init does): every
# run bitwise the unplanned call with the same dropout_p and seed; seed None
# draws one, kept in plan.seed; a p outside [0, 1) is the C API's OptionError.
drop_ok, why = True, ""
q0, k0, v0 = f((2, 4, 9, 16)).astype(np.float32), f((2, 2, 40, 16)).astype(np.float32), f((2, 2, 40, 16)).astype(np.float32)
for seed in (7, None):
    dplan = attn.Plan(q0, k0, v0, causal="bottom-right", return_lse=True, dropout_p=0.3, seed=seed)
    for layer in range(2):
        q1, k1, v1 = f(q0.shape).astype(np.float32), f(k0.shape).astype(np.float32), f(k0.shape).astype(np.float32)
        got, got_l = dplan.run(q1, k1, v1)
        want, want_l = attn.sdpa(q1, k1, v1, causal="bottom-right", return_lse=True, dropout_p=0.3, seed=dplan.seed)
        if seed is not None and dplan.seed != seed or not (np.array_equal(got, want) and np.array_equal(got_l, want_l)) \
                or np.array_equal(got, attn.sdpa(q1, k1, v1, causal="bottom-right")):
            drop_ok, why = False, "dense seed %s layer %d differs" % (seed, layer)
cq, ck = [0, 1, 1, 13], [0, 30, 35, 47]
vq, vk = f((13, 4, 8)).astype(np.float32), f((47, 2, 8)).astype(np.float32)
vplan = attn.Plan(vq, vk, vk, cu_seqlens_q=cq, cu_seqlens_k=ck, causal="bottom-right", dropout_p=0.5, seed=3)
if not np.array_equal(vplan.run(vq, vk, vk), attn.sdpa_varlen(vq, vk, vk, cq, ck, causal="bottom-right",
                                                              dropout_p=0.5, seed=3)):
    drop_ok, why = False, "varlen differs"
check("plan_dropout_runs_equal_unplanned_calls", drop_ok and attn.Plan(q0, k0, v0).seed is None, why)
for bad in (1.5, -0.5, float("nan")):
    try:
        attn.Plan(q0, k0, v0, dropout_p=bad, seed=1)
        check("plan_dropout_%r_refused" % bad, False, "no error")
    except attn.OptionError as e:
        check("plan_dropout_%r_refused" % bad, "dropout_p" in str(e), str(e))
# A plan keeps a copy of its masks: a mask of q's dtype (or bool) was kept
# by reference, so that the caller's later writes into it changed the runs,
# while one converted (float32 beside float64 q, a list) was kept as made.
for mname, make in (("float64", lambda: f((9, 40))), ("bool", lambda: rng.random((9, 40)) < 0.7),
                    ("float32_converted", lambda: f((9, 40)).astype(np.float32))):
    qm, km, vm = f((2, 4, 9, 16)), f((2, 2, 40, 16)), f((2, 2, 40, 16))
    given = make()
    kept = given.copy()
    mplan = attn.Plan(qm, km, vm, mask=given)
    given[...] = 0 if given.dtype == np.bool_ else -np.inf  # every key masked out, had the plan read this
    got, want = mplan.run(qm, km, vm), attn.sdpa(qm, km, vm, mask=kept)
    check("plan_keeps_its_%s_mask" % mname, np.array_equal(got, want), "error %.3g" % rel(got, want))
vq, vk, vv = f((5, 2, 8)), f((7, 2, 8)), f((7, 2, 8))
vmasks = [f((2, 2, 3)), rng.random((2, 3, 4)) < 0.7]
vkept = [m.copy() for m in vmasks]
vmplan = attn.Plan(vq, vk, vv, cu_seqlens_q=[0, 2, 5], cu_seqlens_k=[0, 3, 7], masks=vmasks)
vmasks[0][...], vmasks[1][...] = -np.inf, False
got, want = vmplan.run(vq, vk, vv), attn.sdpa_varlen(vq, vk, vv, [0, 2, 5], [0, 3, 7], masks=vkept)
check("plan_keeps_its_varlen_masks", np.array_equal(got, want), "error %.3g" % rel(got, want))
# The other kind of call's mask was dropped silently (every run attended to
# the keys it masked): refused.
check_raises("plan", [
    ("ragged_with_mask", "ArgumentError", "a ragged batch takes masks", lambda: attn.Plan(
        vq, vk, vv, cu_seqlens_q=[0, 2, 5], cu_seqlens_k=[0, 3, 7], mask=rng.random((5, 7)) < 0.5)),
    ("dense_with_masks", "ArgumentError", "a dense plan takes mask", lambda: attn.Plan(
        qm, km, vm, masks=[rng.random((9, 40)) < 0.5])),
])
# Threads sharing a plan: a run writes its arrays' pointers into the plan
# and uses its one workspace, so two at once got each other's rows. Each
# thread's every run must be the unplanned call's on its own arrays.
tq_shape, tk_shape = (2, 4, 64, 32), (2, 4, 256, 32)
t_inputs = [tuple(f(s_).astype(np.float32) for s_ in (tq_shape, tk_shape, tk_shape)) for _ in range(4)]
t_wants = [attn.sdpa(*x, causal=True) for x in t_inputs]
t_plan, t_wrong = attn.Plan(*t_inputs[0], causal=True), []


def plan_runs(i):
    for it in range(100):
        j = (i + it) % 4
        if not np.array_equal(t_plan.run(*t_inputs[j]), t_wants[j]):
            t_wrong.append((i, it))


t_threads = [threading.Thread(target=plan_runs, args=(i,)) for i in range(4)]
for t in t_threads:
    t.start()
for t in t_threads:
    t.join()
check("plan_shared_by_threads_runs_each_own_arrays", not t_wrong, "%d of 400 runs wrong" % len(t_wrong))
# Ragged batches from several Python threads at once (each call lets go of
# the GIL): every result bitwise the one-thread call's, and every refused
# call's message its own (each call has its own error struct).
v_batches = []
for i in range(4):
    lq, lk = rng.integers(0, 40, 5), rng.integers(1, 60, 5)
    c_q, c_k = np.concatenate([[0], np.cumsum(lq)]), np.concatenate([[0], np.cumsum(lk)])
    xs = (f((c_q[-1], 4, 16)).astype(np.float32), f((c_k[-1], 2, 16)).astype(np.float32),
          f((c_k[-1], 2, 8)).astype(np.float32))
    o, l = attn.sdpa_varlen(*xs, c_q, c_k, causal="bottom-right", return_lse=True)
    v_batches.append((xs, c_q, c_k, o, attn.sdpa_varlen_backward(o, *xs, o, l, c_q, c_k, causal="bottom-right")))
v_wrong = []


def varlen_runs(i):
    for it in range(40):
        xs, c_q, c_k, o, g = v_batches[(i + it) % 4]
        got, got_l = attn.sdpa_varlen(*xs, c_q, c_k, causal="bottom-right", return_lse=True)
        got_g = attn.sdpa_varlen_backward(got, *xs, got, got_l, c_q, c_k, causal="bottom-right")
        if not (np.array_equal(got, o) and all(np.array_equal(a, b) for a, b in zip(got_g, g))):
            v_wrong.append((i, it))
        try:
            attn.sdpa_varlen(*xs, c_q, np.append(c_k[:-1], c_k[-1] + 1 + i))
            v_wrong.append((i, it, "no error"))
        except attn.ArgumentError as e:
            if "is %d but the tensor has %d rows" % (c_k[-1] + 1 + i, c_k[-1]) not in str(e):
                v_wrong.append((i, it, str(e)))


t_threads = [threading.Thread(target=varlen_runs, args=(i,)) for i in range(4)]
for t in t_threads:
    t.start()
for t in t_threads:
    t.join()
check("varlen_from_threads_bitwise_with_own_messages", not v_wrong, "wrong: %s" % v_wrong[:3])
try:
    plan.run(f((2, 4, 10, 16)), f(shape_kv), f(shape_kv))
    check("plan_refuses_other_shapes", False, "no error")
except attn.PlanError as e:
    check("plan_refuses_other_shapes", "q" in str(e), str(e))

# --- attn.torch ---------------------------------------------------------------
torch.manual_seed(0)
D = torch.float64
q, k, v = (torch.randn(s, dtype=D, requires_grad=True) for s in ((2, 4, 9, 8), (2, 2, 9, 8), (2, 2, 9, 5)))
m = torch.randn(9, 9, dtype=D, requires_grad=True)
check("gradcheck_causal_gqa", torch.autograd.gradcheck(
    lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True), (q, k, v)))
check("gradcheck_float_mask_and_scale", torch.autograd.gradcheck(
    lambda a, b, c, d: at.scaled_dot_product_attention(a, b, c, attn_mask=d, scale=0.7, enable_gqa=True), (q, k, v, m)))
# enable_gqa as torch 2.5 takes it: without it, key and value need query's heads (or 1, broadcast).
try:
    at.scaled_dot_product_attention(q, k, v)
    said = "no error"
except at._core.HeadsError as e:
    said = str(e)
check("torch_gqa_needs_enable_gqa", "enable_gqa=True" in said, said)
k1, v1 = k[:, :1].detach(), v[:, :1].detach()
got = at.scaled_dot_product_attention(q.detach(), k1, v1)
want = at.scaled_dot_product_attention(q.detach(), k1, v1, enable_gqa=True)
check("torch_one_kv_head_broadcasts_without_enable_gqa", torch.equal(got, want))
try:
    at.scaled_dot_product_attention(q.detach(), k.detach()[:, :1].repeat(1, 3, 1, 1), v.detach()[:, :1].repeat(1, 3, 1, 1),
                                    enable_gqa=True)
    said = "no error"
except at._core.HeadsError as e:
    said = str(e)
check("torch_enable_gqa_heads_must_divide", said != "no error", said)
# Inputs torch's attention does not take raise a RuntimeError, as torch's
# own does (code written for torch catches that), still of the library's
# class: a ShapeError was a ValueError alone, a DtypeError a TypeError.
said = []
for label, cls, call in (
        ("sdpa_other_E", attn.ShapeError, lambda: at.scaled_dot_product_attention(
            torch.randn(2, 3, 4, dtype=D), torch.randn(2, 5, 6, dtype=D), torch.randn(2, 5, 4, dtype=D))),
        ("sdpa_other_dtypes", attn.DtypeError, lambda: at.scaled_dot_product_attention(
            torch.randn(2, 3, 4, dtype=D), torch.randn(2, 5, 4), torch.randn(2, 5, 4))),
        ("sdpa_integer_mask", attn.MaskError, lambda: at.scaled_dot_product_attention(
            torch.randn(2, 3, 4, dtype=D), torch.randn(2, 5, 4, dtype=D), torch.randn(2, 5, 4, dtype=D),
            attn_mask=torch.ones(3, 5, dtype=torch.int64))),
        ("sdpa_heads", attn.HeadsError, lambda: at.scaled_dot_product_attention(
            torch.randn(2, 4, 3, 4, dtype=D), torch.randn(2, 3, 5, 4, dtype=D), torch.randn(2, 3, 5, 4, dtype=D),
            enable_gqa=True)),
        ("mha_features", attn.ShapeError, lambda: mha(torch.randn(3, 5, 4, dtype=D), torch.randn(3, 5, 4, dtype=D),
                                                      torch.randn(3, 5, 4, dtype=D)))):
    try:
        call()
        said.append("%s: no error" % label)
    except RuntimeError as e:
        if not isinstance(e, cls):
            said.append("%s: %s, not %s" % (label, type(e).__mro__, cls.__name__))
        back = pickle.loads(pickle.dumps(e))  # as an exception comes back from a worker process
        if type(back) is not type(e) or str(back) != str(e) or back.status != e.status:
            said.append("%s: pickled back as %r" % (label, back))
    except Exception as e:  # noqa: BLE001 -- which error is what is checked
        said.append("%s: %s (%s), not a RuntimeError" % (label, type(e).__name__, e))
check("torch_wrong_inputs_raise_runtime_error_of_the_library_class", not said, "; ".join(said))
# enable_gqa takes a bool (or a NumPy bool), as torch's own: read by
# truthiness, enable_gqa="no" or "False" grouped the heads, silently.
said = []
for x in ("no", "False", 1, None):
    try:
        at.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), enable_gqa=x)
        said.append("%r: no error" % (x,))
    except Exception as e:  # noqa: BLE001 -- which error is what is checked
        if not isinstance(e, TypeError) or "enable_gqa must be a bool" not in str(e):
            said.append("%r: %s: %s" % (x, type(e).__name__, e))
check("torch_enable_gqa_takes_a_bool_only", not said and torch.equal(
    at.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), enable_gqa=np.bool_(True)),
    at.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), enable_gqa=True)), "; ".join(said))
# A dimension of size 0, as torch takes it: an empty batch, no heads, no
# queries, no value features give an empty output, no keys (S = 0) zeros
# (softmax over no key times no value), E = 0 the mean of v (every score 0);
# each gradient has its input's shape. The library takes no size 0, and the
# call raised ShapeError.
for label, shapes, kw, dt in (("batch", ((0, 2, 3, 4), (0, 2, 5, 4), (0, 2, 5, 6)), {}, D),
                              ("heads_gqa", ((2, 0, 3, 4), (2, 0, 5, 4), (2, 0, 5, 6)), {"enable_gqa": True}, D),
                              ("queries", ((2, 2, 0, 4), (2, 2, 5, 4), (2, 2, 5, 6)), {}, D),
                              ("keys_causal", ((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 6)), {"is_causal": True}, D),
                              ("keys_mask", ((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 6)),
                               {"attn_mask": torch.zeros(3, 0, dtype=D)}, D),
                              ("value_features", ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 0)), {}, D),
                              ("queries_float16", ((2, 2, 0, 4), (2, 2, 5, 4), (2, 2, 5, 6)), {}, torch.float16),
                              ("keys_bfloat16", ((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 6)), {}, torch.bfloat16),
                              ("batch_float32", ((0, 4, 3, 4), (0, 2, 5, 4), (0, 2, 5, 6)), {"enable_gqa": True},
                               torch.float32)):
    zq, zk, zv = (torch.randn(*sh, dtype=dt, requires_grad=True) for sh in shapes)
    try:
        zo = at.scaled_dot_product_attention(zq, zk, zv, **kw)
        zo.sum().backward()
        why = "" if (zo.shape == shapes[0][:-1] + shapes[2][-1:] and zo.dtype == dt and not zo.detach().any() and
                     all(t.grad is not None and t.grad.shape == t.shape and not t.grad.any() for t in (zq, zk, zv))) \
            else "out %s %s, grads %s" % (tuple(zo.shape), zo.dtype, [None if t.grad is None else tuple(t.grad.shape)
                                                                      for t in (zq, zk, zv)])
    except (attn.AttnError, RuntimeError) as e:
        why = "%s: %s" % (type(e).__name__, e)
    check("torch_size_0_%s" % label, not why, why)
# Wrong inputs with a dimension of size 0 raise what the same call on data
# raises: torch's math on them took an integer mask and keys of another
# dtype, and said E disagreeing in torch's words; key heads of 0 beside a
# query's 4 raised ZeroDivisionError.
for label, L, mk in (("int_mask", None, lambda L: {"attn_mask": torch.ones(L, 5, dtype=torch.int64)}),
                     ("float32_keys", None, lambda L: {"key": torch.randn(2, 2, 5, 4)}),
                     ("other_E", None, lambda L: {"key": torch.randn(2, 2, 5, 6, dtype=D)}),
                     ("mask_rank_6", None, lambda L: {"attn_mask": torch.ones(1, 1, 1, 2, L, 5, dtype=torch.bool)}),
                     # key heads of 0 beside a query's 2, as 3 beside 2 on data (0 on both sides
                     # compared the size-0 path with itself)
                     ("no_key_heads", None, lambda L: {"key": torch.randn(2, 3 if L else 0, 5, 4, dtype=D),
                                                       "value": torch.randn(2, 3 if L else 0, 5, 3, dtype=D)})):
    said = {}
    for shape_label, L in (("data", 3), ("size_0", 0)):
        args = {"query": torch.randn(2, 2, L, 4, dtype=D), "key": torch.randn(2, 2, 5, 4, dtype=D),
                "value": torch.randn(2, 2, 5, 3, dtype=D)}
        args.update(mk(L))
        try:
            at.scaled_dot_product_attention(**args)
            said[shape_label] = "no error"
        except Exception as e:  # noqa: BLE001 -- which error is what is checked
            said[shape_label] = type(e).__name__
    check("torch_size_0_wrong_input_%s_as_on_data" % label,
          said["data"] == said["size_0"] and said["data"] in ("MaskError", "DtypeError", "ShapeError", "RankError",
                                                              "HeadsError"), str(said))
# A 0 beside a 1, or beside a size it cannot broadcast against: the stand-ins
# made each 0 a 1, which passed the check, and torch's math then raised its
# own RuntimeError; the library's error, as on data (E 1 vs 0 as E 2 vs 3).
for label, shapes, mask, want in (
        ("E_1_vs_0", ((2, 2, 3, 1), (2, 2, 5, 0), (2, 2, 5, 3)), None, attn.ShapeError),
        ("S_1_vs_0", ((2, 2, 3, 4), (2, 2, 1, 4), (2, 2, 0, 3)), None, attn.ShapeError),
        ("batch_3_vs_0", ((3, 2, 3, 4), (0, 2, 5, 4), (0, 2, 5, 3)), None, attn.BroadcastError),
        ("mask_rows_0_vs_L_3", ((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 4)), torch.zeros(0, 0, dtype=torch.bool),
         attn.MaskError)):
    try:
        at.scaled_dot_product_attention(*(torch.randn(*sh, dtype=D) for sh in shapes), attn_mask=mask)
        said = "no error"
    except Exception as e:  # noqa: BLE001 -- which error is what is checked
        said = "%s: %s" % (type(e).__name__, e)
    check("torch_size_0_%s_is_the_library_error" % label, said.startswith(want.__name__ + ":"), said)
# The error says what the check took each size as: "L and S, taken as 1"
# was said even where the mask kept L, or where the keys' and values' S
# disagreed and were kept.
for label, shapes, mask, want in (
        ("mask_keeps_L", ((2, 2, 3, 4), (2, 2, 0, 4), (2, 2, 0, 4)), torch.zeros(0, 0, dtype=torch.bool),
         "(checked with each size of 0 taken as 5, S as 1: query (2, 2, 3, 4), key (2, 2, 0, 4), value (2, 2, 0, 4), "
         "attn_mask (0, 0))"),
        ("S_kept", ((2, 2, 3, 4), (2, 2, 1, 4), (2, 2, 0, 3)), None,
         "(checked with each size of 0 taken as 5, L as 1: query (2, 2, 3, 4), key (2, 2, 1, 4), value (2, 2, 0, 3))")):
    try:
        at.scaled_dot_product_attention(*(torch.randn(*sh, dtype=D) for sh in shapes), attn_mask=mask)
        said = "no error"
    except attn.AttnError as e:
        said = str(e)
    check("torch_size_0_error_says_what_was_taken_%s" % label, said.endswith(want), said)
# Heads of 0 where torch's math gives an empty output: a query of one head
# broadcast over keys of 0 heads (HeadsError), and a query of 0 heads over
# keys of 2 with enable_gqa (repeat_interleave by 0 // 2; a builtin
# RuntimeError from the matmul of 0 heads by 2). Against torch's matmul math,
# the keys repeated as torch's enable_gqa repeats them; gradients of zeros.
def torch_math_heads(q, k, v):
    if k.shape[-3] and k.shape[-3] != q.shape[-3] and q.shape[-3] % k.shape[-3] == 0:
        k, v = (t.repeat_interleave(q.shape[-3] // k.shape[-3], -3) for t in (k, v))
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, -1) @ v


for label, shapes, kw in (("query_1_keys_0", ((2, 1, 3, 4), (2, 0, 5, 4), (2, 0, 5, 3)), {}),
                          ("query_0_keys_2_gqa", ((2, 0, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)), {"enable_gqa": True})):
    hq, hk, hv = (torch.randn(*sh, dtype=D, requires_grad=True) for sh in shapes)
    try:
        ho = at.scaled_dot_product_attention(hq, hk, hv, **kw)
        ho.sum().backward()
        want = torch_math_heads(hq.detach(), hk.detach(), hv.detach())
        why = "" if (ho.shape == want.shape == (2, 0, 3, 3) and torch.equal(ho.detach(), want) and
                     all(t.grad is not None and t.grad.shape == t.shape and not t.grad.any() for t in (hq, hk, hv))) \
            else "out %s, torch's math %s" % (tuple(ho.shape), tuple(want.shape))
    except Exception as e:  # noqa: BLE001 -- which error is what is checked
        why = "%s: %s" % (type(e).__name__, e)
    check("torch_size_0_heads_%s_as_torch_math" % label, not why, why)
try:  # without enable_gqa, 0 heads over 2 are still refused, by torch's rule
    at.scaled_dot_product_attention(torch.randn(2, 0, 3, 4, dtype=D), torch.randn(2, 2, 5, 4, dtype=D),
                                    torch.randn(2, 2, 5, 3, dtype=D))
    why = "no error"
except attn.HeadsError as e:
    why = "" if "pass enable_gqa=True" in str(e) else str(e)
check("torch_size_0_heads_query_0_keys_2_needs_enable_gqa", not why, why)
# dropout_p outside [0, 1] is the library's OptionError whatever the shapes:
# an input of size 0 went through torch's dropout, which raised
# RuntimeError for NaN where the same call on data gave OptionError.
for label, p_ in (("above_1", 1.5), ("nan", float("nan")), ("negative", -0.25)):
    said = {}
    for shape_label, zq in (("data", torch.randn(2, 3, 4, dtype=D)), ("size_0", torch.randn(2, 0, 4, dtype=D))):
        try:
            at.scaled_dot_product_attention(zq, torch.randn(2, 5, 4, dtype=D), torch.randn(2, 5, 4, dtype=D),
                                            dropout_p=p_)
            said[shape_label] = "no error"
        except Exception as e:  # noqa: BLE001 -- which error is what is checked
            said[shape_label] = "%s: %s" % (type(e).__name__, e)
    want = "OptionError: dropout_p is %s; it must be from 0 to 1" % ("%g" % p_)
    check("torch_dropout_p_%s_refused_for_every_shape" % label, said == {"data": want, "size_0": want}, str(said))
# dropout_p = 1, as PyTorch's dropout takes it: every weight dropped, so the
# output and every gradient are zeros, as torch's own math gives them; on
# data and at size 0 alike, through the adapter, attn.sdpa and a plan.
for shape_label, L in (("data", 3), ("size_0", 0)):
    xs = [torch.randn(2, n, 4, dtype=D, requires_grad=True) for n in (L, 5, 5)]
    ys = [x.detach().clone().requires_grad_() for x in xs]
    got = at.scaled_dot_product_attention(*xs, dropout_p=1.0)
    want = torch.nn.functional._scaled_dot_product_attention(*ys, None, 1.0, False)[0]
    dout = torch.randn(want.shape, dtype=D)
    got.backward(dout), want.backward(dout)
    check("torch_dropout_p_1_zeros_as_torch_%s" % shape_label,
          torch.equal(got, want) and not got.any() and all(torch.equal(a.grad, b.grad) and not a.grad.any()
                                                           for a, b in zip(xs, ys)),
          "out %s, grads %s" % (float(got.abs().sum()), [None if a.grad is None else float(a.grad.abs().sum())
                                                         for a in xs]))
p1 = attn.sdpa(q0, k0, v0, causal="bottom-right", dropout_p=1.0, seed=4)
check("sdpa_and_plan_dropout_p_1_zeros", p1.shape == q0.shape[:-1] + v0.shape[-1:] and not p1.any() and
      not attn.Plan(q0, k0, v0, causal="bottom-right", dropout_p=1.0, seed=4).run(q0, k0, v0).any())
zv = torch.randn(1, 1, 5, 3, dtype=D)
zo = at.scaled_dot_product_attention(torch.zeros(1, 1, 2, 0, dtype=D), torch.zeros(1, 1, 5, 0, dtype=D), zv)
check("torch_size_0_key_features_mean_of_v", torch.allclose(zo, zv.mean(-2, keepdim=True).expand(1, 1, 2, 3)))
# A gradient taken with create_graph=True and differentiated again (a
# gradient penalty): the library has no second derivative, and the
# gradient came back as a constant when dout needed none (out.sum()), so
# the penalty's share of q.grad was 0, silently. It raises now; the first
# gradient itself is still there, with create_graph=True too.
for label, fn in (("sdpa", lambda a: at.scaled_dot_product_attention(a, k.detach(), v.detach(), enable_gqa=True)),
                  ("mha", lambda a: mha(a, a, a)[0])):
    gx = (q if label == "sdpa" else tx).detach().clone().requires_grad_()
    g1, = torch.autograd.grad(fn(gx).sum(), gx, create_graph=True)
    g0, = torch.autograd.grad(fn(gx).sum(), gx)
    try:
        (fn(gx).pow(2).sum() + (g1.norm() - 1) ** 2).backward()
        why = "no error: the penalty's gradient was dropped"
    except RuntimeError as e:
        why = "" if "differentiable once" in str(e) else str(e)
    check("torch_second_derivative_refused_%s" % label, not why and torch.equal(g1.detach(), g0), why)
    try:  # by torch.autograd.grad too, which must reach the refusing node through the inputs
        torch.autograd.grad(torch.autograd.grad(fn(gx).sum(), gx, create_graph=True)[0].sum(), gx)
        why = "no error"
    except RuntimeError as e:
        why = "" if "differentiable once" in str(e) else str(e)
    check("torch_second_derivative_refused_by_autograd_grad_%s" % label, not why, why)
bm = torch.rand(9, 9) < 0.7
bm[:, 0] = True
check("gradcheck_bool_mask", torch.autograd.gradcheck(
    lambda a, b, c: at.scaled_dot_product_attention(a, b, c, attn_mask=bm, enable_gqa=True), (q, k, v)))



def autograd_f64(q, k, v, mask, is_causal):
    """PyTorch float64 attention and autograd on the values of the given
    tensors: (out, [dq, dk, dv, dmask]) for the gradient of out.sum()."""
    xs = [t.detach().double().requires_grad_() for t in (q, k, v, mask)]
    qq, kk, vv = broadcast_heads(*xs[:3])
    s = qq @ kk.transpose(-1, -2) / qq.shape[-1] ** 0.5 + xs[3]
    s = s.masked_fill(~causal_allowed(s.shape[-2], s.shape[-1], int(is_causal)), float("-inf"))
    out = s.softmax(-1) @ vv
    out.sum().backward()
    return out.detach(), [x.grad for x in xs]


# float16 tensors are computed in float32 and come back float16: the output
# and every gradient. Rounding to float16 adds at most 2^-11 of each value.
q16, k16, v16, m16 = (torch.randn(s).half().requires_grad_() for s in ((2, 4, 9, 8), (2, 2, 9, 8), (2, 2, 9, 5), (9, 9)))
for causal in (False, True):
    out16 = at.scaled_dot_product_attention(q16, k16, v16, attn_mask=m16, is_causal=causal, enable_gqa=True)
    out16.sum().backward()
    ref, ref_grads = autograd_f64(q16, k16, v16, m16, causal)
    grads = [t.grad for t in (q16, k16, v16, m16)]
    dtypes = [t.dtype for t in [out16] + grads]
    worst = max([rel(out16.detach(), ref)] + [rel(g, r) for g, r in zip(grads, ref_grads)])
    check("torch_float16_in_float16_out_%s" % ("causal" if causal else "mask"),
          dtypes == [torch.float16] * 5 and worst <= 2 ** -11 + 1e-4, "dtypes %s, error %.3g" % (dtypes, worst))
    for t in (q16, k16, v16, m16):
        t.grad = None
# bfloat16, which NumPy cannot view, goes to the library by data pointer: the
# output and every gradient come back bfloat16, each within one bfloat16
# rounding (2^-8 of the largest value) of float64 autograd on the same values,
# plus the f32 computation's share and out's own rounding inside the backward
# (allowed together: 2^-8 of the largest value again).
qb, kb, vb, mb = (torch.randn(s).bfloat16().requires_grad_() for s in ((2, 4, 9, 8), (2, 2, 9, 8), (2, 2, 9, 5), (9, 9)))
for causal in (False, True):
    outb = at.scaled_dot_product_attention(qb, kb, vb, attn_mask=mb, is_causal=causal, enable_gqa=True)
    outb.sum().backward()
    ref, ref_grads = autograd_f64(qb, kb, vb, mb, causal)
    grads = [t.grad for t in (qb, kb, vb, mb)]
    dtypes = [t.dtype for t in [outb] + grads]
    worst = max([rel(outb.detach().double(), ref)] + [rel(g.double(), r) for g, r in zip(grads, ref_grads)])
    check("torch_bfloat16_by_pointer_%s" % ("causal" if causal else "mask"),
          dtypes == [torch.bfloat16] * 5 and worst <= 2 * 2 ** -8, "dtypes %s, error %.3g" % (dtypes, worst))
    for t in (qb, kb, vb, mb):
        t.grad = None
q32t = q16.detach().float().requires_grad_()
out = at.scaled_dot_product_attention(q32t, k16, v16, enable_gqa=True)
out.sum().backward()
check("torch_float32_query_float16_kv", out.dtype == torch.float32 and q32t.grad.dtype == torch.float32 and
      k16.grad.dtype == torch.float16 and v16.grad.dtype == torch.float16)
# bfloat16 keys or values beside a float32 query, which attn_sdpa takes: NumPy
# cannot view them, and they were refused ("convert it to float32"). By
# pointer now: out, dq and a float mask's gradient float32, within the f32
# kernels' 2e-5 of float64 autograd on the same values; dk and dv in their
# own dtype, the library's float32 gradient rounded once (2^-8 of the
# largest value for bfloat16, 2^-11 for float16, on top).
for kvd, label in (((torch.bfloat16, torch.bfloat16), "bfloat16_kv"),
                   ((torch.bfloat16, torch.float16), "bfloat16_k_float16_v")):
    for causal in (False, True):
        q32b = torch.randn(2, 4, 9, 8, requires_grad=True)
        kx, vx = (torch.randn(sh).to(d).requires_grad_() for sh, d in (((2, 2, 9, 8), kvd[0]), ((2, 2, 9, 5), kvd[1])))
        m32 = torch.randn(9, 9, requires_grad=True)
        try:
            outx = at.scaled_dot_product_attention(q32b, kx, vx, attn_mask=m32, is_causal=causal, enable_gqa=True)
            outx.sum().backward()
            ref, ref_grads = autograd_f64(q32b, kx, vx, m32, causal)
            grads = [q32b.grad, kx.grad, vx.grad, m32.grad]
            bounds = [2e-5, 2e-5, 2 ** -8 + 2e-5, (2 ** -8 if kvd[1] == torch.bfloat16 else 2 ** -11) + 2e-5, 2e-5]
            errs = [rel(outx.detach().double(), ref)] + [rel(g.double(), r) for g, r in zip(grads, ref_grads)]
            dtypes = [t.dtype for t in [outx] + grads]
            why = "" if dtypes == [torch.float32, torch.float32, kvd[0], kvd[1], torch.float32] and all(
                e <= b for e, b in zip(errs, bounds)) else "dtypes %s, errors %s" % (dtypes, ["%.3g" % e for e in errs])
        except attn.AttnError as e:
            why = "%s: %s" % (type(e).__name__, e)
        check("torch_float32_query_%s_%s" % (label, "causal" if causal else "mask"), not why, why)

# Heads of size 1 broadcast as torch's matmuls broadcast them: a query of one
# head (or of rank 2) over keys of three, keys of one head beside values of
# three. The library groups query heads over key heads and refused these
# (HeadsError); torch's math takes them.
for hname, shapes in (("query_one_head", ((2, 1, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6))),
                      ("query_rank_2", ((5, 8), (2, 3, 7, 8), (2, 3, 7, 6))),
                      ("key_one_head", ((2, 3, 5, 8), (2, 1, 7, 8), (2, 3, 7, 6))),
                      ("value_one_head", ((2, 3, 5, 8), (2, 3, 7, 8), (2, 1, 7, 6)))):
    hq, hk, hv = (torch.randn(s_, dtype=D, requires_grad=True) for s_ in shapes)
    try:
        ho = at.scaled_dot_product_attention(hq, hk, hv)
        ho.sum().backward()
        got = [ho.detach()] + [t.grad.clone() for t in (hq, hk, hv)]
        for t in (hq, hk, hv):
            t.grad = None
        (torch.softmax(hq @ hk.transpose(-2, -1) / 8 ** 0.5, -1) @ hv).sum().backward()
        want = [torch.softmax(hq @ hk.transpose(-2, -1) / 8 ** 0.5, -1).detach() @ hv.detach()] + \
            [t.grad for t in (hq, hk, hv)]
        worst = max(rel(a, b) if a.shape == b.shape else float("inf") for a, b in zip(got, want))
        why = "" if worst <= 1e-12 else "error %.3g" % worst
    except attn.AttnError as e:
        why = "%s: %s" % (type(e).__name__, e)
    check("torch_broadcast_heads_%s" % hname, not why, why)


def mha_case(name, **kw):
    E, H = 16, 4
    ref = torch.nn.MultiheadAttention(E, H, dtype=D, **kw)
    mine = at.MultiheadAttention(E, H, dtype=D, **kw)
    mine.load_state_dict(ref.state_dict())
    bf = kw.get("batch_first", False)
    kd, vd = kw.get("kdim") or E, kw.get("vdim") or E
    shape = lambda n, d: (3, n, d) if bf else (n, 3, d)  # noqa: E731
    x = torch.randn(shape(5, E), dtype=D)
    key, val = torch.randn(shape(7, kd), dtype=D), torch.randn(shape(7, vd), dtype=D)
    kpm = torch.rand(3, 7) < 0.3
    kpm[:, 0] = False
    xs = [[t.clone().requires_grad_() for t in (x, key, val)] for _ in range(2)]
    (a, wa), (b, wb) = (mod(*xx, key_padding_mask=kpm) for mod, xx in ((ref, xs[0]), (mine, xs[1])))
    g = torch.randn_like(a)
    a.backward(g), b.backward(g)
    named = dict(mine.named_parameters())
    worst = max([rel(b.detach(), a.detach()), rel(wb, wa.detach())] +
                [rel(t2.grad, t1.grad) for t1, t2 in zip(xs[0], xs[1])] +
                [rel(named[n].grad, p.grad) for n, p in ref.named_parameters()])
    check("mha_state_dict_%s" % name, worst <= 1e-11, "error %.3g" % worst)


mha_case("packed")
mha_case("separate_kdim_vdim_batch_first", kdim=6, vdim=3, batch_first=True)
mha_case("bias_kv_zero_attn_no_bias", bias=False, add_bias_kv=True, add_zero_attn=True)

# Float masks of another float dtype than the inputs' (float64, float16 or
# bfloat16 beside a float32 module), which torch's module takes: they were a
# MaskError (bfloat16: a DtypeError, "convert it to float32"). Now torch's
# output within the f32 bound, and bitwise the same call with the masks
# converted by the caller; the backward runs.
ref32 = torch.nn.MultiheadAttention(16, 4)
mine32 = at.MultiheadAttention(16, 4)
mine32.load_state_dict(ref32.state_dict())
x32 = torch.randn(5, 3, 16)
kpm64, am64 = torch.randn(3, 5, dtype=D), torch.randn(5, 5, dtype=D)
mask_cases = [(mdt, which) for mdt in (torch.float64, torch.float16, torch.bfloat16)
              for which in ("key_padding_mask", "attn_mask")]  # one at a time: torch 1.13 takes no float pair
for mdt, which in mask_cases:
    given = {which: (kpm64 if which == "key_padding_mask" else am64).to(mdt)}
    xx = x32.clone().requires_grad_()
    try:
        got, _ = mine32(xx, xx, xx, **given)
        got.sum().backward()
        want, _ = ref32(x32, x32, x32, **given)
        same, _ = mine32(x32, x32, x32, **{which: given[which].float()})
        why = "" if (rel(got.detach(), want.detach()) <= 1e-5 and torch.equal(got.detach(), same.detach()) and
                     xx.grad is not None) else "error %.3g" % rel(got.detach(), want.detach())
    except attn.AttnError as e:
        why = "%s: %s" % (type(e).__name__, e)
    check("mha_%s_%s_float32_inputs" % (str(mdt).replace("torch.", ""), which), not why, why)

# A module .half()'d beside float32 inputs (float16 parameters, which the
# library reads): forward and backward. The backward gave float16 gradient
# arrays, which the library refuses (ShapeError); each comes back float16
# now, within one float16 rounding of float64 autograd on the same values.
def modules_holding(dtype):
    """torch's float64 module and ours with the same weights, ours cast to
    dtype and torch's holding the values ours then holds."""
    ref = torch.nn.MultiheadAttention(16, 4, dtype=D)
    mine = at.MultiheadAttention(16, 4)
    mine.load_state_dict({n: t.float() for n, t in ref.state_dict().items()})
    mine.to(dtype)
    with torch.no_grad():
        for t in ref.parameters():
            t.copy_(t.to(dtype).double())
    return ref, mine


ref16, mine16 = modules_holding(torch.float16)
x64 = torch.randn(5, 3, 16, dtype=D, requires_grad=True)
x32 = x64.detach().float().requires_grad_()
try:
    (a, _), (b, _) = ref16(x64, x64, x64), mine16(x32, x32, x32)
    a.sum().backward(), b.sum().backward()
    named = dict(mine16.named_parameters())
    worst = max(rel(named[n].grad.double(), p.grad) for n, p in ref16.named_parameters())
    dtypes = {str(named[n].grad.dtype) for n, _ in ref16.named_parameters()}
    why = "" if (dtypes == {"torch.float16"} and rel(b.detach(), a.detach()) <= 1e-6 and
                 rel(x32.grad, x64.grad) <= 1e-6 and worst <= 2 ** -11) else \
        "dtypes %s, out %.3g, dx %.3g, dparams %.3g" % (dtypes, rel(b.detach(), a.detach()), rel(x32.grad, x64.grad),
                                                       worst)
except attn.AttnError as e:
    why = "%s: %s" % (type(e).__name__, e)
check("mha_float16_parameters_float32_inputs_backward", not why, why)
# The same with bfloat16 parameters, which the library takes in an f32 layer
# (attn.h, attn_mha: checkpoints as they ship) but NumPy cannot view: the
# module refused them ("convert it to float32"). Passed by pointer now. A
# bf16 weight's product rounds its input to bf16 (u = 2^-8), once in each
# of the two products a value goes through, and each gradient is rounded to
# bf16 once more: within 2^-6 of float64 autograd on the same bf16 values,
# relative to the largest, and the gradients bfloat16.
refb, mineb = modules_holding(torch.bfloat16)
x32 = x64.detach().float().requires_grad_()
x64.grad = None
try:
    (a, wa), (b, wb) = refb(x64, x64, x64), mineb(x32, x32, x32)
    a.sum().backward(), b.sum().backward()
    named = dict(mineb.named_parameters())
    worst = max(rel(named[n].grad.double(), p.grad) for n, p in refb.named_parameters())
    dtypes = {str(named[n].grad.dtype) for n, _ in refb.named_parameters()}
    errs = (rel(b.detach().double(), a.detach()), rel(x32.grad.double(), x64.grad), worst)
    why = "" if dtypes == {"torch.bfloat16"} and b.dtype == torch.float32 and max(errs) <= 2 ** -6 else \
        "dtypes %s, out %.3g, dx %.3g, dparams %.3g" % ((dtypes,) + errs)
except (attn.AttnError, TypeError) as e:
    why = "%s: %s" % (type(e).__name__, e)
check("mha_bfloat16_parameters_float32_inputs_backward", not why, why)
# A float attn_mask that needs a gradient (a learned bias, which torch's
# module trains): attn_mha_backward has none, and the backward gave None
# silently. It raises now; the same mask detached trains the rest.
mm = at.MultiheadAttention(16, 4, dtype=D)
xm = torch.randn(5, 3, 16, dtype=D, requires_grad=True)
bias = torch.randn(5, 5, dtype=D, requires_grad=True)
try:
    mm(xm, xm, xm, attn_mask=bias)[0].sum().backward()
    why = "no error; the mask's gradient is %s" % (bias.grad,)
except RuntimeError as e:
    why = "" if "no gradient for a float attn_mask" in str(e) else str(e)
xm.grad = None
mm(xm, xm, xm, attn_mask=bias.detach())[0].sum().backward()
check("mha_float_mask_gradient_refused_not_dropped", not why and xm.grad is not None, why)

# A small model trains with attn.torch's attention: learn a teacher head's
# query and key projections from its outputs.
torch.manual_seed(1)
X = torch.randn(64, 6, 8)
with torch.no_grad():
    teacher = torch.nn.Linear(8, 16, bias=False)
    tq_, tk_ = teacher(X * 2).chunk(2, -1)
    Y = at.scaled_dot_product_attention(tq_, tk_, X)
proj = torch.nn.Linear(8, 16, bias=False)
opt = torch.optim.Adam(proj.parameters(), lr=0.05)
losses = []
for step in range(80):
    qq, kk = proj(X * 2).chunk(2, -1)
    loss = (at.scaled_dot_product_attention(qq, kk, X) - Y).pow(2).mean()
    opt.zero_grad(), loss.backward(), opt.step()
    losses.append(loss.item())
check("a_model_trains_with_attn_torch", losses[-1] < 0.3 * losses[0], "loss %.4f -> %.4f" % (losses[0], losses[-1]))

# --- fork after the pool has started ------------------------------------------
# A child has the parent's memory but none of its threads: its threaded call
# must start a pool of its own (and not wait forever for the parent's
# workers). The f32 shape spans several work items, so that the pool runs it.
attn.set_num_threads(3)
fq, fk, fv = f((2, 1600, 32)).astype(np.float32), f((2, 700, 32)).astype(np.float32), f((2, 700, 16)).astype(np.float32)
fork_want = attn.sdpa(fq, fk, fv, causal=True)  # starts the pool, in the parent


def fork_call(i=0):
    """What each child computes: the parent's call (i selects a head, for the DataLoader)."""
    return attn.sdpa(fq, fk, fv, causal=True)


def os_fork_result(timeout=60):
    """fork_call() in a child of os.fork, through a file; (result, why not)."""
    path = os.path.join(scratch_dir("attn-fork-"), "out.npy")
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: an alarm ends it if it hangs
        code = 1
        try:
            signal.alarm(30)
            np.save(path, fork_call())
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None, "the child still ran after %d s" % timeout
    if os.WIFSIGNALED(status):
        return None, "the child died of signal %d%s" % (os.WTERMSIG(status),
                                                       " (its alarm: it hung)" if os.WTERMSIG(status) == signal.SIGALRM else "")
    if os.WEXITSTATUS(status):
        return None, "the child failed"
    return np.load(path), ""


got, why = os_fork_result()
check("os_fork_child_gets_parents_result_bitwise", got is not None and got.tobytes() == fork_want.tobytes(),
      why or "the result differs")
ctx = multiprocessing.get_context("fork")
with ctx.Pool(2) as workers:
    try:
        got, why = workers.apply_async(fork_call).get(timeout=60), ""
    except multiprocessing.TimeoutError:
        got, why = None, "no answer in 60 s"
    workers.terminate()
check("multiprocessing_fork_child_gets_parents_result_bitwise", got is not None and
      got.tobytes() == fork_want.tobytes(), why or "the result differs")


class ForkedAttention(torch.utils.data.Dataset):
    """Each item: attn.torch's attention over one head of the fork shapes."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        h = i % 2
        return at.scaled_dot_product_attention(*(torch.from_numpy(a[h:h + 1]) for a in (fq, fk, fv)), is_causal=True)


try:
    items = list(torch.utils.data.DataLoader(ForkedAttention(), batch_size=None, num_workers=2,
                                             multiprocessing_context="fork", timeout=60))
    why = ""
except RuntimeError as e:
    items, why = [], str(e)
check("dataloader_fork_workers_get_parents_result_bitwise", len(items) == 4 and all(
    t.numpy().tobytes() == fork_want[i % 2:i % 2 + 1].tobytes() for i, t in enumerate(items)),
    why or "the results differ")
attn.set_num_threads(0)

# --- attn.teach ---------------------------------------------------------------
for args, kw in ((["the cat sat on the mat"], {}), (["--causal", "--heads", "1", "my dog chased a ball in the park"],
                                                     {"causal": True}),
                 (["--positions", "rope", "the quick brown fox jumped over the lazy dog"], {"positions": "rope"}),
                 (["--tied", "--no-scale", "the cat sat"], {"tied": True, "scale": False}),
                 (["--source", "the dog sat", "the cat sat"], {"source": "the dog sat"}),
                 (["--mode", "dot", "the cat sat"], {"mode": "dot"})):
    cli = subprocess.run([os.path.join(BUILD, "attn"), "explain", "--json"] + args, capture_output=True, text=True)
    if cli.returncode:
        check("explain_%s" % "_".join(kw) or "plain", False, cli.stderr.strip())
        continue
    got = attn.teach.explain(args[-1], **kw)
    check("explain_equals_cli_json_%s" % ("_".join(kw) or "plain"), got == json.loads(cli.stdout))
shown = attn.teach.explain("the cat sat on the mat")
page = shown._repr_html_()
check("explain_html_inline_svg", page.count("<svg") == sum(1 for n in attn.teach.MATRICES if shown.get(n)) >= 11 and "http" not in page.replace("http://www.w3.org/2000/svg", ""))
cli = json.loads(subprocess.run([os.path.join(BUILD, "attn"), "scaling", "--json", "--dims", "16,256"],
                                capture_output=True, text=True).stdout)
rows = attn.teach.scaling(dims=(16, 256))
cli_rows = cli["rows"] if isinstance(cli, dict) else cli
same = all(abs(a[key] - b[key]) <= 1e-12 * max(1, abs(b[key])) for a, b in zip(rows, cli_rows)
           for key in ("top_raw", "top_scaled", "spread_raw", "grad_mean_raw"))
check("scaling_equals_cli_json", same and len(rows) == len(cli_rows) == 2)
# Arguments that ctypes or int() changed silently: d = 2**32 + 16 measured
# d = 16 (and said so in the row), 16.7 measured 16, a NUL ended the
# sentence there (the words after it never read).
check_raises("teach", [
    ("scaling_d_past_int", "ArgumentError", "d is 4294967312", lambda: attn.teach.scaling(dims=(2 ** 32 + 16,))),
    ("scaling_queries_past_int", "ArgumentError", "queries is", lambda: attn.teach.scaling(dims=(16,),
                                                                                           queries=2 ** 32 + 10)),
    ("scaling_d_float", "TypeError", "d must be an integer", lambda: attn.teach.scaling(dims=(16.7,))),
    ("scaling_seed_past_uint64", "ArgumentError", "seed is", lambda: attn.teach.scaling(dims=(16,), seed=2 ** 64)),
    ("explain_nul", "TokenError", "NUL", lambda: attn.teach.explain("the cat\0 xyzzy")),
    ("explain_source_nul", "TokenError", "NUL", lambda: attn.teach.explain("the cat", source="the\0 xyzzy")),
    ("explain_bytes", "TypeError", "sentence must be a str", lambda: attn.teach.explain(b"the cat")),
    ("scaling_dims_none", "TypeError", "dims must be a list", lambda: attn.teach.scaling(dims=None)),
    # a string was true: causal="false" explained the causal head
    ("explain_causal_string", "TypeError", "causal must be a bool, not str",
     lambda: attn.teach.explain("the cat", causal="false")),
    ("explain_scale_string", "TypeError", "scale must be a bool, not str",
     lambda: attn.teach.explain("the cat", scale="no")),
    # the library reads "" as no source: the sentence attended to itself,
    # where `attn explain --source ""` refuses it
    ("explain_source_empty", "TokenError", "the source: the sentence has no words",
     lambda: attn.teach.explain("the cat", source="")),
    ("explain_head_list", "OptionError", "head is ['wired']", lambda: attn.teach.explain("the cat", head=["wired"])),
    # options the library computes without, as `attn explain` refuses them
    # together: each came back as the explanation without it
    ("explain_tied_mode_dot", "OptionError", "tied=True ties W_K to W_Q: mode 'dot' has no projections",
     lambda: attn.teach.explain("the cat", tied=True, mode="dot")),
    ("explain_random_head_mode_average", "OptionError", "head 'random' picks W_Q, W_K and W_V: mode 'average'",
     lambda: attn.teach.explain("the cat", head="random", mode="average")),
    ("explain_scale_by_d_model_no_scale", "OptionError", "not with scale=False or mode 'dot' or 'average' (given "
     "scale=False)", lambda: attn.teach.explain("the cat", scale_by="d_model", scale=False)),
    ("explain_scale_by_d_model_mode_dot", "OptionError", "(given mode 'dot')",
     lambda: attn.teach.explain("the cat", scale_by="d_model", mode="dot")),
])
# ... and the command refuses each of them alike (usage errors, exit 2)
for label, opts in (("tied_mode_dot", ["--tied", "--mode", "dot"]), ("random_head_mode_average",
                                                                      ["--random-head", "--mode", "average"]),
                    ("scale_by_d_model_no_scale", ["--scale-by", "d_model", "--no-scale"]),
                    ("scale_by_d_model_mode_dot", ["--scale-by", "d_model", "--mode", "dot"])):
    cli = subprocess.run([os.path.join(BUILD, "attn"), "explain"] + opts + ["the", "cat"], capture_output=True,
                         text=True)
    check("explain_cli_refuses_%s_as_python" % label, cli.returncode == 2, "exit %d: %s" % (cli.returncode,
                                                                                         cli.stderr.strip()))
check("scaling_negative_seed_as_uint64", attn.teach.scaling(dims=(16,), queries=50, seed=-1)[0] ==
      attn.teach.scaling(dims=(16,), queries=50, seed=2 ** 64 - 1)[0])
try:
    import matplotlib
    matplotlib.use("Agg")
    fig = rows.plot()
    check("scaling_plot", len(fig.axes) == 2)
except ImportError:
    print("skip scaling_plot: matplotlib is not installed")


# --- finding the library --------------------------------------------------------
def import_in(env, where):
    code = "import attn; print(attn.version(), attn.library_path())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=where,
                          env=dict({k: v for k, v in os.environ.items() if k not in ("ATTN_LIBRARY", "PYTHONPATH")},
                                   **env))


tmp = scratch_dir("attn-py-")
site = os.path.join(tmp, "site")
pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--target", site,
                      os.path.join(HERE, "..", "python")], capture_output=True, text=True)
check("pip_install_offline", pip.returncode == 0, pip.stderr.strip()[-300:])
lib = os.path.join(BUILD, "libattn.so")
res = import_in({"PYTHONPATH": site, "ATTN_LIBRARY": lib}, tmp)
check("loads_from_ATTN_LIBRARY", res.returncode == 0 and lib in res.stdout, res.stderr.strip()[-300:])
prefix = os.path.join(tmp, "prefix")
inst = subprocess.run(["make", "-s", "install", "PREFIX=" + prefix, "BUILD=" + BUILD], capture_output=True, text=True,
                      cwd=os.path.join(HERE, ".."))
res = import_in({"PYTHONPATH": site, "PKG_CONFIG_PATH": os.path.join(prefix, "lib", "pkgconfig")}, tmp)
check("loads_from_an_installed_prefix", inst.returncode == 0 and res.returncode == 0 and prefix in res.stdout,
      (inst.stderr + res.stderr).strip()[-300:])
res = import_in({"PYTHONPATH": site, "ATTN_LIBRARY": os.path.join(tmp, "nowhere", "libattn.so")}, tmp)
check("missing_library_says_where_it_looked", res.returncode != 0 and "libattn.so not found" in res.stderr and
      "ATTN_LIBRARY" in res.stderr, res.stderr.strip()[-300:])
with open(os.path.join(tmp, "old.c"), "w") as fh:
    fh.write('const char *attn_version(void) { return "0.1.7"; }\nvoid attn_toy_explain_options_default(void) {}\n')
cc = subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(tmp, "libold.so"), os.path.join(tmp, "old.c")],
                    capture_output=True, text=True)
res = import_in({"PYTHONPATH": site, "ATTN_LIBRARY": os.path.join(tmp, "libold.so")}, tmp)
check("mismatched_library_names_its_version", cc.returncode == 0 and res.returncode != 0 and "0.1.7" in res.stderr,
      res.stderr.strip()[-300:])
check("package_version_is_the_headers", attn.__version__ == attn.version())

print("# python binding: %d passed, %d failed" % (r.passed, r.failed))
sys.exit(1 if r.failed else 0)
