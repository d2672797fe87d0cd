"""Training steps of small layer families (a guard against slow gradients): luminal vs PyTorch eager, one process.

Run:  python benchmarks/layer_training.py [case ...]

Each case builds a tiny model in luminal and its torch twin (own random weights, the same work), takes the
gradient of a scalar loss with respect to every parameter and float input, and times 5 steps of each (min ms;
luminal's step graph is compiled once for ``device="cpu"``; each model is written once against ``luminal.nn`` and
``torch.nn``). Cases: a conv followed by ``Upsample(scale_factor=2)``
(nearest, bilinear: the gradient of a gather read several times per entry), an LSTM language model (embedding,
LSTM, vocabulary head), a ViT-style patch embedding + encoder layer, a GroupNorm-SiLU-conv block (diffusion
UNets), top-k over a 5000-wide linear layer, two strided transposed convolutions (a GAN generator), two strided
(downsampling) convolutions, a pre-LN encoder layer under a ``sum()`` loss (its upstream gradient
the constant 1), MobileNetV2's inverted residual and ConvNeXt's block (depthwise convolutions).
``ratio`` = luminal / torch (below 1: luminal faster). Found with it:
upsampling's gradient at 2-3x torch's time (a one-hot), now 0.55-0.72x; the encoder under ``sum()`` at 3.7x (its
weight gradients summed as generic reductions: the e-graph's ``gemm`` ruleset keeps them GEMMs); a DCGAN-style
stack of strided ``ConvTranspose2d`` at 120x (a gather of 256 candidates per element in the input gradient; now
PyTorch's GEMM + col2im algorithm); strided (downsampling) convolutions at 2.9-3.2x (their input gradient a
gather over every window offset; now zero-interleaved, shifted copies); a Conv1d-BatchNorm1d-GELU-MaxPool1d
block at 1.8-2x (the layout pass stored it channels-last, counting per-channel parameter reads as strided; now
1.0x, 0.7x after the loop split of divided indices); a reflect-padded conv + InstanceNorm at 1.13-1.38x (the pad's
gradient a ScatterAdd: now slices of the upstream gradient); a Conv3d-BatchNorm3d pair at 1.5-2x (skinny
fused-prologue GEMMs on edge tiles, masked im2col/col2im loops: 1.26x after the small-M configuration and the
masked-loop split, 2026-11-27; 1.06-1.13x with the direct convolution, whose input gradient is a convolution,
2026-11-28, which also took gn-conv 1.17 -> 0.76x and strided-conv 1.48 -> 1.06x). Asserts nothing about timings;
OPENBLAS_CORETYPE is printed, never changed.
"""
import os
import time

import numpy as np
import torch

import luminal as lm
import luminal.nn as lnn
from luminal.training import grad


class LstmLM:
    """Embedding -> LSTM -> vocabulary head, built from either namespace (``luminal.nn`` or ``torch.nn``)."""

    def __new__(cls, ns):
        class M(ns.Module):
            def __init__(self):
                super().__init__()
                self.e, self.l, self.h = ns.Embedding(1000, 64), ns.LSTM(64, 128, batch_first=True), ns.Linear(128, 1000)

            def forward(self, i):
                y, _ = self.l(self.e(i))
                return self.h(y)
        return M()


class Vit:
    """A patch embedding (conv 8x8, stride 8) and one encoder layer, mean-pooled into a 10-way head."""

    def __new__(cls, ns):
        class M(ns.Module):
            def __init__(self):
                super().__init__()
                self.p = ns.Conv2d(3, 128, 8, 8)
                self.t = ns.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
                self.h = ns.Linear(128, 10)

            def forward(self, x):
                return self.h(self.t(self.p(x).reshape((8, 128, 64)).permute(0, 2, 1)).mean(1))
        return M()


