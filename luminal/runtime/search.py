"""Measured search: GEMM implementations compiled, run on real buffers, checked and timed on this machine.

For every GEMM kernel of a lowered program (hottest first) the candidates are OpenBLAS (``"blas"``, the
``lm_gemm_*`` wrappers of :mod:`luminal.codegen.c_support`) and luminal's own GEMM in several
configurations (``"own:<tag>"``, :mod:`luminal.codegen.gemm`: cache blocking ``kc/mc/nc`` and register
tiles ``mr x nr``). All candidates of one search are rendered into one C library (own-GEMM functions depend
only on dtype and configuration, not on the shape), compiled once (and cached like every library) and
called through one timing entry per dtype that runs a candidate ``reps`` times at the kernel's real sizes and
strides (for a batched GEMM: the batch, spread over the threads as the generated code does).

Timing is honest on a noisy machine: one warm-up call each, then up to ``ROUNDS`` rounds in which every
candidate still racing runs for about ``ROUND_S``, in turn (a load burst on the host hits all of them, not the
one being measured: measured one after the other, a symbolic BERT at 1 x 32 searched on a busy host came out
20 % slower than unsearched); a candidate's time is the **minimum over rounds of the mean time per call** (the
minimum discards rounds disturbed by other processes). After three rounds, candidates slower than ``EARLY_STOP``
times the best leave the race. The kernel the unmeasured default runs (:func:`default_equivalent`) is kept
unless another candidate is ``MARGIN`` faster. The budget is shared among the kernels in
proportion to their work (building the candidates' library, cached once built, is not counted); past its share a
kernel's candidates get two rounds each, and only past twice the budget are candidates skipped. Before it may win, a candidate's output is
compared with numpy's float64 product of the same strided operands (relative to ``|A| @ |B|``: 1e-3 for
float32, 1e-9 for float64); a wrong candidate is dropped with a warning.

Winners are stored in the tuning cache (:mod:`luminal.runtime.tuning`) keyed by :func:`gemm_key`.
Ctrl-C during a search keeps what was measured so far. A tqdm bar shows candidates done and the best time.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..codegen.kernel import GemmKernel, Program
from ..dtype import DType

LEVELS = ("off", "quick", "full", "background")
DEFAULT_BUDGET = {"quick": 10.0, "full": 60.0, "background": 60.0}
ROUNDS = 7
ROUND_S = 0.004
EARLY_STOP = 1.3
MARGIN = 0.03  # a candidate replaces the default's kernel only when this much faster
DEFAULT_GEMM = "auto"  # the unmeasured default (see default_choice)
SMALL_GEMM = 1 << 23  # as in codegen.c: batched GEMMs up to this many MACs each run one per thread


def check_level(search) -> str:
    """Validate a ``search=`` argument (None means ``$LUMINAL_SEARCH`` or ``"off"``)."""
    import os

    if search is None:
        search = os.environ.get("LUMINAL_SEARCH", "off") or "off"
    if search not in LEVELS:
        raise ValueError(f"search={search!r}: expected one of {', '.join(map(repr, LEVELS))}")
    return search


def check_budget(budget_s) -> float | None:
    if budget_s is None:
        return None
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0:
        raise ValueError(f"budget_s={budget_s!r}: expected a positive number of seconds or None")
    return float(budget_s)


# ---------------------------------------------------------------------------- GEMM shapes at bindings
@dataclass(frozen=True)
class GemmShape:
    """A GEMM kernel's sizes and strides evaluated at concrete symbol bindings."""
    dtype: str
    batch: int
    m: int
    n: int
    k: int
    sam: int
    sak: int
    sbn: int
    sbk: int
    # the operand the program reads from memory, not from cache ("a" or "b": a weight of a program whose inputs
    # exceed the last-level cache, see program_shapes); the search then times it cold
    cold: str = ""

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.n * self.k

    def key(self) -> str:
        return gemm_key(self)


def _layout(s_major: int, s_k: int) -> str:
    if s_k == 1:
        return "k1"
    if s_major == 1:
        return "t1"
    if s_major == 0 or s_k == 0:
        return "b0"
    return "s"


