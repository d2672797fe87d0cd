"""A catalogue of bad inputs and faults (issue 19, part 1): every case either raises a clear error, whose
message names what was wrong and what was expected, or gives the correct result (oracle: numpy / PyTorch).

Sections: input data (``set``), symbol bindings (``set_dim``), dtypes, shapes and views, op ranges (``narrow``,
gathers and embeddings, class indices, probabilities) on the reference interpreter and the compiled cpu device,
saves (read-only files, symlinks, umask, fsync, stale temporaries, saves killed mid-write), loads (folders,
empty, truncated and foreign files), optimizer checkpoints of another optimizer type, environment faults.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.graph import GraphError
from luminal.io import load_safetensors, save_safetensors
from luminal.runtime.cpu import find_compiler
from luminal.training import SGD, Adam, Trainer, load_checkpoint, save_checkpoint

HAS_CC = find_compiler() is not None
DEVICES = ["reference", pytest.param("cpu", marks=pytest.mark.skipif(not HAS_CC, reason="needs a C compiler"))]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raises(exc, *fragments):
    """``pytest.raises`` that also checks every fragment (a regex) is in the message."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *args):
            out = self.ctx.__exit__(*args)
            msg = str(self.info.value)
            for frag in fragments:
                assert re.search(frag, msg), f"{frag!r} not in message: {msg}"
            return out

    return _Check()


def run(graph, device, out):
    graph.compile(device=device)
    graph.execute()
    return out.data()


# ================================================================================================ input data
I32 = r"\[-2147483648, 2147483647\]"
I64 = r"\[-9223372036854775808, 9223372036854775807\]"


@pytest.mark.parametrize("value", [2 ** 40, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 62])
@pytest.mark.parametrize("source", ["numpy", "list", "scalar"])
def test_int32_input_out_of_range_raises(value, source):
    cx = lm.Graph()
    t = cx.tensor(() if source == "scalar" else 2, "int32", name="ids")
    data = {"numpy": np.array([1, value], np.int64), "list": [1, value], "scalar": value}[source]
    with raises(OverflowError, "'ids'", str(value), "int32", I32):
        t.set(data)


@pytest.mark.parametrize("data", [[2 ** 63], np.array([2 ** 63], np.uint64), [2 ** 70], [-2 ** 63 - 1],
                                  np.array([2 ** 64 - 1], np.uint64)])
def test_int64_input_out_of_range_raises(data):
    cx = lm.Graph()
    t = cx.tensor(1, "int64", name="big")
    value = int(np.asarray(data, dtype=object).reshape(-1)[0])
    with raises(OverflowError, "'big'", str(value), "int64", I64):
        t.set(data)


@pytest.mark.parametrize("data", [[1e20], [3e9], [-3e9]])
def test_float_list_beyond_int32_raises(data):
    cx = lm.Graph()
    t = cx.tensor(1, "int32", name="n")
    with raises(OverflowError, "'n'", "int32", I32):
        t.set(data)


@pytest.mark.parametrize("data", [[float("nan")], [float("inf")], [1.5], np.float64("nan")])
def test_non_integer_into_int_raises(data):
    cx = lm.Graph()
    t = cx.tensor(() if np.isscalar(data) else 1, "int32", name="n")
    with raises(TypeError, "'n'", "int32", r"nan|inf|1\.5"):
        t.set(data)


def test_nan_numpy_array_into_int_raises():
    cx = lm.Graph()
    t = cx.tensor(2, "int64", name="n")
    with raises(TypeError, "'n'", "float64", "int64"):
        t.set(np.array([np.nan, 1.0]))


@pytest.mark.parametrize("dtype,values", [("int32", [-2 ** 31, 2 ** 31 - 1]), ("int64", [-2 ** 63, 2 ** 63 - 1])])
def test_int_input_boundaries_are_exact(dtype, values):
    cx = lm.Graph()
    t = cx.tensor(2, dtype).set(np.array(values, np.int64))
    out = t.retrieve()
    cx.execute()
    assert out.data().tolist() == values


def test_uint32_into_int64_exact():
    cx = lm.Graph()
    t = cx.tensor(1, "int64").set(np.array([2 ** 32 - 1], np.uint32)).retrieve()
    cx.execute()
    assert t.data().tolist() == [2 ** 32 - 1]


