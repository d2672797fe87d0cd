"""``nn.Bilinear`` / ``F.bilinear`` and ``nn.LocalResponseNorm`` / ``F.local_response_norm`` against torch CPU:
values and gradients (float64, 1e-10), on both backends (conftest parametrizes test_nn_* modules); argument errors.
ONNX's ``LRN`` (the other padding convention for an even size) goes through the same code and is covered by the
ONNX node tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.graph import GraphError
from luminal.training import grad


def _run(build, arrays):
    cx = lm.Graph()
    xs = [cx.tensor(a.shape, dtype="float64").set(a) for a in arrays]
    out, wrt = build(xs)
    gs = [g.retrieve() for g in grad((out * out).sum(), wrt + xs)]
    out.retrieve()
    cx.execute()
    return out.data(), [g.data() for g in gs]


def _torch(build, arrays):
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    out, wrt = build(ts)
    return out.detach().numpy(), [g.numpy() for g in torch.autograd.grad((out * out).sum(), wrt + ts)]


def _same(ours, theirs):
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10, atol=1e-10)
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lead,bias", [((6,), True), ((2, 5), True), ((4,), False)])
def test_bilinear_matches_torch(lead, bias):
    rng = np.random.default_rng(0)
    ours = nn.Bilinear(3, 4, 5, bias=bias).to("float64")
    theirs = torch.nn.Bilinear(3, 4, 5, bias=bias).double()
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})
    a, b = rng.standard_normal(lead + (3,)), rng.standard_normal(lead + (4,))
    got = _run(lambda xs: (ours(xs[0], xs[1]), list(ours.parameters())), [a, b])
    want = _torch(lambda ts: (theirs(ts[0], ts[1]), list(theirs.parameters())), [a, b])
    _same(got, want)


def test_bilinear_init_and_errors():
    m = nn.Bilinear(16, 4, 3)
    w = m.state_dict()["weight"]
    assert w.shape == (3, 16, 4) and np.abs(w).max() <= 0.25 and np.abs(w).max() > 0.2  # U(-1/sqrt(16), ...)
    cx = lm.Graph()
    x1, x2, x3 = cx.tensor((2, 16)), cx.tensor((2, 5)), cx.tensor((3, 4))
    with pytest.raises(GraphError, match="features"):
        m(x1, x2)
    with pytest.raises(GraphError, match="leading dims"):
        m(x1, x3)


@pytest.mark.parametrize("shape,size", [((2, 7, 5), 3), ((2, 6, 4, 3), 4), ((1, 5, 2, 3, 2), 2), ((2, 3, 4), 5)])
def test_local_response_norm_matches_torch(shape, size):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape) * 3
    kw = dict(alpha=0.3, beta=0.6, k=1.5)
    got = _run(lambda xs: (nn.LocalResponseNorm(size, **kw)(xs[0]), []), [a])
    want = _torch(lambda ts: (torch.nn.LocalResponseNorm(size, **kw)(ts[0]), []), [a])
    _same(got, want)
    got = _run(lambda xs: (F.local_response_norm(xs[0], size), []), [a])
    want = _torch(lambda ts: (torch.nn.functional.local_response_norm(ts[0], size), []), [a])
    _same(got, want)


def test_local_response_norm_errors():
    cx = lm.Graph()
    with pytest.raises(GraphError, match="3 or more dims"):
        F.local_response_norm(cx.tensor((4, 5)), 3)
    with pytest.raises(ValueError, match="size must be >= 1"):
        F.local_response_norm(cx.tensor((2, 4, 5)), 0)
