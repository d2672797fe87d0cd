"""Decoder generation with a KV cache (workload W8): luminal vs transformers, tokens/s for greedy decoding of
``--new`` tokens (default 128) after a ``--prompt``-token prompt (default 32), batch 1.

Run:  python benchmarks/generate.py [--arch gpt2|llama] [--layers 12] [--hidden 768] [--heads 12]
                                    [--vocab 50257] [--prompt 32] [--new 128] [--rounds 3] [--torch-threads N]
                                    [--search off|quick|full]

The default model is GPT-2-small-shaped (12 layers, hidden 768, 12 heads, vocabulary 50257, 1024 positions)
with random weights: built with transformers from a config (``torch.manual_seed(0)``), saved as safetensors to
a temporary folder and loaded by ``DecoderLM.from_pretrained``, so both sides run the same weights. Both sides
generate greedily in the same process, alternating rounds (luminal, torch, luminal, ...); each side reports its
best round. Columns:
  compile s     luminal: building + compiling the step graph once (symbolic batch, seq and past; cold cache
                unless LUMINAL_CACHE_DIR already holds it; with --search, the kernel measurements too); torch:
                none.
  prompt ms     the prompt step (``seq`` = prompt length, past 0) alone.
  ms/token      (generate time - prompt step) / (new - 1): the one-token steps with the cache.
  tokens/s      new tokens / whole generate time (prompt step included).
luminal: ``model.generate(ids, new)`` on ``device="cpu"`` (one compiled program for every step; the keys and
values of each step carried into the next; host-side argmax on the last position's logits). torch:
``model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)`` with its default dynamic KV
cache, eval, no_grad. "same tokens" compares the two greedy outputs (random weights make near-ties possible, so
a mismatch late in the sequence is not by itself an error). Nothing is asserted about timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=None, help="llama: key/value heads (default heads // 3)")
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch-threads", type=int, default=None, help="default: torch's own choice")
    parser.add_argument("--weights", default="float32", choices=["float32", "bfloat16"],
                        help="parameter dtype: bfloat16 saves the model in bf16; luminal loads it with "
                             "weight_dtype='bfloat16' (weights read as stored, float32 compute), torch runs it "
                             "as a bfloat16 model (bf16 compute)")
    parser.add_argument("--search", default=None, choices=["off", "quick", "full"],
                        help="luminal's GEMM kernel search level (Graph.compile's search=; default off)")
    args = parser.parse_args()

    import torch
    import transformers

    from luminal.models import DecoderLM

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    positions = max(1024, args.prompt + args.new)
    torch.manual_seed(0)
    if args.arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=args.vocab, n_embd=args.hidden, n_layer=args.layers,
                                      n_head=args.heads, n_positions=positions, bos_token_id=None,
                                      eos_token_id=None)
        hf = transformers.GPT2LMHeadModel(cfg).eval()
    else:
        kv = args.kv_heads or max(1, args.heads // 3)
        while args.heads % kv:
            kv -= 1
        cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                                       num_attention_heads=args.heads, num_key_value_heads=kv,
                                       intermediate_size=int(args.hidden * 8 / 3) // 64 * 64,
                                       max_position_embeddings=positions, bos_token_id=None, eos_token_id=None)
        hf = transformers.LlamaForCausalLM(cfg).eval()
    n_params = sum(p.numel() for p in hf.parameters())
    bf16 = args.weights == "bfloat16"
    if bf16:
        hf = hf.to(torch.bfloat16)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder, safe_serialization=True)
        model = DecoderLM.from_pretrained(folder, weight_dtype="bfloat16" if bf16 else None)
    ids = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt))
    tids = torch.from_numpy(ids)

    print(f"W8 generation: {args.arch}, {args.layers} layers, hidden {args.hidden}, {args.heads} heads, vocabulary "
          f"{args.vocab} ({n_params / 1e6:.1f} M parameters, random weights); batch 1, prompt {args.prompt}, "
          f"{args.new} new tokens, greedy; weights {args.weights}"
          + (" (luminal: float32 compute; torch: bfloat16 compute)" if bf16 else ""))
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, {os.cpu_count()} cpus")

    t0 = time.perf_counter()
    prog = model.program("cpu", search=args.search)
    compile_s = time.perf_counter() - t0

    def lum_round():
        t = time.perf_counter()
        it = model.generate(ids, args.new, stream=True, search=args.search)
        first = next(it)
        t_first = time.perf_counter() - t
        rest = list(it)
        total = time.perf_counter() - t
        return t_first, total, np.concatenate([first] + rest)

    def torch_round():
        with torch.no_grad():
            t = time.perf_counter()
            hf(tids, use_cache=True)
            t_prompt = time.perf_counter() - t
            t = time.perf_counter()
            out = hf.generate(tids, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                              pad_token_id=0)
            total = time.perf_counter() - t
        return t_prompt, total, out[0, args.prompt:].numpy()

    lum_round(), torch_round()  # warm-up
    best = {"luminal": None, "torch": None}
    for _ in range(args.rounds):
        for name, fn in (("luminal", lum_round), ("torch", torch_round)):
            r = fn()
            if best[name] is None or r[1] < best[name][1]:
                best[name] = r
    same = np.array_equal(best["luminal"][2], best["torch"][2])
    agree = int(np.argmin(np.concatenate([best["luminal"][2] == best["torch"][2], [False]])))
    assert prog.compiles == 1 and model.program("cpu", search=args.search) is prog

    print()
    print(f"{'side':<9} {'compile s':>9} {'prompt ms':>10} {'ms/token':>9} {'tokens/s':>9}")
    for name in ("luminal", "torch"):
        t_prompt, total, _ = best[name]
        per_token = (total - t_prompt) / max(args.new - 1, 1) if name == "luminal" else \
            (total - t_prompt) / max(args.new - 1, 1)
        comp = f"{compile_s:.2f}" if name == "luminal" else "-"
        print(f"{name:<9} {comp:>9} {t_prompt * 1e3:>10.2f} {per_token * 1e3:>9.2f} {args.new / total:>9.1f}")
    ratio = (args.new / best["luminal"][1]) / (args.new / best["torch"][1])
    print(f"\nluminal tokens/s / torch tokens/s = {ratio:.2f}; same tokens: {same} "
          f"(first {agree} of {args.new} agree)")


if __name__ == "__main__":
    main()
