"""Symbolic vs fixed shapes on the CPU backend: generated C, compile time and run time (issue 14, "Targets").

Run:  python benchmarks/symbolic_shapes.py [--quick] [--timeout 120] [--only chains,bert,interleaved]
                                           [--cases relu,gelu,gelu_tanh,masked_softmax,layer_norm]
                                           [--configs 1x32,32x128] [--no-torch] [--torch-threads N]
                                           [--search] [--search-budget 60]
Needs the test or bench extra for the PyTorch column (pip install -e '.[bench]'); without torch that column
reads n/a. Prints tables; asserts nothing about timings.

Table 1, chains: each case is built twice, over ``cx.tensor(("batch", "seq", d))`` (symbolic) and over
``cx.tensor(("n", d))`` (fixed rank-2, the shape the issue compares with), and compiled with
``cx.compile(device="cpu")`` (no passes, as a user writes it). Cases: relu^k (d 64, k in 1 2 3 5 10), erf
GELU and tanh GELU (d 1536), masked softmax (d 384: ``where(pad, -inf, x).softmax(-1)``, ``pad`` a bool
``("batch", d)`` mask broadcast over seq, or a ``(d,)`` mask broadcast over n), layer norm (d 384, no affine).
Bound at batch 4 x seq 32 and n 128 (the same 128 rows). Columns:
  C KB       len(cx.runtime.source) / 1024. When the C compiler times out, the size and the index count
             are read from the .c file the runtime left in the (fresh) cache folder, marked with '*'.
  idx        uses of LUMINAL_FLOORDIV + LUMINAL_FLOORMOD in the source (the prelude's #defines excluded).
  compile s  cold: a fresh LUMINAL_CACHE_DIR per case, so graph lowering + C rendering + the C compiler.
  us/call    cx.execute() with the inputs already set: min over repeats of the mean of an inner loop,
             after a warm-up call.
  sym/fix    the ratio of the two us/call (target: <= 1.2).
  err        max |luminal - numpy (float64)| over the whole output, symbolic and fixed.

Table 2, BERT encoder (all-MiniLM-L6-v2 shape): ``luminal.nn.TransformerEncoder`` of 6
``TransformerEncoderLayer(384, 12, 1536, activation="gelu", layer_norm_eps=1e-12, batch_first=True)`` (post-LN,
erf GELU) with a bool ``src_key_padding_mask`` (True = padding; every row keeps >= half its tokens), built over
``("batch", "seq")`` symbolic shapes and compiled once, versus built and compiled per configuration with
fixed ints; PyTorch eager (``torch.nn.TransformerEncoder``, same weights, ``enable_nested_tensor=False``, eval,
no_grad, default thread count unless --torch-threads). ms/call is the min over repeats after one warm-up call
(a warm-up call longer than the time budget counts as the only sample). ``max|diff|`` is luminal vs PyTorch over
the whole output. On a loaded machine, multi-threaded PyTorch (and OpenMP in luminal) can be 10-20x slower
than usual: compare --torch-threads 1 when the torch column looks odd.
Targets: symbolic/fixed <= 1.15, symbolic/torch <= 0.6 at 1x32 and <= 0.85 at 32x128, symbolic cold compile
<= 3 s.

Every luminal or torch measurement runs in its own process (own session, so the C compiler is killed with
it). The parent waits up to --timeout seconds for each stage of a child (compile, then each run) and prints
"timeout" for that stage and the ones after it. OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

CHAIN_CASES = {  # name -> (d, ks)
    "relu": (64, (1, 2, 3, 5, 10)),
    "gelu": (1536, (None,)),
    "gelu_tanh": (1536, (None,)),
    "masked_softmax": (384, (None,)),
    "layer_norm": (384, (None,)),
}
QUICK_CHAIN = {"relu": (1, 3), "gelu": (None,), "masked_softmax": (None,), "layer_norm": (None,)}
BATCH, SEQ = 4, 32  # symbolic bindings for the chains; fixed n = BATCH * SEQ
BERT = dict(layers=6, d=384, heads=12, ffn=1536, eps=1e-12)
CONFIGS = ("1x32", "32x128")


# ============================================================================ helpers (parent and children)
def emit(**record) -> None:
    """One JSON line on stdout, flushed at once: the parent reads children's stages as they finish."""
    print(json.dumps(record), flush=True)


