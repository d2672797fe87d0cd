"""Map-style datasets with ``torch.utils.data`` semantics, holding numpy arrays.

A dataset is anything with ``__len__`` and ``__getitem__(i)`` for ``0 <= i < len``; :class:`Dataset` is the
abstract base. :class:`TensorDataset` wraps arrays sharing their first dimension (and lets
:class:`~luminal.data.DataLoader` gather a whole batch with one fancy index per array), :class:`Subset` picks
indices, :func:`random_split` splits by counts or fractions, :class:`ConcatDataset` chains datasets.
"""

from __future__ import annotations

import bisect
import math
import numbers
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split"]


class Dataset(ABC):
    """Abstract map-style dataset: subclasses implement ``__getitem__(index)`` and ``__len__()``.

    ``a + b`` concatenates two datasets into a :class:`ConcatDataset`, as in PyTorch.
    """

    @abstractmethod
    def __getitem__(self, index):
        """The sample at ``index`` (``0 <= index < len(self)``)."""

    @abstractmethod
    def __len__(self) -> int:
        """The number of samples."""

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        """``ConcatDataset([self, other])``."""
        return ConcatDataset([self, other])


class IterableDataset:
    """A dataset that yields its samples from ``__iter__`` (``torch.utils.data.IterableDataset``): a stream, a
    generator, a file read line by line. :class:`~luminal.data.DataLoader` batches it in iteration order
    (``num_workers=0``; no shuffle or sampler: the dataset decides the order)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class TensorDataset(Dataset):
    """Samples are tuples ``(arrays[0][i], arrays[1][i], ...)`` of arrays sharing their first dimension.

    Args:
        *arrays: numpy arrays or array-likes (converted with :func:`numpy.asarray`, no copy for arrays), each
            with at least one dimension and the same length along the first.

    Raises:
        ValueError: no arrays, a 0-d array, or first dimensions that differ (the message lists them).
    """

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        converted = []
        for i, a in enumerate(arrays):
            a = np.asarray(a)
            if a.ndim == 0:
                raise ValueError(f"TensorDataset: array {i} is a 0-d scalar; every array needs a first (sample) "
                                 "dimension")
            converted.append(a)
        lengths = [a.shape[0] for a in converted]
        if len(set(lengths)) != 1:
            detail = ", ".join(f"array {i}: {n}" for i, n in enumerate(lengths))
            raise ValueError(f"TensorDataset: all arrays must have the same first dimension (number of samples), "
                             f"got {detail}")
        #: The wrapped arrays (``torch``'s ``tensors``).
        self.arrays: tuple[np.ndarray, ...] = tuple(converted)

    @property
    def tensors(self) -> tuple[np.ndarray, ...]:
        """Alias of :attr:`arrays` (PyTorch's attribute name)."""
        return self.arrays

    def __getitem__(self, index):
        """``tuple(a[index] for a in arrays)``; any numpy index works (an int, a slice, an index array)."""
        return tuple(a[index] for a in self.arrays)

    def __len__(self) -> int:
        """The shared first dimension."""
        return int(self.arrays[0].shape[0])

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.arrays)
        return f"TensorDataset({shapes})"


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order: ``subset[i] == dataset[indices[i]]``.

    Args:
        dataset: the dataset to index.
        indices: a sequence (list, tuple, range, 1-d integer array) of indices into ``dataset``.
    """

    def __init__(self, dataset, indices):
        self.dataset = dataset
        if isinstance(indices, np.ndarray) and indices.ndim != 1:
            raise ValueError(f"Subset: indices must be one-dimensional, got shape {indices.shape}")
        self.indices = indices

    def __getitem__(self, idx):
        """``dataset[indices[idx]]``; a list of positions gives a list of samples."""
        if isinstance(idx, list):
            return [self.dataset[self.indices[i]] for i in idx]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        """``len(indices)``."""
        return len(self.indices)

    def __repr__(self) -> str:
        return f"Subset({type(self.dataset).__name__}, {len(self)} samples)"


class ConcatDataset(Dataset):
    """Several datasets one after another: indices ``0 .. len(d0)-1`` are ``d0``, then ``d1`` and so on.

    Negative indices count from the end. ``cumulative_sizes[k]`` is the total length of the first ``k + 1``
    datasets.

    Args:
        datasets: a non-empty iterable of datasets.
    """

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        """The sum of the datasets' lengths."""
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        """The sample at ``idx`` (negative counts from the end); ``IndexError`` when out of range."""
        n = len(self)
        if not isinstance(idx, numbers.Integral):
            raise TypeError(f"ConcatDataset indices must be integers, got {type(idx).__name__}")
        idx = int(idx)
        if idx < 0:
            if -idx > n:
                raise IndexError(f"ConcatDataset index {idx} is out of range for {n} samples")
            idx += n
        if idx >= n:
            raise IndexError(f"ConcatDataset index {idx} is out of range for {n} samples")
        k = bisect.bisect_right(self.cumulative_sizes, idx)
        start = 0 if k == 0 else self.cumulative_sizes[k - 1]
        return self.datasets[k][idx - start]

    def __repr__(self) -> str:
        return f"ConcatDataset({len(self.datasets)} datasets, {len(self)} samples)"


