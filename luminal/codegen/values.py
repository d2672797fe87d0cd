"""Queries over kernel value trees: the buffers and symbols a kernel touches, its rough cost per element,
static value ranges, and merging adjacent iteration axes while every view stays affine."""

from __future__ import annotations

from .. import ops
from ..dtype import DType
from ..shape import Expression, ShapeTracker, to_expr
from .kernel import (Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, IotaValue, Load, ReduceKernel,
                     Remapped, ScatterKernel)

SELECT_SLOTS = 4  # a gather whose index takes at most this many values is a chain of selects (see emit.py)
TRANSCENDENTAL_COST = 8  # exp2/log2/sin weigh this many simple ops in the parallel-work estimate


def value_range(value, ranges: dict | None = None) -> tuple:
    """Inclusive integer range of a kernel value when it is known statically (bools and casts of bools; with
    ``ranges``, {buffer: range} from :func:`buffer_ranges`, also loads of buffers written with a known range)."""
    if value.dtype == DType.bool:
        return 0, 1
    if isinstance(value, Compute) and isinstance(value.op, ops.Cast) and value.args[0].dtype == DType.bool:
        return 0, 1
    if isinstance(value, Load) and ranges and value.buffer in ranges:
        lo, hi = ranges[value.buffer]
        return (min(lo, 0), max(hi, 0)) if value.view.masks else (lo, hi)  # (a masked-out position reads 0)
    if isinstance(value, Remapped):  # masked-out positions read 0
        lo, hi = value_range(value.value, ranges)
        return (None, None) if lo is None else (min(lo, 0), max(hi, 0))
    if isinstance(value, ConstValue) and not isinstance(value.value, Expression):
        v = value.value
        if float(v).is_integer():
            return int(v), int(v)
    return None, None


def walk(value, inlined: bool = True):
    """Every distinct node of a value tree, once: a shared subtree (the input of a where(), read by its
    comparison and its select) is one object, so a chain of k relus visits k nodes, not 2^k. ``inlined=False``:
    only the nodes over the kernel's own index space (not inside a ``Remapped`` producer or a gather)."""
    stack = [value]
    seen = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        if isinstance(v, Compute):
            stack.extend(v.args)
        elif not inlined:
            continue
        elif isinstance(v, GatherValue):
            stack.append(v.index)
            if v.data is not None:
                stack.append(v.data)
        elif isinstance(v, Remapped):
            stack.append(v.value)


def buffer_ranges(program) -> dict:
    """{buffer: (lo, hi)} for the buffers an elementwise kernel writes whole with values of a known integer range
    (a padding mask cast to int32 once and read by every layer's ``where``), so that gathers indexed by them
    render as selects without a bounds check (which blocks vectorization). Inputs and aliased buffers excluded."""
    shared = set(program.inputs) | set(program.aliases) | set(program.aliases.values())
    writers: dict = {}
    for k in program.kernels:
        writers[k.out] = writers.get(k.out, 0) + 1
    out: dict = {}
    for k in program.kernels:
        if not isinstance(k, ElementwiseKernel) or k.out in shared or writers[k.out] != 1:
            continue
        lo, hi = value_range(k.value, out)
        if lo is not None and hi is not None:
            out[k.out] = (lo, hi)
    return out


def gather_slots(value: GatherValue, ranges: dict | None = None) -> list | None:
    """The constant indices a gather is evaluated at when it renders as selects (``where``), else None."""
    lo, hi = value_range(value.index, ranges)
    n = value.data_view.dims[value.axis].to_int()
    if value.data is not None and lo is not None and hi is not None and n is not None and 0 <= lo <= hi < n \
            and hi - lo < SELECT_SLOTS:
        return list(range(lo, hi + 1))
    return None


