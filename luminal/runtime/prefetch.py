"""Work a CPU compile can start before its passes run: building the GEMM library parts its program will link."""

from __future__ import annotations

import threading

from .. import ops
from ..codegen.c import CProgram
from ..codegen.kernel import GemmKernel, find_gemm, gemm_dims
from ..graph import Graph
from .build import _blas, prebuild
from .search import kernel_default, own_parts


def prefetch_library_parts(graph: Graph) -> list[threading.Thread]:
    """Start building, in the background, the GEMM library parts (:mod:`luminal.codegen.library`) that a program of
    ``graph`` will most likely link and that are not cached yet: the default GEMM routine (``kernel_default``) of
    each matrix product the graph has as the user built it (not of widened bfloat16 / float16 operands, which have
    routines of their own). Called before the compile's passes (``runtime.prepare``), so the parts' C compiler
    (0.8 s for the float32 one on 2 Zen 4 cores, once per machine and flags) runs while the passes run and the
    program is rendered, instead of after; the program's build waits for a part still being built and then finds
    it cached. Returns the threads started (none when everything is cached)."""

    def half_cast(edge):  # a float32 operand that is a bfloat16 / float16 value widened (autocast): codegen.gemm_lowp
        n = graph.nodes[edge.src]
        return isinstance(n.op, ops.Cast) and graph.nodes[n.inputs[0].src].dtype.is_half

    blas = _blas() is not None
    pairs = set()
    for node in graph.nodes.values():
        found = find_gemm(graph, node) if node.dtype.value in ("float32", "float64") else None
        if found is None or any(half_cast(e) for e in graph.nodes[node.inputs[0].src].inputs):
            continue
        a, b = found
        kernel = GemmKernel(node.id, a.src, a.shape, b.src, b.shape, gemm_dims(a, b), node.dtype)
        pairs.add((kernel_default(kernel, blas), node.dtype.value))  # (as the lowered program's default)
    parts = own_parts(pairs, blas)
    threads = [prebuild(CProgram(p.source, [], [], blas)) for p in parts]
    return [t for t in threads if t is not None]
