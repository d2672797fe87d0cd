"""Reverse-mode automatic differentiation as a graph transformation.

``grad(loss, params)`` adds the backward pass to ``loss``'s graph and returns one gradient tensor per
parameter — ordinary lazy ``GraphTensor``s, so the forward pass, the gradients and (with an optimizer) the
parameter update all compile into one program.

How it works:

* Only the nodes that lie on a path from a parameter to the loss are differentiated, in reverse
  topological order; a node read by several consumers accumulates their contributions.
* Each of the primitive ops has one local rule (below). High-level ops (softmax, layer norm, attention,
  convolutions...) need none: they are made of primitives.
* Every graph edge reads its source through a ``ShapeTracker`` view; the gradient that arrives at the view
  is sent back to the source buffer by *undoing the view* (:func:`unview`): broadcast axes are summed,
  permutations inverted, flips flipped back, slices padded and pads sliced — all as zero-copy views — and
  views that read an element more than once (sliding windows of convolutions and pooling, strided slices)
  become a scatter-add written as a fused gather-and-sum over the source elements.
* A node with a :attr:`~luminal.graph.Graph.grad_rules` entry (``pow``, ``maximum``/``minimum``, ``cos``,
  ``tan``, ``max_pool``, ``softmax``, ``log_softmax``) is differentiated by that rule -- PyTorch's formula over
  its operands -- instead of through its primitives, where the chain rule would give other values at special
  points (``0 ** -1``, ties) or lose accuracy (or, for softmax, read the input, its maximum and exponentials).
* Non-differentiable ops (``LessThan``, integer and bool tensors, ``Gather``'s index) pass no gradient.
  Asking for the gradient of an integer tensor raises ``TypeError``.

Example::

    >>> import luminal as lm, numpy as np
    >>> from luminal.training import grad
    >>> cx = lm.Graph()
    >>> w = cx.tensor(3).set(np.array([1.0, 2.0, 3.0], np.float32))
    >>> (gw,) = grad((w * w).sum(), [w])
    >>> gw.retrieve(); cx.execute(); gw.data().tolist()
    [2.0, 4.0, 6.0]
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from .. import ops
from ..dtype import DType
from ..graph import Graph, GraphError
from ..shape import ShapeTracker, to_expr
from ..tensor import GraphTensor
from .unview import _const, unview

__all__ = ["grad", "vjp", "backward", "unview"]

_LN2 = math.log(2.0)


# ---------------------------------------------------------------------------- public API
def grad(output: GraphTensor, inputs: Sequence, grad_output=None, allow_unused: bool = False) -> list:
    """Gradients of ``output`` with respect to each of ``inputs`` (``torch.autograd.grad`` semantics).

    Args:
        output: the tensor to differentiate; a one-element tensor (the loss) unless ``grad_output`` is given.
        inputs: ``GraphTensor``s (node outputs such as inputs or intermediates — not views of them) or
            :class:`~luminal.module.Parameter`s (bound to ``output``'s graph on demand).
        grad_output: the upstream gradient, a tensor or array-like of ``output``'s shape (default: ones).
        allow_unused: return ``None`` for an input the output does not depend on instead of raising.

    Returns:
        one ``GraphTensor`` per input, with the input's dims and dtype (lazy: ``retrieve()`` and execute).
    """
    if not isinstance(output, GraphTensor):
        raise TypeError(f"grad: output must be a GraphTensor, got {type(output).__name__}")
    graph = output.graph
    if not output.dtype.is_float:
        raise TypeError(f"grad: output has dtype {output.dtype}; only floating-point tensors have gradients")
    targets = [_as_target(graph, x, k) for k, x in enumerate(inputs)]
    if grad_output is None:
        n = output.numel()
        if not (n.is_constant() and n.to_int() == 1):
            raise GraphError(f"grad: output has shape {[str(d) for d in output.dims]}; pass grad_output for a "
                             "non-scalar output (or reduce it to one element first)")
        seed = graph.constant(1.0, output.dtype, output.dims)
    else:
        seed = _as_seed(output, grad_output)

    return _collect(graph, _backprop(graph, [(output, seed)], {t.id for t in targets}), targets, allow_unused)


def vjp(pairs: Sequence, inputs: Sequence, cut: Sequence = (), allow_unused: bool = False) -> list:
    """Vector-Jacobian products: the gradients of ``sum_k <outputs_k, seeds_k>`` with respect to ``inputs``.

    Args:
        pairs: ``(output, seed)`` pairs of one graph; ``seed`` is a tensor of ``output``'s shape, or None for a
            one-element output (ones). An output may itself be an intermediate (a gradient that arrives there).
        inputs: node tensors (not views) to differentiate with respect to, as in :func:`grad`.
        cut: node tensors through which no gradient flows from their consumers (a seed placed on one of them
            still flows on): the eager engine's tensor hooks process the gradient at such a node themselves.
        allow_unused: None instead of an error for an input no output depends on.

    The backward nodes are ordinary graph ops, so the result can be differentiated again (higher-order
    gradients)."""
    if not pairs:
        raise TypeError("vjp: no (output, seed) pairs")
    graph = pairs[0][0].graph
    seeds = []
    for output, seed in pairs:
        if not isinstance(output, GraphTensor) or output.graph is not graph:
            raise GraphError("vjp: every output must be a GraphTensor of one graph")
        if not output.dtype.is_float:
            raise TypeError(f"vjp: an output has dtype {output.dtype}; only floating-point tensors have gradients")
        if seed is None:
            n = output.numel()
            if not (n.is_constant() and n.to_int() == 1):
                raise GraphError("vjp: a non-scalar output needs a seed")
            seed = graph.constant(1.0, output.dtype, output.dims)
        else:
            seed = _as_seed(output, seed)
        seeds.append((output, seed))
    targets = [_as_target(graph, x, k) for k, x in enumerate(inputs)]
    cut_ids = frozenset(_as_target(graph, c, k).id for k, c in enumerate(cut))
    return _collect(graph, _backprop(graph, seeds, {t.id for t in targets}, cut_ids), targets, allow_unused)


def _collect(graph: Graph, grads: dict, targets: list, allow_unused: bool) -> list:
    out = []
    for k, t in enumerate(targets):
        g = grads.get(t.id)
        if g is None:
            if not allow_unused:
                raise GraphError(f"grad: input {k} (node {t.id} '{graph.nodes[t.id].label}') is not used to "
                                 "compute the output; pass allow_unused=True to get None for it")
            out.append(None)
        else:
            out.append(g)
    return out


def backward(loss: GraphTensor, params, allow_unused: bool = True) -> dict:
    """Gradients of ``loss`` for ``params`` (a Module, or an iterable of Parameters / tensors) as a dict.

    The keys are the given objects (``Parameter``s or tensors); parameters that do not influence the loss
    map to ``None`` (unless ``allow_unused=False``, which raises). Frozen parameters
    (``requires_grad=False``) are skipped.
    """
    from ..module import Module, Parameter

    if isinstance(params, Module):
        params = list(params.parameters())
    params = [p for p in params if not (isinstance(p, Parameter) and not p.requires_grad)]
    grads = grad(loss, params, allow_unused=allow_unused)
    return dict(zip(params, grads))


# ---------------------------------------------------------------------------- helpers
def _as_target(graph: Graph, x, k: int) -> GraphTensor:
    from ..module import Parameter

    if isinstance(x, Parameter):
        x = x.bind(graph)
    if not isinstance(x, GraphTensor):
        raise TypeError(f"grad: input {k} must be a GraphTensor or Parameter, got {type(x).__name__}")
    if x.graph is not graph:
        raise GraphError(f"grad: input {k} belongs to a different graph than the output")
    node = graph.nodes[x.id]
    if not x.dtype.is_float:
        raise TypeError(f"grad: input {k} ('{node.label}') has dtype {x.dtype}; only floating-point tensors "
                        "have gradients (integer and bool tensors are not differentiable)")
    if x.tracker != ShapeTracker.contiguous_of(node.dims):
        raise GraphError(f"grad: input {k} is a view of node {x.id} '{node.label}'; pass the tensor itself "
                         "(differentiate with respect to the node, then apply the view to its gradient)")
    return x


def _as_seed(output: GraphTensor, grad_output) -> GraphTensor:
    graph = output.graph
    if isinstance(grad_output, GraphTensor):
        if grad_output.graph is not graph:
            raise GraphError("grad: grad_output belongs to a different graph")
        g = grad_output
    else:
        import numpy as np

        arr = np.asarray(grad_output, dtype=output.dtype.numpy)
        g = graph.tensor(arr.shape, output.dtype, "grad_output").set(arr)
    if len(g.dims) != len(output.dims) or any(a != b for a, b in zip(g.dims, output.dims)):
        raise GraphError(f"grad: grad_output has shape {[str(d) for d in g.dims]} but the output has "
                         f"{[str(d) for d in output.dims]}")
    return g.cast(output.dtype)


def _backprop(graph: Graph, seeds: list, wanted: set[int], cut: frozenset = frozenset()) -> dict[int, GraphTensor]:
    """Gradient tensors (node dims) for the nodes in ``wanted`` from the ``(output, seed)`` pairs ``seeds``; the
    backward nodes are added to ``graph``. Gradients arriving at a node of ``cut`` from its consumers are dropped
    (a seed on it still flows on)."""
    order = graph.toposort()
    rules = graph.grad_rules

    def sources(nid):  # what a node's gradient flows to: its rule's operands (Graph.grad_rules), else its inputs
        rule = rules.get(nid)
        return [src for src, _ in rule[1]] if rule is not None else [e.src for e in graph.nodes[nid].inputs]

    # forward-reachable from the wanted nodes, through float nodes only
    reach = set(wanted)
    for nid in order:
        if nid not in reach and graph.nodes[nid].dtype.is_float and any(src in reach for src in sources(nid)):
            reach.add(nid)
    seeded = {o.id for o, _ in seeds if o.id in reach}
    if not seeded:
        return {}
    # backward-reachable from the outputs
    needed = set(seeded)
    for nid in reversed(order):
        if nid in needed and (nid not in cut or nid in seeded):
            for src in sources(nid):
                if src in reach:
                    needed.add(src)
    relevant = needed & reach
    readers = {nid: len(edges) for nid, edges in graph.consumer_edges().items()}
    pending: dict[int, list[GraphTensor]] = {}
    for output, seed in seeds:
        if output.id in seeded:
            pending.setdefault(output.id, []).append(unview(seed, output.tracker, graph.nodes[output.id].dims))
    if cut:
        class _Pending(dict):  # contributions from consumers of a cut node are dropped
            def setdefault(self, key, default=None):
                return [] if key in cut else dict.setdefault(self, key, default)
        pending = _Pending(pending)
    result: dict[int, GraphTensor] = {}
    for nid in reversed(order):
        if nid not in relevant or nid not in pending:
            continue
        parts = pending.pop(nid)
        g = parts[0]
        for p in parts[1:]:
            g = g + p
        node = graph.nodes[nid]
        if nid in wanted:
            result[nid] = g
        rule = graph.grad_rules.get(nid)
        if rule is not None and all(src in graph.nodes for src, _ in rule[1]):
            for (src_id, view), local in _rule_grads(graph, node, rule, g, relevant):
                src = graph.nodes[src_id]
                pending.setdefault(src_id, []).append(unview(local.cast(src.dtype), view, src.dims))
            continue
        slots = {k for k, e in enumerate(node.inputs) if e.src in relevant}
        if isinstance(node.op, ops.Gather) and 0 in slots:
            stacked = _stacked_select(graph, node, readers)
            if stacked is not None:  # where(): route each branch's share straight to it (see below)
                slots.discard(0)
                add_node, picks = stacked
                index = _operand(graph, node, 1)
                for e, n in zip(add_node.inputs, picks):
                    if e.src not in relevant:
                        continue
                    size = add_node.dims[node.op.axis]
                    share = (g * index.eq(n).cast(g.dtype)).pad_axis(node.op.axis, n, size - 1 - n)
                    src = graph.nodes[e.src]
                    pending.setdefault(e.src, []).append(unview(share.cast(src.dtype), e.shape, src.dims))
        for slot, local in _local_grads(graph, node, g, slots):
            edge = node.inputs[slot]
            if local is None:
                continue
            src = graph.nodes[edge.src]
            local = local.cast(src.dtype)
            pending.setdefault(edge.src, []).append(unview(local, edge.shape, src.dims))
    return result


def _stacked_select(graph: Graph, gather, readers) -> tuple | None:
    """Recognise a Gather that selects among branches stacked by padding (how ``where`` is built: the data is
    ``Add(a padded to slot 1, b padded to slot 0)`` along the gathered axis, read only by this Gather).

    Returns ``(the Add node, the slot each of its inputs occupies)``. The Gather's gradient is then sent to
    each branch as ``g * (index == slot)`` directly — the same values the generic rule produces through the
    Add, without materializing the stacked scatter (which BLAS consumers would have to copy again).
    """
    data_edge, index_edge = gather.inputs
    axis = gather.op.axis
    add = graph.nodes[data_edge.src]
    if not isinstance(add.op, ops.Add) or readers.get(add.id, 0) != 1 or \
            data_edge.shape != ShapeTracker.contiguous_of(add.dims):
        return None
    size = _const(add.dims[axis])
    if size is None or size > 8 or index_edge.shape.dims[axis] != 1:
        return None
    if any(i != d for j, (i, d) in enumerate(zip(index_edge.shape.dims, add.dims)) if j != axis):
        return None
    picks = []
    for e in add.inputs:
        st = e.shape
        if st.strides[axis] != 0:
            return None
        lo, hi = 0, size
        for c, k, sz in st.masks:
            if c[axis] == 0:
                continue
            if c[axis] != 1 or any(cc != 0 for j, cc in enumerate(c) if j != axis) or \
                    _const(k) is None or _const(sz) is None:
                return None
            lo, hi = max(lo, -_const(k)), min(hi, _const(sz) - _const(k))
        if hi - lo != 1:
            return None
        picks.append(lo)
    if len(set(picks)) != len(picks):
        return None
    return add, picks


def _operand(graph: Graph, node, slot: int) -> GraphTensor:
    e = node.inputs[slot]
    return GraphTensor(graph, e.src, e.shape, graph.nodes[e.src].dtype)


def _local_grads(graph: Graph, node, g: GraphTensor, slots: set[int]):
    """``(input slot, gradient at that input's view)`` for the input ``slots`` that need one (only those are
    built, so no dead nodes are added)."""
    return [(k, fn()) for k, fn in _local_rules(graph, node, g) if k in slots]


def _local_rules(graph: Graph, node, g: GraphTensor):
    """``(input slot, thunk building the gradient at that input's view)`` pairs for one node."""
    op = node.op
    y = GraphTensor(graph, node.id, ShapeTracker.contiguous_of(node.dims), node.dtype)
    x = lambda k: _operand(graph, node, k)  # noqa: E731
    if isinstance(op, (ops.Input, ops.Constant, ops.Iota)):
        return []
    if isinstance(op, ops.Add):
        return [(0, lambda: g), (1, lambda: g)]
    if isinstance(op, ops.Mul):
        return [(0, lambda: g * x(1)), (1, lambda: g * x(0))]
    if isinstance(op, ops.Mod):
        # a - floor(a / b) * b: d/da = 1, d/db = -floor(a / b) = -(a - y) / b  (torch.remainder)
        a, b = x(0), x(1)
        return [(0, lambda: g), (1, lambda: -(g * ((a - y) / b)))]
    if isinstance(op, (ops.LessThan, ops.Bitwise, ops.BitCast)):  # bool / integer results, reinterpreted bits: no gradient
        return []
    if isinstance(op, ops.Log2):
        return [(0, lambda: g / (x(0) * _LN2))]
    if isinstance(op, ops.Exp2):
        return [(0, lambda: g * y * _LN2)]
    if isinstance(op, ops.Sin):
        return [(0, lambda: g * x(0).cos())]
    if isinstance(op, ops.Sqrt):
        return [(0, lambda: g * 0.5 / y)]
    if isinstance(op, ops.Recip):
        return [(0, lambda: -(g * y * y))]
    if isinstance(op, ops.SumReduce):
        n = x(0).dims[op.axis]
        return [(0, lambda: g.expand_dim(op.axis, n))]
    if isinstance(op, ops.MaxReduce):
        # the gradient is shared evenly by the maxima (torch.amax)
        def max_grad():
            xv = x(0)
            n = xv.dims[op.axis]
            # x <= max everywhere, so "x == max" is "not x < max": one comparison instead of eq's four
            # (a NaN maximum shares the gradient over the whole slice instead of giving NaN)
            hit = (xv < y.expand_dim(op.axis, n)).logical_not().cast(node.dtype)
            share = g / hit.sum(op.axis)
            return share.expand_dim(op.axis, n) * hit
        return [(0, max_grad)]
    if isinstance(op, (ops.Contiguous, ops.GraphBreak)):
        return [(0, lambda: g)]
    if isinstance(op, ops.Cast):
        src = graph.nodes[node.inputs[0].src].dtype
        return [(0, lambda: g.cast(src))] if src.is_float else []
    if isinstance(op, ops.Gather):
        return [(0, lambda: _gather_grad(graph, x(0), x(1), op.axis, g))]
    if isinstance(op, ops.ScatterAdd):  # each position read back from where it was summed
        return [(1, lambda: g.gather(op.axis, x(0)))]
    raise NotImplementedError(f"autograd: no rule for primitive {op.name}")


def _rule_grads(graph: Graph, node, rule, g: GraphTensor, relevant: set[int]):
    """``((operand node, view), gradient at that view)`` for a node with a :attr:`Graph.grad_rules` entry: PyTorch's
    formulas where the chain rule through the primitives gives other values at special points."""
    from ..hl_ops import where

    name, operands, param, dims = rule
    ts = [GraphTensor(graph, src, view, graph.nodes[src].dtype) for src, view in operands]
    y = GraphTensor(graph, node.id, ShapeTracker.contiguous_of(node.dims), node.dtype)
    if tuple(node.dims) != tuple(dims):  # the rule's result reads its node through a reshape
        y, g = y.reshape(dims), g.reshape(dims)
    if name == "pow":  # torch's pow_backward / pow_backward_self / pow_backward_exponent
        x = ts[0]
        if param == 0.0:  # torch's pow_backward: zeros for a zero exponent (no 0 * inf at x = 0)
            rules = [lambda: where(x.eq(x), 0.0, 0.0).cast(g.dtype)]
        elif param is not None:  # a scalar exponent
            rules = [lambda: g * (x.pow(param - 1.0) * param)]
        else:
            e = ts[1]
            rules = [lambda: where(e.eq(0.0), 0.0, g * (e * x.pow(e - 1.0))),
                     lambda: g * where(x.eq(0.0).logical_and(e >= 0.0), 0.0, y * x.log())]
    elif name in ("maximum", "minimum"):  # ties share the gradient equally (torch's max/min backward)
        a, b = ts

        def share(me, other):  # g where `me` wins, g / 2 at a tie, 0 where it loses (NaN: g)
            loses = me < other if name == "maximum" else other < me
            return where(a.eq(b), g * 0.5, where(loses, 0.0, g))
        rules = [lambda: share(a, b), lambda: share(b, a)]
    elif name == "cos":
        rules = [lambda: g * -(ts[0].sin())]
    elif name == "tan":
        rules = [lambda: g * (y * y + 1.0)]
    elif name == "clamp":  # torch's clamp_backward: g inside [min, max] (ends included), 0 outside and at NaN
        lo, hi = param
        x = ts[0]
        inside = None
        if lo is not None:
            inside = x >= lo
        if hi is not None:
            inside = x <= hi if inside is None else inside.logical_and(x <= hi)
        rules = [lambda: where(inside, g, 0.0)]
    elif name == "max_pool":  # torch's max pooling backward: all of g to the first maximum (last NaN)
        rules = [lambda: _max_pool_grad(ts[0], ts[1] if len(ts) > 1 else None, y, g, param)]
    elif name == "conv_transpose":  # torch's transposed-convolution backward (luminal.nn.conv)
        from ..nn.conv import transposed_conv_grads

        both: list = []

        def part(k):  # dx and dweight share the im2col of g: built once, on first use
            if not both:
                both.extend(transposed_conv_grads(ts[0], ts[1], g, *param))
            return both[k]
        rules = [lambda: part(0), lambda: part(1)]
        if len(ts) > 2:  # the bias: g summed over the batch and the spatial axes
            rules.append(lambda: g.sum(tuple([0] + list(range(2, g.ndim)))))
    elif name == "conv":  # a convolution: torch's backward, the input's gradient a convolution (nn.conv_grad)
        from ..nn.conv_grad import conv_input_grad, conv_weight_grad, offer_col2im

        def input_grad():  # (the col2im form offered to a measuring compile as the e-graph's alternative)
            dx = conv_input_grad(ts[0], ts[1], g, *param)
            offer_col2im(dx, ts[0], ts[1], g, *param)
            return dx
        rules = [input_grad, lambda: conv_weight_grad(ts[0], ts[1], g, *param)]
    elif name == "border_pad":  # a reflect / replicate / circular pad: slices of g, not a scatter (nn.functional)
        from ..nn.functional import border_pad_grad
        rules = [lambda: border_pad_grad(g, *param)]
    elif name == "embedding":  # torch's embedding backward: the padding_idx row gets no gradient
        rules = [lambda: _embedding_grad(ts[0], ts[1], g, param)]
    elif name == "stop_gradient":  # detach(): the value passes, no gradient flows back (luminal.eager)
        rules = []
    elif name in ("softmax", "log_softmax"):  # torch's _softmax_backward_data / _log_softmax_backward_data
        rules = [lambda: _softmax_grad(name, y, g, param)]
    elif name == "derivative":  # an elementwise op with PyTorch's local derivatives (luminal.hl_ops.trig)
        from ..hl_ops.trig import DERIVATIVES
        local = DERIVATIVES[param](ts, y)
        rules = [(lambda d=d: g * d) if d is not None else (lambda: g * 0.0) for d in local]
    else:
        raise NotImplementedError(f"autograd: no gradient rule named {name!r}")
    return [(operands[k], fn()) for k, fn in enumerate(rules) if operands[k][0] in relevant]


def _softmax_grad(name: str, y: GraphTensor, g: GraphTensor, axes) -> GraphTensor:
    """torch's softmax backward ``y * (g - sum(g * y))`` or log-softmax backward ``g - exp(y) * sum(g)`` over
    ``axes``, from the output ``y`` alone; a bfloat16 one computed in float32 and rounded once, as torch's CPU
    kernels do."""
    low = y.dtype == DType.bfloat16
    if low:
        y, g = y.cast(DType.float32), g.cast(DType.float32)
    if name == "softmax":
        out = y * (g - (g * y).sum(axes, keepdim=True))
    else:
        out = g - y.exp() * g.sum(axes, keepdim=True)
    return out.cast(DType.bfloat16) if low else out


def _max_pool_grad(w: GraphTensor, real, y: GraphTensor, g: GraphTensor, axes: tuple) -> GraphTensor:
    """The gradient at ``w`` of ``y = w.max(axes)`` as PyTorch's max pooling has it (``max_pool*d``'s indices,
    scattered): in each window the whole of ``g`` goes to the first maximum in row-major scan order over
    ``axes``, or to the last NaN when the window holds one; never to a position where ``real`` is False. One
    max-reduction picks it: every position gets a code (NaN: ``2K + p``; a maximum: ``2K - 1 - p``; else 0,
    ``p`` the scan position, ``K`` the window size); the window's largest code names the position that wins."""
    from ..hl_ops import where

    graph, dims = w.graph, w.dims
    kept = [d for i, d in enumerate(dims) if i not in axes]
    y, g = y.reshape(kept), g.reshape(kept)  # (keepdim results come with unit axes)
    for a in axes:
        y, g = y.expand_dim(a, dims[a]), g.expand_dim(a, dims[a])
    sizes = [dims[a].to_int() for a in axes]
    k = int(np.prod(sizes, dtype=np.int64))
    pos = None
    for i, a in enumerate(axes):
        shape = [1] * len(dims)
        shape[a] = sizes[i]
        part = graph.arange(sizes[i], dtype=DType.int32).reshape(shape) * int(np.prod(sizes[i + 1:], dtype=np.int64))
        pos = part if pos is None else pos + part
    hit = (w < y).logical_not()  # w <= max everywhere (a NaN position is a hit too, but its NaN code wins)
    nan = w.isnan()
    if real is not None:
        hit, nan = hit.logical_and(real), nan.logical_and(real)
    best = where(nan, pos + 2 * k, where(hit, pos * -1 + (2 * k - 1), 0)).max(axes, keepdim=True)
    # decoded per window, so the codes are only read by the reduction (fused into it, never stored)
    first = where(best >= 2 * k, best - 2 * k, best * -1 + (2 * k - 1))
    # g times the 0/1 mask: an elementwise op (the code generator splits the input grid into windows and reads g
    # without index divisions) that stays differentiable in g (double backward). Unlike torch's scatter, a NaN or
    # inf in g also spreads NaN to the window's other positions (0 * inf).
    return g * pos.eq(first).cast(g.dtype)


def _embedding_grad(weight: GraphTensor, ids: GraphTensor, g: GraphTensor, padding_idx: int) -> GraphTensor:
    """The gradient at ``weight`` (N, D) of ``weight.index_select(0, ids)`` with the positions whose id is
    ``padding_idx`` left out (``torch.nn.functional.embedding``'s ``padding_idx``)."""
    from ..hl_ops import where

    n = to_expr(1)
    for d in ids.dims:
        n = n * d
    width = weight.dims[1]
    flat = ids.reshape((n,))
    g2 = where(flat.eq(padding_idx).unsqueeze(1), 0.0, g.reshape((n, width)))
    return _gather_grad(weight.graph, weight, flat.unsqueeze(1).expand((n, width)), 0, g2)


# A gather's gradient is a one-hot comparison (entries x picks per row) summed over the index's axis, fused into
# the kernels around it, when that product is at most ONE_HOT_GRAD_MAX (a where()'s two branches) or the index
# picks at most ONE_HOT_GRAD_PICKS per row (a target logit out of a vocabulary: elementwise over the logits, no
# extra buffer); otherwise a ScatterAdd, work proportional to the index (an embedding table read by every token:
# the one-hot was tokens x vocabulary x width; a bilinear upsampling's 128 reads of 32 columns: 32x the work).
ONE_HOT_GRAD_MAX = 64
ONE_HOT_GRAD_PICKS = 4


def _gather_grad(graph: Graph, data: GraphTensor, index: GraphTensor, axis: int, g: GraphTensor) -> GraphTensor:
    """Scatter-add ``g`` (index dims) back to ``data``'s dims (see ``ONE_HOT_GRAD_MAX``)."""
    size, picks = data.dims[axis], index.dims[axis]
    few = picks.is_constant() and picks.to_int() <= ONE_HOT_GRAD_PICKS
    small = few or size.is_constant() and picks.is_constant() and size.to_int() * picks.to_int() <= ONE_HOT_GRAD_MAX
    if not small:
        from ..hl_ops.indexing import scatter_sum
        out = scatter_sum(index, g, axis, data.dims)
        return out.cast(g.dtype) if out.dtype != g.dtype else out
    slots = graph.arange(size, dtype=index.dtype)  # (size,)
    hit = index.unsqueeze(-1).eq(slots).cast(g.dtype)  # index dims + (size,)
    scattered = g.unsqueeze(-1) * hit  # index dims + (size,)
    scattered = scattered.squeeze(axis) if index.dims[axis] == 1 else scattered.sum(axis)
    nd = data.ndim
    perm = list(range(nd - 1))
    perm.insert(axis, nd - 1)
    scattered = scattered.permute(perm)
    for j in range(nd):  # the index may cover only a leading block of the other axes (torch.gather)
        if j != axis and scattered.dims[j] != data.dims[j]:
            scattered = scattered.pad_axis(j, 0, data.dims[j] - scattered.dims[j])
    return scattered




def parameters_of(params: Iterable) -> list:
    """Flatten a Module / iterable of Parameters into a list (helper for optimizers)."""
    from ..module import Module

    if isinstance(params, Module):
        return list(params.parameters())
    return list(params)