def read_offsets(value, vars_, buffer: int) -> list:
    """The flat offsets (expressions over ``vars_``) at which ``value``, evaluated at index ``vars_`` the way the
    C emitter evaluates it, reads ``buffer`` (reads a view masks out statically are left out). A gather at a
    run-time index reads at an offset with the unknown symbol ``gather_index``."""
    out, seen = [], set()
    stack = [(value, tuple(vars_))]
    while stack:
        v, vs = stack.pop()
        if (id(v), vs) in seen:
            continue
        seen.add((id(v), vs))
        if isinstance(v, Load):
            if v.buffer == buffer:
                off, valid = v.view.axis_expressions(vs)
                if valid != 0:
                    out.append(off)
        elif isinstance(v, Compute):
            stack.extend((a, vs) for a in v.args)
        elif isinstance(v, GatherValue):
            stack.append((v.index, vs))
            n = v.data_view.dims[v.axis].to_int()
            slots = gather_slots(v) or [Expression.symbol("gather_index", n - 1 if n else None)]
            data = v.data if v.data is not None else Load(v.data_buffer, v.data_view, v.dtype)
            stack.extend((data, vs[:v.axis] + (to_expr(k),) + vs[v.axis + 1:]) for k in slots)
        elif isinstance(v, Remapped):
            off, _ = v.view.axis_expressions(vs)
            strides = ShapeTracker.contiguous_of(v.dims).strides
            stack.append((v.value, tuple(off // s if j == 0 else (off // s) % d
                                         for j, (s, d) in enumerate(zip(strides, v.dims)))))
    return out


def work_per_element(value) -> int:
    """Rough ops per element of a value tree (transcendentals weigh more), for the parallel threshold."""
    total = 0
    for v in walk(value):
        if isinstance(v, Compute) and isinstance(v.op, (ops.Exp2, ops.Log2, ops.Sin)):
            total += TRANSCENDENTAL_COST
        else:
            total += 2 if isinstance(v, (GatherValue, Remapped)) else 1
    return total


def views(value):
    for v in walk(value):
        if isinstance(v, (Load, ConstValue, IotaValue, Remapped)):
            yield v.view
        elif isinstance(v, GatherValue):
            yield v.data_view


def program_symbols(program) -> list[str]:
    """The symbols a lowered program's buffers and kernels use (sorted; the iota variable ``z`` left out): the
    renderers' kernel arguments."""
    symbols = set()
    for dims, _ in program.buffers.values():
        for d in dims:
            symbols |= d.symbols()
    for k in program.kernels:
        symbols |= kernel_symbols(k)
    symbols.discard("z")
    return sorted(symbols)


def kernel_symbols(kernel) -> set:
    out = set()
    if isinstance(kernel, GemmKernel):
        for st in (kernel.a_view, kernel.b_view):
            out |= st.symbols()
        for d in kernel.dims:
            out |= d.symbols()
        for pro in (kernel.a_pro, kernel.b_pro):
            if pro is not None:
                out |= kernel_symbols(pro.kernel)
        return out
    for d in kernel.dims:
        out |= d.symbols()
    if isinstance(kernel, ReduceKernel):
        out |= kernel.extent.symbols()
    if isinstance(kernel, ScatterKernel):
        out |= to_expr(kernel.size).symbols()
    for v in walk(kernel.value):
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


def kernel_buffers(kernel) -> set:
    if isinstance(kernel, GemmKernel):
        out = {kernel.out, kernel.a, kernel.b} - {None}
        for pro in (kernel.a_pro, kernel.b_pro):
            if pro is not None:
                out |= kernel_buffers(pro.kernel) - {pro.kernel.out}
        return out
    out = {kernel.out}
    for v in walk(kernel.value):
        if isinstance(v, Load):
            out.add(v.buffer)
        elif isinstance(v, GatherValue) and v.data is None:
            out.add(v.data_buffer)
    return out


def buffer_uses(program) -> tuple[dict, dict, set]:
    """``(writers, readers, pinned)`` of a lowered program: buffer -> index of the first kernel writing it,
    buffer -> indices of the kernels reading it, and the buffers no rewrite may remove or retype (inputs,
    outputs, aliases)."""
    writers: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for i, k in enumerate(program.kernels):
        writers.setdefault(k.out, i)
        for b in kernel_buffers(k) - {k.out}:
            readers.setdefault(b, []).append(i)
    pinned = set(program.inputs) | set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    return writers, readers, pinned


