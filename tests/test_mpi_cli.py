"""test_mpi_cli.py -- `mpirun -np N attn-mpi sdpa` on 1 to 4 ranks (loopback,
--oversubscribe): each rank reads its shard with MPI-IO and all write one
output. Against `attn sdpa` on the unsharded inputs and against PyTorch
float64 (oracle.py's reference): causal in both alignments and not, GQA with
broadcast batches, bool and float masks, both layouts, f64 and f32. Then bad
input (one error line, printed once, no output file); ranks given different
command lines or files (one error naming what differs, no hang); and a rank
that stops or is killed mid-run, or stops just before any collective of the
command: the others end with one error naming what timed out, within the
timeout and a few seconds.

Usage: test_mpi_cli.py BUILD_DIR"""
import os
import re
import shutil
import stat
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scratch import scratch_dir  # noqa: E402
from seeding import test_seed  # noqa: E402
from clicheck import RANKS, at_rank, rank_case_problems  # noqa: E402
from oracle import reference  # noqa: E402
from torch_attention import Reporter  # noqa: E402
from oracle_backward import reference as backward_reference  # noqa: E402
from oracle_variants import paper_slopes  # noqa: E402


def torch_variants(q, k, v, causal, variants):
    """PyTorch float64's output and lse with the score variants."""
    out_shape = np.broadcast_shapes(q.shape[:-3], k.shape[:-3]) + q.shape[-3:-1] + v.shape[-1:]
    *_, out, _, lse = backward_reference(q, k, v, np.zeros(out_shape), None, causal, None, variants=variants)
    return out, lse


