"""Samplers with ``torch.utils.data`` semantics: which sample indices a :class:`~luminal.data.DataLoader` visits,
in which order, and how they group into batches.

:class:`SequentialSampler`, :class:`RandomSampler` (with or without replacement, ``num_samples``),
:class:`SubsetRandomSampler`, :class:`WeightedRandomSampler` and :class:`BatchSampler`. Random samplers draw
from ``generator=`` (an ``lm.Generator`` or a ``numpy.random.Generator``) or from a seed (by default one drawn
from ``lm.manual_seed``'s default generator, so seeding makes the order reproducible, as in torch); they give a new order at every iteration, so
two epochs differ, and two samplers built with the same seed give the same sequence of epochs.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]


def _rng(generator, seed):
    if generator is not None and seed is not None:
        raise ValueError("pass generator or seed, not both")
    if generator is not None:
        from ..rng import Generator
        if isinstance(generator, Generator):  # an lm.Generator (torch.Generator's role): its numpy stream
            return generator._np
        if not isinstance(generator, np.random.Generator):
            raise TypeError(f"generator must be an lm.Generator or a numpy.random.Generator, got "
                            f"{type(generator).__name__}")
        return generator
    if seed is None:  # as torch's samplers: from the default generator, so lm.manual_seed fixes the order
        from ..rng import draw
        seed = int(draw(None, "integers", 0, 2 ** 63 - 1))
    return np.random.default_rng(seed)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class Sampler:
    """Base class: ``__iter__`` yields sample indices (``__len__`` when the count is known)."""

    def __iter__(self):
        raise NotImplementedError

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} has no length")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices at every iteration; with ``replacement=True``, ``num_samples`` indices
    drawn uniformly with replacement (``num_samples`` defaults to ``len(data_source)``; without replacement a
    larger ``num_samples`` chains permutations, as PyTorch does)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None,
                 seed: int | None = None):
        self.data_source = data_source
        self.replacement = bool(replacement)
        self._num_samples = None if num_samples is None else _positive_int("num_samples", num_samples)
        self.generator = _rng(generator, seed)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, k = len(self.data_source), self.num_samples
        if n == 0:
            return iter(())
        if self.replacement:
            return iter(self.generator.integers(0, n, k).tolist())
        parts = [self.generator.permutation(n) for _ in range(-(-k // n))]
        return iter(np.concatenate(parts)[:k].tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order at every iteration."""

    def __init__(self, indices, generator=None, seed: int | None = None):
        self.indices = list(indices)
        self.generator = _rng(generator, seed)

    def __iter__(self):
        return iter([self.indices[i] for i in self.generator.permutation(len(self.indices))])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices ``0..len(weights)-1`` drawn with probabilities proportional to ``weights`` (with
    or without replacement)."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None, seed: int | None = None):
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be a non-empty sequence of finite non-negative numbers with a positive sum")
        self.weights = w
        self.num_samples = _positive_int("num_samples", num_samples)
        self.replacement = bool(replacement)
        if not self.replacement and self.num_samples > int(np.count_nonzero(w)):
            raise ValueError(f"num_samples={self.num_samples} without replacement needs as many non-zero weights, "
                             f"got {int(np.count_nonzero(w))}")
        self.generator = _rng(generator, seed)

    def __iter__(self):
        p = self.weights / self.weights.sum()
        return iter(self.generator.choice(len(p), self.num_samples, replace=self.replacement, p=p).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size`` (the last one shorter unless ``drop_last``)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        self.sampler = sampler
        self.batch_size = _positive_int("batch_size", batch_size)
        self.drop_last = bool(drop_last)

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(int(i))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
