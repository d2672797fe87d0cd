"""GPU workloads (../shared/BENCHMARKS.md scaled to a GPU) on luminal ``device="cuda"`` beside PyTorch on the same
GPU, in one run. Needs a CUDA device, triton, cupy and a CUDA build of torch (the peer); prints one table.

    python benchmarks/gpu_workloads.py [--only W1-4096,W2,...] [--seconds 2]   (default: every case below, the
    bf16 autocast ones included, W1 at 4096 and 8192)

Cases (float32, no TF32 anywhere: ``torch.backends.cuda.matmul.allow_tf32 = False``, luminal's ``tl.dot`` runs
with ``input_precision="ieee"``):

* ``W1-n``: ``A @ B``, n x n x n; GFLOP/s.
* ``W2``: the tanh-GELU chain of W2 over 16M elements; ms.
* ``W6x16``: the W5/W6 pre-LN encoder layer forward at batch 16, seq 128; ms.
* ``W3x16``: the W3 MLP training step (forward, backward, Adam) at batch 4096; ms.
* ``W4x16``: the W4 CNN training step (two 3x3 convolutions, max pool, two linear layers; SGD with momentum) at
  batch 1024; ms.
* ``W5x16``: the W5 encoder layer's forward and all parameter gradients at batch 128, seq 128; ms (the ``ffn1``
  weight's gradient is compared).
* ``<case>-bf16`` (e.g. ``W1-4096-bf16``, ``W6x16-bf16``, ``W3x16-bf16``): the case built under bfloat16 autocast
  (``lm.autocast(dtype=lm.bfloat16)`` / ``torch.autocast("cuda", dtype=torch.bfloat16)``); results are compared
  with torch's autocast result at 3e-2.

Columns per case: torch eager, torch.compile (skipped with ``--no-compile``), luminal ``execute()`` with numpy data
set once (unchanged inputs are not copied again; the kept results are copied to the host every call), luminal
``execute()`` with the results left on the device (``runtime.host_outputs = False``), and luminal kernels only
(``GPURuntime.time_kernels``: the launches alone, a CUDA-graph replay once captured, device-synchronized).
Each cell is the median over timed calls (min and max beside it); the first call (compile) is timed alone.
``kernels (execute replays / calls)``: launches per step, and how many of the timed ``execute()`` calls replayed a
captured CUDA graph. ``--profile N`` prints a cProfile of N more executes (results on the device).
Every framework's result is checked against torch's before its time is printed.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _stats(times):
    ms = [t * 1e3 for t in times]
    return statistics.median(ms), min(ms), max(ms)


def _time_calls(fn, sync, seconds: float, max_calls: int = 1000):
    fn()
    sync()
    times = []
    end = time.perf_counter() + seconds
    while (time.perf_counter() < end or len(times) < 3) and len(times) < max_calls:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def _torch_training_step(torch, model, opt, xs, ys):
    """One cross-entropy training step of ``model`` (on the GPU) with ``opt`` on the batch ``xs``, ``ys``."""
    tx, ty = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        opt.step()
        return loss
    return step


def build_case(case: str):
    """Returns ``(luminal graph builder, torch function builder, flops or None)``; the data is made here."""
    if case.endswith("-bf16"):
        lum, tor, flops = build_case(case[:-len("-bf16")])

        def lum_bf16(lm):
            with lm.autocast(dtype=lm.bfloat16):
                return lum(lm)

        def tor_bf16(torch):
            f = tor(torch)

            def g():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return f()
            return g
        return lum_bf16, tor_bf16, flops
    rng = np.random.default_rng(0)
    if case.startswith("W1"):
        n = int(case.split("-")[1])
        a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)

        def lum(lm):
            cx = lm.Graph()
            x, y = cx.tensor((n, n)).set(a), cx.tensor((n, n)).set(b)
            return cx, (x @ y).retrieve()

        def tor(torch):
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            return lambda: ta @ tb
        return lum, tor, 2.0 * n ** 3
    if case == "W2":
        x0 = rng.standard_normal(16 * 1024 * 1024).astype(np.float32)
        c = math.sqrt(2 / math.pi)

        def lum(lm):
            cx = lm.Graph()
            x = cx.tensor(x0.shape).set(x0)
            z = x * 1.5 + 0.5
            return cx, (0.5 * z * (1.0 + (c * (z + 0.044715 * z * z * z)).tanh())).retrieve()

        def tor(torch):
            tx = torch.from_numpy(x0).cuda()

            def f():
                z = tx * 1.5 + 0.5
                return 0.5 * z * (1.0 + torch.tanh(c * (z + 0.044715 * z * z * z)))
            return f
        return lum, tor, None
    if case == "W6x16":
        from workloads import torch_transformer_layer_t, transformer_layer
        holder = {}

        def lum(lm):
            cx, x, y, params = transformer_layer(batch=16)
            holder["data"] = {"x": x.data(), **{k: v.data() for k, v in params.items()}}
            return cx, y.retrieve()

        def tor(torch):
            if "data" not in holder:
                lum(__import__("luminal"))
            t = {k: torch.from_numpy(v).cuda() for k, v in holder["data"].items()}

            def f():
                with torch.no_grad():
                    return torch_transformer_layer_t(t)
            return f
        return lum, tor, None
    if case == "W3x16":
        batch = 4096
        xs = rng.standard_normal((batch, 784)).astype(np.float32)
        ys = rng.integers(0, 10, batch).astype(np.int64)
        holder = {}

        def lum(lm):
            import luminal.nn as nn
            import luminal.nn.functional as F
            from luminal.training import Adam
            model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            holder["state"] = {k: np.array(v) for k, v in model.state_dict().items()}
            cx = lm.Graph()
            x, y = cx.tensor(xs.shape).set(xs), cx.tensor(ys.shape, "int64").set(ys)
            loss = F.cross_entropy(model(x), y).retrieve()
            Adam(model.parameters(), lr=1e-3).minimize(loss)
            return cx, loss

        def tor(torch):
            import torch.nn as T
            if "state" not in holder:
                lum(__import__("luminal"))
            m = T.Sequential(T.Linear(784, 512), T.ReLU(), T.Linear(512, 512), T.ReLU(), T.Linear(512, 10)).cuda()
            m.load_state_dict({k: torch.from_numpy(v) for k, v in holder["state"].items()})
            return _torch_training_step(torch, m, torch.optim.Adam(m.parameters(), lr=1e-3), xs, ys)
        return lum, tor, None
    if case == "W4x16":  # the W4 CNN training step (SGD with momentum) at batch 64 x 16
        from training_workloads import inputs
        data = inputs("W4")
        xs, ys = np.tile(data["x"], (16, 1, 1, 1)), np.tile(data["y"], 16)

        def lum(lm):
            import luminal.nn as nn
            import luminal.nn.functional as F
            from luminal.training import SGD
            model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))
            model.load_state_dict(data["params"])
            cx = lm.Graph()
            x, y = cx.tensor(xs.shape).set(xs), cx.tensor(ys.shape, "int64").set(ys)
            loss = F.cross_entropy(model(x), y).retrieve()
            SGD(model.parameters(), lr=0.01, momentum=0.9).minimize(loss)
            return cx, loss

        def tor(torch):
            import torch.nn as T
            m = T.Sequential(T.Conv2d(1, 32, 3), T.ReLU(), T.Conv2d(32, 64, 3), T.ReLU(), T.MaxPool2d(2), T.Flatten(),
                             T.Linear(9216, 128), T.ReLU(), T.Linear(128, 10)).cuda()
            m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in data["params"].items()})
            return _torch_training_step(torch, m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), xs, ys)
        return lum, tor, None
    if case == "W5x16":  # the W5 encoder layer's forward and gradients at batch 8 x 16 (the ffn1 weight's shown)
        import workloads
        holder = {}

        def lum(lm):
            from luminal.training import grad
            cx, x, y, params = workloads.transformer_layer(batch=128)
            names = list(params)
            holder["data"] = {"x": x.data(), **{k: v.data() for k, v in params.items()}}
            grads = grad(y.mean(), [params[k] for k in names])
            for g in grads:
                g.retrieve()
            return cx, grads[names.index("ffn1.weight")]

        def tor(torch):
            if "data" not in holder:
                lum(__import__("luminal"))
            t = {k: torch.from_numpy(v).cuda() for k, v in holder["data"].items()}
            params = [v.requires_grad_() for k, v in t.items() if k != "x"]

            def step():
                for p in params:
                    p.grad = None
                workloads.torch_transformer_layer_t(t).mean().backward()
                return t["ffn1.weight"].grad
            return step
        return lum, tor, None
    raise ValueError(f"unknown case {case!r}")


def run(case: str, seconds: float, compiled: bool, search: str = "off", profile: int = 0) -> dict:
    import torch

    import luminal as lm

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize
    lum, tor, flops = build_case(case)
    row = {"case": case}
    # torch eager (the oracle) and torch.compile
    f = tor(torch)
    t0 = time.perf_counter()
    want = f()
    sync()
    row["torch first s"] = time.perf_counter() - t0
    want = want.detach().float().cpu().numpy()
    row["torch"] = _stats(_time_calls(f, sync, seconds))
    if compiled:
        try:
            g = torch.compile(tor(torch))
            t0 = time.perf_counter()
            g()
            sync()
            row["torch.compile first s"] = time.perf_counter() - t0
            row["torch.compile"] = _stats(_time_calls(g, sync, seconds))
        except Exception as e:  # noqa: BLE001 - report and go on
            row["torch.compile"] = f"failed: {type(e).__name__}: {e}"[:80]
    # luminal
    cx, out = lum(lm)
    t0 = time.perf_counter()
    cx.compile(device="cuda", search=search)
    cx.execute()
    row["luminal first s"] = time.perf_counter() - t0
    have = out.data()
    if not case.startswith(("W3x16", "W4x16")):  # a training step: the first loss (before any update) is compared
        err = float(np.max(np.abs(have - want)) / (np.max(np.abs(want)) + 1e-30))
        row["max rel err"] = err
        if err > (3e-2 if case.endswith("-bf16") else 1e-3):
            row["WRONG"] = True
    else:
        row["max rel err"] = float(abs(have.item() - float(want)) / abs(float(want)))
    replays = cx.runtime.graph_replays
    calls = _time_calls(cx.execute, lambda: None, seconds)
    row["luminal"] = _stats(calls)
    cx.runtime.host_outputs = False  # the results stay on the GPU (data(device=True) / data() on demand)
    device_calls = _time_calls(cx.execute, lambda: None, seconds)
    row["luminal on device"] = _stats(device_calls)
    # executes served by a captured CUDA graph, of those timed (+2: each timing's untimed first call)
    row["execute replays"] = f"{cx.runtime.graph_replays - replays}/{len(calls) + len(device_calls) + 2}"
    if profile:
        import cProfile
        import io
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(profile):
            cx.execute()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
        row["profile"] = text.getvalue()
    cx.runtime.host_outputs = True
    row["luminal kernels"] = _stats(cx.runtime.time_kernels(cx, repeat=max(3, int(seconds * 50))))
    row["kernels"] = len(cx.runtime.tprogram.launches)
    row["search"] = [e for e in cx.runtime.search_log]
    if flops:
        for k in ("torch", "torch.compile", "luminal", "luminal kernels"):
            if isinstance(row.get(k), tuple):
                row[k + " GFLOP/s"] = flops / (row[k][0] * 1e-3) / 1e9
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="W1-4096,W1-4096-bf16,W1-8192,W2,W6x16,W6x16-bf16,W3x16,W3x16-bf16,W4x16,"
                    "W4x16-bf16,W5x16,W5x16-bf16")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--search", default="quick", choices=["off", "quick", "full"],
                    help="luminal's measured search (GEMM tile configurations on the GPU)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also cProfile N executes (results left on the device) and print the top functions")
    args = ap.parse_args()
    import torch
    print(f"# device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    cols = ["torch", "torch.compile", "luminal", "luminal on device", "luminal kernels"]
    print("| case | " + " | ".join(f"{c} ms (med/min/max)" for c in cols) + " | GFLOP/s torch / lum kernels | "
          "first s torch / compile / luminal | kernels (execute replays / calls) | max rel err |")
    print("|---" * (len(cols) + 5) + "|")
    for case in args.only.split(","):
        try:
            r = run(case, args.seconds, not args.no_compile, args.search, args.profile)
        except Exception as e:  # noqa: BLE001 - one case failing does not hide the others
            import traceback
            traceback.print_exc()
            print(f"| {case} | FAILED: {type(e).__name__}: {str(e)[:300]} |")
            continue
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"{v[0]:.3f} / {v[1]:.3f} / {v[2]:.3f}" if isinstance(v, tuple) else str(v or "-"))
        gf = (f"{r['torch GFLOP/s']:.0f} / {r['luminal kernels GFLOP/s']:.0f}"
              if "torch GFLOP/s" in r else "-")
        first = " / ".join(f"{r[k]:.2f}" if k in r else "-" for k in ("torch first s", "torch.compile first s",
                                                                       "luminal first s"))
        wrong = " WRONG" if r.get("WRONG") else ""
        print(f"| {case} | " + " | ".join(cells) + f" | {gf} | {first} | {r['kernels']} ({r['execute replays']}) | "
              f"{r['max rel err']:.1e}{wrong} |", flush=True)
        for e in r["search"]:  # GEMM candidates: seconds per launch, CUDA events, min of 3 rounds of 3
            print(f"  {case} searched: {e}", flush=True)
        if "profile" in r:
            print(r["profile"], flush=True)


if __name__ == "__main__":
    main()
