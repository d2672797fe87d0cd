"""Indexing operators: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot, Trilu, EyeLike,
Compress, NonZero, Unique, ReverseSequence.

Gathers are luminal ``Gather`` nodes (never one-hot products). Scatters with run-time indices compare every
update position with every target position (``where`` over the mask, so inf/NaN updates stay exact), which
costs O(updates x targets); operators whose output *shape* depends on data (NonZero, Unique, Compress) need that
data at import time."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ...dtype import DType
from ...hl_ops import where
from ...hl_ops.indexing import _combine, scatter_elements
from ...shape import to_expr
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register, set_fold, typed
from ._common import axis, is_obj, simplify_obj


def _normalized_index(ctx, i, n):
    """Index input ``i`` with negative entries counted from the end of an axis of size ``n``."""
    if ctx.is_static(i) and not is_obj(ctx.static(i)):
        idx = ctx.static(i).astype(np.int64)
        if not is_symbolic(n):
            idx = np.where(idx < 0, idx + n, idx)
            return ctx.array(idx)
    idx = ctx.t(i)
    if not idx.dtype.is_int:
        raise TypeError(f"indices must be integers, got {idx.dtype}")
    return where(idx < 0, idx + n, idx)


@register("Gather")
def _gather(ctx):
    x = ctx.t(0)
    a = axis(ctx.attr("axis", 0), x.ndim)
    idx = _normalized_index(ctx, 1, x.dims[a])
    return [x.index_select(a, idx)]


@set_fold("Gather")
def _fold_gather(ctx):
    data, idx = ctx.static(0), ctx.static(1)
    a = axis(ctx.attr("axis", 0), data.ndim)
    idx = np.asarray(idx).astype(np.int64)
    idx = np.where(idx < 0, idx + data.shape[a], idx)
    out = np.take(data, idx, axis=a)
    return [simplify_obj(out) if is_obj(out) else out]


@register("GatherElements")
def _gather_elements(ctx):
    x = ctx.t(0)
    a = axis(ctx.attr("axis", 0), x.ndim)
    idx = _normalized_index(ctx, 1, x.dims[a])
    return [x.gather(a, idx)]


def _linear_index(ctx, idx, data_dims, b, k):
    """Flat index over ``data_dims[b:b+k]`` from the last axis (size k) of ``idx`` (negatives normalized)."""
    lin = None
    for j in range(k):
        n = data_dims[b + j]
        stride = 1
        for d in data_dims[b + j + 1:b + k]:
            stride *= d
        part = idx.slice_axis(-1, j, j + 1).squeeze(-1)
        part = where(part < 0, part + n, part)
        lin = part * stride if lin is None else lin + part * stride
    return lin


@register("GatherND")
def _gather_nd(ctx):
    x = ctx.t(0)
    idx = ctx.t(1).cast(DType.int64)
    b = ctx.attr("batch_dims", 0)
    data_dims, idx_dims = [dim(d) for d in x.dims], [dim(d) for d in idx.dims]
    k = idx_dims[-1]
    if any(is_symbolic(d) for d in data_dims[b:b + k]) or is_symbolic(k):
        raise OnnxImportError("GatherND needs concrete sizes for the indexed dims")
    rest = data_dims[b + k:]
    p = int(np.prod(data_dims[b:b + k], dtype=np.int64))
    flat = x.reshape(data_dims[:b] + [p] + rest)
    lin = _linear_index(ctx, idx, data_dims, b, k)                     # idx_dims[:-1]
    m = to_expr(1)
    for d in idx_dims[b:-1]:
        m = m * d
    lin = lin.reshape(idx_dims[:b] + [dim(m)])                          # (batch..., M)
    for d in rest:
        lin = lin.unsqueeze(-1).expand(lin.dims + (to_expr(d),))
    out = flat.gather(b, lin)                                           # (batch..., M, rest...)
    return [out.reshape(idx_dims[:-1] + rest)]


@register("ScatterElements")
def _scatter_elements(ctx):
    """ScatterElements (and the deprecated Scatter-9/11, the same without ``reduction``): ``hl_ops.scatter_elements``."""
    x = ctx.t(0)
    a = axis(ctx.attr("axis", 0), x.ndim)
    idx = _normalized_index(ctx, 1, x.dims[a])
    return [scatter_elements(x, a, idx, ctx.t(2), ctx.attr("reduction", "none"))]


@register("ScatterND")
def _scatter_nd(ctx):
    x, idx, upd = ctx.t(0), ctx.t(1).cast(DType.int64), ctx.t(2)
    data_dims, idx_dims = [dim(d) for d in x.dims], [dim(d) for d in idx.dims]
    k = idx_dims[-1]
    if any(is_symbolic(d) for d in data_dims[:k]):
        raise OnnxImportError("ScatterND needs concrete sizes for the indexed dims")
    rest = data_dims[k:]
    p = int(np.prod(data_dims[:k], dtype=np.int64))
    lin = _linear_index(ctx, idx, data_dims, 0, k).reshape((-1,))      # (M,)
    upd = upd.reshape([-1] + rest)                                       # (M, rest...)
    targets = ctx.graph.arange(p, dtype=DType.int64)
    mask = lin.unsqueeze(-1).eq(targets)                                 # (M, P)
    hit = mask.any(0)                                                    # (P,)
    for _ in rest:
        mask, hit = mask.unsqueeze(0), hit.unsqueeze(0)                  # (1..., M, P), (1..., P)
    r = len(rest)
    data_last = x.reshape([p] + rest).permute(list(range(1, r + 1)) + [0])   # (rest..., P)
    u_last = upd.permute(list(range(1, r + 1)) + [0]).unsqueeze(-1)          # (rest..., M, 1)
    out = _combine(ctx.attr("reduction", "none"), data_last, mask, u_last, hit)  # (rest..., P)
    out = out.permute([r] + list(range(r)))
    return [out.reshape(data_dims)]


@register("OneHot")
def _one_hot(ctx):
    idx = ctx.t(0)
    depth = ctx.scalar(1, "input 'depth'")
    depth = int(depth) if not isinstance(depth, type(to_expr("d"))) else depth
    values = ctx.t(2)
    off, on = values.slice_axis(0, 0, 1).reshape(()), values.slice_axis(0, 1, 2).reshape(())
    rank = idx.ndim + 1
    a = axis(ctx.attr("axis", -1), rank)
    if idx.dtype.is_float:
        idx = idx.trunc().cast(DType.int64)
    idx = where(idx < 0, idx + depth, idx)
    shape = [1] * rank
    shape[a] = depth
    targets = ctx.graph.arange(depth, dtype=idx.dtype).reshape(shape)
    return [where(idx.unsqueeze(a).eq(targets), on, off)]


@register("Trilu")
def _trilu(ctx):
    x = ctx.t(0)
    k = int(ctx.scalar(1, "input 'k'")) if ctx.has(1) else 0
    return [x.triu(k) if ctx.attr("upper", 1) else x.tril(k)]


@register("EyeLike")
def _eye_like(ctx):
    dims = ctx.dims(0)
    if any(is_symbolic(d) for d in dims):
        raise OnnxImportError("EyeLike needs a concrete shape")
    t = ctx.attr("dtype", None) or ctx.type(0)
    return [typed(np.eye(dims[0], dims[1], ctx.attr("k", 0), dtype=dtypes.numpy(t)), t)]


set_fold("EyeLike")(_eye_like)


@register("Compress")
def _compress(ctx):
    cond = np.asarray(ctx.static(1, "input 'condition' (it decides the output shape)")).astype(bool)
    x = ctx.t(0)
    a = ctx.attr("axis", None)
    if a is None:
        x, a = x.reshape((-1,)), 0
    else:
        a = axis(a, x.ndim)
    keep = np.nonzero(cond)[0].astype(np.int64)
    return [x.index_select(a, ctx.array(keep))]


@register("NonZero")
def _nonzero(ctx):
    x = ctx.static(0, "input 'X' (NonZero's output shape depends on its values)")
    return [typed(np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1), TP.INT64)]


set_fold("NonZero")(_nonzero)


@register("Unique")
def _unique(ctx):
    x = ctx.static(0, "input 'X' (Unique's output shape depends on its values)")
    if is_obj(x):
        raise OnnxImportError("Unique of symbolic values")
    a = ctx.attr("axis", None)
    sorted_ = ctx.attr("sorted", 1)
    values, idx, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                             axis=a)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.argsort(order)
        values = np.take(values, order, axis=0 if a is None else a)
        idx, counts = idx[order], counts[order]
        inverse = rank[inverse.reshape(-1)]
    return [values, typed(idx.astype(np.int64), TP.INT64), typed(inverse.reshape(-1).astype(np.int64), TP.INT64),
            typed(counts.astype(np.int64), TP.INT64)]


set_fold("Unique")(_unique)


@register("ReverseSequence")
def _reverse_sequence(ctx):
    x = ctx.t(0)
    lens = ctx.t(1).cast(DType.int64)
    b_ax, t_ax = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    n_t = x.dims[t_ax]
    t = ctx.graph.arange(n_t, dtype=DType.int64)
    shape = [1] * x.ndim
    shape[t_ax] = n_t
    t = t.reshape(shape)
    lshape = [1] * x.ndim
    lshape[b_ax] = x.dims[b_ax]
    lens = lens.reshape(lshape)
    src = where(t < lens, lens - 1 - t, t).expand(x.dims)
    return [x.gather(t_ax, src)]



register("Scatter", min_version=9)(_scatter_elements)
