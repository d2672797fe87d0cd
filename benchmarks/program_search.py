"""The measured search over the e-graph's candidate programs (issue 15: "for whole programs, the e-graph's K
extracted candidates"), per workload: what the candidates were, what each took, which one won.

Run:  python benchmarks/program_search.py [--cases W2,W3,W4,W5,W6,bert] [--level quick|full] [--budget 20]

Each workload (W2-W6 of ../shared/BENCHMARKS.md as built by ``egraph_ab.py``; ``bert``: a 6-layer MiniLM-shaped
encoder over symbolic (batch, seq) bound to 8 x 64, random weights) is compiled with
``compile(device="cpu", search=LEVEL)`` in a fresh tuning cache (a temporary ``LUMINAL_CACHE_DIR``, so nothing is
cached from earlier runs). The program search builds up to K candidates (quick 4, full 8), checks each against
the reference interpreter and times them round-robin in this process (min over rounds of the mean per
execute; ``luminal/runtime/program_search.py``). The table lists every candidate: what it switched relative to
the cost model's choice (candidate 0), its time, and whether it won or why it was dropped; then the time the
program search took. Asserts nothing about timings. OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def build(case: str):
    if case != "bert":
        from egraph_ab import build as build_w
        return build_w(case)
    import numpy as np

    import luminal as lm
    from luminal.models.bert import BertConfig, BertModel
    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536)
    model = BertModel(cfg, add_pooling_layer=False)
    rng = np.random.default_rng(0)
    model.load_state_dict({k: (rng.standard_normal(v.shape) * 0.05).astype(np.float32)
                           for k, v in model.state_dict().items()})
    cx = lm.Graph()
    ids = cx.tensor(("batch", "seq"), "int64")
    mask = cx.tensor(("batch", "seq"), "int64")
    out = model(ids, attention_mask=mask)
    (out[0] if isinstance(out, tuple) else out).retrieve()
    ids.set(rng.integers(0, 30522, (8, 64)))
    mask.set(np.ones((8, 64), np.int64))
    return cx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="W2,W3,W4,W5,W6,bert")
    ap.add_argument("--level", default="quick", choices=["quick", "full"])
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args()
    os.environ["LUMINAL_CACHE_DIR"] = tempfile.mkdtemp(prefix="luminal-progsearch-")
    print(f"# program search, level {args.level}, budget {args.budget:g} s per workload; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; fresh cache "
          f"{os.environ['LUMINAL_CACHE_DIR']}")
    print(f"{'case':6} {'cand':>4}  {'ms/step':>9}  {'vs 0':>6}  {'':7}  switched (relative to candidate 0)")
    for case in args.cases.split(","):
        cx = build(case)
        t0 = time.perf_counter()
        cx.compile(device="cpu", search=args.level, budget_s=args.budget)
        compile_s = time.perf_counter() - t0
        rep = cx.egraph_reports[-1]
        res = rep.program_search
        if res is None or res.skipped:
            why = res.skipped if res else ("one candidate: nothing to choose" if rep.program_choice else
                                           "no e-graph report")
            print(f"{case:6} not measured: {why}\n")
            continue
        base = res.seconds.get(0)
        for i in sorted(res.labels):
            t = res.seconds.get(i)
            ms = f"{t * 1e3:9.3f}" if t is not None else f"{'-':>9}"
            rel = f"{t / base:6.3f}" if t is not None and base else f"{'':>6}"
            mark = "winner" if i == res.winner else ("dropped" if i in res.rejected else "")
            why = f"  [{res.rejected[i]}]" if i in res.rejected else ""
            print(f"{case:6} {i:>4}  {ms}  {rel}  {mark:7}  {res.labels[i]}{why}")
        paired = "" if res.confirm_ratio is None else \
            f"; paired rounds: best challenger / candidate 0 = {res.confirm_ratio:.3f} (median)"
        print(f"{case:6} program search {res.elapsed:.1f} s of a {compile_s:.1f} s compile "
              f"(incl. the GEMM search){paired}\n")


if __name__ == "__main__":
    main()
