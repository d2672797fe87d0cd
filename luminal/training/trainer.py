"""A small training loop: compile the step once, iterate batches with a progress bar, evaluate, checkpoint.

Example::

    from luminal.data import DataLoader, TensorDataset
    from luminal.training import Adam, Trainer
    import luminal.nn as nn, luminal.nn.functional as F

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    trainer = Trainer(model, Adam(model.parameters(), lr=1e-3), F.cross_entropy)
    history = trainer.fit(DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, seed=0), epochs=5,
                          val_loader=DataLoader(TensorDataset(xv, yv), batch_size=256))
    print(trainer.evaluate(DataLoader(TensorDataset(xt, yt), batch_size=256)))

The training graph is built at the first batch with a *symbolic* batch dimension, so the last, smaller batch
of an epoch reuses the same compiled code. Forward, backward and the optimizer update run in one compiled
call per batch. A batch is ``(input, target)`` or ``(input_1, ..., input_k, target)`` (numpy arrays).

``Trainer(..., distributed=True)`` trains data-parallel over MPI (launched with ``mpiexec -n N``; see
:mod:`luminal.distributed` and docs/distributed.md).
"""

from __future__ import annotations

import errno
import json
import os
import time
from typing import Callable, Iterable

import numpy as np

from ..dtype import as_dtype
from ..graph import Graph
from ..io.atomic import atomic_save
from ..module import Module
from .optim import Optimizer

__all__ = ["Trainer", "save_checkpoint", "load_checkpoint"]


