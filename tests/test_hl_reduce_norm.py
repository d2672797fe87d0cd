"""Normalizations (luminal/hl_ops/norm.py) against PyTorch CPU: softmax, log_softmax, layer_norm, mean_norm,
std_norm, normalize."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hl_helpers import check, run


def make(dtype, shape=(3, 4, 6), seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-11, atol=1e-13)}
DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_log_softmax(op, dtype, axis):
    x = make(dtype, seed=1)
    got = run(lambda t: getattr(t, op)(axis), x)
    check(got, getattr(torch, op)(torch.from_numpy(x), dim=axis), **TOL[dtype])


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_extreme_logits_stay_finite(op, axis):
    x = np.array([[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -1000.0, -999.5, -1000.0],
                  [1000.0, 1000.0, 1000.0, 1000.0]], np.float32)
    got = run(lambda t: getattr(t, op)(axis), x)
    exp = getattr(torch, op)(torch.from_numpy(x), dim=axis)
    assert np.isfinite(got).all() and np.isfinite(exp.numpy()).all()
    check(got, exp, rtol=1e-5, atol=1e-5)


def test_softmax_tuple_axes_matches_flattened_softmax():
    x = make(np.float32, seed=2)
    got = run(lambda t: t.softmax((1, 2)), x)
    exp = torch.softmax(torch.from_numpy(x).reshape(3, -1), -1).reshape(x.shape)
    check(got, exp, rtol=1e-5, atol=1e-7)


def test_softmax_of_int_input_is_float32():
    x = np.random.default_rng(3).integers(-3, 4, size=(4, 5)).astype(np.int32)
    got = run(lambda t: t.softmax(-1), x)
    check(got, torch.softmax(torch.from_numpy(x).float(), -1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_axes", [1, 2, 3])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm(dtype, n_axes, eps):
    x = make(dtype, seed=4) + 3.0
    axis = -1 if n_axes == 1 else tuple(range(-n_axes, 0))
    got = run(lambda t: t.layer_norm(axis, eps), x)
    exp = F.layer_norm(torch.from_numpy(x), x.shape[-n_axes:], eps=eps)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    check(got, exp, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, -1, (0, 2)])
def test_mean_norm(dtype, axis):
    x = make(dtype, seed=5) + 1.5
    t = torch.from_numpy(x)
    got = run(lambda g: g.mean_norm(axis), x)
    check(got, t - t.mean(dim=axis, keepdim=True), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [1, -1, (1, 2)])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_std_norm_is_rms_norm(dtype, axis, eps):
    x = make(dtype, seed=6)
    t = torch.from_numpy(x)
    got = run(lambda g: g.std_norm(axis, eps), x)
    exp = t / torch.sqrt(t.square().mean(dim=axis, keepdim=True) + eps)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-13)
    check(got, exp, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 2, float("inf"), 3])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_normalize(dtype, p, axis):
    x = make(dtype, seed=7)
    got = run(lambda t: t.normalize(p, axis), x)
    exp = F.normalize(torch.from_numpy(x), p=p, dim=axis)
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    check(got, exp, **tol)


@pytest.mark.parametrize("p", [1, 2, float("inf"), 3])
def test_normalize_zero_row_uses_eps(p):
    x = make(np.float32, (3, 5), seed=8)
    x[1] = 0.0
    got = run(lambda t: t.normalize(p, -1, 1e-6), x)
    exp = F.normalize(torch.from_numpy(x), p=p, dim=-1, eps=1e-6)
    assert np.isfinite(got).all()
    check(got, exp, rtol=2e-5, atol=1e-6)
