"""Fit the float32 ``tanh`` used by ``GraphTensor.tanh``: ``tanh(x) ~ x P(x^2) / Q(x^2)`` on ``|x| <= FIT_RANGE``.

Run:  python tools/fit_tanh.py   (numpy only, deterministic, about a second)

Linearized least squares for the relative error (``x P - tanh(x) Q`` weighted by ``1 / (tanh(x) Q)``,
``Q(0) = 1``), re-weighted towards the worst points for a near-minimax fit (Lawson). Prints the
coefficients and the errors: of the fit in float64, of a float32 Horner evaluation against float64
``tanh`` (relative and in ulp), and of the fit's derivative against ``1 - tanh(x)^2`` (absolute).
``FIT_RANGE`` is the smallest round value where float32 ``tanh`` is 1.0 (``1 - tanh(9.2) < 2^-25``). Inputs are
clamped to ``+-SATURATE`` and results to ``[-1, 1]``: at ``SATURATE`` the fit evaluates to 1 + 10 ulp whether
or not the Horner steps are fused multiply-adds (checked below), so large inputs give exactly +-1.
"""

from __future__ import annotations

import numpy as np

FIT_RANGE = 9.2
SATURATE = 10.0
N_P, N_Q = 5, 5  # coefficients of P and Q (polynomials in x^2)


def fit(clamp: float = FIT_RANGE, n_p: int = N_P, n_q: int = N_Q, iterations: int = 60):
    x = np.concatenate([np.cos(np.linspace(0, np.pi / 2, 20000)) * clamp, np.linspace(1e-4, clamp, 20000)])
    x = x[x > 0]
    t, s = np.tanh(x), x * x
    vp, vq = np.vander(s, n_p, increasing=True), np.vander(s, n_q, increasing=True)
    w, q = np.ones_like(x), np.ones_like(x)
    for _ in range(iterations):
        scale = (w / (t * q))[:, None]
        a = np.hstack([x[:, None] * vp, -t[:, None] * vq[:, 1:]]) * scale
        c, *_ = np.linalg.lstsq(a, t * scale[:, 0], rcond=None)
        p_coef, q_coef = c[:n_p], np.concatenate([[1.0], c[n_p:]])
        q = vq @ q_coef
        err = np.abs(x * (vp @ p_coef) / q - t) / t
        w = w * (1 + 0.5 * err / err.max())
    return p_coef, q_coef, err.max()


def horner(coef, v, fused: bool = False):
    """Float32 Horner evaluation; ``fused``: each step rounded once (a fused multiply-add)."""
    acc = np.full_like(v, coef[-1])
    for c in coef[-2::-1]:
        if fused:
            acc = (acc.astype(np.float64) * v + np.float32(c)).astype(np.float32)
        else:
            acc = acc * v + v.dtype.type(c)
    return acc


def evaluate(p_coef, q_coef, x, fused: bool = False):
    s = x * x
    p, q = horner(p_coef.astype(np.float32), s, fused), horner(q_coef.astype(np.float32), s, fused)
    return x * p * (np.float32(1) / q)


def main():
    p_coef, q_coef, fit_err = fit()
    x = np.linspace(0, FIT_RANGE, 2_000_001).astype(np.float32)
    got = evaluate(p_coef, q_coef, x)
    ref = np.tanh(x.astype(np.float64))
    nz = ref > 0
    rel = np.abs(got[nz] - ref[nz]) / ref[nz]
    ulp = np.abs(got.astype(np.float64) - ref)[nz] / np.spacing(ref[nz].astype(np.float32))
    xd = x.astype(np.float64)
    sd = xd * xd
    pd, qd = np.polynomial.polynomial.polyval(sd, p_coef), np.polynomial.polynomial.polyval(sd, q_coef)
    dpd = np.polynomial.polynomial.polyval(sd, np.polynomial.polynomial.polyder(p_coef)) * 2 * xd
    dqd = np.polynomial.polynomial.polyval(sd, np.polynomial.polynomial.polyder(q_coef)) * 2 * xd
    deriv = (pd + xd * dpd) / qd - xd * pd * dqd / qd ** 2
    print(f"P = {tuple(float(c) for c in p_coef)}")
    print(f"Q = {tuple(float(c) for c in q_coef)}")
    print(f"fit (float64) max relative error {fit_err:.2e}")
    print(f"float32 Horner: max relative error {rel.max():.2e}, max {ulp.max():.1f} ulp, "
          f"largest value {got.max()!r} (clipped to 1)")
    sat = np.array([SATURATE], np.float32)
    print(f"at {SATURATE}: {evaluate(p_coef, q_coef, sat)[0]!r}, with fused multiply-adds "
          f"{evaluate(p_coef, q_coef, sat, fused=True)[0]!r} (both must be >= 1)")
    print(f"derivative: max absolute error {np.abs(deriv - 1 / np.cosh(xd) ** 2).max():.2e}")


if __name__ == "__main__":
    main()
