"""Eager autograd: ``Tensor.backward``, ``lm.autograd.grad`` and tensor gradient hooks.

A backward pass is *recorded* like any other operation (``("grad", ...)`` records, computed with the next
realization in the same compiled graph as the forward pass) by :func:`luminal.training.autograd.vjp`, whose
backward nodes are ordinary graph ops: with ``create_graph=True`` the gradients keep their history and can be
differentiated again (gradient penalties, Hessian-vector products, MAML).

Hooks (``Tensor.register_hook``, ``retain_grad``, module backward hooks) are Python functions of the gradient,
run eagerly. The backward pass is then recorded in *stages*, as PyTorch's engine reaches the hooked tensors: the
hooked non-leaf tensors are visited from the latest created to the earliest; each stage records the gradient
arriving at one of them (from the output and from the hooked tensors already visited, whose own consumers are cut
off), runs its hooks on it, and the (possibly replaced) gradient becomes a source of the next stages. The last
stage computes the gradients of the leaves (or of the requested inputs); leaf hooks run on those before they
are accumulated into ``.grad``.
"""

from __future__ import annotations

import weakref
from typing import Callable, Sequence

from . import _core
from ._core import _Val, _seq_of
from .tensor import Tensor

__all__ = ["grad", "backward", "RemovableHandle"]


class RemovableHandle:
    """What the ``register_*hook`` functions return: ``handle.remove()`` unregisters the hook (as
    ``torch.utils.hooks.RemovableHandle``; also a context manager that removes it on exit)."""

    __slots__ = ("_store", "_key")

    def __init__(self, store: dict, key):
        self._store = store
        self._key = key

    def remove(self) -> None:
        """Unregister the hook (a second call does nothing)."""
        self._store.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


_hook_ids = iter(range(1 << 62))
groups = weakref.WeakKeyDictionary()  # value -> key of the group its hooks run with (a module's inputs)


def add_hook(store: dict, fn: Callable, entry=None) -> RemovableHandle:
    """File ``fn`` (as ``entry`` when given) in the ordered ``store`` and return its handle."""
    if not callable(fn):
        raise TypeError(f"a hook must be callable, got {type(fn).__name__}")
    key = next(_hook_ids)
    store[key] = fn if entry is None else entry
    return RemovableHandle(store, key)


def register_hook(t, fn: Callable) -> RemovableHandle:
    """``Tensor.register_hook``: ``fn(grad)`` runs when the gradient of ``t`` is computed (eagerly, on an eager
    tensor); a non-None result replaces the gradient."""
    v = t._v
    if not v.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if v.hooks is None:
        v.hooks = {}
    return add_hook(v.hooks, fn)


def retain_grad(t) -> None:
    """``Tensor.retain_grad``: a non-leaf tensor keeps its gradient in ``.grad`` after ``backward()`` (a hook)."""
    v = t._v
    if not v.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if _is_leaf(v) or v.retains:
        return
    v.retains = True

    def keep(g, v=v):
        with _core.no_grad():
            v.grad = g if v.grad is None else v.grad + g
    register_hook(t, keep)


def _is_leaf(v: _Val) -> bool:
    return v.getter is not None or v.op is None


def _walk(sources: Sequence[_Val], seen: set | None = None) -> list:
    """Every value requiring grad that the ``sources`` depend on through recorded operations (sources included);
    their ids are added to ``seen``."""
    out, stack = [], list(sources)
    if seen is None:
        seen = set()
    while stack:
        x = stack.pop()
        if id(x) in seen or not x.requires_grad:
            continue
        seen.add(id(x))
        out.append(x)
        if x.getter is None and x.op is not None:  # (not _is_leaf(x), inlined: a walk of every step)
            stack.extend(x.op.inputs)
    return out


def _reachable(sources: Sequence[_Val], cut: set) -> set:
    """ids of the values the ``sources`` reach, not going on through the values of ``cut`` (ids) unless they are
    sources themselves."""
    seen, stack = set(), [(s, True) for s in sources]
    while stack:
        x, is_src = stack.pop()
        if id(x) in seen or not x.requires_grad:
            continue
        seen.add(id(x))
        if (is_src or id(x) not in cut) and not _is_leaf(x):
            stack.extend((i, False) for i in x.op.inputs)
    return seen


_SPECS: dict = {}


