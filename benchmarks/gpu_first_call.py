"""First-call time on a GPU: graph built -> first result, each in a fresh process with empty compiler caches
(luminal's, Triton's and Inductor's), luminal ``device="cuda"`` with its kernels compiled in parallel and one at a
time (``LUMINAL_PARALLEL_COMPILE=0``) beside ``torch.compile`` on the same GPU. Needs a CUDA device, triton,
cupy and a CUDA build of torch.

    python benchmarks/gpu_first_call.py [--only W6x16,W3x16] [--search off]

The cases are :mod:`gpu_workloads`'s. A cell is seconds from ``compile()`` (luminal) or the first call of the
``torch.compile``-d function to the result being on the device (synchronized); the interpreter start-up and the
imports are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import torch
torch.backends.cuda.matmul.allow_tf32 = False
from gpu_workloads import build_case
lum, tor, _ = build_case({case!r})
if {mode!r} == "torch.compile":
    f = torch.compile(tor(torch))
    t0 = time.perf_counter(); f(); torch.cuda.synchronize(); dt = time.perf_counter() - t0
else:
    import luminal as lm
    cx, out = lum(lm)
    t0 = time.perf_counter(); cx.compile(device="cuda", search={search!r}); cx.runtime.host_outputs = False
    cx.execute(); dt = time.perf_counter() - t0
print("RESULT", json.dumps(dt))
"""


def first_call(case: str, mode: str, search: str) -> float | str:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(tmp, "triton"), LUMINAL_CACHE_DIR=os.path.join(tmp, "lm"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   LUMINAL_PARALLEL_COMPILE="0" if mode == "luminal, one at a time" else "1")
        code = CHILD.format(here=HERE, case=case, mode=mode, search=search)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        return "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:120]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="W6x16,W3x16")
    ap.add_argument("--search", default="off", choices=["off", "quick", "full"])
    args = ap.parse_args()
    modes = ["torch.compile", "luminal, parallel", "luminal, one at a time"]
    print(f"| case | " + " | ".join(f"{m} s" for m in modes) + " |")
    print("|---" * (len(modes) + 1) + "|")
    for case in args.only.split(","):
        cells = []
        for m in modes:
            v = first_call(case, m, args.search)
            cells.append(f"{v:.2f}" if isinstance(v, float) else v)
        print(f"| {case} (search {args.search}) | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
