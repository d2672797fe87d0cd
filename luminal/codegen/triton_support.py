"""The Triton vocabulary of the GPU renderer (:mod:`luminal.codegen.triton`): element and storage types of luminal
dtypes, the ``@triton.jit`` helpers every generated module starts with (floor division/modulo, NaN-propagating
max, bfloat16 rounding, load and store), literals, and the rendering of index expressions.
"""

from __future__ import annotations

import math
import re

from ..dtype import DType, wrap_int
from ..shape import Expression
from ..shape.expression import ADD, AND, DIV, GE, LT, MAX, MIN, MOD, MUL, NUM, OR, VAR

# Triton element types of luminal dtypes (bool buffers hold one byte per element: uint8)
TL_TYPE = {DType.bool: "tl.int1", DType.int8: "tl.int8", DType.int16: "tl.int16", DType.int32: "tl.int32",
           DType.int64: "tl.int64", DType.uint8: "tl.uint8", DType.uint16: "tl.uint16", DType.uint32: "tl.uint32",
           DType.uint64: "tl.uint64", DType.float16: "tl.float16", DType.float32: "tl.float32",
           DType.float64: "tl.float64", DType.bfloat16: "tl.float32"}
# dtype -> numpy name of the storage type where it differs from the dtype's: bool as one byte; bfloat16 as its bit
# pattern (uint16), computed in float32 registers holding bfloat16 values (as the C backend does; Triton's own
# bfloat16 type is not used: the interpreter does not round it as the hardware does)
STORAGE = {DType.bool: "uint8", DType.bfloat16: "uint16"}

HELPERS = '''\
@triton.jit
def _lm_floordiv(a, b):
    # floor division from Triton's truncating division (LUMINAL_FLOORDIV)
    q = a // b
    return q - (((a % b) != 0) & ((a < 0) != (b < 0))).to(q.dtype)


@triton.jit
def _lm_floormod(a, b):
    # floor modulo from Triton's truncating remainder (LUMINAL_FLOORMOD)
    return ((a % b) + b) % b


@triton.jit
def _lm_bf16r(x):
    # float32 -> the nearest bfloat16 (ties to even; overflow gives inf; NaN becomes the quiet NaN of its sign,
    # 0x7fc0/0xffc0), returned as float32 (lm_bf16r of the C backend)
    u = x.to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    nan = (u & 0x80000000) | 0x7FC00000
    return tl.where(x != x, nan, r).to(tl.float32, bitcast=True)


@triton.jit
def _lm_bf16_load(bits):
    # stored bfloat16 bits -> float32 (exact)
    return (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _lm_bf16_bits(x):
    # a float32 holding a bfloat16 value -> its stored bits
    return (x.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16)


@triton.jit
def _lm_bf16_store(x):
    # a float32 -> its stored bfloat16 bits: rounded (_lm_bf16r), but a value that is a bfloat16 already keeps its
    # bits, a NaN's payload included (lm_f32_to_bf16 of the C backend)
    u = x.to(tl.uint32, bitcast=True)
    r = _lm_bf16r(x).to(tl.uint32, bitcast=True)
    return (tl.where((u & 0xFFFF) == 0, u, r) >> 16).to(tl.uint16)


@triton.jit
def _lm_nan86(r, a, b):
    # the NaN an x86 CPU (the reference) gives: an operand's NaN (the first one), else its default NaN, negative
    # (0xFFC00000); a GPU gives a positive canonical NaN, whose sign bfloat16 results would keep
    dflt = (r.to(tl.int32, bitcast=True) * 0 - 4194304).to(tl.float32, bitcast=True)
    return tl.where(r != r, tl.where(a != a, a, tl.where(b != b, b, dflt)), r)


@triton.jit
def _lm_max(a, b):
    # max that propagates NaN (the reference's np.max)
    return tl.where((a > b) | (a != a), a, b)
'''


