"""attn.teach -- the toy model and the explainer, from the library itself.

    e = attn.teach.explain("the cat sat on the mat")
    e["weights"]          # every matrix, with the keys of `attn explain --json`
    e                     # in Jupyter: each step as a heatmap (inline SVG)
    t = attn.teach.scaling()   # why divide by sqrt(d_k): the table, and t.plot()
"""
import ctypes
import html
import json

import numpy as np

from . import _core
from ._lib import LIB, SCALING_BINS, Error, ScalingRow, ToyExplainOptions, default

__all__ = ["explain", "Explanation", "scaling", "ScalingTable"]

HEADS = {"wired": 0, "random": 1, "where": 2, "order": 3}
MODES = {"qkv": 0, "dot": 1, "average": 2}
POSITIONS = {"none": 0, "sinusoidal": 1, "rope": 2}
MATRICES = ("X", "P", "W_Q", "W_K", "W_V", "Q", "K", "V", "scores", "scaled", "weights", "output")


def _pick(table, value, name):
    try:
        known = value in table
    except TypeError:  # unhashable (a list): "unhashable type: 'list'" named no argument
        known = False
    if not known:
        raise _core.OptionError("%s is %r: one of %s" % (name, value, ", ".join(map(repr, table))), 9)
    return table[value]


def _flag(x, name):
    """x as a bool; a string is refused: causal="false" or "top-left" was
    true, so causal, silently (attn.torch's is_causal refuses one too)."""
    if isinstance(x, (str, bytes)):
        raise TypeError("%s must be a bool, not %s" % (name, type(x).__name__))
    return bool(x)


def _text(s, name):
    """s as the C string the library reads. A NUL ended it there: the words
    after it were dropped silently ("the cat\\0 xyzzy" explained "the cat")."""
    if not isinstance(s, str):
        raise TypeError("%s must be a str, not %s" % (name, type(s).__name__))
    if "\0" in s:
        raise _core.TokenError("%s holds a NUL character at %d; the toy model reads words" % (name, s.index("\0")), 18)
    return s.encode()


def explain(sentence, head="wired", mode="qkv", causal=False, scale=True, positions="none", tied=False, source=None,
            scale_by="d_k"):
    """Every matrix of one attention head of the toy model on `sentence`, as
    `attn explain --json` gives them (an Explanation, a dict). head: 'wired',
    'random', 'where' or 'order'; mode: 'qkv', 'dot' (Q = K = V = X) or
    'average'; causal: each word sees only itself and the words before it;
    positions: 'none', 'sinusoidal' or 'rope'; tied: W_K = W_Q;
    source: a second sentence for the keys and values (cross-attention);
    scale=False skips the 1/sqrt(d_k); scale_by='d_model' divides by the
    model's width instead (the classic slip). As `attn explain`, an
    OptionError for what the call would not use: positions, tied or a head
    other than 'wired' with mode 'dot' or 'average' (no projections), and
    scale_by='d_model' with scale=False or those modes. An unknown word is a
    TokenError whose message suggests a close word or lists the vocabulary."""
    o = default(ToyExplainOptions)
    o.head, o.mode = _pick(HEADS, head, "head"), _pick(MODES, mode, "mode")
    o.positions = _pick(POSITIONS, positions, "positions")
    o.causal, o.tied = int(_flag(causal, "causal")), int(_flag(tied, "tied"))
    o.no_scale = int(not _flag(scale, "scale"))
    o.scale_by_d_model = int(_pick({"d_k": 0, "d_model": 1}, scale_by, "scale_by"))
    # What the library computes without them, as `attn explain` refuses the
    # same options together: the explanation came back as if they had not
    # been given (tied=True or head='random' with mode 'dot' was the plain
    # dot-product head, scale_by='d_model' with scale=False no scaling).
    if o.mode != MODES["qkv"] and (o.tied or o.head != HEADS["wired"]):
        raise _core.OptionError("%s: mode %r has no projections (q, k and v are X)"
                                % ("tied=True ties W_K to W_Q" if o.tied else "head %r picks W_Q, W_K and W_V" % head,
                                   mode), 9)
    if o.scale_by_d_model and (o.no_scale or o.mode != MODES["qkv"]):
        raise _core.OptionError("scale_by='d_model' changes the scaling: not with scale=False or mode 'dot' or "
                                "'average' (given %s)" % ("scale=False" if o.no_scale else "mode %r" % mode), 9)
    keep = _text(source, "source") if source is not None else None
    if keep is not None and not keep:
        # as `attn explain --source ""` says it: the library reads "" as no
        # source, and the sentence attended to itself, silently
        raise _core.TokenError("the source: the sentence has no words", 18)
    o.source = keep
    text = _text(sentence, "sentence")
    n, err = ctypes.c_size_t(), Error()
    _core.raise_for(LIB.attn_toy_explain_json(None, 0, ctypes.byref(n), text, ctypes.byref(o), ctypes.byref(err)), err)
    buf = ctypes.create_string_buffer(n.value + 1)
    _core.raise_for(LIB.attn_toy_explain_json(buf, n.value + 1, ctypes.byref(n), text, ctypes.byref(o),
                                              ctypes.byref(err)), err)
    return Explanation(json.loads(buf.value.decode()))


