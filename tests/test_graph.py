"""Graph lifecycle, primitive-op reference semantics, symbolic dims, bad input, debugging output.

Oracles: numpy and PyTorch CPU. Tolerances are stated per assertion (exact where no rounding is involved).
"""

import os
import shutil

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import ops
from luminal.graph import GraphError
from luminal.shape import Expression, ShapeTracker, UnboundSymbolError

RNG = np.random.default_rng(1234)


def _input(cx, arr, name="x"):
    dtype = lm.DType(np.dtype(arr.dtype).name) if arr.dtype != np.bool_ else lm.bool_
    return cx.tensor(arr.shape, dtype, name).set(arr)


# ---------------------------------------------------------------------------- lifecycle
def test_execute_retrieve_and_refcount_freeing():
    cx = lm.Graph()
    a = _input(cx, RNG.standard_normal((3, 4)).astype(np.float32))
    mid = a * 2.0
    out = (mid + 1.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), a.data() * np.float32(2) + np.float32(1))
    # the intermediate was freed once its consumers ran; the retrieved output and the input data remain
    assert (mid.id, 0) not in cx.tensors
    assert (out.id, 0) in cx.tensors and (a.id, 0) in cx.tensors
    with pytest.raises(GraphError, match="retrieve"):
        mid.data()


def test_keep_survives_and_drop_frees():
    cx = lm.Graph()
    a = _input(cx, np.arange(4, dtype=np.float32))
    kept = (a + 1.0).keep()
    out = (kept * 3.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(kept.data(), np.arange(4) + 1.0)
    np.testing.assert_array_equal(out.data(), (np.arange(4) + 1.0) * 3)
    out.drop()
    with pytest.raises(GraphError, match="no value"):
        out.data()


def test_data_applies_the_handle_view():
    cx = lm.Graph()
    arr = RNG.standard_normal((2, 3)).astype(np.float32)
    a = _input(cx, arr)
    out = (a + 0.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.T.data(), arr.T)
    np.testing.assert_array_equal(out[:, ::-1].data(), arr[:, ::-1])


def test_execute_twice_with_new_data():
    cx = lm.Graph()
    a = cx.tensor(3)
    out = (a * a).retrieve()
    for vals in ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]):
        a.set(vals)
        cx.execute()
        np.testing.assert_array_equal(out.data(), np.square(np.array(vals, np.float32)))


def test_set_deferred_called_each_execute():
    cx = lm.Graph()
    calls = []
    a = cx.tensor(2).set_deferred(lambda: calls.append(1) or np.array([1.0, 2.0], np.float32) * len(calls))
    out = (a + 0.0).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), [1.0, 2.0])
    cx.execute()
    np.testing.assert_array_equal(out.data(), [2.0, 4.0])
    assert len(calls) == 2


def test_compile_runs_compiler_with_remap():
    cx = lm.Graph()
    a = _input(cx, np.ones(2, np.float32))
    out = (a + 1.0).retrieve()
    seen = {}

    class Recorder:
        def compile(self, graph, remap):
            seen["graph"], seen["remap"] = graph, remap
            return "done"

    assert cx.compile(Recorder(), (out,)) == "done"
    assert seen["graph"] is cx and seen["remap"] == (out,)
    cx.execute()
    np.testing.assert_array_equal(out.data(), [2.0, 2.0])


def test_schedule_edges_and_cycles():
    cx = lm.Graph()
    a = _input(cx, np.ones(2, np.float32))
    b = (a + 1.0)
    c = (a * 2.0)
    cx.add_schedule_dependency(c.id, b.id)
    order = cx.toposort()
    assert order.index(c.id) < order.index(b.id)
    cx.add_schedule_dependency(b.id, c.id)
    with pytest.raises(GraphError, match="cycle"):
        cx.toposort()


def test_graph_break_is_identity():
    cx = lm.Graph()
    arr = RNG.standard_normal((3, 2)).astype(np.float32)
    out = _input(cx, arr).T.graph_break().retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), arr.T)


