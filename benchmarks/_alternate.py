"""Shared by the one-process luminal-vs-torch benchmarks: alternate steps, print min and median ms."""

from __future__ import annotations

import os
import time

import numpy as np


def alternate(steps: dict, rounds: int) -> dict:
    """``{name: [seconds, ...]}``: each of ``steps`` (name -> a callable, or None: not run) once per round, in
    order, ``rounds`` times (a shared host's speed drifts: interleaving exposes every side to the same drift)."""
    times: dict = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            if fn is not None:
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    return times


def print_times(title: str, times: dict) -> None:
    """The machine line, ``title``, and a min / median ms row per side (n/a for a side that did not run)."""
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(title)
    print(f"{'framework':<10} {'min ms':>9} {'median ms':>10}")
    for name, ts in times.items():
        text = f"{min(ts) * 1e3:>9.2f} {np.median(ts) * 1e3:>10.2f}" if ts else f"{'n/a':>9} {'n/a':>10}"
        print(f"{name:<10} {text}")
