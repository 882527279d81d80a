"""test_kv_pages_python.py -- attn.KVPages, the paged KV cache from Python
(python/attn/kv_pages.py, through ctypes):

- a random program of create, fork, append (several sequences per call),
  truncate, free and attend on a small pool, float32, float16 and bfloat16
  storage, pages of 16 and 256: after every step each sequence's gather()
  equals a NumPy copy kept by the test, bitwise, and the pool's page counts
  add up; attend() against PyTorch float64 attention over the copy (f32
  bound: 2e-5 relative), and against attn.sdpa on the copy, bitwise;
- a float16 q attended (float32, float16 and q8 pools): bitwise attend on
  the widened q with out rounded to float16, lse float32; planned
  (q_dtype=np.float16, float32, float16, q8 and q4c pools, a second
  layer's pool too): each run bitwise attend, and PyTorch float64's within
  float16's rounding; a q of the other dtype or a q_dtype not float32 or
  float16 refused;
- forked sequences sharing pages, attended in one call with a mask per
  sequence on 1, 2 and 3 threads: attn.sdpa's rows, bitwise, and PyTorch
  float64's within the f32 bound;
- its errors as exception classes (FullError, ArgumentError, ShapeError,
  DtypeError), each leaving the pool's bytes as they were; ids, lengths,
  offsets and sizes past int64 (ArgumentError) or not integers (TypeError),
  never wrapped to sequence 0; parts of other heads said as the library
  says it; dtype=np.float16 as NumPy spells it; KVCache.lengths assigned
  copied into its own int64 array (or refused), steps of no sequence;
  a step's causal=True, a misspelt parameter or RoPE field refused; None,
  a list or a string where a list, a dtype, a dict or a number goes (plan's
  seqs and q_lengths, a run's pool, dtype, key_dtype, k_scale, mha_step's x,
  params and rope) and 1-D rows of x refused naming the argument; a q,
  x or k of another dtype refused saying what the call takes;
  four Python threads each on its own pool, every attend bitwise attn.sdpa;
- KVCache's own calls (append, attend, view, gather, truncate, length) in
  float32, float16, bfloat16, float64, q8, q4, q4_1, e4m3, e5m2, e4m3 with
  per-head scales, q8 with the Hadamard rotation and q4c keys with a
  residual window: appends of any strides, each followed by an attend
  (GQA 4:2) bitwise a pool's attend on the same positions (one sequence
  per row) and its gather bitwise the pool's; float caches' views NumPy
  views of the cache's memory (read-only) holding the rows appended,
  attend bitwise attn.sdpa on them (lse too); other storages' views the
  dequantized copies gather gives, attend within 0.05 of attn.sdpa on
  them; truncated and grown again as the pool; rank 2 and 3 arrays, an
  empty cache attended (out 0, lse -inf); a full cache, k or q of other
  shapes, heads or dtypes, a mask of another width, causal=True, views
  of a rank that does not fit, truncating past the length refused as the
  library's exception classes, the cache's bytes and length unchanged;
- the layer's step: KVPages.mha_step (attn_mha_paged) against a float64
  NumPy layer (GQA, prompts then decodes), a float64 KVCache's step against
  it within 1e-12 (float64 end to end), KVCache.mha_step
  (attn_mha_cached_batch) over rows of a contiguous cache bitwise equal to
  it, with RoPE and a mask per sequence on 1 and 3 threads, a full row
  refused with the lengths kept; both steps with a sliding window and
  soft-capping on threads of their own within the f32 bound of the float64
  layer with those variants, bitwise each other;
- a paged plan (KVPages.plan, attn_kv_paged_plan_init / _run): its runs
  bitwise attend() on the planned pool and on another pool kept in step
  (same page tables, other values), four threads sharing it (each run
  bitwise attend() on its own q), a q of any strides taken, a q of
  another shape a PlanError, a
  pool of keys stored otherwise (key_dtype, hadamard) a DtypeError, a q4c
  plan's run on a pool of fewer sequences than its ids refused, a run
  after the pool changed (a truncate, then pages taken again) a PlanError;
- a pool of 2 MiB or more (Linux): its memory starts on a 2 MiB boundary and
  its mapping carries MADV_HUGEPAGE (VmFlags "hg" in /proc/self/smaps), and
  it stores and attends as the small pools do; a KVCache of 2 MiB or more
  alike, its steps bitwise a small cache's and within the f32 bound of the
  float64 layer; skip where the platform has no MADV_HUGEPAGE or no
  transparent huge pages.
- the ways back to plain NumPy memory (mmap failing, the advice refused,
  no MADV_HUGEPAGE, not Linux), forced through stand-in modules: exactly
  the bytes asked, zeroed, writable, and a pool on them storing and
  attending bitwise attn.sdpa.
- boolean options (hadamard, head_major, return_lse of the pools, caches,
  plans, attn.sdpa and attn.sdpa_varlen) refusing anything but a bool or a
  NumPy bool (TypeError); pool.memory, cache.memory and a plan's memory
  read-only and not reassignable, a cache's view not made writable; a
  paged plan made without a zeroed q.
- the storage formats as the library lists them (attn_quant_format): each
  one taken as a dtype or key_dtype, the codes the library's, and an
  unknown dtype's message listing them in the library's order.

Usage: test_kv_pages_python.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why"."""
import copy
import ctypes
import mmap
import os
import pickle
import sys
import threading
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
os.environ.setdefault("ATTN_LIBRARY", os.path.join(BUILD, "libattn.so"))  # the build under test
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import attn  # noqa: E402
from seeding import test_seed  # noqa: E402
from torch_attention import Reporter  # noqa: E402

r = Reporter()
rng = np.random.default_rng(test_seed(20261202))


def check(name, cond, why=""):
    r.report(name, "" if cond else (why or "failed"))


def stored(x, dtype):
    """x as the pool stores it, widened back to float32."""
    x = np.asarray(x, np.float32)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return torch.from_numpy(x.copy()).to(torch.bfloat16).to(torch.float32).numpy()
    return x


def torch_attend(q, k, v):
    """PyTorch float64 attention of q (L, Hq, E) over k (Hk, S, E), v (Hk, S, Ev),
    bottom-right causal, GQA by repeat_interleave: out (L, Hq, Ev)."""
    tq = torch.from_numpy(q.astype(np.float64)).transpose(0, 1)
    tk, tv = (torch.from_numpy(a.astype(np.float64)).repeat_interleave(q.shape[1] // a.shape[0], 0) for a in (k, v))
    L, S = tq.shape[1], tk.shape[1]
    s = tq @ tk.transpose(1, 2) / np.sqrt(q.shape[2])
    allowed = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L)
    s = s.masked_fill(~allowed, float("-inf"))
    return (s.softmax(-1) @ tv).transpose(0, 1).numpy()


def program(dtype, P, pages, steps):
    H, E, Ev, Hq = 2, 8, 4, 4
    pool = attn.KVPages(heads=H, key_dim=E, value_dim=Ev, num_pages=pages, max_sequences=5, page_size=P, dtype=dtype)
    copy = {}  # id -> (k (H, n, E), v (H, n, Ev)) as stored
    worst, counts, why = 0.0, {"full": 0, "fork": 0, "attend": 0}, ""
    for step in range(steps):
        op = rng.integers(0, 10)
        live = sorted(copy)
        try:
            if op == 0 or not live:
                if len(live) == 5:
                    try:
                        pool.create()
                        return "create in a full pool succeeded", worst, counts
                    except attn.FullError:
                        counts["full"] += 1
                else:
                    copy[pool.create()] = (np.zeros((H, 0, E), np.float32), np.zeros((H, 0, Ev), np.float32))
            elif op == 1 and len(live) < 5:
                parent = int(rng.choice(live))
                copy[pool.fork(parent)] = tuple(a.copy() for a in copy[parent])
                counts["fork"] += 1
            elif op <= 5:
                seqs = [s for s in live if rng.random() < 0.6]
                ks = [rng.standard_normal((int(rng.integers(0, P + 3)), H, E)).astype(np.float32) for _ in seqs]
                vs = [rng.standard_normal((a.shape[0], H, Ev)).astype(np.float32) for a in ks]
                before = pool.memory.tobytes()
                try:
                    pool.append(seqs, ks, vs)
                except attn.FullError:
                    counts["full"] += 1
                    if pool.memory.tobytes() != before:
                        return "a full append changed the pool", worst, counts
                    continue
                for s, k, v in zip(seqs, ks, vs):
                    ck, cv = copy[s]
                    copy[s] = (np.concatenate([ck, stored(k, dtype).transpose(1, 0, 2)], 1),
                               np.concatenate([cv, stored(v, dtype).transpose(1, 0, 2)], 1))
            elif op <= 6:
                s = int(rng.choice(live))
                n = int(rng.integers(0, copy[s][0].shape[1] + 1))
                pool.truncate(s, n)
                copy[s] = (copy[s][0][:, :n], copy[s][1][:, :n])
            elif op == 7:
                s = int(rng.choice(live))
                pool.free(s)
                del copy[s]
            else:
                seqs = [s for s in live if copy[s][0].shape[1] and rng.random() < 0.7]
                qs = [rng.standard_normal((int(rng.integers(1, 5)), Hq, E)).astype(np.float32) for _ in seqs]
                outs = pool.attend(seqs, qs)
                counts["attend"] += 1
                for s, q, out in zip(seqs, qs, outs):
                    k, v = copy[s]
                    ref = torch_attend(q, k, v)
                    worst = max(worst, float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)))
                    same = attn.sdpa(q.transpose(1, 0, 2), stored(k, dtype), stored(v, dtype), causal="bottom-right")
                    if dtype == "float16":  # the contiguous call with keys stored as the pool stores them
                        same = attn.sdpa(q.transpose(1, 0, 2), k.astype(np.float16), v.astype(np.float16),
                                         causal="bottom-right")
                    if dtype != "bfloat16" and not np.array_equal(same.transpose(1, 0, 2), out):
                        return "step %d: attend differs from attn.sdpa on the copy" % step, worst, counts
        except attn.AttnError as e:
            return "step %d: %s: %s" % (step, type(e).__name__, e), worst, counts
        for s in copy:
            k, v = pool.gather(s)
            if not (np.array_equal(k, copy[s][0]) and np.array_equal(v, copy[s][1])):
                return "step %d: sequence %d differs from its copy" % (step, s), worst, counts
        held = sum(pool.page_refs(p) > 0 for p in range(pages))
        if held + pool.free_pages != pages:
            return "step %d: %d pages held and %d free of %d" % (step, held, pool.free_pages, pages), worst, counts
    for s in list(copy):
        pool.free(s)
    if pool.free_pages != pages:
        return "%d of %d pages free after freeing everything" % (pool.free_pages, pages), worst, counts
    return why, worst, counts


for dtype in ("float32", "float16", "bfloat16"):
    for P, pages, steps in ((16, 20, 250), (256, 4, 120)):
        why, worst, counts = program(dtype, P, pages, steps)
        name = "kv_pages_random_program_%s_page_%d" % (dtype, P)
        if not why and (counts["full"] == 0 or counts["fork"] == 0 or counts["attend"] == 0):
            why = "the program never filled the pool, forked or attended: %s" % counts
        check(name, not why, why)
        check(name + "_attend_vs_torch_float64", worst <= 2e-5, "error %.3g" % worst)

