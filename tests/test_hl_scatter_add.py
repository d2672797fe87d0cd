"""``scatter_add`` and the ``ScatterAdd`` primitive (the adjoint of ``Gather``): against ``torch.scatter_add`` and
numpy's ``np.add.at``, on every backend of the suite (``reference``, ``cpu``; ``LUMINAL_TEST_BACKENDS=gpu-interpret``
runs them on Triton's interpreter).

Float sums are compared exactly where the oracle adds in the same order (``np.add.at`` adds position by position
in C order, which is the order ScatterAdd promises for each output element), and against torch within
``rtol=1e-6`` otherwise. The embedding-gradient tests check that a gather over a long axis is differentiated
by a ScatterAdd (work proportional to the index), not by a tokens x vocabulary one-hot.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
from luminal import ops
from luminal.training import grad

from hl_helpers import run


def _case(shape, axis, index_shape, size, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    base = (rng.standard_normal(shape) if np.dtype(dtype).kind == "f" else rng.integers(-9, 9, shape)).astype(dtype)
    index = rng.integers(0, size, index_shape).astype(np.int64)
    src_shape = tuple(max(a, b) for a, b in zip(index_shape, shape))
    src = (rng.standard_normal(src_shape) if np.dtype(dtype).kind == "f" else rng.integers(-9, 9, src_shape))
    return base, index, src.astype(dtype)


@pytest.mark.parametrize("shape,axis,index_shape", [
    ((6, 4), 0, (9, 4)),          # more positions than rows: duplicates
    ((3, 7), 1, (3, 20)),         # along the last axis
    ((2, 5, 3), 1, (2, 11, 3)),   # an axis before and after
    ((4, 6, 5), 0, (3, 2, 5)),    # the index covers a leading block of the other axes (torch's rule)
    ((5, 3), 0, (7, 2)),          # src larger than the index: only the index's block of src is used
])
def test_scatter_add_matches_torch(shape, axis, index_shape):
    base, index, src = _case(shape, axis, index_shape, shape[axis], 1)
    if index_shape == (7, 2):
        src = np.random.default_rng(2).standard_normal((8, 3)).astype(np.float32)
    got = run(lambda b, i, s: b.scatter_add(axis, i, s), base, index, src)
    exp = torch.from_numpy(base).scatter_add(axis, torch.from_numpy(index), torch.from_numpy(src)).numpy()
    np.testing.assert_allclose(got, exp, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_scatter_add_dtypes_exact(dtype):
    """Integers (wrapping like torch) and float64; exact against np.add.at's sequential sums."""
    base, index, src = _case((7, 3), 0, (40, 3), 7, 3, dtype)
    if dtype == np.int32:
        src = src * np.int32(2**27)  # sums that wrap around
    got = run(lambda b, i, s: b.scatter_add(0, i, s), base, index, src)
    exp = base.copy()
    part = np.zeros_like(base)
    np.add.at(part, (index, np.arange(3)[None, :]), src)
    with np.errstate(over="ignore"):
        exp = exp + part
    np.testing.assert_array_equal(got, exp)


def test_scatter_sums_in_position_order_exactly():
    """Many float32 contributions per row with cancellation: bit for bit np.add.at (the same order), so the result
    does not depend on how the work is split over threads."""
    rng = np.random.default_rng(4)
    n, rows, width = 3000, 5, 700
    index = rng.integers(0, rows, (n, 1)).astype(np.int32).repeat(width, 1)
    src = (rng.standard_normal((n, width)) * 10.0 ** rng.integers(-3, 4, (n, width))).astype(np.float32)
    got = run(lambda z, i, s: z.scatter_add(0, i, s), np.zeros((rows, width), np.float32), index, src)
    exp = np.zeros((rows, width), np.float32)
    np.add.at(exp, (index, np.arange(width)[None, :]), src)
    np.testing.assert_array_equal(got, exp)


def test_half_types_accumulate_in_float32():
    base, index, src = _case((4, 3), 0, (12, 3), 4, 5)
    bf = lm.bfloat16.numpy
    got = run(lambda b, i, s: b.scatter_add(0, i, s), base.astype(bf), index, src.astype(bf))
    part = np.zeros((4, 3), np.float32)
    np.add.at(part, (index, np.arange(3)[None, :]), src.astype(bf).astype(np.float32))
    exp = (base.astype(bf).astype(np.float32) + part.astype(bf).astype(np.float32)).astype(bf)
    np.testing.assert_array_equal(got.astype(np.float32), exp.astype(np.float32))


