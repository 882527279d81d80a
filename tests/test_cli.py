#!/usr/bin/python3
"""test_cli.py -- the attn command: the classic worked examples, printing, and
every kind of bad input (one-line error, right exit code, no output file).

Usage: test_cli.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why".
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

import numpy as np

from scratch import scratch_dir
from clicheck import RANKS, at_rank, error_problems, rank_case_problems, run_expecting_error, status_on_closed_pipe

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ATTN = os.path.abspath(os.path.join(BUILD, "attn"))
TMP = scratch_dir("attn_cli_")
failed = 0


def report(name, ok, why=""):
    global failed
    print(f"ok {name}" if ok else f"FAIL {name}: {why}", flush=True)
    failed += not ok


def attn(*args):
    # errors="replace": a run that wrongly prints a .npy on stdout fails its
    # check, not the whole suite on decoding
    return subprocess.run([ATTN, *args], capture_output=True, text=True, errors="replace", cwd=TMP)


def save(name, a):
    path = os.path.join(TMP, name)
    np.save(path, a)
    return path


def raw_npy(name, header, data=b"", major=1, header_len=None):
    """Write a hand-made .npy file (to build malformed ones)."""
    h = header.encode()
    n = len(h) if header_len is None else header_len
    prefix = b"\x93NUMPY" + bytes([major, 0]) + (struct.pack("<H", n) if major == 1 else struct.pack("<I", n))
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(prefix + h + data)
    return path


def expect_error(name, args, code, pattern, outputs=("out.npy",)):
    """The command fails with `code`, one 'attn: error:' line matching
    `pattern`, nothing on stdout, and leaves no output or temporary file."""
    problems = run_expecting_error(attn, TMP, args, code, pattern, outputs)
    report(name, not problems, "; ".join(problems))


# Every --help text as written in the source, and the 80 columns its lines keep:
# cli_width's width for a pipe or a file, which cli_print_usage fills. A line
# past it (82 to 86 in sdpa's, mha's, explain's, attn-mpi's and the bench's
# helps, 159 in the bench's usage line) read otherwise than the rest.
HELP_WIDTH = 80
HELP_SOURCES = ("cli/dispatch.c", "cli/cmd_sdpa.c", "cli/cmd_mha.c", "cli/cmd_explain.c", "cli/cmd_scaling.c",
                "cli/cmd_train.c", "cli/mpi/args_mpi.c", "cli/mpi/bench_mpi.c", "bench/bench.c")
C_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def c_string(code):
    """The string that C's adjacent literals in `code` make (escapes read, UTF-8 kept)."""
    return "".join(m.encode().decode("unicode_escape").encode("latin-1").decode() for m in C_LITERAL.findall(code))


def help_texts(root):
    """(where, text) for each *USAGE[] array of HELP_SOURCES, its CLI_*_HELP macros (cli.h) expanded."""
    with open(os.path.join(root, "cli", "cli.h")) as f:
        macros = {m[1]: c_string(m[2]) for m in re.finditer(r"#define (CLI_\w+_HELP)((?:.*\\\n)*.*)", f.read())}
    for path in HELP_SOURCES:
        with open(os.path.join(root, path)) as f:
            src = f.read()
        for m in re.finditer(r"const char (\w*USAGE)\[\] =(.*?);\n", src, re.S):
            parts = re.split(r"\b(CLI_\w+_HELP)\b", m[2])
            yield f"{path} {m[1]}", "".join(macros[x] if i % 2 else c_string(x) for i, x in enumerate(parts))


def help_width():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    texts = dict(help_texts(root))
    long = [f"{where}: {len(line)} columns: {line.strip()[:40]!r}" for where, text in texts.items()
            for line in text.split("\n") if len(line) > HELP_WIDTH]
    found = {w.split()[0] for w in texts}
    missing = sorted(set(HELP_SOURCES) - found)
    report("help_texts_keep_80_columns", not missing and not long,
           (f"no help found in {missing}; " if missing else "") + "; ".join(long[:6]))



def error_lines_one_line():
    """Every "attn: error:" the commands' sources write begins its line: the
    bench's errors from a failed library call began with "\\n" (to end a
    progress line, which only a terminal has), so that where stderr is a
    file or a pipe the error was two lines, the first empty. These calls
    fail only when the library does, which no test can make happen on
    purpose, so their text is read here."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = []
    for d in ("cli", "cli/mpi", "bench"):
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith(".c"):
                with open(os.path.join(root, d, name)) as f:
                    found += [f"{d}/{name}: {m[0]}" for m in re.finditer(r'"(?:[^"\\]|\\.)*?\\nattn: error:', f.read())]
    report("error_lines_begin_the_line", not found, "; ".join(found[:6]))

def verbose_env():
    """ATTN_VERBOSE: "0", "false", "no", "off" (any case) and empty are off, other values on
    ("false" used to turn it on: any non-empty value but "0" did)."""
    px = save("verbose_x.npy", np.ones((2, 4), np.float32))
    for value in ("", "0", "false", "FALSE", "No", "off", "1", "yes", "true", "on"):
        env = dict(os.environ, ATTN_VERBOSE=value)
        r = subprocess.run([ATTN, "sdpa", "-q", px, "-k", px, "-v", px, "-o", "verbose_out.npy"], capture_output=True,
                           text=True, errors="replace", cwd=TMP, env=env)
        on = "attn: sdpa " in r.stderr
        want = value.lower() not in ("", "0", "false", "no", "off")
        report(f"attn_verbose_{value or 'empty'}_is_{'on' if want else 'off'}", r.returncode == 0 and on == want,
               f"exit {r.returncode}, stderr {r.stderr!r}")


def bench_script_help():
    """bench/quant_accuracy.py --help prints its usage and exits at once (it ran the whole measurement)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "quant_accuracy.py")
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
        why = "" if r.returncode == 0 and r.stdout.startswith("usage: quant_accuracy.py") and "--residual" in r.stdout \
            else f"exit {r.returncode}, stdout {r.stdout[:200]!r}, stderr {r.stderr[-300:]!r}"
    except subprocess.TimeoutExpired:
        why = "still running after 60 s"
    seconds = time.monotonic() - t0
    report("bench_quant_accuracy_help_exits_at_once", not why and seconds < 10, why or f"{seconds:.1f} s")


def small_stack(rng):
    """attn sdpa within a 128 KiB stack (ulimit -s 128, which the threads
    the library starts get too), decoding (L <= 8) and flash, on one thread
    and two: the outputs' paths took 80 KiB of the command's stack and it
    crashed. Not under ASan, whose frames are larger by design."""
    if "asan" in BUILD:
        for cmd in ("sdpa", "mha", "explain", "scaling", "train", "demo"):
            print("skip %s_runs_in_a_128_KiB_stack: ASan's frames are larger by design" % cmd, flush=True)
        return
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_STACK, (128 << 10, 128 << 10))
    problems = []
    for L in (3, 64):
        pq, pk, pv = (save("st_%s.npy" % n, rng.standard_normal(sh).astype(np.float32))
                      for n, sh in (("q", (2, L, 64)), ("k", (2, 300, 64)), ("v", (2, 300, 64))))
        for threads in ("1", "2"):
            r = subprocess.run([ATTN, "sdpa", "-q", pq, "-k", pk, "-v", pv, "-o", "st_out.npy"], capture_output=True,
                               text=True, cwd=TMP, preexec_fn=limited, env=dict(os.environ, ATTN_NUM_THREADS=threads))
            if r.returncode != 0:
                problems.append("L %d, %s thread(s): exit %d %s" % (L, threads, r.returncode, r.stderr.strip()))
    report("sdpa_runs_in_a_128_KiB_stack", not problems, "; ".join(problems))
    # Every other subcommand alike, each writing to a device where it writes
    # a file (a device's bytes go out through a copy buffer at the commit,
    # the deepest point of a run): attn mha -o /dev/null took 53 KiB in its
    # own frame and 64 KiB in the copy's, and died of SIGSEGV.
    E = 8
    px = save("st_x.npy", rng.standard_normal((5, E)).astype(np.float32))
    wdir = os.path.join(TMP, "st_weights")
    os.makedirs(wdir, exist_ok=True)
    for name, shape in (("in_proj_weight", (3 * E, E)), ("in_proj_bias", (3 * E,)), ("out_proj.weight", (E, E)),
                        ("out_proj.bias", (E,))):
        np.save(os.path.join(wdir, name + ".npy"), rng.standard_normal(shape).astype(np.float32))
    mha = ["mha", "-x", px, "--weights", wdir, "--heads", "2"]
    runs = {
        "mha": [mha + ["-o", "/dev/null"], mha + ["-o", "/dev/null", "--alibi", "--causal"],
                mha + ["-o", "st_out.npy", "-w", "/dev/null"], mha + ["--incremental", "--causal", "-o", "/dev/null"],
                mha + ["--incremental", "--causal", "--kv", "e4m3", "-o", "/dev/null"]],
        "explain": [["explain"], ["explain", "--kernel"], ["explain", "--json"], ["explain", "--heads", "3"],
                    ["explain", "--score", "additive"], ["explain", "--trained"]],
        "scaling": [["scaling", "--no-train", "--dims", "16,64", "--queries", "100", "--svg", "/dev/null"]],
        "train": [["train", "--steps", "5", "--svg", "/dev/null"], ["train", "--steps", "5", "--json"]],
        "demo": [["demo"]],
    }
    for cmd, arg_lists in runs.items():
        problems = []
        for args in arg_lists:
            for threads in ("1", "2"):
                r = subprocess.run([ATTN, *args], capture_output=True, text=True, errors="replace", cwd=TMP,
                                   preexec_fn=limited, env=dict(os.environ, ATTN_NUM_THREADS=threads))
                if r.returncode != 0:
                    problems.append("%s, %s thread(s): exit %d %s" % (" ".join(args[:1] + args[5:] if cmd == "mha"
                                    else args), threads, r.returncode, r.stderr.strip()[:200]))
        report("%s_runs_in_a_128_KiB_stack" % cmd, not problems, "; ".join(problems))


# A bad value for each value-taking option of each subcommand, given alone
# (the other arguments each needs to reach the check, if any, before it).
BAD_VALUES = {
    "sdpa": [(o, []) for o in ("--scale", "--dropout", "--threads", "--kv", "--kv-scale", "--kv-residual", "--rope",
                               "--rope-base", "--rope-dim", "--rope-offset", "--softcap", "--window", "--compute")]
            + [("--seed", ["--dropout", "0.5"])],
    "mha": [(o, []) for o in ("--heads", "--kv-heads", "--kv", "--kv-residual", "--rope", "--rope-base",
                              "--rope-dim", "--rope-offset", "--softcap", "--window")],
    "explain": [(o, []) for o in ("--score", "--block", "--workers", "--ranks", "--heads", "--positions",
                                  "--scale-by", "--mode", "--color")],
    "scaling": [(o, []) for o in ("--dims", "--queries", "--keys", "--seed")],
    "train": [(o, []) for o in ("--dk", "--steps", "--batch", "--lr", "--seed")],
}


