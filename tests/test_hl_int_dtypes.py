"""The integer dtypes (int8/int16/int32/int64, uint8/uint16/uint32/uint64) end to end, and the bitwise ops.

Runs on the reference interpreter and the compiled C backend (``backend`` parameter from tests/conftest.py).
Oracles: PyTorch where its CPU kernels support the dtype (everything but uint16/32/64 arithmetic), numpy
otherwise (numpy and PyTorch agree on two's-complement wrap-around), and a Python-int model of PyTorch's shift
rule for the types torch cannot shift (checked against torch on the types it can). All comparisons exact.
Each test builds one graph per dtype with many outputs, to keep the compiled backend's compile count small.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm

SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
INTS = SIGNED + UNSIGNED
TORCH_FULL = ["int8", "int16", "int32", "int64", "uint8"]  # dtypes torch's CPU kernels do arithmetic in
ALL = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32",
       "float64"]


def edges(dt: str) -> np.ndarray:
    info = np.iinfo(dt)
    vals = [0, 1, 2, 7, info.max, info.max - 1, info.min] + ([-1, -2, info.min + 1] if info.min < 0 else [])
    return np.array(vals, dtype=dt)


def pairs(dt: str):
    """Every pair of edge values, as two flat arrays."""
    e = edges(dt)
    a, b = np.meshgrid(e, e, indexing="ij")
    return a.reshape(-1).copy(), b.reshape(-1).copy()


def run(fn, *arrays):
    """``fn(*inputs)`` returns a dict of named outputs; executes once and returns their numpy values."""
    cx = lm.Graph()
    ins = [cx.tensor(a.shape, dtype=a.dtype.name).set(a) for a in arrays]
    outs = fn(*ins)
    for o in outs.values():
        o.retrieve()
    cx.execute()
    return {k: o.data() for k, o in outs.items()}


def same(got: dict, want: dict):
    for k in want:
        w = np.asarray(want[k])
        assert got[k].dtype == w.dtype, (k, got[k].dtype, w.dtype)
        np.testing.assert_array_equal(got[k], w, err_msg=k)


def shift_model(a: np.ndarray, s: np.ndarray, kind: str) -> np.ndarray:
    """PyTorch's CPU shift results, elementwise with Python ints (any integer dtype)."""
    dt = np.dtype(a.dtype)
    bits, signed = dt.itemsize * 8, dt.kind == "i"
    out = []
    for x, k in zip(a.tolist(), s.tolist()):
        bad = k < 0 or k >= bits
        if kind == "shl":
            v = 0 if bad else x << k
        else:
            v = (-1 if x < 0 else 0) if bad else x >> k
        v &= (1 << bits) - 1
        if signed and v >= 1 << (bits - 1):
            v -= 1 << bits
        out.append(v)
    return np.array(out, dtype=dt)


