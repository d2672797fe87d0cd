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
                              [helper.make_tensor_value_info("s", TP.FLOAT8E4M3FN, [2])],
                              [helper.make_tensor_value_info("t", TP.FLOAT8E4M3FN, [2])])
    with pytest.raises(OnnxImportError, match="input 's' has element type FLOAT8E4M3FN.*supported: BFLOAT16"):
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


# ---------------------------------------------------------------------------------------------------- narrow integers, bfloat16
def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def narrow_int_model() -> onnx.ModelProto:
    """Arithmetic that overflows in int8/int16/uint32/uint64 (ONNX wraps), bitwise ops and shifts, casts between
    narrow types, int8/uint8 initializers; symbolic batch "N"."""
    N = ["N", 6]
    nodes = [
        helper.make_node("Add", ["a", "b"], ["sum8"]),                      # int8 wrap-around
        helper.make_node("Mul", ["a", "k8"], ["mul8"]),                     # int8 initializer
        helper.make_node("Cast", ["a"], ["a_u8"], to=TP.UINT8),             # -1 -> 255
        helper.make_node("BitwiseXor", ["u", "a_u8"], ["xor8"]),
        helper.make_node("BitwiseAnd", ["xor8", "m8"], ["and8"]),           # uint8 initializer
        helper.make_node("BitShift", ["s", "sh16"], ["shl16"], direction="LEFT"),
        helper.make_node("BitShift", ["s", "sh16"], ["shr16"], direction="RIGHT"),
        helper.make_node("BitwiseNot", ["w"], ["not32"]),
        helper.make_node("Add", ["w", "not32"], ["all_ones32"]),
        helper.make_node("Mul", ["w", "w"], ["sq32"]),                      # uint32 wrap-around
        helper.make_node("Mul", ["z", "z"], ["sq64"]),                      # uint64 beyond 2**63
        helper.make_node("BitwiseOr", ["z", "z1"], ["or64"]),
        helper.make_node("Cast", ["u"], ["u_i16"], to=TP.INT16),
        helper.make_node("Sub", ["h", "u_i16"], ["sub16"]),                 # int16 wrap-around
        helper.make_node("Cast", ["sub16"], ["sub16_i8"], to=TP.INT8),      # narrowing wraps
        helper.make_node("Cast", ["sum8"], ["sum8_f"], to=TP.FLOAT),
    ]
    outs = [("sum8", TP.INT8), ("mul8", TP.INT8), ("and8", TP.UINT8), ("shl16", TP.UINT16), ("shr16", TP.UINT16),
            ("all_ones32", TP.UINT32), ("sq32", TP.UINT32), ("sq64", TP.UINT64), ("or64", TP.UINT64),
            ("sub16", TP.INT16), ("sub16_i8", TP.INT8), ("sum8_f", TP.FLOAT)]
    inits = [_init("k8", np.array([3, -2, 7, 1, -1, 100], np.int8)),
             _init("m8", np.array([0xF0, 0x0F, 0xFF, 0x3C, 0x81, 0x7E], np.uint8)),
             _init("sh16", np.array([0, 1, 4, 9, 15, 3], np.uint16)),
             _init("z1", np.array([1, 2 ** 63, 0, 2 ** 40, 7, 2 ** 64 - 1], np.uint64))]
    ins = [_vi("a", TP.INT8, N), _vi("b", TP.INT8, N), _vi("u", TP.UINT8, N), _vi("s", TP.UINT16, N),
           _vi("w", TP.UINT32, N), _vi("z", TP.UINT64, N), _vi("h", TP.INT16, N)]
    graph = helper.make_graph(nodes, "narrow", ins, [_vi(n, t, N) for n, t in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _narrow_feeds(rng, n):
    def ints(dtype):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=(n, 6), dtype=dtype, endpoint=True)
    return {"a": ints(np.int8), "b": ints(np.int8), "u": ints(np.uint8), "s": ints(np.uint16),
            "w": ints(np.uint32), "z": ints(np.uint64), "h": ints(np.int16)}


@pytest.mark.parametrize("device", DEVICES)
def test_narrow_integers_stay_native_and_wrap_like_onnxruntime(device):
    """int8/int16/uint8/uint16/uint32/uint64 inputs, initializers and intermediates are luminal tensors of those
    dtypes (not widened), so overflow wraps as in ONNX; every output equals onnxruntime's exactly."""
    from luminal.dtype import DType

    proto = narrow_int_model()
    model = lo.load(proto, device=device)
    assert {n: model.inputs[n].dtype for n in "abuswzh"} == {
        "a": DType.int8, "b": DType.int8, "u": DType.uint8, "s": DType.uint16, "w": DType.uint32,
        "z": DType.uint64, "h": DType.int16}
    assert model.value("sum8").dtype == DType.int8 and model.value("sq64").dtype == DType.uint64
    assert model.value("xor8").dtype == DType.uint8 and model.value("sub16").dtype == DType.int16
    state = model.module.state_dict()
    assert state["k8"].dtype == np.int8 and state["m8"].dtype == np.uint8 and state["z1"].dtype == np.uint64
    rng = np.random.default_rng(16)
    for n in (3, 5):
        feeds = _narrow_feeds(rng, n)
        feeds["z"][0, :2] = [2 ** 64 - 1, 2 ** 63 + 5]
        got, want = model.run(feeds), ort_run(proto, feeds)
        for name, w in zip(model.output_names, want):
            assert got[name].dtype == w.dtype, (name, got[name].dtype, w.dtype)
            np.testing.assert_array_equal(got[name], w, err_msg=name)
    assert model.runtime is not None


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_dequantize_int8_uint8_natively(device):
    """QuantizeLinear produces uint8 / int8 tensors (per-tensor and per-axis), DequantizeLinear and MatMulInteger
    consume them; against onnxruntime: quantized values exact, dequantized ones within 1e-6."""
    from luminal.dtype import DType

    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp_u8"], ["q_u8"]),
        helper.make_node("QuantizeLinear", ["x", "s_axis", "zp_i8"], ["q_i8"], axis=1),
        helper.make_node("DequantizeLinear", ["q_u8", "s", "zp_u8"], ["dq_u8"]),
        helper.make_node("DequantizeLinear", ["q_i8", "s_axis", "zp_i8"], ["dq_i8"], axis=1),
        helper.make_node("MatMulInteger", ["q_u8", "w_u8", "zp_u8", "wz_u8"], ["acc"]),
        helper.make_node("DynamicQuantizeLinear", ["x"], ["dq", "dscale", "dzp"]),
    ]
    inits = [_init("s", np.float32(0.05)), _init("zp_u8", np.uint8(128)),
             _init("s_axis", (rng.random(8) * 0.1 + 0.01).astype(np.float32)),
             _init("zp_i8", rng.integers(-10, 10, 8).astype(np.int8)),
             _init("w_u8", rng.integers(0, 256, (8, 3)).astype(np.uint8)), _init("wz_u8", np.uint8(100))]
    outs = [_vi("q_u8", TP.UINT8, ["N", 8]), _vi("q_i8", TP.INT8, ["N", 8]), _vi("dq_u8", TP.FLOAT, ["N", 8]),
            _vi("dq_i8", TP.FLOAT, ["N", 8]), _vi("acc", TP.INT32, ["N", 3]), _vi("dq", TP.UINT8, ["N", 8]),
            _vi("dscale", TP.FLOAT, []), _vi("dzp", TP.UINT8, [])]
    graph = helper.make_graph(nodes, "quant", [_vi("x", TP.FLOAT, ["N", 8])], outs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model = lo.load(proto, device=device)
    assert model.value("q_u8").dtype == DType.uint8 and model.value("q_i8").dtype == DType.int8
    assert model.value("dq").dtype == DType.uint8
    for n in (4, 7):
        x = (rng.normal(size=(n, 8)) * 4).astype(np.float32)
        x[0, :3] = [100.0, -100.0, 0.025]  # saturation and a tie
        got, want = model.run({"x": x}), ort_run(proto, {"x": x})
        for name, w in zip(model.output_names, want):
            assert got[name].dtype == w.dtype, name
            np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6, err_msg=name)


