"""Deterministic, DAG-aware extraction from a serialized e-graph (``serialize().to_json()``).

egglog's own ``extract`` returns a term (a tree), which explodes on DAGs with shared nodes; here every e-class
gets one e-node, chosen bottom-up (Knuth's generalization of Dijkstra) by the cost ``op cost + sum of the costs
of the *distinct* child classes`` (a node used twice by one parent counts once). Ties are broken by a stable
key (original node first, then op rank, then literals, then child class ids), never by hash or dict order.
The extracted program's cost is the DAG cost: every chosen e-class reachable from the roots counted once.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field

from .encode import CHILD_SLOTS

# per-op cost (a CPU-ish model: transcendental > division/modulo > mul/add > views/copies > constants)
OP_COST = {"Leaf": 0.01, "Num": 0.01, "Break": 1.0, "Copy": 1.5, "Add": 2.0, "Mul": 2.0, "Less": 2.0, "Bit": 2.0,
           "Cast": 2.0, "BitCast": 1.0,
           "Sum": 3.0, "Max": 3.0, "MatMul": 3.0, "Gather": 3.0, "Scatter": 3.0, "Mod": 4.0, "Recip": 4.0, "Sqrt": 4.0, "Log2": 8.0, "Exp2": 8.0,
           "Sin": 8.0}
OP_RANK = {name: i for i, name in enumerate(sorted(OP_COST))}
_FACTS = ("NonNeg", "Contig", "NoMask", "Extent", "Dims", "ReducedKey", "GemmKey", "SplitKey")  # the relations read back (for explain's condition checks)
INF = float("inf")


@dataclass(frozen=True)
class ENode:
    """An e-node: constructor, arguments (child e-class ids at :data:`CHILD_SLOTS`, literals elsewhere)."""

    op: str
    args: tuple
    eclass: str
    # the child e-classes (the arguments at CHILD_SLOTS[op]), computed once: extraction walks them millions of
    # times on a large graph
    children: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "children", tuple(self.args[i] for i in CHILD_SLOTS[self.op]))

    @property
    def signature(self) -> tuple:
        return (self.op, self.args)


@dataclass
class EGraphData:
    """The Expr e-classes of a serialized e-graph, plus where each original node landed."""

    classes: dict[str, list[ENode]]
    node_class: dict[int, str]  # original node id -> e-class
    nonneg: set[str] = field(default_factory=set)
    contig: set[int] = field(default_factory=set)
    nomask: set[int] = field(default_factory=set)
    extent: dict[tuple[int, int], int] = field(default_factory=dict)  # (view key, axis) -> constant extent
    dims: dict[int, int] = field(default_factory=dict)  # view key -> interned dims id
    reduced: dict[tuple[int, int], int] = field(default_factory=dict)  # (view key, axis) -> reduced key
    gemm: set[tuple] = field(default_factory=set)  # (sum key, axis, x key, y key) of matrix-shaped products
    split: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # (key, axis) -> (split, outer key)

    @property
    def n_enodes(self) -> int:
        return sum(len(v) for v in self.classes.values())


def _literal(op: str, type_name: str):
    if type_name == "i64":
        return int(op)
    if type_name == "f64":
        return float(op)
    if type_name == "String":
        return json.loads(op)
    if type_name == "bool":
        return op == "true"
    return op


def parse_serialized(text: str) -> EGraphData:
    """Read egglog's serialized JSON into :class:`EGraphData` (Expr classes only; relations become sets)."""
    data = json.loads(text)
    nodes = data["nodes"]
    types = {cid: v.get("type", "") for cid, v in data.get("class_data", {}).items()}
    classes: dict[str, list[ENode]] = {}
    node_class: dict[int, str] = {}
    nonneg, contig, nomask, extent, dims, reduced, gemm, split = set(), set(), set(), {}, {}, {}, set(), {}
    for n in nodes.values():  # egglog writes them in a deterministic order; classes are sorted below
        op = n["op"]
        if op not in CHILD_SLOTS and op not in _FACTS:
            continue  # primitives (reached through their users) and other relations
        cls = n["eclass"]
        args = []
        for ch in n["children"]:
            c = nodes[ch]
            t = types.get(c["eclass"], "")
            args.append(c["eclass"] if t == "Expr" else _literal(c["op"], t))
        if op in _FACTS:
            if op == "NonNeg":
                nonneg.add(args[0])
            elif op == "Contig":
                contig.add(args[0])
            elif op == "NoMask":
                nomask.add(args[0])
            elif op == "Dims":
                dims[args[0]] = args[1]
            elif op == "ReducedKey":
                reduced[(args[0], args[1])] = args[2]
            elif op == "GemmKey":
                gemm.add(tuple(args))
            elif op == "SplitKey":
                split[(args[0], args[1])] = (args[2], args[3])
            else:
                extent[(args[0], args[1])] = args[2]
            continue
        if types.get(cls) != "Expr":
            continue
        if op == "Node":
            node_class[args[0]] = cls
            continue
        classes.setdefault(cls, []).append(ENode(op, tuple(args), cls))
    for cls in classes:
        classes[cls] = sorted(set(classes[cls]), key=_stable_key)
    return EGraphData(classes, node_class, nonneg, contig, nomask, extent, dims, reduced, gemm, split)


