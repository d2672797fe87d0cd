"""A row group's intermediates held in a per-thread row scratch (luminal.codegen.groups.row_locals,
``lm_row_scratch`` in the C helpers).

Oracles: numpy float64 on the same inputs, and the same graph compiled with ``LUMINAL_ROW_LOCAL=0`` (the arena
buffers: the same operations in the same order, so bit-equal results).
"""

import numpy as np
import pytest

import luminal as lm


def _compile(build, shapes, local: bool, monkeypatch):
    monkeypatch.setenv("LUMINAL_ROW_LOCAL", "1" if local else "0")
    cx = lm.Graph()
    xs = [cx.tensor(s) for s in shapes]
    outs = [o.retrieve() for o in build(*xs)]
    cx.compile(device="cpu")
    return cx, xs, outs


def _scores(x, b):
    return x * 0.125 + b  # attention's scores: scaled, plus a bias broadcast over the leading axis


def _softmax(x, b):
    """Attention's softmax: its exponentials are a row kernel of their own (a local)."""
    return [_scores(x, b).softmax(-1)]


def _exp_read_outside(x, b):
    """The exponentials are read again after the group (a sum over the leading axis): they stay in the arena."""
    s = _scores(x, b)
    e = (s - s.max(-1, keepdim=True)).exp()
    return [e / e.sum(-1, keepdim=True), e.sum(0)]


def _np_scores(x, b):
    return x * 0.125 + b


def _np_softmax(x, b):
    s = _np_scores(x, b)
    e = np.exp(s - s.max(-1, keepdims=True))
    return [e / e.sum(-1, keepdims=True)]


def _np_exp_outside(x, b):
    s = _np_scores(x, b)
    e = np.exp(s - s.max(-1, keepdims=True))
    return [e / e.sum(-1, keepdims=True), e.sum(0)]


CASES = {"softmax": (_softmax, _np_softmax, 1), "exp_read_outside": (_exp_read_outside, _np_exp_outside, 0)}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape", [(3, 8, 2048), (2, 5, 1000)])
def test_row_group_intermediates_in_row_scratch(case, shape, monkeypatch):
    build, ref, locals_expected = CASES[case]
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal(shape).astype(np.float32) * 16
    b_np = np.where(rng.random(shape[1:]) < 0.2, -np.inf, rng.standard_normal(shape[1:])).astype(np.float32)
    b_np[:, 0] = 0  # (every row keeps a score)
    want = ref(x_np.astype(np.float64), b_np.astype(np.float64))
    got = {}
    for local in (True, False):
        cx, (x, b), outs = _compile(build, (shape, shape[1:]), local, monkeypatch)
        scratch = cx.runtime.source.count("lm_row_scratch(") - 1  # (the helper's own definition)
        assert scratch == (locals_expected if local else 0), (case, local, scratch)
        x.set(x_np)
        b.set(b_np)
        cx.execute()
        got[local] = [o.data().reshape(r.shape) for o, r in zip(outs, want)]
    for g, r in zip(got[True], want):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-6)
    for a, b in zip(got[True], got[False]):
        assert np.array_equal(a, b)


def test_symbolic_row_length_below_and_above_the_scratch_minimum():
    """A symbolic row length: rows shorter than LM_ROW_MIN bytes use the arena, longer ones the scratch (grown
    when a longer row comes); every binding against numpy."""
    cx = lm.Graph()
    x, b = cx.tensor(("h", "n", "d")), cx.tensor(("n", "d"))
    (y,) = [o.retrieve() for o in _softmax(x, b)]
    cx.compile(device="cpu")
    assert cx.runtime.source.count("lm_row_scratch(") == 2
    rng = np.random.default_rng(5)
    for h, n, d in [(2, 8, 100), (3, 9, 3000), (2, 8, 255), (1, 12, 7000), (2, 10, 300)]:
        x_np = rng.standard_normal((h, n, d)).astype(np.float32) * 3
        b_np = rng.standard_normal((n, d)).astype(np.float32)
        x.set(x_np)
        b.set(b_np)
        cx.execute()
        want = _np_softmax(x_np.astype(np.float64), b_np.astype(np.float64))[0]
        np.testing.assert_allclose(y.data().reshape(h, n, d), want, rtol=2e-5, atol=2e-7)
