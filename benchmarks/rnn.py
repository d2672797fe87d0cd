"""Recurrent layers: luminal (compiled ``device="cpu"``) vs PyTorch eager on CPU, ms per call.

    python benchmarks/rnn.py [--layers 2] [--hidden 256] [--input 256] [--seq 64] [--batch 32] [--steps 20]
                             [--kinds LSTM,GRU,RNN] [--threads N]

For each layer type: forward in eval mode, and forward + backward (the gradients of ``sum(output * r)`` with
respect to the input and every parameter: luminal builds them with ``luminal.training.grad`` into the same graph,
PyTorch runs ``loss.backward()``). The luminal graph is compiled once (its compile time is its own column) and
then ``execute()`` is timed; both sides get the same weights and data, and the outputs (forward) and input gradients
(fwd+bwd) are checked against each other. Medians over ``--steps`` calls after warm-up. luminal is compiled and timed first, then PyTorch
(whose OpenMP workers keep spinning after each call and would slow down the compiled library's kernels run next
in the same process). ``--threads N`` sets ``OMP_NUM_THREADS`` (read by the compiled library) and
``torch.set_num_threads``. The compile time includes the e-graph passes and the C compiler (a library already in
``LUMINAL_CACHE_DIR`` skips the latter). Nothing is asserted about the times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def _median_ms(fn, steps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run(kind: str, layers: int, hidden: int, inp: int, seq: int, batch: int, steps: int) -> dict:
    import torch

    import luminal as lm
    import luminal.nn as nn
    from luminal.compiler import GenericCompiler
    from luminal.training import grad

    torch.manual_seed(0)
    tm = getattr(torch.nn, kind)(inp, hidden, num_layers=layers).eval()
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    ra = rng.standard_normal((seq, batch, hidden)).astype(np.float32)
    row, results = {"kind": kind}, {}

    # luminal first, before PyTorch computes anything: PyTorch's OpenMP workers keep spinning after its calls
    # and slow down the compiled library's OpenMP kernels that run next (in this process, on few cores)
    for mode in ("forward", "fwd+bwd"):
        m = getattr(nn, kind)(inp, hidden, num_layers=layers).eval()
        m.load_state_dict(tm.state_dict())
        cx = lm.Graph()
        x = cx.tensor(xa.shape).set(xa)
        out = m(x)[0]
        targets = []
        if mode == "fwd+bwd":
            loss = (out * cx.tensor(ra.shape).set(ra)).sum()
            targets = grad(loss, [x] + m.parameters())
        for t in [out] + targets:
            t.retrieve()
        t0 = time.perf_counter()
        cx.compile(GenericCompiler(), device="cpu")
        cx.execute()
        row[f"{mode} compile s"] = time.perf_counter() - t0
        row[f"{mode} kernels"] = len(cx.runtime.program.kernels)
        row[f"{mode} luminal ms"] = _median_ms(cx.execute, steps)
        results[mode] = (targets[0] if targets else out).data()

    xt = torch.from_numpy(xa)
    with torch.no_grad():
        np.testing.assert_allclose(results["forward"], tm(xt)[0].numpy(), rtol=1e-4, atol=1e-4)

    def torch_forward():
        with torch.no_grad():
            tm(xt)
    row["forward torch ms"] = _median_ms(torch_forward, steps)

    xg, rt = torch.from_numpy(xa).requires_grad_(), torch.from_numpy(ra)

    def torch_step():
        tm.zero_grad()
        xg.grad = None
        (tm(xg)[0] * rt).sum().backward()
    torch_step()
    np.testing.assert_allclose(results["fwd+bwd"], xg.grad.numpy(), rtol=1e-3, atol=1e-4)
    row["fwd+bwd torch ms"] = _median_ms(torch_step, steps)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--kinds", default="LSTM")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{args.layers} layers, hidden {args.hidden}, input {args.input}, seq {args.seq}, batch {args.batch}; "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    cols = ["kind", "forward luminal ms", "forward torch ms", "fwd+bwd luminal ms", "fwd+bwd torch ms",
            "forward compile s", "fwd+bwd compile s", "forward kernels", "fwd+bwd kernels"]
    rows = [run(k.strip(), args.layers, args.hidden, args.input, args.seq, args.batch, args.steps)
            for k in args.kinds.split(",")]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(r[c] if isinstance(r[c], str) else f"{r[c]:.1f}" if isinstance(r[c], float)
                                else str(r[c]) for c in cols) + " |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
