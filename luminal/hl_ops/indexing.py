"""Indexing and scatter ops with PyTorch's names: ``scatter scatter_add scatter_reduce masked_fill diagonal diag
repeat_interleave one_hot index_add`` (methods) and the free functions ``scatter_elements`` (the shared implementation of
the ONNX importer's ScatterElements), ``one_hot``, ``meshgrid``, ``eye``, ``linspace``, ``logspace``.

Sums and means (``scatter_add``, ``index_add``, ``reduce="add"``/``"sum"``/``"mean"``) are ``ScatterAdd`` primitives: work proportional to the
updates, each target summed in position order; an index outside ``[0, size)`` raises ``IndexError`` at
``execute()``. The other scatters compare every index position with every target position along the scattered
axis (a ``where`` over that one-hot mask, so inf/NaN updates stay exact): O(updates x targets) work along the
axis, no data-dependent shapes; there an out-of-range index writes nothing (a lazy graph cannot raise on a
value). Where an index repeats, ``scatter`` (no reduction) keeps the last colliding update (torch leaves the
winner unspecified; its CPU loop writes in order, so the last one wins there too).

``x[key]`` / ``x[key] = value`` live in :mod:`.subscript` (``getitem``/``setitem``, re-exported here).

Data-dependent sizes (``masked_select``, ``nonzero``, ``x[mask]`` with a mask computed in the graph: a
:class:`DataDependentShapeError`): a lazy graph needs every shape before it runs, so luminal does not offer them as
graph ops. Use ``where(mask, x, fill)`` / ``masked_fill`` (same shape), a reduction over
the mask (``(x * mask).sum()``, ``mask.sum()`` for the count), or realize the values first (``t.data()`` then
numpy's ``x[mask]`` / ``np.nonzero``); the ONNX importer folds NonZero/Compress only for static inputs.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import DType, as_dtype
from ..shape import to_expr
from ._util import check_index_dtype, constant, lazy_where as _where, normalize_axis
from .subscript import DataDependentShapeError, _const_input, known_value, setitem


def _lowest(dtype):
    import numpy as np
    return -math.inf if dtype.is_float else (False if dtype == DType.bool else int(np.iinfo(dtype.numpy).min))


def _highest(dtype):
    import numpy as np
    return math.inf if dtype.is_float else (True if dtype == DType.bool else int(np.iinfo(dtype.numpy).max))


_REDUCTIONS = ("none", "sum", "add", "prod", "mul", "amax", "max", "amin", "min", "mean")


def _combine(reduction, data, mask, updates, any_hit, include_self=True):
    """Scatter combine: ``mask`` (..., U, T) selects which updates (..., U, 1) land on target T."""
    if reduction == "none":  # the last update that hits a target wins (torch's CPU order)
        u = mask.dims[-2]
        positions = mask.graph.arange(u, dtype=DType.int64).unsqueeze(-1)       # (U, 1)
        last = _where(mask, positions, -1).max(-2, keepdim=True)              # (..., 1, N)
        sel = mask.logical_and(positions.eq(last))                             # one update per hit target
        picked = _where(sel, updates, 0).sum(-2).cast(data.dtype)
        return _where(any_hit, picked, data)
    if reduction in ("add", "sum"):
        picked = _where(mask, updates, 0).sum(-2).cast(data.dtype)
        return _where(any_hit, data + picked if include_self else picked, data)
    if reduction in ("mul", "prod"):
        picked = _where(mask, updates, 1).prod(-2).cast(data.dtype)
        return _where(any_hit, data * picked if include_self else picked, data)
    if reduction in ("max", "amax"):
        picked = _where(mask, updates, _lowest(data.dtype)).max(-2)
        return _where(any_hit, data.maximum(picked) if include_self else picked, data)
    if reduction in ("min", "amin"):
        picked = _where(mask, updates, _highest(data.dtype)).min(-2)
        return _where(any_hit, data.minimum(picked) if include_self else picked, data)
    if reduction == "mean":
        total = _where(mask, updates, 0).sum(-2).cast(data.dtype)
        count = mask.cast(DType.int64).sum(-2)
        if include_self:
            total, count = total + data, count + 1
        count = _where(any_hit, count, 1)
        mean = total / count.cast(data.dtype) if data.dtype.is_float else total.floor_divide(count.cast(data.dtype))
        return _where(any_hit, mean.cast(data.dtype), data)
    raise ValueError(f"scatter: unknown reduction {reduction!r} (one of {', '.join(_REDUCTIONS)})")


def scatter_sum(index, updates, axis: int, dims):
    """``updates`` summed into zeros of ``dims`` at the positions ``index`` names along ``axis`` (the
    ``ScatterAdd`` primitive: work proportional to ``index``, each element summed in position order); ``index``
    and ``updates`` have the same dims, at most ``dims`` off ``axis``. float16/bfloat16 updates are summed in
    float32 and the result is float32 (the caller rounds once); other dtypes keep theirs (bool is refused)."""
    from .. import ops

    acc = DType.float32 if updates.dtype in (DType.float16, DType.bfloat16) else updates.dtype
    part = updates.cast(acc) if acc != updates.dtype else updates
    dims = tuple(dims)
    own = tuple(dims[axis] if j == axis else d for j, d in enumerate(index.dims))
    out = index._apply(ops.ScatterAdd(axis, to_expr(dims[axis])), part, dims=own, dtype=acc)
    for j in range(len(dims)):  # the index may cover only a leading block of the other axes
        if j != axis and out.dims[j] != dims[j]:
            out = out.pad_axis(j, 0, dims[j] - out.dims[j])
    return out


def scatter_elements(x, axis: int, index, updates, reduction: str = "none", include_self: bool = True):
    """``x`` with ``updates[i]`` combined into ``x[i with i[axis] = index[i]]`` (``torch.scatter_reduce`` /
    ONNX ScatterElements). ``index`` and ``updates`` have the same shape, at most ``x``'s along the other axes;
    ``reduction`` is ``"none"`` (replace), ``"sum"``/``"add"``, ``"prod"``/``"mul"``, ``"amax"``/``"max"``,
    ``"amin"``/``"min"`` or ``"mean"``; ``include_self=False`` leaves ``x``'s own value out where an index hits."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"scatter: unknown reduction {reduction!r} (one of {', '.join(_REDUCTIONS)})")
    a = normalize_axis(axis, x.ndim)
    if index.ndim != x.ndim:
        raise ValueError(f"scatter: index has {index.ndim} dims, the tensor {x.ndim}")
    check_index_dtype(index.dtype, "scatter")
    if reduction in ("sum", "add", "mean") and x.dtype != DType.bool:  # ScatterAdds: no one-hot along the axis
        total = scatter_sum(index, updates.cast(x.dtype), a, x.dims)
        count = scatter_sum(index, constant(x.graph, 1, DType.int64, index.dims), a, x.dims)
        hit = count > 0
        total = total.cast(x.dtype) if total.dtype != x.dtype else total
        if reduction != "mean":
            return _where(hit, x + total if include_self else total, x)
        if include_self:
            total, count = total + x, count + 1
        count = _where(hit, count, 1)
        mean = total / count.cast(x.dtype) if x.dtype.is_float else total.floor_divide(count.cast(x.dtype))
        return _where(hit, mean.cast(x.dtype), x)
    n = x.dims[a]
    u_dims, x_dims = list(index.dims), list(x.dims)
    order = [j for j in range(x.ndim) if j != a] + [a]
    inverse = [order.index(j) for j in range(x.ndim)]
    idx_t, upd_t = index.permute(order), updates.cast(x.dtype).permute(order)
    targets = x.graph.arange(n, dtype=index.dtype)
    mask = idx_t.unsqueeze(-1).eq(targets)                               # (..., U_a, N)
    any_hit = mask.any(-2)                                               # (..., N)
    sub = x.permute(order)
    sub_block = sub
    for j, d in enumerate(u_dims[:a] + u_dims[a + 1:]):
        sub_block = sub_block.slice_axis(j, 0, d)
    out = _combine(reduction, sub_block, mask, upd_t.unsqueeze(-1), any_hit, include_self)
    pads = [(0, xd - ud) for xd, ud in zip([x_dims[j] for j in order[:-1]], [u_dims[j] for j in order[:-1]])]
    if any(not (to_expr(p[1]) == 0) for p in pads):
        hit_full = any_hit.pad(pads + [(0, 0)])
        out = _where(hit_full, out.pad(pads + [(0, 0)]), sub)
    return out.permute(inverse)


