"""Unary high-level ops: math functions and activations, each a composition of primitives.

``exp(x) = exp2(x / ln 2)``, ``log(x) = log2(x) * ln 2``, ``cos(x) = sin(2x) / (2 sin x)`` (in float64),
``sigmoid(x) = 1 / (1 + exp(-x))``, ``tanh`` by a rational function in float32/float16
(``2 sigmoid(2x) - 1`` in float64), ``erf`` by polynomials fitted per dtype
(``tools/fit_erf.py``, about an ulp), float32 ``gelu`` by one exponential of a fitted polynomial (the same
tool). Integer inputs to floating functions are
first cast to float32, as PyTorch does.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..dtype import DType
from ._util import constant

LN2 = math.log(2.0)
INV_LN2 = 1.0 / LN2

# tanh(x) ~ x P(x^2) / Q(x^2) on |x| <= 9.2, fitted by tools/fit_tanh.py: relative error 2.5e-8 in exact
# arithmetic, at most 6 ulp (3.6e-7) evaluated in float32; derivative within 3.6e-7 of 1 - tanh^2. Inputs are
# clamped to +-TANH_CLAMP, where the float32 evaluation is 1 + 10 ulp (fused multiply-adds or not), and results
# to [-1, 1], so large inputs give exactly +-1.
TANH_CLAMP = 10.0
TANH_P = (0.9999999747334797, 0.13367888617444784, 0.003480003968545494, 2.0353465827567356e-05,
          1.300227370215623e-08)
TANH_Q = (1.0, 0.4670120043090431, 0.025817645914859595, 0.00032601831337963194, 7.631935549159974e-07)
# float64 tanh for |x| < TANH64_SMALL: x + x^3 (c3 + x^2 (c5 + x^2 (c7 + x^2 c9))), the Taylor coefficients
# -1/3, 2/15, -17/315, 62/2835; the first term left out (1382/155925 x^11) is < 1e-15 of x there. Above it,
# 2 sigmoid(2x) - 1 loses at most ~3e-15 to cancellation (measured against mpmath: 3.2e-15 at |x| = 0.056).
TANH64_SMALL = 0.05
TANH64_SERIES = (-1.0 / 3.0, 2.0 / 15.0, -17.0 / 315.0, 62.0 / 2835.0)


# erf, fitted by tools/fit_erf.py (Chebyshev interpolants, monomial coefficients lowest first): for a = |x| < 1,
# a + a R(a^2); for 1 <= a <= clamp, 1 - exp(L(u) - a^2) with u = (a - mid) / half. At most 1.05 ulp (float32)
# and 1.0 ulp (float64) from mpmath's erf in numpy evaluations of the same order of operations.
ERF_R = {
    "float32": (0.12837916706154343, -0.3761263846802871, 0.11283782495236845, -0.026865430727670243,
                0.005221031807858023, -0.0008484080405535107, 0.00011265959025606609, -9.667044571486996e-06),
    "float64": (0.1283791670955126, -0.3761263890318375, 0.11283791670954879, -0.026866170645076792,
                0.0052239776248180145, -0.000854832698083379, 0.0001205533111164271, -1.4925595266831182e-05,
                1.6461000484121368e-06, -1.6350312701054695e-07, 1.4659775274047436e-08, -1.1372848856791674e-09,
                5.957176147748911e-11),
}
ERF_L = {  # (coefficients, mid, half, clamp)
    "float32": ((-1.5568152727272644, -0.5290211110049547, 0.12623909325741503, -0.03664630296024443,
                 0.010962852552154257, -0.003194763891509097, 0.0008767322217607843, -0.00022168193713285972,
                 4.6895587022581285e-05, -2.542888619759094e-06, -2.211289408057152e-06), 2.5, 1.5, 4.0),
    "float64": ((-1.8624374021481738, -0.6652489709129772, 0.2077934078610613, -0.08165090971780906,
                 0.034128411079749774, -0.01438454833033345, 0.005953704476190262, -0.002373997280513564,
                 0.0008935765855845794, -0.00030781955951396384, 9.090090217256991e-05, -1.847452395376142e-05,
                 -1.477503599641089e-06, 4.56596712020318e-06, -3.422294334462001e-06, 1.917889171144331e-06,
                 -9.124365065445989e-07, 3.8437394165273846e-07, -1.3611972043197023e-07, 2.6131458709239564e-08,
                 3.922377494569264e-09, 1.9305509283414644e-10, 6.621479020937692e-10, -5.618027658915205e-09,
                 3.6630997068853925e-09, -2.5668825356579424e-10, -2.283670456893158e-10), 3.5, 2.5, 6.0),
}


# float32 GELU, fitted by tools/fit_erf.py: Phi(x) = erfc(-x / sqrt 2) / 2 from E = erfc(a) = exp(Q(u) - a^2),
# a = |x| / sqrt 2 < GELU_CLAMP, u = 2 a / GELU_CLAMP - 1 (E cut to 0 past it: x < -5.66, where x Phi(x) > -5e-8).
# At most 5 ulp for x > -1, 17 ulp for x > -3, 46 ulp for x > -5 (x/2 (1 + erf(x / sqrt 2)) cancels: 105 ulp at
# -3; PyTorch's float32 kernel 1755).
GELU_CLAMP = 4.0
GELU_Q = (-1.364941238538556, -0.8363216159510727, 0.30499475252711106, -0.13172065683775686, 0.05715418927959656,
          -0.023440322057769816, 0.008564320732953039, -0.0026337836455679504, 0.0006876252109626775,
          6.69181529956318e-05, -0.00034878380959891457, 0.0001603041306745447)


class UnaryOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with the unary ops."""

    def _floating(self):
        return self if self.dtype.is_float else self.cast(DType.float32)

    # ------------------------------------------------------------------ primitives
    def log2(self):
        """Base-2 logarithm (primitive ``Log2``)."""
        x = self._floating()
        return x._apply(ops.Log2())

    def exp2(self):
        """``2 ** x`` (primitive ``Exp2``)."""
        x = self._floating()
        return x._apply(ops.Exp2())

    def sin(self):
        """Sine (primitive ``Sin``)."""
        x = self._floating()
        return x._apply(ops.Sin())

    def sqrt(self):
        """Square root (primitive ``Sqrt``)."""
        x = self._floating()
        return x._apply(ops.Sqrt())

    def recip(self):
        """``1 / x`` (primitive ``Recip``)."""
        x = self._floating()
        return x._apply(ops.Recip())

    reciprocal = recip

    # ------------------------------------------------------------------ math
    def square(self):
        """``x * x``."""
        return self * self

    def rsqrt(self):
        """``1 / sqrt(x)``."""
        return self.sqrt().recip()

    def exp(self):
        """``e ** x`` = ``exp2(x / ln 2)``; float16/bfloat16 are computed in float32 and rounded once (rounding
        ``x / ln 2`` to float16 first would cost up to 10 ulp)."""
        x = self._floating()
        if x.dtype.is_half:
            return (x.cast(DType.float32) * INV_LN2).exp2().cast(x.dtype)
        return (x * INV_LN2).exp2()

    def log(self):
        """Natural logarithm = ``log2(x) * ln 2`` (bfloat16: in float32, rounded once, as PyTorch)."""
        if self.dtype == DType.bfloat16:
            return self.cast(DType.float32).log().cast(DType.bfloat16)
        return self.log2() * LN2

    def log10(self):
        if self.dtype == DType.bfloat16:
            return self.cast(DType.float32).log10().cast(DType.bfloat16)
        return self.log2() * (LN2 / math.log(10.0))

    def log1p(self):
        """``log(1 + x)``."""
        if self.dtype == DType.bfloat16:
            return self.cast(DType.float32).log1p().cast(DType.bfloat16)
        return (self._floating() + 1.0).log()

    def expm1(self):
        """``exp(x) - 1``."""
        if self.dtype == DType.bfloat16:
            return self.cast(DType.float32).expm1().cast(DType.bfloat16)
        return self.exp() - 1.0

    def _cos64(self):
        """``(cos x, x)`` in float64 for a float ``x``, from ``Sin`` of exactly representable arguments only:
        ``sin(2x) / (2 sin x)`` (``sin(x + pi/2)`` would round ``x + pi/2``: cos(3e7) off by 0.4 in float32).
        Within ~2 ulp of float64, so float32/float16 results are correctly rounded but in rare ties. ``x = 0``
        gives 1, and beyond 2**1000 (where ``2x`` may overflow) it is ``1 - 2 sin^2(x / 2)``."""
        from .binary import where
        x = self if self.dtype == DType.float64 else self.cast(DType.float64)
        zero = x.eq(0.0)
        ratio = (x * 2.0).sin() / (where(zero, 1.0, x.sin()) * 2.0)
        c = where(zero, 1.0, ratio)
        if self.dtype == DType.float64:
            half = (x * 0.5).sin()
            c = where(x.abs() < 2.0 ** 1000, c, 1.0 - half * half * 2.0)
        return c, x

    def cos(self):
        """Cosine, accurate for any argument (see ``_cos64``: computed in float64 from ``Sin``, then rounded to
        the dtype once); the gradient is ``-sin(x)`` (PyTorch's formula)."""
        from .binary import _grad_rule
        x = self._floating()
        c, _ = x._cos64()
        return _grad_rule(c.cast(x.dtype) if x.dtype != DType.float64 else c, "cos", (x,))

    def tan(self):
        """Tangent, ``sin(x) / cos(x)`` in float64 (see ``cos``) rounded once to the dtype; the gradient is
        ``1 + tan(x)^2`` (PyTorch's formula)."""
        from .binary import _grad_rule
        x = self._floating()
        c, xd = x._cos64()
        t = xd.sin() / c
        return _grad_rule(t.cast(x.dtype) if x.dtype != DType.float64 else t, "tan", (x,))

    def abs(self):
        """``|x|`` as ``x * sign(x)``: exact, NaN propagates, and the gradient at 0 is 0 (``torch.abs``)."""
        if self.dtype == DType.bool:
            return self
        return self * self.sign()

    def sign(self):
        """-1, 0 or 1 by the sign of x (NaN gives 0, as ``torch.sign``)."""
        if self.dtype == DType.bool:
            return self
        pos = (self > 0).cast(self.dtype)
        neg = (self < 0).cast(self.dtype)
        return pos - neg

    def floor(self):
        """Largest integer <= x (``x - (x mod 1)``; values beyond 2**mantissa bits are already integral)."""
        if not self.dtype.is_float:
            return self
        from .binary import where
        big = {DType.float16: 2.0 ** 10, DType.bfloat16: 2.0 ** 7, DType.float32: 2.0 ** 23, DType.float64: 2.0 ** 52}[self.dtype]
        return where(self.abs() < big, self - self.remainder(1.0), self)

    def ceil(self):
        """Smallest integer >= x."""
        if not self.dtype.is_float:
            return self
        return -((-self).floor())

    def trunc(self):
        """Round toward zero."""
        if not self.dtype.is_float:
            return self
        from .binary import where
        return where(self < 0, self.ceil(), self.floor())

    def round(self):
        """Round half to even (as ``torch.round``)."""
        if not self.dtype.is_float:
            return self
        from .binary import where
        fl = self.floor()
        frac = self - fl
        up = fl + 1.0
        even_up = up.remainder(2.0).eq(0.0)
        pick_up = (frac > 0.5).logical_or(frac.eq(0.5).logical_and(even_up))
        return where(pick_up, up, fl)

    def erf(self):
        """Error function, within about an ulp in float32 and float64 (float16 is computed in float32).

        ``|x| < 1``: ``a + a R(a^2)``; above: ``1 - exp(L(a) - a^2)`` with ``L ~ log(exp(a^2) erfc(a))``, both
        polynomials fitted by ``tools/fit_erf.py``; ``a`` is clamped where erf is 1 in the dtype (so the gradient
        at +-inf is 0), and the sign restored (odd symmetry; ``erf(0) = 0`` exactly, NaN propagates)."""
        from .binary import where
        x = self._floating()
        if x.dtype.is_half:
            return x.cast(DType.float32).erf().cast(x.dtype)
        key = "float64" if x.dtype == DType.float64 else "float32"
        r_coef, (l_coef, mid, half, clamp) = ERF_R[key], ERF_L[key]
        a = where(x < 0, -x, x)  # |x| with slope +1 at 0 (the branch the result takes there), not abs's 0
        near = a < 1.0
        a_s = where(near, a, 0.0)  # each branch sees only its own range (no inf * 0 in the other's gradient)
        small = a_s + a_s * _horner(a_s * a_s, r_coef)
        ab = _clamp(a, 1.0, clamp)
        big = 1.0 - (_horner(ab * (1.0 / half) - mid / half, l_coef) - ab * ab).exp()
        y = where(near, small, big)
        from .trig import _rule  # differentiated as PyTorch does: 2 / sqrt(pi) exp(-x^2), from the input alone
        return _rule(where(x < 0, -y, y), "erf", (x,))

    # ------------------------------------------------------------------ activations
    def relu(self):
        """``max(x, 0)``; NaN propagates and the gradient at 0 is 0 (``torch.relu``).

        One comparison: ``x < t`` with ``t`` the smallest positive value of the dtype is ``x <= 0`` for every
        number and False for NaN."""
        from .binary import where
        below = self < _above(0.0, self.dtype) if self.dtype.is_float else self < 1
        return where(below, constant(self.graph, 0, self.dtype, ()), self)

    def relu6(self):
        """``min(max(x, 0), 6)`` with ``hardtanh``'s zero gradient at both ends (``torch.nn.functional.relu6``)."""
        return self.hardtanh(0.0, 6.0)

    def leaky_relu(self, negative_slope: float = 0.01):
        """``x`` for x > 0, ``negative_slope * x`` otherwise (gradient ``negative_slope`` at 0, as PyTorch)."""
        from .binary import where
        return where(self > 0, self, self * negative_slope)

    def elu(self, alpha: float = 1.0):
        """``x`` for x > 0, ``alpha * (exp(x) - 1)`` otherwise."""
        from .binary import where
        # x <= 0 (False at NaN, so NaN passes through the identity branch: torch's gradient 1 there)
        nonpos = self < _above(0.0, self.dtype) if self.dtype.is_float else self < 1
        return where(nonpos, (self.clip(max=0.0).exp() - 1.0) * alpha, self)

    def selu(self):
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        return self.elu(alpha) * scale

    def celu(self, alpha: float = 1.0):
        from .binary import where
        nonpos = self < _above(0.0, self.dtype) if self.dtype.is_float else self < 1
        return where(nonpos, ((self / alpha).clip(max=0.0).exp() - 1.0) * alpha, self)

    def sigmoid(self):
        """``1 / (1 + exp(-x))``; exactly 0 where ``exp(-x)`` would overflow (x below -88 in float32, -709 in
        float64, -11 in float16; the true value is under the dtype's normal range there). ``-x`` is clamped
        inside the ``exp`` too, so the gradient stays finite (unclamped it is ``0 * inf``). One fused loop."""
        from .binary import where
        x = self._floating()
        if x.dtype == DType.bfloat16:  # in float32, rounded once (PyTorch's CPU kernel)
            return x.cast(DType.float32).sigmoid().cast(DType.bfloat16)
        from .trig import _rule
        limit = {DType.float16: 11.0, DType.float64: 709.0}.get(x.dtype, 88.0)
        nx = -x
        big = nx > limit
        # differentiated as PyTorch does (sigmoid_backward: g * (1 - y) * y, from the output alone)
        return _rule(where(big, 0.0, (where(big, limit, nx).exp() + 1.0).recip()), "sigmoid", (x,))

    def logsigmoid(self):
        """``log(sigmoid(x)) = -softplus(-x)`` (stable)."""
        return -((-self).softplus())

    def hardsigmoid(self):
        return (self / 6.0 + 0.5).clip(0.0, 1.0)

    def hardswish(self):
        """``x * relu6(x + 3) / 6``."""
        return self * (self + 3.0).relu6() / 6.0

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0):
        """``x`` clamped to ``[min_val, max_val]``; unlike ``clip``, the gradient is 0 at the two ends (PyTorch's
        ``hardtanh_backward``). NaN propagates."""
        from .binary import where
        x = self._floating()
        low = x < _above(min_val, x.dtype)    # x <= min_val, False for NaN
        high = _below(max_val, x.dtype) < x   # x >= max_val, False for NaN
        return where(low, min_val, where(high, max_val, x))

    def tanh(self):
        """Hyperbolic tangent.

        float32 (and float16/bfloat16, computed in float32): ``x P(x^2) / Q(x^2)`` with ``x`` clamped to
        ``[-10, 10]`` and the result to ``[-1, 1]`` -- mul/add and one reciprocal, no ``exp``; at most 6 ulp
        from the true value, accurate relative to ``x`` near 0 (``2 sigmoid(2x) - 1`` cancels there), exactly
        +-1 for large ``|x|``, NaN propagates. float64: ``sign(x) (2 sigmoid(2|x|) - 1)``, and for ``|x| < 0.05``
        (where that cancels) the Taylor series to ``x^9``; at most 4e-15 relative error everywhere, exactly odd.
        """
        from .trig import _rule
        x = self._floating()
        # differentiated as PyTorch does (tanh_backward: g * (1 - y^2), from the output alone: one saved buffer
        # instead of the rational function's intermediates)
        return _rule(_tanh_value(x), "tanh", (x,))

    def silu(self):
        """``x * sigmoid(x)`` (a.k.a. swish)."""
        return self * self.sigmoid()

    swish = silu

    def mish(self):
        """``x * tanh(softplus(x))``."""
        return self * self.softplus().tanh()

    def softsign(self):
        return self / (self.abs() + 1.0)

    def softplus(self, beta: float = 1.0, threshold: float = 20.0):
        """``log(1 + exp(beta x)) / beta``, computed stably; linear above ``threshold`` (``torch`` semantics)."""
        from .binary import where
        x = self._floating()
        bx = x * beta if beta != 1.0 else x
        # relu(bx) + log(1 + exp(-|bx|)); -|bx| written with slope +1 at 0 so that with relu's 0 there the
        # derivative at 0 is exactly 1/2
        soft = (bx.relu() + (where(bx > 0, -bx, bx).exp() + 1.0).log())
        if beta != 1.0:
            soft = soft / beta
        return where(bx > threshold, x, soft)

    def gelu(self, approximate: str = "none"):
        """GELU: exact ``x * Phi(x)`` with ``erf`` (``approximate='none'``) or the tanh form (``'tanh'``)."""
        x = self._floating()
        if approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
            return x * 0.5 * (inner.tanh() + 1.0)
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        if x.dtype == DType.float64:
            return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)
        if x.dtype.is_half:  # in float32, rounded once (PyTorch's CPU kernel)
            return x.cast(DType.float32).gelu().cast(x.dtype)
        from .trig import _rule  # differentiated as PyTorch does: Phi(x) + x phi(x)
        return _rule(x * _normal_cdf32(x), "gelu", (x,))

    def quick_gelu(self):
        return self * (self * 1.702).sigmoid()


