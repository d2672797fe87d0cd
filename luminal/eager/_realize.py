"""Realization of the eager engine: the compile cache of structural keys (:class:`_Entry`), the canonical walk
of pending records into a key and a graph (:class:`_Plan`), and running it (:func:`realize`, :func:`run_plan`,
:func:`apply_effects`). Recording lives in :mod:`luminal.eager._core`, which re-exports these names.
"""

from __future__ import annotations

import bisect
import collections
import operator
import sys
from typing import Any

import numpy as np

from .. import ops
from ..graph import Graph
from ..rng import eager_build
from ..runtime.cpu_plan import _own_memory
from ..shape import ShapeTracker
from ._core import (_Op, _Val, _device, _flatten, _intern, _lock, _refs, _same, _stats, _stop_gradient,  # noqa: F401
                    _tls)

# ---------------------------------------------------------------------------------------------- realization
class _Entry:
    """A compiled graph for one structural key: leaf inputs, read outputs."""

    __slots__ = ("graph", "leaf_gts", "leaf_fast", "leaf_keys", "out_gts", "out_fast", "out_keys", "out_plain",
                 "out_taken", "params", "hold_refs", "live")

    def __init__(self, graph, leaf_gts, out_gts, params):
        self.graph = graph
        self.leaf_gts = leaf_gts
        self.out_gts = out_gts
        self.params = params
        self.hold_refs: list = []
        self.live = True  # (False once evicted from the compile cache)
        nodes = graph.nodes
        # inputs: (GraphTensor, key in graph.tensors, numpy dtype, shape) or None where a pass removed the input
        self.leaf_fast = []
        for t in leaf_gts:
            nid = t.id
            node = nodes.get(nid)
            live = node is not None and isinstance(node.op, ops.Input)
            shape = tuple(d.to_int() for d in node.dims) if live and all(d.is_constant() for d in node.dims) else None
            self.leaf_fast.append((t, (nid, 0), node.dtype.numpy, shape) if live else None)
        self.leaf_keys = [f[1] for f in self.leaf_fast if f is not None]
        # outputs: node id where the whole buffer is the value (read without a view), else None
        self.out_fast = []
        for t in out_gts:
            nid = t.id
            node = nodes[nid]
            plain = not isinstance(node.op, ops.Input) and t.tracker == ShapeTracker.contiguous_of(node.dims)
            self.out_fast.append(nid if plain else None)
        self.out_keys = [(nid, 0) if nid is not None else None for nid in self.out_fast]
        self.out_plain = None not in self.out_fast  # every output read without a view
        # the outputs whose arrays are handed over by every run (the runtime writes a new array next time)
        self.out_taken = [(nid, None) for nid in dict.fromkeys(n for n in self.out_fast if n is not None)]

    def run(self, leaf_values):
        g = self.graph
        tensors = g.tensors
        for fast, v in zip(self.leaf_fast, leaf_values):
            if fast is None:
                continue
            t, key, dt, shape = fast
            if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
                tensors[key] = v
            else:
                t.set(v)
        g.execute()
        _stats["runs"] += 1
        tensors = g.tensors
        if self.out_plain:
            out = [tensors[key] for key in self.out_keys]
        else:
            out = [t.data() if key is None else tensors[key] for t, key in zip(self.out_gts, self.out_keys)]
        runtime = g.runtime
        if self.out_taken and runtime is not None:
            many = getattr(runtime, "recycle_many", None)
            if many is not None:
                many(self.out_taken)  # handed over: the next run writes new arrays
            else:
                recycle = getattr(runtime, "recycle", None)
                if recycle is not None:
                    for nid, _ in self.out_taken:
                        recycle(nid, None)
        return out

    def internal_refs(self) -> dict:
        """``{id(array): references}`` the graph holds (its input slots; the runtime's caches hold none)."""
        get = self.graph.tensors.get
        keys = self.leaf_keys
        counts = dict.fromkeys(map(id, map(get, keys)), 1)  # (in C: this runs at every optimizer step)
        if len(counts) == len(keys):
            return counts  # every slot holds an array of its own
        counts = {}
        for key in keys:
            i = id(get(key))  # (the id of None, an empty slot, is harmless: None is never freed)
            counts[i] = counts.get(i, 0) + 1
        return counts

    def donate(self, k: int, arr) -> None:
        """Let the next run write output ``k`` into ``arr`` (a value nobody holds any more)."""
        self.donate_many([(k, arr)])

    def donate_many(self, pairs) -> None:
        """:meth:`donate` for several ``(output index, array)`` pairs."""
        runtime = self.graph.runtime
        out_fast = self.out_fast
        many = getattr(runtime, "recycle_many", None)
        todo = [(out_fast[k], arr) for k, arr in pairs if out_fast[k] is not None]
        if many is not None:
            many(todo)
        else:
            recycle = getattr(runtime, "recycle", None)
            if recycle is not None:
                for nid, arr in todo:
                    recycle(nid, arr)

    def release(self):
        self.live = False
        for p in self.params:
            p._bound.pop(id(self.graph), None)


