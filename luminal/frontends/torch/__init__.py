"""PyTorch import: ``from_torch(module, example_args, dynamic_shapes=...)`` and the ``"luminal"`` torch.compile
backend.

``torch.export.export`` traces the module to an ATen graph; every ATen node becomes tensor-API calls on one
luminal :class:`~luminal.graph.Graph` (no new primitive), parameters become trainable
:class:`~luminal.module.Parameter` s and buffers (and lifted constants) non-trainable ones of a
:class:`TorchParameters` module. Dynamic dims (``torch.export.Dim``) become luminal symbols named after the
``Dim``: a new batch size or sequence length binds a new value and runs the same compiled program.

The graph is imported as exported (the "training IR": ``aten.linear``, ``aten.layer_norm``,
``aten.scaled_dot_product_attention``...). When it holds an operator without a handler, the program is
decomposed with ``ExportedProgram.run_decompositions`` (PyTorch's core ATen table minus the operators handled
here) and imported again; an operator still unsupported raises :class:`UnsupportedTorchOpError` naming it.

Importing this package registers the ``torch.compile`` backend ``"luminal"`` (:func:`register`).

Layout: ``_core`` (errors, dtypes, the state module, the op registry, the FX converter), ``ops`` (the ATen
handlers), ``model`` (:class:`TorchModel`, :func:`from_torch`), ``backend`` (the torch.compile backend).

torch is imported by this package only (``import luminal`` never imports it). See ``docs/torch_import.md``.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as _err:  # pragma: no cover - depends on the environment
    raise ImportError("luminal.frontends.torch (luminal.from_torch, the 'luminal' torch.compile backend) needs "
                      "PyTorch: pip install torch (luminal itself does not depend on it)") from _err

from . import ops  # noqa: E402,F401 - registers the ATen handlers
from ._core import (TorchImportError, TorchInputError, TorchParameters, UnsupportedTorchOpError,  # noqa: E402
                    register_op, supported_ops)
from .backend import _CompiledSubgraph, luminal_backend, register  # noqa: E402,F401
from .model import TorchModel, from_torch, import_exported  # noqa: E402

__all__ = ["from_torch", "import_exported", "TorchModel", "TorchParameters", "TorchImportError",
           "UnsupportedTorchOpError", "TorchInputError", "register", "register_op", "luminal_backend",
           "supported_ops"]

register()
