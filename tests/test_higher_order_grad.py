"""Higher-order gradients and ``lm.autograd.grad`` in eager mode, against PyTorch CPU (fixed seeds; float32,
tolerances atol=1e-4, rtol=1e-4 unless stated)."""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn.functional as F

TOL = dict(atol=1e-4, rtol=1e-4)


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_gradient_penalty_matches_torch():
    xs = _data(3, 4)
    x = lm.tensor(xs, requires_grad=True)
    (g,) = lm.autograd.grad((x.sin() * x).sum(), x, create_graph=True)
    assert g.requires_grad
    (g * g).sum().backward()
    tx = torch.tensor(xs, requires_grad=True)
    (tg,) = torch.autograd.grad((tx.sin() * tx).sum(), tx, create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), **TOL)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **TOL)


def test_hessian_vector_product():
    xs, vs = _data(5), _data(5, seed=1)
    x = lm.tensor(xs, requires_grad=True)
    y = (x.tanh() * x * x).sum()
    (g,) = lm.autograd.grad(y, x, create_graph=True)
    (hv,) = lm.autograd.grad(g, x, grad_outputs=lm.tensor(vs))
    assert not hv.requires_grad
    tx = torch.tensor(xs, requires_grad=True)
    (tg,) = torch.autograd.grad((tx.tanh() * tx * tx).sum(), tx, create_graph=True)
    (thv,) = torch.autograd.grad(tg, tx, grad_outputs=torch.tensor(vs))
    np.testing.assert_allclose(hv.numpy(), thv.numpy(), **TOL)


def test_third_order():
    xs = _data(4)
    x = lm.tensor(xs, requires_grad=True)
    (g1,) = lm.autograd.grad((x ** 4).sum(), x, create_graph=True)
    (g2,) = lm.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = lm.autograd.grad(g2.sum(), x)
    np.testing.assert_allclose(g1.numpy(), 4 * xs ** 3, **TOL)
    np.testing.assert_allclose(g2.numpy(), 12 * xs ** 2, **TOL)
    np.testing.assert_allclose(g3.numpy(), 24 * xs, **TOL)


def test_backward_create_graph_then_differentiate_grad():
    xs = _data(3, 3)
    x = lm.tensor(xs, requires_grad=True)
    (x.exp() * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (gg,) = lm.autograd.grad(x.grad.sum(), x)
    tx = torch.tensor(xs, requires_grad=True)
    (tx.exp() * tx).sum().backward(create_graph=True)
    (tgg,) = torch.autograd.grad(tx.grad.sum(), tx)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.detach().numpy(), **TOL)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), **TOL)


def test_maml_inner_loop_matches_torch():
    rng = np.random.default_rng(3)
    ws, bs = rng.standard_normal((2, 4)).astype(np.float32), np.zeros(2, np.float32)
    xa, ya = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    xb, yb = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)

    def run(mod, F_, tensor):
        w = tensor(ws, requires_grad=True)
        b = tensor(bs, requires_grad=True)
        fast = [w, b]
        for _ in range(2):
            loss = F_.mse_loss(F_.linear(tensor(xa), fast[0], fast[1]).tanh(), tensor(ya))
            grads = mod.autograd.grad(loss, fast, create_graph=True)
            fast = [p - 0.1 * g for p, g in zip(fast, grads)]
        outer = F_.mse_loss(F_.linear(tensor(xb), fast[0], fast[1]), tensor(yb))
        outer.backward()
        return outer, w.grad, b.grad

    ours = run(lm, F, lm.tensor)
    ref = run(torch, torch.nn.functional, torch.tensor)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), **TOL)


def test_grad_options_allow_unused_and_materialize():
    x = lm.tensor(_data(3), requires_grad=True)
    z = lm.tensor(_data(3), requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        lm.autograd.grad(y, [x, z])
    gx, gz = lm.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None
    np.testing.assert_allclose(gx.numpy(), 2 * x.numpy(), **TOL)
    _, gz = lm.autograd.grad(y, [x, z], materialize_grads=True)
    np.testing.assert_array_equal(gz.numpy(), np.zeros(3, np.float32))
    assert x.grad is None  # autograd.grad does not accumulate


def test_grad_multiple_outputs_and_intermediate_inputs():
    xs = _data(2, 3)
    x = lm.tensor(xs, requires_grad=True)
    a = x.T  # a view of x: an intermediate input
    y1 = (a * a).sum() + x.sum()
    y2 = a.exp()
    go = _data(3, 2, seed=5)
    ga, gx = lm.autograd.grad([y1, y2], [a, x], grad_outputs=[None, go])
    tx = torch.tensor(xs, requires_grad=True)
    ta = tx.T
    tga, tgx = torch.autograd.grad([(ta * ta).sum() + tx.sum(), ta.exp()], [ta, tx],
                                   grad_outputs=[None, torch.tensor(go)])
    np.testing.assert_allclose(ga.numpy(), tga.numpy(), **TOL)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), **TOL)


def test_backward_twice_accumulates_and_inputs_restricts():
    x = lm.tensor(_data(3), requires_grad=True)
    w = lm.tensor(_data(3, seed=1), requires_grad=True)
    y = (x * w).sum()
    y.backward()
    y.backward(retain_graph=True)  # graphs are kept: no error (torch would need retain_graph on the first call)
    np.testing.assert_allclose(x.grad.numpy(), 2 * w.numpy(), **TOL)
    x.grad = None
    w.grad = None
    lm.autograd.backward([y], inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), x.numpy(), **TOL)


def test_errors():
    x = lm.tensor(_data(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="implicitly created only for one-element outputs"):
        lm.autograd.grad(x * 2, x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        lm.autograd.grad((x * 2).sum(), lm.tensor(_data(3)))
    with pytest.raises(RuntimeError, match="mismatch in shape"):
        lm.autograd.grad(x * 2, x, grad_outputs=np.ones(4, np.float32))
    with pytest.raises(RuntimeError, match="does not require grad"):
        lm.autograd.grad(lm.tensor(_data(3)).sum(), x)
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        lm.autograd.grad((x * 2).sum(), x, is_grads_batched=True)


def test_first_order_grads_stop_without_create_graph():
    x = lm.tensor(_data(3), requires_grad=True)
    (g,) = lm.autograd.grad((x ** 3).sum(), x)
    assert not g.requires_grad
    (x ** 2).sum().backward()
    assert not x.grad.requires_grad


def test_gradient_penalty_through_a_module_matches_torch():
    import luminal.nn as nn
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    m = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    xs = _data(4, 3)
    x = lm.tensor(xs, requires_grad=True)
    (g,) = lm.autograd.grad(m(x).sum(), x, create_graph=True)
    ((g.pow(2).sum(dim=1).sqrt() - 1.0) ** 2).mean().backward()
    tx = torch.tensor(xs, requires_grad=True)
    (tg,) = torch.autograd.grad(tm(tx).sum(), tx, create_graph=True)
    ((tg.pow(2).sum(dim=1).sqrt() - 1.0) ** 2).mean().backward()
    for p, tp in zip(m.parameters(), tm.parameters()):
        # (the last bias does not reach the penalty: torch leaves its grad None, luminal gives zeros -- documented)
        ref = tp.grad.numpy() if tp.grad is not None else np.zeros(p.shape, np.float32)
        np.testing.assert_allclose(p.grad.numpy(), ref, **TOL)
    assert tm[2].bias.grad is None and not m[2].bias.grad.numpy().any()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **TOL)
