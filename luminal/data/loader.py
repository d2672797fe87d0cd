"""Batching: :func:`default_collate` and :class:`DataLoader` (``torch.utils.data`` semantics, numpy batches).

The loader decides every batch's sample indices in the main process at the start of an epoch, so the batches
are the same whether they are then loaded in the calling thread (``num_workers=0``), in background threads or
in worker processes. Shuffling draws the epoch's permutation from a ``numpy.random.Generator`` seeded from
``(seed, epoch)``: two loaders with the same seed give the same batches at every epoch, each epoch a different
order, and :meth:`DataLoader.set_epoch` replays any epoch (a resumed training run continues exactly).

Over a :class:`~luminal.data.TensorDataset` (or :class:`~luminal.data.Subset` s of one) with the default
collation, a batch is gathered with one fancy index per array (``array[batch_indices]``) instead of collating
samples one by one.
"""

from __future__ import annotations

import collections.abc
import math
import numbers
import pickle
import queue
import threading
import time
import traceback

import numpy as np

from .dataset import IterableDataset, Subset, TensorDataset

__all__ = ["DataLoader", "default_collate"]


def default_collate(samples):
    """Merge a list of samples into a batch, PyTorch's ``default_collate`` with numpy arrays.

    * numpy arrays (and numpy scalars) are stacked along a new first axis, keeping their dtype;
    * python ``bool`` / ``int`` / ``float`` / ``complex`` become a 1-d array of ``bool`` / ``int64`` /
      ``float64`` / ``complex128`` (as ``torch.tensor`` of python numbers; any float in the batch gives
      ``float64``);
    * strings and bytes stay a list;
    * dicts collate per key (``{k: default_collate([s[k] for s in samples])}``), namedtuples per field;
    * tuples and lists of equal length are transposed and collated per position, giving a tuple for tuples
      (PyTorch gives a list) and a list for lists.

    Raises:
        ValueError: no samples, arrays of different shapes, or sequences of different lengths.
        TypeError: an element type it does not know (``None``, arbitrary objects).
    """
    if not isinstance(samples, (list, tuple)):
        samples = list(samples)
    if len(samples) == 0:
        raise ValueError("default_collate: got an empty batch")
    elem = samples[0]
    if isinstance(elem, (np.ndarray, np.generic)):
        arrays = [np.asarray(s) for s in samples]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise ValueError(f"default_collate: cannot stack arrays of different shapes {sorted(shapes)} into one "
                             "batch; pad them to one shape or pass a collate_fn")
        return np.stack(arrays)
    if isinstance(elem, (bool, numbers.Number)) and not isinstance(elem, (str, bytes)):
        if all(isinstance(s, bool) for s in samples):
            return np.array(samples, dtype=np.bool_)
        if any(isinstance(s, complex) for s in samples):
            return np.array(samples, dtype=np.complex128)
        if any(isinstance(s, float) for s in samples):
            return np.array(samples, dtype=np.float64)
        if all(isinstance(s, numbers.Integral) for s in samples):
            return np.array([int(s) for s in samples], dtype=np.int64)
        return np.array(samples, dtype=np.float64)
    if isinstance(elem, (str, bytes)):
        return list(samples)
    if isinstance(elem, collections.abc.Mapping):
        try:
            return {key: default_collate([s[key] for s in samples]) for key in elem}
        except KeyError as e:
            raise ValueError(f"default_collate: the samples are dicts with different keys (missing {e})") from None
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(field)) for field in zip(*samples)))
    if isinstance(elem, (tuple, list)):
        size = len(elem)
        if any(len(s) != size for s in samples):
            raise ValueError("default_collate: each sample of the batch should have the same number of elements, "
                             f"got lengths {[len(s) for s in samples]}")
        collated = [default_collate(list(field)) for field in zip(*samples)]
        return tuple(collated) if isinstance(elem, tuple) else collated
    raise TypeError(f"default_collate: samples must contain numpy arrays, numbers, strings, dicts, tuples or lists; "
                    f"found {type(elem).__name__}")


# ---------------------------------------------------------------------------- batch fetching
def _tensor_view(dataset):
    """``(arrays, index_map)`` when ``dataset`` is a TensorDataset or nested Subsets of one, else ``None``."""
    if type(dataset) is TensorDataset:
        return dataset.arrays, None
    if type(dataset) is Subset:
        inner = _tensor_view(dataset.dataset)
        if inner is None:
            return None
        try:
            indices = np.asarray(dataset.indices, dtype=np.int64)
        except (TypeError, ValueError):
            return None
        if indices.ndim != 1:
            return None
        arrays, index_map = inner
        return arrays, (indices if index_map is None else index_map[indices])
    return None


