"""Functional forms of the layers (``torch.nn.functional`` names)."""

from __future__ import annotations

from .. import amp as _amp
from ..amp import lower_precision_dtype
from ..graph import GraphError
from ..hl_ops import where


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` of shape (out, in)."""
    if x.dims[-1] != weight.dims[-1]:
        raise GraphError(f"linear: input has {x.dims[-1]} features but the weight is "
                         f"{[str(d) for d in weight.dims]} (out, in)")
    low = lower_precision_dtype(x, weight, bias)
    if low is not None:  # luminal.autocast: one rounding after the bias, as torch
        return _amp.linear(x, weight, bias, low)
    y = x @ weight.T
    return y if bias is None else y + bias


def prelu(x, weight):
    """PReLU with ``weight`` of size 1 or the channel count (dim 1)."""
    low = lower_precision_dtype(x, weight)
    if low is not None:  # luminal.autocast: torch's CPU autocast runs prelu in the low-precision type
        x, weight = x.cast(low), weight.cast(low)
    n = weight.dims[0]
    if n != 1:
        if x.ndim < 2 or x.dims[1] != n:
            raise GraphError(f"prelu: {n} parameters need {n} channels in dim 1, got shape "
                             f"{[str(d) for d in x.dims]}")
        shape = [1] * x.ndim
        shape[1] = n
        weight = weight.reshape(shape)
    return where(x < 0, x * weight, x)


def pad(x, pad, mode: str = "constant", value: float | None = None):
    """``torch.nn.functional.pad``: ``pad`` is flat, last dim first: ``(left, right, top, bottom, ...)``.

    Modes: ``"constant"`` (``value``, default 0; a zero-copy view), ``"reflect"`` (mirror without repeating the
    edge), ``"replicate"`` (repeat the edge), ``"circular"`` (wrap around). Negative amounts crop; in the
    non-constant modes the crops apply first and the padding reads the cropped tensor, as in PyTorch. A
    non-constant mode is one ``index_select`` per padded dim with a constant index (values copied exactly);
    its gradient is slices, flips and pads of the upstream gradient (:func:`border_pad_grad`), not a scatter.
    """
    if isinstance(mode, (int, float)) and not isinstance(mode, bool):  # the old signature pad(x, pad, value)
        mode, value = "constant", float(mode)
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: expected an even number of values for at most {x.ndim} dims, got {pad}")
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        pairs[x.ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    if mode == "constant":
        return x.pad(pairs, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value not in (None, 0, 0.0):
        raise ValueError(f"pad: value is only for mode='constant', got value={value} with mode={mode!r}")
    import numpy as np
    from ..hl_ops.binary import _grad_rule
    from ..hl_ops.resample import resample_axis
    for axis, (before, after) in enumerate(pairs):
        if before == 0 and after == 0:
            continue
        d = x.dims[axis]
        if not d.is_constant():
            raise ValueError(f"pad: mode {mode!r} needs a concrete size in dim {axis}, got {d}")
        if before < 0 or after < 0:  # crop first
            n0 = d.to_int()
            x = x.slice_axis(axis, max(0, -before), n0 - max(0, -after))
            before, after = max(0, before), max(0, after)
            if before == 0 and after == 0:
                continue
        n = x.dims[axis].to_int()
        if mode == "reflect" and (before >= n or after >= n):
            raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than the size {n} of dim "
                             f"{axis}")
        if mode == "circular" and (before > n or after > n):
            raise ValueError(f"pad: circular padding ({before}, {after}) can be at most the size {n} of dim {axis}")
        if mode == "replicate" and n == 0:
            raise ValueError(f"pad: replicate padding of the empty dim {axis}")
        i = np.arange(-before, n + after)
        if mode == "reflect":
            i = np.abs(i)
            i = np.where(i >= n, 2 * (n - 1) - i, i)
        elif mode == "replicate":
            i = np.clip(i, 0, n - 1)
        else:
            i = np.mod(i, n)
        x = _grad_rule(resample_axis(x, axis, i.astype(np.int64), None), "border_pad", (x,),
                       (axis, n, before, after, mode))
    return x


def border_pad_grad(g, axis: int, n: int, before: int, after: int, mode: str):
    """The gradient of a ``reflect`` / ``replicate`` / ``circular`` pad of ``n`` elements along ``axis``: the
    middle of ``g`` plus its border strips sent back (flipped for ``reflect``, summed onto the edge element for
    ``replicate``, wrapped for ``circular``) as slices and pads. The chain rule through the forward's index
    gather would scatter-add ``g`` (a quarter of a reflect-padded conv + InstanceNorm training step)."""
    gx = g.slice_axis(axis, before, before + n)
    if before:
        left = g.slice_axis(axis, 0, before)
        if mode == "reflect":      # output j reads x[before - j]
            gx = gx + left.flip(axis).pad_axis(axis, 1, n - 1 - before)
        elif mode == "replicate":  # every left output reads x[0]
            gx = gx + left.sum(axis, keepdim=True).pad_axis(axis, 0, n - 1)
        else:                      # output j reads x[n - before + j]
            gx = gx + left.pad_axis(axis, n - before, 0)
    if after:
        right = g.slice_axis(axis, before + n, before + n + after)
        if mode == "reflect":      # output n + before + j reads x[n - 2 - j]
            gx = gx + right.flip(axis).pad_axis(axis, n - 1 - after, 1)
        elif mode == "replicate":
            gx = gx + right.sum(axis, keepdim=True).pad_axis(axis, n - 1, 0)
        else:                      # output n + before + j reads x[j]
            gx = gx + right.pad_axis(axis, 0, n - after)
    return gx


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """``torch.nn.functional.interpolate`` (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area;
    see :mod:`luminal.hl_ops.resample`)."""
    from ..hl_ops.resample import interpolate as _interpolate
    return _interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)


def upsample(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """``torch.nn.functional.upsample`` (= :func:`interpolate`)."""
    return interpolate(x, size, scale_factor, mode, align_corners)


def softmin(x, dim: int = -1):
    """``softmax(-x)``."""
    return x.softmin(dim)


def one_hot(x, num_classes: int):
    """``torch.nn.functional.one_hot`` (``num_classes`` is required: a lazy graph cannot infer it)."""
    return x.one_hot(num_classes)


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
from .sampling import affine_grid, grid_sample  # noqa: E402
from .normalization import batch_norm, group_norm, instance_norm, layer_norm, rms_norm  # noqa: E402
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, adaptive_max_pool1d,  # noqa: E402
                      adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, global_avg_pool,
                      max_pool1d, max_pool2d, max_pool3d, max_unpool1d, max_unpool2d, max_unpool3d)
from .sparse import embedding  # noqa: E402
from .functional_extra import (bilinear, celu, channel_shuffle, cosine_embedding_loss, cosine_similarity, elu, fold,  # noqa: E402
                               gaussian_nll_loss, glu, hardshrink, hardsigmoid, hardswish, hardtanh,
                               hinge_embedding_loss, leaky_relu, local_response_norm, logsigmoid, margin_ranking_loss, mish,
                               multilabel_soft_margin_loss, pairwise_distance, pdist, pixel_shuffle, pixel_unshuffle,
                               poisson_nll_loss, relu6, rrelu, selu, sigmoid, soft_margin_loss, softplus, softshrink,
                               softsign, tanh, tanhshrink, threshold, triplet_margin_loss, unfold)
from .losses import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, huber_loss, kl_div, l1_loss, mse_loss, nll_loss, smooth_l1_loss  # noqa: E402



from .. import _numpy_only  # noqa: E402


def _is_eager_value(v) -> bool:
    if type(v).__module__ == "luminal.eager.tensor":
        return True
    return isinstance(v, (list, tuple)) and any(type(x).__module__ == "luminal.eager.tensor" for x in v)


def _eager_aware(fn):
    """``fn`` taking eager tensors too from the start: ``F.relu(lm.tensor(x))`` may be the first eager call of a
    program, when ``F.relu`` was looked up before ``lm.tensor`` imported the eager layer."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if (any(_is_eager_value(a) for a in args) or any(_is_eager_value(v) for v in kwargs.values())
                or _numpy_only((*args, *kwargs.values()))):  # numpy arrays without a graph tensor: eager
            from ..eager._core import call_function
            return call_function(fn, args, kwargs)
        return fn(*args, **kwargs)
    wrapper._luminal_eager = True
    return wrapper


def _wrap_public() -> None:
    import inspect
    for name, obj in list(globals().items()):
        if not name.startswith("_") and inspect.isfunction(obj) and not getattr(obj, "_luminal_eager", False):
            globals()[name] = _eager_aware(obj)


_wrap_public()

__all__ = [name for name in dir() if not name.startswith("_") and name not in ("GraphError", "annotations", "where")]