def gemm_key(shape: GemmShape) -> str:
    """The tuning-cache key of a GEMM: dtype, batch, sizes and the operands' layout classes (K contiguous,
    transposed, broadcast, strided)."""
    return (f"gemm/{shape.dtype}/b{shape.batch}/m{shape.m}n{shape.n}k{shape.k}"
            f"/a{_layout(shape.sam, shape.sak)}/b{_layout(shape.sbn, shape.sbk)}"
            + (f"/cold-{shape.cold}" if shape.cold else ""))


def gemm_shape(kernel: GemmKernel, bindings) -> GemmShape | None:
    """``kernel``'s shape at ``bindings``, or None when a size needs a symbol that is not bound."""
    dims = kernel.dims
    nb = len(dims) - 2
    av, bv = kernel.a_view, kernel.b_view
    try:
        batch = 1
        for d in dims[:nb]:
            batch *= d.evaluate(bindings) if hasattr(d, "evaluate") else int(d)

        def ev(e):
            return e.evaluate(bindings) if hasattr(e, "evaluate") else int(e)
        return GemmShape(kernel.dtype.value, batch, ev(dims[-2]), ev(dims[-1]), ev(av.dims[-1]),
                         ev(av.strides[nb]), ev(av.strides[nb + 2]), ev(bv.strides[nb + 1]), ev(bv.strides[nb + 2]))
    except Exception:  # an unbound symbol
        return None


# ---------------------------------------------------------------------------- candidates
_TAG = re.compile(r"^(\d+)x(\d+)_k(\d+)_m(\d+)_n(\d+)$")


def own_config(choice: str):
    """The :class:`~luminal.codegen.gemm.GemmConfig` named by ``"own:<tag>"`` (None for another choice);
    ``ValueError`` for a tag that does not parse."""
    from ..codegen.gemm import GemmConfig

    if not choice.startswith("own:"):
        return None
    m = _TAG.match(choice[4:])
    if not m:
        raise ValueError(f"{choice!r} does not name an own-GEMM configuration (expected own:MRxNR_kKC_mMC_nNC)")
    return GemmConfig(*(int(g) for g in m.groups()))


def valid_choice(choice: str, dtype: str) -> bool:
    """Whether ``choice`` names a candidate this version can render for ``dtype`` on this CPU."""
    if choice in ("blas", "auto", "dot", "stream"):
        return True
    try:
        cfg = own_config(choice)
    except ValueError:
        return False
    if cfg is None:
        return False
    try:
        cfg.validate(dtype)
    except ValueError:
        return False
    return True


def default_choice(dtype: str, blas: bool, m: int | None = None, n: int | None = None, k: int | None = None,
                   sak: int | None = None, sbn: int | None = None, *, sam: int | None = None,
                   sbk: int | None = None) -> str:
    """The GEMM implementation used when nothing was measured: ``$LUMINAL_GEMM`` (``"auto"``, ``"own"`` or
    ``"blas"``) when set, else ``DEFAULT_GEMM``; luminal's own GEMM in its default configuration when OpenBLAS is
    not installed. ``"auto"`` dispatches on the sizes at run time (own kernels for M == 1, N == 1, small M and the
    streaming layout, OpenBLAS for the rest; :mod:`luminal.codegen.gemm_small`); for a GEMM whose rows ``m`` and
    columns ``n`` are constants for which that dispatch always calls OpenBLAS (``m > AUTO_SMALL_M``, ``n > 1``, and
    the streaming kernel ruled out by the sizes, ``k`` or the strides ``sak`` and ``sam`` of A along K and M and
    ``sbn`` and ``sbk`` of B along N and K, where they are known) it is ``"blas"`` itself: the same calls, without a
    dispatcher."""
    import os

    pick = os.environ.get("LUMINAL_GEMM", "") or DEFAULT_GEMM
    if pick not in ("auto", "own", "blas"):
        raise ValueError(f"LUMINAL_GEMM={pick!r}: expected 'auto', 'own' or 'blas'")
    if blas and pick == "auto" and m is not None and n is not None:
        from ..codegen.gemm_small import AUTO_SMALL_M, stream_fits

        if m > AUTO_SMALL_M and n > 1 and not stream_fits(m, n, k, sak, sbn, sam, sbk):
            return "blas"
    if blas and pick in ("blas", "auto"):
        return pick
    from ..codegen.gemm import default_config

    return "own:" + default_config(dtype).tag()


