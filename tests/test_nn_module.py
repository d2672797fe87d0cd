"""Module system, initializers, Linear, activation modules and safetensors I/O against torch.nn.

Oracle: torch.nn on the same weights (copied through load_state_dict, which also proves the names and
layouts match). Tolerances: float32 rtol=1e-5, atol=1e-6 unless stated.
"""

import math

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.nn as nn
from luminal.io import load_into, load_safetensors, save_safetensors

RNG = np.random.default_rng(7)


def _forward(module, arr):
    cx = lm.Graph()
    x = cx.tensor(arr.shape, lm.DType(arr.dtype.name)).set(arr)
    y = module(x).retrieve()
    cx.execute()
    return y.data()


def _torch(module, arr):
    with torch.no_grad():
        return module(torch.from_numpy(arr)).numpy()


def test_registration_names_and_order_match_torch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(np.ones(3))
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
            self.heads = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 1)])
            self.extra = nn.ModuleDict({"proj": nn.Linear(1, 1)})

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(3))
            self.body = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2, bias=False))
            self.heads = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)])
            self.extra = torch.nn.ModuleDict({"proj": torch.nn.Linear(1, 1)})

    ours, theirs = Net(), TNet()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [p.shape for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    ours.load_state_dict(theirs.state_dict())
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_array_equal(p.data, q.detach().numpy(), err_msg=name)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)])
def test_linear_matches_torch(shape, bias):
    t = torch.nn.Linear(5, 4, bias=bias)
    m = nn.Linear(5, 4, bias=bias)
    m.load_state_dict(t.state_dict())
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_forward(m, x), _torch(t, x), rtol=1e-5, atol=1e-6)


def test_linear_permuted_layout():
    m = nn.Linear(5, 4, permute=True)
    assert m.weight.shape == (5, 4)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(_forward(m, x), x @ m.weight.data + m.bias.data, rtol=1e-5, atol=1e-6)


ACTIVATIONS = [
    (nn.ReLU(), torch.nn.ReLU()), (nn.ReLU6(), torch.nn.ReLU6()), (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)),
    (nn.GELU(), torch.nn.GELU()), (nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
    (nn.SiLU(), torch.nn.SiLU()), (nn.Mish(), torch.nn.Mish()), (nn.Tanh(), torch.nn.Tanh()),
    (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.Softplus(beta=2.0, threshold=5.0), torch.nn.Softplus(2.0, 5.0)),
    (nn.ELU(0.5), torch.nn.ELU(0.5)), (nn.SELU(), torch.nn.SELU()), (nn.CELU(1.5), torch.nn.CELU(1.5)),
    (nn.Hardswish(), torch.nn.Hardswish()), (nn.Hardsigmoid(), torch.nn.Hardsigmoid()),
    (nn.Hardtanh(-2.0, 2.0), torch.nn.Hardtanh(-2.0, 2.0)), (nn.Softsign(), torch.nn.Softsign()),
    (nn.LogSigmoid(), torch.nn.LogSigmoid()), (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
    (nn.LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1)),
]


