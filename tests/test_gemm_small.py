"""GEMMs at small M (luminal/codegen/gemm_small.py): the ``"auto"`` dispatcher, the dot-product kernel and the
streaming kernel (luminal/codegen/gemm_stream.py) against a float64 numpy oracle, directly (one library with small
C wrappers, as in test_own_gemm.py) and through compiled graphs; the search's candidates and choices for them.

No timings are asserted here (see benchmarks/symbolic_shapes.py and the GEMM reports for numbers).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import subprocess

import numpy as np
import pytest

import luminal as lm

from luminal.codegen.c import CProgram
from luminal.codegen.c_support import HELPERS, gemm_helpers
from luminal.codegen.gemm_config import _behaviour, default_config
from luminal.codegen.gemm_small import (AUTO_SMALL_M, AUTO_STREAM_M, AUTO_STREAM_N, auto_kernel, auto_parts,
                                        auto_source, dot_source, dot_tile, gemv_source, small_config)
from luminal.codegen.gemm_stream import stream_source, stream_tile
from luminal.runtime import search as S
from luminal.runtime.cpu import find_compiler

CC = find_compiler()
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")
DTYPES = {"float32": (np.float32, "float", 1e-4), "float64": (np.float64, "double", 1e-12)}
CHOICES = ("auto", "dot", "stream")

_THRESHOLDS = r"""
static long long lm_test_par_macs = 1LL << 18;
#define LM_OWN_GEMM_PAR_MACS lm_test_par_macs
#define LM_GEMV_PAR_MACS lm_test_par_macs
void set_par(long long par) { lm_test_par_macs = par; }
void set_threads(int n) { omp_set_num_threads(n); }
int max_threads(void) { return omp_get_max_threads(); }
"""

_WRAPPERS = r"""
static int epi_T(void **bufs, const long long *syms, long long m0, long long m1, long long n0, long long n1) {
    T *C = (T *)bufs[0]; int *cnt = (int *)bufs[1]; long long N = syms[0], bad = syms[1]; int ret = 0;
    for (long long m = m0; m < m1; m++)
        for (long long n = n0; n < n1; n++) {
            C[m * N + n] += 1; cnt[m * N + n] += 1;
            if (m * N + n == bad) ret = 7;
        }
    return ret;
}
int call_NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak, const T *B,
              long long sbn, long long sbk, T *C, int *cnt, long long bad) {
    void *bufs[2] = {C, cnt}; long long syms[2] = {N, bad};
    return NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, cnt ? epi_T : NULL, bufs, syms);
}
void batch_NAME(long long nb, long long M, long long N, long long K, const T *A, long long sab, const T *B,
                long long sbb, T *C, int *rets, int kn) {
    #pragma omp parallel for schedule(dynamic, 1)
    for (long long b = 0; b < nb; b++)
        rets[b] = kn ? NAME(M, N, K, A + b * sab, K, 1, B + b * sbb, 1, N, C + b * M * N, NULL, NULL, NULL)
                     : NAME(M, N, K, A + b * sab, K, 1, B + b * sbb, K, 1, C + b * M * N, NULL, NULL, NULL);
}
"""


@pytest.fixture(scope="module")
def lib():
    from luminal.runtime.build import _blas, build_library

    blas = _blas() is not None
    parts = [("#define LUMINAL_BLAS 1\n" if blas else "") + HELPERS, _THRESHOLDS, gemm_helpers(),
             S.own_sources({(c, d) for c in CHOICES for d in DTYPES})]
    for dtype, (_, ctype, _) in DTYPES.items():
        for i, choice in enumerate(CHOICES):
            w = _WRAPPERS.replace("NAME", S.function_name(choice, dtype)).replace("epi_T", f"epi_{dtype}") \
                .replace("T *", f"{ctype} *")
            parts.append(w if i == 0 else w[w.index("int call_"):])
    out = ctypes.CDLL(build_library(CProgram("\n".join(parts), [], [], blas)))
    out.set_par.argtypes = [ctypes.c_longlong]
    return out


@contextlib.contextmanager
def _threads(lib, n, par):
    old = lib.max_threads()
    lib.set_threads(n)
    lib.set_par(par)
    try:
        yield
    finally:
        lib.set_threads(old)
        lib.set_par(1 << 18)


def _fn(lib, choice, dtype):
    P, L = ctypes.c_void_p, ctypes.c_longlong
    f = getattr(lib, "call_" + S.function_name(choice, dtype))
    f.argtypes = [L, L, L, P, L, L, P, L, L, P, P, L]
    f.restype = ctypes.c_int
    return f


def _operand(rng, np_dtype, rows, cols, layout):
    """A logical (rows, cols) array stored as ``layout``."""
    r = lambda *shape: rng.standard_normal(shape).astype(np_dtype)  # noqa: E731
    if layout == "row":
        return r(rows, cols)
    if layout == "col":
        return r(cols, rows).T
    if layout == "strided":
        return r(rows * 3 + 1, cols * 2 + 1)[::3, ::2][:rows, :cols]
    if layout == "bcast":
        return np.broadcast_to(r(1, cols), (rows, cols))
    if layout == "reversed":
        return r(rows, cols)[::-1, ::-1]
    raise ValueError(layout)


def _es(x):
    return tuple(s // x.itemsize for s in x.strides) if x.size else (0, 0)


def _run(f, A, Bt, np_dtype, epi=False, bad=-1):
    """C = A @ Bt.T through ``f`` (A: M x K, Bt: N x K logical arrays with any strides)."""
    M, K = A.shape
    N = Bt.shape[0]
    C = np.full((M, N), np.nan, np_dtype)
    cnt = np.zeros((M, N), np.int32)
    sam, sak = _es(A)
    sbn, sbk = _es(Bt)
    ret = f(M, N, K, A.ctypes.data if A.size else None, sam, sak, Bt.ctypes.data if Bt.size else None, sbn, sbk,
            C.ctypes.data if C.size else None, cnt.ctypes.data if epi else None, bad)
    return C, cnt, ret


def _check(C, A, Bt, tol, what):
    A64, B64 = A.astype(np.float64), Bt.astype(np.float64)
    ref = A64 @ B64.T
    scale = np.abs(A64) @ np.abs(B64).T
    err = np.abs(C.astype(np.float64) - ref)
    bad = ~(err <= tol * scale + 1e-30)
    assert not bad.any(), f"{what}: {bad.sum()} wrong, max err {np.nanmax(err)}, at {np.argwhere(bad)[:5]}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("choice", CHOICES)
def test_small_m_shapes(lib, choice, dtype):
    """M = 1..40 (and 63..66 around the threshold) over K below, at and above the vector width, the dot
    kernel's K block and its K thresholds, N around its column block; 1, 2 and 3 threads."""
    np_dtype, _, tol = DTYPES[dtype]
    f = _fn(lib, choice, dtype)
    rng = np.random.default_rng(1)
    _, nb, kc = dot_tile(dtype)
    nks = [(1, 1), (nb, 16), (nb + 1, 17), (2 * nb - 1, 255), (97, 256), (13, kc + 3), (130, 2 * kc + 5), (3, 0)]
    for threads, par in ((1, 1 << 62), (2, 0), (3, 0)):
        with _threads(lib, threads, par):
            for M in list(range(1, 41)) + [63, 64, 65, 66]:
                for N, K in nks:
                    A = _operand(rng, np_dtype, M, K, "row")
                    Bt = _operand(rng, np_dtype, N, K, "row")
                    C, _, ret = _run(f, A, Bt, np_dtype)
                    assert ret == 0
                    _check(C, A, Bt, tol, f"{choice} {threads}t {M}x{N}x{K}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("choice", CHOICES)
def test_layouts(lib, choice, dtype):
    """Transposed, strided, broadcast and reversed operands (the dot kernel hands them to its fallback)."""
    np_dtype, _, tol = DTYPES[dtype]
    f = _fn(lib, choice, dtype)
    rng = np.random.default_rng(2)
    layouts = ["row", "col", "strided", "bcast", "reversed"]
    for M, N, K in [(1, 97, 300), (7, 1, 300), (5, 13, 7), (32, 100, 300), (64, 25, 513), (67, 50, 130)]:
        for la in layouts:
            for lb in layouts:
                A = _operand(rng, np_dtype, M, K, la)
                Bt = _operand(rng, np_dtype, N, K, lb)
                C, _, ret = _run(f, A, Bt, np_dtype)
                assert ret == 0
                _check(C, A, Bt, tol, f"{choice} {M}x{N}x{K} A {la} B {lb}")


def _check_epilogue(f, A, Bt, np_dtype, tol, what):
    """The epilogue (adds 1, counts its visits) sees every element of C once, after its final value; an error
    code it returns (7, at one element) comes back."""
    M, N = A.shape[0], Bt.shape[0]
    C, cnt, ret = _run(f, A, Bt, np_dtype, epi=True)
    assert ret == 0 and (cnt == 1).all(), f"{what}: counts {np.unique(cnt)}"
    _check(C - 1, A, Bt, tol, what)
    C, cnt, ret = _run(f, A, Bt, np_dtype, epi=True, bad=(M // 2) * N + N - 1)
    assert ret == 7 and (cnt == 1).all(), what


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("choice", CHOICES)
def test_empty_and_epilogue(lib, choice, dtype):
    """K == 0 zeroes C; M == 0 or N == 0 do nothing; the epilogue sees every element once after its final value
    (1 to 3 threads) and its error code comes back."""
    np_dtype, _, tol = DTYPES[dtype]
    f = _fn(lib, choice, dtype)
    rng = np.random.default_rng(3)
    for M, N in [(3, 5), (40, 300)]:
        C, cnt, ret = _run(f, np.zeros((M, 0), np_dtype), np.zeros((N, 0), np_dtype), np_dtype, epi=True)
        assert ret == 0 and (C == 1).all() and (cnt == 1).all()
    for M, N, K in [(0, 5, 3), (5, 0, 3), (0, 0, 0)]:
        C, cnt, ret = _run(f, _operand(rng, np_dtype, M, K, "row"), _operand(rng, np_dtype, N, K, "row"), np_dtype,
                           epi=True)
        assert ret == 0 and C.size == 0
    for threads, par in ((1, 1 << 62), (2, 0), (3, 0)):
        with _threads(lib, threads, par):
            for M, N, K in [(1, 700, 300), (2, 13, 300), (17, 600, 300), (40, 1000, 513), (64, 37, 256), (9, 1, 300)]:
                A = _operand(rng, np_dtype, M, K, "row")
                Bt = _operand(rng, np_dtype, N, K, "row")
                _check_epilogue(f, A, Bt, np_dtype, tol, f"{choice} {threads}t {M}x{N}x{K}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("choice", CHOICES)
def test_inside_parallel_region(lib, choice, dtype):
    """Batched calls from ``#pragma omp parallel for`` (each runs on one thread) stay correct."""
    np_dtype, _, tol = DTYPES[dtype]
    rng = np.random.default_rng(4)
    g = getattr(lib, "batch_" + S.function_name(choice, dtype))
    P, L = ctypes.c_void_p, ctypes.c_longlong
    g.argtypes = [L, L, L, L, P, L, P, L, P, P, ctypes.c_int]
    with _threads(lib, 2, 0):
        for (nb, M, N, K), kn in itertools.product([(6, 32, 32, 32), (5, 17, 50, 300), (4, 1, 40, 260),
                                                    (3, 130, 70, 600)], (0, 1)):
            A = rng.standard_normal((nb, M, K)).astype(np_dtype)
            # B stored N x K (kn = 0: the dot kernel's layout) or K x N (kn = 1: the streaming kernel's)
            B = rng.standard_normal((nb, K, N) if kn else (nb, N, K)).astype(np_dtype)
            Bt = B.transpose(0, 2, 1) if kn else B
            C = np.full((nb, M, N), np.nan, np_dtype)
            rets = np.full(nb, -1, np.int32)
            g(nb, M, N, K, A.ctypes.data, M * K, B.ctypes.data, N * K, C.ctypes.data, rets.ctypes.data, kn)
            assert (rets == 0).all()
            for b in range(nb):
                _check(C[b], A[b], Bt[b], tol, f"{choice} batch {b} {M}x{N}x{K} kn={kn}")


def _kn(rng, np_dtype, n, k, pad=0):
    """A logical (n, k) operand stored K x N (contiguous along N), rows ``n + pad`` elements apart."""
    return rng.standard_normal((k, n + pad)).astype(np_dtype)[:, :n].T


def _nk(rng, np_dtype, n, k, pad=0):
    """A logical (n, k) operand stored N x K (contiguous along K: PyTorch's weight layout), rows ``k + pad``
    elements apart."""
    return rng.standard_normal((n, k + pad)).astype(np_dtype)[:, :k]


@pytest.mark.parametrize("b_layout", ["kn", "nk"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("choice", ["stream", "auto"])
def test_stream_layout_shapes(lib, choice, dtype, b_layout):
    """B stored K x N (the streaming kernel's layout) or N x K (its blocks copied transposed): M across the tile's
    rows and the threads' row blocks (the zero-padded last tile; few rows: the threads split N), N across one to
    four vectors and several column blocks, K across the kernel's K blocks (512 and 2048 elements at 64-byte
    vectors) and the transposes' 4 x 4 blocks, A and B with padded rows, A also stored transposed (a weight
    gradient's layout); 1, 2 and 3 threads."""
    np_dtype, _, tol = DTYPES[dtype]
    f = _fn(lib, choice, dtype)
    rng = np.random.default_rng(11)
    cases = [(m, n, k) for m in (2, 5, 16, 17, 24, 31, 40, 128, 131) for n in (2, 15, 16, 17, 49, 64, 65, 130)
             for k in (1, 37)]
    cases += [(m, n, k) for m, n, k in [(17, 16, 2100), (131, 16, 2049), (45, 64, 513), (130, 49, 1100),
                                        (129, 130, 600), (200, 1024, 40), (3, 5, 600)]]
    for threads, par in ((1, 1 << 62), (2, 0), (3, 0)):
        with _threads(lib, threads, par):
            for i, (M, N, K) in enumerate(cases):
                if i % 4 == 3:  # A stored transposed (contiguous along M), columns M + 2 apart
                    A = rng.standard_normal((K, M + 2)).astype(np_dtype)[:, :M].T
                else:
                    A = rng.standard_normal((M, K + 3 * (i % 2))).astype(np_dtype)[:, :K]
                Bt = (_kn if b_layout == "kn" else _nk)(rng, np_dtype, N, K, pad=5 * (i % 3 == 0))
                C, _, ret = _run(f, A, Bt, np_dtype)
                assert ret == 0
                _check(C, A, Bt, tol, f"{choice} {threads}t {M}x{N}x{K} B {b_layout}")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_stream_epilogue_and_special_values(lib, dtype):
    """The streaming kernel's epilogue sees every element once, after its final value (its error code comes
    back), with the threads splitting M or (few rows) N; infinities and NaNs in A or B reach exactly the outputs
    they should (nothing is read from padding)."""
    np_dtype, _, tol = DTYPES[dtype]
    f = _fn(lib, "stream", dtype)
    rng = np.random.default_rng(12)
    for threads, par in ((1, 1 << 62), (2, 0), (3, 0)):
        with _threads(lib, threads, par):
            for M, N, K in [(130, 70, 600), (7, 16, 2100), (40, 1, 30), (129, 3, 5), (40, 200, 600)]:
                for layout in (_kn, _nk):
                    A = rng.standard_normal((M, K)).astype(np_dtype)
                    _check_epilogue(f, A, layout(rng, np_dtype, N, K), np_dtype, tol,
                                    f"{threads}t {M}x{N}x{K} {layout.__name__}")
    M, N, K = 131, 33, 700
    for layout in (_kn, _nk):  # (B N x K: its last column block's 33 - 16 = 17 rows, transposed, then zeros)
        A = rng.standard_normal((M, K)).astype(np_dtype)
        Bt = np.array(layout(rng, np_dtype, N, K), order="F" if layout is _kn else "C")
        A[5, 600] = np.inf          # row 5: inf (or nan where B's column 600 holds a zero)
        Bt[:, 600] = np.abs(Bt[:, 600]) + 1
        Bt[7, 10] = np.nan          # column 7: nan everywhere
        C, _, ret = _run(f, A, Bt, np_dtype)
        assert ret == 0
        assert np.isposinf(C[5, [n for n in range(N) if n != 7]]).all() and np.isnan(C[:, 7]).all()
        rest = np.delete(np.delete(C, 5, axis=0), 7, axis=1)
        assert np.isfinite(rest).all()
        _check(rest, np.delete(A, 5, axis=0), np.delete(Bt, 7, axis=0), tol, "finite part " + layout.__name__)


def _rule(m, n, k, sak, sbn, sbk, sam=None):
    """``auto_kernel`` with A row-major (``sam = K``) unless ``sam`` is given."""
    return auto_kernel(m, n, k, sak, sbn, sbk, sam=k if sam is None else sam)


def test_auto_rule(monkeypatch):
    """``auto_kernel`` (the Python mirror of the C dispatcher's rule, used by the search) by shape class;
    ``LUMINAL_GEMM_STREAM=0`` takes the streaming kernel out of the rule and out of the dispatcher's C."""
    monkeypatch.delenv("LUMINAL_GEMM_STREAM", raising=False)
    assert _rule(1, 500, 64, 1, 1, 500) == "gemv" and _rule(300, 1, 64, 1, 1, 64) == "gemv"
    assert _rule(32, 300, 300, 1, 300, 1) == "dot"
    assert _rule(128, 16, 4608, 1, 1, 16) == "stream"
    assert _rule(128, 8, 4608, 1, 1, 8) == "blas"                   # half a vector of columns
    assert _rule(AUTO_STREAM_M, 64, 4608, 1, 1, 64) == "stream"
    assert _rule(AUTO_STREAM_M, 16, 4608, 1, 1, 16) == "blas"       # few rows and few columns
    assert _rule(AUTO_STREAM_M - 1, 64, 4608, 1, 1, 64) == "blas"
    assert _rule(2048, 2048, 2048, 1, 1, 2048) == "stream"          # two row-major matrices
    assert _rule(32, 25088, 32, 1, 1, 25088) == "stream"            # few rows, wide
    assert _rule(64, 1568, 576, 1, 1, 1568) == "stream"
    assert _rule(64, AUTO_STREAM_N, 576, 1, 1, AUTO_STREAM_N) == "blas"  # ... not wide enough
    assert _rule(16, 3136, 32, 1, 1, 3136) == "blas"                # ... too little work
    assert _rule(8, 25088, 64, 1, 1, 25088) == "blas"               # ... too few rows
    assert _rule(512, 16, 4608, 512, 1, 16) == "blas"               # A strided both ways
    assert _rule(512, 16, 4608, 512, 1, 16, sam=1) == "stream"      # A transposed (a weight gradient's)
    assert _rule(512, 16, 4608, 1, 4608, 1) == "stream"             # B contiguous along K (PyTorch's N x K weight)
    assert _rule(1024, 768, 256, 1, 256, 1) == "stream"
    assert _rule(512, 16, 4608, 1, 4608, 2) == "blas"               # B strided both ways
    assert _rule(80, 3072, 768, 1, 768, 1) == "stream"              # few rows, wide, N x K weight
    assert AUTO_SMALL_M < AUTO_STREAM_M
    for dtype in DTYPES:
        tiles = stream_tile(dtype)
        assert sorted(tiles) == [1, 2, 3, 4] and all(mr >= 1 for mr in tiles.values())
    # constant sizes the dispatcher would send to OpenBLAS compile without it; the streaming layout keeps it
    assert S.default_choice("float32", True, 512, 16, 4608, 1, 1) == "auto"
    assert S.default_choice("float32", True, 512, 16, None, None, None) == "auto"
    assert S.default_choice("float32", True, 512, 16, 4608, 4608, 1, sam=7) == "blas"   # A strided both ways
    assert S.default_choice("float32", True, 512, 16, 4608, 512, 1, sam=1) == "auto"    # A transposed
    assert S.default_choice("float32", True, 512, 2000, 4608, 1, 1) == "auto"
    assert S.default_choice("float32", True, 512, 8, 4608, 1, 1) == "blas"
    assert S.default_choice("float32", True, 80, 160, 4608, 1, 1) == "blas"
    assert S.default_choice("float32", True, 1024, 768, 256, 1, 256, sbk=1) == "auto"    # B stored N x K
    assert S.default_choice("float32", True, 1024, 768, 256, 1, 256, sbk=3) == "blas"    # B strided both ways
    on = auto_source("float32")
    monkeypatch.setenv("LUMINAL_GEMM_STREAM", "0")
    assert _rule(512, 16, 4608, 1, 1, 16) == "blas"
    assert S.default_choice("float32", True, 512, 16, 4608, 1, 1) == "blas"
    off = auto_source("float32")
    assert off != on and "if (0 && K > 0" in off and "if (1 && K > 0" in on
    # LUMINAL_GEMM_STREAM=kn: streamed only where B is stored K x N
    monkeypatch.setenv("LUMINAL_GEMM_STREAM", "kn")
    assert _rule(1024, 768, 256, 1, 256, 1) == "blas" and _rule(2048, 2048, 2048, 1, 1, 2048) == "stream"
    assert S.default_choice("float32", True, 1024, 768, 256, 1, 256, sbk=1) == "blas"
    kn = auto_source("float32")
    assert "(sbn == 1 || (0 && sbk == 1))" in kn and "(sbn == 1 || (1 && sbk == 1))" in on
    monkeypatch.setenv("LUMINAL_GEMM_STREAM", "yes")
    with pytest.raises(ValueError, match="LUMINAL_GEMM_STREAM='yes'"):
        _rule(2048, 2048, 2048, 1, 1, 2048)


def test_auto_dispatch_matches_its_python_rule(monkeypatch, tmp_path):
    """The dispatcher's C (its kernels replaced by stubs that name themselves) picks, over a grid of shapes,
    layouts and the small-M / streaming thresholds, exactly what ``auto_kernel`` says: the search and the
    compile-time default rely on that mirror."""
    from luminal.runtime.build import build_library

    monkeypatch.delenv("LUMINAL_GEMM_STREAM", raising=False)
    src = auto_source("float32", with_dot=False, with_stream=False)
    parts = auto_parts("float32")
    stubs = "".join(f"static int {parts[r]}(long long M, long long N, long long K, const float *A, long long sam, "
                    f"long long sak, const float *B, long long sbn, long long sbk, float *C, lm_epilogue e, "
                    f"void **b, const long long *s) {{ return {i}; }}\n"
                    for i, r in enumerate(("gemv", "dot", "stream", "blas"), 1))
    head = "#include <stddef.h>\ntypedef int (*lm_epilogue)(void **, const long long *, long long, long long, " \
           "long long, long long);\n"
    body = src[src.index("/* lm_gemm_auto_f32"):]
    call = "int pick(long long M, long long N, long long K, long long sam, long long sak, long long sbn, " \
           "long long sbk) {\n    return lm_gemm_auto_f32(M, N, K, NULL, sam, sak, NULL, sbn, sbk, NULL, NULL, " \
           "NULL, NULL);\n}\n"
    lib = ctypes.CDLL(build_library(CProgram(head + stubs + body + call, [], [], False)))
    L = ctypes.c_longlong
    lib.pick.argtypes = [L] * 7
    names = {1: "gemv", 2: "dot", 3: "stream", 4: "blas"}
    ms = (1, 2, 15, 16, 17, 64, 65, 95, 96, 127, 128, 512)
    ns = (1, 8, 15, 16, 47, 48, 63, 64, 1024, 1025, 4096, 262144)
    ks = (0, 1, 127, 128, 255, 256, 257, 4608)
    layouts = ((9, 1, 1, 1), (9, 1, 1, 7), (9, 1, 7, 1), (9, 7, 1, 1), (1, 9, 1, 7), (1, 9, 7, 1))  # sam, sak, sbn, sbk
    for m, n, k, (sam, sak, sbn, sbk) in itertools.product(ms, ns, ks, layouts):
        got = names[lib.pick(m, n, k, sam, sak, sbn, sbk)]
        assert got == auto_kernel(m, n, k, sak, sbn, sbk, sam=sam), (m, n, k, sam, sak, sbn, sbk)


def test_sources_and_choices(monkeypatch):
    """Names, validity and rendering of the new choices; bad inputs raise clear Python errors."""
    for dtype in DTYPES:
        assert S.valid_choice("auto", dtype) and S.valid_choice("dot", dtype)
        assert S.function_name("auto", dtype).startswith("lm_gemm_auto_")
        parts = auto_parts(dtype)
        assert set(parts) == {"gemv", "dot", "stream", "blas"} and parts["dot"] == S.function_name("dot", dtype)
        assert parts["stream"] == S.function_name("stream", dtype) and S.valid_choice("stream", dtype)
        assert parts["blas"] == S.function_name("blas", dtype)
        src = S.own_sources({("auto", dtype), ("dot", dtype), ("stream", dtype),
                             ("own:" + small_config(dtype).tag(), dtype)})
        for fn in (S.function_name("auto", dtype), parts["dot"], parts["gemv"], parts["stream"],
                   S.function_name("own:" + small_config(dtype).tag(), dtype)):
            assert src.count(f"static int {fn}(") == 1, fn
        # "auto" alone renders no packing GEMM (compile time)
        assert "own GEMM, " not in S.own_sources({("auto", dtype)})
        small_config(dtype).validate(dtype)
        ma, nb, kc = dot_tile(dtype)
        assert ma >= 1 and nb >= 1 and kc > 0
    with pytest.raises(ValueError):
        dot_source("float16", "x", "y")
    with pytest.raises(ValueError):
        dot_source("float32", "not a name", "y")
    with pytest.raises(ValueError):
        auto_source("int32", {})
    with pytest.raises(ValueError):
        gemv_source("float32", "x", "not a name")
    with pytest.raises(ValueError):
        stream_source("float32", "x-y", "z")
    with pytest.raises(ValueError):
        stream_source("int8", "x", "y")
    with pytest.raises(ValueError):
        small_config("bfloat16")
    monkeypatch.setenv("LUMINAL_GEMM", "fast")
    with pytest.raises(ValueError):
        S.default_choice("float32", True)
    for pick, blas, want in [("auto", True, "auto"), ("blas", True, "blas"), ("auto", False, None),
                             ("own", True, None)]:
        monkeypatch.setenv("LUMINAL_GEMM", pick)
        got = S.default_choice("float32", blas)
        assert got == (want or "own:" + default_config("float32").tag())
    monkeypatch.delenv("LUMINAL_GEMM")
    assert S.default_choice("float32", True) == S.DEFAULT_GEMM == "auto"


def test_search_candidates_small_m():
    """Small-M shapes get the small-M configuration among the candidates (once); large ones are unchanged."""
    for m in (1, 8, 32, AUTO_SMALL_M):
        shape = S.GemmShape("float32", 1, m, 1536, 384, 384, 1, 384, 1)
        cands = S.candidates(shape, "quick", True)
        assert cands[0] == "blas" and len(set(cands)) == len(cands)
        assert ("dot" in cands) == (m > 1)
        assert ("stream" in cands) == (m > 1)  # (B contiguous along K: its blocks are copied transposed)
        cands = [c for c in cands if c not in ("dot", "stream")]
        small = small_config("float32")
        behaviours = [_behaviour(S.own_config(c), m, 1536, 384) for c in cands[1:]]
        assert _behaviour(small, m, 1536, 384) in behaviours
    big = S.GemmShape("float32", 1, 4096, 1536, 384, 384, 1, 384, 1)
    from luminal.codegen.gemm import candidate_configs
    assert "dot" not in S.candidates(S.GemmShape("float32", 1, 32, 1536, 384, 1, 32, 384, 1), "quick", True)
    assert S.candidates(big, "quick", True) == ["blas"] + ["own:" + c.tag() for c in
                                                         candidate_configs("float32", 4096, 1536, 384, "quick")] + [
        "stream"]
    strided = S.GemmShape("float32", 1, 4096, 1536, 384, 384, 1, 768, 2)  # B strided both ways: no stream
    assert "stream" not in S.candidates(strided, "quick", True)


@pytest.mark.parametrize("gemm", ["auto", "blas", "own"])
def test_graph_linear_symbolic_rows(monkeypatch, gemm):
    """A linear layer with a bias + GELU epilogue and a second matmul (transposed weight) over a symbolic row
    count, float32 and float64, at 1..70 rows: every LUMINAL_GEMM default gives numpy's result."""
    import luminal as lm

    monkeypatch.setenv("LUMINAL_GEMM", gemm)
    rng = np.random.default_rng(5)
    for dtype, tol in (("float32", 2e-4), ("float64", 1e-10)):
        nd = np.dtype(dtype)
        w1 = (rng.standard_normal((300, 260)) / 16).astype(nd)   # (out, in): x @ w1.T
        b1 = rng.standard_normal(300).astype(nd)
        w2 = (rng.standard_normal((300, 50)) / 16).astype(nd)    # (in, out): h @ w2
        cx = lm.Graph()
        x = cx.tensor(("rows", 260), dtype=dtype, name="x")
        t1 = cx.tensor((300, 260), dtype=dtype, name="w1").set(w1)
        tb = cx.tensor((300,), dtype=dtype, name="b1").set(b1)
        t2 = cx.tensor((300, 50), dtype=dtype, name="w2").set(w2)
        h = (x @ t1.permute(1, 0) + tb).relu()
        y = (h @ t2).retrieve()
        cx.compile(device="cpu")
        for rows in (1, 2, 7, 32, 33, 64, 65, 70):
            xv = rng.standard_normal((rows, 260)).astype(nd)
            x.set(xv)
            cx.execute()
            hr = np.maximum(xv.astype(np.float64) @ w1.T.astype(np.float64) + b1, 0)
            ref = hr @ w2.astype(np.float64)
            np.testing.assert_allclose(y.data(), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_sanitized_dot(tmp_path):
    """The dot and streaming kernels, the GEMV and the dispatcher (no OpenBLAS: the fallback is plain loops) in a
    standalone program under ASan + UBSan, with exactly-sized copy buffers, B stored N x K and K x N: no read past
    an operand, no overflow, the naive loops as the oracle."""
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    if subprocess.run([CC, *san, str(probe), "-o", str(tmp_path / "probe")], capture_output=True).returncode:
        pytest.skip("no sanitizer runtimes")
    main = r"""
#include <stdio.h>
/* FN against naive loops, A(m, k) at A[m * SAM + k * SAK], B(k, n) at B[n * SBN + k * SBK] */
#define CHECK(T, FN, TOL, SAM, SAK, SBN, SBK) do { \
    T *A = malloc(sizeof(T) * (M * K + 1)), *B = malloc(sizeof(T) * (N * K + 1)), *C = malloc(sizeof(T) * (M * N + 1)); \
    for (long long i = 0; i < M * K; i++) A[i] = (T)((i * 7919 % 23) - 11) / 8; \
    for (long long i = 0; i < N * K; i++) B[i] = (T)((i * 104729 % 29) - 14) / 8; \
    if (FN(M, N, K, A, SAM, SAK, B, SBN, SBK, C, NULL, NULL, NULL)) { printf("ret\n"); return 1; } \
    for (long long m = 0; m < M; m++) for (long long n = 0; n < N; n++) { \
        double r = 0; for (long long k = 0; k < K; k++) r += (double)A[m * SAM + k * SAK] * B[n * SBN + k * SBK]; \
        if (fabs(C[m * N + n] - r) > TOL * (1 + fabs(r))) { \
            printf("bad %s %lld %lld %lld (%s)\n", #FN, M, N, K, #SAM #SAK #SBN #SBK); return 1; } } \
    free(A); free(B); free(C); } while (0)
int main(void) {
    long long shapes[][3] = {{2, 2, 1}, {3, 13, 17}, {17, 25, 300}, {40, 12, 513}, {64, 100, 1100}, {5, 1, 300},
                             {1, 37, 301}, {130, 70, 600}, {131, 16, 2100}};
    for (int s = 0; s < 9; s++) {
        long long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
CHECKS
    }
    printf("ok\n");
    return 0;
}
"""
    # B stored N x K, B stored K x N (the streaming kernel's layout), A stored transposed too
    layouts = ("K, 1, K, 1", "K, 1, 1, N", "1, M, 1, N")
    checks = [f"        CHECK({c}, {S.function_name(ch, d)}, {tol * 10}, {lay});" for d, (_, c, tol) in DTYPES.items()
              for ch in CHOICES for lay in layouts]
    src = tmp_path / "san.c"
    src.write_text("#define LM_OWN_GEMM_EXACT_BUFFERS 1\n" + HELPERS + gemm_helpers()
                   + S.own_sources({(c, d) for c in CHOICES for d in DTYPES}) + main.replace("CHECKS", "\n".join(checks)))
    exe = tmp_path / "san"
    proc = subprocess.run([CC, "-O1", "-g", "-march=native", "-fopenmp", "-std=gnu11", *san, str(src), "-o", str(exe),
                           "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = dict(os.environ, OMP_NUM_THREADS="2", ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and "ok" in run.stdout, (run.stdout[-2000:], run.stderr[-4000:])


def test_constant_large_gemms_compile_without_the_dispatcher(monkeypatch, tmp_path):
    # "auto" would call OpenBLAS for every call of a GEMM with constant M > AUTO_SMALL_M and N > 1 outside the
    # streaming kernel's layouts (B contiguous along N or K), so such a program is rendered with OpenBLAS directly
    # (no dispatcher, GEMV or dot kernels to compile); a small-M GEMM and one the streaming kernel takes (B stored
    # K x N or N x K) keep the dispatcher; with the streaming kernel off (LUMINAL_GEMM_STREAM=0) a large N x K
    # product is OpenBLAS's alone. Results against numpy either way.
    monkeypatch.delenv("LUMINAL_GEMM", raising=False)
    monkeypatch.delenv("LUMINAL_GEMM_STREAM", raising=False)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(9)
    for m, b_kn, stream, has_auto in ((96, False, "0", False), (96, False, "1", True), (32, False, "1", True),
                                      (96, True, "1", True)):
        monkeypatch.setenv("LUMINAL_GEMM_STREAM", stream)
        a, b = rng.standard_normal((m, 300)).astype(np.float32), rng.standard_normal((300, 200)).astype(np.float32)
        cx = lm.Graph()
        tb = cx.tensor(b.shape).set(b) if b_kn else cx.tensor(b.T.shape).set(np.ascontiguousarray(b.T)).permute(1, 0)
        y = (cx.tensor(a.shape).set(a) @ tb).retrieve()
        cx.compile(None, y, device="cpu")
        cx.execute()
        np.testing.assert_allclose(y.data(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
        if not cx.runtime.blas:
            continue  # (without OpenBLAS the default is the own GEMM either way)
        assert ("lm_gemm_auto_f32" in cx.runtime.source) == has_auto, (m, b_kn, stream)


def test_programs_linked_to_different_parts_stay_apart(monkeypatch, tmp_path):
    # Two compiles of one graph whose GEMM dispatcher differs (LUMINAL_GEMM_STREAM off, then on) render the same
    # program text around different library parts. They must load as two libraries: one loaded library shared by
    # both would keep only the last link's function pointers, and the first graph would silently run the second's
    # kernels (it did: its results then matched the streaming kernel's rounding bit for bit).
    monkeypatch.delenv("LUMINAL_GEMM", raising=False)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(13)
    w = rng.standard_normal((512, 2304)).astype(np.float32)
    cols = rng.standard_normal((2304, 16)).astype(np.float32)

    def build():
        cx = lm.Graph()
        y = (cx.tensor(w.shape).set(w) @ cx.tensor((2304, "n")).set(cols)).retrieve()  # (symbolic N: "auto")
        cx.compile(None, y, device="cpu")
        return cx, y
    monkeypatch.setenv("LUMINAL_GEMM_STREAM", "0")
    off, y_off = build()
    off.execute()
    first = y_off.data().copy()
    monkeypatch.delenv("LUMINAL_GEMM_STREAM")
    on, y_on = build()
    on.execute()
    streamed = y_on.data().copy()
    ref = w.astype(np.float64) @ cols.astype(np.float64)
    for got in (first, streamed):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
    if not off.runtime.blas:
        return  # (no OpenBLAS: both dispatchers' fallbacks are luminal's own kernels)
    assert not np.array_equal(first, streamed)  # (the two kernels round differently: what tells them apart)
    off.execute()
    np.testing.assert_array_equal(y_off.data(), first)