def merge_value(value, axis: int, memo: dict | None = None, dims=None):
    """The same value tree over an iteration space with axes ``axis`` and ``axis + 1`` merged, or None. Shared
    subtrees stay shared (``memo``: (id, axis) -> result; a where() reads its operand twice, so a chain of them
    copied node by node would grow exponentially). ``dims``: the space's extents, needed to merge through a gather
    (whose data may be larger than the space along the other axes: ``torch.gather``'s index); without them a
    gather keeps its axes."""
    memo = {} if memo is None else memo
    key = (id(value), axis)
    if key in memo:
        return memo[key][1]
    out = _merged(value, axis, memo, None if dims is None else tuple(dims))
    memo[key] = (value, out)  # (the value kept alive: its id is not reused while the memo lives)
    return out


def _merged(value, axis: int, memo: dict, dims):
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
            m = merge_value(a, axis, memo, dims)
            if m is None:
                return None
            args.append(m)
        return Compute(value.op, tuple(args), value.dtype)
    if isinstance(value, GatherValue):  # (axes on either side of the gathered one, as long in the data as in ours)
        if axis in (value.axis - 1, value.axis) or dims is None or any(
                to_expr(value.data_view.dims[j]) != to_expr(dims[j]) for j in (axis, axis + 1)):
            return None
        st = value.data_view.merge_dims(axis)
        if st is None and value.data is not None:  # (an inlined data value: the view gives only its dims)
            dd = value.data_view.dims
            st = ShapeTracker.contiguous_of(dd[:axis] + (dd[axis] * dd[axis + 1],) + dd[axis + 2:])
        index = merge_value(value.index, axis, memo, dims)
        data = value.data if value.data is None else merge_value(value.data, axis, memo, value.data_view.dims)
        if st is None or index is None or value.data is not None and data is None:
            return None
        return GatherValue(data, value.data_buffer, st, value.axis - (value.axis > axis), index, value.dtype)
    if isinstance(value, Remapped):
        # an inlined producer whose axes ours walk one to one (aligned_axes): its two axes merge with ours, so
        # its indices stay loop variables; otherwise they are recovered from the view's offset by divisions, which
        # are division-free only over separate loop variables: no merge
        amap = aligned_axes(value.view, value.dims)
        if amap is None:
            return None
        p, q = amap[axis], amap[axis + 1]
        if p is not None and q is not None and q != p + 1:  # the producer's axes in the order ours walk them
            value = _reader_ordered(value, amap, memo)
            return None if value is None else merge_value(value, axis, memo, dims)
        st = value.view.merge_dims(axis)
        if st is None:
            return None
        if p is None or q is None:  # (an axis of extent 1 or a broadcast one: the producer's space stays)
            return Remapped(value.value, value.dims, st, value.dtype)
        inner = merge_value(value.value, p, memo, value.dims)
        if inner is None:
            return None
        dims = tuple(value.dims[:p]) + (value.dims[p] * value.dims[q],) + tuple(value.dims[q + 1:])
        return Remapped(inner, dims, st, value.dtype)
    return None


def _reader_ordered(value: Remapped, amap: list, memo: dict) -> Remapped | None:
    """The same value with the producer's axes permuted into the order the reader walks them (``amap``: its
    :func:`aligned_axes`; the producer's axes of extent 1 last), or None when the producer's value cannot be
    permuted. ``memo``: as :func:`permute_value`'s (a producer reached twice is permuted once)."""
    order = [a for a in amap if a is not None]
    order += [a for a in range(len(value.dims)) if a not in order]
    inner = permute_value(value.value, tuple(order), memo)
    if inner is None:
        return None
    dims = tuple(value.dims[a] for a in order)
    at = dict(zip(order, ShapeTracker.contiguous_of(dims).strides))
    strides = [to_expr(0) if a is None else at[a] for a in amap]
    return Remapped(inner, dims, ShapeTracker(value.view.dims, strides, 0, value.view.masks), value.dtype)


