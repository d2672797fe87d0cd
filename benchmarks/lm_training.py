"""A small GPT-style language model's training step (embedding, causal pre-LN layers, a vocabulary head, mean
cross-entropy over every token; gradients of every parameter, no update): luminal vs PyTorch eager, one process.

Run:  python benchmarks/lm_training.py [--vocab 8000] [--dim 128] [--heads 4] [--layers 2] [--batch 8]
                                       [--seq 64] [--rounds 15] [--profile]

Both sides build the same architecture (``nn.Embedding`` for tokens and positions, ``TransformerEncoderLayer``
with ``norm_first=True`` and an additive causal mask, ``nn.Linear`` head) with their own random weights; the
work is the same. luminal's step graph (forward + ``grad`` of all parameters) is compiled once for
``device="cpu"``; the two alternate in one process and each reports its minimum and median ms (a shared host's
speed changes from one minute to the next: compare within one run). ``--profile`` adds luminal's per-kernel
minima (``LUMINAL_PROFILE=1``). Asserts nothing about timings. OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _alternate import alternate, print_times  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("vocab", 8000), ("dim", 128), ("heads", 4), ("layers", 2), ("batch", 8), ("seq", 64),
                          ("rounds", 15)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.profile:
        os.environ["LUMINAL_PROFILE"] = "1"
    import luminal as lm
    import luminal.nn as nn
    from luminal.training import grad

    V, D, H, L, B, S = args.vocab, args.dim, args.heads, args.layers, args.batch, args.seq
    rng = np.random.default_rng(0)
    ids_np = rng.integers(0, V, (B, S)).astype(np.int64)
    tgt_np = rng.integers(0, V, (B, S)).astype(np.int64)
    mask_np = np.triu(np.full((S, S), -np.inf, np.float32), 1)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(V, D), nn.Embedding(S, D)
            self.layers = nn.ModuleList([nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True,
                                                                    norm_first=True) for _ in range(L)])
            self.head = nn.Linear(D, V)

        def forward(self, ids, mask, pos):
            x = self.emb(ids) + self.pos(pos)
            for layer in self.layers:
                x = layer(x, src_mask=mask)
            return self.head(x)

    model = LM()
    cx = lm.Graph()
    ids = cx.tensor((B, S), dtype="int64").set(ids_np)
    tgt = cx.tensor((B, S), dtype="int64").set(tgt_np)
    mask = cx.tensor((S, S)).set(mask_np)
    pos = cx.tensor((S,), dtype="int64").set(np.arange(S))
    logits = model(ids, mask, pos)
    loss = nn.functional.cross_entropy(logits.reshape((B * S, V)), tgt.reshape((B * S,))).retrieve()
    for g in grad(loss, list(model.parameters())):
        g.retrieve()
    t0 = time.perf_counter()
    cx.compile(device="cpu")
    compile_s = time.perf_counter() - t0

    torch_step = None
    try:
        import torch
        t_layers = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True,
                                                                         norm_first=True) for _ in range(L)])
        t_emb, t_pos, t_head = torch.nn.Embedding(V, D), torch.nn.Embedding(S, D), torch.nn.Linear(D, V)
        ti, tt, tm = torch.from_numpy(ids_np), torch.from_numpy(tgt_np), torch.from_numpy(mask_np)
        t_params = [p for m in (t_layers, t_emb, t_pos, t_head) for p in m.parameters()]

        def torch_step():
            x = t_emb(ti) + t_pos.weight
            for layer in t_layers:
                x = layer(x, src_mask=tm)
            out = torch.nn.functional.cross_entropy(t_head(x).reshape(B * S, V), tt.reshape(-1))
            torch.autograd.grad(out, t_params)
    except ImportError:
        pass

    rt = cx.runtime
    prof = (ctypes.c_double * len(rt.cprogram.groups))() if args.profile else None
    mins = np.full(len(rt.cprogram.groups), np.inf)

    def read():
        rt._lib.luminal_profile(prof)
        return np.array(list(prof))

    cx.execute()
    if torch_step is not None:
        torch_step()
    def luminal_step():
        nonlocal mins
        before = read() if prof is not None else None
        cx.execute()
        if prof is not None:
            mins = np.minimum(mins, read() - before)

    times = alternate({"luminal": luminal_step, "torch": torch_step}, args.rounds)
    print_times(f"LM training step: vocabulary {V}, width {D}, {H} heads, {L} layers, batch {B} x seq {S} "
                f"(luminal compile {compile_s:.2f} s, loss {float(loss.data()):.4f})", times)
    if prof is not None:
        from luminal.runtime.profile import profile_table
        print(profile_table(cx, rt.program, rt.cprogram.groups, list(mins * 1e3), 15).replace("seconds", "min ms "))


if __name__ == "__main__":
    main()
