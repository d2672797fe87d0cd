"""The searched program equals the default one on every BENCHMARKS.md workload (issue 15), at reduced sizes.

Each workload -- W3 (MLP + Adam), W4 (CNN + SGD), W5 (pre-LN transformer layer: forward and the gradients of all
its parameters), W6 (its forward) -- is built twice from the same seed and data, compiled once with
``search="off"`` in an empty tuning cache (the default plan) and once with a search (``"full"`` for W4, so its
Winograd forms are also checked in the compiled step; ``"quick"`` for the others) in another empty cache, and run
for three steps. Oracle: the default program's retrieved values after the last step (losses, updated weights and
optimizer state, gradients, outputs), within 1e-4 of each value's largest magnitude (float32; the searched kernels
sum in other orders). So the test cannot pass by searching nothing, each search must have measured its stages.
"""

import math

import numpy as np
import pytest

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import SGD, Adam, grad


def _mlp():
    nn.init.manual_seed(3)
    rng = np.random.default_rng(3)
    model = nn.Sequential(nn.Linear(48, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))
    cx = lm.Graph()
    x = cx.tensor((32, 48)).set(rng.standard_normal((32, 48)).astype(np.float32))
    y = cx.tensor((32,), "int64").set(rng.integers(0, 10, 32).astype(np.int64))
    loss = F.cross_entropy(model(x), y).retrieve()
    Adam(model.parameters(), lr=1e-2).minimize(loss)
    return cx, [loss, *model.parameters()]


def _cnn():
    # 16 -> 16 channels on 14 x 14 outputs at batch 4: a Winograd layer (196 2 x 2 tiles)
    nn.init.manual_seed(4)
    rng = np.random.default_rng(4)
    model = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 7 * 7, 32), nn.ReLU(), nn.Linear(32, 10))
    cx = lm.Graph()
    x = cx.tensor((4, 1, 18, 18)).set(rng.standard_normal((4, 1, 18, 18)).astype(np.float32))
    y = cx.tensor((4,), "int64").set(rng.integers(0, 10, 4).astype(np.int64))
    loss = F.cross_entropy(model(x), y).retrieve()
    SGD(model.parameters(), lr=0.05, momentum=0.9).minimize(loss)
    return cx, [loss, *model.parameters()]


def _layer(train: bool, batch=2, seq=16, d=32, heads=2, ffn=64):
    rng = np.random.default_rng(5)
    cx = lm.Graph()
    x = cx.tensor((batch, seq, d)).set(rng.standard_normal((batch, seq, d)).astype(np.float32))

    def param(shape):
        return cx.tensor(shape).set((rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32))

    p = {k: param(s) for k, s in (("qkv", (3 * d, d)), ("out", (d, d)), ("ffn1", (ffn, d)), ("ffn2", (d, ffn)))}
    p |= {k + "b": param((s,)) for k, s in (("qkv", 3 * d), ("out", d), ("ffn1", ffn), ("ffn2", d))}
    hd = d // heads
    qkv = (x.layer_norm(-1, 1e-5) @ p["qkv"].T + p["qkvb"]).reshape((batch, seq, 3, heads, hd)).permute(2, 0, 3, 1, 4)
    att = (qkv[0] @ qkv[1].transpose(-1, -2) * (1.0 / math.sqrt(hd))).softmax(-1) @ qkv[2]
    h = x + att.permute(0, 2, 1, 3).reshape((batch, seq, d)) @ p["out"].T + p["outb"]
    f = (h.layer_norm(-1, 1e-5) @ p["ffn1"].T + p["ffn1b"]).gelu("tanh")
    y = h + f @ p["ffn2"].T + p["ffn2b"]
    if not train:
        return cx, [y.retrieve()]
    return cx, [g.retrieve() for g in grad(y.mean(), list(p.values()))]


CASES = {"W3": (_mlp, "quick"), "W4": (_cnn, "full"), "W5": (lambda: _layer(True), "quick"),
         "W6": (lambda: _layer(False), "quick")}


def _run(monkeypatch, tmp_path, case, search):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / search))
    build, _ = CASES[case]
    cx, outs = build()
    cx.compile(device="cpu", search=search, budget_s=5)
    for _ in range(3):
        cx.execute()
    return cx.runtime, [np.array(t.data() if callable(t.data) else t.data, np.float64) for t in outs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_searched_workload_equals_the_default_program(monkeypatch, tmp_path, case):
    level = CASES[case][1]
    _, want = _run(monkeypatch, tmp_path, case, "off")
    rt, got = _run(monkeypatch, tmp_path, case, level)
    assert rt.search_result is not None and rt.search_result.timings, "the GEMM search measured nothing"
    if case == "W4":
        assert rt.prologue_timings, "the operand-fusion search measured nothing"
        assert rt.step_forms is not None and rt.step_forms.forms and rt.step_forms.seconds, rt.step_forms
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4 * max(np.abs(w).max(), 1e-30))