# Quantized pools: each row quantized as attn.h lays it out (the NumPy
# reference of oracle_quant.py), gathered widened, attended bitwise as
# attn.sdpa on the gathered rows (fp8), or within the integer dot product
# kernel's bound of float64 attention on them (q8, q4).
from oracle_quant import ref_dequantize, ref_quantize  # noqa: E402
for name, code in (("q8", 6), ("q4", 7), ("q4_1", 10), ("e4m3", 8), ("e5m2", 9)):
    qp = attn.KVPages(heads=2, key_dim=64, num_pages=8, max_sequences=2, page_size=16, dtype=name)
    a = qp.create()
    k1, v1 = (rng.standard_normal((40, 2, 64)).astype(np.float32) for _ in range(2))
    qp.append(a, k1[:7], v1[:7])
    qp.append(a, k1[7:], v1[7:])
    gk, gv = qp.gather(a)
    wk = ref_dequantize(ref_quantize(k1.transpose(1, 0, 2).reshape(-1, 64), code), code, 64).reshape(2, 40, 64)
    wv = ref_dequantize(ref_quantize(v1.transpose(1, 0, 2).reshape(-1, 64), code), code, 64).reshape(2, 40, 64)
    check("kv_pages_python_%s_gather_as_numpy_reference" % name, np.array_equal(gk, wk) and np.array_equal(gv, wv))
    q1 = rng.standard_normal((1, 4, 64)).astype(np.float32)
    out = qp.attend(a, q1)
    want = attn.sdpa(q1.transpose(1, 0, 2), gk, gv, causal="bottom-right").transpose(1, 0, 2)
    if name in ("q8", "q4"):
        # Decode scores q8/q4 keys with integer dot products where the CPU
        # has them (the query rounded to int8 per block of 32), and may sum
        # their values in bf16 pairs: within attn.h's bounds of float64
        # attention on the gathered rows, the widening kernels (ATTN_ISA=c)
        # well inside them.
        worst = 0.0
        for h in range(4):
            x = q1[0, h].astype(np.float64) / 8.0  # scale 1/sqrt(64)
            kk, vv = gk[h // 2].astype(np.float64), gv[h // 2].astype(np.float64)
            s = kk @ x
            amax = np.abs(x.astype(np.float32).astype(np.float64)).reshape(2, 32).max(axis=1)
            delta = ((amax / 127 * (0.5 + 2.0 ** -10))[None, :] * np.abs(kk).reshape(40, 2, 32).sum(axis=2)).sum(axis=1)
            delta = (delta + 2.0 ** -18 * (np.abs(kk) @ np.abs(x))).max()
            p = np.exp(s - s.max())
            ref = (p / p.sum()) @ vv
            tol = (np.expm1(2 * delta) + 1e-5) * np.abs(vv).max(axis=0) + 1e-30
            # values through bf16 pairs where the CPU takes them (value_dot=bf16_avx512bf16):
            # attn.h's bound on Σ p|v| over the 40 keys, the weights within e^(2Δ) of these
            n = 40
            tol = tol + np.exp(2 * delta) * ((2.0 ** -8 * (1 + 2.0 ** -14) + (n + 2) * 2.0 ** -23) * (p @ np.abs(vv))
                                             + (n + 2) * 2.0 ** -110) / p.sum()
            worst = max(worst, (np.abs(out[0, h] - ref) / tol).max())
        check("kv_pages_python_%s_attend_within_key_dot_bound_of_float64" % name, worst <= 1, "error/bound %.3g" % worst)
    else:
        check("kv_pages_python_%s_attend_bitwise_sdpa_on_gathered" % name, np.array_equal(out, want))
try:
    attn.KVPages(heads=2, key_dim=40, num_pages=8, max_sequences=2, dtype="q8")
    check("kv_pages_python_q8_key_dim_40_refused", False, "accepted")
except attn.ShapeError:
    check("kv_pages_python_q8_key_dim_40_refused", True)

# Packed arrays with offsets give what the lists give; lse as attn.sdpa's.
pa = attn.KVPages(heads=2, key_dim=8, value_dim=4, num_pages=8, max_sequences=4, page_size=16)
pb = attn.KVPages(heads=2, key_dim=8, value_dim=4, num_pages=8, max_sequences=4, page_size=16)
ids = [pa.create(), pa.create()]
[pb.create(), pb.create()]
ks = [rng.standard_normal((n, 2, 8)).astype(np.float32) for n in (5, 19)]
vs = [rng.standard_normal((n, 2, 4)).astype(np.float32) for n in (5, 19)]
pa.append(ids, ks, vs)
pb.append(ids[::-1], np.concatenate(ks[::-1]), np.concatenate(vs[::-1]), cu_seqlens=[0, 19, 24])
qs = [rng.standard_normal((n, 4, 8)).astype(np.float32) for n in (2, 3)]
outs, lses = pa.attend(ids, qs, return_lse=True)
packed_out, packed_lse = pb.attend(ids, np.concatenate(qs), cu_seqlens_q=[0, 2, 5], return_lse=True)
want = [attn.sdpa(q.transpose(1, 0, 2), *pa.gather(s), causal="bottom-right", return_lse=True) for s, q in zip(ids, qs)]
check("kv_pages_python_packed_equals_lists",
      all(np.array_equal(pa.gather(s)[0], pb.gather(s)[0]) for s in ids) and
      np.array_equal(np.concatenate(outs), packed_out) and np.array_equal(np.concatenate(lses), packed_lse))
check("kv_pages_python_lse_as_sdpa", all(np.array_equal(o, w[0].transpose(1, 0, 2)) and
                                         np.array_equal(l, w[1].T) for o, l, w in zip(outs, lses, want)))
# Dropout, as the C call takes it (attend had no dropout_p): sequence i with
# seed + i, bitwise attn.sdpa with that seed on its gathered rows; a p outside
# [0, 1] is the C API's OptionError.
douts = pa.attend(ids, qs, dropout_p=0.25, seed=41)
dwant = [attn.sdpa(q.transpose(1, 0, 2), *pa.gather(s), causal="bottom-right", dropout_p=0.25,
                   seed=41 + i).transpose(1, 0, 2) for i, (s, q) in enumerate(zip(ids, qs))]
check("kv_pages_python_attend_dropout_bitwise_sdpa_seed_plus_i",
      all(np.array_equal(o, w) for o, w in zip(douts, dwant)) and not np.array_equal(douts[1], outs[1]),
      str([float(np.abs(o - w).max()) for o, w in zip(douts, dwant)]))
for bad in (1.5, -0.1, float("nan")):
    try:
        pa.attend(ids, qs, dropout_p=bad, seed=1)
        check("kv_pages_python_attend_dropout_%r_refused" % bad, False, "no error")
    except attn.OptionError as e:
        check("kv_pages_python_attend_dropout_%r_refused" % bad, "dropout_p" in str(e), str(e))
# A head-major pool (each head's pages apart) holds and attends the same
# rows: gather and attend bitwise the default pool's, its view says so.
ph = attn.KVPages(heads=2, key_dim=8, value_dim=4, num_pages=8, max_sequences=4, page_size=16, head_major=True)
[ph.create(), ph.create()]
ph.append(ids, ks, vs)
houts, hlses = ph.attend(ids, qs, return_lse=True)
check("kv_pages_python_head_major_equals_default",
      all(np.array_equal(pa.gather(s)[0], ph.gather(s)[0]) and np.array_equal(pa.gather(s)[1], ph.gather(s)[1])
          for s in ids) and all(np.array_equal(a, b) for a, b in zip(outs + lses, houts + hlses)) and
      ph._view().head_major == 1 and pa._view().head_major == 0)


def float16_q_attend():
    """A float16 q, which attn_kv_pages_attend takes (the binding refused
    it): attn.h computes it as the float32 call on the widened q with out
    rounded once to nearest even, lse float32. So attend on float16 queries
    (a list, and packed with offsets) is checked bitwise against attend on
    the same queries widened, out rounded by NumPy, over pools of float32,
    float16 and q8 storage, with a bool and a float mask and both causal
    modes. A generator of its own leaves the module's random stream as the
    later checks had it."""
    g = np.random.default_rng(1617)
    for dt in ("float32", "float16", "q8"):
        for causal in ("bottom-right", False):
            p = attn.KVPages(heads=2, key_dim=32, value_dim=32, num_pages=8, max_sequences=4, page_size=16, dtype=dt)
            ids = [p.create(), p.create()]
            p.append(ids, [g.standard_normal((n, 2, 32)).astype(np.float32) for n in (5, 19)],
                     [g.standard_normal((n, 2, 32)).astype(np.float32) for n in (5, 19)])
            qs = [g.standard_normal((n, 4, 32)).astype(np.float16) for n in (2, 3)]
            masks = [g.random((4, 2, 5)) < 0.8, np.where(g.random((3, 19)) < 0.2, -np.inf, g.standard_normal((3, 19)))]
            try:
                outs, lses = p.attend(ids, qs, masks=masks, causal=causal, return_lse=True)
                packed, plse = p.attend(ids, np.concatenate(qs), cu_seqlens_q=[0, 2, 5], masks=masks, causal=causal,
                                        return_lse=True)
                wide, wlse = p.attend(ids, [q.astype(np.float32) for q in qs], masks=masks, causal=causal,
                                      return_lse=True)
                why = ""
                dtypes = [(o.dtype, l.dtype) for o, l in zip(outs + [packed], lses + [plse])]
                if dtypes != [(np.float16, np.float32)] * 3:
                    why = "out and lse of dtypes %s" % dtypes
                elif not all(np.array_equal(o, w.astype(np.float16)) and np.array_equal(l, x)
                             for o, l, w, x in zip(outs, lses, wide, wlse)):
                    why = "differs from attend on the widened q, rounded"
                elif not (np.array_equal(packed, np.concatenate(outs)) and np.array_equal(plse, np.concatenate(lses))):
                    why = "packed differs from the list"
            except Exception as e:  # noqa: BLE001 -- any exception is the failure
                why = "%s: %s" % (type(e).__name__, e)
            check("kv_pages_python_attend_float16_q_bitwise_widened_%s_%s" % (dt, causal), not why, why)


float16_q_attend()


def float16_q_plan():
    """A paged plan of float16 queries (q_dtype=np.float16: its runs took
    float32 q alone, where attend, attn.sdpa and attn.Plan take float16)
    over pools of float32, float16 and q8 storage and of q4c keys (whose
    plans reorder q by sequence id), a mask per sequence and lse: each run,
    on the planned pool and on a second layer's pool kept in step, bitwise
    attend on the same float16 q (out float16, lse float32) and bitwise the
    float32 plan's run on the widened q with out rounded to float16 (attn.h);
    over float32 and float16 storage also within float16's rounding (2^-11
    of the largest value) and the f32 bound of PyTorch float64 on the widened
    q and the gathered keys. A q of the other dtype is a PlanError naming
    q_dtype; q_dtype float64, 'bfloat16' or int32 a DtypeError; a Hadamard
    pool's plan of float16 q refused as its attend refuses that q. A
    generator of its own leaves the module's random stream as it was."""
    g = np.random.default_rng(1618)
    for label, kw in (("float32", {}), ("float16", {"dtype": "float16"}), ("q8", {"dtype": "q8"}),
                      ("q4c", {"key_dtype": "q4c"})):
        pools = []
        for _ in range(2):  # a second layer's pool: the same page tables, other values
            p = attn.KVPages(heads=2, key_dim=32, num_pages=12, max_sequences=3, page_size=32, **kw)
            ids = [p.create(), p.create()]
            p.append(ids, [g.standard_normal((n, 2, 32)).astype(np.float32) for n in (5, 40)],
                     [g.standard_normal((n, 2, 32)).astype(np.float32) for n in (5, 40)])
            pools.append(p)
        seqs = ids[::-1]  # out of id order
        q16 = g.standard_normal((3, 4, 32)).astype(np.float16)
        masks = [g.random((4, 2, 40)) < 0.8, np.where(g.random((1, 5)) < 0.2, -np.inf, g.standard_normal((1, 5)))]
        why = ""
        try:
            plan16 = pools[0].plan(seqs, [2, 1], num_heads=4, masks=masks, return_lse=True, q_dtype=np.float16)
            plan32 = pools[0].plan(seqs, [2, 1], num_heads=4, masks=masks, return_lse=True)
            for i, p in enumerate(pools):
                out, lse = plan16.run(q16, pool=p)
                want, wlse = p.attend(seqs, q16, cu_seqlens_q=[0, 2, 3], masks=masks, return_lse=True)
                wide, wide_lse = plan32.run(q16.astype(np.float32), pool=p)
                if (out.dtype, lse.dtype) != (np.float16, np.float32):
                    why = "out %s, lse %s" % (out.dtype, lse.dtype)
                elif not (np.array_equal(out, want) and np.array_equal(lse, wlse)):
                    why = "pool %d: differs from attend on the float16 q" % i
                elif not (np.array_equal(out, wide.astype(np.float16)) and np.array_equal(lse, wide_lse)):
                    why = "pool %d: differs from the float32 plan on the widened q, rounded" % i
                if why:
                    break
            if not why and label in ("float32", "float16"):  # the oracle: PyTorch float64, no mask
                out = pools[0].plan(seqs, [2, 1], num_heads=4, q_dtype="float16").run(q16)
                worst = 0.0
                for s, rows in zip(seqs, (slice(0, 2), slice(2, 3))):
                    ref = torch_attend(q16[rows].astype(np.float32), *pools[0].gather(s))
                    worst = max(worst, float(np.abs(out[rows] - ref).max() / np.abs(ref).max()))
                if worst > 2.0 ** -11 + 2e-5:
                    why = "error %.3g against PyTorch float64" % worst
        except Exception as e:  # noqa: BLE001 -- any exception is the failure
            why = "%s: %s" % (type(e).__name__, e)
        check("kv_pages_python_plan_float16_q_bitwise_attend_%s" % label, not why, why)
        if label != "float32":
            continue
        for name, cls, call, words in (
                ("float32_q_in_float16_plan", attn.PlanError, lambda: plan16.run(q16.astype(np.float32)),
                 "q_dtype=np.float32"),
                ("float16_q_in_float32_plan", attn.PlanError, lambda: plan32.run(q16), "q_dtype=np.float16"),
                ("q_dtype_float64", attn.DtypeError,
                 lambda: pools[0].plan(seqs, [2, 1], num_heads=4, q_dtype=np.float64), "q_dtype is float64"),
                ("q_dtype_int32", attn.DtypeError,
                 lambda: pools[0].plan(seqs, [2, 1], num_heads=4, q_dtype=np.int32), "q_dtype is int32"),
                ("q_dtype_bfloat16", attn.DtypeError,
                 lambda: pools[0].plan(seqs, [2, 1], num_heads=4, q_dtype="bfloat16"), "bfloat16")):
            try:
                call()
                check("kv_pages_python_plan_refuses_" + name, False, "no error")
            except cls as e:
                check("kv_pages_python_plan_refuses_" + name, words in str(e), str(e))
    hp = attn.KVPages(heads=2, key_dim=32, num_pages=4, max_sequences=1, page_size=32, dtype="q8", hadamard=True)
    hs = hp.create()
    hp.append(hs, g.standard_normal((7, 2, 32)).astype(np.float32), g.standard_normal((7, 2, 32)).astype(np.float32))
    said = []
    for call in (lambda: hp.attend(hs, g.standard_normal((1, 4, 32)).astype(np.float16)),
                 lambda: hp.plan([hs], [1], num_heads=4, q_dtype=np.float16)):
        try:
            call()
            said.append("accepted")
        except attn.AttnError as e:
            said.append(type(e).__name__)
    check("kv_pages_python_hadamard_plan_refuses_float16_q_as_attend", said[0] == said[1] != "accepted", said)


float16_q_plan()

# Forks sharing a prompt's pages, each with its own new positions, attended
# in one call with a mask per sequence (bool, additive float, none), on 1, 2
# and 3 threads: each sequence's rows are attn.sdpa's on its gathered keys
# with its mask, bitwise, and PyTorch float64's within the f32 bound.
fp = attn.KVPages(heads=2, key_dim=8, value_dim=4, num_pages=16, max_sequences=4, page_size=16)
root = fp.create()
fp.append(root, rng.standard_normal((37, 2, 8)).astype(np.float32), rng.standard_normal((37, 2, 4)).astype(np.float32))
kids = [fp.fork(root), fp.fork(root)]
fp.append(kids, [rng.standard_normal((n, 2, 8)).astype(np.float32) for n in (3, 11)],
          [rng.standard_normal((n, 2, 4)).astype(np.float32) for n in (3, 11)])
seqs = [kids[0], root, kids[1]]
qs = [rng.standard_normal((n, 4, 8)).astype(np.float32) for n in (4, 1, 6)]
lengths = [fp.length(s) for s in seqs]
masks = [rng.random((4, lengths[0])) < 0.75, None,
         np.where(rng.random((4, 6, lengths[2])) < 0.1, -np.inf, rng.standard_normal((4, 6, lengths[2]))).astype(np.float32)]
threads_before, worst, same = attn.get_num_threads(), 0.0, True
for threads in (1, 2, 3):
    attn.set_num_threads(threads)
    outs = fp.attend(seqs, qs, masks=masks)
    for s, q, m, out in zip(seqs, qs, masks, outs):
        k, v = fp.gather(s)
        want = attn.sdpa(q.transpose(1, 0, 2), k, v, mask=m, causal="bottom-right").transpose(1, 0, 2)
        same = same and np.array_equal(out, want)
        tq = torch.from_numpy(q.astype(np.float64)).transpose(0, 1)
        tk, tv = (torch.from_numpy(a.astype(np.float64)).repeat_interleave(2, 0) for a in (k, v))
        L, S = tq.shape[1], tk.shape[1]
        sc = tq @ tk.transpose(1, 2) / np.sqrt(8)
        if m is not None:
            tm = torch.from_numpy(np.broadcast_to(m, (4, L, S)).copy())
            sc = sc.masked_fill(~tm, float("-inf")) if m.dtype == bool else sc + tm.double()
        sc = sc.masked_fill(~(torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L)), float("-inf"))
        ref = (sc.softmax(-1) @ tv).transpose(0, 1).numpy()
        ok_rows = np.isfinite(ref).all(axis=(1, 2))
        worst = max(worst, float(np.abs(out[ok_rows] - ref[ok_rows]).max() / max(np.abs(ref[ok_rows]).max(), 1e-30)))
attn.set_num_threads(threads_before)
check("kv_pages_python_forks_masks_threads_as_sdpa", same and fp.page_refs(fp.pages(root)[0]) == 3)
check("kv_pages_python_forks_masks_vs_torch_float64", worst <= 2e-5, "error %.3g" % worst)

# Errors: each its class, the pool's bytes unchanged.
pool = attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=2, page_size=16)
a = pool.create()
pool.append(a, np.ones((20, 1, 4), np.float32), np.ones((20, 1, 4), np.float32))
b = pool.fork(a)
before = pool.memory.tobytes()


def refused(name, cls, call):
    try:
        call()
        check(name, False, "no error")
    except cls as e:
        check(name, pool.memory.tobytes() == before and str(e), "the pool changed")
    except Exception as e:  # noqa: BLE001 - any other class is the failure reported
        check(name, False, "%s: %s" % (type(e).__name__, e))


two = np.ones((2, 1, 4), np.float32)
refused("kv_pages_python_full_pool", attn.FullError, lambda: pool.append([a, b], [two, two], [two, two]))
refused("kv_pages_python_no_free_id", attn.FullError, pool.create)
refused("kv_pages_python_unknown_sequence", attn.ArgumentError, lambda: pool.truncate(7, 0))
refused("kv_pages_python_same_sequence_twice", attn.ArgumentError, lambda: pool.append([a, a], [two, two], [two, two]))
refused("kv_pages_python_wrong_heads", attn.ShapeError, lambda: pool.append(a, np.ones((1, 2, 4), np.float32),
                                                                           np.ones((1, 2, 4), np.float32)))
