"""Schedulers beyond one decay formula: :class:`SequentialLR` (schedulers in turn), :class:`OneCycleLR` (the
one-cycle policy, lr and momentum, stepped per batch) and :class:`ReduceLROnPlateau` (driven by a metric)."""

from __future__ import annotations

import copy
import math
from bisect import bisect_right

from .base import LRScheduler, _check_optimizer, _check_positive_int, _format_param, _lrs


def _composite_state_dict(self) -> dict:
    """A composite scheduler's counters plus each sub-scheduler's state dict (under ``"_schedulers"``)."""
    state = {k: copy.deepcopy(v) for k, v in self.__dict__.items()
             if k not in self._state_exclude and k != "_schedulers"}
    state["_schedulers"] = [s.state_dict() for s in self._schedulers]
    return state


def _composite_load_state_dict(self, state_dict: dict) -> None:
    """Restore a :func:`_composite_state_dict`, including the sub-schedulers'."""
    state = dict(state_dict)
    subs = state.pop("_schedulers")
    LRScheduler.load_state_dict(self, state)
    for s, saved in zip(self._schedulers, subs):
        s.load_state_dict(saved)


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

    state_dict = _composite_state_dict
    load_state_dict = _composite_load_state_dict


class ChainedScheduler(LRScheduler):
    """Step several schedulers together at every step, their factors combining
    (``torch.optim.lr_scheduler.ChainedScheduler``), e.g. a constant warmup factor and an exponential decay.

    Args:
        schedulers: the schedulers (chainable ones; not :class:`ReduceLROnPlateau`), all on one optimizer.
        optimizer: that optimizer (default: the first scheduler's).
    """

    def __init__(self, schedulers: list, optimizer=None):
        if len(schedulers) < 1:
            raise ValueError("ChainedScheduler expects at least one scheduler, got none")
        optimizer = optimizer if optimizer is not None else getattr(schedulers[0], "optimizer", None)
        _check_optimizer(optimizer)
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"ChainedScheduler does not support ReduceLROnPlateau (its step needs a metric), "
                                 f"got one at index {i}")
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError(f"ChainedScheduler expects all schedulers to belong to the same optimizer, but the "
                                 f"{type(s).__name__} at index {i} has a different one")
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self) -> None:
        """Step every scheduler once, in order."""
        for s in self._schedulers:
            s.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    state_dict = _composite_state_dict
    load_state_dict = _composite_load_state_dict


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
