"""Training steps of small layer families (a guard against slow gradients): luminal vs PyTorch eager, one process.

Run:  python benchmarks/layer_training.py

Each case builds a tiny model in luminal and its torch twin (own random weights, the same work), takes the
gradient of a scalar loss with respect to every parameter and float input, and times 5 steps of each (min ms;
luminal's step graph is compiled once for ``device="cpu"``). Cases: a conv followed by ``interpolate`` x2
(nearest, bilinear: the gradient of a gather read several times per entry), an LSTM language model (embedding,
LSTM, vocabulary head), a ViT-style patch embedding + encoder layer, a GroupNorm-SiLU-conv block (diffusion
UNets), top-k over a 5000-wide linear layer. ``ratio`` = luminal / torch (below 1: luminal faster). Found with it:
upsampling's gradient at 2-3x torch's time (a one-hot), now 0.55-0.72x. Asserts nothing about timings;
OPENBLAS_CORETYPE is printed, never changed.
"""
import os
import time
import numpy as np
import torch
import luminal as lm
import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import grad
rng = np.random.default_rng(0)
print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
def bench(name, build_lm, build_t, inputs):
    cx = lm.Graph()
    xs = [cx.tensor(a.shape, dtype=lm.DType(a.dtype.name)).set(a) for a in inputs]
    mod, loss = build_lm(cx, *xs)
    gs = grad(loss, list(mod.parameters()) + [x for x in xs if x.dtype.is_float])
    for g in gs: g.retrieve()
    t = time.perf_counter(); cx.compile(device="cpu"); c = time.perf_counter() - t
    cx.execute()
    lt = []
    for i in range(5):
        t = time.perf_counter(); cx.execute(); lt.append(time.perf_counter() - t)
    tmod, tf = build_t()
    txs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    tt = []
    for i in range(5):
        t = time.perf_counter(); l = tf(tmod, *txs); torch.autograd.grad(l, list(tmod.parameters()) + [x for x in txs if x.requires_grad]); tt.append(time.perf_counter() - t)
    print(f"{name:<20} compile {c:5.2f}s luminal {min(lt)*1e3:8.2f} ms torch {min(tt)*1e3:8.2f} ms ratio {min(lt)/min(tt):6.2f}", flush=True)

# 1. upsampling (UNet decoder piece)
x = rng.standard_normal((4, 16, 32, 32)).astype(np.float32)
for mode in ("nearest", "bilinear"):
    def blm(cx, x, mode=mode):
        m = nn.Conv2d(16, 16, 3, padding=1)
        return m, (F.interpolate(m(x), scale_factor=2, mode=mode) ** 2).mean()
    def bt(mode=mode):
        m = torch.nn.Conv2d(16, 16, 3, padding=1)
        return m, lambda m, x: (torch.nn.functional.interpolate(m(x), scale_factor=2, mode=mode) ** 2).mean()
    bench("interp-" + mode, blm, bt, [x])
# 2. LSTM LM
ids = rng.integers(0, 1000, (8, 32)).astype(np.int64)
def blm(cx, ids):
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.e = nn.Embedding(1000, 64); s.l = nn.LSTM(64, 128, batch_first=True); s.h = nn.Linear(128, 1000)
        def forward(s, i):
            y, _ = s.l(s.e(i)); return s.h(y)
    m = M(); return m, m(ids).mean()
def bt():
    class M(torch.nn.Module):
        def __init__(s):
            super().__init__(); s.e = torch.nn.Embedding(1000, 64); s.l = torch.nn.LSTM(64, 128, batch_first=True); s.h = torch.nn.Linear(128, 1000)
        def forward(s, i):
            y, _ = s.l(s.e(i)); return s.h(y)
    return M(), lambda m, i: m(i).mean()
bench("lstm-lm", blm, bt, [ids])
# 3. ViT-ish patch embed + attention
img = rng.standard_normal((8, 3, 64, 64)).astype(np.float32)
def blm(cx, img):
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.p = nn.Conv2d(3, 128, 8, 8); s.t = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True); s.h = nn.Linear(128, 10)
        def forward(s, x):
            y = s.p(x).reshape((8, 128, 64)).permute(0, 2, 1); return s.h(s.t(y).mean(1))
    m = M(); return m, m(img).sum()
def bt():
    class M(torch.nn.Module):
        def __init__(s):
            super().__init__(); s.p = torch.nn.Conv2d(3, 128, 8, 8); s.t = torch.nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True); s.h = torch.nn.Linear(128, 10)
        def forward(s, x):
            y = s.p(x).reshape(8, 128, 64).permute(0, 2, 1); return s.h(s.t(y).mean(1))
    return M(), lambda m, x: m(x).sum()
bench("vit", blm, bt, [img])
# 4. group norm + conv (diffusion-style block)
x = rng.standard_normal((4, 32, 32, 32)).astype(np.float32)
def blm(cx, x):
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.g = nn.GroupNorm(8, 32); s.c = nn.Conv2d(32, 32, 3, padding=1)
        def forward(s, x): return s.c(F.silu(s.g(x)))
    m = M(); return m, (m(x) ** 2).mean()
def bt():
    class M(torch.nn.Module):
        def __init__(s):
            super().__init__(); s.g = torch.nn.GroupNorm(8, 32); s.c = torch.nn.Conv2d(32, 32, 3, padding=1)
        def forward(s, x): return s.c(torch.nn.functional.silu(s.g(x)))
    return M(), lambda m, x: (m(x) ** 2).mean()
bench("gn-conv", blm, bt, [x])
# 5. topk / sort gradient
x = rng.standard_normal((64, 5000)).astype(np.float32)
def blm(cx, x):
    m = nn.Linear(5000, 5000, bias=False)
    return m, (m(x).topk(50, -1)[0] ** 2).sum()
def bt():
    m = torch.nn.Linear(5000, 5000, bias=False)
    return m, lambda m, x: (m(x).topk(50, -1)[0] ** 2).sum()
bench("topk", blm, bt, [x])
