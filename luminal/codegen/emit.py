"""Kernel-body emission: a kernel's value tree (loads through views, constants, elementwise primitives,
gathers) as C statements over SSA temporaries, for the loop nests :mod:`luminal.codegen.c` renders.

bfloat16 values are stored as their bit patterns (``unsigned short``) and computed as ``float``
(:attr:`DType.c_compute`): a load widens the bits exactly (``lm_bf16_to_f32``), every bfloat16 primitive and
cast is computed in float32 and its result rounded to bfloat16 (``lm_bf16r``: nearest even, NaN quieted with
its sign kept, as ``ml_dtypes``) so a fused chain rounds after each op exactly as the reference interpreter
does, and every store narrows the bits (``lm_f32_to_bf16``, see :meth:`CRenderer.store`)."""

from __future__ import annotations

import math
import re

import numpy as np

from .. import ops
from ..dtype import BFLOAT16_NUMPY, DType, wrap_int
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import Compute, ConstValue, GatherValue, IotaValue, Load, Remapped
from .values import gather_slots, value_range


def _literal(value, dtype: DType) -> str:
    if dtype == DType.bool:
        return "1" if value else "0"
    if dtype.is_int:
        v = wrap_int(value, dtype)
        if dtype.is_unsigned:
            return f"{v}ULL"
        if v == -2 ** 63:  # the literal 9223372036854775808 does not fit a long long
            return "(-9223372036854775807LL - 1)"
        return f"{v}LL"
    v = float(value)
    if dtype == DType.bfloat16:  # a Python number rounds to float32, then to bfloat16 (as the reference)
        v = float(np.float32(v).astype(BFLOAT16_NUMPY))
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(v)
    return f"(({dtype.c_compute}){text})"


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_TEMP = re.compile(r"[tg]\d+")  # the writer's temporaries (values and gather indices)


def _zero(dtype: DType) -> str:
    """The literal a statically masked-out read emits (recognised by the ``Add`` folding)."""
    return _literal(0, dtype)




