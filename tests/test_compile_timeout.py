"""C compiles run under a time limit (luminal.runtime.build.compile_timeout): LUMINAL_CC_TIMEOUT, and the searches'
budgets through compile_deadline. Oracles: the exception and its message, the files left in the cache folder,
numpy's results of the programs that do compile; the searches' own records of what they dropped."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import luminal as lm
import luminal.nn.functional as F
from luminal.runtime import build, program_search, prologue_search
from luminal.runtime.cpu import find_compiler

pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.usefixtures("fresh_cache")]


def small_graph(seed=0):
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    a, b = cx.tensor((24, 40)), cx.tensor((40, 16))
    out = ((a @ b).relu() * 2.0 + 1.0).retrieve()
    av, bv = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 16)).astype(np.float32)
    a.set(av)
    b.set(bv)
    return cx, out, np.maximum(av.astype(np.float64) @ bv, 0) * 2 + 1


def leftovers() -> list[str]:
    folder = os.environ["LUMINAL_CACHE_DIR"]
    return sorted(f for f in os.listdir(folder) if f.startswith("luminal_")) if os.path.isdir(folder) else []


@pytest.mark.parametrize("value", ["soon", "-3", "inf", "nan"])
def test_a_bad_limit_is_rejected(monkeypatch, value):
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"LUMINAL_CC_TIMEOUT='{value}': expected a positive number of seconds"):
        build.compile_timeout()


def test_the_limit_and_nested_deadlines(monkeypatch):
    monkeypatch.delenv("LUMINAL_CC_TIMEOUT", raising=False)
    assert build.compile_timeout() == build.CC_TIMEOUT_S
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", "0")
    assert build.compile_timeout() is None  # 0: no limit
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", "50")
    with build.compile_deadline(20):
        assert 19 < build.compile_timeout() <= 20
        with build.compile_deadline(100):  # an inner, later deadline does not extend the outer one
            assert build.compile_timeout() <= 20
        with build.compile_deadline(5):
            assert build.compile_timeout() <= 5
    assert build.compile_timeout() == 50.0


@pytest.mark.parametrize("units", [1, 2])
def test_a_compile_past_the_limit_is_stopped_and_leaves_nothing(monkeypatch, units):
    if units == 2:  # (the source split into two translation units compiled concurrently, then linked)
        monkeypatch.setattr(build, "UNIT_BYTES", 2000)
        monkeypatch.setenv("LUMINAL_CC_JOBS", "2")
    monkeypatch.setenv("LUMINAL_CC_TIMEOUT", "0.02")
    cx, out, ref = small_graph()
    t0 = time.perf_counter()
    with pytest.raises(build.CompileTimeout, match=r"did not finish within 0\.02 s and was stopped "
                                                   r"\(LUMINAL_CC_TIMEOUT sets the limit"):
        cx.compile(device="cpu")
    assert time.perf_counter() - t0 < 30
    assert not [f for f in leftovers() if not f.endswith(".lock")], leftovers()  # no source, object or library
    monkeypatch.delenv("LUMINAL_CC_TIMEOUT")
    cx2, out2, ref2 = small_graph()
    cx2.compile(device="cpu")
    cx2.execute()
    np.testing.assert_allclose(out2.data(), ref2, rtol=1e-5, atol=1e-5)


def test_a_program_search_candidate_past_the_budget_is_dropped():
    cx, out, ref = small_graph(1)
    base = program_search.detached_copy(cx)
    retrieved = {nid: (cx.nodes[nid].dims, cx.nodes[nid].dtype) for nid in cx.to_retrieve}
    expected = {nid: ref.astype(np.float32) for nid in retrieved}
    result = program_search.ProgramSearchResult()
    with pytest.warns(UserWarning, match="candidate 1 failed to build or run"):
        g = program_search._build(base, None, lambda g, c: None, (), retrieved, expected, 1, result, limit=0.01)
    assert g is None and "CompileTimeout" in result.rejected[1] and "did not finish" in result.rejected[1]
    g = program_search._build(base, None, lambda g, c: None, (), retrieved, expected, 0, result)  # no limit
    assert g is not None and 0 not in result.rejected


def test_an_operand_fusion_measurement_past_the_budget_takes_the_default(monkeypatch):
    def too_slow(*args, **kwargs):
        raise build.CompileTimeout("C compilation of luminal_x.so did not finish within 1 s and was stopped")

    monkeypatch.setattr(prologue_search, "measure_prologue", too_slow)
    rng = np.random.default_rng(2)
    xv, wv = rng.standard_normal((2, 8, 12, 12)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    cx = lm.Graph()
    x, w = cx.tensor(xv.shape).set(xv), cx.tensor(wv.shape).set(wv)
    y = F.conv2d(x, w, padding=1).retrieve()
    with pytest.warns(UserWarning, match="prologue search: C compilation .* did not finish .* takes the unmeasured "
                                         "default"):
        cx.compile(device="cpu", search="quick", budget_s=2)
    assert not cx.runtime.prologue_timings
    cx.execute()
    import torch
    want = torch.nn.functional.conv2d(torch.from_numpy(xv), torch.from_numpy(wv), padding=1).numpy()
    np.testing.assert_allclose(y.data(), want, rtol=1e-4, atol=1e-4)
