"""Indexing and scatter ops with PyTorch's names: ``scatter scatter_add scatter_reduce masked_fill diagonal diag
repeat_interleave one_hot`` (methods) and the free functions ``scatter_elements`` (the shared implementation of
the ONNX importer's ScatterElements), ``one_hot``, ``meshgrid``, ``eye``, ``linspace``, ``logspace``.

Scatters compare every index position with every target position along the scattered axis (a ``where`` over
that one-hot mask, so inf/NaN updates stay exact): O(updates x targets) work along the axis, no data-dependent
shapes. Indices must be in ``[0, size)`` (a lazy graph cannot raise on a value: an out-of-range index writes
nothing). Where an index repeats, ``scatter`` (no reduction) keeps the last colliding update (torch leaves the
winner unspecified; its CPU loop writes in order, so the last one wins there too).

``getitem`` / ``setitem`` implement ``x[key]`` and ``x[key] = value`` with PyTorch's semantics (advanced indexing
with several index tensors / arrays / lists broadcast together, ints as selections applied first, boolean masks
known when the graph is built, item assignment rebinding the handle); see docs/tensor_api.md, "Indexing and item
assignment", for the placement rule, the errors and the costs.

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
from ..graph import GraphError
from ..shape import to_expr
from ._util import broadcast_dims, check_index_dtype, constant, normalize_axis


def _where(c, a, b):
    from .binary import where
    return where(c, a, b)


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

    def _scatter_src(self, index, src, what):
        from ..tensor import GraphTensor
        if isinstance(src, GraphTensor):
            if src.ndim != self.ndim:
                raise ValueError(f"{what}: src has {src.ndim} dims, the tensor {self.ndim}")
            _check_shapes(self, None, index, src, what)
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
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter"), red)

    def scatter_add(self, dim: int, index, src):
        """``torch.scatter_add``: sums ``src`` into the indexed positions (repeated indices accumulate)."""
        a = normalize_axis(dim, self.ndim)
        _check_shapes(self, a, index, None, "scatter_add")
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter_add"), "sum")

    def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
        """``torch.scatter_reduce`` with ``reduce`` in ``"sum" "prod" "mean" "amax" "amin"``."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ValueError(f"scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, got {reduce!r}")
        a = normalize_axis(dim, self.ndim)
        _check_shapes(self, a, index, None, "scatter_reduce")
        return scatter_elements(self, a, index, self._scatter_src(index, src, "scatter_reduce"), reduce,
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
        self._id, self._shape = new.id, new.shape


# ---------------------------------------------------------------------------------------------- x[key], x[key] = v
class DataDependentShapeError(IndexError):
    """Boolean-mask indexing whose result size (the mask's number of True entries) is only known at run time."""


_MASK_ADVICE = ("a lazy graph needs every shape before it runs, so the mask must be known when the graph is built "
                "(a numpy bool array or list, or a tensor computed from constants only). Alternatives with the "
                "input's shape: lm.where(mask, x, fill) / x.masked_fill(~mask, fill), a reduction with the mask "
                "((x * mask).sum(), mask.sum() for the count); x[mask] = value with a value that does not depend "
                "on the count (a scalar, or one value per trailing element) works with any mask; eager tensors "
                "(lm.tensor) realize the mask and support x[mask]")


class _Adv:
    """One advanced index: integer indices (``t``, a GraphTensor; ``value`` its numpy value when known at build
    time) on ``axis`` of the basic-indexed tensor; ``scalar`` for a 0-d tensor (a select, as PyTorch)."""

    __slots__ = ("axis", "t", "value", "scalar")

    def __init__(self, axis, t, value, scalar=False):
        self.axis, self.t, self.value, self.scalar = axis, t, value, scalar


class _Mask:
    """A boolean mask over ``ndim`` axes from ``axis``: ``t`` (a GraphTensor or None) and/or its known ``value``."""

    __slots__ = ("axis", "ndim", "t", "value")

    def __init__(self, axis, ndim, t, value):
        self.axis, self.ndim, self.t, self.value = axis, ndim, t, value


def _repeat_axis(x, dim):
    """``(x, axis)`` that ``repeat_interleave`` repeats along: the flattened tensor and 0 when ``dim`` is None, a 0-d
    tensor as 1-d."""
    if dim is None:
        return x.reshape((x.numel(),)), 0
    a = normalize_axis(dim, max(x.ndim, 1))
    return (x.unsqueeze(0) if x.ndim == 0 else x), a


def _const_input(graph, arr: np.ndarray):
    """A build-time numpy array as a kept graph input holding it."""
    arr = np.ascontiguousarray(arr)
    return graph.tensor(arr.shape, as_dtype(arr.dtype.name), "const:index").set(arr).keep()


_KNOWN_LIMIT = 1 << 22  # elements: larger index computations are left to run time


def known_value(t):
    """The numpy value of ``t`` when it depends on no graph input (only constants and iotas, concrete shapes),
    computed now with the reference ops; else None."""
    from .. import ops
    g = t.graph
    needed, stack = set(), [t.id]
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        node = g.nodes.get(i)
        if node is None or isinstance(node.op, ops.Input) or not all(d.is_constant() for d in node.dims):
            return None
        if math.prod(d.to_int() for d in node.dims) > _KNOWN_LIMIT:
            return None
        needed.add(i)
        stack.extend(e.src for e in node.inputs)
    if not all(d.is_constant() for d in t.dims):
        return None
    values = {}
    try:
        for i in g.toposort():
            if i not in needed:
                continue
            node = g.nodes[i]
            args = [e.shape.gather_numpy(values[e.src], {}) for e in node.inputs]
            out_shape = tuple(d.to_int() for d in node.dims)
            values[i] = np.asarray(node.op.reference(args, {}, out_shape), dtype=node.dtype.numpy).reshape(out_shape)
        return np.array(t.shape.gather_numpy(values[t.id], {}))
    except Exception:  # noqa: BLE001 - an op without a reference implementation: leave it to run time
        return None


def _as_index_array(k):
    """A list / numpy array / numpy bool as an index array (bool or int64), or the item unchanged."""
    if isinstance(k, list):
        if any(isinstance(e, (slice, type(None), type(Ellipsis))) or hasattr(e, "graph") for e in k):
            raise IndexError("a list index must hold only ints or bools (pass a tuple to index several dims)")
        k = np.asarray(k)
        if k.size == 0:
            k = k.astype(np.int64)
    if isinstance(k, np.bool_):
        return bool(k)
    if isinstance(k, np.ndarray):
        if k.dtype == np.bool_:
            return bool(k) if k.ndim == 0 else k
        if k.dtype.kind not in "iu":
            raise IndexError(f"tensors used as indices must be integer or bool, got a {k.dtype} array")
        return int(k) if k.ndim == 0 else k.astype(np.int64)
    return k


def _consumed(k) -> int:
    from ..tensor import GraphTensor
    if k is None or k is Ellipsis or isinstance(k, bool):
        return 0
    if isinstance(k, np.ndarray) and k.dtype == np.bool_:
        return k.ndim
    if isinstance(k, GraphTensor) and k.dtype == DType.bool:
        return k.ndim
    return 1


def _shape_str(dims):
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _parse(x, key):
    """Apply the basic part of ``key`` (ints, slices, None, ...) to ``x``; returns ``(view, steps, adv)``:
    ``steps`` undo the view (see :func:`_embed`), ``adv`` the advanced indices (``_Adv``/``_Mask``) on the view's
    axes."""
    from ..tensor import GraphTensor
    from .binary import where
    from .movement import _normalize_slice

    if not isinstance(key, tuple):
        key = (key,)
    key = tuple(_as_index_array(k) for k in key)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(_consumed(k) for k in key)
    if n_real > x.ndim:
        raise IndexError(f"too many indices for a tensor of dimension {x.ndim}: the index uses {n_real} dims but "
                         f"the tensor has {x.ndim} dims")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(k)
    expanded.extend([slice(None)] * (x.ndim - sum(_consumed(k) for k in expanded)))
    cur, axis, steps, adv = x, 0, [], []
    for k in expanded:
        if k is None:
            cur = cur.unsqueeze(axis)
            steps.append(("none", axis))
            axis += 1
        elif isinstance(k, bool):  # torch: a new axis of size 1, indexed by [0] (True) or [] (False)
            cur = cur.unsqueeze(axis)
            steps.append(("none", axis))
            val = np.zeros((1 if k else 0,), np.int64)
            adv.append(_Adv(axis, _const_input(x.graph, val), val))
            axis += 1
        elif isinstance(k, slice):
            if not (k.start is None and k.stop is None and k.step in (None, 1)):
                step = 1 if k.step is None else int(k.step)
                n = cur.dims[axis]
                start, _ = _normalize_slice(k.start, k.stop, step, n) if step != 0 else (0, 0)
                cur = cur.slice_axis(axis, k.start, k.stop, step)
                steps.append(("slice", axis, n, start, step, cur.dims[axis]))
            axis += 1
        elif isinstance(k, (int, np.integer)):
            k = int(k)
            n = cur.dims[axis]
            if n.is_constant() and not -n.to_int() <= k < n.to_int():
                raise IndexError(f"index {k} is out of bounds for dimension {axis} with size {n}")
            start = k if k >= 0 else n + k
            cur = cur._view(cur.shape.slice(axis, start, to_expr(start) + 1)).squeeze(axis)
            steps.append(("int", axis, n, start))
        elif isinstance(k, np.ndarray) and k.dtype == np.bool_:
            _check_mask(cur, axis, k.shape, "")
            adv.append(_Mask(axis, k.ndim, None, k))
            axis += k.ndim
        elif isinstance(k, np.ndarray):
            n = cur.dims[axis]
            if n.is_constant():
                size = n.to_int()
                bad = k[(k < -size) | (k >= size)]
                if bad.size:
                    raise IndexError(f"index {int(bad.reshape(-1)[0])} is out of bounds for dimension {axis} with "
                                     f"size {size}")
                k = np.where(k < 0, k + size, k)
                adv.append(_Adv(axis, _const_input(x.graph, k), k))
            else:
                adv.append(_Adv(axis, where(_const_input(x.graph, k) < 0, _const_input(x.graph, k) + n,
                                            _const_input(x.graph, k)), None))
            axis += 1
        elif isinstance(k, GraphTensor):
            if k.graph is not x.graph:
                raise IndexError("the index tensor belongs to a different graph")
            if k.dtype == DType.bool:
                _check_mask(cur, axis, k.dims, "")
                value = known_value(k)
                if k.ndim == 0:
                    if value is None:
                        raise DataDependentShapeError("indexing with a 0-d boolean tensor has a data-dependent "
                                                      "result size; " + _MASK_ADVICE)
                    cur = cur.unsqueeze(axis)
                    steps.append(("none", axis))
                    val = np.zeros((1 if bool(value) else 0,), np.int64)
                    adv.append(_Adv(axis, _const_input(x.graph, val), val))
                    axis += 1
                    continue
                adv.append(_Mask(axis, k.ndim, k, value))
                axis += k.ndim
                continue
            if not k.dtype.is_int:
                raise IndexError(f"tensors used as indices must be integer or bool tensors, got {k.dtype.value}")
            check_index_dtype(k.dtype, "indexing", IndexError)
            value = known_value(k)
            n = cur.dims[axis]
            if value is not None and n.is_constant():
                size = n.to_int()
                bad = value[(value < -size) | (value >= size)]
                if bad.size:
                    raise IndexError(f"index {int(bad.reshape(-1)[0])} is out of bounds for dimension {axis} with "
                                     f"size {size}")
                value = np.where(value < 0, value + size, value).astype(np.int64)
                adv.append(_Adv(axis, _const_input(x.graph, value), value, k.ndim == 0))
            else:
                adv.append(_Adv(axis, where(k < 0, k + n, k), None, k.ndim == 0))
            axis += 1
        else:
            raise IndexError(f"unsupported index {k!r} of type {type(k).__name__} (ints, slices, None, ..., "
                             "integer or bool tensors / arrays / lists)")
    return cur, steps, adv


def _check_mask(cur, axis, mask_dims, what):
    for j, md in enumerate(mask_dims):
        xd = cur.dims[axis + j]
        md, xd = to_expr(md), to_expr(xd)
        if md.is_constant() and xd.is_constant() and md.to_int() != xd.to_int():
            raise IndexError(f"the shape of the mask {_shape_str(mask_dims)} at index {j} does not match the "
                             f"shape of the indexed tensor {_shape_str(cur.dims[axis:axis + len(mask_dims)])} at "
                             f"index {j}")


def _expand_masks(x, adv):
    """Known boolean masks become their ``nonzero()`` integer indices (one per mask dim, as PyTorch)."""
    out = []
    for e in adv:
        if isinstance(e, _Adv):
            out.append(e)
            continue
        if e.value is None:
            raise DataDependentShapeError("boolean-mask indexing x[mask] with a mask computed in the graph has a "
                                          "data-dependent result size (the number of True entries); " + _MASK_ADVICE)
        for j, nz in enumerate(np.nonzero(e.value)):
            nz = nz.astype(np.int64)
            out.append(_Adv(e.axis + j, _const_input(x.graph, nz), nz))
    return out


def _layout(cur, adv):
    """(advanced axes, other axes, broadcast index dims B, where B goes among the other axes)."""
    axes = [e.axis for e in adv]
    rest = [j for j in range(cur.ndim) if j not in axes]
    tensors = [e for e in adv if not e.scalar]
    if tensors:
        try:
            b = broadcast_dims(*[e.t.dims for e in tensors])
        except Exception:  # noqa: BLE001 - GraphError: torch's IndexError
            raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                             + ", ".join(_shape_str(e.t.dims) for e in tensors)) from None
    else:
        b = ()
    scalar_axes = {e.axis for e in adv if e.scalar}
    renum = {j: i for i, j in enumerate(j for j in range(cur.ndim) if j not in scalar_axes)}
    pos = sorted(renum[e.axis] for e in tensors)
    adjacent = not pos or pos == list(range(pos[0], pos[0] + len(pos)))
    insert = sum(1 for j in rest if renum[j] < pos[0]) if (pos and adjacent) else 0
    return axes, rest, b, insert


