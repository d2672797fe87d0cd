"""Data loading with ``torch.utils.data`` semantics over numpy arrays.

* :class:`Dataset` (abstract), :class:`TensorDataset`, :class:`Subset`, :class:`ConcatDataset` and
  :func:`random_split` (:mod:`luminal.data.dataset`);
* :func:`default_collate` and :class:`DataLoader`: seeded per-epoch shuffling, ``drop_last``, a fancy-indexing
  fast path for ``TensorDataset``, background thread or process workers (:mod:`luminal.data.loader`).

See docs/data.md.
"""

from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .loader import DataLoader, default_collate
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "DataLoader",
           "default_collate", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]
