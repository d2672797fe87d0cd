"""Sorting, selection and scans with indices: ``sort argsort topk kthvalue median cummax/cummin(return_indices)
logcumsumexp softmin var_mean std_mean``.

How they are computed (there is no sort primitive): the **rank** of each element along the axis is a comparison
count, ``rank_i = #{j : x_j before x_i} + #{j < i : x_j == x_i}`` ("before" is ``<`` ascending, ``>`` descending;
NaN sorts as the largest value, as in PyTorch), which is a stable order. Output slot ``k`` then takes the element
whose rank is ``k`` (a sum over a one-hot of the ranks) and the values are a ``Gather`` of the input. This is
O(n^2) work and an (..., n, n) comparison per row, on both devices: fine for the rows of a few thousand that
``topk``/``sort`` usually see in a model, not a replacement for a sort of millions of elements. ``topk`` and
``kthvalue`` compare only the ranks with the k slots they need (O(n^2 + n k)).

Ties: ``sort``/``argsort`` are stable (equal values keep their order, as ``torch.sort(stable=True)``); ``topk``,
``kthvalue`` and ``median`` take the same stable order (torch leaves the index of tied values unspecified).
``cummax``/``cummin`` indices follow torch: the last index of the running extreme (ties move the index), and a NaN
holds the running value from where it appears. ``median`` is the lower median; a row with NaN gives NaN and the
index of its first NaN (``torch.median``).
"""

from __future__ import annotations

import math
from collections import namedtuple

from ..dtype import DType
from ._util import normalize_axis

SortResult = namedtuple("sort", ["values", "indices"])
TopKResult = namedtuple("topk", ["values", "indices"])
KthValueResult = namedtuple("kthvalue", ["values", "indices"])
MedianResult = namedtuple("median", ["values", "indices"])
CumResult = namedtuple("cummax", ["values", "indices"])
CumMinResult = namedtuple("cummin", ["values", "indices"])


def _where(c, a, b):
    from .binary import where
    return where(c, a, b)


def _axis(x, dim, what):
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{what}: dim must be an int, got {dim!r}")
    return normalize_axis(dim, max(x.ndim, 1))


def _last(x, axis):
    """``x`` with ``axis`` moved last, and the permutation that undoes it."""
    order = [j for j in range(x.ndim) if j != axis] + [axis]
    inverse = [order.index(j) for j in range(x.ndim)]
    return x.permute(order), inverse


def _ranks(xt, descending: bool):
    """Stable rank (int64) of each element along the last axis of ``xt`` (see the module docstring)."""
    n = xt.dims[-1]
    xi, xj = xt.unsqueeze(-1), xt.unsqueeze(-2)                     # (..., n, 1): element i, (..., 1, n): j
    if xt.dtype.is_float:
        ni, nj = xi.isnan(), xj.isnan()
        if descending:   # j before i: x_j > x_i, or x_j NaN and x_i not
            before = (xj > xi).logical_or(nj.logical_and(ni.logical_not()))
        else:            # x_j < x_i, or x_i NaN and x_j not
            before = (xj < xi).logical_or(ni.logical_and(nj.logical_not()))
        same = xj.eq(xi).logical_or(ni.logical_and(nj))
    else:
        v = xt if xt.dtype != DType.bool else xt.cast(DType.int32)
        vi, vj = v.unsqueeze(-1), v.unsqueeze(-2)
        before = (vj > vi) if descending else (vj < vi)
        same = vj.eq(vi)
    g = xt.graph
    rows = g.arange(n, dtype=DType.int64).unsqueeze(-1)             # i
    cols = g.arange(n, dtype=DType.int64).unsqueeze(0)              # j
    earlier = cols < rows                                           # (n, n): j < i
    return before.logical_or(same.logical_and(earlier)).cast(DType.int64).sum(-1)   # (..., n)


def _slots(rank, k):
    """Index (int64, (..., k)) of the element of rank 0..k-1 along the last axis of ``rank``."""
    g = rank.graph
    n = rank.dims[-1]
    hits = rank.unsqueeze(-1).eq(g.arange(k, dtype=DType.int64))   # (..., n, k)
    positions = g.arange(n, dtype=DType.int64).unsqueeze(-1)        # (n, 1)
    return _where(hits, positions, 0).sum(-2)


