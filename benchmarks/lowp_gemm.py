"""Matrix products with bfloat16 operands: luminal (CPU backend) against PyTorch and JAX, in one process.

Run:  python benchmarks/lowp_gemm.py [--shapes 1x4096x4096,32x4096x4096,256x1024x1024,1024x1024x1024]
                                    [--reps 20] [--no-amx]

Each shape ``MxKxN`` is ``x (M, K) @ w.T`` with ``w`` an ``(N, K)`` weight (PyTorch's Linear layout). Columns,
median (min) ms over ``--reps`` calls, the implementations called in turn so that load changes hit all alike:

  lum f32        float32 x float32 (OpenBLAS / luminal's GEMV and dot kernels)
  lum bf16       both operands stored bfloat16, output bfloat16 (luminal.codegen.gemm_lowp: AMX tiles where the
                 CPU has them, else AVX512-BF16 / converting kernels)
  lum f32*bf16w  float32 activations times a bfloat16 weight (weight-only bfloat16), float32 output
  torch f32, torch bf16    torch.nn.functional.linear (oneDNN; AMX for bfloat16 where available)
  jax f32, jax bf16        jax.jit(x @ w.T) (XLA:CPU)

``--no-amx`` sets ``LUMINAL_AMX=0`` (luminal's fallback kernels). Timings are not asserted anywhere; on a
shared machine compare columns of one run only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="1x4096x4096,32x4096x4096,256x1024x1024,1024x1024x1024")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--no-amx", action="store_true")
    args = parser.parse_args()
    if args.no_amx:
        os.environ["LUMINAL_AMX"] = "0"

    import luminal as lm

    try:
        import torch
    except ImportError:
        torch = None
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None

    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"LUMINAL_AMX={os.environ.get('LUMINAL_AMX', '(unset)')}; median (min) ms")
    rows = []
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((n, k)) * k ** -0.5).astype(np.float32)
        fns = {}
        for name, xdt, wdt in (("lum f32", "float32", "float32"), ("lum bf16", "bfloat16", "bfloat16"),
                               ("lum f32*bf16w", "float32", "bfloat16")):
            cx = lm.Graph()
            x, W = cx.tensor((m, k), xdt).set(a), cx.tensor((n, k), wdt).set(w)
            (x @ W.permute((1, 0))).retrieve()
            cx.compile(device="cpu")
            fns[name] = cx.execute
        if torch is not None:
            ta, tw = torch.from_numpy(a), torch.from_numpy(w)
            tab, twb = ta.bfloat16(), tw.bfloat16()
            fns["torch f32"] = lambda: torch.nn.functional.linear(ta, tw)
            fns["torch bf16"] = lambda: torch.nn.functional.linear(tab, twb)
        if jax is not None:
            f = jax.jit(lambda x, y: x @ y.T)
            ja, jw = jnp.asarray(a), jnp.asarray(w)
            jab, jwb = ja.astype(jnp.bfloat16), jw.astype(jnp.bfloat16)
            fns["jax f32"] = lambda: f(ja, jw).block_until_ready()
            fns["jax bf16"] = lambda: f(jab, jwb).block_until_ready()
        times = {name: [] for name in fns}
        ctx = torch.no_grad() if torch is not None else None
        if ctx is not None:
            ctx.__enter__()
        for fn in fns.values():
            fn()
            fn()
        for _ in range(args.reps):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        if ctx is not None:
            ctx.__exit__(None, None, None)
        rows.append((shape, {name: (statistics.median(v) * 1e3, min(v) * 1e3) for name, v in times.items()}))
    names = list(rows[0][1])
    print(f"{'M x K x N':<18}" + "".join(f"{name:>17}" for name in names))
    for shape, cells in rows:
        print(f"{shape:<18}" + "".join(f"{cells[name][0]:>9.2f} ({cells[name][1]:>5.2f})" for name in names))


if __name__ == "__main__":
    main()
