"""GEMM implementations at small M or N, side by side in one process: OpenBLAS, luminal's own GEMM configurations,
the dot-product kernel, the streaming kernel (luminal/codegen/gemm_stream.py) and the ``"auto"`` dispatch
(luminal/codegen/gemm_small.py).

Run:  python benchmarks/gemm_small.py [--shapes 32x1536x384xnk,1x3072x768xnk] [--choices blas,dot,stream,auto]
                                      [--rounds 5] [--cpu-time] [--dtype float32] [--cold-a MIB] [--cold-b MIB]

A shape is ``MxNxK`` plus the layout of B: ``nk`` (an N x K weight, PyTorch's layout: both operands contiguous
along K) or ``kn`` (K x N, row-major: e.g. a convolution's weight times its im2col columns, 512x16x4608xkn for
a late ResNet stage at batch 1), and optionally ``xat``: A stored transposed, K x M (a linear layer's weight
gradient dY^T X: 512x784x256xknxat for W3's first layer); A is the same hot matrix every call, so a
weight that would stream from memory in a real network is measured from cache here, unless ``--cold-a 96``:
copies of A, one per call in turn, 96 MiB together; ``--cold-b 96`` the same for B: a linear layer's weight in
``nk`` shapes). ``own`` is the own GEMM's default configuration, ``own-small`` the 8x48 small-M one; any
``own:<tag>`` of the search works too. Candidates run interleaved, round after round; each cell is the best
round's GFLOP/s. ``--cpu-time`` times with the process CPU clock instead of the wall clock (all threads' CPU time:
on a shared, loaded machine, run with OMP_NUM_THREADS=1 for per-core kernel efficiency that other processes do not
disturb). Every result is checked against numpy first. Asserts
nothing about timings.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = ("32x384x384xnk,32x1536x384xnk,32x384x1536xnk,8x1536x384xnk,64x1536x384xnk,128x1024x256xnk,"
          "1x2304x768xnk,1x768x3072xnk,32x1536x384xkn,32x32x32xnk,512x16x4608xkn,256x49x2304xkn,128x196x1152xkn,"
          "1024x384x384xkn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--choices", default="blas,own,own-small,dot,stream,auto")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-time", action="store_true")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--cold-a", type=int, default=0, metavar="MIB",
                        help="cycle through copies of A totalling at least MIB MiB (A from memory, as a network's "
                             "weights are when they exceed the last-level cache; e.g. 96 on a 32 MiB L3)")
    parser.add_argument("--cold-b", type=int, default=0, metavar="MIB",
                        help="the same for B (a linear layer's N x K weight times the activations, xnk)")
    args = parser.parse_args()

    from luminal.codegen.c import CProgram
    from luminal.codegen.c_support import HELPERS, gemm_helpers
    from luminal.codegen.gemm import default_config
    from luminal.codegen.gemm_small import small_config
    from luminal.runtime.build import _blas, build_library
    from luminal.runtime.search import GemmShape, _correct, _operands, function_name, own_sources

    dt = args.dtype
    alias = {"own": "own:" + default_config(dt).tag(), "own-small": "own:" + small_config(dt).tag()}
    choices = [alias.get(c, c) for c in args.choices.split(",")]
    blas = _blas() is not None
    if not blas:
        choices = [c for c in choices if c != "blas"]
    ctype = "float" if dt == "float32" else "double"
    clock = "CLOCK_PROCESS_CPUTIME_ID" if args.cpu_time else "CLOCK_MONOTONIC"
    bench = f"""
#include <time.h>
typedef int (*fn_t)(long long, long long, long long, const {ctype} *, long long, long long, const {ctype} *,
                    long long, long long, {ctype} *, lm_epilogue, void **, const long long *);
static fn_t table[] = {{ {", ".join(function_name(c, dt) for c in choices)} }};
double bench(int w, long long M, long long N, long long K, const {ctype} *A, long long sam, long long sak,
             const {ctype} *B, long long sbn, long long sbk, {ctype} *C, int reps, long long copies,
             long long astride, long long bcopies, long long bstride) {{
    lm_blas_init();
    struct timespec a, b; clock_gettime({clock}, &a);
    for (int r = 0; r < reps; r++)
        table[w](M, N, K, A + (r % copies) * astride, sam, sak, B + (r % bcopies) * bstride, sbn, sbk, C, NULL,
                 NULL, NULL);
    clock_gettime({clock}, &b);
    return ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / reps;
}}
"""
    src = "\n".join([("#define LUMINAL_BLAS 1\n" if blas else "") + HELPERS, gemm_helpers(),
                     own_sources({(c, dt) for c in choices}), bench])
    lib = ctypes.CDLL(build_library(CProgram(src, [], [], blas)))
    L, P = ctypes.c_longlong, ctypes.c_void_p
    lib.bench.restype = ctypes.c_double
    lib.bench.argtypes = [ctypes.c_int, L, L, L, P, L, L, P, L, L, P, ctypes.c_int, L, L, L, L]
    rng = np.random.default_rng(0)
    print(f"GFLOP/s ({'process CPU time' if args.cpu_time else 'wall clock'}, best of {args.rounds} rounds), {dt}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'shape':>18}  " + "  ".join(f"{c[:22]:>22}" for c in choices))
    for text in args.shapes.split(","):
        m, n, k, layout, *a_layout = text.split("x")
        m, n, k = int(m), int(n), int(k)
        if layout not in ("nk", "kn") or a_layout not in ([], ["at"]):
            raise SystemExit(f"{text}: expected MxNxK, then nk or kn, then optionally at")
        shape = GemmShape(dt, 1, m, n, k, *((1, m) if a_layout else (k, 1)), *((k, 1) if layout == "nk" else (1, n)))
        bufs = _operands(shape, rng)
        a, b, c = bufs[0], bufs[1], bufs[2]
        # --cold-a: identical copies of A, one per call in turn, enough to exceed that many MiB together
        copies = max(1, -(-(args.cold_a << 20) // a.nbytes)) if args.cold_a else 1
        a_all = np.tile(a, copies)
        bcopies = max(1, -(-(args.cold_b << 20) // b.nbytes)) if args.cold_b else 1
        b_all = np.tile(b, bcopies)

        def run(i, reps):
            return lib.bench(i, m, n, k, a_all.ctypes.data, shape.sam, shape.sak, b_all.ctypes.data, shape.sbn,
                             shape.sbk, c.ctypes.data, max(reps, copies, bcopies), copies, a.size, bcopies, b.size)
        times: dict[int, list | None] = {}
        for i in range(len(choices)):
            c[:] = np.nan
            run(i, 1)
            times[i] = [] if _correct(shape, bufs) else None
        reps = max(2, int(3e-3 / (2 * shape.macs / 100e9)))
        for _ in range(args.rounds):
            for i in times:
                if times[i] is not None:
                    times[i].append(run(i, reps))
        cells = [f"{2 * shape.macs / min(t) / 1e9:22.1f}" if t else f"{'WRONG':>22}" for t in times.values()]
        print(f"{text:>18}  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
