"""Testing utilities: gradient checking against central finite differences in float64.

Example::

    >>> import numpy as np
    >>> from luminal.testing import gradcheck
    >>> gradcheck(lambda x: (x * x).sin(), [np.linspace(-1, 1, 5)])
    True
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .graph import Graph
from .tensor import GraphTensor

__all__ = ["gradcheck", "GradcheckError", "numerical_grad", "analytic_grad"]


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree (the message names the input, element and values)."""


def _build(fn: Callable, inputs: Sequence, seed: int):
    graph = Graph()
    tensors, arrays, diff = [], [], []
    for k, x in enumerate(inputs):
        arr = np.array(x, order="C")  # (ascontiguousarray would turn a 0-d array into shape (1,))
        if arr.dtype.kind == "f":
            arr = np.array(arr, dtype=np.float64, order="C")
            diff.append(k)
        t = graph.tensor(arr.shape, arr.dtype.name if arr.dtype != np.bool_ else "bool", f"x{k}").set(arr)
        tensors.append(t)
        arrays.append(arr)
    out = fn(*tensors)
    if not isinstance(out, GraphTensor):
        raise TypeError(f"gradcheck: fn must return a GraphTensor, got {type(out).__name__}")
    if not out.dtype.is_float:
        raise TypeError(f"gradcheck: fn returned a {out.dtype} tensor; only floating-point outputs have gradients")
    out = out.cast("float64")
    # a fixed random projection checks every output direction at once
    proj = np.random.default_rng(seed).uniform(0.5, 1.5, size=out.concrete_shape())
    sign = np.where(np.random.default_rng(seed + 1).random(proj.shape) < 0.5, -1.0, 1.0)
    weights = graph.tensor(proj.shape, "float64", "projection").set(proj * sign)
    loss = (out * weights).sum().retrieve()
    return graph, tensors, arrays, diff, loss


def analytic_grad(fn: Callable, inputs: Sequence, seed: int = 0, device: str | None = None) -> list:
    """Gradients (numpy, float64) of ``sum(fn(*inputs) * R)`` for a fixed random ``R`` by the autograd pass."""
    from .training.autograd import grad

    graph, tensors, arrays, diff, loss = _build(fn, inputs, seed)
    grads = grad(loss, [tensors[k] for k in diff], allow_unused=True)
    for g in grads:
        if g is not None:
            g.retrieve()
    if device is not None:
        graph.compile(device=device)
    graph.execute()
    return [np.zeros_like(arrays[k]) if g is None else g.data() for k, g in zip(diff, grads)]


def numerical_grad(fn: Callable, inputs: Sequence, eps: float = 1e-6, seed: int = 0,
                   device: str | None = None) -> list:
    """Central finite differences (float64) of ``sum(fn(*inputs) * R)``, the quantity ``analytic_grad`` uses."""
    graph, tensors, arrays, diff, loss = _build(fn, inputs, seed)
    if device is not None:
        graph.compile(device=device)
    out = []
    for k in diff:
        base = arrays[k]
        g = np.zeros_like(base)
        flat = g.reshape(-1)
        for i in range(base.size):
            vals = []
            for delta in (eps, -eps):
                x = base.copy()
                x.reshape(-1)[i] += delta
                tensors[k].set(x)
                graph.execute()
                vals.append(float(loss.data()))
            flat[i] = (vals[0] - vals[1]) / (2 * eps)
        tensors[k].set(base)
        out.append(g)
    return out


def gradcheck(fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              seed: int = 0, device: str | None = None, raise_exception: bool = True) -> bool:
    """Check the autograd gradients of ``fn`` against central finite differences in float64.

    Args:
        fn: builds the function on graph tensors: ``fn(*tensors) -> GraphTensor`` (any shape).
        inputs: numpy arrays (or array-likes); floating-point ones are converted to float64 and checked,
            integer/bool ones (indices, masks) are passed through undifferentiated.
        eps: finite-difference step. atol, rtol: ``|analytic - numeric| <= atol + rtol * |numeric|``.
        seed: seeds the random projection ``R`` that reduces the output to a scalar ``sum(out * R)``.
        device: ``None`` (default device), ``"reference"`` or ``"cpu"``.
        raise_exception: raise :class:`GradcheckError` on a mismatch (else return False).

    Returns:
        True when every element agrees.
    """
    analytic = analytic_grad(fn, inputs, seed, device)
    numeric = numerical_grad(fn, inputs, eps, seed, device)
    floats = [k for k, x in enumerate(inputs) if np.asarray(x).dtype.kind == "f"]
    for k, a, n in zip(floats, analytic, numeric):
        bad = ~(np.abs(a - n) <= atol + rtol * np.abs(n))
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), a.shape) if a.ndim else ()
            msg = (f"gradcheck: input {k} (shape {a.shape}) element {tuple(int(v) for v in i)}: analytic "
                   f"{a[i]!r} vs numerical {n[i]!r} ({int(bad.sum())} of {a.size} elements differ; "
                   f"max |diff| {float(np.max(np.abs(a - n))):.3g}, atol={atol}, rtol={rtol})")
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True