def help_and_bad_values():
    """One rule for every subcommand: -h or --help anywhere among its
    arguments (but as an option's value) prints its help and exits 0, before
    any other argument is read, as git and GNU's tools do; attn sdpa reported
    a bad value before it, attn train a bad value only after, and an unknown
    argument before --help stopped every command. And a bad value is named
    quoted as the shell reads it back: "--steps  is not" for an empty one,
    "--steps a b is not" for one with a space, left where it began unseen."""
    for cmd, cases in BAD_VALUES.items():
        usage = "usage: attn %s" % cmd
        problems = []
        for args in (["--help"], ["-h"], [cases[0][0], "x", "--help"], ["--help", cases[0][0], "x"],
                     ["--bogus", "-h"], ["-h", "--bogus"], ["--help", "--help"]):
            r = attn(cmd, *args)
            if r.returncode != 0 or not r.stdout.startswith(usage) or r.stderr:
                problems.append("%s: exit %d, stdout %r, stderr %r" % (" ".join(args), r.returncode, r.stdout[:40],
                                                                       r.stderr.strip()[:120]))
        report("%s_help_anywhere_wins" % cmd, not problems, "; ".join(problems))
        for value, shown in (("x", "'x'"), ("", "''"), ("a b", "'a b'"), ("it's", "'it'\\''s'")):
            problems = []
            for option, extra in cases:
                problems += ["%s %r: %s" % (option, value, p) for p in
                             run_expecting_error(attn, TMP, [cmd, *extra, option, value], 2,
                                                 "^attn: error: " + re.escape(option + " " + shown) + " is not ")]
            report("%s_bad_values_quoted_%s" % (cmd, {"x": "plain", "": "empty", "a b": "with_space",
                                                      "it's": "with_quote"}[value]),
                   not problems, "; ".join(problems[:3]))
    # demo takes no arguments: help beside one, and the one quoted
    r = attn("demo", "extra", "--help")
    report("demo_help_anywhere_wins", r.returncode == 0 and r.stdout.startswith("usage: attn demo") and not r.stderr,
           "exit %d, stderr %r" % (r.returncode, r.stderr))
    problems = run_expecting_error(attn, TMP, ["demo", "a b"], 2, r"^attn: error: unknown argument 'a b' ")
    report("demo_unknown_argument_quoted", not problems, "; ".join(problems))
    # An option's value is not a request for help: -o --help names a file.
    px = save("help_x.npy", np.ones((2, 4), np.float32))
    path = os.path.join(TMP, "--help")
    r = attn("sdpa", "-q", px, "-k", px, "-v", px, "-o", "--help")
    report("sdpa_option_value_help_is_a_file_name", r.returncode == 0 and os.path.exists(path) and
           np.array_equal(np.load(path), np.ones((2, 4), np.float32)), "exit %d %r" % (r.returncode, r.stderr))
    if os.path.exists(path):
        os.remove(path)
    # --compute takes its value as every other option: "--compute bf16" ran
    # as the unknown "--compute" with a stray "bf16".
    r1, r2 = attn("sdpa", "-q", px, "-k", px, "-v", px, "--compute", "f32"), attn("sdpa", "-q", px, "-k", px, "-v", px,
                                                                                "--compute=f32")
    report("sdpa_compute_value_apart_or_joined", r1.returncode == 0 and r1.stdout == r2.stdout and r2.returncode == 0,
           "exit %d %r, exit %d %r" % (r1.returncode, r1.stderr, r2.returncode, r2.stderr))