def _check_shapes(x, axis, index, src, what):
    for j in range(x.ndim):
        i_d = index.dims[j]
        if src is not None and not _le(i_d, src.dims[j]):
            raise ValueError(f"{what}: index size {i_d} exceeds src size {src.dims[j]} in dim {j}")
        if j != axis and not _le(i_d, x.dims[j]):
            raise ValueError(f"{what}: index size {i_d} exceeds the tensor's size {x.dims[j]} in dim {j}")


def _le(a, b) -> bool:
    a, b = to_expr(a), to_expr(b)
    if a.is_constant() and b.is_constant():
        return a.to_int() <= b.to_int()
    return True


def _src_block(src, index):
    """``src`` sliced to ``index``'s shape (torch reads only that block)."""
    for j, d in enumerate(index.dims):
        if src.dims[j] != d:
            src = src.slice_axis(j, 0, d)
    return src


class IndexingOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor`: scatters, masks, diagonals, repeats, one-hot."""

    def _scatter_src(self, index, src, what, axis):
        from ..tensor import GraphTensor
        if isinstance(src, GraphTensor):
            if src.ndim != self.ndim:
                raise ValueError(f"{what}: src has {src.ndim} dims, the tensor {self.ndim}")
            _check_shapes(self, axis, index, src, what)
            return _src_block(src, index)
        return constant(self.graph, src, self.dtype, index.dims)

    def scatter(self, dim: int, index, src=None, value=None, reduce: str | None = None):
        """``torch.scatter``: ``out[i with i[dim] = index[i]] = src[i]`` (``src`` a tensor, or a scalar ``value``);
        ``reduce="add"``/``"multiply"`` combine instead of replacing. See the module docstring for repeated
        indices."""
        if src is None:
            src = value
        if src is None:
            raise TypeError("scatter: give src (a tensor) or value (a scalar)")
        a = normalize_axis(dim, self.ndim)
        _check_shapes(self, a, index, None, "scatter")
        red = {None: "none", "add": "sum", "multiply": "prod"}.get(reduce)
        if red is None:
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter", a), red)

    def scatter_add(self, dim: int, index, src):
        """``torch.scatter_add``: sums ``src`` into the indexed positions (repeated indices accumulate)."""
        a = normalize_axis(dim, self.ndim)
        _check_shapes(self, a, index, None, "scatter_add")
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter_add", a), "sum")

    def index_add(self, dim: int, index, source, alpha=1):
        """``torch.index_add``: ``self`` with ``alpha * source[..., i, ...]`` added to ``self[..., index[i], ...]``
        along ``dim`` for every entry of the 1-D int32/int64 ``index`` (repeated entries accumulate, in order).
        ``source`` has ``self``'s shape except ``len(index)`` along ``dim``, and ``self``'s dtype. A ``ScatterAdd``:
        work proportional to ``source``. An entry outside ``[0, self.shape[dim])`` raises ``IndexError`` at
        ``execute()``."""
        from ..tensor import GraphTensor
        a = normalize_axis(dim, self.ndim)
        if not isinstance(index, GraphTensor) or not isinstance(source, GraphTensor):
            raise TypeError("index_add: index and source must be GraphTensors")
        check_index_dtype(index.dtype, "index_add")
        if index.ndim != 1:
            raise ValueError(f"index_add: index must be 1-D, got {index.ndim} dims")
        if source.dtype != self.dtype:
            raise TypeError(f"index_add: source has dtype {source.dtype.value} but self has {self.dtype.value}")
        if self.dtype == DType.bool:
            raise TypeError("index_add is not defined for bool tensors")
        want = tuple(index.dims[0] if j == a else d for j, d in enumerate(self.dims))
        if source.ndim != self.ndim or any(not (to_expr(s) == to_expr(w)) and to_expr(s).is_constant() and
                                           to_expr(w).is_constant() for s, w in zip(source.dims, want)):
            raise ValueError(f"index_add: source must have shape {[str(d) for d in want]} (self's, with "
                             f"len(index) along dim {a}), got {[str(d) for d in source.dims]}")
        view = index
        for k in range(a):
            view = view.expand_dim(k, source.dims[k])
        for k in range(a + 1, self.ndim):
            view = view.expand_dim(k, source.dims[k])
        if not (isinstance(alpha, (int, float)) and alpha == 1):
            source = source * alpha
        return scatter_elements(self, a, view, source, "sum")

    def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
        """``torch.scatter_reduce`` with ``reduce`` in ``"sum" "prod" "mean" "amax" "amin"``."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ValueError(f"scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, got {reduce!r}")
        a = normalize_axis(dim, self.ndim)
        _check_shapes(self, a, index, None, "scatter_reduce")
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter_reduce", a), reduce,
                                include_self)

    def masked_fill(self, mask, value):
        """``value`` where ``mask`` is True, ``self`` elsewhere (``torch.masked_fill``; the result keeps
        ``self``'s dtype, ``mask`` broadcasts to ``self``)."""
        from ..tensor import GraphTensor
        if isinstance(mask, GraphTensor) and mask.dtype != DType.bool:
            raise TypeError(f"masked_fill: mask must be bool, got {mask.dtype.value}")
        if isinstance(value, GraphTensor):
            if value.ndim != 0:
                raise ValueError(f"masked_fill: value must be a 0-d tensor or a scalar, got {value.ndim} dims")
            value = value.cast(self.dtype)
        else:
            value = constant(self.graph, value, self.dtype, ())
        out = _where(mask, value, self)
        if out.dims != self.dims:
            raise ValueError(f"masked_fill: mask of shape {[str(d) for d in mask.dims]} does not broadcast to "
                             f"{[str(d) for d in self.dims]}")
        return out

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        """The diagonal ``self[..., i, i + offset]`` over ``dim1``/``dim2`` as a new last axis
        (``torch.diagonal``): a strided view of the flattened (sliced) square block."""
        if self.ndim < 2:
            raise ValueError(f"diagonal needs at least 2 dims, got {self.ndim}")
        d1, d2 = normalize_axis(dim1, self.ndim), normalize_axis(dim2, self.ndim)
        if d1 == d2:
            raise ValueError(f"diagonal: dim1 and dim2 are the same dim ({dim1}, {dim2})")
        order = [j for j in range(self.ndim) if j not in (d1, d2)] + [d1, d2]
        x = self.permute(order)
        m, n = x.dims[-2], x.dims[-1]
        if not (m.is_constant() and n.is_constant()):
            raise ValueError(f"diagonal needs concrete sizes, got {m} x {n}")
        m, n = m.to_int(), n.to_int()
        if offset >= 0:
            rows, cols, r0, c0 = m, n - offset, 0, offset
        else:
            rows, cols, r0, c0 = m + offset, n, -offset, 0
        size = max(0, min(rows, cols))
        x = x.slice_axis(-2, min(r0, m), min(r0, m) + size).slice_axis(-1, min(c0, n), min(c0, n) + size)
        if size <= 1:
            return x.reshape(x.dims[:-2] + (size,))
        flat = x.reshape(x.dims[:-2] + (size * size,))
        return flat.slice_axis(-1, 0, size * size, size + 1)

    def diag(self, diagonal: int = 0):
        """``torch.diag``: a 1-D tensor becomes the square matrix with it on the ``diagonal``-th diagonal; a 2-D
        tensor gives that diagonal."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"diag needs a 1-D or 2-D tensor, got {self.ndim} dims")
        k = diagonal
        length = self.dims[0]
        n = length + abs(k)
        g = self.graph
        rows = g.arange(n, dtype=DType.int64).unsqueeze(-1)
        cols = g.arange(n, dtype=DType.int64).unsqueeze(0)
        on = (cols - rows).eq(k)
        padded = self.pad_axis(0, 0, abs(k))
        along = padded.unsqueeze(-1) if k >= 0 else padded.unsqueeze(0)
        zero = False if self.dtype == DType.bool else 0
        return _where(on, along, zero)

    def repeat_interleave(self, repeats, dim: int | None = None):
        """Each element repeated along ``dim`` (flattened first when ``dim`` is None), as
        ``torch.repeat_interleave``: ``repeats`` an int, or per-element repeats (a list, numpy array or tensor
        with one count per element along ``dim``, or one count for all). Per-element repeats set the output
        size, so they must be known when the graph is built (a list/array, or a tensor computed from constants
        only); repeats computed from graph inputs raise ``DataDependentShapeError`` (eager tensors realize
        them)."""
        if not (isinstance(repeats, int) and not isinstance(repeats, bool)):
            return self._repeat_interleave_counts(repeats, dim)
        if repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        x, a = _repeat_axis(self, dim)
        y = x.unsqueeze(a + 1)
        if repeats != 1:
            dims = list(y.dims)
            dims[a + 1] = to_expr(repeats)
            y = y.expand(dims)
        return y.reshape(x.dims[:a] + (x.dims[a] * repeats,) + x.dims[a + 1:])

    def _repeat_interleave_counts(self, repeats, dim):
        from ..tensor import GraphTensor
        if isinstance(repeats, GraphTensor):
            if not repeats.dtype.is_int:
                raise TypeError(f"repeat_interleave: repeats must be an integer tensor, got {repeats.dtype.value}")
            counts = known_value(repeats)
            if counts is None:
                raise DataDependentShapeError(
                    "repeat_interleave with per-element repeats computed in the graph has a data-dependent result "
                    "size; pass the repeats as a list / numpy array (or a tensor of constants), or an int")
        else:
            counts = np.asarray(repeats)
            if counts.dtype == object or counts.dtype.kind not in "iu":
                raise TypeError(f"repeat_interleave: repeats must be an int or integers, got {counts.dtype}")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim > 1:
            raise ValueError(f"repeat_interleave: repeats must be 0-d or 1-d, got shape {counts.shape}")
        if (counts < 0).any():
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {counts.min()}")
        x, a = _repeat_axis(self, dim)
        n = to_expr(x.dims[a])
        if counts.ndim == 0 or counts.size == 1:
            if n.is_constant() or counts.ndim == 0:
                return x.repeat_interleave(int(counts.reshape(-1)[0]), a)
        if not n.is_constant():
            raise ValueError(f"repeat_interleave: per-element repeats need a concrete size along dim {a}, got {n}")
        if counts.size != n.to_int():
            raise ValueError(f"repeat_interleave: repeats must have the same size as input along dim {a}: "
                             f"{counts.size} repeats for size {n.to_int()}")
        index = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        return x.index_select(a, _const_input(x.graph, index))

    def nonzero(self, *, as_tuple: bool = False):
        """Not a graph op: its size depends on the values, and every shape in a lazy graph is known before it runs.
        Raises :class:`DataDependentShapeError`; eager tensors have it (realized at the call), graphs use ``where``/
        ``masked_fill``."""
        raise DataDependentShapeError("nonzero() has a data-dependent size, which a lazy graph cannot hold: use an eager tensor "
                         "(lm.tensor(...).nonzero()) or same-shape forms (lm.where, masked_fill, (x * mask).sum())")

    argwhere = nonzero

    def masked_select(self, mask):
        """Not a graph op (a data-dependent size, see :meth:`nonzero`): raises :class:`DataDependentShapeError`."""
        raise DataDependentShapeError("masked_select() has a data-dependent size, which a lazy graph cannot hold: use an eager "
                         "tensor (x[mask] or x.masked_select(mask)) or same-shape forms (lm.where, masked_fill)")

    def one_hot(self, num_classes: int):
        """``torch.nn.functional.one_hot``: int64, a new last axis of ``num_classes`` (which a lazy graph needs
        up front: ``-1`` is refused)."""
        return one_hot(self, num_classes)

    def setitem(self, key, value):
        """``x[key] = value`` as a function: a new tensor, ``self`` unchanged (``x.__setitem__`` rebinds ``x``
        to this result). See :meth:`__setitem__` for the keys and values accepted."""
        return setitem(self, key, value)

    def __setitem__(self, key, value):
        """``x[key] = value`` with PyTorch's observable semantics, computed functionally: the handle ``x`` is
        rebound to a new node holding the updated tensor (other handles, including views taken from ``x`` before,
        keep reading the old value; an input's handle then no longer names the input, so ``set()`` it first or
        keep another handle).

        ``key`` is anything ``x[key]`` accepts; ``value`` a scalar, a numpy array / list or a GraphTensor of the
        same graph, cast to ``x``'s dtype and broadcast to the shape of ``x[key]`` (leading size-1 dims of the
        value are dropped, as in PyTorch). Basic keys (ints, slices with any step, None, ``...``) are a ``where``
        over the padded region (O(numel)); integer index tensors compare every index with every target of the
        indexed dims (O(len(index) x their size)), or, when the indices are known when the graph is built (numpy
        arrays, lists, constant tensors), take each target's winner computed then. Where an index repeats, the
        last write wins (torch's CPU order). A boolean mask works with any mask when the value does not depend on
        the number of True entries (a scalar or one value per trailing element: a ``where``); a value with one
        entry per True entry needs the mask known at build time (``DataDependentShapeError`` otherwise).
        Gradients: the overwritten elements of the old ``x`` get zero, the value gets the gradient of the
        positions it wrote (with repeated indices only the winning write, where torch gives every write its
        target's gradient)."""
        new = setitem(self, key, value)
        self._id, self._tracker = new.id, new.tracker


def _repeat_axis(x, dim):
    """``(x, axis)`` that ``repeat_interleave`` repeats along: the flattened tensor and 0 when ``dim`` is None, a 0-d
    tensor as 1-d."""
    if dim is None:
        return x.reshape((x.numel(),)), 0
    a = normalize_axis(dim, max(x.ndim, 1))
    return (x.unsqueeze(0) if x.ndim == 0 else x), a


def one_hot(index, num_classes: int):
    """One-hot int64 encoding of an integer tensor along a new last axis of size ``num_classes``."""
    if not index.dtype.is_int:
        raise TypeError(f"one_hot: index must be an integer tensor, got {index.dtype.value}")
    if isinstance(num_classes, int) and num_classes < 0:
        raise ValueError("one_hot: num_classes must be given (a lazy graph cannot infer it from the data's "
                         f"maximum), got {num_classes}")
    classes = index.graph.arange(num_classes, dtype=index.dtype)
    return index.unsqueeze(-1).eq(classes).cast(DType.int64)


def meshgrid(*tensors, indexing: str = "ij"):
    """``torch.meshgrid``: 1-D (or 0-d) tensors expanded (zero-copy) to the grid of all their sizes; ``"xy"``
    swaps the first two output dims (Cartesian)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if not tensors:
        raise ValueError("meshgrid needs at least one tensor")
    ts = []
    for t in tensors:
        if t.ndim > 1:
            raise ValueError(f"meshgrid: expects 0-d or 1-d tensors, got {t.ndim} dims")
        ts.append(t.reshape((1,)) if t.ndim == 0 else t)
    sizes = [t.dims[0] for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, t in enumerate(ts):
        pos = (1 - k if k < 2 else k) if swap else k
        shape = [1] * len(ts)
        shape[pos] = t.dims[0]
        out.append(t.reshape(shape).expand(sizes))
    return tuple(out)


def eye(graph, n, m=None, dtype=DType.float32):
    """The ``n x m`` identity matrix (``torch.eye``) as a graph tensor (a comparison of two ``arange``s)."""
    m = n if m is None else m
    dtype = as_dtype(dtype)
    rows = graph.arange(n, dtype=DType.int64).unsqueeze(-1)
    cols = graph.arange(m, dtype=DType.int64).unsqueeze(0)
    return rows.eq(cols).cast(dtype)


def linspace(graph, start: float, end: float, steps: int, dtype=DType.float32):
    """``steps`` values from ``start`` to ``end`` inclusive (``torch.linspace``: the first half counts up from
    ``start``, the second half down from ``end``, in float64, then rounded once)."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dtype = as_dtype(dtype)
    if steps == 0:
        return graph.zeros((0,), dtype)
    if steps == 1:
        return graph.full((1,), float(start), DType.float64).cast(dtype) if dtype.is_float else \
            graph.full((1,), start, dtype)
    step = (float(end) - float(start)) / (steps - 1)
    i = graph.arange(steps, dtype=DType.int64).cast(DType.float64)
    up = i * step + float(start)
    down = float(end) - (float(steps - 1) - i) * step
    out = _where(i < steps // 2, up, down)
    return out.cast(dtype) if dtype.is_float else out.trunc().cast(dtype)


def logspace(graph, start: float, end: float, steps: int, base: float = 10.0, dtype=DType.float32):
    """``base ** linspace(start, end, steps)`` (``torch.logspace``), in float64 then rounded once."""
    exps = linspace(graph, start, end, steps, DType.float64)
    dtype = as_dtype(dtype)
    if base <= 0:
        raise ValueError(f"logspace: base must be positive, got {base}")
    out = (exps * math.log2(base)).exp2()
    return out.cast(dtype) if dtype.is_float else out.round().cast(dtype)
