"""Import a PyTorch model into luminal with ``torch.export``: a small ResNet-style CNN (and, when the
``transformers`` package is installed, a 2-layer BERT built from a config with random weights), with a dynamic
batch (and sequence) dim. Compares the outputs with PyTorch eager, times both, then runs the same CNN through
``torch.compile(backend="luminal")``.

Run:  python examples/torch_import.py [--device cpu|reference] [--batch 8]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from torch import nn

from luminal.frontends.torch import from_torch  # also registers the "luminal" torch.compile backend

warnings.filterwarnings("ignore", category=FutureWarning)


class Block(nn.Module):
    """A ResNet basic block (conv-bn-relu, conv-bn, residual with a strided 1x1 projection)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.proj(x))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         Block(16, 32, 2), Block(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10)).eval()


def best_ms(fn, repeat: int = 10) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def compare(name, model, module, args, pick=lambda o: o):
    got = pick(model(*[a.numpy() for a in args]))
    with torch.no_grad():
        want = pick(module(*args)).numpy()
    err = float(np.abs(got - want).max())
    t_lum = best_ms(lambda: model(*[a.numpy() for a in args]))
    with torch.no_grad():
        t_torch = best_ms(lambda: module(*args))
    shape = "x".join(str(s) for s in args[0].shape)
    print(f"{name:8s} input {shape:12s} max |luminal - torch| = {err:.1e}   luminal {t_lum:7.2f} ms   "
          f"torch eager {t_torch:7.2f} ms")
    return err


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)

    net = cnn()
    batch = torch.export.Dim("batch", min=1, max=256)
    t = time.perf_counter()
    model = from_torch(net, (torch.randn(2, 3, 32, 32),), dynamic_shapes=({0: batch},), device=args.device)
    model.compile()
    print(f"CNN: exported, imported and compiled for {args.device} in {time.perf_counter() - t:.1f} s; {model}")
    errs = []
    for n in (args.batch, args.batch + 3):           # a new batch size runs the same compiled program
        errs.append(compare("cnn", model, net, (torch.randn(n, 3, 32, 32),)))

    try:
        import transformers
        from transformers import BertConfig, BertModel
    except ImportError:
        print("transformers is not installed: skipping the BERT part")
    else:
        transformers.logging.set_verbosity_error()
        bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                    intermediate_size=512, vocab_size=1000, max_position_embeddings=128)).eval()
        seq = torch.export.Dim("seq", min=2, max=128)
        t = time.perf_counter()
        bm = from_torch(bert, (torch.randint(0, 1000, (2, 16)),), dynamic_shapes=({0: batch, 1: seq},),
                        device=args.device).compile()
        print(f"BERT: imported and compiled in {time.perf_counter() - t:.1f} s; symbols {bm.symbols}")
        for shape in ((1, 32), (args.batch, 64)):
            errs.append(compare("bert", bm, bert, (torch.randint(0, 1000, shape),),
                                pick=lambda o: o.last_hidden_state if hasattr(o, "last_hidden_state") else o[0]))

    compiled = torch.compile(net, backend="luminal", options={"device": args.device})
    x = torch.randn(args.batch, 3, 32, 32)
    with torch.no_grad():
        err = float((compiled(x) - net(x)).abs().max())
    print(f"torch.compile(backend='luminal'): max |luminal - torch| = {err:.1e}")
    errs.append(err)
    assert max(errs) < 1e-3, errs


if __name__ == "__main__":
    main()
