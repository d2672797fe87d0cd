"""ATen operator handlers: each builds a node's value from the tensor API (registered with ``_reg``)."""

from __future__ import annotations

import math
import operator

import numpy as np
import torch

from ...dtype import DType
from ...hl_ops.binary import where
from ...hl_ops.movement import concat, stack
from ...shape import Expression, to_expr
from ._core import _DTYPES, TorchImportError, _ax, _axes, _int, _is_t, _NeedsDecomposition, _reg, _size


# ---------------------------------------------------------------------------------------------------- handlers
# --- no-ops and metadata
@_reg("aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten.sym_constrain_range.default",
      "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg", "aten._assert_async.default",
      "torch._check", "torch._check_is_size")
def _noop(cv, node, *a, **k):
    return None


@_reg("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
      "aten.contiguous.default", "aten.dropout.default", "aten.feature_dropout.default",
      "aten.alpha_dropout.default", "aten.lift_fresh.default", "aten.detach_.default",
      "aten.alias_copy.default", "aten.detach_copy.default")
def _identity(cv, node, x, *a, **k):
    if node.target in (torch.ops.aten.dropout.default, torch.ops.aten.feature_dropout.default,
                       torch.ops.aten.alpha_dropout.default):
        p, train = (a + (k.get("p", 0.5), k.get("train", False)))[:2] if a else (k.get("p"), k.get("train"))
        if train and p:
            raise TorchImportError("dropout in training mode is not imported; call module.eval() before export")
    return x


@_reg("aten.native_dropout.default")
def _native_dropout(cv, node, x, p, train=None):
    if train and p:
        raise TorchImportError("dropout in training mode is not imported; call module.eval() before export")
    return (x, cv.graph.full(x.dims, True, DType.bool))


@_reg("aten.sym_size.int")
def _sym_size(cv, node, x, d):
    return _size(x.dims[_ax(d, x.ndim)])


@_reg("aten.sym_numel.default")
def _sym_numel(cv, node, x):
    return _size(x.numel())


@_reg("operator.getitem")
def _getitem(cv, node, seq, i):
    return seq[i]


def _pyop(fn):
    def h(cv, node, *args):
        if any(_is_t(a) for a in args):
            raise TorchImportError("Python operator on a tensor")
        args = [to_expr(a) if isinstance(a, Expression) else a for a in args]
        return _size(fn(*args)) if any(isinstance(a, Expression) for a in args) else fn(*args)
    return h


for _n, _f in {"mul": operator.mul, "add": operator.add, "sub": operator.sub, "floordiv": operator.floordiv,
               "mod": operator.mod, "neg": operator.neg, "truediv": operator.truediv, "pow": operator.pow,
               "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
               "ge": operator.ge}.items():
    _reg(f"operator.{_n}")(_pyop(_f))


@_reg("torch.sym_max", "torch.sym_min")
def _sym_maxmin(cv, node, a, b):
    fn = "max" if node.target is torch.sym_max else "min"
    if isinstance(a, Expression) or isinstance(b, Expression):
        return _size(getattr(to_expr(a), fn)(b))
    return max(a, b) if fn == "max" else min(a, b)


@_reg("torch.sym_float", "torch.sym_int", "aten.sym_float.default")
def _sym_cast(cv, node, a):
    if isinstance(a, Expression):
        raise TorchImportError(f"sym_float/sym_int of the symbolic {a}")
    return float(a) if "float" in str(node.target) else int(a)


@_reg("math.ceil", "math.floor")
def _math_round(cv, node, a):
    return getattr(math, node.target.__name__)(a)


# --- element-wise arithmetic
def _alpha(y, alpha):
    return y if alpha in (None, 1) else y * alpha


def _out_dtype(node):
    val = node.meta.get("val")
    return _DTYPES.get(val.dtype) if isinstance(val, torch.Tensor) else None


def _binop_operands(cv, node, a, b):
    """Cast tensor operands to torch's result dtype (``meta['val']``) for arithmetic ops."""
    want = _out_dtype(node)
    if want is not None and want != DType.bool:
        if _is_t(a) and a.dtype != want:
            a = a.cast(want)
        if _is_t(b) and b.dtype != want:
            b = b.cast(want)
    if not _is_t(a) and not _is_t(b):
        a = cv.tensor(a, dtype=want)
    return a, b


@_reg("aten.add.Tensor", "aten.add.Scalar")
def _add(cv, node, a, b, alpha=1):
    a, b = _binop_operands(cv, node, a, b)
    return a + _alpha(b, alpha)


@_reg("aten.sub.Tensor", "aten.sub.Scalar")
def _sub(cv, node, a, b, alpha=1):
    a, b = _binop_operands(cv, node, a, b)
    return a - _alpha(b, alpha)


@_reg("aten.rsub.Scalar", "aten.rsub.Tensor")
def _rsub(cv, node, a, b, alpha=1):
    a, b = _binop_operands(cv, node, a, b)
    return b - _alpha(a, alpha) if _is_t(b) else _alpha(a, alpha).__rsub__(b)


