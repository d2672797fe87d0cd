"""A small character-level transformer language model trained on a text that ships with Python.

The text is "The Zen of Python" (stored ROT13-encoded in the standard library's ``this`` module). A 2-layer
pre-LN causal transformer (d 64, 4 heads) learns to predict the next character of random 48-character
windows; then it writes text greedily from a prompt.

    python examples/char_transformer_lm.py [--steps 400]
"""

from __future__ import annotations

import argparse
import codecs
import importlib.util
import re

import numpy as np

import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import AdamW, Trainer


def zen_of_python() -> str:
    source = open(importlib.util.find_spec("this").origin, encoding="utf-8").read()
    encoded = re.search(r's = """(.*?)"""', source, re.S).group(1)
    return codecs.decode(encoded, "rot13")


class CharLM(nn.Module):
    def __init__(self, vocab: int, context: int, d: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):                       # ids: (batch, context) int64
        positions = ids.graph.arange(self.context, dtype=ids.dtype)
        h = self.tok(ids) + self.pos(positions)
        h = self.blocks(h, is_causal=True)
        return self.head(self.norm(h))            # (batch, context, vocab)


def lm_loss(logits, targets):                     # next-character cross-entropy over every position
    b, t, v = logits.dims
    return F.cross_entropy(logits.reshape((b * t, v)), targets.reshape((b * t,)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--context", type=int, default=48)
    args = parser.parse_args()

    text = zen_of_python()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], np.int64)
    ctx = args.context
    rng = np.random.default_rng(0)

    def batches(n):
        for _ in range(n):
            starts = rng.integers(0, len(data) - ctx - 1, 32)
            x = np.stack([data[s:s + ctx] for s in starts])
            yield x, np.stack([data[s + 1:s + ctx + 1] for s in starts])

    nn.init.manual_seed(0)
    model = CharLM(len(chars), ctx)
    trainer = Trainer(model, AdamW(model.parameters(), lr=3e-3, weight_decay=0.01), lm_loss)
    history = trainer.fit(list(batches(args.steps)), epochs=1, progress=True)
    print(f"{len(text)} characters, vocabulary {len(chars)}; final loss {history[-1]['loss']:.3f} nats/char "
          f"(uniform: {np.log(len(chars)):.3f}); {history[-1]['steps_per_s']:.1f} steps/s")

    prompt = "Beautiful is"
    out = [index[c] for c in prompt]
    for _ in range(120):
        # causal attention: padding after the text cannot change the predictions at the text's positions
        window = out[-ctx:] + [0] * max(0, ctx - len(out))
        last = min(len(out), ctx) - 1
        logits = trainer.predict(np.array([window], np.int64))[0]
        out.append(int(np.argmax(logits[last])))
    print("generated:", repr("".join(chars[i] for i in out)))


if __name__ == "__main__":
    main()
