"""The internal precision of float32 matrix products: :func:`set_float32_matmul_precision` (PyTorch's
``torch.set_float32_matmul_precision``).

* ``"highest"`` (the default): float32 products and sums.
* ``"high"``: the same as ``"highest"`` here, as in PyTorch on the CPU (which has no faster algorithm at that
  precision there: its ``"high"`` differs from ``"highest"`` only on CUDA, through TensorFloat32).
* ``"medium"``: both operands of a float32 ``matmul`` (and so ``@``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``,
  ``tensordot``, ``einsum``'s contractions, ``F.linear`` / ``nn.Linear``, attention's products) are rounded to
  bfloat16 (nearest even), their products summed in float32; the result stays float32. This is PyTorch's
  ``"medium"`` on the CPU (oneDNN's bfloat16 matmul: ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``)
  and runs on AMX tiles where the CPU has them (the GEMMs read the operands rounded while packing, see
  ``docs/cpu_backend.md``): about 2-4x faster than float32 products at a relative error near 2^-8.
  Convolutions are not affected (as in PyTorch: they have their own flag there).

Like :class:`luminal.autocast`, the setting is read when a graph is *built*: a graph traced under
``"medium"`` keeps its rounded products whatever the setting is when it runs, and changing the setting does not
change graphs built before. Eager tensors build each recorded operation under the setting that was active when
it was recorded. The setting is global (all threads), as PyTorch's.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

__all__ = ["set_float32_matmul_precision", "get_float32_matmul_precision"]

PRECISIONS = ("highest", "high", "medium")
_global = {"precision": "highest", "hook": False}
_tls = threading.local()  # an override while an eager operation recorded under another setting is built
_lock = threading.Lock()


def set_float32_matmul_precision(precision: str) -> None:
    """Set the internal precision of float32 matrix products: ``"highest"``, ``"high"`` or ``"medium"`` (see
    the module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: expected one of {', '.join(map(repr, PRECISIONS))}, "
                         f"got {precision!r}")
    _global["precision"] = precision
    if precision != "highest":
        _install_eager_hook()


def get_float32_matmul_precision() -> str:
    """The internal precision of float32 matrix products set by :func:`set_float32_matmul_precision`."""
    return getattr(_tls, "precision", None) or _global["precision"]


def rounds_float32_products() -> bool:
    """Whether float32 matrix products built now round their operands to bfloat16 (``"medium"``)."""
    return get_float32_matmul_precision() == "medium"


@contextmanager
def matmul_precision(precision: str):
    """Build with ``precision`` in this thread (the eager engine's builds, and matmul's inner product)."""
    old = getattr(_tls, "precision", None)
    _tls.precision = precision
    try:
        yield
    finally:
        _tls.precision = old


def _install_eager_hook() -> None:
    """Register a recording context with the eager engine: an operation recorded under a precision other than
    ``"highest"`` carries it in its structural key and is built under it (see ``luminal.amp``'s autocast)."""
    with _lock:
        if _global["hook"]:
            return
        import importlib
        core = importlib.import_module("luminal.eager._core")
        core.record_contexts.append(_record_context)
        _global["hook"] = True


def _record_context(key, build):
    """An operation is built (later, when its value is needed) under the precision active when it was recorded;
    ``"medium"`` ones also have their own structural key."""
    precision = get_float32_matmul_precision()

    def build_with(graph, gts, build=build, precision=precision):
        with matmul_precision(precision):
            return build(graph, gts)
    if precision == "medium":
        return key + (("matmul_precision", precision),), build_with
    return key, build_with
