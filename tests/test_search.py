"""The measured search (luminal.runtime.search) and its tuning cache (luminal.runtime.tuning).

Oracles: numpy products of the same operands (float64), the reference interpreter. Searches run with small
budgets on small shapes; nothing here asserts a timing."""

from __future__ import annotations

import json

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import search as S
from luminal.runtime import tuning
from luminal.runtime.cpu import CompileStats, find_compiler
from hl_helpers import run_in_threads

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets its own tuning file (compiled libraries stay in the shared cache)."""
    monkeypatch.setattr(tuning, "tuning_path", lambda: str(tmp_path / "tuning.json"))
    yield


def matmul_graph(m, k, n, dtype="float32", transpose_b=False, seed=0):
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    a = cx.tensor((m, k), dtype=dtype)
    b = cx.tensor((n, k) if transpose_b else (k, n), dtype=dtype)
    out = (a @ (b.permute((1, 0)) if transpose_b else b)).retrieve()
    av = rng.standard_normal((m, k)).astype(dtype)
    bv = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    a.set(av)
    b.set(bv)
    ref = av.astype(np.float64) @ (bv.T if transpose_b else bv).astype(np.float64)
    return cx, out, ref


def close(x, ref, dtype="float32"):
    tol = 1e-4 if dtype == "float32" else 1e-10
    return np.allclose(x, ref, rtol=tol, atol=tol * np.abs(ref).max())


# ------------------------------------------------------------------------------------------ arguments
def test_bad_search_arguments_are_rejected():
    cx, out, _ = matmul_graph(4, 4, 4)
    with pytest.raises(ValueError, match="search='fast'.*expected one of"):
        cx.compile(device="cpu", search="fast")
    with pytest.raises(ValueError, match="budget_s=-1.*positive"):
        cx.compile(device="cpu", search="quick", budget_s=-1)
    with pytest.raises(ValueError, match="budget_s"):
        cx.compile(device="cpu", search="quick", budget_s="10")


# ------------------------------------------------------------------------------------------ the cache
def test_store_and_lookup_round_trip():
    tuning.store("gemm/x", {"choice": "blas", "seconds": 1e-3, "level": "quick"})
    assert tuning.lookup("gemm/x")["choice"] == "blas"
    assert tuning.lookup("gemm/y") is None
    with open(tuning.tuning_path()) as f:
        data = json.load(f)
    assert data["format"] == tuning.FORMAT and tuning.machine()[0] in data["machines"]


def test_invalid_entries_are_rejected_on_store():
    with pytest.raises(ValueError, match="choice"):
        tuning.store("gemm/x", {"seconds": 1.0})
    with pytest.raises(ValueError, match="seconds"):
        tuning.store("gemm/x", {"choice": "blas", "seconds": -1})


def test_corrupt_cache_file_is_ignored_and_rebuilt():
    with open(tuning.tuning_path(), "w") as f:
        f.write('{"format": 1, "machines": {"abc": [trunc')
    with pytest.warns(UserWarning, match="unreadable"):
        assert tuning.lookup("gemm/x") is None
    tuning.store("gemm/x", {"choice": "blas", "seconds": 0.5})
    with open(tuning.tuning_path()) as f:
        json.load(f)  # a valid file again
    assert tuning.lookup("gemm/x")["choice"] == "blas"


def test_malformed_entry_is_not_trusted():
    cx, out, ref = matmul_graph(48, 40, 56)
    shape = S.gemm_shape(next(k for k in _lowered(cx) if type(k).__name__ == "GemmKernel"), {})
    # an entry naming a configuration that cannot exist, and one that is not an entry at all
    tuning.store(shape.key(), {"choice": "own:not-a-config", "seconds": 1e-9, "level": "full"})
    assert not S.valid_choice("own:not-a-config", "float32")
    cx.compile(device="cpu")  # search off: falls back to the default, never the bogus entry
    cx.execute()
    assert close(out.data(), ref)
    assert list(cx.runtime.gemm_choices.values()) == [S.default_choice("float32", cx.runtime.blas)]
    cx.compile(device="cpu", search="quick", budget_s=5)  # the bogus entry is re-measured
    assert cx.runtime.search_result.cached == 0
    assert S.valid_choice(tuning.lookup(shape.key())["choice"], "float32")
    cx.execute()
    assert close(out.data(), ref)


def _lowered(cx):
    from luminal.codegen.kernel import lower
    from luminal.compiler.generic import GenericCompiler
    cx.compile(GenericCompiler(), device="reference")
    return lower(cx).kernels


def test_other_machine_misses(monkeypatch):
    tuning.store("gemm/x", {"choice": "blas", "seconds": 0.5})
    key, model, compiler = tuning.machine()
    monkeypatch.setattr(tuning, "_machine", ("another-cpu-feature-set", model, compiler))
    assert tuning.lookup("gemm/x") is None


def test_export_import(tmp_path, monkeypatch):
    tuning.store("gemm/x", {"choice": "blas", "seconds": 0.5})
    tuning.store("gemm/y", {"choice": "blas", "seconds": 0.25})
    assert tuning.export_tunings(str(tmp_path / "shared.json")) == 2
    tuning.clear()
    assert tuning.lookup("gemm/x") is None
    assert tuning.import_tunings(str(tmp_path / "shared.json")) == 2
    assert tuning.lookup("gemm/y")["seconds"] == 0.25
    assert tuning.import_tunings(str(tmp_path / "shared.json")) == 0  # existing entries win
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a tuning file"):
        tuning.import_tunings(str(tmp_path / "bad.json"))
    (tmp_path / "bad2.json").write_text("not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        tuning.import_tunings(str(tmp_path / "bad2.json"))


def test_concurrent_stores_keep_a_valid_file():
    def work(t):
        for i in range(10):
            tuning.store(f"gemm/{t}/{i}", {"choice": "blas", "seconds": float(i)})

    run_in_threads(work, 4)
    assert all(tuning.lookup(f"gemm/{t}/{i}") for t in range(4) for i in range(10))


# ------------------------------------------------------------------------------------------ the search
@pytest.mark.parametrize("dtype,transpose_b", [("float32", False), ("float32", True), ("float64", False)])
def test_searched_program_equals_default(dtype, transpose_b):
    cx, out, ref = matmul_graph(67, 45, 91, dtype, transpose_b)
    cx.compile(device="cpu")
    cx.execute()
    default = out.data().copy()
    cx.compile(device="cpu", search="quick", budget_s=5)
    res = cx.runtime.search_result
    assert res is not None and len(res.choices) == 1
    timings = next(iter(res.timings.values()))
    assert len(timings) >= 2 and any(t is not None for t in timings.values())
    cx.execute()
    assert close(out.data(), ref, dtype) and close(default, ref, dtype)
    assert list(cx.runtime.gemm_choices.values()) == list(res.choices.values())


def test_second_compile_uses_the_cache_without_measuring():
    cx, out, ref = matmul_graph(64, 32, 48)
    cx.compile(device="cpu", search="quick", budget_s=60)
    first = cx.runtime.search_result
    assert first.cached == 0
    compiled = CompileStats.compilations
    cx.compile(device="cpu", search="quick", budget_s=60)
    assert cx.runtime.search_result.cached == 1 and not cx.runtime.search_result.timings
    assert CompileStats.compilations == compiled  # the tuned library is in the library cache too
    assert cx.runtime.gemm_choices == {i: c for i, c in zip(cx.runtime.gemm_choices, first.choices.values())}
    cx.compile(device="cpu")  # search off also picks the cached winner
    assert list(cx.runtime.gemm_choices.values()) == list(first.choices.values())
    cx.execute()
    assert close(out.data(), ref)


def test_wrong_candidate_never_wins(monkeypatch):
    real_run = S._BenchLibrary.run
    cands = S.candidates(S.GemmShape("float32", 1, 40, 40, 40, 40, 1, 40, 1), "quick", True)
    bad = cands[-1]

    def run(self, choice, shape, bufs, reps):
        t = real_run(self, choice, shape, bufs, reps)
        if choice == bad:
            bufs[2][::7] += 1.0  # a subtly wrong result
            return t * 1e-3      # ...that would look fastest
        return t
    monkeypatch.setattr(S._BenchLibrary, "run", run)
    shape = S.GemmShape("float32", 1, 40, 40, 40, 40, 1, 40, 1)
    with pytest.warns(UserWarning, match="wrong result"):
        res = S.search_gemms([shape], "quick", 60, True, progress=False)
    assert res.timings[shape.key()][bad] is None
    assert res.choices[shape.key()] != bad


def test_correctness_check_catches_errors():
    shape = S.GemmShape("float64", 2, 5, 6, 7, 7, 1, 1, 6)  # B transposed
    bufs = S._operands(shape, np.random.default_rng(1))
    c = bufs[2].reshape(2, 5, 6)
    for bi in range(2):
        av, bv = S._views(shape, bufs, bi)
        c[bi] = av @ bv.T
    assert S._correct(shape, bufs)
    c[1, 4, 5] += 1e-6
    assert not S._correct(shape, bufs)


@pytest.mark.parametrize("where", [(0, 0), (36, 2), (52, 49), (10, 40)])
def test_correctness_check_in_blocks_sees_every_element(monkeypatch, where):
    """The float64 check runs in row x column blocks (bounded memory); an error in any block is caught."""
    monkeypatch.setattr(S, "CHECK_BLOCK", 64)  # k = 8: blocks of 8 rows x 8 columns
    shape = S.GemmShape("float32", 1, 53, 50, 8, 8, 1, 8, 1)
    bufs = S._operands(shape, np.random.default_rng(2))
    c = bufs[2].reshape(1, 53, 50)
    av, bv = S._views(shape, bufs, 0)
    c[0] = (av.astype(np.float64) @ bv.astype(np.float64).T).astype(np.float32)
    assert S._correct(shape, bufs)
    c[0][where] += 0.1  # |A| @ |B| is about 5 here: 0.1 is far past the 1e-3 relative tolerance
    assert not S._correct(shape, bufs)


def test_ctrl_c_keeps_what_was_measured(monkeypatch):
    """Ctrl-C during the second kernel's rounds: the first keeps its measured winner (stored), the second falls
    back to the default (not stored as tuned), the search says it was interrupted."""
    real = S._rounds
    calls = []

    def rounds(*a, **k):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(S, "_rounds", rounds)
    shapes = [S.GemmShape("float32", 1, 32, 32, 32, 32, 1, 32, 1), S.GemmShape("float32", 1, 16, 16, 16, 16, 1, 16, 1)]
    with pytest.warns(UserWarning, match="interrupted"):
        res = S.search_gemms(shapes, "quick", 600, True, progress=False)  # (no candidate skipped for time)
    assert res.interrupted
    first, second = shapes[0].key(), shapes[1].key()
    measured = {c: t for c, t in res.timings[first].items() if t is not None}
    best = min(measured, key=measured.get)
    same = S.default_equivalent(shapes[0], True)
    assert res.choices[first] == (same if measured[same] <= (1 + S.MARGIN) * measured[best] else best)
    assert set(res.choices) == {s.key() for s in shapes}
    assert res.choices[second] == S.default_choice("float32", True)
    assert tuning.lookup(first) is not None and tuning.lookup(second) is None  # (interrupted: not stored)


def test_candidates_are_timed_in_turn(monkeypatch):
    """After one warm-up call each, every round runs each candidate still racing once, in turn: no candidate
    gets a second timed round before every other has had its first (a load burst then hits all of them)."""
    order = []
    real = S._BenchLibrary.run

    def run(self, choice, shape, bufs, reps):
        order.append(choice)
        return real(self, choice, shape, bufs, reps)
    monkeypatch.setattr(S._BenchLibrary, "run", run)
    shape = S.GemmShape("float32", 1, 48, 64, 96, 96, 1, 96, 1)
    res = S.search_gemms([shape], "quick", 600, True, progress=False, store=False)
    cands = [c for c, t in res.timings[shape.key()].items() if t is not None]
    assert len(cands) >= 3
    warm, timed = order[:len(cands)], order[len(cands):]
    assert sorted(warm) == sorted(cands)
    assert timed[:len(cands)] == warm and timed[len(cands):2 * len(cands)] == warm  # (rounds 1 and 2: everyone)


@pytest.mark.parametrize("gain", [0.01, 0.1])
def test_the_default_kernel_is_kept_unless_clearly_beaten(monkeypatch, gain):
    """The candidate computing the shape as the unmeasured default does (``"auto"``'s dot kernel for 32 rows
    against a K-contiguous weight) wins unless another candidate is more than ``MARGIN`` faster: 1 % faster
    loses to it, 10 % faster wins."""
    shape = S.GemmShape("float32", 1, 32, 256, 384, 384, 1, 384, 1)
    assert S.default_equivalent(shape, True) == "dot"

    def rounds(lib, live, shape, bufs, deadline):
        return {c: (1.0 - gain if c == "blas" else 1.0) * 1e-3 for c in live}
    monkeypatch.setattr(S, "_rounds", rounds)
    res = S.search_gemms([shape], "quick", 600, True, progress=False, store=False)
    assert res.choices[shape.key()] == ("dot" if gain < S.MARGIN else "blas")


def symbolic_matmul(seed):
    """``(n, 24) @ (24, 40)`` with ``n`` symbolic and the weight set: (graph, a, out, weight values, rng)."""
    cx = lm.Graph()
    a = cx.tensor(("n", 24))
    w = cx.tensor((24, 40))
    out = (a @ w).retrieve()
    rng = np.random.default_rng(seed)
    wv = rng.standard_normal((24, 40)).astype(np.float32)
    w.set(wv)
    return cx, a, out, wv, rng


def test_symbolic_sizes_are_searched_at_the_first_execute():
    cx, a, out, wv, rng = symbolic_matmul(3)
    cx.compile(device="cpu", search="quick", budget_s=5)
    assert cx.runtime.search_result is None  # n is not bound yet
    av = rng.standard_normal((33, 24)).astype(np.float32)
    a.set(av)
    cx.execute()
    assert cx.runtime.search_result is not None
    assert next(iter(cx.runtime.search_result.choices)).startswith("gemm/float32/b1/m33n40k24")
    assert close(out.data(), av.astype(np.float64) @ wv)
    av2 = rng.standard_normal((5, 24)).astype(np.float32)  # other bindings run the same tuned library
    a.set(av2)
    cx.execute()
    assert close(out.data(), av2.astype(np.float64) @ wv)


def test_background_search_swaps_without_a_wrong_result():
    cx = lm.Graph()
    rng = np.random.default_rng(4)
    x = cx.tensor((96, 64))
    w1 = cx.tensor((64, 80))
    w2 = cx.tensor((80, 48))
    out = ((x @ w1).relu() @ w2).retrieve()
    xv, w1v, w2v = (rng.standard_normal(s).astype(np.float32) for s in [(96, 64), (64, 80), (80, 48)])
    x.set(xv)
    w1.set(w1v)
    w2.set(w2v)
    ref = np.maximum(xv.astype(np.float64) @ w1v, 0) @ w2v
    cx.compile(device="cpu", search="background", budget_s=4)
    rt = cx.runtime
    before = dict(rt.gemm_choices)
    runs = 0
    while rt._search_thread.is_alive() or runs < 3:
        cx.execute()
        assert close(out.data(), ref)
        runs += 1
    assert rt.wait_for_search(60)
    cx.execute()  # installs the tuned library if it differs
    assert close(out.data(), ref)
    res = rt.search_result
    assert res is not None and len(res.choices) == 2
    assert rt._pending is None
    shapes = S.program_shapes(rt.program, {})
    assert rt.gemm_choices == {i: res.choices[s.key()] for i, s in shapes.items()}
    assert set(before) == set(rt.gemm_choices)


def test_trainer_with_search_trains_like_the_default():
    import luminal.nn as nn
    import luminal.nn.functional as F
    from luminal.data import DataLoader, TensorDataset
    from luminal.training import SGD, Trainer

    rng = np.random.default_rng(5)
    xs = rng.standard_normal((64, 20)).astype(np.float32)
    ys = rng.integers(0, 3, 64)
    histories = []
    first = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3))
    state = {k: v.copy() for k, v in first.state_dict().items()}  # both runs start from the same weights
    for search in ("off", "quick"):
        model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3))
        model.load_state_dict(state)
        trainer = Trainer(model, SGD(model.parameters(), lr=0.1), F.cross_entropy, device="cpu", search=search,
                          budget_s=3)
        trainer.fit(DataLoader(TensorDataset(xs, ys), batch_size=16), epochs=2, progress=False)
        histories.append([h["loss"] for h in trainer.history])
    assert np.allclose(histories[0], histories[1], rtol=1e-4)
    with pytest.raises(ValueError, match="search='always'"):
        Trainer(model, SGD(model.parameters(), lr=0.1), F.cross_entropy, search="always")


def test_each_new_size_of_a_symbolic_graph_is_tuned_and_dispatched(monkeypatch):
    cx, a, out, wv, rng = symbolic_matmul(6)
    cx.compile(device="cpu", search="quick", budget_s=3)
    rt = cx.runtime
    # force a distinct winner per size so that the dispatch is visible: the search's first own candidate
    own = [c for c in S.candidates(S.GemmShape("float32", 1, 8, 40, 24, 24, 1, 1, 40), "quick", True) if c != "blas"]
    real = S.search_gemms

    def pick(shapes, level, budget, blas, progress=None, store=True):
        res = real(shapes, level, budget, blas, progress=progress, store=False)
        res.choices = {k: own[len(k) % len(own)] for k in res.choices}
        return res
    monkeypatch.setattr(S, "search_gemms", pick)
    for n in (7, 64, 7):
        av = rng.standard_normal((n, 24)).astype(np.float32)
        a.set(av)
        cx.execute()
        assert close(out.data(), av.astype(np.float64) @ wv)
    (i, entries), = rt.gemm_table.items()
    assert set(entries) == {(1, 7, 40, 24), (1, 64, 40, 24)}
    assert "== 64 &&" in rt.source and "== 7 &&" in rt.source  # the generated code dispatches on the size
    assert rt.choices_at({"n": 64})[i] == entries[(1, 64, 40, 24)]
    assert rt.choices_at({"n": 5})[i] == S.default_choice("float32", rt.blas)  # untuned sizes: the default


def test_weights_of_a_program_bigger_than_the_cache_are_timed_cold(monkeypatch):
    # inputs (weights) holding more than the last-level cache are read from memory on every call of the
    # program: the GEMM operand that is such an input is marked cold (the larger one where both are), its key
    # says so, and the search times it through copies that together hold twice the cache
    import luminal.codegen.c as C
    cx, out, ref = matmul_graph(24, 40, 56)
    cx.compile(device="cpu")
    rt = cx.runtime
    (i, hot), = S.program_shapes(rt.program, dict(cx.dyn_map)).items()
    assert hot.cold == "" and not hot.key().endswith("cold-b")
    monkeypatch.setattr(C, "STREAM_BYTES", 8000)  # a "cache" smaller than the two inputs (3840 + 8960 bytes)
    (j, cold), = S.program_shapes(rt.program, dict(cx.dyn_map)).items()
    assert j == i and cold.cold == "b" and cold.key() == hot.key() + "/cold-b"  # (B, 40 x 56: the larger input)
    bufs = S._operands(cold, np.random.default_rng(0))
    a, b, c, bsa, bsb = bufs
    copies = b.size // bsb
    assert a.size == bsa and copies * bsb == b.size and b.nbytes >= 2 * 8000 and copies == 2
    assert all(np.array_equal(b[:bsb], b[k * bsb:(k + 1) * bsb]) for k in range(copies))
    lib = S._BenchLibrary([("blas", "float32"), ("stream", "float32")], True)
    for choice in ("blas", "stream"):
        for reps in (1, copies):  # (the last call reads the last copy: the same values)
            c[:] = np.nan
            assert lib.run(choice, cold, bufs, reps) > 0
            assert S._correct(cold, bufs), (choice, reps)
    res = S.search_gemms([cold], "quick", 5, True, progress=False)
    assert set(res.choices) == {cold.key()} and res.choices[cold.key()] in S.candidates(cold, "quick", True)
