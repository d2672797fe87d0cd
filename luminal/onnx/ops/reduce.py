"""Reductions and scans: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum/CumProd, TopK."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as TP

from ...dtype import DType
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register, set_fold, typed
from ._common import axes_list, axis, is_obj, obj_map, expr


def _reduce_axes(ctx, rank):
    """(axes, keepdims) with ONNX's rules: attribute (old versions) or input; empty means all axes unless
    ``noop_with_empty_axes`` (then none)."""
    if ctx.has_attr("axes"):
        axes = ctx.attr_ints("axes")
    elif ctx.has(1):
        axes = ctx.ints(1, "input 'axes'")
    else:
        axes = []
    if not axes:
        axes = [] if ctx.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(axes_list(axes, rank)), bool(ctx.attr("keepdims", 1))


def _empty_result(ctx, x, axes, keepdims, value):
    dims = [1 if k in axes else d for k, d in enumerate(x.dims)] if keepdims else \
        [d for k, d in enumerate(x.dims) if k not in axes]
    return ctx.const(value, x.dtype, dims)


def _reducer(pre, reduce, post=None, empty=None):
    """Build a Reduce* handler: ``post(reduce(pre(x), axes, keepdim))``; ``empty`` is the value of a reduction
    over zero elements (``None``: whatever the formula gives)."""
    def handler(ctx):
        x = ctx.t(0)
        axes, keepdims = _reduce_axes(ctx, x.ndim)
        if empty is not None and any(not is_symbolic(dim(x.dims[a])) and dim(x.dims[a]) == 0 for a in axes):
            value = empty(x.dtype) if callable(empty) else empty
            return [_empty_result(ctx, x, axes, keepdims, value)]
        y = pre(x)
        if axes:
            y = reduce(y, tuple(axes), keepdims)
        if post is not None:
            y = post(y)
        return [y.cast(x.dtype) if y.dtype != x.dtype else y]
    return handler


def _lowest(dtype):
    return -math.inf if dtype.is_float else (False if dtype == DType.bool else int(np.iinfo(dtype.numpy).min))


def _highest(dtype):
    return math.inf if dtype.is_float else (True if dtype == DType.bool else int(np.iinfo(dtype.numpy).max))


def _mean(y, axes, keepdim):
    if not y.dtype.is_float:
        return y.cast(DType.float64).mean(axes, keepdim)
    return y.mean(axes, keepdim)


register("ReduceSum")(_reducer(lambda x: x, lambda y, a, k: y.sum(a, k), empty=0))
register("ReduceMean")(_reducer(lambda x: x, _mean, empty=math.nan))
register("ReduceMax")(_reducer(lambda x: x, lambda y, a, k: y.max(a, k), empty=_lowest))
register("ReduceMin")(_reducer(lambda x: x, lambda y, a, k: y.min(a, k), empty=_highest))
register("ReduceProd")(_reducer(lambda x: x, lambda y, a, k: y.prod(a, k), empty=1))
register("ReduceL1")(_reducer(lambda x: x.abs(), lambda y, a, k: y.sum(a, k), empty=0))
register("ReduceL2")(_reducer(lambda x: x * x, lambda y, a, k: y.sum(a, k), lambda y: y.sqrt(), empty=0))
register("ReduceSumSquare")(_reducer(lambda x: x * x, lambda y, a, k: y.sum(a, k), empty=0))
register("ReduceLogSum")(_reducer(lambda x: x, lambda y, a, k: y.sum(a, k), lambda y: y.log(), empty=-math.inf))
register("ReduceLogSumExp")(_reducer(lambda x: x, lambda y, a, k: y.logsumexp(a, k), empty=-math.inf))


def _fold_reduce(np_fn):
    def fold(ctx):
        x = ctx.static(0)
        axes, keepdims = _reduce_axes(ctx, x.ndim)
        if is_obj(x):
            if np_fn is not np.prod and np_fn is not np.sum:
                from ..registry import NotFoldable
                raise NotFoldable()
            out = x
            for a in sorted(axes, reverse=True):
                out = np.apply_along_axis(lambda v: _obj_reduce(np_fn, v), a, out) if out.shape[a] else \
                    np.full(out.shape[:a] + out.shape[a + 1:], 1 if np_fn is np.prod else 0)
                if keepdims:
                    out = np.expand_dims(out, a)
            return [obj_map(lambda v: v, out)]
        return [np.asarray(np_fn(x, axis=tuple(axes), keepdims=keepdims)).astype(x.dtype)]
    return fold


def _obj_reduce(fn, v):
    acc = expr(1 if fn is np.prod else 0)
    for e in v:
        acc = acc * expr(e) if fn is np.prod else acc + expr(e)
    return acc


set_fold("ReduceProd")(_fold_reduce(np.prod))
set_fold("ReduceSum")(_fold_reduce(np.sum))
set_fold("ReduceMax")(_fold_reduce(np.max))
set_fold("ReduceMin")(_fold_reduce(np.min))


# ---------------------------------------------------------------------------------------------------- ArgMax / ArgMin
def _arg(largest: bool):
    def handler(ctx):
        x = ctx.t(0)
        a = axis(ctx.attr("axis", 0), x.ndim)
        keep = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):
            n = x.dims[a]
            flipped = x.flip(a)
            idx = flipped.argmax(a, keep) if largest else flipped.argmin(a, keep)
            return [typed((n - 1) - idx, TP.INT64)]
        return [typed(x.argmax(a, keep) if largest else x.argmin(a, keep), TP.INT64)]
    return handler


register("ArgMax")(_arg(True))
register("ArgMin")(_arg(False))


# ---------------------------------------------------------------------------------------------------- softmax family
@register("Softmax")
def _softmax(ctx):
    x = ctx.t(0)
    return [x.softmax(axis(ctx.attr("axis", -1), x.ndim))]


@register("LogSoftmax")
def _log_softmax(ctx):
    x = ctx.t(0)
    return [x.log_softmax(axis(ctx.attr("axis", -1), x.ndim))]


@register("Hardmax")
def _hardmax(ctx):
    x = ctx.t(0)
    a = axis(ctx.attr("axis", -1), x.ndim)
    idx = x.argmax(a, keepdim=True)
    n = x.dims[a]
    shape = [1] * x.ndim
    shape[a] = n
    positions = ctx.graph.arange(n, dtype=DType.int64).reshape(shape)
    return [positions.eq(idx).cast(x.dtype)]


# ---------------------------------------------------------------------------------------------------- scans
def _scan(fn, identity):
    def handler(ctx):
        x = ctx.t(0)
        a = axis(ctx.scalar(1, "input 'axis'"), x.ndim)
        n = x.dims[a]
        if ctx.attr("reverse", 0):
            x = x.flip(a)
        if ctx.attr("exclusive", 0):
            x = x.pad(_pads(x.ndim, a), identity).slice_axis(a, 0, n)
        y = fn(x, a)
        if ctx.attr("reverse", 0):
            y = y.flip(a)
        return [y.cast(ctx.t(0).dtype)]
    return handler


def _pads(rank, a):
    pads = [(0, 0)] * rank
    pads[a] = (1, 0)
    return pads


register("CumSum")(_scan(lambda x, a: x.cumsum(a), 0))
register("CumProd")(_scan(lambda x, a: x.cumprod(a), 1))


# ---------------------------------------------------------------------------------------------------- TopK
@register("TopK")
def _topk(ctx):
    x = ctx.t(0)
    k = ctx.scalar(1, "input 'K'")
    if isinstance(k, type(expr("k"))):
        raise OnnxImportError("TopK needs a constant K")
    k = int(k)
    a = axis(ctx.attr("axis", -1), x.ndim)
    largest = bool(ctx.attr("largest", 1))
    n = dim(x.dims[a])
    if is_symbolic(n):
        raise OnnxImportError("TopK over a symbolic axis is not supported")
    if k > n:
        raise OnnxImportError(f"TopK: K = {k} is larger than the axis ({n})")
    values, idx = x.topk(k, a, largest=largest)
    return [values, typed(idx, TP.INT64)]