def from_frozen(egraph) -> EGraphData:
    """Read the Expr e-classes straight from ``egraph.freeze()`` (about 20x faster than the JSON route on large
    e-graphs). E-class ids are ``"c<k>"`` with ``k`` the order of first appearance, scanning the functions by
    name and their rows in egglog's (deterministic) order."""
    frozen = egraph.freeze()
    ids: dict = {}

    def cid(value) -> str:
        k = ids.get(value)
        if k is None:
            k = ids[value] = f"c{len(ids)}"
        return k

    conv = {"i64": egraph.value_to_i64, "f64": egraph.value_to_f64, "String": egraph.value_to_string,
            "bool": egraph.value_to_bool}
    classes: dict[str, list[ENode]] = {}
    node_class: dict[int, str] = {}
    nonneg, contig, nomask, extent, dims, reduced, gemm, split = set(), set(), set(), {}, {}, {}, set(), {}
    for name in sorted(frozen.functions):
        fn = frozen.functions[name]
        if name not in CHILD_SLOTS and name not in _FACTS:
            continue
        sorts = fn.input_sorts
        for row in fn.rows:
            if row.subsumed:
                continue
            args = tuple(cid(v) if s == "Expr" else conv[s](v) for s, v in zip(sorts, row.inputs))
            if name == "NonNeg":
                nonneg.add(args[0])
            elif name == "Contig":
                contig.add(args[0])
            elif name == "NoMask":
                nomask.add(args[0])
            elif name == "Extent":
                extent[(args[0], args[1])] = args[2]
            elif name == "Dims":
                dims[args[0]] = args[1]
            elif name == "ReducedKey":
                reduced[(args[0], args[1])] = args[2]
            elif name == "GemmKey":
                gemm.add(args)
            elif name == "SplitKey":
                split[(args[0], args[1])] = (args[2], args[3])
            elif name == "Node":
                node_class[args[0]] = cid(row.output)
            else:
                cls = cid(row.output)
                classes.setdefault(cls, []).append(ENode(name, args, cls))
    for cls in classes:
        classes[cls] = sorted(set(classes[cls]), key=_stable_key)
    return EGraphData(classes, node_class, nonneg, contig, nomask, extent, dims, reduced, gemm, split)


def _stable_key(e: ENode) -> tuple:
    return (OP_RANK.get(e.op, 99), repr(e.args))


@dataclass
class Extraction:
    """One e-node per e-class (``choice``) and the DAG cost of the part reachable from ``roots``."""

    choice: dict[str, ENode]
    roots: list[str]
    cost: float
    class_cost: dict[str, float]

    def reachable(self) -> list[str]:
        """E-classes reachable from the roots through the chosen e-nodes, children before parents."""
        return reachable(self.choice, self.roots)

    def signature(self) -> tuple:
        return tuple((c, self.choice[c].signature) for c in sorted(self.reachable()))


