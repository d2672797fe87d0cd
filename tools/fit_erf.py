"""Fit the ``erf`` used by ``GraphTensor.erf`` (float32 and float64 coefficient sets).

Run:  python tools/fit_erf.py   (numpy + mpmath, deterministic, a few seconds)

``erf(x)`` for ``a = |x|`` (odd symmetry) is evaluated in two ranges:

* ``a < 1``:  ``a + a R(a^2)`` with ``R(s) ~ (erf(sqrt s) - sqrt s) / sqrt s`` a polynomial in ``s``
  (``R(0) = 2 / sqrt(pi) - 1``: the correction to ``a`` is small, so rounding stays below an ulp);
* ``1 <= a <= CLAMP``:  ``1 - exp(L(u) - a^2)`` with ``L ~ log(exp(a^2) erfc(a))`` a polynomial in
  ``u = (a - mid) / half`` (``[1, CLAMP]`` mapped to ``[-1, 1]``). An error of ``L`` is a relative error of
  ``erfc``, which is at most 0.16 there, so ``erf`` keeps its ulp accuracy. Beyond ``CLAMP`` erf is 1 in the dtype.

The polynomials are Chebyshev interpolants computed with mpmath (``mpmath.chebyfit``, 50 digits) and
converted to the monomial basis. Prints the coefficients and the maximum error of a Horner evaluation in each
dtype against mpmath's erf, in ulp of the result.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

mp.mp.dps = 50
# dtype: (degree + 1 of R, degree + 1 of L, CLAMP)
CONFIG = {"float32": (8, 11, 4.0), "float64": (13, 27, 6.0)}


def fit(n_r: int, n_l: int, clamp: float):
    def r(s):
        if s == 0:
            return 2 / mp.sqrt(mp.pi) - 1
        a = mp.sqrt(s)
        return (mp.erf(a) - a) / a

    mid, half = (1 + clamp) / 2, (clamp - 1) / 2
    r_coef, _ = mp.chebyfit(r, [0, 1], n_r, error=True)
    l_coef, _ = mp.chebyfit(lambda u: mp.log(mp.erfc(mid + half * u)) + (mid + half * u) ** 2, [-1, 1], n_l,
                            error=True)
    # chebyfit lists the highest power first; store lowest first
    return [float(c) for c in r_coef[::-1]], [float(c) for c in l_coef[::-1]], mid, half


def horner(coef, v):
    acc = np.full_like(v, coef[-1])
    for c in coef[-2::-1]:
        acc = acc * v + v.dtype.type(c)
    return acc


def evaluate(x, r_coef, l_coef, mid, half, clamp):
    """The graph's evaluation order, in x's dtype (exp as exp2(x / ln 2), as GraphTensor.exp computes it)."""
    t = x.dtype.type
    a = np.abs(x)
    small = a + a * horner(r_coef, a * a)
    ab = np.clip(a, 1, clamp)
    u = ab * t(1 / half) - t(mid / half)
    arg = horner(l_coef, u) - ab * ab
    big = t(1) - np.exp2(arg * t(1 / np.log(2)))
    y = np.where(a < 1, small, big)
    return np.where(x < 0, -y, y)


def main() -> None:
    for name, (n_r, n_l, clamp) in CONFIG.items():
        dtype = np.dtype(name)
        r_coef, l_coef, mid, half = fit(n_r, n_l, clamp)
        print(f"{name}: R = {tuple(r_coef)}")
        print(f"{name}: L = {tuple(l_coef)}  (mid {mid}, half {half}, clamp {clamp})")
        x = np.concatenate([np.linspace(0, clamp + 1, 20001), np.geomspace(1e-30, 1, 2001)]).astype(dtype)
        got = evaluate(x, r_coef, l_coef, mid, half, clamp)
        want = np.array([float(mp.erf(mp.mpf(float(v)))) for v in x])
        ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - want) / ulp
        print(f"{name}: max error {err.max():.2f} ulp at x = {x[err.argmax()]!r}")


if __name__ == "__main__":
    main()
