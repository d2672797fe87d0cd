"""More of ``torch.nn.functional``: the activations (``elu``, ``leaky_relu``, ``glu``, the shrinks...), patch ops
(``unfold``, ``fold``, ``pixel_shuffle``, ``pixel_unshuffle``, ``channel_shuffle``), similarities and distances
(``cosine_similarity``, ``pairwise_distance``) and losses (margin, hinge, cosine-embedding, soft-margin,
Poisson and Gaussian NLL, triplet, multilabel soft-margin). Re-exported by :mod:`luminal.nn.functional`; each
follows the PyTorch function of the same name (arguments, defaults, reductions).
"""

from __future__ import annotations

import math

from ..amp import autocast_float32
from ..graph import GraphError
from ..hl_ops import where


def _pair(v, n: int, name: str) -> tuple:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) != n:
        raise ValueError(f"{name} expects an int or {n} ints, got {v}")
    return v


# ---------------------------------------------------------------------------------------------- activations
def elu(x, alpha: float = 1.0, inplace: bool = False):
    return x.elu(alpha)


def selu(x, inplace: bool = False):
    return x.selu()


def celu(x, alpha: float = 1.0, inplace: bool = False):
    return x.celu(alpha)


def leaky_relu(x, negative_slope: float = 0.01, inplace: bool = False):
    return x.leaky_relu(negative_slope)


def relu6(x, inplace: bool = False):
    return x.relu6()


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    return x.hardtanh(min_val, max_val)


def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    return x.softplus(beta, threshold)


def softsign(x):
    return x.softsign()


def logsigmoid(x):
    return x.logsigmoid()


def mish(x, inplace: bool = False):
    return x.mish()


def hardswish(x, inplace: bool = False):
    return x.hardswish()


def hardsigmoid(x, inplace: bool = False):
    return x.hardsigmoid()


def sigmoid(x):
    return x.sigmoid()


def tanh(x):
    return x.tanh()


def glu(x, dim: int = -1):
    """``torch.nn.functional.glu``: ``a * sigmoid(b)`` of the two halves of ``dim``."""
    d = dim % x.ndim
    n = x.dims[d]
    if not n.is_constant() or n.to_int() % 2:
        raise GraphError(f"glu: dim {dim} must have an even, concrete size, got {n}")
    half = n.to_int() // 2
    return x.narrow(d, 0, half) * x.narrow(d, half, half).sigmoid()


def threshold(x, threshold: float, value: float, inplace: bool = False):  # noqa: A002 - PyTorch's names
    """``torch.nn.functional.threshold``: ``x`` where ``x > threshold``, else ``value`` (NaN passes)."""
    return where(x <= threshold, value, x)


def hardshrink(x, lambd: float = 0.5):
    """``torch.nn.functional.hardshrink``: 0 inside ``[-lambd, lambd]``."""
    return where(x.abs() <= lambd, 0.0, x)


