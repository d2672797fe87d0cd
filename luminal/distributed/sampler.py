"""Sharding each epoch's samples over the ranks (``torch.utils.data.DistributedSampler`` semantics)."""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["DistributedSampler", "DistributedDataLoader"]


def _int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class DistributedSampler:
    """The sample indices of one rank, epoch by epoch.

    Every rank orders the ``n`` samples the same way (``shuffle``: the permutation
    ``numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(epoch,))).permutation(n)``, the same rule
    as :class:`luminal.data.DataLoader`, so ``seed`` must be equal on all ranks), then:

    * ``drop_last=False``: pads the order by repeating its head until it divides by ``num_replicas`` (each rank
      gets ``ceil(n / num_replicas)`` samples; a few samples are seen twice per epoch);
    * ``drop_last=True``: drops the tail (each rank gets ``floor(n / num_replicas)``);

    and rank ``r`` takes positions ``r, r + num_replicas, ...``. The shards of one epoch are disjoint (up to the
    padding) and their union is every sample (up to the dropped tail). As in PyTorch, call :meth:`set_epoch`
    before each epoch for a new order (the :class:`~luminal.training.Trainer` does).

    Args:
        dataset: anything with ``__len__`` (or an int: the number of samples).
        num_replicas, rank: default to ``MPI.COMM_WORLD``'s size and rank.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from ._mpi import world
            comm = world()
            num_replicas = comm.Get_size() if num_replicas is None else num_replicas
            rank = comm.Get_rank() if rank is None else rank
        self.num_replicas = _int("DistributedSampler: num_replicas", num_replicas, 1)
        self.rank = _int("DistributedSampler: rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"DistributedSampler: rank {self.rank} is out of range for {self.num_replicas} replicas "
                             f"(expected 0 <= rank < num_replicas)")
        self.n = _int("DistributedSampler: dataset length", dataset if isinstance(dataset, numbers.Integral)
                      else len(dataset), 0)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.seed = _int("DistributedSampler: seed", seed, 0)
        if self.drop_last and self.n < self.num_replicas:
            raise ValueError(f"DistributedSampler: {self.n} samples cannot give each of {self.num_replicas} ranks one "
                             "sample with drop_last=True")
        if self.drop_last and self.n % self.num_replicas:
            self.num_samples = math.ceil((self.n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(self.n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order for the next :meth:`indices` / iteration."""
        self.epoch = _int("DistributedSampler: epoch", epoch, 0)

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The whole (padded or truncated) order of ``epoch`` shared by all ranks, ``total_size`` indices."""
        epoch = self.epoch if epoch is None else epoch
        if self.shuffle:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(epoch,)))
            idx = rng.permutation(self.n).astype(np.int64)
        else:
            idx = np.arange(self.n, dtype=np.int64)
        if self.total_size > self.n:  # pad with the head, repeated as often as needed
            idx = np.concatenate([idx, np.resize(idx, self.total_size - self.n)]) if self.n else idx
        return idx[:self.total_size]

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's sample indices for ``epoch`` (default: the current one), ``num_samples`` of them."""
        return self.order(epoch)[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        """This rank's indices of the current epoch, as Python ints."""
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        """Samples per rank and epoch (``num_samples``)."""
        return self.num_samples

    def __repr__(self) -> str:
        return (f"DistributedSampler(n={self.n}, rank={self.rank}/{self.num_replicas}, shuffle={self.shuffle}, "
                f"seed={self.seed}, drop_last={self.drop_last})")


class DistributedDataLoader:
    """A :class:`luminal.data.DataLoader` over this rank's shard of each epoch (per-rank batches).

    ``batch_size`` is the per-rank batch (the global batch is ``batch_size * num_replicas``); or give
    ``global_batch_size``, which must divide by the number of ranks. ``shuffle``/``seed``/``drop_last`` go to the
    :class:`DistributedSampler` (``drop_last`` also drops a last partial batch, so every step is full); other
    keyword arguments (``num_workers``, ``collate_fn``, ``worker_type``...) go to the ``DataLoader`` that loads
    the shard (in the sampler's order). All ranks see the same number of batches per epoch.
    """

    def __init__(self, dataset, batch_size: int | None = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, global_batch_size: int | None = None, num_replicas: int | None = None,
                 rank: int | None = None, sampler: DistributedSampler | None = None, **loader_kwargs):
        if sampler is None:
            sampler = DistributedSampler(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        elif not isinstance(sampler, DistributedSampler):
            raise TypeError(f"DistributedDataLoader: sampler must be a DistributedSampler, got "
                            f"{type(sampler).__name__}")
        self.sampler = sampler
        if (batch_size is None) == (global_batch_size is None):
            raise ValueError("DistributedDataLoader: give exactly one of batch_size (per rank) and global_batch_size")
        if global_batch_size is not None:
            g = _int("DistributedDataLoader: global_batch_size", global_batch_size, 1)
            if g % sampler.num_replicas:
                raise ValueError(f"DistributedDataLoader: global_batch_size {g} is not divisible by the "
                                 f"{sampler.num_replicas} ranks (each rank runs global_batch_size / ranks samples); "
                                 f"use a multiple of {sampler.num_replicas}, e.g. "
                                 f"{(g // sampler.num_replicas + 1) * sampler.num_replicas}")
            batch_size = g // sampler.num_replicas
        self.batch_size = _int("DistributedDataLoader: batch_size", batch_size, 1)
        if "generator" in loader_kwargs:
            raise TypeError("DistributedDataLoader: generator= is not supported (every rank must draw the same order: "
                            "pass seed=)")
        from ..data import DataLoader, Subset
        DataLoader(Subset(dataset, []), batch_size=1, **loader_kwargs)  # the loader options' errors, now
        self.dataset = dataset
        self.drop_last = bool(drop_last)
        self.loader_kwargs = loader_kwargs
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """The epoch the next iteration will use."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (sets the sampler's epoch too)."""
        self._epoch = _int("DistributedDataLoader: epoch", epoch, 0)
        self.sampler.set_epoch(self._epoch)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        """One epoch of this rank's batches. A generator: the epoch starts (and the counter moves) at the first
        batch, so an iterator created and dropped unused (as some progress bars do) skips no epoch."""
        from ..data import DataLoader, Subset

        self.sampler.set_epoch(self._epoch)
        shard = Subset(self.dataset, self.sampler.indices())
        self._epoch += 1
        yield from DataLoader(shard, batch_size=self.batch_size, shuffle=False, drop_last=self.drop_last,
                              **self.loader_kwargs)

    def __repr__(self) -> str:
        return f"DistributedDataLoader({self.sampler!r}, batch_size={self.batch_size}, drop_last={self.drop_last})"
