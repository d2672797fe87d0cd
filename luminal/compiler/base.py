"""The compiler protocol and its combinators.

A *compiler* is anything with ``compile(graph, remap) -> output`` (or a plain
callable ``f(graph, remap)``). ``remap`` holds the user's tensor handles; a
pass that replaces nodes records it with :meth:`Graph.replace_uses`, and
:func:`run` points every handle in ``remap`` (nested tuples, lists, dicts,
modules) at the replacement afterwards.

* a tuple or list of compilers runs them in order (outputs returned as a tuple);
* :class:`Looped` reruns its compiler until the graph stops changing;
* :class:`Timed` measures (and at ``LUMINAL_DEBUG>=1`` prints) its compiler's time.

``LUMINAL_DEBUG`` (read when a pass runs): 1 prints each pass's time, 2 adds
node/edge counts after each pass, 3 also writes a DOT file per pass into
``LUMINAL_DEBUG_DIR`` (default ``./luminal_debug``), 4 everything above plus
the graph summary after each pass.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol, Sequence, runtime_checkable

from ..graph import Graph


@runtime_checkable
class Compiler(Protocol):
    """The pass protocol: transform ``graph`` in place, keep the handles in ``remap`` valid."""

    def compile(self, graph: Graph, remap: Any = ()) -> Any: ...


class Pass:
    """Convenience base class: subclasses implement :meth:`run`; ``compile`` adds remapping and debugging."""

    def run(self, graph: Graph) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def compile(self, graph: Graph, remap: Any = ()) -> Any:
        out = self.run(graph)
        graph.follow_redirects(remap)
        return out

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


def debug_level() -> int:
    """The ``LUMINAL_DEBUG`` level (0 when unset or not an integer)."""
    try:
        return int(os.environ.get("LUMINAL_DEBUG", "0"))
    except ValueError:
        return 0


def fingerprint(graph: Graph) -> tuple:
    """A cheap structural fingerprint used to detect whether a pass changed the graph."""
    return (tuple(sorted((i, n.op, tuple(n.inputs)) for i, n in graph.nodes.items())),
            frozenset(graph.schedule), frozenset(graph.no_delete), frozenset(graph.to_retrieve))


_dot_counter = [0]


def _name(compiler) -> str:
    return getattr(compiler, "name", None) or (type(compiler).__name__ if not callable(compiler) or hasattr(
        compiler, "compile") else getattr(compiler, "__name__", repr(compiler)))


def run(compiler, graph: Graph, remap: Any = ()) -> Any:
    """Run ``compiler`` (a pass, a callable, or a sequence of them) on ``graph`` and remap the handles."""
    if isinstance(compiler, (tuple, list)):
        return tuple(run(c, graph, remap) for c in compiler)
    level = debug_level()
    start = time.perf_counter()
    if hasattr(compiler, "compile"):
        out = compiler.compile(graph, remap)
    elif callable(compiler):
        out = compiler(graph, remap)
    else:
        raise TypeError(f"{compiler!r} is not a compiler: it needs a compile(graph, remap) method or to be callable")
    graph.follow_redirects(remap)
    elapsed = time.perf_counter() - start
    if level >= 1 and not isinstance(compiler, (Looped, Timed)):
        line = f"[luminal] {_name(compiler):<28} {elapsed * 1e3:9.2f} ms"
        if level >= 2:
            line += f"   nodes={len(graph.nodes)} edges={sum(len(n.inputs) for n in graph.nodes.values())}"
        print(line)
        if level >= 3:
            folder = os.environ.get("LUMINAL_DEBUG_DIR", "luminal_debug")
            os.makedirs(folder, exist_ok=True)
            _dot_counter[0] += 1
            graph.export_dot(os.path.join(folder, f"{_dot_counter[0]:03d}_{_name(compiler)}.dot"), render=None)
        if level >= 4:
            print(graph.summary())
    return out


class Looped(Pass):
    """Run ``compiler`` repeatedly until the graph no longer changes (at most ``max_iterations`` times)."""

    def __init__(self, compiler, max_iterations: int = 100):
        self.compiler = compiler
        self.max_iterations = max_iterations
        self.iterations = 0

    def compile(self, graph: Graph, remap: Any = ()) -> Any:
        out = None
        self.iterations = 0
        before = fingerprint(graph)
        for _ in range(self.max_iterations):
            out = run(self.compiler, graph, remap)
            self.iterations += 1
            after = fingerprint(graph)
            if after == before:
                break
            before = after
        return out

    def __repr__(self) -> str:
        return f"Looped({self.compiler!r})"


class Timed(Pass):
    """Run ``compiler`` and record its wall time in ``.seconds`` (printed at ``LUMINAL_DEBUG>=1``)."""

    def __init__(self, compiler, label: str | None = None):
        self.compiler = compiler
        self.label = label or _name(compiler)
        self.seconds = 0.0

    def compile(self, graph: Graph, remap: Any = ()) -> Any:
        start = time.perf_counter()
        out = run(self.compiler, graph, remap)
        self.seconds = time.perf_counter() - start
        if debug_level() >= 1:
            print(f"[luminal] {self.label} took {self.seconds * 1e3:.2f} ms")
        return out

    def __repr__(self) -> str:
        return f"Timed({self.compiler!r})"


def sequence(*compilers: Sequence) -> tuple:
    """Compose compilers to run in order (a tuple does the same)."""
    return tuple(compilers)
