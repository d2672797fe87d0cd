"""Winograd forms checked in the compiled step: each reader's form timed by the step's own per-kernel timers.

The operand-fusion search (:mod:`luminal.runtime.prologue_search`) times a copy's GEMM readers in each Winograd
form in a *measuring program* of their own: those kernels alone, on random operands, run again and again. That
is not the step's context (the step's other kernels evict what the measuring program keeps in cache; a neighbour
on the shared last-level cache hurts the forms that need more of it), and for W4's input gradient the two disagreed:
the measuring program kept the rules' block in three searches of ``benchmarks/training_workloads.py`` (4.5-4.8
against 5.0-5.4 ms) while the training step itself ran the wide block 11 % faster (6.25 -> 5.55 ms, both builds
alternating in one process).

So with ``search="full"``, once the operand-fusion and GEMM searches have decided, :func:`check_forms` builds the
**whole step** as planned and once per other Winograd form (every Winograd reader in that form; forms that change
no reader's plan are not built), each in a detached copy of the graph (as the program search's candidates:
inputs shared, carried state copied) with the per-kernel timers of ``LUMINAL_PROFILE=1``. The planned build and
one alternative run in turn, one ``execute()`` each per round, at least :data:`MIN_ROUNDS` rounds and until
:data:`STEP_S` seconds are spent; a reader's time in a build is the minimum over rounds of its kernel group's
time. **An alternative's outputs after its first step must match the planned build's** (the program search's
tolerances, :func:`luminal.runtime.program_search.mismatch`) before any of its forms may win. A reader takes
another form only where that form is at least :data:`MARGIN` faster there than the planned one (noise does not
swap forms); readers of one copy may end in different forms (a ``"wino-mix"``).

The result is written back into each checked copy's tuning-cache entry (``"step": true``, its plan and forms
updated), so ``search="off"`` runs it and a later ``"full"`` search does not check it again (unless the check was
cut short: by Ctrl-C, a failed planned build, or the budget before every form was measured). Builds are bounded
by ``compile()``'s ``budget_s``, else :data:`BUDGET_S` seconds in all (a C compile within what is left, at least
:data:`~luminal.runtime.build.SEARCH_COMPILE_FLOOR_S`); forms not measured by then are reported in
``rejected``. Only graphs whose sizes are all bound are checked.
"""

from __future__ import annotations

import contextvars
import ctypes
import gc
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..codegen.gemm_prologue import fuse_prologues, prologue_candidates
from ..codegen.kernel import GemmKernel

FORMS = (None, 2, 4, "2w", "4w")  # GemmKernel.wino values tried (None: the rules'; 0, no Winograd, is not)
STEP_S = 1.5    # seconds of paired rounds per alternative at least
MIN_ROUNDS = 8
MAX_ROUNDS = 400
MARGIN = 0.03   # a reader switches form only when at least this much faster than in the planned build
BUDGET_S = 60.0  # builds and rounds of one check at most this long (then the forms left are not measured)
_FORCED: contextvars.ContextVar = contextvars.ContextVar("luminal_step_forms_plan", default=None)


def forced_plan():
    """The operand-fusion plan a build of :func:`check_forms` must use (``choose_prologues``' tuple), else None;
    such a build also runs with per-kernel timers."""
    return _FORCED.get()


@dataclass
class StepFormsResult:
    """What one check measured: ``seconds[reader][form]`` (``"plan"`` the planned build; a reader is the output
    buffer of its GEMM kernel), the readers that changed form (``changed[reader] = (planned, new)``), the
    operand-fusion ``wino`` map now planned, and the forms not measured or dropped (``rejected[form] = why``)."""
    wino: dict
    seconds: dict = field(default_factory=dict)
    changed: dict = field(default_factory=dict)
    rejected: dict = field(default_factory=dict)
    forms: list = field(default_factory=list)  # the alternative forms built
    elapsed: float = 0.0
    interrupted: bool = False  # (Ctrl-C: the forms measured so far decide; nothing is cached)


