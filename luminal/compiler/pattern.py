"""A small subgraph pattern matcher (the seed's ``SelectGraph``/``GraphSearch``).

Build a pattern bottom-up from :class:`Pattern` nodes, search a graph for every
match, and rewrite matches safely::

    x = Pattern.any()
    zero = Pattern.op(ops.Constant, where=lambda node: node.op.value == 0)
    add = Pattern.op(ops.Add, inputs=[x, zero], commutative=True)
    for m in add.search(graph):
        print(m[add], m[x])          # node ids bound to the pattern nodes

Constraints: op type(s), a predicate on the node (``where``), one on its dims
(``dims``), one per input edge (``Pattern.edge(p, view_predicate)``), and
repeated pattern nodes must bind the same graph node (``Mul(x, x)``). Matches
may overlap; :func:`replace_matches` re-validates each match before calling the
rewrite, so a rewrite that consumed a node cannot be applied twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from ..graph import Graph, Node
from ..shape import ShapeTracker


@dataclass(eq=False)
class Pattern:
    """One node of a pattern (see the module docstring). Compare by identity."""

    op_types: tuple = ()
    inputs: list = field(default_factory=list)  # [(Pattern, edge predicate or None)]
    where: Callable[[Node], bool] | None = None
    dims: Callable[[tuple], bool] | None = None
    commutative: bool = False
    label: str = ""

    # ------------------------------------------------------------------ construction
    @staticmethod
    def any(label: str = "", where: Callable[[Node], bool] | None = None) -> "Pattern":
        """Matches any node (its inputs are not inspected)."""
        return Pattern(where=where, label=label)

    @staticmethod
    def op(op_types, inputs: Sequence = (), where=None, dims=None, commutative: bool = False,
           label: str = "") -> "Pattern":
        """Matches a node whose op is an instance of ``op_types`` and whose inputs match ``inputs``."""
        if not isinstance(op_types, tuple):
            op_types = (op_types,)
        wired = [p if isinstance(p, tuple) else (p, None) for p in inputs]
        if commutative and len(wired) != 2:
            raise ValueError("commutative patterns need exactly two inputs")
        return Pattern(op_types, wired, where, dims, commutative, label)

    @staticmethod
    def edge(pattern: "Pattern", view: Callable[[ShapeTracker], bool]) -> tuple:
        """An input entry that also constrains the view on the edge (e.g. ``lambda st: st.is_contiguous()``)."""
        return (pattern, view)

    def nodes(self) -> list["Pattern"]:
        """All pattern nodes reachable from this one (this one first)."""
        out, stack, seen = [], [self], set()
        while stack:
            p = stack.pop()
            if id(p) in seen:
                continue
            seen.add(id(p))
            out.append(p)
            stack.extend(q for q, _ in p.inputs)
        return out

    # ------------------------------------------------------------------ matching
    def _node_ok(self, node: Node) -> bool:
        if self.op_types and not isinstance(node.op, self.op_types):
            return False
        if self.where is not None and not self.where(node):
            return False
        if self.dims is not None and not self.dims(node.dims):
            return False
        return not self.inputs or len(node.inputs) == len(self.inputs)

    def _match(self, graph: Graph, node_id: int, binding: dict) -> Iterator[dict]:
        bound = binding.get(id(self))
        if bound is not None:
            if bound == node_id:
                yield binding
            return
        node = graph.nodes.get(node_id)
        if node is None or not self._node_ok(node):
            return
        if node_id in binding.values():
            return  # two different pattern nodes may not bind one graph node
        binding = dict(binding)
        binding[id(self)] = node_id
        orders = [list(range(len(self.inputs)))]
        if self.commutative:
            orders.append([1, 0])
        for order in orders:
            yield from self._match_inputs(graph, node, order, 0, binding)

    def _match_inputs(self, graph, node, order, k, binding):
        if k == len(self.inputs):
            yield binding
            return
        pattern, view_ok = self.inputs[k]
        edge = node.inputs[order[k]]
        if view_ok is not None and not view_ok(edge.shape):
            return
        for b in pattern._match(graph, edge.src, binding):
            yield from self._match_inputs(graph, node, order, k + 1, b)

    def search(self, graph: Graph) -> Iterator["Match"]:
        """Every match rooted at any node, in topological order of the root (one per distinct binding)."""
        patterns = self.nodes()
        for node_id in list(graph.toposort()):
            seen = set()
            for binding in self._match(graph, node_id, {}):
                key = tuple(sorted(binding.items()))
                if key in seen:
                    continue
                seen.add(key)
                yield Match(graph, self, {p: binding[id(p)] for p in patterns if id(p) in binding})

    def matches(self, graph: Graph) -> list["Match"]:
        return list(self.search(graph))


@dataclass
class Match:
    """A binding of pattern nodes to graph node ids."""

    graph: Graph
    root_pattern: Pattern
    binding: dict

    def __getitem__(self, pattern: Pattern) -> int:
        return self.binding[pattern]

    @property
    def root(self) -> int:
        return self.binding[self.root_pattern]

    def node_ids(self) -> set[int]:
        return set(self.binding.values())

    def interior(self) -> set[int]:
        """Matched nodes that were matched *with* their inputs (not leaves like ``Pattern.any()``)."""
        return {n for p, n in self.binding.items() if p.inputs}

    def still_valid(self) -> bool:
        """True when every bound node still exists and the pattern still matches at the root."""
        if any(n not in self.graph.nodes for n in self.binding.values()):
            return False
        wanted = {id(p): n for p, n in self.binding.items()}
        return any(all(b.get(k) == v for k, v in wanted.items())
                   for b in self.root_pattern._match(self.graph, self.root, {}))

    def is_self_contained(self) -> bool:
        """True when no interior node other than the root is read from outside the match or protected
        (so a rewrite that deletes the interior loses nothing)."""
        inside = self.node_ids()
        consumers = self.graph.consumer_edges()
        for n in self.interior() - {self.root}:
            if n in self.graph.no_delete or n in self.graph.to_retrieve:
                return False
            if any(c not in inside for c, _ in consumers[n]):
                return False
        return True


def replace_matches(graph: Graph, pattern: Pattern, rewrite: Callable[[Match], int | None],
                    require_self_contained: bool = False) -> int:
    """Apply ``rewrite(match)`` to every valid match; ``rewrite`` returns the id of the node replacing the
    root (consumers and handles are then redirected) or ``None`` to skip. Returns the number applied."""
    applied = 0
    for m in list(pattern.search(graph)):
        if not m.still_valid() or (require_self_contained and not m.is_self_contained()):
            continue
        new = rewrite(m)
        if new is None:
            continue
        if new != m.root:
            graph.replace_uses(m.root, new)
        applied += 1
    return applied
