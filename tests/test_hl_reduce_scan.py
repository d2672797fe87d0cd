"""Scans and triangles (luminal/hl_ops/scan.py) against PyTorch CPU: cumsum, cummax, cumprod, tril, triu."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import luminal as lm
from hl_helpers import check, make, run
make = functools.partial(make, low=-4, high=5)


T = torch.from_numpy
AXES = [0, 1, 2, -1, -2]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", AXES)
def test_cumsum(dtype, axis):
    x = make(dtype, seed=1)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    check(run(lambda t: t.cumsum(axis), x), torch.cumsum(T(x), axis), **tol)  # ints and bools -> int64


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", AXES)
def test_cummax(dtype, axis):
    x = make(dtype, seed=2)
    check(run(lambda t: t.cummax(axis), x), torch.cummax(T(x), axis).values)


def test_cummax_negative_values_and_nan():
    x = np.array([[-5.0, -7.0, -1.0, -3.0, -1.0], [-1e30, np.nan, 2.0, 3.0, -1.0]], np.float32)
    check(run(lambda t: t.cummax(1), x), torch.cummax(T(x), 1).values)
    xi = np.array([[np.iinfo(np.int32).min, -3, np.iinfo(np.int32).min, 4]], np.int32)
    check(run(lambda t: t.cummax(1), xi), torch.cummax(T(xi), 1).values)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", AXES)
def test_cumprod(dtype, axis):
    x = make(dtype, seed=3, low=-2, high=3)  # zeros and negatives: exact signs
    if np.dtype(dtype).kind == "f":
        x = (np.random.default_rng(3).integers(-2, 3, size=x.shape) * 0.8).astype(dtype)
    check(run(lambda t: t.cumprod(axis), x), torch.cumprod(T(x), axis), rtol=1e-6, atol=0)


def test_scans_of_views():
    x = make(np.float32, (4, 6), seed=4)
    t = T(x)
    check(run(lambda g: g.T.cumsum(1), x), t.T.cumsum(1), rtol=1e-5, atol=1e-5)
    check(run(lambda g: g[:, ::-2].cummax(-1), x), torch.cummax(t.flip(1)[:, ::2], -1).values)
    check(run(lambda g: g[1:3].cumprod(0), x), t[1:3].cumprod(0), rtol=1e-6, atol=1e-7)


def test_cumsum_symbolic_length():
    cx = lm.Graph()
    x = cx.tensor(("n",), dtype=lm.int64)
    out = x.cumsum(0).retrieve()
    for n in (1, 4, 9):
        xv = np.random.default_rng(n).integers(-9, 9, size=(n,)).astype(np.int64)
        x.set(xv)
        cx.execute()
        check(out.data(), torch.cumsum(T(xv), 0))


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [-5, -2, -1, 0, 1, 3, 6])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 5, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
def test_tril_triu(op, diagonal, shape, dtype):
    x = make(dtype, shape, seed=5)
    check(run(lambda t: getattr(t, op)(diagonal), x), getattr(torch, op)(T(x), diagonal))


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("rows,cols,diagonal", [(4, None, 0), (3, 5, 1), (5, 3, -1), (4, 4, 2)])
def test_graph_tril_triu_masks(op, rows, cols, diagonal):
    cx = lm.Graph()
    out = getattr(cx, op)(rows, cols, diagonal).retrieve()
    cx.execute()
    check(out.data(), getattr(torch, op)(torch.ones(rows, rows if cols is None else cols), diagonal))


def test_tril_of_1d_raises():
    with pytest.raises(ValueError):
        lm.Graph().tensor((4,)).tril()


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, -1])
def test_cummin(dtype, axis):
    x = make(dtype, seed=6)
    check(run(lambda t: t.cummin(axis), x), torch.cummin(T(x), axis).values)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cummin_at_the_int_minimum(dtype):
    lo = np.iinfo(dtype).min
    x = np.array([[3, lo, 5, -1], [lo, 2, lo, 7]], dtype)
    check(run(lambda t: t.cummin(1), x), torch.cummin(T(x), 1).values)