def kernel_default(kernel: GemmKernel, blas: bool) -> str:
    """:func:`default_choice` for ``kernel`` from its sizes and strides that are constants (the rest unknown)."""
    nb = len(kernel.dims) - 2
    av, bv = kernel.a_view, kernel.b_view
    return default_choice(kernel.dtype.value, blas, kernel.dims[-2].to_int(), kernel.dims[-1].to_int(),
                          av.dims[-1].to_int(), av.strides[nb + 2].to_int(), bv.strides[nb + 1].to_int(),
                          sam=av.strides[nb].to_int(), sbk=bv.strides[nb + 2].to_int())


def candidates(shape: GemmShape, level: str, blas: bool) -> list[str]:
    """The choices measured for ``shape``: OpenBLAS (when installed), the own GEMM's
    :func:`~luminal.codegen.gemm.candidate_configs` and, for ``M <= AUTO_SMALL_M`` rows, the small-M
    configuration of ``"auto"`` (:func:`~luminal.codegen.gemm_small.small_config`) when no candidate behaves
    like it, ``"dot"`` (:func:`~luminal.codegen.gemm_small.dot_source`) when both operands are contiguous
    along K (and K >= 64), and ``"stream"`` (:func:`~luminal.codegen.gemm_stream.stream_source`) when A is
    contiguous along K or M and B along N or K (at more than one row and column)."""
    from ..codegen.gemm_config import _behaviour, candidate_configs
    from ..codegen.gemm_small import AUTO_SMALL_M, small_config

    out = ["blas"] if blas else []
    lvl = "full" if level == "full" else "quick"
    cfgs = candidate_configs(shape.dtype, shape.m, shape.n, shape.k, lvl)
    if shape.m <= AUTO_SMALL_M:
        small = small_config(shape.dtype)
        seen = {_behaviour(c, shape.m, shape.n, shape.k) for c in cfgs}
        if _behaviour(small, shape.m, shape.n, shape.k) not in seen:
            cfgs.insert(1, small)
    out += ["own:" + c.tag() for c in cfgs]
    if shape.m <= AUTO_SMALL_M and shape.m > 1 and shape.n > 1 and shape.k >= 64 and shape.sak == 1 and shape.sbk == 1:
        out.append("dot")  # the packing-free dot-product kernel (both operands contiguous along K)
    if shape.m > 1 and shape.n > 1 and shape.k > 0 and 1 in (shape.sak, shape.sam) and 1 in (shape.sbn, shape.sbk):
        out.append("stream")  # A read in place, B contiguous along N (or K: its blocks copied transposed)
    return out


# ---------------------------------------------------------------------------- the timing library
def function_name(choice: str, dtype: str) -> str:
    """The C function implementing ``choice`` for ``dtype`` (``lm_gemm_f32`` for OpenBLAS)."""
    short = "f32" if dtype == "float32" else "f64"
    if choice == "blas":
        return f"lm_gemm_{short}"
    if choice == "auto":
        return f"lm_gemm_auto_{short}"
    if choice in ("dot", "stream"):
        return f"lm_og_{choice}_{short}"
    return f"lm_og_{short}_{choice[4:]}"


def own_sources(choices: set[tuple[str, str]]) -> str:
    """C source of the GEMM functions behind ``(choice, dtype)`` pairs: own GEMMs, the dot-product and streaming
    kernels, ``"auto"``'s dispatcher with its kernels (each rendered once); OpenBLAS needs none. Expects
    ``HELPERS`` and ``gemm_helpers()`` before it."""
    from ..codegen.gemm import own_gemm_source
    from ..codegen.gemm_small import auto_source, dot_source
    from ..codegen.gemm_stream import stream_source

    own = sorted((c, d) for c, d in choices if c.startswith("own:"))
    parts = [own_gemm_source(dtype, own_config(choice), function_name(choice, dtype)) for choice, dtype in own]
    dots = sorted({d for c, d in choices if c == "dot"})
    for dtype in dots:
        parts.append(dot_source(dtype, function_name("dot", dtype), function_name("blas", dtype)))
    streams = sorted({d for c, d in choices if c == "stream"})
    for dtype in streams:
        parts.append(stream_source(dtype, function_name("stream", dtype), function_name("blas", dtype)))
    for dtype in sorted({d for c, d in choices if c == "auto"}):
        parts.append(auto_source(dtype, with_dot=dtype not in dots, with_stream=dtype not in streams))
    return "\n\n".join(parts)


