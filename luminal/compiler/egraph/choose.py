"""The measured choice among the e-graph's candidate programs (``compile(device="cpu", search=...)``): the glue
between :class:`~luminal.compiler.egraph.EqualitySaturation`, the measurement
(:mod:`luminal.runtime.program_search`) and the tuning cache. See docs/search.md, "Whole programs"."""

from __future__ import annotations

from ...graph import Graph
from ..base import debug_level
from ..generic import RemoveUnusedNodes
from ..schedule import DepthFirst
from .alternatives import root_signatures
from .extract import EGraphData, Extraction, program_key
from .saturate import Saturation, rebuild


def search_options(graph: Graph) -> tuple[str, float | None] | None:
    """``(level, budget_s)`` of the ``compile()`` running the pass when it targets the compiled CPU device (the
    program search measures there), else None."""
    if getattr(graph, "_compile_device", None) != "cpu":
        return None
    return getattr(graph, "_search_options", None)


def measured_choice(sat_pass, graph: Graph, sat: Saturation, eg: EGraphData, best: Extraction, key: str,
                    level: str, budget_s: float | None, alt_key: str | None = None) -> Extraction:
    """The program ``sat_pass`` (an :class:`EqualitySaturation` run) rebuilds when ``compile(search=level)``
    targets a compiled device: with ``"quick"`` / ``"full"`` (and no cached result of that level) the best *K*
    candidates are built, checked against the reference interpreter and timed
    (:mod:`luminal.runtime.program_search`), and the winner is remembered in the tuning cache under
    ``program/<key>``; otherwise the cached winner when there is one, else ``best``. ``alt_key``: the key of the
    graph without the alternatives its front ends offered (:mod:`.alternatives`), when they were built: a
    search then also records ``program-alternatives/<alt_key>``, so that ``search="off"`` builds them again."""
    from ...runtime import program_search, tuning
    from ...runtime.search import DEFAULT_BUDGET

    rep = sat.report
    tkey = f"program/{key}"
    entry = tuning.lookup(tkey)
    rank = {"quick": 1, "full": 2}
    searching = level in rank and (entry is None or rank.get(entry.get("level"), 0) < rank[level])
    if not searching and (entry is None or entry["choice"] == program_key(best)):
        if entry is not None:
            rep.program_choice = "cached"
        return best
    k = program_search.K["full" if "full" in (level, entry and entry.get("level")) else "quick"]
    cands = sat_pass.ranked(graph, sat, eg, k)
    names = [program_key(c) for c in cands]
    if searching and len(cands) == 1:  # nothing to choose: remembered, not measured
        tuning.store(tkey, {"choice": names[0], "seconds": 0.0, "level": level, "candidates": {}})
        rep.program_choice = "measured"
        return best
    if not searching:
        rep.program_choice = "cached"
        return cands[names.index(entry["choice"])] if entry["choice"] in names else best
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET[level]
    res = program_search.measure(graph, cands, lambda g, c: rebuild(g, sat.encoding, eg, c),
                                 (RemoveUnusedNodes(), DepthFirst()), budget)
    labels = root_signatures(sat.encoding, eg)
    res.labels = {i: switched(best, c, labels) for i, c in enumerate(cands)}
    rep.program_search, rep.program_choice = res, "measured"
    if debug_level() >= 1:
        print(f"[egraph] program search ({level}): {len(cands)} candidates; "
              + (f"skipped: {res.skipped}" if res.skipped else
                 "ms " + ", ".join(f"{i}: {t * 1e3:.3f}" for i, t in sorted(res.seconds.items()))
                 + f"; rejected {res.rejected}; winner {res.winner} ({res.labels[res.winner]}; paired "
                 f"ratio {res.confirm_ratio}); "
                 f"{res.elapsed:.2f} s"))
    if not res.skipped and res.seconds and not res.interrupted:
        tuning.store(tkey, {"choice": names[res.winner], "seconds": res.seconds.get(res.winner, 0.0),
                            "level": level, "candidates": {names[i]: t for i, t in res.seconds.items()}})
        if alt_key is not None:
            tuning.store(f"program-alternatives/{alt_key}", {"choice": key, "seconds": 0.0, "level": level})
    return cands[res.winner]


def switched(best: Extraction, cand: Extraction, offered: dict | None = None) -> str:
    """What ``cand`` chose differently from ``best``, as ``old op -> new op`` counts (``"best"`` for itself); an
    alternative a front end offered (``offered``: root signature -> kind) as ``offered <kind>``."""
    counts: dict[str, int] = {}
    for cls in sorted(set(cand.reachable()) & set(best.choice)):
        old, new = best.choice[cls], cand.choice[cls]
        if old != new:
            name = f"offered {offered[new.signature]}" if offered and new.signature in offered else \
                f"{old.op}->{new.op}"
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(counts.items())) or "best"
