"""Arena planning shared by the compiled runtimes: one allocation for a program's intermediates, placed by their
lifetimes in kernel order so buffers that are never alive together share bytes.

``lifetimes`` gives each intermediate buffer the step of the kernel that writes it and the last step that reads
it; ``place`` puts the buffers, largest first, at the lowest aligned offset that overlaps no buffer alive at the
same time (first fit). Inputs and kept outputs are not planned: they outlive an execution.
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


def place(intervals, align: int = 64) -> tuple[dict[int, int], int]:
    """``({node id: byte offset}, total bytes)`` for ``intervals`` as :func:`lifetimes` gives them; every offset
    is a multiple of ``align``."""
    offsets: dict[int, int] = {}
    placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
    total = 0
    for start, end, size, node_id in sorted(intervals, key=lambda t: (-t[2], t[3])):
        size = (size + align - 1) // align * align
        busy = sorted((o, o + s) for (s0, e0, o, s) in placed if not (e0 < start or end < s0))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((start, end, offset, size))
        offsets[node_id] = offset
        total = max(total, offset + size)
    return offsets, total
