#!/usr/bin/python3
"""test_docs.py -- what the README and docs/ tell users to run, run as written.

Every command of README.md's ```sh blocks (`make test` aside: it is the whole
suite this test is part of), its Python block and the package's own example
(python/attn/__init__.py), and every `$ ` transcript of docs/explainer.md,
whose printed output must be the command's output, line for line.

And what the docs claim beyond their transcripts: README.md's C example,
built with gcc and clang at -Wall -Wextra -Werror, prints attention as NumPy
computes it; every option the README and docs/ give a command is one its
--help lists; every build/ path they name is one make builds; and no doc
speaks of the tracker ("issue 30", "the issue's targets").

Usage: test_docs.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why".
"""
import glob
import itertools
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from scratch import scratch_dir

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TMP = scratch_dir("attn_docs_")
failed = 0


def report(name, ok, why=""):
    global failed
    print(f"ok {name}" if ok else f"FAIL {name}: {why}", flush=True)
    failed += not ok


def blocks(path, lang):
    """The ```lang blocks of a Markdown file, as (first line number, text)."""
    out, cur, fence, start = [], [], None, 0
    for i, line in enumerate(open(os.path.join(ROOT, path), encoding="utf-8"), 1):
        if fence is None and line.startswith("```"):
            fence, cur, start = line[3:].strip(), [], i + 1
        elif fence is not None and line.startswith("```"):
            if fence == lang:
                out.append((start, "".join(cur)))
            fence = None
        elif fence is not None:
            cur.append(line)
    return out


def env():
    """The documented commands see the build as build/ and attn on PATH."""
    e = dict(os.environ)
    for k in ("NO_COLOR", "COLUMNS", "ATTN_ISA", "ATTN_NUM_THREADS", "ATTN_VERBOSE"):
        e.pop(k, None)
    # Debian's python3 (NumPy, PyTorch), as on the machine the README describes
    e["PATH"] = os.pathsep.join([BUILD, "/usr/bin", e["PATH"]])
    e["HOME"] = TMP
    e["ATTN_LIBRARY"] = os.path.join(BUILD, "libattn.so")
    e["PYTHONPATH"] = os.path.join(ROOT, "python")
    e["MPLBACKEND"] = "Agg"
    return e


def shell(cmd, cwd=TMP, timeout=600):
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, cwd=cwd, env=env(), timeout=timeout)


def commands(text):
    """A shell block's commands: continued lines joined, a comment-only line
    (the README's second line of a comment) dropped."""
    cmds, cur = [], ""
    for line in text.splitlines():
        if not line.strip() or (line.lstrip().startswith("#") and not cur):
            continue
        cur += line + "\n"
        if not line.endswith("\\") and cur.count('"') % 2 == 0:
            cmds.append(cur)
            cur = ""
    return cmds


if not os.path.exists(os.path.join(TMP, "build")):
    os.symlink(BUILD, os.path.join(TMP, "build"))
# a copy of python/: pip writes its egg-info beside setup.py
shutil.copytree(os.path.join(ROOT, "python"), os.path.join(TMP, "python"),
                ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))

