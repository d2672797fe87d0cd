"""luminal.data: datasets, default_collate and DataLoader, against numpy / hand-derived expectations and
torch.utils.data where the semantics compare (lengths, random_split sizes, collation dtypes).

torch is imported inside the tests that use it, so worker processes that import this module (to unpickle
the datasets defined here) start quickly.
"""

import collections
import multiprocessing
import pickle
import threading
import time
import warnings

import numpy as np
import pytest

from luminal.data import (ConcatDataset, DataLoader, Dataset, Subset, TensorDataset, default_collate,
                          random_split)


# ---------------------------------------------------------------------------- module-level datasets
class SquaresDataset(Dataset):
    """Sample i is ``{"x": [i, i**2] as float32, "id": i}``; optionally fails at ``fail_at``, sleeps a bit."""

    def __init__(self, n, fail_at=None, delay=0.0, seed=0):
        self.n, self.fail_at, self.delay = n, fail_at, delay
        # per-sample delays, fixed by the seed, so workers finish out of order
        self.delays = np.random.default_rng(seed).uniform(0, delay, n) if delay else np.zeros(n)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"bad sample {i}")
        if self.delays[i]:
            time.sleep(self.delays[i])
        return {"x": np.array([i, i * i], dtype=np.float32), "id": i}


class Unpicklable(SquaresDataset):
    def __init__(self, n):
        super().__init__(n)
        self.transform = lambda v: v  # lambdas cannot be pickled


class CustomError(Exception):
    pass


class RaisesCustom(SquaresDataset):
    def __getitem__(self, i):
        if i == 5:
            raise CustomError("custom failure at 5")
        return super().__getitem__(i)


def make_xy(n=23, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 10, n)