class _Fetcher:
    """Turns one batch's index array into a batch (``unbatched``: one sample, as ``batch_size=None`` yields).
    Picklable when the dataset, collate_fn and worker_init_fn are."""

    def __init__(self, dataset, collate_fn, unbatched: bool = False, worker_init_fn=None):
        self.dataset = dataset
        self.collate_fn = collate_fn
        self.unbatched = unbatched
        self.worker_init_fn = worker_init_fn
        self.fast = _tensor_view(dataset) if collate_fn is default_collate and not unbatched else None

    def __call__(self, indices: np.ndarray):
        if self.unbatched:
            return self.dataset[int(indices[0])]
        if self.fast is not None:
            arrays, index_map = self.fast
            rows = indices if index_map is None else index_map[indices]
            return tuple(a[rows] for a in arrays)
        return self.collate_fn([self.dataset[int(i)] for i in indices])


def _check_int(name: str, value, minimum: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"DataLoader: {name} must be {what}, got {value!r}")
    return int(value)


class DataLoader:
    """Iterate over a dataset in batches of numpy arrays (``torch.utils.data.DataLoader`` semantics).

    Args:
        dataset: a map-style dataset (``__len__`` and ``__getitem__``), e.g. a
            :class:`~luminal.data.TensorDataset`.
        batch_size: samples per batch (a positive integer).
        shuffle: visit the samples in a new random order every epoch.
        drop_last: drop the last batch when it is smaller than ``batch_size``.
        collate_fn: merges a list of samples into a batch; :func:`default_collate` when ``None``.
        seed: the shuffling seed: epoch ``e`` is ordered by
            ``numpy.random.default_rng(numpy.random.SeedSequence(seed, spawn_key=(e,))).permutation(n)``.
            ``None`` (and no ``generator``) draws a seed from ``lm.manual_seed``'s default generator when the loader
            is created.
        generator: a ``numpy.random.Generator`` to draw each epoch's permutation from instead (consumed as
            the epochs go; :meth:`set_epoch` cannot replay an epoch then).
        num_workers: ``0`` loads the batches in the iterating thread; ``k > 0`` starts ``k`` background
            workers per iteration, worker ``w`` loading batches ``w, w + k, w + 2k, ...``. Batches arrive in
            order and are identical to ``num_workers=0``.
        prefetch: how many finished batches each worker may hold ahead of the consumer (a bounded queue).
        worker_type: ``"thread"`` (daemon threads: cheap, share the dataset; numpy releases the GIL while
            copying) or ``"process"`` (``multiprocessing`` workers with their own copy of the dataset; the
            dataset and ``collate_fn`` must be picklable, i.e. defined at module level).
        mp_context: the ``multiprocessing`` start method for process workers (``"spawn"``, ``"forkserver"``,
            ``"fork"``); ``None`` is ``"forkserver"`` where available, else ``"spawn"``.
        sampler: an iterable of sample indices (a :mod:`luminal.data.sampler` sampler or any sequence) deciding
            the order instead of ``shuffle``; ``batch_sampler``: an iterable of index lists, one per batch
            (instead of ``batch_size``/``shuffle``/``sampler``/``drop_last``). ``batch_size=None`` yields the
            samples one by one, unbatched. An :class:`~luminal.data.IterableDataset` is batched in its
            iteration order (``num_workers=0``).
        worker_init_fn: called with the worker id at the start of each worker (thread or process).
        pin_memory, timeout, persistent_workers: PyTorch's arguments, accepted with no effect (there is no
            pinned host memory to hand a device; worker errors are re-raised rather than timed out; workers
            start per epoch). ``prefetch_factor`` and ``multiprocessing_context`` are PyTorch's names of
            ``prefetch`` and ``mp_context``.

    A worker's exception is raised again in the iterating thread (the same exception type and message, with
    a note naming the worker and batch). Leaving a loop early stops the workers; iterating again starts a
    new epoch.

    Raises:
        ValueError: ``batch_size <= 0``, ``num_workers < 0``, ``prefetch < 1``, an unknown ``worker_type``,
            a negative ``seed``, or both ``seed`` and ``generator``.
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool = False, drop_last: bool = False,
                 collate_fn=None, seed: int | None = None, generator: np.random.Generator | None = None,
                 num_workers: int = 0, prefetch: int = 2, worker_type: str = "thread",
                 mp_context: str | None = None, *, sampler=None, batch_sampler=None, worker_init_fn=None,
                 pin_memory: bool = False, timeout: float = 0, persistent_workers: bool = False,
                 prefetch_factor: int | None = None, multiprocessing_context: str | None = None):
        self.iterable = isinstance(dataset, IterableDataset) or (
            hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__"))
        if not self.iterable and not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader: dataset must define __len__ and __getitem__ (map-style) or __iter__ "
                            f"(an IterableDataset), got {type(dataset).__name__}")
        self.dataset = dataset
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler is mutually exclusive with batch_size, shuffle, sampler "
                                 "and drop_last")
            batch_size = None
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler is mutually exclusive with shuffle (the sampler decides the order)")
        if self.iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader: an IterableDataset decides its own order: shuffle, sampler and "
                             "batch_sampler are not allowed with it")
        if self.iterable and num_workers:
            raise ValueError("DataLoader: an IterableDataset is loaded in the iterating thread (num_workers=0); "
                             "shard it into map-style datasets for parallel loading")
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.worker_init_fn = worker_init_fn
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"DataLoader: worker_init_fn must be callable, got {type(worker_init_fn).__name__}")
        # PyTorch arguments with no effect here: pin_memory (no pinned host memory to hand a device), timeout
        # (workers never block on a dead peer: their errors are re-raised), persistent_workers
        self.pin_memory, self.timeout, self.persistent_workers = bool(pin_memory), timeout, bool(persistent_workers)
        if prefetch_factor is not None:
            prefetch = prefetch_factor
        if multiprocessing_context is not None:
            if mp_context is not None and mp_context != multiprocessing_context:
                raise ValueError("DataLoader: pass mp_context or multiprocessing_context, not both")
            mp_context = multiprocessing_context
        self.batch_size = None if batch_size is None else _check_int("batch_size", batch_size, 1, "a positive integer")
        self.num_workers = _check_int("num_workers", num_workers, 0, "a non-negative integer")
        self.prefetch = _check_int("prefetch", prefetch, 1, "a positive integer (batches queued per worker)")
        if worker_type not in ("thread", "process"):
            raise ValueError(f"DataLoader: worker_type must be 'thread' or 'process', got {worker_type!r}")
        self.worker_type = worker_type
        if mp_context is not None and mp_context not in ("spawn", "forkserver", "fork"):
            raise ValueError(f"DataLoader: mp_context must be None, 'spawn', 'forkserver' or 'fork', got "
                             f"{mp_context!r}")
        self.mp_context = mp_context
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: pass seed or generator, not both")
        from ..rng import Generator, draw
        if isinstance(generator, Generator):  # an lm.Generator (torch.Generator's role): its numpy stream
            generator = generator._np
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError(f"DataLoader: generator must be an lm.Generator or a numpy.random.Generator, got "
                            f"{type(generator).__name__}")
        if seed is not None:
            seed = _check_int("seed", seed, 0, "a non-negative integer or None")
        self.seed = seed
        self.generator = generator
        # (no seed: one drawn from lm.manual_seed's default generator, as torch's loaders draw from its generator)
        self._base_seed = seed if seed is not None else int(draw(None, "integers", 0, 2 ** 63 - 1))
        self._epoch = 0

    # ------------------------------------------------------------------ epochs
    @property
    def epoch(self) -> int:
        """The epoch number the next iteration will use (incremented by each ``iter(loader)``)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (its shuffle order is a function of ``(seed, epoch)``)."""
        self._epoch = _check_int("epoch", epoch, 0, "a non-negative integer")

    def __len__(self) -> int:
        """Batches per epoch: ``ceil(n / batch_size)``, or ``floor`` with ``drop_last`` (``n`` the dataset's or the
        sampler's length); the batch sampler's length; ``n`` with ``batch_size=None``."""
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        if self.generator is not None:
            return self.generator.permutation(n).astype(np.int64, copy=False)
        rng = np.random.default_rng(np.random.SeedSequence(self._base_seed, spawn_key=(epoch,)))
        return rng.permutation(n).astype(np.int64, copy=False)

    def batch_indices(self, epoch: int | None = None) -> list[np.ndarray]:
        """The sample indices of every batch of ``epoch`` (default: the next one), without loading anything.

        With a ``generator`` (instead of a seed) and ``shuffle``, this draws from the generator.
        """
        epoch = self._epoch if epoch is None else epoch
        if self.iterable:
            raise TypeError("DataLoader: an IterableDataset has no batch indices (its samples come from iteration)")
        if self.batch_sampler is not None:
            return [np.asarray(list(b), dtype=np.int64).reshape(-1) for b in self.batch_sampler]
        if self.sampler is not None:
            order = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        else:
            order = self._order(epoch)
        if self.batch_size is None:
            return [order[i:i + 1] for i in range(len(order))]
        bs = self.batch_size
        stop = (len(order) // bs) * bs if self.drop_last else len(order)
        return [order[i:i + bs] for i in range(0, stop, bs)]

    def __iter__(self):
        """Start an epoch: yields ``len(self)`` batches."""
        if self.iterable:
            self._epoch += 1
            return _iterable_batches(self.dataset, self.batch_size, self.drop_last, self.collate_fn)
        batches = self.batch_indices(self._epoch)
        self._epoch += 1
        fetch = _Fetcher(self.dataset, self.collate_fn, self.batch_size is None and self.batch_sampler is None,
                         self.worker_init_fn)
        if self.num_workers == 0 or not batches:
            return _serial(fetch, batches)
        if self.worker_type == "thread":
            return _ThreadIter(fetch, batches, self.num_workers, self.prefetch)
        return _ProcessIter(fetch, batches, self.num_workers, self.prefetch, self.mp_context)

    def __repr__(self) -> str:
        return (f"DataLoader({type(self.dataset).__name__}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, num_workers={self.num_workers}, worker_type={self.worker_type!r})")


def _serial(fetch, batches):
    for idx in batches:
        yield fetch(idx)


def _iterable_batches(dataset, batch_size, drop_last: bool, collate_fn):
    """Batches of an IterableDataset: its samples in iteration order, ``batch_size`` at a time."""
    if batch_size is None:
        yield from iter(dataset)
        return
    batch = []
    for sample in dataset:
        batch.append(sample)
        if len(batch) == batch_size:
            yield collate_fn(batch)
            batch = []
    if batch and not drop_last:
        yield collate_fn(batch)


def _note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):
        exc.add_note(text)


# ---------------------------------------------------------------------------- thread workers
def _thread_worker(fetch, batches, first: int, step: int, q: queue.Queue, stop: threading.Event, wid: int):
    if fetch.worker_init_fn is not None:
        try:
            fetch.worker_init_fn(wid)
        except BaseException as e:  # noqa: BLE001
            _note(e, f"(raised in DataLoader worker thread {wid} by worker_init_fn)")
            q.put(("err", e))
            return
    for k, idx in enumerate(batches):
        if stop.is_set():
            return
        try:
            item = ("ok", fetch(idx))
        except BaseException as e:  # noqa: BLE001 - every failure is handed to the consumer
            _note(e, f"(raised in DataLoader worker thread {wid} while loading batch {first + k * step})")
            item = ("err", e)
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                break
            except queue.Full:
                continue
        if item[0] == "err":
            return


class _ThreadIter:
    """Batches from daemon threads through one bounded queue per worker, consumed round-robin (in order)."""

    def __init__(self, fetch, batches, num_workers: int, prefetch: int):
        self._n = len(batches)
        self._nw = min(num_workers, self._n)
        self._i = 0
        self._stop = threading.Event()
        self._queues = [queue.Queue(maxsize=prefetch) for _ in range(self._nw)]
        self._threads = []
        for w in range(self._nw):
            t = threading.Thread(target=_thread_worker, name=f"luminal-DataLoader-worker-{w}", daemon=True,
                                 args=(fetch, batches[w::self._nw], w, self._nw, self._queues[w], self._stop, w))
            t.start()
            self._threads.append(t)

    def __iter__(self):
        return self

    def __next__(self):
        if self._i >= self._n or self._stop.is_set():
            self.close()
            raise StopIteration
        w = self._i % self._nw
        q, t = self._queues[w], self._threads[w]
        while True:
            try:
                kind, payload = q.get(timeout=0.1)
                break
            except queue.Empty:
                if not t.is_alive() and q.empty():
                    self.close()
                    raise RuntimeError(f"DataLoader worker thread {w} stopped without producing batch "
                                       f"{self._i}") from None
        self._i += 1
        if kind == "err":
            self.close()
            raise payload
        return payload

    def close(self) -> None:
        """Stop the workers and wait (briefly) for them to exit."""
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2.0)

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


# ---------------------------------------------------------------------------- process workers
def _process_worker(payload: bytes, batches, first: int, step: int, q, stop, wid: int):
    """Body of a worker process: unpickle the fetcher, load its batches, send them (or the error) back."""
    try:
        fetch = pickle.loads(payload)
    except BaseException as e:  # noqa: BLE001
        q.put(("err", _pack_error(e, f"(raised in DataLoader worker process {wid} while unpickling the dataset)")))
        return
    if fetch.worker_init_fn is not None:
        try:
            fetch.worker_init_fn(wid)
        except BaseException as e:  # noqa: BLE001
            q.put(("err", _pack_error(e, f"(raised in DataLoader worker process {wid} by worker_init_fn)")))
            return
    for k, idx in enumerate(batches):
        if stop.is_set():
            break
        try:
            item = ("ok", fetch(idx))
        except BaseException as e:  # noqa: BLE001
            item = ("err", _pack_error(e, f"(raised in DataLoader worker process {wid} while loading batch "
                                          f"{first + k * step})"))
        sent = False
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                sent = True
                break
            except queue.Full:
                continue
        if not sent or item[0] == "err":
            break
    if stop.is_set():
        q.cancel_join_thread()  # nobody reads any more: do not block the exit on unflushed batches


def _pack_error(e: BaseException, note: str):
    tb = traceback.format_exc()
    try:
        blob = pickle.dumps(e)
        pickle.loads(blob)
    except Exception:  # noqa: BLE001 - an unpicklable exception travels as text
        blob = None
    return type(e).__name__, str(e), tb, note, blob


def _unpack_error(packed) -> BaseException:
    name, message, tb, note, blob = packed
    exc = None
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:  # noqa: BLE001
            exc = None
    if exc is None:
        exc = RuntimeError(f"{name}: {message}")
    _note(exc, f"{note}\nOriginal traceback in the worker:\n{tb}")
    return exc


class _ProcessIter:
    """Batches from ``multiprocessing`` workers through bounded queues, consumed round-robin (in order)."""

    def __init__(self, fetch, batches, num_workers: int, prefetch: int, mp_context: str | None):
        import multiprocessing

        try:
            payload = pickle.dumps(fetch, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - PicklingError, TypeError, AttributeError...
            raise TypeError(
                f"DataLoader(worker_type='process') must send the dataset and collate_fn to worker processes, but "
                f"they cannot be pickled ({type(e).__name__}: {e}). Define them at module level without lambdas, "
                "locks or open files, or use worker_type='thread'.") from e
        if mp_context is None:
            mp_context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(mp_context)
        self._n = len(batches)
        self._nw = min(num_workers, self._n)
        self._i = 0
        self._closed = False
        self._stop = ctx.Event()
        self._queues = [ctx.Queue(maxsize=prefetch) for _ in range(self._nw)]
        self._procs = []
        try:
            for w in range(self._nw):
                p = ctx.Process(target=_process_worker, name=f"luminal-DataLoader-worker-{w}", daemon=True,
                                args=(payload, batches[w::self._nw], w, self._nw, self._queues[w], self._stop, w))
                p.start()
                self._procs.append(p)
        except BaseException:
            self.close()
            raise

    def __iter__(self):
        return self

    def __next__(self):
        if self._i >= self._n or self._closed:
            self.close()
            raise StopIteration
        w = self._i % self._nw
        q, p = self._queues[w], self._procs[w]
        misses = 0
        while True:
            try:
                kind, payload = q.get(timeout=0.1)
                break
            except queue.Empty:
                if not p.is_alive():
                    misses += 1  # a finished worker's last batches may still be in the pipe
                    if misses > 20:
                        code = p.exitcode
                        self.close()
                        raise RuntimeError(f"DataLoader worker process {w} exited unexpectedly (exit code {code}) "
                                           f"before producing batch {self._i}") from None
        self._i += 1
        if kind == "err":
            self.close()
            raise _unpack_error(payload)
        return payload

    def close(self) -> None:
        """Stop the worker processes (terminating those that do not exit within a few seconds)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        deadline = time.monotonic() + 3.0
        for p, q in zip(self._procs, self._queues):
            while p.is_alive() and time.monotonic() < deadline:
                try:  # drain, so a worker blocked flushing batches into a full pipe can exit
                    while True:
                        q.get_nowait()
                except (queue.Empty, OSError, ValueError, EOFError):
                    pass
                p.join(timeout=0.05)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
        for q in self._queues:
            q.close()
            q.cancel_join_thread()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