@pytest.mark.parametrize("ours,theirs", ACTIVATIONS, ids=lambda m: type(m).__name__)
def test_activation_modules_match_torch(ours, theirs):
    x = (RNG.standard_normal((3, 6)) * 3).astype(np.float32)
    np.testing.assert_allclose(_forward(ours, x), _torch(theirs, x), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("n", [1, 4])
def test_prelu(n):
    t = torch.nn.PReLU(n, init=0.1)
    with torch.no_grad():
        t.weight.copy_(torch.linspace(0.05, 0.4, n))
    m = nn.PReLU(n)
    m.load_state_dict(t.state_dict())
    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(_forward(m, x), _torch(t, x), rtol=1e-6, atol=1e-7)


def test_strict_load_errors_name_keys_and_shapes():
    m = nn.Sequential(nn.Linear(3, 2))
    good = {"0.weight": np.zeros((2, 3), np.float32), "0.bias": np.zeros(2, np.float32)}
    with pytest.raises(KeyError, match=r"missing keys \['0.bias'\]"):
        m.load_state_dict({"0.weight": good["0.weight"]})
    with pytest.raises(KeyError, match=r"unexpected keys \['extra'\]"):
        m.load_state_dict({**good, "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"0.weight: checkpoint \(3, 2\) vs model \(2, 3\)"):
        m.load_state_dict({**good, "0.weight": np.zeros((3, 2))})
    missing, unexpected = m.load_state_dict({"0.weight": np.ones((2, 3)), "other": np.zeros(1)}, strict=False)
    assert missing == ["0.bias"] and unexpected == ["other"]
    np.testing.assert_array_equal(m[0].weight.data, np.ones((2, 3)))


def test_load_state_dict_updates_graphs_already_built():
    m = nn.Linear(3, 2)
    cx = lm.Graph()
    x = cx.tensor((1, 3)).set(np.ones((1, 3), np.float32))
    y = m(x).retrieve()
    cx.execute()
    m.load_state_dict({"weight": np.full((2, 3), 2.0), "bias": np.array([1.0, -1.0])})
    cx.execute()
    np.testing.assert_array_equal(y.data(), [[7.0, 5.0]])


def test_seeded_init_is_bit_identical_and_seed_dependent():
    nn.init.manual_seed(123)
    a = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2)).state_dict()
    nn.init.manual_seed(123)
    b = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2)).state_dict()
    nn.init.manual_seed(124)
    c = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2)).state_dict()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes()
    assert any(a[k].tobytes() != c[k].tobytes() for k in a)


def test_default_linear_init_bounds_match_pytorch():
    m = nn.Linear(64, 32)
    bound = 1 / math.sqrt(64)  # kaiming_uniform(a=sqrt(5)) on (out, in) gives U(-1/sqrt(in), 1/sqrt(in))
    assert np.abs(m.weight.data).max() <= bound and np.abs(m.weight.data).max() > 0.9 * bound
    assert np.abs(m.bias.data).max() <= bound


@pytest.mark.parametrize("fn,shape,check", [
    (lambda p: nn.init.xavier_uniform_(p), (200, 300), lambda a: np.abs(a).max() <= math.sqrt(6 / 500)),
    (lambda p: nn.init.xavier_normal_(p), (200, 300), lambda a: abs(a.std() - math.sqrt(2 / 500)) < 0.003),
    (lambda p: nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu"), (200, 300),
     lambda a: abs(a.std() - math.sqrt(2 / 200)) < 0.003),
    (lambda p: nn.init.kaiming_uniform_(p, nonlinearity="relu"), (200, 300),
     lambda a: np.abs(a).max() <= math.sqrt(6 / 300)),
    (lambda p: nn.init.normal_(p, 1.0, 0.5), (300, 300), lambda a: abs(a.mean() - 1.0) < 0.01),
    (lambda p: nn.init.constant_(p, 0.3), (4, 4), lambda a: np.all(a == np.float32(0.3))),
    (lambda p: nn.init.orthogonal_(p, gain=2.0), (6, 4), lambda a: np.allclose(a.T @ a, 4 * np.eye(4), atol=1e-5)),
    (lambda p: nn.init.orthogonal_(p), (3, 7), lambda a: np.allclose(a @ a.T, np.eye(3), atol=1e-5)),
])
def test_initializer_statistics(fn, shape, check):
    # tolerances: std estimates over 60k samples are within ~0.5% of the target; bounds are exact
    p = nn.Parameter(np.zeros(shape))
    fn(p)
    assert check(p.data)


def test_calculate_gain_and_fans_match_torch():
    for nl, param in (("relu", None), ("tanh", None), ("leaky_relu", 0.2), ("selu", None), ("conv2d", None)):
        assert math.isclose(nn.init.calculate_gain(nl, param), torch.nn.init.calculate_gain(nl, param))
    t = torch.empty(8, 3, 5, 5)
    assert nn.init.calculate_fan_in_and_fan_out(t.shape) == torch.nn.init._calculate_fan_in_and_fan_out(t)


