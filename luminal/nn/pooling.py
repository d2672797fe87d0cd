"""Pooling layers (PyTorch names, arguments and output sizes) built from sliding-window views.

* ``MaxPool{1,2,3}d``: pad with ``-inf`` (the int minimum for int inputs, which keep their dtype), ``pool`` each
  spatial axis into ``(n_windows, kernel)``, ``max`` over the kernel axes. ``ceil_mode`` adds the extra right
  padding PyTorch's ceil rule implies (a last window that would start inside the right padding is dropped, as
  in PyTorch).
* ``AvgPool{1,2,3}d``: zero padding, windows, ``sum``, divided by the window size -- or, for
  ``count_include_pad=False`` / ``ceil_mode`` / ``divisor_override``, by PyTorch's per-window divisor, computed
  exactly by sum-pooling a (broadcast) mask of ones.
* ``AdaptiveAvgPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``: PyTorch's bins ``[floor(i*L/out), ceil((i+1)*L/out))``
  one axis at a time (box means and maxima are separable): windows when ``L % out == 0``, otherwise per-bin
  slices reduced and concatenated.
* ``GlobalAvgPool``: the mean over all spatial dims.
* ``return_indices=True`` (max pooling): the flat in-plane position of each window's maximum, from a pooled
  position map compared with the window maxima (see ``_max_indices``); ``MaxUnpool{1,2,3}d`` /
  ``max_unpool*d`` scatter the values back (an (M, P) comparison per plane).

Inputs are ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``; the last ``n`` axes are pooled.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import DType
from ..graph import GraphError
from ..hl_ops import concat, where
from ..hl_ops.binary import _grad_rule
from ..module import Module, check_graph_tensor


def _ntuple(value, n: int, name: str) -> tuple:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1 and n != 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{name} needs {n} values (one per spatial dim), got {value}")
    return value


def _check_input(x, n: int, name: str):
    check_graph_tensor(x, name)
    if x.ndim not in (n + 1, n + 2):
        raise GraphError(f"{name}: expected a {n + 1}-D (unbatched) or {n + 2}-D (batched) input, got shape "
                         f"{[str(d) for d in x.dims]}")
    return list(range(x.ndim - n, x.ndim))


def _const(d, name) -> int:
    if not d.is_constant():
        raise GraphError(f"{name} needs concrete spatial sizes here, got the symbolic size {d}")
    return d.to_int()


def _out_size(length: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool, name: str) -> int:
    """PyTorch's ``pooling_output_shape``."""
    span = dilation * (kernel - 1) + 1
    num = length + 2 * pad - span
    if num < 0:
        raise ValueError(f"{name}: the window (span {span}) is larger than the padded input ({length + 2 * pad})")
    out = (-(-num // stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= length + pad:
        out -= 1
    return out


def _windows(x, axes, kernel, stride, padding, dilation, ceil_mode, pad_value, name):
    """Pad (``pad_value``) and pool every axis of ``axes``; returns (windows, kernel axes)."""
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        extra = _ceil_extra(x.dims[a], kernel[i], stride[i], padding[i], name, dilation[i]) if ceil_mode else 0
        pairs[a] = (padding[i], padding[i] + extra)
    x = x.pad(pairs, pad_value)
    k_axes = []
    for i, a in enumerate(axes):
        axis = a + i  # every earlier pooled axis added one dim before this one
        x = x.pool(axis, kernel[i], stride[i], dilation[i])
        k_axes.append(axis + 1)
    return x, tuple(k_axes)


# ---------------------------------------------------------------------------------------------------- max pooling
def _max_pool(x, n, kernel_size, stride, padding, dilation, ceil_mode, return_indices, name):
    axes = _check_input(x, n, name)
    kernel = _ntuple(kernel_size, n, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else \
        _ntuple(stride, n, "stride")
    padding = _ntuple(padding, n, "padding")
    dilation = _ntuple(dilation, n, "dilation")
    for k, p in zip(kernel, padding):
        if p < 0 or p > k // 2:
            raise ValueError(f"{name}: padding should be at most half of the kernel size, got padding={padding} "
                             f"for kernel_size={kernel}")
    if x.dtype.name == "bool":
        raise TypeError(f"{name} is not defined for bool tensors (as in PyTorch); cast first")
    # the padding must never win: -inf for floats, the smallest value for ints (which keep their dtype)
    low = -math.inf if x.dtype.is_float else int(np.iinfo(x.dtype.numpy).min)
    w, k_axes = _windows(x, axes, kernel, stride, padding, dilation, ceil_mode, low, name)
    real = None
    if x.dtype.is_float and (any(padding) or ceil_mode):  # padded positions never take the gradient
        real = _windows(_flat_positions(x, axes, name), axes, kernel, stride, padding, dilation, ceil_mode, -1,
                        name)[0] >= 0
    out = window_max(w, k_axes, real)
    if not return_indices:
        return out
    return out, _max_indices(x, axes, w, k_axes, kernel, stride, padding, dilation, ceil_mode, name)


def window_max(w, axes, real=None, keepdim: bool = False):
    """``w.max(axes)`` differentiated as PyTorch's max pooling is: each window's whole gradient goes to its
    first maximum in scan order (row-major over ``axes``), or to its last NaN when it holds one, never to a
    position where ``real`` (a bool tensor broadcastable to ``w``, optional) is False -- not shared among tied
    maxima as ``amax``'s gradient is. Needs constant window extents (else it is a plain ``max``). The rule is
    ``"max_pool"`` of :mod:`luminal.training.autograd`; ONNX's ``MaxPool`` uses it too."""
    axes = tuple(sorted(a % w.ndim for a in ((axes,) if isinstance(axes, int) else axes)))
    out = w.max(axes, keepdim=keepdim)
    if w.dtype.is_float and all(w.dims[a].is_constant() for a in axes):
        _grad_rule(out, "max_pool", (w,) if real is None else (w, real), axes)
    return out


def _flat_positions(x, axes, name):
    """int64 tensor of shape (1,..., *spatial): each spatial element's row-major index within its plane."""
    sizes = [_const(x.dims[a], name) for a in axes]
    lead = x.ndim - len(axes)
    pos = None
    for i, size in enumerate(sizes):
        shape = [1] * x.ndim
        shape[lead + i] = size
        step = int(np.prod(sizes[i + 1:], dtype=np.int64))
        part = x.graph.arange(size, dtype=DType.int64).reshape(shape) * step
        pos = part if pos is None else pos + part
    return pos


def _max_indices(x, axes, w, k_axes, kernel, stride, padding, dilation, ceil_mode, name):
    """``torch.max_pool*d``'s indices: the flat position (within the input plane) of the first maximum of each
    window in scan order -- the smallest position, since kernel offsets increase the input coordinates -- or,
    in a window holding NaN, of its last NaN (ATen's ``val > max || isnan(val)`` loop); padding never counts."""
    pos = _flat_positions(x, axes, name)
    pw, _ = _windows(pos, axes, kernel, stride, padding, dilation, ceil_mode, -1, name)
    real = pw >= 0
    best = w.max(k_axes, keepdim=True)
    hit = w.eq(best).logical_and(real)
    big = int(np.prod([_const(x.dims[a], name) for a in axes], dtype=np.int64))
    first = where(hit, pw, big).min(k_axes)
    if not x.dtype.is_float:
        return first
    nan = w.isnan().logical_and(real)
    last_nan = where(nan, pw, -1).max(k_axes)
    return where(last_nan >= 0, last_nan, first)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool1d``."""
    return _max_pool(x, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool1d")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool2d``."""
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool2d")


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """``torch.nn.functional.max_pool3d``."""
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool3d")


# ---------------------------------------------------------------------------------------------------- avg pooling
def _avg_pool(x, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, name):
    axes = _check_input(x, n, name)
    if not x.dtype.is_float:
        raise TypeError(f"{name} needs a floating-point input, got {x.dtype}")
    kernel = _ntuple(kernel_size, n, "kernel_size")
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else \
        _ntuple(stride, n, "stride")
    padding = _ntuple(padding, n, "padding")
    for k, p in zip(kernel, padding):
        if p < 0 or p > k // 2:
            raise ValueError(f"{name}: padding should be at most half of the kernel size, got padding={padding} "
                             f"for kernel_size={kernel}")
    ones = (1,) * n
    w, k_axes = _windows(x, axes, kernel, stride, padding, ones, ceil_mode, 0.0, name)
    total = w.sum(k_axes)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError(f"{name}: divisor_override must be non-zero")
        return total / float(divisor_override)
    extras = [_ceil_extra(x.dims[a], kernel[i], stride[i], padding[i], name) if ceil_mode else 0
              for i, a in enumerate(axes)]
    if count_include_pad and not any(extras):
        return total / float(np.prod(kernel))
    # PyTorch's per-window divisor: the window clipped to the padded input (count_include_pad) or to the input,
    # counted exactly by sum-pooling a mask of ones (a broadcast constant) laid out like the padded input
    spatial = [x.dims[a] for a in axes]
    if count_include_pad:
        mask = x.graph.ones([d + 2 * p for d, p in zip(spatial, padding)], x.dtype)
        mask = mask.pad([(0, e) for e in extras])
    else:
        mask = x.graph.ones(spatial, x.dtype).pad([(p, p + e) for p, e in zip(padding, extras)])
    k_mask = []
    for i in range(n):
        mask = mask.pool(2 * i, kernel[i], stride[i], 1)
        k_mask.append(2 * i + 1)
    return total / mask.sum(tuple(k_mask))


def _ceil_extra(dim, kernel, stride, pad, name, dilation=1) -> int:
    """Extra right padding that ceil_mode needs beyond ``pad`` for PyTorch's output size."""
    length = _const(dim, name)
    out = _out_size(length, kernel, stride, pad, dilation, True, name)
    span = dilation * (kernel - 1) + 1
    return max(0, (out - 1) * stride + span - (length + 2 * pad))


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """``torch.nn.functional.avg_pool1d``."""
    return _avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None, "avg_pool1d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """``torch.nn.functional.avg_pool2d``."""
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     "avg_pool2d")


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """``torch.nn.functional.avg_pool3d``."""
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     "avg_pool3d")


# ---------------------------------------------------------------------------------------------------- adaptive
def _adaptive_axis(x, axis: int, out: int, mode: str, name: str):
    length = _const(x.dims[axis], name)
    if out < 1:
        raise ValueError(f"{name}: output sizes must be positive, got {out}")
    if out == length:
        return x
    if length % out == 0:
        k = length // out
        w = x.pool(axis, k, k)
        return w.mean(axis + 1) if mode == "mean" else window_max(w, axis + 1)
    parts = []
    for i in range(out):
        start, end = (i * length) // out, -(-((i + 1) * length) // out)
        s = x.slice_axis(axis, start, end)
        parts.append(s.mean(axis, keepdim=True) if mode == "mean" else window_max(s, axis, keepdim=True))
    return concat(parts, axis)


def _adaptive(x, n, output_size, mode, return_indices, name):
    if return_indices and mode != "max":
        raise ValueError(f"{name}: return_indices is only for adaptive max pooling")
    axes = _check_input(x, n, name)
    if mode == "mean" and not x.dtype.is_float:
        raise TypeError(f"{name} needs a floating-point input, got {x.dtype}")
    sizes = (output_size,) * n if output_size is None or isinstance(output_size, (int, np.integer)) \
        else tuple(output_size)
    if len(sizes) == 1 and n != 1:
        sizes = sizes * n
    if len(sizes) != n:
        raise ValueError(f"{name}: output_size needs {n} values, got {output_size}")
    if return_indices:
        outs = [_const(x.dims[a], name) if s is None else int(s) for a, s in zip(axes, sizes)]
        return _adaptive_max_with_indices(x, axes, outs, name)
    pairs = list(zip(axes, sizes))
    if mode == "max":  # the last axis first: separable first-maximum gradients then pick PyTorch's (row-major) one
        pairs.reverse()
    for a, s in pairs:
        if s is None:
            continue  # None keeps the input size (PyTorch)
        x = _adaptive_axis(x, a, int(s), mode, name)
    return x


def _adaptive_max_with_indices(x, axes, outs, name):
    """Adaptive max pooling with ``torch``'s indices (flat in-plane positions; first maximum, last NaN). When
    every axis divides evenly it is a plain windowed max pool; otherwise each output cell's bin (a box of
    PyTorch's ``[floor(i L / out), ceil((i + 1) L / out))`` ranges) is sliced and reduced on its own, then the
    cells are concatenated (prod(outs) slices: meant for the small outputs adaptive pooling is used for)."""
    lengths = [_const(x.dims[a], name) for a in axes]
    if any(o < 1 for o in outs):
        raise ValueError(f"{name}: output sizes must be positive, got {outs}")
    if all(L % o == 0 for L, o in zip(lengths, outs)):
        kernel = tuple(L // o for L, o in zip(lengths, outs))
        n = len(axes)
        return _max_pool(x, n, kernel, kernel, 0, 1, False, True, name)
    pos = _flat_positions(x, axes, name)
    big = int(np.prod(lengths, dtype=np.int64))

    def cell(vals, where_pos, depth):
        if depth == len(axes):
            red = tuple(axes)
            best = window_max(vals, red, keepdim=True)
            first = where(vals.eq(best), where_pos, big).min(red, keepdim=True)
            if vals.dtype.is_float:
                last_nan = where(vals.isnan(), where_pos, -1).max(red, keepdim=True)
                first = where(last_nan >= 0, last_nan, first)
            return best, first
        a, L, o = axes[depth], lengths[depth], outs[depth]
        parts_v, parts_i = [], []
        for i in range(o):
            start, end = (i * L) // o, -(-((i + 1) * L) // o)
            v, j = cell(vals.slice_axis(a, start, end), where_pos.slice_axis(a, start, end), depth + 1)
            parts_v.append(v)
            parts_i.append(j)
        return concat(parts_v, a), concat(parts_i, a)

    values, idx = cell(x, pos.expand(x.dims), 0)
    return values, idx


def adaptive_avg_pool1d(x, output_size):
    """``torch.nn.functional.adaptive_avg_pool1d``."""
    return _adaptive(x, 1, output_size, "mean", False, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(x, output_size):
    """``torch.nn.functional.adaptive_avg_pool2d``."""
    return _adaptive(x, 2, output_size, "mean", False, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(x, output_size):
    """``torch.nn.functional.adaptive_avg_pool3d``."""
    return _adaptive(x, 3, output_size, "mean", False, "adaptive_avg_pool3d")


def adaptive_max_pool1d(x, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool1d``."""
    return _adaptive(x, 1, output_size, "max", return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool2d``."""
    return _adaptive(x, 2, output_size, "max", return_indices, "adaptive_max_pool2d")


def adaptive_max_pool3d(x, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool3d``."""
    return _adaptive(x, 3, output_size, "max", return_indices, "adaptive_max_pool3d")


def global_avg_pool(x, keepdim: bool = False, start_dim: int = 2):
    """Mean over every dim from ``start_dim`` on (the spatial dims of ``(N, C, *spatial)``)."""
    check_graph_tensor(x, "global_avg_pool")
    start = start_dim % x.ndim if x.ndim else 0
    return x.mean(tuple(range(start, x.ndim)), keepdim=keepdim)


# ---------------------------------------------------------------------------------------------------- modules
class _MaxPoolNd(Module):
    _n = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, \
            padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        return _max_pool(x, self._n, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                         self.return_indices, type(self).__name__)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    _n = 1


class MaxPool2d(_MaxPoolNd):
    _n = 2


class MaxPool3d(_MaxPoolNd):
    _n = 3


class _AvgPoolNd(Module):
    _n = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, \
            padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x):
        return _avg_pool(x, self._n, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                         self.count_include_pad, self.divisor_override, type(self).__name__)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    _n = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad, None)


class AvgPool2d(_AvgPoolNd):
    _n = 2


class AvgPool3d(_AvgPoolNd):
    _n = 3


class _AdaptivePoolNd(Module):
    _n = 0
    _mode = "mean"

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        if return_indices and self._mode != "max":
            raise ValueError(f"{type(self).__name__}: return_indices is only for adaptive max pooling")
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, x):
        return _adaptive(x, self._n, self.output_size, self._mode, self.return_indices, type(self).__name__)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _AdaptiveAvg(_AdaptivePoolNd):
    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveAvgPool1d(_AdaptiveAvg):
    _n = 1


class AdaptiveAvgPool2d(_AdaptiveAvg):
    _n = 2


class AdaptiveAvgPool3d(_AdaptiveAvg):
    _n = 3


class AdaptiveMaxPool1d(_AdaptivePoolNd):
    _n, _mode = 1, "max"


class AdaptiveMaxPool2d(_AdaptivePoolNd):
    _n, _mode = 2, "max"


class AdaptiveMaxPool3d(_AdaptivePoolNd):
    _n, _mode = 3, "max"


class GlobalAvgPool(Module):
    """Mean over all spatial dims (every dim from ``start_dim``, default 2 of ``(N, C, *spatial)``);
    ``keepdim=True`` keeps them as size 1 (like ``AdaptiveAvgPool2d(1)``)."""

    def __init__(self, keepdim: bool = False, start_dim: int = 2):
        super().__init__()
        self.keepdim, self.start_dim = keepdim, start_dim

    def forward(self, x):
        return global_avg_pool(x, self.keepdim, self.start_dim)

    def extra_repr(self) -> str:
        return f"keepdim={self.keepdim}, start_dim={self.start_dim}"


__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "global_avg_pool", "MaxPool1d", "MaxPool2d", "MaxPool3d",
           "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "GlobalAvgPool"]


# ---------------------------------------------------------------------------------------------------- max unpooling
def unpool_flat(x, indices, plane):
    """Scatter the values ``x`` (..., M) to positions ``indices`` (..., M) of zero planes of ``plane`` elements
    (the shared core of ``max_unpool*d`` and ONNX MaxUnpool; a repeated position keeps the last value)."""
    from ..hl_ops import scatter_elements
    from ..hl_ops.creation import constant
    base = constant(x.graph, 0, x.dtype, tuple(x.dims[:-1]) + (plane,))
    return scatter_elements(base, x.ndim - 1, indices.cast(DType.int64), x, "none")


def _max_unpool(x, indices, n, kernel_size, stride, padding, output_size, name):
    axes = _check_input(x, n, name)
    check_graph_tensor(indices, name)
    if tuple(indices.dims) != tuple(x.dims):
        raise ValueError(f"{name}: indices of shape {[str(d) for d in indices.dims]} must match the input "
                         f"{[str(d) for d in x.dims]}")
    if not indices.dtype.is_int:
        raise TypeError(f"{name}: indices must be an integer tensor, got {indices.dtype.value}")
    kernel = _ntuple(kernel_size, n, "kernel_size")
    stride = kernel if stride is None else _ntuple(stride, n, "stride")
    padding = _ntuple(padding, n, "padding")
    sizes = [_const(x.dims[a], name) for a in axes]
    default = [(sizes[i] - 1) * stride[i] - 2 * padding[i] + kernel[i] for i in range(n)]
    if output_size is None:
        out = default
    else:
        out = [int(v) for v in output_size][-n:]
        if len(out) != n:
            raise ValueError(f"{name}: output_size needs {n} spatial sizes, got {output_size}")
        for i in range(n):
            if not default[i] - stride[i] < out[i] < default[i] + stride[i]:
                raise ValueError(f"{name}: output_size {out} is not between {[d - s + 1 for d, s in zip(default, stride)]}"
                                 f" and {[d + s - 1 for d, s in zip(default, stride)]}")
    lead = list(x.dims[:x.ndim - n])
    m = int(np.prod(sizes, dtype=np.int64))
    plane = int(np.prod(out, dtype=np.int64))
    y = unpool_flat(x.reshape(lead + [m]), indices.reshape(lead + [m]), plane)
    return y.reshape(lead + out)


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """``torch.nn.functional.max_unpool1d``: the inverse of ``max_pool1d(return_indices=True)`` (zeros elsewhere).
    Builds an (M, P) comparison of the M pooled positions with the P output positions per plane."""
    return _max_unpool(x, indices, 1, kernel_size, stride, padding, output_size, "max_unpool1d")


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """``torch.nn.functional.max_unpool2d`` (see :func:`max_unpool1d`)."""
    return _max_unpool(x, indices, 2, kernel_size, stride, padding, output_size, "max_unpool2d")


def max_unpool3d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """``torch.nn.functional.max_unpool3d`` (see :func:`max_unpool1d`)."""
    return _max_unpool(x, indices, 3, kernel_size, stride, padding, output_size, "max_unpool3d")


class _MaxUnpoolNd(Module):
    _n = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, \
            padding

    def forward(self, x, indices, output_size=None):
        return _max_unpool(x, indices, self._n, self.kernel_size, self.stride, self.padding, output_size,
                           type(self).__name__)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool1d``."""
    _n = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool2d``."""
    _n = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool3d``."""
    _n = 3
