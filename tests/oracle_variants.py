#!/usr/bin/python3
"""oracle_variants.py -- the score variants (soft-capping, ALiBi, sliding windows)
against PyTorch float64, forward and backward, on every kernel.

Each case runs `attn sdpa --softcap/--alibi-slopes/--window ... --grad-out` and
compares the output and every gradient with PyTorch autograd on the variants
written from their definitions (oracle_backward.variant_scores), with the
tolerances of oracle_backward.py. Each case also checks which kernels ran: the
fast ones (flash or decode, and the fused backward) for f32, the exact ones for
f64. ALiBi's slopes (attn_alibi_slopes, `--alibi`) are checked against the
paper's reference code, written out here.

Usage: oracle_variants.py BUILD_DIR [--seed N]. Prints "ok NAME" / "FAIL NAME: why".
"""
import math
import os
import subprocess
import sys

import numpy as np

from oracle_backward import Oracle, forced_isa_missing, reference
from torch_attention import oracle_args


def paper_slopes(n):
    """The ALiBi paper's get_slopes(n), as its authors published it."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][:n - closest]


def check_slopes(o, rng):
    """--alibi (attn_alibi_slopes) against --alibi-slopes with the paper's slopes,
    for head counts that are and are not powers of two."""
    for heads in (1, 2, 3, 5, 8, 12, 16, 20, 24, 40):
        q = rng.standard_normal((heads, 6, 4))
        k = rng.standard_normal((heads, 9, 4))
        outs = []
        for flags in (["--alibi"], ["--alibi-slopes", o.path("paper")]):
            np.save(o.path("paper"), np.asarray(paper_slopes(heads)))
            np.save(o.path("q"), q)
            np.save(o.path("k"), k)
            r = subprocess.run([o.attn, "sdpa", "-q", o.path("q"), "-k", o.path("k"), "-v", o.path("k"),
                                "--causal", "-o", o.path("out")] + flags, capture_output=True, text=True)
            if r.returncode != 0:
                outs = None
                break
            outs.append(np.load(o.path("out")))
        name = "alibi_paper_slopes_%d_heads" % heads
        if outs is None:
            o.report(name, "attn failed: " + r.stderr.strip())
        else:
            err = float(np.max(np.abs(outs[0] - outs[1])))
            o.report(name, "" if err <= 1e-13 * max(1.0, float(np.max(np.abs(outs[1])))) else "differs by %g" % err)


def random_variants(rng, H, L, S, causal):
    """Some of the three variants, at random."""
    v = {}
    if rng.random() < 0.6:
        v["softcap"] = float(rng.choice([0.5, 3.0, 20.0]))
    if rng.random() < 0.6:
        v["slopes"] = rng.random(H) * (0.5 if rng.random() < 0.5 else 3.0)
    if causal and rng.random() < 0.6:
        v["window"] = int(rng.integers(1, max(2, S + 2)))
    if rng.random() < 0.4:
        v["sinks"] = rng.standard_normal(H) * 2
    return v


def random_rope(rng, E):
    """RoPE at random, when the head has a pair to turn: (layout, base, rotary_dim, offset)."""
    if E < 2 or rng.random() >= 0.4:
        return None
    dim = 0 if E % 2 == 0 and rng.random() < 0.5 else 2 * int(rng.integers(1, E // 2 + 1))
    return (int(rng.integers(0, 2)), float(rng.choice([100.0, 10000.0])), dim, int(rng.integers(0, 50)))


def random_case(o, rng, i):
    f64 = i % 2 == 0
    dt = np.float64 if f64 else np.float32
    Hk = int(rng.integers(1, 3))
    Hq = Hk * int(rng.integers(1, 3))
    big = rng.random() < 0.4  # several blocks of the fast kernels
    L = int(rng.integers(1, 300 if big else 12))
    S = int(rng.integers(1, 700 if big else 14))
    E, Ev = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    causal = int(rng.integers(0, 3))
    f = rng.standard_normal
    q, k, v = f((Hq, L, E)).astype(dt) * 2, f((Hk, S, E)).astype(dt) * 2, f((Hk, S, Ev)).astype(dt)
    dout = f((Hq, L, Ev)).astype(dt)
    mask = None
    if rng.random() < 0.3:
        mask = (f((L, S)) * 2).astype(dt) if rng.random() < 0.5 else np.asarray(rng.random((L, S)) < 0.8)
    variants = random_variants(rng, Hq, L, S, causal)
    rope = random_rope(rng, E)
    if rope:
        variants["rope"] = rope
    o.case("random_%03d_%s_L%d_S%d_%s" % (i, dt.__name__, L, S, "_".join(sorted(variants)) or "plain"), q, k, v,
           dout, mask, causal, None, ("dq", "dk", "dv"), variants=variants)


def fixed_cases(o, rng):
    f = rng.standard_normal

    def f32(*shape):
        return f(shape).astype(np.float32)

    # Each variant alone, on the fused kernels across blocks, both alignments.
    for causal in (1, 2):
        o.case("f32_window_across_blocks_causal%d" % causal, f32(2, 600, 64), f32(2, 900, 64), f32(2, 900, 64),
               f32(2, 600, 64), causal=causal, want=("dq", "dk", "dv"), variants={"window": 300})
    o.case("f32_softcap_large_scores", f32(2, 200, 32) * 6, f32(2, 300, 32) * 6, f32(2, 300, 32),
           f32(2, 200, 32), want=("dq", "dk", "dv"), variants={"softcap": 30.0})
    o.case("f32_alibi_no_causal_L_ne_S", f32(4, 150, 48), f32(4, 400, 48), f32(4, 400, 48), f32(4, 150, 48),
           want=("dq", "dk", "dv"), variants={"slopes": np.array(paper_slopes(4))})
    # All three with GQA, a float mask and its gradient (the exact backward).
    o.case("f64_all_variants_gqa_float_mask_dmask", f((2, 4, 20, 8)), f((2, 2, 30, 8)), f((2, 2, 30, 5)),
           f((2, 4, 20, 5)), f((20, 30)), causal=2,
           variants={"softcap": 2.0, "slopes": np.array(paper_slopes(4)), "window": 7})
    # Decode: a few queries against many keys, the window far behind the last key.
    o.case("f32_decode_window_alibi_softcap", f32(2, 3, 64), f32(2, 5000, 64), f32(2, 5000, 64), f32(2, 3, 64),
           causal=2, want=("dq", "dk", "dv"),
           variants={"window": 1500, "slopes": np.array([0.01, 0.002]), "softcap": 10.0})
    # Decode with GQA: the query heads of a KV head share an item (their keys and
    # values read once), each with its own slope, mask and dropout.
    mask = (f((4, 2, 4100)) * 2).astype(np.float32)
    mask[rng.random(mask.shape) < 0.1] = -np.inf
    o.case("f32_decode_gqa_per_head_slopes_masks", f32(4, 2, 64), f32(2, 4100, 64), f32(2, 4100, 48),
           f32(4, 2, 48), mask, causal=2, want=("dq", "dk", "dv"),
           variants={"slopes": np.array([0.001, 0.01, 0.02, 0.003]), "window": 3000})
    o.case("f32_decode_gqa_8_over_2_one_query", f32(2, 8, 1, 32), f32(2, 2, 4500, 32), f32(2, 2, 4500, 32),
           f32(2, 8, 1, 32), causal=2, want=("dq", "dk", "dv"), dropout=0.2, seed=3,
           variants={"softcap": 4.0, "slopes": rng.random(8) * 0.01})
    # Sinks: on the fused kernels across blocks, in decode with GQA (merged as one
    # more part), with the exact kernel and a float mask's gradient, and on rows
    # that see no key (all their weight on the sink).
    # RoPE, turned as the kernels pack q and k: across blocks of the fused
    # kernels, both layouts, partial rotary dimensions, GQA; a few queries
    # against many keys (the tiled kernel, not decode); the exact kernels.
    o.case("f32_rope_halves_across_blocks", f32(2, 300, 64), f32(2, 700, 64), f32(2, 700, 64), f32(2, 300, 64),
           causal=2, want=("dq", "dk", "dv"), variants={"rope": (0, 10000.0, 0, 11)})
    o.case("f32_rope_interleaved_partial_gqa", f32(4, 200, 48), f32(2, 200, 48), f32(2, 200, 32), f32(4, 200, 32),
           causal=1, want=("dq", "dk", "dv"), variants={"rope": (1, 500.0, 16, 0), "softcap": 20.0})
    o.case("f32_rope_few_queries_many_keys", f32(2, 3, 64), f32(2, 4100, 64), f32(2, 4100, 64), f32(2, 3, 64),
           causal=2, want=("dq", "dk", "dv"), variants={"rope": (0, 10000.0, 0, 100)})
    o.case("f64_rope_gqa_float_mask_dmask_alibi", f((2, 4, 20, 8)), f((2, 2, 30, 8)), f((2, 2, 30, 5)),
           f((2, 4, 20, 5)), f((20, 30)), causal=0,
           variants={"rope": (0, 10000.0, 6, 4), "slopes": np.array(paper_slopes(4))})
    o.case("f32_sinks_across_blocks", f32(2, 300, 64), f32(2, 700, 64), f32(2, 700, 64), f32(2, 300, 64),
           causal=1, want=("dq", "dk", "dv"), variants={"sinks": np.array([0.5, 3.0]), "window": 200})
    o.case("f32_decode_gqa_sinks", f32(4, 1, 64), f32(2, 4200, 64), f32(2, 4200, 64), f32(4, 1, 64), causal=2,
           want=("dq", "dk", "dv"), variants={"sinks": np.array([1.0, -2.0, 8.0, 0.0])})
    o.case("f64_sinks_float_mask_dmask", f((3, 6, 5)), f((3, 9, 5)), f((3, 9, 4)), f((3, 6, 4)), f((6, 9)),
           variants={"sinks": np.array([0.3, -1.0, 2.0]), "softcap": 3.0})
    o.case("f64_sinks_dead_rows", f((2, 9, 4)), f((2, 4, 4)), f((2, 4, 3)), f((2, 9, 3)), causal=1,
           variants={"window": 2, "sinks": np.array([0.0, 1.0])})
    o.case("f32_decode_window_one_key", f32(1, 1, 32), f32(1, 4100, 32), f32(1, 4100, 32), f32(1, 1, 32),
           causal=2, want=("dq", "dk", "dv"), variants={"window": 1})
    # A window that leaves rows with no key (top-left, L > S): zero output and gradients.
    o.case("f64_window_dead_rows", f((2, 9, 4)), f((2, 4, 4)), f((2, 4, 3)), f((2, 9, 3)), causal=1,
           variants={"window": 2})
    # A cap below 2^-100, whose reciprocal f32 cannot hold: the f32 kernels
    # gave NaN for a score of 0 (the zero query row) and differentiated the
    # other scores as if uncapped, so every slice goes to the exact kernel.
    q = f32(2, 40, 16)
    q[0, 3] = 0
    o.case("f32_softcap_below_f32_reciprocal", q, f32(2, 60, 16), f32(2, 60, 8), f32(2, 40, 8), causal=1,
           want=("dq", "dk", "dv"), variants={"softcap": 1e-40}, fallbacks=2)


def bf16_compute(o, rng):
    """The bf16 compute mode (its own kernels where the CPU has AVX512_BF16, and
    with ATTN_ISA=c) with every variant, a window starting tiles mid-block: within
    the mode's documented 1e-2 of float64."""
    f = rng.standard_normal
    q, k, v = (f(s).astype(np.float32) for s in ((2, 300, 64), (2, 500, 64), (2, 500, 48)))
    variants = {"softcap": 5.0, "slopes": np.array([0.05, 0.01]), "window": 77}
    for n, a in (("q", q), ("k", k), ("v", v)):
        np.save(o.path(n), a)
    np.save(o.path("slopes"), variants["slopes"])
    r = subprocess.run([o.attn, "sdpa", "-q", o.path("q"), "-k", o.path("k"), "-v", o.path("v"), "--compute=bf16",
                        "--causal=bottom-right", "--softcap", "5", "--alibi-slopes", o.path("slopes"), "--window", "77",
                        "-o", o.path("out")], capture_output=True, text=True)
    if r.returncode != 0:
        return o.report("bf16_compute_all_variants", "attn failed: " + r.stderr.strip())
    ref = reference(q, k, v, np.zeros((2, 300, 48)), None, 2, None, variants=variants)[4]
    err = float(np.max(np.abs(np.load(o.path("out")) - ref))) / float(np.max(np.abs(ref)))
    o.report("bf16_compute_all_variants", "" if err <= 1e-2 else "relative error %g" % err)


