"""File-system helpers shared by every luminal writer (atomic saves in ``luminal.io``, the compiled-library
cache in ``luminal.runtime``). Imports nothing of luminal, so any layer may use it."""

from __future__ import annotations

import os
import re
import shutil


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (this process counts; one owned by another user too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries (a rename into it) to disk; best effort where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale(folder: str, pattern: re.Pattern) -> int:
    """Remove the entries of ``folder`` whose name matches ``pattern`` and whose pid (the first group that
    matched) belongs to no running process: temporaries of a killed save or compile. Returns how many."""
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        m = pattern.match(name)
        if m is None or pid_alive(int(next(g for g in m.groups() if g is not None))):
            continue
        full = os.path.join(folder, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
            removed += 1
        except OSError:
            pass
    return removed


def cache_dir() -> str:
    """Where luminal caches what it built (compiled libraries, tunings, e-graph results): ``LUMINAL_CACHE_DIR`` or
    the user cache folder (``$XDG_CACHE_HOME/luminal``, ``~/.cache/luminal``); created when missing."""
    base = os.environ.get("LUMINAL_CACHE_DIR")
    origin = f"LUMINAL_CACHE_DIR={base!r}"
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "luminal")
        origin = f"the cache folder {base!r}"
    try:
        os.makedirs(base, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(f"{origin} is not a directory (a file is in the way); expected a directory for "
                                 "the compiled-library cache (set LUMINAL_CACHE_DIR to one)") from None
    except PermissionError as err:
        raise PermissionError(f"{origin}: cannot create the compiled-library cache directory ({err.strerror}); "
                              "set LUMINAL_CACHE_DIR to a writable directory") from None
    return base