def check_in_step(rt, graph, unfused, plan, bindings) -> None:
    """:func:`check_forms` for the runtime ``rt`` (``search="full"``), its result in ``rt.step_forms``; a change
    of form rewrites ``rt.program`` and ``rt.wino_buffers``."""
    rt.step_forms = check_forms(graph, unfused, plan, bindings, rt.budget_s)
    if rt.step_forms is not None and rt.step_forms.wino != rt.wino_buffers:
        rt.wino_buffers = rt.step_forms.wino
        rt.program = fuse_prologues(unfused, plan[0], plan[2], plan[3], rt.wino_buffers)


def _plan_name(form) -> str:
    from .prologue_search import WINO
    if isinstance(form, tuple):
        return "wino-mix"
    return "fused" if form is None else next(k for k, v in WINO.items() if v == form)


def check_forms(graph, unfused, plan, bindings, budget_s: float | None = None) -> StepFormsResult | None:
    """Check the Winograd forms of ``plan`` (``choose_prologues``' result for ``unfused``, the program before
    operand fusion) in the compiled step of ``graph`` (see the module docstring); None when nothing is checked:
    no copy with Winograd readers and a measured tuning entry, all of them checked before, or a size unbound.
    Builds and rounds stop after ``budget_s`` seconds (default :data:`BUDGET_S`)."""
    from . import tuning
    from .program_search import _concrete_dims
    from .prologue_search import _form, prologue_key

    start = time.perf_counter()
    chosen, _, packed, marginal, wino = plan
    cands = prologue_candidates(unfused)
    keys = {b: prologue_key(unfused, b, cands[b]) for b in chosen if b in cands and b not in packed | marginal}
    entries = tuning.lookup_many(set(keys.values()))
    bufs = [b for b in keys if keys[b] in entries]
    if not bufs or all(entries[keys[b]].get("step") for b in bufs) or _concrete_dims(graph):
        return None
    readers = {b: list(dict.fromkeys(unfused.kernels[r].out for r, _ in cands[b])) for b in bufs}

    def forms_of(w) -> dict:
        prog = fuse_prologues(unfused, chosen, packed, marginal, w)
        return {k.out: _form(prog, k) for k in prog.kernels if isinstance(k, GemmKernel)}

    planned = forms_of(wino)
    variants, seen = {}, {tuple(sorted(planned.items(), key=repr))}
    for f in FORMS:
        w = {**wino, **{b: f for b in bufs}}
        forms = forms_of(w)
        key = tuple(sorted(forms.items(), key=repr))
        if key not in seen:
            seen.add(key)
            variants[f] = (w, forms)
    result = StepFormsResult(dict(wino), forms=list(variants))
    new = dict(wino)
    if variants:
        new = _measure(graph, (chosen, packed, marginal), wino, planned, variants, readers, result,
                       (start, budget_s or BUDGET_S))
    result.elapsed = time.perf_counter() - start
    if new is None:  # (the planned build failed: nothing changes, nothing is recorded as checked)
        return result
    result.wino = new
    if result.interrupted or any(why.startswith("not measured") for why in result.rejected.values()):
        return result  # (the forms measured so far decide; not recorded: the next "full" search checks again)
    for b in bufs:
        entry = dict(entries[keys[b]])
        entry.pop("wino", None)
        entry.update({"choice": _plan_name(new.get(b)), "step": True,
                      **({"wino": list(new[b])} if isinstance(new.get(b), tuple) else {})})
        tuning.store(keys[b], entry)
    return result


