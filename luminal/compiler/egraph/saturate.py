"""Bounded equality saturation over the primitive graph, rebuild of the graph from an extraction, and the pass.

Pipeline (:class:`EqualitySaturation`): encode the graph as egglog text (``encode.py``), load it with the rule
files through ``egglog.bindings`` (the text interface; the high-level Python front end recurses on DAGs),
run the rulesets one iteration at a time under bounds (iterations, e-nodes, seconds), serialize to JSON,
extract with our own DAG-aware extractor (``extract.py``) and rebuild the graph in place.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ... import ops
from ...dtype import DType
from ...graph import Graph
from ..base import Pass, debug_level
from ..rewrite import scalar_view
from . import memo, sexpr
from .explain import annotate, explain  # noqa: F401 (explain: re-exported)
from .alternatives import build_if_measured, drop_offered, live_nodes, offered, penalized, root_signatures
from .cost import SizeCost
from .encode import CHILD_SLOTS, Encoding, encode, loader_program, write_rows
from .extract import (EGraphData, ENode, Extraction, default_cost, extract, extract_k, from_frozen,
                      parse_serialized)

# the rulesets a default EqualitySaturation runs, in this order each iteration (``analysis`` always runs first)
DEFAULT_RULESETS = ("algebra", "approx", "reductions", "layout", "gemm")
# the report fields a memoized run restores (besides each change's rules)
_MEMO_FIELDS = ("iterations", "stop_reason", "enodes", "eclasses", "cost_before", "cost_after")
_RELATIONS = {"Contig", "NoMask", "Extent", "Dims", "ReducedKey", "GemmKey", "IsFloat", "IntLike", "NonNeg"}


@dataclass
class SaturationReport:
    """What one saturation did (also printed at ``LUMINAL_DEBUG>=1``)."""

    iterations: list[dict] = field(default_factory=list)  # {"enodes", "matches": {rule: n}, "seconds"}
    stop_reason: str = ""
    load_seconds: float = 0.0
    saturation_seconds: float = 0.0
    serialize_seconds: float = 0.0
    extraction_seconds: float = 0.0
    rebuild_seconds: float = 0.0
    enodes: int = 0
    eclasses: int = 0
    cost_before: float = 0.0
    cost_after: float = 0.0
    changes: list[dict] = field(default_factory=list)
    memoized: bool = False  # the result came from the on-disk memo (:mod:`.memo`), not from egglog
    # the measured choice among candidate programs (compile(search=...) on a compiled device): "" (none), or
    # "measured" / "cached" (the tuning cache's winner); program_search: the measurement
    # (:class:`luminal.runtime.program_search.ProgramSearchResult`) when one ran
    program_choice: str = ""
    program_search: Any = None

    @property
    def saturated(self) -> bool:
        return self.stop_reason == "saturated"

    @property
    def rules_fired(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for it in self.iterations:
            for name, n in it["matches"].items():
                total[name] = total.get(name, 0) + n
        return {k: total[k] for k in sorted(total) if total[k]}


def _bindings():
    """egglog's Rust extension module ``egglog.bindings`` (the text interface), loaded on first use.

    ``import egglog.bindings`` first runs the ``egglog`` package's ``__init__``, whose high-level front end
    (and its import of ``black``) costs ~0.35 s per process; the extension itself loads in ~0.02 s. So the
    extension file is loaded directly under its own name, falling back to the normal import."""
    import sys

    mod = sys.modules.get("egglog.bindings")
    if mod is not None:
        return mod
    try:
        import importlib.util
        import os

        spec = importlib.util.find_spec("egglog")
        folder = os.path.dirname(spec.origin)
        name = next(f for f in sorted(os.listdir(folder)) if f.startswith("bindings.") and f.endswith((".so", ".pyd")))
        ext = importlib.util.spec_from_file_location("egglog.bindings", os.path.join(folder, name))
        mod = importlib.util.module_from_spec(ext)
        ext.loader.exec_module(mod)
        sys.modules["egglog.bindings"] = mod
        return mod
    except Exception:  # an unusual layout: the documented import path
        from egglog import bindings

        return bindings


class Saturation:
    """One graph's e-graph: ``load()``, ``run(...)``, ``data()`` (the serialized e-graph)."""

    def __init__(self, graph: Graph, rulesets: Sequence[str] = DEFAULT_RULESETS, rule_paths=None, split=False):
        self.graph, self.split = graph, split  # split: offer two-stage reductions (encode(split=True))
        self.rulesets = tuple(rulesets)
        self.prelude, rules = sexpr.load_rules(rule_paths)
        known = {str(f[1]) for f in self.prelude if isinstance(f, list) and f and f[0] == "ruleset"}
        unknown = [r for r in self.rulesets if r not in known]
        if unknown:
            raise ValueError(f"unknown rulesets {unknown}; the rule files declare {sorted(known)}")
        self.rules = [r for r in rules if r.ruleset in self.rulesets or r.ruleset == "analysis"]
        self._egraph = None
        self._program = None
        self.encoding: Encoding | None = None
        self.report = SaturationReport()

    def program(self) -> tuple[str, dict[str, list[str]]]:
        """Encode the graph (once); returns the egglog program text (schema, rules, small facts) and the rows
        the loader reads from files. Together with the view table they are the saturation's whole input."""
        if self._program is None:
            start = time.perf_counter()
            self.encoding = enc = encode(self.graph, split=self.split)
            text = "\n".join(sexpr.to_text(f) for f in self.prelude)
            text += "\n" + "\n".join(r.egglog_text() for r in self.rules)
            text += "\n" + "\n".join(enc.lines)
            self._program = (text, enc.rows())
            self.report.load_seconds += time.perf_counter() - start
        return self._program

    @property
    def egraph(self):
        """egglog's e-graph (created on first use: a memoized run never needs one)."""
        if self._egraph is None:
            self._egraph = _bindings().EGraph()
        return self._egraph

    def load(self) -> Encoding:
        text, rows = self.program()
        start = time.perf_counter()
        enc = self.encoding
        datatype = next(f for f in self.prelude if isinstance(f, list) and f[:2] == ["datatype", "Expr"])
        with tempfile.TemporaryDirectory(prefix="luminal_egraph_") as folder:
            write_rows(rows, folder)
            text += "\n" + loader_program(datatype, rows, folder)
            self.egraph.run_program(*self.egraph.parse_program(text))
        self.report.load_seconds += time.perf_counter() - start
        return enc

    def size(self) -> int:
        out = self.egraph.run_program(*self.egraph.parse_program("(print-size)"))
        sizes = out[-1].sizes
        return sum(n for name, n in sizes if name not in _RELATIONS)

    def run(self, max_iterations: int = 16, max_enodes: int = 200_000, max_seconds: float = 5.0) -> SaturationReport:
        """Run ``analysis`` to a fixed point, then one iteration of each ruleset, repeatedly, until nothing
        changes or a bound is hit. The e-node bound is checked between iterations; the time bound after each
        ruleset's run as well (egglog cannot stop inside one run, so a single ruleset's iteration may overshoot
        it), and an iteration cut short by it is reported with the rulesets it ran."""
        rep = self.report
        start = time.perf_counter()
        names = [r for r in self.rulesets if r != "analysis"] or ["analysis"]
        steps = [(name, self.egraph.parse_program(
            f"(run-schedule {'(saturate (run analysis)) ' if j == 0 else ''}(run {name}))"))
            for j, name in enumerate(names)]
        rep.stop_reason = "iterations"
        for _ in range(max_iterations):
            t0 = time.perf_counter()
            matches: dict[str, int] = {}
            updated = False
            ran = []
            for name, cmds in steps:
                for o in self.egraph.run_program(*cmds):
                    report = getattr(o, "report", None)
                    if report is None:
                        continue
                    updated |= report.updated
                    for rule, n in report.num_matches_per_rule.items():
                        matches[rule] = matches.get(rule, 0) + n
                ran.append(name)
                if len(ran) < len(steps) and time.perf_counter() - start > max_seconds:
                    break
            size = self.size()
            entry = {"enodes": size, "matches": {k: matches[k] for k in sorted(matches)},
                     "seconds": time.perf_counter() - t0}
            if len(ran) < len(steps):
                entry["rulesets"] = ran  # (cut short by the time bound)
            rep.iterations.append(entry)
            if debug_level() >= 1:
                fired = ", ".join(f"{k}={v}" for k, v in sorted(matches.items()) if v)
                print(f"[egraph] iteration {len(rep.iterations)}: {size} e-nodes, "
                      f"{(time.perf_counter() - t0) * 1e3:.2f} ms; fired: {fired or 'none'}"
                      + (f" (time limit after {', '.join(ran)})" if len(ran) < len(steps) else ""))
            if not updated and len(ran) == len(steps):
                rep.stop_reason = "saturated"
                break
            if size > max_enodes:
                rep.stop_reason = f"e-node limit ({size} > {max_enodes})"
                break
            if time.perf_counter() - start > max_seconds:
                rep.stop_reason = f"time limit ({max_seconds} s)"
                break
        rep.saturation_seconds = time.perf_counter() - start
        return rep

    def data(self, via: str = "freeze") -> EGraphData:
        """The e-graph's Expr e-classes, read through ``freeze()`` (default, fast) or ``serialize().to_json()``
        (``via="json"``)."""
        start = time.perf_counter()
        if via == "json":
            ser = self.egraph.serialize([], max_functions=None, max_calls_per_function=None)
            eg = parse_serialized(ser.to_json())
        elif via == "freeze":
            eg = from_frozen(self.egraph)
        else:
            raise ValueError(f"via must be 'freeze' or 'json', not {via!r}")
        self.report.serialize_seconds = time.perf_counter() - start
        self.report.enodes = eg.n_enodes
        self.report.eclasses = len(eg.classes)
        return eg