def reachable(choice: dict[str, ENode], roots: list[str]) -> list[str]:
    """Post-order (children first) of the chosen DAG from ``roots``; raises ValueError on a cycle."""
    order: list[str] = []
    state: dict[str, int] = {}
    for root in roots:
        if root in state:
            continue
        stack = [(root, 0)]
        while stack:
            cls, i = stack.pop()
            if i == 0:
                if state.get(cls) == 2:
                    continue
                state[cls] = 1
            kids = choice[cls].children
            if i < len(kids):
                stack.append((cls, i + 1))
                k = kids[i]
                s = state.get(k)
                if s == 1:
                    raise ValueError(f"cycle through e-class {k}")
                if s is None:
                    stack.append((k, 0))
            else:
                state[cls] = 2
                order.append(cls)
    return order


def _cost(e: ENode, class_cost: dict[str, float], op_cost) -> float:
    total = op_cost(e)
    for c in sorted(set(e.children)):
        total += class_cost[c]
    return total


def default_cost(e: ENode) -> float:
    return OP_COST.get(e.op, 10.0)


def extract(eg: EGraphData, roots: list[str], op_cost=default_cost, prefer: set | None = None) -> Extraction:
    """Pick one e-node per e-class by cost (see the module docstring); ``prefer`` holds signatures of the
    original nodes, which win ties."""
    prefer = prefer or set()
    enodes = [e for cls in sorted(eg.classes) for e in eg.classes[cls]]
    parents: dict[str, list[int]] = {}
    remaining = []
    heap = []
    for i, e in enumerate(enodes):
        kids = sorted(set(e.children))
        remaining.append(len(kids))
        for k in kids:
            parents.setdefault(k, []).append(i)
        if not kids:
            heapq.heappush(heap, (op_cost(e), i))
    class_cost: dict[str, float] = {}
    finalized: dict[str, int] = {}  # e-class -> the order in which its cost became final
    while heap:
        c, i = heapq.heappop(heap)
        cls = enodes[i].eclass
        if cls in class_cost:
            continue
        class_cost[cls] = c
        finalized[cls] = len(finalized)
        for p in parents.get(cls, ()):
            remaining[p] -= 1
            if remaining[p] == 0:
                heapq.heappush(heap, (_cost(enodes[p], class_cost, op_cost), p))
    choice: dict[str, ENode] = {}
    for cls in sorted(class_cost):
        best, best_key = None, None
        rank = finalized[cls]
        for e in eg.classes[cls]:
            # only e-nodes whose children were final before this e-class: every choice then points to e-classes
            # finalized earlier, so the chosen program is acyclic (an e-node over a later e-class can reach
            # this one again through that e-class's own choice)
            if not all(k in class_cost and finalized[k] < rank for k in e.children):
                continue
            key = (_cost(e, class_cost, op_cost), 0 if e.signature in prefer else 1) + _stable_key(e)
            if best_key is None or key < best_key:
                best, best_key = e, key
        choice[cls] = best
    missing = [r for r in roots if r not in choice]
    if missing:
        raise ValueError(f"no finite-cost term for e-classes {missing}")
    ext = Extraction(choice, list(roots), 0.0, class_cost)
    ext.cost = dag_cost(ext, op_cost)
    if prefer:
        _keep_originals_when_cheaper(ext, eg, op_cost, prefer)
    return ext


