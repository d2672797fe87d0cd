"""W1, W2 and W6 of ../shared/BENCHMARKS.md on luminal's CPU backend, PyTorch eager, torch.compile and JAX.

Run:  python benchmarks/cpu_workloads.py [--seconds 3] [--only W1-1024,W6] [--frameworks luminal,torch]
      [--search-budget 60]     (luminal+search: compile(search="full", budget_s=...); "first call s" then
                                includes the search unless the tuning cache already holds its winners)
Needs the bench extra: pip install -e '.[bench]'  (torch from local disk, jax/jaxlib from PyPI).

Protocol (BENCHMARKS.md): one fresh process per (workload, framework); the first call is timed alone
(it includes compilation); then warm-up; then timed calls for --seconds; median/min/max in ms (GFLOP/s for
W1); peak RSS of the process. Inputs and parameters come from the same numpy seeds everywhere, and every
framework's output is compared with PyTorch eager's (a fast wrong answer is marked). W3-W5 are in
training_workloads.py. Frameworks ``luminal+medium`` / ``torch+medium`` (not in the default list) run with
``set_float32_matmul_precision("medium")``: matrix products on bfloat16 operands (AMX where the CPU has it),
checked against float32 torch within 2e-2 of its largest value.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CASES = ["W1-1024", "W1-2048", "W2", "W6"]
# the first one is the reference for the check; luminal+search compiles with search="full" (--search-budget s)
FRAMEWORKS = ["torch", "torch.compile", "jax", "luminal", "luminal+search"]
N_W2 = 16 * 1024 * 1024


def inputs(case: str):
    rng = np.random.default_rng(0)
    if case.startswith("W1"):
        n = int(case.split("-")[1])
        return {"a": rng.standard_normal((n, n)).astype(np.float32), "b": rng.standard_normal((n, n)).astype(np.float32)}
    if case == "W2":
        return {"x": rng.standard_normal(N_W2).astype(np.float32)}
    if case == "W6":
        from workloads import transformer_layer
        cx, x, y, params = transformer_layer(batch=1)
        return {"x": x.data(), **{k: v.data() for k, v in params.items()}}
    raise ValueError(case)


# ---------------------------------------------------------------------------- per-framework builders
def build_luminal(case, data, search: str = "off", budget: float = 60.0):
    import luminal as lm
    if case.startswith("W1"):
        cx = lm.Graph()
        a, b = cx.tensor(data["a"].shape).set(data["a"]), cx.tensor(data["b"].shape).set(data["b"])
        out = (a @ b).retrieve()
    elif case == "W2":
        cx = lm.Graph()
        x = cx.tensor(N_W2).set(data["x"])
        z = x * 1.5 + 0.5
        out = (0.5 * z * (1.0 + (math.sqrt(2 / math.pi) * (z + 0.044715 * z * z * z)).tanh())).retrieve()
    else:
        from workloads import transformer_layer
        cx, x, out, params = transformer_layer(batch=1)
        x.set(data["x"])
        for k, v in params.items():
            v.set(data[k])
    from luminal.compiler import GenericCompiler
    cx.compile(GenericCompiler(), out, device="cpu", search=search, budget_s=budget)
    if search != "off":  # the winners, on stderr (the parent prints them under the table)
        print("winners: " + json.dumps({k: v for k, v in cx.runtime.search_result.choices.items()}), file=sys.stderr)

    def step():  # the result is in host memory after execute(); data() (a copy) is read once at the end
        cx.execute()
        return out
    return step


def build_torch(case, data, compiled: bool):
    import torch
    torch.set_num_threads(os.cpu_count())
    t = {k: torch.from_numpy(v) for k, v in data.items()}
    if case.startswith("W1"):
        fn = lambda: t["a"] @ t["b"]  # noqa: E731
    elif case == "W2":
        def fn():
            z = t["x"] * 1.5 + 0.5
            return 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    else:
        from workloads import torch_transformer_layer_t
        fn = lambda: torch_transformer_layer_t(t)  # noqa: E731
    if compiled:
        fn = torch.compile(fn)

    def step():
        with torch.no_grad():
            return fn().numpy()
    return step


def build_jax(case, data):
    import jax
    import jax.numpy as jnp
    j = {k: jnp.asarray(v) for k, v in data.items()}
    if case.startswith("W1"):
        fn = jax.jit(lambda a, b: a @ b)
        args = (j["a"], j["b"])
    elif case == "W2":
        def f(x):
            z = x * 1.5 + 0.5
            return 0.5 * z * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
        fn, args = jax.jit(f), (j["x"],)
    else:
        from workloads import jax_transformer_layer
        fn, args = jax.jit(jax_transformer_layer), (j,)

    def step():
        return np.asarray(fn(*args).block_until_ready())
    return step


def _peak_rss_mb() -> float:
    from workloads import peak_rss_mb  # (imported at the end: luminal's import is not part of a peer's peak)
    return peak_rss_mb()


def run_case(case: str, framework: str, seconds: float, out_path: str, budget: float = 60.0) -> dict:
    data = inputs(case)
    start = time.perf_counter()
    if framework == "luminal":
        step = build_luminal(case, data)
    elif framework == "luminal+search":
        step = build_luminal(case, data, "full", budget)
    elif framework == "luminal+medium":  # float32 products on bfloat16 operands (set_float32_matmul_precision)
        import luminal as lm
        lm.set_float32_matmul_precision("medium")
        step = build_luminal(case, data)
    elif framework == "torch+medium":
        import torch
        torch.set_float32_matmul_precision("medium")
        step = build_torch(case, data, compiled=False)
    elif framework == "jax":
        step = build_jax(case, data)
    else:
        step = build_torch(case, data, compiled=framework == "torch.compile")
    result = step()
    first = time.perf_counter() - start
    for _ in range(3):
        step()
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    result = result.data() if hasattr(result, "data") and callable(result.data) else result
    np.save(out_path, np.asarray(result, np.float32))
    return {"first_s": first, "median": statistics.median(times), "min": min(times), "max": max(times),
            "rss_mb": _peak_rss_mb(), "n": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--case")
    parser.add_argument("--framework")
    parser.add_argument("--out")
    parser.add_argument("--search-budget", type=float, default=60.0, help="seconds of search for luminal+search")
    args = parser.parse_args()
    if args.case:  # child process
        print(json.dumps(run_case(args.case, args.framework, args.seconds, args.out, args.search_budget)))
        return
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'case':<9}{'framework':<15}{'median':>10}{'min':>10}{'max':>10}{'unit':>8}{'first call s':>14}"
          f"{'peak MB':>9}  check")
    tmp = tempfile.mkdtemp()
    winners: list[str] = []
    for case in args.only.split(","):
        reference = None
        for fw in args.frameworks.split(","):
            out = os.path.join(tmp, f"{case}_{fw}.npy")
            proc = subprocess.run([sys.executable, __file__, "--case", case, "--framework", fw, "--out", out,
                                   "--seconds", str(args.seconds), "--search-budget", str(args.search_budget)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{case:<9}{fw:<15}  failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else '?'}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            result = np.load(out)
            if reference is None:
                reference, check = result, "ref"
            else:
                tol = 2e-3 if case.startswith("W1") else 1e-4
                err = np.max(np.abs(result - reference) / (np.abs(reference) + 1.0))
                if fw.endswith("+medium"):  # bfloat16 operands: about 2^-8 relative per product, errors of
                    tol = 2e-2              # sqrt(K) 2^-9 |a||b|: measured against the largest result
                    err = np.max(np.abs(result - reference)) / np.max(np.abs(reference))
                check = f"ok ({err:.1e})" if err < tol else f"MISMATCH ({err:.1e})"
            if case.startswith("W1"):
                n = int(case.split("-")[1])
                flop = 2 * n ** 3 / 1e9
                cells, unit = (flop / r["median"], flop / r["max"], flop / r["min"]), "GFLOP/s"
            else:
                cells, unit = (r["median"] * 1e3, r["min"] * 1e3, r["max"] * 1e3), "ms"
            print(f"{case:<9}{fw:<15}{cells[0]:>10.2f}{cells[1]:>10.2f}{cells[2]:>10.2f}{unit:>8}"
                  f"{r['first_s']:>14.2f}{r['rss_mb']:>9.0f}  {check}")
            winners.extend(f"  {case} {line[len('winners: '):]}" for line in proc.stderr.splitlines()
                           if line.startswith("winners: "))
    if winners:
        print("search winners per GEMM (kernel key: choice):")
        print("\n".join(winners))


if __name__ == "__main__":
    main()
