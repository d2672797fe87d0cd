"""Sampling: AffineGrid and GridSample (luminal.nn.sampling's ``affine_grid`` / ``grid_sample``, PyTorch's
semantics, which ONNX's follow), DeformConv and RoiAlign (bilinear taps as ``Gather`` over the flattened image
with indices computed in the graph)."""

from __future__ import annotations

import numpy as np

from ...dtype import DType
from ...hl_ops import where
from ..errors import OnnxImportError
from ...nn.sampling import MODES, affine_grid, grid_sample
from ..registry import dim, is_symbolic, register


@register("AffineGrid")
def _affine_grid(ctx):
    theta = ctx.t(0)
    size = ctx.ints(1, "input 'size'")
    if any(is_symbolic(s) for s in size[2:]):
        raise OnnxImportError("AffineGrid needs a concrete size")
    return [affine_grid(theta, size, bool(ctx.attr("align_corners", 0)))]


@register("GridSample")
def _grid_sample(ctx):
    x, grid = ctx.t(0), ctx.t(1)
    mode = ctx.attr("mode", "linear")
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    if any(is_symbolic(dim(d)) for d in x.dims[2:]):
        raise OnnxImportError("GridSample needs concrete input spatial sizes")
    if mode not in MODES:
        raise OnnxImportError(f"GridSample: unknown mode {ctx.attr('mode', 'linear')!r}")
    return [grid_sample(x, grid, mode, ctx.attr("padding_mode", "zeros"), bool(ctx.attr("align_corners", 0)))]


def _bilinear_taps(y, x, height: int, width: int):
    """Zero-padded bilinear taps at real positions: [(flat index, weight, valid)] x 4 (DeformConv's rule)."""
    y0, x0 = y.floor(), x.floor()
    wy, wx = y - y0, x - x0
    yi, xi = y0.cast(DType.int64), x0.cast(DType.int64)
    taps = []
    for dy, wyk in ((0, 1.0 - wy), (1, wy)):
        for dx, wxk in ((0, 1.0 - wx), (1, wx)):
            yy, xx = yi + dy, xi + dx
            ok = (yy >= 0).logical_and(yy < height).logical_and(xx >= 0).logical_and(xx < width)
            taps.append((where(ok, yy * width + xx, 0), wyk * wxk, ok))
    return taps