def test_out_of_range_index_raises():
    base, index, src = _case((4, 3), 0, (5, 3), 4, 6)
    index[2, 1] = 4
    with pytest.raises(IndexError, match="out of range"):
        run(lambda b, i, s: b.scatter_add(0, i, s), base, index, src)


def test_bad_arguments_are_named():
    cx = lm.Graph()
    x = cx.tensor((4, 3))
    idx = cx.tensor((5, 3), dtype="int64")
    with pytest.raises(TypeError, match="int32/int64"):
        x.scatter_add(0, cx.tensor((5, 3)), cx.tensor((5, 3)))
    with pytest.raises(ValueError, match="exceeds the tensor's size 3 in dim 1"):
        x.scatter_add(0, cx.tensor((5, 4), dtype="int64"), cx.tensor((5, 4)))
    with pytest.raises(ValueError, match="exceeds src size 2 in dim 0"):
        x.scatter_add(0, idx, cx.tensor((2, 3)))
    with pytest.raises(TypeError, match="cast first"):
        cx.tensor((5, 3), dtype="int64")._apply(ops.ScatterAdd(0, lm.shape.to_expr(4)),
                                                 cx.tensor((5, 3), dtype="bfloat16"), dims=(4, 3))


def test_gradients_through_scatter_add_match_torch():
    base, index, src = _case((6, 4), 0, (9, 4), 6, 7)
    w_np = np.random.default_rng(8).standard_normal((6, 4)).astype(np.float32)
    cx = lm.Graph()
    b, s = cx.tensor(base.shape).set(base), cx.tensor(src.shape).set(src)
    i = cx.tensor(index.shape, dtype="int64").set(index)
    w = cx.tensor(w_np.shape).set(w_np)
    gb, gs = grad((b.scatter_add(0, i, s) * w).sum(), [b, s])
    gb.retrieve(), gs.retrieve()
    cx.execute()
    tb, ts = torch.tensor(base, requires_grad=True), torch.tensor(src, requires_grad=True)
    (tb.scatter_add(0, torch.from_numpy(index), ts) * torch.from_numpy(w_np)).sum().backward()
    np.testing.assert_array_equal(gb.data(), tb.grad.numpy())
    np.testing.assert_array_equal(gs.data(), ts.grad.numpy())


@pytest.mark.parametrize("symbolic", [False, True])
def test_embedding_gradient_is_a_scatter_not_a_one_hot(symbolic):
    """A 5000-row table read by 2 x 7 ids (one repeated): its gradient equals np.add.at's, and the compiled
    program scatters (a one-hot of 14 x 5000 x 16 would be 1.1 M multiply-adds per step; BERT's vocabulary at
    32 x 128 tokens: 96 G)."""
    V, D = 5000, 16
    rng = np.random.default_rng(9)
    ids_np = rng.integers(0, V, (2, 7)).astype(np.int64)
    ids_np[1, 3] = ids_np[0, 0]
    r_np = rng.standard_normal((2, 7, D)).astype(np.float32)
    cx = lm.Graph()
    emb = nn.Embedding(V, D)
    ids = cx.tensor(("b", "s") if symbolic else (2, 7), dtype="int64").set(ids_np)
    r = cx.tensor(("b", "s", D) if symbolic else (2, 7, D)).set(r_np)
    (gw,) = grad((emb(ids) * r).sum(), [emb.weight])
    gw.retrieve()
    cx.execute()
    exp = np.zeros((V, D), np.float32)
    np.add.at(exp, ids_np.reshape(-1), r_np.reshape(-1, D))
    np.testing.assert_array_equal(gw.data(), exp)
    scatters = [n for n in cx.nodes.values() if isinstance(n.op, ops.ScatterAdd)]
    assert len(scatters) == 1


