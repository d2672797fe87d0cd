"""Helpers shared by the operator handlers: axes, symbolic comparisons, numpy folding over Expressions."""

from __future__ import annotations

import numpy as np

from ...dtype import DType
from ...shape import Expression, to_expr
from ..errors import OnnxImportError
from ..registry import NotFoldable, dim


def axis(a: int, rank: int, what: str = "axis") -> int:
    """Normalize a possibly negative axis, with ONNX's range ``[-rank, rank - 1]``."""
    a = int(a)
    if not -rank <= a < max(rank, 1):
        raise OnnxImportError(f"{what} {a} is out of range for a tensor of rank {rank}")
    return a % max(rank, 1)


def axes_list(values, rank: int, what: str = "axes") -> list[int]:
    out = [axis(a, rank, what) for a in values]
    if len(set(out)) != len(out):
        raise OnnxImportError(f"{what} {list(values)} repeats an axis")
    return out


def expr(x) -> Expression:
    return to_expr(int(x) if isinstance(x, (np.integer, bool, np.bool_)) else x)


def is_obj(arr) -> bool:
    return isinstance(arr, np.ndarray) and arr.dtype == object


def as_obj(arr) -> np.ndarray:
    """An array of Python ints / Expressions (for symbolic shape arithmetic)."""
    arr = np.asarray(arr)
    if arr.dtype == object:
        return arr
    out = np.empty(arr.shape, dtype=object)
    out.reshape(-1)[:] = [int(x) for x in arr.reshape(-1)]
    return out


def simplify_obj(arr: np.ndarray) -> np.ndarray:
    """Object array -> int64 array when every element is a known integer (bool array when every element is a
    bool); elements stay Expressions otherwise."""
    if arr.dtype != object:
        return arr
    flat = [dim(x) if isinstance(x, Expression) else x for x in arr.reshape(-1)]
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in flat):
        return np.array(flat, dtype=np.int64).reshape(arr.shape)
    if flat and all(isinstance(x, (bool, np.bool_)) for x in flat):  # decided comparisons of symbolic dims
        return np.array(flat, dtype=np.bool_).reshape(arr.shape)
    out = np.empty(arr.shape, dtype=object)
    out.reshape(-1)[:] = flat
    return out


def compare(a, b) -> int:
    """Sign of ``a - b`` for ints/Expressions: -1, 0 or 1; raises ``NotFoldable`` when it cannot be decided."""
    d = expr(a) - expr(b)
    if d.is_constant():
        v = d.to_int()
        return (v > 0) - (v < 0)
    lo, hi = d.bounds()
    if lo is not None and lo > 0:
        return 1
    if hi is not None and hi < 0:
        return -1
    raise NotFoldable(f"cannot compare {a} and {b} at import time")


def obj_map(fn, *arrays) -> np.ndarray:
    """Apply ``fn`` elementwise over broadcast object arrays."""
    arrays = np.broadcast_arrays(*[as_obj(a) for a in arrays])
    out = np.empty(arrays[0].shape, dtype=object)
    flat = [a.reshape(-1) for a in arrays]
    out.reshape(-1)[:] = [fn(*xs) for xs in zip(*flat)] if out.size else []
    return simplify_obj(out)


def nonneg(x) -> bool:
    if isinstance(x, (int, np.integer)):
        return x >= 0
    lo, _ = expr(x).bounds()
    return lo is not None and lo >= 0


def float_dtype_of(t) -> DType:
    return t.dtype if t.dtype.is_float else DType.float32


def unflatten_index(flat, dims):
    """Row-major coordinates of flat indices (a tensor) over concrete ``dims``."""
    coords = []
    for d in reversed(dims):
        coords.append(flat.remainder(d))
        flat = flat.floor_divide(d)
    return coords[::-1]
