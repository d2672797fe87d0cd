"""Resampling along axes: the interpolation weights shared by ``F.interpolate`` / ``nn.Upsample`` and the ONNX
importer's Resize, and ``interpolate`` itself.

Resampling is separable: each resized axis is interpolated on its own. The coordinate mapping, the neighbour
indices and the weights depend only on the (static) sizes, so they are computed in numpy when the graph is built.
At run time an axis becomes one ``Gather`` of the neighbour rows (``index_select`` with a constant index) times a
constant weight table summed over the neighbours -- or, for nearest, the gather alone (exact).

PyTorch's modes in these terms: ``nearest`` is the asymmetric mapping ``floor(dst * in / out)``; ``nearest-exact``
is ``floor((dst + 0.5) * in / out)``; ``linear``/``bilinear``/``trilinear`` the half-pixel mapping (clamped at the
edges) or, with ``align_corners=True``, ``dst * (in - 1) / (out - 1)``; ``bicubic`` the same mappings with Keys'
cubic kernel ``a = -0.75`` and clamped neighbour reads; ``area`` is adaptive average pooling. ``antialias=True`` (bilinear, bicubic) widens the filter by the
downscaling factor and normalizes its taps, as ATen's ``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa``
(triangle filter; cubic filter with ``a = -0.5``). With
``scale_factor`` (and ``recompute_scale_factor`` not set) the mapping uses ``1 / scale_factor``, as PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import DType


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
        raise ValueError(f"Resize: unknown nearest_mode {mode!r}")
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
        raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")
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


def const_array(graph, arr: np.ndarray):
    """An import-time numpy array as a kept graph input holding it."""
    from ..dtype import as_dtype
    arr = np.ascontiguousarray(arr)
    return graph.tensor(arr.shape, as_dtype(arr.dtype.name), "const:resample").set(arr).keep()


def resample_axis(x, axis: int, idx: np.ndarray, coeffs: np.ndarray | None, const=None):
    """``x`` resampled along ``axis``: output position ``o`` is ``sum_n x[idx[o, n]] * coeffs[o, n]`` (one
    ``index_select`` and a weighted sum over the ``n`` neighbours), or the gather ``x[idx[o]]`` of a 1-D ``idx``
    when ``coeffs`` is None (nearest). ``const`` makes a tensor of a numpy array (default: a kept input)."""
    const = const or (lambda a: const_array(x.graph, a))
    if coeffs is None:
        return x.index_select(axis, const(np.asarray(idx, dtype=np.int64)))
    out_len, n = idx.shape
    g = x.index_select(axis, const(idx.reshape(-1).astype(np.int64)))
    g = g.split_dims(axis, n)                                      # (..., out, n, ...)
    shape = [1] * (x.ndim + 1)
    shape[axis], shape[axis + 1] = out_len, n
    w = const(coeffs.reshape(shape).astype(x.dtype.numpy))
    return (g * w).sum(axis + 1)


_TORCH_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False):
    """``torch.nn.functional.interpolate`` over the spatial dims of an ``(N, C, *spatial)`` tensor (see the
    module docstring for the modes). ``size`` or ``scale_factor`` (an int/float or one per spatial dim)."""
    if mode not in _TORCH_MODES:
        raise ValueError(f"interpolate: mode must be one of {', '.join(_TORCH_MODES)}, got {mode!r}")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError(f"interpolate: antialias=True is only for the 'bilinear' and 'bicubic' modes (as in "
                         f"PyTorch), not {mode!r}")
    if x.ndim < 3:
        raise ValueError(f"interpolate: expected an (N, C, *spatial) input with at least 3 dims, got {x.ndim}")
    n = x.ndim - 2
    needs = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode)
    if needs is not None and n != needs:
        raise ValueError(f"interpolate: mode {mode!r} needs a {needs + 2}-D input, got {x.ndim}-D")
    if align_corners is not None and mode in ("nearest", "nearest-exact", "area"):
        raise ValueError(f"interpolate: align_corners is only for the linear and cubic modes, not {mode!r}")
    align = bool(align_corners)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    in_sizes = []
    for d in x.dims[2:]:
        if not d.is_constant():
            raise ValueError(f"interpolate needs concrete spatial sizes, got {d}")
        in_sizes.append(d.to_int())

    def per_dim(v, what):
        vals = list(v) if isinstance(v, (list, tuple)) else [v] * n
        if len(vals) != n:
            raise ValueError(f"interpolate: {what} needs {n} values (one per spatial dim), got {v}")
        return vals

    if size is not None:
        outs = [int(s) for s in per_dim(size, "size")]
        scales = [None] * n
    else:
        factors = [float(s) for s in per_dim(scale_factor, "scale_factor")]
        if any(f <= 0 for f in factors):
            raise ValueError(f"interpolate: scale_factor must be positive, got {scale_factor}")
        outs = [int(math.floor(i * f)) for i, f in zip(in_sizes, factors)]
        scales = [None if recompute_scale_factor else f for f in factors]
    if any(o <= 0 for o in outs):
        raise ValueError(f"interpolate: output sizes must be positive, got {outs}")
    if mode == "area":
        from ..nn.pooling import _adaptive
        return _adaptive(x, n, outs, "mean", False, "interpolate")
    work = x if (x.dtype.is_float or mode.startswith("nearest")) else x.cast(DType.float32)
    op = np.float64 if work.dtype == DType.float64 else np.float32   # torch's opmath type for the coordinates
    for k in range(n):
        axis = 2 + k
        in_len, out_len = in_sizes[k], outs[k]
        if out_len == in_len and scales[k] is None:
            continue  # the identity mapping in every mode
        if antialias:
            idx, coeffs = torch_antialias_weights(mode, in_len, out_len, scales[k], align, op)
        else:
            idx, coeffs = torch_axis_weights(mode, in_len, out_len, scales[k], align, op)
        work = resample_axis(work, axis, idx, coeffs)
    return work


def _compute_scale(in_len, out_len, scale_factor, align, op):
    """PyTorch's ``area_pixel_compute_scale`` (in the opmath type ``op``)."""
    if align:
        return op(in_len - 1) / op(out_len - 1) if out_len > 1 else op(0)
    if scale_factor is not None and scale_factor > 0:
        return op(1.0 / scale_factor)
    return op(in_len) / op(out_len)


