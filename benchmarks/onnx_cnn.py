"""Imported CNNs with a dynamic batch: luminal (ONNX import, one program over ("batch", ...)) vs onnxruntime vs PyTorch.

Run:  python benchmarks/onnx_cnn.py [--models resnet18,mobilenet] [--batches 1,8] [--size 112] [--repeats 5]
      [--search quick|full] [--search-budget 30]

The models are defined here in torch (no torchvision): ``resnet18`` (ResNet-18's layout: a 7x7/2 stem, max pool,
four stages of two basic blocks with 64-128-256-512 channels, batch norms, global average pool, a 1000-way linear
layer) and ``mobilenet`` (a MobileNetV2-style stack: inverted residuals with 3x3 depthwise convolutions, ReLU6),
seeded random weights, in eval mode. Each is exported with ``torch.onnx.export`` (TorchScript exporter, opset 17)
with ``{0: "batch"}`` dynamic on input and output, imported with ``luminal.onnx.load(device="cpu")`` and compiled
once; the same program serves every batch size. Columns: min ms per inference (min over --repeats of the mean of
an inner loop of ~0.3 s after ~0.1 s of warm-up calls; the frameworks alternate, so they see the same machine
load), for
luminal, onnxruntime (CPU execution provider, intra-op threads = cores) and torch eager (no_grad); the direct
convolution kernels in luminal's program; max |luminal - onnxruntime| relative to the largest output. ``--search``
adds a column: the same model compiled with ``search=`` (a fresh tuning cache; the batch is symbolic, so the GEMMs
are searched at each batch's first call, which is not timed) and ``lm+s/lm``, its time over the unsearched one's
(a searched program slower than the unsearched one is a bug: this column found one). Prints a table; asserts
nothing. OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
import warnings

import numpy as np


def _models(name: str):
    import torch
    import torch.nn as T

    class Basic(T.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = T.Conv2d(cin, cout, 3, stride, 1, bias=False), T.BatchNorm2d(cout)
            self.c2, self.b2 = T.Conv2d(cout, cout, 3, 1, 1, bias=False), T.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else T.Sequential(
                T.Conv2d(cin, cout, 1, stride, bias=False), T.BatchNorm2d(cout))

        def forward(self, x):
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class Inverted(T.Module):
        def __init__(self, cin, cout, stride, expand=6):
            super().__init__()
            h = cin * expand
            self.body = T.Sequential(T.Conv2d(cin, h, 1, bias=False), T.BatchNorm2d(h), T.ReLU6(),
                                     T.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), T.BatchNorm2d(h), T.ReLU6(),
                                     T.Conv2d(h, cout, 1, bias=False), T.BatchNorm2d(cout))
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    torch.manual_seed(0)
    if name == "resnet18":
        layers = [T.Conv2d(3, 64, 7, 2, 3, bias=False), T.BatchNorm2d(64), T.ReLU(), T.MaxPool2d(3, 2, 1)]
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        layers += [T.AdaptiveAvgPool2d(1), T.Flatten(), T.Linear(512, 1000)]
    elif name == "mobilenet":
        layers = [T.Conv2d(3, 32, 3, 2, 1, bias=False), T.BatchNorm2d(32), T.ReLU6()]
        cin = 32
        for cout, stride, n in ((16, 1, 1), (24, 2, 2), (32, 2, 3), (64, 2, 2), (96, 1, 2)):
            for i in range(n):
                layers.append(Inverted(cin, cout, stride if i == 0 else 1, 1 if cout == 16 else 6))
                cin = cout
        layers += [T.Conv2d(cin, 320, 1, bias=False), T.BatchNorm2d(320), T.ReLU6(), T.AdaptiveAvgPool2d(1),
                   T.Flatten(), T.Linear(320, 1000)]
    else:
        raise ValueError(f"unknown model {name!r}; expected resnet18 or mobilenet")
    net = T.Sequential(*layers).eval()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        for m in net.modules():
            if isinstance(m, T.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net


@contextlib.contextmanager
def _cache_dir(path: str):
    """``$LUMINAL_CACHE_DIR`` set to ``path`` inside the block (restored after)."""
    old = os.environ.get("LUMINAL_CACHE_DIR")
    os.environ["LUMINAL_CACHE_DIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LUMINAL_CACHE_DIR")
        else:
            os.environ["LUMINAL_CACHE_DIR"] = old


def _time(fn, seconds: float = 0.3) -> float:
    """Mean seconds per call over ~``seconds``, after ~0.1 s of calls: the framework that ran before may leave its
    worker threads spinning for a while (onnxruntime's and OpenMP's spin-wait), which would slow the first calls."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.1:
        fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return el / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--search", choices=["quick", "full"], default=None, help="also time luminal with search=")
    ap.add_argument("--search-budget", type=float, default=30.0)
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    import luminal.onnx as lo

    threads = os.cpu_count()
    torch.set_num_threads(threads)
    print(f"cpu: {threads} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"inputs (batch, 3, {args.size}, {args.size})")
    print(f"{'model':10s} {'batch':>5s} {'luminal':>9s} {'ort':>9s} {'torch':>9s} {'lm/ort':>7s} {'lm/torch':>8s} "
          f"{'direct':>6s} {'compile s':>9s} {'rel diff':>9s}" + (f" {'lm+search':>9s} {'lm+s/lm':>7s}" if args.search
                                                                  else "") + "   (min ms per inference)")
    for name in [m for m in args.models.split(",") if m]:
        net = _models(name)
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, torch.randn(2, 3, args.size, args.size), buf, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                              opset_version=17, dynamo=False)
        proto = buf.getvalue()
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as search_cache:
            # a cold compile; and each batch's first call (where a search="off" program looks tuned GEMMs up, and
            # a searching one searches) in a tuning cache of its own, so the unsearched column stays unsearched
            with _cache_dir(cache):
                t0 = time.perf_counter()
                model = lo.load(proto, device="cpu", compile=True)
                compile_s = time.perf_counter() - t0
            searched = None
            if args.search:
                with _cache_dir(search_cache):
                    searched = lo.load(proto, device="cpu").compile(search=args.search, budget_s=args.search_budget)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            sess = ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"])
            direct = model.runtime.source.count("direct convolution (see luminal/codegen/gemm_direct.py)")
            for b in [int(v) for v in args.batches.split(",") if v]:
                x = np.random.default_rng(b).standard_normal((b, 3, args.size, args.size)).astype(np.float32)
                tx = torch.from_numpy(x)
                want = sess.run(None, {"x": x})[0]
                with _cache_dir(cache):
                    got = np.asarray(model.run({"x": x})["y"])
                diff = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))

                def lm_step():
                    model.run({"x": x})

                def ort_step():
                    sess.run(None, {"x": x})

                def torch_step():
                    with torch.no_grad():
                        net(tx)
                steps = [("lm", lm_step), ("ort", ort_step), ("torch", torch_step)]
                if searched is not None:
                    with _cache_dir(search_cache):
                        searched.run({"x": x})  # (the search at this batch: not timed)
                    steps.append(("lms", lambda: searched.run({"x": x})))
                best = {k: float("inf") for k, _ in steps}
                for _ in range(args.repeats):
                    for k, fn in steps:
                        best[k] = min(best[k], _time(fn))
                print(f"{name:10s} {b:5d} {best['lm'] * 1e3:9.2f} {best['ort'] * 1e3:9.2f} {best['torch'] * 1e3:9.2f} "
                      f"{best['lm'] / best['ort']:7.2f} {best['lm'] / best['torch']:8.2f} {direct:6d} "
                      f"{compile_s:9.1f} {diff:9.1e}" + (f" {best['lms'] * 1e3:9.2f} {best['lms'] / best['lm']:7.2f}"
                                                         if searched is not None else ""))


if __name__ == "__main__":
    main()
