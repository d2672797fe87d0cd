"""The CPU runtime's memory plans (:class:`luminal.runtime.cpu.CPURuntime` keeps an LRU of them, one per set of
symbol values): :class:`_Layout` is what planning needs that does not depend on the bindings (lifetimes,
conflicts, sizes as constants times symbolic dims, buffer-table slots), :class:`_Plan` the arena offsets of one
placement (:func:`luminal.runtime.arena.first_fit`), :class:`_Binding` one binding set's run state (plan, buffer
table, symbol values, input/output shapes); and the aligned arrays results live in, with the reference-count test
that tells when nothing else sees one (:func:`exclusively_held`); and what the generated code's error codes mean.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from ..codegen.kernel import Program
from ..graph import Graph

# the generated C's error codes (luminal_run's return value) -> the exception CPURuntime.execute raises
KERNEL_ERRORS = {1: (IndexError, "a Gather index is out of range for its axis"),
                 2: (ZeroDivisionError, "integer modulo by zero"),
                 3: (MemoryError, "a GEMM with a fused prologue could not allocate its packing buffers"),
                 4: (IndexError, "a ScatterAdd index is out of range for its axis"),
                 5: (MemoryError, "a fused attention kernel could not allocate its per-thread scratch buffers")}


class _Layout:
    """What memory planning needs that does not depend on the bindings, computed once: each arena buffer's
    lifetime (in rendered groups), the buffers whose lifetimes overlap (they may not share bytes), its size as a
    constant times unique symbolic dims (each unique dim is evaluated once per binding set), and the buffer
    table's arena/input/output slots."""

    def __init__(self, program: Program, cprogram, graph: Graph):
        from ..codegen.values import kernel_buffers
        step = {}
        for g, group in enumerate(cprogram.groups or [[i] for i in range(len(program.kernels))]):
            for i in group:
                step[i] = g
        kernel_of = {k.out: step[i] for i, k in enumerate(program.kernels)}
        last_use: dict[int, int] = {}
        for i, kernel in enumerate(program.kernels):
            for b in kernel_buffers(kernel):
                last_use[b] = step[i]
        owned = set(program.inputs) | set(program.outputs)
        # an epilogue written over its product (codegen.groups.in_place_epilogues) takes the product's slot, which
        # lives until the epilogue's output is last read
        shared = cprogram.shared or {}
        for y, p in shared.items():
            last_use[p] = max(last_use.get(p, 0), last_use.get(y, 0))
        exprs: dict = {}
        self.nodes, self.const, self.terms, spans = [], [], [], []
        for node_id, (dims, dtype) in program.buffers.items():
            if node_id in owned or node_id in shared:
                continue
            # (a buffer only in per-thread scratch, codegen.c_attention: no bytes)
            const, terms = (0 if node_id in getattr(cprogram, "scratch", ()) else dtype.itemsize), []
            for d in dims:
                v = d.to_int() if hasattr(d, "to_int") else int(d)
                if v is not None:
                    const *= v
                else:
                    terms.append(exprs.setdefault(d, len(exprs)))
            start = kernel_of[node_id]
            self.nodes.append(node_id)
            self.const.append(const)
            self.terms.append(tuple(terms))
            spans.append((start, last_use.get(node_id, start)))
        self.index = {n: j for j, n in enumerate(self.nodes)}
        # interference: j and i overlap unless one ends before the other starts (a sweep over start order)
        n = len(self.nodes)
        self.conflicts: list[list[int]] = [[] for _ in range(n)]
        by_start = sorted(range(n), key=lambda j: spans[j][0])
        for a, j in enumerate(by_start):
            end = spans[j][1]
            for i in by_start[a + 1:]:
                if spans[i][0] > end:
                    break
                self.conflicts[j].append(i)
                self.conflicts[i].append(j)
        # input/output shapes: a constant dim as itself, a symbolic one as ~(its index in exprs)
        def spec(dims):
            out = []
            for d in dims:
                v = d.to_int() if hasattr(d, "to_int") else int(d)
                out.append(v if v is not None else ~exprs.setdefault(d, len(exprs)))
            return tuple(out)
        self.arena_slots, self.in_slots, self.out_slots = [], [], []
        for k, node_id in enumerate(cprogram.buffer_order):
            if node_id in program.inputs:
                self.in_slots.append((k, node_id, spec(graph.nodes[node_id].dims)))
            elif node_id in program.outputs:
                dims, dtype = program.buffers[node_id]
                self.out_slots.append((k, node_id, spec(dims), dtype.numpy))
            else:
                self.arena_slots.append((k, self.index[shared.get(node_id, node_id)]))
        self.exprs = list(exprs)
        self.n_slots = max(1, len(cprogram.buffer_order))

    def values(self, bindings) -> list[int]:
        """The unique symbolic dims' values at ``bindings`` (each evaluated once)."""
        return [e.evaluate(bindings) for e in self.exprs]

    @staticmethod
    def shape(spec: tuple, vals: list[int]) -> tuple:
        return tuple(d if d >= 0 else vals[~d] for d in spec)

    def sizes(self, vals: list[int]) -> list[int]:
        """Each arena buffer's bytes at the bindings whose dims are ``vals`` (:meth:`values`), rounded up to a
        multiple of 64 (at least 64)."""
        out = []
        for const, terms in zip(self.const, self.terms):
            for t in terms:
                const *= vals[t]
            out.append((const + 63) // 64 * 64 if const > 0 else 64)
        return out

    def place(self, sizes: list[int]) -> "_Plan":
        """First fit, largest first, 64-byte aligned slots; a buffer may reuse the bytes of any buffer whose
        lifetime does not overlap its own."""
        from .arena import first_fit

        slots = [(s + 63) // 64 * 64 for s in sizes]  # (headroom may have unrounded them)
        offsets, total = first_fit(slots, self.conflicts)
        return _Plan(offsets, slots, total)


class _Plan:
    """Arena offsets (from the arena's first 64-byte boundary) and slot bytes of every intermediate. Valid at
    any bindings whose sizes all fit their slots (lifetimes do not depend on the bindings)."""

    __slots__ = ("offsets", "slots", "total", "slot_sum")

    def __init__(self, offsets: list[int], slots: list[int], total: int):
        self.offsets, self.slots, self.total, self.slot_sum = offsets, slots, total, sum(slots)

    def fits(self, sizes: list[int]) -> bool:
        """Every size fits its slot, and the slots are not over twice the sizes in all (a plan made for far
        larger bindings is not reused: its arena would stay allocated for small ones)."""
        return 2 * sum(sizes) >= self.slot_sum and all(s <= c for s, c in zip(sizes, self.slots))


class _Binding:
    """One binding set's run state: its plan, its buffer table (arena slots filled for arena generation
    ``arena_gen``; input/output slots are written by every run), the symbol values and the input/output shapes."""

    __slots__ = ("plan", "layout", "buffers", "arena_gen", "in_slots", "out_slots", "syms")

    def __init__(self, plan: _Plan, layout: _Layout, vals: list[int], bindings, symbols):
        self.plan, self.layout, self.arena_gen = plan, layout, -1
        self.buffers = (ctypes.c_void_p * layout.n_slots)()
        shape = layout.shape
        # (slot, node, its key in graph.tensors, shape): built once per binding set, not per run
        self.in_slots = [(k, n, (n, 0), shape(spec, vals)) for k, n, spec in layout.in_slots]
        # (slot, node, key, shape, numpy dtype, bytes)
        self.out_slots = []
        for k, n, spec, dt in layout.out_slots:
            sh = shape(spec, vals)
            nbytes = dt.itemsize
            for d in sh:
                nbytes *= d
            self.out_slots.append((k, n, (n, 0), sh, dt, nbytes))
        self.syms = (ctypes.c_longlong * max(1, len(symbols)))(*[bindings[s] for s in symbols])

    def fill(self, arena: np.ndarray, gen: int) -> None:
        base = arena.ctypes.data
        base += (-base) % 64
        buffers, offsets = self.buffers, self.plan.offsets
        for k, j in self.layout.arena_slots:
            buffers[k] = base + offsets[j]
        self.arena_gen = gen


# ---------------------------------------------------------------------------------------------- arrays
def exclusively_held(arr, extra: int = 0) -> bool:
    """Whether the caller's ``extra`` references (besides the argument itself) are all that reference ``arr``
    and its memory: then nothing can see a new value written into it. Decided for arrays that own their memory
    and for :func:`_aligned_empty`'s (numpy points every view at the first array of a chain that owns its memory
    or whose base is no numpy array, so views are counted on those); an array over other memory (a view, a
    buffer of the caller's) never is."""
    if not _own_memory(arr):
        return False
    return sys.getrefcount(arr) <= 2 + extra  # (+ getrefcount's own argument and this function's parameter)


def _own_memory(arr) -> bool:
    base = arr.base
    return base is None or type(base) is _Memory or isinstance(base, ctypes.Array)


class _Memory:
    """The owner of an aligned array's bytes (a numpy array over the aligned part of ``raw``). Not a numpy
    array, so that every view of the aligned array has the aligned array itself as its base."""

    __slots__ = ("raw", "__array_interface__")


def _aligned_empty(shape, dtype, nbytes: int | None = None) -> np.ndarray:
    """``np.empty`` starting on a 64-byte boundary (numpy gives 16): kernels' vector loads and streaming stores
    then never split a cache line, and a streamed tile's first and last lines are its own. Its base is a
    :class:`_Memory` (not a numpy array): views of it reference it, so a reference count tells whether anything
    still sees its memory (:func:`exclusively_held`)."""
    dtype = np.dtype(dtype)
    if nbytes is None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    address = raw.__array_interface__["data"][0]
    start = (-address) % 64
    if dtype.kind == "V" or np.dtype(dtype.str) != dtype:  # (no type string for it: ml_dtypes' bfloat16)
        return np.ndarray(shape, dtype, (ctypes.c_char * (nbytes + 64)).from_buffer(raw), start)
    mem = _Memory()
    mem.raw = raw
    mem.__array_interface__ = {"shape": tuple(shape), "typestr": dtype.str, "data": (address + start, False),
                               "version": 3}
    return np.asarray(mem)
