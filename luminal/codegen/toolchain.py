"""The system C toolchain as the code generators see it: which compiler, and what it targets."""

from __future__ import annotations

import os
import shutil


def find_compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc`` or ``gcc`` on PATH; None when there is none."""
    for candidate in (os.environ.get("CC"), "cc", "gcc"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None