def softshrink(x, lambd: float = 0.5):
    """``torch.nn.functional.softshrink``: ``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    return where(x > lambd, x - lambd, where(x < -lambd, x + lambd, x * 0.0))


def tanhshrink(x):
    """``x - tanh(x)``."""
    return x - x.tanh()


def rrelu(x, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False):
    """``torch.nn.functional.rrelu`` in evaluation mode: leaky ReLU with the mean slope ``(lower + upper) / 2``
    (the random slopes of training mode are not implemented: a clear error)."""
    if training:
        raise NotImplementedError("rrelu(training=True) (random slopes) is not implemented; use training=False")
    return x.leaky_relu((lower + upper) / 2.0)


# ---------------------------------------------------------------------------------------------- patches
def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """``torch.nn.functional.unfold`` (im2col) of a 4-D ``(N, C, H, W)`` (or 3-D unbatched) input:
    ``(N, C*kh*kw, L)`` with ``L`` the number of windows, channels slowest, then kernel rows and columns."""
    unbatched = x.ndim == 3
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != 4:
        raise GraphError(f"unfold expects a 3-D or 4-D input, got {x.ndim}-D")
    (kh, kw), (dh, dw) = _pair(kernel_size, 2, "kernel_size"), _pair(dilation, 2, "dilation")
    (ph, pw), (sh, sw) = _pair(padding, 2, "padding"), _pair(stride, 2, "stride")
    if ph or pw:
        x = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))
    # windows along H and W: (N, C, oh, ow, span_h, span_w), then every dilation-th entry of each span
    win = x.unfold(2, dh * (kh - 1) + 1, sh).unfold(3, dw * (kw - 1) + 1, sw)
    if dh > 1 or dw > 1:
        win = win[:, :, :, :, ::dh, ::dw]
    n, c, oh, ow = win.dims[:4]
    out = win.permute(0, 1, 4, 5, 2, 3).reshape((n, c * kh * kw, oh * ow))
    return out.squeeze(0) if unbatched else out


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """``torch.nn.functional.fold`` (col2im), the adjoint of :func:`unfold`: ``(N, C*kh*kw, L)`` columns summed
    back into ``(N, C, H, W)`` (overlapping entries add up)."""
    unbatched = x.ndim == 2
    if unbatched:
        x = x.unsqueeze(0)
    if x.ndim != 3:
        raise GraphError(f"fold expects a 2-D or 3-D input, got {x.ndim}-D")
    (oh_, ow_), (kh, kw) = _pair(output_size, 2, "output_size"), _pair(kernel_size, 2, "kernel_size")
    (dh, dw), (ph, pw), (sh, sw) = (_pair(dilation, 2, "dilation"), _pair(padding, 2, "padding"),
                                    _pair(stride, 2, "stride"))
    hp, wp = oh_ + 2 * ph, ow_ + 2 * pw
    nh, nw = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    n, ckk, length = x.dims
    if not ckk.is_constant() or ckk.to_int() % (kh * kw):
        raise GraphError(f"fold: dim 1 ({ckk}) must be a multiple of kernel_size product {kh * kw}")
    if length != nh * nw:
        raise GraphError(f"fold: expected {nh * nw} blocks for output_size {(oh_, ow_)}, got {length}")
    c = ckk.to_int() // (kh * kw)
    cols = x.reshape((n, c, kh, kw, nh, nw))
    out = None
    for i in range(kh):  # each kernel offset places a strided (nh, nw) grid of values into the padded image
        for j in range(kw):
            grid = cols[:, :, i, j]  # (N, C, nh, nw)
            if sh > 1 or sw > 1:  # interleave zeros: (nh, nw) -> (nh*sh, nw*sw) with values at multiples
                grid = grid.unsqueeze(3).unsqueeze(5).pad(((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)))
                grid = grid.reshape((n, c, nh * sh, nw * sw))
            top, left = i * dh, j * dw
            h_used, w_used = (nh - 1) * sh + 1, (nw - 1) * sw + 1
            grid = grid[:, :, :h_used, :w_used]
            placed = grid.pad(((0, 0), (0, 0), (top, hp - top - h_used), (left, wp - left - w_used)))
            out = placed if out is None else out + placed
    out = out[:, :, ph:ph + oh_, pw:pw + ow_]
    return out.squeeze(0) if unbatched else out


def pixel_shuffle(x, upscale_factor: int):
    """``torch.nn.functional.pixel_shuffle``: ``(*, C*r*r, H, W) -> (*, C, H*r, W*r)``."""
    r = int(upscale_factor)
    if x.ndim < 3:
        raise GraphError(f"pixel_shuffle expects at least 3 dimensions, got {x.ndim}")
    *lead, cr, h, w = x.dims
    if not cr.is_constant() or cr.to_int() % (r * r):
        raise GraphError(f"pixel_shuffle: channels ({cr}) must be divisible by upscale_factor^2 = {r * r}")
    c = cr.to_int() // (r * r)
    k = len(lead)
    y = x.reshape(tuple(lead) + (c, r, r, h, w))
    y = y.permute(list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2])
    return y.reshape(tuple(lead) + (c, h * r, w * r))


def pixel_unshuffle(x, downscale_factor: int):
    """``torch.nn.functional.pixel_unshuffle``: ``(*, C, H*r, W*r) -> (*, C*r*r, H, W)``."""
    r = int(downscale_factor)
    if x.ndim < 3:
        raise GraphError(f"pixel_unshuffle expects at least 3 dimensions, got {x.ndim}")
    *lead, c, hr, wr = x.dims
    for d in (hr, wr):
        if not d.is_constant() or d.to_int() % r:
            raise GraphError(f"pixel_unshuffle: spatial sizes {hr}, {wr} must be divisible by {r}")
    h, w = hr.to_int() // r, wr.to_int() // r
    k = len(lead)
    y = x.reshape(tuple(lead) + (c, h, r, w, r))
    y = y.permute(list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3])
    return y.reshape(tuple(lead) + (c * r * r, h, w))


def channel_shuffle(x, groups: int):
    """``torch.nn.functional.channel_shuffle``: ``(N, g*k, *) -> (N, k*g, *)`` with the groups interleaved."""
    n, ch, *rest = x.dims
    if not ch.is_constant() or ch.to_int() % groups:
        raise GraphError(f"channel_shuffle: channels ({ch}) must be divisible by groups = {groups}")
    y = x.reshape((n, groups, ch.to_int() // groups, *rest))
    return y.transpose(1, 2).reshape((n, ch, *rest))


# ---------------------------------------------------------------------------------------------- similarities
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """``torch.nn.functional.cosine_similarity``: ``x1.x2 / max(|x1| |x2|, eps)`` along ``dim`` (broadcasting)."""
    dot = (x1 * x2).sum(dim)
    n1 = (x1 * x1).sum(dim)
    n2 = (x2 * x2).sum(dim)
    return dot / (n1 * n2).clip(eps * eps, None).sqrt()


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``torch.nn.functional.pairwise_distance``: ``||x1 - x2 + eps||_p`` over the last axis."""
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


