"""Reductions of the Triton renderer (:class:`luminal.codegen.triton.TritonRenderer` inherits
:class:`ReduceRendering`): one reduction per kernel, ScatterAdd, and *row groups* -- a reduction over the innermost
axis and the kernels after it that work row by row (:func:`luminal.codegen.groups.kernel_groups`, as the C backend:
softmax's max, exp-sum and normalize; layer norm's mean, variance and normalize), computed by one kernel whose
program holds its rows in registers from the first pass to the last.
"""

from __future__ import annotations

from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import ElementwiseKernel, Load, ReduceKernel, ScatterKernel
from .triton_support import TL_TYPE, _int_text, _pow2
from .values import walk

SCATTER_BLOCK = 128        # positions (off the scattered axis) per program of a ScatterAdd: more programs for narrow rows
REDUCE_TILE = 4096         # BLOCK_M * BLOCK_K of a reduction
REDUCE_MAX_K = 1024        # the largest reduced chunk (a constant extent up to this is one chunk)
REDUCE_SYMBOLIC_K = 128    # the chunk of a symbolic extent
LONG_ROWS_FEW = 1024       # fewer rows than this, each at least REDUCE_MAX_K long: 2 rows per program, not 4
COLUMN_ROWS = 8            # BLOCK_M of a reduction whose rows are adjacent in memory: 8 float32 fill a 32-byte
                           # sector (4 rows used half of each); more would cost programs (rows / BLOCK_M)
ROW_GROUP_TYPES = (DType.float32, DType.float64)  # the reductions of a fused row group are of these types


def _accumulator(kernel: ReduceKernel) -> tuple[str, str]:
    """The Triton type a reduction accumulates in and its identity."""
    dtype = kernel.dtype
    acc_tt = TL_TYPE[DType.float32 if dtype == DType.float16 else dtype]
    if kernel.kind == "sum":
        return acc_tt, "0"
    return acc_tt, 'float("-inf")' if dtype.is_float else _int_text(dtype.min, dtype)


def _across_lanes(kernel: ReduceKernel, acc: str, out: str, indent: str = "    ") -> list[str]:
    """Statements reducing the ``[BLOCK_M, BLOCK_K]`` block ``acc`` along its lanes into ``out`` (max: a NaN lane
    makes the row NaN; ``tl.max`` itself need not propagate it)."""
    if kernel.kind == "sum":
        return [f"{indent}{out} = tl.sum({acc}, axis=1)"]
    lines = [f"{indent}{out} = tl.max({acc}, axis=1)"]
    if kernel.dtype.is_float:
        lines.append(f"{indent}{out} = tl.where(tl.max(({acc} != {acc}).to(tl.int32), axis=1) > 0, float(\"nan\"), {out})")
    return lines


def _column_major(kernel: ReduceKernel) -> bool:
    """Whether the reduction's operand lies along its rows rather than along the reduced axis: some load has stride
    1 over the innermost output axis and none over the reduced one (a sum over the rows of a row-major matrix: a
    bias gradient, batch statistics). Its tile should then be wide along the rows, whose elements are adjacent."""
    ndim = len(kernel.dims) + 1
    if kernel.axis == ndim - 1 or not kernel.dims:
        return False
    inner = ndim - 1  # the innermost output axis, in the input space
    along_rows = along_axis = False
    for v in walk(kernel.value, inlined=False):
        if isinstance(v, Load):
            strides = [to_expr(st).to_int() for st in v.view.strides]
            along_rows |= strides[inner] == 1
            along_axis |= strides[kernel.axis] == 1
    return along_rows and not along_axis


def _accumulate(kernel: ReduceKernel, acc: str, value: str, indent: str) -> str:
    """The statement adding the ``[BLOCK_M, BLOCK_K]`` block ``value`` (its dead lanes already the identity) into
    the accumulator ``acc``."""
    if kernel.kind == "sum":
        return f"{indent}{acc} = {acc} + {value}"
    return f"{indent}{acc} = _lm_max({acc}, {value})"


