"""``GraphTensor``: the lazy, user-facing tensor handle.

A ``GraphTensor`` names a node of a :class:`~luminal.graph.Graph` plus the
:class:`~luminal.shape.ShapeTracker` view (``tensor.tracker``) through which it is read; ``tensor.shape`` is the
logical shape, a tuple (:class:`~luminal.shape.Size`) of ints and symbolic dims. Arithmetic
and the high-level ops (``luminal/hl_ops``) add primitive nodes to the graph;
nothing runs until ``graph.execute()``. View ops (``permute``, ``expand``,
slicing, ``pad``...) only change the tracker — no node, no copy.

Example::

    >>> import luminal as lm, numpy as np
    >>> cx = lm.Graph()
    >>> x = cx.tensor(("batch", 4)).set(np.ones((2, 4), np.float32))
    >>> y = (x.softmax(-1) * 4).sum(-1).retrieve()
    >>> cx.execute(); y.data()
    array([4., 4.], dtype=float32)
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from . import ops
from .dtype import DType, as_dtype
from .graph import Graph, GraphError
from .host_data import coerce_data
from .hl_ops.binary import BinaryOps
from .hl_ops.debug import DebugOps
from .hl_ops.indexing import IndexingOps
from .hl_ops.matmul import MatmulOps
from .hl_ops.movement import MovementOps
from .hl_ops.norm import NormOps
from .hl_ops.parity import ParityOps
from .hl_ops.reduction import ReductionOps
from .hl_ops.scan import ScanOps
from .hl_ops.sorting import SortingOps
from .hl_ops.trig import TrigOps
from .hl_ops.unary import UnaryOps
from .shape import Expression, ShapeTracker, Size


class GraphTensor(BinaryOps, UnaryOps, ReductionOps, MovementOps, MatmulOps, NormOps, ScanOps, DebugOps, TrigOps,
                  SortingOps, IndexingOps, ParityOps):
    """A handle to a node's output seen through a view (see the module docstring).

    Attributes:
        graph: the owning :class:`Graph`.
        id: the node id (passes may remap it).
        tracker: the :class:`ShapeTracker` view.
        shape: the logical shape, a :class:`~luminal.shape.Size` tuple (ints and symbolic ``Expression``s).
        dtype: the element :class:`DType`.
    """

    __slots__ = ("graph", "_id", "_tracker", "dtype")
    __array_priority__ = 1000  # numpy scalars/arrays defer to our reflected operators

    def __init__(self, graph: Graph, node_id: int, tracker: ShapeTracker, dtype: DType):
        self.graph = graph
        self._id = node_id
        if not isinstance(tracker, ShapeTracker):
            raise TypeError(f"GraphTensor: the view must be a ShapeTracker (a tensor's .tracker; its .shape is the "
                            f"Size of its dims), got {type(tracker).__name__}")
        self._tracker = tracker
        self.dtype = dtype

    # A compiler pass may replace the node a handle points at (Graph.redirects); the handle follows the
    # replacement on its next use, so handles need not be passed to compile() to stay valid.
    def _follow(self) -> None:
        if self._id not in self.graph.nodes and self._id in self.graph.redirects:
            self._id, self._tracker = self.graph.resolve(self._id, self._tracker)

    @property
    def id(self) -> int:
        """The id of the node this tensor reads (the live replacement, if a compiler pass replaced it)."""
        self._follow()
        return self._id

    @id.setter
    def id(self, value: int) -> None:
        self._id = value

    @property
    def tracker(self) -> ShapeTracker:
        """The :class:`ShapeTracker` view through which this tensor reads its node's output."""
        self._follow()
        return self._tracker

    @tracker.setter
    def tracker(self, value: ShapeTracker) -> None:
        self._tracker = value

    @property
    def shape(self) -> Size:
        """The logical shape as a :class:`~luminal.shape.Size` (a tuple, as ``torch.Size``): an ``int`` per constant
        dim, the symbolic :class:`Expression` per symbolic dim. The view itself is :attr:`tracker`."""
        return Size(self.tracker.dims)

    @shape.setter
    def shape(self, value) -> None:
        raise AttributeError("GraphTensor.shape is the logical shape (a Size) and cannot be set; the view is "
                             "GraphTensor.tracker (set a ShapeTracker there)")

    # ------------------------------------------------------------------ construction helpers
    def _new(self, node_id: int, dims, dtype: DType) -> "GraphTensor":
        return GraphTensor(self.graph, node_id, ShapeTracker.contiguous_of(dims), dtype)

    def _view(self, tracker: ShapeTracker) -> "GraphTensor":
        return GraphTensor(self.graph, self.id, tracker, self.dtype)

    def _apply(self, op: ops.Op, *others: "GraphTensor", dims=None, dtype: DType | None = None,
               name: str = "") -> "GraphTensor":
        """Add ``op`` over ``self`` (and ``others``) reading through their views; returns the result tensor."""
        dims = self.tracker.dims if dims is None else dims
        dtype = self.dtype if dtype is None else dtype
        inputs = [(self.id, self.tracker)] + [(o.id, o.tracker) for o in others]
        node = self.graph.add_op(op, inputs, dims, dtype, name)
        return self._new(node, dims, dtype)

    # ------------------------------------------------------------------ metadata
    @property
    def dims(self) -> tuple[Expression, ...]:
        """Symbolic logical dims."""
        return self.tracker.dims

    @property
    def ndim(self) -> int:
        return self.tracker.ndim

    def size(self, axis: int | None = None):
        """:attr:`shape` (a :class:`~luminal.shape.Size`: ints, ``Expression``s where symbolic); one dim if ``axis``
        is given."""
        dims = self.shape
        return dims if axis is None else dims[self.tracker._axis(axis)]

    def concrete_shape(self) -> tuple[int, ...]:
        """Logical shape evaluated with the graph's bound symbols."""
        return self.tracker.shape(self.graph.dyn_map)

    def numel(self) -> Expression:
        return self.tracker.n_elements()

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        d = self.dims[0]
        if not d.is_constant():
            raise TypeError(f"len() of a tensor with symbolic first dim {d}")
        return d.to_int()

    def __repr__(self) -> str:
        node = self.graph.nodes.get(self.id)
        label = node.label if node else "?"
        return f"GraphTensor(id={self.id}, op={label}, dims={[str(d) for d in self.dims]}, dtype={self.dtype.value})"

    def __bool__(self) -> bool:
        raise TypeError("a GraphTensor has no truth value while the graph is being built; use where()/comparisons")

    def __iter__(self):
        raise TypeError("GraphTensor is lazy and not iterable; index it or call data() after execute()")

    def set_name(self, name: str) -> "GraphTensor":
        """Name this tensor's node (shown in summaries, DOT output and error messages)."""
        self.graph.nodes[self.id].name = name
        return self

    # ------------------------------------------------------------------ lifecycle
    def keep(self) -> "GraphTensor":
        """Keep this node's output across executions and protect it from dead-node removal."""
        self.graph.no_delete.add(self.id)
        return self

    def retrieve(self) -> "GraphTensor":
        """Mark the tensor for read-back: after ``execute()`` its value is available from :meth:`data`."""
        self.graph.to_retrieve.add(self.id)
        return self

    def drop(self) -> "GraphTensor":
        """Free this node's stored data now."""
        self.graph.tensors.pop((self.id, 0), None)
        return self

    # ------------------------------------------------------------------ data in
    def _input_node(self) -> "ops.Input":
        node = self.graph.nodes[self.id]
        if not isinstance(node.op, ops.Input):
            raise GraphError(f"set() needs an input tensor (made by Graph.tensor); node {self.id} is a {node.op.name}")
        if not self.tracker.is_contiguous() or self.tracker.dims != node.dims:
            raise GraphError("set() must be called on the input tensor itself, not on a view of it")
        return node

    def set(self, data) -> "GraphTensor":
        """Set the input's data from a numpy array, nested list or scalar; binds symbolic dims from its shape.

        Raises ``ValueError`` when the data's shape does not fit the tensor's dims and ``TypeError`` when its
        dtype cannot be converted without losing information (e.g. float data for an int tensor).

        A CUDA array (CuPy, or anything with ``__cuda_array_interface__``) of the tensor's dtype is kept on the
        device for ``device="cuda"`` (copied device -> device at ``execute()``, no host round trip). On
        ``cuda`` host data is copied to the device when ``set()`` gives it, not again while it is unchanged:
        after changing a numpy array in place, ``set()`` it again.
        """
        node = self._input_node()
        if hasattr(data, "__cuda_array_interface__"):  # a CuPy array / CUDA torch tensor: stays on the device
            arr = _device_data(data, node)
            self.graph._device_inputs = True
        else:
            arr = coerce_data(data, node.dtype, node.label)
            if arr is data:  # a new array object per set(): compiled runtimes that copy inputs (cuda) see the change
                arr = arr.view()
        self._bind_shape(tuple(arr.shape), node)
        self.graph.tensors[(self.id, 0)] = arr
        self.graph.deferred.pop(self.id, None)
        return self

    def set_dyn(self, data, shape) -> "GraphTensor":
        """Set flat (or any-shaped) ``data`` as an array of ``shape``; binds the symbols in the tensor's dims."""
        shape = tuple(int(s) for s in ((shape,) if np.isscalar(shape) else shape))
        arr = np.asarray(data)
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"set_dyn on '{self.graph.nodes[self.id].label}': {arr.size} values cannot fill shape "
                             f"{shape}")
        return self.set(arr.reshape(shape))

    def set_deferred(self, loader: Callable[[], object] | Callable[[Mapping[str, int]], object]) -> "GraphTensor":
        """Set a loader called at each ``execute()`` (with the symbol bindings if it takes an argument)."""
        node = self._input_node()
        import inspect

        try:
            takes_arg = len(inspect.signature(loader).parameters) >= 1
        except (TypeError, ValueError):
            takes_arg = False
        self.graph.deferred[node.id] = loader if takes_arg else (lambda _b: loader())
        self.graph.tensors.pop((self.id, 0), None)
        return self

    def _bind_shape(self, shape: tuple[int, ...], node) -> None:
        dims = node.dims
        if len(shape) != len(dims):
            raise ValueError(f"'{node.label}' expects {len(dims)}-d data of shape {[str(d) for d in dims]}, got an "
                             f"array of shape {shape}")
        new_bindings: dict[str, int] = {}
        for k, (d, n) in enumerate(zip(dims, shape)):
            if d.is_constant():
                if d.to_int() != n:
                    raise ValueError(f"'{node.label}' expects shape {[str(x) for x in dims]}, got data of shape "
                                     f"{shape} (dim {k}: expected {d}, got {n})")
            elif d.op == "var":
                name = d.args[0]
                if name in new_bindings and new_bindings[name] != n:
                    raise ValueError(f"'{node.label}': symbol '{name}' is {new_bindings[name]} and {n} in the same "
                                     f"data of shape {shape}")
                new_bindings[name] = n
        for name, n in new_bindings.items():
            self.graph.dyn_map[name] = n
        for k, (d, n) in enumerate(zip(dims, shape)):
            if not d.is_constant() and d.op != "var" and d.symbols() <= self.graph.dyn_map.keys():
                if d.evaluate(self.graph.dyn_map) != n:
                    raise ValueError(f"'{node.label}': dim {k} is {d} = {d.evaluate(self.graph.dyn_map)} with the "
                                     f"bound symbols, but the data has {n}")

    # ------------------------------------------------------------------ data out
    def data(self, copy: bool = True, device: bool = False) -> np.ndarray:
        """The tensor's value after ``execute()``, as a numpy array of its logical shape.

        ``copy=False`` hands over the backend's own array, without a copy, where the tensor is its buffer in
        plain layout (a strided view of it otherwise, still without a copy). The array is then the caller's:
        the next ``execute()`` writes this tensor into a new array instead of overwriting it (the compiled
        backend otherwise reuses its output arrays across executions). An input's array is the one ``set()``
        stored, which the next ``execute()`` reads again.

        ``device=True`` (``device="cuda"`` only) returns a CuPy array on the GPU instead: a copy of the device
        buffer, with no host round trip where the tensor is its buffer in plain layout.
        """
        if device:
            return self._device_data()
        buf = self.graph.tensors.get((self.id, 0))
        if buf is None:
            fetch = getattr(self.graph.runtime, "fetch", None)  # a result left on the device (cuda)
            if fetch is not None and fetch(self.graph, self.id):
                buf = self.graph.tensors.get((self.id, 0))
        if buf is None:
            node = self.graph.nodes.get(self.id)
            label = node.label if node else "?"
            if self.id not in self.graph.to_retrieve and self.id not in self.graph.no_delete and not (
                    node is not None and isinstance(node.op, ops.Input)):
                raise GraphError(f"tensor {self.id} '{label}' was not marked with retrieve() (or keep()) before "
                                 "execute(), so its value was not kept")
            raise GraphError(f"tensor {self.id} '{label}' has no value yet; call graph.execute() first")
        view = self.tracker.gather_numpy(buf, self.graph.dyn_map)
        if copy:
            return np.array(view)
        recycle = getattr(self.graph.runtime, "recycle", None)
        if recycle is not None and np.shares_memory(view, buf):
            recycle(self.id, None)  # handed over: the next execute writes a new array
        return view

    def _device_data(self):
        runtime = self.graph.runtime
        if runtime is None or getattr(runtime, "device", None) != "cuda":
            raise RuntimeError(f"data(device=True) needs a graph compiled for device='cuda' (this one runs on "
                               f"{self.graph.device or 'reference'!r}); use data() for a numpy array")
        node_id = self.id
        if node_id in self.graph.nodes and self.tracker.is_contiguous() and all(
                a == b for a, b in zip(self.tracker.dims, self.graph.nodes[node_id].dims)):
            flat = runtime.device_array(node_id)
            if flat is not None:
                return flat.reshape(tuple(d.evaluate(self.graph.dyn_map) for d in self.tracker.dims))
        import cupy  # a view or an input: through the host (correct, slower)

        return cupy.asarray(self.data())

    def numpy(self) -> np.ndarray:
        """Alias of :meth:`data`."""
        return self.data()

    def item(self):
        """The single value of a one-element tensor as a Python number."""
        arr = self.data()
        if arr.size != 1:
            raise ValueError(f"item() needs a one-element tensor, this one has shape {arr.shape}")
        return arr.reshape(()).item()

    # ------------------------------------------------------------------ dtype
    def cast(self, dtype) -> "GraphTensor":
        """Convert to ``dtype`` (a ``Cast`` node; a no-op when already that dtype)."""
        dtype = as_dtype(dtype)
        if dtype == self.dtype:
            return self
        src_dims = self.graph.nodes[self.id].dims
        if not self.tracker.is_contiguous() and self.tracker.covers(src_dims):
            # a permuted / broadcast view of the whole source: convert the source in its own layout and read the
            # result through the same view (exact: a cast is elementwise). A transposed weight then reaches a GEMM
            # as a strided operand instead of through a transposing copy (a 4096x4096 bfloat16 matvec: 98 -> 3 ms),
            # and a broadcast converts each source element once.
            whole = GraphTensor(self.graph, self.id, ShapeTracker.contiguous_of(src_dims), self.dtype)
            return whole._apply(ops.Cast(dtype), dtype=dtype)._view(self.tracker)
        return self._apply(ops.Cast(dtype), dtype=dtype)

    to = cast
    astype = cast

    def float(self) -> "GraphTensor":
        return self.cast(DType.float32)

    def double(self) -> "GraphTensor":
        return self.cast(DType.float64)

    def half(self) -> "GraphTensor":
        return self.cast(DType.float16)

    def bfloat16(self) -> "GraphTensor":
        return self.cast(DType.bfloat16)

    def int(self) -> "GraphTensor":
        return self.cast(DType.int32)

    def long(self) -> "GraphTensor":
        return self.cast(DType.int64)

    def bool(self) -> "GraphTensor":
        return self.cast(DType.bool)

    def contiguous(self) -> "GraphTensor":
        """Materialize the view into a row-major buffer (no-op if it already is one)."""
        if self.tracker.is_contiguous():
            return self
        return self._apply(ops.Contiguous())

    def graph_break(self) -> "GraphTensor":
        """Insert a ``GraphBreak`` marker: compilers will not fuse across it."""
        return self._apply(ops.GraphBreak())


