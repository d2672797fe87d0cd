"""PyTorch-parity gaps found in the issue-17 audit, against PyTorch CPU on both eager devices (reference, cpu):
``cummax``/``cummin`` return torch's ``(values, indices)`` namedtuple, ``unbind`` and ``aminmax`` exist, numpy
arrays and Python scalars are accepted as the first argument of ``lm.<function>`` / ``nn.functional`` (a call
with no luminal tensor at all runs eagerly, as ``module(numpy_array)`` does), gradient accumulation over
micro-batches in the eager loop (one compile), and ``nn.summary``'s parameter counts.

Data are seeded; float32 values within 1e-6 (elementwise and short reductions), training within 1e-4 / 1e-5
(float32 sums in another order), indices and counts exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F


@pytest.fixture(params=["reference", "cpu"], autouse=True)
def device(request):
    prev = lm.get_default_device()
    lm.set_default_device(request.param)
    yield request.param
    lm.set_default_device(prev)


def same(got, want, tol=1e-6):
    got = got.numpy() if isinstance(got, lm.Tensor) else np.asarray(got)
    want = want.detach().numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_return_values_and_indices(name):
    a = np.round(data((3, 6), 1) * 2) / 2  # ties: torch picks the last index of a repeated extreme
    for dim in (0, 1, -1):
        got, want = getattr(lm.tensor(a), name)(dim), getattr(torch.from_numpy(a), name)(dim)
        assert type(got).__name__ == name and got._fields == ("values", "indices") and len(want) == 2
        same(got.values, want.values)
        same(got.indices, want.indices)
        fn = getattr(lm, name)(lm.tensor(a), dim=dim)  # the function form too
        same(fn.indices, want.indices)


def test_unbind_and_aminmax():
    a = data((3, 4, 2), 2)
    t = torch.from_numpy(a)
    for dim in (0, 1, -1):
        got, want = lm.tensor(a).unbind(dim), t.unbind(dim)
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    cx = lm.Graph()  # graph tensors have it too
    parts = cx.tensor(a.shape).set(a).unbind(1)
    for p in parts:
        p.retrieve()
    cx.execute()
    for p, w in zip(parts, t.unbind(1)):
        same(p.data(), w)
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        got, want = lm.tensor(a).aminmax(**kw), t.aminmax(**kw)
        assert got._fields == ("min", "max") and (want.min, want.max) == tuple(want)
        same(got.min, want.min)
        same(got.max, want.max)


def test_numpy_and_scalars_accepted_as_first_argument():
    a, b = data((3, 4), 3), data((4, 3), 4)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    same(lm.exp(a), torch.exp(ta))
    same(lm.matmul(a, lm.tensor(b)), ta @ tb)
    same(lm.add(a, 1.5), ta + 1.5)
    same(lm.atan2(a, b.T), torch.atan2(ta, tb.T))
    same(lm.maximum(a, lm.tensor(b.T)), torch.maximum(ta, tb.T))
    same(lm.sum(a, dim=1), ta.sum(dim=1))
    same(lm.exp(2.0), torch.exp(torch.tensor(2.0)))
    # nn.functional and the free functions with numpy arrays only (no graph to join: eager)
    same(F.relu(a), torch.relu(ta))
    same(F.softmax(a, dim=1), torch.softmax(ta, dim=1))
    same(F.linear(a, b.T), torch.nn.functional.linear(ta, tb.T))
    same(lm.where(a > 0, a, 0.0), torch.where(ta > 0, ta, 0.0))
    same(lm.cat([a, b.T], dim=1), torch.cat([ta, tb.T], dim=1))
    same(lm.stack([a, b.T]), torch.stack([ta, tb.T]))
    same(lm.einsum("ij,jk->ik", a, b), torch.einsum("ij,jk->ik", ta, tb), tol=1e-5)
    # a numpy first argument with a graph tensor elsewhere is refused with a clear error
    g = lm.Graph().tensor((3, 4))
    with pytest.raises(TypeError, match="graph tensor"):
        lm.add(a, g)
    with pytest.raises(TypeError, match="expects a luminal tensor"):
        lm.exp("x")


def test_gradient_accumulation_over_micro_batches_compiles_once():
    """Four micro-batches per optimizer step (each loss scaled by 1/4): parameters and the summed gradients
    follow torch's, and the accumulated steps (4 backward passes and the update each) compile once and replay
    (the last step reads the gradients before the update: a realization of its own, not counted)."""
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))
    model.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    opt, topt = lm.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(tm.parameters(), lr=0.1,
                                                                                        momentum=0.9)
    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((16, 5)).astype(np.float32), rng.standard_normal((16, 2)).astype(np.float32)
    counts = []
    for step in range(10):
        before = lm.eager.stats()["compiles"]
        for k in range(4):
            xb, yb = X[4 * k:4 * k + 4], Y[4 * k:4 * k + 4]
            (F.mse_loss(model(xb), lm.tensor(yb)) / 4).backward()
            (torch.nn.functional.mse_loss(tm(torch.from_numpy(xb)), torch.from_numpy(yb)) / 4).backward()
        if step == 9:
            for p, tp in zip(model.parameters(), tm.parameters()):
                np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5)
        opt.step()
        opt.zero_grad()
        topt.step()
        topt.zero_grad()
        counts.append(lm.eager.stats()["compiles"] - before)
    assert counts[0] == 1 and sum(counts[1:9]) == 0, counts  # 4 micro-batches + step: one graph, then replays
    for (name, v), tv in zip(model.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(v, tv.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_summary_parameter_counts_match_torch():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
                             torch.nn.Linear(8 * 4 * 4, 10))
    total = sum(p.numel() for p in tm.parameters())
    assert nn.parameter_count(model) == total
    model[0].weight.requires_grad = False
    tm[0].weight.requires_grad = False
    trainable = sum(p.numel() for p in tm.parameters() if p.requires_grad)
    assert nn.parameter_count(model, trainable_only=True) == trainable
    text = nn.summary(model)
    assert f"total params: {total:,}" in text and f"trainable params: {trainable:,}" in text
    assert f"non-trainable params: {total - trainable:,}" in text
    for name, child in tm.named_children():  # one row per submodule with its own count
        count = sum(p.numel() for p in child.parameters())
        row = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
        assert row.split()[-1] == f"{count:,}", row
    shared = nn.Linear(4, 4)  # a shared layer counts once, as torch's parameters() yields it once
    twice = nn.Sequential(shared, shared)
    tl = torch.nn.Linear(4, 4)
    assert nn.parameter_count(twice) == sum(p.numel() for p in torch.nn.Sequential(tl, tl).parameters())


def test_nonzero_argwhere_masked_select_realize_eagerly():
    """Data-dependent sizes: eager tensors realize at the call (values against torch, gradients of masked_select
    through the selected entries); a graph tensor raises DataDependentShapeError, lm.jit a JitTraceError."""
    a = np.round(data((3, 4), 6))
    a[1] = 0.0
    t = torch.from_numpy(a)
    x = lm.tensor(a)
    same(x.nonzero(), t.nonzero())
    same(lm.argwhere(x), torch.argwhere(t))
    for g, w in zip(x.nonzero(as_tuple=True), t.nonzero(as_tuple=True)):
        same(g, w)
    for v in (0.0, 2.0):  # 0-d: torch's (0, 0) / (1, 0) shapes
        same(lm.tensor(v).nonzero(), torch.tensor(v).nonzero())
        same(lm.tensor(v).nonzero(as_tuple=True)[0], torch.tensor(v).nonzero(as_tuple=True)[0])
    m = np.array([True, False, True, True])  # broadcast over the rows
    xg, tg = lm.tensor(a, requires_grad=True), t.clone().requires_grad_()
    sel, tsel = lm.masked_select(xg, m), torch.masked_select(tg, torch.from_numpy(m))
    same(sel, tsel)
    w = data(tuple(tsel.shape), 7)
    (sel * lm.tensor(w)).sum().backward()
    (tsel * torch.from_numpy(w)).sum().backward()
    same(xg.grad, tg.grad)
    same(x.masked_select(x > 0), t.masked_select(t > 0))
    with pytest.raises(TypeError, match="bool"):
        x.masked_select(a)
    g = lm.Graph().tensor((3, 4))
    from luminal.hl_ops.subscript import DataDependentShapeError
    for call in (g.nonzero, g.argwhere, lambda: g.masked_select(g > 0), lambda: lm.nonzero(g)):
        with pytest.raises(DataDependentShapeError, match="data-dependent size"):
            call()

    @lm.jit
    def traced(v):
        return v.nonzero()

    with pytest.raises(lm.JitTraceError, match="nonzero"):
        traced(a)


def test_logspace_and_graph_first_creation():
    """lm.logspace (eager, as torch.logspace: float32 within 1 ulp of torch's, integer dtypes exact); lm.eye /
    lm.linspace / lm.logspace with a Graph first build graph nodes, as lm.arange(cx, ...) does."""
    for args, kw in [((0, 2, 5), {}), ((-2, 3, 11), {}), ((0, 3, 4), {"base": 2.0}), ((1, 4, 4), {"dtype": lm.int64}),
                     ((0.5, 1.5, 3), {"dtype": lm.float64})]:
        tkw = {k: (torch.int64 if v is lm.int64 else torch.float64 if v is lm.float64 else v) for k, v in kw.items()}
        got, want = lm.logspace(*args, **kw).numpy(), torch.logspace(*args, **tkw).numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_max_ulp(got, want, maxulp=1) if got.dtype.kind == "f" else np.testing.assert_array_equal(
            got, want)
    with pytest.raises(ValueError, match="steps"):
        lm.logspace(0, 1, -1)
    cx = lm.Graph()
    outs = [lm.eye(cx, 2, 3).retrieve(), lm.linspace(cx, 0.0, 1.0, 5).retrieve(), lm.logspace(cx, 0, 2, 3).retrieve()]
    cx.execute()
    for o, w in zip(outs, [torch.eye(2, 3), torch.linspace(0.0, 1.0, 5), torch.logspace(0, 2, 3)]):
        assert isinstance(o, lm.GraphTensor)
        np.testing.assert_array_max_ulp(o.data(), w.numpy(), maxulp=1)


def test_tensor_from_bfloat16_numpy_and_torch_data():
    """``lm.tensor`` of an ``ml_dtypes.bfloat16`` array or a torch bfloat16 tensor keeps bfloat16 (as
    ``torch.tensor`` of a bfloat16 tensor does); the values and arithmetic equal torch's."""
    import ml_dtypes

    vals = [1.5, -2.25, 3.0, 1e-3, -0.0, float("inf")]
    tt = torch.tensor(vals, dtype=torch.bfloat16)
    for data in (np.array(vals, dtype=ml_dtypes.bfloat16), tt):
        t = lm.tensor(data)
        assert t.dtype == lm.bfloat16
        np.testing.assert_array_equal(t.numpy().astype(np.float32), tt.float().numpy())
        np.testing.assert_array_equal((t * 3.0 + 1.0).numpy().astype(np.float32), (tt * 3.0 + 1.0).float().numpy())
    assert lm.tensor(np.array(vals, dtype=ml_dtypes.bfloat16), dtype=lm.float32).dtype == lm.float32
    with pytest.raises(TypeError, match="data must be numbers"):
        lm.tensor(np.array(["a", "b"]))
