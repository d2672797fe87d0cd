"""Recurrent layers (``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and the cells) against ``torch.nn`` on CPU.

Each case loads the torch module's ``state_dict`` into the luminal one and compares, in one graph (one compile on
the cpu backend): the forward outputs and final states (rtol/atol 1e-5) and the gradients of a weighted sum of
every output with respect to the input, the initial states and every parameter against ``torch.autograd``
(rtol/atol 1e-4). Sizes are small (hidden <= 16, seq <= 6) so the file stays fast on both backends.
"""

import math

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
from luminal.graph import GraphError
from luminal.nn.rnn import RNNBase
from luminal.training import grad

FWD = dict(rtol=1e-5, atol=1e-5)
GRAD = dict(rtol=1e-4, atol=1e-4)


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pair(kind, *args, **kwargs):
    """A torch module and a luminal module of the same class and arguments, the luminal one holding torch's
    weights."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, kind)(*args, **kwargs)
    m = getattr(nn, kind)(*args, **kwargs)
    assert list(m.state_dict()) == list(tm.state_dict())
    m.load_state_dict(tm.state_dict())
    return tm, m


def _flat(out):
    """The tensors of ``(output, h_n)`` / ``(output, (h_n, c_n))`` / ``h'`` / ``(h', c')`` as a flat list."""
    if not isinstance(out, (tuple, list)):
        return [out]
    return [t for o in out for t in _flat(o)]


def _compare(cases):
    """Forward (outputs, final states) and gradients of ``sum_k <out_k, r_k>`` w.r.t. inputs, initial states and
    parameters, for several ``(label, torch module, luminal module, inputs, training)`` cases built into one
    graph (one compile). ``inputs``: the positional arguments as numpy arrays, None or a tuple of arrays (LSTM's
    ``(h_0, c_0)``); trailing Nones are left out of the call (the default path)."""
    cx = lm.Graph()
    checks, l_loss, l_targets = [], None, []
    for label, tm, m, inputs, training in cases:
        tm.train(training)
        m.train(training)
        t_args, l_args, l_leaves, t_leaves = [], [], [], []

        def convert(a):
            if a is None:
                return None, None
            if isinstance(a, tuple):
                pairs = [convert(b) for b in a]
                return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
            tt = torch.tensor(a, requires_grad=True)
            lt = cx.tensor(a.shape).set(a)
            t_leaves.append(tt)
            l_leaves.append(lt)
            return tt, lt

        for a in inputs:
            tt, lt = convert(a)
            t_args.append(tt)
            l_args.append(lt)
        while t_args and t_args[-1] is None:
            t_args.pop()
            l_args.pop()
        t_out = _flat(tm(*t_args))
        l_out = _flat(m(*l_args))
        assert len(t_out) == len(l_out), label
        weights = [_rand(tuple(t.shape), 100 + k) for k, t in enumerate(t_out)]
        t_loss = sum((t * torch.from_numpy(w)).sum() for t, w in zip(t_out, weights))
        for t, w in zip(l_out, weights):
            term = (t * cx.tensor(w.shape).set(w)).sum()
            l_loss = term if l_loss is None else l_loss + term
        t_params = [p for _, p in tm.named_parameters()]
        t_grads = torch.autograd.grad(t_loss, t_leaves + t_params, allow_unused=True)
        names = [f"input {k}" for k in range(len(t_leaves))] + [n for n, _ in tm.named_parameters()]
        targets = l_leaves + [p for _, p in m.named_parameters()]
        assert len(targets) == len(t_grads), label
        checks.append((label, t_out, l_out, names, t_grads, len(l_targets), len(targets)))
        l_targets += targets
    l_grads = grad(l_loss, l_targets, allow_unused=True)  # (W_hh of a cell without a state is unused)
    for t in [t for c in checks for t in c[2]] + [g for g in l_grads if g is not None]:
        t.retrieve()
    cx.execute()
    for label, t_out, l_out, names, t_grads, start, count in checks:
        for k, (t, lt) in enumerate(zip(t_out, l_out)):
            assert tuple(lt.data().shape) == tuple(t.shape), (label, k)
            np.testing.assert_allclose(lt.data(), t.detach().numpy(), **FWD, err_msg=f"{label}: output {k}")
        for name, tg, lg in zip(names, t_grads, l_grads[start:start + count]):
            if lg is None:  # W_hh of a cell called without a state: unused here, zeros in torch (a zero state)
                assert tg is None or not tg.any(), (label, name)
                continue
            np.testing.assert_allclose(lg.data(), tg.numpy(), **GRAD, err_msg=f"{label}: gradient of {name}")


# ------------------------------------------------------------------------------------------------ sequence layers
L, N, I, H = 3, 2, 3, 5


