"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv.

Quantized integers (uint8/int8/uint16/int16) are luminal tensors of those dtypes (QuantizeLinear produces them,
DequantizeLinear and the integer products read them; products accumulate in int32); rounding is half-to-even and results saturate to the target type's range, as ONNX specifies. float8 and
4-bit types are not supported."""

from __future__ import annotations

from onnx import TensorProto as TP

from ...dtype import DType
from ...nn.conv import conv_nd
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, register, typed
from ._common import axis as norm_axis
from .nn import _spatial_attrs, conv_pads

QUANT_RANGES = {TP.UINT8: (0, 255), TP.INT8: (-128, 127), TP.UINT16: (0, 65535), TP.INT16: (-32768, 32767)}


def _param(ctx, i, x, axis, block):
    """Scale / zero point ``i`` broadcast against ``x``: scalar, per-axis (C,) or blocked."""
    t = ctx.t(i)
    if t.ndim == 0 or (t.ndim == 1 and dim(t.dims[0]) == 1):
        return t.reshape(())
    a = norm_axis(axis, x.ndim)
    if not block:
        shape = [1] * x.ndim
        shape[a] = t.dims[0]
        return t.reshape(shape)
    n = dim(x.dims[a])
    rep = t.unsqueeze(a + 1)
    dims = list(rep.dims)
    dims[a + 1] = block
    rep = rep.expand(dims).merge_dims(a, a + 1)
    return rep.slice_axis(a, 0, n)


def _exact_div(a, b):
    """``a / b`` correctly rounded in ``a``'s float dtype (through float64), not ``a * (1 / b)``: quantization
    rounds the quotient, so a one-ulp error moves values across rounding boundaries."""
    if a.dtype == DType.float64:
        return a / b
    return (a.cast(DType.float64) / (b.cast(DType.float64) if hasattr(b, "cast") else float(b))).cast(a.dtype)


def _out_type(ctx, zp_index, default=TP.UINT8):
    t = ctx.type(zp_index) if ctx.has(zp_index) else (ctx.attr("output_dtype", 0) or default)
    if t not in QUANT_RANGES:
        raise OnnxImportError(f"quantized type {dtypes.name(t)} is not supported (supported: "
                              f"{', '.join(dtypes.name(k) for k in QUANT_RANGES)})")
    return t


def _saturate(q, t):
    lo, hi = QUANT_RANGES[t]
    return typed(q.clip(float(lo), float(hi)).cast(dtypes.luminal(t)), t)


@register("QuantizeLinear")
def _quantize(ctx):
    x = ctx.t(0)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    t = _out_type(ctx, 2)
    work = DType.float32 if x.dtype != DType.float64 else DType.float64
    precision = ctx.attr("precision", 0)
    if precision in dtypes.SUPPORTED:
        work = dtypes.luminal(precision)
    scale = _param(ctx, 1, x, axis, block).cast(work)
    q = _exact_div(x.cast(work), scale).round()
    if ctx.has(2):
        q = q + _param(ctx, 2, x, axis, block).cast(work)
    return [_saturate(q, t)]


@register("DequantizeLinear")
def _dequantize(ctx):
    x = ctx.t(0)
    if ctx.type(0) not in QUANT_RANGES and ctx.type(0) not in (TP.INT32,):
        raise OnnxImportError(f"DequantizeLinear of {dtypes.name(ctx.type(0))} is not supported")
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    dx = x.cast(DType.float32)
    if ctx.has(2):
        dx = dx - _param(ctx, 2, x, axis, block).cast(DType.float32)
    y = dx * _param(ctx, 1, x, axis, block).cast(DType.float32)
    out = ctx.attr("output_dtype", 0) or ctx.type(1)
    return [typed(y.cast(dtypes.luminal(out)), out)]


@register("DynamicQuantizeLinear")
def _dynamic_quantize(ctx):
    x = ctx.t(0).cast(DType.float32)
    maxx = x.max().maximum(0.0)
    minx = x.min().minimum(0.0)
    rng = maxx - minx
    from ...hl_ops import where
    scale = _exact_div(where(rng.eq(0.0), 1.0, rng), 255.0)
    zp = (0.0 - _exact_div(minx, scale)).clip(0.0, 255.0).round()
    y = (_exact_div(x, scale).round() + zp).clip(0.0, 255.0)
    return [typed(y.cast(DType.uint8), TP.UINT8), typed(scale, TP.FLOAT), typed(zp.cast(DType.uint8), TP.UINT8)]


def _centered(ctx, i, zp_index, per_axis_shape=None):
    v = ctx.t(i).cast(DType.int32)
    if ctx.has(zp_index):
        zp = ctx.t(zp_index).cast(DType.int32)
        if zp.ndim == 1 and dim(zp.dims[0]) != 1 and per_axis_shape is not None:
            zp = zp.reshape(per_axis_shape)
        elif zp.ndim == 1:
            zp = zp.reshape(())
        v = v - zp
    return v


@register("MatMulInteger")
def _matmul_integer(ctx):
    a = _centered(ctx, 0, 2, (-1, 1))
    b = _centered(ctx, 1, 3, (-1,))
    return [typed(a @ b, TP.INT32)]


@register("QLinearMatMul")
def _qlinear_matmul(ctx):
    a = _centered(ctx, 0, 2, (-1, 1))
    b = _centered(ctx, 3, 5, (-1,))
    acc = (a @ b).cast(DType.float32)
    sa, sb, sy = (ctx.t(i).cast(DType.float32) for i in (1, 4, 6))
    if sa.ndim == 1 and dim(sa.dims[0]) != 1:
        sa = sa.reshape((-1, 1))
    if sb.ndim == 1 and dim(sb.dims[0]) == 1:
        sb = sb.reshape(())
    d = acc * (sa * sb / sy.reshape(()) if sy.ndim else sa * sb / sy)
    t = ctx.type(7) if ctx.has(7) else ctx.type(0)
    if ctx.has(7):
        d = d + ctx.t(7).cast(DType.float32).reshape(())
    return [_saturate(d.round(), t)]


def _conv_int(ctx, x, w, bias=None):
    n = w.ndim - 2
    kernel, strides, dilations = _spatial_attrs(ctx, n, [dim(d) for d in w.dims[2:]])
    pads = conv_pads(ctx, [dim(d) for d in x.dims[2:]], kernel, strides, dilations)
    x = x.pad([(0, 0), (0, 0)] + pads)
    return conv_nd(x, w, bias, strides, 0, dilations, ctx.attr("group", 1))


@register("ConvInteger")
def _conv_integer(ctx):
    x = _centered(ctx, 0, 2)
    w = ctx.t(1).cast(DType.int32)
    if ctx.has(3):
        wz = ctx.t(3).cast(DType.int32)
        w = w - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim == 1 and dim(wz.dims[0]) != 1 else wz.reshape(()))
    return [typed(_conv_int(ctx, x, w), TP.INT32)]


@register("QLinearConv")
def _qlinear_conv(ctx):
    x = _centered(ctx, 0, 2)
    w = ctx.t(3).cast(DType.int32)
    wz = ctx.t(5).cast(DType.int32)
    per_channel = (-1,) + (1,) * (w.ndim - 1)
    w = w - (wz.reshape(per_channel) if wz.ndim == 1 and dim(wz.dims[0]) != 1 else wz.reshape(()))
    acc = _conv_int(ctx, x, w, ctx.t(8).cast(DType.int32) if ctx.has(8) else None).cast(DType.float32)
    sx, sw, sy = (ctx.t(i).cast(DType.float32) for i in (1, 4, 6))
    n = w.ndim - 2
    sw = sw.reshape((-1,) + (1,) * n) if sw.ndim == 1 and dim(sw.dims[0]) != 1 else sw.reshape(())
    d = acc * (sx.reshape(()) * sw / sy.reshape(()))
    t = ctx.type(7) if ctx.has(7) else ctx.type(0)
    if ctx.has(7):
        d = d + ctx.t(7).cast(DType.float32).reshape(())
    return [_saturate(d.round(), t)]