refused("kv_pages_python_float64_keys", attn.DtypeError, lambda: pool.append(a, np.ones((1, 1, 4)), np.ones((1, 1, 4))))
refused("kv_pages_python_truncate_past_the_end", attn.ArgumentError, lambda: pool.truncate(a, 21))
pool.free(b)
before = pool.memory.tobytes()
refused("kv_pages_python_freed_sequence", attn.ArgumentError, lambda: pool.attend(b, np.ones((1, 1, 4), np.float32)))
check("kv_pages_python_pages_and_length", pool.length(a) == 20 and list(pool.pages(a)) == [0, 1] and
      pool.page_refs(0) == 1 and pool.free_pages == 0, "%s %s" % (pool.length(a), pool.pages(a)))

# Integer arguments are taken as Python indexes them: ctypes wrapped 2**64
# to 0 (length(2**64) read sequence 0, free(2**64) would free it) and
# int() made 1.5 sequence 1 and "1" too. Each is refused now, the pool's
# bytes unchanged: a non-integer a TypeError, past int64 an ArgumentError.
pool.append(a, two, two)
before = pool.memory.tobytes()
for label, call in (("length_2_pow_64", lambda: pool.length(2 ** 64)),
                    ("free_2_pow_64", lambda: pool.free(2 ** 64)),
                    ("fork_2_pow_64", lambda: pool.fork(2 ** 64)),
                    ("truncate_to_2_pow_64_plus_1", lambda: pool.truncate(a, 2 ** 64 + 1)),
                    ("page_refs_2_pow_64", lambda: pool.page_refs(2 ** 64)),
                    ("append_ids_2_pow_64", lambda: pool.append([2 ** 64], [two], [two])),
                    ("attend_ids_2_pow_64", lambda: pool.attend([2 ** 64], [np.ones((1, 1, 4), np.float32)]))):
    refused("kv_pages_python_int64_overflow_" + label, attn.ArgumentError, call)
for label, call in (("length_float", lambda: pool.length(float(a))), ("gather_str", lambda: pool.gather(str(a))),
                    ("truncate_float", lambda: pool.truncate(a, 1.5)),
                    ("append_float_offsets", lambda: pool.append([a], np.ones((2, 1, 4), np.float32),
                                                                 np.ones((2, 1, 4), np.float32), cu_seqlens=[0, 1.5])),
                    ("pool_float_heads", lambda: attn.KVPages(heads=1.5, key_dim=4, num_pages=2, max_sequences=2))):
    refused("kv_pages_python_not_an_integer_" + label, TypeError, call)
check("kv_pages_python_numpy_integer_ids", pool.length(np.int64(a)) == pool.length(a) == 22)
# A page outside the pool: the library's -1 ("no such page") came back as a
# count of sequences holding it.
for label, page in (("past_the_pool", pool.num_pages), ("negative", -1)):
    refused("kv_pages_python_page_refs_" + label, attn.ArgumentError, lambda: pool.page_refs(page))
# Packed parts of different heads, or a 0-d one, said as the library says
# it (NumPy's concatenate spoke of its own axes).
refused("kv_pages_python_parts_of_other_heads", attn.ShapeError,
        lambda: pool.attend([a, a], [np.ones((1, 1, 4), np.float32), np.ones((1, 2, 4), np.float32)]))
refused("kv_pages_python_scalar_part", attn.RankError, lambda: pool.append(a, 1.0, 1.0))
# Arguments that raised what Python says of them (not iterable, no
# attribute 'heads', unhashable, tuple index out of range), naming none.
eye = {"num_heads": 1, **{n: np.eye(4, dtype=np.float32) for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight",
                                                                    "out_proj_weight")}}
for label, cls, call in (
        ("plan_seqs_none", TypeError, lambda: pool.plan(None, [1], num_heads=1)),
        ("plan_q_lengths_none", TypeError, lambda: pool.plan([a], None, num_heads=1)),
        ("plan_run_on_not_a_pool", TypeError,
         lambda: pool.plan([a], [1], num_heads=1).run(np.ones((1, 1, 4), np.float32), pool=5)),
        ("dtype_a_list", attn.OptionError, lambda: attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1,
                                                                dtype=["q8"])),
        ("key_dtype_a_list", attn.OptionError, lambda: attn.KVCache(1, 1, 32, 4, key_dtype=["q4c"])),
        ("k_scale_a_string", TypeError, lambda: attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1,
                                                             dtype="e4m3", k_scale="2")),
        ("step_x_none", attn.NullError, lambda: pool.mha_step([a], None, eye)),
        ("step_x_rows_1d", attn.RankError, lambda: pool.mha_step([a], [np.ones(4, np.float32)], eye)),
        ("step_packed_x_1d", attn.RankError,
         lambda: pool.mha_step([a], np.ones(4, np.float32), eye, cu_seqlens=[0, 1])),
        ("step_params_none", TypeError, lambda: pool.mha_step([a], [np.ones((1, 4), np.float32)], None)),
        ("step_rope_not_a_dict", TypeError, lambda: pool.mha_step([a], [np.ones((1, 4), np.float32)], eye, rope=5)),
        ("step_rope_base_string", TypeError, lambda: pool.mha_step([a], [np.ones((1, 4), np.float32)], eye,
                                                                   rope={"base": "1e4"})),
        ("plan_q_lengths_negative", attn.ArgumentError, lambda: pool.plan([a], [-1], num_heads=1)),
        ("attend_causal_a_list", attn.OptionError, lambda: pool.attend(a, np.ones((1, 1, 4), np.float32), causal=[1])),
        ("plan_causal_a_list", attn.OptionError, lambda: pool.plan([a], [1], num_heads=1, causal=[1])),
        ("step_causal_a_list", attn.OptionError,
         lambda: pool.mha_step([a], [np.ones((1, 4), np.float32)], eye, causal=[1]))):
    refused("kv_pages_python_refuses_" + label, cls, call)
# A plan of no query heads: the library said "q has shape (1, 0, 4); it must be (1, 0, 4)".
try:
    pool.plan([a], [1], num_heads=0)
    why = "no error"
except attn.ShapeError as e:
    why = "" if str(e) == "q has shape (1, 0, 4); it needs at least one head (dimension 1)" else str(e)
check("kv_pages_python_plan_of_no_heads_said", not why, why)
# Offsets that are one integer: "'int' object is not iterable", naming neither.
for label, name, call in (
        ("append", "cu_seqlens", lambda: pool.append([a], two, two, cu_seqlens=2)),
        ("attend", "cu_seqlens_q", lambda: pool.attend([a], np.ones((1, 1, 4), np.float32), cu_seqlens_q=1))):
    try:
        call()
        why = "no error"
    except TypeError as e:
        why = "" if str(e).startswith(name + " must be a list") and pool.memory.tobytes() == before else str(e)
    except Exception as e:  # noqa: BLE001 - any other class is the failure reported
        why = "%s: %s" % (type(e).__name__, e)
    check("kv_pages_python_%s_offsets_an_int_named" % label, not why, why)
# Offsets of another count than the sequences' + 1: the library reads n + 1
# of them, so two offsets for two sequences were read past their array (the
# third taken from whatever memory followed), and four were taken with the
# last dropped, silently. Each is an ArgumentError now, nothing written.
pc = attn.KVPages(heads=1, key_dim=4, num_pages=4, max_sequences=2)
ca, cb = pc.create(), pc.create()
c2 = attn.KVCache(batch=2, heads=1, capacity=8, key_dim=4)
held, lens2 = pc.memory.tobytes(), c2.lengths.copy()
four = np.ones((4, 1, 4), np.float32)
for label, name, call in (
        ("append_short", "cu_seqlens", lambda cu: pc.append([ca, cb], four, four, cu_seqlens=cu)),
        ("attend_short", "cu_seqlens_q", lambda cu: pc.attend([ca, cb], four, cu_seqlens_q=cu)),
        ("step_short", "cu_seqlens", lambda cu: pc.mha_step([ca, cb], np.ones((4, 4), np.float32), eye,
                                                             cu_seqlens=cu)),
        ("cache_step_short", "cu_seqlens", lambda cu: c2.mha_step([0, 1], np.ones((4, 4), np.float32), eye,
                                                                   cu_seqlens=cu))):
    for cu in ([0, 4], [0, 2, 4, 4], [0]):
        tag = "%s_%d_offsets" % (label.replace("_short", ""), len(cu))
        try:
            call(cu)
            why = "no error"
        except attn.ArgumentError as e:
            why = "" if (str(e).startswith("%s has %d offset" % (name, len(cu))) and "it takes 3" in str(e) and
                         pc.memory.tobytes() == held and np.array_equal(c2.lengths, lens2)) else str(e)
        except Exception as e:  # noqa: BLE001 - any other class is the failure reported
            why = "%s: %s" % (type(e).__name__, e)
        check("kv_pages_python_%s_for_2_sequences_refused" % tag, not why, why)
# One sequence named by an int with packed arrays and their offsets: the
# arrays were wrapped in a list as if unpacked (a rank-4 RankError); a 0-d
# NumPy array as the id was iterated (TypeError).
p1 = attn.KVPages(heads=1, key_dim=4, num_pages=4, max_sequences=1)
s1 = p1.create()
k1, v1, q1 = (rng.standard_normal((n, 1, 4)).astype(np.float32) for n in (5, 5, 2))
try:
    p1.append(s1, k1[:3], v1[:3], cu_seqlens=[0, 3])
    p1.append(np.array(s1), k1[3:], v1[3:])
    packed = p1.attend(s1, q1, cu_seqlens_q=[0, 2])
    why = "" if (p1.length(s1) == 5 and np.array_equal(packed, p1.attend(s1, q1)) and
                 np.array_equal(p1.attend(np.array(s1), q1), packed)) else "other results"
except (attn.AttnError, TypeError) as e:
    why = "raised %s: %s" % (type(e).__name__, e)
check("kv_pages_python_one_sequence_packed_and_0d_id", not why, why)
# A pool, a cache or a plan copied: copy.copy made a second object over the
# same pool (its appends changed the original's sequence, silently), and
# deepcopy and pickle failed on a ctypes pointer, naming neither the object
# nor why. Each a TypeError naming the class now, the pool unchanged.
pinned = (("pool", p1), ("cache", c2), ("paged_plan", p1.plan([s1], [1], num_heads=1)),
          ("plan", attn.Plan(q1[:1], k1.transpose(1, 0, 2), v1.transpose(1, 0, 2))))
held1 = p1.memory.tobytes()
for label, obj in pinned:
    for how, call in (("copy", copy.copy), ("deepcopy", copy.deepcopy), ("pickle", pickle.dumps)):
        try:
            twin = call(obj)
            why = "copied"
            if label == "pool":
                twin.append(s1, k1[:1], v1[:1])
                why = "copied; the copy's append made the original's length %d" % p1.length(s1)
                p1.truncate(s1, 5)  # (the checks below find it as it was)
        except TypeError as e:
            why = "" if ("attn.%s cannot be copied or pickled" % type(obj).__name__ in str(e) and
                         p1.memory.tobytes() == held1) else str(e)
        except Exception as e:  # noqa: BLE001 - any other class is the failure reported
            why = "%s: %s" % (type(e).__name__, e)
        check("kv_pages_python_%s_%s_refused" % (label, how), not why, why)
# A q given as nested lists (no dtype of its own) to the calls that take
# float32: made float64, as lists are elsewhere, then refused by the library
# ("q is f64"), and a paged plan's run advised q_dtype=np.float64, which
# plans refuse. Made float32 now: bitwise the float32 array's results.
c1 = attn.KVCache(batch=1, heads=1, capacity=8, key_dim=4)
c1.append(k1[:, 0], v1[:, 0])
for label, call in (("attend", lambda x: p1.attend(s1, x)),
                    ("attend_packed", lambda x: p1.attend([s1], x, cu_seqlens_q=[0, 2])),
                    ("plan_run", lambda x: p1.plan([s1], [2], num_heads=1).run(x)),
                    ("cache_attend", lambda x: c1.attend(np.asarray(x)[:, 0] if isinstance(x, np.ndarray)
                                                         else [row[0] for row in x]))):
    try:
        got, want = call(q1.tolist()), call(q1)
        why = "" if got.dtype == np.float32 and np.array_equal(got, want) else "%s, other results" % got.dtype
    except attn.AttnError as e:
        why = "%s: %s" % (type(e).__name__, e)
    check("kv_pages_python_%s_list_q_as_float32" % label, not why, why)
# One sequence's mask given alone, not in a list: its rows were counted as
# masks ("masks has 2 entries for 1 sequences").
m1 = rng.random((2, 5)) < 0.7  # (L, S): two rows
m1[..., 4] = True
try:
    why = "" if np.array_equal(p1.attend(s1, q1, masks=m1), p1.attend([s1], [q1], masks=[m1])[0]) else "other results"
except attn.AttnError as e:
    why = "raised %s: %s" % (type(e).__name__, e)
check("kv_pages_python_one_sequence_mask_alone", not why, why)
# Two masks for one sequence: refused, the count said in the singular ("for 1 sequences" was printed).
try:
    p1.attend([s1], [q1], masks=[m1, m1])
    why = "ran"
except attn.AttnError as e:
    why = "" if str(e).endswith("masks has 2 entries for 1 sequence") else "%s: %s" % (type(e).__name__, e)
check("kv_pages_python_mask_count_message_singular", not why, why)
# dtype as NumPy spells it: np.float16 (the type) was refused, only
# np.dtype(np.float16) taken; None is not float64.
for label, dt, want in (("np_float16_type", np.float16, np.float16), ("np_float32_type", np.float32, np.float32),
                        ("dtype_object", np.dtype("float16"), np.float16)):
    try:
        p16 = attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1, dtype=dt)
        s16 = p16.create()
        x16 = np.array([[[1.0, 2.0, 3.0, 1 / 3]]], np.float32)
        p16.append(s16, x16, x16)
        got = p16.gather(s16)[0][0, 0, 3]
        why = "" if got == np.float32(want(1 / 3)) else "stored %r" % got
    except attn.AttnError as e:
        why = "raised %s: %s" % (type(e).__name__, e)
    check("kv_pages_python_storage_dtype_" + label, not why, why)
for label, make in (("pages_none", lambda: attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1, dtype=None)),
                    ("cache_none", lambda: attn.KVCache(1, 1, 4, 4, dtype=None))):
    try:
        make()
        why = "no error"
    except attn.OptionError:
        why = ""
    check("kv_pages_python_storage_dtype_refused_" + label, not why, why)

# Python threads at once, each on its own pool (ctypes lets go of the GIL
# during each call): every attend bitwise attn.sdpa on the rows appended,
# every pool's pages all free again at the end.
def pool_worker(seed, results):
    wr = np.random.default_rng(seed)
    wp = attn.KVPages(heads=2, key_dim=32, num_pages=32, max_sequences=4)
    ok = True
    for _ in range(20):
        ws = wp.create()
        n = int(wr.integers(1, 100))
        wk, wv = (wr.standard_normal((n, 2, 32)).astype(np.float32) for _ in range(2))
        wp.append(ws, wk, wv)
        wq = wr.standard_normal((3, 4, 32)).astype(np.float32)
        want = attn.sdpa(wq.transpose(1, 0, 2), wk.transpose(1, 0, 2), wv.transpose(1, 0, 2),
                         causal="bottom-right").transpose(1, 0, 2)
        ok &= np.array_equal(wp.attend(ws, wq), want)
        wp.free(ws)
    results[seed] = ok and wp.free_pages == 32


