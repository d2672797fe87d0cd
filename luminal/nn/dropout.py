"""Dropout: ``Dropout`` (elementwise) and ``Dropout1d/2d/3d`` (whole channels), plus functional ``dropout``.

In training mode the mask is a graph input whose data is drawn at each ``execute()`` (a deferred loader, like
``Graph.rand``): ``Bernoulli(1 - p) / (1 - p)``, so the output is one ``Mul`` (``x * mask``, as PyTorch computes
it). The random stream is ``numpy.random.default_rng((seed, call, step))``: ``seed`` is the module's ``seed``
argument, or drawn from :mod:`luminal.nn.init`'s generator at construction (so ``init.manual_seed`` makes the
sequence reproducible); ``call`` counts the module's forward calls (a module applied twice draws independent
masks); ``step`` counts that graph's executions (each step gets a new mask). Eager code (a module or ``F.dropout`` called
on eager tensors) draws its masks from ``lm.manual_seed``'s default generator instead, at each run of the
compiled graph, so re-seeding repeats them (``luminal/rng.py``). Eval mode, ``p == 0`` and an empty
input are the identity; ``p == 1`` multiplies by zero (as PyTorch does).

A module's stream position (``seed`` and the steps drawn per call) is :meth:`Dropout.rng_state`; the
``Trainer``'s checkpoints store it, so a resumed run draws the masks an uninterrupted run would have drawn.
"""

from __future__ import annotations

import numpy as np

from ..module import Module, check_graph_tensor
from . import init

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "dropout", "dropout_mask"]


def _check_p(p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return p


def _draw_seed() -> int:
    return int(init._rng(None).integers(0, 2 ** 63 - 1))


def dropout_mask(graph, dims, p: float, seed: int, call: int = 0, dtype=None, steps: dict | None = None):
    """A graph input of ``dims`` holding ``Bernoulli(1-p) / (1-p)``, redrawn at every execute.

    ``steps`` (call -> masks drawn so far, updated in place) holds the stream position; a module passes its own
    so that the position can be saved and restored (see :meth:`Dropout.rng_state`)."""
    from ..dtype import DType, as_dtype
    dtype = DType.float32 if dtype is None else as_dtype(dtype)
    mask = graph.tensor(tuple(dims), dtype, f"dropout_mask(p={p}, seed={seed if seed is not None else 'default'})")
    steps = {} if steps is None else steps
    scale = 1.0 / (1.0 - p)

    def load(bindings):
        shape = tuple(d.evaluate(bindings) for d in mask.dims)
        if seed is None:  # eager code: the default generator (lm.manual_seed), at every run
            from ..rng import draw
            keep = draw(None, "random", shape) >= p
            return (keep * scale).astype(dtype.numpy)
        step = steps.get(call, 0)
        rng = np.random.default_rng((seed, call, step))
        steps[call] = step + 1
        keep = rng.random(shape) >= p
        return (keep * scale).astype(dtype.numpy)

    mask.set_deferred(load)
    return mask


def _apply(x, p: float, training: bool, seed, call: int, mask_dims=None, steps=None):
    x = check_graph_tensor(x, "dropout")
    p = _check_p(p)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    x = x._floating()
    from ..rng import in_eager_build
    if in_eager_build():  # an eager call: masks from lm.manual_seed's generator when the graph runs
        seed = None
    else:
        seed = _draw_seed() if seed is None else int(seed)
    mask = dropout_mask(x.graph, x.dims if mask_dims is None else mask_dims, p, seed, call, x.dtype, steps)
    return x * mask


def dropout(x, p: float = 0.5, training: bool = True, seed: int | None = None):
    """``torch.nn.functional.dropout``; ``seed=None`` draws one from :mod:`luminal.nn.init`'s generator."""
    return _apply(x, p, training, seed, 0)


class Dropout(Module):
    """``torch.nn.Dropout(p)``; ``seed`` (luminal's addition) fixes the mask stream (see the module docstring).

    ``inplace`` is accepted for signature compatibility and has no effect (graph ops are not in place).
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, seed: int | None = None):
        super().__init__()
        self.p = _check_p(p)
        self.inplace = inplace
        self.seed = _draw_seed() if seed is None else int(seed)
        object.__setattr__(self, "_calls", 0)
        object.__setattr__(self, "_steps", {})  # call -> masks drawn so far (the stream position)

    def _mask_dims(self, x):
        return None

    def rng_state(self) -> dict:
        """The mask stream's position: ``{"seed": ..., "steps": {call: masks drawn}}`` (for checkpoints)."""
        return {"seed": self.seed, "steps": dict(self._steps)}

    def load_rng_state(self, state: dict) -> None:
        """Continue the stream from a position saved by :meth:`rng_state`: the next mask of forward call ``k``
        (counted from this module's first training-mode call) is the one the saved run would have drawn next.
        Graphs built already keep drawing from the restored position."""
        self.seed = int(state["seed"])
        self._steps.clear()  # (in place: the mask loaders of built graphs hold this dict)
        self._steps.update({int(k): int(v) for k, v in dict(state["steps"]).items()})

    def forward(self, x):
        x = check_graph_tensor(x, type(self).__name__)
        if not self.training or self.p in (0.0, 1.0):
            return _apply(x, self.p, self.training, self.seed, 0)
        call = self._calls
        object.__setattr__(self, "_calls", call + 1)
        return _apply(x, self.p, True, self.seed, call, self._mask_dims(x), self._steps)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class _ChannelDropout(Dropout):
    """Zero whole channels: the mask is (N, C, 1, ...) broadcast over the spatial dims."""

    _spatial = 1

    def _mask_dims(self, x):
        from ..graph import GraphError
        if x.ndim not in (self._spatial + 1, self._spatial + 2):
            raise GraphError(f"{type(self).__name__}: expected a {self._spatial + 1}D or {self._spatial + 2}D "
                             f"input, got shape {[str(d) for d in x.dims]}")
        lead = 1 if x.ndim == self._spatial + 1 else 2  # unbatched (C, *) or batched (N, C, *)
        return tuple(x.dims[:lead]) + (1,) * (x.ndim - lead)

    def forward(self, x):
        x = check_graph_tensor(x, type(self).__name__)
        self._mask_dims(x)  # validates the rank
        return super().forward(x)


class Dropout1d(_ChannelDropout):
    """``torch.nn.Dropout1d``: zero channels of (N, C, L) or (C, L)."""
    _spatial = 1


class Dropout2d(_ChannelDropout):
    """``torch.nn.Dropout2d``: zero channels of (N, C, H, W) or (C, H, W)."""
    _spatial = 2


class Dropout3d(_ChannelDropout):
    """``torch.nn.Dropout3d``: zero channels of (N, C, D, H, W) or (C, D, H, W)."""
    _spatial = 3
