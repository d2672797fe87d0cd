"""Tensor and module hooks in eager mode against PyTorch CPU (fixed seeds; float32, atol=rtol=1e-5)."""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn

TOL = dict(atol=1e-5, rtol=1e-5)


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pair(mod_lm, mod_t):
    """Give the luminal module the torch module's weights."""
    sd = {k: v.detach().numpy() for k, v in mod_t.state_dict().items()}
    mod_lm.load_state_dict(sd)


def test_tensor_hook_modifies_gradient_on_intermediate_and_leaf():
    xs = _data(3, 4)

    def run(mod, tensor):
        x = tensor(xs, requires_grad=True)
        seen = []
        x.register_hook(lambda g: seen.append(("x", g.numpy().copy())))
        a = x * 2
        a.register_hook(lambda g: g * 10)
        b = a.exp()
        b.retain_grad()
        (b.sum() + a.sum()).backward()
        return x.grad.numpy(), b.grad.numpy(), seen

    gx, gb, seen = run(lm, lm.tensor)
    tgx, tgb, tseen = run(torch, lambda d, **k: torch.tensor(d, **k))
    np.testing.assert_allclose(gx, tgx, **TOL)
    np.testing.assert_allclose(gb, tgb, **TOL)
    assert len(seen) == len(tseen) == 1
    np.testing.assert_allclose(seen[0][1], tseen[0][1], **TOL)


def test_leaf_hook_replaces_accumulated_grad_and_handle_remove():
    x = lm.tensor(_data(4), requires_grad=True)
    h = x.register_hook(lambda g: g.clamp(-0.5, 0.5))
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, 0.5, np.float32))
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, 3.0, np.float32))


def test_hooks_in_order_and_in_autograd_grad():
    x = lm.tensor(_data(3), requires_grad=True)
    y = x * x
    calls = []
    y.register_hook(lambda g: calls.append(1) or g + 1)
    y.register_hook(lambda g: calls.append(2) or g * 2)
    (gx,) = lm.autograd.grad(y.sum(), x)
    tx = torch.tensor(x.numpy(), requires_grad=True)
    ty = tx * tx
    ty.register_hook(lambda g: g + 1)
    ty.register_hook(lambda g: g * 2)
    (tgx,) = torch.autograd.grad(ty.sum(), tx)
    assert calls == [1, 2]
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), **TOL)


def test_hook_errors():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        lm.tensor(_data(3)).register_hook(lambda g: g)
    x = lm.tensor(_data(3), requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g[:2])
    with pytest.raises(RuntimeError, match="shape"):
        y.sum().backward()
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)


def test_forward_pre_and_forward_hooks():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    _pair(m, tm)
    xs = _data(5, 4)
    feats, tfeats = [], []
    h1 = m[0].register_forward_hook(lambda mod, args, out: feats.append(out.numpy().copy()))
    h2 = m[2].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    tm[0].register_forward_hook(lambda mod, args, out: tfeats.append(out.detach().numpy().copy()))
    tm[2].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    out = m(lm.tensor(xs))
    tout = tm(torch.tensor(xs))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), **TOL)
    np.testing.assert_allclose(feats[0], tfeats[0], **TOL)
    m2 = m[1].register_forward_hook(lambda mod, args, out: out * 0)  # replaces the output
    np.testing.assert_allclose(m(lm.tensor(xs)).numpy(), np.broadcast_to(m[2].bias.data, (5, 2)), **TOL)
    for h in (h1, h2, m2):
        h.remove()
    n = len(feats)
    w0, b0, w2, b2 = (p.data for p in m.parameters())
    ref = np.maximum(xs @ w0.T + b0, 0) @ w2.T + b2
    np.testing.assert_allclose(m(lm.tensor(xs)).numpy(), ref, **TOL)
    assert len(feats) == n


def test_graph_only_forward_with_hooked_child_raises_clear_error():
    class GraphOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x) + x.graph.ones(x.dims, x.dtype)

    g = GraphOnly()
    g(lm.tensor(_data(1, 2)))  # no hooks: recorded as one operation
    g.lin.register_forward_hook(lambda m, a, o: None)
    with pytest.raises(NotImplementedError, match="register the hook on the GraphOnly itself"):
        g(lm.tensor(_data(1, 2)))


def test_forward_hooks_with_kwargs_and_prepend():
    lin = nn.Linear(2, 2)
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append("a"))
    lin.register_forward_hook(lambda m, a, o: order.append("b"), prepend=True)
    lin.register_forward_pre_hook(lambda m, a, k: ((a[0] + 1,), k), with_kwargs=True)
    x = _data(1, 2)
    out = lin(lm.tensor(x))
    ref = (x + 1) @ lin.weight.data.T + lin.bias.data
    np.testing.assert_allclose(out.numpy(), ref, **TOL)
    assert order == ["b", "a"]


