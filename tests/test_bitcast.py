"""The ``BitCast`` primitive and ``x.view(dtype)``: the bits of each element reinterpreted as a dtype of the same
width, bit for bit as numpy's ``arr.view(dtype)`` (the oracle) and ``torch.Tensor.view(dtype)``.

Every test runs on the backends of ``LUMINAL_TEST_BACKENDS`` (default ``reference,cpu``; ``gpu-interpret`` runs
the Triton kernels in Triton's interpreter). Inputs hold the values a bit cast must not touch: +-0, +-inf, NaNs
of both signs with payloads (quiet and signalling), denormals, integer minima/maxima. Results are compared as
unsigned bit patterns, so a canonicalized NaN or a flushed denormal fails.
"""

import os

import ml_dtypes
import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from luminal.dtype import DType

BACKENDS = [b.strip() for b in os.environ.get("LUMINAL_TEST_BACKENDS", "reference,cpu").split(",") if b.strip()]
pytestmark = pytest.mark.parametrize("backend", BACKENDS)

BF16 = np.dtype(ml_dtypes.bfloat16)
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
GROUPS = {8: ["int8", "uint8"], 16: ["float16", "bfloat16", "int16", "uint16"],
          32: ["float32", "int32", "uint32"], 64: ["float64", "int64", "uint64"]}
PAIRS = [(a, b) for group in GROUPS.values() for a in group for b in group if a != b]
# NaN bit patterns per width: quiet/signalling, both signs, payloads in the high and the low mantissa bits
NANS = {2: [0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7D55, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FA5],
        4: [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FC12345, 0xFFBFFFFF],
        8: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001,
            0x7FF4000012345678]}


def _np(name: str) -> np.dtype:
    return BF16 if name == "bfloat16" else np.dtype(name)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(UINT[a.dtype.itemsize])


def special(name: str, n_random: int = 24, seed: int = 0) -> np.ndarray:
    """Values of dtype ``name`` a bit cast must keep: signed zeros, infinities, NaN payloads, denormals, extremes,
    plus random bit patterns (every pattern is a valid value of each same-width dtype)."""
    dt = _np(name)
    size = dt.itemsize
    rng = np.random.default_rng(seed)
    random_bits = rng.integers(0, 2 ** (8 * size), size=n_random, dtype=UINT[size], endpoint=False)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        fixed = np.array([0, 1, info.max, info.min, info.max - 1, info.min + 1] + ([-1, -2] if dt.kind == "i" else []),
                         dt)
    else:
        wide = np.float32 if dt == BF16 else dt
        tiny = np.finfo(wide).tiny if dt != BF16 else float(ml_dtypes.finfo(BF16).tiny)
        sub = float(np.finfo(wide).smallest_subnormal) if dt != BF16 else float(ml_dtypes.finfo(BF16).smallest_subnormal)
        fixed = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.5, sub, -sub, 3 * sub, tiny, -tiny], np.float64)
        fixed = fixed.astype(np.float32).astype(dt) if dt == BF16 else fixed.astype(dt)
        nans = np.array(NANS[size], UINT[size]).view(dt)
        fixed = np.concatenate([fixed, nans])
    return np.concatenate([fixed, random_bits.view(dt)])


def _run(build, *arrays):
    """``build(*graph inputs)`` -> tensor or list; executed, returns numpy result(s)."""
    from hl_helpers import evaluate
    return evaluate(lambda cx: build(*[cx.tensor(a.shape, dtype=lm.DType(a.dtype.name)).set(a) for a in arrays]))


@pytest.mark.parametrize("src,dst", PAIRS)
def test_view_matches_numpy_bit_for_bit(backend, src, dst):
    x = special(src).reshape(-1, 1)
    x = np.concatenate([x, x[::-1]], axis=1)
    got = _run(lambda t: t.view(lm.DType(dst)), x)
    want = x.view(_np(dst))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("bfloat16", "int16"),
                                     ("uint16", "bfloat16"), ("float64", "uint64"), ("float16", "bfloat16")])
def test_round_trip_and_copies_keep_bits(backend, src, dst):
    """There and back (two BitCasts), and a copy of the bit-cast result, keep every bit."""
    x = special(src).reshape(1, -1)
    x = np.concatenate([x, x[:, ::-1]])
    s, d = lm.DType(src), lm.DType(dst)
    back, copied, transposed = _run(lambda t: [t.view(d).view(s), t.view(d).contiguous().view(s),
                                               t.view(d).T.contiguous()], x)
    np.testing.assert_array_equal(_bits(back), _bits(x))
    np.testing.assert_array_equal(_bits(copied), _bits(x))
    np.testing.assert_array_equal(_bits(transposed), _bits(x.view(_np(dst)).T))


