"""luminal.training.lr_scheduler against torch.optim.lr_scheduler (the oracle) and hand-derived closed forms.

Each luminal scheduler drives a stand-in optimizer (an object with ``param_groups``); the torch scheduler
drives ``torch.optim.SGD`` (or ``Adam`` for betas) with the same groups. Both are stepped in lockstep and
the lr (and momentum) sequences must agree to rtol 1e-12.
"""

import copy
import json
import math

import numpy as np
import pytest
import torch

from luminal.training import lr_scheduler as L

T = torch.optim.lr_scheduler

GROUPS = [{"lr": 0.1, "momentum": 0.9}, {"lr": 0.03, "momentum": 0.8}]


class FakeOptimizer:
    """The smallest optimizer-like object: ``param_groups`` only."""

    def __init__(self, groups):
        self.param_groups = [dict(g) for g in groups]


def torch_optimizer(groups, kind="sgd"):
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in groups]
    tgroups = [{"params": [p], **g} for p, g in zip(params, groups)]
    if kind == "adam":
        return torch.optim.Adam(tgroups, lr=groups[0]["lr"])
    return torch.optim.SGD(tgroups, lr=groups[0]["lr"])


def lrs(opt):
    return [float(g["lr"]) for g in opt.param_groups]


def assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-12, atol=0)


def lockstep(torch_opt, torch_sched, lum_opt, lum_sched, steps, keys=("lr",)):
    """Step both ``steps`` times; returns the two recorded sequences of ``[group[key] for key, group]``."""
    def read(opt):
        return [float(g[k][0]) if k == "betas" else float(g[k]) for k in keys for g in opt.param_groups]

    seq_t, seq_l = [read(torch_opt)], [read(lum_opt)]
    last_t, last_l = [list(map(float, torch_sched.get_last_lr()))], [lum_sched.get_last_lr()]
    for _ in range(steps):
        torch_opt.step()  # keeps torch from warning about the call order
        torch_sched.step()
        lum_sched.step()
        seq_t.append(read(torch_opt))
        seq_l.append(read(lum_opt))
        last_t.append(list(map(float, torch_sched.get_last_lr())))
        last_l.append(lum_sched.get_last_lr())
    assert_close(last_l, last_t)
    return seq_t, seq_l


# name, kwargs, steps. Every case runs with the two param groups above (different lrs).
CASES = [
    ("StepLR", dict(step_size=7, gamma=0.5), 50),
    ("StepLR", dict(step_size=1, gamma=0.9), 30),
    ("MultiStepLR", dict(milestones=[5, 12, 12, 30], gamma=0.3), 45),
    ("ExponentialLR", dict(gamma=0.93), 60),
    ("ConstantLR", dict(factor=0.5, total_iters=4), 30),
    ("LinearLR", dict(start_factor=0.1, end_factor=1.0, total_iters=10), 40),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.05, total_iters=25), 40),
    ("PolynomialLR", dict(total_iters=20, power=2.0), 40),
    ("CosineAnnealingLR", dict(T_max=20), 60),  # past T_max: the cosine comes back up
    ("CosineAnnealingLR", dict(T_max=17, eta_min=0.01), 60),
    ("CosineAnnealingLR", dict(T_max=1, eta_min=0.001), 30),
]


@pytest.mark.parametrize("name,kwargs,steps", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_torch(name, kwargs, steps):
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched = getattr(T, name)(topt, **kwargs)
    lsched = getattr(L, name)(lopt, **kwargs)
    assert_close(lrs(lopt), lrs(topt))  # the constructor's step applied epoch 0's lr
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, steps)
    assert_close(seq_l, seq_t)
    assert len({round(v[0], 15) for v in seq_l}) >= 2, "the schedule should actually change the lr"
    assert lsched.last_epoch == tsched.last_epoch == steps
    assert lsched.base_lrs == [0.1, 0.03]
    assert [g["initial_lr"] for g in lopt.param_groups] == [0.1, 0.03]


