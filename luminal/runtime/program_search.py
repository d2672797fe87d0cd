"""Measured choice between the e-graph's candidate programs: each one compiled, checked and timed on this machine.

Equality saturation (:class:`luminal.compiler.egraph.EqualitySaturation`) extracts one program by a cost model,
and can extract up to *K* distinct ones (:func:`luminal.compiler.egraph.extract.extract_k`: the best, the best
with one kind of rewrite applied everywhere it matched, the best with one e-class switched). With
``compile(search="quick" | "full")`` on a compiled device the pass hands them here:

* every candidate is rebuilt in a **detached copy** of the graph (no runtime, no hooks or checks; inputs that
  are not carried state share their arrays, carried state is copied, so the user's graph is untouched) and
  compiled for the device with the rest of the default pipeline (dead-node removal, depth-first schedule) and
  ``search="off"`` (the cached GEMM winners);
* inputs without data get data at the bound sizes (floats: a fixed-seed normal draw times 0.5; integers and
  bools: zeros, valid indices and masks). A graph with an unbound symbol is not measured;
* **before it may win, a candidate's outputs are compared with the reference interpreter's result of the
  graph as it was before saturation** (every ``retrieve()``d tensor after one execute, which includes the new
  values of carried state, e.g. the weights a training step updates: ``Graph.carry`` retrieves them; error at most 1e-3 of
  the largest reference value for float32, 1e-9 for float64, 2e-2 for bfloat16/float16, but not below
  :data:`FLOOR` of that of the largest float output: outputs that are pure rounding noise; integers and bools
  equal; NaN and infinities where the reference has them). A candidate that fails, or that fails to build or
  run, is dropped with a warning;
* each challenger, once built, **races the cost model's program** (candidate 0), the two in turn (so they see
  the same machine load): up to :data:`ROUNDS` rounds of about :data:`ROUND_S` seconds each; a candidate's time
  is the **minimum over rounds of the mean time per execute** (candidate 0's over all its rounds). After three
  rounds a challenger slower than :data:`EARLY_STOP` times the best stops. Only candidate 0, the fastest
  challenger so far and the one racing are alive at a time (each holds its arena and library: W4's eight
  candidates, all alive at once, took 620 MB; the process peaked at 966 MB against PyTorch eager's ~480). The
  budget covers building and measuring; candidates not built when it runs out are not measured, and a
  challenger's C compile is stopped (the candidate dropped) past what is left of the budget, or
  :data:`~luminal.runtime.build.SEARCH_COMPILE_FLOOR_S` if that is more;
* the winner is the fastest, but the cost model's choice (candidate 0) is kept unless another is at least
  :data:`MARGIN` faster, and then again in :data:`CONFIRM` paired rounds (the two alternating; the median of
  the per-pair ratios must be below ``1 - MARGIN``): on a shared machine single rounds vary by more than the
  candidates differ, and noise must not pick the program.

The pass stores the result in the tuning cache (:mod:`luminal.runtime.tuning`) under ``program/<key>``, the
key naming the encoded graph, the rule files and the pass's settings; the entry's choice is the winner's
:func:`~luminal.compiler.egraph.extract.program_key`, so ``search="off"`` rebuilds the measured winner in
later compiles and processes. Ctrl-C keeps what was measured so far. A tqdm bar shows the progress.
"""

from __future__ import annotations

import copy
import gc
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from .build import SEARCH_COMPILE_FLOOR_S, compile_deadline

ROUNDS = 5
ROUND_S = 0.02
EARLY_STOP = 1.3
MARGIN = 0.03
CONFIRM = 9  # paired rounds confirming a winner other than the cost model's choice
K = {"quick": 4, "full": 8}  # candidate programs per level
TOLERANCE = {"float32": 1e-3, "float64": 1e-9, "bfloat16": 2e-2, "float16": 2e-2}
FLOOR = 1e-3  # no output's tolerance is below this fraction of the tolerance of the largest output


@dataclass
class ProgramSearchResult:
    """What one search measured: ``winner`` indexes the candidates; ``seconds`` per measured candidate (the
    minimum over rounds of the mean per execute); ``rejected`` candidate -> why it may not win."""
    winner: int = 0
    labels: dict[int, str] = field(default_factory=dict)  # candidate -> what it switched (the pass fills it)
    seconds: dict[int, float] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    skipped: str = ""  # why nothing was measured ("" when something was)
    confirm_ratio: float | None = None  # median challenger / default time over the paired confirmation rounds
    interrupted: bool = False
    elapsed: float = 0.0