def test_short_gathered_axes_keep_the_fused_one_hot():
    """A cross-entropy's class axis (10) is differentiated by the one-hot sum, fused around it: no ScatterAdd."""
    x_np = np.random.default_rng(10).standard_normal((8, 10)).astype(np.float32)
    t_np = (np.arange(8) * 3 % 10).astype(np.int64)
    cx = lm.Graph()
    logits = cx.tensor((8, 10)).set(x_np)
    target = cx.tensor((8,), dtype="int64").set(t_np)
    (g,) = grad(nn.functional.cross_entropy(logits, target), [logits])
    g.retrieve()
    cx.execute()
    assert not any(isinstance(n.op, ops.ScatterAdd) for n in cx.nodes.values())
    xt = torch.tensor(x_np, requires_grad=True)
    torch.nn.functional.cross_entropy(xt, torch.from_numpy(t_np)).backward()
    np.testing.assert_allclose(g.data(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_single_pick_per_row_keeps_the_fused_one_hot():
    """``gather`` of one entry per row along a long axis (a target logit out of a vocabulary): its gradient stays
    the elementwise one-hot (fused into its consumer), not a ScatterAdd with a (rows, vocabulary) buffer."""
    x_np = np.random.default_rng(11).standard_normal((6, 300)).astype(np.float32)
    t_np = (np.arange(6) * 47 % 300).astype(np.int64).reshape(6, 1)
    w_np = np.random.default_rng(12).standard_normal((6, 1)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor((6, 300)).set(x_np)
    t = cx.tensor((6, 1), dtype="int64").set(t_np)
    w = cx.tensor((6, 1)).set(w_np)
    (g,) = grad((x.gather(1, t) * w).sum(), [x])
    g.retrieve()
    cx.execute()
    assert not any(isinstance(n.op, ops.ScatterAdd) for n in cx.nodes.values())
    xt = torch.tensor(x_np, requires_grad=True)
    (xt.gather(1, torch.from_numpy(t_np)) * torch.from_numpy(w_np)).sum().backward()
    np.testing.assert_array_equal(g.data(), xt.grad.numpy())


@pytest.mark.parametrize("dim,shape,n", [(0, (6, 5), 9), (1, (3, 7, 2), 4), (2, (2, 3, 4), 10)])
@pytest.mark.parametrize("alpha", [1, -0.5])
def test_index_add_matches_torch(dim, shape, n, alpha):
    rng = np.random.default_rng(13)
    base = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(0, shape[dim], (n,)).astype(np.int64)
    src_shape = tuple(n if j == dim else d for j, d in enumerate(shape))
    src = rng.standard_normal(src_shape).astype(np.float32)
    got = run(lambda b, i, s: b.index_add(dim, i, s, alpha=alpha), base, index, src)
    exp = torch.from_numpy(base).index_add(dim, torch.from_numpy(index), torch.from_numpy(src), alpha=alpha)
    np.testing.assert_allclose(got, exp.numpy(), rtol=1e-6, atol=1e-6)


def test_index_add_errors():
    cx = lm.Graph()
    x = cx.tensor((4, 3))
    with pytest.raises(ValueError, match="must have shape"):
        x.index_add(0, cx.tensor((5,), dtype="int64"), cx.tensor((4, 3)))
    with pytest.raises(ValueError, match="1-D"):
        x.index_add(0, cx.tensor((5, 1), dtype="int64"), cx.tensor((5, 3)))
    with pytest.raises(TypeError, match="dtype"):
        x.index_add(0, cx.tensor((5,), dtype="int64"), cx.tensor((5, 3), dtype="float64"))
    index = np.array([0, 4], np.int64)
    with pytest.raises(IndexError, match="out of range"):
        run(lambda b, i, s: b.index_add(0, i, s), np.zeros((4, 3), np.float32), index, np.ones((2, 3), np.float32))


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_upsampling_gradient_is_a_scatter(mode):
    """Upsampling 32 -> 64 reads each column 2-4 times: the one-hot gradient would compare 32 columns with 64-128
    reads per row (32x the work of the reads); it is a ScatterAdd, and equals torch's gradient."""
    x_np = np.random.default_rng(14).standard_normal((2, 3, 32, 32)).astype(np.float32)
    w_np = np.random.default_rng(15).standard_normal((2, 3, 64, 64)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(x_np.shape).set(x_np)
    w = cx.tensor(w_np.shape).set(w_np)
    kw = {} if mode == "nearest" else {"align_corners": False}
    (g,) = grad((nn.functional.interpolate(x, scale_factor=2, mode=mode, **kw) * w).sum(), [x])
    g.retrieve()
    cx.execute()
    assert any(isinstance(n.op, ops.ScatterAdd) for n in cx.nodes.values())
    xt = torch.tensor(x_np, requires_grad=True)
    (torch.nn.functional.interpolate(xt, scale_factor=2, mode=mode, **kw) * torch.from_numpy(w_np)).sum().backward()
    np.testing.assert_allclose(g.data(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