def test_float64_into_float32_is_a_cast_like_torch():
    torch = pytest.importorskip("torch")
    data = np.array([1e300, -1e300, 0.1, 2 ** 70], np.float64)
    cx = lm.Graph()
    t = cx.tensor(4).set(data).retrieve()
    cx.execute()
    np.testing.assert_array_equal(t.data(), torch.tensor(data, dtype=torch.float32).numpy())


def test_huge_python_int_into_float_tensor():
    cx = lm.Graph()
    t = cx.tensor(1).set([2 ** 70]).retrieve()
    cx.execute()
    assert t.data()[0] == np.float32(2.0 ** 70)


def test_bool_tensor_from_huge_python_int():
    cx = lm.Graph()
    t = cx.tensor(2, "bool").set([2 ** 70, 0]).retrieve()
    cx.execute()
    assert t.data().tolist() == [True, False]


def test_bool_tensor_from_int_list_like_torch():
    torch = pytest.importorskip("torch")
    cx = lm.Graph()
    t = cx.tensor(3, "bool").set([2, 0, -1]).retrieve()
    cx.execute()
    assert t.data().tolist() == torch.tensor([2, 0, -1], dtype=torch.bool).tolist()


@pytest.mark.parametrize("data,frag", [(["a", "b"], "numeric"), (np.array([1 + 2j, 0j]), "numeric"),
                                       (np.array([object(), 1], dtype=object), "numeric")])
def test_non_numeric_data_raises(data, frag):
    cx = lm.Graph()
    t = cx.tensor(2, name="x")
    with raises(TypeError, "'x'", frag):
        t.set(data)


@pytest.mark.parametrize("data,frag", [(np.zeros((2, 4)), r"expected 3, got 4"), (np.zeros(6), r"2-d"),
                                       (np.zeros((2, 3, 1)), r"2-d")])
def test_input_shape_mismatch_raises(data, frag):
    cx = lm.Graph()
    t = cx.tensor((2, 3), name="x")
    with raises(ValueError, "'x'", frag):
        t.set(data)


def test_set_on_a_computed_tensor_raises():
    cx = lm.Graph()
    y = cx.tensor(3) + 1
    with raises(GraphError, "input tensor"):
        y.set(np.zeros(3))


def test_set_on_a_view_raises():
    cx = lm.Graph()
    x = cx.tensor((2, 3))
    with raises(GraphError, "view"):
        x.T.set(np.zeros((3, 2)))


def test_set_dyn_wrong_count_raises():
    cx = lm.Graph()
    x = cx.tensor(("n",), name="x")
    with raises(ValueError, "'x'", "5 values", r"\(2, 3\)"):
        x.set_dyn(np.zeros(5), (2, 3))


def test_symbol_bound_twice_in_one_array_raises():
    cx = lm.Graph()
    x = cx.tensor(("n", "n"), name="sq")
    with raises(ValueError, "'sq'", "symbol 'n'", "2 and 3"):
        x.set(np.zeros((2, 3)))


def test_missing_input_data_raises():
    cx = lm.Graph()
    x = cx.tensor(3, name="never_set")
    (x * 2).retrieve()
    with raises(GraphError, "'never_set'", r"set\(\)"):
        cx.execute()


@pytest.mark.parametrize("device", DEVICES)
def test_int64_ids_into_int32_input_compute_correctly(device):
    cx = lm.Graph()
    t = cx.tensor(3, "int32").set(np.array([5, -7, 2 ** 31 - 1], np.int64))
    out = (t.cast("int64") + 1).retrieve()
    assert run(cx, device, out).tolist() == [6, -6, 2 ** 31]


# ================================================================================================ symbols
@pytest.mark.parametrize("value", [2 ** 63, 2 ** 64, 2 ** 100, np.uint64(2 ** 63)])
def test_set_dim_too_large_raises(value):
    cx = lm.Graph()
    with raises(OverflowError, "'batch'", str(int(value)), r"\[0, 9223372036854775807\]"):
        cx.set_dim("batch", value)


@pytest.mark.parametrize("value", [-1, 1.5, "3", None])
def test_set_dim_invalid_raises(value):
    cx = lm.Graph()
    with raises(ValueError, "'batch'", "non-negative int"):
        cx.set_dim("batch", value)


def test_set_dim_largest_value_accepted():
    cx = lm.Graph()
    cx.set_dim("n", 2 ** 63 - 1)
    assert cx.dyn_map["n"] == 2 ** 63 - 1


