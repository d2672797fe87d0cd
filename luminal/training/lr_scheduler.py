"""Learning-rate schedulers with the semantics (and arithmetic) of ``torch.optim.lr_scheduler``.

A scheduler works on any optimizer-like object with ``param_groups``: a list of dicts, each with an ``"lr"``
entry (luminal's optimizers, torch's, or a stand-in). It rewrites ``group["lr"]`` in place; luminal's
optimizers read it at the next ``execute()``, so changing the learning rate never recompiles::

    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = CosineAnnealingLR(opt, T_max=100)    # the constructor already applies epoch 0's lr
    for epoch in range(100):
        train_one_epoch()
        sched.step()                             # after the optimizer steps, as in PyTorch

As in PyTorch, the constructor calls :meth:`LRScheduler.step` once (``last_epoch`` goes from ``-1`` to ``0``)
and stores each group's starting lr as ``group["initial_lr"]`` (which ``base_lrs`` is read from). Most
schedulers are *chainable* like PyTorch's: each step multiplies the group's current lr, so lr changes made
by someone else carry on. :class:`CosineAnnealingLR`, :class:`LambdaLR` and :class:`OneCycleLR` use closed
forms of the epoch instead. ``state_dict()`` holds only numbers, strings, lists and dicts (no functions), so
it fits in a JSON / ``.npz`` checkpoint.
"""

from __future__ import annotations

import copy
import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
           "PolynomialLR", "CosineAnnealingLR", "SequentialLR", "OneCycleLR", "ReduceLROnPlateau"]


def _check_optimizer(optimizer) -> None:
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) and "lr" in g for g in groups):
        raise TypeError(f"{type(optimizer).__name__} is not an optimizer: a scheduler needs an object whose "
                        "`param_groups` is a non-empty list of dicts, each with an 'lr' entry")


def _format_param(name: str, optimizer, value) -> list:
    """One value per param group: a list/tuple must match the number of groups, a scalar is repeated."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} must have the same length as optimizer.param_groups: {name} has {len(value)} "
                             f"values, param_groups has {n}")
        return list(value)
    return [value] * n


def _lrs(optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _check_positive_int(cls: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{cls}: {name} must be a positive integer, got {value!r}")


class LRScheduler:
    """Base class of the epoch-driven schedulers (PyTorch's ``torch.optim.lr_scheduler.LRScheduler``).

    Args:
        optimizer: an object with ``param_groups`` (a list of dicts with an ``"lr"`` key).
        last_epoch: the index of the last epoch done; ``-1`` starts fresh (sets each group's
            ``"initial_lr"`` to its ``"lr"`` where missing). Resuming with ``last_epoch >= 0`` needs every
            group to have ``"initial_lr"`` already (``KeyError`` otherwise).

    Attributes:
        optimizer: the wrapped optimizer.
        base_lrs: each group's ``"initial_lr"``.
        last_epoch: incremented by every :meth:`step`; ``0`` right after construction.

    Subclasses implement :meth:`get_lr` (and may add ``_get_closed_form_lr`` for ``step(epoch)``).
    """

    _state_exclude: tuple[str, ...] = ("optimizer", "_is_initial")

    def __init__(self, optimizer, last_epoch: int = -1):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming a "
                                   f"scheduler with last_epoch={last_epoch} (load the optimizer state first)")
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        """The step the constructor performs: ``last_epoch`` -> ``last_epoch + 1``, lrs applied."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The lrs for the current ``last_epoch`` (called by :meth:`step`; read :meth:`get_last_lr` instead)."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The lrs the last :meth:`step` set, one per param group."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or, deprecated in PyTorch, jump to ``epoch`` using the closed form if there is
        one) and write the new lrs into ``optimizer.param_groups``."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        groups = self.optimizer.param_groups
        if len(values) != len(groups):
            raise ValueError(f"{type(self).__name__}: computed {len(values)} lrs for {len(groups)} param groups "
                             "(param groups were added after the scheduler was created)")
        for group, lr in zip(groups, values):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict:
        """Everything but the optimizer (copied): numbers, strings and lists, safe to JSON-encode."""
        return {k: copy.deepcopy(v) for k, v in self.__dict__.items() if k not in self._state_exclude}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict` (the continuation is then identical to the saved scheduler's)."""
        self.__dict__.update({k: copy.deepcopy(v) for k, v in state_dict.items() if k not in self._state_exclude})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, last_lr={getattr(self, '_last_lr', None)})"


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``.

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the epoch, or a list of them (one per param group).
        last_epoch: see :class:`LRScheduler`.

    The functions are not saved by :meth:`state_dict` (callable objects' ``__dict__`` are, as in PyTorch).
    """

    def __init__(self, optimizer, lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
                 last_epoch: int = -1):
        _check_optimizer(optimizer)
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per param group), got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"LambdaLR: lr_lambda should be a function, got {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """``base_lr * lr_lambda(last_epoch)`` per group."""
        return [base_lr * fn(self.last_epoch) for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict:
        """As :meth:`LRScheduler.state_dict`; ``lr_lambdas`` holds ``None`` for plain functions."""
        state = {k: copy.deepcopy(v) for k, v in self.__dict__.items()
                 if k not in self._state_exclude and k != "lr_lambdas"}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else copy.deepcopy(fn.__dict__)
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict` (the functions themselves stay those given to the constructor)."""
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", None) or []
        super().load_state_dict(state)
        for fn, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                fn.__dict__.update(copy.deepcopy(saved))


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs.

    Args:
        optimizer: the optimizer.
        step_size: the period of the decay, in epochs (a positive integer).
        gamma: the multiplicative factor.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        _check_positive_int("StepLR", "step_size", step_size)
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs, times ``gamma`` when ``last_epoch`` is a positive multiple of ``step_size``."""
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone epoch (a repeated milestone multiplies repeatedly).

    Args:
        optimizer: the optimizer.
        milestones: epoch indices (any order).
        gamma: the multiplicative factor.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs, times ``gamma ** count`` at a milestone."""
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch] for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch) for base_lr in self.base_lrs]

    def state_dict(self) -> dict:
        """As :meth:`LRScheduler.state_dict`, with ``milestones`` as a sorted list (repeats kept)."""
        state = super().state_dict()
        state["milestones"] = sorted(self.milestones.elements())
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict`."""
        super().load_state_dict(state_dict)
        m = self.milestones
        self.milestones = Counter({int(k): int(v) for k, v in m.items()}) if isinstance(m, dict) \
            else Counter(int(v) for v in m)


