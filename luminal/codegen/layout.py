"""Layout choice for produced buffers: a product stored transposed when its readers want it that way.

A GEMM writes ``C[b, m, n]`` row-major. When the kernels that read ``C`` walk it along ``m`` (W5's gradient of
``K^T``: ``dK`` comes out as ``(batch, head, dh, seq)`` and the concatenation of the q, k, v gradients reads it
as ``(batch, seq, head, dh)``), each of their vector loops gathers with a stride. Computing the transposed
product instead, ``C^T = B^T A^T`` (the two operands swapped: free for a GEMM), stores ``C`` as ``[b, n, m]``,
and those loops read it contiguously. An elementwise kernel between the product and its readers (autocast's
cast to bfloat16) can store its output transposed too, by iterating over the swapped space; then its own read
of the product is the column-wise one, and the product follows on the next round.

:func:`transpose_outputs` makes that choice per buffer on the lowered program, rewriting the producer and every
view that reads the buffer, when

* every reader's view of the buffer can be re-expressed exactly over the transposed layout (constant shapes;
  each reader axis walks one of ``b``, ``m``, ``n``, staying inside it, so the rewritten strides address the
  same elements at every position, masked ones included), no gather indexes it, and the buffer is not a
  program input, output or alias;
* more elements are read with stride 1 along the vector loop (the reader's innermost axis, followed through
  inlined producers) afterwards than before, the producer's own reads included. A read that does not move
  along the vector loop (stride 0: a per-channel parameter broadcast along a sequence) counts as contiguous:
  counting it as strided once made a Conv1d -> BatchNorm1d -> GELU -> MaxPool1d training step store its whole
  chain channels-last, every read of the convolution's output strided (2x the step's time).

Values are unchanged: the same products, summed in the same order (a GEMM's sums do not depend on which operand
is packed as which), stored elsewhere. ``LUMINAL_LAYOUT=0`` turns the pass off. (Why a pass on the lowered
program and not an e-graph rule: a layout is not a value. The e-graph's classes are row-major buffers and its
rules equate values; which way a buffer is stored is a choice about the kernels that write and read it,
made where those kernels exist.)
"""

from __future__ import annotations

import os

from ..shape import ShapeTracker, to_expr
from .kernel import (Compute, ConstValue, ElementwiseKernel, GatherValue, GemmKernel, IotaValue, Load, Program,
                     ReduceKernel, Remapped)
from .values import kernel_buffers, permute_value


def _ints(dims):
    out = [to_expr(d).to_int() for d in dims]
    return None if any(d is None for d in out) else out


