"""Short reductions on the CPU backend (a pooling window, a softmax over 3 classes): the terms unrolled and the
loop over the outputs vectorized (luminal.codegen.c_reduce.small_extent). Oracles: numpy and torch; sums within
rtol 1e-6 (float32), max/min exact, NaN propagating as numpy's max does.
"""

import re

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.codegen.c_reduce import SMALL_EXTENT


def _compiled(build, *arrays, dtypes=None):
    cx = lm.Graph()
    xs = [cx.tensor(a.shape, dtype=(dtypes[i] if dtypes else lm.DType(a.dtype.name))).set(a)
          for i, a in enumerate(arrays)]
    y = build(*xs).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    return y.data(), cx.runtime.source


def _with_specials(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    flat[3::11] = np.nan
    flat[5::13] = -np.inf
    flat[7::17] = np.inf
    return a


@pytest.mark.parametrize("extent", range(1, SMALL_EXTENT + 1))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_max_sum_over_short_axis(extent, axis):
    shape = [6, 5, 7]
    shape[axis] = extent
    a = _with_specials(tuple(shape), extent + 10 * axis)
    got, _ = _compiled(lambda x: x.max(axis), a)
    np.testing.assert_array_equal(got, a.max(axis))  # NaN positions equal too
    b = np.random.default_rng(axis).standard_normal(tuple(shape)).astype(np.float32)
    got, _ = _compiled(lambda x: (x * 2.0).sum(axis), b)
    np.testing.assert_allclose(got, (b * 2.0).sum(axis), rtol=1e-6, atol=1e-6)


def test_short_sum_is_unrolled_in_the_source():
    a = np.random.default_rng(0).standard_normal((64, 48, 3)).astype(np.float32)
    got, src = _compiled(lambda x: x.sum(2), a)
    np.testing.assert_allclose(got, a.sum(2), rtol=1e-6, atol=1e-6)
    assert "for (long long r" not in src  # no reduction loop: the 3 terms are straight-line code
    got, src = _compiled(lambda x: x.sum(2), np.ones((4, 4, SMALL_EXTENT + 1), np.float32))
    np.testing.assert_array_equal(got, np.full((4, 4), SMALL_EXTENT + 1, np.float32))
    assert "for (long long r" in src


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_short_integer_max_and_sum(dtype):
    info = np.iinfo(dtype)
    a = np.random.default_rng(1).integers(info.min, info.max, (9, 4, 5), dtype=dtype, endpoint=True)
    got, _ = _compiled(lambda x: x.max(1), a)
    np.testing.assert_array_equal(got, a.max(1))
    got, _ = _compiled(lambda x: x.min(2), a)
    np.testing.assert_array_equal(got, a.min(2))
    got, _ = _compiled(lambda x: x.sum(1), a)
    exp = torch.from_numpy(a).sum(1).numpy()  # (torch: integer sums in int64, wrapping)
    assert got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)


def test_short_bfloat16_sum_rounds_once():
    a = np.random.default_rng(2).standard_normal((32, 4)).astype(np.float32)
    got, _ = _compiled(lambda x: x.sum(1), a, dtypes=[lm.bfloat16])
    t = torch.from_numpy(a).to(torch.bfloat16)
    exp = t.float().sum(1).to(torch.bfloat16).float().numpy()  # torch on CPU: f32 accumulation, one rounding
    np.testing.assert_array_equal(np.asarray(got, np.float32), exp)


def _pool_step(arr, w_arr, window, device):
    import luminal.nn as nn
    from luminal.training import grad
    cx = lm.Graph()
    x = cx.tensor(arr.shape).set(arr)
    y = nn.MaxPool2d(window)(x.relu())
    w = cx.tensor(w_arr.shape).set(w_arr)
    (gx,) = grad((y * w).sum(), [x])
    y.retrieve(), gx.retrieve()
    if device == "cpu":
        cx.compile(device="cpu")
        # the window's gradient, upsampled to the input grid, is read without dividing a loop index by the window
        # (the loop space is split to the window grid: luminal.codegen.values.refine_space)
        assert not re.search(rf"i\d+ / {window}\)", cx.runtime.source)
    cx.execute()
    return y.data(), gx.data()