# ---------------------------------------------------------------------------- primitive ops
def _run_primitive(op, arrays, views=None, dims=None, dtype=None):
    cx = lm.Graph()
    tensors = [_input(cx, a, f"in{i}") for i, a in enumerate(arrays)]
    views = views or [t.tracker for t in tensors]
    dims = views[0].dims if dims is None else dims
    dtype = tensors[0].dtype if dtype is None else dtype
    node = cx.add_op(op, [(t.id, v) for t, v in zip(tensors, views)], dims, dtype)
    out = lm.GraphTensor(cx, node, ShapeTracker.contiguous_of(dims), dtype).retrieve()
    cx.execute()
    return out.data()


FLOATS = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op,torch_fn", [(ops.Log2(), torch.log2), (ops.Exp2(), torch.exp2), (ops.Sin(), torch.sin),
                                         (ops.Sqrt(), torch.sqrt), (ops.Recip(), torch.reciprocal)])
def test_unary_primitives_match_torch(op, torch_fn, dtype):
    x = RNG.uniform(-4, 4, (5, 7)).astype(dtype)
    x[0, :3] = [0.0, np.inf, np.nan]
    got = _run_primitive(op, [x])
    want = torch_fn(torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype)
    assert got.dtype == dtype
    tol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


def test_unary_primitive_rejects_ints():
    cx = lm.Graph()
    a = cx.tensor(3, lm.int32)
    with pytest.raises(TypeError, match="floating-point"):
        cx.add_op(ops.Log2(), [(a.id, a.tracker)], a.dims, lm.int32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_add_mul_lessthan_all_dtypes(dtype):
    if dtype == np.bool_:
        a, b = RNG.integers(0, 2, (4, 5)).astype(bool), RNG.integers(0, 2, (4, 5)).astype(bool)
    else:
        a, b = (RNG.integers(-50, 50, (4, 5)).astype(dtype) for _ in range(2))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_array_equal(_run_primitive(ops.Add(), [a, b]), (ta + tb).numpy() if dtype != np.bool_ else
                                  (ta | tb).numpy())
    np.testing.assert_array_equal(_run_primitive(ops.Mul(), [a, b]), (ta * tb).numpy() if dtype != np.bool_ else
                                  (ta & tb).numpy())
    lt = _run_primitive(ops.LessThan(), [a, b], dtype=lm.bool_)
    np.testing.assert_array_equal(lt, (ta < tb).numpy())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_mod_is_floor_modulo_like_torch_remainder(dtype):
    a = RNG.integers(-20, 20, (6, 6)).astype(dtype)
    b = RNG.integers(1, 7, (6, 6)).astype(dtype) * np.where(RNG.random((6, 6)) < 0.5, -1, 1).astype(dtype)
    got = _run_primitive(ops.Mod(), [a, b])
    np.testing.assert_allclose(got, torch.remainder(torch.from_numpy(a), torch.from_numpy(b)).numpy(), rtol=0, atol=0)


def test_integer_mod_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        _run_primitive(ops.Mod(), [np.array([3, 4], np.int32), np.array([1, 0], np.int32)])


def test_binary_primitive_dtype_and_shape_checks():
    cx = lm.Graph()
    a, b, c = cx.tensor(3, lm.float32), cx.tensor(3, lm.float64), cx.tensor(4, lm.float32)
    with pytest.raises(TypeError, match="dtypes differ"):
        cx.add_op(ops.Add(), [(a.id, a.tracker), (b.id, b.tracker)], a.dims, lm.float32)
    with pytest.raises(GraphError, match=r"\[3\] vs \[4\]"):
        cx.add_op(ops.Add(), [(a.id, a.tracker), (c.id, c.tracker)], a.dims, lm.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reductions_primitives(dtype, axis):
    x = RNG.integers(-9, 9, (3, 4, 5)).astype(dtype)
    dims = tuple(d for k, d in enumerate(x.shape) if k != axis)
    s = _run_primitive(ops.SumReduce(axis), [x], dims=dims)
    m = _run_primitive(ops.MaxReduce(axis), [x], dims=dims)
    np.testing.assert_array_equal(s, torch.from_numpy(x).sum(axis, dtype=torch.from_numpy(x).dtype).numpy())
    np.testing.assert_array_equal(m, torch.from_numpy(x).amax(axis).numpy())
    assert s.dtype == dtype and m.dtype == dtype


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 0.1, np.float16)
    got = _run_primitive(ops.SumReduce(0), [x], dims=())
    want = torch.from_numpy(x).sum().item()  # torch accumulates f16 sums in f32 on CPU
    assert abs(float(got) - want) <= 0.5, (got, want)  # naive f16 accumulation would stall far below (256)


def test_maxreduce_propagates_nan_and_reduces_through_views():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    x[2, 3] = np.nan
    cx = lm.Graph()
    t = _input(cx, x)
    view = t.tracker.permute((1, 0))  # reduce the original axis 0 through a transposed view
    node = cx.add_op(ops.MaxReduce(1), [(t.id, view)], (6,), lm.float32)
    out = lm.GraphTensor(cx, node, ShapeTracker.contiguous_of((6,)), lm.float32).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), torch.from_numpy(x).amax(0).numpy())