def fmod_helper(interpret: bool) -> str:
    """The ``_lm_fmod`` helper (C ``fmod``, exact): Triton's float ``%`` is exact in the interpreter (numpy) but
    not on NVIDIA GPUs (LLVM's expansion of ``frem`` divides approximately), so there it is libdevice's ``fmod``
    (computed in float64)."""
    # in float64 on the device: Triton links libdevice with subnormals flushed to zero for float32 (an H200 gave 0
    # for a subnormal's fmod); a float32 / float16 fmod is exact in float64 and representable in its own type
    body = "a % b" if interpret else "libdevice.fmod(a.to(tl.float64), b.to(tl.float64)).to(a.dtype)"
    return f"@triton.jit\ndef _lm_fmod(a, b):\n    # fmod (C semantics, exact)\n    return {body}\n"


def _int_text(value, dtype: DType) -> str:
    """A Python literal of an integer constant, wrapped into ``dtype`` (uint64 values above 2**63 - 1 are written
    as their int64 bit pattern: Triton constants are at most int64)."""
    v = wrap_int(value, dtype)
    if v == -2 ** 63:  # (as a difference: the literal 2**63 alone would not fit an int64 constant)
        return "(-9223372036854775807 - 1)"
    if v >= 2 ** 63:
        return f"({v - 2 ** 64})"
    return str(v)


def _bf16_value(value) -> float:
    """A Python number as the reference makes it a bfloat16 constant: rounded to float32, then to bfloat16."""
    import numpy as np

    from ..dtype import BFLOAT16_NUMPY

    with np.errstate(all="ignore"):
        return float(np.asarray(np.float32(value)).astype(BFLOAT16_NUMPY).astype(np.float32))


def _round_bf16(text: str, dtype: DType) -> str:
    """``text`` (a float32 block) rounded to bfloat16 when ``dtype`` is bfloat16."""
    return f"_lm_bf16r({text})" if dtype == DType.bfloat16 else text


def storage_name(dtype: DType) -> str:
    """The numpy dtype name a buffer of ``dtype`` is stored as on the device (bool: ``uint8``)."""
    return STORAGE.get(dtype, dtype.value)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _sym_name(symbol: str) -> str:
    return "s_" + re.sub(r"[^0-9A-Za-z_]", "_", symbol)


class ExprRenderer:
    """Renders :class:`Expression` trees as Triton (Python) text. ``names`` maps graph symbols to kernel
    arguments; every other symbol (index variables, gather indices) is a variable of the kernel body."""

    def __init__(self, names: dict):
        self.names = names

    def int_(self, e: Expression) -> str:
        text, is_bool = self._render(e)
        return f"({text}).to(tl.int64)" if is_bool else text

    def bool_(self, e: Expression) -> str:
        text, is_bool = self._render(e)
        return text if is_bool else f"({text} != 0)"

    def _render(self, e: Expression):
        op = e.op
        if op == NUM:
            v = e.args[0]
            return (f"({v})" if v < 0 else str(v)), False
        if op == VAR:
            return self.names.get(e.args[0], e.args[0]), False
        if op in (ADD, MUL):
            return "(" + (" + " if op == ADD else " * ").join(self.int_(a) for a in e.args) + ")", False
        if op in (AND, OR):
            return "(" + (" & " if op == AND else " | ").join(self.bool_(a) for a in e.args) + ")", True
        a, b = (self.int_(x) for x in e.args)
        if op in (DIV, MOD):
            alo, blo = e.args[0].bounds()[0], e.args[1].bounds()[0]
            if alo is not None and alo >= 0 and blo is not None and blo > 0:
                return f"({a} {'//' if op == DIV else '%'} {b})", False
            return f"{'_lm_floordiv' if op == DIV else '_lm_floormod'}({a}, {b})", False
        if op == MIN:
            return f"tl.minimum({a}, {b})", False
        if op == MAX:
            return f"tl.maximum({a}, {b})", False
        if op == LT:
            return f"({a} < {b})", True
        if op == GE:
            return f"({a} >= {b})", True
        raise NotImplementedError(f"Triton rendering of expression op {op!r}")


def _float_text(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(float(v))