class KernelWriter:
    """Emits the statements of one kernel body (SSA temporaries, memoized per value and index)."""

    def __init__(self, renderer, loop_var: str | None = None):
        """``renderer``: the :class:`~luminal.codegen.c.CRenderer` (buffer pointers, index rendering)."""
        self.r = renderer
        self.lines: list[str] = []
        self.memo: dict = {}
        self.counter = 0
        # with a loop_var, temporaries that do not depend on it go to ``hoisted`` (emitted before the loop):
        # GCC does not vectorize an inner loop that reloads a value stored earlier in the same outer iteration
        # (a row group's per-row scalars: "control flow in loop")
        self.loop_var = loop_var
        self.hoisted: list[str] = []
        self.invariant: set[str] = set()

    def temp(self, dtype: DType, expr: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        # bool temporaries are ints: GCC does not vectorize loops that mix unsigned char values with
        # float/64-bit ones ("no vectype"); bool buffers stay one byte per element
        line = f"{'int' if dtype == DType.bool else dtype.c_compute} {name} = {expr};"
        if self.loop_var is not None and all(
                name_ in self.invariant or not _TEMP.fullmatch(name_) and name_ != self.loop_var
                for name_ in _IDENT.findall(expr)):
            self.invariant.add(name)
            self.hoisted.append(line)
        else:
            self.lines.append(line)
        return name

    def index(self, e: Expression) -> str:
        return self.r.index(e)

    def emit(self, value, vars_: tuple) -> str:
        key = (id(value), vars_)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        out = self._emit(value, vars_)
        self.memo[key] = (value, out)  # keep value alive so id() stays unique
        return out

    def emit_stored(self, value, vars_: tuple) -> str:
        """:meth:`emit` for a value that only a store into a bfloat16 buffer reads (the store narrows with
        ``lm_f32_to_bf16``, which rounds): a bfloat16 compute is left unrounded, so it is rounded once instead of
        twice. The bits are the same (rounding to nearest even is idempotent); not memoized, so a value that
        something else in the kernel reads is still emitted rounded there."""
        if isinstance(value, Compute) and (id(value), vars_) not in self.memo:
            return self._emit_compute(value, vars_, rounded=False)
        return self.emit(value, vars_)

    def _emit_compute(self, value: Compute, vars_, rounded: bool) -> str:
        """A primitive's value from its arguments' (``rounded``: a bfloat16 result rounded, else left to the
        store)."""
        quotient = _float32_quotient(value)
        if quotient is not None:  # (a float32 division: one vdivps instead of converts, a double divide and a multiply)
            num, den = (self.emit(x, vars_) for x in quotient)
            return self.temp(value.dtype, f"({num} / {den})")
        args = [self.emit(a, vars_) for a in value.args]
        if isinstance(value.op, ops.Add) and _zero(value.dtype) in args:
            # x + (a statically masked-out 0): the stack of a where() read at one slot. Dropping the add
            # keeps a -0.0 branch -0.0 (torch.where's result); the graph's sum would give +0.0
            return args[1] if args[0] == _zero(value.dtype) else args[0]
        if isinstance(value.op, ops.BitCast):  # exact bits: a bfloat16 result is not rounded (NaN payloads)
            return self.temp(value.dtype, _bitcast(value.args[0].dtype, value.dtype, args[0]))
        text = self._compute(value, args)
        if _exact(value):  # (a bfloat16 value already: lm_bf16r is ~6 integer operations per element)
            rounded = False
        return self.temp(value.dtype, _round(value.dtype, text) if rounded else text)

    def _in_bounds(self, buffer: int, off: Expression) -> bool:
        """Whether ``off`` lies inside ``buffer`` for every value of the loop variables (constant sizes only)."""
        entry = self.r.program.buffers.get(buffer)
        if entry is None:
            return False
        size = 1
        for d in entry[0]:
            d = to_expr(d).to_int()
            if d is None:
                return False
            size *= d
        lo, hi = off.bounds()
        return lo is not None and hi is not None and 0 <= lo and hi < size

    def _masked(self, view: ShapeTracker, vars_, text: str, dtype: DType) -> str:
        _, valid = view.axis_expressions(vars_)
        if valid == 1:
            return text
        if valid == 0:
            return _zero(dtype)
        return f"(({self.index(valid)}) ? ({text}) : ({dtype.c_compute})0)"

    def _emit(self, value, vars_) -> str:
        if isinstance(value, Load):
            off, valid = value.view.axis_expressions(vars_)
            ptr = self.r.pointer(value.buffer)
            if valid == 0:  # statically masked out (a padded slot seen at a constant index)
                return _zero(value.dtype)
            read = f"{ptr}[{self.index(off)}]"
            if value.dtype == DType.bfloat16:  # the stored bits widened to float (exact)
                read = f"lm_bf16_to_f32({read})"
            if valid == 1:
                return self.temp(value.dtype, read)
            if self._in_bounds(value.buffer, off):
                # the address is valid even where the view masks the value out: load unconditionally and
                # select (branch-free, so the loop vectorizes; a conditional load cannot be if-converted)
                loaded = self.temp(value.dtype, read)
                return self.temp(value.dtype, f"({self.index(valid)}) ? {loaded} : ({value.dtype.c_compute})0")
            return self.temp(value.dtype, f"({self.index(valid)}) ? {read} : ({value.dtype.c_compute})0")
        if isinstance(value, ConstValue):
            if isinstance(value.value, Expression):
                text = _round(value.dtype, f"({value.dtype.c_compute})({self.index(value.value)})")
            else:
                text = self.r.constant(value.value, value.dtype)
            return self._masked(value.view, vars_, text, value.dtype)
        if isinstance(value, IotaValue):
            off, _ = value.view.axis_expressions(vars_)
            expr = value.expr.substitute("z", off) if "z" in value.expr.symbols() else value.expr
            text = _round(value.dtype, f"({value.dtype.c_compute})({self.index(expr)})")
            return self._masked(value.view, vars_, text, value.dtype)
        if isinstance(value, Compute):
            return self._emit_compute(value, vars_, rounded=True)
        if isinstance(value, GatherValue):
            idx = self.emit(value.index, vars_)
            ranges = getattr(self.r, "buffer_ranges", None)
            slots = gather_slots(value, ranges)
            if slots:
                # a few slots known statically (where(): 2): evaluate each slot at its constant index, where the
                # stack's masks fold away, and select -- no index arithmetic in the loop
                out = self.emit(value.data, vars_[:value.axis] + (to_expr(slots[-1]),) + vars_[value.axis + 1:])
                for k in reversed(slots[:-1]):
                    slot = self.emit(value.data, vars_[:value.axis] + (to_expr(k),) + vars_[value.axis + 1:])
                    out = self.temp(value.dtype, f"({idx} == {k}) ? {slot} : {out}")
                return out
            lo, hi = value_range(value.index, ranges)
            extent_expr = value.data_view.dims[value.axis]
            n = extent_expr.to_int()
            in_range = lo is not None and hi is not None and n is not None and 0 <= lo <= hi < n
            g = f"g{self.counter}"
            self.counter += 1
            self.lines.append(f"long long {g} = (long long)({idx});")
            if not in_range:
                self.lines.append(f"if ({g} < 0 || {g} >= {self.index(extent_expr)}) {{ err = 1; {g} = 0; }}")
            gsym = Expression.symbol(g, extent_expr - 1)  # out-of-range indices were clamped to 0 above
            gvars = vars_[:value.axis] + (gsym,) + vars_[value.axis + 1:]
            if value.data is None:
                return self.emit(Load(value.data_buffer, value.data_view, value.dtype), gvars)
            return self.emit(value.data, gvars)
        if isinstance(value, Remapped):
            if any(d == 0 for d in value.dims):  # an empty producer: every read of it is masked out (and the
                return _zero(value.dtype)        # index split below would divide by its zero extents)
            off, valid = value.view.axis_expressions(vars_)
            strides = ShapeTracker.contiguous_of(value.dims).strides
            # where the view masks the value out, ``off`` may lie outside the producer (a padded slot): wrap
            # the outer index too, so the producer is evaluated at some in-range position (its gathers read
            # real indices, not an out-of-range error) and the result is masked away
            inner = tuple(off // s if j == 0 and valid == 1 else (off // s) % d
                          for j, (s, d) in enumerate(zip(strides, value.dims)))
            text = self.emit(value.value, inner)
            return self._masked(value.view, vars_, text, value.dtype)
        raise NotImplementedError(type(value))

    def _compute(self, value: Compute, args) -> str:
        op, dtype = value.op, value.dtype
        half = dtype == DType.float16
        f = "" if dtype == DType.float64 else "f"

        def fn(name, x):
            fast = f"lm_{name}f" if name in ("exp2", "log2") else f"{name}f"
            if half:
                return f"(_Float16){fast}((float){x})"
            if dtype in (DType.float32, DType.bfloat16):  # (bfloat16: float operands, rounded by the caller)
                return f"{fast}({x})"
            return f"{name}({x})"

        if isinstance(op, ops.Log2):
            return fn("log2", args[0])
        if isinstance(op, ops.Exp2):
            return fn("exp2", args[0])
        if isinstance(op, ops.Sin):
            return fn("sin", args[0])
        if isinstance(op, ops.Sqrt):
            return fn("sqrt", args[0])
        if isinstance(op, ops.Recip):
            return f"(({dtype.c_compute})1 / {args[0]})"
        if isinstance(op, ops.Add):
            if dtype.is_int:
                return _wrapping(dtype, "+", args)
            return f"({args[0]} | {args[1]})" if dtype == DType.bool else f"({args[0]} + {args[1]})"
        if isinstance(op, ops.Mul):
            if dtype.is_int:
                return _wrapping(dtype, "*", args)
            return f"({args[0]} & {args[1]})" if dtype == DType.bool else f"({args[0]} * {args[1]})"
        if isinstance(op, ops.Bitwise):
            return _bitwise(op.kind, dtype, args)
        if isinstance(op, ops.Mod):
            if dtype == DType.uint64:
                return f"lm_umod({args[0]}, {args[1]}, &err)"
            if dtype.is_int:
                return f"({dtype.c_type})lm_imod({args[0]}, {args[1]}, &err)"
            if half:
                return f"(_Float16)lm_fmodf((float){args[0]}, (float){args[1]})"
            if dtype == DType.bfloat16:
                return f"lm_fmodf({args[0]}, {args[1]})"
            return f"lm_fmod{f}({args[0]}, {args[1]})"
        if isinstance(op, ops.LessThan):
            return f"({args[0]} < {args[1]})"
        if isinstance(op, ops.Cast):
            if dtype == DType.bool:
                return f"({args[0]} != 0)"
            # to bfloat16: through float32 (a double or a 64-bit integer rounds to float first, as the reference)
            return f"({dtype.c_compute})({args[0]})"
        raise NotImplementedError(str(op))


_BITS = {DType.float16: ("lm_bits_f16", "lm_f16_of"), DType.bfloat16: ("lm_bits_bf16", "lm_bf16_of"),
         DType.float32: ("lm_bits_f32", "lm_f32_of"), DType.float64: ("lm_bits_f64", "lm_f64_of")}


_NARROW_FLOATS = (DType.float32, DType.bfloat16, DType.float16)


def _float32_quotient(value):
    """``(a, b)`` when ``value`` is ``Cast(float32)(Cast(float64)(a) * Recip(Cast(float64)(b)))`` with ``a`` and ``b``
    float32 / bfloat16 / float16 (how the graph divides low-precision floats, see ``hl_ops.binary.div``: float64's
    ``a * (1/b)`` rounds to the correctly rounded float32 quotient, because a quotient of two 24-bit floats is at
    least 2^-49 relatively away from a float32 rounding midpoint and the float64 product is within 2^-52), so
    the float32 division ``a / b`` (IEEE: correctly rounded) gives the same bits; else None."""
    if not (isinstance(value.op, ops.Cast) and value.dtype == DType.float32 and len(value.args) == 1):
        return None
    mul = value.args[0]
    if not (isinstance(mul, Compute) and isinstance(mul.op, ops.Mul) and mul.dtype == DType.float64):
        return None

    def widened(x):  # the float32-or-narrower value x is Cast(float64) of
        if isinstance(x, Compute) and isinstance(x.op, ops.Cast) and x.dtype == DType.float64 and \
                len(x.args) == 1 and x.args[0].dtype in _NARROW_FLOATS:
            return x.args[0]
        return None

    for num, rec in (mul.args, mul.args[::-1]):
        if isinstance(rec, Compute) and isinstance(rec.op, ops.Recip) and rec.dtype == DType.float64:
            a, b = widened(num), widened(rec.args[0])
            if a is not None and b is not None:
                return a, b
    return None


def _bitcast(src: DType, dst: DType, x: str) -> str:
    """C text of a ``BitCast`` of the computed value ``x`` (bfloat16: a float holding a bfloat16) from ``src`` to
    ``dst`` (same width): through the unsigned integer of that width (integer conversions between the signed and
    unsigned types of one width keep the bits in GCC)."""
    u = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}[src.bits]
    bits = f"{_BITS[src][0]}({x})" if src.is_float else f"(({u})({x}))"
    return f"{_BITS[dst][1]}({bits})" if dst.is_float else f"(({dst.c_type})({bits}))"


