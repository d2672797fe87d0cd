"""Render a lowered :class:`Program` as one C translation unit with one entry point.

``int luminal_run(void **buffers, const long long *symbols)`` runs every kernel in
order and returns 0, or an error code (1: gather index out of range, 2: integer
modulo by zero). Buffers are indexed as listed in :attr:`CProgram.buffer_order`;
symbols (bound dims) in :attr:`CProgram.symbols` order. Kernels are OpenMP
parallel loops (static schedule, skipped below ``PARALLEL_THRESHOLD`` elements)
whose innermost loop walks contiguous memory where the views allow;
elementwise iteration spaces are flattened whenever every view in the body can
be merged affinely. GEMMs call OpenBLAS (``scipy_cblas_[sd]gemm``) when the
operand layouts are BLAS-compatible at run time and a plain loop otherwise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .. import ops
from ..dtype import DType
from ..shape import C_PRELUDE, Expression, ShapeTracker, to_expr
from .kernel import (Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, IotaValue, Load, Program,
                     ReduceKernel, Remapped)

PARALLEL_THRESHOLD = 32768

_HELPERS = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <float.h>
#include <limits.h>
#ifdef LUMINAL_BLAS
#include <cblas.h>
#endif
static inline float lm_fmodf(float a, float b) { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
static inline double lm_fmod(double a, double b) { double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
static inline long long lm_imod(long long a, long long b, int *err) { if (b == 0) { *err = 2; return 0; } long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline float lm_maxf(float acc, float v) { return (v > acc || v != v) ? v : acc; }
static inline double lm_max(double acc, double v) { return (v > acc || v != v) ? v : acc; }
static inline long long lm_maxi(long long acc, long long v) { return v > acc ? v : acc; }
"""


@dataclass
class CProgram:
    """C source plus the calling convention of its entry point."""
    source: str
    buffer_order: list
    symbols: list
    uses_blas: bool


def _c_name(symbol: str) -> str:
    return "s_" + re.sub(r"[^0-9A-Za-z_]", "_", symbol)


def _literal(value, dtype: DType) -> str:
    if dtype == DType.bool:
        return "1" if value else "0"
    if dtype.is_int:
        return f"{int(value)}LL"
    v = float(value)
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(v)
    return f"(({dtype.c_type}){text})"


