"""Matrix products (luminal/hl_ops/matmul.py) against torch.matmul, plus one symbolic-shape graph
(reduction + matmul + softmax) executed under two different bindings."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import luminal as lm
from hl_helpers import check, make, run
make = functools.partial(make, low=-9, high=10)


TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12), np.int32: {},
       np.int64: {}}
T = torch.from_numpy

SHAPES = [
    ((4,), (4,)),                      # 1x1: dot product -> 0-d
    ((4,), (4, 3)),                    # 1x2
    ((3, 4), (4,)),                    # 2x1
    ((3, 4), (4, 5)),                  # 2x2
    ((2, 3, 4), (4, 5)),               # 3x2
    ((3, 4), (2, 4, 5)),               # 2x3
    ((2, 3, 4), (2, 4, 5)),            # 3x3
    ((2, 3, 3, 4), (4, 5)),            # 4x2
    ((2, 3, 3, 4), (2, 3, 4, 2)),      # 4x4
    ((2, 1, 2, 3, 4), (2, 3, 1, 4, 2)),  # 5x5 with broadcasting batch dims
    ((2, 1, 3, 4), (5, 4, 6)),         # broadcast (2,1) with (5,)
    ((1, 3, 4), (2, 4, 5)),            # size-1 batch broadcast
    ((4,), (2, 3, 4, 5)),              # 1 x 4
    ((2, 3, 5, 4), (4,)),              # 4 x 1
    ((1, 4), (4, 1)),                  # 1x1 matrices
    ((3, 1), (1, 5)),                  # outer product via K = 1
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
def test_matmul_rank_combinations(dtype, sa, sb):
    a, b = make(dtype, sa, 1), make(dtype, sb, 2)
    exp = torch.matmul(T(a), T(b))
    check(run(lambda x, y: x.matmul(y), a, b), exp, **TOL[dtype])
    check(run(lambda x, y: x @ y, a, b), exp, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_dot(dtype):
    a, b = make(dtype, (7,), 3), make(dtype, (7,), 4)
    check(run(lambda x, y: x.dot(y), a, b), torch.dot(T(a), T(b)), **TOL[dtype])


def test_dot_errors():
    cx = lm.Graph()
    with pytest.raises(lm.GraphError):
        cx.tensor((3,)).dot(cx.tensor((4,)))
    with pytest.raises(lm.GraphError):
        cx.tensor((3, 3)).dot(cx.tensor((3,)))


def test_matmul_mixed_dtypes_promote():
    a, b = make(np.int32, (3, 4), 5), make(np.float32, (4, 2), 6)
    check(run(lambda x, y: x @ y, a, b), T(a).float() @ T(b), rtol=1e-5, atol=1e-5)
    a64, b32 = make(np.int64, (3, 4), 5), make(np.int32, (4, 2), 6)
    check(run(lambda x, y: x @ y, a64, b32), T(a64) @ T(b32).long())


def test_matmul_int32_stays_int32():
    a, b = make(np.int32, (2, 3), 7), make(np.int32, (3, 2), 8)
    got = run(lambda x, y: x @ y, a, b)
    assert got.dtype == np.int32
    check(got, T(a) @ T(b))


@pytest.mark.parametrize("case", ["aT", "bT", "both", "mT_batch", "sliced", "flipped", "broadcast", "permuted_batch"])
def test_matmul_non_contiguous_operands(case):
    a = make(np.float32, (2, 5, 4), 9)
    b = make(np.float32, (2, 6, 5), 10)
    ta, tb = T(a), T(b)
    cases = {
        "aT": (lambda x, y: x[0].T @ y[1].T, lambda: ta[0].T @ tb[1].T),
        "bT": (lambda x, y: x[1] @ y[0, :, :4].T, lambda: ta[1] @ tb[0, :, :4].T),
        "both": (lambda x, y: x.mT @ y.mT, lambda: ta.mT @ tb.mT),
        "mT_batch": (lambda x, y: y @ x.mT.mT, lambda: tb @ ta),
        "sliced": (lambda x, y: x[:, 1::2, ::2] @ y[:, ::3, 1:3], lambda: ta[:, 1::2, ::2] @ tb[:, ::3, 1:3]),
        "flipped": (lambda x, y: x.flip(1) @ y.flip((1, 2))[:, :, :4].mT,
                    lambda: ta.flip(1) @ tb.flip((1, 2))[:, :, :4].mT),
        "broadcast": (lambda x, y: x[:, :1].expand(2, 3, 4) @ y[:1, :4, :2],
                      lambda: ta[:, :1].expand(2, 3, 4) @ tb[:1, :4, :2]),
        "permuted_batch": (lambda x, y: x.permute(1, 0, 2) @ y[:, :4].permute(2, 1, 0),
                           lambda: ta.permute(1, 0, 2) @ tb[:, :4].permute(2, 1, 0)),
    }
    build, oracle = cases[case]
    check(run(build, a, b), oracle(), rtol=1e-5, atol=1e-5)


def test_rmatmul_with_constant_tensor():
    a = make(np.float32, (4, 3), 11)
    check(run(lambda x: x.T.contiguous().__rmatmul__(x), a), T(a) @ T(a).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sa,sb", [((3, 4), (5, 6)), ((4,), (5,)), ((2, 3, 4), (3, 4)), ((4,), (3, 5)),
                                   ((3, 4), (3,))], ids=str)
def test_inner_dim_mismatch_raises_naming_shapes(sa, sb):
    cx = lm.Graph()
    a, b = cx.tensor(sa), cx.tensor(sb)
    with pytest.raises(lm.GraphError) as err:
        a @ b
    msg = str(err.value)
    for shape in (sa, sb):
        assert str([str(d) for d in shape]) in msg or str(list(shape)) in msg, msg
    with pytest.raises(RuntimeError):
        torch.zeros(sa) @ torch.zeros(sb)  # the oracle rejects it too


def test_batch_dims_not_broadcastable_raises():
    cx = lm.Graph()
    with pytest.raises(lm.GraphError):
        cx.tensor((2, 3, 4)) @ cx.tensor((3, 4, 5))


def test_matmul_bool_and_0d_raise():
    cx = lm.Graph()
    with pytest.raises(TypeError):
        cx.tensor((2, 2), dtype=lm.bool_) @ cx.tensor((2, 2), dtype=lm.bool_)
    with pytest.raises(lm.GraphError):
        cx.tensor(()) @ cx.tensor((3,))


@pytest.mark.parametrize("batch", [1, 3])
def test_matmul_symbolic_batch(batch):
    cx = lm.Graph()
    a = cx.tensor(("b", 3, 4))
    w = cx.tensor((4, 5))
    out = (a @ w).retrieve()
    assert str(out.dims[0]) == "b"
    av, wv = make(np.float32, (batch, 3, 4), 12), make(np.float32, (4, 5), 13)
    a.set(av)
    w.set(wv)
    cx.execute()
    check(out.data(), T(av) @ T(wv), rtol=1e-5, atol=1e-5)


def test_matmul_symbolic_inner_and_outer_dims():
    cx = lm.Graph()
    a = cx.tensor(("m", "k"), dtype=lm.float64)
    b = cx.tensor(("k", "n"), dtype=lm.float64)
    out = (a @ b).retrieve()
    for m, k, n in [(2, 3, 4), (5, 1, 2)]:
        av, bv = make(np.float64, (m, k), m), make(np.float64, (k, n), n)
        a.set(av)
        b.set(bv)
        cx.execute()
        check(out.data(), T(av) @ T(bv), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- symbolic dims end to end
def test_symbolic_graph_two_bindings():
    """One graph over ("b", "s", 8): a reduction + matmul + softmax, executed for two (b, s) bindings."""
    cx = lm.Graph()
    x = cx.tensor(("b", "s", 8))
    w = cx.tensor((8, 6))
    scores = x @ x.mT / 8 ** 0.5                            # (b, s, s)
    attn = scores.softmax(-1)                               # softmax over a symbolic axis
    mixed = (attn @ x).mean(1)                              # (b, 8): reduction over the symbolic axis
    proj = (mixed @ w).log_softmax(-1).retrieve()           # (b, 6)
    pooled = x.max(1).sum(-1).retrieve()                    # (b,)
    attn.retrieve()
    wv = make(np.float32, (8, 6), 20)
    w.set(wv)
    for b, s in [(2, 3), (3, 5)]:
        xv = make(np.float32, (b, s, 8), 21 + b)
        x.set(xv)
        cx.execute()
        tx, tw = T(xv), T(wv)
        t_attn = torch.softmax(tx @ tx.mT / 8 ** 0.5, -1)
        check(attn.data(), t_attn, rtol=1e-5, atol=1e-6)
        check(proj.data(), torch.log_softmax((t_attn @ tx).mean(1) @ tw, -1), rtol=1e-5, atol=1e-5)
        check(pooled.data(), tx.amax(1).sum(-1), rtol=1e-5, atol=1e-5)
        assert cx.dyn_map["b"] == b and cx.dyn_map["s"] == s


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("sa,sb", [((37, 64), (64, 29)), ((2, 5, 96), (96, 7)), ((64,), (64, 3))])
def test_float16_matmul_is_a_float32_gemm_rounded_once(device, sa, sb):
    # torch's CPU half GEMM (and numpy's half dot): exact float32 products, float32 sums, one rounding at the end
    rng = np.random.default_rng(5)
    a = rng.standard_normal(sa).astype(np.float16)
    b = rng.standard_normal(sb).astype(np.float16)
    cx = lm.Graph()
    y = (cx.tensor(sa, dtype="float16").set(a) @ cx.tensor(sb, dtype="float16").set(b)).retrieve()
    cx.compile(None, y, device=device)
    cx.execute()
    want = torch.matmul(T(a), T(b)).numpy()
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    assert y.data().dtype == np.float16
    # within one float16 rounding of the exact product (float32 accumulation differs only in summation order)
    np.testing.assert_allclose(y.data().astype(np.float32), exact.astype(np.float32), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y.data().astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    if device == "cpu":  # a GEMM kernel, not a plain reduction over float16 products
        from luminal.codegen.kernel import GemmKernel

        assert any(isinstance(k, GemmKernel) for k in cx.runtime.program.kernels)
