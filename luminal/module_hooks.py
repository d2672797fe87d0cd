"""Module hooks, as PyTorch's: ``register_forward_pre_hook``, ``register_forward_hook``,
``register_full_backward_pre_hook`` and ``register_full_backward_hook`` (methods of :class:`luminal.module.Module`),
each returning a :class:`~luminal.eager.autograd.RemovableHandle`.

* Forward (pre-)hooks run at every call, with the call's tensors: eager tensors in eager mode, ``GraphTensor``s
  when the module is called while building a lazy graph (there they run once, at build time). An eager call of
  a module that has hooked submodules runs the module's ``forward`` on eager tensors (each submodule call is then
  a call of its own, which fires its hooks); a module called without hooks anywhere below it is recorded as one
  operation, as before.
* Backward hooks (eager tensors only) get the gradients of the module's outputs (``grad_output``) and of its
  positional tensor inputs (``grad_input``, None for an input that does not require grad), as torch's
  ``BackwardHook``: the inputs pass through an identity whose gradient is hooked
  (:mod:`luminal.eager.autograd`'s staged backward).

Hooks do not run while the eager engine rebuilds a recorded module call into a graph, and a function traced by
``lm.jit`` runs them only when it is traced.
"""

from __future__ import annotations

import threading

__all__ = ["register", "call", "building"]

_STORES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_state = {"used": False}  # whether any module hook was ever registered (the fast path of Module.__call__)
_tls = threading.local()


class building:
    """Within it, module calls skip their hooks (the eager engine building a recorded module call)."""

    def __enter__(self):
        self.prev = getattr(_tls, "off", False)
        _tls.off = True
        return self

    def __exit__(self, *exc):
        _tls.off = self.prev
        return False


def used() -> bool:
    return _state["used"]


def register(module, store: str, fn, with_kwargs: bool = False, prepend: bool = False):
    """File ``fn`` in the module's hook dict ``store``; returns its removable handle."""
    from .eager.autograd import add_hook
    hooks = module.__dict__.get(store)
    if hooks is None:
        hooks = {}
        object.__setattr__(module, store, hooks)
    handle = add_hook(hooks, fn, (fn, bool(with_kwargs)))
    if prepend:
        entry = hooks.pop(handle._key)
        items = list(hooks.items())
        hooks.clear()
        hooks[handle._key] = entry
        hooks.update(items)
    _state["used"] = True
    return handle


def _hooks(module, store: str) -> list:
    d = module.__dict__.get(store)
    return list(d.values()) if d else []


def has_hooks(module) -> bool:
    d = module.__dict__
    return any(d.get(s) for s in _STORES)


def any_below(module) -> bool:
    """Whether a submodule of ``module`` (not itself) has hooks."""
    return any(has_hooks(m) for m in module.modules() if m is not module)


def call(module, args, kwargs, plain):
    """``module(*args, **kwargs)`` with its hooks; ``plain(args, kwargs)`` is the call without them."""
    if getattr(_tls, "off", False):
        return plain(args, kwargs)
    from .module import _eager_args
    eager = _eager_args(args, kwargs)
    if eager:  # hooks see eager tensors where the call got numpy arrays (as the recorded call does)
        import numpy as np
        from .eager.tensor import Tensor
        args = tuple(Tensor(a) if isinstance(a, np.ndarray) else a for a in args)
    for fn, with_kw in _hooks(module, "_forward_pre_hooks"):
        out = fn(module, args, kwargs) if with_kw else fn(module, args)
        if out is not None:
            if with_kw:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {out!r}")
                args, kwargs = out
            else:
                args = out if isinstance(out, tuple) else (out,)
    bw = _hooks(module, "_backward_hooks")
    bw_pre = _hooks(module, "_backward_pre_hooks")
    setup = None
    if bw or bw_pre:
        if not eager:
            raise NotImplementedError(f"{type(module).__name__}: backward hooks work on eager tensors only (this call "
                                      "builds a lazy graph); use luminal.training.grad on the graph instead")
        from .eager import _core
        if _core.is_grad_enabled():
            setup = _BackwardHook(module, bw, bw_pre)
            args = setup.setup_inputs(args)
    if eager and any_below(module):
        try:
            output = module.forward(*args, **kwargs)  # children fire their own hooks
        except AttributeError as err:
            if "'graph'" not in str(err):
                raise
            raise NotImplementedError(
                f"{type(module).__name__}.forward uses the graph-only API ({err}), so it cannot run on eager tensors "
                f"op by op, which hooks on its submodules need; register the hook on the "
                f"{type(module).__name__} itself") from err
    else:
        output = plain(args, kwargs)
    for fn, with_kw in _hooks(module, "_forward_hooks"):
        out = fn(module, args, kwargs, output) if with_kw else fn(module, args, output)
        if out is not None:
            output = out
    if setup is not None:
        output = setup.setup_outputs(output)
    return output


