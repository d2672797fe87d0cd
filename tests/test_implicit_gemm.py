"""Prologue fusion into the own GEMM (luminal/codegen/gemm_prologue.py, luminal/runtime/prologue_search.py).

Convolutions (forward and both gradients) with the im2col operand fused into the GEMM's packing
(``LUMINAL_PROLOGUE=fused``), checked against torch CPU in float64 (fixed seeds; float32 rtol 1e-4 / atol
1e-4 after scaling by the largest reference value, float64 1e-10) and against the same graph with the operand
materialized and on the reference interpreter. The measured choice (``search="quick"``) must give the same
results whichever plan it picks. No timings are asserted.
"""

import dataclasses

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.functional as F
from luminal.codegen.gemm import default_config
from luminal.codegen.gemm_direct import direct_plan
from luminal.codegen.kernel import GemmKernel
from luminal.codegen.gemm_prologue import (fuse_prologues, fused_gemm_source, prologue_candidates, split_axes)
from luminal.runtime import prologue_search
from luminal.shape import ShapeTracker
from luminal.training import grad

TOL = {"float32": 1e-4, "float64": 1e-10}


def _conv_graph(xs, ws, dtype, kw, seed=0):
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal(xs).astype(dtype)
    wa = rng.standard_normal(ws).astype(dtype)
    cx = lm.Graph()
    x = cx.tensor(xs, dtype).set(xa)
    w = cx.tensor(ws, dtype).set(wa)
    y = F.conv2d(x, w, **kw)
    loss = (y * y).sum() * 0.5  # dloss/dy = y: both gradients are non-trivial
    gx, gw = grad(loss, [x, w])
    for t in (y, gx, gw):
        t.retrieve()
    return cx, (xa, wa), (y, gx, gw)


def _torch(xa, wa, kw):
    x = torch.from_numpy(xa.astype(np.float64)).requires_grad_()
    w = torch.from_numpy(wa.astype(np.float64)).requires_grad_()
    y = torch.nn.functional.conv2d(x, w, **kw)
    (y * y).sum().mul(0.5).backward()
    return y.detach().numpy(), x.grad.numpy(), w.grad.numpy()


def _close(got, exp, dtype):
    scale = max(float(np.max(np.abs(exp))), 1e-30)
    assert got.shape == exp.shape
    assert np.max(np.abs(got.astype(np.float64) - exp)) <= TOL[dtype] * scale


def _run(monkeypatch, mode, xs, ws, dtype, kw, search="off"):
    monkeypatch.setenv("LUMINAL_PROLOGUE", mode)
    cx, arrays, outs = _conv_graph(xs, ws, dtype, kw)
    cx.compile(device="cpu", search=search, budget_s=2)
    cx.execute()
    return cx, arrays, [t.data() for t in outs]


