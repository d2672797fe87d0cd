"""Render a lowered :class:`Program` as one C translation unit with one entry point.

``int luminal_run(void **buffers, const long long *symbols)`` runs every kernel in
order and returns 0, or an error code (1: gather index out of range, 2: integer
modulo by zero). Buffers are indexed as listed in :attr:`CProgram.buffer_order`;
symbols (bound dims) in :attr:`CProgram.symbols` order. Kernels are OpenMP
parallel loops (static schedule, run serially below ``PARALLEL_WORK`` element-ops: waking the pool
costs more than a small kernel)
whose innermost loop walks contiguous memory where the views allow;
elementwise iteration spaces are flattened whenever every view in the body can
be merged affinely. GEMMs call OpenBLAS (``scipy_cblas_[sd]gemm``) when the
operand layouts are BLAS-compatible at run time and a plain loop otherwise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .. import ops
from ..dtype import DType
from ..shape import C_PRELUDE, Expression, ShapeTracker, to_expr
from .kernel import (Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, IotaValue, Load, Program,
                     ReduceKernel, Remapped)

PARALLEL_WORK = 1 << 20  # elements x ops per element below which a loop runs on one thread
_TRANSCENDENTAL_COST = 8

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
#include <omp.h>
/* Branch-free float32 exp2/log2 the compiler can vectorize (libm calls block vectorization without
   -ffast-math, which we do not use). exp2: round-to-nearest range reduction, degree-7 Taylor on [-0.5, 0.5]
   (relative error ~1e-7); log2: mantissa in [sqrt(1/2), sqrt(2)), atanh series in t=(m-1)/(m+1).
   NaN, +-inf, 0, negatives and subnormal inputs follow IEEE/libm; results below 2^-126 flush to 0. */
static inline float lm_exp2f(float x) {
    float xc = x < -126.0f ? -126.0f : x;
    xc = xc > 128.0f ? 128.0f : xc;
    xc = xc == xc ? xc : 0.0f;
    float r = rintf(xc), f = xc - r;
    float p = 1.0f + f * (0.69314718f + f * (0.24022651f + f * (0.05550411f + f * (0.00961813f
              + f * (0.00133336f + f * (0.00015404f + f * 0.0000152527f))))));
    int i = (int)r;
    uint32_t bits = (uint32_t)(i + 126) << 23;
    float scale; memcpy(&scale, &bits, 4);
    float y = (p * scale) * 2.0f;
    y = x > 128.0f ? INFINITY : y;
    y = x < -126.0f ? 0.0f : y;
    return x == x ? y : x;
}
static inline float lm_log2f(float x) {
    int sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t bits; memcpy(&bits, &xs, 4);
    int e = (int)((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
    uint32_t mb = (bits & 0x7fffffu) | 0x3f800000u;
    float m; memcpy(&m, &mb, 4);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e += big;
    float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
    float y = (float)e + t * (2.88539008f + t2 * (0.96179669f + t2 * (0.57707802f + t2 * (0.41219858f
              + t2 * 0.32059890f))));
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    y = x == INFINITY ? INFINITY : y;
    return x == x ? y : x;
}
"""

_GEMM_HELPER = r"""
/* C[M,N] = A[M,K] . B[K,N] with A(m,k) = A[m*sam + k*sak], B(k,n) = B[n*sbn + k*sbk]; C row-major (ldc = N).
   One (OpenBLAS-threaded) BLAS call; falls back to loops when the layout is not BLAS-compatible. Measured on
   W6: splitting one GEMM into per-OpenMP-thread single-threaded BLAS calls ran at half speed (concurrent
   calls serialize inside OpenBLAS), so threading is left to OpenBLAS. */
static void lm_gemm_T(long long M, long long N, long long K, const T *A, long long sam, long long sak,
                      const T *B, long long sbn, long long sbk, T *C) {
    int ta = -1, tb = -1; long long lda = 0, ldb = 0;
#ifdef LUMINAL_BLAS
    if (sak == 1 || K == 1) { ta = 0; lda = M == 1 ? K : sam; } else if (sam == 1 || M == 1) { ta = 1; lda = K == 1 ? M : sak; }
    if ((ta == 0 && lda < K) || (ta == 1 && lda < M)) ta = -1;
    if (sbn == 1 || N == 1) { tb = 0; ldb = K == 1 ? N : sbk; } else if (sbk == 1 || K == 1) { tb = 1; ldb = N == 1 ? K : sbn; }
    if ((tb == 0 && ldb < N) || (tb == 1 && ldb < K)) tb = -1;
    if (M >= INT_MAX || N >= INT_MAX || K >= INT_MAX || lda >= INT_MAX || ldb >= INT_MAX) ta = -1;
#endif
    if (M == 0 || N == 0) return;
    if (K == 0 || ta < 0 || tb < 0) {
        #pragma omp parallel for schedule(static) if(M * N * K >= 32768)
        for (long long m = 0; m < M; m++)
            for (long long n = 0; n < N; n++) {
                ACC acc = 0;
                for (long long k = 0; k < K; k++) acc += (ACC)A[m * sam + k * sak] * (ACC)B[n * sbn + k * sbk];
                C[m * N + n] = (T)acc;
            }
        return;
    }
#ifdef LUMINAL_BLAS
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1,
         A, (int)lda, B, (int)ldb, 0, C, (int)N);
#endif
}
"""


