"""Which kernels of a lowered :class:`~luminal.codegen.kernel.Program` the C renderer emits as one loop nest:
row groups (a reduction and the row-wise kernels after it) and runs of elementwise kernels over one space."""

from __future__ import annotations

import os

from ..shape import Expression, ShapeTracker, to_expr
from .kernel import Compute, ElementwiseKernel, GatherValue, GemmKernel, Load, Program, ReduceKernel, Remapped
from .values import buffer_uses, kernel_buffers, merge_value, read_offsets, walk


def kernel_groups(program: Program, batched_epilogues=False, remapped_rows: bool = False) -> list[list[int]]:
    """Kernels rendered together as one loop nest:

    * a *row group*: a reduction over the innermost axis and the kernels after it that work row by row --
      more innermost reductions over the same rows, per-row scalars, elementwise kernels over the same rows
      -- each reading the group's earlier outputs only in its own row (softmax: max, exp-sum, normalize;
      layer norm: mean, variance, normalize). One parallel loop over the rows runs every member's inner loop
      in turn, so a row stays in L1 between the passes and the group pays one fork/join;
    * a run of consecutive elementwise kernels over the same iteration space (horizontal fusion: an
      optimizer's parameter and moment updates read the gradient once); a later kernel of a run may read an
      earlier one's output only at the same element (a contiguous view of the same dims);
    * a GEMM and its *epilogue*: the elementwise kernel right after an unbatched GEMM, over the GEMM's
      ``M x N`` elements, reading the product only at its own element (a bias, an activation, a residual
      add). Each thread runs the epilogue over its block of the product right after its BLAS call, while the
      block is in cache and without another fork/join (see :func:`epilogue_value`). With
      ``batched_epilogues`` (the Triton renderer, whose GEMM tiles know their batch index) a batched GEMM gets
      one too; it may also be a predicate on the GEMM kernel (the C renderer: the batched GEMMs that one
      direct-convolution call runs whole, a grouped convolution's).

    ``remapped_rows`` (the C renderer, whose row members evaluate any read at its flat offset): a row group's
    member may also read the group's outputs through remapped or gathered values (a ``where`` over the
    probabilities, as ONNX exports of PyTorch's attention end their softmax with) when every such read lands on
    its own element or its row's scalar, and may have trailing axes of extent 1 (a gather's kept axis).
    """
    groups: list[list[int]] = []
    k = 0
    while k < len(program.kernels):
        row = _row_group_at(program.kernels, k, remapped_rows)
        if len(row) > 1:
            groups.append(row)
            k += len(row)
            continue
        kernel = program.kernels[k]
        batched = batched_epilogues(kernel) if callable(batched_epilogues) else batched_epilogues
        if k + 1 < len(program.kernels) and epilogue_value(kernel, program.kernels[k + 1], batched):
            groups.append([k, k + 1])
            k += 2
            continue
        k += 1
        if groups and isinstance(kernel, ElementwiseKernel):
            run = groups[-1]
            first = program.kernels[run[0]]
            if isinstance(first, ElementwiseKernel) and tuple(first.dims) == tuple(kernel.dims) and \
                    _reads_only_elementwise(kernel.value, {program.kernels[i].out for i in run}, kernel.dims):
                run.append(k - 1)
                continue
        groups.append([k - 1])
    return groups


def unit_batch(gemm: GemmKernel) -> bool:
    """Whether GEMM kernel ``gemm`` has no batch axes longer than 1 (one product: an unbatched GEMM's epilogue)."""
    return all(to_expr(d) == 1 for d in gemm.dims[:-2])