def test_unbound_symbol_raises_naming_it():
    from luminal.shape import UnboundSymbolError

    cx = lm.Graph()
    (cx.arange("m") * 2).retrieve()
    with raises(UnboundSymbolError, "'m'|m", "set_dim"):
        cx.execute()


# ================================================================================================ dtypes
@pytest.mark.parametrize("dtype", ["complex64", "float8_e4m3fn", np.complex128, "float128", "int4"])
def test_unsupported_dtype_raises_listing_supported(dtype):
    cx = lm.Graph()
    with raises(TypeError, "unsupported dtype", "float32", "int64"):
        cx.tensor(3, dtype)


@pytest.mark.parametrize("data", [np.array([1, 300], np.int16), np.array([255], np.uint8)])
def test_narrow_numpy_ints_into_int32_exact(data):
    cx = lm.Graph()
    t = cx.tensor(len(data), "int32").set(data).retrieve()
    cx.execute()
    assert t.data().tolist() == data.tolist()


def test_gather_with_float_index_raises():
    cx = lm.Graph()
    x = cx.tensor((3, 2))
    with raises(TypeError, "index", "int32/int64"):
        x.gather(0, cx.tensor((3, 2)))


def test_float_numpy_into_bool_tensor_raises():
    cx = lm.Graph()
    t = cx.tensor(2, "bool", name="mask")
    with raises(TypeError, "'mask'", "float64"):
        t.set(np.array([0.5, 1.0]))


# ================================================================================================ shapes / views
def test_reshape_wrong_count_raises():
    cx = lm.Graph()
    with raises(GraphError, "6 elements", "7 elements"):
        cx.tensor((2, 3)).reshape(7)


def test_reshape_two_minus_ones_raises():
    cx = lm.Graph()
    with raises(ValueError, "only one dimension can be -1"):
        cx.tensor((2, 3)).reshape(-1, -1)


def test_expand_incompatible_raises():
    cx = lm.Graph()
    with raises(GraphError, "cannot broadcast dim", "3", "4"):
        cx.tensor((2, 3)).expand(2, 4)


def test_permute_wrong_axes_raises():
    cx = lm.Graph()
    with raises(ValueError, "permute", "3 axes", "2 dims"):
        cx.tensor((2, 3)).permute(0, 1, 2)


def test_too_many_indices_raises():
    cx = lm.Graph()
    with raises(IndexError, "too many indices", "2 dims"):
        cx.tensor((2, 3))[0, 0, 0]


def test_slice_step_zero_raises():
    cx = lm.Graph()
    with raises(ValueError, "step cannot be zero"):
        cx.tensor(5).slice_axis(0, 0, 5, 0)


def test_matmul_mismatch_raises():
    cx = lm.Graph()
    with pytest.raises((GraphError, ValueError)) as info:
        cx.tensor((2, 3)) @ cx.tensor((4, 5))
    assert "3" in str(info.value) and "4" in str(info.value)


def test_negative_dimension_raises():
    cx = lm.Graph()
    with raises(ValueError, "negative dimension"):
        cx.tensor((2, -1))


def test_gather_rank_mismatch_raises():
    cx = lm.Graph()
    with raises(GraphError, "same rank"):
        cx.tensor((3, 2)).gather(0, cx.tensor(3, "int64"))


# ================================================================================================ narrow
@pytest.mark.parametrize("start,length,frags", [
    (3, 4, [r"start \(3\) \+ length \(4\)", r"size \(5\)"]),
    (5, 1, [r"start \(5\) \+ length \(1\)", r"size \(5\)"]),
    (6, 0, ["start 6", "size 5", "-5 <= start <= 5"]),
    (-6, 1, ["start -6", "size 5", "-5 <= start <= 5"]),
    (-2, 3, [r"start \(3\) \+ length \(3\)", r"size \(5\)"]),
    (0, -1, ["length must be non-negative", "-1"]),
])
def test_narrow_out_of_range_raises(start, length, frags):
    cx = lm.Graph()
    x = cx.tensor((5, 3))
    with raises(GraphError, "narrow", *frags):
        x.narrow(0, start, length)


@pytest.mark.parametrize("axis,start,length", [(0, -2, 2), (0, 0, 5), (1, 1, 2), (0, 5, 0), (-1, -3, 1), (0, -5, 5)])
def test_narrow_in_range_matches_torch(axis, start, length):
    torch = pytest.importorskip("torch")
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    cx = lm.Graph()
    out = cx.tensor((5, 3)).set(data).narrow(axis, start, length).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), torch.from_numpy(data).narrow(axis, start, length).numpy())


