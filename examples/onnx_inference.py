"""Run an ONNX model with luminal: export a small CNN from PyTorch (or build one with onnx.helper when PyTorch
is not installed), import it with ``luminal.onnx.load``, run it at two batch sizes on one compiled program and
compare with onnxruntime when it is installed.

Run:  pip install -e '.[onnx]' && python examples/onnx_inference.py [--device cpu|reference]
"""

from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper

import luminal.onnx


def torch_cnn() -> onnx.ModelProto | None:
    """A Conv/BatchNorm/ReLU/MaxPool/GlobalAveragePool/Linear classifier exported with a symbolic batch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 10)).eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(net, (torch.randn(1, 1, 28, 28),), buf, input_names=["image"],
                              output_names=["logits"], dynamic_axes={"image": {0: "batch"}}, opset_version=17,
                              dynamo=False)
        except Exception:
            return None
    return onnx.load_model_from_string(buf.getvalue())


def helper_mlp() -> onnx.ModelProto:
    """The same interface built by hand: image (batch, 1, 28, 28) -> Flatten -> Gemm -> Relu -> Gemm."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(a.astype(np.float32), n) for n, a in
             (("w1", rng.normal(0, 0.05, (64, 784))), ("b1", np.zeros(64)), ("w2", rng.normal(0, 0.1, (10, 64))),
              ("b2", np.zeros(10)))]
    nodes = [helper.make_node("Flatten", ["image"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                           ["batch", 1, 28, 28])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    args = parser.parse_args()

    proto = torch_cnn()
    source = "exported from PyTorch"
    if proto is None:
        proto, source = helper_mlp(), "built with onnx.helper (PyTorch not installed)"
    print(f"model {source}: {len(proto.graph.node)} nodes, ops {sorted({n.op_type for n in proto.graph.node})}")
    print(f"luminal.onnx supports {len(luminal.onnx.supported_ops())} ONNX operators")

    start = time.perf_counter()
    model = luminal.onnx.load(proto.SerializeToString(), device=args.device, compile=True)
    print(f"imported and compiled for {args.device} in {time.perf_counter() - start:.2f} s: {model}")

    try:
        import onnxruntime
        session = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    except ImportError:
        session = None
    rng = np.random.default_rng(1)
    runtime = model.runtime
    for batch in (4, 32):
        image = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
        start = time.perf_counter()
        (logits,) = model(image)
        elapsed = (time.perf_counter() - start) * 1e3
        line = f"batch {batch:3d}: logits {logits.shape}, predictions {logits.argmax(-1)[:8].tolist()}, {elapsed:.1f} ms"
        if session is not None:
            (ref,) = session.run(None, {"image": image})
            line += f", max |luminal - onnxruntime| = {np.abs(logits - ref).max():.2e}"
        print(line)
    print(f"same compiled program for both batch sizes: {model.runtime is runtime}")


if __name__ == "__main__":
    main()
