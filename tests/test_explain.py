#!/usr/bin/python3
"""test_explain.py -- `attn explain` and `attn scaling`: the toy model's story,
the classic worked examples' numbers, agreement with the C API and with
NumPy, and every error.

Usage: test_explain.py BUILD_DIR. Prints "ok NAME" / "FAIL NAME: why".
ATTN_BIN overrides the command under test (e.g. a sanitizer build).
"""
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET

import numpy as np

from scratch import scratch_dir
from clicheck import run_expecting_error, status_on_closed_pipe

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ATTN = os.path.abspath(os.environ.get("ATTN_BIN") or os.path.join(BUILD, "attn"))
API = os.path.abspath(os.path.join(BUILD, "tests", "explain_api"))
TMP = scratch_dir("attn_explain_")
failed = 0
DEFAULT = "the cat sat on the mat"


def report(name, ok, why=""):
    global failed
    print(f"ok {name}" if ok else f"FAIL {name}: {why}", flush=True)
    failed += not ok


def run(*args, env=None):
    return run_argv([ATTN, *args], env)


def run_argv(argv, env=None):
    e = dict(os.environ)
    e.pop("NO_COLOR", None)
    e.pop("COLUMNS", None)  # a pipe: no width limit unless a test sets one
    e.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, cwd=TMP, env=e)


def explain_json(*args):
    r = run("explain", "--json", *args)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def mat(j, key):
    """A JSON matrix as a float array; null (masked) becomes -inf."""
    return np.array([[-math.inf if x is None else x for x in row] for row in j[key]], dtype=float)


def softmax_rows(s):
    out = np.zeros_like(s)
    for i, row in enumerate(s):
        ok = np.isfinite(row)
        if ok.any():
            e = np.exp(row[ok] - row[ok].max())
            out[i, ok] = e / e.sum()
    return out


def flat(text):
    """Text with every run of spaces and newlines made one space: prose reads
    the same however the terminal's width wraps it."""
    return " ".join(text.split())


def expect_error(name, args, code, pattern, created=()):
    problems = run_expecting_error(run, TMP, args, code, pattern, created)
    report(name, not problems, "; ".join(problems))


