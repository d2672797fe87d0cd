"""Compiling the GPU backend's generated Triton module: importing it (:func:`_load_module`), compiling its kernels
concurrently before their first launch (:func:`compile_parallel`), and compiling them ahead of time for a GPU
architecture on a machine without one (:func:`compile_for_target`: Triton's real compiler down to PTX and a cubin
for NVIDIA, or AMDGCN and a code object for AMD, which is how the test suite checks on a CPU-only machine that
every kernel kind compiles, uses tensor cores / matrix cores where it should and contains no fused multiply-add).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading

_MODULES: dict[str, object] = {}
_MODULE_LOCK = threading.Lock()

# every launch: no contraction of a * b + c into a fused multiply-add, whose single rounding differs from the
# reference's two (numpy does not fuse; nor does the C backend)
NO_FP_FUSION = {"enable_fp_fusion": False}


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


def compile_parallel(jobs) -> int:
    """Compile Triton kernels concurrently: ``jobs`` are ``(jit function, launch args, launch kwargs)``; each is
    compiled for exactly that specialization (``warmup``, nothing runs), so the launch that follows finds it in
    Triton's cache. Uses Triton's ``AsyncCompileMode`` with a thread pool (the compiler's passes and ``ptxas`` run
    outside the GIL); returns the number compiled, 0 when that Triton lacks it or a compile fails (the kernels
    then compile at their launch, and a real error is raised there)."""
    if len(jobs) < 2 or os.environ.get("LUMINAL_PARALLEL_COMPILE", "1") == "0":
        return 0
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return 0
    from concurrent.futures import ThreadPoolExecutor
    workers = max(1, min(len(jobs), os.cpu_count() or 1, 16))
    try:
        with ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool):
            for fn, args, kwargs in jobs:
                fn.warmup(*args, grid=(1,), **kwargs, **NO_FP_FUSION)
    except Exception:  # noqa: BLE001 - a speed-up only: the launch compiles (and reports) it again
        return 0
    return len(jobs)


# Triton's pointer types of the storage dtypes (luminal.codegen.triton_support.storage_name)
_POINTER = {"float32": "*fp32", "float64": "*fp64", "float16": "*fp16", "uint16": "*u16", "uint8": "*u8",
            "int8": "*i8", "int16": "*i16", "int32": "*i32", "int64": "*i64", "uint32": "*u32", "uint64": "*u64"}


def compile_for_target(tprogram, buffer_storage: dict, arch: int | str = 90, warp_size: int | None = None,
                       kinds=None, backend: str = "cuda") -> dict:
    """Compile every kernel of ``tprogram`` (a :class:`luminal.codegen.triton.TritonProgram` rendered for
    ``cuda``) with Triton's compiler for a GPU architecture, without a GPU: ``{launch name: asm dict}``.
    ``backend="cuda"``: NVIDIA compute capability ``arch`` (90: H100/H200), asm ``"ttir"``, ``"ttgir"``,
    ``"llir"``, ``"ptx"``, ``"cubin"``; ``backend="hip"``: AMD ``arch`` such as ``"gfx942"`` (MI300), asm
    ``"ttgir"``, ``"llir"``, ``"amdgcn"``, ``"hsaco"``. ``warp_size``: 32 on NVIDIA, 64 on AMD CDNA by default.
    ``buffer_storage``: buffer id -> the numpy name of its storage type. Options as the runtime launches them (no
    FP fusion; a tensor-core GEMM's warps and stages). ``kinds``: only the launches of these kinds (``"gemm"``,
    ``"elementwise"``, ...). Needs a process where Triton's interpreter is off (``TRITON_INTERPRET`` unset)."""
    import triton
    from triton.backends.compiler import GPUTarget

    if backend not in ("cuda", "hip"):
        raise ValueError(f"compile_for_target: backend must be 'cuda' or 'hip', got {backend!r}")
    module = _load_module(tprogram.source)
    target = GPUTarget(backend, arch, warp_size or (32 if backend == "cuda" else 64))
    out = {}
    for launch in tprogram.launches:
        if (kinds is not None and launch.kind not in kinds) or launch.name in out:  # (a shared function: once)
            continue
        fn = getattr(module, launch.name)
        names = list(fn.arg_names)
        options = dict(NO_FP_FUSION)
        constexprs = {}
        for key, value in launch.constexprs.items():
            (constexprs if key in names else options)[key] = value
        signature = {}
        for j, name in enumerate(names):
            if j < len(launch.buffers):
                signature[name] = _POINTER[buffer_storage[launch.buffers[j]]]
            elif j == len(launch.buffers):
                signature[name] = "*i32"  # the error buffer
            elif name in constexprs:
                signature[name] = "constexpr"
            else:
                signature[name] = "i64"
        # pointers aligned to 16 bytes, as Triton's launcher specializes them at run time (luminal's buffers are
        # 256-byte aligned): without it loads are not vectorized nor pipelined
        attrs = {(j,): [["tt.divisibility", 16]] for j in range(len(launch.buffers) + 1)}
        src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
        out[launch.name] = triton.compile(src, target=target, options=options).asm
    return out