@register("DeformConv")
def _deform_conv(ctx):
    x, w, offset = ctx.t(0), ctx.t(1), ctx.t(2)
    if x.ndim != 4:
        raise OnnxImportError("DeformConv is implemented for 2-D convolutions")
    n, c = x.dims[0], dim(x.dims[1])
    h, wd = dim(x.dims[2]), dim(x.dims[3])
    oc = dim(w.dims[0])
    kh, kw = ctx.attr_ints("kernel_shape", [dim(d) for d in w.dims[2:]])
    sh, sw = ctx.attr_ints("strides", [1, 1])
    dh, dw = ctx.attr_ints("dilations", [1, 1])
    pads = ctx.attr_ints("pads", [0, 0, 0, 0])
    group, og = ctx.attr("group", 1), ctx.attr("offset_group", 1)
    oh, ow = dim(offset.dims[2]), dim(offset.dims[3])
    if any(is_symbolic(v) for v in (c, h, wd, oh, ow)):
        raise OnnxImportError("DeformConv needs concrete channel and spatial sizes")
    k = kh * kw
    off = offset.reshape((n, og, kh, kw, 2, oh, ow))
    base_y = (np.arange(kh)[:, None, None, None] * dh + np.arange(oh)[None, None, :, None] * sh - pads[0])
    base_x = (np.arange(kw)[None, :, None, None] * dw + np.arange(ow)[None, None, None, :] * sw - pads[1])
    y = off.slice_axis(4, 0, 1).squeeze(4) + ctx.array(base_y.astype(np.float64)).cast(x.dtype)  # (N, G, kh, kw, oh, ow)
    xx = off.slice_axis(4, 1, 2).squeeze(4) + ctx.array(base_x.astype(np.float64)).cast(x.dtype)
    flat = x.reshape((n, og, c // og, h * wd))
    q = k * oh * ow
    sampled = None
    for idx, weight, ok in _bilinear_taps(y, xx, h, wd):
        gathered = flat.gather(3, idx.reshape((n, og, 1, q)).expand((n, og, c // og, q)))
        term = where(ok.reshape((n, og, 1, q)), gathered, 0.0) * weight.reshape((n, og, 1, q))
        sampled = term if sampled is None else sampled + term
    if ctx.has(4):
        sampled = sampled * ctx.t(4).reshape((n, og, 1, q))
    cols = sampled.reshape((n, c, k, oh * ow)).reshape((n, group, (c // group) * k, oh * ow))
    wm = w.reshape((group, oc // group, (c // group) * k))
    out = (wm @ cols).reshape((n, oc, oh, ow))                                  # (N, G, oc/G, P)
    if ctx.has(3):
        out = out + ctx.t(3).reshape((oc, 1, 1))
    return [out.cast(x.dtype)]


@register("RoiAlign")
def _roi_align(ctx):
    x, rois, bidx = ctx.t(0), ctx.t(1), ctx.t(2).cast(DType.int64)
    c, h, wd = (dim(d) for d in x.dims[1:])
    if any(is_symbolic(v) for v in (c, h, wd)):
        raise OnnxImportError("RoiAlign needs concrete channel and spatial sizes")
    oh, ow = ctx.attr("output_height", 1), ctx.attr("output_width", 1)
    sr = ctx.attr("sampling_ratio", 0)
    if sr <= 0:
        raise OnnxImportError("RoiAlign with sampling_ratio=0 (a data-dependent sampling grid) is not supported")
    scale = ctx.attr("spatial_scale", 1.0)
    half = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    r = rois.dims[0]
    shift = 0.5 if half else 0.0
    box = [rois.slice_axis(1, j, j + 1) * scale - shift for j in range(4)]        # (R, 1) each
    start_w, start_h, end_w, end_h = box
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not half:
        roi_w, roi_h = roi_w.maximum(1.0), roi_h.maximum(1.0)
    bin_h, bin_w = roi_h / oh, roi_w / ow
    gy = ((np.arange(oh)[:, None] + (np.arange(sr)[None, :] + 0.5) / sr).reshape(-1)).astype(np.float64)
    gx = ((np.arange(ow)[:, None] + (np.arange(sr)[None, :] + 0.5) / sr).reshape(-1)).astype(np.float64)
    y = start_h + bin_h * ctx.array(gy).cast(x.dtype)                               # (R, oh*sr)
    xs = start_w + bin_w * ctx.array(gx).cast(x.dtype)                              # (R, ow*sr)
    y, xs = y.unsqueeze(2), xs.unsqueeze(1)                                       # (R, Y, 1), (R, 1, X)
    outside = (y < -1.0).logical_or(y > h).logical_or(xs < -1.0).logical_or(xs > wd)
    y, xs = y.maximum(0.0), xs.maximum(0.0)
    yl, xl = y.trunc(), xs.trunc()
    y_top, x_top = yl >= h - 1, xl >= wd - 1
    yl, xl = where(y_top, float(h - 1), yl), where(x_top, float(wd - 1), xl)
    yh, xh = where(y_top, yl, yl + 1.0), where(x_top, xl, xl + 1.0)
    y, xs = where(y_top, yl, y), where(x_top, xl, xs)
    ly, lx = y - yl, xs - xl
    hy, hx = 1.0 - ly, 1.0 - lx
    yli, xli, yhi, xhi = (v.cast(DType.int64) for v in (yl, xl, yh, xh))
    taps = [(yli * wd + xli, hy * hx), (yli * wd + xhi, hy * lx), (yhi * wd + xli, ly * hx), (yhi * wd + xhi, ly * lx)]
    data = x.reshape((x.dims[0], c, h * wd)).index_select(0, bidx)                 # (R, C, HW)
    q = oh * sr * ow * sr
    vals = []
    for idx, weight in taps:
        g = data.gather(2, idx.reshape((r, 1, q)).expand((r, c, q)))
        vals.append(g * where(outside, 0.0, weight).reshape((r, 1, q)))
    if ctx.attr("mode", "avg") == "avg":
        total = vals[0] + vals[1] + vals[2] + vals[3]
        out = total.reshape((r, c, oh, sr, ow, sr)).sum((3, 5)) / float(sr * sr)
    else:
        m = vals[0].maximum(vals[1]).maximum(vals[2]).maximum(vals[3])
        out = m.reshape((r, c, oh, sr, ow, sr)).max((3, 5))
    return [out.cast(x.dtype)]
