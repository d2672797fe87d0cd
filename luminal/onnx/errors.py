"""Errors raised by the ONNX importer (each names the file, node, value or input concerned)."""

from __future__ import annotations

from ..graph import GraphError


class OnnxImportError(GraphError):
    """The model cannot be imported: unsupported operator/opset/dtype, malformed file, bad attribute..."""


class UnsupportedOperatorError(OnnxImportError):
    """A node uses an operator (or a version of it) that luminal.onnx does not implement."""


class NeedsStaticInputError(OnnxImportError):
    """A node needs an input's *value* at import time (a shape, axes, sizes...), but the value is only known
    at run time. ``graph_inputs`` names the model inputs it is computed from: passing them to
    ``luminal.onnx.load(..., constant_inputs={...})`` freezes them and makes the import possible."""

    def __init__(self, message: str, graph_inputs=()):
        super().__init__(message)
        self.graph_inputs = tuple(sorted(graph_inputs))


class OnnxInputError(ValueError):
    """A call passed an input of the wrong name, rank, shape or dtype."""