def test_padded_and_masked_reads_are_zero():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    cx = lm.Graph()
    t = _input(cx, x)
    view = t.tracker.pad(0, 1, 2).pad(1, 0, 3)
    node = cx.add_op(ops.Contiguous(), [(t.id, view)], view.dims, lm.float32)
    out = lm.GraphTensor(cx, node, ShapeTracker.contiguous_of(view.dims), lm.float32).retrieve()
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.pad(x, ((1, 2), (0, 3))))


def test_constant_with_symbolic_value_and_iota():
    cx = lm.Graph()
    n = lm.sym("n")
    c = cx.constant(n * 3 + 1, lm.float32).retrieve()
    io = cx.iota(lm.sym("z") * 2 + n, (4,), lm.int32).retrieve()
    cx.set_dim("n", 5)
    cx.execute()
    assert c.data() == np.float32(16)
    np.testing.assert_array_equal(io.data(), np.arange(4) * 2 + 5)


def test_gather_primitive_matches_torch_and_checks_range():
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    index = RNG.integers(0, 4, (3, 5)).astype(np.int64)
    got = _run_primitive(ops.Gather(0), [data, index], dims=(3, 5))
    np.testing.assert_array_equal(got, torch.gather(torch.from_numpy(data), 0, torch.from_numpy(index)).numpy())
    bad = index.copy()
    bad[1, 2] = 9
    with pytest.raises(IndexError, match="out of range"):
        _run_primitive(ops.Gather(0), [data, bad], dims=(3, 5))


@pytest.mark.parametrize("src", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.float16])
@pytest.mark.parametrize("dst", ["float32", "float64", "int32", "int64", "bool", "float16"])
def test_cast_matches_torch(src, dst):
    x = (RNG.uniform(-100, 100, 20)).astype(src) if src != np.bool_ else RNG.integers(0, 2, 20).astype(bool)
    got = _run_primitive(ops.Cast(lm.DType(dst)), [x], dtype=lm.DType(dst))
    want = torch.from_numpy(x).to(getattr(torch, dst)).numpy()
    np.testing.assert_array_equal(got, want)


def test_op_values_have_equality_and_hash():
    assert ops.SumReduce(1) == ops.SumReduce(1) and ops.SumReduce(1) != ops.SumReduce(2)
    assert ops.Add() == ops.Add() and hash(ops.Add()) == hash(ops.Add()) and ops.Add() != ops.Mul()
    assert ops.Constant(1.0, lm.float32) == ops.Constant(1.0, lm.float32)
    assert ops.Constant(1.0, lm.float32) != ops.Constant(1.0, lm.float64)
    assert len({ops.Cast(lm.int32), ops.Cast(lm.int32), ops.Cast(lm.int64)}) == 2


