"""Data-parallel training over MPI (mpi4py): ``Trainer(..., distributed=True)`` and its parts.

Launch one process per rank with ``mpiexec -n N python train.py``. Every rank builds the same model and runs the
same compiled training step on its shard of each global batch; gradients are averaged over the ranks in buckets
(:class:`GradientAllReducer`); parameters and optimizer state start as rank 0's (:func:`broadcast_parameters`,
:func:`broadcast_optimizer_state`); :class:`DistributedSampler` / :class:`DistributedDataLoader` shard each
epoch's samples; only rank 0 prints progress and writes checkpoints; an exception on any rank aborts all of them
(:func:`abort_on_error`, :func:`install_abort_hook`) instead of leaving the others blocked.

Needs the ``distributed`` extra: ``pip install 'luminal[distributed]'`` (mpi4py and the ``mpich`` wheel). The
sampler works without MPI when ``num_replicas`` and ``rank`` are given. See docs/distributed.md.
"""

from ._mpi import (abort, abort_on_error, broadcast_object, broadcast_optimizer_state, broadcast_parameters,
                   install_abort_hook, is_main, rank, require_mpi, size, world)
from .ddp import DataParallelStep, GradientAllReducer
from .sampler import DistributedDataLoader, DistributedSampler

__all__ = ["require_mpi", "world", "rank", "size", "is_main", "broadcast_object", "broadcast_parameters",
           "broadcast_optimizer_state", "abort", "abort_on_error", "install_abort_hook", "GradientAllReducer",
           "DataParallelStep", "DistributedSampler", "DistributedDataLoader"]
