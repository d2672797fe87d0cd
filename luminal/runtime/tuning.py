"""The on-disk tuning cache of the measured search (:mod:`luminal.runtime.search`).

One JSON file, ``tuning.json`` in :func:`luminal.runtime.cpu.cache_dir`, holds the winners of past searches:

.. code-block:: text

    {"format": 1,
     "machines": {"<machine key>": {"cpu": "...", "compiler": "...",
                                     "entries": {"<kernel key>": {"choice": "own:6x16_k256_m96_n2048",
                                                                  "seconds": 1.2e-4,
                                                                  "candidates": {"blas": 1.5e-4, ...},
                                                                  "level": "quick"}}}}}

* The **machine key** hashes the CPU model name, its feature flags, the C compiler's version and
  ``OPENBLAS_CORETYPE`` when set: a machine with another CPU, other features (AVX-512 or not), another
  compiler or another forced OpenBLAS kernel misses and searches again.
* The **kernel key** names the kernel's structure at the searched sizes (for a GEMM: dtype, M, N, K,
  operand layouts, batch); see :func:`luminal.runtime.search.gemm_key`.
* Writes go to a temporary file renamed over the old one under an exclusive lock, so a crash or two
  processes tuning at once never leave a half-written file. A file or entry that does not parse, or names a
  candidate that does not exist, is ignored (with a warning for a corrupt file) and rebuilt by the next search.
* :func:`export_tunings` / :func:`import_tunings` move tunings between machines of the same CPU (or ship
  tunings for common shapes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import tempfile
import threading
import warnings

FORMAT = 1
_lock = threading.Lock()
_machine: tuple[str, str, str] | None = None
_snapshot: tuple | None = None  # (path, file signature, this machine's valid entries): see entries()


def _cpu_description() -> tuple[str, str]:
    """(model name, space-separated sorted feature flags) of this CPU."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
                if model and flags and key == "":
                    break
    except OSError:
        pass
    return model, flags


def _compiler_version() -> str:
    from ..codegen.toolchain import find_compiler

    cc = find_compiler()
    if cc is None:
        return "none"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return cc
    return (out.splitlines() or [cc])[0].strip()


def machine() -> tuple[str, str, str]:
    """``(key, cpu model, compiler version)`` of this machine (computed once per process)."""
    global _machine
    if _machine is None:
        model, flags = _cpu_description()
        compiler = _compiler_version()
        parts = [model, flags, compiler, platform.machine()]
        coretype = os.environ.get("OPENBLAS_CORETYPE")
        if coretype:  # OpenBLAS's kernel choice changes the "blas" candidate's speed
            parts.append(f"OPENBLAS_CORETYPE={coretype}")
        key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]
        _machine = (key, model, compiler)
    return _machine


def tuning_path() -> str:
    """Where the tuning cache lives: ``tuning.json`` in the compiled-library cache folder."""
    from .build import cache_dir

    return os.path.join(cache_dir(), "tuning.json")


def _empty() -> dict:
    return {"format": FORMAT, "machines": {}}


def _valid_entry(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("choice"), str)
            and isinstance(entry.get("seconds"), (int, float)) and entry["seconds"] >= 0)


def _read(path: str, warn: bool = True) -> dict:
    """The cache file's content, or an empty cache when it is missing or corrupt."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return _empty()
    except (OSError, ValueError) as e:
        if warn:
            warnings.warn(f"tuning cache {path} is unreadable ({e}); ignoring it, the next search rebuilds it",
                          stacklevel=3)
        return _empty()
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("machines"), dict):
        if warn:
            warnings.warn(f"tuning cache {path} has an unknown layout; ignoring it, the next search rebuilds it",
                          stacklevel=3)
        return _empty()
    return data


def _write(path: str, data: dict) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tuning", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def _file_lock(path: str):
    """An exclusive lock on ``path + '.lock'`` (fcntl where available) plus this process's lock."""
    with _lock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX
            yield
            return
        with open(path + ".lock", "a") as lf:
            fcntl.flock(lf, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lf, fcntl.LOCK_UN)


