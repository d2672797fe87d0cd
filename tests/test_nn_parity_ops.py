"""PyTorch-parity methods, functional ops and layers a PyTorch user reaches for first (issue 17): tensor methods
of ``luminal.hl_ops.parity``, ``luminal.nn.functional_extra`` and ``luminal.nn.layers_extra``.

Oracle: PyTorch CPU in float64 (values) and torch.autograd (gradients of a few); tolerance rtol 1e-5, atol 1e-6
unless a case says otherwise. Both backends (tests/conftest.py parametrizes ``test_nn_*`` modules).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import grad

RNG = np.random.default_rng(17)


def _a(*shape, positive=False, scale=1.0):
    x = RNG.standard_normal(shape) * scale
    return np.abs(x) + 0.1 if positive else x


def _run(fn, arrays, dtype="float64"):
    cx = lm.Graph()
    ts = [cx.tensor(a.shape, dtype if a.dtype.kind == "f" else a.dtype.name).set(a) for a in arrays]
    out = fn(*ts)
    outs = out if isinstance(out, (tuple, list)) else [out]
    for o in outs:
        o.retrieve()
    cx.execute()
    return [o.data() for o in outs]


def _check(ours, theirs, arrays, rtol=1e-5, atol=1e-6):
    got = _run(ours, arrays)
    exp = theirs(*[torch.from_numpy(a) for a in arrays])
    exp = exp if isinstance(exp, (tuple, list)) else [exp]
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        e = e.detach().numpy()
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)


X = _a(2, 3, 4, 5)
SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 1e-3, 3.0])

METHOD_CASES = {
    "norm_fro": (lambda x: x.norm(), lambda x: x.norm(), [X]),
    "norm_p1_dim": (lambda x: x.norm(1, dim=(1, 3)), lambda x: x.norm(1, dim=(1, 3)), [X]),
    "norm_inf_keepdim": (lambda x: x.norm(math.inf, dim=-1, keepdim=True),
                         lambda x: torch.linalg.vector_norm(x, math.inf, dim=-1, keepdim=True), [X]),
    "norm_-inf": (lambda x: x.norm(-math.inf, dim=2), lambda x: torch.linalg.vector_norm(x, -math.inf, dim=2), [X]),
    "norm_p0": (lambda x: (x.relu()).norm(0, dim=1), lambda x: torch.linalg.vector_norm(x.relu(), 0, dim=1), [X]),
    "norm_p3": (lambda x: x.norm(3, dim=-1), lambda x: torch.linalg.vector_norm(x, 3, dim=-1), [X]),
    "dist": (lambda x, y: x.dist(y, 1.5), lambda x, y: torch.dist(x, y, 1.5), [_a(3, 4), _a(3, 4)]),
    "bmm": (lambda x, y: x.bmm(y), lambda x, y: x.bmm(y), [_a(2, 3, 4), _a(2, 4, 5)]),
    "mv": (lambda x, y: x.mv(y), lambda x, y: x.mv(y), [_a(3, 4), _a(4)]),
    "dot": (lambda x, y: x.dot(y), lambda x, y: x.dot(y), [_a(6), _a(6)]),
    "inner": (lambda x, y: x.inner(y), lambda x, y: x.inner(y), [_a(2, 3, 4), _a(5, 4)]),
    "outer": (lambda x, y: x.outer(y), lambda x, y: x.outer(y), [_a(3), _a(4)]),
    "addmm": (lambda b, x, y: b.addmm(x, y, beta=0.5, alpha=2.0), lambda b, x, y: b.addmm(x, y, beta=0.5, alpha=2.0),
              [_a(5), _a(3, 4), _a(4, 5)]),
    "baddbmm": (lambda b, x, y: b.baddbmm(x, y, alpha=0.3), lambda b, x, y: b.baddbmm(x, y, alpha=0.3),
                [_a(2, 3, 5), _a(2, 3, 4), _a(2, 4, 5)]),
    "addmv": (lambda b, x, y: b.addmv(x, y, beta=2.0), lambda b, x, y: b.addmv(x, y, beta=2.0),
              [_a(3), _a(3, 4), _a(4)]),
    "addcmul": (lambda a, b, c: a.addcmul(b, c, value=0.5), lambda a, b, c: a.addcmul(b, c, value=0.5),
                [_a(3, 4), _a(3, 4), _a(4)]),
    "addcdiv": (lambda a, b, c: a.addcdiv(b, c, value=-2.0), lambda a, b, c: a.addcdiv(b, c, value=-2.0),
                [_a(3, 4), _a(3, 4), _a(3, 4, positive=True)]),
    "kron": (lambda x, y: x.kron(y), lambda x, y: torch.kron(x, y), [_a(2, 3), _a(4, 2)]),
    "kron_ranks": (lambda x, y: x.kron(y), lambda x, y: torch.kron(x, y), [_a(3), _a(2, 2)]),
    "tensordot_int": (lambda x, y: x.tensordot(y, 2), lambda x, y: torch.tensordot(x, y, 2),
                      [_a(2, 3, 4), _a(3, 4, 5)]),
    "tensordot_axes": (lambda x, y: x.tensordot(y, ([0, 2], [2, 0])), lambda x, y: torch.tensordot(x, y, ([0, 2], [2, 0])),
                       [_a(2, 3, 4), _a(4, 5, 2)]),
    "cross": (lambda x, y: x.cross(y), lambda x, y: torch.linalg.cross(x, y), [_a(4, 3), _a(4, 3)]),
    "cross_dim": (lambda x, y: x.cross(y, dim=0), lambda x, y: torch.linalg.cross(x, y, dim=0), [_a(3, 5), _a(3, 5)]),
    "trace": (lambda x: x.trace(), lambda x: x.trace(), [_a(4, 5)]),
    "nansum": (lambda x: x.nansum(dim=0), lambda x: x.nansum(dim=0), [np.array([[1.0, np.nan], [2.0, 3.0]])]),
    "nanmean": (lambda x: x.nanmean(dim=1), lambda x: x.nanmean(dim=1),
                [np.array([[1.0, np.nan, 4.0], [np.nan, np.nan, np.nan]])]),
    "logit": (lambda x: x.logit(), lambda x: x.logit(), [np.array([0.0, 0.2, 0.5, 0.9, 1.0])]),
    "logit_eps": (lambda x: x.logit(eps=1e-3), lambda x: x.logit(eps=1e-3), [np.array([0.0, 0.2, 0.5, 0.9, 1.0])]),
    "nan_to_num": (lambda x: x.nan_to_num(), lambda x: x.nan_to_num(), [SPECIAL]),
    "nan_to_num_args": (lambda x: x.nan_to_num(1.0, 2.0, -3.0), lambda x: x.nan_to_num(1.0, 2.0, -3.0), [SPECIAL]),
    "frac": (lambda x: x.frac(), lambda x: x.frac(), [SPECIAL]),
    "hypot": (lambda x, y: x.hypot(y), lambda x, y: torch.hypot(x, y), [SPECIAL, SPECIAL[::-1].copy()]),
    "hypot_big": (lambda x, y: x.hypot(y), lambda x, y: torch.hypot(x, y), [np.array([1e200, 3e-200]), np.array([1e200, 4e-200])]),
    "xlogy": (lambda x, y: x.xlogy(y), lambda x, y: torch.xlogy(x, y),
              [np.array([0.0, 0.0, 2.0, 1.0, 0.0]), np.array([0.0, np.nan, 3.0, -1.0, 5.0])]),
    "signbit": (lambda x: x.signbit(), lambda x: torch.signbit(x), [SPECIAL[np.isfinite(SPECIAL) | np.isinf(SPECIAL)]]),
    "sgn": (lambda x: x.sgn(), lambda x: x.sgn(), [_a(6)]),
    "deg2rad": (lambda x: x.deg2rad(), lambda x: x.deg2rad(), [_a(5, scale=90)]),
    "rad2deg": (lambda x: x.rad2deg(), lambda x: x.rad2deg(), [_a(5)]),
    "sinc": (lambda x: x.sinc(), lambda x: torch.sinc(x), [np.array([0.0, 0.5, -1.0, 2.25, 1e-9])]),
    "logaddexp2": (lambda x, y: x.logaddexp2(y), lambda x, y: torch.logaddexp2(x, y), [_a(5, scale=30), _a(5, scale=30)]),
    "clamp_min_max": (lambda x: x.clamp_min(-0.5).clamp_max(0.7), lambda x: x.clamp_min(-0.5).clamp_max(0.7), [_a(8)]),
    "isposinf": (lambda x: x.isposinf(), lambda x: torch.isposinf(x), [SPECIAL]),
    "isneginf": (lambda x: x.isneginf(), lambda x: torch.isneginf(x), [SPECIAL]),
    "t": (lambda x: x.t(), lambda x: x.t(), [_a(3, 4)]),
    "movedim": (lambda x: x.movedim(0, -1), lambda x: x.movedim(0, -1), [X]),
    "movedim_multi": (lambda x: x.movedim((0, 1), (3, 0)), lambda x: x.movedim((0, 1), (3, 0)), [X]),
    "tile": (lambda x: x.tile((2, 1, 3)), lambda x: x.tile((2, 1, 3)), [_a(3, 2)]),
    "tile_short": (lambda x: x.tile(2), lambda x: x.tile((2,)), [_a(3, 2)]),
    "fliplr_flipud": (lambda x: x.fliplr().flipud(), lambda x: x.fliplr().flipud(), [_a(3, 4)]),
    "rot90": (lambda x: x.rot90(), lambda x: x.rot90(), [_a(3, 4)]),
    "rot90_k3": (lambda x: x.rot90(3, (1, 2)), lambda x: x.rot90(3, (1, 2)), [_a(2, 3, 4)]),
    "rot90_k-2": (lambda x: x.rot90(-2), lambda x: x.rot90(-2), [_a(3, 4)]),
    "view_as": (lambda x, y: x.view_as(y), lambda x, y: x.view_as(y), [_a(12), _a(3, 4)]),
    "roll_dims": (lambda x: x.roll((1, -2), dims=(0, 2)), lambda x: x.roll((1, -2), dims=(0, 2)), [_a(3, 4, 5)]),
    "roll_flat": (lambda x: x.roll(3), lambda x: x.roll(3), [_a(3, 4)]),
    "cdist": (lambda x, y: lm.cdist(x, y), lambda x, y: torch.cdist(x, y), [_a(4, 3), _a(5, 3)]),
    "cdist_p1_batched": (lambda x, y: lm.cdist(x, y, 1.0), lambda x, y: torch.cdist(x, y, 1.0), [_a(2, 4, 3), _a(2, 5, 3)]),
}


@pytest.mark.parametrize("case", list(METHOD_CASES))
def test_tensor_methods_match_torch(case):
    ours, theirs, arrays = METHOD_CASES[case]
    _check(ours, theirs, arrays)


def test_new_tensors_and_type_as():
    cx = lm.Graph()
    x = cx.tensor((2, 3), "float32").set(np.ones((2, 3), np.float32))
    i = cx.tensor((2,), "int32").set(np.array([1, 2], np.int32))
    outs = [x.new_zeros(2, 2), x.new_ones((3,)), x.new_full((2, 1), 7.0), i.type_as(x), x.new_zeros(2, dtype="int64")]
    for o in outs:
        o.retrieve()
    cx.execute()
    t = torch.ones(2, 3)
    exp = [t.new_zeros(2, 2), t.new_ones((3,)), t.new_full((2, 1), 7.0), torch.tensor([1, 2]).type_as(t),
           t.new_zeros(2, dtype=torch.int64)]
    for o, e in zip(outs, exp):
        assert o.data().dtype == e.numpy().dtype
        np.testing.assert_array_equal(o.data(), e.numpy())


def test_parity_errors_name_what_was_expected():
    cx = lm.Graph()
    x = cx.tensor((2, 3, 4))
    with pytest.raises(ValueError, match="bmm expects two 3-D"):
        x.bmm(cx.tensor((4, 5)))
    with pytest.raises(ValueError, match="t\\(\\) expects"):
        x.t()
    with pytest.raises(ValueError, match="size 3"):
        x.cross(x)
    with pytest.raises(ValueError, match="norm: p='nuc'"):
        x.norm("nuc")
    with pytest.raises(ValueError, match="tensordot: contracted sizes differ"):
        x.tensordot(cx.tensor((5, 4)), 1)


FUNCTIONAL_CASES = {
    "elu": (lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7), [X]),
    "selu": (lambda x: F.selu(x), lambda x: TF.selu(x), [X]),
    "celu": (lambda x: F.celu(x, 0.5), lambda x: TF.celu(x, 0.5), [X]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2), [X]),
    "relu6": (lambda x: F.relu6(x * 4), lambda x: TF.relu6(x * 4), [X]),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.5), lambda x: TF.hardtanh(x, -0.5, 0.5), [X]),
    "softplus": (lambda x: F.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0), [X]),
    "softsign": (lambda x: F.softsign(x), lambda x: TF.softsign(x), [X]),
    "logsigmoid": (lambda x: F.logsigmoid(x), lambda x: TF.logsigmoid(x), [X]),
    "mish": (lambda x: F.mish(x), lambda x: TF.mish(x), [X]),
    "hardswish": (lambda x: F.hardswish(x * 3), lambda x: TF.hardswish(x * 3), [X]),
    "hardsigmoid": (lambda x: F.hardsigmoid(x * 3), lambda x: TF.hardsigmoid(x * 3), [X]),
    "sigmoid_tanh": (lambda x: F.sigmoid(x) + F.tanh(x), lambda x: torch.sigmoid(x) + torch.tanh(x), [X]),
    "glu": (lambda x: F.glu(x, 2), lambda x: TF.glu(x, 2), [X]),
    "threshold": (lambda x: F.threshold(x, 0.1, -5.0), lambda x: TF.threshold(x, 0.1, -5.0), [X]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.3), lambda x: TF.hardshrink(x, 0.3), [X]),
    "softshrink": (lambda x: F.softshrink(x, 0.3), lambda x: TF.softshrink(x, 0.3), [X]),
    "tanhshrink": (lambda x: F.tanhshrink(x), lambda x: TF.tanhshrink(x), [X]),
    "rrelu_eval": (lambda x: F.rrelu(x), lambda x: TF.rrelu(x, training=False), [X]),
    "unfold": (lambda x: F.unfold(x, 2), lambda x: TF.unfold(x, 2), [_a(2, 3, 5, 4)]),
    "unfold_all_args": (lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(2, 1)),
                        lambda x: TF.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(2, 1)), [_a(2, 3, 6, 5)]),
    "unfold_unbatched": (lambda x: F.unfold(x, 3, padding=1), lambda x: TF.unfold(x, 3, padding=1), [_a(2, 4, 4)]),
    "fold": (lambda x: F.fold(x, (5, 4), 2), lambda x: TF.fold(x, (5, 4), 2), [_a(2, 12, 12)]),
    "fold_all_args": (lambda x: F.fold(x, (6, 5), (2, 3), dilation=(2, 1), padding=1, stride=(2, 1)),
                      lambda x: TF.fold(x, (6, 5), (2, 3), dilation=(2, 1), padding=1, stride=(2, 1)),
                      [_a(2, 18, 15)]),
    "fold_unfold_roundtrip": (lambda x: F.fold(F.unfold(x, 3, padding=1, stride=2), (5, 6), 3, padding=1, stride=2),
                              lambda x: TF.fold(TF.unfold(x, 3, padding=1, stride=2), (5, 6), 3, padding=1, stride=2),
                              [_a(1, 2, 5, 6)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), lambda x: TF.pixel_shuffle(x, 2), [_a(2, 8, 3, 4)]),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), lambda x: TF.pixel_unshuffle(x, 2), [_a(2, 3, 4, 6)]),
    "channel_shuffle": (lambda x: F.channel_shuffle(x, 3), lambda x: TF.channel_shuffle(x, 3), [_a(2, 6, 2, 2)]),
    "cosine_similarity": (lambda x, y: F.cosine_similarity(x, y, dim=1),
                          lambda x, y: TF.cosine_similarity(x, y, dim=1), [_a(4, 5), _a(4, 5)]),
    "cosine_similarity_bcast": (lambda x, y: F.cosine_similarity(x, y, dim=-1),
                                lambda x, y: TF.cosine_similarity(x, y, dim=-1), [_a(3, 1, 5), _a(4, 5)]),
    "pairwise_distance": (lambda x, y: F.pairwise_distance(x, y, 3.0, keepdim=True),
                          lambda x, y: TF.pairwise_distance(x, y, 3.0, keepdim=True), [_a(4, 5), _a(4, 5)]),
    "pdist": (lambda x: F.pdist(x), lambda x: TF.pdist(x), [_a(5, 3)]),
    "margin_ranking": (lambda a, b, t: F.margin_ranking_loss(a, b, t, 0.2),
                       lambda a, b, t: TF.margin_ranking_loss(a, b, t, 0.2),
                       [_a(6), _a(6), np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0])]),
    "hinge_embedding": (lambda x, t: F.hinge_embedding_loss(x, t, reduction="sum"),
                        lambda x, t: TF.hinge_embedding_loss(x, t, reduction="sum"),
                        [_a(6), np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])]),
    "soft_margin": (lambda x, t: F.soft_margin_loss(x, t), lambda x, t: TF.soft_margin_loss(x, t),
                    [_a(6, scale=30), np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])]),
    "cosine_embedding": (lambda a, b, t: F.cosine_embedding_loss(a, b, t, 0.1, reduction="none"),
                         lambda a, b, t: TF.cosine_embedding_loss(a, b, t, 0.1, reduction="none"),
                         [_a(4, 5), _a(4, 5), np.array([1.0, -1.0, -1.0, 1.0])]),
    "poisson_nll": (lambda x, t: F.poisson_nll_loss(x, t), lambda x, t: TF.poisson_nll_loss(x, t),
                    [_a(6), _a(6, positive=True) * 3]),
    "poisson_nll_full": (lambda x, t: F.poisson_nll_loss(x, t, log_input=False, full=True),
                         lambda x, t: TF.poisson_nll_loss(x, t, log_input=False, full=True),
                         [_a(6, positive=True), _a(6, positive=True) * 3]),
    "gaussian_nll": (lambda x, t, v: F.gaussian_nll_loss(x, t, v, full=True),
                     lambda x, t, v: TF.gaussian_nll_loss(x, t, v, full=True),
                     [_a(4, 3), _a(4, 3), _a(4, 3, positive=True)]),
    "triplet": (lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True),
                lambda a, p, n: TF.triplet_margin_loss(a, p, n, swap=True), [_a(4, 5), _a(4, 5), _a(4, 5)]),
    "multilabel_soft_margin": (lambda x, t: F.multilabel_soft_margin_loss(x, t),
                               lambda x, t: TF.multilabel_soft_margin_loss(x, t),
                               [_a(3, 4), (RNG.random((3, 4)) > 0.5).astype(np.float64)]),
}


@pytest.mark.parametrize("case", list(FUNCTIONAL_CASES))
def test_functional_matches_torch(case):
    ours, theirs, arrays = FUNCTIONAL_CASES[case]
    _check(ours, theirs, arrays)


MODULE_CASES = {
    "ZeroPad2d": (lambda: nn.ZeroPad2d((1, 2, 0, 1)), lambda: torch.nn.ZeroPad2d((1, 2, 0, 1)), _a(2, 3, 4, 4)),
    "ConstantPad1d": (lambda: nn.ConstantPad1d(2, 3.5), lambda: torch.nn.ConstantPad1d(2, 3.5), _a(2, 3, 4)),
    "ConstantPad3d": (lambda: nn.ConstantPad3d(1, -1.0), lambda: torch.nn.ConstantPad3d(1, -1.0), _a(1, 2, 2, 3, 2)),
    "ReflectionPad2d": (lambda: nn.ReflectionPad2d((2, 1, 1, 2)), lambda: torch.nn.ReflectionPad2d((2, 1, 1, 2)),
                        _a(2, 3, 4, 5)),
    "ReplicationPad1d": (lambda: nn.ReplicationPad1d((3, 1)), lambda: torch.nn.ReplicationPad1d((3, 1)), _a(2, 3, 4)),
    "CircularPad2d": (lambda: nn.CircularPad2d(1), lambda: torch.nn.CircularPad2d(1), _a(1, 2, 3, 4)),
    "PixelShuffle": (lambda: nn.PixelShuffle(3), lambda: torch.nn.PixelShuffle(3), _a(1, 9, 2, 3)),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), lambda: torch.nn.PixelUnshuffle(2), _a(1, 2, 4, 6)),
    "Unfold": (lambda: nn.Unfold(2, stride=2), lambda: torch.nn.Unfold(2, stride=2), _a(2, 3, 4, 6)),
    "Fold": (lambda: nn.Fold((4, 6), 2, stride=2), lambda: torch.nn.Fold((4, 6), 2, stride=2), _a(2, 12, 6)),
    "Unflatten": (lambda: nn.Unflatten(1, (3, 4)), lambda: torch.nn.Unflatten(1, (3, 4)), _a(2, 12, 5)),
    "Softmin": (lambda: nn.Softmin(1), lambda: torch.nn.Softmin(1), _a(2, 5)),
    "Softmax2d": (lambda: nn.Softmax2d(), lambda: torch.nn.Softmax2d(), _a(2, 3, 4, 5)),
    "GLU": (lambda: nn.GLU(), lambda: torch.nn.GLU(), _a(3, 6)),
    "Hardshrink": (lambda: nn.Hardshrink(0.4), lambda: torch.nn.Hardshrink(0.4), _a(10)),
    "Softshrink": (lambda: nn.Softshrink(), lambda: torch.nn.Softshrink(), _a(10)),
    "Tanhshrink": (lambda: nn.Tanhshrink(), lambda: torch.nn.Tanhshrink(), _a(10)),
    "Threshold": (lambda: nn.Threshold(0.2, 9.0), lambda: torch.nn.Threshold(0.2, 9.0), _a(10)),
    "RReLU": (lambda: nn.RReLU(0.1, 0.3), lambda: torch.nn.RReLU(0.1, 0.3).eval(), _a(10)),
    "ChannelShuffle": (lambda: nn.ChannelShuffle(2), lambda: torch.nn.ChannelShuffle(2), _a(1, 4, 2, 2)),
}


@pytest.mark.parametrize("case", list(MODULE_CASES))
def test_modules_match_torch(case):
    make, make_torch, a = MODULE_CASES[case]
    _check(lambda x: make()(x), lambda x: make_torch()(x), [a])


def test_pairwise_modules_and_losses_match_torch():
    a, b = _a(4, 5), _a(4, 5)
    t = np.array([1.0, -1.0, 1.0, -1.0])
    _check(lambda x, y: nn.CosineSimilarity(dim=0)(x, y), lambda x, y: torch.nn.CosineSimilarity(dim=0)(x, y), [a, b])
    _check(lambda x, y: nn.PairwiseDistance(p=1.0)(x, y), lambda x, y: torch.nn.PairwiseDistance(p=1.0)(x, y), [a, b])
    _check(lambda x, y, z: nn.CosineEmbeddingLoss(0.2)(x, y, z),
           lambda x, y, z: torch.nn.CosineEmbeddingLoss(0.2)(x, y, z), [a, b, t])
    _check(lambda x, y, z: nn.TripletMarginLoss(margin=0.5, p=1.0)(x, y, z),
           lambda x, y, z: torch.nn.TripletMarginLoss(margin=0.5, p=1.0)(x, y, z), [a, b, _a(4, 5)])
    _check(lambda x, y: nn.MultiLabelSoftMarginLoss(weight=[1.0, 2.0, 0.5, 1.0, 3.0])(x, y),
           lambda x, y: torch.nn.MultiLabelSoftMarginLoss(weight=torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0],
                                                                                dtype=torch.float64))(x, y),
           [a, (b > 0).astype(np.float64)])


def test_parameter_containers_register_parameters_like_torch():
    pl = nn.ParameterList([np.ones(2), np.zeros((2, 2))])
    pd = nn.ParameterDict({"w": np.ones(3), "b": np.zeros(1)})
    tl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(2, 2))])
    td = torch.nn.ParameterDict({"w": torch.nn.Parameter(torch.ones(3)), "b": torch.nn.Parameter(torch.zeros(1))})
    assert list(pl.state_dict()) == list(tl.state_dict())
    assert list(pd.state_dict()) == list(td.state_dict())
    assert len(pl) == 2 and len(pd) == 2 and "w" in pd and pl[1].data.shape == (2, 2)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([np.full(3, 2.0), np.full(3, 3.0)])

        def forward(self, x):
            for p in self.scales.bind(x):
                x = x * p
            return x

    m = Model()
    assert [n for n, _ in m.named_parameters()] == ["scales.0", "scales.1"]
    cx = lm.Graph()
    x = cx.tensor((3,), "float64").set(np.array([1.0, 2.0, 3.0]))
    loss = m(x).sum()
    grads = grad(loss, [p.bind(cx) for p in m.scales])
    for g in grads:
        g.retrieve()
    cx.execute()
    np.testing.assert_allclose(grads[0].data(), np.array([1.0, 2.0, 3.0]) * 3.0)
    np.testing.assert_allclose(grads[1].data(), np.array([1.0, 2.0, 3.0]) * 2.0)


GRAD_CASES = {
    "norm_at_zero": (lambda x: x.norm(dim=-1), lambda x: x.norm(dim=-1), np.array([[0.0, 0.0], [3.0, 4.0]])),
    "cosine_similarity": (lambda x: F.cosine_similarity(x, x * x, dim=1),
                          lambda x: TF.cosine_similarity(x, x * x, dim=1), _a(3, 4)),
    "unfold": (lambda x: F.unfold(x, 2, padding=1) * 1.5, lambda x: TF.unfold(x, 2, padding=1) * 1.5, _a(1, 2, 3, 3)),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2).sin(), lambda x: TF.pixel_shuffle(x, 2).sin(), _a(1, 4, 2, 3)),
    "hypot": (lambda x: x.hypot(x * 2 + 1), lambda x: torch.hypot(x, x * 2 + 1), _a(5)),
    "kron": (lambda x: x.kron(x * 2), lambda x: torch.kron(x, x * 2), _a(2, 2)),
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradients_match_torch(case):
    ours, theirs, a = GRAD_CASES[case]
    w = RNG.standard_normal(np.asarray(theirs(torch.from_numpy(a))).shape if False else
                            theirs(torch.from_numpy(a)).shape)
    cx = lm.Graph()
    x = cx.tensor(a.shape, "float64").set(a)
    wt = cx.tensor(w.shape, "float64").set(w)
    (g,) = grad((ours(x) * wt).sum(), [x])
    g.retrieve()
    cx.execute()
    t = torch.tensor(a, requires_grad=True)
    (theirs(t) * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(g.data(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_eager_tensors_reach_the_new_ops():
    """The eager API (lm.tensor) gets the new methods and functions without extra wiring."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    t = lm.tensor(a)
    np.testing.assert_allclose(t.norm(dim=1).numpy(), torch.from_numpy(a).norm(dim=1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(F.mish(t).numpy(), TF.mish(torch.from_numpy(a)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lm.outer(t[0], t[1]).numpy(), np.outer(a[0], a[1]), rtol=1e-6)
    np.testing.assert_allclose(nn.PixelShuffle(2)(lm.tensor(np.ones((1, 4, 2, 2), np.float32))).numpy(),
                               np.ones((1, 1, 4, 4), np.float32))


TORCH_STYLE = {  # the same call text works on torch tensors and luminal graph tensors
    "sum_dim_keepdim": lambda m, x: m.sum(x, dim=1, keepdim=True),
    "mean_dim_tuple": lambda m, x: m.mean(x, dim=(0, 2)),
    "max_all": lambda m, x: m.max(x),
    "amax_dim": lambda m, x: m.amax(x, dim=-1),
    "exp_log": lambda m, x: m.log(m.exp(x) + 1.0),
    "sigmoid_tanh": lambda m, x: m.sigmoid(x) * m.tanh(x),
    "softmax_dim": lambda m, x: m.softmax(x, dim=-1),
    "log_softmax_dim": lambda m, x: m.log_softmax(x, dim=1),
    "cumsum_dim": lambda m, x: m.cumsum(x, dim=2),
    "clamp": lambda m, x: m.clamp(x, -0.5, 0.5),
    "flatten": lambda m, x: m.flatten(x, 1),
    "transpose": lambda m, x: m.transpose(x, 0, 2),
    "flip_dims": lambda m, x: m.flip(x, dims=[0, 2]),
    "matmul": lambda m, x: m.matmul(x, m.transpose(x, 1, 2)),
    "argmax_dim": lambda m, x: m.argmax(x, dim=1),
    "std_dim": lambda m, x: m.std(x, dim=-1),
    "logsumexp_dim": lambda m, x: m.logsumexp(x, dim=0),
    "squeeze_unsqueeze": lambda m, x: m.squeeze(m.unsqueeze(x, 0), 0),
    "maximum_where": lambda m, x: m.where(x > 0, m.maximum(x, x * 2), x),
}


@pytest.mark.parametrize("case", list(TORCH_STYLE))
def test_torch_function_forms_and_dim_keywords_on_graph_tensors(case):
    """``lm.<fn>(x, ..., dim=...)`` as ``torch.<fn>``, on graph tensors (so torch-style module code runs lazily)."""
    fn = TORCH_STYLE[case]
    a = _a(3, 4, 5)
    _check(lambda x: fn(lm, x), lambda x: fn(torch, x), [a])


def test_torch_function_forms_on_eager_tensors_and_bad_input():
    a = _a(3, 4).astype(np.float32)
    t = lm.tensor(a)
    np.testing.assert_allclose(lm.sum(t, dim=1).numpy(), a.sum(1), rtol=1e-6)
    values, indices = lm.max(t, 1)
    np.testing.assert_array_equal(indices.numpy(), a.argmax(1))
    np.testing.assert_allclose(values.numpy(), a.max(1))
    with pytest.raises(TypeError, match="lm.exp\\(\\) expects a luminal tensor"):
        lm.exp([1.0, 2.0])  # (a numpy array is accepted: an eager tensor, tests/test_eager_api_parity.py)
    cx = lm.Graph()
    with pytest.raises(TypeError, match="both 'dim' and 'axis'"):
        cx.tensor((2, 3)).sum(dim=0, axis=1)
