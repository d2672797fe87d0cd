"""``lm.optim``: the optimizers of :mod:`luminal.training` with PyTorch's eager ``step()`` / ``zero_grad()``.

Each class *is* the training optimizer (same update rules, parameter groups, ``state_dict``, ``minimize`` for
lazy graphs); ``step()`` adds the eager form: the update of every parameter with a ``.grad`` is recorded as one
operation (the optimizer's own per-parameter update rule, ``_update``) and realized together with the pending
forward and backward pass, in one compiled graph that later steps replay. Hyperparameters (learning rate,
betas...) and the step count are inputs of that graph, read at every step, so schedulers never recompile.

    opt = lm.optim.Adam(model.parameters(), lr=1e-3)
    for xb, yb in batches:
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
"""

from __future__ import annotations

import operator
import sys

import numpy as np

from ..training import optim as _optim
from ..training import optim_extra as _optim_extra
from ..training import lr_scheduler  # noqa: F401  (lm.optim.lr_scheduler, as torch.optim.lr_scheduler)
from . import _core
from ._core import _Val, param_tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta",
           "Rprop", "lr_scheduler"]


class _EagerStep:
    """Mixin giving a :mod:`luminal.training` optimizer PyTorch's eager ``step()`` and ``zero_grad()``."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter (``set_to_none=False`` keeps zero tensors instead)."""
        for p in self._params():
            if set_to_none:
                t = p.__dict__.get("_eager")  # (no eager tensor yet: no gradient to clear)
                if t is not None:
                    t._v.grad = None
                continue
            t = param_tensor(p)
            if t.grad is None:
                t.grad = None
            else:
                from .creation import zeros
                t.grad = zeros(p.shape, dtype=p.dtype)

    def step(self, closure=None):
        """Update every parameter that has a ``.grad`` (recorded, then realized with the pending work)."""
        loss = None
        if closure is not None:
            with _core.enable_grad():
                loss = closure()
        # which parameters have a gradient (and their records): the step's structure; everything else about it
        # (inputs, the update's build, output shapes) is made once per structure (_StepPlan) and reused
        sig = []
        params: list = []
        grads: list = []
        for gi, group in enumerate(self.param_groups):
            live = []
            for p in group["params"]:
                if p.requires_grad:
                    pv = param_tensor(p)._v
                    g = pv.grad
                    if g is not None:
                        live.append(pv)
                        grads.append(g._v)
            if live:
                # parameters of one group may have taken different numbers of steps (one had no gradient for a
                # while): each keeps its own step count, as in torch, so its bias corrections are its own
                state = self.state
                steps = [state[v.param]["step"] if v.param in state else 0 for v in live]
                low = min(steps)
                lag = None if max(steps) == low else tuple(n - low for n in steps)
                sig.append((gi, id(group), tuple([id(v) for v in live]), tuple(self._state_names(group)),
                            _group_structure(group), lag))
                params.extend(live)
        if not sig:
            return loss
        sig = tuple(sig)
        plans = self.__dict__.get("_eager_plans")
        if plans is None:
            plans = self.__dict__["_eager_plans"] = {}
        plan = plans.get(sig)
        if plan is None:
            if len(plans) >= 64:
                plans.clear()
            plan = plans[sig] = _StepPlan(self, sig, params)
        plan.init_state()
        inputs = list(plan.inputs)
        for slot, v in zip(plan.grad_slots, grads):
            inputs[slot] = v
        results = plan.record(inputs)
        _core._tls.effects.append((results, plan.apply))
        tr = _core._tls.tracing
        if tr is None:
            _core.realize((), "optimizer step()")
        else:  # (inside lm.jit: what follows runs after this update, see luminal.eager.jit)
            tr.cut()
        return loss


