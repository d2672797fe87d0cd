"""Kernel IR: loop nests over output elements with view-indexed loads, reductions, and library calls.

Lowering partitions the primitive graph into kernels. A node is *materialized*
(gets a buffer and a kernel) when it is an input, is retrieved or kept, is a
reduction, a GEMM, a ``GraphBreak``, has more than one consumer, or is read
through a view that is not its own row-major layout. Every other node is
*inlined*: its value is recomputed inside the consumer's loop body, so chains
of elementwise ops (and a reduction's elementwise producers) fuse into one loop.
Constants and ``Iota`` are always inlined, through any view.

Values in a kernel body are expressions over the kernel's *index variables*
(one per logical axis of the space being iterated): ``Load`` reads a buffer
through a :class:`ShapeTracker` at those variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ops
from ..dtype import DType
from ..graph import Edge, Graph
from ..shape import Expression, ShapeTracker, to_expr


# ---------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Load:
    """Read ``buffer`` (a materialized node) through ``view`` at the current index variables."""
    buffer: int
    view: ShapeTracker
    dtype: DType


@dataclass(frozen=True)
class ConstValue:
    """A scalar constant (number or symbolic expression) read through ``view`` (masks give 0)."""
    value: object
    dtype: DType
    view: ShapeTracker


@dataclass(frozen=True)
class IotaValue:
    """``expr(z)`` where ``z`` is the flat offset the view maps the index variables to."""
    expr: Expression
    dtype: DType
    view: ShapeTracker


@dataclass(frozen=True)
class Compute:
    """An elementwise primitive applied to argument values (``op`` is the primitive op object)."""
    op: object
    args: tuple
    dtype: DType


@dataclass(frozen=True)
class GatherValue:
    """``data`` read at the index variables with axis ``axis`` replaced by the value ``index``."""
    data: object  # Load-like: (buffer, view) or an inlined value tree over the data's own index space
    data_buffer: int
    data_view: ShapeTracker
    axis: int
    index: object
    dtype: DType


@dataclass(frozen=True)
class Remapped:
    """Evaluate ``value`` (built over a producer's own index space of ``dims``) at index vars that ``view``
    maps the consumer's index vars to (a flat offset into the producer's row-major layout)."""
    value: object
    dims: tuple
    view: ShapeTracker
    dtype: DType


# ---------------------------------------------------------------------------- kernels
@dataclass
class ElementwiseKernel:
    """``out[i] = value(i)`` over ``dims``."""
    out: int
    dims: tuple
    value: object
    dtype: DType


@dataclass
class ReduceKernel:
    """``out[i] = reduce_r value(i with r inserted at axis)``; ``kind`` is ``"sum"`` or ``"max"``."""
    out: int
    dims: tuple           # output dims
    axis: int
    extent: Expression    # size of the reduced axis
    value: object         # over the input space (dims with the reduced axis inserted)
    kind: str
    dtype: DType


@dataclass
class ScatterKernel:
    """``out = 0; out[i with i[axis] = index(i)] += src(i)`` for every ``i`` of ``dims`` (a ``ScatterAdd``:
    ``value`` is ``Compute(ScatterAdd, (index, src))`` over ``dims``, so walks over kernel values see both
    operands; the output has ``dims`` with ``axis`` replaced by ``size``)."""
    out: int
    dims: tuple           # the index's (iteration) dims
    axis: int
    size: Expression      # the output's extent along axis
    value: object
    dtype: DType


@dataclass
class GemmKernel:
    """``C[b, m, n] = sum_k A[b, m, k] * B[b, n, k]`` through strided views (a BLAS call per batch index)."""
    out: int
    a: int
    a_view: ShapeTracker  # dims (*batch, M, N, K), stride 0 on N
    b: int
    b_view: ShapeTracker  # dims (*batch, M, N, K), stride 0 on M
    dims: tuple           # (*batch, M, N)
    dtype: DType
    # a *fused prologue* per operand (see luminal.codegen.gemm_prologue): the operand is not read from ``a``/``b``
    # but computed while the own GEMM packs it; ``a``/``b`` are then None and the views give only sizes
    a_pro: object = None
    b_pro: object = None
    # an operand read *rounded* to this dtype (bfloat16): a float32 buffer whose values the program rounds to
    # bfloat16 only for this GEMM (autocast's operands; see luminal.codegen.gemm_lowp.narrow_operands)
    a_round: object = None
    b_round: object = None
    # whether the direct convolution may run it where it applies (luminal.codegen.gemm_direct); False where the
    # measured search found the packed fused GEMM faster (luminal.runtime.prologue_search); "marginal": also in
    # a form that leaves up to half of its lanes idle, where the search measured that faster
    direct: object = True
    # the Winograd form of a 3x3 stride-1 convolution the direct kernel runs (luminal.codegen.gemm_winograd):
    # None the rules' choice, 0 none (the direct kernel's other forms), 2 F(2x2, 3x3), 4 F(4x4, 3x3) where its
    # size allows; the measured search sets it (luminal.runtime.prologue_search)
    wino: object = None


@dataclass
class Program:
    """The lowered graph: kernels in execution order and the buffers they use."""
    kernels: list
    buffers: dict = field(default_factory=dict)  # node id -> (dims, dtype)
    inputs: list = field(default_factory=list)   # node ids of Input nodes
    outputs: list = field(default_factory=list)  # retrieved/kept node ids (own host arrays)
    aliases: dict = field(default_factory=dict)  # node id -> node id whose buffer it shares (GraphBreak etc.)


# ---------------------------------------------------------------------------- lowering
def _same_index_view(view, dims) -> bool:
    """Whether ``view`` reads a buffer of ``dims`` at the reader's own index: the row-major layout, possibly
    with extra axes that a mask restricts to one slot (a ``where()`` branch's place in its stack), and size-1
    axes added or dropped (a ``where()`` result is gathered with a trailing size-1 axis, read squeezed)."""
    slots = _single_slot_axes(view)
    keep = [j for j in range(len(view.dims)) if j not in slots and view.dims[j] != 1]
    if view.offset != 0:
        return False
    contiguous = ShapeTracker.contiguous_of(dims)
    own = [(d, s) for d, s in zip(contiguous.dims, contiguous.strides) if d != 1]
    if len(keep) != len(own) or not all(view.dims[j] == d and view.strides[j] == s
                                        for j, (d, s) in zip(keep, own)):
        return False
    # no mask may restrict the kept axes (only the slot axes are masked)
    return not any(coeffs[j] != 0 for coeffs, _, _ in view.masks for j in keep)


def _single_slot_axes(view) -> set:
    """Axes that one of ``view``'s masks restricts to a single valid index."""
    single = set()
    for coeffs, _, size in view.masks:
        nonzero = [j for j, c in enumerate(coeffs) if c != 0]
        if len(nonzero) == 1 and abs(coeffs[nonzero[0]].to_int() or 0) == 1 and size.to_int() == 1:
            single.add(nonzero[0])
    return single


def _inlinable_view(view) -> bool:
    """Whether a consumer may compute a producer inline through ``view`` instead of reading a stored buffer:
    its own layout, or a view that reads each element at most once (permutes, pads, slices, the stacked
    branches of a ``where``), never a broadcast or overlapping windows (those would recompute the producer
    per read). Values with several readers are further limited by ``MAX_RECOMPUTE``."""
    if view.is_contiguous():
        return True
    single = _single_slot_axes(view)  # a where() branch's slot in the stack
    # symbolic sizes (a batch dim) are judged at a representative value: the decision only trades recompute
    # against memory traffic, results are the same either way
    probe = {name: 1009 for name in view.symbols()}
    axes = []
    for j, (d, st) in enumerate(zip(view.dims, view.strides)):
        try:
            d, st = d.evaluate(probe), st.evaluate(probe)
        except Exception:  # noqa: BLE001 - an expression the probe cannot evaluate: keep the buffer
            return False
        if d == 1 or j in single:
            continue
        if st == 0:
            return False
        axes.append((abs(st), d))
    axes.sort()
    span = 1
    for st, d in axes:
        if st < span:
            return False  # overlaps the axes inside it
        span = st * d
    return True


MAX_RECOMPUTE = 6  # a node read by several kernels is recomputed in each when its body has at most this many ops
TRANSCENDENTAL_RECOMPUTE = 4  # exp2/log2/sin count as this many ops there (a softmax's exp is stored, not redone)

_ELEMENTWISE = (ops.Log2, ops.Exp2, ops.Sin, ops.Sqrt, ops.Recip, ops.Add, ops.Mul, ops.Mod, ops.LessThan, ops.Bitwise,
                ops.Cast, ops.BitCast)


def find_gemm(graph: Graph, node) -> tuple | None:
    """Recognise ``SumReduce(r)(Mul(x_view, y_view))`` as a (batched) matrix product; returns operand edges.

    The output's last two axes are M and N: M read only by one operand (stride 0 in the other), N only by
    the other; every other axis is a batch axis (one BLAS call per batch index; an operand may broadcast
    it). This covers ``a @ b`` with any transposes and the products the autograd pass writes for matmul
    gradients (reduction over a middle axis, operands broadcast along M or K by a constant gradient). The returned edges
    are the operand views permuted to ``(*batch, M, N, K)`` (stride 0 on N for the first, on M for the second).
    The shape test is :func:`gemm_views` (the e-graph's ``gemm`` ruleset asks it too).
    """
    # (half types are not BLAS GEMMs: float16 products round to float16, and bfloat16 matmul is computed in float32
    # by the high-level op, so a bfloat16 product-sum is the primitives' rounded products in a plain reduction)
    if not isinstance(node.op, ops.SumReduce) or not node.dtype.is_float or node.dtype.is_half:
        return None
    edge = node.inputs[0]
    mul = graph.nodes[edge.src]
    if not isinstance(mul.op, ops.Mul):
        return None
    x, y = mul.inputs
    found = gemm_views(edge.shape, node.op.axis, mul.dims, x.shape, y.shape)
    if found is None:
        return None
    first, av, bv = found
    a, b = (x, y) if first == 0 else (y, x)
    return (Edge(a.src, a.output, av), Edge(b.src, b.output, bv))


def gemm_dims(a: Edge, b: Edge) -> tuple:
    """The output dims ``(*batch, M, N)`` of the product whose operand edges :func:`find_gemm` returned."""
    nb = a.shape.ndim - 3
    return tuple(a.shape.dims[:nb + 1]) + (b.shape.dims[nb + 1],)


def gemm_views(sum_view, r: int, mul_dims, xv, yv) -> tuple | None:
    """Whether a sum over axis ``r`` (read through ``sum_view``) of the product of operands read through ``xv``
    and ``yv`` (the product's dims ``mul_dims``) is a (batched) matrix product: ``(first, a_view, b_view)`` with
    ``first`` the operand (0: x, 1: y) that supplies M, and the operand views permuted to ``(*batch, M, N, K)``
    (trailing batch axes folded into M where the first operand allows), else None. See :func:`find_gemm`."""
    nd = sum_view.ndim
    if nd < 3 or not sum_view.is_contiguous() or xv.masks or yv.masks:
        return None
    if tuple(sum_view.dims) != tuple(mul_dims):  # the sum reads a reshape of the product: reshape the operands too
        xv, yv = xv.reshape(sum_view.dims), yv.reshape(sum_view.dims)
        if xv is None or yv is None:
            return None
    if xv.strides[r] == 0 and yv.strides[r] == 0:
        return None  # (an operand broadcast along K, e.g. a constant upstream gradient, is packed for BLAS)
    rest = [j for j in range(nd) if j != r]
    first, second = rest[-2], rest[-1]  # the output's last two axes are M and N; the others are batch axes

    def fits(a, b):  # a supplies M (b broadcasts it), b supplies N (a broadcasts it)
        return b.strides[first] == 0 and a.strides[second] == 0 and (a.strides[first] != 0 or b.strides[second] != 0)

    if fits(xv, yv):
        which, a, b = 0, xv, yv
    elif fits(yv, xv):
        which, a, b = 1, yv, xv
    else:
        return None
    batch, m, n = rest[:-2], first, second
    perm = batch + [m, n, r]
    av, bv = a.permute(perm), b.permute(perm)
    # fold trailing batch axes into M while the first operand addresses them affinely and the second
    # broadcasts them: fewer, larger BLAS calls (e.g. (batch, seq) rows of a Linear's input gradient)
    nb = len(batch)
    while nb > 0 and bv.strides[nb - 1] == 0 and bv.strides[nb] == 0:
        merged = av.merge_dims(nb - 1)
        if merged is None:
            break
        av, bv = merged, bv.merge_dims(nb - 1)
        nb -= 1
    return which, av, bv


def _blas_operand(program: Program, edge, k_axis: int, mn_axis: int, dtype: DType):
    """The GEMM operand ``(buffer, view)``; a view BLAS cannot address (neither its K nor its M/N axis has
    stride 1, e.g. a strided slice) is first copied into a packed temporary by an elementwise kernel.

    Broadcast (stride-0) axes are not copied: the temporary keeps them as stride-0 axes of its view.
    """
    view = edge.shape
    sk, smn = view.strides[k_axis], view.strides[mn_axis]
    if (sk == 1 and smn != 0) or (smn == 1 and sk != 0) or (sk == 1 and view.dims[mn_axis] == 1):
        return edge.src, view
    # pack: M/N and K always (a broadcast operand is materialized), other broadcast axes stay broadcast
    keep = [j for j, s in enumerate(view.strides) if s != 0 or j in (k_axis, mn_axis)]
    packed = ShapeTracker([view.dims[j] for j in keep], [view.strides[j] for j in keep], view.offset)
    temp = -1 - len([b for b in program.buffers if b < 0])  # synthetic buffer id (not a graph node)
    dims = tuple(packed.dims)
    program.buffers[temp] = (dims, dtype)
    program.kernels.append(ElementwiseKernel(temp, dims, Load(edge.src, packed, dtype), dtype))
    strides, acc = [], 1
    for j in range(len(view.dims) - 1, -1, -1):
        if j not in keep:
            strides.append(0)
        else:
            strides.append(acc)
            acc = acc * view.dims[j]
    return temp, ShapeTracker(view.dims, tuple(reversed(strides)))


def sink_view(value, dims, view: ShapeTracker, memo: dict):
    """``Remapped(value, dims, view)`` without the remapping, or None: where ``value`` is elementwise arithmetic
    (casts, a product's rounding under autocast) on loads of buffers at the producer's own row-major index and on
    broadcast constants, it is that arithmetic on the buffers read through ``view`` itself (the loads' flat
    index is the producer's). The index stays affine in the reader's loop variables, so the reader's axes merge
    and permute through it (a Remapped over a space its view does not walk axis by axis does neither: W4's ReLU
    gradient under autocast, the input gradient's rounding read as ``(N, C, H, W)``, stayed a pass of its own
    instead of the GEMM's epilogue). Not through a masked view (a masked slot reads 0, the arithmetic on 0 need
    not be 0)."""
    if view.masks:
        return None
    key = id(value)
    if key in memo:
        return memo[key][1]
    out = None
    if isinstance(value, Load):
        if value.view == ShapeTracker.contiguous_of(dims):
            out = Load(value.buffer, view, value.dtype)
    elif isinstance(value, ConstValue):
        if not value.view.masks and all(to_expr(s).to_int() == 0 for s in value.view.strides):
            out = ConstValue(value.value, value.dtype, ShapeTracker.fake(view.dims))
    elif isinstance(value, Compute):
        args = [sink_view(a, dims, view, memo) for a in value.args]
        out = None if any(a is None for a in args) else Compute(value.op, tuple(args), value.dtype)
    memo[key] = (value, out)  # (the value kept alive: its id is not reused while the memo lives)
    return out


def lower(graph: Graph) -> Program:
    """Partition ``graph`` into kernels (see the module docstring)."""
    order = graph.toposort()
    consumers = graph.consumer_edges()
    gemms = {}
    for node_id in order:
        node = graph.nodes[node_id]
        found = find_gemm(graph, node)
        if found is not None and len(consumers[node.inputs[0].src]) == 1 and \
                node.inputs[0].src not in graph.to_retrieve and node.inputs[0].src not in graph.no_delete:
            gemms[node_id] = found
    gemm_muls = {graph.nodes[g].inputs[0].src for g in gemms}

    materialized: set[int] = set()
    shared: set[int] = set()  # materialized only because several readers would recompute them
    cost: dict[int, int] = {}  # elementwise ops a node's inlined body recomputes
    folded: set[int] = set()  # computed from constants only: the C compiler folds them
    for node_id in order:
        node = graph.nodes[node_id]
        op = node.op
        if node_id in gemm_muls:
            continue
        if isinstance(op, (ops.Input, ops.SumReduce, ops.MaxReduce, ops.GraphBreak, ops.ScatterAdd)) or \
                node_id in gemms:
            materialized.add(node_id)
        elif node_id in graph.to_retrieve or node_id in graph.no_delete:
            materialized.add(node_id)
        elif isinstance(op, (ops.Constant, ops.Iota)):
            continue
        elif isinstance(op, _ELEMENTWISE + (ops.Contiguous,)) and all(
                isinstance(graph.nodes[e.src].op, ops.Constant) or e.src in folded for e in node.inputs):
            folded.add(node_id)  # arithmetic on constants only (1 / n, -1 * c): inlined like a constant, any view
            continue
        else:
            own = TRANSCENDENTAL_RECOMPUTE if isinstance(op, (ops.Exp2, ops.Log2, ops.Sin)) else 1
            cost[node_id] = own + sum(cost.get(e.src, 0) for e in node.inputs if e.src not in materialized)
            readers = consumers[node_id]
            if not readers or any(c in gemm_muls or not _inlinable_view(graph.nodes[c].inputs[k].shape)
                                  for c, k in readers):
                materialized.add(node_id)
            elif len(readers) > 1 and cost[node_id] > MAX_RECOMPUTE:
                materialized.add(node_id)  # cheap values are recomputed by each reader instead of stored
                shared.add(node_id)
    for g, (a, b) in gemms.items():
        materialized.add(a.src)
        materialized.add(b.src)
        shared.discard(a.src)
        shared.discard(b.src)
    # A costly value with several readers needs no buffer when all its readers end up inlined into the same
    # kernel and read it at the kernel's own index (e.g. the input of a where(): the comparison and the
    # selected branch): the kernel body computes it once. Consumers first, so readers' kernels are known.
    roots: dict[int, frozenset] = {}
    for node_id in reversed(order):
        if node_id in materialized and node_id not in shared:
            continue
        node = graph.nodes[node_id]
        if isinstance(node.op, (ops.Constant, ops.Iota)) or node_id in gemm_muls:
            continue
        found: set = set()
        for c, _ in consumers[node_id]:
            found |= {c} if c in materialized else roots.get(c, {None})
        if node_id in shared:
            if len(found) == 1 and None not in found and all(
                    _same_index_view(graph.nodes[c].inputs[k].shape, node.dims) for c, k in consumers[node_id]):
                materialized.discard(node_id)
            else:
                continue
        roots[node_id] = frozenset(found)

    program = Program([])
    memo: dict[int, object] = {}

    def value_of(src: int, view: ShapeTracker):
        """The value a consumer reads from ``src`` through ``view`` at its own index variables."""
        node = graph.nodes[src]
        if isinstance(node.op, ops.Constant):
            return ConstValue(node.op.value, node.dtype, view)
        if isinstance(node.op, ops.Iota):
            return IotaValue(node.op.expr, node.dtype, view)
        if src in materialized:
            return Load(src, view, node.dtype)
        body = body_of(src)
        if view.is_contiguous() and view.dims == node.dims:
            return body
        sunk = sink_view(body, node.dims, view, {})
        return sunk if sunk is not None else Remapped(body, node.dims, view, node.dtype)

    def body_of(node_id: int):
        """The value of ``node_id`` at its own index variables (inlining non-materialized producers)."""
        if node_id in memo:
            return memo[node_id]
        node = graph.nodes[node_id]
        op = node.op
        if isinstance(op, (ops.Contiguous, ops.GraphBreak)):
            e = node.inputs[0]
            out = value_of(e.src, e.shape)
        elif isinstance(op, _ELEMENTWISE):
            out = Compute(op, tuple(value_of(e.src, e.shape) for e in node.inputs), node.dtype)
        elif isinstance(op, ops.Gather):
            data_edge, index_edge = node.inputs
            index = value_of(index_edge.src, index_edge.shape)
            if data_edge.src in materialized:
                out = GatherValue(None, data_edge.src, data_edge.shape, op.axis, index, node.dtype)
            else:
                inner = value_of(data_edge.src, data_edge.shape)  # the producer's body seen through the view
                out = GatherValue(inner, data_edge.src, data_edge.shape, op.axis, index, node.dtype)
        elif isinstance(op, (ops.Constant, ops.Iota)):
            out = value_of(node_id, ShapeTracker.contiguous_of(node.dims))
        else:
            raise NotImplementedError(f"no lowering for {op}")
        memo[node_id] = out
        return out

    for node_id in order:
        node = graph.nodes[node_id]
        if node_id not in materialized:
            continue
        program.buffers[node_id] = (node.dims, node.dtype)
        op = node.op
        if isinstance(op, ops.Input):
            program.inputs.append(node_id)
            continue
        if node_id in gemms:
            a, b = gemms[node_id]
            nb, dims = a.shape.ndim - 3, gemm_dims(a, b)
            a_src, a_view = _blas_operand(program, a, nb + 2, nb, node.dtype)
            b_src, b_view = _blas_operand(program, b, nb + 2, nb + 1, node.dtype)
            program.kernels.append(GemmKernel(node_id, a_src, a_view, b_src, b_view, dims, node.dtype))
        elif isinstance(op, ops.ScatterAdd):
            index_edge, src_edge = node.inputs
            value = Compute(op, (value_of(index_edge.src, index_edge.shape), value_of(src_edge.src, src_edge.shape)),
                            node.dtype)
            program.kernels.append(ScatterKernel(node_id, tuple(index_edge.shape.dims), op.axis, op.size, value,
                                                 node.dtype))
        elif isinstance(op, (ops.SumReduce, ops.MaxReduce)):
            e = node.inputs[0]
            program.kernels.append(ReduceKernel(node_id, node.dims, op.axis, e.shape.dims[op.axis],
                                                value_of(e.src, e.shape), "sum" if isinstance(op, ops.SumReduce)
                                                else "max", node.dtype))
        else:
            program.kernels.append(ElementwiseKernel(node_id, node.dims, body_of(node_id), node.dtype))
        if node_id in graph.to_retrieve or node_id in graph.no_delete:
            program.outputs.append(node_id)
    from .groups import epilogues_adjacent  # (groups reads this module's kernel classes)
    return epilogues_adjacent(program)
