"""Graph-rewriting helpers shared by passes: replace a node by a view of another node, or by a scalar."""

from __future__ import annotations

from ..graph import Graph
from ..ops import Constant, Contiguous, Input
from ..shape import ShapeTracker


def protected(graph: Graph, node_id: int) -> bool:
    """Nodes no pass may delete: inputs, kept and retrieved nodes."""
    return node_id in graph.no_delete or node_id in graph.to_retrieve or isinstance(graph.nodes[node_id].op, Input)


def replace_with_view(graph: Graph, node_id: int, src: int, view: ShapeTracker, output: int = 0) -> int:
    """Replace ``node_id`` by "``src`` read through ``view``" (``view.dims`` equal the node's dims).

    When ``view`` is row-major contiguous, consumers read ``src``'s buffer directly. Otherwise the layout
    change the consumers rely on is kept by a ``Contiguous`` node (the seed's contiguity subtlety: removing a
    no-op must not lose a permute/pad/broadcast that happened on its input edge). Returns the id consumers
    now read.
    """
    node = graph.nodes[node_id]
    if view.is_contiguous() and graph.nodes[src].dtype == node.dtype:
        graph.replace_uses(node_id, src)
        return src
    new = graph.add_op(Contiguous(), [(src, view)], node.dims, node.dtype, node.name, output_slots=[output])
    graph.replace_uses(node_id, new)
    return new


def scalar_view(view: ShapeTracker) -> ShapeTracker:
    """The same view over a one-element buffer: zero strides, masks kept (padding still reads 0)."""
    return ShapeTracker(view.dims, [0] * view.ndim, 0, view.masks)


def replace_with_constant(graph: Graph, node_id: int, value, dtype=None) -> int:
    """Replace ``node_id`` (whose every element equals ``value``) by a scalar ``Constant``; returns its id."""
    node = graph.nodes[node_id]
    dtype = dtype or node.dtype
    new = graph.add_op(Constant(value, dtype), (), (), dtype, node.name)
    graph.replace_uses(node_id, new, shape_fn=scalar_view)
    return new


def constant_value(graph: Graph, node_id: int, view: ShapeTracker | None = None):
    """The scalar a node's output holds everywhere (a non-symbolic ``Constant``), else ``None``.

    With ``view`` given, a view with masks (padding reads 0) disqualifies all values but 0.
    """
    op = graph.nodes[node_id].op
    if not isinstance(op, Constant) or not isinstance(op.value, (int, float, bool)):
        return None
    if view is not None and view.masks and op.value != 0:
        return None
    return op.value