_cache: "collections.OrderedDict[Any, _Entry]" = collections.OrderedDict()
_CACHE_SIZE = 256


def _leaf_key(v: _Val) -> int:
    """The structural key of a graph input -- shape (or symbolic dims), dtype, requires_grad, whether a parameter
    -- as an interned int (:func:`_intern`), cached on the value."""
    lk = v.lkey
    if lk is None or lk[0] != v.requires_grad:
        key = ("leaf", v.shape if v.sym is None else ("sym", v.sym), v.dtype.value, v.requires_grad,
               v.param is not None)
        lk = v.lkey = (v.requires_grad, _intern(key))
    return lk[1]


class _History:
    """The ids of the realized values that must be recomputed for some outputs: those a pending backward
    operation differentiates through (a loss printed before ``backward()``). Found on first use: only a realized
    value that kept its operation (it requires grad) is looked up."""

    __slots__ = ("outputs", "ids")

    def __init__(self, outputs):
        self.outputs = outputs
        self.ids = None

    def __contains__(self, i: int) -> bool:
        if self.ids is None:
            self.ids = _Plan._history_roots(self.outputs)
        return i in self.ids


class _Plan:
    """The canonical walk of the records behind some outputs: leaves, operations, key.

    A reference to a value in the key (and in ``op_refs`` / ``out_refs``) is ``-1 - i`` for leaf ``i`` and
    ``(j, idx)`` for output ``idx`` of operation ``j``."""

    __slots__ = ("leaves", "ops", "op_refs", "holds", "out_refs", "key")

    def __init__(self, outputs: list[_Val]):
        hist = _History(outputs)
        leaf_index: dict[int, int] = {}  # id(value) -> its reference (-1 - i)
        op_index: dict[int, int] = {}
        leaves: list[_Val] = []
        op_list: list[_Op] = []
        op_refs: list[tuple] = []
        holds: list = []  # objects the operation keys name by id (modules, optimizers, functions)
        op_keys = []
        leaf_keys = []
        out_refs = []
        # A value is a leaf (a graph input) when it is read from the host or realized -- unless a pending backward
        # differentiates through it (``hist``): then it is recomputed from its operation. Leaves are numbered in
        # order of first reference. (This walk runs at every realization: the leaf test and numbering are
        # inlined.)
        for out in outputs:
            if out.getter is not None or (out.value is not None and (out.op is None or id(out) not in hist)):
                r = leaf_index.get(id(out))
                if r is None:
                    r = leaf_index[id(out)] = -1 - len(leaves)
                    leaves.append(out)
                    leaf_keys.append(_leaf_key(out))
                out_refs.append(r)
                continue
            root = out.op
            if id(root) not in op_index:
                # iterative post-order DFS over operations: an operation is emitted once the operations of its
                # inputs are (a visit that finds one missing pushes it and comes back later)
                stack = [root]
                while stack:
                    op = stack[-1]
                    if id(op) in op_index:
                        stack.pop()
                        continue
                    refs = []
                    missing = False
                    for i in op.inputs:
                        if i.getter is not None or (i.value is not None and (i.op is None or id(i) not in hist)):
                            r = leaf_index.get(id(i))
                            if r is None:
                                r = leaf_index[id(i)] = -1 - len(leaves)
                                leaves.append(i)
                                lk = i.lkey  # (_leaf_key's cached case inlined)
                                leaf_keys.append(lk[1] if lk is not None and lk[0] == i.requires_grad
                                                 else _leaf_key(i))
                            refs.append(r)
                        else:
                            j = op_index.get(id(i.op))
                            if j is None:
                                stack.append(i.op)
                                missing = True
                            else:
                                refs.append((j, i.idx))
                    if missing:
                        continue
                    stack.pop()
                    refs = tuple(refs)
                    op_refs.append(refs)
                    op_keys.append((op.kid, refs, op.out_rg))
                    op_index[id(op)] = len(op_list)
                    op_list.append(op)
                    if op.hold:
                        holds.extend(op.hold)
            out_refs.append((op_index[id(root)], out.idx))
        self.leaves, self.ops, self.op_refs, self.holds = leaves, op_list, op_refs, holds
        self.out_refs = out_refs
        self.key = (_device["name"], tuple(leaf_keys), tuple(op_keys), tuple(out_refs))

    @staticmethod
    def _history_roots(outputs) -> set:
        """ids of realized values that must be recomputed: those a pending backward operation differentiates
        through (a loss that was printed before ``backward()``)."""
        stack = list(outputs)
        seen: set = set()  # operations visited (an optimizer update has one per parameter and state buffer)
        roots = []
        while stack:
            v = stack.pop()
            if v.value is None and v.getter is None:  # pending
                op = v.op
                if id(op) in seen:
                    continue
                seen.add(id(op))
                if op.key[0] == "grad":  # ("grad", first target, number of sources, ...): eager/autograd.py
                    roots.extend(op.inputs[:op.key[2]])
                stack.extend(op.inputs)
        hist: set = set()
        while roots:
            v = roots.pop()
            if id(v) in hist or v.op is None or v.getter is not None:
                continue
            hist.add(id(v))
            roots.extend(i for i in v.op.inputs if i.requires_grad or i.pending)
        return hist

    def build(self) -> _Entry:
        cx = Graph()
        leaf_gts = []
        params = []
        for i, v in enumerate(self.leaves):
            t = cx.tensor(v.shape if v.sym is None else v.sym, v.dtype,
                          v.param.name if v.param is not None else f"in{i}")
            if v.param is not None:
                v.param._bound[id(cx)] = (cx, t)
                params.append(v.param)
            leaf_gts.append(t)
        results = []
        # values a backward differentiates with respect to (or cuts at) get a node of their own, so that only
        # their own consumers -- not other views or copies of the same node -- pass them gradient
        own = set()
        for op, refs in zip(self.ops, self.op_refs):
            if op.key[0] == "grad":
                own.update(r for r in refs[op.key[1]:] if type(r) is tuple)

        def gt_of(r):
            return leaf_gts[-1 - r] if type(r) is int else results[r[0]][r[1]]

        for op, refs in zip(self.ops, self.op_refs):
            ins = [gt_of(r) for r in refs]
            with eager_build():
                raw = op.build(cx, ins)
            flat: list = []
            _flatten(raw, flat)
            any_rg = any(i.requires_grad for i in op.inputs)
            outs = []
            for t, rg in zip(flat, op.out_rg):
                if any_rg and not rg and t.dtype.is_float:
                    t = _stop_gradient(t)
                outs.append(t)
            if own:
                j = len(results)
                outs = [t._apply(ops.Contiguous()) if (j, k) in own else t for k, t in enumerate(outs)]
            results.append(outs)
        out_gts = [gt_of(r) for r in self.out_refs]
        for t in out_gts:
            t.retrieve()
        for t in leaf_gts:
            t.keep()
        device = _device["name"]
        if device != "reference":
            cx.compile(device=device, remap=(leaf_gts, out_gts))
        _stats["compiles"] += 1
        entry = _Entry(cx, leaf_gts, out_gts, params)
        entry.hold_refs = _refs(self.holds)
        return entry


