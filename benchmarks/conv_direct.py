"""Convolution training steps: luminal's direct convolution vs its packed implicit GEMM, PyTorch eager and JAX.

Run:  python benchmarks/conv_direct.py [--steps 20] [--only conv3d-16,conv4d-8] [--forward] [--symbolic] [--amp]

Each case is one convolution (no bias) and the gradients of ``0.5 * sum(y**2)`` with respect to the weight and the
input: luminal compiled for ``device="cpu"`` twice in this process (the default, with the direct kernels of
``luminal/codegen/gemm_direct.py``, and with ``LUMINAL_DIRECT_CONV=0`` while building and compiling: the packed
implicit GEMM and a GEMM + col2im input gradient), PyTorch eager (1-3 spatial dims; it has no 4-d convolution) and
``jax.jit`` of ``jax.value_and_grad`` over ``lax.conv_general_dilated`` (any rank). The steps alternate between
the frameworks; the table shows each one's minimum in ms (a noisy shared host: minima of interleaved runs compare,
see kernel_profile.py) and luminal's results are checked against PyTorch's (or JAX's) first. Asserts nothing;
OPENBLAS_CORETYPE is printed, never changed. The ``dw*`` / ``g4`` cases are grouped convolutions (depthwise:
groups = channels); ``--forward`` times the convolution alone (inference); ``--symbolic`` adds a column: luminal's
graph built over ``("batch", C, ...)`` (a symbolic batch, bound by ``set()``), compiled once; ``--amp`` builds
luminal's graphs under ``lm.autocast(bfloat16)`` and runs PyTorch under ``torch.autocast("cpu", bfloat16)`` (no JAX
column; results then compared within 3e-2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

CASES = {  # name: (input shape, out channels, kernel, stride, padding[, groups])
    "conv2d-16": ((16, 16, 32, 32), 32, 3, 1, 1),
    "conv2d-s2": ((16, 16, 32, 32), 32, 3, 2, 1),
    "conv2d-64x24": ((8, 64, 24, 24), 64, 3, 1, 1),   # rows of 24: the packed GEMM (no direct form applies)
    "conv3d-16": ((2, 16, 16, 16, 16), 16, 3, 1, 1),
    "conv3d-64": ((2, 64, 16, 16, 16), 64, 3, 1, 1),
    "conv4d-8": ((2, 8, 8, 8, 8, 16), 16, 3, 1, 1),
    "dw3-64": ((16, 64, 32, 32), 64, 3, 1, 1, 64),   # depthwise (MobileNet): one GEMM per channel
    "dw3-s2": ((16, 64, 32, 32), 64, 3, 2, 1, 64),   # its strided downsampling
    "dw7-96": ((8, 96, 28, 28), 96, 7, 1, 3, 96),    # ConvNeXt's 7x7 depthwise, rows of 28 = 16 + 12
    "g4-64": ((16, 64, 32, 32), 64, 3, 1, 1, 4),     # 4 groups (ResNeXt-style)
    "dw1d-512": ((4, 512, 2048), 512, 7, 1, 3, 512),  # 1-D depthwise over long sequences (audio, state-space models)
}


def _luminal(shape, cout, k, s, p, xa, wa, direct: bool, groups: int = 1, forward: bool = False,
             symbolic: bool = False, amp: bool = False):
    import contextlib

    import luminal as lm
    import luminal.nn.functional as F
    from luminal.training import grad

    old = os.environ.get("LUMINAL_DIRECT_CONV")
    if not direct:
        os.environ["LUMINAL_DIRECT_CONV"] = "0"
    try:
        cx = lm.Graph()
        x = cx.tensor(("batch",) + tuple(shape[1:]) if symbolic else shape).set(xa)
        w = cx.tensor(wa.shape).set(wa)
        with lm.autocast(lm.bfloat16) if amp else contextlib.nullcontext():
            y = getattr(F, f"conv{len(shape) - 2}d")(x, w, stride=s, padding=p, groups=groups)
            yf = y.cast(lm.float32)
            outs = [yf] + ([] if forward else grad((yf * yf).sum() * 0.5, [w, x]))
        for t in outs:
            t.retrieve()
        cx.compile(device="cpu")
    finally:
        if old is None:
            os.environ.pop("LUMINAL_DIRECT_CONV", None)
        else:
            os.environ["LUMINAL_DIRECT_CONV"] = old
    return cx.execute, lambda: [t.data() for t in outs]


def _torch(shape, xa, wa, s, p, groups=1, forward=False, amp=False):
    import contextlib

    import torch
    conv = getattr(torch.nn.functional, f"conv{len(shape) - 2}d", None)
    if conv is None:
        return None, None
    x, w = torch.from_numpy(xa).requires_grad_(), torch.from_numpy(wa).requires_grad_()

    def step():
        region = torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext()
        if forward:
            with torch.no_grad(), region:
                return [conv(x, w, stride=s, padding=p, groups=groups).float().numpy()]
        with region:
            y = conv(x, w, stride=s, padding=p, groups=groups).float()
        gw, gx = torch.autograd.grad((y * y).sum() * 0.5, [w, x])
        return [y.detach().numpy(), gw.numpy(), gx.numpy()]
    return step, step


def _jax(shape, xa, wa, s, p, groups=1, forward=False):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None
    n = len(shape) - 2

    def f(w, x):
        y = jax.lax.conv_general_dilated(x, w, (s,) * n, [(p, p)] * n, feature_group_count=groups)
        return (y * y).sum() * 0.5, y
    vg = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))
    fwd = jax.jit(lambda w, x: f(w, x)[1])
    x, w = jnp.asarray(xa), jnp.asarray(wa)

    def step():
        if forward:
            return (fwd(w, x),)
        (_, y), (gw, gx) = vg(w, x)
        return y, gw, gx

    def results():
        return [np.asarray(a) for a in step()]
    return (lambda: jax.block_until_ready(step())), results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--forward", action="store_true", help="the convolution alone (no gradients)")
    ap.add_argument("--symbolic", action="store_true", help="also luminal over a symbolic batch")
    ap.add_argument("--amp", action="store_true", help="luminal and PyTorch under bfloat16 autocast (no JAX)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    what = ("forward" if args.forward else "training step") + (", bfloat16 autocast" if args.amp else "")
    cols = ["luminal"] + (["symbolic"] if args.symbolic else []) + ["packed", "torch", "jax"]
    print(f"{'case':14s} " + " ".join(f"{c:>9s}" for c in cols) + f"   (min ms per {what})")
    names = [c for c in args.only.split(",") if c] or list(CASES)
    for name in names:
        shape, cout, k, s, p, *g = CASES[name]
        g = g[0] if g else 1
        rng = np.random.default_rng(0)
        xa = rng.standard_normal(shape).astype(np.float32)
        wa = (rng.standard_normal((cout, shape[1] // g) + (k,) * (len(shape) - 2)) * 0.1).astype(np.float32)
        fw, amp = args.forward, args.amp
        runs = {"luminal": _luminal(shape, cout, k, s, p, xa, wa, True, g, fw, amp=amp),
                **({"symbolic": _luminal(shape, cout, k, s, p, xa, wa, True, g, fw, True, amp)}
                   if args.symbolic else {}),
                "packed": _luminal(shape, cout, k, s, p, xa, wa, False, g, fw, amp=amp),
                "torch": _torch(shape, xa, wa, s, p, g, fw, amp),
                "jax": (None, None) if amp else _jax(shape, xa, wa, s, p, g, fw)}
        ref_name = next((f for f in ("torch", "jax") if runs[f][0] is not None), None)  # (none: no check)
        ref = runs[ref_name][1]() if ref_name == "torch" else None
        for mine in [c for c in ("luminal", "symbolic") if c in runs and ref_name]:
            runs[mine][0]()
            if ref is None:
                runs[ref_name][0]()
                ref = runs[ref_name][1]()
            for got, want in zip(runs[mine][1](), ref):
                err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
                if err > (3e-2 if amp else 1e-3):
                    print(f"  {name}: {mine} differs from {ref_name} by {err:.2e} of the largest value")
        times = {f: [] for f, (fn, _) in runs.items() if fn is not None}
        for f in times:  # warm-up (JAX compiles here)
            runs[f][0]()
        for _ in range(args.steps):
            for f in times:
                t = time.perf_counter()
                runs[f][0]()
                times[f].append(time.perf_counter() - t)
        cell = {f: f"{min(v) * 1e3:9.2f}" for f, v in times.items()}
        print(f"{name:14s} " + " ".join(cell.get(f, f"{'-':>9s}") for f in cols))


if __name__ == "__main__":
    main()
