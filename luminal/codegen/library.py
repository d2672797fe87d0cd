"""GEMM routines compiled once per machine into shared libraries of their own, linked into programs at load time.

A program's C used to carry the source of every GEMM routine it calls. Most of that code does not depend on the
program: ``lm_gemm_lp_<a><b>`` (:mod:`luminal.codegen.gemm_lowp`: the matrix-vector, dot-product, converting
and AMX kernels for one pair of operand storage types) is the same text in every program that uses it, and it is
large. Measured: the W5 training step under ``lm.autocast(bfloat16)`` calls six such pairs; its program was 432
KB of C and took 7.3 s to compile cold, every time the model changed.

Such a routine is now a :class:`LibraryPart`: a complete translation unit (the helpers it needs, the routine, and a
table ``luminal_functions`` of its entry points) that :func:`luminal.runtime.build.build_program` compiles into
its own shared library, cached and verified like a program's, and built concurrently with the program. The
program declares each routine as a pointer with the routine's name (so its call sites do not change) and
defines ``luminal_link(void **fns)``, which the loader (:func:`luminal.runtime.build.load_program`) calls with
the parts' entry points, in order, before the first run. The libraries are loaded privately (``RTLD_LOCAL``):
builds with different flags or sources coexist in one process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..shape import C_PRELUDE
from .c_support import HELPERS, gemm_helpers, with_release

_HIDDEN = '__attribute__((visibility("hidden")))'


@dataclass(frozen=True)
class LibraryPart:
    """A routine compiled separately from the programs that call it (see the module docstring).

    ``key`` names it in messages; ``source`` is its whole translation unit; ``functions`` lists the entry points
    ``luminal_functions`` holds, in order, as ``(name, A element type, B element type, C element type)``: each
    has the GEMM signature ``int f(M, N, K, const A *, sam, sak, const B *, sbn, sbk, C *, lm_epilogue, bufs,
    syms)``."""
    key: str
    source: str
    functions: tuple


def _typedef(name: str, a: str, b: str, c: str) -> str:
    return (f"typedef int (*{name}_t)(long long, long long, long long, const {a} *, long long, long long, "
            f"const {b} *, long long, long long, {c} *, lm_epilogue, void **, const long long *);")


def gemm_part(key: str, body: str, functions: tuple, blas: bool) -> LibraryPart:
    """The :class:`LibraryPart` of ``body`` (C defining the ``functions``, expecting the helpers a program's prelude
    has: ``HELPERS``, the shape helpers, ``gemm_helpers()``)."""
    head = ("#define LUMINAL_BLAS 1\n" if blas else "") + HELPERS + C_PRELUDE + gemm_helpers()
    table = ", ".join(f"(void *){f[0]}" for f in functions)
    return LibraryPart(key, with_release(f"{head}\n{body}\nvoid *luminal_functions[] = {{{table}}};\n"),
                       tuple(functions))


def declarations(parts) -> str:
    """For a program's prelude: each part's entry points as (hidden, external) function pointers under their own
    names, so calls read as direct calls."""
    lines = []
    for part in parts:
        for name, a, b, c in part.functions:
            lines += [_typedef(name, a, b, c), f"extern {_HIDDEN} {name}_t {name};"]
    return "\n".join(lines)


def link_function(parts) -> str:
    """For a program's tail: the pointers' definitions and ``luminal_link(void **fns)``, which sets them from the
    parts' entry points in order (the last translation unit when the program is split, see
    :func:`luminal.runtime.build.split_units`)."""
    names = [f[0] for part in parts for f in part.functions]
    # (each part's digest: a program linked to other parts -- their source can depend on the environment, e.g.
    # LUMINAL_GEMM_STREAM -- is another library, never the same loaded one whose pointers the last link set)
    digests = " ".join(f"{p.key}={hashlib.sha256(p.source.encode()).hexdigest()[:16]}" for p in parts)
    defs = [f"/* linked parts: {digests} */"] + [f"{_HIDDEN} {n}_t {n};" for n in names]
    sets = " ".join(f"{n} = ({n}_t)fns[{i}];" for i, n in enumerate(names))
    return "\n".join(defs) + f"\nvoid luminal_link(void **fns) {{ {sets} }}\n"