def _pending_live():
    """(the still referenced pending values of this thread, the weakrefs kept in ``_tls.pending``)."""
    alive = []
    keep = []
    for w in _tls.pending:
        t = w()
        if t is not None:
            v = t._v
            if v.value is None and v.getter is None:  # (pending)
                alive.append(v)
                keep.append(w)
    _tls.pending = keep
    return alive, keep


_seq_of = operator.attrgetter("seq")  # (the sort key of realize: a value's sequence number)


def realize(targets=(), what: str = "read a tensor's value"):
    """Run every pending, still referenced tensor of this thread (and ``targets``) as one cached graph."""
    tracing = _tls.tracing
    if tracing is not None:
        tracing.fail(what)
    vals = [v for v in targets if v.value is None and v.getter is None] if targets else []
    effects = _tls.effects
    if effects:
        _tls.effects = []
        for evals, _ in effects:
            vals.extend([v for v in evals if v.value is None and v.getter is None])
    live, keep = _pending_live()
    if not vals and not live and not effects:
        return
    vals += live
    vals.sort(key=_seq_of)
    # (sequence numbers are unique per value: a value listed twice sorts next to itself)
    prev = None
    outputs = []
    for v in vals:
        if v is not prev:
            outputs.append(v)
            prev = v
    del prev
    try:
        values, entry = run_plan(outputs)
    except BaseException:
        # the failing work stays pending (reading it again raises again) but no longer rides along with the
        # realizations of unrelated tensors
        _tls.pending = []
        raise
    for v, arr in zip(outputs, values):
        v.value = arr
        if not v.requires_grad:
            v.op = None  # (a value that requires grad keeps its operation: see _History)
    if effects:
        apply_effects(effects, None, values, entry, outputs)
    pending = _tls.pending
    if pending is keep and len(pending) == len(live):
        _tls.pending = []  # every value it held was an output of this run (nothing was recorded meanwhile)
    else:
        _tls.pending = [w for w in pending if (w() is not None and w()._v.pending)]