# name, model(namespace), loss(output), input
CASES = [
    ("interp-nearest", lambda ns: ns.Sequential(ns.Conv2d(16, 16, 3, padding=1), ns.Upsample(scale_factor=2)),
     lambda y: (y ** 2).mean(), ("f", (4, 16, 32, 32))),
    ("interp-bilinear", lambda ns: ns.Sequential(ns.Conv2d(16, 16, 3, padding=1),
                                                  ns.Upsample(scale_factor=2, mode="bilinear")),
     lambda y: (y ** 2).mean(), ("f", (4, 16, 32, 32))),
    ("lstm-lm", LstmLM, lambda y: y.mean(), ("ids", (8, 32), 1000)),
    ("vit", Vit, lambda y: y.sum(), ("f", (8, 3, 64, 64))),
    ("gn-conv", lambda ns: ns.Sequential(ns.GroupNorm(8, 32), ns.SiLU(), ns.Conv2d(32, 32, 3, padding=1)),
     lambda y: (y ** 2).mean(), ("f", (4, 32, 32, 32))),
    ("topk", lambda ns: ns.Linear(5000, 5000, bias=False), lambda y: (y.topk(50, -1)[0] ** 2).sum(),
     ("f", (64, 5000))),
    ("convT-stack", lambda ns: ns.Sequential(ns.ConvTranspose2d(32, 16, 4, stride=2, padding=1), ns.ReLU(),
                                             ns.ConvTranspose2d(16, 3, 4, stride=2, padding=1), ns.Tanh()),
     lambda y: (y ** 2).mean(), ("f", (8, 32, 16, 16))),
    ("strided-conv", lambda ns: ns.Sequential(ns.Conv2d(16, 32, 3, stride=2, padding=1), ns.BatchNorm2d(32), ns.ReLU(),
                                              ns.Conv2d(32, 32, 3, stride=2, padding=1)),
     lambda y: (y ** 2).mean(), ("f", (16, 16, 32, 32))),
    ("encoder-sum", lambda ns: ns.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True,
                                                          norm_first=True), lambda y: y.sum(), ("f", (8, 64, 128))),
    ("conv1d-bn-pool", lambda ns: ns.Sequential(ns.Conv1d(32, 64, 5, padding=2), ns.BatchNorm1d(64), ns.GELU(),
                                                ns.MaxPool1d(2), ns.Conv1d(64, 64, 5, padding=2)),
     lambda y: (y ** 2).mean(), ("f", (16, 32, 512))),
    ("reflect-inst", lambda ns: ns.Sequential(ns.ReflectionPad2d(1), ns.Conv2d(16, 16, 3), ns.InstanceNorm2d(16, affine=True),
                                              ns.ReLU()), lambda y: (y ** 2).mean(), ("f", (4, 16, 64, 64))),
    ("conv3d-bn", lambda ns: ns.Sequential(ns.Conv3d(4, 16, 3, padding=1), ns.BatchNorm3d(16), ns.ReLU(),
                                           ns.Conv3d(16, 16, 3, padding=1)),
     lambda y: (y ** 2).mean(), ("f", (2, 4, 16, 16, 16))),
    ("mbv2-block", lambda ns: ns.Sequential(  # MobileNetV2's inverted residual (without the skip): 1x1, 3x3 depthwise
        ns.Conv2d(32, 192, 1, bias=False), ns.BatchNorm2d(192), ns.ReLU6(),
        ns.Conv2d(192, 192, 3, padding=1, groups=192, bias=False), ns.BatchNorm2d(192), ns.ReLU6(),
        ns.Conv2d(192, 32, 1, bias=False), ns.BatchNorm2d(32)), lambda y: (y ** 2).mean(), ("f", (8, 32, 32, 32))),
    ("convnext-block", lambda ns: ns.Sequential(  # ConvNeXt's block, norm as GroupNorm(1): 7x7 depthwise, 1x1 MLP
        ns.Conv2d(96, 96, 7, padding=3, groups=96), ns.GroupNorm(1, 96), ns.Conv2d(96, 384, 1), ns.GELU(),
        ns.Conv2d(384, 96, 1)), lambda y: (y ** 2).mean(), ("f", (4, 96, 28, 28))),
]


def bench(name, make, loss_of, spec, rng) -> None:
    a = rng.integers(0, spec[2], spec[1]).astype(np.int64) if spec[0] == "ids" else \
        rng.standard_normal(spec[1]).astype(np.float32)
    cx = lm.Graph()
    x = cx.tensor(a.shape, dtype=lm.DType(a.dtype.name)).set(a)
    model = make(lnn)
    wrt = list(model.parameters()) + ([x] if x.dtype.is_float else [])
    for g in grad(loss_of(model(x)), wrt):
        g.retrieve()
    t = time.perf_counter()
    cx.compile(device="cpu")
    compile_s = time.perf_counter() - t
    tmodel = make(torch.nn)
    tx = torch.tensor(a, requires_grad=a.dtype.kind == "f")
    twrt = list(tmodel.parameters()) + ([tx] if tx.requires_grad else [])

    def torch_step():
        torch.autograd.grad(loss_of(tmodel(tx)), twrt)

    cx.execute()
    times = {}
    for side, step in (("luminal", cx.execute), ("torch", torch_step)):
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        times[side] = min(ts)
    print(f"{name:<16} compile {compile_s:5.2f} s  luminal {times['luminal'] * 1e3:8.2f} ms  torch "
          f"{times['torch'] * 1e3:8.2f} ms  ratio {times['luminal'] / times['torch']:5.2f}", flush=True)


def main() -> None:
    import sys

    only = sys.argv[1:]  # case names (default: all)
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    rng = np.random.default_rng(0)
    for name, make, loss_of, spec in CASES:
        if only and name not in only:
            continue
        bench(name, make, loss_of, spec, rng)


if __name__ == "__main__":
    main()