def _zero_one(value) -> bool:
    """Whether ``value`` is a cast of a bool (0 or 1 in any type)."""
    return isinstance(value, Compute) and isinstance(value.op, ops.Cast) and value.args[0].dtype == DType.bool


def _exact(value: Compute) -> bool:
    """Whether the primitive ``value``'s result, computed in float, is a bfloat16 value already (its rounding a
    no-op): a cast of a bool (0 or 1: autocast's masks, relu's gradient), a cast of a bfloat16-valued float (a
    bfloat16 widened and narrowed again: autocast's casts around a float32 op that was dropped), a bfloat16 times
    a bool cast (x or +-0: relu's and max-pool's gradients under autocast)."""
    if isinstance(value.op, ops.Cast):
        return _bf16_valued(value.args[0])  # (a bool or a bfloat16-valued float)
    if isinstance(value.op, ops.Mul):
        a, b = value.args
        return _zero_one(a) and _bf16_valued(b) or _zero_one(b) and _bf16_valued(a)
    return False


def _bf16_valued(value) -> bool:
    """Whether every value ``value`` takes is a bfloat16 value: a bfloat16 (loaded, or computed and rounded), a
    bool, or a cast of one to a float type."""
    if value.dtype in (DType.bfloat16, DType.bool):
        return True
    return value.dtype.is_float and isinstance(value, Compute) and isinstance(value.op, ops.Cast) and \
        _bf16_valued(value.args[0])


