"""Per-thread scratch of generated libraries and its release (``luminal.codegen.c_support.with_release``,
``luminal.runtime.build.release_scratch``).

Kernels keep their scratch (GEMM packing buffers, the direct convolution's copy, row-local buffers) per thread and
library, grown on demand; a search loads dozens of libraries that never run again, so each library exports
``luminal_release()`` and the searches call it. Oracles: the library's own source (every per-thread buffer has a
release), glibc's allocator statistics (the bytes in use fall), the same program's result before the release.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import luminal as lm
import luminal.nn.functional as F
from luminal.runtime import build
from luminal.training import grad


pytestmark = pytest.mark.usefixtures("fresh_cache")


def _conv_step(batch=4):
    """A 3x3 convolution of 16 channels (the direct kernel, Winograd), a product (the own GEMM) and a softmax
    over wide rows (row-local scratch), with both gradients of the convolution."""
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor((batch, 16, 16, 16)).set(rng.standard_normal((batch, 16, 16, 16)).astype(np.float32))
    w = cx.tensor((16, 16, 3, 3)).set(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1)
    m = cx.tensor((256, 256)).set(rng.standard_normal((256, 256)).astype(np.float32) * 0.05)
    y = F.conv2d(x, w, padding=1)
    h = y.reshape((batch * 16, 256)) @ m
    loss = (h.softmax(-1) * h).sum()
    outs = [y, h, *grad(loss, [x, w])]
    for t in outs:
        t.retrieve()
    return cx, outs


def _released_names(source: str) -> set[str]:
    """The per-thread variables the source's ``luminal_release`` frees (through the ``lm_release_*`` it calls)."""
    entry = re.search(r"void luminal_release\(void\) \{(.*?)\n\}", source, re.S)
    assert entry, "no luminal_release in the library"
    called = set(re.findall(r"(\w+)\(\);", entry.group(1)))
    freed = set()
    for name in called:
        body = re.search(r"void " + name + r"\(void\) \{(.*?)\n\}", source, re.S)
        assert body, name
        freed |= set(re.findall(r"free\((\w+)", body.group(1)))
    return freed


def test_every_per_thread_buffer_has_a_release():
    cx, _ = _conv_step()
    cx.compile(device="cpu")
    cx.execute()
    source = cx.runtime.source
    declared = set()
    for line in re.findall(r"^.*__thread\s+void\s*\*.*;$", source, re.M):
        declared |= set(re.findall(r"\*\s*(\w+)", line))
    assert {"lm_og_abuf", "lm_dc_buf", "lm_row_p"} <= declared  # (this program uses the three families)
    assert declared <= _released_names(source), declared - _released_names(source)


def _in_use() -> int:
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        pytest.skip("glibc's mallinfo2 is needed to count the bytes in use")
    fn.restype = MallInfo2
    info = fn()
    return info.uordblks + info.hblkhd


def test_release_frees_the_scratch_and_the_program_runs_again():
    cx, outs = _conv_step(batch=16)
    cx.compile(device="cpu")
    cx.execute()
    first = [t.data().copy() for t in outs]
    before = _in_use()
    cx.runtime.release_scratch()
    after = _in_use()
    # the direct convolution's copy alone is 16 x 16 x 18 x 18 float32 (1.3 MB) per thread that ran it
    assert before - after >= 1 << 20, (before, after)
    cx.execute()  # (scratch grown again on demand)
    for a, t in zip(first, outs):
        np.testing.assert_array_equal(t.data(), a)


def test_searches_release_the_libraries_they_load(monkeypatch):
    """Every library a search loads (its GEMM candidates, each operand-fusion measurement, the e-graph's candidate
    programs) is released; the program that runs afterwards is not."""
    from luminal.runtime import cpu, search

    loaded, released = [], []
    real_load, real_release = build.load_program, build.release_scratch

    def load(*args, **kw):
        lib, parts = real_load(*args, **kw)
        loaded.extend([lib, *parts])
        return lib, parts

    class Bench(search._BenchLibrary):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            loaded.append(self.lib)

    def release(libs):
        released.extend(libs)
        real_release(libs)
    monkeypatch.setattr(build, "load_program", load)
    monkeypatch.setattr(cpu, "load_program", load)
    monkeypatch.setattr(search, "_BenchLibrary", Bench)
    monkeypatch.setattr(build, "release_scratch", release)
    monkeypatch.setattr(cpu, "release_scratch", release)
    cx, outs = _conv_step()
    cx.compile(device="cpu", search="quick", budget_s=3)
    cx.execute()
    final = {id(cx.runtime._lib), *map(id, cx.runtime._parts)}
    searched = [lib for lib in loaded if id(lib) not in final]
    assert len(searched) >= 3 and any(isinstance(lib, ctypes.CDLL) for lib in searched)
    assert not [lib for lib in searched if all(lib is not r for r in released)]
    assert not final & set(map(id, released))


def test_release_from_another_thread_while_the_program_runs():
    """``luminal_release`` frees the scratch of the calling thread's OpenMP team only: releasing from one thread
    while another runs the same library in a loop never changes a result (nor crashes)."""
    import threading

    cx, outs = _conv_step()
    cx.compile(device="cpu")
    cx.execute()
    want = [t.data().copy() for t in outs]
    stop, errors = threading.Event(), []

    def run():
        try:
            for _ in range(30):
                cx.execute()
                for a, t in zip(want, outs):
                    np.testing.assert_array_equal(t.data(), a)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
        finally:
            stop.set()

    worker = threading.Thread(target=run)
    worker.start()
    releases = 0
    while not stop.is_set():
        cx.runtime.release_scratch()
        releases += 1
    worker.join()
    assert not errors, errors[0]
    assert releases > 0
