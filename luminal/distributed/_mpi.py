"""The MPI handle (mpi4py, imported lazily), rank helpers, broadcasts and abort-on-error."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback

import numpy as np

__all__ = ["require_mpi", "world", "rank", "size", "is_main", "broadcast_object", "broadcast_parameters",
           "broadcast_optimizer_state", "abort", "abort_on_error", "install_abort_hook"]

_INSTALL_HINT = ("luminal.distributed needs mpi4py and an MPI library: pip install 'luminal[distributed]' "
                 "(installs mpi4py and the mpich wheel), then launch with `mpiexec -n N python train.py`")


def require_mpi():
    """The ``mpi4py.MPI`` module; ``ImportError`` naming the ``distributed`` extra when mpi4py is missing.

    Importing it initialises MPI (a process started without ``mpiexec`` is a world of size 1)."""
    try:
        from mpi4py import MPI
    except ImportError as err:  # also the "MPI library not found" failures of mpi4py's loader
        raise ImportError(f"{_INSTALL_HINT} (import failed: {err})") from err
    return MPI


def world():
    """``MPI.COMM_WORLD`` (the communicator every helper here uses by default)."""
    return require_mpi().COMM_WORLD


def rank(comm=None) -> int:
    """This process's rank in ``comm`` (default ``COMM_WORLD``)."""
    return (comm or world()).Get_rank()


def size(comm=None) -> int:
    """The number of ranks in ``comm`` (default ``COMM_WORLD``)."""
    return (comm or world()).Get_size()


def is_main(comm=None) -> bool:
    """Whether this is rank 0 (the one that prints progress and writes checkpoints)."""
    return rank(comm) == 0


def broadcast_object(obj, root: int = 0, comm=None):
    """``obj`` from rank ``root`` on every rank (pickled; for small things: state dicts, decisions)."""
    return (comm or world()).bcast(obj, root=root)


def broadcast_parameters(params, root: int = 0, comm=None) -> None:
    """Overwrite every parameter with rank ``root``'s value (in place, also in graphs already built).

    ``params``: a :class:`~luminal.module.Module` (its parameters and buffers, e.g. BatchNorm's running
    statistics) or an iterable of :class:`~luminal.module.Parameter`. Every rank
    must pass the same parameters in the same order; a shape or dtype mismatch raises ``ValueError`` on all ranks
    (checked collectively before any data moves)."""
    from ..module import Module

    comm = comm or world()
    plist = list(params.parameters()) + [b for _, b in params.named_buffers()] if isinstance(params, Module) \
        else list(params)
    sig = [(p.name, tuple(p.shape), p.dtype.value) for p in plist]
    sigs = comm.allgather(sig)
    for r, other in enumerate(sigs):
        if other != sigs[root]:
            diff = next(((i, a, b) for i, (a, b) in enumerate(zip(other, sigs[root])) if a != b),
                        (min(len(other), len(sigs[root])), None, None))
            raise ValueError(f"broadcast_parameters: rank {r} has {len(other)} parameters, rank {root} has "
                             f"{len(sigs[root])}; first difference at index {diff[0]}: {diff[1]} vs {diff[2]} "
                             "(every rank must build the same model)")
    for p in plist:
        buf = np.array(p.data, order="C")  # a copy (keeps 0-d shapes, unlike ascontiguousarray)
        comm.Bcast(buf, root=root)
        p.copy_(buf)


def broadcast_optimizer_state(optimizer, root: int = 0, comm=None) -> None:
    """Make the optimizer's hyperparameters, step counts and moment buffers those of rank ``root``."""
    comm = comm or world()
    state = comm.bcast(optimizer.state_dict() if comm.Get_rank() == root else None, root=root)
    if state["state"] or comm.Get_rank() != root:
        optimizer.load_state_dict(state)


def abort(code: int = 1, comm=None) -> None:
    """``MPI_Abort``: ends every rank of ``comm`` (``mpiexec`` then exits non-zero); this process exits even if
    ``MPI_Abort`` returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    # the process manager forwards each rank's output through a pipe; MPI_Abort makes it kill every rank at once,
    # and what it had not forwarded yet (the traceback just written) could be lost on a busy machine: give it a
    # moment first (an error path, so the delay costs nothing in a healthy run)
    time.sleep(0.5)
    try:
        (comm or world()).Abort(code)
    finally:  # MPI_Abort may return before the process manager kills this rank: never go on running
        os._exit(code)


@contextlib.contextmanager
def abort_on_error(comm=None):
    """On an exception inside the block in a world of more than one rank: print the traceback (prefixed with the
    rank) to stderr and ``MPI_Abort``, so ranks blocked in a collective exit instead of hanging. With one rank the
    exception propagates unchanged."""
    try:
        yield
    except BaseException as err:
        if isinstance(err, (SystemExit, GeneratorExit)):
            raise
        c = comm or world()
        if c.Get_size() <= 1:
            raise
        text = "".join(traceback.format_exception(err))
        sys.stderr.write(f"[luminal.distributed] rank {c.Get_rank()}/{c.Get_size()} raised; aborting all ranks\n"
                         f"{text}")
        abort(1, c)


_hook_installed = False


def install_abort_hook(comm=None) -> None:
    """Make an uncaught exception in this rank call ``MPI_Abort`` after printing its traceback (``sys.excepthook``),
    as ``python -m mpi4py script.py`` does. Idempotent."""
    global _hook_installed
    if _hook_installed:
        return
    c = comm or world()
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if c.Get_size() > 1 and not issubclass(kind, SystemExit):
            sys.stderr.write(f"[luminal.distributed] uncaught exception on rank {c.Get_rank()}; aborting all ranks\n")
            abort(1, c)

    sys.excepthook = hook
    _hook_installed = True