def detached_copy(graph):
    """A deep copy of ``graph`` that runs on its own: no runtime, hooks or data checks (they may refer to
    the user's objects); arrays of inputs that are not carried state are shared (nothing writes them)."""
    carried = {inp for _, inp in graph.carries}
    shared = {id(a): a for (nid, _), a in graph.tensors.items() if nid not in carried and isinstance(a, np.ndarray)}
    saved = graph.runtime, graph.post_execute_hooks, graph.checks
    try:
        graph.runtime, graph.post_execute_hooks, graph.checks = None, [], []
        g = copy.deepcopy(graph, memo=dict(shared))
    finally:
        graph.runtime, graph.post_execute_hooks, graph.checks = saved
    g.device = None
    return g


def _concrete_dims(graph) -> str:
    """"" when every node's dims evaluate at the graph's bindings, else the first unbound size."""
    bindings = dict(graph.dyn_map)
    for n in graph.nodes.values():
        for d in n.dims:
            try:
                int(d.evaluate(bindings)) if hasattr(d, "evaluate") else int(d)
            except Exception:  # noqa: BLE001 - an unbound symbol
                return f"node {n.id} ({n.label}) has the unbound size {d}"
    return ""


def fill_inputs(graph, seed: int = 0) -> None:
    """Give every input without data (and not computed from the bindings) data at the bound sizes."""
    from .. import ops
    rng = np.random.default_rng(seed)
    bindings = dict(graph.dyn_map)
    for nid in sorted(graph.nodes):
        n = graph.nodes[nid]
        if not isinstance(n.op, ops.Input) or (nid, 0) in graph.tensors or nid in graph.deferred:
            continue
        dims = tuple(int(d.evaluate(bindings)) if hasattr(d, "evaluate") else int(d) for d in n.dims)
        arr = np.zeros(dims, n.dtype.numpy)
        if n.dtype.is_float:
            arr[...] = rng.standard_normal(dims) * 0.5
        graph.tensors[(nid, 0)] = arr


def outputs(graph, nodes) -> dict[int, np.ndarray]:
    """The values of ``nodes`` (ids of the graph the copy was made from, followed through redirects)."""
    from ..shape import ShapeTracker
    from ..tensor import GraphTensor
    out = {}
    for nid, (dims, dtype) in nodes.items():
        t = GraphTensor(graph, nid, ShapeTracker.contiguous_of(dims), dtype)
        out[nid] = t.data()
    return out


def _errors(got: dict, ref: dict) -> tuple[dict[int, float], str]:
    """Per float output, the largest absolute difference from the reference over its finite positions; and ""
    or what differs beyond rounding (a shape, integer or bool values, where the NaNs and infinities are)."""
    errs: dict[int, float] = {}
    for nid, r in ref.items():
        g = got.get(nid)
        if g is None or g.shape != r.shape:
            return errs, f"output {nid}: shape {None if g is None else g.shape} != {r.shape}"
        if str(r.dtype) not in TOLERANCE and r.dtype.kind not in "fc":
            if not np.array_equal(g, r):
                return errs, f"output {nid}: {int(np.sum(g != r))} of {r.size} elements differ"
            continue
        g64, r64 = np.asarray(g, np.float64), np.asarray(r, np.float64)
        nan_r, nan_g = np.isnan(r64), np.isnan(g64)
        if not np.array_equal(nan_r, nan_g):
            return errs, f"output {nid}: NaN at {int(np.sum(nan_r != nan_g))} positions where the reference has none/one"
        finite = np.isfinite(r64)
        if not np.array_equal(g64[~finite & ~nan_r], r64[~finite & ~nan_r]):
            return errs, f"output {nid}: infinities differ"
        errs[nid] = float(np.max(np.abs(g64[finite] - r64[finite]))) if finite.any() else 0.0
    return errs, ""


def _scale(r: np.ndarray) -> float:
    r64 = np.asarray(r, np.float64)
    finite = np.isfinite(r64)
    return float(np.max(np.abs(r64[finite]))) if finite.any() else 0.0


