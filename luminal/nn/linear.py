"""``Linear`` and ``Identity``/``Flatten``."""

from __future__ import annotations

import math

import numpy as np

from ..module import Module, Parameter, bind
from . import init


class Linear(Module):
    """``y = x W^T + b`` with PyTorch's (out_features, in_features) weight layout and default init.

    ``permute=True`` (the seed's option) stores the weight as (in_features, out_features) instead — then it no
    longer matches PyTorch checkpoints by layout.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, permute: bool = False,
                 dtype=None):
        super().__init__()
        self.in_features, self.out_features, self.permute = in_features, out_features, permute
        shape = (in_features, out_features) if permute else (out_features, in_features)
        self.weight = Parameter(np.zeros(shape), dtype)
        if permute:
            init.default_bound_uniform_(self.weight, in_features)
        else:
            init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            self.bias = Parameter(np.zeros(out_features), dtype)
            init.default_bound_uniform_(self.bias, in_features)
        else:
            self.bias = None

    def forward(self, x):
        from .functional import linear
        w = bind(self.weight, x)
        return linear(x, w.T if self.permute else w, bind(self.bias, x) if self.bias is not None else None)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` (default from 1, keeping the batch)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)