def main():
    rng = np.random.default_rng(7)
    help_and_bad_values()
    small_stack(rng)
    help_width()
    error_lines_one_line()
    verbose_env()
    bench_script_help()
    repeated_options(rng)

    # ---- the classic worked examples -----------------------------------------
    # The six tokens, step 1: q = k = v = X, no scaling; the "journey" context row.
    x = np.array([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                  [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
    px = save("x.npy", x)
    r = attn("sdpa", "-q", px, "-k", px, "-v", px, "--scale", "1", "-o", "ctx.npy")
    ctx = np.load(os.path.join(TMP, "ctx.npy")) if r.returncode == 0 else None
    report("six_tokens_journey_row", ctx is not None and
           np.array_equal(np.round(ctx[1], 4), [0.4419, 0.6515, 0.5683]), f"{r.stderr} {ctx}")

    # The six tokens, step 3: softmax of [4, 16, 12] raw and divided by sqrt(3). One
    # query [1] against keys 4, 16, 12 gives exactly these scores.
    pq, pk, pv = save("one.npy", np.ones((1, 1))), save("s.npy", np.array([[4.], [16.], [12.]])), \
        save("eye.npy", np.eye(3))
    for label, scale, want in (("raw", "1", [0.000, 0.982, 0.018]),
                               ("sqrt3", repr(1 / np.sqrt(3)), [0.001, 0.909, 0.090])):
        r = attn("sdpa", "-q", pq, "-k", pk, "-v", pv, "--scale", scale, "-w", "w.npy", "-o", "o.npy")
        w = np.load(os.path.join(TMP, "w.npy")) if r.returncode == 0 else None
        report(f"six_tokens_softmax_4_16_12_{label}", w is not None and
               np.array_equal(np.round(w[0], 3), want), f"{r.stderr} {w}")

    # The trainable version, SelfAttention(3, 2) on the six tokens with
    # torch.manual_seed(123): nn.Linear computes x @ weight.T, so its .weight
    # saved transposed is the W that `attn explain --wq` uses as X W, and the
    # explainer's output equals the module's, shape (6, 2). Saved untransposed
    # (2, 3), the error says so.
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None:
        print("skip explain_nn_linear_weights_transposed: torch is not installed", flush=True)
    else:
        class SelfAttention(torch.nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W_q = torch.nn.Linear(d_in, d_out, bias=False)
                self.W_k = torch.nn.Linear(d_in, d_out, bias=False)
                self.W_v = torch.nn.Linear(d_in, d_out, bias=False)

            def forward(self, x):
                q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
                return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v

        torch.manual_seed(123)
        sa = SelfAttention(3, 2).double()
        want = sa(torch.tensor(x)).detach().numpy()
        ws = [save(f"{n}.npy", getattr(sa, f"W_{n[1]}").weight.detach().numpy().T.copy()) for n in ("wq", "wk", "wv")]
        r = attn("explain", "--embeddings", px, "--wq", ws[0], "--wk", ws[1], "--wv", ws[2], "--json")
        got = np.array(json.loads(r.stdout)["output"]) if r.returncode == 0 else None
        raw = save("wq_raw.npy", sa.W_q.weight.detach().numpy())
        bad = attn("explain", "--embeddings", px, "--wq", raw, "--wk", ws[1], "--wv", ws[2])
        report("explain_nn_linear_weights_transposed",
               want.shape == (6, 2) and got is not None and got.shape == (6, 2) and
               np.abs(got - want).max() < 1e-12 and bad.returncode != 0 and ".weight.T" in bad.stderr,
               f"{r.stderr} {bad.stderr} {got} {want}")

    # `attn demo` shows the same numbers.
    r = attn("demo")
    report("demo_runs", r.returncode == 0 and "[0.4419, 0.6515, 0.5683]" in r.stdout
           and "0.9088" in r.stdout, r.stderr)
    # Its help promises "from plain averaging to attention with trainable weights":
    # the averaging section's weights are all 1/6 and its context rows all the same,
    # and the trained head's sat attends to cat after 1000 steps, not after one.
    sections = re.split(r"^\d\. ", r.stdout, flags=re.M)
    avg = next((x for x in sections if x.startswith("Plain averaging")), "")
    rows = [[float(v) for v in l.split()[1:]] for l in avg.splitlines()
            if len(l.split()) > 1 and l.split()[0] in ("Your", "journey", "starts", "with", "one", "step")
            and re.match(r"^\d\.\d{4}$", l.split()[1])]
    weights, context = rows[6:12], rows[12:18]
    report("demo_plain_averaging", len(rows) == 18 and all(w == [0.1667] * 6 for w in weights) and
           all(c == context[0] for c in context) and
           np.allclose(context[0], np.round([0.43 + 0.55 + 0.57 + 0.22 + 0.77 + 0.05, 0.15 + 0.87 + 0.85 + 0.58 +
                                             0.25 + 0.80, 0.89 + 0.66 + 0.64 + 0.33 + 0.10 + 0.55], 4) / 6,
                       atol=6e-5), avg)
    trained = next((x for x in sections if x.startswith("A head that learns")), "")
    sat = {m[0]: [float(v) for v in m[1].split()] for m in re.findall(r"^\s*(step \d+)\s+(.*)$", trained, re.M)}
    report("demo_trainable_weights", "learned" in trained and len(sat) == 2 and
           sat["step 1000"][1] > 0.9 and sat["step 1"][1] < 0.5, trained)
    # The sections in the six-token walk's order: averaging, dot products, Q/K/V,
    # the division by sqrt(d_k), then the causal mask (and the toy head learning).
    titles = [x.split("\n")[0] for x in sections[1:]]
    report("demo_in_the_walks_order", [t.split(":")[0].split(" (")[0] for t in titles] ==
           ["Plain averaging", "Weights from dot products", "Attention with trainable weights",
            "Why divide by sqrt(d_k)", "A causal mask", "A head that learns"], titles)

    def demo_matrix(section, title, labels):
        """The rows of the matrix whose title starts a line with `title` in
        `section`, by row label (the title may wrap; the rows follow it)."""
        m = re.search(r"^" + re.escape(title), section, re.M)
        lines = section[m.end():].splitlines() if m else []
        num = re.compile(r"^-?\d+\.\d+$")
        while lines and not (len(lines[0].split()) > 1 and lines[0].split()[0] == labels[0] and
                             num.match(lines[0].split()[1])): lines.pop(0)
        got = {}
        for line in lines:
            f = line.split()
            if len(f) < 2 or f[0] not in labels or f[0] in got or \
               not all(num.match(v) for v in f[1:]): break
            got[f[0]] = [float(v) for v in f[1:]]
        return np.array([got[w] for w in labels]) if len(got) == len(labels) else None

    six = ["Your", "journey", "starts", "with", "one", "step"]
    xs = np.array([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64], [0.22, 0.58, 0.33],
                   [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
    # Step 1's first equation: the scores omega = X X^T (journey's row is
    # 0.9544 1.4950 1.4754 0.8434 0.7070 1.0865), shown before their softmax.
    dot = next((x for x in sections if x.startswith("Weights from dot products")), "")
    omega = demo_matrix(dot, "scores = X X^T", six)
    report("demo_dot_scores", omega is not None and np.array_equal(omega, np.round(xs @ xs.T, 4)) and
           dot.index("\nscores = X X^T") < dot.index("\nweights = softmax"), dot[:400])
    # Trainable weights on the six tokens, 3 features in and 2 out: Q, K, V are
    # (6, 2), the scores divide by sqrt(2) (the keys' size, not the tokens' 3)
    # and the output is (6, 2), as SelfAttention(3, 2)(x).shape says.
    qkv = next((x for x in sections if x.startswith("Attention with trainable weights")), "")
    w = {n: demo_matrix(qkv, f"{n} (3, 2)", ["x0", "x1", "x2"]) for n in ("W_Q", "W_K", "W_V")}
    ok = all(m is not None and m.shape == (3, 2) for m in w.values())
    if ok:
        q_, k_, v_ = xs @ w["W_Q"], xs @ w["W_K"], xs @ w["W_V"]
        s_ = q_ @ k_.T / np.sqrt(2)
        p_ = np.exp(s_ - s_.max(1, keepdims=True))
        p_ /= p_.sum(1, keepdims=True)
        shown_w = demo_matrix(qkv, "weights = softmax(Q K^T / sqrt(2))", six)
        shown_o = demo_matrix(qkv, "output = weights V (6, 2)", six)
        ok = (shown_w is not None and shown_o is not None and shown_o.shape == (6, 2) and
              np.abs(shown_w - p_).max() <= 5.1e-5 and np.abs(shown_o - p_ @ v_).max() <= 5.1e-5 and
              np.array_equal(demo_matrix(qkv, "Q = X W_Q (6, 2)", six), np.round(q_, 4)) and
              np.array_equal(demo_matrix(qkv, "K = X W_K (6, 2)", six), np.round(k_, 4)))
        # sqrt(3), the tokens' size, would give other weights at 4 decimals
        s3 = q_ @ k_.T / np.sqrt(3)
        p3 = np.exp(s3 - s3.max(1, keepdims=True))
        ok = ok and np.abs(shown_w - p3 / p3.sum(1, keepdims=True)).max() > 1e-3
    report("demo_six_tokens_qkv_d_out_2", ok, qkv)
    # "With real head sizes like 64, the difference is much bigger": random rows
    # of 3 scores, the mean largest weight raw and divided by sqrt(d_k). The
    # demo's 2000 rows (seed 0) are drawn again here from the library's
    # documented generator (splitmix64, Box-Muller: per query q, then its 3
    # keys) and must match to the 4 decimals shown, the gap being raw - scaled;
    # NumPy's own 20,000 rows (about 0.674 / 0.569 and 0.926 / 0.595) say the
    # numbers are what any random draw gives, within sampling noise.
    why = next((x for x in sections if x.startswith("Why divide by sqrt(d_k)")), "")
    rows_ = re.findall(r"^\s*d_k = (3|64)\s+(\d\.\d{4})\s+(\d\.\d{4})\s+(\d\.\d{4})\s*$", why, re.M)
    big = np.array([[float(v) for v in r_[1:]] for r_ in rows_]) \
        if [r_[0] for r_ in rows_] == ["3", "64"] else None

    def top_weights(v, d):  # v: (queries, 1 + keys, d), the query then its keys
        ss = np.einsum("qd,qkd->qk", v[:, 0], v[:, 1:])
        tops = []
        for sc in (1.0, d ** -0.5):
            p_ = np.exp(ss * sc - (ss * sc).max(1, keepdims=True))
            tops.append((p_ / p_.sum(1, keepdims=True)).max(1).mean())
        return tops

    def splitmix64_normals(seed, n):  # n even
        with np.errstate(over="ignore"):
            z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        u = ((z ^ (z >> np.uint64(31))) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        radius, angle = np.sqrt(-2 * np.log(1 - u[0::2])), 6.283185307179586 * u[1::2]
        return np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1).ravel()

    exact = np.array([top_weights(splitmix64_normals(0, 2000 * 4 * d).reshape(2000, 4, d), d) for d in (3, 64)])
    nrng = np.random.default_rng(1)
    sampled = np.array([top_weights(nrng.standard_normal((20000, 4, d)), d) for d in (3, 64)])
    report("demo_bigger_heads_bigger_difference", big is not None and big.shape == (2, 3) and
           np.array_equal(big[:, :2], np.round(exact, 4)) and np.abs(big[:, 2] - (big[:, 0] - big[:, 1])).max() <= 1.0001e-4
           and np.abs(exact - sampled).max() < 0.02 and big[1, 2] > 2 * big[0, 2], f"{big} {exact} {sampled}")
    h = attn("demo", "--help")
    report("demo_help_names_both", "plain averaging" in h.stdout and "trainable weights" in h.stdout, h.stdout)

    # ---- output: dtype, printing -------------------------------------------
    q32 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    k32 = rng.standard_normal((2, 5, 4)).astype(np.float32)
    v32 = rng.standard_normal((2, 5, 3)).astype(np.float32)
    pq32, pk32, pv32 = save("q32.npy", q32), save("k32.npy", k32), save("v32.npy", v32)
    r = attn("sdpa", "-q", pq32, "-k", pk32, "-v", pv32, "-o", "o32.npy")
    o32 = np.load(os.path.join(TMP, "o32.npy"))
    report("f32_in_f32_out", r.returncode == 0 and o32.dtype == np.float32 and o32.shape == (2, 3, 3),
           f"{o32.dtype} {o32.shape}")
    r = attn("sdpa", "-q", pq32, "-k", pk32, "-v", pv32)
    nums = [float(t) for t in re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?", r.stdout)]
    report("print_matches_file", r.returncode == 0 and r.stdout.startswith("[[[") and
           len(nums) == o32.size and np.allclose(nums, o32.ravel(), atol=1e-6), r.stdout)
    # README: printed as NumPy prints the array with precision 6 (float32) or 8
    # (float64) and floatmode 'fixed', digits, brackets and line breaks alike.
    for label, x in (("f32", q32), ("f64", rng.standard_normal((3, 5))), ("f32_scientific", q32 * 1e5)):
        px_ = save("print_%s.npy" % label, x)
        r = attn("sdpa", "-q", px_, "-k", px_, "-v", px_, "-o", "print_out.npy")
        shown = attn("sdpa", "-q", px_, "-k", px_, "-v", px_)
        o = np.load(os.path.join(TMP, "print_out.npy"))
        with np.printoptions(precision=6 if x.dtype == np.float32 else 8, floatmode="fixed", linewidth=75):
            want = str(o) + "\n"
        report("print_as_numpy_fixed_%s" % label, r.returncode == 0 and shown.stdout == want,
               f"{shown.stdout!r} != {want!r}")
    big = rng.standard_normal((40, 50))
    pb = save("big.npy", big)
    r = attn("sdpa", "-q", pb, "-k", pb, "-v", pb)
    report("print_summarises_large", r.returncode == 0 and "..." in r.stdout and
           len(r.stdout.splitlines()) < 20, f"{len(r.stdout.splitlines())} lines")
    # An empty output (no queries, or a batch of 0) prints as NumPy prints
    # any empty array: [] (it was [[]\n\n []] for (2, 0, 3)).
    for label, shape in (("no_queries", (2, 0, 4)), ("batch_of_0", (0, 2, 3, 4))):
        pe = save("empty_q.npy", np.zeros(shape, np.float32))
        pk4 = save("empty_k.npy", np.zeros(shape[:-2] + (5, 4), np.float32))
        r = attn("sdpa", "-q", pe, "-k", pk4, "-v", pk4)
        report("print_empty_%s_as_numpy" % label, r.returncode == 0 and r.stdout == str(np.zeros(shape)) + "\n",
               f"{r.stdout!r} {r.stderr}")
    r = attn("sdpa", "-q", px, "-k", px, "-v", px, "--causal", "-w", "w.npy", "-o", "o.npy")
    w = np.load(os.path.join(TMP, "w.npy"))
    report("causal_weights_lower_triangular", r.returncode == 0 and np.all(np.triu(w, 1) == 0) and
           np.allclose(w.sum(-1), 1), str(w))
    report("output_file_mode", oct(os.stat(os.path.join(TMP, "o.npy")).st_mode & 0o777) !=
           "0o600", "output file kept mkstemp's 0600 mode")

    # ---- help and version ----------------------------------------------------
    r = attn("--help")
    report("help", r.returncode == 0 and "sdpa" in r.stdout and "usage" in r.stdout, r.stderr)
    r = attn("sdpa", "--help")
    report("sdpa_help", r.returncode == 0 and "--causal" in r.stdout and "example" in r.stdout, r.stderr)
    # Every option mha takes is in its help: -x's long name too.
    r = attn("mha", "--help")
    report("mha_help_names_input", r.returncode == 0 and re.search(r"^\s+-x, --input FILE\s", r.stdout, re.M),
           r.stdout[:400])
    r = attn("--version")
    report("version", r.returncode == 0 and re.match(r"attn \d+\.\d+\.\d+", r.stdout), r.stdout)
    # attn help COMMAND (or --help COMMAND) is that command's help, as git reads it: it printed the general one
    for first, name in (("help", "help_command"), ("--help", "help_flag_command"), ("-h", "h_flag_command")):
        r, own = attn(first, "sdpa"), attn("sdpa", "--help")
        report(name, r.returncode == 0 and r.stdout == own.stdout and
               "usage: attn sdpa" in r.stdout and not r.stderr, r.stdout[:200] + r.stderr)
    r = attn("help", "train")
    report("help_command_train", r.returncode == 0 and r.stdout.startswith("usage: attn train"), r.stdout[:200])
    expect_error("usage_help_unknown_command", ["help", "frobnicate"], 2, "unknown command 'frobnicate'", ())
    expect_error("usage_help_two_commands", ["help", "sdpa", "mha"], 2, "help takes one command to describe", ())
    expect_error("usage_version_with_argument", ["--version", "extra"], 2, "--version takes no arguments", ())
    r = attn()
    report("no_command", r.returncode == 2 and "usage" in r.stderr, r.stderr)

    # ---- usage errors (exit 2) -------------------------------------------------
    base = ["sdpa", "-q", pq32, "-k", pk32, "-v", pv32, "-o", "out.npy"]
    expect_error("usage_unknown_command", ["frobnicate"], 2, "unknown command 'frobnicate'")
    expect_error("usage_missing_q", ["sdpa", "-k", pk32, "-v", pv32, "-o", "out.npy"], 2, r"missing -q")
    expect_error("usage_unknown_option", base + ["--bogus"], 2, r"unknown argument '--bogus'")
    expect_error("usage_missing_value", ["sdpa", "-q", pq32, "-k", pk32, "-v"], 2, r"-v needs a value")
    # attn bench hands its arguments to attn-bench: the 255th and after were
    # dropped, and the run went on without them.
    expect_error("usage_bench_too_many_arguments", ["bench"] + ["--quick"] * 255, 2,
                 r"attn bench takes at most 254 arguments")
    expect_error("usage_bench_mpi_too_many_arguments", ["bench", "--mpi"] + ["--quick"] * 254, 2,
                 r"attn bench takes at most 254 arguments")
    # attn bench runs attn-bench from beside the attn that runs: through a
    # symbolic link to attn in another directory (~/bin/attn) it looked
    # beside the link, or on PATH, and said to build it with `make bench`.
    if os.path.exists(os.path.join(os.path.dirname(ATTN), "attn-bench")):
        os.makedirs(os.path.join(TMP, "linkbin"), exist_ok=True)
        link = os.path.join(TMP, "linkbin", "attn")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(ATTN, link)
        for how, argv0, env in (("path", link, None),
                                ("on_path", "attn", dict(os.environ, PATH=os.path.dirname(link) + ":/usr/bin:/bin"))):
            r = subprocess.run([argv0, "bench", "--help"], capture_output=True, text=True, cwd=TMP, env=env)
            report("bench_through_symlink_" + how, r.returncode == 0 and r.stdout.startswith("usage: attn bench"),
                   f"exit {r.returncode}: {r.stderr.strip()}")
    else:
        print(f"skip bench_through_symlink: no attn-bench beside {ATTN} (make bench)")
    expect_error("usage_scale_nan", base + ["--scale", "nan"], 2, r"--scale 'nan' is not a finite number")
    expect_error("usage_scale_text", base + ["--scale", "big"], 2, r"--scale 'big' is not a finite")
    expect_error("usage_causal_mode", base + ["--causal=sideways"], 2, r"top-left or bottom-right")
    expect_error("usage_same_outputs", base + ["-w", "out.npy"], 2, r"same file")
    # One file by two spellings: both outputs would be renamed onto it, and
    # out.npy would hold the weights. Also through a directory's other name
    # and a symbolic link to an existing output.
    expect_error("usage_same_outputs_dot_slash", base + ["-w", "./out.npy"], 2, r"-o and -w name the same file")
    os.makedirs(os.path.join(TMP, "sub"), exist_ok=True)
    expect_error("usage_same_outputs_dot_dot", base + ["--lse", "sub/../out.npy"], 2, r"-o and --lse name the same file")
    np.save(os.path.join(TMP, "held.npy"), np.arange(3.0))
    if os.path.lexists(os.path.join(TMP, "alias.npy")):
        os.remove(os.path.join(TMP, "alias.npy"))
    os.symlink("held.npy", os.path.join(TMP, "alias.npy"))
    problems = run_expecting_error(attn, TMP, base[:-2] + ["-o", "held.npy", "-w", "alias.npy"], 2,
                                   r"-o and -w name the same file", ())
    report("usage_same_outputs_symlink", not problems and
           np.array_equal(np.load(os.path.join(TMP, "held.npy")), np.arange(3.0)), "; ".join(problems))
    # An empty output name (an unset shell variable, -o "$OUT"): said so, no
    # "cannot rename into :", and no temporary left behind.
    expect_error("output_path_empty", base[:-2] + ["-o", ""], 1, r"an output file name is empty")
    expect_error("output_path_empty_weights", base + ["-w", ""], 1, r"an output file name is empty")
    expect_error("output_path_empty_svg", ["scaling", "--no-train", "--dims", "4", "--svg", ""], 1,
                 r"an output file name is empty")
    # A number is the whole argument: strtoull read " -1" as 2^64 - 1, and
    # strtol and strtod skip white space before a number (not after it).
    for flag, value in (("--seed", " -1"), ("--seed", " 5"), ("--threads", " 4"), ("--scale", " 1"),
                        ("--dropout", "\t0.5"), ("--softcap", "\n3")):
        extra = ["--dropout", "0.5"] if flag == "--seed" else []
        shown = value.replace("\t", "\\t").replace("\n", "\\n")  # the one line shows control bytes escaped
        expect_error("usage_leading_space_%s_%s" % (flag.lstrip("-"), value.strip().lstrip("-")),
                     base + extra + [flag, value], 2, re.escape(flag + " '" + shown + "'") + " is not")
    # Whatever an argument holds, the error is one line, and no escape
    # sequence reaches the terminal: a newline or an ESC shows as \n, \x1b.
    expect_error("usage_error_is_one_line", base + ["--bogus\nattn: error: \x1b[2Jforged"], 2,
                 re.escape(r"unknown argument '--bogus\nattn: error: \x1b[2Jforged'"))
    # Nor a C1 control: U+009B (CSI) starts an escape sequence as ESC [ does,
    # and reached the terminal as its two UTF-8 bytes; a byte that starts no
    # UTF-8 character (0x9b in a Latin-1 file name, CSI on an 8-bit terminal)
    # reached it raw. Other characters stay as they are.
    expect_error("usage_error_escapes_c1_control", base + ["--bogus\u009b2J\u00e9"], 2,
                 re.escape("unknown argument '--bogus\\u009b2J\u00e9'"))
    expect_error("file_name_not_utf8_escaped", ["sdpa", "-q", "q\udc9b2J\udcff.npy", "-k", pk32, "-v", pv32,
                                               "-o", "out.npy"], 1, re.escape(r"-q q\x9b2J\xff.npy: cannot open"))
    # An underflow is a finite number, rounded (Python's float('1e-400') is
    # 0.0): the scores vanish and each output row is v's mean over the keys.
    for tiny in ("1e-400", "4.9e-324"):
        r = attn(*base, "--scale", tiny)
        got = np.load(os.path.join(TMP, "out.npy")) if r.returncode == 0 else None
        report("scale_underflow_%s_is_zero" % tiny, got is not None and
               np.allclose(got, np.broadcast_to(v32.astype(np.float64).mean(1, keepdims=True), (2, 3, 3)), atol=1e-6),
               r.stderr)

    # ---- a ragged batch (--cu-seqlens-q/-k): bad offsets, one line each --------
    qp = save("vq.npy", rng.standard_normal((8, 2, 4)).astype(np.float32))
    kp = save("vk.npy", rng.standard_normal((9, 1, 4)).astype(np.float32))
    cq, ck = save("cq.npy", np.array([0, 3, 3, 8], np.int64)), save("ck.npy", np.array([0, 5, 9, 9], np.int32))
    ragged = ["sdpa", "-q", qp, "-k", kp, "-v", kp, "-o", "out.npy"]
    r = attn(*ragged, "--cu-seqlens-q", cq, "--cu-seqlens-k", ck, "--causal=bottom-right")
    report("ragged_runs", r.returncode == 0 and np.load(os.path.join(TMP, "out.npy")).shape == (8, 2, 4), r.stderr)
    for label, offsets, pattern in (
            ("decreasing", [0, 5, 3, 8], r"cu_seqlens_q decreases at 2: 5 then 3"),
            ("not_from_0", [1, 3, 3, 8], r"cu_seqlens_q\[0\] is 1"),
            ("short", [0, 3, 3, 7], r"cu_seqlens_q\[3\] is 7 but the tensor has 8 rows"),
            ("overflowing", [0, 2**63 - 1, -2**63, 8], r"decreases at 2"),
            ("count", [0, 8], r"has 2 offsets but --cu-seqlens-k has 4")):
        bad = save(f"cu_{label}.npy", np.array(offsets, np.int64))
        expect_error(f"ragged_offsets_{label}", ragged + ["--cu-seqlens-q", bad, "--cu-seqlens-k", ck], 1, pattern)
    expect_error("ragged_offsets_float", ragged + ["--cu-seqlens-q", save("cu_f.npy", np.array([0., 8.])),
                                                   "--cu-seqlens-k", ck], 1, r"not an integer this reads")
    expect_error("ragged_needs_both", ragged + ["--cu-seqlens-q", cq], 2, r"needs both --cu-seqlens-q and --cu-seqlens-k")
    expect_error("ragged_no_weights", ragged + ["--cu-seqlens-q", cq, "--cu-seqlens-k", ck, "-w", "w.npy"], 2,
                 r"-w is not taken with a ragged batch", outputs=("out.npy", "w.npy"))

    # ---- data errors (exit 1): files -------------------------------------------
    def with_q(path):
        return ["sdpa", "-q", path, "-k", pk32, "-v", pv32, "-o", "out.npy", "-w", "w.npy"]

    outs = ("out.npy", "w.npy")
    good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }\n"
    data = q32.tobytes()
    expect_error("file_missing", with_q("nope.npy"), 1, r"-q nope\.npy: cannot open nope\.npy", outs)
    # An empty file name (an unset shell variable, -q "$Q") is said to be
    # empty: it was "-q : cannot open : No such file or directory".
    expect_error("file_name_empty_q", with_q(""), 1, r"^attn: error: -q: the input file name is empty$", outs)
    expect_error("file_name_empty_mask", base + ["-m", ""], 1, r"^attn: error: -m: the input file name is empty$")
    expect_error("file_name_empty_cu_seqlens", ragged + ["--cu-seqlens-q", "", "--cu-seqlens-k", ck], 1,
                 r"^attn: error: --cu-seqlens-q: the input file name is empty$")
    # A FIFO that no one writes: fopen waited for a writer forever; it is
    # refused at once, as any file that is not a regular one.
    fifo = os.path.join(TMP, "fifo.npy")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    try:
        problems = error_problems(subprocess.run([ATTN, *with_q(fifo)], capture_output=True, text=True, cwd=TMP,
                                                 timeout=30), 1, r"-q .*fifo\.npy: .*fifo\.npy is not a regular file")
    except subprocess.TimeoutExpired:
        problems = ["still waiting for a writer after 30 s"]
    report("file_fifo_refused_without_waiting", not problems, "; ".join(problems))
    bad = os.path.join(TMP, "text.npy")
    with open(bad, "w") as f:
        f.write("hello, world\n")
    expect_error("file_not_npy", with_q(bad), 1, r"text\.npy: not a \.npy file", outs)
    expect_error("file_truncated", with_q(raw_npy("trunc.npy", good, data[:-3])), 1,
                 r"trunc\.npy: data is truncated: shape \(2, 3, 4\) needs 96 bytes but the file has 93", outs)
    expect_error("file_trailing", with_q(raw_npy("trail.npy", good, data + b"junk")), 1,
                 r"trail\.npy: 4 unexpected bytes", outs)
    # Fortran order (what np.save writes for x.T) is read: the same output as the C-order copy.
    np.save(os.path.join(TMP, "q_fortran.npy"), np.asfortranarray(q32))
    np.save(os.path.join(TMP, "q_c.npy"), q32)
    rf = attn("sdpa", "-q", "q_fortran.npy", "-k", "q_c.npy", "-v", "q_c.npy", "-o", "of.npy")
    rc = attn("sdpa", "-q", "q_c.npy", "-k", "q_c.npy", "-v", "q_c.npy", "-o", "oc.npy")
    report("file_fortran_read", rf.returncode == 0 and rc.returncode == 0 and
           np.array_equal(np.load(os.path.join(TMP, "of.npy")), np.load(os.path.join(TMP, "oc.npy"))), rf.stderr)
    # A control byte in the header: a NUL ended the C string, so that
    # '<f4\0' (a dtype NumPy refuses) was read as '<f4'; an escape would
    # reach the terminal in the error message.
    for label, header, offset in (("nul", good.replace("<f4", "<f4\0"), 24),
                                  ("escape", good.replace("'descr'", "'descr\x1b[2J'"), 17)):
        expect_error("file_header_control_byte_" + label, with_q(raw_npy("ctl.npy", header, data)), 1,
                     r"ctl\.npy: header has the control byte 0x%02x at offset %d" % (ord(header[offset - 10]), offset),
                     outs)
    # A C1 control in the header's text (U+009B, CSI) is shown escaped, as
    # the byte 0x9b alone is (a Latin-1 header holds it raw).
    expect_error("file_header_c1_control_escaped", with_q(raw_npy("c1.npy", good.replace("'shape'", "'sh\u009bape'"),
                                                                  data)), 1,
                 re.escape(r"c1.npy: header has an unexpected or repeated key 'sh\u009bape'"), outs)
    with open(raw_npy("c1raw.npy", good.replace("'shape'", "'sh?ape'"), data), "rb") as f:
        latin1 = f.read().replace(b"sh?ape", b"sh\x9bape", 1)
    with open(os.path.join(TMP, "c1raw.npy"), "wb") as f:
        f.write(latin1)
    expect_error("file_header_raw_c1_byte_escaped", with_q(os.path.join(TMP, "c1raw.npy")), 1,
                 re.escape(r"c1raw.npy: header has an unexpected or repeated key 'sh\x9bape'"), outs)
    # A library error over the inputs names every file given, the optional
    # ones too: a wrong --sinks or --alibi-slopes was named by q, k and v only.
    heads = q32.shape[0]  # q32 is (H, L, E)
    for flag in ("--sinks", "--alibi-slopes"):
        bad = save("bad_%s.npy" % flag.strip("-"), np.ones(heads + 1, np.float32))
        expect_error("file_error_names_%s" % flag.strip("-"), ["sdpa", "-q", pq32, "-k", pk32, "-v", pv32, flag, bad,
                     "-o", "out.npy"], 1, r"\[q=.*, %s=.*bad_%s\.npy \(%d,\)\]$" % (flag.strip("-"), flag.strip("-"), heads + 1))
    # The shape is a tuple as Python reads one: (24) is the number 24, which
    # NumPy refuses ("shape is not valid"), and was read as (24,); 02 is no
    # Python 3 literal (Python 2 read 010 as 8), and was read as 2; 2L is
    # Python 2's long, which NumPy takes in the 1.0 and 2.0 formats only.
    expect_error("file_shape_number_not_tuple", ["sdpa", "-q", pq32, "-k", pk32, "-v", pv32, "--sinks", raw_npy(
        "s24.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (24), }\n", data), "-o", "out.npy"], 1,
        re.escape(r"s24.npy: header 'shape' (24) is a number, not a tuple: a 1-D shape is written (24,)"))
    expect_error("file_shape_leading_zero", with_q(raw_npy("zero.npy", good.replace("(2, 3, 4)", "(02, 3, 4)"), data)),
                 1, re.escape(r"zero.npy: header 'shape' has 02: Python takes no leading zero"), outs)
    long_header = good.replace("(2, 3, 4)", "(2L, 3L, 4L)")
    for major in (1, 2):
        r = attn("sdpa", "-q", raw_npy("long%d.npy" % major, long_header, data, major=major), "-k", pk32, "-v", pv32,
                 "-o", "olong.npy")
        report("file_shape_python2_long_read_in_format_%d" % major, r.returncode == 0 and np.array_equal(
            np.load(os.path.join(TMP, "olong.npy")), o32), r.stderr)
    expect_error("file_shape_python2_long_refused_in_format_3",
                 with_q(raw_npy("long3.npy", long_header, data, major=3)), 1,
                 re.escape(r"long3.npy: header 'shape' is not a valid tuple"), outs)
    # Big-endian data (x.astype('>f4'), as NumPy saves data from a big-endian
    # source) is read as NumPy reads it: the same output as little-endian.
    # It was refused ("save as little-endian").
    for name, a in (("q_be.npy", q32.astype(">f4")), ("k_be.npy", k32.astype(">f2")), ("v_be.npy", v32.astype(">f4"))):
        np.save(os.path.join(TMP, name), a)
    np.save(os.path.join(TMP, "k_le16.npy"), k32.astype("<f2"))
    rb = attn("sdpa", "-q", "q_be.npy", "-k", "k_be.npy", "-v", "v_be.npy", "-o", "obe.npy")
    rl = attn("sdpa", "-q", pq32, "-k", "k_le16.npy", "-v", pv32, "-o", "ole.npy")
    report("file_big_endian_read_as_numpy_reads_it", rb.returncode == 0 and rl.returncode == 0 and
           np.array_equal(np.load(os.path.join(TMP, "obe.npy")), np.load(os.path.join(TMP, "ole.npy"))),
           rb.stderr + rl.stderr)
    ragged_be = ["sdpa", "-q", qp, "-k", kp, "-v", kp, "--causal=bottom-right"]
    rb = attn(*ragged_be, "-o", "out_be.npy", "--cu-seqlens-q", save("cq_be.npy", np.array([0, 3, 3, 8], ">i8")),
              "--cu-seqlens-k", save("ck_be.npy", np.array([0, 5, 9, 9], ">i4")))
    rl = attn(*ragged_be, "-o", "out_le.npy", "--cu-seqlens-q", cq, "--cu-seqlens-k", ck)
    report("file_big_endian_offsets_read", rb.returncode == 0 and rl.returncode == 0 and
           np.array_equal(np.load(os.path.join(TMP, "out_be.npy")), np.load(os.path.join(TMP, "out_le.npy"))),
           rb.stderr + rl.stderr)
    # Byte orders NumPy reads as the machine's (little-endian here): '='
    # (native), '|' (none: NumPy takes it for an 8-byte float too) and no
    # order character; bool also by its type code '?'. Each was refused
    # ("dtype '=f4' is not supported"); each reads as NumPy reads it.
    def redescr(name, a, descr):
        header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }\n" % (descr, a.shape)
        path = raw_npy(name, header, np.ascontiguousarray(a).tobytes())
        with open(path, "rb") as f:
            same = np.array_equal(np.lib.format.read_array(f), a)
        return path, same
    for order in ("=", "|", ""):
        label = {"=": "native", "|": "none", "": "bare"}[order]
        (qo, sq), (ko, sk), (vo, sv) = (redescr("q_%s.npy" % label, q32, order + "f4"),
                                        redescr("k_%s.npy" % label, k32.astype("<f2"), order + "f2"),
                                        redescr("v_%s.npy" % label, v32, order + "f4"))
        r = attn("sdpa", "-q", qo, "-k", ko, "-v", vo, "-o", "o_%s.npy" % label)
        report("file_byte_order_%s_read_as_numpy_reads_it" % label, sq and sk and sv and r.returncode == 0 and
               np.array_equal(np.load(os.path.join(TMP, "o_%s.npy" % label)), np.load(os.path.join(TMP, "ole.npy"))),
               r.stderr)
    q64 = q32.astype(np.float64)
    q8, s8 = redescr("q_f8_none.npy", q64, "|f8")
    r8 = attn("sdpa", "-q", q8, "-k", save("k64.npy", k32.astype(np.float64)),
              "-v", save("v64.npy", v32.astype(np.float64)), "-o", "o_f8_none.npy")
    rl8 = attn("sdpa", "-q", save("q64.npy", q64), "-k", "k64.npy", "-v", "v64.npy", "-o", "o_f8_le.npy")
    report("file_byte_order_none_f8_read_as_numpy_reads_it", s8 and r8.returncode == 0 and rl8.returncode == 0 and
           np.array_equal(np.load(os.path.join(TMP, "o_f8_none.npy")), np.load(os.path.join(TMP, "o_f8_le.npy"))),
           r8.stderr + rl8.stderr)
    mask = np.random.default_rng(3).random((3, 5)) < 0.7
    mask[:, 0] = True
    unmasked = base[:-2]  # without its -o
    rl = attn(*unmasked, "-m", save("m_le.npy", mask), "-o", "om_le.npy")
    for descr, label in (("?", "type_code"), ("=b1", "native"), ("b1", "bare"), ("<b1", "little_endian")):
        path, same = redescr("m_%s.npy" % label, mask, descr)
        r = attn(*unmasked, "-m", path, "-o", "om.npy")
        report("file_bool_descr_%s_read" % label, same and r.returncode == 0 and rl.returncode == 0 and np.array_equal(
            np.load(os.path.join(TMP, "om.npy")), np.load(os.path.join(TMP, "om_le.npy"))), r.stderr + rl.stderr)
    cq_native, sc = redescr("cq_native.npy", np.array([0, 3, 3, 8], np.int64), "=i8")
    rb = attn(*ragged_be, "-o", "out_native.npy", "--cu-seqlens-q", cq_native, "--cu-seqlens-k", ck)
    report("file_native_order_offsets_read", sc and rb.returncode == 0 and np.array_equal(
        np.load(os.path.join(TMP, "out_native.npy")), np.load(os.path.join(TMP, "out_le.npy"))), rb.stderr)
    expect_error("file_int64", with_q(raw_npy("i8.npy", good.replace("<f4", "<i8"), data * 2)), 1,
                 r"i8\.npy: integer arrays \('<i8'\) are not supported; save floats", outs)
    expect_error("file_object", with_q(raw_npy("obj.npy", good.replace("<f4", "|O"), data * 2)), 1,
                 r"obj\.npy: object arrays", outs)
    expect_error("file_header_lies", with_q(raw_npy("lies.npy", good, data, header_len=len(good) + 7)), 1,
                 r"lies\.npy: header does not end in a newline", outs)
    expect_error("file_header_past_end", with_q(raw_npy("past.npy", good, b"", header_len=5000)), 1,
                 r"past\.npy: header length 5000 runs past the end", outs)
    expect_error("file_absurd_shape", with_q(raw_npy(
        "absurd.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 8), }\n")),
        1, r"absurd\.npy: shape .* too large", outs)
    expect_error("file_version", with_q(raw_npy("v9.npy", good, data, major=9)), 1,
                 r"v9\.npy: \.npy format version 9\.0", outs)
    expect_error("file_rank6", with_q(save("r6.npy", np.zeros((1, 1, 1, 1, 1, 1), np.float32))), 1,
                 r"r6\.npy: array has more than 5 dimensions", outs)

    # ---- data errors (exit 1): shapes and dtypes ---------------------------------
    expect_error("shape_e_mismatch", ["sdpa", "-q", pq32, "-k", save("k5.npy", np.zeros((2, 5, 5), np.float32)),
                                      "-v", pv32, "-o", "out.npy"], 1,
                 r"k has E=5 but q has E=4.*q=.*q32\.npy \(2, 3, 4\), k=.*k5\.npy \(2, 5, 5\)")
    expect_error("shape_s_mismatch", ["sdpa", "-q", pq32, "-k", pk32, "-v",
                                      save("v6.npy", np.zeros((2, 6, 3), np.float32)), "-o", "out.npy"], 1,
                 r"v has S=6 rows but k has S=5")
    expect_error("shape_batch", ["sdpa", "-q", pq32, "-k", save("k3b.npy", np.zeros((3, 5, 4), np.float32)),
                                 "-v", pv32, "-o", "out.npy"], 1, r"heads but k has|neither equal nor 1")
    expect_error("shape_heads", ["sdpa", "-q", save("q3h.npy", np.zeros((3, 2, 4), np.float32)),
                                 "-k", pk32, "-v", pv32, "-o", "out.npy"], 1,
                 r"q has 3 heads, not a multiple of k's and v's 2 heads")
    expect_error("shape_rank1", ["sdpa", "-q", save("q1.npy", np.zeros(4, np.float32)), "-k", pk32,
                                 "-v", pv32, "-o", "out.npy"], 1, r"q has rank 1")
    # Dimensions of 0 as attn_sdpa takes them: at E never; no queries gives
    # empty outputs, no keys out 0 and lse -inf (PyTorch's softmax over no
    # key), the weights (…, L, 0), and the backward dq 0.
    expect_error("shape_zero_dim", ["sdpa", "-q", save("q0e.npy", np.zeros((2, 3, 0), np.float32)), "-k", pk32,
                                    "-v", pv32, "-o", "out.npy"], 1, r"a dimension of 0 is taken only for L")
    r = attn("sdpa", "-q", save("q0.npy", np.zeros((2, 0, 4), np.float32)), "-k", pk32, "-v", pv32, "-o", "o0.npy",
             "-w", "w0.npy", "--lse", "l0.npy")
    got = [np.load(os.path.join(TMP, f)) for f in ("o0.npy", "w0.npy", "l0.npy")] if r.returncode == 0 else []
    report("shape_no_queries_empty_outputs", r.returncode == 0 and not r.stdout and [g.shape for g in got] == [
        (2, 0, np.load(pv32).shape[-1]), (2, 0, np.load(pk32).shape[-2]), (2, 0)], r.stderr + str([g.shape for g in got]))
    q3 = np.load(pq32)
    r = attn("sdpa", "-q", pq32, "-k", save("k0.npy", np.zeros((2, 0, 4), np.float32)),
             "-v", save("v0.npy", np.zeros((2, 0, 3), np.float32)), "-o", "o0k.npy", "-w", "w0k.npy", "--lse", "l0k.npy",
             "--grad-out", save("g0k.npy", np.ones(q3.shape[:-1] + (3,), np.float32)), "--dq", "dq0k.npy")
    got = [np.load(os.path.join(TMP, f)) for f in ("o0k.npy", "w0k.npy", "l0k.npy", "dq0k.npy")] if not r.returncode else []
    ok = len(got) == 4 and got[0].shape == q3.shape[:-1] + (3,) and not got[0].any() and \
        got[1].shape == q3.shape[:-1] + (0,) and np.all(np.isneginf(got[2])) and got[3].shape == q3.shape and \
        not got[3].any()
    report("shape_no_keys_out_0_lse_neg_inf", r.returncode == 0 and ok, r.stderr + str([g.shape for g in got]))
    expect_error("mask_shape", base + ["-m", save("m.npy", np.ones((3, 4), bool))], 1,
                 r"mask has shape \(3, 4\), which does not broadcast to \(2, 3, 5\)")
    # An integer mask is refused with a hint at bool: as floats, 0 and 1 would be a bias, not a mask.
    for dt in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
        expect_error("mask_integer_%s" % dt, base + ["-m", save("m_%s.npy" % dt, np.ones((3, 5), dt))], 1,
                     r"-m .*m_%s\.npy: integer arrays .* a 0/1 mask as bool \(x\.astype\(bool\)\)" % dt)
    expect_error("mask_dtype", base + ["-m", save("m64.npy", np.ones((3, 5)))], 1,
                 r"mixed dtypes: -m .*m64\.npy is float64 but -q .* is float32")
    expect_error("dtype_mixed", ["sdpa", "-q", pq32, "-k", save("k64.npy", k32.astype(np.float64)), "-v", pv32,
                                 "-o", "out.npy"], 1, r"mixed dtypes: -k .*k64\.npy is float64 but -q .* is float32")
    expect_error("dtype_bool", ["sdpa", "-q", save("qb.npy", np.ones((2, 3, 4), bool)), "-k", pk32, "-v", pv32,
                                "-o", "out.npy"], 1, r"qb\.npy has dtype bool")
    # A stream output (stdout, a FIFO, a device) is written at the commit,
    # with the files: a run that fails after making it printed a whole .npy
    # on stdout beside its error.
    for label, extra in (("weights_dir_missing", ["-w", "no/such/dir/w.npy"]),
                         ("backward_fails", ["--grad-out", pq32, "--dq", "dq.npy"])):
        expect_error("stdout_output_not_written_when_%s" % label, ["sdpa", "-q", pq32, "-k", pk32, "-v", pv32, "-o",
                                                                  "/dev/stdout"] + extra, 1, r".", outputs=("dq.npy",))
    expect_error("output_dir_missing", ["sdpa", "-q", pq32, "-k", pk32, "-v", pv32, "-o", "no/such/dir/o.npy"],
                 1, r"cannot create no/such/dir/o\.npy: No such file", outputs=())

    expect_error("kv_bf16_needs_f32_q", ["sdpa", "-q", px, "-k", px, "-v", px, "--kv-bf16", "-o", "out.npy"], 1,
                 r"--kv-bf16 needs float32 q")
    expect_error("f16_q_rejected", ["sdpa", "-q", save("q16.npy", q32.astype(np.float16)), "-k", pk32, "-v", pv32,
                                    "-o", "out.npy"], 1, r"q16\.npy has dtype float16; q must be float32 or float64")
    r = attn("sdpa", "-q", pq32, "-k", save("k16.npy", k32.astype(np.float16)), "-v", pv32, "--kv-bf16", "-o", "o16.npy")
    report("f16_k_with_kv_bf16_runs", r.returncode == 0 and np.load(os.path.join(TMP, "o16.npy")).dtype == np.float32,
           r.stderr)

    # --kv: k and v stored quantized; out is attention over the stored values
    # (the NumPy reference of the formats, oracle_quant.py) in float64, within
    # the f32 kernels' bound; a row size q4 cannot take, an unknown format
    # and a backward pass are refused.
    from oracle_quant import ref_dequantize, ref_quantize
    kq = rng.standard_normal((2, 40, 64)).astype(np.float32)
    vq = rng.standard_normal((2, 40, 64)).astype(np.float32)
    qq = rng.standard_normal((4, 3, 64)).astype(np.float32)
    pkq, pvq, pqq = save("kq.npy", kq), save("vq.npy", vq), save("qq.npy", qq)
    # q8 and q4 keys are scored by default with q rounded to int8 per block
    # (attn.h, "How attention reads them"; its bound is checked in
    # test_quant_kv): ATTN_QDOT=widen scores them on the widened values, so
    # the f32 bound holds against the stored values.
    for fmt, code in (("q8", 6), ("q4", 7), ("q4_1", 10), ("e4m3", 8), ("e5m2", 9)):
        os.environ["ATTN_QDOT"] = "widen"
        try:
            r = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "-o", "oq.npy")
        finally:
            os.environ.pop("ATTN_QDOT", None)
        ks, vs = (ref_dequantize(ref_quantize(a.reshape(-1, 64), code), code, 64).reshape(2, 40, 64).astype(np.float64)
                  for a in (kq, vq))
        kk, vv = np.repeat(ks, 2, axis=0), np.repeat(vs, 2, axis=0)
        sc = qq.astype(np.float64) @ kk.transpose(0, 2, 1) / 8.0
        w = np.exp(sc - sc.max(-1, keepdims=True))
        ref = (w / w.sum(-1, keepdims=True)) @ vv
        got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
        err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
        report("kv_%s_out_as_numpy_on_stored_values" % fmt, err <= 2e-5, "error %.3g: %s" % (err, r.stderr))
        if fmt in ("q8", "q4"):  # the default integer key scores: near the same result
            r = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "-o", "oq.npy")
            got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
            err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
            report("kv_%s_out_with_int8_query_rounding" % fmt, err <= 5e-2, "error %.3g: %s" % (err, r.stderr))
    expect_error("kv_q4_rows_of_40", ["sdpa", "-q", save("q40.npy", np.zeros((2, 3, 40), np.float32)), "-k",
                                      save("k40.npy", np.zeros((2, 5, 40), np.float32)), "-v", pv32, "--kv", "q4",
                                      "-o", "out.npy"], 1, r"--kv q4: -k .*k40\.npy has rows of 40 values; q4 needs a multiple of 32$")
    expect_error("kv_e4m3_rows_of_no_value", ["sdpa", "-q", save("q0c.npy", np.zeros((1, 3, 0), np.float32)), "-k",
                                              save("k0c.npy", np.zeros((1, 2, 0), np.float32)), "-v",
                                              save("v0c.npy", np.zeros((1, 2, 4), np.float32)), "--kv", "e4m3",
                                              "-o", "out.npy"], 1, r"--kv e4m3: -k .*k0c\.npy has rows of no value; e4m3 needs at least one$")
    expect_error("kv_q8_rows_of_no_value", ["sdpa", "-q", save("q0c.npy", np.zeros((1, 3, 0), np.float32)), "-k",
                                            save("k0c.npy", np.zeros((1, 2, 0), np.float32)), "-v",
                                            save("v0c.npy", np.zeros((1, 2, 4), np.float32)), "--kv", "q8", "-o",
                                            "out.npy"], 1,
                 r"--kv q8: -k .*k0c\.npy has rows of no value; q8 needs a multiple of 32 \(at least one\)$")
    expect_error("kv_unknown_format", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q5", "-o", "out.npy"], 2,
                 r"--kv 'q5' is not q8, q4, q4_1, e4m3, e5m2, bf16, q4c or q2c")
    # --kv q4c / q2c: a cache with keys per channel over groups of 32 positions
    # (the 40 keys: one group, quantized from their float16 values, and 8 in
    # float16) and q4_1 values; out against NumPy's reference of the layouts,
    # in float64, within the f32 bound with the keys widened (ATTN_QDOT=widen),
    # and near it with the default integer scores of the groups (their bound
    # is checked in test_quant_kv); what it does not take is refused.
    from oracle_quant import ref_group, ref_group_dequantize, Q4C, Q2C
    for fmt, code in (("q4c", Q4C), ("q2c", Q2C)):
        for causal in ([], ["--causal=bottom-right"]):
            os.environ["ATTN_QDOT"] = "widen"
            try:
                r = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "-o", "oq.npy", *causal)
            finally:
                os.environ.pop("ATTN_QDOT", None)
            k16 = kq.astype(np.float16).astype(np.float32)
            ks = np.concatenate([ref_group_dequantize(ref_group(k16[:, :32], code), code, 64), k16[:, 32:]], axis=1)
            vs = ref_dequantize(ref_quantize(vq.reshape(-1, 64), 10), 10, 64).reshape(2, 40, 64)
            kk, vv = np.repeat(ks.astype(np.float64), 2, axis=0), np.repeat(vs.astype(np.float64), 2, axis=0)
            sc = qq.astype(np.float64) @ kk.transpose(0, 2, 1) / 8.0
            if causal:
                sc[:, np.arange(3)[:, None] + 37 < np.arange(40)[None, :]] = -np.inf
            w = np.exp(sc - sc.max(-1, keepdims=True))
            ref = (w / w.sum(-1, keepdims=True)) @ vv
            got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
            err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
            report("kv_%s%s_out_as_numpy_on_stored_values" % (fmt, "_causal" if causal else ""), err <= 2e-5,
                   "error %.3g: %s" % (err, r.stderr))
            r = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "-o", "oq.npy", *causal)
            got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
            err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
            report("kv_%s%s_out_with_int8_query_rounding" % (fmt, "_causal" if causal else ""), err <= 5e-2,
                   "error %.3g: %s" % (err, r.stderr))
    # --kv-residual R: the R positions before the group being filled stay in
    # float16 too (KIVI's window). 160 keys with R = 64: positions 0-95 in
    # three quantized groups, 96-159 in float16; R = 128: one group.
    # (Plain normal keys: with heavy-tailed channels the int8 rounding of q
    # times the scales is coarser, within the bound test_quant_kv checks.)
    kw = rng.standard_normal((2, 160, 64)).astype(np.float32)
    vw = rng.standard_normal((2, 160, 64)).astype(np.float32)
    pkw, pvw = save("kw.npy", kw), save("vw.npy", vw)
    for fmt, code, R in (("q4c", Q4C, 64), ("q2c", Q2C, 128)):
        full = 160 // 32 * 32 - R
        k16 = kw.astype(np.float16).astype(np.float32)
        ks = np.concatenate([ref_group_dequantize(ref_group(k16[:, :full], code), code, 64).reshape(2, full, 64),
                             k16[:, full:]], axis=1)
        vs = ref_dequantize(ref_quantize(vw.reshape(-1, 64), 10), 10, 64).reshape(2, 160, 64)
        kk, vv = np.repeat(ks.astype(np.float64), 2, axis=0), np.repeat(vs.astype(np.float64), 2, axis=0)
        sc = qq.astype(np.float64) @ kk.transpose(0, 2, 1) / 8.0
        sc[:, np.arange(3)[:, None] + 157 < np.arange(160)[None, :]] = -np.inf
        w = np.exp(sc - sc.max(-1, keepdims=True))
        ref = (w / w.sum(-1, keepdims=True)) @ vv
        args = ["sdpa", "-q", pqq, "-k", pkw, "-v", pvw, "--kv", fmt, "--kv-residual", str(R), "-o", "oq.npy",
                "--causal=bottom-right"]
        os.environ["ATTN_QDOT"] = "widen"
        try:
            r = attn(*args)
        finally:
            os.environ.pop("ATTN_QDOT", None)
        got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
        err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
        report("kv_%s_residual_%d_out_as_numpy_on_stored_values" % (fmt, R), err <= 2e-5, "error %.3g: %s" %
               (err, r.stderr))
        r = attn(*args)
        got = np.load(os.path.join(TMP, "oq.npy")) if r.returncode == 0 else None
        err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
        report("kv_%s_residual_%d_out_with_int8_query_rounding" % (fmt, R), err <= 5e-2, "error %.3g: %s" %
               (err, r.stderr))
    for case, extra, pattern in (
            ("not_multiple_of_32", ["--kv", "q4c", "--kv-residual", "48"],
             r"--kv-residual '48' is not 0 or a multiple of 32 up to 1024"),
            ("too_large", ["--kv", "q4c", "--kv-residual", "2048"],
             r"--kv-residual '2048' is not 0 or a multiple of 32 up to 1024"),
            ("negative", ["--kv", "q2c", "--kv-residual=-32"], r"--kv-residual '-32' is not 0 or a multiple of 32"),
            ("without_per_channel_keys", ["--kv", "q8", "--kv-residual", "64"],
             r"--kv-residual keeps recent keys of a per-channel cache in float16: give --kv q4c or --kv q2c"),
            ("without_kv", ["--kv-residual", "64"], r"--kv-residual keeps recent keys"),
            ("missing_value", ["--kv", "q4c", "--kv-residual"], r"--kv-residual")):
        expect_error("kv_residual_" + case, ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "-o", "out.npy"] + extra, 2,
                     pattern)
    expect_error("kv_q4c_top_left_refused", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q4c", "--causal",
                                             "-o", "out.npy"], 2, r"--kv q4c: a cache's queries are its last positions")
    expect_error("kv_q4c_weights_refused", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q4c", "-o", "out.npy",
                                            "-w", "w.npy"], 2, r"--kv q4c gives out and --lse only",
                 outputs=("out.npy", "w.npy"))
    expect_error("kv_q2c_odd_channels", ["sdpa", "-q", save("q66.npy", np.zeros((2, 3, 66), np.float32)), "-k",
                                         save("k66.npy", np.zeros((2, 5, 66), np.float32)), "-v", pv32, "--kv", "q2c",
                                         "-o", "out.npy"], 1, r"--kv q2c: desc->key_dim is 66; q2c keys need")
    expect_error("kv_q8_backward_refused", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q8", "-o", "out.npy",
                                            "--grad-out", save("doq.npy", np.ones((4, 3, 64), np.float32)),
                                            "--dq", "dq.npy"], 1, r"backward pass takes float keys",
                 outputs=("out.npy", "dq.npy"))
    # --hadamard: keys stored as the format of H k (H Sylvester's Hadamard
    # matrix / sqrt(E), H k rounded once to float32; with --kv-scale then
    # divided by S in float32) and q turned alike; out against NumPy float64
    # attention of H q over the stored keys, within the f32 bound (ATTN_QDOT
    # =widen, as above), and unlike the run without the rotation.
    hm = np.ones((1, 1))
    while hm.shape[0] < 64:
        hm = np.block([[hm, hm], [hm, -hm]])
    hm /= 8.0
    for fmt, code, scale in (("q8", 6, None), ("q4", 7, None), ("e4m3", 8, None), ("e4m3", 8, (0.5, 2.0))):
        extra = ["--kv-scale", "%g,%g" % scale] if scale else []
        os.environ["ATTN_QDOT"] = "widen"
        try:
            r = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "--hadamard", "-o", "oh.npy", *extra)
            r0 = attn("sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", fmt, "-o", "o0.npy", *extra)
        finally:
            os.environ.pop("ATTN_QDOT", None)
        ks_in = (kq.astype(np.float64) @ hm).astype(np.float32)  # H is symmetric: each row turned
        vs_in = vq
        sk, sv = scale if scale else (1.0, 1.0)
        if scale:
            ks_in, vs_in = ks_in / np.float32(sk), vq / np.float32(sv)
        ks, vs = (ref_dequantize(ref_quantize(a.reshape(-1, 64), code), code, 64).reshape(2, 40, 64).astype(np.float64)
                  for a in (ks_in, vs_in))
        kk, vv = np.repeat(ks * sk, 2, axis=0), np.repeat(vs * sv, 2, axis=0)
        hq = (qq.astype(np.float64) @ hm).astype(np.float32).astype(np.float64)
        sc = hq @ kk.transpose(0, 2, 1) / 8.0
        w = np.exp(sc - sc.max(-1, keepdims=True))
        ref = (w / w.sum(-1, keepdims=True)) @ vv
        got = np.load(os.path.join(TMP, "oh.npy")) if r.returncode == 0 else None
        plain = np.load(os.path.join(TMP, "o0.npy")) if r0.returncode == 0 else None
        err = float(np.abs(got - ref).max() / np.abs(ref).max()) if got is not None else float("inf")
        tag = fmt + ("_kv_scale" if scale else "")
        report("kv_%s_hadamard_out_as_numpy_on_turned_stored_keys" % tag, err <= 2e-5 and plain is not None and
               not np.array_equal(got, plain), "error %.3g: %s" % (err, r.stderr))
    expect_error("hadamard_without_kv", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--hadamard", "-o", "out.npy"], 2,
                 r"--hadamard turns quantized keys: give --kv q8, q4, q4_1, e4m3 or e5m2 too")
    expect_error("hadamard_kv_bf16", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv-bf16", "--hadamard", "-o",
                                      "out.npy"], 2, r"--hadamard turns quantized keys")
    expect_error("hadamard_kv_q4c", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q4c", "--hadamard", "-o",
                                     "out.npy"], 2, r"--hadamard is for keys stored per token; --kv q4c keys")
    expect_error("hadamard_with_rope", ["sdpa", "-q", pqq, "-k", pkq, "-v", pvq, "--kv", "q8", "--hadamard", "--rope",
                                        "halves", "-o", "out.npy"], 2, r"--hadamard takes no --rope")
    expect_error("hadamard_head_dim_96", ["sdpa", "-q", save("q96.npy", np.zeros((2, 3, 96), np.float32)), "-k",
                                          save("k96.npy", np.zeros((2, 5, 96), np.float32)), "-v", pv32, "--kv", "q8",
                                          "--hadamard", "-o", "out.npy"], 1,
                 r"--hadamard needs a last dimension that is a power of two up to 1024, but -k .*k96\.npy has 96")

    # The backward pass: its usage and data errors, with no output file left behind.
    pdo = save("do32.npy", rng.standard_normal((2, 3, 3)).astype(np.float32))
    grads = ["--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"]
    gouts = ("out.npy", "dq.npy", "dk.npy", "dv.npy", "dm.npy")
    expect_error("grad_out_without_gradient", base + ["--grad-out", pdo], 2, r"--grad-out needs a gradient",
                 gouts)
    expect_error("gradient_without_grad_out", base + grads, 2, r"gradients need --grad-out", gouts)
    expect_error("dmask_without_mask", base + ["--grad-out", pdo, "--dmask", "dm.npy"], 2,
                 r"--dmask needs a float mask", gouts)
    expect_error("dmask_with_bool_mask", base + ["--grad-out", pdo, "--dmask", "dm.npy", "-m",
                                                save("mb.npy", np.ones((3, 5), bool))], 1,
                 r"dmask needs a float mask in the options, but the mask is bool", gouts)
    expect_error("grad_out_shape", base + ["--grad-out", save("do_bad.npy", np.zeros((2, 3, 4), np.float32))]
                 + grads, 1, r"dout has shape \(2, 3, 4\) but out has shape \(2, 3, 3\).*--grad-out .*do_bad", gouts)
    expect_error("grad_out_dtype", base + ["--grad-out", save("do64.npy", np.zeros((2, 3, 3)))] + grads, 1,
                 r"mixed dtypes: --grad-out .*do64\.npy is float64", gouts)
    expect_error("grad_same_file", base + ["--grad-out", pdo, "--dq", "dq.npy", "--dk", "dq.npy"], 2,
                 r"--dq and --dk name the same file", gouts)
    r = attn(*(base + ["--grad-out", pdo] + grads))
    shapes = [np.load(os.path.join(TMP, n)).shape for n in ("dq.npy", "dk.npy", "dv.npy")] if r.returncode == 0 else []
    report("backward_writes_gradients_shaped_like_inputs", shapes == [(2, 3, 4), (2, 5, 4), (2, 5, 3)],
           r.stderr or str(shapes))

    # Dropout: its flags' errors, and the mask written out, bool and shaped like the weights.
    expect_error("dropout_above_one", base + ["--dropout", "1.5"], 2, r"--dropout '1\.5' is not a number from 0 to 1")
    # p = 1 is PyTorch's too: every weight dropped, so out, the weights and
    # every gradient are zeros, and the mask all false.
    r = attn(*(base + ["--dropout", "1", "--dropout-mask", "keep.npy", "-w", "w.npy", "--grad-out", pdo] + grads))
    got = [np.load(os.path.join(TMP, n)) for n in ("out.npy", "w.npy", "dq.npy", "dk.npy", "dv.npy")] \
        if r.returncode == 0 else []
    keep = np.load(os.path.join(TMP, "keep.npy")) if r.returncode == 0 else np.ones(1, bool)
    report("dropout_one_gives_zeros", len(got) == 5 and all(a.size and not a.any() for a in got) and not keep.any(),
           r.stderr or str([float(np.abs(a).max()) for a in got]))
    expect_error("dropout_seed_negative", base + ["--dropout", "0.5", "--seed", "-1"], 2, r"--seed '-1'")
    # --seed alone seeded nothing and was ignored: refused, as other options needing another are.
    expect_error("seed_without_dropout", base + ["--seed", "9"], 2,
                 r"^attn: error: --seed seeds the dropout mask: give --dropout P too$")
    # --dropout-mask alone wrote a mask of all true; -w with --compute=bf16 was
    # refused by the library as bad data (exit 1): both are usage errors.
    expect_error("dropout_mask_without_dropout", base + ["--dropout-mask", "keep.npy"], 2,
                 r"^attn: error: --dropout-mask writes which weights the dropout kept: give --dropout P too$",
                 ("out.npy", "keep.npy"))
    expect_error("weights_with_bf16_compute", base + ["--compute=bf16", "-w", "w.npy"], 2,
                 r"^attn: error: --compute=bf16 writes no weights \(-w\)", ("out.npy", "w.npy"))
    r = attn(*(base + ["--dropout", "0.25", "--seed", "9", "--dropout-mask", "keep.npy"]))
    keep = np.load(os.path.join(TMP, "keep.npy")) if r.returncode == 0 else np.zeros(0)
    report("dropout_mask_written", keep.dtype == np.bool_ and keep.shape == (2, 3, 5) and 0 < keep.mean() < 1,
           r.stderr or f"{keep.dtype} {keep.shape}")

    rank_sweeps(rng)

    # A failed run does not touch an existing output either.
    keep = os.path.join(TMP, "keep.npy")
    np.save(keep, np.arange(3.0))
    attn("sdpa", "-q", pq32, "-k", save("k5.npy", np.zeros((2, 5, 5), np.float32)), "-v", pv32, "-o", keep)
    report("failed_run_keeps_old_output", np.array_equal(np.load(keep), np.arange(3.0)), "changed")
    interrupted_runs(rng)
    printed_result_lost(rng)
    return 1 if failed else 0


