"""Algebraic simplification of the primitive graph.

Rewrites (each keeps the reference result; the float ones are exact except where noted):

* ``x + 0 -> x``; ``x * 1 -> x`` (the 1 read without padding masks);
* ``x * 0 -> 0`` only for integer/bool ``x`` (for floats ``inf*0`` and ``nan*0`` are NaN);
* ``(-1) * ((-1) * x) -> x`` (exact);
* ``recip(recip(x)) -> x`` (may differ in the last ulp, and where ``1/x`` overflows);
* ``log2(exp2(x)) -> x`` (exact where the reference does not overflow);
* ``exp2(log2(x)) -> x`` only when ``x`` is provably non-negative (``log2`` of a negative is NaN);
* constant folding: an elementwise op, ``Cast`` or ``MaxReduce`` whose inputs are all scalar constants
  becomes one ``Constant`` (computed with the op's own reference semantics).

A removed node's consumers read its source through the source's edge view; when that view is not
row-major (a permute, pad or broadcast happened on the edge), a ``Contiguous`` keeps the layout.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..graph import Graph
from .base import Pass
from .rewrite import constant_value, protected, replace_with_constant, replace_with_view

_ELEMENTWISE = (ops.Log2, ops.Exp2, ops.Sin, ops.Sqrt, ops.Recip, ops.Add, ops.Mul, ops.Mod, ops.LessThan,
                ops.Cast)


def _non_negative(graph: Graph, node_id: int, depth: int = 0) -> bool:
    """A conservative proof that every element of the node is >= 0 (or NaN-free non-negative)."""
    node = graph.nodes[node_id]
    op = node.op
    if depth > 8:
        return False
    if isinstance(op, (ops.Exp2, ops.Sqrt)):
        return not isinstance(op, ops.Sqrt) or _non_negative(graph, node.inputs[0].src, depth + 1)
    if isinstance(op, ops.Constant):
        return isinstance(op.value, (int, float)) and op.value >= 0
    if isinstance(op, (ops.Iota,)):
        return False
    if isinstance(op, ops.Mul):
        a, b = node.inputs
        if a.src == b.src and a.shape == b.shape:
            return True  # x * x
        return _non_negative(graph, a.src, depth + 1) and _non_negative(graph, b.src, depth + 1)
    if isinstance(op, (ops.Add, ops.Recip, ops.SumReduce, ops.MaxReduce, ops.Contiguous)):
        return all(_non_negative(graph, e.src, depth + 1) for e in node.inputs)
    return False


class ArithmeticElimination(Pass):
    """Apply the algebraic rewrites of the module docstring once over the graph; returns the rewrite count."""

    def run(self, graph: Graph) -> int:
        count = 0
        for node_id in list(graph.toposort()):
            node = graph.nodes.get(node_id)
            if node is None:
                continue
            if self._rewrite(graph, node):
                count += 1
                if not protected(graph, node_id) and node_id in graph.nodes and not graph.consumers(node_id):
                    graph.remove_node(node_id)
        return count

    def _rewrite(self, graph: Graph, node) -> bool:
        op = node.op
        ins = node.inputs
        if isinstance(op, ops.Add):
            for k in (0, 1):
                if constant_value(graph, ins[k].src, ins[k].shape) == 0:
                    other = ins[1 - k]
                    replace_with_view(graph, node.id, other.src, other.shape, other.output)
                    return True
        if isinstance(op, ops.Mul):
            for k in (0, 1):
                value = constant_value(graph, ins[k].src, ins[k].shape)
                if value is None or ins[k].shape.masks:
                    continue
                other = ins[1 - k]
                if value == 1:
                    replace_with_view(graph, node.id, other.src, other.shape, other.output)
                    return True
                if value == 0 and not node.dtype.is_float:
                    replace_with_constant(graph, node.id, False if node.dtype.value == "bool" else 0)
                    return True
                if value == -1:
                    inner = graph.nodes[other.src]
                    if isinstance(inner.op, ops.Mul) and other.shape.is_contiguous():
                        for j in (0, 1):
                            if constant_value(graph, inner.inputs[j].src, inner.inputs[j].shape) == -1 and \
                                    not inner.inputs[j].shape.masks:
                                x = inner.inputs[1 - j]
                                replace_with_view(graph, node.id, x.src, x.shape, x.output)
                                return True
        pairs = ((ops.Recip, ops.Recip), (ops.Log2, ops.Exp2), (ops.Exp2, ops.Log2))
        for outer, inner_type in pairs:
            if isinstance(op, outer) and ins[0].shape.is_contiguous():
                inner = graph.nodes[ins[0].src]
                if isinstance(inner.op, inner_type):
                    x = inner.inputs[0]
                    if isinstance(op, ops.Exp2) and not _non_negative(graph, x.src):
                        continue
                    replace_with_view(graph, node.id, x.src, x.shape, x.output)
                    return True
        return self._fold_constants(graph, node)

    def _fold_constants(self, graph: Graph, node) -> bool:
        op = node.op
        if not isinstance(op, _ELEMENTWISE + (ops.MaxReduce,)) or not node.inputs:
            return False
        values = []
        for e in node.inputs:
            v = constant_value(graph, e.src)
            if v is None or e.shape.masks:
                return False
            values.append(np.asarray(v, dtype=graph.nodes[e.src].dtype.numpy))
        if isinstance(op, ops.MaxReduce):
            n = node.inputs[0].shape.dims[op.axis]
            if not n.is_constant() or n.to_int() == 0:
                return False
            values = [values[0].reshape((1,) * node.inputs[0].shape.ndim)]
            result = op.reference(values, {}, (1,) * (node.inputs[0].shape.ndim - 1))
        else:
            try:
                result = op.reference(values, {}, ())
            except (ZeroDivisionError, FloatingPointError):
                return False
        value = np.asarray(result, dtype=node.dtype.numpy).reshape(-1)[0].item()
        replace_with_constant(graph, node.id, value)
        return True
