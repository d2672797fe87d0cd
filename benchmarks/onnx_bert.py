"""A Hugging Face BERT exported to ONNX: luminal (``luminal.onnx.load``, one program over ("batch", "seq")) vs
onnxruntime vs PyTorch eager.

Run:  python benchmarks/onnx_bert.py [--layers 2] [--configs 8x256,1x128] [--attention sdpa,eager] [--repeats 5]
      [--unfused]
Needs torch, transformers and onnxruntime (pip install -e '.[test]'). Prints a table; asserts nothing.

The model is a ``transformers.BertModel`` from a MiniLM-shaped config (hidden 384, 12 heads, intermediate 1536,
--layers layers, vocabulary 30522; ``torch.manual_seed(0)``), in eval mode, with the attention implementation
given (``sdpa``, transformers' default: its export ends the softmax with ``Where(IsNaN(P), 0, P)`` and masks with
-inf; ``eager``: an additive ``finfo.min`` mask), exported with ``torch.onnx.export`` (TorchScript exporter,
opset 17, dynamic batch and sequence; output: the last hidden state). Each configuration ``BxS`` runs random
token ids with the first sequence full and the others padded from S/2 on (attention mask 0 there). Columns: min
ms per call (min over --repeats of the mean of ~0.3 s of calls after warm-up; the frameworks alternate, so they
see the same machine load) for luminal, onnxruntime (CPU execution provider) and torch eager (no_grad); the fused
attention chains in luminal's program; max |luminal - onnxruntime|. ``--unfused`` adds luminal with
``LUMINAL_FUSED_ATTENTION=0`` (a second program). OPENBLAS_CORETYPE is printed, never changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_cnn import _time  # noqa: E402


def _export(path: str, layers: int, attention: str):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=layers, hidden_size=384, num_attention_heads=12,
                                  intermediate_size=1536, attn_implementation=attention)
    bert = transformers.BertModel(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(0, 30522, (2, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden().eval(), (ids, torch.ones_like(ids)), path, input_names=["input_ids", "mask"],
                          output_names=["hidden"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": {0: "b", 1: "s"}, "mask": {0: "b", 1: "s"},
                                        "hidden": {0: "b", 1: "s"}})
    return Hidden().eval()


def _fused_chains(model) -> int:
    from luminal.codegen.kernel import GemmKernel
    rt = model.graph.runtime
    kernels = rt.program.kernels
    return sum(1 for g in rt.cprogram.groups if len(g) > 2 and isinstance(kernels[g[0]], GemmKernel)
               and isinstance(kernels[g[-1]], GemmKernel))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--configs", default="8x256,1x128")
    ap.add_argument("--attention", default="sdpa,eager")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--unfused", action="store_true", help="also luminal with LUMINAL_FUSED_ATTENTION=0")
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    import luminal.onnx as lo

    torch.set_num_threads(os.cpu_count())
    print(f"cpu: {os.cpu_count()} cores, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"BertModel: {args.layers} layers, hidden 384, 12 heads")
    print(f"{'attention':9s} {'config':>7s} {'luminal':>8s}" + (f" {'unfused':>8s}" if args.unfused else "") +
          f" {'ort':>8s} {'torch':>8s} {'lm/ort':>7s} {'fused':>5s} {'max|diff|':>9s}   (min ms per call)")
    for attention in [a for a in args.attention.split(",") if a]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bert.onnx")
            net = _export(path, args.layers, attention)
            models = {"luminal": lo.load(path, device="cpu", compile=True)}
            if args.unfused:
                os.environ["LUMINAL_FUSED_ATTENTION"] = "0"
                try:
                    models["unfused"] = lo.load(path, device="cpu", compile=True)
                finally:
                    os.environ.pop("LUMINAL_FUSED_ATTENTION")
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            for config in [c for c in args.configs.split(",") if c]:
                b, s = (int(v) for v in config.split("x"))
                rng = np.random.default_rng(0)
                feeds = {"input_ids": rng.integers(0, 30522, (b, s)).astype(np.int64),
                         "mask": np.ones((b, s), np.int64)}
                feeds["mask"][1:, s // 2:] = 0
                tids, tmask = torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["mask"])
                fns = {name: (lambda m=m: m.run(feeds)) for name, m in models.items()}
                fns["ort"] = lambda: sess.run(None, feeds)

                def torch_call():
                    with torch.no_grad():
                        net(tids, tmask)
                fns["torch"] = torch_call
                best = {k: float("inf") for k in fns}
                for _ in range(args.repeats):
                    for k, fn in fns.items():
                        best[k] = min(best[k], _time(fn))
                diff = float(np.abs(models["luminal"].run(feeds)["hidden"] - sess.run(None, feeds)[0]).max())
                row = f"{attention:9s} {config:>7s} {best['luminal'] * 1e3:8.2f}"
                if args.unfused:
                    row += f" {best['unfused'] * 1e3:8.2f}"
                row += (f" {best['ort'] * 1e3:8.2f} {best['torch'] * 1e3:8.2f} {best['luminal'] / best['ort']:7.2f}"
                        f" {_fused_chains(models['luminal']):5d} {diff:9.1e}")
                print(row, flush=True)


if __name__ == "__main__":
    main()
