"""Generic passes: CSE, dead-node removal, size-1 reduction removal, and the default pipeline.

Algebraic rewrites are not passes: they are rules of the e-graph (``luminal/compiler/rules/*.egg``, run by
:class:`~luminal.compiler.egraph.EqualitySaturation`), each checked sound by tests/test_rule_soundness.py.

Each pass preserves the reference result exactly (no float reassociation).
"""

from __future__ import annotations

from ..graph import Graph
from ..ops import Input, MaxReduce, SumReduce
from .base import Looped, Pass
from .rewrite import protected, replace_with_view


class CSE(Pass):
    """Common-subexpression elimination: same op value, same inputs read through the same views => one node.

    Op identity is value equality of the op objects (``SumReduce(1) == SumReduce(1)``), never a printed
    string. Inputs are never merged.
    """

    def run(self, graph: Graph) -> int:
        merged = 0
        seen: dict[tuple, int] = {}
        # one topological sweep suffices: a merge only rewires later nodes, whose keys are computed after it
        for node_id in list(graph.toposort()):
            node = graph.nodes.get(node_id)
            if node is None or isinstance(node.op, Input):
                continue
            key = (node.op, node.dtype, node.dims, tuple(node.inputs))
            keep = seen.get(key)
            if keep is None:
                seen[key] = node_id
                continue
            graph.replace_uses(node_id, keep)
            if not protected(graph, node_id):
                graph.remove_node(node_id)
            merged += 1
        return merged


class RemoveUnusedNodes(Pass):
    """Dead-node removal: delete nodes nothing reads, except inputs and ``no_delete``/``to_retrieve`` nodes."""

    def run(self, graph: Graph) -> int:
        users = {i: 0 for i in graph.nodes}
        for n in graph.nodes.values():
            for e in n.inputs:
                users[e.src] += 1
        stack = [i for i, c in users.items() if c == 0 and not protected(graph, i)]
        removed = 0
        while stack:
            node_id = stack.pop()
            if node_id not in graph.nodes:
                continue
            inputs = [e.src for e in graph.nodes[node_id].inputs]
            graph.remove_node(node_id)
            removed += 1
            for src in inputs:
                users[src] -= 1
                if users[src] == 0 and not protected(graph, src):
                    stack.append(src)
        return removed


class RemoveSingleReductions(Pass):
    """A ``SumReduce``/``MaxReduce`` over a size-1 axis is its input with that axis squeezed.

    The default pipeline does not run it: the e-graph's ``sum-unit-axis`` / ``max-unit-axis`` rules and copy
    elimination do the same (byte-identical C on W3-W6 and the BERT encoder). It stays for pipelines without
    saturation (``LUMINAL_EGRAPH=0``) and for users composing their own."""

    def run(self, graph: Graph) -> int:
        count = 0
        for node_id in list(graph.toposort()):
            node = graph.nodes.get(node_id)
            if node is None or not isinstance(node.op, (SumReduce, MaxReduce)):
                continue
            edge = node.inputs[0]
            if edge.shape.dims[node.op.axis] != 1:
                continue
            replace_with_view(graph, node_id, edge.src, edge.shape.squeeze(node.op.axis), edge.output)
            if not protected(graph, node_id) and not graph.consumers(node_id):
                graph.remove_node(node_id)
            count += 1
        return count


GPU_DEVICES = ("cuda", "gpu-interpret")  # devices whose programs the e-graph prices with the "gpu" cost model


def GenericCompiler(device: str | None = None):  # noqa: N802 - reads like a class, as in the seed
    """The default pipeline (what ``Graph.compile(device=...)`` runs when no compiler is given): dead-node
    removal, equality saturation (the algebra, approx, reductions, layout and gemm rulesets of
    ``luminal/compiler/rules``, size-1 reductions included; extraction by cost, duplicates merged), dead nodes
    again, and depth-first scheduling. Without the e-graph (``LUMINAL_EGRAPH=0``, or egglog missing): size-1
    reductions squeezed by :class:`RemoveSingleReductions` and :class:`CSE` instead of saturation.

    ``device``: the device the graph is compiled for; ``"cuda"`` and ``"gpu-interpret"`` extract with the
    ``"gpu"`` cost model (which also gets long reductions with few outputs split in two stages), every other
    device with the ``"cpu"`` one."""
    import os

    from .egraph import EqualitySaturation
    from .schedule import DepthFirst

    # LUMINAL_EGRAPH=0: plain CSE instead of saturation (to tell whether the e-graph causes a difference)
    use_egraph = os.environ.get("LUMINAL_EGRAPH", "1") != "0"
    if use_egraph and not _egglog_available():
        import warnings

        warnings.warn("the egglog package is not installed: the default pipeline runs CSE instead of equality "
                      "saturation (pip install 'egglog>=13.2,<14')", stacklevel=3)
        use_egraph = False
    if use_egraph:
        backend = "gpu" if device in GPU_DEVICES else "cpu"
        return (RemoveUnusedNodes(), EqualitySaturation(cost_backend=backend), RemoveUnusedNodes(), DepthFirst())
    return (RemoveUnusedNodes(), Looped((RemoveSingleReductions(), RemoveUnusedNodes())), CSE(),
            RemoveUnusedNodes(), DepthFirst())


def _egglog_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("egglog") is not None
