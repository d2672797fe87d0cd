"""Reductions (luminal/hl_ops/reduction.py) against PyTorch CPU on seeded random inputs."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import luminal as lm
from hl_helpers import check, make, run
check = functools.partial(check, rtol=1e-5, atol=1e-6)  # this file's default float tolerance


# ---------------------------------------------------------------------------- helpers
TORCH_DT = {np.dtype(k): v for k, v in {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32,
                                          "int64": torch.int64, "bool": torch.bool}.items()}
SHAPE = (3, 4, 5)
AXES = [0, 1, -1, (0, 2), (-1, 0), (0, 1, 2), None]


def tdims(axis, ndim):
    """Torch ``dim`` argument for a luminal axis spec (None -> every axis)."""
    if axis is None:
        return tuple(range(ndim))
    return axis


def torch_prod(t, axis, keepdim):
    axes = sorted({a % t.ndim for a in ((axis,) if isinstance(axis, int) else tdims(axis, t.ndim))}, reverse=True)
    out = t
    for a in axes:
        out = torch.prod(out, dim=a, keepdim=keepdim)
    return out


FLOAT_TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-12)}


# ---------------------------------------------------------------------------- sum / max / min / mean
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(dtype, axis, keepdim):
    x = make(dtype)
    got = run(lambda t: t.sum(axis, keepdim), x)
    tol = FLOAT_TOL.get(dtype, {})
    check(got, torch.sum(torch.from_numpy(x), dim=tdims(axis, x.ndim), keepdim=keepdim), **tol)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32])
def test_sum_of_bool_and_int32_is_int64(dtype):
    x = make(dtype, (6, 7), seed=3, low=2**28, high=2**30)  # int32 would overflow: the sum accumulates in int64
    got = run(lambda t: t.sum(), x)
    assert got.dtype == np.int64
    check(got, torch.from_numpy(x).sum())


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min(op, dtype, axis, keepdim):
    x = make(dtype, seed=1)
    got = run(lambda t: getattr(t, op)(axis, keepdim), x)
    tfn = torch.amax if op == "max" else torch.amin
    check(got, tfn(torch.from_numpy(x), dim=tdims(axis, x.ndim), keepdim=keepdim), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dtype, axis, keepdim):
    x = make(dtype, seed=2)
    got = run(lambda t: t.mean(axis, keepdim), x)
    check(got, torch.mean(torch.from_numpy(x), dim=tdims(axis, x.ndim), keepdim=keepdim), **FLOAT_TOL[dtype])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_mean_of_int_raises_type_error(dtype):
    cx = lm.Graph()
    x = cx.tensor((2, 3), dtype=lm.DType(np.dtype(dtype).name))
    with pytest.raises(TypeError):
        x.mean()
    with pytest.raises(RuntimeError):
        torch.zeros(2, 3, dtype=TORCH_DT[np.dtype(dtype)]).mean()  # the oracle refuses too


# ---------------------------------------------------------------------------- prod
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod(dtype, axis, keepdim):
    # values in {-2..2}: zeros and negatives, so signs and exact zeros are checked
    x = make(dtype, seed=4, low=-2, high=3)
    if np.dtype(dtype).kind == "f":
        x = np.random.default_rng(4).integers(-2, 3, size=SHAPE).astype(dtype) * np.asarray(0.75, dtype)
    got = run(lambda t: t.prod(axis, keepdim), x)
    exp = torch_prod(torch.from_numpy(x), axis, keepdim)
    check(got, exp, rtol=1e-6, atol=0)
    if got.dtype.kind == "f":  # exact signs of zeros and of products
        np.testing.assert_array_equal(np.sign(got), np.sign(exp.numpy()))


@pytest.mark.parametrize("n", [1, 2, 5, 7, 8])
def test_prod_odd_and_even_lengths(n):
    x = np.random.default_rng(n).uniform(-1.5, 1.5, size=(3, n)).astype(np.float32)
    x[0, 0] = 0.0
    check(run(lambda t: t.prod(1), x), torch.from_numpy(x).prod(1), rtol=1e-5, atol=0)


# ---------------------------------------------------------------------------- var / std
@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(op, dtype, correction, axis, keepdim):
    x = make(dtype, seed=5) * 3 + 1
    got = run(lambda t: getattr(t, op)(axis, correction=correction, keepdim=keepdim), x)
    exp = getattr(torch, op)(torch.from_numpy(x), dim=tdims(axis, x.ndim), correction=correction, keepdim=keepdim)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    check(got, exp, **tol)


def test_var_unbiased_flag():
    x = make(np.float32, seed=6)
    t = torch.from_numpy(x)
    got = run(lambda g: (g.var(1, unbiased=False), g.std(1, unbiased=True)), x)
    check(got[0], torch.var(t, 1, unbiased=False), rtol=1e-5, atol=1e-6)
    check(got[1], torch.std(t, 1, unbiased=True), rtol=1e-5, atol=1e-6)


def test_var_int_raises_type_error():
    cx = lm.Graph()
    with pytest.raises(TypeError):
        cx.tensor((3,), dtype=lm.int32).var()


# ---------------------------------------------------------------------------- argmax / argmin
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin_with_ties(op, dtype, axis, keepdim):
    # only 3 distinct values in 60 elements: many ties, torch returns the first index
    x = np.random.default_rng(7).integers(0, 3, size=SHAPE).astype(dtype)
    got = run(lambda t: getattr(t, op)(axis, keepdim), x)
    check(got, getattr(torch, op)(torch.from_numpy(x), dim=axis, keepdim=keepdim))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_argmin_distinct_values(op):
    x = make(np.float32, (4, 9), seed=8)
    for axis in (0, 1, -2, None):
        check(run(lambda t: getattr(t, op)(axis), x), getattr(torch, op)(torch.from_numpy(x), dim=axis))


def test_argmax_all_equal_row_gives_zero():
    x = np.array([[2.0, 2.0, 2.0], [1.0, 3.0, 3.0], [-1.0, -1.0, -5.0]], np.float32)
    t = torch.from_numpy(x)
    check(run(lambda g: g.argmax(1), x), t.argmax(1))
    check(run(lambda g: g.argmin(1), x), t.argmin(1))


# ---------------------------------------------------------------------------- logsumexp
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(dtype, axis, keepdim):
    x = make(dtype, seed=9) * 4
    got = run(lambda t: t.logsumexp(axis, keepdim), x)
    check(got, torch.logsumexp(torch.from_numpy(x), dim=tdims(axis, x.ndim), keepdim=keepdim), **FLOAT_TOL[dtype])


def test_logsumexp_extreme_and_infinite():
    x = np.array([[1000.0, 999.0, -1000.0], [-1000.0, -1001.0, -1002.0],
                  [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, 1.0]], np.float32)
    got = run(lambda t: t.logsumexp(1), x)
    check(got, torch.logsumexp(torch.from_numpy(x), 1), rtol=1e-6, atol=1e-4)


# ---------------------------------------------------------------------------- any / all
@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.float32])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(op, dtype, axis, keepdim):
    rng = np.random.default_rng(10)
    # mostly-true data so that both outcomes occur for all() as well as any()
    x = (rng.random(SHAPE) < (0.85 if op == "all" else 0.15)) * rng.integers(1, 4, size=SHAPE)
    x = x.astype(dtype)
    got = run(lambda t: getattr(t, op)(axis, keepdim), x)
    exp = getattr(torch, op)(torch.from_numpy(x), dim=tdims(axis, x.ndim), keepdim=keepdim)
    check(got, exp)


# ---------------------------------------------------------------------------- errors and edge cases
def test_repeated_or_out_of_range_axis_raises():
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    with pytest.raises(ValueError):
        x.sum((1, -1))
    with pytest.raises(IndexError):
        x.sum(2)


def test_reduction_of_view_inputs():
    """Reductions read through permuted / sliced / broadcast views correctly."""
    x = make(np.float32, (4, 6, 5), seed=11)
    t = torch.from_numpy(x)
    got = run(lambda g: (g.permute(2, 0, 1).sum(-1), g[:, 1::2].max(1), g[::-1, :, 1:4].mean((0, 2)),
                         g[:, :1].expand(4, 3, 5).var(1)), x)
    check(got[0], t.permute(2, 0, 1).sum(-1), rtol=1e-5, atol=1e-5)
    check(got[1], t[:, 1::2].amax(1), rtol=0, atol=0)
    check(got[2], t.flip(0)[:, :, 1:4].mean((0, 2)), rtol=1e-5, atol=1e-6)
    check(got[3], t[:, :1].expand(4, 3, 5).var(1), rtol=1e-5, atol=1e-6)


def test_nan_propagates_through_max_and_argmax():
    x = make(np.float32, (3, 5), seed=12)
    x[0, 3] = np.nan
    x[2, 1] = np.nan
    x[2, 4] = np.nan
    t = torch.from_numpy(x)
    got = run(lambda g: (g.max(1), g.min(1), g.argmax(1), g.argmin(1), g.max(0)), x)
    check(got[0], t.amax(1))
    check(got[1], t.amin(1))
    check(got[2], t.argmax(1))  # torch treats NaN as the extreme value: index of the first NaN
    check(got[3], t.argmin(1))
    check(got[4], t.amax(0))


@pytest.mark.parametrize("op", ["sum", "max", "mean", "prod", "var", "argmax", "logsumexp"])
def test_reductions_over_symbolic_axis(op):
    cx = lm.Graph()
    x = cx.tensor(("n", 4))
    outs = [getattr(x, op)(0).retrieve(), getattr(x, op)(-1).retrieve()]
    for n in (2, 5):
        xv = make(np.float32, (n, 4), seed=20 + n)
        x.set(xv)
        cx.execute()
        t = torch.from_numpy(xv)
        tfn = {"max": torch.amax}.get(op, getattr(torch, op))
        check(outs[0].data(), tfn(t, 0), rtol=1e-4, atol=1e-5)
        check(outs[1].data(), tfn(t, -1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_int_min_and_argmin_at_the_int_minimum(dtype):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = np.array([[lo, 5, -3], [7, lo, lo], [hi, 0, hi]], dtype)
    t = torch.from_numpy(x)
    got = run(lambda g: (g.min(1), g.argmin(1), g.min(), g.max(0), g.argmax(1)), x)
    check(got[0], t.amin(1))
    check(got[1], t.argmin(1))
    check(got[2], t.amin())
    check(got[3], t.amax(0))
    check(got[4], t.argmax(1))


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64])
def test_any_all_over_empty_axis(dtype):
    x = make(dtype, (3, 4), seed=13)
    t = torch.from_numpy(x)
    got = run(lambda g: (g[:, :0].any(1), g[:, :0].all(1), g[:0].any(), g[:0].all(0)), x)
    check(got[0], t[:, :0].any(1))  # False
    check(got[1], t[:, :0].all(1))  # True
    check(got[2], t[:0].any())
    check(got[3], t[:0].all(0))


def test_sum_prod_over_empty_axis():
    x = make(np.float32, (3, 4), seed=14)
    t = torch.from_numpy(x)
    got = run(lambda g: (g[:, :0].sum(1), g[:, :0].prod(1), g[:0].sum(0, keepdim=True)), x)
    check(got[0], t[:, :0].sum(1))
    check(got[1], t[:, :0].prod(1))
    check(got[2], t[:0].sum(0, keepdim=True))


def test_sum_and_prod_with_dtype_argument():
    x = make(np.float32, (3, 4), seed=15)
    t = torch.from_numpy(x)
    got = run(lambda g: (g.sum(1, dtype=lm.float64), g.prod(1, dtype=lm.float64)), x)
    check(got[0], t.sum(1, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    check(got[1], t.prod(1, dtype=torch.float64), rtol=1e-12, atol=1e-12)
