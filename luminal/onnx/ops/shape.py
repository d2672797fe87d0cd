"""Shape and layout operators: Shape, Size, Reshape, Flatten, (Un)squeeze, Transpose, Concat, Split, Slice,
Expand, Tile, Pad, Constant, ConstantOfShape, Range, DepthToSpace, SpaceToDepth, CenterCropPad.

Shapes are read at import time (``ctx.ints``); with symbolic dims they are lists of ints and Expressions, so
the resulting views are symbolic (no recompilation when the dims change)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ...dtype import DType
from ...hl_ops import concat, where
from ...shape import Expression, to_expr
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import NotFoldable, dim, is_symbolic, register, set_fold, typed
from ._common import as_obj, axes_list, axis, expr, is_obj, nonneg, simplify_obj

# Slice bounds at or beyond this mean "to the end" of a symbolic dim (exporters write INT64_MAX, INT32_MAX or
# 10**9): symbolic dims are assumed to stay below it.
BIG = 10 ** 9


# ---------------------------------------------------------------------------------------------------- Shape, Size, Constant
def _shape_values(ctx):
    dims = list(ctx.dims(0))
    rank = len(dims)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    arr = np.empty(max(end - start, 0), dtype=object)
    arr[:] = dims[start:end]
    return typed(simplify_obj(arr), TP.INT64)


@register("Shape", fold=lambda ctx: [_shape_values(ctx)])
def _shape(ctx):
    return [_shape_values(ctx)]


def _size_value(ctx):
    total = to_expr(1)
    for d in ctx.dims(0):
        total = total * d
    v = dim(total)
    return typed(np.array(v, dtype=object if isinstance(v, Expression) else np.int64), TP.INT64)


@register("Size", fold=lambda ctx: [_size_value(ctx)])
def _size(ctx):
    return [_size_value(ctx)]


@register("Constant", min_version=9)
def _constant(ctx):
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if ctx.has_attr(name):
            v = ctx.attr(name)
            if name == "value":
                return [typed(v, ctx.node.attribute[0].t.data_type)]
            if name.startswith("value_float"):
                return [typed(np.array(v, dtype=np.float32), TP.FLOAT)]
            return [typed(np.array(v, dtype=np.int64), TP.INT64)]
    if ctx.has_attr("sparse_value"):
        from ..importer import _sparse_to_dense
        sp = next(a.sparse_tensor for a in ctx.node.attribute if a.name == "sparse_value")
        return [typed(_sparse_to_dense(sp), sp.values.data_type)]
    raise OnnxImportError("Constant: only tensor, float(s) and int(s) values are supported (not strings)")


@register("ConstantOfShape")
def _constant_of_shape(ctx):
    shape = ctx.ints(0, "input 'input' (the shape)")
    value = ctx.attr("value")
    if value is None:
        value, t = np.zeros(1, np.float32), TP.FLOAT
    else:
        t = next(a.t.data_type for a in ctx.node.attribute if a.name == "value")
    scalar = np.asarray(value).reshape(-1)[0]
    if not any(is_symbolic(d) for d in shape) and int(np.prod(shape, dtype=np.int64)) <= 1 << 16:
        return [typed(np.full(shape, scalar, dtype=dtypes.numpy(t)), t)]
    return [typed(ctx.const(scalar.item(), dtypes.luminal(t), shape), t)]


@set_fold("ConstantOfShape")
def _fold_constant_of_shape(ctx):
    out = _constant_of_shape(ctx)
    if not isinstance(out[0].value, np.ndarray):
        raise NotFoldable()  # symbolic or large: a broadcast constant in the graph
    return out


# ---------------------------------------------------------------------------------------------------- Reshape family
def reshape_target(in_dims, shape, allowzero: bool) -> list:
    out = []
    for k, s in enumerate(shape):
        if not is_symbolic(s) and s == 0 and not allowzero:
            if k >= len(in_dims):
                raise OnnxImportError(f"Reshape: shape {shape} copies dim {k} (0) but the input has rank "
                                      f"{len(in_dims)}")
            out.append(in_dims[k])
        else:
            out.append(s)
    if sum(1 for s in out if not is_symbolic(s) and s == -1) > 1:
        raise OnnxImportError(f"Reshape: shape {shape} has more than one -1")
    if any(not is_symbolic(s) and s == -1 for s in out) and any(is_symbolic(d) for d in list(in_dims) + out):
        k = next(i for i, s in enumerate(out) if not is_symbolic(s) and s == -1)
        inferred = _infer_dim(list(in_dims), [s for i, s in enumerate(out) if i != k])
        if inferred is not None:
            out[k] = inferred
    return out


def _infer_dim(total_factors: list, known_factors: list):
    """The ``-1`` of a reshape over symbolic dims: cancel the factors the two shapes share (``[b, 5, 2, 16]``
    against ``[b, 5, -1]`` gives 32), so the result does not depend on dividing symbolic products."""
    rest = list(total_factors)
    left = []
    for f in known_factors:
        hit = next((i for i, t in enumerate(rest) if (is_symbolic(t) or is_symbolic(f)) and expr(t) == expr(f)), None)
        if hit is None:
            left.append(f)
        else:
            rest.pop(hit)
    if any(is_symbolic(f) for f in left):
        return None
    divisor = int(np.prod([int(f) for f in left], dtype=np.int64)) if left else 1
    numerator = to_expr(1)
    for t in rest:
        numerator = numerator * t
    if numerator.is_constant():
        return numerator.to_int() // divisor if divisor else None
    return dim(numerator // divisor) if divisor else None


@register("Reshape")
def _reshape(ctx):
    target = reshape_target(ctx.dims(0), ctx.ints(1, "input 'shape'"), ctx.attr("allowzero", 0))
    return [ctx.t(0).reshape(target)]


@set_fold("Reshape")
def _fold_reshape(ctx):
    data = ctx.static(0)
    target = reshape_target(data.shape, ctx.ints(1), ctx.attr("allowzero", 0))
    if any(is_symbolic(s) for s in target):
        raise NotFoldable()
    return [data.reshape(target)]


def _flatten_dims(dims, a):
    def prod(ds):
        p = to_expr(1)
        for d in ds:
            p = p * d
        return dim(p)
    return [prod(dims[:a]), prod(dims[a:])]


@register("Flatten")
def _flatten(ctx):
    dims = ctx.dims(0)
    a = ctx.attr("axis", 1)
    a = a + len(dims) if a < 0 else a
    return [ctx.t(0).reshape(_flatten_dims(dims, a))]


@set_fold("Flatten")
def _fold_flatten(ctx):
    data = ctx.static(0)
    a = ctx.attr("axis", 1)
    a = a + data.ndim if a < 0 else a
    return [data.reshape(_flatten_dims(data.shape, a))]


def _axes_arg(ctx, index: int = 1):
    """Axes from the attribute (older versions) or the optional input (newer versions)."""
    if ctx.has_attr("axes"):
        return ctx.attr_ints("axes")
    if ctx.has(index):
        return ctx.ints(index, "input 'axes'")
    return None


@register("Squeeze")
def _squeeze(ctx):
    dims = ctx.dims(0)
    axes = _axes_arg(ctx)
    if axes is None:
        axes = [k for k, d in enumerate(dims) if not is_symbolic(d) and d == 1]
    axes = axes_list(axes, len(dims))
    for a in axes:
        if not is_symbolic(dims[a]) and dims[a] != 1:
            raise OnnxImportError(f"Squeeze: axis {a} has size {dims[a]}, not 1")
    x = ctx.t(0)
    st = x.tracker
    for a in sorted(axes, reverse=True):
        st = st.squeeze(a)
    return [x._view(st)]


@set_fold("Squeeze")
def _fold_squeeze(ctx):
    data = ctx.static(0)
    axes = _axes_arg(ctx)
    axes = tuple(axes_list(axes, data.ndim)) if axes is not None else None
    return [np.squeeze(data, axes) if axes is None or axes else data]


@register("Unsqueeze")
def _unsqueeze(ctx):
    axes = _axes_arg(ctx)
    rank = ctx.rank(0) + len(axes)
    x = ctx.t(0)
    for a in sorted(axes_list(axes, rank)):
        x = x.unsqueeze(a)
    return [x]


@set_fold("Unsqueeze")
def _fold_unsqueeze(ctx):
    data = ctx.static(0)
    axes = _axes_arg(ctx)
    rank = data.ndim + len(axes)
    for a in sorted(axes_list(axes, rank)):
        data = np.expand_dims(data, a)
    return [data]


def _perm(ctx, rank):
    perm = ctx.attr_ints("perm")
    return list(range(rank - 1, -1, -1)) if perm is None else axes_list(perm, rank, "perm")


@register("Transpose", fold=lambda ctx: [np.transpose(ctx.static(0), _perm(ctx, ctx.static(0).ndim))])
def _transpose(ctx):
    return [ctx.t(0).permute(_perm(ctx, ctx.rank(0)))]


# ---------------------------------------------------------------------------------------------------- Concat, Split
@register("Concat")
def _concat(ctx):
    ts = [ctx.t(i) for i in range(len(ctx)) if ctx.has(i)]
    a = axis(ctx.attr("axis"), ts[0].ndim)
    return [concat(ts, a)]


@set_fold("Concat")
def _fold_concat(ctx):
    arrs = [ctx.static(i) for i in range(len(ctx)) if ctx.has(i)]
    a = axis(ctx.attr("axis"), arrs[0].ndim)
    if any(is_obj(x) for x in arrs):
        return [simplify_obj(np.concatenate([as_obj(x) for x in arrs], a))]
    return [np.concatenate(arrs, a)]


def _split_sizes(ctx, n_dim):
    n_out = ctx.n_outputs
    if ctx.has_attr("split"):
        return ctx.attr_ints("split")
    if ctx.has(1):
        return ctx.ints(1, "input 'split'")
    if is_symbolic(n_dim):
        raise OnnxImportError(f"Split of a symbolic dim {n_dim} needs explicit split sizes")
    num = ctx.attr("num_outputs", None)
    if num is not None:
        size = -(-n_dim // num)
        return [min(size, n_dim - size * k) for k in range(num)]
    if n_dim % n_out:
        raise OnnxImportError(f"Split: dim of size {n_dim} does not divide into {n_out} equal outputs")
    return [n_dim // n_out] * n_out


@register("Split")
def _split(ctx):
    x = ctx.t(0)
    a = axis(ctx.attr("axis", 0), x.ndim)
    sizes = _split_sizes(ctx, dim(x.dims[a]))
    out, start = [], to_expr(0)
    for s in sizes:
        out.append(x.slice_axis(a, start, start + s))
        start = start + s
    return out


@set_fold("Split")
def _fold_split(ctx):
    data = ctx.static(0)
    a = axis(ctx.attr("axis", 0), data.ndim)
    sizes = _split_sizes(ctx, data.shape[a])
    return list(np.split(data, np.cumsum(sizes)[:-1], axis=a))


# ---------------------------------------------------------------------------------------------------- Slice
def _clamp(v, lo, hi):
    return lo if v < lo else hi if v > hi else v


def slice_bounds(n, start, end, step, assume=None):
    """ONNX's clamped (start, end) for a dim of size ``n`` (int or Expression).

    ``start``/``end`` may be symbolic. Over a constant ``n`` a symbolic bound ``v`` (``position_ids[:, 0:seq]``
    over a 512-long table) is taken as ``v`` itself, not ``min(v, n)``, so that the slice has the length other
    values of the model have (``seq``): ``assume(v, n)`` records ``v <= n`` for the model to check at each call
    (without ``assume`` the clamp ``min(v, n)`` is kept)."""
    if not (is_symbolic(n) or is_symbolic(start) or is_symbolic(end)):
        if start < 0:
            start += n
        if end < 0:
            end += n
        if step > 0:
            return _clamp(start, 0, n), _clamp(end, 0, n)
        return _clamp(start, 0, n - 1), _clamp(end, -1, n - 1)
    if step < 0:
        raise OnnxImportError(f"Slice with a negative step over a symbolic dim or with symbolic bounds is not "
                              f"supported (dim {n}, starts {start}, ends {end})")
    def norm(v):
        if is_symbolic(v):
            if not is_symbolic(n) and assume is not None:
                if not nonneg(v):
                    raise OnnxImportError(f"Slice bound {v} over a dim of size {n} may be negative; only "
                                          "non-negative symbolic bounds are supported")
                assume(expr(v), int(n))
                return v
            return expr(v).min(n)
        if v >= BIG:
            return n
        if v < 0:
            return dim((expr(n) + v).max(0))
        return dim(expr(v).min(n))
    return norm(start), norm(end)


def _slice_args(ctx, dims):
    starts, ends = ctx.ints(1, "input 'starts'"), ctx.ints(2, "input 'ends'")
    axes = ctx.ints(3, "input 'axes'") if ctx.has(3) else list(range(len(starts)))
    steps = ctx.ints(4, "input 'steps'") if ctx.has(4) else [1] * len(starts)
    out = []
    for s, e, a, st in zip(starts, ends, axes_list(axes, len(dims)), steps):
        if is_symbolic(st) or st == 0:
            raise OnnxImportError(f"Slice: step must be a nonzero constant, got {st}")
        b, f = slice_bounds(dims[a], s, e, st, lambda v, n: ctx.importer.assume(v, n, ctx.describe()))
        out.append((a, b, f, st))
    return out


@register("Slice")
def _slice(ctx):
    x = ctx.t(0)
    st = x.tracker
    for a, b, e, step in _slice_args(ctx, ctx.dims(0)):
        st = st.slice(a, b, e, step)
    return [x._view(st)]


@set_fold("Slice")
def _fold_slice(ctx):
    data = ctx.static(0)
    index = [slice(None)] * data.ndim
    for a, b, e, step in _slice_args(ctx, data.shape):
        if is_symbolic(b) or is_symbolic(e):
            raise NotFoldable()  # a symbolic slice of a constant: a view built at run time
        index[a] = slice(b, e if e >= 0 else None, step)
    return [data[tuple(index)]]


# ---------------------------------------------------------------------------------------------------- Expand, Tile
def _expand_dims(in_dims, shape):
    rank = max(len(in_dims), len(shape))
    a = [1] * (rank - len(in_dims)) + list(in_dims)
    b = [1] * (rank - len(shape)) + list(shape)
    out = []
    for x, y in zip(a, b):
        if not is_symbolic(y) and y == 1:
            out.append(x)
        elif not is_symbolic(x) and x == 1:
            out.append(y)
        elif is_symbolic(x) or is_symbolic(y) or x == y:
            out.append(y if is_symbolic(x) and not is_symbolic(y) else x)
        else:
            raise OnnxImportError(f"Expand: cannot broadcast shape {list(in_dims)} to {list(shape)}")
    return out


@register("Expand")
def _expand(ctx):
    target = _expand_dims(ctx.dims(0), ctx.ints(1, "input 'shape'"))
    return [ctx.t(0).expand(target)]


@set_fold("Expand")
def _fold_expand(ctx):
    data = ctx.static(0)
    target = _expand_dims(data.shape, ctx.ints(1))
    if any(is_symbolic(s) for s in target):
        raise NotFoldable()
    return [np.array(np.broadcast_to(data, target))]


@register("Tile")
def _tile(ctx):
    reps = ctx.ints(1, "input 'repeats'")
    return [ctx.t(0).repeat(reps)]


@set_fold("Tile")
def _fold_tile(ctx):
    return [np.tile(ctx.static(0), ctx.ints(1))]


# ---------------------------------------------------------------------------------------------------- Pad
def _pad_pairs(ctx, rank):
    if ctx.has_attr("pads"):
        pads = ctx.attr_ints("pads")
    else:
        pads = ctx.ints(1, "input 'pads'")
    axes = ctx.ints(3, "input 'axes'") if ctx.has(3) else list(range(rank))
    axes = axes_list(axes, rank)
    if len(pads) != 2 * len(axes):
        raise OnnxImportError(f"Pad: {len(pads)} pad values for {len(axes)} axes")
    pairs = [(0, 0)] * rank
    for k, a in enumerate(axes):
        pairs[a] = (pads[k], pads[k + len(axes)])
    return pairs


def _pad_axis_mode(ctx, x, a, before, after, mode):
    n = x.dims[a]
    if not n.is_constant():
        raise OnnxImportError(f"Pad mode {mode} needs a concrete size along axis {a}")
    n = n.to_int()
    if before < 0:
        x, n, before = x.slice_axis(a, -before, n), n + before, 0
    if after < 0:
        x, n, after = x.slice_axis(a, 0, n + after), n + after, 0
    parts = []
    if mode == "edge":
        if before:
            parts.append(x.slice_axis(a, 0, 1).repeat([before if k == a else 1 for k in range(x.ndim)]))
        parts.append(x)
        if after:
            parts.append(x.slice_axis(a, n - 1, n).repeat([after if k == a else 1 for k in range(x.ndim)]))
    elif mode == "reflect":
        if n == 1:
            return _pad_axis_mode(ctx, x, a, before, after, "edge")
        idx = list(range(-before, n + after))
        period = 2 * (n - 1)
        src = [abs((i % period + period) % period) for i in idx]
        src = [period - s if s >= n else s for s in src]
        return x.index_select(a, ctx.array(np.array(src, dtype=np.int64)))
    elif mode == "wrap":
        src = [i % n for i in range(-before, n + after)]
        return x.index_select(a, ctx.array(np.array(src, dtype=np.int64)))
    else:
        raise OnnxImportError(f"Pad: unknown mode {mode!r}")
    return concat(parts, a)


@register("Pad")
def _pad(ctx):
    x = ctx.t(0)
    pairs = _pad_pairs(ctx, x.ndim)
    mode = ctx.attr("mode", "constant")
    if mode == "constant":
        if ctx.has(2) and ctx.is_static(2):
            value = ctx.scalar(2, "input 'constant_value'")
        elif ctx.has(2):
            value = ctx.t(2).cast(x.dtype).reshape(())
            padded = x.pad(pairs)
            inside = ctx.const(True, DType.bool, x.dims).pad(pairs)
            return [where(inside, padded, value)]
        else:
            value = 0
        return [x.pad(pairs, value) if value != 0 or x.dtype != DType.bool else x.pad(pairs)]
    for a, (b, e) in enumerate(pairs):
        if b == 0 and e == 0:
            continue
        x = _pad_axis_mode(ctx, x, a, b, e, mode)
    return [x]


# ---------------------------------------------------------------------------------------------------- Range
@register("Range")
def _range(ctx):
    start, limit, delta = (ctx.scalar(i, f"input '{n}'") for i, n in enumerate(("start", "limit", "delta")))
    t = ctx.type(0)
    if any(isinstance(v, Expression) for v in (start, limit, delta)):
        if isinstance(start, Expression) or isinstance(delta, Expression):
            raise OnnxImportError("Range: start and delta must be constants (limit may be symbolic)")
        return [typed(ctx.graph.arange(int(start), limit, int(delta), dtype=dtypes.luminal(t)), t)]
    return [_range_fold_value(start, limit, delta, t)]


def _range_fold_value(start, limit, delta, t):
    n = max(int(np.ceil((limit - start) / delta)), 0)
    dtype = dtypes.numpy(t)
    return typed((np.arange(n, dtype=np.float64) * delta + start).astype(dtype) if dtype.kind == "f" else
                 (np.arange(n, dtype=np.int64) * int(delta) + int(start)).astype(dtype), t)


@set_fold("Range")
def _fold_range(ctx):
    vals = [ctx.scalar(i) for i in range(3)]
    if any(isinstance(v, Expression) for v in vals):
        raise NotFoldable()
    return [_range_fold_value(*vals, ctx.type(0))]


# ---------------------------------------------------------------------------------------------------- depth/space
@register("DepthToSpace")
def _depth_to_space(ctx):
    x = ctx.t(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.dims
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape((n, b, b, c // (b * b), h, w)).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape((n, c // (b * b), b, b, h, w)).permute(0, 1, 4, 2, 5, 3)
    return [y.reshape((n, c // (b * b), h * b, w * b))]


@register("SpaceToDepth")
def _space_to_depth(ctx):
    x = ctx.t(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.dims
    y = x.reshape((n, c, h // b, b, w // b, b))
    y = y.permute(0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return [y.reshape((n, c * b * b, h // b, w // b))]


@register("CenterCropPad")
def _center_crop_pad(ctx):
    x = ctx.t(0)
    shape = ctx.ints(1, "input 'shape'")
    axes = axes_list(ctx.attr_ints("axes", list(range(x.ndim))), x.ndim)
    for a, target in zip(axes, shape):
        n = dim(x.dims[a])
        if is_symbolic(n) or is_symbolic(target):
            raise OnnxImportError("CenterCropPad needs concrete sizes")
        if target < n:
            start = (n - target) // 2
            x = x.slice_axis(a, start, start + target)
        elif target > n:
            before = (target - n) // 2
            x = x.pad_axis(a, before, target - n - before)
    return [x]

