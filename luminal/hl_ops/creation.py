"""Tensors made inside the graph: constants, ``iota``/``arange``, fills, seeded random inputs, triangle masks.

These are exposed as :class:`~luminal.graph.Graph` methods (``cx.arange(10)``).
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..dtype import DType, as_dtype
from ..shape import Expression, ShapeTracker, to_expr
from ._util import constant as _constant


def _tensor(graph, node, dims, dtype):
    from ..tensor import GraphTensor
    return GraphTensor(graph, node, ShapeTracker.contiguous_of(dims), dtype)


def _shape(shape):
    from ..host_data import normalize_shape
    return normalize_shape(shape)


def _infer_dtype(value) -> DType:
    if isinstance(value, (bool, np.bool_)):
        return DType.bool
    if isinstance(value, (int, np.integer, Expression, str)):
        return DType.int64
    return DType.float32


def constant(graph, value, dtype=None, shape=()):
    """A scalar constant (a number or a symbolic expression), optionally broadcast (zero-copy) to ``shape``."""
    dtype = _infer_dtype(value) if dtype is None else as_dtype(dtype)
    if isinstance(value, str):
        value = to_expr(value)
    return _constant(graph, value, dtype, _shape(shape))


def iota(graph, expr, shape, dtype=DType.int32):
    """Evaluate ``expr`` (of the flat index ``z``) at every element of ``shape``."""
    dims = _shape(shape)
    dtype = as_dtype(dtype)
    expr = to_expr(expr)
    node = graph.add_op(ops.Iota(expr, dtype), (), dims, dtype)
    return _tensor(graph, node, dims, dtype)


def arange(graph, start, stop=None, step=1, dtype=None):
    """``[start, start + step, ...)`` below ``stop`` (``torch.arange``; ``arange(n)`` counts from 0).

    ``n`` may be symbolic (``cx.arange("seq")``) when start and step are integers.
    """
    if stop is None:
        start, stop = 0, start
    values = (start, stop, step)
    is_float = any(isinstance(v, (float, np.floating)) for v in values)
    dtype = as_dtype(dtype) if dtype is not None else (DType.float32 if is_float else DType.int64)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if is_float:
        n = max(0, math.ceil((float(stop) - float(start)) / float(step)))
        base = iota(graph, "z", (n,), DType.int64).cast(DType.float64)
        return (base * float(step) + float(start)).cast(dtype)
    start_e, stop_e = to_expr(start), to_expr(stop)
    if step > 0:
        n = (stop_e - start_e).max(0).ceil_div(step)
    else:
        n = (start_e - stop_e).max(0).ceil_div(-step)
    z = to_expr("z")
    expr = z * step + start_e
    if dtype.is_float:
        return iota(graph, expr, (n,), DType.int64).cast(dtype)
    return iota(graph, expr, (n,), dtype)


def full(graph, shape, value, dtype=None):
    """A tensor of ``shape`` filled with ``value`` (a broadcast constant: no memory until used)."""
    dtype = _infer_dtype(value) if dtype is None else as_dtype(dtype)
    return _constant(graph, value, dtype, _shape(shape))


def zeros(graph, shape, dtype=DType.float32):
    return full(graph, shape, 0, dtype)


def ones(graph, shape, dtype=DType.float32):
    return full(graph, shape, 1, dtype)


def _random_input(graph, shape, dtype, seed, sample, name):
    t = graph.tensor(shape, dtype, name)
    cache = {}

    def load(bindings):
        concrete = tuple(d.evaluate(bindings) for d in t.dims)
        if concrete not in cache:
            cache.clear()
            cache[concrete] = sample(np.random.default_rng(seed), concrete).astype(t.dtype.numpy)
        return cache[concrete]

    t.set_deferred(load)
    return t


def rand(graph, shape, seed: int = 0, low: float = 0.0, high: float = 1.0, dtype=DType.float32):
    """Uniform ``[low, high)`` values, reproducible from ``seed`` (regenerated identically each execute)."""
    return _random_input(graph, shape, as_dtype(dtype), seed,
                         lambda rng, s: rng.uniform(low, high, size=s), f"rand(seed={seed})")


def randn(graph, shape, seed: int = 0, mean: float = 0.0, std: float = 1.0, dtype=DType.float32):
    """Normal ``N(mean, std^2)`` values, reproducible from ``seed``."""
    return _random_input(graph, shape, as_dtype(dtype), seed,
                         lambda rng, s: rng.normal(mean, std, size=s), f"randn(seed={seed})")


def tril_mask(graph, rows, cols=None, diagonal: int = 0, dtype=DType.float32):
    """A ``rows x cols`` tensor with ones where ``col - row <= diagonal`` (the seed's ``tril``)."""
    cols = rows if cols is None else cols
    return ones(graph, (rows, cols), dtype).tril(diagonal)


def triu_mask(graph, rows, cols=None, diagonal: int = 0, dtype=DType.float32):
    """A ``rows x cols`` tensor with ones where ``col - row >= diagonal``."""
    cols = rows if cols is None else cols
    return ones(graph, (rows, cols), dtype).triu(diagonal)
