"""safetensors element types (issue 16, item 3): BF16 / F16 / 8-bit integer files load; ``dtype="bfloat16"``
saves round to nearest even.

Oracles: PyTorch (``tensor.to(torch.bfloat16)``, ``safetensors.torch``) and, where installed, ``ml_dtypes``.
Comparisons are bit-exact (uint32 / uint16 views) except NaN payloads, which are checked as NaN with its sign.
"""

import os
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file as torch_load_file, save_file as torch_save_file

import luminal.nn as nn
from luminal.io import (UnsupportedDTypeError, bfloat16_bits_to_float32, float32_to_bfloat16_bits, load_into,
                        load_safetensors, safetensors_header, save_safetensors)


def special_f32(n=4096, seed=0):
    """Random float32 of every magnitude plus rounding ties, overflow, denormals, signed zeros, inf and NaN."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2 ** 16, 256, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000  # exact halfway
    near = np.concatenate([ties - 1, ties + 1])
    edges = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x00000001, 0x80000001, 0x007FFFFF,
                      0x00008000, 0x00018000, 0x0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                      0x7F800001, 0xFFC12345, 0x7FBFFFFF], np.uint32)
    return np.concatenate([bits, ties, near, edges]).view(np.float32)


def torch_bf16_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def assert_bf16_equal(got: np.ndarray, want: np.ndarray, x: np.ndarray):
    """Bit-exact where x is not NaN; where it is: a NaN of the same sign."""
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    g = bfloat16_bits_to_float32(got[nan])
    assert np.isnan(g).all()
    np.testing.assert_array_equal(np.signbit(g), np.signbit(x[nan]))


# ============================================================================================ rounding
def test_float32_to_bfloat16_matches_torch_bit_exactly():
    x = special_f32()
    assert_bf16_equal(float32_to_bfloat16_bits(x), torch_bf16_bits(x), x)


def test_float64_rounds_through_float32_like_torch():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
                        [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -8 - 2 ** -40, 3.5e38, -1e-300]])
    got = float32_to_bfloat16_bits(x)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(got, want)


def test_rounding_matches_ml_dtypes_including_nan():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = special_f32(seed=2)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(float32_to_bfloat16_bits(x), want)


def test_widening_is_exact():
    bits = np.arange(2 ** 16, dtype=np.uint16)
    got = bfloat16_bits_to_float32(bits)
    want = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # NaNs included: a shift


# ============================================================================================ loading
def test_load_bf16_file_written_by_torch(tmp_path):
    x = special_f32(1000)[:980].reshape(140, 7)
    t = torch.from_numpy(x).to(torch.bfloat16)
    path = str(tmp_path / "w.safetensors")
    torch_save_file({"w": t, "empty": torch.zeros((0, 3), dtype=torch.bfloat16),
                     "scalar": torch.tensor(1.5, dtype=torch.bfloat16)}, path)
    got = load_safetensors(path)
    assert got["w"].dtype == np.float32 and got["w"].shape == (140, 7)
    np.testing.assert_array_equal(got["w"].view(np.uint32), t.float().numpy().view(np.uint32))
    assert got["empty"].shape == (0, 3) and got["empty"].dtype == np.float32
    assert got["scalar"].shape == () and got["scalar"] == 1.5
    f64 = load_safetensors(path, dtype="float64", names=["w"])["w"]
    assert f64.dtype == np.float64
    np.testing.assert_array_equal(f64, t.double().numpy())
    assert safetensors_header(path) == {"w": ("BF16", (140, 7)), "empty": ("BF16", (0, 3)), "scalar": ("BF16", ())}


@pytest.mark.parametrize("tdtype,ndtype", [(torch.float16, np.float16), (torch.int8, np.int8),
                                           (torch.uint8, np.uint8), (torch.int16, np.int16),
                                           (torch.bool, np.bool_), (torch.int32, np.int32),
                                           (torch.float64, np.float64)])
def test_load_other_dtypes_written_by_torch(tmp_path, tdtype, ndtype):
    g = torch.Generator().manual_seed(3)
    if tdtype.is_floating_point:
        t = (torch.randn(5, 6, generator=g) * 100).to(tdtype)
    elif tdtype == torch.bool:
        t = torch.randint(0, 2, (5, 6), generator=g).bool()
    else:
        info = torch.iinfo(tdtype)
        t = torch.randint(info.min, info.max, (5, 6), generator=g, dtype=torch.int64).to(tdtype)
    path = str(tmp_path / "w.safetensors")
    torch_save_file({"t": t, "bf": torch.ones(2, dtype=torch.bfloat16)}, path)
    got = load_safetensors(path)
    assert got["t"].dtype == ndtype
    np.testing.assert_array_equal(got["t"], t.numpy())
    np.testing.assert_array_equal(got["bf"], np.ones(2, np.float32))


def test_load_into_module_from_bf16_checkpoint(tmp_path):
    torch.manual_seed(0)
    tl = torch.nn.Linear(5, 3).to(torch.bfloat16)
    path = str(tmp_path / "lin.safetensors")
    torch_save_file(tl.state_dict(), path)
    lin = nn.Linear(5, 3)
    load_into(lin, path)
    np.testing.assert_array_equal(lin.weight.data, tl.weight.float().detach().numpy())
    np.testing.assert_array_equal(lin.bias.data, tl.bias.float().detach().numpy())


def test_unsupported_dtype_names_file_tensor_and_dtype(tmp_path):
    path = str(tmp_path / "f8.safetensors")
    torch_save_file({"ok": torch.ones(2), "q": torch.zeros(4, dtype=torch.float8_e4m3fn)}, path)
    with pytest.raises(UnsupportedDTypeError) as info:
        load_safetensors(path)
    msg = str(info.value)
    assert path in msg and "'q'" in msg and "F8_E4M3" in msg and "BF16" in msg, msg
    assert isinstance(info.value, ValueError)
    np.testing.assert_array_equal(load_safetensors(path, names=["ok"])["ok"], np.ones(2, np.float32))
    assert safetensors_header(path)["q"] == ("F8_E4M3", (4,))


# ============================================================================================ saving
def test_save_bfloat16_matches_torch_and_reads_back(tmp_path):
    x = special_f32(3000, seed=4)[:3700].reshape(100, 37)
    ints = np.arange(-3, 9, dtype=np.int64).reshape(3, 4)
    path = str(tmp_path / "out.safetensors")
    save_safetensors({"x": x, "ints": ints, "flags": np.array([True, False])}, path, metadata={"k": "v"},
                     dtype="bfloat16")
    back = torch_load_file(path)  # the safetensors package (torch framework) reads our file
    assert back["x"].dtype == torch.bfloat16 and back["ints"].dtype == torch.int64 and back["flags"].dtype == torch.bool
    assert_bf16_equal(back["x"].view(torch.int16).numpy().view(np.uint16).ravel(), torch_bf16_bits(x).ravel(),
                      x.ravel())
    np.testing.assert_array_equal(back["ints"].numpy(), ints)
    from safetensors import safe_open
    with safe_open(path, framework="np") as f:
        assert f.metadata() == {"k": "v"}
    ours = load_safetensors(path)
    nan = np.isnan(x)
    want = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours["x"][~nan], want[~nan])
    assert np.isnan(ours["x"][nan]).all()
    assert ours["ints"].dtype == np.int64


def test_save_module_as_bfloat16_and_float16(tmp_path):
    nn.init.manual_seed(0)
    lin = nn.Linear(6, 4)
    for dtype, tdtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("bf16", torch.bfloat16)):
        path = str(tmp_path / f"{dtype}.safetensors")
        save_safetensors(lin, path, dtype=dtype)
        back = torch_load_file(path)
        assert back["weight"].dtype == tdtype
        np.testing.assert_array_equal(back["weight"].numpy() if tdtype != torch.bfloat16 else
                                      back["weight"].view(torch.int16).numpy(),
                                      torch.from_numpy(lin.weight.data).to(tdtype).numpy() if tdtype != torch.bfloat16
                                      else torch.from_numpy(lin.weight.data).to(tdtype).view(torch.int16).numpy())


def test_save_ml_dtypes_bfloat16_array(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16)
    path = str(tmp_path / "m.safetensors")
    save_safetensors({"x": x}, path)
    assert safetensors_header(path) == {"x": ("BF16", (3,))}
    np.testing.assert_array_equal(load_safetensors(path)["x"], np.array([1.0, -2.5, 3.140625], np.float32))


def test_save_bad_dtype_raises(tmp_path):
    with pytest.raises(ValueError, match=re.escape("unsupported dtype 'int8'") + ".*bfloat16"):
        save_safetensors({"x": np.ones(2, np.float32)}, str(tmp_path / "x.safetensors"), dtype="int8")
    assert os.listdir(tmp_path) == []


def test_bf16_save_is_atomic(tmp_path, monkeypatch):
    path = str(tmp_path / "w.safetensors")
    save_safetensors({"w": np.full(3, 1.0, np.float32)}, path, dtype="bfloat16")

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("luminal.io.safetensors._write_safetensors", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_safetensors({"w": np.full(3, 2.0, np.float32)}, path, dtype="bfloat16")
    np.testing.assert_array_equal(load_safetensors(path)["w"], np.full(3, 1.0, np.float32))
    assert os.listdir(tmp_path) == ["w.safetensors"]


def test_safetensors_integer_dtypes_roundtrip_through_graph_tensors(tmp_path):
    """I8/U8/I16/U16/U32/U64 arrays load as numpy arrays, set() into tensors of the matching luminal dtype,
    compute there (wrap-around) and save back with the same safetensors dtypes."""
    import luminal as lm
    from luminal.io.safetensors import load_safetensors, safetensors_header, save_safetensors

    arrays = {d: np.array([0, 1, np.iinfo(d).max, np.iinfo(d).min, 7], d)
              for d in ("int8", "uint8", "int16", "uint16", "uint32", "uint64")}
    save_safetensors(arrays, tmp_path / "a.safetensors")
    loaded = load_safetensors(tmp_path / "a.safetensors")
    cx = lm.Graph()
    outs = {}
    for d, arr in loaded.items():
        assert arr.dtype == np.dtype(d)
        t = cx.tensor(arr.shape, dtype=d).set(arr)
        outs[d] = ((t + 1) ^ 3).retrieve()
    cx.execute()
    result = {d: o.data() for d, o in outs.items()}
    with np.errstate(over="ignore"):
        for d, arr in arrays.items():
            np.testing.assert_array_equal(result[d], (arr + np.array(1, d)) ^ np.array(3, d))
    save_safetensors(result, tmp_path / "b.safetensors")
    header = safetensors_header(tmp_path / "b.safetensors")
    assert {k: v[0] for k, v in header.items()} == {"int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16",
                                                    "uint32": "U32", "uint64": "U64"}
