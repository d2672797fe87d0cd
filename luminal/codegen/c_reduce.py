"""Reductions in the C renderer (:class:`luminal.codegen.c.CRenderer` inherits :class:`ReduceRendering`): one
output element's loop, whole rows of outputs accumulated at once (column sums: bias gradients), full reductions
split over the threads, and the types sums accumulate in."""

from __future__ import annotations

import re

from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .emit import KernelWriter, _literal
from .kernel import ReduceKernel
from .values import merge_value, refine_space, work_per_element

PARALLEL_WORK = 1 << 20  # elements x ops per element below which a loop runs on one thread
# reductions over at most this many (constant) elements are unrolled in the body, and the loop over the outputs
# is the vector loop (a pooling window: a 2-trip `omp simd` reduction loop does not vectorize)
SMALL_EXTENT = 8
SCATTER_BLOCK = 256  # a ScatterAdd's positions per thread chunk along the first axis after the scattered one
_INDEX_DIVISION = re.compile(r"\bi\d+ [/%] \d")  # a loop index divided in an index expression (rendered C)


def small_extent(extent) -> int | None:
    """The constant extent of a reduction short enough to unroll (see ``SMALL_EXTENT``), else None."""
    e = to_expr(extent).to_int()
    return e if e is not None and 1 <= e <= SMALL_EXTENT else None


def _acc_type(dtype: DType, kind: str) -> str:
    """The C type a reduction accumulates in: float for float16 and bfloat16 (rounded once at the end), an
    unsigned type for integer sums (wrap-around without signed overflow; converted back to the dtype at the end),
    else the dtype's own type."""
    if dtype in (DType.float16, DType.bfloat16):
        return "float"
    if kind == "sum" and dtype.is_int:
        return "unsigned long long" if dtype.bits == 64 else "unsigned int"
    return dtype.c_type



