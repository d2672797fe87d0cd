"""Building generated C into shared libraries, and the verified on-disk library cache.

* C compiler: ``$CC`` or ``cc``/``gcc`` (:func:`luminal.codegen.toolchain.find_compiler`); flags ``-O3
  -march=native -fopenmp -fno-math-errno -fno-trapping-math`` (``LUMINAL_CFLAGS`` replaces the optimization
  part).
* Cache: a shared object is keyed by a hash of source, flags and compiler and lives in ``LUMINAL_CACHE_DIR``
  (default ``$XDG_CACHE_HOME/luminal`` or ``~/.cache/luminal``) with a record (``.sig``) of its own SHA-256;
  it is loaded only when the record verifies (see :func:`build_library`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import warnings

from .._fs import cache_dir, fsync_dir as _fsync_dir, remove_stale  # noqa: F401  (cache_dir: re-exported)
from ..codegen.c import CProgram
from ..codegen.toolchain import find_compiler

BASE_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math"]


def _blas():
    """(include dir, lib dir, library name) of scipy-openblas32, or None when it is not installed."""
    try:
        import scipy_openblas32 as sob
    except ImportError:
        return None
    return sob.get_include_dir(), sob.get_lib_dir(), sob.get_library()


class CompileStats:
    """Counters for tests and benchmarks: C compilations actually run and cache hits."""
    compilations = 0
    cache_hits = 0


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified(path: str, source_hash: str) -> bool:
    """Whether the cached library at ``path`` is the one built from ``source_hash``: its record
    (``path + '.sig'``: the library's own SHA-256 and the source's) matches the file's content."""
    try:
        with open(path + ".sig") as f:
            lib_hash, src_hash = f.read().split()
        return src_hash == source_hash and _file_sha256(path) == lib_hash
    except (OSError, ValueError):
        return False


_TEMP = re.compile(r"^luminal_[0-9a-f]+\.(?:so|sig)\.tmp(\d+)$|^luminal_[0-9a-f]+\.(\d+)\.c$")


def clean_stale_temporaries(folder: str | None = None) -> int:
    """Remove temporaries of our own naming (``luminal_<key>.so.tmp<pid>``, ``luminal_<key>.<pid>.c``) left in
    the cache folder by processes that no longer run (a killed compile); returns how many were removed."""
    return remove_stale(folder or cache_dir(), _TEMP)


def build_library(cprogram: CProgram) -> str:
    """Compile ``cprogram`` to a shared object (or reuse the cached one); returns its path.

    The cache is trusted only after verification: next to each library a record (``.sig``) holds the SHA-256
    of the library file and of everything that went into it (source, compiler, flags); a library whose record
    is missing or does not match (truncated, replaced, another graph's) is rebuilt, never loaded. The library
    and its record are written to temporary names, flushed to disk (``fsync``) and renamed; temporaries of
    killed compiles are removed by the next compile."""
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC or install gcc)")
    opt = os.environ.get("LUMINAL_CFLAGS")
    flags = (opt.split() if opt else list(BASE_FLAGS)) + ["-fopenmp", "-fPIC", "-shared", "-std=gnu11"]
    link = []
    blas = _blas() if cprogram.uses_blas else None
    if blas is not None:
        inc, libdir, name = blas
        flags += [f"-I{inc}"]
        link = [f"-L{libdir}", f"-l{name}", f"-Wl,-rpath,{libdir}"]
    link.append("-lm")
    source_hash = hashlib.sha256("\0".join([cprogram.source, cc, *flags, *link]).encode()).hexdigest()
    key = source_hash[:24]
    folder = cache_dir()
    path = os.path.join(folder, f"luminal_{key}.so")
    if os.path.exists(path):
        if _verified(path, source_hash):
            CompileStats.cache_hits += 1
            return path
        if os.path.exists(path + ".sig"):  # (no record at all: a library of an older luminal, rebuilt quietly)
            warnings.warn(f"cached library {path} does not match its record (truncated, replaced or from another "
                          "graph); rebuilding it", stacklevel=3)
    clean_stale_temporaries(folder)
    pid = os.getpid()
    src = os.path.join(folder, f"luminal_{key}.{pid}.c")
    with open(src, "w") as f:
        f.write(cprogram.source)
    tmp_out, tmp_sig = f"{path}.tmp{pid}", os.path.join(folder, f"luminal_{key}.sig.tmp{pid}")
    try:
        proc = subprocess.run([cc, *flags, src, "-o", tmp_out, *link], capture_output=True, text=True)
        if proc.returncode != 0:
            kept = os.path.join(folder, f"luminal_{key}.failed.c")
            os.replace(src, kept)
            raise RuntimeError(f"C compilation failed ({cc}):\n{proc.stderr[-4000:]}\nsource kept at {kept}")
        with open(tmp_out, "rb+") as f:
            os.fsync(f.fileno())
        with open(tmp_sig, "w") as f:
            f.write(f"{_file_sha256(tmp_out)} {source_hash}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_out, path)
        os.replace(tmp_sig, path + ".sig")
        _fsync_dir(folder)
    finally:
        for leftover in (tmp_out, tmp_sig, src):
            if os.path.exists(leftover):
                os.unlink(leftover)
    CompileStats.compilations += 1
    return path
