"""Node counts and pass times of GenericCompiler on the W5 transformer-layer forward graph, and the peak
intermediate memory before/after DepthFirst scheduling.

Run:  python benchmarks/compiler_passes.py
(W5's backward part needs autograd, which arrives with the training milestone; this is the forward graph.)
"""

import time

import numpy as np

from luminal.compiler import (DepthFirst, EqualitySaturation, Looped, RemoveSingleReductions, RemoveUnusedNodes,
                              Timed, peak_memory)
from workloads import torch_transformer_layer, transformer_layer


def main() -> None:
    t0 = time.perf_counter()
    cx, x, y, params = transformer_layer(batch=8)
    build = time.perf_counter() - t0
    nodes_before = len(cx.nodes)
    peak_before = peak_memory(cx)
    stages = [Timed(RemoveUnusedNodes(), "RemoveUnusedNodes"),
              Timed(Looped((RemoveSingleReductions(), RemoveUnusedNodes())), "Looped(SingleReduce, DCE)"),
              Timed(EqualitySaturation(), "EqualitySaturation"),
              Timed(RemoveUnusedNodes(), "RemoveUnusedNodes"),
              Timed(DepthFirst(), "DepthFirst")]
    rows = []
    for stage in stages:
        cx.compile(stage, (x, y))
        rows.append((stage.label, stage.seconds, len(cx.nodes)))
    peak_after = peak_memory(cx)
    print(f"W5 forward graph (batch 8, seq 128, d 256): built in {build * 1e3:.1f} ms")
    print(f"{'stage':<42}{'ms':>9}{'nodes after':>13}")
    print(f"{'(unoptimized)':<42}{'':>9}{nodes_before:>13}")
    for label, secs, n in rows:
        print(f"{label:<42}{secs * 1e3:>9.1f}{n:>13}")
    print(f"{'total GenericCompiler':<42}{sum(r[1] for r in rows) * 1e3:>9.1f}")
    print(f"peak intermediate memory: {peak_before / 2**20:.1f} MiB before, {peak_after / 2**20:.1f} MiB after "
          "(reference interpreter's materialized broadcast products included)")

    # correctness at batch 1 (the reference interpreter materializes matmul broadcasts: keep it small)
    cx1, x1, y1, params1 = transformer_layer(batch=1)
    cx1.execute()
    before = y1.data()
    from luminal.compiler import GenericCompiler
    cx1.compile(GenericCompiler(), (x1, y1))
    cx1.execute()
    want = torch_transformer_layer(x1.data(), {k: v.data() for k, v in params1.items()})
    print(f"batch-1 check: max |optimized - unoptimized| = {np.abs(y1.data() - before).max():.2e}, "
          f"max |luminal - torch| = {np.abs(y1.data() - want).max():.2e}")


if __name__ == "__main__":
    main()