def permute_value(value, perm, memo: dict):
    """``value`` (over a kernel's own iteration space) over that space with its axes permuted by ``perm``: every
    view of the space permuted; an inlined producer whose space is ours, axes permuted (:func:`aligned_axes`),
    gets its own space permuted alike (so its axes stay in step with ours: they merge, e.g. into a GEMM
    epilogue's column), any other keeps its space. None when a part cannot be permuted. Shared subtrees stay
    shared (``memo``: (id, perm) -> result)."""
    perm = tuple(perm)
    key = (id(value), perm)
    if key in memo:
        return memo[key][1]
    out = None
    if isinstance(value, Load):
        out = Load(value.buffer, value.view.permute(perm), value.dtype)
    elif isinstance(value, ConstValue):
        out = ConstValue(value.value, value.dtype, value.view.permute(perm))
    elif isinstance(value, IotaValue):
        out = IotaValue(value.expr, value.dtype, value.view.permute(perm))
    elif isinstance(value, Remapped):
        moved = Remapped(value.value, value.dims, value.view.permute(perm), value.dtype)
        amap = aligned_axes(moved.view, moved.dims)
        out = moved if amap is None else _reader_ordered(moved, amap, memo)
    elif isinstance(value, GatherValue):  # (the data's space is ours, the gathered axis's extent aside)
        index = permute_value(value.index, perm, memo)
        data = value.data if value.data is None else permute_value(value.data, perm, memo)
        if index is not None and (data is not None or value.data is None):
            out = GatherValue(data, value.data_buffer, value.data_view.permute(perm), perm.index(value.axis), index,
                              value.dtype)
    elif isinstance(value, Compute):
        args = [permute_value(a, perm, memo) for a in value.args]
        out = None if any(a is None for a in args) else Compute(value.op, tuple(args), value.dtype)
    memo[key] = (value, out)
    return out


def aligned_axes(view: ShapeTracker, dims) -> list | None:
    """For a :class:`Remapped` value's ``view`` over its producer's row-major space of ``dims``: per reader axis,
    the producer axis it walks one to one (the same extent, that axis's stride; None for an axis of extent 1 or
    stride 0), when every producer axis longer than 1 is walked by exactly one reader axis from offset 0 (the
    producer's space is the reader's, its axes permuted, broadcast axes added); else None."""
    if view.offset != 0:
        return None
    strides = ShapeTracker.contiguous_of(dims).strides
    out, used = [], set()
    for d, s in zip(view.dims, view.strides):
        if d == 1 or s == 0:
            out.append(None)
            continue
        p = next((p for p in range(len(dims)) if dims[p] != 1 and strides[p] == s and dims[p] == d), None)
        if p is None or p in used:
            return None
        used.add(p)
        out.append(p)
    if any(dims[p] != 1 and p not in used for p in range(len(dims))):
        return None
    return out


def flatten_space(dims, value):
    """Merge adjacent iteration axes while every view in ``value`` stays affine (fewer, longer loops)."""
    dims = tuple(dims)
    j = 0
    while j < len(dims) - 1:
        merged = merge_value(value, j, dims=dims)
        if merged is None:
            j += 1
            continue
        value = merged
        dims = dims[:j] + (dims[j] * dims[j + 1],) + dims[j + 2:]
    return dims, value


def _suffix_cuts(dims) -> set:
    out, acc = set(), 1
    for d in reversed(dims):
        acc *= d
        out.add(acc)
    return out


