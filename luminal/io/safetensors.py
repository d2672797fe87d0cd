"""Safetensors load/save (through the ``safetensors`` package).

* ``save_safetensors(module_or_state, path)`` saves through :func:`luminal.io.atomic.atomic_save`: a
  temporary next to ``path`` renamed over it (an interrupted save never leaves a half-written checkpoint, and
  the next save removes its temporary), fsync'ed, with the permissions of a plain ``open`` (umask), refusing a
  read-only destination, writing through a symlink.
* ``load_safetensors(path, dtype=None, names=None)`` reads lazily through ``safe_open`` (memory-mapped: only the
  requested tensors are read) and can convert floating tensors to ``dtype``. File dtypes: ``F32 F64 F16`` and
  the integer/bool types numpy holds (``I8 U8 I16 U16 I32 U32 I64 U64 BOOL``) come back as those numpy dtypes;
  ``BF16`` (most Hugging Face checkpoints) is widened to float32 exactly (a 16-bit shift, pure numpy, no torch),
  or kept as ``ml_dtypes.bfloat16`` arrays (``keep_bfloat16=True`` or ``dtype="bfloat16"``) for
  ``luminal.bfloat16`` tensors.
  Other dtypes (``F8_*``, ``F4`` ...) raise :class:`UnsupportedDTypeError` naming the file, the tensor and the
  dtypes that can be read. :func:`safetensors_header` lists names, file dtypes and shapes without reading data.
* ``save_safetensors(..., dtype="bfloat16")`` rounds floating tensors to bfloat16 with round-to-nearest-even
  (as ``torch.Tensor.to(torch.bfloat16)``: float64 goes through float32 first; NaN stays NaN, sign kept,
  payload canonicalised to a quiet NaN) and writes ``BF16`` tensors; ``dtype="float16"``/``"float32"``/...
  casts floating tensors with numpy. Integer and bool tensors are written as they are; ``ml_dtypes.bfloat16``
  arrays (the data of ``luminal.bfloat16`` tensors) are written as ``BF16`` bit for bit.
* ``load_into(module, path)`` loads a checkpoint into a module by PyTorch-compatible names — a file saved
  from a PyTorch model (``safetensors.torch.save_file(model.state_dict(), path)``) loads into the matching
  luminal module.

Corrupt or truncated files raise ``ValueError`` naming the file; a directory ``IsADirectoryError``.
"""

from __future__ import annotations

import errno
import json
import os
import struct

import numpy as np

from ..dtype import BFLOAT16_NUMPY, DType, as_dtype, to_host
from ..module import Module
from .atomic import atomic_save


def _state(obj) -> dict:
    if isinstance(obj, Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        return {k: np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v) for k, v in obj.items()}
    raise TypeError(f"expected a Module or a dict of arrays, got {type(obj).__name__}")


# safetensors dtype name -> numpy dtype returned by load_safetensors (BF16 is widened, see _read_bf16)
_NUMPY_DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
                 "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.float16,
                 "F32": np.float32, "F64": np.float64}
READABLE_DTYPES = tuple(_NUMPY_DTYPES) + ("BF16",)
_SAVE_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "f16": "float16",
                "half": "float16", "float32": "float32", "f32": "float32", "float": "float32",
                "float64": "float64", "f64": "float64", "double": "float64"}


class UnsupportedDTypeError(ValueError):
    """A safetensors tensor whose element type luminal cannot read (e.g. ``F8_E4M3``)."""


