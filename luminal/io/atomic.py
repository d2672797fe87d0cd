"""Atomic, durable file saves, shared by every luminal writer (safetensors weights, ``.npz`` checkpoints, exports).

``atomic_save(path, write)`` calls ``write(tmp)`` to produce the file at a temporary path next to the
destination, then renames it over the destination, so a crash or a kill at any moment leaves either the old
file or the new one, never a mix:

* The temporary is a folder ``.<name>.luminal-tmp.<pid>.<random>`` in the destination's folder holding the
  file (and any temporaries of the library that writes it). Those of processes that no longer run (a killed
  save) are removed by the next save to the same folder (:func:`clean_stale_temporaries`).
* The file is flushed to disk (``fsync``) before the rename, and the folder after it.
* Permissions are those a plain ``open(path, "w")`` gives: ``0666 & ~umask`` for a new file, the replaced
  file's mode otherwise.
* A read-only destination is refused with ``PermissionError`` (as ``open(path, "wb")`` and ``torch.save`` do),
  a directory with ``IsADirectoryError``; a symlink is written through (its target is replaced, the link stays).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from typing import Callable

from .._fs import fsync_dir as _fsync_dir, remove_stale

__all__ = ["atomic_save", "clean_stale_temporaries"]

_TEMP = re.compile(r"^\..*\.luminal-tmp\.(\d+)\.[A-Za-z0-9_]+$")


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # (not thread-safe, hence /proc first)
    os.umask(old)
    return old


def clean_stale_temporaries(folder: str) -> int:
    """Remove save temporaries (``.<name>.luminal-tmp.<pid>.<random>``) of processes that no longer run from
    ``folder``; returns how many were removed."""
    return remove_stale(folder, _TEMP)


def atomic_save(path, write: Callable[[str], None], make_dirs: bool = False) -> str:
    """Write a file through ``write(tmp_path)`` and move it to ``path`` atomically and durably (see the module
    docstring); returns the path written (a symlink's target). ``make_dirs`` creates missing parent folders."""
    path = os.fspath(path)
    target = os.path.realpath(path)  # through symlinks: the link stays, its target gets the new content
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, f"cannot save to {path!r}: it is a directory; expected a file path")
    folder, name = os.path.split(target)
    if os.path.exists(target):
        st = os.stat(target)
        if not st.st_mode & 0o222 or not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, f"cannot save to {path!r}: the file is read-only (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}); expected a writable file (make it writable or "
                                  "save elsewhere)")
        mode = stat.S_IMODE(st.st_mode)
    else:
        mode = 0o666 & ~_umask()
    if make_dirs:
        os.makedirs(folder, exist_ok=True)
    elif not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, f"cannot save to {path!r}: the folder {folder!r} does not exist")
    clean_stale_temporaries(folder)
    try:
        tmp_dir = tempfile.mkdtemp(prefix=f".{name}.luminal-tmp.{os.getpid()}.", dir=folder)
    except PermissionError:
        raise PermissionError(errno.EACCES,
                              f"cannot save to {path!r}: the folder {folder!r} is not writable") from None
    tmp = os.path.join(tmp_dir, name)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    _fsync_dir(folder)
    return target
