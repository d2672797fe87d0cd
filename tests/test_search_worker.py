"""search="background" measures in a child process (luminal.runtime.search_worker).

Oracles: numpy's float64 products of the same operands; the process ids and exit statuses the operating
system reports. Fake workers (``search_worker.WORKER`` replaced by a ``python -c`` one-liner) stand for a
search that crashes, hangs or answers garbage; the real worker is run for everything else."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import search as S
from luminal.runtime import search_worker as W
from luminal.runtime import tuning
from luminal.runtime.cpu import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets its own tuning file, which the worker must use too (compiled libraries stay shared)."""
    monkeypatch.setattr(tuning, "tuning_path", lambda: str(tmp_path / "tuning.json"))
    yield


def two_layer(seed=4):
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    x, w1, w2 = cx.tensor((96, 64)), cx.tensor((64, 80)), cx.tensor((80, 48))
    out = ((x @ w1).relu() @ w2).retrieve()
    xv, w1v, w2v = (rng.standard_normal(s).astype(np.float32) for s in [(96, 64), (64, 80), (80, 48)])
    x.set(xv)
    w1.set(w1v)
    w2.set(w2v)
    return cx, out, np.maximum(xv.astype(np.float64) @ w1v, 0) @ w2v


def close(x, ref):
    return np.allclose(x, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def fake_worker(monkeypatch, code: str):
    monkeypatch.setattr(W, "WORKER", [sys.executable, "-c", code])


def test_background_search_measures_in_another_process_and_fills_the_tuning_cache():
    cx, out, ref = two_layer()
    cx.compile(device="cpu", search="background", budget_s=2)
    rt = cx.runtime
    while rt._search_thread.is_alive():
        cx.execute()
        assert close(out.data(), ref)
    assert rt.wait_for_search(60)
    res = rt.search_result
    assert res is not None and res.pid != os.getpid()  # measured by a child
    shapes = S.program_shapes(rt.program, {})
    keys = {s.key() for s in shapes.values()}
    assert set(res.choices) == keys
    stored = tuning.lookup_many(keys)  # the child wrote this test's tuning file, not the default one
    assert {k: e["choice"] for k, e in stored.items()} == res.choices
    cx.execute()  # the tuned library is swapped in
    assert rt.gemm_choices == {i: res.choices[s.key()] for i, s in shapes.items()}
    assert close(out.data(), ref)


def test_quick_search_still_measures_in_this_process():
    cx, out, ref = two_layer(5)
    cx.compile(device="cpu", search="quick", budget_s=1)
    cx.execute()
    assert cx.runtime.search_result.pid == os.getpid()
    assert close(out.data(), ref)


def test_a_crashing_search_process_is_reported_and_the_program_keeps_running(monkeypatch):
    fake_worker(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    cx, out, ref = two_layer(6)
    cx.compile(device="cpu", search="background", budget_s=2)
    rt = cx.runtime
    before = dict(rt.gemm_choices)
    rt._search_thread.join(120)
    with pytest.raises(RuntimeError, match="background search failed: the search process was killed by signal "
                                           "SIGSEGV"):
        rt.wait_for_search(1)
    for _ in range(3):  # the plan it had, still right
        cx.execute()
        assert close(out.data(), ref)
    assert rt.gemm_choices == before
    assert rt.wait_for_search(1)  # (the error is reported once)


def test_a_failing_search_process_quotes_its_stderr(monkeypatch):
    fake_worker(monkeypatch, "import sys; sys.stderr.write('no candidates today\\n'); sys.exit(7)")
    with pytest.raises(W.SearchProcessError, match=r"exited with status 7; its stderr ended with:\nno candidates"):
        W.search_in_process([], "full", 1.0, True)


def test_a_hung_search_process_is_killed_at_its_timeout(monkeypatch, tmp_path):
    pid_file = tmp_path / "pid"
    fake_worker(monkeypatch, f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                             "time.sleep(120)")
    t0 = time.perf_counter()
    with pytest.raises(W.SearchProcessError, match="did not finish within 2 s and was killed"):
        W.search_in_process([], "full", 1.0, True, timeout=2)
    assert time.perf_counter() - t0 < 60
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # gone (and reaped), not left running
        os.kill(pid, 0)


def test_a_garbled_answer_is_not_trusted(monkeypatch):
    fake_worker(monkeypatch, "import sys; open(sys.argv[2], 'wb').write(b'not a pickle')")
    with pytest.raises(W.SearchProcessError, match="returned no result"):
        W.search_in_process([], "full", 1.0, True)


def test_the_answer_and_warnings_of_the_child_come_back(monkeypatch):
    fake_worker(monkeypatch, "import pickle, sys; from luminal.runtime.search import SearchResult; "
                             "pickle.dump({'result': SearchResult(choices={'k': 'blas'}, pid=1), "
                             "'warnings': ['search: candidate own:x gave a wrong result for k; dropped']}, "
                             "open(sys.argv[2], 'wb'))")
    with pytest.warns(UserWarning, match="candidate own:x gave a wrong result"):
        res = W.search_in_process([], "full", 1.0, True)
    assert res.choices == {"k": "blas"} and res.pid == 1


def test_the_worker_exits_when_its_parent_goes_away(tmp_path):
    shape = S.GemmShape("float32", 1, 256, 256, 256, 256, 1, 1, 256)
    request, answer = tmp_path / "req.pkl", tmp_path / "ans.pkl"
    request.write_bytes(pickle.dumps({"shapes": [shape], "level": "full", "budget_s": 60.0, "blas": True,
                                      "tuning_path": str(tmp_path / "t.json")}))
    proc = subprocess.Popen(W.WORKER + [str(request), str(answer)], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=W._child_env())
    proc.stdin.close()  # what a dying parent does to the pipe
    assert proc.wait(60) == 3
    assert not answer.exists() and not (tmp_path / "t.json").exists()


def test_the_real_worker_answers_a_request(tmp_path):
    shape = S.GemmShape("float32", 1, 64, 48, 32, 32, 1, 48, 1)
    res = W.search_in_process([shape], "quick", 0.5, True)
    assert set(res.choices) == {shape.key()} and res.pid != os.getpid()
    assert tuning.lookup(shape.key())["choice"] == res.choices[shape.key()]