class ReduceRendering:
    """The reduction methods of :class:`~luminal.codegen.c.CRenderer` (which provides ``index``, ``pointer``,
    ``store``, ``_loops``)."""

    def _reduce_body(self, kernel: ReduceKernel, vars_, flat, bound: str | None = None) -> list[str]:
        """Statements reducing one output element (at index ``vars_``, flat offset ``flat``) of ``kernel``;
        ``bound``: the C text of the trip count when not the kernel's extent (the fused attention's keys)."""
        dtype = kernel.dtype
        acc_type = _acc_type(dtype, kernel.kind)
        init, combine, simd, track_nan = self._reduce_parts(kernel)
        reduce_var = Expression.symbol("r", kernel.extent - 1)
        w = KernelWriter(self, loop_var="r")
        in_vars = vars_[:kernel.axis] + (reduce_var,) + vars_[kernel.axis:]
        v = w.emit(kernel.value, in_vars)
        out = w.hoisted + [f"{acc_type} acc = {init};"] + (["int nanf = 0;"] if track_nan else [])
        if simd:
            out.append(simd)
        out.append(f"for (long long r = 0; r < {bound or self.index(kernel.extent)}; r++) {{")
        out += ["    " + x for x in w.lines] + ["    " + combine("acc", v), "}"]
        if track_nan:
            out.append("if (nanf) acc = NAN;")
        out.append(f"{self.pointer(kernel.out)}[{self.index(flat)}] = {self._result(kernel)};")
        return out

    def _unrolled_body(self, kernel: ReduceKernel, value, axis: int, vars_, flat) -> list[str]:
        """Statements reducing one output element of a short reduction (``small_extent``) without a loop: the
        ``extent`` terms in order, straight-line, so that the loop around them vectorizes. ``value`` / ``axis``:
        the kernel's, or those of its iteration space with output axes merged."""
        acc_type = _acc_type(kernel.dtype, kernel.kind)
        init, combine, _, track_nan = self._reduce_parts(kernel)
        w = KernelWriter(self)
        w.lines += [f"{acc_type} acc = {init};"] + (["int nanf = 0;"] if track_nan else [])
        for r in range(small_extent(kernel.extent)):
            v = w.emit(value, vars_[:axis] + (to_expr(r),) + vars_[axis:])
            w.lines.append(combine("acc", v))
        if track_nan:
            w.lines.append("acc = nanf ? NAN : acc;")
        return w.lines + [f"{self.pointer(kernel.out)}[{self.index(flat)}] = {self._result(kernel)};"]

    def _unrolled_reduce(self, kernel: ReduceKernel, lines, work) -> bool:
        """A short reduction (``small_extent``) with output axes: adjacent output axes merged while every view
        stays affine, the terms unrolled, the loop over the outputs vectorized. False when it does not apply."""
        if small_extent(kernel.extent) is None or not kernel.dims:
            return False
        dims, value, axis = tuple(kernel.dims), kernel.value, kernel.axis
        j = 0
        while j < len(dims) - 1:
            if j == axis - 1:  # (the reduced axis lies between these two output axes)
                j += 1
                continue
            merged = merge_value(value, j if j < axis else j + 1)
            if merged is None:
                j += 1
                continue
            value = merged
            dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]
            if j < axis:
                axis -= 1

        def body(vars_, flat):
            return self._unrolled_body(kernel, value, axis, vars_, flat)

        self._loops(dims, lines, body, simd_inner=True, work=work)
        return True

    def _result(self, kernel: ReduceKernel) -> str:
        """The stored value of a reduction's accumulator ``acc`` (bfloat16: the float sum rounded once)."""
        if kernel.dtype == DType.bfloat16:
            return self.store(kernel.out, "acc")
        return f"({kernel.dtype.c_type})acc"

    @staticmethod
    def _reduce_parts(kernel: ReduceKernel):
        """``(init, combine(acc, v), simd pragma, track_nan)`` of a sum or max reduction."""
        dtype = kernel.dtype
        if kernel.kind == "sum":
            init = "0"
            if dtype.is_int:  # an unsigned accumulator: wraps around (signed overflow is undefined in C)
                combine = lambda acc, v: f"{acc} += ({_acc_type(dtype, 'sum')}){v};"  # noqa: E731
            else:
                combine = lambda acc, v: f"{acc} += {v};"  # noqa: E731
        else:
            init = "-INFINITY" if dtype.is_float else _literal(dtype.min, dtype)
            # vectorizable max; NaN is tracked in a flag so it still propagates. (__builtin_isnan, not `v != v`:
            # GCC 12 does not vectorize `v != v` of a value loaded with a stride, e.g. a 2-wide pooling window)
            if dtype.is_float:
                combine = lambda acc, v: f"{acc} = {v} > {acc} ? {v} : {acc}; nanf |= __builtin_isnan({v});"  # noqa: E731
            else:
                combine = lambda acc, v: f"{acc} = {v} > {acc} ? {v} : {acc};"  # noqa: E731
        track_nan = kernel.kind == "max" and dtype.is_float
        if kernel.kind == "sum":
            simd = "#pragma omp simd reduction(+:acc)" if dtype.is_float else ""
        else:
            simd = "#pragma omp simd reduction(max:acc)" + (" reduction(|:nanf)" if track_nan else "")
        return init, combine, simd, track_nan

    def _reduce(self, kernel: ReduceKernel, lines):
        dtype = kernel.dtype
        acc_type = _acc_type(dtype, kernel.kind)
        init, combine, _, track_nan = self._reduce_parts(kernel)
        reduce_var = Expression.symbol("r", kernel.extent - 1)
        work = work_per_element(kernel.value) * kernel.extent

        def body(vars_, flat):
            return self._reduce_body(kernel, vars_, flat)

        if self._column_reduce(kernel, lines, reduce_var, work) or self._unrolled_reduce(kernel, lines, work):
            return
        if not kernel.dims:
            # a full reduction: parallelize the reduced loop itself
            w = KernelWriter(self)
            v = w.emit(kernel.value, (reduce_var,))
            lines.append(f"    {acc_type} acc = {init};" + (" int nanf = 0;" if track_nan else ""))
            op = "+" if kernel.kind == "sum" else "max"
            reds = f"reduction({op}:acc)" + (" reduction(|:nanf)" if track_nan else "")
            # each thread a contiguous share, vectorized (not `parallel for simd`: see _loops)
            extent = self.index(kernel.extent)
            lines.append(f"    #pragma omp parallel {reds} if(({self.index(work)}) >= {PARALLEL_WORK})")
            lines.append("    {")
            lines.append("        long long nt = omp_get_num_threads(), t = omp_get_thread_num();")
            lines.append(f"        long long lo = ({extent}) * t / nt, hi = ({extent}) * (t + 1) / nt;")
            lines.append(f"        #pragma omp simd {reds}")
            lines.append("        for (long long r = lo; r < hi; r++) {")
            lines += ["            " + x for x in w.lines] + ["            " + combine("acc", v), "        }", "    }"]
            if track_nan:
                lines.append("    if (nanf) acc = NAN;")
            lines.append(f"    {self.pointer(kernel.out)}[0] = {self._result(kernel)};")
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
        if self._column_reduce_refined(kernel, lines, work):
            return True
        value = kernel.value
        nin = len(kernel.dims) + 1
        # merge the trailing (input) axes a+1.. into one
        for _ in range(len(inner_dims) - 1):
            value = merge_value(value, a + 1)
            if value is None:
                return False
        row = to_expr(1)
        for d in inner_dims:
            row = row * d
        if not row.is_constant() or row.to_int() < 16:
            return False
        outer = kernel.dims[:a]
        outer_vars = tuple(Expression.symbol(f"i{j}", d - 1)
                           for j, d in enumerate(outer))
        jvar = Expression.symbol("j", row.to_int() - 1)
        w = KernelWriter(self)
        v = w.emit(value, outer_vars + (reduce_var, jvar))
        base = to_expr(0)
        for var, st in zip(outer_vars, ShapeTracker.contiguous_of(tuple(outer) + (row,)).strides[:-1]):
            base = base + var * st
        out = self.pointer(kernel.out)
        n_row = self.index(row)
        del nin
        total = work * row  # (work is per output element: the whole row and the outer axes are the loop's)
        for d in outer:
            total = total * d
        lines.append(f"    #pragma omp parallel if(({self.index(total)}) >= {PARALLEL_WORK})")
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

    def _column_reduce_refined(self, kernel: ReduceKernel, lines, work) -> bool:
        """A column sum whose input reads a producer through a reshape (a concatenation of attention heads read
        as ``(batch * seq, 3 * d)``: ``j / 64``, ``r / 128`` in every index): the input space split to the
        producer's axes (:func:`~luminal.codegen.values.refine_space`), the reduced axis and the row becoming
        nested loops with affine indices; the threads split the row's first axis. False when that does not
        apply (the caller renders the per-output loop)."""
        a = kernel.axis
        in_dims = tuple(kernel.dims[:a]) + (kernel.extent,) + tuple(kernel.dims[a:])
        ints = [to_expr(d).to_int() for d in in_dims]
        if any(d is None or d == 0 for d in ints):
            return False
        rdims, value = refine_space(in_dims, kernel.value)
        if len(rdims) == len(in_dims):
            return False
        # only where the unsplit loops would divide an index (split loops cost a little more otherwise)
        trial = KernelWriter(self)
        trial.emit(kernel.value, tuple(Expression.symbol(f"i{k}", d - 1) for k, d in enumerate(ints)))
        if not _INDEX_DIVISION.search("\n".join(trial.lines)):
            return False
        sizes = [d.to_int() for d in rdims]
        groups, j = [], 0
        for d in ints:  # the refined axes of each original axis (refine_space only splits)
            g, acc = [j], sizes[j]
            j += 1
            while acc < d:
                g.append(j)
                acc *= sizes[j]
                j += 1
            groups.append(g)
        outer = [x for g in groups[:a] for x in g]
        red = groups[a]
        rows = [x for g in groups[a + 1:] for x in g]
        row = 1
        for x in rows:
            row *= sizes[x]
        if not rows or row < 16 or sizes[rows[0]] < 4:
            return False
        qs = tuple(Expression.symbol(f"q{k}", n - 1) for k, n in enumerate(sizes))
        w = KernelWriter(self)
        v = w.emit(value, qs)
        flat, stride = to_expr(0), 1
        for x in reversed(rows):
            flat = flat + qs[x] * stride
            stride *= sizes[x]
        base, stride = to_expr(0), row
        for x in reversed(outer):
            base = base + qs[x] * stride
            stride *= sizes[x]
        per = row // sizes[rows[0]]  # outputs per step of the row's first axis
        total = work * row
        for x in outer:
            total = total * sizes[x]
        out = self.pointer(kernel.out)
        lines.append(f"    #pragma omp parallel if(({self.index(total)}) >= {PARALLEL_WORK})")
        lines.append("    {")
        lines.append("        long long nt = omp_get_num_threads(), t = omp_get_thread_num();")
        lines.append(f"        long long lo = ({sizes[rows[0]]} * t) / nt, hi = ({sizes[rows[0]]} * (t + 1)) / nt;")
        ind = "        "
        for x in outer:
            lines.append(f"{ind}for (long long q{x} = 0; q{x} < {sizes[x]}; q{x}++) {{")
            ind += "    "
        lines.append(f"{ind}{kernel.dtype.c_type} *restrict row = {out} + {self.index(base)};")
        lines.append(f"{ind}for (long long j = lo * {per}; j < hi * {per}; j++) row[j] = 0;")
        opened = 0
        for x in red:
            lines.append(f"{ind}for (long long q{x} = 0; q{x} < {sizes[x]}; q{x}++) {{")
            ind += "    "
            opened += 1
        for k, x in enumerate(rows):
            if k == len(rows) - 1:
                lines.append(f"{ind}#pragma omp simd")
            lo, hi = ("lo", "hi") if k == 0 else ("0", str(sizes[x]))
            lines.append(f"{ind}for (long long q{x} = {lo}; q{x} < {hi}; q{x}++) {{")
            ind += "    "
            opened += 1
        lines += [ind + x for x in w.lines]
        lines.append(f"{ind}row[{self.index(flat)}] += {v};")
        for _ in range(opened + len(outer)):
            ind = ind[:-4]
            lines.append(f"{ind}}}")
        lines.append("    }")
        return True

    def _scatter(self, kernel, lines) -> None:
        """A ``ScatterKernel``: the output zeroed, then every index position adds its source value at the row
        its index names. The positions are split over the threads by the axes before the scattered one and by
        blocks of ``SCATTER_BLOCK`` along the first axis after it, so each output element is owned by one thread
        and sums its contributions in ascending position order (deterministic); the scattered axis is walked
        sequentially inside (two of its positions may name the same row), and the innermost axis after it is
        the vector loop (its positions always write distinct elements)."""
        dims, axis = tuple(kernel.dims), kernel.axis
        index_v, src_v = kernel.value.args
        out_dims = dims[:axis] + (to_expr(kernel.size),) + dims[axis + 1:]
        total = to_expr(1)
        for d in out_dims:
            total = total * d
        work = to_expr(1)
        for d in dims:
            work = work * d
        ptr = self.pointer(kernel.out)
        lines.append(f"    memset({ptr}, 0, (size_t)({self.index(total)}) * sizeof(*{ptr}));")
        vars_ = tuple(Expression.symbol(f"i{j}", d - 1) for j, d in enumerate(dims))
        strides = ShapeTracker.contiguous_of(out_dims).strides
        base = to_expr(0)
        for j, (v, s) in enumerate(zip(vars_, strides)):
            if j != axis:
                base = base + v * s
        w = KernelWriter(self)
        k = w.emit(index_v, vars_)
        s = w.emit(src_v, vars_)
        at = f"{ptr}[{self.index(base)} + k_ * {self.index(strides[axis])}]"
        if kernel.dtype.is_int:  # wrap around without signed overflow (undefined in C)
            u, t = _acc_type(kernel.dtype, "sum"), kernel.dtype.c_type
            add = f"{at} = ({t})(({u}){at} + ({u})({s}));"
        else:
            add = f"{at} += {s};"
        body = w.lines + [f"long long k_ = (long long)({k});",
                          f"if (k_ < 0 || k_ >= {self.index(kernel.size)}) err = 4;", f"else {add}"]
        before, after = list(range(axis)), list(range(axis + 1, len(dims)))
        lines.append(f"    #pragma omp parallel for collapse({len(before) + 1}) schedule(static) "
                     f"if(({self.index(work)}) >= {PARALLEL_WORK})")
        ind = "    "
        for j in before:
            lines.append(f"{ind}for (long long i{j} = 0; i{j} < {self.index(dims[j])}; i{j}++) {{")
            ind += "    "
        first = self.index(dims[after[0]]) if after else "1"
        lines.append(f"{ind}for (long long c_ = 0; c_ < ({first} + {SCATTER_BLOCK - 1}) / {SCATTER_BLOCK}; c_++) {{")
        ind += "    "
        lines.append(f"{ind}for (long long i{axis} = 0; i{axis} < {self.index(dims[axis])}; i{axis}++) {{")
        ind += "    "
        for pos, j in enumerate(after):
            if pos == len(after) - 1:
                lines.append(f"{ind}#pragma omp simd")
            lo, hi = (f"c_ * {SCATTER_BLOCK}", f"LUMINAL_MIN(c_ * {SCATTER_BLOCK} + {SCATTER_BLOCK}, {first})") \
                if pos == 0 else ("0", self.index(dims[j]))
            lines.append(f"{ind}for (long long i{j} = {lo}; i{j} < {hi}; i{j}++) {{")
            ind += "    "
        lines += [ind + x for x in body]
        for _ in range(len(before) + len(after) + 2):
            ind = ind[:-4]
            lines.append(f"{ind}}}")
