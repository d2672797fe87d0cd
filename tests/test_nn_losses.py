"""Losses (luminal/nn/losses.py) against torch.nn.functional on seeded float32 data: rtol=1e-5, atol=1e-6.

Each test builds one graph holding every reduction and option combination it checks (each distinct graph costs a
C compilation on the "cpu" backend), executes it once and compares every output with PyTorch, NaN matching NaN.
Every test runs on both backends (tests/conftest.py).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.graph import GraphError

RTOL, ATOL = 1e-5, 1e-6
pytestmark = pytest.mark.filterwarnings("ignore:size_average and reduce args:UserWarning",
                                        "ignore:reduction. 'mean' divides the total loss:UserWarning")
REDUCTIONS = ("none", "mean", "sum")


def _randn(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _rand(shape, seed, low=0.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def _ints(shape, high, seed):
    return np.random.default_rng(seed).integers(0, high, size=shape).astype(np.int64)


def _input(cx, arr):
    return cx.tensor(arr.shape, lm.DType(arr.dtype.name)).set(arr)


def _t(arr):
    return torch.from_numpy(np.asarray(arr))


def _execute(cx, pairs):
    """``pairs``: ``[(label, our tensor, torch result)]``; execute once and compare each."""
    for _, ours, _ in pairs:
        ours.retrieve()
    cx.execute()
    for label, ours, ref in pairs:
        got, exp = ours.data(), ref.detach().numpy()
        assert got.shape == exp.shape, (label, got.shape, exp.shape)
        assert got.dtype == exp.dtype, (label, got.dtype, exp.dtype)
        np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL, equal_nan=True, err_msg=label)


# ---------------------------------------------------------------------------------------------------- regression
REGRESSION = {
    "mse": (F.mse_loss, TF.mse_loss, [{}], True),
    "l1": (F.l1_loss, TF.l1_loss, [{}], True),
    "huber": (F.huber_loss, TF.huber_loss, [{}, {"delta": 0.5}, {"delta": 2.0}], True),
    "smooth_l1": (F.smooth_l1_loss, TF.smooth_l1_loss, [{}, {"beta": 0.0}, {"beta": 0.5}, {"beta": 2.0}], False),
}


@pytest.mark.parametrize("name", list(REGRESSION))
def test_regression_losses(name):
    ours, theirs, options, has_weight = REGRESSION[name]
    a, b = _randn((3, 4, 2), 0, 1.5), _randn((3, 4, 2), 1, 1.5)
    w = _rand((3, 4, 2), 2, 0.1, 2.0)
    cx = lm.Graph()
    x, y = _input(cx, a), _input(cx, b)
    pairs = []
    for opts in options:
        for red in REDUCTIONS:
            pairs.append((f"{opts} {red}", ours(x, y, reduction=red, **opts), theirs(_t(a), _t(b), reduction=red, **opts)))
            if has_weight:
                pairs.append((f"{opts} {red} weighted", ours(x, y, reduction=red, weight=w, **opts),
                              theirs(_t(a), _t(b), reduction=red, weight=_t(w), **opts)))
    pairs.append(("numpy target", ours(x, b), theirs(_t(a), _t(b))))
    pairs.append(("scalar target", ours(x, 0.25), theirs(_t(a), torch.full(a.shape, 0.25))))
    _execute(cx, pairs)


def test_legacy_size_average_and_reduce():
    a, b = _randn((4, 3), 0), _randn((4, 3), 1)
    cx = lm.Graph()
    x, y = _input(cx, a), _input(cx, b)
    pairs = []
    for size_average in (None, True, False):
        for reduce in (None, True, False):
            pairs.append((f"{size_average} {reduce}", F.mse_loss(x, y, size_average, reduce),
                          TF.mse_loss(_t(a), _t(b), size_average, reduce)))
    assert nn.L1Loss(reduce=False).reduction == torch.nn.L1Loss(reduce=False).reduction == "none"
    assert nn.MSELoss(size_average=False).reduction == "sum"
    _execute(cx, pairs)


# ---------------------------------------------------------------------------------------------------- cross entropy
CE_CASES = {
    # name: (input shape, kwargs without weight, use weight, targets to ignore)
    "plain": ((6, 5), {}, False, ()),
    "weight": ((6, 5), {}, True, ()),
    "ignore_default": ((6, 5), {}, False, (-100,)),
    "ignore_in_range": ((6, 5), {"ignore_index": 2}, True, (2,)),
    "smoothing": ((6, 5), {"label_smoothing": 0.3}, False, (-100,)),
    "weight_ignore_smoothing": ((6, 5), {"label_smoothing": 0.15, "ignore_index": 1}, True, (1,)),
    "spatial": ((2, 4, 3, 3), {"label_smoothing": 0.1}, True, (-100,)),
}


def _targets(shape, n_classes, ignore, seed):
    t = _ints(shape, n_classes, seed)
    if ignore:
        flat = t.reshape(-1)
        flat[::3] = ignore[0]  # every third target ignored
    return t


@pytest.mark.parametrize("case", list(CE_CASES))
def test_cross_entropy_and_nll_class_indices(case):
    shape, kwargs, use_weight, ignore = CE_CASES[case]
    n_classes = shape[1]
    a = _randn(shape, 3, 2.0)
    tgt = _targets(shape[:1] + shape[2:], n_classes, ignore, 4)
    w = _rand((n_classes,), 5, 0.2, 2.0) if use_weight else None
    tw = None if w is None else _t(w)
    cx = lm.Graph()
    x, t = _input(cx, a), _input(cx, tgt)
    weight = None if w is None else _input(cx, w)
    nll_kwargs = {k: v for k, v in kwargs.items() if k != "label_smoothing"}
    pairs = []
    for red in REDUCTIONS:
        pairs.append((f"ce {red}", F.cross_entropy(x, t, weight, reduction=red, **kwargs),
                      TF.cross_entropy(_t(a), _t(tgt), tw, reduction=red, **kwargs)))
        pairs.append((f"nll {red}", F.nll_loss(x.log_softmax(1), t, weight, reduction=red, **nll_kwargs),
                      TF.nll_loss(_t(a).log_softmax(1), _t(tgt), tw, reduction=red, **nll_kwargs)))
    # numpy targets and weights become inputs of the graph
    pairs.append(("ce numpy operands", F.cross_entropy(x, tgt, w, **kwargs), TF.cross_entropy(_t(a), _t(tgt), tw,
                                                                                             **kwargs)))
    pairs.append(("ce int32 target", F.cross_entropy(x, tgt.astype(np.int32), w, **kwargs),
                  TF.cross_entropy(_t(a), _t(tgt), tw, **kwargs)))
    _execute(cx, pairs)


def test_cross_entropy_all_ignored():
    """A batch whose targets are all ignored: mean is NaN (0/0), sum 0; spatial rows entirely ignored count 0."""
    a = _randn((3, 4), 6)
    tgt = np.full((3,), -100)
    sa = _randn((2, 3, 2, 4), 7)
    st = _ints((2, 2, 4), 3, 8)
    st[0] = 1  # the whole first image ignored (ignore_index=1) ...
    st[1, 1] = 1  # ... and one row of the second
    sw = _rand((3,), 9, 0.5, 1.5)
    cx = lm.Graph()
    x, sx = _input(cx, a), _input(cx, sa)
    pairs = []
    for red in REDUCTIONS:
        pairs.append((f"all ignored {red}", F.cross_entropy(x, tgt, reduction=red),
                      TF.cross_entropy(_t(a), _t(tgt), reduction=red)))
        pairs.append((f"all ignored smoothing {red}", F.cross_entropy(x, tgt, reduction=red, label_smoothing=0.2),
                      TF.cross_entropy(_t(a), _t(tgt), reduction=red, label_smoothing=0.2)))
        pairs.append((f"rows ignored {red}", F.cross_entropy(sx, st, sw, ignore_index=1, reduction=red,
                                                             label_smoothing=0.1),
                      TF.cross_entropy(_t(sa), _t(st), _t(sw), ignore_index=1, reduction=red, label_smoothing=0.1)))
        pairs.append((f"nll rows ignored {red}", F.nll_loss(sx, st, sw, ignore_index=1, reduction=red),
                      TF.nll_loss(_t(sa), _t(st), _t(sw), ignore_index=1, reduction=red)))
    _execute(cx, pairs)
    got = {label: ours.data() for label, ours, _ in pairs}
    assert np.isnan(got["all ignored mean"]) and got["all ignored sum"] == 0  # the mean of nothing


PROB_CASES = {
    "plain": ((5, 4), 0.0, False),
    "smoothing_weight": ((5, 4), 0.25, True),
    "spatial_smoothing": ((2, 3, 2, 2), 0.1, True),
}


@pytest.mark.parametrize("case", list(PROB_CASES))
def test_cross_entropy_class_probabilities(case):
    shape, ls, use_weight = PROB_CASES[case]
    a = _randn(shape, 10, 2.0)
    probs = torch.from_numpy(_randn(shape, 11)).softmax(1).numpy()
    w = _rand((shape[1],), 12, 0.2, 2.0) if use_weight else None
    tw = None if w is None else _t(w)
    cx = lm.Graph()
    x, p = _input(cx, a), _input(cx, probs)
    pairs = [(f"{red}", F.cross_entropy(x, p, w, reduction=red, label_smoothing=ls),
              TF.cross_entropy(_t(a), _t(probs), tw, reduction=red, label_smoothing=ls)) for red in REDUCTIONS]
    pairs.append(("numpy probabilities", F.cross_entropy(x, probs, w, label_smoothing=ls),
                  TF.cross_entropy(_t(a), _t(probs), tw, label_smoothing=ls)))
    _execute(cx, pairs)


def test_unbatched_and_symbolic_batch():
    """(C,) logits with a 0-d target; a symbolic batch dim (as the Trainer builds) with graph-input targets."""
    a = _randn((5,), 13)
    b = _randn((6, 5), 14)
    tb = _ints((6,), 5, 15)
    cx = lm.Graph()
    x = _input(cx, a)
    xb = cx.tensor(("batch", 5)).set(b)
    yb = cx.tensor(("batch",), lm.int64).set(tb)
    pairs = []
    for red in REDUCTIONS:
        pairs.append((f"unbatched {red}", F.cross_entropy(x, 3, reduction=red, label_smoothing=0.1),
                      TF.cross_entropy(_t(a), torch.tensor(3), reduction=red, label_smoothing=0.1)))
        pairs.append((f"nll unbatched {red}", F.nll_loss(x, np.int64(1), reduction=red),
                      TF.nll_loss(_t(a), torch.tensor(1), reduction=red)))
        pairs.append((f"symbolic {red}", F.cross_entropy(xb, yb, reduction=red),
                      TF.cross_entropy(_t(b), _t(tb), reduction=red)))
    pairs.append(("symbolic bce", F.binary_cross_entropy_with_logits(xb, (xb > 0).float()),
                  TF.binary_cross_entropy_with_logits(_t(b), (_t(b) > 0).float())))
    pairs.append(("symbolic kl batchmean", F.kl_div(xb.log_softmax(1), xb.softmax(1) * 0.5 + 0.1,
                                                   reduction="batchmean"),
                  TF.kl_div(_t(b).log_softmax(1), _t(b).softmax(1) * 0.5 + 0.1, reduction="batchmean")))
    _execute(cx, pairs)


# ---------------------------------------------------------------------------------------------------- binary / KL
def test_binary_cross_entropy():
    probs = _rand((4, 3), 16, 0.01, 0.99)
    probs[0, :] = [0.0, 1.0, 0.5]  # log(0) clamps to -100
    y = _rand((4, 3), 17)
    y[0, :] = [1.0, 0.0, 1.0]
    y[1, :] = [0.0, 1.0, 0.0]
    probs[1, :] = [1.0, 0.0, 0.0]
    w_full, w_row = _rand((4, 3), 18, 0.1, 2.0), _rand((3,), 19, 0.1, 2.0)
    cx = lm.Graph()
    x, t = _input(cx, probs), _input(cx, y)
    pairs = []
    for red in REDUCTIONS:
        for label, w in (("", None), ("w_full", w_full), ("w_row", w_row)):
            tw = None if w is None else _t(w)
            pairs.append((f"{red} {label}", F.binary_cross_entropy(x, t, w, reduction=red),
                          TF.binary_cross_entropy(_t(probs), _t(y), tw, reduction=red)))
    _execute(cx, pairs)
    assert np.all(np.isfinite(pairs[0][1].data()))


def test_binary_cross_entropy_with_logits():
    a = _randn((4, 3), 20, 3.0)
    y = _rand((4, 3), 21)
    y[0] = [0.0, 1.0, 1.0]
    w, pw = _rand((4, 1), 22, 0.1, 2.0), _rand((3,), 23, 0.2, 4.0)
    cx = lm.Graph()
    x, t = _input(cx, a), _input(cx, y)
    pairs = []
    for red in REDUCTIONS:
        for label, wt, pwt in (("", None, None), ("w", w, None), ("pw", None, pw), ("w pw", w, pw)):
            pairs.append((f"{red} {label}", F.binary_cross_entropy_with_logits(x, t, wt, reduction=red, pos_weight=pwt),
                          TF.binary_cross_entropy_with_logits(_t(a), _t(y), None if wt is None else _t(wt),
                                                              reduction=red,
                                                              pos_weight=None if pwt is None else _t(pwt))))
    _execute(cx, pairs)


def test_kl_div():
    a = torch.from_numpy(_randn((3, 4), 24)).log_softmax(1).numpy()
    q = torch.from_numpy(_randn((3, 4), 25)).softmax(1).numpy()
    q[0, 1] = 0.0  # xlogy(0, 0) = 0
    log_q = torch.from_numpy(_randn((3, 4), 26)).log_softmax(1).numpy()
    cx = lm.Graph()
    x, t, lt = _input(cx, a), _input(cx, q), _input(cx, log_q)
    pairs = []
    for red in REDUCTIONS + ("batchmean",):
        pairs.append((f"{red}", F.kl_div(x, t, reduction=red), TF.kl_div(_t(a), _t(q), reduction=red)))
        pairs.append((f"{red} log_target", F.kl_div(x, lt, reduction=red, log_target=True),
                      TF.kl_div(_t(a), _t(log_q), reduction=red, log_target=True)))
    _execute(cx, pairs)


# ---------------------------------------------------------------------------------------------------- modules
def test_modules_equal_functional_forms():
    logits, probs = _randn((6, 4), 27, 2.0), _rand((6, 4), 28, 0.05, 0.95)
    y = _rand((6, 4), 29)
    tgt = _targets((6,), 4, (2,), 30)
    w, pw = _rand((4,), 31, 0.2, 2.0), _rand((4,), 32, 0.5, 3.0)
    cx = lm.Graph()
    x, p, t, ti = _input(cx, logits), _input(cx, probs), _input(cx, y), _input(cx, tgt)
    lp = x.log_softmax(1)
    cases = [
        (nn.MSELoss(reduction="sum"), F.mse_loss(x, t, reduction="sum"), (x, t)),
        (nn.L1Loss(), F.l1_loss(x, t), (x, t)),
        (nn.HuberLoss(reduction="none", delta=0.7), F.huber_loss(x, t, reduction="none", delta=0.7), (x, t)),
        (nn.SmoothL1Loss(beta=0.3), F.smooth_l1_loss(x, t, beta=0.3), (x, t)),
        (nn.CrossEntropyLoss(w, ignore_index=2, label_smoothing=0.1),
         F.cross_entropy(x, ti, w, ignore_index=2, label_smoothing=0.1), (x, ti)),
        (nn.CrossEntropyLoss(torch.from_numpy(w)), F.cross_entropy(x, ti, w), (x, ti)),
        (nn.NLLLoss(w, reduction="sum"), F.nll_loss(lp, ti, w, reduction="sum"), (lp, ti)),
        (nn.BCELoss(w), F.binary_cross_entropy(p, t, w), (p, t)),
        (nn.BCEWithLogitsLoss(w, pos_weight=pw), F.binary_cross_entropy_with_logits(x, t, w, pos_weight=pw), (x, t)),
        (nn.KLDivLoss(reduction="batchmean", log_target=True),
         F.kl_div(lp, lp * 0.5, reduction="batchmean", log_target=True), (lp, lp * 0.5)),
    ]
    mods = [(m, m(*args).retrieve(), f.retrieve()) for m, f, args in cases]
    cx.execute()
    for m, a, b in mods:
        np.testing.assert_allclose(a.data(), b.data(), rtol=RTOL, atol=ATOL, err_msg=repr(m))
    # weights are buffers with PyTorch's names
    assert list(nn.CrossEntropyLoss(w).state_dict()) == list(torch.nn.CrossEntropyLoss(_t(w)).state_dict())
    assert list(nn.BCEWithLogitsLoss(w, pos_weight=pw).state_dict()) == ["weight", "pos_weight"]
    assert list(torch.nn.BCEWithLogitsLoss(_t(w), pos_weight=_t(pw)).state_dict()) == ["weight", "pos_weight"]
    assert list(nn.NLLLoss().state_dict()) == [] and nn.NLLLoss().weight is None
    m = nn.CrossEntropyLoss(w)
    m.load_state_dict({"weight": w * 2})
    np.testing.assert_array_equal(m.weight.data, w * 2)


# ---------------------------------------------------------------------------------------------------- stability
def test_extreme_logits_are_finite_and_match_torch():
    a = np.array([[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -1000.0, 1000.0, -1000.0],
                  [-1000.0, 1000.0, 1000.0, 500.0]], np.float32)
    tgt = np.array([1, 0, 3])
    probs = np.array([[0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.5], [0.25, 0.25, 0.25, 0.25]], np.float32)
    y = (np.arange(12).reshape(3, 4) % 2).astype(np.float32)
    w, pw = _rand((4,), 33, 0.5, 2.0), _rand((4,), 34, 0.5, 3.0)
    masked = a.copy()
    masked[0, 2] = -np.inf  # a masked-out (non-target) class
    cx = lm.Graph()
    x, xm = _input(cx, a), _input(cx, masked)
    pairs = []
    for red in REDUCTIONS:
        pairs += [
            (f"ce {red}", F.cross_entropy(x, tgt, w, reduction=red), TF.cross_entropy(_t(a), _t(tgt), _t(w),
                                                                                      reduction=red)),
            (f"ce smoothing {red}", F.cross_entropy(x, tgt, reduction=red, label_smoothing=0.2),
             TF.cross_entropy(_t(a), _t(tgt), reduction=red, label_smoothing=0.2)),
            (f"ce probs {red}", F.cross_entropy(x, probs, reduction=red, label_smoothing=0.1),
             TF.cross_entropy(_t(a), _t(probs), reduction=red, label_smoothing=0.1)),
            (f"nll {red}", F.nll_loss(x.log_softmax(1), tgt, reduction=red),
             TF.nll_loss(_t(a).log_softmax(1), _t(tgt), reduction=red)),
            (f"bce logits {red}", F.binary_cross_entropy_with_logits(x, y, reduction=red),
             TF.binary_cross_entropy_with_logits(_t(a), _t(y), reduction=red)),
            (f"bce logits pos_weight {red}", F.binary_cross_entropy_with_logits(x, y, reduction=red, pos_weight=pw),
             TF.binary_cross_entropy_with_logits(_t(a), _t(y), reduction=red, pos_weight=_t(pw))),
            (f"bce of sigmoid {red}", F.binary_cross_entropy(x.sigmoid(), y, reduction=red),
             TF.binary_cross_entropy(_t(a).sigmoid(), _t(y), reduction=red)),
            (f"ce -inf logit {red}", F.cross_entropy(xm, tgt, reduction=red),
             TF.cross_entropy(_t(masked), _t(tgt), reduction=red)),
            (f"kl log_target {red}", F.kl_div(x.log_softmax(1), x.log_softmax(1).flip(0), reduction=red,
                                              log_target=True),
             TF.kl_div(_t(a).log_softmax(1), _t(a).log_softmax(1).flip(0), reduction=red, log_target=True)),
        ]
    _execute(cx, pairs)
    for label, ours, _ in pairs:
        assert np.all(np.isfinite(ours.data())), label


# ---------------------------------------------------------------------------------------------------- errors
def test_errors():
    cx = lm.Graph()
    x = cx.tensor((4, 3))
    ti = cx.tensor((4,), lm.int64)
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        F.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, ti, reduction="batchmean")
    with pytest.raises(ValueError, match="reduction"):
        nn.KLDivLoss(reduction="max")(x, x)
    with pytest.raises(GraphError, match=r"\(4, 2\).*\(4, 3\)"):
        F.mse_loss(x, cx.tensor((4, 2)))
    with pytest.raises(GraphError, match=r"\(3,\).*\(4, 3\)"):
        F.l1_loss(x, np.zeros(3, np.float32))
    with pytest.raises(GraphError, match=r"\(5,\).*\(4, 3\)"):
        F.cross_entropy(x, cx.tensor((5,), lm.int64))
    with pytest.raises(GraphError, match="float.*must have the input's shape"):
        F.cross_entropy(x, cx.tensor((4,)))
    with pytest.raises(GraphError, match="class indices"):
        F.nll_loss(x, cx.tensor((4,)))
    with pytest.raises(GraphError, match="class indices"):
        F.nll_loss(x, cx.tensor((4, 3)))
    with pytest.raises(GraphError, match="one value per class"):
        F.cross_entropy(x, ti, weight=np.ones(4, np.float32))
    with pytest.raises(GraphError, match="class dimension"):
        F.cross_entropy(cx.tensor(()), 0)
    with pytest.raises(ValueError, match="ignore_index is not supported"):
        F.cross_entropy(x, cx.tensor((4, 3)), ignore_index=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, ti, label_smoothing=1.5)
    with pytest.raises(ValueError, match="same size"):
        F.mse_loss(x, x, weight=np.ones(3, np.float32))
    with pytest.raises(GraphError, match="does not broadcast"):
        F.binary_cross_entropy_with_logits(x, x, pos_weight=np.ones(4, np.float32))
    with pytest.raises(GraphError, match="does not broadcast"):
        F.binary_cross_entropy(x, x, weight=np.ones((2, 4, 3), np.float32))
    with pytest.raises(ValueError, match="delta"):
        F.huber_loss(x, x, delta=0.0)
    with pytest.raises(ValueError, match="beta"):
        nn.SmoothL1Loss(beta=-1.0)(x, x)
    with pytest.raises(TypeError, match="GraphTensor"):
        F.mse_loss(np.zeros((4, 3)), x)
    with pytest.raises(GraphError, match="different graph"):
        F.mse_loss(x, lm.Graph().tensor((4, 3)))
    with pytest.raises(GraphError, match="floating"):
        F.binary_cross_entropy(cx.tensor((4, 3), lm.bool_), x)


def test_gradients_at_extremes_are_finite():
    """The autograd pass differentiates the losses' primitive ops: gradients at +-1000 logits (and a -inf
    non-target logit) match torch's; BCE at probabilities of exactly 0 and 1 has a finite gradient."""
    from luminal.training.autograd import grad

    a = np.array([[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -np.inf, 1000.0, -1000.0],
                  [-1000.0, 1000.0, 1000.0, 500.0]], np.float32)
    tgt = np.array([1, 0, 2])
    y = (np.arange(12).reshape(3, 4) % 2).astype(np.float32)
    w, pw = _rand((4,), 35, 0.5, 2.0), _rand((4,), 36, 0.5, 3.0)
    finite = np.where(np.isfinite(a), a, 0.0).astype(np.float32)
    p = np.array([[0.0, 1.0, 0.5, 1e-30], [1.0, 0.0, 0.25, 1.0 - 1e-7]], np.float32)
    yp = np.array([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]], np.float32)
    cx = lm.Graph()
    x, xf, xp = _input(cx, a), _input(cx, finite), _input(cx, p)
    losses = [(F.cross_entropy(x, tgt, w), x),  # (label smoothing would make the -inf logit's loss infinite)
              (F.cross_entropy(xf, tgt, w, ignore_index=2, label_smoothing=0.1), xf),
              (F.binary_cross_entropy_with_logits(xf, y, pos_weight=pw), xf),
              (F.binary_cross_entropy(xp, yp, reduction="sum"), xp)]
    grads = [grad(loss, [inp])[0].retrieve() for loss, inp in losses]
    cx.execute()
    refs = [lambda t: TF.cross_entropy(t, _t(tgt), _t(w)),
            lambda t: TF.cross_entropy(t, _t(tgt), _t(w), ignore_index=2, label_smoothing=0.1),
            lambda t: TF.binary_cross_entropy_with_logits(t, _t(y), pos_weight=_t(pw))]
    for g, ref, data in zip(grads, refs, (a, finite, finite)):
        t = _t(data).requires_grad_()
        ref(t).backward()
        assert np.all(np.isfinite(g.data()))
        np.testing.assert_allclose(g.data(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    g = grads[3].data()
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g[:, 2:], [[-2.0, 1.0], [4 / 3, -1.0]], rtol=RTOL)  # -y/p + (1-y)/(1-p)


def test_gradients_at_zero_match_torch():
    """Kinks at 0: BCE-with-logits at logit 0 (with and without pos_weight) and L1 / smooth-L1(beta=0) at a zero
    residual take PyTorch's derivative (sigmoid(0) - y scaled; sign(0) = 0)."""
    from luminal.training.autograd import grad

    a = np.array([[0.0, 0.0, 1.5, -2.0], [0.0, 3.0, 0.0, -0.5]], np.float32)
    y = np.array([[0.0, 1.0, 1.0, 0.0], [1.0, 3.0, 0.0, 0.5]], np.float32)
    pw = np.array([2.0, 0.5, 1.0, 3.0], np.float32)
    cases = [(lambda x: F.binary_cross_entropy_with_logits(x, y), lambda t: TF.binary_cross_entropy_with_logits(t, _t(y))),
             (lambda x: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw),
              lambda t: TF.binary_cross_entropy_with_logits(t, _t(y), pos_weight=_t(pw))),
             (lambda x: F.l1_loss(x, y), lambda t: TF.l1_loss(t, _t(y))),
             (lambda x: F.smooth_l1_loss(x, y, beta=0.0), lambda t: TF.smooth_l1_loss(t, _t(y), beta=0.0)),
             (lambda x: F.huber_loss(x, y), lambda t: TF.huber_loss(t, _t(y)))]
    cx = lm.Graph()
    x = _input(cx, a)
    grads = [grad(ours(x), [x])[0].retrieve() for ours, _ in cases]
    cx.execute()
    for g, (_, theirs) in zip(grads, cases):
        t = _t(a.copy()).requires_grad_()
        theirs(t).backward()
        np.testing.assert_allclose(g.data(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
