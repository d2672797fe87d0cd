"""The streaming and dot-product GEMM kernels prefetch the next block of B (a weight, usually from memory) while
they compute on the current one (luminal/codegen/gemm_stream.py, gemm_small.py). Prefetches change no result, so
the numbers are tested elsewhere (test_gemm_small.py); here the kernels are built with ``__builtin_prefetch``
recording its addresses, run single-threaded on real operands, and the record is checked against B's layout:
every cache line of B past the first block is prefetched (no block, K block, column range or row's last line
missed: rows need not start on a line) and no address lies outside B (one line past its end at most). Results
are checked against numpy too.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from luminal.codegen.c import CProgram
from luminal.codegen.c_support import HELPERS, gemm_helpers
from luminal.runtime import search as S
from luminal.runtime.cpu import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")

# the kernels' next-block prefetches are the ones into L2 (locality 2); the copies' own prefetches a few lines
# ahead in the row they copy (locality 3, one or two arguments) are not recorded
_RECORD = r"""
#include <stdarg.h>
static const char *lm_rec[1 << 21];
static long long lm_nrec;
static inline void lm_pf_record(const void *p, int rw, int loc, ...) {
    (void)rw;
    if (loc == 2 && lm_nrec < (1LL << 21)) lm_rec[lm_nrec++] = (const char *)p;
}
#define __builtin_prefetch(...) lm_pf_record(__VA_ARGS__, 3, 3)
"""

_CALL = r"""
long long run_NAME(long long M, long long N, long long K, const T *A, long long sam, long long sak, const T *B,
                   long long sbn, long long sbk, T *C, long long *out, long long cap) {
    omp_set_num_threads(1);
    lm_nrec = 0;
    if (NAME(M, N, K, A, sam, sak, B, sbn, sbk, C, NULL, NULL, NULL)) return -1;
    long long n = lm_nrec < cap ? lm_nrec : cap;
    for (long long i = 0; i < n; i++) out[i] = (long long)(lm_rec[i] - (const char *)B);
    return lm_nrec;
}
"""

KERNELS = [("stream", "float32"), ("stream", "float64"), ("dot", "float32"), ("dot", "float64")]


@pytest.fixture(scope="module")
def lib():
    from luminal.runtime.build import _blas, build_library

    blas = _blas() is not None
    parts = [("#define LUMINAL_BLAS 1\n" if blas else "") + HELPERS, _RECORD, gemm_helpers(),
             S.own_sources(set(KERNELS))]
    for choice, dtype in KERNELS:
        ctype = "float" if dtype == "float32" else "double"
        parts.append(_CALL.replace("NAME", S.function_name(choice, dtype)).replace("T *", f"{ctype} *"))
    return ctypes.CDLL(build_library(CProgram("\n".join(parts), [], [], blas)))


def _run(lib, choice, dtype, A, B, layout, sb_row):
    """C = A . B^T for the logical (N, K) operand ``B`` given by its storage ``B`` (a flat array) and row stride;
    returns C and the recorded prefetch offsets (bytes from B's first element)."""
    M, K = A.shape
    N = B[1]
    store = B[0]
    sbn, sbk = (sb_row, 1) if layout == "nk" else (1, sb_row)
    C = np.full((M, N), np.nan, A.dtype)
    cap = 1 << 21
    out = np.zeros(cap, np.int64)
    f = getattr(lib, "run_" + S.function_name(choice, dtype))
    L, P = ctypes.c_longlong, ctypes.c_void_p
    f.argtypes = [L, L, L, P, L, L, P, L, L, P, P, L]
    f.restype = L
    n = f(M, N, K, A.ctypes.data, K, 1, store.ctypes.data, sbn, sbk, C.ctypes.data, out.ctypes.data, cap)
    assert 0 <= n < cap, n
    return C, out[:n]


# (the dot-product kernel takes B stored N x K only: K x N goes to its fallback)
@pytest.mark.parametrize("choice,dtype,layout", [(c, d, lay) for c, d in KERNELS for lay in ("nk", "kn")
                                                 if c == "stream" or lay == "nk"])
def test_prefetch_covers_the_next_blocks_and_stays_in_b(lib, choice, dtype, layout):
    np_dtype = np.float32 if dtype == "float32" else np.float64
    size = np.dtype(np_dtype).itemsize
    rng = np.random.default_rng(5)
    # rows: the tile's and several tiles; N: many column blocks and (dot) column ranges; K: several K blocks
    for M, N, K in [(32, 200, 1100), (40, 130, 700), (130, 150, 1300), (8, 300, 2100)]:
        A = rng.standard_normal((M, K)).astype(np_dtype)
        rows, length = (N, K) if layout == "nk" else (K, N)
        pad = 5  # rows 5 elements longer: they start at every offset within a line
        flat = np.zeros(rows * (length + pad) + 1, np_dtype)
        store = flat[1:]  # (one element in: B's first row does not start on a line either)
        mat = store[:rows * (length + pad)].reshape(rows, length + pad)[:, :length]
        mat[...] = rng.standard_normal((rows, length))
        Bt = mat if layout == "nk" else mat.T  # logical (N, K)
        C, offs = _run(lib, choice, dtype, A, (store, N), layout, length + pad)
        ref = A.astype(np.float64) @ Bt.astype(np.float64).T
        tol = 1e-4 if dtype == "float32" else 1e-12
        assert np.allclose(C, ref, rtol=tol, atol=tol * np.abs(ref).max()), f"{choice} {M}x{N}x{K} wrong result"
        base = store.ctypes.data
        end = (rows - 1) * (length + pad) * size + length * size  # bytes past B's first element to its end
        assert offs.size, f"{choice} {dtype} {layout} {M}x{N}x{K}: nothing prefetched"
        assert offs.min() >= 0 and offs.max() < end + 64, \
            f"{choice} {M}x{N}x{K}: a prefetch outside B ({offs.min()}, {offs.max()} of {end} bytes)"
        got = set(((base + offs) // 64).tolist())
        # every line of B but the first block's: that block has at most 64 columns (N) and 682 rows of K, so
        # rows of storage from 64 (nk) / 1024 (kn) on, and in the rows before, the elements from 1024 (nk) / 64
        # (kn) on (the next K blocks, the next column blocks) are all prefetched
        first_rows, first_len = (64, 1024) if layout == "nk" else (1024, 64)
        missed = []
        for r in range(rows):
            lo = base + r * (length + pad) * size
            skip = 0 if r >= first_rows else min(first_len, length) * size
            need = range((lo + skip + 63) // 64 if skip else lo // 64, (lo + length * size - 1) // 64 + 1)
            missed += [line for line in need if line not in got]
        assert not missed, f"{choice} {dtype} {layout} {M}x{N}x{K}: {len(missed)} lines of B never prefetched"