def _aborting(method):
    """In a distributed trainer, an exception in ``method`` aborts every rank (no rank is left blocked)."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if not self.distributed:
            return method(self, *args, **kwargs)
        from ..distributed import abort_on_error
        with abort_on_error(self._comm):
            return method(self, *args, **kwargs)
    return wrapper


def _device(device: str | None) -> str:
    if device is not None:
        return device
    env = os.environ.get("LUMINAL_DEVICE")
    if env:
        return env
    from ..runtime.cpu import find_compiler
    return "cpu" if find_compiler() is not None else "reference"


def _split(batch):
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError("a training batch must be a tuple (input, ..., target) of arrays, got "
                         f"{type(batch).__name__}")
    return [np.asarray(b) for b in batch[:-1]], np.asarray(batch[-1])


def _input_dtype(arr: np.ndarray):
    if arr.dtype == np.float64:
        return as_dtype("float32")  # like torch.from_numpy(...).float(): models run in float32
    return as_dtype(arr.dtype.name if arr.dtype != np.bool_ else "bool")


class _Step:
    """One compiled graph: inputs, loss, and the number of correct predictions (classification)."""

    def __init__(self, graph: Graph, inputs, target, loss, correct):
        self.graph, self.inputs, self.target, self.loss, self.correct = graph, inputs, target, loss, correct

    def run(self, xs, y) -> tuple[float, int | None]:
        for t, x in zip(self.inputs, xs):
            t.set(x.astype(t.dtype.numpy, copy=False))
        self.target.set(y.astype(self.target.dtype.numpy, copy=False))
        self.graph.execute()
        self.last_count = len(y)
        correct = None if self.correct is None else float(self.correct.item())
        return float(self.loss.item()), correct


class Trainer:
    """Compile-once training loop with evaluation and checkpoints (see the module docstring).

    Args:
        model: a :class:`~luminal.module.Module` (called as ``model(*inputs)``).
        optimizer: an :class:`~luminal.training.optim.Optimizer` over the model's parameters.
        loss_fn: ``loss_fn(output, target) -> scalar tensor`` (e.g. ``luminal.nn.functional.cross_entropy``).
        scheduler: an LR scheduler stepped every ``scheduler_interval`` (``"epoch"`` or ``"step"``); a
            ``ReduceLROnPlateau`` is stepped with the validation (else training) loss each epoch.
        device: ``"cpu"`` (compiled C, the default when a C compiler exists) or ``"reference"``.
        max_grad_norm, max_grad_value: optional gradient clipping.
        batch_symbol: the name of the symbolic batch dimension.
        search, budget_s: the measured search of the compiled graphs (``Graph.compile``'s arguments:
            ``"off"``, ``"quick"``, ``"full"`` or ``"background"``); the training step's GEMMs are tuned at the
            first batch's size.
        distributed: data-parallel training over MPI (``mpiexec -n N python train.py``; needs the ``distributed``
            extra). Parameters and optimizer state are broadcast from rank 0 here; each step runs the compiled
            backward on this rank's batch (shard the data with :class:`luminal.distributed.DistributedDataLoader`),
            averages the gradients over the ranks (weighted by the ranks' batch sizes: the gradient of the mean
            loss over the global batch) and applies the same update on every rank. Losses and accuracies are those
            of the global batch; only rank 0 shows progress and writes checkpoints; an exception on one rank
            aborts all ranks (``MPI_Abort``). ``fit``, ``train_step`` and ``evaluate`` are collective: call them on
            every rank.
        bucket_cap_mb: the all-reduce bucket size (MiB) when ``distributed``.
        autocast: ``luminal.bfloat16`` or ``luminal.float16`` (or None): build the forward pass and the loss of
            the training and evaluation steps (and ``predict``) inside :class:`luminal.autocast` of that dtype. Parameters and
            optimizer state stay float32 (see ``docs/mixed_precision.md``).
        scaler: a :class:`luminal.GradScaler` (for float16): loss scaling with skip-and-shrink inside the compiled
            step (``Optimizer.minimize(scaler=...)``); its state is saved in checkpoints.
    """

    def __init__(self, model: Module, optimizer: Optimizer, loss_fn: Callable, scheduler=None,
                 scheduler_interval: str = "epoch", device: str | None = None, max_grad_norm: float | None = None,
                 max_grad_value: float | None = None, batch_symbol: str = "batch", search: str | None = None,
                 budget_s: float | None = None, distributed: bool = False, bucket_cap_mb: float = 25.0,
                 autocast=None, scaler=None):
        from ..runtime.search import check_budget, check_level
        if not isinstance(model, Module):
            raise TypeError(f"Trainer: model must be a luminal Module, got {type(model).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"Trainer: optimizer must be a luminal Optimizer, got {type(optimizer).__name__}")
        if scheduler_interval not in ("epoch", "step"):
            raise ValueError(f"scheduler_interval must be 'epoch' or 'step', got {scheduler_interval!r}")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.scheduler, self.scheduler_interval = scheduler, scheduler_interval
        self.device = _device(device)
        self.max_grad_norm, self.max_grad_value = max_grad_norm, max_grad_value
        self.batch_symbol = batch_symbol
        from ..amp import GradScaler
        from ..amp import autocast as _autocast
        self.autocast = None if autocast is None else _autocast(dtype=autocast)
        if scaler is not None and not isinstance(scaler, GradScaler):
            raise TypeError(f"Trainer: scaler must be a luminal.GradScaler, got {type(scaler).__name__}")
        if scaler is not None and distributed:
            raise NotImplementedError("Trainer: a GradScaler with distributed=True is not supported yet")
        self.scaler = scaler
        self.search, self.budget_s = check_level(search), check_budget(budget_s)
        self.epoch = 0
        self.global_step = 0
        self.history: list[dict] = []
        self._train: _Step | None = None
        self._eval: _Step | None = None
        self._signature = None
        self.distributed = bool(distributed)
        self._comm = None
        self.rank, self.world_size = 0, 1
        if self.distributed:
            from ..distributed import (abort_on_error, broadcast_optimizer_state, broadcast_parameters,
                                       install_abort_hook, world)
            if not bucket_cap_mb > 0:
                raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb!r}")
            self.bucket_cap_mb = float(bucket_cap_mb)
            self._comm = world()
            self.rank, self.world_size = self._comm.Get_rank(), self._comm.Get_size()
            install_abort_hook(self._comm)
            with abort_on_error(self._comm):
                broadcast_parameters(self.model, comm=self._comm)
                broadcast_optimizer_state(self.optimizer, comm=self._comm)

    @property
    def is_main(self) -> bool:
        """Whether this process prints progress and writes checkpoints (rank 0, or not distributed)."""
        return self.rank == 0

    # ------------------------------------------------------------------ graphs
    def _build(self, xs, y, training: bool) -> _Step:
        graph = Graph()
        sym = self.batch_symbol
        inputs = [graph.tensor((sym,) + x.shape[1:], _input_dtype(x), f"input{k}") for k, x in enumerate(xs)]
        target = graph.tensor((sym,) + y.shape[1:], _input_dtype(y), "target")
        was = self.model.training
        self.model.train(training)
        try:
            if self.autocast is not None:
                with self.autocast:
                    out = self.model(*inputs)
                    loss = self.loss_fn(out, target)
            else:
                out = self.model(*inputs)
                loss = self.loss_fn(out, target)
        finally:
            self.model.train(was)
        if loss.numel().to_int() != 1:
            raise ValueError(f"loss_fn must return a scalar, got shape {[str(d) for d in loss.dims]}")
        loss = loss.cast("float32").retrieve()
        correct = None
        if target.dtype.is_int and out.ndim == target.ndim + 1:
            # class axis: 1 as in cross_entropy's (N, C, ...) layout, else the last one (N, ..., C)
            for axis in dict.fromkeys((1, out.ndim - 1)):
                if tuple(d for j, d in enumerate(out.dims) if j != axis) == tuple(target.dims):
                    hits = out.argmax(axis).cast(target.dtype).eq(target).cast("int64")
                    per_sample = hits.reshape((hits.dims[0], -1)).sum(1) if hits.ndim > 1 else hits
                    # a sample counts its positions' mean (one number per sample, like the loss)
                    n_pos = hits.numel() // hits.dims[0] if hits.ndim > 1 else 1
                    correct = (per_sample.cast("float32") / n_pos).sum().retrieve() if hits.ndim > 1 \
                        else per_sample.sum().retrieve()
                    break
        if training and self.distributed:
            from ..distributed import DataParallelStep
            return DataParallelStep(self, graph, inputs, target, loss, correct, self._comm, self.bucket_cap_mb)
        if training:
            self.optimizer.minimize(loss, max_grad_norm=self.max_grad_norm, max_grad_value=self.max_grad_value,
                                    scaler=self.scaler)
        graph.compile(device=self.device, search=self.search, budget_s=self.budget_s)
        return _Step(graph, inputs, target, loss, correct)

    def _check_signature(self, xs, y) -> None:
        sig = (tuple((x.shape[1:], x.dtype) for x in xs), (y.shape[1:], y.dtype))
        if self._signature is None:
            self._signature = sig
        elif sig != self._signature:
            raise ValueError(f"batch shapes/dtypes changed: the step was compiled for {self._signature}, got {sig} "
                             "(only the batch dimension may vary)")

    # ------------------------------------------------------------------ public
    @_aborting
    def train_step(self, batch) -> float:
        """Run one optimizer step on ``batch``; returns the loss (before the update)."""
        xs, y = _split(batch)
        self._check_signature(xs, y)
        if self._train is None:
            self._train = self._build(xs, y, training=True)
        loss, _ = self._train.run(xs, y)
        self.global_step += 1
        if self.scheduler is not None and self.scheduler_interval == "step" and not _is_plateau(self.scheduler):
            self.scheduler.step()
        return loss

    @_aborting
    def evaluate(self, loader: Iterable) -> dict:
        """Mean loss (weighted by batch size) and, for class-index targets, accuracy over ``loader``.

        Distributed: every rank evaluates its own ``loader`` and the sums are all-reduced, so all ranks return the
        metrics over the union of their batches (a sharded loader: the whole set; the same unsharded loader on
        every rank: the same numbers as one rank)."""
        total, n, correct = 0.0, 0, 0
        has_acc = True
        for batch in loader:
            xs, y = _split(batch)
            self._check_signature(xs, y)
            if self._eval is None:
                self._eval = self._build(xs, y, training=False)
            loss, c = self._eval.run(xs, y)
            b = len(y)
            total += loss * b
            n += b
            if c is None:
                has_acc = False
            else:
                correct += c
        if self.distributed:
            from mpi4py import MPI
            sums = np.array([total, n, correct, 0.0 if has_acc else 1.0], np.float64)
            self._comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
            total, n, correct, has_acc = float(sums[0]), int(round(sums[1])), float(sums[2]), sums[3] == 0
        if n == 0:
            raise ValueError("evaluate: the loader produced no batches")
        out = {"loss": total / n}
        if has_acc:
            out["accuracy"] = correct / n
        return out

    def predict(self, *inputs) -> np.ndarray:
        """The model's output on numpy ``inputs`` (eval mode; a separate graph compiled once per input shape)."""
        key = tuple((np.asarray(x).shape, np.asarray(x).dtype) for x in inputs)
        cache = self.__dict__.setdefault("_predict", {})
        if key not in cache:
            graph = Graph()
            ts = [graph.tensor(np.asarray(x).shape, _input_dtype(np.asarray(x)), f"input{k}")
                  for k, x in enumerate(inputs)]
            was = self.model.training
            self.model.eval()
            try:
                if self.autocast is not None:
                    with self.autocast:
                        out = self.model(*ts).retrieve()
                else:
                    out = self.model(*ts).retrieve()
            finally:
                self.model.train(was)
            graph.compile(device=self.device, search=self.search, budget_s=self.budget_s)
            cache[key] = (graph, ts, out)
        graph, ts, out = cache[key]
        for t, x in zip(ts, inputs):
            t.set(np.asarray(x).astype(t.dtype.numpy, copy=False))
        graph.execute()
        return out.data()

    @_aborting
    def fit(self, train_loader: Iterable, epochs: int = 1, val_loader: Iterable | None = None,
            checkpoint: str | None = None, resume: bool = False, progress: bool = True) -> list[dict]:
        """Train until ``epochs`` epochs are done in total (a later call with a larger ``epochs`` continues).

        Each epoch records ``loss`` (mean over batches), ``accuracy`` when targets are class indices,
        ``val_loss``/``val_accuracy`` with a ``val_loader``, ``steps_per_s`` and ``samples_per_s``. With
        ``checkpoint`` a checkpoint (model, optimizer, scheduler, counters) is written atomically after every
        epoch; ``resume=True`` first loads it when the file exists and continues from its epoch.

        Distributed: ``train_loader`` must give every rank the same number of batches (checked each epoch);
        rank 0 alone prints, writes the checkpoint, and decides whether to resume (its state is broadcast).
        """
        if epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {epochs}")
        if resume and checkpoint:
            exists = os.path.exists(checkpoint)
            if self.distributed:
                exists = self._comm.bcast(exists, root=0)
            if exists:
                self.load_checkpoint(checkpoint)
        progress = progress and self.is_main
        for epoch in range(self.epoch, epochs):
            if hasattr(train_loader, "set_epoch"):
                train_loader.set_epoch(epoch)
            if self.distributed:
                self._check_batch_counts(train_loader, epoch)
            bar = _progress(train_loader, f"epoch {epoch + 1}/{epochs}", progress)
            losses, seen, correct, acc_ok = [], 0, 0, True
            t0 = time.perf_counter()
            for batch in bar:
                xs, y = _split(batch)
                self._check_signature(xs, y)
                if self._train is None:
                    self._train = self._build(xs, y, training=True)
                    t0 = time.perf_counter()  # compile time is not training throughput
                loss, c = self._train.run(xs, y)
                self.global_step += 1
                if self.scheduler is not None and self.scheduler_interval == "step" and \
                        not _is_plateau(self.scheduler):
                    self.scheduler.step()
                losses.append(loss)
                seen += self._train.last_count
                if c is None:
                    acc_ok = False
                else:
                    correct += c
                if hasattr(bar, "set_postfix") and (len(losses) % 5 == 0 or len(losses) == 1):
                    dt = max(time.perf_counter() - t0, 1e-9)
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", samples_s=f"{seen / dt:.0f}")
            dt = max(time.perf_counter() - t0, 1e-9)
            if hasattr(bar, "close"):
                bar.close()
            if not losses:
                raise ValueError("fit: the training loader produced no batches")
            record = {"epoch": epoch + 1, "loss": float(np.mean(losses)), "steps_per_s": len(losses) / dt,
                      "samples_per_s": seen / dt}
            if acc_ok:
                record["accuracy"] = correct / seen
            if val_loader is not None:
                val = self.evaluate(val_loader)
                record.update({f"val_{k}": v for k, v in val.items()})
            if self.scheduler is not None:
                if _is_plateau(self.scheduler):
                    self.scheduler.step(record.get("val_loss", record["loss"]))
                elif self.scheduler_interval == "epoch":
                    self.scheduler.step()
            self.epoch = epoch + 1
            self.history.append(record)
            if progress:
                print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()))
            if checkpoint:
                self.save_checkpoint(checkpoint)
        return self.history

    def _check_batch_counts(self, loader, epoch: int) -> None:
        n = len(loader) if hasattr(loader, "__len__") else -1
        counts = self._comm.allgather(n)
        if len(set(counts)) > 1:
            raise ValueError(f"distributed fit, epoch {epoch + 1}: the ranks' training loaders have different numbers "
                             f"of batches {dict(enumerate(counts))} (-1: no len()); every rank must run the same "
                             "number of steps: shard the data with luminal.distributed.DistributedDataLoader")

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Model, optimizer and scheduler state, counters, history, and ``rng``: the random streams' positions of
        the model's modules that have one (``Dropout``: see ``rng_state``), so a resumed run draws the same masks
        as an uninterrupted one."""
        rng = {name: m.rng_state() for name, m in self.model.named_modules() if hasattr(m, "rng_state")}
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                "epoch": self.epoch, "global_step": self.global_step, "history": self.history, "rng": rng,
                **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {})}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        modules = dict(self.model.named_modules())
        for name, rng in (state.get("rng") or {}).items():  # (absent in checkpoints of older versions)
            if name in modules and hasattr(modules[name], "load_rng_state"):
                modules[name].load_rng_state(rng)
        self.epoch = int(state.get("epoch", 0))
        self.global_step = int(state.get("global_step", 0))
        self.history = list(state.get("history", []))

    def save_checkpoint(self, path: str) -> None:
        """Write model, optimizer, scheduler and counters to ``path`` atomically (see :func:`save_checkpoint`).

        Distributed: only rank 0 writes (all ranks hold the same state)."""
        if self.is_main:
            save_checkpoint(path, self.state_dict())

    @_aborting
    def load_checkpoint(self, path: str) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint`; errors name ``path`` and what was expected
        (e.g. the optimizer state of another optimizer type).

        Distributed (collective): rank 0 reads ``path`` and broadcasts the state, so the other ranks need not see
        the file."""
        if self.distributed:
            state = self._comm.bcast(load_checkpoint(path) if self.is_main else None, root=0)
        else:
            state = load_checkpoint(path)
        try:
            self.load_state_dict(state)
        except (ValueError, KeyError, TypeError) as err:
            base = next(b for b in (ValueError, KeyError, TypeError) if isinstance(err, b))
            raise base(f"checkpoint {os.fspath(path)!r}: {err}") from err