def test_strided_permuted_broadcast_and_padded_views(backend):
    x = special("float32", n_random=36)[-36:].reshape(6, 6)
    x[0, :6] = special("float32", n_random=0)[[1, 4, 6, 11, 12, 14]]  # -0.0, a denormal, NaN payloads ...
    y = special("int32", n_random=0)[:6]

    def build(t, u):
        return [t.T.view(lm.int32),                                  # permuted
                t[1::2, ::3].view(lm.uint32),                        # strided slice
                u.view(lm.float32).unsqueeze(0).expand(4, 6).view(lm.int32) * 1,  # broadcast there and back
                t.unsqueeze(1).expand(6, 3, 6).view(lm.int32),      # broadcast of a 2-D view
                t.pad(((1, 1), (0, 2))).view(lm.int32),             # padded: the padding's 0 is 0 in every dtype
                t[::-1].view(lm.int32)]                              # flipped
    got = _run(build, x, y)
    want = [x.T.view(np.int32), x[1::2, ::3].view(np.uint32), np.broadcast_to(y, (4, 6)),
            np.broadcast_to(x[:, None, :], (6, 3, 6)).view(np.int32),
            np.pad(x, ((1, 1), (0, 2))).view(np.int32), x[::-1].view(np.int32)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_fused_chain_fast_inverse_sqrt(backend):
    """The classic bit trick: float -> int32 bits, integer arithmetic, back to float, then Newton steps; every
    step in one elementwise chain, compared with numpy doing the same in float32."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(1e-3, 1e3, 200), [1.0, 4.0, 0.25, 1e-30, 1e30]]).astype(np.float32)

    def build(t):
        guess = (0x5F3759DF - (t.view(lm.int32) >> 1)).view(lm.float32)
        y = guess * (1.5 - (t * 0.5) * guess * guess)
        return [guess, y * (1.5 - (t * 0.5) * y * y)]
    guess, refined = _run(build, x)
    g = (np.int32(0x5F3759DF) - (x.view(np.int32) >> 1)).view(np.float32)
    half = x * np.float32(0.5)
    y = g * (np.float32(1.5) - half * g * g)
    y = y * (np.float32(1.5) - half * y * y)
    np.testing.assert_array_equal(_bits(guess), _bits(g))
    np.testing.assert_allclose(refined, y, rtol=2e-7)
    np.testing.assert_allclose(refined, 1 / np.sqrt(x.astype(np.float64)), rtol=5e-6)


def test_fused_chain_next_float_and_sign_flip(backend):
    """``(bits + 1)`` is the next float up for positives; xor with the sign bit negates, NaNs included."""
    x = special("float32")
    nxt, neg, mag = _run(lambda t: [(t.view(lm.int32) + 1).view(lm.float32),
                                    (t.view(lm.uint32) ^ 0x80000000).view(lm.float32),
                                    (t.view(lm.int32) & 0x7FFFFFFF).view(lm.float32)], x)
    np.testing.assert_array_equal(_bits(nxt), (x.view(np.int32) + np.int32(1)).view(np.uint32))
    np.testing.assert_array_equal(_bits(neg), x.view(np.uint32) ^ np.uint32(0x80000000))
    np.testing.assert_array_equal(_bits(mag), x.view(np.uint32) & np.uint32(0x7FFFFFFF))


def test_symbolic_shapes(backend):
    cx = lm.Graph()
    t = cx.tensor(("n", 3), dtype=lm.float64)
    out = (t.view(lm.uint64) >> 52).retrieve()
    back = t.view(lm.int64).view(lm.float64).retrieve()
    for n in (1, 4, 7):
        x = special("float64", n_random=3 * n, seed=n)[-3 * n:].reshape(n, 3)
        t.set(x)
        cx.execute()
        np.testing.assert_array_equal(out.data(), x.view(np.uint64) >> np.uint64(52))
        np.testing.assert_array_equal(_bits(back.data()), _bits(x))


def test_compiled_graph_keeps_bitcast_and_dedupes(backend):
    """With the default pipeline (equality saturation on), BitCast survives as a primitive and two identical ones
    are merged; a bit cast of a whole copy reads the copy's source (copy-into-bitcast)."""
    cx = lm.Graph()
    t = cx.tensor((4, 5))
    a = t.view(lm.int32)
    b = t.view(lm.int32)
    c = t.T.contiguous().view(lm.int32)
    out = (a + b).retrieve()
    out2 = c.retrieve()
    cx.compile(device=backend)
    x = special("float32")[:20].reshape(4, 5)
    t.set(x)
    cx.execute()
    np.testing.assert_array_equal(out.data(), x.view(np.int32) * 2)
    np.testing.assert_array_equal(out2.data(), x.T.view(np.int32))
    kinds = [type(n.op).__name__ for n in cx.nodes.values()]
    if backend != "reference":  # (compiling for the interpreter does not saturate)
        assert kinds.count("BitCast") == 2 and "Contiguous" not in kinds, kinds


def test_errors(backend):
    cx = lm.Graph()
    t = cx.tensor((2, 4))
    with pytest.raises(TypeError, match="bool is not a bit pattern"):
        t.view(lm.bool)
    with pytest.raises(TypeError, match="bool is not a bit pattern"):
        cx.tensor((3,), dtype=lm.bool).view(lm.uint8)
    with pytest.raises(TypeError, match="unsupported dtype"):
        t.view(torch.complex64)
    with pytest.raises(TypeError, match=r"float32.*32 bits.*int64.*64 bits.*only same-width"):
        cx.add_op(ops.BitCast(DType.int64), [(t.id, t.tracker)], t.dims, DType.int64)  # the primitive itself
    with pytest.raises(TypeError, match=r"float32.*32 bits.*float64.*64 bits.*only same-width"):
        t.bitcast(lm.float64)
    # view(*shape) still reshapes, and view(same dtype) is the tensor itself
    assert t.view(8).dims == (8,) and t.view(-1, 2).shape == (4, 2) and t.view("float32") is t
    # another width: a whole number of wider elements in the last dim, and a last dim at all (as torch)
    with pytest.raises(ValueError, match=r"last dim of a float32 tensor must hold whole float64 elements.*3"):
        lm.tensor(np.zeros(3, np.float32)).view(torch.float64)
    with pytest.raises(ValueError, match=r"0-d float32 tensor cannot be viewed as a dtype of another width"):
        cx.tensor(()).view(lm.uint8)
    with pytest.raises(RuntimeError):  # (torch's own errors for the same two cases)
        torch.zeros(3).view(torch.float64)
    with pytest.raises(RuntimeError):
        torch.zeros(()).view(torch.uint8)


WIDTH_PAIRS = [(a, b) for a in ["float32", "float64", "bfloat16", "uint8", "int8", "int16", "int64", "float16"]
               for b in ["uint8", "int16", "float32", "float64", "bfloat16", "int64"]
               if _np(a).itemsize != _np(b).itemsize]


@pytest.mark.parametrize("src,dst", WIDTH_PAIRS)
def test_view_as_another_width_resizes_the_last_dim_like_numpy(backend, src, dst):
    """``(..., n)`` of ``src`` viewed as ``dst``: ``(..., n * src_size / dst_size)``, the bytes little-endian, bit for
    bit as numpy (NaN payloads, -0.0, denormals of either dtype kept)."""
    x = special(src, n_random=48)[:32].reshape(4, 8)
    got = _run(lambda t: t.view(lm.DType(dst)), x)
    want = x.view(_np(dst))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_view_as_another_width_of_views_and_back(backend):
    """A transposed input (luminal's tensors are values: the result is numpy's on the contiguous array), a
    symbolic last dim, and a round trip float32 -> uint8 -> float32 that keeps every bit."""
    x = special("float32", n_random=53)[:64].reshape(8, 8)
    cx = lm.Graph()
    t = cx.tensor((8, 8)).set(x)
    s = cx.tensor(("n",)).set(x[0])
    outs = [t.T.view(lm.uint8), t.view(lm.uint8).view(lm.float32), s.view(lm.int16), t[:, 2:6].view(lm.float64),
            t.view(lm.uint8)[:, 3:11].view(lm.int32)]
    for o in outs:
        o.retrieve()
    if backend != "reference":
        cx.compile(device=backend)
    cx.execute()
    assert "n" in str(outs[2].dims[0])  # (symbolic: 2 * n)
    wants = [np.ascontiguousarray(x.T).view(np.uint8), x, x[0].view(np.int16), np.ascontiguousarray(x[:, 2:6]).view(np.float64),
             np.ascontiguousarray(x.view(np.uint8)[:, 3:11]).view(np.int32)]
    for o, w in zip(outs, wants):
        got = o.data()
        assert got.shape == w.shape and got.dtype == w.dtype
        np.testing.assert_array_equal(_bits(got), _bits(w))


@pytest.mark.parametrize("spec", [torch.int32, lm.int32, np.int32, np.dtype("int32"), "int32", "i32"])
def test_dtype_spellings_and_torch_parity(backend, spec):
    x = special("float32")
    got = _run(lambda t: t.view(spec), x)
    want = torch.from_numpy(x.copy()).view(torch.int32).numpy()
    np.testing.assert_array_equal(got, want)


def _eager_device(backend):
    """Eager tensors run on cpu or reference only; the device is set for the test and restored after it."""
    if backend not in ("cpu", "reference"):
        pytest.skip(f"eager mode runs on cpu/reference, not {backend}")
    old = lm.get_default_device()
    lm.set_default_device(backend)
    return old


def test_eager_view_and_torch_parity(backend):
    old = _eager_device(backend)
    try:
        _eager_view_checks()
    finally:
        lm.set_default_device(old)


def _eager_view_checks():
    x = special("float32")
    e = lm.tensor(x)
    tx = torch.from_numpy(x.copy())
    np.testing.assert_array_equal(e.view(torch.int32).numpy(), tx.view(torch.int32).numpy())
    np.testing.assert_array_equal(_bits(e.view(lm.int32).view(lm.float32).numpy()), _bits(x))
    assert e.view(-1, 1).shape == (x.size, 1)
    # (lm.tensor takes no ml_dtypes.bfloat16 arrays: the bfloat16 tensor is made from its bits, with view)
    bits = special("bfloat16").view(np.int16)
    b = lm.tensor(bits).view(torch.bfloat16)
    tb = torch.from_numpy(bits.copy()).view(torch.bfloat16)
    assert b.dtype == lm.bfloat16
    np.testing.assert_array_equal(b.view(torch.int16).numpy(), tb.view(torch.int16).numpy())
    np.testing.assert_array_equal(b.numpy().view(np.int16), bits)
    np.testing.assert_array_equal(b.view(lm.float16).numpy().view(np.int16), bits)


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_signbit_and_copysign_read_the_sign_bit(backend, name):
    """``signbit(-nan)`` is True and ``copysign`` carries a NaN's sign, as torch (which reads the bit)."""
    x = special(name)
    y = x[::-1].copy()
    sb, cs = _run(lambda a, b: [a.signbit(), a.copysign(b)], x, y)
    if name == "bfloat16":
        tx = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
        ty = torch.from_numpy(y.view(np.int16).copy()).view(torch.bfloat16)
        want_cs = torch.copysign(tx, ty).view(torch.int16).numpy().view(np.uint16)
    else:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        want_cs = _bits(torch.copysign(tx, ty).numpy())
    np.testing.assert_array_equal(sb, torch.signbit(tx).numpy())
    with np.errstate(invalid="ignore"):
        negative_nans = np.isnan(x.astype(np.float64)) & (_bits(x) >> (8 * x.dtype.itemsize - 1) == 1)
    assert negative_nans.any() and sb[negative_nans].all()
    # torch's copysign keeps the magnitude bits of a NaN (payload) and takes the sign bit of the other
    np.testing.assert_array_equal(_bits(cs), want_cs)


def test_copysign_gradient_flows_through_its_rule(backend):
    """The bit-level copysign keeps torch's gradient (its rule; BitCast itself has none)."""
    a = np.array([1.5, -2.0, 0.5, -3.0], np.float32)
    b = np.array([-1.0, 2.0, -0.0, 4.0], np.float32)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.copysign(ta, tb) * torch.arange(1.0, 5.0)).sum().backward()
    old = _eager_device(backend)
    try:
        ea = lm.tensor(a, requires_grad=True)
        eb = lm.tensor(b, requires_grad=True)
        (ea.copysign(eb) * lm.tensor(np.arange(1.0, 5.0, dtype=np.float32))).sum().backward()
        np.testing.assert_allclose(ea.grad.numpy(), ta.grad.numpy())
        assert eb.grad is None or not np.any(eb.grad.numpy())
    finally:
        lm.set_default_device(old)
