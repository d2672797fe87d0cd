"""Movement ops: views that only change the ``ShapeTracker`` (no node, no copy) plus ``gather``/``concat``.

``reshape`` stays a view whenever the current view can be re-addressed affinely
(always for a contiguous tensor, for splits, and for merges of compatible
axes); otherwise it materializes a ``Contiguous`` copy first. ``concat`` is
zero-padding each part to the full extent and adding (exact: ``x + 0 == x``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import ops
from ..dtype import DType, as_dtype, view_dtype
from ..graph import GraphError
from ..ops import check_bitcast
from ..shape import Expression, ShapeTracker, to_expr
from ._util import check_index_dtype, normalize_axis


class MovementOps:
    """Mixin of :class:`~luminal.tensor.GraphTensor` with the movement ops."""

    # ------------------------------------------------------------------ axis order
    def permute(self, *axes):
        """Reorder axes (``x.permute(2, 0, 1)`` or ``x.permute((2, 0, 1))``)."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if len(axes) != self.ndim:
            raise ValueError(f"permute: got {len(axes)} axes {axes} for a tensor with {self.ndim} dims")
        return self._view(self.tracker.permute([normalize_axis(a, self.ndim) for a in axes]))

    def transpose(self, dim0: int = -2, dim1: int = -1):
        """Swap two axes (a view)."""
        order = list(range(self.ndim))
        a, b = normalize_axis(dim0, self.ndim), normalize_axis(dim1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    swapaxes = transpose

    @property
    def T(self):  # noqa: N802 - PyTorch's name
        """All axes reversed."""
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):  # noqa: N802
        """The last two axes swapped."""
        return self.transpose(-2, -1)

    # ------------------------------------------------------------------ rank changes
    def unsqueeze(self, axis: int):
        """Insert a size-1 axis at ``axis`` (negative counts from the end of the result)."""
        n = self.ndim + 1
        if not -n <= axis < n:
            raise IndexError(f"unsqueeze: axis {axis} out of range for a result with {n} dims")
        return self._view(self.tracker.unsqueeze(axis % n))

    def squeeze(self, axis=None):
        """Remove size-1 axes (all of them, or the given ones; non-size-1 given axes are left, as in PyTorch).
        A 0-d tensor accepts the axis 0 or -1 and is returned as it is."""
        if self.ndim == 0:
            for a in () if axis is None else (axis,) if isinstance(axis, (int, np.integer)) else axis:
                normalize_axis(a, 0)
            return self
        if axis is None:
            axes = [j for j, d in enumerate(self.dims) if d == 1]
        else:
            axes = [normalize_axis(a, self.ndim) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)]
            axes = [a for a in axes if self.dims[a] == 1]
        st = self.tracker
        for a in sorted(axes, reverse=True):
            st = st.squeeze(a)
        return self._view(st)

    def reshape(self, *shape):
        """View with a new shape (one ``-1`` is inferred); copies only when the view cannot be re-addressed."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, str, Expression)):
            shape = tuple(shape[0])
        dims = [to_expr(d) if not (isinstance(d, (int, np.integer)) and d == -1) else None for d in shape]
        if dims.count(None) > 1:
            raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
        total = self.numel()
        if None in dims:
            known = to_expr(1)
            for d in dims:
                if d is not None:
                    known = known * d
            inferred = total // known
            if total.is_constant() and known.is_constant() and (known.to_int() == 0 or total.to_int() % known.to_int()):
                raise ValueError(f"reshape: cannot infer -1 in {shape} for {total} elements")
            dims[dims.index(None)] = inferred
        for d in dims:
            if d.is_constant() and d.to_int() < 0:
                raise ValueError(f"reshape: invalid size {d} in {shape}")
        new_total = to_expr(1)
        for d in dims:
            new_total = new_total * d
        if total.is_constant() and new_total.is_constant() and total != new_total:
            raise GraphError(f"reshape: cannot view shape {[str(d) for d in self.dims]} ({total} elements) as "
                             f"{[str(d) for d in dims]} ({new_total} elements)")
        st = self.tracker.reshape(dims)
        if st is None:
            return self.contiguous().reshape(dims)
        return self._view(st)

    def view(self, *shape):
        """``view(*shape)``: :meth:`reshape`. ``view(dtype)``: the same bits reinterpreted as ``dtype``
        (``torch.Tensor.view(dtype)``, numpy's ``arr.view(dtype)``; a ``BitCast`` node): ``dtype`` is a luminal
        dtype, a numpy dtype, a name (``"int32"``) or a ``torch.dtype``, of the same width as this tensor's --
        float32 / int32 / uint32, float64 / int64 / uint64, bfloat16 / float16 / int16 / uint16, int8 / uint8.
        Bit-exact (NaN payloads and signs, -0.0, denormals kept) on every backend; no gradient flows through it.
        ``x.view(lm.int32) >> 31`` is the sign bit of a float32 ``x``, NaNs included.

        A dtype of another width resizes the last dim as torch and numpy do: ``float32 (..., n)`` viewed as
        ``uint8`` is ``(..., 4n)`` (the bytes of each element, least significant first: little-endian, like both),
        ``uint8 (..., 4n)`` viewed as ``float32`` is ``(..., n)``. (torch also requires the last dim to be
        contiguous in memory; luminal's tensors are values, so any view works and gives what torch gives on its
        contiguous copy.)

        Raises ``TypeError`` for bool (not a bit pattern; use :meth:`cast`), ``ValueError`` for a 0-d tensor
        viewed as another width and for a last dim that does not hold a whole number of wider elements."""
        if len(shape) == 1:
            dtype = view_dtype(shape[0])
            if dtype is not None:
                if dtype != self.dtype and DType.bool not in (dtype, self.dtype) and dtype.bits != self.dtype.bits:
                    from .bit_views import view_resized  # (it uses stack(), defined here)
                    return view_resized(self, dtype)
                return self.bitcast(dtype)
        return self.reshape(*shape)

    def bitcast(self, dtype):
        """The same bits reinterpreted as ``dtype`` (same width as this tensor's dtype): ``view(dtype)``."""
        dtype = as_dtype(dtype)
        if dtype == self.dtype:
            return self
        check_bitcast(self.dtype, dtype)
        src_dims = self.graph.nodes[self.id].dims
        if not self.tracker.is_contiguous() and self.tracker.covers(src_dims):
            # a permuted / broadcast view of the whole source: reinterpret the source in its own layout and read
            # the result through the same view (exact: elementwise, and a padded slot's 0 is all-zero bits,
            # the 0 of every dtype), as cast() does
            whole = type(self)(self.graph, self.id, ShapeTracker.contiguous_of(src_dims), self.dtype)
            return whole._apply(ops.BitCast(dtype), dtype=dtype)._view(self.tracker)
        return self._apply(ops.BitCast(dtype), dtype=dtype)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        """Merge axes ``start_dim..end_dim`` into one."""
        if self.ndim == 0:
            return self.reshape((1,))
        a, b = normalize_axis(start_dim, self.ndim), normalize_axis(end_dim, self.ndim)
        if a > b:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        merged = to_expr(1)
        for d in self.dims[a:b + 1]:
            merged = merged * d
        return self.reshape(self.dims[:a] + (merged,) + self.dims[b + 1:])

    def unflatten(self, axis: int, sizes):
        """Split ``axis`` into ``sizes``."""
        axis = normalize_axis(axis, self.ndim)
        sizes = tuple(s if isinstance(s, (int, np.integer)) else to_expr(s) for s in sizes)  # keep -1 (inferred)
        return self.reshape(self.dims[:axis] + sizes + self.dims[axis + 1:])

    def merge_dims(self, axis1: int, axis2: int):
        """Merge the adjacent axes ``axis1`` and ``axis2 = axis1 + 1``."""
        a, b = normalize_axis(axis1, self.ndim), normalize_axis(axis2, self.ndim)
        if b != a + 1:
            raise ValueError(f"merge_dims: axes {axis1} and {axis2} must be adjacent (axis2 = axis1 + 1)")
        st = self.tracker.merge_dims(a)
        if st is None:
            return self.contiguous().merge_dims(a, b)
        return self._view(st)

    def split_dims(self, axis: int, inner_size):
        """Split ``axis`` into ``(size // inner_size, inner_size)`` (a view)."""
        return self._view(self.tracker.split_dims(normalize_axis(axis, self.ndim), inner_size))

    # ------------------------------------------------------------------ broadcasting
    def expand_dim(self, axis: int, size):
        """Insert a new broadcast axis of ``size`` at ``axis``."""
        n = self.ndim + 1
        if not -n <= axis < n:
            raise IndexError(f"expand_dim: axis {axis} out of range for a result with {n} dims")
        return self._view(self.tracker.expand_dim(axis % n, size))

    def expand(self, *shape):
        """Broadcast to ``shape`` (PyTorch rules: new leading axes, size-1 axes grow, -1 keeps a size)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, str, Expression)):
            shape = tuple(shape[0])
        if len(shape) < self.ndim:
            raise GraphError(f"expand: target {shape} has fewer dims than the tensor's {[str(d) for d in self.dims]}")
        lead = len(shape) - self.ndim
        st = self.tracker
        for _ in range(lead):
            st = st.expand_dim(0, 1)
        for k, d in enumerate(shape):
            if isinstance(d, (int, np.integer)) and d == -1:
                if k < lead:
                    raise GraphError(f"expand: -1 is not allowed for the new leading dim {k}")
                continue
            d = to_expr(d)
            if st.dims[k] != d:
                if st.dims[k] != 1:
                    raise GraphError(f"expand: cannot broadcast dim {k} of size {st.dims[k]} to {d} "
                                     f"(shape {[str(x) for x in self.dims]} -> {list(shape)})")
                st = st.expand(k, d)
        return self._view(st)

    broadcast_to = expand

    def expand_as(self, other):
        return self.expand(other.dims)

    # ------------------------------------------------------------------ slicing and padding
    def slice_axis(self, axis: int, start=0, stop=None, step: int = 1):
        """``x[..., start:stop:step, ...]`` along ``axis`` with Python semantics (negatives, clamping)."""
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis]
        if step == 0:
            raise ValueError("slice step cannot be zero")
        if n.to_int() is None and all(v is None or isinstance(v, (int, np.integer)) for v in (start, stop)):
            start, stop, length = _nonempty_slice(start, stop, step, n)
            return self._view(self.tracker.slice(axis, start, stop, step, length=length))
        start, stop = _normalize_slice(start, stop, step, n)
        return self._view(self.tracker.slice(axis, start, stop, step))

    def narrow(self, axis: int, start, length):
        """``torch.narrow``: ``length`` entries of ``axis`` from ``start`` (negative counts from the end); a view.

        Raises ``GraphError`` when the range does not lie inside the axis (``start`` outside ``[-size, size]``,
        ``start + length > size`` or ``length < 0``), as PyTorch does; it is checked where the numbers are known
        when the graph is built (a symbolic size or start is taken as given)."""
        axis = normalize_axis(axis, self.ndim)
        n, s, ln = self.dims[axis], to_expr(start), to_expr(length)
        if ln.is_constant() and ln.to_int() < 0:
            raise GraphError(f"narrow: length must be non-negative, got {ln.to_int()}")
        if s.is_constant() and n.is_constant():
            size = n.to_int()
            if not -size <= s.to_int() <= size:
                raise GraphError(f"narrow: start {s.to_int()} is out of range for dim {axis} of size {size} "
                                 f"(expected -{size} <= start <= {size})")
            s = to_expr(s.to_int() % size if s.to_int() < 0 else s.to_int())
            if ln.is_constant() and s.to_int() + ln.to_int() > size:
                raise GraphError(f"narrow: start ({s.to_int()}) + length ({ln.to_int()}) exceeds the size ({size}) of "
                                 f"dim {axis} of shape {[str(d) for d in self.dims]}")
        elif s.is_constant() and s.to_int() < 0:
            s = n + s.to_int()
        stop = s + ln
        as_int = lambda e: e.to_int() if e.is_constant() else e  # noqa: E731 - ints keep the slice exact
        return self.slice_axis(axis, as_int(s), as_int(stop))

    def __getitem__(self, key):
        """PyTorch indexing: ints, slices (any step), ``None``, ``...``, integer index tensors / numpy arrays /
        lists (several broadcast together: advanced indexing) and boolean masks known when the graph is built.
        See :func:`luminal.hl_ops.subscript.getitem` and docs/tensor_api.md."""
        from .subscript import getitem
        return getitem(self, key)

    def pad_axis(self, axis: int, before=0, after=0):
        """Zero-pad one axis; negative amounts crop."""
        axis = normalize_axis(axis, self.ndim)
        x = self
        before, after = to_expr(before), to_expr(after)
        if before.is_constant() and before.to_int() < 0:
            x = x.slice_axis(axis, -before.to_int(), None)
            before = to_expr(0)
        if after.is_constant() and after.to_int() < 0:
            x = x.slice_axis(axis, 0, x.dims[axis] + after)
            after = to_expr(0)
        return x._view(x.tracker.pad(axis, before, after))

    def pad(self, padding, value=0.0):
        """Pad with ``value``: ``padding`` is one ``(before, after)`` pair per leading axis, from axis 0.

        (``luminal.nn.functional.pad`` takes PyTorch's last-axis-first flat form.) Negative amounts crop.
        """
        padding = list(padding)
        if padding and isinstance(padding[0], (int, np.integer, Expression)):
            raise TypeError("pad expects one (before, after) pair per axis, e.g. [(0, 0), (1, 2)]")
        if len(padding) > self.ndim:
            raise ValueError(f"pad: {len(padding)} pairs for a tensor with {self.ndim} dims")
        x = self
        for axis, (before, after) in enumerate(padding):
            x = x.pad_axis(axis, before, after)
        if value != 0 and any(to_expr(b) != 0 or to_expr(a) != 0 for b, a in padding):
            from .binary import where
            from ._util import constant
            inside = constant(self.graph, True, DType.bool, self.dims)
            for axis, (before, after) in enumerate(padding):
                inside = inside.pad_axis(axis, before, after)
            x = where(inside, x, value)
        return x

    def flip(self, axes=None):
        """Reverse the given axes (all when None) — a view."""
        if axes is None:
            axes = tuple(range(self.ndim))
        if isinstance(axes, (int, np.integer)):
            axes = (axes,)
        axes = [normalize_axis(a, self.ndim) for a in axes]
        if len(set(axes)) != len(axes):
            raise ValueError(f"flip: dim {max(axes, key=axes.count)} appears multiple times in the list of dims")
        st = self.tracker
        for a in axes:
            st = st.flip(a)
        return self._view(st)

    def roll(self, shift, axis=None, *, dims=None):
        """``torch.roll``: rotate elements along ``axis`` (PyTorch's ``dims``) by ``shift``; tuples of shifts and
        axes roll each pair in turn; no axis rolls the flattened tensor and restores the shape."""
        if dims is not None:
            axis = dims
        if axis is None:
            if not isinstance(shift, int):
                raise ValueError(f"roll without dims takes one int shift, got {shift!r}")
            return self.reshape((-1,)).roll(shift, 0).reshape(tuple(self.dims))
        if isinstance(shift, (tuple, list)) or isinstance(axis, (tuple, list)):
            shifts = list(shift) if isinstance(shift, (tuple, list)) else [shift]
            axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
            if len(shifts) != len(axes):
                raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} dims")
            out = self
            for s_, a_ in zip(shifts, axes):
                out = out.roll(s_, a_)
            return out
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis]
        if not n.is_constant():
            raise GraphError("roll needs a concrete size along the rolled axis")
        n = n.to_int()
        s = shift % n if n else 0
        if s == 0:
            return self
        return self.slice_axis(axis, n - s, n).concat(self.slice_axis(axis, 0, n - s), axis)

    def pool(self, axis: int, kernel, stride=1, dilation=1):
        """Sliding windows over ``axis``: it becomes ``(n_windows, kernel)`` (a view)."""
        return self._view(self.tracker.pool(normalize_axis(axis, self.ndim), kernel, stride, dilation))

    def unfold(self, axis: int, size: int, step: int):
        """``torch.Tensor.unfold``: every slice of ``size`` entries along ``axis``, ``step`` apart; the slices
        index ``axis`` and the entries a new last axis (a view). ``size >= 0`` and ``step > 0``, as in PyTorch."""
        axis = normalize_axis(axis, self.ndim)
        if step <= 0:
            raise ValueError(f"unfold: step must be positive, got {step}")
        if size < 0:
            raise ValueError(f"unfold: size must be non-negative, got {size}")
        if self.ndim == 0:
            if size > 1:
                raise ValueError(f"unfold: size {size} exceeds the size 1 of a 0-d tensor")
            return self.unsqueeze(0).slice_axis(0, 0, size)
        n = self.dims[axis]
        if n.is_constant() and size > n.to_int():
            raise ValueError(f"unfold: size {size} exceeds the size {n.to_int()} of dim {axis}")
        w = self.pool(axis, size, step)  # (..., windows, size, ...)
        perm = list(range(w.ndim))
        perm.append(perm.pop(axis + 1))
        return w.permute(perm)

    def pool_last_dim(self, kernel, stride=1, dilation=1):
        """Sliding windows over the last axis (the seed's op; the basis of convolution and pooling)."""
        return self.pool(-1, kernel, stride, dilation)

    # ------------------------------------------------------------------ joins
    def concat(self, other, axis: int = 0):
        """Concatenate ``other`` after ``self`` along ``axis``."""
        from .. import hl_ops
        return hl_ops.concat([self, other], axis)

    cat = concat

    def repeat(self, *repeats):
        """Tile the tensor ``repeats[k]`` times along each axis (``torch.Tensor.repeat``)."""
        if len(repeats) == 1 and not isinstance(repeats[0], (int, np.integer)):
            repeats = tuple(repeats[0])
        if len(repeats) < self.ndim:
            raise ValueError(f"repeat: {len(repeats)} repeat counts for {self.ndim} dims")
        x = self
        for _ in range(len(repeats) - self.ndim):
            x = x.unsqueeze(0)
        for axis, r in enumerate(repeats):
            if r == 1:
                continue
            # (..., n, ...) -> (..., r, n, ...) broadcast -> merge: the merge needs a copy of the broadcast
            x = x.expand_dim(axis, r).merge_dims(axis, axis + 1)
        return x

    def chunk(self, chunks: int, axis: int = 0):
        """Split into ``chunks`` nearly equal views along ``axis``."""
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis].to_int()
        if n is None:
            raise GraphError("chunk needs a concrete size along the axis")
        size = -(-n // chunks)
        return [self.slice_axis(axis, s, min(s + size, n)) for s in range(0, n, size)]

    def split(self, split_size, axis: int = 0):
        """Split into views of ``split_size`` (an int or a list of sizes) along ``axis``."""
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis].to_int()
        if n is None:
            raise GraphError("split needs a concrete size along the axis")
        sizes = [split_size] * (-(-n // split_size)) if isinstance(split_size, int) else list(split_size)
        if isinstance(split_size, int):
            sizes[-1] = n - split_size * (len(sizes) - 1)
        if sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to {n}")
        out, start = [], 0
        for s in sizes:
            out.append(self.slice_axis(axis, start, start + s))
            start += s
        return out

    def unbind(self, axis: int = 0):
        """``torch.unbind``: the views ``x[..., i, ...]`` along ``axis`` (that axis removed), as a tuple."""
        axis = normalize_axis(axis, self.ndim)
        n = self.dims[axis].to_int()
        if n is None:
            raise GraphError("unbind needs a concrete size along the axis")
        return tuple(self.slice_axis(axis, i, i + 1).squeeze(axis) for i in range(n))

    # ------------------------------------------------------------------ indexing
    def gather(self, axis: int, index):
        """``out[i] = self[i with i[axis] = index[i]]`` (``torch.gather``; index is int32/int64, same rank)."""
        from ..tensor import GraphTensor

        if not isinstance(index, GraphTensor):
            raise TypeError(f"gather: index must be a GraphTensor of int32/int64, got {type(index).__name__}")
        if index.graph is not self.graph:
            raise GraphError("gather: index belongs to a different graph")
        check_index_dtype(index.dtype, "gather")
        axis = normalize_axis(axis, self.ndim)
        return self._apply(ops.Gather(axis), index, dims=index.dims)

    def index_select(self, axis: int, index):
        """Select entries along ``axis`` by an integer index tensor of any shape.

        The result has ``index``'s dims in place of ``axis`` (so ``table.index_select(0, ids)`` is an embedding
        lookup). Implemented as a ``Gather`` with the index broadcast over the other axes (no one-hot).
        """
        axis = normalize_axis(axis, self.ndim)
        check_index_dtype(index.dtype, "index_select")
        idx_dims = index.dims
        flat_index = index.reshape((index.numel(),)) if index.ndim != 1 else index
        # index (m,) -> (pre..., m, post...) broadcast
        view = flat_index
        for k in range(axis):
            view = view.expand_dim(k, self.dims[k])
        for k in range(axis + 1, self.ndim):
            view = view.expand_dim(k, self.dims[k])
        out = self.gather(axis, view)
        if index.ndim != 1:
            out = out.reshape(self.dims[:axis] + tuple(idx_dims) + self.dims[axis + 1:])
        return out

    def take_along_dim(self, index, axis: int):
        return self.gather(axis, index)


_REST = Expression.symbol("__lm_axis_rest")  # a symbolic axis n sliced by integer bounds is 1 + _REST


def _nonempty_slice(start, stop, step, n: Expression):
    """``(start, stop, length)`` of a slice by integer bounds of a symbolic axis ``n``, simplified assuming the
    axis is non-empty (``n >= 1``, as an integer index ``x[:, k]`` also assumes): computed over ``n = 1 + r``
    with a fresh ``r >= 0``, then ``r = n - 1`` put back. So ``x[:, 0:1]`` and ``x[:, -1:]`` have the size
    ``1``, ``x[:, 1:]`` ``seq - 1``, while ``x[:, :4]`` keeps ``min(4, seq)`` (shorter sequences are legal)."""
    from ..shape.simplify import _size
    from ..shape.tracker import slice_length
    s, e = _normalize_slice_bounds(start, stop, step, _REST + 1)
    back = {_REST.args[0]: n - 1}
    assumed = tuple(to_expr(v).substitute(back) for v in (s, e, slice_length(s, e, step)))
    s, e = _normalize_slice_bounds(start, stop, step, n)
    exact = (to_expr(s), to_expr(e), slice_length(s, e, step))  # holds for n = 0 too: kept unless longer
    return assumed if sum(map(_size, assumed)) < sum(map(_size, exact)) else exact


def _normalize_slice(start, stop, step, n: Expression):
    """Python slice bounds on a (possibly symbolic) dim ``n`` -> expressions (a symbolic ``n`` sliced by
    integer bounds is taken as non-empty, see :func:`_nonempty_slice`)."""
    nc = n.to_int()
    ints = all(v is None or isinstance(v, (int, np.integer)) for v in (start, stop))
    if nc is None and ints:
        return _nonempty_slice(start, stop, step, n)[:2]
    return _normalize_slice_bounds(start, stop, step, n)


def _normalize_slice_bounds(start, stop, step, n: Expression):
    nc = n.to_int()
    if nc is not None and all(v is None or isinstance(v, (int, np.integer)) for v in (start, stop)):
        s, e, _ = slice(start, stop, step).indices(nc)
        if step < 0 and e < 0:
            e = -1
        return s, e
    low, high = (0, n) if step > 0 else (-1, n - 1)  # Python's clamps (slice.indices)

    def norm(v, default):
        if v is None:
            return default
        if isinstance(v, (int, np.integer)) and v < 0:
            return (n + int(v)).max(low)
        return to_expr(v).min(high)
    if step > 0:
        return norm(start, to_expr(0)), norm(stop, n)
    return norm(start, n - 1), (to_expr(-1) if stop is None else norm(stop, n))


CONCAT_FUSED_MAX = 4
"""The most pieces one fused ``concat`` joins; more are joined in a tree of such groups (see :func:`concat`)."""


def concat(tensors: Sequence, axis: int = 0):
    """Concatenate tensors along ``axis`` (zero-pad each to the full extent, then ``Add``).

    Every element of a fused concat of ``L`` pieces evaluates all ``L`` padded reads (one bounds test each), so
    more than :data:`CONCAT_FUSED_MAX` pieces are joined in a tree: groups of that many are concatenated and
    materialized (a ``GraphBreak``), then the groups, and so on -- ``CONCAT_FUSED_MAX * ceil(log L)`` tests per
    element instead of ``L``, and kernels of bounded size (512 pieces: five levels)."""
    from ..dtype import promote_types

    tensors = list(tensors)
    if not tensors:
        raise ValueError("concat needs at least one tensor")
    ndim = tensors[0].ndim
    axis = normalize_axis(axis, ndim)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        if t.ndim != ndim:
            raise GraphError(f"concat: tensors have different ranks: {[list(map(str, x.dims)) for x in tensors]}")
        for k in range(ndim):
            if k != axis and t.dims[k] != tensors[0].dims[k]:
                raise GraphError(f"concat along axis {axis}: dim {k} differs: "
                                 f"{[list(map(str, x.dims)) for x in tensors]}")
        dtype = promote_types(dtype, t.dtype)
    if len(tensors) == 1:
        return tensors[0].cast(dtype)
    tensors = [t.cast(dtype) for t in tensors]
    group = CONCAT_FUSED_MAX
    while len(tensors) > group:
        tensors = [_concat_fused(tensors[k:k + group], axis).graph_break() if len(tensors[k:k + group]) > 1
                   else tensors[k] for k in range(0, len(tensors), group)]
    return _concat_fused(tensors, axis)


def _concat_fused(tensors: list, axis: int):
    """One fused concat: each piece zero-padded to the full extent along ``axis``, summed."""
    if len(tensors) == 1:
        return tensors[0]
    total = to_expr(0)
    for t in tensors:
        total = total + t.dims[axis]
    out = None
    before = to_expr(0)
    for t in tensors:
        after = total - before - t.dims[axis]
        part = t.pad_axis(axis, before, after)
        out = part if out is None else out + part
        before = before + t.dims[axis]
    return out


def stack(tensors: Sequence, axis: int = 0):
    """Stack equally shaped tensors along a new ``axis``."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack needs at least one tensor")
    n = tensors[0].ndim + 1
    if not -n <= axis < n:
        raise IndexError(f"stack: axis {axis} out of range for a result with {n} dims")
    axis %= n
    for t in tensors[1:]:
        if t.dims != tensors[0].dims:
            raise GraphError(f"stack: shapes differ: {[list(map(str, x.dims)) for x in tensors]}")
    return concat([t.unsqueeze(axis) for t in tensors], axis)
