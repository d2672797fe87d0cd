"""A written-out exact GELU in an imported ONNX graph runs ``GraphTensor.gelu`` (luminal/onnx/fusion.py).

Oracles: the exact value ``x Phi(x)`` in float64 (``torch.special.ndtr``) and onnxruntime on the same model. The
chain as written (``x/2 (1 + erf(x / sqrt 2))``) cancels for negative x: about 100 ulp at x = -3 in float32,
where ``gelu`` is within 17; so the error there tells which one ran. Chains that are not a GELU (another
constant, a value read elsewhere) are imported node by node and match onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper

import luminal.onnx as lm_onnx

SQRT2 = float(np.sqrt(2.0))


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(value, np.float32), name + "_v"))


def _model(form: str, div=SQRT2, half=0.5, one=1.0, extra_output=False, as_initializers=False):
    """``y`` = the GELU chain over ``x`` (N, 64) in one of the exporters' operand orders."""
    consts = {"c_sqrt2": div if form != "mul_inv" else 1.0 / div, "c_one": one, "c_half": half}
    scale = helper.make_node("Mul" if form == "mul_inv" else "Div", ["x", "c_sqrt2"], ["d"])
    nodes = [scale, helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["c_one", "e"], ["a"])]
    if form in ("torch", "mul_inv"):  # (x * A) * 0.5
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "c_half"], ["y"])]
    elif form == "half_first":  # (0.5 * x) * A
        nodes += [helper.make_node("Mul", ["c_half", "x"], ["m"]), helper.make_node("Mul", ["m", "a"], ["y"])]
    else:  # x * (A * 0.5)
        nodes += [helper.make_node("Mul", ["a", "c_half"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])]
    inits = []
    if as_initializers:
        inits = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    else:
        nodes = [_const(k, v) for k, v in consts.items()] + nodes
    outputs = [helper.make_tensor_value_info("y", TP.FLOAT, ["N", 64])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("e", TP.FLOAT, ["N", 64]))
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 64])], outputs,
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x():
    rng = np.random.default_rng(0)
    return np.concatenate([np.linspace(-5, 5, 64 * 30), rng.standard_normal(64 * 2) * 3]).astype(
        np.float32).reshape(-1, 64)


def _ulps_at_minus_three(got, x):
    x64 = torch.from_numpy(x.astype(np.float64))
    exact = (x64 * torch.special.ndtr(x64)).numpy()
    band = (x > -3.0) & (x < -2.5)
    spacing = np.spacing(np.abs(exact[band]).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got[band].astype(np.float64) - exact[band]) / spacing))


def _run(proto, x):
    model = lm_onnx.load(proto, device="cpu")
    return model.run({"x": x})


def _ort(proto, x):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))


@pytest.mark.parametrize("form", ["torch", "mul_inv", "half_first", "half_last"])
@pytest.mark.parametrize("as_initializers", [False, True])
def test_written_out_gelu_runs_gelu(form, as_initializers):
    x = _x()
    proto = _model(form, as_initializers=as_initializers)
    got = _run(proto, x)["y"]
    assert _ulps_at_minus_three(got, x) <= 17.0  # (the chain as written: ~100)
    np.testing.assert_allclose(got, _ort(proto, x)["y"], rtol=1e-5, atol=1e-6)


def test_torch_exported_gelu_runs_gelu():
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x * 1.0)
    import io
    import warnings
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(Net(), (torch.zeros(2, 64),), buf, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "N"}}, opset_version=17, dynamo=False)
        except Exception as err:  # pragma: no cover - depends on the torch build
            pytest.skip(f"torch.onnx.export (TorchScript exporter) is unavailable here: {err}")
    proto = onnx.load_model_from_string(buf.getvalue())
    assert "Erf" in [n.op_type for n in proto.graph.node]  # (written out: no Gelu node below opset 20)
    x = _x()
    got = _run(proto, x)["y"]
    assert _ulps_at_minus_three(got, x) <= 17.0
    np.testing.assert_allclose(got, torch.nn.functional.gelu(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change", [dict(div=1.5), dict(half=0.25), dict(one=2.0)])
def test_other_constants_are_not_a_gelu(change):
    x = _x()
    proto = _model("torch", **change)
    got = _run(proto, x)["y"]
    np.testing.assert_allclose(got, _ort(proto, x)["y"], rtol=1e-5, atol=1e-6)


def test_intermediate_read_elsewhere_still_right():
    x = _x()
    proto = _model("torch", extra_output=True)
    got, want = _run(proto, x), _ort(proto, x)
    for name in ("y", "e"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
