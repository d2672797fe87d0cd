"""Creation functions of eager tensors (``lm.tensor``, ``lm.zeros``, ``lm.randn``...), PyTorch's signatures.

Random tensors come from :data:`luminal.rng.default_generator` (seeded by ``lm.manual_seed``) or a
``generator=`` (an ``lm.Generator``): reproducible within luminal, not PyTorch's numbers (see ``luminal/rng.py``).
"""

from __future__ import annotations

import numpy as np

from ..dtype import DType, as_dtype
from . import _core
from .tensor import Tensor

__all__ = ["tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "arange", "linspace", "eye",
           "rand", "randn", "randint", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
           "randn_like", "manual_seed", "randperm", "normal", "bernoulli"]

from ..rng import draw as _draw
from ..rng import manual_seed  # noqa: F401  (lm.manual_seed: luminal/rng.py)


def _dtype_or(dtype, default: DType) -> DType:
    return default if dtype is None else as_dtype(dtype)


def _as_array(data, dtype=None) -> np.ndarray:
    """Host data as a fresh contiguous array with PyTorch's default dtypes (float32 for Python floats, int64
    for Python ints)."""
    if isinstance(data, Tensor):
        arr = np.array(data.numpy())
    elif hasattr(data, "detach") and hasattr(data, "cpu") and hasattr(data, "numpy"):  # a torch tensor
        t = data.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":  # (numpy has no bfloat16: the bits, seen as ml_dtypes' bfloat16)
            import torch
            arr = np.array(t.view(torch.int16).numpy().view(DType.bfloat16.numpy))
        else:
            arr = np.array(t.numpy())
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _walk(data)):
            data = _nested_numpy(data)
        python = not isinstance(data, (np.ndarray, np.generic))
        try:
            arr = np.array(data)
        except ValueError as err:
            raise ValueError(f"lm.tensor: could not make an array of the data ({err}); nested lists must be "
                             "rectangular") from None
        if arr.dtype == object or arr.dtype.kind not in "biuf" and arr.dtype != DType.bfloat16.numpy:
            raise TypeError(f"lm.tensor: data must be numbers (or nested lists of them), got {arr.dtype} data")
        if python and dtype is None:
            arr = arr.astype({"f": np.float32, "i": np.int64, "u": np.int64, "b": np.bool_}[arr.dtype.kind])
    if dtype is not None:
        target = as_dtype(dtype).numpy
        arr = arr.astype(target)
    else:
        try:
            as_dtype(arr.dtype)
        except TypeError:
            arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float32)
    return np.ascontiguousarray(arr) if arr.ndim else arr


def _walk(seq):
    for x in seq:
        if isinstance(x, (list, tuple)):
            yield from _walk(x)
        else:
            yield x


def _nested_numpy(seq):
    return [(_nested_numpy(x) if isinstance(x, (list, tuple)) else (x.numpy() if isinstance(x, Tensor) else x))
            for x in seq]


