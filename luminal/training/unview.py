"""Undoing views for autograd: the gradient that reaches a view goes back to the viewed buffer.

:func:`unview` tries, in order: affine undoing (broadcast axes summed, permutations inverted, flips flipped
back, slices padded and pads sliced — zero-copy views), splitting source axes to match strided views (the
heads of a fused qkv projection), a sum of shifted views per window offset (sliding windows with few
offsets), the same two over merged source axes (views running across a flattened pair of axes) and after
dilating strided axes (a strided convolution's windows: the gradient zero-interleaved), and, for any other view, a
scatter-add written as a fused gather-and-sum over the source elements.
"""

from __future__ import annotations

from typing import Sequence

from .. import ops
from ..dtype import DType
from ..graph import Graph
from ..shape import Expression, ShapeTracker, to_expr
from ..shape.tracker import contiguous_strides
from ..tensor import GraphTensor

__all__ = ["unview"]


# ---------------------------------------------------------------------------- undoing views
def unview(g: GraphTensor, st: ShapeTracker, src_dims: Sequence[Expression]) -> GraphTensor:
    """The transpose of reading a buffer of ``src_dims`` through ``st``: send ``g`` (at ``st.dims``) back.

    ``out[p] = sum of g[i] over the valid view indices i that read source element p``. Returns a tensor with
    ``src_dims``; zero-copy views where the view is one-to-one per axis, a fused gather-and-sum otherwise.
    """
    src_dims = tuple(to_expr(d) for d in src_dims)
    if st == ShapeTracker.contiguous_of(src_dims):
        return g
    if any(d == 0 for d in st.dims):  # an empty view reads nothing: no gradient reaches the source
        return g.graph.zeros(src_dims, g.dtype)
    for method in (_unview_affine, _unview_split, _unview_windows):
        out = _attempt(g.graph, method, g, st, src_dims)
        if out is not None:
            return out
    for method in (_unview_merged, _unview_dilated):
        out = _attempt(g.graph, method, g, st, src_dims)
        if out is not None:
            return out
    return _unview_gather(g, st, src_dims)