# attn.h's and attn_teach.h's "added in" notes: a program that tests
# ATTN_VERSION_NUMBER before calling a function must find it in that
# version's header. The functions 0.3.0's headers declared (0.2.0's among
# them), frozen here as tests/abi/0.2/ freezes 0.2.0's headers:
API_0_3 = set("""
attn_alibi_slopes attn_bf16_to_f32 attn_context_init attn_dtype_name attn_dtype_size attn_error_set
attn_f16_to_f32 attn_f32_to_bf16 attn_f32_to_f16 attn_format_shape attn_get_num_threads
attn_get_tuning attn_isa attn_kv_cache_append attn_kv_cache_attend attn_kv_cache_bytes
attn_kv_cache_desc_init attn_kv_cache_init attn_kv_cache_length attn_kv_cache_truncate
attn_kv_cache_view attn_mha attn_mha_backward attn_mha_cached attn_mha_options_init
attn_mha_params_init attn_npy_format_header attn_npy_free attn_npy_header attn_npy_parse
attn_npy_read attn_npy_write attn_rope attn_rope_backward attn_rope_options_init attn_scores
attn_sdpa attn_sdpa_backward attn_sdpa_backward_workspace_size attn_sdpa_dropout_mask
attn_sdpa_merge attn_sdpa_options_init attn_sdpa_reference attn_sdpa_shapes attn_sdpa_sinks_backward
attn_sdpa_workspace_size attn_set_num_threads attn_set_verbose attn_shutdown
attn_sinusoidal_positions attn_strerror attn_tensor_convert attn_tensor_init attn_tensor_numel
attn_version attn_versioned_init attn_versioned_read attn_additive_scores attn_explain_free
attn_explain_json attn_explain_run attn_scaling_json attn_scaling_measure attn_softmax_rows
attn_toy_embed attn_toy_explain_json attn_toy_explain_options_init attn_toy_feature attn_toy_suggest
attn_toy_tokenize attn_toy_value_feature attn_toy_vocab_size attn_toy_weights attn_toy_word
attn_toy_word_id attn_train_head attn_train_options_init""".split())
version = re.search(r'#define ATTN_VERSION_STRING "(.*)"', open(os.path.join(ROOT, "include", "attn.h")).read())[1]
for header in ("attn.h", "attn_teach.h"):
    lines = open(os.path.join(ROOT, "include", header), encoding="utf-8").read().split("\n")
    wrong = []
    for i, line in enumerate(lines):
        m = re.search(r"\b(attn_\w+)\(", line)
        if not m or not (line.startswith("ATTN_API") or lines[i - 1].startswith("ATTN_API")):
            continue
        name = m[1]
        # the note that governs it: the nearest "added in" above it, in its section
        note = None
        for j in range(i - 1, -1, -1):
            if lines[j].startswith("/* ----"):
                break
            n = re.findall(r"([Aa])dded in (0\.\d+\.\d+)", lines[j])
            if n:
                note = (n[-1][1], j, n[-1][0] == "A")
                break
        # "Added in X." in its own comment dates the function; "(added in X)" a feature of it
        own = note is not None and note[2] and all(lines[k].strip() for k in range(note[1], i))
        if name in API_0_3 and own and note[0] not in ("0.2.0", "0.3.0"):
            wrong.append(f"{name} (in 0.3.0) says added in {note[0]}")
        if name not in API_0_3 and (note is None or note[0] != version):
            wrong.append(f"{name} (new in {version}) says {'added in ' + note[0] if note else 'nothing'}")
    report(f"{header.replace('.', '_')}_added_in_notes_true", not wrong, "; ".join(wrong))

# README.md's synopses of attn sdpa, attn mha and attn-mpi sdpa: the same
# options as the command's --help, none missing and none made up.
synopses = [t for _, t in blocks("README.md", "")]
for cmd, prog in (("sdpa", "attn"), ("mha", "attn"), ("sdpa", "attn-mpi")):
    binary = os.path.join(BUILD, prog)
    if not os.path.exists(binary):
        print(f"skip readme_synopsis_{prog}_{cmd}: {binary} is not built")
        continue
    text = next((t for t in synopses if re.search(rf"(^|/){prog} {cmd} ", t, flags=re.M)), "")
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if re.search(rf"(^|/){prog} {cmd} ", line)), 0)
    # the command's lines: its first and those indented under it
    text = "\n".join([lines[first]] + list(itertools.takewhile(lambda x: x.startswith(" "), lines[first + 1:])))
    r = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True, env=env())
    pairs = re.findall(r"^\s+(?:(-\w), )?(--[\w-]+)", r.stdout, flags=re.M)
    helped = {long for _, long in pairs} - {"--help"}
    written = set(re.findall(r"(--[\w-]+)", text))
    written |= {long for short, long in pairs if short and re.search(rf"(^|\s|\[){short} ", text)}
    report(f"readme_synopsis_{prog}_{cmd}_as_its_help", text and helped == written,
           f"not in the README: {sorted(helped - written)}; not in --help: {sorted(written - helped)}")

# README.md's list of what `make test` installs: every package
# tests/install-deps.sh can install.
deps = set(re.findall(r"add ([\w.-]+)", open(os.path.join(ROOT, "tests", "install-deps.sh")).read()))
readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
quick = readme[readme.index("## Quick start"):readme.index("## `attn sdpa`")]
listed = set(re.findall(r"`([\w.-]+)`", quick))
missing = sorted(deps - listed - {"python3"})
report("readme_lists_what_make_test_installs", not missing, f"not in the README: {missing}")

# "The C API in N lines": N is the line count of the C block under it (it
# said 15 over 19 lines).
said = re.search(r"^## The C API in (\d+) lines$", readme, re.M)
c_lines = [t.count("\n") for _, t in blocks("README.md", "c")]
report("readme_c_api_heading_counts_its_lines", said and c_lines and int(said.group(1)) == c_lines[0],
       f"heading {said and said.group(0)!r}, C blocks of {c_lines} lines")

