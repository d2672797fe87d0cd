"""The compiled CPU runtime: lower the graph, render C, compile once (cached on disk), run with one call.

* C compiler and library cache: :mod:`luminal.runtime.build` (``-O3 -march=native -fopenmp -fno-math-errno
  -fno-trapping-math``; ``LUMINAL_CFLAGS`` replaces the optimization part). No ``-ffast-math``: it would
  break NaN/inf semantics (``isnan``-based ops, ``where`` over ``inf``) that the reference defines; sums
  vectorize through ``omp simd reduction`` instead, which allows reassociation in exactly those loops.
* Cache: libraries are keyed by a hash of source, flags and compiler in ``LUMINAL_CACHE_DIR`` and loaded only
  after their recorded SHA-256 verifies (:func:`luminal.runtime.build.build_library`).
* Memory: intermediates live in one arena, planned from buffer lifetimes in kernel order (first-fit with
  offset reuse, 64-byte aligned). The plan is recomputed only when the symbol bindings change; the arena
  grows when a symbol grows. Inputs are passed by pointer (no copy when the dtype already matches);
  retrieved/kept tensors get their own arrays, which ``GraphTensor.data()`` reads.
* Symbolic dims are arguments of the entry function: changing a bound value never recompiles.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from typing import Mapping

import numpy as np

from ..codegen.c import CProgram, CRenderer  # noqa: F401  (CProgram: the type of CPURuntime.cprogram)
from ..codegen.kernel import Program, lower
from ..codegen.toolchain import find_compiler
from ..graph import Graph
from .build import (BASE_FLAGS, CompileStats, _blas, _file_sha256, _verified, build_library,  # noqa: F401
                    cache_dir, clean_stale_temporaries)

# GCC's OpenMP workers spin ~300k iterations after each parallel region by default; between our many short
# regions (and while Python runs between executes) that spinning steals the second core. A short spin keeps
# region start-up fast without the contention (set GOMP_SPINCOUNT yourself to override).
os.environ.setdefault("GOMP_SPINCOUNT", "1000")
# OpenBLAS's own worker threads likewise busy-wait after every GEMM (default ~2**28 cycles), which halves the
# speed of the OpenMP kernels that follow on a 2-core machine (W4 training step: 80 -> 57 ms with a short
# timeout). 2**4 cycles: they sleep at once and are woken by the next GEMM. Read when OpenBLAS loads, i.e.
# the first compiled graph that links it; set OPENBLAS_THREAD_TIMEOUT yourself to override.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

_ERRORS = {1: (IndexError, "a Gather index is out of range for its axis"), 2: (ZeroDivisionError, "integer modulo by zero")}


class CPURuntime:
    """Executes a graph through generated C (see the module docstring).

    ``search`` (see :mod:`luminal.runtime.search`) chooses each GEMM's implementation: ``"off"`` uses the
    tuning cache's winner where one is recorded for the kernel's sizes, else the default (OpenBLAS);
    ``"quick"``/``"full"`` measure the candidates not yet cached within ``budget_s`` seconds before the first
    run (at construction when every size is known, else at the first ``execute()``, whose bindings are then
    the tuned ones); ``"background"`` runs at once with the ``"off"`` plan and searches in a thread, the
    faster library being swapped in between two ``execute()`` calls.
    """

    def __init__(self, graph: Graph, search: str = "off", budget_s: float | None = None):
        from .search import check_budget, check_level

        self.graph = graph
        self.search_level = check_level(search)
        self.budget_s = check_budget(budget_s)
        self.program: Program = lower(graph)
        self.blas = _blas() is not None
        if not self.blas:
            warnings.warn("scipy-openblas32 is not installed: matrix products use plain C loops", stacklevel=3)
        self.profiling = os.environ.get("LUMINAL_PROFILE", "0") not in ("", "0")
        self.search_result = None   # the last SearchResult (None before a search ran)
        # GEMM kernel index -> {(batch, M, N, K): "blas" | "own:<tag>"}: the generated code dispatches on the
        # sizes at run time; sizes not in the table run the default (see search.default_choice)
        self.gemm_table: dict[int, dict[tuple, str]] = {i: {} for i in self._gemm_kernels()}
        self._table_bindings: dict = {}
        self._swap_lock = threading.Lock()
        self._pending = None        # (table, (cprogram, library path)) built by the background search
        self._queue: list[dict] = []  # bindings waiting for the background search
        self._queued: set = set()     # every bindings ever queued (each is tuned once)
        self._search_thread: threading.Thread | None = None
        self._search_error: BaseException | None = None
        bindings = dict(graph.dyn_map)
        if self._all_gemms_known(bindings):
            self._table_bindings = bindings
            if self.search_level in ("quick", "full"):
                self._tune_into(self.gemm_table, bindings, self.search_level)
            else:
                self._merge(self.gemm_table, bindings, self._cached(bindings))
        self._install(self.gemm_table, self._build(self.gemm_table))
        self._plan_key = None
        self._arena = np.empty(0, np.uint8)
        self._offsets: dict[int, int] = {}
        self._out_local = threading.local()  # per thread: output arrays reused by the next run (_out_arrays)
        self._version = graph.version
        if self.search_level == "background" and self._all_gemms_known(bindings):
            self._enqueue(bindings)

    # ------------------------------------------------------------------ GEMM choices and the measured search
    def _gemm_kernels(self) -> list[int]:
        from ..codegen.kernel import GemmKernel
        from ..dtype import DType
        return [i for i, k in enumerate(self.program.kernels)
                if isinstance(k, GemmKernel) and k.dtype in (DType.float32, DType.float64)]

    def _shapes(self, bindings) -> dict:
        from .search import program_shapes
        return program_shapes(self.program, bindings)

    def _all_gemms_known(self, bindings) -> bool:
        return len(self._shapes(bindings)) == len(self.gemm_table)

    @staticmethod
    def _sizes(shape) -> tuple:
        return (shape.batch, shape.m, shape.n, shape.k)

    def _default(self, i: int) -> str:
        from .search import default_choice
        return default_choice(self.program.kernels[i].dtype.value, self.blas)

    def choices_at(self, bindings) -> dict[int, str]:
        """GEMM kernel index -> the implementation the current library runs at ``bindings``."""
        shapes = self._shapes(bindings)
        return {i: (self.gemm_table[i].get(self._sizes(shapes[i])) if i in shapes else None) or self._default(i)
                for i in self.gemm_table}

    @property
    def gemm_choices(self) -> dict[int, str]:
        """GEMM kernel index -> implementation at the bindings that were tuned (or looked up) last."""
        return self.choices_at(self._table_bindings)

    def _cached(self, bindings) -> dict[str, str]:
        """Kernel key -> the tuning cache's valid winner, for the GEMMs at ``bindings``."""
        from . import tuning
        from .search import valid_choice
        shapes = self._shapes(bindings)
        found = tuning.lookup_many({s.key() for s in shapes.values()}) if shapes else {}
        return {s.key(): found[s.key()]["choice"] for s in shapes.values()
                if s.key() in found and valid_choice(found[s.key()]["choice"], s.dtype)}

    def _merge(self, table, bindings, decided: dict[str, str]) -> bool:
        """Put ``decided`` (kernel key -> choice) into ``table`` for the GEMMs at ``bindings``; True if it changed."""
        changed = False
        for i, s in self._shapes(bindings).items():
            choice = decided.get(s.key())
            if choice is not None and table[i].get(self._sizes(s)) != choice:
                table[i][self._sizes(s)] = choice
                changed = True
        return changed

    def _untuned(self, bindings) -> bool:
        return any(self._sizes(s) not in self.gemm_table[i] for i, s in self._shapes(bindings).items())

    def _tune_into(self, table, bindings, level: str, progress=None) -> bool:
        """Search the GEMMs at ``bindings`` (cached winners are reused) and merge the winners into ``table``."""
        from .search import search_gemms
        shapes = self._shapes(bindings)
        result = search_gemms(list(shapes.values()), level, self.budget_s, self.blas, progress=progress)
        self.search_result = result
        return self._merge(table, bindings, result.choices)

    def _build(self, table):
        """Render and compile the program with the GEMM dispatch ``table``; returns (cprogram, library path)."""
        from .search import function_name, own_sources
        impl, pairs = {}, set()
        for i, entries in table.items():
            dtype = self.program.kernels[i].dtype.value
            fallback = self._default(i)
            special = sorted((sizes, function_name(c, dtype)) for sizes, c in entries.items() if c != fallback)
            impl[i] = (function_name(fallback, dtype), special)
            pairs |= {(c, dtype) for c in [fallback, *entries.values()]}
        cprogram = CRenderer(self.program, self.blas, self.profiling, gemm_impl=impl,
                             gemm_sources=own_sources(pairs)).render()
        return cprogram, build_library(cprogram)

    def _install(self, table, built) -> None:
        cprogram, path = built
        lib = ctypes.CDLL(path)
        run = lib.luminal_run
        run.restype = ctypes.c_int
        run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong)]
        self.cprogram, self.gemm_table, self.library_path, self._lib, self._run = cprogram, table, path, lib, run

    def _enqueue(self, bindings) -> None:
        """Tune ``bindings`` in the background thread (started when it is not running)."""
        key = tuple(sorted(bindings.items()))
        with self._swap_lock:
            if key in self._queued:
                return
            self._queued.add(key)
            self._queue.append(dict(bindings))
            if self._search_thread is not None and self._search_thread.is_alive():
                return

        def work():
            while True:
                with self._swap_lock:
                    if not self._queue:
                        return
                    bindings = self._queue.pop(0)
                    table = {i: dict(e) for i, e in (self._pending[0] if self._pending else self.gemm_table).items()}
                try:
                    changed = self._tune_into(table, bindings, "full", progress=False)
                    built = self._build(table) if changed else None
                except BaseException as e:  # reported by wait_for_search(); execution goes on with the old plan
                    self._search_error = e
                    return
                with self._swap_lock:
                    self._table_bindings = bindings
                    if built is not None:
                        self._pending = (table, built)

        self._search_thread = threading.Thread(target=work, name="luminal-search", daemon=True)
        self._search_thread.start()

    def wait_for_search(self, timeout: float | None = None) -> bool:
        """Block until the background search is idle (True) or ``timeout`` seconds passed (False); re-raises an
        error the search ran into. The tuned library is installed by the next ``execute()``."""
        t = self._search_thread
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                return False
        if self._search_error is not None:
            e, self._search_error = self._search_error, None
            raise RuntimeError(f"background search failed: {e}") from e
        return True

    def _new_bindings(self, bindings) -> None:
        """Bindings seen for the first time: with search on, tune GEMM sizes the dispatch table lacks."""
        if self.search_level == "off" or not self._untuned(bindings):
            return
        if self.search_level == "background":
            self._enqueue(bindings)
            return
        table = {i: dict(e) for i, e in self.gemm_table.items()}
        self._table_bindings = dict(bindings)
        if self._tune_into(table, bindings, self.search_level):
            self._install(table, self._build(table))

    def _swap(self) -> None:
        with self._swap_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._install(*pending)

    @property
    def _out_arrays(self) -> dict[int, np.ndarray]:
        """This thread's output arrays, reused by its next run (``data()`` copies out). Per thread: another
        thread's run must not overwrite a result this thread has not read yet."""
        return self._out_local.__dict__.setdefault("arrays", {})

    @property
    def source(self) -> str:
        """The generated C source."""
        return self.cprogram.source

    def stale(self, graph: Graph) -> bool:
        """True when the graph changed since this runtime was built (it is then rebuilt)."""
        return graph.version != self._version

    # ------------------------------------------------------------------ memory planning
    def _plan(self, bindings: Mapping[str, int]) -> None:
        key = tuple(bindings.get(s, None) for s in self.cprogram.symbols)
        if key == self._plan_key:
            return
        program = self.program
        # lifetimes in units of rendered groups (kernels fused into one loop nest run together)
        from ..codegen.values import kernel_buffers
        step = {}
        for g, group in enumerate(self.cprogram.groups or [[i] for i in range(len(program.kernels))]):
            for i in group:
                step[i] = g
        kernel_of = {k.out: step[i] for i, k in enumerate(program.kernels)}
        last_use: dict[int, int] = {}
        for i, kernel in enumerate(program.kernels):
            for b in kernel_buffers(kernel):
                last_use[b] = step[i]
        owned = set(program.inputs) | set(program.outputs)
        intervals = []
        for node_id, (dims, dtype) in program.buffers.items():
            if node_id in owned:
                continue
            size = dtype.itemsize
            for d in dims:
                size *= d.evaluate(bindings)
            start = kernel_of[node_id]
            intervals.append((start, last_use.get(node_id, start), max(size, 1), node_id))
        offsets: dict[int, int] = {}
        placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
        total = 0
        for start, end, size, node_id in sorted(intervals, key=lambda t: -t[2]):
            size = (size + 63) // 64 * 64
            busy = sorted((o, o + s) for (s0, e0, o, s) in placed if not (e0 < start or end < s0))
            offset = 0
            for lo, hi in busy:
                if offset + size <= lo:
                    break
                offset = max(offset, hi)
            placed.append((start, end, offset, size))
            offsets[node_id] = offset
            total = max(total, offset + size)
        if self._arena.size < total + 64:
            self._arena = np.empty(total + 64, np.uint8)
        base = self._arena.ctypes.data
        shift = (-base) % 64
        self._offsets = {n: o + shift for n, o in offsets.items()}
        self._plan_key = key

    def profile(self, top: int | None = 20) -> str:
        """Seconds spent per kernel over all runs so far (needs ``LUMINAL_PROFILE=1`` when the graph compiled)."""
        if not self.profiling:
            raise RuntimeError("kernel profiling is off: set LUMINAL_PROFILE=1 before compiling the graph")
        from ..codegen.kernel import GemmKernel, ReduceKernel
        groups = self.cprogram.groups
        out = (ctypes.c_double * max(1, len(groups)))()
        self._lib.luminal_profile(out)
        rows = []
        for k, group in enumerate(groups):
            kernel = self.program.kernels[group[0]]
            kind = "gemm" if isinstance(kernel, GemmKernel) else "reduce" if isinstance(kernel, ReduceKernel) else "elementwise"
            if len(group) > 1:
                kind += f" x{len(group)}"
            label = self.graph.nodes[kernel.out].label if kernel.out in self.graph.nodes else "?"
            rows.append((out[k], k, kind, [str(d) for d in kernel.dims], label))
        total = sum(r[0] for r in rows) or 1.0
        rows.sort(key=lambda r: -r[0])
        lines = [f"{'kernel':>6} {'kind':<12} {'seconds':>10} {'share':>6}  dims / node"]
        for sec, k, kind, dims, label in rows[:top]:
            lines.append(f"{k:>6} {kind:<12} {sec:>10.4f} {sec / total:>6.1%}  {dims} {label}")
        return "\n".join(lines)

    def recycle(self, node_id: int, arr) -> None:
        """Write output ``node_id`` into ``arr`` next time (the array its value was carried away from), or
        into a fresh array when ``arr`` cannot be reused; never into the array just carried away."""
        dims_dtype = self.program.buffers.get(node_id)
        self._out_arrays.pop(node_id, None)
        if arr is None or dims_dtype is None or node_id not in self.program.outputs:
            return
        if arr.dtype == dims_dtype[1].numpy and arr.flags.c_contiguous and arr.flags.writeable and \
                arr.flags.aligned:
            self._out_arrays[node_id] = arr

    # ------------------------------------------------------------------ execution
    def _bind(self, bindings: Mapping[str, int]) -> None:
        """Everything of a run that depends only on the symbol bindings: the memory plan, the entry's buffer
        table with the arena slots filled in, the symbol values, and the expected input/output shapes."""
        self._plan(bindings)
        order = self.cprogram.buffer_order
        self._buffers = (ctypes.c_void_p * max(1, len(order)))()
        base = self._arena.ctypes.data
        self._in_slots, self._out_slots = [], []
        for k, node_id in enumerate(order):
            if node_id in self.program.inputs:
                node = self.graph.nodes[node_id]
                self._in_slots.append((k, node_id, tuple(d.evaluate(bindings) for d in node.dims)))
            elif node_id in self.program.outputs:
                dims, dtype = self.program.buffers[node_id]
                self._out_slots.append((k, node_id, tuple(d.evaluate(bindings) for d in dims), dtype.numpy))
            else:
                self._buffers[k] = base + self._offsets[node_id]
        self._syms = (ctypes.c_longlong * max(1, len(self.cprogram.symbols)))(
            *[bindings[s] for s in self.cprogram.symbols])
        self._pointers: dict[int, tuple[np.ndarray, int]] = {}  # node -> (array, its data address)

    def _pointer(self, node_id: int, arr: np.ndarray) -> int:
        cached = self._pointers.get(node_id)
        if cached is not None and cached[0] is arr:
            return cached[1]
        address = arr.__array_interface__["data"][0]
        self._pointers[node_id] = (arr, address)
        return address

    def execute(self, graph: Graph) -> None:
        """Run the compiled graph: one call into the library. Python's share is a few dictionary look-ups per
        input and output; the plan and buffer table are rebuilt only when the symbol bindings change."""
        dyn = graph.dyn_map
        key = tuple(dyn.get(s) for s in self.cprogram.symbols)
        if key != self._plan_key:
            missing = [s for s, v in zip(self.cprogram.symbols, key) if v is None]
            if missing:
                from ..shape import UnboundSymbolError
                raise UnboundSymbolError(f"no value bound for symbol(s) {missing}; bind them with set() data or "
                                         "Graph.set_dim")
            self._bind(dict(dyn))
            self._new_bindings(dict(dyn))
        if self._pending is not None:
            self._swap()
        graph.reset()
        buffers, tensors = self._buffers, graph.tensors
        for k, node_id, shape in self._in_slots:
            arr = tensors.get((node_id, 0))
            if arr is None or arr.shape != shape or node_id in graph.deferred:
                graph._load_input(graph.nodes[node_id], shape, dyn)  # fills deferred data, or explains what is wrong
                arr = tensors[(node_id, 0)]
            buffers[k] = self._pointer(node_id, arr)
        for k, node_id, shape, dtype in self._out_slots:
            arr = self._out_arrays.get(node_id)
            if arr is not None and arr.shape != shape and arr.size == int(np.prod(shape, dtype=np.int64)):
                arr = arr.reshape(shape)  # a carried-back array of the same elements, e.g. (8, 5) for (8, 5, 1)
            if arr is None or arr.shape != shape:  # reuse last run's array: no fresh page faults
                arr = self._out_arrays[node_id] = _aligned_empty(shape, dtype)
            tensors[(node_id, 0)] = arr
            buffers[k] = self._pointer(node_id, arr)
        code = self._run(buffers, self._syms)
        if code:
            exc, text = _ERRORS.get(code, (RuntimeError, f"kernel error {code}"))
            if code == 1:  # name the index, the size and the tensors as the reference interpreter does
                text = graph.explain_gather_error() or text
            raise exc(f"compiled graph: {text}")


def _aligned_empty(shape, dtype) -> np.ndarray:
    """``np.empty`` starting on a 64-byte boundary (numpy gives 16): kernels' vector loads and streaming stores
    then never split a cache line, and a streamed tile's first and last lines are its own."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def compile_graph(graph: Graph, device: str, search: str = "off", budget_s: float | None = None) -> None:
    """Attach the runtime for ``device`` (``"cpu"`` or ``"reference"``) to ``graph``; ``search`` and
    ``budget_s`` as in :class:`CPURuntime`."""
    if device == "reference":
        graph.runtime = None
        return
    if device != "cpu":
        raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'reference'")
    if find_compiler() is None:
        warnings.warn("no C compiler found: using the reference interpreter", stacklevel=3)
        graph.runtime = None
        return
    graph.runtime = CPURuntime(graph, search, budget_s)