thread_results = {}
workers = [threading.Thread(target=pool_worker, args=(seed, thread_results)) for seed in range(4)]
for w_ in workers:
    w_.start()
for w_ in workers:
    w_.join()
check("kv_pages_python_threads_on_separate_pools", thread_results == {i: True for i in range(4)}, str(thread_results))

# ---- the contiguous cache's own calls (KVCache.append, attend, view, gather,
# truncate, length): every storage, against attn.sdpa on its rows and a pool
# holding the same positions, and its errors ----
CB, CHK, CHQ, CD = 2, 2, 4, 32  # GQA 4:2, key_dim a multiple of 32 for q8, q4 and q4_1
cache_storages = [("float32", {}), ("float16", {}), ("bfloat16", {}), ("float64", {}), ("q8", {}), ("q4", {}),
                  ("q4_1", {}), ("e4m3", {}), ("e5m2", {}), ("e4m3", dict(k_scale=[0.5, 2.0], v_scale=1.5)),
                  ("q8", dict(hadamard=True)), ("q8", dict(key_dtype="q4c", residual=32))]
for dt, kw in cache_storages:
    label = "_".join([dt] + sorted(kw))
    work = np.float64 if dt == "float64" else np.float32
    kc = attn.KVCache(CB, CHK, 96, CD, dtype=dt, **kw)
    # the same positions in a pool, one sequence per row (no float64 pool)
    kp = None if dt == "float64" else attn.KVPages(CHK, CD, 32, CB, dtype=dt, page_size=32 if "key_dtype" in kw else 16,
                                                   **kw)
    kseqs = [kp.create() for _ in range(CB)] if kp else []
    held = []  # the rows appended, (B, Hk, n, E) each
    why = []
    for n in (5, 1, 30, 1, 7):
        kn = rng.standard_normal((CB, CHK, n, CD)).astype(work)
        vn = rng.standard_normal((CB, CHK, CD, n)).astype(work).transpose(0, 1, 3, 2)  # any strides
        kc.append(kn, vn)
        held.append((kn, vn))
        if kp:
            kp.append(kseqs, [kn[b].transpose(1, 0, 2) for b in range(CB)],
                      [vn[b].transpose(1, 0, 2) for b in range(CB)])
        qn = rng.standard_normal((CB, CHQ, n, CD)).astype(work)
        out, lse = kc.attend(qn, return_lse=True)
        vk, vv = kc.view()
        gk, gv = kc.gather()
        allk = np.concatenate([h[0] for h in held], 2)
        allv = np.concatenate([h[1] for h in held], 2)
        if kc.length != allk.shape[2] or vk.shape != allk.shape or gv.shape != allv.shape:
            why.append("length %d, view %s, gather %s after %d" % (kc.length, vk.shape, gv.shape, allk.shape[2]))
        if dt in ("float32", "float16", "float64"):
            # views of the cache's own memory, read-only, holding what was appended as stored
            if not (np.shares_memory(vk, kc.memory) and not vk.flags.writeable and vk.dtype == np.dtype(dt)
                    and np.array_equal(vk, allk.astype(dt)) and np.array_equal(vv, allv.astype(dt))
                    and np.array_equal(gk, allk.astype(dt)) and np.array_equal(gv, allv.astype(dt))):
                why.append("view or gather after %d is not the rows appended" % allk.shape[2])
            ref, ref_lse = attn.sdpa(qn, vk, vv, causal="bottom-right", return_lse=True)
            if not (np.array_equal(out, ref) and np.array_equal(lse, ref_lse)):
                why.append("attend after %d differs from attn.sdpa on the view" % allk.shape[2])
        else:
            # a copy, float32, the dequantized values gather gives
            if not (np.array_equal(vk, gk) and np.array_equal(vv, gv) and vk.dtype == np.float32
                    and not np.shares_memory(vk, kc.memory)):
                why.append("view of %s is not gather's copy" % dt)
            if dt == "bfloat16" and not (np.array_equal(gk, stored(allk, dt)) and np.array_equal(gv, stored(allv, dt))):
                why.append("bfloat16 rows not as stored")
            # the quantized kernels read the codes (integer dot products for
            # q8 and q4): against attn.sdpa on their values within the
            # formats' rounding of O(1) scores; bitwise the pool below
            ref = attn.sdpa(qn, gk, gv, causal="bottom-right")
            if not np.abs(out - ref).max() <= 0.05:
                why.append("attend %.3g from attn.sdpa on the gathered rows" % np.abs(out - ref).max())
        if kp:
            po, pl = kp.attend(kseqs, [qn[b].transpose(1, 0, 2) for b in range(CB)], return_lse=True)
            pg = [kp.gather(s) for s in kseqs]
            for b in range(CB):
                if not (np.array_equal(out[b], po[b].transpose(1, 0, 2)) and np.array_equal(lse[b], pl[b].T)):
                    why.append("row %d attend after %d differs from the pool's" % (b, allk.shape[2]))
                if not (np.array_equal(gk[b], pg[b][0]) and np.array_equal(gv[b], pg[b][1])):
                    why.append("row %d gather after %d differs from the pool's" % (b, allk.shape[2]))
    check("kv_cache_python_calls_" + label, not why, "; ".join(why[:3]))
    # truncated (inside the last group of keys per channel too) and grown
    # again: as a pool cut to the same length
    kc.truncate(20)
    kn = rng.standard_normal((CB, CHK, 3, CD)).astype(work)
    kc.append(kn, kn)
    qn = rng.standard_normal((CB, CHQ, 2, CD)).astype(work)
    out = kc.attend(qn)
    gk, gv = kc.gather()
    ok = kc.length == 23 and gk.shape[2] == 23
    if kp:
        for b, s in enumerate(kseqs):
            kp.truncate(s, 20)
        kp.append(kseqs, [kn[b].transpose(1, 0, 2) for b in range(CB)], [kn[b].transpose(1, 0, 2) for b in range(CB)])
        po = kp.attend(kseqs, [qn[b].transpose(1, 0, 2) for b in range(CB)])
        ok = ok and all(np.array_equal(out[b], po[b].transpose(1, 0, 2)) and np.array_equal(gk[b], kp.gather(s)[0])
                        for b, s in enumerate(kseqs))
    else:
        ok = ok and np.array_equal(gk[:, :, :20], allk[:, :, :20]) and np.array_equal(gk[:, :, 20:], kn)
    check("kv_cache_python_truncate_" + label, ok, "length %d" % kc.length)

# one row of one head: rank 2 and 3 arrays as the library takes them, an
# empty cache attended (out 0, lse -inf)
one = attn.KVCache(1, 1, 8, 4)
empty_out, empty_lse = one.attend(np.ones((2, 4), np.float32), return_lse=True)
k1 = rng.standard_normal((3, 4)).astype(np.float32)
one.append(k1, k1[::-1])
check("kv_cache_python_rank_2_and_3",
      np.array_equal(one.view(2)[0], k1) and np.array_equal(one.view(3)[1], k1[None, ::-1])
      and np.array_equal(one.attend(k1[None]), attn.sdpa(k1[None], k1[None], k1[None, ::-1], causal="bottom-right"))
      and not empty_out.any() and np.all(empty_lse == -np.inf) and one.view()[0].shape == (1, 1, 3, 4))

ec = attn.KVCache(2, 2, 8, 4)
ones = lambda *shape: np.ones(shape, np.float32)  # noqa: E731
ec.append(ones(2, 2, 6, 4), ones(2, 2, 6, 4))
ec_before = ec.memory.tobytes()
for name, cls, call in (
        ("full", attn.FullError, lambda: ec.append(ones(2, 2, 3, 4), ones(2, 2, 3, 4))),
        ("k_dim", attn.ShapeError, lambda: ec.append(ones(2, 2, 1, 5), ones(2, 2, 1, 4))),
        ("k_heads", attn.ShapeError, lambda: ec.append(ones(2, 3, 1, 4), ones(2, 3, 1, 4))),
        ("k_v_positions", attn.ShapeError, lambda: ec.append(ones(2, 2, 1, 4), ones(2, 2, 2, 4))),
        ("k_rank_3_batch_2", attn.RankError, lambda: ec.append(ones(2, 1, 4), ones(2, 1, 4))),
        ("k_float64", attn.DtypeError, lambda: ec.append(np.ones((2, 2, 1, 4)), np.ones((2, 2, 1, 4)))),
        ("k_int", attn.DtypeError, lambda: ec.append(np.ones((2, 2, 1, 4), np.int64), ones(2, 2, 1, 4))),
        ("truncate_past_length", attn.ArgumentError, lambda: ec.truncate(7)),
        ("truncate_negative", attn.ArgumentError, lambda: ec.truncate(-1)),
        ("attend_top_left", attn.OptionError, lambda: ec.attend(ones(2, 2, 1, 4), causal=True)),
        ("q_dim", attn.ShapeError, lambda: ec.attend(ones(2, 2, 1, 5))),
        ("q_heads", attn.HeadsError, lambda: ec.attend(ones(2, 3, 1, 4))),
        ("q_float64", attn.DtypeError, lambda: ec.attend(np.ones((2, 2, 1, 4)))),
        ("mask_width", attn.MaskError, lambda: ec.attend(ones(2, 2, 1, 4), mask=np.ones((1, 5), bool))),
        ("view_rank_5", attn.RankError, lambda: ec.view(5)),
        ("view_rank_3_batch_2", attn.RankError, lambda: ec.view(3)),
        ("gather_int", attn.DtypeError, lambda: ec.gather(dtype=np.int32))):
    try:
        call()
        why = "no error"
    except cls as e:
        why = "" if ec.memory.tobytes() == ec_before and ec.length == 6 and str(e) else "the cache changed"
    except Exception as e:  # noqa: BLE001 - any other class is the failure reported
        why = "%s: %s" % (type(e).__name__, e)
    check("kv_cache_python_refused_" + name, not why, why)
for name, cls, call in (
        ("float32_k_into_float64", attn.DtypeError,
         lambda: attn.KVCache(1, 1, 4, 4, dtype="float64").append(ones(1, 1, 1, 4), ones(1, 1, 1, 4))),
        ("scale_on_float32", attn.DtypeError, lambda: attn.KVCache(1, 2, 4, 4, k_scale=1.0)),
        ("hadamard_on_float32", attn.DtypeError, lambda: attn.KVCache(1, 1, 4, 4, hadamard=True)),
        ("scale_a_string", TypeError, lambda: attn.KVCache(1, 2, 4, 4, dtype="e4m3", k_scale="2"))):
    try:
        call()
        why = "no error"
    except cls as e:
        why = "" if str(e) else "no message"
    except Exception as e:  # noqa: BLE001
        why = "%s: %s" % (type(e).__name__, e)
    check("kv_cache_python_refused_" + name, not why, why)
# k or v of another dtype for a float64 cache, named as NumPy names it, k's
# and v's alike: a float32 k reached the library, which said "k is f32; an
# f64 cache takes f64"; int64 and float16 were refused here with the
# message of a call beside a float32 q, rewritten by splitting its text.
for given, dtype in (("k", np.float32), ("k", np.float16), ("k", np.int64), ("v", np.float32), ("v", np.int64)):
    c64k = attn.KVCache(1, 1, 4, 4, dtype="float64")
    k, v = ((np.ones((1, 1, 1, 4), dtype) if n == given else np.ones((1, 1, 1, 4))) for n in ("k", "v"))
    want = "%s is %s; a float64 cache takes float64" % (given, np.dtype(dtype))
    try:
        c64k.append(k, v)
        why = "no error"
    except attn.DtypeError as e:
        why = "" if str(e) == want and c64k.length == 0 else "%r (wanted %r), length %d" % (str(e), want, c64k.length)
    except Exception as e:  # noqa: BLE001 - any other class is the failure reported
        why = "%s: %s" % (type(e).__name__, e)
    check("kv_cache_python_%s_%s_into_float64_named" % (given, np.dtype(dtype)), not why, why)
# A float32 q for a float64 cache, named as the caller gave it: the library
# spoke of the cache's rows ("k is f64 but q is f32").
c64q = attn.KVCache(1, 1, 4, 4, dtype="float64")
c64q.append(np.ones((1, 1, 1, 4)), np.ones((1, 1, 1, 4)))
try:
    c64q.attend(np.ones((1, 1, 1, 4), np.float32))
    why = "no error"
except attn.DtypeError as e:
    why = "" if str(e) == "q is float32; a float64 cache takes a float64 q" else str(e)
check("kv_cache_python_float32_q_for_float64_cache_named", not why, why)
# A per-head scale finite and > 0 as given but 0 or inf as the float32 the
# library keeps: refused naming the value given (it said "is 0", or "is inf"
# after a NumPy overflow warning), for a cache and a pool alike.
for name, make, given in (
        ("cache_k_scale_below_float32", lambda: attn.KVCache(1, 2, 4, 4, dtype="e4m3", k_scale=[1.0, 1e-50]), "1e-50"),
        ("cache_v_scale_past_float32", lambda: attn.KVCache(1, 2, 4, 4, dtype="e5m2", v_scale=1e39), "1e+39"),
        ("pool_k_scale_past_float32", lambda: attn.KVPages(heads=2, key_dim=4, num_pages=2, max_sequences=1,
                                                           dtype="e4m3", k_scale=[3e38, 1e39]), "1e+39")):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy warning on the way is no answer
        try:
            make()
            why = "accepted"
        except attn.ScaleError as e:
            why = "" if given in str(e) else "the message does not name %s: %s" % (given, e)
        except Exception as e:  # noqa: BLE001
            why = "%s: %s" % (type(e).__name__, e)
    check("kv_python_refused_" + name, not why, why)

# ---- the layer's step (KVPages.mha_step, KVCache.mha_step) and a paged plan ----
E, HQ, HK, D = 16, 4, 2, 4
layer = {"num_heads": HQ, "num_kv_heads": HK,
         "q_proj_weight": rng.standard_normal((HQ * D, E)).astype(np.float32) / 4,
         "k_proj_weight": rng.standard_normal((HK * D, E)).astype(np.float32) / 4,
         "v_proj_weight": rng.standard_normal((HK * D, E)).astype(np.float32) / 4,
         "q_proj_bias": rng.standard_normal(HQ * D).astype(np.float32) / 8,
         "k_proj_bias": rng.standard_normal(HK * D).astype(np.float32) / 8,
         "v_proj_bias": rng.standard_normal(HK * D).astype(np.float32) / 8,
         "out_proj_weight": rng.standard_normal((E, E)).astype(np.float32) / 4,
         "out_proj_bias": rng.standard_normal(E).astype(np.float32) / 8}


def layer_reference(history, new, softcap=0.0, window=0):
    """The layer in float64 over one sequence: history (S0, E) rows already
    cached, new (L, E) rows; bottom-right causal, no RoPE: out (L, E).
    softcap, window: the score variants from their definitions (attn.h)."""
    w = {k: np.asarray(v, np.float64) for k, v in layer.items() if k.endswith(("weight", "bias"))}
    xs = np.concatenate([history, new]).astype(np.float64)
    q = new.astype(np.float64) @ w["q_proj_weight"].T + w["q_proj_bias"]
    k = xs @ w["k_proj_weight"].T + w["k_proj_bias"]
    v = xs @ w["v_proj_weight"].T + w["v_proj_bias"]
    L, S = new.shape[0], xs.shape[0]
    heads = np.zeros((L, HQ, D))
    for h in range(HQ):
        g = h // (HQ // HK)
        s = q[:, h * D:(h + 1) * D] @ k[:, g * D:(g + 1) * D].T / np.sqrt(D)
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s[np.arange(S)[None, :] > np.arange(L)[:, None] + (S - L)] = -np.inf
        if window:  # key j only when i + (S - L) - window < j
            s[np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L) - window] = -np.inf
        p = np.exp(s - s.max(1, keepdims=True))
        heads[:, h] = (p / p.sum(1, keepdims=True)) @ v[:, g * D:(g + 1) * D]
    return heads.reshape(L, E) @ w["out_proj_weight"].T + w["out_proj_bias"]


