"""``OnnxModel``: an imported ONNX model as a callable (numpy in, numpy out) over one luminal graph."""

from __future__ import annotations

import numpy as np

from ..dtype import BFLOAT16_NUMPY, to_host
from ..graph import Graph
from ..module import CompiledModel
from ..shape import Expression
from ..tensor import GraphTensor
from . import dtypes
from .errors import OnnxImportError, OnnxInputError
from .importer import Importer, OnnxParameters


class OnnxModel(CompiledModel):
    """An imported model. Call it with numpy arrays; the graph, parameters and values stay reachable.

    Attributes:
        graph: the luminal :class:`~luminal.graph.Graph` (one for the whole model).
        inputs: ONNX input name -> input ``GraphTensor`` (inputs frozen with ``constant_inputs`` are absent).
        outputs: ONNX output name -> ``GraphTensor`` (or a numpy array when the output is known at import time).
        module: the initializers as a :class:`~luminal.module.Module` (``parameters()``, ``state_dict()``,
            ``load_state_dict()``; floating-point initializers are trainable parameters, the others buffers).
        symbols: ONNX ``dim_param`` (or ``<input>_dim<k>`` for unnamed dynamic dims) -> luminal symbol name.
        device: the device the model compiles for (``"reference"`` or ``"cpu"``).

    Example::

        >>> model = luminal.onnx.load("mlp.onnx", device="cpu")
        >>> (y,) = model(np.random.rand(8, 4).astype(np.float32))   # batch 8
        >>> (y,) = model(np.random.rand(3, 4).astype(np.float32))   # batch 3: same compiled program
    """

    def __init__(self, importer: Importer, device: str | None = None, retrieve=()):
        self._importer = importer
        self.graph: Graph = importer.graph
        self.source = importer.source
        self.input_names: list[str] = list(importer.input_names)
        self.output_names: list[str] = list(importer.output_names)
        self.inputs: dict[str, GraphTensor] = dict(importer.input_tensors)
        self.module: OnnxParameters = importer.params
        self.symbols: dict[str, str] = dict(importer.symbols)
        self.frozen_inputs = dict(importer.frozen_inputs)
        self.device = device
        self._compiled = False
        for name in retrieve:
            self.retrieve(name)

    # ------------------------------------------------------------------ graph access
    @property
    def outputs(self) -> dict:
        return {name: self.value(name) for name in self.output_names}

    @property
    def opset(self) -> int:
        return self._importer.opsets[""]

    def value(self, name: str):
        """The luminal handle of an ONNX value: a ``GraphTensor``, or a numpy array for values known at import
        time (object arrays hold symbolic dims)."""
        v = self._importer.values.get(name)
        if v is None:
            raise KeyError(f"'{name}' is not a value of {self.source}; values are named as in the ONNX graph")
        if v.tensor is not None:
            return v.tensor
        if v.param is not None:
            return self._importer.materialize(v, self.graph)
        return v.static

    def value_names(self) -> list[str]:
        return list(self._importer.values)

    def parameters(self):
        return self.module.parameters()

    def retrieve(self, *names: str) -> "OnnxModel":
        """Keep intermediate values for :meth:`intermediate` after each run.

        On a compiled device this must happen before the first run (or ``load(..., retrieve=[...])``): the
        compiler may fuse values that nobody asked for."""
        for name in names:
            t = self.value(name)
            if isinstance(t, GraphTensor):
                if self._compiled and self.device not in (None, "reference"):
                    raise OnnxImportError(f"retrieve('{name}'): the model is already compiled for {self.device}; "
                                          "pass retrieve=[...] to luminal.onnx.load instead")
                t.retrieve()
        return self

    def intermediate(self, name: str) -> np.ndarray:
        """The value of ``name`` from the last run (mark it first with :meth:`retrieve` or ``load(retrieve=)``)."""
        return self._read(name)

    # ------------------------------------------------------------------ compile and run
    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        """Run with inputs positionally (graph-input order) or by name; returns the outputs as a list."""
        if len(args) > len(self.input_names):
            raise OnnxInputError(f"{self.source}: got {len(args)} positional inputs but the model has "
                                 f"{len(self.input_names)}: {self.input_names}")
        feeds = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k in feeds:
                raise OnnxInputError(f"{self.source}: input '{k}' given both positionally and by name")
            feeds[k] = v
        out = self.run(feeds)
        return [out[name] for name in self.output_names]

    def run(self, feeds: dict) -> dict:
        """Run with ``{input name: array}``; returns ``{output name: array}``."""
        unknown = [k for k in feeds if k not in self.inputs]
        if unknown:
            frozen = [k for k in unknown if k in self.frozen_inputs]
            hint = f" ({frozen} were frozen at load time)" if frozen else ""
            raise OnnxInputError(f"{self.source}: unknown input(s) {unknown}{hint}; the model's inputs are "
                                 f"{self.input_names}")
        missing = [k for k in self.input_names if k not in feeds]
        if missing:
            raise OnnxInputError(f"{self.source}: missing input(s) {missing}; the model's inputs are "
                                 f"{self.input_names}")
        for name in self.input_names:
            self._set_input(name, feeds[name])
        for size, maximum, where in self._importer.assumptions:
            value = size.evaluate(self.graph.dyn_map)
            if value > maximum:
                raise OnnxInputError(f"{self.source}: {size} = {value} exceeds {maximum}, the length of the constant "
                                     f"that {where} slices with it (e.g. a position table: the model supports "
                                     f"at most {maximum})")
        if not self._compiled:
            self.compile()
        self.graph.execute()
        return {name: self._read(name) for name in self.output_names}

    def _set_input(self, name: str, data) -> None:
        tensor = self.inputs[name]
        onnx_type = self._importer.input_types[name]
        want = dtypes.numpy(onnx_type)
        arr = np.asarray(data)
        expected = f"{want.name} of shape {[str(d) for d in tensor.dims]}"
        kind = _kind(arr.dtype)
        if kind not in "biuf" or arr.dtype == object:
            raise OnnxInputError(f"input '{name}': expected {expected}, got an array of {arr.dtype}")
        kinds = {"b": "b", "i": "iu", "u": "iu", "f": "f"}[_kind(want)]
        if kind not in kinds and not (isinstance(data, (list, tuple, int, float)) and want.kind != "b"):
            raise OnnxInputError(f"input '{name}': expected {expected}, got dtype {arr.dtype}")
        if arr.ndim != len(tensor.dims):
            raise OnnxInputError(f"input '{name}': expected rank {len(tensor.dims)} ({expected}), got shape "
                                 f"{arr.shape}")
        for k, (d, n) in enumerate(zip(tensor.dims, arr.shape)):
            if d.is_constant() and d.to_int() != n:
                raise OnnxInputError(f"input '{name}': expected {expected}, got shape {arr.shape} (dim {k} must be "
                                     f"{d.to_int()})")
        if arr.dtype != want:
            arr = to_host(arr, tensor.dtype)
        try:
            tensor.set(arr.astype(tensor.dtype.numpy, copy=False))
        except ValueError as err:
            raise OnnxInputError(f"input '{name}': {err}") from None

    def _read(self, name: str) -> np.ndarray:
        v = self._importer.values.get(name)
        if v is None:
            raise KeyError(f"'{name}' is not a value of {self.source}")
        if v.static is not None and (v.tensor is None or v.param is None):
            arr = v.static
            if arr.dtype == object:
                arr = np.array([x.evaluate(self.graph.dyn_map) if isinstance(x, Expression) else int(x)
                                for x in arr.reshape(-1)], dtype=np.int64).reshape(arr.shape)
            return np.array(arr, dtype=dtypes.numpy(v.onnx_type) if v.onnx_type in dtypes.NUMPY_OF else None)
        data = v.tensor.data()
        return data.astype(dtypes.numpy(v.onnx_type), copy=False)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {[str(d) for d in self.inputs[n].dims]}" for n in self.input_names)
        return (f"OnnxModel({self.source}, opset {self.opset}, inputs [{ins}], outputs {self.output_names}, "
                f"{len(self.module)} initializers, {len(self.graph.nodes)} graph nodes, device {self.device})")


def _kind(dtype: np.dtype) -> str:
    """numpy's kind letter, with ``ml_dtypes.bfloat16`` (kind ``V``) counted as a float."""
    return "f" if dtype == BFLOAT16_NUMPY else dtype.kind