def test_narrow_negative_start_symbolic_dim():
    cx = lm.Graph()
    x = cx.tensor(("n", 2))
    out = x.narrow(0, -2, 2).retrieve()
    x.set(np.arange(10, dtype=np.float32).reshape(5, 2))
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.arange(10, dtype=np.float32).reshape(5, 2)[-2:])


# ================================================================================================ class indices
def _ce_graph(targets, n_classes=3, fn=F.cross_entropy, **kw):
    cx = lm.Graph()
    logits = np.linspace(-1, 1, len(targets) * n_classes, dtype=np.float32).reshape(len(targets), n_classes)
    x = cx.tensor((len(targets), n_classes)).set(logits)
    t = cx.tensor(len(targets), "int64", name="target").set(np.array(targets, np.int64))
    if fn is F.nll_loss:
        x = x.log_softmax(1)
    return cx, fn(x, t, **kw).retrieve(), logits


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("targets,bad", [([0, 3], 3), ([0, -1], -1), ([7, 1], 7)])
def test_cross_entropy_target_out_of_range_raises(device, targets, bad):
    cx, loss, _ = _ce_graph(targets)
    with raises(IndexError, "cross_entropy", f"target {bad}", r"\[0, 3\)", "3 classes"):
        run(cx, device, loss)


@pytest.mark.parametrize("device", DEVICES)
def test_nll_loss_target_out_of_range_raises(device):
    cx, loss, _ = _ce_graph([1, 4], fn=F.nll_loss)
    with raises(IndexError, "nll_loss", "target 4", r"\[0, 3\)"):
        run(cx, device, loss)


@pytest.mark.parametrize("targets,ignore", [([0, -100, 2], -100), ([0, 255, 2], 255), ([1, 1, 0], 1)])
def test_cross_entropy_ignore_index_matches_torch(targets, ignore):
    torch = pytest.importorskip("torch")
    cx, loss, logits = _ce_graph(targets, ignore_index=ignore)
    got = run(cx, "reference", loss)
    want = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.tensor(targets), ignore_index=ignore)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5)


def test_cross_entropy_spatial_target_out_of_range_raises():
    cx = lm.Graph()
    x = cx.tensor((1, 3, 2, 2)).set(np.zeros((1, 3, 2, 2), np.float32))
    t = cx.tensor((1, 2, 2), "int64").set(np.array([[[0, 1], [2, 3]]]))
    loss = F.cross_entropy(x, t).retrieve()
    with raises(IndexError, "target 3", r"\[0, 3\)"):
        run(cx, "reference", loss)


def test_cross_entropy_symbolic_batch_checked_every_run():
    cx = lm.Graph()
    x = cx.tensor(("b", 4))
    t = cx.tensor(("b",), "int64")
    loss = F.cross_entropy(x, t, reduction="sum").retrieve()
    x.set(np.zeros((2, 4), np.float32))
    t.set(np.array([0, 3]))
    cx.execute()
    assert np.isfinite(loss.data())
    x.set(np.zeros((3, 4), np.float32))
    t.set(np.array([0, 3, 4]))
    with raises(IndexError, "target 4", r"\[0, 4\)"):
        cx.execute()
    x.set(np.zeros((0, 4), np.float32))
    t.set(np.zeros(0, np.int64))
    cx.execute()  # an empty batch has no bad target
    assert loss.data() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_symbolic_class_count(device):
    cx = lm.Graph()
    x = cx.tensor((2, "c"))
    t = cx.tensor(2, "int64")
    loss = F.cross_entropy(x, t).retrieve()
    cx.compile(device=device)
    x.set(np.zeros((2, 4), np.float32))
    t.set(np.array([3, 0]))
    cx.execute()
    np.testing.assert_allclose(loss.data(), np.log(4), rtol=1e-6)
    x.set(np.zeros((2, 3), np.float32))
    with raises(IndexError, "target 3", r"\[0, 3\)", "3 classes"):
        cx.execute()


