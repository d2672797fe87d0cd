"""Runtimes: the compiled CPU backend (``cpu``); the reference interpreter lives in ``Graph.execute``."""

from __future__ import annotations


def attach(graph, device: str | None) -> None:
    """Give ``graph`` the runtime of ``device`` (``"cpu"`` or ``"reference"``/None)."""
    if device in (None, "reference"):
        graph.runtime = None
        return
    from .cpu import compile_graph
    compile_graph(graph, device)
