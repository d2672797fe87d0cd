"""Element types and PyTorch's type-promotion rules.

``float32`` is the default. ``float64`` works end to end, ``float16`` where the
backend supports it. ``bfloat16`` (8 exponent bits, 8 significand bits) works on the reference interpreter and
the cpu backend with PyTorch's CPU semantics: stored in 2 bytes, every op computed in float32 and its result
rounded to bfloat16 (round to nearest even); host arrays use ``ml_dtypes.bfloat16`` (numpy has no bfloat16; see
:data:`BFLOAT16_NUMPY`). Integers: ``int8``/``int16``/``int32``/``int64`` and ``uint8``/``uint16``/``uint32``/
``uint64``, all with two's-complement wrap-around on overflow (as in PyTorch and numpy); ``bool`` for masks.

Promotion follows ``torch.result_type``: bool < integers < floats; among integers the narrowest type holding
both ranges (``uint8 + int8 -> int16``); ``uint16``/``uint32``/``uint64`` promote only with themselves, bool is
not an exception, and floats (mixing them with another integer type or bool raises ``TypeError``, as PyTorch 2.x
does). A Python int scalar keeps a tensor's integer type (the value wraps into it), a float scalar gives the
default float for an integer or bool tensor.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

BFLOAT16_NUMPY = np.dtype(ml_dtypes.bfloat16)
"""The host (numpy) dtype of ``bfloat16`` tensors: ``ml_dtypes.bfloat16`` (JAX's numpy extension type). Its
casts from float32 round to nearest even and its ufuncs compute in float32 and round each result, as PyTorch's
CPU kernels do."""


class DType(enum.Enum):
    """A tensor element type."""

    bool = "bool"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"

    @property
    def numpy(self) -> np.dtype:
        """The matching numpy dtype (``ml_dtypes.bfloat16`` for bfloat16)."""
        if self is DType.bfloat16:
            return BFLOAT16_NUMPY
        return np.dtype(self.value)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        """Any integer type (signed or unsigned; not bool)."""
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        """A signed integer or floating-point type."""
        return self in _SIGNED or self in _FLOATS

    @property
    def is_unsigned(self) -> bool:
        return self in _UNSIGNED

    @property
    def bits(self) -> int:
        """Width in bits (bool: 8, its storage)."""
        return 8 * self.numpy.itemsize

    @property
    def min(self):
        """The smallest value (integers and bool; ``-inf`` for floats)."""
        if self == DType.bool:
            return 0
        return int(np.iinfo(self.numpy).min) if self.is_int else -np.inf

    @property
    def max(self):
        """The largest value (integers and bool; ``inf`` for floats)."""
        if self == DType.bool:
            return 1
        return int(np.iinfo(self.numpy).max) if self.is_int else np.inf

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_half(self) -> bool:
        """A 16-bit float (float16 or bfloat16): ops whose decompositions lose accuracy to per-primitive rounding
        compute these in float32 and round once."""
        return self in (DType.float16, DType.bfloat16)

    @property
    def c_type(self) -> str:
        """The C storage type (bfloat16: its bit pattern as ``unsigned short``; the C backend computes in float)."""
        return _C_TYPES[self.value]

    @property
    def c_compute(self) -> str:
        """The C type the C backend computes values of this dtype in: ``float`` for bfloat16 (each result is rounded
        to bfloat16 and widened back, see :mod:`luminal.codegen.emit`), else :attr:`c_type`."""
        return "float" if self is DType.bfloat16 else _C_TYPES[self.value]

    @property
    def c_unsigned(self) -> str:
        """The C unsigned type of an integer type's width (for wrap-around arithmetic on signed values)."""
        return {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}[self.bits]

    def __repr__(self) -> str:
        return f"luminal.{self.value}"

    __str__ = __repr__


_C_TYPES = {"bool": "unsigned char", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
            "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
            "uint64": "unsigned long long", "float16": "_Float16", "bfloat16": "unsigned short", "float32": "float", "float64": "double"}
_FLOATS = (DType.float16, DType.bfloat16, DType.float32, DType.float64)
_SIGNED = (DType.int8, DType.int16, DType.int32, DType.int64)
_UNSIGNED = (DType.uint8, DType.uint16, DType.uint32, DType.uint64)
_INTS = _SIGNED + _UNSIGNED
# uint16/32/64 are "barely supported" in PyTorch: they promote only with themselves and floats
_BARE_UNSIGNED = (DType.uint16, DType.uint32, DType.uint64)
_CATEGORY = {DType.bool: 0, **{d: 1 for d in _INTS}, DType.float16: 2, DType.bfloat16: 2, DType.float32: 2, DType.float64: 2}
_ORDER = [DType.bool, DType.uint8, DType.int8, DType.int16, DType.int32, DType.int64, DType.uint16, DType.uint32,
          DType.uint64, DType.float16, DType.bfloat16, DType.float32, DType.float64]

bool_, int32, int64, float16, float32, float64 = (DType.bool, DType.int32, DType.int64, DType.float16,
                                                  DType.float32, DType.float64)
int8, int16, uint8, uint16, uint32, uint64 = (DType.int8, DType.int16, DType.uint8, DType.uint16, DType.uint32,
                                              DType.uint64)
bfloat16 = DType.bfloat16
DEFAULT_FLOAT = DType.float32
DEFAULT_INT = DType.int64

_ALIASES = {"bool": DType.bool, "int32": DType.int32, "int": DType.int32, "int64": DType.int64, "long": DType.int64,
            "float16": DType.float16, "half": DType.float16, "f16": DType.float16, "float32": DType.float32,
            "float": DType.float32, "f32": DType.float32, "float64": DType.float64, "double": DType.float64,
            "f64": DType.float64, "i32": DType.int32, "i64": DType.int64, "int8": DType.int8, "i8": DType.int8,
            "char": DType.int8, "int16": DType.int16, "i16": DType.int16, "short": DType.int16,
            "uint8": DType.uint8, "u8": DType.uint8, "byte": DType.uint8, "uint16": DType.uint16, "u16": DType.uint16,
            "uint32": DType.uint32, "u32": DType.uint32, "uint64": DType.uint64, "u64": DType.uint64,
            "bfloat16": DType.bfloat16, "bf16": DType.bfloat16}


def _torch_dtype_name(value):
    """``"float32"`` for ``torch.float32`` (any ``torch.dtype``), None for anything else (torch not imported)."""
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return None


def as_dtype(value) -> DType:
    """Coerce a ``DType``, a name (``"float32"``, ``"f64"``...), a numpy dtype or a ``torch.dtype`` to a
    :class:`DType`."""
    if isinstance(value, DType):
        return value
    torch_name = _torch_dtype_name(value)
    if torch_name is not None:
        if torch_name in _ALIASES:
            return _ALIASES[torch_name]
        raise TypeError(f"unsupported dtype {value!r}; expected one of {[d.value for d in _ORDER]}")
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


def view_dtype(value) -> DType | None:
    """The :class:`DType` ``value`` names when it is a dtype (a ``DType``, a numpy dtype or scalar type, a
    ``torch.dtype``, a dtype name such as ``"int32"``), else None (a shape argument: ``view(*shape)``)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return _ALIASES.get(value)
    if isinstance(value, (int, np.integer)) or value is None:
        return None
    if _torch_dtype_name(value) is not None or isinstance(value, np.dtype) or \
            (isinstance(value, type) and issubclass(value, np.generic)):
        return as_dtype(value)
    return None


def promote_types(a: DType, b: DType) -> DType:
    """Result type of a binary op between two tensors (``torch.promote_types``): bool < integers < floats; two
    integer types give the narrowest type holding both ranges (``uint8 + int8 -> int16``, ``uint8 + int32 ->
    int32``). ``uint16``/``uint32``/``uint64`` promote only with themselves and with floats: any other mix raises
    ``TypeError`` (PyTorch 2.x: "Promotion for uint16, uint32, uint64 types is not supported"). Floats: the wider
    one; ``float16`` with ``bfloat16`` gives ``float32``; any integer with ``bfloat16`` gives ``bfloat16``."""
    if a == b:
        return a
    ca, cb = _CATEGORY[a], _CATEGORY[b]
    if (a in _BARE_UNSIGNED and cb < 2) or (b in _BARE_UNSIGNED and ca < 2):
        raise TypeError(f"Promotion for uint16, uint32, uint64 types is not supported, attempted to promote {a} "
                        f"and {b} (as in PyTorch); cast one operand explicitly")
    if ca != cb:
        return a if ca > cb else b
    if ca == 1:
        if a.is_unsigned != b.is_unsigned:  # uint8 with a signed type: the signed type of twice uint8's width
            u, s = (a, b) if a.is_unsigned else (b, a)
            return s if s.bits > u.bits else DType.int16
        return a if a.bits > b.bits else b
    if {a, b} == {DType.float16, DType.bfloat16}:  # neither holds the other: float32 (as PyTorch)
        return DType.float32
    return a if _ORDER.index(a) > _ORDER.index(b) else b


def to_host(arr, dtype: DType) -> np.ndarray:
    """``arr`` (a numpy array of any numeric dtype, ``ml_dtypes.bfloat16`` included) converted to ``dtype``'s
    numpy dtype with PyTorch's rules where numpy has none: to bfloat16 through float32 (float64 and int64 round
    to float32 first, then to bfloat16 to nearest even, as ``Tensor.to(torch.bfloat16)``; NaN stays NaN,
    overflow gives inf), from bfloat16 through float32 (exact). Other conversions are numpy's ``astype``."""
    arr = np.asarray(arr)
    target = dtype.numpy
    if arr.dtype == target:
        return arr
    with np.errstate(all="ignore"):
        if target == BFLOAT16_NUMPY:
            if arr.dtype != np.float32:
                arr = arr.astype(np.float32)
            return arr.astype(target)
        if arr.dtype == BFLOAT16_NUMPY:
            arr = arr.astype(np.float32)
            if dtype == DType.bool:
                return arr != 0
        return arr.astype(target)


def wrap_int(value: int, dtype: DType) -> int:
    """``value`` wrapped (two's complement) into the range of the integer ``dtype`` (bool: nonzero -> 1)."""
    if dtype == DType.bool:
        return int(bool(value))
    value = int(value)
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


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