def epilogue_value(gemm, kernel, batched: bool = False):
    """``(value, vars)`` when ``kernel`` can run as ``gemm``'s epilogue (see :func:`kernel_groups`), else None:
    ``kernel``'s value, evaluated at index ``vars`` -- expressions over ``i0`` (the product's row) and ``i1``
    (its column) -- gives the output's element ``i0 * N + i1``. The kernel's space must be the product's
    elements: leading axes whose sizes multiply to ``M`` (their indices are taken apart from ``i0``, once per
    row) and trailing ones that multiply to ``N`` (those longer than 1 merge into one affine axis, walked by
    ``i1``); and the value must read the product only at its own element. The GEMM is unbatched (or its batch
    axes are all 1: a convolution's product with one group); ``batched``: a batched GEMM too, its rows being
    ``batch * M`` (``i0 = b * M + m``)."""
    if not isinstance(gemm, GemmKernel) or not isinstance(kernel, ElementwiseKernel) or len(gemm.dims) < 2 or \
            not batched and not unit_batch(gemm):
        return None
    m, n = to_expr(1), gemm.dims[-1]
    for d in gemm.dims[:-1]:
        m = m * d
    dims, value = tuple(kernel.dims), kernel.value
    split, prefix = None, to_expr(1)
    for s in range(1, len(dims)):
        prefix = prefix * dims[s - 1]
        suffix = to_expr(1)
        for d in dims[s:]:
            suffix = suffix * d
        if prefix == m and suffix == n:
            split = s
            break
    if split is None:
        return None
    while True:  # the column axes longer than 1 merge into one
        long_axes = [j for j in range(split, len(dims)) if dims[j] != 1]
        if len(long_axes) <= 1:
            break
        j = long_axes[-1] - 1  # merge the last long axis with the axis before it
        value = merge_value(value, j, dims=dims)
        if value is None:
            return None
        dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]
    i0, i1 = (Expression.symbol(v, d - 1) for v, d in (("i0", m), ("i1", n)))
    row_vars, inner = [], to_expr(1)
    first = min((j for j in range(split) if dims[j] != 1), default=0)
    for j in range(split - 1, -1, -1):  # i0 taken apart over the row axes
        d = dims[j]
        row_vars.insert(0, to_expr(0) if d == 1 else i0 // inner if j == first else (i0 // inner) % d)
        inner = inner * d
    vars_ = tuple(row_vars) + tuple(to_expr(0) if d == 1 else i1 for d in dims[split:])
    own, _ = ShapeTracker.contiguous_of(dims).axis_expressions(vars_)  # = i0 * N + i1
    if any(off != own for off in read_offsets(value, vars_, gemm.out)):
        return None  # reads the product at another element (or at one not known statically)
    return value, vars_


def in_place_epilogues(program: Program, groups: list, uses) -> dict:
    """``{epilogue output: product}`` for the GEMM + epilogue groups (see :func:`kernel_groups`) whose epilogue
    may write its output over the product: nothing else reads the product, both are intermediates (no input,
    output or alias) of one dtype and size. The epilogue reads the product only at the element it writes (that
    is what makes it an epilogue), and every GEMM routine runs it on a block of the product only once the block
    is final and reads that block no more: so the product's bytes take the result and the product never goes
    to memory on its own (one write of the activation instead of two). ``uses``: the program's
    :func:`~luminal.codegen.values.buffer_uses`. The arena gives both one slot
    (:mod:`luminal.runtime.cpu_plan`); the epilogue's pointers to them are not ``restrict``. ``LUMINAL_IN_PLACE=0``
    turns this off (measured: a 1x1 convolution 16 -> 96 channels over 8 x 56 x 56 with its ReLU6, 0.85 -> 0.67
    ms)."""
    if os.environ.get("LUMINAL_IN_PLACE", "1") == "0":
        return {}
    _, readers, pinned = uses
    out = {}
    for group in groups:
        if len(group) != 2 or not isinstance(program.kernels[group[0]], GemmKernel):
            continue
        g, e = (program.kernels[i] for i in group)
        (pd, pt), (ed, et) = program.buffers[g.out], program.buffers[e.out]
        if g.out in pinned or e.out in pinned or pt != et or set(readers.get(g.out, ())) != {group[1]}:
            continue
        if (_elements(pd) - _elements(ed)).to_int() == 0:
            out[e.out] = g.out
    return out


def row_locals(program: Program, group: list, uses=None) -> list:
    """The buffers a row group (see :func:`kernel_groups`; ``group``: its kernel indices) may keep row-local:
    outputs of its members over the row's inner axis that are intermediates (no input, output or alias) read by
    no kernel outside the group. Members read each other's outputs only in their own row (that is what makes
    them a group), so each thread can hold such a buffer's current row in a scratch buffer of one row
    (``lm_row_scratch``): softmax's exponentials, layer norm's centred values. ``uses``: the program's
    :func:`~luminal.codegen.values.buffer_uses` (computed when not given). ``LUMINAL_ROW_LOCAL=0`` turns this
    off."""
    if os.environ.get("LUMINAL_ROW_LOCAL", "1") == "0":
        return []
    _, readers, pinned = uses or buffer_uses(program)
    members = set(group)
    n = len(program.kernels[group[0]].dims)
    out = []
    for i in group[1:]:
        k = program.kernels[i]
        if isinstance(k, ElementwiseKernel) and len(k.dims) > n and k.dims[n] != 1 and k.out not in pinned \
                and set(readers.get(k.out, ())) <= members:
            out.append(k.out)
    return out


def _elements(dims):
    n = to_expr(1)
    for d in dims:
        n = n * to_expr(d)
    return n


def epilogues_adjacent(program: Program) -> Program:
    """``program`` with the elementwise kernels that sit between a GEMM and its epilogue candidate moved before
    the GEMM, so that :func:`kernel_groups` can pair them: autocast's ``Linear`` rounds its bias to bfloat16 in
    a kernel the depth-first schedule places after the product, which kept the bias add, its rounding and a
    following head split out of the GEMM's epilogue (one more kernel, one more pass over the product, per
    layer). A kernel moves only when it does not read the product (the epilogue candidate is the product's
    first reader) and is elementwise; every buffer is written once, so reading and writing stay ordered.
    Returns ``program`` itself (reordered in place) for chaining."""
    kernels = program.kernels
    aliased = set(program.aliases) | set(program.aliases.values())
    i = 0
    while i < len(kernels):
        g = kernels[i]
        if isinstance(g, GemmKernel) and g.out not in aliased:
            j = next((j for j in range(i + 1, len(kernels))
                      if g.out in kernel_buffers(kernels[j]) - {kernels[j].out}), None)  # the first reader
            between = kernels[i + 1:j] if j is not None else []
            if between and all(isinstance(k, ElementwiseKernel) and k.out not in aliased for k in between) \
                    and epilogue_value(g, kernels[j], batched=True) is not None:
                kernels[i:j] = between + [g]
                i += len(between)
        i += 1
    return program


MIN_ROWS = 8  # a row group needs at least this many rows to split over the threads (or symbolic ones)


def _row_group_at(kernels, start: int, remapped: bool = False) -> list[int]:
    """The row group starting at kernel ``start`` (see :func:`kernel_groups`); ``[start]`` when there is none."""
    red = kernels[start]
    if not isinstance(red, ReduceKernel) or not red.dims or red.axis != len(red.dims) or red.extent == 1:
        return [start]
    rows, extent = tuple(red.dims), red.extent
    count = to_expr(1)
    for d in rows:
        count = count * d
    if count.is_constant() and count.to_int() < MIN_ROWS:
        return [start]
    produced = {red.out: rows}  # buffer -> its dims, for the group's outputs so far
    members = [start]
    for k in range(start + 1, len(kernels)):
        kernel = kernels[k]
        if isinstance(kernel, ReduceKernel):
            if tuple(kernel.dims) != rows or kernel.axis != len(rows) or kernel.extent != extent:
                break
            space = rows + (extent,)
        elif isinstance(kernel, ElementwiseKernel) and _row_space(tuple(kernel.dims), rows, extent, remapped):
            space = tuple(kernel.dims)
        else:
            break
        if not _reads_own_row(kernel.value, produced, space, len(rows), remapped):
            break
        produced[kernel.out] = tuple(kernel.dims)
        members.append(k)
    return members


def _row_space(dims: tuple, rows: tuple, extent, trailing: bool) -> bool:
    """Whether an elementwise kernel over ``dims`` works on the rows ``rows`` (of ``extent`` elements): one value
    per row or one per element, with more axes of extent 1 after them where ``trailing``."""
    n = len(rows)
    if trailing and len(dims) > n + 1 and all(to_expr(d) == 1 for d in dims[n + 1:]):
        dims = dims[:n + 1]
    return dims in (rows, rows + (to_expr(1),), rows + (extent,))


def _reads_own_row(value, produced: dict, space: tuple, n: int, remapped: bool = False) -> bool:
    """Whether ``value`` (over ``space``: the rows, plus an inner axis or not) reads the buffers in ``produced``
    only in its own row: a row's scalar broadcast along the inner axis, or the same element of a row (read
    plainly; with ``remapped`` also through remapped or gathered values, see :func:`_own_row_offsets`)."""
    return _plain_own_row(value, produced, space, n) or remapped and _own_row_offsets(value, produced, space, n)


def _own_row_offsets(value, produced: dict, space: tuple, n: int) -> bool:
    """Whether every offset at which ``value`` reads a buffer of ``produced`` (:func:`read_offsets`, the C
    emitter's own evaluation, through remaps and gathers) is provably its own element of the row or its row's
    scalar, over index variables bounded by ``space`` (an offset that depends on a gathered run-time index is
    not)."""
    inner = len(space) > n and to_expr(space[n]) != 1
    vs = [Expression.symbol(f"lm_row{j}", to_expr(d) - 1) for j, d in enumerate(space[:n])]
    vs += ([Expression.symbol("lm_key", to_expr(space[n]) - 1)] if inner else []) + [to_expr(0)] * len(space)
    vs = vs[:len(space)]  # (one variable per axis of the space: the rows, the key, zeros for axes of extent 1)
    for buf, dims in produced.items():
        offsets = read_offsets(value, vs, buf)
        wide = len(dims) > n and to_expr(dims[n]) != 1
        if not offsets:
            continue
        if wide and not inner:
            return False  # a per-row value reading the row's elements: a reduction, not a member
        at = (vs[:n] + [vs[n] if wide else to_expr(0)] + [to_expr(0)] * len(dims))[:len(dims)]  # (wide: inner)
        own, _ = ShapeTracker.contiguous_of(dims).axis_expressions(tuple(at))
        for off in offsets:
            diff = (to_expr(off) - own).simplify()
            if not (diff.is_constant() and diff.to_int() == 0):
                return False
    return True


def _plain_own_row(value, produced: dict, space: tuple, n: int) -> bool:
    stack = [(value, False)]
    while stack:
        v, nested = stack.pop()
        if isinstance(v, Load) and v.buffer in produced:
            if nested:
                return False  # read at indices remapped or gathered: not known to stay in the row
            dims = produced[v.buffer]
            own = ShapeTracker.contiguous_of(dims).strides
            view = v.view
            if view.offset != 0 or view.masks or tuple(view.dims) != tuple(space):
                return False
            if any(space[j] != 1 and view.strides[j] != own[j] for j in range(n)):
                return False
            if len(space) > n and space[n] != 1:  # the reader walks the row's inner axis
                same_element = len(dims) > n and dims[n] != 1 and view.strides[n] == 1
                if not (same_element or view.strides[n] == 0):
                    return False
        elif isinstance(v, GatherValue):
            if v.data is None and v.data_buffer in produced:
                return False
            stack.append((v.index, nested))
            if v.data is not None:
                stack.append((v.data, True))
        elif isinstance(v, Remapped):
            stack.append((v.value, True))
        elif isinstance(v, Compute):
            stack.extend((a, nested) for a in v.args)
    return True


def _reads_only_elementwise(value, outs: set, dims) -> bool:
    same = ShapeTracker.contiguous_of(dims)
    for v in walk(value):
        if isinstance(v, Load) and v.buffer in outs and v.view != same:
            return False
        if isinstance(v, GatherValue) and v.data is None and v.data_buffer in outs:
            return False
        if isinstance(v, GatherValue) and v.data is not None and any(
                isinstance(u, Load) and u.buffer in outs for u in walk(v.data)):
            return False
        if isinstance(v, Remapped) and any(isinstance(u, Load) and u.buffer in outs for u in walk(v.value)):
            return False
    return True
