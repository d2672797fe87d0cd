"""3x3 stride-1 convolutions (+ ReLU): luminal's Winograd kernels (F(4x4, 3x3) from 8 x 8 outputs, F(2x2, 3x3))
against its other kernels, PyTorch and JAX, in one process.

Run:  python benchmarks/winograd.py [--seconds 6] [--only w4-fwd,r56-b8]

Each case is one ``relu(conv2d(x, w, padding))`` in float32: luminal compiled three times in this process (the
default, with ``luminal/codegen/gemm_winograd.py``; ``LUMINAL_WINOGRAD=2``, F(2x2, 3x3) only; and
``LUMINAL_WINOGRAD=0`` while compiling: the direct or packed kernel it replaces), PyTorch eager and ``jax.jit``
(when installed). Luminal's compiled graphs alternate for
``--seconds`` per case, then PyTorch and then JAX run alone for half as long each; the table shows each one's
minimum in ms, and luminal's results are checked against PyTorch's. Asserts nothing; OPENBLAS_CORETYPE is
printed, never changed.
"""

from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import numpy as np

CASES = {  # name: (input shape, output channels, padding)
    "w4-fwd": ((64, 32, 26, 26), 64, 0),    # W4's conv2 forward
    "w4-dx": ((64, 64, 24, 24), 32, 2),     # the shape of its input gradient (a full convolution)
    "r56-b1": ((1, 64, 56, 56), 64, 1),     # ResNet stages at 224 x 224, batch 1 and 8
    "r28-b1": ((1, 128, 28, 28), 128, 1),
    "r56-b8": ((8, 64, 56, 56), 64, 1),
    "r28-b8": ((8, 128, 28, 28), 128, 1),
    "r14-b8": ((8, 256, 14, 14), 256, 1),
}


def _luminal(xa, wa, pad, env):
    import luminal as lm
    import luminal.nn.functional as F
    with mock.patch.dict(os.environ, env):  # (luminal reads its switches while compiling)
        cx = lm.Graph()
        x = cx.tensor(xa.shape, "float32").set(xa)
        w = cx.tensor(wa.shape, "float32").set(wa)
        y = F.conv2d(x, w, padding=pad).relu().retrieve()
        cx.compile(device="cpu")
        src = cx.runtime.source
        wino = "F(4x4)" if "Winograd F(4x4, 3x3)" in src else "F(2x2)" if "Winograd F(2x2, 3x3)" in src else ""

    def run():
        cx.execute()
        return y.data()
    return run, wino


def _torch(xa, wa, pad):
    import torch
    x, w = torch.from_numpy(xa), torch.from_numpy(wa)

    def run():
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, padding=pad).relu().numpy()
    return run


def _jax(xa, wa, pad):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    f = jax.jit(lambda x, w: jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), [(pad, pad)] * 2)))
    x, w = jnp.asarray(xa), jnp.asarray(wa)

    def run():
        return np.asarray(f(x, w).block_until_ready())
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    cols = ["default", "f2x2", "off", "torch", "jax"]
    print(f"{'case':8} {'shape':34} " + " ".join(f"{c:>9}" for c in cols) + "   off/def  f2x2/def torch/def  (min ms)")
    for name in args.only.split(","):
        xs, m, pad = CASES[name]
        rng = np.random.default_rng(0)
        xa = rng.standard_normal(xs).astype(np.float32)
        wa = (rng.standard_normal((m, xs[1], 3, 3)) / np.sqrt(9 * xs[1])).astype(np.float32)
        wino, taken = _luminal(xa, wa, pad, {})
        f2, _ = _luminal(xa, wa, pad, {"LUMINAL_WINOGRAD": "2"})
        off, _ = _luminal(xa, wa, pad, {"LUMINAL_WINOGRAD": "0"})
        # luminal's two kernels alternate (their A/B); then PyTorch, then JAX, each alone for half as long (with
        # JAX's runtime started first, luminal's kernels here ran up to 25 % slower)
        runs, best = [wino, f2, off], [np.inf] * 5
        for group, secs in (([0, 1, 2], args.seconds), ([3], args.seconds / 2), ([4], args.seconds / 2)):
            if group == [3]:
                runs.append(_torch(xa, wa, pad))
                ref = runs[3]()
                for r in runs[:3]:
                    err = np.max(np.abs(r() - ref)) / np.max(np.abs(ref))
                    assert err < 1e-4, (name, err)
            elif group == [4]:
                runs.append(_jax(xa, wa, pad))
            end = time.time() + secs
            while time.time() < end and all(runs[i] is not None for i in group):
                for i in group:
                    t = time.perf_counter()
                    runs[i]()
                    best[i] = min(best[i], time.perf_counter() - t)
        ms = [b * 1e3 for b in best]
        shape = f"{xs[1]}->{m} {xs[2]}x{xs[3]} b{xs[0]} " + (taken or "(not taken)")
        print(f"{name:8} {shape:34} " + " ".join(f"{v:9.3f}" if np.isfinite(v) else f"{'-':>9}" for v in ms)
              + f"   {ms[2] / ms[0]:7.2f} {ms[1] / ms[0]:9.2f} {ms[3] / ms[0]:9.2f}", flush=True)


if __name__ == "__main__":
    main()