def _seq_inputs(kind, batched, batch_first, h0, layers, directions, hidden, proj=0, seed=0):
    x_shape = ((N, L, I) if batch_first else (L, N, I)) if batched else (L, I)
    x = _rand(x_shape, seed)
    if not h0:
        return [x]
    lead = (layers * directions, N) if batched else (layers * directions,)
    h = _rand(lead + (proj or hidden,), seed + 1)
    if kind == "LSTM":
        return [x, (h, _rand(lead + (hidden,), seed + 2))]
    return [x, h]


SEQ_CASES = [
    # (kind, constructor kwargs, batched, h0): together they cover 2 layers, both directions (with an h0 for each
    # row), batch_first, unbatched inputs, no bias, relu and LSTM projections, with and without initial states
    ("RNN", dict(), True, True),
    ("RNN", dict(num_layers=2, bidirectional=True, batch_first=True), True, False),
    ("RNN", dict(nonlinearity="relu", bias=False, batch_first=True), False, True),  # (unbatched: no batch dim)
    ("RNN", dict(nonlinearity="relu", num_layers=2), True, True),
    ("LSTM", dict(), True, True),
    ("LSTM", dict(proj_size=2, num_layers=2, bidirectional=True, batch_first=True), True, True),
    ("LSTM", dict(bias=False, bidirectional=True), False, True),
    ("LSTM", dict(proj_size=3, num_layers=2), False, False),
    ("GRU", dict(), True, True),
    ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True), True, False),
    ("GRU", dict(bias=False, bidirectional=True), False, True),
    ("GRU", dict(bias=False), True, False),
]


def _case_id(case):
    kind, kw, batched, h0 = case
    parts = [kind] + [f"{k}={v}" for k, v in kw.items()] + [("" if batched else "un") + "batched"]
    return "-".join(parts + (["h0"] if h0 else []))


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_sequence_layers_match_torch(kind):
    """Every case of SEQ_CASES for this layer type, in one graph (one compile on the cpu backend)."""
    cases = []
    for k, case in enumerate(c for c in SEQ_CASES if c[0] == kind):
        _, kw, batched, h0 = case
        tm, m = _pair(kind, I, H, **kw)
        inputs = _seq_inputs(kind, batched, kw.get("batch_first", False), h0, kw.get("num_layers", 1),
                             2 if kw.get("bidirectional") else 1, H, kw.get("proj_size", 0), seed=10 * k)
        cases.append((_case_id(case), tm, m, inputs, False))
    _compare(cases)


def test_time_chunks_match_torch(monkeypatch):
    """Sequences longer than ``_FLAT_STEPS`` run in chunks of about sqrt(L) steps (their own input GEMMs, stacked
    behind a GraphBreak); lowered to 2 here, so that 5 steps make chunks of 3 and 2 at test sizes."""
    from luminal.nn import rnn
    monkeypatch.setattr(rnn, "_FLAT_STEPS", 2)
    assert rnn._chunks(5) == [(0, 3), (3, 5)]
    cases = []
    for k, (kind, kw, batched, h0, training) in enumerate([
            ("GRU", dict(bidirectional=True), True, True, False),
            ("LSTM", dict(proj_size=2, num_layers=2, batch_first=True), True, True, False),
            ("RNN", dict(num_layers=2, bidirectional=True, dropout=1.0), False, False, True)]):
        tm, m = _pair(kind, I, H, **kw)
        x = _rand(((N, 5, I) if kw.get("batch_first") else (5, N, I)) if batched else (5, I), 50 + k)
        inputs = [x]
        if h0:
            rows = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
            h = _rand((rows, N, kw.get("proj_size") or H), 60 + k)
            inputs.append((h, _rand((rows, N, H), 70 + k)) if kind == "LSTM" else h)
        cases.append((f"{kind}-{k}", tm, m, inputs, training))
    _compare(cases)


def test_symbolic_batch_one_graph_two_sizes():
    """A symbolic batch dim: one graph, executed at two batch sizes (10 steps: three chunks)."""
    tm, m = _pair("LSTM", I, H, num_layers=2)
    cx = lm.Graph()
    x = cx.tensor((10, "batch", I))
    out, (hn, cn) = m.eval()(x)
    out.retrieve(), hn.retrieve(), cn.retrieve()
    for n in (2, 5):
        xa = _rand((10, n, I), n)
        x.set(xa)
        cx.execute()
        with torch.no_grad():
            to, (th, tc) = tm(torch.from_numpy(xa))
        for a, b in ((out, to), (hn, th), (cn, tc)):
            np.testing.assert_allclose(a.data(), b.numpy(), **FWD)