pool = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4)
cache = attn.KVCache(batch=3, heads=HK, capacity=40, key_dim=D)
a, b = pool.create(), pool.create()
hist = {a: np.zeros((0, E), np.float32), b: np.zeros((0, E), np.float32)}
worst, same, steps = 0.0, True, [(7, 12), (1, 1), (3, 1)]
for la, lb in steps:
    xa, xb = rng.standard_normal((la, E)).astype(np.float32), rng.standard_normal((lb, E)).astype(np.float32)
    oa, ob = pool.mha_step([a, b], [xa, xb], layer)
    ca, cb = cache.mha_step([2, 0], [xa, xb], layer)
    same &= np.array_equal(oa, ca) and np.array_equal(ob, cb)
    for s, x, o in ((a, xa, oa), (b, xb, ob)):
        ref = layer_reference(hist[s], x)
        worst = max(worst, float(np.abs(o - ref).max() / max(np.abs(ref).max(), 1e-30)))
        hist[s] = np.concatenate([hist[s], x])
check("mha_step_pool_vs_float64_layer", worst <= 2e-5, "error %.3g" % worst)
# The layer's attention with score variants (a sliding window of 5, soft-capping; the binding
# had no way to ask for them), the pool's step and the cache's alike, on 1 and 3 threads of
# their own: within the f32 bound of the float64 layer, the two bitwise, the threads too.
wpool = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=2)
wcache = attn.KVCache(batch=1, heads=HK, capacity=40, key_dim=D)
ws_, whist, wworst, wsame = wpool.create(), np.zeros((0, E), np.float32), 0.0, True
for n in (7, 1, 3):
    wx = rng.standard_normal((n, E)).astype(np.float32)
    wo = wpool.mha_step([ws_], [wx], layer, window=5, softcap=3.0, num_threads=1)[0]
    wsame &= np.array_equal(wo, wcache.mha_step([0], [wx], layer, window=5, softcap=3.0, num_threads=3)[0])
    wref = layer_reference(whist, wx, softcap=3.0, window=5)
    wworst = max(wworst, float(np.abs(wo - wref).max() / np.abs(wref).max()))
    whist = np.concatenate([whist, wx])
check("mha_step_score_variants_vs_float64_layer", wworst <= 2e-5 and wsame, "error %.3g, same %s" % (wworst, wsame))
check("mha_step_cache_rows_equal_pool", same and list(cache.lengths) == [14, 0, 11] and pool.length(a) == 11,
      "lengths %s" % list(cache.lengths))

# A float64 cache: the step in float64 end to end (x, parameters, out), on the exact kernel
c64 = attn.KVCache(batch=2, heads=HK, capacity=40, key_dim=D, dtype="float64")
h64 = [np.zeros((0, E)), np.zeros((0, E))]
worst, dtypes = 0.0, set()
for la, lb in steps:
    xa, xb = rng.standard_normal((la, E)), rng.standard_normal((lb, E))
    ob, oa = c64.mha_step([0, 1], [xb, xa], layer)
    dtypes |= {oa.dtype, ob.dtype}
    for i, x, o in ((1, xa, oa), (0, xb, ob)):
        ref = layer_reference(h64[i], x)
        worst = max(worst, float(np.abs(o - ref).max() / max(np.abs(ref).max(), 1e-30)))
        h64[i] = np.concatenate([h64[i], x])
check("mha_step_float64_cache_vs_float64_layer", worst <= 1e-12 and dtypes == {np.dtype(np.float64)},
      "error %.3g, dtypes %s" % (worst, dtypes))
# Its append of another dtype, named as the library names float32 there:
# float16 and integers were "it must be float32 or float64, or float16
# beside a float32 q", of a q the call does not take.
for label, dt_ in (("float16", np.float16), ("int32", np.int32), ("float32", np.float32)):
    try:
        c64.append(np.zeros((2, HK, 1, D), dt_), np.zeros((2, HK, 1, D)))
        why = "appended"
    except attn.DtypeError as e:
        why = "" if "takes f" in str(e) and "q" not in str(e).replace("q4", "") else str(e)
    check("kv_cache_float64_append_%s_refused" % label, not why and c64.length == 0, why)
c32 = attn.KVCache(2, HK, 40, D)
try:
    c32.mha_step([0], [np.ones((1, E))], layer)  # float64 x over a float32 cache
    check("mha_step_float64_x_float32_cache_refused", False, "no error")
except attn.DtypeError as e:
    check("mha_step_float64_x_float32_cache_refused", list(c32.lengths) == [0, 0],
          str(e))

# cache.lengths is read and grown by pointer: an array of another dtype,
# length or strides put in its place was read past its end (int32: the
# second row's length was the bytes after it). Assigning copies into the
# cache's own int64 array now, or refuses; a step then reads the values given.
x1 = rng.standard_normal((1, E)).astype(np.float32)
c32.mha_step([0, 1], [x1, x1], layer)
want_step = c32.mha_step([1], [x1], layer)[0]
own = c32.lengths
for label, value in (("int32", np.array([1, 1], np.int32)), ("list", [1, 1]),
                     ("strided", np.array([1, 9, 1, 9], np.int64)[::2])):
    c32.lengths = value
    got = c32.mha_step([1], [x1], layer)[0]
    check("kv_cache_lengths_assigned_%s" % label, c32.lengths is own and list(c32.lengths) == [1, 2] and
          np.array_equal(got, want_step), "lengths %s" % c32.lengths)
# uint64 past int64 wrapped to a negative length when copied in
for label, value in (("short", np.array([1], np.int64)), ("float", [1.0, 1.0]), ("2d", [[1, 1]]),
                     ("uint64_past_int64", np.array([2 ** 63, 1], np.uint64))):
    try:
        c32.lengths = value
        why = "no error"
    except ValueError:
        why = "" if list(c32.lengths) == [1, 2] else "lengths changed to %s" % c32.lengths
    check("kv_cache_lengths_refused_%s" % label, not why, why)
# Rows as integers (2**64 wrapped to row 0, 0.5 was row 0); a step of no rows is empty.
for label, row, cls in (("2_pow_64", 2 ** 64, attn.ArgumentError), ("float", 0.5, TypeError)):
    try:
        c32.mha_step([row], [x1], layer)
        why = "no error"
    except cls:
        why = "" if list(c32.lengths) == [1, 2] else "lengths changed to %s" % c32.lengths
    check("kv_cache_row_refused_%s" % label, not why, why)
check("kv_cache_step_of_no_rows", c32.mha_step([], [], layer) == [] and list(c32.lengths) == [1, 2])
# A row's length lowered by hand (draft tokens rejected, FlashAttention's
# cache_seqlens) over keys quantized per channel: the next step sees the
# keys a truncation leaves (attn.h: a group cut into returns as its
# dequantized values), bitwise a pool's sequence truncated alike. The
# residual window of f16 rows was left where the longer row had moved it
# (positions 96.. read as 32..), and a group quantized past the new length
# was not brought back.
xs = rng.standard_normal((101, E)).astype(np.float32)
for kd, R in (("q4c", 0), ("q2c", 32)):
    for cut in (50, 70, 0):
        long_ = attn.KVCache(2, HK, 128, D, key_dtype=kd, residual=R)
        long_.mha_step([1], [xs[:100]], layer)
        long_.lengths[1] = cut
        if cut == 50:  # a step failing on its mask first leaves the row as the lowered length has it
            try:
                long_.mha_step([1], [xs[100:]], layer, masks=[np.zeros((HQ, 1, 7), np.float32)])
            except attn.MaskError:
                pass
        got = long_.mha_step([1], [xs[100:]], layer)[0]
        pt = attn.KVPages(HK, D, 8, 1, page_size=32, key_dtype=kd, residual=R)
        ps = pt.create()
        pt.mha_step([ps], [xs[:100]], layer)
        pt.truncate(ps, cut)
        want = pt.mha_step([ps], [xs[100:]], layer)[0]
        check("kv_cache_%s_r%d_length_lowered_to_%d" % (kd, R, cut), np.array_equal(got, want),
              "max difference %.3g" % float(np.abs(got - want).max()))
pe = attn.KVPages(heads=HK, key_dim=D, num_pages=2, max_sequences=1)
check("kv_pages_step_of_no_sequences", pe.mha_step([], [], layer) == [] and pe.free_pages == 2)
# The step's settings as given or refused: causal=True was a step without
# a causal mask, a misspelt parameter ("out_proj_bais", a state_dict's
# "out_proj.weight") or RoPE field ("bse") was left out, silently. The
# cache and the pool unchanged.
pe_s = pe.create()
for label, kw, cls in (("causal_true", {"causal": True}, attn.OptionError),
                       ("causal_top_left", {"causal": "top-left"}, attn.OptionError),
                       ("misspelt_parameter", {"params": dict(layer, out_proj_bais=layer["out_proj_weight"][0])},
                        attn.ArgumentError),
                       ("state_dict_name", {"params": dict(layer, **{"out_proj.weight": layer["out_proj_weight"]})},
                        attn.ArgumentError),
                       ("no_num_heads", {"params": {k_: v_ for k_, v_ in layer.items() if k_ != "num_heads"}},
                        attn.ArgumentError),
                       ("misspelt_rope_field", {"rope": {"bse": 500.0}}, attn.OptionError)):
    for where, step in (("cache", lambda params, **o: c32.mha_step([1], [x1], params, **o)),
                        ("pages", lambda params, **o: pe.mha_step([pe_s], [x1], params, **o))):
        try:
            step(**dict({"params": layer}, **kw))
            why = "no error"
        except cls:
            why = "" if list(c32.lengths) == [1, 2] and pe.length(pe_s) == 0 else "the step changed the lengths"
        except Exception as e:  # noqa: BLE001 - another class is the failure reported
            why = "%s: %s" % (type(e).__name__, e)
        check("mha_step_%s_refuses_%s" % (where, label), not why, why)

# RoPE and a mask per sequence, packed, on 1 and 3 threads: the cache's rows bitwise the pool's
for threads in (1, 3):
    attn.set_num_threads(threads)
    p2, c2 = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4), attn.KVCache(2, HK, 40, D)
    s0, s1 = p2.create(), p2.create()
    rope = {"position_offset": 2, "base": 500.0}
    ok = True
    for la, lb in steps:
        x = rng.standard_normal((la + lb, E)).astype(np.float32)
        la_s, lb_s = c2.lengths[1] + la, c2.lengths[0] + lb
        masks = [rng.random((la, la_s)) < 0.8, np.where(rng.random((HQ, lb, lb_s)) < 0.2, -np.inf,
                                                        rng.standard_normal((HQ, lb, lb_s))).astype(np.float32)]
        op = p2.mha_step([s0, s1], x, layer, cu_seqlens=[0, la, la + lb], masks=masks, rope=rope)
        oc = c2.mha_step([1, 0], x, layer, cu_seqlens=[0, la, la + lb], masks=masks, rope=rope)
        ok &= np.array_equal(op, oc)
    check("mha_step_cache_rope_masks_equal_pool_threads_%d" % threads, ok)
attn.set_num_threads(0)

# a step that does not fit: FullError, the lengths as they were
before = cache.lengths.copy()
try:
    cache.mha_step([2, 1], [np.ones((30, E), np.float32), np.ones((1, E), np.float32)], layer)
    check("mha_step_cache_full", False, "no error")
except attn.FullError:
    check("mha_step_cache_full", np.array_equal(before, cache.lengths))

# Arrays of a dtype the pool's calls do not take, said as what they take:
# the message offered float64, which was then refused naming an output the
# caller never gave ("out is f32 but query is f64").
dpool = attn.KVPages(heads=HK, key_dim=D, num_pages=4, max_sequences=2)
ds = dpool.create()
dpool.append(ds, np.ones((2, HK, D), np.float32), np.ones((2, HK, D), np.float32))
x1 = np.ones((1, E), np.float32)
for label, call, words in (
        ("attend_float64_q", lambda: dpool.attend(ds, np.ones((1, HQ, D))), "q[0] is float64; it must be float32"),
        ("attend_float64_q_packed", lambda: dpool.attend(ds, np.ones((1, HQ, D)), cu_seqlens_q=[0, 1]),
         "q is float64; it must be float32 or float16"),
        ("attend_int8_q", lambda: dpool.attend(ds, np.ones((1, HQ, D), np.int8)),
         "q[0] is int8; it must be float32 or float16"),
        # one packed q, of one dtype: the mix was made float32, out with it
        ("attend_mixed_q_parts", lambda: dpool.attend([ds, ds], [np.ones((1, HQ, D), np.float32),
                                                                 np.ones((1, HQ, D), np.float16)]),
         "q[1] is float16 but q[0] is float32"),
        ("append_int_k", lambda: dpool.append(ds, np.ones((1, HK, D), int), np.ones((1, HK, D), np.float32)),
         "k[0] is int64; it must be float32 or float16"),
        ("pool_step_float64_x", lambda: dpool.mha_step([ds], [x1.astype(np.float64)], layer),
         "x[0] is float64; it must be float32"),
        ("cache_step_float64_x", lambda: cache.mha_step([0], [x1.astype(np.float64)], layer),
         "x[0] is float64; it must be float32"),
        ("cache_step_int_x", lambda: cache.mha_step([0], x1.astype(int), layer, cu_seqlens=[0, 1]),
         "x is int64; it must be float32")):
    try:
        call()
        check("kv_dtype_said_" + label, False, "no error")
    except attn.DtypeError as e:
        check("kv_dtype_said_" + label, words in str(e) and "float64" not in str(e).split("; ")[-1], str(e))

# planned once, run for two layers' pools kept in step
pool2 = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4)
a2, b2 = pool2.create(), pool2.create()
for s, s2 in ((a, a2), (b, b2)):
    k, v = pool.gather(s)
    pool2.append(s2, (k.transpose(1, 0, 2) * 2).copy(), (v.transpose(1, 0, 2) - 1).copy())
q = rng.standard_normal((3, HQ, D)).astype(np.float32)
plan = pool.plan([b, a], [2, 1], num_heads=HQ, return_lse=True)
got, got_lse = plan.run(q)
want, want_lse = pool.attend([b, a], q, cu_seqlens_q=[0, 2, 3], return_lse=True)
got2, _ = plan.run(q, pool=pool2)
want2 = pool2.attend([b2, a2], q, cu_seqlens_q=[0, 2, 3])
check("paged_plan_run_equals_attend", np.array_equal(got, want) and np.array_equal(got_lse, want_lse))
# q laid out otherwise (every other row of a larger batch, a head-major transpose): the plan's q is the
# binding's own, C-contiguous, so such a q was a PlanError over strides the caller never chose
wide_q = np.zeros((6, HQ, D), np.float32)
wide_q[::2] = q
hm_q = np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)
check("paged_plan_run_takes_any_strides", all(np.array_equal(plan.run(x)[0], got) for x in (wide_q[::2], hm_q)))
check("paged_plan_run_other_pool_equals_its_attend", list(pool2.pages(b2)) == list(pool.pages(b)) and
      np.array_equal(got2, want2) and not np.array_equal(got2, got))
