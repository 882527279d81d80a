"""make_notebook.py -- writes attention.ipynb (without outputs) from the cells below: edit here, then run
/usr/bin/python3 docs/notebooks/make_notebook.py from the source tree. Needs Debian's python3-nbformat."""
import nbformat as nbf
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
cells = [
md("""# Self-attention, step by step, on libattn

This notebook tells the story of self-attention the way the classic explanations do, from plain averaging to the head GPT uses, and runs every step on **libattn** (the C library) through its Python binding `attn`. Nothing here is a NumPy re-implementation: each number comes from the library's own kernels.

It needs the binding (`pip install --no-build-isolation ./python`, or run it from the source tree after `make`) and Debian's `python3-numpy`, `python3-torch` and `python3-matplotlib`."""),
code("""import sys, os
sys.path.insert(0, os.path.abspath(os.path.join("..", "..", "python")))  # the source tree's package, when run from docs/notebooks
import numpy as np
import attn, attn.teach, attn.torch
np.set_printoptions(precision=3, suppress=True)
print("libattn", attn.version(), "on", attn.isa())"""),
md("""## 1. Averaging, then dot products

The roughest way for a token to learn about its context is to replace its vector by the average of all of them. That mixes information, but every token ends up with the same blend:"""),
code("""avg = attn.teach.explain("the cat sat on the mat", mode="average")
A = avg.matrix("weights")
print("every weight is 1/6:", np.allclose(A, 1 / 6), "  every row of the output the same:", np.allclose(avg.matrix("output"), avg.matrix("output")[0]))"""),
md("""Attention keeps the weighted average but lets the data choose the weights. With the dot product of two embeddings as the score and a softmax over each row, the six words of *"Your journey starts with one step"* each get their own context vector. This is attention with q = k = v = X and no scaling (`scale=1`):"""),
code("""x = np.array([[0.43, 0.15, 0.89],   # Your
              [0.55, 0.87, 0.66],   # journey
              [0.57, 0.85, 0.64],   # starts
              [0.22, 0.58, 0.33],   # with
              [0.77, 0.25, 0.10],   # one
              [0.05, 0.80, 0.55]])  # step
context, weights = attn.sdpa(x, x, x, scale=1.0, return_weights=True)
print("weights of 'journey':", weights[1])
print("context of 'journey':", " ".join("%.4f" % c for c in context[1]))
print("rows sum to", weights.sum(axis=1))"""),
md("""## 2. Queries, keys and values

A token can only attend to tokens that already look like it, and there is nothing to train. The trainable version gives each token three vectors made by three learned maps: a **query** (what it looks for), a **key** (what it offers) and a **value** (what it hands over). With random, untrained projections on three tokens, *the*, *bank*, *river*, every row still sums to 1, and *river* attends almost entirely to itself:"""),
code("""rng = np.random.default_rng(0)
tokens = ["the", "bank", "river"]
X = rng.normal(size=(3, 4))
Wq, Wk, Wv = (rng.normal(size=(4, 4)) for _ in range(3))
out, w = attn.sdpa(X @ Wq, X @ Wk, X @ Wv, return_weights=True)   # scaled by 1/sqrt(4)
for t, row in zip(tokens, w):
    print(f"  {t:<6}", row, "sum", round(row.sum(), 3))
print("output shape:", out.shape)"""),
md("""## 3. The toy model: a head you can read

The library's toy model has 30 words with 8 named features and a head wired by hand: a verb's query looks for an animal, a preposition's for its object (a place or a thing). Every matrix of the head is in the explanation, and in Jupyter it draws itself as heatmaps, in the colours of `attn explain`: red for positive, blue for negative, white at 0. Q's and K's columns are d0 to d3, and a repeated word is numbered by its place (the₁, the₂), as in the terminal:"""),
code("""e = attn.teach.explain("the cat sat on the mat")
W, words = e.matrix("weights"), e.labels()
for i, t in enumerate(words):
    j = int(W[i].argmax())
    print(f"{t:>4} -> {words[j]:<4} {W[i, j]:.0%}")
e"""),
md("""## 4. The causal mask

A decoder must not look ahead: token i may attend only to tokens 0..i. The mask removes the future before the softmax, so the masked weights are exactly 0 and every row still sums to 1:"""),
code("""c = attn.teach.explain("my dog chased a ball in the park", causal=True)
Wc = c.matrix("weights")
print("above the diagonal:", np.abs(np.triu(Wc, 1)).max(), "  rows sum to", np.round(Wc.sum(axis=1), 12))"""),
md("""## 5. Why divide by √d_k

If q and k have independent entries of mean 0 and variance 1, q·k sums d_k such products, so its variance is d_k. Large scores push the softmax towards one-hot, and its gradient vanishes. One row shows it: the scores [4, 16, 12] give an almost hard pick, and dividing by √3 softens it."""),
code("""q, keys = np.array([[1.0]]), np.array([[4.0], [16.0], [12.0]])
_, raw = attn.sdpa(q, keys, np.eye(3), scale=1.0, return_weights=True)
_, scaled = attn.sdpa(q, keys, np.eye(3), scale=3 ** -0.5, return_weights=True)
print("plain softmax:     ", " ".join("%.3f" % p for p in raw[0]))
print("divided by sqrt(3):", " ".join("%.3f" % p for p in scaled[0]))
g = np.random.default_rng(1)
qs, ks = g.standard_normal((256, 8, 16)), g.standard_normal((256, 8, 16))
s = qs @ ks.transpose(0, 2, 1)
print("variance of q.k at d_k = 16: %.1f, after / 4: %.2f" % (s.var(), (s / 4).var()))"""),
md("""The library's experiment does this at every size: random queries, each against its own 64 random keys. Without the division the top word takes almost all the weight at d_k = 1024, and for the typical (median) query the softmax passes back more than ten times less gradient. At d_k = 16 and 64 the raw scores are not yet large enough to saturate the softmax, and there the raw gradient is *larger* than the scaled one (the scaled gradient is the same at every size):"""),
code("""table = attn.teach.scaling()
for r in table:
    ratio = r["grad_median_scaled"] / r["grad_median_raw"]
    compared = "raw %.0fx smaller" % ratio if ratio >= 1 else "raw %.1fx larger" % (1 / ratio)
    print("d = %4d  top weight raw %.3f, scaled %.3f;  median gradient raw %.2e, scaled %.3f (%s)"
          % (r["d"], r["top_raw"], r["top_scaled"], r["grad_median_raw"], r["grad_median_scaled"], compared))
try:
    figure = table.plot()
except ImportError:
    figure = "(install python3-matplotlib for the figure)"
figure"""),
md("""## 6. More heads, and positions

A second wired head asks *where?*: verbs and prepositions look for a place. And without positions attention cannot tell word order; with RoPE the head is wired for it, so each adjective finds its own noun and a preposition its object:"""),
code("""where = attn.teach.explain("my dog chased a ball in the park", head="where")
Ww = where.matrix("weights")
for t in ("chased", "in"):
    i = where["tokens"].index(t)
    print(f"where? {t} -> {where['tokens'][int(Ww[i].argmax())]}")
fox = attn.teach.explain("the quick brown fox jumped over the lazy dog", positions="rope")
Wf = fox.matrix("weights")
for t in ("quick", "brown", "lazy", "over"):
    i = fox["tokens"].index(t)
    print(f"with RoPE: {t} -> {fox['tokens'][int(Wf[i].argmax())]}")"""),
md("""## 7. Training a head

Trained models learn projections that make the weights meaningful. Here a head starts from random W_Q and W_K and learns, with PyTorch's autograd running through libattn's backward pass (`attn.torch`), to make *sat* attend to *cat* and *on* to *mat*. With V the identity, the attention's output rows are its weights, so the loss can ask for them directly:"""),
code("""import torch
base = attn.teach.explain("the cat sat on the mat")
X = torch.tensor(base["X"], dtype=torch.float64)
T, targets = len(base["tokens"]), {2: 1, 3: 5}           # sat -> cat, on -> mat
torch.manual_seed(0)
Wq = torch.nn.Parameter(torch.randn(8, 4, dtype=torch.float64) * 0.3)
Wk = torch.nn.Parameter(torch.randn(8, 4, dtype=torch.float64) * 0.3)
opt = torch.optim.Adam([Wq, Wk], lr=0.1)
for step in range(101):
    w = attn.torch.scaled_dot_product_attention(X @ Wq, X @ Wk, torch.eye(T, dtype=torch.float64))
    loss = -sum(torch.log(w[i, j]) for i, j in targets.items())
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 25 == 0:
        print("step %3d  loss %.3f  sat -> cat %.0f%%" % (step, loss.item(), 100 * w[2, 1].item()))"""),
md("""That is the whole story: averaging, dot products, queries, keys and values, the scale, the mask, many heads, positions and learning, each step computed by the same C code that runs at full speed in `attn sdpa`."""),
]
nb = nbf.v4.new_notebook()
nb.cells = cells
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.metadata["language_info"] = {"name": "python"}
import os
nbf.write(nb, os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention.ipynb"))