def _normal_cdf32(x):
    """The standard normal CDF ``Phi(x)`` of a float32 tensor (``GELU_Q``): one exponential, one branch."""
    from .binary import where
    neg = x < 0
    a = where(neg, -x, x) * (1.0 / math.sqrt(2.0))
    inside = a < GELU_CLAMP
    ac = where(inside, a, GELU_CLAMP)  # (the polynomial sees only its range; NaN takes 1 - 0 and stays NaN in x Phi)
    half_e = where(inside, (_horner(ac * (2.0 / GELU_CLAMP) - 1.0, GELU_Q) - ac * ac).exp() * 0.5, 0.0)
    return where(neg, half_e, 1.0 - half_e)


def _gelu_slope(x):
    """d/dx of ``x Phi(x)``: ``Phi(x) + x phi(x)`` (PyTorch's GeluBackward for ``approximate='none'``)."""
    if x.dtype == DType.float64:
        cdf = ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0) * 0.5
    else:
        cdf = _normal_cdf32(x)
    return cdf + x * (x * x * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))


def _horner(v, coef):
    """``sum(coef[k] * v ** k)`` by Horner's rule (coefficients lowest first)."""
    acc = v * coef[-1] + coef[-2]
    for c in coef[-3::-1]:
        acc = acc * v + c
    return acc


