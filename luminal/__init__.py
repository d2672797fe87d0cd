"""luminal: a deep-learning compiler framework for Python.

Two ways in, one engine:

* **Eager** (PyTorch's style): ``lm.tensor``, ``lm.zeros``, ``lm.randn``... make tensors whose operations are
  recorded and realized when read, compiled and cached by graph structure (``docs/eager.md``); ``lm.jit(fn)``
  traces a whole function once per input signature.
* **Lazy graphs**: build a :class:`Graph` of :class:`GraphTensor` ops, run it with ``graph.execute()`` (the
  numpy reference interpreter until a compiled backend is chosen), read results with ``tensor.data()``.

    >>> import luminal as lm, numpy as np
    >>> cx = lm.Graph()
    >>> x = cx.tensor((2, 3)).set(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> y = (x @ x.T).relu().retrieve()
    >>> cx.execute()
    >>> y.data().tolist()
    [[5.0, 14.0], [14.0, 50.0]]
"""

import builtins as _builtins

import numpy as _np

from . import ops
from .dtype import (DType, bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
                    uint64)
from .graph import Edge, Graph, GraphError, Node
from .hl_ops import arange as _graph_arange
from .hl_ops import cat as _graph_cat
from .hl_ops import concat as _graph_concat
from .hl_ops import stack as _graph_stack
from .hl_ops import where as _graph_where
from .shape import Expression, ShapeTracker, Size, UnboundSymbolError, sym
from .tensor import GraphTensor
from .amp import GradScaler, autocast  # mixed precision (docs/mixed_precision.md)
from .precision import get_float32_matmul_precision, set_float32_matmul_precision  # (docs/mixed_precision.md)

__version__ = "0.1.0"

bool = bool_  # noqa: A001  (lm.bool, as torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
short = int16
int = int32  # noqa: A001


def _is_eager(values) -> "bool_":
    for v in values:
        if isinstance(v, (list, tuple)):
            if _is_eager(v):
                return True
        elif type(v).__module__ == "luminal.eager.tensor":
            return True
    return False


def _numpy_only(values) -> "bool_":
    """True when ``values`` (nested in lists/tuples) hold a numpy array and no graph tensor: such a call has no
    graph to join, so it runs eagerly (the arrays become eager tensors), as ``module(numpy_array)`` does."""
    found = False
    for v in values:
        if isinstance(v, (list, tuple)):
            if _builtins.any(isinstance(e, GraphTensor) for e in v):
                return False
            found = found or _builtins.any(isinstance(e, _np.ndarray) for e in v)
        elif isinstance(v, GraphTensor):
            return False
        elif isinstance(v, _np.ndarray):
            found = True
    return found


def _eager_call(values) -> "bool_":
    return _is_eager(values) or _numpy_only(values)


def arange(*args, **kwargs):
    """``lm.arange(cx, start, stop, step)`` adds an arange to the graph ``cx``; ``lm.arange(start, end, step)``
    (no graph) makes an eager tensor, as ``torch.arange``."""
    if args and isinstance(args[0], Graph):
        return _graph_arange(*args, **kwargs)
    from .eager import arange as _eager_arange
    return _eager_arange(*args, **kwargs)


def where(cond, a, b):
    """``torch.where(cond, a, b)`` on graph tensors or eager tensors (numpy arrays and scalars accepted)."""
    if _eager_call((cond, a, b)):
        from .eager import _core
        return _core.call_function(_graph_where, (cond, a, b), {}, name="where")
    return _graph_where(cond, a, b)


def _joiner(fn, name):
    def join(tensors, axis=0, *, dim=None):
        if dim is not None:
            axis = dim
        if _eager_call(tensors):
            from .eager import _core
            return _core.call_function(fn, (list(tensors),), {"axis": axis}, name=name)
        return fn(tensors, axis)
    join.__name__ = name
    join.__doc__ = f"``torch.{name}`` of graph tensors or eager tensors along ``axis`` (or ``dim=``)."
    return join


def _graph_or_eager(graph_fn, eager_fn):
    """``graph_fn`` when the first argument is a ``Graph`` (``lm.eye(cx, 3)``, as ``lm.arange(cx, ...)``),
    else the eager creation function ``eager_fn`` (``lm.eye(3)``)."""
    import functools

    @functools.wraps(eager_fn)
    def create(*args, **kwargs):
        return graph_fn(*args, **kwargs) if args and isinstance(args[0], Graph) else eager_fn(*args, **kwargs)
    return create


def tensor(data, dtype=None, requires_grad=False):
    """An eager tensor holding a copy of ``data`` (``torch.tensor``); see :func:`luminal.eager.tensor`.

    (The module of :class:`GraphTensor` stays importable as ``luminal.tensor`` through ``import``.)"""
    from .eager import tensor as _eager_tensor
    return _eager_tensor(data, dtype=dtype, requires_grad=requires_grad)