def _group_structure(group: dict) -> tuple:
    """What of a parameter group decides the update's graph (not its input values): flags and strings as they
    are, and for each number whether it is zero (``weight_decay``, ``momentum``, ``lr_decay``... switch terms of
    the update on or off). The learning rate and other per-step values are inputs, so changing them (a scheduler)
    keeps the compiled update. (Computed at every ``step()``: the common types are tested first.)"""
    out = []
    for k, v in group.items():
        if k in _NOT_STRUCTURE:
            continue
        t = type(v)
        if t is float or t is int:
            out.append((k, v != 0, v > 0))
        elif t is bool or t is str or v is None or isinstance(v, (bool, str)):
            out.append((k, v))
        elif isinstance(v, (int, float)):
            out.append((k, v != 0, v > 0))
    out.sort(key=_first)  # (by option name, as the keys of every group are not in the same order)
    return tuple(out)


_NOT_STRUCTURE = frozenset(("params", "lr", "initial_lr"))
_first = operator.itemgetter(0)


class _StepPlan:
    """One structure of an eager ``step()`` (which parameters of which groups have a gradient): its inputs (the
    gradient slots filled in at each step), the update's build, the output shapes, the effect callback."""

    def __init__(self, opt, sig, param_vals):
        self.opt = opt
        self.param_vals = param_vals  # (kept: the structure names them by id)
        inputs: list = []
        plan = []  # per group: (group index, [(param, state names, slots, hyper slot)])
        groups = opt.param_groups
        k = 0
        grad_slots = []
        for gi, _, ids, names, _, lag in sig:
            group = groups[gi]
            live_vals = param_vals[k:k + len(ids)]
            k += len(ids)
            live = [v.param for v in live_vals]
            lags = lag if lag is not None else (0,) * len(live)
            hyper_slots = {}  # (dtype, lag) -> slot: parameters that took as many steps share their hyper scalars
            hyper_len = len(opt._hyper(group, 1))
            for p, lg in zip(live, lags):
                if (p.dtype, lg) not in hyper_slots:
                    hyper_slots[(p.dtype, lg)] = len(inputs)
                    inputs.append(_Val((hyper_len,), p.dtype, getter=lambda group=group, rep=[p], dt=p.dtype.numpy:
                                       np.asarray(opt._hyper(group, opt._next_step(rep)), np.float64).astype(dt)))
            entries = []
            for p, pv, lg in zip(live, live_vals, lags):
                slots = [len(inputs), len(inputs) + 1]
                inputs.append(pv)
                grad_slots.append(len(inputs))
                inputs.append(None)  # the gradient: filled in at each step
                for name in names:
                    slots.append(len(inputs))
                    inputs.append(_Val(p.shape, p.dtype, getter=lambda p=p, name=name: opt.state[p][name]))
                entries.append((p, list(names), slots, hyper_slots[(p.dtype, lg)]))
            plan.append((gi, entries))
        self.inputs = inputs
        self.grad_slots = grad_slots
        self.order = [(p, names) for _, entries in plan for p, names, _, _ in entries]
        self.init_order = [(p, names, groups[gi]) for gi, entries in plan for p, names, _, _ in entries]

        def build(graph, gts):
            outs = []
            for gi, entries in plan:
                group = opt.param_groups[gi]
                hypers = {}
                for p, names, slots, hs in entries:
                    h = hypers.get(hs)
                    if h is None:
                        h = hypers[hs] = _optim._Hyper(gts[hs], p.dtype)
                    pt, g = gts[slots[0]], gts[slots[1]]
                    bufs = {name: gts[s] for name, s in zip(names, slots[2:])}
                    new_p, new_bufs = opt._update(pt, g.cast(p.dtype), h, bufs, group)
                    outs.append(new_p.cast(p.dtype))
                    outs.extend(new_bufs[name].cast(p.dtype) for name in names)
            return tuple(outs)
        self.build = build
        shapes = []
        for gi, entries in plan:
            for p, names, _, _ in entries:
                shapes.extend([(tuple(p.shape), p.dtype)] * (1 + len(names)))
        spec = (tuple, tuple(("T", i) for i in range(len(shapes))))
        self.spec_outs = (spec, shapes)
        structure = tuple((gi, tuple((tuple(names), tuple(slots), hs) for _, names, slots, hs in entries))
                          for gi, entries in plan)
        # the group options the update's Python branches read (weight_decay != 0, maximize, nesterov...) are part
        # of the structure: changing one after the first step builds and compiles a new update
        self.key = ("optim", type(opt).__qualname__, id(opt), structure, tuple(entry[4] for entry in sig))
        self.kid = _core._intern(self.key)
        self.hold = [opt]
        self.out_rg = (False,) * len(shapes)
        self.last = None  # the result values of the last step (see record)

    def record(self, inputs: list) -> list:
        """Record the update over ``inputs``: its result values (read by :meth:`apply` only). The last step's
        values are recorded again when nothing else holds them any more (else new ones are made)."""
        last = self.last
        if last is not None and _core._tls.tracing is None and sys.getrefcount(last) <= 3:  # (self.last, last, arg)
            for v in last:
                if sys.getrefcount(v) > 3:  # (the list, v, the argument): held elsewhere
                    break
            else:
                op = _core._Op(self.key, self.build, tuple(inputs), self.spec_outs[0], self.out_rg, self.hold,
                               self.kid)
                seq = _core._seq
                for v in last:  # (shape, dtype, index... are the same; no Tensor handle ever saw them)
                    v.value = None
                    v.op = op
                    v.seq = next(seq)
                return last
        self.last = _core._record_effect(self.key, self.build, inputs, self.hold, self.spec_outs, self.kid)
        return self.last

    def init_state(self) -> None:
        """Create the state buffers that do not exist yet (a new parameter, a cleared or loaded state)."""
        state = self.opt.state
        for p, names, group in self.init_order:
            st = state.get(p)
            if st is None:
                st = state[p] = {"step": 0}
            for name in names:
                if st.get(name) is None:
                    st[name] = self.opt._init_state(name, p, group)

    def apply(self, values):
        """Write the step's results: the new parameter values and state; returns the old values, reusable as
        the next run's output buffers if nobody else holds them."""
        state = self.opt.state
        freed = []
        k = 0
        for p, names in self.order:
            st = state[p]
            freed.append((k, p.data))
            p.data = values[k]
            k += 1
            for name in names:
                if st.get(name) is not None:
                    freed.append((k, st[name]))
                st[name] = values[k]
                k += 1
            st["step"] += 1
        if self.last is not None:
            for v in self.last:  # (the records kept for the next step must not keep these arrays alive)
                v.value = None
        return freed