# README.md's shell blocks, each command as written, from a directory where
# build/ is the build. make runs in the repository.
for line, text in blocks("README.md", "sh"):
    for cmd in commands(text):
        name = re.sub(r"\W+", "_", cmd.split("#")[0].strip())[:60].strip("_")
        if cmd.startswith("make test"):
            print(f"skip readme_{name}: the whole suite, which runs this test")
            continue
        if cmd.startswith("make"):
            words = cmd.split("#")[0].split()
            r = subprocess.run(words + ["BUILD=" + BUILD], capture_output=True, text=True, cwd=ROOT, env=env(),
                               timeout=1200)
        else:
            r = shell(cmd)
        report(f"readme_line{line}_{name}", r.returncode == 0,
               f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")

# README.md's Python block, on inputs of the shapes it needs.
PRELUDE = """
import numpy as np, torch
r = np.random.default_rng(0)
q, k, v = (r.standard_normal((2, 4, 6, 8)) for _ in range(3))
dout = r.standard_normal((2, 4, 6, 8))
torch_mha = torch.nn.MultiheadAttention(512, 8)
"""
for line, text in blocks("README.md", "python"):
    # the torch lines take tensors: the block's own names, rebound before them
    code = text.replace("import attn.torch", "import attn.torch\nq, k, v = (torch.from_numpy(a) for a in (q, k, v))")
    r = subprocess.run(["/usr/bin/python3", "-c", PRELUDE + code], capture_output=True, text=True, cwd=TMP, env=env(),
                       timeout=600)
    report(f"readme_line{line}_python", r.returncode == 0, f"exit {r.returncode}: {r.stderr.strip()[-400:]}")

# python/attn/__init__.py's example, on inputs of the shapes it needs.
doc = open(os.path.join(ROOT, "python", "attn", "__init__.py"), encoding="utf-8").read()
example = doc.split('"""')[1].split("\n\n")[1]
example = "\n".join(line[4:] for line in example.splitlines())
PRELUDE_PKG = PRELUDE + """
cu_seqlens_q, cu_seqlens_k = [0, 2, 6], [0, 3, 6]
qp, kp, vp = (r.standard_normal((6, 4, 8)) for _ in range(3))
q2, k2, v2 = (r.standard_normal((2, 4, 6, 8)) for _ in range(3))
qa, qb = (r.standard_normal((1, 2, 64)).astype(np.float32) for _ in range(2))
"""
example = example.replace("attn.sdpa_varlen(q, k, v,", "attn.sdpa_varlen(qp, kp, vp,")
example = example.replace("import attn.torch", "import attn.torch\nq, k, v = (torch.from_numpy(a) for a in (q, k, v))")
example = example.replace("pool = attn.KVPages", "k, v = (r.standard_normal((5, 2, 64)).astype(np.float32) for _ in range(2))\n"
                          "pool = attn.KVPages")
r = subprocess.run(["/usr/bin/python3", "-c", PRELUDE_PKG + example], capture_output=True, text=True, cwd=TMP, env=env(),
                   timeout=600)
report("package_docstring_example", r.returncode == 0, f"exit {r.returncode}: {r.stderr.strip()[-400:]}")

# docs/explainer.md's prose on `attn scaling`'s gradient column: the medians
# it names are the transcript's d = 1024 row, to the digits given ("less
# than 3e-4" was said of a median of 3.11e-04).
explainer_text = open(os.path.join(ROOT, "docs", "explainer.md"), encoding="utf-8").read()
said = re.search(r"at d = 1024 the median raw query passes back (\S+), against (\S+) after scaling", explainer_text)
row = re.search(r"^\s*1024 \|\s+\S+\s+\S+ \|\s+(\S+)\s+(\S+)$", explainer_text[explainer_text.index("$ attn scaling\n"):], re.M)
report("explainer_md_scaling_median_gradient_as_printed", said is not None and row is not None and
       float("%.1e" % float(row[1])) == float(said[1]) and "%.2f" % float(row[2]) == said[2],
       f"prose {said and said.groups()}, transcript {row and row.groups()}")

# docs/explainer.md's transcripts: `$ command` and what it prints.
for line, text in blocks("docs/explainer.md", ""):
    if not text.startswith("$ "):
        continue
    steps = re.split(r"^\$ ", text, flags=re.M)[1:]
    for step in steps:
        cmd, want = [], []
        lines = step.split("\n")
        cmd.append(lines.pop(0))
        while lines and "".join(cmd).count('"') % 2 == 1:  # a python3 -c "..." of several lines
            cmd.append(lines.pop(0))
        want = "\n".join(lines).strip("\n")
        command = "\n".join(cmd)
        r = shell(command)
        got = (r.stdout + r.stderr).strip("\n")  # explain's steps open with a blank line
        name = re.sub(r"\W+", "_", command)[:50].strip("_")
        if not want:
            report(f"explainer_md_line{line}_{name}", r.returncode == 0, f"exit {r.returncode}: {r.stderr[-300:]}")
            continue
        diff = [f"line {i + 1}: doc {a!r} run {b!r}" for i, (a, b) in
                enumerate(zip(want.split("\n"), got.split("\n"))) if a.rstrip() != b.rstrip()]
        if len(want.split("\n")) > len(got.split("\n")):  # a transcript may stop early (attn scaling's)
            diff.append(f"{len(want.split(chr(10)))} lines in the doc, {len(got.split(chr(10)))} printed")
        report(f"explainer_md_line{line}_{name}", not diff, "; ".join(diff[:3]))

# docs/explainer.md's table "Every worked example, reproduced": each row that
# names one `attn ...` command quotes what it prints, and the quotes must be
# in its output. A later `attn ...` quote in the cell names another command
# for the quotes after it, a `--step NAME` quote the same command at that
# step; bars are left out of quoted lines, and a quote of numbers alone may
# be a column (the numbers in order down the output). Names quoted from the
# output (`top /d`) are labels, not checked.
BARS = re.compile(r"[\u2580-\u259f]+")


def squeeze(text):
    return re.sub(r"[ \t]+", " ", BARS.sub("", text))


def quoted_in(value, out):
    if squeeze(value).strip() in squeeze(out):
        return True
    numbers = re.findall(r"-?\d+\.\d+(?:e-?\d+)?", value)
    if len(numbers) < 2 or re.sub(r"[-\d.e\s]", "", value):
        return False
    tokens, at = squeeze(out).split(), 0
    for n in numbers:  # a column: each number after the one before it
        at = next((i + 1 for i in range(at, len(tokens)) if tokens[i] == n), None)
        if at is None:
            return False
    return True


explainer = open(os.path.join(ROOT, "docs", "explainer.md"), encoding="utf-8").read()
start = explainer.index("## Every worked example, reproduced")
table = explainer[start:]
table = table[:table.index("\n## ", 5)]
first_line = explainer[:start].count("\n") + 1
outputs = {}
for line, row in enumerate(table.split("\n"), first_line):
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
    commands = re.findall(r"`(attn [^`]*)`", cells[2]) if len(cells) == 4 else []
    if len(commands) != 1:
        continue
    command, missing = commands[0], []
    for value in re.findall(r"`([^`]+)`", cells[3]):
        if value.startswith("attn "):
            command = value
            continue
        if value.startswith("--step "):
            command = re.sub(r"--step \w+", value, command)
            continue
        if value.startswith(("--", "[")) or re.fullmatch(r"[A-Za-z /_()]+", value):
            continue
        if command not in outputs:
            outputs[command] = shell(command)
        r = outputs[command]
        if r.returncode or not quoted_in(value, r.stdout):
            missing.append(f"{value!r} not in `{command}`" + (f" (exit {r.returncode})" if r.returncode else ""))
    name = re.sub(r"\W+", "_", commands[0])[:50].strip("_")
    report(f"explainer_md_line{line}_table_{name}", not missing, "; ".join(missing[:3]))

# The user-facing text never points at the project's tracker: "issue 30",
# "the targets", "per the issue" mean nothing to a reader (the CPU's
# "issue 2 a cycle" and "issue-bound" are another word).
DOCS = ["README.md", "CHANGELOG.md"] + sorted(os.path.relpath(p, ROOT) for p in
                                              glob.glob(os.path.join(ROOT, "docs", "*.md"))) + \
       [os.path.join("include", h) for h in ("attn.h", "attn_teach.h", "attn_mpi.h")]
TRACKER = re.compile(r"\bissue(?:'s\b| #?\d+(?='s|[).,:;]|$))|\b(?:the|per|this|an|that) issue\b", re.I)
hits = []
for path in DOCS:
    for i, line in enumerate(open(os.path.join(ROOT, path), encoding="utf-8"), 1):
        hits += [f"{path}:{i}: {m.group(0)!r}" for m in TRACKER.finditer(line)]
report("docs_never_name_the_tracker", not hits, "; ".join(hits[:5]))

# README.md's C example, as a reader builds it (gcc and clang, warnings as
# errors), run; it prints the 2x2 output, which NumPy computes from the same
# inputs with the same causal mask.
c_blocks = blocks("README.md", "c")
want = None
if c_blocks:
    q = [i / 8 for i in range(8)]
    k = [(i % 5) / 5 for i in range(12)]
    v = [float(i) for i in range(6)]
    Q, K, V = np.array(q).reshape(2, 4), np.array(k).reshape(3, 4), np.array(v).reshape(3, 2)
    scores = Q @ K.T / np.sqrt(4)
    scores[np.triu(np.ones((2, 3), bool), 1)] = -np.inf  # top-left causal: query i sees keys j <= i
    w = np.exp(scores - scores.max(1, keepdims=True))
    want = (w / w.sum(1, keepdims=True)) @ V
for cc in ("gcc", "clang"):
    if not c_blocks:
        report(f"readme_c_example_{cc}", False, "README.md has no C block")
        continue
    if not shutil.which(cc):
        print(f"skip readme_c_example_{cc}: {cc} is not installed")
        continue
    src, exe = os.path.join(TMP, "readme_example.c"), os.path.join(TMP, f"readme_example_{cc}")
    open(src, "w").write(c_blocks[0][1])
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "include"), src,
                        "-o", exe, "-L", BUILD, "-lattn"], capture_output=True, text=True)
    if r.returncode:
        report(f"readme_c_example_{cc}", False, f"does not build: {r.stderr.strip()[-300:]}")
        continue
    # the loader looks for the soname, libattn.so.0, which an install links to the library
    lib = os.path.join(TMP, "lib")
    os.makedirs(lib, exist_ok=True)
    if not os.path.lexists(os.path.join(lib, "libattn.so.0")):
        os.symlink(os.path.join(BUILD, "libattn.so"), os.path.join(lib, "libattn.so.0"))
    r = subprocess.run([exe], capture_output=True, text=True, env=dict(env(), LD_LIBRARY_PATH=lib))
    try:
        got = np.array([[float(x) for x in line.split()] for line in r.stdout.strip().split("\n")])
        ok = r.returncode == 0 and got.shape == (2, 2) and np.allclose(got, want, atol=2e-6)
    except ValueError:
        ok, got = False, r.stdout
    report(f"readme_c_example_{cc}", ok, f"exit {r.returncode}, printed {r.stdout!r} {r.stderr[-200:]!r}, NumPy {want.tolist()}")

