"""The GPU runtime: the kernel IR rendered as Triton kernels (:mod:`luminal.codegen.triton`).

Two devices share all of this module's code and differ only in where memory lives:

* ``"gpu-interpret"``: Triton's interpreter (``TRITON_INTERPRET=1``) runs the generated kernels on the CPU, on
  **torch CPU tensors**. Slow, but it executes exactly the source a GPU would compile, so every GPU kernel is tested
  on machines without a GPU. ``TRITON_INTERPRET`` is read when ``triton`` is imported: this module sets it before
  importing triton for this device; a process that imported triton without it cannot switch (a clear error says so).
* ``"cuda"`` (verified on an H100 and H200s, see docs/gpu.md): memory from **CuPy**; CuPy arrays are handed to
  Triton through a tiny wrapper with ``data_ptr()`` and ``dtype``; every copy and launch goes to one stream of the
  runtime's own.

Memory: inputs and kept outputs have their own allocations, intermediates share one arena planned from their
lifetimes (:mod:`.arena`). An input is copied to the device only when ``set()`` gave it new data (or a CUDA array,
copied device -> device); carried training state swaps buffers with the output that produced it. Results are copied
to the host after each run, or stay on the device until ``data()`` asks (``host_outputs = False``); carried training
state (weights, optimizer moments) stays on the device in either mode, fetched when something reads it. The launches
of a run are captured into a CUDA graph at the second run with the same bindings and buffer assignment (in segments
around cuBLAS calls) and replayed. On ``cuda`` the measured search times tile configurations and cuBLAS for large
GEMMs. Errors found by kernels (gather index out of range, integer modulo by zero) are read back from a one-element
buffer after the run and raised like the CPU backend does.

``LUMINAL_DEBUG=1`` prints the generated Triton source when a graph compiles.

The memory classes live in :mod:`.gpu_memory`, the GEMM configurations and cuBLAS layouts in :mod:`.gpu_gemm`.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import threading
import warnings

import numpy as np

from ..codegen.gemm_lowp import narrow_operands
from ..codegen.kernel import Program, lower
from ..codegen.triton import TritonProgram, render
from ..codegen.triton_reduce import launch_sizes
from ..dtype import DType
from ..codegen.triton_support import storage_name
from ..graph import Graph
from ..shape import ShapeTracker
from .gpu_gemm import (GEMM_SEARCH_MIN_WORK, GemmConfig, _gemm_tuning_key, gemm_operand_layout, gemm_programs,
                       measure_gemm)
from .gpu_compile import NO_FP_FUSION, _load_module, compile_parallel
from .gpu_memory import INSTALL_HINT, CuPyMemory, TorchCPUMemory

_ERRORS = {1: (IndexError, "a Gather index is out of range for its axis"),
           2: (ZeroDivisionError, "integer modulo by zero"),
           4: (IndexError, "a ScatterAdd index is out of range for its axis")}


def _import_triton(interpret: bool):
    """Import triton (with ``TRITON_INTERPRET=1`` for the interpreter); a clear error when it is missing."""
    if interpret:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("device 'gpu-interpret' needs Triton's interpreter, but triton was already imported "
                               "in this process without TRITON_INTERPRET=1; set TRITON_INTERPRET=1 before "
                               "anything imports triton (or use the device in a fresh process)")
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"the GPU backend needs Triton, which is not installed ({e}); install it with "
                           f"{INSTALL_HINT}") from e
    return triton


# ---------------------------------------------------------------------------- runtime
class GPURuntime:
    """Executes a graph as Triton kernels on ``memory`` (see the module docstring)."""

    def __init__(self, graph: Graph, device: str, memory, search: str = "off"):
        self.graph = graph
        self.device = device
        self.memory = memory
        # GEMM operands that are only float32 conversions of bfloat16 / float16 values (autocast) are read as such:
        # both low -> tensor cores (luminal.codegen.gemm_lowp.narrow_operands, shared with the CPU backend)
        self.program: Program = narrow_operands(lower(graph), store_as=(DType.bfloat16, DType.float16),
                                               round_on_load=False, widen_readers=True)
        self.tprogram: TritonProgram = render(self.program, interpret=device == "gpu-interpret")
        if os.environ.get("LUMINAL_DEBUG", "0") not in ("", "0"):
            print(f"# luminal: Triton source for device {device!r}\n{self.tprogram.source}")
        self.module = _load_module(self.tprogram.source)
        from ..codegen.kernel import GemmKernel

        self._gemm_kernels = {k.out: k for k in self.program.kernels if isinstance(k, GemmKernel)}
        self._version = graph.version
        self._key = None
        self._buffers: dict[int, object] = {}
        self._sizes: dict[int, int] = {}
        self.arena_bytes = 0  # bytes of the intermediates' arena at the current bindings
        self._err = memory.zeros(1, "int32")
        self._lock = threading.Lock()
        self._uploaded: dict[int, object] = {}    # input node -> the host array last copied into its buffer
        self._resident: dict[int, tuple] = {}     # id(host array) -> (array, output node) of the last download
        self._graphs: dict[tuple, object] = {}    # bindings key -> captured CUDA graph of every launch
        self._warm: set = set()                   # plan keys (_plan_key) that ran uncaptured once
        # carried inputs whose buffer is currently swapped with the output carried into them (see _upload); part
        # of the plan key: a captured CUDA graph holds the pointers of one assignment
        self._swapped: frozenset = frozenset()
        self._swap_carries = os.environ.get("LUMINAL_CARRY_SWAP", "1") != "0"  # (read once: not per execute)
        self._carried_cache: tuple | None = None  # (graph version, carries) -> carried output: inputs it feeds
        self._compiled = False                    # every kernel compiled (in parallel) before its first launch
        self.graph_replays = 0                    # executes served by a captured CUDA graph (for tests, stats)
        self.search = search
        self._gemm_choice: dict[tuple, tuple] = {}  # (kernel, M, N, K, batch) -> GemmConfig
        self.search_log: list[dict] = []           # measured GEMM candidates (search != "off")
        # True: every execute() copies the kept results to the host (data() is then free). False: they stay on
        # the device until data() asks (fetch) or data(device=True) copies them on the device. Carried values
        # (training state) stay on the device in both modes; a read between steps fetches them (DeviceValue).
        self.host_outputs = True
        self._pending: dict[int, dict] = {}      # kept result left on the device -> its bindings
        self._carried_in: dict[int, int] = {}    # input whose carried value is only on the device -> its buffer

    @property
    def source(self) -> str:
        """The generated Triton source."""
        return self.tprogram.source

    def stale(self, graph: Graph) -> bool:
        """True when the graph changed since this runtime was built (it is then rebuilt)."""
        return graph.version != self._version

    def _allocate(self, bindings) -> None:
        """Device buffers at ``bindings`` (re-made when the bindings change; captured graphs and resident values
        of the old buffers are dropped with them): inputs and kept outputs get their own allocation, the
        intermediates share one arena planned from their lifetimes in kernel order (:mod:`.arena`)."""
        self._buffers, self._sizes = {}, {}
        self._uploaded.clear()
        self._resident.clear()
        self._graphs.clear()
        self._warm = set()
        self._swapped = frozenset()
        from .arena import lifetimes, place

        fused = self.tprogram.fused  # kernels computed in another's launch (epilogue, run, row group): its step
        steps = [fused.get(i, i) for i in range(len(self.program.kernels))]
        skip = self.tprogram.unwritten  # no launch writes them: not in the arena, a 1-element placeholder each
        offsets, total = place([t for t in lifetimes(self.program, bindings, steps) if t[3] not in skip], align=256)
        self._in_arena = set(offsets)
        self.arena_bytes = total
        self._arena = None
        try:
            self._arena = self.memory.empty(total, "uint8") if offsets else None
        except MemoryError as e:
            raise MemoryError(f"device {self.device!r}: out of memory allocating this graph's arena of "
                              f"{total / 2**20:.1f} MiB (its intermediates at the bindings {dict(bindings)}): "
                              f"{e}") from e
        for node_id, (dims, dtype) in self.program.buffers.items():
            n = 1
            for d in dims:
                n *= d.evaluate(bindings)
            self._sizes[node_id] = n
            if node_id in offsets:
                self._buffers[node_id] = self.memory.view(self._arena, offsets[node_id], n, storage_name(dtype))
            else:
                self._buffers[node_id] = self.memory.empty(1 if node_id in skip else n, storage_name(dtype))
        for alias, target in self.program.aliases.items():
            self._buffers[alias] = self._buffers[target]

    def execute(self, graph: Graph) -> None:
        """Copy the changed inputs to the device, run every kernel (a CUDA-graph replay once warm), copy results."""
        with self._lock:
            self._execute(graph)

    def _execute(self, graph: Graph) -> None:
        bindings = self._upload(graph)
        self._launch(bindings)
        self._finish(graph, bindings)

    def _upload(self, graph: Graph) -> dict:
        """Bind the symbols (re-allocating on a new binding) and bring the inputs to the device.

        An input is copied host -> device only when its array changed since the last copy (``set()`` stores a
        new array object each call); a CUDA array given to ``set()`` is copied device -> device; the array a
        carried output was downloaded into (training state) is copied from that output's buffer, device ->
        device, instead of uploading it again."""
        dyn = graph.dyn_map
        symbols = self.tprogram.symbols
        key = tuple(dyn.get(s) for s in symbols)
        if key != self._key:
            missing = [s for s, v in zip(symbols, key) if v is None]
            if missing:
                from ..shape import UnboundSymbolError
                raise UnboundSymbolError(f"no value bound for symbol(s) {missing}; bind them with set() data or "
                                         "Graph.set_dim")
            for node_id in list(self._carried_in):  # state only on the device: to the host before re-allocating
                self._fetch(graph, node_id)
            self._allocate(dict(dyn))
            self._key = key
        bindings = dict(dyn)
        graph.reset()
        tensors = graph.tensors
        memory = self.memory
        carried_into = collections.Counter(self._carried_in.values())  # output -> inputs it is carried into
        deferred_inputs, carried_in = graph.deferred, self._carried_in
        for node_id in self.program.inputs:
            arr, deferred = tensors.get((node_id, 0)), node_id in deferred_inputs
            if arr is not None and self._uploaded.get(node_id) is arr and not deferred and node_id not in carried_in:
                continue  # copied already (most of a step's inputs: its weights)
            node = graph.nodes[node_id]
            shape = tuple(d.evaluate(bindings) for d in node.dims)
            source = self._carried_in.get(node_id)
            if arr is None and source is not None and not deferred:  # carried state that stayed on the device
                if source != node_id:
                    if self._can_swap(node_id, source, carried_into[source]):  # the output's buffer becomes the
                        self._swap(node_id, source)                           # input's: no copy
                    else:
                        memory.copy(self._buffers[node_id], self._buffers[source], self._sizes[node_id])
                    self._carried_in[node_id] = node_id
                    carried_into[source] -= 1
                    carried_into[node_id] += 1
                continue
            if node_id in self._carried_in:
                carried_into[self._carried_in.pop(node_id)] -= 1
            if arr is None or tuple(arr.shape) != shape or deferred:
                graph._load_input(node, shape, bindings)
                arr = tensors[(node_id, 0)]
            buf = self._buffers[node_id]
            if memory.is_device_array(arr):
                memory.copy(buf, arr, self._sizes[node_id])
                self._uploaded.pop(node_id, None)
                continue
            if self._uploaded.get(node_id) is arr and not deferred:
                continue
            resident = self._resident.get(id(arr))
            if resident is not None and resident[0] is arr:  # the host copy of a carried output (training state)
                if self._can_swap(node_id, resident[1], self._carried_cache[1][resident[1]]):
                    self._swap(node_id, resident[1])  # its buffer becomes the input's, as on the device path
                else:
                    memory.copy(buf, self._buffers[resident[1]], self._sizes[node_id])
            else:
                dtype = self.program.buffers[node_id][1]
                host = np.ascontiguousarray(arr, dtype=dtype.numpy)
                if storage_name(dtype) != dtype.value:
                    host = host.view(storage_name(dtype))
                memory.upload(buf, host)
            self._uploaded[node_id] = arr
        return bindings

    def _can_swap(self, node_id: int, source: int, carried_into: int) -> bool:
        """Whether carried input ``node_id`` may take over the buffer of ``source``, the output carried into it
        (training state: weights, optimizer moments), instead of copying it: both have their own allocation of
        the same size and type (not the arena, not aliased), and ``source`` is carried into no other input
        (``carried_into``: into how many). The input's old buffer becomes the output's, which this step
        overwrites. A CUDA graph is captured per assignment (two alternate)."""
        if not self._swap_carries:
            return False
        aliased = self.program.aliases
        if node_id in self._in_arena or source in self._in_arena or source in self.program.inputs or \
                node_id in aliased or source in aliased or node_id in aliased.values() or source in aliased.values():
            return False
        if self._sizes[node_id] != self._sizes[source] or \
                self.program.buffers[node_id][1] != self.program.buffers[source][1]:
            return False
        return carried_into == 1

    def _swap(self, node_id: int, source: int) -> None:
        b = self._buffers
        b[node_id], b[source] = b[source], b[node_id]
        self._swapped = self._swapped ^ {node_id}

    def _plan_key(self) -> tuple:
        return self._key, self._swapped

    def _launch(self, bindings) -> None:
        """Run every kernel: replay the captured CUDA graph(s) of these bindings; else launch one by one, and on
        the second run with the same bindings capture the launches (``cuda`` only; ``LUMINAL_CUDA_GRAPHS=0``
        turns capture off; a failed capture warns once and runs uncaptured). cuBLAS calls cannot be captured
        (CuPy refuses them during capture), so a program with cuBLAS GEMMs is captured as the segments between
        them: each execute then replays ``segments`` graphs and makes the cuBLAS calls in between."""
        memory = self.memory
        key = self._plan_key()
        plan = self._graphs.get(key)
        if plan is not None:
            self._replay(plan, memory.stream)
            return
        if memory.graphs and key in self._warm:  # (carried buffers swapped: two keys alternate, each captured)
            plan = self._capture(bindings)
            if plan is not None:
                if len(self._graphs) >= 16:  # bounded: each assignment of swapped buffers has its own graph
                    self._graphs.pop(next(iter(self._graphs)))
                self._graphs[key] = plan
                self._replay(plan, memory.stream)
                return
        if not self._compiled:
            self._compiled = True
            self._compile_all(bindings)
        with memory.launching():
            for _, step in self._steps(bindings, tune=self.search != "off"):
                step()
        self._warm.add(key)

    def _launch_args(self, launch, bindings) -> tuple[list, list]:
        """The arguments of one launch (buffers, error buffer, symbols, extra ints) and the extra ints alone."""
        args = [self.memory.arg(self._buffers[b]) for b in launch.buffers] + [self.memory.arg(self._err)]
        args += [bindings[s] for s in launch.symbols]
        extra = [e.evaluate(bindings) for e in launch.extra]
        return args + extra, extra

    def _compile_all(self, bindings) -> None:
        """Compile every kernel (GEMMs in their cached or default configuration) at once, on a pool of threads
        (``cuda`` only; Triton otherwise compiles each kernel when it is first launched, one after another: most
        of a first ``execute()``). Needs Triton's asynchronous compilation (``AsyncCompileMode``); without it, or
        if anything fails here, the kernels compile at their launch as before."""
        if self.device != "cuda":
            return
        jobs, seen = [], set()
        for launch in self.tprogram.launches:
            fn = getattr(self.module, launch.name)
            args, extra = self._launch_args(launch, bindings)
            if launch.kind == "gemm":
                cfg = self._gemm_choice.get((launch.name, *extra))
                kwargs = cfg.launch_kwargs() if cfg is not None and not cfg.cublas else launch.constexprs
            else:
                sizes = launch_sizes(launch, bindings)
                if sizes is None:  # (a long-rowed group's kernels one by one compile at their first launch)
                    continue
                kwargs = sizes[0]
            key = (launch.name, tuple(sorted(kwargs.items())))
            if key not in seen:  # kernels sharing a function (repeated layers) compile once
                seen.add(key)
                jobs.append((fn, args, kwargs))
        compile_parallel(jobs)

    def _replay(self, plan, stream) -> None:
        with self.memory.launching():
            for kind, item in plan:
                if kind == "graph":
                    item.launch(stream)
                else:
                    item()
        self.graph_replays += 1

    def _capture(self, bindings):
        """``[("graph", CUDA graph) | ("call", cuBLAS call), ...]`` in program order, or None (capture failed)."""
        stream = self.memory.stream
        plan, pending = [], []

        def flush():
            if not pending:
                return
            stream.begin_capture()
            try:
                for step in pending:
                    step()
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass
                raise
            plan.append(("graph", stream.end_capture()))
            pending.clear()

        try:
            with self.memory.launching():
                for capturable, step in self._steps(bindings, tune=False):
                    if capturable:
                        pending.append(step)
                    else:
                        flush()
                        plan.append(("call", step))
                flush()
        except Exception as e:  # noqa: BLE001 - capture is an optimization
            self._no_graphs(e)
            return None
        return plan

    def _no_graphs(self, e: Exception) -> None:
        self.memory.graphs = False
        warnings.warn(f"luminal (cuda): CUDA graph capture failed ({type(e).__name__}: {e}); launching kernels one "
                      "by one", RuntimeWarning, stacklevel=3)

    def _steps(self, bindings, tune: bool = False):
        """``(capturable, call)`` per kernel in program order; each call launches asynchronously on the device
        (Triton kernels; cuBLAS GEMMs, not capturable). GEMMs take their measured tile configuration
        (``search`` on ``cuda``) or the default one; with ``tune`` a GEMM's candidates are timed when it is
        reached (its operands are ready: the steps before it have run). The first step zeroes the error flag."""
        yield True, functools.partial(self.memory.clear, self._err)  # (in the CUDA graph: no upload per execute)
        for launch in self.tprogram.launches:
            fn = getattr(self.module, launch.name)
            args, extra = self._launch_args(launch, bindings)
            if launch.kind == "gemm" and self.device == "cuda":
                cfg = self._gemm_config(launch, fn, args, extra, tune, bindings)
                if cfg.cublas:  # the views are made once: the buffers stay until the bindings change
                    yield False, functools.partial(self._cublas, launch, None, self._cublas_views(launch, bindings))
                    call = launch.epilogue and self._plain_call(launch.epilogue, bindings)
                    if call is not None:  # the epilogue the Triton GEMM would have fused (None: no elements)
                        yield True, call
                    continue
                programs = gemm_programs(extra, cfg)
                if programs > 0:
                    yield True, functools.partial(_run_triton, fn, programs, args, cfg.launch_kwargs())
                continue
            call = self._plain_call(launch, bindings, fn, args)
            if call is not None:
                yield True, call

    def _plain_call(self, launch, bindings, fn=None, args=None):
        """A call launching a non-GEMM kernel on its grid (None when the grid is empty); a row group whose rows
        are longer than one chunk at ``bindings`` runs its kernels one by one (``launch.fallback``)."""
        sizes = launch_sizes(launch, bindings)
        if sizes is None:
            calls = [c for c in (self._plain_call(item, bindings) for item in launch.fallback) if c is not None]
            return functools.partial(_run_all, calls) if calls else None
        if fn is None:
            fn = getattr(self.module, launch.name)
            args, _ = self._launch_args(launch, bindings)
        constexprs, programs = sizes
        return functools.partial(_run_triton, fn, programs, args, constexprs) if programs > 0 else None

    def _gemm_config(self, launch, fn, args, extra, tune: bool, bindings) -> "GemmConfig":
        batch, M, N, K = extra
        key = (launch.name, batch, M, N, K)
        cfg = self._gemm_choice.get(key)
        if cfg is not None:
            return cfg
        default = GemmConfig(*[launch.constexprs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")],
                             launch.constexprs.get("num_warps", 4), launch.constexprs.get("num_stages", 3))
        tkey = _gemm_tuning_key(self.tprogram.source, launch.name, extra)
        from . import tuning

        cached = tuning.lookup(tkey, valid=lambda e: GemmConfig.parse(e["choice"]) is not None and (
            not GemmConfig.parse(e["choice"]).cublas or self._cublas_views(launch, bindings) is not None))
        if cached is not None:
            cfg = GemmConfig.parse(cached["choice"])
        elif tune and batch * M * N * K >= GEMM_SEARCH_MIN_WORK:
            cfg = self._measure_gemm(launch, fn, args, extra, default, bindings)
            tuning.store(tkey, {"choice": cfg.name, "seconds": cfg.seconds})
        else:
            cfg = default
        self._gemm_choice[key] = cfg
        return cfg

    def _cublas_views(self, launch, bindings):
        """CuPy views ``(A [*b, M, K], B [*b, K, N], C [*b, M, N])`` of one GEMM's buffers for cuBLAS (through
        ``cupy.matmul``), or None when an operand view is masked or the dtype is not float32/float64."""
        kernel = self._gemm_kernels.get(launch.out)
        if kernel is not None and any(self.program.buffers[x][1] != kernel.dtype for x in (kernel.a, kernel.b)):
            return None  # an operand stored as bfloat16 / float16 (read converted: Triton only)
        layout = gemm_operand_layout(kernel, bindings) if kernel is not None else None
        if layout is None:
            return None
        cupy = self.memory.cupy
        item = np.dtype(kernel.dtype.value).itemsize

        def view(buf, dims, strides, offset):
            ptr = cupy.cuda.MemoryPointer(buf.data.mem, buf.data.ptr - buf.data.mem.ptr + offset * item)
            return cupy.ndarray(dims, dtype=buf.dtype, memptr=ptr, strides=tuple(st * item for st in strides))

        (a_dims, a_strides, a_off), (b_dims, b_strides, b_off), shape = layout
        a = view(self._buffers[kernel.a], a_dims, a_strides, a_off)
        b = view(self._buffers[kernel.b], b_dims, b_strides, b_off)
        c = self._buffers[kernel.out][:int(np.prod(shape, dtype=np.int64))].reshape(shape)
        return a, b, c

    def _cublas(self, launch, bindings, views=None) -> None:
        a, b, c = views or self._cublas_views(launch, bindings)
        if c.size == 0:
            return
        with self.memory.stream:
            if a.shape[-1] == 0:
                c.fill(0)
            else:
                self.memory.cupy.matmul(a, b, out=c)

    def _measure_gemm(self, launch, fn, args, extra, default: "GemmConfig", bindings) -> "GemmConfig":
        """Time one GEMM's candidates on the device (:func:`luminal.runtime.gpu_gemm.measure_gemm`)."""
        return measure_gemm(self, launch, fn, args, extra, default, bindings)

    def _finish(self, graph: Graph, bindings) -> None:
        """Wait for the kernels, raise the errors they reported, copy the kept results device -> host."""
        self.memory.synchronize()
        code = int(self.memory.download(self._err, 1, "int32")[0])
        if code:
            exc, text = _ERRORS.get(code, (RuntimeError, f"kernel error {code}"))
            if code == 1:
                text = graph.explain_gather_error() or text
            raise exc(f"compiled graph ({self.device}): {text}")
        tensors = graph.tensors
        key = (graph.version, tuple(graph.carries), len(graph.checks))
        if self._carried_cache is None or self._carried_cache[0] != key:
            live = lambda i: graph.resolve(i, ShapeTracker.contiguous_of(()))[0]  # noqa: E731
            self._carried_cache = (key, collections.Counter(o for o, _ in graph.resolved_carries()),
                                   {live(h.id) for handles, _, _ in graph.checks for h in handles})
        _, carried, checked = self._carried_cache
        self._resident.clear()
        self._pending = {}
        for node_id in self.program.outputs:
            if (not self.host_outputs and node_id not in checked) or node_id in carried:
                # copied to the host by fetch() when data() asks (not a run-time check's value, read after every
                # step); a carried value (training state) is read by the next step from its device buffer
                self._pending[node_id] = bindings
                continue
            dims, dtype = self.program.buffers[node_id]
            shape = tuple(d.evaluate(bindings) for d in dims)
            host = self.memory.download(self._buffers[node_id], self._sizes[node_id], storage_name(dtype))
            if dtype.value != storage_name(dtype):
                host = host.view(dtype.numpy)
            tensors[(node_id, 0)] = host.reshape(shape)

    def fetch(self, graph: Graph, node_id: int) -> bool:
        """Copy a value that only lives on the device (``host_outputs = False``: a kept result of the last
        ``execute()``, or an input's carried state) to the host, into ``graph.tensors``; False when there is
        none."""
        with self._lock:
            return self._fetch(graph, node_id)

    def _fetch(self, graph: Graph, node_id: int) -> bool:
        bindings = self._pending.pop(node_id, None)
        source = node_id
        if bindings is None:
            source = self._carried_in.pop(node_id, None)
            if source is None:
                return False
            bindings = dict(graph.dyn_map)
        dims, dtype = self.program.buffers[node_id]
        shape = tuple(d.evaluate(bindings) for d in dims)
        self.memory.synchronize()
        host = self.memory.download(self._buffers[source], self._sizes[node_id], storage_name(dtype))
        if dtype.value != storage_name(dtype):
            host = host.view(dtype.numpy)
        host = host.reshape(shape)
        if source != node_id or node_id in self.program.inputs:  # the device copy stays the one the next step reads
            host.flags.writeable = False
            self._resident[id(host)] = (host, source)
        graph.tensors[(node_id, 0)] = host
        return True

    def carry_on_device(self, graph: Graph, output: int, input: int) -> bool:
        """``Graph`` carries: when ``output`` was left on the device, the next ``execute()`` copies it into
        ``input``'s buffer on the device (no host round trip); True when taken care of."""
        if output not in self._pending:
            return False
        self._carried_in[input] = output
        return True

    def device_array(self, node_id: int):
        """A CuPy copy of a kept node's device buffer (flat), for ``GraphTensor.data(device=True)``."""
        if node_id not in self.program.outputs or not self._buffers:
            return None
        dims, dtype = self.program.buffers[node_id]
        if dtype.value != storage_name(dtype):
            return None
        return self.memory.to_device_array(self._buffers[node_id], self._sizes[node_id], storage_name(dtype))

    def time_kernels(self, graph: Graph, repeat: int = 10) -> list[float]:
        """Seconds per run of the kernels alone (the inputs already on the device, no host copies in the timed
        part; a CUDA-graph replay once captured), one entry per repetition, each from a device synchronize to
        the next. For benchmarks."""
        import time

        with self._lock:
            bindings = self._upload(graph)
            self._launch(bindings)
            self.memory.synchronize()
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                self._launch(bindings)
                self.memory.synchronize()
                times.append(time.perf_counter() - t0)
            self._finish(graph, bindings)
        return times


