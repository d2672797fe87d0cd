"""The compiled-library cache is verified before a library is loaded (issue 19, part 1): truncated, replaced or
garbage libraries are rebuilt, never loaded; temporaries of killed compiles are cleaned; a failed C
compilation is not retried on every execute(). Oracle: numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import build as cpu
from luminal.runtime.cpu import CompileStats, find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    return tmp_path


def exp_graph(c: float):
    cx = lm.Graph()
    x = cx.tensor(3).set(np.array([0.0, 1.0, 2.0], np.float32))
    y = (x * c).exp().retrieve()
    return cx, y


def compiled(c: float):
    cx, y = exp_graph(c)
    cx.compile(device="cpu")
    cx.execute()
    return cx, y


def replace_file(path, data: bytes):
    """Put ``data`` at ``path`` as a new file (this process may have the old library mapped: writing into that
    inode would crash it; a later process opening the path sees the new content)."""
    tmp = str(path) + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def expected(c: float):
    return np.exp(np.array([0.0, 1.0, 2.0]) * c)


def test_library_has_a_matching_record(cache):
    cx, y = compiled(6.0)
    path = cx.runtime.library_path
    assert os.path.exists(path + ".sig")
    lib_hash, src_hash = open(path + ".sig").read().split()
    assert lib_hash == cpu._file_sha256(path)
    assert not [n for n in os.listdir(cache) if ".tmp" in n or n.endswith(".c")]


def test_truncated_library_is_rebuilt_not_loaded(cache):
    cx, _ = compiled(6.0)
    path = cx.runtime.library_path
    replace_file(path, open(path, "rb").read()[:100])
    builds = CompileStats.compilations
    with pytest.warns(UserWarning, match="does not match its record"):
        cx2, y2 = compiled(6.0)
    assert CompileStats.compilations == builds + 1
    np.testing.assert_allclose(y2.data(), expected(6.0), rtol=1e-5)


def test_another_graphs_library_under_the_name_is_rebuilt(cache):
    a, _ = compiled(6.0)
    b, _ = compiled(8.0)
    assert a.runtime.library_path != b.runtime.library_path
    replace_file(a.runtime.library_path, open(b.runtime.library_path, "rb").read())  # exp(8x) as exp(6x)
    with pytest.warns(UserWarning, match="does not match its record"):
        cx, y = compiled(6.0)
    np.testing.assert_allclose(y.data(), expected(6.0), rtol=1e-5)


def test_garbage_library_without_record_is_rebuilt(cache):
    cx, _ = compiled(6.0)
    path = cx.runtime.library_path
    os.unlink(path + ".sig")
    replace_file(path, b"not an ELF file")
    cx2, y2 = compiled(6.0)  # rebuilt (quietly: no record, as a library of an older version)
    np.testing.assert_allclose(y2.data(), expected(6.0), rtol=1e-5)
    assert cpu._verified(path, open(path + ".sig").read().split()[1])


def test_stale_temporaries_of_dead_processes_are_removed(cache):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    names = [f"luminal_abc123.so.tmp{dead}", f"luminal_abc123.{dead}.c", f"luminal_abc123.sig.tmp{dead}"]
    for n in names:
        (cache / n).write_text("partial")
    mine = cache / f"luminal_abc123.so.tmp{os.getpid()}"  # a live process's temporary stays
    mine.write_text("in progress")
    other = cache / "notes.txt"  # not our naming: never touched
    other.write_text("keep")
    assert cpu.clean_stale_temporaries(str(cache)) == 3
    assert mine.exists() and other.exists()
    assert not any((cache / n).exists() for n in names)


def test_failed_compilation_is_not_retried_on_every_execute(cache, monkeypatch):
    cx, y = exp_graph(2.0)
    monkeypatch.setenv("LUMINAL_CFLAGS", "-O2 --this-flag-does-not-exist")
    calls = []
    real = subprocess.run

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)
    monkeypatch.setattr(cpu.subprocess, "run", counting)
    with pytest.raises(RuntimeError, match="C compilation failed"):
        cx.compile(device="cpu")
    n = len(calls)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="failed to build for device 'cpu'"):
            cx.execute()
    assert len(calls) == n  # no new compiler run
    kept = [p for p in os.listdir(cache) if p.endswith(".failed.c")]
    assert len(kept) == 1
    monkeypatch.delenv("LUMINAL_CFLAGS")
    cx.compile(device="cpu")  # an explicit compile tries again
    cx.execute()
    np.testing.assert_allclose(y.data(), expected(2.0), rtol=1e-5)
