"""Large programs compile as parallel translation units (luminal/runtime/build.py: split_units).

Oracle: numpy, and the same program compiled as one unit; splitting must not change any result.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import luminal as lm
import luminal.nn as nn
from luminal.runtime import build


_MODEL = nn.LSTM(6, 5, num_layers=2)  # one set of weights for every graph of this file


def _lstm_graph(seed=0):
    rng = np.random.default_rng(seed)
    m = _MODEL
    cx = lm.Graph()
    xv = rng.standard_normal((4, 3, 6)).astype(np.float32)
    x = cx.tensor(xv.shape).set(xv)
    out = m(x)[0]
    loss = (out * out).sum()
    from luminal.training import grad

    grads = grad(loss, [x] + m.parameters())
    for t in [out] + grads:
        t.retrieve()
    return cx, [out] + grads


def _run(monkeypatch, tmp_path, jobs: str, unit_bytes: int, profile: bool = False):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / f"cache{jobs}"))
    monkeypatch.setenv("LUMINAL_CC_JOBS", jobs)
    monkeypatch.setenv("LUMINAL_PROFILE", "1" if profile else "0")
    monkeypatch.setattr(build, "UNIT_BYTES", unit_bytes)
    cx, outs = _lstm_graph()
    cx.compile(None, outs, device="cpu")
    cx.execute()
    return cx, [o.data().copy() for o in outs]


@pytest.mark.parametrize("profile", [False, True])
def test_split_program_equals_the_single_unit_one(tmp_path, monkeypatch, profile):
    split0 = build.CompileStats.split_compilations
    cx1, single = _run(monkeypatch, tmp_path, "1", 1, profile)
    assert build.CompileStats.split_compilations == split0
    cx3, split = _run(monkeypatch, tmp_path, "3", 1, profile)
    assert build.CompileStats.split_compilations == split0 + 1
    for a, b in zip(single, split):
        np.testing.assert_array_equal(a, b)  # the same code, only compiled in pieces
    if profile:
        assert "gemm" in cx3.runtime.profile(5)
    # and both agree with an independent reference: the interpreter
    cx, outs = _lstm_graph()
    cx.compile(None, outs, device="reference")
    cx.execute()
    for o, b in zip(outs, split):
        np.testing.assert_allclose(o.data(), b, rtol=1e-4, atol=1e-5)


def test_units_define_every_function_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    cx, outs = _lstm_graph()
    cx.compile(None, outs, device="cpu")
    source = cx.runtime.source
    units = build.split_units(source, 3)
    assert units is not None and len(units) == 4  # three kernel units and the tail
    defined = re.compile(r"^(?:static int |__attribute__\(\(visibility\(\"hidden\"\)\)\) int )(k\w*_\d+)\(.*\{$", re.M)
    whole = sorted(defined.findall(source))
    pieces = sorted(name for u in units[:-1] for name in defined.findall(u))
    assert pieces == whole  # each kernel function in exactly one unit
    assert "int luminal_run(" in units[-1] and all("int luminal_run(" not in u for u in units[:-1])
    assert defined.findall(units[-1]) == []  # the tail only declares the bodies its table names
    for u in units[:-1]:  # a unit defines what its functions call
        own = set(defined.findall(u))
        called = set(re.findall(r"\b(kbody_\d+|kepi_\d+)\(", u))
        assert called <= own


def test_small_programs_are_not_split():
    assert build.split_units("int luminal_run(void **b, const long long *s) { return 0; }\n", 4) is None
    assert build._parallel_units("x" * 1000) == 1


def test_bad_job_count_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LUMINAL_CC_JOBS", "zero")
    with pytest.raises(ValueError, match="LUMINAL_CC_JOBS"):
        build._parallel_units("x" * (4 << 20))


_CNN = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                     nn.Conv2d(32, 8, 1, stride=2), nn.Flatten(), nn.Linear(8 * 3 * 3, 5))


def _cnn_graph(seed=1):
    """A small CNN's training step: its direct and Winograd convolution kernels write their family's include-guarded
    header (per-thread buffers, shared helpers) between kernels, and their register tiles are ``noinline``
    functions, which the splitter must keep with their kernel."""
    from luminal.training import grad
    rng = np.random.default_rng(seed)
    model = _CNN
    cx = lm.Graph()
    x = cx.tensor((8, 1, 16, 16)).set(rng.standard_normal((8, 1, 16, 16)).astype(np.float32))
    out = model(x)
    grads = grad((out * out).sum(), [x] + model.parameters())
    for t in [out] + grads:
        t.retrieve()
    return cx, [out] + grads


def test_split_cnn_program_equals_the_single_unit_one(tmp_path, monkeypatch):
    """Regression: a program whose kernel section holds include-guarded headers (the direct convolution's) failed
    to compile once split (an #ifndef cut from its #endif, a tile named ``__attribute__``)."""
    results = []
    for jobs in ("1", "3"):
        monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / f"cache{jobs}"))
        monkeypatch.setenv("LUMINAL_CC_JOBS", jobs)
        monkeypatch.setattr(build, "UNIT_BYTES", 1)
        split0 = build.CompileStats.split_compilations
        cx, outs = _cnn_graph()
        cx.compile(None, outs, device="cpu")
        cx.execute()
        assert build.CompileStats.split_compilations == split0 + (jobs == "3")
        results.append([o.data().copy() for o in outs])
        source = cx.runtime.source
    section = source[build._FIRST.search(source).start():]
    assert "#ifndef LM_DIRECT_BUF" in section and "__attribute__((noinline))" in section  # (what the test covers)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)  # the same code, only compiled in pieces
    cx, outs = _cnn_graph()
    cx.compile(None, outs, device="reference")
    cx.execute()
    for o, b in zip(outs, results[1]):
        np.testing.assert_allclose(o.data(), b, rtol=1e-4, atol=1e-4)