def _colour(x, lo, hi):
    """A cell's fill: white at 0, red for positive, blue for negative (the
    colours of `attn explain` in the terminal); grey for -inf."""
    if x is None:
        return "#d9d9d9"
    big = max(abs(lo), abs(hi), 1e-12)
    t = min(abs(x) / big, 1.0)
    r, g, b = (255, 255 - int(170 * t), 255 - int(170 * t)) if x >= 0 else (255 - int(200 * t), 255 - int(150 * t), 255)
    return "#%02x%02x%02x" % (r, g, b)


def position_labels(words):
    """Each word's label: the word, and when the list has it more than once,
    which occurrence it is as a subscript ("the₁", "the₂"), as `attn explain`
    prints them."""
    out = []
    for i, w in enumerate(words):
        if words.count(w) < 2:
            out.append(w)
        else:
            nth = words[:i + 1].count(w)
            out.append(w + "".join(chr(0x2080 + int(c)) for c in str(nth)))
    return out


def heatmap_svg(matrix, rows, cols, title):
    """One matrix as an SVG heatmap with its row and column labels and each
    cell's value (None is -inf, shown as a grey dot)."""
    cell, left, top = 46, 80, 48
    n_rows, n_cols = len(matrix), len(matrix[0]) if matrix else 0
    values = [x for row in matrix for x in row if x is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 0.0)
    w, h = left + cell * n_cols + 8, top + cell * n_rows + 8
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (w, h), '<text x="4" y="14" font-weight="bold">%s</text>' % html.escape(title)]
    for j, c in enumerate(cols):
        out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (left + cell * j + cell // 2, top - 8,
                                                                          html.escape(str(c))[:8]))
    for i, row in enumerate(matrix):
        y = top + cell * i
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (left - 6, y + cell // 2 + 4,
                                                                        html.escape(str(rows[i]))[:10]))
        for j, x in enumerate(row):
            xx = left + cell * j
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#fff"/>'
                       % (xx, y, cell, cell, _colour(x, lo, hi)))
            label = "·" if x is None else ("%.2f" % x)
            out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (xx + cell // 2, y + cell // 2 + 4, label))
    out.append("</svg>")
    return "".join(out)


class Explanation(dict):
    """The explainer's matrices (a dict with `attn explain --json`'s keys);
    Jupyter shows each step as a heatmap, with no network needed."""

    def matrix(self, name):
        """A matrix as a float64 array (-inf where the JSON has null)."""
        return np.array([[-np.inf if x is None else x for x in row] for row in self[name]], dtype=np.float64)

    def labels(self, source=False):
        """The row labels of the text and the pictures: the tokens (or with
        source=True the source's), repeated words numbered ("the₁", "the₂")."""
        return position_labels(self.get("source_tokens") or self["tokens"] if source else self["tokens"])

    def _labels(self, name):
        tokens, keys = self.labels(), self.labels(source=True)
        feats, vals = self["features"], self["value_features"]
        dk = ["d%d" % j for j in range(self["d_k"])]  # the columns of Q and K, named as attn explain names them
        return {"X": (tokens, feats), "P": (tokens, feats), "W_Q": (feats, dk), "W_K": (feats, dk),
                "W_V": (feats, vals), "Q": (tokens, dk), "K": (keys, dk), "V": (keys, vals),
                "scores": (tokens, keys), "scaled": (tokens, keys), "weights": (tokens, keys),
                "output": (tokens, vals)}.get(name)

    def _repr_html_(self):
        parts = ["<div><p><b>%s</b> &mdash; head %s, scale %.4g%s</p>"
                 % (html.escape(" ".join(self["tokens"])), html.escape(str(self["head"])), self["scale"],
                    ", causal" if self.get("causal") else "")]
        for name in MATRICES:
            if self.get(name) and self._labels(name):
                rows, cols = self._labels(name)
                parts.append('<div style="display:inline-block;margin:4px">%s</div>'
                             % heatmap_svg(self[name], rows, cols, name))
        parts.append("</div>")
        return "".join(parts)


class ScalingTable(list):
    """Rows of the sqrt(d_k) experiment (dicts with attn scaling's columns)."""

    def plot(self, ax=None):
        """The top weight and the softmax's gradient against d, raw and scaled
        (matplotlib, when installed). Returns the figure."""
        import matplotlib.pyplot as plt  # optional: only for the picture
        if ax is None:
            fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        else:
            fig = ax[0].figure
        d = [r["d"] for r in self]
        ax[0].plot(d, [r["top_raw"] for r in self], "o-", label="q·k")
        ax[0].plot(d, [r["top_scaled"] for r in self], "o-", label="q·k / sqrt(d)")
        ax[0].set(xscale="log", xlabel="d", ylabel="mean top weight", ylim=(0, 1.05))
        ax[1].plot(d, [r["grad_mean_raw"] for r in self], "o-", label="q·k")
        ax[1].plot(d, [r["grad_mean_scaled"] for r in self], "o-", label="q·k / sqrt(d)")
        ax[1].set(xscale="log", yscale="log", xlabel="d", ylabel="softmax gradient (mean norm)")
        ax[0].legend(), ax[1].legend()
        fig.tight_layout()
        return fig


def scaling(dims=(16, 64, 256, 1024), queries=2000, keys=64, seed=0):
    """Why divide by sqrt(d_k): for each d, random queries each against its own
    random keys, as `attn scaling` measures (the same defaults and numbers):
    the scores' spread, the mean top weight and the softmax's gradient, raw
    and scaled. Returns a ScalingTable (rows as dicts; .plot() draws it)."""
    rows = ScalingTable()
    for d in _core._listed(dims, "dims", "key sizes"):
        r, err = ScalingRow(), Error()
        # checked as Python indexes them: ctypes wrapped d = 2**32 + 16 to
        # 16, and int() made 16.7 16, each measured silently as another d
        ints = [_core._index(x, name, -2 ** 31, 2 ** 31 - 1) for x, name in ((d, "d"), (queries, "queries"),
                                                                             (keys, "keys"))]
        seed64 = _core._index(seed, "seed", -2 ** 63, 2 ** 64 - 1) & (2 ** 64 - 1)  # negative: as sdpa's seed
        _core.raise_for(LIB.attn_scaling_measure(ctypes.byref(r), *ints, seed64, ctypes.byref(err)), err)
        row = {name: getattr(r, name) for name, _ in ScalingRow._fields_ if not name.startswith("hist")}
        row["hist_raw"], row["hist_scaled"] = list(r.hist_raw), list(r.hist_scaled)
        rows.append(row)
    assert all(len(x["hist_raw"]) == SCALING_BINS for x in rows)
    return rows
