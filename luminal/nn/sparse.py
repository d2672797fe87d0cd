"""``Embedding``: a lookup table read with ``index_select`` (a ``Gather``, never a one-hot product).

Out-of-range ids raise ``IndexError`` at ``execute()`` (both backends check Gather indices).
"""

from __future__ import annotations

import numpy as np

from ..dtype import DType
from ..graph import GraphError
from ..hl_ops.binary import _grad_rule
from ..module import Module, Parameter, bind, check_graph_tensor
from . import init

__all__ = ["Embedding", "embedding"]


def _padding_idx(padding_idx, num_embeddings: int):
    if padding_idx is None:
        return None
    padding_idx = int(padding_idx)
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"padding_idx {padding_idx} must be within num_embeddings ({num_embeddings})")
    return padding_idx + num_embeddings if padding_idx < 0 else padding_idx


def embedding(ids, weight, padding_idx=None):
    """``torch.nn.functional.embedding``: rows of ``weight`` (N, D) for integer ``ids`` of any shape -> ids.shape + (D,).

    ``padding_idx`` only matters for gradients, as in PyTorch: the ``padding_idx`` row gets none (the gradient
    rule ``"embedding"`` of :mod:`luminal.training.autograd`)."""
    ids = check_graph_tensor(ids, "embedding")
    if ids.dtype not in (DType.int32, DType.int64):
        raise TypeError(f"embedding: ids must be int32/int64, got {ids.dtype}")
    if weight.ndim != 2:
        raise GraphError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"{[str(d) for d in weight.dims]}")
    out = weight.index_select(0, ids)
    if padding_idx is not None and weight.dtype.is_float:
        _grad_rule(out, "embedding", (weight, ids), _padding_idx(padding_idx, weight.dims[0].to_int() or 1 << 62))
    return out


class Embedding(Module):
    """``torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx)``: ``weight`` ~ N(0, 1) (seeded by
    :mod:`luminal.nn.init`), the ``padding_idx`` row zeroed.

    ``reverse(x)`` is ``x @ weight.T`` (logits over the vocabulary for a tied output head; the seed's option).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, _weight=None,
                 dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = _padding_idx(padding_idx, num_embeddings)
        if _weight is None:
            self.weight = Parameter(np.zeros((num_embeddings, embedding_dim)), dtype)
            self.reset_parameters()
        else:
            w = np.asarray(_weight)
            if w.shape != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {w.shape}, expected "
                                 f"{(num_embeddings, embedding_dim)}")
            self.weight = Parameter(w, dtype)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            data = self.weight.data.copy()
            data[self.padding_idx] = 0
            self.weight.copy_(data)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None) -> "Embedding":
        """``torch.nn.Embedding.from_pretrained`` (the rows are used as given; ``freeze`` sets ``requires_grad``)."""
        w = np.asarray(embeddings.detach().cpu().numpy() if hasattr(embeddings, "detach") else embeddings)
        if w.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        module = cls(w.shape[0], w.shape[1], padding_idx, _weight=w)
        module.weight.requires_grad = not freeze
        return module

    def forward(self, ids):
        ids = check_graph_tensor(ids, "Embedding")
        return embedding(ids, bind(self.weight, ids), self.padding_idx)

    def reverse(self, x):
        """``x @ weight.T``: project hidden states back to ``num_embeddings`` logits (weight tying)."""
        x = check_graph_tensor(x, "Embedding.reverse")
        return x @ bind(self.weight, x).T

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