@pytest.mark.parametrize("device", DEVICES)
def test_bad_target_in_training_step_updates_nothing(device):
    model = nn.Linear(4, 3)
    w0 = model.weight.data.copy()
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1), F.cross_entropy, device=device)
    x = np.ones((2, 4), np.float32)
    with raises(IndexError, "target 3", r"\[0, 3\)"):
        trainer.train_step((x, np.array([0, 3])))
    np.testing.assert_array_equal(model.weight.data, w0)
    assert trainer.global_step == 0
    trainer.train_step((x, np.array([0, 2])))
    assert not np.array_equal(model.weight.data, w0)


# ================================================================================================ probabilities
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p,frag", [(1.5, "1.5"), (-0.25, "-0.25"), (float("nan"), "nan")])
def test_bce_input_outside_unit_interval_raises(device, p, frag):
    cx = lm.Graph()
    x = cx.tensor(3).set(np.array([0.5, p, 0.25], np.float32))
    y = cx.tensor(3).set(np.array([1, 0, 1], np.float32))
    loss = F.binary_cross_entropy(x, y).retrieve()
    with raises(ValueError, "binary_cross_entropy", frag, r"\[0, 1\]"):
        run(cx, device, loss)


def test_bce_bounds_inclusive_match_torch():
    torch = pytest.importorskip("torch")
    p = np.array([0.0, 1.0, 0.5, 1e-8], np.float32)
    y = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    cx = lm.Graph()
    loss = F.binary_cross_entropy(cx.tensor(4).set(p), cx.tensor(4).set(y)).retrieve()
    got = run(cx, "reference", loss)
    want = torch.nn.functional.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(y))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-7)


def test_bce_module_raises_too():
    cx = lm.Graph()
    x = cx.tensor(2).set(np.array([2.0, 0.5], np.float32))
    loss = nn.BCELoss()(x, cx.tensor(2).set(np.array([1.0, 0.0], np.float32))).retrieve()
    with raises(ValueError, "2.0", r"\[0, 1\]"):
        run(cx, "reference", loss)


# ================================================================================================ gathers
def _embedding_graph(ids, offset=0):
    cx = lm.Graph()
    emb = nn.Embedding(5, 3)
    t = cx.tensor(len(ids), "int64", name="ids").set(np.array(ids, np.int64))
    out = emb(t + offset if offset else t).retrieve()
    return cx, out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ids,bad", [([0, 7, 1], 7), ([0, -1], -1), ([5], 5)])
def test_embedding_index_out_of_range_names_everything(device, ids, bad):
    cx, out = _embedding_graph(ids)
    with raises(IndexError, f"index {bad}", "size 5", "'ids'", "'weight'"):
        run(cx, device, out)


@pytest.mark.parametrize("device", DEVICES)
def test_computed_gather_index_out_of_range_names_index(device):
    cx, out = _embedding_graph([0, 1, 2], offset=3)  # 2 + 3 = 5 is out of range
    with raises(IndexError, "index 5", "size 5", "'weight'"):
        run(cx, device, out)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_in_range_matches_numpy(device):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[3, 0, 1], [2, 2, 0]])
    cx = lm.Graph()
    out = cx.tensor((4, 3)).set(data).gather(0, cx.tensor((2, 3), "int64").set(idx)).retrieve()
    np.testing.assert_array_equal(run(cx, device, out), np.take_along_axis(data, idx, 0))


# ================================================================================================ saves
@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


def _save_st(path, value=1.0):
    save_safetensors({"w": np.full(4, value, np.float32)}, path)


def _save_ckpt(path, value=1.0):
    save_checkpoint(path, {"w": np.full(4, value, np.float32), "epoch": 3})


def _save_dot(path, value=1.0):
    cx = lm.Graph()
    (cx.tensor(2, name=f"x{value}") * 2).retrieve()
    cx.export_dot(path, render=None)


def _load_value(path):
    if path.endswith(".safetensors"):
        return float(load_safetensors(path)["w"][0])
    if path.endswith(".npz"):
        return float(load_checkpoint(path)["w"][0])
    return float(re.search(r"x(\d+\.\d+)", open(path).read()).group(1))


SAVERS = [pytest.param(_save_st, "m.safetensors", id="safetensors"),
          pytest.param(_save_ckpt, "c.npz", id="checkpoint"), pytest.param(_save_dot, "g.dot", id="dot")]


def _leftovers(folder, keep):
    return sorted(n for n in os.listdir(folder) if n not in keep)