# ---------------------------------------------------------------------------------------------- rebuild
_UNARY_OPS = {"Log2": ops.Log2, "Exp2": ops.Exp2, "Sin": ops.Sin, "Sqrt": ops.Sqrt, "Recip": ops.Recip,
              "Copy": ops.Contiguous, "Break": ops.GraphBreak}
_BINARY_OPS = {"Add": ops.Add, "Mul": ops.Mul, "Mod": ops.Mod, "Less": ops.LessThan}


def _constant_value(value: float, dtype: DType):
    if dtype == DType.bool:
        return bool(value)
    if dtype.is_int:
        return int(value)
    return float(value)


def roots_of(graph: Graph) -> list[int]:
    """Nodes whose values must survive: retrieved, kept, carried, inputs, and nodes nothing reads."""
    used = {e.src for n in graph.nodes.values() for e in n.inputs}
    roots = set(graph.no_delete) | set(graph.to_retrieve) | {o for o, _ in graph.carries}
    roots |= {i for i, n in graph.nodes.items() if i not in used or isinstance(n.op, ops.Input)}
    return sorted(r for r in roots if r in graph.nodes)


def _root_nodes(graph: Graph, enc: Encoding) -> set[int]:
    """The nodes extraction must keep: :func:`roots_of`, plus the operands of every op the schema does not model
    (an opaque ``Leaf`` still reads them)."""
    root_nodes = set(roots_of(graph))
    for nid, term in enc.terms.items():
        if term[0] == "Leaf":
            root_nodes.update(e.src for e in graph.nodes[nid].inputs)
    return root_nodes - {b for _, b, _ in offered(graph)}  # (an offered alternative is read by nothing)


