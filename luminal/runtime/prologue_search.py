"""Measured choice between a materialized GEMM operand and a fused prologue (:mod:`luminal.codegen.gemm_prologue`).

For every buffer :func:`~luminal.codegen.gemm_prologue.prologue_candidates` may remove (a convolution's
im2col matrix, a copy of a strided operand), a small program is built from the real kernels at the real
sizes: the materializing kernel, each GEMM reading the buffer with OpenBLAS and with the own GEMM, and each
GEMM with the operand fused into its packing. It runs on random operands with per-kernel timers (the same
timers as ``LUMINAL_PROFILE=1``); a kernel's time is the minimum over rounds of its mean per run.
**The fused products must match the materialized ones** (OpenBLAS and the own GEMM: error at most 1e-3
(float32) or 1e-9 (float64) of the largest reference value) **before fusion may win**; it wins when its
GEMMs take less time than the materializing kernel plus the faster of the materialized GEMMs. Where a fused
GEMM runs the direct convolution (:mod:`luminal.codegen.gemm_direct`), the same GEMMs fused but *packed*
(``GemmKernel.direct=False``) are a third plan, checked and timed alike; and where the direct convolution
would take a GEMM only in a *marginal* form (at least half its lanes in use, but fewer than its thresholds ask:
7x7 images, rows of 7 + 2 halo), the GEMMs with it (``GemmKernel.direct="marginal"``) are a fourth. The fastest
wins (measured, a 3x3 convolution of 64 channels on 7x7 images, batch 32: 1.24 ms packed, 0.79 direct; on 4x4
images, half the lanes idle, 4.1 vs 7.5: so the thresholds stay, and the search decides between them). Where a
fused reader runs a Winograd form (:mod:`luminal.codegen.gemm_winograd`: a 3x3 stride-1 layer), the same GEMMs
with each other form that changes some reader's plan (``"wino-off"``: the direct kernel's other forms,
``"wino-f2"`` / ``"wino-f4"``: F(2x2, 3x3) / F(4x4, 3x3); ``"wino-f2w"`` / ``"wino-f4w"``: those in wide blocks,
:data:`~luminal.codegen.gemm_winograd.WIDE`; ``GemmKernel.wino``) are measured too, instead of the count rules
alone (:func:`~luminal.codegen.gemm_winograd.wino_tile`, fitted on seven layers of one machine), and where the
copy's readers are fastest in different forms, ``"wino-mix"`` gives each its own. Each kernel's time is its
minimum over at least :data:`ROUNDS` rounds, and more until :data:`MEASURE_S` seconds (per level) are spent.

Decisions are stored in the tuning cache under ``prologue/<dtype>/<hash>`` keys (the hash describes the
materializing kernel and its readers at the bound sizes), so ``search="off"`` reuses them. Without an
entry ``"off"`` fuses window copies (im2col matrices) into deep enough GEMMs only (:func:`default_fused`).
``$LUMINAL_PROLOGUE`` forces the choice: ``fused`` fuses every candidate, ``materialized`` none, ``auto`` (or
unset) decides as above; any other value is an error.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import re
import time
import warnings

import numpy as np

from ..codegen.gemm_prologue import fuse_prologues, fused_gemm_source, fused_name, prologue_candidates
from ..codegen.kernel import GemmKernel, Program
from ..shape import to_expr
from .build import SEARCH_COMPILE_FLOOR_S, CompileTimeout, compile_deadline

# the measured plans whose GEMMs read the operand through its prologue
FUSED = ("fused", "packed", "marginal", "wino-off", "wino-f2", "wino-f4", "wino-f2w", "wino-f4w")
# plan -> GemmKernel.wino ("2w" / "4w": the tile in wide blocks, luminal.codegen.gemm_winograd.WIDE)
WINO = {"wino-off": 0, "wino-f2": 2, "wino-f4": 4, "wino-f2w": "2w", "wino-f4w": "4w"}
# every plan a decision may name: "wino-mix" gives each reader of the copy its own fastest form (_mixed_forms)
PLANS = FUSED + ("wino-mix", "materialized")
FORMS = 3  # stored with each decision: an entry measured before these plans (3: the wide Winograd blocks) is
# measured again
ROUNDS = 5  # rounds of the measuring program at least; more until MEASURE_S[level] seconds are spent
ROUND_S = 0.02
# seconds of rounds per copy measured: W4's input-gradient copy (a measuring program of ~45 ms a run) in 5 rounds
# picked the rules' Winograd block over the wide one in 3 of 4 searches, in 12 rounds once in two, in 40 rounds (and
# in the training step itself, and in the layer's own graph) the wide one, 10-19 % faster: minima of a few runs
# of a 2-core machine shared with others differ by more than these forms do (across processes the choice still
# varied: docs/search.md)
MEASURE_S = {"quick": 0.5, "full": 2.0}
MAX_ROUNDS = 200
MODES = ("", "auto", "fused", "materialized")


def forced_mode() -> str:
    """``$LUMINAL_PROLOGUE`` (``"fused"``, ``"materialized"``, or ``""``: decide); ``ValueError`` otherwise."""
    mode = os.environ.get("LUMINAL_PROLOGUE", "").strip()
    if mode not in MODES:
        raise ValueError(f"LUMINAL_PROLOGUE={mode!r}: expected 'fused', 'materialized' or 'auto'")
    return "" if mode == "auto" else mode


def _concrete(program: Program, bindings, buffers) -> dict | None:
    """Buffer -> concrete dims at ``bindings`` (None if a size is unbound)."""
    out = {}
    for b in buffers:
        dims = []
        for d in program.buffers[b][0]:
            try:
                dims.append(int(d.evaluate(bindings)) if hasattr(d, "evaluate") else int(d))
            except Exception:  # noqa: BLE001 - an unbound symbol
                return None
        out[b] = tuple(dims)
    return out


def prologue_key(program: Program, buf: int, uses) -> str:
    """The tuning-cache key of fusing ``buf`` into its GEMM readers ``uses`` (structure and sizes, no ids)."""
    writer = next(k for k in program.kernels if k.out == buf)
    parts = [repr(writer.dims), _strip(repr(writer.value))]
    for r, side in uses:
        g = program.kernels[r]
        parts += [side, repr(g.dims), repr(g.a_view), repr(g.b_view)]
    text = re.sub(r"\bbuffer=-?\d+", "buffer=?", "|".join(parts))
    return f"prologue/{writer.dtype.value}/" + hashlib.sha1(text.encode()).hexdigest()[:20]


def _strip(text: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _mini_program(program: Program, buf: int, uses, blas: bool):
    """The measuring program: ``[materialize, GEMMs (blas), GEMMs (own), GEMMs (fused)]`` with their own outputs,
    ``GEMMs (packed)`` (fused, never the direct convolution) where a fused reader runs the direct convolution
    (:mod:`luminal.codegen.gemm_direct`), and ``GEMMs (marginal)`` (fused, the direct convolution in its marginal
    forms too) where that adds a direct kernel; returns ``(program, variants)`` where ``variants[name]`` lists
    ``(kernel index, out buffer)`` per reader."""
    from ..codegen.gemm_direct import direct_plan
    from ..codegen.values import kernel_buffers

    writer = next(k for k in program.kernels if k.out == buf)
    readers = [program.kernels[r] for r in dict.fromkeys(r for r, _ in uses)]
    needed = set().union(*[kernel_buffers(k) for k in [writer] + readers])
    base = Program([writer] + readers, {b: program.buffers[b] for b in needed}, [], [], {})
    fused = fuse_prologues(base, {buf})
    packed = fuse_prologues(base, {buf}, {buf}) if any(
        direct_plan(fused, g) is not None for g in fused.kernels if isinstance(g, GemmKernel)) else None
    marginal = fuse_prologues(base, {buf}, marginal={buf})
    if not any(direct_plan(fused, g) is None and direct_plan(marginal, h) is not None
               for g, h in zip(fused.kernels, marginal.kernels) if isinstance(g, GemmKernel)):
        marginal = None
    fresh = min([0, *(b for b in program.buffers if isinstance(b, int))]) - 1
    kernels, dims = [writer], {}
    variants: dict[str, list] = {}
    forms = {"fused": fused, "packed": packed, "marginal": marginal, **_wino_forms(base, buf, fused)}
    for name in (["blas"] if blas else []) + ["own"] + [f for f, p in forms.items() if p is not None]:
        variants[name] = []
        for g in forms[name].kernels if name in forms else readers:
            dims[fresh] = program.buffers[g.out]
            variants[name].append((len(kernels), fresh))
            kernels.append(dataclasses.replace(g, out=fresh))
            fresh -= 1
    used = set().union(*[kernel_buffers(k) for k in kernels])
    return Program(kernels, {b: dims.get(b) or program.buffers[b] for b in sorted(used, key=lambda x: (x < 0, abs(x)))},
                   [], [], {}), variants


def _form(program: Program, g: GemmKernel):
    """What the direct kernel runs for ``g``: (mode, Winograd tile size, block rows and register tile) of its plan,
    or None (no direct plan)."""
    from ..codegen.gemm_direct import direct_plan

    plan = direct_plan(program, g)
    return None if plan is None else (plan.mode, *((plan.wino or {}).get(k) for k in ("E", "R", "NV", "MR")))


def _wino_forms(base: Program, buf: int, fused: Program) -> dict:
    """Plan name (``WINO``) -> ``base`` with ``buf`` fused and its readers in that Winograd form, for each form
    that changes some reader's plan from the rules' choice (``fused``); empty where no reader runs one."""
    gemms = [g for g in fused.kernels if isinstance(g, GemmKernel)]
    default = tuple(_form(fused, g) for g in gemms)
    if not any(f is not None and f[0] in ("wino", "winodw") for f in default):
        return {}
    out, seen = {}, {default}
    for name, tile in WINO.items():
        prog = fuse_prologues(base, {buf}, wino={buf: tile})
        forms = tuple(_form(prog, g) for g in prog.kernels if isinstance(g, GemmKernel))
        if forms not in seen:
            seen.add(forms)
            out[name] = prog
    return out


def measure_prologue(program: Program, buf: int, uses, bindings, blas: bool, seconds: float = 0.0) -> dict | None:
    """Seconds per run of ``materialize`` + GEMMs (``blas``, ``own``) and of the ``fused`` GEMMs for removing
    ``buf`` (and of the ``packed`` ones where the fused ones run the direct convolution, of the ``marginal`` ones
    where those add one, of the Winograd forms where a reader runs one), and whether the fused (``"correct"``)
    and the other fused plans' (``"<plan>_correct"``) products matched; None when a size is unbound. Each
    kernel's time is its minimum over :data:`ROUNDS` rounds, and more while ``seconds`` are not spent."""
    from ..codegen.c import CRenderer
    from ..codegen.gemm import default_config
    from ..codegen.groups import kernel_groups
    from .build import build_program, load_program, release_scratch, trim_heap
    from .search import function_name, own_sources

    trim_heap()  # (the previous measurement's arrays, freed on its return)

    mini, variants = _mini_program(program, buf, uses, blas)
    dims = _concrete(mini, bindings, mini.buffers)
    if dims is None:
        return None
    dtype = mini.kernels[0].dtype.value
    cfg = default_config(dtype)
    impl, sources = {}, [own_sources({("own:" + cfg.tag(), dtype)})]
    for name, entries in variants.items():
        for i, _ in entries:
            g = mini.kernels[i]
            if name in FUSED:
                fa, fb = g.a_pro is not None, g.b_pro is not None
                fcfg = fused_config(g)
                fn = fused_name(function_name("own:" + fcfg.tag(), dtype), fa, fb)
                if fn not in impl.values():
                    sources.append(fused_gemm_source(dtype, fcfg, fn, fa, fb))
                impl[i] = fn
            else:
                impl[i] = function_name("blas" if name == "blas" else "own:" + cfg.tag(), dtype)
    if len(kernel_groups(mini)) != len(mini.kernels):
        return None  # (never expected: each kernel must have its own timer)
    cprog = CRenderer(mini, blas, profile=True, gemm_impl=impl, gemm_sources="\n\n".join(sources)).render()
    lib, _parts = load_program(cprog, *build_program(cprog))
    rng = np.random.default_rng(0)
    arrays = []
    for b in cprog.buffer_order:
        dt = mini.buffers[b][1].numpy
        if b in {mini.kernels[0].out} | {o for e in variants.values() for _, o in e}:
            arrays.append(np.zeros(dims[b], dt))
        else:
            arrays.append(rng.standard_normal(dims[b]).astype(dt))
    ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
    syms = (ctypes.c_longlong * max(1, len(cprog.symbols)))(*[int(bindings[s]) for s in cprog.symbols])
    run, prof = lib.luminal_run, lib.luminal_profile
    run.restype = ctypes.c_int
    n = len(mini.kernels)
    acc = (ctypes.c_double * n)()

    def totals():
        prof(acc)
        return np.array(acc[:n])

    try:
        t0 = time.perf_counter()
        if run(ptrs, syms) != 0:
            return None
        first = time.perf_counter() - t0
        out_of = {o: arrays[cprog.buffer_order.index(o)] for e in variants.values() for _, o in e}
        tol = 1e-3 if dtype == "float32" else 1e-9
        fits = {}  # each fused plan: every product within tol of both materialized ones
        for kind in [v for v in FUSED if v in variants]:
            fits[kind] = True
            for j, (_, fo) in enumerate(variants[kind]):
                got = out_of[fo]
                for name in variants:
                    if name in FUSED:
                        continue
                    ref = out_of[variants[name][j][1]]
                    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
                    if not np.all(np.abs(got - ref) <= tol * max(scale, 1e-30)):
                        fits[kind] = False
        reps = max(1, int(ROUND_S / max(first, 1e-6)))
        best, until = None, time.perf_counter() + seconds
        for rnd in range(MAX_ROUNDS):
            if rnd >= ROUNDS and time.perf_counter() >= until:
                break
            before = totals()
            for _ in range(reps):
                run(ptrs, syms)
            per = (totals() - before) / reps
            best = per if best is None else np.minimum(best, per)
        t_mat = float(best[0])
        times = {name: float(sum(best[i] for i, _ in e)) for name, e in variants.items()}
        materialized = t_mat + min(t for name, t in times.items() if name not in FUSED)
        each = {f"{name}_each": [float(best[i]) for i, _ in e] for name, e in variants.items()}
        return {"materialize": t_mat, **times, "materialized": materialized, "correct": fits["fused"],
                **{f"{k}_correct": fits[k] for k in FUSED[1:] if k in fits}, **each}

    finally:
        release_scratch([lib, *_parts])  # (the mini program's buffers, grown to the real sizes)

