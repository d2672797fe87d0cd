"""A backend for ONNX's conformance suite (``onnx.backend.test.BackendTest``).

    >>> import onnx.backend.test
    >>> from luminal.onnx.backend import LuminalBackend
    >>> tests = onnx.backend.test.BackendTest(LuminalBackend.for_device("cpu"), __name__)

ONNX's device names are ``"CPU"`` / ``"CUDA"``; the luminal device (``"reference"`` or ``"cpu"``) is chosen by
the backend class (:meth:`LuminalBackend.for_device`). Node tests feed operands such as a Reshape's ``shape`` as
graph inputs; where the importer needs such a value at import time (it decides a shape), :meth:`prepare`
defers the import to the first :meth:`run` and freezes those inputs to the values given (re-importing when
they change). :attr:`LuminalRep.frozen` names them, so reports can tell these tests apart.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from . import dtypes
from .errors import NeedsStaticInputError
from .importer import Importer
from .model import OnnxModel


class LuminalRep(BackendRep):
    """A prepared model: imported at prepare time, or at the first run when inputs must be frozen."""

    def __init__(self, model: onnx.ModelProto, device: str):
        self.proto = model
        self.device = device
        self.frozen: tuple[str, ...] = ()
        self._cache: dict = {}
        self.model = None
        try:
            self.model = OnnxModel(Importer(model, "<backend model>"), device)
        except NeedsStaticInputError as err:
            self.frozen = err.graph_inputs
            if not self.frozen:
                raise

    def _input_names(self):
        inits = {i.name for i in self.proto.graph.initializer}
        return [i.name for i in self.proto.graph.input if i.name not in inits]

    def _specialized(self, feeds: dict) -> OnnxModel:
        key = tuple((k, feeds[k].dtype.str, feeds[k].shape, feeds[k].tobytes()) for k in self.frozen)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        for _ in range(8):
            constants = {k: feeds[k] for k in self.frozen}
            try:
                model = OnnxModel(Importer(self.proto, "<backend model>", constant_inputs=constants), self.device)
                break
            except NeedsStaticInputError as err:
                more = [k for k in err.graph_inputs if k not in self.frozen]
                if not more:
                    raise
                self.frozen = tuple(sorted(set(self.frozen) | set(more)))
        self._cache[key] = model
        return model

    def run(self, inputs, **kwargs):
        names = self._input_names()
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            feeds = dict(zip(names, list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]))
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        model = self.model if not self.frozen else self._specialized(feeds)
        run_feeds = {k: v for k, v in feeds.items() if k in model.inputs}
        out = model.run(run_feeds)
        return tuple(out[name] for name in model.output_names)


class LuminalBackend(Backend):
    """ONNX backend running models with luminal on ``device`` (see the module docstring)."""

    device = "reference"

    @classmethod
    def for_device(cls, device: str) -> type["LuminalBackend"]:
        """A backend class that runs on the luminal ``device`` (``"reference"`` or ``"cpu"``)."""
        return type(f"LuminalBackend_{device}", (cls,), {"device": device})

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs) -> bool:
        return True

    last_prepared: LuminalRep | None = None  # the most recent prepare() (reports inspect its frozen inputs)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs) -> LuminalRep:
        if isinstance(model, (bytes, str)):
            from . import read_model
            model, _ = read_model(model)
        rep = LuminalRep(model, cls.device)
        LuminalBackend.last_prepared = rep
        return rep

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        inputs = [np.asarray(x) for x in inputs]
        in_vi = [onnx.helper.make_tensor_value_info(n, dtypes.of_numpy(x.dtype), x.shape)
                 for n, x in zip(node.input, inputs) if n]
        out_vi = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "run_node", in_vi, out_vi)
        model = onnx.helper.make_model(graph)
        return cls.run_model(model, inputs, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = LuminalBackend.prepare
run_model = LuminalBackend.run_model
run_node = LuminalBackend.run_node
supports_device = LuminalBackend.supports_device
