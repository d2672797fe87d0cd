"""Non-constant padding (``F.pad`` reflect / replicate / circular, ``ReflectionPad2d`` ...): values and gradients
against PyTorch, and gradients without a scatter (the ``border_pad`` gradient rule, luminal/nn/functional.py
``border_pad_grad``); the unview of a padded flipped view (luminal/training/unview.py) without a gather."""

import numpy as np
import pytest

import luminal as lm
import luminal.nn.functional as F
from luminal.training import grad

torch = pytest.importorskip("torch")


def _ops(cx):
    return {type(n.op).__name__ for n in cx.nodes.values()}


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 1, 1, 1), (2, 3, 1, 2), (0, 2, 3, 0)])
def test_pad_values_and_gradients(mode, pad):
    rng = np.random.default_rng(len(pad) + sum(pad))
    xv = rng.standard_normal((2, 3, 6, 7)).astype(np.float64)
    out_shape = [2, 3, 6, 7 + pad[0] + pad[1]]
    if len(pad) == 4:
        out_shape[2] += pad[2] + pad[3]
    wv = rng.standard_normal(out_shape)
    cx = lm.Graph()
    x = cx.tensor(xv.shape, "float64").set(xv)
    y = F.pad(x, pad, mode=mode).retrieve()
    forward = _ops(cx)
    (g,) = grad((y * cx.tensor(wv.shape, "float64").set(wv)).sum(), [x])
    g.retrieve()
    assert "ScatterAdd" not in _ops(cx) and _ops(cx) - forward <= {"Add", "Mul", "SumReduce", "Constant"}
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xv).requires_grad_(True)
    ty = torch.nn.functional.pad(tx, pad, mode=mode)
    (tg,) = torch.autograd.grad((ty * torch.from_numpy(wv)).sum(), [tx])
    np.testing.assert_array_equal(y.data(), ty.detach().numpy())
    np.testing.assert_allclose(g.data(), tg.numpy(), rtol=1e-12, atol=1e-12)


def test_the_gradient_of_a_padded_flipped_view_is_a_view():
    """A flipped slice read through a pad (a reflect border in a concatenation): the view's mask has
    coefficient -1 after the flip is undone; the gradient is a flip, a slice and a pad, not a gather."""
    xv = np.arange(8.0)
    cx = lm.Graph()
    x = cx.tensor((8,), "float64").set(xv)
    piece = x.slice_axis(0, 1, 4).flip(0).pad_axis(0, 2, 5)      # [0, 0, x3, x2, x1, 0, 0, 0, 0, 0]
    w = cx.tensor((10,), "float64").set(np.arange(10.0) + 1)
    (g,) = grad((piece * w).sum(), [x])
    g.retrieve()
    assert not _ops(cx) & {"Gather", "ScatterAdd"}
    cx.execute()
    want = np.zeros(8)
    want[3], want[2], want[1] = 3.0, 4.0, 5.0                     # x3 read at position 2 (weight 3), ...
    np.testing.assert_array_equal(g.data(), want)
