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
import re
import threading

_MODULES: dict[str, object] = {}
_MODULE_LOCK = threading.Lock()

# every launch: no contraction of a * b + c into a fused multiply-add, whose single rounding differs from the
# reference's two (numpy does not fuse; nor does the C backend)
NO_FP_FUSION = {"enable_fp_fusion": False}


# Packed 16-bit integer SIMD in the PTX that Triton's LLVM emits (``add.s16x2 d, a, b``): LLVM narrows small index
# arithmetic (``(i1 + i2 - 2) // 3`` with i1, i2 < 4) to i8 lanes and its SLP vectorizer pairs two of them. ptxas
# (12.8 and 12.9, bundled with Triton 3.6 / 3.9) compiled such an add whose one lane was dead into a VIADD.16x2
# with the immediate 0 instead of 0x00FE00FE: on an H200 an adaptive average pool read the wrong batch element
# (tests/test_nn_pooling.py on cuda). The hook below rewrites every such instruction as two scalar 16-bit ones.
_PACKED_INT16 = re.compile(r"^([ \t]*)(add|sub|min|max)\.([su])16x2[ \t]+(%\w+),[ \t]*([%\w-]+),[ \t]*([%\w-]+);",
                           re.MULTILINE)
PTX_WORKAROUND_KEY = "luminal-scalar-int16x2-1"


def scalarize_packed_int16(ptx: str) -> str:
    """``ptx`` with each packed 16-bit integer ``add/sub/min/max.{s,u}16x2 d, a, b;`` replaced by a scoped block
    doing the two 16-bit halves one at a time (the same result; operands may be registers or immediates)."""
    def one(m):
        pad, op, sign, d, a, b = m.groups()
        lines = ["{", ".reg .b16 %lmh<4>;", ".reg .b32 %lmw<2>;", f"mov.b32 %lmw0, {a};", f"mov.b32 %lmw1, {b};",
                 "mov.b32 {%lmh0, %lmh1}, %lmw0;", "mov.b32 {%lmh2, %lmh3}, %lmw1;",
                 f"{op}.{sign}16 %lmh0, %lmh0, %lmh2;", f"{op}.{sign}16 %lmh1, %lmh1, %lmh3;",
                 f"mov.b32 {d}, {{%lmh0, %lmh1}};", "}"]
        return "\n".join(pad + line for line in lines)
    return _PACKED_INT16.sub(one, ptx)


def install_ptx_workaround() -> None:
    """Route the PTX of every NVIDIA kernel Triton compiles in this process through
    :func:`scalarize_packed_int16` (a stage hook, chained after one already installed; idempotent; part of the
    kernel cache key where Triton asks for one). ``LUMINAL_PTX_WORKAROUND=0`` leaves Triton as it is."""
    if os.environ.get("LUMINAL_PTX_WORKAROUND", "1") == "0" or os.environ.get("TRITON_INTERPRET") == "1":
        return
    try:
        from triton import knobs
    except ImportError:
        return
    previous = knobs.runtime.add_stages_inspection_hook
    if getattr(previous, "luminal", False):
        return

    def hook(*args):
        if not args:  # Triton asks for the hook's part of the cache key
            key, digest = previous() if previous is not None else ("", "")
            return key + PTX_WORKAROUND_KEY, hashlib.sha256((digest + PTX_WORKAROUND_KEY).encode()).hexdigest()
        if previous is not None:
            previous(*args)
        backend, stages = args[0], args[1]
        if getattr(getattr(backend, "target", None), "backend", None) == "cuda" and "ptx" in stages:
            make_ptx = stages["ptx"]
            stages["ptx"] = lambda src, metadata: scalarize_packed_int16(make_ptx(src, metadata))

    hook.luminal = True
    knobs.runtime.add_stages_inspection_hook = hook


def _load_module(source: str):
    """Import the generated source as a module. Triton's ``@jit`` reads a function's source with ``inspect``,
    so the text is written to a file (under the luminal cache folder, named by its hash) and imported from it.
    On a GPU (not Triton's interpreter) the PTX workaround is installed first (:func:`install_ptx_workaround`)."""
    install_ptx_workaround()
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
    module = _load_module(tprogram.source)  # (installs the PTX workaround too)
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