def choose_prologues(program: Program, bindings, level: str, blas: bool, store: bool = True,
                     budget_s: float | None = None):
    """The buffers of ``program`` to fuse (see the module docstring), the measurements made, the fused buffers
    whose GEMMs pack them although the direct convolution applies (measured faster), and those whose GEMMs take
    the direct convolution in its marginal forms too (measured faster), and the Winograd form of the fused buffers
    whose readers run another than the rules' (measured faster): ``(set of buffers, {cache key: measurement}, set
    of buffers, set of buffers, {buffer: GemmKernel.wino})``. Measuring (``level`` ``"quick"``/``"full"``)
    stops once ``budget_s`` seconds (default: the GEMM search's default budget for the level) are spent; buffers
    not measured then get the unmeasured default (not cached)."""
    from . import tuning
    from .search import DEFAULT_BUDGET

    budget = budget_s if budget_s is not None else DEFAULT_BUDGET.get(level, 10.0)
    start = time.perf_counter()

    mode = forced_mode()
    cands = prologue_candidates(program)
    if not cands or mode == "materialized":
        return set(), {}, set(), set(), {}
    for dtype in {program.kernels[uses[0][0]].dtype.value for uses in cands.values()}:
        if not _renders(dtype):
            warnings.warn("the own GEMM's template has no pack call to replace: GEMM operands stay materialized",
                          stacklevel=3)
            return set(), {}, set(), set(), {}
    if mode == "fused":
        return set(cands), {}, set(), set(), {}
    keys = {buf: prologue_key(program, buf, uses) for buf, uses in cands.items()}
    cached = tuning.lookup_many(set(keys.values()))
    chosen, report, packed, marginal, wino = set(), {}, set(), set(), {}

    def work(item):  # the hottest copies are measured first (as GEMMs in the GEMM search)
        total = 0
        for r, _ in item[1]:
            g = program.kernels[r]
            size = 1
            for d in tuple(g.dims) + (g.a_view.dims[-1],):
                size *= to_expr(d).to_int() or 1
            total += size
        return -total

    for buf, uses in sorted(cands.items(), key=work):
        entry = cached.get(keys[buf])
        if _usable(entry, uses, level):
            _take(entry["choice"], buf, chosen, packed, marginal, wino, entry.get("wino"))
            continue
        if level not in ("quick", "full") or time.perf_counter() - start > budget:
            if default_fused(program, buf, uses):
                chosen.add(buf)
            continue
        try:
            with compile_deadline(max(budget - (time.perf_counter() - start), SEARCH_COMPILE_FLOOR_S)):
                m = measure_prologue(program, buf, uses, bindings, blas, MEASURE_S[level])
        except KeyboardInterrupt:
            warnings.warn("prologue search interrupted: remaining operands stay materialized", stacklevel=2)
            break
        except CompileTimeout as e:  # (its measuring program would have outlasted the budget) the default
            warnings.warn(f"prologue search: {e}; {keys[buf]} takes the unmeasured default", stacklevel=2)
            m = None
        if m is None:  # (a size not bound yet, a symbolic batch: nothing to measure) the unmeasured default
            if default_fused(program, buf, uses):
                chosen.add(buf)
            continue
        report[keys[buf]] = m
        if not m["correct"]:
            warnings.warn(f"search: the fused prologue gave a wrong result for {keys[buf]}; not used", stacklevel=2)
        # the fastest of: materialized, fused (the direct convolution where it applies), packed (fused, no
        # direct convolution), marginal (fused, the direct convolution in its marginal forms too), the Winograd
        # forms (one for all readers, or each reader's own); a fused form only where its products matched
        times = {"materialized": m["materialized"], **({"fused": m["fused"]} if m["correct"] else {}),
                 **{k: m[k] for k in FUSED[1:] if m.get(f"{k}_correct")}}
        mix = _mixed_forms(m)
        if mix is not None:
            times["wino-mix"] = mix[0]
        choice = min(times, key=times.get)
        mix = list(mix[1]) if choice == "wino-mix" else None
        _take(choice, buf, chosen, packed, marginal, wino, mix)
        if store and m["correct"]:
            tuning.store(keys[buf], {"choice": choice, "seconds": times[choice], "level": level,
                                     "candidates": times, "forms": FORMS, **({"wino": mix} if mix else {})})
    return chosen, report, packed, marginal, wino


