"""The eager engine: tensors that record operations and realize them through compiled, cached graphs.

An eager :class:`Tensor` holds a *value record* (``_Val``): either a realized numpy array (a leaf), a reader of
host state (a module ``Parameter``, an optimizer buffer: read at every run), or a pending operation over other
records. Operations only *record* (with the result's shape and dtype inferred once per operation signature);
reading a value (``numpy()``, ``print``, ``float()``, ``bool()``, an optimizer ``step()``) realizes every pending
tensor of the thread that is still referenced, in one graph:

1. the pending records reachable from those tensors are walked in a canonical order, giving a *structural key*
   (operation keys, input shapes and dtypes, edges, which results are read) -- never tensor values;
2. the key is looked up in a process-wide compile cache; on a miss a :class:`~luminal.graph.Graph` is built from
   the records (realized tensors become its inputs), compiled for the default device and cached;
3. the leaf values are bound to the graph's inputs, the graph runs, and the results are stored in the records.

So a training loop whose step has the same structure every iteration compiles once and then only replays.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import weakref
from typing import Any, Callable

import numpy as np

from .. import ops
from ..dtype import DType, as_dtype
from ..graph import Graph
from ..runtime.cpu import _own_memory
from ..shape import ShapeTracker
from ..tensor import GraphTensor

__all__ = ["Tensor", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "set_default_device",
           "get_default_device", "stats", "clear_cache", "JitTraceError"]


class JitTraceError(RuntimeError):
    """Raised when a function traced by :func:`luminal.jit` reads a tensor's value (Python control flow on data)."""


