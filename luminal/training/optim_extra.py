"""More of ``torch.optim``: ``Adamax``, ``NAdam``, ``RAdam``, ``Adadelta`` and ``Rprop``, on the
:class:`~luminal.training.optim.Optimizer` base (graph-built updates, parameter groups, state dicts; the eager
``step()`` form comes from :mod:`luminal.eager.optim`).

Each follows the PyTorch class of the same name: arguments, defaults, the update rule and the state names of
its moment buffers. Quantities that depend only on the step count (bias corrections, NAdam's momentum schedule
and its running product, RAdam's rectification and which of its two updates applies) are computed on the host
as per-step hyper scalars, so the compiled update never changes shape between steps.
"""

from __future__ import annotations

import math

import numpy as np

from ..hl_ops import where
from .optim import Optimizer, _check_range, weight_decay


def _check_betas(group) -> None:
    b1, b2 = group["betas"]
    _check_range("beta1", b1, 0.0, 1.0, hi_open=True)
    _check_range("beta2", b2, 0.0, 1.0, hi_open=True)
    _check_range("eps", group["eps"])


class Adamax(Optimizer):
    """Adamax, Adam with the infinity norm (``torch.optim.Adamax``): ``u = max(beta2 * u, |g| + eps)``,
    ``p -= lr / (1 - beta1^t) * m / u``."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_betas(group)

    def _state_names(self, group):
        return ["exp_avg", "exp_inf"]

    def _hyper(self, group, step):
        b1, b2 = group["betas"]
        return [group["lr"] / (1.0 - b1 ** step), b1, 1.0 - b1, b2, group["eps"], group["weight_decay"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + h[5] * p
        m = h[1] * bufs["exp_avg"] + h[2] * g
        u = (h[3] * bufs["exp_inf"]).maximum(g.abs() + h[4])
        return p - h[0] * m / u, {"exp_avg": m, "exp_inf": u}


class NAdam(Optimizer):
    """Adam with Nesterov momentum and the momentum-decay schedule ``mu_t = beta1 * (1 - 0.5 * 0.96^(t *
    momentum_decay))`` (``torch.optim.NAdam``; ``decoupled_weight_decay=True`` is NAdamW). The running product
    of the ``mu_t`` (torch's per-parameter ``mu_product`` state) is a function of the step, computed on the host."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_betas(group)
        _check_range("momentum_decay", group["momentum_decay"])

    def _state_names(self, group):
        return ["exp_avg", "exp_avg_sq"]

    def _hyper(self, group, step):
        b1, b2 = group["betas"]
        lr, psi = group["lr"], group["momentum_decay"]

        def mu(t):
            return b1 * (1.0 - 0.5 * 0.96 ** (t * psi))
        # the running products mu_1 * ... * mu_t, extended as the steps advance (torch's mu_product state)
        prods = self.__dict__.setdefault("_mu_products", {}).setdefault((b1, psi), [1.0])
        while len(prods) <= step:
            prods.append(prods[-1] * mu(len(prods)))
        prod = prods[step]
        mu_t, mu_next = mu(step), mu(step + 1)
        bc2 = 1.0 - b2 ** step
        return [lr * (1.0 - mu_t) / (1.0 - prod), lr * mu_next / (1.0 - prod * mu_next), 1.0 / math.sqrt(bc2),
                b1, 1.0 - b1, b2, 1.0 - b2, group["eps"], group["weight_decay"], 1.0 - lr * group["weight_decay"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        p, g = weight_decay(p, g, group, group["decoupled_weight_decay"], h[8], h[9])
        m = h[3] * bufs["exp_avg"] + h[4] * g
        v = h[5] * bufs["exp_avg_sq"] + h[6] * (g * g)
        denom = v.sqrt() * h[2] + h[7]
        return p - h[0] * g / denom - h[1] * m / denom, {"exp_avg": m, "exp_avg_sq": v}


class RAdam(Optimizer):
    """Rectified Adam (``torch.optim.RAdam``): the adaptive step with the variance rectification once its
    approximated SMA length ``rho_t`` exceeds 5, plain bias-corrected momentum before (which of the two applies,
    and the rectification, are per-step host scalars); ``decoupled_weight_decay=True`` is RAdamW."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_betas(group)

    def _state_names(self, group):
        return ["exp_avg", "exp_avg_sq"]

    def _hyper(self, group, step):
        b1, b2 = group["betas"]
        lr = group["lr"]
        bc1, bc2 = 1.0 - b1 ** step, 1.0 - b2 ** step
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * step * b2 ** step / bc2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive, plain = lr / bc1 * rect * math.sqrt(bc2), 0.0
        else:
            adaptive, plain = 0.0, lr / bc1
        return [adaptive, plain, b1, 1.0 - b1, b2, 1.0 - b2, group["eps"], group["weight_decay"],
                1.0 - lr * group["weight_decay"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        p, g = weight_decay(p, g, group, group["decoupled_weight_decay"], h[7], h[8])
        m = h[2] * bufs["exp_avg"] + h[3] * g
        v = h[4] * bufs["exp_avg_sq"] + h[5] * (g * g)
        # torch: p -= lr/bc1 * m * rect * sqrt(bc2) / (sqrt(v) + eps) when rho_t > 5, else p -= lr/bc1 * m
        return p - m * (h[0] / (v.sqrt() + h[6]) + h[1]), {"exp_avg": m, "exp_avg_sq": v}


class Adadelta(Optimizer):
    """Adadelta (``torch.optim.Adadelta``): ``v = rho v + (1 - rho) g^2``, ``d = sqrt(u + eps) / sqrt(v + eps) * g``,
    ``u = rho u + (1 - rho) d^2``, ``p -= lr * d``."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        _check_range("rho", group["rho"], 0.0, 1.0)
        _check_range("eps", group["eps"])

    def _state_names(self, group):
        return ["square_avg", "acc_delta"]

    def _hyper(self, group, step):
        rho = group["rho"]
        return [group["lr"], rho, 1.0 - rho, group["eps"], group["weight_decay"]]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + h[4] * p
        v = h[1] * bufs["square_avg"] + h[2] * (g * g)
        delta = (bufs["acc_delta"] + h[3]).sqrt() / (v + h[3]).sqrt() * g
        u = h[1] * bufs["acc_delta"] + h[2] * (delta * delta)
        return p - h[0] * delta, {"square_avg": v, "acc_delta": u}


class Rprop(Optimizer):
    """Resilient backpropagation (``torch.optim.Rprop``): per-element step sizes grow by ``etas[1]`` while the
    gradient keeps its sign and shrink by ``etas[0]`` when it flips (within ``step_sizes``); a flipped gradient
    is skipped for that step; ``p -= sign(g) * step_size``."""

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), maximize: bool = False):
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize))

    def _validate(self, group):
        super()._validate(group)
        minus, plus = group["etas"]
        if not 0.0 < minus < 1.0 < plus:
            raise ValueError(f"invalid etas {group['etas']}: expected 0 < etaminus < 1 < etaplus")
        lo, hi = group["step_sizes"]
        if not 0.0 <= lo <= hi:
            raise ValueError(f"invalid step_sizes {group['step_sizes']}: expected 0 <= min <= max")

    def _state_names(self, group):
        return ["prev", "step_size"]

    def _init_state(self, name, p, group):
        if name == "step_size":
            return np.full(p.shape, group["lr"], p.dtype.numpy)
        return np.zeros(p.shape, p.dtype.numpy)

    def _hyper(self, group, step):
        (minus, plus), (lo, hi) = group["etas"], group["step_sizes"]
        return [minus, plus, lo, hi]

    def _update(self, p, g, h, bufs, group):
        if group["maximize"]:
            g = -g
        s = g * bufs["prev"]
        factor = where(s > 0, h[1], where(s < 0, h[0], 1.0))
        size = (bufs["step_size"] * factor).maximum(h[2]).minimum(h[3])  # torch's clamp_(min, max)
        g = where(s < 0, g * 0.0, g)
        return p - g.sign() * size, {"prev": g, "step_size": size}
