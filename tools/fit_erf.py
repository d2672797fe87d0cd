"""Fit the ``erf`` used by ``GraphTensor.erf`` (float32 and float64 coefficient sets) and the normal CDF of
float32 ``GraphTensor.gelu``.

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

GELU (float32): ``x Phi(x)`` with ``Phi(x) = erfc(-x / sqrt 2) / 2`` computed from one exponential,
``E(a) = erfc(a) = exp(Q(u) - a^2)`` for ``a = |x| / sqrt 2 < GELU_CLAMP`` (``Q ~ log(exp(a^2) erfc(a))``, analytic
on ``[0, GELU_CLAMP]``, a polynomial in ``u = 2 a / GELU_CLAMP - 1``): ``Phi = E / 2`` for negative x, ``1 - E / 2``
otherwise. No ``1 + erf`` cancels (where ``x/2 (1 + erf(x / sqrt 2))`` loses 105 ulp at x = -3), and one branch
instead of erf's two. Printed: the maximum error of the graph's evaluation order against mpmath, in ulp of the
result, above a few lower bounds of x (past ``-GELU_CLAMP sqrt 2`` the result is 0; the true value is < 5e-8).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

mp.mp.dps = 50
# dtype: (degree + 1 of R, degree + 1 of L, CLAMP)
CONFIG = {"float32": (8, 11, 4.0), "float64": (13, 27, 6.0)}
GELU_N, GELU_CLAMP = 12, 4.0  # coefficients (degree + 1) of Q; a = |x| / sqrt 2 where Phi's E is cut to 0


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


def fit_gelu(n: int, clamp: float):
    half = clamp / 2
    coef = mp.chebyfit(lambda u: mp.log(mp.erfc(half + half * u)) + (half + half * u) ** 2, [-1, 1], n)
    return [float(c) for c in coef[::-1]]


def evaluate_gelu(x, coef, clamp):
    """GraphTensor.gelu's float32 evaluation order."""
    t = x.dtype.type
    z = x * t(1 / np.sqrt(2))
    a = np.abs(z)
    inside = a < t(clamp)
    ac = np.where(inside, a, t(clamp))
    e = np.exp2((horner(coef, ac * t(2 / clamp) - t(1)) - ac * ac) * t(1 / np.log(2)))
    half_e = np.where(inside, e * t(0.5), t(0))
    return x * np.where(z < 0, half_e, t(1) - half_e)


def main_gelu() -> None:
    coef = fit_gelu(GELU_N, GELU_CLAMP)
    print(f"gelu float32: Q = {tuple(coef)}  (clamp {GELU_CLAMP})")
    x = np.concatenate([np.linspace(-8, 8, 40001), -np.geomspace(1e-30, 8, 3001),
                        np.geomspace(1e-30, 8, 3001)]).astype(np.float32)
    got = evaluate_gelu(x, coef, GELU_CLAMP).astype(np.float64)
    want = np.array([float(v * (1 + mp.erf(v / mp.sqrt(2))) / 2) for v in map(mp.mpf, x.astype(float))])
    err = np.abs(got - want) / np.spacing(np.maximum(np.abs(want), 1e-38).astype(np.float32)).astype(np.float64)
    for lo in (-5, -3, -1):
        print(f"gelu float32: max error {err[x > lo].max():.2f} ulp for x > {lo}")


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
    main_gelu()
