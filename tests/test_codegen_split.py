"""The C backend splits a vector loop whose index is divided by a small constant (luminal/codegen/c.py,
``_split_divided``): ``x[i / 2]`` (a pooling window's gradient, a nearest upsampling) has no vector form in GCC,
so such a loop ran scalar; split as ``i = 2q + r`` every access is affine. Oracle: numpy."""

import re

import numpy as np
import pytest

import luminal as lm


def _source(cx):
    return cx.runtime.cprogram.source


def _divided_inner_reads(src):
    """Accesses that divide or take the modulo of a loop variable by a constant, inside `omp simd` loops."""
    out = []
    for m in re.finditer(r"#pragma omp simd\n\s*for \(long long (i\d+) = 0;[^\n]*\n(.*?)\n\s*}\n", src, re.S):
        var, body = m.group(1), m.group(2)
        out += re.findall(rf"\b{var}\b\)* [/%] \d+", body)
    return out


@pytest.mark.parametrize("k", [2, 3, 4])
def test_a_pooling_gradient_read_is_split_and_exact(k):
    """MaxPool1d's gradient behind a GELU of a permuted (convolution-like) input: the window's argmax is read at
    ``i / k``, which only the split makes affine. Gradient against torch.autograd."""
    torch = pytest.importorskip("torch")
    import luminal.nn.functional as F
    from luminal.training import grad

    xv = np.random.default_rng(k).standard_normal((8, 4, 96)).astype(np.float32)
    cx = lm.Graph()
    x0 = cx.tensor(xv.shape).set(xv)
    x = (x0 * 1.5).permute((1, 0, 2))
    (g,) = grad((F.max_pool1d(x.gelu(), k) ** 2).sum(), [x0])
    g.retrieve()
    cx.compile(device="cpu")
    cx.execute()
    tx = torch.from_numpy(xv).requires_grad_(True)
    ty = torch.nn.functional.max_pool1d(torch.nn.functional.gelu((tx * 1.5).permute(1, 0, 2)), k)
    (want,) = torch.autograd.grad((ty ** 2).sum(), [tx])
    np.testing.assert_allclose(g.data(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert _divided_inner_reads(_source(cx)) == []


def test_an_extent_the_factor_does_not_divide_is_left_alone():
    rng = np.random.default_rng(7)
    xv = rng.standard_normal((4, 33)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(xv.shape).set(xv)
    up = x.unsqueeze(-1).expand(4, 33, 2).reshape((4, 66))[:, :65]      # 65 columns: not a multiple of 2
    y = up.exp2().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    np.testing.assert_allclose(y.data(), np.exp2(np.repeat(xv, 2, axis=1)[:, :65]), rtol=2e-6)