def test_single_group_and_hand_derived_closed_forms():
    opt = FakeOptimizer([{"lr": 0.2}])
    s = L.StepLR(opt, step_size=3, gamma=0.25)
    for e in range(1, 20):
        s.step()
        assert math.isclose(opt.param_groups[0]["lr"], 0.2 * 0.25 ** (e // 3), rel_tol=1e-14)

    opt = FakeOptimizer([{"lr": 0.5}])
    s = L.CosineAnnealingLR(opt, T_max=8, eta_min=0.1)
    for e in range(1, 20):
        s.step()
        assert math.isclose(opt.param_groups[0]["lr"], 0.1 + 0.4 * (1 + math.cos(math.pi * e / 8)) / 2,
                            rel_tol=1e-14)

    opt = FakeOptimizer([{"lr": 1.0}])
    s = L.LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4)
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(6):
        s.step()
        seen.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(seen, [0.25, 0.4375, 0.625, 0.8125, 1.0, 1.0, 1.0], rtol=1e-14)


def test_lambda_lr_matches_torch_with_one_lambda_per_group():
    fns = [lambda e: 0.95 ** e * (1 + e % 3), lambda e: 1.0 / (1 + e)]
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched, lsched = T.LambdaLR(topt, fns), L.LambdaLR(lopt, fns)
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 40)
    assert_close(seq_l, seq_t)
    np.testing.assert_allclose([v[1] for v in seq_l], [0.03 / (1 + e) for e in range(41)], rtol=1e-14)

    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched, lsched = T.LambdaLR(topt, fns[0]), L.LambdaLR(lopt, fns[0])
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 30)
    assert_close(seq_l, seq_t)
    with pytest.raises(ValueError, match="lr_lambdas"):
        L.LambdaLR(FakeOptimizer(GROUPS), [fns[0]])


def sequential(mod, opt, which):
    if which == "warmup_cosine":
        subs = [mod.LinearLR(opt, start_factor=0.1, total_iters=5), mod.CosineAnnealingLR(opt, T_max=30)]
        return mod.SequentialLR(opt, subs, milestones=[5])
    subs = [mod.ConstantLR(opt, factor=0.2, total_iters=2), mod.ExponentialLR(opt, gamma=0.9),
            mod.StepLR(opt, step_size=4, gamma=0.5)]
    return mod.SequentialLR(opt, subs, milestones=[3, 10])


@pytest.mark.parametrize("which", ["warmup_cosine", "three"])
def test_sequential_lr_matches_torch(which):
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched, lsched = sequential(T, topt, which), sequential(L, lopt, which)
    assert_close(lrs(lopt), lrs(topt))
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 45)
    assert_close(seq_l, seq_t)
    if which == "warmup_cosine":  # hand check: warmup from 0.1 * lr, the cosine starts at the milestone
        assert math.isclose(seq_l[0][0], 0.01, rel_tol=1e-12)
        assert math.isclose(seq_l[5][0], 0.1, rel_tol=1e-12)
        assert math.isclose(seq_l[5 + 30][0], 0.0, abs_tol=1e-15)


ONECYCLE = [
    dict(max_lr=1.0, total_steps=50),
    dict(max_lr=[0.5, 2.0], total_steps=40, anneal_strategy="linear"),
    dict(max_lr=0.8, total_steps=60, three_phase=True, pct_start=0.25),
    dict(max_lr=0.8, epochs=6, steps_per_epoch=8, three_phase=True, anneal_strategy="linear", div_factor=10.0,
         final_div_factor=100.0, base_momentum=0.7, max_momentum=[0.99, 0.9]),
    dict(max_lr=0.3, total_steps=35, pct_start=0.5, cycle_momentum=False),
]