CASES = [  # (input shape, weight shape, conv kwargs)
    ((2, 3, 9, 8), (5, 3, 3, 3), dict(padding=1)),
    ((2, 4, 11, 10), (6, 2, 3, 2), dict(stride=2, padding=(1, 2), groups=2)),
    ((1, 2, 12, 9), (3, 2, 3, 3), dict(dilation=2, padding=2)),
    ((3, 5, 7, 6), (4, 5, 1, 1), {}),                      # 1x1
    ((1, 1, 8, 8), (2, 1, 3, 3), dict(stride=(2, 1))),     # batch 1, one input channel
    ((2, 6, 6, 7), (6, 2, 3, 3), dict(padding=1, groups=3)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,kw", CASES)
def test_fused_conv_forward_backward_matches_torch(monkeypatch, xs, ws, kw, dtype):
    cx, (xa, wa), got = _run(monkeypatch, "fused", xs, ws, dtype, kw)
    assert cx.runtime.fused_buffers, "no operand was fused"
    assert any(k.a_pro is not None or k.b_pro is not None for k in cx.runtime.program.kernels
               if hasattr(k, "a_pro"))
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, dtype)


@pytest.mark.parametrize("xs,ws,kw", [((1, 1, 6, 6), (1, 1, 3, 3), dict(padding=1)),
                                      ((2, 4, 6, 7), (4, 1, 3, 3), dict(padding=1, groups=4))])  # depthwise
def test_matrix_vector_convs(monkeypatch, xs, ws, kw):
    """One output channel (per group): the GEMMs are matrix-vector products (M == 1); forced fusion runs them
    through the blocked path with edge tiles."""
    cx, (xa, wa), got = _run(monkeypatch, "fused", xs, ws, "float32", kw)
    assert cx.runtime.fused_buffers
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")


@pytest.mark.parametrize("xs,ws,kw", CASES[:3])
def test_fused_equals_materialized_and_reference(monkeypatch, xs, ws, kw):
    _, _, fused = _run(monkeypatch, "fused", xs, ws, "float64", kw)
    cx, _, mat = _run(monkeypatch, "materialized", xs, ws, "float64", kw)
    assert not cx.runtime.fused_buffers
    ref_cx, _, outs = _conv_graph(xs, ws, "float64", kw)
    ref_cx.compile(device="reference")
    ref_cx.execute()
    for f, m, r in zip(fused, mat, (t.data() for t in outs)):
        _close(f, m.astype(np.float64), "float64")
        _close(f, r.astype(np.float64), "float64")


def test_search_choice_gives_equal_results(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = (4, 8, 14, 14), (16, 8, 3, 3), dict(padding=1)
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    timings = cx.runtime.prologue_timings
    assert timings and all(m["correct"] for m in timings.values())
    assert cx.runtime.search_result is not None  # the unfused GEMMs were searched too
    for m in timings.values():
        assert m["fused"] > 0 and m["materialized"] > 0
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")
    # the decision is cached: "off" in a new graph takes the same plan without measuring
    cx2, _, got2 = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="off")
    assert cx2.runtime.fused_buffers == cx.runtime.fused_buffers and not cx2.runtime.prologue_timings
    for a, b in zip(got, got2):
        _close(a, b.astype(np.float64), "float32")


def test_search_measures_direct_against_packed(monkeypatch, tmp_path):
    """Where a fused GEMM runs the direct convolution, the search also times it packed (the fused own GEMM),
    checks both against the materialized products and keeps the fastest of the three in the tuning cache."""
    from luminal.runtime import tuning

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = (2, 8, 10, 32), (16, 8, 3, 3), dict(padding=1)  # rows of 32: the direct kernel applies
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    timings = cx.runtime.prologue_timings
    both = [m for m in timings.values() if "packed" in m]
    assert both and all(m["correct"] and m["packed_correct"] and m["packed"] > 0 for m in both)
    for key, m in timings.items():
        entry = tuning.lookup_many({key})[key]
        assert entry["choice"] == min(entry["candidates"], key=entry["candidates"].get)
        assert set(entry["candidates"]) == {"materialized", "fused"} | ({"packed"} if "packed" in m else set())
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")


def _wins(monkeypatch, plan: str):
    """Make ``plan`` win every prologue measurement that has it (its time 0); returns the real measurement."""
    real = prologue_search.measure_prologue

    def measured(*args, **kw):
        m = real(*args, **kw)
        if m is not None and plan in m:
            m[plan] = 0.0
        return m
    monkeypatch.setattr(prologue_search, "measure_prologue", measured)
    return real


def _cached_again(monkeypatch, real, cx, got, arrays, case, attr: str):
    """``got`` (of ``cx``, compiled with a forced winner) is torch's; then, with the real measurement back,
    ``"off"`` in a new graph takes the cached choice (the runtime's ``attr`` equal, nothing measured) and gives
    the same results."""
    xs, ws, kw = case
    for g, e in zip(got, _torch(*arrays, kw)):
        _close(g, e, "float32")
    monkeypatch.setattr(prologue_search, "measure_prologue", real)
    cx2, _, got2 = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="off")
    assert getattr(cx2.runtime, attr) == getattr(cx.runtime, attr) and not cx2.runtime.prologue_timings
    for a, b in zip(got, got2):
        _close(a, b.astype(np.float64), "float32")