def _usable(entry, uses, level: str) -> bool:
    """Whether the cached decision ``entry`` (or None) stands for a copy read by ``uses`` at search ``level``:
    a known plan (a ``"wino-mix"`` with one valid form per reader), from a search with these plans (``FORMS``)
    unless nothing is measured now (``"off"``, ``"background"``), and measured by ``"full"`` for ``"full"``."""
    if entry is None or entry.get("choice") not in PLANS:
        return False
    mix = entry.get("wino")
    if entry["choice"] == "wino-mix" and not (isinstance(mix, list) and all(s in (None, *WINO.values()) for s in mix)
                                              and len(mix) == len(dict.fromkeys(r for r, _ in uses))):
        return False
    if level in ("off", "background"):
        return True
    return entry.get("forms") == FORMS and (level == "quick" or entry.get("level") == "full")


def _mixed_forms(m: dict):
    """Where the readers of one copy are fastest in different Winograd forms (a layer's forward in one, its weight
    gradient, which reads the same im2col, in another): ``(seconds, [GemmKernel.wino per reader])`` of each
    reader in its fastest correct form (None: the rules'); None where one form is fastest for all (a plan
    already) or fewer than two were measured."""
    forms = {"fused": None, **WINO}
    ok = [f for f in forms if f in m and (m["correct"] if f == "fused" else m.get(f"{f}_correct"))]
    if len(ok) < 2:
        return None
    pick = [min(ok, key=lambda f: m[f"{f}_each"][j]) for j in range(len(m["fused_each"]))]
    if len(set(pick)) < 2:
        return None
    return sum(m[f"{f}_each"][j] for j, f in enumerate(pick)), [forms[f] for f in pick]


