"""Layout choice for elementwise outputs: stored in the order of the GEMM product they are computed from.

A convolution's product is channel-major: ``(groups, C_out / groups, N * H * W)``, one GEMM over every image. The
batch norm, activation or residual add after it writes ``(N, C, H, W)``, so it cannot run as the GEMM's epilogue
(:func:`~luminal.codegen.groups.epilogue_value` needs the product's element order) and is a pass of its own over
the activation; the next 1x1 convolution then copies that ``(N, C, H, W)`` buffer back into channel-major order
for its GEMM (the im2col copy of a 1x1 window is a transpose). Measured on a MobileNetV2-style network (batch 8,
112x112): those passes were about a fifth of the kernel time.

:func:`order_outputs` stores such an elementwise kernel's output with its axes permuted into the product's order
(the kernel iterates over the permuted space), when

* the kernel comes right after the GEMM, whose batch axes are all 1 (the C renderer's epilogues are per matrix),
  and it reads the product at its own element once permuted (then it *is* the epilogue: the pass is gone);
* every other reader's view of the output can be re-expressed exactly over the permuted layout
  (:func:`permuted_view`; masked views too: a padded window of the next convolution), no gather indexes it, and
  it is not a program input, output or alias;
* what the readers lose in contiguous reads along their vector loops (as :mod:`luminal.codegen.layout` counts
  them, symbols bound to a sample size) is less than the pass saved.

The next 1x1 convolution's transpose needs no pass of its own either way: the lowering computes the activation
into its copy (stored channel-major) where nothing else reads it.

Values are unchanged: the same elements computed by the same expressions, stored elsewhere. ``LUMINAL_LAYOUT=0``
turns this off too.
"""

from __future__ import annotations

import dataclasses
import os

from ..shape import Expression, ShapeTracker, to_expr
from ..shape.tracker import contiguous_strides
from .sizes import _below, _divides, _int, _least, _long, _prod, _size, same_size
from .groups import epilogue_value, unit_batch
from .kernel import ElementwiseKernel, GemmKernel, Load, Program, ReduceKernel, Remapped
from .layout import _rewrite, _unit_step, _views, _views_all, map_loads
from .values import kernel_buffers, permute_value, read_offsets

SAMPLE = 7  # the size a symbol takes where contiguity is judged (a batch: the same answer from 2 up)