def test_packed_choice_is_honoured(monkeypatch, tmp_path):
    """A measurement in which the packed GEMM wins: its GEMMs are fused but not direct (no direct kernel in the
    program), the results still torch's, and "off" in a new graph takes the cached choice."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    real = _wins(monkeypatch, "packed")
    xs, ws, kw = (2, 8, 10, 32), (16, 8, 3, 3), dict(padding=1)
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    assert cx.runtime.packed_buffers and cx.runtime.packed_buffers <= cx.runtime.fused_buffers
    prog = cx.runtime.program
    packed = [k for k in prog.kernels if isinstance(k, GemmKernel) and not k.direct]
    # (measured buffers only: under load the 2 s budget may leave others to the default plan)
    assert packed and all(direct_plan(prog, k) is None for k in packed)
    assert all(direct_plan(prog, dataclasses.replace(k, direct=True)) is not None for k in packed)
    _cached_again(monkeypatch, real, cx, got, (xa, wa), (xs, ws, kw), "packed_buffers")


# rows of 7: 49 of 64 lanes, 40 > FEW rows of A (and 40 of the cols form's 48 lanes: under FULL)
MARGINAL = ((4, 8, 7, 7), (40, 8, 3, 3), dict(padding=1))


def test_search_measures_the_marginal_direct_form(monkeypatch, tmp_path):
    """Where the direct convolution would take a GEMM only in a marginal form (7x7 images: 49 of 64 lanes in use,
    more output channels than its thresholds allow), the search measures it as a fourth plan, checked against
    the materialized products like the others."""
    from luminal.runtime import tuning

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = MARGINAL
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    timings = cx.runtime.prologue_timings
    assert any("marginal" in m and m["marginal_correct"] for m in timings.values()), timings
    for key, m in timings.items():
        entry = tuning.lookup_many({key})[key]
        assert ("marginal" in entry["candidates"]) == ("marginal" in m)
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")


def test_marginal_choice_is_honoured(monkeypatch, tmp_path):
    """A measurement in which the marginal direct form wins: the GEMM runs the direct kernel
    (``GemmKernel.direct == "marginal"``; the default plan has none), the results still torch's, and "off" in a
    new graph takes the cached choice."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    real = _wins(monkeypatch, "marginal")
    xs, ws, kw = MARGINAL
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    prog = cx.runtime.program
    assert cx.runtime.marginal_buffers and cx.runtime.marginal_buffers <= cx.runtime.fused_buffers
    # (the buffer's readers all get the marginal forms; the forward takes one, its default plan has none)
    marginal = [k for k in prog.kernels if isinstance(k, GemmKernel) and k.direct == "marginal" and
                direct_plan(prog, k) is not None]
    assert marginal and all(direct_plan(prog, dataclasses.replace(k, direct=True)) is None for k in marginal)
    assert "direct convolution (see" in cx.runtime.source
    _cached_again(monkeypatch, real, cx, got, (xa, wa), (xs, ws, kw), "marginal_buffers")


# 16 channels on 16 x 16, batch 4: 256 tiles of 2 x 2 (Winograd applies), 64 of 4 x 4 (the count rule keeps F(2x2))
WINO_CASE = ((4, 16, 16, 16), (16, 16, 3, 3), dict(padding=1))


def _wino_forms(prog):
    """(mode, tile) of every direct plan of ``prog``'s GEMMs."""
    plans = [direct_plan(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)]
    return [(p.mode, (p.wino or {}).get("E")) for p in plans if p is not None]


def test_search_measures_the_winograd_forms(monkeypatch, tmp_path):
    """Where a fused reader runs Winograd, the search measures the other forms too (no Winograd, F(4x4, 3x3) where
    the count rule took F(2x2)), each checked against the materialized products, and stores them as candidates
    with the entry's format (an entry without it is measured again by "quick"; "off" still uses it)."""
    from luminal.runtime import tuning

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = WINO_CASE
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    timings = cx.runtime.prologue_timings
    for plan in ("wino-off", "wino-f4"):
        assert any(plan in m and m[f"{plan}_correct"] for m in timings.values()), (plan, timings)
    for key, m in timings.items():
        entry = tuning.lookup_many({key})[key]
        assert entry["forms"] == prologue_search.FORMS
        assert all((p in entry["candidates"]) == (p in m) for p in prologue_search.WINO)
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")
    key = next(k for k, m in timings.items() if "wino-f4" in m)  # the same entry in the older format
    entry = tuning.lookup_many({key})[key]
    tuning.store(key, {k: v for k, v in entry.items() if k != "forms"})
    cx2, _, _ = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="off")
    assert key not in cx2.runtime.prologue_timings  # ("off" takes it)
    cx3, _, _ = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    assert key in cx3.runtime.prologue_timings  # ("quick" measures it again)