@pytest.mark.parametrize("window", [2, 3])
def test_relu_maxpool_backward_matches_torch_and_the_interpreter(window):
    """The pooling window of W4 (relu fused into the window's reads, strided loads), forward and backward:
    against torch on finite data; with a NaN in a window, exactly as the reference interpreter."""
    rng = np.random.default_rng(window)
    arr = rng.standard_normal((4, 3, 6 * window, 6 * window)).astype(np.float32)
    w_arr = rng.standard_normal((4, 3, 6, 6)).astype(np.float32)
    y, g = _pool_step(arr, w_arr, window, "cpu")
    tx = torch.from_numpy(arr).requires_grad_()
    ty = torch.nn.functional.max_pool2d(tx.relu(), window)
    (ty * torch.from_numpy(w_arr)).sum().backward()
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-6, atol=1e-7)
    arr[0, 0, 0, 1] = np.nan
    arr[1, 2, 3, 3] = -np.inf
    for got, exp in zip(_pool_step(arr, w_arr, window, "cpu"), _pool_step(arr, w_arr, window, "reference")):
        np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_softmax_and_layer_norm_over_a_short_row(n):
    """A row group (max, exp, sum, divide; mean, variance) whose row is short: every member unrolled."""
    a = np.random.default_rng(n).standard_normal((37, 5, n)).astype(np.float32) * 4
    a[0, 0, 0] = -np.inf
    got, _ = _compiled(lambda x: x.softmax(-1), a)
    exp = torch.softmax(torch.from_numpy(a), -1).numpy()
    np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-7)
    got, _ = _compiled(lambda x: x.layer_norm(-1), a[1:])
    exp = torch.nn.functional.layer_norm(torch.from_numpy(a[1:]), (n,)).numpy()
    np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("a,b,expected", [
    ((64, 64, 24, 24, 1), (64, 64, 12, 2, 12, 2), [64, 64, 12, 2, 12, 2]),
    ((2, 12), (24,), [2, 12]),
    ((24,), (2, 3, 4), [2, 3, 4]),
    ((6, 4), (4, 6), None),          # 6 straddles 4 and 6: no common refinement
    ((8, 3), (2, 12), [2, 4, 3]),
])
def test_common_refinement_of_two_row_major_factorizations(a, b, expected):
    from luminal.codegen.values import _common_refinement
    got = _common_refinement(list(a), list(b))
    assert got == expected
    if got is not None:  # both are regroupings of it: every flat index decomposes the same way
        import itertools
        for dims in (a, b):
            groups, k = [], len(got)
            for d in reversed(dims):
                if d == 1:
                    continue
                acc, g = 1, []
                while acc < d:
                    k -= 1
                    g.insert(0, got[k])
                    acc *= got[k]
                assert acc == d
                groups.insert(0, g)
            assert list(itertools.chain(*groups)) == got


def test_column_sum_of_concatenated_heads_splits_its_loops():
    """A bias gradient over a concatenation of attention heads read as (batch * seq, 3 * heads * dh) (W5's qkv
    bias): the loops are split to the heads' axes, so no index is divided; the sum equals numpy's."""
    from luminal.hl_ops.movement import concat as cat
    rng = np.random.default_rng(5)
    arrs = [rng.standard_normal((2, 4, 16, 8)).astype(np.float32) for _ in range(3)]
    cx = lm.Graph()
    q, k, v = [cx.tensor(a.shape).set(a) for a in arrs]
    heads = cat([q * 2.0, (k + 1.0).transpose(2, 3).transpose(2, 3), v.relu()], 1)   # (2, 12, 16, 8)
    rows = heads.permute((0, 2, 1, 3)).reshape((32, 96))
    y = rows.sum(0).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    a, b, c = arrs
    want = np.concatenate([a * 2, b + 1, np.maximum(c, 0)], 1).transpose(0, 2, 1, 3).reshape(32, 96).sum(0)
    np.testing.assert_allclose(y.data(), want, rtol=1e-5, atol=1e-5)
    kernel = [m for m in re.finditer(r"static int kbody_\d+\(.*?\n}\n", cx.runtime.source, re.S) if "row[" in m.group(0)]
    assert kernel and not any(re.search(r"\b[qijr]\d* [/%] \d", m.group(0)) for m in kernel)


@pytest.mark.parametrize("inner", [(2,), (2, 2), (3,), (4,)])  # ((2, 2) merges into one axis of 4)
@pytest.mark.parametrize("power", [False, True])
def test_tiny_inner_axes_unrolled_inside_the_vector_loop(inner, power):
    """An elementwise kernel whose innermost axes are tiny (a pooling gradient's 2 x 2 upsampling) is vectorized
    over the axis around them, with one copy of the body per tiny index (no loop of 2 inside, no strided vector
    loop); a body too long to copy (pow's) keeps the tiny loops outside. Values against numpy; pow in the body
    (a tiny loop inside an `omp simd` once miscompiled it)."""
    rng = np.random.default_rng(len(inner) * 10 + inner[0])
    shape = (3, 5, 12) + inner  # (x broadcast over 5: no axes merge, the loops are 3, 5, 12 and the tiny ones)
    x = rng.standard_normal((3, 12)).astype(np.float32)
    y = rng.uniform(0.5, 2.0, shape).astype(np.float32)
    expand = (slice(None), None, slice(None)) + (None,) * len(inner)

    def build(a, b):
        a = a.unsqueeze(1)
        for _ in inner:
            a = a.unsqueeze(-1)
        return a.expand(shape) * (b ** 1.7 if power else b.sqrt()) + b

    got, src = _compiled(build, x, y)
    y64 = y.astype(np.float64)
    want = x[expand] * (y64 ** 1.7 if power else np.sqrt(y64)) + y
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())  # (x y^1.7 + y cancels)
    kernel = src[src.index("static int kbody_"):]
    simd_loops = re.findall(r"#pragma omp simd\s*\n\s*for \(long long (i\d+) = 0; \1 < (\d+);", kernel)
    assert simd_loops and all(int(n) == 12 for _, n in simd_loops), simd_loops
    if not power:  # one copy of the body (one store) per tiny index
        assert len(re.findall(r"b\d+\[[^]]*\] = ", kernel)) == int(np.prod(inner))
