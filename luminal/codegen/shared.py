"""Kernels that share one compiled body, and the tables ``luminal_run`` dispatches them from.

:func:`_shared_body` renames a rendered kernel's buffers to local slots and moves its constant buffer offsets
into the pointers it is passed (:mod:`.rebase`), so kernels doing the same work (the layers of a transformer, the
steps of an unrolled recurrence) compile once; :func:`_dispatch` writes ``luminal_run``: per kernel, gather its
pointers from tables and call its body. See docs/cpu_backend.md, "Compile time of large programs".
"""

from __future__ import annotations

import re

from .rebase import rebase

_BUF_NAME = re.compile(r"\bb(\d+)\b")
_BUF_DECL = re.compile(r"^\s*(?:const )?[\w ]+\*(?:restrict )?b(\d+) = \([^)]*\)bufs\[(\d+)\];$")


def _shared_body(k: int, epilogue: str, kernel: str, bodies: dict[str, str]) -> tuple[list[str], str, list]:
    """Kernel ``k``'s C functions, with identical kernels compiled once.

    A kernel's text differs from another's only in which buffers it touches when they do the same work (the
    layers of a transformer): the buffers are renamed to local slots in the order the code (not the pointer
    declarations, which follow the global buffer order) first uses them, ``b17 = bufs[17]`` becoming
    ``b0 = bufs[0]``; the canonical text is keyed in ``bodies``. Returns the new functions' texts, the body's name
    and the pointers kernel ``k`` passes it (see :func:`_dispatch`). C compile time then grows with the number of
    *distinct* kernels, not with the depth of the model. Constant offsets into a buffer move into the pointer
    passed in (:func:`~luminal.codegen.rebase.rebase`), so the steps of an unrolled loop share a body too.
    """
    lines = (epilogue + "\n\n" + kernel if epilogue else kernel).split("\n")
    declared = {}
    for line in lines:
        m = _BUF_DECL.match(line)
        if m:
            declared[int(m.group(1))] = int(m.group(2))
    order: list[int] = []
    for line in lines:
        if not _BUF_DECL.match(line):
            for m in _BUF_NAME.finditer(line):
                b = int(m.group(1))
                if b in declared and b not in order:
                    order.append(b)
    order += sorted(b for b in declared if b not in order)
    local = {b: j for j, b in enumerate(order)}
    out_lines: list[str] = []
    decls: list[tuple[int, str]] = []
    for line in lines + [""]:  # (a sentinel flushes the last block of declarations)
        m = _BUF_DECL.match(line)
        renamed = _BUF_NAME.sub(lambda mm: f"b{local[int(mm.group(1))]}" if int(mm.group(1)) in local
                                else mm.group(0), line)
        if m:
            renamed = renamed.replace(f"bufs[{m.group(2)}]", f"bufs[{local[int(m.group(1))]}]")
            decls.append((local[int(m.group(1))], renamed))
            continue
        if decls:  # a block of pointer declarations, in local slot order
            out_lines += [d for _, d in sorted(decls)]
            decls = []
        out_lines.append(renamed)
    canon, shifts = rebase("\n".join(out_lines[:-1]))  # constant offsets move into the pointers passed in
    canon = canon.replace(f"epilogue_{k}", "EPILOGUE").replace(f"kernel_{k}(", "KERNEL(")
    name = bodies.get(canon)
    out = []
    if name is None:
        name = bodies[canon] = f"kbody_{len(bodies)}"
        out.append(canon.replace("EPILOGUE", f"kepi_{len(bodies) - 1}").replace("KERNEL(", f"{name}("))
    # the pointers the body gets: global buffer slot, plus a constant offset in elements of the slot's C type
    pointers = [(declared[b], *shifts.get(j, (None, 0))) for j, b in enumerate(order)]
    return out, name, pointers


def _dispatch(calls: list[tuple[str, list]], profile: bool, init: str = "") -> str:
    """``luminal_run``: for each kernel in order, gather its buffer pointers (table ``lm_slot``/``lm_off``) and call
    its shared body (table ``lm_body``). Tables rather than a wrapper function per kernel: a model with thousands
    of kernels (an unrolled recurrence) would otherwise give the C compiler thousands of functions to inline into
    one."""
    n = max(1, len(calls))
    first, slots, offs = [0], [], []
    for _, pointers in calls:
        for slot, ctype, shift in pointers:
            slots.append(str(slot))
            offs.append(f"{shift} * (long long)sizeof({ctype})" if shift else "0")
        first.append(len(slots))
    width = max([b - a for a, b in zip(first, first[1:])] + [1])
    lines = ["typedef int (*lm_body_fn)(void **bufs, const long long *syms);",
             f"static lm_body_fn const lm_body[{n}] = {{{', '.join(name for name, _ in calls) or '0'}}};",
             f"static const int lm_first[{n + 1}] = {{{', '.join(map(str, first))}}};",
             f"static const int lm_slot[{max(1, len(slots))}] = {{{', '.join(slots) or '0'}}};",
             f"static const long long lm_off[{max(1, len(offs))}] = {{{', '.join(offs) or '0'}}};"]
    if profile:  # LUMINAL_PROFILE=1: seconds per kernel, summed over runs, read by the runtime
        lines += [f"static double lm_prof[{n}];",
                  f"void luminal_profile(double *out) {{ for (int k = 0; k < {n}; k++) out[k] = lm_prof[k]; }}"]
    call = ("{ double t = omp_get_wtime(); err = lm_body[k](kb, syms); lm_prof[k] += omp_get_wtime() - t; }"
            if profile else "err = lm_body[k](kb, syms);")
    return "\n".join(lines) + f"""
int luminal_run(void **bufs, const long long *syms) {{
    int err = 0;
    void *kb[{width}];
    {init}
    for (int k = 0; k < {len(calls)}; k++) {{
        for (int j = lm_first[k]; j < lm_first[k + 1]; j++) kb[j - lm_first[k]] = (char *)bufs[lm_slot[j]] + lm_off[j];
        {call}
        if (err) return err;
    }}
    return err;
}}
"""