def _common_refinement(a, b) -> list | None:
    """The dims (outermost first, no 1s) that refine both row-major factorizations ``a`` and ``b`` (constant,
    equal products): every axis of either is a run of consecutive axes of it. None when an axis of one straddles
    two of the other without dividing them (``(6, 4)`` against ``(4, 6)``)."""
    out, prev = [], 1
    for c in sorted(_suffix_cuts(a) | _suffix_cuts(b)):
        if c % prev:
            return None
        if c // prev != 1:
            out.append(c // prev)
        prev = c
    return out[::-1]


def _map_views(value, fn, memo: dict):
    """``value`` with every view of the consumer's index space replaced by ``fn(view)`` (a Remapped's own view
    too, not the views inside it, which are over its producer's space); None when ``fn`` gives None or the tree
    holds a gather. Shared subtrees stay shared (``memo``: id -> result)."""
    key = id(value)
    if key in memo:
        return memo[key]
    out = None
    if isinstance(value, (Load, ConstValue, IotaValue)):
        st = fn(value.view)
        if st is not None:
            if isinstance(value, Load):
                out = Load(value.buffer, st, value.dtype)
            elif isinstance(value, ConstValue):
                out = ConstValue(value.value, value.dtype, st)
            else:
                out = IotaValue(value.expr, value.dtype, st)
    elif isinstance(value, Compute):
        args = [_map_views(a, fn, memo) for a in value.args]
        out = None if any(a is None for a in args) else Compute(value.op, tuple(args), value.dtype)
    elif isinstance(value, Remapped):
        st = fn(value.view)
        out = None if st is None else Remapped(value.value, value.dims, st, value.dtype)
    memo[key] = out
    return out


def _split_to(dims: tuple, target: list):
    """The splits (axis, inner) that turn ``dims`` (constant; size-1 axes kept) into a refinement with the non-1
    axes ``target``, applied right to left, and the resulting dims."""
    splits, new_dims, t = [], list(dims), len(target)
    for j in range(len(dims) - 1, -1, -1):
        n = dims[j]
        if n == 1:
            continue
        group, acc = [], 1
        while acc < n:
            t -= 1
            group.insert(0, target[t])
            acc *= target[t]
        for k in range(len(group) - 1):
            splits.append((j + k, _prod_int(group[k + 1:])))
        new_dims[j:j + 1] = group
    return splits, tuple(to_expr(d) for d in new_dims)


def _prod_int(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def refine_space(dims, value):
    """``(dims, value)`` with the iteration space split finer wherever that inlines an elementwise producer read
    through a reshape (a ``Remapped`` whose view is row-major, e.g. max-pool's gradient upsampled to the window
    grid): the producer's axes become loop axes, so its reads index by ``i2 * 12 + i4`` instead of ``i3 / 2``
    (no division, vectorizable). Constant shapes only; anything else is returned unchanged. Adjacent axes are
    merged back later by :func:`flatten_space` where every view stays affine."""
    dims = tuple(dims)
    for _ in range(8):  # (each round inlines one producer)
        ints = [d.to_int() for d in dims]
        if any(d is None or d == 0 for d in ints):  # (symbolic: unknown factorization; empty: nothing to run)
            return dims, value
        cand = next((v for v in walk(value, inlined=False) if isinstance(v, Remapped) and v.view.is_contiguous()
                     and all(to_expr(d).to_int() not in (None, 0) for d in v.dims)
                     and _prod_int(to_expr(d).to_int() for d in v.dims) == _prod_int(ints)), None)
        if cand is None:
            return dims, value
        pdims = [to_expr(d).to_int() for d in cand.dims]
        target = _common_refinement(ints, pdims)
        if target is None:
            return dims, value
        splits, new_dims = _split_to(tuple(ints), target)

        def split(st, splits=splits):
            for axis, inner in splits:
                st = st.split_dims(axis, inner)
            return st

        # the producer's value, its views reshaped from its own dims to the refined space (splits only)
        inner = _map_views(cand.value, lambda st: st.reshape(new_dims), {})
        memo: dict = {}
        if inner is None:
            return dims, value
        new_value = _map_views(value, split, memo)
        if new_value is None:
            return dims, value
        # the split copy of ``cand`` becomes its inlined value
        split_cand = memo[id(cand)]
        new_value = _replace(new_value, split_cand, inner, {})
        dims, value = new_dims, new_value
    return dims, value


def _replace(value, old, new, memo: dict):
    """``value`` with the node ``old`` (by identity) replaced by ``new``; shared subtrees stay shared."""
    if value is old:
        return new
    key = id(value)
    if key in memo:
        return memo[key]
    out = value
    if isinstance(value, Compute):
        args = tuple(_replace(a, old, new, memo) for a in value.args)
        if any(a is not b for a, b in zip(args, value.args)):
            out = Compute(value.op, args, value.dtype)
    memo[key] = out
    return out