class Check(Reporter):
    def __init__(self, build):
        super().__init__()
        self.attn = os.path.join(build, "attn")
        self.mpi = os.path.abspath(os.path.join(build, "attn-mpi"))  # absolute: the ranks may run elsewhere
        self.dir = scratch_dir("attn-mpi-")
        self.mpirun = ["mpirun", "-q", "--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, **arrays):
        for name, a in arrays.items():
            np.save(self.path(name + ".npy"), a)

    def run_mpi(self, np_, args, env=None, timeout=120):
        return subprocess.run(self.mpirun + ["-np", str(np_), self.mpi, "sdpa"] + args, capture_output=True, text=True,
                              env=dict(os.environ, **(env or {})), timeout=timeout)

    def case(self, name, q, k, v, flags=(), mask=None, causal=0, tol=1e-13, scale=None, mpi_flags=()):
        """attn-mpi on 1..4 ranks equals attn sdpa, and PyTorch float64."""
        self.save(q=q, k=k, v=v)
        common = ["-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v", self.path("v.npy")] + list(flags)
        if mask is not None:
            self.save(m=mask)
            common += ["-m", self.path("m.npy")]
        r = subprocess.run([self.attn, "sdpa"] + common + ["-o", self.path("ref.npy"), "--lse", self.path("ref_lse.npy")],
                           capture_output=True, text=True)
        if r.returncode:
            return self.report(name, "attn sdpa failed: " + r.stderr.strip())
        ref, ref_lse = np.load(self.path("ref.npy")), np.load(self.path("ref_lse.npy"))
        torch_out = reference(q, k, v, mask, causal, scale)[0]
        self.ranks_agree(name, common + list(mpi_flags), ref, ref_lse, torch_out, tol)

    def ranks_agree(self, name, flags, ref, ref_lse, torch_out, tol):
        """attn-mpi sdpa with flags on 1..4 ranks: its output within tol of
        attn sdpa's (ref) and of PyTorch float64's (f32: 1e-4), its lse of
        attn sdpa's, with -inf in the same rows."""
        for n in (1, 2, 3, 4):
            out, lse = self.path("out%d.npy" % n), self.path("lse%d.npy" % n)
            r = self.run_mpi(n, flags + ["-o", out, "--lse", lse])
            if r.returncode:
                self.report("%s_np%d" % (name, n), "attn-mpi failed: " + r.stderr.strip())
                continue
            got, got_lse = np.load(out), np.load(lse)
            scale = max(np.abs(ref).max(), 1e-300)
            e_attn = np.abs(got - ref).max() / scale
            e_torch = np.abs(got.astype(np.float64) - torch_out).max() / scale
            fin = np.isfinite(ref_lse)
            e_lse = np.abs(got_lse[fin] - ref_lse[fin]).max() if fin.any() else 0.0
            same_dead = np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse))
            torch_tol = tol if got.dtype == np.float64 else 1e-4
            ok = e_attn <= tol and e_torch <= torch_tol and e_lse <= 1e-12 * (1 if got.dtype == np.float64 else 1e7) \
                and same_dead and got.dtype == ref.dtype and got.shape == ref.shape
            self.report("%s_np%d" % (name, n), "" if ok else "vs attn sdpa %.3g, vs torch %.3g, lse %.3g, dead rows %s"
                        % (e_attn, e_torch, e_lse, same_dead))

    def variant_case(self, name, q, k, v, causal, variants, tol=1e-13):
        """The score variants (--softcap, --alibi-slopes or --alibi, --window,
        --sinks, --rope...) on 1..4 ranks: equal to attn sdpa given the same
        flags, and to PyTorch float64 on the variants written from their
        definitions (oracle_backward.reference)."""
        self.save(q=q, k=k, v=v)
        flags = ["-q", self.path("q.npy"), "-k", self.path("k.npy"), "-v", self.path("v.npy")]
        flags += [[], ["--causal"], ["--causal=bottom-right"]][causal]
        if "softcap" in variants:
            flags += ["--softcap", repr(variants["softcap"])]
        if "window" in variants:
            flags += ["--window", str(variants["window"])]
        if "slopes" in variants:
            if variants.get("paper"):
                flags += ["--alibi"]
            else:
                self.save(slopes=variants["slopes"])
                flags += ["--alibi-slopes", self.path("slopes.npy")]
        if "sinks" in variants:
            self.save(sinks=variants["sinks"])
            flags += ["--sinks", self.path("sinks.npy")]
        if "rope" in variants:
            layout, base, dim, offset = variants["rope"]
            flags += ["--rope", ["halves", "interleaved"][layout], "--rope-base", repr(base), "--rope-offset", str(offset)]
            flags += ["--rope-dim", str(dim)] if dim else []
        r = subprocess.run([self.attn, "sdpa"] + flags + ["-o", self.path("ref.npy"), "--lse", self.path("ref_lse.npy")],
                           capture_output=True, text=True)
        if r.returncode:
            return self.report(name, "attn sdpa failed: " + r.stderr.strip())
        ref, ref_lse = np.load(self.path("ref.npy")), np.load(self.path("ref_lse.npy"))
        oracle = {key: val for key, val in variants.items() if key != "paper"}
        torch_out, torch_lse = torch_variants(q, k, v, causal, oracle)
        fin = np.isfinite(torch_lse)  # attn sdpa's lse with the variants, against their definitions
        e_lse = np.abs(ref_lse[fin] - torch_lse[fin]).max() if fin.any() else 0.0
        if e_lse > (1e-12 if ref.dtype == np.float64 else 1e-5) or not np.array_equal(np.isneginf(ref_lse), ~fin):
            return self.report(name, "attn sdpa's lse differs from PyTorch's by %.3g" % e_lse)
        self.ranks_agree(name, flags, ref, ref_lse, torch_out, tol)

    def run_ranks(self, np_, odd, args, odd_args, odd_files):
        """Rank `odd` runs attn-mpi sdpa with odd_args, the others with args,
        through a wrapper as mpirun's program that picks the rank's command
        line by OMPI_COMM_WORLD_RANK and starts it in the rank's directory:
        a directory of links to q.npy, k.npy, v.npy and m.npy, where
        odd_files (name -> array, or None for no such file) stand in for
        them on rank `odd` only, like a node with other copies of the files.
        The finished process, or None when it hangs past 40 s."""
        wrapper = self.path("rank_args.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\n# This rank\'s command line (ARGS.RANK, else ARGS), run in its directory (DIR.RANK, else DIR).\n'
                    'a="$0.args.${OMPI_COMM_WORLD_RANK:?}"; [ -f "$a" ] || a="$0.args"\n'
                    'd="$0.dir.$OMPI_COMM_WORLD_RANK"; [ -d "$d" ] || d="$0.dir"\n'
                    'cd "$d" || exit 9\nIFS=\'\n\'\nexec $(cat "$a")\n')
        os.chmod(wrapper, 0o755)
        for stale in os.listdir(self.dir):
            if stale.startswith("rank_args.sh."):
                stale = self.path(stale)
                shutil.rmtree(stale) if os.path.isdir(stale) else os.remove(stale)
        for d, files in ((wrapper + ".dir", {}), ("%s.dir.%d" % (wrapper, odd), odd_files)):
            os.makedirs(d)
            for n in ("q.npy", "k.npy", "v.npy", "m.npy"):
                if n not in files:
                    os.symlink(self.path(n), os.path.join(d, n))
                elif files[n] is not None:
                    np.save(os.path.join(d, n), files[n])
        for path, a in ((wrapper + ".args", args), ("%s.args.%d" % (wrapper, odd), odd_args)):
            with open(path, "w") as f:
                # A short wait, unless the case sets its own (given twice, it would be refused)
                wait = [] if "--timeout" in a else ["--timeout", "5"]
                f.write("\n".join([self.mpi, "sdpa"] + wait + a) + "\n")
        try:
            return subprocess.run(self.mpirun + ["-np", str(np_), wrapper], capture_output=True, text=True, timeout=40)
        except subprocess.TimeoutExpired:
            return None

    def differ(self, name, np_, odd, args, odd_args, want, odd_files):
        """One error line naming what differs, printed once, within the
        timeout, and no output file."""
        for stale in os.listdir(self.dir):  # a case before that wrongly succeeded must not fail this one
            if stale.startswith("bad_out"):
                os.remove(self.path(stale))
        t0 = time.time()
        r = self.run_ranks(np_, odd, args, odd_args, odd_files)
        if r is None:
            return self.report(name, "hangs: no answer after 40 s")
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        leftovers = [f for f in os.listdir(self.dir) if f.startswith("bad_out")]
        self.report(name, "" if ok and not leftovers else "rc %d after %.1f s, stderr %r, files %s"
                    % (r.returncode, time.time() - t0, r.stderr[-600:], leftovers))

    def bad(self, name, np_, args, want, out_args=None):
        """One error line, printed once, and no output file; out_args
        stands in for -o bad_out.npy. A run that hangs past 30 s fails."""
        try:
            r = self.run_mpi(np_, args + (["-o", self.path("bad_out.npy")] if out_args is None else out_args), timeout=30)
        except subprocess.TimeoutExpired:
            return self.report(name, "hangs: no answer after 30 s")
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        leftovers = [f for f in os.listdir(self.dir) if f.startswith("bad_out")]
        self.report(name, "" if ok and not leftovers else "rc %d, stderr %r, files %s" % (r.returncode, r.stderr, leftovers))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    c = Check(build)
    rng = np.random.default_rng(test_seed(20261130))
    f = rng.standard_normal
    c.case("plain_f64", f((2, 3, 37, 16)), f((2, 3, 37, 16)), f((2, 3, 37, 8)))
    c.case("causal_top_left_gqa", f((1, 4, 40, 16)), f((1, 2, 40, 16)), f((1, 2, 40, 16)), ["--causal"], causal=1)
    c.case("causal_contiguous_layout", f((2, 29, 8)), f((2, 29, 8)), f((2, 29, 8)), ["--causal"], causal=1,
           mpi_flags=["--layout", "contiguous"])
    c.case("cross_bottom_right_broadcast_batch", f((2, 4, 23, 16)), f((1, 1, 41, 16)), f((1, 1, 41, 8)),
           ["--causal=bottom-right"], causal=2)
    mask = rng.random((33, 35)) < 0.7
    mask[:, 0] = True
    c.case("bool_mask", f((2, 33, 16)), f((2, 35, 16)), f((2, 35, 16)), mask=mask)
    c.case("float_mask_one_row_causal_scale", f((2, 34, 16)), f((2, 34, 16)), f((2, 34, 16)), ["--causal", "--scale", "0.3"],
           mask=f((1, 34)), causal=1, scale=0.3)
    c.case("f32_causal", f((1, 2, 301, 64)).astype(np.float32), f((1, 2, 301, 64)).astype(np.float32),
           f((1, 2, 301, 64)).astype(np.float32), ["--causal"], causal=1, tol=2e-5)
    c.case("fortran_order_q", np.asfortranarray(f((3, 30, 16))), f((3, 30, 16)), f((3, 30, 16)))
    # Big-endian files (x.astype('>f8'), data from a big-endian machine),
    # which attn reads: read too, not refused; v Fortran-order as well. And
    # f32 q with '>f2' k and v.
    c.case("big_endian_inputs_causal", f((2, 3, 26, 16)).astype(">f8"), f((2, 3, 26, 16)).astype(">f8"),
           np.asfortranarray(f((2, 3, 26, 8)).astype(">f8")), ["--causal"], causal=1)
    c.case("big_endian_f32_q_f16_kv", f((2, 25, 16)).astype(">f4"), f((2, 25, 16)).astype(">f2"),
           f((2, 25, 16)).astype(">f2"), tol=2e-5)

    # The score variants, each rank's shard seeing the key and query
    # positions of the whole sequence: ALiBi's distances, the window, RoPE's
    # angles; the sinks join each row's softmax once, whichever rank holds it.
    c.variant_case("variants_softcap_slopes_window_gqa_f64", f((2, 4, 37, 16)), f((2, 2, 37, 16)), f((2, 2, 37, 8)), 1,
                   {"softcap": 2.5, "slopes": rng.random(4) * 0.3, "window": 9})
    c.variant_case("variants_sinks_rope_bottom_right_cross_f64", f((3, 23, 16)), f((3, 41, 16)), f((3, 41, 8)), 2,
                   {"sinks": rng.standard_normal(3) * 2, "rope": (0, 10000.0, 0, 5)})
    c.variant_case("variants_paper_alibi_no_causal_f64", f((1, 5, 30, 8)), f((1, 5, 33, 8)), f((1, 5, 33, 8)), 0,
                   {"slopes": np.array(paper_slopes(5)), "paper": True})
    c.variant_case("variants_rope_interleaved_partial_softcap_sinks_f32", f((2, 4, 120, 32)).astype(np.float32),
                   f((2, 2, 120, 32)).astype(np.float32), f((2, 2, 120, 32)).astype(np.float32), 1,
                   {"rope": (1, 500.0, 16, 3), "softcap": 20.0, "sinks": rng.standard_normal(4)}, tol=2e-5)

    # NaN and inf in the inputs: the rows attn sdpa makes NaN are NaN on
    # every rank count too (a NaN query made its row's lse NaN, which the
    # merge dropped as a row without keys: 0, lse -inf), the others equal.
    qn, kn, vn = f((2, 3, 24, 8)), f((2, 3, 24, 8)), f((2, 3, 24, 8))
    qn[0, 1, 5, 3], kn[1, 2, 17, 0], vn[0, 0, 9, 2] = np.nan, np.nan, np.inf
    c.save(qn=qn, kn=kn, vn=vn)
    for flags in ([], ["--causal"], ["--causal=bottom-right"]):
        io = ["-q", c.path("qn.npy"), "-k", c.path("kn.npy"), "-v", c.path("vn.npy")] + flags
        subprocess.run([c.attn, "sdpa"] + io + ["-o", c.path("nan_ref.npy"), "--lse", c.path("nan_ref_lse.npy")], check=True)
        ref, ref_l = np.load(c.path("nan_ref.npy")), np.load(c.path("nan_ref_lse.npy"))
        problems = []
        for n in (1, 2, 3, 4):
            r = c.run_mpi(n, io + ["-o", c.path("nan_out.npy"), "--lse", c.path("nan_lse.npy")])
            if r.returncode:
                problems.append("np%d: %s" % (n, r.stderr.strip()))
                continue
            got, got_l = np.load(c.path("nan_out.npy")), np.load(c.path("nan_lse.npy"))
            same = all(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.isinf(a), np.isinf(b))
                       for a, b in ((got, ref), (got_l, ref_l)))
            fin = np.isfinite(ref)
            if not same or np.abs(got[fin] - ref[fin]).max() > 1e-13 * np.abs(ref[fin]).max():
                problems.append("np%d: NaN out %d (attn sdpa %d), NaN lse %d (%d)" % (n, np.isnan(got).sum(), np.isnan(ref).sum(),
                                np.isnan(got_l).sum(), np.isnan(ref_l).sum()))
        c.report("nan_inf_rows_as_attn_sdpa%s" % "".join(x.replace("--causal", "_causal").replace("=", "_").replace("-", "_") for x in flags),
                 "; ".join(problems))

    # Bad input: one line, from rank 0 only, no output file.
    c.save(q=f((2, 37, 16)), k=f((2, 37, 16)), v=f((2, 37, 16)), v32=f((2, 37, 16)).astype(np.float32),
           k3=f((3, 37, 16)), short=f((2, 5, 16)))
    q, k, v = (c.path(n + ".npy") for n in ("q", "k", "v"))
    c.bad("error_missing_file", 3, ["-q", c.path("nope.npy"), "-k", k, "-v", v], "nope.npy")
    # dtypes beside q's as attn sdpa says them, naming both files, before any row is read
    c.bad("error_dtypes_differ", 3, ["-q", q, "-k", k, "-v", c.path("v32.npy")],
          "mixed dtypes: -v %s is float32 but -q %s is float64; give every input one float dtype" % (c.path("v32.npy"), q))
    c.save(q32=f((2, 37, 16)).astype(np.float32), kbool=np.ones((2, 37, 16), bool), m32=f((37, 37)).astype(np.float32))
    c.bad("error_dtypes_f64_k_beside_f32_q", 2, ["-q", c.path("q32.npy"), "-k", k, "-v", c.path("v32.npy")],
          "mixed dtypes: -k %s is float64 but -q %s is float32" % (k, c.path("q32.npy")))
    c.bad("error_dtypes_f32_mask_beside_f64_q", 2, ["-q", q, "-k", k, "-v", v, "-m", c.path("m32.npy")],
          "mixed dtypes: -m %s is float32 but -q %s is float64" % (c.path("m32.npy"), q))
    c.bad("error_dtypes_bool_k", 2, ["-q", q, "-k", c.path("kbool.npy"), "-v", v],
          "-k %s has dtype bool; q must be float32 or float64, and k and v float32, float64 or float16" % c.path("kbool.npy"))
    c.bad("error_heads", 2, ["-q", q, "-k", c.path("k3.npy"), "-v", v], "heads")
    # errors on a file's contents name it with its flag, as attn sdpa does ("-q short.npy has ...")
    c.bad("error_too_short_for_ranks", 3, ["-q", c.path("short.npy"), "-k", k, "-v", v],
          "-q %s has 5 rows, too few for 3 ranks" % c.path("short.npy"))
    c.save(q1=f((2, 1, 16)), k1=f((2, 1, 16)), v1=f((2, 1, 16)))  # counts of 1 in the singular ("1 rows ... 1 ranks")
    c.bad("error_one_row_for_one_rank_singular", 1, ["-q", c.path("q1.npy"), "-k", c.path("k1.npy"), "-v", c.path("v1.npy")],
          "-q %s has 1 row, too few for 1 rank: the zigzag layout needs 2" % c.path("q1.npy"))
    with open(c.path("garbage.npy"), "wb") as fh:
        fh.write(b"not a numpy file")
    c.bad("error_not_npy", 2, ["-q", c.path("garbage.npy"), "-k", k, "-v", v], "-q %s: " % c.path("garbage.npy"))
    # A dimension of 0 where attn sdpa refuses it (E): the library's words,
    # not MPI-IO's abort on an empty subarray; a directory: one line, not
    # MPI-IO's read error too; a mask whose rows are not q's: said so, not
    # "too few for the ranks".
    c.save(q_e0=f((2, 37, 0)), k_e0=f((2, 37, 0)), m_rows3=rng.random((3, 37)) < 0.5)
    c.bad("error_empty_dimension_E", 2, ["-q", c.path("q_e0.npy"), "-k", c.path("k_e0.npy"), "-v", v],
          "a dimension of 0 is taken only for L")
    # Where attn sdpa takes a 0 (no queries, no keys, a batch of 0), so
    # does attn-mpi, with attn sdpa's outputs on every rank count: empty
    # ones, or out 0 and lse -inf for queries that have no key.
    c.save(q0=f((2, 0, 16)), k0=f((2, 0, 16)), v0=f((2, 0, 8)), qb0=f((0, 3, 37, 16)), kb0=f((0, 1, 37, 16)),
           vb0=f((0, 1, 37, 8)), m0=np.ones((1, 0), bool))
    for name, qkv, flags in (("no_queries_causal", ("q0", "k", "v"), ["--causal"]),
                             ("no_keys_bottom_right_mask", ("q", "k0", "v0"), ["--causal=bottom-right", "-m", c.path("m0.npy")]),
                             ("no_queries_no_keys", ("q0", "k0", "v0"), []),
                             ("batch_of_0_gqa", ("qb0", "kb0", "vb0"), ["--causal"])):
        io = ["-q", c.path(qkv[0] + ".npy"), "-k", c.path(qkv[1] + ".npy"), "-v", c.path(qkv[2] + ".npy")] + flags
        r = subprocess.run([c.attn, "sdpa"] + io + ["-o", c.path("e_ref.npy"), "--lse", c.path("e_ref_lse.npy")],
                           capture_output=True, text=True)
        if r.returncode:
            c.report("empty_" + name, "attn sdpa failed: " + r.stderr.strip())
            continue
        ref, ref_l = np.load(c.path("e_ref.npy")), np.load(c.path("e_ref_lse.npy"))
        problems = []
        for n in (1, 2, 3, 4):
            for stale in ("e_out.npy", "e_lse.npy"):
                if os.path.exists(c.path(stale)):
                    os.remove(c.path(stale))
            r = c.run_mpi(n, io + ["-o", c.path("e_out.npy"), "--lse", c.path("e_lse.npy")])
            if r.returncode or r.stdout or r.stderr:
                problems.append("np%d: rc %d, %r" % (n, r.returncode, (r.stdout + r.stderr).strip()))
                continue
            got, got_l = np.load(c.path("e_out.npy")), np.load(c.path("e_lse.npy"))
            if not all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in ((got, ref), (got_l, ref_l))):
                problems.append("np%d: out %s %s, lse %s; attn sdpa's %s %s, %s" % (n, got.dtype, got.shape, got_l.shape,
                                ref.dtype, ref.shape, ref_l.shape))
        c.report("empty_" + name + "_as_attn_sdpa", "; ".join(problems))
    # A few queries beside no key are still too few for the layout (every
    # shard must have rows, or none).
    c.bad("error_too_short_beside_no_keys", 3, ["-q", c.path("short.npy"), "-k", c.path("k0.npy"), "-v", c.path("v0.npy")],
          "-q %s has 5 rows, too few for 3 ranks: the zigzag layout needs 6 (or none)" % c.path("short.npy"))
    c.bad("error_q_is_a_directory", 2, ["-q", c.dir, "-k", k, "-v", v], "is not a regular file")
    # The score variants' own errors: usage errors as attn sdpa's, and the
    # library's words on a sinks file of the wrong shape or a missing one.
    qkv3 = ["-q", q, "-k", k, "-v", v]
    c.save(sinks3=f(3), sinks2=f(2))
    c.bad("error_alibi_and_slopes", 2, qkv3 + ["--alibi", "--alibi-slopes", c.path("sinks2.npy")],
          "give --alibi or --alibi-slopes FILE, not both")
    c.bad("error_window_without_causal", 2, qkv3 + ["--window", "4"], "--window needs --causal")
    c.bad("error_rope_base_without_rope", 2, qkv3 + ["--rope-base", "100"], "need --rope halves|interleaved")
    c.bad("error_softcap_zero", 2, qkv3 + ["--softcap", "0"], "--softcap '0' is not a finite number above 0")
    c.bad("error_sinks_wrong_shape", 2, qkv3 + ["--sinks", c.path("sinks3.npy")], "sinks")
    c.bad("error_sinks_missing_file", 2, qkv3 + ["--sinks", c.path("no_sinks.npy")], "no_sinks.npy")
    c.save(q_heads=f((4097, 4, 1)), k_heads=f((4097, 4, 1)))  # past the paper's slopes --alibi computes
    c.bad("error_alibi_too_many_heads", 2, ["-q", c.path("q_heads.npy"), "-k", c.path("k_heads.npy"), "-v",
          c.path("k_heads.npy"), "--alibi"], "--alibi: q has 4097 heads; at most 4096")
    # A FIFO as an input: refused as attn refuses it, not a wait for ever in
    # the open of each rank's own copy (stdio's open waits for a writer).
    os.mkfifo(c.path("fifo.npy"))
    c.bad("error_q_is_a_fifo", 2, ["-q", c.path("fifo.npy"), "-k", k, "-v", v], "fifo.npy is not a regular file")
    # An empty name (an unset shell variable): attn's words, not MPI-IO's "cannot open :".
    c.bad("error_empty_input_name", 2, ["-q", "", "-k", k, "-v", v], "-q: the input file name is empty")
    # The outputs, before any work is done: an empty name or a directory
    # (they failed only at the rename, after the attention), a FIFO (a
    # regular file was renamed over it, as it would be over /dev/null when
    # run as root), a link to nowhere. The FIFO stays a FIFO.
    qkv = ["-q", q, "-k", k, "-v", v]
    c.bad("error_empty_output_name", 2, qkv, "-o: an output file name is empty", ["-o", ""])
    c.bad("error_empty_lse_name", 2, qkv, "--lse: an output file name is empty", ["-o", c.path("bad_out.npy"), "--lse", ""])
    c.bad("error_output_is_a_directory", 2, qkv, "cannot write %s: it is a directory" % c.dir, ["-o", c.dir])
    os.mkfifo(c.path("out_fifo"))
    c.bad("error_output_is_a_fifo", 2, qkv, "out_fifo: it is not a regular file", ["-o", c.path("out_fifo")])
    c.report("output_fifo_left_a_fifo", "" if stat.S_ISFIFO(os.lstat(c.path("out_fifo")).st_mode) else "replaced")
    os.symlink(c.path("nowhere.npy"), c.path("dead_link.npy"))
    c.bad("error_output_link_to_nowhere", 2, qkv, "symbolic link to a missing file", ["-o", c.path("dead_link.npy")])
    # -o and --lse one file spelled two ways: a usage error, not both
    # written into one temporary and the run failing at its second rename.
    c.bad("error_out_and_lse_one_file", 2, qkv, "-o and --lse name the same file",
          ["-o", c.path("bad_out.npy"), "--lse", os.path.join(c.dir, ".", "bad_out.npy")])
    # A link as -o: its target replaced, the link kept (as attn does).
    np.save(c.path("link_target.npy"), np.zeros(1))
    os.symlink(c.path("link_target.npy"), c.path("out_link.npy"))
    r = c.run_mpi(2, qkv + ["-o", c.path("out_link.npy")])
    kept = os.path.islink(c.path("out_link.npy")) and np.load(c.path("link_target.npy")).shape == (2, 37, 16)
    c.report("output_link_kept_target_replaced", "" if r.returncode == 0 and kept else "rc %d, link kept %s: %r"
             % (r.returncode, os.path.islink(c.path("out_link.npy")), r.stderr[-300:]))
    # k and v of other lengths: the files' lengths, not two ranks' shards'.
    c.save(v38=f((2, 38, 16)))
    c.bad("error_k_v_lengths_differ", 2, ["-q", q, "-k", k, "-v", c.path("v38.npy")],
          "v has S=38 rows but k has S=37 (they must match)")
    c.bad("error_mask_rows_not_q", 2, ["-q", q, "-k", k, "-v", v, "-m", c.path("m_rows3.npy")],
          "-m %s has 3 rows; a mask's rows are q's 37 queries (or 1)" % c.path("m_rows3.npy"))
    # A rank's part of a file over 2^31 - 1 elements, which MPI-IO counts in
    # an int: one error naming the file, before its memory is taken, not a
    # read cut short. q is a sparse file (8 GiB never read), one rank's one
    # part (contiguous layout).
    with open(c.path("q_huge.npy"), "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (1, 2, 1 << 30, 1)})
        fh.truncate(fh.tell() + 4 * (1 << 31))
    c.bad("error_part_over_int_count", 1, ["-q", c.path("q_huge.npy"), "-k", k, "-v", v, "--layout", "contiguous"],
          "-q %s: a rank's part is over 2^31 - 1 elements" % c.path("q_huge.npy"))
    os.remove(c.path("q_huge.npy"))
    # A float16 q: the words of attn sdpa, not the ring's refusal of an f32 out.
    c.save(q_f16=f((2, 37, 16)).astype(np.float16))
    c.bad("error_q_float16", 2, ["-q", c.path("q_f16.npy"), "-k", k, "-v", v], "q must be float32 or float64")
    c.bad("error_usage_layout", 2, ["-q", q, "-k", k, "-v", v, "--layout", "diagonal"], "--layout 'diagonal' is not zigzag or contiguous")
    # An option given twice, or two that set one thing, is refused, naming both as written.
    c.bad("error_usage_layout_twice", 2, ["-q", q, "-k", k, "-v", v, "--layout", "zigzag", "--layout=contiguous"],
          "--layout zigzag and --layout=contiguous")
    c.bad("error_usage_causal_modes", 2, ["-q", q, "-k", k, "-v", v, "--causal", "--causal=bottom-right"],
          "--causal and --causal=bottom-right")
    c.bad("error_usage_missing_v", 2, ["-q", q, "-k", k], "missing")
    for dt in ("int8", "uint64"):  # an integer mask: refused with a hint at bool, never a 0/1 bias
        c.save(**{"m_" + dt: np.ones((37, 37), dt)})
        c.bad("error_integer_mask_" + dt, 2, ["-q", q, "-k", k, "-v", v, "-m", c.path("m_%s.npy" % dt)],
              "a 0/1 mask as bool")
    # --help anywhere wins, before any other argument is read, on every rank
    # alike, as attn's commands take it: a bad value before it was reported.
    for name, prog, args in (("sdpa_bad_value_then_help", "sdpa", ["--scale", "x", "--help"]),
                             ("sdpa_help_then_unknown", "sdpa", ["--help", "--frobnicate"]),
                             ("bench_bad_value_then_help", "bench", ["--seq", "abc", "-h"])):
        r = subprocess.run(c.mpirun + ["-np", "2", c.mpi, prog] + args, capture_output=True, text=True, timeout=60)
        ok = r.returncode == 0 and r.stdout.startswith("usage:") and r.stdout.count("usage:") == 1 and not r.stderr
        c.report("help_anywhere_" + name, "" if ok else "rc %d, stdout %r, stderr %r" % (r.returncode, r.stdout[:80],
                                                                                         r.stderr))
    # A timeout past the library's bound is the parser's usage error (exit 2),
    # not a failure in the ring (exit 1); so is one that is not above 0.
    for name, t in (("huge", "1e300"), ("bound", "1e9"), ("zero", "0")):
        r = c.run_mpi(1, ["-q", q, "-k", k, "-v", v, "-o", c.path("bad_out.npy"), "--timeout", t])
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 2 and len(lines) == 1 and ("--timeout '%s' is not a number of seconds above 0 and below 1e+09" % t) in lines[0]
        c.report("error_usage_timeout_" + name, "" if ok else "rc %d, stderr %r" % (r.returncode, r.stderr))

    # Ranks given different files or options (a node with other copies of
    # the files, a launcher that passes other arguments): one error, on 2
    # ranks with rank 1 the odd one and on 3 with rank 0 (the one that prints).
    c.save(m=rng.random((37, 37)) < 0.9, m_other=rng.random((37, 37)) < 0.9, q_other=f((2, 37, 16)))
    qa, p = np.load(q), c.path
    base = ["-q", q, "-k", k, "-v", v, "-o", p("bad_out.npy")]
    with_lse = base + ["--lse", p("bad_out_lse.npy")]
    rel = ["-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "-o", p("bad_out.npy")]  # in each rank's directory
    differences = [
        # The same path, another copy on one rank: refused before MPI-IO opens it.
        ("copy_missing", rel, rel, {"q.npy": None}, "cannot open q.npy on this rank"),
        ("copy_size", rel, rel, {"q.npy": f((2, 38, 16))}, "-q's size in bytes"),
        ("copy_rank", rel, rel, {"q.npy": qa.reshape(1, 2, 37, 16)}, "-q's rank"),
        ("copy_shape", rel, rel, {"q.npy": qa.reshape(37, 2, 16)}, "-q's dimension 0"),
        ("copy_dtype", rel, rel, {"q.npy": f((4, 37, 16)).astype(np.float32)}, "-q's dtype"),
        ("copy_contents", rel, rel, {"q.npy": f((2, 37, 16))}, "-q's contents"),
        ("copy_k_contents", rel, rel, {"k.npy": f((2, 37, 16))}, "-k's contents"),
        ("copy_v_shape", rel, rel, {"v.npy": f((2, 74, 8))}, "-v's dimension 1"),
        ("copy_mask_contents", rel + ["-m", "m.npy"], rel + ["-m", "m.npy"], {"m.npy": np.load(p("m_other.npy"))},
         "-m's contents"),
        # Other arguments on one rank.
        ("q_path", base, ["-q", p("q_other.npy")] + base[2:], None, "-q's path"),
        ("k_path", base, base[:2] + ["-k", p("q.npy")] + base[4:], None, "-k's path"),
        ("v_path", base, base[:4] + ["-v", p("k.npy")] + base[6:], None, "-v's path"),
        ("mask_given", base, base + ["-m", p("m.npy")], None, "-m: given on some ranks"),
        ("mask_path", base + ["-m", p("m.npy")], base + ["-m", p("m_other.npy")], None, "-m's path"),
        ("out_path", base, base[:6] + ["-o", p("bad_out_other.npy")], None, "-o's path"),
        ("lse_given", base, with_lse, None, "--lse: given on some ranks"),
        ("lse_path", with_lse, base + ["--lse", p("bad_out_lse_other.npy")], None, "--lse's path"),
        ("layout", base, base + ["--layout", "contiguous"], None, "--layout"),
        ("causal", base, base + ["--causal"], None, "--causal"),
        ("causal_alignment", base + ["--causal"], base + ["--causal=bottom-right"], None, "--causal"),
        ("scale_given", base, base + ["--scale", "0.25"], None, "--scale: given on some ranks"),
        ("scale", base + ["--scale", "0.25"], base + ["--scale", "0.5"], None, "--scale's value"),
        ("timeout", base, base + ["--timeout", "7"], None, "--timeout"),
        ("stats", base, base + ["--stats"], None, "--stats"),
        ("softcap", base + ["--softcap", "5"], base + ["--softcap", "6"], None, "softcap"),
        ("sinks_given", base, base + ["--sinks", p("sinks2.npy")], None, "--sinks: given on some ranks"),
        ("alibi_given", base, base + ["--alibi"], None, "--alibi: given on some ranks"),
        ("usage_error", base, base + ["--layout", "diagonal"], None, ("different command lines", "--layout 'diagonal' is not")),
        ("help", base, ["--help"], None, "different command lines"),
    ]
    for what, args, odd_args, odd_files, want in differences:
        for np_, odd in ((2, 1), (3, 0)):
            said = want[odd == 0] if isinstance(want, tuple) else want  # rank 0's words when it is the odd one
            c.differ("ranks_differ_%s_np%d" % (what, np_), np_, odd, args, odd_args, said, odd_files or {})
    # A relative -o from each rank's own directory names another file on
    # each: one error within the timeout (MPI-IO's collective open waited
    # for ever), and no output in either directory.
    t0 = time.time()
    rel_o = rel[:6] + ["-o", "bad_out_rel.npy"]
    r = c.run_ranks(2, 1, rel_o, rel_o, {})
    wrapper = c.path("rank_args.sh")
    left = [f for d in (wrapper + ".dir", wrapper + ".dir.1") for f in os.listdir(d) if f.startswith("bad_out")]
    lines = r.stderr.strip().splitlines() if r else []
    ok = r is not None and r.returncode != 0 and len(lines) == 1 and "every rank must see the same file" in lines[0]
    c.report("ranks_see_other_output_directories", "" if ok and not left else "%s after %.1f s, files %s"
             % (r and (r.returncode, r.stderr[-400:]), time.time() - t0, left))
    # Alike copies in the ranks' own directories: the result of the same
    # files given by one path.
    rel_out = rel[:6] + ["-o", p("alike.npy"), "-m", "m.npy"]
    r = c.run_ranks(3, 1, rel_out, rel_out, {})
    r1 = c.run_mpi(3, base[:6] + ["-m", p("m.npy"), "-o", p("alike1.npy")])
    same = r is not None and r.returncode == 0 and r1.returncode == 0 and \
        np.array_equal(np.load(p("alike.npy")), np.load(p("alike1.npy")))
    c.report("ranks_alike_copies_agree", "" if same else "%r %r" % (r and r.stderr, r1.stderr))

    # Each input at every rank from 0 to 6, on 2 ranks: the ranks it takes
    # run; the others are one clean error naming it, and no output. A mask
    # of rank 0, one bias for every score, is taken as attn sdpa takes it
    # (the ring refused it, as a last dimension of 0).
    sweep = {"-q": f((2, 6, 4)), "-k": f((2, 8, 4)), "-v": f((2, 8, 3)), "-m": f((6, 8))}
    accepted = {"-q": {3, 4, 5}, "-k": {3, 4, 5}, "-v": {3, 4, 5}, "-m": {0, 1, 2, 3}}
    names = {"-q": r"\bq\b|sweep-q", "-k": r"\bk\b|sweep-k", "-v": r"\bv\b|sweep-v", "-m": r"\bmask\b|sweep-m"}
    for flag, good in sweep.items():
        problems = []
        for rank in RANKS:
            args = []
            for g, a in sweep.items():
                path = c.path("sweep%s%s.npy" % (g, "_bad" if g == flag else ""))
                np.save(path, f(at_rank(a.shape, rank)) if g == flag else a)
                args += [g, path]
            problems += ["rank %d: %s" % (rank, p) for p in rank_case_problems(
                lambda *a: c.run_mpi(2, list(a)), c.dir, args + ["-o", c.path("sweep_out.npy")], rank in accepted[flag],
                names[flag], ("sweep_out.npy",))]
        c.report("ranks_0_to_6_%s" % flag.lstrip("-"), "; ".join(problems))

    # attn-mpi bench's own arguments: a bad value is a usage error naming
    # it, not another layout or a length of 0 (atoll's reading of "abc");
    # an option given twice (the later one replaced the earlier, and
    # --quick after --seq replaced its length), an unknown one or one
    # without its value is one line too (they printed the whole usage),
    # and nothing on stdout. Through attn bench --mpi as well.
    for name, a, want in (("layout", ["--layout", "diagonal"], "--layout 'diagonal' is not zigzag or contiguous"),
                          ("seq_text", ["--seq", "abc"], "--seq 'abc' is not"), ("seq_short", ["--seq", "3"], "--seq '3' is not"),
                          ("quick_twice", ["--quick"], "--quick and --quick: give --quick once"),
                          ("seq_twice", ["--seq", "512", "--seq=1024"], "--seq 512 and --seq=1024: give --seq once"),
                          ("layout_twice", ["--layout", "zigzag", "--layout", "zigzag"],
                           "--layout zigzag and --layout zigzag: give --layout once"),
                          ("unknown", ["--frobnicate"], "unknown bench argument '--frobnicate' (see attn-mpi bench --help)"),
                          ("seq_needs_value", ["--seq"], "option --seq needs a value"),
                          ("timeout_zero", ["--timeout", "0"], "--timeout '0' is not a number of seconds above 0"),
                          ("timeout_twice", ["--timeout", "5", "--timeout", "6"], "--timeout 5 and --timeout 6: give --timeout once"),
                          # a length whose tensors pass the node's memory: refused before any is
                          # allocated (the run printed its table of failures, "data is NULL")
                          ("seq_over_memory", ["--seq", "2147483647"], "--seq 2147483647 needs "),
                          ("via_attn_bench_mpi", ["--layout", "contiguous", "--layout=zigzag"],
                           "--layout contiguous and --layout=zigzag: give --layout once")):
        prog = [c.attn, "bench", "--mpi"] if name.startswith("via_attn") else [c.mpi, "bench"]
        r = subprocess.run(c.mpirun + ["-np", "2"] + prog + ["--quick"] + a, capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        c.report("bench_error_" + name, "" if r.returncode == 2 and len(lines) == 1 and lines[0].startswith("attn: error: ")
                 and want in lines[0] and not r.stdout else "rc %d, stdout %r, stderr %r"
                 % (r.returncode, r.stdout[-200:], r.stderr[-300:]))

    # attn-mpi bench's header: counts of 1 in the singular ("on 1 ranks",
    # "1 threads each" were printed), and with more ranks than the node has
    # cores (--oversubscribe, where Open MPI binds no rank) the single-rank
    # run takes the node's cores, not ranks × 1 thread, and no note says a
    # rank is bound to fewer than that ("bound to 2 of the node's 3 cores").
    # The cores are the CPUs the ranks may run on (mpirun --bind-to none:
    # this process's); with one rank, Open MPI's default binds it to one.
    cores = len(os.sched_getaffinity(0))
    unbound = c.mpirun + ["--bind-to", "none"]
    r = subprocess.run(unbound + ["-np", "1", c.mpi, "bench", "--quick"], capture_output=True, text=True, timeout=300)
    head = " ".join(r.stdout.split())
    one = "ring attention on 1 rank (1 per node, %d thread%s each)" % (cores, "" if cores == 1 else "s")
    c.report("bench_header_one_rank_singular", "" if r.returncode == 0 and one in head
             else "rc %d, stdout %r, stderr %r" % (r.returncode, r.stdout[:400], r.stderr[-300:]))
    if cores <= 3:  # a few ranks more than the cores: cheap only on a small node
        n = cores + 1
        r = subprocess.run(c.mpirun + ["-np", str(n), c.mpi, "bench", "--quick"], capture_output=True, text=True, timeout=300)
        head = " ".join(r.stdout.split())
        ok = r.returncode == 0 and "ring attention on %d ranks (%d per node, 1 thread each)" % (n, n) in head \
            and "on rank 0 with %d thread%s;" % (cores, "" if cores == 1 else "s") in head and "bound to" not in head
        c.report("bench_more_ranks_than_cores_single_takes_the_cores", "" if ok else "rc %d, stdout %r, stderr %r"
                 % (r.returncode, r.stdout[:500], r.stderr[-300:]))
    else:
        print("skip bench_more_ranks_than_cores_single_takes_the_cores: %d cores (the test runs cores + 1 ranks)" % cores)
    # Ranks limited to one CPU (taskset, as a cpuset would): both runs take
    # that one, and a note says so, where the single-rank run took every
    # CPU online, two threads on one CPU.
    online = os.sysconf("SC_NPROCESSORS_ONLN")
    if cores >= 2 and shutil.which("taskset"):
        one = sorted(os.sched_getaffinity(0))[0]
        r = subprocess.run(["taskset", "-c", str(one)] + unbound + ["-np", "1", c.mpi, "bench", "--quick"],
                           capture_output=True, text=True, timeout=300)
        head = " ".join(r.stdout.split())
        ok = r.returncode == 0 and "ring attention on 1 rank (1 per node, 1 thread each)" in head \
            and "on rank 0 with 1 thread;" in head and "may run on 1 of its %d CPUs" % online in head
        c.report("bench_ranks_on_one_cpu_take_that_one", "" if ok else "rc %d, stdout %r, stderr %r"
                 % (r.returncode, r.stdout[:500], r.stderr[-300:]))
    else:
        print("skip bench_ranks_on_one_cpu_take_that_one: %d CPUs here, or no taskset" % cores)
    # --stats: one line per rank, from rank 0, each rank's waiting within its time.
    r = c.run_mpi(3, ["-q", q, "-k", k, "-v", v, "-o", c.path("stats.npy"), "--stats"])
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("rank ")]
    shares = [float(ln.split("(")[1].split("%")[0]) for ln in lines if "(" in ln]
    c.report("stats_one_line_per_rank", "" if r.returncode == 0 and [ln.split(":")[0] for ln in lines] ==
             ["rank 0", "rank 1", "rank 2"] and all(0 <= x <= 100 for x in shares) else "rc %d: %r" % (r.returncode, r.stdout))

    # A rank that stops (hangs) or dies before the attention, before the
    # ranks first compare their command lines, or just before any other
    # collective of the command (ATTN_MPI_FAULT=stop-POINT:1): the others
    # end the job within the timeout and a few seconds, with one error line
    # naming what timed out, and no output or temporary appears. (A rank
    # stopped at the first comparison timed the others out there, which
    # went on to print their error and MPI_Finalize, and mpirun waited for
    # the stopped one for ever; one stopped at an MPI-IO open or write, or
    # at the agreement on errors, hung them all.) A rank that stopped is
    # named only when it is the one a rank waited for: in a collective any
    # may be the late one, and the left neighbour, which was named, was not.
    # Where the stopped rank's collective needs no answer from it (a read
    # of the header, the root's broadcast), the next one is what times out.
    late = "the ranks did not all answer within 3 s"
    faults = [("stop", late), ("kill", ""), ("stop-first", "comparing the ranks' command lines: "),
              ("kill-first", ""), ("stop-outcome", "comparing the ranks' command lines: " + late),
              ("stop-agree", "agreeing on the ranks' errors: " + late),
              ("stop-file", "comparing -q %s on the ranks: " % q), ("stop-open", "opening -q %s (MPI_File_open): " % q + late),
              ("stop-header", late), ("stop-view", "reading the rows of -q %s (MPI_File_set_view): " % q + late),
              ("stop-read", "reading the rows of -q %s" % q), ("stop-close", "closing -q %s (MPI_File_close): " % q + late),
              ("stop-stamp", late), ("stop-create", "(MPI_File_open): " + late), ("stop-size", "(MPI_File_set_size): " + late),
              ("stop-wview", "(MPI_File_set_view): " + late), ("stop-write", "writing the rows of "),
              ("stop-wclose", "(MPI_File_close): " + late), ("stop-stats", "--stats"),
              ("stop-ready", "agreeing on the ranks' errors opening -q %s: " % q + late),
              ("stop-finalize", "ending MPI (MPI_Finalize): " + late),
              # past the barrier before a collective that has no nonblocking
              # form: the others' timers end the job (and leave no output
              # when it is MPI_Finalize, before which none is renamed)
              ("stop-open-in", "opening -q %s (MPI_File_open): " % q + late), ("stop-create-in", "(MPI_File_open): " + late),
              ("stop-wclose-in", "(MPI_File_close): " + late), ("stop-finalize-in", "ending MPI (MPI_Finalize): " + late)]
    for how, want in faults:
        t0 = time.time()
        out = c.path("fault.npy")
        name = "fault_%s_one_rank_ends_the_job" % how.replace("-", "_")
        args = ["-q", q, "-k", k, "-v", v, "-o", out, "--timeout", "3"] + (["--stats"] if how == "stop-stats" else [])
        try:
            r = c.run_mpi(3, args, env={"ATTN_MPI_FAULT": how + ":1"}, timeout=60)
        except subprocess.TimeoutExpired:
            c.report(name, "hangs: no answer after 60 s")
            continue
        took = time.time() - t0
        lines = r.stderr.strip().splitlines()
        blamed = set(re.findall(r"rank (\d+)(?: or \d+)? stopped", r.stderr))
        said = how.startswith("kill") or (len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
                                          and blamed <= {"1"})
        left = [f for f in os.listdir(c.dir) if f.startswith("fault.npy")]
        c.report(name, "" if r.returncode != 0 and took < 3 + 8 and said and not left
                 else "rc %d after %.1f s, stderr %r, files %s" % (r.returncode, took, r.stderr[-400:], left))
    # Rank 0 stopped, on 4 ranks: the others time out alike and speak in
    # turn, so rank 1 alone says it (rank 0 spoke first, when it could).
    t0 = time.time()
    out = c.path("fault.npy")
    try:
        r = c.run_mpi(4, ["-q", q, "-k", k, "-v", v, "-o", out, "--timeout", "3"], env={"ATTN_MPI_FAULT": "stop-open:0"},
                      timeout=60)
        took = time.time() - t0
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and took < 3 + 8 and len(lines) == 1 and lines[0].startswith("attn: error: rank 1: opening -q ")
        left = [f for f in os.listdir(c.dir) if f.startswith("fault.npy")]
        c.report("fault_rank_0_stopped_rank_1_says_it", "" if ok and not left else "rc %d after %.1f s, stderr %r, files %s"
                 % (r.returncode, took, r.stderr[-400:], left))
    except subprocess.TimeoutExpired:
        c.report("fault_rank_0_stopped_rank_1_says_it", "hangs: no answer after 60 s")
    # A rank that fails on its own (ATTN_MPI_FAULT=fail-POINT:R): an open
    # of an input or of the output's temporary that fails on that rank
    # alone (for real: the rank opens a name below the file, as a node
    # that cannot reach it would), or its allocation for its rows as it
    # reads or writes them. (Such an open failing inside Open MPI's
    # collective MPI_File_open left every rank in it until the timers, at
    # the timeout, named the open and not its cause: the ranks now open
    # the file each by itself and agree on that first.)
    # The ranks agree on the failure before their next collective, so the
    # job ends at once, well before the timeout, with one error line that
    # names the real cause, and no output. (The failing rank skipped the
    # collectives the others entered: its next barrier met theirs of
    # another collective, or they waited out the timeout and named it.)
    for how, rank, want in (("fail-open", 1, "cannot open %s: " % q), ("fail-open", 2, "cannot open %s: " % q),
                            ("fail-open", 0, "cannot open %s: " % q), ("fail-create", 2, "cannot create %s" % c.path("fault.npy")),
                            ("fail-read", 1, "out of memory for the rows of -q %s" % q),
                            ("fail-create", 1, "cannot create %s" % c.path("fault.npy")),
                            ("fail-write", 2, "out of memory for the rows of %s" % c.path("fault.npy"))):
        t0 = time.time()
        name = "fault_%s_on_rank_%d_ends_the_job_at_once" % (how.replace("-", "_"), rank)
        try:
            r = c.run_mpi(3, ["-q", q, "-k", k, "-v", v, "-o", c.path("fault.npy"), "--timeout", "30"],
                          env={"ATTN_MPI_FAULT": "%s:%d" % (how, rank)}, timeout=60)
        except subprocess.TimeoutExpired:
            c.report(name, "hangs: no answer after 60 s")
            continue
        took = time.time() - t0
        lines = r.stderr.strip().splitlines()
        left = [f for f in os.listdir(c.dir) if f.startswith("fault.npy")]
        ok = r.returncode == 1 and took < 15 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        c.report(name, "" if ok and not left else "rc %d after %.1f s, stderr %r, files %s"
                 % (r.returncode, took, r.stderr[-400:], left))
    # attn-mpi bench --seq refuses a length over half the memory of the
    # smallest of the ranks' nodes, on every rank together: a node with
    # too little (fail-bench-memory:1) made its ranks alone refuse and
    # leave while the others waited for them.
    t0 = time.time()
    try:
        r = subprocess.run(c.mpirun + ["-np", "3", c.mpi, "bench", "--seq", "4096", "--timeout", "30"], capture_output=True,
                           text=True, env=dict(os.environ, ATTN_MPI_FAULT="fail-bench-memory:1"), timeout=60)
        took = time.time() - t0
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 2 and took < 15 and len(lines) == 1 and lines[0].startswith("attn: error: --seq 4096 needs ") \
            and "over half of the smallest node's 0.0 GiB" in lines[0]
        c.report("fault_bench_memory_on_rank_1_refused_by_all", "" if ok else "rc %d after %.1f s, stderr %r"
                 % (r.returncode, took, r.stderr[-400:]))
    except subprocess.TimeoutExpired:
        c.report("fault_bench_memory_on_rank_1_refused_by_all", "hangs: no answer after 60 s")
    # attn-mpi bench's collectives, under its --timeout: a rank stopped as
    # the ranks look for their node's (MPI_Comm_split_type, which has no
    # nonblocking form), before a ring run's barrier, or while rank 0 runs
    # on the whole sequence (where rank 0, last to the barrier, finds it).
    for how, want in (("stop-bench-split", "finding the ranks on this node (MPI_Comm_split_type): " + late),
                      ("stop-bench", "starting a ring run: " + late),
                      ("stop-bench-single", "waiting for the ranks after the single-rank run: " + late)):
        t0 = time.time()
        name = "fault_%s_one_rank_ends_the_job" % how.replace("-", "_")
        try:
            r = subprocess.run(c.mpirun + ["-np", "3", c.mpi, "bench", "--quick", "--timeout", "3"], capture_output=True,
                               text=True, env=dict(os.environ, ATTN_MPI_FAULT=how + ":1"), timeout=60)
        except subprocess.TimeoutExpired:
            c.report(name, "hangs: no answer after 60 s")
            continue
        took = time.time() - t0
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and took < 3 + 8 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        c.report(name, "" if ok else "rc %d after %.1f s, stderr %r" % (r.returncode, took, r.stderr[-400:]))
    print("# attn-mpi: %d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