_SYNTHETIC = r"""#include <stddef.h>
static int lm_helper(int x) { return x; }
static int kbody_0(void **bufs, const long long *syms) { return lm_helper(1); }
#ifndef LM_TEST_A  /* a tuning macro's default, with a comment */
#define LM_TEST_A 3
#endif
#ifndef LM_FAM
#define LM_FAM
static __thread int lm_fam_buf;
#endif
/* kepi_1: a family's kernel and its out-of-line tile (a brace in a comment: { ) */
static __attribute__((noinline)) int kepi_1_t(int x) { return x + lm_fam_buf + (int)sizeof("}") + '{' - 123; }
static int kepi_1(void **bufs, const long long *syms) { return kepi_1_t(1); }
static int kbody_2(void **bufs, const long long *syms) { return LM_TEST_A + 1; }
#ifndef LM_FAM
#define LM_FAM
static __thread int lm_fam_buf;
#endif
static int kbody_3(void **bufs, const long long *syms) { lm_fam_buf = 0; return 10; }

typedef int (*lm_body_fn)(void **, const long long *);
static lm_body_fn lm_body[] = {kbody_0, kepi_1, kbody_2, kbody_3};
int luminal_run(void **bufs, const long long *syms) {
    int s = 0;
    for (int i = 0; i < 4; i++) s += lm_body[i](bufs, syms);
    return s;
}
"""


def _run_units(tmp_path, units, name):
    import ctypes
    import subprocess

    from luminal.codegen.toolchain import find_compiler
    cc = find_compiler()
    objects = []
    for j, text in enumerate(units):
        path = tmp_path / f"{name}{j}.c"
        path.write_text(text)
        objects.append(str(path)[:-2] + ".o")
        subprocess.run([cc, "-O1", "-fPIC", "-std=gnu11", "-c", str(path), "-o", objects[-1]], check=True,
                       capture_output=True)
    lib = str(tmp_path / f"{name}.so")
    subprocess.run([cc, "-shared", *objects, "-o", lib], check=True, capture_output=True)
    run = ctypes.CDLL(lib).luminal_run
    run.restype = ctypes.c_int
    return run(None, None)


@pytest.mark.parametrize("n", [2, 3])
def test_split_keeps_headers_macros_and_tiles_compiling(tmp_path, n):
    """Top-level preprocessor blocks between kernels (an include-guarded header repeated by each kernel of a family,
    a tuning macro's default with a comment) reach every unit; a noinline tile stays with its kernel; braces in
    comments, strings and character literals do not count. The split library computes what the whole one does."""
    units = build.split_units(_SYNTHETIC, n)
    assert units is not None and len(units) == n + 1
    assert all(u.count("#define LM_FAM") == 1 and "#define LM_TEST_A 3" in u for u in units)
    tile_unit = [u for u in units if "int kepi_1_t(int x) {" in u]
    assert len(tile_unit) == 1 and "int kepi_1(void **bufs" in tile_unit[0]
    whole = _run_units(tmp_path, [_SYNTHETIC], "whole")
    assert whole == 1 + 3 + 4 + 10
    assert _run_units(tmp_path, units, f"split{n}") == whole


def test_a_kernel_inside_a_preprocessor_block_is_not_split():
    source = _SYNTHETIC.replace("static int kbody_3(void **bufs, const long long *syms) { lm_fam_buf = 0; return 10; }",
                                "#if 1\nstatic int kbody_3(void **bufs, const long long *syms) { return 10; }\n#endif")
    assert build.split_units(source, 2) is None
