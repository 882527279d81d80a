"""test_notebook.py -- docs/notebooks/attention.ipynb, executed headless with
Debian's jupyter-nbconvert on the build's libattn (ATTN_LIBRARY): it runs
from top to bottom without an error, and the numbers it prints are the
worked examples' (the journey context vector, the bank/river weights, the
[4, 16, 12] row, the toy head, the causal mask, the sqrt(d_k) table, the
heads and positions, a head that learns). The committed notebook has no
outputs.

Usage: test_notebook.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why"."""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scratch import scratch_dir  # noqa: E402
from torch_attention import Reporter  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
NOTEBOOK = os.path.join(HERE, "..", "docs", "notebooks", "attention.ipynb")
r = Reporter()

committed = json.load(open(NOTEBOOK))
code = [c for c in committed["cells"] if c["cell_type"] == "code"]
r.report("committed_without_outputs", "" if all(not c.get("outputs") and c.get("execution_count") is None
                                                for c in code) else "a code cell has outputs")
out = os.path.join(scratch_dir("attn-nb-"), "run.ipynb")
env = dict({k: v for k, v in os.environ.items() if k != "MPLBACKEND"}, ATTN_LIBRARY=os.path.join(BUILD, "libattn.so"),
           PYDEVD_DISABLE_FILE_VALIDATION="1")
run = subprocess.run(["jupyter-nbconvert", "--to", "notebook", "--execute", "--ExecutePreprocessor.timeout=300",
                      "--output", out, NOTEBOOK], capture_output=True, text=True, env=env,
                     cwd=os.path.dirname(NOTEBOOK))
r.report("runs_top_to_bottom", "" if run.returncode == 0 else run.stderr.strip()[-400:])
text, errors, images = "", 0, 0
if run.returncode == 0:
    nb = json.load(open(out))
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            if o.get("name") == "stdout":
                text += "".join(o["text"])
            errors += o.get("output_type") == "error"
            images += "image/png" in o.get("data", {}) or "text/html" in o.get("data", {})
r.report("no_error_outputs", "" if errors == 0 else "%d errors" % errors)
r.report("draws_heatmaps_and_a_figure", "" if images >= 2 else "%d pictures" % images)

want_lines = {
    "averaging_gives_one_blend": "every weight is 1/6: True   every row of the output the same: True",
    "journey_context_vector": "context of 'journey': 0.4419 0.6515 0.5683",
    "bank_river_the": "the    [0.384 0.3   0.315] sum 1.0",
    "bank_river_bank": "bank   [0.321 0.206 0.473] sum 1.0",
    "bank_river_river": "river  [0.053 0.008 0.939] sum 1.0",
    "scores_4_16_12_plain": "plain softmax:      0.000 0.982 0.018",
    "scores_4_16_12_scaled": "divided by sqrt(3): 0.001 0.909 0.090",
    "toy_sat_finds_cat": "sat -> cat  40%",
    "toy_on_finds_mat": "on -> mat  61%",
    "causal_nothing_above_the_diagonal": "above the diagonal: 0.0",
    "where_head_chased_park": "where? chased -> park",
    "rope_quick_fox": "with RoPE: quick -> fox",
    "rope_brown_fox": "with RoPE: brown -> fox",
    "rope_lazy_dog": "with RoPE: lazy -> dog",
    "rope_over_dog": "with RoPE: over -> dog",
}
for name, line in want_lines.items():
    r.report(name, "" if line in text else "no line %r" % line)
m = re.search(r"variance of q.k at d_k = 16: ([\d.]+), after / 4: ([\d.]+)", text)
r.report("variance_16_then_1", "" if m and 15 < float(m.group(1)) < 17 and 0.94 < float(m.group(2)) < 1.06
         else "got %s" % (m.groups() if m else None))
m = re.search(r"d = 1024  top weight raw ([\d.]+), scaled ([\d.]+);.*\(raw (\d+)x smaller\)", text)
r.report("sqrt_dk_table_1024", "" if m and float(m.group(1)) > 0.9 and float(m.group(2)) < 0.2 and int(m.group(3)) > 10
         else "got %s" % (m.groups() if m else None))
# Where the raw median gradient is the larger one (d = 16 and 64), the line says
# so: each comparison matches the two numbers printed before it.
rows = re.findall(r"d = +(\d+) .*median gradient raw ([\d.e+-]+), scaled ([\d.]+) \(raw ([\d.]+)x (smaller|larger)\)", text)
bad = [row for row in rows if (float(row[1]) < float(row[2])) != (row[4] == "smaller")]
r.report("sqrt_dk_table_says_which_is_larger", "" if len(rows) == 4 and not bad and
         [row[4] for row in rows[:2]] == ["larger", "larger"] else "got %s" % rows)
# One convention with attn explain: red for positive, blue for negative; Q's
# and K's columns d0...; a repeated word numbered the₁, the₂.
sys.path.insert(0, os.path.join(HERE, "..", "python"))
os.environ["ATTN_LIBRARY"] = os.path.join(BUILD, "libattn.so")
import attn.teach  # noqa: E402
red, blue = attn.teach._colour(1.0, -1.0, 1.0), attn.teach._colour(-1.0, -1.0, 1.0)
r.report("heatmap_red_positive_blue_negative", "" if red[1:3] == "ff" and red[5:7] < "80" and blue[5:7] == "ff"
         and blue[1:3] < "80" else "positive %s, negative %s" % (red, blue))
e = attn.teach.explain("the cat sat on the mat")
html_, labels = e._repr_html_(), getattr(e, "labels", lambda: None)()
r.report("heatmap_columns_d0_and_repeated_words", "" if ">d0<" in html_ and ">k0<" not in html_ and
         ">the\u2081<" in html_ and ">the\u2082<" in html_ and labels == ["the\u2081", "cat", "sat", "on", "the\u2082", "mat"]
         else "labels %s" % labels)
r.report("notebook_prints_repeated_words_numbered", "" if "the\u2081 -> " in text else "no line for the\u2081")
steps = re.findall(r"step +(\d+)  loss ([\d.]+)  sat -> cat (\d+)%", text)
r.report("a_head_learns", "" if len(steps) >= 3 and float(steps[-1][1]) < float(steps[0][1]) / 10 and
         int(steps[-1][2]) >= 90 else "got %s" % steps)
print("# notebook: %d passed, %d failed" % (r.passed, r.failed))
sys.exit(1 if r.failed else 0)
