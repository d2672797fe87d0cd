"""Luminal's own GEMM (luminal/codegen/gemm.py): the generated C against a float64 numpy oracle.

One shared library holds ``HELPERS`` + ``gemm_helpers()`` (no BLAS) and an own GEMM per config and dtype, with
small C wrappers: a plain call with an optional epilogue (adds 1 to its block of C and counts how often each
element was visited; can return an error code for one element), and a batched call that runs GEMMs inside
``#pragma omp parallel for``. A second test builds a standalone executable under ASan/UBSan.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess

import numpy as np
import pytest

from luminal.codegen.c_support import HELPERS, gemm_helpers
from luminal.codegen.gemm import GemmConfig, candidate_configs, default_config, own_gemm_source, vector_bytes
from luminal.runtime.cpu import find_compiler

CC = find_compiler()
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-std=gnu11"]
DTYPES = {"float32": (np.float32, "float", 1e-4), "float64": (np.float64, "double", 1e-12)}


def _tiny(dtype: str) -> GemmConfig:
    """The default register tile with tiny blocks, so that small problems run through several jc/pc/ic blocks."""
    d = default_config(dtype)
    return GemmConfig(d.mr, d.nr, 24, 2 * d.mr, 2 * d.nr)


def _configs(dtype: str) -> list[GemmConfig]:
    out: list[GemmConfig] = []
    picks = [default_config(dtype), _tiny(dtype)]
    picks += candidate_configs(dtype, 37, 41, 43, "quick")
    picks += candidate_configs(dtype, 300, 200, 700, "quick")
    full = candidate_configs(dtype, 97, 89, 101, "full")
    picks += [full[len(full) // 2], full[-1]]
    for c in picks:
        if c not in out:
            out.append(c)
    return out


CONFIGS = {d: _configs(d) for d in DTYPES}

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
/* nb GEMMs spread over the OpenMP threads (each call then runs single-threaded); rets[b] = its return code,
   inpar[b] = whether it ran inside an active parallel region */
void batch_NAME(long long nb, long long M, long long N, long long K, const T *A, long long sab, long long sam,
                long long sak, const T *B, long long sbb, long long sbn, long long sbk, T *C, int *cnt,
                long long bad, int *rets, int *inpar) {
    #pragma omp parallel for schedule(dynamic, 1)
    for (long long b = 0; b < nb; b++) {
        void *bufs[2] = {C + b * M * N, cnt ? cnt + b * M * N : NULL}; long long syms[2] = {N, bad};
        inpar[b] = omp_in_parallel();
        rets[b] = NAME(M, N, K, A + b * sab, sam, sak, B + b * sbb, sbn, sbk, C + b * M * N, cnt ? epi_T : NULL,
                       bufs, syms);
    }
}
"""


# The thresholds of the own GEMM's threading, as variables the tests set (see _mode)
_THRESHOLDS = r"""
static long long lm_test_par_macs = 1LL << 18, lm_test_shared_macs = 1LL << 24;
#define LM_OWN_GEMM_PAR_MACS lm_test_par_macs
#define LM_OWN_GEMM_SHARED_MACS lm_test_shared_macs
#define LM_OWN_GEMM_SHARED_ROWS (lm_test_shared_macs ? 128 : 0)  /* shared-panel modes: at any row count */
void set_thresholds(long long par, long long shared) { lm_test_par_macs = par; lm_test_shared_macs = shared; }
"""
# threading modes: (threads, parallel threshold, shared-panel threshold)
BIG = 1 << 62
MODES = {"serial": (2, BIG, BIG), "split": (2, 0, BIG), "shared": (2, 0, 0), "split3": (3, 0, BIG),
         "shared3": (3, 0, 0), "default": (None, 1 << 18, 1 << 24)}


@contextlib.contextmanager
def _mode(lib, mode):
    """Run the own GEMMs of ``lib`` on one thread, split over private panels, or with shared B panels."""
    threads, par, shared = MODES[mode]
    old = lib.max_threads()
    lib.set_thresholds(par, shared)
    lib.set_threads(threads or old)
    try:
        yield
    finally:
        lib.set_threads(old)
        lib.set_thresholds(1 << 18, 1 << 24)


