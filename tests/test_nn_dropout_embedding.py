"""Dropout and Embedding (compared with torch.nn where deterministic; float32, rtol=1e-4, atol=1e-5).

Dropout's mask comes from luminal's own seeded stream, so training mode is checked statistically: with
n = 4000 elements the zero fraction must be within 0.05 of p (about 6 standard deviations of
sqrt(p(1-p)/n) ~ 0.008), and kept values must equal x / (1 - p).
Every test runs on both backends (tests/conftest.py).
"""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.nn import init
from luminal.nn.dropout import Dropout, Dropout2d, dropout
from luminal.nn.sparse import Embedding

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (40, 100)


def _run_dropout(module, a):
    cx = lm.Graph()
    x = cx.tensor(a.shape).set(a)
    y = module(x).retrieve()
    cx.execute()
    return cx, y


def test_dropout_eval_and_edge_probabilities():
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    assert repr(Dropout(0.3)) == repr(torch.nn.Dropout(0.3))
    _, y = _run_dropout(Dropout(0.5).eval(), a)
    np.testing.assert_array_equal(y.data(), a)
    _, y = _run_dropout(Dropout(0.0), a)  # training, p = 0: identity
    np.testing.assert_array_equal(y.data(), a)
    _, y = _run_dropout(Dropout(1.0), a)  # training, p = 1: all zeros (like torch)
    np.testing.assert_array_equal(y.data(), torch.nn.Dropout(1.0)(torch.from_numpy(a)).numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        Dropout(1.5)


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_dropout_training_mask(p):
    a = (np.random.default_rng(1).random(SHAPE) + 0.5).astype(np.float32)  # no zeros in the input
    cx, y = _run_dropout(Dropout(p, seed=123), a)
    first = y.data()
    zero = first == 0
    assert abs(zero.mean() - p) < 0.05
    np.testing.assert_allclose(first[~zero], a[~zero] / (1 - p), rtol=RTOL, atol=ATOL)

    cx.execute()  # the next step draws a new mask
    second = y.data()
    assert (second == 0).mean() == pytest.approx(p, abs=0.05)
    assert not np.array_equal(second == 0, zero)

    # the same seed reproduces the same sequence of masks, in another module and another graph
    cx2, y2 = _run_dropout(Dropout(p, seed=123), a)
    np.testing.assert_array_equal(y2.data(), first)
    cx2.execute()
    np.testing.assert_array_equal(y2.data(), second)
    _, y3 = _run_dropout(Dropout(p, seed=124), a)
    assert not np.array_equal(y3.data() == 0, zero)


def test_dropout_seed_from_manual_seed_and_channels():
    a = np.ones((8, 16, 2, 2), np.float32)
    init.manual_seed(5)
    m1 = dropout(lm.Graph().tensor(a.shape), 0.5)  # functional form draws its seed from init's generator
    init.manual_seed(5)
    _, y1 = _run_dropout(Dropout(0.5), a)
    init.manual_seed(5)
    _, y2 = _run_dropout(Dropout(0.5), a)
    np.testing.assert_array_equal(y1.data(), y2.data())
    assert m1.tracker.dims == y1.tracker.dims and m1.shape == y1.shape

    _, y = _run_dropout(Dropout2d(0.5, seed=3), a)  # whole channels are zeroed or scaled by 2
    per_channel = y.data().reshape(8, 16, 4)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert np.all(per_channel.min(-1) == per_channel.max(-1))
    assert 0 < (per_channel[..., 0] == 0).mean() < 1


def test_embedding_matches_torch():
    init.manual_seed(0)
    ours = Embedding(10, 4, padding_idx=-2)
    theirs = torch.nn.Embedding(10, 4, padding_idx=-2)
    assert ours.padding_idx == theirs.padding_idx == 8
    np.testing.assert_array_equal(ours.weight.data[8], np.zeros(4, np.float32))
    w = ours.weight.data[np.arange(10) != 8]
    assert abs(w.mean()) < 0.5 and 0.6 < w.std() < 1.4  # N(0, 1) init
    ours.load_state_dict(theirs.state_dict())

    ids = np.array([[1, 8, 3], [9, 0, 1]], np.int64)
    cx = lm.Graph()
    t = cx.tensor(ids.shape, lm.int64).set(ids)
    y = ours(t).retrieve()
    h = cx.tensor((2, 4)).set(np.eye(2, 4, dtype=np.float32))
    logits = ours.reverse(h).retrieve()
    assert any(n.op.name == "Gather" for n in cx.nodes.values())  # index_select lookup, not a one-hot
    cx.execute()
    with torch.no_grad():
        np.testing.assert_allclose(y.data(), theirs(torch.from_numpy(ids)).numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(logits.data(), (torch.eye(2, 4) @ theirs.weight.T).numpy(), rtol=RTOL, atol=ATOL)
    assert y.data().shape == (2, 3, 4)
    np.testing.assert_array_equal(y.data()[0, 1], 0)

    t.set(np.array([[1, 10, 3], [0, 0, 0]], np.int64))  # out of range: IndexError at execute, like torch
    with pytest.raises(IndexError):
        cx.execute()


@pytest.mark.parametrize("vocab", [10, 500])   # the fused one-hot gradient and the ScatterAdd one
@pytest.mark.parametrize("symbolic", [False, True])
def test_padding_idx_row_gets_no_gradient(vocab, symbolic):
    """PyTorch's ``padding_idx``: positions holding it send nothing to that row; the other rows sum as usual."""
    from luminal.training import grad
    ids_np = np.array([[1, 2, 1], [0, 1, 3]], np.int64)
    r_np = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    cx = lm.Graph()
    e = Embedding(vocab, 4, padding_idx=1)
    ids = cx.tensor(("b", "s") if symbolic else (2, 3), dtype="int64").set(ids_np)
    r = cx.tensor(("b", "s", 4) if symbolic else (2, 3, 4)).set(r_np)
    (g,) = grad((e(ids) * r).sum(), [e.weight])
    g.retrieve()
    cx.execute()
    te = torch.nn.Embedding(vocab, 4, padding_idx=1)
    (te(torch.from_numpy(ids_np)) * torch.from_numpy(r_np)).sum().backward()
    assert not te.weight.grad[1].any()  # the premise: torch leaves row 1 out
    np.testing.assert_allclose(g.data(), te.weight.grad.numpy(), rtol=1e-6, atol=0)