def _remap(view: ShapeTracker, M: int, N: int) -> ShapeTracker | None:
    """``view`` (reading a row-major ``[..., M, N]`` buffer) re-expressed over the ``[..., N, M]`` layout, or
    None when some reader axis does not walk exactly one of the batch, ``m`` and ``n`` axes within its range."""
    strides = _ints(view.strides)
    dims = _ints(view.dims)
    off = to_expr(view.offset).to_int()
    if strides is None or dims is None or off is None:
        return None
    mn = M * N
    q, r = divmod(off, mn)
    om, on = divmod(r, N)
    lo_m = hi_m = om
    lo_n = hi_n = on
    new = []
    for s, d in zip(strides, dims):
        span = d - 1
        if s == 0 or d == 1:
            new.append(0 if d != 1 else s)
            continue
        if s % mn == 0:  # a batch axis (any multiple of a whole matrix): the same stride in both layouts
            new.append(s)
        elif s % N == 0 and abs(s // N) * span < M:
            c = s // N
            lo_m, hi_m = lo_m + min(0, c * span), hi_m + max(0, c * span)
            new.append(c)
        elif abs(s) * span < N:
            lo_n, hi_n = lo_n + min(0, s * span), hi_n + max(0, s * span)
            new.append(s * M)
        else:
            return None
    if lo_m < 0 or hi_m >= M or lo_n < 0 or hi_n >= N:
        return None  # (the m and n parts would leave their axes: not one element per position any more)
    return ShapeTracker(view.dims, tuple(to_expr(s) for s in new), q * mn + om + on * M, view.masks)


def _views(value, buffer: int, out: list, memo: set, chain: tuple = ()) -> bool:
    """Collect ``(view, chain)`` for every Load of ``buffer`` in ``value``: its view and the Remapped values it
    sits in (outermost first; inside one, the view is over that producer's space). False if a gather reads the
    buffer (its views are not rewritten here)."""
    key = (id(value), tuple(map(id, chain)))  # (by identity: hashing a value tree is recursive)
    if key in memo:
        return True
    memo.add(key)
    if isinstance(value, Load):
        if value.buffer == buffer:
            out.append((value.view, chain))
        return True
    if isinstance(value, Compute):
        return all(_views(a, buffer, out, memo, chain) for a in value.args)
    if isinstance(value, Remapped):
        return _views(value.value, buffer, out, memo, chain + (value,))
    if isinstance(value, GatherValue):
        if value.data_buffer == buffer:
            return False
        ok = _views(value.index, buffer, out, memo, chain)
        return ok and (value.data is None or _views(value.data, buffer, out, memo, chain))
    return isinstance(value, (ConstValue, IotaValue))


def _unit_step(view: ShapeTracker, chain: tuple) -> bool | None:
    """Whether one step along the reader's innermost moving axis moves ``view``'s read by at most one element
    (a contiguous read, or one that does not move: a value broadcast along the vector loop is loaded once, as
    good as a contiguous one), through the Remapped values of ``chain`` (evaluated at the origin with constant
    shapes); None when unknown."""
    space = chain[0].view if chain else view
    dims = _ints(space.dims)
    if dims is None:
        return None
    axis = next((j for j in range(len(dims) - 1, -1, -1) if dims[j] != 1), None)
    if axis is None:
        return None

    steps = []
    for r in chain:
        strides, pdims = _ints(r.view.strides), _ints(r.dims)
        off = to_expr(r.view.offset).to_int()
        if strides is None or pdims is None or off is None or 0 in pdims:
            return None
        steps.append((strides, pdims[::-1], off))
    last, last_off = _ints(view.strides), to_expr(view.offset).to_int()
    if last is None or last_off is None:
        return None

    def offset(idx):
        for strides, rdims, off in steps:
            flat = off + sum(s * i for s, i in zip(strides, idx))
            idx = []
            for d in rdims:
                idx.append(flat % d)
                flat //= d
            idx = idx[::-1]
        return last_off + sum(s * i for s, i in zip(last, idx))

    zero = [0] * len(dims)
    one = list(zero)
    one[axis] = 1
    return abs(offset(one) - offset(zero)) <= 1


def _rewrite(value, buffer: int, table: dict, memo: dict):
    """``value`` with every Load of ``buffer`` read through ``table[view]``."""
    return map_loads(value, lambda ld: Load(buffer, table[ld.view], ld.dtype) if ld.buffer == buffer else ld, memo)


def map_loads(value, fn, memo: dict, data_buffer=None):
    """``value`` with every Load ``ld`` replaced by ``fn(ld)`` (``ld`` itself: unchanged) and, with
    ``data_buffer``, every gather's stored data buffer ``b`` by ``data_buffer(b)`` (gathers over inlined data are
    walked into). Unchanged subtrees stay the same objects, shared ones shared (``memo``: id -> result)."""
    key = id(value)
    if key in memo:
        return memo[key]
    out = value
    if isinstance(value, Load):
        out = fn(value)
    elif isinstance(value, Compute):
        args = tuple(map_loads(a, fn, memo, data_buffer) for a in value.args)
        if any(a is not b for a, b in zip(args, value.args)):
            out = Compute(value.op, args, value.dtype)
    elif isinstance(value, Remapped):
        inner = map_loads(value.value, fn, memo, data_buffer)
        if inner is not value.value:
            out = Remapped(inner, value.dims, value.view, value.dtype)
    elif isinstance(value, GatherValue):
        index = map_loads(value.index, fn, memo, data_buffer)
        data = value.data if value.data is None else map_loads(value.data, fn, memo, data_buffer)
        buf = value.data_buffer if data_buffer is None else data_buffer(value.data_buffer)
        if index is not value.index or data is not value.data or buf != value.data_buffer:
            out = GatherValue(data, buf, value.data_view, value.axis, index, value.dtype)
    memo[key] = out
    return out


def _size(view: ShapeTracker) -> int:
    n = 1
    for d in view.dims:
        n *= to_expr(d).to_int() or 1
    return n


def _views_all(value, out: list, memo: set, chain: tuple = ()) -> None:
    """``(view, chain)`` of every Load in ``value`` (see :func:`_views`), whatever buffer it reads."""
    key = (id(value), tuple(map(id, chain)))
    if key in memo:
        return
    memo.add(key)
    if isinstance(value, Load):
        out.append((value.view, chain))
    elif isinstance(value, Compute):
        for a in value.args:
            _views_all(a, out, memo, chain)
    elif isinstance(value, Remapped):
        _views_all(value.value, out, memo, chain + (value,))


def _transposed(kernels: list, xi: int, pinned: set, readers: dict):
    """``kernels`` with kernel ``xi``'s output stored with its last two axes swapped, and the gain in elements
    read along their vector loop with stride 1; None when that is not exact or not allowed."""
    x = kernels[xi]
    if x.out in pinned or not isinstance(x, (GemmKernel, ElementwiseKernel)):
        return None
    if isinstance(x, GemmKernel) and (x.a_pro is not None or x.b_pro is not None):
        return None
    dims = _ints(x.dims)
    if dims is None or len(dims) < 2 or dims[-1] == 1 or dims[-2] == 1 or 0 in dims:
        return None  # (symbolic, a vector, or empty: nothing to gain)
    M, N = dims[-2], dims[-1]
    nd = len(dims)
    reads: list = []  # (kernel index, kind, views of x.out)
    for ki in readers.get(x.out, ()):
        k = kernels[ki]
        if ki == xi:
            continue
        if isinstance(k, GemmKernel):
            vs = [(v, ()) for b, v in ((k.a, k.a_view), (k.b, k.b_view)) if b == x.out]
            if vs:
                reads.append((ki, "gemm", vs))
        elif isinstance(k, (ElementwiseKernel, ReduceKernel)):
            vs: list = []
            if not _views(k.value, x.out, vs, set()):
                return None
            if vs:
                reads.append((ki, "value", vs))
        elif x.out in kernel_buffers(k):
            return None
    if not reads or all(kind == "value" and not chain and v.is_contiguous()
                        for _, kind, vs in reads for v, chain in vs):
        return None  # (read in its own layout everywhere: storing it transposed cannot help)
    table, gain, counted = {}, 0, set()
    for _, kind, vs in reads:
        for v, chain in vs:
            if v not in table:
                nv = _remap(v, M, N)
                if nv is None:
                    return None
                table[v] = nv
            if kind == "value" and (v, tuple(map(id, chain))) not in counted:
                counted.add((v, tuple(map(id, chain))))
                before, after = _unit_step(v, chain), _unit_step(table[v], chain)
                if before is not None and after is not None and before != after:
                    size = _size(chain[0].view if chain else v)
                    gain += size if after else -size
    new = list(kernels)
    tdims = tuple(x.dims[:-2]) + (x.dims[-1], x.dims[-2])
    if isinstance(x, GemmKernel):
        # C^T[b, n, m] = sum_k B[b, n, k] A[b, m, k]: the operands swapped, their views over (*batch, M, N, K)
        # with the M and N axes swapped
        perm = tuple(range(nd - 2)) + (nd - 1, nd - 2, nd)
        new[xi] = GemmKernel(x.out, x.b, x.b_view.permute(perm), x.a, x.a_view.permute(perm), tdims, x.dtype,
                             a_round=x.b_round, b_round=x.a_round)
    else:
        # the kernel iterates over the swapped space (writing row-major there) and reads through permuted views
        perm = tuple(range(nd - 2)) + (nd - 1, nd - 2)
        value = permute_value(x.value, perm, {})
        if value is None:
            return None
        own: list = []
        _views_all(x.value, own, set())
        for v, chain in own:
            if chain:  # (inside a Remapped: over the producer's space; its permuted outer view is the change)
                before = _unit_step(v, chain)
                after = _unit_step(v, (Remapped(chain[0].value, chain[0].dims, chain[0].view.permute(perm),
                                                chain[0].dtype),) + chain[1:])
            else:
                before, after = _unit_step(v, ()), _unit_step(v.permute(perm), ())
            if before is not None and after is not None and before != after:
                size = _size(chain[0].view if chain else v)
                gain += size if after else -size
        new[xi] = ElementwiseKernel(x.out, tdims, value, x.dtype)
    for ki, kind, _ in reads:
        k = new[ki]
        if kind == "gemm":
            a_view = table.get(k.a_view, k.a_view) if k.a == x.out else k.a_view
            b_view = table.get(k.b_view, k.b_view) if k.b == x.out else k.b_view
            new[ki] = GemmKernel(k.out, k.a, a_view, k.b, b_view, k.dims, k.dtype, k.a_pro, k.b_pro,
                                 k.a_round, k.b_round)
        elif isinstance(k, ElementwiseKernel):
            new[ki] = ElementwiseKernel(k.out, k.dims, _rewrite(k.value, x.out, table, {}), k.dtype)
        else:
            new[ki] = ReduceKernel(k.out, k.dims, k.axis, k.extent, _rewrite(k.value, x.out, table, {}),
                                   k.kind, k.dtype)
    return new, gain


def transpose_outputs(program: Program) -> Program:
    """The program with products (and the elementwise kernels between a product and its readers, e.g. a
    cast) stored transposed where their readers walk them column-wise (see the module docstring). Returns
    ``program`` itself when nothing changes."""
    if os.environ.get("LUMINAL_LAYOUT", "1") == "0":
        return program
    pinned = set(program.inputs) | set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    kernels = list(program.kernels)
    buffers = dict(program.buffers)
    readers: dict = {}  # buffer -> the kernels reading it (a rewrite changes views, never which buffers)
    for ki, k in enumerate(kernels):
        for b in kernel_buffers(k) - {k.out}:
            readers.setdefault(b, []).append(ki)
    done: set = set()
    for _ in range(3):  # (a transposed reader can make its producer worth transposing: a second pass finds it)
        changed = False
        for xi in range(len(kernels) - 1, -1, -1):
            x = kernels[xi]
            if x.out in done or not isinstance(x, (GemmKernel, ElementwiseKernel)):
                continue
            got = _transposed(kernels, xi, pinned, readers)
            if got is None or got[1] <= 0:
                continue
            kernels = got[0]
            bdims, bdtype = buffers[x.out]
            buffers[x.out] = (tuple(bdims[:-2]) + (bdims[-1], bdims[-2]), bdtype)
            done.add(x.out)
            changed = True
        if not changed:
            break
    if not done:
        return program
    return Program(kernels, buffers, list(program.inputs), list(program.outputs), dict(program.aliases))
