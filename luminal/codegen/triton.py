"""Render a lowered :class:`~luminal.codegen.kernel.Program` as Triton source: one ``@triton.jit`` function per
distinct kernel, for the GPU runtime (:mod:`luminal.runtime.gpu`). Kernels whose source is the same up to their
name (every layer of a transformer stack after the first) share one function, compiled once: a 6-layer BERT
encoder's 190 kernels are 40 functions.

The kernels are the CPU backend's (same lowering, same fusion); only the rendering differs:

* **Elementwise** kernels: each program computes ``BLOCK`` consecutive outputs of the flat output index
  ``offs``; the index variables ``i0 .. in-1`` are unravelled from it with the (possibly symbolic) dims, and
  the kernel's value tree is evaluated on those blocks (``Load`` through views: the offset and validity
  expressions of the :class:`~luminal.shape.ShapeTracker`, rendered like the C backend's, floor division /
  modulo included; constants, iota, every elementwise primitive, gathers, remapped producers).
* **Reductions** (sum / max over one axis): a program owns ``BLOCK_M`` outputs and walks the reduced extent in
  chunks of ``BLOCK_K`` (a loop; one chunk when the extent is small and constant), accumulating a
  ``[BLOCK_M, BLOCK_K]`` tile that is reduced across lanes at the end. Sums of float16 accumulate in float32
  (as the reference does); max propagates NaN and gives ``-inf`` (the int minimum) on an empty axis.
* **GEMMs**: ``C[b] = A[b] @ B[b]^T`` through the operands' strided views on ``BLOCK_M x BLOCK_N`` output tiles,
  ``tl.dot`` over ``BLOCK_K`` slices (float32: ``input_precision="ieee"``, i.e. no TF32, so results match the
  reference to float32 rounding; float64: a broadcast multiply and ``tl.sum``), masks on the ragged edges; the
  batch index and the tile index share grid axis 0. The elementwise kernel after an unbatched GEMM that reads
  the product only at its own element (:func:`~luminal.codegen.groups.epilogue_value`: bias, activation,
  rounding) is computed on the accumulator tile in the GEMM's launch (its own function stays, for a product
  computed by cuBLAS: ``Launch.epilogue``; ``TritonProgram.fused`` tells the arena planner).
* **Row groups** (softmax / layer norm's reductions and row-wise kernels, :mod:`luminal.codegen.groups`, as the C
  backend's loop nests) are one kernel holding its rows in registers (:mod:`luminal.codegen.triton_reduce`)
  when the row is one constant chunk and the outputs float32/float64; **runs** of elementwise kernels over the
  same elements (an optimizer's updates) are one kernel. Lowering needs no switch: these are renderer
  decisions, not part of the kernel IR.

Semantics follow the reference exactly where the hardware allows: integer floor division/modulo (Triton's
``//``/``%`` truncate, like C, so the same correction as ``LUMINAL_FLOORDIV``/``LUMINAL_FLOORMOD`` is applied
where an operand may be negative), float modulo with the divisor's sign, float->int casts truncating, bool
buffers stored as one byte, bfloat16 buffers as bit patterns (computed in float32, every result rounded to nearest
even, as the C backend), ``1/x`` and float32 ``sqrt`` correctly rounded (``div_rn``/``sqrt_rn``), float16
transcendentals computed in float32. ``exp2``/``log2``/``sin`` use Triton's functions (on a GPU they may differ
from numpy by a few ulp; in the interpreter they are numpy's).

Errors (a gather index out of range, an integer modulo by zero) are written into a one-element int32 error
buffer (1 and 2, the C backend's codes) that the runtime reads after a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import ops
from ..dtype import DType, wrap_int
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import (Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, IotaValue, Load, Program,
                     ReduceKernel, Remapped, ScatterKernel)
from .triton_support import (HELPERS, TL_TYPE, fmod_helper, ExprRenderer, _bf16_value, _float_text, _int_text,
                             _round_bf16, _sym_name)
from .triton_gemm import GemmRendering
from .triton_reduce import ReduceRendering, row_group_fusable
from .triton_attention import AttentionRendering, find_attention
from .groups import epilogue_value, kernel_groups
from .values import buffer_uses, gather_slots, kernel_buffers, kernel_symbols, program_symbols, value_range

ELEMENTWISE_BLOCK = 1024   # outputs per program of an elementwise kernel

# ---------------------------------------------------------------------------- kernel bodies
class BodyWriter:
    """Emits the statements of one kernel body as SSA temporaries over blocks of shape ``shape`` (text such
    as ``"[BLOCK]"``); ``live`` names the mask of the lanes that hold real elements, ``zi`` an int64 zero
    block of the body's shape (broadcasts scalars), ``err`` the error-buffer pointer."""

    def __init__(self, renderer: "TritonRenderer", shape: str, live: str = "live", zi: str = "zi",
                 indent: str = "    "):
        self.r = renderer
        self.shape = shape
        self.live = live
        self.zi = zi
        self.indent = indent
        self.lines: list[str] = []
        self.memo: dict = {}
        self.counter = 0
        self.ex = renderer.ex
        self.substitute: dict[int, str] = {}  # buffer -> the name of a block holding it at the body's index
        self.loads: dict[str, str] = {}  # load expression -> the temporary holding it

    # -- helpers
    def temp(self, expr: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = {expr}")
        return name

    def zero(self, dtype: DType) -> str:
        return f"tl.zeros({self.shape}, {TL_TYPE[dtype]})"

    def const(self, value, dtype: DType) -> str:
        if dtype == DType.bool:
            return f"tl.full({self.shape}, {1 if value else 0}, tl.int1)"
        if dtype.is_int:
            if wrap_int(value, dtype) >= 2 ** 63:  # a uint64 above int64's range: its int64 bit pattern
                return f"tl.full({self.shape}, {_int_text(value, dtype)}, tl.int64).to(tl.uint64, bitcast=True)"
            return f"tl.full({self.shape}, {_int_text(value, dtype)}, {TL_TYPE[dtype]})"
        if dtype == DType.bfloat16:  # a Python number rounds to float32, then to bfloat16 (as the reference)
            value = _bf16_value(value)
        return f"tl.full({self.shape}, {_float_text(float(value))}, {TL_TYPE[dtype]})"

    def block_int(self, e: Expression) -> str:
        """An int64 block of the body's shape holding ``e``."""
        return f"({self.ex.int_(e)} + {self.zi})"

    def masked(self, valid: Expression, text: str, dtype: DType) -> str:
        if valid == 1:
            return text
        if valid == 0:
            return self.zero(dtype)
        return self.temp(f"tl.where({self.ex.bool_(valid)}, {text}, {self.zero(dtype)})")

    def error(self, condition: str, code: int) -> None:
        """Record error ``code`` where ``condition`` holds in a live lane."""
        self.lines.append(f"{self.indent}tl.store(err_ptr + {self.zi}, tl.full({self.shape}, {code}, tl.int32), "
                          f"mask={self.live} & ({condition}))")

    def load(self, buffer: int, view: ShapeTracker, vars_, dtype: DType) -> str:
        off, valid = view.axis_expressions(vars_)
        if buffer in self.substitute:  # a value the kernel holds already (a GEMM's accumulator in its epilogue),
            return self.masked(valid, self.substitute[buffer], dtype)  # read at its own element where valid
        if valid == 0:
            return self.zero(dtype)
        mask = self.live if valid == 1 else f"{self.live} & {self.ex.bool_(valid)}"
        ptr = self.r.pointer(buffer)
        loaded = f"tl.load({ptr} + {self.block_int(off)}, mask={mask}, other=0)"
        if dtype == DType.bool:
            loaded = f"({loaded} != 0)"
        elif dtype == DType.bfloat16:
            loaded = f"_lm_bf16_load({loaded})"
        if loaded not in self.loads:  # the same element read twice (x * x; a gradient read by each update of a
            self.loads[loaded] = self.temp(loaded)  # run): one load (nothing this kernel writes is loaded)
        return self.loads[loaded]

    # -- values
    def emit(self, value, vars_: tuple) -> str:
        key = (id(value), vars_)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        out = self._emit(value, vars_)
        self.memo[key] = (value, out)  # keeps value alive so its id stays unique
        return out

    def _emit(self, value, vars_) -> str:
        if isinstance(value, Load):
            return self.load(value.buffer, value.view, vars_, value.dtype)
        if isinstance(value, ConstValue):
            if isinstance(value.value, Expression):
                block = self.block_int(value.value)
                cast = f"{block} != 0" if value.dtype == DType.bool else f"{block}.to({TL_TYPE[value.dtype]})"
                text = self.temp(_round_bf16(cast, value.dtype))
            else:
                text = self.temp(self.const(value.value, value.dtype))
            _, valid = value.view.axis_expressions(vars_)
            return self.masked(valid, text, value.dtype)
        if isinstance(value, IotaValue):
            off, valid = value.view.axis_expressions(vars_)
            expr = value.expr.substitute("z", off) if "z" in value.expr.symbols() else value.expr
            text = self.temp(_round_bf16(f"{self.block_int(expr)}.to({TL_TYPE[value.dtype]})", value.dtype))
            return self.masked(valid, text, value.dtype)
        if isinstance(value, Compute):
            args = [self.emit(a, vars_) for a in value.args]
            zero = self.zero(value.dtype)
            if isinstance(value.op, ops.Add) and zero in args:
                # x + (a statically masked-out 0): a where() branch read at its slot (as the C emitter does)
                return args[1] if args[0] == zero else args[0]
            return self._compute(value, args)
        if isinstance(value, GatherValue):
            return self._gather(value, vars_)
        if isinstance(value, Remapped):
            if any(d == 0 for d in value.dims):
                return self.zero(value.dtype)
            off, valid = value.view.axis_expressions(vars_)
            strides = ShapeTracker.contiguous_of(value.dims).strides
            # where the view masks the value out, ``off`` may lie outside the producer (a padded slot): wrap
            # the outer index too, so the producer is evaluated at some in-range position (its gathers read
            # real indices, not an out-of-range error) and the result is masked away
            inner = tuple(off // s if j == 0 and valid == 1 else (off // s) % d
                          for j, (s, d) in enumerate(zip(strides, value.dims)))
            text = self.emit(value.value, inner)
            return self.masked(valid, text, value.dtype)
        raise NotImplementedError(f"Triton backend: no rendering for kernel value {type(value).__name__}")

    def _gather(self, value: GatherValue, vars_) -> str:
        idx = self.emit(value.index, vars_)
        slots = gather_slots(value)
        if slots:  # a few statically known slots (where()): a chain of selects
            out = self.emit(value.data, vars_[:value.axis] + (to_expr(slots[-1]),) + vars_[value.axis + 1:])
            for k in reversed(slots[:-1]):
                slot = self.emit(value.data, vars_[:value.axis] + (to_expr(k),) + vars_[value.axis + 1:])
                out = self.temp(f"tl.where({idx} == {k}, {slot}, {out})")
            return out
        lo, hi = value_range(value.index)
        extent = value.data_view.dims[value.axis]
        n = extent.to_int()
        g = f"lm_g{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{g} = {idx}.to(tl.int64)")
        if not (lo is not None and hi is not None and n is not None and 0 <= lo <= hi < n):
            bad = f"({g} < 0) | ({g} >= {self.ex.int_(extent)})"
            self.error(bad, 1)
            self.lines.append(f"{self.indent}{g} = tl.where({bad}, 0, {g})")
        gsym = Expression.symbol(g, extent - 1)  # out-of-range indices were clamped to 0 above
        gvars = vars_[:value.axis] + (gsym,) + vars_[value.axis + 1:]
        if value.data is None:
            return self.emit(Load(value.data_buffer, value.data_view, value.dtype), gvars)
        return self.emit(value.data, gvars)

    def _compute(self, value: Compute, args) -> str:
        if isinstance(value.op, ops.BitCast):  # exact bits: a bfloat16 result is not rounded (NaN payloads)
            return self._bitcast(value.args[0].dtype, value.dtype, args[0])
        if value.dtype != DType.bfloat16:
            return self._compute_raw(value, args)
        # bfloat16: computed in float32, rounded to bfloat16 once (a cast from float64 or a 64-bit integer rounds
        # to float32 first, as the reference)
        if isinstance(value.op, ops.LessThan):
            return self._compute_raw(value, args)
        if isinstance(value.op, ops.Cast):
            src = value.args[0].dtype
            if src == DType.bfloat16:
                return args[0]
            if src == DType.bool:
                return self.temp(f"{args[0]}.to(tl.float32)")
            return self.temp(f"_lm_bf16r({args[0]}.to(tl.float32))")
        raw = self._compute_raw(value, args)
        if args and all(a.dtype == DType.bfloat16 for a in value.args):  # NaN bits as the reference's
            raw = self.temp(f"_lm_nan86({raw}, {args[0]}, {args[-1]})")
        return self.temp(f"_lm_bf16r({raw})")

    def _compute_raw(self, value: Compute, args) -> str:
        op, dtype = value.op, value.dtype
        tt = TL_TYPE[dtype]
        if isinstance(op, (ops.Log2, ops.Exp2, ops.Sin, ops.Sqrt, ops.Recip)):
            x = args[0]
            if dtype == DType.float16:  # computed in float32, rounded once (as the C backend does)
                x = f"{x}.to(tl.float32)"
            wide = DType.float64 if dtype == DType.float64 else DType.float32
            if dtype == DType.bfloat16 and not isinstance(op, (ops.Sqrt, ops.Recip)):
                # a GPU's float32 log2/exp2/sin are within an ulp or two, which moves some bfloat16 roundings
                # off the reference's (a correctly rounded float32 value rounded to bfloat16): computed in
                # float64 and rounded to float32 first, the float32 value is the correctly rounded one
                fn = {ops.Log2: 'log2', ops.Exp2: 'exp2', ops.Sin: 'sin'}[type(op)]
                return self.temp(f"tl.{fn}({x}.to(tl.float64)).to(tl.float32)")
            if isinstance(op, ops.Recip):
                text = f"tl.div_rn(tl.full({self.shape}, 1.0, tl.float32), {x})" if wide == DType.float32 \
                    else f"(1.0 / {x})"
            elif isinstance(op, ops.Sqrt):
                text = f"tl.sqrt_rn({x})" if wide == DType.float32 else f"tl.sqrt({x})"
            else:
                text = f"tl.{ {ops.Log2: 'log2', ops.Exp2: 'exp2', ops.Sin: 'sin'}[type(op)]}({x})"
            if dtype == DType.float16:
                text = f"({text}).to(tl.float16)"
            return self.temp(text)
        a = args[0]
        b = args[1] if len(args) > 1 else None
        if isinstance(op, ops.Add):
            return self.temp(f"{a} | {b}" if dtype == DType.bool else f"{a} + {b}")
        if isinstance(op, ops.Mul):
            return self.temp(f"{a} & {b}" if dtype == DType.bool else f"{a} * {b}")
        if isinstance(op, ops.LessThan):
            if value.args[0].dtype == DType.bool:
                return self.temp(f"{a}.to(tl.int8) < {b}.to(tl.int8)")
            return self.temp(f"{a} < {b}")
        if isinstance(op, ops.Bitwise):
            return self._bitwise(op.kind, dtype, a, b)
        if isinstance(op, ops.Mod):
            if dtype.is_int:
                self.error(f"{b} == 0", 2)
                # x % -1 is 0 = x % 1 (and INT_MIN % -1 would be undefined on the device)
                cond = f"({b} == 0) | ({b} == -1)" if dtype.is_signed else f"{b} == 0"
                bs = self.temp(f"tl.where({cond}, 1, {b}).to({tt})")
                r = self.temp(f"{a} % {bs}")
                return self.temp(f"tl.where(({r} != 0) & (({r} < 0) != ({bs} < 0)), {r} + {bs}, {r})")
            if dtype == DType.float16:
                a, b = self.temp(f"{a}.to(tl.float32)"), self.temp(f"{b}.to(tl.float32)")
            r = self.temp(f"_lm_fmod({a}, {b})")  # C fmod, exact
            out = f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"
            return self.temp(f"({out}).to(tl.float16)" if dtype == DType.float16 else out)
        if isinstance(op, ops.Cast):
            if dtype == DType.bool:
                return self.temp(f"{a} != 0")
            src = value.args[0].dtype
            if src.is_float and dtype.is_int and dtype != DType.uint64:
                # x86's conversion (the reference's): 32- or 64-bit, out of range -> the minimum; narrower wrap
                wide = DType.int64 if dtype.bits == 64 or dtype == DType.uint32 else DType.int32
                lim = float(2 ** (wide.bits - 1))
                x = f"{a}.to(tl.float32)" if src == DType.float16 else a
                ok = self.temp(f"({x} >= {-lim!r}) & ({x} < {lim!r})")  # (False for NaN)
                low = _int_text(-2 ** (wide.bits - 1), wide)
                text = f"tl.where({ok}, tl.where({ok}, {x}, 0).to({TL_TYPE[wide]}), {low})"
                return self.temp(text if wide == dtype else f"({text}).to({tt})")
            return self.temp(f"{a}.to({tt})")
        raise NotImplementedError(f"Triton backend: no rendering for primitive {op}")

    def _bitcast(self, src: DType, dst: DType, a: str) -> str:
        """A ``BitCast`` (same width; a bfloat16 value is a float32 whose low 16 bits are zero: its bits are the top
        half)."""
        if DType.bfloat16 not in (src, dst):
            return self.temp(f"{a}.to({TL_TYPE[dst]}, bitcast=True)")
        bits = f"_lm_bf16_bits({a})" if src == DType.bfloat16 else f"{a}.to(tl.uint16, bitcast=True)"
        if dst == DType.bfloat16:
            return self.temp(f"_lm_bf16_load({bits})")
        return self.temp(f"{bits}.to({TL_TYPE[dst]}, bitcast=True)")

    def _bitwise(self, kind: str, dtype: DType, a: str, b: str) -> str:
        """A ``Bitwise`` primitive (shift amounts out of range give PyTorch's CPU results, as in the C backend)."""
        if kind in ("and", "or", "xor"):
            return self.temp(f"{a} {dict(zip(('and', 'or', 'xor'), '&|^'))[kind]} {b}")
        tt, bits = TL_TYPE[dtype], dtype.bits
        bad = self.temp(f"({b} < 0) | ({b} >= {bits})" if dtype.is_signed else f"{b} >= {bits}")
        if kind == "shr" and dtype.is_signed:
            s = self.temp(f"tl.where({bad}, tl.full({self.shape}, {bits - 1}, {tt}), {b})")
            return self.temp(f"({a} >> {s}).to({tt})")
        s = self.temp(f"tl.where({bad}, {self.zero(dtype)}, {b})")
        shifted = self.temp(f"({a} << {s}).to({tt})" if kind == "shl" else f"({a} >> {s}).to({tt})")
        return self.temp(f"tl.where({bad}, {self.zero(dtype)}, {shifted})")


