"""Schedules that are a function of the epoch: lambda, step, multi-step, constant, linear, exponential,
polynomial and cosine-annealing decay."""

from __future__ import annotations

import copy
import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable

from .base import LRScheduler, _check_optimizer, _check_positive_int, _lrs


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
                raise ValueError(f"{type(self).__name__}: expected {n} lr_lambdas (one per param group), got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"{type(self).__name__}: lr_lambda should be a function, got {type(fn).__name__}")
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


class MultiplicativeLR(LambdaLR):
    """Chainable: every step multiplies each group's current lr by ``lr_lambda(epoch)`` (from epoch 1 on;
    ``torch.optim.lr_scheduler.MultiplicativeLR``). Arguments and ``state_dict`` as :class:`LambdaLR`."""

    def get_lr(self) -> list[float]:
        """``group['lr'] * lr_lambda(last_epoch)`` per group (the lr unchanged at epoch 0)."""
        if self.last_epoch > 0:
            return [group["lr"] * fn(self.last_epoch) for fn, group in zip(self.lr_lambdas,
                                                                           self.optimizer.param_groups)]
        return [group["lr"] for group in self.optimizer.param_groups]


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
