"""An embedding table's gradient (a Gather's data gradient: a ScatterAdd): luminal vs PyTorch eager, one process.

Run:  python benchmarks/embedding_grad.py [--vocab 30522] [--dim 384] [--batch 32] [--seq 128] [--rounds 10]

The loss is ``sum(Embedding(ids) * r)`` with random ids and weights ``r`` (BERT-base's vocabulary and
MiniLM's width by default); luminal's gradient graph is compiled once for ``device="cpu"``, torch runs
``(emb(ids) * r).sum().backward()``. Both alternate in one process; each reports its minimum and median ms
over ``--rounds`` (a shared host's speed changes from one minute to the next: compare within one run). The
check compares luminal's gradient with numpy's ``np.add.at`` (bit for bit: the same summation order).
Asserts nothing about timings. OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _alternate import alternate, print_times  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    import luminal as lm
    import luminal.nn as nn
    from luminal.training import grad

    V, D, B, S = args.vocab, args.dim, args.batch, args.seq
    rng = np.random.default_rng(0)
    ids_np = rng.integers(0, V, (B, S)).astype(np.int64)
    r_np = rng.standard_normal((B, S, D)).astype(np.float32)
    cx = lm.Graph()
    emb = nn.Embedding(V, D)
    ids = cx.tensor(("batch", "seq"), dtype="int64").set(ids_np)
    r = cx.tensor(("batch", "seq", D)).set(r_np)
    (gw,) = grad((emb(ids) * r).sum(), [emb.weight])
    gw.retrieve()
    t0 = time.perf_counter()
    cx.compile(device="cpu")
    compile_s = time.perf_counter() - t0
    cx.execute()
    exp = np.zeros((V, D), np.float32)
    np.add.at(exp, ids_np.reshape(-1), r_np.reshape(-1, D))
    check = "exact" if np.array_equal(gw.data(), exp) else f"max |diff| {np.abs(gw.data() - exp).max():.3g}"
    try:
        import torch
        te = torch.nn.Embedding(V, D)
        ti, tr = torch.from_numpy(ids_np), torch.from_numpy(r_np)

        def torch_step():
            te.zero_grad(set_to_none=True)
            (te(ti) * tr).sum().backward()
    except ImportError:
        torch_step = None
    times = alternate({"luminal": cx.execute, "torch": torch_step}, args.rounds)
    print_times(f"embedding gradient: vocabulary {V} x {D}, ids {B} x {S} (luminal: symbolic batch/seq, compile "
                f"{compile_s:.2f} s; check vs np.add.at: {check})", times)

if __name__ == "__main__":
    main()
