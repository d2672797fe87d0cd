"""Before/after table of the e-graph on W1-W6 (issue 14, "Targets": no regression, name the rewrites that won).

Run:  python benchmarks/egraph_ab.py [--cases W1,W2,W3,W4,W5,W6] [--rounds 5] [--seconds 1]

Each workload is compiled for the CPU three times in one process: "no e-graph" with ``LUMINAL_EGRAPH=0`` (the
pass pipeline without saturation: unit reductions removed, CSE); "before" runs EqualitySaturation with the
former rulesets (algebra, approx, reductions) and the per-op cost table (``extract.default_cost``); "after" runs
the defaults (plus the layout ruleset, the size-aware cost model of the cpu backend, the DAG-cost check). The
table shows the node count, the rewrites that fired and changed the program (commutativity and analysis facts
left out), whether the generated C is byte-identical to the "no e-graph" one, and the per-step time of each,
measured interleaved (min over rounds of the mean of a timed loop). W1 is 1024^3 ``A @ B``, W2 the tanh-GELU of
16M elements (``../shared/BENCHMARKS.md``). Asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import luminal as lm  # noqa: E402
from luminal.compiler.egraph import EqualitySaturation  # noqa: E402
from luminal.compiler.egraph.extract import default_cost  # noqa: E402

BEFORE = dict(rulesets=("algebra", "approx", "reductions"), op_cost=default_cost)
_init = EqualitySaturation.__init__


def build(case: str):
    import numpy as np
    import training_workloads as T
    import workloads as W

    rng = np.random.default_rng(0)
    if case == "W1":
        cx = lm.Graph()
        a, b = (cx.tensor((1024, 1024)).set(rng.standard_normal((1024, 1024)).astype(np.float32)) for _ in "ab")
        (a @ b).retrieve()
        return cx
    if case == "W2":
        cx = lm.Graph()
        z = cx.tensor((1 << 24,)).set(rng.standard_normal(1 << 24).astype(np.float32)) * 1.5 + 0.5
        (0.5 * z * (1 + ((2 / np.pi) ** 0.5 * (z + 0.044715 * z * z * z)).tanh())).retrieve()
        return cx

    if case in ("W3", "W4"):
        import luminal.nn.functional as F
        from luminal.training import SGD, Adam

        data = T.inputs(case)
        model = T._luminal_model(case)
        model.load_state_dict(data["params"])
        cx = lm.Graph()
        x = cx.tensor(data["x"].shape).set(data["x"])
        y = cx.tensor(data["y"].shape, "int64").set(data["y"])
        loss = F.cross_entropy(model(x), y).retrieve()
        opt = Adam(model.parameters(), lr=1e-3) if case == "W3" else SGD(model.parameters(), lr=0.01, momentum=0.9)
        opt.minimize(loss)
        return cx
    cx, x, y, params = W.transformer_layer(batch=8 if case == "W5" else 1)
    if case == "W5":
        from luminal.training import grad

        for g in grad(y.mean(), list(params.values())):
            g.retrieve()
    return cx


def compiled(case: str, mode: str):
    """``case`` compiled for the cpu with ``mode`` "none" (LUMINAL_EGRAPH=0), "before" or "after"."""
    if mode == "before":
        EqualitySaturation.__init__ = lambda self, *a, **k: _init(self, **BEFORE)
    if mode == "none":
        os.environ["LUMINAL_EGRAPH"] = "0"
    try:
        cx = build(case)
        cx.compile(device="cpu")
    finally:
        EqualitySaturation.__init__ = _init
        os.environ.pop("LUMINAL_EGRAPH", None)
    reports = cx.__dict__.get("egraph_reports", [])
    fired = reports[-1].rules_fired if reports else {}
    changed = sorted({ch_rule for rep in reports for ch in rep.changes for ch_rule in ch.get("rules", [])})
    return cx, {k: v for k, v in fired.items() if not k.startswith(("nonneg", "add-comm", "mul-comm"))}, changed


def step_ms(cx, seconds: float) -> float:
    cx.execute()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        cx.execute()
        n += 1
    return (time.perf_counter() - t0) / max(n, 1) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="W1,W2,W3,W4,W5,W6")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed loop length per round and variant")
    args = ap.parse_args()
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; ms per step, min over "
          f"{args.rounds} interleaved rounds")
    print(f"{'case':<5}{'nodes n/b/a':>14}{'same C':>8}{'none ms':>9}{'before ms':>11}{'after ms':>10}"
          f"  rewrites in the program (after)")
    for case in args.cases.split(","):
        n, _, _ = compiled(case, "none")
        b, _, _ = compiled(case, "before")
        a, fired, changed = compiled(case, "after")
        times = {k: [] for k in "nba"}
        for _ in range(args.rounds):
            for k, cx in (("n", n), ("b", b), ("a", a)):
                times[k].append(step_ms(cx, args.seconds))
        same = "yes" if n.runtime.source == a.runtime.source else "no"
        rules = ", ".join(r for r in changed if r not in ("its inputs were rewritten",)) or "-"
        nodes = f"{len(n.nodes)}/{len(b.nodes)}/{len(a.nodes)}"
        print(f"{case:<5}{nodes:>14}{same:>8}{min(times['n']):>9.2f}{min(times['b']):>11.2f}{min(times['a']):>10.2f}"
              f"  {rules}")
        print(f"{'':<5}fired (matches): {fired}")


if __name__ == "__main__":
    main()
