"""Time to build and reference-execute a ~1000-node graph (the core-engine milestone's number).

Run:  python benchmarks/graph_build.py
The graph is a transformer-like stack of small blocks (matmul, softmax, layer norm, GELU, residuals) on
(batch=4, seq=16, d=32) inputs, repeated until it has at least 1000 nodes.
"""

import statistics
import time

import numpy as np

import luminal as lm


def build(target_nodes: int = 1000):
    rng = np.random.default_rng(0)
    cx = lm.Graph()
    x = cx.tensor(("batch", 16, 32), name="x").set(rng.standard_normal((4, 16, 32)).astype(np.float32))
    w = cx.tensor((32, 32), name="w").set(rng.standard_normal((32, 32)).astype(np.float32) / 6)
    h = x
    while len(cx.nodes) < target_nodes:
        att = (h @ h.transpose(-1, -2) * (1 / 32 ** 0.5)).softmax(-1) @ h
        h = (h + att).layer_norm(-1)
        h = h + (h @ w).gelu("tanh")
    out = h.sum().retrieve()
    return cx, out


def main() -> None:
    builds, execs = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        cx, out = build()
        t1 = time.perf_counter()
        cx.execute()
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        execs.append(t2 - t1)
    print(f"nodes: {len(cx.nodes)}  (ops: {cx.summary().splitlines()[1].strip()})")
    print(f"{'phase':<22}{'median ms':>10}{'min ms':>10}{'max ms':>10}")
    for name, xs in (("build", builds), ("execute (reference)", execs)):
        print(f"{name:<22}{statistics.median(xs) * 1e3:>10.1f}{min(xs) * 1e3:>10.1f}{max(xs) * 1e3:>10.1f}")


if __name__ == "__main__":
    main()