def _keep_originals_when_cheaper(ext: Extraction, eg: EGraphData, op_cost, prefer: set) -> None:
    """Undo rewrites that only looked cheaper. The bottom-up choice costs each e-class as a tree, so a rewrite
    that stops reading a value another consumer still needs (``max(s * c) -> max(s) * c`` in a softmax, whose
    ``s * c`` the exponent reads anyway) seems to save that value's cost. For each e-class whose choice is not
    the original node's own e-node, the original is put back when that lowers the DAG cost of the whole program
    (acyclic choices only), in a fixed order.

    Each trial is evaluated incrementally: reference counts over the chosen DAG say which e-classes a switch makes
    reachable or unreachable, so a trial costs the part of the program it changes, not the whole program (a
    20k-node e-graph of an unrolled LSTM: 1.7 s -> well under 0.1 s)."""
    choice = dict(ext.choice)
    count: dict[str, int] = {}
    for r in ext.roots:
        count[r] = count.get(r, 0) + 1
    order = reachable(choice, ext.roots)
    for c in order:
        for k in _distinct(choice[c]):
            count[k] = count.get(k, 0) + 1
    pos = {c: i for i, c in enumerate(order)}  # post-order: every chosen edge goes to a smaller position

    def add(c: str) -> float:  # one more reference to c; returns the cost of what becomes reachable
        delta, stack = 0.0, [c]
        while stack:
            x = stack.pop()
            count[x] = count.get(x, 0) + 1
            if count[x] == 1:
                delta += op_cost(choice[x])
                stack.extend(reversed(_distinct(choice[x])))
        return delta

    def remove(c: str) -> float:  # one reference less; returns minus the cost of what becomes unreachable
        delta, stack = 0.0, [c]
        while stack:
            x = stack.pop()
            count[x] -= 1
            if count[x] == 0:
                delta -= op_cost(choice[x])
                stack.extend(reversed(_distinct(choice[x])))
        return delta

    def closes_cycle(cls: str, e: ENode) -> bool:  # would choosing e for cls make cls reach itself?
        limit = pos.get(cls)
        seen, stack = set(), list(e.children)
        while stack:
            x = stack.pop()
            if x == cls:
                return True
            if x in seen or (limit is not None and x in pos and pos[x] < limit):
                continue  # (a class below cls in the current order cannot reach it)
            seen.add(x)
            stack.extend(choice[x].children)
        return False

    def switch(cls: str, old: ENode, new: ENode) -> float:
        delta = op_cost(new) - op_cost(old)
        choice[cls] = new
        for k in _distinct(new):
            delta += add(k)
        for k in _distinct(old):
            delta += remove(k)
        return delta

    cost = ext.cost
    for cls in sorted(order):
        chosen = choice.get(cls)
        if chosen is None or chosen.signature in prefer or count.get(cls, 0) == 0:
            continue  # (an e-class no longer reachable costs nothing either way)
        for e in eg.classes[cls]:
            if e.signature not in prefer or not all(k in ext.class_cost for k in e.children):
                continue
            if closes_cycle(cls, e):  # the original form would close a cycle through a rewritten descendant
                continue
            delta = switch(cls, chosen, e)
            if cost + delta < cost - 1e-9 * max(1.0, abs(cost)):
                cost += delta
                pos = {c: i for i, c in enumerate(reachable(choice, ext.roots))}
            else:
                switch(cls, e, chosen)
            break
    if choice != ext.choice:
        ext.choice = choice
        ext.cost = dag_cost(ext, op_cost)


def _distinct(e: ENode) -> list[str]:
    """``e``'s child e-classes, each once, in a fixed order."""
    return sorted(set(e.children))


def dag_cost(ext: Extraction, op_cost=default_cost) -> float:
    return sum(op_cost(ext.choice[c]) for c in sorted(ext.reachable()))


_COMMUTATIVE = {"Add": (1, 3), "Mul": (1, 3)}  # (child slot, child slot): operand pairs whose order is free


def _shape_of(e: ENode, key_of) -> tuple:
    """``e`` as the program the rebuild makes of it, children replaced by ``key_of(child class)``: commutative
    operands in a fixed order, and a ``MatMul`` as the sum of the product it names (the rebuild makes exactly
    that, and the code generator finds the GEMM in either), so two e-nodes with equal shapes give one program."""
    args = list(e.args)
    for i in CHILD_SLOTS[e.op]:
        args[i] = key_of(args[i])
    if e.op in _COMMUTATIVE:
        a, b = _COMMUTATIVE[e.op]
        pairs = sorted([(args[a], args[a + 1]), (args[b], args[b + 1])])
        return (e.op, args[0], *pairs)
    if e.op == "MatMul":  # (MatMul dtype axis x vx y vy vs) == (Sum dtype axis (Mul dtype x vx y vy) vs)
        pairs = sorted([(args[2], args[3]), (args[4], args[5])])
        return ("Sum", args[0], args[1], _digest(("Mul", args[0], *pairs)), args[6])
    return (e.op, *args)


def _digest(shape: tuple) -> str:
    return hashlib.blake2b(repr(shape).encode(), digest_size=12).hexdigest()


