"""The ONNX importer on real models, against onnxruntime (the oracle), and its errors on bad input.

Models: an MLP and an op-variety graph built with ``onnx.helper``; a small CNN (Conv/BatchNorm/MaxPool/
GlobalAveragePool) and a transformer encoder block with a symbolic batch and sequence exported from PyTorch
(``torch.onnx.export``, TorchScript exporter: its shape subgraphs ``Shape -> Gather -> Concat -> Reshape``
are what the symbolic folding must handle); magika's model shipped on PyPI (magika is in the test extra).
Tolerances: rtol=1e-4, atol=1e-5 for float32 models (stated per comparison).
"""

from __future__ import annotations

import io
import math
import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper  # noqa: E402

import luminal.onnx as lo  # noqa: E402
from luminal.onnx import (NeedsStaticInputError, OnnxImportError, OnnxInputError,  # noqa: E402
                          UnsupportedOperatorError)

RTOL, ATOL = 1e-4, 1e-5
DEVICES = ["reference", "cpu"]


def ort_run(model: onnx.ModelProto, feeds: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_against_ort(model, proto, feeds, rtol=RTOL, atol=ATOL):
    got = model.run(feeds)
    want = ort_run(proto, feeds)
    for name, w in zip(model.output_names, want):
        assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
        assert got[name].dtype == w.dtype, (name, got[name].dtype, w.dtype)
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)


def _init(name, arr):
    return onnx.numpy_helper.from_array(np.asarray(arr), name)


