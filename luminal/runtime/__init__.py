"""Runtimes as plug-ins: a device name maps to a function that attaches a runtime to a graph.

``"reference"`` is the numpy interpreter (:mod:`luminal.runtime.reference`; it also runs every graph that was
never compiled, ``graph.runtime is None``), ``"cpu"`` the compiled C backend (:mod:`luminal.runtime.cpu`),
``"gpu-interpret"``/``"cuda"`` the Triton backend (:mod:`luminal.runtime.gpu`). A runtime object, set as
``graph.runtime`` by its device's factory, implements ``execute(graph)`` and ``stale(graph)`` (whether the graph
changed since it compiled, e.g. new symbol bindings it cannot serve); ``Graph`` also looks up the optional hooks
``recycle(node, old_array)``, ``fetch(graph, node)`` and ``carry_on_device(graph, output, input)`` with
``getattr``. ``register_runtime`` adds a device. Factories are named as ``"module:function"`` strings and imported
only when their device is requested, so no backend (or its dependencies) loads for a graph that does not use it.
"""

from __future__ import annotations

import importlib
from typing import Callable

# device -> "module:function" (imported on first use) or a callable factory(graph, device, search, budget_s)
_RUNTIMES: dict[str, object] = {"reference": "luminal.runtime.reference:attach",
                                 "cpu": "luminal.runtime.cpu:compile_graph",
                                 "gpu-interpret": "luminal.runtime.gpu:compile_graph",
                                 "cuda": "luminal.runtime.gpu:compile_graph"}


def register_runtime(device: str, factory) -> None:
    """Register ``factory(graph, device, search, budget_s)`` (a callable, or a ``"module:function"`` string
    imported on first use) as the runtime of ``device``; it sets ``graph.runtime``."""
    if not isinstance(device, str) or not device or device == "reference":
        raise ValueError(f"cannot register a runtime for device {device!r}: expected a non-empty name other than "
                         "'reference' (the interpreter, which runs every uncompiled graph)")
    if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
        raise TypeError(f"the runtime factory of {device!r} must be callable or a 'module:function' string, "
                        f"got {factory!r}")
    _RUNTIMES[device] = factory


def devices() -> list[str]:
    """The device names ``Graph.compile(device=...)`` accepts."""
    return ["reference"] + sorted(d for d in _RUNTIMES if d != "reference")


def check_device(device) -> str:
    """``device`` when it names a registered runtime (or the reference), else a ValueError listing them."""
    if device not in _RUNTIMES:
        raise ValueError(f"unknown device {device!r}; expected one of {devices()}")
    return device


def _factory(device: str) -> Callable:
    factory = _RUNTIMES[check_device(device)]
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        factory = getattr(importlib.import_module(module), name)
    return factory


def prepare(graph, device: str) -> None:
    """Before a compile's passes: start the work of ``device``'s runtime that does not depend on their result. The
    built-in ``"cpu"`` runtime starts building the GEMM library parts the program will most likely link
    (:func:`luminal.runtime.prefetch.prefetch_library_parts`); other devices have no such step."""
    if device == "cpu" and _RUNTIMES.get("cpu") == "luminal.runtime.cpu:compile_graph":
        from .prefetch import prefetch_library_parts

        prefetch_library_parts(graph)


def attach(graph, device: str | None, search: str | None = None, budget_s: float | None = None) -> None:
    """Give ``graph`` the runtime of ``device`` (see :func:`devices`; ``"reference"``/None: the interpreter,
    :data:`luminal.runtime.reference.REFERENCE`);
    ``search``/``budget_s``: the measured search of a compiled device (:mod:`luminal.runtime.search`; ignored by
    the reference)."""
    from .search import check_budget, check_level
    search, budget_s = check_level(search), check_budget(budget_s)
    _factory("reference" if device is None else device)(graph, device or "reference", search, budget_s)