def _gemm_helpers() -> str:
    f32 = _GEMM_HELPER.replace("lm_gemm_T", "lm_gemm_f32").replace("ACC", "float").replace("const T", "const float") \
        .replace("T *C", "float *C").replace("(T)acc", "(float)acc").replace("GEMM", "scipy_cblas_sgemm")
    f64 = _GEMM_HELPER.replace("lm_gemm_T", "lm_gemm_f64").replace("ACC", "double").replace("const T", "const double") \
        .replace("T *C", "double *C").replace("(T)acc", "(double)acc").replace("GEMM", "scipy_cblas_dgemm")
    return f32 + f64


@dataclass
class CProgram:
    """C source plus the calling convention of its entry point."""
    source: str
    buffer_order: list
    symbols: list
    uses_blas: bool
    groups: list = None  # kernel indices rendered together (one C function each)


def kernel_groups(program: Program) -> list[list[int]]:
    """Runs of consecutive elementwise kernels over the same iteration space, rendered as one loop nest
    (horizontal fusion: an optimizer's parameter and moment updates read the gradient once). A later kernel of
    a run may read an earlier one's output only at the same element (a contiguous view of the same dims)."""
    groups: list[list[int]] = []
    for k, kernel in enumerate(program.kernels):
        if groups and isinstance(kernel, ElementwiseKernel):
            run = groups[-1]
            first = program.kernels[run[0]]
            if isinstance(first, ElementwiseKernel) and tuple(first.dims) == tuple(kernel.dims) and \
                    _reads_only_elementwise(kernel.value, {program.kernels[i].out for i in run}, kernel.dims):
                run.append(k)
                continue
        groups.append([k])
    return groups


