"""``lm.jit(fn)``: trace a Python function of tensors once per input signature, compile, replay.

    @lm.jit
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for xb, yb in batches:
        loss = train_step(xb, yb)       # numpy arrays or eager tensors

The first call with a given *signature* (the shapes and dtypes of the tensor arguments, the values of the other
arguments) runs ``fn`` once on eager tensors while recording -- nothing is computed during the trace -- and
compiles everything it did (the returned tensors and the side effects: parameter and optimizer-state updates
of ``opt.step()``) into one graph. Later calls with the same signature do not run ``fn`` at all: they bind the
new arguments to that graph, run it and apply the recorded updates. A new signature traces again.

Module parameters, optimizer state and hyperparameters (learning rate...) are read at every call, so they may
change between calls (``load_state_dict``, a scheduler). Tensors made inside ``fn`` from Python data are
constants of the trace. Reading a tensor's value inside ``fn`` (``if loss > 0:``, ``float(t)``, ``t.item()``,
``t.numpy()``) raises :class:`luminal.eager.JitTraceError` naming the function: the trace cannot depend on data
(``print(t)`` prints ``Tensor(shape=..., dtype=..., traced)`` while tracing, and nothing on replays).
Returned tensors carry no gradient history. ``lm.jit(fn, dynamic="batch")`` makes dims symbolic: calls that
differ only in those sizes share one trace and one compiled graph (see :func:`jit`).

An optimizer ``step()`` inside ``fn`` ends a *segment* of the trace: what comes after it (a second forward and
step, using the model after its update, returning predictions of the updated model) reads the parameters and
optimizer state as the step left them, as in eager PyTorch. A call runs one compiled graph per segment, each
after the updates of the one before; values of an earlier segment that later code reads (the loss, an
accumulated ``.grad``) are passed on. The usual train step (forward, backward, one ``step()``, ``zero_grad()``,
return the loss) is one segment: one graph per call.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from . import _core
from ._core import JitTraceError, _Val
from .tensor import Tensor

__all__ = ["jit", "JitTraceError"]


def jit(fn=None, *, dynamic=None):
    """Compile ``fn`` per input signature (see the module docstring). Usable as ``@lm.jit``, ``lm.jit(fn)`` or
    ``@lm.jit(dynamic=...)``.

    ``dynamic`` makes dims symbolic, so that calls differing only in those sizes share one trace and one
    compiled graph: a symbol name (``dynamic="batch"``: dim 0 of every tensor argument), or a dict from argument
    position or keyword name to ``{dim: symbol name}`` (``dynamic={0: {0: "batch"}, "y": {0: "batch"}}``). Dims
    with the same name must have the same size in a call. Inside ``fn``, write shape-independent code
    (``reshape(-1, n)``, not ``reshape(x.shape[0], n)``: ``x.shape`` holds the traced call's sizes)."""
    if fn is None:
        return lambda f: jit(f, dynamic=dynamic)
    if not callable(fn):
        raise TypeError(f"lm.jit expects a function, got {type(fn).__name__}")
    if dynamic is not None and not isinstance(dynamic, (str, dict)):
        raise TypeError(f"lm.jit: dynamic must be a symbol name or a dict {{argument: {{dim: name}}}}, got "
                        f"{type(dynamic).__name__}")
    return Jitted(fn, dynamic)


class _Trace:
    """What one traced call did: the argument placeholders, the output structure, the segments (see
    :meth:`cut`) with their updates."""

    def __init__(self, fn, name):
        self.fn = fn
        self.name = name
        self.cuts: list = []  # (the first value number after the segment, its effects) per step() so far

    def cut(self) -> None:
        """End the current segment at an optimizer ``step()`` (called by it after recording its update): the
        code after it runs after the update is applied, so it sees the new parameters and state."""
        tls = _core._tls
        self.cuts.append((next(_core._seq), tls.effects))
        tls.effects = []

    def fail(self, what: str):
        raise JitTraceError(
            f"lm.jit({self.name}): the function reads a tensor's value while it is being traced ({what}). "
            "Data-dependent Python control flow (`if t > 0:`, float(t), t.item(), t.numpy(), np.asarray(t)) "
            "cannot be compiled into one graph; use lm.where(cond, a, b) / tensor ops, or move the read out "
            "of the jitted function")

    def finish(self, outputs: list, effects: list) -> None:
        """Split what was recorded into segments: each computes its updates' values and the values of it that
        later segments (or the outputs) read; a segment with nothing to compute is dropped."""
        bounds = [b for b, _ in self.cuts] + [float("inf")]
        all_effects = [e for _, e in self.cuts] + [effects]
        roots = [[v for vals, _ in eff for v in vals] for eff in all_effects]
        roots[-1] = roots[-1] + list(outputs)

        def segment_of(v) -> int:
            return next(i for i, b in enumerate(bounds) if v.seq < b)

        exports: list = [[] for _ in bounds]
        for j in range(len(bounds) - 1, 0, -1):  # what segment j reads of earlier segments
            stack, seen = list(roots[j]), set()
            while stack:
                v = stack.pop()
                if id(v) in seen or not v.pending:
                    continue
                seen.add(id(v))
                i = segment_of(v)
                if i < j:
                    exports[i].append(v)
                    continue
                stack.extend(v.op.inputs)
        self.segments = []
        for i in range(len(bounds)):
            vals = _core._dedupe([v for v in roots[i] if v.pending and segment_of(v) == i] + exports[i])
            if vals or all_effects[i]:
                self.segments.append((vals, all_effects[i]))
        self.outputs = outputs


class Jitted:
    """A function compiled by :func:`jit`: call it like the original. ``traces`` counts the signatures traced."""

    def __init__(self, fn, dynamic=None):
        self.fn = fn
        self.dynamic = dynamic
        self.name = getattr(fn, "__qualname__", repr(fn))
        self._traces: dict = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    @property
    def traces(self) -> int:
        """How many input signatures have been traced (each compiled once)."""
        return len(self._traces)

    def __call__(self, *args, **kwargs):
        if _core._tls.tracing is not None:  # called from inside another traced function: inline it
            return self.fn(*args, **kwargs)
        values: list = []
        syms = self._symbols(args, kwargs)
        key = (_signature(args, values, syms, 0), _signature(kwargs, values, syms, 0))
        if syms:
            self._check_symbols(args, kwargs, syms)
        with self._lock:
            entry = self._traces.get(key)
        if entry is None:
            entry = self._trace(args, kwargs)
            with self._lock:
                self._traces[key] = entry
        return self._run(entry, values)

    # ------------------------------------------------------------------ symbolic dims
    def _symbols(self, args, kwargs) -> dict:
        """``{id(top-level tensor argument): {dim: symbol}}`` from ``dynamic``."""
        dyn = self.dynamic
        if not dyn:
            return {}
        out = {}
        named = list(enumerate(args)) + list(kwargs.items())
        for key, a in named:
            if not isinstance(a, (Tensor, np.ndarray)):
                continue
            if isinstance(dyn, str):
                spec = {0: dyn} if np.ndim(a) >= 1 else {}
            else:
                spec = dyn.get(key, {})
            for d in spec:
                if not isinstance(d, int) or not -np.ndim(a) <= d < np.ndim(a):
                    raise ValueError(f"lm.jit({self.name}): dynamic dim {d!r} of argument {key!r} is out of range "
                                     f"for a {np.ndim(a)}-d tensor")
            if spec:
                out[id(a)] = {d % np.ndim(a): str(n) for d, n in spec.items()}
        return out

    def _check_symbols(self, args, kwargs, syms) -> None:
        sizes: dict = {}
        for a in list(args) + list(kwargs.values()):
            for d, name in syms.get(id(a), {}).items():
                n = np.shape(a)[d]
                if sizes.setdefault(name, n) != n:
                    raise ValueError(f"lm.jit({self.name}): symbolic dim '{name}' has sizes {sizes[name]} and {n} in "
                                     "the same call; dims with one name must agree")

    # ------------------------------------------------------------------ tracing
    def _trace(self, args, kwargs):
        tr = _Trace(self.fn, self.name)
        placeholders: list[_Val] = []
        syms = self._symbols(args, kwargs)
        targs = _substitute(args, placeholders, syms)
        tkwargs = _substitute(kwargs, placeholders, syms)
        _core.realize((), "lm.jit: pending work before tracing")  # nothing pending leaks into the trace
        tls = _core._tls
        saved = (tls.tracing, tls.pending, tls.effects)
        tls.tracing, tls.pending, tls.effects = tr, [], []
        try:
            result = self.fn(*targs, **tkwargs)
            effects = tls.effects
        finally:
            tls.tracing, tls.pending, tls.effects = saved
        outs: list = []
        spec = _flatten(result, outs)
        tr.placeholders = placeholders
        tr.spec = spec
        tr.finish([t._v for t in outs], effects)
        return tr

    def _run(self, tr, values):
        override = {id(p): v for p, v in zip(tr.placeholders, values)}
        by_id: dict = {}
        if len(tr.segments) == 1:
            (vals, effects), = tr.segments
            results, entry = _core.run_plan(vals, override) if vals else ([], None)
            by_id = {id(v): r for v, r in zip(vals, results)}
            _core.apply_effects(effects, {id(v): k for k, v in enumerate(vals)}, results, entry)
        else:
            with self._lock:  # (the values passed between segments are held in the traced records meanwhile)
                passed = []
                try:
                    for vals, effects in tr.segments:
                        results, entry = _core.run_plan(vals, override) if vals else ([], None)
                        by_id.update((id(v), r) for v, r in zip(vals, results))
                        _core.apply_effects(effects, {id(v): k for k, v in enumerate(vals)}, results, entry)
                        for v, r in zip(vals, results):  # later segments read these as realized leaves
                            v.value = r
                            passed.append(v)
                finally:
                    for v in passed:
                        v.value = None
        for v in tr.outputs:
            if id(v) not in by_id:  # (a placeholder or a constant returned as it is)
                by_id[id(v)] = override.get(id(v), v.value if v.value is not None else v.host())
        tensors = [Tensor._make(_Val(tuple(by_id[id(v)].shape), v.dtype, value=by_id[id(v)])) for v in tr.outputs]
        return _unflatten(tr.spec, tensors)


def _signature(obj, values: list, syms=None, depth=0):
    """A hashable signature of the arguments (symbolic dims by name); tensor values go to ``values``."""
    if isinstance(obj, (Tensor, np.ndarray)):
        if isinstance(obj, Tensor):
            values.append(obj.numpy())
            shape, dt, rg = obj.shape, obj.dtype.value, obj.requires_grad
        else:
            arr = _host(obj)
            values.append(arr)
            shape, dt, rg = arr.shape, str(arr.dtype), False
        spec = syms.get(id(obj)) if syms and depth <= 1 else None
        if spec:
            shape = tuple(spec.get(k, n) for k, n in enumerate(shape))
        return ("T", shape, dt, rg)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_signature(o, values, syms, depth + 1) for o in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, _signature(obj[k], values, syms, depth + 1)) for k in sorted(obj, key=str)))
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return (type(obj).__name__, obj)
    return ("o", type(obj).__qualname__, id(obj))


