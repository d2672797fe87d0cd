"""Reductions over axes: ``sum max min mean prod var std argmax argmin logsumexp any all``.

Each reduced axis is one ``SumReduce``/``MaxReduce`` node (highest axis first so
indices stay valid). ``axis=None`` reduces everything; ``keepdim=True`` keeps the
reduced axes as size 1 (a free view). Integer and bool sums accumulate in int64,
as in PyTorch. ``prod`` multiplies pairwise in a tree of ``Mul`` nodes (exact
signs and zeros); over a symbolic axis it uses sign and ``exp(sum log|x|)``.
"""

from __future__ import annotations

from .. import ops
from ..amp import autocast_float32
from ..dtype import DType
from ..shape import to_expr
from ._util import constant, normalize_axes, normalize_axis


class ReductionOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with the reductions."""

    def _reduce(self, op_type, axes, keepdim: bool):
        axes = normalize_axes(axes, self.ndim)
        x = self
        for axis in reversed(axes):
            dims = x.dims[:axis] + x.dims[axis + 1:]
            x = x._apply(op_type(axis), dims=dims)
        if keepdim:
            for axis in axes:
                x = x.unsqueeze(axis)
        return x

    def _keep_axes(self, x, axes, keepdim):
        if keepdim:
            for axis in axes:
                x = x.unsqueeze(axis)
        return x

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        """Sum over ``axis`` (int, tuple or None for all). bool/int32 inputs sum in int64."""
        x = self
        if dtype is not None:
            x = x.cast(dtype)
        elif not x.dtype.is_float:
            x = x.cast(DType.int64)
        if x.dtype == DType.bfloat16:  # float32 accumulation over all the axes, rounded once (PyTorch's CPU sum)
            return x.cast(DType.float32)._reduce(ops.SumReduce, axis, keepdim).cast(DType.bfloat16)
        return x._reduce(ops.SumReduce, axis, keepdim)

    def max(self, axis=None, keepdim: bool = False):
        """Maximum over ``axis`` (values only, like ``torch.amax``); NaN propagates."""
        if self.dtype == DType.bool:
            return self.cast(DType.int32).max(axis, keepdim).cast(DType.bool)
        return self._reduce(ops.MaxReduce, axis, keepdim)

    amax = max

    def min(self, axis=None, keepdim: bool = False):
        """Minimum over ``axis`` (``-max(-x)``)."""
        if self.dtype == DType.bool:
            return self.cast(DType.int32).min(axis, keepdim).cast(DType.bool)
        if self.dtype.is_int:  # ~max(~x) with ~x = -x - 1: -x would overflow at the int minimum
            return -((-self - 1).max(axis, keepdim)) - 1
        return -((-self).max(axis, keepdim))

    amin = min

    def mean(self, axis=None, keepdim: bool = False):
        """Arithmetic mean over ``axis`` (float tensors only, as in PyTorch)."""
        if not self.dtype.is_float:
            raise TypeError(f"mean() needs a floating-point tensor, got {self.dtype}; cast first")
        axes = normalize_axes(axis, self.ndim)
        if self.dtype == DType.bfloat16:  # computed in float32, rounded once (PyTorch's CPU mean)
            return self.cast(DType.float32).mean(axes, keepdim).cast(DType.bfloat16)
        count = to_expr(1)
        for a in axes:
            count = count * self.dims[a]
        return self.sum(axes, keepdim) / _count(self, count)

    def var(self, axis=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None):
        """Variance with Bessel's ``correction`` (1 = unbiased, the PyTorch default)."""
        if unbiased is not None:
            correction = 1 if unbiased else 0
        if not self.dtype.is_float:
            raise TypeError(f"var() needs a floating-point tensor, got {self.dtype}")
        axes = normalize_axes(axis, self.ndim)
        count = to_expr(1)
        for a in axes:
            count = count * self.dims[a]
        centered = self - self.mean(axes, keepdim=True)
        ss = centered.square().sum(axes, keepdim)
        denom = count - correction
        return ss / _count(self, denom).maximum(0.0)

    def std(self, axis=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None):
        """Standard deviation: ``sqrt(var)``."""
        return self.var(axis, correction, keepdim, unbiased).sqrt()

    def logsumexp(self, axis=None, keepdim: bool = False):
        """``log(sum(exp(x)))`` computed stably around the maximum."""
        from .binary import where
        axes = normalize_axes(axis, self.ndim)
        m = self.max(axes, keepdim=True)
        m = where(m.isinf(), 0.0, m)  # all -inf rows stay -inf, +inf rows stay +inf
        out = (self - m).exp().sum(axes, keepdim=True).log() + m
        if not keepdim:
            for a in reversed(axes):
                out = out.squeeze(a)
        return out

    @autocast_float32  # luminal.autocast: computed in float32, as torch
    def prod(self, axis=None, keepdim: bool = False, dtype=None):
        """Product over ``axis``: a pairwise ``Mul`` tree for concrete sizes."""
        x = self if dtype is None else self.cast(dtype)
        if not x.dtype.is_float:  # bool/int32/int64 multiply in int64, as in PyTorch
            x = x.cast(DType.int64)
        axes = normalize_axes(axis, x.ndim)
        for a in reversed(axes):
            x = _prod_axis(x, a)
        return self._keep_axes(x, axes, keepdim)

    def argmax(self, axis=None, keepdim: bool = False):
        """Index (int64) of the first maximum along ``axis`` (flattened when None)."""
        return _arg_extreme(self, axis, keepdim, largest=True)

    def argmin(self, axis=None, keepdim: bool = False):
        """Index (int64) of the first minimum along ``axis`` (flattened when None)."""
        return _arg_extreme(self, axis, keepdim, largest=False)

    def any(self, axis=None, keepdim: bool = False):
        """True where any element along ``axis`` is nonzero."""
        return self._as_bool().cast(DType.int32).max(axis, keepdim).gt(0)  # an empty axis gives False

    def all(self, axis=None, keepdim: bool = False):
        """True where every element along ``axis`` is nonzero."""
        return self._as_bool().cast(DType.int32).min(axis, keepdim).cast(DType.bool)

    def count_nonzero(self, axis=None):
        return self._as_bool().sum(axis)


