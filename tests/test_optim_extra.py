"""Adamax, NAdam, RAdam, Adadelta and Rprop (luminal.training.optim_extra) against torch.optim.

A small MLP trained 15 steps on fixed mini-batches by luminal (graph-built update, compiled once) and by torch;
losses at every step and the final parameters agree within rtol 1e-4 / atol 1e-5 (float32). RAdam runs past
its rho_t > 5 switch (step 6 with the default betas), NAdam's momentum schedule across steps.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
from luminal.training import Adadelta, Adamax, NAdam, RAdam, Rprop
from hl_helpers import optimizer_matches_torch

DEVICES = ["reference", "cpu"]

CASES = [
    (Adamax, torch.optim.Adamax, dict(lr=0.01)),
    (Adamax, torch.optim.Adamax, dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1, maximize=False)),
    (NAdam, torch.optim.NAdam, dict(lr=0.01)),
    (NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.05, momentum_decay=0.01)),
    (NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.05, decoupled_weight_decay=True)),
    (RAdam, torch.optim.RAdam, dict(lr=0.01)),
    (RAdam, torch.optim.RAdam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.05, decoupled_weight_decay=True)),
    (Adadelta, torch.optim.Adadelta, dict()),
    (Adadelta, torch.optim.Adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.01)),
    (Rprop, torch.optim.Rprop, dict(lr=0.01)),
    (Rprop, torch.optim.Rprop, dict(lr=0.05, etas=(0.4, 1.5), step_sizes=(1e-3, 0.08))),
]


def _models():
    nn.init.manual_seed(3)
    m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in m.state_dict().items()})
    return m, tm


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda k: f"{CASES[k][0].__name__}{k}")
def test_extra_optimizers_match_torch(case, device):
    opt_cls, torch_cls, kw = CASES[case]
    m, tm = _models()
    optimizer_matches_torch(m, tm, opt_cls, torch_cls, kw, device, case)


def test_extra_optimizers_reject_bad_hyperparameters():
    p = nn.Linear(2, 2).parameters()
    with pytest.raises(ValueError, match="beta1"):
        NAdam(p, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="etas"):
        Rprop(p, etas=(1.5, 1.2))
    with pytest.raises(ValueError, match="step_sizes"):
        Rprop(p, step_sizes=(1.0, 0.1))
    with pytest.raises(ValueError, match="rho"):
        Adadelta(p, rho=1.5)


@pytest.mark.parametrize("name", ["Adamax", "NAdam", "RAdam", "Adadelta", "Rprop"])
def test_extra_optimizers_in_the_eager_loop_match_torch(name):
    """``lm.optim.<Name>`` in PyTorch's loop (``backward(); step(); zero_grad()``), 8 steps against torch."""
    m, tm = _models()
    opt = getattr(lm.optim, name)(m.parameters(), lr=0.01)
    topt = getattr(torch.optim, name)(tm.parameters(), lr=0.01)
    rng = np.random.default_rng(7)
    for step in range(8):
        xb = rng.standard_normal((8, 5)).astype(np.float32)
        yb = rng.standard_normal((8, 3)).astype(np.float32)
        loss = ((m(lm.tensor(xb)) - lm.tensor(yb)) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        tl = ((tm(torch.from_numpy(xb)) - torch.from_numpy(yb)) ** 2).mean()
        tl.backward()
        topt.step()
        topt.zero_grad()
        np.testing.assert_allclose(float(loss), tl.item(), rtol=1e-4, err_msg=f"step {step}")
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
