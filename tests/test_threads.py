"""One graph shared by several threads (issue 19, part 1): each thread's inputs, symbol bindings and results
are its own; runs take turns. Oracle: numpy, per thread, on every iteration; both devices."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import luminal as lm
from luminal.runtime.cpu import find_compiler

DEVICES = ["reference"] + (["cpu"] if find_compiler() is not None else [])


def model(batch):
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor((batch, 16), name="x")
    w = cx.tensor((16, 8), name="w")
    b = cx.tensor(8, name="b")
    y = ((x @ w).relu() + b).sum(-1).retrieve()
    wv = rng.standard_normal((16, 8)).astype(np.float32)
    bv = rng.standard_normal(8).astype(np.float32)
    w.set(wv)
    b.set(bv)
    return cx, x, y, lambda xv: (np.maximum(xv.astype(np.float64) @ wv, 0) + bv).sum(-1)


def hammer(cx, x, y, ref, sizes, iters=40):
    errors, wrong = [], []

    def work(t):
        rng = np.random.default_rng(100 + t)
        try:
            for i in range(iters):
                n = sizes[t % len(sizes)]
                xv = rng.standard_normal((n, 16)).astype(np.float32)
                x.set(xv)
                cx.execute()
                got = y.data()
                if got.shape != (n,) or not np.allclose(got, ref(xv), rtol=1e-4, atol=1e-4):
                    wrong.append((t, i))
        except Exception as e:  # reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert not wrong, f"{len(wrong)} wrong results, e.g. {wrong[:5]}"


@pytest.mark.parametrize("device", DEVICES)
def test_threads_with_fixed_shapes_get_their_own_results(device):
    cx, x, y, ref = model(6)
    cx.compile(device=device)
    hammer(cx, x, y, ref, [6])


@pytest.mark.parametrize("device", DEVICES)
def test_threads_with_different_batch_sizes(device):
    cx, x, y, ref = model("batch")
    cx.compile(device=device)
    hammer(cx, x, y, ref, [1, 5, 17, 64])


@pytest.mark.parametrize("device", DEVICES)
def test_owner_values_are_shared_and_thread_values_private(device):
    cx, x, y, ref = model("batch")
    cx.compile(device=device)
    main_x = np.ones((3, 16), np.float32)
    x.set(main_x)
    cx.execute()
    seen = {}

    def work():
        # the weights set by the creating thread are visible; the main thread's x too, until replaced
        cx.execute()
        seen["inherited"] = y.data()
        mine = np.full((2, 16), 2.0, np.float32)
        x.set(mine)
        cx.execute()
        seen["own"] = y.data()
        seen["dims"] = dict(cx.dyn_map)
    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    np.testing.assert_allclose(seen["inherited"], ref(main_x), rtol=1e-5)
    np.testing.assert_allclose(seen["own"], ref(np.full((2, 16), 2.0)), rtol=1e-5)
    assert seen["dims"] == {"batch": 2}
    # the main thread still has its own input, binding and result
    assert cx.dyn_map["batch"] == 3
    np.testing.assert_allclose(y.data(), ref(main_x), rtol=1e-5)
    cx.execute()
    np.testing.assert_allclose(y.data(), ref(main_x), rtol=1e-5)