class ConstantLR(LRScheduler):
    """Multiply the lr by ``factor`` until epoch ``total_iters``, then restore it.

    Args:
        optimizer: the optimizer.
        factor: in ``[0, 1]``.
        total_iters: the number of epochs the factor applies to.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if factor > 1.0 or factor < 0:
            raise ValueError(f"ConstantLR: factor must be between 0 and 1, got {factor}")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """``lr * factor`` at epoch 0, ``lr / factor`` at ``total_iters``, the current lr otherwise."""
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [group["lr"] * (1.0 / self.factor) for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Linear warmup/decay: the lr factor goes from ``start_factor`` to ``end_factor`` over ``total_iters``
    epochs, then stays.

    Args:
        optimizer: the optimizer.
        start_factor: the factor at epoch 0, in ``(0, 1]``.
        end_factor: the factor from epoch ``total_iters`` on, in ``[0, 1]``.
        total_iters: the number of epochs of the ramp (a positive integer).
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        _check_positive_int("LinearLR", "total_iters", total_iters)
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The chainable (PyTorch) form: the current lr times the ratio of consecutive factors."""
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        ratio = 1.0 + (self.end_factor - self.start_factor) / (
            self.total_iters * self.start_factor + (self.last_epoch - 1) * (self.end_factor - self.start_factor))
        return [group["lr"] * ratio for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch.

    Args:
        optimizer: the optimizer.
        gamma: the multiplicative factor.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The current lrs times ``gamma`` (unchanged at construction)."""
        if self._is_initial:
            return _lrs(self.optimizer)
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay to 0 over ``total_iters`` epochs: ``lr = initial_lr * (1 - epoch / total_iters) ** power``.

    Args:
        optimizer: the optimizer.
        total_iters: the number of decay epochs (a positive integer).
        power: the polynomial's power.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        _check_positive_int("PolynomialLR", "total_iters", total_iters)
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The chainable (PyTorch) form: the current lr times the ratio of consecutive decay factors."""
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        decay = ((1.0 - self.last_epoch / self.total_iters)
                 / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * decay for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    r"""Cosine annealing from ``initial_lr`` down to ``eta_min`` over ``T_max`` epochs (then back up, periodically):

    .. math:: \eta_t = \eta_{min} + (\eta_{base} - \eta_{min}) \frac{1 + \cos(\pi t / T_{max})}{2}

    The closed form above is evaluated at every step (PyTorch evaluates the equivalent recursive form; both
    agree to rounding). Unlike PyTorch's, lr changes made outside the scheduler are overwritten at the next
    step rather than carried on.

    Args:
        optimizer: the optimizer.
        T_max: the number of epochs of a half period (a positive integer).
        eta_min: the minimum lr.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        _check_positive_int("CosineAnnealingLR", "T_max", T_max)
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """The closed form at ``last_epoch`` (at construction: the groups' current lrs, as PyTorch)."""
        if self._is_initial:
            return _lrs(self.optimizer)
        return self._get_closed_form_lr()

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class SequentialLR(LRScheduler):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` (restarted at its epoch 0), ...

    Typical use: a :class:`LinearLR` warmup followed by :class:`CosineAnnealingLR`::

        warmup = LinearLR(opt, start_factor=0.1, total_iters=5)
        cosine = CosineAnnealingLR(opt, T_max=95)
        sched = SequentialLR(opt, [warmup, cosine], milestones=[5])

    Args:
        optimizer: the optimizer all the schedulers act on.
        schedulers: the schedulers, in order (not :class:`ReduceLROnPlateau`).
        milestones: ``len(schedulers) - 1`` increasing epochs at which to switch.
        last_epoch: see :class:`LRScheduler`.
    """

    def __init__(self, optimizer, schedulers: list, milestones: list[int], last_epoch: int = -1):
        _check_optimizer(optimizer)
        if len(schedulers) < 1:
            raise ValueError("SequentialLR expects at least one scheduler, got none")
        for i, s in enumerate(schedulers):
            if not hasattr(s, "optimizer"):
                raise TypeError(f"SequentialLR: the scheduler at index {i} should have an `optimizer` attribute")
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError("SequentialLR does not support ReduceLROnPlateau (its step needs a metric), got one "
                                 f"at index {i}")
            if s.optimizer is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same optimizer, but the "
                                 f"{type(s).__name__} at index {i} has a different one")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR expects one milestone fewer than schedulers, got {len(schedulers)} "
                             f"schedulers and {len(milestones)} milestones")
        self._schedulers = list(schedulers)
        self._milestones = [int(m) for m in milestones]
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:  # undo what the sub-schedulers' constructors did
            group["lr"] = group["initial_lr"]
        self._recursive_undo()
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def _recursive_undo(self, sched=None) -> None:
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self._recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:
        """Advance one epoch: step the active scheduler, or restart the next one at a milestone."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict:
        """The sequence's counters plus each sub-scheduler's state dict (under ``"_schedulers"``)."""
        state = {k: copy.deepcopy(v) for k, v in self.__dict__.items()
                 if k not in self._state_exclude and k != "_schedulers"}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict`, including the sub-schedulers'."""
        state = dict(state_dict)
        subs = state.pop("_schedulers")
        super().load_state_dict(state)
        for s, saved in zip(self._schedulers, subs):
            s.load_state_dict(saved)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): lr from ``max_lr / div_factor`` up to ``max_lr`` over a fraction
    ``pct_start`` of the steps, then down to ``initial_lr / final_div_factor``; stepped once per *batch*.

    With ``cycle_momentum`` the momentum (``group["momentum"]``, or ``group["betas"][0]`` for Adam-style
    optimizers) moves inversely between ``max_momentum`` and ``base_momentum``. Each group also gets
    ``"initial_lr"``, ``"max_lr"``, ``"min_lr"`` (and ``"max_momentum"``, ``"base_momentum"``) entries, as in
    PyTorch.

    Args:
        optimizer: the optimizer.
        max_lr: the peak lr (or one per group).
        total_steps: the number of steps in the cycle; or give ``epochs`` and ``steps_per_epoch``.
        epochs: with ``steps_per_epoch``: ``total_steps = epochs * steps_per_epoch``.
        steps_per_epoch: see ``epochs``.
        pct_start: the fraction of the steps spent increasing the lr, in ``[0, 1]``.
        anneal_strategy: ``"cos"`` or ``"linear"``.
        cycle_momentum: cycle the momentum (the groups must have ``"momentum"`` or ``"betas"``; pass
            ``False`` for optimizers without one, e.g. Adagrad).
        base_momentum: the lowest momentum (at the lr peak), or one per group.
        max_momentum: the highest momentum (at the start and end), or one per group.
        div_factor: ``initial_lr = max_lr / div_factor``.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``.
        three_phase: a third phase: up to ``max_lr``, symmetrically back to ``initial_lr``, then down to
            ``min_lr``.
        last_epoch: the index of the last *batch* done (see :class:`LRScheduler`).

    Raises:
        ValueError: stepping more than ``total_steps`` times (from :meth:`step`), or bad arguments.
    """

    def __init__(self, optimizer, max_lr: float | list[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85, max_momentum: float | list[float] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        if total_steps is not None:
            _check_positive_int("OneCycleLR", "total_steps", total_steps)
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            _check_positive_int("OneCycleLR", "epochs", epochs)
            _check_positive_int("OneCycleLR", "steps_per_epoch", steps_per_epoch)
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("OneCycleLR: define either total_steps or (epochs and steps_per_epoch)")
        if isinstance(pct_start, bool) or not isinstance(pct_start, (int, float)) or not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be a float between 0 and 1, got {pct_start!r}")
        pct_start = float(pct_start)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        if three_phase:
            self._schedule_phases = [
                {"end_step": float(pct_start * self.total_steps) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct_start * self.total_steps) - 2, "start_lr": "max_lr",
                 "end_lr": "initial_lr", "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
                {"end_step": self.total_steps - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"},
            ]
        else:
            self._schedule_phases = [
                {"end_step": float(pct_start * self.total_steps) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": self.total_steps - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
            ]
        max_lrs = _format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for lr, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            keys = set(optimizer.param_groups[0]) | set(getattr(optimizer, "defaults", None) or ())
            if "momentum" not in keys and "betas" not in keys:
                raise ValueError("OneCycleLR: the optimizer must have a 'momentum' or 'betas' hyperparameter with "
                                 "cycle_momentum=True (pass cycle_momentum=False)")
            self.use_beta1 = "betas" in keys
            max_momentums = _format_param("max_momentum", optimizer, max_momentum)
            base_momentums = _format_param("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for m_mom, b_mom, group in zip(max_momentums, base_momentums, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (m_mom, *group["betas"][1:])
                    else:
                        group["momentum"] = m_mom
                    group["max_momentum"] = m_mom
                    group["base_momentum"] = b_mom
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _annealing_cos(start: float, end: float, pct: float) -> float:
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _annealing_linear(start: float, end: float, pct: float) -> float:
        return (end - start) * pct + start

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return self._annealing_cos(start, end, pct)
        return self._annealing_linear(start, end, pct)

    def get_lr(self) -> list[float]:
        """The lrs at step ``last_epoch`` (and, with ``cycle_momentum``, sets the groups' momentum)."""
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step_num} times; the specified number of total steps "
                             f"is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lr = self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = self._anneal(group[phase["start_momentum"]], group[phase["end_momentum"]], pct)
                    break
                start_step = phase["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (momentum, *group["betas"][1:])
                else:
                    group["momentum"] = momentum
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` when a metric has stopped improving for more than ``patience`` epochs.

    Call ``step(metric)`` once per epoch (e.g. with the validation loss).

    Args:
        optimizer: the optimizer.
        mode: ``"min"`` (lower is better) or ``"max"``.
        factor: the multiplicative factor, ``< 1``.
        patience: the number of bad epochs tolerated; the lr drops at the ``patience + 1``-th.
        threshold: the least change that counts as an improvement.
        threshold_mode: ``"rel"`` (``best * (1 -/+ threshold)``) or ``"abs"`` (``best -/+ threshold``).
        cooldown: epochs to wait after a reduction before counting bad epochs again.
        min_lr: a lower bound on the lr (or one per group).
        eps: a reduction smaller than ``eps`` is skipped.

    Unlike the other schedulers the constructor does not step, and ``base_lrs`` / ``initial_lr`` are not used.
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | list[float] = 0, eps: float = 1e-8):
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        _check_optimizer(optimizer)
        self.factor = factor
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError(f"ReduceLROnPlateau: expected {len(optimizer.param_groups)} min_lrs, got "
                                 f"{len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = _lrs(optimizer)
        self._init_is_better(mode=mode, threshold=threshold, threshold_mode=threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record this epoch's ``metrics`` (anything ``float()`` accepts) and reduce the lr if it plateaued."""
        current = float(metrics)
        epoch = self.last_epoch + 1 if epoch is None else epoch
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"ReduceLROnPlateau: the optimizer has {len(groups)} param groups but min_lr "
                                   f"has {len(self.min_lrs)} entries (a group was added?); update `min_lrs`")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for i, group in enumerate(groups):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, self.min_lrs[i])
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    @property
    def in_cooldown(self) -> bool:
        """Whether a reduction happened within the last ``cooldown`` epochs."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min" and self.threshold_mode == "abs":
            return a < best - self.threshold
        if self.mode == "max" and self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict`."""
        super().load_state_dict(state_dict)
        self._init_is_better(mode=self.mode, threshold=self.threshold, threshold_mode=self.threshold_mode)
