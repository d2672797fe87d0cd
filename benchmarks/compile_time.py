"""Cold and cached compile time on the CPU backend, split into phases, and its growth with model depth.

Run:  python benchmarks/compile_time.py [--layers 1,6,12,24] [--repeats 3]

Every measurement runs in a fresh process with its own empty ``LUMINAL_CACHE_DIR`` (cold) and then again
with the cache it filled (cached). Phases: ``build`` (graph construction), ``passes`` (the compiler passes
given to ``compile``, e.g. ``GenericCompiler`` / equality saturation), ``lower`` (kernel partitioning and C
rendering), ``cc`` (the C compiler; 0 on a cache hit) -- ``compile`` is passes + lower + cc; the modules that
``compile`` imports lazily are imported before the clock starts (import time is not compile time). Medians over
``--repeats`` runs. ``newprog`` (W5 cases): another batch size compiled into the cache the cold run filled: a
new program whose GEMM routines (library parts, luminal/codegen/library.py) are cached. Targets (issue 14): W6 <= 1 s, W5 <= 2 s, the symbolic BERT encoder <= 3 s, a 24-layer
encoder <= 10 s, with compile time growing at most linearly in the layer count.

Workloads: W6 (transformer layer inference, batch 1, ``GenericCompiler``), W5 (the same layer's forward +
backward, batch 8), ``W5-bf16`` (W5 built under ``lm.autocast(bfloat16)``; not in the default list), ``bert-L`` (``luminal.nn.TransformerEncoder`` of L MiniLM-shaped layers: d 384, 12 heads,
FFN 1536, erf GELU, bool padding mask, over symbolic ``("batch", "seq")``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {here!r})
import luminal.runtime.cpu as cpu
import luminal.compiler.base as cbase
# the modules compile() imports lazily are imported before the clock starts: module import is not compile time
# (and this matters where PYTHONDONTWRITEBYTECODE=1 makes every import compile its source)
import luminal.compiler.egraph.saturate, luminal.compiler.generic, luminal.runtime.search, luminal.codegen.c  # noqa
import luminal.runtime.tuning  # noqa
phase = {{"cc": 0.0, "passes": 0.0}}
_build, _run = cpu.build_program, cbase.run
def build_program(p):  # (the program and its library parts, built concurrently)
    t = time.perf_counter(); out = _build(p); phase["cc"] += time.perf_counter() - t; return out
depth = [0]
def run_passes(*a, **k):  # run() recurses into sequences: time the outermost call only
    depth[0] += 1
    t = time.perf_counter()
    try:
        return _run(*a, **k)
    finally:
        depth[0] -= 1
        if depth[0] == 0:
            phase["passes"] += time.perf_counter() - t
cpu.build_program, cbase.run = build_program, run_passes
case = {case!r}
t0 = time.perf_counter()
compiler = None
if case in ("W6", "W5", "W5-bf16"):
    import contextlib
    import luminal as lm
    from workloads import transformer_layer
    from luminal.compiler import GenericCompiler
    batch = int(os.environ.get("LUMINAL_CT_BATCH", "1" if case == "W6" else "8"))
    with lm.autocast(lm.bfloat16) if case == "W5-bf16" else contextlib.nullcontext():
        cx, x, y, params = transformer_layer(batch=batch)
    remap = y
    if case in ("W5", "W5-bf16"):
        from luminal.training import grad
        with lm.autocast(lm.bfloat16) if case == "W5-bf16" else contextlib.nullcontext():
            grads = grad(y.mean(), list(params.values()))
        for g in grads:
            g.retrieve()
        remap = grads
    else:
        compiler = GenericCompiler()
else:
    import luminal as lm
    from luminal.nn.transformer import TransformerEncoder, TransformerEncoderLayer
    layers = int(case.split("-")[1])
    layer = TransformerEncoderLayer(384, 12, 1536, dropout=0.0, activation="gelu", layer_norm_eps=1e-12,
                                    batch_first=True)
    enc = TransformerEncoder(layer, layers).eval()
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", 384))
    pad = cx.tensor(("batch", "seq"), dtype="bool")
    remap = enc(x, src_key_padding_mask=pad).retrieve()
t1 = time.perf_counter()
cx.compile(compiler, remap, device="cpu")
t2 = time.perf_counter()
# lowering + C rendering happen inside compile when the runtime is attached: lower = compile - passes - cc
print(json.dumps({{"build": t1 - t0, "compile": t2 - t1, "passes": phase["passes"], "cc": phase["cc"],
                  "lower": (t2 - t1) - phase["passes"] - phase["cc"]}}))
"""


def run(case: str, cache: str, batch: int | None = None) -> dict:
    env = dict(os.environ, LUMINAL_CACHE_DIR=cache)
    if batch is not None:
        env["LUMINAL_CT_BATCH"] = str(batch)
    out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, case=case)], env=env,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{case}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="1,6,12,24", help="encoder depths for the growth curve")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=None, help="comma-separated subset, e.g. W6,W5,bert-6")
    args = ap.parse_args()
    cases = args.cases.split(",") if args.cases else \
        ["W6", "W5"] + [f"bert-{n}" for n in args.layers.split(",")]
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; medians of {args.repeats} runs; "
          "seconds")
    print(f"{'case':<10}{'kind':<8}{'build':>8}{'passes':>8}{'lower':>8}{'cc':>8}{'compile':>9}")
    curve = []
    for case in cases:
        cold, cached, new = [], [], []
        for _ in range(args.repeats):
            cache = tempfile.mkdtemp(prefix="luminal_ct_")
            cold.append(run(case, cache))
            cached.append(run(case, cache))
            if case.startswith("W5"):  # another batch size: a new program, its GEMM library parts cached
                new.append(run(case, cache, batch=4))
        for kind, rows in (("cold", cold), ("cached", cached), ("newprog", new)):
            if not rows:
                continue
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(f"{case:<10}{kind:<8}{med['build']:>8.2f}{med['passes']:>8.2f}{med['lower']:>8.2f}"
                  f"{med['cc']:>8.2f}{med['compile']:>9.2f}", flush=True)
            if kind == "cold" and case.startswith("bert-"):
                curve.append((int(case.split("-")[1]), med["compile"], med["passes"]))
    if len(curve) >= 2:
        (l0, c0, p0), (l1, c1, p1) = curve[0], curve[-1]
        print(f"\ngrowth {l0} -> {l1} layers: compile x{c1 / c0:.2f}, passes x{(p1 / p0) if p0 > 0 else float('nan'):.2f}"
              f" (layers x{l1 / l0:.0f})")


if __name__ == "__main__":
    main()