@_reg("aten.mul.Tensor", "aten.mul.Scalar")
def _mul(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    if _is_t(a) and a.dtype == DType.bool and _is_t(b) and b.dtype == DType.bool:
        return a.logical_and(b)
    return a * b if _is_t(a) else b * a


@_reg("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(cv, node, a, b, rounding_mode=None):
    want = _out_dtype(node)
    if rounding_mode is None:
        a = a.cast(want) if _is_t(a) and want is not None and a.dtype != want else a
        b = b.cast(want) if _is_t(b) and want is not None and b.dtype != want else b
        if not _is_t(a):
            a = cv.tensor(float(a), dtype=want)
        return a / b
    a, b = _binop_operands(cv, node, a, b)
    return a.div(b, rounding_mode=rounding_mode)


@_reg("aten.remainder.Tensor", "aten.remainder.Scalar")
def _remainder(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return a.remainder(b)


@_reg("aten.fmod.Tensor", "aten.fmod.Scalar")
def _fmod(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return a.fmod(b)


@_reg("aten.floor_divide.default", "aten.floor_divide.Scalar")
def _floor_divide(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return a.floor_divide(b)


@_reg("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def _pow(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    if _is_t(a) and not _is_t(b):
        if b == 2:
            return a * a
        if b == 1:
            return a
        if b == 0.5:
            return a.sqrt()
        if b == -1:
            return a.recip()
        return a.pow(b)
    if not _is_t(a):
        return b.rpow(a)
    return a.pow(b)


@_reg("aten.maximum.default", "aten.fmax.default")
def _maximum(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return a.maximum(b)


@_reg("aten.minimum.default", "aten.fmin.default")
def _minimum(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return a.minimum(b)


def _cmp(method):
    def h(cv, node, a, b):
        if _is_t(a) and _is_t(b) and a.dtype != b.dtype:
            common = (DType.float64 if DType.float64 in (a.dtype, b.dtype) else
                      DType.float32 if a.dtype.is_float or b.dtype.is_float else DType.int64)
            a, b = a.cast(common), b.cast(common)
        if _is_t(a) and not _is_t(b) and not a.dtype.is_float and isinstance(b, float):
            a = a.cast(DType.float32)
        if _is_t(a) and a.dtype == DType.bool and not _is_t(b):
            a = a.cast(DType.int32)
        return getattr(a, method)(b)
    return h


for _op, _m in {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}.items():
    _reg(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_cmp(_m))


def _logical(method):
    def h(cv, node, a, b):
        a, b = cv.tensor(a), cv.tensor(b)
        if a.dtype != DType.bool or b.dtype != DType.bool:
            if method in ("logical_and", "logical_or", "logical_xor"):
                a, b = a.ne(0) if a.dtype != DType.bool else a, b.ne(0) if b.dtype != DType.bool else b
            else:
                raise TorchImportError(f"bitwise ops on {a.dtype}/{b.dtype} tensors are not supported (bool only)")
        return getattr(a, method)(b)
    return h


_reg("aten.logical_and.default", "aten.bitwise_and.Tensor", "aten.__and__.Tensor",
     "aten.bitwise_and.Scalar")(_logical("logical_and"))
_reg("aten.logical_or.default", "aten.bitwise_or.Tensor", "aten.__or__.Tensor",
     "aten.bitwise_or.Scalar")(_logical("logical_or"))
_reg("aten.logical_xor.default", "aten.bitwise_xor.Tensor", "aten.__xor__.Tensor")(_logical("logical_xor"))


@_reg("aten.logical_not.default", "aten.bitwise_not.default")
def _logical_not(cv, node, x):
    if x.dtype != DType.bool:
        if node.target is torch.ops.aten.bitwise_not.default:
            raise TorchImportError(f"bitwise_not on a {x.dtype} tensor is not supported (bool only)")
        x = x.ne(0)
    return x.logical_not()


@_reg("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def _where(cv, node, cond, a, b):
    want = _out_dtype(node)
    a = cv.tensor(a, dtype=want) if not _is_t(a) else (a.cast(want) if want and a.dtype != want else a)
    b = cv.tensor(b, dtype=want) if not _is_t(b) else (b.cast(want) if want and b.dtype != want else b)
    if cond.dtype != DType.bool:
        cond = cond.ne(0)
    return where(cond, a, b)


@_reg("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(cv, node, x, mask, value):
    value = cv.tensor(value, dtype=x.dtype)
    return where(mask, value, x)


@_reg("aten.clamp.default", "aten.clamp.Tensor", "aten.clip.default")
def _clamp(cv, node, x, min=None, max=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    if min is not None:
        x = x.maximum(min)
    if max is not None:
        x = x.minimum(max)
    return x


@_reg("aten.clamp_min.default", "aten.clamp_min.Tensor")
def _clamp_min(cv, node, x, v):
    return x.maximum(v)


@_reg("aten.clamp_max.default", "aten.clamp_max.Tensor")
def _clamp_max(cv, node, x, v):
    return x.minimum(v)


# --- unary
def _float_in(x):
    return x if x.dtype.is_float else x.cast(DType.float32)


_UNARY = {
    "neg": lambda x: -x, "abs": lambda x: x.abs(), "exp": lambda x: _float_in(x).exp(),
    "log": lambda x: _float_in(x).log(), "log2": lambda x: _float_in(x).log2(),
    "log10": lambda x: _float_in(x).log10(), "log1p": lambda x: _float_in(x).log1p(),
    "expm1": lambda x: _float_in(x).expm1(), "exp2": lambda x: _float_in(x).exp2(),
    "sqrt": lambda x: _float_in(x).sqrt(), "rsqrt": lambda x: _float_in(x).rsqrt(),
    "reciprocal": lambda x: _float_in(x).recip(), "sin": lambda x: _float_in(x).sin(),
    "cos": lambda x: _float_in(x).cos(), "tan": lambda x: _float_in(x).tan(),
    "tanh": lambda x: _float_in(x).tanh(), "sigmoid": lambda x: _float_in(x).sigmoid(),
    "relu": lambda x: x.relu(), "silu": lambda x: x.silu(), "erf": lambda x: _float_in(x).erf(),
    "floor": lambda x: x.floor(), "ceil": lambda x: x.ceil(), "trunc": lambda x: x.trunc(),
    "round": lambda x: x.round(), "sign": lambda x: x.sign(), "sgn": lambda x: x.sign(),
    "hardsigmoid": lambda x: x.hardsigmoid(), "hardswish": lambda x: x.hardswish(), "mish": lambda x: x.mish(),
    "relu6": lambda x: x.relu6(), "selu": lambda x: x.selu(), "square": lambda x: x * x,
    "isnan": lambda x: x.isnan(), "isinf": lambda x: x.isinf(), "isfinite": lambda x: x.isfinite(),
    "sinh": lambda x: (_float_in(x).exp() - (-_float_in(x)).exp()) * 0.5,
    "cosh": lambda x: (_float_in(x).exp() + (-_float_in(x)).exp()) * 0.5,
    "positive": lambda x: x, "log_sigmoid": lambda x: x.logsigmoid(),
}


def _unary(fn):
    return lambda cv, node, x, *a, **k: fn(x)


for _n, _f in _UNARY.items():
    _reg(f"aten.{_n}.default")(_unary(_f))


@_reg("aten.gelu.default")
def _gelu(cv, node, x, approximate="none"):
    return x.gelu(approximate=approximate)


@_reg("aten.leaky_relu.default")
def _leaky_relu(cv, node, x, negative_slope=0.01):
    return x.leaky_relu(negative_slope)


@_reg("aten.elu.default")
def _elu(cv, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1.0 or input_scale != 1.0:
        y = x * input_scale
        return where(x > 0, x * scale, ((y.exp() - 1.0) * alpha) * scale)
    return x.elu(alpha)


@_reg("aten.celu.default")
def _celu(cv, node, x, alpha=1.0):
    return x.celu(alpha)


@_reg("aten.hardtanh.default")
def _hardtanh(cv, node, x, min_val=-1.0, max_val=1.0):
    return x.hardtanh(min_val, max_val)


@_reg("aten.softplus.default")
def _softplus(cv, node, x, beta=1.0, threshold=20.0):
    return x.softplus(beta, threshold)


@_reg("aten.log_sigmoid_forward.default")
def _log_sigmoid_forward(cv, node, x):
    return (x.logsigmoid(), cv.graph.full((0,), 0.0, x.dtype))


@_reg("aten.prelu.default", "aten._prelu_kernel.default")
def _prelu(cv, node, x, w):
    if x.ndim >= 2 and w.ndim == 1 and w.dims[0] != 1:
        w = w.reshape((w.dims[0],) + (1,) * (x.ndim - 2))
    return where(x > 0, x, x * w)


# --- type conversion and creation
@_reg("aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.type_as.default",
      "aten.to.other", "aten.to.device")
def _to(cv, node, x, *a, **k):
    want = _out_dtype(node)
    return x.cast(want) if want is not None and x.dtype != want else x


def _fill_dtype(node, default=None):
    d = _out_dtype(node)
    return d if d is not None else default


@_reg("aten.full.default")
def _full(cv, node, size, fill_value, **k):
    return cv.graph.full(tuple(size), fill_value, _fill_dtype(node, DType.float32))


@_reg("aten.zeros.default", "aten.ones.default", "aten.empty.memory_format", "aten.empty.default")
def _zeros_ones(cv, node, size, **k):
    value = 1 if node.target is torch.ops.aten.ones.default else 0
    return cv.graph.full(tuple(size), value, _fill_dtype(node, DType.float32))


@_reg("aten.full_like.default")
def _full_like(cv, node, x, fill_value, **k):
    return cv.graph.full(x.dims, fill_value, _fill_dtype(node, x.dtype))


@_reg("aten.zeros_like.default", "aten.ones_like.default", "aten.empty_like.default")
def _zeros_like(cv, node, x, **k):
    value = 1 if node.target is torch.ops.aten.ones_like.default else 0
    return cv.graph.full(x.dims, value, _fill_dtype(node, x.dtype))


@_reg("aten.new_ones.default", "aten.new_zeros.default", "aten.new_empty.default", "aten.new_full.default")
def _new_fill(cv, node, x, size, *a, **k):
    if node.target is torch.ops.aten.new_full.default:
        value = a[0] if a else k["fill_value"]
    else:
        value = 1 if node.target is torch.ops.aten.new_ones.default else 0
    return cv.graph.full(tuple(size), value, _fill_dtype(node, x.dtype))


@_reg("aten.fill.Scalar", "aten.fill.Tensor")
def _fill(cv, node, x, value):
    if _is_t(value):
        return value.cast(x.dtype).expand(x.dims)
    return cv.graph.full(x.dims, value, x.dtype)


@_reg("aten.scalar_tensor.default")
def _scalar_tensor(cv, node, value, **k):
    return cv.graph.constant(value, _fill_dtype(node, DType.float32))


@_reg("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(cv, node, *args, **k):
    dtype = _fill_dtype(node, DType.int64)
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        (start, end), step = args, 1
    else:
        start, end, step = args[:3]
    if dtype.is_float and any(isinstance(v, float) for v in (start, end, step)):
        n = int(math.ceil((float(end) - float(start)) / float(step)))
        return cv.graph.arange(0, n, 1, DType.float32) * float(step) + float(start)
    return cv.graph.arange(start, end, step, dtype)


@_reg("aten.lift_fresh_copy.default")
def _lift(cv, node, x):
    return x


# --- matmul family
@_reg("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(cv, node, a, b):
    return a @ b


@_reg("aten.dot.default", "aten.mv.default", "aten.vdot.default")
def _dot(cv, node, a, b):
    return a @ b


@_reg("aten.addmm.default", "aten.baddbmm.default", "aten.addmv.default")
def _addmm(cv, node, c, a, b, beta=1, alpha=1):
    y = a @ b
    if alpha != 1:
        y = y * alpha
    if beta == 0:
        return y
    return y + (c * beta if beta != 1 else c)


@_reg("aten.linear.default")
def _linear(cv, node, x, w, b=None):
    y = x @ w.permute(1, 0) if w.ndim == 2 else x @ w
    return y + b if b is not None else y


@_reg("aten.t.default", "aten.numpy_T.default")
def _t(cv, node, x):
    return x.permute(1, 0) if x.ndim == 2 else x


@_reg("aten.einsum.default")
def _decompose_me(cv, node, *a, **k):
    # PyTorch's decompositions lower these to permutes, broadcasts and bmm
    raise _NeedsDecomposition(str(node.target), f"{node.target} is imported through its decomposition")


# --- movement
def _shape_arg(x, size):
    size = [_size(s) for s in size]
    return tuple(size)


@_reg("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.view_copy.default",
      "aten._reshape_alias.default")
def _view(cv, node, x, size, *a):
    size = _shape_arg(x, size)
    want = cv.meta_dims(node)
    if want is not None and len(want) == len(size):
        size = tuple(_size(to_expr(w)) for w in want)  # torch's sizes: no -1 left to infer symbolically
    if tuple(to_expr(s) for s in size if not (isinstance(s, int) and s == -1)) == tuple(x.dims) and \
            -1 not in size:
        return x
    return x.reshape(size)


@_reg("aten.view_as.default", "aten.reshape_as.default")
def _view_as(cv, node, x, other):
    return x.reshape(other.dims)


@_reg("aten.permute.default", "aten.permute_copy.default")
def _permute(cv, node, x, dims):
    return x.permute([_ax(d, x.ndim) for d in dims])


@_reg("aten.transpose.int", "aten.swapaxes.default", "aten.transpose_copy.int")
def _transpose(cv, node, x, d0, d1):
    if x.ndim < 2:
        return x
    order = list(range(x.ndim))
    d0, d1 = _ax(d0, x.ndim), _ax(d1, x.ndim)
    order[d0], order[d1] = order[d1], order[d0]
    return x.permute(order)


@_reg("aten.expand.default", "aten.expand_copy.default")
def _expand(cv, node, x, size, implicit=False):
    size = _shape_arg(x, size)
    if tuple(to_expr(s) for s in size) == tuple(x.dims):
        return x
    return x.expand(size)


@_reg("aten.expand_as.default")
def _expand_as(cv, node, x, other):
    return x.expand(other.dims)


@_reg("aten.unsqueeze.default", "aten.unsqueeze_copy.default")
def _unsqueeze(cv, node, x, d):
    return x.unsqueeze(_ax(d, x.ndim + 1))


@_reg("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.squeeze_copy.dims")
def _squeeze(cv, node, x, dims=None):
    if dims is None:
        return x.squeeze()
    axes = [_ax(d, x.ndim) for d in ([dims] if isinstance(dims, int) else dims)]
    axes = [a for a in axes if x.ndim and to_expr(x.dims[a]) == to_expr(1)]
    return x.squeeze(tuple(axes)) if axes else x


@_reg("aten.flatten.using_ints")
def _flatten(cv, node, x, start=0, end=-1):
    if x.ndim == 0:
        return x.reshape((1,))
    s, e = _ax(start, x.ndim), _ax(end, x.ndim)
    if s == e:
        return x
    n = x.dims[s]
    for d in x.dims[s + 1:e + 1]:
        n = n * d
    return x.reshape(tuple(x.dims[:s]) + (n,) + tuple(x.dims[e + 1:]))


@_reg("aten.unflatten.int")
def _unflatten(cv, node, x, d, sizes):
    d = _ax(d, x.ndim)
    sizes = list(sizes)
    return x.reshape(tuple(x.dims[:d]) + tuple(sizes) + tuple(x.dims[d + 1:]))


_BIG = 1 << 60


@_reg("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(cv, node, x, dim=0, start=None, end=None, step=1):
    dim = _ax(dim, x.ndim)
    if isinstance(end, int) and end >= _BIG:
        end = None
    if isinstance(start, int) and start <= -_BIG:
        start = None
    if (start in (None, 0)) and end is None and step == 1:
        return x
    n = x.dims[dim]
    if end is not None and isinstance(end, (int, Expression)) and to_expr(end) == to_expr(n):
        end = None
    if start == 0:
        start = None
    y = x.slice_axis(dim, start if start is not None else 0, end, step)
    want = cv.meta_dims(node)
    if want is not None and step == 1 and to_expr(y.dims[dim]) != to_expr(want[dim]):
        # torch knows more about the symbols' ranges (``seq <= 60`` from the Dim's max) than luminal: slicing a
        # 64-long buffer to ``seq`` gives ``min(64, seq)`` here. Crop to torch's size with a (negative) pad.
        s = 0 if start is None else start
        if isinstance(s, int) and s < 0:
            s = n + s
        e = n if end is None else end
        if isinstance(e, int) and e < 0:
            e = n + e
        if to_expr(e) - to_expr(s) == to_expr(want[dim]):
            y = _crop(x, dim, s, e)
    return y


def _crop(x, dim, start, end):
    """``x[start:end]`` along ``dim`` with exactly ``end - start`` entries (``0 <= start <= end <= n`` assumed,
    as torch proved at export): a view with negative pads, no ``min``/``max`` clamping of symbolic sizes."""
    n = x.dims[dim]
    return x._view(x.shape.pad(dim, -to_expr(start), to_expr(end) - to_expr(n)))


@_reg("aten.select.int", "aten.select_copy.int")
def _select(cv, node, x, dim, index):
    dim = _ax(dim, x.ndim)
    if isinstance(index, int) and index < 0:
        index = x.dims[dim] + index
    return _crop(x, dim, index, to_expr(index) + 1).squeeze(dim)


@_reg("aten.narrow.default")
def _narrow(cv, node, x, dim, start, length):
    dim = _ax(dim, x.ndim)
    return x.slice_axis(dim, start, start + length)


@_reg("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def _cat(cv, node, tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and to_expr(t.dims[0]) == to_expr(0))]
    want = _out_dtype(node)
    tensors = [t.cast(want) if want is not None and t.dtype != want else t for t in tensors]
    if len(tensors) == 1:
        return tensors[0]
    return concat(tensors, _ax(dim, tensors[0].ndim))


@_reg("aten.stack.default")
def _stack(cv, node, tensors, dim=0):
    return stack(list(tensors), _ax(dim, tensors[0].ndim + 1))


@_reg("aten.split.Tensor", "aten.split_with_sizes.default", "aten.split_with_sizes_copy.default",
      "aten.split_copy.Tensor")
def _split(cv, node, x, split_size, dim=0):
    dim = _ax(dim, x.ndim)
    n = x.dims[dim]
    if isinstance(split_size, (list, tuple)):
        sizes = list(split_size)
    else:
        total = _int(n, "split: the split axis")
        step = _int(split_size)
        sizes = [min(step, total - s) for s in range(0, total, step)]
    out, start = [], 0
    for s in sizes:
        out.append(x.slice_axis(dim, start, start + s))
        start = start + s
    return out


@_reg("aten.chunk.default")
def _chunk(cv, node, x, chunks, dim=0):
    dim = _ax(dim, x.ndim)
    n = _int(x.dims[dim], "chunk axis")
    step = -(-n // chunks)
    return _split(cv, node, x, step, dim)


@_reg("aten.unbind.int")
def _unbind(cv, node, x, dim=0):
    dim = _ax(dim, x.ndim)
    n = _int(x.dims[dim], "unbind axis")
    return [x.slice_axis(dim, i, i + 1).squeeze(dim) for i in range(n)]


@_reg("aten.flip.default")
def _flip(cv, node, x, dims):
    return x.flip(tuple(_ax(d, x.ndim) for d in dims))


@_reg("aten.roll.default")
def _roll(cv, node, x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = x.reshape((-1,))
        return flat.roll(shifts[0], 0).reshape(x.dims)
    for s, d in zip(shifts, dims):
        x = x.roll(s, _ax(d, x.ndim))
    return x


@_reg("aten.repeat.default")
def _repeat(cv, node, x, repeats):
    repeats = list(repeats)
    while x.ndim < len(repeats):
        x = x.unsqueeze(0)
    return x.repeat(tuple(repeats))


@_reg("aten.tile.default")
def _tile(cv, node, x, dims):
    dims = list(dims)
    dims = [1] * (x.ndim - len(dims)) + dims
    return _repeat(cv, node, x, dims)


@_reg("aten.repeat_interleave.self_int")
def _repeat_interleave(cv, node, x, repeats, dim=None, output_size=None):
    if dim is None:
        x, dim = x.reshape((-1,)), 0
    dim = _ax(dim, x.ndim)
    y = x.unsqueeze(dim + 1)
    dims = list(y.dims)
    dims[dim + 1] = repeats
    y = y.expand(tuple(dims))
    return y.reshape(tuple(x.dims[:dim]) + (x.dims[dim] * repeats,) + tuple(x.dims[dim + 1:]))


@_reg("aten.constant_pad_nd.default", "aten.pad.default")
def _pad(cv, node, x, pad, *a, **k):
    mode = a[0] if a else k.get("mode", "constant")
    value = (a[1] if len(a) > 1 else k.get("value", 0.0)) if node.target is torch.ops.aten.pad.default else \
        (a[0] if a else k.get("value", 0.0))
    if node.target is torch.ops.aten.pad.default and mode != "constant":
        raise TorchImportError(f"pad mode {mode!r} is not supported (constant only)")
    if value is None:
        value = 0.0
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return x.pad(pairs, value) if value != 0 else x.pad(pairs)


@_reg("aten.tril.default", "aten.triu.default")
def _tri(cv, node, x, diagonal=0):
    return x.tril(diagonal) if "tril" in str(node.target) else x.triu(diagonal)


@_reg("aten.diff.default")
def _diff(cv, node, x, n=1, dim=-1, prepend=None, append=None):
    dim = _ax(dim, x.ndim)
    if prepend is not None or append is not None:
        x = concat([t for t in (prepend, x, append) if t is not None], dim)
    for _ in range(n):
        a = x.slice_axis(dim, 1, None)
        b = x.slice_axis(dim, 0, x.dims[dim] - 1)
        x = a.logical_xor(b) if x.dtype == DType.bool else a - b
    return x


# --- gathers
def _norm_index(idx, n):
    """Negative indices count from the end (as torch)."""
    if not _is_t(idx):
        return idx
    if idx.dtype == DType.bool:
        raise TorchImportError("boolean mask indexing has a data-dependent shape; not supported")
    return where(idx < 0, idx + n, idx)


@_reg("aten.embedding.default")
def _embedding(cv, node, weight, indices, padding_idx=-1, scale_grad=False, sparse=False):
    return weight.index_select(0, indices)


@_reg("aten.index_select.default")
def _index_select(cv, node, x, dim, index):
    dim = _ax(dim, x.ndim)
    return x.index_select(dim, _norm_index(index, x.dims[dim]))


@_reg("aten.gather.default")
def _gather(cv, node, x, dim, index, sparse_grad=False):
    dim = _ax(dim, x.ndim)
    if tuple(index.dims) != tuple(x.dims):
        # torch.gather: index may be smaller than x along the non-gathered axes
        for k, (di, dx) in enumerate(zip(index.dims, x.dims)):
            if k != dim and to_expr(di) != to_expr(dx):
                x = x.slice_axis(k, 0, di)
    return x.gather(dim, _norm_index(index, x.dims[dim]))


@_reg("aten.index.Tensor")
def _index(cv, node, x, indices):
    """Advanced indexing ``x[i0, i1, ...]`` with integer index tensors (None = a full slice)."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    pos = [k for k, i in enumerate(indices) if i is not None]
    if not pos:
        return x
    for k in pos:
        if indices[k].dtype == DType.bool:
            raise TorchImportError("boolean mask indexing has a data-dependent shape; not supported")
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    if not adjacent:
        # torch puts the broadcast index dims first: move the indexed axes to the front
        order = pos + [k for k in range(x.ndim) if k not in pos]
        x = x.permute(order)
        indices = [indices[k] for k in pos] + [None] * (x.ndim - len(pos))
        pos = list(range(len(pos)))
    first = pos[0]
    idx = [_norm_index(indices[k], x.dims[k]) for k in pos]
    # broadcast the index tensors against each other
    bdims = idx[0].dims
    for t in idx[1:]:
        if tuple(t.dims) != tuple(bdims):
            rank = max(len(bdims), t.ndim)
            a = (1,) * (rank - len(bdims)) + tuple(bdims)
            b = (1,) * (rank - t.ndim) + tuple(t.dims)
            bdims = tuple(bb if to_expr(aa) == to_expr(1) else aa for aa, bb in zip(a, b))
    idx = [t.expand(bdims) if tuple(t.dims) != tuple(bdims) else t for t in idx]
    if len(pos) == 1:
        return x.index_select(first, idx[0])
    # flatten the indexed axes and build the linear index
    lin = None
    stride = 1
    for k, t in zip(reversed(pos), reversed(idx)):
        t = t.cast(DType.int64)
        term = t * stride if not (isinstance(stride, int) and stride == 1) else t
        lin = term if lin is None else lin + term
        stride = x.dims[k] * stride
    merged = x.dims[first]
    for k in pos[1:]:
        merged = merged * x.dims[k]
    flat = x.reshape(tuple(x.dims[:first]) + (merged,) + tuple(x.dims[pos[-1] + 1:]))
    return flat.index_select(first, lin)


# --- reductions
@_reg("aten.sum.dim_IntList", "aten.sum.default")
def _sum(cv, node, x, dim=None, keepdim=False, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    return x.sum(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.mean.dim", "aten.mean.default")
def _mean(cv, node, x, dim=None, keepdim=False, dtype=None):
    return x.mean(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.prod.dim_int", "aten.prod.default")
def _prod(cv, node, x, dim=None, keepdim=False, dtype=None):
    if dim is None:
        return x.prod()
    return x.prod(_ax(dim, x.ndim), keepdim=keepdim)


@_reg("aten.amax.default", "aten.max.default")
def _amax(cv, node, x, dim=None, keepdim=False):
    return x.max(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.amin.default", "aten.min.default")
def _amin(cv, node, x, dim=None, keepdim=False):
    return x.min(_axes(dim, x.ndim), keepdim=keepdim) if x.ndim else x


@_reg("aten.max.dim", "aten.min.dim")
def _max_dim(cv, node, x, dim, keepdim=False):
    dim = _ax(dim, x.ndim)
    if node.target is torch.ops.aten.max.dim:
        return (x.max(dim, keepdim=keepdim), x.argmax(dim, keepdim=keepdim))
    return (x.min(dim, keepdim=keepdim), x.argmin(dim, keepdim=keepdim))


@_reg("aten.argmax.default", "aten.argmin.default")
def _argmax(cv, node, x, dim=None, keepdim=False):
    fn = x.argmax if node.target is torch.ops.aten.argmax.default else x.argmin
    if dim is None:
        return fn(None) if not keepdim else fn(None).reshape((1,) * x.ndim)
    return fn(_ax(dim, x.ndim), keepdim=keepdim)


@_reg("aten.any.dim", "aten.any.dims", "aten.any.default", "aten.all.dim", "aten.all.dims", "aten.all.default")
def _any_all(cv, node, x, dim=None, keepdim=False):
    fn = "any" if "any" in str(node.target) else "all"
    if x.ndim == 0:
        return x.ne(0) if x.dtype != DType.bool else x
    return getattr(x, fn)(_axes(dim, x.ndim), keepdim=keepdim)


@_reg("aten.var.correction", "aten.var.dim", "aten.std.correction", "aten.std.dim")
def _var(cv, node, x, dim=None, *a, correction=None, keepdim=False, unbiased=None):
    if a:  # var.dim(x, dim, unbiased, keepdim)
        unbiased = a[0]
        keepdim = a[1] if len(a) > 1 else keepdim
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    fn = "var" if "var" in str(node.target) else "std"
    return getattr(x, fn)(_axes(dim, x.ndim), correction=correction, keepdim=keepdim)


@_reg("aten.var_mean.correction")
def _var_mean(cv, node, x, dim=None, correction=None, keepdim=False):
    correction = 1 if correction is None else correction
    axes = _axes(dim, x.ndim)
    return (x.var(axes, correction=correction, keepdim=keepdim), x.mean(axes, keepdim=keepdim))


@_reg("aten.logsumexp.default")
def _logsumexp(cv, node, x, dim, keepdim=False):
    return x.logsumexp(_axes(dim, x.ndim), keepdim=keepdim)


@_reg("aten.cumsum.default", "aten.cumprod.default")
def _cumsum(cv, node, x, dim, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    fn = x.cumsum if "cumsum" in str(node.target) else x.cumprod
    return fn(_ax(dim, x.ndim))


@_reg("aten.norm.ScalarOpt_dim", "aten.linalg_vector_norm.default")
def _norm(cv, node, x, p=2, dim=None, keepdim=False, dtype=None):
    axes = _axes(dim, x.ndim)
    if p in (2, 2.0, None):
        return (x * x).sum(axes, keepdim=keepdim).sqrt()
    if p in (1, 1.0):
        return x.abs().sum(axes, keepdim=keepdim)
    if p == math.inf:
        return x.abs().max(axes, keepdim=keepdim)
    return x.abs().pow(p).sum(axes, keepdim=keepdim).pow(1.0 / p)


# --- softmax and normalization
@_reg("aten._softmax.default", "aten.softmax.int", "aten._safe_softmax.default")
def _softmax(cv, node, x, dim, half_to_float=None, dtype=None):
    want = _out_dtype(node)
    if want is not None and x.dtype != want:
        x = x.cast(want)
    y = x.softmax(_ax(dim, x.ndim))
    if node.target is torch.ops.aten._safe_softmax.default:
        # rows that are entirely -inf give 0 instead of NaN
        y = where(x.eq(-math.inf).all(_ax(dim, x.ndim), keepdim=True), 0.0, y)
    return y


@_reg("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(cv, node, x, dim, half_to_float=None, dtype=None):
    return x.log_softmax(_ax(dim, x.ndim))


def _layer_norm_stats(x, n_axes, eps):
    axes = tuple(range(x.ndim - n_axes, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(axes, keepdim=True)
    rstd = (var + eps).rsqrt()
    return xc * rstd, mean, rstd


@_reg("aten.native_layer_norm.default")
def _native_layer_norm(cv, node, x, normalized_shape, weight, bias, eps):
    y, mean, rstd = _layer_norm_stats(x, len(normalized_shape), eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return (y, mean, rstd)


@_reg("aten.layer_norm.default")
def _layer_norm(cv, node, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return _native_layer_norm(cv, node, x, normalized_shape, weight, bias, eps)[0]


@_reg("aten.rms_norm.default")
def _rms_norm(cv, node, x, normalized_shape, weight=None, eps=None):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    if eps is None:
        eps = float(np.finfo(x.dtype.numpy).eps)
    y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    return y * weight if weight is not None else y


def _channel(t, ndim):
    return t.reshape((t.dims[0],) + (1,) * (ndim - 2))


def _bn_eval(x, weight, bias, mean, var, eps):
    inv = (var + eps).rsqrt()
    scale = inv * weight if weight is not None else inv
    y = (x - _channel(mean, x.ndim)) * _channel(scale, x.ndim)
    return y + _channel(bias, x.ndim) if bias is not None else y


def _bn_train(x, weight, bias, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axes)
    xc = x - _channel(mean, x.ndim)
    var = (xc * xc).mean(axes)
    inv = (var + eps).rsqrt()
    y = xc * _channel(inv if weight is None else inv * weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    return y, mean, var, inv


@_reg("aten._native_batch_norm_legit_no_training.default")
def _bn_no_training(cv, node, x, weight, bias, running_mean, running_var, momentum, eps):
    empty = cv.graph.full((0,), 0.0, x.dtype)
    return (_bn_eval(x, weight, bias, running_mean, running_var, eps), empty, empty)


@_reg("aten._native_batch_norm_legit_functional.default")
def _bn_functional(cv, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    if not training:
        empty = cv.graph.full((0,), 0.0, x.dtype)
        return (_bn_eval(x, weight, bias, running_mean, running_var, eps), empty, empty, running_mean,
                running_var)
    y, mean, var, inv = _bn_train(x, weight, bias, eps)
    n = 1
    for d in (x.dims[0],) + tuple(x.dims[2:]):
        n = n * d
    n = to_expr(n)
    if n.is_constant():
        unbiased = var * (n.to_int() / max(n.to_int() - 1, 1))
    else:  # a symbolic batch: the Bessel factor n / (n - 1) is computed at run time
        unbiased = var * (cv.graph.constant(n, x.dtype) / cv.graph.constant(n - 1, x.dtype))
    new_mean = running_mean * (1 - momentum) + mean * momentum
    new_var = running_var * (1 - momentum) + unbiased * momentum
    return (y, mean, inv, new_mean, new_var)


@_reg("aten.batch_norm.default", "aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _batch_norm(cv, node, x, weight, bias, running_mean, running_var, training, momentum, eps, *a):
    native = node.target is not torch.ops.aten.batch_norm.default
    if not training and running_mean is not None:
        y = _bn_eval(x, weight, bias, running_mean, running_var, eps)
        if native:
            empty = cv.graph.full((0,), 0.0, x.dtype)
            return (y, empty, empty)
        return y
    if running_mean is not None and node.target is torch.ops.aten.batch_norm.default:
        raise _NeedsDecomposition(str(node.target), "batch_norm in training mode updates its running statistics"
                                  " in place; decompose it (decompose='auto' or True) for functional updates")
    y, mean, var, inv = _bn_train(x, weight, bias, eps)
    return (y, mean, inv) if native else y


@_reg("aten.native_group_norm.default")
def _native_group_norm(cv, node, x, weight, bias, N, C, HxW, group, eps):
    c = _int(C, "group_norm channels")
    shape = x.dims
    g = x.reshape((x.dims[0], group, -1))
    mean = g.mean(2, keepdim=True)
    gc = g - mean
    var = (gc * gc).mean(2, keepdim=True)
    rstd = (var + eps).rsqrt()
    y = (gc * rstd).reshape(shape)
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    del c
    return (y, mean.squeeze(2), rstd.squeeze(2))


@_reg("aten.group_norm.default")
def _group_norm(cv, node, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn=True):
    return _native_group_norm(cv, node, x, weight, bias, x.dims[0], x.dims[1], None, num_groups, eps)[0]


@_reg("aten.instance_norm.default")
def _instance_norm(cv, node, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    y = xc * ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * _channel(weight, x.ndim)
    if bias is not None:
        y = y + _channel(bias, x.ndim)
    return y


# --- convolution and pooling
@_reg("aten.convolution.default", "aten._convolution.default")
def _convolution(cv, node, x, w, b, stride, padding, dilation, transposed, output_padding, groups, *a):
    from ...nn.conv import conv_nd, conv_transpose_nd

    if transposed:
        return conv_transpose_nd(x, w, b, tuple(stride), tuple(padding), tuple(output_padding), groups,
                                 tuple(dilation))
    return conv_nd(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)


@_reg("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding",
      "aten.conv2d.padding", "aten.conv3d.padding")
def _conv(cv, node, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    from ...nn.conv import conv_nd

    n = w.ndim - 2
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,) * n)
    pad = padding if isinstance(padding, str) else tup(padding)
    return conv_nd(x, w, b, tup(stride), pad, tup(dilation), groups)


@_reg("aten.conv_transpose1d.default", "aten.conv_transpose2d.input", "aten.conv_transpose3d.input")
def _conv_t(cv, node, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    from ...nn.conv import conv_transpose_nd

    n = w.ndim - 2
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,) * n)
    return conv_transpose_nd(x, w, b, tup(stride), tup(padding), tup(output_padding), groups, tup(dilation))


def _pool_args(x, n, kernel, stride, padding, dilation=1):
    tup = (lambda v: tuple(v) if isinstance(v, (list, tuple)) and len(v) == n else
           tuple(v) * n if isinstance(v, (list, tuple)) else (v,) * n)
    kernel = tup(kernel)
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else tup(stride)
    return kernel, stride, tup(padding), tup(dilation)


def _max_pool_handler(n):
    def h(cv, node, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        from ...nn import pooling

        k, s, p, d = _pool_args(x, n, kernel_size, stride, padding, dilation)
        fn = getattr(pooling, f"max_pool{n}d")
        with_indices = "with_indices" in str(node.target)
        out = fn(x, k, s, p, d, ceil_mode, return_indices=with_indices)
        return tuple(out) if with_indices else out
    return h


for _n in (1, 2, 3):
    _reg(f"aten.max_pool{_n}d.default", f"aten.max_pool{_n}d_with_indices.default")(_max_pool_handler(_n))


def _avg_pool_handler(n):
    def h(cv, node, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
          divisor_override=None):
        from ...nn import pooling

        k, s, p, _ = _pool_args(x, n, kernel_size, stride, padding)
        if n == 1:
            return pooling.avg_pool1d(x, k, s, p, ceil_mode, count_include_pad)
        return getattr(pooling, f"avg_pool{n}d")(x, k, s, p, ceil_mode, count_include_pad, divisor_override)
    return h


for _n in (1, 2, 3):
    _reg(f"aten.avg_pool{_n}d.default")(_avg_pool_handler(_n))


def _adaptive_handler(n, kind):
    def h(cv, node, x, output_size):
        from ...nn import pooling

        out = tuple(output_size) if isinstance(output_size, (list, tuple)) else (output_size,) * n
        if kind == "avg":
            if all(o == 1 for o in out):
                return x.mean(tuple(range(x.ndim - n, x.ndim)), keepdim=True)
            return getattr(pooling, f"adaptive_avg_pool{n}d")(x, out)
        if _output_used(node, 1):
            raise TorchImportError("adaptive max pooling indices are not supported")
        return (getattr(pooling, f"adaptive_max_pool{n}d")(x, out), None)
    return h


for _n in (1, 2, 3):
    _reg(f"aten.adaptive_avg_pool{_n}d.default", f"aten._adaptive_avg_pool{_n}d.default")(
        _adaptive_handler(_n, "avg"))
    _reg(f"aten.adaptive_max_pool{_n}d.default")(_adaptive_handler(_n, "max"))


def _output_used(node, index: int) -> bool:
    """Whether output ``index`` of a multi-output node is read (``getitem(node, index)``)."""
    return any(u.target is operator.getitem and u.args[1] == index and len(u.users) > 0 for u in node.users)


def _resize_axis(x, axis: int, out: int, mode: str, align_corners, scale):
    """Resize one axis with PyTorch's ``interpolate`` coordinate rules; indices/weights computed here."""
    n = _int(x.dims[axis], "interpolate: the resized dims")
    dst = np.arange(out, dtype=np.float64)
    if mode == "nearest":
        sc = (1.0 / scale) if scale else n / out
        idx = np.minimum(np.floor(dst * np.float32(sc)).astype(np.int64), n - 1)
        return x.index_select(axis, x.graph.tensor((out,), DType.int64, "resize_index").set(idx).keep())
    if align_corners:
        src = dst * ((n - 1) / (out - 1) if out > 1 else 0.0)
    else:
        sc = (1.0 / scale) if scale else n / out
        src = np.maximum((dst + 0.5) * sc - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    w1 = (src - i0).astype(np.float32)
    w0 = (1.0 - w1).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = out

    def const(arr, dt, nm):
        return x.graph.tensor(arr.shape, dt, nm).set(arr).keep()

    a = x.index_select(axis, const(i0, DType.int64, "resize_i0"))
    b = x.index_select(axis, const(i1, DType.int64, "resize_i1"))
    return a * const(w0.reshape(shape), x.dtype, "resize_w0") + b * const(w1.reshape(shape), x.dtype, "resize_w1")


def _upsample(mode):
    def h(cv, node, x, output_size, *a):
        if mode == "nearest":
            scales = a[0] if a else None
            align = None
        else:
            align = a[0] if a else False
            scales = a[1] if len(a) > 1 else None
        n = x.ndim - 2
        if output_size is None:
            output_size = [int(math.floor(_int(d) * s)) for d, s in zip(x.dims[2:], scales)]
        y = x
        for i in range(n):
            sc = scales[i] if scales else None
            y = _resize_axis(y, 2 + i, _int(output_size[i]), mode, align, sc)
        return y
    return h


_reg("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec", "aten.upsample_nearest3d.vec")(
    _upsample("nearest"))
_reg("aten.upsample_linear1d.vec", "aten.upsample_bilinear2d.vec", "aten.upsample_trilinear3d.vec")(
    _upsample("linear"))


# --- attention
def _sdpa(cv, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from ...nn.attention import scaled_dot_product_attention

    if dropout_p:
        raise TorchImportError("scaled_dot_product_attention with dropout_p > 0 (training) is not imported; "
                               "export in eval mode")
    if attn_mask is not None and attn_mask.dtype != DType.bool and attn_mask.dtype != q.dtype:
        attn_mask = attn_mask.cast(q.dtype)
    if k.ndim >= 3 and q.ndim >= 3 and to_expr(k.dims[-3]) != to_expr(q.dims[-3]):
        enable_gqa = True
    return scaled_dot_product_attention(q, k, v, attn_mask, is_causal, scale, enable_gqa)


_reg("aten.scaled_dot_product_attention.default")(_sdpa)


@_reg("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(cv, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    out = _sdpa(cv, node, q, k, v, attn_mask, dropout_p, is_causal, scale)
    return (out, cv.graph.full(q.dims[:-1], 0.0, q.dtype))


# --- ops built on newer tensor methods (sorting, scatter, inverse trigonometry): used when this luminal has them
def _method(x, name: str, op: str):
    fn = getattr(x, name, None)
    if fn is None:
        raise TorchImportError(f"{op} needs GraphTensor.{name}, which this luminal build does not have")
    return fn


@_reg("aten.topk.default")
def _topk(cv, node, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's name
    v, i = _method(x, "topk", "topk")(_int(k, "topk: k"), dim, largest, sorted)
    return (v, i)


@_reg("aten.sort.default", "aten.sort.stable")
def _sort(cv, node, x, *a, stable=None, dim=-1, descending=False):
    if a:  # sort.default(self, dim=-1, descending=False)
        dim = a[0]
        descending = a[1] if len(a) > 1 else descending
    v, i = _method(x, "sort", "sort")(dim, descending)
    return (v, i)


@_reg("aten.argsort.default", "aten.argsort.stable")
def _argsort(cv, node, x, *a, stable=None, dim=-1, descending=False):
    if a:
        dim = a[0]
        descending = a[1] if len(a) > 1 else descending
    return _method(x, "argsort", "argsort")(dim, descending)


@_reg("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce", "aten.scatter.value_reduce")
def _scatter(cv, node, x, dim, index, src, reduce=None):
    fn = _method(x, "scatter", "scatter")
    if _is_t(src):
        return fn(dim, index, src=src.cast(x.dtype) if src.dtype != x.dtype else src, reduce=reduce)
    return fn(dim, index, value=src, reduce=reduce)


@_reg("aten.scatter_add.default")
def _scatter_add(cv, node, x, dim, index, src):
    return _method(x, "scatter_add", "scatter_add")(dim, index, src)


@_reg("aten.scatter_reduce.two")
def _scatter_reduce(cv, node, x, dim, index, src, reduce, include_self=True):
    return _method(x, "scatter_reduce", "scatter_reduce")(dim, index, src, reduce, include_self)


for _n in ("asin", "acos", "atan", "asinh", "acosh", "atanh"):
    _reg(f"aten.{_n}.default")(
        (lambda name: lambda cv, node, x: _method(_float_in(x), name, f"aten.{name}")())(_n))


@_reg("aten.atan2.default")
def _atan2(cv, node, a, b):
    a, b = _binop_operands(cv, node, a, b)
    return _method(a, "atan2", "atan2")(b)