def test_full_backward_hook_matches_torch():
    torch.manual_seed(1)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    m = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    _pair(m, tm)
    xs = _data(5, 4)

    def run(model, x, to_np):
        rec = []

        def hook(mod, gi, go):
            rec.append(([None if g is None else to_np(g) for g in gi], [to_np(g) for g in go]))
            return (gi[0] * 0.5,)
        model[1].register_full_backward_hook(hook)
        first = []
        model[0].register_full_backward_hook(lambda mod, gi, go: first.append(gi))
        model(x).pow(2).sum().backward()
        return rec, first

    x = lm.tensor(xs, requires_grad=True)
    tx = torch.tensor(xs, requires_grad=True)
    rec, first = run(m, x, lambda g: g.numpy())
    trec, tfirst = run(tm, tx, lambda g: g.detach().numpy())
    assert len(rec) == len(trec) == 1
    np.testing.assert_allclose(rec[0][0][0], trec[0][0][0], **TOL)
    np.testing.assert_allclose(rec[0][1][0], trec[0][1][0], **TOL)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **TOL)
    np.testing.assert_allclose(m[0].weight.grad.numpy(), tm[0].weight.grad.numpy(), **TOL)
    assert len(first) == 1


def test_full_backward_hook_input_without_grad_and_pre_hook():
    lin, tlin = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    _pair(lin, tlin)
    xs = _data(4, 3)
    got, tgot = [], []
    lin.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))
    lin.register_full_backward_hook(lambda m, gi, go: got.append((gi, go[0].numpy())))
    tlin.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))
    tlin.register_full_backward_hook(lambda m, gi, go: tgot.append((gi, go[0].numpy())))
    lin(lm.tensor(xs)).sum().backward()
    tlin(torch.tensor(xs)).sum().backward()
    assert got[0][0] == (None,) and tgot[0][0] == (None,)
    np.testing.assert_allclose(got[0][1], tgot[0][1], **TOL)
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), **TOL)


def test_backward_hook_on_lazy_graph_call_raises():
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda m, gi, go: None)
    cx = lm.Graph()
    with pytest.raises(NotImplementedError, match="eager tensors only"):
        lin(cx.tensor((1, 2)))


def test_forward_hook_fires_on_graph_tensors():
    lin = nn.Linear(2, 2)
    seen = []
    lin.register_forward_hook(lambda m, a, o: seen.append(type(o).__name__))
    cx = lm.Graph()
    lin(cx.tensor((1, 2)))
    assert seen == ["GraphTensor"]


def test_hooked_training_step_replays_without_recompiling():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    m[0].register_forward_hook(lambda mod, a, o: None)
    opt = lm.optim.SGD(m.parameters(), lr=0.01)
    xs = _data(16, 4)
    losses = []
    for _ in range(4):
        loss = m(lm.tensor(xs)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    c = lm.eager.stats()["compiles"]
    for _ in range(3):
        loss = m(lm.tensor(xs)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
    assert lm.eager.stats()["compiles"] == c
    assert losses[-1] < losses[0]


def test_parameter_hook_clips_gradient_like_torch():
    torch.manual_seed(2)
    tlin = torch.nn.Linear(3, 2)
    lin = nn.Linear(3, 2)
    _pair(lin, tlin)
    xs = _data(6, 3) * 10
    handles = [p.register_hook(lambda g: g.clamp(-1.0, 1.0)) for p in lin.parameters()]
    for p in tlin.parameters():
        p.register_hook(lambda g: g.clamp(-1.0, 1.0))
    lin(lm.tensor(xs)).pow(2).sum().backward()
    tlin(torch.tensor(xs)).pow(2).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), tlin.weight.grad.numpy(), **TOL)
    np.testing.assert_allclose(lin.bias.grad.numpy(), tlin.bias.grad.numpy(), **TOL)
    for h in handles:
        h.remove()
    lin.zero_grad()
    lin(lm.tensor(xs)).pow(2).sum().backward()
    assert np.abs(lin.weight.grad.numpy()).max() > 1.0


def test_hooks_see_eager_tensors_for_numpy_arguments():
    lin = nn.Linear(2, 2)
    seen = []
    lin.register_forward_pre_hook(lambda m, a: seen.append(type(a[0]).__name__))
    out = lin(_data(3, 2))
    assert seen == ["Tensor"] and out.shape == (3, 2)
