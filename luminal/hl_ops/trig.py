"""Inverse trigonometric and hyperbolic functions and a few binary elementwise ops with PyTorch's names:
``asin acos atan atan2 sinh cosh asinh acosh atanh copysign logaddexp lerp isclose allclose``.

Accuracy: every transcendental here is evaluated in float64 from the primitives (``Log2 Exp2 Sqrt Recip``) and
rounded once to the input dtype, so float32/float16 results are within an ulp or two of the correctly rounded
value. ``atan`` is Cephes' rational approximation (reduced to ``|x| <= 0.66``, ~1e-16 relative); ``asin``/``acos``
are ``atan2`` of exactly formed arguments; ``log1p`` is Goldberg's ``log(u) * x / (u - 1)`` (a few ulp, where
``log(1 + x)`` cancels). In float64, ``exp`` (``exp2(x / ln 2)``) loses ``|x| * 1.1e-16`` relative, so
``sinh``/``cosh`` of float64 arguments near 700 are ~1e-13 relative; the others are a few ulp.

Special values follow C99 / PyTorch: odd functions keep the sign of zero, domain errors give NaN (``asin(2)``,
``acosh(0.5)``, ``atanh(1.5)``), the domain edges give infinities (``atanh(1) = inf``), ``atan2`` follows C's
table for signed zeros and infinities, NaN propagates.

Gradients are PyTorch's formulas (autograd rules named ``derivative`` in ``Graph.grad_rules``, evaluated by
:data:`DERIVATIVES`), not the chain rule through the composition (which would give NaN where a discarded
branch of a ``where`` is infinite).
"""

from __future__ import annotations

import math

from ..dtype import DType
from ._util import as_tensor, binary_operands, is_scalar

LN2 = math.log(2.0)
PI = math.pi
# Cephes atan.c (double): atan(x) = x + x z P(z) / Q(z), z = x^2, for |x| <= 0.66
_ATAN_P = (-8.750608600031904122785E-1, -1.615753718733365076637E1, -7.500855792314704667340E1,
           -1.228866684490136173410E2, -6.485021904942025371773E1)
_ATAN_Q = (1.0, 2.485846490142306297962E1, 1.650270098316988542046E2, 4.328810604912902668951E2,
           4.853903996359136964868E2, 1.945506571482613964425E2)
_MOREBITS = 6.123233995736765886130E-17  # pi/2 - fl(pi/2)
_T3P8 = 2.41421356237309504880            # tan(3 pi / 8)
_SINH_SERIES = tuple(1.0 / math.factorial(k) for k in range(19, 2, -2))  # 1/19!, 1/17!, ..., 1/3!
_BIG = 1e8                                 # asinh/acosh: log(2|x|) is exact to double precision above this


def _where(c, a, b):
    from .binary import where
    return where(c, a, b)


def _poly(z, coef):
    """``coef[0] z^n + ... + coef[n]`` (highest first, Cephes' polevl)."""
    acc = z * coef[0] + coef[1]
    for c in coef[2:]:
        acc = acc * z + c
    return acc


def _f64(x):
    """``(x as float64, the result dtype)``: ints compute as float32 results, as PyTorch does."""
    x = x._floating()
    return (x if x.dtype == DType.float64 else x.cast(DType.float64)), x.dtype


def _back(y, dtype):
    return y if y.dtype == dtype else y.cast(dtype)


def _signbit(x):
    """True where ``x``'s sign bit is set: negative values, ``-0.0`` and negative NaNs (``signbit``)."""
    return x.signbit()


def _sign_of(x):
    """``copysign(1, x)`` as a float tensor of ``x``'s dtype (``-0.0`` gives -1, a NaN its sign bit's)."""
    return _where(_signbit(x), _c(x, -1.0), _c(x, 1.0))


def _c(like, value):
    """A scalar constant of ``like``'s dtype (``where`` of two Python floats would be float32)."""
    from ._util import constant
    return constant(like.graph, value, like.dtype, ())


def _odd(x, r):
    """``r`` (computed from ``|x|``, non-negative or NaN) times ``x``'s sign: a product, so that ``-0.0`` stays
    ``-0.0`` (``where`` adds its two stacked branches, which turns ``-0.0`` into ``+0.0``)."""
    return r * _sign_of(x)


