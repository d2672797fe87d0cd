"""``nn.init.trunc_normal_/eye_/dirac_`` and the schedulers ``CosineAnnealingWarmRestarts`` / ``CyclicLR`` against
torch (issue 17, item 4). Schedulers: the learning rates (and cycled momentum) of every step equal torch's
exactly (same float formulas). Initializers: eye_/dirac_ exactly; trunc_normal_ by its distribution (a
different generator than torch's): every value inside the bounds, mean and std of 20000 samples within 4
standard errors of the truncated normal's moments, and the same seed giving the same values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import luminal.nn as nn
from luminal.module import Parameter
from luminal.training.lr_scheduler import CosineAnnealingWarmRestarts, CyclicLR

pytestmark = pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")


class _Groups:
    """A stand-in optimizer: two param groups."""

    def __init__(self, **extra):
        self.param_groups = [dict(lr=0.1, **extra), dict(lr=0.05, **extra)]


def _torch_opt(cls=torch.optim.SGD, **kw):
    p = [torch.nn.Parameter(torch.zeros(1)) for _ in range(2)]
    return cls([{"params": [p[0]], "lr": 0.1}, {"params": [p[1]], "lr": 0.05}], lr=0.1, **kw)


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_cosine_annealing_warm_restarts(t_mult):
    ours, theirs = _Groups(), _torch_opt()
    a = CosineAnnealingWarmRestarts(ours, 3, t_mult, eta_min=0.001)
    b = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(theirs, 3, t_mult, eta_min=0.001)
    for i in range(40):
        assert a.get_last_lr() == b.get_last_lr(), i
        assert [g["lr"] for g in ours.param_groups] == [g["lr"] for g in theirs.param_groups]
        a.step()
        b.step()
    for epoch in [0.5, 4.25, 11.0, 25.3, 2]:  # fractional epochs (within-epoch steps) and jumps back
        a.step(epoch)
        b.step(epoch)
        assert a.get_last_lr() == b.get_last_lr(), epoch
    state = a.state_dict()
    c = CosineAnnealingWarmRestarts(_Groups(), 3, t_mult, eta_min=0.001)
    c.load_state_dict(state)
    for _ in range(5):
        a.step()
        c.step()
        assert a.get_last_lr() == c.get_last_lr()


def test_cosine_annealing_warm_restarts_errors():
    with pytest.raises(ValueError, match="T_0"):
        CosineAnnealingWarmRestarts(_Groups(), 0)
    with pytest.raises(ValueError, match="T_mult"):
        CosineAnnealingWarmRestarts(_Groups(), 2, T_mult=0)
    with pytest.raises(ValueError, match="epoch"):
        CosineAnnealingWarmRestarts(_Groups(), 2).step(-1)


@pytest.mark.parametrize("mode", ["triangular", "triangular2", "exp_range"])
def test_cyclic_lr_with_momentum(mode):
    ours, theirs = _Groups(momentum=0.9), _torch_opt(momentum=0.9)
    kw = dict(step_size_up=3, step_size_down=5, mode=mode, gamma=0.9)
    a = CyclicLR(ours, [0.01, 0.02], 0.1, **kw)
    b = torch.optim.lr_scheduler.CyclicLR(theirs, [0.01, 0.02], 0.1, **kw)
    for i in range(40):
        assert a.get_last_lr() == b.get_last_lr(), (mode, i)
        assert [g["momentum"] for g in ours.param_groups] == [g["momentum"] for g in theirs.param_groups], i
        a.step()
        b.step()


def test_cyclic_lr_betas_custom_scale_and_errors():
    ours, theirs = _Groups(betas=(0.9, 0.999)), _torch_opt(torch.optim.Adam)
    fn = lambda x: 1.0 / (1.0 + 0.1 * x)  # noqa: E731
    a = CyclicLR(ours, 0.001, 0.01, step_size_up=4, scale_fn=fn, scale_mode="iterations", base_momentum=0.85,
                 max_momentum=0.95)
    b = torch.optim.lr_scheduler.CyclicLR(theirs, 0.001, 0.01, step_size_up=4, scale_fn=fn,
                                          scale_mode="iterations", base_momentum=0.85, max_momentum=0.95)
    for i in range(20):
        assert a.get_last_lr() == b.get_last_lr(), i
        assert [g["betas"] for g in ours.param_groups] == [tuple(g["betas"]) for g in theirs.param_groups]
        a.step()
        b.step()
    c = CyclicLR(_Groups(), 0.001, 0.01, cycle_momentum=False)
    c.step()
    assert "_scale_fn_custom" not in a.state_dict()
    with pytest.raises(ValueError, match="momentum"):
        CyclicLR(_Groups(), 0.001, 0.01)
    with pytest.raises(ValueError, match="mode"):
        CyclicLR(_Groups(), 0.001, 0.01, mode="cosine", cycle_momentum=False)


def test_eye_and_dirac():
    p = Parameter(np.zeros((3, 5), np.float32))
    nn.init.eye_(p)
    np.testing.assert_array_equal(np.asarray(p.data), torch.nn.init.eye_(torch.empty(3, 5)).numpy())
    for shape, groups in [((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((4, 4, 1, 3, 2), 1), ((2, 4, 3, 3), 1)]:
        q = Parameter(np.zeros(shape, np.float32))
        nn.init.dirac_(q, groups)
        exp = torch.nn.init.dirac_(torch.empty(shape), groups).numpy()
        np.testing.assert_array_equal(np.asarray(q.data), exp, err_msg=str(shape))
    with pytest.raises(ValueError, match="2-D"):
        nn.init.eye_(Parameter(np.zeros((2, 2, 2))))
    with pytest.raises(ValueError, match="divisible"):
        nn.init.dirac_(Parameter(np.zeros((3, 2, 3))), groups=2)


def test_trunc_normal():
    mean, std, a, b = 0.5, 2.0, -1.0, 4.0
    p = Parameter(np.zeros((200, 100), np.float32))
    nn.init.trunc_normal_(p, mean, std, a, b, generator=np.random.default_rng(0))
    v = np.asarray(p.data, np.float64)
    assert v.min() >= a and v.max() <= b
    # moments of the truncated normal
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2  # noqa: E731
    z = cdf(beta) - cdf(alpha)
    m = mean + std * (pdf(alpha) - pdf(beta)) / z
    var = std ** 2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
    se = math.sqrt(var / v.size)
    assert abs(v.mean() - m) < 4 * se, (v.mean(), m)
    assert abs(v.std() - math.sqrt(var)) < 4 * math.sqrt(var) / math.sqrt(2 * v.size) * 1.5, (v.std(), var)
    q = Parameter(np.zeros((200, 100), np.float32))
    nn.init.trunc_normal_(q, mean, std, a, b, generator=np.random.default_rng(0))
    np.testing.assert_array_equal(np.asarray(q.data), np.asarray(p.data))
    with pytest.raises(ValueError, match="a < b"):
        nn.init.trunc_normal_(q, a=1.0, b=0.0)
