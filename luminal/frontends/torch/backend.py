"""The ``torch.compile`` backend: ``luminal_backend`` and its registration as ``"luminal"``."""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.utils._pytree as pytree

from ._core import TorchImportError, TorchInputError
from .model import from_torch


# ---------------------------------------------------------------------------------------------------- torch.compile
class _CompiledSubgraph:
    """The callable the ``"luminal"`` backend returns for one Dynamo graph. It imports the FX graph through
    ``torch.export`` at its first call. When Dynamo traced the graph with dynamic sizes (``SymInt`` s in the
    example inputs, after it saw a second shape), those sizes are exported as dynamic dims: one luminal
    program serves every size. A call whose sizes that program cannot take (torch specialized a dim) imports
    the graph again for that exact signature. Returns torch tensors."""

    def __init__(self, gm, example_inputs, device):
        self.gm = gm
        self.device = device
        self.dynamic = None
        specs, any_dynamic = [], False
        # Dynamo's example inputs are real tensors; the placeholders' metadata holds the symbolic sizes
        metas = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
        if len(metas) == len(example_inputs):
            example_inputs = [m if m is not None else e for m, e in zip(metas, example_inputs)]
        for e in example_inputs:
            if isinstance(e, torch.SymInt):
                specs.append(torch.export.Dim.DYNAMIC)
                any_dynamic = True
            elif isinstance(e, torch.Tensor):
                dims = {k: torch.export.Dim.DYNAMIC for k, d in enumerate(e.shape) if isinstance(d, torch.SymInt)}
                any_dynamic |= bool(dims)
                specs.append(dims or None)
            else:
                specs.append(None)
        # Dynamo's GraphModules take ``*args``: export matches dynamic_shapes against that one parameter
        self.dynamic_shapes = (tuple(specs),) if any_dynamic else None
        self.models: dict = {}
        self._warned = False

    def _key(self, args):
        return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("v", a) for a in args)

    def __call__(self, *args):
        if not self._warned and torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            self._warned = True
            warnings.warn("the 'luminal' torch.compile backend runs inference only: its outputs carry no autograd "
                          "history (call the model under torch.no_grad(), or train with luminal.training on "
                          "luminal.from_torch's model)", stacklevel=2)
        args = tuple(int(a) if isinstance(a, torch.SymInt) else a for a in args)
        flat = model = None
        if self.dynamic_shapes is not None and self.dynamic is not False:
            try:
                if self.dynamic is None:
                    self.dynamic = from_torch(self.gm, args, dynamic_shapes=self.dynamic_shapes, device=self.device)
                model = self.dynamic
                flat = model.run(*args)
            except TorchInputError:
                flat = None   # specialized: fall back to one import per signature
            except TorchImportError:
                self.dynamic = False
        if flat is None:
            key = self._key(args)
            model = self.models.get(key)
            if model is None:
                model = from_torch(self.gm, args, device=self.device)
                self.models[key] = model
            flat = model.run(*args)
        outs = [_to_torch(o) if isinstance(o, np.ndarray) else o for o in flat]
        if model._out_spec is not None:
            return pytree.tree_unflatten(outs, model._out_spec)
        return outs


def luminal_backend(gm, example_inputs, device: str | None = None):
    """A ``torch.compile`` backend: ``torch.compile(model, backend=luminal_backend)`` (or ``backend="luminal"``
    after :func:`register`). Each graph Dynamo captures is imported with :func:`from_torch` and run by
    luminal (``device``: default ``$LUMINAL_DEVICE`` or the reference interpreter; pass
    ``options={"device": "cpu"}`` to ``torch.compile``); code between graph breaks runs in Python as usual."""
    return _CompiledSubgraph(gm, example_inputs, device)


def _registered_backend(gm, example_inputs, **options):
    return luminal_backend(gm, example_inputs, device=options.get("device"))


def register(name: str = "luminal") -> None:
    """Register the ``torch.compile`` backend under ``name`` (done when this module is imported)."""
    from torch._dynamo import list_backends
    from torch._dynamo.backends.registry import register_backend

    if name in list_backends(exclude_tags=()):
        return
    register_backend(compiler_fn=_registered_backend, name=name)


def _to_torch(arr: np.ndarray) -> "torch.Tensor":
    """A numpy result as a torch tensor (``ml_dtypes.bfloat16`` arrays become ``torch.bfloat16`` bit for bit)."""
    from ...dtype import BFLOAT16_NUMPY
    arr = np.ascontiguousarray(arr)
    if arr.dtype == BFLOAT16_NUMPY:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