class _KernelWriter:
    """Emits the statements of one kernel body (SSA temporaries, memoized per value and index)."""

    def __init__(self, renderer: "CRenderer"):
        self.r = renderer
        self.lines: list[str] = []
        self.memo: dict = {}
        self.counter = 0

    def temp(self, dtype: DType, expr: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        self.lines.append(f"{dtype.c_type} {name} = {expr};")
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

    def _masked(self, view: ShapeTracker, vars_, text: str, dtype: DType) -> str:
        _, valid = view.axis_expressions(vars_)
        if valid == 1:
            return text
        return f"(({self.index(valid)}) ? ({text}) : ({dtype.c_type})0)"

    def _emit(self, value, vars_) -> str:
        if isinstance(value, Load):
            off, valid = value.view.axis_expressions(vars_)
            ptr = self.r.pointer(value.buffer)
            if valid == 1:
                return self.temp(value.dtype, f"{ptr}[{self.index(off)}]")
            return self.temp(value.dtype, f"({self.index(valid)}) ? {ptr}[{self.index(off)}] : "
                                          f"({value.dtype.c_type})0")
        if isinstance(value, ConstValue):
            if isinstance(value.value, Expression):
                text = f"({value.dtype.c_type})({self.index(value.value)})"
            else:
                text = _literal(value.value, value.dtype)
            return self._masked(value.view, vars_, text, value.dtype)
        if isinstance(value, IotaValue):
            off, _ = value.view.axis_expressions(vars_)
            expr = value.expr.substitute("z", off) if "z" in value.expr.symbols() else value.expr
            return self._masked(value.view, vars_, f"({value.dtype.c_type})({self.index(expr)})", value.dtype)
        if isinstance(value, Compute):
            args = [self.emit(a, vars_) for a in value.args]
            return self.temp(value.dtype, self._compute(value, args))
        if isinstance(value, GatherValue):
            idx = self.emit(value.index, vars_)
            g = f"g{self.counter}"
            self.counter += 1
            extent = self.index(value.data_view.dims[value.axis])
            self.lines.append(f"long long {g} = (long long)({idx});")
            self.lines.append(f"if ({g} < 0 || {g} >= {extent}) {{ err = 1; {g} = 0; }}")
            gvars = vars_[:value.axis] + (Expression.symbol(g),) + vars_[value.axis + 1:]
            if value.data is None:
                return self.emit(Load(value.data_buffer, value.data_view, value.dtype), gvars)
            return self.emit(value.data, gvars)
        if isinstance(value, Remapped):
            off, valid = value.view.axis_expressions(vars_)
            strides = ShapeTracker.contiguous_of(value.dims).strides
            inner = tuple(off // s if j == 0 else (off // s) % d
                          for j, (s, d) in enumerate(zip(strides, value.dims)))
            text = self.emit(value.value, inner)
            return self._masked(value.view, vars_, text, value.dtype)
        raise NotImplementedError(type(value))

    def _compute(self, value: Compute, args) -> str:
        op, dtype = value.op, value.dtype
        half = dtype == DType.float16
        f = "" if dtype == DType.float64 else "f"

        def fn(name, x):
            if half:
                return f"(_Float16){name}f((float){x})"
            return f"{name}{f}({x})"

        if isinstance(op, ops.Log2):
            return fn("log2", args[0])
        if isinstance(op, ops.Exp2):
            return fn("exp2", args[0])
        if isinstance(op, ops.Sin):
            return fn("sin", args[0])
        if isinstance(op, ops.Sqrt):
            return fn("sqrt", args[0])
        if isinstance(op, ops.Recip):
            return f"(({dtype.c_type})1 / {args[0]})"
        if isinstance(op, ops.Add):
            return f"({args[0]} | {args[1]})" if dtype == DType.bool else f"({args[0]} + {args[1]})"
        if isinstance(op, ops.Mul):
            return f"({args[0]} & {args[1]})" if dtype == DType.bool else f"({args[0]} * {args[1]})"
        if isinstance(op, ops.Mod):
            if dtype.is_int:
                return f"({dtype.c_type})lm_imod({args[0]}, {args[1]}, &err)"
            if half:
                return f"(_Float16)lm_fmodf((float){args[0]}, (float){args[1]})"
            return f"lm_fmod{f}({args[0]}, {args[1]})"
        if isinstance(op, ops.LessThan):
            return f"({args[0]} < {args[1]})"
        if isinstance(op, ops.Cast):
            if dtype == DType.bool:
                return f"({args[0]} != 0)"
            return f"({dtype.c_type})({args[0]})"
        raise NotImplementedError(str(op))


class CRenderer:
    """Turns a :class:`Program` into a :class:`CProgram`."""

    def __init__(self, program: Program, blas: bool):
        self.program = program
        self.blas = blas
        self.buffer_order = list(program.buffers)
        self.slot = {b: k for k, b in enumerate(self.buffer_order)}
        symbols = set()
        for dims, _ in program.buffers.values():
            for d in dims:
                symbols |= d.symbols()
        for k in program.kernels:
            symbols |= _kernel_symbols(k)
        symbols.discard("z")
        self.symbols = sorted(symbols)
        self.names = {s: _c_name(s) for s in self.symbols}

    def index(self, e: Expression) -> str:
        return e.to_c(self.names)

    def pointer(self, buffer: int) -> str:
        return f"b{self.slot[buffer]}"

    def _prologue(self, kernel, lines: list[str]) -> None:
        for s in self.symbols:
            lines.append(f"    const long long {self.names[s]} = syms[{self.symbols.index(s)}]; (void){self.names[s]};")
        used = _kernel_buffers(kernel)
        for b in sorted(used, key=lambda x: self.slot[x]):
            dtype = self.program.buffers[b][1]
            const = "" if b == kernel.out else "const "
            lines.append(f"    {const}{dtype.c_type} *restrict {self.pointer(b)} = ({const}{dtype.c_type} *)bufs[{self.slot[b]}];")

    def render(self) -> CProgram:
        parts = [("#define LUMINAL_BLAS 1\n" if self.blas else "") + _HELPERS, C_PRELUDE]
        calls = []
        for k, kernel in enumerate(self.program.kernels):
            lines = [f"static int kernel_{k}(void **bufs, const long long *syms) {{", "    int err = 0;"]
            self._prologue(kernel, lines)
            if isinstance(kernel, ElementwiseKernel):
                self._elementwise(kernel, lines)
            elif isinstance(kernel, ReduceKernel):
                self._reduce(kernel, lines)
            else:
                self._gemm(kernel, lines)
            lines += ["    return err;", "}"]
            parts.append("\n".join(lines))
            calls.append(f"    if ((err = kernel_{k}(bufs, syms))) return err;")
        parts.append("int luminal_run(void **bufs, const long long *syms) {\n    int err = 0;\n" + "\n".join(calls)
                     + "\n    return err;\n}\n")
        return CProgram("\n\n".join(parts), self.buffer_order, self.symbols, self.blas)

    # ------------------------------------------------------------------ loop nests
    def _loops(self, dims, lines, body_fn, indent="    ", parallel=True):
        """Nested loops over ``dims`` (outer ones parallel); ``body_fn(vars, flat_expr)`` returns statements."""
        n = len(dims)
        vars_ = tuple(Expression.symbol(f"i{j}", d.to_int() - 1 if d.is_constant() else None)
                      for j, d in enumerate(dims))
        total = to_expr(1)
        for d in dims:
            total = total * d
        flat = to_expr(0)
        for v, s in zip(vars_, ShapeTracker.contiguous_of(dims).strides):
            flat = flat + v * s
        body = body_fn(vars_, flat)
        if n == 0:
            lines.append(indent + "{")
            lines += [indent + "    " + b for b in body]
            lines.append(indent + "}")
            return
        cond = f"if(({self.index(total)}) >= {PARALLEL_THRESHOLD})"
        if parallel:
            if n == 1:
                lines.append(f"{indent}#pragma omp parallel for schedule(static) {cond}")
            else:
                lines.append(f"{indent}#pragma omp parallel for collapse({n - 1}) schedule(static) {cond}")
        for j, (v, d) in enumerate(zip(vars_, dims)):
            lines.append(f"{indent}{'    ' * j}for (long long i{j} = 0; i{j} < {self.index(d)}; i{j}++) {{")
        inner = indent + "    " * n
        lines += [inner + b for b in body]
        for j in range(n - 1, -1, -1):
            lines.append(f"{indent}{'    ' * j}}}")

    def _elementwise(self, kernel: ElementwiseKernel, lines):
        dims, value = _flatten_space(kernel.dims, kernel.value)

        def body(vars_, flat):
            w = _KernelWriter(self)
            result = w.emit(value, vars_)
            return w.lines + [f"{self.pointer(kernel.out)}[{self.index(flat)}] = {result};"]

        self._loops(dims, lines, body)

    def _reduce(self, kernel: ReduceKernel, lines):
        dtype = kernel.dtype
        acc_type = "float" if dtype == DType.float16 else dtype.c_type
        if kernel.kind == "sum":
            init = "0"
            combine = lambda acc, v: f"{acc} += {v};"  # noqa: E731
        else:
            init = ("-INFINITY" if dtype.is_float else "LLONG_MIN" if dtype == DType.int64 else "INT_MIN")
            fn = "lm_maxf" if dtype in (DType.float32, DType.float16) else "lm_max" if dtype == DType.float64 \
                else "lm_maxi"
            combine = lambda acc, v: f"{acc} = {fn}({acc}, {v});"  # noqa: E731
        reduce_var = Expression.symbol("r", kernel.extent.to_int() - 1 if kernel.extent.is_constant() else None)
        simd = "#pragma omp simd reduction(+:acc)" if kernel.kind == "sum" and dtype.is_float else ""

        def body(vars_, flat):
            w = _KernelWriter(self)
            in_vars = vars_[:kernel.axis] + (reduce_var,) + vars_[kernel.axis:]
            v = w.emit(kernel.value, in_vars)
            out = [f"{acc_type} acc = {init};"]
            if simd:
                out.append(simd)
            out.append(f"for (long long r = 0; r < {self.index(kernel.extent)}; r++) {{")
            out += ["    " + x for x in w.lines] + ["    " + combine("acc", v), "}"]
            out.append(f"{self.pointer(kernel.out)}[{self.index(flat)}] = ({dtype.c_type})acc;")
            return out

        if not kernel.dims:
            # a full reduction: parallelize the reduced loop itself
            w = _KernelWriter(self)
            v = w.emit(kernel.value, (reduce_var,) if True else ())
            lines.append(f"    {acc_type} acc = {init};")
            if kernel.kind == "sum":
                lines.append(f"    #pragma omp parallel for reduction(+:acc) schedule(static) "
                             f"if(({self.index(kernel.extent)}) >= {PARALLEL_THRESHOLD})")
            lines.append(f"    for (long long r = 0; r < {self.index(kernel.extent)}; r++) {{")
            lines += ["        " + x for x in w.lines] + ["        " + combine("acc", v), "    }"]
            lines.append(f"    {self.pointer(kernel.out)}[0] = ({dtype.c_type})acc;")
            return
        self._loops(kernel.dims, lines, body)

    def _gemm(self, kernel: GemmKernel, lines):
        dims = kernel.dims
        nb = len(dims) - 2
        m, n = dims[-2], dims[-1]
        av, bv = kernel.a_view, kernel.b_view
        k = av.dims[-1]
        ctype = kernel.dtype.c_type
        idx = self.index
        sam, sak = av.strides[nb], av.strides[nb + 2]
        sbn, sbk = bv.strides[nb + 1], bv.strides[nb + 2]
        batch_vars = tuple(Expression.symbol(f"i{j}") for j in range(nb))
        zero = to_expr(0)
        a_off = av.offset + sum((s * v for s, v in zip(av.strides[:nb], batch_vars)), zero)
        b_off = bv.offset + sum((s * v for s, v in zip(bv.strides[:nb], batch_vars)), zero)
        c_off = to_expr(0)
        for v, s in zip(batch_vars, ShapeTracker.contiguous_of(dims).strides[:nb]):
            c_off = c_off + v * s
        A, B, C = self.pointer(kernel.a), self.pointer(kernel.b), self.pointer(kernel.out)
        body = [f"const {ctype} *A = {A} + {idx(a_off)};", f"const {ctype} *B = {B} + {idx(b_off)};",
                f"{ctype} *C = {C} + {idx(c_off)};",
                f"const long long M = {idx(m)}, N = {idx(n)}, K = {idx(k)};",
                f"const long long sam = {idx(sam)}, sak = {idx(sak)}, sbn = {idx(sbn)}, sbk = {idx(sbk)};"]
        if self.blas:
            fn = "scipy_cblas_sgemm" if kernel.dtype == DType.float32 else "scipy_cblas_dgemm"
            body += [
                "int ta = -1, tb = -1; long long lda = 0, ldb = 0;",
                "if (sak == 1 || K == 1) { ta = 0; lda = M == 1 ? K : sam; } else if (sam == 1 || M == 1) { ta = 1; lda = sak; }",
                "if (ta == 0 && lda < K) ta = -1;",
                "if (ta == 1 && lda < M) ta = -1;",
                "if (sbn == 1 || N == 1) { tb = 0; ldb = K == 1 ? N : sbk; } else if (sbk == 1 || K == 1) { tb = 1; ldb = N == 1 ? K : sbn; }",
                "if (tb == 0 && ldb < N) tb = -1;",
                "if (tb == 1 && ldb < K) tb = -1;",
                "if (M > 0 && N > 0 && K > 0 && ta >= 0 && tb >= 0 && M < INT_MAX && N < INT_MAX && K < INT_MAX) {",
                f"    {fn}(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1, A, (int)(lda > 0 ? lda : 1), B, (int)(ldb > 0 ? ldb : 1), 0, C, (int)(N > 0 ? N : 1));",
                "} else {",
            ]
            close = ["}"]
        else:
            close = []
        fallback = [
            "#pragma omp parallel for schedule(static) if(M * N * K >= 32768)",
            "for (long long mm = 0; mm < M; mm++) {",
            "    for (long long nn = 0; nn < N; nn++) {",
            f"        {'float' if ctype == 'float' else ctype} acc = 0;",
            "        for (long long kk = 0; kk < K; kk++) acc += A[mm * sam + kk * sak] * B[nn * sbn + kk * sbk];",
            "        C[mm * N + nn] = acc;",
            "    }",
            "}",
        ]
        body += (["    " + x for x in fallback] if self.blas else fallback) + close
        self._loops(dims[:nb], lines, lambda vars_, flat: body, parallel=False)


# ---------------------------------------------------------------------------- analysis helpers
def _walk(value):
    stack = [value]
    while stack:
        v = stack.pop()
        yield v
        if isinstance(v, Compute):
            stack.extend(v.args)
        elif isinstance(v, GatherValue):
            stack.append(v.index)
            if v.data is not None:
                stack.append(v.data)
        elif isinstance(v, Remapped):
            stack.append(v.value)


def _views(value):
    for v in _walk(value):
        if isinstance(v, (Load, ConstValue, IotaValue, Remapped)):
            yield v.view
        elif isinstance(v, GatherValue):
            yield v.data_view


def _kernel_symbols(kernel) -> set:
    out = set()
    if isinstance(kernel, GemmKernel):
        for st in (kernel.a_view, kernel.b_view):
            out |= st.symbols()
        for d in kernel.dims:
            out |= d.symbols()
        return out
    for d in kernel.dims:
        out |= d.symbols()
    if isinstance(kernel, ReduceKernel):
        out |= kernel.extent.symbols()
    for v in _walk(kernel.value):
        if isinstance(v, (Load, ConstValue, IotaValue, Remapped)):
            out |= v.view.symbols()
        if isinstance(v, ConstValue) and isinstance(v.value, Expression):
            out |= v.value.symbols()
        if isinstance(v, IotaValue):
            out |= v.expr.symbols()
        if isinstance(v, GatherValue):
            out |= v.data_view.symbols()
        if isinstance(v, Remapped):
            for d in v.dims:
                out |= d.symbols()
    return out


def _kernel_buffers(kernel) -> set:
    if isinstance(kernel, GemmKernel):
        return {kernel.out, kernel.a, kernel.b}
    out = {kernel.out}
    for v in _walk(kernel.value):
        if isinstance(v, Load):
            out.add(v.buffer)
        elif isinstance(v, GatherValue) and v.data is None:
            out.add(v.data_buffer)
    return out


def _merge_value(value, axis: int):
    """The same value tree over an iteration space with axes ``axis`` and ``axis + 1`` merged, or None."""
    if isinstance(value, Load):
        st = value.view.merge_dims(axis)
        return None if st is None else Load(value.buffer, st, value.dtype)
    if isinstance(value, ConstValue):
        st = value.view.merge_dims(axis)
        return None if st is None else ConstValue(value.value, value.dtype, st)
    if isinstance(value, IotaValue):
        st = value.view.merge_dims(axis)
        return None if st is None else IotaValue(value.expr, value.dtype, st)
    if isinstance(value, Compute):
        args = []
        for a in value.args:
            m = _merge_value(a, axis)
            if m is None:
                return None
            args.append(m)
        return Compute(value.op, tuple(args), value.dtype)
    if isinstance(value, Remapped):
        st = value.view.merge_dims(axis)
        return None if st is None else Remapped(value.value, value.dims, st, value.dtype)
    return None  # gathers keep their axes


def _flatten_space(dims, value):
    """Merge adjacent iteration axes while every view in ``value`` stays affine (fewer, longer loops)."""
    dims = tuple(dims)
    j = 0
    while j < len(dims) - 1:
        merged = _merge_value(value, j)
        if merged is None:
            j += 1
            continue
        value = merged
        dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]
    return dims, value