def _build(folder) -> ctypes.CDLL:
    parts = [HELPERS, gemm_helpers(), _THRESHOLDS]
    wrappers = []
    for dtype, (_, ctype, _) in DTYPES.items():
        for i, cfg in enumerate(CONFIGS[dtype]):
            name = f"og_{dtype}_{cfg.tag()}"
            parts.append(own_gemm_source(dtype, cfg, name))
            w = _WRAPPERS.replace("NAME", name).replace("epi_T", f"epi_{dtype}").replace("T *", f"{ctype} *")
            if i:  # one epilogue per dtype
                w = w[w.index("int call_"):]
            wrappers.append(w)
    parts += wrappers
    parts.append("void set_threads(int n) { omp_set_num_threads(n); }\nint max_threads(void) "
                 "{ return omp_get_max_threads(); }\n")
    src = folder / "own_gemm_test.c"
    src.write_text("\n".join(parts))
    lib = folder / "own_gemm_test.so"
    proc = subprocess.run([CC, *FLAGS, "-fPIC", "-shared", "-Wall", "-Wno-unused-function", "-Wno-unused-variable",
                           str(src), "-o", str(lib), "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "warning" not in proc.stderr, proc.stderr[-4000:]
    out = ctypes.CDLL(str(lib))
    out.set_thresholds.argtypes = [ctypes.c_longlong, ctypes.c_longlong]
    return out


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("own_gemm"))


def _fn(lib, dtype, cfg):
    name = f"og_{dtype}_{cfg.tag()}"
    P, L = ctypes.c_void_p, ctypes.c_longlong
    f = getattr(lib, f"call_{name}")
    f.argtypes = [L, L, L, P, L, L, P, L, L, P, P, L]
    f.restype = ctypes.c_int
    g = getattr(lib, f"batch_{name}")
    g.argtypes = [L, L, L, L, P, L, L, L, P, L, L, L, P, P, L, P, P]
    g.restype = None
    return f, g


def _operand(rng, np_dtype, rows, cols, layout):
    """A logical (rows, cols) view with the given memory layout (its element strides may be anything)."""
    def r(*shape):
        return rng.standard_normal(shape).astype(np_dtype)
    if layout == "row":
        return r(rows, cols)
    if layout == "col":  # transposed storage
        return r(cols, rows).T
    if layout == "strided":  # every third row, every other column of a larger array
        return r(rows * 3 + 1, cols * 2 + 1)[::3, ::2][:rows, :cols]
    if layout == "bcast_rows":  # stride 0 along the first axis
        return np.broadcast_to(r(1, cols), (rows, cols))
    if layout == "bcast_cols":  # stride 0 along the second axis
        return np.broadcast_to(r(rows, 1), (rows, cols))
    if layout == "reversed":  # negative strides
        return r(rows, cols)[::-1, ::-1]
    raise ValueError(layout)


def _estrides(x):
    return tuple(s // x.itemsize for s in x.strides) if x.size else (0, 0)


def _check(C, A, B, tol, what=""):
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    ref = A64 @ B64
    scale = np.abs(A64) @ np.abs(B64)
    err = np.abs(C.astype(np.float64) - ref)
    bad = err > tol * scale + 1e-30
    assert not bad.any(), f"{what}: {bad.sum()} wrong elements, max err {err.max()}, at {np.argwhere(bad)[:5]}"


def _run(f, M, N, K, A, B, np_dtype, epi=False, bad=-1):
    C = np.full((M, N), np.nan, np_dtype)
    cnt = np.zeros((M, N), np.int32)
    sam, sak = _estrides(A)
    sbk, sbn = _estrides(B)  # B is the logical (K, N) matrix: B(k, n) = B[k*sbk + n*sbn]
    ret = f(M, N, K, A.ctypes.data if A.size else None, sam, sak, B.ctypes.data if B.size else None, sbn, sbk,
            C.ctypes.data if C.size else None, cnt.ctypes.data if epi else None, bad)
    return C, cnt, ret


def _shapes(cfg: GemmConfig):
    mr, nr, kc, mc, nc = cfg.mr, cfg.nr, cfg.kc, cfg.mc, cfg.nc
    out = [(1, 1, 1), (7, 13, 17), (37, 41, 43), (mr - 1, nr + 1, 3), (mr + 1, nr - 1, kc + 1), (mr, nr, kc),
           (mc + 1, nr * 2 + 3, kc - 1), (mc - 1, nc + 1, 2 * kc + 1)]
    if mc * nc * kc <= 1 << 16:  # tiny blocks: several of each
        out += [(2 * mc + mr + 1, 2 * nc + 1, 3 * kc + 5), (97, 89, 101)]
    return [s for s in out if min(s) > 0]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_shapes_and_configs(lib, dtype):
    np_dtype, _, tol = DTYPES[dtype]
    rng = np.random.default_rng(1)
    for mode in ("default", "serial", "split3", "shared3"):
        with _mode(lib, mode):
            for cfg in CONFIGS[dtype]:
                f, _ = _fn(lib, dtype, cfg)
                for M, N, K in _shapes(cfg):
                    A = _operand(rng, np_dtype, M, K, "row")
                    B = _operand(rng, np_dtype, K, N, "row")
                    C, _, ret = _run(f, M, N, K, A, B, np_dtype)
                    assert ret == 0
                    _check(C, A, B, tol, f"{mode} {cfg.tag()} {M}x{N}x{K}")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_layouts(lib, dtype):
    """Transposed, strided, broadcast (stride 0) and reversed operands, for the default and a tiny-block config."""
    np_dtype, _, tol = DTYPES[dtype]
    rng = np.random.default_rng(2)
    layouts = ["row", "col", "strided", "bcast_rows", "bcast_cols", "reversed"]
    cases = [("default", default_config(dtype)), ("serial", _tiny(dtype)), ("shared3", _tiny(dtype))]
    pairs = [(la, "row") for la in layouts] + [("row", lb) for lb in layouts[1:]]
    pairs += [("col", "col"), ("strided", "bcast_rows"), ("reversed", "strided")]
    for mode, cfg in cases:
        f, _ = _fn(lib, dtype, cfg)
        for M, N, K in [(37, 41, 43), (97, 89, 101), (cfg.mr + 1, 2 * cfg.nr + 1, 2 * cfg.kc + 1), (1, 97, 101),
                        (89, 1, 101), (1, 1, 67), (1, 2100, 70), (2100, 1, 70)]:  # (and matrix-vector products)
            for la, lb in pairs:
                A = _operand(rng, np_dtype, M, K, la)
                B = _operand(rng, np_dtype, K, N, lb)
                with _mode(lib, mode):
                    C, _, ret = _run(f, M, N, K, A, B, np_dtype)
                assert ret == 0
                _check(C, A, B, tol, f"{mode} {cfg.tag()} {M}x{N}x{K} A {la} B {lb}")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_empty_dims(lib, dtype):
    np_dtype, _, _ = DTYPES[dtype]
    rng = np.random.default_rng(3)
    f, _ = _fn(lib, dtype, default_config(dtype))
    # K == 0: C is zeros, and the epilogue still sees every element once
    for M, N in [(5, 7), (300, 400)]:
        A = np.zeros((M, 0), np_dtype)
        B = np.zeros((0, N), np_dtype)
        C, cnt, ret = _run(f, M, N, 0, A, B, np_dtype, epi=True)
        assert ret == 0
        assert (C == 1).all() and (cnt == 1).all()
        C, _, ret = _run(f, M, N, 0, A, B, np_dtype)
        assert ret == 0 and (C == 0).all()
    # M == 0 or N == 0: nothing happens, the epilogue is not called
    for M, N, K in [(0, 5, 3), (5, 0, 3), (0, 0, 0)]:
        A = _operand(rng, np_dtype, max(M, 1), K, "row")[:M]
        B = _operand(rng, np_dtype, K, max(N, 1), "row")[:, :N]
        C, cnt, ret = _run(f, M, N, K, A, B, np_dtype, epi=True)
        assert ret == 0 and C.size == 0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_epilogue_once_per_element(lib, dtype):
    """The epilogue sees every element of C exactly once, after its final value (C - 1 == A @ B), on one
    thread, split over private panels (by rows and by columns) and with shared panels, on 2 and 3 threads;
    an error code it returns comes back while every element is still visited once."""
    np_dtype, _, tol = DTYPES[dtype]
    rng = np.random.default_rng(4)
    for mode in ("serial", "split", "shared", "split3", "shared3"):
        with _mode(lib, mode):
            for cfg in (default_config(dtype), _tiny(dtype), CONFIGS[dtype][-1]):
                f, _ = _fn(lib, dtype, cfg)
                for M, N, K in [(7, 13, 17), (300, 97, 101), (97, 300, 101), (cfg.mc * 2 + 1, cfg.nr * 3 + 1, 130),
                                (2 * cfg.mr + 1, 4 * cfg.nr + 3, 2 * cfg.kc + 1), (1, 3000, 200), (3000, 1, 200)]:
                    A = _operand(rng, np_dtype, M, K, "row")
                    B = _operand(rng, np_dtype, K, N, "col")
                    C, cnt, ret = _run(f, M, N, K, A, B, np_dtype, epi=True)
                    what = f"{mode} {cfg.tag()} {M}x{N}x{K}"
                    assert ret == 0, what
                    assert (cnt == 1).all(), f"{what}: epilogue counts {np.unique(cnt)}"
                    _check(C - 1, A, B, tol, f"{what} epilogue")
                    bad = (M // 2) * N + N - 1
                    C, cnt, ret = _run(f, M, N, K, A, B, np_dtype, epi=True, bad=bad)
                    assert ret == 7 and (cnt == 1).all(), what


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_inside_parallel_region(lib, dtype):
    """Batched GEMMs from a ``#pragma omp parallel for``: each call runs single-threaded and stays correct."""
    np_dtype, _, tol = DTYPES[dtype]
    rng = np.random.default_rng(5)
    with _mode(lib, "shared"):  # (thresholds 0: a call would split over threads if it ignored the region)
        for cfg in (default_config(dtype), _tiny(dtype), CONFIGS[dtype][2]):
            _, g = _fn(lib, dtype, cfg)
            for nb, M, N, K in [(6, 37, 41, 43), (4, 130, 150, 300)]:
                A = rng.standard_normal((nb, K, M)).astype(np_dtype).transpose(0, 2, 1)  # transposed A
                B = rng.standard_normal((nb, K, N)).astype(np_dtype)
                C = np.full((nb, M, N), np.nan, np_dtype)
                cnt = np.zeros((nb, M, N), np.int32)
                rets = np.full(nb, -1, np.int32)
                inpar = np.zeros(nb, np.int32)
                bad = 5
                g(nb, M, N, K, A.ctypes.data, M * K, 1, M, B.ctypes.data, K * N, 1, N, C.ctypes.data,
                  cnt.ctypes.data, bad, rets.ctypes.data, inpar.ctypes.data)
                assert (rets == 7).all() and (cnt == 1).all()
                for b in range(nb):
                    _check(C[b] - 1, A[b], B[b], tol, f"{cfg.tag()} batch {b} {M}x{N}x{K}")
                assert inpar.all()


def test_candidate_configs():
    assert vector_bytes() in (16, 32, 64)
    for dtype in DTYPES:
        d = default_config(dtype)
        w = vector_bytes() // np.dtype(dtype).itemsize
        for M, N, K in [(2048, 2048, 2048), (128, 128, 64), (4096, 384, 1536), (7, 13, 17), (1, 4096, 4096)]:
            for level, lo, hi in (("quick", 4, 6), ("full", 12, 20)):
                cs = candidate_configs(dtype, M, N, K, level)
                assert d in cs and len(set(cs)) == len(cs)
                assert len(cs) <= hi, (dtype, M, N, K, level, cs)
                assert len(cs) >= lo or min(M, N, K) < (64 if level == "quick" else 256), (dtype, M, N, K, level, cs)
                for c in cs:
                    c.validate(dtype)
                    assert c.nr % w == 0 and c.mc % c.mr == 0 and c.nc % c.nr == 0
                    assert c == d or c.kc <= max(K, 1)
                    assert len({x.tag() for x in cs}) == len(cs)
    with pytest.raises(ValueError):
        own_gemm_source("float32", GemmConfig(6, 3, 64, 12, 48), "bad_nr")


_MAIN = r"""
#include <stdio.h>
static int cnt_epi(void **bufs, const long long *syms, long long m0, long long m1, long long n0, long long n1) {
    int *cnt = (int *)bufs[0]; long long N = syms[0];
    for (long long m = m0; m < m1; m++) for (long long n = n0; n < n1; n++) cnt[m * N + n]++;
    return 0;
}
static unsigned long long rs = 88172645463325252ULL;
static double rnd(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0 - 0.5;
}
#define CHECK(T, FN, TOL) do { \
    long long sam = tA ? 1 : K, sak = tA ? M : 1, sbn = tB ? K : 1, sbk = tB ? 1 : N; \
    T *A = malloc(sizeof(T) * M * K), *B = malloc(sizeof(T) * K * N), *C = malloc(sizeof(T) * M * N); \
    int *cnt = calloc(M * N, sizeof(int)); \
    for (long long i = 0; i < M * K; i++) A[i] = (T)rnd(); \
    for (long long i = 0; i < K * N; i++) B[i] = (T)rnd(); \
    void *bufs[1] = {cnt}; long long syms[1] = {N}; \
    if (FN(M, N, K, A, sam, sak, B, sbn, sbk, C, cnt_epi, bufs, syms) != 0) { printf("ret\n"); return 1; } \
    for (long long m = 0; m < M; m++) for (long long n = 0; n < N; n++) { \
        double ref = 0, sc = 0; \
        for (long long k = 0; k < K; k++) { \
            double p = (double)A[m * sam + k * sak] * B[n * sbn + k * sbk]; ref += p; sc += fabs(p); } \
        if (fabs(C[m * N + n] - ref) > TOL * sc + 1e-30 || cnt[m * N + n] != 1) { \
            printf("%s mode %d %lldx%lldx%lld tA=%d tB=%d: C[%lld,%lld] = %g, want %g, cnt %d\n", #FN, mode, M, N, K, \
                   tA, tB, m, n, (double)C[m * N + n], ref, cnt[m * N + n]); \
            return 1; } \
    } \
    free(A); free(B); free(C); free(cnt); } while (0)
int main(void) {
    long long shapes[][3] = {{1, 1, 1}, {7, 13, 17}, {37, 41, 43}, {13, 35, 60}, {61, 67, 130}, {130, 70, 9},
                             {5, 300, 50}, {100, 90, 200}, {1, 300, 50}, {300, 1, 51}, {1, 1, 5}};
    /* modes: one thread; split over private panels; shared B panels (3 threads) */
    for (int mode = 0; mode < 3; mode++) {
        lm_test_par_macs = mode == 0 ? (1LL << 62) : 0;
        lm_test_shared_macs = mode == 2 ? 0 : (1LL << 62);
        omp_set_num_threads(mode == 2 ? 3 : 2);
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
            for (int tA = 0; tA < 2; tA++)
                for (int tB = 0; tB < 2; tB++) {
                    long long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
CHECKS
                }
    }
    printf("ok\n");
    return 0;
}
"""


def test_sanitized_executable(tmp_path):
    """A standalone program (random data, naive triple loop as the oracle) under ASan + UBSan."""
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    proc = subprocess.run([CC, *san, str(probe), "-o", str(tmp_path / "probe")], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{CC} cannot link the address/undefined sanitizer runtimes here: {proc.stderr.strip()[-300:]}")
    parts = ["#define LM_OWN_GEMM_EXACT_BUFFERS 1", HELPERS, gemm_helpers(), _THRESHOLDS]
    checks = []
    for dtype, (_, ctype, tol) in DTYPES.items():
        d = default_config(dtype)
        cfgs = [d, _tiny(dtype), GemmConfig(CONFIGS[dtype][2].mr, CONFIGS[dtype][2].nr, 32,
                                            CONFIGS[dtype][2].mr * 3, CONFIGS[dtype][2].nr * 2)]
        for i, cfg in enumerate(dict.fromkeys(cfgs)):
            name = f"san_{dtype}_{i}"
            parts.append(own_gemm_source(dtype, cfg, name))
            checks.append(f"                    CHECK({ctype}, {name}, {tol * 10});")
    src = tmp_path / "san.c"
    src.write_text("\n".join(parts) + _MAIN.replace("CHECKS", "\n".join(checks)))
    exe = tmp_path / "san"
    proc = subprocess.run([CC, "-O1", "-g", "-march=native", "-fopenmp", "-std=gnu11", *san, str(src), "-o",
                           str(exe), "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = dict(os.environ, OMP_NUM_THREADS="2", ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and "ok" in run.stdout, (run.stdout[-2000:], run.stderr[-4000:])
