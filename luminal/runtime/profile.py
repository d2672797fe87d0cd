"""The per-kernel time table of ``LUMINAL_PROFILE=1`` builds (:meth:`luminal.runtime.cpu.CPURuntime.profile`)."""

from __future__ import annotations

from ..codegen.kernel import GemmKernel, ReduceKernel, ScatterKernel


def profile_table(graph, program, groups: list, seconds: list[float], top: int | None = 20) -> str:
    """Kernels (groups rendered together) by time spent, slowest first: kind, seconds, share, dims and the node's
    label; at most ``top`` rows (None: all)."""
    rows = []
    for k, group in enumerate(groups):
        kernel = program.kernels[group[0]]
        kind = "gemm" if isinstance(kernel, GemmKernel) else "reduce" if isinstance(kernel, ReduceKernel) else \
            "scatter" if isinstance(kernel, ScatterKernel) else "elementwise"
        if len(group) > 1:
            kind += f" x{len(group)}"
        label = graph.nodes[kernel.out].label if kernel.out in graph.nodes else "?"
        rows.append((seconds[k], k, kind, [str(d) for d in kernel.dims], label))
    total = sum(r[0] for r in rows) or 1.0
    rows.sort(key=lambda r: -r[0])
    lines = [f"{'kernel':>6} {'kind':<12} {'seconds':>10} {'share':>6}  dims / node"]
    for sec, k, kind, dims, label in rows[:top]:
        lines.append(f"{k:>6} {kind:<12} {sec:>10.4f} {sec / total:>6.1%}  {dims} {label}")
    return "\n".join(lines)