def mismatch(got: dict, ref: dict) -> str:
    """"" when every output agrees with the reference, else what differs: shapes, integers and bools equal,
    NaNs and infinities where the reference has them, and a float output within :data:`TOLERANCE` times its
    largest reference value, but never less than :data:`TOLERANCE` x :data:`FLOOR` x the largest value of all
    float outputs: an output that is pure rounding noise (the bias gradient of a layer followed by a batch
    norm, exactly zero in real numbers: 3e-9 here, beside weight gradients of order 1) has no relative
    tolerance to speak of."""
    errs, why = _errors(got, ref)
    if why:
        return why
    scales = {nid: _scale(ref[nid]) for nid in errs}
    overall = max(scales.values(), default=0.0)
    for nid, err in errs.items():
        tol = TOLERANCE.get(str(ref[nid].dtype), 1e-3)
        allowed = tol * max(scales[nid], FLOOR * overall)
        if not err <= allowed:
            return f"output {nid}: max error {err:.3g} > {allowed:.3g} (largest reference value {scales[nid]:.3g})"
    return ""


def measure(graph, candidates, apply, tail, budget_s: float, progress=None) -> ProgramSearchResult:
    """Build, check and time ``candidates`` (extractions of ``graph``'s e-graph; ``apply(copy, candidate)``
    rebuilds one in a copy of ``graph``; ``tail`` the passes run after it) within ``budget_s`` seconds; see
    the module docstring. ``graph`` itself is not changed."""
    result = ProgramSearchResult()
    start = time.perf_counter()
    why = _concrete_dims(graph)
    if why:
        result.skipped = why
        return result
    retrieved = {nid: (graph.nodes[nid].dims, graph.nodes[nid].dtype) for nid in sorted(graph.to_retrieve)
                 if nid in graph.nodes}
    if not retrieved:
        result.skipped = "the graph retrieves nothing"
        return result
    base = detached_copy(graph)
    fill_inputs(base)
    ref_graph = detached_copy(base)
    try:
        ref_graph.execute()  # no runtime: the reference interpreter, on the graph as it was before saturation
        ref = outputs(ref_graph, retrieved)
    except Exception as e:  # noqa: BLE001 - without a reference nothing may win: the cost model's choice runs
        result.skipped = f"the reference interpreter failed on the graph ({type(e).__name__}: {e})"
        return result
    del ref_graph
    bar = None
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(candidates), desc="luminal program search", unit="prog", leave=False,
                   disable=(None if progress is None else not progress))
    except ImportError:  # pragma: no cover - tqdm is a dependency
        pass
    first = None       # candidate 0 (the cost model's program) once built: every challenger races it
    best = None        # (index, graph) of the fastest challenger so far: the other challengers are dropped
    try:
        for i, cand in enumerate(candidates):
            if i > 0 and time.perf_counter() - start > budget_s:
                result.rejected[i] = "not built: the budget was spent"
                continue
            # a challenger's compile may take what is left of the budget, at least SEARCH_COMPILE_FLOOR_S
            # (candidate 0 is built whatever it takes)
            limit = None if i == 0 else max(budget_s - (time.perf_counter() - start), SEARCH_COMPILE_FLOOR_S)
            g = _build(base, cand, apply, tail, retrieved, ref, i, result, limit)
            if g is None:
                continue
            if bar is not None:
                bar.update(1)
            if i == 0:
                first = g
                continue
            _race((0, first) if first is not None else best, (i, g), result, start, budget_s)
            if best is None or result.seconds[i] < result.seconds[best[0]]:
                best, g = (i, g), best[1] if best is not None else None  # (the previous best is released)
            _release(g)
            g = None
            gc.collect()  # (a dropped program's arena and library go now, not at the next collection)
            if bar is not None and result.seconds:
                bar.set_postfix_str(f"best {min(result.seconds.values()) * 1e3:.2f} ms")
    except KeyboardInterrupt:
        result.interrupted = True
        warnings.warn("program search interrupted: keeping the candidates measured so far", stacklevel=3)
    finally:
        if bar is not None:
            bar.close()
    result.winner = choose(result.seconds)
    if result.winner != 0 and first is not None and not result.interrupted:
        if not _confirm(first, best[1], result):
            result.winner = 0
    for kept in (first, best[1] if best is not None else None):
        _release(kept)  # (the winner is rebuilt in the user's graph)
    first = best = None
    gc.collect()  # (their arenas go now, before the next search stage allocates its own)
    from .build import trim_heap
    trim_heap()
    result.elapsed = time.perf_counter() - start
    return result