def _checked_index(cur, e, b):
    """The int64 index of ``e`` broadcast to ``b``, range-checked at run time when not known at build time (a
    ``Gather`` of ``arange(n)`` by the index: the devices' Gather raises ``IndexError`` on a bad entry)."""
    idx = e.t if e.t.dtype == DType.int64 else e.t.cast(DType.int64)
    if e.value is None:
        n = cur.dims[e.axis]
        flat = idx.reshape((idx.numel(),))
        positions = cur.graph.arange(n, dtype=DType.int64).set_name(f"positions of indexed dim {e.axis}")
        idx = positions.gather(0, flat).reshape(idx.dims)
    return idx.expand(b) if tuple(idx.dims) != tuple(b) else idx


def _prod(dims):
    out = to_expr(1)
    for d in dims:
        out = out * d
    return out


def _linear_index(cur, adv, b):
    lin, stride = None, to_expr(1)
    for e in reversed(adv):
        term = _checked_index(cur, e, b)
        if not stride == 1:
            term = term * (stride.to_int() if stride.is_constant() else stride)
        lin = term if lin is None else lin + term
        stride = stride * cur.dims[e.axis]
    return lin, stride


def _known_linear(cur, adv, b):
    """The linear index (numpy) when every advanced index is known at build time and the dims are concrete."""
    if not all(e.value is not None for e in adv) or not all(cur.dims[e.axis].is_constant() for e in adv):
        return None
    if not all(d.is_constant() for d in b):
        return None
    shape = tuple(d.to_int() for d in b)
    lin = np.zeros(shape, np.int64)
    stride = 1
    for e in reversed(adv):
        lin = lin + np.broadcast_to(e.value, shape).astype(np.int64) * stride
        stride *= cur.dims[e.axis].to_int()
    return lin


