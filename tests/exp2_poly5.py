#!/usr/bin/python3
"""exp2_poly5.py -- where soft-capping's degree-5 polynomial for 2^f comes
from, and a check that src/kernels/exp2.h holds it.

The fit: the polynomial 1 + c1 f + ... + c5 f^5 with the least largest relative
error |p(f) / 2^f - 1| on f in [-1/2, 1/2], by Lawson's iteratively reweighted
least squares on 20001 points (each round multiplies a point's weight by its
error, which drives the fit to the minimax one).

Checked: the header's coefficients, read from ATTN_EXP2_POLY5 and evaluated in
double, stay within 9.2e-8 (1.54 * 2^-24) relative, the bound exp2.h states;
and a fit made here is no better than them by more than 1%, so they are the
minimax polynomial, not merely a good one.

Usage: exp2_poly5.py [--print]. Prints "ok NAME" / "FAIL NAME: why"; with
--print, the fitted coefficients.
"""
import os
import re
import sys

import numpy as np

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "kernels", "exp2.h")
BOUND = 9.2e-8
F = np.linspace(-0.5, 0.5, 20001)


def relative_error(coef):
    """max |p(f) / 2^f - 1| for p = 1 + coef[0] f + ... (Horner, in double)."""
    p = np.zeros_like(F)
    for c in coef[::-1]:
        p = (p + c) * F
    return np.max(np.abs((1 + p) / 2.0 ** F - 1))


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


def header_coefficients():
    text = open(HEADER).read()
    body = text[text.index("#define ATTN_EXP2_POLY5"):]
    body = body[:body.index("\n\n")]
    k = [float(x) for x in re.findall(r"K\(([-+0-9.e]+)f\)", body)]
    # Horner from the highest degree down to the constant 1.
    return k[:-1][::-1] if k[-1] == 1.0 else None


def main():
    err, c = fit()
    if "--print" in sys.argv:
        print("relative error %.3g = %.3f * 2^-24" % (err, err / 2 ** -24))
        print(", ".join("%.9e" % x for x in c[::-1]))
    have = header_coefficients()
    if have is None or len(have) != 5:
        print("FAIL exp2_poly5_in_header: ATTN_EXP2_POLY5 not found as 5 coefficients and 1 in %s" % HEADER)
        return
    got = relative_error(np.array(have))
    print(("ok exp2_poly5_within_bound" if got <= BOUND else
           "FAIL exp2_poly5_within_bound: relative error %.4g > %.3g" % (got, BOUND)))
    print(("ok exp2_poly5_is_minimax" if got <= err * 1.01 else
           "FAIL exp2_poly5_is_minimax: %.4g, but a fit reaches %.4g" % (got, err)))


if __name__ == "__main__":
    main()