@pytest.mark.parametrize("plan,tile", [("wino-f4", 4), ("wino-off", 0)])
def test_winograd_choice_is_honoured(monkeypatch, tmp_path, plan, tile):
    """A measurement in which F(4x4, 3x3) (the count rule takes F(2x2) here) or no Winograd wins: the buffer's
    readers carry it (``GemmKernel.wino``) and their direct plans follow it, the results still torch's, and "off"
    in a new graph takes the cached choice."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = WINO_CASE
    cx0, _, _ = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="off")
    default = _wino_forms(cx0.runtime.program)
    assert ("wino", 2) in default and ("wino", 4) not in default
    real = _wins(monkeypatch, plan)
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    assert tile in cx.runtime.wino_buffers.values() and set(cx.runtime.wino_buffers) <= cx.runtime.fused_buffers
    prog = cx.runtime.program
    forms = _wino_forms(prog)
    assert any(k.wino == tile for k in prog.kernels if isinstance(k, GemmKernel))
    if tile == 4:
        assert ("wino", 4) in forms
    else:
        assert len([f for f in forms if f[0] in ("wino", "winodw")]) < len(
            [f for f in default if f[0] in ("wino", "winodw")])
    _cached_again(monkeypatch, real, cx, got, (xa, wa), (xs, ws, kw), "wino_buffers")


# 64 channels on 24 x 24, batch 8: F(4x4, 3x3) (288 tiles), and 64 channels' block budget binds (rules: 8 rows of 6
# tiles; the wide form's doubled budget: more rows per block)
WIDE_CASE = ((8, 64, 24, 24), (64, 64, 3, 3), dict(padding=1))


def _block_rows(prog):
    """(tile, block rows) of every Winograd plan of ``prog``'s GEMMs, by kernel output."""
    out = {}
    for k in prog.kernels:
        p = direct_plan(prog, k) if isinstance(k, GemmKernel) else None
        if p is not None and p.mode == "wino":
            out[k.out] = (p.wino["E"], p.wino["R"])
    return out


def test_search_measures_wide_winograd_blocks(monkeypatch, tmp_path):
    """Where the block budget binds, the search measures the rules' tile in wide blocks (``"wino-f4w"``, checked
    against the materialized products like every form); made to win, its readers carry ``GemmKernel.wino ==
    "4w"`` and run F(4x4, 3x3) in more rows of tiles per block than the rules' plan, the forward and both
    gradients are torch's, and "off" in a new graph takes the cached choice."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    xs, ws, kw = WIDE_CASE
    cx0, _, _ = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="off")
    rules = _block_rows(cx0.runtime.program)
    assert rules and all(e == 4 for e, _ in rules.values()), rules
    real = _wins(monkeypatch, "wino-f4w")
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    timings = cx.runtime.prologue_timings
    assert any(m.get("wino-f4w_correct") for m in timings.values()), timings
    assert "4w" in cx.runtime.wino_buffers.values(), cx.runtime.wino_buffers
    prog = cx.runtime.program
    wide = _block_rows(prog)
    taken = [k.out for k in prog.kernels if isinstance(k, GemmKernel) and k.wino == "4w" and k.out in wide]
    assert taken, wide
    assert all(wide[o][0] == 4 and wide[o][1] > max(r for _, r in rules.values()) for o in taken), (wide, rules)
    _cached_again(monkeypatch, real, cx, got, (xa, wa), (xs, ws, kw), "wino_buffers")


def test_unknown_winograd_form_is_an_error():
    from luminal.codegen.gemm_winograd import wino_plan
    with pytest.raises(ValueError, match="Winograd form '3w'"):
        wino_plan(type("P", (), {"side": "b"})(), 64, 576, 4096, (), {}, 0, 4, "3w")


def test_readers_of_one_copy_take_their_own_winograd_forms(monkeypatch, tmp_path):
    """A measurement in which the first reader of a copy is fastest in the rules' form and the second without
    Winograd (the forward and the weight gradient read the same im2col): each takes its own (``"wino-mix"``),
    the results are torch's, and "off" in a new graph takes the cached choice."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    real = prologue_search.measure_prologue

    def measured(*args, **kw):
        m = real(*args, **kw)
        if m is not None and "wino-off" in m and len(m["fused_each"]) >= 2:
            n = len(m["fused_each"])
            m["fused_each"] = [0.0] + [1.0] * (n - 1)
            m["wino-off_each"] = [1.0] + [0.0] * (n - 1)
            for k in ("fused", "materialized", *prologue_search.FUSED[1:]):
                if k in m:
                    m[k] = 10.0
        return m
    monkeypatch.setattr(prologue_search, "measure_prologue", measured)
    xs, ws, kw = WINO_CASE
    cx, (xa, wa), got = _run(monkeypatch, "auto", xs, ws, "float32", kw, search="quick")
    mixed = {b: f for b, f in cx.runtime.wino_buffers.items() if isinstance(f, tuple)}
    assert mixed and all(f[0] is None and set(f[1:]) == {0} for f in mixed.values()), cx.runtime.wino_buffers
    prog = cx.runtime.program
    assert any(k.wino == 0 for k in prog.kernels if isinstance(k, GemmKernel))
    assert any(f[0] in ("wino", "winodw") for f in _wino_forms(prog))  # (the first readers keep theirs)
    _cached_again(monkeypatch, real, cx, got, (xa, wa), (xs, ws, kw), "wino_buffers")


