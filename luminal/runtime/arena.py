"""Arena planning shared by the compiled runtimes: one allocation for a program's intermediates, placed by their
lifetimes in kernel order so buffers that are never alive together share bytes.

``lifetimes`` gives each intermediate buffer the step of the kernel that writes it and the last step that reads
it; ``place`` puts the buffers, largest first, at the lowest aligned offset that overlaps no buffer alive at the
same time (first fit, :func:`first_fit`, which the CPU runtime's cached plans use too). Inputs and kept outputs
are not planned: they outlive an execution.
"""

from __future__ import annotations

from typing import Mapping


def lifetimes(program, bindings: Mapping[str, int], step_of_kernel=None) -> list[tuple[int, int, int, int]]:
    """``(first step, last step, bytes, node id)`` of every intermediate buffer of ``program`` (a
    :class:`luminal.codegen.kernel.Program`) at ``bindings``. ``step_of_kernel[i]`` is kernel ``i``'s step (kernels
    that run together share one; default: each kernel its own step)."""
    from ..codegen.values import kernel_buffers

    step = step_of_kernel or list(range(len(program.kernels)))
    written = {k.out: step[i] for i, k in enumerate(program.kernels)}
    last_use: dict[int, int] = {}
    for i, kernel in enumerate(program.kernels):
        for b in kernel_buffers(kernel):
            last_use[b] = max(last_use.get(b, step[i]), step[i])
    owned = set(program.inputs) | set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    out = []
    for node_id, (dims, dtype) in program.buffers.items():
        if node_id in owned or node_id not in written:
            continue
        size = dtype.itemsize
        for d in dims:
            size *= d.evaluate(bindings)
        start = written[node_id]
        out.append((start, last_use.get(node_id, start), max(size, 1), node_id))
    return out


def first_fit(slots: list[int], conflicts) -> tuple[list[int], int]:
    """``(offsets, total)``: each slot (bytes, already aligned) at the lowest offset that overlaps no slot of
    ``conflicts[j]`` (the buffers alive at the same time as ``j``), largest first; ties in input order."""
    offsets = [-1] * len(slots)
    total = 0
    for j in sorted(range(len(slots)), key=lambda j: -slots[j]):
        size = slots[j]
        busy = sorted((offsets[i], offsets[i] + slots[i]) for i in conflicts[j] if offsets[i] >= 0)
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            if hi > offset:
                offset = hi
        offsets[j] = offset
        if offset + size > total:
            total = offset + size
    return offsets, total


def place(intervals, align: int = 64) -> tuple[dict[int, int], int]:
    """``({node id: byte offset}, total bytes)`` for ``intervals`` as :func:`lifetimes` gives them; every offset
    is a multiple of ``align``."""
    intervals = sorted(intervals, key=lambda t: t[3])
    slots = [(size + align - 1) // align * align for _, _, size, _ in intervals]
    conflicts = [[i for i, (s1, e1, _, _) in enumerate(intervals) if i != j and not (e1 < s0 or e0 < s1)]
                 for j, (s0, e0, _, _) in enumerate(intervals)]
    offsets, total = first_fit(slots, conflicts)
    return {t[3]: o for t, o in zip(intervals, offsets)}, total
