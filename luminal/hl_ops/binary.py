"""Binary high-level ops: arithmetic with PyTorch broadcasting and type promotion, comparisons, selection.

Operands may be tensors, Python scalars or symbolic expressions (``Expression``
or a symbol name), which become ``Constant`` nodes. Decompositions:
``a - b = a + (-1)*b``, ``a / b = a * recip(b)``, comparisons from
``LessThan`` (with NaN handled as PyTorch does), ``where`` as an exact
``Gather`` from the two candidates stacked on a new axis (no ``c*a + (1-c)*b``,
which turns ``inf``/``nan`` in the unselected branch into ``nan``). Bitwise ops on integers
(``& | ^ ~ << >>``, ``bitwise_*``) are the ``Bitwise`` primitive (``~x = x ^ -1``); on bool, ``& | ^ ~`` are
the logical ops.
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..dtype import DType, promote_types
from ..shape import to_expr
from ._util import as_tensor, binary_operands, broadcast_dims, broadcast_view, constant, is_scalar, operand_dtype


class BinaryOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with the binary ops."""

    # ------------------------------------------------------------------ primitives with broadcasting
    def _binary_primitive(self, op, other, dtype=None):
        a, b, dims, dtype = binary_operands(self, other, dtype)
        return a._apply(op, b, dims=dims, dtype=dtype if not isinstance(op, ops.LessThan) else DType.bool)

    # ------------------------------------------------------------------ arithmetic
    def add(self, other):
        """``self + other`` (bool: logical or)."""
        return self._binary_primitive(ops.Add(), other)

    def mul(self, other):
        """``self * other`` (bool: logical and). A bfloat16 tensor times a Python float multiplies by the
        float32 scalar and rounds once (PyTorch's CPU kernel keeps the scalar in float32)."""
        if _bf16_float_scalar(self, other):
            return self.cast(DType.float32).mul(other).cast(DType.bfloat16)
        return self._binary_primitive(ops.Mul(), other)

    def sub(self, other):
        """``self - other`` (= ``self + (-1) * other``); PyTorch rejects it when either operand is bool."""
        _reject_bool_subtraction(self, other)
        dtype = operand_dtype(self, other)
        return self.cast(dtype).add(as_tensor(self, other, dtype).neg())

    def rsub(self, other):
        """``other - self``."""
        _reject_bool_subtraction(self, other)
        return as_tensor(self, other, operand_dtype(self, other)).sub(self)

    def div(self, other, rounding_mode: str | None = None):
        """True division ``self / other`` (ints give float32, as in PyTorch); ``rounding_mode`` 'floor'/'trunc'."""
        if rounding_mode == "floor":
            return self.floor_divide(other)
        if rounding_mode == "trunc":
            dtype = operand_dtype(self, other)
            a, b, _, _ = binary_operands(self, other, dtype)
            if not dtype.is_float:  # exact: floor quotient, +1 where a nonzero remainder has the signs differing
                q = a.floor_divide(b)
                return where(a.remainder(b).ne(0).logical_and((a < 0).logical_xor(b < 0)), q + 1, q)
            if dtype != DType.float64:  # a * recip(b) in float64 rounds to the correctly rounded quotient
                return a.cast(DType.float64).div(b.cast(DType.float64)).cast(dtype).trunc()
            # float64: t = trunc of the exact quotient (a - fmod is a multiple of b); IEEE a / b rounds up onto
            # the next integer n when |b| - |fmod| (exact, Sterbenz) is within half an ulp of the quotient
            q, mod = a.div(b), a.fmod(b)
            t = (a - mod).div(b).round()
            n = t + where((a < 0).logical_xor(b < 0), -1.0, 1.0)
            half_ulp = (t.abs().log2().floor().maximum(-1.0) - 53.0).exp2()
            onto_n = mod.ne(0).logical_and(b.isfinite()).logical_and((b.abs() - mod.abs()) <= b.abs() * half_ulp)
            return where(q.isfinite(), where(onto_n, n, t), q)
        if rounding_mode is not None:
            raise ValueError(f"rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
        dtype = operand_dtype(self, other)
        if not dtype.is_float:
            dtype = DType.float32
        if dtype == DType.bfloat16:  # the float32 quotient (as PyTorch: a Python float divisor stays float32),
            # from float64's a * (1/b), which rounds to the correctly rounded float32 quotient; then rounded once
            wide = float(np.float32(other)) if is_scalar(other) else as_tensor(self, other, dtype).cast(DType.float64)
            return self.cast(DType.float64).div(wide).cast(DType.float32).cast(dtype)
        other = as_tensor(self, other, dtype)
        return self.cast(dtype).mul(other.recip())

    def rdiv(self, other):
        """``other / self``."""
        dtype = operand_dtype(self, other)
        return as_tensor(self, other, dtype if dtype.is_float else DType.float32).div(self)

    def floor_divide(self, other):
        """``floor(self / other)`` (PyTorch ``//``): exact for integers, ``floor`` of the quotient for floats."""
        dtype = operand_dtype(self, other)
        if dtype == DType.bool:
            raise TypeError("floor division of bool tensors is not supported")
        a, b, _, _ = binary_operands(self, other, dtype)
        if dtype.is_half:  # compute in float32 (exact floor of the half inputs), round the result
            return a.cast(DType.float32).floor_divide(b.cast(DType.float32)).cast(dtype)
        if dtype.is_float:  # PyTorch's div_floor: round (a - fmod(a, b)) / b, not floor(a * recip(b))
            mod = a.fmod(b)
            q = (a - mod).div(b)
            q = where(mod.ne(0).logical_and((b < 0).logical_xor(mod < 0)), q - 1.0, q)
            fl = q.floor()
            fl = where((q - fl) > 0.5, fl + 1.0, fl)
            return where(b.eq(0), a.div(b), fl)
        if dtype.bits < 64:  # in int64: a - a mod b cannot wrap there; the int64 quotient wraps back on the cast
            # (int8: -128 // -1 = 128 -> -128, as PyTorch)
            return a.cast(DType.int64).floor_divide(b.cast(DType.int64)).cast(dtype)
        # m = a - a mod b is an exact multiple of b. Its float64 quotient is exact below 2^50 and within 2^12 of
        # the true one above (m has 64 bits, float64 53); the remainder m - q0*b is then exact and small (it wraps
        # back in int64 arithmetic), and its own float64 quotient corrects q0 exactly. |b| == 1 is a * b (int64's
        # -2^63 // -1 wraps, as in PyTorch; and q0 could leave int64's range there).
        m = a.sub(a.remainder(b))
        bf = b.cast(DType.float64)
        q0 = m.cast(DType.float64).div(bf).round().cast(dtype)
        q = q0.add(m.sub(q0.mul(b)).cast(DType.float64).div(bf).round().cast(dtype))
        return where(b.eq(1).logical_or(b.eq(-1)), a.mul(b), q)

    def remainder(self, other):
        """Floor modulo with the sign of the divisor (PyTorch ``%`` / ``remainder``)."""
        return self._binary_primitive(ops.Mod(), other)

    def fmod(self, other):
        """C-style modulo with the sign of the dividend: ``a - trunc(a / b) * b``."""
        a, b, _, dtype = binary_operands(self, other)
        # fmod(a, b) = sign(a) * remainder(|a|, |b|): exact, and right for an infinite divisor
        r = a.abs().remainder(b.abs())
        return where(a < 0, -r, r)

    def neg(self):
        """``-self`` (``(-1) * self``); not defined for bool."""
        if self.dtype == DType.bool:
            raise TypeError("negation of a bool tensor is not supported; use ~ (logical_not) instead")
        return self.mul(constant(self.graph, -1, self.dtype))

    def pow(self, exponent):
        """``self ** exponent`` with PyTorch semantics (a negative base keeps its sign for integer exponents).

        Integer scalar exponents use exact repeated multiplication; other exponents use
        ``exp2(y * log2|x|)`` with the sign, zero and NaN cases fixed up. The gradients are PyTorch's formulas
        (a :attr:`Graph.grad_rules` entry): ``d/dx = y * x ** (y - 1)`` (0 where ``y == 0``) and
        ``d/dy = x ** y * log(x)`` (0 where ``x == 0`` and ``y >= 0``), so they are NaN for a negative base with a
        non-integer exponent (and in ``d/dy`` for any negative base), ``+-inf`` at a zero base with a negative
        exponent and follow ``inf`` bases as PyTorch does.
        """
        if is_scalar(exponent) and not isinstance(exponent, bool):
            e = float(exponent)
            dtype = operand_dtype(self, exponent)
            if e.is_integer() and abs(e) <= 1024:
                n = int(e)
                if n < 0 and not dtype.is_float:
                    raise ValueError("integers to negative integer powers are not allowed (as in PyTorch)")
                x = self.cast(dtype)
                if n == 0:  # 1 everywhere (NaN and inf bases too), yet read from x: its gradient is 0, as torch's
                    if not dtype.is_float:
                        return constant(self.graph, 1, dtype, ()).expand(self.dims)
                    one = x.lt(x).logical_not().cast(dtype)  # x < x is false for every x, NaN included
                    return _grad_rule(one, "pow", (x,), 0.0)
                result, base, k = None, x, abs(n)
                while k:
                    if k & 1:
                        result = base if result is None else result * base
                    k >>= 1
                    if k:
                        base = base * base
                return _grad_rule(result.recip() if n < 0 else result, "pow", (x,), e)
            if e == 0.5:  # PyTorch uses sqrt / rsqrt for these two scalar exponents
                x = self.cast(dtype)
                return _grad_rule(x.sqrt(), "pow", (x,), e)
            if e == -0.5:
                x = self.cast(dtype)
                return _grad_rule(x.rsqrt(), "pow", (x,), e)
            scalar = e
            exponent = constant(self.graph, e, dtype)  # the general path below fixes signs, inf and NaN cases
        else:
            scalar = None
        dtype = operand_dtype(self, exponent)
        if not dtype.is_float:
            # integer tensor exponents: compute in float64 and round (exact for representable results)
            if not self.dtype.is_float and not getattr(exponent, "dtype", dtype).is_float:  # Expression: int
                return self.cast(DType.float64).pow(as_tensor(self, exponent).cast(DType.float64)).round().cast(dtype)
            dtype = DType.float32
        x, y, _, _ = binary_operands(self, exponent, dtype)
        # |x| ** y through exp2/log2 on a safe base: a zero base gets its value from a where
        ax = x.abs()
        zero = ax.eq(0.0)
        mag = where(zero, where(y < 0, math.inf, where(y > 0, 0.0, y * 0.0 + 1.0)),
                    (y * where(zero, 1.0, ax).log2()).exp2())
        y_int = y.eq(y.floor())
        y_odd = y_int.logical_and(y.remainder(2.0).eq(1.0))
        signed = where(y_odd, -mag, mag)
        # a negative base to a fractional power is NaN, except -inf (C pow: +inf, or +0 for y < 0)
        negative_base = where(y_int, signed, where(x.eq(-math.inf).logical_or(zero), mag, math.nan))
        negative = (x < 0).logical_or(x.recip() < 0)  # -0 counts: (-0) ** -1 is -inf
        result = where(negative, negative_base, mag)
        # x**0 == 1 and 1**y == 1 even for NaN/inf, and (-1)**±inf == 1; only the cases exp2/log2 get wrong
        one = y.eq(0.0).logical_and(x.isfinite().logical_not())
        one = one.logical_or(x.eq(1.0).logical_and(y.isfinite().logical_not()))
        one = one.logical_or(x.eq(-1.0).logical_and(y.isinf()))
        return _grad_rule(where(one, 1.0, result), "pow", (x, y), scalar)

    def rpow(self, base):
        """``base ** self``."""
        return as_tensor(self, base, operand_dtype(self, base)).pow(self)

    def maximum(self, other):
        """Elementwise maximum; NaN in either operand propagates (``torch.maximum``). At ties each operand gets
        half of the gradient, as in PyTorch."""
        a, b, _, dtype = binary_operands(self, other)
        return _grad_rule(a._select_max(b), "maximum", (a, b)) if dtype.is_float else a._select_max(b)

    def minimum(self, other):
        """Elementwise minimum; NaN in either operand propagates (``torch.minimum``). At ties each operand gets
        half of the gradient, as in PyTorch."""
        a, b, _, dtype = binary_operands(self, other)
        return _grad_rule(a._select_min(b), "minimum", (a, b)) if dtype.is_float else a._select_min(b)

    def _select_max(self, b):
        """``max(self, b)`` of two operands of the same dtype and dims (NaN propagates; ties take ``self``)."""
        take_b = self < b
        if self.dtype.is_float:
            take_b = take_b.logical_or(b.isnan())
        return self.where_(take_b, b)

    def _select_min(self, b):
        """``min(self, b)`` of two operands of the same dtype and dims (NaN propagates; ties take ``self``)."""
        take_b = b < self
        if self.dtype.is_float:
            take_b = take_b.logical_or(b.isnan())
        return self.where_(take_b, b)

    def clip(self, min=None, max=None):  # noqa: A002 - PyTorch's argument names
        """Clamp into ``[min, max]`` (either may be None); ``clamp`` is an alias. The gradient reaches ``self``
        wherever it is inside the bounds, ends included (``torch.clamp``; no tie splitting as in ``maximum``)."""
        out = self
        if min is not None:
            a, b, _, _ = binary_operands(out, min)
            out = a._select_max(b)
        if max is not None:
            a, b, _, _ = binary_operands(out, max)
            out = a._select_min(b)
        if min is None and max is None:
            raise ValueError("clip needs at least one of min and max")
        if out.dtype.is_float and all(v is None or is_scalar(v) for v in (min, max)):
            # torch's clamp_backward: g where min <= x <= max, else 0 (also at a NaN x, which the
            # selections above pass through as self)
            return _grad_rule(out, "clamp", (self,), (min, max))
        return out

    clamp = clip

    # ------------------------------------------------------------------ comparisons (bool results)
    def lt(self, other):
        """``self < other`` as a bool tensor."""
        return self._binary_primitive(ops.LessThan(), other)

    def gt(self, other):
        """``self > other``."""
        a, b, _, _ = binary_operands(self, other)
        return b.lt(a)

    def _not_nan_pair(self, a, b, dtype):
        if not dtype.is_float:
            return None
        return a.isnan().logical_not().logical_and(b.isnan().logical_not())

    def le(self, other):
        """``self <= other`` (False where either is NaN)."""
        a, b, _, dtype = binary_operands(self, other)
        out = b.lt(a).logical_not()
        ok = self._not_nan_pair(a, b, dtype)
        return out if ok is None else out.logical_and(ok)

    def ge(self, other):
        """``self >= other`` (False where either is NaN)."""
        a, b, _, _ = binary_operands(self, other)
        return b.le(a)

    def eq(self, other):
        """``self == other`` elementwise (False where either is NaN)."""
        a, b, _, dtype = binary_operands(self, other)
        if dtype == DType.bool:
            return a.logical_xor(b).logical_not()
        out = a.lt(b).logical_or(b.lt(a)).logical_not()
        ok = self._not_nan_pair(a, b, dtype)
        return out if ok is None else out.logical_and(ok)

    def ne(self, other):
        """``self != other`` elementwise (True where either is NaN)."""
        return self.eq(other).logical_not()

    def isnan(self):
        """True where the value is NaN (NaN is the only value neither below +inf nor above -inf)."""
        if not self.dtype.is_float:
            return constant(self.graph, False, DType.bool, ()).expand(self.dims)
        below = self.lt(math.inf)
        above = constant(self.graph, -math.inf, self.dtype, ()).lt(self)
        return below.logical_or(above).logical_not()

    def isinf(self):
        """True at +inf and -inf."""
        if not self.dtype.is_float:
            return constant(self.graph, False, DType.bool, ()).expand(self.dims)
        return self.eq(math.inf).logical_or(self.eq(-math.inf))

    def isfinite(self):
        """True where the value is neither inf nor NaN."""
        if not self.dtype.is_float:
            return constant(self.graph, True, DType.bool, ()).expand(self.dims)
        return self.lt(math.inf).logical_and(constant(self.graph, -math.inf, self.dtype, ()).lt(self))

    # ------------------------------------------------------------------ logic (bool)
    def _as_bool(self):
        return self if self.dtype == DType.bool else self.ne(0)

    def logical_not(self):
        """``not self`` (nonzero counts as True)."""
        x = self._as_bool()
        return x.lt(constant(self.graph, True, DType.bool, ()))

    def logical_and(self, other):
        return self._as_bool().mul(as_tensor(self, other)._as_bool())

    def logical_or(self, other):
        return self._as_bool().add(as_tensor(self, other)._as_bool())

    def logical_xor(self, other):
        a, b = self._as_bool(), as_tensor(self, other)._as_bool()
        return a.lt(b).logical_or(b.lt(a))

    # ------------------------------------------------------------------ selection
    def where_(self, cond, other):
        """``other`` where ``cond`` is True, ``self`` elsewhere (helper for ``where(cond, other, self)``)."""
        from .. import hl_ops
        return hl_ops.where(cond, other, self)

    def where(self, cond, other):
        """PyTorch's ``x.where(cond, y)``: ``self`` where ``cond``, ``other`` elsewhere."""
        from .. import hl_ops
        return hl_ops.where(cond, self, other)

    # ------------------------------------------------------------------ Python operators
    def __add__(self, other): return self.add(other)
    def __radd__(self, other): return as_tensor(self, other, operand_dtype(self, other)).add(self)
    def __sub__(self, other): return self.sub(other)
    def __rsub__(self, other): return self.rsub(other)
    def __mul__(self, other): return self.mul(other)
    def __rmul__(self, other): return as_tensor(self, other, operand_dtype(self, other)).mul(self)
    def __truediv__(self, other): return self.div(other)
    def __rtruediv__(self, other): return self.rdiv(other)
    def __floordiv__(self, other): return self.floor_divide(other)
    def __rfloordiv__(self, other): return as_tensor(self, other, operand_dtype(self, other)).floor_divide(self)
    def __mod__(self, other): return self.remainder(other)
    def __rmod__(self, other): return as_tensor(self, other, operand_dtype(self, other)).remainder(self)
    def __pow__(self, other): return self.pow(other)
    def __rpow__(self, other): return self.rpow(other)
    def __neg__(self): return self.neg()
    def __pos__(self): return self
    def __abs__(self): return self.abs()
    def __lt__(self, other): return self.lt(other)
    def __gt__(self, other): return self.gt(other)
    def __le__(self, other): return self.le(other)
    def __ge__(self, other): return self.ge(other)
    def __eq__(self, other): return self.eq(other)  # type: ignore[override]
    def __ne__(self, other): return self.ne(other)  # type: ignore[override]
    __hash__ = object.__hash__

    def __invert__(self): return self.bitwise_not()
    def __and__(self, other): return self.bitwise_and(other)
    def __or__(self, other): return self.bitwise_or(other)
    def __xor__(self, other): return self.bitwise_xor(other)
    def __rand__(self, other): return as_tensor(self, other, operand_dtype(self, other)).bitwise_and(self)
    def __ror__(self, other): return as_tensor(self, other, operand_dtype(self, other)).bitwise_or(self)
    def __rxor__(self, other): return as_tensor(self, other, operand_dtype(self, other)).bitwise_xor(self)
    def __lshift__(self, other): return self.bitwise_left_shift(other)
    def __rshift__(self, other): return self.bitwise_right_shift(other)
    def __rlshift__(self, other): return as_tensor(self, other, operand_dtype(self, other)).bitwise_left_shift(self)
    def __rrshift__(self, other): return as_tensor(self, other, operand_dtype(self, other)).bitwise_right_shift(self)

    # ------------------------------------------------------------------ bitwise (integers and bool)
    def _bitwise(self, kind: str, other):
        dtype = operand_dtype(self, other)
        shift = kind in ("shl", "shr")
        if dtype.is_float or (shift and dtype == DType.bool):
            name = {"and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "shl": "bitwise_left_shift",
                    "shr": "bitwise_right_shift"}[kind]
            raise TypeError(f"{name} is only defined for integer{'' if shift else ' and bool'} tensors, got {dtype}")
        if dtype == DType.bool:  # logical ops: the primitives the e-graph rules know
            return {"and": self.logical_and, "or": self.logical_or, "xor": self.logical_xor}[kind](other)
        return self._binary_primitive(ops.Bitwise(kind), other, dtype)

    def bitwise_and(self, other):
        """``self & other`` (``torch.bitwise_and``): integer or bool tensors, PyTorch's type promotion."""
        return self._bitwise("and", other)

    def bitwise_or(self, other):
        """``self | other`` (``torch.bitwise_or``)."""
        return self._bitwise("or", other)

    def bitwise_xor(self, other):
        """``self ^ other`` (``torch.bitwise_xor``)."""
        return self._bitwise("xor", other)

    def bitwise_not(self):
        """``~self`` (``torch.bitwise_not``): the complement of an integer, logical not of a bool (``x ^ -1``)."""
        if self.dtype.is_float:
            raise TypeError(f"bitwise_not is only defined for integer and bool tensors, got {self.dtype}")
        if self.dtype == DType.bool:
            return self.logical_not()
        return self._binary_primitive(ops.Bitwise("xor"), constant(self.graph, -1, self.dtype), self.dtype)

    def bitwise_left_shift(self, other):
        """``self << other`` (``torch.bitwise_left_shift``; integers only). Bits shifted out are lost (wrap-around);
        a shift by a negative amount or by at least the bit width gives 0, as PyTorch's CPU kernels do."""
        return self._bitwise("shl", other)

    def bitwise_right_shift(self, other):
        """``self >> other`` (``torch.bitwise_right_shift``): arithmetic for signed types, logical for unsigned.
        A shift by a negative amount or by at least the bit width gives the sign fill (-1 for a negative signed
        value, else 0), as PyTorch's CPU kernels do."""
        return self._bitwise("shr", other)


def _grad_rule(result, name: str, operands, param=None):
    """Have autograd differentiate ``result`` (a new float node) by the rule ``name`` of
    ``luminal.training.autograd`` over ``operands`` (the tensors as read) instead of through its primitives."""
    graph = result.graph
    node = graph.nodes[result.id]
    # (result may be its node read through a reshape, such as where()'s squeeze of the gathered axis)
    if result.dtype.is_float and result.tracker.is_contiguous() and result.numel() == _node_numel(node) and \
            all(o.id != result.id for o in operands):
        graph.grad_rules[result.id] = (name, tuple((o.id, o.tracker) for o in operands), param, result.dims)
    return result


def _node_numel(node):
    n = to_expr(1)
    for d in node.dims:
        n = n * d
    return n


def _bf16_float_scalar(tensor, other) -> bool:
    """``tensor`` is bfloat16 and ``other`` a Python/numpy float scalar (not an Expression)."""
    return tensor.dtype == DType.bfloat16 and isinstance(other, (float, np.floating)) and not isinstance(other, bool)


def _reject_bool_subtraction(a, b) -> None:
    if a.dtype == DType.bool or getattr(b, "dtype", None) == DType.bool or isinstance(b, (bool, np.bool_)):
        raise TypeError("subtraction with a bool operand is not supported (PyTorch rejects it too); use "
                        "logical_xor() or ~ instead")


def where(cond, a, b):
    """``a`` where ``cond`` else ``b`` (``torch.where``); exact for inf/NaN in the unselected branch.

    Built as ``Gather`` along a new axis of size 2 holding ``[b, a]`` (stacked by padding + ``Add``), indexed
    by ``cond`` cast to int32.
    """
    from ..tensor import GraphTensor

    like = next((x for x in (cond, a, b) if isinstance(x, GraphTensor)), None)
    if like is None:
        raise TypeError("where() needs at least one GraphTensor argument")
    cond = as_tensor(like, cond, DType.bool if not isinstance(cond, GraphTensor) else None)._as_bool()
    if isinstance(a, GraphTensor) and isinstance(b, GraphTensor):
        dtype = promote_types(a.dtype, b.dtype)
    elif isinstance(a, GraphTensor):
        dtype = operand_dtype(a, b)
    elif isinstance(b, GraphTensor):
        dtype = operand_dtype(b, a)
    else:
        dtype = operand_dtype(constant(like.graph, a, DType.float32 if isinstance(a, float) else
                                       DType.bool if isinstance(a, bool) else DType.int64), b)
    a, b = as_tensor(like, a, dtype), as_tensor(like, b, dtype)
    dims = broadcast_dims(cond.dims, a.dims, b.dims)
    a = a._view(broadcast_view(a.tracker, dims)).unsqueeze(-1)
    b = b._view(broadcast_view(b.tracker, dims)).unsqueeze(-1)
    stacked = b.pad_axis(-1, 0, 1).add(a.pad_axis(-1, 1, 0))
    index = cond._view(broadcast_view(cond.tracker, dims)).cast(DType.int32).unsqueeze(-1)
    return stacked.gather(-1, index).squeeze(-1)