def epoch_perm(seed, epoch, n):
    """The documented shuffle order of epoch ``epoch``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(epoch,))).permutation(n)


def worker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("luminal-DataLoader-worker")]


def wait_until(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert type(x) is type(y)
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
                assert np.asarray(x[k]).dtype == np.asarray(y[k]).dtype
        else:
            assert len(x) == len(y)
            for u, v in zip(x, y):
                np.testing.assert_array_equal(u, v)
                assert u.dtype == v.dtype


# ---------------------------------------------------------------------------- datasets
def test_tensor_dataset_indexing_and_length():
    x, y = make_xy()
    ds = TensorDataset(x, y.tolist())  # array-likes are converted
    assert len(ds) == 23
    xi, yi = ds[4]
    np.testing.assert_array_equal(xi, x[4])
    assert yi == y[4]
    xs, ys = ds[np.array([3, 1])]
    np.testing.assert_array_equal(xs, x[[3, 1]])
    np.testing.assert_array_equal(ys, y[[3, 1]])
    assert ds.arrays[0] is x and ds.tensors is ds.arrays  # no copy of an ndarray


def test_tensor_dataset_errors_name_the_lengths():
    with pytest.raises(ValueError, match=r"array 0: 5, array 1: 4"):
        TensorDataset(np.zeros((5, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(np.float32(1.0))


def test_dataset_is_abstract_and_add_concatenates():
    with pytest.raises(TypeError):
        Dataset()
    a, b = SquaresDataset(3), SquaresDataset(4)
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 7
    assert c[3]["id"] == 0 and c[6]["id"] == 3


def test_subset_and_concat_match_torch():
    import torch.utils.data as tud

    x, y = make_xy(10)
    base = TensorDataset(x, y)
    sub = Subset(base, [9, 2, 2, 0])
    assert len(sub) == 4
    np.testing.assert_array_equal(sub[1][0], x[2])
    assert [s[1] for s in sub[[0, 3]]] == [y[9], y[0]]

    parts = [list(range(3)), list(range(10, 15)), [], list(range(20, 22))]
    ours, theirs = ConcatDataset(parts), tud.ConcatDataset(parts)
    assert len(ours) == len(theirs) == 10
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    for i in range(-10, 10):
        assert ours[i] == theirs[i]
    for bad in (10, -11):
        with pytest.raises(IndexError):
            ours[bad]
    with pytest.raises(ValueError, match="empty"):
        ConcatDataset([])


@pytest.mark.parametrize("n,lengths", [(10, [0.5, 0.5]), (10, [0.3, 0.3, 0.4]), (11, [0.7, 0.2, 0.1]),
                                       (7, [0.33, 0.33, 0.34]), (13, [0.25] * 4), (9, [4, 5]), (5, [1.0]),
                                       (100, [0.8, 0.1, 0.1]), (3, [0.1, 0.9]), (2, [0.1, 0.1, 0.8])])
def test_random_split_lengths_match_torch_and_partition(n, lengths):
    import torch
    import torch.utils.data as tud

    ds = TensorDataset(np.arange(n))
    with pytest.warns(UserWarning, match="index 1 is 0") if n == 2 else _no_warning():
        parts = random_split(ds, lengths, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about the empty split too
        theirs = tud.random_split(range(n), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [len(t) for t in theirs]
    flat = [int(p[i][0]) for p in parts for i in range(len(p))]
    assert sorted(flat) == list(range(n))  # disjoint and covering
    # hand-derived: consecutive slices of default_rng(seed).permutation(n)
    perm = np.random.default_rng(3).permutation(n)
    assert flat == perm.tolist()
    again = random_split(ds, lengths, seed=3) if n != 2 else parts
    assert [p.indices for p in again] == [p.indices for p in parts]


class _no_warning:
    def __enter__(self):
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def test_random_split_errors_and_generator():
    ds = TensorDataset(np.arange(10))
    with pytest.raises(ValueError, match="sum to 9"):
        random_split(ds, [4, 5])
    with pytest.raises(ValueError, match="not between 0 and 1"):
        random_split(ds, [1.5, -0.5])
    with pytest.raises(ValueError, match="seed or generator"):
        random_split(ds, [5, 5], seed=1, generator=np.random.default_rng(1))
    a = random_split(ds, [3, 7], generator=np.random.default_rng(42))
    assert a[0].indices + a[1].indices == np.random.default_rng(42).permutation(10).tolist()


# ---------------------------------------------------------------------------- default_collate
def test_default_collate_matches_torch_dtypes_and_values():
    import torch
    from torch.utils.data import default_collate as torch_collate

    to_np = {torch.float64: np.float64, torch.int64: np.int64, torch.bool: np.bool_, torch.float32: np.float32,
             torch.int32: np.int32, torch.float16: np.float16, torch.uint8: np.uint8}
    cases = [
        [1.5, 2.0, -3.25],
        [1, 2, 3],
        [True, False, True],
        [np.float32(1.5), np.float32(2.5)],
        [np.array([1, 2], np.int32), np.array([3, 4], np.int32)],
        [np.ones((2, 3), np.float16), np.zeros((2, 3), np.float16)],
        [np.arange(4, dtype=np.uint8).reshape(2, 2)] * 3,
    ]
    for samples in cases:
        ours, theirs = default_collate(samples), torch_collate(samples)
        assert ours.dtype == to_np[theirs.dtype], samples
        np.testing.assert_array_equal(ours, theirs.numpy())


def test_default_collate_recurses_like_torch():
    from torch.utils.data import default_collate as torch_collate

    samples = [{"img": np.full((2, 2), i, np.float32), "label": i, "meta": (i * 0.5, f"s{i}")} for i in range(3)]
    ours, theirs = default_collate(samples), torch_collate(samples)
    assert set(ours) == set(theirs) == {"img", "label", "meta"}
    np.testing.assert_array_equal(ours["img"], theirs["img"].numpy())
    np.testing.assert_array_equal(ours["label"], theirs["label"].numpy())
    assert ours["label"].dtype == np.int64
    assert isinstance(ours["meta"], tuple)  # torch gives a list for tuples; luminal keeps the tuple
    np.testing.assert_array_equal(ours["meta"][0], theirs["meta"][0].numpy())
    assert ours["meta"][1] == list(theirs["meta"][1]) == ["s0", "s1", "s2"]

    lists = default_collate([[1, 2.5], [3, 4.5]])
    assert isinstance(lists, list)
    np.testing.assert_array_equal(lists[0], [1, 3])
    np.testing.assert_array_equal(lists[1], [2.5, 4.5])
    assert lists[0].dtype == np.int64 and lists[1].dtype == np.float64

    Point = collections.namedtuple("Point", "x y")
    p = default_collate([Point(1, np.zeros(2)), Point(2, np.ones(2))])
    assert type(p) is Point
    np.testing.assert_array_equal(p.x, [1, 2])
    np.testing.assert_array_equal(p.y, [[0, 0], [1, 1]])

    mixed = default_collate([1, 2.5, 3])  # any float makes the batch float64
    assert mixed.dtype == np.float64 and mixed.tolist() == [1.0, 2.5, 3.0]


def test_default_collate_errors():
    with pytest.raises(ValueError, match=r"different shapes \[\(2,\), \(3,\)\]"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError, match="same number of elements"):
        default_collate([(1, 2), (3,)])
    with pytest.raises(ValueError, match="empty"):
        default_collate([])
    with pytest.raises(TypeError, match="NoneType"):
        default_collate([None, None])


# ---------------------------------------------------------------------------- DataLoader: order and lengths
@pytest.mark.parametrize("n", [0, 1, 7, 16, 23])
@pytest.mark.parametrize("bs", [1, 4, 8, 30])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_torch(n, bs, drop_last):
    import torch.utils.data as tud

    ours = DataLoader(TensorDataset(np.arange(n)) if n else SquaresDataset(0), batch_size=bs, drop_last=drop_last)
    theirs = tud.DataLoader(range(n), batch_size=bs, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert len(list(ours)) == len(ours)


def test_sequential_batches_are_consecutive_slices():
    x, y = make_xy(23)
    for drop_last in (False, True):
        batches = list(DataLoader(TensorDataset(x, y), batch_size=5, drop_last=drop_last))
        assert len(batches) == (4 if drop_last else 5)
        for k, (xb, yb) in enumerate(batches):
            np.testing.assert_array_equal(xb, x[5 * k:5 * k + 5])
            np.testing.assert_array_equal(yb, y[5 * k:5 * k + 5])
            assert xb.dtype == np.float32 and yb.dtype == y.dtype
        assert batches[-1][0].shape[0] == (5 if drop_last else 3)


def test_sequential_batches_match_torch_dataloader():
    import torch
    import torch.utils.data as tud

    x, y = make_xy(19)
    ours = list(DataLoader(TensorDataset(x, y), batch_size=4))
    theirs = list(tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=4))
    assert len(ours) == len(theirs)
    for (a, b), (c, d) in zip(ours, theirs):
        np.testing.assert_array_equal(a, c.numpy())
        np.testing.assert_array_equal(b, d.numpy())


def test_shuffle_is_seeded_per_epoch():
    n = 37
    ds = TensorDataset(np.arange(n))
    a = DataLoader(ds, batch_size=8, shuffle=True, seed=11)
    b = DataLoader(ds, batch_size=8, shuffle=True, seed=11)
    c = DataLoader(ds, batch_size=8, shuffle=True, seed=12)
    epochs_a, epochs_b, epochs_c = [], [], []
    for e in range(3):
        epochs_a.append(np.concatenate([t[0] for t in a]))
        epochs_b.append(np.concatenate([t[0] for t in b]))
        epochs_c.append(np.concatenate([t[0] for t in c]))
        np.testing.assert_array_equal(epochs_a[e], epoch_perm(11, e, n))  # the documented order
        np.testing.assert_array_equal(epochs_a[e], epochs_b[e])  # same seed, same epoch: identical
        assert sorted(epochs_a[e].tolist()) == list(range(n))  # each sample exactly once
        assert not np.array_equal(epochs_a[e], epochs_c[e])
    assert not np.array_equal(epochs_a[0], epochs_a[1]) and not np.array_equal(epochs_a[1], epochs_a[2])
    assert a.epoch == 3
    # set_epoch replays an epoch (what Trainer does when it resumes)
    a.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate([t[0] for t in a]), epochs_a[1])
    assert a.epoch == 2


def test_shuffle_with_generator_and_without_seed():
    n = 20
    ds = TensorDataset(np.arange(n))
    loader = DataLoader(ds, batch_size=6, shuffle=True, generator=np.random.default_rng(5))
    twin = np.random.default_rng(5)
    for _ in range(2):
        np.testing.assert_array_equal(np.concatenate([t[0] for t in loader]), twin.permutation(n))
    # seed=None: still a permutation, and a different one each epoch
    loader = DataLoader(ds, batch_size=6, shuffle=True)
    e0, e1 = (np.concatenate([t[0] for t in loader]) for _ in range(2))
    assert sorted(e0.tolist()) == sorted(e1.tolist()) == list(range(n))
    assert not np.array_equal(e0, e1)


def test_drop_last_with_shuffle_drops_the_tail_of_the_permutation():
    n = 23
    loader = DataLoader(TensorDataset(np.arange(n)), batch_size=5, shuffle=True, drop_last=True, seed=2)
    got = np.concatenate([t[0] for t in loader])
    np.testing.assert_array_equal(got, epoch_perm(2, 0, n)[:20])


# ---------------------------------------------------------------------------- DataLoader: collation paths
def test_tensor_dataset_fast_path_equals_per_sample_collation(monkeypatch):
    x, y = make_xy(29)
    w = np.arange(29 * 4, dtype=np.int16).reshape(29, 2, 2)
    ds = TensorDataset(x, y, w)
    slow = list(DataLoader(ds, batch_size=6, shuffle=True, seed=4, collate_fn=lambda s: default_collate(s)))

    def no_per_sample(self, index):
        raise AssertionError("the fast path should not index samples one by one")

    monkeypatch.setattr(TensorDataset, "__getitem__", no_per_sample)
    fast = list(DataLoader(ds, batch_size=6, shuffle=True, seed=4))
    assert_batches_equal(fast, slow)
    assert all(isinstance(b, tuple) and len(b) == 3 for b in fast)
    # Subsets of a TensorDataset (random_split) take the fast path too, with the composed indices
    monkeypatch.undo()
    train, _ = random_split(ds, [20, 9], seed=0)
    inner = Subset(train, [19, 0, 5, 5, 7])
    slow = list(DataLoader(inner, batch_size=2, collate_fn=lambda s: default_collate(s)))
    monkeypatch.setattr(TensorDataset, "__getitem__", no_per_sample)
    fast = list(DataLoader(inner, batch_size=2))
    assert_batches_equal(fast, slow)
    rows = [train.indices[i] for i in [19, 0, 5, 5, 7]]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in fast]), x[rows])


def test_generic_dataset_and_custom_collate():
    ds = SquaresDataset(10)
    batches = list(DataLoader(ds, batch_size=4))
    assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    np.testing.assert_array_equal(batches[1]["x"], [[4, 16], [5, 25], [6, 36], [7, 49]])
    assert batches[1]["x"].dtype == np.float32 and batches[1]["id"].dtype == np.int64
    sums = list(DataLoader(ds, batch_size=3, collate_fn=lambda s: sum(d["id"] for d in s)))
    assert sums == [3, 12, 21, 9]


# ---------------------------------------------------------------------------- DataLoader: workers
@pytest.mark.parametrize("num_workers,prefetch", [(1, 1), (2, 2), (3, 1), (4, 3), (16, 2)])
def test_thread_workers_give_the_same_batches_in_order(num_workers, prefetch):
    ds = SquaresDataset(41, delay=0.004, seed=num_workers)  # random per-sample delays: out-of-order finishes
    kw = dict(batch_size=3, shuffle=True, seed=9)
    serial = DataLoader(ds, **kw)
    threaded = DataLoader(ds, num_workers=num_workers, prefetch=prefetch, **kw)
    for _ in range(2):  # two epochs: iterating twice works, the second epoch is a new order
        assert_batches_equal(list(threaded), list(serial))
    assert wait_until(lambda: not worker_threads())


def test_thread_workers_fast_path():
    x, y = make_xy(50)
    ds = TensorDataset(x, y)
    a = list(DataLoader(ds, batch_size=7, shuffle=True, seed=1, drop_last=True))
    b = list(DataLoader(ds, batch_size=7, shuffle=True, seed=1, drop_last=True, num_workers=3))
    assert_batches_equal(a, b)


def test_thread_worker_exception_reraises_with_message():
    loader = DataLoader(SquaresDataset(20, fail_at=13), batch_size=2, num_workers=3)
    got = []
    with pytest.raises(ValueError, match="bad sample 13") as info:
        for b in loader:
            got.append(b["id"].tolist())
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]  # everything before the bad batch
    assert any("worker thread" in n for n in getattr(info.value, "__notes__", []))
    assert wait_until(lambda: not worker_threads())
    # the loader still works afterwards
    assert len(list(DataLoader(SquaresDataset(5), batch_size=2, num_workers=2))) == 3


def test_breaking_early_stops_the_threads():
    loader = DataLoader(SquaresDataset(400, delay=0.002), batch_size=2, num_workers=4, prefetch=2)
    t0 = time.monotonic()
    for k, _ in enumerate(loader):
        if k == 2:
            break
    assert wait_until(lambda: not worker_threads(), timeout=10)
    assert time.monotonic() - t0 < 10
    assert all(not t.is_alive() for t in threading.enumerate() if t.name.startswith("luminal-DataLoader"))
    # an iterator dropped mid-epoch, then a full epoch: still complete and ordered
    it = iter(loader)
    next(it)
    del it
    assert [b["id"][0] for b in DataLoader(SquaresDataset(9), batch_size=2, num_workers=2)] == [0, 2, 4, 6, 8]
    assert wait_until(lambda: not worker_threads())


def test_process_workers_give_the_same_batches():
    x, y = make_xy(31)
    for ds in (TensorDataset(x, y), SquaresDataset(31)):
        kw = dict(batch_size=4, shuffle=True, seed=3)
        serial = list(DataLoader(ds, **kw))
        proc = list(DataLoader(ds, num_workers=2, worker_type="process", **kw))
        assert_batches_equal(proc, serial)
    assert wait_until(lambda: not multiprocessing.active_children())


def test_process_worker_errors():
    loader = DataLoader(SquaresDataset(12, fail_at=7), batch_size=2, num_workers=2, worker_type="process")
    with pytest.raises(ValueError, match="bad sample 7") as info:
        list(loader)
    assert any("worker process" in n for n in getattr(info.value, "__notes__", []))
    with pytest.raises(CustomError, match="custom failure at 5"):
        list(DataLoader(RaisesCustom(8), batch_size=2, num_workers=1, worker_type="process"))
    with pytest.raises(TypeError, match="pickle"):
        iter(DataLoader(Unpicklable(4), batch_size=2, num_workers=1, worker_type="process"))
    with pytest.raises(TypeError, match="pickle"):
        iter(DataLoader(SquaresDataset(4), batch_size=2, num_workers=1, worker_type="process",
                        collate_fn=lambda s: s))
    with pytest.raises(Exception):
        pickle.dumps(Unpicklable(1))  # the premise of the test above
    assert wait_until(lambda: not multiprocessing.active_children())


def test_process_workers_break_early_without_hanging():
    loader = DataLoader(SquaresDataset(2000), batch_size=1, num_workers=2, prefetch=2, worker_type="process")
    t0 = time.monotonic()
    for k, _ in enumerate(loader):
        if k == 3:
            break
    assert wait_until(lambda: not multiprocessing.active_children(), timeout=15)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("kwargs,match", [
    (dict(batch_size=0), "batch_size must be a positive integer, got 0"),
    (dict(batch_size=-3), "batch_size must be a positive integer"),
    (dict(batch_size=2.5), "batch_size"),
    (dict(num_workers=-1), "num_workers must be a non-negative integer, got -1"),
    (dict(prefetch=0), "prefetch must be a positive integer"),
    (dict(worker_type="gpu"), "worker_type must be 'thread' or 'process', got 'gpu'"),
    (dict(seed=-1), "seed"),
    (dict(seed=1, generator=np.random.default_rng(1)), "seed or generator"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataLoader(TensorDataset(np.arange(4)), **kwargs)


def test_bad_dataset_and_collate_types():
    with pytest.raises(TypeError, match="__len__"):
        DataLoader(object())
    with pytest.raises(TypeError, match="collate_fn"):
        DataLoader(TensorDataset(np.arange(3)), collate_fn=3)
    with pytest.raises(TypeError, match="Generator"):
        DataLoader(TensorDataset(np.arange(3)), generator=np.random.RandomState(0))