@pytest.mark.parametrize("kwargs", ONECYCLE, ids=[f"onecycle-{i}" for i in range(len(ONECYCLE))])
def test_one_cycle_lr_and_momentum_match_torch(kwargs):
    total = kwargs.get("total_steps") or kwargs["epochs"] * kwargs["steps_per_epoch"]
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched, lsched = T.OneCycleLR(topt, **kwargs), L.OneCycleLR(lopt, **kwargs)
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, total, keys=("lr", "momentum"))
    assert_close(seq_l, seq_t)
    mseq_l = [v[2:] for v in seq_l]
    if kwargs.get("cycle_momentum", True):
        assert len({round(v[0], 12) for v in mseq_l}) > 3
        max_m = kwargs.get("max_momentum", 0.95)
        max_m = max_m if isinstance(max_m, list) else [max_m] * 2
        assert_close(mseq_l[0], max_m)  # momentum starts high while the lr is low
    else:
        assert all(v == [0.9, 0.8] for v in mseq_l)
    # peak lr and the final minimum, derived by hand
    max_lrs = kwargs["max_lr"] if isinstance(kwargs["max_lr"], list) else [kwargs["max_lr"]] * 2
    peak_step = kwargs.get("pct_start", 0.3) * total - 1
    assert max(v[0] for v in seq_l) <= max_lrs[0] * (1 + 1e-12)
    if peak_step == int(peak_step):  # the peak falls on a step
        assert_close(seq_l[int(peak_step)][:2], max_lrs)
    div, final = kwargs.get("div_factor", 25.0), kwargs.get("final_div_factor", 1e4)
    assert_close(seq_l[0][:2], [m / div for m in max_lrs])
    np.testing.assert_allclose(seq_l[total - 1][:2], [m / div / final for m in max_lrs], rtol=1e-9)
    # torch and luminal both refuse to step past total_steps
    with pytest.raises(ValueError):
        tsched.step()
    with pytest.raises(ValueError, match="total steps"):
        lsched.step()


def test_one_cycle_cycles_adam_betas_like_torch():
    groups = [{"lr": 0.01, "betas": (0.9, 0.999)}, {"lr": 0.02, "betas": (0.8, 0.99)}]
    topt, lopt = torch_optimizer(groups, "adam"), FakeOptimizer(groups)
    kwargs = dict(max_lr=0.1, total_steps=30, base_momentum=0.8, max_momentum=0.95)
    tsched, lsched = T.OneCycleLR(topt, **kwargs), L.OneCycleLR(lopt, **kwargs)
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 30, keys=("lr", "betas"))
    assert_close(seq_l, seq_t)
    assert [g["betas"][1] for g in lopt.param_groups] == [0.999, 0.99]  # beta2 untouched


def test_one_cycle_requires_momentum_or_flag():
    with pytest.raises(ValueError, match="cycle_momentum"):
        L.OneCycleLR(FakeOptimizer([{"lr": 0.1}]), max_lr=1.0, total_steps=10)
    opt = FakeOptimizer([{"lr": 0.1}])
    L.OneCycleLR(opt, max_lr=1.0, total_steps=10, cycle_momentum=False)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0 / 25.0, rel=1e-15)
    with pytest.raises(ValueError, match="total_steps"):
        L.OneCycleLR(FakeOptimizer(GROUPS), max_lr=1.0)
    with pytest.raises(ValueError, match="anneal_strategy"):
        L.OneCycleLR(FakeOptimizer(GROUPS), max_lr=1.0, total_steps=10, anneal_strategy="exp")


METRICS = [1.0, 0.9, 0.95, 0.96, 0.97, 0.98, 0.89, 0.891, 0.8909, 0.8908, 0.89, 0.95, 0.96, 0.5, 0.51, 0.52,
           0.53, 0.54, 0.55, 0.56, 0.4999, 0.49995, 0.6, 0.7, 0.8, 0.9, 1.0, 0.3, 0.31, 0.32, 0.33, 0.34, 0.35,
           0.36, 0.37, 0.38, 0.39, 0.4, 0.41, 0.42]

PLATEAU = [
    dict(),
    dict(patience=2, factor=0.5),
    dict(mode="max", patience=1, factor=0.3, threshold=0.01, threshold_mode="abs"),
    dict(patience=1, factor=0.5, cooldown=3, threshold=1e-3),
    dict(patience=0, factor=0.2, min_lr=[1e-3, 5e-3]),
    dict(patience=0, factor=0.9, min_lr=0.0299, eps=1e-4),
    dict(patience=1, factor=0.5, threshold=0.05, threshold_mode="abs"),
]


