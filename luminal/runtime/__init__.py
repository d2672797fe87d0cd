"""Runtimes: the compiled CPU backend (``cpu``); the reference interpreter lives in ``Graph.execute``."""

from __future__ import annotations


def attach(graph, device: str | None, search: str | None = None, budget_s: float | None = None) -> None:
    """Give ``graph`` the runtime of ``device`` (``"cpu"`` or ``"reference"``/None); ``search``/``budget_s``:
    the measured search of a compiled device (:mod:`luminal.runtime.search`; ignored by the reference)."""
    from .search import check_budget, check_level
    search, budget_s = check_level(search), check_budget(budget_s)
    if device in (None, "reference"):
        graph.runtime = None
        return
    from .cpu import compile_graph
    compile_graph(graph, device, search, budget_s)