# ---------------------------------------------------------------------------------------------- thread state
class _ThreadState(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.pending: list = []      # weakrefs to Tensors whose value is pending
        self.tracing = None          # the jit trace in progress (luminal.jit), or None
        self.effects: list = []      # (vals, callback) to apply at the next realization


_tls = _ThreadState()
_seq = itertools.count()
_device = {"name": "cpu"}
_lock = threading.RLock()  # builds and the caches (graph building binds module parameters)
_stats = collections.Counter()


def set_default_device(device: str) -> None:
    """Choose where eager tensors run: ``"cpu"`` (compiled C, the default) or ``"reference"`` (numpy
    interpreter). Compiled graphs are cached per device."""
    if device not in ("cpu", "reference"):
        raise ValueError(f"set_default_device: unknown device {device!r}; expected 'cpu' or 'reference'")
    _device["name"] = device


def get_default_device() -> str:
    """The device eager tensors run on (see :func:`set_default_device`)."""
    return _device["name"]


def stats() -> dict:
    """Counters of the eager engine: ``compiles`` (graphs built and compiled), ``cache_hits`` (realizations that
    replayed a cached graph), ``runs`` (graph executions)."""
    return {"compiles": _stats["compiles"], "cache_hits": _stats["cache_hits"], "runs": _stats["runs"]}


def clear_cache() -> None:
    """Forget every compiled graph (and reset :func:`stats`)."""
    with _lock:
        for entry in _cache.values():
            entry.release()
        _cache.clear()
        _infer_cache.clear()
        _stats.clear()


# ---------------------------------------------------------------------------------------------- grad mode
class set_grad_enabled:
    """Context manager (and decorator) switching gradient recording on or off for this thread
    (``torch.set_grad_enabled``)."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self.prev = _tls.grad_enabled
        _tls.grad_enabled = self.mode  # (torch also switches when called as a plain function)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _tls.grad_enabled = self.prev
        return False

    def __call__(self, fn):
        import functools

        mode = self.mode
        _tls.grad_enabled = self.prev  # used as a decorator: switch only while fn runs

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


class _GradMode:
    mode = False

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if fn is not None:  # used as a bare decorator: @lm.no_grad
            return self(fn)
        return self

    def __enter__(self):
        self.prev = _tls.grad_enabled
        _tls.grad_enabled = self.mode
        return self

    def __exit__(self, *exc):
        _tls.grad_enabled = self.prev
        return False

    def __call__(self, fn):
        import functools

        cls = type(self)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with cls():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """``with lm.no_grad():`` -- results computed inside do not require gradients (``torch.no_grad``); also a
    decorator (``@lm.no_grad`` or ``@lm.no_grad()``)."""

    mode = False


class enable_grad(_GradMode):
    """``with lm.enable_grad():`` -- switch gradient recording back on (``torch.enable_grad``)."""

    mode = True


def is_grad_enabled() -> bool:
    """Whether operations of this thread currently record gradients."""
    return _tls.grad_enabled


# ---------------------------------------------------------------------------------------------- records
_KIDS: dict = {}  # structural key -> its small int (_intern)
_kid_seq = itertools.count()


def _intern(key) -> int:
    """A small int standing for the structural ``key`` in the compile cache's keys (cheap to hash and compare).
    Never reused for another key: when the table is cleared (it is bounded), keys get new ints (a later
    realization then compiles again)."""
    kid = _KIDS.get(key)
    if kid is None:
        with _lock:
            kid = _KIDS.get(key)
            if kid is None:
                if len(_KIDS) >= 65536:
                    _KIDS.clear()
                kid = _KIDS[key] = next(_kid_seq)
    return kid


class _Op:
    """A recorded operation: ``build(graph, input GraphTensors)`` returns its outputs (any nesting)."""

    __slots__ = ("key", "kid", "build", "inputs", "spec", "out_rg", "hold", "__weakref__")

    def __init__(self, key, build, inputs, spec, out_rg, hold=None, kid=None):
        self.key = key
        self.kid = _intern(key) if kid is None else kid  # the key as a small int (see _intern)
        self.build = build
        self.inputs = inputs
        self.spec = spec
        self.out_rg = out_rg
        self.hold = hold  # objects the key names by id (modules, optimizers): kept alive with the record


class _Val:
    """One tensor value: a realized array, a host reader (``getter``), or output ``idx`` of a pending ``op``."""

    __slots__ = ("value", "getter", "op", "idx", "shape", "dtype", "requires_grad", "seq", "param", "sym",
                 "lkey", "grad", "__weakref__")

    def __init__(self, shape, dtype, value=None, getter=None, op=None, idx=0, requires_grad=False, param=None):
        self.value = value
        self.getter = getter
        self.op = op
        self.idx = idx
        self.shape = shape
        self.dtype = dtype
        self.requires_grad = requires_grad
        self.seq = next(_seq)
        self.param = param
        self.sym = None  # jit: the leaf's dims with symbol names where they are symbolic
        self.lkey = None  # the key of this value as a graph input (_Plan), cached
        self.grad = None  # a leaf's accumulated gradient (a Tensor), see Tensor.grad

    @property
    def pending(self) -> bool:
        return self.value is None and self.getter is None

    def host(self) -> np.ndarray:
        return self.getter() if self.getter is not None else self.value


_NP_DTYPES: dict = {}  # numpy dtype -> DType (as_dtype, cached: it is on every tensor's creation path)
_FLOAT_IDS = frozenset(id(d) for d in DType if d.is_float)  # (DType members are singletons: test by identity)


def _np_dtype(dt) -> DType:
    """``as_dtype`` of a numpy dtype (cached; raises its TypeError for an unsupported one)."""
    out = _NP_DTYPES.get(dt)
    if out is None:
        out = as_dtype(dt)
        if len(_NP_DTYPES) < 256:
            _NP_DTYPES[dt] = out
    return out


def _leaf(array: np.ndarray, requires_grad: bool = False) -> _Val:
    return _Val(array.shape, _np_dtype(array.dtype), value=array, requires_grad=requires_grad)


# ---------------------------------------------------------------------------------------------- flattening
def _flatten(obj, leaves: list):
    """Spec of ``obj`` with its GraphTensors (or _Vals) replaced by positions in ``leaves``."""
    if isinstance(obj, (GraphTensor, _Val)):
        leaves.append(obj)
        return ("T", len(leaves) - 1)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return ("nt", type(obj), tuple(_flatten(o, leaves) for o in obj))
    if isinstance(obj, (tuple, list)):
        return (type(obj), tuple(_flatten(o, leaves) for o in obj))
    return ("c", obj)


def _unflatten(spec, leaves):
    tag = spec[0]
    if tag == "T":
        return leaves[spec[1]]
    if tag == "c":
        return spec[1]
    if tag == "nt":
        return spec[1](*(_unflatten(s, leaves) for s in spec[2]))
    return tag([leaves[s[1]] if s[0] == "T" else _unflatten(s, leaves) for s in spec[1]])


# ---------------------------------------------------------------------------------------------- argument freezing
class _Slot:
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k


def _freeze(obj, vals: list, hold: list):
    """(structural key, template) of an argument; tensors become slots numbered in ``vals``."""
    if isinstance(obj, Tensor):
        vals.append(obj._v)
        return ("T",), _Slot(len(vals) - 1)
    if isinstance(obj, np.ndarray):
        vals.append(_leaf(np.array(obj, order="C")))
        return ("T",), _Slot(len(vals) - 1)
    if isinstance(obj, GraphTensor):
        raise TypeError("an eager luminal Tensor cannot be combined with a lazy GraphTensor (of a Graph you "
                        "built); use one or the other")
    if obj is None or obj is Ellipsis or isinstance(obj, (bool, str)):
        return (type(obj).__name__, obj), obj
    if isinstance(obj, (int, np.integer)):
        return ("i", int(obj)), obj
    if isinstance(obj, (float, np.floating)):
        return ("f", float(obj).hex()), obj
    if isinstance(obj, DType):
        return ("d", obj.value), obj
    if isinstance(obj, slice):
        parts = [_freeze(x, vals, hold) for x in (obj.start, obj.stop, obj.step)]
        return ("s",) + tuple(p[0] for p in parts), _SliceT(*[p[1] for p in parts])
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        parts = [_freeze(x, vals, hold) for x in obj]
        return ("nt", type(obj).__qualname__, tuple(p[0] for p in parts)), _SeqT(type(obj), [p[1] for p in parts],
                                                                                  True)
    if isinstance(obj, (tuple, list)):
        parts = [_freeze(x, vals, hold) for x in obj]
        return (type(obj).__name__, tuple(p[0] for p in parts)), _SeqT(type(obj), [p[1] for p in parts])
    if isinstance(obj, dict):
        items = sorted(obj.items(), key=lambda kv: str(kv[0]))
        parts = [(k, _freeze(v, vals, hold)) for k, v in items]
        return ("dict", tuple((k, p[0]) for k, p in parts)), _DictT({k: p[1] for k, p in parts})
    try:
        dt = as_dtype(obj) if isinstance(obj, (np.dtype, type)) else None
    except TypeError:
        dt = None
    if dt is not None:
        return ("d", dt.value), obj
    from ..shape import Expression
    if isinstance(obj, Expression):
        return ("e", str(obj)), obj
    hold.append(obj)  # modules, functions, other objects: by identity (kept alive with the record)
    return ("o", type(obj).__qualname__, id(obj)), obj


class _SliceT:
    __slots__ = ("a", "b", "c")

    def __init__(self, a, b, c):
        self.a, self.b, self.c = a, b, c


class _SeqT:
    __slots__ = ("t", "items", "named")

    def __init__(self, t, items, named=False):
        self.t, self.items, self.named = t, items, named


class _DictT:
    __slots__ = ("d",)

    def __init__(self, d):
        self.d = d


def _subst(tpl, gts):
    if isinstance(tpl, _Slot):
        return gts[tpl.k]
    if isinstance(tpl, _SliceT):
        return slice(_subst(tpl.a, gts), _subst(tpl.b, gts), _subst(tpl.c, gts))
    if isinstance(tpl, _SeqT):
        items = [_subst(x, gts) for x in tpl.items]
        return tpl.t(*items) if tpl.named else tpl.t(items)
    if isinstance(tpl, _DictT):
        return {k: _subst(v, gts) for k, v in tpl.d.items()}
    return tpl


# ---------------------------------------------------------------------------------------------- recording
_infer_cache: dict = {}


def _bind_params(graph: Graph, vals, gts) -> None:
    for v, t in zip(vals, gts):
        if v.param is not None:
            v.param._bound[id(graph)] = (graph, t)


def _refs(objs) -> list:
    """References that do not keep ``objs`` alive where possible (a key names them by ``id``)."""
    out = []
    for o in objs:
        try:
            out.append(weakref.ref(o))
        except TypeError:
            out.append(lambda o=o: o)
    return out


def _same(refs, objs) -> bool:
    """Whether ``refs`` still point at exactly ``objs`` (an ``id`` in a key was not reused by another object)."""
    if len(refs) != len(objs):
        return False
    for r, o in zip(refs, objs):
        if r() is not o:
            return False
    return True


def _infer(key, build, inputs: list[_Val], hold=None):
    """(output spec, [(shape, dtype)]) of an operation, computed once per signature on a scratch graph."""
    sig = (key, tuple([(v.shape, id(v.dtype), v.param is not None) for v in inputs]))
    hit = _infer_cache.get(sig)
    if hit is not None and _same(hit[2], hold or ()):
        return hit
    with _lock:
        cx = Graph()
        gts = [cx.tensor(v.shape, v.dtype, "x") for v in inputs]
        _bind_params(cx, inputs, gts)
        try:
            raw = build(cx, gts)
        finally:
            for v in inputs:
                if v.param is not None:
                    v.param._bound.pop(id(cx), None)
        flat: list = []
        spec = _flatten(raw, flat)
        outs = []
        for t in flat:
            dims = t.dims
            if not all(d.is_constant() for d in dims):
                raise TypeError(f"eager tensors need concrete shapes; the result has symbolic dims "
                                f"{[str(d) for d in dims]}")
            outs.append((tuple(d.to_int() for d in dims), t.dtype))
        if len(_infer_cache) >= 65536:  # (signatures include Python scalars: bound the memory)
            _infer_cache.clear()
        hit = _infer_cache[sig] = (spec, outs, _refs(hold or ()), tuple(id(dt) in _FLOAT_IDS for _, dt in outs),
                                   next(_kid_seq))  # (a structural id per signature, see _intern)
        return hit


# Recording contexts: functions ``f(key, build) -> (key, build)`` applied to every user-level operation (tensor
# methods, functions, module calls; not backward, detach or optimizer steps) as it is recorded, to make a region
# of the program part of its structure and of its build. luminal.amp's autocast registers one.
record_contexts: list = []
_USER_KINDS = ("m", "f", "mod")


def _record(key, build, inputs: list[_Val], hold=None, spec_outs=None, grad=True):
    """Record an operation over ``inputs``; returns its result with Tensors in place of graph tensors."""
    if record_contexts and type(key) is tuple and key and key[0] in _USER_KINDS:
        for ctx in record_contexts:
            key, build = ctx(key, build)
    if spec_outs is None:
        spec, outs, _, is_float, kid = _infer(key, build, inputs, hold)
    else:
        spec, outs = spec_outs
        is_float = kid = None
    rg = False
    if grad and _tls.grad_enabled:
        for v in inputs:
            if v.requires_grad:
                rg = True
                break
    if not rg:
        out_rg = (False,) * len(outs)
    elif is_float is not None:
        out_rg = is_float
    else:
        out_rg = tuple([id(dt) in _FLOAT_IDS for _, dt in outs])
    op = _Op(key, build, tuple(inputs), spec, out_rg, hold, kid)
    tensors = []
    pending = _tls.pending
    make, ref = Tensor._make, weakref.ref
    k = 0
    for (shape, dt), r in zip(outs, out_rg):
        t = make(_Val(shape, dt, op=op, idx=k, requires_grad=r))
        pending.append(ref(t))
        tensors.append(t)
        k += 1
    if len(pending) > 4096:
        _tls.pending = [w for w in pending if (w() is not None and w()._v.pending)]
    if spec[0] == "T":
        return tensors[spec[1]]
    return _unflatten(spec, tensors)


_ARGS_TPL: dict = {}  # (first slot, number of args) -> frozen key and templates of a call with only tensor args


def _freeze_call(args, kwargs, vals: list, hold: list):
    """(key of args, key of kwargs, args template, kwargs template) of a call; a call whose arguments are all
    Tensors (the common case: ``model(x)``, ``F.cross_entropy(y, t)``) takes a cached template."""
    if not kwargs:
        for a in args:
            if type(a) is not Tensor:
                break
        else:
            n0 = len(vals)
            for a in args:
                vals.append(a._v)
            tpl = _ARGS_TPL.get((n0, len(args)))
            if tpl is None:
                key_a, tpl_a = _freeze(tuple(args), [None] * n0, [])
                key_k, tpl_k = _freeze({}, [], [])
                tpl = _ARGS_TPL[(n0, len(args))] = (key_a, key_k, tpl_a, tpl_k)
            return tpl
    key_a, tpl_a = _freeze(tuple(args), vals, hold)
    key_k, tpl_k = _freeze(dict(kwargs), vals, hold)
    return key_a, key_k, tpl_a, tpl_k


def _record_effect(key, build, inputs: list[_Val], hold, spec_outs, kid=None) -> list[_Val]:
    """Record an operation whose results only an effect reads (an optimizer update): its output values, without
    Tensor handles (the effect's values are realized with the next realization in any case)."""
    _, outs = spec_outs
    op = _Op(key, build, tuple(inputs), spec_outs[0], (False,) * len(outs), hold, kid)
    return [_Val(shape, dt, op=op, idx=k) for k, (shape, dt) in enumerate(outs)]


def _method_build(name, tpl, kw_tpl):
    def build(graph, gts):
        return getattr(gts[0], name)(*_subst(tpl, gts), **_subst(kw_tpl, gts))
    return build


def call_method(name: str, self_t: "Tensor", args, kwargs):
    """Record ``GraphTensor.<name>(self, *args, **kwargs)``."""
    vals = [self_t._v]
    hold: list = []
    key_a, key_k, tpl, kw_tpl = _freeze_call(args, kwargs, vals, hold)
    return _record(("m", name, key_a, key_k), _method_build(name, tpl, kw_tpl), vals, hold or None)


def call_function(fn: Callable, args, kwargs, name: str | None = None):
    """Record ``fn(*args, **kwargs)`` (a function of lazy GraphTensors) as one eager operation."""
    vals: list = []
    hold: list = [fn]
    key_a, key_k, tpl, kw_tpl = _freeze_call(args, kwargs, vals, hold)

    def build(graph, gts):
        return fn(*_subst(tpl, gts), **_subst(kw_tpl, gts))
    return _record(("f", name or getattr(fn, "__qualname__", "?"), id(fn), key_a, key_k), build, vals, hold)


def call_module(module, args, kwargs):
    """Record ``module(*args, **kwargs)`` on eager tensors: the module's parameters and buffers are inputs read
    from their host arrays at every run."""
    vals: list = []
    hold: list = [module]
    key_a, key_k, tpl, kw_tpl = _freeze_call(args, kwargs, vals, hold)
    n_args = len(vals)
    if n_args == 0:
        raise TypeError(f"{type(module).__name__} called without a tensor argument")
    modules = _submodules(module)
    seen = set()
    for attr in ("_parameters", "_buffers"):  # (named_parameters() then named_buffers(): the same order)
        for m in modules:
            for p in getattr(m, attr).values():
                if id(p) not in seen:
                    seen.add(id(p))
                    vals.append(param_tensor(p)._v)

    def build(graph, gts):
        return module(*_subst(tpl, gts[:n_args]), **_subst(kw_tpl, gts[:n_args]))
    # (every submodule's training flag: a child switched to eval() alone changes the graph too)
    training = module.training if len(modules) == 1 else tuple([m.training for m in modules])
    key = ("mod", type(module).__qualname__, id(module), training, key_a, key_k)
    return _record(key, build, vals, hold)


def _submodules(module) -> list:
    """``module.modules()`` in ``named_modules()`` order (depth first, children in registration order)."""
    out = [module]
    stack = list(reversed(module._modules.values()))
    while stack:
        m = stack.pop()
        out.append(m)
        if m._modules:
            stack.extend(reversed(m._modules.values()))
    return out


def param_tensor(p) -> "Tensor":
    """The eager tensor of a module ``Parameter`` (one per parameter; its value is read from ``p.data`` at every
    run, so optimizer steps and ``load_state_dict`` are seen without recompiling)."""
    t = p.__dict__.get("_eager")
    rg = bool(p.requires_grad) and id(p.dtype) in _FLOAT_IDS
    if t is None or t._v.shape != p.data.shape:
        t = Tensor._make(_Val(tuple(p.data.shape), p.dtype, getter=lambda p=p: p.data, requires_grad=rg, param=p))
        p.__dict__["_eager"] = t
    else:
        v = t._v
        if v.requires_grad is not rg:
            v.requires_grad = rg
    return t


def _stop_gradient(t: GraphTensor) -> GraphTensor:
    out = t._apply(ops.Contiguous())
    t.graph.grad_rules[out.id] = ("stop_gradient", (), None, out.dims)
    return out


# ---------------------------------------------------------------------------------------------- realization
class _Entry:
    """A compiled graph for one structural key: leaf inputs, read outputs."""

    __slots__ = ("graph", "leaf_gts", "leaf_fast", "leaf_keys", "out_gts", "out_fast", "out_keys", "out_taken",
                 "params", "hold_refs")

    def __init__(self, graph, leaf_gts, out_gts, params):
        self.graph = graph
        self.leaf_gts = leaf_gts
        self.out_gts = out_gts
        self.params = params
        self.hold_refs: list = []
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
            plain = not isinstance(node.op, ops.Input) and t.shape == ShapeTracker.contiguous_of(node.dims)
            self.out_fast.append(nid if plain else None)
        self.out_keys = [(nid, 0) if nid is not None else None for nid in self.out_fast]
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
        out = []
        for t, key in zip(self.out_gts, self.out_keys):
            out.append(t.data() if key is None else tensors[key])
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
        counts: dict = {}
        tensors = self.graph.tensors
        for key in self.leaf_keys:
            a = tensors.get(key)
            if a is not None:
                counts[id(a)] = counts.get(id(a), 0) + 1
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
        for p in self.params:
            p._bound.pop(id(self.graph), None)


_with_history = weakref.WeakSet()  # realized values that keep their operation (they require grad)
_cache: "collections.OrderedDict[Any, _Entry]" = collections.OrderedDict()
_CACHE_SIZE = 256
_NO_HIST: frozenset = frozenset()


def _leaf_key(v: _Val) -> int:
    """The structural key of a graph input -- shape (or symbolic dims), dtype, requires_grad, whether a parameter
    -- as an interned int (:func:`_intern`), cached on the value."""
    lk = v.lkey
    if lk is None or lk[0] != v.requires_grad:
        key = ("leaf", v.shape if v.sym is None else ("sym", v.sym), v.dtype.value, v.requires_grad,
               v.param is not None)
        lk = v.lkey = (v.requires_grad, _intern(key))
    return lk[1]


class _Plan:
    """The canonical walk of the records behind some outputs: leaves, operations, key.

    A reference to a value in the key (and in ``op_refs`` / ``out_refs``) is ``-1 - i`` for leaf ``i`` and
    ``(j, idx)`` for output ``idx`` of operation ``j``."""

    __slots__ = ("leaves", "ops", "op_refs", "holds", "out_refs", "key")

    def __init__(self, outputs: list[_Val]):
        hist = self._history_roots(outputs) if len(_with_history) else _NO_HIST
        leaf_index: dict[int, int] = {}
        op_index: dict[int, int] = {}
        leaves: list[_Val] = []
        op_list: list[_Op] = []
        op_refs: list[tuple] = []
        holds: list = []  # objects the operation keys name by id (modules, optimizers, functions)
        op_keys = []
        leaf_keys = []
        out_refs = []
        # A value is a leaf (a graph input) when it is read from the host or realized -- unless a pending backward
        # differentiates through it (``hist``): then it is recomputed from its operation.
        def leaf_ref(v) -> int:
            # a value's reference as a leaf (numbered in order of first use)
            i = leaf_index.get(id(v))
            if i is None:
                i = leaf_index[id(v)] = len(leaves)
                leaves.append(v)
                leaf_keys.append(_leaf_key(v))
            return -1 - i

        for out in outputs:
            if out.getter is not None or (out.value is not None and (out.op is None or id(out) not in hist)):
                out_refs.append(leaf_ref(out))
                continue
            root = out.op
            if id(root) not in op_index:
                # iterative post-order DFS over operations (an operation is emitted once the operations of its
                # inputs are); leaves are numbered in order of first use
                stack = [root]
                while stack:
                    op = stack[-1]
                    if id(op) in op_index:
                        stack.pop()
                        continue
                    depth = len(stack)
                    for i in op.inputs:
                        if i.getter is None and (i.value is None or (i.op is not None and id(i) in hist)) \
                                and id(i.op) not in op_index:
                            stack.append(i.op)
                    if len(stack) != depth:
                        continue
                    stack.pop()
                    refs = []
                    for i in op.inputs:
                        if i.getter is not None or (i.value is not None and (i.op is None or id(i) not in hist)):
                            refs.append(leaf_ref(i))
                        else:
                            refs.append((op_index[id(i.op)], i.idx))
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
                if op.key[0] == "grad":
                    roots.append(op.inputs[0])
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

        def gt_of(r):
            return leaf_gts[-1 - r] if type(r) is int else results[r[0]][r[1]]

        for op, refs in zip(self.ops, self.op_refs):
            ins = [gt_of(r) for r in refs]
            raw = op.build(cx, ins)
            flat: list = []
            _flatten(raw, flat)
            any_rg = any(i.requires_grad for i in op.inputs)
            outs = []
            for t, rg in zip(flat, op.out_rg):
                if any_rg and not rg and t.dtype.is_float:
                    t = _stop_gradient(t)
                outs.append(t)
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
        if t is not None and t._v.pending:
            alive.append(t._v)
            keep.append(w)
    _tls.pending = keep
    return alive, keep


def _seq_of(v: _Val) -> int:
    return v.seq


def realize(targets=(), what: str = "read a tensor's value"):
    """Run every pending, still referenced tensor of this thread (and ``targets``) as one cached graph."""
    tracing = _tls.tracing
    if tracing is not None:
        tracing.fail(what)
    vals = [v for v in targets if v.pending] if targets else []
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
    position: dict = {}  # id(value) -> its index in outputs
    outputs = []
    for v in vals:
        if id(v) not in position:
            position[id(v)] = len(outputs)
            outputs.append(v)
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
            v.op = None
        else:
            _with_history.add(v)
    if effects:
        apply_effects(effects, position, values, entry)
    pending = _tls.pending
    if pending is keep and len(pending) == len(live):
        _tls.pending = []  # every value it held was an output of this run (nothing was recorded meanwhile)
    else:
        _tls.pending = [w for w in pending if (w() is not None and w()._v.pending)]


def apply_effects(effects, position: dict, values, entry) -> None:
    """Run the effect callbacks (host-state writes) with their values; arrays they free (an old parameter value
    that nothing else holds) become the output buffers of the next run."""
    internal = None
    donated = []
    for evals, callback in effects:
        freed = callback([values[position[id(v)]] for v in evals]) or []
        del callback
        if freed and internal is None:
            internal = entry.internal_refs()
        getrefcount = sys.getrefcount
        while freed:
            j, old = freed.pop()
            # held only here (this name and getrefcount's argument) and inside the graph, and no view of it
            # anywhere (see luminal.runtime.cpu.exclusively_held): reuse its memory
            if _own_memory(old) and getrefcount(old) - internal.get(id(old), 0) <= 2:
                donated.append((position[id(evals[j])], old))
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
    plan = _Plan(outputs)
    entry = _cache.get(plan.key)
    if entry is not None and not _same(entry.hold_refs, plan.holds):
        entry = None  # a module (or function) the key names by id was freed and its id reused: build again
    if entry is None:
        with _lock:
            entry = _cache.get(plan.key)
            if entry is not None and not _same(entry.hold_refs, plan.holds):
                _cache.pop(plan.key).release()
                entry = None
            if entry is None:
                entry = plan.build()
                _cache[plan.key] = entry
                while len(_cache) > _CACHE_SIZE:
                    _, old = _cache.popitem(last=False)
                    old.release()
    else:
        _stats["cache_hits"] += 1
        try:
            _cache.move_to_end(plan.key)
        except KeyError:
            pass
    if leaf_override:
        leaf_values = [leaf_override[id(v)] if id(v) in leaf_override else v.host() for v in plan.leaves]
    else:
        leaf_values = [v.getter() if v.getter is not None else v.value for v in plan.leaves]
    return entry.run(leaf_values), entry


from .tensor import Tensor  # noqa: E402  (the handle class uses the engine above)