def _adv_first(cur, axes, rest):
    """``cur`` with its advanced axes first, flattened into one: ``(K, *rest dims)``."""
    order = axes + rest
    y = cur.permute(order) if order != list(range(cur.ndim)) else cur
    return y.reshape((_prod([cur.dims[j] for j in axes]),) + tuple(cur.dims[j] for j in rest))


def getitem(x, key):
    """``x[key]`` with PyTorch's semantics (see :meth:`IndexingOps.__getitem__`)."""
    cur, _, adv = _parse(x, key)
    if not adv:
        return cur
    adv = _expand_masks(x, adv)
    if len(adv) == 1:  # one index tensor: its dims replace the axis (a Gather along it)
        e = adv[0]
        return cur.index_select(e.axis, e.t)  # (its Gather checks the range at run time)
    axes, rest, b, insert = _layout(cur, adv)
    known = _known_linear(cur, adv, b)
    lin = _const_input(x.graph, known) if known is not None else _linear_index(cur, adv, b)[0]
    out = _adv_first(cur, axes, rest).index_select(0, lin)          # (*b, *rest)
    if insert:
        nb = len(b)
        perm = list(range(nb, nb + insert)) + list(range(nb)) + list(range(nb + insert, out.ndim))
        out = out.permute(perm)
    return out


