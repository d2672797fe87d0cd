"""Scans, their inverse and triangular masks: ``cumsum cummax cumprod diff tril triu``.

A short scan (``n <= SCAN_WINDOW_MAX``) or one along a symbolic axis is a
zero-copy sliding-window view: pad ``n - 1`` identity elements in front, take
windows of ``n`` (``pool``), reduce the window axis -- O(n^2) work, but one fused
reduction with no data movement. Longer ``cumsum``/``cumprod`` use Hillis-Steele
doubling instead: ``ceil(log2 n)`` steps ``x = x + x shifted by 2^k`` (the shift a
pad-and-slice view), O(n log n) work (float16 accumulates in float32). An axis of
size 0 gives an empty result, and a 0-d tensor scans to itself, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..dtype import DType
from ._util import normalize_axis

SCAN_WINDOW_MAX = 32
"""Scans up to this length use the one-kernel sliding-window form; longer concrete ones the doubling form."""


class ScanOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with scans and ``tril``/``triu``."""

    def _windows(self, axis: int, identity):
        """``(windows, window axis)``: reducing the window axis of the view gives the inclusive scan."""
        axis = normalize_axis(axis, self.ndim)
        if self.ndim == 0:  # a 0-d tensor is its own scan: one window of one element
            return self.unsqueeze(0), 0
        n = self.dims[axis]
        if n == 0:  # no elements: (..., 0 windows, 1, ...)
            return self.unsqueeze(axis + 1), axis + 1
        if identity == 0:
            padded = self.pad_axis(axis, n - 1, 0)
        else:
            pads = [(0, 0)] * self.ndim
            pads[axis] = (n - 1, 0)
            padded = self.pad(pads, value=identity)
        return padded.pool(axis, n), axis + 1  # (..., n windows, n kernel, ...)

    def _doubling(self, axis: int, identity, combine):
        """The inclusive scan by Hillis-Steele doubling, or None where the window form is used (see the module
        docstring). ``combine(a, b)`` is the associative step; ``identity`` fills the shifted-in slots."""
        if self.ndim == 0:
            return None
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis].to_int()
        if n is None or n <= SCAN_WINDOW_MAX:
            return None
        x = self.cast(DType.float32) if self.dtype.is_half else self
        shift = 1
        while shift < n:
            pads = [(0, 0)] * x.ndim
            pads[axis] = (shift, -shift)  # x shifted by `shift` along the axis, identity in front (a view)
            x = combine(x, x.pad(pads, value=identity))
            shift *= 2
        return x.cast(self.dtype)

    def cumsum(self, axis: int = -1):
        """Running sum along ``axis`` (bool/int accumulate in int64)."""
        x = self if self.dtype.is_float else self.cast(DType.int64)
        out = x._doubling(axis, 0, lambda a, b: a + b)
        if out is not None:
            return out
        win, k = x._windows(axis, 0)
        return win.sum(k)

    def cummax(self, axis: int = -1, return_indices: bool = False):
        """Running maximum along ``axis`` (values; NaN propagates). ``return_indices=True`` gives the namedtuple
        ``(values, indices)`` of ``torch.cummax`` (see :mod:`luminal.hl_ops.sorting` for the tie rule)."""
        low = -np.inf if self.dtype.is_float else int(np.iinfo(self.dtype.numpy).min) if self.dtype.is_int else 0
        win, k = self._windows(axis, low)
        values = win.max(k)
        return self._with_cum_indices(axis, values, "cummax") if return_indices else values

    def cummin(self, axis: int = -1, return_indices: bool = False):
        """Running minimum along ``axis``; ``return_indices=True`` as in :meth:`cummax`."""
        if self.dtype.is_int:  # ~cummax(~x): -x would overflow at the int minimum
            values = -((-self - 1).cummax(axis)) - 1
        else:
            values = -((-self).cummax(axis))
        return self._with_cum_indices(axis, values, "cummin") if return_indices else values

    def _with_cum_indices(self, axis, values, name):
        from .sorting import CumMinResult, CumResult
        from ._util import constant
        if self.ndim == 0:
            idx = constant(self.graph, 0, DType.int64, ())
        else:
            idx = self._cum_extreme_indices(normalize_axis(axis, self.ndim), values, name == "cummax")
        cls = CumResult if name == "cummax" else CumMinResult
        return cls(values, idx)

    def cumprod(self, axis: int = -1):
        """Running product along ``axis``."""
        x = self if self.dtype != DType.bool else self.cast(DType.int64)
        out = x._doubling(axis, 1, lambda a, b: a * b)
        if out is not None:
            return out
        win, k = x._windows(axis, 1)
        return win.prod(k)

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        """``torch.diff``: the ``n``-th forward difference along ``dim`` (``x[1:] - x[:-1]``, applied ``n``
        times; ``logical_xor`` for bool tensors), after concatenating ``prepend`` / ``append`` (tensors of the
        same rank, matching ``self``'s shape except along ``dim``) to ``self``. ``n = 0`` returns ``self``; once
        ``dim`` is used up the result is empty along it. (The file comparison once called ``diff`` is
        :meth:`~luminal.hl_ops.debug.DebugOps.compare_file`.)"""
        from ..tensor import GraphTensor
        from .movement import concat

        if isinstance(n, (str, bytes)) or hasattr(n, "__fspath__"):
            raise TypeError("diff(n, dim, prepend, append) is torch.diff; the comparison with a reference file is "
                            "now compare_file(file, atol, rtol)")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"diff: n must be an int, got {type(n).__name__}")
        if n < 0:
            raise RuntimeError(f"diff: order must be non-negative but got {n}")
        if self.ndim == 0:
            raise RuntimeError("diff expects input to be at least one-dimensional")
        axis = normalize_axis(dim, self.ndim, "dim")
        x = self
        if prepend is not None or append is not None:
            for name, p in (("prepend", prepend), ("append", append)):
                if p is None:
                    continue
                if not isinstance(p, GraphTensor):
                    raise TypeError(f"diff: {name} must be a tensor, got {type(p).__name__}")
                if p.ndim != self.ndim:
                    raise RuntimeError(f"diff expects prepend or append to be the same dimension as input "
                                       f"({name} has {p.ndim} dims, input {self.ndim})")
            x = concat(([prepend] if prepend is not None else []) + [self] +
                       ([append] if append is not None else []), axis)
        for _ in range(int(n)):
            size = x.dims[axis]
            if size.is_constant() and size.to_int() == 0:
                break
            a = x.slice_axis(axis, 1, None)
            b = x.slice_axis(axis, 0, size - 1)
            x = a.logical_xor(b) if x.dtype == DType.bool else a - b
        return x

    def _triangle(self, k: int, lower: bool):
        if self.ndim < 2:
            raise ValueError(f"{'tril' if lower else 'triu'} needs at least 2 dims, got {self.ndim}")
        from .binary import where
        m, n = self.dims[-2], self.dims[-1]
        rows = self.graph.arange(m, dtype=DType.int64).unsqueeze(-1).expand((m, n))
        cols = self.graph.arange(n, dtype=DType.int64).unsqueeze(0).expand((m, n))
        diff = cols - rows
        mask = diff.le(k) if lower else diff.ge(k)
        return where(mask, self, False if self.dtype == DType.bool else 0)  # keep the dtype (bool stays bool)

    def tril(self, diagonal: int = 0):
        """Keep the lower triangle (``col - row <= diagonal``) of the last two axes, zero elsewhere."""
        return self._triangle(diagonal, lower=True)

    def triu(self, diagonal: int = 0):
        """Keep the upper triangle (``col - row >= diagonal``) of the last two axes, zero elsewhere."""
        return self._triangle(diagonal, lower=False)
