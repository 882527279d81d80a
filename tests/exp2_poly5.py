#!/usr/bin/python3
"""exp2_poly5.py -- where soft-capping's degree-5 polynomial for 2^f comes
from, and the bf16 compute mode's degree-3 one, and a check that
src/kernels/exp2.h holds them.

The fit: the polynomial 1 + c1 f + ... + c5 f^5 with the least largest relative
error |p(f) / 2^f - 1| on f in [-1/2, 1/2], by Lawson's iteratively reweighted
least squares on 20001 points (each round multiplies a point's weight by its
error, which drives the fit to the minimax one).

Checked: the header's coefficients, read from ATTN_EXP2_POLY5 (POLY3) and
evaluated in double, stay within 9.2e-8 (1.54 * 2^-24) relative (1.02e-4),
the bounds exp2.h states; and a fit made here is no better than them by more
than 1%, so they are the minimax polynomials, not merely good ones. Each is
also evaluated as the kernels do, in f32 (Horner, one rounding per step), and
stays within its bound plus 4 * 2^-24.

Usage: exp2_poly5.py [--print]. Prints "ok NAME" / "FAIL NAME: why"; with
--print, the fitted coefficients.
"""
import os
import re
import sys

import numpy as np

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "kernels", "exp2.h")
# name in exp2.h, degree, the relative error it states
POLYS = (("ATTN_EXP2_POLY5", 5, 9.2e-8), ("ATTN_EXP2_POLY3", 3, 1.02e-4))
F = np.linspace(-0.5, 0.5, 20001)


def relative_error(coef, dtype=np.float64):
    """max |p(f) / 2^f - 1| for p = 1 + coef[0] f + ... (Horner, in dtype)."""
    f = F.astype(dtype)
    p = np.zeros_like(f)
    for c in coef[::-1]:
        p = (p + dtype(c)) * f
    return np.max(np.abs((1 + p).astype(np.float64) / 2.0 ** F - 1))


def fit(degree=5, rounds=300):
    V = np.stack([F ** i for i in range(1, degree + 1)], 1)
    y = 2.0 ** F
    w = np.full_like(F, 1 / len(F))
    best = (np.inf, None)
    for _ in range(rounds):
        sw = np.sqrt(w) / y  # relative error: residuals divided by 2^f
        c, *_ = np.linalg.lstsq(V * sw[:, None], (y - 1) * sw, rcond=None)
        e = (1 + V @ c) / y - 1
        err = np.max(np.abs(e))
        if err < best[0]:
            best = (err, c)
        w = w * np.abs(e)
        w /= w.sum()
    return best


def header_coefficients(name):
    text = open(HEADER).read()
    body = text[text.index("#define " + name):]
    body = body[:body.index("\n\n")]
    k = [float(x) for x in re.findall(r"K\(([-+0-9.e]+)f\)", body)]
    # Horner from the highest degree down to the constant 1.
    return k[:-1][::-1] if k and k[-1] == 1.0 else None


def main():
    for name, degree, bound in POLYS:
        err, c = fit(degree)
        short = name[len("ATTN_"):].lower()
        if "--print" in sys.argv:
            print("%s: relative error %.3g = %.3f * 2^-24" % (name, err, err / 2 ** -24))
            print(", ".join("%.9e" % x for x in c[::-1]))
        have = header_coefficients(name)
        if have is None or len(have) != degree:
            print("FAIL %s_in_header: %s not found as %d coefficients and 1 in %s" % (short, name, degree, HEADER))
            continue
        got = relative_error(np.array(have))
        print(("ok %s_within_bound" % short if got <= bound else
               "FAIL %s_within_bound: relative error %.4g > %.3g" % (short, got, bound)))
        print(("ok %s_is_minimax" % short if got <= err * 1.01 else
               "FAIL %s_is_minimax: %.4g, but a fit reaches %.4g" % (short, got, err)))
        got32 = relative_error(np.array(have), np.float32)
        print(("ok %s_in_f32_within_bound" % short if got32 <= bound + 4 * 2.0**-24 else
               "FAIL %s_in_f32_within_bound: relative error %.4g > %.3g + 4 * 2^-24" % (short, got32, bound)))


if __name__ == "__main__":
    main()
