"""Conv4d on synthetic spacetime data: classify the direction a 3-D blob moves in over time.

Each sample is a (T, X, Y, Z) = (6, 8, 8, 8) volume sequence: a Gaussian blob starts near the centre and moves
one voxel per frame along one of six directions (+-x, +-y, +-z), with noise. A 4-D convolution sees space and
time together, so one layer can detect motion.

    python examples/spacetime_conv4d.py
"""

from __future__ import annotations

import numpy as np

import luminal.nn as nn
import luminal.nn.functional as F
from luminal.data import DataLoader, TensorDataset
from luminal.training import Adam, Trainer

DIRECTIONS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]])


def make_data(n: int, seed: int, t: int = 6, size: int = 8):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, n)
    grid = np.stack(np.meshgrid(*[np.arange(size)] * 3, indexing="ij"), -1).astype(np.float32)
    x = np.empty((n, 1, t, size, size, size), np.float32)
    for i, label in enumerate(labels):
        start = rng.uniform(2.5, 4.5, 3)
        for f in range(t):
            centre = start + DIRECTIONS[label] * (f - t / 2) * 0.8
            x[i, 0, f] = np.exp(-((grid - centre) ** 2).sum(-1) / 2.0)
    x += 0.05 * rng.standard_normal(x.shape).astype(np.float32)
    return x, labels.astype(np.int64)


class MotionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv4d(1, 8, 3, padding=1)
        self.head = nn.Linear(8 * 3 * 2 * 2 * 2, 6)

    def forward(self, x):
        h = self.conv(x).relu()                        # (N, 8, 6, 8, 8, 8)
        h = h.reshape((h.dims[0], 8, 3, 2, 2, 4, 2, 4, 2, 4)).max((3, 5, 7, 9))  # pool 2x4x4x4: (N,8,3,2,2,2)
        return self.head(h.reshape((h.dims[0], 8 * 3 * 2 * 2 * 2)))


def main() -> None:
    x_train, y_train = make_data(384, seed=0)
    x_test, y_test = make_data(128, seed=1)
    nn.init.manual_seed(0)
    model = MotionNet()
    trainer = Trainer(model, Adam(model.parameters(), lr=3e-3), F.cross_entropy)
    trainer.fit(DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True, seed=0), epochs=8,
                progress=False)
    result = trainer.evaluate(DataLoader(TensorDataset(x_test, y_test), batch_size=64))
    print(f"direction of motion, test accuracy {result['accuracy'] * 100:.1f}% (chance 16.7%)")


if __name__ == "__main__":
    main()