def _dispatching(fn, name):
    """A free function of :mod:`luminal.hl_ops` (``einsum``, ``meshgrid``...) that also takes eager tensors
    (recorded as one eager operation); with graph tensors (or a ``Graph`` first) it is the function itself."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not (args and isinstance(args[0], Graph)) and _eager_call((*args, *kwargs.values())):
            from .eager import _core
            return _core.call_function(fn, args, kwargs, name=name)
        return fn(*args, **kwargs)
    return wrapper


def _is_tensor_method(name: str) -> "bool_":
    attr = getattr(GraphTensor, name, None)
    return callable(attr) and not isinstance(attr, (property, type))


def _tensor_function(name: str):
    """``lm.<name>(input, *args, **kwargs)``: PyTorch's function form of the tensor method ``input.<name>(...)``
    (``torch.exp(x)``, ``torch.sum(x, dim=1)``, ``torch.max(x, 1)``), for graph and eager tensors alike."""
    import functools

    method = getattr(GraphTensor, name)

    @functools.wraps(method)
    def function(input, *args, **kwargs):  # noqa: A002 - PyTorch's argument name
        if isinstance(input, (_np.ndarray, _np.generic, _builtins.int, _builtins.float)):  # (bool is an int)
            if _builtins.any(isinstance(v, GraphTensor) for v in (*args, *kwargs.values())):
                raise TypeError(f"lm.{name}(): the first argument is a {type(input).__name__} and another is a "
                                "graph tensor; make the first one a graph tensor too (cx.constant / cx.tensor)")
            input = tensor(input)  # numpy arrays and Python scalars become eager tensors  # noqa: A001
        if not isinstance(input, GraphTensor) and type(input).__module__ != "luminal.eager.tensor":
            raise TypeError(f"lm.{name}() expects a luminal tensor (lm.tensor(...) or a graph tensor) as its first "
                            f"argument, got {type(input).__name__}")
        return getattr(input, name)(*args, **kwargs)
    function.__qualname__ = function.__name__ = name
    return function


concat = _joiner(_graph_concat, "concat")
cat = _joiner(_graph_cat, "cat")
stack = _joiner(_graph_stack, "stack")

_EAGER = {"Tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "linspace", "logspace", "eye",
          "rand", "randn", "randint", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
          "randn_like", "manual_seed", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
          "set_default_device", "get_default_device", "JitTraceError", "randperm", "normal", "bernoulli"}
_RNG = {"Generator", "default_generator", "seed", "initial_seed", "get_rng_state", "set_rng_state"}
_SUBMODULES = {"nn", "optim", "training", "data", "io", "compiler", "testing", "eager"}


def __getattr__(name):
    """Lazy exports: the eager API (``lm.tensor``...), ``lm.jit`` and the submodules (``lm.nn``, ``lm.optim``)
    are imported on first use, so ``import luminal`` stays fast."""
    import importlib

    if name in _EAGER:
        value = getattr(importlib.import_module(".eager", __name__), name)
        if name in ("linspace", "logspace", "eye"):  # lm.eye(cx, 3): with a Graph first, the graph node
            value = _graph_or_eager(getattr(importlib.import_module(".hl_ops", __name__), name), value)
    elif name in _RNG:  # lm.Generator, lm.get_rng_state... (luminal/rng.py)
        value = getattr(importlib.import_module(".rng", __name__), name)
    elif name == "jit":
        value = importlib.import_module(".eager.jit", __name__).jit
    elif name == "autograd":  # lm.autograd.grad / backward (eager tensors)
        value = importlib.import_module(".eager.autograd", __name__)
    elif name == "optim":
        value = importlib.import_module(".eager.optim", __name__)
    elif name == "from_torch":  # the torch.export importer (torch is imported only here)
        value = importlib.import_module(".frontends.torch", __name__).from_torch
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    elif not name.startswith("_") and callable(getattr(importlib.import_module(".hl_ops", __name__), name, None)):
        value = _dispatching(getattr(importlib.import_module(".hl_ops", __name__), name), name)  # lm.einsum...
    elif not name.startswith("_") and _is_tensor_method(name):
        value = _tensor_function(name)  # lm.exp(x), lm.sum(x, dim=1): torch's functions of the tensor methods
    else:
        raise AttributeError(f"module 'luminal' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["Graph", "GraphTensor", "GraphError", "Node", "Edge", "DType", "Expression", "ShapeTracker", "Size",
           "UnboundSymbolError", "sym", "ops", "where", "concat", "cat", "stack", "arange", "bool_", "int32",
           "int64", "float16", "bfloat16", "float32", "float64", "tensor", *sorted(_EAGER), *sorted(_RNG), "jit", "optim", "autograd", "from_torch",
           "autocast", "GradScaler", "set_float32_matmul_precision", "get_float32_matmul_precision"]