# attn.h's example of the verbose line names the words a real line has, in
# its order (it had lost dropout= to lse=, added since): the README's C
# example's shapes through `attn sdpa`, with the example's causal mode.
header = open(os.path.join(ROOT, "include", "attn.h"), encoding="utf-8").read()
example = re.search(r"\* to stderr, e\.g\.\n((?: \*   .*\n)+)", header)
said = re.findall(r"(\w+)=", " ".join(line[5:] for line in example.group(1).splitlines())) if example else []
for n, a in (("q", (2, 8, 128, 64)), ("k", (2, 2, 256, 64)), ("v", (2, 2, 256, 64))):
    np.save(os.path.join(TMP, f"verbose_{n}.npy"), np.ones(a, np.float32))
r = subprocess.run([os.path.join(BUILD, "attn"), "sdpa", "-q", "verbose_q.npy", "-k", "verbose_k.npy", "-v",
                    "verbose_v.npy", "--causal=bottom-right", "-o", "verbose_out.npy"], capture_output=True, text=True,
                   cwd=TMP, env=dict(env(), ATTN_VERBOSE="1"))
ran = re.findall(r"(\w+)=", r.stderr)
report("attn_h_verbose_example_as_printed", r.returncode == 0 and said and said == ran,
       f"attn.h's example: {said}; printed: {ran} (exit {r.returncode})")