def sink_weights(o, rng):
    """With sinks, the weights (-w, from the exact kernel) and the sink's share
    e^(sink - lse) make 1 in every row, and the output is those weights times v."""
    f = rng.standard_normal
    q, k, v, sinks = f((3, 5, 4)), f((3, 7, 4)), f((3, 7, 2)), np.array([0.0, 2.0, -3.0])
    for n, a in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
        np.save(o.path(n), a)
    r = subprocess.run([o.attn, "sdpa", "-q", o.path("q"), "-k", o.path("k"), "-v", o.path("v"), "--sinks",
                        o.path("sinks"), "-w", o.path("w"), "--lse", o.path("lse"), "-o", o.path("out")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return o.report("sinks_weights_and_sink_share_make_one", "attn failed: " + r.stderr.strip())
    w, lse, out = np.load(o.path("w")), np.load(o.path("lse")), np.load(o.path("out"))
    total = w.sum(-1) + np.exp(sinks[:, None] - lse)
    err = max(float(np.abs(total - 1).max()), float(np.abs(w @ v - out).max()))
    o.report("sinks_weights_and_sink_share_make_one", "" if err <= 1e-13 else "off by %g" % err)


def errors(o):
    """Bad variant options: a one-line error, no output file."""
    x = o.path("x")
    np.save(x, np.ones((2, 3, 4)))
    np.save(o.path("bad_slopes"), np.array([0.5, np.nan]))
    np.save(o.path("short_slopes"), np.array([0.5]))
    cases = {
        "window_without_causal": (["--window", "3"], "--window needs --causal"),
        "softcap_negative": (["--softcap", "-1"], "--softcap '-1' is not"),
        "softcap_inf": (["--softcap", "inf"], "--softcap 'inf' is not"),
        "slopes_nan": (["--alibi-slopes", o.path("bad_slopes")], "alibi_slopes[1] is nan"),
        "slopes_wrong_shape": (["--alibi-slopes", o.path("short_slopes")], "alibi_slopes must have shape (2,)"),
        "alibi_twice": (["--alibi", "--alibi-slopes", o.path("short_slopes")], "not both"),
        "sinks_nan": (["--sinks", o.path("bad_slopes")], "sinks[1] is nan"),
        "dsinks_without_sinks": (["--grad-out", x, "--dsinks", o.path("ds")], "--dsinks needs --sinks"),
        # A number out of an option's range names the range, both ends: "from 0" alone read as a
        # refusal of a whole number from 0. --rope-offset takes the library's own bound, 2^53
        # (the command stopped at 2^40), and past it with the rows the library names them.
        "rope_offset_past_2_53": (["--rope", "halves", "--rope-offset", str(2 ** 53 + 1)],
                                  "--rope-offset '9007199254740993' is not a whole number from 0 to 2^53 "
                                  "(9007199254740992)"),
        "rope_positions_past_2_53": (["--rope", "halves", "--rope-offset", str(2 ** 53 - 2)],
                                     "RoPE's positions run from position_offset 9007199254740990 over 3 positions, "
                                     "past 2^53"),
        "rope_dim_odd": (["--rope", "halves", "--rope-dim", "3"],
                         "--rope-dim '3' is not an even whole number from 2 to 16777216"),
        "window_0": (["--causal", "--window", "0"],
                     "--window '0' is not a whole number of keys from 1 to 2^40 (1099511627776)"),
    }
    for name, (flags, want) in cases.items():
        out = o.path("err_out")
        if os.path.exists(out):
            os.remove(out)
        r = subprocess.run([o.attn, "sdpa", "-q", x, "-k", x, "-v", x, "-o", out] + flags, capture_output=True,
                           text=True)
        lines = r.stderr.strip().splitlines()
        ok = r.returncode != 0 and len(lines) == 1 and lines[0].startswith("attn: error: ") and want in lines[0]
        o.report("error_" + name, "" if ok and not os.path.exists(out) else "rc %d, stderr %r" % (r.returncode, r.stderr))
    # The last positions RoPE takes: offset + 3 rows = 2^53, past the command's old bound of 2^40.
    out = o.path("rope_top_out")
    r = subprocess.run([o.attn, "sdpa", "-q", x, "-k", x, "-v", x, "-o", out, "--rope", "halves",
                        "--rope-offset", str(2 ** 53 - 3)], capture_output=True, text=True)
    o.report("rope_offset_up_to_2_53_taken", "" if r.returncode == 0 and os.path.exists(out) else
             "rc %d, stderr %r" % (r.returncode, r.stderr))


def main():
    build, rng = oracle_args(20261130)
    o = Oracle(build)
    missing = forced_isa_missing(o)
    if missing:
        print("skip variants_oracle_ATTN_ISA=%s: %s" % (os.environ["ATTN_ISA"], missing))
        return 0
    check_slopes(o, rng)
    errors(o)
    sink_weights(o, rng)
    bf16_compute(o, rng)
    fixed_cases(o, rng)
    for i in range(80):
        random_case(o, rng, i)
    print("# score variants oracle: %d passed, %d failed" % (o.passed, o.failed))
    return 1 if o.failed else 0


if __name__ == "__main__":
    sys.exit(main())
