"""Attention on the CPU backend: the fused kernel (luminal/codegen/c_attention.py) against the unfused program,
PyTorch and JAX, in one process, alternating.

Run:  python benchmarks/attention.py [--rounds 15] [--cases all|causal-2048,...] [--train]

Each case is ``scaled_dot_product_attention(q, k, v)`` over (batch, heads, L, 64) float32 with L = S and a mask:
``none``, ``causal`` (``is_causal=True``) or ``padding`` (a bool key mask: sequence b keeps its first
``S * (1 - b / (2 * batch))`` keys, BERT's padded batch). Columns (min ms over ``--rounds`` alternating rounds;
every side runs the same inputs):
  fused       luminal, ``compile(device="cpu")`` (the default: the fused kernel).
  unfused     luminal with ``LUMINAL_FUSED_ATTENTION=0`` while compiling (scores GEMM, softmax, P.V GEMM).
  torch       ``torch.nn.functional.scaled_dot_product_attention`` (its CPU flash kernel), torch's threads.
  jax         ``jax.nn.dot_product_attention`` under ``jax.jit`` (XLA's CPU implementation), in a child process
              after the other sides' rounds (its threads slow the others' next call); n/a without jax.
  MB f / u    luminal's arena after a run (MiB), fused / unfused: the scores' and probabilities' memory.
  max|diff|   fused against torch (float32 both).
``--train`` times a training step instead: the gradients of ``sum((attention - u)^2)`` with respect to q, k, v
(luminal ``luminal.training.grad``; torch autograd; jax ``jax.grad``). OPENBLAS_CORETYPE is printed, never
changed. Asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _alternate import alternate  # noqa: E402

CASES = {  # name: (batch, heads, L = S, mask)
    "bert-32x128": (32, 12, 128, "padding"),
    "none-1024": (1, 12, 1024, "none"),
    "causal-512": (4, 12, 512, "causal"),
    "causal-2048": (1, 8, 2048, "causal"),
    "padding-512": (4, 12, 512, "padding"),
}


def _mask(batch, s, kind):
    if kind != "padding":
        return None
    keep = np.array([s - (s * b) // (2 * batch) for b in range(batch)])
    return (np.arange(s)[None, :] < keep[:, None]).reshape(batch, 1, 1, s)


def _luminal(shape, mask, causal, fused: bool, train: bool):
    import luminal as lm
    from luminal.nn.attention import scaled_dot_product_attention
    from luminal.training import grad

    os.environ["LUMINAL_FUSED_ATTENTION"] = "1" if fused else "0"
    try:
        cx = lm.Graph()
        q, k, v = (cx.tensor(shape) for _ in range(3))
        m = None if mask is None else cx.tensor(mask.shape, lm.DType.bool)
        y = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
        if train:
            u = cx.tensor(shape)
            outs = grad(((y - u) * (y - u)).sum(), [q, k, v])
            ins = (q, k, v, m, u)
        else:
            outs, ins = [y], (q, k, v, m)
        for o in outs:
            o.retrieve()
        cx.compile(device="cpu")
    finally:
        os.environ.pop("LUMINAL_FUSED_ATTENTION", None)
    return cx, ins, outs


def _jax_times(name: str, train: bool, rounds: int) -> list:
    """(In the child process) seconds per call of the case under ``jax.jit``, ``rounds`` calls after a warm-up."""
    import time

    import jax
    import jax.numpy as jnp

    b, h, s, kind = CASES[name]
    rng = np.random.default_rng(0)
    jq, jk, jv, ju = (jnp.asarray(rng.standard_normal((b, h, s, 64)).astype(np.float32).transpose(0, 2, 1, 3))
                      for _ in range(4))  # jax's layout: (batch, tokens, heads, dim)
    mask = _mask(b, s, kind)
    jm = None if mask is None else jnp.asarray(mask)

    def attend(q_, k_, v_):
        return jax.nn.dot_product_attention(q_, k_, v_, mask=jm, is_causal=kind == "causal")
    fn = jax.jit(jax.grad(lambda q_, k_, v_: ((attend(q_, k_, v_) - ju) ** 2).sum(), (0, 1, 2))) if train \
        else jax.jit(attend)
    jax.block_until_ready(fn(jq, jk, jv))
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        jax.block_until_ready(fn(jq, jk, jv))
        out.append(time.perf_counter() - t)
    return out


def _jax_child(name: str, train: bool, rounds: int) -> list:
    """JAX's times for a case, measured in a child process: XLA's CPU threads keep spinning after a call and
    slowed the next luminal call in the same process by a third (causal-2048: 34 -> 46 ms)."""
    import json
    import subprocess

    code = (f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import attention; print(json.dumps(attention._jax_times({name!r}, {train}, {rounds})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cases", default="all")
    ap.add_argument("--train", action="store_true")
    args = ap.parse_args(argv)
    names = list(CASES) if args.cases == "all" else args.cases.split(",")

    import torch
    try:
        import jax
    except ImportError:
        jax = None
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__ if jax else 'n/a'}")
    print(f"{'training step' if args.train else 'forward'}: min ms over {args.rounds} alternating rounds")
    print(f"{'case':<13} {'fused':>8} {'unfused':>8} {'torch':>8} {'jax':>8} | {'MB f':>7} {'MB u':>7} | max|diff|")
    for name in names:
        b, h, s, kind = CASES[name]
        shape, causal = (b, h, s, 64), kind == "causal"
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
        mask = _mask(b, s, kind)
        feeds = arrays[:3] + [mask] + ([arrays[3]] if args.train else [])
        sides, arena, results = {}, {}, {}
        for fused in (True, False):
            cx, ins, outs = _luminal(shape, mask, causal, fused, args.train)
            for t, a in zip(ins, feeds):
                if t is not None:
                    t.set(a)
            cx.execute()
            arena[fused] = cx.runtime._arena.size / 2 ** 20
            results[fused] = outs
            sides["fused" if fused else "unfused"] = cx.execute

        tq, tk, tv, tu = (torch.from_numpy(a) for a in arrays)
        tm = None if mask is None else torch.from_numpy(mask)

        def torch_step():
            if not args.train:
                with torch.no_grad():
                    return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal)
            ps = [t.detach().requires_grad_(True) for t in (tq, tk, tv)]
            y = torch.nn.functional.scaled_dot_product_attention(*ps, attn_mask=tm, is_causal=causal)
            return torch.autograd.grad(((y - tu) ** 2).sum(), ps)
        sides["torch"] = torch_step
        times = alternate(sides, args.rounds)
        times["jax"] = _jax_child(name, args.train, args.rounds) if jax is not None else []
        ref = torch_step()
        got = results[True][0].data().reshape(shape)
        want = (ref[0] if args.train else ref).detach().numpy()
        diff = float(np.nanmax(np.abs(got - want)))
        cells = " ".join(f"{min(times[k]) * 1e3:>8.2f}" if times[k] else f"{'n/a':>8}"
                         for k in ("fused", "unfused", "torch", "jax"))
        print(f"{name:<13} {cells} | {arena[True]:>7.1f} {arena[False]:>7.1f} | {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
