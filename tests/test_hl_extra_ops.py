"""The PyTorch operators added for issue 17 (``luminal/hl_ops/trig.py``, ``sorting.py``, ``indexing.py``) against
torch CPU, on both devices (the ``backend`` parameter of conftest).

Each test batches several ops into one graph (one C compile per test on the cpu device). Data are seeded.
Tolerances, unless a test states otherwise:

* elementwise transcendental ops in float32: within 2 ulp of torch (the functions are computed in float64 and
  rounded once; torch's own float32 results are within about an ulp of the true value), float64: 4 ulp (``sinh``/
  ``cosh``: relative 1e-13 for |x| <= 700, see trig.py on ``exp``); special values (NaN, +-inf, domain edges)
  exactly; the sign of zero is checked on the reference device only (the cpu compiler's algebraic rewrites do
  not preserve ``-0.0``);
* ``logaddexp``: 1e-6 relative + 1e-7 absolute (torch computes it in float32, luminal in float64);
* gradients (autograd vs torch.autograd): float64, 1e-12 relative;
* sorting, indexing, scatter and creation ops: exact (they only move values), sums 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.training import grad

# ----------------------------------------------------------------------------------------------- helpers


def _build(arrays):
    cx = lm.Graph()
    return cx, [cx.tensor(a.shape, dtype=a.dtype.name).set(a) for a in arrays]


def _execute(cx, outs):
    for o in outs:
        o.retrieve()
    cx.execute()
    return [o.data() for o in outs]


def assert_ulp(got, exp, max_ulp, what, check_zero_sign=True):
    """NaN at the same places, infinities equal, finite values within ``max_ulp`` ulp of torch's."""
    exp = exp.detach().numpy() if isinstance(exp, torch.Tensor) else np.asarray(exp)
    assert got.shape == exp.shape and got.dtype == exp.dtype, (what, got.shape, exp.shape, got.dtype, exp.dtype)
    nan = np.isnan(exp)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=f"{what}: NaN positions")
    inf = np.isinf(exp)
    np.testing.assert_array_equal(got[inf], exp[inf], err_msg=f"{what}: infinities")
    fin = ~nan & ~inf
    spacing = np.spacing(np.abs(exp[fin])).astype(np.float64)
    err = np.abs(got[fin].astype(np.float64) - exp[fin].astype(np.float64)) / spacing
    assert err.size == 0 or err.max() <= max_ulp, (what, float(err.max()), exp[fin][err.argmax()])
    if check_zero_sign:
        z = exp == 0
        np.testing.assert_array_equal(np.signbit(got[z]), np.signbit(exp[z]), err_msg=f"{what}: sign of zero")


SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-30, -1e-30, 1e-8, -1e-8,
           1e-3, 0.9999999, -0.9999999, 1.0000001, 3.0, 20.0, -20.0, 88.0, 89.5, -90.0, 1e30, -1e30, 0.66, 2.4142136]


def elementwise_data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    parts = [np.array(SPECIAL), rng.standard_normal(150) * 3, rng.uniform(-1, 1, 150),
             np.exp(rng.uniform(-25, 25, 150)) * rng.choice([-1, 1], 150)]
    return np.concatenate(parts).astype(dtype)


UNARY = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]
BINARY = ["atan2", "copysign", "logaddexp"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elementwise_values_and_special_values(dtype, _device):
    """The unary inverse-trig/hyperbolic functions and atan2/copysign/logaddexp against torch over NaN, +-inf,
    +-0, domain edges (+-1 for asin/atanh, 1 for acosh), tiny, huge and random values; ``other`` is the data
    rotated by one place so every special value meets others (atan2's signed-zero/infinity table)."""
    x = elementwise_data(dtype)
    if dtype == "float64":  # torch overflows e^|x| first; luminal's e^|x|/2 is finite up to 710.47
        x = x[np.abs(np.nan_to_num(x, posinf=0, neginf=0)) < 700]
        x = np.concatenate([x, [math.inf, -math.inf]]).astype(dtype)
    y = np.roll(x, 1)
    cx, (tx, ty) = _build([x, y])
    outs = [getattr(tx, n)() for n in UNARY] + [getattr(tx, n)(ty) for n in BINARY]
    got = _execute(cx, outs)
    X, Y = torch.from_numpy(x), torch.from_numpy(y)
    zero_sign = _device == "reference"
    for name, g in zip(UNARY + BINARY, got):
        exp = getattr(torch, name)(X) if name in UNARY else getattr(torch, name)(X, Y)
        if name == "logaddexp":
            e = exp.numpy()
            np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7 if dtype == "float32" else 1e-15)
            continue
        if dtype == "float64" and name in ("sinh", "cosh"):
            e = exp.numpy()
            np.testing.assert_array_equal(np.isnan(g), np.isnan(e))
            np.testing.assert_allclose(g, e, rtol=1e-13, atol=0)
            continue
        assert_ulp(g, exp, 2 if dtype == "float32" else 4, name, check_zero_sign=zero_sign)