# A layer's pool not in step with the planned one (its token not appended
# yet, or one appended twice): the run passed the plan's lengths as that
# pool's, so the library's check of them passed, and the run read rows
# the layer never wrote (zeros), silently. A PlanError now naming the
# sequence; in step again, the run is that pool's attend. Keys per channel
# too, whose plan covers every id up to the step's largest (seq 0 alive,
# not in the step, of another length than the step's).
for label, extra in (("f32", {}), ("q4c", dict(key_dtype="q4c", page_size=32, dtype="float16"))):
    lp, lq = (attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4, **extra) for _ in range(2))
    for p_ in (lp, lq):
        idle, s_ = p_.create(), p_.create()
    rows = [rng.standard_normal((n, HK, D)).astype(np.float32) for n in (5, 10, 1, 1)]
    for p_, scale_ in ((lp, 1), (lq, 2)):
        p_.append([idle, s_], [rows[0] * scale_, rows[1] * scale_], [rows[0], rows[1]])
    lp.append(s_, rows[2], rows[2])  # layer 0 has its new token, layer 1 not yet
    lplan = lp.plan([s_], [1], num_heads=HQ)
    lq1 = rng.standard_normal((1, HQ, D)).astype(np.float32)
    said = []
    for when in ("behind", "in step", "ahead"):
        if when == "in step":
            lq.append(s_, rows[2] * 2, rows[2])
            if not np.array_equal(lplan.run(lq1, pool=lq), lq.attend(s_, lq1)):
                said.append("in step: not lq's attend")
            lq.append(s_, rows[3], rows[3])
            continue
        try:
            lplan.run(lq1, pool=lq)
            said.append("%s: no error" % when)
        except attn.PlanError as e:
            if "sequence %d holds %d positions in this pool but held 11" % (s_, lq.length(s_)) not in str(e):
                said.append("%s: %s" % (when, e))
    # The same rows appended in another order: the layer's pages are other
    # pages than the planned pool's, which the run read under the plan's
    # tables (another sequence's rows); it reads the layer's own tables now.
    lr = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4, **extra)
    lr.create(), lr.create()
    lr.append(s_, rows[1] * 3, rows[1])
    lr.append(idle, rows[0] * 3, rows[0])
    lr.append(s_, rows[2] * 3, rows[2])
    if list(lr.pages(s_)) == list(lp.pages(s_)):
        said.append("the other order gave the same pages")
    elif not np.array_equal(lplan.run(lq1, pool=lr), lr.attend(s_, lq1)):
        said.append("pages in another order: not that pool's attend")
    check("paged_plan_run_on_another_pool_its_lengths_and_tables_" + label, not said, "; ".join(said))
# Dropout planned: every run drops what attend with the plan's seed drops
# (a seed drawn at planning when none is given, kept in plan.seed).
dplan = pool.plan([b, a], [2, 1], num_heads=HQ, dropout_p=0.3, seed=7)
dwant = pool.attend([b, a], q, cu_seqlens_q=[0, 2, 3], dropout_p=0.3, seed=7)
check("paged_plan_dropout_equals_attend", dplan.seed == 7 and np.array_equal(dplan.run(q), dwant) and
      np.array_equal(dplan.run(q), dwant) and not np.array_equal(dwant, got))
fresh = pool.plan([b, a], [2, 1], num_heads=HQ, dropout_p=0.3)
check("paged_plan_dropout_fresh_seed_kept", fresh.seed is not None and
      np.array_equal(fresh.run(q), pool.attend([b, a], q, cu_seqlens_q=[0, 2, 3], dropout_p=0.3, seed=fresh.seed)))
# Threads sharing a paged plan: a run points the plan at its q and out and
# uses its one workspace, so two at once got each other's rows. Four threads,
# each run bitwise attend() on its own q (a prompt's worth, so that a run
# takes long enough to overlap another).
tpool = attn.KVPages(heads=HK, key_dim=D, num_pages=64, max_sequences=2)
ta, tb = tpool.create(), tpool.create()
for s_ in (ta, tb):
    rows = rng.standard_normal((300, HK, D)).astype(np.float32)
    tpool.append(s_, rows, rows)
tqs = [rng.standard_normal((96, HQ, D)).astype(np.float32) for _ in range(4)]
twants = [tpool.attend([ta, tb], tq, cu_seqlens_q=[0, 48, 96]) for tq in tqs]
tplan, twrong = tpool.plan([ta, tb], [48, 48], num_heads=HQ), []


def paged_runs(i):
    for it in range(100):
        j = (i + it) % 4
        if not np.array_equal(tplan.run(tqs[j]), twants[j]):
            twrong.append((i, it))


tthreads = [threading.Thread(target=paged_runs, args=(i,)) for i in range(4)]
for t in tthreads:
    t.start()
for t in tthreads:
    t.join()
check("paged_plan_shared_by_threads_runs_each_own_q", not twrong, "%d of 400 runs wrong" % len(twrong))
# The plan keeps a copy of its masks: float32 ones (the pool's dtype) were
# kept by reference, so that the caller's later writes changed the runs.
pmasks = [rng.standard_normal((HQ, 2, pool.length(b))).astype(np.float32), None]
pkept = [pmasks[0].copy(), None]
mplan = pool.plan([b, a], [2, 1], num_heads=HQ, masks=pmasks)
pmasks[0][...] = -np.inf  # every key masked out, had the plan read this
check("paged_plan_keeps_its_masks", np.array_equal(mplan.run(q), pool.attend([b, a], q, cu_seqlens_q=[0, 2, 3],
                                                                              masks=pkept)))
try:
    pool.plan([b, a], [2, 1], num_heads=HQ, dropout_p=1.5)
    check("paged_plan_dropout_refused", False, "no error")
except attn.OptionError as e:
    check("paged_plan_dropout_refused", "dropout_p" in str(e), str(e))
try:
    plan.run(np.ones((4, HQ, D), np.float32))
    check("paged_plan_refuses_other_q", False, "no error")
except attn.PlanError as e:
    check("paged_plan_refuses_other_q", "q" in str(e))
# A plan made before the pool changed is stale: its copied tables may name
# pages a truncate released (here taken again by another sequence's append)
# and its lengths are old. A run raises PlanError, and a plan made again
# gives attend's result.
spool = attn.KVPages(heads=HK, key_dim=D, num_pages=16, max_sequences=4, page_size=16)
sa, sb = spool.create(), spool.create()
sk, sv = rng.standard_normal((40, HK, D)).astype(np.float32), rng.standard_normal((40, HK, D)).astype(np.float32)
spool.append(sa, sk, sv)
sq = rng.standard_normal((1, HQ, D)).astype(np.float32)
splan = spool.plan([sa], [1], num_heads=HQ)
before = splan.run(sq)
spool.truncate(sa, 10)
spool.append(sb, sk, sv)  # takes the pages sa let go
try:
    splan.run(sq)
    check("paged_plan_stale_after_truncate_refused", False, "no error")
except attn.PlanError as e:
    check("paged_plan_stale_after_truncate_refused", "plan again" in str(e), str(e))
again = spool.plan([sa], [1], num_heads=HQ)
check("paged_plan_made_again_runs", np.array_equal(again.run(sq), spool.attend([sa], sq, cu_seqlens_q=[0, 1])) and
      not np.array_equal(again.run(sq), before))

# Keys quantized per channel (key_dtype q4c / q2c, KIVI's keys) with q4_1
# values: the keys as the NumPy reference of attn.h's layout holds them
# (each group of 32 quantized from its f16 keys, the residual in f16), after
# appends in pieces, a fork, a truncation into a group (its kept keys
# become f16 of their dequantized values) and appends that refill it; attend
# bitwise attn.sdpa on the gathered rows, and within the f32 bound of
# PyTorch float64 on the reference's values.
from oracle_quant import Q2C, Q4C, ref_group, ref_group_dequantize  # noqa: E402


def held_keys(k16, code):
    """Keys (H, n, E) f16-exact as a q4c/q2c pool holds them: full groups
    quantized, the rest as they are."""
    out = k16.copy()
    full = k16.shape[1] // 32 * 32
    if full:
        raw = ref_group(np.ascontiguousarray(k16[:, :full]), code)
        out[:, :full] = ref_group_dequantize(raw, code, k16.shape[2]).reshape(k16.shape[0], full, -1)
    return out


