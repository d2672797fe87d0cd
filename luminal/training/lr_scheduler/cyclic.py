"""Cyclic schedules: ``CosineAnnealingWarmRestarts`` and ``CyclicLR`` (PyTorch's formulas and argument checks)."""

from __future__ import annotations

import math

from .base import LRScheduler, _check_optimizer, _format_param


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (``torch.optim.lr_scheduler.CosineAnnealingWarmRestarts``): cosine annealing from each group's base
    lr to ``eta_min`` over ``T_i`` epochs, restarting with ``T_{i+1} = T_i * T_mult``. ``step(epoch)`` accepts a
    fractional epoch (e.g. ``epoch + batch / n_batches``), as in PyTorch."""

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a positive integer T_0, got {T_0!r}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, got {T_mult!r}")
        if not isinstance(eta_min, (int, float)):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a float eta_min, got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, float(eta_min)
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        """One epoch on (``epoch=None``) or to the (possibly fractional) ``epoch``."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur - self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"CosineAnnealingWarmRestarts: expected a non-negative epoch, got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        self._step_count += 1
        values = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class CyclicLR(LRScheduler):
    """Cyclical learning rates (``torch.optim.lr_scheduler.CyclicLR``): each group's lr moves between
    ``base_lr`` and ``max_lr`` over ``step_size_up`` + ``step_size_down`` steps (call :meth:`step` after every
    batch), with the amplitude policy ``mode`` (``"triangular"``, ``"triangular2"``: halved each cycle,
    ``"exp_range"``: ``gamma ** iteration``) or a custom ``scale_fn``. With ``cycle_momentum`` the momentum (or
    Adam's ``beta1``) cycles inversely between ``max_momentum`` and ``base_momentum``; the optimizer's groups
    must then have a ``"momentum"`` or ``"betas"`` entry."""

    _state_exclude = LRScheduler._state_exclude + ("_scale_fn_custom",)

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000, step_size_down: int | None = None,
                 mode: str = "triangular", gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9, last_epoch: int = -1):
        _check_optimizer(optimizer)
        base_lrs = _format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if up <= 0 or down <= 0:
            raise ValueError(f"CyclicLR: step sizes must be positive, got up={up}, down={down}")
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range' when scale_fn is "
                             f"None, got {mode!r}")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError(f"CyclicLR: scale_mode must be 'cycle' or 'iterations', got {scale_mode!r}")
        self.mode, self.gamma = mode, float(gamma)
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else \
            {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}[mode]
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            groups = optimizer.param_groups
            if not all("momentum" in g or "betas" in g for g in groups):
                raise ValueError("CyclicLR: optimizer must support momentum or beta1 with `cycle_momentum` enabled "
                                 "(its param groups have neither 'momentum' nor 'betas')")
            self.use_beta1 = "betas" in groups[0]
            self.base_momentums = _format_param("base_momentum", optimizer, base_momentum)
            self.max_momentums = _format_param("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                for m_max, m_base, group in zip(self.max_momentums, self.base_momentums, groups):
                    self._set_momentum(group, m_max)
                    group["max_momentum"], group["base_momentum"] = m_max, m_base
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _set_momentum(self, group, value) -> None:
        if self.use_beta1:
            group["betas"] = (value, *tuple(group["betas"])[1:])
        else:
            group["momentum"] = value

    def scale_fn(self, x) -> float:
        """The amplitude factor at cycle (or iteration) ``x``."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self) -> list[float]:
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            scale_factor = x / self.step_ratio
        else:
            scale_factor = (x - 1) / (self.step_ratio - 1)
        at = cycle if self.scale_mode == "cycle" else self.last_epoch
        lrs = [base + (top - base) * scale_factor * self.scale_fn(at) for base, top in zip(self.base_lrs,
                                                                                           self.max_lrs)]
        if self.cycle_momentum:
            for group, m_base, m_max in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_momentum(group, m_max - (m_max - m_base) * scale_factor * self.scale_fn(at))
        return lrs