# ---------------------------------------------------------------------------- program
@dataclass
class Launch:
    """How the runtime launches one generated kernel: the function ``name``, its pointer arguments (buffer ids,
    in order), the graph symbols it takes, extra integer arguments (expressions evaluated at the bindings),
    its constexpr block sizes and its 1-D grid (``ceil(grid[0] / grid[1])`` programs; ``grid[0]`` an expression)."""
    name: str
    kind: str
    buffers: list
    symbols: list
    extra: list
    constexprs: dict
    grid: tuple
    out: int = -1
    # a GEMM computing the next kernel as its epilogue: that kernel's own launch, run after the GEMM when cuBLAS
    # computes the product instead (the fused Triton kernel needs none)
    epilogue: "Launch | None" = None
    # a row group over a symbolic extent: the extent (its block sizes are chosen at each binding, the grid over
    # ``grid[0]`` rows) and the launches of its kernels one by one, run instead where the extent is longer than
    # one chunk
    row_extent: "Expression | None" = None
    fallback: list = field(default_factory=list)


def _anonymous(text: str, name: str) -> str:
    """A kernel's source without its function name (``kernel_7``, ``kernel_7_zero``) and the buffer id in its
    header comment: two kernels with the same anonymous text are the same function."""
    return re.sub(r"-> buffer \d+", "->", re.sub(rf"\b{name}(?![0-9])", "kernel", text))


