"""The primitive operators (the HLIR) and their reference semantics.

Every high-level op decomposes into these. Ops are immutable *values*: two ops
compare equal (and hash equal) exactly when they compute the same function of
their inputs, which is what common-subexpression elimination keys on.

Each operand is read through the ``ShapeTracker`` on its graph edge; reads in
padding or outside a mask yield 0. ``reference`` receives the operands already
materialized at their logical shapes (numpy arrays) and returns the output at
the node's logical shape. Supported dtypes per op:

=============  =====================================  =========================
op             input dtypes                           output
=============  =====================================  =========================
Log2 Exp2 Sin  float16/bfloat16/32/64                 same
Sqrt Recip
Add Mul        any, both the same                     same (bool: or / and; integers wrap around)
Mod            ints/float*, both the same             same (floor modulo, Python/torch ``remainder``)
LessThan       any, both the same                     bool
Bitwise(kind)  ints (and/or/xor: bool too), the same  same (and or xor; shl shr: see :class:`Bitwise`)
SumReduce      ints/float* (f16/bf16 accumulate in f32) same (integers wrap around)
MaxReduce      any but bool                           same (NaN propagates; empty -> -inf / int min)
Contiguous     any                                    same
Constant       (scalar: number or symbolic expr)      its dtype
Iota           (expression of the flat index ``z``)   its dtype (int32/int64/float*)
Gather         data any, index int32/int64            data dtype (``torch.gather`` semantics)
ScatterAdd     index int32/int64, src f32/f64/ints    src dtype (sums into zeros; the adjoint of Gather)
Cast           any                                    target dtype (float->int truncates; ints wrap)
BitCast        any but bool                           target dtype of the same width (the bits reinterpreted)
Input          (set from the host)                    its dtype
GraphBreak     any                                    same (identity; a fusion barrier)
=============  =====================================  =========================

bfloat16 (host arrays of ``ml_dtypes.bfloat16``) follows PyTorch's CPU kernels: every op computes in float32 on
the widened operands and rounds its result to bfloat16 (nearest even) once; ``SumReduce`` accumulates in float32
and rounds at the end; casts go through float32 (:func:`luminal.dtype.to_host`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping, Sequence

import numpy as np

from .dtype import BFLOAT16_NUMPY, DType, to_host, wrap_int
from .shape import Expression, ShapeTracker


class GraphError(ValueError):
    """A graph was built or executed with inconsistent shapes, dtypes or data."""


class Op:
    """Base class of primitive operators. Subclasses are frozen dataclasses (value semantics)."""

    arity: ClassVar[int] = 0

    @property
    def name(self) -> str:
        return type(self).__name__

    def check(self, dtypes: Sequence[DType], shapes: Sequence[ShapeTracker]) -> None:
        """Raise :class:`GraphError`/``TypeError`` when the inputs are not valid for this op."""
        if len(dtypes) != self.arity:
            raise GraphError(f"{self.name} takes {self.arity} inputs, got {len(dtypes)}")

    def reference(self, inputs: list[np.ndarray], bindings: Mapping[str, int], out_shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


def _widen(arrays):
    """bfloat16 operands as float32 (exact), and whether any was bfloat16 (the result is rounded back)."""
    if any(a.dtype == BFLOAT16_NUMPY for a in arrays):
        return [a.astype(np.float32) for a in arrays], True
    return list(arrays), False


def _narrow(result, was_bf16: bool):
    """A float32 result rounded to bfloat16 (nearest even) when the operands were bfloat16."""
    if was_bf16 and result.dtype == np.float32:
        return result.astype(BFLOAT16_NUMPY)
    return result


def _require_float(op: Op, dtypes: Sequence[DType]) -> None:
    for d in dtypes:
        if not d.is_float:
            raise TypeError(f"{op.name} needs a floating-point input, got {d}; cast first")


def _require_same(op: Op, dtypes: Sequence[DType]) -> None:
    if len(set(dtypes)) > 1:
        raise TypeError(f"{op.name}: operand dtypes differ ({', '.join(map(str, dtypes))}); the primitive needs "
                        "them equal (the high-level ops insert the casts)")


def _require_same_shape(op: Op, shapes: Sequence[ShapeTracker]) -> None:
    dims = [s.dims for s in shapes]
    if any(d != dims[0] for d in dims[1:]):
        raise GraphError(f"{op.name}: operand shapes differ: {' vs '.join(str(list(d)) for d in dims)}")


# ---------------------------------------------------------------------------- leaves
@dataclass(frozen=True)
class Input(Op):
    """A named load whose data is set from the host (``GraphTensor.set``). ``key`` makes each input unique."""

    label: str
    key: int

    def reference(self, inputs, bindings, out_shape):  # pragma: no cover - the interpreter handles inputs
        raise GraphError(f"input '{self.label}' has no data")


@dataclass(frozen=True)
class Constant(Op):
    """A scalar: a number, or a symbolic :class:`Expression` evaluated with the bound symbols."""

    value: object
    dtype: DType

    def reference(self, inputs, bindings, out_shape):
        v = self.value.evaluate(bindings) if isinstance(self.value, Expression) else self.value
        if self.dtype.is_int:
            v = wrap_int(v, self.dtype)
        if self.dtype == DType.bfloat16:  # a Python float rounds to float32, then to bfloat16 (as PyTorch)
            return to_host(np.full(out_shape, v, dtype=np.float32), self.dtype)
        return np.full(out_shape, v, dtype=self.dtype.numpy)

    def __str__(self) -> str:
        return f"Constant({self.value})"


@dataclass(frozen=True)
class Iota(Op):
    """Evaluates ``expr`` (of the flat output index ``z`` and bound symbols) at every output element."""

    expr: Expression
    dtype: DType

    def reference(self, inputs, bindings, out_shape):
        n = int(np.prod(out_shape, dtype=np.int64)) if out_shape else 1
        env = dict(bindings)
        env["z"] = np.arange(n, dtype=np.int64)
        vals = self.expr.evaluate_array(env)
        return to_host(np.broadcast_to(np.asarray(vals), (n,)), self.dtype).reshape(out_shape)

    def __str__(self) -> str:
        return f"Iota({self.expr})"


# ---------------------------------------------------------------------------- unary
@dataclass(frozen=True)
class _Unary(Op):
    arity: ClassVar[int] = 1
    fn: ClassVar = None

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        _require_float(self, dtypes)

    def reference(self, inputs, bindings, out_shape):
        (x,), bf16 = _widen(inputs)
        with np.errstate(all="ignore"):
            return _narrow(type(self).fn(x).astype(x.dtype, copy=False), bf16)


@dataclass(frozen=True)
class Log2(_Unary):
    """``log2(x)``."""
    fn: ClassVar = np.log2


@dataclass(frozen=True)
class Exp2(_Unary):
    """``2 ** x``."""
    fn: ClassVar = np.exp2


@dataclass(frozen=True)
class Sin(_Unary):
    """``sin(x)``."""
    fn: ClassVar = np.sin


@dataclass(frozen=True)
class Sqrt(_Unary):
    """``sqrt(x)`` (NaN for negative x)."""
    fn: ClassVar = np.sqrt


@dataclass(frozen=True)
class Recip(_Unary):
    """``1 / x`` (inf at 0)."""
    fn: ClassVar = np.reciprocal


# ---------------------------------------------------------------------------- binary
@dataclass(frozen=True)
class _Binary(Op):
    arity: ClassVar[int] = 2

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        _require_same(self, dtypes)
        _require_same_shape(self, shapes)


@dataclass(frozen=True)
class Add(_Binary):
    """``a + b`` (logical or on bool)."""

    def reference(self, inputs, bindings, out_shape):
        (a, b), bf16 = _widen(inputs)
        with np.errstate(all="ignore"):
            return _narrow(np.add(a, b), bf16)


@dataclass(frozen=True)
class Mul(_Binary):
    """``a * b`` (logical and on bool)."""

    def reference(self, inputs, bindings, out_shape):
        (a, b), bf16 = _widen(inputs)
        with np.errstate(all="ignore"):
            return _narrow(np.multiply(a, b), bf16)


@dataclass(frozen=True)
class Mod(_Binary):
    """Floor modulo ``a - floor(a / b) * b`` (the sign of ``b``; ``torch.remainder``)."""

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        if dtypes[0] == DType.bool:
            raise TypeError("Mod is not defined for bool tensors")

    def reference(self, inputs, bindings, out_shape):
        (a, b), bf16 = _widen(inputs)
        if bf16:
            with np.errstate(all="ignore"):
                return _narrow(_float_remainder(a, b), bf16)
        if a.dtype.kind in "iu" and np.any(b == 0):
            raise ZeroDivisionError("integer modulo by zero in Mod")
        with np.errstate(all="ignore"):
            if a.dtype.kind == "i":  # INT_MIN % -1 is 0 (numpy gives 0 too, but warns or traps on some builds)
                return np.where(b == -1, np.zeros_like(a), np.mod(a, np.where(b == -1, np.ones_like(b), b)))
            if a.dtype.kind == "f":
                return _float_remainder(a, b)
            return np.mod(a, b)


def _float_remainder(a, b):
    """``torch.remainder`` for floats: ``fmod`` moved into the divisor's sign, so a zero result keeps the dividend's
    sign (``remainder(-4.0, 2.0)`` is ``-0.0``, numpy's ``mod`` gives ``+0.0``); with an infinite divisor a value of
    the other sign becomes that infinity, as in numpy and PyTorch."""
    m = np.fmod(a, b)
    return np.where((m != 0) & ((m < 0) != (b < 0)), m + b, m)


BITWISE_KINDS = ("and", "or", "xor", "shl", "shr")


@dataclass(frozen=True)
class Bitwise(_Binary):
    """Bitwise ``kind`` of two integer operands of the same dtype: ``"and"``, ``"or"``, ``"xor"`` (also on bool:
    logical and/or/xor), ``"shl"`` (``a << b``) and ``"shr"`` (``a >> b``, arithmetic for signed types).

    Shifts follow PyTorch's CPU results for every shift amount: a left shift by ``b < 0`` or ``b >=`` the bit width
    gives 0; a right shift by such an amount gives the sign fill (-1 for a negative signed ``a``, else 0). Bitwise
    not is ``x ^ -1`` (``x ^ True`` for bool). No gradient (integer op)."""

    kind: str

    def __post_init__(self):
        if self.kind not in BITWISE_KINDS:
            raise ValueError(f"Bitwise kind must be one of {BITWISE_KINDS}, got {self.kind!r}")

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        d = dtypes[0]
        if d.is_float or (d == DType.bool and self.kind in ("shl", "shr")):
            raise TypeError(f"{self}: not defined for {d} tensors (integer{' or bool' if self.kind in ('and', 'or', 'xor') else ''} "
                            "operands only)")

    def reference(self, inputs, bindings, out_shape):
        a, b = inputs
        if self.kind == "and":
            return np.bitwise_and(a, b)
        if self.kind == "or":
            return np.bitwise_or(a, b)
        if self.kind == "xor":
            return np.bitwise_xor(a, b)
        bits = a.dtype.itemsize * 8
        signed = a.dtype.kind == "i"
        out_of_range = (b >= bits) | (b < 0) if signed else b >= bits
        s = np.where(out_of_range, np.zeros_like(b), b)
        if self.kind == "shl":
            return np.where(out_of_range, np.zeros_like(a), np.left_shift(a, s))
        if signed:
            return np.right_shift(a, np.where(out_of_range, np.full_like(b, bits - 1), b))
        return np.where(out_of_range, np.zeros_like(a), np.right_shift(a, s))

    def __str__(self) -> str:
        return f"Bitwise({self.kind})"


@dataclass(frozen=True)
class LessThan(_Binary):
    """``a < b`` as bool."""

    def reference(self, inputs, bindings, out_shape):
        (a, b), _ = _widen(inputs)
        with np.errstate(all="ignore"):
            return np.less(a, b)


# ---------------------------------------------------------------------------- reductions
@dataclass(frozen=True)
class _Reduce(Op):
    axis: int
    arity: ClassVar[int] = 1

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        if not 0 <= self.axis < shapes[0].ndim:
            raise GraphError(f"{self.name}: axis {self.axis} out of range for shape {list(shapes[0].dims)}")
        if dtypes[0] == DType.bool:
            raise TypeError(f"{self.name} is not defined for bool tensors; cast first")

    def __str__(self) -> str:
        return f"{self.name}({self.axis})"


@dataclass(frozen=True)
class SumReduce(_Reduce):
    """Sum over ``axis`` (removed from the shape)."""

    def reference(self, inputs, bindings, out_shape):
        x = inputs[0]
        if x.dtype == BFLOAT16_NUMPY:  # float32 accumulation, one rounding at the end (PyTorch's CPU sum)
            with np.errstate(all="ignore"):
                return np.sum(x.astype(np.float32), axis=self.axis).astype(x.dtype)
        acc = np.float32 if x.dtype == np.float16 else x.dtype
        with np.errstate(all="ignore"):
            return np.sum(x, axis=self.axis, dtype=acc).astype(x.dtype, copy=False)


@dataclass(frozen=True)
class MaxReduce(_Reduce):
    """Maximum over ``axis`` (removed); NaN propagates; an empty axis gives -inf (or the int minimum)."""

    def reference(self, inputs, bindings, out_shape):
        x = inputs[0]
        if x.dtype == BFLOAT16_NUMPY:
            return to_host(MaxReduce.reference(self, [x.astype(np.float32)], bindings, out_shape), DType.bfloat16)
        if x.shape[self.axis] == 0:
            low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            return np.full(out_shape, low, dtype=x.dtype)
        with np.errstate(all="ignore"):
            return np.max(x, axis=self.axis)


# ---------------------------------------------------------------------------- data movement
@dataclass(frozen=True)
class Contiguous(Op):
    """Materialize the input view into a fresh row-major buffer."""

    arity: ClassVar[int] = 1

    def reference(self, inputs, bindings, out_shape):
        return np.array(inputs[0], order="C", copy=True)


@dataclass(frozen=True)
class GraphBreak(Op):
    """Identity that marks a fusion barrier for compilers; the reference passes data through."""

    arity: ClassVar[int] = 1

    def reference(self, inputs, bindings, out_shape):
        return np.array(inputs[0], order="C", copy=True)


@dataclass(frozen=True)
class Gather(Op):
    """``out[i] = data[i with i[axis] replaced by index[i]]`` (``torch.gather``); inputs ``(data, index)``."""

    axis: int
    arity: ClassVar[int] = 2

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        data, index = shapes
        if dtypes[1] not in (DType.int32, DType.int64):
            raise TypeError(f"Gather: index must be int32/int64, got {dtypes[1]}")
        if data.ndim != index.ndim:
            raise GraphError(f"Gather: data has {data.ndim} dims {list(data.dims)} but index has {index.ndim} "
                             f"{list(index.dims)}; they must have the same rank")
        if not 0 <= self.axis < data.ndim:
            raise GraphError(f"Gather: axis {self.axis} out of range for {data.ndim} dims")
        for j, (d, i) in enumerate(zip(data.dims, index.dims)):
            if j != self.axis and d.is_constant() and i.is_constant() and i.to_int() > d.to_int():
                raise GraphError(f"Gather: index dim {j} ({i}) exceeds data dim ({d}); shapes "
                                 f"{list(data.dims)} and {list(index.dims)}")

    def index_error(self, index: np.ndarray, size: int) -> str | None:
        """The message for the first index outside ``[0, size)``, or None when all are in range."""
        if index.size and (index.min() < 0 or index.max() >= size):
            bad = index[(index < 0) | (index >= size)].reshape(-1)[0]
            return f"Gather: index {int(bad)} is out of range for axis {self.axis} of size {size}"
        return None

    def reference(self, inputs, bindings, out_shape):
        data, index = inputs
        message = self.index_error(index, data.shape[self.axis])
        if message:
            raise IndexError(message)
        slices = tuple(slice(0, n) if j != self.axis else slice(None) for j, n in enumerate(index.shape))
        return np.take_along_axis(data[slices], index.astype(np.int64), axis=self.axis)

    def __str__(self) -> str:
        return f"Gather({self.axis})"


@dataclass(frozen=True)
class ScatterAdd(Op):
    """``out = zeros(index dims with axis -> size); out[i with i[axis] replaced by index[i]] += src[i]`` for every
    position ``i`` of ``index`` (``torch.Tensor.scatter_add_`` on zeros); inputs ``(index, src)`` of equal dims.
    The adjoint of :class:`Gather` (its data gradient, e.g. an embedding table's). Each output element sums its
    contributions in ascending position order along ``axis`` (deterministic; the compiled kernels split the
    work over the other axes). float32/float64 and integers (wrapping); half types are cast by the caller. An
    index outside ``[0, size)`` raises ``IndexError``."""

    axis: int
    size: Expression
    arity: ClassVar[int] = 2

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        index, src = shapes
        if dtypes[0] not in (DType.int32, DType.int64):
            raise TypeError(f"ScatterAdd: index must be int32/int64, got {dtypes[0]}")
        if dtypes[1] in (DType.bool, DType.float16, DType.bfloat16):
            raise TypeError(f"ScatterAdd accumulates float32/float64/integer values, got {dtypes[1]}; cast first")
        _require_same_shape(self, shapes)
        if not 0 <= self.axis < index.ndim:
            raise GraphError(f"ScatterAdd: axis {self.axis} out of range for {index.ndim} dims")

    def reference(self, inputs, bindings, out_shape):
        index, src = inputs
        size = out_shape[self.axis]
        message = Gather(self.axis).index_error(index, size)
        if message:
            raise IndexError(message.replace("Gather", "ScatterAdd"))
        out = np.zeros(out_shape, dtype=src.dtype)
        coords = list(np.indices(index.shape, sparse=True))
        coords[self.axis] = index.astype(np.int64)
        with np.errstate(all="ignore"):
            np.add.at(out, tuple(coords), src)  # (unbuffered, in C order of the positions)
        return out

    def __str__(self) -> str:
        return f"ScatterAdd({self.axis})"


@dataclass(frozen=True)
class Cast(Op):
    """Convert to ``dtype`` (float->int truncates toward zero; nonzero->True for bool)."""

    dtype: DType
    arity: ClassVar[int] = 1

    def reference(self, inputs, bindings, out_shape):
        with np.errstate(all="ignore"):
            if self.dtype == DType.bool:
                return inputs[0] != 0
            return to_host(inputs[0], self.dtype)

    def __str__(self) -> str:
        return f"Cast({self.dtype.value})"


@dataclass(frozen=True)
class BitCast(Op):
    """Reinterpret each element's bits as ``dtype``, which has the same width as the input's (numpy's
    ``arr.view(dtype)``, ``torch.Tensor.view(dtype)``): e.g. float32 <-> int32 <-> uint32, float64 <-> int64 <->
    uint64, bfloat16 <-> float16 <-> int16 <-> uint16, int8 <-> uint8. Bit-exact: NaN payloads and signs, -0.0 and
    denormals are kept. bool is not a bit pattern and is refused. No gradient."""

    dtype: DType
    arity: ClassVar[int] = 1

    def check(self, dtypes, shapes):
        super().check(dtypes, shapes)
        check_bitcast(dtypes[0], self.dtype)

    def reference(self, inputs, bindings, out_shape):
        return np.asarray(inputs[0]).view(self.dtype.numpy).reshape(out_shape)

    def __str__(self) -> str:
        return f"BitCast({self.dtype.value})"


def check_bitcast(src: DType, dst: DType) -> None:
    """Raise ``TypeError`` unless ``src`` bits can be reinterpreted as ``dst`` (same width, neither bool)."""
    if DType.bool in (src, dst):
        raise TypeError(f"cannot reinterpret the bits of {src} as {dst}: bool is not a bit pattern (cast instead)")
    if src.bits != dst.bits:
        raise TypeError(f"cannot reinterpret {src} ({src.bits} bits) as {dst} ({dst.bits} bits): only same-width "
                        "bit casts are supported")


PRIMITIVES = (Log2, Exp2, Sin, Sqrt, Recip, Add, Mul, Mod, LessThan, Bitwise, SumReduce, MaxReduce, Contiguous,
              Constant, Iota, Gather, ScatterAdd, Cast, BitCast, Input, GraphBreak)