# ---------------------------------------------------------------------------------------------------- models
def mlp_model(seed=0) -> onnx.ModelProto:
    """x (N, 8) -> Gemm -> Relu -> MatMul + Add -> Softmax, symbolic batch "N"."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(16, 8)).astype(np.float32) * 0.3
    b1 = rng.normal(size=16).astype(np.float32) * 0.1
    w2 = rng.normal(size=(16, 4)).astype(np.float32) * 0.3
    b2 = rng.normal(size=4).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["m"], name="fc2"),
        helper.make_node("Add", ["m", "b2"], ["logits"], name="bias2"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TP.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("probs", TP.FLOAT, ["N", 4])],
                              [_init("w1", w1), _init("b1", b1), _init("w2", w2), _init("b2", b2)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _torch_export(module, args, input_names, output_names, dynamic_axes, opset=17) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, args, buf, input_names=input_names, output_names=output_names,
                              dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False)
        except Exception as err:  # pragma: no cover - depends on the torch build
            pytest.skip(f"torch.onnx.export (TorchScript exporter) is unavailable here: {err}")
    return onnx.load_model_from_string(buf.getvalue())


def cnn_model():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
    with torch.no_grad():  # non-trivial running statistics
        for m in net:
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    net.eval()
    return _torch_export(net, (torch.randn(2, 3, 16, 16),), ["image"], ["logits"], {"image": {0: "batch"}})


def transformer_model():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            causal = torch.ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.ff(self.ln2(x))

    torch.manual_seed(0)
    block = Block().eval()
    return _torch_export(block, (torch.randn(2, 5, 32),), ["tokens"], ["out"],
                         {"tokens": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}})


# ---------------------------------------------------------------------------------------------------- real models
@pytest.mark.parametrize("device", DEVICES)
def test_mlp_matches_onnxruntime_at_two_batch_sizes(device):
    proto = mlp_model()
    model = lo.load(proto, device=device)
    assert model.input_names == ["x"] and model.output_names == ["probs"]
    assert model.symbols == {"N": "N"}
    rng = np.random.default_rng(1)
    check_against_ort(model, proto, {"x": rng.normal(size=(3, 8)).astype(np.float32)})
    runtime = model.runtime
    check_against_ort(model, proto, {"x": rng.normal(size=(11, 8)).astype(np.float32)})
    assert model.runtime is runtime  # a new batch size binds the symbol: no recompilation
    (y,) = model(rng.normal(size=(2, 8)).astype(np.float32))  # positional call
    assert y.shape == (2, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_cnn_conv_batchnorm_pool_matches_onnxruntime(device):
    proto = cnn_model()
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "MaxPool", "Relu"} <= ops and ops & {"GlobalAveragePool", "ReduceMean"}
    model = lo.load(proto, device=device)
    rng = np.random.default_rng(2)
    check_against_ort(model, proto, {"image": rng.normal(size=(2, 3, 16, 16)).astype(np.float32)})
    runtime = model.runtime
    check_against_ort(model, proto, {"image": rng.normal(size=(5, 3, 16, 16)).astype(np.float32)})
    assert model.runtime is runtime


@pytest.mark.parametrize("device", DEVICES)
def test_transformer_block_symbolic_batch_and_seq(device):
    proto = transformer_model()
    ops = {n.op_type for n in proto.graph.node}
    assert {"Shape", "Reshape", "MatMul", "Softmax"} <= ops  # the exporter's shape subgraph is there
    model = lo.load(proto, device=device)
    assert set(model.symbols) == {"batch", "seq"}
    rng = np.random.default_rng(3)
    check_against_ort(model, proto, {"tokens": rng.normal(size=(2, 5, 32)).astype(np.float32)})
    runtime = model.runtime
    check_against_ort(model, proto, {"tokens": rng.normal(size=(3, 9, 32)).astype(np.float32)})
    assert model.runtime is runtime  # new (batch, seq): same compiled program
    if device == "cpu":
        assert runtime is not None


def _exported_cases():
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class LSTMNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.out = nn.LSTM(8, 16, batch_first=True, bidirectional=True), nn.Linear(32, 3)

        def forward(self, x):
            y, (h, _) = self.lstm(x)
            return self.out(y).softmax(-1), h

    class UpNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
            self.mix = nn.Conv2d(6, 2, 1)

        def forward(self, x):
            y = F.interpolate(self.up(x), scale_factor=2, mode="bilinear", align_corners=False)
            return self.mix(y) + F.interpolate(x[:, :2], scale_factor=4, mode="nearest")

    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(50, 16), nn.Embedding(64, 16)

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t)).unsqueeze(0)
            scores = x @ x.transpose(1, 2)
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
            return scores.softmax(-1) @ x

    class Misc(nn.Module):
        def forward(self, x, idx):
            values, indices = x.cumsum(1).topk(3, dim=-1)
            return (values, indices, torch.gather(x, 1, idx), torch.where(x > 0, x, 0.0).amax(1, keepdim=True),
                    x.argmax(-1), F.gelu(x, approximate="tanh"), torch.flip(x, [1]), x[:, 1:-1:2])

    rng = np.random.default_rng(9)
    return [
        ("lstm", LSTMNet(), (torch.randn(2, 5, 8),), ["x"], {"x": {0: "b"}},
         lambda b: (rng.normal(size=(b, 5, 8)).astype(np.float32),)),
        ("upsample", UpNet(), (torch.randn(1, 4, 5, 5),), ["x"], {"x": {0: "b"}},
         lambda b: (rng.normal(size=(b, 4, 5, 5)).astype(np.float32),)),
        ("positions", Positions(), (torch.randint(0, 50, (2, 7)),), ["ids"], {"ids": {0: "b", 1: "t"}},
         lambda b: (rng.integers(0, 50, size=(b, 3 + 2 * b)),)),
        ("misc", Misc(), (torch.randn(2, 6), torch.randint(0, 6, (2, 4))), ["x", "idx"], {"x": {0: "b"}, "idx": {0: "b"}},
         lambda b: (rng.normal(size=(b, 6)).astype(np.float32), rng.integers(0, 6, size=(b, 4)))),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_more_exported_models(device):
    """LSTM, ConvTranspose + interpolate (Resize), position ids from a symbolic Range with a causal mask, and
    cumsum/topk/gather/where/argmax/flip/strided slices, exported from PyTorch with symbolic dims."""
    for name, module, args, names, dynamic, make in _exported_cases():
        proto = _torch_export(module.eval(), args, names, None, dynamic)
        model = lo.load(proto, device=device)
        runtime = None
        for batch in (1, 3):
            check_against_ort(model, proto, dict(zip(model.input_names, make(batch))))
            if runtime is not None:
                assert model.runtime is runtime, name
            runtime = model.runtime


def test_shape_subgraph_folds_to_symbolic_reshape():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape over a symbolic batch: no run-time shape tensors."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("Shape", ["y"], ["y_shape"]),
    ]
    graph = helper.make_graph(
        nodes, "shape_subgraph", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 4, 6])],
        [helper.make_tensor_value_info("y", TP.FLOAT, ["batch", 24]),
         helper.make_tensor_value_info("y_shape", TP.INT64, [2])],
        [_init("zero", np.array(0, np.int64)), _init("axes0", np.array([0], np.int64)),
         _init("tail", np.array([-1], np.int64))])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = lo.load(proto)
    shape_value = model.value("shape")
    assert isinstance(shape_value, np.ndarray) and shape_value.dtype == object  # folded, symbolic
    assert str(shape_value[0]) == "batch"
    assert not any(type(n.op).__name__ == "Gather" for n in model.graph.nodes.values())
    for n in (2, 7):
        x = np.arange(n * 24, dtype=np.float32).reshape(n, 4, 6)
        y, y_shape = model(x)
        np.testing.assert_array_equal(y, x.reshape(n, 24))
        np.testing.assert_array_equal(y_shape, [n, 24])


def test_op_variety_graph_matches_onnxruntime():
    """A graph with shape ops, gathers, reductions, where, cumsum, topk, pad and casts."""
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("ReduceMax", ["xt", "ax2"], ["mx"], keepdims=1),
        helper.make_node("Sub", ["xt", "mx"], ["sh"]),
        helper.make_node("Exp", ["sh"], ["e"]),
        helper.make_node("CumSum", ["e", "ax2s"], ["cs"]),
        helper.make_node("Gather", ["cs", "idx"], ["g"], axis=1),
        helper.make_node("Greater", ["g", "half"], ["gt"]),
        helper.make_node("Where", ["gt", "g", "neg"], ["w"]),
        helper.make_node("TopK", ["w", "k"], ["tv", "ti"], axis=-1),
        helper.make_node("Cast", ["ti"], ["tif"], to=TP.FLOAT),
        helper.make_node("Pad", ["tv", "pads", "padval"], ["pv"], mode="constant"),
        helper.make_node("Concat", ["pv", "tif"], ["out"], axis=-1),
    ]
    inits = [_init("ax2", np.array([2], np.int64)), _init("ax2s", np.array(2, np.int64)),
             _init("idx", np.array([[0, 2], [1, 1]], np.int64)), _init("half", np.array(1.5, np.float32)),
             _init("neg", np.array(-1.0, np.float32)), _init("k", np.array([2], np.int64)),
             _init("pads", np.array([0, 0, 0, 1, 0, 0, 0, 2], np.int64)),
             _init("padval", np.array(7.0, np.float32))]
    graph = helper.make_graph(nodes, "variety", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 5, 3])],
                              [helper.make_tensor_value_info("out", TP.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    for device in DEVICES:
        model = lo.load(proto, device=device)
        check_against_ort(model, proto, {"x": rng.normal(size=(2, 5, 3)).astype(np.float32)})


def test_magika_model_matches_onnxruntime():
    try:
        import magika
    except ImportError:
        pytest.fail("the 'magika' package (which ships a real ONNX model) is in the test extra but not installed: "
                    "pip install -e '.[test]'")
    folder = os.path.join(os.path.dirname(magika.__file__), "models")
    paths = sorted(os.path.join(root, f) for root, _, files in os.walk(folder) for f in files if f.endswith(".onnx"))
    if not paths:
        pytest.skip(f"no .onnx model found under {folder}")
    proto = onnx.load(paths[0])
    rng = np.random.default_rng(5)
    for device in DEVICES:
        model = lo.load(paths[0], device=device)
        (name,) = model.input_names
        width = int(proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value)
        for batch in (1, 3):
            feeds = {name: rng.integers(0, 257, size=(batch, width)).astype(np.int32)}
            check_against_ort(model, proto, feeds, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- graph access
def test_intermediates_parameters_and_state_dict():
    proto = mlp_model()
    model = lo.load(proto, device="cpu", retrieve=["h", "r"])
    x = np.random.default_rng(6).normal(size=(4, 8)).astype(np.float32)
    model(x)
    w1 = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    b1 = onnx.numpy_helper.to_array(proto.graph.initializer[1])
    np.testing.assert_allclose(model.intermediate("h"), x @ w1.T + b1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.intermediate("r"), np.maximum(x @ w1.T + b1, 0), rtol=1e-5, atol=1e-5)
    assert sorted(model.module.state_dict()) == ["b1", "b2", "w1", "w2"]
    assert all(p.requires_grad for p in model.parameters())
    # load_state_dict updates the compiled graph's weights
    state = {k: np.zeros_like(v) for k, v in model.module.state_dict().items()}
    model.module.load_state_dict(state)
    (probs,) = model(x)
    np.testing.assert_allclose(probs, np.full((4, 4), 0.25, np.float32), rtol=1e-6)


def test_initializers_are_trainable_parameters():
    """The imported graph trains: gradients of a loss built on the model's output match PyTorch's."""
    torch = pytest.importorskip("torch")
    from luminal.training import grad

    proto = mlp_model(seed=7)
    model = lo.load(proto)
    probs = model.outputs["probs"]
    target = model.graph.tensor(("N", 4), name="target")
    loss = ((probs - target) ** 2).mean()
    params = model.parameters()
    grads = [g.retrieve() for g in grad(loss, params)]
    rng = np.random.default_rng(8)
    x = rng.normal(size=(5, 8)).astype(np.float32)
    t = rng.normal(size=(5, 4)).astype(np.float32)
    model.inputs["x"].set(x)
    target.set(t)
    model.graph.execute()
    tw = {p.name: torch.tensor(p.data, requires_grad=True) for p in params}
    h = torch.relu(torch.tensor(x) @ tw["w1"].T + tw["b1"])
    out = torch.softmax(h @ tw["w2"] + tw["b2"], -1)
    torch.mean((out - torch.tensor(t)) ** 2).backward()
    for p, g in zip(params, grads):
        np.testing.assert_allclose(g.data(), tw[p.name].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=p.name)


def test_constant_inputs_freeze_a_shape_input():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_by_input")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 6]),
                                           helper.make_tensor_value_info("shape", TP.INT64, [2])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(NeedsStaticInputError, match=r"node #0 'reshape_by_input' \(Reshape.*constant_inputs") as err:
        lo.load(proto)
    assert err.value.graph_inputs == ("shape",)
    model = lo.load(proto, constant_inputs={"shape": np.array([3, 4])})
    assert model.input_names == ["x"]
    (y,) = model(np.arange(12, dtype=np.float32).reshape(2, 6))
    assert y.shape == (3, 4)


# ---------------------------------------------------------------------------------------------------- bad input
def test_truncated_and_non_onnx_files_name_the_file(tmp_path):
    good = mlp_model().SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(OnnxImportError, match="truncated.onnx"):
        lo.load(str(truncated))
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a protobuf, just some text\n" * 3)
    with pytest.raises(OnnxImportError, match="notes.onnx"):
        lo.load(str(text))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(OnnxImportError, match="empty.onnx.*not an ONNX model"):
        lo.load(empty)
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        lo.load(str(tmp_path / "missing.onnx"))
    with pytest.raises(OnnxImportError, match="<bytes>"):
        lo.load(b"\x08\x07garbage")


def _single_node(op, opset=18, domain="", **attrs):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["x1"], name="first"),
                               helper.make_node(op, ["x1"], ["y"], name="the_node", domain=domain, **attrs)],
                              "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports)


def test_unsupported_operator_names_node_index_op_and_opset():
    with pytest.raises(UnsupportedOperatorError,
                       match=r"node #1 'the_node' \(StringNormalizer.*opset.*StringNormalizer is not supported"):
        lo.load(_single_node("StringNormalizer"))
    with pytest.raises(UnsupportedOperatorError, match=r"node #1 'the_node' \(MyOp of domain 'com.example'.*domain"):
        lo.load(_single_node("MyOp", domain="com.example"))


def test_unsupported_opsets():
    old = _single_node("Softmax", opset=11)
    with pytest.raises(UnsupportedOperatorError, match=r"node #1 'the_node' \(Softmax, opset version 11\).*predates.*Softmax-13"):
        lo.load(old)
    future = _single_node("Relu")
    future.opset_import[0].version = 99
    with pytest.raises(OnnxImportError, match="opset 99.*supported: opsets 13"):
        lo.load(future)


def test_unsupported_dtype_names_the_value():
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g",
                              [helper.make_tensor_value_info("s", TP.BFLOAT16, [2])],
                              [helper.make_tensor_value_info("t", TP.BFLOAT16, [2])])
    with pytest.raises(OnnxImportError, match="input 's' has element type BFLOAT16"):
        lo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_wrong_inputs_at_call_time_name_the_input():
    model = lo.load(mlp_model())
    with pytest.raises(OnnxInputError, match=r"input 'x': expected rank 2 \(float32 of shape \['N', '8'\]\)"):
        model(np.zeros((2, 8, 1), np.float32))
    with pytest.raises(OnnxInputError, match=r"input 'x'.*dim 1 must be 8"):
        model(np.zeros((2, 7), np.float32))
    with pytest.raises(OnnxInputError, match=r"input 'x': expected float32.*got dtype int64"):
        model(np.zeros((2, 8), np.int64))
    with pytest.raises(OnnxInputError, match=r"unknown input\(s\) \['y'\]"):
        model(y=np.zeros((2, 8), np.float32))
    with pytest.raises(OnnxInputError, match=r"missing input\(s\) \['x'\]"):
        model.run({})
    (y,) = model(np.zeros((2, 8), np.float64))  # float64 -> float32 is accepted (same kind)
    assert y.dtype == np.float32


def test_supported_operator_count():
    ops = lo.supported_ops()
    assert len(ops) >= 150, len(ops)
    assert {"Conv", "Resize", "Einsum", "TopK", "QuantizeLinear", "Attention", "LSTM", "ScatterND"} <= set(ops)


def test_local_functions_and_if_with_a_run_time_condition():
    """A model-local function is inlined; an If whose condition is only known at run time builds both
    branches and selects with where (its outputs have the same shape)."""
    fn = helper.make_function("custom", "ScaledTanh", ["a"], ["b"],
                              [helper.make_node("Constant", [], ["two"], value_float=2.0),
                               helper.make_node("Tanh", ["a"], ["t"]),
                               helper.make_node("Mul", ["t", "two"], ["b"])],
                              [helper.make_opsetid("", 18)])
    then_g = helper.make_graph([helper.make_node("Neg", ["y"], ["o1"])], "then", [],
                               [helper.make_tensor_value_info("o1", TP.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["y"], ["o2"])], "else", [],
                               [helper.make_tensor_value_info("o2", TP.FLOAT, [3])])
    nodes = [helper.make_node("ScaledTanh", ["x"], ["y"], domain="custom"),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [3])],
                              [helper.make_tensor_value_info("z", TP.FLOAT, [3])],
                              [_init("zero", np.array(0.0, np.float32))])
    proto = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 18),
                                                                     helper.make_opsetid("custom", 1)])
    model = lo.load(proto)
    for x in (np.array([1.0, 2.0, -0.5], np.float32), np.array([-1.0, 0.2, -0.5], np.float32)):
        (z,) = model(x)
        y = 2 * np.tanh(x)
        np.testing.assert_allclose(z, -y if x.sum() > 0 else y, rtol=1e-6)


def test_onnx_inference_example_runs():
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(root, "examples", "onnx_inference.py")],
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same compiled program for both batch sizes: True" in proc.stdout, proc.stdout