def _make(arr: np.ndarray, requires_grad: bool = False) -> Tensor:
    t = Tensor._make(_core._leaf(arr))
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor holding a copy of ``data`` (a nested list, a number, a numpy array or a tensor).

    Python floats give float32, Python ints int64, bools bool (PyTorch's defaults); numpy arrays keep their
    dtype. ``dtype`` converts."""
    return _make(_as_array(data, dtype), requires_grad)


def as_tensor(data, dtype=None) -> Tensor:
    """Like :func:`tensor`, but a tensor of the right dtype is returned as is."""
    if isinstance(data, Tensor) and (dtype is None or as_dtype(dtype) == data.dtype):
        return data
    return tensor(data, dtype)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory (as ``torch.from_numpy``; changes to the array are seen at the next
    run). The array must be C-contiguous with a supported dtype."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    try:
        dt = _core._np_dtype(array.dtype)
    except TypeError:
        raise TypeError(f"from_numpy: unsupported dtype {array.dtype}; expected bool, int32, int64, float16, "
                        "float32 or float64") from None
    if not array.flags.c_contiguous:
        raise ValueError("from_numpy needs a C-contiguous array (use np.ascontiguousarray)")
    return Tensor._make(_core._Val(array.shape, dt, array))


def _shape(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        out = tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"a size must be ints (or one tuple of ints), got {size!r}") from None
    if any(s < 0 for s in out) or any(isinstance(s, bool) for s in size):
        raise ValueError(f"negative dimension in size {out}")
    return out


def zeros(*size, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    return _make(np.zeros(_shape(size), _dtype_or(dtype, DType.float32).numpy), requires_grad)


def ones(*size, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones."""
    return _make(np.ones(_shape(size), _dtype_or(dtype, DType.float32).numpy), requires_grad)


def empty(*size, dtype=None, requires_grad: bool = False) -> Tensor:
    """An uninitialized tensor (zeros here)."""
    return zeros(*size, dtype=dtype, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``fill_value`` (float32 for a float, int64 for an int, bool for a bool, as in PyTorch)."""
    if dtype is None:
        dtype = DType.bool if isinstance(fill_value, (bool, np.bool_)) else (
            DType.int64 if isinstance(fill_value, (int, np.integer)) else DType.float32)
    size = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    return _make(np.full(_shape(size), fill_value, as_dtype(dtype).numpy), requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad: bool = False) -> Tensor:
    """``torch.arange``: int64 for integer arguments, float32 otherwise."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dt = _dtype_or(dtype, DType.int64 if ints else DType.float32)
    if ints:
        arr = np.arange(start, end, step, dtype=np.int64)
    else:
        n = max(0, int(np.ceil((end - start) / step)))
        arr = start + np.arange(n, dtype=np.float64) * step
    return _make(arr.astype(dt.numpy), requires_grad)


def linspace(start, end, steps: int, dtype=None, requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    return _make(np.linspace(start, end, int(steps)).astype(_dtype_or(dtype, DType.float32).numpy), requires_grad)


def logspace(start, end, steps: int, base: float = 10.0, dtype=None, requires_grad: bool = False) -> Tensor:
    """``base ** linspace(start, end, steps)`` (``torch.logspace``), in float64 then rounded once to ``dtype``
    (integer dtypes: rounded to the nearest integer)."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"logspace: steps must be a non-negative int, got {steps!r}")
    out = np.power(np.float64(base), np.linspace(start, end, int(steps)))
    dt = _dtype_or(dtype, DType.float32)
    return _make((out if dt.is_float else np.round(out)).astype(dt.numpy), requires_grad)


def eye(n: int, m: int | None = None, dtype=None, requires_grad: bool = False) -> Tensor:
    """The identity matrix (``n`` x ``m``)."""
    return _make(np.eye(n, n if m is None else m, dtype=_dtype_or(dtype, DType.float32).numpy), requires_grad)


def _float_dtype(dtype, fn):
    dt = _dtype_or(dtype, DType.float32)
    if not dt.is_float:
        raise TypeError(f"{fn}: dtype must be a floating type, got {dt}")
    return dt


def rand(*size, generator=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) samples from ``generator`` (default: ``lm.manual_seed``'s generator)."""
    dt = _float_dtype(dtype, "rand")
    return _make(_draw(generator, "random", _shape(size)).astype(dt.numpy), requires_grad)


def randn(*size, generator=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from ``generator`` (default: ``lm.manual_seed``'s generator)."""
    dt = _float_dtype(dtype, "randn")
    return _make(_draw(generator, "standard_normal", _shape(size)).astype(dt.numpy), requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Integers uniform in ``[low, high)``: ``randint(10, (3,))`` or ``randint(2, 10, (3,))`` (int64)."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint needs a size: randint(high, size) or randint(low, high, size)")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    size = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    dt = _dtype_or(dtype, DType.int64)
    return _make(_draw(generator, "integers", low, high, _shape(size)).astype(dt.numpy), requires_grad)


def randperm(n: int, *, generator=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """``torch.randperm``: a random permutation of ``0..n-1`` (int64)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise RuntimeError(f"randperm: n must be a non-negative int, got {n!r}")
    return _make(_draw(generator, "permutation", int(n)).astype(_dtype_or(dtype, DType.int64).numpy), requires_grad)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """``torch.normal``: samples of ``N(mean, std**2)``; ``mean`` and ``std`` tensors (broadcast together) or
    floats, then ``size`` is required. The result carries no gradient history (as torch's has none for the
    draw)."""
    mean_t, std_t = isinstance(mean, (Tensor, np.ndarray)), isinstance(std, (Tensor, np.ndarray))
    if not mean_t and not std_t:
        if size is None:
            raise TypeError("normal(mean: float, std: float) needs size=")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        dt = _float_dtype(dtype, "normal")
        arr = float(mean) + float(std) * _draw(generator, "standard_normal", _shape(size if isinstance(
            size, (tuple, list)) else (size,)))
        return _make(arr.astype(dt.numpy), requires_grad)
    if size is not None:
        raise TypeError("normal: size= is only for float mean and std")
    shapes = [np.shape(v) if isinstance(v, np.ndarray) else v.shape for v in (mean, std) if isinstance(
        v, (Tensor, np.ndarray))]
    shape = np.broadcast_shapes(*shapes)
    like = mean if mean_t else std
    dt = as_dtype(like.dtype) if dtype is None else as_dtype(dtype)
    z = _make(_draw(generator, "standard_normal", shape).astype(dt.numpy), False)
    with _core.no_grad():
        out = (z * std + mean).cast(dt)
    return out.requires_grad_(True) if requires_grad else out


def bernoulli(input, p=None, *, generator=None) -> Tensor:  # noqa: A002 - torch's argument name
    """``torch.bernoulli``: 1 with probability ``input`` (or ``p``), elementwise, in ``input``'s dtype; no gradient.
    The uniform numbers are drawn now, the comparison is recorded (``input`` is not read here)."""
    t = input if isinstance(input, Tensor) else tensor(input)
    if not t.dtype.is_float:
        raise RuntimeError(f"bernoulli: expected a floating point tensor of probabilities, got {t.dtype}")
    u = _make(_draw(generator, "random", t.shape).astype(t.dtype.numpy), False)
    with _core.no_grad():
        probs = t if p is None else full(t.shape, float(p), dtype=t.dtype)
        return (u < probs).cast(t.dtype)


def _like(t, fn, dtype, **kw):
    if not isinstance(t, Tensor):
        t = tensor(t)
    return fn(*t.shape, dtype=t.dtype if dtype is None else dtype, **kw)


def zeros_like(t, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(t, zeros, dtype, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(t, ones, dtype, requires_grad=requires_grad)


def empty_like(t, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(t, zeros, dtype, requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    if not isinstance(t, Tensor):
        t = tensor(t)
    return full(t.shape, fill_value, dtype=t.dtype if dtype is None else dtype, requires_grad=requires_grad)


def rand_like(t, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(t, rand, dtype, requires_grad=requires_grad)


def randn_like(t, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like(t, randn, dtype, requires_grad=requires_grad)