def _stage(sources: list, targets: list, cut: list, create_graph: bool, reach: set | None = None) -> list:
    """Record the gradients of ``sum <source, seed>`` for ``targets`` (values), cutting off the consumers of
    ``cut``; returns one Tensor (or None where unused) per target. ``reach``: the ids of the values the sources
    reach (:func:`_reachable`), when the caller has them."""
    if reach is None:
        reach = _reachable([s for s, _ in sources], {id(c) for c in cut})
    used = [t for t in targets if id(t) in reach]
    if not used:
        return [None] * len(targets)
    srcs = [s for s, _ in sources]
    seeds = [g._v for _, g in sources if g is not None]
    has = tuple([g is not None for _, g in sources])
    inputs = srcs + seeds + used + list(cut)
    start, nu, nc = len(srcs) + len(seeds), len(used), len(cut)

    def build(graph, gts):
        from ..training.autograd import vjp
        it = iter(gts[len(srcs):start])
        pairs = [(gts[k], next(it) if h else None) for k, h in enumerate(has)]
        out = vjp(pairs, gts[start:start + nu], cut=gts[start + nu:], allow_unused=True)
        return tuple(o if o is not None else graph.zeros(t.dims, t.dtype) for o, t in zip(out, gts[start:start + nu]))

    spec = _SPECS.get(nu)
    if spec is None:
        spec = _SPECS[nu] = (tuple, tuple(("T", i) for i in range(nu)))
    outs = [(t.shape, t.dtype) for t in used]
    key = ("grad", start, len(srcs), has, nu, nc)
    if create_graph:
        with _core.enable_grad():
            grads = _core._record(key, build, inputs, spec_outs=(spec, outs))
    else:  # (recorded without history: as under no_grad)
        grads = _core._record(key, build, inputs, spec_outs=(spec, outs), grad=False)
    if nu == len(targets):  # (used is targets)
        return list(grads)
    by_id = {id(t): g for t, g in zip(used, grads)}
    return [by_id.get(id(t)) for t in targets]


def _run_hooks(v: _Val, g):
    for fn in list((v.hooks or {}).values()):
        out = fn(g)
        if out is not None:
            out = _as_grad(out, v, "a hook")
            g = out
    return g


def _as_grad(g, v: _Val, what: str):
    if not isinstance(g, Tensor):
        g = Tensor(g, dtype=v.dtype)
    if g.shape != v.shape:
        raise RuntimeError(f"{what} returned a gradient of shape {g.shape}, expected {v.shape}")
    return g


def _engine(outputs: list, seeds: list, targets: list | None, create_graph: bool) -> tuple[list, list]:
    """The staged backward pass. ``targets`` None: every leaf. Returns (targets, their gradients or None)."""
    srcs = [o._v for o in outputs]
    reach: set = set()
    values = _walk(srcs, reach)
    if targets is None:
        targets = [x for x in values if x.getter is not None or x.op is None]  # the leaves
        targets.sort(key=_seq_of)
    hooked: dict = {}  # group key -> the hooked non-leaf values of that group
    grouped = len(groups) > 0  # (a membership test of the weak dictionary makes a weakref: skip it when empty)
    for x in values:
        if x.hooks or (grouped and x in groups):
            if not _is_leaf(x):
                hooked.setdefault(groups.get(x, id(x)), []).append(x)
    sources = list(zip(srcs, seeds))
    if not hooked:  # one stage, whose sources reach exactly the values walked above
        grads = _stage(sources, targets, [], create_graph, reach) if targets else []
        return targets, [_run_hooks(t, g) if g is not None and t.hooks and _is_leaf(t) else g
                         for t, g in zip(targets, grads)]
    done: dict = {}  # id(value) -> its (hooked) gradient
    cut: list = []
    for key, group in sorted(hooked.items(), key=lambda kv: -max(x.seq for x in kv[1])):
        grads = _stage(sources, group, cut, create_graph)
        cut.extend(group)
        if all(g is None for g in grads):
            continue
        grads = [None if g is None else _run_hooks(x, g) for x, g in zip(group, grads)]
        if not isinstance(key, int):  # a module's backward hook sees the group's gradients together
            grads = list(key.run(grads))
        for x, g in zip(group, grads):
            if g is not None:
                g = _as_grad(g, x, "a backward hook")
                done[id(x)] = g
                sources.append((x, g))
    rest = [t for t in targets if id(t) not in done]
    grads = dict(zip(map(id, rest), _stage(sources, rest, cut, create_graph) if rest else []))
    grads.update(done)
    result = []
    for t in targets:
        g = grads.get(id(t))
        if g is not None and _is_leaf(t) and t.hooks:
            g = _run_hooks(t, g)
        result.append(g)
    return targets, result


