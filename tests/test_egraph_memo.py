"""The on-disk memo of equality-saturation results (luminal/compiler/egraph/memo.py).

Oracle: the same compile with the memo off (``LUMINAL_EGRAPH_MEMO=0``) — a memoized compile must give the
byte-identical C program, the same report (rules fired, costs, each change's rules) and results equal to numpy's.
"""

from __future__ import annotations

import glob
import os
import warnings

import numpy as np
import pytest

import luminal as lm
from luminal.compiler import EqualitySaturation, GenericCompiler, explain
from luminal.compiler.egraph import memo


def _model(seed: int = 0):
    """A small graph the rules change (copies, x + 0, max(x + c), exp2/log2), with its numpy result."""
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal((5, 7)).astype(np.float32)
    wv = rng.standard_normal((7, 3)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor((5, 7), name="x").set(xv)
    w = cx.tensor((7, 3), name="w").set(wv)
    h = (x + 0.0).permute(1, 0).contiguous().permute(1, 0) * 1.0
    y = (h @ w).softmax(-1).retrieve()
    z = ((x * 1.0 + 2.0).max(1)).retrieve()
    e = np.exp(xv @ wv - (xv @ wv).max(-1, keepdims=True))
    return cx, (y, z), (e / e.sum(-1, keepdims=True), (xv + 2.0).max(1))


def _compile(monkeypatch, folder, memo_on: bool, passes=None):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(folder))
    monkeypatch.setenv("LUMINAL_EGRAPH_MEMO", "1" if memo_on else "0")
    cx, outs, want = _model()
    sat = passes or EqualitySaturation()
    cx.compile(sat, list(outs), device="cpu")
    cx.execute()
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.data(), w, rtol=1e-5, atol=1e-6)
    return cx, getattr(sat, "report", None)


def _entries(folder):
    return sorted(glob.glob(os.path.join(str(folder), "egraph", "*.pkl")))


def test_memoized_compile_equals_a_fresh_one(tmp_path, monkeypatch):
    cx0, rep0 = _compile(monkeypatch, tmp_path / "off", memo_on=False)
    assert _entries(tmp_path / "off") == []  # the memo off writes nothing
    hits = memo.MemoStats.hits
    cx1, rep1 = _compile(monkeypatch, tmp_path / "on", memo_on=True)
    assert not rep1.memoized and len(_entries(tmp_path / "on")) == 1
    cx2, rep2 = _compile(monkeypatch, tmp_path / "on", memo_on=True)
    assert rep2.memoized and memo.MemoStats.hits == hits + 1
    assert rep0.changes, "the model must give the rules something to change"
    for rep in (rep1, rep2):
        assert rep.rules_fired == rep0.rules_fired and rep.stop_reason == rep0.stop_reason
        assert rep.cost_before == rep0.cost_before and rep.cost_after == rep0.cost_after
        assert [(c["node"], c["new_op"], c["rules"]) for c in rep.changes] == \
            [(c["node"], c["new_op"], c["rules"]) for c in rep0.changes]
    assert cx2.runtime.source == cx0.runtime.source == cx1.runtime.source
    assert explain(cx2) == explain(cx0)


def test_default_pipeline_uses_the_memo(tmp_path, monkeypatch):
    _compile(monkeypatch, tmp_path, memo_on=True, passes=GenericCompiler())
    hits = memo.MemoStats.hits
    _compile(monkeypatch, tmp_path, memo_on=True, passes=GenericCompiler())
    assert memo.MemoStats.hits == hits + 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_entry_is_rejected_and_rewritten(tmp_path, monkeypatch, damage):
    cx0, rep0 = _compile(monkeypatch, tmp_path, memo_on=True)
    (path,) = _entries(tmp_path)
    blob = open(path, "rb").read()
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip":
        blob = blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:]
    elif damage == "empty":
        blob = b""
    else:
        blob = b"0" * 64 + b"not a pickle"
    with open(path, "wb") as f:
        f.write(blob)
    rejected = memo.MemoStats.rejected
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cx1, rep1 = _compile(monkeypatch, tmp_path, memo_on=True)
    assert not rep1.memoized  # saturated afresh, never trusted
    assert memo.MemoStats.rejected == rejected + 1
    assert any("does not verify" in str(w.message) for w in caught)
    assert cx1.runtime.source == cx0.runtime.source
    _, rep2 = _compile(monkeypatch, tmp_path, memo_on=True)  # the rewritten entry verifies
    assert rep2.memoized


def test_settings_and_rules_are_part_of_the_key(tmp_path, monkeypatch):
    _compile(monkeypatch, tmp_path, memo_on=True)
    _, rep = _compile(monkeypatch, tmp_path, memo_on=True,
                      passes=EqualitySaturation(rulesets=("algebra", "reductions", "layout")))
    assert not rep.memoized and len(_entries(tmp_path)) == 2
    _, rep = _compile(monkeypatch, tmp_path, memo_on=True, passes=EqualitySaturation(max_iterations=1))
    assert not rep.memoized and len(_entries(tmp_path)) == 3


def test_a_different_graph_misses(tmp_path, monkeypatch):
    _compile(monkeypatch, tmp_path, memo_on=True)
    cx = lm.Graph()
    x = cx.tensor((5, 7), name="x").set(np.ones((5, 7), np.float32))
    y = ((x + 0.0) * 3.0).sum(1).retrieve()  # same node count class, other ops and constants
    sat = EqualitySaturation()
    cx.compile(sat, y, device="cpu")
    cx.execute()
    assert not sat.report.memoized
    np.testing.assert_allclose(y.data(), np.full(5, 21.0, np.float32))


def test_a_time_limited_run_is_not_memoized(tmp_path, monkeypatch):
    # where a run stopped by its clock stops depends on the machine, so its result is not a function of the input
    _, rep = _compile(monkeypatch, tmp_path, memo_on=True, passes=EqualitySaturation(max_seconds=0.0))
    assert rep.stop_reason.startswith("time limit")
    assert _entries(tmp_path) == []


def test_a_custom_cost_function_is_not_memoized(tmp_path, monkeypatch):
    from luminal.compiler.egraph.extract import default_cost

    _compile(monkeypatch, tmp_path, memo_on=True, passes=EqualitySaturation(op_cost=default_cost))
    assert _entries(tmp_path) == []
