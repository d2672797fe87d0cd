"""Graphviz export of a :class:`~luminal.graph.Graph` (``Graph.to_dot`` / ``Graph.export_dot``)."""

from __future__ import annotations

import os
import shutil
import subprocess

from . import ops


def to_dot(graph, show_shapes: bool = True) -> str:
    """Graphviz DOT source of the graph (nodes labelled with op, dtype and shape)."""
    lines = ["digraph luminal {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for n in graph.nodes.values():
        color = "lightblue" if isinstance(n.op, ops.Input) else "white"
        label = f"{n.id}: {n.label}"
        if n.name and n.name != str(n.op):
            label += f"\\n{n.op}"
        if show_shapes:
            label += f"\\n{[str(d) for d in n.dims]} {n.dtype.value}"
        if n.id in graph.to_retrieve:
            color = "palegreen"
        lines.append(f'  n{n.id} [label="{_dot_escape(label)}", style=filled, fillcolor={color}];')
    for n in graph.nodes.values():
        for k, e in enumerate(n.inputs):
            attrs = f'label="{k}' + (f': {_dot_escape(str([str(d) for d in e.shape.dims]))}' if show_shapes else "")
            attrs += '"'
            lines.append(f"  n{e.src} -> n{n.id} [{attrs}];")
    for before, after in sorted(graph.schedule):
        lines.append(f"  n{before} -> n{after} [style=dashed, color=gray];")
    lines.append("}")
    return "\n".join(lines) + "\n"

def export_dot(graph, path: str | os.PathLike, render: str | None = "svg", show_shapes: bool = True) -> str | None:
    """Write DOT to ``path``; when Graphviz's ``dot`` exists also render ``path`` + ``.svg``/``.png``.

    Returns the rendered file's path, or ``None`` when nothing was rendered.
    """
    path = os.fspath(path)
    _atomic_write_text(path, to_dot(graph, show_shapes))
    if render and shutil.which("dot"):
        out = f"{os.path.splitext(path)[0]}.{render}"
        subprocess.run(["dot", f"-T{render}", path, "-o", out], check=True, capture_output=True)
        return out
    return None



def _dot_escape(text: str) -> str:
    return text.replace("\\n", "\x00").replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "\\n")


def _atomic_write_text(path: str, text: str) -> None:
    from .io.atomic import atomic_save  # (temporary + fsync + rename; symlinks, umask and read-only files honoured)

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    atomic_save(path, write)