def _is_plateau(scheduler) -> bool:
    return type(scheduler).__name__ == "ReduceLROnPlateau"


def _progress(iterable, desc: str, enabled: bool):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return iterable
    total = len(iterable) if hasattr(iterable, "__len__") else None
    # an iterator, not the loader: tqdm.auto's class calls iter() on its argument twice (in __init__ and when
    # iterated), which would start two epochs of a DataLoader (and skip one shuffle order)
    return tqdm(iter(iterable), desc=desc, total=total, leave=False, dynamic_ncols=True)


# ---------------------------------------------------------------------------- checkpoint files
def _flatten(obj, prefix: str, arrays: dict):
    """JSON-able structure with numpy arrays replaced by references into ``arrays``."""
    if isinstance(obj, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {"__array__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[_flatten(k, prefix, arrays), _flatten(v, prefix, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"__tuple__" if isinstance(obj, tuple) else "__list__": [_flatten(v, prefix, arrays) for v in obj]}
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"checkpoint: cannot store a value of type {type(obj).__name__}")


def _unflatten(obj, arrays):
    if isinstance(obj, dict):
        if "__array__" in obj:
            return np.array(arrays[obj["__array__"]])
        if "__dict__" in obj:
            return {_unflatten(k, arrays): _unflatten(v, arrays) for k, v in obj["__dict__"]}
        if "__tuple__" in obj:
            return tuple(_unflatten(v, arrays) for v in obj["__tuple__"])
        if "__list__" in obj:
            return [_unflatten(v, arrays) for v in obj["__list__"]]
    return obj


def save_checkpoint(path: str, state: dict) -> None:
    """Save a nested dict of numpy arrays, numbers and strings (model/optimizer/scheduler state dicts) to one
    ``.npz`` file (missing folders are created).

    Saved through :func:`luminal.io.atomic.atomic_save`: written to a temporary next to ``path``, fsync'ed and
    renamed, so a crash never leaves a half-written checkpoint (the next save removes a killed save's
    temporary); a new file gets the umask's permissions, a read-only one is refused (``PermissionError``), a
    symlink is written through."""
    arrays: dict[str, np.ndarray] = {}
    meta = _flatten(state, "", arrays)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)

    atomic_save(path, write, make_dirs=True)


def load_checkpoint(path: str) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises ``FileNotFoundError`` / ``IsADirectoryError`` for a missing file or a folder, and ``ValueError``
    naming the path for a file that is not a complete checkpoint (empty, truncated, corrupt, another format)."""
    import zipfile

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint file at {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{path!r} is a directory; expected a checkpoint file (.npz) written "
                                "by save_checkpoint")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files") or "__meta__" not in z.files:
                raise ValueError("no __meta__ entry")
            meta = json.loads(bytes(z["__meta__"]).decode())
            arrays = {k: z[k] for k in z.files if k != "__meta__"}
    except (ValueError, EOFError, OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as err:
        what = "it is empty" if os.path.getsize(path) == 0 else f"{type(err).__name__}: {err}"
        raise ValueError(f"cannot read checkpoint {path!r}: {what}; expected a complete .npz checkpoint written "
                         "by save_checkpoint (is it truncated or corrupt?)") from err
    return _unflatten(meta, arrays)