def repeated_options(rng):
    """Every subcommand refuses an option given twice, and two options that
    set one thing, in one line naming both as written, before it reads or
    writes anything. The same runs without the repeat succeed (sdpa), so the
    repeat is what is refused."""
    q = save("rep_q.npy", rng.standard_normal((2, 3, 32)).astype(np.float32))
    k = save("rep_k.npy", rng.standard_normal((2, 5, 32)).astype(np.float32))
    base = ["sdpa", "-q", q, "-k", k, "-v", k, "-o", "out.npy"]
    r = attn(*base, "--kv", "q8", "--causal=bottom-right")
    report("repeat_control_sdpa_runs", r.returncode == 0 and os.path.exists(os.path.join(TMP, "out.npy")), r.stderr)
    cases = [  # (name, args, the first spelling, the second)
        ("sdpa_kv_bf16_and_kv", base + ["--kv-bf16", "--kv", "q8"], "--kv-bf16", "--kv q8"),
        ("sdpa_kv_twice", base + ["--kv=q8", "--kv", "q4"], "--kv=q8", "--kv q4"),
        ("sdpa_causal_and_bottom_right", base + ["--causal", "--causal=bottom-right"], "--causal",
         "--causal=bottom-right"),
        ("sdpa_flag_twice", base + ["--hadamard", "--kv", "q8", "--hadamard"], "--hadamard", "--hadamard"),
        ("sdpa_short_and_long", base + ["--query", k], f"-q {q}", f"--query {k}"),
        ("sdpa_out_twice", base + ["--out=other.npy"], "-o out.npy", "--out=other.npy"),
        ("sdpa_rope_twice", base + ["--rope", "halves", "--rope=interleaved"], "--rope halves", "--rope=interleaved"),
        ("mha_heads_twice", ["mha", "-x", q, "--weights", "w.safetensors", "--heads", "1", "--heads=2", "-o",
                             "out.npy"], "--heads 1", "--heads=2"),
        ("mha_causal_modes", ["mha", "-x", q, "--weights", "w.safetensors", "--heads", "1", "--causal=top-left",
                              "--causal=bottom-right", "-o", "out.npy"], "--causal=top-left", "--causal=bottom-right"),
        ("explain_json_twice", ["explain", "--json", "the", "cat", "--json"], "--json", "--json"),
        ("explain_mode_twice", ["explain", "--mode", "dot", "--mode=qkv"], "--mode dot", "--mode=qkv"),
        ("scaling_dims_twice", ["scaling", "--no-train", "--dims", "4", "--dims", "8", "--svg", "out.svg"],
         "--dims 4", "--dims 8"),
        ("scaling_flag_twice", ["scaling", "--no-train", "--variance", "--no-train", "--svg", "out.svg"],
         "--no-train", "--no-train"),
        ("train_seed_twice", ["train", "--seed=1", "--seed", "2", "--svg", "out.svg"], "--seed=1", "--seed 2"),
        ("train_flag_twice", ["train", "--no-scale", "--no-scale"], "--no-scale", "--no-scale"),
    ]
    for name, args, first, second in cases:
        expect_error("repeat_" + name, args, 2, re.escape(first) + " and " + re.escape(second),
                     outputs=("out.npy", "other.npy", "out.svg"))


