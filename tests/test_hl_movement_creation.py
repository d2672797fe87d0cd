"""Tensors made inside the graph (luminal/hl_ops/creation.py): arange, full/zeros/ones, iota, seeded rand/randn."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from hl_helpers import check, evaluate


# ---------------------------------------------------------------------------- arange
INT_ARGS = [(5,), (0,), (1,), (2, 10), (2, 10, 3), (10, 2, -3), (0, 0), (-4, 7, 2), (7, -4, -2), (3, 4, 10)]
FLOAT_ARGS = [(0.0, 1.0, 0.1), (0.5, 3, 0.7), (-1, 1, 0.25), (1, 2.5, 0.5), (5.0,), (2.0, -1.0, -0.5), (0, 3, 1.5)]


@pytest.mark.parametrize("args", INT_ARGS, ids=str)
def test_arange_int(args):
    check(evaluate(lambda cx: cx.arange(*args)), torch.arange(*args))
    check(evaluate(lambda cx: lm.arange(cx, *args)), torch.arange(*args))


@pytest.mark.parametrize("args", FLOAT_ARGS, ids=str)
def test_arange_float(args):
    check(evaluate(lambda cx: cx.arange(*args)), torch.arange(*args), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,tdtype", [(lm.float64, torch.float64), (lm.int32, torch.int32),
                                          (lm.float32, torch.float32), (lm.int64, torch.int64)])
@pytest.mark.parametrize("args", [(6,), (1, 9, 2), (8, -2, -3)], ids=str)
def test_arange_explicit_dtype(dtype, tdtype, args):
    check(evaluate(lambda cx: cx.arange(*args, dtype=dtype)), torch.arange(*args, dtype=tdtype), rtol=1e-12)


def test_arange_float64_fractional():
    check(evaluate(lambda cx: cx.arange(0.1, 2.0, 0.3, dtype=lm.float64)),
          torch.arange(0.1, 2.0, 0.3, dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_arange_zero_step_raises():
    with pytest.raises(ValueError):
        lm.Graph().arange(0, 5, 0)


@pytest.mark.parametrize("n", [5, 1, 8])
def test_arange_symbolic(n):
    cx = lm.Graph()
    out = cx.arange("n").retrieve()
    assert str(out.dims[0]) != str(n)  # the length stays symbolic in the graph
    cx.set_dim("n", n)
    cx.execute()
    check(out.data(), torch.arange(n))


def test_arange_symbolic_rebinding_and_use():
    cx = lm.Graph()
    x = cx.tensor(("n",))
    out = (x * cx.arange("n").float()).retrieve()  # arange sized by the same symbol as the input
    for n in (5, 3):
        xv = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        x.set(xv)
        cx.execute()
        check(out.data(), torch.from_numpy(xv) * torch.arange(n).float(), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------- full / zeros / ones
@pytest.mark.parametrize("shape", [(2, 3), (4,), (), (1, 2, 3)], ids=str)
@pytest.mark.parametrize("value", [7, -2.5, True, 0])
def test_full(shape, value):
    check(evaluate(lambda cx: cx.full(shape, value)), torch.full(shape, value))


@pytest.mark.parametrize("dtype,tdtype", [(lm.float64, torch.float64), (lm.int32, torch.int32),
                                          (lm.bool_, torch.bool), (lm.float32, torch.float32)])
def test_full_zeros_ones_with_dtype(dtype, tdtype):
    shape = (3, 2)
    got = evaluate(lambda cx: [cx.full(shape, 3, dtype), cx.zeros(shape, dtype), cx.ones(shape, dtype)])
    check(got[0], torch.full(shape, 3, dtype=tdtype))
    check(got[1], torch.zeros(shape, dtype=tdtype))
    check(got[2], torch.ones(shape, dtype=tdtype))


def test_zeros_ones_default_float32():
    got = evaluate(lambda cx: [cx.zeros((2, 4)), cx.ones(3)])
    check(got[0], torch.zeros(2, 4))
    check(got[1], torch.ones(3))


def test_full_used_in_arithmetic():
    xv = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)

    def build(cx):
        x = cx.tensor((3, 4)).set(xv)
        return x + cx.full((3, 4), 1.5) * cx.ones((4,))

    check(evaluate(build), torch.from_numpy(xv) + torch.full((3, 4), 1.5) * torch.ones(4), rtol=1e-6)


# ---------------------------------------------------------------------------- iota
@pytest.mark.parametrize("expr,shape,fn", [
    ("z*2", (3,), lambda z: z * 2),
    ("z", (2, 3), lambda z: z),
    ("z+5", (4,), lambda z: z + 5),
    ("z*z", (2, 2), lambda z: z * z),
    ("(z + 1) % 3", (7,), lambda z: (z + 1) % 3),
    ("z / 2 - 1", (6,), lambda z: z // 2 - 1),
    ("min(z, 3) * 2", (6,), lambda z: np.minimum(z, 3) * 2),
    ("max(z - 2, 0)", (5,), lambda z: np.maximum(z - 2, 0)),
    ("z < 3", (5,), lambda z: (z < 3).astype(np.int32)),
], ids=lambda v: v if isinstance(v, str) else str(v) if isinstance(v, tuple) else "")
def test_iota(expr, shape, fn):
    exp = torch.from_numpy(fn(np.arange(int(np.prod(shape)), dtype=np.int32)).reshape(shape))
    check(evaluate(lambda cx: cx.iota(expr, shape)), exp)


def test_iota_bad_expression_raises():
    with pytest.raises(ValueError):
        lm.Graph().iota("z ** 2", (3,))


def test_iota_dtype_and_symbol():
    cx = lm.Graph()
    cx.set_dim("k", 3)
    a = cx.iota("z*2", (3,), lm.int64).retrieve()
    b = cx.iota("z+k", (4,), lm.float32).retrieve()
    cx.execute()
    check(a.data(), torch.arange(3) * 2)
    check(b.data(), torch.arange(4).float() + 3)


# ---------------------------------------------------------------------------- rand / randn
@pytest.mark.parametrize("op", ["rand", "randn"])
def test_random_reproducible_across_graphs(op):
    a = evaluate(lambda cx: getattr(cx, op)((20, 30), seed=5))
    b = evaluate(lambda cx: getattr(cx, op)((20, 30), seed=5))
    c = evaluate(lambda cx: getattr(cx, op)((20, 30), seed=6))
    assert a.dtype == np.float32 and a.shape == (20, 30)
    np.testing.assert_array_equal(a, b)
    assert np.mean(a != c) > 0.99  # a different seed gives different values


@pytest.mark.parametrize("op", ["rand", "randn"])
def test_random_stable_across_executions(op):
    cx = lm.Graph()
    r = getattr(cx, op)((8, 8), seed=1).keep()
    y = (r * 2).retrieve()
    cx.execute()
    first = y.data().copy()
    cx.execute()
    np.testing.assert_array_equal(y.data(), first)
    np.testing.assert_allclose(first, r.data() * 2, rtol=1e-7)


def test_rand_range_and_moments():
    x = evaluate(lambda cx: cx.rand((100, 100), seed=3, low=-2.0, high=4.0))
    assert x.min() >= -2.0 and x.max() < 4.0
    # uniform(-2, 4): mean 1, std 6/sqrt(12) ~ 1.732; 10k samples -> tolerance 0.05
    assert abs(x.mean() - 1.0) < 0.05
    assert abs(x.std() - 6 / np.sqrt(12)) < 0.05


@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.5), (-1.0, 2.0)])
def test_randn_moments(mean, std):
    x = evaluate(lambda cx: cx.randn((100, 100), seed=4, mean=mean, std=std))
    # 10k samples: the sample mean is within ~5 standard errors (std/100) and the sample std within 3%
    assert abs(x.mean() - mean) < 5 * std / 100
    assert abs(x.std() / std - 1) < 0.03
    # roughly normal: ~68% within one std
    assert abs(np.mean(np.abs(x - mean) < std) - 0.6827) < 0.02


def test_randn_float64_and_symbolic_shape():
    cx = lm.Graph()
    r = cx.randn(("n", 4), seed=9, dtype=lm.float64).keep()
    s = r.sum(0).retrieve()
    cx.set_dim("n", 50)
    cx.execute()
    assert r.data().dtype == np.float64 and r.data().shape == (50, 4)
    np.testing.assert_allclose(s.data(), r.data().sum(0), rtol=1e-12)
