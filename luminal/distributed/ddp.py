"""Data-parallel training steps: local backward, bucketed gradient all-reduce, identical update on every rank.

The step is two compiled graphs per rank:

1. ``forward + backward``: the batch shard in, the loss, the number of correct predictions and every
   parameter's gradient out (retrieved);
2. ``update``: one gradient *input* per parameter, optional clipping, the optimizer's update
   (:meth:`luminal.training.optim.Optimizer.apply_gradients`); parameters and moment buffers are carried in the
   graph as in single-process training.

Between them :class:`GradientAllReducer` packs the gradients into flat buckets (each scaled by the local batch
size), starts a non-blocking ``MPI_Iallreduce`` per bucket as soon as it is packed, and waits for all of them;
every rank then divides by the global batch size, i.e. it holds the gradient of the mean loss over the
concatenated global batch (with equal shards: the mean of the ranks' gradients). The update graph then runs
the same arithmetic on the same numbers on every rank, so parameters stay identical. See docs/distributed.md
for why the all-reduce is not overlapped with the backward kernels.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["GradientAllReducer", "DataParallelStep"]


class GradientAllReducer:
    """Sum-and-average arrays of fixed shapes over ``comm`` in buckets of about ``bucket_cap_mb`` MiB.

    Args:
        specs: ``[(shape, numpy dtype)]`` of the gradients, in the order :meth:`reduce` receives them.
        comm: an mpi4py communicator.
        bucket_cap_mb: bucket size; a gradient larger than it gets a bucket of its own. Buckets are filled in
            reverse order (the last layers' gradients first, as PyTorch's DDP does) and hold one dtype each.

    Attributes:
        seconds: total time spent in :meth:`reduce` (packing, communication, waiting, scaling).
        calls: number of :meth:`reduce` calls.
        nbytes: gradient bytes each rank sends per call (the sum of the buckets).
    """

    def __init__(self, specs, comm, bucket_cap_mb: float = 25.0):
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb!r}")
        self.comm = comm
        self.specs = [(tuple(s), np.dtype(d)) for s, d in specs]
        cap = int(bucket_cap_mb * 2 ** 20)
        self.buckets: list[tuple[np.ndarray, list[tuple[int, int, int]]]] = []
        open_: dict = {}  # dtype -> (entries, used bytes)
        plans = []
        for i in reversed(range(len(self.specs))):
            shape, dt = self.specs[i]
            n = int(np.prod(shape, dtype=np.int64))
            entries, used = open_.get(dt, ([], 0))
            if entries and used + n * dt.itemsize > cap:
                plans.append((dt, entries))
                entries, used = [], 0
            entries.append((i, n))
            open_[dt] = (entries, used + n * dt.itemsize)
        plans += [(dt, entries) for dt, (entries, _) in open_.items() if entries]
        self.views: list[np.ndarray | None] = [None] * len(self.specs)
        for dt, entries in plans:
            buf = np.empty(sum(n for _, n in entries), dt)
            layout, off = [], 0
            for i, n in entries:
                layout.append((i, off, n))
                self.views[i] = buf[off:off + n].reshape(self.specs[i][0])
                off += n
            self.buckets.append((buf, layout))
        self.nbytes = sum(b.nbytes for b, _ in self.buckets)
        self.seconds = 0.0
        self.calls = 0

    def reduce(self, grads, weight: float, extras) -> tuple[list[np.ndarray], np.ndarray]:
        """All-reduce ``sum_r weight_r * grads_r / sum_r weight_r`` (and the plain sum of the float64 ``extras``,
        whose first entry must be ``weight``). Returns views into the buckets (valid until the next call) and the
        summed extras."""
        from mpi4py import MPI

        t0 = time.perf_counter()
        extras = np.asarray(extras, np.float64)
        single = self.comm.Get_size() == 1
        requests = [] if single else [self.comm.Iallreduce(MPI.IN_PLACE, extras, op=MPI.SUM)]
        for buf, layout in self.buckets:
            for i, off, n in layout:
                g = grads[i]
                if g.shape != self.specs[i][0]:
                    raise ValueError(f"gradient {i} has shape {g.shape}, expected {self.specs[i][0]}")
                np.multiply(g, weight, out=self.views[i], casting="unsafe")
            if not single:
                requests.append(self.comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM))
        if requests:
            MPI.Request.Waitall(requests)
        total = extras[0]
        if not total > 0:
            raise ValueError(f"the ranks' batch sizes sum to {total}; every step needs at least one sample")
        for buf, _ in self.buckets:
            buf *= buf.dtype.type(1.0 / total)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return self.views, extras


class DataParallelStep:
    """One data-parallel training step of a :class:`~luminal.training.Trainer` (built by the trainer).

    ``run(xs, y)`` executes the backward graph on this rank's shard, all-reduces, runs the update graph and
    returns ``(mean loss over the global batch, correct predictions summed over the ranks or None)``;
    ``last_count`` is then the global batch size. ``times`` accumulates the seconds of each phase and
    ``reducer.nbytes`` is the gradient payload per step (the benchmark reads both).
    """

    def __init__(self, trainer, graph, inputs, target, loss, correct, comm, bucket_cap_mb: float):
        from ..graph import Graph
        from ..training.autograd import grad
        from ..training.optim import clip_grad_norm, clip_grad_value

        self.graph, self.inputs, self.target, self.loss, self.correct = graph, inputs, target, loss, correct
        self.comm = comm
        opt = trainer.optimizer
        params = [p for p in opt._params() if p.requires_grad]
        grads = grad(loss, params, allow_unused=True)
        live = [(p, g) for p, g in zip(params, grads) if g is not None]
        if not live:
            raise ValueError("distributed training: the loss depends on none of the optimizer's parameters")
        self.params = [p for p, _ in live]
        self.grads = [g.retrieve() for _, g in live]
        graph.compile(device=trainer.device, search=trainer.search, budget_s=trainer.budget_s)

        # the update graph: identical code on every rank (no measured search: the same kernels everywhere)
        self.update = Graph()
        self.grad_inputs = [self.update.tensor(p.shape, p.dtype, f"grad.{p.name}") for p in self.params]
        gs = list(self.grad_inputs)
        if trainer.max_grad_value is not None:
            gs = clip_grad_value(gs, trainer.max_grad_value)
        if trainer.max_grad_norm is not None:
            gs, _ = clip_grad_norm(gs, trainer.max_grad_norm)
        opt.apply_gradients(self.update, dict(zip(self.params, gs)))
        self.update.compile(device=trainer.device, search="off")
        self.reducer = GradientAllReducer([(p.shape, p.dtype.numpy) for p in self.params], comm, bucket_cap_mb)
        self.last_count = 0
        #: cumulative seconds per phase: forward+backward graph, all-reduce (pack, MPI, scale), update graph
        self.times = {"backward": 0.0, "allreduce": 0.0, "update": 0.0}
        self.steps = 0

    def run(self, xs, y):
        for t, x in zip(self.inputs, xs):
            t.set(x.astype(t.dtype.numpy, copy=False))
        self.target.set(y.astype(self.target.dtype.numpy, copy=False))
        t0 = time.perf_counter()
        self.graph.execute()
        t1 = time.perf_counter()
        n = float(len(y))
        loss = float(self.loss.item())
        correct = None if self.correct is None else float(self.correct.item())
        local = [g.data(copy=False) for g in self.grads]
        views, extras = self.reducer.reduce(local, n, [n, loss * n, 0.0 if correct is None else correct])
        t2 = time.perf_counter()
        for t, v in zip(self.grad_inputs, views):
            t.set(v)
        self.update.execute()
        t3 = time.perf_counter()
        self.times["backward"] += t1 - t0
        self.times["allreduce"] += t2 - t1
        self.times["update"] += t3 - t2
        self.steps += 1
        self.last_count = int(round(extras[0]))
        return float(extras[1] / extras[0]), (None if correct is None else float(extras[2]))