def axis_map(view: ShapeTracker, dims) -> tuple | None:
    """How ``view`` reads a row-major buffer of ``dims``, one buffer axis per moving reader axis:
    ``(per_axis, origin)`` with ``per_axis[d] = (a, c)`` (reader axis ``d`` moves buffer axis ``a``'s coordinate
    by ``c`` per step; None for an axis that does not move) and ``origin[a]`` the coordinate at index 0, such that
    at every position the view does not mask, each coordinate lies inside its axis (proven for every binding of
    the symbols from 1 up; a mask bounding exactly one axis's coordinate proves it there: a padded window). None
    when that cannot be shown."""
    dims = [_size(d) for d in dims]
    rs = [_size(s) for s in contiguous_strides(dims)]
    per: list = []
    for s, k in zip(view.strides, view.dims):
        s, k = _size(s), _size(k)
        if not _long(k) or same_size(s, 0):
            per.append(None)
            continue
        neg = _int(s) is not None and _int(s) < 0
        mag = _size(-to_expr(s)) if neg else s
        # the outermost axis whose stride divides the step (an axis further in would be left at every step)
        a = next((a for a in range(len(dims)) if _long(dims[a]) and _divides(rs[a], mag)), None)
        if a is None:
            return None
        c = _int(to_expr(mag) // to_expr(rs[a]))
        if c is None:
            return None
        per.append((a, -c if neg else c))
    masks = [([_int(x) for x in co], _int(const), size) for co, const, size in view.masks]
    origin: list = [None] * len(dims)
    for a in range(len(dims)):
        terms = {d: e[1] for d, e in enumerate(per) if e is not None and e[0] == a}
        if not terms:
            continue
        for co, const, size in masks:
            if const is not None and None not in co and same_size(size, dims[a]) and all(
                    co[d] == terms.get(d, 0) for d in range(len(co))):
                origin[a] = const  # (this mask is the coordinate's range)
                break
    rem = to_expr(view.offset) - sum((to_expr(origin[a]) * rs[a] for a in range(len(dims))
                                      if origin[a] is not None), to_expr(0))
    rem = _int(rem)
    if rem is None:
        return None
    for a in range(len(dims)):
        if origin[a] is not None:
            continue
        if isinstance(rs[a], int):
            origin[a], rem = divmod(rem, rs[a])
        elif 0 <= rem < (_least(rs[a]) or 0):  # (a symbolic stride: coordinate 0 for every binding, or none)
            origin[a] = 0
        else:
            return None
    if rem != 0:
        return None
    for a in range(len(dims)):  # unmasked coordinates: inside their axis by the reader's index ranges
        terms = [(e[1], _size(view.dims[d])) for d, e in enumerate(per) if e is not None and e[0] == a]
        if any(same_size(size, dims[a]) and const == origin[a] and None not in co and
               all(co[d] == (per[d][1] if per[d] is not None and per[d][0] == a else 0) for d in range(len(co)))
               for co, const, size in masks):
            continue
        lo = to_expr(origin[a]) + sum((to_expr(c) * (to_expr(k) - 1) for c, k in terms if c < 0), to_expr(0))
        hi = to_expr(origin[a]) + sum((to_expr(c) * (to_expr(k) - 1) for c, k in terms if c > 0), to_expr(0))
        low = _least(lo)
        if low is None or low < 0 or not _below(hi, dims[a]):
            return None
    return per, origin


def permuted_view(view: ShapeTracker, dims, perm) -> ShapeTracker | None:
    """``view`` (reading a row-major buffer of ``dims``) re-expressed over the buffer stored with its axes in
    the order ``perm`` (row-major over ``[dims[p] for p in perm]``), or None when :func:`axis_map` fails. Masks
    stay: they are conditions on the reader's indices. Axes that stay next to each other, in order, under
    ``perm`` keep their relative addresses: where the reader walks several of them as one (a bias gradient
    summing ``(N, C, H, W)`` over ``H * W`` as one axis of 676) the view is mapped over them merged."""
    got = axis_map(view, dims)
    if got is None:
        runs: list = []  # runs of buffer axes kept adjacent and in order by perm
        for p in perm:
            if runs and runs[-1][-1] + 1 == p:
                runs[-1].append(p)
            else:
                runs.append([p])
        if len(runs) == len(perm):
            return None
        order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in buffer order
        merged = []
        for r in order:
            size = to_expr(1)
            for a in runs[r]:
                size = size * to_expr(dims[a])
            merged.append(size)
        # the view over the merged buffer, then over the runs in perm's order (a permutation of the runs)
        return permuted_view(view, merged, tuple(order.index(r) for r in range(len(runs))))
    per, origin = got
    new = contiguous_strides([to_expr(dims[p]) for p in perm])
    at = {p: new[j] for j, p in enumerate(perm)}
    strides = [to_expr(0) if e is None else to_expr(e[1]) * at[e[0]] for e in per]
    offset = sum((to_expr(o) * at[a] for a, o in enumerate(origin) if o is not None and o != 0), to_expr(0))
    return ShapeTracker(view.dims, strides, offset, view.masks)


def _sample(view: ShapeTracker) -> ShapeTracker:
    syms = view.symbols()
    return view.resolve({s: SAMPLE for s in syms}) if syms else view


def _unit(view, chain) -> bool | None:
    """:func:`luminal.codegen.layout._unit_step` with the symbols bound to ``SAMPLE``."""
    chain = tuple(Remapped(r.value, tuple(to_expr(d).substitute({s: SAMPLE for s in to_expr(d).symbols()})
                                         for d in r.dims), _sample(r.view), r.dtype) for r in chain)
    return _unit_step(_sample(view), chain)


def _elements(view: ShapeTracker) -> int:
    n = 1
    for d in _sample(view).dims:
        n *= to_expr(d).to_int() or 1
    return n


def _order(kernel: ElementwiseKernel, buffer: int) -> tuple | None:
    """The kernel's axes sorted by decreasing stride of its read of ``buffer`` (through inlined producers; the
    symbols bound to ``SAMPLE``): the order in which it walks that buffer. None when it reads it at more than one
    offset, or at one that does not move by a constant per step of each axis."""
    vars_ = [Expression.symbol(f"_o{j}") for j in range(len(kernel.dims))]
    offs = set(read_offsets(kernel.value, vars_, buffer))
    if len(offs) != 1:
        return None
    off = offs.pop()
    dims = [to_expr(d) for d in kernel.dims]
    bind = {s: SAMPLE for d in dims for s in d.symbols()}
    bind |= {s: SAMPLE for s in off.symbols() if not s.startswith("_o")}
    try:
        sizes = [d.evaluate(bind) for d in dims]
        at = lambda idx: off.evaluate(bind | {f"_o{j}": i for j, i in enumerate(idx)})  # noqa: E731
        zero = [0] * len(dims)
        base = at(zero)
        strides = []
        for j, n in enumerate(sizes):
            if n <= 1:
                strides.append(None)
                continue
            one, last = list(zero), list(zero)
            one[j], last[j] = 1, n - 1
            s = at(one) - base
            if at(last) - base != s * (n - 1):
                return None
            strides.append(s)
    except Exception:  # noqa: BLE001 - an unbound symbol (a gather's run-time index): not an affine walk
        return None
    moving = sorted((j for j, s in enumerate(strides) if s is not None), key=lambda j: -abs(strides[j]))
    # the axes that do not move keep their places
    out, it = [], iter(moving)
    for j, s in enumerate(strides):
        out.append(j if s is None else next(it))
    return tuple(out)


def _reordered(kernels: list, xi: int, pinned: set, readers: dict):
    """``kernels`` with kernel ``xi``'s output stored in its producing GEMM's order, and the gain (elements);
    None when not exact or not allowed (see the module docstring)."""
    x, g = kernels[xi], kernels[xi - 1] if xi else None
    if x.out in pinned or not isinstance(x, ElementwiseKernel) or not isinstance(g, GemmKernel) or \
            not unit_batch(g) or g.out in pinned:
        return None
    perm = _order(x, g.out)
    if perm is None or perm == tuple(range(len(perm))):
        return None
    dims = tuple(x.dims)
    value = permute_value(x.value, perm, {})
    if value is None:
        return None
    moved = ElementwiseKernel(x.out, tuple(dims[p] for p in perm), value, x.dtype)
    if epilogue_value(g, moved) is None:
        return None
    gain = _elements(ShapeTracker.contiguous_of(dims))  # the pass over the output, now the GEMM's epilogue
    mine: list = []  # the kernel's other reads: along the permuted vector loop now
    _views_all(x.value, mine, set())
    for v, chain in mine:
        if chain:
            r = chain[0]
            after = _unit(v, (Remapped(r.value, r.dims, r.view.permute(perm), r.dtype),) + chain[1:])
        else:
            after = _unit(v.permute(perm), ())
        before = _unit(v, chain)
        if before is not None and after is not None and before != after:
            size = _elements(chain[0].view if chain else v)
            gain += size if after else -size
    new = list(kernels)
    new[xi] = moved
    table: dict = {}  # a reader's view of the output -> the same elements over the permuted layout

    def rewritten(v) -> bool:
        if v not in table:
            table[v] = permuted_view(v, dims, perm)
        return table[v] is not None

    for ki in readers.get(x.out, ()):
        k = kernels[ki]
        if ki == xi:
            continue
        if isinstance(k, GemmKernel):
            views = [v for b, v in ((k.a, k.a_view), (k.b, k.b_view)) if b == x.out]
            if k.a_pro is not None or k.b_pro is not None or not all(rewritten(v) for v in views):
                return None
            new[ki] = GemmKernel(k.out, k.a, table[k.a_view] if k.a == x.out else k.a_view, k.b,
                                 table[k.b_view] if k.b == x.out else k.b_view, k.dims, k.dtype, k.a_pro, k.b_pro,
                                 k.a_round, k.b_round, k.direct, k.wino)
            continue
        found: list = []
        if not isinstance(k, (ElementwiseKernel, ReduceKernel)) or not _views(k.value, x.out, found, set()) or \
                not all(rewritten(v) for v, _ in found):
            return None
        for v, chain in found:  # (contiguous reads along the vector loop gained or lost)
            before, after = _unit(v, chain), _unit(table[v], chain)
            if before is not None and after is not None and before != after:
                size = _elements(chain[0].view if chain else v)
                gain += size if after else -size
        value = _rewrite(k.value, x.out, table, {})
        new[ki] = ElementwiseKernel(k.out, k.dims, value, k.dtype) if isinstance(k, ElementwiseKernel) else \
            ReduceKernel(k.out, k.dims, k.axis, k.extent, value, k.kind, k.dtype)
    return new, gain, moved.dims


def order_outputs(program: Program) -> Program:
    """The program with elementwise outputs stored in the order of the GEMM product they follow (see the module
    docstring). Returns ``program`` itself when nothing changes."""
    if os.environ.get("LUMINAL_LAYOUT", "1") == "0":
        return program
    pinned = set(program.inputs) | set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    kernels, buffers = list(program.kernels), dict(program.buffers)
    readers: dict = {}
    for ki, k in enumerate(kernels):
        for b in kernel_buffers(k) - {k.out}:
            readers.setdefault(b, []).append(ki)
    changed = False
    for xi in range(1, len(kernels)):
        got = _reordered(kernels, xi, pinned, readers)
        if got is None or got[1] <= 0:
            continue
        kernels, _, dims = got
        buffers[kernels[xi].out] = (tuple(dims), buffers[kernels[xi].out][1])
        changed = True
    if not changed:
        return program
    return drop_identity_copies(Program(kernels, buffers, list(program.inputs), list(program.outputs),
                                        dict(program.aliases)))


def _identity_source(kernel, buffers: dict) -> int | None:
    """The buffer that elementwise ``kernel`` copies element for element (its value one Load, through the
    row-major view of the kernel's space, of a buffer of the same dtype and element count), else None."""
    v = kernel.value if isinstance(kernel, ElementwiseKernel) else None
    if not isinstance(v, Load) or v.buffer not in buffers or v.dtype != kernel.dtype or v.view.masks:
        return None
    if v.view != ShapeTracker.contiguous_of(kernel.dims) or buffers[v.buffer][1] != kernel.dtype:
        return None
    return v.buffer if same_size(_prod(kernel.dims), _prod(buffers[v.buffer][0])) else None


def _renamed(value, old: int, new: int):
    """``value`` reading buffer ``new`` wherever it read ``old`` (the same element offsets)."""
    return map_loads(value, lambda ld: Load(new, ld.view, ld.dtype) if ld.buffer == old else ld, {},
                     lambda b: new if b == old else b)


def drop_identity_copies(program: Program) -> Program:
    """``program`` without the elementwise kernels that copy a buffer element for element (what storing their
    source in its product's order leaves of a permuting copy: W4's output gradient, copied channel-major for
    the first convolution's weight gradient); their readers read the source. A copy that is a program input,
    output or alias, or that a kernel other than an elementwise, reduce or GEMM kernel reads, stays. Returns
    ``program`` itself when nothing changes."""
    pinned = set(program.inputs) | set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    other = {b for k in program.kernels if not isinstance(k, (ElementwiseKernel, ReduceKernel, GemmKernel))
             for b in kernel_buffers(k) - {k.out}}  # (read by kernels whose reads are not renamed here)
    drop: dict = {}
    for k in program.kernels:
        src = _identity_source(k, program.buffers) if k.out not in pinned and k.out not in other else None
        if src is not None:
            drop[k.out] = drop.get(src, src)  # (a copy of a dropped copy reads the first source)
    if not drop:
        return program
    out = []
    for k in program.kernels:
        if k.out in drop:
            continue
        for old in kernel_buffers(k) - {k.out}:
            new = drop.get(old)
            if new is None:
                continue
            if isinstance(k, GemmKernel):
                k = dataclasses.replace(k, a=new if k.a == old else k.a, b=new if k.b == old else k.b)
            else:
                k = dataclasses.replace(k, value=_renamed(k.value, old, new))
        out.append(k)
    buffers = {b: v for b, v in program.buffers.items() if b not in drop}
    return Program(out, buffers, list(program.inputs), list(program.outputs), dict(program.aliases))