def test_elementwise_dtypes_and_scalars(_device):
    """Int inputs compute in float32 (as torch); float16 rounds once; a Python scalar operand broadcasts."""
    xi = np.array([-3, -1, 0, 1, 2, 5], np.int64)
    xh = np.array([-0.9, -0.3, 0.0, 0.2, 0.7, 0.99], np.float16)
    cx, (ti, th) = _build([xi, xh])
    outs = [ti.atan(), ti.sinh(), ti.atan2(2), th.asin(), th.atanh(), th.copysign(-1.0), th.logaddexp(0.5),
            ti.copysign(th)]
    got = _execute(cx, outs)
    I, H = torch.from_numpy(xi), torch.from_numpy(xh)
    exps = [torch.atan(I), torch.sinh(I), torch.atan2(I, torch.tensor(2)), torch.asin(H), torch.atanh(H),
            torch.copysign(H, torch.tensor(-1.0)), torch.logaddexp(H, torch.tensor(0.5, dtype=torch.float16)),
            torch.copysign(I, H)]
    for k, (g, e) in enumerate(zip(got, exps)):
        e = e.numpy()
        assert g.dtype == e.dtype, (k, g.dtype, e.dtype)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=2e-3 if g.dtype == np.float16
                                   else 2e-7, err_msg=str(k))


def test_elementwise_gradients(_device):
    """Autograd of every differentiable op here against torch.autograd, float64, interior points."""
    rng = np.random.default_rng(1)
    u = rng.uniform(-0.9, 0.9, 12)          # asin/acos/atanh domain
    v = rng.uniform(1.1, 4.0, 12)           # acosh domain
    w = rng.standard_normal(12) * 2
    z = w[::-1].copy() + 0.1
    r = rng.standard_normal(12)             # projection of the outputs
    cx, (tu, tv, tw, tz) = _build([u, v, w, z])
    loss = (tu.asin() * r[0] + tu.acos() * r[1] + tu.atanh() * r[2] + tv.acosh() * r[3] + tw.atan() * r[4]
            + tw.sinh() * r[5] + tw.cosh() * r[6] + tw.asinh() * r[7] + tw.atan2(tz) * r[8]
            + tw.copysign(tz) * r[9] + tw.logaddexp(tz) * r[10] + tw.lerp(tz, tu) * r[11]).sum()
    gs = grad(loss, [tu, tv, tw, tz])
    got = _execute(cx, gs)
    U, V, W, Z = (torch.tensor(a, requires_grad=True) for a in (u, v, w, z))
    tl = (U.asin() * r[0] + U.acos() * r[1] + U.atanh() * r[2] + V.acosh() * r[3] + W.atan() * r[4]
          + W.sinh() * r[5] + W.cosh() * r[6] + W.asinh() * r[7] + torch.atan2(W, Z) * r[8]
          + torch.copysign(W, Z) * r[9] + torch.logaddexp(W, Z) * r[10] + torch.lerp(W, Z, U) * r[11]).sum()
    exp = torch.autograd.grad(tl, [U, V, W, Z])
    for g, e in zip(got, exp):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-12, atol=1e-14)