@dataclass
class TritonProgram:
    """Triton source of a program plus the launch of each kernel (in execution order)."""
    source: str
    launches: list = field(default_factory=list)
    symbols: list = field(default_factory=list)
    fused: dict = field(default_factory=dict)  # kernel index -> the kernel index whose launch computes it
    unwritten: frozenset = frozenset()  # buffers no launch writes (a fused attention's scores, probabilities)


class TritonRenderer(GemmRendering, ReduceRendering, AttentionRendering):
    """Turns a :class:`Program` into a :class:`TritonProgram` (see the module docstring)."""

    def __init__(self, program: Program, interpret: bool = False):
        self.program = program
        self.interpret = interpret
        self.symbols = program_symbols(program)
        self.names = {s: _sym_name(s) for s in self.symbols}
        self.ex = ExprRenderer(self.names)
        self._ptr: dict[int, str] = {}

    def pointer(self, buffer: int) -> str:
        return self._ptr[buffer]

    def render(self) -> TritonProgram:
        parts = ["import triton", "import triton.language as tl",
                 "from triton.language.extra import libdevice  # noqa: F401 (exact fmod on the device)", "", "",
                 HELPERS, "", fmod_helper(self.interpret)]
        launches = []
        first_of: dict[str, str] = {}  # a kernel's text with its name taken out -> the function that has it
        kernels = self.program.kernels
        _, readers, pinned = buffer_uses(self.program)
        # the renderers' groups (kernel_groups): a GEMM and its epilogue, runs of elementwise kernels over the same
        # elements, row groups; first index -> the epilogue kernel / the run's other kernels / the group's indices
        epilogues, runs, row_groups, unread = {}, {}, {}, set()
        in_launch: dict[int, int] = {}  # kernel index -> the kernel whose launch computes it
        for group in kernel_groups(self.program, batched_epilogues=True):
            if len(group) < 2:
                continue
            members = [kernels[i] for i in group]
            if isinstance(members[0], GemmKernel):
                epilogues[group[0]] = members[1]
            elif all(isinstance(m, ElementwiseKernel) for m in members):
                runs[group[0]] = members[1:]
            elif isinstance(members[0], ReduceKernel) and row_group_fusable(members):
                row_groups[group[0]] = group
            else:
                continue
            in_launch.update({i: group[0] for i in group[1:]})
            # outputs read only inside their group (a product its epilogue reads, an exp that the sum and the
            # normalize read) are not stored
            unread.update(m.out for m in members if m.out not in pinned and set(readers.get(m.out, ())) <= set(group))
        # attention chains (scores GEMM, softmax row group, probabilities GEMM) computed by one fused kernel at
        # the second GEMM's place
        attention = find_attention(self.program, [row_groups[k] for k in sorted(row_groups)], readers, pinned,
                                   epilogues)
        for g1, (g0, group) in attention.items():
            row_groups.pop(group[0])
            in_launch.update({i: g1 for i in [g0, *group]})
        # (and a product only its epilogue reads)
        unwritten = frozenset([kernels[i].out for g0, group in attention.values() for i in (g0, *group)]
                              + [kernels[g1].out for g1 in attention if g1 in epilogues and kernels[g1].out in unread])

        def add(k, text: str, launch) -> list:
            """Put the function of kernel ``k`` (its index, or a label: ``5_loop``) into the module unless an
            earlier kernel has the same one (the same layer again: its launches then call that function);
            returns the launches."""
            launch = launch if isinstance(launch, list) else [launch]
            own = f"kernel_{k}"
            first = first_of.setdefault(_anonymous(text, own), own)
            if first == own:
                parts.extend(["", text])
            else:
                for item in launch:
                    item.name = first + item.name[len(own):]
            return launch

        for k, kernel in enumerate(kernels):
            if k in in_launch:
                continue  # computed in an earlier kernel's launch
            epilogue = None
            if k in epilogues:
                epilogue = (epilogues[k], *epilogue_value(kernel, epilogues[k], batched=True), kernel.out not in unread)
            if k in attention:
                g0, group = attention[k]
                text, launch = self._attention(k, kernels[g0], [kernels[i] for i in group], kernel, epilogue)
            elif isinstance(kernel, ElementwiseKernel):
                text, launch = self._elementwise(k, kernel, runs.get(k, ()), unread)
            elif k in row_groups:
                text, launch = self._row_group(k, [kernels[i] for i in row_groups[k]], unread)
            elif k in epilogues:
                text, launch = self._gemm(k, kernel, epilogue)
            else:
                text, launch = self._single(k, kernel)
            launch = add(k, text, launch)
            if k in epilogues and k not in attention:  # the epilogue's own function, for a product computed by cuBLAS
                launch[0].epilogue = add(k + 1, *self._single(k + 1, epilogues[k]))[0]
            if k in row_groups and launch[0].row_extent is not None:  # the group looping over long rows
                launch[0].fallback = add(f"{k}_loop", *self._row_group(f"{k}_loop", [kernels[i] for i in row_groups[k]],
                                                                        unread, looped=True))
            launches += launch
        return TritonProgram("\n".join(parts) + "\n", launches, self.symbols, in_launch, unwritten)

    def _single(self, k, kernel):
        """The source and launch(es) of kernel ``k`` rendered on its own (``k``: its index, or a label for a
        second rendering of it)."""
        if isinstance(kernel, ElementwiseKernel):
            return self._elementwise(k, kernel)
        if isinstance(kernel, ReduceKernel):
            return self._reduce(k, kernel)
        if isinstance(kernel, GemmKernel):
            return self._gemm(k, kernel)
        if isinstance(kernel, ScatterKernel):
            return self._scatter(k, kernel)
        raise NotImplementedError(f"Triton backend: no rendering for kernel kind {type(kernel).__name__}")

    # -- shared pieces
    def _header(self, k: int, kernel, extra: list[str], constexprs: list[str], also=()):
        """The ``def`` line (pointers, error buffer, symbols, extra ints, constexprs) and the symbol casts.
        ``also``: kernels computed in the same function (a GEMM's epilogue, the rest of a run of elementwise
        kernels), whose buffers and symbols follow."""
        if isinstance(kernel, GemmKernel):
            buffers = list(dict.fromkeys([kernel.out, kernel.a, kernel.b]))  # (a @ a.T reads one buffer twice)
        else:
            buffers = [kernel.out] + sorted(b for b in kernel_buffers(kernel) if b != kernel.out)
        syms = set()
        for each in (kernel, *also):
            if each is not kernel:
                buffers = list(dict.fromkeys(buffers + [each.out] + sorted(kernel_buffers(each))))
            syms |= {s for s in kernel_symbols(each) if s != "z"}
            for d in each.dims:
                syms |= set(d.symbols())
        syms = sorted(syms)
        self._ptr = {b: f"b{j}" for j, b in enumerate(buffers)}
        ints = [self.names[s] for s in syms] + extra
        args = [self._ptr[b] for b in buffers] + ["err_ptr"] + ints + [f"{c}: tl.constexpr" for c in constexprs]
        dns = "" if not ints else f"(do_not_specialize=[{', '.join(repr(i) for i in ints)}])"
        lines = [f"@triton.jit{dns}", f"def kernel_{k}({', '.join(args)}):"]
        label = {ElementwiseKernel: "elementwise", ReduceKernel: "reduce", GemmKernel: "gemm",
                 ScatterKernel: "scatter"}[type(kernel)]
        lines.append(f"    # {label} -> buffer {kernel.out}, dims {[str(d) for d in kernel.dims]}")
        for i in ints:  # int64 index arithmetic throughout
            lines.append(f"    {i} = {i}.to(tl.int64)")
        return lines, buffers, syms

    def _unravel(self, dims, flat: str, prefix: str, indent: str = "    ") -> tuple[list[str], tuple]:
        """Statements that split the flat index ``flat`` into one variable per axis of ``dims`` (size-1 axes are
        the constant 0) and the index variables as expressions."""
        lines, vars_ = [], []
        acc = to_expr(1)
        for j in range(len(dims) - 1, -1, -1):
            d = dims[j]
            if d == 1:
                vars_.append(to_expr(0))
                continue
            name = f"{prefix}{j}"
            part = flat if acc == 1 else f"({flat} // {self.ex.int_(acc)})"
            outer = any(dims[i] != 1 for i in range(j))
            lines.append(f"{indent}{name} = {part}" + (f" % {self.ex.int_(d)}" if outer else ""))
            vars_.append(Expression.symbol(name, d - 1))
            acc = acc * d
        return lines, tuple(reversed(vars_))

    @staticmethod
    def _numel(dims) -> Expression:
        n = to_expr(1)
        for d in dims:
            n = n * d
        return n

    def _store(self, kernel, value_text: str, offs: str, mask: str, indent="    ") -> str:
        ptr = self.pointer(kernel.out)
        if kernel.dtype == DType.bool:
            value_text = f"{value_text}.to(tl.uint8)"
        elif kernel.dtype == DType.bfloat16:  # (a float32 sum rounds here, once; other values are bfloat16 already)
            value_text = f"_lm_bf16_store({value_text})"
        return f"{indent}tl.store({ptr} + {offs}, {value_text}, mask={mask})"

    # -- kernels
    def _constant_sizes(self, sizes: dict, syms) -> list[str]:
        """Statements computing each size in the kernel (the argument stays, for one launch interface): a known
        one as a constant, a symbolic one from the symbol arguments (``s_b * s_s * 64``) when the kernel takes
        them. Triton then knows what divides the size (64 here, where an ``int64`` argument that is not
        specialized tells it nothing), proves masks uniform over aligned runs and vectorizes / pipelines the
        loads. The zeros that broadcast offsets (``zi``) are ``tl.zeros`` for the same reason: ``offs * 0``
        hid the offsets' contiguity."""
        out = []
        for name, size in sizes.items():
            if size.to_int() is not None:
                out.append(f"    {name} = {size.to_int()}")
            elif set(size.symbols()) <= set(syms):
                out.append(f"    {name} = {self.ex.int_(size)}")
        return out

    def _elementwise(self, k: int, kernel: ElementwiseKernel, run=(), unread=frozenset()):
        """An elementwise kernel; ``run``: the kernels after it in a run over the same elements
        (:func:`~luminal.codegen.groups.kernel_groups`: an optimizer's weight and moment updates), computed in the
        same function, each reading the outputs of the earlier ones only at its own element: those values are
        taken from the registers, not loaded again. Outputs in ``unread`` (read only by the run) are not
        stored."""
        lines, buffers, syms = self._header(k, kernel, ["numel"], ["BLOCK"], also=run)
        lines += self._constant_sizes({"numel": self._numel(kernel.dims)}, syms)
        lines += ["    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                  "    live = offs < numel",
                  "    zi = tl.zeros([BLOCK], tl.int64)"]
        unravel, vars_ = self._unravel(kernel.dims, "offs", "lm_i")
        lines += unravel
        w = BodyWriter(self, "[BLOCK]")
        for member in (kernel, *run):
            result = w.emit(member.value, vars_)
            stored = f"{result}.to({TL_TYPE[member.dtype]})" if member.dtype != DType.bool else result
            if member.out not in unread:
                w.lines.append(self._store(member, stored, "offs", "live"))
            # a later member reads this output as stored: bfloat16 values are bfloat16 already (float32 blocks,
            # as loads give them), other types are what the store converts to
            w.substitute[member.out] = result if member.dtype in (DType.bool, DType.bfloat16) else w.temp(stored)
        lines += w.lines
        numel = self._numel(kernel.dims)
        launch = Launch(f"kernel_{k}", "elementwise", buffers, syms, [numel], {"BLOCK": ELEMENTWISE_BLOCK},
                        (numel, ELEMENTWISE_BLOCK), kernel.out)
        return "\n".join(lines), launch


def render(program: Program, interpret: bool = False) -> TritonProgram:
    """The Triton source and launches of ``program``; ``interpret``: for Triton's interpreter (which has no
    libdevice)."""
    return TritonRenderer(program, interpret).render()