def _blocks(extent, n_rows, column: bool = False) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_K)`` of a reduction over ``extent`` for ``n_rows`` rows. ``column``
    (:func:`_column_major`): rows are adjacent in memory, so ``COLUMN_ROWS`` of them per program (whole 32-byte
    sectors per load) and a shorter chunk of the reduced axis."""
    ext = to_expr(extent).to_int()
    if column:
        rows = n_rows.to_int()
        bm = max(min(COLUMN_ROWS, _pow2(rows)) if rows is not None else COLUMN_ROWS, 2)
        cap = max(2, REDUCE_TILE // bm)
        return bm, max(min(_pow2(ext), cap) if ext is not None else min(REDUCE_SYMBOLIC_K, cap), 2)
    bk = max(min(_pow2(ext), REDUCE_MAX_K) if ext is not None else REDUCE_SYMBOLIC_K, 2)
    bm = max(1, REDUCE_TILE // bk)
    rows = n_rows.to_int()
    if rows is not None:
        bm = min(bm, _pow2(rows))
        if bk == REDUCE_MAX_K and rows < LONG_ROWS_FEW:  # long rows, few of them: more programs, each a full chunk
            bm = 2
    return max(bm, 2), bk


def row_group_fusable(members) -> bool:
    """Whether a row group (its kernels, from :func:`~luminal.codegen.groups.kernel_groups`) can be one Triton
    kernel: every reduction is float32 or float64 (the elementwise members may be of any type: autocast's
    rounding of a softmax to bfloat16), and no per-row kernel reads an output over the rows' elements (it would
    read one element of the row, which the kernel does not hold as such). Rows of one chunk (a constant extent
    up to ``REDUCE_MAX_K``, or a symbolic one at a binding where it fits) are held in registers; longer rows are
    looped over (``_row_group(looped=True)``; a symbolic extent has both, ``Launch.fallback``)."""
    red = members[0]
    if any(m.dtype not in ROW_GROUP_TYPES for m in members if isinstance(m, ReduceKernel)):
        return False
    n = len(red.dims)
    interior = {m.out for m in members if isinstance(m, ElementwiseKernel) and len(m.dims) > n and m.dims[n] != 1}
    for m in members:
        per_row = isinstance(m, ElementwiseKernel) and not (len(m.dims) > n and m.dims[n] != 1)
        if per_row and any(isinstance(v, Load) and v.buffer in interior for v in walk(m.value)):
            return False
    return True


class ReduceRendering:
    """The reduction part of the renderer (needs the renderer's ``program``, ``ex``, ``pointer``, ``_header``,
    ``_unravel``, ``_numel``, ``_constant_sizes`` and ``_store``)."""

    def _row_group(self, k, members: list, unread=frozenset(), looped: bool | None = None):
        """One kernel computing a row group (``members``: its kernels, the first a reduction over the innermost
        axis of its rows, :func:`row_group_fusable`): a program owns ``BLOCK_M`` rows and computes the members in
        order. Rows of one ``BLOCK_K`` chunk (``looped=False``): a member reads an earlier one's output from
        registers (a row's scalar broadcast along the row, or the same element), never from memory. Longer rows
        (``looped``: by default for a constant extent over ``REDUCE_MAX_K``; True for the fallback of a symbolic
        one): each reduction and each per-element member loops over the row in chunks; row scalars stay in registers,
        per-element outputs a later member reads are stored and read back (the row was just written by this
        program: from L2, not DRAM), after a barrier. Outputs in ``unread`` (read only inside the group, and not
        needed from memory) are not stored."""
        from .triton import BodyWriter, Launch
        red = members[0]
        if looped is None:
            looped = (to_expr(red.extent).to_int() or 0) > REDUCE_MAX_K
        rows = tuple(red.dims)
        n_rows = self._numel(rows)
        lines, buffers, syms = self._header(k, red, ["n_rows", "extent"], ["BLOCK_M", "BLOCK_K"], also=members[1:])
        lines += self._constant_sizes({"n_rows": n_rows, "extent": to_expr(red.extent)}, syms)
        lines += ["    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)",
                  "    rows_live = rows < n_rows",
                  "    rr = rows[:, None]",
                  "    row_live = rr < n_rows",
                  "    zr = tl.zeros([BLOCK_M, 1], tl.int64)"]
        chunk = ["lm_r = tl.arange(0, BLOCK_K)[None, :]", "live = row_live & (lm_r < extent)",
                 "zi = tl.zeros([BLOCK_M, BLOCK_K], tl.int64)"]
        if not looped:
            lines += [f"    {t}" for t in chunk]
        else:
            chunk[0] = "lm_r = k0 + tl.arange(0, BLOCK_K)[None, :]"
        unravel, out_vars = self._unravel(rows, "rr", "lm_i")
        lines += unravel
        rvar = Expression.symbol("lm_r", red.extent - 1)
        n = len(rows)
        substitute: dict[int, str] = {}
        counter = 0
        read_later = {v.buffer for m in members[1:] for v in walk(m.value) if isinstance(v, Load)}
        stored_rows = False  # a per-element output was stored in a loop that a later loop may read back
        for j, member in enumerate(members):
            inner = not isinstance(member, ElementwiseKernel) or (len(member.dims) > n and member.dims[n] != 1)
            ind = "        " if looped and inner else "    "
            w = BodyWriter(self, "[BLOCK_M, BLOCK_K]" if inner else "[BLOCK_M, 1]",
                           live="live" if inner else "row_live", zi="zi" if inner else "zr", indent=ind)
            w.counter, w.substitute = counter, substitute
            tt = TL_TYPE[member.dtype]
            head = []
            if isinstance(member, ReduceKernel):
                acc_tt, ident = _accumulator(member)
            if looped and inner:
                if stored_rows:
                    head.append("    tl.debug_barrier()  # this program's stores of the row are read back below")
                    stored_rows = False
                if isinstance(member, ReduceKernel):
                    head.append(f"    lm_acc{j} = tl.full([BLOCK_M, BLOCK_K], {ident}, {acc_tt})")
                head.append("    for k0 in range(0, extent, BLOCK_K):")
                head += [f"{ind}{t}" for t in chunk]
            if isinstance(member, ReduceKernel):
                v = w.emit(member.value, out_vars + (rvar,))
                val = f"tl.where(live, {v}.to({acc_tt}), {ident})"
                w.lines.append(_accumulate(member, f"lm_acc{j}", val, ind) if looped else f"    lm_acc{j} = {val}")
                tail = _across_lanes(member, f"lm_acc{j}", f"lm_out{j}")
                if member.out not in unread:
                    tail.append(self._store(member, f"lm_out{j}.to({tt})", "rows", "rows_live"))
                if looped:
                    lines += head + w.lines + tail
                    w.lines, w.indent = [], "    "
                else:
                    w.lines += tail
                substitute[member.out] = w.temp(f"lm_out{j}.to({tt})[:, None]")
            else:
                v = w.emit(member.value, out_vars + ((rvar,) if inner else (to_expr(0),) * (len(member.dims) - n)))
                stored = f"{v}.to({tt})" if member.dtype != DType.bool else v
                back = looped and inner and member.out in read_later
                if member.out not in unread or back:
                    w.lines.append(self._store(member, stored, "rr * extent + lm_r" if inner else "rr",
                                               "live" if inner else "row_live", indent=ind))
                    stored_rows |= back
                if not (looped and inner):  # (a looped per-element output is read back from memory)
                    # as stored (bfloat16 values are bfloat16 already, in float32 blocks as loads give them)
                    substitute[member.out] = v if member.dtype in (DType.bool, DType.bfloat16) else w.temp(stored)
                lines += head
            counter = w.counter
            lines += w.lines
        bm, bk = _blocks(REDUCE_MAX_K if looped else red.extent, n_rows)
        symbolic = not to_expr(red.extent).is_constant()
        launch = Launch(f"kernel_{k}", "reduce", buffers, syms, [n_rows, red.extent],
                        {"BLOCK_M": bm, "BLOCK_K": bk}, (n_rows, bm), red.out,
                        row_extent=to_expr(red.extent) if symbolic and not looped else None)
        return "\n".join(lines), launch

    def _reduce(self, k: int, kernel: ReduceKernel):
        from .triton import BodyWriter, Launch
        dtype = kernel.dtype
        if dtype == DType.bool:
            raise NotImplementedError("Triton backend: reduction over bool")
        lines, buffers, syms = self._header(k, kernel, ["n_rows", "extent"], ["BLOCK_M", "BLOCK_K"])
        lines += self._constant_sizes({"n_rows": self._numel(kernel.dims), "extent": to_expr(kernel.extent)}, syms)
        acc_tt, ident = _accumulator(kernel)
        lines += ["    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)",
                  "    rows_live = rows < n_rows",
                  "    rr = rows[:, None]",
                  "    row_live = rr < n_rows"]
        unravel, out_vars = self._unravel(kernel.dims, "rr", "lm_i")
        lines += unravel
        lines.append(f"    acc = tl.full([BLOCK_M, BLOCK_K], {ident}, {acc_tt})")
        lines.append("    for k0 in range(0, extent, BLOCK_K):")
        ind = "        "
        lines += [f"{ind}lm_r = k0 + tl.arange(0, BLOCK_K)[None, :]",
                  f"{ind}live = row_live & (lm_r < extent)",
                  f"{ind}zi = tl.zeros([BLOCK_M, BLOCK_K], tl.int64)"]
        rvar = Expression.symbol("lm_r", kernel.extent - 1)
        in_vars = out_vars[:kernel.axis] + (rvar,) + out_vars[kernel.axis:]
        w = BodyWriter(self, "[BLOCK_M, BLOCK_K]", indent=ind)
        v = w.emit(kernel.value, in_vars)
        lines += w.lines
        v = f"{v}.to({acc_tt})"
        lines.append(_accumulate(kernel, "acc", f"tl.where(live, {v}, {ident})", ind))
        lines += _across_lanes(kernel, "acc", "out")
        lines.append(self._store(kernel, f"out.to({TL_TYPE[dtype]})", "rows", "rows_live"))
        n_rows = self._numel(kernel.dims)
        bm, bk = _blocks(kernel.extent, n_rows, _column_major(kernel))
        launch = Launch(f"kernel_{k}", "reduce", buffers, syms, [n_rows, kernel.extent],
                        {"BLOCK_M": bm, "BLOCK_K": bk}, (n_rows, bm), kernel.out)
        return "\n".join(lines), launch

    def _scatter(self, k: int, kernel: ScatterKernel):
        """A ScatterAdd without atomics, deterministic, as two launches: ``kernel_<k>_zero`` fills the output with
        zeros (all of it in parallel), then in ``kernel_<k>`` a program owns ``SCATTER_BLOCK`` positions of the
        axes other than the scattered one and walks the scattered axis in order, adding each source value at the
        row its index names (its lanes always write distinct elements). The walk is sequential per program: an
        embedding table of width 384 is 3 programs walking every token (not measured on a GPU yet)."""
        from .triton import ELEMENTWISE_BLOCK, BodyWriter, Launch
        dtype, axis, dims = kernel.dtype, kernel.axis, tuple(kernel.dims)
        if dtype not in TL_TYPE or dtype in (DType.bool, DType.float16, DType.bfloat16):
            raise NotImplementedError(f"Triton backend: ScatterAdd in {dtype}")
        lines, buffers, syms = self._header(k, kernel, ["n_rest", "n_axis", "size"], ["BLOCK"])
        rest = dims[:axis] + dims[axis + 1:]
        lines += ["    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                  "    live = offs < n_rest",
                  "    zi = tl.zeros([BLOCK], tl.int64)"]
        unravel, rvars = self._unravel(rest, "offs", "lm_i")
        lines += unravel
        out_dims = dims[:axis] + (to_expr(kernel.size),) + dims[axis + 1:]
        strides = ShapeTracker.contiguous_of(out_dims).strides
        base = to_expr(0)
        for v, s in zip(rvars, strides[:axis] + strides[axis + 1:]):
            base = base + v * s
        ptr = self.pointer(kernel.out)
        tt = TL_TYPE[dtype]
        lines += [f"    lm_base = {self.ex.int_(base)} + zi",
                  "    for lm_a in range(0, n_axis):"]
        avar = Expression.symbol("lm_a", dims[axis] - 1)
        w = BodyWriter(self, "[BLOCK]", indent="        ")
        vars_ = rvars[:axis] + (avar,) + rvars[axis:]
        idx = w.emit(kernel.value.args[0], vars_)
        src = w.emit(kernel.value.args[1], vars_)
        lines += w.lines
        lines += [f"        lm_k = {idx}.to(tl.int64) + zi",
                  "        lm_bad = live & ((lm_k < 0) | (lm_k >= size))",
                  "        tl.store(err_ptr + zi, tl.full([BLOCK], 4, tl.int32), mask=lm_bad)",
                  "        lm_ok = live & (lm_k >= 0) & (lm_k < size)",
                  f"        lm_at = {ptr} + lm_base + lm_k * {self.ex.int_(strides[axis])}",
                  f"        tl.store(lm_at, tl.load(lm_at, mask=lm_ok, other=0) + ({src}).to({tt}), mask=lm_ok)"]
        n_rest = self._numel(rest)
        launch = Launch(f"kernel_{k}", "scatter", buffers, syms, [n_rest, dims[axis], to_expr(kernel.size)],
                        {"BLOCK": SCATTER_BLOCK}, (n_rest, SCATTER_BLOCK), kernel.out)
        n_out = self._numel(out_dims)
        zero = [f"@triton.jit(do_not_specialize=['numel'])", f"def kernel_{k}_zero(out, err_ptr, numel, BLOCK: tl.constexpr):",
                "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                f"    tl.store(out + offs, tl.zeros([BLOCK], {tt}), mask=offs < numel)"]
        zero_launch = Launch(f"kernel_{k}_zero", "elementwise", [kernel.out], [], [n_out],
                             {"BLOCK": ELEMENTWISE_BLOCK}, (n_out, ELEMENTWISE_BLOCK), kernel.out)
        return "\n".join(zero + ["", ""] + lines), [zero_launch, launch]


def launch_sizes(launch, bindings) -> tuple[dict, int] | None:
    """``(constexprs, programs)`` of a non-GEMM launch at ``bindings``; None for a row group whose rows are longer
    than one chunk there (its ``fallback`` launches run instead)."""
    count = launch.grid[0].evaluate(bindings)
    if launch.row_extent is None:
        return launch.constexprs, -(-count // launch.grid[1])
    extent = launch.row_extent.evaluate(bindings)
    if extent > REDUCE_MAX_K:
        return None
    bm, bk = _blocks(extent, to_expr(count))
    return {"BLOCK_M": bm, "BLOCK_K": bk}, -(-count // bm)
