"""Normalizations, dropout and losses: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization, LRN, Dropout,
NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np

from ...dtype import DType
from ...hl_ops import where
from ..errors import OnnxImportError
from ..registry import dim, register
from ._common import axes_list, axis


def _channel(t, rank):
    """A per-channel vector (C,) seen as (C, 1, ..., 1) for an input of ``rank`` (channels on axis 1)."""
    return t.reshape((-1,) + (1,) * (rank - 2))


def _stash(ctx, x):
    """Compute in float32 at least (``stash_type=1``, the default) or in the input's type (``0``)."""
    if ctx.attr("stash_type", 1) == 1 and x.dtype.is_half:
        return x.cast(DType.float32)
    return x


@register("BatchNormalization")
def _batch_norm(ctx):
    x = ctx.t(0)
    scale, bias, mean, var = (ctx.t(i).cast(x.dtype) for i in range(1, 5))
    eps = ctx.attr("epsilon", 1e-5)
    r = x.ndim
    if ctx.attr("training_mode", 0):
        stat_axes = tuple(a for a in range(r) if a != 1)
        bmean = x.mean(stat_axes)
        bvar = (x - _channel(bmean, r)).square().mean(stat_axes)
        y = (x - _channel(bmean, r)) / (_channel(bvar, r) + eps).sqrt() * _channel(scale, r) + _channel(bias, r)
        m = ctx.attr("momentum", 0.9)
        return [y, mean * m + bmean * (1 - m), var * m + bvar * (1 - m)]
    y = (x - _channel(mean, r)) / (_channel(var, r) + eps).sqrt() * _channel(scale, r) + _channel(bias, r)
    return [y]


@register("InstanceNormalization")
def _instance_norm(ctx):
    x = ctx.t(0)
    eps = ctx.attr("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    var = (x - mean).square().mean(axes, keepdim=True)
    y = (x - mean) / (var + eps).sqrt()
    return [y * _channel(ctx.t(1), x.ndim) + _channel(ctx.t(2), x.ndim)]


@register("LayerNormalization")
def _layer_norm(ctx):
    x0 = ctx.t(0)
    x = _stash(ctx, x0)
    a = axis(ctx.attr("axis", -1), x.ndim)
    axes = tuple(range(a, x.ndim))
    eps = ctx.attr("epsilon", 1e-5)
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = centered.square().mean(axes, keepdim=True)
    inv = (var + eps).rsqrt()
    y = (centered * inv).cast(x0.dtype) * ctx.t(1)
    if ctx.has(2):
        y = y + ctx.t(2)
    return [y, mean, inv]


@register("GroupNormalization")
def _group_norm(ctx):
    x0 = ctx.t(0)
    x = _stash(ctx, x0)
    g = ctx.attr("num_groups")
    eps = ctx.attr("epsilon", 1e-5)
    n, c = x.dims[0], dim(x.dims[1])
    rest = x.dims[2:]
    xg = x.reshape((n, g, -1))
    mean = xg.mean(2, keepdim=True)
    centered = xg - mean
    var = centered.square().mean(2, keepdim=True)
    y = (centered * (var + eps).rsqrt()).reshape((n, c) + tuple(rest)).cast(x0.dtype)
    scale, bias = ctx.t(1), ctx.t(2)
    if dim(scale.dims[0]) == g and g != c:  # opset 18: one scale per group
        scale = scale.unsqueeze(1).expand((g, c // g)).reshape((c,))
        bias = bias.unsqueeze(1).expand((g, c // g)).reshape((c,))
    return [y * _channel(scale, x.ndim) + _channel(bias, x.ndim)]


@register("RMSNormalization")
def _rms_norm(ctx):
    x0 = ctx.t(0)
    x = _stash(ctx, x0)
    a = axis(ctx.attr("axis", -1), x.ndim)
    axes = tuple(range(a, x.ndim))
    eps = ctx.attr("epsilon", 1e-5)
    y = x * (x.square().mean(axes, keepdim=True) + eps).rsqrt()
    return [y.cast(x0.dtype) * ctx.t(1)]


@register("LpNormalization")
def _lp_norm(ctx):
    x = ctx.t(0)
    a = axis(ctx.attr("axis", -1), x.ndim)
    p = ctx.attr("p", 2)
    if p == 1:
        norm = x.abs().sum(a, keepdim=True)
    elif p == 2:
        norm = x.square().sum(a, keepdim=True).sqrt()
    else:
        raise OnnxImportError(f"LpNormalization: p must be 1 or 2, got {p}")
    return [where(norm.eq(0), 0.0, x / norm).cast(x.dtype)]


@register("MeanVarianceNormalization")
def _mvn(ctx):
    x = ctx.t(0)
    axes = tuple(axes_list(ctx.attr_ints("axes", [0, 2, 3]), x.ndim))
    mean = x.mean(axes, keepdim=True)
    var = (x * x).mean(axes, keepdim=True) - mean * mean
    return [(x - mean) / (var.sqrt() + 1e-9)]


@register("LRN")
def _lrn(ctx):
    x = ctx.t(0)
    size = ctx.attr("size")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    from ...nn.functional_extra import channel_window_norm
    return [channel_window_norm(x, size, alpha, beta, bias, (size - 1) // 2, size - 1 - (size - 1) // 2)]


@register("Dropout", min_version=7)
def _dropout(ctx):
    x = ctx.t(0)
    training = ctx.has(2) and bool(np.asarray(ctx.static(2, "input 'training_mode'")).reshape(-1)[0])
    ratio = float(ctx.scalar(1, "input 'ratio'")) if ctx.has(1) else ctx.attr("ratio", 0.5)
    if training and ratio > 0:
        raise OnnxImportError("Dropout in training mode (random masks) is not supported; export for inference")
    mask = ctx.const(True, DType.bool, x.dims)
    return [x, mask]


# ---------------------------------------------------------------------------------------------------- losses
def nll_loss(ctx, logp, target, weight, reduction, ignore_index):
    target = target.cast(DType.int64)
    ignored = target.eq(ignore_index) if ignore_index is not None else None
    safe = where(ignored, 0, target) if ignored is not None else target
    picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weight is not None:
        w = weight.index_select(0, safe)
    else:
        w = ctx.const(1.0, logp.dtype, safe.dims)
    if ignored is not None:
        w = where(ignored, 0.0, w)
    loss = -(picked * w)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / w.sum()
    raise OnnxImportError(f"reduction must be none, sum or mean, got {reduction!r}")


@register("NegativeLogLikelihoodLoss")
def _nll(ctx):
    logp = ctx.t(0)
    weight = ctx.t(2).cast(logp.dtype) if ctx.has(2) else None
    return [nll_loss(ctx, logp, ctx.t(1), weight, ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))]


@register("SoftmaxCrossEntropyLoss")
def _sce(ctx):
    scores = ctx.t(0)
    logp = scores.log_softmax(1)
    weight = ctx.t(2).cast(scores.dtype) if ctx.has(2) else None
    loss = nll_loss(ctx, logp, ctx.t(1), weight, ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))
    return [loss, logp]