def torch_axis_weights(mode, in_len, out_len, scale_factor, align, op=np.float32):
    """(indices, weights or None) of one axis for PyTorch's ``interpolate`` mode, computed as ATen does (source
    coordinates in the opmath type ``op``: float32 for float32/float16 data)."""
    dst = np.arange(out_len).astype(op)
    if mode in ("nearest", "nearest-exact"):
        scale = op(1.0 / scale_factor) if scale_factor is not None else op(in_len) / op(out_len)
        src = np.floor(dst * scale) if mode == "nearest" else np.floor((dst + op(0.5)) * scale)
        return np.minimum(src.astype(np.int64), in_len - 1), None
    scale = _compute_scale(in_len, out_len, scale_factor, align, op)
    real = dst * scale if align else scale * (dst + op(0.5)) - op(0.5)
    if mode == "bicubic":
        i0 = np.minimum(np.floor(real).astype(np.int64), in_len - 1)            # guard_index_and_lambda
        t = np.clip(real - i0.astype(op), op(0), op(1)).astype(np.float64)
        a = -0.75

        def conv1(v):
            return ((a + 2) * v - (a + 3)) * v * v + 1

        def conv2(v):
            return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

        coeffs = np.stack([conv2(t + 1.0), conv1(t), conv1(1.0 - t), conv2(2.0 - t)], 1)
        idx = np.clip(i0[:, None] + np.arange(-1, 3)[None, :], 0, in_len - 1)
        return idx, coeffs
    if not align:
        real = np.maximum(real, op(0))
    i0 = np.minimum(real.astype(np.int64), in_len - 1)
    lam = np.clip(real - i0.astype(op), op(0), op(1)).astype(np.float64)
    i1 = np.minimum(i0 + 1, in_len - 1)
    return np.stack([i0, i1], 1), np.stack([1.0 - lam, lam], 1)


def torch_antialias_weights(mode, in_len, out_len, scale_factor, align, op=np.float32):
    """(indices, weights) of one axis for PyTorch's ``interpolate(..., antialias=True)`` (bilinear: a triangle
    filter; bicubic: Keys' cubic with ``a = -0.5``): the filter's support is widened by the downscaling factor,
    each output reads the input taps inside it and their weights are normalized to sum to 1, as ATen's
    anti-aliased kernels compute them (in the opmath type ``op``)."""
    scale = _compute_scale(in_len, out_len, scale_factor, align, op)
    interp = 2 if mode == "bilinear" else 4
    support = op(interp * 0.5) * scale if scale >= 1 else op(interp * 0.5)
    invscale = op(1) / scale if scale >= 1 else op(1)

    def tri(v):
        v = np.abs(v)
        return np.where(v < 1, 1 - v, 0)

    def cubic(v, a=-0.5):
        v = np.abs(v)
        return np.where(v < 1, ((a + 2) * v - (a + 3)) * v * v + 1,
                        np.where(v < 2, (((v - 5) * v + 8) * v - 4) * a, 0))

    filt = tri if mode == "bilinear" else cubic
    width = int(math.ceil(float(support))) * 2 + 1
    idx = np.zeros((out_len, width), np.int64)
    coeffs = np.zeros((out_len, width), np.float64)
    for i in range(out_len):
        center = scale * (op(i) + op(0.5))
        xmin = max(int(center - support + op(0.5)), 0)
        xsize = min(int(center + support + op(0.5)), in_len) - xmin
        j = np.arange(xsize)
        w = filt(((j + xmin).astype(op) - center + op(0.5)) * invscale).astype(op)
        total = w.sum(dtype=op)
        if total != 0:
            w = w / total
        idx[i, :xsize] = xmin + j
        idx[i, xsize:] = xmin
        coeffs[i, :xsize] = w
    return idx, coeffs