def test_gradients_at_domain_edges(_device):
    """At the edges the derivative is PyTorch's formula (inf), not the chain rule through the composition."""
    x = np.array([1.0, -1.0, 0.0])
    cx, (t,) = _build([x])
    gs = [grad(t.asin().sum(), [t])[0], grad(t.atanh().sum(), [t])[0], grad(t.atan().sum(), [t])[0]]
    got = _execute(cx, gs)
    X = torch.tensor(x, requires_grad=True)
    for g, fn in zip(got, [torch.asin, torch.atanh, torch.atan]):
        (e,) = torch.autograd.grad(fn(X).sum(), [X])
        np.testing.assert_array_equal(g, e.numpy())


def test_lerp_isclose_allclose(_device):
    """lerp with scalar and tensor weights (both of torch's formulas: |w| < 0.5 and above); isclose with the
    tolerances, infinities, NaN (equal_nan both ways), ints; allclose as a 0-d bool tensor."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    wt = rng.uniform(-0.5, 1.5, (3, 5)).astype(np.float32)
    p = np.array([1.0, 1.0, np.inf, np.inf, -np.inf, np.nan, np.nan, 1.0, 0.0, 1e-9, 100.0], np.float32)
    q = np.array([1.0 + 1e-6, 1.1, np.inf, -np.inf, 1e30, np.nan, 1.0, np.nan, 1e-9, 0.0, 100.001], np.float32)
    ia, ib = np.array([1, 2, 3, 100], np.int64), np.array([1, 3, 3, 100], np.int64)
    cx, (ta, tb, tw, tp, tq, tia, tib) = _build([a, b, wt, p, q, ia, ib])
    outs = [ta.lerp(tb, 0.25), ta.lerp(tb, 0.75), ta.lerp(tb, tw), tp.isclose(tq), tp.isclose(tq, equal_nan=True),
            tp.isclose(tq, rtol=0.1, atol=0.0), tia.isclose(tib), ta.allclose(ta + 1e-7), ta.allclose(tb),
            tp.allclose(tp, equal_nan=True)]
    got = _execute(cx, outs)
    A, B, W, P, Q, IA, IB = (torch.from_numpy(v) for v in (a, b, wt, p, q, ia, ib))
    exps = [torch.lerp(A, B, 0.25), torch.lerp(A, B, 0.75), torch.lerp(A, B, W), torch.isclose(P, Q),
            torch.isclose(P, Q, equal_nan=True), torch.isclose(P, Q, rtol=0.1, atol=0.0), torch.isclose(IA, IB)]
    for k, (g, e) in enumerate(zip(got, exps)):
        e = e.numpy()
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=2e-7, atol=1e-7, err_msg=str(k))
    assert got[7].shape == () and got[7].dtype == np.bool_
    assert [bool(v) for v in got[7:]] == [torch.allclose(A, A + 1e-7), torch.allclose(A, B),
                                          torch.allclose(P, P, equal_nan=True)]
    with pytest.raises(ValueError, match="rtol"):
        ta.isclose(tb, rtol=-1.0)


# ----------------------------------------------------------------------------------------------- sorting, scans


def _compare_all(got, exps, rtol=0.0, atol=0.0):
    for k, (g, e) in enumerate(zip(got, exps)):
        e = e.detach().numpy() if isinstance(e, torch.Tensor) else np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (k, g.shape, e.shape, g.dtype, e.dtype)
        if rtol or atol:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=str(k))
        else:
            np.testing.assert_array_equal(g, e, err_msg=str(k))


def test_sort_topk_kthvalue_median(_device):
    """sort/argsort (stable, both directions, NaN and +-inf, ties), topk (largest/smallest, both algorithms:
    ranks and, for long rows, k rounds), kthvalue, median (with a NaN row), msort; distinct values where torch
    leaves the index of ties unspecified (topk, kthvalue, median)."""
    import luminal.hl_ops.sorting as sorting
    rng = np.random.default_rng(3)
    ties = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, np.nan, -np.inf, np.inf, 2, 0],
                     [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, -0.0, 1]], np.float32)
    distinct = rng.permutation(np.arange(40, dtype=np.float32) * 0.5 - 7).reshape(2, 4, 5)
    nanrow = np.array([[1.0, np.nan, 3.0, np.nan, 0.5], [4.0, 2.0, 9.0, 1.0, 5.0]], np.float32)
    ints = rng.integers(-5, 5, (3, 7)).astype(np.int64)
    cx, (tt, td, tn, ti) = _build([ties, distinct, nanrow, ints])
    s, sd, si = tt.sort(), tt.sort(descending=True), ti.sort(dim=1, descending=True)
    outs = [s.values, s.indices, sd.values, sd.indices, tt.argsort(dim=0), si.values, si.indices,
            td.topk(3).values, td.topk(3).indices, td.topk(4, dim=1, largest=False).values,
            td.topk(4, dim=1, largest=False).indices, td.kthvalue(2, dim=2).values, td.kthvalue(2, dim=0).indices,
            td.kthvalue(3, dim=1, keepdim=True).values, td.median(dim=2).values, td.median(dim=1).indices,
            td.median(), tn.median(dim=1).values, tn.median(dim=1).indices, td.msort()]
    old = sorting.TOPK_RANK_MAX
    sorting.TOPK_RANK_MAX = 4  # force the k-rounds form on these short rows
    try:
        outs += [td.topk(3, dim=2).values, td.topk(3, dim=2).indices, tt.topk(5, largest=False).values,
                 tt.topk(5).values]
    finally:
        sorting.TOPK_RANK_MAX = old
    got = _execute(cx, outs)
    T, D, N, I = (torch.from_numpy(a) for a in (ties, distinct, nanrow, ints))
    ts, tsd, tsi = torch.sort(T, stable=True), torch.sort(T, descending=True, stable=True), \
        torch.sort(I, dim=1, descending=True, stable=True)
    exps = [ts.values, ts.indices, tsd.values, tsd.indices, torch.argsort(T, dim=0, stable=True), tsi.values,
            tsi.indices, D.topk(3).values, D.topk(3).indices, D.topk(4, dim=1, largest=False).values,
            D.topk(4, dim=1, largest=False).indices, D.kthvalue(2, dim=2).values, D.kthvalue(2, dim=0).indices,
            D.kthvalue(3, dim=1, keepdim=True).values, D.median(dim=2).values, D.median(dim=1).indices,
            D.median(), N.median(dim=1).values, N.median(dim=1).indices, torch.msort(D),
            D.topk(3, dim=2).values, D.topk(3, dim=2).indices, T.topk(5, largest=False).values, T.topk(5).values]
    _compare_all(got, exps)
    assert type(s).__name__ == "sort" and s._fields == ("values", "indices")


def test_sort_errors():
    cx = lm.Graph()
    x = cx.tensor((2, 5))
    with pytest.raises(ValueError, match=r"k = 6 .*size 5"):
        x.topk(6)
    with pytest.raises(ValueError, match=r"k = 0 .*size 5"):
        x.kthvalue(0)
    with pytest.raises(IndexError):
        x.sort(dim=2)
    with pytest.raises(ValueError, match="num_classes"):
        cx.tensor(3, dtype="int64").one_hot(-1)


def test_scans_with_indices_and_reductions(_device):
    """cummax/cummin with indices (ties move the index to the last occurrence, NaN holds), logcumsumexp (short
    and long rows, -inf and large values), softmin, var_mean/std_mean with correction."""
    rng = np.random.default_rng(4)
    x = np.array([[1, 3, 3, 2, 5, 5, np.nan, 7, np.nan, 0],
                  [4, 4, 1, 1, 0, 9, -1, 9, 2, 2]], np.float32)
    ints = rng.integers(-3, 3, (2, 9)).astype(np.int32)
    long = (rng.standard_normal((2, 70)) * 30).astype(np.float32)
    edge = np.array([-np.inf, -1000.0, 0.0, 80.0, 100.0, -np.inf, 1e-3], np.float32)
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    cx, (tx, ti, tl, te, ty) = _build([x, ints, long, edge, y])
    cmx, cmn, cmi = tx.cummax(1, return_indices=True), tx.cummin(1, return_indices=True), \
        ti.cummax(1, return_indices=True)
    outs = [cmx.values, cmx.indices, cmn.values, cmn.indices, cmi.values, cmi.indices,
            ti.cummin(0, return_indices=True).indices, tl.logcumsumexp(1), te.logcumsumexp(0), ty.logcumsumexp(1),
            ty.softmin(1), *ty.var_mean(1, correction=0), *ty.std_mean((0, 2), keepdim=True), *ty.var_mean()]
    got = _execute(cx, outs)
    X, Ii, L, E, Y = (torch.from_numpy(a) for a in (x, ints, long, edge, y))
    tmx, tmn, tmi = torch.cummax(X, 1), torch.cummin(X, 1), torch.cummax(Ii, 1)
    exps = [tmx.values, tmx.indices, tmn.values, tmn.indices, tmi.values, tmi.indices, torch.cummin(Ii, 0).indices]
    _compare_all(got[:7], exps)
    exps = [torch.logcumsumexp(L.double(), 1).float(), torch.logcumsumexp(E.double(), 0).float(),
            torch.logcumsumexp(Y.double(), 1).float(), torch.nn.functional.softmin(Y, 1),
            *torch.var_mean(Y, 1, correction=0), *torch.std_mean(Y, (0, 2), keepdim=True), *torch.var_mean(Y)]
    _compare_all(got[7:], exps, rtol=2e-6, atol=1e-6)


def test_einsum(_device):
    """einsum: matmul (explicit and implicit output), batch matmul, ellipsis (broadcast batch), trace,
    diagonals (ii->i, iii->i, iij->j), outer product, transpose, full sum, a three-operand chain."""
    from luminal.hl_ops import einsum
    rng = np.random.default_rng(5)
    arrs = {k: rng.standard_normal(s).astype(np.float32) for k, s in
            dict(A=(3, 4), B=(4, 5), S=(4, 4), C=(2, 3, 4), D=(2, 4, 5), E=(5, 2), v=(3,), w=(4,), T=(3, 3, 3),
                 F=(1, 4, 5)).items()}
    cases = [("ij,jk->ik", "AB"), ("ij,jk", "AB"), ("ii->i", "S"), ("ii", "S"), ("i,j->ij", "vw"),
             ("bij,bjk->bik", "CD"), ("...ij,...jk->...ik", "CF"), ("ij->ji", "A"), ("ij->", "A"),
             ("iii->i", "T"), ("iij->j", "T"), ("i,i->", "ww"), ("bij,bjk,kl->bil", "CDE"), ("...j,jk", "CB"),
             ("ij,ij->ij", "AA"), ("ji", "S"), ("bij->j", "C"), ("...ij->ij", "C")]
    cx = lm.Graph()
    ins = {k: cx.tensor(a.shape).set(a) for k, a in arrs.items()}
    outs = [einsum(eq, *[ins[n] for n in names]) for eq, names in cases]
    got = _execute(cx, outs)
    exps = [torch.einsum(eq, *[torch.from_numpy(arrs[n]) for n in names]) for eq, names in cases]
    _compare_all(got, exps, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="operands"):
        einsum("ij,jk->ik", ins["A"])
    with pytest.raises(ValueError, match="output letter"):
        einsum("ij->k", ins["A"])


# ----------------------------------------------------------------------------------------------- indexing, creation


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_family(_device):
    """scatter (tensor src, scalar value, repeated index: last wins), scatter_add, scatter_reduce with every
    reduction and include_self both ways, an index smaller than src/self in the other dim, and gradients of
    scatter_add/scatter through autograd vs torch."""
    rng = np.random.default_rng(6)
    base = rng.standard_normal((4, 3))
    idx = np.array([[0, 1, 3], [0, 0, 3]], np.int64)       # repeated targets in columns 0 and 2
    src = rng.standard_normal((2, 3))
    idx1 = np.array([[2, 0], [1, 0], [0, 2]], np.int64)     # dim 1, index narrower than base in dim 1
    src1 = rng.standard_normal((3, 4))
    cx, (tb, ti, ts, ti1, ts1) = _build([base, idx, src, idx1, src1])
    outs = [tb.scatter(0, ti, ts), tb.scatter(1, ti1, value=7.5), tb.scatter(1, ti1, ts1), tb.scatter_add(0, ti, ts),
            tb.scatter(0, ti, ts, reduce="add"), tb.scatter(0, ti, ts, reduce="multiply")]
    for r in ["sum", "prod", "mean", "amax", "amin"]:
        for inc in (True, False):
            outs.append(tb.scatter_reduce(0, ti, ts, r, include_self=inc))
    loss = (tb.scatter_add(0, ti, ts) * tb.scatter(1, ti1, ts1[:, :2])).sum()  # (torch's backward needs
    # src of the index's shape)
    outs += grad(loss, [tb, ts, ts1])
    got = _execute(cx, outs)
    B, Ix, S, I1, S1 = (torch.tensor(a, requires_grad=a.dtype == np.float64) for a in (base, idx, src, idx1, src1))
    exps = [B.scatter(0, Ix, S), B.scatter(1, I1, 7.5), B.scatter(1, I1, S1), B.scatter_add(0, Ix, S),
            B.scatter(0, Ix, S, reduce="add"), B.scatter(0, Ix, S, reduce="multiply")]
    for r in ["sum", "prod", "mean", "amax", "amin"]:
        for inc in (True, False):
            exps.append(B.scatter_reduce(0, Ix, S, r, include_self=inc))
    tl = (B.scatter_add(0, Ix, S) * B.scatter(1, I1, S1[:, :2])).sum()
    exps += list(torch.autograd.grad(tl, [B, S, S1]))
    _compare_all(got, exps, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="reduce"):
        tb.scatter_reduce(0, ti, ts, "median")


def test_masks_diagonals_repeats_onehot(_device):
    """masked_fill (broadcast mask, scalar and 0-d tensor value, int tensor), diagonal (offsets, dims, 3-D),
    diag both ways, repeat_interleave (dim and flattened), one_hot."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    m = rng.random((1, 4)) < 0.5
    v = np.array(2.5, np.float32)
    c = rng.standard_normal((2, 3, 4)).astype(np.float32)
    k = rng.integers(-4, 4, (3, 4)).astype(np.int64)
    lab = np.array([[0, 2], [4, 1]], np.int64)
    cx, (tx, tm, tv, tc, tk, tl) = _build([x, m, v, c, k, lab])
    outs = [tx.masked_fill(tm, -1.0), tx.masked_fill(tm, tv), tk.masked_fill(tm, 9), tx.diagonal(), tx.diagonal(2),
            tx.diagonal(-1), tx.diagonal(5), tc.diagonal(0, 2, 0), tc.diagonal(1, -1, -2), tx.diag(1),
            tx[0].diag(), tx[1].diag(-2), tx.repeat_interleave(2, dim=1), tc.repeat_interleave(3),
            tk.repeat_interleave(1, 0), tl.one_hot(5)]
    got = _execute(cx, outs)
    X, M, V, C, K, L = (torch.from_numpy(a) for a in (x, m, v, c, k, lab))
    exps = [X.masked_fill(M, -1.0), X.masked_fill(M, V), K.masked_fill(M, 9), X.diagonal(), X.diagonal(2),
            X.diagonal(-1), X.diagonal(5), C.diagonal(0, 2, 0), C.diagonal(1, -1, -2), X.diag(1), X[0].diag(),
            X[1].diag(-2), X.repeat_interleave(2, dim=1), C.repeat_interleave(3), K.repeat_interleave(1, 0),
            torch.nn.functional.one_hot(L, 5)]
    _compare_all(got, exps)