def interrupted_runs(rng):
    """Ctrl-C or a SIGTERM while the backward pass runs, after -o's
    temporary was written: the command dies of the signal, as before, and
    leaves no .out.npy.tmp.<six random characters> behind (it left one as large as the output)."""
    d = os.path.join(TMP, "interrupted")
    os.makedirs(d, exist_ok=True)
    for name in ("q", "g"):
        np.save(os.path.join(d, name + ".npy"), rng.standard_normal((8, 2048, 64)).astype(np.float32))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        for f in os.listdir(d):
            if f not in ("q.npy", "g.npy"):
                os.remove(os.path.join(d, f))
        p = subprocess.Popen([ATTN, "sdpa", "-q", "q.npy", "-k", "q.npy", "-v", "q.npy", "--grad-out", "g.npy",
                              "-o", "out.npy", "--dq", "dq.npy", "--threads", "1"], cwd=d,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))  # not ignored, as in a background job
        deadline, seen = time.monotonic() + 60, False
        while not seen and p.poll() is None and time.monotonic() < deadline:
            seen = any(f.startswith(".out.npy.tmp.") for f in os.listdir(d))
            time.sleep(0.01)
        if not seen or p.poll() is not None:
            p.kill(), p.wait()
            print(f"skip interrupted_{sig.name}_leaves_no_temporary: the run ended before its temporary was seen",
                  flush=True)
            continue
        p.send_signal(sig)
        rc = p.wait()
        left = sorted(set(os.listdir(d)) - {"q.npy", "g.npy"})
        report(f"interrupted_{sig.name}_leaves_no_temporary", rc == -sig and not left, f"exit {rc}, left {left}")