# ---------------------------------------------------------------------------- symbolic dims
def test_symbolic_dims_bound_from_set_and_changed_between_executes():
    cx = lm.Graph()
    x = cx.tensor(("batch", 3))
    w = cx.tensor((3, 2)).set(RNG.standard_normal((3, 2)).astype(np.float32))
    out = (x @ w).sum(0).retrieve()
    for batch in (4, 9):
        data = RNG.standard_normal((batch, 3)).astype(np.float32)
        x.set(data)
        assert cx.dyn_map["batch"] == batch
        cx.execute()
        np.testing.assert_allclose(out.data(), (data @ w.data()).sum(0), rtol=1e-5, atol=1e-5)


def test_set_dim_and_symbolic_expression_dims():
    cx = lm.Graph()
    x = cx.tensor(("n",))
    doubled = x.concat(x, 0)  # dims n + n
    assert doubled.dims[0] == lm.sym("n") * 2
    out = doubled.retrieve()
    x.set(np.arange(3, dtype=np.float32))
    cx.execute()
    np.testing.assert_array_equal(out.data(), np.concatenate([np.arange(3)] * 2))


def test_unbound_symbol_at_execute_names_it():
    cx = lm.Graph()
    out = cx.constant(lm.sym("steps") * 2, lm.float32).retrieve()
    with pytest.raises(UnboundSymbolError, match="steps"):
        cx.execute()
    assert out.id in cx.to_retrieve


def test_input_without_data_is_reported():
    cx = lm.Graph()
    cx.tensor(("n", 2), name="features")
    with pytest.raises((GraphError, UnboundSymbolError), match="n"):
        cx.execute()
    cx2 = lm.Graph()
    t = cx2.tensor((2,), name="weights")
    (t + 1.0).retrieve()
    with pytest.raises(GraphError, match="'weights'.*no data"):
        cx2.execute()


def test_inconsistent_symbol_after_set_dim():
    cx = lm.Graph()
    x = cx.tensor(("n",), name="x").set(np.zeros(3, np.float32))
    (x + 1.0).retrieve()
    cx.set_dim("n", 5)
    with pytest.raises(GraphError, match=r"shape \(3,\).*\(5,\)"):
        cx.execute()


# ---------------------------------------------------------------------------- bad input
def test_set_wrong_shape_names_shapes():
    cx = lm.Graph()
    x = cx.tensor((2, 3), name="x")
    with pytest.raises(ValueError, match=r"\['2', '3'\].*\(3, 2\)"):
        x.set(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="2-d"):
        x.set(np.zeros(6, np.float32))


def test_set_conflicting_symbol_in_one_array():
    cx = lm.Graph()
    x = cx.tensor(("n", "n"), name="square")
    with pytest.raises(ValueError, match="'n' is 2 and 3"):
        x.set(np.zeros((2, 3), np.float32))


def test_set_wrong_dtype():
    cx = lm.Graph()
    ids = cx.tensor(3, lm.int64, name="ids")
    with pytest.raises(TypeError, match="float64.*int64"):
        ids.set(np.array([1.5, 2.0, 3.0]))
    with pytest.raises(TypeError, match="numeric"):
        ids.set(np.array(["a", "b", "c"]))
    # lossless conversions are accepted: int data into a float tensor, float64 into float32
    f = cx.tensor(3, name="f").set(np.array([1, 2, 3]))
    assert f.data().dtype == np.float32
    ids.set([1, 2, 3])
    assert ids.data().dtype == np.int64


def test_set_on_a_computed_tensor_or_view_is_rejected():
    cx = lm.Graph()
    x = cx.tensor((2, 2))
    with pytest.raises(GraphError, match="input tensor"):
        (x + 1.0).set(np.zeros((2, 2), np.float32))
    with pytest.raises(GraphError, match="view"):
        x.T.set(np.zeros((2, 2), np.float32))