def _select(x, dim, k_first, count, descending, what):
    """Values and indices of the elements of sorted rank ``k_first .. k_first + count - 1`` along ``dim``."""
    if x.ndim == 0:
        x0 = x.unsqueeze(0)
        v, i = _select(x0, 0, k_first, count, descending, what)
        return v, i
    axis = _axis(x, dim, what)
    xt, inverse = _last(x, axis)
    rank = _ranks(xt, descending)
    idx = _slots(rank, k_first + count)
    if k_first:
        idx = idx.slice_axis(-1, k_first, k_first + count)
    values = xt.gather(xt.ndim - 1, idx)
    return values.permute(inverse), idx.permute(inverse)


TOPK_RANK_MAX = 1 << 20
"""``topk`` over rows with n^2 above this and ``k <= TOPK_ROUNDS_MAX`` takes k rounds of arg-extreme instead of
ranks (O(n k) work)."""
TOPK_ROUNDS_MAX = 64


def _topk_rounds(x, axis, k, largest):
    """k rounds of selecting the extreme untaken element along ``axis`` (O(n k)): NaN ranks as the largest value
    and ties take the lowest index first, as in the rank form."""
    xt, inverse = _last(x, axis)
    n = xt.dims[-1]
    key = xt.cast(DType.int32) if xt.dtype == DType.bool else xt
    fill = _lowest_of(key.dtype) if largest else _highest_of(key.dtype)
    positions = x.graph.arange(n, dtype=DType.int64)
    is_nan = xt.isnan() if xt.dtype.is_float else None
    taken = positions.lt(0)
    picks = []
    for _ in range(k):
        avail = taken.logical_not()
        real = avail if is_nan is None else avail.logical_and(is_nan.logical_not())
        masked = _where(real, key, fill)
        v = masked.max(-1, keepdim=True) if largest else masked.min(-1, keepdim=True)
        cand = real.logical_and(key.eq(v))
        if is_nan is not None:
            nan_av = avail.logical_and(is_nan)
            if largest:
                cand = _where(nan_av.any(-1, keepdim=True), nan_av, cand)
            else:
                cand = _where(real.any(-1, keepdim=True), cand, nan_av)
        p = _where(cand, positions, n).min(-1, keepdim=True)
        picks.append(p)
        taken = taken.logical_or(positions.eq(p))
    from .movement import concat
    idx = concat(picks, -1)
    values = xt.gather(xt.ndim - 1, idx)
    return values.permute(inverse), idx.permute(inverse)


def _lowest_of(dtype):
    import numpy as np
    return -math.inf if dtype.is_float else int(np.iinfo(dtype.numpy).min)


def _highest_of(dtype):
    import numpy as np
    return math.inf if dtype.is_float else int(np.iinfo(dtype.numpy).max)


def _const_size(x, axis, what):
    n = x.dims[axis] if x.ndim else None
    if n is None:
        return 1
    if not n.is_constant():
        raise ValueError(f"{what} needs a concrete size along dim {axis}, got {n}")
    return n.to_int()


class SortingOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor`: sorting, selection, scans with indices."""

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True):
        """``(values, indices)`` sorted along ``dim`` (``torch.sort``); always stable, NaN sorts last ascending and
        first descending. O(n^2) comparisons per row (see the module docstring)."""
        if self.ndim == 0:
            from ._util import constant
            return SortResult(self, constant(self.graph, 0, DType.int64, ()))
        axis = _axis(self, dim, "sort")
        n = _const_size(self, axis, "sort")
        v, i = _select(self, axis, 0, n, descending, "sort")
        return SortResult(v, i)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True):
        """The indices of :meth:`sort` (int64)."""
        return self.sort(dim, descending, stable).indices

    def msort(self):
        """``sort(dim=0).values``."""
        return self.sort(0).values

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002 - torch's name
        """The ``k`` largest (``largest=False``: smallest) elements along ``dim`` and their indices, in sorted order
        (``sorted=False`` returns the same order). Ties keep the lower index first. Raises ``ValueError`` if ``k``
        is not in ``[0, size]``."""
        if self.ndim == 0:
            n, axis = 1, 0
        else:
            axis = _axis(self, dim, "topk")
            n = _const_size(self, axis, "topk")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
            raise ValueError(f"topk: k = {k!r} is out of range for dim {dim} of size {n} (need 0 <= k <= {n})")
        if self.ndim == 0:
            from ._util import constant
            return TopKResult(self, constant(self.graph, 0, DType.int64, ()))
        if n * n > TOPK_RANK_MAX and k <= TOPK_ROUNDS_MAX:
            return TopKResult(*_topk_rounds(self, axis, k, largest))
        v, i = _select(self, axis, 0, k, largest, "topk")
        return TopKResult(v, i)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        """The ``k``-th smallest element (1-based) along ``dim`` and its index (``torch.kthvalue``)."""
        axis = _axis(self, dim, "kthvalue") if self.ndim else 0
        n = _const_size(self, axis, "kthvalue")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n:
            raise ValueError(f"kthvalue: k = {k!r} is out of range for dim {dim} of size {n} (need 1 <= k <= {n})")
        if self.ndim == 0:
            from ._util import constant
            return KthValueResult(self, constant(self.graph, 0, DType.int64, ()))
        v, i = _select(self, axis, k - 1, 1, False, "kthvalue")
        if not keepdim:
            v, i = v.squeeze(axis), i.squeeze(axis)
        return KthValueResult(v, i)

    def median(self, dim: int | None = None, keepdim: bool = False):
        """Lower median (``torch.median``). Without ``dim``: the median of all elements (a 0-d tensor). With
        ``dim``: ``(values, indices)``; a row holding NaN gives NaN and the index of its first NaN."""
        if dim is None:
            flat = self.reshape((self.numel(),)) if self.ndim != 1 else self
            n = _const_size(flat, 0, "median")
            if n == 0:
                raise ValueError("median() of an empty tensor")
            return flat.median(0).values
        if self.ndim == 0:
            from ._util import constant
            return MedianResult(self, constant(self.graph, 0, DType.int64, ()))
        axis = _axis(self, dim, "median")
        n = _const_size(self, axis, "median")
        if n == 0:
            raise ValueError(f"median: dim {dim} has size 0")
        v, i = _select(self, axis, (n - 1) // 2, 1, False, "median")
        if self.dtype.is_float:
            nan = self.isnan()
            has_nan = nan.any(axis, keepdim=True)
            first_nan = nan.cast(DType.int32).argmax(axis, keepdim=True)
            v = _where(has_nan, math.nan, v).cast(self.dtype)
            i = _where(has_nan, first_nan, i)
        if not keepdim:
            v, i = v.squeeze(axis), i.squeeze(axis)
        return MedianResult(v, i)

    def _cum_extreme_indices(self, axis, values, largest):
        """Indices for cummax/cummin: the last ``j <= i`` where ``x_j`` equals the running value (or both NaN)."""
        xt, inverse = _last(self, axis)
        vt, _ = _last(values, axis)
        n = xt.dims[-1]
        xj, vi = xt.unsqueeze(-2), vt.unsqueeze(-1)                  # (..., 1, n) j, (..., n, 1) i
        hit = xj.eq(vi)
        if xt.dtype.is_float:
            hit = hit.logical_or(xj.isnan().logical_and(vi.isnan()))
        g = self.graph
        cols = g.arange(n, dtype=DType.int64).unsqueeze(0)
        rows = g.arange(n, dtype=DType.int64).unsqueeze(-1)
        hit = hit.logical_and(cols <= rows)
        idx = _where(hit, cols, -1).max(-1)                          # (..., n)
        return idx.permute(inverse)

    def logcumsumexp(self, dim: int = -1):
        """``log(cumsum(exp(x)))`` along ``dim`` without overflow or underflow: a Hillis-Steele scan whose step is
        :meth:`logaddexp` (log2 n steps) for a concrete length, the sliding-window ``logsumexp`` for a symbolic
        one."""
        x = self._floating()
        if x.ndim == 0:
            return x
        axis = _axis(x, dim, "logcumsumexp")
        n = x.dims[axis]
        if n.is_constant():
            n = n.to_int()
            shift = 1
            while shift < n:
                pads = [(0, 0)] * x.ndim
                pads[axis] = (shift, -shift)
                x = x.logaddexp(x.pad(pads, value=-math.inf))
                shift *= 2
            return x
        win, k = x._windows(axis, -math.inf)
        return win.logsumexp(k)

    def softmin(self, dim: int = -1):
        """``softmax(-x)`` along ``dim`` (``torch.nn.functional.softmin``)."""
        return (-self._floating()).softmax(dim)

    def var_mean(self, dim=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None):
        """``(var, mean)`` over ``dim`` (``torch.var_mean``; ``correction`` as in :meth:`var`)."""
        return self.var(dim, correction, keepdim, unbiased), self.mean(dim, keepdim)

    def std_mean(self, dim=None, correction: int = 1, keepdim: bool = False, unbiased: bool | None = None):
        """``(std, mean)`` over ``dim`` (``torch.std_mean``)."""
        return self.std(dim, correction, keepdim, unbiased), self.mean(dim, keepdim)