def node_signature(term: tuple, eg: EGraphData) -> tuple:
    """The e-node signature of an encoded node (children as e-classes)."""
    name = term[0]
    args = list(term[1:])
    for i in CHILD_SLOTS[name]:
        args[i] = eg.node_class.get(args[i])
    return (name, tuple(args))


def original_signatures(enc: Encoding, eg: EGraphData) -> set:
    """The e-node signature of every original node, to prefer them on ties."""
    return {node_signature(t, eg) for t in enc.terms.values()}


def rebuild(graph: Graph, enc: Encoding, eg: EGraphData, ext: Extraction) -> list[dict]:
    """Rewrite ``graph`` in place to the extracted program; returns the list of replaced nodes."""
    by_class: dict[str, list[int]] = {}
    for nid in sorted(eg.node_class):
        if nid in graph.nodes:
            by_class.setdefault(eg.node_class[nid], []).append(nid)
    built: dict[str, int] = {}
    for cls in ext.reachable():
        e = ext.choice[cls]
        if e.op == "Leaf":
            built[cls] = e.args[0]
            continue
        dtype = DType(e.args[0])
        if e.op == "Num":
            spec = (ops.Constant(_constant_value(e.args[1], dtype), dtype), [], (), dtype)
        else:
            inputs = []
            for slot in CHILD_SLOTS[e.op]:
                child = e.args[slot]
                view = enc.views[e.args[slot + 1]]
                if ext.choice[child].op == "Num":
                    view = scalar_view(view)
                inputs.append((built[child], view))
            v0 = inputs[0][1]
            if e.op in _UNARY_OPS:
                op, dims = _UNARY_OPS[e.op](), v0.dims
            elif e.op in _BINARY_OPS:
                op, dims = _BINARY_OPS[e.op](), v0.dims
                if e.op == "Less":
                    dtype = DType.bool
            elif e.op in ("Sum", "Max"):
                op = (ops.SumReduce if e.op == "Sum" else ops.MaxReduce)(e.args[1])
                dims = v0.dims[:e.args[1]] + v0.dims[e.args[1] + 1:]
            elif e.op == "Bit":
                op, dims = ops.Bitwise(e.args[1]), v0.dims
            elif e.op == "Cast":
                op, dims = ops.Cast(dtype), v0.dims
            elif e.op == "BitCast":
                op, dims = ops.BitCast(dtype), v0.dims
            elif e.op == "Gather":
                op, dims = ops.Gather(e.args[1]), inputs[1][1].dims
            elif e.op == "MatMul":  # the product node (the original one when it reads the same), then its sum
                products = [graph.nodes[n].inputs[0].src for n in by_class.get(cls, ())
                            if isinstance(graph.nodes[n].op, ops.SumReduce)]
                mul = _node_for(graph, (ops.Mul(), inputs, tuple(v0.dims), dtype), products)
                vs = enc.views[e.args[6]]
                op, inputs = ops.SumReduce(e.args[1]), [(mul, vs)]
                dims = vs.dims[:e.args[1]] + vs.dims[e.args[1] + 1:]
            elif e.op == "Scatter":  # (the node it names is still in the graph: the rebuild deletes last)
                op, dims = graph.nodes[e.args[1]].op, graph.nodes[e.args[1]].dims
            else:  # pragma: no cover - the schema and this table go together
                raise ValueError(f"cannot rebuild e-node {e.op}")
            spec = (op, inputs, tuple(dims), dtype)
        built[cls] = _node_for(graph, spec, by_class.get(cls, ()))
    # point consumers of replaced nodes at the built ones
    replace: dict[int, tuple[int, Any]] = {}
    for cls, nids in by_class.items():
        if cls not in built:
            continue
        new = built[cls]
        fn = scalar_view if ext.choice[cls].op == "Num" else None
        for nid in nids:
            if nid != new:
                replace[nid] = (new, fn)
    changes = [{"node": old, "label": graph.nodes[old].label, "op": str(graph.nodes[old].op), "new": new,
                "new_op": str(graph.nodes[new].op), "eclass": eg.node_class[old],
                "same_enode": node_signature(enc.terms[old], eg) == ext.choice[eg.node_class[old]].signature}
               for old, (new, _) in sorted(replace.items())]
    _replace_all(graph, replace)
    _remove_dead(graph, set(built.values()))
    return changes


