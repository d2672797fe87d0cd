"""luminal: a deep-learning compiler framework for Python.

Build a lazy graph with :class:`Graph` and :class:`GraphTensor`, run it with
``graph.execute()`` (the numpy reference interpreter until a compiled backend is
chosen), read results with ``tensor.data()``.

    >>> import luminal as lm, numpy as np
    >>> cx = lm.Graph()
    >>> x = cx.tensor((2, 3)).set(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> y = (x @ x.T).relu().retrieve()
    >>> cx.execute()
    >>> y.data().tolist()
    [[5.0, 14.0], [14.0, 50.0]]
"""

from . import ops
from .dtype import DType, bool_, float16, float32, float64, int32, int64
from .graph import Edge, Graph, GraphError, Node
from .hl_ops import arange, cat, concat, stack, where
from .shape import Expression, ShapeTracker, UnboundSymbolError, sym
from .tensor import GraphTensor

__version__ = "0.1.0"

__all__ = ["Graph", "GraphTensor", "GraphError", "Node", "Edge", "DType", "Expression", "ShapeTracker",
           "UnboundSymbolError", "sym", "ops", "where", "concat", "cat", "stack", "arange", "bool_", "int32",
           "int64", "float16", "float32", "float64"]