def test_set_dyn_checks_size():
    cx = lm.Graph()
    x = cx.tensor(("a", 2))
    x.set_dyn(np.arange(6, dtype=np.float32), (3, 2))
    assert cx.dyn_map["a"] == 3
    with pytest.raises(ValueError, match="cannot fill"):
        x.set_dyn(np.arange(5, dtype=np.float32), (3, 2))


def test_tensor_has_no_truth_value():
    cx = lm.Graph()
    x = cx.tensor(2)
    with pytest.raises(TypeError, match="truth value"):
        bool(x > 0)


# ---------------------------------------------------------------------------- debugging output
def test_execute_debug_reports_each_op(capsys):
    cx = lm.Graph()
    x = _input(cx, RNG.standard_normal((3, 4)).astype(np.float32))
    out = x.sum(1).retrieve()
    rows = cx.execute_debug()
    printed = capsys.readouterr().out
    assert "SumReduce(1)" in printed and "total" in printed
    assert [r.op for r in rows] == ["Input", "SumReduce(1)"]
    assert rows[1].shape == (3,) and all(r.seconds >= 0 for r in rows)
    np.testing.assert_allclose(out.data(), x.data().sum(1), rtol=1e-6, atol=1e-6)


def test_dot_export(tmp_path):
    cx = lm.Graph()
    x = _input(cx, np.ones((2, 2), np.float32))
    (x.exp() + x).set_name("result").retrieve()
    text = cx.to_dot()
    assert text.startswith("digraph") and "result" in text and "Exp2" in text
    assert text.count("->") == sum(len(n.inputs) for n in cx.nodes.values())
    rendered = cx.export_dot(tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == text
    if shutil.which("dot"):
        assert rendered and os.path.exists(rendered)
    else:
        assert rendered is None


def test_print_hook(capsys):
    cx = lm.Graph()
    x = _input(cx, np.arange(20, dtype=np.float32))
    (x * 2.0).print("doubled")
    cx.execute()
    out = capsys.readouterr().out
    assert "doubled" in out and "shape=[20]" in out and "38." in out


def test_diff_against_binary_file(tmp_path, capsys):
    x_np = RNG.standard_normal(50).astype(np.float32)
    good, bad = tmp_path / "good.bin", tmp_path / "bad.bin"
    np.tanh(x_np).astype("<f4").tofile(good)
    wrong = np.tanh(x_np).astype("<f4")
    wrong[7] += 0.5
    wrong.tofile(bad)
    cx = lm.Graph()
    y = _input(cx, x_np).tanh()
    y.compare_file(good, atol=1e-5, rtol=1e-5)
    y.compare_file(bad, atol=1e-5, rtol=1e-5)
    cx.execute()
    assert cx.diff_results[str(good)]["ok"]
    report = cx.diff_results[str(bad)]
    assert not report["ok"] and report["n_mismatch"] == 1 and report["worst"][0][0] == 7
    assert abs(report["max_abs"] - 0.5) < 1e-5
    assert "1 of 50 values differ" in capsys.readouterr().out


def test_summary_lists_ops_and_inputs():
    cx = lm.Graph()
    x = cx.tensor(("b", 3), name="x")
    (x.relu().sum()).retrieve()
    text = cx.summary()
    assert "x[b, 3]:float32" in text and "SumReduce" in text and f"{len(cx.nodes)} nodes" in text


def test_dtype_aliases_and_errors():
    assert lm.dtype.as_dtype("f64") is lm.float64 and lm.dtype.as_dtype(np.int32) is lm.int32
    with pytest.raises(TypeError, match="unsupported dtype"):
        lm.dtype.as_dtype("complex64")


def test_expression_as_shape_entry():
    cx = lm.Graph()
    x = cx.tensor((Expression.symbol("rows"), 2))
    x.set(np.ones((3, 2), np.float32))
    out = x.sum().retrieve()
    cx.execute()
    assert out.data() == 6.0
