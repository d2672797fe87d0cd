"""Functional forms of the layers (``torch.nn.functional`` names)."""

from __future__ import annotations

from ..graph import GraphError
from ..hl_ops import where


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` of shape (out, in)."""
    if x.dims[-1] != weight.dims[-1]:
        raise GraphError(f"linear: input has {x.dims[-1]} features but the weight is "
                         f"{[str(d) for d in weight.dims]} (out, in)")
    y = x @ weight.T
    return y if bias is None else y + bias


def prelu(x, weight):
    """PReLU with ``weight`` of size 1 or the channel count (dim 1)."""
    n = weight.dims[0]
    if n != 1:
        if x.ndim < 2 or x.dims[1] != n:
            raise GraphError(f"prelu: {n} parameters need {n} channels in dim 1, got shape "
                             f"{[str(d) for d in x.dims]}")
        shape = [1] * x.ndim
        shape[1] = n
        weight = weight.reshape(shape)
    return where(x < 0, x * weight, x)


def pad(x, pad, value: float = 0.0):
    """``torch.nn.functional.pad``: ``pad`` is flat, last dim first: ``(left, right, top, bottom, ...)``."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: expected an even number of values for at most {x.ndim} dims, got {pad}")
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return x.pad(pairs, value)


def relu(x):
    return x.relu()


def gelu(x, approximate: str = "none"):
    return x.gelu(approximate)


def silu(x):
    return x.silu()


def softmax(x, dim: int = -1):
    return x.softmax(dim)


def log_softmax(x, dim: int = -1):
    return x.log_softmax(dim)


def normalize(x, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    return x.normalize(p, dim, eps)


# The functional forms that live beside their layers.
from .attention import flash_attention, repeat_kv, rotary_embedding, scaled_dot_product_attention  # noqa: E402
from .conv import (conv1d, conv2d, conv3d, conv4d, conv_nd, conv_transpose1d, conv_transpose2d,  # noqa: E402
                   conv_transpose3d, conv_transpose_nd)
from .dropout import dropout  # noqa: E402
from .normalization import batch_norm, group_norm, instance_norm, layer_norm, rms_norm  # noqa: E402
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d,  # noqa: E402
                      adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, global_avg_pool,
                      max_pool1d, max_pool2d, max_pool3d)
from .sparse import embedding  # noqa: E402
from .losses import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss, kl_div, l1_loss, mse_loss, nll_loss, smooth_l1_loss  # noqa: E402

__all__ = [name for name in dir() if not name.startswith("_") and name not in ("GraphError", "annotations", "where")]
