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
from ...hl_ops.resample import _cubic, _linear, _nearest, axis_weights, resample_axis
from .. import dtypes
from ..errors import OnnxImportError
from ..registry import dim, is_symbolic, register
from ._common import axes_list


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
        try:
            idx, coeffs, extrapolated = axis_weights(fn, in_len, out_len, scale, ctm, axis_roi,
                                                     bool(ctx.attr("exclude_outside", 0)))
        except ValueError as e:
            raise OnnxImportError(str(e)) from None
        if mode == "nearest":
            src = idx[np.arange(out_len), np.argmax(coeffs, axis=1)]
            work = resample_axis(work, a, src, None, ctx.array)
        else:
            work = resample_axis(work, a, idx, coeffs, ctx.array)
        if extrapolated is not None and extrapolated.any():
            shape = [1] * work.ndim
            shape[a] = out_len
            mask = ctx.array(extrapolated.reshape(shape))
            work = where(mask, ctx.attr("extrapolation_value", 0.0), work)
    if not x.dtype.is_float:
        lo, hi = np.iinfo(dtypes.numpy(onnx_type)).min, np.iinfo(dtypes.numpy(onnx_type)).max
        work = work.round().clip(float(lo), float(hi)).cast(x.dtype)
    return [work]
