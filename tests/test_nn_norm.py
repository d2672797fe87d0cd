"""Normalization layers against torch.nn (float32; outputs and statistics compared with rtol=1e-4, atol=1e-5).

Parameters and buffers are copied from the torch module with ``load_state_dict(torch_module.state_dict())``
(after randomizing torch's affine parameters and running stats), which also checks that the names match.
Every test runs on both backends (tests/conftest.py).
"""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.graph import GraphError
from luminal.nn import normalization as N

RTOL, ATOL = 1e-4, 1e-5


def _randomize(tm, seed=0):
    """Non-trivial affine parameters and running statistics on the torch module."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(tm.named_parameters()) + list(tm.named_buffers()):
            if name == "num_batches_tracked":
                p.fill_(3)
            elif name == "running_var" or name == "weight":
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g))
    return tm


def _data(shape, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * 2 + 0.5).astype(np.float32)


def _torch(tm, a):
    with torch.no_grad():
        return tm(torch.from_numpy(a)).numpy()


def _assert_state_equal(lmm, tm):
    ours, theirs = lmm.state_dict(), tm.state_dict()
    assert list(ours) == list(theirs)
    for k, v in theirs.items():
        assert ours[k].shape == tuple(v.shape), k
        np.testing.assert_allclose(ours[k], v.numpy(), rtol=RTOL, atol=ATOL, err_msg=k)


CASES = {
    "layernorm_2d_shape": (lambda: torch.nn.LayerNorm((4, 5)), lambda: N.LayerNorm((4, 5)), (3, 4, 5)),
    "layernorm_no_bias": (lambda: torch.nn.LayerNorm(5, eps=1e-3, bias=False),
                          lambda: N.LayerNorm(5, eps=1e-3, bias=False), (2, 3, 5)),
    "rmsnorm_default_eps": (lambda: torch.nn.RMSNorm(6), lambda: N.RMSNorm(6), (2, 3, 6)),
    "rmsnorm_eps_no_affine": (lambda: torch.nn.RMSNorm((3, 6), eps=1e-2, elementwise_affine=False),
                              lambda: N.RMSNorm((3, 6), eps=1e-2, elementwise_affine=False), (2, 3, 6)),
    "groupnorm": (lambda: torch.nn.GroupNorm(3, 6), lambda: N.GroupNorm(3, 6), (2, 6, 3, 2)),
    "instancenorm2d_default": (lambda: torch.nn.InstanceNorm2d(3), lambda: N.InstanceNorm2d(3), (2, 3, 4, 4)),
    "instancenorm2d_affine_unbatched": (lambda: torch.nn.InstanceNorm2d(3, affine=True),
                                        lambda: N.InstanceNorm2d(3, affine=True), (3, 4, 5)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_stateless_norms_match_torch(case):
    make_torch, make_ours, shape = CASES[case]
    tm, lmm = _randomize(make_torch()), make_ours()
    _assert_state_equal(lmm, make_torch())  # default inits (ones / zeros) and names
    lmm.load_state_dict(tm.state_dict())
    cx = lm.Graph()
    x = cx.tensor(shape)
    y = lmm(x).retrieve()
    for step in range(2):  # the same graph with new data
        a = _data(shape, step)
        x.set(a)
        cx.execute()
        np.testing.assert_allclose(y.data(), _torch(tm, a), rtol=RTOL, atol=ATOL)


BATCH_CASES = {
    "bn1d_2d_input": (lambda: torch.nn.BatchNorm1d(4), lambda: N.BatchNorm1d(4), (6, 4)),
    "bn1d_cumulative": (lambda: torch.nn.BatchNorm1d(4, momentum=None), lambda: N.BatchNorm1d(4, momentum=None),
                        (3, 4, 5)),
    "bn2d": (lambda: torch.nn.BatchNorm2d(3, momentum=0.3), lambda: N.BatchNorm2d(3, momentum=0.3), (2, 3, 4, 3)),
    "bn3d": (lambda: torch.nn.BatchNorm3d(2), lambda: N.BatchNorm3d(2), (2, 2, 3, 2, 2)),
    "instancenorm2d_tracking": (lambda: torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                                lambda: N.InstanceNorm2d(3, affine=True, track_running_stats=True), (2, 3, 4, 4)),
}


@pytest.mark.parametrize("case", list(BATCH_CASES))
def test_running_stats_train_then_eval(case):
    make_torch, make_ours, shape = BATCH_CASES[case]
    tm, lmm = _randomize(make_torch()), make_ours()
    _assert_state_equal(lmm, make_torch())
    lmm.load_state_dict(tm.state_dict())  # includes num_batches_tracked (a 0-d int64)
    assert lmm.num_batches_tracked.data.shape == () and lmm.num_batches_tracked.data == 3

    cx = lm.Graph()
    x = cx.tensor(shape)
    y = lmm(x).retrieve()
    for step in range(2):  # two training steps on one graph: the second must see the first's stats
        a = _data(shape, 10 + step)
        x.set(a)
        cx.execute()
        np.testing.assert_allclose(y.data(), _torch(tm, a), rtol=RTOL, atol=ATOL)
        _assert_state_equal(lmm, tm)
    assert int(lmm.num_batches_tracked.data) == int(tm.num_batches_tracked)

    tm.eval()
    lmm.eval()
    cx2 = lm.Graph()
    x2 = cx2.tensor(shape)
    y2 = lmm(x2).retrieve()
    a = _data(shape, 20)
    x2.set(a)
    cx2.execute()
    np.testing.assert_allclose(y2.data(), _torch(tm, a), rtol=RTOL, atol=ATOL)
    _assert_state_equal(lmm, tm)  # eval leaves the statistics alone
    # the training graph still updates the (shared) buffers, and the eval graph then sees them
    x.set(_data(shape, 21))
    cx.execute()
    cx2.execute()
    tm.train()
    _torch(tm, _data(shape, 21))
    tm.eval()
    _assert_state_equal(lmm, tm)
    np.testing.assert_allclose(y2.data(), _torch(tm, a), rtol=RTOL, atol=ATOL)


def test_batchnorm_without_running_stats_uses_batch_stats_in_eval():
    tm, lmm = torch.nn.BatchNorm2d(3, track_running_stats=False), N.BatchNorm2d(3, track_running_stats=False)
    assert list(lmm.state_dict()) == list(tm.state_dict()) == ["weight", "bias"]
    lmm.load_state_dict(_randomize(tm).state_dict())
    tm.eval()
    lmm.eval()
    cx = lm.Graph()
    x = cx.tensor((2, 3, 2, 2))
    y = lmm(x).retrieve()
    a = _data((2, 3, 2, 2), 3)
    x.set(a)
    cx.execute()
    assert cx.post_execute_hooks == []
    np.testing.assert_allclose(y.data(), _torch(tm, a), rtol=RTOL, atol=ATOL)


def test_shape_errors():
    cx = lm.Graph()
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        N.BatchNorm1d(3)(cx.tensor((1, 3)))
    with pytest.raises(GraphError, match="expected 4 channels"):
        N.BatchNorm2d(4)(cx.tensor((2, 3, 2, 2)))
    with pytest.raises(GraphError, match="4D"):
        N.BatchNorm2d(3)(cx.tensor((2, 3, 2)))
    with pytest.raises(GraphError, match="trailing shape"):
        N.LayerNorm(4)(cx.tensor((2, 5)))
    with pytest.raises(ValueError, match="divisible"):
        N.GroupNorm(4, 6)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("kind", ["batchnorm", "instancenorm"])
def test_module_called_twice_updates_its_statistics_twice(momentum, kind):
    """A norm module applied twice in one forward updates running_mean/var (and num_batches_tracked) once per
    call, the second from the first's result, as PyTorch does."""
    if kind == "batchnorm":
        tm, lmm, shape = torch.nn.BatchNorm2d(3, momentum=momentum), N.BatchNorm2d(3, momentum=momentum), (4, 3, 2, 2)
    else:
        tm = torch.nn.InstanceNorm2d(3, momentum=momentum, track_running_stats=True)
        lmm, shape = N.InstanceNorm2d(3, momentum=momentum, track_running_stats=True), (4, 3, 2, 2)
    _randomize(tm)
    lmm.load_state_dict(tm.state_dict())
    cx = lm.Graph()
    x = cx.tensor(shape)
    y = lmm(lmm(x) * 2.0 + 1.0).retrieve()
    for step in range(2):
        a = _data(shape, 30 + step)
        x.set(a)
        cx.execute()
        with torch.no_grad():
            expect = tm(tm(torch.from_numpy(a)) * 2.0 + 1.0).numpy()
        np.testing.assert_allclose(y.data(), expect, rtol=RTOL, atol=ATOL)
        _assert_state_equal(lmm, tm)
