"""FLAME's blocks: ``LoRALinear`` and ``ResNetBlock``."""

from __future__ import annotations

import math

import numpy as np

from ..module import Module, Parameter, bind
from . import init
from .activation import SiLU
from .conv import Conv2d
from .linear import Identity, Linear
from .normalization import GroupNorm


class LoRALinear(Module):
    """A ``Linear`` plus a low-rank update: ``y = x W^T + b + (alpha / rank) * x A^T B^T``.

    ``lora_A`` (rank, in) is kaiming-uniform initialized, ``lora_B`` (out, rank) starts at zero, so a fresh
    LoRA layer computes exactly the base layer. ``merge()`` folds the update into ``weight`` (then the forward
    pass is a single matmul); ``unmerge()`` takes it out again.
    """

    def __init__(self, in_features: int, out_features: int, rank: int = 8, alpha: float = 16.0, bias: bool = True):
        super().__init__()
        if rank <= 0:
            raise ValueError(f"rank must be positive, got {rank}")
        self.base = Linear(in_features, out_features, bias=bias)
        self.rank, self.alpha = rank, alpha
        self.scale = alpha / rank
        self.lora_A = Parameter(np.zeros((rank, in_features)))
        self.lora_B = Parameter(np.zeros((out_features, rank)))
        init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.merged = False

    def delta_weight(self) -> np.ndarray:
        return (self.lora_B.data.astype(np.float64) @ self.lora_A.data.astype(np.float64)) * self.scale

    def merge(self) -> None:
        """Fold ``scale * B A`` into the base weight (graphs built afterwards skip the LoRA branch)."""
        if not self.merged:
            self.base.weight.copy_(self.base.weight.data + self.delta_weight())
            self.merged = True

    def unmerge(self) -> None:
        """Undo :meth:`merge`."""
        if self.merged:
            self.base.weight.copy_(self.base.weight.data - self.delta_weight())
            self.merged = False

    def forward(self, x):
        y = self.base(x)
        if self.merged:
            return y
        return y + ((x @ bind(self.lora_A, x).T) @ bind(self.lora_B, x).T) * self.scale


class ResNetBlock(Module):
    """GroupNorm -> SiLU -> Conv3x3, twice, plus a 1x1-conv shortcut when the channel count changes."""

    def __init__(self, in_channels: int, out_channels: int | None = None, groups: int = 32, eps: float = 1e-6):
        super().__init__()
        out_channels = out_channels or in_channels
        self.norm1 = GroupNorm(min(groups, in_channels), in_channels, eps=eps)
        self.conv1 = Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = GroupNorm(min(groups, out_channels), out_channels, eps=eps)
        self.conv2 = Conv2d(out_channels, out_channels, 3, padding=1)
        self.act = SiLU()
        self.shortcut = Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else Identity()

    def forward(self, x):
        h = self.conv1(self.act(self.norm1(x)))
        h = self.conv2(self.act(self.norm2(h)))
        return self.shortcut(x) + h