def _round(dtype: DType, text: str) -> str:
    """``text`` (a float) rounded to bfloat16 and widened back when ``dtype`` is bfloat16, else as it is."""
    return f"lm_bf16r({text})" if dtype == DType.bfloat16 else text


def _wide_unsigned(dtype: DType) -> str:
    """The unsigned C type integer arithmetic of ``dtype`` is done in: ``unsigned int`` up to 32 bits (narrower
    unsigned operands would be promoted to *signed* int, where uint16 * uint16 can overflow), else 64-bit."""
    return "unsigned long long" if dtype.bits == 64 else "unsigned int"


def _wrapping(dtype: DType, op: str, args) -> str:
    """``a op b`` in an integer ``dtype`` with two's-complement wrap-around: computed in an unsigned type (signed
    overflow is undefined behaviour in C) and converted back (GCC defines the narrowing as modulo 2^N)."""
    u = _wide_unsigned(dtype)
    return f"(({dtype.c_type})(({u}){args[0]} {op} ({u}){args[1]}))"


def _bitwise(kind: str, dtype: DType, args) -> str:
    """C text of a ``Bitwise`` primitive (PyTorch's CPU results for out-of-range shift amounts)."""
    a, b = args
    if kind in ("and", "or", "xor"):
        text = f"({a} {dict(zip(('and', 'or', 'xor'), '&|^'))[kind]} {b})"
        return text if dtype == DType.bool else f"(({dtype.c_type}){text})"
    bits = dtype.bits
    bad = f"({b} < 0 || {b} >= {bits})" if dtype.is_signed else f"({b} >= {bits})"
    if kind == "shl":
        return f"({bad} ? ({dtype.c_type})0 : ({dtype.c_type})(({_wide_unsigned(dtype)}){a} << {b}))"
    if dtype.is_signed:  # arithmetic shift (GCC's >> on negative values); out of range: the sign fill
        return f"(({dtype.c_type})({a} >> ({bad} ? {bits - 1} : {b})))"
    return f"({bad} ? ({dtype.c_type})0 : ({dtype.c_type})({a} >> {b}))"
