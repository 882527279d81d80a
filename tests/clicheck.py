"""clicheck.py -- what every bad-input test of the attn command checks."""
import os
import re


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
