"""Text generation with a decoder-only language model and a KV cache (no downloads).

    python examples/generate.py                        # train a small GPT-2 on characters, then stream text
    python examples/generate.py --steps 600            # train longer
    python examples/generate.py --random llama         # a random-config Llama: greedy + sampled token ids
    python examples/generate.py --model FOLDER --prompt "Once upon a time"   # a Hugging Face folder

Default: the character language model of ``char_transformer_lm.py`` ("The Zen of Python", which ships with
Python), but built as a ``luminal.models`` GPT-2 (2 layers, width 64) and trained with ``luminal.training``
(AdamW, next-character cross-entropy). Then ``model.generate(..., stream=True)`` writes text from a prompt:
the step graph is compiled once with a symbolic past length, the prompt step and every one-token step run on
that one program, and the keys/values of each step are carried into the next (the KV cache). The example
checks the cached generation against full recomputation (the whole sequence re-run for every token) and
prints whether they agree.

``--random`` builds the model from a config dict with random weights (``DecoderLM.from_config``): the tokens
are meaningless ids, the machinery is the same. ``--model`` takes a Hugging Face folder (``config.json`` with
``model_type`` ``gpt2`` or ``llama`` + ``model.safetensors``); with a ``tokenizer.json`` there, ``--prompt``
text is tokenized and the output decoded.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import luminal.nn as nn  # noqa: E402
from luminal.models import DecoderLM  # noqa: E402

CONFIGS = {
    "llama": dict(model_type="llama", vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=344, max_position_embeddings=256),
    "gpt2": dict(model_type="gpt2", vocab_size=512, n_embd=128, n_layer=2, n_head=4, n_positions=256),
}


class NextTokenModel(nn.Module):
    """A :class:`DecoderLM` as a training model: ``ids (batch, seq) -> logits (batch, seq, vocab)``, attending
    over an empty cache (the same causal attention the cached steps use)."""

    def __init__(self, lm: DecoderLM):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        cfg = self.lm.config
        empty = [ids.graph.zeros((ids.dims[0], cfg.num_kv_heads, 0, cfg.head_dim)) for _ in range(cfg.num_layers)]
        return self.lm(ids, empty, empty)[0]


def train_char_lm(steps: int, context: int = 48):
    """A GPT-2-architecture character model trained on The Zen of Python; returns (model, chars)."""
    from char_transformer_lm import lm_loss, zen_of_python
    from luminal.training import AdamW, Trainer

    text = zen_of_python()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], np.int64)
    lm = DecoderLM.from_config(dict(model_type="gpt2", vocab_size=len(chars), n_embd=64, n_layer=2, n_head=4,
                                    n_positions=256), seed=0)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(data) - context - 1, (steps, 32))
    batches = [(np.stack([data[s:s + context] for s in row]), np.stack([data[s + 1:s + context + 1] for s in row]))
               for row in starts]
    model = NextTokenModel(lm)
    model.train()
    t0 = time.perf_counter()
    history = Trainer(model, AdamW(model.parameters(), lr=3e-3, weight_decay=0.01), lm_loss).fit(
        batches, epochs=1, progress=False)
    lm.eval()
    print(f"trained a {type(lm).__name__} ({lm.config.num_layers} layers, width {lm.config.hidden_size}) on "
          f"{len(text)} characters, vocabulary {len(chars)}: {steps} steps in {time.perf_counter() - t0:.1f} s; "
          f"final loss {history[-1]['loss']:.3f} nats/char (uniform: {np.log(len(chars)):.3f})")
    return lm, chars


def char_demo(args) -> None:
    lm, chars = train_char_lm(args.steps)
    index = {c: i for i, c in enumerate(chars)}
    text = "Beautiful is"
    prompt = np.array([index[c] for c in text], np.int64)
    print("streamed (greedy, KV cache): " + text, end="", flush=True)
    t0 = time.perf_counter()
    tokens = []
    for token in lm.generate(prompt, args.new, stream=True, device=args.device):
        tokens.append(token)
        print(chars[token], end="", flush=True)
    dt = time.perf_counter() - t0
    print(f"\n  {len(tokens)} characters in {dt:.3f} s ({len(tokens) / dt:.0f} tokens/s)")
    # the same greedy choices from full recomputation: the whole sequence re-run for every new token
    seq = list(prompt)
    for _ in range(args.new):
        seq.append(int(np.argmax(lm.logits(np.array(seq, np.int64), device=args.device)[-1])))
    print(f"cache equals recomputation: {seq[len(prompt):] == tokens}")
    sampled = lm.generate(prompt, args.new, do_sample=True, temperature=0.8, top_k=10, seed=args.seed,
                          device=args.device)
    print("sampled (T=0.8, top-k 10):", repr(text + "".join(chars[i] for i in sampled[len(prompt):])))
    prog = lm.program(args.device)
    print(f"one program served every cached step: compiles = {prog.compiles}")


def ids_demo(args) -> None:
    tokenizer = None
    if args.model:
        model = DecoderLM.from_pretrained(args.model)
        tok_path = os.path.join(args.model, "tokenizer.json")
        if os.path.isfile(tok_path):
            import tokenizers
            tokenizer = tokenizers.Tokenizer.from_file(tok_path)
    else:
        model = DecoderLM.from_config(CONFIGS[args.random], seed=args.seed)
    cfg = model.config
    print(f"{type(model).__name__}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, {cfg.num_heads} heads "
          f"({cfg.num_kv_heads} key/value heads), vocabulary {cfg.vocab_size}, {cfg.max_positions} positions")
    if args.prompt is not None and tokenizer is not None:
        prompt = np.array(tokenizer.encode(args.prompt).ids, np.int64)
    else:
        prompt = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, 8)
    print("prompt ids:", prompt.tolist())

    t0 = time.perf_counter()
    prog = model.program(args.device)
    print(f"compiled the step graph once ({time.perf_counter() - t0:.2f} s, device {args.device}; symbols "
          "batch, seq, past)")

    print("greedy, streamed:", end=" ", flush=True)
    t0 = time.perf_counter()
    tokens = []
    for token in model.generate(prompt, args.new, stream=True, device=args.device):
        tokens.append(token)
        print(token, end=" ", flush=True)
    dt = time.perf_counter() - t0
    print(f"\n  {len(tokens)} tokens in {dt:.3f} s ({len(tokens) / dt:.1f} tokens/s)")
    sampled = model.generate(prompt, args.new, do_sample=True, temperature=0.8, top_k=40, top_p=0.95,
                             seed=args.seed, device=args.device)
    print("sampled (T=0.8, top-k 40, top-p 0.95):", sampled[len(prompt):].tolist())
    if tokenizer is not None:
        print("text:", tokenizer.decode(np.concatenate([prompt, tokens]).tolist()))
    print(f"one program served every step: compiles = {prog.compiles}, runtime reused = "
          f"{prog.graph.runtime is model.program(args.device).graph.runtime}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps of the character model")
    parser.add_argument("--random", default=None, choices=sorted(CONFIGS), help="a random-config model instead")
    parser.add_argument("--model", default=None, help="a Hugging Face folder (gpt2 or llama) instead")
    parser.add_argument("--prompt", default=None, help="prompt text (needs the folder's tokenizer.json)")
    parser.add_argument("--new", type=int, default=None, help="tokens to generate (default 120 characters, 24 ids)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.random is None and args.model is None:
        args.new = 120 if args.new is None else args.new
        char_demo(args)
    else:
        args.new = 24 if args.new is None else args.new
        ids_demo(args)


if __name__ == "__main__":
    main()