def _host(obj: np.ndarray) -> np.ndarray:
    if obj.dtype.kind in "biuf" and obj.flags.c_contiguous:
        return obj
    from .creation import _as_array
    return _as_array(obj)


def _substitute(obj, placeholders: list, syms=None, depth=0):
    if isinstance(obj, (Tensor, np.ndarray)):
        if isinstance(obj, Tensor):
            arr, rg = obj.numpy(), obj.requires_grad
        else:
            arr, rg = _host(obj), False
        v = _Val(tuple(arr.shape), _core.as_dtype(arr.dtype), value=arr, requires_grad=rg)
        spec = syms.get(id(obj)) if syms and depth <= 1 else None
        if spec:
            v.sym = tuple(spec.get(k, n) for k, n in enumerate(arr.shape))
        placeholders.append(v)
        return Tensor._make(v)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_substitute(o, placeholders, syms, depth + 1) for o in obj)
    if isinstance(obj, dict):  # (the order of _signature)
        return {k: _substitute(obj[k], placeholders, syms, depth + 1) for k in sorted(obj, key=str)}
    return obj


def _flatten(obj, outs: list):
    if isinstance(obj, Tensor):
        outs.append(obj)
        return ("T", len(outs) - 1)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return ("nt", type(obj), tuple(_flatten(o, outs) for o in obj))
    if isinstance(obj, (list, tuple)):
        return (type(obj), tuple(_flatten(o, outs) for o in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, _flatten(v, outs)) for k, v in obj.items()))
    return ("c", obj)


def _unflatten(spec, tensors):
    tag = spec[0]
    if tag == "T":
        return tensors[spec[1]]
    if tag == "c":
        return spec[1]
    if tag == "nt":
        return spec[1](*(_unflatten(s, tensors) for s in spec[2]))
    if tag == "dict":
        return {k: _unflatten(s, tensors) for k, s in spec[1]}
    return tag(_unflatten(s, tensors) for s in spec[1])