def float32_to_bfloat16_bits(x) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of ``x`` rounded to nearest, ties to even (``torch.bfloat16``'s rounding).

    Float64 (and float16) input is converted to float32 first, as PyTorch does. NaN maps to a quiet NaN with the
    sign kept (``0x7FC0`` / ``0xFFC0``, as ``ml_dtypes``); infinities stay infinite; values past bfloat16's range
    round to infinity."""
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf, as in torch
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bias = ((u >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    rounded = ((u + bias) >> np.uint32(16)).astype(np.uint16)  # no wrap: the largest non-NaN u is 0xFF800000
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        quiet = ((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0)
        rounded = np.where(nan, quiet.astype(np.uint16), rounded)
    return rounded


def bfloat16_bits_to_float32(bits) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16): exact, a 16-bit left shift."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _save_dtype(dtype) -> str | None:
    if dtype is None:
        return None
    name = getattr(dtype, "value", None) or str(dtype).replace("torch.", "")
    if name not in _SAVE_DTYPES:
        raise ValueError(f"save_safetensors: unsupported dtype {dtype!r}; expected one of "
                         f"{sorted(set(_SAVE_DTYPES.values()))} (or None to keep each tensor's dtype)")
    return _SAVE_DTYPES[name]


def _is_bf16_array(arr: np.ndarray) -> bool:
    return arr.dtype.name == "bfloat16"  # an ml_dtypes.bfloat16 array


def _write_safetensors(path: str, entries: dict, metadata: dict) -> None:
    """A safetensors file from ``{name: (ST dtype, shape, contiguous little-endian array)}`` (the format's
    layout: 8-byte little-endian header length, a JSON header padded with spaces to 8 bytes, the data; tensors
    ordered as the ``safetensors`` package orders them, widest element first, then by name)."""
    order = sorted(entries, key=lambda k: (-entries[k][2].dtype.itemsize, k))
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for k in order:
        st_dtype, shape, arr = entries[k]
        header[k] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for k in order:
            f.write(entries[k][2].tobytes())


def save_safetensors(obj, path, metadata: dict | None = None, dtype=None) -> None:
    """Save a module's state dict (or a dict of arrays) to ``path`` atomically and durably (see the module
    docstring).

    ``dtype``: None keeps each tensor's dtype; ``"bfloat16"`` rounds floating tensors to bfloat16 (round to
    nearest even, see :func:`float32_to_bfloat16_bits`) and stores them as ``BF16``; ``"float16"``,
    ``"float32"`` or ``"float64"`` cast floating tensors. Integer and bool tensors are never converted.
    ``ml_dtypes.bfloat16`` arrays in a dict are stored as ``BF16`` as they are."""
    from safetensors.numpy import save_file

    target = _save_dtype(dtype)
    state = {k: np.ascontiguousarray(v) for k, v in _state(obj).items()}
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if target is not None and target != "bfloat16":
        state = {k: to_host(v, as_dtype(target)) if v.dtype.kind == "f" or _is_bf16_array(v) else v
                 for k, v in state.items()}
    if target == "bfloat16" or any(_is_bf16_array(v) for v in state.values()):
        entries = {}
        for k, v in state.items():
            if not isinstance(k, str):
                raise TypeError(f"save_safetensors: tensor names must be strings, got {k!r}")
            if _is_bf16_array(v):
                entries[k] = ("BF16", v.shape, v.view(np.uint16).astype("<u2"))
            elif target == "bfloat16" and v.dtype.kind == "f":
                entries[k] = ("BF16", v.shape, float32_to_bfloat16_bits(v).astype("<u2"))
            else:
                st = {np.dtype(t): n for n, t in _NUMPY_DTYPES.items()}.get(v.dtype)
                if st is None:
                    raise TypeError(f"save_safetensors: tensor {k!r} has dtype {v.dtype}, which safetensors "
                                    f"cannot store; expected one of {sorted(READABLE_DTYPES)}")
                entries[k] = (st, v.shape, v.astype(v.dtype.newbyteorder("<")))
        atomic_save(path, lambda tmp: _write_safetensors(tmp, entries, meta))
        return
    # the library writes its own temporary next to the file: inside our temporary folder, cleaned if killed
    atomic_save(path, lambda tmp: save_file(state, tmp, metadata=meta))


def _header(path: str) -> tuple[int, dict]:
    """(offset of the data section, parsed JSON header) of a safetensors file already checked by ``safe_open``."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return 8 + n, json.loads(f.read(n))