def _node_for(graph: Graph, spec, candidates) -> int:
    op, inputs, dims, dtype = spec
    for nid in candidates:  # reuse an original node that already computes exactly this
        n = graph.nodes[nid]
        if n.op == op and n.dtype == dtype and tuple(n.dims) == dims and len(n.inputs) == len(inputs) and all(
                e.src == s and e.output == 0 and e.shape == v for e, (s, v) in zip(n.inputs, inputs)):
            return nid
    name = graph.nodes[candidates[0]].name if candidates else ""
    return graph.add_op(op, inputs, dims, dtype, name)


def _replace_all(graph: Graph, replace: dict[int, tuple[int, Any]]) -> None:
    """``Graph.replace_uses`` for many nodes at once (one sweep over the edges)."""
    if not replace:
        return
    for n in list(graph.nodes.values()):
        if n.id in replace:
            continue
        for k, e in enumerate(n.inputs):
            if e.src in replace:
                new, fn = replace[e.src]
                graph.set_input(n.id, k, new, e.shape if fn is None else fn(e.shape), e.output)
    for marks in (graph.no_delete, graph.to_retrieve):
        for old in [m for m in marks if m in replace]:
            marks.discard(old)
            marks.add(replace[old][0])
    sched = set()
    for a, b in graph.schedule:
        a, b = replace.get(a, (a,))[0], replace.get(b, (b,))[0]
        if a != b:
            sched.add((a, b))
    graph.schedule = sched
    for old, (new, fn) in replace.items():
        graph.redirects[old] = (new, fn)
    graph._invalidate()


