"""Samplers, batch samplers, ``batch_size=None``, IterableDataset and PyTorch's extra DataLoader arguments
(luminal.data) against ``torch.utils.data`` where the result is deterministic, and against the sampling
definition where it is random (permutations, ranges, weighted frequencies with a stated tolerance)."""

import threading

import numpy as np
import pytest
import torch.utils.data as tud

from luminal.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler,
                          SubsetRandomSampler, TensorDataset, WeightedRandomSampler)

X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10, dtype=np.int64)


def _batches(loader):
    return [tuple(np.asarray(a) for a in b) for b in loader]


def test_sequential_and_batch_samplers_match_torch():
    ds = TensorDataset(X, Y)
    assert list(SequentialSampler(ds)) == list(tud.SequentialSampler(range(10)))
    for bs, drop in [(3, False), (3, True), (5, False), (11, False)]:
        ours = list(BatchSampler(SequentialSampler(ds), bs, drop))
        theirs = list(tud.BatchSampler(tud.SequentialSampler(range(10)), bs, drop))
        assert ours == theirs
        assert len(BatchSampler(SequentialSampler(ds), bs, drop)) == len(theirs)


def test_loader_with_sampler_and_batch_sampler_matches_torch_batches():
    ds = TensorDataset(X, Y)
    order = [7, 2, 9, 0, 4, 4, 1]
    ours = _batches(DataLoader(ds, batch_size=3, sampler=order))
    theirs = [tuple(t.numpy() for t in b) for b in tud.DataLoader(tud.TensorDataset(*map(__import__("torch").from_numpy, (X, Y))), batch_size=3, sampler=order)]
    assert len(ours) == len(theirs) == len(DataLoader(ds, batch_size=3, sampler=order))
    for a, b in zip(ours, theirs):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    groups = [[3, 1], [0, 9, 8], [5]]
    got = _batches(DataLoader(ds, batch_sampler=groups))
    assert [list(b[1]) for b in got] == groups
    assert len(DataLoader(ds, batch_sampler=groups)) == 3


def test_batch_size_none_yields_samples_unbatched():
    ds = TensorDataset(X, Y)
    items = list(DataLoader(ds, batch_size=None))
    assert len(items) == 10
    np.testing.assert_array_equal(items[3][0], X[3])
    assert int(items[3][1]) == 3


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield np.full(2, i, np.float32), i


def test_iterable_dataset_batches_in_iteration_order_like_torch():
    import torch

    class TStream(tud.IterableDataset):
        def __iter__(self):
            for i in range(7):
                yield torch.full((2,), float(i)), i

    for bs, drop in [(3, False), (3, True), (None, False)]:
        ours = list(DataLoader(Stream(7), batch_size=bs, drop_last=drop))
        theirs = list(tud.DataLoader(TStream(), batch_size=bs, drop_last=drop))
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(np.asarray(a[0]), b[0].numpy())
            np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))


def test_random_samplers_follow_their_definitions():
    ds = TensorDataset(X, Y)
    a, b = list(RandomSampler(ds, seed=3)), list(RandomSampler(ds, seed=3))
    assert sorted(a) == list(range(10)) and a == b  # a permutation, reproducible by seed
    s = RandomSampler(ds, seed=3)
    assert list(s) != list(s)  # a new order every iteration (fixed seed: deterministic)
    draws = list(RandomSampler(ds, replacement=True, num_samples=500, seed=1))
    assert len(draws) == 500 and min(draws) >= 0 and max(draws) <= 9 and len(set(draws)) == 10
    chained = list(RandomSampler(ds, num_samples=25, seed=2))
    assert len(chained) == 25 and sorted(chained[:10]) == list(range(10)) and sorted(chained[10:20]) == list(range(10))
    sub = list(SubsetRandomSampler([5, 6, 7], seed=0))
    assert sorted(sub) == [5, 6, 7]
    w = list(WeightedRandomSampler([0.0, 1.0, 3.0], 40000, seed=4))
    counts = np.bincount(w, minlength=3) / 40000
    assert counts[0] == 0.0
    np.testing.assert_allclose(counts[1:], [0.25, 0.75], atol=0.01)  # 0.01 is > 4 sigma for 40000 draws
    nr = list(WeightedRandomSampler([1.0, 2.0, 0.0, 5.0], 3, replacement=False, seed=5))
    assert sorted(nr) == [0, 1, 3]


def test_worker_init_fn_runs_once_per_worker_and_torch_arguments_are_accepted():
    seen, lock = [], threading.Lock()

    def init(wid):
        with lock:
            seen.append(wid)
    loader = DataLoader(TensorDataset(X, Y), batch_size=2, num_workers=2, worker_init_fn=init, pin_memory=True,
                        persistent_workers=True, timeout=5, prefetch_factor=2)
    got = _batches(loader)
    assert sorted(seen) == [0, 1]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in got]), Y)


def test_sampler_argument_errors():
    ds = TensorDataset(X, Y)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler is mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=4)
    with pytest.raises(ValueError, match="IterableDataset decides its own order"):
        DataLoader(Stream(3), shuffle=True)
    with pytest.raises(ValueError, match="num_workers=0"):
        DataLoader(Stream(3), num_workers=2)
    with pytest.raises(ValueError, match="weights"):
        WeightedRandomSampler([0.0, -1.0], 3)
    with pytest.raises(ValueError, match="without replacement"):
        WeightedRandomSampler([1.0, 0.0], 2, replacement=False)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        BatchSampler([0, 1], 0, False)