def _signature(path: str):
    """What changes when the file is rewritten (every write renames a new file over it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def entries() -> dict[str, dict]:
    """This machine's valid entries (kernel key -> entry), read from the file once and kept in memory until the
    file changes (one ``stat`` per call; a write by this process or another renames a new file over it).
    Callers must not modify the returned dict."""
    global _snapshot
    path = tuning_path()
    sig = _signature(path)
    snap = _snapshot
    if snap is not None and snap[0] == path and snap[1] == sig:
        return snap[2]
    found = _read(path)["machines"].get(machine()[0], {})
    found = found.get("entries", {}) if isinstance(found, dict) else {}
    valid = {k: e for k, e in found.items() if _valid_entry(e)} if isinstance(found, dict) else {}
    _snapshot = (path, sig, valid)
    return valid


def _forget() -> None:
    global _snapshot
    _snapshot = None


def lookup(kernel_key: str, valid=None) -> dict | None:
    """The cached entry of ``kernel_key`` on this machine, or None (missing, malformed, or ``valid(entry)``
    false, e.g. a candidate name this version does not know). Through :func:`entries`: no read when the file did
    not change."""
    entry = entries().get(kernel_key)
    if entry is None or (valid is not None and not valid(entry)):
        return None
    return entry


def lookup_many(keys) -> dict[str, dict]:
    """Cached entries of several kernel keys at once (through :func:`entries`: no read when the file did not
    change); missing or malformed ones are absent."""
    found = entries()
    return {k: found[k] for k in keys if k in found}


def store(kernel_key: str, entry: dict) -> None:
    """Record a search result for ``kernel_key`` on this machine (atomic, locked read-modify-write)."""
    if not _valid_entry(entry):
        raise ValueError(f"tuning entry needs a 'choice' string and non-negative 'seconds'; got {entry!r}")
    path = tuning_path()
    with _file_lock(path):
        data = _read(path, warn=False)
        key, model, compiler = machine()
        m = data["machines"].setdefault(key, {"cpu": model, "compiler": compiler, "entries": {}})
        if not isinstance(m.get("entries"), dict):
            m["entries"] = {}
        m["entries"][kernel_key] = entry
        _write(path, data)
        _forget()


def clear() -> None:
    """Forget every tuning of this machine."""
    path = tuning_path()
    with _file_lock(path):
        data = _read(path, warn=False)
        data["machines"].pop(machine()[0], None)
        _write(path, data)
        _forget()


def export_tunings(path: str) -> int:
    """Write this machine's tunings to ``path`` (same format; any machine key may be imported on a machine of
    the same CPU and compiler). Returns the number of entries written."""
    data = _read(tuning_path())
    key = machine()[0]
    mine = data["machines"].get(key)
    out = _empty()
    if mine:
        out["machines"][key] = mine
    _write(os.path.abspath(path), out)
    return len(mine.get("entries", {})) if mine else 0


def import_tunings(path: str, overwrite: bool = False) -> int:
    """Merge the tunings in ``path`` (written by :func:`export_tunings`) into this machine's cache. Entries of
    other machine keys are kept under their own key (used only by a matching machine). Existing entries win
    unless ``overwrite``. Returns the number of entries added. Raises ``ValueError`` for a file that is not
    a tuning file."""
    try:
        with open(path) as f:
            incoming = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path} is not a tuning file (invalid JSON: {e})") from None
    if not isinstance(incoming, dict) or incoming.get("format") != FORMAT or \
            not isinstance(incoming.get("machines"), dict):
        raise ValueError(f"{path} is not a tuning file of format {FORMAT} (expected keys 'format' and 'machines')")
    added = 0
    target = tuning_path()
    with _file_lock(target):
        data = _read(target, warn=False)
        for mkey, m in incoming["machines"].items():
            if not isinstance(m, dict) or not isinstance(m.get("entries"), dict):
                continue
            dst = data["machines"].setdefault(mkey, {"cpu": m.get("cpu", "?"), "compiler": m.get("compiler", "?"),
                                                     "entries": {}})
            for k, entry in m["entries"].items():
                if _valid_entry(entry) and (overwrite or k not in dst["entries"]):
                    dst["entries"][k] = entry
                    added += 1
        _write(target, data)
        _forget()
    return added