def test_creation(_device):
    """eye, linspace, logspace, meshgrid ("ij" and "xy", three tensors) as graph tensors."""
    from luminal.hl_ops import eye, linspace, logspace, meshgrid
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([4.0, 5.0], np.float32)
    c = np.array([6.0, 7.0, 8.0, 9.0], np.float32)
    cx, (ta, tb, tc) = _build([a, b, c])
    outs = [eye(cx, 3), eye(cx, 2, 4, dtype=lm.int64), linspace(cx, -1.0, 2.0, 7), linspace(cx, 0, 1, 1),
            linspace(cx, 3.0, -2.5, 12, dtype=lm.float64), logspace(cx, -2, 3, 6), logspace(cx, 0, 3, 4, base=2.0),
            *meshgrid(ta, tb, tc, indexing="ij"), *meshgrid(ta, tb, tc, indexing="xy")]
    got = _execute(cx, outs)
    A, B, C = (torch.from_numpy(v) for v in (a, b, c))
    exps = [torch.eye(3), torch.eye(2, 4, dtype=torch.int64), torch.linspace(-1.0, 2.0, 7), torch.linspace(0, 1, 1),
            torch.linspace(3.0, -2.5, 12, dtype=torch.float64), torch.logspace(-2, 3, 6),
            torch.logspace(0, 3, 4, base=2.0), *torch.meshgrid(A, B, C, indexing="ij"),
            *torch.meshgrid(A, B, C, indexing="xy")]
    _compare_all(got, exps, rtol=3e-7, atol=1e-12)