def _count(like, count):
    """The (possibly symbolic) element count as a float constant of ``like``'s dtype."""
    return constant(like.graph, count, like.dtype if like.dtype.is_float else DType.float32, ())


def _prod_axis(x, axis: int):
    n = x.dims[axis]
    if not n.is_constant():
        return _prod_axis_symbolic(x, axis)
    n = n.to_int()
    if n == 0:
        return constant(x.graph, 1, x.dtype, x.dims[:axis] + x.dims[axis + 1:])
    while n > 1:
        half = n // 2
        lo = x.slice_axis(axis, 0, half)
        hi = x.slice_axis(axis, half, 2 * half)
        prod = lo * hi
        if n % 2:
            prod = prod.concat(x.slice_axis(axis, 2 * half, n), axis)
        x, n = prod, half + n % 2
    return x.squeeze(axis)


def _prod_axis_symbolic(x, axis: int):
    xf = x._floating()
    negatives = (xf < 0).cast(DType.int64).sum(axis)
    sign = 1.0 - (negatives.remainder(2).cast(xf.dtype) * 2.0)
    mag = xf.abs().log().sum(axis).exp()
    out = sign * mag
    return out if x.dtype.is_float else out.round().cast(x.dtype)


def _arg_extreme(x, axis, keepdim: bool, largest: bool):
    from .binary import where
    if axis is None:
        flat = x.reshape((x.numel(),))
        out = _arg_extreme(flat, 0, False, largest)
        return out.reshape((1,) * x.ndim) if keepdim else out
    axis = normalize_axis(axis, x.ndim)
    if x.ndim == 0:  # the only element (axis 0 or -1, as PyTorch)
        return constant(x.graph, 0, DType.int64, ())
    values = x if x.dtype != DType.bool else x.cast(DType.int32)
    ext = values.max(axis, keepdim=True) if largest else values.min(axis, keepdim=True)
    hit = values.eq(ext)
    if values.dtype.is_float:  # PyTorch treats NaN as the extreme value
        has_nan = values.isnan().any(axis, keepdim=True)
        hit = where(has_nan, values.isnan(), hit)
    n = x.dims[axis]
    idx = x.graph.arange(n, dtype=DType.int64)
    shape = [1] * x.ndim
    shape[axis] = n
    idx = idx.reshape(shape).expand(x.dims)
    big = constant(x.graph, n, DType.int64, ())
    first = where(hit, idx, big).min(axis, keepdim)
    return first