def _remove_dead(graph: Graph, keep: set[int]) -> None:
    """Delete every node not reachable (through data edges) from a built, protected or input node."""
    roots = set(keep) | graph.no_delete | graph.to_retrieve | {o for o, _ in graph.carries}
    roots |= {i for i, n in graph.nodes.items() if isinstance(n.op, ops.Input)}
    live = live_nodes(graph, [i for i in roots if i in graph.nodes])
    dead = [i for i in graph.nodes if i not in live]
    if not dead:
        return
    dead_set = set(dead)
    for i in dead:
        del graph.nodes[i]
        graph.deferred.pop(i, None)
    for key in [k for k in graph.tensors if k[0] in dead_set]:
        del graph.tensors[key]
    graph.schedule = {(a, b) for a, b in graph.schedule if a not in dead_set and b not in dead_set}
    graph._invalidate()


# ---------------------------------------------------------------------------------------------- the pass
class EqualitySaturation(Pass):
    """Equality saturation with the rule files, bounded, then deterministic DAG-aware extraction.

    ``rulesets``: which rulesets to run (``analysis`` always runs; default :data:`DEFAULT_RULESETS`); ``approx``
    holds the rewrites that change results by a few ulps (as the former ``ArithmeticElimination`` pass did) — drop
    it for bit-exact results.
    Bounds: ``max_iterations``, ``max_enodes`` (checked between iterations) and ``max_seconds`` (also checked
    after each ruleset's run within an iteration).
    Cost: ``cost_backend`` (``"cpu"``, the default, ``"gpu"`` or ``"reference"``) picks the size-aware model of
    :mod:`~luminal.compiler.egraph.cost` (work and memory traffic per element times the element counts of each
    e-node's views); ``op_cost=f`` replaces it with any ``f(ENode) -> float`` (e.g. the per-op constants of
    :func:`~luminal.compiler.egraph.extract.default_cost`).
    ``readback``: how the e-graph comes back, ``"freeze"`` (egglog's frozen tables, fast) or ``"json"``
    (``serialize().to_json()``); both give the same e-classes.
    After ``compile``, :attr:`report` holds a :class:`SaturationReport`; :func:`explain` prints the changes.
    """

    def __init__(self, rulesets: Sequence[str] = DEFAULT_RULESETS, max_iterations: int = 16,
                 max_enodes: int = 200_000, max_seconds: float = 5.0, op_cost=None, rule_paths=None,
                 readback: str = "freeze", cost_backend: str = "cpu"):
        self.readback = readback
        self.rulesets = tuple(rulesets)
        self.max_iterations = max_iterations
        self.max_enodes = max_enodes
        self.max_seconds = max_seconds
        self.op_cost = op_cost
        self.cost_backend = cost_backend
        # (an unknown backend fails here, not after saturating); one that prices parallelism gets splits offered
        self._split = SizeCost([], cost_backend).costs.parallel_rows > 0
        self._cost = op_cost or default_cost
        self.rule_paths = rule_paths
        self.report: SaturationReport | None = None

    def _memo_key(self, graph: Graph, force: bool = False) -> tuple[str | None, Saturation | None]:
        """The memo key of saturating ``graph`` with this pass's settings (None: not memoized, unless ``force``:
        the key also names the graph's measured program in the tuning cache) and the session that encoded the
        graph for it (the run goes on with it)."""
        if not force and (self.op_cost is not None or not memo.enabled()):
            return None, None
        sat = Saturation(graph, self.rulesets, self.rule_paths, self._split)
        text, rows = sat.program()
        settings = (self.rulesets, self.max_iterations, self.max_enodes, self.cost_backend, self.readback)
        return memo.key(text, rows, sat.encoding.views, _root_nodes(graph, sat.encoding), settings), sat

    def saturate(self, graph: Graph, sat: Saturation | None = None) -> tuple[Saturation, EGraphData, list[str]]:
        """Load and saturate ``graph`` (in ``sat``, a fresh session of it, when given); returns the session, the
        serialized e-graph and the root e-classes."""
        sat = sat or Saturation(graph, self.rulesets, self.rule_paths, self._split)
        enc = sat.load()
        sat.run(self.max_iterations, self.max_enodes, self.max_seconds)
        eg = sat.data(self.readback)
        roots = _root_classes(graph, enc, eg)
        self._cost = self._cost_model(enc, eg)
        # the original program's cost, from the encoding (offered alternatives aside: nothing reads them yet)
        live = live_nodes(graph, _root_nodes(graph, enc)) if enc.offered else enc.terms
        sat.report.cost_before = sum(self._cost(ENode(t[0], tuple(t[1:]), "")) for n, t in enc.terms.items()
                                     if n in live)
        return sat, eg, roots

    def _cost_model(self, enc: Encoding, eg: EGraphData):
        return penalized(self.op_cost or SizeCost(enc.views, self.cost_backend).bind(eg), root_signatures(enc, eg))

    def ranked(self, graph: Graph, sat: Saturation, eg: EGraphData, k: int) -> list[Extraction]:
        """Up to ``k`` distinct programs of ``graph``'s saturated e-graph ``eg`` (``sat``: its session), the
        cost model's choice first (:func:`~luminal.compiler.egraph.extract.extract_k`)."""
        return extract_k(eg, _root_classes(graph, sat.encoding, eg), k, self._cost_model(sat.encoding, eg),
                         original_signatures(sat.encoding, eg), protect=_constant_class,
                         offered=root_signatures(sat.encoding, eg))

    def candidates(self, graph: Graph, k: int) -> list[Extraction]:
        """Up to ``k`` distinct extracted programs, the cost model's choice first (:meth:`ranked`; the graph is
        not changed; :meth:`apply` one to a copy of it)."""
        sat, eg, _ = self.saturate(graph)
        self._state = (sat.encoding, eg)
        return self.ranked(graph, sat, eg, k)

    def best(self, graph: Graph) -> Extraction:
        """The extraction :meth:`run` would apply (the graph is not changed)."""
        sat, eg, roots = self.saturate(graph)
        self._state = (sat.encoding, eg)
        return extract(eg, roots, self._cost, original_signatures(sat.encoding, eg))

    def apply(self, graph: Graph, candidate: Extraction, remap: Any = ()) -> list[dict]:
        """Rebuild ``graph`` (the graph given to the last :meth:`candidates`/:meth:`best`, or a deep copy of
        it) as ``candidate``; returns the replaced nodes and points the handles in ``remap`` at the new ones."""
        enc, eg = self._state
        changes = rebuild(graph, enc, eg, candidate)
        graph.follow_redirects(remap)
        return changes

    def run(self, graph: Graph) -> SaturationReport:
        if not graph.nodes:
            self.report = SaturationReport(stop_reason="saturated")
            return self.report
        from .choose import measured_choice, search_options  # (it imports this module)

        measuring = search_options(graph)
        alt_key, probe = build_if_measured(self, graph, measuring)
        memoize = self.op_cost is None and memo.enabled()
        key, sat = probe or (self._memo_key(graph, force=True) if memoize or measuring is not None else (None, None))
        hit = memo.load(key) if memoize else None
        if hit is not None:
            memo.MemoStats.hits += 1
            eg, ext, saved = hit
            rep = sat.report
            rep.memoized = True
            for name in _MEMO_FIELDS:
                setattr(rep, name, saved[name])
            if measuring is not None:
                ext = measured_choice(self, graph, sat, eg, ext, key, *measuring, alt_key=alt_key)
            t0 = time.perf_counter()
            rep.changes = rebuild(graph, sat.encoding, eg, ext)
            rep.rebuild_seconds = time.perf_counter() - t0
            notes = saved["notes"]
            for ch in rep.changes:
                ch["rules"], ch["derivation"] = notes.get(ch["node"], ([], False))
        else:
            sat, eg, roots = self.saturate(graph, sat)
            rep = sat.report
            t0 = time.perf_counter()
            ext = extract(eg, roots, self._cost, original_signatures(sat.encoding, eg))
            rep.extraction_seconds = time.perf_counter() - t0
            rep.cost_after = ext.cost
            chosen = ext
            if measuring is not None:
                chosen = measured_choice(self, graph, sat, eg, ext, key, *measuring, alt_key=alt_key)
            t0 = time.perf_counter()
            rep.changes = rebuild(graph, sat.encoding, eg, chosen)
            rep.rebuild_seconds = time.perf_counter() - t0
            annotate(rep, sat, eg, chosen)
            if memoize and not rep.stop_reason.startswith("time limit"):  # (the memo keeps the cost model's choice)
                memo.MemoStats.misses += 1
                saved = {name: getattr(rep, name) for name in _MEMO_FIELDS}
                saved["notes"] = {ch["node"]: (ch["rules"], ch["derivation"]) for ch in rep.changes}
                memo.store(key, eg, ext, saved)
        drop_offered(graph)  # (the rebuild deleted the losers)
        self.report = rep
        history = graph.__dict__.setdefault("egraph_reports", [])
        history.append(rep)
        if debug_level() >= 1:
            print(f"[egraph] {'(memoized) ' if rep.memoized else ''}{rep.stop_reason} after {len(rep.iterations)} "
                  f"iterations; {rep.enodes} e-nodes in "
                  f"{rep.eclasses} e-classes; load {rep.load_seconds * 1e3:.1f} ms, saturation "
                  f"{rep.saturation_seconds * 1e3:.1f} ms, serialize {rep.serialize_seconds * 1e3:.1f} ms, "
                  f"extraction {rep.extraction_seconds * 1e3:.1f} ms, rebuild {rep.rebuild_seconds * 1e3:.1f} ms; "
                  f"cost {rep.cost_before:.2f} -> {rep.cost_after:.2f}; "
                  f"{len(rep.changes)} nodes replaced; rules fired: {rep.rules_fired}")
        if debug_level() >= 2:
            print(explain(graph))
        return rep

    def __repr__(self) -> str:
        return f"EqualitySaturation(rulesets={self.rulesets!r})"


def _constant_class(cls: str, eg: EGraphData) -> bool:
    """E-classes holding a constant keep it (candidates do not trade a constant for an expression of it)."""
    return any(e.op == "Num" for e in eg.classes[cls])


def _root_classes(graph: Graph, enc: Encoding, eg: EGraphData) -> list[str]:
    return sorted({eg.node_class[r] for r in _root_nodes(graph, enc)})