def _reads_only_elementwise(value, outs: set, dims) -> bool:
    same = ShapeTracker.contiguous_of(dims)
    for v in _walk(value):
        if isinstance(v, Load) and v.buffer in outs and v.view != same:
            return False
        if isinstance(v, GatherValue) and v.data is None and v.data_buffer in outs:
            return False
        if isinstance(v, GatherValue) and v.data is not None and any(
                isinstance(u, Load) and u.buffer in outs for u in _walk(v.data)):
            return False
        if isinstance(v, Remapped) and any(isinstance(u, Load) and u.buffer in outs for u in _walk(v.value)):
            return False
    return True


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
        # bool temporaries are ints: GCC does not vectorize loops that mix unsigned char values with
        # float/64-bit ones ("no vectype"); bool buffers stay one byte per element
        self.lines.append(f"{'int' if dtype == DType.bool else dtype.c_type} {name} = {expr};")
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
        return f"(({self.index(valid)}) ? ({text}) : ({dtype.c_type})0)"

    def _emit(self, value, vars_) -> str:
        if isinstance(value, Load):
            off, valid = value.view.axis_expressions(vars_)
            ptr = self.r.pointer(value.buffer)
            if valid == 1:
                return self.temp(value.dtype, f"{ptr}[{self.index(off)}]")
            if self._in_bounds(value.buffer, off):
                # the address is valid even where the view masks the value out: load unconditionally and
                # select (branch-free, so the loop vectorizes; a conditional load cannot be if-converted)
                loaded = self.temp(value.dtype, f"{ptr}[{self.index(off)}]")
                return self.temp(value.dtype, f"({self.index(valid)}) ? {loaded} : ({value.dtype.c_type})0")
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
            extent_expr = value.data_view.dims[value.axis]
            extent = self.index(extent_expr)
            self.lines.append(f"long long {g} = (long long)({idx});")
            lo, hi = _value_range(value.index)
            n = extent_expr.to_int()
            if not (lo is not None and hi is not None and n is not None and 0 <= lo and hi < n):
                self.lines.append(f"if ({g} < 0 || {g} >= {extent}) {{ err = 1; {g} = 0; }}")
            gsym = Expression.symbol(g, n - 1) if n is not None else Expression.symbol(g)
            gvars = vars_[:value.axis] + (gsym,) + vars_[value.axis + 1:]
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
            fast = f"lm_{name}f" if name in ("exp2", "log2") else f"{name}f"
            if half:
                return f"(_Float16){fast}((float){x})"
            if dtype == DType.float32:
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

    def __init__(self, program: Program, blas: bool, profile: bool = False):
        self.program = program
        self.blas = blas
        self.profile = profile
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

    def _prologue(self, kernels, lines: list[str]) -> None:
        kernels = kernels if isinstance(kernels, list) else [kernels]
        for s in self.symbols:
            lines.append(f"    const long long {self.names[s]} = syms[{self.symbols.index(s)}]; (void){self.names[s]};")
        used = set().union(*[_kernel_buffers(k) for k in kernels])
        outs = {k.out for k in kernels}
        for b in sorted(used, key=lambda x: self.slot[x]):
            dtype = self.program.buffers[b][1]
            const = "" if b in outs else "const "
            lines.append(f"    {const}{dtype.c_type} *restrict {self.pointer(b)} = ({const}{dtype.c_type} *)bufs[{self.slot[b]}];")

    def render(self) -> CProgram:
        parts = [("#define LUMINAL_BLAS 1\n" if self.blas else "") + _HELPERS, C_PRELUDE]
        if any(isinstance(k, GemmKernel) for k in self.program.kernels):
            parts.append(_gemm_helpers())
        calls = []
        groups = kernel_groups(self.program)
        for k, group in enumerate(groups):
            kernel = self.program.kernels[group[0]]
            lines = [f"static int kernel_{k}(void **bufs, const long long *syms) {{", "    int err = 0;"]
            self._prologue([self.program.kernels[i] for i in group], lines)
            if len(group) > 1:
                self._elementwise_group([self.program.kernels[i] for i in group], lines)
            elif isinstance(kernel, ElementwiseKernel):
                self._elementwise(kernel, lines)
            elif isinstance(kernel, ReduceKernel):
                self._reduce(kernel, lines)
            else:
                self._gemm(kernel, lines)
            lines += ["    return err;", "}"]
            parts.append("\n".join(lines))
            if self.profile:
                calls.append(f"    {{ double t = omp_get_wtime(); err = kernel_{k}(bufs, syms); "
                             f"lm_prof[{k}] += omp_get_wtime() - t; if (err) return err; }}")
            else:
                calls.append(f"    if ((err = kernel_{k}(bufs, syms))) return err;")
        if self.profile:  # LUMINAL_PROFILE=1: seconds per kernel, summed over runs, read by the runtime
            n = max(1, len(groups))
            parts.append(f"static double lm_prof[{n}];\n"
                         f"void luminal_profile(double *out) {{ for (int k = 0; k < {n}; k++) out[k] = lm_prof[k]; }}")
        parts.append("int luminal_run(void **bufs, const long long *syms) {\n    int err = 0;\n" + "\n".join(calls)
                     + "\n    return err;\n}\n")
        return CProgram("\n\n".join(parts), self.buffer_order, self.symbols, self.blas, groups)

    # ------------------------------------------------------------------ loop nests
    def _loops(self, dims, lines, body_fn, indent="    ", parallel=True, simd_inner=False, work=1):
        """Nested loops over ``dims`` (outer ones parallel); ``body_fn(vars, flat_expr)`` returns statements."""
        # size-1 axes get no loop (their index is 0): an inner loop of trip count 1 would block vectorization
        vars_ = tuple(to_expr(0) if d == 1 else Expression.symbol(f"i{j}", d.to_int() - 1 if d.is_constant() else None)
                      for j, d in enumerate(dims))
        active = [j for j, d in enumerate(dims) if d != 1]
        n = len(active)
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
        cond = f"if(({self.index(total * work)}) >= {PARALLEL_WORK})"
        # tiny constant innermost loops (e.g. a 2-wide pooling window) are unrolled and the loop around them is
        # the vector loop: a 2-trip simd loop cannot vectorize, a 2x-unrolled body over a longer loop can
        simd_pos = n - 1
        if simd_inner and n > 1:
            tail = 1
            while simd_pos > 0:
                t = dims[active[simd_pos]].to_int()
                if t is None or t > 4 or tail * t > 16:
                    break
                tail *= t
                simd_pos -= 1
            if simd_pos == 0 or dims[active[simd_pos]].to_int() is not None and \
                    dims[active[simd_pos]].to_int() <= 4:
                simd_pos = n - 1  # (the outermost loop stays the parallel one)
        # collapse only as many outer loops as give the threads enough chunks: every collapsed loop costs
        # index arithmetic per iteration
        n_collapse, chunks = 0, 1
        while n_collapse < min(simd_pos, n - 1) and chunks < 256:
            t = dims[active[n_collapse]].to_int()
            chunks = chunks * t if t is not None else 1 << 30
            n_collapse += 1
        n_collapse = max(n_collapse, 1)
        if parallel:
            if n == 1:
                lines.append(f"{indent}#pragma omp parallel for simd schedule(static) {cond}")
            else:
                lines.append(f"{indent}#pragma omp parallel for collapse({n_collapse}) schedule(static) {cond}")
        if simd_pos < n - 1:  # interchange: the tiny loops go outside the vector loop (strided, but vectorized)
            active = active[:simd_pos] + active[simd_pos + 1:] + [active[simd_pos]]
        for pos, j in enumerate(active):
            if pos == n - 1 and n > 1 and simd_inner:
                lines.append(f"{indent}{'    ' * pos}#pragma omp simd")
            lines.append(f"{indent}{'    ' * pos}for (long long i{j} = 0; i{j} < {self.index(dims[j])}; i{j}++) {{")
        inner = indent + "    " * n
        lines += [inner + b for b in body]
        for pos in range(n - 1, -1, -1):
            lines.append(f"{indent}{'    ' * pos}}}")

    def _elementwise_group(self, kernels, lines):
        values = [k.value for k in kernels]
        dims = tuple(kernels[0].dims)
        j = 0
        while j < len(dims) - 1:  # merge axes only where every kernel's views stay affine
            merged = [_merge_value(v, j) for v in values]
            if any(m is None for m in merged):
                j += 1
                continue
            values = merged
            dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]

        def body(vars_, flat):
            w = _KernelWriter(self)
            stores = []
            for kernel, value in zip(kernels, values):
                result = w.emit(value, vars_)
                w.lines.append(f"{self.pointer(kernel.out)}[{self.index(flat)}] = {result};")
            return w.lines + stores

        self._loops(dims, lines, body, simd_inner=True, work=sum(_work(v) for v in values))

    def _elementwise(self, kernel: ElementwiseKernel, lines):
        dims, value = _flatten_space(kernel.dims, kernel.value)

        def body(vars_, flat):
            w = _KernelWriter(self)
            result = w.emit(value, vars_)
            return w.lines + [f"{self.pointer(kernel.out)}[{self.index(flat)}] = {result};"]

        self._loops(dims, lines, body, simd_inner=True, work=_work(value))

    def _reduce(self, kernel: ReduceKernel, lines):
        dtype = kernel.dtype
        acc_type = "float" if dtype == DType.float16 else dtype.c_type
        if kernel.kind == "sum":
            init = "0"
            combine = lambda acc, v: f"{acc} += {v};"  # noqa: E731
        else:
            init = ("-INFINITY" if dtype.is_float else "LLONG_MIN" if dtype == DType.int64 else "INT_MIN")
            # vectorizable max; NaN is tracked in a flag so it still propagates
            if dtype.is_float:
                combine = lambda acc, v: f"{acc} = {v} > {acc} ? {v} : {acc}; nanf |= ({v} != {v});"  # noqa: E731
            else:
                combine = lambda acc, v: f"{acc} = {v} > {acc} ? {v} : {acc};"  # noqa: E731
        reduce_var = Expression.symbol("r", kernel.extent.to_int() - 1 if kernel.extent.is_constant() else None)
        track_nan = kernel.kind == "max" and dtype.is_float
        if kernel.kind == "sum":
            simd = "#pragma omp simd reduction(+:acc)" if dtype.is_float else ""
        else:
            simd = "#pragma omp simd reduction(max:acc)" + (" reduction(|:nanf)" if track_nan else "")
        work = _work(kernel.value) * kernel.extent

        def body(vars_, flat):
            w = _KernelWriter(self)
            in_vars = vars_[:kernel.axis] + (reduce_var,) + vars_[kernel.axis:]
            v = w.emit(kernel.value, in_vars)
            out = [f"{acc_type} acc = {init};"] + (["int nanf = 0;"] if track_nan else [])
            if simd:
                out.append(simd)
            out.append(f"for (long long r = 0; r < {self.index(kernel.extent)}; r++) {{")
            out += ["    " + x for x in w.lines] + ["    " + combine("acc", v), "}"]
            if track_nan:
                out.append("if (nanf) acc = NAN;")
            out.append(f"{self.pointer(kernel.out)}[{self.index(flat)}] = ({dtype.c_type})acc;")
            return out

        if self._column_reduce(kernel, lines, reduce_var, work):
            return
        if not kernel.dims:
            # a full reduction: parallelize the reduced loop itself
            w = _KernelWriter(self)
            v = w.emit(kernel.value, (reduce_var,))
            lines.append(f"    {acc_type} acc = {init};" + (" int nanf = 0;" if track_nan else ""))
            op = "+" if kernel.kind == "sum" else "max"
            lines.append(f"    #pragma omp parallel for simd reduction({op}:acc)" + (" reduction(|:nanf)" if track_nan else "")
                         + f" schedule(static) if(({self.index(work)}) >= {PARALLEL_WORK})")
            lines.append(f"    for (long long r = 0; r < {self.index(kernel.extent)}; r++) {{")
            lines += ["        " + x for x in w.lines] + ["        " + combine("acc", v), "    }"]
            if track_nan:
                lines.append("    if (nanf) acc = NAN;")
            lines.append(f"    {self.pointer(kernel.out)}[0] = ({dtype.c_type})acc;")
            return
        self._loops(kernel.dims, lines, body, work=work)

    def _column_reduce(self, kernel: ReduceKernel, lines, reduce_var, work) -> bool:
        """A float sum over a non-innermost axis with a long contiguous run of outputs after it (bias gradients:
        sums over the batch): accumulate whole output rows, reduced axis outside, the row inside (vectorized;
        threads split the row). The per-output loop would walk the reduced axis with a large stride."""
        if kernel.kind != "sum" or kernel.dtype not in (DType.float32, DType.float64):
            return False
        a = kernel.axis
        inner_dims = kernel.dims[a:]
        if not inner_dims:
            return False
        value = kernel.value
        nin = len(kernel.dims) + 1
        # merge the trailing (input) axes a+1.. into one
        for _ in range(len(inner_dims) - 1):
            value = _merge_value(value, a + 1)
            if value is None:
                return False
        row = to_expr(1)
        for d in inner_dims:
            row = row * d
        if not row.is_constant() or row.to_int() < 16:
            return False
        outer = kernel.dims[:a]
        outer_vars = tuple(Expression.symbol(f"i{j}", d.to_int() - 1 if d.is_constant() else None)
                           for j, d in enumerate(outer))
        jvar = Expression.symbol("j", row.to_int() - 1)
        w = _KernelWriter(self)
        v = w.emit(value, outer_vars + (reduce_var, jvar))
        base = to_expr(0)
        for var, st in zip(outer_vars, ShapeTracker.contiguous_of(tuple(outer) + (row,)).strides[:-1]):
            base = base + var * st
        out = self.pointer(kernel.out)
        n_row = self.index(row)
        del nin
        lines.append(f"    #pragma omp parallel if(({self.index(work)}) >= {PARALLEL_WORK})")
        lines.append("    {")
        lines.append("        long long nt = omp_get_num_threads(), t = omp_get_thread_num();")
        lines.append(f"        long long lo = ({n_row} * t) / nt, hi = ({n_row} * (t + 1)) / nt;")
        ind = "        "
        for j, d in enumerate(outer):
            lines.append(f"{ind}for (long long i{j} = 0; i{j} < {self.index(d)}; i{j}++) {{")
            ind += "    "
        lines.append(f"{ind}{kernel.dtype.c_type} *restrict row = {out} + {self.index(base)};")
        lines.append(f"{ind}for (long long j = lo; j < hi; j++) row[j] = 0;")
        lines.append(f"{ind}for (long long r = 0; r < {self.index(kernel.extent)}; r++) {{")
        lines.append(f"{ind}    #pragma omp simd")
        lines.append(f"{ind}    for (long long j = lo; j < hi; j++) {{")
        lines += [f"{ind}        " + x for x in w.lines]
        lines.append(f"{ind}        row[j] += {v};")
        lines.append(f"{ind}    }}")
        lines.append(f"{ind}}}")
        for j in range(len(outer) - 1, -1, -1):
            ind = ind[:-4]
            lines.append(f"{ind}}}")
        lines.append("    }")
        return True

    def _gemm(self, kernel: GemmKernel, lines):
        dims = kernel.dims
        nb = len(dims) - 2
        m, n = dims[-2], dims[-1]
        av, bv = kernel.a_view, kernel.b_view
        k = av.dims[-1]
        idx = self.index
        batch_vars = tuple(Expression.symbol(f"i{j}", d.to_int() - 1 if d.is_constant() else None)
                           for j, d in enumerate(dims[:nb]))
        zero = to_expr(0)
        a_off = av.offset + sum((s * v for s, v in zip(av.strides[:nb], batch_vars)), zero)
        b_off = bv.offset + sum((s * v for s, v in zip(bv.strides[:nb], batch_vars)), zero)
        c_off = to_expr(0)
        for v, s in zip(batch_vars, ShapeTracker.contiguous_of(dims).strides[:nb]):
            c_off = c_off + v * s
        fn = "lm_gemm_f32" if kernel.dtype == DType.float32 else "lm_gemm_f64"
        call = (f"{fn}({idx(m)}, {idx(n)}, {idx(k)}, {self.pointer(kernel.a)} + {idx(a_off)}, {idx(av.strides[nb])}, "
                f"{idx(av.strides[nb + 2])}, {self.pointer(kernel.b)} + {idx(b_off)}, {idx(bv.strides[nb + 1])}, "
                f"{idx(bv.strides[nb + 2])}, {self.pointer(kernel.out)} + {idx(c_off)});")
        if nb == 0:
            lines.append("    " + call)
            return
        # batched: one BLAS call per batch index, in sequence (OpenBLAS threads each call)
        for j, d in enumerate(dims[:nb]):
            lines.append(f"    {'    ' * j}for (long long i{j} = 0; i{j} < {idx(d)}; i{j}++) {{")
        lines.append("    " + "    " * nb + call)
        for j in range(nb - 1, -1, -1):
            lines.append(f"    {'    ' * j}}}")


