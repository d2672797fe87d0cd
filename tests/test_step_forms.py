"""Winograd forms checked in the compiled step (luminal.runtime.step_forms), with ``search="full"``.

The kernels' times are made up (the real per-kernel timers run, then a fixed table replaces their readings) so the
outcome does not depend on the machine's load; everything else is real: the builds of the whole step in each form,
their check against the planned build, the rewritten plan, the tuning-cache entry. Oracles: PyTorch float64 for
the convolution's output and both gradients (tolerance 1e-4 of the largest value, float32); the plan each build
runs (``direct_plan``'s Winograd tile) for what was switched.
"""

import numpy as np
import pytest

pytest.importorskip("torch")

from luminal.codegen.gemm_direct import direct_plan  # noqa: E402
from luminal.codegen.kernel import GemmKernel  # noqa: E402
from luminal.runtime import program_search, prologue_search, step_forms, tuning  # noqa: E402
from test_implicit_gemm import WIDE_CASE, _close, _conv_graph, _torch  # noqa: E402


def _compile(monkeypatch, search):
    # (a budget every copy's measurement fits in, short measurements: each search decides every copy)
    monkeypatch.setenv("LUMINAL_PROLOGUE", "auto")
    monkeypatch.setattr(prologue_search, "MEASURE_S", {"quick": 0.1, "full": 0.1})
    xs, ws, kw = WIDE_CASE
    cx, arrays, outs = _conv_graph(xs, ws, "float32", kw)
    cx.compile(device="cpu", search=search, budget_s=60)
    cx.execute()
    return cx, arrays, [t.data() for t in outs]


def _tiles(prog) -> dict:
    """Kernel output -> the Winograd tile its plan runs (forward/input gradient or weight gradient), else None."""
    out = {}
    for k in prog.kernels:
        p = direct_plan(prog, k) if isinstance(k, GemmKernel) else None
        out[k.out] = p.wino["E"] if p is not None and p.mode in ("wino", "winodw") else None
    return out


def _fast_in(monkeypatch, form):
    """Readings: every kernel that carries ``GemmKernel.wino == form`` takes 1 ms, every other 2 ms."""
    real = step_forms.group_seconds
    monkeypatch.setattr(step_forms, "STEP_S", 0.0)
    monkeypatch.setattr(step_forms, "MIN_ROUNDS", 2)

    def readings(g):
        spent = real(g)
        forms = {k.out: getattr(k, "wino", None) for k in g.runtime.program.kernels}
        return {o: (1e-3 if forms.get(o) == form else 2e-3) for o in spent}
    monkeypatch.setattr(step_forms, "group_seconds", readings)


def test_step_check_switches_readers_to_the_form_fastest_in_the_step(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    _fast_in(monkeypatch, 2)
    cx, arrays, got = _compile(monkeypatch, "full")
    rt = cx.runtime
    res = rt.step_forms
    assert res is not None and 2 in res.forms, res
    assert res.changed and all(new == 2 for _, new in res.changed.values()), res.changed
    tiles = _tiles(rt.program)
    assert all(tiles[o] == 2 for o in res.changed), tiles  # (the rules' plan runs F(4x4) on these layers)
    assert any(f == 2 or (isinstance(f, tuple) and 2 in f) for f in rt.wino_buffers.values()), rt.wino_buffers
    for g, e in zip(got, _torch(*arrays, WIDE_CASE[2])):
        _close(g, e, "float32")
    stored = [e for k, e in tuning.entries().items() if k.startswith("prologue/") and e.get("step")]
    assert stored and any(e["choice"] in ("wino-f2", "wino-mix") for e in stored), stored
    # "off" in a new graph (real timers back) runs the checked forms; "full" does not check them again
    monkeypatch.undo()
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    cx2, _, got2 = _compile(monkeypatch, "off")
    assert cx2.runtime.wino_buffers == rt.wino_buffers and _tiles(cx2.runtime.program) == tiles
    for a, b in zip(got, got2):
        _close(a, b.astype(np.float64), "float32")
    cx3, _, _ = _compile(monkeypatch, "full")
    assert cx3.runtime.step_forms is None and cx3.runtime.wino_buffers == rt.wino_buffers


def test_a_build_that_disagrees_with_the_plan_never_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    _fast_in(monkeypatch, 2)
    monkeypatch.setattr(program_search, "mismatch", lambda got, ref: "output 1: made to differ")
    with pytest.warns(UserWarning, match="disagrees with the planned build"):
        cx, arrays, got = _compile(monkeypatch, "full")
    res = cx.runtime.step_forms
    assert res is not None and res.forms and not res.changed, res
    assert all(why.startswith("wrong result") for why in res.rejected.values()) and set(res.rejected) == \
        set(res.forms), res.rejected
    assert cx.runtime.wino_buffers == res.wino
    for g, e in zip(got, _torch(*arrays, WIDE_CASE[2])):
        _close(g, e, "float32")


def test_a_failed_planned_build_changes_nothing_and_is_not_recorded(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_forms, "_build", lambda *a: None)
    cx, arrays, got = _compile(monkeypatch, "full")
    res = cx.runtime.step_forms
    assert res is not None and res.rejected == {"plan": "the planned build failed"} and not res.changed, res
    assert cx.runtime.wino_buffers == res.wino
    entries = [e for k, e in tuning.entries().items() if k.startswith("prologue/")]
    assert entries and not any(e.get("step") for e in entries), entries  # (the next "full" search checks again)
    for g, e in zip(got, _torch(*arrays, WIDE_CASE[2])):
        _close(g, e, "float32")


def test_forms_left_when_the_budget_is_spent_are_not_recorded_as_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    _fast_in(monkeypatch, 2)
    real = step_forms.check_forms
    monkeypatch.setattr(step_forms, "check_forms", lambda *a: real(*a[:4], 1e-6))  # (spent once the plan is built)
    cx, arrays, got = _compile(monkeypatch, "full")
    res = cx.runtime.step_forms
    assert res is not None and res.forms and not res.changed, res
    assert set(res.rejected) == set(res.forms) and all(w.startswith("not measured") for w in res.rejected.values())
    entries = [e for k, e in tuning.entries().items() if k.startswith("prologue/")]
    assert entries and not any(e.get("step") for e in entries), entries
    for g, e in zip(got, _torch(*arrays, WIDE_CASE[2])):
        _close(g, e, "float32")
