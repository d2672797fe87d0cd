"""Host data going into a graph: shape arguments and input data checked and converted to a tensor's dtype."""

from __future__ import annotations

import numpy as np

from .dtype import BFLOAT16_NUMPY, DType, to_host
from .shape import Expression, to_expr


def normalize_shape(shape) -> tuple[Expression, ...]:
    """A shape argument (an int, a symbol name, an ``Expression`` or a tuple of them) as a tuple of dims."""
    if isinstance(shape, (int, np.integer, str, Expression)):
        shape = (shape,)
    try:
        dims = tuple(to_expr(d) for d in shape)
    except TypeError as err:
        raise TypeError(f"a shape must be an int, a symbol name or a tuple of them; got {shape!r} ({err})") from None
    for d in dims:
        if d.is_constant() and d.to_int() < 0:
            raise ValueError(f"negative dimension in shape {shape!r}")
    return dims


def coerce_data(data, dtype: DType, label: str) -> np.ndarray:
    """Convert host data to a contiguous array of ``dtype``; refuses lossy kind changes (float -> int...).

    Integer data must fit the tensor's integer type: a value outside its range (``2**40`` for an int32
    tensor, from an array or a Python list) raises ``OverflowError`` naming the tensor, the value and the range
    instead of wrapping. Float data into a narrower float type is an ordinary cast (as in PyTorch)."""
    arr = np.asarray(data)
    if arr.dtype.kind == "f" and dtype.is_int and not isinstance(data, np.ndarray) and not np.isscalar(data):
        # numpy turns a list mixing ints beyond int64 (uint64 values) with others into float64: keep the ints
        obj = np.asarray(data, dtype=object)
        if obj.size and all(isinstance(v, (int, np.integer)) for v in obj.flat):
            arr = obj
    if arr.dtype == object and arr.size and all(isinstance(v, (int, np.integer)) for v in arr.flat):
        if dtype.is_float:  # Python ints beyond int64 are still numbers for a float tensor
            arr = np.array(arr.tolist(), dtype=dtype.numpy)
        elif dtype == DType.bool:
            arr = np.asarray(arr != 0, dtype=bool)
        else:
            _check_int_range(arr, dtype, label)
            arr = np.array(arr.tolist(), dtype=dtype.numpy)
    if arr.dtype == BFLOAT16_NUMPY or (dtype == DType.bfloat16 and arr.dtype != object and arr.dtype.kind in "biuf"):
        # ml_dtypes.bfloat16 data, or numeric data for a bfloat16 tensor: through float32, rounded to nearest even
        if arr.dtype == BFLOAT16_NUMPY and not dtype.is_float:
            raise TypeError(f"data for '{label}' has dtype bfloat16 but the tensor is {dtype}; bfloat16 -> "
                            f"{dtype.numpy} would lose information (cast explicitly)")
        arr = to_host(arr, dtype)
        return arr if arr.flags.c_contiguous else arr.copy()
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise TypeError(f"data for '{label}' must be numeric, got an array of {arr.dtype}")
    target = dtype.numpy
    if arr.dtype != target:
        from_python = not isinstance(data, np.ndarray) and not np.isscalar(data) or isinstance(data, (int, float, bool))
        if not from_python and not np.can_cast(arr.dtype, target, casting="same_kind"):
            raise TypeError(f"data for '{label}' has dtype {arr.dtype} but the tensor is {dtype}; "
                            f"{arr.dtype} -> {target} would lose information (cast explicitly)")
        if from_python and arr.dtype.kind == "f" and target.kind in "biu":
            bad = arr[~np.isfinite(arr) | (arr != np.round(arr))] if arr.size else arr
            if bad.size:
                raise TypeError(f"data for '{label}' has the non-integer value {bad.flat[0]!r} but the tensor is "
                                f"{dtype} (expected whole numbers)")
        if target.kind in "iu" and arr.dtype.kind in "iuf":
            _check_int_range(arr, dtype, label)
        with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf, as in PyTorch
            arr = arr.astype(target)
    return arr if arr.flags.c_contiguous else arr.copy()


def _check_int_range(arr: np.ndarray, dtype: DType, label: str) -> None:
    """Raise ``OverflowError`` when ``arr`` holds a value outside the range of the integer ``dtype``."""
    info = np.iinfo(dtype.numpy)
    if arr.dtype.kind in "iu" and np.iinfo(arr.dtype).min >= info.min and np.iinfo(arr.dtype).max <= info.max:
        return  # every value of arr's type fits
    if arr.dtype == object:
        bad = [int(v) for v in arr.flat if not info.min <= v <= info.max]
    elif arr.dtype.kind == "f":  # against 2**bits exactly: float(2**63 - 1) rounds up to 2**63, which must fail
        top = float(info.max + 1)
        bad = arr[(arr < info.min) | (arr >= top)].tolist() if arr.size and (
            arr.min() < info.min or arr.max() >= top) else []
    elif arr.size and (arr.min() < info.min or arr.max() > info.max):  # (two passes, no temporaries)
        bad = arr[(arr < info.min) | (arr > info.max)].tolist()
    else:
        bad = []
    if bad:
        value = bad[0] if arr.dtype.kind != "f" else int(bad[0])
        raise OverflowError(f"data for '{label}' holds the value {value}, outside the range of {dtype} "
                            f"[{info.min}, {info.max}]; it would wrap around (use a wider dtype or fix the data)")
