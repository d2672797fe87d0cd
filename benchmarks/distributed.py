"""Data-parallel training (luminal.distributed) on W3 and W4: 2 ranks x 1 thread vs 1 rank x 2 threads.

Run:  python benchmarks/distributed.py [--seconds 3] [--only W3,W4] [--json out.json]
Needs the distributed extra: pip install -e '.[distributed]'.

W3 (MLP 784-512-512-10 + Adam, global batch 256) and W4 (small CNN + SGD momentum, global batch 64) are the
models, weights and batches of benchmarks/training_workloads.py (imported, not copied). For each workload:

* ``1x2``: one process, ``OMP_NUM_THREADS=2``, the ordinary ``Trainer`` (backward and update in one compiled
  graph) on the whole global batch;
* ``1x1``: the same with one thread (for reference);
* ``2x1``: ``mpiexec -n 2`` with ``OMP_NUM_THREADS=1``, ``Trainer(distributed=True)``, each rank half the
  global batch.

Each configuration runs in fresh processes: compile, warm-up, then rank 0 picks a step count that fills
``--seconds`` and broadcasts it, a barrier, the timed steps, a barrier. Reported: global steps/s, and for 2x1
the per-step time of each phase on rank 0 (forward+backward graph, all-reduce including packing/scaling,
update graph) and the gradient bytes each rank all-reduces per step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CASES = ["W3", "W4"]


def _worker(case: str, distributed: bool, seconds: float, out: str) -> None:
    import luminal.nn.functional as F
    from luminal.training import SGD, Adam, Trainer
    from training_workloads import _luminal_model, inputs

    data = inputs(case)
    model = _luminal_model(case)
    model.load_state_dict(data["params"])
    opt = Adam(model.parameters(), lr=1e-3) if case == "W3" else SGD(model.parameters(), lr=0.01, momentum=0.9)
    trainer = Trainer(model, opt, F.cross_entropy, device="cpu", distributed=distributed)
    x, y = data["x"], data["y"]
    comm, rank, nranks = None, 0, 1
    if distributed:
        from luminal.distributed import world
        comm = world()
        rank, nranks = comm.Get_rank(), comm.Get_size()
        if len(x) % nranks:
            raise ValueError(f"{case}: global batch {len(x)} is not divisible by {nranks} ranks")
        per = len(x) // nranks
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    t0 = time.perf_counter()
    trainer.train_step((x, y))  # compiles
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = 0
    while warm < 3 or time.perf_counter() - t0 < min(1.0, seconds / 3):
        trainer.train_step((x, y))
        warm += 1
    per_step = (time.perf_counter() - t0) / warm
    steps = max(5, int(seconds / per_step))
    if comm is not None:
        steps = comm.bcast(steps, root=0)
        comm.Barrier()
    st = trainer._train
    before = dict(st.times) if distributed else None
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.train_step((x, y))
    if comm is not None:
        comm.Barrier()
    dt = time.perf_counter() - t0
    alone = None
    if distributed:  # the all-reduce alone: ranks in step (a barrier first), so no waiting for a slower rank
        red = st.reducer
        grads = [np.ones(s, d) for s, d in red.specs]
        times = []
        for _ in range(20):
            comm.Barrier()
            t1 = time.perf_counter()
            red.reduce(grads, 1.0, [1.0, 0.0, 0.0])
            times.append(time.perf_counter() - t1)
        alone = float(np.median(times))
    if rank != 0:
        return
    rec = {"case": case, "ranks": nranks, "threads": os.environ.get("OMP_NUM_THREADS"), "steps": steps,
           "steps_per_s": steps / dt, "ms_per_step": 1e3 * dt / steps, "first_step_s": first}
    if distributed:
        rec.update({f"{k}_ms": 1e3 * (st.times[k] - before[k]) / steps for k in st.times})
        rec["allreduce_bytes_per_step"] = st.reducer.nbytes
        rec["allreduce_alone_ms"] = 1e3 * alone
        rec["buckets"] = len(st.reducer.buckets)
    with open(out, "w") as f:
        json.dump(rec, f)


def _mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        raise SystemExit("no mpiexec: pip install -e '.[distributed]'")
    return exe


def _run(case: str, ranks: int, threads: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
        me = [sys.executable, os.path.abspath(__file__), "--worker", case, "--seconds", str(seconds), "--out", out]
        cmd = [_mpiexec(), "-n", str(ranks)] + me + ["--distributed"] if ranks > 1 else me
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{case} {ranks}x{threads} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--json", default=None, help="also write the records here")
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration, interleaved; the best is shown")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--distributed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.distributed, args.seconds, args.out)
        return
    records = []
    print("phases (ms per step, rank 0 of 2x1): fwd+bwd graph | all-reduce in the step (pack, MPI incl. waiting "
          "for the other rank, scale) | update graph | all-reduce alone after a barrier | MB all-reduced per step")
    print(f"{'case':4} {'ranks x threads':>15} {'steps/s':>8} {'ms/step':>8} {'fwd+bwd':>8} {'allred':>8} "
          f"{'update':>8} {'ar alone':>8} {'MB/step':>8}")
    configs = ((1, 2), (2, 1), (1, 1))
    for case in args.only.split(","):
        best = {}
        for _ in range(args.repeat):
            for ranks, threads in configs:
                r = _run(case, ranks, threads, args.seconds)
                r["loadavg_1min"] = os.getloadavg()[0]  # other processes on the machine distort the numbers
                records.append(r)
                if args.json:  # written after every run, so an interrupted benchmark keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump(records, f, indent=1)
                if (ranks, threads) not in best or r["steps_per_s"] > best[ranks, threads]["steps_per_s"]:
                    best[ranks, threads] = r
        for ranks, threads in configs:
            r = best[ranks, threads]
            extra = (f"{r['backward_ms']:8.2f} {r['allreduce_ms']:8.2f} {r['update_ms']:8.2f} "
                     f"{r['allreduce_alone_ms']:8.2f} {r['allreduce_bytes_per_step'] / 2 ** 20:8.2f}") \
                if ranks > 1 else ""
            print(f"{case:4} {f'{ranks} x {threads}':>15} {r['steps_per_s']:8.1f} {r['ms_per_step']:8.2f} {extra}",
                  flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
