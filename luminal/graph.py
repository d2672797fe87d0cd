"""The computation graph: nodes (primitive ops), data and schedule edges, tensor store, execution entry points.

A :class:`Graph` is both the program and its runtime state. Nodes hold a primitive :class:`~luminal.ops.Op`; a data
edge carries the source node, its output slot and the :class:`~luminal.shape.ShapeTracker` through which the
consumer reads it (views live on edges, never in nodes). Schedule edges only order execution. ``execute()`` hands
the graph to its runtime (``graph.runtime``, a plug-in of :mod:`luminal.runtime`), then runs the checks, carries and
hooks; a graph never compiled runs on the reference interpreter (:mod:`luminal.runtime.reference`: each node with
numpy in topological order, intermediates freed by reference count). This module imports no runtime at import time:
runtimes are imported where they are first used.

Example::

    >>> import luminal as lm
    >>> cx = lm.Graph()
    >>> a = cx.tensor(3).set([1.0, 2.0, 3.0])
    >>> b = (a * 2 + 1).retrieve()
    >>> cx.execute()
    >>> b.data()
    array([3., 5., 7.], dtype=float32)
"""

from __future__ import annotations

import os
import threading
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

import numpy as np

from . import ops
from .dtype import DType, as_dtype
from .graph_creation import GraphCreation
from .host_data import coerce_data
from .ops import GraphError, Op
from .shape import Expression, ShapeTracker, UnboundSymbolError, to_expr  # noqa: F401  (UnboundSymbolError: re-export)
from .thread_overlay import Overlay

if TYPE_CHECKING:  # runtimes sit above the graph layer: imported where they are used, never at import time
    from .runtime.reference import OpTiming


@dataclass(frozen=True)
class Edge:
    """A data dependency: input slot ``input_order`` of the consumer reads ``(src, output)`` through ``shape``."""

    src: int
    output: int
    shape: ShapeTracker


@dataclass
class Node:
    """A graph node: a primitive op, its ordered inputs, and its output's logical dims and dtype."""

    id: int
    op: Op
    inputs: list[Edge]
    dims: tuple[Expression, ...]
    dtype: DType
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or str(self.op)


_MAX_DIM = 2 ** 63 - 1  # symbols are 64-bit signed ints in compiled code


