"""The eager engine's replay path (issue 17, item 1): a compiled step replays without re-planning, hands its
results over, and reuses memory only when nothing can observe it. Oracles: PyTorch CPU, the compiled ``Trainer``
(the same model trained by the lazy API), snapshots (copies) of values taken before later steps.

Tolerances: float32 training within 1e-4 of torch after a few steps (sums in another order); eager vs Trainer
within 1e-5 (same update rules, graphs fused differently)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F


@pytest.fixture(autouse=True)
def cpu_device():
    prev = lm.get_default_device()
    lm.set_default_device("cpu")
    yield
    lm.set_default_device(prev)


def _twins(seed=0, sizes=(6, 16, 3)):
    torch.manual_seed(seed)
    tm = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(), torch.nn.Linear(sizes[1], sizes[2]))
    model = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], sizes[2]))
    model.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return model, tm


def _batches(n, batch=20, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, d)).astype(np.float32), rng.integers(0, classes, batch).astype(np.int64))
            for _ in range(n)]


def _torch_train(tm, batches, lr=0.01):
    topt = torch.optim.Adam(tm.parameters(), lr=lr)
    losses = []
    for xb, yb in batches:
        loss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
        loss.backward()
        topt.step()
        topt.zero_grad()
        losses.append(loss.item())
    return losses


def test_eager_loop_equals_trainer_and_torch_with_one_compile():
    """The benchmark's loop (benchmarks/eager_loop.py): 40 steps = 1 compile; parameters equal the Trainer's
    (the lazy API's compiled step on the same data) and PyTorch's."""
    from luminal.training import Adam, Trainer

    batches = _batches(40)
    model, tm = _twins()
    model2, _ = _twins()
    opt = lm.optim.Adam(model.parameters(), lr=0.01)
    trainer = Trainer(model2, Adam(model2.parameters(), lr=0.01), F.cross_entropy, device="cpu")
    before = lm.eager.stats()["compiles"]
    losses, trainer_losses = [], []
    for xb, yb in batches:
        loss = F.cross_entropy(model(lm.from_numpy(xb)), lm.from_numpy(yb))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        trainer_losses.append(trainer.train_step((xb, yb)))
    assert lm.eager.stats()["compiles"] - before == 1
    np.testing.assert_allclose(losses, trainer_losses, rtol=1e-5, atol=1e-6)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=k)
    torch_losses = _torch_train(tm, batches)
    np.testing.assert_allclose(losses, torch_losses, rtol=2e-4, atol=2e-5)
    for (k, a), b in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_views_of_handed_over_values_are_never_overwritten():
    """Results are handed to the caller and their memory is reused only when nothing references it: holding only a
    *view* (of an old parameter, an optimizer moment, a gradient, a loss) keeps the memory out of reuse."""
    batches = _batches(8)
    model, tm = _twins()
    opt = lm.optim.Adam(model.parameters(), lr=0.1)
    w = model[0].weight
    views = []  # (view, snapshot of its values)

    def keep(view):
        views.append((view, np.array(view, copy=True)))

    keep(w.data[:2].T)  # a view of the initial parameter array, the array itself dropped below
    for xb, yb in batches:
        loss = F.cross_entropy(model(lm.from_numpy(xb)), lm.from_numpy(yb))
        loss.backward()
        keep(w.grad.numpy()[1:])               # a view of this step's gradient
        opt.step()
        keep(opt.state[w]["exp_avg"][0])       # a view of this step's first moment
        keep(loss.numpy().reshape(1))           # a view of the loss
        keep(model[2].bias.data[::2])           # a view of the new parameter
        opt.zero_grad()
    for k, (view, snap) in enumerate(views):
        np.testing.assert_array_equal(view, snap, err_msg=f"view {k} changed")
    torch_losses = _torch_train(tm, batches, lr=0.1)
    for (k, a), b in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert len(torch_losses) == len(batches)


def test_dropped_results_are_written_again_held_ones_never():
    """Graph API ``data(copy=False)``: an array the caller keeps is never written by later runs; one the caller
    dropped is written again (no new allocation per run); values are numpy's."""
    cx = lm.Graph()
    x = cx.tensor((3, 4))
    y = (x * 2.0 + 1.0).retrieve()
    cx.compile(device="cpu")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4)]
    x.set(inputs[0])
    cx.execute()
    held = y.data(copy=False)
    view = held[1:]  # only a view survives below
    np.testing.assert_allclose(held, inputs[0] * 2 + 1)
    del held
    x.set(inputs[1])
    cx.execute()
    np.testing.assert_allclose(view, inputs[0][1:] * 2 + 1)  # a view keeps its memory out of reuse
    out = y.data(copy=False)
    np.testing.assert_allclose(out, inputs[1] * 2 + 1)
    del view, out  # nothing refers to either result now: the next runs may write into their memory
    for k in (2, 3):
        x.set(inputs[k])
        cx.execute()
        np.testing.assert_allclose(y.data(copy=False), inputs[k] * 2 + 1)
    kept = y.data(copy=False)
    x.set(inputs[2])
    cx.execute()
    np.testing.assert_allclose(kept, inputs[3] * 2 + 1)  # held: untouched
    np.testing.assert_allclose(y.data(), inputs[2] * 2 + 1)
    kept = y.data(copy=False)
    x.set(inputs[3])
    cx.execute()
    np.testing.assert_allclose(kept, inputs[2] * 2 + 1)  # held: untouched
    np.testing.assert_allclose(y.data(), inputs[3] * 2 + 1)


