"""Linear regression with luminal: recover known weights from noisy data with SGD and a mean-squared error.

    python examples/linear_regression.py
"""

from __future__ import annotations

import numpy as np

import luminal.nn as nn
import luminal.nn.functional as F
from luminal.data import DataLoader, TensorDataset
from luminal.training import SGD, Trainer


def main() -> None:
    rng = np.random.default_rng(0)
    true_w = np.array([[2.0, -3.0, 0.5]], np.float32)
    true_b = np.array([1.25], np.float32)
    x = rng.standard_normal((1000, 3)).astype(np.float32)
    y = x @ true_w.T + true_b + 0.01 * rng.standard_normal((1000, 1)).astype(np.float32)

    model = nn.Linear(3, 1)
    trainer = Trainer(model, SGD(model.parameters(), lr=0.1, momentum=0.9), F.mse_loss)
    trainer.fit(DataLoader(TensorDataset(x, y), batch_size=100, shuffle=True, seed=0), epochs=20, progress=False)
    print("learned weight", np.round(model.weight.data, 3), "bias", np.round(model.bias.data, 3))
    print("true    weight", true_w, "bias", true_b)
    print(f"final training MSE {trainer.history[-1]['loss']:.2e} (noise variance 1e-4)")


if __name__ == "__main__":
    main()
