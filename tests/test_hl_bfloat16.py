"""bfloat16 end to end against PyTorch's CPU bfloat16 (the oracle): elementwise chains bit for bit, reductions,
softmax/layer_norm, matmul, casts, promotion, host round trips and safetensors.

Runs on ``reference``; the compiled backends do not lower bfloat16 yet, and the ``cpu`` variant checks that they
say so (``NotImplementedError`` naming bfloat16). Tolerances: bfloat16 has 8 significand bits (1 ulp = 2**-7
relative at most); results that PyTorch also rounds once from float32 are compared bit for bit, the others
within the stated number of ulps.
"""

import os

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm
from luminal.dtype import DType, promote_types
from luminal.io import load_safetensors, save_safetensors

BF = np.dtype(ml_dtypes.bfloat16)
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 9.2e-41, 3.38e38, -3.38e38, 1.0, -1.0,
                    1 + 2 ** -8, 1 + 3 * 2 ** -8, 2.0, 0.5, 255.0, 257.0, 65504.0, 1e-3], np.float32)


def _values(n=512, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(n).astype(np.float32) * 4, SPECIAL])
    return torch.from_numpy(x).to(torch.bfloat16)


def _to_np(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy().astype(BF)


def _backend():
    return os.environ.get("LUMINAL_DEVICE") or "reference"


def _run(fn, *tensors):
    """``fn`` on luminal inputs holding ``tensors`` (bfloat16 torch tensors); the result as a float32 torch
    tensor, or None on a compiled backend after checking its NotImplementedError."""
    g = lm.Graph()
    ins = [g.tensor(tuple(t.shape), _dtype_of(t)).set(
        _to_np(t) if t.dtype == torch.bfloat16 else t.numpy()) for t in tensors]
    out = fn(*ins).retrieve()
    if _backend() != "reference":
        with pytest.raises(NotImplementedError, match="bfloat16"):
            g.execute()
        return None
    g.execute()
    data = out.data()
    assert data.dtype == DType(out.dtype.value).numpy
    return torch.from_numpy(np.asarray(data.astype(np.float32) if data.dtype == BF else data))


def _dtype_of(t):
    return {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16",
            torch.float64: "float64", torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
            torch.uint8: "uint8"}[t.dtype]


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _same(ours, theirs: torch.Tensor, ulps: int = 0):
    """Equal bit for bit as bfloat16 (NaN matches any NaN), or within ``ulps`` units in the last place."""
    a, b = _bits(ours), _bits(theirs.float())
    nan = np.isnan(ours.float().numpy())
    assert np.array_equal(nan, np.isnan(theirs.float().numpy())), "NaN positions differ"
    # ordered integers of the bit patterns (the distance in ulps between finite values of one sign)
    order = lambda u: np.where(u & 0x8000, -(u & 0x7FFF).astype(np.int32), (u & 0x7FFF).astype(np.int32))  # noqa
    diff = np.abs(order(a) - order(b))[~nan]
    assert diff.size == 0 or diff.max() <= ulps, f"max {diff.max()} ulps (allowed {ulps})"


CHAINS = {
    "mul_add": lambda x, y: x * y + x,
    "sub_mul": lambda x, y: (x - y) * (x + y),
    "div": lambda x, y: x / y,
    "neg_abs": lambda x, y: -x.abs() + y,
    "scalar_mul_add": lambda x, y: x * 0.1 + 0.3,
    "scalar_div": lambda x, y: x / 0.1,
    "square_chain": lambda x, y: (x * x * x - y) * 1.5,
    "exp": lambda x, y: x.exp(),
    "log": lambda x, y: x.abs().log(),
    "sqrt": lambda x, y: x.abs().sqrt(),
    "recip": lambda x, y: x.reciprocal(),
    "sin": lambda x, y: x.sin(),
    "maximum": lambda x, y: x.maximum(y) if isinstance(x, torch.Tensor) else x.maximum(y),
    "remainder": lambda x, y: (x * 0 + 1) * (x % (y.abs() + 1)),
    "sigmoid": lambda x, y: x.sigmoid(),
    "relu": lambda x, y: x.relu(),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_elementwise_bit_exact(name):
    x, y = _values(seed=1), _values(seed=2).flip(0)
    fn = CHAINS[name]
    ours = _run(fn, x, y)
    if ours is None:
        return
    _same(ours, fn(x, y))


@pytest.mark.parametrize("axis", [0, 1, None])
def test_sum_mean_max_round_once(axis):
    x = torch.randn(48, 300).to(torch.bfloat16) * 10
    for reduce in ("sum", "mean", "amax"):
        fn = (lambda t, r=reduce: getattr(t, r)()) if axis is None else (lambda t, r=reduce: getattr(t, r)(axis))
        ours = _run(fn, x)
        if ours is None:
            return
        # PyTorch accumulates in float32 (in another order than numpy): at most 1 ulp apart
        _same(ours, fn(x), ulps=0 if reduce == "amax" else 1)


def test_softmax_layer_norm():
    x = torch.randn(16, 64).to(torch.bfloat16) * 3
    cases = {"softmax": (lambda t: t.softmax(-1), 1),
             "layer_norm": (lambda t: t.layer_norm(-1) if not isinstance(t, torch.Tensor)
                            else torch.nn.functional.layer_norm(t, (64,)), 1)}
    for name, (fn, ulps) in cases.items():
        ours = _run(fn, x)
        if ours is None:
            return
        _same(ours, fn(x), ulps=ulps)  # computed in float32 and rounded once, as PyTorch: within an ulp
    fn = lambda t: t.log_softmax(-1)  # noqa: E731  (PyTorch rounds x - max first: an absolute tolerance)
    ours = _run(fn, x)
    np.testing.assert_allclose(ours.numpy(), fn(x).float().numpy(), rtol=2 ** -7, atol=2 ** -6)


def test_matmul():
    a, b = torch.randn(3, 20, 70).to(torch.bfloat16), torch.randn(70, 24).to(torch.bfloat16)
    ours = _run(lambda p, q: p @ q, a, b)
    if ours is None:
        return
    _same(ours, a @ b, ulps=1)  # float32 products and sums, rounded once (the summation order may differ)


@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"])
def test_casts_both_ways(src):
    special = SPECIAL if src.startswith("float") else np.array([0, 1, 7, 255, 257, 1001, 2 ** 24 + 1], np.int64)
    rng = np.random.default_rng(3)
    if src.startswith("float"):
        data = np.concatenate([special.astype(src), (rng.standard_normal(300) * 1e3).astype(src)])
        if src == "float64":  # doubly rounded near ties: float64 -> float32 -> bfloat16, as PyTorch
            data = np.concatenate([data, [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -8 - 2 ** -40]])
    elif src == "bool":
        data = rng.integers(0, 2, 50).astype(bool)
    else:
        data = np.concatenate([special, rng.integers(0, 250, 200)]).astype(src)
        if src in ("int32", "int64"):
            data = np.concatenate([data, -data, [2 ** 30 + 2 ** 22 + 1]]).astype(src)
    t = torch.from_numpy(data)
    ours = _run(lambda v: v.cast("bfloat16"), t)
    if ours is None:
        return
    _same(ours, t.to(torch.bfloat16))
    # back: bfloat16 -> src (in-range values; float -> int truncates)
    back_src = t.to(torch.bfloat16)
    if not src.startswith("float") and src != "bool":
        back_src = back_src[back_src.float().abs() < 200]
    ours = _run(lambda v: v.cast(src), back_src)
    expected = back_src.to(getattr(torch, src))
    if src.startswith("float"):
        np.testing.assert_array_equal(ours.numpy(), expected.numpy())
    else:
        np.testing.assert_array_equal(ours.numpy(), expected.numpy())


def test_promotion_table():
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            if "bfloat16" not in (a, b):
                continue
            expected = torch.promote_types(getattr(torch, a), getattr(torch, b))
            assert promote_types(DType(a), DType(b)).value == str(expected).replace("torch.", ""), (a, b)
    assert lm.bfloat16 is DType.bfloat16 and lm.DType.bfloat16.itemsize == 2 and DType.bfloat16.is_float
    assert lm.dtype.as_dtype("bf16") is DType.bfloat16 and lm.dtype.as_dtype(BF) is DType.bfloat16


def test_python_scalar_keeps_bfloat16():
    g = lm.Graph()
    x = g.tensor((3,), "bfloat16")
    assert (x + 1).dtype == DType.bfloat16 and (x * 2.5).dtype == DType.bfloat16
    assert (x + g.tensor((3,), "int64")).dtype == DType.bfloat16
    assert (x + g.tensor((3,), "float16")).dtype == DType.float32


def test_set_data_round_trip():
    g = lm.Graph()
    bits = np.arange(0, 1 << 16, 7, dtype=np.uint16)
    host = bits.view(BF)
    x = g.tensor((host.size,), "bfloat16").set(host)
    f = g.tensor((5,), "bfloat16").set(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1e39, np.nan, -0.0]))  # float64
    y, z = (x + 0.0).retrieve(), f.retrieve()
    if _backend() != "reference":
        with pytest.raises(NotImplementedError, match="bfloat16"):
            g.execute()
        return
    g.execute()
    out = x.data()
    assert out.dtype == BF
    nan = np.isnan(host.astype(np.float32))
    assert np.array_equal(out.view(np.uint16)[~nan], bits[~nan]) and np.isnan(out.astype(np.float32)[nan]).all()
    assert y.data().dtype == BF
    np.testing.assert_array_equal(z.data().view(np.uint16)[[0, 1, 2, 4]], [0x3F80, 0x3F82, 0x7F80, 0x8000])
    assert np.isnan(z.data().astype(np.float32)[3])
    with pytest.raises(TypeError, match="bfloat16"):
        g.tensor((2,), "int32").set(np.ones(2, BF))