def apply_effects(effects, position: dict | None, values, entry, outputs: list | None = None) -> None:
    """Run the effect callbacks (host-state writes) with their values; arrays they free (an old parameter value
    that nothing else holds) become the output buffers of the next run. ``position``: ``{id(value): output
    index}``; or None, and ``outputs`` the run's outputs in order of creation (realize)."""
    internal = None
    donated = []
    getrefcount = sys.getrefcount
    for evals, callback in effects:
        index = None  # the output index of each value
        if outputs is not None and evals:
            # an effect's values were made together: usually one run of the outputs (sorted by creation)
            s = bisect.bisect_left(outputs, evals[0].seq, key=_seq_of)
            if outputs[s:s + len(evals)] == evals:  # (compared by identity)
                index = range(s, s + len(evals))
        if index is None:
            if position is None:
                position = {id(v): k for k, v in enumerate(outputs)}
            index = [position[id(v)] for v in evals]
        freed = callback([values[k] for k in index]) or []
        del callback
        if freed and internal is None:
            internal = entry.internal_refs()
        while freed:
            j, old = freed.pop()
            # held only here (this name and getrefcount's argument) and inside the graph, and no view of it
            # anywhere (see luminal.runtime.cpu_plan.exclusively_held): reuse its memory
            if _own_memory(old) and getrefcount(old) - internal.get(id(old), 0) <= 2:
                donated.append((index[j], old))
            del old
    if donated:
        entry.donate_many(donated)


def _dedupe(vals):
    seen = set()
    out = []
    for v in vals:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def run_plan(outputs: list[_Val], leaf_override: dict | None = None):
    """Values of ``outputs`` (pending records) from the compile cache (building the graph on a miss); returns
    ``(values, entry)``."""
    hint = _hint(outputs)
    hit = _replay(outputs, hint)
    if hit is not None:
        entry, leaves = hit
    else:
        plan = _Plan(outputs)
        entry = _cache.get(plan.key)
        if entry is not None and not _same(entry.hold_refs, plan.holds):
            entry = None  # a module (or function) the key names by id was freed and its id reused: build again
        if entry is None:
            with _lock:
                entry = _cache.get(plan.key)
                if entry is not None and not _same(entry.hold_refs, plan.holds):
                    _evict(_cache.pop(plan.key))
                    entry = None
                if entry is None:
                    entry = plan.build()
                    _cache[plan.key] = entry
                    while len(_cache) > _CACHE_SIZE:
                        _evict(_cache.popitem(last=False)[1])
        else:
            _stats["cache_hits"] += 1
            try:
                _cache.move_to_end(plan.key)
            except KeyError:
                pass
        if len(_hints) >= 64:
            _hints.clear()
        _hints[hint] = (plan.key, entry)
        leaves = plan.leaves
    if leaf_override:
        leaf_values = [leaf_override[id(v)] if id(v) in leaf_override else v.host() for v in leaves]
    else:
        leaf_values = [v.getter() if v.getter is not None else v.value for v in leaves]
    return entry.run(leaf_values), entry