class Graph(GraphCreation):
    """A lazy computation graph and its run-time state (see the module docstring).

    Attributes:
        nodes: node id -> :class:`Node`.
        schedule: ``(before, after)`` pairs that only order execution.
        tensors: ``(node id, output slot)`` -> numpy array (contiguous, logical shape of that node).
        dyn_map: symbol name -> bound value.
        no_delete: nodes whose outputs survive ``execute`` (weights, kept tensors).
        to_retrieve: nodes whose outputs are kept for ``GraphTensor.data()`` after ``execute``.
        checks: run-time data checks (:meth:`add_check`), run after each ``execute``."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.schedule: set[tuple[int, int]] = set()
        # tensor values, symbol bindings and deferred inputs: the creating thread's, seen by every thread
        # through a per-thread overlay (see the ``tensors`` property)
        self._tensors: dict[tuple[int, int], np.ndarray] = {}
        self._dyn_map: dict[str, int] = {}
        self._deferred: dict[int, Callable[[Mapping[str, int]], object]] = {}
        self._owner = threading.get_ident()
        self._local = threading.local()
        self._lock = threading.RLock()  # one execute()/compile() at a time
        self.no_delete: set[int] = set()
        self.to_retrieve: set[int] = set()
        self.post_execute_hooks: list[Callable[["Graph"], None]] = []
        # run-time data checks (add_check): (tensors, check, exception type), run before carries and hooks
        self.checks: list[tuple[tuple, Callable[..., str | None], type]] = []
        # (output node, input node): after each execute the input takes the output's value (training state)
        self.carries: list[tuple[int, int]] = []
        self.diff_results: dict[str, dict] = {}
        # the runtime plug-in that executes the graph (luminal.runtime: execute(graph), stale(graph), optional
        # recycle/fetch/carry_on_device hooks); None: the reference interpreter (luminal.runtime.reference)
        self.runtime = None
        # replaced node -> (its replacement, view rewrite or None), for remapping user handles
        self.redirects: dict[int, tuple[int, Callable | None]] = {}
        # node -> (rule name, operand (node id, view) pairs, parameter, result dims): autograd differentiates the
        # node by that rule instead of through the primitives computing it (see luminal.training.autograd:
        # PyTorch's formulas for pow, maximum/minimum ties, cos and tan)
        self.grad_rules: dict[int, tuple] = {}
        self.version = 0  # bumped on every structural change (compiled runtimes rebuild when it moves)
        self._device_inputs = False  # set() was given a CUDA array (device="cuda" reads it; others refuse it)
        self.device: str | None = None
        self._next_id = 0
        self._order: list[int] | None = None
        self._consumer_counts: dict[tuple[int, int], int] | None = None
        self._input_ids: frozenset[int] | None = None

    # ------------------------------------------------------------------ per-thread state
    def _state(self, name: str):
        if threading.get_ident() == self._owner:
            return getattr(self, name)
        local = self._local.__dict__
        if name not in local:
            local[name] = Overlay(getattr(self, name))
        return local[name]

    @property
    def tensors(self) -> MutableMapping:
        """Node output values, keyed by ``(node id, output slot)``.

        Thread safety: the thread that created the graph owns the base values (weights and inputs it
        ``set()``s, results of its executes); every other thread sees them through its own overlay, where its
        own ``set()``s, symbol bindings and results live, invisible to the other threads. So threads sharing
        a compiled model each run their own inputs (``execute()`` itself runs one at a time per graph)."""
        return self._state("_tensors")

    @property
    def dyn_map(self) -> MutableMapping:
        """Symbol bindings (``{"batch": 8}``), per thread like :attr:`tensors`."""
        return self._state("_dyn_map")

    @property
    def deferred(self) -> MutableMapping:
        """Inputs whose data is produced from the symbol bindings at execute time, per thread like
        :attr:`tensors`."""
        return self._state("_deferred")

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in ("_local", "_lock"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("grad_rules", {})
        self.__dict__.setdefault("_device_inputs", False)
        self._owner = threading.get_ident()
        self._local = threading.local()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ building
    def add_op(self, op: Op, inputs: Sequence[tuple[int, ShapeTracker]] = (), dims: Iterable = (),
               dtype: DType | str = DType.float32, name: str = "", output_slots: Sequence[int] | None = None) -> int:
        """Add a node computing ``op`` over ``inputs`` (``(node id, view)`` pairs); returns its id."""
        dtype = as_dtype(dtype)
        edges = []
        for k, (src, shape) in enumerate(inputs):
            if not isinstance(shape, ShapeTracker):
                raise TypeError(f"{op.name}: input {k}'s view must be a ShapeTracker (a tensor's .tracker; its .shape "
                                f"is the Size of its dims), got {type(shape).__name__}")
            if src not in self.nodes and src in self.redirects:  # a handle of a node a compiler pass replaced
                src, shape = self.resolve(src, shape)
            if src not in self.nodes:
                raise GraphError(f"{op.name}: input {k} refers to node {src}, which is not in this graph")
            edges.append(Edge(src, 0 if output_slots is None else output_slots[k], shape))
        op.check([self.nodes[e.src].dtype for e in edges], [e.shape for e in edges])
        node_id = self._next_id
        self._next_id += 1
        self.nodes[node_id] = Node(node_id, op, edges, tuple(to_expr(d) for d in dims), dtype, name)
        self._invalidate()
        return node_id

    def add_check(self, tensors, check: Callable[..., str | None], exc: type = ValueError) -> None:
        """Validate computed values at run time, on every device.

        ``tensors`` (a ``GraphTensor`` or a sequence of them, usually small reductions such as a target's
        maximum) are retrieved; after each ``execute()``, before carried state moves on (:meth:`add_carry`) and
        before the post-execute hooks, ``check(*values)`` gets their numpy values and returns an error message,
        raised as ``exc``, or None. A failing check thus leaves training state (parameters, optimizer moments)
        as it was before the run. Losses use it to reject data PyTorch rejects (class indices out of range,
        probabilities outside [0, 1])."""
        handles = tuple(tensors) if isinstance(tensors, (list, tuple)) else (tensors,)
        for h in handles:
            if h.graph is not self:
                raise GraphError("add_check: the tensor belongs to a different graph")
            h.retrieve()
        self.checks.append((handles, check, exc))

    def _run_checks(self) -> None:
        for handles, check, exc in self.checks:
            message = check(*[h.data() for h in handles])
            if message:
                raise exc(message)

    def add_schedule_dependency(self, before: int, after: int) -> None:
        """Force ``before`` to run before ``after`` without a data edge."""
        self.schedule.add((before, after))
        self._invalidate()

    def set_dim(self, name: str, value: int) -> None:
        """Bind symbol ``name`` to ``value`` for the following executions.

        ``value`` must be an int in ``[0, 2**63 - 1]`` (compiled code holds symbols in 64-bit signed ints):
        a negative value raises ``ValueError``, a larger one ``OverflowError``, each naming the symbol."""
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"symbol '{name}' must be bound to a non-negative int (in [0, {_MAX_DIM}]), got "
                             f"{value!r}")
        if value > _MAX_DIM:
            raise OverflowError(f"symbol '{name}' bound to {value}, outside the allowed range [0, {_MAX_DIM}] (a "
                                "64-bit signed dimension)")
        self.dyn_map[name] = int(value)

    # ------------------------------------------------------------------ structure queries
    def _invalidate(self) -> None:
        self.version += 1
        self._order = None
        self._consumer_counts = None
        self._input_ids = None

    def consumers(self, node_id: int) -> list[int]:
        """Nodes with a data edge from ``node_id`` (with repeats for repeated use)."""
        return [n.id for n in self.nodes.values() for e in n.inputs if e.src == node_id]

    def consumer_edges(self) -> dict[int, list[tuple[int, int]]]:
        """node id -> ``[(consumer id, input slot), ...]`` for the whole graph (one pass)."""
        out: dict[int, list[tuple[int, int]]] = {i: [] for i in self.nodes}
        for n in self.nodes.values():
            for k, e in enumerate(n.inputs):
                out[e.src].append((n.id, k))
        return out

    # ------------------------------------------------------------------ mutation (for compiler passes)
    def set_input(self, node_id: int, slot: int, src: int, shape: ShapeTracker, output: int = 0) -> None:
        """Rewire input ``slot`` of ``node_id`` to read ``src`` through ``shape``."""
        self.nodes[node_id].inputs[slot] = Edge(src, output, shape)
        self._invalidate()

    def replace_uses(self, old: int, new: int, shape_fn=None) -> None:
        """Make every consumer of ``old`` read ``new`` instead (``shape_fn(edge_view)`` may rewrite the views).

        ``no_delete``/``to_retrieve`` membership, stored retrieved data and user handles (through
        :attr:`redirects`, see :meth:`follow_redirects`) move to ``new``. ``new`` must produce the same
        logical elements in the same row-major order as ``old``."""
        if old == new:
            return
        for n in self.nodes.values():
            for k, e in enumerate(n.inputs):
                if e.src == old:
                    n.inputs[k] = Edge(new, e.output, e.shape if shape_fn is None else shape_fn(e.shape))
        for marks in (self.no_delete, self.to_retrieve):
            if old in marks:
                marks.discard(old)
                marks.add(new)
        self.schedule = {(new if a == old else a, new if b == old else b) for a, b in self.schedule if
                         (new if a == old else a) != (new if b == old else b)}
        self.redirects[old] = (new, shape_fn)
        self._invalidate()

    def add_carry(self, output: int, input: int) -> None:
        """After every ``execute()``, hand the value of node ``output`` to the input node ``input``.

        This is how state crosses steps (updated parameters, optimizer moments): the step's result becomes
        the next step's input without a copy (the buffers are swapped; the compiled runtime writes the next
        result into the input's previous array). ``output`` is marked for retrieval."""
        for nid in (output, input):
            if nid not in self.nodes:
                raise GraphError(f"add_carry: node {nid} is not in this graph")
        src, dst = self.nodes[output], self.nodes[input]
        if not isinstance(dst.op, ops.Input):
            raise GraphError(f"add_carry: node {input} '{dst.label}' is a {dst.op.name}, not an input")
        if output == input:
            raise GraphError(f"add_carry: node {input} cannot carry into itself")
        if src.dtype != dst.dtype or src.dims != dst.dims:
            raise GraphError(f"add_carry: '{src.label}' is {src.dtype}{[str(d) for d in src.dims]} but input "
                             f"'{dst.label}' is {dst.dtype}{[str(d) for d in dst.dims]}; they must match")
        if any(i == input for _, i in self.carries):
            raise GraphError(f"add_carry: input '{dst.label}' already receives a carried value")
        self.carries.append((output, input))
        self.to_retrieve.add(output)

    def resolved_carries(self) -> list[tuple[int, int]]:
        """``(live output, input)`` per carry, the output followed through :attr:`redirects` (once per version)."""
        key = (self.version, tuple(self.carries))
        if getattr(self, "_carry_cache", (None,))[0] != key:
            empty = ShapeTracker.contiguous_of(())  # (resolve() returns a node still in the graph as it is)
            self._carry_cache = (key, [(self.resolve(o, empty)[0], i) for o, i in self.carries])
        return self._carry_cache[1]

    def _apply_carries(self) -> None:
        tensors, recycle = self.tensors, getattr(self.runtime, "recycle", None)
        for output, input in self.resolved_carries():
            new = tensors.get((output, 0))
            if new is None:
                on_device = getattr(self.runtime, "carry_on_device", None)  # the value stayed on the GPU
                if on_device is not None and on_device(self, output, input):
                    tensors.pop((input, 0), None)
                    continue
                raise GraphError(f"carry: node {output} produced no value")
            dims = self.nodes[input].dims
            if new.ndim != len(dims):  # a compiler pass replaced the output by a node of other rank (a squeeze)
                want = tuple(d.evaluate(self.dyn_map) for d in dims)
                if new.size == int(np.prod(want, dtype=np.int64)) and new.flags.c_contiguous:
                    new = new.reshape(want)
            old = tensors.get((input, 0))
            tensors[(input, 0)] = new
            if recycle is not None:
                recycle(output, old if old is not new else None)

    def remove_node(self, node_id: int) -> None:
        """Delete a node that nothing reads any more (its data and schedule edges go with it)."""
        users = self.consumers(node_id)
        if users:
            raise GraphError(f"cannot remove node {node_id} '{self.nodes[node_id].label}': nodes {users} read it")
        del self.nodes[node_id]
        for key in [k for k in self.tensors if k[0] == node_id]:
            del self.tensors[key]
        self.no_delete.discard(node_id)
        self.to_retrieve.discard(node_id)
        self.deferred.pop(node_id, None)
        self.grad_rules.pop(node_id, None)
        self.schedule = {(a, b) for a, b in self.schedule if node_id not in (a, b)}
        self._invalidate()

    def resolve(self, node_id: int, shape: ShapeTracker) -> tuple[int, ShapeTracker]:
        """Follow :attr:`redirects` from a possibly replaced node (and a view of it) to the live node."""
        hops = 0
        while node_id not in self.nodes and node_id in self.redirects and hops <= len(self.redirects):
            node_id, shape_fn = self.redirects[node_id]
            if shape_fn is not None:
                shape = shape_fn(shape)
            hops += 1
        return node_id, shape

    def follow_redirects(self, handles) -> None:
        """Point every tensor handle inside ``handles`` (nested tuples, lists, dicts, sets and objects such as
        modules) at the live replacement of its node."""
        seen: set[int] = set()
        stack = [handles]
        while stack:
            obj = stack.pop()
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, np.ndarray)):
                continue
            seen.add(id(obj))
            if getattr(obj, "graph", None) is self and isinstance(getattr(obj, "id", None), int):
                obj.id, obj.tracker = self.resolve(obj.id, obj.tracker)
                continue
            if isinstance(obj, dict):
                stack.extend(obj.values())
            elif isinstance(obj, (list, tuple, set, frozenset)):
                stack.extend(obj)
            elif hasattr(obj, "__dict__"):
                stack.extend(vars(obj).values())

    def toposort(self) -> list[int]:
        """Node ids in an execution order honouring data and schedule edges (cached until the graph changes)."""
        if self._order is not None:
            return self._order
        deps: dict[int, set[int]] = {i: {e.src for e in n.inputs} for i, n in self.nodes.items()}
        for before, after in self.schedule:
            if before in deps and after in deps:
                deps[after].add(before)
        users: dict[int, list[int]] = {i: [] for i in self.nodes}
        for i, ds in deps.items():
            for d in ds:
                users[d].append(i)
        remaining = {i: len(ds) for i, ds in deps.items()}
        ready = sorted(i for i, r in remaining.items() if r == 0)
        order = []
        import heapq
        heapq.heapify(ready)
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                remaining[u] -= 1
                if remaining[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) != len(self.nodes):
            raise GraphError("the graph has a cycle (check schedule dependencies)")
        self._order = order
        counts: dict[tuple[int, int], int] = {}
        for n in self.nodes.values():
            for e in n.inputs:
                counts[(e.src, e.output)] = counts.get((e.src, e.output), 0) + 1
        self._consumer_counts = counts
        return order

    def __len__(self) -> int:
        return len(self.nodes)

    def summary(self) -> str:
        """A short text summary: node count, counts per op type, inputs and outputs."""
        counts: dict[str, int] = {}
        for n in self.nodes.values():
            counts[n.op.name] = counts.get(n.op.name, 0) + 1
        inputs = [n for n in self.nodes.values() if isinstance(n.op, ops.Input)]
        ops_txt = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines = [f"Graph with {len(self.nodes)} nodes, {sum(len(n.inputs) for n in self.nodes.values())} data edges, "
                 f"{len(self.schedule)} schedule edges",
                 f"  ops: {ops_txt}",
                 "  inputs: " + ", ".join(f"{n.label}{list(n.dims)}:{n.dtype.value}" for n in inputs),
                 f"  retrieved: {sorted(self.to_retrieve)}  kept: {sorted(self.no_delete)}"]
        if self.dyn_map:
            lines.append(f"  symbols: {self.dyn_map}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ compilation
    def compile(self, compiler=None, remap=(), device: str | None = None, search: str | None = None,
                budget_s: float | None = None):
        """Run ``compiler`` (an object with ``compile(graph, remap)``, a callable, or a sequence of them), then
        choose the runtime (:func:`luminal.runtime.devices`): ``device="cpu"`` (generated C) or ``"reference"``
        (the numpy interpreter, :mod:`luminal.runtime.reference`).

        Without a ``compiler``, a compiled device runs the default pipeline
        (:func:`luminal.compiler.GenericCompiler`: equality saturation over the graph, dead-node removal,
        scheduling); the reference interpreter runs the graph as built. ``compiler=()`` runs no pass.
        Handles of replaced nodes follow their replacement when read (``data()``), passed in ``remap`` or not.

        ``search`` picks how a compiled device chooses between implementations of its hot kernels (GEMMs:
        OpenBLAS or luminal's own GEMM in several tilings), measured on this machine and remembered in a tuning
        cache: ``"off"`` (default, or ``$LUMINAL_SEARCH``) uses the cached winners and otherwise the default
        plan at once; ``"quick"`` / ``"full"`` measure what is not cached (within ``budget_s`` seconds, default
        10 / 60) before the first run; ``"background"`` runs at once and swaps in the tuned library between
        two ``execute()`` calls. See ``docs/search.md``.

        ``remap`` holds the user's ``GraphTensor`` handles (nested tuples, lists, dicts or modules) so passes
        that replace nodes keep them valid. ``device`` defaults to ``$LUMINAL_DEVICE`` (else ``"reference"``).
        Returns the compiler's output.
        """
        with self._lock:
            return self._compile(compiler, remap, device, search, budget_s)

    def _compile(self, compiler, remap, device, search, budget_s):
        out = None
        device = device or os.environ.get("LUMINAL_DEVICE", "reference")
        from .runtime import check_device, prepare  # validate before the (slow) passes run
        from .runtime.search import check_budget, check_level

        self._compile_device, self._search_options = check_device(device), (check_level(search), check_budget(budget_s))
        prepare(self, device)  # (e.g. the CPU's GEMM library parts start compiling while the passes run)
        if compiler is None and device != "reference":
            from .compiler.generic import GenericCompiler  # passes live above the graph layer

            compiler = GenericCompiler(device)
        if compiler is not None:
            from .compiler.base import run  # passes live above the graph layer; this is the user's entry point

            out = run(compiler, self, remap)
        self._invalidate()
        self.toposort()
        self.reset()
        self.device = device
        self._attach_failure = None  # an explicit compile always tries again
        self._attach_runtime()
        return out

    def _attach_runtime(self) -> None:
        from .runtime import attach  # backends are plug-ins above the graph layer

        failed = getattr(self, "_attach_failure", None)
        if failed is not None and failed[0] == (self.version, self.device):
            # the same graph failed to build for this device: raise again instead of recompiling every execute()
            raise RuntimeError(f"this graph failed to build for device {self.device!r} (not retried until the "
                               f"graph or the device changes): {failed[1]}") from failed[1]
        try:
            attach(self, self.device, *getattr(self, "_search_options", (None, None)))
        except Exception as e:
            self.runtime = None
            self._attach_failure = ((self.version, self.device), e)
            raise
        self._attach_failure = None

    def reset(self) -> None:
        """Drop every stored tensor that is not an input's data or in ``no_delete``."""
        keep = self._persistent_ids()
        tensors = self.tensors
        for key in [k for k in tensors if k[0] not in keep]:
            del tensors[key]

    def _persistent_ids(self) -> set[int]:
        if self._input_ids is None:  # cached until the structure changes (_invalidate)
            self._input_ids = frozenset(i for i, n in self.nodes.items() if isinstance(n.op, ops.Input))
        return self._input_ids | self.no_delete

    # ------------------------------------------------------------------ execution
    def execute(self) -> None:
        """Run the graph. Results of ``retrieve()``d tensors are then available through ``data()``.

        Safe to call from several threads: each thread's inputs and results are its own (see
        :attr:`tensors`) and the runs take turns (the compiled code parallelizes each run itself)."""
        with self._lock:
            self._execute()

    def _execute(self) -> None:
        if self.device is None and os.environ.get("LUMINAL_DEVICE", "reference") != "reference":
            self.device = os.environ["LUMINAL_DEVICE"]  # uncompiled graphs follow LUMINAL_DEVICE
        if self.device not in (None, "reference") and (self.runtime is None or self.runtime.stale(self)):
            self._attach_runtime()
        if self._device_inputs and self.device != "cuda":  # set() saw a CUDA array: only then scan the inputs
            self._refuse_device_arrays()
        runtime = self.runtime
        if runtime is None:  # never compiled (or a compiled device fell back): the reference interpreter
            from .runtime.reference import REFERENCE as runtime  # runtimes are plug-ins above the graph layer
        runtime.execute(self)
        self._finish_run()

    def _finish_run(self) -> None:
        """After a run: the data checks, then the carries, then the post-execute hooks."""
        self._run_checks()
        self._apply_carries()
        for hook in list(self.post_execute_hooks):
            hook(self)

    def _refuse_device_arrays(self) -> None:
        tensors = self.tensors
        for node_id in self._persistent_ids():
            arr = tensors.get((node_id, 0))
            if arr is not None and hasattr(arr, "__cuda_array_interface__"):
                raise TypeError(f"input '{self.nodes[node_id].label}' holds a CUDA array, but this graph runs on "
                                f"device {self.device or 'reference'!r}; set() a numpy array, or compile with "
                                "device='cuda'")

    def execute_debug(self, print_table: bool = True) -> list[OpTiming]:
        """Like :meth:`execute` but always on the reference interpreter (whatever the device), timing each op;
        prints the table (node, op, dtype, shape, milliseconds, then the total) and returns its rows
        (:class:`~luminal.runtime.reference.OpTiming`)."""
        from .runtime.reference import execute_timed, format_timings  # the interpreter is a runtime plug-in

        rows = execute_timed(self)
        self._finish_run()
        if print_table:
            print(format_timings(rows))
        return rows

    def _bindings(self) -> dict[str, int]:
        return dict(self.dyn_map)

    def explain_gather_error(self) -> str | None:
        """The reference interpreter's message for the first out-of-range Gather index of the last run, or None.

        For compiled runtimes, whose kernels only report that some index was out of range: each Gather's index
        is recomputed with the reference ops from the run's inputs, evaluating only the nodes it depends on
        (:func:`luminal.runtime.reference.explain_gather_error`)."""
        from .runtime.reference import explain_gather_error  # the interpreter is a runtime above the graph layer

        return explain_gather_error(self)

    def _load_input(self, node: Node, out_shape: tuple[int, ...], bindings: Mapping[str, int]) -> None:
        """Make input ``node``'s data ready for a run (a deferred input's data is produced from ``bindings``) or
        explain why it cannot be. Part of the graph's state, shared by every runtime: the reference interpreter
        calls it for each input, the compiled runtimes for an input whose array is missing or of another shape."""
        key = (node.id, 0)
        if node.id in self.deferred:
            data = np.asarray(self.deferred[node.id](bindings))
            self.tensors[key] = coerce_data(data, node.dtype, node.label)
        if key not in self.tensors:
            raise GraphError(f"input '{node.label}' (node {node.id}, shape {list(node.dims)}) has no data; call "
                             "set() on it before execute()")
        have = self.tensors[key].shape
        if have != out_shape:
            raise GraphError(f"input '{node.label}' holds data of shape {have} but its shape {list(node.dims)} "
                             f"evaluates to {out_shape} with the bound symbols {dict(bindings)}")

    # ------------------------------------------------------------------ export
    def to_dot(self, show_shapes: bool = True) -> str:
        """Graphviz DOT source of the graph (nodes labelled with op, dtype and shape)."""
        from .graph_export import to_dot
        return to_dot(self, show_shapes)

    def export_dot(self, path: str | os.PathLike, render: str | None = "svg", show_shapes: bool = True) -> str | None:
        """Write DOT to ``path``; when Graphviz's ``dot`` exists also render ``path`` + ``.svg``/``.png``.

        Returns the rendered file's path, or ``None`` when nothing was rendered.
        """
        from .graph_export import export_dot
        return export_dot(self, path, render, show_shapes)

    display = export_dot


def __getattr__(name: str):
    # OpTiming moved to the reference runtime; ``from luminal.graph import OpTiming`` keeps working without this
    # module importing a runtime when it loads
    if name == "OpTiming":
        from .runtime.reference import OpTiming
        return OpTiming
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
