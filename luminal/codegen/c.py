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

import glob
import itertools
import math
import os
import re
from dataclasses import dataclass

from ..dtype import DType
from ..shape import C_PRELUDE, Expression, ShapeTracker, to_expr
from .c_support import HELPERS, gemm_helpers, with_release
from .emit import KernelWriter, _literal
from .gemm_direct import direct_plan
from .gemm_prologue import fused_call, pack_functions
from .groups import epilogue_value, in_place_epilogues, kernel_groups, row_locals
from .mask_split import split_masked
from .values import (buffer_ranges, buffer_uses, flatten_space, kernel_buffers, merge_value, program_symbols,
                     refine_space, work_per_element)
from .gemm_lowp import STORE_TYPES, lowp_name, lowp_source, operand_stores
from .library import declarations, gemm_part, link_function
from .kernel import ElementwiseKernel, GemmKernel, Program, ReduceKernel, ScatterKernel
from .shared import _dispatch, _shared_body
from .c_reduce import PARALLEL_WORK, ReduceRendering, small_extent  # noqa: F401  (PARALLEL_WORK: re-exported)
from .c_attention import (AttentionCRendering, attention_groups, gemm_offsets, scratch_buffers,
                          zero_padded_buffers)

STREAM_TILE = 2048  # elements per tile of a streamed elementwise loop (8-16 KiB: stays in L1)
UNROLL_LINES = 600  # at most this many body lines when a kernel's tiny inner loops are unrolled into copies


def _last_level_cache() -> int:
    """Bytes of CPU 0's last-level cache (Linux sysfs); 32 MiB where that cannot be read."""
    best = (0, 0)
    for entry in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(entry, "size")) as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, (level, int(digits) * scale))
    return best[1] or 32 << 20


# output bytes from which an elementwise loop uses streaming stores: an output bigger than the last-level cache
# is not in cache for the next kernel anyway (this machine's L3; the code is compiled for it with -march=native)
STREAM_BYTES = _last_level_cache()
SMALL_GEMM = 1 << 23  # multiply-adds per GEMM up to which a batch of GEMMs is split over the OpenMP threads


@dataclass
class CProgram:
    """C source plus the calling convention of its entry point."""
    source: str
    buffer_order: list
    symbols: list
    uses_blas: bool
    groups: list = None  # kernel indices rendered together (one C function each)
    parts: tuple = ()    # routines compiled into libraries of their own and linked at load (codegen.library)
    shared: dict = None  # epilogue output -> the product whose bytes it is written over (in_place_epilogues)
    scratch: frozenset = frozenset()  # buffers only in per-thread scratch (fused attention): no arena bytes


def _c_name(symbol: str) -> str:
    return "s_" + re.sub(r"[^0-9A-Za-z_]", "_", symbol)