def index_ops(source: str) -> int:
    """FLOORDIV/FLOORMOD uses in generated C, not counting the prelude's definitions."""
    n = source.count("FLOORDIV") + source.count("FLOORMOD")
    try:
        from luminal.shape import C_PRELUDE
        n -= C_PRELUDE.count("FLOORDIV") + C_PRELUDE.count("FLOORMOD")
    except Exception:  # the prelude moved: count everything
        pass
    return n


def time_calls(fn, repeats: int, budget_s: float) -> float:
    """Seconds per call: one warm-up call, then min over ``repeats`` of the mean of an inner loop sized to take
    ~20 ms; stops early once ``budget_s`` is spent (a warm-up longer than the budget is the only sample)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > budget_s:
        return first
    inner = max(1, int(0.02 / max(first, 1e-7)))
    best = math.inf
    deadline = time.perf_counter() + budget_s
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
        if time.perf_counter() > deadline:
            break
    return best


# ============================================================================ chain children
def chain_data(case: str, d: int):
    rng = np.random.default_rng(0)
    scale = 3.0 if case.startswith("gelu") else 1.0
    x = (rng.standard_normal((BATCH * SEQ, d)) * scale).astype(np.float32)
    pad = None
    if case == "masked_softmax":
        lengths = rng.integers(d // 2, d + 1, BATCH)
        pad = np.arange(d)[None, :] >= lengths[:, None]  # (batch, d), True = padding
    return x, pad


def chain_reference(case: str, k, x: np.ndarray, pad) -> np.ndarray:
    x = x.astype(np.float64)
    if case == "relu":
        return np.maximum(x, 0.0)
    if case == "gelu":
        erf = np.frompyfunc(math.erf, 1, 1)
        return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))
    if case == "gelu_tanh":
        return x * 0.5 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if case == "masked_softmax":
        s = np.where(pad, -np.inf, x)
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if case == "layer_norm":
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    raise ValueError(case)


def run_chain_child(case: str, k, symbolic: bool, repeats: int, budget_s: float) -> None:
    import luminal as lm

    d = CHAIN_CASES[case][0]
    x_np, pad_np = chain_data(case, d)
    cx = lm.Graph()
    x = cx.tensor(("batch", "seq", d) if symbolic else ("n", d), name="x")
    pad = None
    if case == "relu":
        y = x
        for _ in range(k):
            y = y.relu()
    elif case == "gelu":
        y = x.gelu()
    elif case == "gelu_tanh":
        y = x.gelu("tanh")
    elif case == "masked_softmax":
        if symbolic:
            pad = cx.tensor(("batch", d), dtype="bool", name="pad")
            y = lm.where(pad.unsqueeze(1), -math.inf, x).softmax(-1)
        else:
            pad = cx.tensor((d,), dtype="bool", name="pad")
            y = lm.where(pad, -math.inf, x).softmax(-1)
    elif case == "layer_norm":
        y = x.layer_norm(-1, 1e-5)
    else:
        raise ValueError(case)
    y = y.retrieve()
    t0 = time.perf_counter()
    cx.compile(device="cpu")
    compile_s = time.perf_counter() - t0
    source = cx.runtime.source if cx.runtime is not None else ""
    emit(stage="compile", compile_s=compile_s, bytes=len(source), idx=index_ops(source))

    if symbolic:
        x.set(x_np.reshape(BATCH, SEQ, d))
    else:
        x.set(x_np)
    ref_pad = None
    if pad is not None:
        if symbolic:  # one mask per batch row, broadcast over seq
            pad.set(pad_np)
            ref_pad = np.repeat(pad_np, SEQ, axis=0)
        else:  # one mask for all n rows
            pad.set(pad_np[0])
            ref_pad = np.broadcast_to(pad_np[0], (BATCH * SEQ, d))
    per_call = time_calls(cx.execute, repeats, budget_s)
    cx.execute()
    got = np.asarray(y.data(), np.float64).reshape(BATCH * SEQ, d)
    ref = chain_reference(case, k, x_np, ref_pad)
    err = float(np.max(np.abs(got - ref)))  # NaN when the output has one
    emit(stage="run", us=per_call * 1e6, err=err)


# ============================================================================ BERT children
BERT_KEYS = [("self_attn.in_proj_weight", lambda d, f: (3 * d, d)), ("self_attn.in_proj_bias", lambda d, f: (3 * d,)),
             ("self_attn.out_proj.weight", lambda d, f: (d, d)), ("self_attn.out_proj.bias", lambda d, f: (d,)),
             ("linear1.weight", lambda d, f: (f, d)), ("linear1.bias", lambda d, f: (f,)),
             ("linear2.weight", lambda d, f: (d, f)), ("linear2.bias", lambda d, f: (d,)),
             ("norm1.weight", lambda d, f: (d,)), ("norm1.bias", lambda d, f: (d,)),
             ("norm2.weight", lambda d, f: (d,)), ("norm2.bias", lambda d, f: (d,))]


def bert_weights(path: str) -> None:
    """PyTorch-named parameters of the encoder (uniform +-1/sqrt(fan_in); norms around 1/0), saved as .npz."""
    rng = np.random.default_rng(1)
    d, f = BERT["d"], BERT["ffn"]
    out = {}
    for layer in range(BERT["layers"]):
        for name, shape in BERT_KEYS:
            shp = shape(d, f)
            if name.startswith("norm"):
                base = 1.0 if name.endswith("weight") else 0.0
                val = base + 0.1 * rng.standard_normal(shp)
            else:
                fan_in = shp[1] if len(shp) == 2 else (f if name.startswith("linear2") else d)
                val = rng.uniform(-1, 1, shp) / math.sqrt(fan_in)
            out[f"layers.{layer}.{name}"] = val.astype(np.float32)
    np.savez(path, **out)


def bert_inputs(config: str):
    b, s = (int(v) for v in config.split("x"))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((b, s, BERT["d"])).astype(np.float32)
    lengths = rng.integers(max(1, s // 2), s + 1, b)
    lengths[0] = s  # one full row
    pad = np.arange(s)[None, :] >= lengths[:, None]
    return x, pad


def luminal_bert(symbolic_dims):
    import luminal as lm
    from luminal.nn.transformer import TransformerEncoder, TransformerEncoderLayer

    layer = TransformerEncoderLayer(BERT["d"], BERT["heads"], BERT["ffn"], dropout=0.0, activation="gelu",
                                    layer_norm_eps=BERT["eps"], batch_first=True)
    enc = TransformerEncoder(layer, BERT["layers"]).eval()
    cx = lm.Graph()
    b, s = symbolic_dims
    x = cx.tensor((b, s, BERT["d"]), name="x")
    pad = cx.tensor((b, s), dtype="bool", name="pad")
    y = enc(x, src_key_padding_mask=pad).retrieve()
    return enc, cx, x, pad, y


def run_bert_child(variant: str, configs, weights: str, outdir: str, repeats: int, budget_s: float,
                   torch_threads: int = 0, search_budget: float = 60.0) -> None:
    state = dict(np.load(weights))
    if variant == "torch":
        import torch
        if torch_threads:
            torch.set_num_threads(torch_threads)
        tl = torch.nn.TransformerEncoderLayer(BERT["d"], BERT["heads"], BERT["ffn"], dropout=0.0, activation="gelu",
                                              layer_norm_eps=BERT["eps"], batch_first=True)
        enc = torch.nn.TransformerEncoder(tl, BERT["layers"], enable_nested_tensor=False).eval()
        enc.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        emit(stage="compile", compile_s=0.0, threads=torch.get_num_threads())
        for config in configs:
            x_np, pad_np = bert_inputs(config)
            xt, pt = torch.from_numpy(x_np), torch.from_numpy(pad_np)

            def step():
                with torch.no_grad():
                    return enc(xt, src_key_padding_mask=pt)
            per_call = time_calls(step, repeats, budget_s)
            np.save(os.path.join(outdir, f"torch_{config}.npy"), step().numpy())
            emit(stage=config, ms=per_call * 1e3)
        return

    if variant in ("symbolic", "search"):
        enc, cx, x, pad, y = luminal_bert(("batch", "seq"))
        enc.load_state_dict(state)
        t0 = time.perf_counter()
        cx.compile(device="cpu", **({"search": "full", "budget_s": search_budget} if variant == "search" else {}))
        src = cx.runtime.source if cx.runtime is not None else ""
        emit(stage="compile", compile_s=time.perf_counter() - t0, bytes=len(src), idx=index_ops(src))
    for config in configs:
        if variant == "fixed":
            b, s = (int(v) for v in config.split("x"))
            enc, cx, x, pad, y = luminal_bert((b, s))
            enc.load_state_dict(state)
            t0 = time.perf_counter()
            cx.compile(device="cpu")
            src = cx.runtime.source if cx.runtime is not None else ""
            emit(stage=f"compile {config}", compile_s=time.perf_counter() - t0, bytes=len(src), idx=index_ops(src))
        x_np, pad_np = bert_inputs(config)
        x.set(x_np)
        pad.set(pad_np)
        extra = {}
        if variant == "search":  # the first call at these sizes searches (and rebuilds the library)
            t0 = time.perf_counter()
            cx.execute()
            extra = {"search_s": time.perf_counter() - t0,
                     "winners": sorted(set(cx.runtime.choices_at(cx.dyn_map).values()))}
        per_call = time_calls(cx.execute, repeats, budget_s)
        cx.execute()
        np.save(os.path.join(outdir, f"{variant}_{config}.npy"), y.data())
        emit(stage=config, ms=per_call * 1e3, **extra)


# ============================================================================ parent
LIVE: list = []  # children started by this run, killed on the way out (Ctrl-C included)


class Child:
    """A child process in its own session whose JSON stdout lines are collected by a reader thread."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        LIVE.append(self)
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    @staticmethod
    def _read(stream, q):
        for line in stream:
            q.put(line)
        q.put(None)

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def next_record(self, timeout: float):
        """The next JSON record; ``"timeout"`` (the child is then killed) or ``"failed: ..."`` otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return "timeout"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait()
                time.sleep(0.05)  # let the stderr thread finish
                last = next((ln.strip() for ln in reversed(self.stderr) if ln.strip()), f"exit {self.proc.returncode}")
                return f"failed: {last[:70]}"
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue  # a stray print from a library

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the child's own session: python and its cc/cc1
            except ProcessLookupError:
                pass
            self.proc.wait()

    def finish(self):
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()


def child_env(cache: str) -> dict:
    return dict(os.environ, LUMINAL_CACHE_DIR=cache, PYTHONHASHSEED="0")


def leftover_c(cache: str):
    """(bytes, idx) of the .c source a timed-out compile left in its cache folder, or None."""
    files = glob.glob(os.path.join(cache, "*.c"))
    if not files:
        return None
    with open(max(files, key=os.path.getsize)) as f:
        src = f.read()
    return len(src), index_ops(src)


def fmt(v, spec: str, width: int) -> str:
    if isinstance(v, str):
        return f"{v:>{width}}"
    if v is None:
        return f"{'-':>{width}}"
    if isinstance(v, float) and math.isnan(v):
        return f"{'nan':>{width}}"
    return f"{v:>{width}{spec}}"


def short(r) -> str:
    """A cell for a stage that did not produce a record."""
    if r == "timeout":
        return "timeout"
    return "failed" if isinstance(r, str) else "-"


def measure_chain(case, k, symbolic, args, tmp):
    cache = tempfile.mkdtemp(dir=tmp)
    argv = ["--child", "chain", "--case", case, "--k", str(k or 0), "--repeats", str(args.repeats),
            "--budget", str(args.budget)] + (["--symbolic"] if symbolic else [])
    child = Child(argv, child_env(cache))
    out = {"bytes": None, "idx": None, "compile": None, "us": None, "err": None, "note": ""}
    r = child.next_record(args.timeout)
    if isinstance(r, dict):
        out.update(bytes=f"{r['bytes'] / 1024:.1f}", idx=str(r["idx"]), compile=r["compile_s"])
        r = child.next_record(args.timeout)
        if isinstance(r, dict):
            out.update(us=r["us"], err=r["err"])
        else:
            out.update(us=short(r))
            out["note"] = r if r != "timeout" else ""
    else:
        out.update(compile=short(r))
        out["note"] = r if r != "timeout" else ""
        left = leftover_c(cache)
        if left:
            out.update(bytes=f"{left[0] / 1024:.1f}*", idx=f"{left[1]}*")
    child.finish()
    shutil.rmtree(cache, ignore_errors=True)
    return out


def chain_table(args, tmp) -> None:
    cases = [(c, k) for c in args.cases for k in (QUICK_CHAIN.get(c, CHAIN_CASES[c][1]) if args.quick
                                                   else CHAIN_CASES[c][1])]
    print(f"Table 1: elementwise/row chains, symbolic (batch={BATCH}, seq={SEQ}, d) vs fixed (n={BATCH * SEQ}, d); "
          f"timeout {args.timeout:g} s per stage")
    head = (f"{'case':<15}{'d':>5}{'k':>4} | {'C KB sym':>9}{'fix':>7} | {'idx sym':>8}{'fix':>5} | "
            f"{'compile s sym':>13}{'fix':>7} | {'us/call sym':>11}{'fix':>9}{'sym/fix':>9} | {'err sym':>8}{'fix':>9}")
    print(head)
    print("-" * len(head))
    notes, flat_cells = [], []
    for case, k in cases:
        d = CHAIN_CASES[case][0]
        fx = measure_chain(case, k, False, args, tmp)
        sy = measure_chain(case, k, True, args, tmp)
        ratio = sy["us"] / fx["us"] if isinstance(sy["us"], float) and isinstance(fx["us"], float) else None
        print(f"{case:<15}{d:>5}{k if k else '':>4} | {fmt(sy['bytes'], '', 9)}{fmt(fx['bytes'], '', 7)} | "
              f"{fmt(sy['idx'], '', 8)}{fmt(fx['idx'], '', 5)} | {fmt(sy['compile'], '.2f', 13)}"
              f"{fmt(fx['compile'], '.2f', 7)} | {fmt(sy['us'], '.1f', 11)}{fmt(fx['us'], '.1f', 9)}"
              f"{fmt(ratio, '.2f', 9)} | {fmt(sy['err'], '.1e', 8)}{fmt(fx['err'], '.1e', 9)}", flush=True)
        flat_cells += [str(o[c]) for o in (sy, fx) for c in ("bytes", "idx")]
        for name, o in (("sym", sy), ("fix", fx)):
            if o["note"]:
                notes.append(f"  {case} k={k} {name}: {o['note']}")
    if any(o.endswith("*") for o in flat_cells):
        print("  * read from the .c file left by the timed-out compile")
    for n in notes:
        print(n)


def bert_table(args, tmp) -> None:
    configs = args.configs
    weights = os.path.join(tmp, "bert_weights.npz")
    bert_weights(weights)
    outdir = tempfile.mkdtemp(dir=tmp)
    print(f"\nTable 2: BERT encoder (MiniLM-L6 shape: {BERT['layers']} layers, d {BERT['d']}, {BERT['heads']} heads, "
          f"FFN {BERT['ffn']}, erf GELU, post-LN, bool padding mask); timeout {args.timeout:g} s per stage")
    res = {v: {} for v in ("symbolic", "fixed", "torch", "search")}
    notes = []
    variants = ["symbolic", "fixed"] + ([] if args.no_torch else ["torch"]) + (["search"] if args.search else [])
    for variant in variants:
        cache = tempfile.mkdtemp(dir=tmp)
        child = Child(["--child", "bert", "--variant", variant, "--configs", ",".join(configs), "--out", outdir,
                       "--weights", weights, "--repeats", str(args.repeats), "--budget", str(args.budget),
                       "--torch-threads", str(args.torch_threads), "--search-budget", str(args.search_budget)],
                      child_env(cache))
        stages = (["compile"] + configs if variant != "fixed" else [s for c in configs for s in (f"compile {c}", c)])
        dead = None
        for stage in stages:
            r = dead or child.next_record(args.timeout)
            if isinstance(r, dict):
                res[variant][r.pop("stage")] = r
            else:
                first_failure, dead = dead is None, r
                res[variant][stage] = short(r)
                if stage.startswith("compile") and variant != "torch" and r == "timeout":
                    left = leftover_c(cache)
                    if left:
                        res[variant][stage + " c"] = left
                if r != "timeout" and first_failure:
                    notes.append(f"  {variant} {stage}: {r}")
        if variant == "torch" and isinstance(res["torch"].get("compile"), dict):
            notes.append(f"  torch threads: {res['torch']['compile'].get('threads')}")
        child.finish()
        shutil.rmtree(cache, ignore_errors=True)

    def ms(variant, config):
        r = res[variant].get(config)
        return r["ms"] if isinstance(r, dict) else r

    def comp(stage_rec, leftover=None):
        if isinstance(stage_rec, dict):
            return stage_rec["compile_s"], f"{stage_rec['bytes'] / 1024:.0f}", str(stage_rec["idx"])
        if leftover:
            return stage_rec, f"{leftover[0] / 1024:.0f}*", f"{leftover[1]}*"
        return stage_rec, None, None

    head = (f"{'config':<8} | {'sym ms':>9}{'fixed ms':>10}{'torch ms':>10} | {'sym/fix':>8}{'sym/torch':>10}"
            f"{'fix/torch':>10} | {'compile s sym':>13}{'fix':>7} | {'C KB sym':>9}{'fix':>6} | {'idx sym':>8}"
            f"{'fix':>5} | {'max|diff| sym':>13}{'fix':>9}")
    print(head)
    print("-" * len(head))
    sym_c, sym_kb, sym_idx = comp(res["symbolic"].get("compile"), res["symbolic"].get("compile c"))
    for config in configs:
        s, f, t = ms("symbolic", config), ms("fixed", config), ms("torch", config) if not args.no_torch else "n/a"
        fix_c, fix_kb, fix_idx = comp(res["fixed"].get(f"compile {config}"), res["fixed"].get(f"compile {config} c"))
        ratio = lambda a, b: a / b if isinstance(a, float) and isinstance(b, float) else None  # noqa: E731
        diffs = []
        for variant in ("symbolic", "fixed"):
            a, b = os.path.join(outdir, f"{variant}_{config}.npy"), os.path.join(outdir, f"torch_{config}.npy")
            if os.path.exists(a) and os.path.exists(b):
                diffs.append(float(np.max(np.abs(np.load(a).astype(np.float64) - np.load(b)))))
            else:
                diffs.append(None)
        print(f"{config:<8} | {fmt(s, '.2f', 9)}{fmt(f, '.2f', 10)}{fmt(t, '.2f', 10)} | {fmt(ratio(s, f), '.2f', 8)}"
              f"{fmt(ratio(s, t), '.2f', 10)}{fmt(ratio(f, t), '.2f', 10)} | {fmt(sym_c, '.2f', 13)}"
              f"{fmt(fix_c, '.2f', 7)} | {fmt(sym_kb, '', 9)}{fmt(fix_kb, '', 6)} | {fmt(sym_idx, '', 8)}"
              f"{fmt(fix_idx, '', 5)} | {fmt(diffs[0], '.1e', 13)}{fmt(diffs[1], '.1e', 9)}", flush=True)
    print("  the symbolic graph is compiled once for all configs; fixed is compiled per config (its own compile s)")
    if args.search:
        print(f"  symbolic + search=\"full\" (budget {args.search_budget:g} s; searched at each config's first call):")
        for config in configs:
            r = res["search"].get(config)
            t = ms("torch", config) if not args.no_torch else None
            if isinstance(r, dict):
                vs = f", {r['ms'] / t:.2f}x torch" if isinstance(t, float) else ""
                print(f"    {config:<8} {r['ms']:.2f} ms{vs}; search + rebuild {r['search_s']:.1f} s; "
                      f"GEMM kernels used: {', '.join(r['winners'])}")
            else:
                print(f"    {config:<8} {r}")
    for n in notes:
        print(n)


def header() -> None:
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}")
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../luminal"], cwd=HERE, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except Exception:
        rev, dirty = "?", ""
    probe = subprocess.run([sys.executable, "-c", "import luminal, os; print(os.path.dirname(luminal.__file__))"],
                           capture_output=True, text=True)
    where = probe.stdout.strip() or f"import failed: {probe.stderr.strip().splitlines()[-1] if probe.stderr else '?'}"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "none"
    try:
        ccv = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    except Exception:
        ccv = cc
    mine = os.path.realpath(where) == os.path.realpath(os.path.join(HERE, "..", "luminal"))
    rev = f"{rev}{' (luminal/ modified in the work tree)' if dirty else ''}" if mine else "(not this checkout's)"
    print(f"luminal from {where}, git {rev}; cc: {ccv}")


def interleaved_table(args, tmp: str) -> None:
    """Table 3: the BERT encoder of table 2, luminal (symbolic, fixed) and PyTorch in one process, one call of each
    in turn per round, so that the host's speed changes hit all three alike (on a shared machine that swings 2x
    from one minute to the next, separate processes' times do not compare). Min and median over the rounds."""
    import torch
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    weights = os.path.join(tmp, "bert_weights_interleaved.npz")
    bert_weights(weights)
    state = dict(np.load(weights))
    tl = torch.nn.TransformerEncoderLayer(BERT["d"], BERT["heads"], BERT["ffn"], dropout=0.0, activation="gelu",
                                          layer_norm_eps=BERT["eps"], batch_first=True)
    tenc = torch.nn.TransformerEncoder(tl, BERT["layers"], enable_nested_tensor=False).eval()
    tenc.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    enc, cx, x, pad, y = luminal_bert(("batch", "seq"))
    enc.load_state_dict(state)
    cx.compile(device="cpu")
    print("\nTable 3: BERT encoder, luminal and PyTorch alternating in one process (ms per call)")
    print(f"{'config':8} | {'sym min':>8} {'fixed min':>9} {'torch min':>9} | {'sym med':>8} {'fixed med':>9} "
          f"{'torch med':>9} | {'sym/torch':>9} {'fix/torch':>9} (min)")
    for config in args.configs:
        b, s_ = (int(v) for v in config.split("x"))
        fenc, fcx, fx, fpad, _ = luminal_bert((b, s_))
        fenc.load_state_dict(state)
        fcx.compile(device="cpu")
        x_np, pad_np = bert_inputs(config)
        for t, v in ((x, x_np), (pad, pad_np), (fx, x_np), (fpad, pad_np)):
            t.set(v)
        xt, pt = torch.from_numpy(x_np), torch.from_numpy(pad_np)

        def torch_call():
            with torch.no_grad():
                return tenc(xt, src_key_padding_mask=pt)
        calls = {"sym": cx.execute, "fixed": fcx.execute, "torch": torch_call}
        for f in calls.values():  # warm-up
            f()
        times = {k: [] for k in calls}
        rounds = max(3, args.repeats)
        for _r in range(rounds):
            for k, f in calls.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        mn = {k: min(v) * 1e3 for k, v in times.items()}
        md = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(f"{config:8} | {mn['sym']:8.2f} {mn['fixed']:9.2f} {mn['torch']:9.2f} | {md['sym']:8.2f} "
              f"{md['fixed']:9.2f} {md['torch']:9.2f} | {mn['sym'] / mn['torch']:9.2f} {mn['fixed'] / mn['torch']:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer cases, 1x32 only, fewer repeats")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per child stage (compile, each run)")
    parser.add_argument("--only", default="chains,bert",
                        help="tables: chains, bert, interleaved (BERT with PyTorch in one process)")
    parser.add_argument("--cases", default=",".join(CHAIN_CASES))
    parser.add_argument("--configs", default=None, help="BERT batch x seq list (default 1x32,32x128; quick 1x32)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--budget", type=float, default=None, help="seconds of timed calls per measurement")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--search", action="store_true", help="also run the symbolic BERT with search=\"full\"")
    parser.add_argument("--search-budget", type=float, default=60.0, help="budget_s of that search")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (default: torch's own)")
    # child-process arguments
    parser.add_argument("--child", choices=["chain", "bert"], help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--symbolic", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.budget = args.budget if args.budget is not None else (2.0 if args.quick else 10.0)
    if args.child == "chain":
        run_chain_child(args.case, args.k or None, args.symbolic, args.repeats, args.budget)
        return
    if args.child == "bert":
        run_bert_child(args.variant, args.configs.split(","), args.weights, args.out, args.repeats, args.budget,
                       args.torch_threads, args.search_budget)
        return

    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CHAIN_CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {list(CHAIN_CASES)}")
    if args.quick and args.cases == list(CHAIN_CASES):
        args.cases = list(QUICK_CHAIN)
    args.configs = (args.configs or ("1x32" if args.quick else ",".join(CONFIGS))).split(",")
    if not args.no_torch:
        try:
            import importlib.util
            args.no_torch = importlib.util.find_spec("torch") is None
        except Exception:
            args.no_torch = True
    header()
    tmp = tempfile.mkdtemp(prefix="lm_symbench_")
    try:
        tables = args.only.split(",")
        if "chains" in tables:
            chain_table(args, tmp)
        if "bert" in tables:
            bert_table(args, tmp)
        if "interleaved" in tables:
            interleaved_table(args, tmp)
    finally:
        for child in LIVE:
            child.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
