"""The reference runtime: a numpy interpreter of the graph's primitive ops (device ``"reference"``).

It defines what every op computes: each node runs with its op's ``reference`` (numpy) in topological order,
intermediates are freed by reference count as soon as no later node reads them, and a ``SumReduce`` of a
``Mul`` of broadcast views (a matrix product or convolution) is contracted with ``np.matmul`` on the
un-broadcast operands instead of materializing the M×N×K product (:func:`_contract`), also where the sum reads
the product through a view merging its axes (autograd's weight gradients: ``(batch, seq, n, k)`` summed as
``(batch * seq, n, k)``; a transformer layer's training step checked by the program search peaked at 1.1 GB
for those products, 0.2 GB without them).

A graph that was never compiled (``graph.runtime is None``, device None or ``"reference"``) runs here;
``Graph.compile(device="reference")`` attaches :data:`REFERENCE` as ``graph.runtime``. The runtime holds no
state of its own: values, symbol bindings and deferred inputs are the graph's (per thread, see
``Graph.tensors``) and ``Graph.execute`` serializes runs, so one shared instance serves every graph and thread.
``Graph.execute_debug`` (:func:`execute_timed`) and ``Graph.explain_gather_error`` (:func:`explain_gather_error`,
also used by the compiled runtimes to explain their kernels' out-of-range index errors) run here too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .. import ops
from ..ops import GraphError
from ..shape import ShapeTracker, UnboundSymbolError, to_expr


@dataclass
class OpTiming:
    """One row of :meth:`Graph.execute_debug <luminal.graph.Graph.execute_debug>`."""

    node: int
    op: str
    shape: tuple[int, ...]
    dtype: str
    seconds: float


class ReferenceRuntime:
    """The numpy interpreter behind the runtime interface (``execute(graph)``, ``stale(graph)``)."""

    device = "reference"

    def execute(self, graph) -> None:
        """Run ``graph``'s nodes; retrieved and kept outputs stay in ``graph.tensors``."""
        interpret(graph, None)

    def stale(self, graph) -> bool:
        """Never stale for the graph's own changes (it reads the graph at every run); True once the graph asks
        for another device, so that device's runtime is attached."""
        return graph.device not in (None, "reference")

    def __reduce__(self):  # a pickled graph gets the shared instance back
        return (_shared, ())


REFERENCE = ReferenceRuntime()


def _shared() -> ReferenceRuntime:
    return REFERENCE


def attach(graph, device: str = "reference", search: str | None = None, budget_s: float | None = None) -> None:
    """The registry's factory for ``"reference"``: ``graph.runtime`` becomes the interpreter (``search`` and
    ``budget_s`` do not apply)."""
    graph.runtime = REFERENCE


# ---------------------------------------------------------------------------------------------- interpreter
def interpret(graph, timings: list[OpTiming] | None) -> None:
    """Run every node of ``graph`` in topological order; with ``timings``, append one :class:`OpTiming` per
    node (inputs included). Stored values other than inputs and ``no_delete`` are dropped first."""
    order = graph.toposort()
    counts = dict(graph._consumer_counts)
    keep = graph._persistent_ids() | graph.to_retrieve
    graph.reset()
    tensors = graph.tensors  # this thread's view (stable for the run)
    nodes = graph.nodes
    bindings = graph._bindings()
    contract = _contractions(graph, keep)
    fused = {reduce_id: (mul_id, axes) for mul_id, (reduce_id, axes) in contract.items()}
    for node_id in order:
        node = nodes[node_id]
        if node_id in contract:  # evaluated by its SumReduce (below), its inputs kept until then
            continue
        start = time.perf_counter()
        try:
            out_shape = tuple(d.evaluate(bindings) for d in node.dims)
        except UnboundSymbolError as err:
            raise UnboundSymbolError(f"{err} (needed for the shape {list(node.dims)} of node {node_id} "
                                     f"'{node.label}'); bind it with set() data or Graph.set_dim") from None
        if isinstance(node.op, ops.Input):
            graph._load_input(node, out_shape, bindings)
            if timings is not None:
                timings.append(OpTiming(node_id, "Input", out_shape, node.dtype.value, time.perf_counter() - start))
            continue
        if node_id in fused:
            mul_id, axes = fused[node_id]
            mul = nodes[mul_id]
            result = _contract([(tensors[(e.src, e.output)], e.shape) for e in mul.inputs], axes, bindings,
                               out_shape)
            _store(tensors, node, out_shape, result, timings, start)
            _release(tensors, mul.inputs, counts, keep)
            continue
        args = []
        for e in node.inputs:
            buf = tensors.get((e.src, e.output))
            if buf is None:
                raise GraphError(f"node {node_id} '{node.label}' needs the output of node {e.src}, which was not "
                                 "computed (was it dropped?)")
            try:
                args.append(e.shape.gather_numpy(buf, bindings))
            except UnboundSymbolError as err:
                raise UnboundSymbolError(f"{err} (in the view read by node {node_id} '{node.label}')") from None
        try:
            result = node.op.reference(args, bindings, out_shape)
        except IndexError as err:
            if isinstance(node.op, ops.Gather):
                raise IndexError(f"{err}{_gather_context(graph, node)}") from None
            raise
        _store(tensors, node, out_shape, result, timings, start)
        _release(tensors, node.inputs, counts, keep)