class ProgramKeys:
    """Structural keys of the programs an extraction's choices make, independent of e-class ids: a digest per
    e-class of its chosen e-node's shape (:func:`_shape_of`) over its children's digests (a Merkle hash, so a
    DAG costs its size, not its tree size). Equal keys: equal rebuilt graphs up to commutative operand order."""

    def __init__(self, choice: dict[str, ENode]):
        self.choice = choice
        self.memo: dict[str, str] = {}

    def digest(self, e: ENode) -> str:
        """The key ``e`` would have (its children keyed by this extraction's choices)."""
        return _digest(_shape_of(e, self))

    def __call__(self, cls: str) -> str:
        key = self.memo.get(cls)
        if key is None:
            for c in reachable(self.choice, [cls]):  # children first: no deep recursion
                if c not in self.memo:
                    self.memo[c] = self.digest(self.choice[c])
            key = self.memo[cls]
        return key


def program_key(ext: Extraction) -> str:
    """A stable digest of the program ``ext`` rebuilds (see :class:`ProgramKeys`; raises ValueError when its
    choices form a cycle): candidates with equal keys are one program, and the tuning cache names a measured
    winner by it."""
    keys = ProgramKeys(ext.choice)
    return hashlib.sha256(" ".join(keys(r) for r in ext.roots).encode()).hexdigest()[:20]


def extract_k(eg: EGraphData, roots: list[str], k: int, op_cost=default_cost, prefer: set | None = None,
              protect=lambda cls, eg: False, offered: dict | None = None) -> list[Extraction]:
    """Up to ``k`` extractions that rebuild into distinct programs (:func:`program_key`): the best first, then
    the best with every alternative *of one kind* switched (the same rewrite applied wherever it matched, e.g.
    ``max(s * c) -> max(s) * c`` in every attention layer; kinds with more than one member, smallest summed
    cost gap first), then the best with one e-class switched (smallest gap first); before all of those, every
    alternative a front end offered (``offered``: root e-node signature -> kind, see
    :mod:`~luminal.compiler.egraph.alternatives`) switched, one kind at a time. An alternative that
    rebuilds into the same program as the chosen e-node (commutative operands swapped, a ``MatMul`` and the
    sum of its product) is not one. Switches that close a cycle are skipped. ``protect(cls, eg)`` marks
    e-classes that must keep their best choice."""
    best = extract(eg, roots, op_cost, prefer)
    out = [best]
    if k <= 1:
        return out
    keys = ProgramKeys(best.choice)
    seen = {program_key(best)}
    alts = []
    for cls in sorted(best.reachable()):
        if protect(cls, eg):
            continue
        chosen = best.choice[cls]
        same = keys(cls)
        for e in eg.classes[cls]:
            if e == chosen or not all(c in best.class_cost for c in e.children):
                continue
            if keys.digest(e) == same:
                continue  # the same program
            gap = _cost(e, best.class_cost, op_cost) - best.class_cost[cls]
            kind = (chosen.op, e.op, tuple(best.choice[c].op for c in e.children))
            if offered and e.signature in offered:
                kind = ("offered", offered[e.signature])
            alts.append((gap, cls, _stable_key(e), e, kind))
    alts.sort(key=lambda t: (t[0], t[1], t[2]))
    groups: dict[tuple, dict[str, tuple]] = {}
    for a in alts:
        groups.setdefault(a[4], {}).setdefault(a[1], a)  # one alternative per class: its smallest gap
    first = [list(groups[kind].values()) for kind in sorted(k for k in groups if k[0] == "offered")]
    proposals = sorted((sum(a[0] for a in g.values()), kind, list(g.values()))
                       for kind, g in groups.items() if len(g) > 1 and kind[0] != "offered")
    proposals = first + [p[2] for p in proposals] + [[a] for a in alts]
    for switched in proposals:
        if len(out) >= k:
            break
        choice = dict(best.choice)
        for a in switched:
            choice[a[1]] = a[3]
        cand = Extraction(choice, list(roots), 0.0, best.class_cost)
        try:
            sig = program_key(cand)
        except ValueError:
            continue  # the switch closed a cycle
        if sig in seen:
            continue
        seen.add(sig)
        cand.cost = dag_cost(cand, op_cost)
        out.append(cand)
    return out
