"""Advanced indexing on GraphTensor (luminal/hl_ops/indexing.py: ``getitem``/``setitem``) against PyTorch CPU
(values and autograd) and numpy: several integer index tensors / numpy arrays / lists broadcast together, their
placement among slices, ints, None and ``...``, negative and out-of-range indices, boolean masks known at build
time (and the clear error for a mask computed in the graph), and item assignment ``x[key] = v``.

Values are compared exactly (gathers and wheres move values without arithmetic); gradients within 1e-6 (float32
sums of at most a few terms). Every test runs on both backends (tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.hl_ops.subscript import DataDependentShapeError
from luminal.training.autograd import grad
from hl_helpers import check

T = torch.from_numpy
SHAPE = (4, 5, 6)


def data(shape=SHAPE, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def ints(high, shape, seed, low=None):
    return np.random.default_rng(seed).integers(-high if low is None else low, high, size=shape).astype(np.int64)


# index arrays on a (4, 5, 6) tensor: i for dim 0, j for dim 1, k for dim 2 (negatives included); j2 broadcasts
I, J, K = ints(4, (3,), 1), ints(5, (3,), 2), ints(6, (3,), 3)
J2 = ints(5, (2, 1), 4)

# name -> key builder over (i, j, k, j2); ints are selections applied first and None separates, as in torch
KEYS = {
    "i,j": lambda i, j, k, j2: (i, j),
    "i,j,k": lambda i, j, k, j2: (i, j, k),
    ":,j,k": lambda i, j, k, j2: (slice(None), j, k),
    "i,:,k (separated: index dims first)": lambda i, j, k, j2: (i, slice(None), k),
    "...,j,k": lambda i, j, k, j2: (Ellipsis, j, k),
    "i,j2 (broadcast)": lambda i, j, k, j2: (i, j2),
    "j2 on dim 1,k": lambda i, j, k, j2: (slice(None), j2, k),
    "1:3,j,::-2 flipped": lambda i, j, k, j2: (slice(1, 3), j, slice(None, None, 2)),
    "0,:,k (int is a select)": lambda i, j, k, j2: (0, slice(None), k),
    "i,2,k": lambda i, j, k, j2: (i, 2, k),
    "i,None,k": lambda i, j, k, j2: (i, None, k),
    "None,i,j,None": lambda i, j, k, j2: (None, i, j, None),
    ":,j only": lambda i, j, k, j2: (slice(None), j),
    "..., k only": lambda i, j, k, j2: (Ellipsis, k),
}


def _graph_index(cx, a, how):
    if how == "tensor":
        return cx.tensor(a.shape, dtype=lm.int64).set(a)
    if how == "int32 tensor":
        return cx.tensor(a.shape, dtype=lm.int32).set(a.astype(np.int32))
    return a if how == "numpy" else a.tolist()


def run_key(x, key_fn, how, arrays=(I, J, K, J2)):
    cx = lm.Graph()
    xt = cx.tensor(x.shape, dtype=lm.DType(x.dtype.name)).set(x)
    out = xt[key_fn(*[_graph_index(cx, a, how) for a in arrays])].retrieve()
    cx.execute()
    return out.data()


@pytest.mark.parametrize("how", ["tensor", "numpy"])
@pytest.mark.parametrize("name", list(KEYS))
def test_getitem_matches_torch(name, how):
    x = data()
    got = run_key(x, KEYS[name], how)
    check(got, T(x)[KEYS[name](*[T(a) for a in (I, J, K, J2)])])


@pytest.mark.parametrize("how", ["list", "int32 tensor"])
def test_getitem_lists_and_int32(how):
    x = np.arange(120).reshape(SHAPE) - 60
    key = KEYS["i,:,k (separated: index dims first)"]
    check(run_key(x, key, how), T(x)[key(*[T(a) for a in (I, J, K, J2)])])


def test_getitem_numpy_placement_where_torch_agrees():
    x = data(seed=5)
    for key in [(I, J), (slice(None), J, K), (I, slice(None), K), (Ellipsis, J2, K)]:
        cx = lm.Graph()
        out = cx.tensor(x.shape).set(x)[key].retrieve()
        cx.execute()
        check(out.data(), x[key])


def test_getitem_symbolic_leading_dim():
    x = data((7, 5))
    cx = lm.Graph()
    xt = cx.tensor(("n", 5)).set(x)
    i, j = np.array([6, -7, 3]), np.array([[0], [4]])
    a = xt[cx.tensor((3,), dtype=lm.int64).set(i), cx.tensor((2, 1), dtype=lm.int64).set(j)].retrieve()
    b = xt[i, ::2].retrieve()
    cx.execute()
    check(a.data(), x[i, j])
    check(b.data(), x[i, ::2])


@pytest.mark.parametrize("bad", [(0, 5), (-5, 0), (4, 0)])
def test_getitem_out_of_range_tensor_indices_raise_at_execute(bad):
    cx = lm.Graph()
    xt = cx.tensor((4, 5)).set(data((4, 5)))
    i = cx.tensor((2,), dtype=lm.int64).set(np.array([1, bad[0]]))
    j = cx.tensor((2,), dtype=lm.int64).set(np.array([2, bad[1]]))
    xt[i, j].retrieve()
    with pytest.raises(IndexError, match="out of range"):
        cx.execute()
    with pytest.raises(IndexError):
        torch.zeros(4, 5)[torch.tensor([1, bad[0]]), torch.tensor([2, bad[1]])]


def test_getitem_out_of_range_known_indices_raise_when_built():
    xt = lm.Graph().tensor((4, 5))
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 1 with size 5"):
        xt[[0, 1], [2, 5]]
    with pytest.raises(IndexError, match="index -5 is out of bounds"):
        xt[np.array([-5]), 0]
    with pytest.raises(IndexError, match="shape mismatch"):
        xt[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="integer or bool"):
        xt[np.array([0.5])]
    with pytest.raises(IndexError, match="integer or bool"):
        xt[xt.graph.tensor((2,))]  # a float tensor


def test_getitem_gradient_scatter_adds_repeated_indices():
    x = data(seed=6)
    i, k = np.array([1, 3, 1, 1]), np.array([[0, 5, 0, 0]])  # (1, 4): broadcast; (1, 0) is read three times
    w = data((1, 4, 5), seed=7)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    it = cx.tensor(i.shape, dtype=lm.int64).set(i)
    loss = (xt[it, :, k] * cx.tensor(w.shape).set(w)).sum()
    (g,) = grad(loss, [xt])
    g.retrieve()
    cx.execute()
    xt_ = T(x).requires_grad_()
    (xt_[T(i), :, T(k)] * T(w)).sum().backward()
    check(g.data(), xt_.grad, atol=1e-6)


# ---------------------------------------------------------------------------------------------- boolean masks
MASK = data((4, 5), seed=8) > 0


@pytest.mark.parametrize("name", ["mask", "mask on dims 1-2", ":,row mask", "mask,k", "list mask", "True", "False"])
def test_getitem_known_boolean_mask(name):
    x = data(seed=9)
    m2, row = data((5, 6), seed=10) > 0.3, np.array([True, False, True, True, False])
    keys = {"mask": (MASK,), "mask on dims 1-2": (slice(None), m2), ":,row mask": (slice(None), row),
            "mask,k": (MASK, K[:1]), "list mask": ([True, False, False, True],), "True": (1, True),
            "False": (False, 1)}
    key = keys[name]
    cx = lm.Graph()
    out = cx.tensor(x.shape).set(x)[key].retrieve()
    cx.execute()
    tkey = tuple(T(np.asarray(k)) if isinstance(k, (np.ndarray, list)) else k for k in key)
    check(out.data(), T(x)[tkey])


def test_getitem_constant_mask_tensor_is_lowered():
    x = data((6, 3), seed=11)
    cx = lm.Graph()
    mask = (cx.arange(6) % 3).eq(1)  # computed from constants only: known when the graph is built
    out = cx.tensor(x.shape).set(x)[mask].retrieve()
    cx.execute()
    check(out.data(), x[np.arange(6) % 3 == 1])


def test_getitem_data_dependent_mask_raises_clearly():
    cx = lm.Graph()
    xt = cx.tensor((4, 5))
    with pytest.raises(DataDependentShapeError, match="data-dependent") as err:
        xt[xt > 0]
    assert isinstance(err.value, IndexError)
    for alternative in ("where", "masked_fill", "mask.sum()", "numpy bool array"):
        assert alternative in str(err.value)
    with pytest.raises(IndexError, match="shape of the mask"):
        xt[np.ones(4, bool), np.ones(4, bool)]


# ---------------------------------------------------------------------------------------------- item assignment
BASIC_SET_KEYS = [0, -1, (slice(None), 2), (slice(1, None, 2), Ellipsis, slice(None, None, -2)), (Ellipsis, 3),
                  (None, 1, slice(0, 5, 3), slice(-2, None)), (slice(3, 0, -1), 1), (slice(2, 2),)]


@pytest.mark.parametrize("key", BASIC_SET_KEYS, ids=repr)
def test_setitem_basic_keys(key):
    x = data(seed=12)
    v = data(x[key].shape[-1:], seed=13)  # one value per trailing element, broadcast over the rest
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    handle = xt
    xt[key] = v
    xt[key] = xt[key] * 2.0  # the handle reads the updated tensor
    assert handle is xt
    xt.retrieve()
    cx.execute()
    want = x.copy()
    want[key] = v
    want[key] = want[key] * 2
    check(xt.data(), want)


@pytest.mark.parametrize("how", ["tensor", "numpy"])
@pytest.mark.parametrize("name", ["i,j", ":,j,k", "i,:,k (separated: index dims first)", "0,:,k (int is a select)",
                                  "i,j2 (broadcast)", "1:3,j,::-2 flipped", "None,i,j,None"])
def test_setitem_advanced_matches_torch(name, how):
    x = data(seed=14)
    i, j, k = np.array([0, 3, -1]), np.array([1, -1, 2]), np.array([5, 0, 2])  # no repeated targets
    tkey = KEYS[name](*[T(a) for a in (i, j, k, J2)])
    v = data(T(x)[tkey].shape, seed=15)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    xt[KEYS[name](*[_graph_index(cx, a, how) for a in (i, j, k, J2)])] = cx.tensor(v.shape).set(v)
    xt.retrieve()
    cx.execute()
    want = T(x).clone()
    want[tkey] = T(v)
    check(xt.data(), want)


@pytest.mark.parametrize("how", ["tensor", "numpy"])
def test_setitem_repeated_indices_last_write_wins(how):
    x = np.zeros((5, 3), np.int64)
    i = np.array([1, 3, 1, -4, 0])  # rows 1 (three writes: -4 wraps to 1) and 3, 0
    v = np.arange(15).reshape(5, 3)
    cx = lm.Graph()
    xt = cx.tensor(x.shape, dtype=lm.int64).set(x)
    xt[_graph_index(cx, i, how)] = v
    xt.retrieve()
    cx.execute()
    want = T(x).clone()
    want[T(i)] = T(v)  # torch's CPU loop writes in order: the last write wins (as numpy's)
    check(xt.data(), want)
    np.testing.assert_array_equal(xt.data()[1], v[3])


def test_setitem_masks():
    x = data((4, 5), seed=16)
    cx = lm.Graph()
    a, b, c, d = (cx.tensor(x.shape).set(x) for _ in range(4))
    a[a > 0.5] = -1.0                              # a mask computed in the graph: a where, any value count-free
    b[::2, b[0] > 0] = cx.tensor((2, 1)).set(np.arange(2, dtype=np.float32).reshape(2, 1))
    nnz = int(MASK.sum())
    c[MASK] = np.arange(nnz, dtype=np.float32)     # one value per True entry: the mask must be known
    row = x[0] > 0
    d[1::2, row] = np.arange(2 * row.sum(), dtype=np.float32).reshape(2, -1)
    for t in (a, b, c, d):
        t.retrieve()
    cx.execute()
    wa, wb, wc, wd = x.copy(), x.copy(), x.copy(), x.copy()
    wa[wa > 0.5] = -1.0
    wb[::2, wb[0] > 0] = np.arange(2, dtype=np.float32).reshape(2, 1)
    wc[MASK] = np.arange(nnz, dtype=np.float32)
    wd[1::2, row] = np.arange(2 * row.sum(), dtype=np.float32).reshape(2, -1)
    for t, w in zip((a, b, c, d), (wa, wb, wc, wd)):
        check(t.data(), w)


def test_setitem_errors():
    cx = lm.Graph()
    xt = cx.tensor((4, 5))
    with pytest.raises(DataDependentShapeError, match="number of True entries"):
        xt[xt > 0] = cx.tensor((3,))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        xt[0] = np.zeros(4, np.float32)
    with pytest.raises(IndexError, match="out of bounds"):
        xt[[0, 4]] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        xt[0, 0, 0] = 1.0


def test_setitem_gradients_match_torch_cloned_leaf():
    x, v = data((4, 5, 6), seed=17), data((3, 5), seed=18)
    i, k = np.array([2, 0, 3]), np.array([1, 4, -1])
    w = data((4, 5, 6), seed=19)
    cx = lm.Graph()
    xt, vt = cx.tensor(x.shape).set(x), cx.tensor(v.shape).set(v)
    y = xt * 1.0
    y[cx.tensor((3,), dtype=lm.int64).set(i), :, k] = vt * vt
    y[1:, 2] = 0.0
    loss = (y * cx.tensor(w.shape).set(w)).sum()
    gx, gv = grad(loss, [xt, vt])
    gx.retrieve()
    gv.retrieve()
    cx.execute()
    xl, vl = T(x).requires_grad_(), T(v).requires_grad_()
    yl = xl.clone()
    yl[T(i), :, T(k)] = vl * vl
    yl[1:, 2] = 0.0
    (yl * T(w)).sum().backward()
    check(gx.data(), xl.grad, atol=1e-6)
    check(gv.data(), vl.grad, atol=1e-6)
    assert (gx.data()[2, :, 1] == 0).all()  # overwritten elements of the old x get no gradient


def test_setitem_functional_form_and_old_handles():
    x = data((3, 4), seed=20)
    cx = lm.Graph()
    xt = cx.tensor(x.shape).set(x)
    old = xt[0]                        # a view taken before the assignment keeps reading the old value
    new = xt.setitem((0, [1, 3]), 9.0)  # the functional form leaves xt alone
    same = xt.retrieve()
    for t in (old, new):
        t.retrieve()
    cx.execute()
    want = x.copy()
    want[0, [1, 3]] = 9.0
    check(new.data(), want)
    check(same.data(), x)
    check(old.data(), x[0])


def test_repeat_interleave_with_per_element_repeats():
    """Per-element repeats from a list, a numpy array, a one-element list and a tensor of constants, along a dim
    and flattened, against torch (exact: copies); the gradient sums the copies (torch autograd); repeats computed
    from graph inputs raise DataDependentShapeError; a size mismatch and negative counts raise ValueError."""

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    X = torch.from_numpy(x).requires_grad_(True)
    cx = lm.Graph()
    t = cx.tensor((3, 4)).set(x)
    const = cx.arange(3, dtype="int64") % 2 + 1          # [1, 2, 1], computed from constants only
    outs = [t.repeat_interleave([1, 0, 2], 0), t.repeat_interleave(np.array([2, 1, 1, 3]), dim=1),
            t.repeat_interleave([3], dim=0), t.repeat_interleave([2] * 12), t.repeat_interleave(const, 0)]
    wants = [X.repeat_interleave(torch.tensor([1, 0, 2]), 0), X.repeat_interleave(torch.tensor([2, 1, 1, 3]), dim=1),
             X.repeat_interleave(torch.tensor([3]), dim=0), X.repeat_interleave(torch.tensor([2] * 12)),
             X.repeat_interleave(torch.tensor([1, 2, 1]), 0)]
    weights = np.random.default_rng(0).standard_normal(7 * 4).astype(np.float32)
    w_rep = cx.tensor((12,)).set(weights[:12]).repeat_interleave([2, 1, 3, 1] * 3)[:21]
    loss = (outs[1].reshape((-1,)) * w_rep).sum()
    (g,) = grad(loss, [t])
    for o in outs + [g]:
        o.retrieve()
    cx.execute()
    for o, w in zip(outs, wants):
        np.testing.assert_array_equal(o.data(), w.detach().numpy())
    W = torch.from_numpy(weights[:12]).repeat_interleave(torch.tensor([2, 1, 3, 1] * 3))[:21]
    (wants[1].reshape(-1) * W).sum().backward()
    np.testing.assert_allclose(g.data(), X.grad.numpy(), rtol=1e-6)
    with pytest.raises(DataDependentShapeError, match="data-dependent"):
        t.repeat_interleave(cx.tensor((3,), "int64"), 0)
    with pytest.raises(ValueError, match="same size"):
        t.repeat_interleave([1, 2], 0)
    with pytest.raises(ValueError, match="non-negative"):
        t.repeat_interleave([1, -1, 2], 0)