def own_parts(choices: set[tuple[str, str]], blas: bool) -> tuple:
    """The routines of :func:`own_sources` as :class:`~luminal.codegen.library.LibraryPart` s, one per ``(choice,
    dtype)`` (OpenBLAS needs none): compiled once per machine and linked into every program that uses them."""
    from ..codegen.gemm import own_gemm_source
    from ..codegen.gemm_small import auto_source, dot_source
    from ..codegen.gemm_stream import stream_source
    from ..codegen.library import gemm_part

    parts = []
    for choice, dtype in sorted(choices):
        name = function_name(choice, dtype)
        if choice == "blas":
            continue
        if choice.startswith("own:"):
            body = own_gemm_source(dtype, own_config(choice), name)
        elif choice == "dot":
            body = dot_source(dtype, name, function_name("blas", dtype))
        elif choice == "stream":
            body = stream_source(dtype, name, function_name("blas", dtype))
        else:
            body = auto_source(dtype)
        ctype = "float" if dtype == "float32" else "double"
        parts.append(gemm_part(f"{choice}:{dtype}", body, ((name, ctype, ctype, ctype),), blas))
    return tuple(parts)


_BENCH = r"""
typedef int (*lm_gemm_fn_T)(long long, long long, long long, const T *, long long, long long, const T *, long long,
                            long long, T *, lm_epilogue, void **, const long long *);
static lm_gemm_fn_T lm_cands_T[] = { CANDS };
/* run candidate `which` reps times over a batch of GEMMs (operand batch strides bsa/bsb, C contiguous); returns
   the seconds of all reps in *seconds */
int lm_bench_T(int which, long long M, long long N, long long K, const T *A0, long long sam, long long sak,
               const T *B0, long long sbn, long long sbk, T *C, long long batch, long long bsa, long long bsb,
               int reps, double *seconds, long long acopies, long long bcopies) {
    lm_blas_init();
    lm_gemm_fn_T f = lm_cands_T[which];
    double t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++) {
        /* (a cold operand: one of its copies per call in turn, together twice the last-level cache) */
        const T *A = A0 + (r % acopies) * batch * bsa, *B = B0 + (r % bcopies) * batch * bsb;
        if (batch >= 2 && M * N * K <= SMALL) {
            #pragma omp parallel for schedule(static)
            for (long long b = 0; b < batch; b++)
                f(M, N, K, A + b * bsa, sam, sak, B + b * bsb, sbn, sbk, C + b * M * N, NULL, NULL, NULL);
        } else {
            for (long long b = 0; b < batch; b++)
                f(M, N, K, A + b * bsa, sam, sak, B + b * bsb, sbn, sbk, C + b * M * N, NULL, NULL, NULL);
        }
    }
    *seconds = omp_get_wtime() - t0;
    return 0;
}
"""


