"""Eager dispatch: :func:`eager_dispatch` makes a function of graph tensors accept eager ones (the functions of
:mod:`luminal.nn.functional` do this themselves, see ``_eager_aware`` there).

A function of lazy ``GraphTensor``s called with an eager :class:`~luminal.eager.Tensor` among its arguments is
recorded as one eager operation (built from the same function when the graph is realized). Calls without an
eager tensor go straight through, unchanged.
"""

from __future__ import annotations

import functools

from ._core import call_function
from .tensor import Tensor


def _has_eager(args, kwargs) -> bool:
    for a in args:
        if isinstance(a, Tensor):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(x, Tensor) for x in a):
            return True
    return any(isinstance(v, Tensor) for v in kwargs.values())


def eager_dispatch(fn):
    """Wrap ``fn`` (a function of GraphTensors) so that it also accepts eager tensors (and numpy arrays beside
    them), recording one operation."""
    if getattr(fn, "_luminal_eager", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _has_eager(args, kwargs):
            return call_function(fn, args, kwargs)
        return fn(*args, **kwargs)
    wrapper._luminal_eager = True
    return wrapper