def _take(choice: str, buf: int, chosen: set, packed: set, marginal: set, wino: dict, mix=None) -> None:
    """Record the plan ``choice`` for ``buf`` in choose_prologues' results (``mix``: a ``"wino-mix"``'s forms)."""
    if choice != "materialized":
        chosen.add(buf)
    if choice == "packed":
        packed.add(buf)
    if choice == "marginal":
        marginal.add(buf)
    if choice in WINO:
        wino[buf] = WINO[choice]
    if choice == "wino-mix":
        wino[buf] = tuple(mix)


def fused_config(g: GemmKernel):
    """The own-GEMM configuration of a GEMM with a fused prologue: the default one, or for at most
    ``AUTO_SMALL_M`` rows (a convolution with few output channels, or its weight gradient) the small-M one
    (AVX-512: 8x48 tiles, so 16 / 32 / 64 rows need no edge tile; the default 12x32 leaves 4 of 16 rows to a
    slow edge tile)."""
    from ..codegen.gemm import default_config
    from ..codegen.gemm_small import AUTO_SMALL_M, small_config

    dtype = g.dtype.value
    m = to_expr(g.dims[-2]).to_int()
    if m is not None and m <= AUTO_SMALL_M:
        return small_config(dtype)
    return default_config(dtype)


def fused_gemms(program: Program) -> tuple[dict, str]:
    """Kernel index -> C function of every GEMM of ``program`` with a fused prologue (the own GEMM in the
    configuration of :func:`fused_config`) and the C source of those functions."""
    from .search import function_name

    impl, sources = {}, []
    for i, g in enumerate(program.kernels):
        if not isinstance(g, GemmKernel) or (g.a_pro is None and g.b_pro is None):
            continue
        dtype = g.dtype.value
        cfg = fused_config(g)
        fn = fused_name(function_name("own:" + cfg.tag(), dtype), g.a_pro is not None, g.b_pro is not None)
        if fn not in impl.values():
            sources.append(fused_gemm_source(dtype, cfg, fn, g.a_pro is not None, g.b_pro is not None))
        impl[i] = fn
    return impl, "\n\n".join(sources)


