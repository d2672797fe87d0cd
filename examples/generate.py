"""Text generation with a decoder-only language model and a KV cache (no downloads).

    python examples/generate.py                        # a small random-config Llama, greedy + sampled tokens
    python examples/generate.py --arch gpt2 --new 32   # the same with a GPT-2-shaped model
    python examples/generate.py --model FOLDER --prompt "Once upon a time"   # a Hugging Face folder

Without ``--model`` the model is built from a config dict with random weights (``DecoderLM.from_config``), so
the tokens are meaningless ids; the point is the machinery: the step graph is compiled once with a symbolic
past length, the prompt step and every one-token step run on that one program, and the keys/values of each
step are carried into the next. ``--model`` takes a Hugging Face folder (``config.json`` with ``model_type``
``gpt2`` or ``llama`` + ``model.safetensors``); with a ``tokenizer.json`` there, ``--prompt`` text is tokenized
and the output decoded.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from luminal.models import DecoderLM  # noqa: E402

CONFIGS = {
    "llama": dict(model_type="llama", vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=344, max_position_embeddings=256),
    "gpt2": dict(model_type="gpt2", vocab_size=512, n_embd=128, n_layer=2, n_head=4, n_positions=256),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="llama", choices=sorted(CONFIGS), help="random-config architecture")
    parser.add_argument("--model", default=None, help="a Hugging Face folder (gpt2 or llama) instead")
    parser.add_argument("--prompt", default=None, help="prompt text (needs the folder's tokenizer.json)")
    parser.add_argument("--new", type=int, default=24, help="tokens to generate")
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tokenizer = None
    if args.model:
        model = DecoderLM.from_pretrained(args.model)
        tok_path = os.path.join(args.model, "tokenizer.json")
        if os.path.isfile(tok_path):
            import tokenizers
            tokenizer = tokenizers.Tokenizer.from_file(tok_path)
    else:
        model = DecoderLM.from_config(CONFIGS[args.arch], seed=args.seed)
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


if __name__ == "__main__":
    main()
