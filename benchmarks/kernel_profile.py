"""Per-kernel minimum times of a training workload, and one-process A/B comparisons, on a noisy machine.

Run:  python benchmarks/kernel_profile.py W5 [--amp] [--steps 40] [--top 25]
      python benchmarks/kernel_profile.py W5 --amp --ab LUMINAL_LAYOUT=0      (A: with the variable, B: without)
      python benchmarks/kernel_profile.py W4 --torch                          (luminal and PyTorch, alternating)

W3, W4 and W5 are ``benchmarks/training_workloads.py``'s steps (``--amp``: built under ``lm.autocast(bfloat16)``;
with ``--torch``, PyTorch runs under ``torch.autocast("cpu", bfloat16)``). Every step's kernels are timed with
``LUMINAL_PROFILE=1``; the table shows each kernel's *minimum* over the steps, and their sum. On a shared host
whose speed changes by 2x from one minute to the next (this machine), minima of interleaved runs in one process
are what compares; medians of separate processes do not. ``--ab VAR=VALUE`` builds the workload twice in one
process -- once with the environment variable set while compiling, once without -- and alternates their steps;
``--torch`` alternates luminal's step with PyTorch eager's. Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time

import numpy as np

os.environ["LUMINAL_PROFILE"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _build(case, data, amp):
    import luminal as lm
    import training_workloads as tw
    before = {id(o) for o in gc.get_objects() if isinstance(o, lm.Graph)}
    step, _ = tw.build_luminal(case, data, amp=amp)
    graphs = [o for o in gc.get_objects() if isinstance(o, lm.Graph) and id(o) not in before
              and getattr(o, "runtime", None) is not None]
    return step, graphs[0]


class _Timer:
    """Per-kernel time of one compiled graph, step by step (the runtime's cumulative profile, differenced)."""

    def __init__(self, cx):
        self.cx, self.rt = cx, cx.runtime
        self.buf = (ctypes.c_double * len(self.rt.cprogram.groups))()
        self.mins = np.full(len(self.rt.cprogram.groups), np.inf)
        self.steps: list = []

    def _read(self):
        self.rt._lib.luminal_profile(self.buf)
        return np.array(list(self.buf))

    def run(self, step):
        before = self._read()
        t = time.perf_counter()
        step()
        self.steps.append(time.perf_counter() - t)
        self.mins = np.minimum(self.mins, self._read() - before)

    def report(self, label, top):
        from luminal.runtime.profile import profile_table
        s = np.array(self.steps) * 1e3
        print(f"{label}: step min {s.min():.2f} median {np.median(s):.2f} ms; sum of per-kernel minima "
              f"{self.mins.sum() * 1e3:.2f} ms")
        if top:
            table = profile_table(self.cx, self.rt.program, self.rt.cprogram.groups, list(self.mins * 1e3), top)
            print(table.replace("seconds", "min ms "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=["W3", "W4", "W5"])
    ap.add_argument("--amp", action="store_true", help="build under lm.autocast(bfloat16)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--ab", default=None, help="VAR=VALUE: a second build compiled with this variable set")
    ap.add_argument("--torch", action="store_true", help="alternate with PyTorch eager's step")
    args = ap.parse_args()
    import training_workloads as tw
    data = tw.inputs(args.case)
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    runs = []
    if args.ab:
        var, _, value = args.ab.partition("=")
        old = os.environ.get(var)
        os.environ[var] = value
        step, cx = _build(args.case, data, args.amp)
        runs.append((f"with {args.ab}", step, _Timer(cx)))
        if old is None:
            os.environ.pop(var)
        else:
            os.environ[var] = old
    step, cx = _build(args.case, data, args.amp)
    runs.append(("luminal" + (" (autocast bf16)" if args.amp else ""), step, _Timer(cx)))
    torch_times: list = []
    torch_step = None
    if args.torch:
        inner = tw.build_torch(args.case, data, compiled=False)[0]
        if args.amp:
            import torch

            def torch_step():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return inner()
        else:
            torch_step = inner
    for _ in range(3):
        for _, step, _ in runs:
            step()
        if torch_step is not None:
            torch_step()
    for _ in range(args.steps):
        for _, step, timer in runs:
            timer.run(step)
        if torch_step is not None:
            t = time.perf_counter()
            torch_step()
            torch_times.append(time.perf_counter() - t)
    for label, _, timer in runs:
        timer.report(label, args.top)
    if torch_times:
        s = np.array(torch_times) * 1e3
        print(f"torch eager{' (autocast bf16)' if args.amp else ''}: step min {s.min():.2f} median "
              f"{np.median(s):.2f} ms")


if __name__ == "__main__":
    main()
