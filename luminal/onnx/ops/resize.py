"""Resize: nearest, linear and cubic interpolation (with antialias, exclude_outside, tf_crop_and_resize).

Resize is separable: each resized axis is interpolated on its own. The coordinate mapping, the neighbour
indices and the interpolation weights depend only on the (static) sizes, so they are computed here in numpy at
import time. At run time an axis becomes one ``Gather`` of the neighbour rows (``index_select`` with a constant
index) times a constant weight table summed over the neighbours -- or, for nearest, the gather alone (exact).
"""

from __future__ import annotations

import math

import numpy as np

from ...dtype import DType
from ...hl_ops import where
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register
from ._common import axes_list


# ---------------------------------------------------------------------------------------------------- weights
def _nearest(mode):
    def coeffs(ratio, scale):
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        if mode == "ceil":
            return np.array([0.0, 1.0])
        raise OnnxImportError(f"Resize: unknown nearest_mode {mode!r}")
    return coeffs


def _linear(antialias):
    def coeffs(ratio, scale):
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic(a, antialias):
    def kernel(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    def coeffs(ratio, scale):
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        c = np.array([kernel(s * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()
    return coeffs


def source_coordinates(mode, out_len, in_len, scale, roi):
    """Input coordinate of each output position (ONNX ``coordinate_transformation_mode``), and the
    extrapolated positions (tf_crop_and_resize) or None."""
    y = np.arange(out_len, dtype=np.float64)
    out_w = scale * in_len
    extrapolated = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_w == 1 else y * (in_len - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(out_len, (hi - lo) * (in_len - 1) / 2) if out_w == 1 else y * (hi - lo) * (in_len - 1) / (out_w - 1)
        x = x + lo * (in_len - 1)
        extrapolated = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise OnnxImportError(f"Resize: unknown coordinate_transformation_mode {mode!r}")
    return x, extrapolated


def axis_weights(coeff_fn, in_len, out_len, scale, ctm, roi, exclude_outside):
    """(neighbour indices (out, n), weights (out, n), extrapolated mask or None) for one axis."""
    x, extrapolated = source_coordinates(ctm, out_len, in_len, scale, roi)
    base = np.floor(x).astype(np.int64)
    ratios = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([np.asarray(coeff_fn(float(r), scale), dtype=np.float64) for r in ratios])
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        b = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, b, b + 1)
    idx = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_len - 1), coeffs, extrapolated


# ---------------------------------------------------------------------------------------------------- sizes
def _output_sizes(ctx, in_dims, axes):
    r = len(in_dims)
    scales = sizes = None
    if ctx.has(3) and np.asarray(ctx.static(3, "input 'sizes'")).size:
        sizes = ctx.ints(3, "input 'sizes'")
    elif ctx.has(2) and np.asarray(ctx.static(2, "input 'scales'")).size:
        scales = ctx.floats(2, "input 'scales'")
    else:
        raise OnnxImportError("Resize needs 'scales' or 'sizes'")
    full_scales = [1.0] * r
    out = list(in_dims)
    if sizes is not None:
        for a, s in zip(axes, sizes):
            out[a] = s
        for a in axes:
            full_scales[a] = 1.0 if out[a] == in_dims[a] else out[a] / in_dims[a]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(full_scales[a] for a in axes)
            for a in axes:
                full_scales[a] = s
                out[a] = int(s * in_dims[a] + 0.5)
    else:
        for a, s in zip(axes, scales):
            full_scales[a] = s
            if s != 1.0 or not is_symbolic(in_dims[a]):
                out[a] = int(s * in_dims[a])
    return full_scales, out


@register("Resize")
def _resize(ctx):
    x = ctx.t(0)
    r = x.ndim
    in_dims = [dim(d) for d in x.dims]
    axes = axes_list(ctx.attr_ints("axes", list(range(r))), r)
    mode = ctx.attr("mode", "nearest")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    antialias = bool(ctx.attr("antialias", 0))
    scales, out = _output_sizes(ctx, in_dims, axes)
    roi = None
    if ctx.has(1) and np.asarray(ctx.static(1, "input 'roi'")).size:
        vals = ctx.floats(1, "input 'roi'")
        k = len(vals) // 2
        roi = {a: (vals[i], vals[i + k]) for i, a in enumerate(axes if k == len(axes) else range(r))}
    if mode == "nearest":
        if antialias:
            raise OnnxImportError("Resize: antialias is not defined for mode 'nearest'")
        fn = _nearest(ctx.attr("nearest_mode", "round_prefer_floor"))
    elif mode == "linear":
        fn = _linear(antialias)
    elif mode == "cubic":
        fn = _cubic(ctx.attr("cubic_coeff_a", -0.75), antialias)
    else:
        raise OnnxImportError(f"Resize: unknown mode {mode!r}")
    onnx_type = ctx.type(0)
    work = x if x.dtype.is_float else x.cast(DType.float32)
    for a in axes:
        in_len, out_len, scale = in_dims[a], out[a], scales[a]
        if is_symbolic(in_len) and out_len == in_len and scale == 1.0:
            continue
        if is_symbolic(in_len) or is_symbolic(out_len):
            raise OnnxImportError(f"Resize needs concrete sizes along resized axes, got {in_len} -> {out_len}")
        axis_roi = roi.get(a, (0.0, 1.0)) if roi is not None else None
        if math.isclose(scale, 1.0) and out_len == in_len and (axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        if ctm == "tf_crop_and_resize" and axis_roi is None:
            raise OnnxImportError("Resize: tf_crop_and_resize needs roi")
        idx, coeffs, extrapolated = axis_weights(fn, in_len, out_len, scale, ctm, axis_roi,
                                                 bool(ctx.attr("exclude_outside", 0)))
        if mode == "nearest":
            src = idx[np.arange(out_len), np.argmax(coeffs, axis=1)]
            work = work.index_select(a, ctx.array(src.astype(np.int64)))
        else:
            n = idx.shape[1]
            g = work.index_select(a, ctx.array(idx.reshape(-1).astype(np.int64)))
            g = g.split_dims(a, n)                                      # (..., out, n, ...)
            shape = [1] * (work.ndim + 1)
            shape[a], shape[a + 1] = out_len, n
            w = ctx.array(coeffs.reshape(shape).astype(work.dtype.numpy))
            work = (g * w).sum(a + 1)
        if extrapolated is not None and extrapolated.any():
            shape = [1] * work.ndim
            shape[a] = out_len
            mask = ctx.array(extrapolated.reshape(shape))
            work = where(mask, ctx.attr("extrapolation_value", 0.0), work)
    if not x.dtype.is_float:
        lo, hi = np.iinfo(dtypes.numpy(onnx_type)).min, np.iinfo(dtypes.numpy(onnx_type)).max
        work = work.round().clip(float(lo), float(hi)).cast(x.dtype)
    return [work]
