"""The scheduler base class (PyTorch's ``LRScheduler`` protocol: ``step``, ``get_last_lr``, ``state_dict``)
and the argument checks the schedulers share."""

from __future__ import annotations

import copy


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