def _value_tensor(x, value, dims):
    """``value`` (scalar, numpy array / list, GraphTensor) in ``x``'s dtype, as a tensor broadcastable to ``dims``."""
    from ..tensor import GraphTensor
    if isinstance(value, GraphTensor):
        if value.graph is not x.graph:
            raise GraphError("setitem: the value belongs to a different graph")
        v = value if value.dtype == x.dtype else value.cast(x.dtype)
    elif isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError("setitem: the value must be a scalar, a numeric array or a GraphTensor")
        v = _const_input(x.graph, arr.astype(x.dtype.numpy)) if arr.ndim else constant(x.graph, arr.item(), x.dtype,
                                                                                        ())
    elif isinstance(value, (bool, int, float, np.generic)):
        v = constant(x.graph, value, x.dtype, ())
    else:
        raise TypeError(f"setitem: unsupported value of type {type(value).__name__}")
    return v


def _broadcast_to(v, dims, what="setitem"):
    dims = tuple(dims)
    while v.ndim > len(dims) and v.dims[0] == 1:  # torch drops leading size-1 dims of the value
        v = v.squeeze(0)
    try:
        out_dims = broadcast_dims(v.dims, dims)
    except Exception:  # noqa: BLE001
        out_dims = None
    if out_dims is None or tuple(out_dims) != dims:
        raise ValueError(f"{what}: shape mismatch: value tensor of shape {_shape_str(v.dims)} cannot be broadcast "
                         f"to indexing result of shape {_shape_str(dims)}")
    return v.expand(dims) if tuple(v.dims) != dims else v


