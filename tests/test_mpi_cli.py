"""test_mpi_cli.py -- `mpirun -np N attn-mpi sdpa` on 1 to 4 ranks (loopback,
--oversubscribe): each rank reads its shard with MPI-IO and all write one
output. Against `attn sdpa` on the unsharded inputs and against PyTorch
float64 (oracle.py's reference): causal in both alignments and not, GQA with
broadcast batches, bool and float masks, both layouts, f64 and f32. Then bad
input (one error line, printed once, no output file), and a rank that stops
or is killed mid-run: the others end with an error within the timeout.

Usage: test_mpi_cli.py BUILD_DIR"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clicheck import RANKS, at_rank, rank_case_problems  # noqa: E402
from oracle import reference  # noqa: E402
from torch_attention import Reporter  # noqa: E402


class Check(Reporter):
    def __init__(self, build):
        super().__init__()
        self.attn = os.path.join(build, "attn")
        self.mpi = os.path.join(build, "attn-mpi")
        self.dir = tempfile.mkdtemp(prefix="attn-mpi-")
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
        torch_out, _, torch_lse, _ = reference(q, k, v, mask, causal, scale)
        for n in (1, 2, 3, 4):
            out, lse = self.path("out%d.npy" % n), self.path("lse%d.npy" % n)
            r = self.run_mpi(n, common + list(mpi_flags) + ["-o", out, "--lse", lse])
            if r.returncode:
                return self.report("%s_np%d" % (name, n), "attn-mpi failed: " + r.stderr.strip())
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

    def bad(self, name, np_, args, want):
        out = self.path("bad_out.npy")
        r = self.run_mpi(np_, args + ["-o", out])
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        leftovers = [f for f in os.listdir(self.dir) if f.startswith("bad_out")]
        self.report(name, "" if ok and not leftovers else "rc %d, stderr %r, files %s" % (r.returncode, r.stderr, leftovers))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    c = Check(build)
    rng = np.random.default_rng(20261130)
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

    # Bad input: one line, from rank 0 only, no output file.
    c.save(q=f((2, 37, 16)), k=f((2, 37, 16)), v=f((2, 37, 16)), v32=f((2, 37, 16)).astype(np.float32),
           k3=f((3, 37, 16)), short=f((2, 5, 16)))
    q, k, v = (c.path(n + ".npy") for n in ("q", "k", "v"))
    c.bad("error_missing_file", 3, ["-q", c.path("nope.npy"), "-k", k, "-v", v], "nope.npy")
    c.bad("error_dtypes_differ", 3, ["-q", q, "-k", k, "-v", c.path("v32.npy")], "v is f32 but q is f64")
    c.bad("error_heads", 2, ["-q", q, "-k", c.path("k3.npy"), "-v", v], "heads")
    c.bad("error_too_short_for_ranks", 3, ["-q", c.path("short.npy"), "-k", k, "-v", v], "too few for 3 ranks")
    with open(c.path("garbage.npy"), "wb") as fh:
        fh.write(b"not a numpy file")
    c.bad("error_not_npy", 2, ["-q", c.path("garbage.npy"), "-k", k, "-v", v], "not a .npy file")
    c.bad("error_usage_layout", 2, ["-q", q, "-k", k, "-v", v, "--layout", "diagonal"], "--layout takes")
    c.bad("error_usage_missing_v", 2, ["-q", q, "-k", k], "missing")

    # Each input at every rank from 0 to 6, on 2 ranks: the ranks it takes
    # run; the others are one clean error naming it, and no output. (The
    # ring cuts a mask's keys, so it needs a last dimension: rank 1 and up.)
    sweep = {"-q": f((2, 6, 4)), "-k": f((2, 8, 4)), "-v": f((2, 8, 3)), "-m": f((6, 8))}
    accepted = {"-q": {3, 4, 5}, "-k": {3, 4, 5}, "-v": {3, 4, 5}, "-m": {1, 2, 3}}
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

    # --stats: one line per rank, from rank 0, each rank's waiting within its time.
    r = c.run_mpi(3, ["-q", q, "-k", k, "-v", v, "-o", c.path("stats.npy"), "--stats"])
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("rank ")]
    shares = [float(ln.split("(")[1].split("%")[0]) for ln in lines if "(" in ln]
    c.report("stats_one_line_per_rank", "" if r.returncode == 0 and [ln.split(":")[0] for ln in lines] ==
             ["rank 0", "rank 1", "rank 2"] and all(0 <= x <= 100 for x in shares) else "rc %d: %r" % (r.returncode, r.stdout))

    # A rank that stops (hangs) or dies before the attention: the others end
    # the job with an error within the timeout, and no output appears.
    for how in ("stop", "kill"):
        t0 = time.time()
        out = c.path("fault.npy")
        r = c.run_mpi(3, ["-q", q, "-k", k, "-v", v, "-o", out, "--timeout", "3"], env={"ATTN_MPI_FAULT": how + ":1"},
                      timeout=60)
        took = time.time() - t0
        said = how == "kill" or "no answer from rank" in r.stderr
        c.report("fault_%s_one_rank_ends_the_job" % how,
                 "" if r.returncode != 0 and took < 30 and said and not os.path.exists(out)
                 else "rc %d after %.1f s, stderr %r" % (r.returncode, took, r.stderr[-300:]))
    print("# attn-mpi: %d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
