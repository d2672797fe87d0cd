"""Elementwise operators: arithmetic, comparisons, logic, bitwise, math functions, activations, casts."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np
from onnx import TensorProto as TP

from ...dtype import DType
from ...hl_ops import where
from .. import dtypes
from ..registry import NotFoldable, register, set_fold, typed
from ._common import as_obj, compare, expr, is_obj, nonneg, obj_map, simplify_obj



# ---------------------------------------------------------------------------------------------------- arithmetic
@register("Add")
def _add(ctx):
    return [ctx.t(0) + ctx.t(1)]


@register("Sub")
def _sub(ctx):
    a, b = ctx.t(0), ctx.t(1)
    if a.dtype == DType.bool:
        raise TypeError("Sub is not defined for bool")
    return [a - b]


@register("Mul")
def _mul(ctx):
    return [ctx.t(0) * ctx.t(1)]


@register("Div")
def _div(ctx):
    a, b = ctx.t(0), ctx.t(1)
    if a.dtype.is_float:
        return [a / b]
    return [a.div(b, rounding_mode="trunc")]


@register("Mod")
def _mod(ctx):
    a, b = ctx.t(0), ctx.t(1)
    if ctx.attr("fmod", 0):
        return [a.fmod(b)]
    return [a.remainder(b)]


@register("Pow")
def _pow(ctx):
    x, y = ctx.t(0), ctx.t(1)
    if x.dtype.is_float:
        return [x.pow(y.cast(x.dtype))]
    # integer base: compute in float64, then truncate as numpy's power(...).astype(base type) does; results
    # within rounding of an integer are that integer (exp2/log2 gives 728.9999... for 3**6)
    out = x.cast(DType.float64).pow(y.cast(DType.float64))
    r = out.round()
    close = (out - r).abs() <= r.abs().maximum(1.0) * 1e-9
    return [where(close, r, out.trunc()).cast(x.dtype)]


@register("Neg")
def _neg(ctx):
    return [-ctx.t(0)]


@register("Abs")
def _abs(ctx):
    return [ctx.t(0).abs()]


@register("Reciprocal")
def _recip(ctx):
    return [ctx.t(0).recip()]


def _variadic(fn):
    def handler(ctx):
        ts = [ctx.t(i) for i in range(len(ctx)) if ctx.has(i)]
        return [reduce(fn, ts)]
    return handler


register("Sum")(_variadic(lambda a, b: a + b))
register("Max")(_variadic(lambda a, b: a.maximum(b)))
register("Min")(_variadic(lambda a, b: a.minimum(b)))


@register("Mean")
def _mean(ctx):
    ts = [ctx.t(i) for i in range(len(ctx)) if ctx.has(i)]
    return [reduce(lambda a, b: a + b, ts) / float(len(ts))]


# ---------------------------------------------------------------------------------------------------- comparisons and logic
register("Equal")(lambda ctx: [ctx.t(0).eq(ctx.t(1))])
register("Less")(lambda ctx: [ctx.t(0).lt(ctx.t(1))])
register("LessOrEqual")(lambda ctx: [ctx.t(0).le(ctx.t(1))])
register("Greater")(lambda ctx: [ctx.t(0).gt(ctx.t(1))])
register("GreaterOrEqual")(lambda ctx: [ctx.t(0).ge(ctx.t(1))])
register("And")(lambda ctx: [ctx.t(0).logical_and(ctx.t(1))])
register("Or")(lambda ctx: [ctx.t(0).logical_or(ctx.t(1))])
register("Xor")(lambda ctx: [ctx.t(0).logical_xor(ctx.t(1))])
register("Not")(lambda ctx: [ctx.t(0).logical_not()])


@register("Where")
def _where(ctx):
    return [where(ctx.t(0), ctx.t(1), ctx.t(2))]


# ---------------------------------------------------------------------------------------------------- bitwise
def _native(ctx, k: int = 0):
    """Input ``k``, an integer (or bool) tensor in its own type (``uint8`` data stays a luminal ``uint8`` tensor:
    the ``Bitwise`` primitive works on its bits)."""
    x = ctx.t_raw(k)
    if not (x.dtype.is_int or x.dtype == DType.bool):
        raise TypeError(f"{ctx.op_type} needs integer operands; input {k} is {dtypes.name(ctx.type(k))}")
    return x


def _bitwise(method):
    def handler(ctx):
        a, b = _native(ctx, 0), _native(ctx, 1)
        if a.dtype != b.dtype:
            raise TypeError(f"{ctx.op_type} needs operands of one type, got {dtypes.name(ctx.type(0))} and "
                            f"{dtypes.name(ctx.type(1))}")
        return [getattr(a, method)(b)]
    return handler


register("BitwiseAnd")(_bitwise("bitwise_and"))
register("BitwiseOr")(_bitwise("bitwise_or"))
register("BitwiseXor")(_bitwise("bitwise_xor"))


@register("BitwiseNot")
def _bitwise_not(ctx):
    return [_native(ctx).bitwise_not()]


@register("BitShift")
def _bitshift(ctx):
    """Shifts of unsigned integers; an amount of at least the bit width gives 0 (PyTorch's results)."""
    x, s = _native(ctx, 0), _native(ctx, 1)
    direction = ctx.attr("direction", "LEFT")
    if direction == "LEFT":
        out = x.bitwise_left_shift(s)
    elif direction == "RIGHT":
        out = x.bitwise_right_shift(s)
    else:
        raise ValueError(f"direction must be LEFT or RIGHT, got {direction!r}")
    return [out]


# ---------------------------------------------------------------------------------------------------- math functions
_UNARY = {
    "Sqrt": lambda x: x.sqrt(), "Exp": lambda x: x.exp(), "Log": lambda x: x.log(),
    "Sin": lambda x: x.sin(), "Cos": lambda x: x.cos(), "Tan": lambda x: x.tan(),
    "Asin": lambda x: x.asin(), "Acos": lambda x: x.acos(), "Atan": lambda x: x.atan(), "Sinh": lambda x: x.sinh(),
    "Cosh": lambda x: x.cosh(), "Asinh": lambda x: x.asinh(), "Acosh": lambda x: x.acosh(), "Atanh": lambda x: x.atanh(), "Tanh": lambda x: x.tanh(), "Erf": lambda x: x.erf(),
    "Sigmoid": lambda x: x.sigmoid(), "Floor": lambda x: x.floor(), "Ceil": lambda x: x.ceil(),
    "Round": lambda x: x.round(), "Relu": lambda x: x.relu(), "Softsign": lambda x: x.softsign(),
    "Softplus": lambda x: x.softplus(), "Mish": lambda x: x.mish(),
    "HardSwish": lambda x: x * (x / 6.0 + 0.5).clip(0.0, 1.0),
}


def _unary_handler(fn):
    return lambda ctx: [fn(ctx.t(0))]


for _name, _fn in _UNARY.items():
    register(_name)(_unary_handler(_fn))


@register("Sign")
def _sign(ctx):
    x = ctx.t(0)
    s = x.sign()
    return [where(x.isnan(), x, s) if x.dtype.is_float else s]


@register("IsNaN")
def _isnan(ctx):
    return [ctx.t(0).isnan()]


@register("IsInf")
def _isinf(ctx):
    x = ctx.t(0)
    neg, pos = ctx.attr("detect_negative", 1), ctx.attr("detect_positive", 1)
    out = None
    if pos:
        out = x.eq(math.inf)
    if neg:
        n = x.eq(-math.inf)
        out = n if out is None else out.logical_or(n)
    return [out if out is not None else x.isnan().logical_and(x.isnan().logical_not())]


# ---------------------------------------------------------------------------------------------------- activations
@register("LeakyRelu")
def _leaky(ctx):
    x, alpha = ctx.t(0), ctx.attr("alpha", 0.01)
    return [where(x < 0, x * alpha, x)]


@register("PRelu")
def _prelu(ctx):
    x, slope = ctx.t(0), ctx.t(1)
    return [where(x < 0, x * slope, x)]


@register("Elu")
def _elu(ctx):
    return [ctx.t(0).elu(ctx.attr("alpha", 1.0))]


@register("Selu")
def _selu(ctx):
    x = ctx.t(0)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return [where(x > 0, x, (x.minimum(0.0).exp() - 1.0) * alpha) * gamma]


@register("Celu")
def _celu(ctx):
    return [ctx.t(0).celu(ctx.attr("alpha", 1.0))]


@register("ThresholdedRelu")
def _thresholded(ctx):
    x = ctx.t(0)
    return [where(x > ctx.attr("alpha", 1.0), x, 0.0)]


@register("HardSigmoid")
def _hardsigmoid(ctx):
    x = ctx.t(0)
    return [(x * ctx.attr("alpha", 0.2) + ctx.attr("beta", 0.5)).clip(0.0, 1.0)]


@register("Shrink")
def _shrink(ctx):
    x = ctx.t(0)
    lambd, bias = ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    return [where(x < -lambd, x + bias, where(x > lambd, x - bias, 0.0)).cast(x.dtype)]


@register("Gelu")
def _gelu(ctx):
    x = ctx.t(0)
    return [x.gelu(ctx.attr("approximate", "none"))]


@register("Swish")
def _swish(ctx):
    x = ctx.t(0)
    return [x * (x * ctx.attr("alpha", 1.0)).sigmoid()]


@register("Clip")
def _clip(ctx):
    x = ctx.t(0)
    if ctx.has(1):
        x = x.maximum(ctx.t(1).cast(x.dtype))
    if ctx.has(2):
        x = x.minimum(ctx.t(2).cast(x.dtype))
    return [x]


@register("Identity")
def _identity(ctx):
    return [ctx.value(0)]


# ---------------------------------------------------------------------------------------------------- casts
def cast_tensor(x, to: int):
    """``x`` converted to ONNX type ``to`` in luminal's dtype of that type: integers to narrower integers wrap
    around, floats to integers truncate toward zero (through int64 for types narrower than 64 bits, so values
    past the target's range wrap as numpy's ``astype`` does instead of hitting C's undefined conversion), floats
    to bfloat16/float16 round to nearest even."""
    if to not in dtypes.SUPPORTED:
        raise TypeError(f"Cast to {dtypes.name(to)} is not supported (supported: {dtypes.supported_names()})")
    target = dtypes.luminal(to)
    if to == TP.BOOL:
        return x.ne(0) if x.dtype != DType.bool else x
    if x.dtype.is_float and target.is_int:
        x = x.trunc()
        if target.bits < 64:
            x = x.cast(DType.int64)
    return typed(x.cast(target), to)


@register("Cast")
def _cast(ctx):
    return [cast_tensor(ctx.t(0), ctx.attr("to"))]


@register("CastLike")
def _castlike(ctx):
    return [cast_tensor(ctx.t(0), ctx.type(1))]


@register("BitCast", min_version=26)
def _bitcast(ctx):
    """Reinterpret the bits as another type of the same width: the ``BitCast`` primitive (``x.view(dtype)``),
    bit-exact for floats (NaN payloads, -0.0); to or from bool (one byte, 0 or 1) a wrapping Cast. A value known
    at import time folds with numpy."""
    src, to = ctx.type(0), ctx.attr("to")
    if to not in dtypes.SUPPORTED:
        raise TypeError(f"BitCast to {dtypes.name(to)} is not supported (supported: {dtypes.supported_names()})")
    a, b = dtypes.luminal(src), dtypes.luminal(to)
    if a.bits != b.bits:
        raise TypeError(f"BitCast needs types of one width, got {dtypes.name(src)} ({a.bits} bits) and "
                        f"{dtypes.name(to)} ({b.bits} bits)")
    if DType.bool in (a, b):
        return [typed(ctx.t_raw(0).cast(b), to)]
    return [typed(ctx.t_raw(0).view(b), to)]


@set_fold("BitCast")
def _fold_bitcast(ctx):
    arr, to = ctx.static(0), ctx.attr("to")
    if is_obj(arr) or to not in dtypes.NUMPY_OF:
        raise NotFoldable()
    want = dtypes.numpy(to)
    if arr.dtype.itemsize != want.itemsize:
        raise NotFoldable()
    return [typed(np.ascontiguousarray(arr).view(want), to)]


# ---------------------------------------------------------------------------------------------------- import-time folding
def _np_binary(num, obj=None):
    def fold(ctx):
        a, b = ctx.static(0), ctx.static(1)
        if is_obj(a) or is_obj(b):
            if obj is None:
                raise NotFoldable()
            return [obj_map(obj, a, b)]
        with np.errstate(all="ignore"):
            return [num(a, b)]
    return fold


def _trunc_div(a, b):
    if a.dtype.kind in "iu":
        q = np.floor_divide(a, b)
        return q + ((np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)
    return np.divide(a, b)


def _obj_div(x, y):
    if not (nonneg(x) and nonneg(y)):
        raise NotFoldable()
    return expr(x) // expr(y)


def _obj_mod(x, y):
    if not (nonneg(x) and nonneg(y)):
        raise NotFoldable()
    return expr(x) % expr(y)


set_fold("Add")(_np_binary(lambda a, b: (a + b).astype(np.result_type(a, b)), lambda x, y: expr(x) + expr(y)))
set_fold("Sub")(_np_binary(lambda a, b: (a - b).astype(np.result_type(a, b)), lambda x, y: expr(x) - expr(y)))
set_fold("Mul")(_np_binary(lambda a, b: (a * b).astype(np.result_type(a, b)), lambda x, y: expr(x) * expr(y)))
set_fold("Div")(_np_binary(lambda a, b: _trunc_div(a, b).astype(np.result_type(a, b)), _obj_div))
set_fold("Equal")(_np_binary(np.equal, lambda x, y: compare(x, y) == 0))
set_fold("Less")(_np_binary(np.less, lambda x, y: compare(x, y) < 0))
set_fold("LessOrEqual")(_np_binary(np.less_equal, lambda x, y: compare(x, y) <= 0))
set_fold("Greater")(_np_binary(np.greater, lambda x, y: compare(x, y) > 0))
set_fold("GreaterOrEqual")(_np_binary(np.greater_equal, lambda x, y: compare(x, y) >= 0))
set_fold("And")(_np_binary(np.logical_and))
set_fold("Or")(_np_binary(np.logical_or))
set_fold("Xor")(_np_binary(np.logical_xor))


@set_fold("Mod")
def _fold_mod(ctx):
    a, b = ctx.static(0), ctx.static(1)
    if is_obj(a) or is_obj(b):
        if ctx.attr("fmod", 0):
            raise NotFoldable()
        return [obj_map(_obj_mod, a, b)]
    with np.errstate(all="ignore"):
        out = np.fmod(a, b) if ctx.attr("fmod", 0) else np.mod(a, b)
    return [out.astype(np.result_type(a, b))]


@set_fold("Not")
def _fold_not(ctx):
    return [np.logical_not(ctx.static(0))]


@set_fold("Neg")
def _fold_neg(ctx):
    a = ctx.static(0)
    return [obj_map(lambda x: -expr(x), a) if is_obj(a) else -a]


@set_fold("Abs")
def _fold_abs(ctx):
    a = ctx.static(0)
    if is_obj(a):
        return [obj_map(lambda x: x if nonneg(x) else _raise(), a)]
    return [np.abs(a)]


def _raise():
    raise NotFoldable()


def _fold_numeric(fn):
    def fold(ctx):
        a = ctx.static(0)
        if is_obj(a):
            raise NotFoldable()
        with np.errstate(all="ignore"):
            return [fn(a).astype(a.dtype)]
    return fold


set_fold("Sqrt")(_fold_numeric(np.sqrt))
set_fold("Floor")(_fold_numeric(np.floor))
set_fold("Ceil")(_fold_numeric(np.ceil))
set_fold("Reciprocal")(_fold_numeric(np.reciprocal))


@set_fold("Where")
def _fold_where(ctx):
    c, a, b = ctx.static(0), ctx.static(1), ctx.static(2)
    if is_obj(c):
        raise NotFoldable()
    if is_obj(a) or is_obj(b):
        return [simplify_obj(np.where(c, as_obj(a), as_obj(b)))]
    return [np.where(c, a, b)]


def _fold_variadic(num, obj):
    def fold(ctx):
        arrs = [ctx.static(i) for i in range(len(ctx)) if ctx.has(i)]
        if any(is_obj(a) for a in arrs):
            return [reduce(lambda x, y: obj_map(obj, x, y), arrs)]
        return [reduce(num, arrs).astype(arrs[0].dtype)]
    return fold


set_fold("Max")(_fold_variadic(np.maximum, lambda x, y: expr(x).max(expr(y))))
set_fold("Min")(_fold_variadic(np.minimum, lambda x, y: expr(x).min(expr(y))))
set_fold("Sum")(_fold_variadic(np.add, lambda x, y: expr(x) + expr(y)))


@set_fold("Identity")
def _fold_identity(ctx):
    return [ctx.static(0)]


def _fold_cast_to(arr, to):
    if is_obj(arr):
        if to in (TP.INT64, TP.INT32):
            return typed(arr, to)
        raise NotFoldable()
    if to not in dtypes.NUMPY_OF:
        raise NotFoldable()
    if arr.dtype.kind == "f" and np.dtype(dtypes.numpy(to)).kind in "iu":
        with np.errstate(all="ignore"):
            arr = np.trunc(arr)
    with np.errstate(all="ignore"):
        return typed(arr.astype(dtypes.numpy(to)), to)


@set_fold("Cast")
def _fold_cast(ctx):
    return [_fold_cast_to(ctx.static(0), ctx.attr("to"))]


@set_fold("CastLike")
def _fold_castlike(ctx):
    return [_fold_cast_to(ctx.static(0), ctx.type(1))]


@set_fold("Clip")
def _fold_clip(ctx):
    x = ctx.static(0)
    if is_obj(x):
        out = x
        if ctx.has(1):
            out = obj_map(lambda a, b: expr(a).max(expr(b)), out, ctx.static(1))
        if ctx.has(2):
            out = obj_map(lambda a, b: expr(a).min(expr(b)), out, ctx.static(2))
        return [out]
    out = x
    if ctx.has(1):
        out = np.maximum(out, ctx.static(1))
    if ctx.has(2):
        out = np.minimum(out, ctx.static(2))
    return [out.astype(x.dtype)]