def _build(base, cand, apply, tail, retrieved, ref, i: int, result: ProgramSearchResult, limit=None):
    """Candidate ``i`` rebuilt in a copy of ``base``, compiled (its C compiles within ``limit`` seconds when
    given: :func:`luminal.runtime.build.compile_deadline`), run once and checked against the reference outputs
    ``ref``; None (with the reason in ``result.rejected`` and a warning) when it fails or disagrees."""
    g = detached_copy(base)
    try:
        with warnings.catch_warnings(), compile_deadline(limit):
            warnings.simplefilter("ignore")
            apply(g, cand)
            g.compile(tail, device="cpu", search="off")
            g.execute()
            got = outputs(g, retrieved)
    except Exception as e:  # noqa: BLE001 - a candidate that cannot run is not a candidate
        result.rejected[i] = f"failed: {type(e).__name__}: {e}"
        warnings.warn(f"program search: candidate {i} failed to build or run ({e}); dropped", stacklevel=4)
        return None
    why = mismatch(got, ref)
    if why:
        result.rejected[i] = f"wrong result: {why}"
        warnings.warn(f"program search: candidate {i} disagrees with the reference interpreter ({why}); dropped",
                      stacklevel=4)
        return None
    return g


def _release(g) -> None:
    """Free the per-thread scratch of candidate ``g``'s libraries (None: nothing); it does not run again."""
    runtime = getattr(g, "runtime", None) if g is not None else None
    if runtime is not None and hasattr(runtime, "release_scratch"):
        runtime.release_scratch()


def _race(rival, challenger, result: ProgramSearchResult, start: float, budget_s: float) -> None:
    """Up to :data:`ROUNDS` rounds of ``challenger`` (``(index, graph)``) in turn with ``rival`` (the cost model's
    program, or the best challenger when that did not build; None: the challenger alone), each candidate's time
    the minimum over its rounds (``result.seconds``); the race stops after three rounds when the challenger is
    slower than :data:`EARLY_STOP` times the best, and when the budget is spent (after one round)."""
    i = challenger[0]
    for rnd in range(ROUNDS):
        if rnd > 0 and time.perf_counter() - start > budget_s:
            break
        for k, prog in (rival, challenger) if rival is not None else (challenger,):
            result.seconds[k] = min(result.seconds.get(k, float("inf")), _round(prog))
        if rnd >= 2 and result.seconds[i] > EARLY_STOP * min(result.seconds.values()):
            break


def _confirm(default, challenger, result: ProgramSearchResult) -> bool:
    """Whether ``challenger`` beats the cost model's program in :data:`CONFIRM` paired rounds (the two
    alternate, so a change of the machine's load hits both): the median of the per-pair time ratios must be
    below ``1 - MARGIN``. Rounds on a shared machine vary by more than the differences between candidates;
    a minimum over a few rounds alone would let noise pick the program."""
    ratios = []
    try:
        for _ in range(CONFIRM):
            t0 = _round(default)
            t1 = _round(challenger)
            ratios.append(t1 / t0)
    except KeyboardInterrupt:
        result.interrupted = True
    if not ratios:
        return False
    result.confirm_ratio = float(np.median(ratios))
    return result.confirm_ratio < 1 - MARGIN


def _round(g) -> float:
    """One round: ``execute()`` repeated for about :data:`ROUND_S` seconds; the mean seconds per call."""
    n, t0 = 0, time.perf_counter()
    while True:
        g.execute()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= ROUND_S:
            return dt / n


def choose(seconds: dict[int, float]) -> int:
    """The fastest candidate, but candidate 0 (the cost model's choice) unless another beats it by
    :data:`MARGIN`; 0 when nothing was measured."""
    if not seconds:
        return 0
    fastest = min(seconds, key=lambda i: (seconds[i], i))
    if 0 in seconds and seconds[fastest] > (1 - MARGIN) * seconds[0]:
        return 0
    return fastest
