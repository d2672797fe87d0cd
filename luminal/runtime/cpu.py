"""The compiled CPU runtime: lower the graph, render C, compile once (cached on disk), run with one call.

* C compiler and library cache: :mod:`luminal.runtime.build` (``-O3 -march=native -fopenmp -fno-math-errno
  -fno-trapping-math``; ``LUMINAL_CFLAGS`` replaces the optimization part). No ``-ffast-math``: it would
  break NaN/inf semantics (``isnan``-based ops, ``where`` over ``inf``) that the reference defines; sums
  vectorize through ``omp simd reduction`` instead, which allows reassociation in exactly those loops.
* Cache: libraries are keyed by a hash of source, flags and compiler in ``LUMINAL_CACHE_DIR`` and loaded only
  after their recorded SHA-256 verifies (:func:`luminal.runtime.build.build_library`).
* Memory: intermediates live in one arena, planned from buffer lifetimes in kernel order (first-fit with
  offset reuse, 64-byte aligned). The last ``PLAN_CACHE_SIZE`` (8) binding sets keep their plan and buffer
  table (an LRU keyed by the symbol values); new bindings whose sizes fit a cached plan reuse it, and buffers
  that grew get ``PLAN_HEADROOM`` (1.5x) room in a new plan, so a symbol growing step by step re-plans
  geometrically rarely. All plans share one arena, sized for the cached plans (grown when one needs more,
  shrunk when it is over twice what they need). Inputs are passed by pointer (no copy when the dtype already
  matches); retrieved/kept tensors get their own arrays, which ``GraphTensor.data()`` reads.
* Symbolic dims are arguments of the entry function: changing a bound value never recompiles.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
import weakref
from collections import OrderedDict
from typing import Mapping

import numpy as np

from ..codegen.c import CProgram, CRenderer  # noqa: F401  (CProgram: the type of CPURuntime.cprogram)
from ..codegen.kernel import Program, lower
from ..codegen.toolchain import find_compiler
from ..graph import Graph
from .cpu_plan import KERNEL_ERRORS, _Binding, _Layout, _Plan, _aligned_empty, exclusively_held  # noqa: F401
from .build import (BASE_FLAGS, CompileStats, _blas, _file_sha256, _verified, build_library,  # noqa: F401
                    build_program, load_program, cache_dir, clean_stale_temporaries, release_scratch)

# GCC's OpenMP workers spin ~300k iterations after each parallel region by default; between our many short
# regions (and while Python runs between executes) that spinning steals the second core. A short spin keeps
# region start-up fast without the contention (set GOMP_SPINCOUNT yourself to override).
os.environ.setdefault("GOMP_SPINCOUNT", "1000")
# OpenBLAS's own worker threads likewise busy-wait after every GEMM (default ~2**28 cycles), which halves the
# speed of the OpenMP kernels that follow on a 2-core machine (W4 training step: 80 -> 57 ms with a short
# timeout). 2**4 cycles: they sleep at once and are woken by the next GEMM. Read when OpenBLAS loads, i.e.
# the first compiled graph that links it; set OPENBLAS_THREAD_TIMEOUT yourself to override.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

PLAN_CACHE_SIZE = 8   # binding sets whose plan and buffer table are kept (LRU)
PLAN_HEADROOM = 1.5   # a new plan's slot for a buffer that grew since the last plan: this times its size


class CPURuntime:
    """Executes a graph through generated C (see the module docstring).

    ``search`` (see :mod:`luminal.runtime.search`) chooses each GEMM's implementation: ``"off"`` uses the
    tuning cache's winner where one is recorded for the kernel's sizes, else the default (OpenBLAS), looked up
    at compile() for the bindings known then and at every binding set planned later (nothing is measured);
    ``"quick"``/``"full"`` measure the candidates not yet cached within ``budget_s`` seconds before the first
    run (at construction when every size is known, else at the first ``execute()``, whose bindings are then
    the tuned ones); ``"background"`` runs at once with the ``"off"`` plan and searches in a child process
    (:mod:`luminal.runtime.search_worker`), the faster library being swapped in between two ``execute()`` calls.
    """

    def __init__(self, graph: Graph, search: str = "off", budget_s: float | None = None):
        from .search import check_budget, check_level

        self.graph = graph
        self.search_level = check_level(search)
        self.budget_s = check_budget(budget_s)
        from ..codegen.gemm_lowp import narrow_operands
        from ..codegen.layout import transpose_outputs
        from ..codegen.layout_order import order_outputs
        # products stored transposed where their readers walk them column-wise (luminal.codegen.layout), the
        # kernels after a product in its order (luminal.codegen.layout_order); GEMM operands stored as bfloat16 /
        # float16 are read as they are stored, not through a float32 copy (also those other kernels read)
        self.program: Program = narrow_operands(order_outputs(transpose_outputs(lower(graph))), widen_readers=True)
        self.blas = _blas() is not None
        # GEMM operands fused into the own GEMM's packing (luminal.codegen.gemm_prologue) and the direct convolution's
        # form: measured with search "quick"/"full" at the bindings known now, else the tuning cache's (or default)
        from .prologue_search import choose_prologues, fuse_prologues
        from .step_forms import forced_plan
        forced = forced_plan()  # (a build of the step-forms check: its plan given, per-kernel timers on)
        plan = forced or choose_prologues(self.program, dict(graph.dyn_map), self.search_level, self.blas,
                                          budget_s=self.budget_s)
        self.fused_buffers, self.prologue_timings, self.packed_buffers, self.marginal_buffers, self.wino_buffers = plan
        unfused, self.program = self.program, fuse_prologues(self.program, plan[0], *plan[2:])
        if not self.blas:
            warnings.warn("scipy-openblas32 is not installed: matrix products use plain C loops", stacklevel=3)
        self.profiling = os.environ.get("LUMINAL_PROFILE", "0") not in ("", "0") or forced is not None
        self.step_forms = None  # the StepFormsResult of search="full" (luminal.runtime.step_forms), when one ran
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
        self._looked_up: set = set()  # (GEMM kernel, its symbols' values) already looked up (search="off")
        self._gemm_syms: list | None = None
        bindings = dict(graph.dyn_map)
        if self._all_gemms_known(bindings):
            self._table_bindings = bindings
            if self.search_level in ("quick", "full"):
                self._tune_into(self.gemm_table, bindings, self.search_level)
            else:
                self._merge(self.gemm_table, bindings, self._cached(bindings))
            if self.search_level == "full" and forced is None and self.fused_buffers:
                from .step_forms import check_in_step  # (the GEMMs' winners are cached now)
                check_in_step(self, graph, unfused, plan, bindings)
        self._install(self.gemm_table, self._build(self.gemm_table))
        # memory plans (see _plan): an LRU of binding sets -> _Binding, all sharing one arena
        self._layout_cache: _Layout | None = None
        self._entries: OrderedDict[tuple, _Binding] = OrderedDict()
        self._current: _Binding | None = None
        self._current_key = None
        self._last_sizes: list[int] | None = None  # arena buffer sizes at the last planned bindings
        self._arena = np.empty(0, np.uint8)
        self._arena_gen = 0
        # node -> [weakref to its array, the data address, weakref to the previous array, its address] (_pointer)
        self._pointers: dict[int, list] = {}
        self._out_dtypes: dict | None = None  # output node -> numpy dtype (recycle's check), built on first use
        self.plans_built = 0  # placements computed (a binding set whose sizes fit a cached plan reuses it)
        self.plan_hits = 0    # runs whose binding set was not the last one but was still cached
        self._out_local = threading.local()  # per thread: output arrays reused by the next run (_out_arrays)
        self._version = graph.version
        if self.search_level == "background" and self._all_gemms_known(bindings):
            self._enqueue(bindings)

    # ------------------------------------------------------------------ GEMM choices and the measured search
    def _gemm_kernels(self) -> list[int]:
        from .search import searchable
        return [i for i, k in enumerate(self.program.kernels) if searchable(self.program, k)]

    def _shapes(self, bindings) -> dict:
        from .search import program_shapes
        return program_shapes(self.program, bindings)

    def _all_gemms_known(self, bindings) -> bool:
        return len(self._shapes(bindings)) == len(self.gemm_table)

    @staticmethod
    def _sizes(shape) -> tuple:
        return (shape.batch, shape.m, shape.n, shape.k)

    def _default(self, i: int) -> str:
        from .search import kernel_default
        return kernel_default(self.program.kernels[i], self.blas)

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

    def _tune_into(self, table, bindings, level: str, isolated=False) -> bool:
        """Search the GEMMs at ``bindings`` (in a child process if ``isolated``; cached ones reused) into ``table``."""
        from . import search, search_worker
        run = search_worker.search_in_process if isolated else search.search_gemms
        result = run(list(self._shapes(bindings).values()), level, self.budget_s, self.blas)
        self.search_result = result
        return self._merge(table, bindings, result.choices)

    def _build(self, table):
        """Render and compile the program with the GEMM dispatch ``table``; returns (cprogram, (library path, its
        library parts' paths))."""
        from .prologue_search import fused_gemms
        from .search import function_name, own_parts
        impl, pairs = {}, set()
        for i, entries in table.items():
            dtype = self.program.kernels[i].dtype.value
            fallback = self._default(i)
            special = sorted((sizes, function_name(c, dtype)) for sizes, c in entries.items() if c != fallback)
            impl[i] = (function_name(fallback, dtype), special)
            pairs |= {(c, dtype) for c in [fallback, *entries.values()]}
        fused_impl, fused_src = fused_gemms(self.program)
        impl.update(fused_impl)
        cprogram = CRenderer(self.program, self.blas, self.profiling, gemm_impl=impl,
                             gemm_sources=fused_src, gemm_parts=own_parts(pairs, self.blas)).render()
        return cprogram, build_program(cprogram)

    def _install(self, table, built) -> None:
        cprogram, (path, part_paths) = built
        lib, self._parts = load_program(cprogram, path, part_paths)
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
                    changed = self._tune_into(table, bindings, "full", isolated=True)
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
        """Bindings not in the plan cache: with search on, tune GEMM sizes the dispatch table lacks; with search
        off, look the GEMMs' sizes up in the tuning cache (:meth:`_lookup_winners`)."""
        if self.search_level == "off":
            self._lookup_winners(bindings)
            return
        if not self._untuned(bindings):
            return
        if self.search_level == "background":
            self._enqueue(bindings)
            return
        table = {i: dict(e) for i, e in self.gemm_table.items()}
        self._table_bindings = dict(bindings)
        if self._tune_into(table, bindings, self.search_level):
            self._install(table, self._build(table))

    def _lookup_winners(self, bindings) -> None:
        """search="off" at new bindings: the tuning cache's winners for the GEMMs whose sizes were not looked up
        yet (the file is read once per process and again only when it changed, :func:`tuning.entries`; nothing
        is measured). A winner other than what the library runs now rebuilds it, as at compile time."""
        from . import tuning
        from .search import gemm_shape, valid_choice
        if not self.gemm_table:
            return
        entries = tuning.entries()
        if not entries:  # (nothing tuned on this machine: no shapes to compute)
            return
        seen = self._looked_up
        todo = []
        for i, kernel, syms in self._gemm_symbols():
            memo = (i, tuple(bindings.get(s) for s in syms))
            if memo not in seen:
                todo.append((i, kernel, memo))
        if not todo:
            return
        if len(seen) > 1 << 16:  # bounded: forgetting only means looking a size up again
            seen.clear()
        table = None
        for i, kernel, memo in todo:
            seen.add(memo)
            shape = gemm_shape(kernel, bindings)
            entry = entries.get(shape.key()) if shape is not None else None
            choice = entry.get("choice") if isinstance(entry, dict) else None
            if choice is None or not valid_choice(choice, shape.dtype):
                continue
            sizes = self._sizes(shape)
            if ((table or self.gemm_table)[i].get(sizes) or self._default(i)) != choice:
                table = table or {k: dict(e) for k, e in self.gemm_table.items()}
                table[i][sizes] = choice
        if table is not None:
            self._table_bindings = dict(bindings)
            self._install(table, self._build(table))

    def _gemm_symbols(self) -> list:
        """(kernel index, kernel, the symbols its sizes and strides depend on) of every searchable GEMM."""
        if self._gemm_syms is None:
            out = []
            for i in self.gemm_table:
                k = self.program.kernels[i]
                exprs = list(k.dims) + list(k.a_view.dims) + list(k.a_view.strides) + list(k.b_view.strides)
                syms = set()
                for e in exprs:
                    if hasattr(e, "symbols"):
                        syms |= e.symbols()
                out.append((i, k, tuple(sorted(syms))))
            self._gemm_syms = out
        return self._gemm_syms

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

    def release_scratch(self) -> None:
        """Free this program's per-thread scratch on this thread's OpenMP team (it grows again on demand)."""
        release_scratch([self._lib, *self._parts])

    def stale(self, graph: Graph) -> bool:
        """True when the graph changed since this runtime was built (it is then rebuilt)."""
        return graph.version != self._version

    # ------------------------------------------------------------------ memory planning
    def _layout(self) -> "_Layout":
        """The binding-independent half of memory planning, computed once per runtime."""
        layout = self._layout_cache
        if layout is None:
            layout = self._layout_cache = _Layout(self.program, self.cprogram, self.graph)
        return layout

    def _plan(self, vals: list[int]) -> "_Plan":
        """A memory plan that holds every intermediate at ``bindings``: a cached plan whose slots are large
        enough (the most recently used first), else a new placement. A new placement gives the buffers that
        grew since the previous binding set ``PLAN_HEADROOM`` times their size, so that a symbol growing step
        by step (a KV cache of bucket 1) re-plans once in a while (geometrically), not at every step."""
        layout = self._layout()
        sizes = layout.sizes(vals)
        prev, self._last_sizes = self._last_sizes, sizes
        for plan in self._plans_by_recency():
            if plan.fits(sizes):
                return plan
        if prev is not None:
            sizes = [s if s <= p else max(s, int(s * PLAN_HEADROOM)) for s, p in zip(sizes, prev)]
        plan = layout.place(sizes)
        self.plans_built += 1
        return plan

    def _plans_by_recency(self):
        seen = set()
        for entry in reversed(self._entries.values()):
            if id(entry.plan) not in seen:
                seen.add(id(entry.plan))
                yield entry.plan

    def _fit_arena(self) -> None:
        """Size the one shared arena for the plans still cached: grown when one needs more, shrunk when it is
        over twice what they need (a plan for a huge binding is not kept alive by its arena once evicted)."""
        need = max((e.plan.total for e in self._entries.values()), default=0) + 64
        if self._arena.size < need or self._arena.size > 2 * need:
            self._arena = np.empty(need, np.uint8)
            self._arena_gen += 1

    def _bind(self, key: tuple, bindings: Mapping[str, int]) -> "_Binding":
        """Everything of a run that depends only on the symbol bindings: the memory plan, the entry's buffer
        table (arena slots filled in by :meth:`_fill`), the symbol values, the expected input/output shapes.
        Kept in an LRU of ``PLAN_CACHE_SIZE`` binding sets."""
        layout = self._layout()
        vals = layout.values(bindings)
        plan = self._plan(vals)
        entry = _Binding(plan, layout, vals, bindings, self.cprogram.symbols)
        self._entries[key] = entry
        while len(self._entries) > PLAN_CACHE_SIZE:
            self._entries.popitem(last=False)
        self._fit_arena()
        return entry

    def profile(self, top: int | None = 20) -> str:
        """Seconds spent per kernel over all runs so far (needs ``LUMINAL_PROFILE=1`` when the graph compiled)."""
        if not self.profiling:
            raise RuntimeError("kernel profiling is off: set LUMINAL_PROFILE=1 before compiling the graph")
        from .profile import profile_table
        groups = self.cprogram.groups
        out = (ctypes.c_double * max(1, len(groups)))()
        self._lib.luminal_profile(out)
        return profile_table(self.graph, self.program, groups, list(out), top)

    def recycle(self, node_id: int, arr) -> None:
        """Write output ``node_id`` into ``arr`` next time (the array its value was carried away from), or
        into a fresh array when ``arr`` cannot be reused; never into the array just carried away.

        ``arr=None`` (the result was handed over, e.g. ``data(copy=False)``): the handed array is *lent*: if
        nothing but this runtime references it any more at the next run (the caller dropped it, and no view of
        it exists), that run writes into it again instead of allocating (see :func:`exclusively_held`)."""
        local = self._out_local.__dict__
        out_arrays = local.get("arrays")
        if out_arrays is None:
            out_arrays = self._out_arrays
        old = out_arrays.pop(node_id, None)
        lent = local.get("lent")
        if lent is None:
            lent = local["lent"] = {}
        if arr is None:
            if old is not None:
                lent[node_id] = old
        else:
            lent.pop(node_id, None)
            if self._reusable(node_id, arr):
                out_arrays[node_id] = arr

    def recycle_many(self, pairs) -> None:
        """:meth:`recycle` for several ``(node id, array or None)`` pairs."""
        out_arrays = self._out_arrays
        local = self._out_local.__dict__
        lent = local.get("lent")
        if lent is None:
            lent = local["lent"] = {}
        dtypes = self._out_dtypes
        if dtypes is None:
            self._reusable(-1, None)
            dtypes = self._out_dtypes
        for node_id, arr in pairs:
            old = out_arrays.pop(node_id, None)
            if arr is None:
                if old is not None:
                    lent[node_id] = old
            else:
                lent.pop(node_id, None)
                dt = dtypes.get(node_id)
                if dt is not None and isinstance(arr, np.ndarray) and arr.dtype == dt:  # (see _reusable)
                    flags = arr.flags
                    if flags.c_contiguous and flags.writeable and flags.aligned:
                        out_arrays[node_id] = arr

    def _reusable(self, node_id: int, arr) -> bool:
        """Whether ``arr`` can be the next output array of node ``node_id`` (its dtype, C order, writeable)."""
        dtypes = self._out_dtypes
        if dtypes is None:
            outputs = set(self.program.outputs)
            dtypes = self._out_dtypes = {n: dt.numpy for n, (_, dt) in self.program.buffers.items() if n in outputs}
        dt = dtypes.get(node_id)
        if dt is None or not isinstance(arr, np.ndarray) or arr.dtype != dt:
            return False
        flags = arr.flags
        return flags.c_contiguous and flags.writeable and flags.aligned

    # ------------------------------------------------------------------ execution
    def _pointer(self, node_id: int, arr: np.ndarray) -> int:
        """The data address of ``arr``, cached per node for its last two new arrays (parameters and optimizer
        state alternate between two buffers from run to run, and reading an address costs a microsecond or more).
        The cache holds weak references: it keeps no array alive, and an array that died never matches."""
        c = self._pointers.get(node_id)
        if c is not None:
            if c[0]() is arr:
                return c[1]
            if c[2]() is arr:
                return c[3]
        address = arr.__array_interface__["data"][0]
        try:
            ref = weakref.ref(arr)
        except TypeError:  # (an array type without weak references: not cached)
            return address
        if c is None:
            self._pointers[node_id] = [ref, address, _dead, 0]
        else:
            c[0], c[1], c[2], c[3] = ref, address, c[0], c[1]
        return address

    def _entry_for(self, key: tuple, dyn) -> "_Binding":
        """The cached :class:`_Binding` of ``key`` (the symbol values), planned on a miss."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.plan_hits += 1
            return entry
        missing = [s for s, v in zip(self.cprogram.symbols, key) if v is None]
        if missing:
            from ..shape import UnboundSymbolError
            raise UnboundSymbolError(f"no value bound for symbol(s) {missing}; bind them with set() data or "
                                     "Graph.set_dim")
        bindings = dict(dyn)
        self._new_bindings(bindings)
        return self._bind(key, bindings)

    def execute(self, graph: Graph) -> None:
        """Run the compiled graph: one call into the library. Python's share is a few dictionary look-ups per
        input and output; a binding set seen recently reuses its plan and buffer table (an LRU)."""
        dyn = graph.dyn_map
        symbols = self.cprogram.symbols
        key = tuple([dyn.get(s) for s in symbols]) if symbols else ()
        entry = self._current if key == self._current_key else None
        if entry is None:  # (the current entry is the most recently used: never evicted while current)
            entry = self._entry_for(key, dyn)
            self._current, self._current_key = entry, key
        if entry.arena_gen != self._arena_gen:
            entry.fill(self._arena, self._arena_gen)
        if self._pending is not None:
            self._swap()
        graph.reset()
        buffers, tensors = entry.buffers, graph.tensors
        pointers, pointer = self._pointers, self._pointer
        deferred = graph.deferred
        if type(deferred) is dict and not deferred:
            deferred = ()
        def cached_pointer(node_id, arr):
            # the last two arrays of each node (parameters alternate between two) keep their ctypes pointers
            c = pointers.get(node_id)
            if c is not None:
                if c[0]() is arr:
                    return c[1]
                if c[2]() is arr:
                    return c[3]
            return pointer(node_id, arr)

        for k, node_id, tkey, shape in entry.in_slots:
            arr = tensors.get(tkey)
            if arr is None or arr.shape != shape or node_id in deferred:
                graph._load_input(graph.nodes[node_id], shape, dyn)  # fills deferred data, or explains what is wrong
                arr = tensors[tkey]
            buffers[k] = cached_pointer(node_id, arr)
        out_arrays = self._out_local.__dict__.get("arrays")
        if out_arrays is None:
            out_arrays = self._out_arrays
        lent = self._out_local.__dict__.get("lent")
        for k, node_id, tkey, shape, dtype, nbytes in entry.out_slots:
            arr = out_arrays.get(node_id)
            if arr is None and lent:
                arr = lent.pop(node_id, None)  # a handed-over result that nobody holds any more: written again
                if arr is not None:
                    if exclusively_held(arr, 1) and arr.shape == shape:
                        out_arrays[node_id] = arr
                    else:
                        arr = None
            if arr is None or arr.shape != shape:
                if arr is not None and arr.size * arr.itemsize == nbytes:
                    arr = out_arrays[node_id] = arr.reshape(shape)  # same elements, e.g. (8, 5) for (8, 5, 1)
                else:  # reuse last run's array: no fresh page faults
                    arr = out_arrays[node_id] = _aligned_empty(shape, dtype, nbytes)
            tensors[tkey] = arr
            buffers[k] = cached_pointer(node_id, arr)
        code = self._run(buffers, entry.syms)
        if code:
            exc, text = KERNEL_ERRORS.get(code, (RuntimeError, f"kernel error {code}"))
            if code == 1:  # name the index, the size and the tensors as the reference interpreter does
                text = graph.explain_gather_error() or text
            raise exc(f"compiled graph: {text}")


def _dead():
    return None


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