def printed_result_lost(rng):
    """A run with no -o (its result printed) and -w or --lse to a file, its
    stdout a full disk or a pipe whose reader is gone: the result was
    printed after the files were renamed into place, so that a run that
    failed (exit 1, "cannot write to standard output"; or killed by
    SIGPIPE) left them written. Now nothing is left, not even a temporary.
    A dense run and a ragged batch (--cu-seqlens-q/-k)."""
    q, k = save("lost_q.npy", rng.standard_normal((8, 2, 4))), save("lost_k.npy", rng.standard_normal((9, 1, 4)))
    cu = ["--cu-seqlens-q", save("lost_cq.npy", np.array([0, 3, 8])), "--cu-seqlens-k",
          save("lost_ck.npy", np.array([0, 5, 9]))]
    runs = (("dense", ["sdpa", "-q", q, "-k", q, "-v", q, "-w", "w.npy", "--lse", "lse.npy"]),
            ("ragged", ["sdpa", "-q", q, "-k", k, "-v", k, "--lse", "lse.npy"] + cu))
    d = os.path.join(TMP, "lost")
    os.makedirs(d, exist_ok=True)
    for kind, args in runs:
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        with open("/dev/full", "w") as full:
            r = subprocess.run([ATTN, *args], stdout=full, stderr=subprocess.PIPE, text=True, cwd=d)
        problems = error_problems(subprocess.CompletedProcess(r.args, r.returncode, "", r.stderr), 1,
                                  r"^attn: error: cannot write to standard output: No space left on device$")
        left = sorted(os.listdir(d))
        report(f"printed_{kind}_result_on_full_disk_leaves_no_file", not problems and not left,
               "; ".join(problems + [f"left {left}"] * bool(left)))
        rc = status_on_closed_pipe([ATTN, *args], d)  # the reader gone before the run starts
        left = sorted(os.listdir(d))
        report(f"printed_{kind}_result_on_closed_pipe_leaves_no_file", rc == -signal.SIGPIPE and not left,
               f"exit {rc}, left {left}")


