"""ShapeTracker: a zero-copy view of a contiguous buffer as an affine map with validity masks.

A tracker describes how a *logical* tensor of shape ``dims`` reads a flat,
contiguous physical buffer. For a logical multi-index ``(i_0, ..., i_{n-1})``:

* the physical offset is ``offset + sum_j strides[j] * i_j``;
* the element is *valid* iff every mask ``(coeffs, const, size)`` satisfies
  ``0 <= const + sum_j coeffs[j] * i_j < size``; an invalid element reads as 0
  (that is how padding and out-of-range slices are represented).

Every view op keeps this form: ``permute``, ``expand`` (stride 0 = broadcast /
"fake" dim), ``slice`` with any step (negative steps flip), ``pad`` (adds a
mask), ``pool`` (sliding windows: ``i = stride*w + dilation*k``), ``split_dims``
(always), and ``merge_dims`` when the two axes are affinely compatible.
``reshape`` is a sequence of merges and splits and returns ``None`` when a
merge would need a copy; the caller then inserts a ``Contiguous`` op.

Example::

    >>> st = ShapeTracker.contiguous_of((2, 3)).permute((1, 0))
    >>> st.dims, st.strides
    ((3, 2), (1, 3))
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import math

import numpy as np

from .expression import Expression, IntLike, to_expr
from .simplify import ONE, ZERO

Mask = tuple[tuple[Expression, ...], Expression, Expression]  # (coeffs per axis, const, size)


def _prod(values: Iterable[Expression]) -> Expression:
    out = ONE
    for v in values:
        out = out * v
    return out


def contiguous_strides(dims: Sequence[Expression]) -> tuple[Expression, ...]:
    """Row-major strides of ``dims``."""
    strides = []
    acc = ONE
    for d in reversed(dims):
        strides.append(acc)
        acc = acc * d
    return tuple(reversed(strides))


def slice_length(start: IntLike, stop: IntLike | None, step: int) -> Expression:
    """Entries of ``[start:stop:step]`` for normalized bounds (``stop`` None: ``-1`` for a negative step)."""
    start = to_expr(start)
    if step > 0:
        length = (to_expr(stop) - start).max(0)
        return length.ceil_div(step) if step != 1 else length
    stop = to_expr(-1) if stop is None else to_expr(stop)
    return (start - stop).max(0).ceil_div(-step)


class ShapeTracker:
    """An affine, masked view of a contiguous buffer (see the module docstring)."""

    __slots__ = ("dims", "strides", "offset", "masks", "_hash", "_plain")

    def __init__(self, dims, strides, offset: IntLike = 0, masks: Sequence[Mask] = ()):
        self.dims = tuple(to_expr(d) for d in dims)
        self.strides = tuple(to_expr(s) for s in strides)
        if len(self.dims) != len(self.strides):
            raise ValueError(f"ShapeTracker: {len(self.dims)} dims but {len(self.strides)} strides")
        self.offset = to_expr(offset)
        self.masks = tuple(masks)
        self._hash = None
        self._plain = None  # is_contiguous(), computed on first use by gather_numpy

    # ------------------------------------------------------------------ construction
    @staticmethod
    def contiguous_of(dims: Iterable[IntLike]) -> "ShapeTracker":
        """A row-major contiguous tracker over ``dims``."""
        dims = tuple(to_expr(d) for d in dims)
        for d in dims:
            if d.is_constant() and d.to_int() < 0:
                raise ValueError(f"negative dimension {d} in shape {dims}")
        return ShapeTracker(dims, contiguous_strides(dims))

    @staticmethod
    def fake(dims: Iterable[IntLike]) -> "ShapeTracker":
        """A tracker whose every dim is broadcast (stride 0): a scalar seen at ``dims``."""
        dims = tuple(to_expr(d) for d in dims)
        return ShapeTracker(dims, (ZERO,) * len(dims))

    def _replace(self, dims=None, strides=None, offset=None, masks=None) -> "ShapeTracker":
        return ShapeTracker(self.dims if dims is None else dims, self.strides if strides is None else strides,
                            self.offset if offset is None else offset, self.masks if masks is None else masks)

    # ------------------------------------------------------------------ identity
    def _key(self):
        return (self.dims, self.strides, self.offset, self.masks)

    def __eq__(self, other) -> bool:
        return isinstance(other, ShapeTracker) and self._key() == other._key()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._key())
        return self._hash

    def __repr__(self) -> str:
        extra = "" if self.offset == 0 else f", offset={self.offset}"
        if self.masks:
            extra += f", masks={[(list(c), k, s) for c, k, s in self.masks]}"
        return f"ShapeTracker(dims={list(self.dims)}, strides={list(self.strides)}{extra})"

    # ------------------------------------------------------------------ queries
    @property
    def ndim(self) -> int:
        return len(self.dims)

    def n_elements(self) -> Expression:
        """Number of logical elements (product of dims)."""
        return _prod(self.dims)

    def is_fake(self, axis: int) -> bool:
        """True when ``axis`` is a broadcast dim (stride 0, no mask depends on it)."""
        return self.strides[axis] == 0 and all(c[axis] == 0 for c, _, _ in self.masks)

    def is_contiguous(self) -> bool:
        """True when the view reads the buffer row-major from offset 0 with no masks or broadcasts."""
        if self.masks or self.offset != 0:
            return False
        acc = ONE
        for d, s in zip(reversed(self.dims), reversed(self.strides)):
            if d != 1 and s != acc:
                return False
            acc = acc * d
        return True

    def covers(self, src_dims: Sequence[IntLike]) -> bool:
        """True when the view reads every element of a row-major buffer of ``src_dims`` and nothing else: a
        permutation, reshape or broadcast of the whole buffer (no masks, offset 0, and the axes that are not
        broadcast tile the buffer exactly). Conservative: symbolic strides give ``False``."""
        if self.masks or self.offset != 0:
            return False
        axes = []
        for d, s in zip(self.dims, self.strides):
            if s == 0 or d == 1:
                continue
            if not s.is_constant():
                return False
            axes.append((s.to_int(), d))
        axes.sort(key=lambda t: t[0])
        acc = ONE
        for s, d in axes:
            if acc != s:
                return False
            acc = acc * d
        return acc == _prod(to_expr(d) for d in src_dims)

    def is_reshaped_contiguous(self) -> bool:
        """Alias of :meth:`is_contiguous` kept for symmetry with the seed API."""
        return self.is_contiguous()

    def has_masks(self) -> bool:
        return bool(self.masks)

    def contiguous(self) -> "ShapeTracker":
        """The contiguous tracker of the same logical shape (the layout a ``Contiguous`` op writes)."""
        return ShapeTracker.contiguous_of(self.dims)

    def axis_expressions(self, index_vars: Sequence[IntLike]) -> tuple[Expression, Expression]:
        """``(physical offset, validity)`` as expressions of one index per logical axis."""
        idx = [to_expr(v) for v in index_vars]
        phys = self.offset
        for s, i in zip(self.strides, idx):
            if s != 0:
                phys = phys + s * i
        valid = ONE
        for coeffs, const, size in self.masks:
            lin = const
            for c, i in zip(coeffs, idx):
                if c != 0:
                    lin = lin + c * i
            valid = valid & (lin >= 0) & (lin < size)
        return phys, valid

    def _flat_index_vars(self, flat: Expression) -> list[Expression]:
        if any(d == 0 for d in self.dims):  # an empty view addresses nothing (and `% 0` would raise)
            return [ZERO] * self.ndim
        idx = []
        acc = ONE
        for j in range(self.ndim - 1, -1, -1):
            d = self.dims[j]
            i = flat // acc if acc != 1 else flat
            if j > 0:
                i = i % d
            idx.append(i)
            acc = acc * d
        return idx[::-1]

    def index_expression(self, flat: IntLike = "z") -> Expression:
        """Physical offset as a function of the flat logical index ``flat`` (symbol ``z`` by default)."""
        return self.axis_expressions(self._flat_index_vars(to_expr(flat)))[0]

    def valid_expression(self, flat: IntLike = "z") -> Expression:
        """1 where the flat logical index ``flat`` reads real data, 0 in padding / masked regions."""
        return self.axis_expressions(self._flat_index_vars(to_expr(flat)))[1]

    def resolve(self, bindings: Mapping[str, int]) -> "ShapeTracker":
        """Substitute bound symbols (e.g. ``{"batch": 32}``) into dims, strides, offset and masks."""
        sub = lambda e: e.substitute(bindings) if e.symbols() else e  # noqa: E731
        return ShapeTracker([sub(d) for d in self.dims], [sub(s) for s in self.strides], sub(self.offset),
                            [(tuple(sub(c) for c in cs), sub(k), sub(s)) for cs, k, s in self.masks])

    def shape(self, bindings: Mapping[str, int] | None = None) -> tuple[int, ...]:
        """Concrete logical shape, evaluating symbols with ``bindings``."""
        return tuple(d.evaluate(bindings) for d in self.dims)

    def symbols(self) -> frozenset[str]:
        out = frozenset()
        for e in self.dims + self.strides + (self.offset,):
            out |= e.symbols()
        for cs, k, s in self.masks:
            for e in cs + (k, s):
                out |= e.symbols()
        return out

    def physical_extent(self, bindings: Mapping[str, int] | None = None) -> int:
        """One past the largest physical offset any *valid* element may read (an upper bound)."""
        b = bindings or {}
        off = self.offset.evaluate(b)
        hi = off
        for d, s in zip(self.dims, self.strides):
            n, st = d.evaluate(b), s.evaluate(b)
            if n == 0:
                return 0
            if st > 0:
                hi += st * (n - 1)
        return hi + 1

    # ------------------------------------------------------------------ view ops
    def _axis(self, axis: int) -> int:
        n = self.ndim
        if not -n <= axis < n:
            raise IndexError(f"axis {axis} is out of range for a tensor with {n} dims {list(self.dims)}")
        return axis % n

    def permute(self, axes: Sequence[int]) -> "ShapeTracker":
        """Reorder axes: new axis ``k`` is old axis ``axes[k]``."""
        axes = [self._axis(a) for a in axes]
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"permute: {list(axes)} is not a permutation of {self.ndim} axes")
        return ShapeTracker([self.dims[a] for a in axes], [self.strides[a] for a in axes], self.offset,
                            [(tuple(cs[a] for a in axes), k, s) for cs, k, s in self.masks])

    def _substitute_axis(self, axis: int, new_dims: Sequence[Expression], coefs: Sequence[Expression],
                         const: Expression) -> "ShapeTracker":
        """Replace axis ``axis`` by new axes with ``i_axis = const + sum coefs[k] * new_k``."""
        def sub_vec(vec, base_const):
            c = vec[axis]
            new = vec[:axis] + tuple(c * k for k in coefs) + vec[axis + 1:]
            return new, base_const + c * const
        strides, offset = sub_vec(self.strides, self.offset)
        masks = []
        for cs, k, s in self.masks:
            ncs, nk = sub_vec(cs, k)
            masks.append((ncs, nk, s))
        dims = self.dims[:axis] + tuple(new_dims) + self.dims[axis + 1:]
        return ShapeTracker(dims, strides, offset, masks)._drop_redundant_masks()

    def slice(self, axis: int, start: IntLike = 0, stop: IntLike | None = None, step: int = 1,
              length: IntLike | None = None) -> "ShapeTracker":
        """View ``[start:stop:step]`` along ``axis`` (bounds already normalized to ``0 <= start``, ``stop <= dim``).

        A negative step reads backwards from ``start`` (as Python's ``x[start:stop:step]``). ``length`` (the
        number of entries) defaults to :func:`slice_length` of the bounds; a caller that knows more (the
        slicing of ``GraphTensor`` simplifies it assuming a symbolic axis is non-empty) passes it.
        """
        axis = self._axis(axis)
        start = to_expr(start)
        if step == 0:
            raise ValueError("slice step cannot be zero")
        if length is None:
            length = slice_length(start, self.dims[axis] if stop is None and step > 0 else stop, step)
        return self._substitute_axis(axis, (to_expr(length),), (to_expr(step),), start)

    def flip(self, axis: int) -> "ShapeTracker":
        """Reverse ``axis`` without copying."""
        axis = self._axis(axis)
        return self._substitute_axis(axis, (self.dims[axis],), (to_expr(-1),), self.dims[axis] - 1)

    def pad(self, axis: int, before: IntLike, after: IntLike) -> "ShapeTracker":
        """Zero-pad ``axis`` by ``before``/``after`` elements (non-negative); padded reads yield 0."""
        axis = self._axis(axis)
        before, after = to_expr(before), to_expr(after)
        if before == 0 and after == 0:
            return self
        n = self.dims[axis]
        st = self._substitute_axis(axis, (n + before + after,), (ONE,), ZERO - before)
        coeffs = tuple(ONE if j == axis else ZERO for j in range(self.ndim))
        return st._replace(masks=st.masks + ((coeffs, ZERO - before, n),))._drop_redundant_masks()

    def pool(self, axis: int, kernel: IntLike, stride: IntLike = 1, dilation: IntLike = 1) -> "ShapeTracker":
        """Sliding windows over ``axis``: it becomes ``(n_windows, kernel)`` with ``i = stride*w + dilation*k``."""
        axis = self._axis(axis)
        kernel, stride, dilation = to_expr(kernel), to_expr(stride), to_expr(dilation)
        n = self.dims[axis]
        span = dilation * (kernel - 1) + 1
        n_windows = ((n - span) // stride + 1).max(0)
        if n.is_constant() and span.is_constant() and span.to_int() > n.to_int():
            raise ValueError(f"pool: window span {span} is larger than the dimension {n}")
        return self._substitute_axis(axis, (n_windows, kernel), (stride, dilation), ZERO)

    def pool_last_dim(self, kernel: IntLike, stride: IntLike = 1, dilation: IntLike = 1) -> "ShapeTracker":
        """:meth:`pool` over the last axis (the seed's name)."""
        return self.pool(self.ndim - 1, kernel, stride, dilation)

    def unsqueeze(self, axis: int) -> "ShapeTracker":
        """Insert a size-1 axis at ``axis`` (0..ndim)."""
        if not -self.ndim - 1 <= axis <= self.ndim:
            raise IndexError(f"unsqueeze: axis {axis} out of range for {self.ndim} dims")
        axis = axis % (self.ndim + 1)
        return self._insert_axis(axis, ONE)

    def _insert_axis(self, axis: int, size: Expression) -> "ShapeTracker":
        ins = lambda v, x: v[:axis] + (x,) + v[axis:]  # noqa: E731
        return ShapeTracker(ins(self.dims, size), ins(self.strides, ZERO), self.offset,
                            [(ins(cs, ZERO), k, s) for cs, k, s in self.masks])

    def expand_dim(self, axis: int, size: IntLike) -> "ShapeTracker":
        """Insert a new broadcast axis of ``size`` at ``axis`` (0..ndim)."""
        if not 0 <= axis <= self.ndim:
            raise IndexError(f"expand_dim: axis {axis} out of range 0..{self.ndim}")
        return self._insert_axis(axis, to_expr(size))

    def expand(self, axis: int, size: IntLike) -> "ShapeTracker":
        """Broadcast the existing size-1 ``axis`` to ``size`` (stride becomes 0)."""
        axis = self._axis(axis)
        size = to_expr(size)
        if self.dims[axis] == size:
            return self
        if self.dims[axis] != 1:
            raise ValueError(f"expand: axis {axis} has size {self.dims[axis]}, only size-1 axes broadcast to {size}")
        zero_at = lambda v: v[:axis] + (ZERO,) + v[axis + 1:]  # noqa: E731
        return ShapeTracker(self.dims[:axis] + (size,) + self.dims[axis + 1:], zero_at(self.strides), self.offset,
                            [(zero_at(cs), k, s) for cs, k, s in self.masks])

    def squeeze(self, axis: int) -> "ShapeTracker":
        """Remove the size-1 ``axis``."""
        axis = self._axis(axis)
        if self.dims[axis] != 1:
            raise ValueError(f"squeeze: axis {axis} has size {self.dims[axis]}, not 1")
        drop = lambda v: v[:axis] + v[axis + 1:]  # noqa: E731
        return ShapeTracker(drop(self.dims), drop(self.strides), self.offset,
                            [(drop(cs), k, s) for cs, k, s in self.masks])

    def split_dims(self, axis: int, inner: IntLike) -> "ShapeTracker":
        """Split ``axis`` of size ``n`` into ``(n // inner, inner)``; never needs a copy."""
        axis = self._axis(axis)
        inner = to_expr(inner)
        n = self.dims[axis]
        outer = n // inner
        if n.is_constant() and inner.is_constant() and (inner.to_int() <= 0 or n.to_int() % inner.to_int()):
            raise ValueError(f"split_dims: dimension {n} is not divisible by {inner}")
        return self._substitute_axis(axis, (outer, inner), (inner, ONE), ZERO)

    def merge_dims(self, axis1: int, axis2: int | None = None) -> "ShapeTracker | None":
        """Merge adjacent axes ``axis1`` and ``axis1 + 1`` into one; ``None`` if that needs a copy."""
        a = self._axis(axis1)
        if axis2 is not None and self._axis(axis2) != a + 1:
            raise ValueError(f"merge_dims: axes {axis1} and {axis2} are not adjacent (axis2 must be axis1 + 1)")
        b = a + 1
        if b >= self.ndim:
            raise IndexError(f"merge_dims: axis {a} has no following axis in {self.ndim} dims")
        n1, n2 = self.dims[a], self.dims[b]

        def merged(vec):
            if n2 == 1:
                return vec[a]
            if n1 == 1:
                return vec[b]
            if vec[a] != vec[b] * n2:
                return None
            return vec[b]

        stride = merged(self.strides)
        if stride is None:
            return None
        masks = []
        for cs, k, s in self.masks:
            c = merged(cs)
            if c is None:
                return None
            masks.append((cs[:a] + (c,) + cs[b + 1:], k, s))
        return ShapeTracker(self.dims[:a] + (n1 * n2,) + self.dims[b + 1:],
                            self.strides[:a] + (stride,) + self.strides[b + 1:], self.offset, masks)

    def reshape(self, new_dims: Iterable[IntLike]) -> "ShapeTracker | None":
        """View with logical shape ``new_dims`` (same element count); ``None`` if a copy is needed first."""
        new_dims = tuple(to_expr(d) for d in new_dims)
        old_n, new_n = self.n_elements(), _prod(new_dims)
        if old_n.is_constant() and new_n.is_constant() and old_n != new_n:
            raise ValueError(f"reshape: cannot view {list(self.dims)} ({old_n} elements) as "
                             f"{list(new_dims)} ({new_n} elements)")
        if self.is_contiguous() or old_n == 0:  # (an empty view addresses nothing: any layout will do)
            return ShapeTracker.contiguous_of(new_dims)
        st = self
        # drop size-1 axes (they carry no addressing), then group old and new axes by equal products
        for j in range(st.ndim - 1, -1, -1):
            if st.dims[j] == 1:
                st = st.squeeze(j)
        targets = [d for d in new_dims if d != 1]
        groups = _group_dims(st.dims, tuple(targets))
        if groups is None:
            groups = [(list(range(st.ndim)), list(range(len(targets))))] if st.ndim else []
        out_axis = 0
        for old_axes, new_axes in groups:
            # merge the old group into one axis at position out_axis
            for _ in range(len(old_axes) - 1):
                st = st.merge_dims(out_axis)
                if st is None:
                    return None
            if not old_axes:
                st = st._insert_axis(out_axis, ONE)
            # split into the new group
            for k in range(len(new_axes) - 1):
                rest = _prod(targets[new_axes[k + 1]:new_axes[-1] + 1])
                st = st.split_dims(out_axis, rest)
                out_axis += 1
            out_axis += 1
        # restore size-1 axes of the target shape
        for j, d in enumerate(new_dims):
            if d == 1:
                st = st._insert_axis(j, ONE)
        if st.ndim != len(new_dims):
            return None
        return ShapeTracker(new_dims, st.strides, st.offset, st.masks)

    def _drop_redundant_masks(self) -> "ShapeTracker":
        if not self.masks:
            return self
        kept = []
        for cs, k, s in self.masks:
            lo, hi = k, k
            for c, d in zip(cs, self.dims):
                if c == 0:
                    continue
                span = c * (d - 1)
                clo, chi = c.bounds()
                if clo is not None and clo >= 0:
                    hi = hi + span
                elif chi is not None and chi <= 0:
                    lo = lo + span
                else:
                    lo, hi = None, None
                    break
            if lo is not None and (lo >= 0) == 1 and (hi < s) == 1:
                continue
            kept.append((cs, k, s))
        if len(kept) == len(self.masks):
            return self
        return self._replace(masks=tuple(kept))

    # ------------------------------------------------------------------ numpy realization
    def gather_numpy(self, buffer: np.ndarray, bindings: Mapping[str, int] | None = None) -> np.ndarray:
        """Read ``buffer`` (flat, contiguous) through this view; returns an array of the logical shape.

        Broadcast and strided views without masks are zero-copy ``as_strided`` views when strides are
        non-negative; everything else is an index gather with zeros where masks are false.
        """
        b = bindings or {}
        shape = self.shape(b)
        plain = self._plain
        if plain is None:
            plain = self._plain = self.is_contiguous()
        if plain and buffer.size == math.prod(shape):  # the buffer itself in its logical shape (the common read)
            out = buffer.reshape(shape)
            out.flags.writeable = False
            return out
        flat = buffer.reshape(-1)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if n == 0:
            return np.zeros(shape, dtype=buffer.dtype)
        strides = [s.evaluate(b) for s in self.strides]
        offset = self.offset.evaluate(b)
        if not self.masks and all(s >= 0 for s in strides):
            extent = offset + sum(s * (d - 1) for s, d in zip(strides, shape)) + 1
            if extent > flat.size or offset < 0:
                raise IndexError(f"view {self} reads up to element {extent - 1} of a buffer with {flat.size} elements")
            item = flat.itemsize
            return np.lib.stride_tricks.as_strided(flat[offset:], shape=shape, strides=[s * item for s in strides],
                                                   writeable=False)
        masks = [([c.evaluate(b) for c in cs], k.evaluate(b), size.evaluate(b)) for cs, k, size in self.masks]
        # a masked or reversed read is an index gather: its index and mask arrays are int64 / bool over the whole
        # view, so a large view is gathered in slices of its first long axis (a convolution's padded im2col view
        # of 24M elements took 757 MB of temporaries at once)
        j = next((k for k, d in enumerate(shape) if d > 1), 0)
        step = max(1, GATHER_CHUNK // max(1, n // max(shape[j], 1))) if shape else 1
        if not shape or step >= shape[j]:
            return _gather_part(flat, shape, strides, offset, masks, 0, 0, shape[0] if shape else 1, self)
        out = np.empty(shape, dtype=buffer.dtype)
        for lo in range(0, shape[j], step):
            hi = min(lo + step, shape[j])
            out[(slice(None),) * j + (slice(lo, hi),)] = _gather_part(flat, shape, strides, offset, masks, j, lo, hi,
                                                                     self)
        return out


GATHER_CHUNK = 1 << 20  # view elements per slice of a masked gather (see ShapeTracker.gather_numpy)


def _gather_part(flat, shape, strides, offset, masks, j, lo, hi, view) -> np.ndarray:
    """The elements of ``view`` (of ``shape``, its ``strides``, ``offset`` and evaluated ``masks``) whose index on
    axis ``j`` is in ``[lo, hi)``, gathered from ``flat`` with zeros where a mask is false."""
    ndim = len(shape)
    part = list(shape)
    if ndim:
        part[j] = hi - lo
    axes = [np.arange(lo if k == j else 0, hi if k == j else d, dtype=np.int64).reshape(
        [part[k] if i == k else 1 for i in range(ndim)]) for k, d in enumerate(shape)]
    phys = np.full([1] * ndim, offset, dtype=np.int64)
    for s, ax in zip(strides, axes):
        if s:
            phys = phys + s * ax
    valid = np.ones([1] * ndim, dtype=bool)
    for cs, k, size in masks:
        lin = np.full([1] * ndim, k, dtype=np.int64)
        for c, ax in zip(cs, axes):
            if c:
                lin = lin + c * ax
        valid = valid & (lin >= 0) & (lin < size)
    phys, valid = np.broadcast_to(phys, part), np.broadcast_to(valid, part)
    safe = np.where(valid, phys, 0)
    if valid.any():
        used = phys[valid]
        if used.min() < 0 or used.max() >= flat.size:
            raise IndexError(f"view {view} reads outside a buffer of {flat.size} elements")
    out = flat[safe] if flat.size else np.zeros(part, dtype=flat.dtype)
    return np.where(valid, out, np.zeros((), dtype=flat.dtype))


def _group_dims(old: tuple[Expression, ...], new: tuple[Expression, ...]):
    """Pair runs of old and new axes whose products are equal; ``None`` if no such pairing is found."""
    groups = []
    i = j = 0
    while i < len(old) or j < len(new):
        if i == len(old) or j == len(new):
            return None
        gi, gj = [i], [j]
        po, pn = old[i], new[j]
        i += 1
        j += 1
        steps = 0
        while po != pn:
            steps += 1
            if steps > 64:
                return None
            po_c, pn_c = po.to_int(), pn.to_int()
            if po_c is not None and pn_c is not None:
                if po_c < pn_c:
                    if i == len(old):
                        return None
                    po = po * old[i]; gi.append(i); i += 1
                else:
                    if j == len(new):
                        return None
                    pn = pn * new[j]; gj.append(j); j += 1
            else:
                # symbolic: extend the side with fewer factors; give up when both are exhausted
                if i < len(old) and (j == len(new) or len(gi) <= len(gj)):
                    po = po * old[i]; gi.append(i); i += 1
                elif j < len(new):
                    pn = pn * new[j]; gj.append(j); j += 1
                else:
                    return None
        groups.append((gi, gj))
    return groups
