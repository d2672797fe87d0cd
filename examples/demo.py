"""luminal demo: build a small MLP forward pass as a lazy graph, run it, show the result and the graph.

Run:  python examples/demo.py
"""

import time

import numpy as np

import luminal as lm


def main() -> None:
    rng = np.random.default_rng(0)
    cx = lm.Graph()

    # Inputs: a symbolic batch dimension, bound when data is set.
    x = cx.tensor(("batch", 784), name="x")
    w1 = cx.tensor((784, 128), name="w1").set(rng.uniform(-1, 1, (784, 128)).astype(np.float32) / 28)
    b1 = cx.tensor(128, name="b1").set(np.zeros(128, np.float32))
    w2 = cx.tensor((128, 10), name="w2").set(rng.uniform(-1, 1, (128, 10)).astype(np.float32) / 11.3)
    b2 = cx.tensor(10, name="b2").set(np.zeros(10, np.float32))

    hidden = (x @ w1 + b1).relu()
    probs = (hidden @ w2 + b2).softmax(-1).retrieve()
    label = probs.argmax(-1).retrieve()

    print(cx.summary())
    for batch in (4, 16):
        data = rng.standard_normal((batch, 784)).astype(np.float32)
        x.set(data)
        start = time.perf_counter()
        cx.execute()
        ms = (time.perf_counter() - start) * 1e3
        # numpy oracle for the same computation
        h = np.maximum(data @ w1.data() + b1.data(), 0)
        logits = h @ w2.data() + b2.data()
        ref = np.exp(logits - logits.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        err = np.abs(probs.data() - ref).max()
        print(f"\nbatch={batch}: executed in {ms:.1f} ms (reference interpreter), max |luminal - numpy| = {err:.2e}")
        print("first row of softmax:", np.array2string(probs.data()[0], precision=3))
        print("predicted classes:   ", label.data())


if __name__ == "__main__":
    main()