class _BenchLibrary:
    """The compiled candidates of one search: ``index[(choice, dtype)]`` -> position in the dtype's table."""

    def __init__(self, pairs: list[tuple[str, str]], blas: bool):
        from ..codegen.c import CProgram
        from ..codegen.c_support import HELPERS, gemm_helpers, with_release
        from .build import build_library

        self.index: dict[tuple[str, str], int] = {}
        parts = [("#define LUMINAL_BLAS 1\n" if blas else "") + HELPERS, gemm_helpers(), own_sources(set(pairs))]
        for dtype, short, ctype in (("float32", "f32", "float"), ("float64", "f64", "double")):
            mine = [c for c, d in pairs if d == dtype]
            if not mine:
                continue
            for j, c in enumerate(mine):
                self.index[(c, dtype)] = j
            parts.append(_BENCH.replace("lm_gemm_fn_T", f"lm_gemm_fn_{short}").replace("lm_cands_T", f"lm_cands_{short}")
                         .replace("lm_bench_T", f"lm_bench_{short}").replace("const T", f"const {ctype}")
                         .replace("T *", f"{ctype} *").replace("SMALL", str(SMALL_GEMM))
                         .replace("CANDS", ", ".join(function_name(c, dtype) for c in mine)))
        self.path = build_library(CProgram(with_release("\n\n".join(parts)), [], [], blas))
        self.lib = ctypes.CDLL(self.path)

    def run(self, choice: str, shape: GemmShape, bufs, reps: int) -> float:
        short = "f32" if shape.dtype == "float32" else "f64"
        fn = getattr(self.lib, f"lm_bench_{short}")
        a, b, c, bsa, bsb = bufs
        secs = ctypes.c_double()
        fn(ctypes.c_int(self.index[(choice, shape.dtype)]), ctypes.c_longlong(shape.m), ctypes.c_longlong(shape.n),
           ctypes.c_longlong(shape.k), ctypes.c_void_p(a.ctypes.data), ctypes.c_longlong(shape.sam),
           ctypes.c_longlong(shape.sak), ctypes.c_void_p(b.ctypes.data), ctypes.c_longlong(shape.sbn),
           ctypes.c_longlong(shape.sbk), ctypes.c_void_p(c.ctypes.data), ctypes.c_longlong(shape.batch),
           ctypes.c_longlong(bsa), ctypes.c_longlong(bsb), ctypes.c_int(reps), ctypes.byref(secs),
           ctypes.c_longlong(a.size // (bsa * shape.batch)), ctypes.c_longlong(b.size // (bsb * shape.batch)))
        return secs.value


def _operands(shape: GemmShape, rng: np.random.Generator):
    """Random operands laid out with the kernel's real strides (each batch element its own footprint); the
    :attr:`GemmShape.cold` operand repeated (identical copies) until the copies hold twice the last-level cache,
    so that timed calls cycling through them read it from memory, as the program does."""
    from ..codegen.c import STREAM_BYTES  # (the last-level cache's bytes)

    dt = np.float32 if shape.dtype == "float32" else np.float64
    a_span = (shape.m - 1) * abs(shape.sam) + (shape.k - 1) * abs(shape.sak) + 1 if shape.m and shape.k else 1
    b_span = (shape.n - 1) * abs(shape.sbn) + (shape.k - 1) * abs(shape.sbk) + 1 if shape.n and shape.k else 1
    bsa, bsb = (a_span + 15) // 16 * 16, (b_span + 15) // 16 * 16
    a = rng.standard_normal(bsa * shape.batch, dtype=dt)  # drawn in the operand dtype: no float64 transient
    b = rng.standard_normal(bsb * shape.batch, dtype=dt)
    if shape.cold in ("a", "b"):
        one = a if shape.cold == "a" else b
        copies = max(1, -(-2 * STREAM_BYTES // max(one.nbytes, 1)))
        if shape.cold == "a":
            a = np.tile(a, copies)
        else:
            b = np.tile(b, copies)
    c = np.zeros(shape.batch * shape.m * shape.n, dt)
    return a, b, c, bsa, bsb


def _views(shape: GemmShape, bufs, batch_index: int):
    a, b, _, bsa, bsb = bufs
    isz = a.itemsize
    av = np.lib.stride_tricks.as_strided(a[batch_index * bsa:], (shape.m, shape.k), (shape.sam * isz, shape.sak * isz))
    bv = np.lib.stride_tricks.as_strided(b[batch_index * bsb:], (shape.n, shape.k), (shape.sbn * isz, shape.sbk * isz))
    return av, bv


CHECK_BLOCK = 1 << 20  # float64 elements of one operand block in the correctness check (8 MiB)


def _correct(shape: GemmShape, bufs) -> bool:
    """Whether the product in ``bufs``' C matches numpy's float64 product (first and last batch element),
    every element checked, in blocks of rows and columns so the float64 copies stay small (a K = 36864
    weight-gradient GEMM would otherwise need hundreds of MB next to the program's own buffers)."""
    c = bufs[2].reshape(shape.batch, shape.m, shape.n)
    tol = 1e-3 if shape.dtype == "float32" else 1e-9
    step = max(1, CHECK_BLOCK // max(shape.k, 1))
    for bi in sorted({0, shape.batch - 1}):
        av, bv = _views(shape, bufs, bi)
        for m0 in range(0, shape.m, step):
            a64 = av[m0:m0 + step].astype(np.float64)
            for n0 in range(0, shape.n, step):
                b64 = bv[n0:n0 + step].astype(np.float64)
                ref = a64 @ b64.T
                scale = np.abs(a64) @ np.abs(b64).T + np.finfo(np.float64).tiny
                if not np.all(np.abs(c[bi, m0:m0 + step, n0:n0 + step] - ref) <= tol * scale):
                    return False
    return True


@dataclass
class SearchResult:
    """What a search decided: kernel key -> winning choice, with per-candidate seconds (None: wrong result,
    inf: not measured before the budget or Ctrl-C ended it)."""
    choices: dict[str, str] = field(default_factory=dict)
    timings: dict[str, dict[str, float | None]] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False
    cached: int = 0
    pid: int = field(default_factory=os.getpid)  # the process that measured (search="background": a child)


def default_equivalent(shape: GemmShape, blas: bool) -> str | None:
    """The candidate that computes ``shape`` the way the unmeasured default does (``"auto"`` dispatches per call:
    :mod:`luminal.codegen.gemm_small`), or None (its matrix-vector kernel, which is no candidate)."""
    from ..codegen.gemm_small import auto_kernel

    pick = default_choice(shape.dtype, blas, shape.m, shape.n, shape.k, shape.sak, shape.sbn, sam=shape.sam,
                          sbk=shape.sbk)
    if pick != "auto":
        return pick
    kernel = auto_kernel(shape.m, shape.n, shape.k, shape.sak, shape.sbn, shape.sbk, sam=shape.sam)
    return None if kernel == "gemv" else kernel


def _rounds(lib: _BenchLibrary, live: dict, shape: GemmShape, bufs, deadline: float) -> dict[str, float]:
    """Seconds per call of each candidate in ``live`` (choice -> calls per round): up to ``ROUNDS`` rounds, each
    running every candidate still in the race once, in turn, so that all of them see the same machine load (a
    noisy host's slow seconds no longer fall on whichever candidate was being measured); a candidate's time is
    the minimum over its rounds of the mean per call. After three rounds, candidates slower than ``EARLY_STOP``
    times the best leave the race; past ``deadline`` the rounds stop (after two)."""
    times: dict[str, list] = {c: [] for c in live}
    racing = list(live)
    for r in range(ROUNDS):
        for c in racing:
            times[c].append(lib.run(c, shape, bufs, live[c]) / live[c])
        best = min(min(t) for t in times.values())
        if r >= 2:
            racing = [c for c in racing if min(times[c]) <= EARLY_STOP * best]
        if r >= 1 and time.perf_counter() > deadline:
            break
    return {c: min(t) for c, t in times.items()}


def search_gemms(shapes: list[GemmShape], level: str, budget_s: float | None, blas: bool,
                 progress: bool | None = None, store: bool = True) -> SearchResult:
    """Measure the candidates of every distinct GEMM shape in ``shapes`` (hottest first) within ``budget_s``
    seconds (default per level: quick 10, full 60), store the winners in the tuning cache and return them.
    Shapes already in the cache are not measured again."""
    from . import tuning
    from .build import release_scratch

    level = "full" if level == "full" else "quick"
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET[level]
    start = time.perf_counter()
    result = SearchResult()
    unique: dict[str, GemmShape] = {}
    for s in sorted(shapes, key=lambda s: -s.macs):
        unique.setdefault(s.key(), s)
    cached = tuning.lookup_many(unique)
    todo = []
    for key, s in unique.items():
        entry = cached.get(key)
        if entry is not None and valid_choice(entry["choice"], s.dtype) and entry.get("complete", True) and \
                (level == "quick" or entry.get("level") == "full"):
            result.choices[key] = entry["choice"]
            result.cached += 1
        elif s.macs == 0:
            result.choices[key] = default_choice(s.dtype, blas)
        else:
            todo.append((key, s))
    if not todo:
        result.seconds = time.perf_counter() - start
        return result
    plans = [(key, s, candidates(s, level, blas)) for key, s in todo]
    pairs = sorted({(c, s.dtype) for _, s, cands in plans for c in cands})
    lib = _BenchLibrary(pairs, blas)
    start = time.perf_counter()  # the budget covers measuring; building the candidates (cached) is not counted
    total = sum(len(c) for _, _, c in plans)
    bar = None
    try:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc="luminal search", unit="cand", disable=(None if progress is None else not progress),
                   leave=False)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        pass
    rng = np.random.default_rng(0)
    try:
        for key, s, cands in plans:
            # the budget left is shared by the kernels left in proportion to their work
            left_macs = sum(t.macs for k2, t, _ in plans if k2 not in result.timings or k2 == key) or 1
            share = (budget - (time.perf_counter() - start)) * s.macs / left_macs
            deadline = time.perf_counter() + max(share, 0.0)
            bufs = None  # the previous kernel's operands are freed before this kernel's are allocated
            bufs = _operands(s, rng)
            timings: dict[str, float | None] = {}
            result.timings[key] = timings
            live: dict[str, int] = {}
            for choice in cands:  # a warm-up call each (the result checked), then the rounds, all in turn
                # past twice the whole budget the candidates not yet warmed up are skipped (the kernel is then
                # cached as incomplete); past this kernel's share the rest still get two rounds
                if time.perf_counter() - start > 2 * budget and live:
                    timings[choice] = float("inf")
                else:
                    bufs[2][:] = np.nan
                    first = lib.run(choice, s, bufs, 1)
                    if _correct(s, bufs):
                        live[choice] = max(1, int(ROUND_S / max(first, 1e-7)))
                    else:
                        timings[choice] = None
                        warnings.warn(f"search: candidate {choice} gave a wrong result for {key}; dropped",
                                      stacklevel=2)
                if bar is not None:
                    bar.update(1)
            if live:
                timings.update(_rounds(lib, live, s, bufs, deadline))
                if bar is not None:
                    bar.set_postfix_str(f"{key.split('/', 2)[2]}: best {min(timings[c] for c in live) * 1e6:.1f} us")
            done = {c: t for c, t in timings.items() if t is not None and t < float("inf")}
            winner = min(done, key=done.get) if done else default_choice(s.dtype, blas)
            # the default's own kernel is kept unless another is MARGIN faster (noise does not flip choices)
            same = default_equivalent(s, blas)
            if same in done and done[same] <= (1 + MARGIN) * done[winner]:
                winner = same
            result.choices[key] = winner
            if store and winner in timings:  # (a budget cut short: kept for "off", measured again by a search)
                complete = all(t is None or t < float("inf") for t in timings.values())
                tuning.store(key, {"choice": winner, "seconds": timings[winner], "level": level, "complete": complete,
                                   "candidates": {c: t for c, t in timings.items() if t is not None and t < float("inf")}})
    except KeyboardInterrupt:
        result.interrupted = True
        warnings.warn("search interrupted: keeping the candidates measured so far", stacklevel=2)
        for key, s, _ in plans:
            if key not in result.choices:
                done = {c: t for c, t in result.timings.get(key, {}).items() if t is not None and t < float("inf")}
                result.choices[key] = min(done, key=done.get) if done else default_choice(s.dtype, blas)
    finally:
        if bar is not None:
            bar.close()
        release_scratch([lib.lib])  # (the candidates' packing buffers, grown to these shapes)
    result.seconds = time.perf_counter() - start
    return result


def searchable(program: Program, kernel) -> bool:
    """Whether ``kernel`` is a GEMM the measured search chooses an implementation for: float32 / float64, not
    fused with a prologue (that runs the own GEMM) and no operand stored as bfloat16 / float16 (that runs
    :mod:`luminal.codegen.gemm_lowp`)."""
    from ..codegen.gemm_lowp import operand_stores
    return isinstance(kernel, GemmKernel) and kernel.dtype in (DType.float32, DType.float64) and \
        kernel.a_pro is None and kernel.b_pro is None and operand_stores(program, kernel) is None


def program_shapes(program: Program, bindings) -> dict[int, GemmShape]:
    """Kernel index -> shape of every GEMM kernel of ``program`` whose sizes are known at ``bindings``. Where the
    program's inputs (its weights) hold more than the last-level cache, each call reads them from memory: a
    GEMM's operand that is an input (the larger one where both are) is then marked :attr:`GemmShape.cold`, and
    the search times it so (BERT's encoder at one sequence of 32 tokens, 43 MB of weights: timed hot, the
    search picked kernels that ran 20 % slower in the program than the default)."""
    from ..codegen.c import STREAM_BYTES  # (the last-level cache's bytes)
    from .prologue_search import _concrete

    dims = _concrete(program, bindings, [b for b in program.inputs if b in program.buffers]) or {}
    sizes = {b: int(np.prod(d)) * program.buffers[b][1].itemsize for b, d in dims.items()}
    streamed = sum(sizes.values()) > STREAM_BYTES
    out = {}
    for i, k in enumerate(program.kernels):
        if searchable(program, k):
            s = gemm_shape(k, bindings)
            if s is not None:
                side = max((sizes[b], n) for n, b in (("a", k.a), ("b", k.b)) if b in sizes)[1] \
                    if streamed and (k.a in sizes or k.b in sizes) else ""
                out[i] = dataclasses.replace(s, cold=side) if side else s
    return out