# ---------------------------------------------------------------------------- analysis helpers
def _value_range(value) -> tuple:
    """Inclusive integer range of a kernel value when it is known statically (bools and casts of bools)."""
    if value.dtype == DType.bool:
        return 0, 1
    if isinstance(value, Compute) and isinstance(value.op, ops.Cast) and value.args[0].dtype == DType.bool:
        return 0, 1
    if isinstance(value, Remapped):  # masked-out positions read 0
        lo, hi = _value_range(value.value)
        return (None, None) if lo is None else (min(lo, 0), max(hi, 0))
    if isinstance(value, ConstValue) and not isinstance(value.value, Expression):
        v = value.value
        if float(v).is_integer():
            return int(v), int(v)
    return None, None


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


def _work(value) -> int:
    """Rough ops per element of a value tree (transcendentals weigh more), for the parallel threshold."""
    total = 0
    for v in _walk(value):
        if isinstance(v, Compute) and isinstance(v.op, (ops.Exp2, ops.Log2, ops.Sin)):
            total += _TRANSCENDENTAL_COST
        else:
            total += 2 if isinstance(v, (GatherValue, Remapped)) else 1
    return total


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
    # Remapped values (an inlined producer seen through a view) and gathers keep their axes: the producer's
    # indices are recovered from the view's offset, which is division-free only over separate loop variables
    return None


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
