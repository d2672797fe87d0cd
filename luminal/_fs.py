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
