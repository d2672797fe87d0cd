"""XOR: the smallest problem a linear model cannot solve, learned by a two-layer MLP.

    python examples/xor.py
"""

from __future__ import annotations

import numpy as np

import luminal.nn as nn
import luminal.nn.functional as F
from luminal.training import Adam, Trainer


def main() -> None:
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
    y = np.array([[0], [1], [1], [0]], np.float32)
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    trainer = Trainer(model, Adam(model.parameters(), lr=0.05), F.binary_cross_entropy_with_logits)
    trainer.fit([(x, y)] * 50, epochs=10, progress=False)  # 500 full-batch steps
    prob = 1 / (1 + np.exp(-trainer.predict(x)))
    for (a, b), p, t in zip(x.astype(int), prob[:, 0], y[:, 0].astype(int)):
        print(f"{a} xor {b} = {t}   predicted p(1) = {p:.3f}")
    print("all correct:", bool(np.all((prob[:, 0] > 0.5) == (y[:, 0] > 0.5))))


if __name__ == "__main__":
    main()
