"""Depth-first scheduling and a peak-memory estimate of an execution order."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..graph import Graph
from ..ops import Input
from .base import Pass


def peak_memory(graph: Graph, order: Sequence[int] | None = None, bindings: Mapping[str, int] | None = None) -> int:
    """Peak bytes of intermediate buffers alive when executing ``order`` (default: the graph's toposort).

    A node's buffer lives from its execution until its last consumer ran (forever if retrieved or kept);
    input data is not counted (the host owns it). Symbolic sizes use ``bindings`` (default ``dyn_map``).
    """
    order = list(graph.toposort() if order is None else order)
    bindings = graph.dyn_map if bindings is None else bindings
    position = {n: k for k, n in enumerate(order)}
    last_use = {n: position[n] for n in order}
    for n in order:
        for e in graph.nodes[n].inputs:
            last_use[e.src] = max(last_use[e.src], position[n])
    keep = graph.no_delete | graph.to_retrieve
    size = {}
    for n in order:
        node = graph.nodes[n]
        count = 1
        for d in node.dims:
            count *= d.evaluate(bindings)
        size[n] = 0 if isinstance(node.op, Input) else count * node.dtype.itemsize
    live = peak = 0
    frees: dict[int, list[int]] = {}
    for n in order:
        if n not in keep:
            frees.setdefault(last_use[n], []).append(n)
    for k, n in enumerate(order):
        live += size[n]
        peak = max(peak, live)
        for dead in frees.get(k, ()):
            live -= size[dead]
    return peak


class DepthFirst(Pass):
    """Add schedule edges that run the graph in depth-first post-order from its outputs.

    Each output's dependencies are finished (deepest input first) before the next branch starts, so a
    branch's intermediates die before another branch's are born — lower peak memory than breadth-first
    creation order on graphs with parallel branches. Returns the number of schedule edges added.
    """

    def run(self, graph: Graph) -> int:
        users: dict[int, int] = {i: 0 for i in graph.nodes}
        for n in graph.nodes.values():
            for e in n.inputs:
                users[e.src] += 1
        roots = sorted(i for i in graph.nodes if users[i] == 0 or i in graph.to_retrieve or i in graph.no_delete)
        order: list[int] = []
        visited: set[int] = set()
        for root in roots:
            stack = [(root, False)]
            while stack:
                node_id, expanded = stack.pop()
                if expanded:
                    order.append(node_id)
                    continue
                if node_id in visited:
                    continue
                visited.add(node_id)
                stack.append((node_id, True))
                deps = [e.src for e in graph.nodes[node_id].inputs]
                deps += [a for a, b in graph.schedule if b == node_id]
                for d in reversed(deps):
                    if d not in visited:
                        stack.append((d, False))
        order += [i for i in graph.nodes if i not in visited]
        old_schedule = set(graph.schedule)
        added = 0
        previous = None
        for node_id in order:
            if isinstance(graph.nodes[node_id].op, Input):
                continue
            if previous is not None and (previous, node_id) not in graph.schedule:
                graph.schedule.add((previous, node_id))
                added += 1
            previous = node_id
        graph._invalidate()
        try:
            graph.toposort()
        except Exception:
            # the existing schedule edges conflict with the depth-first order: keep the old schedule
            graph.schedule = old_schedule
            graph._invalidate()
            return 0
        return added
