"""``GraphTensor.shape`` is a ``lm.Size`` tuple (as ``torch.Size``); the view is ``GraphTensor.tracker``."""

import pickle

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.shape import ShapeTracker

RNG = np.random.default_rng(0)


def _pair(*shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    return lm.Graph().tensor(shape).set(a), torch.from_numpy(a)


def _other(x, t, *shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    return x.graph.tensor(shape).set(a), torch.from_numpy(a)


CASES = {
    "reshape": lambda x, t: (x.reshape(3, 8), t.reshape(3, 8)),
    "reshape_infer": lambda x, t: (x.reshape(-1, 2), t.reshape(-1, 2)),
    "view_flat": lambda x, t: (x.view(-1), t.view(-1)),
    "permute": lambda x, t: (x.permute(2, 0, 1), t.permute(2, 0, 1)),
    "transpose": lambda x, t: (x.transpose(0, 2), t.transpose(0, 2)),
    "unsqueeze": lambda x, t: (x.unsqueeze(1), t.unsqueeze(1)),
    "unsqueeze_last": lambda x, t: (x.unsqueeze(-1), t.unsqueeze(-1)),
    "squeeze": lambda x, t: (x.unsqueeze(0).squeeze(0), t.unsqueeze(0).squeeze(0)),
    "sum_keepdim": lambda x, t: (x.sum(1, keepdim=True), t.sum(1, keepdim=True)),
    "sum": lambda x, t: (x.sum(-1), t.sum(-1)),
    "mean_keepdim": lambda x, t: (x.mean(dim=(0, 2), keepdim=True), t.mean(dim=(0, 2), keepdim=True)),
    "slice": lambda x, t: (x[:, 1:, ::2], t[:, 1:, ::2]),
    "index": lambda x, t: (x[0], t[0]),
    "expand": lambda x, t: (x[:, :1].expand(2, 5, 4), t[:, :1].expand(2, 5, 4)),
    "flatten": lambda x, t: (x.flatten(1), t.flatten(1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shape_matches_torch(name):
    x, t = _pair(2, 3, 4)
    y, ty = CASES[name](x, t)
    assert isinstance(y.shape, lm.Size) and isinstance(y.shape, tuple)
    assert tuple(y.shape) == tuple(ty.shape)
    assert y.shape == tuple(ty.shape) and y.shape == ty.shape  # a torch.Size is a tuple too
    assert len(y.shape) == ty.dim() == y.ndim
    assert all(type(d) is int for d in y.shape)
    assert y.size() == tuple(ty.size()) and all(y.size(k) == ty.size(k) for k in range(-ty.dim(), ty.dim()))


def test_matmul_and_broadcasting_match_torch():
    a, ta = _pair(2, 1, 3, 4)
    b, tb = _other(a, ta, 5, 4, 6)
    assert (a @ b).shape == (ta @ tb).shape == (2, 5, 3, 6)
    c, tc = _other(a, ta, 3, 1)
    assert (a + c).shape == tuple((ta + tc).shape) == (2, 1, 3, 4)
    v, tv = _other(a, ta, 4)
    assert (a @ v).shape == tuple((ta @ tv).shape)


def test_size_behaves_like_a_tuple():
    x = lm.Graph().tensor((2, 3, 4))
    s = x.shape
    assert s[-1] == 4 and s[0] == 2
    assert s[1:] == (3, 4) and isinstance(s[1:], lm.Size)
    b, c, d = s
    assert (b, c, d) == (2, 3, 4)
    assert len(s) == 3 and list(s) == [2, 3, 4]
    assert s == (2, 3, 4) and s != (2, 3) and s != (2, 3, 5)
    assert s == lm.Size([2, 3, 4]) and hash(s) == hash((2, 3, 4))
    assert isinstance(s + (5,), lm.Size) and (1,) + s == (1, 2, 3, 4)
    assert s.numel() == 24 and repr(s) == "Size([2, 3, 4])" and str(s) == repr(s)
    assert np.zeros(s).shape == (2, 3, 4)  # numpy accepts it as a shape
    assert pickle.loads(pickle.dumps(s)) == s and type(pickle.loads(pickle.dumps(s))) is lm.Size
    assert lm.Graph().tensor(()).shape == () and lm.Graph().tensor(()).shape.numel() == 1


def test_symbolic_dims_are_expressions():
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 8))
    s = x.shape
    assert isinstance(s, lm.Size) and len(s) == 3 and s.is_symbolic()
    assert s[0] == lm.sym("batch") and str(s[0]) == "batch" and isinstance(s[0], lm.Expression)
    assert s[1] == lm.sym("seq") and s[2] == 8 and type(s[2]) is int
    assert s == (lm.sym("batch"), lm.sym("seq"), 8)
    assert repr(s) == "Size([batch, seq, 8])"
    assert x.size(1) == lm.sym("seq") and x.size() == s
    y = x.reshape(x.shape[0], -1)  # a symbolic dim from .shape feeds a reshape, as in torch
    assert y.shape == (lm.sym("batch"), lm.sym("seq") * 8)
    z = x.permute(2, 0, 1).sum(-1, keepdim=True)
    assert z.shape == (8, lm.sym("batch"), 1)
    w = lm.cat([x, x], 1)
    assert w.shape[1] == lm.sym("seq") * 2 and str(w.shape[1]) == "2*seq"
    assert s.numel() == lm.sym("batch") * lm.sym("seq") * 8
    assert not lm.Graph().tensor((2, 3)).shape.is_symbolic()
    cx.set_dim("batch", 2)
    cx.set_dim("seq", 3)
    assert x.concrete_shape() == (2, 3, 8)


def test_tracker_is_the_view():
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    assert isinstance(x.tracker, ShapeTracker) and x.tracker == ShapeTracker.contiguous_of((2, 3))
    t = x.T
    assert t.shape == (3, 2) and t.id == x.id and not t.tracker.is_contiguous()
    v = x._view(x.tracker.permute((1, 0)))
    assert v.shape == (3, 2) and v.tracker == t.tracker
    with pytest.raises(AttributeError, match="tracker"):
        x.shape = ShapeTracker.contiguous_of((3, 2))


def test_shape_can_fail():
    """The comparisons above are real: wrong shapes and wrong types are told apart."""
    x = lm.Graph().tensor((2, 3))
    assert x.shape != (3, 2) and x.shape != [2, 3] and x.shape != (2, 3, 1)
    assert x.T.shape != x.shape
    assert not isinstance(x.shape, ShapeTracker)
    with pytest.raises(IndexError):
        x.shape[2]
