"""Tensors made by a :class:`~luminal.graph.Graph`: inputs (``cx.tensor``) and the creation functions that the
tensor layer implements (``luminal/hl_ops/creation.py``, imported when first used: it sits above the graph)."""

from __future__ import annotations

from . import ops
from .dtype import DType, as_dtype
from .host_data import normalize_shape
from .shape import ShapeTracker


class GraphCreation:
    """Mixin of :class:`~luminal.graph.Graph`: ``tensor``, ``constant``, ``iota``, ``arange``, ``full``, ``zeros``,
    ``ones``, ``rand``, ``randn``, ``tril``, ``triu``."""

    def tensor(self, shape=(), dtype: DType | str = DType.float32, name: str = "input"):
        """A new input tensor. ``shape`` is an int, a symbol name, or a tuple of them: ``cx.tensor(("batch", 784))``."""
        from .tensor import GraphTensor  # the tensor layer sits above the graph

        dims = normalize_shape(shape)
        node = self.add_op(ops.Input(name, self._next_id), (), dims, dtype, name)
        return GraphTensor(self, node, ShapeTracker.contiguous_of(dims), as_dtype(dtype))

    def named_tensor(self, name: str, shape=(), dtype: DType | str = DType.float32):
        """:meth:`tensor` with the name first (the seed's spelling)."""
        return self.tensor(shape, dtype, name)

    # Tensors made inside the graph (implemented by the tensor layer, luminal/hl_ops/creation.py).
    def constant(self, value, dtype=None, shape=()):
        """A scalar constant (number or symbolic expression), optionally broadcast to ``shape``."""
        from .hl_ops import creation
        return creation.constant(self, value, dtype, shape)

    def iota(self, expr, shape, dtype=DType.int32):
        """Evaluate ``expr`` of the flat index ``z`` over ``shape``."""
        from .hl_ops import creation
        return creation.iota(self, expr, shape, dtype)

    def arange(self, start, stop=None, step=1, dtype=None):
        """``torch.arange`` (int64 for integer arguments, float32 otherwise; ``stop`` may be symbolic)."""
        from .hl_ops import creation
        return creation.arange(self, start, stop, step, dtype)

    def full(self, shape, value, dtype=None):
        from .hl_ops import creation
        return creation.full(self, shape, value, dtype)

    def zeros(self, shape, dtype=DType.float32):
        from .hl_ops import creation
        return creation.zeros(self, shape, dtype)

    def ones(self, shape, dtype=DType.float32):
        from .hl_ops import creation
        return creation.ones(self, shape, dtype)

    def rand(self, shape, seed: int = 0, low: float = 0.0, high: float = 1.0, dtype=DType.float32):
        """Seeded uniform random input of ``shape``."""
        from .hl_ops import creation
        return creation.rand(self, shape, seed, low, high, dtype)

    def randn(self, shape, seed: int = 0, mean: float = 0.0, std: float = 1.0, dtype=DType.float32):
        """Seeded normal random input of ``shape``."""
        from .hl_ops import creation
        return creation.randn(self, shape, seed, mean, std, dtype)

    def tril(self, rows, cols=None, diagonal: int = 0, dtype=DType.float32):
        """Lower-triangular mask of ones (``col - row <= diagonal``)."""
        from .hl_ops import creation
        return creation.tril_mask(self, rows, cols, diagonal, dtype)

    def triu(self, rows, cols=None, diagonal: int = 0, dtype=DType.float32):
        """Upper-triangular mask of ones (``col - row >= diagonal``)."""
        from .hl_ops import creation
        return creation.triu_mask(self, rows, cols, diagonal, dtype)
