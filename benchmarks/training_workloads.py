"""W3, W4 and W5 of ../shared/BENCHMARKS.md (training) on luminal's CPU backend, PyTorch eager, torch.compile, JAX.

Run:  python benchmarks/training_workloads.py [--seconds 3] [--only W3,W4,W5] [--frameworks luminal,torch]
      [--prologue-ab] (luminal's default plan against every GEMM operand copied, alternating in one process)
Needs the bench extra: pip install -e '.[bench]'.

* W3: MLP 784-512-ReLU-512-ReLU-10, batch 256, mean softmax cross-entropy, Adam(1e-3): one training step.
* W4: CNN (conv 1->32 k3, ReLU, conv 32->64 k3, ReLU, maxpool 2, flatten, linear 9216->128, ReLU, linear 10),
  batch 64 of 1x28x28, mean cross-entropy, SGD(lr .01, momentum .9): one training step.
* W5: the pre-LN transformer encoder layer (batch 8, seq 128, d 256, 4 heads, FFN 1024): forward + gradients
  of all 12 parameters of loss = mean(y), no update.

Protocol as benchmarks/cpu_workloads.py: one fresh process per (workload, framework); the first call (with
compilation) timed alone; warm-up; timed calls for --seconds; median/min/max ms; peak RSS. All frameworks
start from the same numpy weights and batches; the check compares each framework's losses of the first
three steps (W3, W4) or its gradient of ``ffn1.weight`` (W5) with PyTorch eager's.

Frameworks ``luminal+bf16`` and ``torch+bf16`` (not in the default list) run the same steps under bfloat16
autocast (``lm.autocast`` / ``torch.autocast("cpu")``): matrix products on bfloat16 operands, on AMX tiles
where the CPU has them; their check allows 5e-2 (bfloat16 rounding) against float32 torch. ``luminal+medium``
and ``torch+medium`` run the float32 steps with ``set_float32_matmul_precision("medium")`` (matrix products on
bfloat16 operands, float32 elsewhere; torch's convolutions stay float32), with the same check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CASES = ["W3", "W4", "W5"]
# luminal+search compiles with search="full" (budget --search-budget seconds); luminal+fused compiles with
# LUMINAL_PROLOGUE=fused (every GEMM operand that can be computed while packing is, e.g. im2col; no search)
FRAMEWORKS = ["torch", "torch.compile", "jax", "luminal", "luminal+fused", "luminal+search"]


def _uniform(rng, fan_in, shape):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def inputs(case: str) -> dict:
    rng = np.random.default_rng(0)
    if case == "W3":
        shapes = [(512, 784), (512, 512), (10, 512)]
        params = {}
        for k, (o, i) in enumerate(shapes):
            params[f"{2 * k}.weight"] = _uniform(rng, i, (o, i))
            params[f"{2 * k}.bias"] = _uniform(rng, i, (o,))
        return {"params": params, "x": rng.standard_normal((256, 784)).astype(np.float32),
                "y": rng.integers(0, 10, 256).astype(np.int64)}
    if case == "W4":
        params = {"0.weight": _uniform(rng, 9, (32, 1, 3, 3)), "0.bias": _uniform(rng, 9, (32,)),
                  "2.weight": _uniform(rng, 288, (64, 32, 3, 3)), "2.bias": _uniform(rng, 288, (64,)),
                  "6.weight": _uniform(rng, 9216, (128, 9216)), "6.bias": _uniform(rng, 9216, (128,)),
                  "8.weight": _uniform(rng, 128, (10, 128)), "8.bias": _uniform(rng, 128, (10,))}
        return {"params": params, "x": rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
                "y": rng.integers(0, 10, 64).astype(np.int64)}
    if case == "W5":
        from workloads import transformer_layer
        cx, x, y, params = transformer_layer(batch=8)
        return {"params": {k: v.data() for k, v in params.items()}, "x": x.data()}
    raise ValueError(case)


# ---------------------------------------------------------------------------- luminal
def _luminal_model(case):
    import luminal.nn as nn
    if case == "W3":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def _winners(cx, search):
    if search in ("quick", "full"):  # on stderr: the parent prints them under the table ("background": later)
        print("winners: " + json.dumps(cx.runtime.search_result.choices), file=sys.stderr)
        fused = {k: ("fused" if m["correct"] and m["fused"] < m["materialized"] else "materialized")
                 + f" ({m['fused'] * 1e3:.2f} vs {m['materialized'] * 1e3:.2f} ms)"
                 for k, m in cx.runtime.prologue_timings.items()}
        if fused:
            print("winners: " + json.dumps(fused), file=sys.stderr)
        checked = cx.runtime.step_forms  # (the Winograd forms checked in the step: ms per reader and form)
        if checked is not None:
            times = {str(o): {str(f): round(t * 1e3, 2) for f, t in row.items()} for o, row in checked.seconds.items()}
            print(f"winners: step forms ({checked.elapsed:.1f} s), changed {checked.changed}: " + json.dumps(times),
                  file=sys.stderr)


def build_luminal(case, data, search: str = "off", budget: float = 60.0, amp: bool = False):
    import contextlib

    import luminal as lm
    from luminal.training import SGD, Adam, grad

    ctx = lm.autocast(lm.bfloat16) if amp else contextlib.nullcontext()  # luminal+bf16: graphs built under autocast

    if case == "W5":
        from workloads import transformer_layer
        with ctx:
            cx, x, y, params = transformer_layer(batch=8)
            names = list(params)
            grads = grad(y.mean(), [params[k] for k in names])
        x.set(data["x"])
        for k, v in params.items():
            v.set(data["params"][k])
        for g in grads:
            g.retrieve()
        cx.compile(device="cpu", search=search, budget_s=budget)
        _winners(cx, search)
        target = grads[names.index("ffn1.weight")]

        def step():
            cx.execute()
            return target
        return step, lambda: target.data()

    import luminal.nn.functional as F
    model = _luminal_model(case)
    model.load_state_dict(data["params"])
    cx = lm.Graph()
    x = cx.tensor(data["x"].shape).set(data["x"])
    y = cx.tensor(data["y"].shape, "int64").set(data["y"])
    with ctx:
        loss = F.cross_entropy(model(x), y).retrieve()
        opt = Adam(model.parameters(), lr=1e-3) if case == "W3" else SGD(model.parameters(), lr=0.01, momentum=0.9)
        opt.minimize(loss)
    cx.compile(device="cpu", search=search, budget_s=budget)
    _winners(cx, search)
    losses = []

    def step():
        cx.execute()
        if len(losses) < 3:
            losses.append(loss.item())
        return loss
    return step, lambda: np.array(losses)


# ---------------------------------------------------------------------------- torch
def build_torch(case, data, compiled: bool):
    import torch
    import torch.nn as T
    torch.set_num_threads(os.cpu_count())
    x = torch.from_numpy(data["x"])
    if case == "W5":
        from workloads import torch_transformer_layer_t
        params = {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in data["params"].items()}

        def f(xx, ps):
            return torch_transformer_layer_t({"x": xx, **ps}).mean()
        fn = torch.compile(f) if compiled else f
        out = {}

        def step():
            for p in params.values():
                p.grad = None
            fn(x, params).backward()
            out["g"] = params["ffn1.weight"].grad
            return out["g"]
        return step, lambda: out["g"].numpy()

    if case == "W3":
        model = T.Sequential(T.Linear(784, 512), T.ReLU(), T.Linear(512, 512), T.ReLU(), T.Linear(512, 10))
    else:
        model = T.Sequential(T.Conv2d(1, 32, 3), T.ReLU(), T.Conv2d(32, 64, 3), T.ReLU(), T.MaxPool2d(2), T.Flatten(),
                             T.Linear(9216, 128), T.ReLU(), T.Linear(128, 10))
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in data["params"].items()})
    y = torch.from_numpy(data["y"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if case == "W3" else \
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def loss_fn(xx, yy):
        return T.functional.cross_entropy(model(xx), yy)
    fn = torch.compile(loss_fn) if compiled else loss_fn
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fn(x, y)
        loss.backward()
        opt.step()
        if len(losses) < 3:
            losses.append(loss.item())
        return loss
    return step, lambda: np.array(losses)


# ---------------------------------------------------------------------------- jax
def build_jax(case, data):
    import jax
    import jax.numpy as jnp

    params = {k: jnp.asarray(v) for k, v in data["params"].items()}
    x = jnp.asarray(data["x"])
    if case == "W5":
        from workloads import jax_transformer_layer
        gfn = jax.jit(jax.grad(lambda ps, xx: jax_transformer_layer({"x": xx, **ps}).mean()))
        out = {}

        def step():
            out["g"] = gfn(params, x)
            out["g"]["ffn1.weight"].block_until_ready()
            return out["g"]
        return step, lambda: np.asarray(out["g"]["ffn1.weight"])

    y = jnp.asarray(data["y"])

    def forward(ps, xx):
        if case == "W3":
            h = jax.nn.relu(xx @ ps["0.weight"].T + ps["0.bias"])
            h = jax.nn.relu(h @ ps["2.weight"].T + ps["2.bias"])
            return h @ ps["4.weight"].T + ps["4.bias"]
        dn = ("NCHW", "OIHW", "NCHW")
        h = jax.lax.conv_general_dilated(xx, ps["0.weight"], (1, 1), "VALID", dimension_numbers=dn)
        h = jax.nn.relu(h + ps["0.bias"][None, :, None, None])
        h = jax.lax.conv_general_dilated(h, ps["2.weight"], (1, 1), "VALID", dimension_numbers=dn)
        h = jax.nn.relu(h + ps["2.bias"][None, :, None, None])
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ ps["6.weight"].T + ps["6.bias"])
        return h @ ps["8.weight"].T + ps["8.bias"]

    def loss_fn(ps, xx, yy):
        logp = jax.nn.log_softmax(forward(ps, xx), -1)
        return -jnp.take_along_axis(logp, yy[:, None], 1).mean()

    if case == "W3":  # Adam (PyTorch's rule, bias-corrected)
        state = {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
                 "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": 0}

        @jax.jit
        def train(ps, m, v, t, xx, yy):
            loss, g = jax.value_and_grad(loss_fn)(ps, xx, yy)
            m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
            v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
            bc1, bc2 = 1 - 0.9 ** t, 1 - 0.999 ** t
            ps = jax.tree_util.tree_map(lambda p, a, b: p - 1e-3 / bc1 * a / (jnp.sqrt(b) / jnp.sqrt(bc2) + 1e-8),
                                        ps, m, v)
            return ps, m, v, loss
    else:  # SGD with momentum (PyTorch's rule: buf = g at the first step)
        state = {"m": jax.tree_util.tree_map(jnp.zeros_like, params), "v": None, "t": 0}

        @jax.jit
        def train(ps, m, v, t, xx, yy):
            loss, g = jax.value_and_grad(loss_fn)(ps, xx, yy)
            first = (t == 1)
            m = jax.tree_util.tree_map(lambda a, b: jnp.where(first, b, 0.9 * a + b), m, g)
            ps = jax.tree_util.tree_map(lambda p, a: p - 0.01 * a, ps, m)
            return ps, m, v, loss
    box = {"ps": params}
    losses = []

    def step():
        state["t"] += 1
        box["ps"], state["m"], state["v"], loss = train(box["ps"], state["m"], state["v"], state["t"], x, y)
        loss.block_until_ready()
        if len(losses) < 3:
            losses.append(float(loss))
        return loss
    return step, lambda: np.array(losses)


def _peak_rss_mb() -> float:
    from workloads import peak_rss_mb  # (imported at the end: luminal's import is not part of a peer's peak)
    return peak_rss_mb()


def run_case(case: str, framework: str, seconds: float, out_path: str, budget: float = 60.0) -> dict:
    data = inputs(case)
    start = time.perf_counter()
    if framework == "luminal":
        step, result = build_luminal(case, data)
    elif framework == "luminal+fused":
        os.environ["LUMINAL_PROLOGUE"] = "fused"
        step, result = build_luminal(case, data)
    elif framework == "luminal+search":
        step, result = build_luminal(case, data, "full", budget)
    elif framework == "luminal+bf16":
        step, result = build_luminal(case, data, amp=True)
    elif framework == "luminal+medium":  # float32 products on bfloat16 operands (set_float32_matmul_precision)
        import luminal as lm
        lm.set_float32_matmul_precision("medium")
        step, result = build_luminal(case, data)
    elif framework == "torch+medium":
        import torch
        torch.set_float32_matmul_precision("medium")
        step, result = build_torch(case, data, compiled=False)
    elif framework == "torch+bf16":
        import torch
        inner, result = build_torch(case, data, compiled=False)

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return inner()
    elif framework == "jax":
        step, result = build_jax(case, data)
    else:
        step, result = build_torch(case, data, compiled=framework == "torch.compile")
    step()
    first = time.perf_counter() - start
    for _ in range(3):
        step()
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    np.save(out_path, np.asarray(result(), np.float32))
    return {"first_s": first, "median": statistics.median(times), "min": min(times), "max": max(times),
            "rss_mb": _peak_rss_mb(), "n": len(times)}


def prologue_ab(case: str, seconds: float) -> None:
    """luminal with every GEMM operand copied (``LUMINAL_PROLOGUE=materialized``, the plan before prologue
    fusion) against the default plan, both compiled in this process and stepped alternately (on a shared
    machine only a comparison inside one process is trustworthy): median ms per step of each."""
    data = inputs(case)
    steps = {}
    for mode in ("materialized", "auto"):
        os.environ["LUMINAL_PROLOGUE"] = mode
        steps[mode] = build_luminal(case, data)[0]
        for _ in range(3):
            steps[mode]()
    times = {m: [] for m in steps}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times["auto"]) < 5:
        for m, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[m].append(time.perf_counter() - t0)
    a, b = (statistics.median(times[m]) * 1e3 for m in ("materialized", "auto"))
    print(f"{case:<6}luminal, operands copied {a:9.2f} ms   default plan (prologue fusion) {b:9.2f} ms   "
          f"ratio {b / a:.3f}   ({len(times['auto'])} alternating steps each, one process)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--case")
    parser.add_argument("--framework")
    parser.add_argument("--out")
    parser.add_argument("--search-budget", type=float, default=60.0, help="seconds of search for luminal+search")
    parser.add_argument("--prologue-ab", action="store_true",
                        help="also compare luminal's default plan with every GEMM operand copied, in one process")
    args = parser.parse_args()
    if args.case:  # child process
        print(json.dumps(run_case(args.case, args.framework, args.seconds, args.out, args.search_budget)))
        return
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'case':<6}{'framework':<15}{'median':>9}{'min':>9}{'max':>9}{'unit':>5}{'first call s':>14}"
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
                print(f"{case:<6}{fw:<15}  failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else '?'}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            result = np.load(out)
            if reference is None:
                reference, check = result, "ref"
            else:
                err = np.max(np.abs(result - reference) / (np.abs(reference).max() + 1e-12))
                tol = 5e-2 if fw.endswith(("+bf16", "+medium")) else 1e-3  # (bfloat16 autocast: about 2^-8 per rounding)
                check = f"ok ({err:.1e})" if err < tol else f"MISMATCH ({err:.1e})"
            print(f"{case:<6}{fw:<15}{r['median'] * 1e3:>9.2f}{r['min'] * 1e3:>9.2f}{r['max'] * 1e3:>9.2f}{'ms':>5}"
                  f"{r['first_s']:>14.2f}{r['rss_mb']:>9.0f}  {check}")
            winners.extend(f"  {case} {line[len('winners: '):]}" for line in proc.stderr.splitlines()
                           if line.startswith("winners: "))
    if winners:
        print("search winners (GEMMs, operand fusion, step forms):")
        print("\n".join(winners))
    if args.prologue_ab:
        for case in args.only.split(","):
            prologue_ab(case, args.seconds)


if __name__ == "__main__":
    main()
