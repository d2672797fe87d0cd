"""Data loading with ``torch.utils.data`` semantics over numpy arrays.

* :class:`Dataset` (abstract), :class:`TensorDataset`, :class:`Subset`, :class:`ConcatDataset` and
  :func:`random_split` (:mod:`luminal.data.dataset`);
* :func:`default_collate` and :class:`DataLoader`: seeded per-epoch shuffling, ``drop_last``, a fancy-indexing
  fast path for ``TensorDataset``, background thread or process workers (:mod:`luminal.data.loader`).

See docs/data.md.
"""

from .dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from .loader import DataLoader, default_collate

__all__ = ["Dataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "DataLoader", "default_collate"]