def _seeds(outputs, grad_outputs, what: str) -> list:
    seeds = []
    for k, o in enumerate(outputs):
        go = grad_outputs[k] if grad_outputs is not None else None
        if not o.requires_grad:
            raise RuntimeError(f"{what}: element {k} of tensors does not require grad and does not have a grad_fn")
        if go is None:
            if o.numel() != 1:
                arg = "gradient" if what == "backward()" else "grad_outputs"
                raise RuntimeError(f"{what}: grad can be implicitly created only for one-element outputs; output {k} "
                                   f"has shape {o.shape}; pass {arg}=")
            seeds.append(None)
            continue
        g = go if isinstance(go, Tensor) else Tensor(go, dtype=o.dtype)
        if g.shape != o.shape:
            raise RuntimeError(f"{what}: mismatch in shape: grad_output[{k}] has a shape of {g.shape} and output[{k}] "
                               f"has a shape of {o.shape}")
        seeds.append(g)
    return seeds


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
    """``torch.autograd.backward`` / ``Tensor.backward``: accumulate the gradients of ``tensors`` into the ``.grad``
    of the leaves they depend on (or of ``inputs`` only). Recorded: computed with the next realization.

    ``create_graph=True`` records the backward pass with history, so the ``.grad`` tensors (and functions of
    them) can be differentiated again. ``retain_graph`` is accepted and ignored: a recorded graph can always be
    differentiated again (PyTorch frees it after a backward without ``retain_graph=True``)."""
    outputs = _as_list(tensors)
    gos = None if grad_tensors is None else _as_list(grad_tensors)
    if gos is not None and len(gos) != len(outputs):
        raise RuntimeError(f"backward(): got {len(gos)} gradients for {len(outputs)} tensors")
    seeds = _seeds(outputs, gos, "backward()")
    targets = None if inputs is None else [t._v for t in _as_list(inputs)]
    targets, grads = _engine(outputs, seeds, targets, create_graph)
    for leaf, g in zip(targets, grads):
        if g is None:
            continue
        old = leaf.grad
        if old is None:
            leaf.grad = g
        else:
            with _core.set_grad_enabled(create_graph):
                leaf.grad = old + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         only_inputs: bool = True, allow_unused: bool | None = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple:
    """``torch.autograd.grad``: the gradients of ``outputs`` (weighted by ``grad_outputs``) with respect to
    ``inputs`` (leaves or intermediate tensors), returned as a tuple of tensors and not accumulated into
    ``.grad``.

    Args:
        outputs: a tensor or a sequence of tensors (each one-element, or paired with a ``grad_outputs`` entry).
        inputs: a tensor or a sequence of tensors that require grad.
        grad_outputs: the seeds (tensors, arrays, or None for a one-element output).
        retain_graph: accepted and ignored (a recorded graph can always be differentiated again).
        create_graph: record the backward pass with history, so the results can be differentiated again.
        allow_unused: None for an input the outputs do not depend on instead of a RuntimeError.
        materialize_grads: zeros instead of None for unused inputs (implies ``allow_unused``).
    """
    if is_grads_batched:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) is not supported; loop over the seeds")
    outs = _as_list(outputs)
    ins = _as_list(inputs)
    for k, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.grad: inputs[{k}] is a {type(t).__name__}, expected a Tensor")
        if not t.requires_grad:
            raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (inputs[{k}]) does not require grad")
    gos = None if grad_outputs is None else _as_list(grad_outputs)
    if gos is not None and len(gos) != len(outs):
        raise RuntimeError(f"autograd.grad: grad_outputs has {len(gos)} entries for {len(outs)} outputs")
    seeds = _seeds(outs, gos, "autograd.grad")
    if allow_unused is None:
        allow_unused = materialize_grads
    _, grads = _engine(outs, seeds, [t._v for t in ins], create_graph)
    result = []
    for k, (t, g) in enumerate(zip(ins, grads)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(f"autograd.grad: one of the differentiated Tensors (inputs[{k}]) appears to not "
                                   "have been used in the graph; set allow_unused=True if this is the desired "
                                   "behavior")
            if materialize_grads:
                from .creation import zeros
                g = zeros(t.shape, dtype=t.dtype)
        result.append(g)
    return tuple(result)
