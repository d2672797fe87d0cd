"""GEMM routines compiled once into libraries of their own and linked into programs at load time
(luminal/codegen/library.py, luminal/runtime/build.py: build_program / load_program).

Oracles: the float64 product of the rounded operands (numpy), and torch's bfloat16 matmul. What must hold: a
program's C does not carry the routines; a second program that calls the same routine compiles only itself;
libraries built with different flags coexist in one process; a damaged cached library is rebuilt, never loaded;
a program split into translation units links its routines; threads compiling at once get correct programs.
"""

from __future__ import annotations

import os
import threading

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.codegen.library import LibraryPart
from luminal.runtime import build
from luminal.runtime.cpu import find_compiler
from hl_helpers import run_in_threads

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")


def _bf16_product(m, k, n, seed, extra=None):
    """A graph computing ``x @ w.T`` on bfloat16 operands (+ ``extra`` applied to the result); returns (cx, y,
    the float64 oracle)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    cx = lm.Graph()
    x, W = cx.tensor((m, k), "bfloat16"), cx.tensor((n, k), "bfloat16")
    x.set(a.astype(np.float32))
    W.set(w.astype(np.float32))
    y = x.cast("float32") @ W.cast("float32").permute((1, 0))
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    if extra is not None:
        y, ref = extra(y), extra(ref)
    return cx, y.retrieve(), ref


def _check(y, ref, k):
    np.testing.assert_allclose(np.asarray(y.data(), np.float64), ref, rtol=0, atol=(k + 2) * 2.0 ** -23 * 4 * k)


def test_routines_live_in_parts_and_are_compiled_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    cx, y, ref = _bf16_product(40, 96, 70, seed=1)
    cx.compile(device="cpu")
    cx.execute()
    _check(y, ref, 96)
    prog = cx.runtime.cprogram
    assert [p.key for p in prog.parts] == ["lowp:bfloat16:bfloat16"]
    assert all(isinstance(p, LibraryPart) for p in prog.parts)
    assert "lm_gemm_lp_bb_dot" not in prog.source and "lm_gemm_lp_bb_dot" in prog.parts[0].source
    # another program with the same pair of operand types compiles only itself
    before = build.CompileStats.compilations
    cx2, y2, ref2 = _bf16_product(33, 96, 50, seed=2, extra=lambda v: v * 2.0 + 1.0)
    cx2.compile(device="cpu")
    cx2.execute()
    assert build.CompileStats.compilations == before + 1
    _check(y2, ref2, 96)


def test_libraries_built_with_other_flags_coexist(tmp_path, monkeypatch):
    """Two builds of the same routine (different macros) loaded in one process each serve their own program:
    the libraries are loaded privately, not into one global namespace."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    outs = []
    for flags in ("-O2 -march=native -fno-math-errno -fno-trapping-math -DLM_AMX_ROWS_M=2",
                  "-O2 -march=native -fno-math-errno -fno-trapping-math -DLM_AUTO_SMALL_M=0"):
        monkeypatch.setenv("LUMINAL_CFLAGS", flags)
        cx, y, ref = _bf16_product(48, 64, 40, seed=3)
        cx.compile(device="cpu")
        outs.append((cx, y, ref))
    paths = [cx.runtime._parts[0]._name for cx, _, _ in outs]
    assert paths[0] != paths[1]
    for cx, y, ref in outs:
        cx.execute()
        _check(y, ref, 64)


