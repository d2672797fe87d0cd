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

import numpy as np

from ..training import optim as _optim
from ..training import lr_scheduler  # noqa: F401  (lm.optim.lr_scheduler, as torch.optim.lr_scheduler)
from . import _core
from ._core import _Val, param_tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]


class _EagerStep:
    """Mixin giving a :mod:`luminal.training` optimizer PyTorch's eager ``step()`` and ``zero_grad()``."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter (``set_to_none=False`` keeps zero tensors instead)."""
        for p in self._params():
            t = param_tensor(p)
            if set_to_none or t.grad is None:
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
        inputs: list[_Val] = []
        plan = []  # per group: (group index, [(param, state names)], hyper slots)
        effects_vals: list[_Val] = []
        for gi, group in enumerate(self.param_groups):
            live = [p for p in group["params"] if p.requires_grad and param_tensor(p).grad is not None]
            if not live:
                continue
            names = self._state_names(group)
            hyper_slots = {}
            hyper_len = len(self._hyper(group, 1))
            for p in live:
                if p.dtype not in hyper_slots:
                    hyper_slots[p.dtype] = len(inputs)
                    inputs.append(_Val((hyper_len,), p.dtype, getter=lambda group=group, live=live, dt=p.dtype.numpy:
                                       np.asarray(self._hyper(group, self._next_step(live)), np.float64).astype(dt)))
            entries = []
            for p in live:
                st = self.state.setdefault(p, {"step": 0})
                for name in names:
                    if st.get(name) is None:
                        st[name] = self._init_state(name, p, group)
                slots = [len(inputs), len(inputs) + 1]
                inputs.append(param_tensor(p)._v)
                inputs.append(param_tensor(p).grad._v)
                for name in names:
                    slots.append(len(inputs))
                    inputs.append(_Val(p.shape, p.dtype, getter=lambda st=st, name=name: st[name]))
                entries.append((p, names, slots, hyper_slots[p.dtype]))
            plan.append((gi, entries))
        if not plan:
            return loss

        def build(graph, gts):
            outs = []
            for gi, entries in plan:
                group = self.param_groups[gi]
                hypers = {}
                for p, names, slots, hs in entries:
                    h = hypers.get(hs)
                    if h is None:
                        h = hypers[hs] = _optim._Hyper(gts[hs], p.dtype)
                    pt, g = gts[slots[0]], gts[slots[1]]
                    bufs = {name: gts[s] for name, s in zip(names, slots[2:])}
                    new_p, new_bufs = self._update(pt, g.cast(p.dtype), h, bufs, group)
                    outs.append(new_p.cast(p.dtype))
                    outs.extend(new_bufs[name].cast(p.dtype) for name in names)
            return tuple(outs)

        shapes = []
        for gi, entries in plan:
            for p, names, _, _ in entries:
                shapes.extend([(tuple(p.shape), p.dtype)] * (1 + len(names)))
        spec = (tuple, tuple(("T", i) for i in range(len(shapes))))
        structure = tuple((gi, tuple((tuple(names), tuple(slots), hs) for _, names, slots, hs in entries))
                          for gi, entries in plan)
        results = _core._record(("optim", type(self).__qualname__, id(self), structure), build, inputs,
                                hold=[self], spec_outs=(spec, shapes), grad=False)
        order = [(p, names) for _, entries in plan for p, names, _, _ in entries]
        effects_vals = [t._v for t in results]

        def apply(values):
            freed = []  # old values, reusable as the next run's output buffers if nobody else holds them
            k = 0
            for p, names in order:
                st = self.state[p]
                freed.append((k, p.data))
                p.data = values[k]
                k += 1
                for name in names:
                    if st.get(name) is not None:
                        freed.append((k, st[name]))
                    st[name] = values[k]
                    k += 1
                st["step"] += 1
            return freed
        _core._tls.effects.append((effects_vals, apply))
        if _core._tls.tracing is None:
            _core.realize((), "optimizer step()")
        return loss


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