@pytest.mark.parametrize("save,name", SAVERS)
def test_save_refuses_read_only_file(tmp_path, save, name):
    path = str(tmp_path / name)
    save(path, 1.0)
    os.chmod(path, 0o444)
    with raises(PermissionError, re.escape(path), "read-only"):
        save(path, 2.0)
    assert _load_value(path) == 1.0
    assert _leftovers(tmp_path, {name}) == []


@pytest.mark.parametrize("save,name", SAVERS)
def test_save_writes_through_symlink(tmp_path, save, name):
    real = tmp_path / "real" / name
    real.parent.mkdir()
    link = tmp_path / name
    save(str(real), 1.0)
    link.symlink_to(real)
    save(str(link), 2.0)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _load_value(str(real)) == 2.0


@pytest.mark.parametrize("save,name", SAVERS[:2])
def test_save_through_dangling_symlink_creates_target(tmp_path, save, name):
    real = tmp_path / ("target_" + name)
    link = tmp_path / name
    link.symlink_to(real)
    save(str(link), 3.0)
    assert link.is_symlink() and _load_value(str(real)) == 3.0


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
@pytest.mark.parametrize("save,name", SAVERS)
def test_save_honours_umask(tmp_path, umask, save, name, mask, mode):
    os.umask(mask)
    path = str(tmp_path / name)
    save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode


@pytest.mark.parametrize("save,name", SAVERS[:2])
def test_save_keeps_existing_mode(tmp_path, save, name):
    path = str(tmp_path / name)
    save(path, 1.0)
    os.chmod(path, 0o640)
    save(path, 2.0)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640 and _load_value(path) == 2.0


@pytest.mark.parametrize("save,name", SAVERS)
def test_save_to_directory_raises(tmp_path, save, name):
    (tmp_path / name).mkdir()
    with raises(IsADirectoryError, re.escape(name), "directory", "expected a file"):
        save(str(tmp_path / name))


def test_save_safetensors_missing_folder_raises(tmp_path):
    path = str(tmp_path / "nope" / "m.safetensors")
    with raises(FileNotFoundError, re.escape(path), "does not exist"):
        _save_st(path)


def test_save_checkpoint_creates_folders(tmp_path):
    path = str(tmp_path / "a" / "b" / "c.npz")
    _save_ckpt(path, 4.0)
    assert _load_value(path) == 4.0


@pytest.mark.parametrize("save,name", SAVERS)
def test_save_fsyncs_file_and_folder(tmp_path, monkeypatch, save, name):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    save(str(tmp_path / name))
    assert any(p.endswith("/" + name) and ".luminal-tmp." in p for p in synced), synced
    assert os.path.realpath(tmp_path) in synced, synced


@pytest.mark.parametrize("save,name", SAVERS[:2])
def test_failed_write_leaves_destination_and_no_temporary(tmp_path, monkeypatch, save, name):
    path = str(tmp_path / name)
    save(path, 1.0)

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("safetensors.numpy.save_file", boom)
    monkeypatch.setattr(np, "savez", boom)
    with raises(RuntimeError, "disk full"):
        save(path, 2.0)
    assert _load_value(path) == 1.0
    assert _leftovers(tmp_path, {name}) == []


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("save,name", SAVERS)
def test_next_save_removes_stale_temporaries(tmp_path, save, name):
    dead = _dead_pid()
    stale_dir = tmp_path / f".{name}.luminal-tmp.{dead}.abc123"
    stale_dir.mkdir()
    (stale_dir / ".tmpXYZ").write_bytes(b"x" * 100)  # a library's own temporary inside ours
    stale_file = tmp_path / f".other.bin.luminal-tmp.{dead}.q9"
    stale_file.write_bytes(b"y")
    live = tmp_path / f".{name}.luminal-tmp.{os.getpid()}.live1"
    live.mkdir()
    save(str(tmp_path / name))
    assert _leftovers(tmp_path, {name}) == [live.name]


_KILL_CHILD = textwrap.dedent("""
    import os, sys, time, numpy as np
    sys.path.insert(0, {root!r})
    from luminal.io import save_safetensors
    from luminal.training import save_checkpoint
    kind, path, hang = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if hang:  # stop inside the save, right after the data are written
        real = os.fsync
        def fsync(fd):
            if ".luminal-tmp." in os.readlink(f"/proc/self/fd/{{fd}}"):
                print("writing", flush=True)
                time.sleep(60)
            return real(fd)
        os.fsync = fsync
    print("ready", flush=True)
    i = 1
    while True:
        i += 1
        w = np.full(2_000_000, float(i), np.float32)
        if kind == "st":
            save_safetensors({{"w": w}}, path)
        else:
            save_checkpoint(path, {{"w": w}})
""")