def test_forced_fusion_with_gemm_search(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    kw = dict(padding=1, stride=2)
    cx, (xa, wa), got = _run(monkeypatch, "fused", (2, 3, 9, 9), (4, 3, 3, 3), "float64", kw, search="quick")
    assert cx.runtime.fused_buffers and cx.runtime.search_result is not None
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float64")


def test_measure_prologue_checks_results(monkeypatch):
    monkeypatch.setenv("LUMINAL_PROLOGUE", "materialized")
    cx, _, _ = _conv_graph((2, 3, 10, 9), (4, 3, 3, 3), "float64", dict(padding=1))
    cx.compile(device="cpu")
    program = cx.runtime.program
    cands = prologue_candidates(program)
    assert cands
    for buf, uses in cands.items():
        m = prologue_search.measure_prologue(program, buf, uses, {}, cx.runtime.blas)
        assert m["correct"] is True
        assert set(m) >= {"materialize", "own", "fused", "materialized"}


def test_measure_prologue_measures_for_its_seconds(monkeypatch):
    """Rounds continue past ``ROUNDS`` until the measurement's seconds are spent (a few runs of a shared machine
    decide nothing). The clock here is a counter, one tick per reading, read once per round."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "materialized")
    cx, _, _ = _conv_graph((2, 3, 10, 9), (4, 3, 3, 3), "float64", dict(padding=1))
    cx.compile(device="cpu")
    program = cx.runtime.program
    buf, uses = next(iter(prologue_candidates(program).items()))
    ticks = []

    def clock():
        ticks.append(1)
        return float(len(ticks))
    monkeypatch.setattr(prologue_search.time, "perf_counter", clock)
    m = prologue_search.measure_prologue(program, buf, uses, {}, cx.runtime.blas, seconds=0)
    short = len(ticks)
    assert m["correct"] and short <= prologue_search.ROUNDS + 10
    ticks.clear()
    prologue_search.measure_prologue(program, buf, uses, {}, cx.runtime.blas, seconds=60)
    assert len(ticks) >= 60


def test_cast_operand_is_fused(monkeypatch):
    """A cast that exists only to feed a matmul is computed while packing."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "fused")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 53))
    b = rng.standard_normal((53, 29)).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(a.shape, "float64").set(a)
    w = cx.tensor(b.shape).set(b)
    y = ((x.cast("float32") * 2.0) @ w).retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert cx.runtime.fused_buffers
    _close(y.data(), (a.astype(np.float32).astype(np.float64) * 2) @ b.astype(np.float64), "float32")


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="no operand"):
        fused_gemm_source("float32", default_config("float32"), "f", False, False)
    cx = lm.Graph()
    x = cx.tensor((4, 4)).set(np.ones((4, 4), np.float32))
    (x @ x).retrieve()
    cx.compile(device="cpu")
    with pytest.raises(ValueError, match="cannot be fused"):
        fuse_prologues(cx.runtime.program, {12345})
    # a view that does not split into whole axes (a slice) is not fusable
    assert split_axes((4, 6), ShapeTracker([1, 3, 1, 2], [0, 6, 0, 1], 1), "a") is None


def test_bad_env_raises(monkeypatch):
    monkeypatch.setenv("LUMINAL_PROLOGUE", "sometimes")
    cx, _, _ = _conv_graph((1, 1, 5, 5), (1, 1, 3, 3), "float32", {})
    with pytest.raises(ValueError, match="LUMINAL_PROLOGUE"):
        cx.compile(device="cpu")


