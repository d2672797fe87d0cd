"""Optimizers, training trajectories and state carrying, against PyTorch (torch.optim / torch.autograd).

Tolerances: per-step losses within rtol 1e-4 of PyTorch's over 20 steps (float32, identical initial weights
and batches); final weights within atol 1e-5 (small models) or rtol 1e-3 of the weight scale (W3/W4).
Optimizer hyperparameter trajectories (every update rule and option) use a small tanh MLP on both backends.
"""

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
from hl_helpers import optimizer_matches_torch
from luminal.graph import GraphError
from luminal.runtime.cpu import CompileStats
from luminal.training import SGD, Adagrad, Adam, AdamW, RMSprop, Trainer, clip_grad_norm, grad, load_checkpoint, \
    save_checkpoint

DEVICES = ["reference", "cpu"]


def _torch_copy(model, tmodel):
    tmodel.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    return tmodel


def _cross_entropy(logits, y):
    onehot = y.unsqueeze(-1).eq(logits.graph.arange(logits.dims[-1], dtype=y.dtype)).cast(logits.dtype)
    return -(logits.log_softmax(-1) * onehot).sum(-1).mean()


def _small_mlp():
    nn.init.manual_seed(1)
    m = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    tm = _torch_copy(m, torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)))
    return m, tm


OPTIMIZERS = [
    (SGD, torch.optim.SGD, dict(lr=0.1)),
    (SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, maximize=False)),
    (Adam, torch.optim.Adam, dict(lr=0.01)),
    (Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    (AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.05)),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.01)),
    (RMSprop, torch.optim.RMSprop, dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01)),
    (Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.01)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(OPTIMIZERS)), ids=lambda k: f"{OPTIMIZERS[k][0].__name__}{k}")
def test_optimizer_matches_torch(case, device):
    opt_cls, torch_cls, kw = OPTIMIZERS[case]
    m, tm = _small_mlp()
    optimizer_matches_torch(m, tm, opt_cls, torch_cls, kw, device, case)


def test_learning_rate_change_needs_no_recompile():
    m, tm = _small_mlp()
    cx = lm.Graph()
    x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
    loss = ((m(x) - y) ** 2).mean().retrieve()
    opt = SGD(m.parameters(), lr=0.1, momentum=0.5)
    opt.minimize(loss)
    cx.compile(device="cpu")
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.5)
    rng = np.random.default_rng(0)
    before = CompileStats.compilations + CompileStats.cache_hits
    for step in range(8):
        xb = rng.standard_normal((4 + step, 5)).astype(np.float32)  # the batch size changes too
        yb = rng.standard_normal((4 + step, 3)).astype(np.float32)
        lr = 0.1 / (1 + step)
        opt.param_groups[0]["lr"] = lr
        for g in topt.param_groups:
            g["lr"] = lr
        x.set(xb)
        y.set(yb)
        cx.execute()
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(xb)) - torch.from_numpy(yb)) ** 2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4)
    assert CompileStats.compilations + CompileStats.cache_hits == before  # no new library was even looked up


def _w3_models(seed=0):
    nn.init.manual_seed(seed)
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    tm = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                             torch.nn.Linear(512, 10))
    return m, _torch_copy(m, tm)


@pytest.mark.parametrize("device", DEVICES)
def test_w3_mlp_adam_trajectory_matches_torch(device):
    """BENCHMARKS.md W3: MLP 784-512-512-10, batch 256, softmax cross-entropy, Adam(1e-3): 20 steps."""
    rng = np.random.default_rng(3)
    m, tm = _w3_models()
    cx = lm.Graph()
    x, y = cx.tensor(("batch", 784)), cx.tensor(("batch",), "int64")
    loss = _cross_entropy(m(x), y).retrieve()
    Adam(m.parameters(), lr=1e-3).minimize(loss)
    cx.compile(device=device)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    for _ in range(20):
        xb = rng.standard_normal((256, 784)).astype(np.float32)
        yb = rng.integers(0, 10, 256)
        x.set(xb)
        y.set(yb)
        cx.execute()
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4)