# ------------------------------------------------------------------------------------------------ cells
def test_cells_match_torch():
    """Each cell batched with a state, unbatched without one, without bias (and relu for RNNCell): one graph."""
    cases = []
    for kind in ("RNNCell", "LSTMCell", "GRUCell"):
        for k, (kw, batched, with_state) in enumerate([(dict(), True, True), (dict(), False, False),
                                                        (dict(bias=False), False, True),
                                                        (dict(bias=False), True, False)]):
            if kind == "RNNCell" and k == 3:
                kw = dict(kw, nonlinearity="relu")
            tm, m = _pair(kind, I, H, **kw)
            lead = (N,) if batched else ()
            x = _rand(lead + (I,), k)
            state = None
            if with_state:
                state = _rand(lead + (H,), k + 10)
                if kind == "LSTMCell":
                    state = (state, _rand(lead + (H,), k + 20))
            cases.append((f"{kind}-{k}", tm, m, [x, state], False))
    _compare(cases)


# ------------------------------------------------------------------------------------------------ names, init, dropout
@pytest.mark.parametrize("kind,kw", [
    ("RNN", dict(num_layers=3, bidirectional=True, nonlinearity="relu")),
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)),
    ("LSTM", dict(num_layers=2, bias=False)),
    ("GRU", dict(num_layers=2, bidirectional=True)),
    ("RNNCell", dict(bias=False)), ("LSTMCell", dict()), ("GRUCell", dict()),
])
def test_state_dict_names_order_shapes_and_init(kind, kw):
    tm = getattr(torch.nn, kind)(I, H, **kw)
    m = getattr(nn, kind)(I, H, **kw)
    ts, ls = tm.state_dict(), m.state_dict()
    assert list(ls) == list(ts)
    assert [tuple(v.shape) for v in ls.values()] == [tuple(v.shape) for v in ts.values()]
    bound = 1 / math.sqrt(H)
    for name, v in ls.items():
        assert v.dtype == np.float32
        assert np.all(np.abs(v) <= bound), name
    big = getattr(nn, kind)(16, 32, **kw)  # enough values for the statistics of U(-b, b), b = 1/sqrt(32)
    bound = 1 / math.sqrt(32)
    pooled = np.concatenate([v.ravel() for v in big.state_dict().values()])
    sd = bound / math.sqrt(3)
    assert np.abs(pooled).max() <= bound and np.abs(pooled).max() > 0.99 * bound
    assert abs(pooled.std() - sd) < 0.05 * sd
    assert abs(pooled.mean()) < 5 * sd / math.sqrt(pooled.size)
    if kind in ("RNN", "LSTM", "GRU"):
        assert len(m.all_weights) == len(tm.all_weights)
        assert [[tuple(p.shape) for p in ps] for ps in m.all_weights] == \
            [[tuple(p.shape) for p in ps] for ps in tm.all_weights]


def test_dropout_only_between_layers_in_training():
    """Dropout 1.0 in training zeroes the second layer's input (deterministic, so torch.train() is the oracle);
    a single layer ignores dropout (torch warns); p=0.5 draws a new mask per execute, eval mode none."""
    tm, m = _pair("RNN", I, H, num_layers=2, dropout=1.0)
    with pytest.warns(UserWarning):
        tm1 = torch.nn.GRU(I, H, dropout=0.5)
    m1 = nn.GRU(I, H, dropout=0.5)
    m1.load_state_dict(tm1.state_dict())
    _compare([("RNN-dropout=1", tm, m, [_rand((L, N, I), 1)], True),
              ("GRU-1-layer-dropout=0.5", tm1, m1, [_rand((L, N, I), 2)], True)])


def test_dropout_p_half_masks_train_only():
    tm, m = _pair("RNN", I, H, num_layers=2, dropout=0.5)
    cx = lm.Graph()
    xa = _rand((L, N, I), 3)
    x = cx.tensor(xa.shape).set(xa)
    train_out = m.train()(x)[0].retrieve()
    eval_out = m.eval()(x)[0].retrieve()
    cx.execute()
    first = train_out.data().copy()
    cx.execute()
    second = train_out.data().copy()
    with torch.no_grad():
        expected = tm.eval()(torch.from_numpy(xa))[0].numpy()
    np.testing.assert_allclose(eval_out.data(), expected, **FWD)
    assert not np.allclose(first, expected, atol=1e-3)
    assert not np.allclose(first, second, atol=1e-6)  # a new mask each execute