def pdist(x, p: float = 2.0):
    """``torch.nn.functional.pdist``: the distances between all pairs of rows ``i < j`` of a 2-D input, in
    row-major order of the upper triangle."""
    import numpy as np

    from ..hl_ops import cdist
    from ..hl_ops.resample import const_array
    if x.ndim != 2:
        raise GraphError(f"pdist expects a 2-D input, got {x.ndim}-D")
    n = x.dims[0]
    if not n.is_constant():
        raise GraphError("pdist needs a concrete number of rows")
    n = n.to_int()
    i, j = np.triu_indices(n, 1)
    pairs = (i * n + j).astype(np.int64)
    return cdist(x, x, p).reshape((n * n,)).index_select(0, const_array(x.graph, pairs))


# ---------------------------------------------------------------------------------------------- losses
def _reduce(loss, reduction: str, fn: str):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``max(0, -target * (input1 - input2) + margin)``."""
    return _reduce((-(target * (input1 - input2)) + margin).relu(), reduction, "margin_ranking_loss")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def hinge_embedding_loss(input, target, margin: float = 1.0, reduction: str = "mean"):  # noqa: A002
    """``x`` where ``target == 1``, ``max(0, margin - x)`` where ``target == -1``."""
    loss = where(target.eq(1), input, 0.0) + where(target.eq(-1), (margin - input).relu(), 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def soft_margin_loss(input, target, reduction: str = "mean"):  # noqa: A002
    """``log(1 + exp(-target * input))`` (softplus, stable)."""
    return _reduce((-(target * input)).softplus(), reduction, "soft_margin_loss")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where ``target == -1``
    (cosine over the last axis with PyTorch's ``eps = 1e-12`` on the squared norms)."""
    dot = (input1 * input2).sum(-1)
    denom = ((input1 * input1).sum(-1) + 1e-12) * ((input2 * input2).sum(-1) + 1e-12)
    cos = dot / denom.sqrt()
    loss = where(target.eq(1), 1.0 - cos, 0.0) + where(target.eq(-1), (cos - margin).relu(), 0.0)
    return _reduce(loss, reduction, "cosine_embedding_loss")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False, eps: float = 1e-8,  # noqa: A002
                     reduction: str = "mean"):
    """``exp(input) - target * input`` (``log_input``) or ``input - target * log(input + eps)``; ``full`` adds
    Stirling's ``target*log(target) - target + 0.5*log(2*pi*target)`` where ``target > 1``."""
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        t = target
        safe = where(t > 1, t, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (safe * (2 * math.pi)).log()
        loss = loss + where(t > 1, stirling, 0.0)
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):  # noqa: A002
    """``0.5 * (log(max(var, eps)) + (input - target)^2 / max(var, eps))`` (+ ``0.5*log(2*pi)`` with ``full``)."""
    v = var.clip(eps, None) if hasattr(var, "clip") else max(float(var), eps)
    loss = 0.5 * ((v.log() if hasattr(v, "log") else math.log(v)) + (input - target) * (input - target) / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


@autocast_float32  # luminal.autocast: computed in float32, as torch
def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                        swap: bool = False, reduction: str = "mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise ``p``-distance (``swap``: the smaller of
    ``d(a, n)`` and ``d(p, n)``)."""
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = d_an.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((d_ap - d_an + margin).relu(), reduction, "triplet_margin_loss")


def multilabel_soft_margin_loss(input, target, weight=None, reduction: str = "mean"):  # noqa: A002
    """``-mean_c(y log sigmoid(x) + (1 - y) log sigmoid(-x))`` per sample (``weight`` per class)."""
    per = -(target * input.logsigmoid() + (1.0 - target) * (-input).logsigmoid())
    if weight is not None:
        per = per * weight
    return _reduce(per.mean(-1), reduction, "multilabel_soft_margin_loss")


# ---------------------------------------------------------------------------------------------- bilinear, LRN
def bilinear(input1, input2, weight, bias=None):
    """``torch.nn.functional.bilinear``: ``y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]``
    (``weight``: ``(out, in1, in2)``), as one matrix product ``input1 @ weight`` (``(..., out * in2)``) then a product
    with ``input2`` summed over ``in2``."""
    if weight.ndim != 3:
        raise GraphError(f"bilinear: the weight must be (out_features, in1_features, in2_features), got "
                         f"{[str(d) for d in weight.dims]}")
    out, n1, n2 = weight.dims
    if input1.dims[-1] != n1 or input2.dims[-1] != n2:
        raise GraphError(f"bilinear: inputs of {input1.dims[-1]} and {input2.dims[-1]} features for a weight of "
                         f"(out, {n1}, {n2})")
    if tuple(input1.dims[:-1]) != tuple(input2.dims[:-1]):
        raise GraphError(f"bilinear: the inputs' leading dims differ: {[str(d) for d in input1.dims[:-1]]} and "
                         f"{[str(d) for d in input2.dims[:-1]]}")
    t = input1 @ weight.permute(1, 0, 2).reshape((n1, out * n2))
    y = (t.reshape(tuple(input1.dims[:-1]) + (out, n2)) * input2.unsqueeze(-2)).sum(-1)
    return y if bias is None else y + bias


def local_response_norm(x, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """``torch.nn.functional.local_response_norm`` over the channels (dim 1) of an ``(N, C, *)`` input:
    ``x / (k + alpha / size * (sum of x^2 over the size channels around c)) ** beta``, the channel window padded
    with zeros, ``size // 2`` before and ``(size - 1) // 2`` after (PyTorch's)."""
    size = int(size)
    if size < 1:
        raise ValueError(f"local_response_norm: size must be >= 1, got {size}")
    return channel_window_norm(x, size, alpha, beta, k, size // 2, (size - 1) // 2)


def channel_window_norm(x, size: int, alpha: float, beta: float, k: float, before: int, after: int):
    """Local response normalization with the channel window padded by ``before`` / ``after`` zeros (PyTorch's
    :func:`local_response_norm`; ONNX's ``LRN`` pads the other way for an even ``size``)."""
    if x.ndim < 3:
        raise GraphError(f"local_response_norm: expected an (N, C, *) input of 3 or more dims, got {x.ndim}-D")
    windows = (x * x).pad_axis(1, before, after).pool(1, size, 1, 1)  # (N, C, size, *)
    return x / (windows.sum(2) * (alpha / size) + k).pow(beta)
