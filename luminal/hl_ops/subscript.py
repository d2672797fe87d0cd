"""``x[key]`` and ``x[key] = value`` with PyTorch's semantics (:func:`getitem`, :func:`setitem`): ints, slices,
``None``, ``...``, several index tensors / arrays / lists broadcast together (ints as selections applied first,
torch's placement of the index dims), boolean masks known when the graph is built, and item assignment that
rebinds the handle. See docs/tensor_api.md, "Indexing and item assignment", for the rule, the errors and costs.

A mask computed in the graph gives a data-dependent size: :class:`DataDependentShapeError` (an ``IndexError``)
names the same-shape alternatives.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import DType, as_dtype
from ..graph import GraphError
from ..shape import to_expr
from ._util import broadcast_dims, check_index_dtype, constant, lazy_where as _where


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
        return np.array(t.tracker.gather_numpy(values[t.id], {}))
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
            cur = cur._view(cur.tracker.slice(axis, start, to_expr(start) + 1)).squeeze(axis)
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