def _split_lengths(n: int, lengths: Sequence) -> list[int]:
    """PyTorch's rule: fractions summing to 1 become floor(n * f), the remainder dealt round-robin."""
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: lengths must not be empty")
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:
        out = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"random_split: fraction at index {i} is {frac}, not between 0 and 1")
            out.append(int(math.floor(n * frac)))
        for i in range(n - sum(out)):
            out[i % len(out)] += 1
        for i, length in enumerate(out):
            if length == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this results in an empty "
                              "dataset", stacklevel=3)
        return out
    for i, length in enumerate(lengths):
        if not isinstance(length, numbers.Integral) or isinstance(length, bool) or length < 0:
            raise ValueError(f"random_split: lengths must be non-negative integers or fractions summing to 1, "
                             f"got {length!r} at index {i}")
    out = [int(v) for v in lengths]
    if sum(out) != n:
        raise ValueError(f"random_split: the lengths {out} sum to {sum(out)}, not to the dataset length {n}")
    return out


def random_split(dataset, lengths: Sequence, seed: int | None = None,
                 generator: np.random.Generator | None = None) -> list[Subset]:
    """Randomly split ``dataset`` into non-overlapping :class:`Subset` s of the given lengths.

    Args:
        dataset: the dataset to split.
        lengths: integer lengths summing to ``len(dataset)``, or fractions summing to 1 (PyTorch's rule:
            each split gets ``floor(len * fraction)`` and the remaining samples are dealt one at a time to
            the splits in order).
        seed: seeds ``numpy.random.default_rng(seed)``, whose ``permutation(len(dataset))`` is cut into the
            splits in order. ``None`` (and no ``generator``) gives a fresh, unpredictable split.
        generator: a ``numpy.random.Generator`` to draw the permutation from instead of ``seed``.

    Returns:
        One :class:`Subset` per length; their ``indices`` are python lists.
    """
    if seed is not None and generator is not None:
        raise ValueError("random_split: pass seed or generator, not both")
    from ..rng import Generator
    if isinstance(generator, Generator):  # an lm.Generator (torch.Generator's role): its numpy stream
        generator = generator._np
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError(f"random_split: generator must be an lm.Generator or a numpy.random.Generator, got "
                        f"{type(generator).__name__}")
    n = len(dataset)
    sizes = _split_lengths(n, lengths)
    if generator is None and seed is None:  # torch draws from its default generator: lm.manual_seed fixes it
        from ..rng import draw
        seed = int(draw(None, "integers", 0, 2 ** 63 - 1))
    rng = generator if generator is not None else np.random.default_rng(seed)
    perm = rng.permutation(n)
    out, offset = [], 0
    for size in sizes:
        out.append(Subset(dataset, perm[offset:offset + size].tolist()))
        offset += size
    return out