def is_tensor(x) -> bool:
    return isinstance(x, GraphTensor)


def _device_data(data, node):
    """Check a CUDA array given to ``set()`` (dtype and rank; the shape binds symbols as for host data)."""
    iface = data.__cuda_array_interface__
    have = np.dtype(iface["typestr"])
    want = node.dtype.numpy
    if have != want:
        raise TypeError(f"device data for '{node.label}' has dtype {have} but the tensor is {node.dtype}; cast it "
                        "on the device first (device arrays are not converted)")
    strides = iface.get("strides")
    if strides is not None:  # None means C-contiguous
        expect, step = [], want.itemsize
        for n in reversed(iface["shape"]):
            expect.append(step)
            step *= n
        if any(n > 1 and a != b for n, a, b in zip(iface["shape"], strides, reversed(expect))):
            raise ValueError(f"device data for '{node.label}' must be C-contiguous (got strides {tuple(strides)}); "
                             "make a contiguous copy on the device first")
    return data


# ---------------------------------------------------------------------------------------------- PyTorch's dim names
def torch_dim_alias(fn) -> str | None:
    """The parameter of ``fn`` that PyTorch's keyword ``dim`` names: ``"axis"`` or ``"axes"`` when ``fn`` has one
    and no ``dim`` of its own, else None."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if "dim" in params:
        return None
    for name in ("axis", "axes"):
        if name in params:
            return name
    return None


def _accept_dim_keywords(cls) -> None:
    """Let every public method of ``cls`` whose axis parameter is ``axis``/``axes`` also take PyTorch's ``dim``
    (and ``dims`` for ``axes``: ``flip(dims=...)``), so torch-style module code runs on graph tensors as it does
    on eager ones."""
    import functools
    seen = set()
    for klass in cls.__mro__:
        for name, fn in vars(klass).items():
            if name in seen or name.startswith("_") or not callable(fn) or isinstance(fn, (property, staticmethod,
                                                                                              classmethod, type)):
                continue
            seen.add(name)
            target = torch_dim_alias(fn)
            if target is None:
                continue

            def method(self, *args, _fn=fn, _target=target, _name=name, **kwargs):
                for alias in ("dim", "dims") if _target == "axes" else ("dim",):
                    if alias in kwargs:
                        if _target in kwargs:
                            raise TypeError(f"{_name}() got both '{alias}' and '{_target}'")
                        kwargs[_target] = kwargs.pop(alias)
                return _fn(self, *args, **kwargs)
            functools.update_wrapper(method, fn)
            setattr(cls, name, method)


_accept_dim_keywords(GraphTensor)