def _unview_merged(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor | None:
    """Undo over the merged source axes (:func:`_merged_source`), then split them again."""
    merged = _merged_source(st, src_dims)
    if merged is None:
        return None
    for method in (_unview_affine, _unview_windows):
        out = _attempt(g.graph, method, g, st, merged)
        if out is not None:
            return out.reshape(src_dims)
    return None


def _unview_dilated(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor | None:
    """Strided reads (a strided convolution's windows): undo the stride with zeros first (:func:`_dilate_strided`)."""
    dilated = _dilate_strided(g, st, src_dims)
    if dilated is None:
        return None
    for method in (_unview_affine, _unview_windows):
        out = _attempt(g.graph, method, dilated[0], dilated[1], src_dims)
        if out is not None:
            return out
    return None


def _dilate_strided(g: GraphTensor, st: ShapeTracker, src_dims) -> tuple | None:
    """A view axis stepping ``m`` source elements at a time (``m`` times a source axis' stride, ``m > 1``: a strided
    convolution's output positions) becomes a unit-step axis over ``(n - 1) * m + 1`` positions, with ``g``
    zero-interleaved along it: the new positions read elements between the old ones and carry 0, so the transpose
    is unchanged, and its masks (coefficient ``m`` on that axis) get coefficient 1. ``(g, st)`` dilated, or None
    (nothing strided, a symbolic size, or a mask coefficient ``m`` does not divide)."""
    src_strides = [_const(c) for c in contiguous_strides(tuple(src_dims))]
    if any(c is None for c in src_strides):
        return None
    dims, strides, masks = list(st.dims), list(st.strides), [(list(c), k, size) for c, k, size in st.masks]
    changed = False
    for j in range(st.ndim):
        s, n = _const(strides[j]), _const(dims[j])
        if s is None or n is None or s == 0 or n < 2 or abs(s) in src_strides:
            continue
        base = [c for c in src_strides if abs(s) % c == 0 and abs(s) // c > 1]
        if not base:
            continue
        m = abs(s) // max(base)
        coeffs = [_const(c[j]) for c, _, _ in masks]
        if any(c is None or c % m for c in coeffs):
            return None
        g = g.unsqueeze(j + 1).pad_axis(j + 1, 0, m - 1).merge_dims(j, j + 1).slice_axis(j, 0, (n - 1) * m + 1)
        dims[j], strides[j] = to_expr((n - 1) * m + 1), strides[j] // m
        for c, _, _ in masks:
            c[j] = c[j] // m
        changed = True
    if not changed:
        return None
    return g, ShapeTracker(tuple(dims), tuple(strides), st.offset, [(tuple(c), k, size) for c, k, size in masks])


def _merged_source(st: ShapeTracker, src_dims) -> tuple | None:
    """The source dims with adjacent axes merged where the view runs across them as one axis: no view axis
    steps by the outer axis' stride, and a view axis stepping by the inner one is longer than it (a pad or a
    slice over a flattened pair, e.g. a transposed convolution's zero-interleaved rows read through the
    convolution's padded windows). None when nothing merges (or a size is symbolic)."""
    dims = [_const(d) for d in src_dims]
    if any(d is None for d in dims):
        return None
    view = [(_const(n), _const(s)) for n, s in zip(st.dims, st.strides)]
    if any(n is None or s is None for n, s in view):
        return None
    steps = {abs(s) for _, s in view if s != 0}
    merged, a = False, len(dims) - 1
    while a > 0:
        strides = [_const(c) for c in contiguous_strides(dims)]
        if strides[a - 1] not in steps and any(abs(s) == strides[a] and n > dims[a] for n, s in view):
            dims[a - 1:a + 1] = [dims[a - 1] * dims[a]]
            merged = True
        a -= 1
    return tuple(to_expr(d) for d in dims) if merged else None


def _attempt(graph: Graph, method, *args):
    """Run an unview strategy; when it gives up, remove the nodes it added (dead nodes would be computed
    and would hide matrix products from the GEMM lowering)."""
    start = graph._next_id
    out = method(*args)
    if out is None:
        for nid in sorted((n for n in graph.nodes if n >= start), reverse=True):
            graph.remove_node(nid)
    return out


def _unview_split(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor | None:
    """Views that address part of a source axis with their own stride (heads split out of a feature axis,
    q/k/v sliced from a fused projection): split the source axes to match, undo the view there, reshape back."""
    src_dims = tuple(src_dims)
    fine = list(src_dims)
    changed = True
    while changed:
        changed = False
        strides = contiguous_strides(fine)
        for s in st.strides:
            sc = _const(s)
            if sc is None or sc == 0 or any(cs == s for cs in strides):
                continue
            for a in range(len(fine)):
                cs, n = _const(strides[a]), _const(fine[a])
                if cs is None or n is None or sc % cs or not cs < abs(sc) < cs * n:
                    continue
                inner = abs(sc) // cs
                if n % inner:
                    continue
                fine[a:a + 1] = [to_expr(n // inner), to_expr(inner)]
                changed = True
                break
            if changed:
                break
    if len(fine) == len(src_dims):
        return None
    out = _unview_affine(g, st, tuple(fine))
    return None if out is None else out.reshape(src_dims)


def _const(e: Expression) -> int | None:
    return e.to_int() if e.is_constant() else None


def _sign(e: Expression) -> int | None:
    c = _const(e)
    if c is not None:
        return (c > 0) - (c < 0)
    lo, hi = e.bounds()
    if lo is not None and lo >= 0:  # symbolic strides are products of dims: zero only for empty tensors
        return 1
    if hi is not None and hi < 0:
        return -1
    return None


def _drop_axis(st: ShapeTracker, axis: int) -> ShapeTracker:
    drop = lambda v: v[:axis] + v[axis + 1:]  # noqa: E731
    return ShapeTracker(drop(st.dims), drop(st.strides), st.offset, [(drop(c), k, s) for c, k, s in st.masks])


def _unview_affine(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor | None:
    """Undo views that map each view axis to its own source axis with stride +-1; ``None`` if not that kind."""
    # 1. broadcast axes: sum (a mask on such an axis alone keeps an interval of it: slice first); adjacent
    #    unmasked ones are merged first so one reduction (one GEMM for a weight gradient) covers them
    for j in range(st.ndim - 2, -1, -1):
        if st.strides[j] == 0 and st.strides[j + 1] == 0 and all(c[j] == 0 and c[j + 1] == 0 for c, _, _ in st.masks):
            gm, sm = g.tracker.merge_dims(j), st.merge_dims(j)
            if gm is not None and sm is not None and _factors_merge(g, j):
                g, st = g._view(gm), sm
    for j in range(st.ndim - 1, -1, -1):
        if st.strides[j] == 0:
            lo, hi, rest = to_expr(0), st.dims[j], []
            for c, k, size in st.masks:
                if c[j] == 0:
                    rest.append((c, k, size))
                    continue
                if any(cc != 0 for i, cc in enumerate(c) if i != j) or c[j] != 1:
                    return None
                lo, hi = _bound(max, lo, -k), _bound(min, hi, size - k)
                if lo is None or hi is None:
                    return None
            if rest != list(st.masks):
                if _const(hi - lo) is not None and _const(hi - lo) <= 0:
                    return None  # nothing valid: the general path yields zeros
                g = g.slice_axis(j, lo, hi)
                st = ShapeTracker(st.dims[:j] + (hi - lo,) + st.dims[j + 1:], st.strides, st.offset, rest)
            g = g.squeeze(j) if st.dims[j] == 1 else g.sum(j)
            st = _drop_axis(st, j)
    # 2. size-1 axes carry no addressing
    for j in range(st.ndim - 1, -1, -1):
        if st.dims[j] == 1:
            if any(c[j] != 0 for c, _, _ in st.masks):
                return None
            g = g.squeeze(j)
            st = _drop_axis(st, j)
    # 3. negative strides: flip both the gradient and the view
    for j in range(st.ndim):
        sign = _sign(st.strides[j])
        if sign is None:
            return None
        if sign < 0:
            g = g.flip(j)
            st = st.flip(j)
    src_strides = contiguous_strides(src_dims)
    # 4. a permutation/reshape of the whole source
    if not st.masks and st.offset == 0:
        est = [_estimate(s) for s in st.strides]
        order = sorted(range(st.ndim), key=lambda j: -est[j])
        dims = [st.dims[j] for j in order]
        if tuple(st.strides[j] for j in order) == contiguous_strides(dims) and _same_count(dims, src_dims):
            if order != list(range(st.ndim)):
                g = g.permute(order)
            return g.reshape(src_dims) if tuple(g.dims) != tuple(src_dims) else g
    # 5. one view axis per source axis, stride equal to the source axis' stride
    src_of: dict[int, int] = {}
    used: set[int] = set()
    for j, s in enumerate(st.strides):
        cands = [a for a, cs in enumerate(src_strides) if cs == s and a not in used and src_dims[a] != 1]
        if len(cands) != 1:
            return None
        src_of[j] = cands[0]
        used.add(cands[0])
    # valid interval of each view axis (masks must each involve a single axis with coefficient 1, or -1: a pad
    # of a flipped axis, flipped back in step 3: 0 <= -i + k < size is k - size < i <= k)
    lo = {j: to_expr(0) for j in range(st.ndim)}
    hi = {j: st.dims[j] for j in range(st.ndim)}
    for coeffs, k, size in st.masks:
        axes = [j for j, c in enumerate(coeffs) if c != 0]
        if len(axes) != 1 or coeffs[axes[0]] not in (1, -1):
            return None
        j = axes[0]
        first, end = (-k, size - k) if coeffs[j] == 1 else (k - size + 1, k + 1)
        lo[j] = _bound(max, lo[j], first)
        hi[j] = _bound(min, hi[j], end)
        if lo[j] is None or hi[j] is None:
            return None
        if _const(hi[j] - lo[j]) is not None and _const(hi[j] - lo[j]) <= 0:
            return g.graph.zeros(src_dims, g.dtype)  # the view reads padding only (a slice inside a pad)
    # offsets per source axis: offset = sum off_a * stride_a, with off_a + [lo, hi) inside [0, n_a)
    offs = _split_offset(st.offset, src_dims, src_strides, {a: (lo[j], hi[j]) for j, a in src_of.items()})
    if offs is None:
        return None
    # build: crop to the valid interval, move axes to source order (new size-1 axes for the rest), pad
    for j in range(st.ndim):
        if lo[j] != 0 or hi[j] != st.dims[j]:
            g = g.slice_axis(j, lo[j], hi[j])
    pos = {a: j for j, a in src_of.items()}
    order = [pos[a] for a in range(len(src_dims)) if a in pos]
    if order != list(range(len(order))):
        g = g.permute(order)
    for a in range(len(src_dims)):
        if a not in pos:
            g = g.unsqueeze(a)
    for a in range(len(src_dims)):
        if a in pos:
            j = pos[a]
            before, after = offs[a] + lo[j], src_dims[a] - offs[a] - hi[j]
        else:
            before, after = offs[a], src_dims[a] - offs[a] - 1
        if before != 0 or after != 0:
            g = g.pad_axis(a, before, after)
    return g


def _factors_merge(g: GraphTensor, j: int) -> bool:
    """When ``g`` is a product node (a matmul's local gradient), merging its axes ``j, j+1`` before the sum
    only pays if both factors can be addressed through the merged axis too (then the sum is one GEMM);
    otherwise summing the axes one at a time keeps each step a (batched) GEMM."""
    node = g.graph.nodes[g.id]
    if not isinstance(node.op, ops.Mul) or g.tracker != ShapeTracker.contiguous_of(node.dims):
        return True
    return all(e.shape.merge_dims(j) is not None for e in node.inputs)


def _bound(pick, a: Expression, b: Expression) -> Expression | None:
    """``pick(a, b)`` (``max`` or ``min``) when it is known statically: both constant, or equal; else None."""
    ca, cb = _const(a), _const(b)
    if ca is not None and cb is not None:
        return to_expr(pick(ca, cb))
    if a == b:
        return a
    return None


def _same_count(a: Sequence[Expression], b: Sequence[Expression]) -> bool:
    pa, pb = to_expr(1), to_expr(1)
    for d in a:
        pa = pa * d
    for d in b:
        pb = pb * d
    return pa == pb or _estimate(pa) == _estimate(pb) and not (pa.symbols() ^ pb.symbols())


def _split_offset(offset: Expression, src_dims, src_strides, ranges: dict) -> dict | None:
    """Per-source-axis offsets ``off_a`` with ``sum off_a * stride_a == offset`` and every valid view index
    in range (``0 <= off_a + lo``, ``off_a + hi <= n_a``); ``None`` when that cannot be established."""
    n = len(src_dims)
    if offset == 0:
        offs = {a: 0 for a in range(n)}
        for a in range(n):
            lo, hi = ranges.get(a, (to_expr(0), to_expr(1)))
            if _const(lo) is not None and _const(lo) < 0:
                return None
            if not (hi == src_dims[a] or (_const(hi) is not None and _const(src_dims[a]) is not None
                                          and _const(hi) <= _const(src_dims[a]))):
                return None
        return offs
    rest = _const(offset)
    if rest is None:
        return None
    offs = {}
    for a in range(n - 1, -1, -1):
        stride = _const(src_strides[a])
        size = _const(src_dims[a])
        lo, hi = ranges.get(a, (to_expr(0), to_expr(1)))
        lo_c, hi_c = _const(lo), _const(hi)
        if stride is None or rest % stride:
            return None
        t = rest // stride
        if lo_c is None or hi_c is None:  # a symbolic extent: only a whole, unshifted axis is understood
            if t != 0 or lo != 0 or hi != src_dims[a] or (a > 0 and size is None):
                return None
            offs[a] = 0
            continue
        if a == 0:
            off = t
        else:
            if size is None or size <= 0:
                return None
            # the one value congruent to t (mod size) in [-lo, size - hi]
            off = -lo_c + (t + lo_c) % size
        if size is None:
            if off != 0 or not (hi == src_dims[a] and lo_c >= 0):
                return None
        elif off + lo_c < 0 or off + hi_c > size:
            return None
        offs[a] = off
        rest -= off * stride
    return offs if rest == 0 else None


def _estimate(e: Expression) -> int:
    """A numeric stand-in for an expression: symbols (dims) replaced by large distinct values."""
    syms = sorted(e.symbols())
    if not syms:
        return e.to_int()
    return e.evaluate({s: 1009 + 31 * k for k, s in enumerate(syms)})


MAX_WINDOW_TERMS = 64


def _split_axes(st: ShapeTracker) -> tuple[list[int], list[int]]:
    """(decodable axes, enumerated axes): the largest axes whose strides form a non-overlapping lattice are
    decodable; the rest (window offsets, broadcast axes) are enumerated."""
    est_dims = [_estimate(d) for d in st.dims]
    est_strides = [_estimate(s) for s in st.strides]
    kept: list[int] = []
    for j in sorted(range(st.ndim), key=lambda j: -est_dims[j]):
        if est_strides[j] == 0:
            continue
        trial = sorted(kept + [j], key=lambda a: abs(est_strides[a]))
        span, ok = 1, True
        for a in trial:
            if abs(est_strides[a]) < span:
                ok = False
                break
            span += abs(est_strides[a]) * (est_dims[a] - 1)
        if ok:
            kept.append(j)
    return kept, [j for j in range(st.ndim) if j not in kept]


def _unview_windows(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor | None:
    """Sliding windows (stride-1 convolution/pooling reads): one zero-copy transpose per window offset, summed.

    Fixing every enumerated axis (the window offsets) at a value leaves a one-to-one view; its transpose is a
    padded view of ``g``, so the scatter-add becomes one fused sum of shifted views (no index arithmetic).
    """
    _, loops = _split_axes(st)
    if not loops or any(_const(st.dims[j]) is None for j in loops):
        return None
    terms = 1
    for j in loops:
        terms *= _const(st.dims[j])
    if terms > MAX_WINDOW_TERMS or terms == 0:
        return None
    import itertools

    total = None
    for values in itertools.product(*[range(_const(st.dims[j])) for j in loops]):
        gs, ss = g, st
        for j, v in sorted(zip(loops, values), reverse=True):
            gs = gs.slice_axis(j, v, v + 1).squeeze(j)
            ss = ss.slice(j, v, v + 1).squeeze(j)
        part = _unview_affine(gs, ss, src_dims)
        if part is None:
            return None
        total = part if total is None else total + part
    return total


def _unview_gather(g: GraphTensor, st: ShapeTracker, src_dims) -> GraphTensor:
    """General transpose: for each source element, gather the view elements that read it and sum them.

    View axes whose strides form a non-overlapping lattice are decoded from the source index with divisions;
    the other axes (window axes of pooling/convolution, broadcast axes read by masks) are enumerated as a
    small extra axis that is summed.
    """
    graph = g.graph
    n_src = to_expr(1)
    for d in src_dims:
        n_src = n_src * d
    ndim = st.ndim
    est_strides = [_estimate(s) for s in st.strides]
    kept, loops = _split_axes(st)
    n_loop = to_expr(1)
    for j in loops:
        n_loop = n_loop * st.dims[j]
    z = to_expr("z")
    p = z // n_loop if n_loop != 1 else z
    rem = z % n_loop if n_loop != 1 else to_expr(0)
    idx: dict[int, Expression] = {}
    for j in reversed(loops):  # mixed radix, last loop axis fastest
        d = st.dims[j]
        idx[j] = rem % d if j != loops[0] else rem
        rem = rem // d
    q = p - st.offset
    for j in loops:
        if st.strides[j] != 0:
            q = q - st.strides[j] * idx[j]
    for j in kept:  # negative strides: count from the other end
        if est_strides[j] < 0:
            q = q - st.strides[j] * (st.dims[j] - 1)
    valid = q >= 0
    r = q.max(0)
    for j in sorted(kept, key=lambda a: -abs(est_strides[a])):
        s = st.strides[j] if est_strides[j] > 0 else -st.strides[j]
        u = r // s
        r = r % s
        valid = valid & (u < st.dims[j])
        idx[j] = u if est_strides[j] > 0 else st.dims[j] - 1 - u
    valid = valid & (r < 1)
    for coeffs, k, size in st.masks:
        lin = k
        for c, j in zip(coeffs, range(ndim)):
            if c != 0:
                lin = lin + c * idx[j]
        valid = valid & (lin >= 0) & (lin < size)
    flat = to_expr(0)
    for j, cs in enumerate(contiguous_strides(st.dims)):
        flat = flat + cs * idx[j]
    total = n_src * n_loop
    n_view = g.numel()
    index_dtype = DType.int64
    picked_at = graph.iota(flat * valid, (total,), index_dtype)
    weight = graph.iota(valid, (total,), g.dtype)
    data = g.contiguous().reshape((n_view,))
    if n_view.is_constant() and n_view.to_int() == 0:
        return graph.zeros(src_dims, g.dtype)
    picked = data.gather(0, picked_at) * weight
    if n_loop != 1:
        picked = picked.reshape((n_src, n_loop)).sum(1)
    return picked.reshape(src_dims)
