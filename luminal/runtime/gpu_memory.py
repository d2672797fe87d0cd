"""Device memory of the GPU runtime (:mod:`luminal.runtime.gpu`): torch CPU tensors for Triton's interpreter
(``gpu-interpret``) and CuPy arrays on one stream of the runtime's own (``cuda``), behind one small interface
(empty/zeros/view, upload/copy/download, kernel arguments, the launch stream, synchronize)."""

from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np

INSTALL_HINT = "pip install 'luminal[gpu]'  (triton and cupy-cuda12x)"


class TorchCPUMemory:
    """Device memory of ``gpu-interpret``: torch CPU tensors (what Triton's interpreter reads)."""

    name = "torch CPU tensors (Triton interpreter)"
    graphs = False  # no CUDA graphs in the interpreter

    def __init__(self):
        try:
            import torch
        except ImportError as e:
            raise RuntimeError("device 'gpu-interpret' needs torch (CPU build is enough) for Triton's interpreter: "
                               "pip install torch") from e
        self.torch = torch

    def empty(self, n: int, storage: str):
        return self.torch.empty(max(n, 1), dtype=getattr(self.torch, storage))

    def zeros(self, n: int, storage: str):
        return self.torch.zeros(max(n, 1), dtype=getattr(self.torch, storage))

    def clear(self, buf) -> None:
        """Zero a whole buffer (in stream order on a GPU: captured into a CUDA graph like a launch)."""
        buf.zero_()

    def view(self, arena, offset: int, n: int, storage: str):
        dtype = getattr(self.torch, storage)
        nbytes = max(n, 1) * self.torch.empty(0, dtype=dtype).element_size()
        return arena[offset:offset + nbytes].view(dtype)

    def upload(self, dst, arr: np.ndarray) -> None:
        if arr.size:
            with warnings.catch_warnings():  # torch warns about read-only arrays (carried state); only read here
                warnings.simplefilter("ignore", UserWarning)
                src = self.torch.from_numpy(arr.reshape(-1))
            dst[:arr.size].copy_(src)

    def copy(self, dst, src, n: int) -> None:
        if n:
            dst[:n].copy_(src[:n])

    def is_device_array(self, arr) -> bool:
        return False

    def download(self, src, n: int, storage: str) -> np.ndarray:
        return src[:n].numpy().copy()

    def to_device_array(self, src, n: int, storage: str):
        raise RuntimeError("data(device=True) needs device='cuda' (gpu-interpret keeps its buffers as torch CPU "
                           "tensors; use data())")

    def arg(self, buf):
        return buf

    def launching(self):
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        pass


class _CupyArg:
    """A CuPy array as Triton sees a tensor: ``data_ptr()`` and a ``dtype`` whose name Triton canonicalizes."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, arr):
        self._ptr = arr.data.ptr
        self.dtype = arr.dtype  # numpy dtype: str() gives "float32", ... (bool buffers are uint8)

    def data_ptr(self) -> int:
        return self._ptr


class CuPyMemory:
    """Device memory of ``cuda``: CuPy arrays, every copy and launch on one non-blocking stream of the runtime's
    own (Triton is pointed at it while the runtime launches, see :meth:`launching`), so the launches of one
    ``execute()`` can be captured into a CUDA graph."""

    name = "CuPy device arrays"

    def __init__(self):
        try:
            import cupy
        except ImportError as e:
            raise RuntimeError(f"device 'cuda' needs CuPy, which is not installed ({e}); install it with "
                               f"{INSTALL_HINT}") from e
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001 - no driver, no device: CuPy raises its own runtime errors
            raise RuntimeError(f"device 'cuda': no usable CUDA device ({type(e).__name__}: {e})") from e
        if count < 1:
            raise RuntimeError("device 'cuda': no CUDA device found")
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.graphs = os.environ.get("LUMINAL_CUDA_GRAPHS", "1") != "0"

    def empty(self, n: int, storage: str):
        try:
            with self.stream:
                return self.cupy.empty(max(n, 1), dtype=storage)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            raise MemoryError(f"device 'cuda': out of memory allocating {n} x {storage}: {e}") from e

    def view(self, arena, offset: int, n: int, storage: str):
        nbytes = max(n, 1) * np.dtype(storage).itemsize
        return arena[offset:offset + nbytes].view(storage)

    def zeros(self, n: int, storage: str):
        out = self.empty(n, storage)
        with self.stream:
            out.fill(0)
        return out

    def clear(self, buf) -> None:
        self.cupy.cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, self.stream.ptr)

    def upload(self, dst, arr: np.ndarray) -> None:
        if arr.size:
            dst[:arr.size].set(arr.reshape(-1), stream=self.stream)

    def copy(self, dst, src, n: int) -> None:
        """Device -> device: ``n`` elements of ``src`` (a buffer or any CUDA array) into ``dst``."""
        if n:
            with self.stream:
                dst[:n] = self.cupy.asarray(src).reshape(-1)[:n].astype(dst.dtype, copy=False)

    def is_device_array(self, arr) -> bool:
        return hasattr(arr, "__cuda_array_interface__")

    def download(self, src, n: int, storage: str) -> np.ndarray:
        return src[:n].get(stream=self.stream)

    def to_device_array(self, src, n: int, storage: str):
        with self.stream:
            out = src[:n].copy()
        self.stream.synchronize()
        return out

    def arg(self, buf):
        return _CupyArg(buf)

    def launching(self):
        """Point Triton's launches at this stream (Triton asks its driver for the current stream per launch)."""
        return _triton_stream(self.stream.ptr)

    def synchronize(self) -> None:
        self.stream.synchronize()


@contextlib.contextmanager
def _triton_stream(ptr: int):
    import triton

    drv = triton.runtime.driver.active
    had = "get_current_stream" in vars(drv)
    old = vars(drv).get("get_current_stream")
    drv.get_current_stream = lambda *_a, **_k: ptr
    try:
        yield
    finally:
        if had:
            drv.get_current_stream = old
        else:
            try:
                del drv.get_current_stream
            except AttributeError:
                pass