def _abs(x):
    return _where(x < 0, -x, x)


def log1p64(x):
    """``log(1 + x)`` accurate to a few ulp for float64 ``x`` (Goldberg: ``log(u) * (x / (u - 1))``, ``u = 1 + x``)."""
    u = x + 1.0
    safe = _where(u.eq(1.0), 2.0, u)
    r = _where(u.eq(1.0), x, safe.log() * (x / (safe - 1.0)))
    return _where(x.eq(math.inf), math.inf, r)


def atan64(x):
    """Cephes' double-precision ``atan`` of a float64 tensor."""
    a = _abs(x)
    big = a > _T3P8
    mid = (a > 0.66).logical_and(big.logical_not())
    xr = _where(big, -(_where(big, a, 1.0).recip()), _where(mid, (a - 1.0) / (a + 1.0), a))
    y0 = _where(big, _c(x, PI / 2 + _MOREBITS), _where(mid, _c(x, PI / 4 + 0.5 * _MOREBITS), _c(x, 0.0)))
    z = xr * xr
    p = xr + xr * (z * _poly(z, _ATAN_P) / _poly(z, _ATAN_Q))
    return _odd(x, y0 + p)


def atan2_64(y, x):
    """``atan2(y, x)`` of float64 tensors (broadcast), with C99's special cases."""
    ay, ax = _abs(y), _abs(x)
    steep = ay > ax
    num, den = _where(steep, ax, ay), _where(steep, ay, ax)
    both_zero = den.eq(0)
    both_inf = ax.eq(math.inf).logical_and(ay.eq(math.inf))
    ratio = _where(both_zero.logical_or(both_inf), 0.0, num / _where(both_zero, 1.0, den))
    base = atan64(ratio)
    base = _where(both_inf, PI / 4, base)
    base = _where(steep, (PI / 2 - base) + _MOREBITS, base)
    base = _where(_signbit(x), (PI - base) + 2 * _MOREBITS, base)
    base = _where(x.isnan().logical_or(y.isnan()), math.nan, base)
    return base * _sign_of(y)


def _rule(result, name, operands):
    from .binary import _grad_rule
    return _grad_rule(result, "derivative", operands, name)


class TrigOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor`: inverse trigonometric / hyperbolic functions and friends."""

    def atan(self):
        """Arctangent (``torch.atan``), in radians."""
        x, dt = _f64(self)
        return _rule(_back(atan64(x), dt), "atan", (self._floating(),))

    arctan = atan

    def asin(self):
        """Arcsine (``torch.asin``): ``atan2(x, sqrt((1 - x)(1 + x)))``; NaN outside [-1, 1]."""
        x, dt = _f64(self)
        r = atan2_64(x, ((1.0 - x) * (1.0 + x)).sqrt())
        return _rule(_back(r, dt), "asin", (self._floating(),))

    arcsin = asin

    def acos(self):
        """Arccosine (``torch.acos``): ``2 atan2(sqrt(1 - x), sqrt(1 + x))``; NaN outside [-1, 1]."""
        x, dt = _f64(self)
        r = atan2_64((1.0 - x).sqrt(), (1.0 + x).sqrt()) * 2.0
        return _rule(_back(r, dt), "acos", (self._floating(),))

    arccos = acos

    def atan2(self, other):
        """``atan2(self, other)``, the angle of the point (other, self) (``torch.atan2``), with C's rules for
        signed zeros and infinities. Ints promote to float32."""
        a, b, _, dtype = binary_operands(self, other)
        if not dtype.is_float:
            a, b, dtype = a.cast(DType.float32), b.cast(DType.float32), DType.float32
        y64 = a if dtype == DType.float64 else a.cast(DType.float64)
        x64 = b if dtype == DType.float64 else b.cast(DType.float64)
        return _rule(_back(atan2_64(y64, x64), dtype), "atan2", (a, b))

    arctan2 = atan2

    def sinh(self):
        """Hyperbolic sine: a Taylor series for ``|x| < 1`` (to ``x^19``), ``(e^|x| - e^-|x|) / 2`` above, with
        ``e^|x| / 2`` as ``exp(|x| - ln 2)`` so that float64 does not overflow early."""
        x, dt = _f64(self)
        a = _abs(x)
        s = a * a
        series = a + a * s * _poly(s, _SINH_SERIES)
        big = (a - LN2).exp() - (-a).exp() * 0.5
        r = _where(a < 1.0, series, big)
        return _rule(_back(_odd(x, r), dt), "sinh", (self._floating(),))

    def cosh(self):
        """Hyperbolic cosine ``e^|x| / 2 + e^-|x| / 2`` (``exp(|x| - ln 2)`` for the first term)."""
        x, dt = _f64(self)
        a = _abs(x)
        r = (a - LN2).exp() + (-a).exp() * 0.5
        return _rule(_back(r, dt), "cosh", (self._floating(),))

    def asinh(self):
        """Inverse hyperbolic sine: ``log1p(a + a^2 / (1 + sqrt(1 + a^2)))`` for ``a = |x| < 1e8``,
        ``log(a) + ln 2`` above; odd."""
        x, dt = _f64(self)
        a = _abs(x)
        small = _where(a < _BIG, a, 0.0)
        r = _where(a < _BIG, log1p64(small + small * small / ((small * small + 1.0).sqrt() + 1.0)),
                   a.log() + LN2)
        return _rule(_back(_odd(x, r), dt), "asinh", (self._floating(),))

    arcsinh = asinh

    def acosh(self):
        """Inverse hyperbolic cosine: ``log1p(t + sqrt(2t + t^2))`` with ``t = x - 1`` for ``x < 2``,
        ``log(2x - 1 / (x + sqrt(x^2 - 1)))`` up to 1e8, ``log(x) + ln 2`` above; NaN below 1."""
        x, dt = _f64(self)
        t = x - 1.0
        near = log1p64(t + (t * 2.0 + t * t).sqrt())
        xm = _where(x < _BIG, x, 2.0)
        mid = (xm * 2.0 - (xm + (xm * xm - 1.0).sqrt()).recip()).log()
        far = x.log() + LN2
        r = _where(x < 2.0, near, _where(x < _BIG, mid, far))
        r = _where(x < 1.0, math.nan, r)
        return _rule(_back(r, dt), "acosh", (self._floating(),))

    arccosh = acosh

    def atanh(self):
        """Inverse hyperbolic tangent ``log1p(2a / (1 - a)) / 2``, ``a = |x|``; odd; ``atanh(+-1) = +-inf``, NaN
        beyond."""
        x, dt = _f64(self)
        a = _abs(x)
        r = log1p64((a * 2.0) / (1.0 - a)) * 0.5
        r = _where(a > 1.0, math.nan, r)
        return _rule(_back(_odd(x, r), dt), "atanh", (self._floating(),))

    arctanh = atanh

    def copysign(self, other):
        """``|self|`` with the sign bit of ``other`` (``torch.copysign``): the magnitude bits of ``self`` and the
        sign bit of ``other`` (read through ``view`` as integers), so ``-0.0`` and NaNs carry their sign both ways
        and NaN payloads are kept. Ints promote to float32."""
        a, b, _, dtype = binary_operands(self, other)
        if not dtype.is_float:
            a, b = a.cast(DType.float32), b.cast(DType.float32)
        bits = {16: DType.int16, 32: DType.int32, 64: DType.int64}[a.dtype.bits]
        sign = -(1 << (a.dtype.bits - 1))  # the sign bit alone (the most negative integer)
        out = ((a.view(bits) & ~sign) | (b.view(bits) & sign)).view(a.dtype)
        return _rule(out, "copysign", (a, b))

    def logaddexp(self, other):
        """``log(exp(self) + exp(other))`` without overflow: ``max + log1p(exp(-|a - b|))`` (float64 inside, so
        a few ulp); equal arguments (infinities included) give ``a + ln 2``."""
        a, b, _, dtype = binary_operands(self, other)
        if not dtype.is_float:
            a, b, dtype = a.cast(DType.float32), b.cast(DType.float32), DType.float32
        a64 = a if dtype == DType.float64 else a.cast(DType.float64)
        b64 = b if dtype == DType.float64 else b.cast(DType.float64)
        same = a64.eq(b64)
        d = _where(same, 0.0, a64 - b64)
        r = a64.maximum(b64) + log1p64((-_abs(d)).exp())
        r = _where(same, a64 + LN2, r)
        return _rule(_back(r, dtype), "logaddexp", (a, b))

    def lerp(self, end, weight):
        """``self + weight * (end - self)``, PyTorch's formula: ``end - (end - self) * (1 - weight)`` where
        ``|weight| >= 0.5`` (exact at ``weight = 1``). ``weight`` is a float or a tensor."""
        w = weight if not is_scalar(weight) else float(weight)
        start, stop, _, dtype = binary_operands(self, end)
        if not dtype.is_float:
            raise TypeError(f"lerp needs floating tensors, got {dtype.value}")
        diff = stop - start
        low = start + diff * w
        high = stop - diff * (1.0 - w)
        if is_scalar(w):
            return low if abs(w) < 0.5 else high
        w = as_tensor(start, w)
        return _where(w.abs() < 0.5, low, high)

    def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
        """``|self - other| <= atol + rtol * |other|`` elementwise (``torch.isclose``): equal values (infinities
        included) are close, other infinities are not, NaN is close to NaN only with ``equal_nan``."""
        if rtol < 0 or atol < 0:
            raise ValueError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
        a, b, _, dtype = binary_operands(self, other)
        if dtype == DType.bool:
            return a.eq(b)
        close = a.eq(b)
        if dtype.is_float:
            if equal_nan:
                close = close.logical_or(a.isnan().logical_and(b.isnan()))
            diff = (a - b).abs()
            close = close.logical_or(diff.isfinite().logical_and(diff <= _abs(b) * rtol + atol))
        else:
            diff = (a.cast(DType.float64) - b.cast(DType.float64)).abs()
            close = close.logical_or(diff <= _abs(b.cast(DType.float64)) * rtol + atol)
        return close

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
        """Whether every element is ``isclose``: a 0-d bool tensor (lazy; ``.item()`` after ``execute()``)."""
        return self.isclose(other, rtol, atol, equal_nan).all()


def _gelu_slope(x):
    from .unary import _gelu_slope as slope
    return slope(x)


def _d_copysign(ts, y):
    a = ts[0]
    ratio = _where(a.eq(0), 0.0, y / _where(a.eq(0), 1.0, a))
    return [ratio, None]


def _d_atan2(ts, y):
    a, b = ts
    den = a * a + b * b
    return [b / den, -a / den]


def _d_logaddexp(ts, y):
    a, b = ts
    return [(b - a).exp().__radd__(1.0).recip(), (a - b).exp().__radd__(1.0).recip()]


DERIVATIVES = {
    "tanh": lambda ts, y: [1.0 - y * y],         # (luminal.hl_ops.unary: PyTorch's tanh_backward)
    "sigmoid": lambda ts, y: [(1.0 - y) * y],    # (PyTorch's sigmoid_backward)
    "erf": lambda ts, y: [(-(ts[0] * ts[0])).exp() * (2.0 / math.sqrt(math.pi))],  # (PyTorch's erf derivative)
    "gelu": lambda ts, y: [_gelu_slope(ts[0])],  # (float32 gelu: PyTorch's GeluBackward)
    "atan": lambda ts, y: [(ts[0] * ts[0] + 1.0).recip()],
    "asin": lambda ts, y: [(1.0 - ts[0] * ts[0]).rsqrt()],
    "acos": lambda ts, y: [-((1.0 - ts[0] * ts[0]).rsqrt())],
    "sinh": lambda ts, y: [ts[0].cosh()],
    "cosh": lambda ts, y: [ts[0].sinh()],
    "asinh": lambda ts, y: [(ts[0] * ts[0] + 1.0).rsqrt()],
    "acosh": lambda ts, y: [(ts[0] * ts[0] - 1.0).rsqrt()],
    "atanh": lambda ts, y: [(1.0 - ts[0] * ts[0]).recip()],
    "atan2": _d_atan2,
    "copysign": _d_copysign,
    "logaddexp": _d_logaddexp,
}
"""Local derivatives for the ``derivative`` autograd rule: ``name -> f(operands, result) -> [d result / d
operand or None]`` (PyTorch's backward formulas)."""