def test_safetensors_round_trip_and_torch_file(tmp_path):
    t = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    from safetensors.torch import save_file
    torch_file = tmp_path / "torch_model.safetensors"
    save_file(t.state_dict(), str(torch_file))
    m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    load_into(m, torch_file)
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(_forward(m, x), _torch(t, x), rtol=1e-5, atol=1e-6)
    ours = tmp_path / "ours.safetensors"
    save_safetensors(m, ours, metadata={"step": 3})
    back = load_safetensors(ours)
    assert list(back) == sorted(m.state_dict()) or set(back) == set(m.state_dict())
    for k, v in m.state_dict().items():
        assert back[k].tobytes() == v.tobytes()
    as64 = load_safetensors(ours, dtype="float64")
    assert all(v.dtype == np.float64 for v in as64.values())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_corrupt_and_truncated_files_give_clear_errors(tmp_path):
    m = nn.Linear(4, 4)
    path = tmp_path / "m.safetensors"
    save_safetensors(m, path)
    raw = path.read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "garbage.safetensors").write_bytes(b"\x00\x01not a safetensors file")
    for name in ("trunc.safetensors", "garbage.safetensors"):
        with pytest.raises(ValueError, match=name):
            load_safetensors(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        load_safetensors(tmp_path / "absent.safetensors")


def test_module_reused_in_two_graphs_and_train_eval_flags():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    outs = []
    for batch in (2, 5):
        cx = lm.Graph()
        arr = RNG.standard_normal((batch, 3)).astype(np.float32)
        x = cx.tensor(arr.shape).set(arr)
        y = m(x).retrieve()
        cx.execute()
        outs.append((arr, y.data()))
    for arr, out in outs:
        np.testing.assert_allclose(out, np.maximum(arr @ m[0].weight.data.T + m[0].bias.data, 0), rtol=1e-5,
                                   atol=1e-6)
    assert all(mod.training for mod in m.modules())
    m.eval()
    assert not any(mod.training for mod in m.modules())


def test_functional_pad_matches_torch():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    got = _forward(type("P", (nn.Module,), {"forward": lambda self, t: nn.functional.pad(t, (1, 2, 0, 1), 0.5)})(), x)
    np.testing.assert_array_equal(got, torch.nn.functional.pad(torch.from_numpy(x), (1, 2, 0, 1), value=0.5).numpy())


def test_assigning_before_super_init_is_an_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(2))

    with pytest.raises(AttributeError, match="super"):
        Bad()


def test_module_to_dtype_matches_torch():
    """``Module.to(dtype)`` / ``.bfloat16()`` / ``.half()`` / ``.double()`` convert the floating parameters as
    torch does (round to nearest even), leave integer buffers alone, and the converted Linear computes in float32
    for float32 inputs like torch's float32 Linear over the rounded weights."""
    import torch

    import luminal as lm
    import luminal.nn as nn

    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((5, 7)), rng.standard_normal(5), rng.standard_normal((3, 7)).astype(np.float32)
    for conv, tdt in (("bfloat16", torch.bfloat16), ("half", torch.float16), ("double", torch.float64)):
        m = nn.Linear(7, 5)
        m.load_state_dict({"weight": w, "bias": b})
        m.register_buffer("steps", np.arange(3, dtype=np.int64))
        assert getattr(m, conv)() is m
        tw = torch.from_numpy(w.astype(np.float32)).to(tdt)
        np.testing.assert_array_equal(np.asarray(m.weight.data, np.float64), tw.double().numpy())
        assert m.steps.dtype == lm.int64 and m.weight.dtype.value == str(tdt).split(".")[1]
        cx = lm.Graph()
        y = m(cx.tensor((3, 7)).set(x)).retrieve()
        cx.compile(device="cpu")
        cx.execute()
        ref = torch.nn.functional.linear(torch.from_numpy(x).to(torch.promote_types(torch.float32, tdt)),
                                         tw.to(torch.promote_types(torch.float32, tdt)),
                                         torch.from_numpy(b.astype(np.float32)).to(tdt)
                                         .to(torch.promote_types(torch.float32, tdt)))
        np.testing.assert_allclose(y.data(), ref.numpy(), rtol=1e-5, atol=1e-5)
        with pytest.raises(RuntimeError, match="already used by a graph"):
            m.to("float32")
    with pytest.raises(TypeError, match="floating dtype"):
        nn.Linear(2, 2).to("int32")