# ---------------------------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("dt", INTS)
def test_arithmetic_wraps_at_the_edges(dt):
    a, b = pairs(dt)
    nz = b != 0
    if dt in ("int64", "uint64"):  # the 64-bit quotient is computed through float64: exact below 2**53 only
        nz &= (np.abs(a.astype(np.float64)) < 2 ** 53) & (np.abs(b.astype(np.float64)) < 2 ** 53)
    got = run(lambda x, y: {"add": x + y, "sub": x - y, "mul": x * y, "neg": -x, "lt": x < y, "le": x <= y,
                            "eq": x == y, "ne": x != y, "gt": x > y, "max": x.maximum(y), "min": x.minimum(y),
                            "add_s": x + 300, "mul_s": x * 3, "abs": x.abs() if dt in SIGNED else x},
              a, b)
    with np.errstate(all="ignore"):
        want = {"add": a + b, "sub": a - b, "mul": a * b, "neg": (np.zeros_like(a) - a), "lt": a < b, "le": a <= b,
                "eq": a == b, "ne": a != b, "gt": a > b, "max": np.maximum(a, b), "min": np.minimum(a, b),
                "add_s": a + np.array(300).astype(dt), "mul_s": a * np.array(3, dt), "abs": np.abs(a)}
    same(got, want)
    if dt in TORCH_FULL:  # torch agrees (numpy is the oracle above because torch lacks uint16/32/64 kernels)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        for k, v in {"add": ta + tb, "sub": ta - tb, "mul": ta * tb, "add_s": ta + 300}.items():
            np.testing.assert_array_equal(got[k], v.numpy(), err_msg=k)
    # floor division / remainder with torch's semantics (nonzero divisors)
    got = run(lambda x, y: {"fdiv": x // y, "mod": x % y}, a[nz], b[nz])
    if dt in TORCH_FULL:
        ta, tb = torch.from_numpy(a[nz]), torch.from_numpy(b[nz])
        want = {"fdiv": (ta // tb).numpy(), "mod": torch.remainder(ta, tb).numpy()}
    else:
        want = {"fdiv": a[nz] // b[nz], "mod": a[nz] % b[nz]}
    same(got, want)


@pytest.mark.parametrize("dt", INTS)
def test_reductions(dt):
    x = np.concatenate([edges(dt), edges(dt)[::-1]]).reshape(2, -1)
    got = run(lambda t: {"sum": t.sum(), "sum1": t.sum(1), "prod": t.prod(1), "max": t.max(1), "min": t.min(),
                         "amax": t.max(), "argmax": t.argmax(1), "cumsum": t.cumsum(1)}, x)
    x64 = x.astype(np.int64) if dt != "uint64" else x
    with np.errstate(all="ignore"):
        want = {"sum": x64.sum(), "sum1": x64.sum(1), "prod": np.prod(x64, 1), "max": x.max(1), "min": x.min(),
                "amax": x.max(), "argmax": x.argmax(1), "cumsum": np.cumsum(x64, 1)}
    if dt == "uint64":  # torch: an integer sum/prod is int64 (the uint64 bits reinterpreted)
        for k in ("sum", "sum1", "prod", "cumsum"):
            want[k] = np.asarray(want[k]).astype(np.int64)
    if dt in TORCH_FULL:
        t = torch.from_numpy(x)
        tw = {"sum": t.sum(), "sum1": t.sum(1), "prod": t.prod(1), "max": t.amax(1), "min": t.min(),
              "amax": t.max(), "argmax": t.argmax(1), "cumsum": t.cumsum(1)}
        for k, v in tw.items():
            assert str(v.dtype).removeprefix("torch.") == np.asarray(want[k]).dtype.name, k
            np.testing.assert_array_equal(v.numpy(), want[k], err_msg=k)
    same(got, want)


@pytest.mark.parametrize("dt", INTS)
def test_casts(dt):
    x = edges(dt)
    targets = INTS + ["bool", "float32", "float64"]
    got = run(lambda t: {d: t.cast(d) for d in targets}, x)
    with np.errstate(all="ignore"):
        want = {d: (x != 0) if d == "bool" else x.astype(d) for d in targets}
    if dt in TORCH_FULL:
        t = torch.from_numpy(x)
        for d in ("int8", "int16", "int32", "int64", "uint8", "bool", "float32", "float64"):
            np.testing.assert_array_equal(t.to(getattr(torch, d)).numpy(), want[d], err_msg=d)
    same(got, want)
    # float -> int truncates toward zero (values in range; out-of-range float -> int is undefined, as in C/torch)
    info = np.iinfo(dt)
    f = np.array([0.0, 0.9, 1.5, 6.99, min(info.max, 100) + 0.75] + ([-0.9, -1.5, -6.99, -100.5] if info.min < 0
                                                                    else []), np.float64)
    got = run(lambda t: {"f64": t.cast(dt), "f32": t.cast("float32").cast(dt)}, f)
    same(got, {"f64": np.trunc(f).astype(dt), "f32": np.trunc(f.astype(np.float32)).astype(dt)})


# ---------------------------------------------------------------------------------------------- bitwise
@pytest.mark.parametrize("dt", INTS)
def test_bitwise_and_shifts(dt):
    a, b = pairs(dt)
    got = run(lambda x, y: {"and": x & y, "or": x | y, "xor": x ^ y, "not": ~x, "shl": x << y, "shr": x >> y,
                            "and_f": x.bitwise_and(y), "shl_f": x.bitwise_left_shift(y),
                            "shr_f": x.bitwise_right_shift(y), "not_f": x.bitwise_not(), "shl_s": x << 3,
                            "shr_s": x >> 1, "rand": 6 & x, "rshl": 1 << y.cast("int64").clip(0, 62)}, a, b)
    want = {"and": a & b, "or": a | b, "xor": a ^ b, "not": ~a, "shl": shift_model(a, b, "shl"),
            "shr": shift_model(a, b, "shr"), "and_f": a & b, "shl_f": shift_model(a, b, "shl"),
            "shr_f": shift_model(a, b, "shr"), "not_f": ~a, "shl_s": shift_model(a, np.full_like(a, 3), "shl"),
            "shr_s": shift_model(a, np.full_like(a, 1), "shr"), "rand": a & np.array(6, dt),
            "rshl": np.left_shift(np.int64(1), np.clip(b.astype(np.int64), 0, 62))}
    if dt in TORCH_FULL:  # the shift model is torch's CPU behaviour
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        for k, v in {"shl": ta << tb, "shr": ta >> tb, "and": ta & tb, "not": ~ta, "xor": ta ^ tb,
                     "shl_s": ta << 3, "shr_s": ta >> 1}.items():
            np.testing.assert_array_equal(v.numpy(), want[k], err_msg=k)
    same(got, want)


def test_bitwise_bool_and_errors():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    got = run(lambda x, y: {"and": x & y, "or": x | y, "xor": x ^ y, "not": ~x, "and_t": x & True,
                            "and_i": x & 3}, a, b)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    same(got, {"and": (ta & tb).numpy(), "or": (ta | tb).numpy(), "xor": (ta ^ tb).numpy(), "not": (~ta).numpy(),
               "and_t": (ta & True).numpy(), "and_i": (ta & 3).numpy()})
    cx = lm.Graph()
    f, bl = cx.tensor((2,)), cx.tensor((2,), dtype="bool")
    for bad in (lambda: f & f, lambda: ~f, lambda: f << 1, lambda: bl << bl, lambda: bl >> 1.5):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(TypeError, match="uint16, uint32, uint64"):
        cx.tensor((2,), dtype="uint16") & cx.tensor((2,), dtype="int8")


# ---------------------------------------------------------------------------------------------- promotion
def test_promotion_table_matches_torch():
    cx = lm.Graph()
    ts = {d: cx.tensor((2,), dtype=d) for d in ALL}
    for x in ALL:
        for y in ALL:
            try:
                want = str(torch.promote_types(getattr(torch, x), getattr(torch, y))).removeprefix("torch.")
            except RuntimeError:
                want = None
            if want is None:
                with pytest.raises(TypeError, match="Promotion for uint16, uint32, uint64"):
                    ts[x] + ts[y]
                continue
            assert lm.dtype.promote_types(lm.DType(x), lm.DType(y)).value == want, (x, y)
            assert (ts[x] * ts[y]).dtype.value == want, (x, y)
    for d in INTS:  # Python scalars: an int keeps the tensor's type, a float gives the default float
        assert (ts[d] + 1).dtype.value == d
        assert (ts[d] + 1.5).dtype.value == "float32"
        assert str(torch.result_type(torch.zeros(1, dtype=getattr(torch, d)), 1)).endswith(d)
    assert (ts["bool"] + 1).dtype.value == "int64"
    assert (ts["uint8"] + ts["int8"]).dtype.value == "int16"


def test_mixed_dtype_arithmetic_against_torch():
    u = np.array([0, 1, 200, 255], np.uint8)
    s = np.array([-128, -1, 100, 127], np.int8)
    h = np.array([-32768, 300, -2, 32767], np.int16)
    got = run(lambda x, y, z: {"us": x + y, "uz": x * z, "sz": y - z, "u_or_s": x | y, "s_shl_z": y << z.clip(0, 3),
                               "ge": x >= y}, u, s, h)
    tu, ts, th = map(torch.from_numpy, (u, s, h))
    same(got, {"us": (tu + ts).numpy(), "uz": (tu * th).numpy(), "sz": (ts - th).numpy(), "u_or_s": (tu | ts).numpy(),
               "s_shl_z": (ts << th.clip(0, 3)).numpy(), "ge": (tu >= ts).numpy()})


# ---------------------------------------------------------------------------------------------- data, indices
def test_set_ranges_and_index_types():
    cx = lm.Graph()
    for dt in INTS:
        info = np.iinfo(dt)
        t = cx.tensor((2,), dtype=dt)
        t.set(np.array([info.min, info.max], dt))
        t.set([info.min, info.max])  # Python ints in range
        with pytest.raises(OverflowError):
            t.set([info.max + 1, 0])
        if info.min < 0:
            with pytest.raises(OverflowError):
                t.set([info.min - 1, 0] if dt == "int64" else np.array([info.min - 1, 0], np.int64))
        else:
            with pytest.raises(OverflowError):
                t.set([-1, 0])
    data = cx.tensor((3,))
    for dt in ("uint8", "int8", "int16", "uint16"):
        with pytest.raises(TypeError, match="uint8 index tensors|int32/int64"):
            data.gather(0, cx.tensor((3,), dtype=dt))
        with pytest.raises(IndexError):
            data[cx.tensor((2,), dtype=dt)]
    x = np.array([1.5, 2.5, 3.5], np.float32)
    i32 = np.array([2, 0], np.int32)
    got = run(lambda t, i: {"g": t.gather(0, i), "idx": t[i]}, x, i32)
    same(got, {"g": x[i32], "idx": x[i32]})


# ---------------------------------------------------------------------------------------------- eager
def test_eager_operators():
    import luminal.eager as le

    a = le.tensor(np.array([-128, -1, 0, 5, 127], np.int8))
    b = le.tensor(np.array([1, 7, 8, 2, -1], np.int8))
    ta, tb = torch.tensor([-128, -1, 0, 5, 127], dtype=torch.int8), torch.tensor([1, 7, 8, 2, -1], dtype=torch.int8)
    for got, want in [(a & b, ta & tb), (a | b, ta | tb), (a ^ b, ta ^ tb), (~a, ~ta), (a << b, ta << tb),
                      (a >> b, ta >> tb), (a + b, ta + tb), (a * b, ta * tb), (3 & a, 3 & ta), (a.sum(), ta.sum()),
                      (a.bitwise_xor(b), ta.bitwise_xor(tb))]:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got.numpy().dtype == want.numpy().dtype
    u = le.tensor(np.array([250, 3], np.uint8))
    np.testing.assert_array_equal((u + 10).numpy(), np.array([4, 13], np.uint8))