# ------------------------------------------------------------------------------------------------ bad input
def _graph_input(shape):
    return lm.Graph().tensor(shape)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_bad_inputs_raise_clear_errors(kind):
    m = getattr(nn, kind)(I, H, num_layers=2)
    with pytest.raises(GraphError, match="2D .* or 3D"):
        m(_graph_input((2, L, N, I)))
    with pytest.raises(GraphError, match=f"input_size. Expected {I}, got 7"):
        m(_graph_input((L, N, 7)))
    with pytest.raises(GraphError, match="sequence length .*'seq'|sequence length .*seq.* must be concrete"):
        m(_graph_input(("seq", N, I)))
    with pytest.raises(GraphError, match="dim 1"):
        getattr(nn, kind)(I, H, batch_first=True)(_graph_input((N, "seq", I)))
    cx = lm.Graph()
    x = cx.tensor((L, N, I))
    bad_h = cx.tensor((1, N, H))  # needs num_layers = 2 rows
    good_h = cx.tensor((2, N, H))
    hx = (bad_h, good_h) if kind == "LSTM" else bad_h
    with pytest.raises(GraphError, match=rf"h_0 of shape \(2, {N}, {H}\), got \(1, {N}, {H}\)"):
        m(x, hx)
    hx = (good_h, cx.tensor((2, N))) if kind == "LSTM" else cx.tensor((2, H))
    with pytest.raises(GraphError, match="3-D"):
        m(x, hx)
    with pytest.raises(GraphError, match="2-D"):
        m(cx.tensor((L, I)), (good_h, good_h) if kind == "LSTM" else good_h)
    if kind == "LSTM":
        with pytest.raises(GraphError, match="tuple"):
            m(x, good_h)
    with pytest.raises(GraphError, match="GraphTensor"):
        m(x, np.zeros((2, N, H), np.float32) if kind != "LSTM" else (np.zeros((2, N, H)), good_h))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(I, H, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        nn.LSTM(I, H, proj_size=H)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        RNNBase("GRU", I, H, proj_size=2)
    with pytest.raises(ValueError, match="dropout"):
        nn.GRU(I, H, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size"):
        nn.LSTM(I, 0)
    with pytest.raises(TypeError, match="hidden_size"):
        nn.GRU(I, 2.0)


def test_cell_bad_inputs():
    m = nn.LSTMCell(I, H)
    cx = lm.Graph()
    with pytest.raises(GraphError, match="1D .* or 2D"):
        m(cx.tensor((N, 1, I)))
    with pytest.raises(GraphError, match=f"got 5 expected {I}"):
        m(cx.tensor((N, 5)))
    with pytest.raises(GraphError, match=rf"h_0 of shape \({N}, {H}\), got \({N}, {H + 1}\)"):
        m(cx.tensor((N, I)), (cx.tensor((N, H + 1)), cx.tensor((N, H))))
    with pytest.raises(GraphError, match="hx"):
        nn.GRUCell(I, H)(cx.tensor((I,)), cx.tensor((N, H)))


def test_dtype_mismatch_and_float64_module():
    m = nn.GRU(I, H, num_layers=2, bidirectional=True)
    cx = lm.Graph()
    with pytest.raises(GraphError, match="dtype float32, got float64"):
        m(cx.tensor((L, N, I), lm.float64))
    with pytest.raises(GraphError, match="h_0 must have the parameters' dtype"):
        m(cx.tensor((L, N, I)), cx.tensor((4, N, H), lm.float64))
    # a float64 module keeps float64 accuracy (tanh evaluated through sigmoid: no float32 rounding)
    torch.manual_seed(1)
    tm = torch.nn.LSTM(I, H, bidirectional=True).double()
    m = nn.LSTM(I, H, bidirectional=True, dtype=lm.float64)
    m.load_state_dict(tm.state_dict())
    cx = lm.Graph()
    xa = np.random.default_rng(5).standard_normal((L, N, I)) * 3
    out, (hn, cn) = m(cx.tensor(xa.shape, lm.float64).set(xa))
    for t in (out, hn, cn):
        t.retrieve()
    cx.execute()
    with torch.no_grad():
        to, (th, tc) = tm(torch.from_numpy(xa))
    for a, b in ((out, to), (hn, th), (cn, tc)):
        assert a.data().dtype == np.float64
        np.testing.assert_allclose(a.data(), b.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_two_layer_eager_backward_matches_torch(kind):
    """Eager training of a 2-layer LSTM/GRU (its graph once made the e-graph's extraction pick a cyclic program:
    ``ValueError: cycle through e-class``): gradients of the input and of every parameter equal torch's."""
    import luminal as lm

    torch.manual_seed(0)
    tm = getattr(torch.nn, kind)(3, 4, num_layers=2)
    m = getattr(nn, kind)(3, 4, num_layers=2)
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    xe = lm.tensor(x, requires_grad=True)
    out = m(xe)[0]
    (out * out).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    tout = tm(xt)[0]
    (tout * tout).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    for (name, p), (tname, tp) in zip(m.named_parameters(), tm.named_parameters()):
        assert name == tname
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
