"""Alternatives a front end offers to the e-graph (luminal/compiler/egraph/alternatives.py).

A convolution's input gradient is built as a convolution of the upstream gradient (where the direct kernel takes
it) and offers its col2im form; a measuring compile (``search="quick"``) unions the two in the e-graph and the
program search times both. Oracles: the reference interpreter (both forms of every offered kind, float64), torch
through the graphs' results, the graph compiled without a search (the default builds nothing). The program
search's timing is replaced by a fake clock that depends on the candidate's structure, as in
test_program_search.py, so the tests decide which program is "fastest".
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import luminal as lm
import luminal.nn.functional as F
from luminal import ops
from luminal.compiler.egraph import EqualitySaturation
from luminal.compiler.egraph import alternatives as ALT
from luminal.runtime import program_search as PS
from luminal.training import grad

pytestmark = pytest.mark.usefixtures("fresh_cache")  # (a fresh tuning cache per test: tests/conftest.py)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_CASES = [  # (input shape, weight shape, conv kwargs): each takes the gradient rule (the direct kernel's rows)
    ((2, 4, 6, 32), (8, 4, 3, 3), dict(padding=1)),
    ((2, 8, 5, 32), (8, 2, 3, 3), dict(padding=(1, 2), dilation=(1, 2), groups=4)),
    ((3, 3, 48), (5, 3, 5), dict(padding=2)),
    ((1, 2, 4, 4, 16), (4, 2, 3, 3, 3), dict(padding=1)),
]


def _conv_graph(xs, ws, kw, dtype="float32", seed=0, batch=None, maxes=False):
    """A convolution and both its gradients; ``maxes``: also ``max(a * 3)`` and ``max(b * 5)`` over rows, which
    give the e-graph another kind of alternative with two members (``max(x * c) -> max(x) * c``)."""
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    if maxes:
        for c in (3.0, 5.0):
            (cx.tensor((6, 40)).set(rng.standard_normal((6, 40)).astype(dtype)) * c).max(1).retrieve()
    x = cx.tensor((batch,) + tuple(xs[1:]) if batch else xs, dtype).set(rng.standard_normal(xs).astype(dtype))
    w = cx.tensor(ws, dtype).set((rng.standard_normal(ws) * 0.3).astype(dtype))
    y = CONV[len(ws) - 2](x, w, **kw)
    gs = grad((y * y).sum() * 0.5, [x, w])
    for t in [y] + gs:
        t.retrieve()
    return cx, [y] + gs


def _check_conv_input_grad(xs, ws, kw):
    """Both forms of every offered conv-input-grad alternative, float64, in the reference interpreter."""
    cx, _ = _conv_graph(xs, ws, kw, "float64")
    assert ALT.pending(cx), "the gradient rule offered no alternative"
    built = ALT.build_offered(cx)
    assert [k for _, _, k in built] == ["conv-input-grad"]
    pairs = []
    for a, b, _ in built:
        ta = lm.GraphTensor(cx, a, lm.ShapeTracker.contiguous_of(tuple(cx.nodes[a].dims)), cx.nodes[a].dtype)
        tb = lm.GraphTensor(cx, b, lm.ShapeTracker.contiguous_of(tuple(cx.nodes[b].dims)), cx.nodes[b].dtype)
        pairs.append((ta.retrieve(), tb.retrieve()))
    cx.execute()
    for ta, tb in pairs:
        want = np.asarray(ta.data()).reshape(-1)
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(np.asarray(tb.data()).reshape(-1), want, rtol=1e-10, atol=1e-12)


# every kind a front end may offer, with its check (a kind without one fails test_every_kind_is_checked)
CHECKS = {"conv-input-grad": lambda: [_check_conv_input_grad(*c) for c in CONV_CASES]}


def test_every_kind_is_checked():
    assert set(CHECKS) == set(ALT.KINDS)


@pytest.mark.parametrize("kind", sorted(ALT.KINDS))
def test_both_forms_of_each_kind_are_equal(kind):
    CHECKS[kind]()


def _window_copies(g):
    """Materialized windows (im2col matrices: 2 x kernel-rank + 3 dims for a 2-D convolution): one per layer in
    the col2im form of the input gradient, two in the convolution form."""
    return sum(1 for n in g.nodes.values() if isinstance(n.op, ops.Contiguous) and len(n.dims) >= 7)


def test_the_default_compile_builds_nothing(monkeypatch):
    monkeypatch.setattr(PS, "_round", lambda g: pytest.fail("search='off' must not measure"))
    cx, outs = _conv_graph(*CONV_CASES[0])
    plain, plain_outs = _conv_graph(*CONV_CASES[0])
    plain.__dict__.pop("alternatives")
    cx.compile(device="cpu")
    plain.compile(device="cpu")
    assert not ALT.pending(cx) and not ALT.offered(cx)
    assert cx.runtime.source == plain.runtime.source and len(cx.nodes) == len(plain.nodes)


def test_the_search_measures_the_alternative_and_the_cache_keeps_it(monkeypatch):
    ref, ref_outs = _conv_graph(*CONV_CASES[0])
    ref.execute()
    want = [np.asarray(t.data()).copy() for t in ref_outs]
    plain, _ = _conv_graph(*CONV_CASES[0])
    plain.compile(device="cpu")
    before = _window_copies(plain)  # the default program: the forward's window copy and the convolution form's
    # the fake clock: fewer window copies is faster, so the col2im form (not the cost model's choice) wins
    monkeypatch.setattr(PS, "_round", lambda g: 1e-3 * (1 + _window_copies(g)))
    cx, outs = _conv_graph(*CONV_CASES[0])
    cx.compile(device="cpu", search="quick")
    rep = cx.egraph_reports[-1]
    assert rep.program_choice == "measured" and not rep.program_search.rejected
    assert "offered conv-input-grad" in rep.program_search.labels.values()
    assert "offered conv-input-grad" in rep.program_search.labels[rep.program_search.winner]
    assert _window_copies(cx) == before - 1 and not ALT.offered(cx)
    cx.execute()
    for t, w in zip(outs, want):
        np.testing.assert_allclose(t.data(), w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
    # search="off" later: the alternatives are built again (the search recorded that they matter) and the cached
    # winner is rebuilt, without timing
    monkeypatch.setattr(PS, "_round", lambda g: pytest.fail("search='off' must not measure"))
    cx2, outs2 = _conv_graph(*CONV_CASES[0])
    cx2.compile(device="cpu")
    assert cx2.egraph_reports[-1].program_choice == "cached" and _window_copies(cx2) == before - 1
    cx2.execute()
    for t, w in zip(outs2, want):
        np.testing.assert_allclose(t.data(), w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


def test_the_cost_model_keeps_the_front_ends_choice():
    ref, ref_outs = _conv_graph(*CONV_CASES[1], maxes=True)
    ref.execute()
    plain, _ = _conv_graph(*CONV_CASES[1])
    plain.compile(device="cpu")
    before = _window_copies(plain)  # the default program: the forward's window copy and the convolution form's
    for i in (0, 1):  # the cost model's choice, then the first alternative candidate
        cx, outs = _conv_graph(*CONV_CASES[1], maxes=True)
        ALT.build_offered(cx)
        p = EqualitySaturation()
        cands = p.candidates(cx, 4)
        assert len(cands) >= 2
        p.apply(cx, cands[i], outs)
        # extraction by cost keeps the convolution form (the col2im form's nodes are gone); the first other
        # candidate is the offered col2im form (no window copy of the upstream gradient), before the other kind
        assert _window_copies(cx) == before - i
        cx.execute()
        for t, r in zip(outs, ref_outs):
            want = np.asarray(r.data())
            np.testing.assert_allclose(t.data(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_symbolic_batch_offers_too():
    cx, outs = _conv_graph(*CONV_CASES[0], batch="batch")
    assert ALT.pending(cx)
    built = ALT.build_offered(cx)
    assert len(built) == 1
    pairs = [tuple(lm.GraphTensor(cx, n, lm.ShapeTracker.contiguous_of(tuple(cx.nodes[n].dims)),
                                  cx.nodes[n].dtype).retrieve() for n in pair[:2]) for pair in built]
    cx.execute()
    for ta, tb in pairs:  # (both buffers row-major: the e-graph's e-classes are buffers)
        want = np.asarray(ta.data()).reshape(-1)
        np.testing.assert_allclose(np.asarray(tb.data()).reshape(-1), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_offer_rejects_bad_input():
    cx, (y, gx, gw) = _conv_graph(*CONV_CASES[0])
    with pytest.raises(ValueError, match="unknown alternative kind"):
        ALT.offer(y, "no-such-kind", F.relu, y)
    with pytest.raises(ValueError, match="whole row-major"):
        ALT.offer(y.permute([0, 1, 3, 2]), "conv-input-grad", F.relu, y)


def test_a_graph_with_offered_alternatives_pickles():
    cx, outs = _conv_graph(*CONV_CASES[0])
    back = pickle.loads(pickle.dumps(cx))
    assert len(ALT.pending(back)) == 1
    back.compile(device="cpu", search="off")
    back.execute()