def test_w4_cnn_sgd_momentum_trajectory_matches_torch():
    """BENCHMARKS.md W4: conv 1->32 k3, ReLU, conv 32->64 k3, ReLU, maxpool 2, linear 9216->128, ReLU, linear 10;
    mean cross-entropy; SGD(lr .01, momentum .9); batch 64 of 28x28: 20 steps on the compiled backend."""
    nn.init.manual_seed(4)
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))
    T = torch.nn
    tm = _torch_copy(m, T.Sequential(T.Conv2d(1, 32, 3), T.ReLU(), T.Conv2d(32, 64, 3), T.ReLU(), T.MaxPool2d(2),
                                     T.Flatten(), T.Linear(9216, 128), T.ReLU(), T.Linear(128, 10)))
    cx = lm.Graph()
    x, y = cx.tensor(("batch", 1, 28, 28)), cx.tensor(("batch",), "int64")
    loss = _cross_entropy(m(x), y).retrieve()
    SGD(m.parameters(), lr=0.01, momentum=0.9).minimize(loss)
    cx.compile(device="cpu")
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(4)
    for _ in range(20):
        xb = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
        yb = rng.integers(0, 10, 64)
        x.set(xb)
        y.set(yb)
        cx.execute()
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(xb)), torch.from_numpy(yb))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-4)
    w, tw = m.state_dict()["0.weight"], tm.state_dict()["0.weight"].numpy()
    np.testing.assert_allclose(w, tw, atol=1e-3 * np.abs(tw).max())


@pytest.mark.parametrize("device", DEVICES)
def test_optimizer_state_round_trip_resumes_exactly(device, tmp_path):
    """Save at step 10, restore into fresh objects, steps 11-20 equal an uninterrupted run."""
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32))
               for _ in range(20)]

    def setup():
        m, _ = _small_mlp()
        cx = lm.Graph()
        x, y = cx.tensor(("b", 5)), cx.tensor(("b", 3))
        loss = ((m(x) - y) ** 2).mean().retrieve()
        opt = Adam(m.parameters(), lr=0.02, amsgrad=True)
        opt.minimize(loss)
        cx.compile(device=device)

        def step(b):
            x.set(b[0])
            y.set(b[1])
            cx.execute()
            return loss.item()
        return m, opt, step

    m, opt, step = setup()
    full = [step(b) for b in batches]
    final = {k: v.copy() for k, v in m.state_dict().items()}

    m, opt, step = setup()
    first = [step(b) for b in batches[:10]]
    path = tmp_path / "ckpt.npz"
    save_checkpoint(str(path), {"model": m.state_dict(), "optim": opt.state_dict()})
    m2, opt2, step2 = setup()
    state = load_checkpoint(str(path))
    m2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    rest = [step2(b) for b in batches[10:]]
    assert first + rest == full  # bit-identical continuation
    for k, v in m2.state_dict().items():
        np.testing.assert_array_equal(v, final[k])