def grouped_key_dot_worst(q1, raw, held, wv, code, out, ref):
    """The largest error / attn.h's bound of out (L, Hq, Ev) against ref
    (PyTorch float64 on the held keys), decode scoring the keys quantized per
    channel by integer dot products: per group and query row q' = q·scale ∘ s
    rounded to int8 per block of 32, so that key j's score is off by at most
    Δ_j = Σ_b (max_b |q'| / 127)(1/2 + 2^-10) Σ_(c in b) n_jc
          + (E/16 + 8) 2^-24 Σ_c |q_c| (s_c n_jc + |m_c|)
    (residual rows: f32's 2^-18 Σ |q k|), and out is within (e^(2Δ) - 1)
    max |v| (+ 1e-5 of f32). raw: the groups' bytes (Hk × groups, head-major)."""
    L, Hq, E = q1.shape
    H, S, _ = held.shape
    G = raw.shape[0] // H
    bits = 4 if code == Q4C else 2
    per = 8 // bits
    sc = raw[:, :2 * E].copy().view("<u2").view(np.float16).astype(np.float64)
    mc = raw[:, 2 * E:4 * E].copy().view("<u2").view(np.float16).astype(np.float64)
    packed = raw[:, 4 * E:].reshape(len(raw), 32, E // per)
    n = np.zeros((len(raw), 32, E))
    for k in range(per):
        n[:, :, k::per] = (packed >> (bits * k)) & ((1 << bits) - 1)
    worst = 0.0
    for l in range(L):
        for h in range(Hq):
            kv, seen = h // (Hq // H), S - L + l + 1
            x = (q1[l, h].astype(np.float32) * np.float32(1 / np.sqrt(E))).astype(np.float64)
            delta = []
            for j in range(seen):
                if j < G * 32:
                    g, t = kv * G + j // 32, j % 32
                    qp = (x.astype(np.float32) * sc[g].astype(np.float32)).astype(np.float64)
                    amax = np.abs(qp).reshape(-1, 32).max(axis=1)
                    quant = (amax / 127 * (0.5 + 2.0 ** -10) * n[g, t].reshape(-1, 32).sum(axis=1)).sum()
                    delta.append(quant + (E / 16 + 8) * 2.0 ** -24 * (np.abs(x) * (sc[g] * n[g, t] + np.abs(mc[g]))).sum())
                else:
                    delta.append(2.0 ** -18 * (np.abs(x) * np.abs(held[kv, j])).sum())
            dl = max(delta)
            tol = (np.expm1(2 * dl) + 1e-5) * np.abs(wv[kv, :seen]).max(axis=0) + 1e-30
            worst = max(worst, float((np.abs(out[l, h] - ref[l, h]) / tol).max()))
    return worst


for name, code in (("q4c", Q4C), ("q2c", Q2C)):
    gp = attn.KVPages(heads=2, key_dim=64, value_dim=32, num_pages=12, max_sequences=3, page_size=32, dtype="q4_1",
                      key_dtype=name)
    a = gp.create()
    k1 = (rng.standard_normal((70, 2, 64)) * np.where(np.arange(64) % 16 == 3, 20, 1)).astype(np.float32)
    v1 = rng.standard_normal((70, 2, 32)).astype(np.float32)
    gp.append(a, k1[:7], v1[:7])
    gp.append(a, k1[7:45], v1[7:45])
    b = gp.fork(a)
    gp.append(a, k1[45:], v1[45:])
    k16 = k1.transpose(1, 0, 2).astype(np.float16).astype(np.float32)
    wv = ref_dequantize(ref_quantize(v1.transpose(1, 0, 2).reshape(-1, 32), 10), 10, 32).reshape(2, 70, 32)
    want_a = held_keys(k16, code)
    ga, gva = gp.gather(a)
    gb, _ = gp.gather(b)
    check("kv_pages_python_%s_keys_as_numpy_reference" % name, np.array_equal(ga, want_a) and
          np.array_equal(gva, wv) and np.array_equal(gb, held_keys(k16[:, :45], code)))
    # b cut inside its quantized group 0, then refilled: the kept keys are f16 of their dequantized values
    gp.truncate(b, 20)
    kb = held_keys(k16[:, :45], code)[:, :20].astype(np.float16).astype(np.float32)
    gbt, _ = gp.gather(b)
    check("kv_pages_python_%s_truncate_into_a_group_keeps_f16_of_its_values" % name, np.array_equal(gbt, kb))
    k2 = rng.standard_normal((15, 2, 64)).astype(np.float32)
    gp.append(b, k2, v1[:15])
    kb = held_keys(np.concatenate([kb, k2.transpose(1, 0, 2).astype(np.float16).astype(np.float32)], 1), code)
    gbt, _ = gp.gather(b)
    ga2, _ = gp.gather(a)
    check("kv_pages_python_%s_refilled_group_quantized_again" % name, np.array_equal(gbt, kb) and
          np.array_equal(ga2, want_a))
    q1 = rng.standard_normal((3, 4, 64)).astype(np.float32)
    out = gp.attend(a, q1)
    same = attn.sdpa(q1.transpose(1, 0, 2), ga, gva, causal="bottom-right").transpose(1, 0, 2)
    ref = torch_attend(q1, want_a, wv)
    if os.environ.get("ATTN_QDOT") == "widen":  # the groups widened to f32 rows: bitwise, f32's error
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        check("kv_pages_python_%s_attend_bitwise_sdpa_on_gathered" % name, np.array_equal(out, same))
        check("kv_pages_python_%s_attend_vs_torch_float64" % name, err <= 2e-5, "error %.3g" % err)
    else:  # integer dot products where the CPU has them (or widened): within attn.h's bound
        worst = grouped_key_dot_worst(q1, ref_group(np.ascontiguousarray(k16[:, :64]), code), want_a, wv, code, out, ref)
        check("kv_pages_python_%s_attend_within_key_dot_bound_of_torch_float64" % name, worst <= 1,
              "error/bound %.3g" % worst)
    # a plan of both sequences, named out of id order: its run (q reordered by id) bitwise attend
    q3 = rng.standard_normal((3, 4, 64)).astype(np.float32)
    want3, want3_lse = gp.attend([b, a], q3, cu_seqlens_q=[0, 2, 3], return_lse=True)
    got3, got3_lse = gp.plan([b, a], [2, 1], num_heads=4, return_lse=True).run(q3)
    check("kv_pages_python_%s_plan_bitwise_attend" % name, np.array_equal(got3, want3) and
          np.array_equal(got3_lse, want3_lse))
# KIVI's residual window (residual=R): positions j < 32 floor(n / 32) - R in
# groups, the later ones in f16. rows16 is what the window held of each
# position in f16 (the groups are quantized from it as they leave); a
# truncation that takes groups back turns their kept positions into f16 of
# their dequantized values. A fork, both sides growing past the window, b
# cut back across it and refilled: gathered keys as the reference, a
# untouched by b (b's groups go into its own copies of shared pages), attend
# bitwise attn.sdpa on them (widened) or within the integer kernel's bound.
from oracle_quant import ref_cache_keys as held_window, ref_window_full as window_full  # noqa: E402


for R, name, code in ((64, "q4c", Q4C), (128, "q2c", Q2C)):
    tag = "%s_residual_%d" % (name, R)
    wp = attn.KVPages(heads=2, key_dim=64, value_dim=32, num_pages=40, max_sequences=3, page_size=32, dtype="q4_1",
                      key_dtype=name, residual=R)
    a = wp.create()
    n1 = 300
    k1 = (rng.standard_normal((n1, 2, 64)) * np.where(np.arange(64) % 16 == 3, 20, 1)).astype(np.float32)
    v1 = rng.standard_normal((n1, 2, 32)).astype(np.float32)
    wp.append(a, k1[:7], v1[:7])
    wp.append(a, k1[7:200], v1[7:200])
    b = wp.fork(a)
    wp.append(a, k1[200:], v1[200:])
    rows_a = k1.transpose(1, 0, 2).astype(np.float16).astype(np.float32)
    ga, gva = wp.gather(a)
    gb, _ = wp.gather(b)
    check("kv_pages_python_%s_keys_as_numpy_reference" % tag, np.array_equal(ga, held_window(rows_a, code, R)) and
          np.array_equal(gb, held_window(rows_a[:, :200], code, R)))
    # b cut back across the window: the groups between full(100) and full(200) become f16 rows again
    rows_b = rows_a[:, :100].copy()
    back = held_window(rows_a[:, :200], code, R)[:, :100].astype(np.float16).astype(np.float32)
    lo, hi = window_full(100, R), min(window_full(200, R), 100)
    rows_b[:, lo:hi] = back[:, lo:hi]
    wp.truncate(b, 100)
    gbt, _ = wp.gather(b)
    check("kv_pages_python_%s_truncate_across_the_window" % tag, hi > lo and
          np.array_equal(gbt, held_window(rows_b, code, R)))
    k2 = rng.standard_normal((150, 2, 64)).astype(np.float32)
    wp.append(b, k2, v1[:150])
    rows_b = np.concatenate([rows_b, k2.transpose(1, 0, 2).astype(np.float16).astype(np.float32)], 1)
    gbt, _ = wp.gather(b)
    ga2, _ = wp.gather(a)
    check("kv_pages_python_%s_refilled_past_the_window_parent_untouched" % tag,
          np.array_equal(gbt, held_window(rows_b, code, R)) and np.array_equal(ga2, ga))
    q1 = rng.standard_normal((3, 4, 64)).astype(np.float32)
    out = wp.attend(a, q1)
    wv = ref_dequantize(ref_quantize(v1.transpose(1, 0, 2).reshape(-1, 32), 10), 10, 32).reshape(2, n1, 32)
    want_a = held_window(rows_a, code, R)
    ref = torch_attend(q1, want_a, wv)
    if os.environ.get("ATTN_QDOT") == "widen":
        same = attn.sdpa(q1.transpose(1, 0, 2), ga, gva, causal="bottom-right").transpose(1, 0, 2)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        check("kv_pages_python_%s_attend_bitwise_sdpa_on_gathered" % tag, np.array_equal(out, same))
        check("kv_pages_python_%s_attend_vs_torch_float64" % tag, err <= 2e-5, "error %.3g" % err)
    else:
        raw = ref_group(np.ascontiguousarray(rows_a[:, :window_full(n1, R)]), code)
        worst = grouped_key_dot_worst(q1, raw, want_a, wv, code, out, ref)
        check("kv_pages_python_%s_attend_within_key_dot_bound_of_torch_float64" % tag, worst <= 1,
              "error/bound %.3g" % worst)
    # a plan of both sequences (the view carries the window) bitwise attend
    q3 = rng.standard_normal((3, 4, 64)).astype(np.float32)
    want3 = wp.attend([b, a], q3, cu_seqlens_q=[0, 2, 3])
    check("kv_pages_python_%s_plan_bitwise_attend" % tag,
          np.array_equal(wp.plan([b, a], [2, 1], num_heads=4).run(q3), want3))
    # a pool of the same sequences with another window: the plan refuses it
    other = attn.KVPages(heads=2, key_dim=64, value_dim=32, num_pages=40, max_sequences=3, page_size=32,
                         dtype="q4_1", key_dtype=name, residual=R - 32)
    oa = other.create()
    other.append(oa, k1, v1)
    ob = other.fork(oa)
    other.truncate(ob, 250)
    try:
        wp.plan([a], [1], num_heads=4).run(q1[:1], pool=other)
        check("kv_pages_python_%s_plan_refuses_another_window" % tag, False, "ran")
    except attn.PlanError as e:
        check("kv_pages_python_%s_plan_refuses_another_window" % tag, "residual" in str(e), str(e))
for name, args in (("residual_48", dict(residual=48)), ("residual_past_1024", dict(residual=1056)),
                   ("residual_without_key_dtype", dict(residual=64, key_dtype=None))):
    try:
        attn.KVPages(**{"heads": 1, "key_dim": 64, "num_pages": 2, "max_sequences": 1, "page_size": 32,
                        "key_dtype": "q4c", **args})
        check("kv_pages_python_%s_refused" % name, False, "accepted")
    except attn.OptionError as e:
        check("kv_pages_python_%s_refused" % name, "residual" in str(e), str(e))
# A plan over a q4c pool run on another layer's pool kept in step (its own
# residual rows): bitwise that pool's attend; a sequence named twice refused.
layers = []
for _ in range(2):
    lp_ = attn.KVPages(heads=2, key_dim=64, value_dim=32, num_pages=12, max_sequences=3, page_size=32, dtype="q4_1",
                       key_dtype="q4c")
    la, lb = lp_.create(), lp_.create()
    for s_, n_ in ((la, 45), (lb, 20)):
        lp_.append(s_, rng.standard_normal((n_, 2, 64)).astype(np.float32),
                   rng.standard_normal((n_, 2, 32)).astype(np.float32))
    layers.append(lp_)
ql = rng.standard_normal((3, 4, 64)).astype(np.float32)
lplan = layers[0].plan([lb, la], [2, 1], num_heads=4)
check("kv_pages_python_q4c_plan_runs_each_layers_pool",
      all(np.array_equal(lplan.run(ql, pool=p_), p_.attend([lb, la], ql, cu_seqlens_q=[0, 2, 3])) for p_ in layers))
try:
    layers[0].plan([la, la], [1, 1], num_heads=4)
    check("kv_pages_python_q4c_plan_refuses_a_sequence_twice", False, "planned")
except ValueError:
    check("kv_pages_python_q4c_plan_refuses_a_sequence_twice", True)
# Its masks, matched to the sequences by id: one mask too few left the
# last sequence unmasked and one too many was dropped, silently, where
# every other pool's plan counts them. Counted alike; the right count
# still runs bitwise attend with those masks.
lmask = np.zeros((4, 1, 45), bool)
lmask[..., :9] = True
for label, given in (("too_few", [None]), ("too_many", [None, lmask, None])):
    try:
        layers[0].plan([lb, la], [1, 1], num_heads=4, masks=given)
        why = "planned"
    except attn.ArgumentError as e:
        why = "" if "masks has %d entr" % len(given) in str(e) and "for 2 sequences" in str(e) else str(e)
    check("kv_pages_python_q4c_plan_refuses_masks_%s" % label, not why, why)
check("kv_pages_python_q4c_plan_masks_bitwise_attend",
      np.array_equal(layers[0].plan([lb, la], [1, 1], num_heads=4, masks=[None, lmask]).run(ql[:2]),
                     layers[0].attend([lb, la], ql[:2], cu_seqlens_q=[0, 1, 2], masks=[None, lmask])))
# A plan run on a pool whose keys are stored otherwise (key_dtype, the
# Hadamard rotation) than its own pool's: the run reads the pages in the
# plan's format, so f32 rows over q4c groups gave NaN and q8 keys turned by
# Hadamard read unturned gave other scores, silently. Refused (DtypeError).
kx, vx = (rng.standard_normal((70, 2, 64)).astype(np.float32) for _ in range(2))
qx = rng.standard_normal((1, 4, 64)).astype(np.float32)
formats = {}
for label, kw in (("f32", {}), ("q4c", {"key_dtype": "q4c"}), ("q8", {"dtype": "q8"}),
                  ("q8_hadamard", {"dtype": "q8", "hadamard": True})):
    fp_ = attn.KVPages(heads=2, key_dim=64, num_pages=8, max_sequences=1, page_size=32, **kw)
    fs_ = fp_.create()
    fp_.append(fs_, kx, vx)
    formats[label] = (fp_, fs_)
for planned, other in (("f32", "q4c"), ("q4c", "f32"), ("q8", "q8_hadamard"), ("q8_hadamard", "q8")):
    fp_, fs_ = formats[planned]
    try:
        got = fp_.plan([fs_], [1], num_heads=4).run(qx, pool=formats[other][0])
        why = "ran: %s" % ("NaN" if np.isnan(got).any() else "max diff %.3g from its own attend"
                           % np.abs(got - formats[other][0].attend(formats[other][1], qx)).max())
    except attn.AttnError as e:
        why = "" if isinstance(e, attn.DtypeError) and "differs from the plan's pool's" in str(e) else \
            "%s: %s" % (type(e).__name__, e)
    check("kv_pages_python_%s_plan_refuses_a_%s_pool" % (planned, other), not why, why)
# A q4c plan names sequences by id, and reads id i's residual rows at row i
# of the pool given: a pool of fewer sequences was read past its residual
# rows (NaN here; past its memory for a large id). Refused.
big_ids = attn.KVPages(heads=2, key_dim=64, num_pages=8, max_sequences=8, page_size=32, key_dtype="q4c")
last = [big_ids.create() for _ in range(8)][-1]
big_ids.append(last, kx, vx)
small_ids, _ = formats["q4c"]  # one sequence, the same rows, page size and pages
try:
    got = big_ids.plan([last], [1], num_heads=4).run(qx, pool=small_ids)
    why = "ran: %s" % ("NaN" if np.isnan(got).any() else "a result")
except ValueError as e:
    why = "" if "holds 1 sequence;" in str(e) else "%s: %s" % (type(e).__name__, e)  # not "1 sequences"
check("kv_pages_python_q4c_plan_refuses_a_pool_of_fewer_sequences", not why, why)
# The layer's step over a contiguous cache with q4c keys (attn_mha_cached_batch writes each row
# with the cache's own writer) bitwise the pool's step with the same keys (attn_mha_paged).
E_, HQ_, D_ = 64, 2, 32
lp = {"num_heads": HQ_, "num_kv_heads": 1}
lp.update({n: (rng.standard_normal(sh) / 8).astype(np.float32) for n, sh in (
    ("q_proj_weight", (E_, E_)), ("k_proj_weight", (D_, E_)), ("v_proj_weight", (D_, E_)), ("out_proj_weight", (E_, E_)))})
for R, n0 in ((0, 40), (64, 130)):  # with a residual window of 64 too: 130 positions, one group left it
    kc = attn.KVCache(batch=2, heads=1, capacity=160, key_dim=D_, dtype="q4_1", key_dtype="q4c", residual=R)
    kp = attn.KVPages(heads=1, key_dim=D_, num_pages=10, max_sequences=2, page_size=32, dtype="q4_1", key_dtype="q4c",
                      residual=R)
    sa, sb = kp.create(), kp.create()
    same = True
    for xs in ([rng.standard_normal((n0, E_)), rng.standard_normal((3, E_))], [rng.standard_normal((1, E_))] * 2):
        xs = [x.astype(np.float32) for x in xs]
        oc = kc.mha_step([0, 1], xs, lp, rope={"base": 10000.0})
        op = kp.mha_step([sa, sb], xs, lp, rope={"base": 10000.0})
        same &= all(np.array_equal(a, b) for a, b in zip(oc, op))
    check("kv_cache_python_q4c%s_step_bitwise_pool_step" % ("_residual_%d" % R if R else ""),
          same and list(kc.lengths) == [n0 + 1, 4])
for name, cls, args in (("q4c_page_size_16", attn.ShapeError, dict(page_size=16, key_dtype="q4c")),
                        ("unknown_key_dtype", attn.OptionError, dict(page_size=32, key_dtype="q8")),
                        ("q2c_key_dim_66", attn.ShapeError, dict(page_size=32, key_dtype="q2c", key_dim=66))):
    try:
        attn.KVPages(**{"heads": 1, "key_dim": 64, "num_pages": 2, "max_sequences": 1, **args})
        check("kv_pages_python_%s_refused" % name, False, "accepted")
    except cls as e:
        check("kv_pages_python_%s_refused" % name, bool(str(e)))
def vm_flags(addr):
    """The VmFlags of the mapping holding addr, from /proc/self/smaps (None: not found)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line: "lo-hi perms ..."
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return None


# A pool of 2 MiB or more on huge pages (_memory.kv_zeros): 4 MiB of f32 pages.
if not sys.platform.startswith("linux"):
    no_huge_pages = "not Linux (no MADV_HUGEPAGE, no /proc/self/smaps)"
elif not hasattr(mmap, "MADV_HUGEPAGE"):
    no_huge_pages = "this Python's mmap has no MADV_HUGEPAGE"
elif not os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
    no_huge_pages = "this kernel has no transparent huge pages"
else:
    no_huge_pages = None
if no_huge_pages:
    print("skip kv_pages_python_huge_pages: " + no_huge_pages)
else:
    big = attn.KVPages(heads=2, key_dim=64, num_pages=256, max_sequences=2)
    addr = big.memory.ctypes.data
    check("kv_pages_python_huge_pages_pool_over_2_mib", big.memory.nbytes >= 2 << 20, str(big.memory.nbytes))
    check("kv_pages_python_huge_pages_2_mib_aligned", addr % (2 << 20) == 0, "address %#x" % addr)
    flags = vm_flags(addr)
    check("kv_pages_python_huge_pages_advised", flags is not None and "hg" in flags, "VmFlags %s" % flags)
    ba = big.create()
    kb = rng.standard_normal((300, 2, 64)).astype(np.float32)
    vb = rng.standard_normal((300, 2, 64)).astype(np.float32)
    big.append(ba, kb, vb)
    bb = big.fork(ba)
    big.append(bb, kb[:5], vb[:5])
    gk, gv = big.gather(bb)
    qb = rng.standard_normal((2, 4, 64)).astype(np.float32)
    sk = np.concatenate([kb, kb[:5]]).transpose(1, 0, 2)
    check("kv_pages_python_huge_pages_pool_stores",
          np.array_equal(gk, sk) and np.array_equal(gv, np.concatenate([vb, vb[:5]]).transpose(1, 0, 2)))
    ref = torch_attend(qb, gk, gv)
    rel = float(np.abs(big.attend(bb, qb) - ref).max() / np.abs(ref).max())
    check("kv_pages_python_huge_pages_pool_attends", rel <= 2e-5, "relative error %g" % rel)
    small = attn.KVPages(heads=1, key_dim=8, num_pages=4, max_sequences=1)
    check("kv_pages_python_small_pool_plain_numpy", small.memory.base is None)

# A contiguous cache of 2 MiB or more on huge pages too: 2 rows of 20000
# positions (2.5 MiB of f32 keys and values); its steps bitwise a small
# cache's on the same rows, and the float64 layer's within the f32 bound.
if no_huge_pages:
    print("skip kv_cache_python_huge_pages: " + no_huge_pages)
else:
    bigc, smallc = attn.KVCache(2, HK, 20000, D), attn.KVCache(2, HK, 40, D)
    addr = bigc.memory.ctypes.data
    check("kv_cache_python_huge_pages_cache_over_2_mib", bigc.memory.nbytes >= 2 << 20, str(bigc.memory.nbytes))
    check("kv_cache_python_huge_pages_2_mib_aligned", addr % (2 << 20) == 0, "address %#x" % addr)
    flags = vm_flags(addr)
    check("kv_cache_python_huge_pages_advised", flags is not None and "hg" in flags, "VmFlags %s" % flags)
    check("kv_cache_python_huge_pages_zeroed_uint8", bigc.memory.dtype == np.uint8 and not bigc.memory[-4096:].any())
    hc = [np.zeros((0, E), np.float32), np.zeros((0, E), np.float32)]
    worst, same = 0.0, True
    for la, lb in steps:
        xa, xb = rng.standard_normal((la, E)).astype(np.float32), rng.standard_normal((lb, E)).astype(np.float32)
        ba, bb = bigc.mha_step([1, 0], [xa, xb], layer)
        sa, sb = smallc.mha_step([1, 0], [xa, xb], layer)
        same &= np.array_equal(ba, sa) and np.array_equal(bb, sb)
        for i, x, o in ((1, xa, ba), (0, xb, bb)):
            ref = layer_reference(hc[i], x)
            worst = max(worst, float(np.abs(o - ref).max() / max(np.abs(ref).max(), 1e-30)))
            hc[i] = np.concatenate([hc[i], x])
    check("kv_cache_python_huge_pages_steps_equal_small_cache", same and list(bigc.lengths) == [14, 11],
          "lengths %s" % list(bigc.lengths))
    check("kv_cache_python_huge_pages_vs_float64_layer", worst <= 2e-5, "error %.3g" % worst)
    check("kv_cache_python_small_cache_plain_numpy", smallc.memory.base is None)

# kv_zeros's ways back to plain NumPy, forced by stand-ins for the mmap and
# sys modules it reads: no mapping (mmap raises), advice refused (a kernel
# without THP: madvise raises), no MADV_HUGEPAGE, not Linux. Each gives
# exactly size zeroed, writable bytes of its own (np.zeros: no base), and a
# pool built on them stores and attends bitwise as one on huge pages does.
from attn import _memory  # noqa: E402


class FakeMmap:
    """The mmap module's names kv_zeros uses, each replaceable."""
    MAP_PRIVATE, MAP_ANONYMOUS = mmap.MAP_PRIVATE, mmap.MAP_ANONYMOUS
    MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)

    def __init__(self, mapper):
        self.mmap = mapper