def test_train():
    """`attn train`: the default run learns sat -> cat and drives the loss down;
    runs are deterministic; other sentences and heads sizes work; the JSON and SVG
    carry what they say."""
    r = run("train")
    m = re.search(r"^sat attends most to (\w+) \(([\d.]+)\) in the learned head, to (\w+)", r.stdout, re.M)
    report("train_default_learns_sat_to_cat", r.returncode == 0 and m and m[1] == "cat" and float(m[2]) > 0.9
           and m[3] == "cat", r.stdout + r.stderr)
    j1, j2 = run("train", "--json", "--steps", "400"), run("train", "--json", "--steps", "400")
    d = json.loads(j1.stdout) if j1.returncode == 0 else {}
    report("train_deterministic_for_a_seed", j1.returncode == 0 and j1.stdout == j2.stdout, j1.stderr)
    loss = d.get("loss", [])
    report("train_json_curves_and_weights", len(loss) == 400 and len(d.get("grad_wq", [])) == 400
           and loss[0] > 1 and sum(loss[-10:]) / 10 < 0.05 * loss[0], str(loss[:3] + loss[-3:]))

    # The matrices carry their shapes, lists of rows as every other JSON
    # matrix of the command (attn explain --json's): they were flat lists.
    def shape(x):
        return (len(x), *{len(row) if isinstance(row, list) else -1 for row in x}) if isinstance(x, list) else ()
    shapes = {k: shape(d.get(k)) for k in ("w_q", "w_k", "w_v", "weights")}
    report("train_json_matrices_have_their_shapes", shapes == {"w_q": (8, 4), "w_k": (8, 4), "w_v": (8, 4),
                                                                "weights": (6, 6)}, str(shapes))
    other = run("train", "--seed", "5", "--json").stdout != run("train", "--seed", "6", "--json").stdout
    report("train_seed_changes_the_run", other)
    r = run("train", "my big dog chased a small red ball")
    report("train_other_sentence_chased_to_dog", r.returncode == 0 and
           re.search(r"^chased attends most to dog \(0\.9\d\) in the learned head", r.stdout, re.M), r.stdout)
    # The heading quotes the sentence as the head read it: typed, its control
    # bytes (ESC, BEL; the tokenizer drops them as it drops punctuation), tab
    # and line break went to the terminal as they were.
    r = run("train", "--steps", "1", "The\tCAT,\x1b[\x07\x01\nsat!")
    report("train_heading_quotes_the_words_read", r.returncode == 0 and
           'attention weights on "the cat sat" (causal)' in flat(r.stdout) and
           not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", r.stdout), repr(r.stdout[:600]) + r.stderr)
    # A repeated word: each verdict names positions as the table labels them
    # (ran₁, cat₁), not the bare word, which said "ran attends most to cat"
    # twice; and words tied for the most weight are all named (a repeated word
    # has one key wherever it stands: ran₂ weighs cat₁ and cat₂ alike), where
    # the first of them was named alone.
    r = run("train", "--steps", "300", "the cat ran the cat ran")
    verdicts = re.findall(r"\S+ attends most to .*? hand-wired one", flat(r.stdout))
    report("train_verdicts_name_repeated_words_by_position", r.returncode == 0 and verdicts == [
        "ran₁ attends most to cat₁ (0.90) in the learned head, to cat₁ (0.64) in the hand-wired one",
        "ran₂ attends most to cat₁ and cat₂ (0.45 each) in the learned head, to cat₁ and cat₂ (0.32 each) in the "
        "hand-wired one"], r.stdout + r.stderr)
    r = run("train", "--dk", "16", "--no-scale", "--steps", "50", "--batch", "4", "--json")
    d = json.loads(r.stdout) if r.returncode == 0 else {}
    report("train_dk16_no_scale_runs", d.get("d_k") == 16 and d.get("scaled") is False and
           np.array(d.get("w_k", [])).shape == (8, 16), r.stderr)
    svg = os.path.join(TMP, "train.svg")
    r = run("train", "--steps", "50", "--svg", svg)
    try:
        root = ET.parse(svg).getroot()
        lines = list(root.iter("{http://www.w3.org/2000/svg}polyline"))
        ok = r.returncode == 0 and len(lines) == 1 and len(lines[0].get("points").split()) == 50
    except (OSError, ET.ParseError) as e:
        ok, r = False, e
    report("train_svg_loss_curve", ok, str(r))
    test_train_one_step()


def test_train_one_step():
    """`attn train --steps 1 --batch 1`: one loss, printed the same at both ends of
    the curve (it was "2.2063 ... 2.206"), in the singular ("1 steps", "over the
    first 1 steps" before), the gradient named as the Frobenius norm it is."""
    j = run("train", "--steps", "1", "--batch", "1", "--json")
    first = "%.4g" % json.loads(j.stdout)["loss"][0] if j.returncode == 0 else "?"
    for cols in ("80", "30"):  # the curve on the loss line, and a narrow terminal's line of its own
        r = run("train", "--steps", "1", "--batch", "1", env={"COLUMNS": cols})
        text = flat(r.stdout)
        same = (f"loss {first} " in text and f" {first} (log scale)" in text if cols == "80"
                else f"loss {first} to {first} (log scale)" in text)
        report(f"train_one_step_loss_printed_alike_{cols}_columns", r.returncode == 0 and same, r.stdout[:400] + r.stderr)
        report(f"train_one_step_singular_{cols}_columns", "1 step of 1 sentence, Adam" in text and
               "over the first step:" in text and "1 steps" not in text and "1 sentences" not in text, text[:600])
    r = run("train", "--steps", "20")
    report("train_gradient_named_frobenius_norm", "median ||dLoss/dW_Q||_F over the first 10 steps:"
           in flat(r.stdout) and "|dLoss/dW_Q| " not in r.stdout, r.stdout[:600])
    r = run("scaling", "--queries", "100", "--dims", "4")  # its training legend, the same gradient
    report("scaling_gradient_named_frobenius_norm", "grad W_Q: the median of ||dLoss/dW_Q||_F (Frobenius norm) over "
           "the first 10 steps" in flat(r.stdout) and "|dLoss/dW_Q| " not in r.stdout, r.stdout[-600:] + r.stderr)


def test_train_matches_autograd():
    """attn train's losses and |dLoss/dW_Q| are those of its stated task, rebuilt
    here with PyTorch's autograd and Adam: every word's output against the last
    noun's features up to it, averaged over the batch's words."""
    try:
        import torch
    except ImportError:
        print("skip train_matches_autograd: no torch")
        return
    vocab = ("the a my cat dog fox bird mat ball hat box park garden sat ran chased jumped saw slept on in over "
             "under with quick brown lazy big small red").split()
    emb = dict(zip(vocab, explain_json(" ".join(vocab))["X"]))

    def raw(rng):  # splitmix64, as src/teach/rng.h; rng is {"s": state}
        mask = (1 << 64) - 1
        rng["s"] = (rng["s"] + 0x9E3779B97F4A7C15) & mask
        z = rng["s"]
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    def uniform(rng):
        return (raw(rng) >> 11) * 2.0 ** -53

    def normals(rng, n):  # Box-Muller in pairs, cos first; n even here
        out = []
        while len(out) < n:
            u1, u2 = 1 - uniform(rng), uniform(rng)
            radius, angle = math.sqrt(-2 * math.log(u1)), 6.283185307179586 * u2
            out += [radius * math.cos(angle), radius * math.sin(angle)]
        return out

    def pick(rng, words):
        return words[raw(rng) % len(words)]

    def sentence(rng):  # DET ADJ* NOUN VERB [PREP DET ADJ* NOUN], as src/teach/train.c
        adj, det = "quick brown lazy big small red".split(), ["the", "a", "my"]
        words = [pick(rng, det)] + [pick(rng, adj) for _ in range(raw(rng) % 3)]
        words += [pick(rng, vocab[3:13]), pick(rng, vocab[13:19])]
        if uniform(rng) < 0.7:
            words += [pick(rng, vocab[19:24]), pick(rng, det)]
            words += [pick(rng, adj) for _ in range(raw(rng) % 3)] + [pick(rng, vocab[3:13])]
        return words

    dk, steps, batch, seed = 3, 4, 5, 77
    r = run("train", "--json", "--dk", str(dk), "--steps", str(steps), "--batch", str(batch), "--seed", str(seed))
    d = json.loads(r.stdout) if r.returncode == 0 else {"loss": [], "grad_wq": []}
    init, data = {"s": seed}, {"s": seed ^ 0x5EED5EED5EED}
    w0 = torch.tensor(normals(init, 16 * dk + 32), dtype=torch.float64)
    w = [w0[:8 * dk].reshape(8, dk).clone().requires_grad_(), w0[8 * dk:16 * dk].reshape(8, dk).clone().requires_grad_(),
         w0[16 * dk:].reshape(8, 4).clone().requires_grad_()]
    adam = torch.optim.Adam(w, lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    losses, grads = [], []
    for _ in range(steps):
        sentences = [sentence(data) for _ in range(batch)]
        count, loss = sum(map(len, sentences)), 0
        adam.zero_grad()
        for words in sentences:
            x = torch.tensor([emb[t] for t in words], dtype=torch.float64)
            n = len(words)
            scores = (x @ w[0]) @ (x @ w[1]).T / math.sqrt(dk)
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
            out = torch.softmax(scores, 1) @ (x @ w[2])
            target, noun = torch.zeros(n, 4, dtype=torch.float64), -1
            for i in range(n):
                noun = i if x[i, 0] == 1 else noun
                if noun >= 0:
                    target[i] = x[noun, [0, 2, 3, 4]]
            loss = loss + ((out - target) ** 2).sum() / count
        loss.backward()
        losses.append(loss.item()), grads.append(w[0].grad.norm().item())
        adam.step()
    h = flat(run("train", "--help").stdout)
    report("train_help_states_the_loss_trained", "every word's output must equal the features" in h and
           "averaged over the batch's words" in h and "each verb's output" not in h, h[:600])
    report("train_matches_autograd", len(d["loss"]) == steps and
           np.allclose(d["loss"], losses, rtol=1e-12, atol=0) and np.allclose(d["grad_wq"], grads, rtol=1e-12, atol=0),
           f"attn {d['loss']} {d['grad_wq']}; torch {losses} {grads}")
    # The learned weights, row by row as W_Q (d_model, d_k) is laid out, are Adam's.
    learned = [np.array(d.get(k, []), dtype=float) for k in ("w_q", "w_k", "w_v")]
    report("train_json_weights_are_adams", all(a.shape == tuple(t.shape) and np.allclose(a, t.detach().numpy(), rtol=1e-10,
                                                                                         atol=1e-12)
                                               for a, t in zip(learned, w)), str([a.shape for a in learned]))


def splitmix64_uniforms(seed, n):
    """The library's portable generator, written again here as an oracle."""
    mask, out, state = (1 << 64) - 1, [], seed
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        out.append((z >> 11) * 2.0 ** -53)
    return out


def test_story():
    j = explain_json()
    t = j["tokens"]
    w, s = mat(j, "weights"), mat(j, "scores")
    sat, cat, on, mat_ = t.index("sat"), t.index("cat"), t.index("on"), t.index("mat")
    report("story_sat_attends_most_to_cat", int(np.argmax(w[sat])) == cat, str(w[sat]))
    report("story_on_attends_most_to_mat", int(np.argmax(w[on])) == mat_, str(w[on]))
    report("story_asymmetric_scores", round(s[sat, cat], 12) == 1.92 and round(s[cat, sat], 12) == 0.02
           and w[sat, cat] > 2 * w[cat, sat], f"sat->cat {s[sat, cat]}, cat->sat {s[cat, sat]}")
    j2 = explain_json("the dog chased a ball in the park")
    t2, w2 = j2["tokens"], mat(j2, "weights")
    report("story_verb_finds_animal", t2[int(np.argmax(w2[t2.index("chased")]))] == "dog", str(w2[2]))
    report("story_preposition_finds_thing", t2[int(np.argmax(w2[t2.index("in")]))] in ("ball", "park"),
           str(w2[5]))
    j3 = explain_json("the big red ball")
    t3, w3 = j3["tokens"], mat(j3, "weights")
    report("story_adjective_finds_noun", t3[int(np.argmax(w3[t3.index("big")]))] == "ball", str(w3[1]))
    report("json_has_every_key", all(k in j for k in (
        "tokens", "features", "d_model", "d_k", "X", "W_Q", "W_K", "W_V", "Q", "K", "V", "scores",
        "scaled", "weights", "output")) and j["d_model"] == 8 and j["d_k"] == 4 and len(j["features"]) == 8,
        str(sorted(j)))


# The patterns the explainer promises, "adjectives find their nouns, verbs find
# animals, prepositions find things", and the "where?" head's, on the example
# sentences that the page and docs/explainer.md use. Each row: options, sentence,
# head (0 the wired head, 1 the "where?" head of --heads 2), and for each asking
# word the words it must find. Without positions two words with the same features
# get the same key, so "fox" and "dog" tie exactly and both are named; with RoPE
# the word-order head must pick the word's own noun alone.
PATTERNS = [
    ((), "the cat sat on the mat", 0, {"sat": {"cat"}, "on": {"mat"}}),
    ((), "the quick brown fox jumped over the lazy dog", 0,
     {"quick": {"fox", "dog"}, "brown": {"fox", "dog"}, "lazy": {"fox", "dog"}, "jumped": {"fox", "dog"},
      "over": {"fox", "dog"}}),
    ((), "my dog chased a ball in the park", 0, {"chased": {"dog"}, "in": {"park"}}),
    ((), "my dog chased a ball", 0, {"chased": {"dog"}}),
    ((), "the big dog chased a ball", 0, {"big": {"dog", "ball"}, "chased": {"dog"}}),
    ((), "the big red ball", 0, {"big": {"ball"}, "red": {"ball"}}),
    ((), "the cat sat on the mat", 1, {"sat": {"mat"}, "on": {"mat"}, "cat": {"on"}, "mat": {"on"}}),
    ((), "my dog chased a ball in the park", 1,
     {"chased": {"park"}, "in": {"park"}, "dog": {"in"}, "ball": {"in"}, "park": {"in"}}),
    ((), "the quick brown fox jumped over the lazy dog", 1, {"fox": {"over"}, "dog": {"over"}}),
    (("--positions", "rope"), "the quick brown fox jumped over the lazy dog", 0,
     {"quick": {"fox"}, "brown": {"fox"}, "lazy": {"dog"}, "jumped": {"fox"}, "over": {"dog"}}),
    (("--positions", "rope"), "my dog chased a ball in the park", 0, {"chased": {"dog"}, "in": {"park"}}),
    (("--positions", "rope"), "the cat sat on the mat", 0, {"sat": {"cat"}, "on": {"mat"}}),
]
PATTERN_MARGIN = 2.5  # each word named outweighs every word not named 2.5 times (sat -> cat: e^0.96 = 2.6)


def test_patterns():
    """Each example shows its pattern with the largest weight by a clear margin:
    every word the pattern names outweighs every other word PATTERN_MARGIN times."""
    for extra, sentence, head, want in PATTERNS:
        j = explain_json(*extra, *(("--heads", "2") if head else ()), sentence)
        h = j["heads"][head] if head else j
        w, words = mat(h, "weights"), sentence.split()
        bad = []
        for word, targets in want.items():
            row = w[words.index(word)]
            named = [row[i] for i, t in enumerate(words) if t in targets]
            other = max(row[i] for i, t in enumerate(words) if t not in targets)
            if min(named) < PATTERN_MARGIN * other:
                bad.append(f"{word}: named {min(named):.3f} < {PATTERN_MARGIN} x {other:.3f}")
        name = "_".join(["pattern", "where" if head else "who"] + [a.strip("-") for a in extra] + words)
        report(name, not bad, "; ".join(bad))


def test_rows_and_numpy():
    cases = [(), ("--causal",), ("--no-scale",), ("--random-head",), ("--mode", "dot"),
             ("--mode", "average"), ("--mode", "average", "--causal"), ("--random-head", "--causal")]
    for extra in cases:
        for sentence in (DEFAULT, "my quick brown fox jumped over a lazy dog in the garden", "cat"):
            j = explain_json(*extra, sentence)
            name = "_".join(a.strip("-") for a in extra) or "default"
            n = len(j["tokens"])
            w = mat(j, "weights")
            report(f"rows_sum_to_1_{name}_{n}", np.allclose(w.sum(1), 1, atol=1e-12, rtol=0), str(w.sum(1)))
            # An independent computation in NumPy from X and the weights.
            X = mat(j, "X")
            if j["mode"] == "qkv":
                Q, K, V = X @ mat(j, "W_Q"), X @ mat(j, "W_K"), X @ mat(j, "W_V")
            else:
                Q = K = V = X
            scale = {"qkv": 1 / math.sqrt(Q.shape[1]) if "--no-scale" not in extra else 1.0,
                     "dot": 1.0, "average": 0.0}[j["mode"]]
            S = Q @ K.T * scale
            if "--causal" in extra:
                S[np.triu_indices(n, 1)] = -math.inf
            W = softmax_rows(S)
            errs = [np.max(np.abs(a - b)) for a, b in (
                (mat(j, "Q"), Q), (mat(j, "scores"), Q @ K.T), (w, W), (mat(j, "output"), W @ V))]
            masked_ok = np.array_equal(np.isinf(mat(j, "scaled")), np.isinf(S))
            report(f"numpy_agrees_{name}_{n}", max(errs) < 1e-12 and masked_ok and
                   abs(j["scale"] - scale) < 1e-15, f"errors {errs}, masks equal {masked_ok}")
            if "--causal" in extra:
                report(f"causal_upper_triangle_zero_{name}_{n}", np.all(np.triu(w, 1) == 0), str(w))
            if j["mode"] == "average" and "--causal" not in extra:
                report(f"average_is_uniform_{n}", np.allclose(w, 1 / n, atol=1e-15), str(w[0]))


def test_api_agreement():
    """--json prints exactly (bit for bit) what the C API computes."""
    for extra in ((), ("--random-head",), ("--causal",)):
        for sentence in (DEFAULT, "A lazy dog slept under the red hat!"):
            j = explain_json(*extra, sentence)
            r = subprocess.run([API, *extra, sentence], capture_output=True, text=True)
            api = {ln.split()[0]: [float(x) for x in ln.split()[1:]] for ln in r.stdout.splitlines()}
            bad = [k for k, v in api.items()
                   if [(-math.inf if x is None else x) for row in j[k] for x in row] != v]
            name = "_".join(a.strip("-") for a in extra) or "wired"
            report(f"json_equals_api_{name}_{len(j['tokens'])}", r.returncode == 0 and not bad and
                   len(api) == 11, f"differ: {bad} {r.stderr}")


def test_random_head_prng():
    j = explain_json("--random-head")
    u = splitmix64_uniforms(2017, 96)
    a = math.sqrt(3 / 8)
    want = [(2 * x - 1) * a for x in u]
    got = [x for k in ("W_Q", "W_K", "W_V") for row in j[k] for x in row]
    report("random_head_is_splitmix64_seed_2017", max(abs(g - w) for g, w in zip(got, want)) < 1e-16,
           "the random head's weights differ from the portable generator's")


def test_permutation():
    a, b = explain_json(DEFAULT), explain_json("mat the on sat cat the")
    perm = [5, 0, 3, 2, 1, 4]  # b's row i is a's row perm[i]
    ok = [b["tokens"][i] == a["tokens"][p] for i, p in enumerate(perm)]
    diff = np.max(np.abs(mat(b, "output") - mat(a, "output")[perm]))
    report("shuffle_permutes_output_rows", all(ok) and diff < 1e-14, f"max diff {diff}")
    w_a, w_b = mat(a, "weights"), mat(b, "weights")
    report("shuffle_permutes_weights", np.max(np.abs(w_b - w_a[np.ix_(perm, perm)])) < 1e-14, "")


def test_worked_examples():
    # The six tokens: weights = softmax(X X^T) unscaled, context row of "journey".
    x = np.array([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                  [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
    np.save(os.path.join(TMP, "six.npy"), x)
    j = explain_json("--embeddings", "six.npy", "--tokens", "Your,journey,starts,with,one,step", "--mode", "dot")
    out = mat(j, "output")
    report("six_tokens_journey_context", j["tokens"][1] == "journey" and
           np.array_equal(np.round(out[1], 4), [0.4419, 0.6515, 0.5683]), str(out[1]))
    # The bank by the river: the/bank/river from NumPy's default_rng(0), scaled by sqrt(4).
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 4))
    Wq, Wk, Wv = (rng.normal(size=(4, 4)) for _ in range(3))
    for n, a in (("X3", X), ("wq", Wq), ("wk", Wk), ("wv", Wv)):
        np.save(os.path.join(TMP, n + ".npy"), a)
    j = explain_json("--embeddings", "X3.npy", "--tokens", "the,bank,river", "--wq", "wq.npy", "--wk", "wk.npy",
                     "--wv", "wv.npy")
    w = np.round(mat(j, "weights"), 3)
    want = [[0.384, 0.3, 0.315], [0.321, 0.206, 0.473], [0.053, 0.008, 0.939]]
    report("bank_river_weights", np.array_equal(w, want) and len(j["output"][0]) == 4, str(w))
    # A causal head: torch.manual_seed(0), T = 5, d = 8, causal; weights to 2 decimals.
    try:
        import torch
        torch.manual_seed(0)
        T, d = 5, 8
        xt = torch.randn(1, T, d)
        ws = [torch.randn(d, d) / math.sqrt(d) for _ in range(3)]
        np.save(os.path.join(TMP, "x1.npy"), xt[0].numpy())
        for n, a in zip(("q1", "k1", "v1"), ws):
            np.save(os.path.join(TMP, n + ".npy"), a.numpy())
        j = explain_json("--embeddings", "x1.npy", "--wq", "q1.npy", "--wk", "k1.npy", "--wv", "v1.npy", "--causal")
        w = np.round(mat(j, "weights"), 2)
        want = [[1, 0, 0, 0, 0], [0.48, 0.52, 0, 0, 0], [0.20, 0.33, 0.47, 0, 0],
                [0.14, 0.32, 0.23, 0.31, 0], [0.07, 0.06, 0.39, 0.10, 0.39]]
        report("causal_t5_d8_weights", np.allclose(w, want, atol=1e-9), str(w))
    except ImportError:
        report("causal_t5_d8_weights", False, "torch missing")


def test_text_output():
    r = run("explain", "--color=never")
    for step in ("tokens", "X = E[ids]:", "W_Q", "W_K", "W_V", "Q = X W_Q", "K = X W_K", "V = X W_V", "Q K^T",
                 "sqrt(d_k)", "softmax", "output", "who attends to whom"):
        if step not in r.stdout:
            report("text_has_every_step", False, f"missing {step!r}")
            break
    else:
        report("text_has_every_step", r.returncode == 0, r.stderr)
    report("text_summary_sat_cat", re.search(r"sat\s+->\s+cat 40%", r.stdout) is not None,
           r.stdout[-400:])
    r = run("explain", "--step", "weights", "--color=never")
    report("step_shows_one_step", r.returncode == 0 and "softmax" in r.stdout and "W_Q" not in r.stdout
           and "sum" in r.stdout, r.stdout[:200])
    r2 = run("explain", "The CAT, sat on... the MAT!", "--json")
    report("case_and_punctuation", r2.returncode == 0 and json.loads(r2.stdout)["tokens"] ==
           DEFAULT.split(), r2.stderr)
    esc = "\x1b["
    report("colour_never_when_piped", esc not in run("explain").stdout, "escape codes in piped output")
    report("colour_always", esc in run("explain", "--color=always").stdout, "no escape codes")
    report("colour_no_color_env", esc not in run("explain", "--color=auto", env={"NO_COLOR": "1"}).stdout, "")
    # Values past 10^7 (your embeddings may hold 1e100) print in exponent
    # form: each cell was 100 digits of %.3f, and the table fell apart.
    # (1e300 would overflow the scores, which is an error of its own.)
    np.save(os.path.join(TMP, "huge.npy"), np.full((3, 4), 1e100))
    r = run("explain", "--embeddings", "huge.npy", "--mode", "dot", "--step", "x", env={"COLUMNS": "80"})
    report("explain_huge_values_in_exponent_form", r.returncode == 0 and r.stdout.count("1.00e+100") == 12 and
           max(len(l) for l in r.stdout.splitlines()) <= 80, r.stdout[-400:] + r.stderr)
    r = run("explain", "--help")
    report("explain_help", r.returncode == 0 and "--embeddings" in r.stdout, r.stderr)


def test_scaling():
    r = run("scaling", "--json", "--seed", "1", "--no-train")
    rows = {row["d"]: row for row in json.loads(r.stdout)["rows"]} if r.returncode == 0 else {}
    expect_top = {16: 0.58, 64: 0.79, 256: 0.90, 1024: 0.95}
    ok = len(rows) == 4
    why = []
    for d, top in expect_top.items():
        row = rows.get(d, {})
        checks = [abs(row.get("spread_raw", 0) / math.sqrt(d) - 1) < 0.03,
                  abs(row.get("spread_scaled", 0) - 1) < 0.03,
                  abs(row.get("top_raw", 0) - top) < 0.02,
                  abs(row.get("top_scaled", 0) - 0.107) < 0.006,
                  row.get("top_div_d", 1) < row.get("top_scaled", 0),
                  row.get("grad_mean_scaled", 0) > 0.15]
        if not all(checks):
            ok = False
            why.append(f"d={d}: {row}")
    report("scaling_table_matches_seeds", ok, "; ".join(why))
    r = run("scaling", "--json", "--dims", "1024", "--keys", "6", "--seed", "1")
    row = json.loads(r.stdout)["rows"][0] if r.returncode == 0 else {}
    ratio = row.get("grad_mean_scaled", 0) / max(row.get("grad_mean_raw", 1), 1e-300)
    med = row.get("grad_median_scaled", 0) / max(row.get("grad_median_raw", 1), 1e-300)
    report("scaling_6_keys_d1024", abs(row.get("top_raw", 0) - 0.97) < 0.01 and 6 < ratio < 14 and med > 100,
           f"top {row.get('top_raw')}, mean ratio {ratio:.2f}, median ratio {med:.3g}")
    # docs/explainer.md: "about 98%" of the top word is 4 keys' figure, 6 give 97%.
    r = run("scaling", "--json", "--no-train", "--dims", "1024", "--keys", "4")
    row = json.loads(r.stdout)["rows"][0] if r.returncode == 0 else {}
    ratio = row.get("grad_mean_scaled", 0) / max(row.get("grad_mean_raw", 1), 1e-300)
    report("scaling_4_keys_d1024_about_98", abs(row.get("top_raw", 0) - 0.98) < 0.005 and ratio > 10,
           f"top {row.get('top_raw')}, mean ratio {ratio:.2f}")
    # A saturated softmax's gradient, to the digits printed: with 2 keys the
    # Jacobian's norm is 2 p1 p2, about 2 exp(-|s1 - s2|), far below 1e-16 at
    # d = 16384, where expanding the norm's square cancelled to 0.
    d, n = 16384, 3
    u = splitmix64_uniforms(5, n * 3 * d)
    normals = []
    for u1, u2 in zip(u[0::2], u[1::2]):
        radius, angle = math.sqrt(-2 * math.log(1 - u1)), 6.283185307179586 * u2
        normals += [radius * math.cos(angle), radius * math.sin(angle)]
    v = np.array(normals).reshape(n, 3, d)  # per query: q, then its 2 keys
    gap = np.abs(np.einsum("ne,nke->nk", v[:, 0], v[:, 1:]) @ np.array([1.0, -1.0]))
    want = np.median(2 * np.exp(-gap) / (1 + np.exp(-gap)) ** 2)
    r = run("scaling", "--json", "--dims", str(d), "--queries", str(n), "--keys", "2", "--seed", "5", "--no-train")
    got = json.loads(r.stdout)["rows"][0]["grad_median_raw"] if r.returncode == 0 else 0
    report("scaling_saturated_gradient_not_cancelled", 0 < want < 1e-20 and abs(got - want) <= 1e-6 * want,
           f"printed {got:.3g}, NumPy {want:.3g}")
    # The stated standard error matches the spread of the std across seeds.
    stds, ses = {8: [], 512: []}, {}
    for seed in range(24):
        r = run("scaling", "--variance", "--queries", "2000", "--seed", str(seed))
        for m in re.finditer(r"^\s*(\d+)\s+([\d.]+) \u00b1 ([\d.]+)", r.stdout, re.M):
            stds[int(m.group(1))].append(float(m.group(2)))
            ses[int(m.group(1))] = float(m.group(3))
    ratios = {d: float(np.std(v, ddof=1)) / ses[d] for d, v in stds.items() if len(v) == 24 and ses.get(d)}
    report("scaling_variance_standard_error_matches_seeds", len(ratios) == 2 and all(0.6 < x < 1.5 for x in ratios.values()),
           str(ratios))
    # The sentence under the table is true of the numbers above it: "each is
    # within about two standard errors" was printed also when one was not.
    r = run("scaling", "--variance")
    report("scaling_variance_within_two_se", "each is within two standard errors" in flat(r.stdout), r.stdout)
    r = run("scaling", "--variance", "--queries", "2000", "--seed", "19")
    m = re.search(r"^\s*512\s+([\d.]+) \u00b1 ([\d.]+)", r.stdout, re.M)
    z = (float(m.group(1)) - math.sqrt(512)) / float(m.group(2)) if m else 0
    said = re.search(r"d = 512's is (\d+\.\d) standard errors", flat(r.stdout))
    report("scaling_variance_names_the_far_one", z < -2 and "each is within" not in flat(r.stdout) and
           said is not None and abs(float(said.group(1)) - abs(z)) < 0.1, r.stdout)
    r = run("scaling", "--variance", "--json")
    rows = {row["d"]: row for row in json.loads(r.stdout)["rows"]} if r.returncode == 0 else {}
    report("scaling_variance_std_8_and_512", abs(rows[8]["spread_raw"] - 2.8) < 0.1 and
           abs(rows[512]["spread_raw"] - 22.6) < 0.7 and all(abs(x["spread_scaled"] - 1) < 0.04
                                                              for x in rows.values()), str(rows))
    # The JSON carries everything the table says: each row's standard error,
    # sqrt(d) and variances, and which d's std (if any) lies past two standard
    # errors of sqrt(d), as the sentence under the table names it.
    for seed in ("0", "19"):
        args = ("scaling", "--variance", "--queries", "2000", "--seed", seed)
        text, js = run(*args), run(*args, "--json")
        table = {int(m[0]): [float(x) for x in m[1:]] for m in
                 re.findall(r"^\s*(\d+)\s+([\d.]+) \u00b1 ([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                            text.stdout, re.M)}
        j = json.loads(js.stdout) if js.returncode == 0 else {}
        said = re.search(r"d = (\d+)'s is (\d+\.\d) standard errors", flat(text.stdout))
        keys = ("spread_raw", "std_error", "spread_scaled", "sqrt_d", "var_raw", "var_scaled")
        rows = {row["d"]: row for row in j.get("rows", [])}
        ok = (j.get("variance") is True and j.get("pairs") == 2000 and sorted(table) == sorted(rows) == [8, 512] and
              all(abs(rows[d].get(k, math.inf) - x) <= 0.0051 for d in table for k, x in zip(keys, table[d])) and
              (j.get("farthest_d") == (int(said.group(1)) if said else None)) and
              all(abs(row.get("standard_errors_from_sqrt_d", math.inf) -
                      (row["spread_raw"] - math.sqrt(row["d"])) / row["std_error"]) < 1e-9 for row in rows.values()) and
              (not said or abs(abs(rows[int(said.group(1))]["standard_errors_from_sqrt_d"]) - float(said.group(2))) <= 0.051))
        report(f"scaling_variance_json_says_what_the_table_says_seed{seed}", ok, js.stdout + text.stdout)
    r = run("scaling", "--no-train", "--queries", "500")
    row64 = [l.split() for l in r.stdout.splitlines() if l.split()[:1] == ["64"]]
    report("scaling_spread_divided_by_d", row64 and abs(float(row64[0][4]) - 0.125) < 0.005, str(row64))
    r = run("scaling", "--seed", "1", "--queries", "300", "--dims", "4,64,256,1024")
    table, _, training = r.stdout.partition("Training, end to end")
    report("scaling_text_table", r.returncode == 0 and "Frobenius" in table and
           sorted({int(ln.split()[0]) for ln in table.splitlines() if re.match(r"\s+\d+ \|", ln)}) == [4, 64, 256, 1024],
           r.stdout)
    # The claim "without the division learning gets stuck", measured end to end:
    # the same task and initial weights, d_k = 4, 64, 256 (1024 is not trained).
    rows = {int(m[0]): [float(x) for x in m[1:]] for m in
            re.findall(r"^\s+(\d+) \|\s+(\S+)\s+(\S+) \|\s+(\S+)\s+(\S+)$", training, re.M)}
    report("scaling_training_columns", sorted(rows) == [4, 64, 256] and rows[4][0] < 0.01 and rows[4][1] < 0.01
           and all(rows[d][0] > 0.2 and rows[d][0] > 2 * rows[d][1] for d in (64, 256)), training)
    test_train()
    test_train_matches_autograd()
    svg = os.path.join(TMP, "scaling.svg")
    r = run("scaling", "--queries", "200", "--svg", svg, "--no-train")
    try:
        root = ET.parse(svg).getroot()
        texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
        rects = len(list(root.iter("{http://www.w3.org/2000/svg}rect")))
        report("scaling_svg", r.returncode == 0 and "raw q.k" in texts and "sqrt(d)" in texts and
               "score (x axis)" in texts and rects > 8 * 40, f"{rects} rects; {texts[:120]}")
    except (ET.ParseError, FileNotFoundError) as e:
        report("scaling_svg", False, str(e))
    # One score of d = 65536 (spread 256) lies outside the raw axis, -96 to 96,
    # for this seed: the raw panel is empty (its 48 bars of height 0), and its
    # bars were 0 / 0, written y='-nan' height='-nan'. Every number of the
    # figure is one.
    r = run("scaling", "--dims", "65536", "--queries", "1", "--keys", "1", "--seed", "0", "--svg", svg, "--no-train")
    try:
        root = ET.parse(svg).getroot()
        rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
        numbers = [v for e in root.iter() for k, v in e.attrib.items() if k in ("x", "y", "width", "height")]
        bad = [v for v in numbers if v != "100%" and not math.isfinite(float(v))]
        raw_bars = [e.get("height") for e in rects if e.get("fill") == "#d62728" and e.get("y") != "36"]
        report("scaling_svg_empty_panel_has_no_nan", r.returncode == 0 and not bad and len(raw_bars) == 48 and
               all(float(h) == 0 for h in raw_bars), f"{len(bad)} of {len(numbers)} not finite: {bad[:4]}; "
               f"raw bars {raw_bars[:4]}")
    except (ET.ParseError, FileNotFoundError, ValueError) as e:
        report("scaling_svg_empty_panel_has_no_nan", False, str(e))
    same = run("scaling", "--json", "--queries", "50", "--no-train").stdout == run("scaling", "--json", "--queries", "50", "--no-train").stdout
    report("scaling_deterministic", same, "two runs differ")


def test_scaling_few_queries_memory():
    """attn_scaling_measure holds the keys of 16 queries at a time, and held
    room for 16 also when asked for fewer: one query of d = 65536 against 64
    keys (32 MiB of keys) took 512 MiB and failed under a 256 MiB limit."""
    with open(ATTN, "rb") as f:
        if b"__asan_init" in f.read():
            print("skip scaling_few_queries_memory: an ASan build cannot run under an address-space limit")
            return
    r = subprocess.run([ATTN, "scaling", "--dims", "65536", "--queries", "1", "--keys", "64", "--no-train", "--json"],
                       capture_output=True, text=True, cwd=TMP, env=dict(os.environ, ATTN_NUM_THREADS="1"),
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (256 << 20,) * 2))
    row = json.loads(r.stdout)["rows"][0] if r.returncode == 0 else {}
    report("scaling_few_queries_memory", row.get("queries") == 1 and row.get("keys") == 64 and
           row.get("spread_raw", 0) > 0, r.stderr)


def test_learner_text():
    """What a learner reads: masked cells, repeated words, flat rows, colours."""
    r = run("explain", "--causal", "--step", "weights", DEFAULT)
    rows = [l.split() for l in r.stdout.splitlines()
            if len(l.split()) > 1 and l.split()[0] in ("the₁", "cat", "mat") and l.split()[1][0].isdigit()]
    report("causal_masked_cells_are_dots", r.returncode == 0 and len(rows) == 3 and rows[0][2:7] == ["·"] * 5 and
           rows[1][3:7] == ["·"] * 4 and "·" not in rows[2] and "masked" in r.stdout, r.stdout)
    r = run("explain", "--causal", "--step", "scaled", DEFAULT)
    report("causal_scaled_shows_minus_inf", r.returncode == 0 and sum(l.split().count("-inf") for l in r.stdout.splitlines()[3:]) == 15, r.stdout)
    # The division's reason is a statement about random queries and keys: the
    # wired head's scaled scores have a spread of about 0.55, not 1, so the text
    # must not say that this head's spread comes out near 1.
    j = explain_json(DEFAULT)
    spread = float(np.std(np.array(j["scores"]) / 2))
    r = run("explain", "--step", "scaled", DEFAULT)
    said = flat(r.stdout)
    report("scaled_step_reason_is_for_random_scores", r.returncode == 0 and abs(spread - 1) > 0.3 and
           "for random queries and keys" in said and "grows like sqrt(d_k)" in said and "not random" in said,
           f"{spread} {said[:400]}")
    # A head not wired by hand is not called wired: its scores' spread is its weights' and words'.
    for extra in (("--random-head",), ("--trained",)):
        r = run("explain", "--step", "scaled", *extra, DEFAULT)
        said = flat(r.stdout)
        report(f"scaled_step_reason_not_wired_{extra[0][2:]}", r.returncode == 0 and "for random queries and keys" in said
               and "wired" not in said and "from these weights and these words" in said, said[:600])
    r = run("explain", "--step", "summary", DEFAULT)
    lines = {l.split()[0]: l for l in r.stdout.splitlines() if "->" in l}
    report("repeated_words_labelled_by_position", set(lines) == {"the₁", "the₂", "cat", "sat", "on", "mat"} and
           "the₁ 26%" in lines["cat"] and "the₂ 26%" in lines["cat"], r.stdout)
    report("nearly_uniform_rows_marked", "nearly uniform" in lines["the₁"] and "nearly uniform" not in lines["sat"],
           r.stdout)
    j = explain_json("the cat the")
    report("json_keeps_plain_words", j["tokens"] == ["the", "cat", "the"], str(j["tokens"]))
    # Colours: NO_COLOR sets the default only; the depth follows the terminal.
    env16 = {"TERM": "xterm", "COLORTERM": "", "NO_COLOR": "1"}
    r = run("explain", "--color=always", "--step", "weights", env=env16)
    report("color_always_beats_no_color", r.returncode == 0 and "\x1b[41;" in r.stdout and "colours:" in r.stdout, r.stdout[:200])
    r = run("explain", "--step", "weights", env=env16)
    report("no_color_default_off", r.returncode == 0 and "\x1b[" not in r.stdout, r.stdout[:200])
    r = run("explain", "--color", "always", "--step", "weights", env={"TERM": "xterm-256color", "COLORTERM": ""})
    report("color_256_without_truecolor", "\x1b[48;5;" in r.stdout and "\x1b[48;2;" not in r.stdout, r.stdout[:200])
    r = run("explain", "--color", "always", "--step", "x", env={"TERM": "xterm-256color", "COLORTERM": "truecolor"})
    report("color_truecolor_with_colorterm", "\x1b[48;2;" in r.stdout and "largest |value|" in r.stdout, r.stdout[:200])


def test_tied_and_lookup():
    """--tied: W_K = W_Q, so the scores are symmetric (sat -> cat equals cat -> sat);
    the tokens step shows each word's id, its row of the embedding table."""
    j = explain_json("--tied")
    sc = mat(j, "scores")
    report("tied_scores_symmetric", j["W_K"] == j["W_Q"] and np.array_equal(sc, sc.T) and
           "tied" in j["head"] and sc[2, 1] == sc[1, 2], j["head"])
    plain = mat(explain_json(), "scores")
    report("untied_scores_one_way", plain[2, 1] > 1.5 and abs(plain[1, 2]) < 0.1, str(plain[1:3, 1:3]))
    # The head keeps its own name: a tied trained or word-order head was
    # called "custom, tied", the name of weights read from files.
    for extra, name in ((("--trained",), "trained"), (("--positions", "rope"), "wired for word order"),
                        (("--random-head",), "random"), ((), "wired")):
        head = explain_json("--tied", *extra)["head"]
        report(f"tied_head_named_{name.replace(' ', '_')}", head.startswith(name) and head.endswith(", tied"), head)
    expect_error("tied_needs_projections", ["explain", "--tied", "--mode", "average"], 2, r"--tied .* no projections")
    # --tied with weights of one's own: --wk was read, then replaced by W_Q
    # without a word (the scores came out symmetric whatever it held).
    np.save(os.path.join(TMP, "w84t.npy"), np.ones((8, 4)))
    expect_error("tied_with_wk_refused", ["explain", "--wq", "w84t.npy", "--wk", "w84t.npy", "--wv", "w84t.npy", "--tied"],
                 2, r"^attn: error: --tied uses W_Q as W_K: --wk w84t\.npy would go unused")
    r = run("explain", "--step", "tokens", "my dog chased a ball")
    ids = [attn_ids(w) for w in "my dog chased a ball".split()]
    report("tokens_show_vocabulary_ids", ("ids: " + " ".join(map(str, ids))) in r.stdout and "embedding table" in r.stdout,
           r.stdout)


def test_modes_without_projections():
    """--mode dot and average have no W_Q, W_K or W_V: a step that shows one
    printed nothing and exited 0; options that choose them (--random-head,
    --wq/--wk/--wv) were dropped without a word, as --tied is not."""
    np.save(os.path.join(TMP, "w84m.npy"), np.ones((8, 4)))
    for mode in ("dot", "average"):
        for step in ("wq", "wk", "wv"):
            expect_error(f"mode_{mode}_step_{step}_refused", ["explain", "--mode", mode, "--step", step], 2,
                         rf"--step {step}: --mode {mode} has no projections")
        expect_error(f"mode_{mode}_random_head_refused", ["explain", "--mode", mode, "--random-head"], 2,
                     rf"--random-head .*, and --mode {mode} has no projections")
        expect_error(f"mode_{mode}_wq_refused", ["explain", "--mode", mode, "--wq", "w84m.npy", "--wk", "w84m.npy",
                                                 "--wv", "w84m.npy"], 2, rf"--wq, --wk and --wv .*, and --mode {mode} has no projections")
    for step in ("q", "scores", "weights"):
        r = run("explain", "--mode", "dot", "--step", step)
        report(f"mode_dot_step_{step}_prints", r.returncode == 0 and r.stdout.strip() != "", r.stderr)


def attn_ids(word):
    """A word's id: its line number in attn explain --vocab's table."""
    rows = [l.split()[0] for l in run("explain", "--vocab").stdout.splitlines()[4:] if l.strip()]
    return rows.index(word)


def test_cost():
    """--cost: measured time and memory at growing T; the T x T matrix grows as T^2,
    what the kernel keeps stops growing; each ratio says what it measures: the time
    over the row above's, against the x16 that T^2 predicts, and ns per score."""
    r = run("explain", "--cost")
    rows = [l.split() for l in r.stdout.splitlines() if re.match(r"^\s+\d+\s+[\d.]+ ms", l)]
    rows = [row for row in rows if len(row) == 9 and re.match(r"^(-|x[\d.]+)$", row[3])]  # T, time, ratio, ns, sizes
    full = [" ".join(row[5:7]) for row in rows]
    kept = [float(row[7]) * {"B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30}[row[8]] for row in rows]
    times = [float(row[1]) for row in rows]
    report("explain_cost_rows", r.returncode == 0 and [int(row[0]) for row in rows] == [64, 256, 1024, 4096, 16384] and
           full == ["16.0 KiB", "256.0 KiB", "4.0 MiB", "64.0 MiB", "1.0 GiB"] and kept[-1] <= 1.5 * kept[-2] and
           kept[-1] < 2 ** 30 / 100 and times[-1] > times[0], r.stdout)
    # Each printed ratio is this row's time over the row above's, each ns per
    # score the time over T(T+1)/2, within what the printed digits allow (times
    # to 0.0005 ms, ratios to 0.05, ns to 0.005), and the text names both.
    def ratio_ok(i):
        q = times[i] / times[i - 1]
        return abs(float(rows[i][3][1:]) - q) <= 0.05 + q * (0.0005 / times[i] + 0.0005 / times[i - 1])
    ratios_ok = len(rows) == 5 and rows[0][3] == "-" and all(ratio_ok(i) for i in range(1, 5))
    per_score_ok = len(rows) == 5 and all(
        abs(float(row[4]) - 1e6 * float(row[1]) / (int(row[0]) * (int(row[0]) + 1) / 2)) <=
        0.005 + 1e6 * 0.0005 / (int(row[0]) * (int(row[0]) + 1) / 2) for row in rows)
    report("explain_cost_ratios_say_what_they_measure", ratios_ok and per_score_ok and
           "time ratio: this row's time over the row above's" in flat(r.stdout) and
           "every ratio would be x16" in flat(r.stdout) and
           "ns per score: the time over the T(T+1)/2 scores" in flat(r.stdout), r.stdout)


def test_cost_failure_prints_nothing():
    """--cost that fails (out of memory for a row's buffers) prints nothing on
    stdout and one error line: it printed its heading first, then the error.
    The address-space limits go from one under which a small row fails to
    one under which every row runs; each run that fails must leave stdout
    empty, and one must fail. An ASan build cannot run under such a limit."""
    with open(ATTN, "rb") as f:
        if b"__asan_init" in f.read():
            print("skip explain_cost_failure_prints_nothing: an ASan build cannot run under an address-space limit")
            return
    problems, failed = [], 0
    for mib in (8, 12, 16, 20, 24, 32, 48, 64, 96, 128):
        r = subprocess.run([ATTN, "explain", "--cost"], capture_output=True, text=True,
                           env=dict(os.environ, ATTN_NUM_THREADS="1"),
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (mib << 20,) * 2))
        if r.returncode == 0:
            break
        failed += 1
        lines = r.stderr.strip().splitlines()
        if r.stdout or r.returncode != 1 or len(lines) != 1 or not lines[0].startswith("attn: error: "):
            problems.append("%d MiB: status %d, %d bytes on stdout, stderr %r" % (mib, r.returncode, len(r.stdout), r.stderr))
    report("explain_cost_failure_prints_nothing", failed > 0 and not problems,
           "; ".join(problems) or "no limit made it fail")


def test_scale_by_d_model():
    """--scale-by d_model: the notebook slip, 1/sqrt(d_model) instead of 1/sqrt(d_k), flattens the weights."""
    j, right = explain_json("--scale-by", "d_model"), explain_json()
    w, w0 = mat(j, "weights"), mat(right, "weights")
    report("scale_by_d_model", abs(j["scale"] - 1 / math.sqrt(8)) < 1e-15 and abs(right["scale"] - 0.5) < 1e-15 and
           w[2, 1] < w0[2, 1] and np.allclose(mat(j, "scaled"), mat(j, "scores") / math.sqrt(8), atol=1e-15),
           f"{j['scale']} {w[2, 1]} {w0[2, 1]}")
    r = run("explain", "--scale-by", "d_model", "--step", "scaled")
    report("scale_by_d_model_says_why", "sqrt(d_model)" in r.stdout and "wrong constant" in r.stdout, r.stdout[:200])
    # Your own projections may make d_k as wide as d_model or wider: the note says which way the constant errs.
    rng = np.random.default_rng(7)
    np.save(os.path.join(TMP, "x43.npy"), rng.standard_normal((4, 3)))
    for d_k, said, unsaid in ((5, "sharpens the weights", "too small"), (3, "d_k = d_model", "flattens")):
        np.save(os.path.join(TMP, "w3k.npy"), rng.standard_normal((3, d_k)))
        r = run("explain", "--embeddings", "x43.npy", "--wq", "w3k.npy", "--wk", "w3k.npy", "--wv", "w3k.npy",
                "--scale-by", "d_model", "--step", "scaled")
        report(f"scale_by_d_model_note_d_k_{d_k}_d_model_3", r.returncode == 0 and said in r.stdout and
               unsaid not in r.stdout, r.stdout[:400])
    expect_error("scale_by_with_no_scale", ["explain", "--scale-by", "d_model", "--no-scale"], 2, r"--scale-by")
    expect_error("scale_by_unknown", ["explain", "--scale-by", "d_v"], 2, r"d_k or d_model")


def numpy_rope(x):
    """RoPE from its definition (halves layout, base 10000, positions halved), row i at position i."""
    n, d = x.shape
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(n) / 2.0, inv)
    a, b = x[:, :d // 2], x[:, d // 2:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=1)


def test_positions():
    """--positions: sinusoidal P added to X, or RoPE on Q and K; either way the order of
    the words now changes the weights, not only where their rows are."""
    j = explain_json("--positions", "rope")
    X, WQ, WK = mat(j, "X"), mat(j, "W_Q"), mat(j, "W_K")
    report("positions_rope_turns_q_and_k", j["positions"] == "rope" and j["P"] is None and
           np.allclose(mat(j, "Q"), numpy_rope(X @ WQ), atol=1e-14) and np.allclose(mat(j, "K"), numpy_rope(X @ WK), atol=1e-14),
           str(mat(j, "Q")[:2]))
    j = explain_json("--positions", "sinusoidal")
    n, d = mat(j, "X").shape
    pos, i = np.arange(n)[:, None], np.arange(d)[None, :]
    P = np.where(i % 2 == 0, np.sin(pos / 10000 ** ((i // 2 * 2) / d)), np.cos(pos / 10000 ** ((i // 2 * 2) / d)))
    report("positions_sinusoidal_adds_p", j["positions"] == "sinusoidal" and np.allclose(mat(j, "P"), P, atol=1e-15) and
           np.allclose(mat(j, "Q"), (mat(j, "X") + P) @ mat(j, "W_Q"), atol=1e-14), str(mat(j, "P")[1]))
    order = [5, 3, 0, 2, 4, 1]  # "mat on the sat the cat" from "the cat sat on the mat"
    words = DEFAULT.split()
    shuffled = " ".join(words[o] for o in order)
    for kind in ("none", "sinusoidal", "rope"):
        w0 = mat(explain_json("--positions", kind), "weights")
        w1 = mat(explain_json("--positions", kind, shuffled), "weights")
        moved = np.allclose(w1, w0[np.ix_(order, order)], atol=1e-12)
        report(f"positions_{kind}_shuffle", moved == (kind == "none"),
               "the shuffled weights are %sa permutation" % ("" if moved else "not "))
    # With RoPE the wired head is wired for word order: the seed's sentences, as its words say.
    claims = {"the quick brown fox jumped over the lazy dog": {"quick": "fox", "brown": "fox", "lazy": "dog",
                                                                "over": "dog", "jumped": "fox"},
              "my dog chased a ball in the park": {"chased": "dog", "in": "park"},
              "the cat sat on the mat": {"sat": "cat", "on": "mat"}}
    wrong = []
    for sentence, want in claims.items():
        j = explain_json("--positions", "rope", sentence)
        w, words = mat(j, "weights"), sentence.split()
        for word, target in want.items():
            i = words.index(word)
            if words[int(np.argmax(w[i]))] != target:
                wrong.append(f"{word} -> {words[int(np.argmax(w[i]))]}")
        if sentence.startswith("the cat") and not w[2, 1] > 0.5:
            wrong.append(f"sat -> cat only {w[2, 1]:.2f}")
    report("positions_rope_seed_claims", not wrong and j["head"] == "wired for word order", ", ".join(wrong))
    expect_error("positions_need_qkv", ["explain", "--positions", "rope", "--mode", "dot"], 2, r"--positions needs")
    r = run("explain", "--positions", "rope", "--step", "q")
    report("positions_rope_text", "RoPE(X W_Q)" in r.stdout, r.stdout[:200])


def test_cross_attention():
    """--source: queries from the sentence, keys and values from the source sentence
    (a decoder reading its encoder), checked against NumPy from the JSON's own X's."""
    j = explain_json("--source", "my dog chased a ball in the park", "the cat sat")
    X, Xs = mat(j, "X"), mat(j, "X_source")
    Q, K, V = X @ mat(j, "W_Q"), Xs @ mat(j, "W_K"), Xs @ mat(j, "W_V")
    s = Q @ K.T / 2
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    report("cross_attention_numbers", j["source_tokens"] == "my dog chased a ball in the park".split() and
           mat(j, "weights").shape == (3, 8) and np.allclose(mat(j, "K"), K, atol=1e-14) and
           np.allclose(mat(j, "weights"), w, atol=1e-14) and np.allclose(mat(j, "output"), w @ V, atol=1e-14),
           str(mat(j, "weights").shape))
    r = run("explain", "--source", "my dog chased a ball", "--step", "summary", "the cat sat")
    sat = [l for l in r.stdout.splitlines() if l.strip().startswith("sat")]
    report("cross_attention_verb_finds_source_animal", len(sat) == 1 and "dog" in sat[0].split("->")[1].split()[0],
           r.stdout)
    expect_error("cross_attention_no_causal", ["explain", "--causal", "--source", "the dog", "the cat"], 2, r"--source")
    expect_error("cross_attention_bad_word", ["explain", "--source", "the zebra", "the cat"], 1, r"--source: unknown word 'zebra'")


def test_heads():
    """--heads N: each head is the single-head explanation of that head; the concat is
    their outputs side by side and the output is concat W_O."""
    sentence = "my dog chased a ball in the park"
    r = run("explain", "--heads", "3", "--json", sentence)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    heads = j.get("heads", [])
    one = explain_json(sentence)
    concat, wo = np.array(j.get("concat", [[0]]), dtype=float), np.array(j.get("W_O", [[0]]), dtype=float)
    ok = len(heads) == 3 and [h["head"] for h in heads] == ["wired", "where", "random"] and \
        np.array_equal(mat(heads[0], "weights"), mat(one, "weights")) and \
        np.array_equal(concat, np.hstack([mat(h, "output") for h in heads])) and \
        np.allclose(np.array(j["output"]), concat @ wo, atol=1e-15) and not wo[8:].any() and wo[:8].sum() == 8
    report("heads_json_is_each_head_then_concat_wo", ok, r.stderr or str([h.get("head") for h in heads]))
    where = heads[1] if len(heads) == 3 else None
    words = sentence.split()
    if where:
        w = mat(where, "weights")
        report("heads_where_head_finds_places", words[int(np.argmax(w[2]))] == "park" and words[int(np.argmax(w[5]))] == "park",
               str(w[2]))
    r = run("explain", "--heads", "2", "--step", "summary", sentence)
    report("heads_text", r.returncode == 0 and "== head 2 of 2: where?" in r.stdout and r.stdout.count("who attends") == 2,
           r.stdout[:300])
    expect_error("heads_too_many", ["explain", "--heads", "4"], 2, r"--heads '4' is not 1, 2 or 3")
    expect_error("heads_not_random", ["explain", "--heads", "2", "--random-head"], 2, r"--heads runs the toy")
    expect_error("heads_step", ["explain", "--heads", "2", "--step", "q"], 2, r"weights, summary or output")


def test_trained():
    """--trained: the head attn train learns, explained; the same weights as attn train's."""
    j = explain_json("--trained", DEFAULT)
    t = json.loads(run("train", "--json", "--steps", "1000", "--seed", "1", DEFAULT).stdout)
    w = mat(j, "weights")
    report("explain_trained_equals_attn_train", j["causal"] and "trained" in j["head"] and
           np.array(t["weights"], dtype=float).shape == w.shape and
           np.allclose(w, np.array(t["weights"], dtype=float), atol=1e-14) and w[2, 1] > 0.9, str(w[2]))
    expect_error("explain_trained_one_head", ["explain", "--trained", "--heads", "2"], 2, r"--trained")


def test_additive():
    """--score additive: v . tanh(W1 q + W2 k) with W1 = W2 = I, v = 1 on the head's own Q
    and K (checked with NumPy from the JSON's Q and K), and the cost measured."""
    r = run("explain", "--score", "additive", DEFAULT)
    j = explain_json(DEFAULT)
    Q, K = mat(j, "Q"), mat(j, "K")
    s = np.tanh(Q[:, None, :] + K[None, :, :]).sum(-1)
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    rows = [l.split() for l in r.stdout.split("additive weights")[-1].splitlines()
            if len(l.split()) == 8 and re.match(r"^\d\.\d{3}$", l.split()[1])]
    shown = np.array([[float(x) for x in row[1:7]] for row in rows[:6]]) if len(rows) >= 6 else np.zeros((6, 6))
    slower = re.search(r"additive [\d.]+ ms: (\d+) times slower", flat(r.stdout))
    report("additive_scores", r.returncode == 0 and np.allclose(shown, w, atol=6e-4) and slower and int(slower.group(1)) >= 1,
           r.stdout[-400:])
    expect_error("additive_not_json", ["explain", "--score", "additive", "--json"], 2, r"--score additive")
    expect_error("score_unknown", ["explain", "--score", "cosine"], 2, r"dot or additive")


def test_width():
    """Matrices fit the terminal: cut headers, and blocks of columns when too wide."""
    fox = "the quick brown fox jumped over the lazy dog"
    r = run("explain", "--step", "x")
    widest = max(len(l) for l in r.stdout.splitlines())
    report("x_fits_80_columns_with_cut_headers", widest <= 80 and "prepos…" in r.stdout, f"{widest} columns")
    for cols in (40, 60, 100):
        r = run("explain", "--step", "weights", fox, env={"COLUMNS": str(cols)})
        lines = r.stdout.splitlines()
        blocks = [l for l in lines if l.strip().startswith("columns ")]
        cells = [l.split() for l in lines if l.split() and l.split()[0] == "fox"]
        values = [x for row in cells for x in row[1:]]
        matrix = [l for l in lines if "the₁" in l or re.search(r"\d\.\d{3}", l)]  # (the prose may wrap)
        report(f"width_{cols}_blocks_of_columns", r.returncode == 0 and max(len(l) for l in matrix) <= cols and
               (len(blocks) >= 2) == (cols < 90) and len(values) == 10, f"{len(blocks)} blocks, {values}")

    # COLUMNS 20 to 39: a block of one column, its label and the sums ran
    # to 31 columns; the labels are cut shorter and the sums get a block of
    # their own (only the "columns 1 to 1 of 9" line may run past, as
    # docs/explainer.md says).
    np.save(os.path.join(TMP, "e3n.npy"), np.eye(3))
    narrow = (("fox", [fox]), ("long_labels", ["--embeddings", "e3n.npy", "--mode", "dot",
                                               "--tokens", "extraordinarily,b,c"]))
    for name, args in narrow:
        for cols in (20, 22, 26, 30, 39):
            r = run("explain", "--step", "weights", *args, env={"COLUMNS": str(cols)})
            lines = r.stdout.splitlines()
            matrix = [l for l in lines if re.search(r"\d\.\d{3}|sum$", l)]
            long = [l for l in matrix if display_width(l) > cols]
            sums = [l for l in matrix if l.rstrip().endswith("sum")]
            report(f"width_{cols}_{name}_matrix_fits", r.returncode == 0 and matrix and not long and len(sums) == 1,
                   f"{len(long)} lines wider, e.g. {long[:1]}; {len(sums)} sum headers")

    # Labels in scripts whose characters are not one column each: CJK takes
    # two, a Devanagari vowel sign none. Counted as one column per code
    # point, every column after such a label slid out of line.
    np.save(os.path.join(TMP, "e3w.npy"), np.eye(3))
    for labels in ("猫,犬,鳥", "बैंक,नदी,river"):
        r = run("explain", "--embeddings", "e3w.npy", "--mode", "dot", "--tokens", labels, "--step", "weights")
        table = [l for l in r.stdout.splitlines() if l.endswith("sum") or re.search(r"\d\.\d{3}$", l)]
        widths = {display_width(l) for l in table}
        report(f"wide_labels_aligned_{labels.split(',')[0]}", r.returncode == 0 and len(table) == 4 and len(widths) == 1,
               f"{widths}: " + " | ".join(table))


def display_width(text):
    """The columns a terminal gives text: 2 for East Asian wide characters,
    0 for combining marks, else 1."""
    return sum(0 if unicodedata.category(c) in ("Mn", "Me", "Cf") else
               2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


# Every command whose text the terminal's width shapes: prose, matrices and tables.
FIT_COMMANDS = [
    ("explain",), ("explain", "--causal"), ("explain", "--mode", "dot"), ("explain", "--mode", "average"),
    ("explain", "--heads", "3", "my dog chased a ball in the park"), ("explain", "--positions", "sinusoidal"),
    ("explain", "--positions", "rope", "the quick brown fox jumped over the lazy dog"),
    ("explain", "--source", "my dog chased a ball in the park", "the cat sat"), ("explain", "--tied"),
    ("explain", "--scale-by", "d_model"), ("explain", "--trained"), ("explain", "--score", "additive"),
    ("explain", "--vocab"), ("explain", "--cost"), ("explain", "--kernel"),
    ("explain", "--kernel", "--ranks", "4", "the quick brown fox jumped over the lazy dog the cat sat on the mat in the park "
     "with my dog a big red ball over the box the bird saw a small hat in the garden"), ("scaling", "--queries", "100", "--dims", "4,1024"),
    ("scaling", "--variance", "--queries", "500"), ("train", "--steps", "50"), ("demo",),
    ("--help",), ("explain", "--help"), ("scaling", "--help"), ("train", "--help"), ("sdpa", "--help"),
    ("mha", "--help"), ("demo", "--help"),
    ("sdpa", "-q", "wide.npy", "-k", "wide.npy", "-v", "wide.npy"), ("sdpa", "-q", "big.npy", "-k", "big.npy", "-v", "big.npy"),
]
# The programs beside attn: the benchmark (through `attn bench`, no colours: on
# a terminal its text is its piped text), and attn-mpi, alone and under mpirun
# when it is built. Each is tested at 60 and 80 columns like the commands. The
# bench's --quick prints every section but --overhead's (5 runs of it take
# half a minute); of the modes, --layer is the quickest (2 s).
MPI = os.path.join(os.path.dirname(ATTN), "attn-mpi")
MPIRUN = ["mpirun", "-q", "--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
BENCH_COMMANDS = [("bench", "--help"), ("bench", "--quick"), ("bench", "--quick", "--layer")]
MPI_COMMANDS = [
    ("attn-mpi", [MPI, "--help"]), ("attn-mpi", [MPI, "bench", "--help"]),
    ("mpirun_attn-mpi", MPIRUN + ["-np", "2", MPI, "bench", "--quick"]),
    ("mpirun_attn-mpi", MPIRUN + ["-np", "2", MPI, "sdpa", "-q", "big.npy", "-k", "big.npy", "-v", "big.npy",
                                  "-o", "out.npy", "--stats"]),
]
ANSI = re.compile(r"\x1b\[[0-9;]*[mK]")  # colours, and a progress line's "erase the line"
BLOCK_HEADER = re.compile(r"^\s*columns \d+ to \d+ of \d+$")


def run_pty(args, cols):
    return run_pty_argv([ATTN, *args], cols)


def run_pty_argv(argv, cols):
    """The command on a real terminal (a pty) `cols` wide, COLUMNS unset, so the
    width comes from the terminal itself: its output, colours stripped."""
    import fcntl, struct, termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    e = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=TMP, env=e)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the command has closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    # The terminal turns "\n" into "\r\n"; a lone "\r" goes back over a progress
    # line (attn scaling's "measuring d = ..." on stderr), so only what follows it shows.
    text = ANSI.sub("", out.decode("utf-8", "replace").replace("\r\n", "\n"))
    return p.wait(), "\n".join(line.split("\r")[-1] for line in text.split("\n"))


def words_of(text):
    """The words of text that hold a letter (measured numbers differ from run to
    run), without the lines that only a narrow table adds."""
    return {w for line in text.splitlines() if not BLOCK_HEADER.match(line) for w in line.split()
            if re.search(r"[A-Za-z]", w) and not re.match(r"^x[\d.]+$|^[\d.]+x[,;:)]*$", w)}  # not a measured ratio, x12.5 or 1.25x


def test_terminal_width():
    """Every command's prose and tables fit the terminal's width, from COLUMNS or,
    unset, from the terminal itself (a pty): no line is wider, and no word is
    broken (every word of the narrow text is a word of the same text 10,000
    columns wide)."""
    rng = np.random.default_rng(0)  # tensors printed as NumPy does, rows continued on the next line
    np.save(os.path.join(TMP, "wide.npy"), rng.standard_normal((2, 3, 16)))
    np.save(os.path.join(TMP, "big.npy"), rng.standard_normal((40, 50)))
    runs = [([ATTN, *args], [a.strip("-") for a in args[:3]], True) for args in FIT_COMMANDS]
    if os.path.exists(os.path.join(os.path.dirname(ATTN), "attn-bench")):
        runs += [([ATTN, *args], [a.strip("-") for a in args[:3]], False) for args in BENCH_COMMANDS]
    else:
        print(f"skip fits_bench: no attn-bench beside {ATTN} (make bench)")
    if not os.path.exists(MPI):
        print(f"skip fits_attn_mpi: no {MPI} (built when mpicc exists)")
    elif not shutil.which("mpirun"):
        print("skip fits_mpirun_attn_mpi: no mpirun")
    for name, argv in MPI_COMMANDS if os.path.exists(MPI) else []:
        if name == "attn-mpi" or shutil.which("mpirun"):
            runs.append((argv, [name] + [a.strip("-") for a in argv[argv.index(MPI) + 1:][:2]], True))
    for argv, label, colours in runs:
        # The same text, wide: a terminal shows colours and their legend, a pipe does not.
        wide = {"columns": words_of(run_argv(argv, env={"COLUMNS": "10000"}).stdout)}
        wide["pty"] = words_of(run_pty_argv(argv, 10000)[1]) if colours else wide["columns"]
        for cols in (60, 80):
            for how in ("columns", "pty"):
                if how == "pty":
                    code, out = run_pty_argv(argv, cols)
                else:
                    r = run_argv(argv, env={"COLUMNS": str(cols)})
                    code, out = r.returncode, r.stdout
                long = [l for l in out.splitlines() if len(l) > cols]
                broken = sorted(words_of(out) - wide[how])
                name = "_".join(["fits", how, str(cols)] + label).replace(" ", "_").replace(".npy", "")
                report(name, code == 0 and not long and not broken and out.strip(),
                       f"exit {code}; {len(long)} lines wider than {cols}, e.g. {long[:1]}; words not in the wide "
                       f"text: {broken[:8]}")


# The teaching commands at 40 columns (a phone's terminal, a split pane), and
# their help (`attn explain --help`'s "docs/explainer.md);" ran to column 42,
# a word too long for its option's column that now starts left of it): the
# summary's heading and its "nearly uniform" rows, cross-attention's source
# line, the online softmax's states and `attn train`'s heading and loss curve
# once ran past the edge there, while 60 and 80 fit.
NARROW_COMMANDS = [
    ("explain",), ("explain", "--mode", "average"), ("explain", "--heads", "3", "my dog chased a ball in the park"),
    ("explain", "--positions", "rope", "the quick brown fox jumped over the lazy dog"),
    ("explain", "--source", "my dog chased a ball in the park", "the cat sat"), ("explain", "--kernel"),
    ("train", "--steps", "50"), ("explain", "--help"), ("scaling", "--help"), ("train", "--help"),
]


def test_terminal_width_40():
    """The teaching commands fit 40 columns too: no line wider, no word broken."""
    for args in NARROW_COMMANDS:
        wide = words_of(run(*args, env={"COLUMNS": "10000"}).stdout)
        r = run(*args, env={"COLUMNS": "40"})
        long = [l for l in r.stdout.splitlines() if len(l) > 40]
        broken = sorted(words_of(r.stdout) - wide)
        report("fits_columns_40_" + "_".join(a.strip("-") for a in args[:3]).replace(" ", "_"),
               r.returncode == 0 and not long and not broken and r.stdout.strip(),
               f"exit {r.returncode}; {len(long)} lines wider than 40, e.g. {long[:1]}; broken: {broken[:8]}")
    r = run("explain", "--mode", "average", env={"COLUMNS": "40"})
    report("fits_columns_40_nearly_uniform_keeps_its_share", flat(r.stdout).count("nearly uniform: 17% each (±5)") == 6,
           r.stdout[-400:])


def test_modes_own_words():
    """Each mode introduces itself and ends with its own formula; only qkv scales."""
    for mode, formula in (("dot", "softmax(X X^T) X"), ("average", "(1/n) sum_j x_j")):
        r = run("explain", "--mode", mode)
        report(f"mode_{mode}_states_its_formula", r.returncode == 0 and formula in flat(r.stdout) and
               "sqrt(d_k)) V" not in r.stdout and "d_k 8" not in r.stdout and "recurrent network" not in r.stdout,
               r.stdout[:300])
    r = run("explain")
    report("mode_qkv_states_scaled_formula", "softmax(Q K^T / sqrt(d_k)) V" in flat(r.stdout) and
           "recurrent network" in flat(r.stdout))


def test_closing_says_where_the_weights_came_from():
    """The closing's last sentence says where the head's weights came from: it
    said "these weights were wired by hand" after the trained head, the random
    one and weights read from files too."""
    np.save(os.path.join(TMP, "w84c.npy"), np.random.default_rng(4).standard_normal((8, 4)))
    own = ("--wq", "w84c.npy", "--wk", "w84c.npy", "--wv", "w84c.npy")
    for name, args, said in (("wired", (), "wired by hand"), ("where_rope", ("--positions", "rope"), "wired by hand"),
                             ("trained", ("--trained",), "were learned"), ("random", ("--random-head",), "are random"),
                             ("custom", own, "the ones you gave")):
        r = run("explain", *args)
        closing = flat(r.stdout.split("All of it is one line")[-1])
        report(f"closing_weights_origin_{name}", r.returncode == 0 and said in closing and
               (name in ("wired", "where_rope") or "wired by hand" not in closing), closing)


def test_closing_under_the_causal_mask():
    """Under --causal the closing does not say that shuffling only moves each
    word's output (the mask makes the outputs change: checked here on the
    JSON), nor, in mode average, that every word gets the same (1/n) blend."""
    shuffled = "mat the on sat cat the"
    a, b = explain_json("--causal", DEFAULT), explain_json("--causal", shuffled)
    moved = np.array(a["output"])[[5, 0, 3, 2, 1, 4]]
    changes = not np.allclose(np.array(b["output"]), moved)
    for mode in ("qkv", "average"):
        r = run("explain", "--causal", "--mode", mode)
        closing = flat(r.stdout.split("All of it is one line")[-1])
        report(f"closing_causal_{mode}_word_order", r.returncode == 0 and changes and "only moves with it" not in closing
               and "same blend" not in closing and "(1/n)" not in closing and
               ("causal mask sees word order" in closing if mode == "qkv" else "(1/(i+1))" in closing), closing)


def test_closing_mode_dot_self_match():
    """--mode dot's closing said "a word matches itself best"; on the six-token
    example "starts" gives "journey" more weight than itself (x_i . x_j can
    exceed |x_i|^2 when x_j is longer), so the closing must not say so."""
    six = np.array([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64], [0.22, 0.58, 0.33],
                    [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
    np.save(os.path.join(TMP, "six_dot.npy"), six)
    args = ("--embeddings", "six_dot.npy", "--mode", "dot")
    w = mat(explain_json(*args), "weights")
    r = run("explain", *args)
    closing = flat(r.stdout.split("All of it is one line")[-1])
    report("closing_mode_dot_no_self_match_claim", r.returncode == 0 and w[2].argmax() == 1 and
           "matches itself best" not in closing and "softmax(X X^T) X" in closing, closing)


def test_long_row_labels_cut_with_ellipsis():
    """A row label longer than the label column (12) is cut with "…", as a
    column label is: W_O's row "2:preposition" read "2:prepositio", and two
    labels that differ past the cut read as one."""
    r = run("explain", "--heads", "2", env={"COLUMNS": "100"})
    rows = [l.split()[0] for l in r.stdout.split("W_O: each head")[-1].split("output = concat")[0].splitlines() if re.search(r"\d\.\d{3}", l)]
    report("row_label_cut_with_ellipsis_w_o", r.returncode == 0 and "2:prepositi…" in rows and
           "2:prepositio" not in rows, str(rows))
    np.save(os.path.join(TMP, "e2l.npy"), np.eye(2))
    r = run("explain", "--embeddings", "e2l.npy", "--mode", "dot", "--tokens", "riverbank_north,riverbank_south",
            "--step", "weights")
    rows = [l.split()[0] for l in r.stdout.splitlines() if re.search(r"\d\.\d{3}$", l)]
    report("row_label_cut_with_ellipsis_tokens", r.returncode == 0 and rows == ["riverbank_n…", "riverbank_s…"], str(rows))


def test_sinusoidal_heading_counts_frequencies():
    """P's heading counts its frequencies, one per pair of columns (sin, cos):
    it said "at 4 frequencies" whatever d_model --embeddings gave."""
    rng = np.random.default_rng(5)
    for d_model, freqs in ((8, "4 frequencies"), (5, "3 frequencies"), (2, "1 frequency"), (12, "6 frequencies")):
        np.save(os.path.join(TMP, f"xp{d_model}.npy"), rng.standard_normal((3, d_model)))
        np.save(os.path.join(TMP, f"wp{d_model}.npy"), rng.standard_normal((d_model, 2)))
        w = f"wp{d_model}.npy"
        r = run("explain", "--embeddings", f"xp{d_model}.npy", "--wq", w, "--wk", w, "--wv", w, "--positions", "sinusoidal",
                "--step", "x")
        heading = [l for l in r.stdout.splitlines() if l.startswith("P: ")]
        report(f"sinusoidal_heading_{d_model}_columns", r.returncode == 0 and len(heading) == 1 and
               f"at {freqs} " in heading[0], str(heading))


def test_scaled_heading_with_d_k_1():
    """With d_k = 1 the scores are divided by sqrt(1): the scaled step says so.
    Its heading was chosen by the scale's value, 1, and said "not scaled", as
    --no-scale's does."""
    rng = np.random.default_rng(6)
    np.save(os.path.join(TMP, "x41.npy"), rng.standard_normal((4, 3)))
    np.save(os.path.join(TMP, "w31.npy"), rng.standard_normal((3, 1)))
    own = ("--embeddings", "x41.npy", "--wq", "w31.npy", "--wk", "w31.npy", "--wv", "w31.npy", "--step", "scaled")
    r = run("explain", *own)
    report("scaled_heading_d_k_1_divides_by_1", r.returncode == 0 and "Q K^T / sqrt(d_k) = Q K^T / 1 " in r.stdout and
           "not scaled" not in r.stdout, r.stdout[:200])
    r = run("explain", *own, "--no-scale")
    report("scaled_heading_no_scale_not_scaled", r.returncode == 0 and "scores, not scaled" in r.stdout, r.stdout[:200])


def test_heads_untrained_columns_numbered():
    """--heads 3: the untrained head's value columns, in the concat and W_O's
    rows, are numbered 3:v0 .. 3:v3, as its JSON's v0 .. v3; all four were
    "3:v", and which was which could not be read."""
    r = run("explain", "--heads", "3", "--step", "output", env={"COLUMNS": "200"})
    concat = r.stdout.split("concat:")[-1].split("W_O:")[0]
    header = [l.split() for l in concat.splitlines() if "1:noun" in l]
    w_o = [l.split()[0] for l in r.stdout.split("W_O: each head")[-1].split("output = concat")[0].splitlines()
           if re.search(r"\d\.\d{3}", l)]
    want = ["3:v0", "3:v1", "3:v2", "3:v3"]
    report("heads_untrained_columns_numbered", r.returncode == 0 and len(header) == 1 and header[0][-4:] == want and
           w_o[-4:] == want and explain_json("--heads", "3")["heads"][2]["value_features"] == ["v0", "v1", "v2", "v3"],
           f"{header} {w_o[-4:]}")


def test_source_ids_under_their_words():
    """With --source the tokens step's "ids:" line, the query sentence's, comes
    right after that sentence's words: it came after the source's words, and
    read as theirs."""
    r = run("explain", "--step", "tokens", "--source", "my dog chased a ball", "the cat sat")
    lines = [l.strip() for l in r.stdout.splitlines() if l.strip()]
    at = lines.index("the cat sat") if "the cat sat" in lines else -1
    want = "ids: " + " ".join(str(attn_ids(w)) for w in ("the", "cat", "sat"))
    report("source_ids_under_their_words", r.returncode == 0 and at >= 0 and at + 1 < len(lines) and
           lines[at + 1].startswith(want + " ") and lines.index("my dog chased a ball") > at + 1, "\n".join(lines))


def test_source_titled_cross_attention():
    """With --source the text's title says cross-attention: it said
    "Self-attention, step by step" over keys and values from another sentence."""
    r = run("explain", "--source", "my dog chased a ball", "the cat sat")
    plain = run("explain")
    report("source_titled_cross_attention", r.returncode == 0 and r.stdout.startswith("Cross-attention, step by step\n")
           and plain.stdout.startswith("Self-attention, step by step\n"), r.stdout[:80])


def test_closing_line_is_what_ran():
    """The closing's "All of it is one line" is the line computed: with
    --no-scale and --scale-by d_model it gave softmax(Q K^T / sqrt(d_k)) V,
    which neither computes."""
    for args, line in ((("--no-scale",), "output = softmax(Q K^T) V,"),
                       (("--scale-by", "d_model"), "output = softmax(Q K^T / sqrt(d_model)) V,"),
                       ((), "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.")):
        r = run("explain", *args)
        closing = flat(r.stdout.split("All of it is one line:")[-1])
        report(f"closing_line_{'_'.join(a.strip('-') for a in args) or 'default'}", r.returncode == 0 and
               closing.startswith(line), closing[:120])


def test_heads_tied_named():
    """--heads N --tied: each head's JSON "head" ends in ", tied", as one head's
    does (docs/explainer.md); W_K was W_Q but the names said "wired", "where"."""
    j = explain_json("--heads", "3", "--tied")
    names = [h["head"] for h in j["heads"]]
    report("heads_tied_named", names == ["wired, tied", "where, tied", "random, tied"] and
           all(h["W_K"] == h["W_Q"] for h in j["heads"]), str(names))


def test_heads_rope_first_head_wired_for_word_order():
    """--heads N --positions rope: the first head is the word-order wiring, as
    one head is under RoPE (and the page's first head): it was the plain
    wired head, turned by RoPE, whose weights differ from --positions rope's."""
    fox = "the quick brown fox jumped over the lazy dog"
    one = explain_json("--positions", "rope", fox)
    first = explain_json("--heads", "2", "--positions", "rope", fox)["heads"][0]
    report("heads_rope_first_head_wired_for_word_order", first["head"] == one["head"] == "wired for word order" and
           first["W_Q"] == one["W_Q"] and np.array_equal(mat(first, "weights"), mat(one, "weights")),
           f"{first['head']}: {mat(first, 'weights')[1]}")


def test_summary_long_labels_fit():
    """The summary cuts a long label with "…" at 12 columns, as the matrices
    do: a 40-letter --tokens label made every summary line wider than the
    terminal."""
    np.save(os.path.join(TMP, "e3s.npy"), np.eye(3))
    long = "a" * 40
    r = run("explain", "--embeddings", "e3s.npy", "--mode", "dot", "--tokens", f"{long},b,c", "--step", "summary",
            env={"COLUMNS": "60"})
    lines = [l for l in r.stdout.splitlines() if "->" in l]
    report("summary_long_labels_fit", r.returncode == 0 and len(lines) == 3 and max(display_width(l) for l in lines) <= 60
           and lines[0].startswith("   " + "a" * 11 + "… ->") and ("  " + "a" * 11 + "… 58%") in lines[0], "\n".join(lines))


def test_errors():
    # --vocab and --cost print a table of their own and take nothing beside
    # them, --color included, as their --help says
    helped = flat(run("explain", "--help").stdout)
    for table in ("--vocab", "--cost"):
        expect_error(f"{table[2:]}_alone", ["explain", table, "--color=never"], 2,
                     rf"^attn: error: {table} takes no other arguments$")
    report("vocab_and_cost_help_says_alone", "(the rows of X); alone, with no other argument" in helped and
           "16384 tokens; alone, as --vocab" in helped, helped[-800:])
    r = run("explain", "the cta sat")
    report("unknown_word_names_and_suggests", r.returncode == 1 and "unknown word 'cta'" in r.stderr and
           "did you mean 'cat'" in r.stderr and "chased" in r.stderr and len(r.stderr.splitlines()) == 1,
           r.stderr)
    for far in ("Elephant", "and", "xylophone"):
        r = run("explain", f"the {far} sat")
        report(f"far_word_{far}_lists_vocabulary_without_guess", r.returncode == 1 and f"unknown word '{far}'" in r.stderr and
               "did you mean" not in r.stderr and "chased" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr)
    # A long unknown word is shown to 40 bytes, cut where a character
    # starts: the 40th byte here is the first of an 'é', which was cut in
    # two, and the message was no longer UTF-8.
    r = subprocess.run([ATTN, "explain", "the a" + "é" * 30], capture_output=True, cwd=TMP)
    try:
        err = r.stderr.decode("utf-8")
    except UnicodeDecodeError:
        err = None
    report("unknown_long_word_cut_at_a_character", r.returncode == 1 and err is not None and
           "unknown word 'a" + "é" * 19 + "'" in err, repr(r.stderr[:120]))
    for near, want in (("dgo", "dog"), ("chasd", "chased"), ("Gardn", "garden")):
        r = run("explain", f"the {near}")
        report(f"near_word_{near}_suggests_{want}", r.returncode == 1 and f"did you mean '{want}'" in r.stderr, r.stderr)
    expect_error("json_with_step_refused", ["explain", "--json", "--step", "weights"], 2, r"--json .* --step")
    r = run("explain", "--help")
    report("help_lists_vocabulary", r.returncode == 0 and "vocabulary (30 words" in r.stdout and "garden" in r.stdout and
           "--vocab" in r.stdout, r.stdout[-300:])
    r = run("explain", "--vocab")
    rows = [l.split() for l in r.stdout.splitlines() if l.split() and l.split()[0] in ("cat", "park", "my", "quick")]
    report("vocab_prints_features", r.returncode == 0 and len(rows) == 4 and
           dict((row[0], row[1:]) for row in rows)["park"] == ["1.0", ".", ".", "0.5", "1.0", ".", ".", "."] and
           dict((row[0], row[1:]) for row in rows)["my"][-2:] == ["0.2", "1.0"], r.stdout[:400])
    expect_error("empty_sentence", ["explain", " ,.!"], 1, r"the sentence has no words")
    # An explicitly empty sentence (attn explain "$S" with S unset) is a mistake:
    # bad data, status 1, as the sentence of no words above and an empty file
    # name are (it was 2, the status of a usage error), with --kernel too.
    expect_error("explicitly_empty_sentence", ["explain", ""], 1, r"the sentence is empty")
    expect_error("blank_sentence", ["explain", "   "], 1, r"the sentence is empty")
    expect_error("empty_words", ["explain", "", ""], 1, r"the sentence is empty")
    expect_error("kernel_empty_sentence", ["explain", "--kernel", ""], 1, r"the sentence is empty")
    expect_error("json_empty_sentence", ["explain", "--json", " "], 1, r"the sentence is empty")
    expect_error("too_long_sentence", ["explain", " ".join(["the cat"] * 40)], 1, r"more than 64 words")
    expect_error("bad_step", ["explain", "--step", "everything"], 2, r"unknown --step 'everything'")
    expect_error("bad_mode", ["explain", "--mode", "magic"], 2, r"--mode 'magic' is not average, dot or qkv")
    expect_error("bad_color", ["explain", "--color", "sometimes"], 2, r"--color 'sometimes' is not auto, always or never")
    expect_error("bad_option", ["explain", "--frobnicate"], 2, r"unknown argument '--frobnicate'")
    # --vocab and --cost print a table of their own: anything else given with
    # them would be silently dropped (a typo, a --json never honoured).
    expect_error("vocab_with_unknown_option", ["explain", "--vocab", "--frobnicate"], 2, r"--vocab takes no other")
    expect_error("vocab_with_json", ["explain", "--vocab", "--json"], 2, r"--vocab takes no other")
    expect_error("vocab_with_sentence", ["explain", "--vocab", "the", "cat"], 2, r"--vocab takes no other")
    expect_error("cost_with_json", ["explain", "--json", "--cost"], 2, r"--cost takes no other")
    np.save(os.path.join(TMP, "w84.npy"), np.ones((8, 4)))
    np.save(os.path.join(TMP, "w85.npy"), np.ones((8, 5)))
    np.save(os.path.join(TMP, "w34.npy"), np.ones((3, 4)))
    np.save(os.path.join(TMP, "e3.npy"), np.ones((2, 3)))
    np.save(os.path.join(TMP, "e1d.npy"), np.ones(3))
    # NaN weights were printed with "each row sums to 1" and a summary of
    # "nearly uniform" rows.
    np.save(os.path.join(TMP, "enan.npy"), np.array([[1, np.nan, 0], [0, 1, 0], [0, 0, 1.0]]))
    np.save(os.path.join(TMP, "winf.npy"), np.where(np.eye(8, 4) > 0, np.inf, 0.0))
    np.save(os.path.join(TMP, "ebig.npy"), np.array([[1e300, 1e300], [1e300, -1e300]]))
    expect_error("embeddings_nan", ["explain", "--embeddings", "enan.npy", "--mode", "dot"], 1,
                 r"X \(row 0, column 1, counting from 0\) is nan: .*finite")
    expect_error("wq_inf", ["explain", "--wq", "winf.npy", "--wk", "w84.npy", "--wv", "w84.npy"], 1,
                 r"W_Q \(row 0, column 0, counting from 0\) is inf")
    expect_error("scores_overflow", ["explain", "--embeddings", "ebig.npy", "--mode", "dot"], 1, r"overflow")
    expect_error("wq_alone", ["explain", "--wq", "w84.npy"], 2, r"--wq, --wk and --wv go together")
    expect_error("random_head_with_wq", ["explain", "--random-head", "--wq", "w84.npy", "--wk", "w84.npy",
                                         "--wv", "w84.npy"], 2, r"--random-head")
    expect_error("sentence_and_embeddings", ["explain", "--embeddings", "e3.npy", "the", "cat"], 2,
                 r"not both")
    expect_error("tokens_without_embeddings", ["explain", "--tokens", "a,b"], 2, r"--tokens labels")
    expect_error("tokens_count", ["explain", "--embeddings", "e3.npy", "--tokens", "a,b,c", "--mode", "dot"], 1,
                 r"--tokens has 3 labels but --embeddings e3\.npy has 2 rows")
    # A label is printed as given: a newline broke the tables apart, an
    # escape sequence reached the terminal, an empty label left a row unnamed.
    for label, name, why in (("a\nb,c", "newline", r"label 1 has a control character \(0x0a\)"),
                             ("\x1b[31mred,c", "escape", r"label 1 has a control character \(0x1b\)"),
                             ("b,\u009b31mred", "c1_escape", r"label 2 has a control character \(U\+009B\)"),
                             ("b,\udc9b31mred", "not_utf8", r"label 2 is not UTF-8 \(the byte 0x9b\)"),
                             ("a,", "empty", r"label 2 is empty"), (",b", "empty_first", r"label 1 is empty")):
        expect_error(f"tokens_label_{name}", ["explain", "--embeddings", "e3.npy", "--mode", "dot", "--tokens", label],
                     2, rf"--tokens: {why}")
    r = run("explain", "--embeddings", "e3.npy", "--mode", "dot", "--tokens", "bank,rivière", "--step", "weights")
    report("tokens_unicode_label_kept", r.returncode == 0 and "rivière" in r.stdout, r.stderr)
    # A weight whose columns, not rows, match X's width is an nn.Linear .weight
    # saved as it is: the error says to transpose it; other widths do not.
    for n, shape in (("w23", (2, 3)), ("w25", (2, 5)), ("w32", (3, 2))):
        np.save(os.path.join(TMP, n + ".npy"), np.ones(shape))
    expect_error("wq_transposed_hint", ["explain", "--embeddings", "e3.npy", "--wq", "w23.npy", "--wk", "w32.npy",
                                        "--wv", "w32.npy"], 1,
                 r"--wq w23\.npy has 2 rows but X has d_model = 3 columns \(transposed\? a torch nn\.Linear's "
                 r"\.weight is \(d_out, d_in\): save \.weight\.T\)$")
    expect_error("wq_other_width_no_hint", ["explain", "--embeddings", "e3.npy", "--wq", "w25.npy", "--wk", "w32.npy",
                                            "--wv", "w32.npy"], 1, r"--wq w25\.npy has 2 rows but X has d_model = 3 columns$")
    expect_error("embeddings_width_needs_w", ["explain", "--embeddings", "e3.npy"], 1,
                 r"d_model = 3, but the toy's weights need 8")
    expect_error("embeddings_not_2d", ["explain", "--embeddings", "e1d.npy"], 1, r"need a 2-D float array")
    expect_error("embeddings_missing", ["explain", "--embeddings", "nope.npy"], 1, r"cannot open nope\.npy")
    expect_error("embeddings_name_empty", ["explain", "--embeddings", ""], 1, r"--embeddings: the input file name is empty$")
    expect_error("wq_name_empty", ["explain", "--wq", "", "--wk", "w84.npy", "--wv", "w84.npy"], 1,
                 r"--wq: the input file name is empty$")
    expect_error("w_rows_mismatch", ["explain", "--wq", "w34.npy", "--wk", "w84.npy", "--wv", "w84.npy"], 1,
                 r"--wq w34\.npy has 3 rows but X has d_model = 8")
    expect_error("wq_wk_cols", ["explain", "--wq", "w84.npy", "--wk", "w85.npy", "--wv", "w84.npy"], 1,
                 r"--wq has d_k = 4 columns but --wk has 5")
    expect_error("train_bad_dk", ["train", "--dk", "0"], 2, r"--dk '0' is not a whole number from 1 to 1024")
    expect_error("train_bad_steps", ["train", "--steps", "ten"], 2, r"--steps 'ten'")
    expect_error("train_bad_lr", ["train", "--lr", "0"], 2, r"--lr '0' is not a number in \(0, 10\]")
    expect_error("train_bad_seed", ["train", "--seed", "x"], 2, r"--seed 'x'")
    expect_error("train_two_sentences", ["train", "the", "cat"], 2, r"one sentence only")
    # The quoted suggestion holds every word given, not only the first two.
    expect_error("train_words_quoted_whole", ["train", "the", "cat", "--steps", "2", "sat", "on"], 2,
                 r'quote it: attn train "the cat sat on"$')
    expect_error("train_unknown_word", ["train", "--steps", "2", "the cta sat"], 1, r"'cta'.*cat")
    expect_error("train_svg_missing_dir", ["train", "--steps", "2", "--svg", "no/dir/x.svg"], 1,
                 r"cannot create no/dir/x\.svg")
    r = run("scaling", "--queries", "1", "--keys", "1", "--dims", "4", "--no-train")
    report("scaling_one_query_one_key_singular", r.returncode == 0 and
           "1 random query, each against its own 1 random key (seed 0)" in flat(r.stdout), r.stdout[:200])
    expect_error("scaling_bad_dims", ["scaling", "--dims", "16,abc"], 2, r"--dims '16,abc' is not a list of whole numbers from 1 to 1048576 \(size 2 is not\)")
    expect_error("scaling_zero_queries", ["scaling", "--queries", "0"], 2, r"--queries '0'")
    expect_error("scaling_keys_with_variance", ["scaling", "--variance", "--keys", "3"], 2, r"pairs")
    # --no-train with --variance, which trains nothing: it was taken and ignored.
    expect_error("scaling_no_train_with_variance", ["scaling", "--variance", "--no-train"], 2,
                 r"^attn: error: --variance measures pairs and trains nothing; --no-train does not apply$")
    # One pair has no spread: its std printed 0.00 and was said to be near sqrt(d).
    expect_error("scaling_variance_one_pair", ["scaling", "--variance", "--queries", "1"], 2,
                 r"--variance needs at least 2 pairs")
    expect_error("scaling_bad_seed", ["scaling", "--seed", "-4"], 2, r"--seed '-4'")
    expect_error("scaling_svg_missing_dir", ["scaling", "--queries", "10", "--svg", "no/dir/x.svg"], 1,
                 r"cannot create no/dir/x\.svg")
    # The report on stdout to a full disk (or a pipe whose reader is gone):
    # the run failed, but the SVG had been renamed into place before the
    # report went out. Now the report goes out first and nothing is left.
    for name, args in (("train", ["train", "--steps", "2", "--svg", "lost.svg"]),
                       ("scaling", ["scaling", "--queries", "10", "--dims", "4", "--no-train", "--svg", "lost.svg"]),
                       ("scaling_json", ["scaling", "--queries", "10", "--dims", "4", "--no-train", "--json", "--svg",
                                         "lost.svg"])):
        for f in os.listdir(TMP):
            if "lost.svg" in f:
                os.remove(os.path.join(TMP, f))
        with open("/dev/full", "w") as full:
            r = subprocess.run([ATTN, *args], stdout=full, stderr=subprocess.PIPE, text=True, cwd=TMP)
        left = [f for f in os.listdir(TMP) if "lost.svg" in f]
        report(f"{name}_report_on_full_disk_leaves_no_svg", r.returncode == 1 and not left and
               r.stderr == "attn: error: cannot write to standard output: No space left on device\n",
               f"exit {r.returncode}, {r.stderr!r}, left {left}")
        for f in left:
            os.remove(os.path.join(TMP, f))
        rc = status_on_closed_pipe([ATTN, *args], TMP)  # the reader gone before the run starts
        left = [f for f in os.listdir(TMP) if "lost.svg" in f]
        report(f"{name}_report_on_closed_pipe_leaves_no_svg", rc == -signal.SIGPIPE and not left,
               f"exit {rc}, left {left}")


def kernel_json(*args):
    r = run("explain", "--kernel", "--json", *args)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def logsumexp(x):
    m = np.max(x)
    return m + math.log(np.sum(np.exp(x - m)))


def torch_attention(Q, K, V, causal=False):
    """PyTorch 1.13's float64 attention, written out (it has no
    scaled_dot_product_attention)."""
    import torch
    q, k, v = torch.tensor(Q), torch.tensor(K), torch.tensor(V)
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape, dtype=torch.bool).triu(1), -math.inf)
    return (torch.softmax(s, -1) @ v).numpy()


def test_kernel():
    """attn explain --kernel: every step's numbers against NumPy and PyTorch
    float64, computed from the first part's own Q, K and V."""
    import torch
    for sentence, block, workers, ranks in ((DEFAULT, 2, 2, 3), ("my dog chased a ball in the park", 3, 3, 4),
                                            ("the quick brown fox jumped over the lazy dog", 2, 4, 2),
                                            # 16 words: a full last page, which an append leaves shared
                                            ("the quick brown fox jumped over the lazy dog the cat sat on the mat in",
                                             3, 2, 4)):
        tag = "_".join(sentence.split()[:3]) + f"_b{block}"
        k = kernel_json("--block", str(block), "--workers", str(workers), "--ranks", str(ranks), sentence)
        e = explain_json(sentence)
        n = len(e["tokens"])
        Q, K, V = mat(e, "Q"), mat(e, "K"), mat(e, "V")
        scale = 1 / math.sqrt(Q.shape[1])
        S = Q @ K.T * scale
        full = softmax_rows(S) @ V
        causal = torch_attention(Q, K, V, causal=True)
        report(f"kernel_{tag}_same_head", np.array_equal(mat(k, "Q"), Q) and np.array_equal(mat(k, "K"), K) and
               np.array_equal(mat(k, "V"), V) and k["tokens"] == e["tokens"])
        # 1: cost
        c = k["cost"]
        ok = all(sb == 4 * T * T for T, sb in zip(c["T"], c["score_bytes"])) and c["T"][0] == 64 and \
            c["T"][-1] == 65536 and all(0 < w < 2 ** 20 for w in c["workspace_bytes"]) and \
            c["score_bytes"][-1] > 1000 * c["workspace_bytes"][-1]
        report(f"kernel_{tag}_cost", ok, str(c))
        # 2: tiles
        report(f"kernel_{tag}_tiles_equal_scores", np.abs(np.array(k["tiles"]["scores"]) - S).max() < 1e-12)
        # 3: online softmax, block by block, against NumPy's running state
        o, r = k["online"], k["row"]
        nb = -(-n // block)
        m_prev, problems = None, []
        for b in range(nb):
            seen = S[r, :min(n, (b + 1) * block)]
            blk = S[r, b * block:min(n, (b + 1) * block)]
            m = seen.max()
            lse = logsumexp(seen)
            out = np.exp(seen - lse) @ V[:len(seen)]
            checks = {"m": (o["m"][b], m), "l": (o["l"][b], np.exp(seen - m).sum()), "lse": (o["lse"][b], lse),
                      "block_lse": (o["block_lse"][b], logsumexp(blk)),
                      "rescale": (o["rescale"][b], 1.0 if b == 0 else math.exp(m_prev - m))}
            for name, (got, want) in checks.items():
                if abs(got - want) > 1e-12 * max(1, abs(want)):
                    problems.append(f"block {b} {name} {got} != {want}")
            if np.abs(np.array(o["out"][b]) - out).max() > 1e-12 or \
                    np.abs(np.array(o["acc"][b]) - np.exp(seen - m).sum() * out).max() > 1e-12:
                problems.append(f"block {b} out/acc")
            m_prev = m
        want_row = max(range(n), key=lambda i: (int(np.argmax(S[i])) // block, -i))  # its maximum comes last
        report(f"kernel_{tag}_online_states", not problems and r == want_row, f"{problems[:3]}, row {r} vs {want_row}")
        torch_row = torch_attention(Q[r:r + 1], K, V)[0]
        report(f"kernel_{tag}_online_last_state_is_full_row",
               np.abs(np.array(o["out"][-1]) - torch_row).max() < 1e-12 and
               np.abs(np.array(o["out"][-1]) - np.array(e["output"][r])).max() < 1e-12 and
               np.abs(np.array(o["weights"]) - np.array(e["weights"][r])).max() < 1e-12)
        # 4: causal blocks
        kinds = [0 if bj * block > min(n, (bi + 1) * block) - 1 else 2 if min(n, (bj + 1) * block) - 1 <= bi * block
                 else 1 for bi in range(nb) for bj in range(nb)]
        cz = k["causal"]
        computed = sum((min(n, (bi + 1) * block) - bi * block) * (min(n, (bj + 1) * block) - bj * block)
                       for bi in range(nb) for bj in range(nb) if kinds[bi * nb + bj])
        report(f"kernel_{tag}_causal_blocks", cz["kind"] == kinds and cz["blocks_skipped"] == kinds.count(0) and
               cz["scores_computed"] == computed and cz["scores_all"] == n * n, f"{cz} vs {kinds}")
        # 5: KV cache rows equal the causal rows
        ca = k["cache"]
        report(f"kernel_{tag}_cache_rows_equal_causal", np.abs(np.array(ca["output"]) - causal).max() < 1e-12 and
               ca["lengths_ok"] and np.abs(mat(k, "causal_output") - causal).max() < 1e-12)
        g = ca["gqa"]
        report(f"kernel_{tag}_gqa_bytes", g["bytes_grouped"] >= 4096 * 8 * 128 * 2 * 2 and
               abs(g["bytes_one_kv_head_per_query_head"] / g["bytes_grouped"] - 4) < 0.01, str(g))
        # 6: split-KV
        sp = k["split"]
        b = sp["bounds"]
        ok = b[0] == 0 and b[-1] == n and len(b) == min(workers, n) + 1
        for p in range(len(b) - 1):
            part = S[n - 1, b[p]:b[p + 1]]
            ok &= abs(sp["lse"][p] - logsumexp(part)) < 1e-12
            ok &= np.abs(np.array(sp["out"][p]) - softmax_rows(part[None])[0] @ V[b[p]:b[p + 1]]).max() < 1e-12
        report(f"kernel_{tag}_split_merged_equals_row", ok and
               np.abs(np.array(sp["merged"]) - full[n - 1]).max() < 1e-12 and
               abs(sp["merged_lse"] - logsumexp(S[n - 1])) < 1e-12, str(sp)[:300])
        # 7: pages: fork shares every page, an append copies only a partly filled last page
        pg = k["pages"]
        ev = pg["events"]
        pages = -(-n // 16)
        shared_last = n % 16 != 0
        ok = ev[0]["lengths"] == [n, 0] and len(ev[0]["tables"][0]) == pages
        ok &= ev[1]["tables"][1] == ev[1]["tables"][0] and all(ev[1]["refs"][p] == 2 for p in ev[1]["tables"][0])
        ok &= ev[2]["lengths"] == [n, n + 1] and ev[2]["tables"][1][:pages - 1] == ev[0]["tables"][0][:pages - 1]
        ok &= (ev[2]["tables"][1][pages - 1] != ev[0]["tables"][0][pages - 1]) == shared_last
        ok &= ev[3]["lengths"] == [n + 1, n + 1] and ev[3]["tables"][0][:pages] == ev[0]["tables"][0][:pages]
        ok &= ev[3]["free"] == 12 - pages - (1 if shared_last else 2)
        # the new position (the first word again) attends over n + 1 keys: f32 pages against NumPy f64
        K1, V1 = np.vstack([K, K[:1]]), np.vstack([V, V[:1]])
        want = softmax_rows((Q[:1] @ K1.T) * scale) @ V1
        ok &= np.abs(np.array(pg["out"]) - want).max() < 1e-6 and np.abs(np.array(pg["reference"]) - want).max() < 1e-6
        report(f"kernel_{tag}_pages_fork_and_copy", ok, json.dumps(ev)[:400])
        # 8: ring: after step s rank r has merged shards r, r-1, ..., r-s
        rg = k["ring"]
        R, rb = rg["ranks"], rg["bounds"]
        ok = R == min(ranks, n)
        for s_ in range(R):
            for r_ in range(R):
                keys = [j for sh in range(s_ + 1) for j in range(rb[(r_ - sh) % R], rb[(r_ - sh) % R + 1])]
                for i in range(rb[r_], rb[r_ + 1]):
                    sc = S[i, keys]
                    ok &= abs(rg["steps"][s_]["lse"][i] - logsumexp(sc)) < 1e-12
                    ok &= np.abs(np.array(rg["steps"][s_]["out"][i]) - softmax_rows(sc[None])[0] @ V[keys]).max() < 1e-12
        torch_full = torch_attention(Q, K, V)
        report(f"kernel_{tag}_ring_equals_single_process",
               ok and np.abs(np.array(rg["steps"][-1]["out"]) - torch_full).max() < 1e-12)
        # 9: the gradient of row r for the loss sum(out[r]), by PyTorch autograd
        gr = k["gradient"]
        q = torch.tensor(Q[r:r + 1], requires_grad=True)
        s_t = (q @ torch.tensor(K).T) * scale
        s_t.retain_grad()
        out = torch.softmax(s_t, -1) @ torch.tensor(V)
        out.sum().backward()
        P = softmax_rows(S[r:r + 1])[0]
        ok = np.abs(np.array(gr["P"]) - P).max() < 1e-12 and abs(gr["D"] - full[r].sum()) < 1e-12
        ok &= np.abs(np.array(gr["dP"]) - V.sum(axis=1)).max() < 1e-12
        ok &= np.abs(np.array(gr["dS"]) - s_t.grad.numpy()[0]).max() < 1e-12
        ok &= np.abs(np.array(gr["dS_library"]) - s_t.grad.numpy()[0]).max() < 1e-12
        ok &= np.abs(np.array(gr["dq"]) - q.grad.numpy()[0]).max() < 1e-12
        sat = gr["saturation"]
        for f, top, norm in zip(sat["factor"], sat["top_weight"], sat["dS_norm"]):
            Pf = softmax_rows(f * S[r:r + 1])[0]
            dP = V.sum(axis=1)
            dS = Pf * (dP - Pf @ dP)
            ok &= abs(top - Pf.max()) < 1e-12 and abs(norm - np.linalg.norm(dS)) < 1e-12
        report(f"kernel_{tag}_gradient", ok and sat["factor"] == [1, 2, 4, 8], json.dumps(gr)[:300])
    # One step's JSON holds that step only; the text shows the steps asked for.
    one = kernel_json("--step", "online")
    report("kernel_json_one_step", "online" in one and "ring" not in one and "cost" not in one and "Q" in one)
    r = run("explain", "--kernel", "--color=never")
    heads = [l for l in r.stdout.splitlines() if re.match(r"^\d\. ", l)]
    report("kernel_text_nine_steps", r.returncode == 0 and len(heads) == 9 and "ring attention" in r.stdout and
           "attn_sdpa_merge" in r.stdout, heads)
    r = run("explain", "--kernel", "--step", "cache", "--color=never")
    report("kernel_text_one_step", r.returncode == 0 and r.stdout.lstrip().startswith("5. Decoding with a KV cache") and
           not re.search(r"^\d\. ", r.stdout.lstrip()[3:], re.M), r.stdout[:200])
    expect_error("kernel_bad_step", ["explain", "--kernel", "--step", "tokens"], 2,
                 r"unknown --step 'tokens' with --kernel; steps: cost tiles online")
    expect_error("kernel_bad_step_json", ["explain", "--kernel", "--json", "--step", "warp"], 2, r"unknown --step 'warp'")
    expect_error("kernel_with_causal", ["explain", "--kernel", "--causal"], 2, r"--kernel explains the toy's wired head")
    expect_error("kernel_bad_block", ["explain", "--kernel", "--block", "9"], 2, r"--block '9' is not a whole number from 1 to 8")
    expect_error("kernel_block_alone", ["explain", "--block", "3"], 2, r"--block, --workers and --ranks go with --kernel")
    expect_error("kernel_unknown_word", ["explain", "--kernel", "the cta"], 1, r"unknown word 'cta'")


def json_keys(value, keys):
    """Every key of every object in a parsed JSON value, added to keys."""
    if isinstance(value, dict):
        for k, v in value.items():
            keys.add(k)
            json_keys(v, keys)
    elif isinstance(value, list):
        for v in value:
            json_keys(v, keys)
    return keys


def test_json_keys_documented():
    """Every key the commands' --json writes is named in docs/explainer.md
    (as `key` or "key"): scaling's "training" rows and the kernel walk's
    cost, cache.gqa, pages and gradient.saturation keys were written but
    never described."""
    doc = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "explainer.md"),
               encoding="utf-8").read()
    named = set(re.findall(r'[`"]([A-Za-z_][A-Za-z0-9_]*)[`"]', doc))
    for args in (["explain"], ["explain", "--heads", "3"], ["explain", "--source", "a dog", "--positions", "rope"],
                 ["explain", "--positions", "sinusoidal", "--causal"], ["explain", "--kernel"],
                 ["scaling", "--dims", "4", "--queries", "10"], ["scaling", "--variance", "--dims", "4"],
                 ["train", "--steps", "2"]):
        r = run(*args, "--json")
        if r.returncode != 0:
            report("json_keys_documented_" + "_".join(a.strip("-") for a in args[:2]), False, r.stderr)
            continue
        missing = sorted(json_keys(json.loads(r.stdout), set()) - named)
        report("json_keys_documented_" + "_".join(a.strip("-").replace(" ", "_") for a in args[:2]), not missing,
               f"attn {' '.join(args)} --json writes {missing}, which docs/explainer.md does not name")


    # The "head" key's values: the table listed four, the command writes more.
    np.save(os.path.join(TMP, "heads_x.npy"), np.eye(3))
    np.save(os.path.join(TMP, "heads_w.npy"), np.eye(3)[:, :2])
    heads = set()
    for args in ([], ["--random-head"], ["--positions", "rope"], ["--tied"], ["--trained"], ["--mode", "dot"],
                 ["--embeddings", "heads_x.npy", "--wq", "heads_w.npy", "--wk", "heads_w.npy", "--wv", "heads_w.npy"]):
        heads.add(explain_json(*args)["head"])
    heads |= {h["head"] for h in explain_json("--heads", "3")["heads"]}
    missing = sorted(h for h in heads if f'`"{h}"`' not in doc)
    report("json_head_values_documented", not missing, f"docs/explainer.md does not list head {missing}")


def main():
    test_story()
    test_patterns()
    test_rows_and_numpy()
    test_api_agreement()
    test_random_head_prng()
    test_permutation()
    test_worked_examples()
    test_text_output()
    test_learner_text()
    test_modes_own_words()
    test_closing_says_where_the_weights_came_from()
    test_closing_under_the_causal_mask()
    test_closing_mode_dot_self_match()
    test_long_row_labels_cut_with_ellipsis()
    test_sinusoidal_heading_counts_frequencies()
    test_scaled_heading_with_d_k_1()
    test_heads_untrained_columns_numbered()
    test_source_ids_under_their_words()
    test_source_titled_cross_attention()
    test_closing_line_is_what_ran()
    test_heads_tied_named()
    test_heads_rope_first_head_wired_for_word_order()
    test_summary_long_labels_fit()
    test_width()
    test_terminal_width()
    test_terminal_width_40()
    test_tied_and_lookup()
    test_modes_without_projections()
    test_cost()
    test_cost_failure_prints_nothing()
    test_scale_by_d_model()
    test_positions()
    test_cross_attention()
    test_heads()
    test_trained()
    test_additive()
    test_kernel()
    test_scaling()
    test_scaling_few_queries_memory()
    test_json_keys_documented()
    test_errors()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
