"""Eager training loop vs the compiled ``Trainer`` vs PyTorch eager: ms per step, same model and batches.

    python benchmarks/eager_loop.py [--steps 100] [--repeat 1] [--device cpu]

The eager loop is PyTorch's (``loss = F.cross_entropy(model(x), y); loss.backward(); opt.step();
opt.zero_grad()``) on luminal eager tensors: the first step compiles forward + backward + Adam into one graph,
later steps replay it from the compile cache (the table shows the compile count). ``Trainer.train_step`` runs
the graph built by ``opt.minimize`` (state carried in place). Medians over the timed steps, after warm-up.

The luminal columns are timed round-robin (one step of each in turn), so that load changes on a shared machine
hit them alike; PyTorch is timed in its own loop afterwards: its OpenMP workers keep spinning after each step
and would slow down whichever luminal step ran next. ``--repeat R`` runs the timing R times and reports the
median of the R medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _mlp(nn, sizes):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _time_all(fns: dict, steps: int, warmup: int = 3) -> dict:
    """Median ms per call of each function, timed round-robin (one call of each in turn), so that load changes
    on a shared machine hit every column alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: [] for k in fns}
    for _ in range(steps):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def run_case(name, sizes, batch, steps, device, repeat=1):
    import luminal as lm
    import luminal.nn as nn
    import luminal.nn.functional as F
    from luminal.training import Adam, Trainer

    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    Y = rng.integers(0, sizes[-1], batch).astype(np.int64)
    row = {"case": name}

    # luminal eager
    lm.set_default_device(device)
    model = _mlp(nn, sizes)
    opt = lm.optim.Adam(model.parameters(), lr=1e-3)
    before = lm.eager.stats()["compiles"]

    def eager_step():
        loss = F.cross_entropy(model(lm.from_numpy(X)), lm.from_numpy(Y))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    t0 = time.perf_counter()
    eager_step()
    row["eager first step s"] = time.perf_counter() - t0
    fns = {"luminal eager": eager_step}

    # luminal Trainer (lazy graph + minimize)
    model2 = _mlp(nn, sizes)
    trainer = Trainer(model2, Adam(model2.parameters(), lr=1e-3), F.cross_entropy, device=device)
    fns["luminal Trainer"] = lambda: trainer.train_step((X, Y))

    # luminal jit: the whole step traced once
    model3 = _mlp(nn, sizes)
    opt3 = lm.optim.Adam(model3.parameters(), lr=1e-3)

    @lm.jit
    def jit_step(x, y):
        loss = F.cross_entropy(model3(x), y)
        loss.backward()
        opt3.step()
        opt3.zero_grad()
        return loss
    fns["luminal jit"] = lambda: jit_step(X, Y)

    try:
        import torch
        torch.set_num_threads(max(1, torch.get_num_threads()))
        tm = torch.nn.Sequential(*[m for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
                                   for m in ([torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(sizes) - 2
                                                                        else []))])
        topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
        tx, ty = torch.from_numpy(X), torch.from_numpy(Y)

        def torch_step():
            loss = torch.nn.functional.cross_entropy(tm(tx), ty)
            loss.backward()
            topt.step()
            topt.zero_grad()
        torch_fn = {"torch eager": torch_step}
    except ImportError:
        torch_fn = None
        row["torch eager"] = float("nan")
    runs = []
    for _ in range(max(1, repeat)):
        times = _time_all(fns, steps)
        if torch_fn is not None:
            times.update(_time_all(torch_fn, steps))
        runs.append(times)
    row.update({k: statistics.median(r[k] for r in runs) for k in runs[0]})
    row["compiles eager+jit"] = lm.eager.stats()["compiles"] - before  # over all timed steps: 1 + 1 expected
    row["eager / Trainer"] = row["luminal eager"] / row["luminal Trainer"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1, help="repeat the timing; report the median of the medians")
    ap.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    args = ap.parse_args()
    cases = [("MLP 20-32-5, batch 64", (20, 32, 5), 64),
             ("MLP 784-512-10, batch 256 (W3)", (784, 512, 10), 256)]
    rows = [run_case(name, sizes, batch, args.steps, args.device, args.repeat) for name, sizes, batch in cases]
    cols = ["case", "torch eager", "luminal Trainer", "luminal eager", "luminal jit", "eager / Trainer",
            "compiles eager+jit", "eager first step s"]
    rep = f", median of {args.repeat} repeats" if args.repeat > 1 else ""
    print(f"ms per step (median of {args.steps}{rep}), device={args.device}")
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))


if __name__ == "__main__":
    main()