def test_optimizer_structure_changes_and_cleared_state_follow_torch():
    """The cached per-structure step plan follows the parameters that have gradients (a frozen layer), and state
    cleared between steps is created again, as in torch."""
    batches = _batches(9)
    model, tm = _twins()
    # (one group per layer: luminal's Adam counts steps per group, torch per parameter; a frozen layer's group
    # then lags behind as a whole, as torch's parameters do)
    opt = lm.optim.Adam([{"params": model[0].parameters()}, {"params": model[2].parameters()}], lr=0.05)
    topt = torch.optim.Adam([{"params": tm[0].parameters()}, {"params": tm[2].parameters()}], lr=0.05)
    for step, (xb, yb) in enumerate(batches):
        frozen = step in (3, 4)
        for p, tp in zip(model[0].parameters(), tm[0].parameters()):
            p.requires_grad = not frozen
            tp.requires_grad_(not frozen)
        if step == 6:
            opt.state.clear()
            topt.state.clear()
        loss = F.cross_entropy(model(lm.from_numpy(xb)), lm.from_numpy(yb))
        loss.backward()
        opt.step()
        opt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
        tl.backward()
        topt.step()
        topt.zero_grad()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4, atol=1e-5)
    for (k, a), b in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_child_switched_to_eval_alone_is_a_new_graph():
    """A submodule's training flag is part of the module call's structure (``model[1].eval()`` alone)."""
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(5, 64), torch.nn.Dropout(0.5))
    model = nn.Sequential(nn.Linear(5, 64), nn.Dropout(0.5))
    model.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    train_out = model(x).numpy()
    assert (train_out == 0).mean() > 0.2  # dropout active
    model[1].eval()
    tm[1].eval()
    np.testing.assert_allclose(model(x).numpy(), tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_threads_replaying_one_graph_get_their_own_results():
    """Two threads replay the same compiled graph (same structure, their own inputs) many times: each thread's
    results are its own and stay intact (handed-over arrays are reused per thread)."""
    model, tm = _twins()
    rng = np.random.default_rng(1)
    data = {k: [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(30)] for k in (0, 1)}
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def work(k):
        try:
            barrier.wait()
            results[k] = [model(lm.from_numpy(a)).sum(dim=1).numpy() for a in data[k]]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with torch.no_grad():
        for k in (0, 1):
            for got, a in zip(results[k], data[k]):
                np.testing.assert_allclose(got, tm(torch.from_numpy(a)).sum(1).numpy(), rtol=1e-5, atol=1e-5)


def test_kept_losses_do_not_slow_or_change_replay():
    """Realized losses that keep their history (they require grad) are not recomputed and do not change the
    compiled graph: 30 steps with every loss kept = 1 compile, losses equal torch's."""
    batches = _batches(30)
    model, tm = _twins()
    opt = lm.optim.Adam(model.parameters(), lr=0.01)
    before = lm.eager.stats()["compiles"]
    kept = []
    for xb, yb in batches:
        loss = F.cross_entropy(model(lm.from_numpy(xb)), lm.from_numpy(yb))
        loss.backward()
        opt.step()
        opt.zero_grad()
        kept.append(loss)
    assert lm.eager.stats()["compiles"] - before == 1
    np.testing.assert_allclose([float(l) for l in kept], _torch_train(tm, batches), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("change", ["weight_decay", "maximize", "nesterov"])
def test_changing_a_structural_group_option_rebuilds_the_update(change):
    """An option the update's graph depends on (weight_decay switched on, maximize, nesterov) changed between two
    eager steps takes effect, as in torch (the replayed update of the old structure would ignore it); a learning
    rate change keeps the compiled update."""
    model, tm = _twins(3)
    opt = lm.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    for step, (x, y) in enumerate(_batches(6, seed=3)):
        if step == 3:
            value = {"weight_decay": 0.1, "maximize": True, "nesterov": True}[change]
            for g in opt.param_groups + topt.param_groups:
                g[change] = value
                g["lr"] = 0.02
        loss = F.cross_entropy(model(lm.tensor(x)), lm.tensor(y))
        loss.backward()
        opt.step()
        opt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        topt.zero_grad()
        np.testing.assert_allclose(float(loss), float(tl), rtol=1e-4, err_msg=f"step {step}")
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("opt_name", ["Adam", "NAdam", "RAdam"])
def test_parameters_of_one_group_keep_their_own_step_counts(opt_name):
    """A layer without a gradient for the first steps (its branch unused) starts its bias corrections at its own
    first step, as torch counts steps per parameter; the other layers of the same group keep theirs."""
    torch.manual_seed(5)
    ta, tb = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    a, b = nn.Linear(6, 3), nn.Linear(6, 3)
    a.load_state_dict({k: v.detach().numpy() for k, v in ta.state_dict().items()})
    b.load_state_dict({k: v.detach().numpy() for k, v in tb.state_dict().items()})
    opt = getattr(lm.optim, opt_name)(list(a.parameters()) + list(b.parameters()), lr=0.05)
    topt = getattr(torch.optim, opt_name)(list(ta.parameters()) + list(tb.parameters()), lr=0.05)
    rng = np.random.default_rng(5)
    for step in range(7):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        use_b = step >= 2 and step != 4  # b has no gradient at steps 0, 1 and 4
        out = a(lm.tensor(x)) + (b(lm.tensor(x)) * 0.5 if use_b else 0.0)
        tout = ta(torch.from_numpy(x)) + (tb(torch.from_numpy(x)) * 0.5 if use_b else 0.0)
        (out * out).mean().backward()
        (tout * tout).mean().backward()
        opt.step()
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
    for mod, tmod in ((a, ta), (b, tb)):
        for k, v in tmod.state_dict().items():
            np.testing.assert_allclose(mod.state_dict()[k], v.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


def test_replay_check_tells_apart_records_that_differ_only_in_sharing():
    """A realization is checked against the key last used for outputs like it (same count, same last operation)
    instead of re-walking the records: records with that operation but another sharing of leaves or operations
    (``x * x`` vs ``x * y``; one ``x + 1`` used twice vs two) get their own graph and their own values; the same
    structure again replays (a cache hit, no compile)."""
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2))
    x, y = lm.tensor(a), lm.tensor(b)
    cases = [(lambda: x * x, a * a), (lambda: x * y, a * b),
             (lambda: (lambda s: s * s)(x + 1), (a + 1) * (a + 1)), (lambda: (x + 1) * (x + 1), (a + 1) * (a + 1)),
             (lambda: (x + 1) * (y + 1), (a + 1) * (b + 1))]
    compiles = lm.eager.stats()["compiles"]
    for rep in range(3):
        for fn, want in cases:
            before = lm.eager.stats()
            np.testing.assert_allclose(fn().numpy(), want, rtol=1e-6)
            after = lm.eager.stats()
            if rep:  # every structure was built in the first round: later rounds replay
                assert after["compiles"] == before["compiles"]
                assert after["cache_hits"] == before["cache_hits"] + 1
    assert lm.eager.stats()["compiles"] - compiles == len(cases)
    with lm.no_grad():  # same operation, another leaf shape: its own graph
        z = lm.tensor(rng.standard_normal((2, 5)).astype(np.float32))
        np.testing.assert_allclose((z * z).numpy(), z.numpy() ** 2, rtol=1e-6)
    assert lm.eager.stats()["compiles"] - compiles == len(cases) + 1


def test_internal_references_count_an_array_bound_to_two_inputs_twice():
    """The donation check subtracts the references the graph's input slots hold: an array bound to two inputs
    is held twice (so it is not taken for free while one is still bound)."""
    from luminal.eager._realize import run_plan

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = a + 1
    with lm.no_grad():
        x, y, z = lm.from_numpy(a), lm.from_numpy(a), lm.from_numpy(b)
        out = (x + y) * z
    values, entry = run_plan([out._v])
    np.testing.assert_allclose(values[0], (a + a) * b)
    counts = entry.internal_refs()
    assert counts[id(a)] == 2 and counts[id(b)] == 1
    with lm.no_grad():
        out = x * z  # an array of its own in every slot
    values, entry = run_plan([out._v])
    np.testing.assert_allclose(values[0], a * b)
    counts = entry.internal_refs()
    assert counts[id(a)] == 1 and counts[id(b)] == 1


def test_update_results_are_recorded_again_only_when_nothing_holds_them():
    """An optimizer step records its update's result values again from the last step when nothing else holds
    them; a traced step (its trace holds its values) called between eager steps of the same optimizer still
    follows torch: the eager steps never take the traced values over."""
    model, tm = _twins(seed=2)
    opt = lm.optim.Adam(model.parameters(), lr=0.01)
    topt = torch.optim.Adam(tm.parameters(), lr=0.01)

    @lm.jit
    def traced_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for i, (xb, yb) in enumerate(_batches(12)):
        if i % 3 == 1:
            loss = traced_step(xb, yb).item()
        else:
            loss = F.cross_entropy(model(lm.from_numpy(xb)), lm.from_numpy(yb))
            loss.backward()
            opt.step()
            opt.zero_grad()
            loss = loss.item()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
        tl.backward()
        topt.step()
        topt.zero_grad()
        assert loss == pytest.approx(tl.item(), rel=1e-4, abs=1e-5), i
    for (k, a), b in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert opt.state[model[0].weight]["step"] == 12