def safetensors_header(path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (file dtype such as "BF16", shape)}`` of every tensor in a safetensors file, without reading
    any data. Errors as :func:`load_safetensors`."""
    from safetensors import safe_open

    path = _check_path(path)
    try:
        with safe_open(path, framework="np") as f:
            return {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
    except Exception as err:
        raise ValueError(f"cannot read safetensors file {path!r}: {err} (expected a complete safetensors file; "
                         "is it truncated or corrupt?)") from err


def _read_bf16(path: str, start: int, info: dict, keep: bool = False) -> np.ndarray:
    """A ``BF16`` tensor: widened to float32 (exact), or with ``keep`` as an ``ml_dtypes.bfloat16`` array."""
    shape = tuple(info["shape"])
    begin, end = info["data_offsets"]
    count = (end - begin) // 2
    if count == 0:
        return np.zeros(shape, BFLOAT16_NUMPY if keep else np.float32)
    bits = np.memmap(path, dtype="<u2", mode="r", offset=start + begin, shape=(count,))
    if keep:
        out = np.array(bits, dtype=np.uint16).view(BFLOAT16_NUMPY).reshape(shape)
        del bits
        return out
    out = bfloat16_bits_to_float32(bits).reshape(shape)
    del bits
    return out


def _check_path(path) -> str:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no safetensors file at {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{path!r} is a directory; expected a safetensors file")
    return path


def load_safetensors(path, dtype=None, names=None, keep_bfloat16: bool = False) -> dict[str, np.ndarray]:
    """Read tensors from a safetensors file (all, or ``names``); floating tensors cast to ``dtype`` if given
    (``dtype="bfloat16"`` rounds to nearest even through float32, as PyTorch).

    ``BF16`` tensors come back as float32 (exact) by default, or as ``ml_dtypes.bfloat16`` arrays (the bits
    as stored; the host type of ``luminal.bfloat16`` tensors) with ``keep_bfloat16=True`` or
    ``dtype="bfloat16"``; ``F16``, ``I8``, ``U8`` and the other numpy-representable
    dtypes as their numpy dtype. A tensor of another dtype raises :class:`UnsupportedDTypeError` (a
    ``ValueError``) naming the file, the tensor and the readable dtypes."""
    from safetensors import safe_open

    path = _check_path(path)
    target = as_dtype(dtype) if dtype is not None else None
    keep = keep_bfloat16 or target == DType.bfloat16
    out = {}
    try:
        with safe_open(path, framework="np") as f:
            keys = list(f.keys()) if names is None else list(names)
            available = set(f.keys())
            missing = [k for k in keys if k not in available]
            if missing:
                raise KeyError(f"{path}: no tensors named {missing}")
            header = None
            for k in keys:
                st_dtype = f.get_slice(k).get_dtype()
                if st_dtype == "BF16":
                    if header is None:
                        header = _header(path)
                    arr = _read_bf16(path, header[0], header[1][k], keep)
                elif st_dtype in _NUMPY_DTYPES:
                    arr = f.get_tensor(k)
                else:
                    raise UnsupportedDTypeError(
                        f"{path}: tensor {k!r} has dtype {st_dtype}, which luminal cannot read; expected one of "
                        f"{', '.join(READABLE_DTYPES)} (convert the checkpoint, e.g. to float32 or bfloat16)")
                if target is not None and (arr.dtype.kind == "f" or arr.dtype == BFLOAT16_NUMPY):
                    arr = to_host(arr, target)
                out[k] = arr
    except (KeyError, UnsupportedDTypeError):
        raise
    except Exception as err:  # the safetensors package raises its own error types for corrupt headers/data
        raise ValueError(f"cannot read safetensors file {path!r}: {err} (expected a complete safetensors file; "
                         "is it truncated or corrupt?)") from err
    return out


def load_into(module: Module, path, strict: bool = True) -> tuple[list[str], list[str]]:
    """Load a safetensors checkpoint into ``module`` by name; see :meth:`Module.load_state_dict`."""
    return module.load_state_dict(load_safetensors(path), strict=strict)
