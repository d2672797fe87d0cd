"""Pooling layers against torch.nn on random inputs (float32, rtol=1e-4, atol=1e-5; max pools are exact).

Every test runs on both backends (see conftest.py).
"""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.nn import pooling as P

RTOL, ATOL = 1e-4, 1e-5
T = torch.nn


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(module, arr):
    cx = lm.Graph()
    x = cx.tensor(arr.shape).set(arr)
    y = module(x).retrieve()
    cx.execute()
    return y.data()


def _compare(ours, theirs, arr):
    got = _run(ours, arr)
    exp = theirs(torch.from_numpy(arr)).numpy()
    assert got.shape == exp.shape, (got.shape, exp.shape)
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL)


MAX_CASES = [
    ("MaxPool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
    ("MaxPool1d", (3, 10), dict(kernel_size=2, dilation=3, ceil_mode=True, stride=3)),        # unbatched
    ("MaxPool2d", (2, 3, 9, 8), dict(kernel_size=3)),
    ("MaxPool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1, dilation=2)),
    ("MaxPool2d", (3, 9, 8), dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True)),  # unbatched
    ("MaxPool3d", (1, 2, 5, 6, 7), dict(kernel_size=2, padding=1, ceil_mode=True)),
    ("MaxPool3d", (1, 2, 5, 6, 7), dict(kernel_size=(1, 3, 2), stride=(1, 2, 3))),
]


@pytest.mark.parametrize("name,shape,kwargs", MAX_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(MAX_CASES)])
def test_max_pool(name, shape, kwargs):
    arr = _data(shape)
    arr.flat[::7] = -np.inf if "padding" in kwargs else arr.flat[::7]  # -inf inputs next to -inf padding
    _compare(getattr(P, name)(**kwargs), getattr(T, name)(**kwargs), arr)


AVG_CASES = [
    ("AvgPool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AvgPool1d", (3, 10), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),          # unbatched
    ("AvgPool2d", (2, 3, 9, 8), dict(kernel_size=3)),
    ("AvgPool2d", (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1)),
    ("AvgPool2d", (2, 3, 9, 8), dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False)),
    ("AvgPool2d", (3, 9, 8), dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True)),   # unbatched
    ("AvgPool2d", (1, 2, 6, 6), dict(kernel_size=2, divisor_override=3)),
    ("AvgPool3d", (1, 2, 5, 6, 7), dict(kernel_size=2, stride=(1, 2, 3), padding=1, count_include_pad=False)),
]


@pytest.mark.parametrize("name,shape,kwargs", AVG_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(AVG_CASES)])
def test_avg_pool(name, shape, kwargs):
    _compare(getattr(P, name)(**kwargs), getattr(T, name)(**kwargs), _data(shape))


ADAPTIVE_CASES = [
    ("AdaptiveAvgPool1d", (2, 3, 10), 4),                 # uneven bins
    ("AdaptiveAvgPool1d", (3, 12), 4),                    # even: windows, unbatched
    ("AdaptiveAvgPool2d", (2, 3, 9, 8), (3, 4)),
    ("AdaptiveAvgPool2d", (2, 3, 9, 8), (4, 5)),
    ("AdaptiveAvgPool2d", (3, 7, 6), (None, 4)),          # None keeps a size
    ("AdaptiveAvgPool2d", (2, 3, 5, 6), 1),
    ("AdaptiveAvgPool3d", (1, 2, 5, 6, 7), (2, 3, 4)),
    ("AdaptiveMaxPool2d", (2, 3, 9, 8), (4, 3)),
    ("AdaptiveMaxPool2d", (3, 7, 10), (3, 5)),            # unbatched
    ("AdaptiveMaxPool2d", (1, 2, 5, 5), 7),               # upsampling bins overlap
]


@pytest.mark.parametrize("name,shape,size", ADAPTIVE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ADAPTIVE_CASES)])
def test_adaptive_pool(name, shape, size):
    _compare(getattr(P, name)(size), getattr(T, name)(size), _data(shape))


def test_functional_forms_and_global_avg_pool():
    arr = _data((2, 3, 6, 5))
    tx = torch.from_numpy(arr)
    cx = lm.Graph()
    x = cx.tensor(arr.shape).set(arr)
    outs = [P.max_pool2d(x, 2, 1, 1), P.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            P.adaptive_avg_pool2d(x, (4, 3)), P.adaptive_max_pool2d(x, 2), P.GlobalAvgPool()(x),
            P.GlobalAvgPool(keepdim=True)(x), P.max_pool1d(x[0], 3), P.avg_pool3d(x, 2)]
    for o in outs:
        o.retrieve()
    cx.execute()
    F = torch.nn.functional
    exps = [F.max_pool2d(tx, 2, 1, 1), F.avg_pool2d(tx, 3, 2, 1, count_include_pad=False),
            F.adaptive_avg_pool2d(tx, (4, 3)), F.adaptive_max_pool2d(tx, 2), tx.mean((2, 3)),
            F.adaptive_avg_pool2d(tx, 1), F.max_pool1d(tx[0], 3), F.avg_pool3d(tx, 2)]
    for o, e in zip(outs, exps):
        assert o.data().shape == tuple(e.shape)
        np.testing.assert_allclose(o.data(), e.numpy(), rtol=RTOL, atol=ATOL)


def test_argument_errors():
    cx = lm.Graph()
    x = cx.tensor((1, 2, 6, 6))
    with pytest.raises(ValueError):
        P.MaxPool2d(2, padding=2)(x)          # padding > kernel/2, as PyTorch
    with pytest.raises(lm.GraphError):
        P.AvgPool2d(2)(cx.tensor((6, 6)))     # needs (C, H, W) or (N, C, H, W)
