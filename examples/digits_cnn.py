"""Train a small CNN on real handwritten digits (scikit-learn's bundled 8x8 digits) with luminal.

The whole training step (forward, backward, Adam update) is one compiled C program; the last, smaller batch
of each epoch reuses it (symbolic batch dimension). Prints a progress bar per epoch, the test accuracy and
the training speed. Runs in well under a minute on 2 cores.

    python examples/digits_cnn.py [--epochs 20] [--device cpu|reference]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import luminal.nn as nn
import luminal.nn.functional as F
from luminal.data import DataLoader, TensorDataset
from luminal.training import Adam, Trainer
from luminal.training.lr_scheduler import CosineAnnealingLR


def load_digits_split(seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) scaled to [0, 1], labels int64."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def make_model() -> nn.Module:
    nn.init.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),                       # (64, 4, 4)
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--device", default=None, help="cpu (compiled C, default) or reference (numpy)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = load_digits_split()
    print(f"digits: {len(x_train)} training and {len(x_test)} test images of 8x8 pixels")
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True, seed=0)
    test = DataLoader(TensorDataset(x_test, y_test), batch_size=256)

    model = make_model()
    optimizer = Adam(model.parameters(), lr=args.lr)
    scheduler = CosineAnnealingLR(optimizer, T_max=args.epochs)
    trainer = Trainer(model, optimizer, F.cross_entropy, scheduler=scheduler, device=args.device)

    start = time.perf_counter()
    history = trainer.fit(train, epochs=args.epochs, progress=not args.no_progress)
    elapsed = time.perf_counter() - start
    result = trainer.evaluate(test)
    steps = sum(len(train) for _ in history)
    speed = np.mean([h["steps_per_s"] for h in history])
    print(f"test accuracy {result['accuracy'] * 100:.2f}%  (test loss {result['loss']:.4f})")
    print(f"{steps} training steps in {elapsed:.1f} s including compilation; {speed:.0f} steps/s "
          f"({speed * args.batch_size:.0f} images/s) on device {trainer.device}")


if __name__ == "__main__":
    main()