def _release(tensors, edges, counts, keep) -> None:
    """Drop the inputs of a computed node that no later node reads (and nobody keeps)."""
    for e in edges:
        key = (e.src, e.output)
        counts[key] -= 1
        if counts[key] == 0 and e.src not in keep:
            tensors.pop(key, None)


def _store(tensors, node, out_shape, result, timings, start: float) -> None:
    result = np.asarray(result, dtype=node.dtype.numpy)
    if not result.flags.c_contiguous:
        result = result.copy()
    if result.shape != out_shape:
        raise GraphError(f"node {node.id} '{node.label}' ({node.op}) produced shape {result.shape}, "
                         f"expected {out_shape}")
    tensors[(node.id, 0)] = result
    if timings is not None:
        timings.append(OpTiming(node.id, str(node.op), out_shape, node.dtype.value, time.perf_counter() - start))


def execute_timed(graph) -> list[OpTiming]:
    """Interpret ``graph`` once, timing each node (the body of ``Graph.execute_debug``)."""
    rows: list[OpTiming] = []
    interpret(graph, rows)
    return rows


def format_timings(rows: list[OpTiming]) -> str:
    """``execute_debug``'s table: one line per node (id, op, dtype, shape, milliseconds), then the total."""
    total = sum(r.seconds for r in rows)
    lines = [f"{'node':>6}  {'op':<16} {'dtype':<8} {'shape':<24} {'ms':>9}"]
    for r in rows:
        lines.append(f"{r.node:>6}  {r.op:<16} {r.dtype:<8} {str(list(r.shape)):<24} {r.seconds * 1e3:>9.3f}")
    lines.append(f"{'':>6}  {'total':<16} {'':<8} {'':<24} {total * 1e3:>9.3f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- contractions
def _contractions(graph, keep: set[int]) -> dict[int, tuple[int, list[int]]]:
    """``{Mul node: (the SumReduce node that alone reads it, the product's axes it sums)}`` for the products the
    interpreter contracts without materializing (see :func:`_contract`): a matrix product or convolution is
    ``SumReduce(Mul(broadcast views))``, whose product is M*N*K elements."""
    counts = graph._consumer_counts
    nodes = graph.nodes
    out = {}
    for node in nodes.values():
        if not isinstance(node.op, ops.SumReduce):
            continue
        e = node.inputs[0]
        src = nodes[e.src]
        if not (isinstance(src.op, ops.Mul) and counts.get((e.src, 0)) == 1 and e.src not in keep and
                any(i.shape.is_fake(j) for i in src.inputs for j in range(len(src.dims)))):
            continue
        runs = _merged_axes(e.shape, src.dims)  # (the product read whole, its axes possibly merged)
        if runs is not None:
            out[e.src] = (node.id, runs[node.op.axis])
    return out


def _merged_axes(view: ShapeTracker, dims) -> list[list[int]] | None:
    """For a view that reads a row-major buffer of ``dims`` whole and in order, each of its axes a run of
    consecutive axes of ``dims`` merged (an autograd weight gradient sums ``(batch, seq, n, k)`` read as
    ``(batch * seq, n, k)``): the runs, one per view axis (size-1 axes join a neighbour's run); None for any
    other view, or where the sizes do not match as expressions."""
    if view == ShapeTracker.contiguous_of(dims):
        return [[j] for j in range(len(dims))]
    if view.masks or view.offset != 0 or view != ShapeTracker.contiguous_of(view.dims):
        return None
    runs, j, n = [], 0, len(dims)
    for d in view.dims:
        run, size = [], to_expr(1)
        while j < n and not (run and size == d):
            size = size * dims[j]
            run.append(j)
            j += 1
        if not run or size != d:
            return None
        runs.append(run)
    while runs and j < n and dims[j] == 1:
        runs[-1].append(j)
        j += 1
    return runs if j == n else None


def _contract(operands, axes: list[int], bindings: Mapping[str, int], out_shape: tuple[int, ...]) -> np.ndarray:
    """``SumReduce(Mul(a, b))`` of two operand views ``(buffer, ShapeTracker)`` over the product's consecutive
    ``axes`` (one, or the run a merging view of the product sums: :func:`_merged_axes`) without the product; the
    result laid out as ``out_shape`` (the remaining axes in order, possibly merged).

    Each operand is read with its broadcast (fake) axes at size 1, so no view is expanded. Axes broadcast in one
    operand only are the M and N of a matrix product, axes in both are batch axes; ``np.matmul`` contracts
    ``(batch, M, K) @ (batch, K, N)`` and the result is laid out back (axes broadcast in both operands are
    broadcast in the result). Same dtype as the primitives (a float32 sum in another order, NaN and inf
    propagating as in the product and sum; integer products and sums wrap the same way); float16, whose
    products the primitives round to float16, is summed in chunks of the product instead."""
    arrays = []
    for buf, st in operands:
        fake = [st.is_fake(j) for j in range(st.ndim)]
        small = ShapeTracker([1 if f else d for f, d in zip(fake, st.dims)], st.strides, st.offset, st.masks)
        arrays.append(small.gather_numpy(buf, bindings))
    a, b = arrays
    full = tuple(operands[0][1].shape(bindings))  # the product's shape
    axis, hi = axes[0], axes[-1] + 1
    if hi - axis > 1:  # the run summed as one axis: operands broadcast only where they vary inside it
        k = int(np.prod(full[axis:hi], dtype=np.int64))

        def merge(x):
            if any(v != 1 for v in x.shape[axis:hi]):
                x = np.broadcast_to(x, x.shape[:axis] + full[axis:hi] + x.shape[hi:])
            return x.reshape(x.shape[:axis] + (k if x.shape[axis:hi] == full[axis:hi] else 1,) + x.shape[hi:])
        a, b = merge(a), merge(b)
        full = full[:axis] + (k,) + full[hi:]
    rest = [j for j in range(len(full)) if j != axis]
    kept = tuple(full[j] for j in rest)
    if a.dtype == np.float16 or a.dtype.name == "bfloat16":  # float16/bfloat16 products round to their type
        # before the float32 sum: chunks of the product
        return _contract_chunked(a, b, axis, full, rest, kept).reshape(out_shape)
    batch = [j for j in rest if a.shape[j] != 1 and b.shape[j] != 1]
    m = [j for j in rest if a.shape[j] != 1 and b.shape[j] == 1]
    n = [j for j in rest if a.shape[j] == 1 and b.shape[j] != 1]
    both = [j for j in rest if a.shape[j] == 1 and b.shape[j] == 1]
    size = lambda axes: int(np.prod([full[j] for j in axes], dtype=np.int64))  # noqa: E731
    kk = full[axis]
    a2 = np.broadcast_to(a.transpose(batch + m + [axis] + n + both).reshape(size(batch), size(m), a.shape[axis]),
                         (size(batch), size(m), kk))
    b2 = np.broadcast_to(b.transpose(batch + [axis] + n + m + both).reshape(size(batch), b.shape[axis], size(n)),
                         (size(batch), kk, size(n)))
    with np.errstate(all="ignore"):
        c = np.matmul(a2, b2)
    c = c.reshape([full[j] for j in batch + m + n] + [1] * len(both))
    c = c.transpose(np.argsort(batch + m + n + both))
    return np.array(np.broadcast_to(c, kept).reshape(out_shape), order="C")  # (ascontiguousarray: 0-d -> 1-d)


_CHUNK = 1 << 22  # product elements per chunk of _contract_chunked


def _contract_chunked(a, b, axis, full, rest, out_shape) -> np.ndarray:
    """``sum(a * b, axis)`` (broadcasting) in slices of the largest output axis, each product at most ``_CHUNK``
    elements: the primitives' exact arithmetic with bounded memory."""
    out = np.empty(out_shape, a.dtype)
    if out.size == 0:
        return out
    j = max(rest, key=lambda r: full[r]) if rest else None
    per = int(np.prod(full, dtype=np.int64)) // max(full[j], 1) if j is not None else 0
    step = max(1, _CHUNK // max(per, 1)) if j is not None else 1
    acc = np.float32 if a.dtype == np.float16 or a.dtype.name == "bfloat16" else a.dtype
    for start in range(0, full[j] if j is not None else 1, step):
        def part(x):
            if j is None or x.shape[j] == 1:
                return x
            return x[(slice(None),) * j + (slice(start, start + step),)]
        with np.errstate(all="ignore"):
            if a.dtype.name == "bfloat16":  # each product rounded to bfloat16, summed in float32, rounded once
                prod = np.multiply(part(a).astype(acc), part(b).astype(acc)).astype(a.dtype).astype(acc)
                r = np.sum(prod, axis=axis).astype(a.dtype)
            else:
                r = np.sum(np.multiply(part(a), part(b)), axis=axis, dtype=acc).astype(a.dtype)
        if j is None:
            out[...] = r
        else:
            oj = j if j < axis else j - 1
            out[(slice(None),) * oj + (slice(start, start + step),)] = r
    return out


# ---------------------------------------------------------------------------------------------- gather errors
def _gather_context(graph, node) -> str:
    """Where a Gather reads from, for its out-of-range error: `` in node 5 'Gather(0)' (data 'weight' node 1,
    indices 'ids' node 0)``."""
    data, index = (graph.nodes.get(e.src) for e in node.inputs)
    name = lambda n, e: f"'{n.label}' node {e.src}" if n is not None else f"node {e.src}"  # noqa: E731
    return (f" in node {node.id} '{node.label}' (data {name(data, node.inputs[0])}, indices "
            f"{name(index, node.inputs[1])})")


def explain_gather_error(graph) -> str | None:
    """The interpreter's message for the first out-of-range Gather index of the last run of ``graph``, or None.

    For compiled runtimes, whose kernels only report that some index was out of range: each Gather's index
    is recomputed with the reference ops from the run's inputs, evaluating only the nodes it depends on."""
    order = graph.toposort()
    nodes = graph.nodes
    gathers = [i for i in order if isinstance(nodes[i].op, ops.Gather)]
    if not gathers:
        return None
    needed: set[int] = set()
    stack = [nodes[i].inputs[1].src for i in gathers]
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(e.src for e in nodes[i].inputs)
    bindings = graph._bindings()
    values: dict[int, np.ndarray] = {}
    try:
        for i in order:
            node = nodes[i]
            if i not in needed and i not in gathers:
                continue
            if isinstance(node.op, ops.Input):
                values[i] = graph.tensors[(i, 0)]
                continue
            out_shape = tuple(d.evaluate(bindings) for d in node.dims)
            if isinstance(node.op, ops.Gather):
                index = node.inputs[1].shape.gather_numpy(values[node.inputs[1].src], bindings)
                message = node.op.index_error(index, node.inputs[0].shape.dims[node.op.axis].evaluate(bindings))
                if message:
                    return message + _gather_context(graph, node)
                if i not in needed:
                    continue
            args = [e.shape.gather_numpy(values[e.src], bindings) for e in node.inputs]
            values[i] = np.asarray(node.op.reference(args, bindings, out_shape), dtype=node.dtype.numpy)
    except Exception:  # noqa: BLE001 - an explanation is best effort; the caller has its own message
        return None
    return None
