"""GEMMs on ``cuda``: the tile configurations and cuBLAS candidates of the measured search, the grid of a
configuration, the operands' strided layout for a BLAS call, and the tuning-cache key (GPU model, Triton
version, kernel source, sizes) and the timing itself (:func:`measure_gemm`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


def gemm_operand_layout(kernel, bindings):
    """The plain strided layout of a GEMM kernel's operands at ``bindings``, for a BLAS call: ``((A dims [*b, M,
    K], A strides, A offset), (B dims [*b, K, N], B strides, B offset), C shape [*b, M, N])`` in elements, or None
    when it has none (masked views, negative strides or offsets, a dtype other than float32/float64)."""
    if kernel.dtype.value not in ("float32", "float64") or kernel.a_view.masks or kernel.b_view.masks \
            or getattr(kernel, "a_round", None) is not None or getattr(kernel, "b_round", None) is not None:
        return None
    nb = len(kernel.dims) - 2
    batch = list(range(nb))

    def layout(tracker, axes):
        dims = tuple(tracker.dims[j].evaluate(bindings) for j in axes)
        strides = tuple(tracker.strides[j].evaluate(bindings) for j in axes)
        offset = tracker.offset.evaluate(bindings)
        if any(st < 0 for st in strides) or offset < 0:
            return None
        return dims, strides, offset

    a = layout(kernel.a_view, batch + [nb, nb + 2])
    b = layout(kernel.b_view, batch + [nb + 2, nb + 1])
    if a is None or b is None:
        return None
    return a, b, tuple(d.evaluate(bindings) for d in kernel.dims)


# batch*M*N*K below this keeps the default tiles: each candidate costs a Triton compile (about 1-2 s), more than
# a small GEMM could ever win back (measured on an H100: W6 x16's six GEMMs x 6 candidates took 53 s to search)
GEMM_SEARCH_MIN_WORK = 1 << 28


@dataclass(frozen=True)
class GemmConfig:
    """Tile sizes and launch options of a generated GEMM (a candidate of the measured search on ``cuda``)."""
    bm: int
    bn: int
    bk: int
    warps: int = 4
    stages: int = 3
    cublas: bool = False  # cuBLAS through cupy.matmul instead of the generated kernel (plain strided operands)
    seconds: float = field(default=0.0, compare=False)

    @property
    def name(self) -> str:
        if self.cublas:
            return "cublas"
        return f"triton:{self.bm}x{self.bn}x{self.bk}:w{self.warps}:s{self.stages}"

    @staticmethod
    def parse(name: str) -> "GemmConfig | None":
        if name == "cublas":
            return CUBLAS
        try:
            kind, tiles, w, st = name.split(":")
            bm, bn, bk = (int(v) for v in tiles.split("x"))
            if kind != "triton" or not w.startswith("w") or not st.startswith("s"):
                return None
            return GemmConfig(bm, bn, bk, int(w[1:]), int(st[1:]))
        except (ValueError, AttributeError):
            return None

    def launch_kwargs(self) -> dict:
        return {"BLOCK_M": self.bm, "BLOCK_N": self.bn, "BLOCK_K": self.bk, "num_warps": self.warps,
                "num_stages": self.stages}


GEMM_CANDIDATES = (GemmConfig(64, 64, 32, 4, 3), GemmConfig(128, 128, 32, 8, 3), GemmConfig(128, 64, 32, 4, 3),
                   GemmConfig(64, 128, 32, 4, 3), GemmConfig(128, 128, 16, 8, 4), GemmConfig(128, 256, 32, 8, 3))


# tensor-core GEMMs (bfloat16 / float16 operands; the first is the renderer's default, GEMM_BLOCKS_LOWP)
GEMM_CANDIDATES_LOWP = (GemmConfig(128, 128, 64, 8, 3), GemmConfig(128, 256, 64, 8, 3), GemmConfig(128, 128, 64, 4, 4),
                        GemmConfig(64, 128, 64, 4, 4), GemmConfig(256, 128, 64, 8, 3), GemmConfig(128, 64, 64, 4, 4))


CUBLAS = GemmConfig(0, 0, 0, 0, 0, True)


def gemm_programs(extra, cfg: GemmConfig) -> int:
    batch, M, N, _ = extra
    return batch * (-(-M // cfg.bm)) * (-(-N // cfg.bn))


def _gemm_tuning_key(source: str, name: str, extra) -> str:
    import triton

    start = source.find(f"def {name}(")
    end = source.find("\n@triton.jit", start)
    body = source[start:end if end > 0 else None]
    digest = hashlib.sha256(body.replace(name, "K").encode()).hexdigest()[:16]
    return f"cuda-gemm:{_gpu_name()}:triton{triton.__version__}:{digest}:" + "x".join(str(v) for v in extra)


def _gpu_name() -> str:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    except Exception:  # noqa: BLE001
        return "unknown-gpu"


def measure_gemm(rt, launch, fn, args, extra, default: GemmConfig, bindings) -> GemmConfig:
    """Time the candidate tile configurations of one GEMM (``quick``: 3, ``full``: 6) and cuBLAS (followed by the
    GEMM's epilogue kernel, which the Triton candidates compute in their tiles) on its real operands (CUDA
    events, warm-up plus the minimum of 3 rounds of 3 launches); a candidate whose result
    differs from the default configuration's beyond float32 accumulation-order noise is dropped. Returns the
    fastest. ``rt``: the :class:`luminal.runtime.gpu.GPURuntime` (its buffers, cuBLAS views, search level and
    log)."""
    from .gpu_compile import NO_FP_FUSION, compile_parallel

    cupy = rt.memory.cupy
    stream = rt.memory.stream
    # the value a candidate computes: the fused epilogue's output where the GEMM has one (cuBLAS runs it after)
    checked = launch.out if launch.epilogue is None else launch.epilogue.out
    out = rt._buffers[checked]
    n_out = rt._sizes[checked]
    epilogue = None if launch.epilogue is None else rt._plain_call(launch.epilogue, bindings)
    results = []
    ref = None
    cands = GEMM_CANDIDATES_LOWP if "num_warps" in launch.constexprs else GEMM_CANDIDATES
    pool = cands if rt.search == "full" else cands[:3]
    pool = [default] + [c for c in pool if c != default]
    views = rt._cublas_views(launch, bindings)
    if views is not None:
        pool.append(CUBLAS)

    def run(cfg):
        if cfg.cublas:
            rt._cublas(launch, bindings, views)
            if epilogue is not None:
                epilogue()
        else:
            fn[(gemm_programs(extra, cfg),)](*args, **cfg.launch_kwargs(), **NO_FP_FUSION)

    compile_parallel([(fn, args, cfg.launch_kwargs()) for cfg in pool if not cfg.cublas])
    for cfg in pool:
        try:
            run(cfg)  # compile + warm up
            stream.synchronize()
        except Exception as e:  # noqa: BLE001 - e.g. out of shared memory for a large tile
            rt.search_log.append({"kernel": launch.name, "config": cfg.name, "error": str(e)[:200]})
            continue
        if ref is None:
            ref = out[:n_out].copy()
            scale = float(cupy.max(cupy.abs(ref))) if n_out else 0.0
        else:
            err = float(cupy.max(cupy.abs(out[:n_out] - ref))) if n_out else 0.0
            if not err <= 1e-4 * max(scale, 1.0) * max(1.0, extra[3] ** 0.5 / 8):
                rt.search_log.append({"kernel": launch.name, "config": cfg.name, "wrong": err})
                continue
        best = float("inf")
        for _ in range(3):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(3):
                run(cfg)
            end.record(stream)
            end.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(start, end) / 3 * 1e-3)
        results.append((best, cfg))
        rt.search_log.append({"kernel": launch.name, "config": cfg.name, "seconds": best,
                            "M": extra[1], "N": extra[2], "K": extra[3], "batch": extra[0]})
    if ref is not None:  # leave the default configuration's result in the output buffer
        with stream:
            out[:n_out] = ref
    best, cfg = min(results, key=lambda r: r[0])
    return GemmConfig(cfg.bm, cfg.bn, cfg.bk, cfg.warps, cfg.stages, cfg.cublas, seconds=best)