def test_minimize_rejects_bad_input():
    m, _ = _small_mlp()
    with pytest.raises(ValueError, match="learning rate"):
        SGD(m.parameters(), lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        SGD(m.parameters(), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta1"):
        Adam(m.parameters(), betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="unknown hyperparameter"):
        SGD([{"params": list(m.parameters()), "betas": (0.9, 0.9)}], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        SGD([{"params": list(m.parameters())}, {"params": list(m.parameters())[:1]}], lr=0.1)
    with pytest.raises(TypeError, match="single Parameter"):
        SGD(next(iter(m.parameters())), lr=0.1)
    with pytest.raises(ValueError, match="different number"):
        SGD(m.parameters(), lr=0.1).load_state_dict({"state": {}, "param_groups": []})


def test_param_groups_and_unused_parameters():
    """Per-group learning rates; a parameter the loss ignores is left unchanged (PyTorch skips None grads)."""
    m, tm = _small_mlp()
    extra = nn.Parameter(np.ones(3, np.float32))
    cx = lm.Graph()
    x, y = cx.tensor((4, 5)), cx.tensor((4, 3))
    loss = ((m(x) - y) ** 2).mean().retrieve()
    groups = [{"params": [m[0].weight, m[0].bias], "lr": 0.5}, {"params": [m[2].weight, m[2].bias, extra]}]
    SGD(groups, lr=0.05, momentum=0.9).minimize(loss)
    cx.compile(device="cpu")
    tgroups = [{"params": [tm[0].weight, tm[0].bias], "lr": 0.5}, {"params": [tm[2].weight, tm[2].bias]}]
    topt = torch.optim.SGD(tgroups, lr=0.05, momentum=0.9)
    rng = np.random.default_rng(6)
    for _ in range(5):
        xb, yb = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
        x.set(xb)
        y.set(yb)
        cx.execute()
        topt.zero_grad()
        ((tm(torch.from_numpy(xb)) - torch.from_numpy(yb)) ** 2).mean().backward()
        topt.step()
    for name, value in tm.state_dict().items():
        np.testing.assert_allclose(m.state_dict()[name], value.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(extra.data, np.ones(3, np.float32))


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((4, 3)).astype(np.float32) * 3, rng.standard_normal(5).astype(np.float32) * 3
    cx = lm.Graph()
    ta, tb = cx.tensor((4, 3)).set(a), cx.tensor(5).set(b)
    loss = (ta * ta).sum() * 0.5 + (tb.exp()).sum()
    grads = grad(loss, [ta, tb])
    clipped, norm = clip_grad_norm(grads, 2.0)
    for t in clipped + [norm]:
        t.retrieve()
    cx.execute()
    pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((pa * pa).sum() * 0.5 + pb.exp().sum()).backward()
    tnorm = torch.nn.utils.clip_grad_norm_([pa, pb], 2.0)
    np.testing.assert_allclose(norm.item(), tnorm.item(), rtol=1e-5)
    np.testing.assert_allclose(clipped[0].data(), pa.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(clipped[1].data(), pb.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_carry_and_parameter_sync_across_graphs():
    """After a step, Parameter.data and every other graph using the parameter see the new value."""
    m, _ = _small_mlp()
    train, infer = lm.Graph(), lm.Graph()
    xi = infer.tensor((2, 5)).set(np.ones((2, 5), np.float32))
    out = m(xi).retrieve()
    x, y = train.tensor((2, 5)), train.tensor((2, 3))
    loss = ((m(x) - y) ** 2).mean()
    SGD(m.parameters(), lr=0.5).minimize(loss)
    x.set(np.ones((2, 5), np.float32))
    y.set(np.full((2, 3), 4.0, np.float32))
    before = m[0].weight.data.copy()
    train.execute()
    assert not np.array_equal(m[0].weight.data, before)
    infer.execute()
    w0, b0, w2, b2 = (p.data for p in m.parameters())
    expected = np.tanh(np.ones((2, 5), np.float32) @ w0.T + b0) @ w2.T + b2
    np.testing.assert_allclose(out.data(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(GraphError, match="not an input"):
        train.add_carry(x.id, loss.id)


def test_trainer_symbolic_batch_no_recompile_and_checkpoint(tmp_path):
    """The last, smaller batch of an epoch reuses the compiled step; fit() checkpoints and resumes."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((70, 5)).astype(np.float32)
    Y = (X[:, :3].sum(1) > 0).astype(np.int64) + (X[:, 3] > 0).astype(np.int64)
    batches = [(X[i:i + 16], Y[i:i + 16]) for i in range(0, 70, 16)]  # 16, 16, 16, 16, 6

    def make():
        nn.init.manual_seed(2)
        model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
        return model, Trainer(model, Adam(model.parameters(), lr=0.01), _cross_entropy, device="cpu")

    model, trainer = make()
    trainer.fit(batches, epochs=1, progress=False)
    count = CompileStats.compilations + CompileStats.cache_hits
    trainer.fit(batches, epochs=3, progress=False, checkpoint=str(tmp_path / "run.npz"))
    assert CompileStats.compilations + CompileStats.cache_hits == count  # every batch size ran the same code
    assert [h["epoch"] for h in trainer.history] == [1, 2, 3]
    assert trainer.history[-1]["loss"] < trainer.history[0]["loss"]
    ev = trainer.evaluate(batches)
    manual = model  # the evaluation equals a numpy forward of the trained weights
    w0, b0, w2, b2 = (p.data for p in manual.parameters())
    logits = np.maximum(X @ w0.T + b0, 0) @ w2.T + b2
    np.testing.assert_allclose(ev["accuracy"], np.mean(logits.argmax(1) == Y))
    np.testing.assert_allclose(trainer.predict(X[:3]), logits[:3], rtol=1e-5, atol=1e-5)

    # resume from the checkpoint written after epoch 3 and train to epoch 4: equal to training 4 straight
    model_b, trainer_b = make()
    trainer_b.fit(batches, epochs=4, progress=False)
    model_c, trainer_c = make()
    trainer_c.fit(batches, epochs=4, progress=False, checkpoint=str(tmp_path / "run.npz"), resume=True)
    assert trainer_c.epoch == 4 and len(trainer_c.history) == 4
    for (k, a), b in zip(model_b.state_dict().items(), model_c.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=k)
