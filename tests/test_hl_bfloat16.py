"""bfloat16 end to end against PyTorch's CPU bfloat16 (the oracle): elementwise chains bit for bit, reductions,
softmax/layer_norm, matmul, casts, promotion, host round trips and safetensors.

Runs on ``reference`` and ``cpu`` (the C backend: bfloat16 stored as bits, computed in float, every op rounded as
the interpreter rounds it) with the same expectations, and on the GPU backends (Triton: stored as bits, computed in
float32, rounded as the C backend rounds) when ``LUMINAL_TEST_BACKENDS`` names them. Tolerances: bfloat16 has 8 significand bits (1 ulp = 2**-7
relative at most); results that PyTorch also rounds once from float32 are compared bit for bit, the others
within the stated number of ulps. The ``cpu``-only tests at the end compare the C backend with the interpreter
bit for bit (fused chains, casts, reductions).
"""

import os
import re

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
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
    tensor."""
    g = lm.Graph()
    ins = [g.tensor(tuple(t.shape), _dtype_of(t)).set(
        _to_np(t) if t.dtype == torch.bfloat16 else t.numpy()) for t in tensors]
    out = fn(*ins).retrieve()
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
    _same(ours, fn(x, y))


@pytest.mark.parametrize("axis", [0, 1, None])
def test_sum_mean_max_round_once(axis):
    x = torch.randn(48, 300).to(torch.bfloat16) * 10
    for reduce in ("sum", "mean", "amax"):
        fn = (lambda t, r=reduce: getattr(t, r)()) if axis is None else (lambda t, r=reduce: getattr(t, r)(axis))
        ours = _run(fn, x)
        # PyTorch accumulates in float32 (in another order than numpy): at most 1 ulp apart
        _same(ours, fn(x), ulps=0 if reduce == "amax" else 1)


def test_softmax_layer_norm():
    x = torch.randn(16, 64).to(torch.bfloat16) * 3
    cases = {"softmax": (lambda t: t.softmax(-1), 1),
             "layer_norm": (lambda t: t.layer_norm(-1) if not isinstance(t, torch.Tensor)
                            else torch.nn.functional.layer_norm(t, (64,)), 1)}
    for name, (fn, ulps) in cases.items():
        ours = _run(fn, x)
        _same(ours, fn(x), ulps=ulps)  # computed in float32 and rounded once, as PyTorch: within an ulp
    fn = lambda t: t.log_softmax(-1)  # noqa: E731  (PyTorch rounds x - max first: an absolute tolerance)
    ours = _run(fn, x)
    np.testing.assert_allclose(ours.numpy(), fn(x).float().numpy(), rtol=2 ** -7, atol=2 ** -6)


def test_matmul():
    a, b = torch.randn(3, 20, 70).to(torch.bfloat16), torch.randn(70, 24).to(torch.bfloat16)
    ours = _run(lambda p, q: p @ q, a, b)
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
    # a luminal bfloat16 tensor's data saves as it is
    g = lm.Graph()
    t = g.tensor((w.size,), "bfloat16").set(w).retrieve()
    g.execute()
    save_safetensors({"t": t.data()}, tmp_path / "t.safetensors")
    assert np.array_equal(load_safetensors(tmp_path / "t.safetensors", keep_bfloat16=True)["t"].view(np.uint16),
                          w.view(np.uint16))


# ------------------------------------------------------------------ the C backend against the interpreter
ALL_BITS = np.arange(1 << 16, dtype=np.uint16).view(BF)  # every bfloat16 (NaNs with payloads, subnormals)


def _cpu_and_reference(make, *arrays, dtypes=None):
    """``make(*inputs) -> output`` built twice and run on ``reference`` and on ``cpu``; both results and the cpu
    runtime. Only the ``cpu`` variant runs these (the ``reference`` one would compare the interpreter with itself)."""
    if _backend() != "cpu":
        pytest.skip("compares the cpu backend with the reference interpreter")
    out, runtime = {}, None
    for device in ("reference", "cpu"):
        g = lm.Graph()
        ins = [g.tensor(a.shape, (dtypes or ["bfloat16"] * len(arrays))[k]).set(a) for k, a in enumerate(arrays)]
        res = make(*ins).retrieve()
        g.compile(device=device)
        g.execute()
        out[device] = np.array(res.data())
        runtime = g.runtime
    return out["reference"], out["cpu"], runtime


def _same_bits(ref, cpu, nan_sign=True):
    """bfloat16 arrays equal bit for bit (NaNs: the quiet NaN of the same sign, or any NaN with ``nan_sign=False``)."""
    assert ref.dtype == cpu.dtype == BF
    a, b = ref.view(np.uint16), cpu.view(np.uint16)
    if not nan_sign:
        nan = np.isnan(ref.astype(np.float32))
        assert np.array_equal(nan, np.isnan(cpu.astype(np.float32))), "NaN positions differ"
        a, b = a[~nan], b[~nan]
    bad = np.flatnonzero(np.atleast_1d(a != b))
    assert bad.size == 0, f"{bad.size} differ, e.g. reference {a[bad[:4]]} cpu {b[bad[:4]]}"


def test_cpu_fused_chain_rounds_every_op():
    """Seven primitives over every bfloat16 (paired with a shuffle of them) in one C kernel: each result rounded
    to bfloat16 as the interpreter rounds it, so the chain equals it bit for bit (a float32 chain rounded once at
    the end would not: that is checked too)."""
    y = np.random.default_rng(7).permutation(ALL_BITS)

    def chain(a, b):  # Mul Add Mul(-1) Add Mul Recip Sqrt: each a bfloat16 primitive
        return (((a * b + a) - b) * a).reciprocal().abs().sqrt()

    ref, cpu, runtime = _cpu_and_reference(chain, ALL_BITS, y)
    kernels = runtime.program.kernels
    assert len(kernels) == 1, [type(k).__name__ for k in kernels]  # fused: the chain's temporaries stay in float
    _same_bits(ref, cpu, nan_sign=False)  # (NaN + NaN: which operand's sign C keeps is the compiler's choice)
    wide = lambda v: v.astype(np.float32)  # noqa: E731
    a32, b32 = wide(ALL_BITS), wide(y)
    with np.errstate(all="ignore"):
        once = np.sqrt(np.abs(1 / (((a32 * b32 + a32) - b32) * a32))).astype(BF)
    finite = np.isfinite(once.astype(np.float32)) & np.isfinite(ref.astype(np.float32))
    assert (once.view(np.uint16) != ref.view(np.uint16))[finite].sum() > 100  # the per-op rounding matters


def test_cpu_mask_cast_to_bfloat16_is_not_rounded():
    """A bool cast to bfloat16 (0 or 1, a bfloat16 value already: autocast's relu gradient, where-masks) is not
    rounded again (each lm_bf16r is a handful of integer operations per element; an autocast max-pool gradient
    2.4 -> 1.7 ms). Bit for bit against the interpreter over every bfloat16."""
    make = lambda x: x * (x > 0.5).cast("bfloat16")  # noqa: E731
    ref, cpu, runtime = _cpu_and_reference(make, ALL_BITS)
    _same_bits(ref, cpu, nan_sign=False)  # (NaN * 0: the NaN's payload, as the store keeps a bfloat16's bits)
    body = runtime.source[runtime.source.index("static int kbody_"):]
    assert re.search(r"float t\d+ = \(float\)\(t\d+\);", body) and "lm_bf16r((float)" not in body, body[:1500]


@pytest.mark.parametrize("form", ["x*mask", "mask*x", "recast*mask"])
def test_cpu_product_with_a_mask_is_not_rounded(form):
    """A bfloat16 value times a bool cast to bfloat16 (x or +-0: a bfloat16 value already; autocast's relu and
    max-pool gradients), and a bfloat16 widened to float32 and cast back, are not rounded, here where a float32
    result reads them (no store rounds it). Bit for bit against the interpreter over every bfloat16."""
    def make(x):
        mask = (x > 0.5).cast("bfloat16")
        out = {"x*mask": lambda: x * mask, "mask*x": lambda: mask * x,
               "recast*mask": lambda: x.cast("float32").cast("bfloat16") * mask}[form]()
        return out.cast("float32")
    ref, cpu, runtime = _cpu_and_reference(make, ALL_BITS)
    nan = np.isnan(ref)
    assert np.array_equal(nan, np.isnan(cpu))
    assert np.array_equal(ref[~nan].view(np.uint32), cpu[~nan].view(np.uint32))
    body = runtime.source[runtime.source.index("static int kbody_"):]
    assert "lm_bf16r(" not in body, body[:1500]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cpu_low_precision_division_is_one_float32_divide(dtype):
    """The graph divides bfloat16s as float64's ``a * (1/b)`` rounded to float32 (the correctly rounded float32
    quotient, torch's); the C backend renders that as one float32 division (same bits, vectorized 16 wide instead
    of float64 converts, divide and multiply: a pooling gradient 4.2 -> 2.9 ms). The same pattern written by hand
    over float32 values renders the same way. Values: every bfloat16 against a shuffle of them (bfloat16), or
    random and special float32s, bit for bit against the interpreter (NaN: any NaN)."""
    if dtype == "bfloat16":
        a, b = ALL_BITS, np.random.default_rng(11).permutation(ALL_BITS)
        make = lambda x, y: x / y  # noqa: E731
    else:
        rng = np.random.default_rng(12)
        a = np.concatenate([rng.standard_normal(4096) * 1e3, SPECIAL, [1.0, 3.0, 1e-38, 3e38]]).astype(np.float32)
        b = np.concatenate([rng.standard_normal(4096), SPECIAL[::-1], [3.0, 1e-38, 7.0, 0.1]]).astype(np.float32)
        make = lambda x, y: (x.cast("float64") * y.cast("float64").reciprocal()).cast("float32")  # noqa: E731
    ref, cpu, runtime = _cpu_and_reference(make, a, b, dtypes=[dtype, dtype])
    if dtype == "bfloat16":
        _same_bits(ref, cpu, nan_sign=False)
    else:
        nan = np.isnan(ref)
        assert np.array_equal(nan, np.isnan(cpu))
        np.testing.assert_array_equal(ref[~nan].view(np.uint32), cpu[~nan].view(np.uint32))
    body = runtime.source[runtime.source.index("static int kbody_"):]
    assert "double" not in body and re.search(r"float t\d+ = \(t\d+ / t\d+\);", body), body[:2000]


@pytest.mark.parametrize("name", ["sqrt", "recip", "exp", "exp2", "log", "sin", "sigmoid", "neg_abs", "div",
                                  "mul_add", "maximum", "lt"])
def test_cpu_ops_every_bfloat16(name):
    """Each op over all 65536 bfloat16 inputs, cpu against the interpreter bit for bit (NaN: any NaN)."""
    y = np.random.default_rng(8).permutation(ALL_BITS)
    fns = {"sqrt": lambda a, b: a.sqrt(), "recip": lambda a, b: a.reciprocal(), "exp": lambda a, b: a.exp(),
           "exp2": lambda a, b: a.exp2(), "log": lambda a, b: a.log(), "sin": lambda a, b: a.sin(),
           "sigmoid": lambda a, b: a.sigmoid(), "neg_abs": lambda a, b: -a.abs() + b, "div": lambda a, b: a / b,
           "mul_add": lambda a, b: a * b + 0.3, "maximum": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b}
    ref, cpu, _ = _cpu_and_reference(fns[name], ALL_BITS, y)
    if name == "lt":
        np.testing.assert_array_equal(ref, cpu)
        return
    if name == "maximum":  # where() keeps -0.0 on cpu (torch.maximum's result); the interpreter's sum gives +0.0
        zero = (ref.astype(np.float32) == 0) & (cpu.astype(np.float32) == 0)
        ref, cpu = ref[~zero], cpu[~zero]
    _same_bits(ref, cpu, nan_sign=False)


@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_cpu_reductions(reduce):
    """A bfloat16 SumReduce (float accumulator, one rounding) and MaxReduce (exact; NaN propagates) on cpu.
    Sums of small integers are exact in float32: equal bit for bit; other sums within 1 ulp (float32 addition
    in another order than numpy's pairwise sum)."""
    rng = np.random.default_rng(9)
    ints = rng.integers(-64, 64, (37, 300)).astype(np.float32).astype(BF)
    real = (rng.standard_normal((37, 300)) * 10).astype(np.float32).astype(BF)
    real[3, 17] = np.nan
    real[5, :] = np.inf
    if reduce == "sum":
        make = lambda a, axis=1: a._reduce(ops.SumReduce, axis, False)  # noqa: E731  (the bfloat16 primitive)
    else:
        make = lambda a, axis=1: a.amax(axis)  # noqa: E731
    ref, cpu, runtime = _cpu_and_reference(make, ints)
    assert any(getattr(k, "kind", None) == reduce and k.dtype == DType.bfloat16 for k in runtime.program.kernels)
    _same_bits(ref, cpu)
    ref, cpu, _ = _cpu_and_reference(make, real)
    if reduce == "max":
        _same_bits(ref, cpu, nan_sign=False)
    else:
        _same(torch.from_numpy(cpu.astype(np.float32)), torch.from_numpy(ref.astype(np.float32)), ulps=1)
    # a full reduction (one output, the reduced loop parallel), and a column reduction (axis 0)
    for fn in (lambda a: make(a.reshape((37 * 300,)), 0), lambda a: make(a, 0)):
        ref, cpu, _ = _cpu_and_reference(fn, ints)
        _same_bits(ref, cpu)


@pytest.mark.parametrize("other", ["float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool"])
def test_cpu_casts_both_ways(other):
    """Casts to bfloat16 (through float32: a double or int64 rounds twice, as the interpreter and PyTorch) and
    from every bfloat16 (in range for the integer types), cpu against the interpreter bit for bit."""
    rng = np.random.default_rng(10)
    if other == "float32":  # random bit patterns: NaN payloads, subnormals, ties
        data = rng.integers(0, 2 ** 32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        data = np.concatenate([data, SPECIAL, (np.arange(1 << 16, dtype=np.uint32) << 16 | 0x8000).view(np.float32)])
    elif other == "bool":
        data = rng.integers(0, 2, 100).astype(bool)
    elif other.startswith("float"):
        data = np.concatenate([SPECIAL.astype(other), (rng.standard_normal(50_000) * 300).astype(other)])
        if other == "float64":
            data = np.concatenate([data, [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -8 - 2 ** -40, 1e300, -1e-300]])
    else:
        info = np.iinfo(other)
        data = rng.integers(info.min, info.max, 50_000, dtype=np.int64, endpoint=True).astype(other)
    with np.errstate(all="ignore"):
        ref, cpu, _ = _cpu_and_reference(lambda v: v.cast("bfloat16"), data, dtypes=[other])
    _same_bits(ref, cpu)
    src = ALL_BITS
    if other not in ("bool",) and not other.startswith("float"):
        f = ALL_BITS.astype(np.float32)
        src = ALL_BITS[(f > np.iinfo(other).min - 1) & (f < np.iinfo(other).max + 1) & (np.abs(f) < 2 ** 31)]
    ref, cpu, _ = _cpu_and_reference(lambda v: v.cast(other), src)
    assert ref.dtype == cpu.dtype == DType(other).numpy
    if other.startswith("float"):  # bit for bit (signed zeros too); NaN stays NaN (a signaling NaN is quieted
        nan = np.isnan(ref)  # by the hardware's float16 conversion, numpy's keeps it signaling)
        np.testing.assert_array_equal(nan, np.isnan(cpu))
        np.testing.assert_array_equal(ref[~nan].view(np.uint8), cpu[~nan].view(np.uint8))
    else:
        np.testing.assert_array_equal(ref, cpu)