def _unslice(t, axis, n, start, step, m):
    """``t`` (size ``m`` along ``axis``) placed at ``start + k * step`` of an axis of size ``n``; zeros elsewhere."""
    if step < 0:
        t = t.flip(axis)
        start = to_expr(start) + (to_expr(m) - 1) * step
        step = -step
    start = to_expr(start)
    if step == 1:
        return t.pad_axis(axis, start, to_expr(n) - start - m)
    t = t.unsqueeze(axis + 1).pad_axis(axis + 1, 0, step - 1).merge_dims(axis, axis + 1)   # m * step entries
    return t.pad_axis(axis, start, to_expr(n) - start - to_expr(m) * step)   # (a negative amount crops)


def _embed(x, region, steps):
    """``x`` with the basic-indexed view described by ``steps`` replaced by ``region``."""
    if not steps:
        return region
    for s in steps:
        if s[0] == "slice" and to_expr(s[5]).is_constant() and to_expr(s[5]).to_int() == 0:
            return x  # an empty region: nothing changes
    inside = constant(x.graph, True, DType.bool, region.dims)
    for s in reversed(steps):
        if s[0] == "none":
            region, inside = region.squeeze(s[1]), inside.squeeze(s[1])
        elif s[0] == "int":
            _, a, n, start = s
            after = to_expr(n) - start - 1
            region = region.unsqueeze(a).pad_axis(a, start, after)
            inside = inside.unsqueeze(a).pad_axis(a, start, after)
        else:
            _, a, n, start, step, m = s
            region, inside = _unslice(region, a, n, start, step, m), _unslice(inside, a, n, start, step, m)
    return _where(inside, region, x)