@pytest.mark.parametrize("kind,name", [("st", "m.safetensors"), ("ckpt", "c.npz")])
@pytest.mark.parametrize("hang", [True, False], ids=["at-fsync", "anytime"])
def test_save_killed_midway_keeps_destination_and_next_save_cleans(tmp_path, kind, name, hang):
    path = str(tmp_path / name)
    (_save_st if kind == "st" else _save_ckpt)(path, 1.0)
    code = _KILL_CHILD.format(root=ROOT)
    for delay in ([0.0] if hang else [0.05, 0.2, 0.4]):
        child = subprocess.Popen([sys.executable, "-c", code, kind, path, "1" if hang else "0"],
                                 stdout=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line.strip()) for line in child.stdout], daemon=True).start()
        try:
            assert lines.get(timeout=30) == "ready"
            if hang:
                assert lines.get(timeout=10) == "writing", "the save never reached its fsync"
            else:
                time.sleep(delay)
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        value = _load_value(path)  # the destination is always a complete file: the old one or a newer one
        if kind == "st":
            assert np.all(load_safetensors(path)["w"] == value)
        if hang:
            assert _leftovers(tmp_path, {name}), "the kill should have left a temporary behind"
    (_save_st if kind == "st" else _save_ckpt)(path, 9.0)
    assert _load_value(path) == 9.0
    assert _leftovers(tmp_path, {name}) == []


# ================================================================================================ loads
def test_load_safetensors_directory_raises(tmp_path):
    with raises(IsADirectoryError, re.escape(str(tmp_path)), "directory", "expected a safetensors file"):
        load_safetensors(str(tmp_path))


def test_load_checkpoint_directory_raises(tmp_path):
    with raises(IsADirectoryError, re.escape(str(tmp_path)), "directory", "expected a checkpoint"):
        load_checkpoint(str(tmp_path))


@pytest.mark.parametrize("content,frag", [(b"", "empty"), (b"garbage" * 10, "expected a complete .npz"),
                                          ("truncate", "expected a complete .npz"),
                                          ("nometa", "__meta__")])
