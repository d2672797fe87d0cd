"""Element types and PyTorch's type-promotion rules.

``float32`` is the default. ``float64`` works end to end, ``float16`` where the
backend supports it, ``int32``/``int64`` and ``bool`` for indices and masks.
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """A tensor element type."""

    bool = "bool"
    int32 = "int32"
    int64 = "int64"
    float16 = "float16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        """The matching numpy dtype."""
        return np.dtype(self.value)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in (DType.int32, DType.int64)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def c_type(self) -> str:
        return {"bool": "unsigned char", "int32": "int", "int64": "long long", "float16": "_Float16",
                "float32": "float", "float64": "double"}[self.value]

    def __repr__(self) -> str:
        return f"luminal.{self.value}"

    __str__ = __repr__


_FLOATS = (DType.float16, DType.float32, DType.float64)
_CATEGORY = {DType.bool: 0, DType.int32: 1, DType.int64: 1, DType.float16: 2, DType.float32: 2, DType.float64: 2}
_ORDER = [DType.bool, DType.int32, DType.int64, DType.float16, DType.float32, DType.float64]

bool_, int32, int64, float16, float32, float64 = (DType.bool, DType.int32, DType.int64, DType.float16,
                                                  DType.float32, DType.float64)
DEFAULT_FLOAT = DType.float32
DEFAULT_INT = DType.int64

_ALIASES = {"bool": DType.bool, "int32": DType.int32, "int": DType.int32, "int64": DType.int64, "long": DType.int64,
            "float16": DType.float16, "half": DType.float16, "f16": DType.float16, "float32": DType.float32,
            "float": DType.float32, "f32": DType.float32, "float64": DType.float64, "double": DType.float64,
            "f64": DType.float64, "i32": DType.int32, "i64": DType.int64}


def as_dtype(value) -> DType:
    """Coerce a ``DType``, a name (``"float32"``, ``"f64"``...) or a numpy dtype to a :class:`DType`."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _ALIASES:
        return _ALIASES[value]
    if value is bool:
        return DType.bool
    if value is int:
        return DType.int64
    if value is float:
        return DType.float32
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name in _ALIASES:
        return _ALIASES[name]
    raise TypeError(f"unsupported dtype {value!r}; expected one of {[d.value for d in _ORDER]}")


def promote_types(a: DType, b: DType) -> DType:
    """Result type of a binary op between two tensors (PyTorch rules: bool < int < float, wider wins)."""
    if a == b:
        return a
    ca, cb = _CATEGORY[a], _CATEGORY[b]
    if ca != cb:
        return a if ca > cb else b
    return a if _ORDER.index(a) > _ORDER.index(b) else b


def scalar_result_type(tensor: DType, scalar) -> DType:
    """Result type of ``tensor op python_scalar``: a scalar only promotes across categories (PyTorch rules)."""
    if isinstance(scalar, (bool, np.bool_)):
        kind = 0
    elif isinstance(scalar, (int, np.integer)):
        kind = 1
    elif isinstance(scalar, (float, np.floating)):
        kind = 2
    else:
        raise TypeError(f"unsupported scalar {scalar!r} of type {type(scalar).__name__}")
    if kind <= _CATEGORY[tensor]:
        return tensor
    return DType.int64 if kind == 1 else DEFAULT_FLOAT