def test_damaged_part_library_is_rebuilt(tmp_path, monkeypatch):
    """A cached part whose file no longer matches its record (here truncated, by a process that had built it) is
    rebuilt with a warning, never loaded."""
    import subprocess
    import sys

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    script = ("import numpy as np, luminal as lm\n"
              "cx = lm.Graph(); x, w = cx.tensor((20, 50), 'bfloat16'), cx.tensor((30, 50), 'bfloat16')\n"
              "y = (x.cast('float32') @ w.cast('float32').permute((1, 0))).retrieve()\n"
              "cx.compile(device='cpu'); print(cx.runtime._parts[0]._name)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    part_path = proc.stdout.split()[-1]
    with open(part_path, "r+b") as f:
        f.truncate(100)
    cx, y, ref = _bf16_product(20, 50, 30, seed=5)
    with pytest.warns(UserWarning, match="does not match its record"):
        cx.compile(device="cpu")
    cx.execute()
    _check(y, ref, 50)
    assert cx.runtime._parts[0]._name == part_path and os.path.getsize(part_path) > 100


def test_split_program_links_its_parts(tmp_path, monkeypatch):
    """A program compiled as several translation units (the pointers are defined once, with luminal_link, in the
    last unit) calls its routines correctly."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LUMINAL_CC_JOBS", "3")
    monkeypatch.setattr(build, "UNIT_BYTES", 1)
    split0 = build.CompileStats.split_compilations
    cx, y, ref = _bf16_product(24, 80, 36, seed=6, extra=lambda v: (v * 0.5 + 3.0) * 2.0)
    z = (y * 1.0 - 1.0).exp().retrieve()
    cx.compile(device="cpu")
    cx.execute()
    assert build.CompileStats.split_compilations == split0 + 1
    _check(y, ref, 80)
    np.testing.assert_allclose(z.data(), np.exp(ref - 1.0), rtol=1e-5)


def test_threads_compiling_programs_that_share_a_part(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    results = {}

    def work(i):
        cx, y, ref = _bf16_product(16 + i, 64, 24, seed=10 + i)
        cx.compile(device="cpu")
        cx.execute()
        results[i] = (np.asarray(y.data(), np.float64), ref)

    run_in_threads(work, 3)
    assert len(results) == 3
    for got, ref in results.values():
        np.testing.assert_allclose(got, ref, rtol=0, atol=66 * 2.0 ** -23 * 4 * 64)


def _f32_product(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    cx = lm.Graph()
    y = (cx.tensor((m, k)).set(a) @ cx.tensor((k, n)).set(w)).relu().retrieve()
    return cx, y, np.maximum(a.astype(np.float64) @ w.astype(np.float64), 0)


def test_library_parts_start_building_before_the_passes(tmp_path, monkeypatch):
    """compile(device="cpu") starts building the float32 GEMM routine's part before its passes run
    (runtime.prepare -> prefetch.prefetch_library_parts); the program's build then finds it cached: one compilation
    (the program), one cache hit (the part). Products whose default is OpenBLAS, products of widened bfloat16
    operands (their own part) and graphs without a product start nothing; a cached part is not started again."""
    from luminal.runtime import prefetch
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    if build._blas() is not None:  # a product whose default is OpenBLAS itself (70 rows, K = 50) needs no part
        assert prefetch.prefetch_library_parts(_f32_product(70, 50, 90, seed=3)[0]) == []
    assert prefetch.prefetch_library_parts(_bf16_product(20, 30, 40, seed=5)[0]) == []  # (before float32's is cached)
    cx, y, ref = _f32_product(40, 64, 90, seed=4)  # (40 rows: the "auto" dispatcher, a part)
    threads = prefetch.prefetch_library_parts(cx)
    assert len(threads) == 1 and threads[0].name.startswith("luminal-prebuild-")
    threads[0].join(300)
    assert prefetch.prefetch_library_parts(cx) == []  # (cached now)
    compiled, hits = build.CompileStats.compilations, build.CompileStats.cache_hits
    cx.compile(device="cpu")
    cx.execute()
    assert build.CompileStats.compilations == compiled + 1 and build.CompileStats.cache_hits == hits + 1
    assert [p.key for p in cx.runtime.cprogram.parts] == ["auto:float32"]
    np.testing.assert_allclose(y.data(), ref, rtol=1e-5, atol=1e-4)
    plain = lm.Graph()
    (plain.tensor((8, 8)).set(np.ones((8, 8), np.float32)).exp() * 2.0).retrieve()
    assert prefetch.prefetch_library_parts(plain) == []
    seen = []
    monkeypatch.setattr(prefetch, "prefetch_library_parts", lambda g: seen.append(len(g.nodes)))
    cx2, y2, ref2 = _f32_product(30, 20, 10, seed=6)
    nodes = len(cx2.nodes)
    cx2.compile(device="cpu")
    assert seen == [nodes]  # called once, on the graph as the user built it (before the passes)
    cx2.execute()
    np.testing.assert_allclose(y2.data(), ref2, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_fresh_build_locks():
    """A build lock held by a parent's thread (a prebuild still compiling) when the process forks would never be
    released in the child: the child starts with fresh locks."""
    with build._KEY_LOCKS_GUARD:
        lock = build._KEY_LOCKS.setdefault("held-at-fork", threading.Lock())
    lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: the held key must not be there, and the guard must be free
            ok = "held-at-fork" not in build._KEY_LOCKS and build._KEY_LOCKS_GUARD.acquire(timeout=5)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        lock.release()
        build._KEY_LOCKS.pop("held-at-fork", None)