# ---------------------------------------------------------------------------------------------- replay check
# A loop realizes records of the same structure again and again. Rather than walking them into their key
# (_Plan) and looking that up, :func:`_replay` checks them against the key last used for outputs like these
# (``_hints``: by the number of outputs and the operation of the last one), following the key's references.
_hints: dict = {}


def _evict(entry: _Entry) -> None:
    """Release a graph dropped from the compile cache, and the hints that name it."""
    entry.release()
    for h, (_, e) in list(_hints.items()):  # (a copy: other threads may add hints meanwhile)
        if e is entry:
            _hints.pop(h, None)


def _hint(outputs) -> tuple:
    last = outputs[-1].op if outputs else None
    return (len(outputs), None if last is None else last.kid)


def _replay(outputs, hint):
    """``(entry, leaves)`` when the records behind ``outputs`` have the structure of the cached key last used for
    this ``hint`` -- the key their canonical walk would give: a one-to-one map of their operations and leaves
    onto the key's, with the same operation keys, result flags, edges and leaf keys -- else None."""
    cand = _hints.get(hint)
    if cand is None:
        return None
    key, entry = cand
    device, leaf_keys, op_keys, out_refs = key
    if not entry.live or device != _device["name"]:
        return None
    hist = _History(outputs)
    n_ops = len(op_keys)
    ops: list = [None] * n_ops
    leaves: list = [None] * len(leaf_keys)
    # the outputs, then each operation's inputs from the last to the first (every reference of operation j is
    # to an earlier one): assign the key's operations and leaves, or find the record differs
    for v, r in zip(outputs, out_refs):
        if v.getter is not None or (v.value is not None and (v.op is None or id(v) not in hist)):  # a leaf
            if type(r) is not int:
                return None
            k = -1 - r
            if leaves[k] is None:
                leaves[k] = v
            elif leaves[k] is not v:
                return None
        else:
            if type(r) is int or v.idx != r[1]:
                return None
            o = ops[r[0]]
            if o is None:
                ops[r[0]] = v.op
            elif o is not v.op:
                return None
    for j in range(n_ops - 1, -1, -1):
        op = ops[j]
        if op is None:
            return None
        kid, refs, out_rg = op_keys[j]
        inputs = op.inputs
        if op.kid != kid or op.out_rg != out_rg or len(inputs) != len(refs):
            return None
        for i, r in zip(inputs, refs):
            if i.getter is not None or (i.value is not None and (i.op is None or id(i) not in hist)):
                if type(r) is not int:
                    return None
                k = -1 - r
                leaf = leaves[k]
                if leaf is None:
                    leaves[k] = i
                elif leaf is not i:
                    return None
            else:
                if type(r) is int or i.idx != r[1]:
                    return None
                o = ops[r[0]]
                if o is None:
                    ops[r[0]] = i.op
                elif o is not i.op:
                    return None
    # one to one: no record stands for two of the key's operations or leaves
    if None in leaves or len(set(map(id, leaves))) != len(leaves) or len(set(map(id, ops))) != n_ops:
        return None
    for v, lk in zip(leaves, leaf_keys):
        c = v.lkey
        if (c[1] if c is not None and c[0] == v.requires_grad else _leaf_key(v)) != lk:
            return None
    holds = []
    for op in ops:
        if op.hold:
            holds.extend(op.hold)
    if not _same(entry.hold_refs, holds):
        return None  # (an object the key names by id was freed and its id reused: the full path builds again)
    _stats["cache_hits"] += 1
    try:
        _cache.move_to_end(key)
    except KeyError:
        return None
    return entry, leaves
