"""``F.affine_grid`` and ``F.grid_sample`` (spatial transformers) against torch CPU: values and gradients with
respect to the input and the grid / theta, float64 (1e-9), on both backends (conftest parametrizes test_nn_*).
(ONNX's AffineGrid/GridSample node tests run the same code.) The grid points avoid pixel centres' exact
boundaries, where the floor in the interpolation weights makes the gradient one-sided in both libraries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.functional as F
from luminal.graph import GraphError
from luminal.training import grad


def _grid(rng, shape):
    g = rng.uniform(-1.2, 1.2, shape)  # some points outside [-1, 1]: the padding modes matter
    return g


def _compare(build_ours, build_torch, arrays, tol=1e-9):
    cx = lm.Graph()
    xs = [cx.tensor(a.shape, dtype="float64").set(a) for a in arrays]
    y = build_ours(*xs)
    w = np.random.default_rng(9).standard_normal(tuple(int(d) for d in y.dims))
    gs = grad((y * cx.tensor(w.shape, dtype="float64").set(w)).sum(), xs, allow_unused=True)
    gs = [g.retrieve() if g is not None else None for g in gs]  # (nearest: the grid gets no gradient)
    y.retrieve()
    cx.execute()
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    ty = build_torch(*ts)
    tgs = torch.autograd.grad((ty * torch.from_numpy(w)).sum(), ts, allow_unused=True, materialize_grads=True)
    np.testing.assert_allclose(y.data(), ty.detach().numpy(), rtol=tol, atol=tol)
    for g, t in zip(gs, tgs):
        np.testing.assert_allclose(0.0 if g is None else g.data(), t.numpy(), rtol=tol, atol=tol)


# every mode with every padding mode; align_corners alternating (each mode and each padding mode sees both)
COMBOS = [(m, p, (i + j) % 2 == 1) for i, m in enumerate(["bilinear", "nearest", "bicubic"])
          for j, p in enumerate(["zeros", "border", "reflection"])]


@pytest.mark.parametrize("mode,padding_mode,align", COMBOS)
def test_grid_sample_2d_matches_torch(mode, padding_mode, align):
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((2, 3, 5, 6)), _grid(rng, (2, 4, 7, 2))
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align)
    _compare(lambda a, b: F.grid_sample(a, b, **kw),
             lambda a, b: torch.nn.functional.grid_sample(a, b, **kw), [x, g])


def test_grid_sample_3d_matches_torch():
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((1, 2, 3, 4, 5)), _grid(rng, (1, 2, 3, 4, 3))
    kw = dict(mode="bilinear", padding_mode="border", align_corners=False)
    _compare(lambda a, b: F.grid_sample(a, b, **kw),
             lambda a, b: torch.nn.functional.grid_sample(a, b, **kw), [x, g])


@pytest.mark.parametrize("size,align", [((2, 3, 4, 5), False), ((2, 3, 4, 5), True), ((2, 1, 3, 4, 2), False)])
def test_affine_grid_then_sample_matches_torch(size, align):
    """A spatial transformer: theta -> affine_grid -> grid_sample, gradients to the image and to theta."""
    rng = np.random.default_rng(2)
    nd = len(size) - 2
    theta = np.concatenate([np.eye(nd)[None].repeat(size[0], 0), np.zeros((size[0], nd, 1))], 2)
    theta = theta + rng.normal(0, 0.2, theta.shape)
    x = rng.standard_normal(size)

    def ours(t, a):
        return F.grid_sample(a, F.affine_grid(t, size, align_corners=align), align_corners=align)

    def theirs(t, a):
        return torch.nn.functional.grid_sample(a, torch.nn.functional.affine_grid(t, size, align_corners=align),
                                               align_corners=align)
    _compare(ours, theirs, [theta, x])


def test_errors_name_the_argument():
    cx = lm.Graph()
    x, g = cx.tensor((1, 2, 4, 4)), cx.tensor((1, 3, 3, 2))
    with pytest.raises(ValueError, match="mode"):
        F.grid_sample(x, g, mode="area")
    with pytest.raises(ValueError, match="padding_mode"):
        F.grid_sample(x, g, padding_mode="circular")
    with pytest.raises(GraphError, match="grid must be"):
        F.grid_sample(x, cx.tensor((1, 3, 3, 3)))
    with pytest.raises(GraphError, match=r"theta must be \(N, 2, 3\)"):
        F.affine_grid(cx.tensor((1, 3, 4)), (1, 2, 4, 4))
    with pytest.raises(GraphError, match="symbolic"):
        F.grid_sample(cx.tensor((1, 2, "h", 4)), g)