# Every option README.md and docs/ give a command (in a code span or a code
# block line naming it) is one the command's --help lists: a renamed or
# dropped option leaves no stale spelling behind.
def help_options(prog, sub, cache={}):
    if (prog, sub) not in cache:
        binary = os.path.join(BUILD, "attn-bench" if (prog, sub) == ("attn", "bench") else prog)
        r = subprocess.run([os.path.join(BUILD, prog), sub, "--help"], capture_output=True, text=True, env=env()) \
            if os.path.exists(binary) else None
        cache[(prog, sub)] = set(re.findall(r"(--[\w-]+)", r.stdout)) if r and r.returncode == 0 else None
    return cache[(prog, sub)]


stale, unchecked = [], set()
for path in ["README.md"] + [p for p in DOCS if p.startswith("docs")]:
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    spans = re.findall(r"`([^`\n]+)`", text) + [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
                                                 for line in block.split("\n")]
    for span in spans:
        m = re.search(r"(?:^|[\s/])(attn|attn-mpi) (sdpa|mha|explain|scaling|train|bench)\b(.*)", span)
        if not m:
            continue
        known = help_options(m[1], m[2])
        if known is None:
            unchecked.add(f"{m[1]} {m[2]}")
            continue
        said = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m[3].split(" #")[0]))
        known = known | {"--help"}
        if (m[1], m[2]) == ("attn", "bench") and "--mpi" in said:  # passed on to attn-mpi bench
            known |= help_options("attn-mpi", "bench") or set()
        stale += [f"{path}: {m[1]} {m[2]} {o}" for o in sorted(said - known)]
