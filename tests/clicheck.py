"""clicheck.py -- what every bad-input test of the attn command checks."""
import os
import re
import subprocess


def error_problems(result, code, pattern):
    """The problems with a run that should have failed with exit `code` and one
    'attn: error:' line matching `pattern`, printing nothing on stdout."""
    lines = result.stderr.splitlines()
    problems = []
    if result.returncode != code:
        problems.append(f"exit {result.returncode}, wanted {code}")
    if len(lines) != 1 or not lines[0].startswith("attn: error: "):
        problems.append(f"stderr is not one 'attn: error:' line: {result.stderr!r}")
    elif not re.search(pattern, lines[0]):
        problems.append(f"message {lines[0]!r} does not match {pattern!r}")
    if result.stdout:
        problems.append(f"stdout not empty: {result.stdout[:80]!r}")
    if any(m in result.stderr for m in SANITIZER_MARKS):
        problems.append(f"a sanitizer report: {result.stderr.strip()[:300]!r}")
    return problems


def run_expecting_error(run, tmp, args, code, pattern, outputs=()):
    """Run the command with `args` (run(*args) returns a CompletedProcess) in
    the directory tmp, after removing `outputs` there; return the problems:
    those of error_problems, plus any output or new file left in tmp."""
    for o in outputs:
        if os.path.exists(os.path.join(tmp, o)):
            os.remove(os.path.join(tmp, o))
    before = set(os.listdir(tmp))
    problems = error_problems(run(*args), code, pattern)
    new = set(os.listdir(tmp)) - before
    if new:
        problems.append(f"files left behind: {sorted(new)}")
    return problems


def status_on_closed_pipe(command, cwd):
    """Run `command` (a list) in cwd with its standard output a pipe whose
    reader has gone before the run starts; return its exit status (-SIGPIPE
    when the signal killed it)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(command, stdout=write_end, stderr=subprocess.DEVNULL, cwd=cwd).returncode
    finally:
        os.close(write_end)


# A sanitizer's report (ASan, UBSan, LSan) in what a run printed.
SANITIZER_MARKS = ("Sanitizer", "runtime error:")

# The ranks every tensor argument is tried at: 0 and 1 below any attention
# input, 5 the most a tensor has, 6 past what a .npy file may hold here.
RANKS = range(7)


def at_rank(shape, rank):
    """`shape` at another rank: its last `rank` dimensions, or 1s before it,
    so that a valid shape stays valid wherever broadcasting allows."""
    shape = tuple(shape)
    return shape[len(shape) - rank:] if rank <= len(shape) else (1,) * (rank - len(shape)) + shape


def rank_case_problems(run, tmp, args, accepted, pattern, outputs=()):
    """One run of a rank sweep, an input replaced by one of another rank. At a
    rank the argument takes, the run succeeds and writes every output (prints,
    when it has none); at any other it fails as bad input does (exit 1, one
    'attn: error:' line matching `pattern`, nothing on stdout, no output or
    temporary file). A sanitizer's report is a problem either way."""
    if not accepted:
        return run_expecting_error(run, tmp, args, 1, pattern, outputs)
    for o in outputs:
        if os.path.exists(os.path.join(tmp, o)):
            os.remove(os.path.join(tmp, o))
    result = run(*args)
    problems = []
    if result.returncode != 0:
        problems.append(f"exit {result.returncode}: {result.stderr.strip()[:300]!r}")
    missing = [o for o in outputs if not os.path.exists(os.path.join(tmp, o))]
    if missing:
        problems.append(f"outputs not written: {missing}")
    if not outputs and not result.stdout:
        problems.append("printed nothing")
    if any(m in result.stderr for m in SANITIZER_MARKS):
        problems.append(f"a sanitizer report: {result.stderr.strip()[:300]!r}")
    return problems