@pytest.mark.parametrize("kwargs", PLATEAU, ids=[f"plateau-{i}" for i in range(len(PLATEAU))])
def test_reduce_lr_on_plateau_matches_torch(kwargs):
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched, lsched = T.ReduceLROnPlateau(topt, **kwargs), L.ReduceLROnPlateau(lopt, **kwargs)
    seq_t, seq_l = [lrs(topt)], [lrs(lopt)]
    for m in METRICS:
        topt.step()
        tsched.step(m)
        lsched.step(np.float32(m) if m == 0.5 else m)  # numpy scalars are accepted like floats
        seq_t.append(lrs(topt))
        seq_l.append(lrs(lopt))
        assert_close(lsched.get_last_lr(), list(map(float, tsched.get_last_lr())))
        assert lsched.num_bad_epochs == tsched.num_bad_epochs
        assert lsched.cooldown_counter == tsched.cooldown_counter
    assert_close(seq_l, seq_t)
    if kwargs:
        assert seq_l[-1] != seq_l[0], "the metrics should trigger at least one reduction"


def test_reduce_lr_on_plateau_hand_derived():
    opt = FakeOptimizer([{"lr": 1.0}])
    s = L.ReduceLROnPlateau(opt, patience=2, factor=0.5, threshold=0.0)
    got = []
    for m in [5, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3]:
        s.step(m)
        got.append(opt.param_groups[0]["lr"])
    # bad epochs: 1, 2, 3 -> drop at the 5th metric, counter reset; 1, 2 ... 3 at the 3rd repeat of 3
    assert got == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25]
    with pytest.raises(ValueError, match="factor"):
        L.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        L.ReduceLROnPlateau(opt, mode="up")
    with pytest.raises(ValueError, match="min_lrs"):
        L.ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])


# ---------------------------------------------------------------------------- state dicts
def build(name, opt):
    if name == "LambdaLR":
        return L.LambdaLR(opt, [lambda e: 0.9 ** e, lambda e: 1 + 0.1 * e])
    if name == "SequentialLR":
        return sequential(L, opt, "warmup_cosine")
    if name == "OneCycleLR":
        return L.OneCycleLR(opt, max_lr=0.5, total_steps=40, three_phase=True)
    if name == "ReduceLROnPlateau":
        return L.ReduceLROnPlateau(opt, patience=1, factor=0.5, cooldown=1)
    if name == "MultiStepLR":
        return L.MultiStepLR(opt, milestones=[3, 15, 15, 20], gamma=0.5)
    kwargs = {"StepLR": dict(step_size=4, gamma=0.7), "ExponentialLR": dict(gamma=0.9),
              "CosineAnnealingLR": dict(T_max=12, eta_min=0.001),
              "LinearLR": dict(start_factor=0.2, total_iters=20)}[name]
    return getattr(L, name)(opt, **kwargs)


def advance(s, i):
    if isinstance(s, L.ReduceLROnPlateau):
        s.step(METRICS[i % len(METRICS)])
    else:
        s.step()


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR",
                                  "LambdaLR", "SequentialLR", "OneCycleLR", "ReduceLROnPlateau"])
def test_state_dict_round_trip_continues_identically(name):
    opt = FakeOptimizer(GROUPS)
    sched = build(name, opt)
    for i in range(13):
        advance(sched, i)
    # a checkpoint: the optimizer's groups and the scheduler state, through JSON (no functions, no objects)
    saved_groups = copy.deepcopy(opt.param_groups)
    state = json.loads(json.dumps(sched.state_dict()))

    opt2 = FakeOptimizer(GROUPS)
    sched2 = build(name, opt2)  # fresh: its own constructor step(s) ran
    opt2.param_groups = copy.deepcopy(saved_groups)
    sched2.optimizer = opt2
    for sub in getattr(sched2, "_schedulers", []):
        sub.optimizer = opt2
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert sched2.last_epoch == sched.last_epoch == 13

    a, b = [], []
    for i in range(13, 13 + 25):
        advance(sched, i)
        advance(sched2, i)
        a.append((lrs(opt), [g.get("momentum") for g in opt.param_groups]))
        b.append((lrs(opt2), [g.get("momentum") for g in opt2.param_groups]))
    assert a == b
    assert len({x[0][0] for x in a}) >= 2
    # the state dict is a snapshot: stepping afterwards does not change it
    snap = sched.state_dict()
    before = copy.deepcopy(snap)
    advance(sched, 99)
    assert snap == before
    assert sched.state_dict()["last_epoch"] == snap["last_epoch"] + 1


