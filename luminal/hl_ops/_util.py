"""Helpers shared by the high-level ops: axis normalization, broadcasting, scalar constants."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from .. import ops
from ..dtype import DType, promote_types, scalar_result_type, wrap_int
from ..graph import GraphError
from ..shape import Expression, ShapeTracker, to_expr

if TYPE_CHECKING:  # pragma: no cover
    from ..tensor import GraphTensor

Scalar = (int, float, bool, np.integer, np.floating, np.bool_)


def is_scalar(x) -> bool:
    return isinstance(x, Scalar)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{what} must be an int, got {axis!r}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"{what} {axis} is out of range for a tensor with {ndim} dims")
    return int(axis) % max(ndim, 1)


def normalize_axes(axes, ndim: int) -> tuple[int, ...]:
    """``None`` -> all axes; an int or a sequence -> sorted unique non-negative axes.

    A 0-d tensor has no axes to reduce, but accepts the axis 0 or -1 as PyTorch does (``torch.tensor(2.).sum(0)``
    is the tensor itself): that gives ``()``, so a reduction over it is the identity."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    out = sorted({normalize_axis(a, ndim) for a in axes})
    if ndim == 0:
        return ()
    if len(out) != len(tuple(axes)):
        raise ValueError(f"repeated axis in {tuple(axes)}")
    return tuple(out)


def broadcast_dims(*shapes: Sequence[Expression]) -> tuple[Expression, ...]:
    """PyTorch broadcasting of symbolic shapes; raises ``GraphError`` naming both shapes on a mismatch."""
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dim = None
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if dim is None or dim == 1:
                dim = d
            elif d != 1 and d != dim:
                raise GraphError("cannot broadcast shapes " + " and ".join(str([str(x) for x in s]) for s in shapes)
                                 + f": dim {k - ndim} is {dim} vs {d}")
        out.append(dim)
    return tuple(out)


def broadcast_view(shape: ShapeTracker, dims: Sequence[Expression]) -> ShapeTracker:
    """Expand a view to ``dims`` (new leading axes, size-1 axes broadcast)."""
    st = shape
    for _ in range(len(dims) - st.ndim):
        st = st.expand_dim(0, 1)
    for k, d in enumerate(dims):
        if st.dims[k] != d:
            st = st.expand(k, d)
    return st


def constant(graph, value, dtype: DType, dims: Iterable = ()) -> "GraphTensor":
    """A scalar ``Constant`` node seen (zero-copy) at ``dims``."""
    from ..tensor import GraphTensor

    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, Expression) and value.is_constant():
        value = value.to_int()
    if dtype.is_float and not isinstance(value, Expression):
        value = float(value)
    elif dtype == DType.bool and not isinstance(value, Expression):
        value = bool(value)
    elif dtype.is_int and not isinstance(value, Expression):
        value = wrap_int(value, dtype)  # an int scalar keeps the tensor's int type and wraps into it (PyTorch)
    node = graph.add_op(ops.Constant(value, dtype), (), (), dtype)
    dims = tuple(to_expr(d) for d in dims)
    return GraphTensor(graph, node, ShapeTracker.fake(dims), dtype)


def operand_dtype(tensor: "GraphTensor", other) -> DType:
    """Result dtype of ``tensor op other`` (other a tensor, Python scalar or Expression)."""
    from ..tensor import GraphTensor

    if isinstance(other, GraphTensor):
        return promote_types(tensor.dtype, other.dtype)
    if isinstance(other, (Expression, str)):
        return scalar_result_type(tensor.dtype, 0)
    if is_scalar(other):
        return scalar_result_type(tensor.dtype, other)
    raise TypeError(f"unsupported operand of type {type(other).__name__}: {other!r}")


def as_tensor(like: "GraphTensor", value, dtype: DType | None = None) -> "GraphTensor":
    """``value`` as a tensor in ``like``'s graph (scalars/Expressions become constants of ``dtype``)."""
    from ..tensor import GraphTensor

    if isinstance(value, GraphTensor):
        if value.graph is not like.graph:
            raise GraphError("operands belong to different graphs")
        return value if dtype is None else value.cast(dtype)
    if isinstance(value, str):
        value = to_expr(value)
    if isinstance(value, np.ndarray):
        raise TypeError("numpy arrays cannot be mixed into a graph directly; make an input with graph.tensor() "
                        "and set() it")
    return constant(like.graph, value, dtype or operand_dtype(like, value), ())


def binary_operands(a: "GraphTensor", b, dtype: DType | None = None):
    """Coerce ``b``, promote both to a common dtype, broadcast; returns ``(a, b, dims, dtype)``."""
    dtype = dtype or operand_dtype(a, b)
    b = as_tensor(a, b, dtype)
    a = a.cast(dtype)
    dims = broadcast_dims(a.dims, b.dims)
    return a._view(broadcast_view(a.tracker, dims)), b._view(broadcast_view(b.tracker, dims)), dims, dtype


def check_index_dtype(dtype: DType, what: str, error=TypeError) -> None:
    """Raise ``error`` unless ``dtype`` is an index type PyTorch accepts (int32 or int64). uint8 indices mean a
    boolean mask in PyTorch (deprecated there); they are refused with a message saying so."""
    if dtype in (DType.int32, DType.int64):
        return
    if dtype == DType.uint8:
        raise error(f"{what}: uint8 index tensors are not supported (PyTorch reads them as a boolean mask); "
                    "use a bool mask or cast the indices to int64")
    raise error(f"{what}: index must be int32/int64, got {dtype.value}")


def lazy_where(c, a, b):
    """``hl_ops.where(c, a, b)``, imported on first use (modules that ``binary`` itself imports use this)."""
    from .binary import where
    return where(c, a, b)
