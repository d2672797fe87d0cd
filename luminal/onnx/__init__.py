"""Import ONNX models into luminal graphs.

    >>> import luminal.onnx
    >>> model = luminal.onnx.load("model.onnx", device="cpu")
    >>> outputs = model(x)                        # numpy in, list of numpy out
    >>> model.run({"input": x})                   # dict in, dict out
    >>> model.graph, model.inputs, model.outputs  # the luminal graph and its tensors
    >>> model.module.state_dict()                 # initializers (trainable parameters)

ONNX symbolic dims (``dim_param``, or unnamed dynamic dims) become luminal symbols: a new batch size binds a
new value and never recompiles. Shape computations (``Shape -> Gather -> Concat -> Reshape``) are evaluated
on the symbolic expressions at import time. See ``docs/onnx.md`` for the operator table and limits.

``onnx`` (the protobuf parser) is required; ``onnxruntime`` is never imported (the tests use it as an oracle).
"""

from __future__ import annotations

import os

try:
    import onnx as _onnx
except ImportError as _err:  # pragma: no cover - depends on the environment
    raise ImportError("luminal.onnx needs the 'onnx' package: pip install 'luminal[onnx]'") from _err

from .errors import (NeedsStaticInputError, OnnxImportError, OnnxInputError,  # noqa: E402
                     UnsupportedOperatorError)
from .importer import MIN_OPSET, Importer, OnnxParameters  # noqa: E402
from .model import OnnxModel  # noqa: E402
from .registry import supported_ops  # noqa: E402

__all__ = ["load", "OnnxModel", "OnnxParameters", "OnnxImportError", "OnnxInputError", "UnsupportedOperatorError",
           "NeedsStaticInputError", "supported_ops", "read_model", "MIN_OPSET"]


def read_model(source) -> tuple[_onnx.ModelProto, str]:
    """Parse a path, ``bytes`` or ``ModelProto``; returns ``(model, description)``. Malformed or truncated
    files raise :class:`OnnxImportError` naming the file."""
    if isinstance(source, _onnx.ModelProto):
        return source, f"<ModelProto {source.graph.name or 'unnamed'}>"
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = "<bytes>"
        try:
            model = _onnx.load_model_from_string(bytes(source))
        except Exception as err:
            raise OnnxImportError(f"{label}: not a valid ONNX model ({type(err).__name__}: {err})") from None
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        if not os.path.exists(label):
            raise FileNotFoundError(f"ONNX model file not found: {label}")
        try:
            model = _onnx.load(label)
        except Exception as err:
            raise OnnxImportError(f"{label}: not a valid ONNX model or truncated file "
                                  f"({type(err).__name__}: {err})") from None
    else:
        raise TypeError(f"luminal.onnx.load expects a path, bytes or onnx.ModelProto, got {type(source).__name__}")
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise OnnxImportError(f"{label}: not an ONNX model (the file parsed, but has no IR version or no graph "
                              "outputs; is it truncated or another format?)")
    return model, label


def load(source, device: str | None = None, *, input_shapes: dict | None = None,
         constant_inputs: dict | None = None, retrieve=(), compile: bool = False) -> OnnxModel:  # noqa: A002
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as an :class:`OnnxModel`.

    Args:
        device: ``"reference"`` (numpy interpreter) or ``"cpu"`` (generated C); default as
            :meth:`luminal.Graph.compile` (``$LUMINAL_DEVICE``, else reference). The graph compiles on the first
            call (or now with ``compile=True``).
        input_shapes: ``{input: (dims...)}`` for inputs whose shape the model leaves out or to override it;
            a dim is an int, a symbol name, or ``None`` / ``-1`` for a fresh symbol.
        constant_inputs: ``{input: array}`` freezes inputs to constants at import time (needed when an input
            decides a shape, e.g. the ``shape`` of a Reshape fed by the caller).
        retrieve: ONNX value names to keep for :meth:`OnnxModel.intermediate` after each run.

    Raises:
        OnnxImportError: a malformed file, an unsupported operator/opset/dtype (naming the node, its index,
            the operator and its opset), a shape that cannot be known at import time.
    """
    model, label = read_model(source)
    importer = Importer(model, label, input_shapes, constant_inputs)
    out = OnnxModel(importer, device, retrieve)
    if compile:
        out.compile()
    return out