def _bf16(arr):
    from luminal.dtype import BFLOAT16_NUMPY
    return np.asarray(arr, np.float32).astype(BFLOAT16_NUMPY)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_model_matches_torch_bf16(device):
    """bfloat16 inputs, initializers and intermediates (``ml_dtypes.bfloat16`` arrays on the numpy side): each
    operator computes in float32 and rounds its result to bfloat16 once, as PyTorch's CPU kernels do, so the
    oracle is the same graph in torch bfloat16 on the CPU (onnxruntime has no bfloat16 kernels for these ops).
    Tolerance: one bfloat16 ulp at the outputs' scale (GEMM accumulation order may move a rounding)."""
    torch = pytest.importorskip("torch")
    from luminal.dtype import DType

    rng = np.random.default_rng(5)
    w = _bf16(rng.normal(size=(8, 16)) * 0.3)
    b = _bf16(rng.normal(size=16) * 0.1)
    g = _bf16(1 + rng.normal(size=16) * 0.1)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("LayerNormalization", ["hb", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Gelu", ["ln"], ["act"]),
        helper.make_node("Softmax", ["act"], ["p"], axis=-1),
        helper.make_node("Cast", ["p"], ["p32"], to=TP.FLOAT),
        helper.make_node("Cast", ["y32"], ["y16"], to=TP.BFLOAT16),
    ]
    graph = helper.make_graph(nodes, "bf16", [_vi("x", TP.BFLOAT16, ["N", 8]), _vi("y32", TP.FLOAT, ["N", 4])],
                              [_vi("act", TP.BFLOAT16, ["N", 16]), _vi("p32", TP.FLOAT, ["N", 16]),
                               _vi("y16", TP.BFLOAT16, ["N", 4])],
                              [_init("w", w), _init("b", b), _init("g", g)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model = lo.load(proto, device=device)
    assert model.inputs["x"].dtype == DType.bfloat16 and model.value("h").dtype == DType.bfloat16
    assert {p.dtype for p in model.parameters()} == {DType.bfloat16}

    def t(a):
        return torch.from_numpy(np.asarray(a, np.float32)).to(torch.bfloat16)

    for n in (3, 6):
        x = _bf16(rng.normal(size=(n, 8)))
        y32 = (rng.normal(size=(n, 4)) * 100).astype(np.float32)
        got = model.run({"x": x, "y32": y32})
        with torch.no_grad():
            tw, tb, tg = t(w), t(b), t(g)
            hb = t(x) @ tw + tb
            act = torch.nn.functional.gelu(torch.nn.functional.layer_norm(hb, (16,), tg, tb, 1e-5))
            p = torch.softmax(act, -1).float().numpy()
        assert got["act"].dtype.name == "bfloat16" and got["y16"].dtype.name == "bfloat16"
        act = act.float().numpy()
        np.testing.assert_allclose(got["act"].astype(np.float32), act, rtol=0,
                                   atol=2.0 ** -7 * max(1.0, np.abs(act).max()))
        np.testing.assert_allclose(got["p32"], p, rtol=2.0 ** -8, atol=2.0 ** -9)
        # Cast float32 -> bfloat16 rounds to nearest even, bit for bit as torch and onnxruntime
        np.testing.assert_array_equal(got["y16"].astype(np.float32), t(y32).float().numpy())
        cast = helper.make_model(helper.make_graph([helper.make_node("Cast", ["y32"], ["y16"], to=TP.BFLOAT16),
                                                    helper.make_node("Cast", ["y16"], ["back"], to=TP.FLOAT)],
                                                   "c", [_vi("y32", TP.FLOAT, ["N", 4])],
                                                   [_vi("back", TP.FLOAT, ["N", 4])]),
                                 opset_imports=[helper.make_opsetid("", 20)])
        np.testing.assert_array_equal(got["y16"].astype(np.float32), ort_run(cast, {"y32": y32})[0])


def test_bitcast_integer_types_and_float_bits_at_import_time():
    """BitCast between integer types of one width at run time (oracle: numpy's ``view``); a float BitCast folds
    at import time when its input is a constant, and reinterprets a run-time value's bits exactly (NaN payloads,
    -0.0)."""
    c = np.array([1.0, -2.5, np.inf, 0.1], np.float32)
    nodes = [helper.make_node("BitCast", ["a"], ["a_u8"], to=TP.UINT8),
             helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(c)),
             helper.make_node("BitCast", ["c"], ["c_i32"], to=TP.INT32),
             helper.make_node("Add", ["c_i32", "one"], ["c_i32p"])]
    graph = helper.make_graph(nodes, "bc", [_vi("a", TP.INT8, [5])],
                              [_vi("a_u8", TP.UINT8, [5]), _vi("c_i32p", TP.INT32, [4])],
                              [_init("one", np.int32(1))])
    model = lo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]))
    a = np.array([-128, -1, 0, 5, 127], np.int8)
    got_u8, got_i32 = model(a)
    np.testing.assert_array_equal(got_u8, a.view(np.uint8))
    np.testing.assert_array_equal(got_i32, c.view(np.int32) + 1)
    graph = helper.make_graph([helper.make_node("BitCast", ["x"], ["y"], to=TP.INT32, name="bits"),
                               helper.make_node("BitCast", ["y"], ["z"], to=TP.FLOAT, name="back")], "bc2",
                              [_vi("x", TP.FLOAT, [4])], [_vi("y", TP.INT32, [4]), _vi("z", TP.FLOAT, [4])])
    model = lo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]))
    x = np.array([-0.0, np.nan, 1.5, -np.inf], np.float32)
    x.view(np.uint32)[1] = 0xFFA00001  # a negative signalling NaN with a payload
    y, z = model(x)
    np.testing.assert_array_equal(y, x.view(np.int32))
    np.testing.assert_array_equal(z.view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("device", DEVICES)
def test_hf_bert_export_slices_its_position_table_by_seq(device):
    """A transformers BertModel (random small config) exported with torch.onnx.export slices its 32-long
    ``position_ids`` buffer with the symbolic ``seq`` and expands ``token_type_ids`` from symbolic shape
    computations: it imports with symbolic batch and seq (the slice's length is ``seq``, checked at each call to
    be at most 32), matches onnxruntime at two shapes (rtol 1e-4, atol 1e-5) without recompiling, and a longer
    input is refused naming the limit."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, attn_implementation="eager")).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, 60, (2, 7))
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    proto = _torch_export(Wrapped().eval(), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"],
                          ["hidden", "pooled"], dyn)
    model = lo.load(proto, device=device)
    rng = np.random.default_rng(1)
    runtime = None
    for b, s in ((2, 7), (3, 12)):
        mask = np.ones((b, s), np.int64)
        mask[0, s // 2:] = 0
        check_against_ort(model, proto, {"input_ids": rng.integers(0, 60, (b, s)), "attention_mask": mask})
        assert runtime is None or model.runtime is runtime
        runtime = model.runtime
    with pytest.raises(OnnxInputError, match=r"seq = 40 exceeds 32.*Slice"):
        model(rng.integers(0, 60, (1, 40)), np.ones((1, 40), np.int64))


def test_dynamic_batch_cnn_reads_its_inputs_in_place():
    """A MobileNet-style CNN exported with a dynamic batch (conv + batch norm, depthwise, pointwise, strided) runs
    its convolutions on the direct kernel (luminal/codegen/gemm_direct.py: the copy's size and the batch
    coordinates are run-time values) with one compiled program for batches 1, 4 and 7, matching onnxruntime."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(), nn.Conv2d(16, 32, 1), nn.ReLU(),
                        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(32, 10)).eval()
    proto = _torch_export(net, (torch.randn(4, 3, 32, 32),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}})
    model = lo.load(proto, device="cpu")
    rng = np.random.default_rng(3)
    runtime = None
    for batch in (4, 1, 7):
        check_against_ort(model, proto, {"x": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)})
        assert runtime is None or model.runtime is runtime
        runtime = model.runtime
    assert model.runtime.source.count("direct convolution (see luminal/codegen/gemm_direct.py)") >= 3
