"""The operator registry and the context every operator handler receives.

A handler is a function ``handler(ctx) -> list`` registered for one or more ONNX operator names with
:func:`register`. It reads inputs through the :class:`NodeContext` (``ctx.t(i)`` a ``GraphTensor``,
``ctx.static(i)`` an import-time numpy value, ``ctx.attr(name)``...) and returns one item per node output:
a ``GraphTensor`` (computed at run time), a numpy array (known at import time), ``None`` (an optional output
not produced) or :func:`typed` ``(item, onnx_type)`` to state the output's ONNX element type.

A handler may also have an import-time ``fold`` function (numpy, also over symbolic dims held as
:class:`~luminal.shape.Expression` objects in object arrays): when every input of a node is known at import
time the importer calls it instead, so shape arithmetic (``Shape -> Gather -> Concat -> Reshape``) is folded
into constants and symbolic expressions rather than run. Without a ``fold`` function such nodes are folded by
running the handler itself on a scratch graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

from ..dtype import DType
from ..shape import Expression, to_expr
from . import dtypes
from .errors import NeedsStaticInputError, OnnxImportError

DEFAULT_DOMAIN = ""


@dataclass
class OpSpec:
    """One registered operator."""

    op_type: str
    domain: str
    handler: Callable
    fold: Callable | None = None
    pure: bool = True           # deterministic: may be folded when its inputs are constants
    min_version: int | None = None  # oldest operator version handled (default: the one current at opset 13)


REGISTRY: dict[tuple[str, str], OpSpec] = {}


def register(*op_types: str, fold: Callable | None = None, pure: bool = True, domain: str = DEFAULT_DOMAIN,
             min_version: int | None = None):
    """Decorator: register ``handler(ctx)`` for the given operator names."""
    def wrap(fn):
        for op in op_types:
            REGISTRY[(domain, op)] = OpSpec(op, domain, fn, fold, pure, min_version)
        return fn
    return wrap


def set_fold(*op_types: str, domain: str = DEFAULT_DOMAIN):
    """Decorator: attach an import-time numpy ``fold(ctx)`` to already registered operators."""
    def wrap(fn):
        for op in op_types:
            REGISTRY[(domain, op)].fold = fn
        return fn
    return wrap


class NotFoldable(Exception):
    """Raised by a fold function when it cannot compute the value at import time (e.g. an undecidable
    comparison of symbolic dims); the node is then computed at run time instead."""


@dataclass
class Typed:
    """A handler result with an explicit ONNX element type."""

    value: object
    onnx_type: int


def typed(value, onnx_type: int) -> Typed:
    return Typed(value, onnx_type)


def dim(d):
    """A dim as an int when constant, else the :class:`Expression`."""
    if isinstance(d, Expression):
        return d.to_int() if d.is_constant() else d
    return int(d)


def is_symbolic(x) -> bool:
    return isinstance(x, Expression) and not x.is_constant()


class NodeContext:
    """What a handler sees of its node: inputs, attributes, output types, and the graph to build into."""

    def __init__(self, importer, node: onnx.NodeProto, index: int, inputs: list, version: int, graph,
                 materialize: Callable):
        self.importer = importer
        self.node = node
        self.index = index
        self.inputs = inputs
        self.version = version
        self.graph = graph
        self._materialize = materialize
        self._attrs = {a.name: a for a in node.attribute}
        self.scope = None  # the enclosing value scope (for operators with subgraphs)

    # ------------------------------------------------------------------ naming and errors
    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def n_outputs(self) -> int:
        return len(self.node.output)

    def output_used(self, k: int) -> bool:
        return k < len(self.node.output) and bool(self.node.output[k])

    def describe(self) -> str:
        name = f" '{self.node.name}'" if self.node.name else ""
        return f"node #{self.index}{name} ({self.node.op_type}, opset version {self.version})"

    def fail(self, message: str):
        raise OnnxImportError(message)

    # ------------------------------------------------------------------ inputs
    def __len__(self) -> int:
        return len(self.inputs)

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def value(self, i: int):
        if not self.has(i):
            raise OnnxImportError(f"input {i} is required but missing")
        return self.inputs[i]

    def t(self, i: int, dtype=None):
        """Input ``i`` as a ``GraphTensor`` (constants are materialized), optionally cast.

        float16 and bfloat16 inputs come as float32: every operator computes in float32 and its result is
        rounded to the half type once (as numpy and onnxruntime do), not after every primitive of its
        decomposition."""
        tensor = self._materialize(self.value(i), self.graph)
        if dtype is None and tensor.dtype.is_half:
            return tensor.cast(DType.float32)
        return tensor if dtype is None else tensor.cast(dtype)

    def t_raw(self, i: int):
        """Input ``i`` in its own luminal dtype (no float16/bfloat16 -> float32 widening)."""
        return self._materialize(self.value(i), self.graph)

    def is_static(self, i: int) -> bool:
        return self.has(i) and self.inputs[i].static is not None

    def static(self, i: int, what: str | None = None) -> np.ndarray:
        """Input ``i``'s value at import time (object arrays may hold symbolic dims)."""
        v = self.value(i)
        if v.static is None:
            what = what or f"input {i}"
            sources = sorted(v.sources)
            origin = (f"it is computed at run time from the model input(s) {sources}" if sources else
                      "it is computed at run time")
            raise NeedsStaticInputError(
                f"{what} ('{v.name}') must be known at import time (a constant, an initializer or a shape "
                f"computation), but {origin}; freeze such inputs with load(..., constant_inputs={{...}})",
                sources)
        return v.static

    def ints(self, i: int, what: str | None = None) -> list:
        """A static 1-D (or scalar) integer input as a list of ints / symbolic Expressions."""
        arr = self.static(i, what)
        return [dim(x) if isinstance(x, Expression) else int(x) for x in np.asarray(arr).reshape(-1)]

    def floats(self, i: int, what: str | None = None) -> list[float]:
        arr = self.static(i, what)
        if arr.dtype == object:
            raise OnnxImportError(f"{what or f'input {i}'} must be a numeric constant, got symbolic values")
        return [float(x) for x in np.asarray(arr).reshape(-1)]

    def scalar(self, i: int, what: str | None = None):
        arr = np.asarray(self.static(i, what))
        if arr.size != 1:
            raise OnnxImportError(f"{what or f'input {i}'} must hold one value, got shape {arr.shape}")
        x = arr.reshape(-1)[0]
        return dim(x) if isinstance(x, Expression) else x.item()

    def dims(self, i: int) -> tuple:
        """Input ``i``'s shape: ints and symbolic Expressions."""
        v = self.value(i)
        if v.static is not None and v.tensor is None:
            return tuple(v.static.shape)
        return tuple(dim(d) for d in self._materialize(v, self.graph).dims)

    def rank(self, i: int) -> int:
        return len(self.dims(i))

    def type(self, i: int) -> int:
        """Input ``i``'s ONNX element type."""
        return self.value(i).onnx_type

    # ------------------------------------------------------------------ attributes
    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr(self, name: str, default=None):
        """An attribute's value: int, float, str, list, numpy array (tensors) or GraphProto."""
        a = self._attrs.get(name)
        if a is None:
            return default
        if a.type == onnx.AttributeProto.TENSOR:
            return onnx.numpy_helper.to_array(a.t)
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            return value.decode("utf-8")
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode("utf-8") for v in value]
        return value

    def attr_ints(self, name: str, default=None):
        value = self.attr(name, default)
        return None if value is None else [int(v) for v in value]

    # ------------------------------------------------------------------ outputs
    def out_type(self, k: int = 0) -> int | None:
        """The ONNX element type of output ``k`` from ONNX's type inference, when known and supported."""
        if k >= len(self.node.output):
            return None
        t = self.importer.inferred_types.get(self.node.output[k])
        return t if t in dtypes.SUPPORTED else None

    def const(self, value, dtype, shape=()):
        """A constant (number or Expression) of a luminal dtype broadcast to ``shape``."""
        from ..hl_ops.creation import constant
        return constant(self.graph, value, dtype, tuple(to_expr(d) for d in shape))

    def array(self, arr: np.ndarray, onnx_type: int | None = None):
        """A numpy array (or object array of Expressions) as a tensor of this graph."""
        return self.importer.tensor_of_array(np.asarray(arr), self.graph, onnx_type)


def supported_ops(domain: str = DEFAULT_DOMAIN) -> list[str]:
    """The operator names the importer handles (sorted)."""
    from . import ops  # noqa: F401 - registers the handlers
    return sorted(op for (d, op) in REGISTRY if d == domain)