def test_state_dict_is_a_copy_and_excludes_the_optimizer():
    opt = FakeOptimizer(GROUPS)
    s = L.MultiStepLR(opt, milestones=[2, 2, 5])
    sd = s.state_dict()
    assert "optimizer" not in sd
    assert sd["milestones"] == [2, 2, 5]
    sd["base_lrs"][0] = 123.0
    assert s.base_lrs == [0.1, 0.03]
    s.step(), s.step()
    assert_close(lrs(opt), [0.1 * 0.01, 0.03 * 0.01])  # milestone 2 counted twice


def test_base_class_contract():
    opt = FakeOptimizer([{"lr": 0.1, "initial_lr": 0.5}])
    s = L.ExponentialLR(opt, gamma=0.5)
    assert s.base_lrs == [0.5]  # an existing initial_lr is kept (setdefault), as in torch
    assert s.last_epoch == 0 and opt.param_groups[0]["lr"] == 0.1
    out = s.get_last_lr()
    out[0] = 99.0
    assert s.get_last_lr() == [0.1]
    # resuming with last_epoch >= 0 needs initial_lr in every group
    with pytest.raises(KeyError, match="initial_lr"):
        L.StepLR(FakeOptimizer([{"lr": 0.1}]), step_size=2, last_epoch=4)
    resumed = L.StepLR(FakeOptimizer([{"lr": 0.1, "initial_lr": 0.1}]), step_size=2, last_epoch=4)
    assert resumed.last_epoch == 5
    # step(epoch) jumps using the closed form
    opt = FakeOptimizer([{"lr": 0.1}])
    s = L.StepLR(opt, step_size=3, gamma=0.5)
    s.step(7)
    assert math.isclose(opt.param_groups[0]["lr"], 0.1 * 0.25, rel_tol=1e-15)
    for bad in (object(), FakeOptimizer([]), FakeOptimizer([{"momentum": 0.9}])):
        with pytest.raises(TypeError, match="param_groups"):
            L.StepLR(bad, step_size=2)
    with pytest.raises(ValueError, match="step_size"):
        L.StepLR(FakeOptimizer(GROUPS), step_size=0)
    with pytest.raises(ValueError, match="milestone"):
        L.SequentialLR(opt, [L.ExponentialLR(opt, 0.9), L.ExponentialLR(opt, 0.8)], milestones=[])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        L.SequentialLR(opt, [L.ExponentialLR(opt, 0.9), L.ReduceLROnPlateau(opt)], milestones=[3])


def test_multiplicative_lr_matches_torch():
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    fns = [lambda e: 0.95, lambda e: 1.0 - 0.01 * (e % 5)]
    tsched = T.MultiplicativeLR(topt, fns)
    lsched = L.MultiplicativeLR(lopt, fns)
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 40)
    assert_close(seq_l, seq_t)
    with pytest.raises(ValueError, match="MultiplicativeLR: expected 2 lr_lambdas"):
        L.MultiplicativeLR(FakeOptimizer(GROUPS), [lambda e: 1.0])


def test_chained_scheduler_matches_torch_and_round_trips():
    topt, lopt = torch_optimizer(GROUPS), FakeOptimizer(GROUPS)
    tsched = T.ChainedScheduler([T.ConstantLR(topt, factor=0.2, total_iters=6), T.ExponentialLR(topt, gamma=0.9)])
    lsched = L.ChainedScheduler([L.ConstantLR(lopt, factor=0.2, total_iters=6), L.ExponentialLR(lopt, gamma=0.9)])
    assert_close(lrs(lopt), lrs(topt))
    seq_t, seq_l = lockstep(topt, tsched, lopt, lsched, 25)
    assert_close(seq_l, seq_t)
    state = json.loads(json.dumps(lsched.state_dict()))  # numbers only
    lopt2 = FakeOptimizer(GROUPS)
    again = L.ChainedScheduler([L.ConstantLR(lopt2, factor=0.2, total_iters=6), L.ExponentialLR(lopt2, gamma=0.9)])
    again.load_state_dict(state)
    for g2, g in zip(lopt2.param_groups, lopt.param_groups):
        g2["lr"] = g["lr"]
    lsched.step()
    again.step()
    assert_close(lrs(lopt2), lrs(lopt))
    with pytest.raises(ValueError, match="same optimizer"):
        L.ChainedScheduler([L.StepLR(lopt, 2), L.StepLR(FakeOptimizer(GROUPS), 2)])