def no_mapping(*args, **kwargs):
    raise OSError(12, "Cannot allocate memory")


class Mapping(mmap.mmap):
    """A real anonymous mapping whose madvise is refused (EINVAL)."""
    def madvise(self, *args):
        raise OSError(22, "Invalid argument")


class NoAdvice:
    MAP_PRIVATE, MAP_ANONYMOUS = mmap.MAP_PRIVATE, mmap.MAP_ANONYMOUS
    mmap = mmap.mmap


class NotLinux:
    platform = "darwin"


fallbacks = (("mmap_fails", "mmap", FakeMmap(no_mapping)),
             ("madvise_refused", "mmap", FakeMmap(Mapping)),
             ("no_madv_hugepage", "mmap", NoAdvice),
             ("not_linux", "sys", NotLinux))
size = (3 << 20) + 4096 + 7  # over 2 MiB and no multiple of a page: every way should take it
for name, attr, stand_in in fallbacks:
    real = getattr(_memory, attr)
    setattr(_memory, attr, stand_in)
    try:
        m = _memory.kv_zeros(size)
        fb = attn.KVPages(heads=2, key_dim=64, num_pages=256, max_sequences=1)
    finally:
        setattr(_memory, attr, real)
    ok = (m.dtype == np.uint8 and m.shape == (size,) and m.base is None and m.flags.writeable
          and not m.any())
    m[-1] = 1  # its own bytes: writable to the last
    check("kv_zeros_fallback_%s_plain_zeros" % name, ok and fb.memory.base is None,
          "dtype %s shape %s base %r" % (m.dtype, m.shape, type(m.base)))
    fa = fb.create()
    kf = rng.standard_normal((40, 2, 64)).astype(np.float32)
    vf = rng.standard_normal((40, 2, 64)).astype(np.float32)
    fb.append(fa, kf, vf)
    gk, gv = fb.gather(fa)
    qf = rng.standard_normal((2, 4, 64)).astype(np.float32)
    want = attn.sdpa(qf.transpose(1, 0, 2), gk, gv, causal="bottom-right").transpose(1, 0, 2)
    check("kv_zeros_fallback_%s_pool_attends" % name,
          np.array_equal(gk, kf.transpose(1, 0, 2)) and np.array_equal(gv, vf.transpose(1, 0, 2))
          and np.array_equal(fb.attend(fa, qf), want))
if not no_huge_pages:  # the way that takes: odd sizes too start on a 2 MiB boundary and end where asked
    m = _memory.kv_zeros(size)
    check("kv_zeros_odd_size_aligned", m.shape == (size,) and m.ctypes.data % (2 << 20) == 0
          and m.base is not None and not m.any())
# Boolean options take a bool (or a NumPy bool) only: they were read by
# truthiness, so hadamard="False", head_major="no" or return_lse="no" was
# true, silently (a pool laid out head-major, a tuple where out was wanted).
bp = attn.KVPages(heads=2, key_dim=32, num_pages=8, max_sequences=2, dtype="q8", hadamard=np.bool_(True),
                  head_major=np.bool_(False))
bseq = bp.create()
bp.append(bseq, rng.standard_normal((3, 2, 32)).astype(np.float32), rng.standard_normal((3, 2, 32)).astype(np.float32))
bq = rng.standard_normal((1, 2, 32)).astype(np.float32)
bc = attn.KVCache(batch=1, heads=2, capacity=4, key_dim=32, dtype="q8", hadamard=True)
bc.append(np.zeros((1, 2, 1, 32), np.float32), np.zeros((1, 2, 1, 32), np.float32))
check("bool_options_numpy_bools_taken", bp._desc.hadamard == 1 and bp._desc.head_major == 0 and
      isinstance(bp.attend(bseq, bq, return_lse=np.bool_(True)), tuple))
bool_calls = {
    "KVPages_hadamard": lambda x: attn.KVPages(heads=2, key_dim=32, num_pages=8, max_sequences=2, dtype="q8",
                                               hadamard=x),
    "KVPages_head_major": lambda x: attn.KVPages(heads=2, key_dim=32, num_pages=8, max_sequences=2, head_major=x),
    "KVCache_hadamard": lambda x: attn.KVCache(batch=1, heads=2, capacity=4, key_dim=32, dtype="q8", hadamard=x),
    "KVPages_attend_return_lse": lambda x: bp.attend(bseq, bq, return_lse=x),
    "KVPages_plan_return_lse": lambda x: bp.plan([bseq], [1], 2, return_lse=x),
    "KVCache_attend_return_lse": lambda x: bc.attend(np.zeros((1, 2, 1, 32), np.float32), return_lse=x),
    "Plan_return_lse": lambda x: attn.Plan(np.zeros((2, 3, 8), np.float32), np.zeros((2, 4, 8), np.float32),
                                           np.zeros((2, 4, 8), np.float32), return_lse=x),
    # attn.sdpa and attn.sdpa_varlen read it by truthiness: "no" gave (out, lse)
    "sdpa_return_lse": lambda x: attn.sdpa(np.zeros((2, 3, 8), np.float32), np.zeros((2, 4, 8), np.float32),
                                           np.zeros((2, 4, 8), np.float32), return_lse=x),
    "sdpa_varlen_return_lse": lambda x: attn.sdpa_varlen(np.zeros((3, 2, 8), np.float32),
                                                         np.zeros((4, 2, 8), np.float32),
                                                         np.zeros((4, 2, 8), np.float32), [0, 3], [0, 4], return_lse=x),
}
for name, call in bool_calls.items():
    said = []
    for x in ("False", "no", 0, 1, None, 1.0):
        try:
            call(x)
            said.append("%r: no error" % (x,))
        except TypeError as e:
            if "must be a bool" not in str(e):
                said.append("%r: %s" % (x, e))
        except Exception as e:  # noqa: BLE001 -- which error is what is checked
            said.append("%r: %s: %s" % (x, type(e).__name__, e))
    check("bool_option_refuses_non_bools_%s" % name, not said, "; ".join(said))

# pool.memory and cache.memory are the library's bytes: read-only from
# Python (a write corrupted the pages, tables and counts), and not
# reassignable; reading them (bytes, address, sharing with a view) is as before.
# A plan's memory (attn.Plan, KVPages.plan) alike: it was a plain attribute,
# writable, and another array put in its place let the plan's bytes go.
mq, mk, mv = (rng.standard_normal(sh).astype(np.float32) for sh in ((2, 3, 8), (2, 4, 8), (2, 4, 8)))
mplan, mpaged = attn.Plan(mq, mk, mv), bp.plan([bseq], [1], 2)
for label, obj in (("pool", bp), ("cache", bc), ("plan", mplan), ("paged_plan", mpaged)):
    why = []
    held = obj.memory.tobytes()
    try:
        obj.memory[:64] = 0xff
        why.append("a write went through")
    except ValueError:
        pass
    try:
        obj.memory = np.zeros(8, np.uint8)
        why.append("reassigned")
    except AttributeError:
        pass
    if obj.memory.tobytes() != held or obj.memory.dtype != np.uint8:
        why.append("the bytes changed")
    check("%s_memory_read_only" % label, not why, ", ".join(why))
try:  # the plans still run, bitwise the unplanned calls
    why = "" if (np.array_equal(mplan.run(mq, mk, mv), attn.sdpa(mq, mk, mv)) and
                 np.array_equal(mpaged.run(bq), bp.attend(bseq, bq))) else "not the unplanned calls' outputs"
except attn.AttnError as e:  # a plan whose bytes were written or let go
    why = "%s: %s" % (type(e).__name__, e)
check("plans_run_after_memory_refused", not why, why)
fc = attn.KVCache(batch=1, heads=2, capacity=4, key_dim=8)
fc.append(np.ones((1, 2, 2, 8), np.float32), np.ones((1, 2, 2, 8), np.float32))
vk, _ = fc.view()
try:
    vk.flags.writeable = True  # a view of the read-only bytes cannot be made writable
    why = "the view was made writable"
except ValueError:
    why = ""
check("cache_view_cannot_be_made_writable",
      not why and np.shares_memory(vk, fc.memory) and np.array_equal(vk, np.ones((1, 2, 2, 8), np.float32)), why)

# A paged plan reads its q's layout only: no batch-sized q of zeros is
# written to make it (np.zeros of the whole step's q was).
zp = attn.KVPages(heads=2, key_dim=16, num_pages=16, max_sequences=2)
zs = zp.create()
zp.append(zs, rng.standard_normal((5, 2, 16)).astype(np.float32), rng.standard_normal((5, 2, 16)).astype(np.float32))
zeros_made, real_zeros = [], np.zeros


def counting_zeros(shape, *a, **kw):
    zeros_made.append(tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape)
    return real_zeros(shape, *a, **kw)


np.zeros = counting_zeros
try:
    zplan = zp.plan([zs], [64], 4)
finally:
    np.zeros = real_zeros
zq = rng.standard_normal((64, 4, 16)).astype(np.float32)
check("paged_plan_makes_no_zero_q", (64, 4, 16) not in zeros_made and
      np.array_equal(zplan.run(zq), zp.attend(zs, zq, causal="bottom-right")), str(zeros_made))

# The storage formats come from the library (attn_quant_format, read here
# through ctypes apart from the binding): every format it lists as rows is
# a dtype of a pool and a cache, every one it lists as groups a key_dtype,
# and an unknown dtype's message lists those and the float names, in the
# library's order; the binding's dtype codes are the library's names.
from attn import _lib  # noqa: E402

listed, fmt, kind, mult = [], ctypes.c_int(), ctypes.c_int(), ctypes.c_int64()
while not _lib.LIB.attn_quant_format(ctypes.byref(fmt), ctypes.byref(kind), ctypes.byref(mult), len(listed), None):
    listed.append((_lib.LIB.attn_dtype_name(fmt.value).decode(), kind.value, mult.value))
check("storage_formats_as_the_library_lists", [(n, k, m) for n, _, k, m in _lib.QUANT_FORMATS] == listed and
      [n for n, _, _ in listed] == ["q8", "q4", "q4_1", "e4m3", "e5m2", "q4c", "q2c"], str(listed))
check("storage_dtype_codes_are_the_libraries",
      [_lib.LIB.attn_dtype_name(c).decode() for c in (_lib.F32, _lib.F64, _lib.BOOL, _lib.F16, _lib.BF16)] ==
      ["f32", "f64", "bool", "f16", "bf16"])
rows_names = [n for n, k, _ in listed if k == _lib.QUANT_ROWS]
group_names = [n for n, k, _ in listed if k == _lib.QUANT_GROUPS]
taken = []
for n, k, m in listed:
    dim = 64 * m  # a multiple of every format's
    if k == _lib.QUANT_ROWS:
        sp = attn.KVPages(heads=1, key_dim=dim, num_pages=2, max_sequences=1, dtype=n)
        sc = attn.KVCache(1, 1, 32, dim, dtype=n)
        taken.append(sp._desc.dtype == sc._desc.dtype == [c for x, c, _, _ in _lib.QUANT_FORMATS if x == n][0])
    else:
        sp = attn.KVPages(heads=1, key_dim=dim, num_pages=2, max_sequences=1, page_size=32, key_dtype=n)
        taken.append(sp._desc.key_dtype == [c for x, c, _, _ in _lib.QUANT_FORMATS if x == n][0])
check("storage_every_listed_format_taken", all(taken) and len(taken) == len(listed), str(taken))
check("storage_numpy_dtype_types_taken",
      attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1, dtype=np.float16)._desc.dtype == _lib.F16 and
      attn.KVCache(1, 1, 4, 4, dtype=np.float64)._desc.dtype == _lib.F64 and
      attn.KVCache(1, 1, 4, 4, dtype=np.dtype(np.float32))._desc.dtype == _lib.F32)


def quoted(names):
    return ", ".join(names[:-1]) + " or " + names[-1]


for name, call, want in (
        ("storage_unknown_pool_dtype_lists_the_formats",
         lambda: attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1, dtype="q5"),
         "dtype is 'q5': " + quoted(["'float32'", "'float16'", "'bfloat16'"] + ["'%s'" % n for n in rows_names])),
        ("storage_unknown_cache_dtype_lists_the_formats", lambda: attn.KVCache(1, 1, 4, 4, dtype="f32"),
         "dtype is 'f32': " + quoted(["'float32'", "'float16'", "'bfloat16'", "'float64'"] +
                                     ["'%s'" % n for n in rows_names])),
        ("storage_unknown_pool_dtype_float64_refused",
         lambda: attn.KVPages(heads=1, key_dim=4, num_pages=2, max_sequences=1, dtype=np.float64),
         "dtype is <class 'numpy.float64'>: 'float32', 'float16', 'bfloat16', 'q8', 'q4', 'q4_1', 'e4m3' or 'e5m2'"),
        ("storage_unknown_key_dtype_lists_the_formats", lambda: attn.KVCache(1, 1, 32, 4, key_dtype="q4"),
         "key_dtype is 'q4': " + quoted(["None (keys in dtype)"] + ["'%s'" % n for n in group_names]))):
    try:
        call()
        check(name, False, "accepted")
    except attn.OptionError as e:
        check(name, str(e).startswith(want), "%s; wanted %s" % (e, want))
print("# kv pages from python: %d passed, %d failed" % (r.passed, r.failed))
sys.exit(1 if r.failed else 0)
