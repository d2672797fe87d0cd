"""Building generated C into shared libraries, and the verified on-disk library cache.

* C compiler: ``$CC`` or ``cc``/``gcc`` (:func:`luminal.codegen.toolchain.find_compiler`); flags ``-O3
  -march=native -fopenmp -fno-math-errno -fno-trapping-math`` (``LUMINAL_CFLAGS`` replaces the optimization
  part).
* Cache: a shared object is keyed by a hash of source, flags and compiler and lives in ``LUMINAL_CACHE_DIR``
  (default ``$XDG_CACHE_HOME/luminal`` or ``~/.cache/luminal``) with a record (``.sig``) of its own SHA-256;
  it is loaded only when the record verifies (see :func:`build_library`).
* Time limit: a compile that runs past :func:`compile_timeout` seconds (``LUMINAL_CC_TIMEOUT``, default
  :data:`CC_TIMEOUT_S`; less inside :func:`compile_deadline`, which the searches use so that a candidate's
  compile cannot outlast their budget) is killed and raises :class:`CompileTimeout`; nothing of it stays in
  the cache folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import subprocess
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from .._fs import cache_dir, fsync_dir as _fsync_dir, remove_stale  # noqa: F401  (cache_dir: re-exported)
from ..codegen.c import CProgram
from ..codegen.toolchain import find_compiler

BASE_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math"]
CC_TIMEOUT_S = 900.0  # a C compile's time limit when LUMINAL_CC_TIMEOUT is not set (the largest programs take ~30 s)
# a search's candidate compile may take what is left of the search's budget, but at least this: a cold compile on
# a loaded machine takes seconds, and a budget is no reason to throw away most of a compile (the limit is there
# for compiles that would never end)
SEARCH_COMPILE_FLOOR_S = 30.0


class CompileTimeout(RuntimeError):
    """A C compile ran past its time limit and was killed (:func:`compile_timeout`)."""


_limits = threading.local()  # this thread's compile deadline (compile_deadline), as time.monotonic()


def compile_timeout() -> float | None:
    """Seconds a C compile started now in this thread may take: ``LUMINAL_CC_TIMEOUT`` (a positive number; ``0``:
    no limit; default :data:`CC_TIMEOUT_S`), or less inside :func:`compile_deadline`; None: no limit."""
    raw = os.environ.get("LUMINAL_CC_TIMEOUT", "").strip()
    try:
        limit = float(raw) if raw else CC_TIMEOUT_S
    except ValueError:
        limit = -1.0
    if not limit >= 0 or limit == float("inf"):
        raise ValueError(f"LUMINAL_CC_TIMEOUT={raw!r}: expected a positive number of seconds (0: no limit)")
    limit = limit or None
    deadline = getattr(_limits, "deadline", None)
    if deadline is not None:
        left = max(deadline - time.monotonic(), 1e-3)
        limit = left if limit is None else min(limit, left)
    return limit


@contextlib.contextmanager
def compile_deadline(seconds: float | None):
    """Within the block, C compiles started by this thread must finish within ``seconds`` from now (nested blocks
    keep the earlier deadline; None: no deadline of its own); one that would not is killed
    (:class:`CompileTimeout`)."""
    prev = getattr(_limits, "deadline", None)
    mine = None if seconds is None else time.monotonic() + seconds
    _limits.deadline = prev if mine is None else mine if prev is None else min(prev, mine)
    try:
        yield
    finally:
        _limits.deadline = prev


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
    split_compilations = 0  # of which compiled as parallel translation units (split_units)
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


_KEY_LOCKS: dict = {}
_KEY_LOCKS_GUARD = threading.Lock()


def _fresh_locks() -> None:
    """In a forked child: new build locks (a lock that a thread of the parent held when it forked, e.g. a
    :func:`prebuild` still compiling, would stay held forever in the child, where that thread does not exist)."""
    global _KEY_LOCKS, _KEY_LOCKS_GUARD
    _KEY_LOCKS, _KEY_LOCKS_GUARD = {}, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks)


def build_program(cprogram: CProgram) -> tuple[str, list[str]]:
    """Build ``cprogram`` and the libraries of its parts (:mod:`luminal.codegen.library`), concurrently, each
    cached and verified by :func:`build_library`; returns ``(program path, [part paths])``."""
    timeout = compile_timeout()  # (this thread's deadline, for the pool's threads too)
    if not cprogram.parts:
        return build_library(cprogram, timeout), []
    units = [cprogram, *(CProgram(p.source, [], [], cprogram.uses_blas) for p in cprogram.parts)]
    with ThreadPoolExecutor(max_workers=min(len(units), max(1, _cores()))) as pool:
        paths = list(pool.map(lambda unit: build_library(unit, timeout), units))
    return paths[0], paths[1:]


def load_program(cprogram: CProgram, path: str, part_paths: list[str]):
    """Load a built program (``ctypes.CDLL``) and link its parts' entry points into it (``luminal_link``);
    returns ``(library, [part libraries])`` (keep the parts referenced as long as the program)."""
    lib = ctypes.CDLL(path)
    parts = [ctypes.CDLL(p) for p in part_paths]
    if cprogram.parts:
        fns = []
        for part, plib in zip(cprogram.parts, parts):
            table = (ctypes.c_void_p * len(part.functions)).in_dll(plib, "luminal_functions")
            fns += list(table)
        if len(parts) != len(cprogram.parts) or not all(fns):
            raise RuntimeError(f"{path}: its libraries ({[p.key for p in cprogram.parts]}) did not load")
        link = lib.luminal_link
        link.restype = None
        link.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        link((ctypes.c_void_p * len(fns))(*fns))
    return lib, parts


def release_scratch(libraries) -> None:
    """Free the per-thread scratch of each loaded library (its ``luminal_release()``: every thread of this
    thread's OpenMP team frees its own; the kernels grow it again on demand), for libraries that will not run
    for a while: a search's candidates and measuring programs. Libraries built before it existed are skipped."""
    for lib in libraries:
        fn = getattr(lib, "luminal_release", None)
        if fn is not None:
            fn.restype = None
            fn()
    trim_heap()


def trim_heap() -> None:
    """Return the C heap's free memory to the OS where the C library can (glibc's ``malloc_trim``): after a
    search stage frees its buffers, glibc kept them (a searched W4 held 200 MB more, and the next stage's peak
    stacked on it). Elsewhere nothing happens."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
            _MALLOC_TRIM.restype, _MALLOC_TRIM.argtypes = ctypes.c_int, [ctypes.c_size_t]
        except (AttributeError, OSError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


def _signature(cprogram: CProgram, cc: str) -> tuple[list, list, str, str]:
    """``(compile flags, link flags, source hash, cache key)`` of building ``cprogram`` with ``cc``."""
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
    return flags, link, source_hash, source_hash[:24]


def prebuild(cprogram: CProgram) -> threading.Thread | None:
    """Start :func:`build_library` of ``cprogram`` in a daemon thread when its library is not cached yet (else, or
    without a C compiler, None). A later build of the same source waits for it (the per-key lock) and then finds
    it cached; a failure here is left to that build to report."""
    cc = find_compiler()
    if cc is None:
        return None
    _, _, source_hash, key = _signature(cprogram, cc)
    path = os.path.join(cache_dir(), f"luminal_{key}.so")
    if os.path.exists(path) and _verified(path, source_hash):
        return None

    def work():
        try:
            build_library(cprogram)
        except Exception:  # noqa: BLE001 - the program's own build of this part raises it again, with context
            pass

    thread = threading.Thread(target=work, name=f"luminal-prebuild-{key}", daemon=True)
    thread.start()
    return thread


_NOW = object()  # build_library's default timeout: compile_timeout() at the call


def build_library(cprogram: CProgram, timeout=_NOW) -> str:
    """Compile ``cprogram`` to a shared object (or reuse the cached one) within ``timeout`` seconds (default
    :func:`compile_timeout`; None: no limit, else :class:`CompileTimeout`); returns its path.

    The cache is trusted only after verification: next to each library a record (``.sig``) holds the SHA-256
    of the library file and of everything that went into it (source, compiler, flags); a library whose record
    is missing or does not match (truncated, replaced, another graph's) is rebuilt, never loaded. The library
    and its record are written to temporary names, flushed to disk (``fsync``) and renamed; temporaries of
    killed compiles are removed by the next compile."""
    cc = find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC or install gcc)")
    flags, link, source_hash, key = _signature(cprogram, cc)
    timeout = compile_timeout() if timeout is _NOW else timeout
    with _KEY_LOCKS_GUARD:  # one build of a key at a time in this process (the temporaries are named by pid)
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        return _build(cprogram, cc, flags, link, source_hash, key, timeout)


def _build(cprogram: CProgram, cc: str, flags: list, link: list, source_hash: str, key: str,
           timeout: float | None = None) -> str:
    folder = cache_dir()
    path = os.path.join(folder, f"luminal_{key}.so")
    if os.path.exists(path):
        if _verified(path, source_hash):
            CompileStats.cache_hits += 1
            return path
        if os.path.exists(path + ".sig"):  # (no record at all: a library of an older luminal, rebuilt quietly)
            warnings.warn(f"cached library {path} does not match its record (truncated, replaced or from another "
                          "graph); rebuilding it", stacklevel=4)
    clean_stale_temporaries(folder)
    pid = os.getpid()
    src = os.path.join(folder, f"luminal_{key}.{pid}.c")
    with open(src, "w") as f:
        f.write(cprogram.source)
    tmp_out, tmp_sig = f"{path}.tmp{pid}", os.path.join(folder, f"luminal_{key}.sig.tmp{pid}")
    units = split_units(cprogram.source, _parallel_units(cprogram.source))
    unit_files = [os.path.join(folder, f"luminal_{key}.{pid}.u{j}.c") for j in range(len(units or ()))]
    try:
        try:
            if units is None:
                proc = subprocess.run([cc, *flags, src, "-o", tmp_out, *link], capture_output=True, text=True,
                                      timeout=timeout)
            else:
                proc = _compile_units(cc, flags, link, units, unit_files, tmp_out, timeout)
        except subprocess.TimeoutExpired:
            raise CompileTimeout(f"C compilation of {os.path.basename(path)} ({len(cprogram.source) >> 10} KB of "
                                 f"C) did not finish within {timeout:.3g} s and was stopped (LUMINAL_CC_TIMEOUT sets "
                                 f"the limit, default {CC_TIMEOUT_S:.0f} s; a search's candidate gets what is left "
                                 "of the search's budget)") from None
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
        for leftover in (tmp_out, tmp_sig, src, *unit_files, *(u[:-2] + ".o" for u in unit_files)):
            if os.path.exists(leftover):
                os.unlink(leftover)
    CompileStats.compilations += 1
    if units is not None:
        CompileStats.split_compilations += 1
    return path


# ---------------------------------------------------------------------------------------------- parallel units
# source per translation unit below which splitting is not worth a unit's prelude (2026-11-29, 2-core Zen 4, gcc 12:
# the MNIST CNN's training step, 176 KB, 1.7 -> 1.0 s in two units; ResNet-18's inference, 275 KB, 3.2 -> 1.8 s)
UNIT_BYTES = 80 << 10


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _parallel_units(source: str) -> int:
    """How many translation units to compile ``source`` in: one per core, and at most one per ``UNIT_BYTES`` of
    kernel code (each unit compiles the shared prelude again). ``LUMINAL_CC_JOBS`` caps it (1: never split)."""
    jobs = os.environ.get("LUMINAL_CC_JOBS", "")
    cap = _cores()
    if jobs:
        if not jobs.isdigit() or int(jobs) < 1:
            raise ValueError(f"LUMINAL_CC_JOBS={jobs!r}: expected a positive integer (parallel C compiler jobs)")
        cap = int(jobs)
    return max(1, min(cap, len(source) // UNIT_BYTES))


_FIRST = re.compile(r"^static int (?:kbody|kepi)_\d+\(", re.M)  # where the kernel section starts
_TAIL = "\ntypedef int (*lm_body_fn)"  # where it ends: the dispatch tables and luminal_run (codegen.c._dispatch)
# any top-level static definition, its name (after any __attribute__((...)): a noinline register tile's)
_TOP = re.compile(r"^static\b(?:\s*__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))*[^;{=(\[]*?\b(\w+)\s*[(\[=;]", re.M)
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _hoist_headers(section: str) -> tuple[str, list[str]] | None:
    """``section`` without its top-level preprocessor conditional blocks (``#if`` / ``#ifdef`` / ``#ifndef`` ...
    ``#endif``: the include-guarded header a kernel family writes before its first kernel, e.g. the direct
    convolution's per-thread buffers, or a tuning macro's default), and those blocks (an include guard's first
    occurrence only). Every translation unit needs them before its kernels, so they go to the prelude (a unit
    then keeps its own copy of a header's ``static`` buffers). None when such a block holds a kernel function
    (the section cannot be split safely)."""
    out, blocks, seen = [], [], set()
    lines = section.split("\n")
    depth, comment, i = 0, False, 0
    while i < len(lines):
        line = lines[i]
        if depth == 0 and not comment and line.startswith(("#if ", "#ifdef ", "#ifndef ")):
            nest, j = 0, i
            while j < len(lines):  # to the #endif that closes it
                d = lines[j].lstrip()
                nest += d.startswith(("#if ", "#ifdef ", "#ifndef ")) - d.startswith("#endif")
                if nest == 0:
                    break
                j += 1
            block = "\n".join(lines[i:j + 1])
            if _FIRST.search(block):  # (a kernel function)
                return None
            guard = re.match(r"#ifndef (\w+)[^\n]*\n#define \1\b", block)
            key = guard.group(1) if guard else block
            if key not in seen:
                seen.add(key)
                blocks.append(block)
            i = j + 1
            continue
        out.append(line)
        code = line
        if comment:  # inside a /* ... */ that began on an earlier line
            end = code.find("*/")
            code, comment = ("", True) if end < 0 else (code[end + 2:], False)
        code = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|/\*.*?\*/|//.*', "", code)
        if "/*" in code:
            code, comment = code[:code.index("/*")], True
        depth += code.count("{") - code.count("}")
        i += 1
    return "\n".join(out), blocks


def split_units(source: str, n: int) -> list[str] | None:
    """``source`` (a rendered program: prelude, kernel functions, then the dispatch tables and ``luminal_run``) as
    ``n`` translation units that link into the same library, or None when it is not worth splitting (``n < 2``,
    too few kernels).

    Every unit starts with the prelude (helpers, GEMM code: ``static``, so each unit keeps what it calls). Kernel
    functions that reference one another (a shared body and its epilogue) stay together: the groups (any
    top-level ``static`` definitions that name one another) are dealt to the kernel units largest first. The
    bodies that the dispatch table names become hidden (library-internal) external functions; the last unit holds
    the tables and ``luminal_run``, with their prototypes."""
    if n < 2:
        return None
    first = _FIRST.search(source)
    tail_at = source.find(_TAIL)
    if first is None or tail_at < first.start():
        return None
    prelude, section, tail = source[:first.start()], source[first.start():tail_at], source[tail_at:]
    hoisted = _hoist_headers(section)
    if hoisted is None:
        return None
    section, headers = hoisted
    prelude += "".join(h + "\n" for h in headers)
    starts = [m.start() for m in _TOP.finditer(section)]
    funcs = [section[a:b] for a, b in zip(starts, starts[1:] + [len(section)])]
    if len(funcs) < 2:
        return None
    names = [_TOP.match(f).group(1) for f in funcs]
    index = {name: j for j, name in enumerate(names)}
    parent = list(range(len(funcs)))

    def find(j):
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    for j, f in enumerate(funcs):
        for word in set(_WORD.findall(f)):
            other = index.get(word)
            if other is not None:
                parent[find(j)] = find(other)
    clusters: dict[int, list[int]] = {}
    for j in range(len(funcs)):
        clusters.setdefault(find(j), []).append(j)
    groups = sorted(clusters.values(), key=lambda g: (-sum(len(funcs[j]) for j in g), g[0]))
    n = min(n, len(groups))
    if n < 2:
        return None
    bins: list[list[int]] = [[] for _ in range(n)]
    sizes = [0] * n
    for g in groups:
        b = min(range(n), key=lambda i: (sizes[i], i))
        bins[b] += g
        sizes[b] += sum(len(funcs[j]) for j in g)
    shared = [name for name in sorted(set(_WORD.findall(tail))) if name in index]  # what the tail calls
    hidden = '__attribute__((visibility("hidden"))) '
    units = []
    for b in bins:
        texts = []
        for j in sorted(b):
            f = funcs[j]
            if names[j] in shared:
                f = f.replace("static ", hidden, 1)
            texts.append(f)
        units.append(prelude + "\n".join(texts))
    protos = "\n".join(f"{hidden}int {name}(void **bufs, const long long *syms);" for name in shared)
    units.append(prelude + protos + "\n" + tail)
    return units


class _Result:  # what _compile_units reports, shaped like subprocess.CompletedProcess
    def __init__(self, returncode: int, stderr: str):
        self.returncode, self.stderr = returncode, stderr


def _compile_units(cc: str, flags: list[str], link: list[str], units: list[str], files: list[str], out: str,
                   timeout: float | None = None):
    """Compile the units to objects concurrently, then link them into ``out``, all within ``timeout`` seconds
    (else every compiler still running is killed and ``subprocess.TimeoutExpired`` raised)."""
    end = None if timeout is None else time.monotonic() + timeout
    left = lambda: None if end is None else max(end - time.monotonic(), 1e-3)  # noqa: E731
    objects = [f[:-2] + ".o" for f in files]
    unit_flags = [f for f in flags if f != "-shared"]
    procs = []
    try:
        for text, path, obj in zip(units, files, objects):
            with open(path, "w") as f:
                f.write(text)
            procs.append(subprocess.Popen([cc, *unit_flags, "-c", path, "-o", obj], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        errors = []
        for p in procs:
            _, err = p.communicate(timeout=left())
            if p.returncode != 0:
                errors.append(err)
    finally:
        for p in procs:  # (a timeout or an interrupt: no compiler outlives the build)
            if p.poll() is None:
                p.kill()
                p.communicate()
    if errors:
        return _Result(1, "\n".join(errors))
    proc = subprocess.run([cc, *flags, *objects, "-o", out, *link], capture_output=True, text=True, timeout=left())
    return _Result(proc.returncode, proc.stderr)