def test_default_plan_fuses_deep_window_copies(monkeypatch, tmp_path):
    """search="off" without a cache entry: an im2col matrix read by GEMMs with K >= 64 is fused, a K = 9 one
    (a one-channel 3x3 convolution) is copied unless the direct convolution reads it in place (stride 1:
    codegen/gemm_direct.py); results match torch either way."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    kw = dict(padding=1)
    cx, (xa, wa), got = _run(monkeypatch, "auto", (2, 8, 10, 10), (16, 8, 3, 3), "float32", kw)
    assert cx.runtime.fused_buffers
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")
    kw = dict(padding=1, stride=2)
    monkeypatch.setenv("LUMINAL_DIRECT_CONV", "0")  # (else its input gradient's phases read their windows in place)
    cx, (xa, wa), got = _run(monkeypatch, "auto", (2, 1, 10, 10), (16, 1, 3, 3), "float32", kw)
    assert not cx.runtime.fused_buffers
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")
    monkeypatch.delenv("LUMINAL_DIRECT_CONV")
    kw = dict(padding=1)
    cx, (xa, wa), got = _run(monkeypatch, "auto", (2, 1, 10, 10), (16, 1, 3, 3), "float32", kw)
    assert cx.runtime.fused_buffers and "direct convolution" in cx.runtime.source
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, "float32")


def test_overlapping_views():
    assert prologue_search._overlapping(ShapeTracker([4, 3], [1, 1]))       # windows of 3, step 1
    assert not prologue_search._overlapping(ShapeTracker([4, 3], [3, 1]))   # a plain matrix
    assert not prologue_search._overlapping(ShapeTracker([4, 3], [0, 1]))   # a broadcast is not a window


def test_unrenderable_template_keeps_copies(monkeypatch):
    monkeypatch.setattr(prologue_search, "_renders", lambda dtype: False)
    with pytest.warns(UserWarning, match="stay materialized"):
        cx, (xa, wa), got = _run(monkeypatch, "fused", (2, 3, 9, 8), (5, 3, 3, 3), "float32", dict(padding=1))
    assert not cx.runtime.fused_buffers
    for g, e in zip(got, _torch(xa, wa, dict(padding=1))):
        _close(g, e, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("out_ch", [16, 40, 70])
def test_fused_small_m_configuration(monkeypatch, out_ch, dtype):
    """A fused GEMM with at most AUTO_SMALL_M rows (few output channels; the weight gradient's rows too) runs
    the small-M own-GEMM configuration (no edge tile for 16 / 32 / 64 rows), others the default one; with K
    blocks split (32 input channels x 3x3 = 288 > 256) and a position count no tile divides, forward and
    both gradients equal torch's."""
    from luminal.codegen.gemm import default_config
    from luminal.codegen.gemm_small import AUTO_SMALL_M, small_config
    from luminal.runtime.prologue_search import fused_config

    xs, ws, kw = (2, 32, 9, 11), (out_ch, 32, 3, 3), dict(padding=1)
    cx, (xa, wa), got = _run(monkeypatch, "fused", xs, ws, dtype, kw)
    fused = [k for k in cx.runtime.program.kernels if getattr(k, "a_pro", None) is not None
             or getattr(k, "b_pro", None) is not None]
    assert fused
    for k in fused:
        m = k.dims[-2].to_int()
        want = small_config(dtype) if m <= AUTO_SMALL_M else default_config(dtype)
        assert fused_config(k) == want, (m, fused_config(k))
    assert any(k.dims[-2].to_int() == out_ch for k in fused)
    for g, e in zip(got, _torch(xa, wa, kw)):
        _close(g, e, dtype)


def test_measured_plans_of_a_small_cnn(monkeypatch):
    """Every fusable copy of a W4-like training step (two valid 3x3 convolutions, ReLUs, max pooling, a linear
    head; the parameters' gradients) measured in its own small program, where the other operand of its GEMMs
    stays materialized (here a weight gradient reads the upstream gradient's permuted copy in place as A, its
    plain B the stored im2col): the fused (direct) and the packed products equal the materialized ones."""
    monkeypatch.setenv("LUMINAL_PROLOGUE", "materialized")
    rng = np.random.default_rng(4)
    cx = lm.Graph()
    x = cx.tensor((4, 1, 20, 20)).set(rng.standard_normal((4, 1, 20, 20)).astype(np.float32))
    model = lm.nn.Sequential(lm.nn.Conv2d(1, 8, 3), lm.nn.ReLU(), lm.nn.Conv2d(8, 16, 3), lm.nn.ReLU(),
                             lm.nn.MaxPool2d(2), lm.nn.Flatten(), lm.nn.Linear(16 * 8 * 8, 10))
    y = model(x)
    for t in grad((y * y).mean(), list(model.parameters())):
        t.retrieve()
    cx.compile(device="cpu")
    program = cx.runtime.program
    packed = 0
    for buf, uses in prologue_candidates(program).items():
        m = prologue_search.measure_prologue(program, buf, uses, {}, cx.runtime.blas)
        assert m["correct"] is True and m.get("packed_correct", True) is True
        packed += "packed" in m
    assert packed
