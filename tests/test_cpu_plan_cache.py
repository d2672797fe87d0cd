"""The CPU runtime's cache of memory plans (an LRU keyed by the symbol values) and the tuning-cache look-up of
``search="off"`` at bindings that appear after compile().

Oracles: numpy (float64) and PyTorch for a training trajectory; plan reuse is asserted by counting placements
(``CPURuntime.plans_built`` and a patched ``_Layout.place``), never by timing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import cpu as C
from luminal.runtime import cpu_plan
from luminal.runtime import search as S
from luminal.runtime import tuning
from luminal.runtime.cpu import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


def mlp(seed=0, hidden=24):
    """x (batch, 16) -> relu(x @ w1) @ w2 -> (batch, 8), with its numpy reference."""
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    x = cx.tensor(("batch", 16), name="x")
    w1 = cx.tensor((16, hidden), name="w1")
    w2 = cx.tensor((hidden, 8), name="w2")
    y = ((x @ w1).relu() @ w2).retrieve()
    w1v = rng.standard_normal((16, hidden)).astype(np.float32)
    w2v = rng.standard_normal((hidden, 8)).astype(np.float32)
    w1.set(w1v)
    w2.set(w2v)
    return cx, x, y, lambda xv: np.maximum(xv.astype(np.float64) @ w1v, 0) @ w2v


def close(got, ref):
    return got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.fixture
def placements(monkeypatch):
    """Counts memory placements (each is one plan built)."""
    count = {"n": 0}
    real = cpu_plan._Layout.place

    def place(self, sizes):
        count["n"] += 1
        return real(self, sizes)
    monkeypatch.setattr(cpu_plan._Layout, "place", place)
    return count


# ------------------------------------------------------------------------------------------ plan reuse
def test_alternating_bindings_reuse_their_plans(placements):
    cx, x, y, ref = mlp()
    cx.compile(device="cpu")
    rt = cx.runtime
    rng = np.random.default_rng(1)
    for i in range(20):
        b = (1, 7)[i % 2]
        xv = rng.standard_normal((b, 16)).astype(np.float32)
        x.set(xv)
        cx.execute()
        assert close(y.data(), ref(xv)), i
    assert placements["n"] == rt.plans_built <= 2  # one per binding set, none at the 18 later runs
    assert rt.plan_hits >= 18
    assert len(rt._entries) == 2


def test_copy_false_arrays_stay_valid_across_alternating_bindings():
    cx, x, y, ref = mlp(seed=2)
    cx.compile(device="cpu")
    rng = np.random.default_rng(3)
    handed = []  # (array handed over with copy=False, a copy of its value at that time, reference)
    for i in range(12):
        b = (1, 7, 3)[i % 3]
        xv = rng.standard_normal((b, 16)).astype(np.float32)
        x.set(xv)
        cx.execute()
        arr = y.data(copy=False)
        assert close(arr, ref(xv))
        handed.append((arr, arr.copy(), ref(xv)))
        if i % 4 == 3:  # sometimes a copy instead: the runtime keeps reusing its own array then
            x.set(xv)
            cx.execute()
            assert close(y.data(), ref(xv))
    for arr, snapshot, r in handed:  # no later run (any bindings) wrote into an array already handed out
        np.testing.assert_array_equal(arr, snapshot)
        assert close(arr, r)
    assert len({id(a) for a, _, _ in handed}) == len(handed)


def test_more_binding_sets_than_the_cache_holds_stay_correct(placements):
    cx, x, y, ref = mlp(seed=4)
    cx.compile(device="cpu")
    rt = cx.runtime
    rng = np.random.default_rng(5)
    sizes = list(range(1, C.PLAN_CACHE_SIZE + 5)) * 2 + [C.PLAN_CACHE_SIZE + 4, 1, C.PLAN_CACHE_SIZE + 4]
    for b in sizes:
        xv = rng.standard_normal((b, 16)).astype(np.float32)
        x.set(xv)
        cx.execute()
        assert close(y.data(), ref(xv)), b
    assert len(rt._entries) == C.PLAN_CACHE_SIZE  # bounded


def test_arena_shrinks_when_a_huge_binding_is_evicted():
    cx, x, y, ref = mlp(seed=6, hidden=256)
    cx.compile(device="cpu")
    rt = cx.runtime
    rng = np.random.default_rng(7)
    xv = rng.standard_normal((4096, 16)).astype(np.float32)
    x.set(xv)
    cx.execute()
    assert close(y.data(), ref(xv))
    big = rt._arena.nbytes
    for b in range(1, C.PLAN_CACHE_SIZE + 2):  # small bindings do not reuse the huge plan; it gets evicted
        xv = rng.standard_normal((b, 16)).astype(np.float32)
        x.set(xv)
        cx.execute()
        assert close(y.data(), ref(xv)), b
    assert rt._arena.nbytes < big / 10


def test_growing_symbol_replans_geometrically(placements):
    """A symbol growing by one per run (a KV cache of bucket 1): the sizes fit the last plan's headroom most of
    the time."""
    cx = lm.Graph()
    past = cx.tensor(("past", 8), name="past")
    q = cx.tensor((1, 8), name="q")
    scores = (q @ past.permute((1, 0))).softmax(-1)
    out = (scores @ past).retrieve()
    cx.compile(device="cpu")
    rng = np.random.default_rng(8)
    qv = rng.standard_normal((1, 8)).astype(np.float32)
    q.set(qv)
    for n in range(1, 101):
        pv = rng.standard_normal((n, 8)).astype(np.float32)
        past.set(pv)
        cx.execute()
        s = qv.astype(np.float64) @ pv.T
        p = np.exp(s - s.max())
        p /= p.sum()
        assert close(out.data(), p @ pv), n
    assert placements["n"] <= 12  # about log_1.5(100 * 32 / 64) plus the first ones, not 100


def test_carried_training_state_across_alternating_batch_sizes():
    import torch

    import luminal.nn as nn
    from luminal.training import SGD

    nn.init.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    tmodel = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    cx = lm.Graph()
    x, t = cx.tensor(("batch", 5)), cx.tensor(("batch", 3))
    loss = ((model(x) - t) ** 2).mean().retrieve()
    SGD(model.parameters(), lr=0.1, momentum=0.9).minimize(loss)  # weights and momenta carried between runs
    cx.compile(device="cpu")
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(9)
    for step in range(16):
        b = (1, 7)[step % 2]
        xb = rng.standard_normal((b, 5)).astype(np.float32)
        tb = rng.standard_normal((b, 3)).astype(np.float32)
        x.set(xb)
        t.set(tb)
        cx.execute()
        topt.zero_grad()
        tl = ((tmodel(torch.from_numpy(xb)) - torch.from_numpy(tb)) ** 2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4, err_msg=f"step {step}")
    for (k, a), b in zip(model.state_dict().items(), tmodel.state_dict().values()):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-5, err_msg=k)
    assert cx.runtime.plans_built <= 2


def test_threads_with_more_bindings_than_the_cache():
    cx, x, y, ref = mlp(seed=10)
    cx.compile(device="cpu")
    errors, wrong = [], []

    def work(t):
        rng = np.random.default_rng(100 + t)
        try:
            for i in range(30):
                b = 1 + (t * 3 + i) % (C.PLAN_CACHE_SIZE + 4)
                xv = rng.standard_normal((b, 16)).astype(np.float32)
                x.set(xv)
                cx.execute()
                if not close(y.data(), ref(xv)):
                    wrong.append((t, i))
        except Exception as e:  # reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[:3]
    assert not wrong, wrong[:5]


# ------------------------------------------------------------------------------------------ search="off"
def symbolic_matmul(seed=0):
    rng = np.random.default_rng(seed)
    cx = lm.Graph()
    a = cx.tensor(("n", 24))
    w = cx.tensor((24, 44))
    out = (a @ w).retrieve()
    wv = rng.standard_normal((24, 44)).astype(np.float32)
    w.set(wv)
    return cx, a, out, wv, rng


def test_tuning_entries_are_read_once_until_the_file_changes(monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "tuning_path", lambda: str(tmp_path / "tuning.json"))
    reads = {"n": 0}
    real = tuning._read

    def counting(path, warn=True):
        reads["n"] += 1
        return real(path, warn)
    monkeypatch.setattr(tuning, "_read", counting)
    tuning.store("gemm/float32/b1/m1n2k3/ak1/bk1", {"choice": "blas", "seconds": 1e-6})
    reads["n"] = 0
    for _ in range(5):
        assert "gemm/float32/b1/m1n2k3/ak1/bk1" in tuning.entries()
    assert reads["n"] == 1
    tuning.store("gemm/float32/b1/m4n5k6/ak1/bk1", {"choice": "blas", "seconds": 1e-6})
    reads["n"] = 0
    for _ in range(3):
        assert "gemm/float32/b1/m4n5k6/ak1/bk1" in tuning.entries()
    assert reads["n"] == 1  # the new file is read once more


def test_search_off_uses_a_winner_cached_for_bindings_seen_after_compile(monkeypatch):
    cx, a, out, wv, rng = symbolic_matmul(11)
    shape = S.GemmShape("float32", 1, 12, 44, 24, 24, 1, 1, 44)
    own = [c for c in S.candidates(shape, "quick", True) if c != S.default_choice("float32", True)][0]
    cx.compile(device="cpu", search="off")  # n unbound: nothing looked up yet
    rt = cx.runtime
    (i,) = rt.gemm_table
    key = S.program_shapes(rt.program, {"n": 12})[i].key()
    tuning.store(key, {"choice": own, "seconds": 1e-6, "level": "quick"})  # as a search elsewhere would

    def no_search(*args, **kwargs):
        raise AssertionError("search='off' must not measure")
    monkeypatch.setattr(S, "search_gemms", no_search)
    for n in (5, 12, 5, 12, 30):
        av = rng.standard_normal((n, 24)).astype(np.float32)
        a.set(av)
        cx.execute()
        assert close(out.data(), av.astype(np.float64) @ wv), n
    assert rt.choices_at({"n": 12})[i] == own
    assert rt.choices_at({"n": 5})[i] == S.default_choice("float32", rt.blas)
    assert "== 12 &&" in rt.source  # the generated code dispatches the cached winner at that size


def test_search_off_picks_the_winner_of_a_search_run_in_another_process():
    n = 37
    script = textwrap.dedent(f"""
        import numpy as np, luminal as lm
        cx = lm.Graph()
        a = cx.tensor(("n", 24)); w = cx.tensor((24, 44)); out = (a @ w).retrieve()
        w.set(np.ones((24, 44), np.float32))
        cx.compile(device="cpu", search="quick", budget_s=2)
        a.set(np.ones(({n}, 24), np.float32)); cx.execute()
        print(list(cx.runtime.search_result.choices.items())[0])
    """)
    env = dict(os.environ)  # the session's isolated LUMINAL_CACHE_DIR
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cx, a, out, wv, rng = symbolic_matmul(12)
    cx.compile(device="cpu", search="off")
    rt = cx.runtime
    (i,) = rt.gemm_table
    key = S.program_shapes(rt.program, {"n": n})[i].key()
    entry = tuning.entries().get(key)
    assert entry is not None and key in done.stdout  # written by the other process
    for m in (3, n, 3):
        av = rng.standard_normal((m, 24)).astype(np.float32)
        a.set(av)
        cx.execute()
        assert close(out.data(), av.astype(np.float64) @ wv), m
    assert rt.choices_at({"n": n})[i] == entry["choice"]