def test_safetensors_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    w = np.concatenate([rng.standard_normal(100).astype(np.float32), SPECIAL]).astype(BF)
    path = tmp_path / "w.safetensors"
    save_safetensors({"w": w, "i": np.arange(3, dtype=np.int64)}, path)
    kept = load_safetensors(path, keep_bfloat16=True)
    assert kept["w"].dtype == BF and np.array_equal(kept["w"].view(np.uint16), w.view(np.uint16))
    assert kept["i"].dtype == np.int64
    widened = load_safetensors(path)  # the default stays float32 (exact)
    assert widened["w"].dtype == np.float32
    np.testing.assert_array_equal(widened["w"], w.astype(np.float32))
    as_bf = load_safetensors(path, dtype="bfloat16")
    assert np.array_equal(as_bf["w"].view(np.uint16), w.view(np.uint16))
    # PyTorch reads the same bits
    from safetensors.torch import load_file
    theirs = load_file(str(path))["w"]
    assert theirs.dtype == torch.bfloat16 and np.array_equal(_bits(theirs), w.view(np.uint16))
    if _backend() != "reference":
        return
    # a luminal bfloat16 tensor's data saves as it is
    g = lm.Graph()
    t = g.tensor((w.size,), "bfloat16").set(w).retrieve()
    g.execute()
    save_safetensors({"t": t.data()}, tmp_path / "t.safetensors")
    assert np.array_equal(load_safetensors(tmp_path / "t.safetensors", keep_bfloat16=True)["t"].view(np.uint16),
                          w.view(np.uint16))
