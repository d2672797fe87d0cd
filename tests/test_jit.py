"""lm.jit: one trace and one compile per input signature, replay without running Python, retrace on a new
signature, whole training steps (parameters and optimizer state updated in place across calls) against
PyTorch, and the error for data-dependent control flow. Oracles: numpy and PyTorch CPU; float32 tolerances
as stated."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F


@pytest.fixture(params=["reference", "cpu"])
def device(request):
    prev = lm.get_default_device()
    lm.set_default_device(request.param)
    yield request.param
    lm.set_default_device(prev)


def test_forward_traces_once_per_signature(device):
    calls = []

    @lm.jit
    def f(x, w, scale):
        calls.append(1)
        h = (x @ w).relu() * scale
        return h.sum(dim=-1), {"h": h}

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    compiles = lm.eager.stats()["compiles"]
    for batch in (2, 2, 5, 2, 5):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        s, d = f(x, w, 2.0)
        ref = np.maximum(x @ w, 0) * 2.0
        np.testing.assert_allclose(d["h"].numpy(), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s.numpy(), ref.sum(-1), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2 and f.traces == 2  # batch 2 and batch 5: the Python body ran once each
    assert lm.eager.stats()["compiles"] - compiles == 2
    f(lm.tensor(rng.standard_normal((2, 4)).astype(np.float32)), lm.tensor(w), 2.0)  # eager tensors: same signature
    assert len(calls) == 2
    f(x, w, 3.0)  # another Python scalar: another signature
    assert len(calls) == 3
    assert f.__name__ == "f"


def test_new_dtype_or_rank_is_a_new_signature(device):
    """The signature holds dtypes and ranks: a float64 or int64 argument and a rank-3 argument each trace again
    and compute in their own dtype (numpy oracle); repeating an earlier signature replays it."""
    calls = []

    @lm.jit
    def f(x):
        calls.append(1)
        return (x * 3).sum(dim=-1)

    a = np.arange(6).reshape(2, 3)
    for arr in (a.astype(np.float32), a.astype(np.float64), a.astype(np.int64), a.reshape(2, 3, 1).astype(np.float32),
                a.astype(np.float64)):
        got = f(arr).numpy()
        want = (arr * 3).sum(-1)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape)
        np.testing.assert_array_equal(got, want)  # small integers: exact in every dtype
    assert len(calls) == 4 and f.traces == 4


def test_data_dependent_control_flow_raises_naming_the_function():
    @lm.jit
    def branchy(t):
        if t.sum() > 0:
            return t
        return -t

    with pytest.raises(lm.JitTraceError, match=r"lm\.jit\(.*branchy\).*bool\(\)"):
        branchy(np.ones(3, np.float32))

    @lm.jit
    def reads(t):
        return t * float(t.max())

    with pytest.raises(lm.JitTraceError, match=r"reads.*float\(\)"):
        reads(np.ones(3, np.float32))
    # the failed trace leaves eager mode working
    np.testing.assert_array_equal((lm.tensor([1.0, 2.0]) * 2).numpy(), np.array([2.0, 4.0], np.float32))
    with pytest.raises(TypeError, match="function"):
        lm.jit(3)


def test_print_inside_a_trace_shows_a_placeholder(capsys):
    """print(t) while tracing prints the traced tensor's shape and dtype (no value exists yet); replays do not run
    the body, so nothing is printed; the results still match numpy."""
    @lm.jit
    def f(t):
        print(t)
        return t * 2

    a = np.arange(3, dtype=np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(f(a).numpy(), a * 2)
    assert capsys.readouterr().out == "Tensor(shape=(3,), dtype=float32, traced)\n"


@pytest.mark.parametrize("opt_name", ["AdamW", "SGD"])
def test_training_step_matches_torch(device, opt_name):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 4))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))
    model.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    kw = {"lr": 0.01, "weight_decay": 0.1} if opt_name == "AdamW" else {"lr": 0.1, "momentum": 0.5, "nesterov": True}
    opt = getattr(lm.optim, opt_name)(model.parameters(), **kw)
    topt = getattr(torch.optim, opt_name)(tm.parameters(), **kw)
    calls = []

    @lm.jit
    def step(x, y):
        calls.append(1)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    compiles = lm.eager.stats()["compiles"]
    for i in range(12):
        xb = rng.standard_normal((8, 5)).astype(np.float32)
        yb = rng.integers(0, 4, 8)
        if i == 6:  # hyperparameters are read at every call
            opt.param_groups[0]["lr"] /= 2
            topt.param_groups[0]["lr"] /= 2
        loss = step(xb, yb)
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(xb)), torch.tensor(yb))
        tl.backward()
        topt.step()
        topt.zero_grad()
        assert loss.item() == pytest.approx(tl.item(), rel=1e-4, abs=1e-5)
    assert len(calls) == 1
    assert lm.eager.stats()["compiles"] - compiles == 1
    for (k, v), tv in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(v, tv.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert opt.state[model[0].weight]["step"] == 12


def test_symbolic_dims_share_one_trace(device):
    calls = []

    @lm.jit(dynamic={0: {0: "batch"}})
    def f(x, w):
        calls.append(1)
        return (x @ w).relu().sum(dim=-1), (x * 2).mean()

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    compiles = lm.eager.stats()["compiles"]
    for b in (2, 5, 7, 2):
        x = rng.standard_normal((b, 4)).astype(np.float32)
        s, m = f(x, w)
        assert s.shape == (b,)
        np.testing.assert_allclose(s.numpy(), np.maximum(x @ w, 0).sum(-1), rtol=1e-5, atol=1e-5)
        assert m.item() == pytest.approx(float((x * 2).mean()), rel=1e-5)
    assert len(calls) == 1 and lm.eager.stats()["compiles"] - compiles == 1
    f(np.ones((3, 5), np.float32), np.ones((5, 3), np.float32))  # a static dim changed: a new trace
    assert len(calls) == 2

    # a training step over varying batch sizes: one trace, one graph, PyTorch's numbers
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    opt, topt = lm.optim.Adam(model.parameters(), lr=0.01), torch.optim.Adam(tm.parameters(), lr=0.01)

    @lm.jit(dynamic="batch")
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    compiles = lm.eager.stats()["compiles"]
    for b in (8, 3, 8, 5):
        xb, yb = rng.standard_normal((b, 5)).astype(np.float32), rng.integers(0, 3, b)
        loss = step(xb, yb)
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(xb)), torch.tensor(yb))
        tl.backward()
        topt.step()
        topt.zero_grad()
        assert loss.item() == pytest.approx(tl.item(), rel=1e-4, abs=1e-5)
    assert step.traces == 1 and lm.eager.stats()["compiles"] - compiles == 1
    for (k, v), tv in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(v, tv.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    with pytest.raises(ValueError, match="'batch' has sizes 4 and 3"):
        step(np.ones((4, 5), np.float32), np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="out of range"):
        lm.jit(lambda x: x, dynamic={0: {2: "n"}})(np.ones(3, np.float32))


def _one_weight_model():
    lin = nn.Linear(3, 1, bias=False)
    lin.load_state_dict({"weight": np.array([[1.0, -2.0, 0.5]], np.float32)})
    return lin, lm.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)


X_STEP = np.array([[0.3, 0.7, -1.1]], np.float32)


def _torch_one_weight():
    tw = torch.tensor([[1.0, -2.0, 0.5]], requires_grad=True)
    return tw, torch.optim.SGD([tw], lr=0.1, momentum=0.9)


def test_two_steps_in_one_call_chain_like_torch():
    """A second ``opt.step()`` in one traced call sees the first step's parameters and momentum (the trace is cut
    at each step): equal to torch's two eager steps, call after call; the gradient accumulates across the two
    backward passes when ``zero_grad`` is not called between them, as in torch."""
    for zero_between in (True, False):
        lin, opt = _one_weight_model()
        tw, topt = _torch_one_weight()

        @lm.jit
        def two_steps(x):
            losses = []
            for _ in range(2):
                if zero_between:
                    opt.zero_grad()
                loss = (lin(x) ** 2).sum()
                loss.backward()
                opt.step()
                losses.append(loss)
            opt.zero_grad()
            return losses

        for _ in range(3):
            got = [t.numpy() for t in two_steps(X_STEP)]
            want = []
            for _ in range(2):
                if zero_between:
                    topt.zero_grad()
                tl = ((torch.from_numpy(X_STEP) @ tw.T) ** 2).sum()
                tl.backward()
                topt.step()
                want.append(tl.detach().numpy())
            topt.zero_grad()
            np.testing.assert_allclose(got, want, rtol=1e-5)
            np.testing.assert_allclose(np.asarray(lin.weight.data), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
        assert two_steps.traces == 1
        assert opt.state[lin.weight]["step"] == 6


def test_model_used_after_its_step_in_the_same_call_sees_the_update():
    """``step()`` then ``return lin(x)``: the prediction of the updated model (torch's eager order), with Adam
    (bias corrections by the step count, read after the update)."""
    lin, _ = _one_weight_model()
    opt = lm.optim.Adam(lin.parameters(), lr=0.05)
    tw = torch.tensor([[1.0, -2.0, 0.5]], requires_grad=True)
    topt = torch.optim.Adam([tw], lr=0.05)

    @lm.jit
    def step_then_predict(x):
        opt.zero_grad()
        (lin(x) ** 2).sum().backward()
        opt.step()
        mid = lin(x)
        opt.zero_grad()
        (lin(x) ** 2).sum().backward()
        opt.step()
        return mid, lin(x)

    for _ in range(3):
        mid, out = step_then_predict(X_STEP)
        topt.zero_grad()
        ((torch.from_numpy(X_STEP) @ tw.T) ** 2).sum().backward()
        topt.step()
        tmid = (torch.from_numpy(X_STEP) @ tw.T).detach().numpy()
        topt.zero_grad()
        ((torch.from_numpy(X_STEP) @ tw.T) ** 2).sum().backward()
        topt.step()
        np.testing.assert_allclose(mid.numpy(), tmid, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.numpy(), (torch.from_numpy(X_STEP) @ tw.T).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert step_then_predict.traces == 1


def test_one_step_per_call_matches_torch_over_calls():
    """The supported form (step, then zero_grad, the loss returned) over several calls equals torch's SGD with
    momentum step by step."""
    lin, opt = _one_weight_model()

    @lm.jit
    def step(x):
        loss = (lin(x) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    tw = torch.tensor([[1.0, -2.0, 0.5]], requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    for _ in range(4):
        got = step(X_STEP).numpy()
        tloss = ((torch.from_numpy(X_STEP) @ tw.T) ** 2).sum()
        tloss.backward()
        topt.step()
        topt.zero_grad()
        np.testing.assert_allclose(got, tloss.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(lin.weight.data), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.traces == 1
