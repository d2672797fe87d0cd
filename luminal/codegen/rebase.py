"""Constant buffer offsets moved out of a kernel's text, so kernels that differ only in where they start reading
share one compiled body.

An unrolled loop (a recurrent layer over 64 time steps, a model's repeated blocks reading slices of one buffer)
renders kernels whose code is identical except for a constant in their index expressions: step ``t`` reads
``b0[(507904 + i1 + (256 * i0))]``, step ``t + 1`` ``b0[(499712 + i1 + (256 * i0))]``. :func:`rebase` subtracts
each buffer's smallest constant offset from every access of that buffer, and the caller adds it to the buffer's
pointer instead (``(float *)bufs[3] + 507904``); the kernels' canonical texts become equal and
:func:`luminal.codegen.shared._shared_body` compiles the body once. (A 2-layer LSTM's forward and backward over 64 steps:
154 distinct kernel bodies become 72.)

A buffer is rebased only when *every* use of it in the text has a literal integer offset that the renderer writes
first in a sum (``bN[(C + ...)]``, ``bN + C``, ``bN + (C + ...)``) and the smallest is positive (the shifted
pointer stays inside the buffer: the element at the smallest offset is read); any other use (a symbolic offset, a
store without a constant, a macro) leaves that buffer as it is.
"""

from __future__ import annotations

import re

_DECL = re.compile(r"^\s*(?:const )?([\w ]+?) \*(?:restrict )?(b\d+) = \([^)]*\)bufs\[(\d+)\];$", re.M)
_USE = re.compile(r"\b(b\d+)\b")
_INDEX = re.compile(r"\[\((-?\d+) \+ ")          # bN[(C + ...
_PTR = re.compile(r" \+ (-?\d+)(?=[,);])")       # bN + C,
_PTR_SUM = re.compile(r" \+ \((-?\d+) \+ ")      # bN + (C + ...


def rebase(text: str) -> tuple[str, dict[int, tuple[str, int]]]:
    """``text`` with each rebasable buffer's smallest constant offset subtracted from its accesses, and
    ``{local slot: (C element type, offset)}`` for the pointers the caller must shift."""
    slots = {m.group(2): (int(m.group(3)), m.group(1).strip()) for m in _DECL.finditer(text)}
    uses: dict[str, list[tuple[int, int, int]]] = {}  # name -> [(start, end, value)] of each offset literal
    bad: set[str] = set()
    for m in _USE.finditer(text):
        name = m.group(1)
        if name not in slots or name in bad:
            continue
        rest = text[m.end():m.end() + 40]
        if rest.startswith(" = ("):  # its declaration
            continue
        for pattern in (_INDEX, _PTR_SUM, _PTR):
            hit = pattern.match(rest)
            if hit:
                uses.setdefault(name, []).append((m.end() + hit.start(1), m.end() + hit.end(1), int(hit.group(1))))
                break
        else:
            bad.add(name)
    edits: list[tuple[int, int, str]] = []
    shifts: dict[int, tuple[str, int]] = {}
    for name, found in uses.items():
        if name in bad:
            continue
        base = min(v for _, _, v in found)
        if base <= 0:
            continue
        slot, ctype = slots[name]
        shifts[slot] = (ctype, base)
        edits += [(a, b, str(v - base)) for a, b, v in found]
    for a, b, new in sorted(edits, reverse=True):
        text = text[:a] + new + text[b:]
    return text, shifts
