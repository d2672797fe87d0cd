"""``tanh``, ``sigmoid``, ``erf``, ``softmax`` and ``log_softmax`` are differentiated by PyTorch's formulas
(``tanh_backward``: ``g (1 - y^2)``; ``sigmoid_backward``: ``g (1 - y) y``; erf: ``g 2/sqrt(pi) exp(-x^2)``;
softmax: ``y (g - sum(g y))``; log_softmax: ``g - exp(y) sum(g)``), not by the chain rule through the
primitives that compute them (tanh's rational function, sigmoid's exp and reciprocal, erf's polynomials,
softmax's maximum, exponentials and sum: that backward read the input, the maximum and the exponentials).

Oracles: the formula evaluated by numpy on luminal's own outputs (within one float32 rounding; the chain rule
through tanh's rational function is up to 3 ulp off and fails it), and torch's autograd.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.training import grad

XS = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -0.0, 1e-30, -1e-30, 88.5, -88.5, 100.0, -100.0]])


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("fn", ["tanh", "sigmoid"])
def test_gradient_is_the_output_formula(fn, device):
    xs = XS.astype(np.float32)
    gs = np.random.default_rng(0).standard_normal(xs.shape).astype(np.float32)
    cx = lm.Graph()
    x, g = cx.tensor(xs.shape).set(xs), cx.tensor(xs.shape).set(gs)
    y = getattr(x, fn)().retrieve()
    (dx,) = grad((y * g).sum(), [x])
    dx.retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
    cx.execute()
    yv = y.data().astype(np.float64)
    local = 1.0 - yv * yv if fn == "tanh" else (1.0 - yv) * yv
    _close(dx.data(), gs * local, 2.0 ** -22, 2.0 ** -23 * np.abs(gs))
    tx = torch.from_numpy(xs).requires_grad_()
    (getattr(torch, fn)(tx) * torch.from_numpy(gs)).sum().backward()
    _close(dx.data(), tx.grad.numpy(), 1e-6, 1e-6 * np.abs(gs))


def _close(got, ref, rtol, atol):
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > rtol * np.abs(ref) + atol
    assert not bad.any(), f"{bad.sum()} values off, worst {err.max():.3g}"


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_gradient_is_the_gaussian(device, dtype):
    xs = XS.astype(dtype)
    cx = lm.Graph()
    x = cx.tensor(xs.shape, dtype).set(xs)
    (dx,) = grad(x.erf().sum(), [x])
    dx.retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
    cx.execute()
    x64 = xs.astype(np.float64)
    ref = 2.0 / np.sqrt(np.pi) * np.exp(-x64 * x64)
    eps, tiny = (2.0 ** -52, 2.0 ** -1022) if dtype == "float64" else (2.0 ** -23, 2.0 ** -126)
    # exp's error (a few ulp) plus the rounding of x^2, amplified by x^2; results below the normal range may flush
    rtol = (4 + 2 * x64 * x64) * eps
    _close(dx.data(), ref, rtol, tiny)
    tx = torch.from_numpy(xs).requires_grad_()
    torch.erf(tx).sum().backward()
    _close(dx.data(), tx.grad.numpy().astype(np.float64), 2 * rtol, tiny)


@pytest.mark.parametrize("fn", ["tanh", "sigmoid", "erf"])
def test_special_values(fn):
    xs = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    cx = lm.Graph()
    x = cx.tensor(xs.shape).set(xs)
    (dx,) = grad(getattr(x, fn)().sum(), [x])
    dx.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xs).requires_grad_()
    getattr(torch, fn)(tx).sum().backward()
    np.testing.assert_array_equal(dx.data(), tx.grad.numpy())


def test_erf_gelu_gradient_matches_torch():
    rng = np.random.default_rng(2)
    xs = (rng.standard_normal((64, 128)) * 3).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xs.shape).set(xs)
    (dx,) = grad(x.gelu().sum(), [x])
    dx.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xs).requires_grad_()
    torch.nn.functional.gelu(tx).sum().backward()
    np.testing.assert_allclose(dx.data(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_tanh_gelu_gradient_matches_torch():
    rng = np.random.default_rng(1)
    xs = (rng.standard_normal((64, 128)) * 3).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xs.shape).set(xs)
    (dx,) = grad(x.gelu("tanh").sum(), [x])
    dx.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xs).requires_grad_()
    torch.nn.functional.gelu(tx, approximate="tanh").sum().backward()
    # (1 - y^2) cancels where |y| is near 1: an ulp of y moves it by up to 2^-22, times 0.5 |x| u' (|x| <= 15 here)
    np.testing.assert_allclose(dx.data(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 1, (0, 2)])
def test_softmax_gradients_are_torchs(fn, axis, device):
    """Masked entries (-inf), a row masked whole (NaN, as torch), large values, over one axis or two; the
    gradient against torch float64 and against the formula on luminal's own output; the training graph reads
    no exponential of the input (its backward needs the output alone)."""
    rng = np.random.default_rng(1)
    xs = (rng.standard_normal((3, 5, 7)) * 6).astype(np.float32)
    xs[0, 1, 2] = xs[1, :, 3].min() - 200.0
    xs[2, 3, :] = -np.inf if axis == -1 else xs[2, 3, :]  # a row that sees nothing (softmax over the last axis)
    xs[1, 2, 4] = -np.inf
    xs[0, 0, 0] = 60.0
    gs = rng.standard_normal(xs.shape).astype(np.float32)
    cx = lm.Graph()
    x, g = cx.tensor(xs.shape).set(xs), cx.tensor(xs.shape).set(gs)
    y = getattr(x, fn)(axis).retrieve()
    forward = {i for i, n in cx.nodes.items() if type(n.op).__name__ in ("Exp2", "MaxReduce")} | {x.id}
    first = max(cx.nodes) + 1
    (dx,) = grad((y * g).sum(), [x])
    read = {e.src for i, n in cx.nodes.items() if i >= first for e in n.inputs}
    assert not read & forward, "the backward reads the input, its maximum or its exponentials"
    dx.retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
    cx.execute()
    dims = axis if isinstance(axis, tuple) else (axis,)
    tx = torch.from_numpy(xs).double().requires_grad_()
    ty = getattr(torch, fn)(tx, dim=dims[0]) if len(dims) == 1 else None
    if ty is None:  # torch's softmax takes one dim: over (0, 2) as the last dim of a permuted, flattened view
        flat = tx.permute(1, 0, 2).reshape(5, 21)
        ty = getattr(torch, fn)(flat, dim=1).reshape(5, 3, 7).permute(1, 0, 2)
    (ty * torch.from_numpy(gs).double()).sum().backward()
    want = tx.grad.numpy()
    got = dx.data().reshape(xs.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5)
    yv, g64 = y.data().reshape(xs.shape).astype(np.float64), gs.astype(np.float64)
    if fn == "softmax":
        local = yv * (g64 - (g64 * yv).sum(dims, keepdims=True))
    else:
        local = g64 - np.exp(yv) * g64.sum(dims, keepdims=True)
    np.testing.assert_allclose(got[ok], local[ok], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_bfloat16_softmax_gradient_is_torchs(fn):
    """A bfloat16 softmax's backward is torch's CPU kernel: the formula on the bfloat16 output and gradient, in
    float32, rounded once: within one bfloat16 ulp (the sums' order) of the formula evaluated in float64 on
    luminal's own bfloat16 output; and close to torch's (whose forward may round the output the other way)."""
    import ml_dtypes

    rng = np.random.default_rng(2)
    xs = (rng.standard_normal((6, 300)) * 4).astype(ml_dtypes.bfloat16)
    gs = rng.standard_normal((6, 300)).astype(ml_dtypes.bfloat16)
    cx = lm.Graph()
    x, g = cx.tensor(xs.shape, lm.DType.bfloat16).set(xs), cx.tensor(xs.shape, lm.DType.bfloat16).set(gs)
    y = getattr(x, fn)(-1)
    (dx,) = grad((y * g).cast(lm.DType.float32).sum(), [x])
    dx.retrieve()
    y.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    got = np.asarray(dx.data()).astype(np.float64).reshape(xs.shape)
    yv, g64 = np.asarray(y.data()).astype(np.float64).reshape(xs.shape), gs.astype(np.float64)
    if fn == "softmax":
        inner = (g64 * yv).sum(-1, keepdims=True)
        formula, terms = yv * (g64 - inner), np.abs(yv) * (np.abs(g64) + np.abs(inner))
    else:
        inner = np.exp(yv) * g64.sum(-1, keepdims=True)
        formula, terms = g64 - inner, np.abs(g64) + np.abs(inner)
    # (one rounding of the result, plus float32 rounding of the terms where they cancel)
    ulp = np.abs(got - formula) / (np.maximum(np.abs(formula), 2.0 ** -133) * 2.0 ** -8 + terms * 2.0 ** -20)
    assert ulp.max() <= 1.0, ulp.max()
    tx = torch.from_numpy(xs.astype(np.float32)).bfloat16().requires_grad_()
    getattr(torch, fn)(tx, -1).backward(torch.from_numpy(gs.astype(np.float32)).bfloat16())
    np.testing.assert_allclose(got, tx.grad.double().numpy(), rtol=2e-2, atol=2e-2 * np.abs(g64).max())