report("docs_options_are_the_commands", not stale, "; ".join(stale[:6]))
for cmd in sorted(unchecked):
    print(f"skip docs_options_of_{cmd.replace(' ', '_').replace('-', '_')}: not built")

# Every build/ path the README and docs/ name is one make knows how to build.
paths = set()
for path in ["README.md"] + [p for p in DOCS if p.startswith("docs")]:
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    # a path written with a trailing slash is a folder (build/fuzz/), not a target
    paths |= {p for p in re.findall(r"\bbuild/[\w./-]*\w/?", text) if not p.endswith("/")}
unknown = [p for p in sorted(paths) if subprocess.run(["make", "-n", "--no-print-directory", p], cwd=ROOT,
                                                      capture_output=True, text=True).returncode != 0]
report("docs_build_paths_are_make_targets", not unknown, f"no rule for {unknown}")

# The explainer page's tiles step says how large this library's blocks are:
# the forward's query rows as attn_get_tuning reports them, and its key block
# on the caches the library assumes when CPUID describes none (a 1 MiB L2),
# which is what a machine that reports "generic" runs; the Zen 3 figure is
# the one attn.h's tuning comment gives.
import ctypes


class Tuning(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("core", ctypes.c_char_p), ("isa", ctypes.c_char_p),
                ("blocks_for", ctypes.c_char_p)] + [(f, ctypes.c_int) for f in (
        "block_rows", "block_keys", "backward_block_rows", "backward_block_keys", "decode_chunk",
        "gemm_rows", "gemm_depth", "gemm_cols")]


lib = ctypes.CDLL(os.path.join(BUILD, "libattn.so"))
tuning = Tuning(struct_size=ctypes.sizeof(Tuning))
page = " ".join(open(os.path.join(ROOT, "web", "explainer.html"), encoding="utf-8").read().split())
said = re.search(r"takes (\d+) queries at a time.*?(\d+) keys on a 1 MiB L2, (\d+) on a Zen 3's 512 KiB", page)
header = " ".join(open(os.path.join(ROOT, "include", "attn.h"), encoding="utf-8").read().replace(" * ", " ").split())
zen3 = re.search(r"\((\d+) keys on a Zen 3", header)
ran = lib.attn_get_tuning(ctypes.byref(tuning), None) == 0
report("page_tiles_state_the_library_blocks",
       said is not None and ran and int(said[1]) == tuning.block_rows and
       (tuning.blocks_for != b"generic" or int(said[2]) == tuning.block_keys) and
       zen3 is not None and int(said[3]) == int(zen3[1]),
       f"page says {said.groups() if said else 'no block sizes'}; attn_get_tuning: {tuning.block_rows} rows, "
       f"{tuning.block_keys} keys ({tuning.blocks_for}); attn.h's Zen 3: {zen3[1] if zen3 else None}")

# The paper (section 3.2.1) calls additive and dot-product attention "similar in
# theoretical complexity": a statement about cost. The page must not turn it into
# one about quality ("equally good in theory"), and must keep the paper's finding
# that, unscaled, additive attention did better for larger d_k.
additive = re.search(r'id="step-additive".*?</section>', page)
additive = re.sub(r"<[^>]+>", "", additive[0]) if additive else ""
report("page_additive_cost_not_quality",
       "similar in theoretical complexity" in additive and "claim about cost, not quality" in additive and
       not re.search(r"equally (good|well) in theory", additive) and
       "additive attention did better than dot-product attention for larger dk" in additive, additive[:600])

sys.exit(1 if failed else 0)