def _above(value: float, dtype) -> float:
    """The next value of ``dtype`` above ``value`` (``x < _above(v)`` is ``x <= v`` and False for NaN)."""
    t = dtype.numpy
    return float(np.nextafter(t.type(value), t.type(np.inf)))


def _below(value: float, dtype) -> float:
    """The next value of ``dtype`` below ``value``."""
    t = dtype.numpy
    return float(np.nextafter(t.type(value), t.type(-np.inf)))


def _clamp(x, lo: float, hi: float):
    """``x`` clamped to the constants ``[lo, hi]``, NaN passing through. The second select compares the first
    one's result, so each is ``(a < b) ? b : a`` over one value: the CPU backend's C compiler makes that one
    ``max``/``min`` instruction (with the IEEE NaN rule) instead of a compare and a blend."""
    from .binary import where
    x = where(hi < x, hi, x)
    return where(x < lo, lo, x)


def _tanh_value(x):
    """:meth:`UnaryOps.tanh`'s value (``x`` floating)."""
    from .binary import where
    if x.dtype == DType.float64:
        s = x * x
        series = x + x * s * (s * (s * (s * TANH64_SERIES[3] + TANH64_SERIES[2]) + TANH64_SERIES[1])
                              + TANH64_SERIES[0])
        a = x.abs()
        t = (a * 2.0).sigmoid() * 2.0 - 1.0  # tanh(|x|): exactly odd, and no tiny sigmoid for x < 0
        return where(a < TANH64_SMALL, series, where(x < 0.0, -t, t))
    work = x if x.dtype == DType.float32 else x.cast(DType.float32)
    xc = _clamp(work, -TANH_CLAMP, TANH_CLAMP)
    s = xc * xc

    def horner(coef):
        acc = s * coef[-1] + coef[-2]
        for c in coef[-3::-1]:
            acc = acc * s + c
        return acc

    t = xc * horner(TANH_P) / horner(TANH_Q)
    t = _clamp(t, -1.0, 1.0)
    return t if x.dtype == DType.float32 else t.cast(x.dtype)
