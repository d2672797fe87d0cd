"""ATen operator handlers: the matmul family, movement (views, slices, joins) and gathers. Each builds a node's
value from the tensor API (registered with ``_reg``)."""

from __future__ import annotations

import torch

from ....dtype import DType
from ....hl_ops.binary import where
from ....hl_ops.movement import concat, stack
from ....shape import Expression, to_expr
from .elementwise import _out_dtype
from .._core import TorchImportError, _ax, _int, _is_t, _NeedsDecomposition, _reg, _size


# --- matmul family
@_reg("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(cv, node, a, b):
    return a @ b


@_reg("aten.dot.default", "aten.mv.default", "aten.vdot.default")
def _dot(cv, node, a, b):
    return a @ b


@_reg("aten.addmm.default", "aten.baddbmm.default", "aten.addmv.default")
def _addmm(cv, node, c, a, b, beta=1, alpha=1):
    y = a @ b
    if alpha != 1:
        y = y * alpha
    if beta == 0:
        return y
    return y + (c * beta if beta != 1 else c)


@_reg("aten.linear.default")
def _linear(cv, node, x, w, b=None):
    y = x @ w.permute(1, 0) if w.ndim == 2 else x @ w
    return y + b if b is not None else y


@_reg("aten.t.default", "aten.numpy_T.default")
def _t(cv, node, x):
    return x.permute(1, 0) if x.ndim == 2 else x


@_reg("aten.einsum.default")
def _decompose_me(cv, node, *a, **k):
    # PyTorch's decompositions lower these to permutes, broadcasts and bmm
    raise _NeedsDecomposition(str(node.target), f"{node.target} is imported through its decomposition")


# --- movement
def _shape_arg(x, size):
    size = [_size(s) for s in size]
    return tuple(size)


@_reg("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.view_copy.default",
      "aten._reshape_alias.default")
def _view(cv, node, x, size, *a):
    size = _shape_arg(x, size)
    want = cv.meta_dims(node)
    if want is not None and len(want) == len(size):
        size = tuple(_size(to_expr(w)) for w in want)  # torch's sizes: no -1 left to infer symbolically
    if tuple(to_expr(s) for s in size if not (isinstance(s, int) and s == -1)) == tuple(x.dims) and \
            -1 not in size:
        return x
    return x.reshape(size)


@_reg("aten.view.dtype")
def _view_dtype(cv, node, x, dtype):
    """``x.view(torch.int32)``: the bits reinterpreted (``GraphTensor.view(dtype)``; another width resizes the last
    dim, as torch does)."""
    return x.view(dtype)


@_reg("aten.view_as.default", "aten.reshape_as.default")
def _view_as(cv, node, x, other):
    return x.reshape(other.dims)


@_reg("aten.permute.default", "aten.permute_copy.default")
def _permute(cv, node, x, dims):
    return x.permute([_ax(d, x.ndim) for d in dims])


@_reg("aten.transpose.int", "aten.swapaxes.default", "aten.transpose_copy.int")
def _transpose(cv, node, x, d0, d1):
    if x.ndim < 2:
        return x
    order = list(range(x.ndim))
    d0, d1 = _ax(d0, x.ndim), _ax(d1, x.ndim)
    order[d0], order[d1] = order[d1], order[d0]
    return x.permute(order)


@_reg("aten.expand.default", "aten.expand_copy.default")
def _expand(cv, node, x, size, implicit=False):
    size = _shape_arg(x, size)
    if tuple(to_expr(s) for s in size) == tuple(x.dims):
        return x
    return x.expand(size)


@_reg("aten.expand_as.default")
def _expand_as(cv, node, x, other):
    return x.expand(other.dims)


@_reg("aten.unsqueeze.default", "aten.unsqueeze_copy.default")
def _unsqueeze(cv, node, x, d):
    return x.unsqueeze(_ax(d, x.ndim + 1))


@_reg("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.squeeze_copy.dims")
def _squeeze(cv, node, x, dims=None):
    if dims is None:
        return x.squeeze()
    axes = [_ax(d, x.ndim) for d in ([dims] if isinstance(dims, int) else dims)]
    axes = [a for a in axes if x.ndim and to_expr(x.dims[a]) == to_expr(1)]
    return x.squeeze(tuple(axes)) if axes else x


@_reg("aten.flatten.using_ints")
def _flatten(cv, node, x, start=0, end=-1):
    if x.ndim == 0:
        return x.reshape((1,))
    s, e = _ax(start, x.ndim), _ax(end, x.ndim)
    if s == e:
        return x
    n = x.dims[s]
    for d in x.dims[s + 1:e + 1]:
        n = n * d
    return x.reshape(tuple(x.dims[:s]) + (n,) + tuple(x.dims[e + 1:]))


@_reg("aten.unflatten.int")
def _unflatten(cv, node, x, d, sizes):
    d = _ax(d, x.ndim)
    sizes = list(sizes)
    return x.reshape(tuple(x.dims[:d]) + tuple(sizes) + tuple(x.dims[d + 1:]))


_BIG = 1 << 60


@_reg("aten.slice.Tensor", "aten.slice_copy.Tensor")
def _slice(cv, node, x, dim=0, start=None, end=None, step=1):
    dim = _ax(dim, x.ndim)
    if isinstance(end, int) and end >= _BIG:
        end = None
    if isinstance(start, int) and start <= -_BIG:
        start = None
    if (start in (None, 0)) and end is None and step == 1:
        return x
    n = x.dims[dim]
    if end is not None and isinstance(end, (int, Expression)) and to_expr(end) == to_expr(n):
        end = None
    if start == 0:
        start = None
    y = x.slice_axis(dim, start if start is not None else 0, end, step)
    want = cv.meta_dims(node)
    if want is not None and step == 1 and to_expr(y.dims[dim]) != to_expr(want[dim]):
        # torch knows more about the symbols' ranges (``seq <= 60`` from the Dim's max) than luminal: slicing a
        # 64-long buffer to ``seq`` gives ``min(64, seq)`` here. Crop to torch's size with a (negative) pad.
        s = 0 if start is None else start
        if isinstance(s, int) and s < 0:
            s = n + s
        e = n if end is None else end
        if isinstance(e, int) and e < 0:
            e = n + e
        if to_expr(e) - to_expr(s) == to_expr(want[dim]):
            y = _crop(x, dim, s, e)
    return y


def _crop(x, dim, start, end):
    """``x[start:end]`` along ``dim`` with exactly ``end - start`` entries (``0 <= start <= end <= n`` assumed,
    as torch proved at export): a view with negative pads, no ``min``/``max`` clamping of symbolic sizes."""
    n = x.dims[dim]
    return x._view(x.tracker.pad(dim, -to_expr(start), to_expr(end) - to_expr(n)))


@_reg("aten.select.int", "aten.select_copy.int")
def _select(cv, node, x, dim, index):
    dim = _ax(dim, x.ndim)
    if isinstance(index, int) and index < 0:
        index = x.dims[dim] + index
    return _crop(x, dim, index, to_expr(index) + 1).squeeze(dim)


@_reg("aten.narrow.default")
def _narrow(cv, node, x, dim, start, length):
    dim = _ax(dim, x.ndim)
    return x.slice_axis(dim, start, start + length)


@_reg("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def _cat(cv, node, tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and to_expr(t.dims[0]) == to_expr(0))]
    want = _out_dtype(node)
    tensors = [t.cast(want) if want is not None and t.dtype != want else t for t in tensors]
    if len(tensors) == 1:
        return tensors[0]
    return concat(tensors, _ax(dim, tensors[0].ndim))


@_reg("aten.stack.default")
def _stack(cv, node, tensors, dim=0):
    return stack(list(tensors), _ax(dim, tensors[0].ndim + 1))


@_reg("aten.split.Tensor", "aten.split_with_sizes.default", "aten.split_with_sizes_copy.default",
      "aten.split_copy.Tensor")
def _split(cv, node, x, split_size, dim=0):
    dim = _ax(dim, x.ndim)
    n = x.dims[dim]
    if isinstance(split_size, (list, tuple)):
        sizes = list(split_size)
    else:
        total = _int(n, "split: the split axis")
        step = _int(split_size)
        sizes = [min(step, total - s) for s in range(0, total, step)]
    out, start = [], 0
    for s in sizes:
        out.append(x.slice_axis(dim, start, start + s))
        start = start + s
    return out


@_reg("aten.chunk.default")
def _chunk(cv, node, x, chunks, dim=0):
    dim = _ax(dim, x.ndim)
    n = _int(x.dims[dim], "chunk axis")
    step = -(-n // chunks)
    return _split(cv, node, x, step, dim)


@_reg("aten.unbind.int")
def _unbind(cv, node, x, dim=0):
    dim = _ax(dim, x.ndim)
    n = _int(x.dims[dim], "unbind axis")
    return [x.slice_axis(dim, i, i + 1).squeeze(dim) for i in range(n)]


@_reg("aten.flip.default")
def _flip(cv, node, x, dims):
    return x.flip(tuple(_ax(d, x.ndim) for d in dims))


@_reg("aten.roll.default")
def _roll(cv, node, x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        flat = x.reshape((-1,))
        return flat.roll(shifts[0], 0).reshape(x.dims)
    for s, d in zip(shifts, dims):
        x = x.roll(s, _ax(d, x.ndim))
    return x


@_reg("aten.repeat.default")
def _repeat(cv, node, x, repeats):
    repeats = list(repeats)
    while x.ndim < len(repeats):
        x = x.unsqueeze(0)
    return x.repeat(tuple(repeats))


@_reg("aten.tile.default")
def _tile(cv, node, x, dims):
    dims = list(dims)
    dims = [1] * (x.ndim - len(dims)) + dims
    return _repeat(cv, node, x, dims)


@_reg("aten.repeat_interleave.self_int")
def _repeat_interleave(cv, node, x, repeats, dim=None, output_size=None):
    if dim is None:
        x, dim = x.reshape((-1,)), 0
    dim = _ax(dim, x.ndim)
    y = x.unsqueeze(dim + 1)
    dims = list(y.dims)
    dims[dim + 1] = repeats
    y = y.expand(tuple(dims))
    return y.reshape(tuple(x.dims[:dim]) + (x.dims[dim] * repeats,) + tuple(x.dims[dim + 1:]))


@_reg("aten.constant_pad_nd.default", "aten.pad.default")
def _pad(cv, node, x, pad, *a, **k):
    mode = a[0] if a else k.get("mode", "constant")
    value = (a[1] if len(a) > 1 else k.get("value", 0.0)) if node.target is torch.ops.aten.pad.default else \
        (a[0] if a else k.get("value", 0.0))
    if node.target is torch.ops.aten.pad.default and mode != "constant":
        raise TorchImportError(f"pad mode {mode!r} is not supported (constant only)")
    if value is None:
        value = 0.0
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return x.pad(pairs, value) if value != 0 else x.pad(pairs)


@_reg("aten.tril.default", "aten.triu.default")
def _tri(cv, node, x, diagonal=0):
    return x.tril(diagonal) if "tril" in str(node.target) else x.triu(diagonal)


@_reg("aten.diff.default")
def _diff(cv, node, x, n=1, dim=-1, prepend=None, append=None):
    return x.diff(n, _ax(dim, x.ndim), prepend, append)


# --- gathers
def _norm_index(idx, n):
    """Negative indices count from the end (as torch)."""
    if not _is_t(idx):
        return idx
    if idx.dtype == DType.bool:
        raise TorchImportError("boolean mask indexing has a data-dependent shape; not supported")
    return where(idx < 0, idx + n, idx)


@_reg("aten.embedding.default")
def _embedding(cv, node, weight, indices, padding_idx=-1, scale_grad=False, sparse=False):
    from ....nn.sparse import embedding
    # (aten's -1 is "none": F.embedding passes a negative padding_idx already made positive)
    return embedding(indices, weight, padding_idx if padding_idx is not None and padding_idx >= 0 else None)


@_reg("aten.index_select.default")
def _index_select(cv, node, x, dim, index):
    dim = _ax(dim, x.ndim)
    return x.index_select(dim, _norm_index(index, x.dims[dim]))


@_reg("aten.gather.default")
def _gather(cv, node, x, dim, index, sparse_grad=False):
    dim = _ax(dim, x.ndim)
    if tuple(index.dims) != tuple(x.dims):
        # torch.gather: index may be smaller than x along the non-gathered axes
        for k, (di, dx) in enumerate(zip(index.dims, x.dims)):
            if k != dim and to_expr(di) != to_expr(dx):
                x = x.slice_axis(k, 0, di)
    return x.gather(dim, _norm_index(index, x.dims[dim]))


@_reg("aten.index_put.default")
def _index_put(cv, node, x, indices, values, accumulate=False):
    """``x[i0, i1, ...] = values`` (``accumulate=True``: ``+=``) with integer index tensors (None = a full slice),
    functionally. Assignment goes through luminal's ``setitem`` (torch's semantics, the last of repeated
    positions wins); accumulation is supported for one 1-D index tensor, as ``index_add`` (a ScatterAdd)."""
    from ....hl_ops.subscript import setitem

    indices = list(indices)
    for i in indices:
        if i is not None and _is_t(i) and i.dtype == DType.bool:
            raise TorchImportError("index_put with a boolean mask has a data-dependent shape; not supported")
    if not _is_t(values):
        values = x.graph.constant(values, x.dtype)
    values = values.cast(x.dtype) if values.dtype != x.dtype else values
    if not accumulate:
        return setitem(x, tuple(slice(None) if i is None else _norm_index(i, x.dims[k])
                                for k, i in enumerate(indices)), values)
    pos = [k for k, i in enumerate(indices) if i is not None]
    if len(pos) != 1 or indices[pos[0]].ndim != 1:
        raise TorchImportError("index_put with accumulate=True: only one 1-D integer index tensor (the other "
                               "dims full slices) is supported; rewrite it as index_add or scatter_add")
    d = pos[0]
    idx = _norm_index(indices[d], x.dims[d])
    want = tuple(idx.dims[0] if k == d else dd for k, dd in enumerate(x.dims))
    while values.ndim < len(want):
        values = values.unsqueeze(0)
    return x.index_add(d, idx, values.expand(want))


@_reg("aten.index.Tensor")
def _index(cv, node, x, indices):
    """Advanced indexing ``x[i0, i1, ...]`` with integer index tensors (None = a full slice)."""
    indices = list(indices) + [None] * (x.ndim - len(indices))
    pos = [k for k, i in enumerate(indices) if i is not None]
    if not pos:
        return x
    for k in pos:
        if indices[k].dtype == DType.bool:
            raise TorchImportError("boolean mask indexing has a data-dependent shape; not supported")
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    if not adjacent:
        # torch puts the broadcast index dims first: move the indexed axes to the front
        order = pos + [k for k in range(x.ndim) if k not in pos]
        x = x.permute(order)
        indices = [indices[k] for k in pos] + [None] * (x.ndim - len(pos))
        pos = list(range(len(pos)))
    first = pos[0]
    idx = [_norm_index(indices[k], x.dims[k]) for k in pos]
    # broadcast the index tensors against each other
    bdims = idx[0].dims
    for t in idx[1:]:
        if tuple(t.dims) != tuple(bdims):
            rank = max(len(bdims), t.ndim)
            a = (1,) * (rank - len(bdims)) + tuple(bdims)
            b = (1,) * (rank - t.ndim) + tuple(t.dims)
            bdims = tuple(bb if to_expr(aa) == to_expr(1) else aa for aa, bb in zip(a, b))
    idx = [t.expand(bdims) if tuple(t.dims) != tuple(bdims) else t for t in idx]
    if len(pos) == 1:
        return x.index_select(first, idx[0])
    # flatten the indexed axes and build the linear index
    lin = None
    stride = 1
    for k, t in zip(reversed(pos), reversed(idx)):
        t = t.cast(DType.int64)
        term = t * stride if not (isinstance(stride, int) and stride == 1) else t
        lin = term if lin is None else lin + term
        stride = x.dims[k] * stride
    merged = x.dims[first]
    for k in pos[1:]:
        merged = merged * x.dims[k]
    flat = x.reshape(tuple(x.dims[:first]) + (merged,) + tuple(x.dims[pos[-1] + 1:]))
    return flat.index_select(first, lin)