class _Group:
    """A set of values whose gradients one hook sees together (eager/autograd.py calls ``run``)."""

    def __init__(self, run):
        self.run = run


class _BackwardHook:
    """torch's ``BackwardHook``: identities on the inputs and hooks on the outputs of one module call."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.tensor_pos: list = []  # the positions of the tensor args (grad_input has one entry per one)
        self.positions: list = []  # those that require grad (they pass through a hooked identity)
        self.n_out = 1
        self.grad_output = None

    def setup_inputs(self, args):
        from .eager.tensor import Tensor
        self.tensor_pos = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
        args = list(args)
        clones = []
        for k, a in enumerate(args):
            if isinstance(a, Tensor) and a.requires_grad:
                args[k] = a.clone()
                self.positions.append(k)
                clones.append(args[k])
        if clones:
            _mark(clones, _Group(self._inputs_done))
        return tuple(args)

    def setup_outputs(self, output):
        from .eager.tensor import Tensor
        outs = output if isinstance(output, (tuple, list)) else (output,)
        self.n_out = len(outs)
        hooked = [t for t in outs if isinstance(t, Tensor) and t.requires_grad]
        self.out_index = [k for k, t in enumerate(outs) if isinstance(t, Tensor) and t.requires_grad]
        if hooked:
            _mark(hooked, _Group(self._outputs_done))
        return output

    def _outputs_done(self, grads):
        go = [None] * self.n_out
        for k, g in zip(self.out_index, grads):
            go[k] = g
        go = tuple(go)
        for fn, _ in self.pre_hooks:
            out = fn(self.module, go)
            if out is not None:
                go = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                if len(go) != self.n_out:
                    raise RuntimeError(f"backward pre hook returned {len(go)} gradients, expected {self.n_out}")
        self.grad_output = go
        if not self.positions:  # no input requires grad: torch calls the hooks now, with grad_input None
            gi = (None,) * len(self.tensor_pos)
            for fn, _ in self.hooks:
                fn(self.module, gi, go)
        return [go[k] for k in self.out_index]

    def _inputs_done(self, grads):
        gi = [None] * len(self.tensor_pos)
        slot = {pos: j for j, pos in enumerate(self.tensor_pos)}
        for pos, g in zip(self.positions, grads):
            gi[slot[pos]] = g
        gi = tuple(gi)
        go = self.grad_output if self.grad_output is not None else (None,) * self.n_out
        for fn, _ in self.hooks:
            out = fn(self.module, gi, go)
            if out is not None:
                out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                if len(out) != len(gi):
                    raise RuntimeError(f"backward hook returned {len(out)} gradients, expected {len(gi)} "
                                       f"(one per tensor argument)")
                gi = out
        return [gi[slot[pos]] for pos in self.positions]


def _mark(tensors, group) -> None:
    from .eager import autograd
    for t in tensors:
        autograd.groups[t._v] = group