class CRenderer(ReduceRendering, AttentionCRendering):
    """Turns a :class:`Program` into a :class:`CProgram`."""

    def __init__(self, program: Program, blas: bool, profile: bool = False, gemm_impl: dict | None = None,
                 gemm_sources: str = "", gemm_parts: tuple = ()):
        """``gemm_impl`` maps a GEMM kernel's index in ``program.kernels`` to the C function that runs it
        (``lm_gemm_f32``/``lm_gemm_f64``, the OpenBLAS wrappers, by default); the functions not in the helpers
        are either C in ``gemm_sources`` (rendered into the program) or ``gemm_parts`` (library parts: luminal's
        own GEMMs, see :mod:`luminal.runtime.search` and :mod:`luminal.codegen.library`)."""
        self.program = program
        self.shared: dict = {}  # (in_place_epilogues of the groups render() chose)
        self.local_rows: dict = {}  # buffer -> its row-local pointer, while a row group's body renders
        self.buffer_ranges = buffer_ranges(program)  # (gathers indexed by a 0/1 mask buffer: selects)
        self.blas = blas
        self.profile = profile
        self.gemm_impl = dict(gemm_impl or {})
        self.gemm_sources = gemm_sources
        self.gemm_parts = tuple(gemm_parts)
        self.buffer_order = list(program.buffers)
        self.slot = {b: k for k, b in enumerate(self.buffer_order)}
        self.symbols = program_symbols(program)
        self.names = {s: _c_name(s) for s in self.symbols}

    def index(self, e: Expression) -> str:
        return e.to_c(self.names)

    def pointer(self, buffer: int) -> str:
        return self.local_rows.get(buffer) or f"b{self.slot[buffer]}"

    def store(self, buffer: int, text: str) -> str:
        """The C value to store into ``buffer`` for the computed value ``text``: bfloat16 buffers hold bit patterns,
        so a float is narrowed (round to nearest even; a value already rounded keeps its bits)."""
        if self.program.buffers[buffer][1] == DType.bfloat16:
            return f"lm_f32_to_bf16({text})"
        return text

    def _emit_stored(self, w, buffer: int, value, vars_) -> str:
        """``w.emit(value)`` for the value stored into ``buffer`` (rounded once, by the store, when the buffer is
        bfloat16: :meth:`KernelWriter.emit_stored`)."""
        if self.program.buffers[buffer][1] == DType.bfloat16:
            return w.emit_stored(value, vars_)
        return w.emit(value, vars_)

    def constant(self, value, dtype: DType) -> str:
        """The C text of a constant in the kernel being rendered. float32/float64 numbers are locals read from a
        ``volatile`` at the kernel's top: GCC (12) turns ``(x < c) ? c : x`` into one IEEE ``max``/``min``
        instruction only when ``c`` is not a literal (with literals it emits a compare and a blend, twice the
        instructions in a clamp); numbers also bound by the volatile read stay exact."""
        text = _literal(value, dtype)
        if dtype not in (DType.float32, DType.float64) or value == 0:
            return text  # (0 stays a literal: the emitter folds x + 0 for a where() slot)
        entry = self.constants.get(text)
        if entry is None:
            name = f"c{len(self.constants)}"
            entry = self.constants[text] = (name, f"const {dtype.c_type} {name} = *(volatile const {dtype.c_type} *)"
                                                  f"&(const {dtype.c_type}){{{text}}};")
        return entry[0]

    def _prologue(self, kernels, lines: list[str]) -> None:
        kernels = kernels if isinstance(kernels, list) else [kernels]
        for s in self.symbols:
            lines.append(f"    const long long {self.names[s]} = syms[{self.symbols.index(s)}]; (void){self.names[s]};")
        used = set().union(*[kernel_buffers(k) for k in kernels])
        outs = {k.out for k in kernels}
        over = {b for k in kernels if k.out in self.shared for b in (k.out, self.shared[k.out])}  # (one memory)
        for b in sorted(used, key=lambda x: self.slot[x]):
            dtype = self.program.buffers[b][1]
            const = "" if b in outs else "const "
            qual = "" if b in over else "restrict "
            ctype = dtype.c_type
            lines.append(f"    {const}{ctype} *{qual}{self.pointer(b)} = ({const}{ctype} *)bufs[{self.slot[b]}];")

    def render(self) -> CProgram:
        parts = [("#define LUMINAL_BLAS 1\n" if self.blas else "") + HELPERS, C_PRELUDE]
        libs = ()
        if any(isinstance(k, GemmKernel) for k in self.program.kernels):
            parts.append(gemm_helpers())
            stored = sorted({st for k in self.program.kernels if isinstance(k, GemmKernel)
                             for st in [operand_stores(self.program, k)] if st})
            # bfloat16 / float16 operands (codegen.gemm_lowp), compiled once per machine (codegen.library)
            libs = self.gemm_parts + tuple(
                gemm_part(f"lowp:{a}:{b}", lowp_source(a, b),
                          ((lowp_name(a, b), STORE_TYPES[a], STORE_TYPES[b], "float"),), self.blas) for a, b in stored)
            if libs:
                parts.append(declarations(libs))
            if self.gemm_sources:
                parts.append(self.gemm_sources)
        calls = []
        # (a batched GEMM gets an epilogue where one direct-convolution call runs every batch element)
        groups = kernel_groups(self.program, lambda g: isinstance(g, GemmKernel) and len(g.dims) > 2 and
                               direct_plan(self.program, g) is not None, remapped_rows=True)
        self.uses = buffer_uses(self.program)
        groups, fused = attention_groups(self.program, groups, self.uses)
        self.zero_padded = zero_padded_buffers(self.program, fused, self.uses)
        self.shared = in_place_epilogues(self.program, groups, self.uses)
        bodies: dict[str, str] = {}  # canonical kernel text -> the name of its shared body
        for k, group in enumerate(groups):
            kernel = self.program.kernels[group[0]]
            epilogue, epilogue_text = "NULL", ""
            if isinstance(kernel, GemmKernel) and len(group) == 2:
                epilogue = f"epilogue_{k}"
                epilogue_text = self._epilogue(epilogue, kernel, self.program.kernels[group[1]])
                group = group[:1]
            packs, pack_text = (None, None), ""
            if isinstance(kernel, GemmKernel) and (kernel.a_pro is not None or kernel.b_pro is not None):
                packs, pack_text = pack_functions(self, k, kernel)  # fused prologues (see gemm_prologue)
                epilogue_text = pack_text + ("\n\n" + epilogue_text if epilogue_text else "")
            lines = [f"static int kernel_{k}(void **bufs, const long long *syms) {{", "    int err = 0;"]
            self._prologue([self.program.kernels[i] for i in group], lines)
            self.constants, at = {}, len(lines)
            if tuple(group) in fused:
                self._attention_chain(group, lines)
            elif len(group) > 1 and isinstance(kernel, ReduceKernel):
                self._render_rows([self.program.kernels[i] for i in group], lines,
                                  row_locals(self.program, group, self.uses))
            elif len(group) > 1:
                self._elementwise_group([self.program.kernels[i] for i in group], lines)
            elif isinstance(kernel, ElementwiseKernel):
                self._elementwise(kernel, lines)
            elif isinstance(kernel, ReduceKernel):
                self._reduce(kernel, lines)
            elif isinstance(kernel, ScatterKernel):
                self._scatter(kernel, lines)
            elif side := self.zero_operand(kernel, epilogue, packs):
                self._trimmed_gemm(group[0], kernel, side, lines)
            else:
                self._gemm(kernel, lines, epilogue, self.gemm_impl.get(group[0]), packs)
            lines[at:at] = [f"    {decl}" for _, decl in self.constants.values()]
            lines += ["    return err;", "}"]
            texts, name, pointers = _shared_body(k, epilogue_text, "\n".join(lines), bodies)
            parts += texts
            calls.append((name, pointers))
        init = "lm_blas_init();" if any(isinstance(k, GemmKernel) for k in self.program.kernels) else ""
        parts.append(_dispatch(calls, self.profile, init))
        if libs:
            parts.append(link_function(libs))
        scratch = frozenset(b for g in fused for b in scratch_buffers(self.program, g, self.uses))
        return CProgram(with_release("\n\n".join(parts)), self.buffer_order, self.symbols, self.blas, groups, libs,
                        self.shared, scratch)

    # ------------------------------------------------------------------ loop nests
    def _loops(self, dims, lines, body_fn, indent="    ", parallel=True, simd_inner=False, work=1):
        """Nested loops over ``dims`` (outer ones parallel); ``body_fn(vars, flat_expr)`` returns statements."""
        # size-1 axes get no loop (their index is 0): an inner loop of trip count 1 would block vectorization
        vars_ = tuple(to_expr(0) if d == 1 else Expression.symbol(f"i{j}", d - 1)
                      for j, d in enumerate(dims))
        active = [j for j, d in enumerate(dims) if d != 1]
        n = len(active)
        total = to_expr(1)
        for d in dims:
            total = total * d
        strides = ShapeTracker.contiguous_of(dims).strides

        def flat_of(vs):
            flat = to_expr(0)
            for v, s in zip(vs, strides):
                flat = flat + v * s
            return flat

        body = body_fn(vars_, flat_of(vars_))
        if n == 0:
            lines.append(indent + "{")
            lines += [indent + "    " + b for b in body]
            lines.append(indent + "}")
            return
        cond = f"if(({self.index(total * work)}) >= {PARALLEL_WORK})"
        # tiny constant innermost loops (e.g. a 2-wide pooling window) are not the vector loop: a 2-trip simd loop
        # cannot vectorize. The loop around them is, with the body copied once per tiny index (below). (A tiny
        # *loop* inside, unrolled by pragma, under an outer `omp simd` miscompiled with GCC: a wrong pow() result;
        # the copies are straight-line code.)
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
        # a vector loop whose index is divided (or taken modulo) by a small constant (x[i / 2]: the gradient of a
        # 2-wide pooling or of an upsampling) does not vectorize: GCC has no vector form of that access, so the
        # whole body runs scalar (a GELU gradient behind MaxPool1d's: 4.7 against 0.4 ms). Split the axis as
        # i = c * q + r: the loop runs over q, one copy of the body per r (the simplifier turns (c*q + r) / c
        # into q and the modulo into r), every access affine again.
        dims = list(dims)
        if simd_inner and n > 0 and simd_pos == n - 1:
            got = self._split_divided(dims, active[simd_pos], vars_, body, body_fn, flat_of)
            if got is not None:
                body, dims[active[simd_pos]] = got
        # collapse only as many outer loops as give the threads enough chunks: every collapsed loop costs
        # index arithmetic per iteration. A symbolic extent may be 1 at run time (batch 1 of a (batch, seq, d)
        # space), so it counts as 1 and the loops inside it are collapsed with it.
        n_collapse, chunks = 0, 1
        limit = min(simd_pos, n - 1) if simd_inner else n  # (a reduction's body holds its own inner loop)
        while n_collapse < limit and chunks < 256:
            t = dims[active[n_collapse]].to_int()
            chunks = chunks * t if t is not None else chunks
            n_collapse += 1
        n_collapse = max(n_collapse, 1)
        split = parallel and n == 1 and simd_inner
        if split:
            # (simd only when the body is straight-line: a reduction's body holds its own loop.) Not the combined
            # `parallel for simd`: when its if() is false GCC 12 runs a loop it did not vectorize (a 262144-element
            # bfloat16 rounding: 0.37 against 0.05 ms); `parallel if()` around `for simd` is vectorized either way
            lines.append(f"{indent}#pragma omp parallel {cond}")
            lines.append(f"{indent}{{")
            lines.append(f"{indent}#pragma omp for simd schedule(static)")
        elif parallel:
            if n == 1:
                lines.append(f"{indent}#pragma omp parallel for schedule(static) {cond}")
            else:
                lines.append(f"{indent}#pragma omp parallel for collapse({n_collapse}) schedule(static) {cond}")
        if simd_pos < n - 1:
            # the tiny loops unrolled inside the vector loop: one copy of the body per index (its own scope), so
            # the copies' accesses form groups GCC vectorizes with permutes (W4's pooling gradient, 2 x 2
            # windows: 2.4 -> 1.1 ms under autocast); a body too long to copy that often keeps the interchange
            tiny = active[simd_pos + 1:]
            combos = list(itertools.product(*(range(dims[j].to_int()) for j in tiny)))
            if len(combos) * len(body) <= UNROLL_LINES:
                body = []
                for combo in combos:
                    vs = list(vars_)
                    for j, c in zip(tiny, combo):
                        vs[j] = to_expr(c)
                    body += ["{"] + ["    " + b for b in body_fn(tuple(vs), flat_of(vs))] + ["}"]
                active = active[:simd_pos + 1]
                n = len(active)
            else:  # interchange: the tiny loops go outside the vector loop (strided, but vectorized)
                active = active[:simd_pos] + active[simd_pos + 1:] + [active[simd_pos]]
        # the vector loop split at the edges of its masked reads (luminal.codegen.mask_split): inner loop only
        edges = None
        if simd_inner and n > 1 and dims[active[-1]].to_int() is not None:
            edges = split_masked(body, f"i{active[-1]}", dims[active[-1]].to_int())
        loops = active[:-1] if edges is not None else active
        for pos, j in enumerate(loops):
            if pos == n - 1 and n > 1 and simd_inner:
                lines.append(f"{indent}{'    ' * pos}#pragma omp simd")
            lines.append(f"{indent}{'    ' * pos}for (long long i{j} = 0; i{j} < {self.index(dims[j])}; i{j}++) {{")
        inner = indent + "    " * len(loops)
        lines += [inner + b for b in (edges if edges is not None else body)]
        for pos in range(len(loops) - 1, -1, -1):
            lines.append(f"{indent}{'    ' * pos}}}")
        if split:
            lines.append(f"{indent}}}")

    def _split_divided(self, dims, j, vars_, body, body_fn, flat_of):
        """``(body, extent)`` of axis ``j`` split as ``i = c * q + r`` (see :meth:`_loops`) when its index is
        divided or reduced modulo a small constant ``c`` dividing its extent and the split removes every such
        division; None otherwise."""
        ext = to_expr(dims[j]).to_int()
        if ext is None:
            return None
        text = "\n".join(body)
        var = f"i{j}"
        found = {int(c) for c in re.findall(rf"\b{var}\b[^;]*?[/%] (\d+)\)", text)}
        if not found:
            return None
        lcm = 1
        for c in found:
            lcm = lcm * c // math.gcd(lcm, c)
        divided = re.compile(rf"\b{var}\b\)* [/%] \d+|[/%] \(*[^;()]*\b{var}\b")
        for c in sorted(found | {lcm}):
            if not 2 <= c <= 8 or ext % c:
                continue
            q = Expression.symbol(var, ext // c - 1)
            copies = []
            for r in range(c):
                vs = list(vars_)
                vs[j] = q * c + r
                copies.append(body_fn(tuple(vs), flat_of(vs)))
            if any(divided.search("\n".join(cp)) for cp in copies) or c * len(copies[0]) > UNROLL_LINES:
                continue
            out = []
            for cp in copies:
                out += ["{"] + ["    " + b for b in cp] + ["}"]
            return out, to_expr(ext // c)
        return None

    def _elementwise_group(self, kernels, lines):
        values = [k.value for k in kernels]
        dims = tuple(kernels[0].dims)
        j = 0
        while j < len(dims) - 1:  # merge axes only where every kernel's views stay affine
            merged = [merge_value(v, j, dims=dims) for v in values]
            if any(m is None for m in merged):
                j += 1
                continue
            values = merged
            dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]

        work = sum(work_per_element(v) for v in values)
        if self._streamed(dims, [k.out for k in kernels], values, lines, work):
            return

        def body(vars_, flat):
            w = KernelWriter(self)
            for i, (kernel, value) in enumerate(zip(kernels, values)):  # (nothing after the last reads its value)
                result = self._emit_stored(w, kernel.out, value, vars_) if i == len(kernels) - 1 else w.emit(value, vars_)
                w.lines.append(f"{self.pointer(kernel.out)}[{self.index(flat)}] = {self.store(kernel.out, result)};")
            return w.lines

        self._loops(dims, lines, body, simd_inner=True, work=work)

    def _streamed(self, dims, outs, values, lines, work) -> bool:
        """An elementwise loop whose outputs are bigger than the last-level cache (``STREAM_BYTES``): tiles of
        ``STREAM_TILE`` elements are computed into per-thread L1 buffers and copied out with streaming stores
        (``lm_stream``): the output's lines are not read before being written. Returns False (nothing rendered)
        for loops that are not one constant-length axis or whose outputs are smaller."""
        active = [j for j, d in enumerate(dims) if d != 1]
        if len(active) != 1 or dims[active[0]].to_int() is None:
            return False
        n = dims[active[0]].to_int()
        if n * sum(self.program.buffers[b][1].itemsize for b in outs) < STREAM_BYTES:
            return False
        j = active[0]
        var = Expression.symbol(f"i{j}", n - 1)
        vars_ = tuple(var if k == j else to_expr(0) for k in range(len(dims)))
        w = KernelWriter(self)
        results = [w.emit(v, vars_) for v in values]
        ctypes_ = [self.program.buffers[b][1].c_type for b in outs]
        lines.append(f"    #pragma omp parallel if(({n * work}) >= {PARALLEL_WORK})")
        lines.append("    {")
        lines += [f"        {t} lm_tile{k}[{STREAM_TILE}] __attribute__((aligned(64)));" for k, t in enumerate(ctypes_)]
        lines.append("        #pragma omp for schedule(static)")
        lines.append(f"        for (long long it = 0; it < {n}; it += {STREAM_TILE}) {{")
        lines.append(f"            const long long iend = LUMINAL_MIN(it + {STREAM_TILE}, {n});")
        lines.append("            #pragma omp simd")
        lines.append(f"            for (long long i{j} = it; i{j} < iend; i{j}++) {{")
        lines += ["                " + x for x in w.lines]
        lines += [f"                lm_tile{k}[i{j} - it] = {self.store(b, r)};" for k, (b, r) in enumerate(zip(outs, results))]
        lines.append("            }")
        lines += [f"            lm_stream({self.pointer(b)} + it, lm_tile{k}, (iend - it) * (long long)sizeof({t}));"
                  for k, (b, t) in enumerate(zip(outs, ctypes_))]
        lines.append("        }")
        lines.append("        lm_sfence();")
        lines.append("    }")
        return True

    def _elementwise(self, kernel: ElementwiseKernel, lines):
        dims, value = flatten_space(*refine_space(kernel.dims, kernel.value))
        if self._streamed(dims, [kernel.out], [value], lines, work_per_element(value)):
            return

        def body(vars_, flat):
            w = KernelWriter(self)
            result = self._emit_stored(w, kernel.out, value, vars_)
            return w.lines + [f"{self.pointer(kernel.out)}[{self.index(flat)}] = {self.store(kernel.out, result)};"]

        self._loops(dims, lines, body, simd_inner=True, work=work_per_element(value))

    def _render_rows(self, kernels, lines, local=()):
        """A row group (see :func:`kernel_groups`): a parallel loop over the rows; in it, each member's loop over
        the row's inner axis (a reduction, or an elementwise kernel) or its per-row scalar, in order. The buffers
        in ``local`` (:func:`~luminal.codegen.groups.row_locals`) are read and written through a pointer into the
        thread's row scratch (``lm_row_scratch``), rebased so that the row's indices land at its start."""
        red = kernels[0]
        rows, extent = tuple(red.dims), red.extent
        n = len(rows)
        work = to_expr(0)
        for kernel in kernels:
            per = work_per_element(kernel.value)
            inner = isinstance(kernel, ReduceKernel) or len(kernel.dims) > n and kernel.dims[n] != 1
            work = work + (extent * per if inner else to_expr(per))

        # a short row (a pooling window): every member straight-line, the loop over the rows vectorized
        short = small_extent(extent)
        body = self._row_body(kernels, () if short else local)
        try:
            self._loops(rows, lines, body, work=work, simd_inner=bool(short))
        finally:
            self.local_rows = {}

    def _row_body(self, kernels, local=(), bound: str | None = None, arena: bool = True):
        """``body(vars_, flat)``: the statements of one row of the row group ``kernels`` (see
        :meth:`_render_rows`); the buffers in ``local`` row-local (``arena``: with their arena buffer as the
        fallback; else reserved before, see :mod:`~luminal.codegen.c_attention`); ``bound``: the C text of the
        inner loops' trip count (the row's length by default; the fused attention's visible keys)."""
        red = kernels[0]
        n, extent = len(red.dims), red.extent
        short = small_extent(extent)
        jvar = Expression.symbol("j", extent - 1)
        bound = bound or self.index(extent)

        def body(vars_, flat):
            out = []
            for k, b in enumerate(local):
                ctype, start = self.program.buffers[b][1].c_type, self.index(flat * extent)
                self.local_rows[b] = f"lm_row{k}"
                size = f"(long long)({bound}) * (long long)sizeof({ctype})"
                fallback = f"b{self.slot[b]} + ({start})" if arena else "NULL"
                out.append(f"{ctype} *const lm_row{k} = ({ctype} *)lm_row_scratch({k}, {size}, {fallback}) - "
                           f"({start});")
            for kernel in kernels:
                out.append("{")
                ones = (to_expr(0),) * (len(kernel.dims) - n - 1)  # (a member's trailing axes of extent 1)
                if isinstance(kernel, ReduceKernel) and short:
                    out += ["    " + x for x in self._unrolled_body(kernel, kernel.value, kernel.axis, vars_, flat)]
                elif isinstance(kernel, ReduceKernel):
                    out += ["    " + x for x in self._reduce_body(kernel, vars_, flat, bound)]
                elif len(kernel.dims) > n and kernel.dims[n] != 1 and short:
                    w = KernelWriter(self)
                    for jj in range(short):
                        v = w.emit(kernel.value, vars_ + (to_expr(jj),) + ones)
                        w.lines.append(f"{self.pointer(kernel.out)}[{self.index(flat * extent + jj)}] = "
                                       f"{self.store(kernel.out, v)};")
                    out += ["    " + x for x in w.lines]
                elif len(kernel.dims) > n and kernel.dims[n] != 1:  # over the row's inner axis
                    w = KernelWriter(self, loop_var="j")
                    v = w.emit(kernel.value, vars_ + (jvar,) + ones)
                    out += ["    " + x for x in w.hoisted]
                    out += ["    #pragma omp simd", f"    for (long long j = 0; j < {bound}; j++) {{"]
                    out += ["        " + x for x in w.lines]
                    out.append(f"        {self.pointer(kernel.out)}[{self.index(flat * extent + jvar)}] = "
                               f"{self.store(kernel.out, v)};")
                    out.append("    }")
                else:  # one value per row
                    w = KernelWriter(self)
                    v = w.emit(kernel.value, vars_ + (to_expr(0),) * (len(kernel.dims) - n))
                    out += ["    " + x for x in w.lines] + [
                        f"    {self.pointer(kernel.out)}[{self.index(flat)}] = {self.store(kernel.out, v)};"]
                out.append("}")
            return out

        return body

    def _epilogue(self, name: str, gemm: GemmKernel, kernel: ElementwiseKernel) -> str:
        """The C function running ``kernel`` (an epilogue, see :func:`epilogue_value`) over rows ``[m0, m1)`` and
        columns ``[n0, n1)`` of ``gemm``'s product; ``lm_gemm_*`` calls it on each thread's block of C."""
        n = gemm.dims[-1]
        value, vars_ = epilogue_value(gemm, kernel, batched=True)  # (rows b * M + m where batched)
        lines = [f"static int {name}(void **bufs, const long long *syms, long long m0, long long m1, long long n0, "
                 "long long n1) {", "    int err = 0;"]
        self._prologue([kernel], lines)
        self.constants, at = {}, len(lines)
        w = KernelWriter(self, loop_var="i1")
        v = self._emit_stored(w, kernel.out, value, vars_)
        lines.append("    for (long long i0 = m0; i0 < m1; i0++) {")
        lines += ["        " + x for x in w.hoisted]
        lines += ["        #pragma omp simd", "        for (long long i1 = n0; i1 < n1; i1++) {"]
        lines += ["            " + x for x in w.lines]
        lines.append(f"            {self.pointer(kernel.out)}[i1 + {self.index(n)} * i0] = {self.store(kernel.out, v)};")
        lines += ["        }", "    }"]
        lines[at:at] = [f"    {decl}" for _, decl in self.constants.values()]
        lines += ["    return err;", "}"]
        return "\n".join(lines)

    def _gemm(self, kernel: GemmKernel, lines, epilogue: str = "NULL", fn: str | tuple | None = None,
              packs: tuple = (None, None)):
        dims = kernel.dims
        nb = len(dims) - 2
        m, n = dims[-2], dims[-1]
        av, bv = kernel.a_view, kernel.b_view
        k = av.dims[-1]
        idx = self.index
        batch_vars, a_off, b_off, c_off, batch = gemm_offsets(kernel)
        zero = to_expr(0)
        stores = operand_stores(self.program, kernel)
        if stores:  # an operand stored as bfloat16 / float16: one dispatch function, never searched
            fn = lowp_name(*stores)
        # fn: a function name, or (fallback, [((batch, M, N, K), name), ...]) dispatching on the run-time sizes
        default_fn = "lm_gemm_f32" if kernel.dtype == DType.float32 else "lm_gemm_f64"
        fallback, special = (fn or default_fn, []) if not isinstance(fn, tuple) else fn

        def call(name, assign):
            if packs != (None, None):
                return fused_call(self, kernel, name, assign, packs, batch_vars, (a_off, b_off, c_off), epilogue)
            return (f"{'err = ' if assign else ''}{name}({idx(m)}, {idx(n)}, {idx(k)}, {self.pointer(kernel.a)} + "
                    f"{idx(a_off)}, {idx(av.strides[nb])}, {idx(av.strides[nb + 2])}, {self.pointer(kernel.b)} + "
                    f"{idx(b_off)}, {idx(bv.strides[nb + 1])}, {idx(bv.strides[nb + 2])}, {self.pointer(kernel.out)} + "
                    f"{idx(c_off)}, {epilogue}, bufs, syms);")

        def dispatch(assign):
            if not special:
                return call(fallback, assign)
            text = ""
            for (sb, sm, sn, sk), name in special:
                text += (f"if (({idx(batch)}) == {sb} && ({idx(m)}) == {sm} && ({idx(n)}) == {sn} && ({idx(k)}) == {sk}) "
                         f"{call(name, assign)} else ")
            return text + call(fallback, assign)
        if nb == 0:
            lines.append("    " + dispatch(True))
            return
        if len(packs) > 2:  # a batched direct convolution (groups) runs every batch element itself: one call
            lines.append("    " + fused_call(self, kernel, packs[2], True, packs, (), (av.offset, bv.offset, zero),
                                              epilogue))
            return
        # batched: small GEMMs spread over the OpenMP threads, one BLAS call each (measured 2x faster than a
        # sequence of split calls: 32 x 128x128x64 in 0.45 instead of 0.9-1.0 ms on 2 cores); large ones in
        # sequence, each split over the threads (decided at run time: the sizes may be symbolic)
        lines.append(f"    if (({idx(batch)}) >= 2 && ({idx(m * n * k)}) <= {SMALL_GEMM}) {{")
        lines.append(f"        #pragma omp parallel for collapse({nb}) schedule(static)")
        self._batch_loops(dims[:nb], dispatch(False), lines, "        ")
        lines.append("    } else {")
        self._batch_loops(dims[:nb], dispatch(False), lines, "        ")
        lines.append("    }")

    def _batch_loops(self, dims, call, lines, indent):
        for j, d in enumerate(dims):
            lines.append(f"{indent}{'    ' * j}for (long long i{j} = 0; i{j} < {self.index(d)}; i{j}++) {{")
        lines.append(indent + "    " * len(dims) + call)
        for j in range(len(dims) - 1, -1, -1):
            lines.append(f"{indent}{'    ' * j}}}")
