"""The GPU runtime: the kernel IR rendered as Triton kernels (:mod:`luminal.codegen.triton`).

Two devices share all of this module's code and differ only in where memory lives:

* ``"gpu-interpret"``: Triton's interpreter (``TRITON_INTERPRET=1``) runs the generated kernels on the CPU, on
  **torch CPU tensors**. Slow, but it executes exactly the source a GPU would compile, so every GPU kernel is
  tested on machines without a GPU. ``TRITON_INTERPRET`` is read when ``triton`` is imported: this module sets
  it before importing triton for this device, and a process that already imported triton without it cannot
  switch (a clear error says so).
* ``"cuda"`` (**unverified**: written without access to a GPU): memory from **CuPy** (``cupy-cuda12x``); CuPy
  arrays are handed to Triton through a tiny wrapper with ``data_ptr()`` and ``dtype``. Triton launches on
  CUDA without torch; note that when a CPU-only torch is imported in the process, Triton's CUDA driver asks
  torch whether CUDA is available and finds no GPU.

This first slice keeps things simple: one device allocation per buffer (no arena planning yet), re-made when
the symbol bindings change; inputs are copied host -> device on every ``execute()``; retrieved / kept tensors
are copied device -> host into ``graph.tensors`` after the last kernel, as fresh arrays (so carries and
``data()`` never alias device memory). Kernels run one launch each (no CUDA graph capture yet); row groups are
not fused (see :mod:`luminal.codegen.triton`). Errors found by kernels (gather index out of range, integer
modulo by zero) are read back from a one-element buffer after the run and raised like the CPU backend does.

``LUMINAL_DEBUG=1`` prints the generated Triton source when a graph compiles.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading

import numpy as np

from ..codegen.kernel import Program, lower
from ..codegen.triton import TritonProgram, render, storage_name
from ..graph import Graph

INSTALL_HINT = "pip install 'luminal[gpu]'  (triton and cupy-cuda12x)"
_ERRORS = {1: (IndexError, "a Gather index is out of range for its axis"),
           2: (ZeroDivisionError, "integer modulo by zero")}
_MODULES: dict[str, object] = {}
_MODULE_LOCK = threading.Lock()


def _import_triton(interpret: bool):
    """Import triton (with ``TRITON_INTERPRET=1`` for the interpreter); a clear error when it is missing."""
    if interpret:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("device 'gpu-interpret' needs Triton's interpreter, but triton was already imported "
                               "in this process without TRITON_INTERPRET=1; set TRITON_INTERPRET=1 before "
                               "anything imports triton (or use the device in a fresh process)")
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"the GPU backend needs Triton, which is not installed ({e}); install it with "
                           f"{INSTALL_HINT}") from e
    return triton


# ---------------------------------------------------------------------------- memory
class TorchCPUMemory:
    """Device memory of ``gpu-interpret``: torch CPU tensors (what Triton's interpreter reads)."""

    name = "torch CPU tensors (Triton interpreter)"

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

    def upload(self, dst, arr: np.ndarray) -> None:
        if arr.size:
            dst[:arr.size].copy_(self.torch.from_numpy(arr.reshape(-1)))

    def download(self, src, n: int, storage: str) -> np.ndarray:
        return src[:n].numpy().copy()

    def arg(self, buf):
        return buf

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
    """Device memory of ``cuda``: CuPy arrays (**unverified**: no GPU was available when this was written)."""

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

    def empty(self, n: int, storage: str):
        try:
            return self.cupy.empty(max(n, 1), dtype=storage)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            raise MemoryError(f"device 'cuda': out of memory allocating {n} x {storage}: {e}") from e

    def zeros(self, n: int, storage: str):
        out = self.empty(n, storage)
        out.fill(0)
        return out

    def upload(self, dst, arr: np.ndarray) -> None:
        if arr.size:
            dst[:arr.size].set(arr.reshape(-1))

    def download(self, src, n: int, storage: str) -> np.ndarray:
        return self.cupy.asnumpy(src[:n])

    def arg(self, buf):
        return _CupyArg(buf)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()


# ---------------------------------------------------------------------------- module loading
def _load_module(source: str):
    """Import the generated source as a module. Triton's ``@jit`` reads a function's source with ``inspect``,
    so the text is written to a file (under the luminal cache folder, named by its hash) and imported from it."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _MODULE_LOCK:
        mod = _MODULES.get(digest)
        if mod is not None:
            return mod
        from .build import cache_dir
        folder = os.path.join(cache_dir(), "triton")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"lm_{digest}.py")
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != source:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"luminal_triton_{digest}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULES[digest] = mod
        return mod


# ---------------------------------------------------------------------------- runtime
class GPURuntime:
    """Executes a graph as Triton kernels on ``memory`` (see the module docstring)."""

    def __init__(self, graph: Graph, device: str, memory):
        self.graph = graph
        self.device = device
        self.memory = memory
        self.program: Program = lower(graph)
        self.tprogram: TritonProgram = render(self.program)
        if os.environ.get("LUMINAL_DEBUG", "0") not in ("", "0"):
            print(f"# luminal: Triton source for device {device!r}\n{self.tprogram.source}")
        self.module = _load_module(self.tprogram.source)
        self._version = graph.version
        self._key = None
        self._buffers: dict[int, object] = {}
        self._sizes: dict[int, int] = {}
        self._err = memory.zeros(1, "int32")
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """The generated Triton source."""
        return self.tprogram.source

    def stale(self, graph: Graph) -> bool:
        """True when the graph changed since this runtime was built (it is then rebuilt)."""
        return graph.version != self._version

    def _allocate(self, bindings) -> None:
        """One device buffer per program buffer at ``bindings`` (re-made when the bindings change)."""
        self._buffers, self._sizes = {}, {}
        for node_id, (dims, dtype) in self.program.buffers.items():
            n = 1
            for d in dims:
                n *= d.evaluate(bindings)
            self._sizes[node_id] = n
            self._buffers[node_id] = self.memory.empty(n, storage_name(dtype))
        for alias, target in self.program.aliases.items():
            self._buffers[alias] = self._buffers[target]

    def execute(self, graph: Graph) -> None:
        """Copy the inputs to the device, launch every kernel in order, copy the results back."""
        with self._lock:
            self._execute(graph)

    def _execute(self, graph: Graph) -> None:
        dyn = graph.dyn_map
        symbols = self.tprogram.symbols
        key = tuple(dyn.get(s) for s in symbols)
        if key != self._key:
            missing = [s for s, v in zip(symbols, key) if v is None]
            if missing:
                from ..shape import UnboundSymbolError
                raise UnboundSymbolError(f"no value bound for symbol(s) {missing}; bind them with set() data or "
                                         "Graph.set_dim")
            self._allocate(dict(dyn))
            self._key = key
        bindings = dict(dyn)
        graph.reset()
        tensors = graph.tensors
        for node_id in self.program.inputs:
            node = graph.nodes[node_id]
            shape = tuple(d.evaluate(bindings) for d in node.dims)
            arr = tensors.get((node_id, 0))
            if arr is None or arr.shape != shape or node_id in graph.deferred:
                graph._load_input(node, shape, bindings)
                arr = tensors[(node_id, 0)]
            dtype = self.program.buffers[node_id][1]
            host = np.ascontiguousarray(arr, dtype=dtype.numpy)
            if storage_name(dtype) != dtype.value:
                host = host.view(storage_name(dtype))
            self.memory.upload(self._buffers[node_id], host)
        self.memory.upload(self._err, np.zeros(1, np.int32))
        err_arg = self.memory.arg(self._err)
        for launch in self.tprogram.launches:
            count = launch.grid[0].evaluate(bindings)
            programs = -(-count // launch.grid[1])
            if programs <= 0:
                continue
            fn = getattr(self.module, launch.name)
            args = [self.memory.arg(self._buffers[b]) for b in launch.buffers] + [err_arg]
            args += [bindings[s] for s in launch.symbols]
            args += [e.evaluate(bindings) for e in launch.extra]
            with np.errstate(all="ignore"):  # (the interpreter computes masked-out lanes with numpy too)
                fn[(programs,)](*args, **launch.constexprs)
        self.memory.synchronize()
        code = int(self.memory.download(self._err, 1, "int32")[0])
        if code:
            exc, text = _ERRORS.get(code, (RuntimeError, f"kernel error {code}"))
            if code == 1:
                text = graph.explain_gather_error() or text
            raise exc(f"compiled graph ({self.device}): {text}")
        for node_id in self.program.outputs:
            dims, dtype = self.program.buffers[node_id]
            shape = tuple(d.evaluate(bindings) for d in dims)
            host = self.memory.download(self._buffers[node_id], self._sizes[node_id], storage_name(dtype))
            if dtype.value != storage_name(dtype):
                host = host.view(dtype.numpy)
            tensors[(node_id, 0)] = host.reshape(shape)


def compile_graph(graph: Graph, device: str, search: str = "off", budget_s: float | None = None) -> None:
    """Attach the Triton runtime of ``device`` (``"gpu-interpret"`` or ``"cuda"``) to ``graph``. ``search`` and
    ``budget_s`` are accepted for the runtime interface; this slice has no measured search yet."""
    if device == "gpu-interpret":
        _import_triton(interpret=True)
        memory = TorchCPUMemory()
    elif device == "cuda":
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise RuntimeError("device 'cuda' cannot run with TRITON_INTERPRET=1 set (Triton's interpreter); use "
                               "device='gpu-interpret' for that, or unset it in a fresh process")
        memory = CuPyMemory()
        _import_triton(interpret=False)
    else:
        raise ValueError(f"unknown GPU device {device!r}; expected 'gpu-interpret' or 'cuda'")
    graph.runtime = GPURuntime(graph, device, memory)
