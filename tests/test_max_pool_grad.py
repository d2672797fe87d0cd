"""Max pooling's gradient where windows hold tied maxima, NaN or -inf: PyTorch's semantics, not ``amax``'s.

PyTorch's ``max_pool*d`` / ``adaptive_max_pool*d`` backward scatters each window's gradient to the position its
indices name: the first maximum in row-major scan order over the window, or the last NaN when the window holds
one; padding never takes any. (``torch.amax`` instead shares the gradient among tied maxima, which is what
luminal's ``MaxReduce`` rule does and what max pooling did before.) Oracle: ``torch.autograd`` in float32 on the
same inputs and upstream gradient. Inputs are small integers (ties in almost every window), with NaN and -inf
planted in some cases. Overlapping windows sum several gradients into one position in an order that may differ
from torch's, hence ``rtol=1e-6``; everything else is exact. Devices: the reference interpreter and ``cpu``.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import grad


def tied(shape, seed, specials=False):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, size=shape).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, size=max(2, flat.size // 12), replace=False)
        flat[picks[::2]] = np.nan
        flat[picks[1::2]] = -np.inf
    return x


# (name, luminal function, torch function, input shape, specials)
CASES = [
    ("2d-k2", lambda x: F.max_pool2d(x, 2), lambda x: torch.nn.functional.max_pool2d(x, 2), (2, 3, 6, 6), False),
    ("2d-k3-s1-overlap", lambda x: F.max_pool2d(x, 3, 1), lambda x: torch.nn.functional.max_pool2d(x, 3, 1),
     (1, 2, 7, 6), False),
    ("2d-pad-ceil", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
     lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 2, 8, 7), False),
    ("2d-dilation", lambda x: F.max_pool2d(x, 2, 1, 0, 2), lambda x: torch.nn.functional.max_pool2d(x, 2, 1, 0, 2),
     (1, 2, 7, 7), False),
    ("2d-rect-specials", lambda x: F.max_pool2d(x, (2, 3), (2, 1)),
     lambda x: torch.nn.functional.max_pool2d(x, (2, 3), (2, 1)), (2, 2, 6, 8), True),
    ("2d-pad-specials", lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1),
     (1, 3, 7, 7), True),
    ("2d-unbatched", lambda x: F.max_pool2d(x, 2), lambda x: torch.nn.functional.max_pool2d(x, 2), (3, 6, 4), False),
    ("2d-indices", lambda x: F.max_pool2d(x, 2, return_indices=True)[0],
     lambda x: torch.nn.functional.max_pool2d(x, 2, return_indices=True)[0], (1, 2, 6, 6), True),
    ("1d-k3-s2-pad", lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: torch.nn.functional.max_pool1d(x, 3, 2, 1),
     (2, 3, 11), True),
    ("3d-k2", lambda x: F.max_pool3d(x, 2), lambda x: torch.nn.functional.max_pool3d(x, 2), (1, 2, 4, 4, 6), True),
    ("module", lambda x: nn.MaxPool2d(2, 2)(x), lambda x: torch.nn.MaxPool2d(2, 2)(x), (2, 2, 4, 6), False),
    ("adaptive-2d-even", lambda x: F.adaptive_max_pool2d(x, (3, 2)),
     lambda x: torch.nn.functional.adaptive_max_pool2d(x, (3, 2)), (2, 2, 6, 6), True),
    ("adaptive-2d-uneven", lambda x: F.adaptive_max_pool2d(x, (3, 4)),
     lambda x: torch.nn.functional.adaptive_max_pool2d(x, (3, 4)), (1, 2, 7, 9), True),
    ("adaptive-2d-uneven-indices", lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True)[0],
     lambda x: torch.nn.functional.adaptive_max_pool2d(x, (3, 2), return_indices=True)[0], (1, 2, 5, 7), True),
    ("adaptive-1d-uneven", lambda x: F.adaptive_max_pool1d(x, 4),
     lambda x: torch.nn.functional.adaptive_max_pool1d(x, 4), (2, 2, 10), True),
]


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_max_pool_gradient_routes_like_torch(case, device):
    name, lm_fn, torch_fn, shape, specials = case
    x_np = tied(shape, 7, specials)
    xt = torch.tensor(x_np, requires_grad=True)
    yt = torch_fn(xt)
    g_np = (np.random.default_rng(8).integers(1, 9, size=tuple(yt.shape)) / 8.0).astype(np.float32)
    yt.backward(torch.tensor(g_np))
    cx = lm.Graph()
    x = cx.tensor(shape).set(x_np)
    y = lm_fn(x)
    (gx,) = grad(y, [x], grad_output=g_np)
    y.retrieve()
    gx.retrieve()
    cx.compile(device=device)
    cx.execute()
    np.testing.assert_array_equal(y.data(), yt.detach().numpy())
    np.testing.assert_allclose(gx.data(), xt.grad.numpy(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_padding_never_takes_the_gradient_of_an_all_minus_inf_window(device):
    """The padding is -inf too: a window whose real values are all -inf ties with it, and the gradient must still
    go to the first real position (the padding comes first in the window at the left edge)."""
    x_np = np.array([[[-np.inf, -np.inf, 1.0, -np.inf, 2.0, -np.inf, -np.inf]]], dtype=np.float32)
    g_np = np.array([[[1.0, 2.0, 4.0, 8.0]]], dtype=np.float32)
    xt = torch.tensor(x_np, requires_grad=True)
    torch.nn.functional.max_pool1d(xt, 3, 2, 1).backward(torch.tensor(g_np))
    cx = lm.Graph()
    x = cx.tensor(x_np.shape).set(x_np)
    (gx,) = grad(F.max_pool1d(x, 3, 2, 1), [x], grad_output=g_np)
    gx.retrieve()
    cx.compile(device=device)
    cx.execute()
    assert xt.grad.numpy()[0, 0, 0] == 1.0  # the premise: torch gives the left window's gradient to x[0]
    np.testing.assert_array_equal(gx.data(), xt.grad.numpy())


def test_bfloat16_pooling_gradient_routes_like_torch():
    """Under bfloat16 ReLU zeros tie all the time; the gradient still goes to one position per window."""
    x_np = tied((2, 3, 8, 8), 11)
    g_np = (np.random.default_rng(12).integers(1, 9, size=(2, 3, 4, 4)) / 8.0).astype(np.float32)
    xt = torch.tensor(x_np, dtype=torch.bfloat16, requires_grad=True)
    torch.nn.functional.max_pool2d(xt, 2).backward(torch.tensor(g_np, dtype=torch.bfloat16))
    cx = lm.Graph()
    x = cx.tensor((2, 3, 8, 8), dtype="bfloat16").set(x_np.astype(lm.bfloat16.numpy))
    (gx,) = grad(F.max_pool2d(x, 2), [x], grad_output=g_np.astype(lm.bfloat16.numpy))
    gx.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_array_equal(gx.data().astype(np.float32), xt.grad.float().numpy())


def test_double_backward_through_the_pooling_gradient():
    """A gradient penalty (WGAN-GP style) differentiates the pooling gradient again, with respect to the upstream
    weights: the rule must stay differentiable in its upstream gradient. Against torch's ``create_graph=True``."""
    x_np = tied((2, 2, 6, 6), 21)
    v_np = np.random.default_rng(22).standard_normal((2, 2, 4, 4)).astype(np.float32)
    c_np = np.random.default_rng(23).standard_normal((2, 2, 6, 6)).astype(np.float32)
    xt = torch.tensor(x_np, requires_grad=True)
    vt = torch.tensor(v_np, requires_grad=True)
    (gxt,) = torch.autograd.grad((torch.nn.functional.max_pool2d(xt, 2, 2, 1) * vt).sum(), [xt], create_graph=True)
    (dvt,) = torch.autograd.grad((gxt * gxt * torch.tensor(c_np)).sum(), [vt])
    cx = lm.Graph()
    x = cx.tensor(x_np.shape).set(x_np)
    v = cx.tensor(v_np.shape).set(v_np)
    c = cx.tensor(c_np.shape).set(c_np)
    (gx,) = grad((F.max_pool2d(x, 2, 2, 1) * v).sum(), [x])
    (dv,) = grad((gx * gx * c).sum(), [v])
    dv.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(dv.data(), dvt.numpy(), rtol=1e-5, atol=1e-6)


def test_amax_still_shares_ties():
    """``max`` (``torch.amax``) keeps its own rule: tied maxima share the gradient evenly."""
    x_np = np.array([[1.0, 3.0, 3.0, 0.0]], dtype=np.float32)
    xt = torch.tensor(x_np, requires_grad=True)
    torch.amax(xt, 1).backward(torch.ones(1))
    cx = lm.Graph()
    x = cx.tensor((1, 4)).set(x_np)
    (gx,) = grad(x.max(1), [x], grad_output=np.ones(1, np.float32))
    gx.retrieve()
    cx.execute()
    np.testing.assert_array_equal(gx.data(), xt.grad.numpy())