def _mask_only_update(cur, mask, v):
    """``cur`` with ``v`` written where ``mask`` is True, for a ``v`` that does not depend on the number of True
    entries (``None`` when it does)."""
    a, k = mask.axis, mask.ndim
    after = cur.ndim - a - k
    if v.ndim > after:
        lead = v.ndim - after - 1        # v's dim facing the count must be 1
        if lead + 1 > a + 1 or not (v.dims[lead] == 1):
            return None
        v = v.reshape(tuple(v.dims[:lead]) + (1,) * k + tuple(v.dims[lead + 1:]))
    m = mask.t if mask.t is not None else _const_input(cur.graph, mask.value)
    m = m.reshape((1,) * a + tuple(m.dims) + (1,) * after) if (a or after) else m
    try:
        out = _where(m, v, cur)
    except Exception:  # noqa: BLE001 - a shape mismatch: the general path names it
        return None
    return out if tuple(out.dims) == tuple(cur.dims) else None


def setitem(x, key, value):
    """``x`` with ``x[key] = value`` applied, functionally (see :meth:`IndexingOps.setitem`)."""
    cur, steps, adv = _parse(x, key)
    v = _value_tensor(x, value, ())
    if not adv:
        return _embed(x, _broadcast_to(v, cur.dims), steps)
    if len(adv) == 1 and isinstance(adv[0], _Mask):
        new = _mask_only_update(cur, adv[0], v)
        if new is not None:
            return _embed(x, new, steps)
        if adv[0].value is None:
            raise DataDependentShapeError("x[mask] = value with a mask computed in the graph and a value that "
                                          f"depends on the number of True entries (shape {_shape_str(v.dims)}); "
                                          + _MASK_ADVICE)
    adv = _expand_masks(x, adv)
    axes, rest, b, insert = _layout(cur, adv)
    rest_dims = tuple(cur.dims[j] for j in rest)
    nb = len(b)
    out_dims = rest_dims[:insert] + tuple(b) + rest_dims[insert:]
    v = _broadcast_to(v, out_dims)
    if insert:  # the value's index dims first: (*b, *rest)
        v = v.permute(list(range(insert, insert + nb)) + list(range(insert)) + list(range(insert + nb, v.ndim)))
    bn = _prod(b)
    if bn.is_constant() and bn.to_int() == 0:
        return x
    vb = v.reshape((bn,) + rest_dims)
    y = _adv_first(cur, axes, rest)                                       # (K, *rest)
    kk = y.dims[0]
    known = _known_linear(cur, adv, b)
    if known is not None:   # the winner of each target is computed now (the last write wins, as torch's CPU loop)
        last = np.full((kk.to_int(),), -1, np.int64)
        last[known.reshape(-1)] = np.arange(known.size, dtype=np.int64)
        hit = _const_input(x.graph, last >= 0)
        sel = _const_input(x.graph, np.maximum(last, 0))
    else:                   # compare every index with every target: O(len(index) * K)
        lin = _linear_index(cur, adv, b)[0].reshape((bn,))
        g = x.graph
        eq = lin.unsqueeze(1).eq(g.arange(kk, dtype=DType.int64).unsqueeze(0))               # (bn, K)
        last = _where(eq, g.arange(bn, dtype=DType.int64).unsqueeze(1), -1).max(0)          # (K,)
        hit = last >= 0
        sel = _where(hit, last, 0)
    src = vb.index_select(0, sel)                                                            # (K, *rest)
    hit = hit.reshape((kk,) + (1,) * len(rest)) if rest else hit
    new = _where(hit, src, y)
    new = new.reshape(tuple(cur.dims[j] for j in axes) + rest_dims)
    order = axes + rest
    if order != list(range(cur.ndim)):
        new = new.permute([order.index(j) for j in range(cur.ndim)])
    return _embed(x, new, steps)


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