class Optimizer(_EagerStep, _optim.Optimizer):
    """Base class (see :class:`luminal.training.Optimizer`) with eager ``step()``/``zero_grad()``."""


class SGD(_EagerStep, _optim.SGD):
    """:class:`luminal.training.SGD` with eager ``step()``/``zero_grad()``."""


class Adam(_EagerStep, _optim.Adam):
    """:class:`luminal.training.Adam` with eager ``step()``/``zero_grad()``."""


class AdamW(_EagerStep, _optim.AdamW):
    """:class:`luminal.training.AdamW` with eager ``step()``/``zero_grad()``."""


class RMSprop(_EagerStep, _optim.RMSprop):
    """:class:`luminal.training.RMSprop` with eager ``step()``/``zero_grad()``."""


class Adagrad(_EagerStep, _optim.Adagrad):
    """:class:`luminal.training.Adagrad` with eager ``step()``/``zero_grad()``."""


class Adamax(_EagerStep, _optim_extra.Adamax):
    """:class:`luminal.training.Adamax` with eager ``step()``/``zero_grad()``."""


class NAdam(_EagerStep, _optim_extra.NAdam):
    """:class:`luminal.training.NAdam` with eager ``step()``/``zero_grad()``."""


class RAdam(_EagerStep, _optim_extra.RAdam):
    """:class:`luminal.training.RAdam` with eager ``step()``/``zero_grad()``."""


class Adadelta(_EagerStep, _optim_extra.Adadelta):
    """:class:`luminal.training.Adadelta` with eager ``step()``/``zero_grad()``."""


class Rprop(_EagerStep, _optim_extra.Rprop):
    """:class:`luminal.training.Rprop` with eager ``step()``/``zero_grad()``."""