def test_load_bad_checkpoint_names_path(tmp_path, content, frag):
    path = str(tmp_path / "c.npz")
    if content == "truncate":
        _save_ckpt(path)
        data = open(path, "rb").read()
        open(path, "wb").write(data[:len(data) // 2])
    elif content == "nometa":
        np.savez(path, a=np.zeros(2))
    else:
        open(path, "wb").write(content)
    with raises(ValueError, re.escape(path), frag):
        load_checkpoint(path)


def test_load_missing_checkpoint_names_path(tmp_path):
    path = str(tmp_path / "none.npz")
    with raises(FileNotFoundError, re.escape(path)):
        load_checkpoint(path)


@pytest.mark.parametrize("content", [b"", b"\x08\x00\x00\x00\x00\x00\x00\x00{}", "truncate"])
def test_load_bad_safetensors_names_path(tmp_path, content):
    path = str(tmp_path / "m.safetensors")
    if content == "truncate":
        _save_st(path)
        data = open(path, "rb").read()
        content = data[:len(data) - 5]
    open(path, "wb").write(content)
    with raises(ValueError, re.escape(path), "safetensors"):
        load_safetensors(path)


def test_load_safetensors_missing_names_raises(tmp_path):
    path = str(tmp_path / "m.safetensors")
    _save_st(path)
    with raises(KeyError, "nope"):
        load_safetensors(path, names=["nope"])


def test_module_load_state_dict_shape_mismatch_names_key():
    model = nn.Linear(3, 2)
    with raises(ValueError, "weight", r"\(2, 3\)|2, 3"):
        model.load_state_dict({"weight": np.zeros((3, 3), np.float32), "bias": np.zeros(2, np.float32)})


def test_module_load_state_dict_missing_key_names_it():
    model = nn.Linear(3, 2)
    with raises(KeyError, "bias"):
        model.load_state_dict({"weight": np.zeros((2, 3), np.float32)})


# ================================================================================================ optimizer states
def _trainer(opt_cls, **kw):
    model = nn.Linear(3, 2)
    return Trainer(model, opt_cls(model.parameters(), lr=0.1, **kw), F.mse_loss, device="reference")


def _one_step(trainer):
    trainer.train_step((np.ones((2, 3), np.float32), np.zeros((2, 2), np.float32)))


@pytest.mark.parametrize("src,dst,frag", [((Adam, {}), (SGD, {}), "betas"),
                                          ((SGD, {"momentum": 0.9}), (Adam, {}), "momentum"),
                                          ((Adam, {}), (SGD, {"momentum": 0.9}), "betas")])
def test_resume_checkpoint_of_other_optimizer_raises(tmp_path, src, dst, frag):
    a = _trainer(src[0], **src[1])
    _one_step(a)
    path = str(tmp_path / "ckpt.npz")
    a.save_checkpoint(path)
    b = _trainer(dst[0], **dst[1])
    groups_before = [dict(g) for g in b.optimizer.param_groups]
    with raises(ValueError, re.escape(path), dst[0].__name__, frag, "expected"):
        b.load_checkpoint(path)
    assert [{k: v for k, v in g.items() if k != "params"} for g in b.optimizer.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in groups_before]


def test_optimizer_state_buffers_of_other_optimizer_raise():
    a = _trainer(Adam)
    _one_step(a)
    state = a.optimizer.state_dict()
    b = _trainer(SGD, momentum=0.9)
    state["param_groups"] = [dict(g, **{k: v for k, v in b.optimizer.param_groups[0].items() if k != "params"})
                             for g in state["param_groups"]]
    for g in state["param_groups"]:
        g.pop("betas"), g.pop("eps"), g.pop("amsgrad", None)
    with raises(ValueError, "SGD", "exp_avg", "momentum_buffer"):
        b.optimizer.load_state_dict(state)


def test_optimizer_state_wrong_shape_raises_before_changing_anything():
    a = _trainer(Adam)
    _one_step(a)
    state = a.optimizer.state_dict()
    state["state"][0]["exp_avg"] = np.zeros((5, 5), np.float32)
    state["param_groups"][0]["lr"] = 123.0
    b = _trainer(Adam)
    with raises(ValueError, "exp_avg", r"\(5, 5\)", "expected"):
        b.optimizer.load_state_dict(state)
    assert b.optimizer.param_groups[0]["lr"] == 0.1


def test_resume_same_optimizer_roundtrips(tmp_path):
    a = _trainer(Adam)
    _one_step(a)
    path = str(tmp_path / "ckpt.npz")
    a.save_checkpoint(path)
    b = _trainer(Adam)
    b.load_checkpoint(path)
    np.testing.assert_array_equal(b.model.weight.data, a.model.weight.data)
    assert b.optimizer.state_dict()["state"][0]["step"] == 1


# ================================================================================================ environment
def test_cache_dir_is_a_file_raises(tmp_path, monkeypatch):
    from luminal.runtime.cpu import cache_dir

    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(f))
    with raises(NotADirectoryError, "LUMINAL_CACHE_DIR", re.escape(str(f)), "expected a directory"):
        cache_dir()


def test_cache_dir_below_a_file_raises(tmp_path, monkeypatch):
    from luminal.runtime.cpu import cache_dir

    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(f / "sub"))
    with raises(NotADirectoryError, "LUMINAL_CACHE_DIR", "expected a directory"):
        cache_dir()


@pytest.mark.skipif(not HAS_CC, reason="needs a C compiler")
def test_compile_with_cache_dir_a_file_raises(tmp_path, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(f))
    cx = lm.Graph()
    (cx.tensor(2).set(np.ones(2, np.float32)) * 3).retrieve()
    with raises(NotADirectoryError, "LUMINAL_CACHE_DIR", re.escape(str(f))):
        cx.compile(device="cpu")


def test_unknown_device_raises():
    cx = lm.Graph()
    (cx.tensor(2).set(np.ones(2, np.float32)) * 3).retrieve()
    with raises(ValueError, "'gpu'", "'cpu'", "'reference'"):
        cx.compile(device="gpu")


@pytest.mark.parametrize("level", ["fast", "FULL", 3])
def test_unknown_search_level_raises(level):
    cx = lm.Graph()
    with pytest.raises((ValueError, TypeError)) as info:
        cx.compile(device="reference", search=level)
    assert "off" in str(info.value) and "quick" in str(info.value)