def rank_sweep(command, inputs, args_for, accepted, names, outputs, rng):
    """Each of `inputs` (flag -> a valid array) at ranks 0 to 6 in turn, the
    others valid: args_for(paths) is the command line. Ranks in accepted[flag]
    succeed; the others are one clean error naming the input (names[flag])."""
    for flag, good in inputs.items():
        problems = []
        for rank in RANKS:
            paths = {}
            for other, a in inputs.items():
                if other == flag:
                    a = rng.standard_normal(at_rank(a.shape, rank)).astype(a.dtype)
                    if flag == "--alibi-slopes":
                        a = np.abs(a)
                paths[other] = save(f"sweep{other}_r{rank}.npy" if other == flag else f"sweep{other}.npy", a)
            problems += [f"rank {rank}: {p}" for p in rank_case_problems(
                attn, TMP, args_for(flag, paths), rank in accepted[flag], names[flag], outputs(flag))]
        report(f"ranks_0_to_6_{command}_{flag.lstrip('-')}", not problems, "; ".join(problems))


def rank_sweeps(rng):
    """Every tensor argument of every command at every rank from 0 to 6: the
    ones it takes run, the rest are refused in one line before anything reads
    a dimension that is not there."""
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    sdpa = {"-q": f32(2, 3, 4), "-k": f32(2, 5, 4), "-v": f32(2, 5, 3), "-m": f32(3, 5), "--grad-out": f32(2, 3, 3),
            "--alibi-slopes": np.abs(f32(2)), "--sinks": f32(2)}
    optional = ("--grad-out", "--alibi-slopes", "--sinks")  # given only when they are the one tried

    def sdpa_args(flag, paths):
        args = ["sdpa", "-o", "out.npy"] + (["--dq", "dq.npy"] if flag == "--grad-out" else [])
        return args + [x for f, p in paths.items() if f not in optional or f == flag for x in (f, p)]
    # q, k and v take ranks 2 to 5, but rank 2 here drops the heads that the
    # others have; a mask broadcasts from any rank up to the output's.
    rank_sweep("sdpa", sdpa, sdpa_args,
               {"-q": {3, 4, 5}, "-k": {3, 4, 5}, "-v": {3, 4, 5}, "-m": {0, 1, 2, 3}, "--grad-out": {3},
                "--alibi-slopes": {1}, "--sinks": {1}},
               {"-q": r"\bq\b", "-k": r"\bk\b", "-v": r"\bv\b", "-m": r"\bmask\b|-m ", "--grad-out": r"dout|--grad-out",
                "--alibi-slopes": r"alibi", "--sinks": r"sinks"},
               lambda flag: ("out.npy", "dq.npy") if flag == "--grad-out" else ("out.npy",), rng)
    explain = {"--embeddings": f32(3, 4), "--wq": f32(4, 2), "--wk": f32(4, 2), "--wv": f32(4, 3)}
    rank_sweep("explain", explain, lambda flag, paths: ["explain"] + [x for fp in paths.items() for x in fp],
               {f: {2} for f in explain}, {f: f for f in explain}, lambda flag: (), rng)


if __name__ == "__main__":
    sys.exit(main())
