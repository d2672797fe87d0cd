"""Linear algebra, convolutions and pooling: MatMul, Gemm, Einsum, Conv, ConvTranspose, MaxPool, AveragePool,
LpPool, Global{Average,Max,Lp}Pool.

Convolutions use :func:`luminal.nn.functional.conv_nd` (sliding-window views and one contraction) on an input
padded with ONNX's (possibly asymmetric) pads; pooling pads with the reduction's identity and reduces windows
made by ``pool`` views, so nothing is copied before the reduction."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as TP

from ...dtype import DType
from ...nn.conv import conv_nd, conv_transpose_nd
from ...nn.pooling import window_max
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register, typed


# ---------------------------------------------------------------------------------------------------- MatMul, Gemm
def f32_compute(*ts):
    """float16 operands of products are computed in float32 and rounded once at the end (as numpy and
    onnxruntime accumulate); returns the operands and the dtype to round the result to."""
    if ts[0].dtype.is_half:
        return [t.cast(DType.float32) if t is not None else None for t in ts], ts[0].dtype
    return list(ts), None


def _round(y, dtype):
    return y if dtype is None else y.cast(dtype)


@register("MatMul")
def _matmul(ctx):
    (a, b), back = f32_compute(ctx.t(0), ctx.t(1))
    return [_round(a @ b, back)]


@register("Gemm")
def _gemm(ctx):
    (a, b), back = f32_compute(ctx.t(0), ctx.t(1))
    if ctx.attr("transA", 0):
        a = a.permute(1, 0)
    if ctx.attr("transB", 0):
        b = b.permute(1, 0)
    y = a @ b
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if ctx.has(2) and beta != 0.0:
        c = ctx.t(2).cast(y.dtype)
        y = y + (c * beta if beta != 1.0 else c)
    return [_round(y, back)]


# ---------------------------------------------------------------------------------------------------- Einsum
@register("Einsum")
def _einsum(ctx):
    """``luminal.hl_ops.einsum`` (float16 computes in float32, then casts back)."""
    from ...hl_ops.einsum import einsum
    eq = ctx.attr("equation").replace(" ", "")
    ts = [ctx.t(i) for i in range(len(ctx)) if ctx.has(i)]
    out_dtype = ts[0].dtype
    ts, _ = f32_compute(*ts)
    try:
        result = einsum(eq, *ts)
    except ValueError as e:
        raise OnnxImportError(f"Einsum: {e}") from None
    return [result.cast(out_dtype)]


# ---------------------------------------------------------------------------------------------------- padding rules
def conv_pads(ctx, in_dims, kernel, strides, dilations):
    """ONNX's ``(begin, end)`` pads per spatial dim from ``auto_pad`` / ``pads``."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for d, k, s, dl in zip(in_dims, kernel, strides, dilations):
            if is_symbolic(d):
                if s != 1:
                    raise OnnxImportError(f"auto_pad={auto} with stride {s} over a symbolic dim {d}")
                total = (k - 1) * dl
            else:
                total = max((-(-d // s) - 1) * s + (k - 1) * dl + 1 - d, 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return out
    if auto == "VALID":
        return [(0, 0)] * n
    pads = ctx.attr_ints("pads", [0] * 2 * n)
    return [(pads[i], pads[i + n]) for i in range(n)]


def _spatial_attrs(ctx, n, kernel=None):
    kernel = ctx.attr_ints("kernel_shape", kernel)
    strides = ctx.attr_ints("strides", [1] * n)
    dilations = ctx.attr_ints("dilations", [1] * n)
    return kernel, strides, dilations


# ---------------------------------------------------------------------------------------------------- Conv
@register("Conv")
def _conv(ctx):
    (x, w, b), back = f32_compute(ctx.t(0), ctx.t(1), ctx.t(2) if ctx.has(2) else None)
    n = w.ndim - 2
    kernel, strides, dilations = _spatial_attrs(ctx, n, [dim(d) for d in w.dims[2:]])
    if x.ndim != n + 2:
        raise OnnxImportError(f"Conv: input of rank {x.ndim} for a {n}-d kernel {[str(d) for d in w.dims]}")
    pads = conv_pads(ctx, [dim(d) for d in x.dims[2:]], kernel, strides, dilations)
    x = x.pad([(0, 0), (0, 0)] + pads)
    return [_round(conv_nd(x, w, b, strides, 0, dilations, ctx.attr("group", 1)), back)]


@register("ConvTranspose")
def _conv_transpose(ctx):
    (x, w), back = f32_compute(ctx.t(0), ctx.t(1))
    n = w.ndim - 2
    kernel, strides, dilations = _spatial_attrs(ctx, n, [dim(d) for d in w.dims[2:]])
    group = ctx.attr("group", 1)
    in_dims = [dim(d) for d in x.dims[2:]]
    if any(is_symbolic(d) for d in in_dims):
        raise OnnxImportError("ConvTranspose needs concrete spatial sizes")
    out_pad = ctx.attr_ints("output_padding", [0] * n)
    full = [s * (d - 1) + (k - 1) * dl + 1 for d, s, k, dl in zip(in_dims, strides, kernel, dilations)]
    output_shape = ctx.attr_ints("output_shape")
    auto = ctx.attr("auto_pad", "NOTSET")
    if ctx.has_attr("pads") or (output_shape is None and auto not in ("SAME_UPPER", "SAME_LOWER")):
        pads = ctx.attr_ints("pads", [0] * 2 * n)
        pairs = [(pads[i], pads[i + n]) for i in range(n)]
        if output_shape is None:
            output_shape = [f + op - b - e for f, op, (b, e) in zip(full, out_pad, pairs)]
    else:
        if output_shape is None:
            output_shape = [d * s for d, s in zip(in_dims, strides)]
        output_shape = output_shape[-n:]
        pairs = []
        for f, op, o in zip(full, out_pad, output_shape):
            total = f + op - o
            small, big = total // 2, total - total // 2
            pairs.append((small, big) if auto == "SAME_UPPER" else (big, small))
    y = conv_transpose_nd(x, w, None, strides, 0, 0, group, dilations)
    for i, ((b, _), f, o) in enumerate(zip(pairs, full, output_shape)):
        y = y.pad_axis(2 + i, -b, o + b - f)
    if ctx.has(2):
        y = y + ctx.t(2).cast(y.dtype).reshape((-1,) + (1,) * n)
    return [_round(y, back)]


# ---------------------------------------------------------------------------------------------------- pooling
def _pool_geometry(ctx, x, n):
    """(kernel, strides, dilations, pads, out sizes, extra end pad) with ONNX's output-size rules."""
    kernel, strides, dilations = _spatial_attrs(ctx, n)
    if kernel is None:
        raise OnnxImportError(f"{ctx.op_type}: kernel_shape is required")
    in_dims = [dim(d) for d in x.dims[2:]]
    if any(is_symbolic(d) for d in in_dims):
        raise OnnxImportError(f"{ctx.op_type} needs concrete spatial sizes, got {in_dims}")
    auto = ctx.attr("auto_pad", "NOTSET")
    ceil = bool(ctx.attr("ceil_mode", 0))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = [(d - 1) // s + 1 for d, s in zip(in_dims, strides)]
        pads = []
        for d, k, s, o, dl in zip(in_dims, kernel, strides, outs, dilations):
            total = max((o - 1) * s + (k - 1) * dl + 1 - d, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
    else:
        pads = conv_pads(ctx, in_dims, kernel, strides, dilations)
        outs = []
        for d, k, s, dl, (b, e) in zip(in_dims, kernel, strides, dilations, pads):
            span = (k - 1) * dl + 1
            size = (d + b + e - span) / s + 1
            o = int(math.ceil(size)) if ceil else int(math.floor(size))
            if ceil and (o - 1) * s >= d + b:
                o -= 1
            outs.append(o)
    return kernel, strides, dilations, pads, outs


def _windows(x, kernel, strides, dilations, pads, outs, value):
    """Pad (``value``) so that exactly ``outs`` windows fit, then window every spatial axis:
    ``(N, C, O1, K1, O2, K2, ...)``; returns (windows, kernel axes)."""
    n = len(kernel)
    pairs = [(0, 0), (0, 0)]
    for d, k, s, dl, (b, _), o in zip(x.dims[2:], kernel, strides, dilations, pads, outs):
        need = (o - 1) * s + (k - 1) * dl + 1
        pairs.append((b, need - b - dim(d)))
    x = x.pad(pairs, value) if value != 0 else x.pad(pairs)
    k_axes = []
    for i in range(n):
        ax = 2 + 2 * i
        x = x.pool(ax, kernel[i], strides[i], dilations[i])
        k_axes.append(ax + 1)
    return x, tuple(k_axes)


def _lowest(dtype):
    return -math.inf if dtype.is_float else int(np.iinfo(dtype.numpy).min)


@register("MaxPool")
def _max_pool(ctx):
    x = ctx.t(0)
    n = x.ndim - 2
    kernel, strides, dilations, pads, outs = _pool_geometry(ctx, x, n)
    win, k_axes = _windows(x, kernel, strides, dilations, pads, outs, _lowest(x.dtype))
    y = window_max(win, k_axes)  # differentiated as torch's max pooling (no padding mask: -inf ties aside)
    if not ctx.output_used(1):
        return [y]
    # Indices: flat position (row-major, or column-major over H, W with storage_order=1) of each maximum
    order = [0, 1] + [2 + 2 * i for i in range(n)] + list(k_axes)
    wins = win.permute(order)
    kprod = int(np.prod(kernel))
    flat = wins.reshape(wins.dims[:2 + n] + (kprod,))
    k_idx = flat.argmax(-1, keepdim=True)                               # (N, C, O..., 1)
    in_dims = [dim(d) for d in x.dims[2:]]
    grids = np.meshgrid(*[np.arange(o) for o in outs], *[np.arange(k) for k in kernel], indexing="ij")
    coords = [grids[i] * strides[i] + grids[n + i] * dilations[i] - pads[i][0] for i in range(n)]
    if ctx.attr("storage_order", 0):
        strides_in = [int(np.prod(in_dims[:i])) for i in range(n)]
    else:
        strides_in = [int(np.prod(in_dims[i + 1:])) for i in range(n)]
    table = sum(c * s for c, s in zip(coords, strides_in)).reshape(outs + [kprod]).astype(np.int64)
    table_t = ctx.array(table).expand(flat.dims)
    spatial = table_t.gather(2 + n, k_idx).squeeze(-1)                  # (N, C, O...)
    plane = int(np.prod(in_dims))
    nc = ctx.graph.arange(x.dims[0] * x.dims[1], dtype=DType.int64).reshape((x.dims[0], x.dims[1]) + (1,) * n)
    return [y, typed(spatial + nc * plane, TP.INT64)]


@register("AveragePool")
def _average_pool(ctx):
    x = ctx.t(0)
    n = x.ndim - 2
    kernel, strides, dilations, pads, outs = _pool_geometry(ctx, x, n)
    win, k_axes = _windows(x, kernel, strides, dilations, pads, outs, 0)
    total = win.sum(k_axes)
    in_dims = [dim(d) for d in x.dims[2:]]
    # divisor: window elements inside the explicitly padded input (count_include_pad) or the input itself
    if ctx.attr("count_include_pad", 0):
        ones = ctx.const(1.0, x.dtype, [d + b + e for d, (b, e) in zip(in_dims, pads)])
        pre = [(0, 0)] * n
    else:
        ones = ctx.const(1.0, x.dtype, in_dims)
        pre = [(b, 0) for b, _ in pads]
    ones = ones.pad(pre)
    mask = ones.unsqueeze(0).unsqueeze(0)
    m_pairs = [(0, 0), (0, 0)]
    for i, (d, k, s, dl, o) in enumerate(zip(mask.dims[2:], kernel, strides, dilations, outs)):
        need = (o - 1) * s + (k - 1) * dl + 1
        m_pairs.append((0, need - dim(d)))
    mask = mask.pad(m_pairs)
    for i in range(n):
        mask = mask.pool(2 + 2 * i, kernel[i], strides[i], dilations[i])
    count = mask.sum(k_axes)
    return [total / count]


@register("LpPool")
def _lp_pool(ctx):
    x = ctx.t(0)
    n = x.ndim - 2
    p = ctx.attr("p", 2)
    kernel, strides, dilations, pads, outs = _pool_geometry(ctx, x, n)
    win, k_axes = _windows(x.abs().pow(p), kernel, strides, dilations, pads, outs, 0)
    return [win.sum(k_axes).pow(1.0 / p)]


def _spatial_axes(x):
    return tuple(range(2, x.ndim))


register("GlobalAveragePool")(lambda ctx: [ctx.t(0).mean(_spatial_axes(ctx.t(0)), keepdim=True)])
register("GlobalMaxPool")(lambda ctx: [ctx.t(0).max(_spatial_axes(ctx.t(0)), keepdim=True)])


@register("GlobalLpPool")
def _global_lp(ctx):
    x = ctx.t(0)
    p = ctx.attr("p", 2)
    return [x.abs().pow(p).sum(_spatial_axes(x), keepdim=True).pow(1.0 / p)]