@functools.lru_cache(maxsize=None)
def _renders(dtype: str) -> bool:
    """Whether a fused own GEMM can be derived from the own GEMM's template (it replaces the pack calls)."""
    from ..codegen.gemm import default_config

    try:
        fused_gemm_source(dtype, default_config(dtype), "lm_probe", True, True)
    except RuntimeError:
        return False
    return True


DEFAULT_MIN_K = 64  # the unmeasured default fuses window copies only into GEMMs at least this deep (and wide)


def _overlapping(view) -> bool:
    """Whether ``view`` reads some element through two indices along non-broadcast axes of constant extent and
    stride (sliding windows; an axis of symbolic extent or stride, where a batch of any size enters, is left out)."""
    axes = []
    for d, st in zip(view.dims, view.strides):
        d, st = to_expr(d).to_int(), to_expr(st).to_int()
        if d is not None and st is not None and d > 1 and st != 0:
            axes.append((abs(st), d))
    span = 0
    for st, d in sorted(axes):
        if st <= span:
            return True
        span = max(span, st * (d - 1))
    return False


def default_fused(program: Program, buf: int, uses) -> bool:
    """The unmeasured plan for a fusable buffer (``search="off"`` without a tuning-cache entry): fused when it is
    a *window copy* (an im2col matrix: its value reads a buffer through overlapping windows) and every GEMM
    reading it has K >= ``DEFAULT_MIN_K`` and M, N >= 16 (W4, AVX-512: conv2's im2col fused, a median 6 %
    less time per step; conv1's K = 9 one is faster copied) or runs the direct convolution
    (:mod:`luminal.codegen.gemm_direct`, which reads the input in place), else materialized."""
    from ..codegen.gemm_direct import direct_plan
    from ..codegen.gemm_prologue import Prologue, split_axes
    from ..codegen.kernel import Load
    from ..codegen.values import walk

    writer = next(k for k in program.kernels if k.out == buf)
    if not any(isinstance(v, Load) and _overlapping(v.view) for v in walk(writer.value)):
        return False
    for r, side in uses:
        g = program.kernels[r]
        view = getattr(g, side + "_view")
        if direct_plan(program, dataclasses.replace(g, **{side: None, side + "_pro": Prologue(
                writer, view, side, split_axes(writer.dims, view, side))})) is not None:
            continue  # the direct convolution reads it in place (codegen.gemm_direct), whatever the GEMM's shape
        m, n, k = (to_expr(x).to_int() for x in (g.dims[-2], g.dims[-1], g.a_view.dims[-1]))
        if None in (m, n, k) or k < DEFAULT_MIN_K or min(m, n) < 16:
            return False
    return True
