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
import threading
import weakref
from typing import Callable

import numpy as np

from .. import ops
from ..dtype import DType, as_dtype
from ..graph import Graph
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
        _hints.clear()
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
                 "lkey", "grad", "hooks", "retains", "__weakref__")

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
        self.hooks = None  # {id: fn} gradient hooks (Tensor.register_hook), see eager/autograd.py
        self.retains = False  # retain_grad() was called

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
            from ..rng import eager_build
            with eager_build():
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
        t = make(_Val(shape, dt, None, None, op, k, r))  # (positional: this runs for every recorded result)
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
    return [_Val(shape, dt, None, None, op, k) for k, (shape, dt) in enumerate(outs)]


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
    # (named_parameters() then named_buffers(): the same order; a tensor shared by two modules once)
    params = [p for m in modules for p in m._parameters.values()]
    params += [b for m in modules for b in m._buffers.values()]
    if len(set(map(id, params))) != len(params):
        params = list({id(p): p for p in params}.values())
    vals += [param_tensor(p)._v for p in params]

    def build(graph, gts):
        from ..module_hooks import building
        with building():  # the module's hooks ran at the call, on eager tensors
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


# Realization (the compile cache, the canonical walk, running a plan) lives in _realize.py.
from ._realize import (_CACHE_SIZE, _Entry, _Plan, _cache, _dedupe, _hints, _leaf_key,  # noqa: E402,F401
                       _pending_live, _seq_of, apply_effects, realize, run_plan)
from .tensor import Tensor  # noqa: E402  (the handle class uses the engine above)