def _run_all(calls) -> None:
    for call in calls:
        call()


def _run_triton(fn, programs: int, args, kwargs) -> None:
    with np.errstate(all="ignore"):  # (the interpreter computes masked-out lanes with numpy too)
        fn[(programs,)](*args, **kwargs, **NO_FP_FUSION)


def compile_graph(graph: Graph, device: str, search: str = "off", budget_s: float | None = None) -> None:
    """Attach the Triton runtime of ``device`` (``"gpu-interpret"`` or ``"cuda"``) to ``graph``. On ``cuda``,
    ``search`` other than ``"off"`` times the tile configurations of every large GEMM on the device at its first
    run with new sizes (cached in the tuning file by kernel, sizes, GPU model and Triton version; ``"off"`` uses
    cached winners or the default tiles). ``budget_s`` is accepted for the runtime interface."""
    if device == "gpu-interpret":
        _import_triton(interpret=True)
        memory = TorchCPUMemory()
    elif device == "cuda":
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise RuntimeError("device 'cuda' cannot run with TRITON_INTERPRET=1 set (Triton's interpreter); use "
                               "device='gpu-interpret' for that, or unset it in a fresh process")
        memory = CuPyMemory()
        _import_triton(interpret=False)
    else:
        raise ValueError(f"unknown GPU device {device!r}; expected 'gpu-interpret' or 'cuda'")
    graph.runtime = GPURuntime(graph, device, memory, search=search or "off")