def _measure(graph, fusion, wino, planned, variants, readers, result, clock) -> dict | None:
    """The paired rounds of :func:`check_forms`; returns the ``wino`` map with each reader's winning form (None
    when the planned build fails: nothing to compare with)."""
    from .build import SEARCH_COMPILE_FLOOR_S, trim_heap
    from .program_search import _release, detached_copy, fill_inputs, mismatch

    chosen, packed, marginal = fusion
    start, budget = clock
    base = detached_copy(graph)
    fill_inputs(base)
    retrieved = {nid: (graph.nodes[nid].dims, graph.nodes[nid].dtype) for nid in sorted(graph.to_retrieve)
                 if nid in graph.nodes}
    outs = [o for b in readers for o in readers[b]]
    current = _build(base, (chosen, {}, packed, marginal, wino), retrieved, None)
    if current is None:
        result.rejected["plan"] = "the planned build failed"
        return None
    try:
        for f, (w, forms) in variants.items():
            spent = time.perf_counter() - start
            if spent > budget:
                result.rejected[f] = "not measured: the budget was spent"
                continue
            got = _build(base, (chosen, {}, packed, marginal, w), retrieved,
                         max(budget - spent, SEARCH_COMPILE_FLOOR_S))
            if got is None:
                result.rejected[f] = "failed to build or run"
                continue
            why = mismatch(got[1], current[1])
            if why:
                result.rejected[f] = f"wrong result: {why}"
                warnings.warn(f"step forms: Winograd form {f!r} disagrees with the planned build ({why}); dropped",
                              stacklevel=4)
                _release(got[0])
                continue
            _race(current[0], got[0], f, outs, result)
            _release(got[0])
            got = None
            gc.collect()
    except KeyboardInterrupt:
        result.interrupted = True
        warnings.warn("step forms: interrupted; keeping the forms measured so far", stacklevel=4)
    finally:
        _release(current[0])
        current = None
        gc.collect()
        trim_heap()
    new = dict(wino)
    for b, outs_b in readers.items():
        old = wino.get(b)
        picks = [old[j] if isinstance(old, tuple) else old for j in range(len(outs_b))]
        for j, o in enumerate(outs_b):
            times = result.seconds.get(o, {})
            tried = {f: t for f, t in times.items() if f != "plan" and variants[f][1][o] != planned[o]}
            if not tried or "plan" not in times:
                continue
            f = min(tried, key=tried.get)
            if tried[f] < (1 - MARGIN) * times["plan"]:
                result.changed[o] = (picks[j], f)
                picks[j] = f
        new[b] = picks[0] if len(set(picks)) == 1 else tuple(picks)
    return new


def _build(base, plan, retrieved, limit):
    """A detached copy of ``base`` compiled with the operand-fusion ``plan`` and per-kernel timers, run once:
    ``(graph, its retrieved outputs)``, or None when it fails to build or run."""
    from .build import compile_deadline
    from .program_search import detached_copy, outputs

    g = detached_copy(base)
    token = _FORCED.set(plan)
    try:
        with warnings.catch_warnings(), compile_deadline(limit):
            warnings.simplefilter("ignore")
            g.compile([], device="cpu", search="off")
            g.execute()
            return g, outputs(g, retrieved)
    except Exception as e:  # noqa: BLE001 - a build that cannot run is not measured
        warnings.warn(f"step forms: a build failed ({type(e).__name__}: {e}); its forms are not measured",
                      stacklevel=5)
        return None
    finally:
        _FORCED.reset(token)


def group_seconds(g) -> dict:
    """Reader (a kernel's output buffer) -> the seconds its kernel group took in one ``execute()`` of ``g``."""
    rt = g.runtime
    groups = rt.cprogram.groups
    buf = (ctypes.c_double * max(1, len(groups)))()
    rt._lib.luminal_profile(buf)
    before = np.array(list(buf))
    g.execute()
    rt._lib.luminal_profile(buf)
    spent = np.array(list(buf)) - before
    return {rt.program.kernels[k].out: float(spent[i]) for i, grp in enumerate(groups) for k in grp}


def _race(current, challenger, form, outs, result) -> None:
    """Paired rounds of the planned build and the build in ``form``: per reader the minimum time of each."""
    t_end = time.perf_counter() + STEP_S
    for rnd in range(MAX_ROUNDS):
        if rnd >= MIN_ROUNDS and time.perf_counter() > t_end:
            break
        for label, g in (("plan", current), (form, challenger)):
            spent = group_seconds(g)
            for o in outs:
                if o in spent:
                    row = result.seconds.setdefault(o, {})
                    row[label] = min(row.get(label, float("inf")), spent[o])
