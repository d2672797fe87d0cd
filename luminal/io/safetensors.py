"""Safetensors load/save (through the ``safetensors`` package).

* ``save_safetensors(module_or_state, path)`` saves through :func:`luminal.io.atomic.atomic_save`: a
  temporary next to ``path`` renamed over it (an interrupted save never leaves a half-written checkpoint, and
  the next save removes its temporary), fsync'ed, with the permissions of a plain ``open`` (umask), refusing a
  read-only destination, writing through a symlink.
* ``load_safetensors(path, dtype=None, names=None)`` reads lazily through ``safe_open`` (memory-mapped: only the
  requested tensors are read) and can convert floating tensors to ``dtype``.
* ``load_into(module, path)`` loads a checkpoint into a module by PyTorch-compatible names — a file saved
  from a PyTorch model (``safetensors.torch.save_file(model.state_dict(), path)``) loads into the matching
  luminal module.

Corrupt or truncated files raise ``ValueError`` naming the file; a directory ``IsADirectoryError``.
"""

from __future__ import annotations

import errno
import os

import numpy as np

from ..dtype import as_dtype
from ..module import Module
from .atomic import atomic_save


def _state(obj) -> dict:
    if isinstance(obj, Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        return {k: np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v) for k, v in obj.items()}
    raise TypeError(f"expected a Module or a dict of arrays, got {type(obj).__name__}")


def save_safetensors(obj, path, metadata: dict | None = None) -> None:
    """Save a module's state dict (or a dict of arrays) to ``path`` atomically and durably (see the module
    docstring)."""
    from safetensors.numpy import save_file

    state = {k: np.ascontiguousarray(v) for k, v in _state(obj).items()}
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    # the library writes its own temporary next to the file: inside our temporary folder, cleaned if killed
    atomic_save(path, lambda tmp: save_file(state, tmp, metadata=meta))


def load_safetensors(path, dtype=None, names=None) -> dict[str, np.ndarray]:
    """Read tensors from a safetensors file (all, or ``names``); floating tensors cast to ``dtype`` if given."""
    from safetensors import safe_open

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no safetensors file at {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{path!r} is a directory; expected a safetensors file")
    target = as_dtype(dtype).numpy if dtype is not None else None
    out = {}
    try:
        with safe_open(path, framework="np") as f:
            keys = list(f.keys()) if names is None else list(names)
            available = set(f.keys())
            missing = [k for k in keys if k not in available]
            if missing:
                raise KeyError(f"{path}: no tensors named {missing}")
            for k in keys:
                arr = f.get_tensor(k)
                if target is not None and arr.dtype.kind == "f":
                    arr = arr.astype(target)
                out[k] = arr
    except KeyError:
        raise
    except Exception as err:  # the safetensors package raises its own error types for corrupt headers/data
        raise ValueError(f"cannot read safetensors file {path!r}: {err} (expected a complete safetensors file; "
                         "is it truncated or corrupt?)") from err
    return out


def load_into(module: Module, path, strict: bool = True) -> tuple[list[str], list[str]]:
    """Load a safetensors checkpoint into ``module`` by name; see :meth:`Module.load_state_dict`."""
    return module.load_state_dict(load_safetensors(path), strict=strict)