def test_gradients_of_selection_and_resampling(_device):
    """Autograd through sort/topk/kthvalue values, cummax values, logcumsumexp, einsum, masked_fill, diagonal,
    repeat_interleave, softmin, var_mean, bilinear/bicubic interpolate and reflect/circular pad, against
    torch.autograd (float64, distinct values so the selections have no ties)."""
    import luminal.nn.functional as F
    from luminal.hl_ops import einsum
    rng = np.random.default_rng(8)
    x = rng.permutation(np.arange(24.0)).reshape(4, 6) * 0.37 - 4.0
    y = rng.standard_normal((6, 3))
    img = rng.standard_normal((1, 2, 4, 5))
    m = rng.random((4, 6)) < 0.3
    r = rng.standard_normal(16)
    cx, (tx, ty, ti, tm) = _build([x, y, img, m])

    def loss_of(ops, X, Y, I, M):
        parts = ops(X, Y, I, M)
        return sum((p * float(w)).sum() for p, w in zip(parts, r))

    def lm_ops(X, Y, I, M):
        return [X.sort(dim=1, descending=True).values[:, :3], X.topk(2, dim=0).values, X.kthvalue(3, dim=1).values,
                X.cummax(1, return_indices=True).values, X.logcumsumexp(dim=0), einsum("ij,jk->ik", X, Y),
                einsum("ii->i", X[:, :4]), X.masked_fill(M, 0.5), X.diagonal(1), X.repeat_interleave(2, dim=1),
                X.softmin(dim=1), X.var_mean(dim=0)[0], F.interpolate(I, size=(7, 3), mode="bilinear"),
                F.interpolate(I, scale_factor=1.5, mode="bicubic", align_corners=True),
                F.pad(I, (2, 1, 1, 2), mode="reflect"), F.pad(I, (1, 2, 0, 1), mode="circular")]

    def torch_ops(X, Y, I, M):
        TF = torch.nn.functional
        return [X.sort(dim=1, descending=True).values[:, :3], X.topk(2, dim=0).values, X.kthvalue(3, dim=1).values,
                X.cummax(1).values, X.logcumsumexp(dim=0), torch.einsum("ij,jk->ik", X, Y),
                torch.einsum("ii->i", X[:, :4]), X.masked_fill(M, 0.5), X.diagonal(1), X.repeat_interleave(2, dim=1),
                TF.softmin(X, dim=1), torch.var_mean(X, dim=0)[0], TF.interpolate(I, size=(7, 3), mode="bilinear"),
                TF.interpolate(I, scale_factor=1.5, mode="bicubic", align_corners=True),
                TF.pad(I, (2, 1, 1, 2), mode="reflect"), TF.pad(I, (1, 2, 0, 1), mode="circular")]

    got = _execute(cx, grad(loss_of(lm_ops, tx, ty, ti, tm), [tx, ty, ti]))
    X, Y, I = (torch.tensor(a, requires_grad=True) for a in (x, y, img))
    exp = torch.autograd.grad(loss_of(torch_ops, X, Y, I, torch.from_numpy(m)), [X, Y, I])
    for g, e in zip(got, exp):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-10, atol=1e-12)
